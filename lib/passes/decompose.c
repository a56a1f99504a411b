// lib/passes/decompose.c
//
// Rewrites every composite op (ops.def kind COMPOSITE) into core ops, so
// that fusion sees plain pointwise ops and reductions and a backend needs no
// kernel per composite. matmul stays whole (it is core); linear becomes
// matmul + add, whose add then fuses into the matmul's epilogue.
//
//   gelu (erf)  x * erfc(x * -sqrt(1/2)) * 0.5                      4 ops
//   gelu (tanh) x * sigmoid(x * (c0 + c1 * x * x)),                 6 ops
//               c0 = 2 sqrt(2/pi), c1 = c0 * 0.044715: the tanh form, as
//               0.5 (1 + tanh(z)) == sigmoid(2 z); no 1 + tanh(z)
//               cancellation for negative x, and one op fewer.
//   silu        x * sigmoid(x)
//   softmax     m = max(x, axis); e = exp(x - m); e / sum(e, axis)
//   log_softmax d = x - max(x, axis); d - log(sum(exp(d), axis))
//   layer_norm  s a value of the row (its first, or its max), c = x - (s +
//               mean(x - s)); (c - mean(c)) * rsqrt(mean(c * c) + eps)
//               * gamma + beta
//   rms_norm    x * rsqrt(mean(x * x) + eps) * gamma
//   linear      matmul(x, w) + b
//   attention   s = (q @ k^T) * scale, masked (where / add, causal by iota
//               compares); m = max(s) (0 where -inf); e = exp(s - m);
//               (e @ v) / sum(e) (1 where 0: a row with no key gives 0).
//               Grouped-query attention splits q [.., H, Tq, D] to
//               [.., Hkv, G, Tq, D] and gives k and v a G axis of 1 that
//               the two matmuls broadcast, so k and v are never repeated
//               and no reshape merges a computed value. Kept whole where the
//               target says it runs it natively (tj_pass_ctx_t.native_op: the
//               flash kernels of x86 and, for f16/bf16 at head dims 64/128,
//               CUDA).
//   attention_lse, attention_dq, attention_dkv (attention's backward,
//               fabwd): the scores as above, log(sum(exp(s - m))) + m for
//               lse; p = exp(s - lse), ds = p (g @ v^T - delta), dq =
//               scale ds @ k, [dk | dv] = concat(scale ds^T @ q, p^T @ g);
//               grouped-query heads on [.., Hkv, G, Tq, n] views (below).
//               When lse is attention_lse of the node's own scores (as
//               the VJP builds it), p is their softmax instead, and the
//               lse node drops out.
//   argtopk     (not a composite) with k <= 16: k selection passes of
//               row reductions; else on rows of constant length <= 256:
//               the rank of each element by a fused compare-and-sum, then
//               each output position's index by a second sum (below).
//               Neither where the target sorts the rows natively
//               (native_op: x86's argtopk host kernel on long rows past a
//               few k), unless TJ_NATIVE_TOPK=off.
//   concat      (not a composite) of more than 8 values: a tree of
//               concats of at most 8 each, what one kernel reads.
// Reductions keep their dims, so the epilogue broadcasts elementwise and the
// whole composite fuses into one reduction group.
//
// Precision: the reference computes a composite in double and rounds once;
// a chain of f16/bf16 ops would round at every step (and 1 + erf(x) cancels
// for negative x). So for f16/bf16 every composite except linear computes in
// f32 between a cast in and a cast out, as production compilers upcast
// half-precision pointwise math; fusion makes the casts free.
// (ctx->decompose_upcast_half turns this off for the scoreboard's model of
// op-by-op execution, where each op upcasts inside its own kernel.)
//
// Requires: nothing.  Preserves: inputs, outputs, symbols, guards.
// Invalidates: fusion groups, memory plan.  Idempotent (no composite is
// left, and an argtopk left whole has k > 16 on a long or symbolic row, or
// is one the target sorts natively; no concat is wider than 8).

#include <math.h>
#include <string.h>

#include "lib/dtype.h"
#include "lib/env.h"
#include "lib/passes/pass.h"
#include "lib/passes/quant.h"
#include "lib/window.h"

typedef struct dec_t {
  tj_rewriter_t rw;
  bool upcast_half;
} dec_t;

static tj_status_t op1(dec_t* d, tj_op_t op, uint32_t a, uint32_t* out) {
  return tj_rewriter_op(&d->rw, op, 1, &a, out);
}

static bool matmul_by_reduction(const tj_node_t* node);
static tj_status_t matmul_reduction(dec_t* d, const tj_node_t* node, uint32_t a,
                                    uint32_t b, uint32_t* out);

// A matmul made here (attention's, linear's) of a dtype no GEMM template
// takes becomes the reduction too; the matmul node left behind is dead.
static tj_status_t op2(dec_t* d, tj_op_t op, uint32_t a, uint32_t b,
                       uint32_t* out) {
  uint32_t ops[2] = {a, b};
  TJ_RETURN_IF_ERROR(tj_rewriter_op(&d->rw, op, 2, ops, out));
  if (op != TJ_OP_MATMUL) return NULL;
  tj_node_t made = d->rw.dst->nodes[*out];  // appends may move the array
  if (!matmul_by_reduction(&made)) return NULL;
  return matmul_reduction(d, &made, a, b, out);
}

static tj_status_t cast(dec_t* d, uint32_t a, tj_dtype_t dtype, uint32_t* out) {
  if (d->rw.dst->nodes[a].dtype == dtype) {
    *out = a;
    return NULL;
  }
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_CAST;
  desc.num_operands = 1;
  desc.operands = &a;
  desc.dtype = dtype;
  return tj_rewriter_append(&d->rw, &desc, out);
}

static tj_status_t where(dec_t* d, uint32_t c, uint32_t a, uint32_t b,
                         uint32_t* out) {
  uint32_t ops[3] = {c, a, b};
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_WHERE;
  desc.num_operands = 3;
  desc.operands = ops;
  return tj_rewriter_append(&d->rw, &desc, out);
}

// A reduction over one axis, keeping it where |keepdims|.
static tj_status_t reduce_axis(dec_t* d, tj_op_t op, uint32_t a, int64_t axis,
                               bool keepdims, uint32_t* out) {
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = op;
  desc.num_operands = 1;
  desc.operands = &a;
  desc.attrs.ints = &axis;
  desc.attrs.num_ints = 1;
  desc.attrs.keepdims = keepdims;
  return tj_rewriter_append(&d->rw, &desc, out);
}

// A reduction over one axis, keeping it.
static tj_status_t reduce(dec_t* d, tj_op_t op, uint32_t a, int64_t axis,
                          uint32_t* out) {
  return reduce_axis(d, op, a, axis, true, out);
}

// a (op) scalar c of a's dtype.
static tj_status_t op_c(dec_t* d, tj_op_t op, uint32_t a, double c,
                        uint32_t* out) {
  uint32_t k;
  TJ_RETURN_IF_ERROR(
      tj_rewriter_scalar(&d->rw, d->rw.dst->nodes[a].dtype, c, &k));
  return op2(d, op, a, k, out);
}

static tj_status_t reshape(dec_t* d, uint32_t a, int32_t rank,
                           const int64_t* dims, uint32_t* out) {
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_RESHAPE;
  desc.num_operands = 1;
  desc.operands = &a;
  desc.dtype = d->rw.dst->nodes[a].dtype;
  desc.rank = rank;
  desc.dims = dims;
  return tj_rewriter_append(&d->rw, &desc, out);
}

// A one-operand op whose only attribute is its ints (transpose's
// permutation; slice's starts, stops and steps).
static tj_status_t op_ints(dec_t* d, tj_op_t op, uint32_t a,
                           const int64_t* ints, int64_t num_ints,
                           uint32_t* out) {
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = op;
  desc.num_operands = 1;
  desc.operands = &a;
  desc.attrs.ints = (int64_t*)ints;
  desc.attrs.num_ints = (uint32_t)num_ints;
  return tj_rewriter_append(&d->rw, &desc, out);
}

static tj_status_t transpose(dec_t* d, uint32_t a, int32_t rank,
                             const int64_t* perm, uint32_t* out) {
  return op_ints(d, TJ_OP_TRANSPOSE, a, perm, rank, out);
}

static const double kSqrtHalf = 0.70710678118654752440084436210485;
static const double kTwoSqrt2OverPi = 1.5957691216057307117597842397375;

static tj_status_t gelu(dec_t* d, uint32_t x, bool approximate, uint32_t* out) {
  uint32_t a, b, e;
  if (!approximate) {
    // 1 + erf(x / sqrt 2) would cancel to 0 below x = -5.7 in f32;
    // erfc(-x / sqrt 2) is the same sum, accurate there.
    TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_MUL, x, -kSqrtHalf, &a));
    TJ_RETURN_IF_ERROR(op1(d, TJ_OP_ERFC, a, &e));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, x, e, &b));
    return op_c(d, TJ_OP_MUL, b, 0.5, out);
  }
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, x, x, &a));
  TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_MUL, a, kTwoSqrt2OverPi * 0.044715, &b));
  TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_ADD, b, kTwoSqrt2OverPi, &a));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, x, a, &b));
  TJ_RETURN_IF_ERROR(op1(d, TJ_OP_SIGMOID, b, &e));
  return op2(d, TJ_OP_MUL, x, e, out);
}

static tj_status_t softmax(dec_t* d, uint32_t x, int64_t axis, bool log,
                           uint32_t* out) {
  uint32_t m, diff, e, s, l;
  TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_MAX, x, axis, &m));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_SUB, x, m, &diff));
  TJ_RETURN_IF_ERROR(op1(d, TJ_OP_EXP, diff, &e));
  TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_SUM, e, axis, &s));
  if (!log) return op2(d, TJ_OP_DIV, e, s, out);
  TJ_RETURN_IF_ERROR(op1(d, TJ_OP_LOG, s, &l));
  return op2(d, TJ_OP_SUB, diff, l, out);
}

// The shift s of layer_norm's rows (tj_layer_norm_shifts_by_first), kept
// as a dim of 1.
static tj_status_t row_value(dec_t* d, uint32_t x, uint32_t* out) {
  const tj_node_t* n = &d->rw.dst->nodes[x];
  const int32_t rank = n->rank;
  if (!tj_layer_norm_shifts_by_first(rank, n->dims)) {
    return reduce(d, TJ_OP_MAX, x, rank - 1, out);
  }
  int64_t sl[3 * TJ_MAX_RANK];
  for (int32_t k = 0; k < rank; ++k) {
    sl[k] = 0;
    sl[rank + k] = k == rank - 1 ? 1 : INT64_MAX;
    sl[2 * rank + k] = 1;
  }
  return op_ints(d, TJ_OP_SLICE, x, sl, 3 * rank, out);
}

// layer_norm (center: shifted data, see tj_layer_norm_shifts_by_first) /
// rms_norm over the last axis.
static tj_status_t norm(dec_t* d, uint32_t x, uint32_t gamma, uint32_t beta,
                        double eps, bool center, uint32_t* out) {
  int64_t axis = d->rw.dst->nodes[x].rank - 1;
  uint32_t shift, mu, c = x, centred = x, sq, var, r, y;
  if (center) {
    // m = s + mean(x - s), c = x - m, then c - mean(c): the corrected
    // two-pass form on shifted data. mean(x - s) is rounded at s's scale
    // (an error shared by the whole row, large when s is far from the
    // rest); mean(c) sums values of the row's spread and measures it.
    // Centring x itself on m, rather than x - s, keeps each element's
    // rounding at the spread's scale, and a row of equal values still
    // centres to exact zeros (x - s = 0, m = s). mean(c * c) is left as it
    // is: the shared error adds its square, far below its rounding.
    TJ_RETURN_IF_ERROR(row_value(d, x, &shift));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_SUB, x, shift, &c));
    TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_MEAN, c, axis, &mu));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_ADD, shift, mu, &mu));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_SUB, x, mu, &c));
    TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_MEAN, c, axis, &mu));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_SUB, c, mu, &centred));
  }
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, c, c, &sq));
  TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_MEAN, sq, axis, &var));
  TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_ADD, var, eps, &r));
  TJ_RETURN_IF_ERROR(op1(d, TJ_OP_RSQRT, r, &r));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, centred, r, &y));
  tj_dtype_t dtype = d->rw.dst->nodes[x].dtype;
  if (gamma != TJ_NODE_NONE) {
    TJ_RETURN_IF_ERROR(cast(d, gamma, dtype, &gamma));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, y, gamma, &y));
  }
  if (beta != TJ_NODE_NONE) {
    TJ_RETURN_IF_ERROR(cast(d, beta, dtype, &beta));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_ADD, y, beta, &y));
  }
  *out = y;
  return NULL;
}

