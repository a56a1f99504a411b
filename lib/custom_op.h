// Custom ops (include/tensorjit/tj_custom_op.h), the part below every
// backend: the per-context registry, the signature strings, shape inference
// through the registered shape function, and the call of a host
// implementation over tensor descriptors. lib/ sees no libffi: a signature
// op's call goes through |call|, which backends/runtime/custom_call.c
// (tj_context_register_op) installs with its prepared call interface.
//
// A CUSTOM node keeps: attrs.name = the op's name, attrs.axis = its
// version, attrs.ints = [n, n int attributes, the float attributes' bit
// patterns] (so CSE compares them exactly and the text form prints them).

#ifndef TJ_LIB_CUSTOM_OP_H_
#define TJ_LIB_CUSTOM_OP_H_

#include "lib/ir.h"
#include "tensorjit/tj_custom_op.h"

// One argument of a signature string.
typedef enum tj_custom_arg_kind_e {
  TJ_CUSTOM_ARG_OUTPUT,  // T*
  TJ_CUSTOM_ARG_INPUT,   // const T*
  TJ_CUSTOM_ARG_I64,     // a dim or an int attribute (bound per node)
  TJ_CUSTOM_ARG_F32,     // a float attribute as float
  TJ_CUSTOM_ARG_F64,     // a float attribute as double
} tj_custom_arg_kind_t;

typedef struct tj_custom_sig_t {
  bool returns_i32;  // else void
  int32_t num_args;
  uint8_t kinds[TJ_CUSTOM_MAX_ARGS];      // tj_custom_arg_kind_t
  tj_dtype_t dtypes[TJ_CUSTOM_MAX_ARGS];  // pointers' element type
  int32_t num_input_pointers;             // const T*
  int32_t num_output_pointers;            // T*
} tj_custom_sig_t;

typedef struct tj_custom_op_t tj_custom_op_t;

// Calls |op|'s C function with |values| (one pointer per signature
// argument, to a value of its C type), the i32 result (if any) in
// |*result|. Installed by the layer that prepared the call.
typedef void (*tj_custom_call_fn)(const tj_custom_op_t* op, void** values,
                                  int64_t* result);

struct tj_custom_op_t {
  char* name;
  int32_t version;
  int32_t num_inputs;
  uint32_t flags;
  tj_custom_shape_fn shape;
  tj_custom_host_fn host;
  tj_custom_vjp_fn vjp;
  void* user_data;
  void (*function)(void);
  char* signature;  // NULL for a generic host op
  tj_custom_sig_t sig;
  tj_custom_call_fn call;
  void* call_state;  // the caller's, freed with |free_state|
  void (*free_state)(tj_allocator_t allocator, void* state);
  // The CUDA implementation (tj_custom_op_desc_t.cuda_ptx), or NULL.
  char* cuda_ptx;
  char* cuda_entry;
  tj_custom_launch_fn cuda_launch;
};

// Whether a signature op's calls skip ffi_call (the x86-64 register call of
// backends/runtime/custom_call.c), for tests and benchmarks.
bool tj_custom_call_is_direct(const tj_custom_op_t* op);
// Registers |desc| (checked, its CUDA code as PTX): prepares a signature
// op's call and adds the op (backends/runtime/custom_call.c). The public
// tj_context_register_op (backends/target_entry.c) compiles a
// cuda_llvm_ir to PTX first.
tj_status_t tj_custom_op_register(tj_context_t* context,
                                  const tj_custom_op_desc_t* desc);

// Parses |text| into |*out|. INVALID_ARGUMENT "signature \"...\": argument
// N: expected ..., got ..." (or "at offset N") for anything malformed.
tj_status_t tj_custom_sig_parse(const char* text, tj_custom_sig_t* out);

// Checks |desc| and adds a copy to |context|'s registry, with |call| and
// |state| for a signature op (|state| is freed with |free_state| on every
// failure path and with the context). |sig| is the parsed signature (NULL
// for a generic host op).
tj_status_t tj_custom_op_add(tj_context_t* context,
                             const tj_custom_op_desc_t* desc,
                             const tj_custom_sig_t* sig, tj_custom_call_fn call,
                             void* state,
                             void (*free_state)(tj_allocator_t, void*));

// |d|'s cuda_llvm_ir, or NULL when |d| is from before it (struct_size).
const char* tj_custom_op_desc_llvm_ir(const tj_custom_op_desc_t* d);

// Checks the fields of |desc| (before anything is prepared).
tj_status_t tj_custom_op_check_desc(const tj_custom_op_desc_t* desc);

// The op registered in |context| as |name| (|length| bytes) and |version|
// (0: the highest). NULL when there is none (or the registry cannot be
// created). The op lives as long as the context.
const tj_custom_op_t* tj_custom_op_find(tj_context_t* context, const char* name,
                                        size_t length, int32_t version);

