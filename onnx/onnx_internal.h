// The ONNX importer's internal interface (onnx/): the import state shared
// by the model walker (onnx_import.c) and the op converters (onnx_ops.c).
// Only onnx/ includes this header: it names protobuf-c's generated types.

#ifndef TJ_ONNX_ONNX_INTERNAL_H_
#define TJ_ONNX_ONNX_INTERNAL_H_

#include "lib/arena.h"
#include "lib/base.h"
#include "onnx.pb-c.h"

// The opsets of the default domain the importer maps (a model of older
// opset is imported when each of its ops is defined there as the
// converters expect: kSince in onnx_ops.c).
//
// Opsets 23 to 28 (onnx 1.18 to 1.23) changed the ops the converters map
// only by new element types (float4e2m1, float8e8m0, int2/uint2, bf16
// where it was missing) and new optional attributes (Cast's round_mode,
// Range's stash_type, SpaceToDepth's mode, QuantizeLinear's precision):
// a converter refuses a dtype or an attribute it does not know, so those
// models get an error naming it rather than a wrong graph (SpaceToDepth's
// mode, DCR or CRD, is mapped since). Checked against
// onnx 1.23's schemas (get_schema at 22 and 28 for every converted op); a
// new opset needs the same check before it is added here.
#define TJ_ONNX_MIN_OPSET 11
#define TJ_ONNX_OLDEST_OPSET 1
#define TJ_ONNX_MAX_OPSET 28
// Known values (constants, folded shape computations) of at most this many
// elements are folded on the reference interpreter when every input of a
// node is known.
#define TJ_ONNX_FOLD_LIMIT 65536
// Loop and Scan bodies are unrolled: at most this many body node copies
// per outermost control-flow node (nested loops multiply), e.g. 1024
// iterations of a 64-node body. The IR has no run-time loop to fall back on.
#define TJ_ONNX_UNROLL_LIMIT 65536

// One ONNX value (a tensor name in the current scope).
typedef struct tj_onnx_val_t {
  const char* name;  // the key; in the arena or the model
  tj_dtype_t dtype;
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
  // The graph value (none until a known value is first used as a tensor).
  tj_value_t value;
  // Known contents, dense row-major in |dtype| (NULL when not known).
  // |symbolic|: an i64 shape vector some of whose entries are symbolic
  // dims (tj_graph_symbol encodings), usable only as a shape.
  const void* data;
  bool symbolic;
  // An empty optional (Optional with no input): no tensor at all. Only the
  // Optional ops and Identity take one (tj_onnx_convert_node).
  bool none;
  // A sequence (onnx_sequence.c): |seq_length| tensor values |seq| (in the
  // arena) of element dtype |dtype|; no graph value of its own.
  bool is_sequence;
  int32_t seq_length;
  struct tj_onnx_val_t* const* seq;
} tj_onnx_val_t;

typedef struct tj_onnx_importer_t {
  tj_context_t* context;
  tj_allocator_t allocator;
  tj_arena_t arena;
  tj_graph_t* main_graph;
  tj_graph_t* graph;  // main_graph, or the scratch graph of a fold
  const Onnx__ModelProto* model;
  int64_t opset;  // the default domain's opset in the current scope
  const char* base_dir;
  const tj_onnx_symbol_override_t* overrides;
  int32_t num_overrides;
  const tj_onnx_input_value_t* input_values;
  int32_t num_input_values;
  // Values by name: |vals| with an open-addressing index (slot = index+1).
  // Each value lives in the arena, so a pointer tj_onnx_lookup returns
  // stays valid while later values are defined: converters and the fold
  // hold their inputs' pointers across the definition of their outputs
  // (values held in the growing array itself moved under them).
  tj_onnx_val_t** vals;
  uint32_t num_vals, val_capacity;
  uint32_t* index;
  uint32_t index_capacity;
  uint32_t function_depth, function_counter;
  uint32_t name_counter;
  // Subgraph scopes: the values defined since |scope_base| belong to the
  // innermost scope; an outer value a scope redefines is saved in |undo|
  // first, so popping the scope restores it.
  uint32_t scope_depth, scope_base;
  struct tj_onnx_undo_t* undo;
  uint32_t num_undo, undo_capacity;
  // Body node copies made by the unrolling of the outermost control-flow
  // node being converted (TJ_ONNX_UNROLL_LIMIT).
  int64_t unrolled_nodes;
} tj_onnx_importer_t;

// A node being converted: its inputs resolved (NULL for an absent optional
// one), its outputs' names.
typedef struct tj_onnx_node_t {
  const Onnx__NodeProto* proto;
  int32_t index;
  int32_t num_inputs;
  tj_onnx_val_t* inputs[32];
} tj_onnx_node_t;

// The value named |name| in the current scope, or NULL.
tj_onnx_val_t* tj_onnx_lookup(tj_onnx_importer_t* im, const char* name);
// Defines |name| (replacing an earlier definition of it).
tj_status_t tj_onnx_define(tj_onnx_importer_t* im, const char* name,
                           const tj_onnx_val_t* val);

// The error prefix of |node|: "node 3 \"name\" (Reshape, opset 13)".
tj_status_t tj_onnx_node_error(const tj_onnx_importer_t* im,
                               const tj_onnx_node_t* node,
                               tj_status_code_t code, const char* format, ...)
    TJ_PRINTF_LIKE(4, 5);