// opsmisc: one_hot(indices, values) of y's shape and dtype:
//   i = indices (i64), i + depth where negative, with a 1 inserted at axis
//   y = where(i == iota(axis), values[1], values[0])
// all elementwise over y's shape (one kernel with its consumers); depth is
// a scalar, or for a symbolic depth the sum of a [depth] vector of ones.
static tj_status_t one_hot(dec_t* d, const tj_node_t* node, uint32_t ix,
                           uint32_t values, uint32_t* out) {
  const int32_t rank = node->rank;
  const int64_t axis = node->attrs.axis, depth = node->dims[axis];
  tj_node_desc_t desc;
  uint32_t i, n, zero, neg, wrapped, io, eq, on, off;
  TJ_RETURN_IF_ERROR(cast(d, ix, TJ_DTYPE_I64, &i));
  if (tj_dim_is_const(depth)) {
    TJ_RETURN_IF_ERROR(
        tj_rewriter_scalar(&d->rw, TJ_DTYPE_I64, (double)depth, &n));
  } else {
    uint32_t ones;
    memset(&desc, 0, sizeof(desc));
    desc.op = TJ_OP_FULL;
    desc.dtype = TJ_DTYPE_I64;
    desc.rank = 1;
    desc.dims = &depth;
    desc.attrs.value = 1.0;
    TJ_RETURN_IF_ERROR(tj_rewriter_append(&d->rw, &desc, &ones));
    int64_t zero_axis = 0;
    memset(&desc, 0, sizeof(desc));
    desc.op = TJ_OP_SUM;
    desc.num_operands = 1;
    desc.operands = &ones;
    desc.attrs.ints = &zero_axis;
    desc.attrs.num_ints = 1;
    TJ_RETURN_IF_ERROR(tj_rewriter_append(&d->rw, &desc, &n));
  }
  TJ_RETURN_IF_ERROR(tj_rewriter_scalar(&d->rw, TJ_DTYPE_I64, 0.0, &zero));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_LT, i, zero, &neg));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_ADD, i, n, &wrapped));
  TJ_RETURN_IF_ERROR(where(d, neg, wrapped, i, &i));
  int64_t dims[TJ_MAX_RANK];
  for (int32_t k = 0; k < rank; ++k) dims[k] = k == axis ? 1 : node->dims[k];
  TJ_RETURN_IF_ERROR(reshape(d, i, rank, dims, &i));
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_IOTA;
  desc.dtype = TJ_DTYPE_I64;
  desc.rank = rank;
  desc.dims = node->dims;
  desc.attrs.axis = axis;
  TJ_RETURN_IF_ERROR(tj_rewriter_append(&d->rw, &desc, &io));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_EQ, i, io, &eq));
  // values[0] and values[1] as scalars.
  int64_t one = 1, start0 = 0, start1 = 1, stop0 = 1, stop1 = 2;
  for (int pick = 0; pick < 2; ++pick) {
    int64_t sl[3] = {pick ? start1 : start0, pick ? stop1 : stop0, one};
    uint32_t s;
    TJ_RETURN_IF_ERROR(op_ints(d, TJ_OP_SLICE, values, sl, 3, &s));
    TJ_RETURN_IF_ERROR(reshape(d, s, 0, NULL, pick ? &on : &off));
  }
  return where(d, eq, on, off, out);
}

//===--- convolution and pooling (lib/window.h) ---===//
//
// conv (x [N, C, S...], w [O, C/G, K...]):
//   xp = pad(x, low, high, 0), materialized once; for each of the T =
//   prod K kernel taps a strided slice of xp (start k*d, step s): the
//   taps' [N, G, Cg, L] (L = prod out); im2col = concat of the taps along
//   Cg (8 taps a chunk, one GEMM each, summed) -> [N, G, T*Cg, L]; y =
//   matmul(w regrouped [G, Og, T*Cg] (folded: w is constant in a model),
//   im2col) [N, G, Og, L], + bias as [G, Og, 1] (the GEMM's epilogue),
//   reshaped to [N, O, out...]: channels first throughout, no transpose.
//   A 1x1 kernel needs no pad nor concat: with stride 1 it is reshape +
//   matmul; with one output position (squeeze-excite's FCs) x [N, C] @
//   w^T, one GEMM of M = N rather than N of one column. Depthwise with one
//   output per channel (Cg = Og = 1) is sum over taps of tap * w[:, tap]
//   instead: one pointwise kernel, no GEMM of M = 1.
// pools: the taps of x padded with -inf (max) or 0 (avg, lp; |x|^p taken
//   first), folded with maximum or add: one pointwise kernel; avg multiplies
//   by 1 / the tap count (a scalar, or a constant [out...] when the count
//   varies at the borders), lp takes the 1/p-th power. ceil_mode pads the
//   end further so that the last window's taps exist.
// conv_transpose: the conv (stride 1, dilation d) of x with s - 1 zeros
//   inserted between elements (reshape [.., S, 1], pad to [.., S, s],
//   reshape, slice) and padded by d (K - 1) - low, d (K - 1) - high +
//   output_padding (a slice where negative), with w flipped (a concat of its
//   kernel slices in reverse) and regrouped to [O, C/G, K...]. It computes
//   s^n times the products of the scatter form (most against inserted
//   zeros): correct, not fast.

enum { kMaxTaps = 4096 };

static tj_status_t win_pad(dec_t* d, uint32_t x, const int64_t* low,
                           const int64_t* high, double value, uint32_t* out) {
  const tj_node_t* node = &d->rw.dst->nodes[x];
  bool any = false;
  for (int32_t i = 0; i < node->rank; ++i) any |= low[i] || high[i];
  if (!any) {
    *out = x;
    return NULL;
  }
  int64_t ints[2 * TJ_MAX_RANK];
  for (int32_t i = 0; i < node->rank; ++i) {
    ints[i] = low[i];
    ints[node->rank + i] = high[i];
  }
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_PAD;
  desc.num_operands = 1;
  desc.operands = &x;
  desc.attrs.ints = ints;
  desc.attrs.num_ints = (uint32_t)(2 * node->rank);
  desc.attrs.value = value;
  return tj_rewriter_append(&d->rw, &desc, out);
}

// x[..., start : start + (count - 1) * step + 1 : step] on the spatial axes
// (2 on); the leading axes whole.
static tj_status_t win_slice(dec_t* d, uint32_t x, const int64_t* start,
                             const int64_t* count, const int64_t* step,
                             uint32_t* out) {
  const tj_node_t* node = &d->rw.dst->nodes[x];
  const int32_t rank = node->rank;
  bool whole = true;
  int64_t ints[3 * TJ_MAX_RANK];
  for (int32_t i = 0; i < rank; ++i) {
    ints[i] = 0;
    ints[rank + i] = INT64_MAX;
    ints[2 * rank + i] = 1;
    if (i < 2) continue;
    int64_t a = start[i - 2], n = count[i - 2], st = step[i - 2];
    ints[i] = a;
    ints[rank + i] = a + (n - 1) * st + 1;
    ints[2 * rank + i] = st;
    whole &= a == 0 && st == 1 && node->dims[i] == n;
  }
  if (whole) {
    *out = x;
    return NULL;
  }
  return op_ints(d, TJ_OP_SLICE, x, ints, 3 * rank, out);
}

// The lowering takes concats of at most kConcatArity values in one kernel:
// more become a tree of concats (|values| is overwritten).
enum { kConcatArity = 8 };

// A conv's GEMM of a shorter K than this (a chunk of kConcatArity taps of
// few channels) costs more in its pass over y than in its products.
enum { kNarrowK = 256 };

static tj_status_t concat_n(dec_t* d, uint32_t count, uint32_t* values,
                            int64_t axis, uint32_t* out) {
  while (count > 1) {
    uint32_t next = 0;
    for (uint32_t i = 0; i < count; i += kConcatArity) {
      uint32_t m = count - i < kConcatArity ? count - i : kConcatArity;
      if (m == 1) {
        values[next++] = values[i];
        continue;
      }
      tj_node_desc_t desc;
      memset(&desc, 0, sizeof(desc));
      desc.op = TJ_OP_CONCAT;
      desc.num_operands = m;
      desc.operands = values + i;
      desc.attrs.axis = axis;
      uint32_t joined;
      TJ_RETURN_IF_ERROR(tj_rewriter_append(&d->rw, &desc, &joined));
      values[next++] = joined;
    }
    count = next;
  }
  *out = values[0];
  return NULL;
}

// A concat of more than kConcatArity values (densenet121's dense blocks
// join up to 25 feature maps in one torch.cat): one kernel reads at most
// kConcatArity, so a wider one (alone, a graph break on the reference
// interpreter) becomes the tree of concats that concat_n makes.
static bool concat_wide(const tj_node_t* node) {
  return node->op == TJ_OP_CONCAT && node->num_operands > kConcatArity;
}

static tj_status_t concat_tree(dec_t* d, const tj_node_t* node, uint32_t* out) {
  const size_t bytes = node->num_operands * sizeof(uint32_t);
  uint32_t* values = tj_alloc(d->rw.allocator, bytes);
  if (!values) return tj_status_oom();
  for (uint32_t k = 0; k < node->num_operands; ++k)
    values[k] = d->rw.map[node->operands[k]];
  tj_status_t status =
      concat_n(d, node->num_operands, values, node->attrs.axis, out);
  tj_free(d->rw.allocator, values, bytes);
  return status;
}

// The kernel taps in row-major order: tap t's offset along spatial axis i.
static void tap_offsets(int32_t n, const int64_t* kernel, int64_t t,
                        int64_t* k) {
  for (int32_t i = n - 1; i >= 0; --i) {
    k[i] = t % kernel[i];
    t /= kernel[i];
  }
}

static tj_status_t check_taps(const tj_node_t* node, uint32_t index,
                              const tj_window_t* w, int64_t* out_taps) {
  int64_t taps = 1;
  for (int32_t i = 0; i < w->n; ++i) {
    taps *= w->kernel[i];
    if (taps > kMaxTaps)
      return tj_status_make(TJ_STATUS_UNSUPPORTED,
                            "%s (node %%%u): a window of more than %d taps",
                            tj_op_info(node->op)->name, index, kMaxTaps);
  }
  *out_taps = taps;
  return NULL;
}

// How many taps from |t0| one im2col kernel can join: the lowering cuts a
// kernel into boxes where a pad's bounds fall (per spatial axis, where a
// tap's first and past-last valid output positions are) and where the
// concat's pieces meet, and takes at most MAX_BOXES (64) boxes and 8
// segments per axis (kir/lower_internal.h).
static int64_t chunk_taps(const tj_window_t* w, const int64_t* in_dims,
                          const int64_t* out_dims, int64_t t0, int64_t taps) {
  enum { kMaxBoxes = 64, kMaxSegments = 8 };
  int64_t cuts[3][2 * kConcatArity];
  int32_t num_cuts[3] = {0, 0, 0};
  int64_t tc = 0;
  while (t0 + tc < taps && tc < kConcatArity) {
    int64_t k[3];
    tap_offsets(w->n, w->kernel, t0 + tc, k);
    int64_t trial[3][2 * kConcatArity];
    int32_t num_trial[3];
    int64_t boxes = tc + 1;
    bool fits = true;
    for (int32_t i = 0; i < w->n; ++i) {
      memcpy(trial[i], cuts[i], sizeof(cuts[i]));
      num_trial[i] = num_cuts[i];
      const int64_t o = k[i] * w->dilations[i] - (w->low ? w->low[i] : 0);
      const int64_t s = w->strides[i], size = in_dims[i];
      // Valid output positions j: 0 <= o + j s < size.
      int64_t j0 = o >= 0 ? 0 : (-o + s - 1) / s;
      int64_t j1 = o < size ? (size - 1 - o) / s + 1 : 0;  // past-last
      const int64_t edge[2] = {j0, j1};
      for (int e = 0; e < 2; ++e) {
        if (edge[e] <= 0 || edge[e] >= out_dims[i]) continue;
        bool seen = false;
        for (int32_t c = 0; c < num_trial[i]; ++c)
          seen |= trial[i][c] == edge[e];
        if (!seen) trial[i][num_trial[i]++] = edge[e];
      }
      fits &= num_trial[i] + 1 <= kMaxSegments;
      boxes *= num_trial[i] + 1;
    }
    if (tc > 0 && (!fits || boxes > kMaxBoxes)) break;
    for (int32_t i = 0; i < w->n; ++i) {
      memcpy(cuts[i], trial[i], sizeof(cuts[i]));
      num_cuts[i] = num_trial[i];
    }
    ++tc;
  }
  return tc;
}

static tj_status_t materialize(dec_t* d, uint32_t a, tj_op_t combine,
                               uint32_t* out);

