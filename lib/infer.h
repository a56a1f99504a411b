// Shape inference, the internal interface of lib/infer.c: used by
// tj_graph_append (same file), by lib/ir_verify.c to re-infer existing nodes,
// and by lib/graph.c to word builder errors like inference errors.

#ifndef TJ_LIB_INFER_H_
#define TJ_LIB_INFER_H_

#include "lib/ir.h"

// The result of inferring one node. |attrs| is normalized; |attrs.ints|
// points into |ints| (so do not copy the struct by value and keep using the
// copy's ints); |attrs.name| and |attrs.data| still point at the caller's
// memory, not the arena.
typedef struct tj_ir_inferred_t {
  tj_dtype_t dtype;
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
  tj_attrs_t attrs;
  int64_t ints[3 * TJ_MAX_RANK];
} tj_ir_inferred_t;

// What tj_ir_infer reads from a tj_node_desc_t besides |op| and operands:
//   dtype, rank, dims: INPUT, CONSTANT, FULL, IOTA (dtype and shape);
//                      CAST (dtype); RESHAPE, BROADCAST_TO (shape).
//   attrs.name (INPUT), attrs.data + borrowed (CONSTANT), attrs.value (FULL,
//   PAD, LAYER_NORM/RMS_NORM eps), attrs.axis (IOTA, CONCAT, GATHER,
//   SOFTMAX, LOG_SOFTMAX; ARGMAX when num_ints is 0), attrs.ints/num_ints
//   (reduction axes, ARGMAX's one axis, PERM, SLICE starts/stops/steps, PAD
//   low/high), attrs.keepdims, attrs.approximate.

// Infers node |index| from |desc|: checks operands (each < |index|),
// dtypes, shapes and attributes, and fills |out|.
//
// |existing| == false: |index| is graph->num_nodes, the node about to be
// appended; guards the node needs are added to the graph (the caller rolls
// graph->num_guards back if it then fails), and an INPUT's name must be new.
// |existing| == true: re-inference of node |index| for the verifier; nothing
// is added, and a guard the node needs must already be on the graph.
//
// Errors are INVALID_ARGUMENT / UNSUPPORTED / OUT_OF_MEMORY statuses worded
// "<op> (node %<index>): <problem>; operands <type>, <type>".
tj_status_t tj_ir_infer(tj_graph_t* graph, const tj_node_desc_t* desc,
                        uint32_t index, bool existing, tj_ir_inferred_t* out);

// A status worded like tj_ir_infer's errors for |desc| as the next node of
// |graph|: for checks the public builder makes before it has a desc to
// append (a negative axis count, a NULL array).
tj_status_t tj_ir_node_error(const tj_graph_t* graph,
                             const tj_node_desc_t* desc, tj_status_code_t code,
                             const char* format, ...) TJ_PRINTF_LIKE(4, 5);

#endif  // TJ_LIB_INFER_H_