// The library's own op |name| (|length| bytes) at |version| (0: any), or
// NULL: the data-dependent ops of lib/dd_ops.c (tj_nonzero, tj_unique,
// tj_nms), found before a context's own and never registered by a host.
const tj_custom_op_t* tj_dd_builtin_find(const char* name, size_t length,
                                         int32_t version);

// The op of CUSTOM node |node| of |graph|; NULL if not registered.
const tj_custom_op_t* tj_custom_op_of(const tj_graph_t* graph,
                                      const tj_node_t* node);

// The attributes of a CUSTOM node, the floats decoded into |floats|
// (TJ_CUSTOM_MAX_ATTRS entries).
void tj_custom_attrs_of(const tj_attrs_t* attrs, tj_custom_attrs_t* out,
                        double* floats);

// Inference of a CUSTOM node (lib/infer.c): resolves the op, calls its
// shape function over the operands' types and checks its signature against
// them. Fills |out_*|; |out_ints| (3 * TJ_MAX_RANK entries) receives the
// encoded attributes. A plain status (the caller words it as the node's).
tj_status_t tj_custom_infer(tj_graph_t* graph, const tj_node_desc_t* desc,
                            tj_dtype_t* out_dtype, int32_t* out_rank,
                            int64_t* out_dims, int64_t* out_ints,
                            uint32_t* out_num_ints, int64_t* out_version);

// Runs |op| on CPU tensors: |inputs| dense row-major for a signature op,
// |output| dense row-major. Errors name the op.
tj_status_t tj_custom_op_invoke(const tj_custom_op_t* op,
                                const tj_tensor_t* inputs, int32_t num_inputs,
                                const tj_custom_attrs_t* attrs,
                                const tj_tensor_t* output);

// Whether node |node| may be merged with an equal one or dropped unused.
bool tj_custom_node_is_pure(const tj_graph_t* graph, const tj_node_t* node);

// Data-dependent output dims (tj_custom_dynamic_dim): whether |graph| has
// a data-dependent symbol.
bool tj_custom_graph_is_dynamic(const tj_graph_t* graph);

// Binds every data-dependent symbol of |graph| to its upper bound, once the
// symbols of the inputs are in |sym| (tj_ir_bind_symbols).
tj_status_t tj_custom_bind_dynamic(const tj_graph_t* graph, int64_t* sym);

// After custom node |index| ran with output shape |bound| (the node's dims
// under |sym|) and reported |actual| (tj_custom_set_output_shape): checks
// that only its data-dependent dims changed, each within its bound, and
// sets those symbols in |sym| for the nodes after it.
tj_status_t tj_custom_bind_result(const tj_graph_t* graph, uint32_t index,
                                  const int64_t* bound, const int64_t* actual,
                                  int64_t* sym);

// Value symbols (range with run-time inputs): the dim of symbol |name| of
// |graph|, marked as a length that tj_dd_bind_values computes from scalar
// inputs before each run; an input may not bind it. Records the error on
// |graph| and returns TJ_DIM_INVALID on failure.
int64_t tj_custom_value_dim(tj_graph_t* graph, const char* name);

// Binds the value symbols of |graph| (lib/dd_ops.c): each range node's
// length from its start, limit and delta, read from |inputs| (CPU tensors,
// already checked against the graph) or constants, into |sym|. Without
// |read| (tj_executable_prepare: no data yet) each binds to 0.
tj_status_t tj_dd_bind_values(const tj_graph_t* graph,
                              const tj_tensor_t* inputs, bool read,
                              int64_t* sym);

// Whether graph output |i|'s shape depends on a data-dependent symbol.
bool tj_custom_output_is_dynamic(const tj_graph_t* graph, uint32_t i);

// The run-time check of graph outputs with data-dependent dims: without
// |shaped| (a plain tj_executable_run or tj_reference_run, which cannot say
// the actual shape) INVALID_ARGUMENT naming the output; with it each such
// output of |outputs| must be dense row-major (its data is written in the
// actual shape, from the start of the bound's buffer).
tj_status_t tj_custom_check_outputs(const tj_graph_t* graph,
                                    const tj_tensor_t* outputs, bool shaped);

// At the end of a run under tj_*_run_shaped: writes the actual dims (under
// the run's final |sym|) of each output with data-dependent dims into
// |outputs|' shape arrays, which the driver made its own.
tj_status_t tj_custom_write_output_shapes(const tj_graph_t* graph,
                                          const int64_t* sym,
                                          const tj_tensor_t* outputs);

#endif  // TJ_LIB_CUSTOM_OP_H_