// The channels-first conv of |x| ([N, C, S...], concrete C and S) and |wt|
// ([O, C/G, K...]) with window |w| (pads applied by the caller when
// |w|->low is NULL) and optional |bias|; the result in |*out|.
static tj_status_t conv_core(dec_t* d, uint32_t index, uint32_t x, uint32_t wt,
                             uint32_t bias, const tj_window_t* w,
                             const int64_t* out_dims, uint32_t* out) {
  const tj_node_t* src = &d->rw.src->nodes[index];
  const int32_t n = w->n, rank = n + 2;
  const tj_node_t* xn = &d->rw.dst->nodes[x];
  for (int32_t i = 2; i < rank; ++i) {
    if (!tj_dim_is_const(xn->dims[i]))
      return tj_status_make(TJ_STATUS_UNSUPPORTED,
                            "%s (node %%%u): decomposing needs constant "
                            "spatial sizes (x is symbolic on axis %d)",
                            tj_op_info(src->op)->name, index, (int)i);
  }
  int64_t taps = 1;
  TJ_RETURN_IF_ERROR(check_taps(src, index, w, &taps));
  const int64_t channels = xn->dims[1];
  const int64_t out_c = d->rw.dst->nodes[wt].dims[0];
  int64_t in_dims[3];  // (appends move the node array: copy now)
  for (int32_t i = 0; i < n; ++i) in_dims[i] = xn->dims[2 + i];
  const int64_t groups = w->groups, cg = channels / groups, og = out_c / groups;
  int64_t low[TJ_MAX_RANK] = {0}, high[TJ_MAX_RANK] = {0}, plane = 1;
  for (int32_t i = 0; i < n; ++i) {
    low[2 + i] = w->low ? w->low[i] : 0;
    high[2 + i] = w->high ? w->high[i] : 0;
    plane *= out_dims[i];
  }
  uint32_t xp;
  TJ_RETURN_IF_ERROR(win_pad(d, x, low, high, 0, &xp));
  // A padded GEMM conv reads its taps from the padded x made once (a
  // kernel of x's size): the taps are then plain strided views, so the
  // im2col concat needs no pad boxes (8 taps a chunk) and the GEMM's M is
  // every output position, not only the last axis's (M = 7 at ResNet's
  // 7x7 layers, each GEMM row block a call of its own).
  tj_window_t wm = *w;
  if (xp != x && !(cg == 1 && og == 1)) {
    uint32_t made;
    TJ_RETURN_IF_ERROR(materialize(d, xp, TJ_OP_ADD, &made));
    if (made == xp)  // only past TJ_MAX_RANK - 1 dims, and conv has <= 5
      return tj_internal(
          "conv (node %%%u): the padded x of rank %d is not "
          "materialized",
          index, (int)rank);
    x = xp = made;
    wm.low = wm.high = NULL;
    for (int32_t i = 0; i < n; ++i) in_dims[i] += low[2 + i] + high[2 + i];
    w = &wm;
  }
  uint32_t tap_nodes[kMaxTaps];
  for (int64_t t = 0; t < taps; ++t) {
    int64_t k[3], start[3];
    tap_offsets(n, w->kernel, t, k);
    for (int32_t i = 0; i < n; ++i) start[i] = k[i] * w->dilations[i];
    TJ_RETURN_IF_ERROR(
        win_slice(d, xp, start, out_dims, w->strides, &tap_nodes[t]));
  }
  int64_t shape[TJ_MAX_RANK];
  uint32_t y = TJ_NODE_NONE;
  if (cg == 1 && og == 1) {
    // Depthwise: y = sum_t tap_t * w[:, t] (w as [C, 1..., T] columns).
    int64_t wshape[TJ_MAX_RANK];
    wshape[0] = channels;
    for (int32_t i = 0; i < n; ++i) wshape[1 + i] = 1;
    wshape[1 + n] = taps;
    uint32_t wr;
    TJ_RETURN_IF_ERROR(reshape(d, wt, n + 2, wshape, &wr));
    for (int64_t t = 0; t < taps; ++t) {
      int64_t ints[3 * TJ_MAX_RANK];
      for (int32_t i = 0; i < n + 2; ++i) {
        ints[i] = i == n + 1 ? t : 0;
        ints[n + 2 + i] = i == n + 1 ? t + 1 : INT64_MAX;
        ints[2 * (n + 2) + i] = 1;
      }
      uint32_t wcol, prod;
      TJ_RETURN_IF_ERROR(op_ints(d, TJ_OP_SLICE, wr, ints, 3 * (n + 2), &wcol));
      TJ_RETURN_IF_ERROR(reshape(d, wcol, n + 1, wshape, &wcol));
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, tap_nodes[t], wcol, &prod));
      if (t == 0) {
        // From the sum's own zero, +0, as the reference and the GEMM
        // paths: a -0 product alone (x = -0, or a padded tap times a
        // negative w) sums to +0.
        TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_ADD, prod, 0.0, &y));
      } else {
        TJ_RETURN_IF_ERROR(op2(d, TJ_OP_ADD, y, prod, &y));
      }
    }
    if (bias != TJ_NODE_NONE) {
      TJ_RETURN_IF_ERROR(reshape(d, bias, n + 1, wshape, &bias));
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_ADD, y, bias, &y));
    }
    *out = y;
    return NULL;
  }
  if (taps == 1 && groups == 1 && plane == 1) {
    // A 1x1 conv with one output position (squeeze-excite's two FCs after
    // its global pool): y [N, O] = x [N, C] @ w^T [C, O] (w^T folded for a
    // constant w), one GEMM of M = N. The [N, G, Og, L] form below would
    // be N GEMVs of L = 1 column, each reading all of w (MobileNetV3's
    // 576 -> 144 at batch 32: 1.5 ms, against 0.05 for this GEMM).
    shape[0] = TJ_DIM_INFER;
    shape[1] = cg;
    uint32_t col, wr;
    TJ_RETURN_IF_ERROR(reshape(d, tap_nodes[0], 2, shape, &col));
    shape[0] = og;
    TJ_RETURN_IF_ERROR(reshape(d, wt, 2, shape, &wr));
    const int64_t perm[2] = {1, 0};
    TJ_RETURN_IF_ERROR(transpose(d, wr, 2, perm, &wr));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, col, wr, &y));
    if (bias != TJ_NODE_NONE)
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_ADD, y, bias, &y));
  } else if (taps == 1) {
    // A 1x1 kernel (strided: a slice first): y [N, G, Og, L] =
    // w [G, Og, Cg] @ x [N, G, Cg, L]; no im2col, no transpose.
    shape[0] = TJ_DIM_INFER;
    shape[1] = groups;
    shape[2] = cg;
    shape[3] = plane;
    uint32_t col, wr;
    TJ_RETURN_IF_ERROR(reshape(d, tap_nodes[0], 4, shape, &col));
    shape[0] = groups;
    shape[1] = og;
    shape[2] = cg;
    TJ_RETURN_IF_ERROR(reshape(d, wt, 3, shape, &wr));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, wr, col, &y));
    if (bias != TJ_NODE_NONE) {
      shape[0] = groups;
      shape[1] = og;
      shape[2] = 1;
      TJ_RETURN_IF_ERROR(reshape(d, bias, 3, shape, &bias));
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_ADD, y, bias, &y));
    }
  } else {
    // im2col, channels first (the taps read x's rows as they lie: unit
    // stride, or a span load at stride 2 to 4): tap t as [N, G, Cg, L],
    // joined along Cg: col [N, G, T*Cg, L] (K tap-major); y [N, G, Og, L]
    // = w as [G, Og, T*Cg] @ col, as the 1x1 kernel's, whose result is
    // channels first already. More than a concat's taps are cut into
    // chunks, one GEMM each, summed (each sum the next GEMM's epilogue).
    for (int64_t t = 0; t < taps; ++t) {
      shape[0] = TJ_DIM_INFER;
      shape[1] = groups;
      shape[2] = cg;
      shape[3] = plane;
      TJ_RETURN_IF_ERROR(reshape(d, tap_nodes[t], 4, shape, &tap_nodes[t]));
    }
    // w [O, Cg, K...] = [G, Og, Cg, T] -> [G, Og, T, Cg].
    uint32_t wt4;
    shape[0] = groups;
    shape[1] = og;
    shape[2] = cg;
    shape[3] = taps;
    TJ_RETURN_IF_ERROR(reshape(d, wt, 4, shape, &wt4));
    {
      int64_t perm[4] = {0, 1, 3, 2};
      TJ_RETURN_IF_ERROR(op_ints(d, TJ_OP_TRANSPOSE, wt4, perm, 4, &wt4));
    }
    // Few channels (the RGB stem: 7x7 taps of 3): a GEMM a chunk would have
    // K = 8 Cg, too short to pay for its pass over y; the chunks' im2col
    // are made (materialized) and joined, so that one GEMM of K = T Cg
    // runs.
    const bool joined = taps > kConcatArity &&
                        taps <= kConcatArity * kConcatArity &&
                        cg * kConcatArity < kNarrowK;
    if (joined) {
      uint32_t chunks[kConcatArity], num_chunks = 0, col, wr;
      for (int64_t t0 = 0; t0 < taps; t0 += kConcatArity) {
        int64_t tc = taps - t0 < kConcatArity ? taps - t0 : kConcatArity;
        uint32_t part;
        TJ_RETURN_IF_ERROR(concat_n(d, (uint32_t)tc, tap_nodes + t0, 2, &part));
        TJ_RETURN_IF_ERROR(materialize(d, part, TJ_OP_ADD, &part));
        chunks[num_chunks++] = part;
      }
      TJ_RETURN_IF_ERROR(concat_n(d, num_chunks, chunks, 2, &col));
      shape[0] = groups;
      shape[1] = og;
      shape[2] = taps * cg;
      TJ_RETURN_IF_ERROR(reshape(d, wt4, 3, shape, &wr));
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, wr, col, &y));
    }
    for (int64_t t0 = 0, tc; !joined && t0 < taps; t0 += tc) {
      tc = chunk_taps(w, in_dims, out_dims, t0, taps);
      uint32_t col, wr = wt4, part;
      TJ_RETURN_IF_ERROR(concat_n(d, (uint32_t)tc, tap_nodes + t0, 2, &col));
      if (tc != taps) {
        int64_t ints[12] = {0,       0,         t0, 0, INT64_MAX, INT64_MAX,
                            t0 + tc, INT64_MAX, 1,  1, 1,         1};
        TJ_RETURN_IF_ERROR(op_ints(d, TJ_OP_SLICE, wr, ints, 12, &wr));
      }
      shape[0] = groups;
      shape[1] = og;
      shape[2] = tc * cg;
      TJ_RETURN_IF_ERROR(reshape(d, wr, 3, shape, &wr));
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, wr, col, &part));
      if (t0 == 0) {
        y = part;
      } else {
        TJ_RETURN_IF_ERROR(op2(d, TJ_OP_ADD, part, y, &y));
      }
    }
    if (bias != TJ_NODE_NONE) {
      shape[0] = groups;
      shape[1] = og;
      shape[2] = 1;
      TJ_RETURN_IF_ERROR(reshape(d, bias, 3, shape, &bias));
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_ADD, y, bias, &y));
    }
  }
  shape[0] = TJ_DIM_INFER;
  shape[1] = out_c;
  for (int32_t i = 0; i < n; ++i) shape[2 + i] = out_dims[i];
  return reshape(d, y, rank, shape, out);
}

// A constant of |dtype| and |rank| |dims| (concrete) holding |values|.
static tj_status_t constant_f64(dec_t* d, tj_dtype_t dtype, int32_t rank,
                                const int64_t* dims, const double* values,
                                int64_t count, uint32_t* out) {
  const size_t bytes = (size_t)count * tj_dtype_size(dtype);
  unsigned char* data = tj_alloc(d->rw.allocator, bytes ? bytes : 1);
  if (!data) return tj_status_oom();
  for (int64_t i = 0; i < count; ++i) tj_store_f64(dtype, data, i, values[i]);
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_CONSTANT;
  desc.dtype = dtype;
  desc.rank = rank;
  desc.dims = dims;
  desc.attrs.data = data;
  tj_status_t status = tj_rewriter_append(&d->rw, &desc, out);
  tj_free(d->rw.allocator, data, bytes ? bytes : 1);
  return status;
}

// avg_pool's 1 / (taps counted) per output position: a scalar when every
// window counts them all, else a constant [out...].
static tj_status_t avg_divisor(dec_t* d, const tj_window_t* w,
                               const int64_t* in_dims, const int64_t* out_dims,
                               tj_dtype_t dtype, uint32_t* out) {
  const bool include_pad = (w->flags & TJ_WINDOW_COUNT_INCLUDE_PAD) != 0;
  int64_t total = 1, full = 1;
  for (int32_t i = 0; i < w->n; ++i) {
    total *= out_dims[i];
    full *= w->kernel[i];
  }
  double* values = tj_alloc(d->rw.allocator, (size_t)total * sizeof(double));
  if (!values) return tj_status_oom();
  bool uniform = true;
  for (int64_t e = 0; e < total; ++e) {
    int64_t rest = e, count = 1;
    for (int32_t i = w->n - 1; i >= 0; --i) {
      int64_t j = rest % out_dims[i];
      rest /= out_dims[i];
      int64_t lo = include_pad ? -w->low[i] : 0;
      int64_t hi = include_pad ? in_dims[i] + w->high[i] : in_dims[i];
      int64_t c = 0;
      for (int64_t k = 0; k < w->kernel[i]; ++k) {
        int64_t p = j * w->strides[i] + k * w->dilations[i] - w->low[i];
        c += p >= lo && p < hi;
      }
      count *= c;
    }
    values[e] = 1.0 / (double)count;
    uniform &= count == full;
  }
  tj_status_t status;
  if (uniform) {
    status = tj_rewriter_scalar(&d->rw, dtype, 1.0 / (double)full, out);
  } else {
    status = constant_f64(d, dtype, w->n, out_dims, values, total, out);
  }
  tj_free(d->rw.allocator, values, (size_t)total * sizeof(double));
  return status;
}

// ddshape (issue 15): a pointwise kernel reads at most 64 buffer views
// (TJ_KIR_MAX_BUFFERS), and each tap of a pool is one or more (a slice of
// the padded input, a view per pad box). A pool of more taps than
// kPoolDirectTaps (3-D windows, large kernels) takes them kPoolChunk at a
// time: the running result goes through a reduction over a new axis (of
// size 1 for sums, 2 for max: see materialize), which the fuser always
// materializes, so each kernel reads the previous partial and kPoolChunk
// taps. Was: one kernel of every tap, past
// 64 views a graph break on the reference interpreter.
enum { kPoolDirectTaps = 16, kPoolChunk = 8 };

