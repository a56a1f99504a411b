// The typed SSA IR: a graph is a dense array of nodes in topological order;
// each node produces one value whose id (public tj_value_t.id) is its index
// plus one. Operands are node indices. Node payloads (dims, attribute
// arrays, names, copied constants) live in the graph's arena.

#ifndef TJ_LIB_IR_H_
#define TJ_LIB_IR_H_

#include <stdatomic.h>

#include "lib/arena.h"
#include "lib/base.h"
#include "lib/shape.h"

//===--- the op table ---===//

typedef enum tj_op_e {
#define TJ_OP(name, text, arity, kind, attrs, dtypes, pattern, form, builder, \
              flags)                                                          \
  TJ_OP_##name,
#include "lib/ops.def"
#undef TJ_OP
  TJ_OP_COUNT_,
} tj_op_t;

typedef enum tj_op_kind_e {
  TJ_OP_KIND_LEAF,
  TJ_OP_KIND_UNARY,
  TJ_OP_KIND_BINARY,
  TJ_OP_KIND_TERNARY,
  TJ_OP_KIND_REDUCTION,
  TJ_OP_KIND_CONTRACTION,
  TJ_OP_KIND_MOVEMENT,
  TJ_OP_KIND_COMPOSITE,
  TJ_OP_KIND_CUSTOM,  // a registered custom op (lib/custom_op.h)
} tj_op_kind_t;

// How an op's attributes are spelled in .tj text and which tj_attrs_t
// fields they use.
typedef enum tj_attr_kind_e {
  TJ_ATTR_KIND_NONE,    // none
  TJ_ATTR_KIND_NAME,    // input: name (the signature carries it)
  TJ_ATTR_KIND_DATA,    // constant: data (+ borrowed)
  TJ_ATTR_KIND_VALUE,   // full: value
  TJ_ATTR_KIND_AXIS,    // axis
  TJ_ATTR_KIND_AXES,    // ints = sorted normalized axes, keepdims
                        // (reduce-all is stored as every axis listed)
  TJ_ATTR_KIND_PERM,    // ints = permutation (rank entries)
  TJ_ATTR_KIND_SLICE,   // ints = starts[rank], stops[rank], steps[rank]
                        // (clamped into [0, dim]; a symbolic axis is
                        // whole: 0, INT64_MAX, 1)
  TJ_ATTR_KIND_PAD,     // ints = low[rank], high[rank]; value
  TJ_ATTR_KIND_APPROX,  // approximate
  TJ_ATTR_KIND_EPS,     // value = eps
  TJ_ATTR_KIND_CUSTOM,  // name = op, axis = version, ints = [n, n ints,
                        // float bit patterns] (lib/custom_op.h)
  TJ_ATTR_KIND_WINDOW,  // conv and pools: ints = groups, flags, then kernel,
                        // strides, dilations, low, high, output_padding
                        // (n spatial axes each); value = p (lib/window.h)
  // attention (issue 14): value = scale (resolved, never 0), ints = [causal]
  TJ_ATTR_KIND_ATTENTION,
  // quantize, dequantize (issue 17): axis, ints = lib/quant.h's TJ_QUANT_*
  TJ_ATTR_KIND_QUANT,
  // cumsum, cumprod (ops3, issue 15): axis; ints = [exclusive, reverse]
  TJ_ATTR_KIND_SCAN,
  // scatter_elements, scatter_nd (issue 15): axis; ints = [reduction]
  TJ_ATTR_KIND_SCATTER,
  // argtopk (topk, issue 15): axis; ints = [k (-1: whole axis), largest]
  TJ_ATTR_KIND_TOPK,
} tj_attr_kind_t;

// The dtypes an op's (main) operands may have.
typedef enum tj_op_dtypes_e {
  TJ_OP_DTYPES_ANY,
  TJ_OP_DTYPES_NUMERIC,  // everything but bool
  TJ_OP_DTYPES_FLOAT,
  TJ_OP_DTYPES_BOOL,
  TJ_OP_DTYPES_INT,  // integers only (opsmisc: bitwise ops and shifts)
} tj_op_dtypes_t;