// ONNX elem_type -> dtype; false for one the library has no dtype for.
bool tj_onnx_dtype(int32_t elem_type, tj_dtype_t* out_dtype);
// A static name for an ONNX elem_type ("uint8").
const char* tj_onnx_type_name(int32_t elem_type);

// Decodes |tensor|'s contents (raw_data, a typed field or external data
// under |im|->base_dir) into |*out| (data in the arena, or borrowed from
// the message). |what| names the tensor in errors.
tj_status_t tj_onnx_tensor_value(tj_onnx_importer_t* im,
                                 const Onnx__TensorProto* tensor,
                                 const char* what, tj_onnx_val_t* out);

// The graph value of |val| in the current graph (a known value becomes a
// constant on first use); none after an error.
tj_value_t tj_onnx_value(tj_onnx_importer_t* im, tj_onnx_val_t* val);

// A subgraph's scope: what tj_onnx_scope_pop needs to forget it.
typedef struct tj_onnx_scope_t {
  uint32_t num_vals, num_undo, base;
} tj_onnx_scope_t;

// Opens a scope: names defined until the matching tj_onnx_scope_pop are
// forgotten then, and outer values they redefine come back. Scopes nest.
void tj_onnx_scope_push(tj_onnx_importer_t* im, tj_onnx_scope_t* out_scope);
void tj_onnx_scope_pop(tj_onnx_importer_t* im, const tj_onnx_scope_t* scope);

// Converts |n| nodes in order (a graph's or a subgraph's), numbering them
// from *|counter| in errors; folds nodes whose inputs are all known.
tj_status_t tj_onnx_walk_nodes(tj_onnx_importer_t* im,
                               Onnx__NodeProto* const* nodes, size_t n,
                               int32_t* counter);

// Converts one node of the default domain: defines its outputs.
tj_status_t tj_onnx_convert_node(tj_onnx_importer_t* im, tj_onnx_node_t* node);
// True if |op_type| is an op the converters may fold on known inputs.
bool tj_onnx_op_known(const char* op_type);

// Control flow (onnx_control.c): If, Loop and Scan, their subgraphs
// imported inline (the taken branch, or both and a select; loops unrolled).
// True for those ops: they are never folded as one node (their bodies'
// nodes fold one by one).
bool tj_onnx_is_control(const char* op_type);
tj_status_t tj_onnx_convert_if(tj_onnx_importer_t* im, tj_onnx_node_t* node);
tj_status_t tj_onnx_convert_loop(tj_onnx_importer_t* im, tj_onnx_node_t* node);
tj_status_t tj_onnx_convert_scan(tj_onnx_importer_t* im, tj_onnx_node_t* node);

// Shape vectors with symbolic dims (onnx_dims.c): Add, Sub, Mul or Div
// (|op| one of "+-*/") of known int64 inputs folded over the dims, and a
// Range whose known int64 scalars hold a symbolic dim (true from
// tj_onnx_range_of_dims) as iota * delta + start of a symbolic length.
tj_status_t tj_onnx_convert_dim_arith(tj_onnx_importer_t* im,
                                      tj_onnx_node_t* node, char op);
bool tj_onnx_range_of_dims(const tj_onnx_node_t* node);
// Equal and Where of known int64 vectors with symbolic dims (the exporters'
// expand(-1) pattern, Where(Equal(shape, -1), ones, shape)): decided at
// import where the dims decide it (a dim is never -1; T equals T), else an
// error naming the node.
tj_status_t tj_onnx_convert_dim_equal(tj_onnx_importer_t* im,
                                      tj_onnx_node_t* node);
tj_status_t tj_onnx_convert_dim_where(tj_onnx_importer_t* im,
                                      tj_onnx_node_t* node);
// The dim |d| (constant or symbolic) as an i64 scalar value of |graph|: a
// symbolic one is the sum of |d| ones, computed by the run that binds it.
tj_value_t tj_onnx_dim_value(tj_graph_t* graph, int64_t d);
// *|y| sliced along |axis| from |start| to |end| (step 1), dims of which
// one at least is symbolic: a gather of iota + start, of length end -
// start (no dim for every value of the symbols is an error). Indices
// within the axis, as models write them (a position table of maxpos rows
// sliced to P + T); one past it reads the axis's last element (gather's
// clamp) where ONNX would shorten the slice.
tj_status_t tj_onnx_slice_dims(tj_onnx_importer_t* im, tj_onnx_node_t* node,
                               tj_value_t* y, int32_t axis, int64_t start,
                               int64_t end);
tj_status_t tj_onnx_convert_range_of_dims(tj_onnx_importer_t* im,
                                          tj_onnx_node_t* node);

// The ai.onnx.preview.training domain (onnx_training.c): its optimizer
// ops (Adagrad, Adam, Momentum) as pointwise ops.
bool tj_onnx_is_training(const char* domain);
tj_status_t tj_onnx_convert_training(tj_onnx_importer_t* im,
                                     tj_onnx_node_t* node);

// Sequences (onnx_sequence.c), resolved at import into lists of tensor
// values: SequenceEmpty/Construct/Insert/Erase/At/Length, SplitToSequence
// and ConcatFromSequence.
bool tj_onnx_is_sequence_op(const char* op_type);
tj_status_t tj_onnx_convert_sequence(tj_onnx_importer_t* im,
                                     tj_onnx_node_t* node);

#endif  // TJ_ONNX_ONNX_INTERNAL_H_