static tj_status_t materialize(dec_t* d, uint32_t a, tj_op_t combine,
                               uint32_t* out) {
  const tj_node_t* an = &d->rw.dst->nodes[a];
  int32_t rank = an->rank;
  int64_t dims[TJ_MAX_RANK];
  if (rank + 1 > TJ_MAX_RANK) {
    *out = a;
    return NULL;
  }
  memcpy(dims, an->dims, sizeof(int64_t) * (size_t)rank);
  dims[rank] = 1;
  uint32_t r, y;
  TJ_RETURN_IF_ERROR(reshape(d, a, rank + 1, dims, &r));
  if (combine == TJ_OP_MAXIMUM) {
    // Canonicalize folds a max over size-1 axes (the cleanup after
    // decompose would undo it): a max over the value broadcast to 2 is the
    // value too, -0.0 and NaN included, and stays a reduction.
    tj_node_desc_t desc;
    memset(&desc, 0, sizeof(desc));
    desc.op = TJ_OP_BROADCAST_TO;
    desc.num_operands = 1;
    desc.operands = &r;
    desc.dtype = an->dtype;
    desc.rank = rank + 1;
    dims[rank] = 2;
    desc.dims = dims;
    TJ_RETURN_IF_ERROR(tj_rewriter_append(&d->rw, &desc, &r));
    dims[rank] = 1;
  }
  // A float sum over one element is the element (+0.0 for -0.0, a sum's
  // own zero; canonicalize keeps float sums, which that changes).
  TJ_RETURN_IF_ERROR(
      reduce(d, combine == TJ_OP_MAXIMUM ? TJ_OP_MAX : TJ_OP_SUM, r, rank, &y));
  return reshape(d, y, rank, dims, out);
}

static tj_status_t pool(dec_t* d, uint32_t index, uint32_t x,
                        const tj_window_t* w, uint32_t* out) {
  const tj_node_t* src = &d->rw.src->nodes[index];
  const tj_op_t op = src->op;
  const int32_t n = w->n;
  const tj_node_t* xn = &d->rw.dst->nodes[x];
  int64_t taps = 1;
  TJ_RETURN_IF_ERROR(check_taps(src, index, w, &taps));
  int64_t in_dims[3], out_dims[3];
  int64_t low[TJ_MAX_RANK] = {0}, high[TJ_MAX_RANK] = {0};
  for (int32_t i = 0; i < n; ++i) {
    in_dims[i] = xn->dims[2 + i];
    out_dims[i] = src->dims[2 + i];
    if (!tj_dim_is_const(in_dims[i]) || !tj_dim_is_const(out_dims[i]))
      return tj_status_make(TJ_STATUS_UNSUPPORTED,
                            "%s (node %%%u): decomposing needs constant "
                            "spatial sizes (axis %d is symbolic)",
                            tj_op_info(op)->name, index, (int)(2 + i));
    low[2 + i] = w->low[i];
    // ceil_mode: pad the end until the last window's taps exist.
    int64_t need = (out_dims[i] - 1) * w->strides[i] +
                   (w->kernel[i] - 1) * w->dilations[i] + 1;
    int64_t have = in_dims[i] + w->low[i] + w->high[i];
    high[2 + i] = w->high[i] + (need > have ? need - have : 0);
  }
  uint32_t v = x;
  if (op == TJ_OP_LP_POOL) {
    TJ_RETURN_IF_ERROR(op1(d, TJ_OP_ABS, v, &v));
    if (w->p == 2) {
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, v, v, &v));
    } else if (w->p != 1) {
      TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_POW, v, w->p, &v));
    }
  }
  // max_pool pads with the dtype's lowest value (an integer's minimum).
  const tj_dtype_t dt = d->rw.dst->nodes[v].dtype;
  const double lowest =
      tj_dtype_is_int(dt) ? (double)tj_dtype_int_lowest(dt) : -INFINITY;
  uint32_t xp;
  TJ_RETURN_IF_ERROR(
      win_pad(d, v, low, high, op == TJ_OP_MAX_POOL ? lowest : 0.0, &xp));
  uint32_t acc = TJ_NODE_NONE;
  const tj_op_t combine = op == TJ_OP_MAX_POOL ? TJ_OP_MAXIMUM : TJ_OP_ADD;
  for (int64_t t = 0; t < taps; ++t) {
    int64_t k[3], start[3];
    uint32_t tap;
    tap_offsets(n, w->kernel, t, k);
    for (int32_t i = 0; i < n; ++i) start[i] = k[i] * w->dilations[i];
    TJ_RETURN_IF_ERROR(win_slice(d, xp, start, out_dims, w->strides, &tap));
    if (t == 0 && op == TJ_OP_AVG_POOL) {
      // A sum from its own zero, +0 (the reference, the native window
      // kernels): a window of -0s averages to +0, not to the -0 of a
      // lone slice.
      TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_ADD, tap, 0.0, &acc));
    } else if (t == 0) {
      acc = tap;
    } else {
      TJ_RETURN_IF_ERROR(op2(d, combine, acc, tap, &acc));
    }
    if (taps > kPoolDirectTaps && t + 1 < taps && (t + 1) % kPoolChunk == 0)
      TJ_RETURN_IF_ERROR(materialize(d, acc, combine, &acc));
  }
  if (op == TJ_OP_AVG_POOL) {
    uint32_t inv;
    TJ_RETURN_IF_ERROR(avg_divisor(d, w, in_dims, out_dims,
                                   d->rw.dst->nodes[acc].dtype, &inv));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, acc, inv, &acc));
  } else if (op == TJ_OP_LP_POOL) {
    if (w->p == 2) {
      TJ_RETURN_IF_ERROR(op1(d, TJ_OP_SQRT, acc, &acc));
    } else if (w->p != 1) {
      TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_POW, acc, 1.0 / w->p, &acc));
    }
  }
  *out = acc;
  return NULL;
}

// conv_transpose as the conv of the zero-inserted, padded x with the
// flipped, regrouped w.
static tj_status_t conv_transpose(dec_t* d, uint32_t index, uint32_t x,
                                  uint32_t wt, uint32_t bias,
                                  const tj_window_t* w, uint32_t* out) {
  const tj_node_t* src = &d->rw.src->nodes[index];
  const int32_t n = w->n, rank = n + 2;
  for (int32_t i = 2; i < rank; ++i) {
    if (!tj_dim_is_const(d->rw.dst->nodes[x].dims[i]))
      return tj_status_make(TJ_STATUS_UNSUPPORTED,
                            "conv_transpose (node %%%u): decomposing needs "
                            "constant spatial sizes (x is symbolic on axis %d)",
                            index, (int)i);
  }
  int64_t taps = 1;
  TJ_RETURN_IF_ERROR(check_taps(src, index, w, &taps));
  // Zero insertion, axis by axis, as a product with a constant 0/1 matrix
  // Z [S, (S-1)*s+1] (Z[i, i*s] = 1: exact), the axis moved last and back.
  // (reshape + pad + reshape would be cheaper, but the lowering cannot walk
  // a padded axis merged with another.)
  for (int32_t i = 0; i < n; ++i) {
    const int64_t s = w->strides[i];
    if (s == 1) continue;
    const int32_t axis = 2 + i;
    const int64_t size = d->rw.dst->nodes[x].dims[axis];
    const int64_t up = (size - 1) * s + 1;
    int64_t perm[TJ_MAX_RANK], back[TJ_MAX_RANK];
    for (int32_t a = 0, b = 0; a < rank; ++a) {
      if (a != axis) perm[b++] = a;
    }
    perm[rank - 1] = axis;
    for (int32_t a = 0; a < rank; ++a) back[perm[a]] = a;
    if (axis != rank - 1) TJ_RETURN_IF_ERROR(transpose(d, x, rank, perm, &x));
    double* z = tj_calloc(d->rw.allocator, (size_t)(size * up), sizeof(double));
    if (!z) return tj_status_oom();
    for (int64_t j = 0; j < size; ++j) z[j * up + j * s] = 1;
    uint32_t zc;
    const int64_t zdims[2] = {size, up};
    tj_status_t status =
        constant_f64(d, d->rw.dst->nodes[x].dtype, 2, zdims, z, size * up, &zc);
    tj_free(d->rw.allocator, z, (size_t)(size * up) * sizeof(double));
    TJ_RETURN_IF_ERROR(status);
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, x, zc, &x));
    if (axis != rank - 1) TJ_RETURN_IF_ERROR(transpose(d, x, rank, back, &x));
  }
  // Pad by d(K-1) - low (and - high + output_padding), applied by the
  // conv; where negative, crop first.
  int64_t low[3] = {0, 0, 0}, high[3] = {0, 0, 0};
  int64_t start[3] = {0, 0, 0}, count[3], step[3] = {1, 1, 1};
  bool crop = false;
  for (int32_t i = 0; i < n; ++i) {
    const int64_t span = w->dilations[i] * (w->kernel[i] - 1);
    const int64_t lo = span - w->low[i];
    const int64_t hi = span - w->high[i] + w->output_padding[i];
    const int64_t size = d->rw.dst->nodes[x].dims[2 + i];
    low[i] = lo > 0 ? lo : 0;
    high[i] = hi > 0 ? hi : 0;
    start[i] = lo < 0 ? -lo : 0;
    count[i] = size + (lo < 0 ? lo : 0) + (hi < 0 ? hi : 0);
    crop |= lo < 0 || hi < 0;
  }
  if (crop) TJ_RETURN_IF_ERROR(win_slice(d, x, start, count, step, &x));
  // w [C, Og, K...]: every kernel axis flipped, which reverses the flat
  // tap index: [C, Og, T] @ J (the T x T anti-identity; exact), then
  // [G, Cg, Og, T] -> [G, Og, Cg, T] -> [O, Cg, K...].
  const tj_node_t* wn = &d->rw.dst->nodes[wt];
  const int64_t channels = wn->dims[0], og = wn->dims[1];
  const int64_t groups = w->groups, cg = channels / groups;
  int64_t shape[TJ_MAX_RANK];
  if (taps > 1) {
    shape[0] = channels;
    shape[1] = og;
    shape[2] = taps;
    TJ_RETURN_IF_ERROR(reshape(d, wt, 3, shape, &wt));
    double* j =
        tj_calloc(d->rw.allocator, (size_t)(taps * taps), sizeof(double));
    if (!j) return tj_status_oom();
    for (int64_t t = 0; t < taps; ++t) j[t * taps + (taps - 1 - t)] = 1;
    uint32_t jc;
    const int64_t jdims[2] = {taps, taps};
    tj_status_t status = constant_f64(d, d->rw.dst->nodes[wt].dtype, 2, jdims,
                                      j, taps * taps, &jc);
    tj_free(d->rw.allocator, j, (size_t)(taps * taps) * sizeof(double));
    TJ_RETURN_IF_ERROR(status);
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, wt, jc, &wt));
  }
  shape[0] = groups;
  shape[1] = cg;
  shape[2] = og;
  shape[3] = taps;
  TJ_RETURN_IF_ERROR(reshape(d, wt, 4, shape, &wt));
  {
    const int64_t perm[4] = {0, 2, 1, 3};
    TJ_RETURN_IF_ERROR(transpose(d, wt, 4, perm, &wt));
  }
  shape[0] = groups * og;
  shape[1] = cg;
  for (int32_t i = 0; i < n; ++i) shape[2 + i] = w->kernel[i];
  TJ_RETURN_IF_ERROR(reshape(d, wt, rank, shape, &wt));
  tj_window_t cw = *w;
  const int64_t ones[3] = {1, 1, 1};
  cw.strides = ones;
  cw.low = low;
  cw.high = high;
  int64_t out_dims[3];
  for (int32_t i = 0; i < n; ++i) out_dims[i] = src->dims[2 + i];
  return conv_core(d, index, x, wt, bias, &cw, out_dims, out);
}

static tj_status_t decompose_window(dec_t* d, uint32_t index,
                                    const uint32_t* ops, uint32_t* out) {
  const tj_node_t* node = &d->rw.src->nodes[index];
  const tj_window_t w = tj_window_of(&node->attrs);
  const tj_dtype_t dtype = node->dtype;
  if (node->op == TJ_OP_CONV) {
    int64_t out_dims[3];
    for (int32_t i = 0; i < w.n; ++i) out_dims[i] = node->dims[2 + i];
    for (int32_t i = 0; i < w.n; ++i) {
      if (!tj_dim_is_const(out_dims[i]))
        return tj_status_make(TJ_STATUS_UNSUPPORTED,
                              "conv (node %%%u): decomposing needs constant "
                              "spatial sizes (axis %d is symbolic)",
                              index, (int)(2 + i));
    }
    return conv_core(d, index, ops[0], ops[1], ops[2], &w, out_dims, out);
  }
  if (node->op == TJ_OP_CONV_TRANSPOSE)
    return conv_transpose(d, index, ops[0], ops[1], ops[2], &w, out);
  const tj_dtype_t compute =
      d->upcast_half && (dtype == TJ_DTYPE_F16 || dtype == TJ_DTYPE_BF16)
          ? TJ_DTYPE_F32
          : dtype;
  uint32_t x, y = TJ_NODE_NONE;
  TJ_RETURN_IF_ERROR(cast(d, ops[0], compute, &x));
  TJ_RETURN_IF_ERROR(pool(d, index, x, &w, &y));
  return cast(d, y, dtype, out);
}

// attention (issue 14): see the table at the top. |ops| are q, k, v, mask
// (TJ_NODE_NONE when absent), already of the new graph.
// The shapes and compute dtype an attention node and its backward share.
typedef struct att_t {
  tj_dtype_t dtype, c;  // q's dtype, the compute dtype
  int32_t r;            // q's rank
  int64_t h, hkv, group, tq, tk;
} att_t;

static att_t att_shape(const dec_t* d, uint32_t q, uint32_t k) {
  const tj_node_t* nq = &d->rw.dst->nodes[q];
  const tj_node_t* nk = &d->rw.dst->nodes[k];
  att_t a;
  a.dtype = nq->dtype;
  a.c = d->upcast_half && (a.dtype == TJ_DTYPE_F16 || a.dtype == TJ_DTYPE_BF16)
            ? TJ_DTYPE_F32
            : a.dtype;
  a.r = nq->rank;
  a.h = nq->dims[a.r - 3];
  a.hkv = nk->dims[a.r - 3];
  a.group = a.h / a.hkv;
  a.tq = nq->dims[a.r - 2];
  a.tk = nk->dims[a.r - 2];
  return a;
}

