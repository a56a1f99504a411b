// libtensorjit: custom ops kept in the graph. Include <tensorjit.h> rather
// than this file directly.
//
// A host with an op the library does not have (a top-k, a sampler, its own
// fused attention) registers it once per context with a shape function and
// a host implementation, then puts it in graphs with tj_graph_custom. The
// op stays in the graph as one opaque node: shape inference, memory
// planning and the text form go through it, fusion stops at it (the regions
// on both sides stay fused and compiled), and a compiled executable calls
// the implementation between its kernels (a "host call", counted apart from
// graph breaks in tj_executable_stats_t). The reference interpreter calls
// the same implementation, so compiled results are checked against it.
//
// One custom node has one output (the IR has one value per node); an op
// with several results is registered as several ops, or returns them
// concatenated.
//
// Example: y = x * a + b elementwise, as a plain C function.
//
//   static void axpb(float* y, int64_t n, const float* x, int64_t m,
//                    float a, float b) {
//     for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a + b;
//   }
//   static tj_status_t same_type(void* user, tj_graph_t* g,
//                                const tj_custom_type_t* in, int32_t n,
//                                const tj_custom_attrs_t* attrs,
//                                tj_custom_type_t* out) {
//     *out = in[0];  // symbolic dims flow through unchanged
//     return NULL;
//   }
//   tj_custom_op_desc_t d = {.struct_size = sizeof(d)};
//   d.name = "axpb";
//   d.version = 1;
//   d.num_inputs = 1;
//   d.shape = same_type;
//   d.function = (void (*)(void))axpb;
//   d.signature = "void(f32*, i64, const f32*, i64, f32, f32)";
//   d.flags = TJ_CUSTOM_OP_PURE;
//   st = tj_context_register_op(ctx, &d);
//   ...
//   tj_custom_attrs_t at = {0, NULL, 2, (double[]){2.0, 1.0}};
//   tj_value_t y = tj_graph_custom(g, "axpb", &x, 1, &at);
#ifndef TENSORJIT_TJ_CUSTOM_OP_H_
#define TENSORJIT_TJ_CUSTOM_OP_H_

#include "tensorjit/tj_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// The most int and float attributes one custom node carries (each).
#define TJ_CUSTOM_MAX_ATTRS 8
// The most arguments a signature string may list.
#define TJ_CUSTOM_MAX_ARGS 32

// A custom node's attributes: |num_ints| int64 values and |num_floats|
// double values (each at most TJ_CUSTOM_MAX_ATTRS; the arrays may be NULL
// when their count is 0). Copied into the graph by tj_graph_custom.
typedef struct tj_custom_attrs_t {
  int32_t num_ints;
  const int64_t* ints;
  int32_t num_floats;
  const double* floats;
} tj_custom_attrs_t;

// The type of a value as a shape function sees it: a dtype and |rank| dims,
// each a constant or a symbolic dim of the graph (tj_graph_symbol,
// tj_graph_dim_add, tj_graph_dim_mul).
typedef struct tj_custom_type_t {
  tj_dtype_t dtype;
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
} tj_custom_type_t;

// The shape (and dtype) rule: given the input types, writes the output type
// to |*out|. It may build dims over the inputs' ones with the dim API on
// |graph| (never other builder calls), so that a symbolic batch B flows
// through. Called each time a node is built or checked (graph building,
// parsing, and the verifier after each pass): it must be deterministic. A
// status it returns (owned by the library from then on; make one with
// tj_status_create) becomes the graph's sticky error, prefixed with the op's
// name and node.
typedef tj_status_t (*tj_custom_shape_fn)(void* user_data, tj_graph_t* graph,
                                          const tj_custom_type_t* inputs,
                                          int32_t num_inputs,
                                          const tj_custom_attrs_t* attrs,
                                          tj_custom_type_t* out);