// How an op's loops compose with its neighbours' (see lib/ops.def).
typedef enum tj_op_pattern_e {
  TJ_OP_PATTERN_EXTERNAL,     // input, constant: already in memory
  TJ_OP_PATTERN_GENERATOR,    // computed from the index alone
  TJ_OP_PATTERN_ELEMENTWISE,  // y[i] = f(operands[i])
  TJ_OP_PATTERN_INJECTIVE,    // each y[i] is one operand element or a fill
  TJ_OP_PATTERN_REDUCE,       // folds axes with an identity and a combine
  TJ_OP_PATTERN_CONTRACTION,  // matmul and what decomposes to it
  TJ_OP_PATTERN_OPAQUE,       // none of these (gather, argmax)
} tj_op_pattern_t;

// Op properties, or-ed in tj_op_info_t.flags; see lib/ops.def.
typedef enum tj_op_flag_e {
  TJ_OPF_EXPENSIVE = 1u << 0,
  TJ_OPF_TRANSCENDENTAL = 1u << 1,
  TJ_OPF_BOOL_RESULT = 1u << 2,
  TJ_OPF_TYPED = 1u << 3,
  TJ_OPF_MEMORY_OPERANDS = 1u << 4,
} tj_op_flag_t;

typedef struct tj_op_info_t {
  const char* name;  // .tj spelling
  int32_t arity;     // -1 variadic
  tj_op_kind_t kind;
  tj_attr_kind_t attr_kind;
  tj_op_dtypes_t dtypes;
  tj_op_pattern_t pattern;
  tj_op_form_t form;    // the public builder's signature
  const char* builder;  // tj_graph_<builder>
  uint32_t flags;       // tj_op_flag_t
} tj_op_info_t;

extern const tj_op_info_t tj_op_infos[TJ_OP_COUNT_];

static inline const tj_op_info_t* tj_op_info(tj_op_t op) {
  return &tj_op_infos[op];
}
// Whether |op| has every property in |flags| (tj_op_flag_t).
static inline bool tj_op_has(tj_op_t op, uint32_t flags) {
  return (tj_op_infos[op].flags & flags) == flags;
}
// The op spelled |name|; false if none.
bool tj_op_from_name(const char* name, size_t length, tj_op_t* out_op);

//===--- nodes ---===//

// An absent optional operand (layer_norm without gamma, linear without b).
#define TJ_NODE_NONE UINT32_MAX

// Attributes; which fields an op uses is given by its tj_attr_kind_t.
typedef struct tj_attrs_t {
  int64_t* ints;  // arena
  uint32_t num_ints;
  int64_t axis;  // normalized (>= 0)
  bool keepdims;
  bool approximate;
  bool borrowed;     // constant data is the caller's, not the arena's
  double value;      // full / pad value, eps
  const char* name;  // input name (arena)
  const void* data;  // constant bytes, row-major, dense
} tj_attrs_t;

typedef struct tj_node_t {
  tj_op_t op;
  tj_dtype_t dtype;
  int32_t rank;
  uint32_t num_operands;
  uint32_t* operands;  // arena; TJ_NODE_NONE for absent optional operands
  int64_t* dims;       // arena; |rank| dims (constants or symbolic)
  tj_attrs_t attrs;
} tj_node_t;

typedef struct tj_output_t {
  uint32_t node;
  const char* name;  // arena
} tj_output_t;

// a == b must hold at run time (recorded when shape inference could not
// decide it, e.g. broadcasting symbol B against symbol C).
typedef struct tj_guard_t {
  int64_t a, b;
  uint32_t node;  // the node whose inference recorded it
} tj_guard_t;