// [.., H, Tq, n] <-> [.., Hkv, G*Tq, n] (head h = hk*G + g, row g*Tq + i);
// nothing when G = 1.
static tj_status_t att_group(dec_t* d, const att_t* a, uint32_t x,
                             uint32_t* out) {
  if (a->group == 1) {
    *out = x;
    return NULL;
  }
  int64_t dims[TJ_MAX_RANK];
  memcpy(dims, d->rw.dst->nodes[x].dims, (size_t)a->r * sizeof(int64_t));
  dims[a->r - 3] = a->hkv;
  dims[a->r - 2] = TJ_DIM_INFER;
  return reshape(d, x, a->r, dims, out);
}

static tj_status_t att_ungroup(dec_t* d, const att_t* a, uint32_t x,
                               uint32_t* out) {
  if (a->group == 1) {
    *out = x;
    return NULL;
  }
  int64_t dims[TJ_MAX_RANK];
  memcpy(dims, d->rw.dst->nodes[x].dims, (size_t)a->r * sizeof(int64_t));
  dims[a->r - 3] = a->h;
  dims[a->r - 2] = a->tq;
  return reshape(d, x, a->r, dims, out);
}

// The scores s [.., H, Tq, Tk] in the compute dtype: (q @ k^T) * scale,
// masked (where / add), causal by iota compares. |qg| is q grouped and
// cast, |k| cast, |mask| of the new graph or TJ_NODE_NONE.
static tj_status_t attention_scores(dec_t* d, const tj_node_t* node,
                                    const att_t* a, uint32_t qg, uint32_t k,
                                    uint32_t mask, uint32_t* out) {
  const tj_graph_t* g = d->rw.dst;
  const tj_dtype_t c = a->c;
  const int32_t r = a->r;
  const int64_t tq = a->tq, tk = a->tk;
  uint32_t q = qg, kt, sc;
  int64_t perm[TJ_MAX_RANK];
  for (int32_t i = 0; i < r; ++i) perm[i] = i;
  perm[r - 2] = r - 1;
  perm[r - 1] = r - 2;
  TJ_RETURN_IF_ERROR(transpose(d, k, r, perm, &kt));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, q, kt, &sc));
  TJ_RETURN_IF_ERROR(att_ungroup(d, a, sc, &sc));
  TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_MUL, sc, node->attrs.value, &sc));
  uint32_t ninf;
  TJ_RETURN_IF_ERROR(tj_rewriter_scalar(&d->rw, c, -INFINITY, &ninf));
  if (mask != TJ_NODE_NONE) {
    if (g->nodes[mask].dtype == TJ_DTYPE_BOOL) {
      TJ_RETURN_IF_ERROR(where(d, mask, sc, ninf, &sc));
    } else {
      uint32_t add;
      TJ_RETURN_IF_ERROR(cast(d, mask, c, &add));
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_ADD, sc, add, &sc));
    }
  }
  if (node->attrs.num_ints && node->attrs.ints[0]) {
    // causal, top-left: key j is kept for query i when j <= i.
    int64_t qk[2] = {tq, tk};
    uint32_t row, col, keep;
    tj_node_desc_t desc;
    memset(&desc, 0, sizeof(desc));
    desc.op = TJ_OP_IOTA;
    desc.dtype = TJ_DTYPE_I64;
    desc.rank = 2;
    desc.dims = qk;
    desc.attrs.axis = 0;
    TJ_RETURN_IF_ERROR(tj_rewriter_append(&d->rw, &desc, &row));
    desc.attrs.axis = 1;
    TJ_RETURN_IF_ERROR(tj_rewriter_append(&d->rw, &desc, &col));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_GE, row, col, &keep));
    TJ_RETURN_IF_ERROR(where(d, keep, sc, ninf, &sc));
  }
  *out = sc;
  return NULL;
}

// Whether |node|'s lse operand is attention_lse of its own q, k, mask,
// scale and causal flag (what vjp_attention emits): then the written-out p
// is the softmax of the scores this node computes anyway, and the lse
// node, no longer read, is dropped (one score GEMM and exp pass fewer).
static bool lse_of_same_scores(const dec_t* d, const tj_node_t* node) {
  const tj_graph_t* src = d->rw.src;
  const uint32_t li = node->operands[5];
  if (li == TJ_NODE_NONE) return false;
  const tj_node_t* l = &src->nodes[li];
  return l->op == TJ_OP_ATTENTION_LSE && l->operands[0] == node->operands[0] &&
         l->operands[1] == node->operands[1] &&
         l->operands[2] == node->operands[3] &&
         l->attrs.value == node->attrs.value &&
         l->attrs.num_ints == node->attrs.num_ints &&
         (!l->attrs.num_ints || l->attrs.ints[0] == node->attrs.ints[0]);
}

// p [.., Tq, Tk] from the scores |sc| along axis |axis|: with |same|, the
// softmax (0 on a row with no key: m 0 where -inf, l 1 where 0); else
// exp(sc - lse) with |lse| a [.., Tq, 1] column (0 where lse is -inf).
static tj_status_t att_probs(dec_t* d, uint32_t sc, uint32_t lse, bool same,
                             int64_t axis, uint32_t ninf, uint32_t zero,
                             uint32_t* out) {
  uint32_t t, p;
  if (!same) {
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_SUB, sc, lse, &p));
    TJ_RETURN_IF_ERROR(op1(d, TJ_OP_EXP, p, &p));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_EQ, lse, ninf, &t));
    return where(d, t, zero, p, out);
  }
  uint32_t mx, l, one;
  const tj_dtype_t c = d->rw.dst->nodes[sc].dtype;
  TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_MAX, sc, axis, &mx));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_EQ, mx, ninf, &t));
  TJ_RETURN_IF_ERROR(where(d, t, zero, mx, &mx));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_SUB, sc, mx, &p));
  TJ_RETURN_IF_ERROR(op1(d, TJ_OP_EXP, p, &p));
  TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_SUM, p, axis, &l));
  TJ_RETURN_IF_ERROR(tj_rewriter_scalar(&d->rw, c, 1.0, &one));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_EQ, l, zero, &t));
  TJ_RETURN_IF_ERROR(where(d, t, one, l, &l));
  return op2(d, TJ_OP_DIV, p, l, out);
}

// [.., H, x..] -> [.., Hkv, G, x..] (|heads| true: the H axis at |axis|
// is split; false: a 1 is inserted after the axis, for k and v's Hkv and
// for an axis of size 1 that broadcasts over H).
static tj_status_t att_split(dec_t* d, uint32_t x, int32_t axis, int64_t hkv,
                             int64_t group, bool heads, uint32_t* out) {
  const tj_node_t* n = &d->rw.dst->nodes[x];
  const int32_t r = n->rank;
  int64_t dims[TJ_MAX_RANK];
  memcpy(dims, n->dims, (size_t)axis * sizeof(int64_t));
  dims[axis] = heads ? hkv : n->dims[axis];
  dims[axis + 1] = heads ? group : 1;
  memcpy(dims + axis + 2, n->dims + axis + 1,
         (size_t)(r - axis - 1) * sizeof(int64_t));
  return reshape(d, x, r + 1, dims, out);
}

// The mask and the causal flag of |node| applied to the scores |sc|
// [.., Hkv, G, Tq, Tk] of grouped-query heads (|mask| of the new graph or
// TJ_NODE_NONE; masked scores become |ninf|).
static tj_status_t att_split_mask(dec_t* d, const tj_node_t* node,
                                  const att_t* a, uint32_t mask, uint32_t ninf,
                                  uint32_t* sc_io) {
  const tj_graph_t* g = d->rw.dst;
  const tj_dtype_t c = a->c;
  const int64_t hkv = a->hkv, grp = a->group;
  uint32_t sc = *sc_io;
  if (mask != TJ_NODE_NONE) {
    // The mask broadcasts to [.., H, Tq, Tk]: a mask with an H axis splits
    // it (or inserts G's 1 where it is 1); one of rank 2 or less is right
    // of the heads already.
    const tj_node_t* m = &g->nodes[mask];
    uint32_t m5 = mask;
    if (m->rank >= 3) {
      const int32_t ax = m->rank - 3;
      TJ_RETURN_IF_ERROR(
          att_split(d, mask, ax, hkv, grp, m->dims[ax] != 1, &m5));
    }
    if (g->nodes[m5].dtype == TJ_DTYPE_BOOL) {
      TJ_RETURN_IF_ERROR(where(d, m5, sc, ninf, &sc));
    } else {
      TJ_RETURN_IF_ERROR(cast(d, m5, c, &m5));
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_ADD, sc, m5, &sc));
    }
  }
  if (node->attrs.num_ints && node->attrs.ints[0]) {
    int64_t qk[2] = {a->tq, a->tk};
    uint32_t row, col, keep;
    tj_node_desc_t desc;
    memset(&desc, 0, sizeof(desc));
    desc.op = TJ_OP_IOTA;
    desc.dtype = TJ_DTYPE_I64;
    desc.rank = 2;
    desc.dims = qk;
    TJ_RETURN_IF_ERROR(tj_rewriter_append(&d->rw, &desc, &row));
    desc.attrs.axis = 1;
    TJ_RETURN_IF_ERROR(tj_rewriter_append(&d->rw, &desc, &col));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_GE, row, col, &keep));
    TJ_RETURN_IF_ERROR(where(d, keep, sc, ninf, &sc));
  }
  *sc_io = sc;
  return NULL;
}

// attention_dq and attention_dkv with grouped-query heads (G > 1) on
// [.., Hkv, G, Tq, n] views: q, g, lse and delta split their H axis, k and
// v gain a G axis of 1 that the matmuls broadcast, so every reshape splits
// an axis (the lowering reads a merge of computed values only densely, and
// [.., Hkv, G*Tq, n] views of the pointwise p and ds would merge); dk and
// dv sum their [.., Hkv, G, Tk, n] products over G.
static tj_status_t attention_bwd_split(dec_t* d, const tj_node_t* node,
                                       const att_t* a, const uint32_t* ops,
                                       uint32_t* out) {
  const tj_graph_t* g = d->rw.dst;
  const tj_dtype_t c = a->c;
  const int32_t r = a->r, r5 = r + 1, h_axis = r - 3;
  const int64_t hkv = a->hkv, grp = a->group;
  uint32_t q, k, v, gg, lse, delta, kt, vt, sc, ninf, zero, t, p, dp, ds, y;
  TJ_RETURN_IF_ERROR(att_split(d, ops[0], h_axis, hkv, grp, true, &q));
  TJ_RETURN_IF_ERROR(att_split(d, ops[1], h_axis, hkv, grp, false, &k));
  TJ_RETURN_IF_ERROR(att_split(d, ops[2], h_axis, hkv, grp, false, &v));
  TJ_RETURN_IF_ERROR(att_split(d, ops[4], h_axis, hkv, grp, true, &gg));
  TJ_RETURN_IF_ERROR(att_split(d, ops[5], h_axis, hkv, grp, true, &lse));
  TJ_RETURN_IF_ERROR(att_split(d, ops[6], h_axis, hkv, grp, true, &delta));
  uint32_t* cast_me[6] = {&q, &k, &v, &gg, &lse, &delta};
  for (int i = 0; i < 6; ++i)
    TJ_RETURN_IF_ERROR(cast(d, *cast_me[i], c, cast_me[i]));
  int64_t dims[TJ_MAX_RANK];
  uint32_t* cols[2] = {&lse, &delta};  // [.., Hkv, G, Tq] -> [.., Tq, 1]
  for (int i = 0; i < 2; ++i) {
    memcpy(dims, g->nodes[*cols[i]].dims, (size_t)r * sizeof(int64_t));
    dims[r] = 1;
    TJ_RETURN_IF_ERROR(reshape(d, *cols[i], r5, dims, cols[i]));
  }
  int64_t perm[TJ_MAX_RANK];
  for (int32_t i = 0; i < r5; ++i) perm[i] = i;
  perm[r5 - 2] = r5 - 1;
  perm[r5 - 1] = r5 - 2;
  TJ_RETURN_IF_ERROR(transpose(d, k, r5, perm, &kt));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, q, kt, &sc));
  TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_MUL, sc, node->attrs.value, &sc));
  TJ_RETURN_IF_ERROR(tj_rewriter_scalar(&d->rw, c, -INFINITY, &ninf));
  TJ_RETURN_IF_ERROR(tj_rewriter_scalar(&d->rw, c, 0.0, &zero));
  TJ_RETURN_IF_ERROR(att_split_mask(d, node, a, ops[3], ninf, &sc));
  TJ_RETURN_IF_ERROR(att_probs(d, sc, lse, lse_of_same_scores(d, node), r5 - 1,
                               ninf, zero, &p));  // [.., Hkv, G, Tq, Tk]
  TJ_RETURN_IF_ERROR(transpose(d, v, r5, perm, &vt));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, gg, vt, &dp));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_SUB, dp, delta, &ds));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, p, ds, &ds));
  TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_MUL, ds, node->attrs.value, &ds));
  if (node->op == TJ_OP_ATTENTION_DQ) {
    // [.., Hkv, G, Tq, D] -> [.., H, Tq, D]: a merge of a GEMM's result,
    // which is read densely.
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, ds, k, &y));
    memcpy(dims, g->nodes[y].dims, (size_t)r5 * sizeof(int64_t));
    dims[h_axis] = a->h;
    memmove(dims + h_axis + 1, dims + h_axis + 2,
            (size_t)(r5 - h_axis - 2) * sizeof(int64_t));
    TJ_RETURN_IF_ERROR(reshape(d, y, r, dims, &y));
    return cast(d, y, node->dtype, out);
  }
  uint32_t parts[2];
  TJ_RETURN_IF_ERROR(transpose(d, ds, r5, perm, &t));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, t, q, &parts[0]));
  TJ_RETURN_IF_ERROR(transpose(d, p, r5, perm, &t));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, t, gg, &parts[1]));
  int64_t axis = r - 2;  // G
  for (int i = 0; i < 2; ++i) {
    tj_node_desc_t desc;
    memset(&desc, 0, sizeof(desc));
    desc.op = TJ_OP_SUM;
    desc.num_operands = 1;
    desc.operands = &parts[i];
    desc.attrs.ints = &axis;
    desc.attrs.num_ints = 1;
    TJ_RETURN_IF_ERROR(tj_rewriter_append(&d->rw, &desc, &parts[i]));
  }
  TJ_RETURN_IF_ERROR(concat_n(d, 2, parts, r - 1, &y));
  return cast(d, y, node->dtype, out);
}