// A generic host implementation: reads |inputs| (CPU tensors, dense
// row-major unless TJ_CUSTOM_OP_CONTIGUOUS_INPUTS is left out, in which
// case a graph input may come strided) and writes |*output| (CPU, dense
// row-major, 64-byte aligned when it has elements). Every pointer is
// borrowed for the call. A status it returns fails the run, prefixed with
// the op's name.
typedef tj_status_t (*tj_custom_host_fn)(void* user_data,
                                         const tj_tensor_t* inputs,
                                         int32_t num_inputs,
                                         const tj_custom_attrs_t* attrs,
                                         const tj_tensor_t* output);

// The vector-Jacobian product, for tj_graph_grad: given the forward node's
// |inputs| and |output| and the gradient |grad_output| (all values of
// |graph|), builds d(loss)/d(input i) with builder calls on |graph| (core
// ops or other custom ops) into |out_grads[i]|; a none value means "no
// gradient" (zero; fine for inputs that are not differentiated). Each
// gradient must have its input's type. An error recorded on |graph| or a
// returned status fails tj_graph_grad, naming the op.
typedef tj_status_t (*tj_custom_vjp_fn)(void* user_data, tj_graph_t* graph,
                                        const tj_value_t* inputs,
                                        int32_t num_inputs, tj_value_t output,
                                        tj_value_t grad_output,
                                        const tj_custom_attrs_t* attrs,
                                        tj_value_t* out_grads);

// A CUDA implementation's launch shape: the grid, the block (threads per
// block) and the dynamic shared memory in bytes (at most 48 KiB).
typedef struct tj_custom_launch_t {
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;
} tj_custom_launch_t;

// Computes a CUDA implementation's launch shape for one run from the
// concrete types of its |inputs| and |output| (every dim a number) and the
// node's |attrs|. Called on the host before each run's launches (also when
// the run replays a captured CUDA graph). A status it returns fails the
// run, prefixed with the op's name and node. A zero grid or block dim
// skips the launch.
typedef tj_status_t (*tj_custom_launch_fn)(void* user_data,
                                           const tj_custom_type_t* inputs,
                                           int32_t num_inputs,
                                           const tj_custom_attrs_t* attrs,
                                           const tj_custom_type_t* output,
                                           tj_custom_launch_t* out);

// tj_custom_op_desc_t.flags.
typedef enum tj_custom_op_flag_e {
  // Same inputs, same output, no side effect: the optimizer may merge two
  // identical nodes (CSE) and drop an unused one (DCE). Without it each
  // node runs exactly once per run, used or not.
  TJ_CUSTOM_OP_PURE = 1u << 0,
  // The output may share memory with input 0 (same byte size) when the
  // memory plan wants it; without it the output never aliases an input.
  TJ_CUSTOM_OP_IN_PLACE = 1u << 1,
  // Every input arrives dense row-major (strided graph inputs are copied
  // first). Implied by a signature (pointer arguments are dense).
  TJ_CUSTOM_OP_CONTIGUOUS_INPUTS = 1u << 2,
} tj_custom_op_flag_t;