struct tj_graph_t {
  tj_context_t* context;
  tj_allocator_t allocator;
  tj_arena_t arena;
  const char* name;  // arena
  tj_node_t* nodes;
  uint32_t num_nodes, node_capacity;
  uint32_t* inputs;  // node indices of the INPUT nodes, in order
  uint32_t num_inputs, input_capacity;
  tj_output_t* outputs;
  uint32_t num_outputs, output_capacity;
  tj_guard_t* guards;
  uint32_t num_guards, guard_capacity;
  tj_dimtab_t dims;
  tj_status_t error;  // first recorded error (sticky); owned
  bool finalized;
  // The structural key of this (finalized, so immutable) graph, computed
  // by the compile memo (backends/compile_memo.c) at its first compile
  // and kept for the next: 0 not yet, 1 |memo_key| holds it, 2 the graph
  // is not memoized. Atomic: a finalized graph may be compiled from
  // several threads at once.
  atomic_int memo_state;
  _Atomic(uint64_t) memo_key[2];
};

// Whether node |lse| of |g| is attention_lse of attention |att|'s own
// scores: the same q, k and mask nodes (or neither with a mask), scale and
// causal flag (lsefwd). The forward's loop then ends holding its value
// (the row's m and l), so one kernel may write both (fuse) and a
// partition may save it from the forward (tj_partition_options_t).
static inline bool tj_attention_lse_of(const tj_graph_t* g, uint32_t att,
                                       uint32_t lse) {
  const tj_node_t* a = &g->nodes[att];
  const tj_node_t* l = &g->nodes[lse];
  if (a->op != TJ_OP_ATTENTION || l->op != TJ_OP_ATTENTION_LSE) return false;
  const uint32_t am = a->num_operands > 3 ? a->operands[3] : TJ_NODE_NONE;
  const uint32_t lm = l->num_operands > 2 ? l->operands[2] : TJ_NODE_NONE;
  const bool a_causal = a->attrs.num_ints && a->attrs.ints[0];
  const bool l_causal = l->attrs.num_ints && l->attrs.ints[0];
  return a->operands[0] == l->operands[0] && a->operands[1] == l->operands[1] &&
         am == lm && a->attrs.value == l->attrs.value && a_causal == l_causal;
}

//===--- internal builder ---===//

// Everything a node is built from, before inference. The generic entry
// point used by the public builder, the parser and (later) the passes.
typedef struct tj_node_desc_t {
  tj_op_t op;
  uint32_t num_operands;
  const uint32_t* operands;  // node indices or TJ_NODE_NONE
  // For ops whose result type is not implied by the operands (leaves, cast,
  // reshape, broadcast_to): the requested dtype and shape. reshape may use
  // TJ_DIM_INFER once.
  tj_dtype_t dtype;
  int32_t rank;
  const int64_t* dims;
  // Raw attributes as the caller gave them (axes may be negative and
  // unsorted; slice bounds unnormalized); inference normalizes them.
  tj_attrs_t attrs;
  // CONSTANT from the public builder: the caller's byte count for
  // attrs.data, which must equal the constant's byte size. Internal callers
  // leave has_data_bytes false (their data is sized by construction).
  bool has_data_bytes;
  size_t data_bytes;
} tj_node_desc_t;

// Infers the result type of |desc|, normalizes its attributes, copies its
// payloads into the arena and appends the node. On failure returns an
// INVALID_ARGUMENT / UNSUPPORTED / OUT_OF_MEMORY status naming the op, the
// node number it would have had and the operand shapes; the graph is
// unchanged (nothing appended, except that new dim expressions may remain in
// the table). Does NOT record the error on the graph: the public builder
// does that (tj_graph_record_error).
tj_status_t tj_graph_append(tj_graph_t* graph, const tj_node_desc_t* desc,
                            uint32_t* out_node);

// Records |status| as the graph's sticky error if it has none (consuming
// it); otherwise frees it.
void tj_graph_record_error(tj_graph_t* graph, tj_status_t status);

// Appends an output (name copied). Fails on duplicate names.
tj_status_t tj_graph_append_output(tj_graph_t* graph, uint32_t node,
                                   const char* name);

// Records a run-time guard a == b.
tj_status_t tj_graph_add_guard(tj_graph_t* graph, int64_t a, int64_t b,
                               uint32_t node);