// attention with grouped-query heads (G > 1) on [.., Hkv, G, Tq, n] views,
// as attention_bwd_split: q and a mask with an H axis split it, k and v
// gain a G axis of 1 that the matmuls broadcast. The [.., Hkv, G*Tq, D]
// view of q would merge two axes of a computed value, which the lowering
// reads only densely: q read through a transpose (the heads of a linear,
// with rotary embeddings applied: the Llama block) made that a graph break,
// on CUDA a host step staging the whole block (f32 decomposes there). The
// result merges back to [.., H, Tq, Dv] from the GEMM's output and the
// row sums, both stored values read densely.
static tj_status_t attention_split(dec_t* d, const tj_node_t* node,
                                   const att_t* a, const uint32_t* ops,
                                   uint32_t* out) {
  const tj_graph_t* g = d->rw.dst;
  const tj_dtype_t c = a->c;
  const int32_t r = a->r, r5 = r + 1, h_axis = r - 3;
  const int64_t hkv = a->hkv, grp = a->group;
  uint32_t q, k, v, kt, sc, ninf, zero, mx, t, e, l, one, pv, y;
  TJ_RETURN_IF_ERROR(att_split(d, ops[0], h_axis, hkv, grp, true, &q));
  TJ_RETURN_IF_ERROR(att_split(d, ops[1], h_axis, hkv, grp, false, &k));
  TJ_RETURN_IF_ERROR(att_split(d, ops[2], h_axis, hkv, grp, false, &v));
  TJ_RETURN_IF_ERROR(cast(d, q, c, &q));
  TJ_RETURN_IF_ERROR(cast(d, k, c, &k));
  TJ_RETURN_IF_ERROR(cast(d, v, c, &v));
  int64_t perm[TJ_MAX_RANK];
  for (int32_t i = 0; i < r5; ++i) perm[i] = i;
  perm[r5 - 2] = r5 - 1;
  perm[r5 - 1] = r5 - 2;
  TJ_RETURN_IF_ERROR(transpose(d, k, r5, perm, &kt));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, q, kt, &sc));
  TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_MUL, sc, node->attrs.value, &sc));
  TJ_RETURN_IF_ERROR(tj_rewriter_scalar(&d->rw, c, -INFINITY, &ninf));
  TJ_RETURN_IF_ERROR(tj_rewriter_scalar(&d->rw, c, 0.0, &zero));
  TJ_RETURN_IF_ERROR(att_split_mask(d, node, a, ops[3], ninf, &sc));
  // As attention's: m 0 and l 1 on a row with no key left (then y = 0).
  TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_MAX, sc, r5 - 1, &mx));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_EQ, mx, ninf, &t));
  TJ_RETURN_IF_ERROR(where(d, t, zero, mx, &mx));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_SUB, sc, mx, &e));
  TJ_RETURN_IF_ERROR(op1(d, TJ_OP_EXP, e, &e));
  TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_SUM, e, r5 - 1, &l));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, e, v, &pv));
  // [.., Hkv, G, Tq, n] -> [.., H, Tq, n] for pv (n = Dv) and l (n = 1),
  // each straight from its GEMM or reduction, so that the merge reads a
  // stored value (a pointwise step before it would fuse with the merge).
  uint32_t* merge[2] = {&pv, &l};
  for (int i = 0; i < 2; ++i) {
    int64_t dims[TJ_MAX_RANK];
    memcpy(dims, g->nodes[*merge[i]].dims, (size_t)r5 * sizeof(int64_t));
    dims[h_axis] = a->h;
    memmove(dims + h_axis + 1, dims + h_axis + 2,
            (size_t)(r5 - h_axis - 2) * sizeof(int64_t));
    TJ_RETURN_IF_ERROR(reshape(d, *merge[i], r, dims, merge[i]));
  }
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_EQ, l, zero, &t));
  TJ_RETURN_IF_ERROR(tj_rewriter_scalar(&d->rw, c, 1.0, &one));
  TJ_RETURN_IF_ERROR(where(d, t, one, l, &l));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_DIV, pv, l, &y));
  return cast(d, y, a->dtype, out);
}

// attention with G = 1 (one query head a kv head): see the table at the top.
static tj_status_t attention(dec_t* d, const tj_node_t* node,
                             const uint32_t* ops, uint32_t* out) {
  const att_t a = att_shape(d, ops[0], ops[1]);
  if (a.group > 1) return attention_split(d, node, &a, ops, out);
  const tj_dtype_t dtype = a.dtype, c = a.c;
  uint32_t q, k, v, sc, y;
  const int32_t r = a.r;
  TJ_RETURN_IF_ERROR(cast(d, ops[0], c, &q));
  TJ_RETURN_IF_ERROR(cast(d, ops[1], c, &k));
  TJ_RETURN_IF_ERROR(cast(d, ops[2], c, &v));
  TJ_RETURN_IF_ERROR(attention_scores(d, node, &a, q, k, ops[3], &sc));
  uint32_t ninf;
  TJ_RETURN_IF_ERROR(tj_rewriter_scalar(&d->rw, c, -INFINITY, &ninf));
  // The row max, 0 for a row with no key left (then e = 0 and y = 0).
  uint32_t mx, is_ninf, zero, e, l, one, l_ok, pv;
  TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_MAX, sc, r - 1, &mx));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_EQ, mx, ninf, &is_ninf));
  TJ_RETURN_IF_ERROR(tj_rewriter_scalar(&d->rw, c, 0.0, &zero));
  TJ_RETURN_IF_ERROR(where(d, is_ninf, zero, mx, &mx));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_SUB, sc, mx, &e));
  TJ_RETURN_IF_ERROR(op1(d, TJ_OP_EXP, e, &e));
  TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_SUM, e, r - 1, &l));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_EQ, l, zero, &l_ok));
  TJ_RETURN_IF_ERROR(tj_rewriter_scalar(&d->rw, c, 1.0, &one));
  TJ_RETURN_IF_ERROR(where(d, l_ok, one, l, &l));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, e, v, &pv));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_DIV, pv, l, &y));
  return cast(d, y, dtype, out);
}

// attention's backward (fabwd; tj_graph.h), unfused: the scores as the
// forward's, then
//   attention_lse  m = max(s) (0 where -inf); log(sum(exp(s - m))) + m
//                  (log 0 = -inf on a row with no key)
//   attention_dq   p = exp(s - lse) (0 where lse = -inf),
//   attention_dkv  ds = p (g @ v^T - delta); dq = (scale ds) @ k,
//                  [dk | dv] = concat((scale ds)^T @ q, p^T @ g)
// with grouped-query heads through [.., Hkv, G*Tq, n] views, so the
// matmuls over G*Tq rows sum dk and dv over the group. A target with a
// fused kernel keeps the nodes whole instead.
static tj_status_t attention_bwd(dec_t* d, const tj_node_t* node,
                                 const uint32_t* ops, uint32_t* out) {
  const att_t a = att_shape(d, ops[0], ops[1]);
  const tj_dtype_t c = a.c;
  const int32_t r = a.r;
  const tj_graph_t* g = d->rw.dst;
  const bool lse_op = node->op == TJ_OP_ATTENTION_LSE;
  if (!lse_op && a.group > 1 && r < TJ_MAX_RANK)
    return attention_bwd_split(d, node, &a, ops, out);
  uint32_t q, k, sc, ninf, zero, t, y;
  TJ_RETURN_IF_ERROR(att_group(d, &a, ops[0], &q));
  TJ_RETURN_IF_ERROR(cast(d, q, c, &q));
  TJ_RETURN_IF_ERROR(cast(d, ops[1], c, &k));
  TJ_RETURN_IF_ERROR(
      attention_scores(d, node, &a, q, k, ops[lse_op ? 2 : 3], &sc));
  TJ_RETURN_IF_ERROR(tj_rewriter_scalar(&d->rw, c, -INFINITY, &ninf));
  TJ_RETURN_IF_ERROR(tj_rewriter_scalar(&d->rw, c, 0.0, &zero));
  int64_t dims[TJ_MAX_RANK];
  if (lse_op) {
    uint32_t mx, e;
    TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_MAX, sc, r - 1, &mx));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_EQ, mx, ninf, &t));
    TJ_RETURN_IF_ERROR(where(d, t, zero, mx, &mx));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_SUB, sc, mx, &e));
    TJ_RETURN_IF_ERROR(op1(d, TJ_OP_EXP, e, &e));
    TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_SUM, e, r - 1, &e));
    TJ_RETURN_IF_ERROR(op1(d, TJ_OP_LOG, e, &e));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_ADD, e, mx, &y));  // [.., H, Tq, 1]
    memcpy(dims, g->nodes[y].dims, (size_t)(r - 1) * sizeof(int64_t));
    TJ_RETURN_IF_ERROR(reshape(d, y, r - 1, dims, &y));
    return cast(d, y, node->dtype, out);
  }
  // lse and delta as [.., H, Tq, 1] columns of the compute dtype.
  uint32_t lse, delta, gg, v, vt, p, dp, ds, dsg;
  const uint32_t rows[2] = {ops[5], ops[6]};
  uint32_t* cols[2] = {&lse, &delta};
  for (int i = 0; i < 2; ++i) {
    memcpy(dims, g->nodes[rows[i]].dims, (size_t)(r - 1) * sizeof(int64_t));
    dims[r - 1] = 1;
    TJ_RETURN_IF_ERROR(reshape(d, rows[i], r, dims, cols[i]));
    TJ_RETURN_IF_ERROR(cast(d, *cols[i], c, cols[i]));
  }
  TJ_RETURN_IF_ERROR(att_probs(d, sc, lse, lse_of_same_scores(d, node), r - 1,
                               ninf, zero, &p));  // [.., H, Tq, Tk]
  TJ_RETURN_IF_ERROR(att_group(d, &a, ops[4], &gg));
  TJ_RETURN_IF_ERROR(cast(d, gg, c, &gg));
  TJ_RETURN_IF_ERROR(cast(d, ops[2], c, &v));
  int64_t perm[TJ_MAX_RANK];
  for (int32_t i = 0; i < r; ++i) perm[i] = i;
  perm[r - 2] = r - 1;
  perm[r - 1] = r - 2;
  TJ_RETURN_IF_ERROR(transpose(d, v, r, perm, &vt));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, gg, vt, &dp));
  TJ_RETURN_IF_ERROR(att_ungroup(d, &a, dp, &dp));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_SUB, dp, delta, &ds));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, p, ds, &ds));
  TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_MUL, ds, node->attrs.value, &ds));
  TJ_RETURN_IF_ERROR(att_group(d, &a, ds, &dsg));
  if (node->op == TJ_OP_ATTENTION_DQ) {
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, dsg, k, &y));
    TJ_RETURN_IF_ERROR(att_ungroup(d, &a, y, &y));
    return cast(d, y, node->dtype, out);
  }
  uint32_t parts[2], pg;
  TJ_RETURN_IF_ERROR(transpose(d, dsg, r, perm, &t));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, t, q, &parts[0]));
  TJ_RETURN_IF_ERROR(att_group(d, &a, p, &pg));
  TJ_RETURN_IF_ERROR(transpose(d, pg, r, perm, &t));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, t, gg, &parts[1]));
  // dk's batch dims are those of ds and q, dv's those of p and g: both
  // the broadcast batch the result has.
  TJ_RETURN_IF_ERROR(concat_n(d, 2, parts, r - 1, &y));
  return cast(d, y, node->dtype, out);
}