// What tj_context_register_op registers. Zero it and set |struct_size| to
// sizeof(tj_custom_op_desc_t) first: fields added later read as zero from
// an older caller.
typedef struct tj_custom_op_desc_t {
  size_t struct_size;
  // A C identifier (copied) and a version >= 1; (name, version) is unique
  // per context.
  const char* name;
  int32_t version;
  // The number of inputs (0 to 64).
  int32_t num_inputs;
  // Required.
  tj_custom_shape_fn shape;
  // The host implementation: exactly one of
  //   (a) |function| with |signature|, a C function called through libffi
  //       (the call interface is prepared once, here; on x86-64 a
  //       signature whose arguments all go in registers is called
  //       without ffi_call, the same way the ABI would). The signature is
  //       "R(A, A, ...)" with R void or i32 (non-zero fails the run, with
  //       the value in the message) and each A one of:
  //         T*        the output's data, T its dtype (f32 f16 bf16 f64 i8
  //                   i32 i64 bool); exactly one;
  //         const T*  the next input's data, in order; each input once;
  //         i64       right after a pointer (or after its earlier i64s):
  //                   that tensor's next dim, outermost first, while it
  //                   has dims left; anywhere else the next int attribute;
  //         f32, f64  the next float attribute, converted;
  //       Checked here (a message giving the argument's position and what
  //       was expected) and, against the node's ranks, dtypes and attribute
  //       counts, by tj_graph_custom.
  //   (b) |host|, a generic callback over tensor descriptors.
  void (*function)(void);
  const char* signature;  // copied
  tj_custom_host_fn host;
  // Optional: without one tj_graph_grad refuses the op by name.
  tj_custom_vjp_fn vjp;
  uint32_t flags;  // tj_custom_op_flag_t
  // Passed to every callback; owned by the caller, who keeps it alive as
  // long as the context (and any executable compiled in it).
  void* user_data;
  // Optional, all three or none: a CUDA implementation. |cuda_ptx| is
  // NUL-terminated PTX text (copied) holding the kernel |cuda_entry|
  // (copied), and |cuda_launch| computes its launch shape. The CUDA target
  // then runs the op as a device step between its kernels: the module is
  // loaded with the program's (a PTX the driver rejects fails the compile
  // with the driver's log, naming the op and node), the kernel is launched
  // on the executable's stream and captured in its CUDA graph with the
  // other kernels (no host call, no staging). The kernel's parameters, in
  // order:
  //   u64  the output's device pointer (dense row-major, 256-byte aligned);
  //   u64  each input's device pointer, in order (dense row-major);
  //   s64  the output's dims, outermost first, then each input's dims;
  //   s64  the int attributes, then f64 the float attributes.
  // Without it (or on the other targets) the host implementation runs,
  // which the reference interpreter always uses. Not for ops with
  // data-dependent dims (tj_custom_dynamic_dim).
  const char* cuda_ptx;
  const char* cuda_entry;
  tj_custom_launch_fn cuda_launch;
  // Optional, instead of |cuda_ptx|: the kernel as NUL-terminated LLVM IR
  // text (the .ll form, for NVPTX; |cuda_entry| a function of it with the
  // ptx_kernel calling convention or an nvvm.annotations "kernel" mark),
  // with the same parameters. tj_context_register_op compiles it with the
  // library's own NVPTX back end (the LLVM it links) to PTX for sm_80
  // (PTX ISA 7.8), which the driver compiles for any newer GPU, and keeps
  // the PTX as if given in |cuda_ptx|. IR that does not parse or verify,
  // targets another triple, or lacks the kernel |cuda_entry| is refused
  // there with INVALID_ARGUMENT carrying LLVM's diagnostic and the op's
  // name. Give |cuda_ptx| or this, not both. Available since: 0.1.
  const char* cuda_llvm_ir;
} tj_custom_op_desc_t;

// A new status with |code| (TJ_STATUS_OK reads as BACKEND_FAILURE) and a
// copy of |message|, for callbacks to return; freed by whoever receives it.
// Never NULL.
TJ_API tj_status_t tj_status_create(tj_status_code_t code, const char* message);

// Registers a custom op in |context|, copying what it keeps (name,
// signature). INVALID_ARGUMENT for a NULL or malformed desc (naming the
// field), a (name, version) already registered, or a bad signature string
// (naming the argument position); OUT_OF_MEMORY. Thread-safe; graphs built
// after it returns can use the op. Registrations last as long as the
// context.
TJ_API tj_status_t tj_context_register_op(tj_context_t* context,
                                          const tj_custom_op_desc_t* desc);