// Checks every invariant of a graph: operand indices precede their users,
// types agree with inference, attributes are normalized, outputs exist.
// Returns INTERNAL for a malformed graph built by a pass.
tj_status_t tj_ir_verify(const tj_graph_t* graph);

// Formats node |index|'s type, e.g. "f32[B,4096]", into |buf|.
int tj_ir_format_type(const tj_graph_t* graph, uint32_t index, char* buf,
                      size_t size);

// Number of elements/bytes of a node's result as a dim (maybe symbolic).
tj_status_t tj_ir_node_numel(tj_graph_t* graph, uint32_t index,
                             int64_t* out_numel);

// Binds symbol values from concrete input tensors (see tj_graph_output_shape)
// into |symbol_values| (TJ_MAX_SYMBOLS entries, -1 = unbound) and checks
// inputs and guards. A value symbol (a range's length) is computed from
// the inputs' data.
tj_status_t tj_ir_bind_symbols(const tj_graph_t* graph,
                               const tj_tensor_t* inputs, int32_t num_inputs,
                               int64_t* symbol_values);
// tj_ir_bind_symbols from the inputs' dtypes and shapes alone (their data
// is not read): value symbols bind to 0 (tj_executable_prepare).
tj_status_t tj_ir_bind_shapes(const tj_graph_t* graph,
                              const tj_tensor_t* inputs, int32_t num_inputs,
                              int64_t* symbol_values);
// The concrete shape of node |index| under |symbol_values|.
tj_status_t tj_ir_concrete_dims(const tj_graph_t* graph, uint32_t index,
                                const int64_t* symbol_values,
                                int64_t* out_dims);

// Checks where a caller tensor lives: the device type is CPU, or CUDA where
// |allow_cuda|; a CPU tensor's device_id is 0, as DLPack defines it, and a
// CUDA tensor's is not negative. INVALID_ARGUMENT naming |role| ("input",
// "output") and |name|.
tj_status_t tj_ir_check_device(const tj_tensor_t* t, const char* role,
                               const char* name, bool allow_cuda);

// Checks the memory of a run's caller tensors, once their dtypes, ranks and
// shapes are checked (tj_ir_bind_symbols and the outputs' shapes): no NULL
// data where there are elements, no pointer arithmetic that wraps
// (data + byte_offset + the strides' reach), no output whose strides make
// two of its elements share memory, and no output whose bytes overlap those
// of an input or of another output (tensors on one device). INVALID_ARGUMENT
// naming the tensor(s). Every target calls it; cost O(rank) per tensor plus
// O(outputs x (inputs + outputs)).
tj_status_t tj_ir_check_run_memory(const tj_graph_t* graph,
                                   const tj_tensor_t* inputs,
                                   const tj_tensor_t* outputs);

// Element-count limit for any one tensor: byte sizes must fit in int64.
#define TJ_MAX_TENSOR_BYTES ((int64_t)1 << 48)

// The dtype of attention's row log-sum-exp and of the backward's delta
// (issue 14, fabwd): f32 for f16/bf16 q, whose rows sum in f32, else q's.
static inline tj_dtype_t tj_attention_lse_dtype(tj_dtype_t q) {
  return q == TJ_DTYPE_F16 || q == TJ_DTYPE_BF16 ? TJ_DTYPE_F32 : q;
}

// layer_norm centres on m = s + mean(x - s), with s a value of each row:
// its first element where the last axis is a constant >= 1 long, else the
// row's max (a row of symbolic length may be empty; a slice of it could not
// be shaped), then subtracts mean(x - m) once more (the corrected two-pass
// form). x - s is exact for values within a factor 2 of s, so a row far
// from 0 against its spread keeps its accuracy, and a row of equal values
// centres to exact zeros. The decomposition (lib/passes/decompose.c) and
// the reference use the same s, so that their exact zeros carry the same
// signs.
static inline bool tj_layer_norm_shifts_by_first(int32_t rank,
                                                 const int64_t* dims) {
  return tj_dim_is_const(dims[rank - 1]) && dims[rank - 1] >= 1;
}

#endif  // TJ_LIB_IR_H_