// qgemm (issue 17): matmul_integer(a, b, za, zb) = matmul_i32(a, b)
//   - rowsum_k(a) * zb - za * colsum_k(b - zb)
// (the sum of (a - za)(b - zb) expanded): the GEMM runs on the raw 8-bit
// operands and the zero points cost a row sum of a and a column sum of b,
// not a subtraction per product. Rank-1 operands are made matrices first
// and the result reshaped back.
static tj_status_t matmul_integer(dec_t* d, const tj_node_t* node,
                                  const uint32_t* all, uint32_t* out) {
  const tj_graph_t* g = d->rw.dst;
  uint32_t a = all[0], b = all[1], za = all[2], zb = all[3], y;
  bool reshape_out = false;
  if (g->nodes[a].rank == 1) {
    int64_t dims[2] = {1, g->nodes[a].dims[0]};
    TJ_RETURN_IF_ERROR(reshape(d, a, 2, dims, &a));
    reshape_out = true;
  }
  if (g->nodes[b].rank == 1) {
    int64_t dims[2] = {g->nodes[b].dims[0], 1};
    TJ_RETURN_IF_ERROR(reshape(d, b, 2, dims, &b));
    reshape_out = true;
  }
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL_I32, a, b, &y));
  if (zb != TJ_NODE_NONE) {
    uint32_t a32, rows, zb32, t;
    TJ_RETURN_IF_ERROR(cast(d, a, TJ_DTYPE_I32, &a32));
    TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_SUM, a32, g->nodes[a].rank - 1, &rows));
    TJ_RETURN_IF_ERROR(cast(d, zb, TJ_DTYPE_I32, &zb32));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, rows, zb32, &t));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_SUB, y, t, &y));
  }
  if (za != TJ_NODE_NONE) {
    uint32_t b32, cols, za32, t;
    TJ_RETURN_IF_ERROR(cast(d, b, TJ_DTYPE_I32, &b32));
    if (zb != TJ_NODE_NONE) {
      uint32_t zb32;
      TJ_RETURN_IF_ERROR(cast(d, zb, TJ_DTYPE_I32, &zb32));
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_SUB, b32, zb32, &b32));
    }
    TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_SUM, b32, g->nodes[b].rank - 2, &cols));
    TJ_RETURN_IF_ERROR(cast(d, za, TJ_DTYPE_I32, &za32));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, za32, cols, &t));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_SUB, y, t, &y));
  }
  if (reshape_out) return reshape(d, y, node->rank, node->dims, out);
  *out = y;
  return NULL;
}

// Issue 15: the GEMM templates take f32, f16 and bf16 (kir/lower_gemm.c);
// a matmul of another dtype (f64, the integers) would run on the host. It
// becomes the sum over k of a broadcast product instead, a native
// reduction kernel on every target: a [.., M, K, 1] * b [.., 1, K, N],
// summed over its K axis (numpy broadcasting of the batch dims, a rank-1
// operand a matrix first, as numpy.matmul). Integers wrap as the
// reference's products and sums do; f64 sums in the reduction's order.
static bool matmul_by_reduction(const tj_node_t* node) {
  return node->op == TJ_OP_MATMUL && node->dtype != TJ_DTYPE_F32 &&
         node->dtype != TJ_DTYPE_F16 && node->dtype != TJ_DTYPE_BF16 &&
         node->rank + 2 <= TJ_MAX_RANK;  // the product's rank, at most
}

static tj_status_t matmul_reduction(dec_t* d, const tj_node_t* node, uint32_t a,
                                    uint32_t b, uint32_t* out) {
  const tj_graph_t* g = d->rw.dst;
  // The appends below may move the node array: a's and b's nodes are read
  // here only, and |node| is the caller's copy.
  const tj_node_t* na = &g->nodes[a];
  const tj_node_t* nb = &g->nodes[b];
  int64_t da[TJ_MAX_RANK + 1], db[TJ_MAX_RANK + 1];
  int32_t ra = na->rank, rb = nb->rank;
  bool vector = ra == 1 || rb == 1;
  if (ra == 1) {  // [K] -> [1, K, 1]
    da[0] = 1;
    da[1] = na->dims[0];
    ra = 2;
  } else {
    memcpy(da, na->dims, sizeof(int64_t) * (size_t)ra);
  }
  da[ra++] = 1;
  if (rb == 1) {  // [K] -> [1, K, 1]
    db[0] = 1;
    db[1] = nb->dims[0];
    db[2] = 1;
    rb = 3;
  } else {  // [.., K, N] -> [.., 1, K, N]
    memcpy(db, nb->dims, sizeof(int64_t) * (size_t)(rb - 2));
    db[rb - 2] = 1;
    db[rb - 1] = nb->dims[rb - 2];
    db[rb] = nb->dims[rb - 1];
    ++rb;
  }
  if (ra > TJ_MAX_RANK || rb > TJ_MAX_RANK) {
    return tj_internal("decompose: matmul %%%u's product would pass rank %d", a,
                       TJ_MAX_RANK);  // matmul_by_reduction's bound
  }
  uint32_t a3, b3, p, s;
  TJ_RETURN_IF_ERROR(reshape(d, a, ra, da, &a3));
  TJ_RETURN_IF_ERROR(reshape(d, b, rb, db, &b3));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, a3, b3, &p));
  // Summed without keepdims: [.., M, N] is the matmul's own shape unless
  // an operand was a vector (no copy kernel for a reshape).
  TJ_RETURN_IF_ERROR(
      reduce_axis(d, TJ_OP_SUM, p, g->nodes[p].rank - 2, false, &s));
  if (!vector) {
    *out = s;
    return NULL;
  }
  return reshape(d, s, node->rank, node->dims, out);
}

// A matmul the target's GEMM would refuse for its layout
// (tj_pass_ctx_t.matmul_misaligned: CUDA's tensor cores on half rows that
// are not whole 16-byte vectors): matmul_reduction over operands widened
// to f32, the GEMM's own accumulation, the sum rounded to the matmul's
// dtype once, as the GEMM's epilogue rounds.
static bool matmul_misaligned(const tj_pass_ctx_t* ctx, const tj_graph_t* g,
                              uint32_t i) {
  const tj_node_t* n = &g->nodes[i];
  return n->op == TJ_OP_MATMUL && n->rank + 2 <= TJ_MAX_RANK &&
         ctx->matmul_misaligned && ctx->matmul_misaligned(g, i);
}

static tj_status_t matmul_widened(dec_t* d, const tj_node_t* node, uint32_t a,
                                  uint32_t b, uint32_t* out) {
  uint32_t wa, wb, y;
  TJ_RETURN_IF_ERROR(cast(d, a, TJ_DTYPE_F32, &wa));
  TJ_RETURN_IF_ERROR(cast(d, b, TJ_DTYPE_F32, &wb));
  TJ_RETURN_IF_ERROR(matmul_reduction(d, node, wa, wb, &y));
  return cast(d, y, node->dtype, out);
}

//===--- argtopk on short rows (topk, issue 15) ---===//
//
// argtopk has no kernel template; on a row of constant length n <= this it
// becomes ranks computed by native reductions, O(n^2) compares a row in one
// fused kernel, where a graph break would sort on the host (the reference's
// O(n log n) in double, plus staging on CUDA). Longer rows stay whole.
enum { kMaxNativeTopkRow = 256 };

static bool topk_by_ranks(const tj_node_t* node, const tj_graph_t* g) {
  if (node->op != TJ_OP_ARGTOPK || node->rank + 1 > TJ_MAX_RANK) return false;
  const tj_node_t* x = &g->nodes[node->operands[0]];
  int64_t n = x->dims[node->attrs.axis];
  return tj_dim_is_const(n) && n > 0 && n <= kMaxNativeTopkRow;
}

static tj_status_t iota_i32(dec_t* d, int32_t rank, const int64_t* dims,
                            int64_t axis, uint32_t* out) {
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_IOTA;
  desc.dtype = TJ_DTYPE_I32;
  desc.rank = rank;
  desc.dims = dims;
  desc.attrs.axis = axis;
  return tj_rewriter_append(&d->rw, &desc, out);
}

// With the axis moved last (t: [R.., n]) and r = rank: rank_i = the count
// of j that rank before i, sum_j before(x_j, x_i) over [R.., n(i), n(j)]
// (before: better, or NaN against a number, or a tie with j < i); then
// y[R.., p] = sum_i (rank_i == p ? i : 0) over [R.., n(i), k(p)], and the
// axis moved back. Counts and indices are below 256: i32 lanes, twice
// i64's per vector, and one cast to i64 at the end.
static tj_status_t argtopk_ranks(dec_t* d, const tj_node_t* node, uint32_t x,
                                 uint32_t* out) {
  const tj_node_t* xn = &d->rw.dst->nodes[x];
  const int32_t r = xn->rank;
  const int64_t axis = node->attrs.axis, n = xn->dims[axis];
  const int64_t k = node->dims[axis];
  const bool largest = node->attrs.ints[1] != 0;
  const bool fl = tj_dtype_is_float(xn->dtype);
  int64_t perm[TJ_MAX_RANK], rows[TJ_MAX_RANK], dims[TJ_MAX_RANK + 1];
  int32_t m = 0;
  for (int32_t i = 0; i < r; ++i) {
    if (i == axis) continue;
    perm[m] = i;
    rows[m++] = xn->dims[i];
  }
  perm[m] = axis;
  uint32_t t = x;
  if (axis != r - 1) TJ_RETURN_IF_ERROR(transpose(d, x, r, perm, &t));
  // x_i as [R.., n, 1], x_j as [R.., 1, n].
  uint32_t xi, xj, ii, ij;
  memcpy(dims, rows, sizeof(int64_t) * (size_t)m);
  dims[m] = n;
  dims[m + 1] = 1;
  TJ_RETURN_IF_ERROR(reshape(d, t, r + 1, dims, &xi));
  dims[m] = 1;
  dims[m + 1] = n;
  TJ_RETURN_IF_ERROR(reshape(d, t, r + 1, dims, &xj));
  for (int32_t i = 0; i < m; ++i) dims[i] = 1;
  TJ_RETURN_IF_ERROR(iota_i32(d, r + 1, dims, m + 1, &ij));  // [1.., 1, n]
  dims[m] = n;
  dims[m + 1] = 1;
  TJ_RETURN_IF_ERROR(iota_i32(d, r + 1, dims, m, &ii));  // [1.., n, 1]
  uint32_t better, tie, lower, before;
  TJ_RETURN_IF_ERROR(op2(d, largest ? TJ_OP_GT : TJ_OP_LT, xj, xi, &better));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_EQ, xj, xi, &tie));
  if (fl) {
    // NaN is the largest: it beats every number, and NaNs tie.
    uint32_t nj, ni, both, win, not_n;
    TJ_RETURN_IF_ERROR(op1(d, TJ_OP_ISNAN, xj, &nj));
    TJ_RETURN_IF_ERROR(op1(d, TJ_OP_ISNAN, xi, &ni));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_AND, nj, ni, &both));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_OR, tie, both, &tie));
    TJ_RETURN_IF_ERROR(op1(d, TJ_OP_NOT, largest ? ni : nj, &not_n));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_AND, largest ? nj : ni, not_n, &win));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_OR, better, win, &better));
  }
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_LT, ij, ii, &lower));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_AND, tie, lower, &tie));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_OR, better, tie, &before));
  uint32_t count, p, hit, zero, pick, y;
  TJ_RETURN_IF_ERROR(cast(d, before, TJ_DTYPE_I32, &count));
  TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_SUM, count, m + 1, &count));  // [R..,n,1]
  for (int32_t i = 0; i < m; ++i) dims[i] = 1;
  dims[m] = 1;
  dims[m + 1] = k;
  TJ_RETURN_IF_ERROR(iota_i32(d, r + 1, dims, m + 1, &p));  // [1.., 1, k]
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_EQ, count, p, &hit));     // [R.., n, k]
  TJ_RETURN_IF_ERROR(tj_rewriter_scalar(&d->rw, TJ_DTYPE_I32, 0.0, &zero));
  TJ_RETURN_IF_ERROR(where(d, hit, ii, zero, &pick));
  TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_SUM, pick, m, &y));  // [R.., 1, k]
  memcpy(dims, rows, sizeof(int64_t) * (size_t)m);
  dims[m] = k;
  TJ_RETURN_IF_ERROR(reshape(d, y, r, dims, &y));
  TJ_RETURN_IF_ERROR(cast(d, y, TJ_DTYPE_I64, &y));
  if (axis != r - 1) {
    int64_t back[TJ_MAX_RANK];
    for (int32_t i = 0; i < r; ++i) back[perm[i]] = i;
    TJ_RETURN_IF_ERROR(transpose(d, y, r, back, &y));
  }
  *out = y;
  return NULL;
}

// argtopk with 1 <= k <= kMaxSelectK on a constant axis of any length:
// k passes, each two or three native row reductions, O(n k) a row. Pass p
// takes the best value m among the elements not yet taken, then the lowest
// index holding it: floats (largest) m = max(where(taken, -inf, x)), NaN
// propagating, so NaNs come first and tie; (smallest) NaNs are masked to
// +inf with the taken ones and taken last, when no number is left.
// Integers mask the taken ones with the row's own extreme.
enum { kMaxSelectK = 16 };

static bool topk_by_selection(const tj_node_t* node) {
  if (node->op != TJ_OP_ARGTOPK) return false;
  int64_t k = node->attrs.ints[0];
  return k >= 1 && k <= kMaxSelectK;
}