// Appends a node running custom op |name| over |num_inputs| |inputs| with
// |attrs| (NULL: none). |name| is "op" (the highest version registered) or
// "op@N" (version N). The output type comes from the op's shape function.
// Sticky errors like every builder: an unknown op, a wrong input count, a
// signature that does not fit the inputs' dtypes and ranks or the attribute
// counts, or the shape function's own error, each naming the op and node.
TJ_API tj_value_t tj_graph_custom(tj_graph_t* graph, const char* name,
                                  const tj_value_t* inputs, int32_t num_inputs,
                                  const tj_custom_attrs_t* attrs);

// Data-dependent output dims (a nonzero, a unique, a filter): an output dim
// known only once the op has run.
//
// In a shape function, returns the dim of symbol |symbol| (created on first
// use) marked data-dependent with |upper_bound| (a dim of |graph| over the
// inputs' dims, e.g. the input's element count). A run allocates the bound,
// hands the host implementation an output of the bound's shape, and the
// implementation reports the actual dims with tj_custom_set_output_shape
// (its data at the start of the buffer, dense row-major in the actual
// shape); the nodes after it then run with the symbol bound to that value:
// the compiled kernels downstream are the generic ones, never recompiled
// (an executable with data-dependent symbols does not specialize). A graph
// output whose shape depends on such a symbol is read with
// tj_executable_run_shaped (or tj_reference_run_shaped), which return the
// actual shape; tj_executable_run refuses it. Each node needs a symbol of
// its own (name it after an attribute or a counter the host keeps). Errors
// (a symbol bound by a graph input or made by another node, another bound
// for the same symbol, an invalid bound) are
// recorded on |graph| (the shape function's error) and give
// TJ_DIM_INVALID. Runs on the x86 and reference targets; CUDA refuses the
// host call at run time.
TJ_API int64_t tj_custom_dynamic_dim(tj_graph_t* graph, const char* symbol,
                                     int64_t upper_bound);

// In a generic host implementation (tj_custom_host_fn) of an op with
// data-dependent output dims: the actual shape of |output| (its own
// argument): |rank| must be the output's, and each dim in [0, the bound it
// was given]. INVALID_ARGUMENT otherwise. The library then checks that only
// data-dependent dims changed (the run fails naming the op otherwise).
TJ_API tj_status_t tj_custom_set_output_shape(const tj_tensor_t* output,
                                              int32_t rank,
                                              const int64_t* dims);

//===----------------------------------------------------------------------===//
// Built-in ops with data-dependent output dims (issue 15)
//===----------------------------------------------------------------------===//

// The library's own data-dependent ops. Each puts one node of a built-in
// custom op in the graph (tj_nonzero, tj_unique, tj_nms or tj_range,
// present in every context; a host cannot register those names) for the step
// whose size only the data decides, and writes the rest with core ops that fuse
// with their neighbours. The data-dependent dim is a symbol of the node's own
// (tj_custom_dynamic_dim), bounded as stated: memory is planned at the
// bound, and the kernels after it run generic at the actual size, with no
// recompile. The host kernel runs between the compiled kernels (a host
// call, not a graph break) on every target; on CUDA through host staging.
// A graph output with such a dim is read with tj_executable_run_shaped.
// Errors are the graph's sticky error, naming the op.

// numpy.nonzero as one i64 tensor (ONNX NonZero): [max(rank, 1), NZ], row k
// the axis-k coordinates of the non-zero elements in row-major order
// (a float's -0.0 is zero, NaN is not). NZ <= numel(|x|).
TJ_API tj_value_t tj_graph_nonzero(tj_graph_t* graph, tj_value_t x);

// ONNX Compress: the slices of |x| along |axis| (|has_axis|; else of |x|
// flattened) whose entry of 1-D |condition| is non-zero; a condition
// shorter than the axis drops the rest, a longer one is cut to it. A
// gather at the nonzero positions, so it fuses with what reads it.
TJ_API tj_value_t tj_graph_compress(tj_graph_t* graph, tj_value_t x,
                                    tj_value_t condition, bool has_axis,
                                    int32_t axis);

