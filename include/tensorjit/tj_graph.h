// libtensorjit: building tensor graphs node by node.
//
// Include <tensorjit.h> rather than this file directly.

#ifndef TENSORJIT_TJ_GRAPH_H_
#define TENSORJIT_TJ_GRAPH_H_

#include "tensorjit/tj_base.h"

#ifdef __cplusplus
extern "C" {
#endif

//===----------------------------------------------------------------------===//
// Dims
//===----------------------------------------------------------------------===//

// The most dimensions a tensor may have.
#define TJ_MAX_RANK 8

// A dimension is an int64_t:
//   >= 0       a constant size;
//   <= -2      a symbolic size made by tj_graph_symbol, tj_graph_dim_add,
//              _sub, _mul or _div on the same graph (e.g. B, or B*4+1);
//   -1         TJ_DIM_INFER, allowed only in tj_graph_reshape's shape.
// Two symbolic dims of one graph are equal iff their int64_t values are equal:
// each expression is kept in one canonical form (a sum of products of symbols
// with integer coefficients). Symbols are integers >= 0 at run time.
#define TJ_DIM_INFER ((int64_t)-1)
// Returned by the dim functions after an error has been recorded on a graph.
#define TJ_DIM_INVALID INT64_MIN

//===----------------------------------------------------------------------===//
// tj_graph_t
//===----------------------------------------------------------------------===//

// A tensor graph under construction: a DAG of nodes in SSA form.
//
// The graph owns every node, name, symbol and copied constant created through
// it; none of them is freed individually. Thread-compatible: one thread at a
// time may build a graph. After tj_graph_finalize succeeds the graph is
// immutable and may be read, printed, run and compiled from several threads
// at once.
//
// Errors are sticky: a builder call that fails records the first error on
// the graph (with the op, the node and the shapes in its message) and returns
// the none value; later calls that receive a none value, or that are made
// after an error, do nothing and return none. (A none value passed where an
// operand is required while no error is recorded, e.g. one from another
// graph's failure, is itself recorded as an error, so a partial graph never
// finalizes.) tj_graph_finalize returns the recorded error.
typedef struct tj_graph_t tj_graph_t;

// A value produced by a node. Plain data: copy it freely. It is meaningful
// only together with the graph that made it. id 0 is never a valid value;
// builder calls return it after an error.
typedef struct tj_value_t {
  uint32_t id;
} tj_value_t;

static inline bool tj_value_is_none(tj_value_t value) { return value.id == 0; }
static inline tj_value_t tj_value_none(void) {
  tj_value_t none = {0};
  return none;
}

// Creates an empty graph named |name| (copied; NULL means "main") whose
// memory comes from |context|'s allocator. |context| must outlive it. On
// success |*out_graph| is owned by the caller (tj_graph_destroy); on failure
// it is NULL.
TJ_API tj_status_t tj_graph_create(tj_context_t* context, const char* name,
                                   tj_graph_t** out_graph);

// Destroys |graph| and everything it owns. NULL is a no-op.
TJ_API void tj_graph_destroy(tj_graph_t* graph);

// The context |graph| was created in.
TJ_API tj_context_t* tj_graph_context(const tj_graph_t* graph);

// Finishes building: returns the first recorded error, or verifies the graph
// (at least one output, every node well typed) and freezes it. Returns a new
// status each call; calling it again on a finalized graph returns NULL.
TJ_API tj_status_t tj_graph_finalize(tj_graph_t* graph);

// A copy of the first recorded error, or NULL. Owned by the caller.
// INVALID_ARGUMENT for a NULL graph.
TJ_API tj_status_t tj_graph_status(const tj_graph_t* graph);

//===--- symbolic dims ---===//

// The size rule, one for every tensor: an input, a constant, every op's
// result, and each tensor passed to a run. Each dim is >= 0, and the
// element size times the product of the NON-ZERO dims must not exceed
// 2^48 bytes. Zero dims are left out of the product, so a tensor with no
// elements may not have huge other dims either (f32[INT64_MAX,2,0] is
// refused on every target): any partial product of a tensor's dims, in any
// order, then fits in int64. The constant dims of a node are checked when it
// is built (the builder call records INVALID_ARGUMENT); symbolic dims when a
// run binds its symbols (tj_executable_run, tj_executable_output_shape,
// tj_reference_run), where a dim expression whose value overflows int64
// (B + big, B * big) is INVALID_ARGUMENT too, naming the node and the dim.

// The symbol named |name| (copied), created on first use: calling it twice
// with the same name gives the same dim. Names are C identifiers.
TJ_API int64_t tj_graph_symbol(tj_graph_t* graph, const char* name);
// |a| + |b| and |a| * |b| over dims (constants or symbolic).
TJ_API int64_t tj_graph_dim_add(tj_graph_t* graph, int64_t a, int64_t b);
TJ_API int64_t tj_graph_dim_mul(tj_graph_t* graph, int64_t a, int64_t b);
// |a| - |b| when the difference is a dim for every value of the symbols: a
// constant >= 0, or a sum of products of symbols with positive coefficients
// ((B + T) - B is T). |a| / |b| when |b| divides |a| exactly (B*T*12 / 12
// is B*T, B*T / T is B). Otherwise (T - 1, which is -1 at T = 0; 2 - 3; T /
// 2) each records INVALID_ARGUMENT naming both and returns TJ_DIM_INVALID.
// Available since: 0.1 (session 25).
TJ_API int64_t tj_graph_dim_sub(tj_graph_t* graph, int64_t a, int64_t b);
TJ_API int64_t tj_graph_dim_div(tj_graph_t* graph, int64_t a, int64_t b);

//===--- leaves ---===//

// Declares the next graph input: |rank| dims from |dims| (copied; each a
// constant or a symbolic dim of this graph). |name| is copied and must be a
// C identifier unique among the inputs.
TJ_API tj_value_t tj_graph_input(tj_graph_t* graph, tj_dtype_t dtype,
                                 int32_t rank, const int64_t* dims,
                                 const char* name);

// A constant tensor, dense row-major, |rank| constant dims. The
// |data_bytes| bytes at |data| are copied into the graph; |data_bytes| must
// equal the constant's byte size (numel * tj_dtype_size(dtype)), else
// INVALID_ARGUMENT naming both sizes. |data| may be NULL only when that size
// is 0.
TJ_API tj_value_t tj_graph_constant(tj_graph_t* graph, tj_dtype_t dtype,
                                    int32_t rank, const int64_t* dims,
                                    const void* data, size_t data_bytes);

// As tj_graph_constant, but |data| is borrowed, not copied: it must stay
// valid and unchanged until the graph and every executable compiled from it
// are destroyed. For large weights.
TJ_API tj_value_t tj_graph_constant_borrowed(tj_graph_t* graph,
                                             tj_dtype_t dtype, int32_t rank,
                                             const int64_t* dims,
                                             const void* data,
                                             size_t data_bytes);

// A rank-0 constant of |dtype| holding |value| converted to |dtype|.
TJ_API tj_value_t tj_graph_scalar(tj_graph_t* graph, tj_dtype_t dtype,
                                  double value);

// A tensor of |dtype| and shape |dims| filled with |value|. Dims may be
// symbolic.
TJ_API tj_value_t tj_graph_full(tj_graph_t* graph, tj_dtype_t dtype,
                                int32_t rank, const int64_t* dims,
                                double value);

// A tensor of |dtype| and shape |dims| whose element is its index along
// |axis| (arange along one axis, broadcast along the others).
TJ_API tj_value_t tj_graph_iota(tj_graph_t* graph, tj_dtype_t dtype,
                                int32_t rank, const int64_t* dims,
                                int32_t axis);

// Marks |value| as the next graph output, named |name| (copied, a C
// identifier unique among outputs).
TJ_API void tj_graph_output(tj_graph_t* graph, tj_value_t value,
                            const char* name);

//===--- elementwise unary: y[i] = f(a[i]), same dtype unless stated ---===//

TJ_API tj_value_t tj_graph_neg(tj_graph_t* graph, tj_value_t a);
TJ_API tj_value_t tj_graph_abs(tj_graph_t* graph, tj_value_t a);
// Float dtypes only:
TJ_API tj_value_t tj_graph_exp(tj_graph_t* graph, tj_value_t a);
TJ_API tj_value_t tj_graph_log(tj_graph_t* graph, tj_value_t a);
TJ_API tj_value_t tj_graph_sqrt(tj_graph_t* graph, tj_value_t a);
TJ_API tj_value_t tj_graph_rsqrt(tj_graph_t* graph, tj_value_t a);
TJ_API tj_value_t tj_graph_tanh(tj_graph_t* graph, tj_value_t a);
TJ_API tj_value_t tj_graph_sigmoid(tj_graph_t* graph, tj_value_t a);
TJ_API tj_value_t tj_graph_erf(tj_graph_t* graph, tj_value_t a);
TJ_API tj_value_t tj_graph_erfc(tj_graph_t* graph, tj_value_t a);
TJ_API tj_value_t tj_graph_sin(tj_graph_t* graph, tj_value_t a);
TJ_API tj_value_t tj_graph_cos(tj_graph_t* graph, tj_value_t a);
// Inverse trigonometric functions (C99: NaN for |a| > 1 in asin and acos).
TJ_API tj_value_t tj_graph_asin(tj_graph_t* graph, tj_value_t a);
TJ_API tj_value_t tj_graph_acos(tj_graph_t* graph, tj_value_t a);
TJ_API tj_value_t tj_graph_atan(tj_graph_t* graph, tj_value_t a);
TJ_API tj_value_t tj_graph_floor(tj_graph_t* graph, tj_value_t a);
TJ_API tj_value_t tj_graph_ceil(tj_graph_t* graph, tj_value_t a);
// Rounds half to even, as numpy.round.
TJ_API tj_value_t tj_graph_round(tj_graph_t* graph, tj_value_t a);
// Numeric dtypes:
TJ_API tj_value_t tj_graph_relu(tj_graph_t* graph, tj_value_t a);
TJ_API tj_value_t tj_graph_sign(tj_graph_t* graph, tj_value_t a);
// bool -> bool:
TJ_API tj_value_t tj_graph_logical_not(tj_graph_t* graph, tj_value_t a);
// float -> bool:
TJ_API tj_value_t tj_graph_isnan(tj_graph_t* graph, tj_value_t a);

//===--- elementwise binary, numpy broadcasting, equal dtypes ---===//

TJ_API tj_value_t tj_graph_add(tj_graph_t* graph, tj_value_t a, tj_value_t b);
TJ_API tj_value_t tj_graph_sub(tj_graph_t* graph, tj_value_t a, tj_value_t b);
TJ_API tj_value_t tj_graph_mul(tj_graph_t* graph, tj_value_t a, tj_value_t b);
// Integer division truncates toward zero (C semantics); division by zero of
// integers gives 0.
TJ_API tj_value_t tj_graph_div(tj_graph_t* graph, tj_value_t a, tj_value_t b);
// Float dtypes only.
TJ_API tj_value_t tj_graph_pow(tj_graph_t* graph, tj_value_t a, tj_value_t b);
TJ_API tj_value_t tj_graph_maximum(tj_graph_t* graph, tj_value_t a,
                                   tj_value_t b);
TJ_API tj_value_t tj_graph_minimum(tj_graph_t* graph, tj_value_t a,
                                   tj_value_t b);
// Comparisons give bool.
TJ_API tj_value_t tj_graph_eq(tj_graph_t* graph, tj_value_t a, tj_value_t b);
TJ_API tj_value_t tj_graph_ne(tj_graph_t* graph, tj_value_t a, tj_value_t b);
TJ_API tj_value_t tj_graph_lt(tj_graph_t* graph, tj_value_t a, tj_value_t b);
TJ_API tj_value_t tj_graph_le(tj_graph_t* graph, tj_value_t a, tj_value_t b);
TJ_API tj_value_t tj_graph_gt(tj_graph_t* graph, tj_value_t a, tj_value_t b);
TJ_API tj_value_t tj_graph_ge(tj_graph_t* graph, tj_value_t a, tj_value_t b);
// bool only.
TJ_API tj_value_t tj_graph_logical_and(tj_graph_t* graph, tj_value_t a,
                                       tj_value_t b);
TJ_API tj_value_t tj_graph_logical_or(tj_graph_t* graph, tj_value_t a,
                                      tj_value_t b);

// cond ? a : b elementwise; |cond| is bool; all three broadcast together.
TJ_API tj_value_t tj_graph_where(tj_graph_t* graph, tj_value_t cond,
                                 tj_value_t a, tj_value_t b);

// Converts to |dtype|. Float to int truncates toward zero (NaN and out of
// range give 0); anything to bool is (x != 0); bool to number is 0 or 1.
// a's bits, element by element, read as |dtype|, which must have a's element
// size (ONNX BitCast): f32 <-> i32, f64 <-> i64, i8 <-> u8, bool -> u8, ...
// A bool result holds a nonzero byte as true. Compiled kernels hold f16 and
// bf16 as f32, so an f16/bf16 NaN stays a NaN but may lose its payload (or
// be quieted); every other pattern keeps its bits.
TJ_API tj_value_t tj_graph_bitcast(tj_graph_t* graph, tj_value_t a,
                                   tj_dtype_t dtype);

TJ_API tj_value_t tj_graph_cast(tj_graph_t* graph, tj_value_t a,
                                tj_dtype_t dtype);

// Remainders, bitwise ops and shifts (ONNX semantics; elementwise, they fuse
// like add). Operands broadcast and have one dtype, as for add; a dtype the
// op does not take is INVALID_ARGUMENT naming the node.
// mod: a - floor(a / b) * b, with the sign of b (ONNX Mod with fmod = 0,
// numpy.mod, Python's %); fmod: a - trunc(a / b) * b, with the sign of a
// (ONNX Mod with fmod = 1, C fmod). Numeric dtypes. Integers: x mod 0 =
// x fmod 0 = 0 (ONNX leaves it undefined), never a trap. Floats: NaN when b
// is 0 or a is infinite; a zero result of mod has b's sign.
TJ_API tj_value_t tj_graph_mod(tj_graph_t* graph, tj_value_t a, tj_value_t b);
TJ_API tj_value_t tj_graph_fmod(tj_graph_t* graph, tj_value_t a, tj_value_t b);
// Integer dtypes only (ONNX BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot).
TJ_API tj_value_t tj_graph_bitwise_and(tj_graph_t* graph, tj_value_t a,
                                       tj_value_t b);
TJ_API tj_value_t tj_graph_bitwise_or(tj_graph_t* graph, tj_value_t a,
                                      tj_value_t b);
TJ_API tj_value_t tj_graph_bitwise_xor(tj_graph_t* graph, tj_value_t a,
                                       tj_value_t b);
TJ_API tj_value_t tj_graph_bitwise_not(tj_graph_t* graph, tj_value_t a);
// a shifted by b bits (ONNX BitShift; integer dtypes only). shift_left
// wraps and gives 0 when b < 0 or b >= the dtype's bits; shift_right is
// arithmetic on the signed dtypes (numpy.right_shift) and gives every bit
// equal to a's sign bit when b < 0 or b >= the bits; on the unsigned dtypes
// it is logical (zeros shift in; ONNX BitShift) and gives 0 when b >= the
// bits.
TJ_API tj_value_t tj_graph_shift_left(tj_graph_t* graph, tj_value_t a,
                                      tj_value_t b);
TJ_API tj_value_t tj_graph_shift_right(tj_graph_t* graph, tj_value_t a,
                                       tj_value_t b);

//===--- reductions over a set of axes ---===//

// |axes| has |num_axes| distinct entries in [-rank, rank); negative counts
// from the end. num_axes == 0 reduces over every axis. With |keepdims| the
// reduced axes stay with size 1. Over no elements (an axis of size 0): sum
// 0, mean NaN, max -inf, min +inf (the integer extremes for integers), prod
// 1. On bool, max is any (logical or) and min is all (logical and); sum and
// prod take no bool.
TJ_API tj_value_t tj_graph_sum(tj_graph_t* graph, tj_value_t a,
                               int32_t num_axes, const int32_t* axes,
                               bool keepdims);
// Float dtypes only.
TJ_API tj_value_t tj_graph_mean(tj_graph_t* graph, tj_value_t a,
                                int32_t num_axes, const int32_t* axes,
                                bool keepdims);
// Float max and min propagate NaN and order -0 below +0 (IEEE 754-2019
// maximum and minimum), so the answer does not depend on the order in
// which a target combines the elements.
TJ_API tj_value_t tj_graph_max(tj_graph_t* graph, tj_value_t a,
                               int32_t num_axes, const int32_t* axes,
                               bool keepdims);
TJ_API tj_value_t tj_graph_min(tj_graph_t* graph, tj_value_t a,
                               int32_t num_axes, const int32_t* axes,
                               bool keepdims);
TJ_API tj_value_t tj_graph_prod(tj_graph_t* graph, tj_value_t a,
                                int32_t num_axes, const int32_t* axes,
                                bool keepdims);
// Index (i64) of the first maximum along |axis|; an empty |axis| is
// INVALID_ARGUMENT (when the graph is built, or at run time for a symbolic
// size that is 0).
TJ_API tj_value_t tj_graph_argmax(tj_graph_t* graph, tj_value_t a, int32_t axis,
                                  bool keepdims);
// The same with the first minimum (ONNX ArgMin, select_last_index = 0):
// the first NaN wins, as numpy.argmin; an empty axis is an error as above.
// A native kernel (argmax's, on order-reversed values).
TJ_API tj_value_t tj_graph_argmin(tj_graph_t* graph, tj_value_t a, int32_t axis,
                                  bool keepdims);

//===--- contraction ---===//

// Matrix product with numpy.matmul semantics: rank >= 2 operands multiply
// their last two dims and broadcast the leading (batch) dims; a rank-1
// operand is promoted to a matrix and the added dim removed afterwards.
TJ_API tj_value_t tj_graph_matmul(tj_graph_t* graph, tj_value_t a,
                                  tj_value_t b);
// qgemm (issue 17): integer matrix product into i32, numpy.matmul shapes.
// |a| and |b| are each i8 or u8 (mixed allowed); products and sums are
// exact in i32 (K up to 65793 cannot overflow; beyond, sums wrap as i32
// does). On x86 it runs on the integer GEMM kernels (VNNI vpdpbusd where
// the tier has it, else i16 pairs by pmaddwd). Not differentiable:
// tj_graph_grad refuses it by name. Any other dtype is INVALID_ARGUMENT.
TJ_API tj_value_t tj_graph_matmul_i32(tj_graph_t* graph, tj_value_t a,
                                      tj_value_t b);
// fp8 (issue 17): float8 matrix product into f32, numpy.matmul shapes.
// |a| and |b| are each f8e4m3 or f8e5m2 (mixed allowed); each product of
// the decoded values is exact in f32 and the sum is f32 (the reference
// sums in f64 and rounds once). CUDA sm_90a runs it on fp8 wgmma; other
// targets as a matmul of f32 casts. Not differentiable. Any other dtype is
// INVALID_ARGUMENT.
TJ_API tj_value_t tj_graph_matmul_f8(tj_graph_t* graph, tj_value_t a,
                                     tj_value_t b);

//===--- data movement ---===//

// Same elements, new shape of |rank| dims. At most one dim may be
// TJ_DIM_INFER; it is solved from the element count (also when symbolic).
TJ_API tj_value_t tj_graph_reshape(tj_graph_t* graph, tj_value_t a,
                                   int32_t rank, const int64_t* dims);
// y's axis i is a's axis |perm|[i]; |perm| has rank(a) entries.
TJ_API tj_value_t tj_graph_transpose(tj_graph_t* graph, tj_value_t a,
                                     const int32_t* perm);
// Broadcasts |a| to |dims| with numpy rules.
TJ_API tj_value_t tj_graph_broadcast_to(tj_graph_t* graph, tj_value_t a,
                                        int32_t rank, const int64_t* dims);
// Per axis i: elements start[i], start[i]+step[i], ... before stop[i], with
// numpy's clamping of start and stop and negative indices counting from the
// end; step > 0. |steps| may be NULL for all 1. INT64_MAX as stop means "to
// the end". A symbolic axis may only be sliced whole.
TJ_API tj_value_t tj_graph_slice(tj_graph_t* graph, tj_value_t a,
                                 const int64_t* starts, const int64_t* stops,
                                 const int64_t* steps);
// Joins |count| values of equal dtype and rank along |axis|.
TJ_API tj_value_t tj_graph_concat(tj_graph_t* graph, int32_t count,
                                  const tj_value_t* values, int32_t axis);
// Pads axis i with |low|[i] elements before and |high|[i] after (each >= 0),
// filled with |value|.
TJ_API tj_value_t tj_graph_pad(tj_graph_t* graph, tj_value_t a,
                               const int64_t* low, const int64_t* high,
                               double value);
// numpy.take(a, indices, axis) (ONNX Gather): y has shape a.shape[:axis] +
// indices.shape + a.shape[axis+1:]. |indices| is i32 or i64; a negative
// index counts from the end (i + n); an index still out of range is clamped
// into [0, n - 1] (no error, never a read outside |a|). Gathering from an
// empty axis into a non-empty result is INVALID_ARGUMENT at run time. A
// native kernel on x86 and CUDA that fuses with its consumers (and with the
// computation of its indices); |a| is read from memory.
TJ_API tj_value_t tj_graph_gather(tj_graph_t* graph, tj_value_t a,
                                  tj_value_t indices, int32_t axis);
// ops (issue 15): numpy.take_along_axis(a, indices, axis) (ONNX
// GatherElements): y has indices' shape and y[i] = a[i with its |axis|
// coordinate replaced by indices[i]]. |indices| is i32 or i64 of a's rank;
// along every other axis its size is a's (or, both constant, at most a's).
// Negative indices and indices out of range are treated as gather's (wrap
// once, then clamp; an empty axis with a non-empty result is
// INVALID_ARGUMENT at run time). A native kernel that fuses with its
// consumers; |a| is read from memory.
TJ_API tj_value_t tj_graph_gather_elements(tj_graph_t* graph, tj_value_t a,
                                           tj_value_t indices, int32_t axis);
// ops (issue 15): ONNX GatherND with |batch_dims| b: indices (i32 or i64,
// rank q >= 1) has a constant last dim k with 1 <= b + k <= rank(a), and
// its first b dims equal a's; y = indices.shape[:-1] + a.shape[b + k:] and
// y[p.., r..] = a[p[0..b).., indices[p.., 0..k).., r..]. Each index is
// treated as gather's (wrap once, then clamp; an empty indexed axis with a
// non-empty result is INVALID_ARGUMENT at run time). A native kernel that
// fuses with its consumers; |a| is read from memory.
TJ_API tj_value_t tj_graph_gather_nd(tj_graph_t* graph, tj_value_t a,
                                     tj_value_t indices, int32_t batch_dims);
// ops3 (issue 15): ONNX CumSum. y has a's type (numeric, rank >= 1; |axis|
// may be negative) and y[.., i, ..] = sum of a[.., j, ..] along |axis| over
// j <= i, j < i when |exclusive|, j >= i (j > i) when |reverse|; an empty
// sum is 0; integers wrap; f16/bf16 sums run in f32 on the native kernels
// (rounded once per element stored). A native kernel per scan: a walk
// along the axis per row, O(n), the rows in parallel; |a| is read from
// memory. Differentiable (the gradient is the scan of dy the other way).
TJ_API tj_value_t tj_graph_cumsum(tj_graph_t* graph, tj_value_t a, int32_t axis,
                                  bool exclusive, bool reverse);
// ops3 (issue 15): ONNX CumProd: as tj_graph_cumsum with products (an
// empty product is 1). Its gradient is sum-scan(dy * y) reversed, divided
// by a: infinite or NaN where a has zeros (as TensorFlow's).
TJ_API tj_value_t tj_graph_cumprod(tj_graph_t* graph, tj_value_t a,
                                   int32_t axis, bool exclusive, bool reverse);
// scatter (issue 15): how an update combines with the element it lands on.
typedef enum tj_scatter_reduction_e {
  TJ_SCATTER_REDUCTION_NONE = 0,  // replaced by the update
  TJ_SCATTER_REDUCTION_ADD = 1,   // y + u (integers wrap)
  TJ_SCATTER_REDUCTION_MUL = 2,   // y * u (integers wrap)
  TJ_SCATTER_REDUCTION_MAX = 3,   // max(y, u); NaN if either is NaN
  TJ_SCATTER_REDUCTION_MIN = 4,   // min(y, u); NaN if either is NaN
} tj_scatter_reduction_t;
// scatter (issue 15): ONNX ScatterElements (and the deprecated Scatter).
// |indices| (i32 or i64) and |updates| (data's dtype) have one shape, of
// data's rank; along every axis but |axis| (may be negative) it is data's
// dim, or both are constants and indices' is at most data's. y has data's
// type: y = data, then for every i of indices' shape, in row-major order,
// y[i with its |axis| coordinate replaced by indices[i]] = updates[i]
// combined by |reduction| with what is there. An index treated as
// gather's: negative wraps once, then clamped into [0, n - 1] (never a
// write outside y; ONNX calls such an index an error). Duplicates: with
// NONE the last update in row-major order wins; the others combine in that
// order, on every target (add/mul/max/min of bool are refused). Updates
// aimed at an empty axis are INVALID_ARGUMENT at run time. Two native
// kernels: a copy of data, then one walk per row of the other axes over
// the updates along |axis|, in order (a thread per row on the GPU).
// Operands are read from memory. Gradients: NONE and ADD (data's is dy
// where no update landed for NONE, dy for ADD; updates' is dy gathered).
TJ_API tj_value_t tj_graph_scatter_elements(tj_graph_t* graph, tj_value_t data,
                                            tj_value_t indices,
                                            tj_value_t updates, int32_t axis,
                                            tj_scatter_reduction_t reduction);
// scatter (issue 15): ONNX ScatterND (KV-cache writes, index_put).
// |indices| (i32 or i64, rank q >= 1) has a constant last dim k, 1 <= k <=
// rank(data); |updates| (data's dtype) is indices.shape[:-1] +
// data.shape[k:]. y = data, then for every p of indices.shape[:-1], in
// row-major order, y[indices[p, 0..k).., r..] = updates[p, r..] combined by
// |reduction|; each index treated as gather's (wrap once, then clamp).
// Duplicates as tj_graph_scatter_elements: the last wins (NONE) or they
// combine in order. A copy, then one walk per element of the slice
// data.shape[k:] over the index tuples in order. Gradients as
// tj_graph_scatter_elements.
TJ_API tj_value_t tj_graph_scatter_nd(tj_graph_t* graph, tj_value_t data,
                                      tj_value_t indices, tj_value_t updates,
                                      tj_scatter_reduction_t reduction);

// topk (issue 15): the i64 indices along |axis| of the |k| largest
// (|largest|) or smallest elements of each row of |a| (numeric, rank >= 1),
// best first: y has a's shape with k along |axis|. Ties keep the lower
// index first and NaN counts as larger than every number (numpy's stable
// argsort; ONNX TopK). k = -1 takes the whole axis (an argsort); otherwise
// 0 <= k <= the axis' length, which must then be a constant. Not
// differentiable (an integer result).
TJ_API tj_value_t tj_graph_argtopk(tj_graph_t* graph, tj_value_t a, int64_t k,
                                   int32_t axis, bool largest);
// ONNX TopK (sorted = 1): the values of tj_graph_argtopk's selection
// (gather_elements of |a| at the indices), returned; |*out_indices|, when
// not NULL, gets the indices. Differentiable in |a| (the gradient scatters
// dy to the selected positions). k >= 0.
TJ_API tj_value_t tj_graph_topk(tj_graph_t* graph, tj_value_t a, int64_t k,
                                int32_t axis, bool largest,
                                tj_value_t* out_indices);
// A stable sort of |a| along |axis|, ascending or |descending| (NaN last,
// or first when descending; equal elements keep their order), as
// tj_graph_topk over the whole axis; a symbolic axis is allowed.
TJ_API tj_value_t tj_graph_sort(tj_graph_t* graph, tj_value_t a, int32_t axis,
                                bool descending, tj_value_t* out_indices);
// The i64 indices that sort |a| along |axis| (tj_graph_sort's).
TJ_API tj_value_t tj_graph_argsort(tj_graph_t* graph, tj_value_t a,
                                   int32_t axis, bool descending);

// topk (issue 15): numpy.einsum / ONNX Einsum over |count| operands (1 to
// 16), built from transposes, reshapes, strided slices (diagonals: a label
// repeated within one operand, of constant length), sums and batched
// matmuls, so no node of its own. |equation| is "TERMS->OUT" or "TERMS"
// (the output then holds "..." and the letters used once, in ASCII order);
// terms are letters a-z, A-Z and at most one "..." of broadcast axes,
// aligned from the right; spaces are ignored. A malformed equation, or one
// that disagrees with the operands' ranks, records INVALID_ARGUMENT naming
// it and returns the none value. Differentiable through its parts.
TJ_API tj_value_t tj_graph_einsum(tj_graph_t* graph, const char* equation,
                                  const tj_value_t* inputs, int32_t count);

//===--- composites (decomposed into the ops above by the compiler) ---===//

// x * Phi(x): erf form (approximate == false) or tanh form (true):
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
TJ_API tj_value_t tj_graph_gelu(tj_graph_t* graph, tj_value_t x,
                                bool approximate);
// x * sigmoid(x).
TJ_API tj_value_t tj_graph_silu(tj_graph_t* graph, tj_value_t x);
// exp(x - max) / sum(exp(x - max)) along |axis|.
TJ_API tj_value_t tj_graph_softmax(tj_graph_t* graph, tj_value_t x,
                                   int32_t axis);
TJ_API tj_value_t tj_graph_log_softmax(tj_graph_t* graph, tj_value_t x,
                                       int32_t axis);
// (x - mean) / sqrt(var + eps) * gamma + beta over the last axis; |gamma| and
// |beta| are [N] or none (then 1 and 0).
TJ_API tj_value_t tj_graph_layer_norm(tj_graph_t* graph, tj_value_t x,
                                      tj_value_t gamma, tj_value_t beta,
                                      double eps);
// x / sqrt(mean(x^2) + eps) * gamma over the last axis; |gamma| [N] or none.
TJ_API tj_value_t tj_graph_rms_norm(tj_graph_t* graph, tj_value_t x,
                                    tj_value_t gamma, double eps);
// x @ w + b; |b| may be none.
TJ_API tj_value_t tj_graph_linear(tj_graph_t* graph, tj_value_t x, tj_value_t w,
                                  tj_value_t b);
// qgemm (issue 17): ONNX MatMulInteger, y = sum_k (a - a_zero_point) *
// (b - b_zero_point) in i32 with numpy.matmul shapes; |a|, |b| i8 or u8.
// Either zero point may be none (0); each has its operand's dtype and is a
// scalar (per tensor), |a_zero_point| [.., M, 1] (one per row of a; a
// rank-1 [M] is ONNX's form, reshape it first) and |b_zero_point| [.., 1,
// N] or [N] (one per column of b). Any other shape or dtype is
// INVALID_ARGUMENT. Decomposed into tj_graph_matmul_i32 of the raw
// operands and row/column-sum corrections; not differentiable.
TJ_API tj_value_t tj_graph_matmul_integer(tj_graph_t* graph, tj_value_t a,
                                          tj_value_t b, tj_value_t a_zero_point,
                                          tj_value_t b_zero_point);
// ONNX OneHot: y has |indices|' shape with |depth| (a dim: constant or
// symbolic, >= 0) inserted at |axis| (in [-rank - 1, rank], counted over
// y's rank) and the dtype of |values|, a [2] tensor (off, on). y = on where
// y's index along the axis equals the index (i32 or i64; depth is added to
// a negative one), else off: an index out of range gives a row of off.
// Elementwise after decomposition (iota, eq, where): it fuses with its
// consumers.
TJ_API tj_value_t tj_graph_one_hot(tj_graph_t* graph, tj_value_t indices,
                                   tj_value_t values, int64_t depth,
                                   int32_t axis);

//===--- convolution and pooling (composites) ---===//

// The window of a convolution or a pool over the spatial axes of x, which
// is [N, C, S1, ..., Sn] (n = rank(x) - 2, 1 to 3), or [N, S1, ..., Sn, C]
// with |channels_last| (the result then is too; the builder transposes to
// channels-first and back, and the transposes of neighbouring ops cancel
// where they meet). Entries past n are ignored. A zero-initialized struct is
// a valid conv: every field's zero is its default.
//   output size per axis, conv and pools:
//     out = floor((S + pads_begin + pads_end - dilation * (K - 1) - 1)
//                 / stride) + 1
//   (ceil instead of floor with |ceil_mode|, but a last window that would
//   start in the end padding is dropped, as torch does); conv_transpose:
//     out = stride * (S - 1) + output_padding + dilation * (K - 1) + 1
//           - pads_begin - pads_end.
// An out < 1 is INVALID_ARGUMENT naming the axis. A symbolic spatial size
// S is accepted with stride 1 when out is S plus a constant >= 0 ("same"
// padding), else UNSUPPORTED; N may always be symbolic. The compiler's
// decomposition needs constant spatial sizes (UNSUPPORTED otherwise, at
// tj_compile); the reference interpreter takes any.
typedef struct tj_conv_attrs_t {
  int64_t kernel[3];          // pools: the window (required, >= 1); conv:
                              // 0 or the weight's size
  int64_t strides[3];         // 0 = 1
  int64_t dilations[3];       // 0 = 1
  int64_t pads_begin[3];      // >= 0
  int64_t pads_end[3];        // >= 0
  int64_t output_padding[3];  // conv_transpose: 0 <= it < max(stride,
                              // dilation); 0 for every other op
  int64_t groups;             // conv, conv_transpose: 0 = 1; C and O are
                              // multiples of it (depthwise: groups = C)
  bool ceil_mode;             // pools
  bool count_include_pad;     // avg_pool: the divisor counts the pads
  double p;                   // lp_pool: p > 0 (0 = 2)
  bool channels_last;         // x and y are [N, spatial..., C]
} tj_conv_attrs_t;

// Cross-correlation as in torch.nn.functional.conv{1,2,3}d and ONNX Conv:
// x [N, C, S...], w [O, C / groups, K...], |bias| [O] or none; y
// [N, O, out...]. Float dtypes; x, w and bias of one dtype. |attrs| may be
// NULL (all defaults). Decomposed by the compiler into pad, strided slices
// (im2col), one (batched over groups) matmul and an add: a 1x1 kernel with
// stride 1 and no padding is a plain matmul. x86 and CUDA run an f32 conv
// with groups 1 and constant sizes but the batch as one implicit-GEMM
// kernel, x86 a grouped one too (more than one input channel a group: a
// GEMM a group). A tap that reads padding adds nothing on the reference and on
// a kernel that skips it, and 0 * w on one that multiplies the zero: where such
// a w is infinite or NaN the result is unspecified (0-padded or NaN).
TJ_API tj_value_t tj_graph_conv(tj_graph_t* graph, tj_value_t x, tj_value_t w,
                                tj_value_t bias, const tj_conv_attrs_t* attrs);
// The transpose (gradient with respect to x) of conv, as
// torch.nn.functional.conv_transpose{1,2,3}d and ONNX ConvTranspose: x
// [N, C, S...], w [C, O / groups, K...], |bias| [O] or none; y [N, O, out...].
TJ_API tj_value_t tj_graph_conv_transpose(tj_graph_t* graph, tj_value_t x,
                                          tj_value_t w, tj_value_t bias,
                                          const tj_conv_attrs_t* attrs);
// Window max, of a float or an integer x (ONNX MaxPool; bool refused);
// padded positions hold the dtype's lowest value, -inf or the integer's
// minimum (never chosen unless a window is all padding). |attrs| is
// required (its kernel).
TJ_API tj_value_t tj_graph_max_pool(tj_graph_t* graph, tj_value_t x,
                                    const tj_conv_attrs_t* attrs);
// Window mean: the sum over the window's taps inside x divided by their
// count, or with |count_include_pad| by the count of taps inside the padded
// x (taps past the end padding, from ceil_mode, never count).
TJ_API tj_value_t tj_graph_avg_pool(tj_graph_t* graph, tj_value_t x,
                                    const tj_conv_attrs_t* attrs);
// (sum over the window of |x|^p)^(1/p); padded positions are 0.
TJ_API tj_value_t tj_graph_lp_pool(tj_graph_t* graph, tj_value_t x,
                                   const tj_conv_attrs_t* attrs);

//===--- attention (issue 14) ---===//

// Scaled dot-product attention, as torch's scaled_dot_product_attention:
// q [B..., H, Tq, D], k [B..., Hkv, Tk, D], v [B..., Hkv, Tk, Dv] of one
// float dtype, the batch dims B... (any number, numpy-broadcast between
// q, k and v) and T symbolic or constant; D, Dv, H and Hkv constants with
// H a multiple of Hkv (grouped-query attention: query head h reads kv head
// h / (H / Hkv), torch's enable_gqa). y [B..., H, Tq, Dv] of q's dtype:
//   y[.., h, i, :] = sum_j softmax_j(s)[j] * v[.., h / G, j, :],
//   s[j] = scale * q[.., h, i, :] . k[.., h / G, j, :]  (+ mask)
// |mask| may be none, bool (true: key j is attended) or of q's dtype
// (added to the scores); it broadcasts to [B..., H, Tq, Tk] and no further.
// |scale| 0 means 1 / sqrt(D); otherwise it must be finite. |causal| masks
// key j for query i when j > i (top-left aligned, torch's is_causal; the
// two corners differ when Tq != Tk). A query row whose keys are all masked
// gives 0 (not NaN). Errors (the graph's sticky error, naming the op):
// ranks below 3, unequal ranks or dtypes, D or Dv or the heads mismatched
// or symbolic, H not a multiple of Hkv, a mask that does not broadcast.
// The compiler decomposes it into matmul, softmax pieces and movement ops
// on targets without a fused kernel (f16/bf16 computed in f32), and
// lib/passes/attention_match.c rewrites the written-out form onto it.
// A row with a +inf score is NaN (softmax's exp(inf - inf)). A key of
// weight 0 (masked, causal, or exp underflowing) adds nothing on the
// reference and on a kernel that skips its tile, and 0 * v on one that
// multiplies it: an infinite or NaN v at such a key leaves the row
// unspecified (NaN or not).
TJ_API tj_value_t tj_graph_attention(tj_graph_t* graph, tj_value_t q,
                                     tj_value_t k, tj_value_t v,
                                     tj_value_t mask, double scale,
                                     bool causal);

// Attention's backward (issue 14), as FlashAttention-2 computes it: the
// probabilities are recomputed from the scores and the row log-sum-exp,
// never stored. q, k, v, mask, scale and causal are attention's (scale 0
// means 1 / sqrt(D)); with s the scores and p = exp(s - lse) (0 on a row
// whose lse is -inf):
// attention_lse: lse [B..., H, Tq] = log sum_j exp(s_j), -inf on a row
// with every key masked; f32 for f16/bf16 q, else q's dtype.
TJ_API tj_value_t tj_graph_attention_lse(tj_graph_t* graph, tj_value_t q,
                                         tj_value_t k, tj_value_t mask,
                                         double scale, bool causal);
// g = dL/dy [B..., H, Tq, Dv] (q's dtype), lse from attention_lse and
// delta [B..., H, Tq] = sum_e g y (lse's dtype); ds = p (g v^T - delta):
// attention_dq: dq = scale ds k, [B..., H, Tq, D] of q's dtype.
TJ_API tj_value_t tj_graph_attention_dq(tj_graph_t* graph, tj_value_t q,
                                        tj_value_t k, tj_value_t v,
                                        tj_value_t mask, tj_value_t g,
                                        tj_value_t lse, tj_value_t delta,
                                        double scale, bool causal);
// attention_dkv: dk = scale ds^T q and dv = p^T g side by side along the
// last axis, [B..., Hkv, Tk, D + Dv] of q's dtype, each summed over the H /
// Hkv query heads that share a kv head (B... the broadcast batch dims: sum
// them to k's and v's own).
TJ_API tj_value_t tj_graph_attention_dkv(tj_graph_t* graph, tj_value_t q,
                                         tj_value_t k, tj_value_t v,
                                         tj_value_t mask, tj_value_t g,
                                         tj_value_t lse, tj_value_t delta,
                                         double scale, bool causal);

//===--- quantization (issue 17) ---===//

// The attributes of quantize and dequantize (ONNX QuantizeLinear and
// DequantizeLinear, opsets 10 to 23). Zeroed: axis 0, no block size,
// saturating, not int4; quantize needs |dtype| set.
typedef enum tj_int4_e {
  TJ_INT4_NONE = 0,
  TJ_INT4_SIGNED = 1,    // [-8, 7]
  TJ_INT4_UNSIGNED = 2,  // [0, 15]
} tj_int4_t;

typedef struct tj_quant_attrs_t {
  tj_dtype_t dtype;    // quantize: I8, U8, I16, U16, F8E4M3, F8E5M2 (U8
                       // for int4)
  int32_t axis;        // the per-axis or blocked axis (negative: from the
                       // back); ignored for a rank-0 scale
  int64_t block_size;  // > 0: blocked along |axis|; 0: per tensor or axis
  bool no_saturate;    // float8: out of range gives NaN (e4m3) or +-inf
                       // (e5m2) instead of +-max (ONNX saturate=0)
  tj_int4_t int4;      // packed int4 in a u8 tensor (see below)
  bool odd;            // dequantize of int4: the logical last dim is
                       // 2 * packed - 1 (the last high nibble is padding)
} tj_quant_attrs_t;

// q = saturate(round_half_even(x / scale) + zero_point) for integer
// dtypes (i8 [-128, 127], u8 [0, 255], i16, u16, int4 [-8, 7] or [0, 15]); q =
// float8(x / scale + zero_point), rounding to nearest even, saturating to
// +-max unless |no_saturate|. x is float; x / scale is computed in f32 (f64
// for f64 x). The scale's shape gives the granularity: rank 0 per tensor;
// 1-D of x's dim along |axis| per axis; x's rank with ceil(D / block_size)
// along |axis| and x's dims elsewhere, blocked (the blocked dim must be
// constant). |zero_point| is none or of the scale's shape and q's dtype
// (int4: i8 for signed, u8 for unsigned, one value per byte). int4 packs
// two values a byte along the last axis (constant), the even element in
// the low nibble (ONNX's order): q is u8 with ceil(D / 2) there (an odd D
// pads the last high nibble with 0). Errors (sticky, naming the op): a
// non-float x or scale, a dtype that is not quantized, a scale or zero
// point of the wrong shape or dtype.
TJ_API tj_value_t tj_graph_quantize(tj_graph_t* graph, tj_value_t x,
                                    tj_value_t scale, tj_value_t zero_point,
                                    const tj_quant_attrs_t* attrs);
// y = (q - zero_point) * scale, of the scale's (float) dtype, computed in
// f32 (f64 for an f64 scale). q is i8, u8, i16, u16, i32 (no zero point),
// float8 (e4m3, e5m2), or
// packed int4 (u8 with |attrs->int4|; y's last dim is twice q's, less one
// when |odd|). Scale and zero point as for tj_graph_quantize. |attrs| may
// be NULL: axis 0, no block size, not int4 (|attrs->dtype| is unused).
TJ_API tj_value_t tj_graph_dequantize(tj_graph_t* graph, tj_value_t q,
                                      tj_value_t scale, tj_value_t zero_point,
                                      const tj_quant_attrs_t* attrs);

//===--- reading a graph ---===//

// The graph's name (tj_graph_create's, or the .tj function's after '@');
// borrowed, valid as long as the graph. NULL for a NULL graph.
TJ_API const char* tj_graph_name(const tj_graph_t* graph);

// Number of inputs and outputs declared so far.
TJ_API int32_t tj_graph_num_inputs(const tj_graph_t* graph);
TJ_API int32_t tj_graph_num_outputs(const tj_graph_t* graph);
// The |index|th input or output value; none when out of range.
TJ_API tj_value_t tj_graph_input_value(const tj_graph_t* graph, int32_t index);
TJ_API tj_value_t tj_graph_output_value(const tj_graph_t* graph, int32_t index);
// Name of the |index|th input/output; borrowed, valid as long as the graph.
TJ_API const char* tj_graph_input_name(const tj_graph_t* graph, int32_t index);
TJ_API const char* tj_graph_output_name(const tj_graph_t* graph, int32_t index);
// True when output |index|'s shape has a dim that an op sets at run time
// (tj_graph_nonzero, tj_graph_unique, a custom op's tj_custom_dynamic_dim):
// read such a graph's outputs with tj_executable_run_shaped. False for a
// NULL graph or an index out of range. Available since: 0.1 (session 25).
TJ_API bool tj_graph_output_is_data_dependent(const tj_graph_t* graph,
                                              int32_t index);
// dtype and rank of |value|; -1 for rank of an invalid value.
TJ_API tj_dtype_t tj_graph_value_dtype(const tj_graph_t* graph,
                                       tj_value_t value);
TJ_API int32_t tj_graph_value_rank(const tj_graph_t* graph, tj_value_t value);
// Copies |value|'s dims (constants or symbolic dims) into |out_dims|, which
// has room for TJ_MAX_RANK entries.
TJ_API void tj_graph_value_dims(const tj_graph_t* graph, tj_value_t value,
                                int64_t* out_dims);

//===--- the op table ---===//

// For bindings and tools: the ops of lib/ops.def, numbered 0 to
// tj_op_count() - 1. The numbering may change between versions; the names
// do not.

// How an op's builder, tj_graph_<tj_op_builder(op)>, is called.
typedef enum tj_op_form_e {
  TJ_OP_FORM_OWN = 0,     // its own signature, declared above
  TJ_OP_FORM_UNARY = 1,   // (tj_graph_t*, tj_value_t a)
  TJ_OP_FORM_BINARY = 2,  // (tj_graph_t*, tj_value_t a, tj_value_t b)
  TJ_OP_FORM_REDUCE = 3,  // (tj_graph_t*, tj_value_t a, int32_t num_axes,
                          //  const int32_t* axes, bool keepdims)
} tj_op_form_t;

TJ_API int32_t tj_op_count(void);
// The .tj spelling of |op| ("not"); static storage. NULL out of range.
TJ_API const char* tj_op_name(int32_t op);
// The builder's name after "tj_graph_" ("logical_not"); static storage.
// NULL out of range.
TJ_API const char* tj_op_builder(int32_t op);
// The builder's form; TJ_OP_FORM_OWN out of range.
TJ_API tj_op_form_t tj_op_form(int32_t op);

//===--- text form ---===//

// Prints |graph| in the .tj text form (grammar: docs/tj-text-format.md).
// On success |*out_text| is a NUL-terminated string owned by the caller
// (tj_context_free_string); on failure it is NULL.
TJ_API tj_status_t tj_graph_print(const tj_graph_t* graph, char** out_text);

// Parses one function of .tj text (|length| bytes; need not be
// NUL-terminated) into a new finalized graph. |filename| (may be NULL) is
// used in error messages, which give line:column. On success |*out_graph| is
// owned by the caller; on failure it is NULL.
TJ_API tj_status_t tj_graph_parse(tj_context_t* context, const char* text,
                                  size_t length, const char* filename,
                                  tj_graph_t** out_graph);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TENSORJIT_TJ_GRAPH_H_