static tj_status_t argtopk_select(dec_t* d, const tj_node_t* node, uint32_t x,
                                  uint32_t* out) {
  const tj_node_t* xn = &d->rw.dst->nodes[x];
  const int32_t r = xn->rank;
  const int64_t axis = node->attrs.axis, n = xn->dims[axis];
  const int64_t k = node->attrs.ints[0];
  const bool largest = node->attrs.ints[1] != 0;
  // |xn| points into the graph's node array, which the nodes added below
  // may move: everything needed of it is read now.
  const tj_dtype_t dtype = xn->dtype;
  const bool fl = tj_dtype_is_float(dtype);
  const tj_op_t best = largest ? TJ_OP_MAX : TJ_OP_MIN;
  int64_t perm[TJ_MAX_RANK], dims[TJ_MAX_RANK];
  int32_t m = 0;
  for (int32_t i = 0; i < r; ++i) {
    if (i != axis) perm[m++] = i;
  }
  perm[m] = axis;
  uint32_t t = x;
  if (axis != r - 1) TJ_RETURN_IF_ERROR(transpose(d, x, r, perm, &t));
  for (int32_t i = 0; i < r - 1; ++i) dims[i] = 1;
  dims[r - 1] = n;
  uint32_t io, none, fill, nan = TJ_NODE_NONE, masked0 = TJ_NODE_NONE;
  TJ_RETURN_IF_ERROR(iota_i32(d, r, dims, r - 1, &io));  // [1.., n]
  TJ_RETURN_IF_ERROR(
      tj_rewriter_scalar(&d->rw, TJ_DTYPE_I32, (double)n, &none));
  if (fl) {
    TJ_RETURN_IF_ERROR(tj_rewriter_scalar(
        &d->rw, dtype, largest ? -INFINITY : INFINITY, &fill));
    TJ_RETURN_IF_ERROR(op1(d, TJ_OP_ISNAN, t, &nan));
    if (!largest) masked0 = nan;  // NaNs wait until no number is left
  } else {
    // The row's opposite extreme: never better than an element not taken.
    TJ_RETURN_IF_ERROR(
        reduce(d, largest ? TJ_OP_MIN : TJ_OP_MAX, t, r - 1, &fill));
  }
  uint32_t picks[kMaxSelectK], taken = TJ_NODE_NONE;
  for (int64_t p = 0; p < k; ++p) {
    uint32_t skip = taken, xm, best_v, hit, free_, cand, where_i, idx;
    if (masked0 != TJ_NODE_NONE) {
      if (skip == TJ_NODE_NONE) {
        skip = masked0;
      } else {
        TJ_RETURN_IF_ERROR(op2(d, TJ_OP_OR, skip, masked0, &skip));
      }
    }
    xm = t;
    if (skip != TJ_NODE_NONE) TJ_RETURN_IF_ERROR(where(d, skip, fill, t, &xm));
    TJ_RETURN_IF_ERROR(reduce(d, best, xm, r - 1, &best_v));  // [R.., 1]
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_EQ, t, best_v, &hit));
    if (fl && largest) {
      // max propagates NaN: then the NaNs are the candidates.
      uint32_t bn, both;
      TJ_RETURN_IF_ERROR(op1(d, TJ_OP_ISNAN, best_v, &bn));
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_AND, nan, bn, &both));
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_OR, hit, both, &hit));
    }
    cand = hit;
    if (skip != TJ_NODE_NONE) {
      TJ_RETURN_IF_ERROR(op1(d, TJ_OP_NOT, skip, &free_));
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_AND, hit, free_, &cand));
    }
    TJ_RETURN_IF_ERROR(where(d, cand, io, none, &where_i));
    TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_MIN, where_i, r - 1, &idx));
    if (fl && !largest) {
      // No number left (idx == n): the first NaN not yet taken.
      uint32_t nan_free = nan, nan_i, nidx, none_left;
      if (taken != TJ_NODE_NONE) {
        uint32_t not_taken;
        TJ_RETURN_IF_ERROR(op1(d, TJ_OP_NOT, taken, &not_taken));
        TJ_RETURN_IF_ERROR(op2(d, TJ_OP_AND, nan, not_taken, &nan_free));
      }
      TJ_RETURN_IF_ERROR(where(d, nan_free, io, none, &nan_i));
      TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_MIN, nan_i, r - 1, &nidx));
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_EQ, idx, none, &none_left));
      TJ_RETURN_IF_ERROR(where(d, none_left, nidx, idx, &idx));
    }
    picks[p] = idx;
    uint32_t now;
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_EQ, io, idx, &now));
    if (taken == TJ_NODE_NONE) {
      taken = now;
    } else {
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_OR, taken, now, &taken));
    }
  }
  uint32_t y;
  TJ_RETURN_IF_ERROR(concat_n(d, (uint32_t)k, picks, r - 1, &y));  // [R.., k]
  TJ_RETURN_IF_ERROR(cast(d, y, TJ_DTYPE_I64, &y));
  if (axis != r - 1) {
    int64_t back[TJ_MAX_RANK];
    for (int32_t i = 0; i < r; ++i) back[perm[i]] = i;
    TJ_RETURN_IF_ERROR(transpose(d, y, r, back, &y));
  }
  *out = y;
  return NULL;
}

static tj_status_t decompose_node(dec_t* d, uint32_t index) {
  const tj_node_t* node = &d->rw.src->nodes[index];
  uint32_t ops[3] = {TJ_NODE_NONE, TJ_NODE_NONE, TJ_NODE_NONE};
  for (uint32_t k = 0; k < node->num_operands && k < 3; ++k) {
    if (node->operands[k] != TJ_NODE_NONE) {
      ops[k] = d->rw.map[node->operands[k]];
    }
  }
  if (node->op == TJ_OP_ARGTOPK) {
    uint32_t y;
    TJ_RETURN_IF_ERROR(topk_by_selection(node)
                           ? argtopk_select(d, node, ops[0], &y)
                           : argtopk_ranks(d, node, ops[0], &y));
    d->rw.map[index] = y;
    return NULL;
  }
  if (matmul_by_reduction(node)) {
    uint32_t y;
    TJ_RETURN_IF_ERROR(matmul_reduction(d, node, ops[0], ops[1], &y));
    d->rw.map[index] = y;
    return NULL;
  }
  if (concat_wide(node)) {
    uint32_t y;
    TJ_RETURN_IF_ERROR(concat_tree(d, node, &y));
    d->rw.map[index] = y;
    return NULL;
  }
  if (node->op == TJ_OP_ONE_HOT) {
    uint32_t y;
    TJ_RETURN_IF_ERROR(one_hot(d, node, ops[0], ops[1], &y));
    d->rw.map[index] = y;
    return NULL;
  }
  if (tj_op_info(node->op)->attr_kind == TJ_ATTR_KIND_WINDOW) {
    uint32_t y;
    TJ_RETURN_IF_ERROR(decompose_window(d, index, ops, &y));
    d->rw.map[index] = y;
    return NULL;
  }
  if (node->op == TJ_OP_ATTENTION) {
    uint32_t all[4], y;
    for (uint32_t k = 0; k < 4; ++k)
      all[k] = node->operands[k] == TJ_NODE_NONE ? TJ_NODE_NONE
                                                 : d->rw.map[node->operands[k]];
    TJ_RETURN_IF_ERROR(attention(d, node, all, &y));
    d->rw.map[index] = y;
    return NULL;
  }
  if (node->op == TJ_OP_ATTENTION_LSE || node->op == TJ_OP_ATTENTION_DQ ||
      node->op == TJ_OP_ATTENTION_DKV) {
    uint32_t all[7], y;
    for (uint32_t k = 0; k < node->num_operands; ++k)
      all[k] = node->operands[k] == TJ_NODE_NONE ? TJ_NODE_NONE
                                                 : d->rw.map[node->operands[k]];
    TJ_RETURN_IF_ERROR(attention_bwd(d, node, all, &y));
    d->rw.map[index] = y;
    return NULL;
  }
  if (node->op == TJ_OP_MATMUL_INTEGER) {
    uint32_t all[4], y;
    for (uint32_t k = 0; k < 4; ++k)
      all[k] = node->operands[k] == TJ_NODE_NONE ? TJ_NODE_NONE
                                                 : d->rw.map[node->operands[k]];
    TJ_RETURN_IF_ERROR(matmul_integer(d, node, all, &y));
    d->rw.map[index] = y;
    return NULL;
  }
  if (node->op == TJ_OP_MATMUL_F8) {
    // fp8 (issue 17): float8 values are exact in f32, and so are their
    // products (8 significant bits at most); the f32 GEMM sums them.
    uint32_t a, b, y;
    TJ_RETURN_IF_ERROR(cast(d, ops[0], TJ_DTYPE_F32, &a));
    TJ_RETURN_IF_ERROR(cast(d, ops[1], TJ_DTYPE_F32, &b));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, a, b, &y));
    d->rw.map[index] = y;
    return NULL;
  }
  if (node->op == TJ_OP_QUANTIZE || node->op == TJ_OP_DEQUANTIZE) {
    uint32_t y;  // quant2 (issue 17): lib/passes/quant_decompose.c
    TJ_RETURN_IF_ERROR(tj_decompose_quant(&d->rw, node, ops, &y));
    d->rw.map[index] = y;
    return NULL;
  }
  if (node->op == TJ_OP_LINEAR) {
    uint32_t y;
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MATMUL, ops[0], ops[1], &y));
    if (ops[2] != TJ_NODE_NONE) {
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_ADD, y, ops[2], &y));
    }
    d->rw.map[index] = y;
    return NULL;
  }
  const tj_dtype_t dtype = node->dtype;
  const tj_dtype_t compute =
      d->upcast_half && (dtype == TJ_DTYPE_F16 || dtype == TJ_DTYPE_BF16)
          ? TJ_DTYPE_F32
          : dtype;
  uint32_t x = ops[0], y;
  // The lane ops (the composites that reduce an axis: softmax, the norms) of
  // a rank-0 tensor act on one lane of one element: give it an axis to
  // reduce over.
  const int32_t rank = node->rank;
  bool lane_op = tj_op_info(node->op)->pattern == TJ_OP_PATTERN_REDUCE;
  if (lane_op && rank == 0) {
    int64_t one = 1;
    TJ_RETURN_IF_ERROR(reshape(d, x, 1, &one, &x));
  }
  TJ_RETURN_IF_ERROR(cast(d, x, compute, &x));
  switch (node->op) {
    case TJ_OP_GELU:
      TJ_RETURN_IF_ERROR(gelu(d, x, node->attrs.approximate, &y));
      break;
    case TJ_OP_SILU: {
      uint32_t s;
      TJ_RETURN_IF_ERROR(op1(d, TJ_OP_SIGMOID, x, &s));
      TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, x, s, &y));
      break;
    }
    case TJ_OP_SOFTMAX:
    case TJ_OP_LOG_SOFTMAX:
      TJ_RETURN_IF_ERROR(softmax(d, x, rank == 0 ? 0 : node->attrs.axis,
                                 node->op == TJ_OP_LOG_SOFTMAX, &y));
      break;
    case TJ_OP_LAYER_NORM:
      TJ_RETURN_IF_ERROR(
          norm(d, x, ops[1], ops[2], node->attrs.value, true, &y));
      break;
    case TJ_OP_RMS_NORM:
      TJ_RETURN_IF_ERROR(
          norm(d, x, ops[1], TJ_NODE_NONE, node->attrs.value, false, &y));
      break;
    default:
      return tj_internal("decompose: no decomposition for %s (node %%%u)",
                         tj_op_info(node->op)->name, index);
  }
  TJ_RETURN_IF_ERROR(cast(d, y, dtype, &y));
  if (lane_op && rank == 0) TJ_RETURN_IF_ERROR(reshape(d, y, 0, NULL, &y));
  d->rw.map[index] = y;
  return NULL;
}

// Whether argtopk node |i| stays whole for the target's native sort
// (tj_pass_ctx_t.native_op; x86: argtopk's host kernel, which beats k
// selection passes on long rows past a few k); TJ_NATIVE_TOPK=off (the
// run plan warns about other values) keeps the native forms here.
static bool topk_native(const tj_pass_ctx_t* ctx, const tj_graph_t* g,
                        uint32_t i) {
  if (g->nodes[i].op != TJ_OP_ARGTOPK || !ctx->native_op ||
      !ctx->native_op(g, i))
    return false;
  const char* v = tj_setting(ctx->context, TJ_SETTING_NATIVE_TOPK);
  return !(v && strcmp(v, "off") == 0);
}

tj_status_t tj_pass_decompose(tj_pass_ctx_t* ctx, tj_plan_t* plan) {
  const tj_graph_t* g = plan->graph;
  bool any = false;
  for (uint32_t i = 0; i < g->num_nodes && !any; ++i) {
    any = tj_op_info(g->nodes[i].op)->kind == TJ_OP_KIND_COMPOSITE ||
          topk_by_ranks(&g->nodes[i], g) || topk_by_selection(&g->nodes[i]) ||
          matmul_by_reduction(&g->nodes[i]) || concat_wide(&g->nodes[i]) ||
          matmul_misaligned(ctx, g, i);
  }
  if (!any) return NULL;
  dec_t d;
  d.upcast_half = ctx->decompose_upcast_half;
  TJ_RETURN_IF_ERROR(tj_rewriter_begin(&d.rw, g));
  tj_status_t status = NULL;
  for (uint32_t i = 0; !status && i < g->num_nodes; ++i) {
    const tj_node_t* node = &g->nodes[i];
    if (node->op == TJ_OP_INPUT) continue;
    // Under a TJ_BISECT budget a composite past it stays whole (it then
    // runs on the reference semantics, a graph break).
    // A composite the target runs natively stays whole (its own group).
    bool composite = tj_op_info(node->op)->kind == TJ_OP_KIND_COMPOSITE &&
                     !(ctx->native_op && ctx->native_op(g, i));
    bool topk = (topk_by_ranks(node, g) || topk_by_selection(node)) &&
                !topk_native(ctx, g, i);
    if (matmul_misaligned(ctx, g, i) && tj_pass_rewrite(ctx, g, i)) {
      status = matmul_widened(&d, node, d.rw.map[node->operands[0]],
                              d.rw.map[node->operands[1]], &d.rw.map[i]);
      continue;
    }
    if ((composite || topk || matmul_by_reduction(node) || concat_wide(node)) &&
        tj_pass_rewrite(ctx, g, i)) {
      status = decompose_node(&d, i);
    } else {
      status = tj_rewriter_clone(&d.rw, i);
    }
  }
  if (status) {
    tj_rewriter_abandon(&d.rw);
    return status;
  }
  tj_graph_t* out = NULL;
  TJ_RETURN_IF_ERROR(tj_rewriter_finish(&d.rw, &out));
  tj_plan_set_graph(plan, out);
  return NULL;
}