// ONNX Unique (numpy.unique with return_index, return_inverse and
// return_counts): the distinct slices of |x| along |axis| (|has_axis|;
// else its distinct elements, |x| flattened), in sorted order (|sorted|;
// slices compare lexicographically, NaN last and equal to NaN) or in order
// of first appearance. Returns them ([U] or |x|'s shape with U at |axis|);
// |out_indices| (i64 [U]) gets each one's first position, |out_inverse|
// (i64 [A], A the axis' or the element count) each position's index in the
// result, |out_counts| (i64 [U]) how often each occurs; any may be NULL.
// U <= A. Only the first positions come from the host kernel; the rest are
// gathers, compares and sums over [A, U].
TJ_API tj_value_t tj_graph_unique(tj_graph_t* graph, tj_value_t x,
                                  bool has_axis, int32_t axis, bool sorted,
                                  tj_value_t* out_indices,
                                  tj_value_t* out_inverse,
                                  tj_value_t* out_counts);

// ONNX NonMaxSuppression: |boxes| [B, N, 4] and |scores| [B, C, N]
// (floats); per batch and class, the boxes with score > |score_threshold|
// (none: every box) by descending score (ties: lower index), greedily kept
// unless their IoU with a kept box exceeds |iou_threshold| (none: 0), at
// most |max_output_boxes_per_class| (none: 0, nothing) of them. Boxes are
// [y1, x1, y2, x2] (any two opposite corners) or, with
// |center_point_box|, [x_center, y_center, width, height]. The scalars
// are one-element tensors read at run time. Returns i64 [K, 3] rows
// (batch, class, box), K <= B * C * N. f32 boxes compute IoU in f32 steps
// as ONNX's reference does.
TJ_API tj_value_t tj_graph_non_max_suppression(
    tj_graph_t* graph, tj_value_t boxes, tj_value_t scores,
    tj_value_t max_output_boxes_per_class, tj_value_t iou_threshold,
    tj_value_t score_threshold, bool center_point_box);

// ONNX Range (numpy.arange) whose scalars are known only at run time:
// [L] of start + i * delta, L = max(ceil((limit - start) / delta), 0)
// (integers exactly; floats in f64). |start|, |limit| and |delta| are
// scalars (or [1]) of one dtype, a float or i8, i16, i32, i64, each
// computed from graph inputs and constants by casts, reshapes and scalar
// arithmetic (add, sub, mul, div, neg, abs, ceil, floor, relu, maximum,
// minimum): L is computed from their values on the host when a run binds
// its symbols, before anything is sized, and stays fixed for the run
// (tj_executable_output_shape gives it; a plain tj_executable_run works),
// so no bound is needed. A scalar that depends on anything else (a
// reduction, a tensor element) is UNSUPPORTED, naming that node (the
// sticky error). A run with delta 0 is INVALID_ARGUMENT; on CUDA the inputs
// the length reads must be CPU tensors. The values come from the node's
// host kernel (tj_range, a host call: integers in wrapping int64
// arithmetic, f32, f16 and bf16 in f32 steps, f64 in f64).
// Available since: 0.1 (ops15b).
TJ_API tj_value_t tj_graph_range(tj_graph_t* graph, tj_value_t start,
                                 tj_value_t limit, tj_value_t delta);

// The running sum that ONNX's expanded Range (a Loop of prev + delta)
// computes: [max(count, 0)] with y[0] = |start| and y[i] = y[i - 1] +
// |delta|, each step rounded to the dtype (integers wrap). |count| is an
// i64 or i32 scalar; the scalars follow tj_graph_range's rules, and so
// does the length (a value symbol). Available since: 0.1 (ops15b).
TJ_API tj_value_t tj_graph_range_count(tj_graph_t* graph, tj_value_t start,
                                       tj_value_t count, tj_value_t delta);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TENSORJIT_TJ_CUSTOM_OP_H_
