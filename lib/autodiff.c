// lib/autodiff.c: reverse-mode automatic differentiation on the IR
// (tj_graph_grad in include/tensorjit/tj_autodiff.h).
//
// The joint graph is built by one tj_rewriter_t over the source graph: the
// source's inputs, one tangent input per differentiated output, a clone of
// every source node (the forward), then the backward: the source nodes are
// visited in reverse order and each node that has a gradient g and lies on
// a path from a differentiated input applies its vector-Jacobian rule from
// kVjpRules (one table, one entry per op of lib/ops.def, each with its
// formula). A rule returns one contribution per operand, shaped like that
// operand or, for broadcasting ops, like the broadcast result;
// accumulate() sums it down to the operand's exact shape (torch's sum_to)
// and adds it to what fan-out has already accumulated there. Every rule is
// written in core ops, so the backward goes through the same passes
// (canonicalize, fusion with epilogues, memory planning) as any graph, and its
// shapes stay symbolic: one backward serves every B.
//
// Gradient conventions (torch's where it has one): see tj_graph_grad's
// comment. gather's gradient is a scatter-add written as a one-hot matmul,
// onehot(indices)^T @ g: no new core op, and it fuses like any matmul; it
// costs O(#indices * axis size) work, fine for the index counts a training
// step gathers, wasteful for a huge embedding table (a scatter-add op would
// be the fix).

#include "lib/autodiff.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lib/custom_op.h"
#include "lib/dtype.h"
#include "lib/passes/pass.h"

typedef struct ad_t {
  tj_rewriter_t rw;
  const tj_graph_t* src;
  tj_allocator_t allocator;
  // Per source node: the new-graph node holding dL/d(node), or
  // TJ_NODE_NONE while nothing flowed there.
  uint32_t* grad;
  // Per source node: it is float and lies on a path from a differentiated
  // input through ops gradients flow through.
  bool* needs;
} ad_t;

// What a rule sees: the source node, its forward value and operands in the
// new graph, the gradient of its result, which operands want a gradient,
// and where the contributions go (TJ_NODE_NONE: none).
typedef struct vjp_t {
  const tj_node_t* node;  // source node (the source graph is immutable)
  uint32_t index;         // its source index
  uint32_t y;             // forward value, new graph
  const uint32_t* x;      // operands, new graph (TJ_NODE_NONE if absent)
  uint32_t g;             // dL/dy, new graph, shaped like y
  const bool* want;
  uint32_t* out;
} vjp_t;

//===--- reading the new graph (pointers move as it grows: copy) ---===//

static tj_dtype_t dtype_of(const ad_t* ad, uint32_t n) {
  return ad->rw.dst->nodes[n].dtype;
}
static int32_t rank_of(const ad_t* ad, uint32_t n) {
  return ad->rw.dst->nodes[n].rank;
}
// Fills all TJ_MAX_RANK entries of |out| (1s past the rank).
static void dims_of(const ad_t* ad, uint32_t n, int64_t* out) {
  const tj_node_t* node = &ad->rw.dst->nodes[n];
  for (int32_t i = 0; i < TJ_MAX_RANK; ++i) {
    out[i] = i < node->rank ? node->dims[i] : 1;
  }
}
static tj_dimtab_t* dimtab(ad_t* ad) { return &ad->rw.dst->dims; }

//===--- building ---===//

static tj_status_t emit(ad_t* ad, tj_op_t op, uint32_t num_operands,
                        const uint32_t* operands, const tj_attrs_t* attrs,
                        tj_dtype_t dtype, int32_t rank, const int64_t* dims,
                        uint32_t* out) {
  return tj_rewriter_emit(&ad->rw, op, num_operands, operands, attrs, dtype,
                          rank, dims, out);
}

static tj_status_t op1(ad_t* ad, tj_op_t op, uint32_t a, uint32_t* out) {
  return emit(ad, op, 1, &a, NULL, TJ_DTYPE_F32, 0, NULL, out);
}

static tj_status_t op2(ad_t* ad, tj_op_t op, uint32_t a, uint32_t b,
                       uint32_t* out) {
  uint32_t ops[2] = {a, b};
  return emit(ad, op, 2, ops, NULL, TJ_DTYPE_F32, 0, NULL, out);
}

static tj_status_t where(ad_t* ad, uint32_t cond, uint32_t a, uint32_t b,
                         uint32_t* out) {
  uint32_t ops[3] = {cond, a, b};
  return emit(ad, TJ_OP_WHERE, 3, ops, NULL, TJ_DTYPE_F32, 0, NULL, out);
}

// A rank-0 constant of |dtype|.
static tj_status_t scalar(ad_t* ad, tj_dtype_t dtype, double value,
                          uint32_t* out) {
  return tj_rewriter_scalar(&ad->rw, dtype, value, out);
}

// a (op) c, c a scalar of a's dtype.
static tj_status_t op_c(ad_t* ad, tj_op_t op, uint32_t a, double c,
                        uint32_t* out) {
  uint32_t k;
  TJ_RETURN_IF_ERROR(scalar(ad, dtype_of(ad, a), c, &k));
  return op2(ad, op, a, k, out);
}

// c (op) a, c a scalar of a's dtype.
static tj_status_t c_op(ad_t* ad, tj_op_t op, double c, uint32_t a,
                        uint32_t* out) {
  uint32_t k;
  TJ_RETURN_IF_ERROR(scalar(ad, dtype_of(ad, a), c, &k));
  return op2(ad, op, k, a, out);
}

static tj_status_t cast(ad_t* ad, uint32_t a, tj_dtype_t dtype, uint32_t* out) {
  if (dtype_of(ad, a) == dtype) {
    *out = a;
    return NULL;
  }
  return emit(ad, TJ_OP_CAST, 1, &a, NULL, dtype, 0, NULL, out);
}

static bool same_shape(const ad_t* ad, uint32_t a, int32_t rank,
                       const int64_t* dims) {
  if (rank_of(ad, a) != rank) return false;
  const int64_t* have = ad->rw.dst->nodes[a].dims;
  for (int32_t i = 0; i < rank; ++i) {
    if (have[i] != dims[i]) return false;
  }
  return true;
}

static tj_status_t reshape(ad_t* ad, uint32_t a, int32_t rank,
                           const int64_t* dims, uint32_t* out) {
  if (same_shape(ad, a, rank, dims)) {
    *out = a;
    return NULL;
  }
  return emit(ad, TJ_OP_RESHAPE, 1, &a, NULL, dtype_of(ad, a), rank, dims, out);
}

static tj_status_t broadcast_to(ad_t* ad, uint32_t a, int32_t rank,
                                const int64_t* dims, uint32_t* out) {
  if (same_shape(ad, a, rank, dims)) {
    *out = a;
    return NULL;
  }
  return emit(ad, TJ_OP_BROADCAST_TO, 1, &a, NULL, dtype_of(ad, a), rank, dims,
              out);
}

static tj_status_t transpose(ad_t* ad, uint32_t a, const int64_t* perm,
                             uint32_t* out) {
  tj_attrs_t attrs;
  memset(&attrs, 0, sizeof(attrs));
  attrs.ints = (int64_t*)perm;
  attrs.num_ints = (uint32_t)rank_of(ad, a);
  return emit(ad, TJ_OP_TRANSPOSE, 1, &a, &attrs, TJ_DTYPE_F32, 0, NULL, out);
}

// Swaps the last two axes (rank >= 2).
static tj_status_t transpose_last2(ad_t* ad, uint32_t a, uint32_t* out) {
  int32_t rank = rank_of(ad, a);
  int64_t perm[TJ_MAX_RANK];
  for (int32_t i = 0; i < rank; ++i) perm[i] = i;
  perm[rank - 2] = rank - 1;
  perm[rank - 1] = rank - 2;
  return transpose(ad, a, perm, out);
}

// A reduction over |num_axes| axes (> 0).
static tj_status_t reduce(ad_t* ad, tj_op_t op, uint32_t a, uint32_t num_axes,
                          const int64_t* axes, bool keepdims, uint32_t* out) {
  tj_attrs_t attrs;
  memset(&attrs, 0, sizeof(attrs));
  attrs.ints = (int64_t*)axes;
  attrs.num_ints = num_axes;
  attrs.keepdims = keepdims;
  return emit(ad, op, 1, &a, &attrs, TJ_DTYPE_F32, 0, NULL, out);
}

static tj_status_t reduce_last(ad_t* ad, tj_op_t op, uint32_t a,
                               uint32_t* out) {
  int64_t axis = rank_of(ad, a) - 1;
  return reduce(ad, op, a, 1, &axis, true, out);
}

static tj_status_t full(ad_t* ad, tj_dtype_t dtype, int32_t rank,
                        const int64_t* dims, double value, uint32_t* out) {
  tj_attrs_t attrs;
  memset(&attrs, 0, sizeof(attrs));
  attrs.value = value;
  return emit(ad, TJ_OP_FULL, 0, NULL, &attrs, dtype, rank, dims, out);
}

static tj_status_t iota(ad_t* ad, tj_dtype_t dtype, int32_t rank,
                        const int64_t* dims, int64_t axis, uint32_t* out) {
  tj_attrs_t attrs;
  memset(&attrs, 0, sizeof(attrs));
  attrs.axis = axis;
  return emit(ad, TJ_OP_IOTA, 0, NULL, &attrs, dtype, rank, dims, out);
}

static tj_status_t slice(ad_t* ad, uint32_t a, const int64_t* ints,
                         uint32_t* out) {
  tj_attrs_t attrs;
  memset(&attrs, 0, sizeof(attrs));
  attrs.ints = (int64_t*)ints;
  attrs.num_ints = 3 * (uint32_t)rank_of(ad, a);
  return emit(ad, TJ_OP_SLICE, 1, &a, &attrs, TJ_DTYPE_F32, 0, NULL, out);
}

// Zero padding; |ints| = low[rank], high[rank].
static tj_status_t pad0(ad_t* ad, uint32_t a, const int64_t* ints,
                        uint32_t* out) {
  int32_t rank = rank_of(ad, a);
  bool any = false;
  for (int32_t i = 0; i < 2 * rank; ++i) any |= ints[i] != 0;
  if (!any) {
    *out = a;
    return NULL;
  }
  tj_attrs_t attrs;
  memset(&attrs, 0, sizeof(attrs));
  attrs.ints = (int64_t*)ints;
  attrs.num_ints = 2 * (uint32_t)rank;
  return emit(ad, TJ_OP_PAD, 1, &a, &attrs, TJ_DTYPE_F32, 0, NULL, out);
}

static tj_status_t gather(ad_t* ad, uint32_t a, uint32_t indices, int64_t axis,
                          uint32_t* out) {
  tj_attrs_t attrs;
  memset(&attrs, 0, sizeof(attrs));
  attrs.axis = axis;
  uint32_t ops[2] = {a, indices};
  return emit(ad, TJ_OP_GATHER, 2, ops, &attrs, TJ_DTYPE_F32, 0, NULL, out);
}

// The value of |dim| as a rank-0 tensor of |dtype|: a constant, or for a
// symbolic dim the sum of that many ones (all a graph can say about B).
static tj_status_t dim_value(ad_t* ad, int64_t dim, tj_dtype_t dtype,
                             uint32_t* out) {
  if (tj_dim_is_const(dim)) return scalar(ad, dtype, (double)dim, out);
  uint32_t ones;
  int64_t axis = 0;
  TJ_RETURN_IF_ERROR(full(ad, dtype, 1, &dim, 1.0, &ones));
  return reduce(ad, TJ_OP_SUM, ones, 1, &axis, false, out);
}

// |g| summed down to shape (rank, dims): over the leading dims it has in
// excess and over the dims where the target is 1 (torch's sum_to). A dim
// that differs only symbolically (B vs C, guarded equal) is not summed.
static tj_status_t sum_to(ad_t* ad, uint32_t g, int32_t rank,
                          const int64_t* dims, uint32_t* out) {
  int32_t gr = rank_of(ad, g);
  int64_t gd[TJ_MAX_RANK];
  dims_of(ad, g, gd);
  if (gr < rank) return broadcast_to(ad, g, rank, dims, out);
  int32_t lead = gr - rank;
  int64_t axes[TJ_MAX_RANK], kept[TJ_MAX_RANK];
  uint32_t num_axes = 0;
  bool inner = false;
  for (int32_t i = 0; i < gr; ++i) {
    if (i < lead) {
      axes[num_axes++] = i;
    } else if (dims[i - lead] == 1 && gd[i] != 1) {
      axes[num_axes++] = i;
      inner = true;
      kept[i - lead] = 1;
    } else {
      kept[i - lead] = gd[i];  // equal to dims[i - lead], or guarded equal
    }
  }
  uint32_t s = g;
  if (num_axes) {
    TJ_RETURN_IF_ERROR(reduce(ad, TJ_OP_SUM, g, num_axes, axes, inner, &s));
    TJ_RETURN_IF_ERROR(reshape(ad, s, rank, kept, &s));
  }
  // Exactly the target's dims, so that every rule sees its gradient shaped
  // like its result (broadcast_to accepts, and guards, B against C).
  return broadcast_to(ad, s, rank, dims, out);
}

// |g| (a reduction's result gradient) reshaped to the input's rank, the
// reduced axes kept as 1s, for broadcasting back.
static tj_status_t keep_reduced(ad_t* ad, const tj_node_t* node, uint32_t g,
                                uint32_t a, uint32_t* out) {
  if (node->attrs.keepdims) {
    *out = g;
    return NULL;
  }
  int32_t rank = rank_of(ad, a);
  int64_t dims[TJ_MAX_RANK];
  dims_of(ad, a, dims);
  for (uint32_t k = 0; k < node->attrs.num_ints; ++k) {
    dims[node->attrs.ints[k]] = 1;
  }
  return reshape(ad, g, rank, dims, out);
}

//===--- the rules ---===//

static const double kTwoOverSqrtPi = 1.1283791670955125738961589031215;
static const double kSqrtHalf = 0.70710678118654752440084436210485;
static const double kInvSqrt2Pi = 0.39894228040143267793994605993438;
static const double kTwoSqrt2OverPi = 1.5957691216057307117597842397375;

#define G (v->g)
#define Y (v->y)
#define X0 (v->x[0])
#define X1 (v->x[1])
#define X2 (v->x[2])

static tj_status_t vjp_neg(ad_t* ad, const vjp_t* v) {
  return op1(ad, TJ_OP_NEG, G, &v->out[0]);
}

static tj_status_t vjp_abs(ad_t* ad, const vjp_t* v) {
  uint32_t s;
  TJ_RETURN_IF_ERROR(op1(ad, TJ_OP_SIGN, X0, &s));
  return op2(ad, TJ_OP_MUL, G, s, &v->out[0]);
}

static tj_status_t vjp_exp(ad_t* ad, const vjp_t* v) {
  return op2(ad, TJ_OP_MUL, G, Y, &v->out[0]);
}

static tj_status_t vjp_log(ad_t* ad, const vjp_t* v) {
  return op2(ad, TJ_OP_DIV, G, X0, &v->out[0]);
}

static tj_status_t vjp_sqrt(ad_t* ad, const vjp_t* v) {
  uint32_t t;
  TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_MUL, G, 0.5, &t));
  return op2(ad, TJ_OP_DIV, t, Y, &v->out[0]);
}

static tj_status_t vjp_rsqrt(ad_t* ad, const vjp_t* v) {
  uint32_t t;
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_DIV, Y, X0, &t));
  TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_MUL, t, -0.5, &t));
  return op2(ad, TJ_OP_MUL, G, t, &v->out[0]);
}

static tj_status_t vjp_tanh(ad_t* ad, const vjp_t* v) {
  uint32_t t;
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, Y, Y, &t));
  TJ_RETURN_IF_ERROR(c_op(ad, TJ_OP_SUB, 1.0, t, &t));
  return op2(ad, TJ_OP_MUL, G, t, &v->out[0]);
}

static tj_status_t vjp_sigmoid(ad_t* ad, const vjp_t* v) {
  uint32_t t;
  TJ_RETURN_IF_ERROR(c_op(ad, TJ_OP_SUB, 1.0, Y, &t));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, Y, t, &t));
  return op2(ad, TJ_OP_MUL, G, t, &v->out[0]);
}

// g * slope * exp(-a^2): erf's derivative (slope 2/sqrt(pi)) and erfc's
// (its negation).
static tj_status_t gauss_times(ad_t* ad, const vjp_t* v, double slope) {
  uint32_t t;
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, X0, X0, &t));
  TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_MUL, t, -1.0, &t));
  TJ_RETURN_IF_ERROR(op1(ad, TJ_OP_EXP, t, &t));
  TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_MUL, t, slope, &t));
  return op2(ad, TJ_OP_MUL, G, t, &v->out[0]);
}

static tj_status_t vjp_erf(ad_t* ad, const vjp_t* v) {
  return gauss_times(ad, v, kTwoOverSqrtPi);
}

static tj_status_t vjp_erfc(ad_t* ad, const vjp_t* v) {
  return gauss_times(ad, v, -kTwoOverSqrtPi);
}

static tj_status_t vjp_sin(ad_t* ad, const vjp_t* v) {
  uint32_t t;
  TJ_RETURN_IF_ERROR(op1(ad, TJ_OP_COS, X0, &t));
  return op2(ad, TJ_OP_MUL, G, t, &v->out[0]);
}

static tj_status_t vjp_cos(ad_t* ad, const vjp_t* v) {
  uint32_t t;
  TJ_RETURN_IF_ERROR(op1(ad, TJ_OP_SIN, X0, &t));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, G, t, &t));
  return op1(ad, TJ_OP_NEG, t, &v->out[0]);
}

// asin' = 1 / sqrt(1 - a^2), acos' its negation (|a| < 1).
static tj_status_t arc_sine_slope(ad_t* ad, const vjp_t* v, double sign) {
  uint32_t t;
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, X0, X0, &t));
  TJ_RETURN_IF_ERROR(c_op(ad, TJ_OP_SUB, 1.0, t, &t));
  TJ_RETURN_IF_ERROR(op1(ad, TJ_OP_RSQRT, t, &t));
  if (sign < 0) TJ_RETURN_IF_ERROR(op1(ad, TJ_OP_NEG, t, &t));
  return op2(ad, TJ_OP_MUL, G, t, &v->out[0]);
}

static tj_status_t vjp_asin(ad_t* ad, const vjp_t* v) {
  return arc_sine_slope(ad, v, 1.0);
}

static tj_status_t vjp_acos(ad_t* ad, const vjp_t* v) {
  return arc_sine_slope(ad, v, -1.0);
}

static tj_status_t vjp_atan(ad_t* ad, const vjp_t* v) {
  uint32_t t;
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, X0, X0, &t));
  TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_ADD, t, 1.0, &t));
  return op2(ad, TJ_OP_DIV, G, t, &v->out[0]);
}

static tj_status_t vjp_relu(ad_t* ad, const vjp_t* v) {
  uint32_t zero, c;
  TJ_RETURN_IF_ERROR(scalar(ad, dtype_of(ad, X0), 0.0, &zero));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_GT, X0, zero, &c));
  return where(ad, c, G, zero, &v->out[0]);
}

static tj_status_t vjp_cast(ad_t* ad, const vjp_t* v) {
  return cast(ad, G, dtype_of(ad, X0), &v->out[0]);
}

static tj_status_t vjp_add(ad_t* ad, const vjp_t* v) {
  v->out[0] = G;
  v->out[1] = G;
  return NULL;
}

static tj_status_t vjp_sub(ad_t* ad, const vjp_t* v) {
  v->out[0] = G;
  if (!v->want[1]) return NULL;
  return op1(ad, TJ_OP_NEG, G, &v->out[1]);
}

static tj_status_t vjp_mul(ad_t* ad, const vjp_t* v) {
  if (v->want[0]) TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, G, X1, &v->out[0]));
  if (v->want[1]) TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, G, X0, &v->out[1]));
  return NULL;
}

static tj_status_t vjp_div(ad_t* ad, const vjp_t* v) {
  uint32_t q, t;
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_DIV, G, X1, &q));
  v->out[0] = q;
  if (!v->want[1]) return NULL;
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, q, Y, &t));
  return op1(ad, TJ_OP_NEG, t, &v->out[1]);
}

// mod and fmod: y = a - q b with q = floor(a / b) or trunc(a / b), an
// integer constant between its jumps: ga = g, gb = -g q, q = (a - y) / b.
static tj_status_t vjp_remainder(ad_t* ad, const vjp_t* v) {
  uint32_t t;
  v->out[0] = G;
  if (!v->want[1]) return NULL;
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_SUB, X0, Y, &t));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_DIV, t, X1, &t));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, G, t, &t));
  return op1(ad, TJ_OP_NEG, t, &v->out[1]);
}

static tj_status_t vjp_pow(ad_t* ad, const vjp_t* v) {
  uint32_t zero, t, c;
  TJ_RETURN_IF_ERROR(scalar(ad, dtype_of(ad, X0), 0.0, &zero));
  if (v->want[0]) {  // b * a^(b-1), 0 where b == 0 (even at a == 0)
    TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_SUB, X1, 1.0, &t));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_POW, X0, t, &t));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, X1, t, &t));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, G, t, &t));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_EQ, X1, zero, &c));
    TJ_RETURN_IF_ERROR(where(ad, c, zero, t, &v->out[0]));
  }
  if (v->want[1]) {  // y * log(a), 0 where a == 0 and b >= 0
    uint32_t c2;
    TJ_RETURN_IF_ERROR(op1(ad, TJ_OP_LOG, X0, &t));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, Y, t, &t));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, G, t, &t));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_EQ, X0, zero, &c));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_GE, X1, zero, &c2));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_AND, c, c2, &c));
    TJ_RETURN_IF_ERROR(where(ad, c, zero, t, &v->out[1]));
  }
  return NULL;
}

// maximum (|gt| = GT) / minimum (LT): g to the winner, half each on ties.
static tj_status_t extremum(ad_t* ad, const vjp_t* v, tj_op_t wins) {
  tj_dtype_t dt = dtype_of(ad, X0);
  uint32_t zero, half, one, eq, share;
  TJ_RETURN_IF_ERROR(scalar(ad, dt, 0.0, &zero));
  TJ_RETURN_IF_ERROR(scalar(ad, dt, 0.5, &half));
  TJ_RETURN_IF_ERROR(scalar(ad, dt, 1.0, &one));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_EQ, X0, X1, &eq));
  TJ_RETURN_IF_ERROR(where(ad, eq, half, zero, &share));
  for (int k = 0; k < 2; ++k) {
    if (!v->want[k]) continue;
    uint32_t c, w;
    TJ_RETURN_IF_ERROR(op2(ad, wins, v->x[k], v->x[1 - k], &c));
    TJ_RETURN_IF_ERROR(where(ad, c, one, share, &w));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, G, w, &v->out[k]));
  }
  return NULL;
}

static tj_status_t vjp_maximum(ad_t* ad, const vjp_t* v) {
  return extremum(ad, v, TJ_OP_GT);
}

static tj_status_t vjp_minimum(ad_t* ad, const vjp_t* v) {
  return extremum(ad, v, TJ_OP_LT);
}

static tj_status_t vjp_where(ad_t* ad, const vjp_t* v) {
  uint32_t zero;
  TJ_RETURN_IF_ERROR(scalar(ad, dtype_of(ad, X1), 0.0, &zero));
  if (v->want[1]) TJ_RETURN_IF_ERROR(where(ad, X0, G, zero, &v->out[1]));
  if (v->want[2]) TJ_RETURN_IF_ERROR(where(ad, X0, zero, G, &v->out[2]));
  return NULL;
}

static tj_status_t vjp_sum(ad_t* ad, const vjp_t* v) {
  uint32_t gk;
  int64_t dims[TJ_MAX_RANK];
  dims_of(ad, X0, dims);
  TJ_RETURN_IF_ERROR(keep_reduced(ad, v->node, G, X0, &gk));
  return broadcast_to(ad, gk, rank_of(ad, X0), dims, &v->out[0]);
}

static tj_status_t vjp_mean(ad_t* ad, const vjp_t* v) {
  uint32_t gk, n;
  int64_t dims[TJ_MAX_RANK], reduced[TJ_MAX_RANK], count;
  dims_of(ad, X0, dims);
  for (uint32_t k = 0; k < v->node->attrs.num_ints; ++k) {
    reduced[k] = dims[v->node->attrs.ints[k]];
  }
  TJ_RETURN_IF_ERROR(tj_dim_product(
      dimtab(ad), (int32_t)v->node->attrs.num_ints, reduced, &count));
  TJ_RETURN_IF_ERROR(keep_reduced(ad, v->node, G, X0, &gk));
  if (count != 0) {  // (an empty mean has an empty gradient)
    TJ_RETURN_IF_ERROR(dim_value(ad, count, dtype_of(ad, X0), &n));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_DIV, gk, n, &gk));
  }
  return broadcast_to(ad, gk, rank_of(ad, X0), dims, &v->out[0]);
}

// max/min over axes: g split evenly among the elements equal to the result
// (torch's amax/amin rule).
static tj_status_t vjp_max_min(ad_t* ad, const vjp_t* v) {
  uint32_t gk, yk, mask, count, t;
  TJ_RETURN_IF_ERROR(keep_reduced(ad, v->node, G, X0, &gk));
  TJ_RETURN_IF_ERROR(keep_reduced(ad, v->node, Y, X0, &yk));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_EQ, X0, yk, &mask));
  TJ_RETURN_IF_ERROR(cast(ad, mask, dtype_of(ad, X0), &mask));
  TJ_RETURN_IF_ERROR(reduce(ad, TJ_OP_SUM, mask, v->node->attrs.num_ints,
                            v->node->attrs.ints, true, &count));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_DIV, gk, count, &t));
  return op2(ad, TJ_OP_MUL, mask, t, &v->out[0]);
}

// prod over axes without dividing by zero: with p' the product of the
// nonzero elements and z the number of zeros in the reduction, the
// derivative is p'/a when z == 0, p' at the zero when z == 1, else 0.
static tj_status_t vjp_prod(ad_t* ad, const vjp_t* v) {
  tj_dtype_t dt = dtype_of(ad, X0);
  uint32_t num = v->node->attrs.num_ints;
  const int64_t* axes = v->node->attrs.ints;
  uint32_t gk, zero, one, z, zf, nz, a1, p, none, single, r0, r1, d;
  TJ_RETURN_IF_ERROR(keep_reduced(ad, v->node, G, X0, &gk));
  TJ_RETURN_IF_ERROR(scalar(ad, dt, 0.0, &zero));
  TJ_RETURN_IF_ERROR(scalar(ad, dt, 1.0, &one));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_EQ, X0, zero, &z));
  TJ_RETURN_IF_ERROR(cast(ad, z, dt, &zf));
  TJ_RETURN_IF_ERROR(reduce(ad, TJ_OP_SUM, zf, num, axes, true, &nz));
  TJ_RETURN_IF_ERROR(where(ad, z, one, X0, &a1));
  TJ_RETURN_IF_ERROR(reduce(ad, TJ_OP_PROD, a1, num, axes, true, &p));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_EQ, nz, zero, &none));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_EQ, nz, one, &single));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_DIV, p, a1, &r0));
  TJ_RETURN_IF_ERROR(where(ad, z, p, zero, &r1));
  TJ_RETURN_IF_ERROR(where(ad, single, r1, zero, &r1));
  TJ_RETURN_IF_ERROR(where(ad, none, r0, r1, &d));
  return op2(ad, TJ_OP_MUL, d, gk, &v->out[0]);
}

// The gradients of y = a @ b (numpy.matmul): ga = g @ b^T and gb = a^T @ g
// on the operands promoted to matrices, summed over broadcast batch dims.
static tj_status_t matmul_grads(ad_t* ad, uint32_t a, uint32_t b, uint32_t g,
                                bool want_a, bool want_b, uint32_t* ga,
                                uint32_t* gb) {
  int32_t ra = rank_of(ad, a), rb = rank_of(ad, b), rg = rank_of(ad, g);
  int64_t ad_[TJ_MAX_RANK], bd[TJ_MAX_RANK], gd[TJ_MAX_RANK + 2];
  dims_of(ad, a, ad_);
  dims_of(ad, b, bd);
  dims_of(ad, g, gd);
  uint32_t A = a, Bm = b, Gm = g, t;
  int64_t k = ad_[ra - 1];
  if (ra == 1) {
    int64_t d[2] = {1, k};
    TJ_RETURN_IF_ERROR(reshape(ad, a, 2, d, &A));
  }
  if (rb == 1) {
    int64_t d[2] = {bd[0], 1};
    TJ_RETURN_IF_ERROR(reshape(ad, b, 2, d, &Bm));
    gd[rg++] = 1;
  }
  if (ra == 1) {  // the 1 goes before the last dim
    for (int32_t i = rg; i > rg - 1; --i) gd[i] = gd[i - 1];
    gd[rg - 1] = 1;
    ++rg;
  }
  if (ra == 1 || rb == 1) TJ_RETURN_IF_ERROR(reshape(ad, g, rg, gd, &Gm));
  int32_t rA = rank_of(ad, A), rB = rank_of(ad, Bm);
  int64_t Ad[TJ_MAX_RANK], Bd[TJ_MAX_RANK];
  dims_of(ad, A, Ad);
  dims_of(ad, Bm, Bd);
  if (want_a) {
    TJ_RETURN_IF_ERROR(transpose_last2(ad, Bm, &t));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MATMUL, Gm, t, &t));
    TJ_RETURN_IF_ERROR(sum_to(ad, t, rA, Ad, &t));
    TJ_RETURN_IF_ERROR(reshape(ad, t, ra, ad_, ga));
  }
  if (want_b) {
    if (rB == 2 && rA > 2) {
      // A weight shared by a batch: one GEMM over the flattened batch,
      // [K, B*M] @ [B*M, N], instead of a batched product and a sum.
      int64_t a2[2] = {TJ_DIM_INFER, Ad[rA - 1]};
      int64_t g2[2] = {TJ_DIM_INFER, Bd[1]};
      uint32_t A2, G2;
      TJ_RETURN_IF_ERROR(reshape(ad, A, 2, a2, &A2));
      TJ_RETURN_IF_ERROR(reshape(ad, Gm, 2, g2, &G2));
      TJ_RETURN_IF_ERROR(transpose_last2(ad, A2, &t));
      TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MATMUL, t, G2, &t));
    } else {
      TJ_RETURN_IF_ERROR(transpose_last2(ad, A, &t));
      TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MATMUL, t, Gm, &t));
      TJ_RETURN_IF_ERROR(sum_to(ad, t, rB, Bd, &t));
    }
    TJ_RETURN_IF_ERROR(reshape(ad, t, rb, bd, gb));
  }
  return NULL;
}

static tj_status_t vjp_matmul(ad_t* ad, const vjp_t* v) {
  return matmul_grads(ad, X0, X1, G, v->want[0], v->want[1], &v->out[0],
                      &v->out[1]);
}

static tj_status_t vjp_linear(ad_t* ad, const vjp_t* v) {
  TJ_RETURN_IF_ERROR(matmul_grads(ad, X0, X1, G, v->want[0], v->want[1],
                                  &v->out[0], &v->out[1]));
  if (X2 != TJ_NODE_NONE) v->out[2] = G;  // summed to [N] by accumulate
  return NULL;
}

// attention (issue 14), recomputing the probabilities as decompose does
// (f16/bf16 in f32), grouped-query heads through q reshaped to
// [.., Hkv, G*Tq, D] so that dk and dv sum over the group in the matmul:
//   p = softmax(s) (0 on a row with no key), dv = p^T @ g,
//   dp = g @ v^T, ds = p (dp - sum(dp p)), dmask = ds (additive),
//   dq = scale ds @ k, dk = scale ds^T @ q.
// [.., H, Tq, n] -> [.., Hkv, G*Tq, n] (head h = hk*G + g, row g*Tq + i).
static tj_status_t group_heads(ad_t* ad, uint32_t x, int64_t hkv,
                               uint32_t* out) {
  const int32_t r = rank_of(ad, x);
  int64_t dims[TJ_MAX_RANK];
  dims_of(ad, x, dims);
  dims[r - 3] = hkv;
  dims[r - 2] = TJ_DIM_INFER;
  return reshape(ad, x, r, dims, out);
}

// The fused form (fabwd): FlashAttention-2's backward as three nodes that
// recompute p from the scores and the row log-sum-exp, never materializing
// [.., H, Tq, Tk] where a target keeps them whole:
//   lse = attention_lse(q, k, mask), delta = rowsum(g y) (in lse's dtype),
//   dq = attention_dq(..), [dk | dv] = attention_dkv(..) sliced, each
//   summed to its operand's batch dims.
// Nodes have one result, so the forward cannot hand its lse over; the
// recompute costs one q.k^T pass of the backward's five.
static tj_status_t take_range(ad_t* ad, uint32_t g, int32_t axis, int64_t start,
                              int64_t length, uint32_t* out);

static tj_status_t vjp_attention_fused(ad_t* ad, const vjp_t* v) {
  const tj_node_t* node = v->node;
  const int32_t r = node->rank;
  const tj_dtype_t c = tj_attention_lse_dtype(node->dtype);
  tj_attrs_t attrs;
  memset(&attrs, 0, sizeof(attrs));
  int64_t causal = node->attrs.num_ints ? node->attrs.ints[0] : 0;
  attrs.value = node->attrs.value;
  attrs.ints = &causal;
  attrs.num_ints = 1;
  uint32_t lse, delta, gy, yc, gc;
  const uint32_t lse_ops[3] = {X0, X1, v->x[3]};
  TJ_RETURN_IF_ERROR(emit(ad, TJ_OP_ATTENTION_LSE, 3, lse_ops, &attrs,
                          TJ_DTYPE_F32, 0, NULL, &lse));
  TJ_RETURN_IF_ERROR(cast(ad, v->y, c, &yc));
  TJ_RETURN_IF_ERROR(cast(ad, G, c, &gc));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, gc, yc, &gy));
  int64_t axis = r - 1;
  TJ_RETURN_IF_ERROR(reduce(ad, TJ_OP_SUM, gy, 1, &axis, false, &delta));
  const uint32_t ops[7] = {X0, X1, X2, v->x[3], G, lse, delta};
  int64_t qd[TJ_MAX_RANK], kd[TJ_MAX_RANK], vd[TJ_MAX_RANK];
  dims_of(ad, X0, qd);
  dims_of(ad, X1, kd);
  dims_of(ad, X2, vd);
  uint32_t t;
  if (v->want[0]) {
    TJ_RETURN_IF_ERROR(emit(ad, TJ_OP_ATTENTION_DQ, 7, ops, &attrs,
                            TJ_DTYPE_F32, 0, NULL, &t));
    TJ_RETURN_IF_ERROR(sum_to(ad, t, r, qd, &v->out[0]));
  }
  if (!v->want[1] && !v->want[2]) return NULL;
  uint32_t kv;
  TJ_RETURN_IF_ERROR(emit(ad, TJ_OP_ATTENTION_DKV, 7, ops, &attrs, TJ_DTYPE_F32,
                          0, NULL, &kv));
  const int64_t d = kd[r - 1], dv = vd[r - 1];
  if (v->want[1]) {
    TJ_RETURN_IF_ERROR(take_range(ad, kv, r - 1, 0, d, &t));
    TJ_RETURN_IF_ERROR(sum_to(ad, t, r, kd, &v->out[1]));
  }
  if (v->want[2]) {
    TJ_RETURN_IF_ERROR(take_range(ad, kv, r - 1, d, dv, &t));
    TJ_RETURN_IF_ERROR(sum_to(ad, t, r, vd, &v->out[2]));
  }
  return NULL;
}

static tj_status_t vjp_attention(ad_t* ad, const vjp_t* v) {
  const tj_node_t* node = v->node;
  // An additive mask's gradient is ds itself, [.., H, Tq, Tk]: only the
  // unfused form below has it.
  const uint32_t mask = v->x[3];
  const bool mask_grad =
      mask != TJ_NODE_NONE && dtype_of(ad, mask) != TJ_DTYPE_BOOL && v->want[3];
  if (!mask_grad) return vjp_attention_fused(ad, v);
  const int32_t r = node->rank;
  const tj_dtype_t dt = node->dtype;
  const tj_dtype_t c =
      dt == TJ_DTYPE_F16 || dt == TJ_DTYPE_BF16 ? TJ_DTYPE_F32 : dt;
  const double scale = node->attrs.value;
  int64_t qd[TJ_MAX_RANK], kd[TJ_MAX_RANK];
  dims_of(ad, X0, qd);
  dims_of(ad, X1, kd);
  const int64_t h = qd[r - 3], hkv = kd[r - 3], group = h / hkv;
  const int64_t tq = qd[r - 2], tk = kd[r - 2];
  uint32_t q, k, vv, g, kt, s, ninf, zero, one, t, mx, e, l, p;
  TJ_RETURN_IF_ERROR(cast(ad, X0, c, &q));
  TJ_RETURN_IF_ERROR(cast(ad, X1, c, &k));
  TJ_RETURN_IF_ERROR(cast(ad, X2, c, &vv));
  TJ_RETURN_IF_ERROR(cast(ad, G, c, &g));
  // Grouped views: [.., Hkv, G*Tq, x] (plain when G = 1).
  int64_t full[TJ_MAX_RANK];
  if (group > 1) {
    TJ_RETURN_IF_ERROR(group_heads(ad, q, hkv, &q));
    TJ_RETURN_IF_ERROR(group_heads(ad, g, hkv, &g));
  }
  TJ_RETURN_IF_ERROR(transpose_last2(ad, k, &kt));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MATMUL, q, kt, &s));
  dims_of(ad, s, full);
  full[r - 3] = h;
  full[r - 2] = tq;
  if (group > 1) TJ_RETURN_IF_ERROR(reshape(ad, s, r, full, &s));
  TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_MUL, s, scale, &s));
  TJ_RETURN_IF_ERROR(scalar(ad, c, -INFINITY, &ninf));
  TJ_RETURN_IF_ERROR(scalar(ad, c, 0.0, &zero));
  TJ_RETURN_IF_ERROR(scalar(ad, c, 1.0, &one));
  bool additive = false;
  if (mask != TJ_NODE_NONE) {
    if (dtype_of(ad, mask) == TJ_DTYPE_BOOL) {
      TJ_RETURN_IF_ERROR(where(ad, mask, s, ninf, &s));
    } else {
      additive = true;
      TJ_RETURN_IF_ERROR(cast(ad, mask, c, &t));
      TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_ADD, s, t, &s));
    }
  }
  if (node->attrs.num_ints && node->attrs.ints[0]) {
    int64_t qk[2] = {tq, tk};
    uint32_t row, col, keep;
    TJ_RETURN_IF_ERROR(iota(ad, TJ_DTYPE_I64, 2, qk, 0, &row));
    TJ_RETURN_IF_ERROR(iota(ad, TJ_DTYPE_I64, 2, qk, 1, &col));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_GE, row, col, &keep));
    TJ_RETURN_IF_ERROR(where(ad, keep, s, ninf, &s));
  }
  TJ_RETURN_IF_ERROR(reduce_last(ad, TJ_OP_MAX, s, &mx));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_EQ, mx, ninf, &t));
  TJ_RETURN_IF_ERROR(where(ad, t, zero, mx, &mx));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_SUB, s, mx, &e));
  TJ_RETURN_IF_ERROR(op1(ad, TJ_OP_EXP, e, &e));
  TJ_RETURN_IF_ERROR(reduce_last(ad, TJ_OP_SUM, e, &l));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_EQ, l, zero, &t));
  TJ_RETURN_IF_ERROR(where(ad, t, one, l, &l));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_DIV, e, l, &p));  // [.., H, Tq, Tk]
  uint32_t pg = p, vt, dp, ds, dsg;
  if (group > 1) TJ_RETURN_IF_ERROR(group_heads(ad, p, hkv, &pg));
  if (v->want[2]) {
    uint32_t pt;
    TJ_RETURN_IF_ERROR(transpose_last2(ad, pg, &pt));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MATMUL, pt, g, &t));
    TJ_RETURN_IF_ERROR(cast(ad, t, dt, &v->out[2]));
  }
  if (!v->want[0] && !v->want[1] && !(additive && v->want[3])) return NULL;
  TJ_RETURN_IF_ERROR(transpose_last2(ad, vv, &vt));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MATMUL, g, vt, &dp));
  if (group > 1) TJ_RETURN_IF_ERROR(reshape(ad, dp, r, full, &dp));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, dp, p, &t));
  TJ_RETURN_IF_ERROR(reduce_last(ad, TJ_OP_SUM, t, &t));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_SUB, dp, t, &t));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, p, t, &ds));  // [.., H, Tq, Tk]
  if (additive && v->want[3])
    TJ_RETURN_IF_ERROR(cast(ad, ds, dtype_of(ad, mask), &v->out[3]));
  TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_MUL, ds, scale, &ds));
  dsg = ds;
  if (group > 1) TJ_RETURN_IF_ERROR(group_heads(ad, ds, hkv, &dsg));
  if (v->want[0]) {
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MATMUL, dsg, k, &t));
    if (group > 1) TJ_RETURN_IF_ERROR(reshape(ad, t, r, qd, &t));
    TJ_RETURN_IF_ERROR(cast(ad, t, dt, &v->out[0]));
  }
  if (v->want[1]) {
    uint32_t dst;
    TJ_RETURN_IF_ERROR(transpose_last2(ad, dsg, &dst));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MATMUL, dst, q, &t));
    TJ_RETURN_IF_ERROR(cast(ad, t, dt, &v->out[1]));
  }
  return NULL;
}

static tj_status_t vjp_reshape(ad_t* ad, const vjp_t* v) {
  int64_t dims[TJ_MAX_RANK];
  dims_of(ad, X0, dims);
  return reshape(ad, G, rank_of(ad, X0), dims, &v->out[0]);
}

static tj_status_t vjp_transpose(ad_t* ad, const vjp_t* v) {
  int64_t inverse[TJ_MAX_RANK];
  for (uint32_t k = 0; k < v->node->attrs.num_ints; ++k) {
    inverse[v->node->attrs.ints[k]] = k;
  }
  return transpose(ad, G, inverse, &v->out[0]);
}

static tj_status_t vjp_broadcast_to(ad_t* ad, const vjp_t* v) {
  v->out[0] = G;  // summed back by accumulate
  return NULL;
}

// |g| restricted to [start, start + length) along |axis|: a slice when the
// axis is constant, else (a symbolic axis can only be sliced whole) a
// gather of iota + start.
static tj_status_t take_range(ad_t* ad, uint32_t g, int32_t axis, int64_t start,
                              int64_t length, uint32_t* out) {
  int32_t rank = rank_of(ad, g);
  int64_t dims[TJ_MAX_RANK];
  dims_of(ad, g, dims);
  if (start == 0 && dims[axis] == length) {
    *out = g;
    return NULL;
  }
  if (tj_dim_is_const(dims[axis])) {
    int64_t ints[3 * TJ_MAX_RANK];
    for (int32_t i = 0; i < rank; ++i) {
      ints[i] = 0;
      ints[rank + i] = INT64_MAX;
      ints[2 * rank + i] = 1;
    }
    ints[axis] = start;
    ints[rank + axis] = start + length;
    return slice(ad, g, ints, out);
  }
  uint32_t idx, off;
  TJ_RETURN_IF_ERROR(iota(ad, TJ_DTYPE_I64, 1, &length, 0, &idx));
  TJ_RETURN_IF_ERROR(dim_value(ad, start, TJ_DTYPE_I64, &off));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_ADD, idx, off, &idx));
  return gather(ad, g, idx, axis, out);
}

// slice: g scattered back to a's shape with zeros between and around:
// along an axis of step s, g [n] becomes [n, 1], padded to [n, s], merged
// to [n * s] (element i now at i * s), cut or padded to dim - start; then
// one pad puts start zeros in front and the rest behind.
static tj_status_t vjp_slice(ad_t* ad, const vjp_t* v) {
  const tj_node_t* node = v->node;
  int32_t rank = rank_of(ad, X0);
  int64_t adims[TJ_MAX_RANK], cur[TJ_MAX_RANK];
  dims_of(ad, X0, adims);
  dims_of(ad, Y, cur);
  // NULL for rank 0, where nothing below reads them (no NULL + 0).
  const int64_t* starts = rank > 0 ? node->attrs.ints : NULL;
  const int64_t* steps = rank > 0 ? node->attrs.ints + 2 * rank : NULL;
  for (int32_t i = 0; i < rank; ++i) {
    if (cur[i] == 0)
      return full(ad, dtype_of(ad, X0), rank, adims, 0.0, &v->out[0]);
  }
  uint32_t g = G;
  for (int32_t i = 0; i < rank; ++i) {
    if (steps[i] == 1) continue;
    int64_t n = cur[i], step = steps[i];
    int64_t wide[TJ_MAX_RANK + 1], ints[3 * (TJ_MAX_RANK + 1)];
    memset(ints, 0, sizeof(ints));
    for (int32_t j = 0, w = 0; j < rank; ++j) {
      wide[w++] = cur[j];
      if (j == i) wide[w++] = 1;
    }
    if (rank + 1 > TJ_MAX_RANK) {
      return tj_unsupported(
          "autodiff: slice (node %%%u): a strided axis of a rank-%d value "
          "needs rank %d to scatter",
          v->index, (int)rank, (int)rank + 1);
    }
    TJ_RETURN_IF_ERROR(reshape(ad, g, rank + 1, wide, &g));
    ints[rank + 1 + i + 1] = step - 1;  // high padding of the new axis
    TJ_RETURN_IF_ERROR(pad0(ad, g, ints, &g));
    cur[i] = n * step;
    TJ_RETURN_IF_ERROR(reshape(ad, g, rank, cur, &g));
    int64_t target = adims[i] - starts[i];
    if (cur[i] > target) {
      TJ_RETURN_IF_ERROR(take_range(ad, g, i, 0, target, &g));
    } else if (cur[i] < target) {
      memset(ints, 0, sizeof(ints));
      ints[rank + i] = target - cur[i];
      TJ_RETURN_IF_ERROR(pad0(ad, g, ints, &g));
    }
    cur[i] = target;
  }
  int64_t ints[2 * TJ_MAX_RANK];
  for (int32_t i = 0; i < rank; ++i) {
    bool whole = !tj_dim_is_const(adims[i]);
    ints[i] = whole ? 0 : starts[i];
    ints[rank + i] = whole ? 0 : adims[i] - starts[i] - cur[i];
  }
  return pad0(ad, g, ints, &v->out[0]);
}

static tj_status_t vjp_concat(ad_t* ad, const vjp_t* v) {
  int32_t axis = (int32_t)v->node->attrs.axis;
  int64_t offset = 0;
  for (uint32_t k = 0; k < v->node->num_operands; ++k) {
    int64_t dims[TJ_MAX_RANK];
    dims_of(ad, v->x[k], dims);
    if (v->want[k]) {
      TJ_RETURN_IF_ERROR(
          take_range(ad, G, axis, offset, dims[axis], &v->out[k]));
    }
    TJ_RETURN_IF_ERROR(tj_dim_add(dimtab(ad), offset, dims[axis], &offset));
  }
  return NULL;
}

static tj_status_t vjp_pad(ad_t* ad, const vjp_t* v) {
  int32_t rank = rank_of(ad, X0);
  int64_t adims[TJ_MAX_RANK], gdims[TJ_MAX_RANK];
  dims_of(ad, X0, adims);
  dims_of(ad, G, gdims);
  const int64_t* low = v->node->attrs.ints;
  uint32_t g = G;
  // The constant axes in one slice, then each padded symbolic axis.
  int64_t ints[3 * TJ_MAX_RANK];
  bool any = false;
  for (int32_t i = 0; i < rank; ++i) {
    bool cut = tj_dim_is_const(gdims[i]) && gdims[i] != adims[i];
    any |= cut;
    ints[i] = cut ? low[i] : 0;
    ints[rank + i] = cut ? low[i] + adims[i] : INT64_MAX;
    ints[2 * rank + i] = 1;
  }
  if (any) TJ_RETURN_IF_ERROR(slice(ad, g, ints, &g));
  for (int32_t i = 0; i < rank; ++i) {
    if (!tj_dim_is_const(gdims[i])) {
      TJ_RETURN_IF_ERROR(take_range(ad, g, i, low[i], adims[i], &g));
    }
  }
  v->out[0] = g;
  return NULL;
}

// |idx| (of the indices' dtype) wrapped once and clamped
// into [0, n - 1] along an axis of |n| elements, as the gathers read.
static tj_status_t pick_index(ad_t* ad, uint32_t idx, int64_t n,
                              uint32_t* out) {
  tj_dtype_t it = dtype_of(ad, idx);
  uint32_t zero, nv, hi, neg, wrapped, w;
  TJ_RETURN_IF_ERROR(scalar(ad, it, 0.0, &zero));
  TJ_RETURN_IF_ERROR(dim_value(ad, n, it, &nv));
  TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_SUB, nv, 1.0, &hi));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_LT, idx, zero, &neg));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_ADD, idx, nv, &wrapped));
  TJ_RETURN_IF_ERROR(where(ad, neg, wrapped, idx, &w));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MINIMUM, w, hi, &w));
  return op2(ad, TJ_OP_MAXIMUM, w, zero, out);
}

// gather (numpy.take(a, idx, axis)): a scatter-add of g into a's shape,
// as onehot^T @ g over a [Pre, P, Post] view of g, where P counts the
// indices and onehot[p, j] = (idx[p] == j), idx as the forward read it.
static tj_status_t vjp_gather(ad_t* ad, const vjp_t* v) {
  int32_t axis = (int32_t)v->node->attrs.axis;
  int32_t ra = rank_of(ad, X0), ri = rank_of(ad, X1);
  int64_t adims[TJ_MAX_RANK], idims[TJ_MAX_RANK];
  dims_of(ad, X0, adims);
  dims_of(ad, X1, idims);
  tj_dtype_t it = dtype_of(ad, X1), dt = dtype_of(ad, X0);
  int64_t n = adims[axis], pre, post, count;
  TJ_RETURN_IF_ERROR(tj_dim_product(dimtab(ad), axis, adims, &pre));
  TJ_RETURN_IF_ERROR(
      tj_dim_product(dimtab(ad), ra - axis - 1, adims + axis + 1, &post));
  TJ_RETURN_IF_ERROR(tj_dim_product(dimtab(ad), ri, idims, &count));
  // The index each output element read: out-of-range ones were clamped,
  // so their gradient goes to the first or last element as well.
  uint32_t idx, io, oh, g3, t;
  TJ_RETURN_IF_ERROR(pick_index(ad, X1, n, &idx));
  int64_t col[2] = {count, 1}, row[2] = {1, n}, d3[3] = {pre, count, post};
  TJ_RETURN_IF_ERROR(reshape(ad, idx, 2, col, &idx));
  TJ_RETURN_IF_ERROR(iota(ad, it, 2, row, 1, &io));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_EQ, idx, io, &oh));
  TJ_RETURN_IF_ERROR(cast(ad, oh, dt, &oh));
  TJ_RETURN_IF_ERROR(transpose_last2(ad, oh, &oh));
  TJ_RETURN_IF_ERROR(reshape(ad, G, 3, d3, &g3));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MATMUL, oh, g3, &t));
  return reshape(ad, t, ra, adims, &v->out[0]);
}

// gather_elements: a scatter-add of g into a's shape: with a new axis
// after the gathered one holding j (an iota over a's axis), the sum over
// the indices' axis of where(idx == j, g, 0). Indices smaller than a along
// another axis are refused by name.
static tj_status_t vjp_gather_elements(ad_t* ad, const vjp_t* v) {
  int32_t ax = (int32_t)v->node->attrs.axis, r = rank_of(ad, X0);
  int64_t adims[TJ_MAX_RANK], idims[TJ_MAX_RANK];
  dims_of(ad, X0, adims);
  dims_of(ad, X1, idims);
  for (int32_t d = 0; d < r; ++d) {
    if (d != ax && idims[d] != adims[d]) {
      return tj_unsupported(
          "gather_elements: no VJP when the indices are smaller than a "
          "along axis %d",
          d);
    }
  }
  if (r + 1 > TJ_MAX_RANK) {
    return tj_unsupported("gather_elements: no VJP at rank %d", r);
  }
  int64_t d5[TJ_MAX_RANK], jd[TJ_MAX_RANK], axis = ax;
  for (int32_t d = 0, e = 0; d <= r; ++d) {
    d5[d] = d == ax + 1 ? 1 : idims[e++];
    jd[d] = d == ax + 1 ? adims[ax] : 1;
  }
  uint32_t idx, g5, j, eq, zero, t;
  TJ_RETURN_IF_ERROR(pick_index(ad, X1, adims[ax], &idx));
  TJ_RETURN_IF_ERROR(reshape(ad, idx, r + 1, d5, &idx));
  TJ_RETURN_IF_ERROR(reshape(ad, G, r + 1, d5, &g5));
  TJ_RETURN_IF_ERROR(iota(ad, dtype_of(ad, X1), r + 1, jd, ax + 1, &j));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_EQ, idx, j, &eq));
  TJ_RETURN_IF_ERROR(scalar(ad, dtype_of(ad, X0), 0.0, &zero));
  TJ_RETURN_IF_ERROR(where(ad, eq, g5, zero, &t));
  return reduce(ad, TJ_OP_SUM, t, 1, &axis, false, &v->out[0]);
}

// scatter (issue 15): y = data with updates written (none) or added (add)
// at the clamped indices. gupdates = g gathered at those positions
// (gather_elements / gather_nd, which wrap and clamp alike; with none and
// duplicate indices every duplicate gets g, as torch's scatter); gdata = g
// (add), or g with zeros scattered over the written positions (none).
// mul, max and min are refused by name.
static tj_status_t vjp_scatter(ad_t* ad, const vjp_t* v) {
  const tj_node_t* n = v->node;
  const bool nd = n->op == TJ_OP_SCATTER_ND;
  const int64_t red = n->attrs.ints[0];
  if (red != TJ_SCATTER_REDUCTION_NONE && red != TJ_SCATTER_REDUCTION_ADD) {
    return tj_unsupported("%s: no VJP for reduction %s (only none and add)",
                          tj_op_info(n->op)->name,
                          red == TJ_SCATTER_REDUCTION_MUL   ? "mul"
                          : red == TJ_SCATTER_REDUCTION_MAX ? "max"
                                                            : "min");
  }
  if (v->want[2]) {
    uint32_t ops[2] = {G, X1};
    tj_attrs_t attrs;
    memset(&attrs, 0, sizeof(attrs));
    attrs.axis = nd ? 0 : n->attrs.axis;
    TJ_RETURN_IF_ERROR(emit(ad, nd ? TJ_OP_GATHER_ND : TJ_OP_GATHER_ELEMENTS, 2,
                            ops, &attrs, TJ_DTYPE_F32, 0, NULL, &v->out[2]));
  }
  if (!v->want[0]) return NULL;
  if (red == TJ_SCATTER_REDUCTION_ADD) {
    v->out[0] = G;
    return NULL;
  }
  int64_t udims[TJ_MAX_RANK];
  dims_of(ad, X2, udims);
  uint32_t zero;
  TJ_RETURN_IF_ERROR(scalar(ad, dtype_of(ad, G), 0.0, &zero));
  TJ_RETURN_IF_ERROR(broadcast_to(ad, zero, rank_of(ad, X2), udims, &zero));
  uint32_t ops[3] = {G, X1, zero};
  return emit(ad, n->op, 3, ops, &n->attrs, TJ_DTYPE_F32, 0, NULL, &v->out[0]);
}

// ops3 (issue 15): scans. y = cumsum(a) along the axis: each a[j] adds to
// every y[i] the scan reaches from j, so ga is the scan of g the other way
// (same exclusiveness, reverse flipped).
static tj_status_t scan_back(ad_t* ad, const vjp_t* v, uint32_t g,
                             uint32_t* out) {
  tj_attrs_t attrs;
  memset(&attrs, 0, sizeof(attrs));
  int64_t flags[2] = {v->node->attrs.ints[0], !v->node->attrs.ints[1]};
  attrs.axis = v->node->attrs.axis;
  attrs.ints = flags;
  attrs.num_ints = 2;
  return emit(ad, TJ_OP_CUMSUM, 1, &g, &attrs, TJ_DTYPE_F32, 0, NULL, out);
}

static tj_status_t vjp_cumsum(ad_t* ad, const vjp_t* v) {
  return scan_back(ad, v, G, &v->out[0]);
}

// y = cumprod(a): dy[i]/da[j] = y[i] / a[j] for every i the scan reaches
// from j, so ga = scan_back(g * y) / a (inf or NaN where a is 0, as
// TensorFlow's rule).
static tj_status_t vjp_cumprod(ad_t* ad, const vjp_t* v) {
  uint32_t gy, s;
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, G, Y, &gy));
  TJ_RETURN_IF_ERROR(scan_back(ad, v, gy, &s));
  return op2(ad, TJ_OP_DIV, s, X0, &v->out[0]);
}

// gather_nd: a scatter-add of g's rows: over a viewed as [Bt, P, R] (batch,
// indexed, rest) and g as [Bt, Q, R], onehot(lin)^T @ g, lin [Bt, Q] the
// row-major position of the picked (wrapped, clamped) indices among P.
static tj_status_t vjp_gather_nd(ad_t* ad, const vjp_t* v) {
  int32_t b = (int32_t)v->node->attrs.axis, r = rank_of(ad, X0);
  int32_t q = rank_of(ad, X1);
  int64_t adims[TJ_MAX_RANK], idims[TJ_MAX_RANK];
  dims_of(ad, X0, adims);
  dims_of(ad, X1, idims);
  int32_t k = (int32_t)idims[q - 1];
  int64_t bt, p, rest, nq;
  tj_dimtab_t* dt = dimtab(ad);
  TJ_RETURN_IF_ERROR(tj_dim_product(dt, b, adims, &bt));
  TJ_RETURN_IF_ERROR(tj_dim_product(dt, k, adims + b, &p));
  TJ_RETURN_IF_ERROR(tj_dim_product(dt, r - b - k, adims + b + k, &rest));
  TJ_RETURN_IF_ERROR(tj_dim_product(dt, q - 1 - b, idims + b, &nq));
  uint32_t idx, lin = 0;
  TJ_RETURN_IF_ERROR(cast(ad, X1, TJ_DTYPE_I64, &idx));
  for (int32_t j = 0; j < k; ++j) {
    uint32_t c, s;
    int64_t stride;
    TJ_RETURN_IF_ERROR(take_range(ad, idx, q - 1, j, 1, &c));
    TJ_RETURN_IF_ERROR(pick_index(ad, c, adims[b + j], &c));
    TJ_RETURN_IF_ERROR(
        tj_dim_product(dt, k - j - 1, adims + b + j + 1, &stride));
    if (stride != 1) {
      TJ_RETURN_IF_ERROR(dim_value(ad, stride, TJ_DTYPE_I64, &s));
      TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, c, s, &c));
    }
    if (j == 0) {
      lin = c;
    } else {
      TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_ADD, lin, c, &lin));
    }
  }
  int64_t l3[3] = {bt, nq, 1}, j3[3] = {1, 1, p}, g3d[3] = {bt, nq, rest};
  uint32_t j3v, oh, g3, t;
  TJ_RETURN_IF_ERROR(reshape(ad, lin, 3, l3, &lin));
  TJ_RETURN_IF_ERROR(iota(ad, TJ_DTYPE_I64, 3, j3, 2, &j3v));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_EQ, lin, j3v, &oh));
  TJ_RETURN_IF_ERROR(cast(ad, oh, dtype_of(ad, X0), &oh));
  TJ_RETURN_IF_ERROR(transpose_last2(ad, oh, &oh));
  TJ_RETURN_IF_ERROR(reshape(ad, G, 3, g3d, &g3));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MATMUL, oh, g3, &t));
  return reshape(ad, t, r, adims, &v->out[0]);
}

// gelu (erf): Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2,
// phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
// gelu (tanh), in decompose's sigmoid form y = x s, s = sigmoid(z),
// z = x (c0 + c1 x^2): s + x s (1 - s) (c0 + 3 c1 x^2).
static tj_status_t vjp_gelu(ad_t* ad, const vjp_t* v) {
  uint32_t x2, t, u, d;
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, X0, X0, &x2));
  if (!v->node->attrs.approximate) {
    TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_MUL, X0, -kSqrtHalf, &t));
    TJ_RETURN_IF_ERROR(op1(ad, TJ_OP_ERFC, t, &t));
    TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_MUL, t, 0.5, &t));  // Phi
    TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_MUL, x2, -0.5, &u));
    TJ_RETURN_IF_ERROR(op1(ad, TJ_OP_EXP, u, &u));
    TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_MUL, u, kInvSqrt2Pi, &u));  // phi
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, X0, u, &u));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_ADD, t, u, &d));
    return op2(ad, TJ_OP_MUL, G, d, &v->out[0]);
  }
  const double c0 = kTwoSqrt2OverPi, c1 = kTwoSqrt2OverPi * 0.044715;
  uint32_t s;
  TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_MUL, x2, c1, &t));
  TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_ADD, t, c0, &t));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, X0, t, &t));
  TJ_RETURN_IF_ERROR(op1(ad, TJ_OP_SIGMOID, t, &s));
  TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_MUL, x2, 3.0 * c1, &u));
  TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_ADD, u, c0, &u));  // dz/dx
  TJ_RETURN_IF_ERROR(c_op(ad, TJ_OP_SUB, 1.0, s, &t));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, s, t, &t));  // s (1 - s)
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, t, u, &t));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, X0, t, &t));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_ADD, s, t, &d));
  return op2(ad, TJ_OP_MUL, G, d, &v->out[0]);
}

// silu: s (1 + x (1 - s)), s = sigmoid(x).
static tj_status_t vjp_silu(ad_t* ad, const vjp_t* v) {
  uint32_t s, t;
  TJ_RETURN_IF_ERROR(op1(ad, TJ_OP_SIGMOID, X0, &s));
  TJ_RETURN_IF_ERROR(c_op(ad, TJ_OP_SUB, 1.0, s, &t));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, X0, t, &t));
  TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_ADD, t, 1.0, &t));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, s, t, &t));
  return op2(ad, TJ_OP_MUL, G, t, &v->out[0]);
}

static tj_status_t vjp_softmax(ad_t* ad, const vjp_t* v) {
  int64_t axis = v->node->attrs.axis;
  uint32_t t, s;
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, G, Y, &t));
  TJ_RETURN_IF_ERROR(reduce(ad, TJ_OP_SUM, t, 1, &axis, true, &s));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_SUB, G, s, &t));
  return op2(ad, TJ_OP_MUL, Y, t, &v->out[0]);
}

static tj_status_t vjp_log_softmax(ad_t* ad, const vjp_t* v) {
  int64_t axis = v->node->attrs.axis;
  uint32_t s, e;
  TJ_RETURN_IF_ERROR(reduce(ad, TJ_OP_SUM, G, 1, &axis, true, &s));
  TJ_RETURN_IF_ERROR(op1(ad, TJ_OP_EXP, Y, &e));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, e, s, &e));
  return op2(ad, TJ_OP_SUB, G, e, &v->out[0]);
}

// layer_norm / rms_norm over the last axis, recomputing the statistics:
// xhat = (x - mean) r (rms: x r), r = rsqrt(var + eps); with
// dxhat = g gamma, dx = r (dxhat - mean(dxhat) - xhat mean(dxhat xhat))
// (rms: no mean(dxhat) term); dgamma = sum(g xhat), dbeta = sum(g) over
// the leading axes (accumulate sums them to [N]).
static tj_status_t norm_grads(ad_t* ad, const vjp_t* v, bool center) {
  uint32_t c = X0, m, r, xhat, dxhat = G, t, u;
  if (center) {
    TJ_RETURN_IF_ERROR(reduce_last(ad, TJ_OP_MEAN, X0, &m));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_SUB, X0, m, &c));
  }
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, c, c, &r));
  TJ_RETURN_IF_ERROR(reduce_last(ad, TJ_OP_MEAN, r, &r));
  TJ_RETURN_IF_ERROR(op_c(ad, TJ_OP_ADD, r, v->node->attrs.value, &r));
  TJ_RETURN_IF_ERROR(op1(ad, TJ_OP_RSQRT, r, &r));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, c, r, &xhat));
  if (X1 != TJ_NODE_NONE) {
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, G, X1, &dxhat));
    if (v->want[1]) TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, G, xhat, &v->out[1]));
  }
  if (center && X2 != TJ_NODE_NONE) v->out[2] = G;
  if (!v->want[0]) return NULL;
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, dxhat, xhat, &t));
  TJ_RETURN_IF_ERROR(reduce_last(ad, TJ_OP_MEAN, t, &t));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_MUL, xhat, t, &t));
  TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_SUB, dxhat, t, &u));
  if (center) {
    TJ_RETURN_IF_ERROR(reduce_last(ad, TJ_OP_MEAN, dxhat, &t));
    TJ_RETURN_IF_ERROR(op2(ad, TJ_OP_SUB, u, t, &u));
  }
  return op2(ad, TJ_OP_MUL, r, u, &v->out[0]);
}

static tj_status_t vjp_layer_norm(ad_t* ad, const vjp_t* v) {
  return norm_grads(ad, v, true);
}

static tj_status_t vjp_rms_norm(ad_t* ad, const vjp_t* v) {
  return norm_grads(ad, v, false);
}

#undef G
#undef Y
#undef X0
#undef X1
#undef X2

//===--- the table: one entry per op of lib/ops.def ---===//

// A custom op: its registered VJP callback (tj_custom_op.h) builds the
// operands' gradients with builder calls on the new graph.
static tj_status_t vjp_custom(ad_t* ad, const vjp_t* v) {
  const tj_custom_op_t* op = tj_custom_op_of(ad->src, v->node);
  if (!op)
    return tj_invalid("custom op \"%s\" is not registered",
                      v->node->attrs.name ? v->node->attrs.name : "?");
  if (!op->vjp)
    return tj_invalid(
        "custom op %s@%d has no VJP (register one in tj_custom_op_desc_t.vjp "
        "to differentiate through it)",
        op->name, (int)op->version);
  uint32_t n = v->node->num_operands;
  tj_value_t ins[64], grads[64];
  for (uint32_t k = 0; k < n; ++k) {
    ins[k].id = v->x[k] + 1;
    grads[k] = tj_value_none();
  }
  tj_graph_t* g = ad->rw.dst;
  double floats[TJ_CUSTOM_MAX_ATTRS];
  tj_custom_attrs_t attrs;
  tj_custom_attrs_of(&v->node->attrs, &attrs, floats);
  tj_value_t y = {v->y + 1}, gy = {v->g + 1};
  tj_status_t status =
      op->vjp(op->user_data, g, ins, (int32_t)n, y, gy, &attrs, grads);
  if (g->error) {  // a builder call inside the callback failed
    status = tj_status_join(status, g->error);
    g->error = NULL;
  }
  if (status)
    return tj_status_annotate(status, "the VJP of %s@%d", op->name,
                              (int)op->version);
  for (uint32_t k = 0; k < n; ++k) {
    if (!v->want[k] || tj_value_is_none(grads[k])) continue;
    uint32_t gk = grads[k].id - 1;
    const tj_node_t* xn = &g->nodes[v->x[k]];
    if (grads[k].id > g->num_nodes || g->nodes[gk].dtype != xn->dtype ||
        g->nodes[gk].rank != xn->rank) {
      return tj_invalid(
          "the VJP of %s@%d gave input %u a gradient that is not a value of "
          "the input's dtype and rank",
          op->name, (int)op->version, k);
    }
    v->out[k] = gk;
  }
  return NULL;
}

typedef tj_status_t (*vjp_fn)(ad_t* ad, const vjp_t* v);

typedef struct vjp_rule_t {
  vjp_fn fn;            // NULL: no gradient flows through the op
  const char* formula;  // g is dL/dy; ga, gb, gc the operands' gradients
} vjp_rule_t;

// quant2 (issue 17): the straight-through estimator. A quantize node's
// gradient is held as a float of x's dtype and logical shape (its result is
// integer or packed): dequantize passes g to q unchanged and quantize passes
// it to x, so dequantize(quantize(x)) has the identity's gradient. The scale
// and zero point get none (calibration picks them, not training).
static tj_status_t vjp_quantize(ad_t* ad, const vjp_t* v) {
  (void)ad;
  v->out[0] = v->g;
  return NULL;
}

static tj_status_t vjp_dequantize(ad_t* ad, const vjp_t* v) {
  (void)ad;
  if (v->want[0]) v->out[0] = v->g;
  return NULL;
}

#define NONE_(why) {NULL, why}
static const vjp_rule_t kVjpRules[TJ_OP_COUNT_] = {
    // ---- leaves ----
    [TJ_OP_INPUT] = NONE_("a leaf: its gradient is a graph output"),
    [TJ_OP_CONSTANT] = NONE_("a constant"),
    [TJ_OP_FULL] = NONE_("a constant"),
    [TJ_OP_IOTA] = NONE_("a constant"),
    // ---- elementwise unary ----
    [TJ_OP_NEG] = {vjp_neg, "ga = -g"},
    [TJ_OP_ABS] = {vjp_abs, "ga = g * sign(a)  (0 at a == 0)"},
    [TJ_OP_EXP] = {vjp_exp, "ga = g * y"},
    [TJ_OP_LOG] = {vjp_log, "ga = g / a"},
    [TJ_OP_SQRT] = {vjp_sqrt, "ga = 0.5 g / y"},
    [TJ_OP_RSQRT] = {vjp_rsqrt, "ga = g * (-0.5 y / a)"},
    [TJ_OP_TANH] = {vjp_tanh, "ga = g * (1 - y^2)"},
    [TJ_OP_SIGMOID] = {vjp_sigmoid, "ga = g * y (1 - y)"},
    [TJ_OP_ERF] = {vjp_erf, "ga = g * 2/sqrt(pi) exp(-a^2)"},
    [TJ_OP_ERFC] = {vjp_erfc, "ga = -g * 2/sqrt(pi) exp(-a^2)"},
    [TJ_OP_SIN] = {vjp_sin, "ga = g * cos(a)"},
    [TJ_OP_COS] = {vjp_cos, "ga = -(g * sin(a))"},
    [TJ_OP_ASIN] = {vjp_asin, "ga = g * rsqrt(1 - a^2)"},
    [TJ_OP_ACOS] = {vjp_acos, "ga = -g * rsqrt(1 - a^2)"},
    [TJ_OP_ATAN] = {vjp_atan, "ga = g / (1 + a^2)"},
    [TJ_OP_RELU] = {vjp_relu, "ga = where(a > 0, g, 0)"},
    [TJ_OP_FLOOR] = NONE_("piecewise constant: derivative 0"),
    [TJ_OP_CEIL] = NONE_("piecewise constant: derivative 0"),
    [TJ_OP_ROUND] = NONE_("piecewise constant: derivative 0"),
    [TJ_OP_SIGN] = NONE_("piecewise constant: derivative 0"),
    [TJ_OP_NOT] = NONE_("bool"),
    [TJ_OP_ISNAN] = NONE_("bool result"),
    [TJ_OP_CAST] = {vjp_cast, "ga = cast(g, a's dtype) (float to float only)"},
    [TJ_OP_BITWISE_NOT] = NONE_("integers"),
    [TJ_OP_BITCAST] = NONE_("a reinterpretation of bits, not a function of "
                            "the value"),
    // ---- elementwise binary (each ga, gb then summed to its shape) ----
    [TJ_OP_ADD] = {vjp_add, "ga = g, gb = g"},
    [TJ_OP_SUB] = {vjp_sub, "ga = g, gb = -g"},
    [TJ_OP_MUL] = {vjp_mul, "ga = g * b, gb = g * a"},
    [TJ_OP_DIV] = {vjp_div, "ga = g / b, gb = -(g / b) * y"},
    [TJ_OP_POW] = {vjp_pow,
                   "ga = g b a^(b-1) (0 where b == 0), gb = g y log(a) (0 "
                   "where a == 0 and b >= 0)"},
    [TJ_OP_MAXIMUM] = {vjp_maximum,
                       "ga = g * (a > b ? 1 : a == b ? 0.5 : 0), gb alike"},
    [TJ_OP_MINIMUM] = {vjp_minimum,
                       "ga = g * (a < b ? 1 : a == b ? 0.5 : 0), gb alike"},
    [TJ_OP_EQ] = NONE_("bool result"),
    [TJ_OP_NE] = NONE_("bool result"),
    [TJ_OP_LT] = NONE_("bool result"),
    [TJ_OP_LE] = NONE_("bool result"),
    [TJ_OP_GT] = NONE_("bool result"),
    [TJ_OP_GE] = NONE_("bool result"),
    [TJ_OP_AND] = NONE_("bool"),
    [TJ_OP_OR] = NONE_("bool"),
    [TJ_OP_WHERE] = {vjp_where,
                     "gb = where(c, g, 0), gc = where(c, 0, g); none to c"},
    [TJ_OP_MOD] = {vjp_remainder,
                   "ga = g, gb = -g q, q = floor(a / b) = (a - y) / b"},
    [TJ_OP_FMOD] = {vjp_remainder,
                    "ga = g, gb = -g q, q = trunc(a / b) = (a - y) / b"},
    [TJ_OP_BITWISE_AND] = NONE_("integers"),
    [TJ_OP_BITWISE_OR] = NONE_("integers"),
    [TJ_OP_BITWISE_XOR] = NONE_("integers"),
    [TJ_OP_SHIFT_LEFT] = NONE_("integers"),
    [TJ_OP_SHIFT_RIGHT] = NONE_("integers"),
    // ---- reductions (g reshaped to keep the reduced axes as 1s) ----
    [TJ_OP_SUM] = {vjp_sum, "ga = broadcast(g)"},
    [TJ_OP_MEAN] = {vjp_mean, "ga = broadcast(g / count)"},
    [TJ_OP_MAX] = {vjp_max_min,
                   "ga = m * g / sum(m), m = (a == y): split among ties"},
    [TJ_OP_MIN] = {vjp_max_min,
                   "ga = m * g / sum(m), m = (a == y): split among ties"},
    [TJ_OP_PROD] = {vjp_prod,
                    "ga = g * (prod of the others): y / a without zeros, "
                    "handled exactly with one or more zeros"},
    [TJ_OP_ARGMAX] = NONE_("integer result"),
    [TJ_OP_ARGMIN] = NONE_("integer result"),
    // ---- contraction ----
    [TJ_OP_MATMUL] = {vjp_matmul,
                      "ga = g @ b^T, gb = a^T @ g (rank-1 operands promoted, "
                      "batch dims summed)"},
    // qgemm (issue 17): integer operands and result.
    [TJ_OP_MATMUL_I32] = NONE_("integers"),
    [TJ_OP_MATMUL_INTEGER] = NONE_("integers"),
    [TJ_OP_MATMUL_F8] = NONE_("float8 operands"),  // fp8 (issue 17)
    // ---- data movement: the transposed (adjoint) movement ----
    [TJ_OP_RESHAPE] = {vjp_reshape, "ga = reshape(g, a's shape)"},
    [TJ_OP_TRANSPOSE] = {vjp_transpose, "ga = transpose(g, inverse perm)"},
    [TJ_OP_BROADCAST_TO] = {vjp_broadcast_to, "ga = sum_to(g, a's shape)"},
    [TJ_OP_SLICE] = {vjp_slice,
                     "ga = g scattered into zeros (pads; steps "
                     "interleave zeros)"},
    [TJ_OP_CONCAT] = {vjp_concat, "g_k = g's range of operand k on the axis"},
    [TJ_OP_PAD] = {vjp_pad, "ga = g's interior (a slice)"},
    [TJ_OP_GATHER] = {vjp_gather,
                      "ga = scatter-add of g: onehot(idx)^T @ g; none to idx"},
    // ops (issue 15)
    [TJ_OP_GATHER_ELEMENTS] = {vjp_gather_elements,
                               "ga = sum over idx's axis of where(idx == j, "
                               "g, 0); none to idx"},
    [TJ_OP_GATHER_ND] = {vjp_gather_nd,
                         "ga = scatter-add of g's rows: onehot(lin)^T @ g "
                         "per batch; none to idx"},
    // ops3 (issue 15)
    [TJ_OP_CUMSUM] = {vjp_cumsum,
                      "ga = cumsum(g) the other way (reverse flipped)"},
    [TJ_OP_CUMPROD] = {vjp_cumprod,
                       "ga = cumsum(g * y) the other way / a (a != 0)"},
    // scatter (issue 15)
    [TJ_OP_SCATTER_ELEMENTS] = {vjp_scatter,
                                "gu = gather_elements(g, idx); gdata = g "
                                "(add) or g zeroed where written (none); "
                                "none to idx; mul, max, min refused"},
    [TJ_OP_SCATTER_ND] = {vjp_scatter,
                          "gu = gather_nd(g, idx); gdata = g (add) or g "
                          "zeroed where written (none); none to idx; mul, "
                          "max, min refused"},
    [TJ_OP_ARGTOPK] = NONE_("integer result (topk's values differentiate "
                            "through their gather_elements)"),
    // ---- composites: own rules in core ops ----
    [TJ_OP_GELU] = {vjp_gelu,
                    "ga = g * (Phi(a) + a phi(a)), or the tanh form's "
                    "derivative"},
    [TJ_OP_SILU] = {vjp_silu, "ga = g * s (1 + a (1 - s)), s = sigmoid(a)"},
    [TJ_OP_SOFTMAX] = {vjp_softmax, "ga = y * (g - sum(g * y, axis))"},
    [TJ_OP_LOG_SOFTMAX] = {vjp_log_softmax, "ga = g - exp(y) * sum(g, axis)"},
    [TJ_OP_LAYER_NORM] = {vjp_layer_norm,
                          "ga = r (d - mean(d) - xh mean(d xh)), d = g gamma; "
                          "ggamma = sum(g xh), gbeta = sum(g)"},
    [TJ_OP_RMS_NORM] = {vjp_rms_norm,
                        "ga = r (d - xh mean(d xh)), d = g gamma; "
                        "ggamma = sum(g xh)"},
    [TJ_OP_LINEAR] = {vjp_linear, "matmul's rule; gb = sum_to(g, [N])"},
    [TJ_OP_CUSTOM] = {vjp_custom, "the op's registered VJP callback"},
    [TJ_OP_ONE_HOT] = NONE_("integer indices; values: not yet"),
    // ---- convolution and pooling (convpool): no rule yet; gx of conv is
    // conv_transpose of g, gw the conv of x with g (issue 15) ----
    [TJ_OP_CONV] = NONE_("no VJP yet (gx = conv_transpose(g, w) to come)"),
    [TJ_OP_CONV_TRANSPOSE] = NONE_("no VJP yet (gx = conv(g, w) to come)"),
    [TJ_OP_MAX_POOL] = NONE_("no VJP yet"),
    [TJ_OP_AVG_POOL] = NONE_("no VJP yet"),
    [TJ_OP_LP_POOL] = NONE_("no VJP yet"),
    // attn (issue 14): decomposed, recomputing p
    [TJ_OP_QUANTIZE] = {vjp_quantize, "gx = g (straight-through estimator)"},
    [TJ_OP_DEQUANTIZE] = {vjp_dequantize,
                          "gq = g when q comes from quantize (STE); no "
                          "scale or zero-point gradient"},
    [TJ_OP_ATTENTION] = {vjp_attention,
                         "p recomputed; dv = p^T g, ds = p (g v^T - rowsum), "
                         "dq = scale ds k, dk = scale ds^T q, dmask = ds "
                         "(attention_lse, attention_dq, attention_dkv but "
                         "for dmask)"},
    [TJ_OP_ATTENTION_LSE] = NONE_("attention's backward: no second order"),
    [TJ_OP_ATTENTION_DQ] = NONE_("attention's backward: no second order"),
    [TJ_OP_ATTENTION_DKV] = NONE_("attention's backward: no second order"),
};
#undef NONE_

bool tj_autodiff_op_differentiable(tj_op_t op) {
  return (unsigned)op < TJ_OP_COUNT_ && kVjpRules[op].fn != NULL;
}

const char* tj_autodiff_rule(tj_op_t op) {
  return (unsigned)op < TJ_OP_COUNT_ ? kVjpRules[op].formula : NULL;
}

//===--- the sweep ---===//

// Adds |contribution| (shaped like the user's result) into the gradient of
// source node |operand|, summed down to the operand's shape.
static tj_status_t accumulate(ad_t* ad, uint32_t operand,
                              uint32_t contribution) {
  uint32_t target = ad->rw.map[operand];
  // quant2: a quantize node's gradient is x's (the STE above).
  const tj_node_t* src = &ad->src->nodes[operand];
  if (src->op == TJ_OP_QUANTIZE) target = ad->rw.map[src->operands[0]];
  int64_t dims[TJ_MAX_RANK];
  dims_of(ad, target, dims);
  uint32_t c;
  TJ_RETURN_IF_ERROR(sum_to(ad, contribution, rank_of(ad, target), dims, &c));
  TJ_RETURN_IF_ERROR(cast(ad, c, dtype_of(ad, target), &c));
  if (ad->grad[operand] == TJ_NODE_NONE) {
    ad->grad[operand] = c;
    return NULL;
  }
  return op2(ad, TJ_OP_ADD, ad->grad[operand], c, &ad->grad[operand]);
}

static tj_status_t backprop_node(ad_t* ad, uint32_t index) {
  const tj_node_t* node = &ad->src->nodes[index];
  const vjp_rule_t* rule = &kVjpRules[node->op];
  uint32_t n = node->num_operands;
  uint32_t x_buf[8], out_buf[8];
  bool want_buf[8];
  uint32_t* x = x_buf;
  uint32_t* out = out_buf;
  bool* want = want_buf;
  if (n > TJ_ARRAY_SIZE(x_buf)) {  // a long concat
    x = tj_alloc(ad->allocator, sizeof(uint32_t) * n);
    out = tj_alloc(ad->allocator, sizeof(uint32_t) * n);
    want = tj_alloc(ad->allocator, sizeof(bool) * n);
  }
  tj_status_t status = NULL;
  if (!x || !out || !want) status = tj_status_oom();
  bool any = false;
  for (uint32_t k = 0; !status && k < n; ++k) {
    uint32_t operand = node->operands[k];
    x[k] = operand == TJ_NODE_NONE ? TJ_NODE_NONE : ad->rw.map[operand];
    want[k] = operand != TJ_NODE_NONE && ad->needs[operand];
    out[k] = TJ_NODE_NONE;
    any |= want[k];
  }
  if (!status && any) {
    vjp_t v = {node, index, ad->rw.map[index], x, ad->grad[index], want, out};
    status = rule->fn(ad, &v);
    if (status && tj_status_code(status) != TJ_STATUS_OUT_OF_MEMORY) {
      status = tj_status_annotate(status,
                                  "autodiff: the gradient of %s "
                                  "(node %%%u)",
                                  tj_op_info(node->op)->name, index);
    }
  }
  for (uint32_t k = 0; !status && any && k < n; ++k) {
    if (want[k] && out[k] != TJ_NODE_NONE) {
      status = accumulate(ad, node->operands[k], out[k]);
    }
  }
  if (x != x_buf) {
    tj_free(ad->allocator, x, x ? sizeof(uint32_t) * n : 0);
    tj_free(ad->allocator, out, out ? sizeof(uint32_t) * n : 0);
    tj_free(ad->allocator, want, want ? sizeof(bool) * n : 0);
  }
  return status;
}

//===--- the entry point ---===//

// "grad_" + |name|, in |buf| of |size| bytes.
static void grad_name(const char* name, char* buf, size_t size) {
  snprintf(buf, size, "grad_%s", name);
}

static bool name_taken(const char* name, const tj_graph_t* g, bool inputs,
                       uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) {
    const char* other =
        inputs ? g->nodes[g->inputs[i]].attrs.name : g->outputs[i].name;
    if (strcmp(other, name) == 0) return true;
  }
  return false;
}

// Validates the selection of |num| indices out of |limit| (0: every float
// one) into |*out| (allocated, |*out_count| entries).
static tj_status_t select_values(const tj_graph_t* g, bool inputs, int32_t num,
                                 const int32_t* indices, uint32_t** out,
                                 uint32_t* out_count) {
  uint32_t limit = inputs ? g->num_inputs : g->num_outputs;
  const char* what = inputs ? "input" : "output";
  *out = NULL;
  *out_count = 0;
  if (num < 0)
    return tj_invalid("tj_graph_grad: %d %ss selected", (int)num, what);
  if (num > 0 && !indices) {
    return tj_invalid("tj_graph_grad: %s indices are NULL for %d %ss", what,
                      (int)num, what);
  }
  uint32_t* list = tj_alloc(g->allocator, sizeof(uint32_t) * (limit + 1));
  bool* seen = tj_calloc(g->allocator, limit + 1, sizeof(bool));
  tj_status_t status = list && seen ? NULL : tj_status_oom();
  uint32_t count = 0;
  for (uint32_t i = 0; !status && i < (num ? (uint32_t)num : limit); ++i) {
    int64_t k = num ? indices[i] : (int64_t)i;
    if (k < 0 || k >= (int64_t)limit) {
      status = tj_invalid(
          "tj_graph_grad: graph @%s has %u %ss; index %lld "
          "is out of range",
          g->name, limit, what, (long long)k);
      break;
    }
    uint32_t node = inputs ? g->inputs[k] : g->outputs[k].node;
    const char* name = inputs ? g->nodes[node].attrs.name : g->outputs[k].name;
    bool is_float = tj_dtype_is_float(g->nodes[node].dtype);
    if (!num && !is_float) continue;
    if (!is_float) {
      status = tj_invalid(
          "tj_graph_grad: %s \"%s\" of graph @%s is %s; only "
          "float values have gradients",
          what, name, g->name, tj_dtype_name(g->nodes[node].dtype));
    } else if (seen[k]) {
      status =
          tj_invalid("tj_graph_grad: %s \"%s\" is selected twice", what, name);
    } else {
      seen[k] = true;
      list[count++] = (uint32_t)k;
    }
  }
  if (!status && count == 0) {
    status = tj_invalid(
        "tj_graph_grad: graph @%s has no float %s to "
        "differentiate %s",
        g->name, what, inputs ? "with respect to" : "");
  }
  tj_free(g->allocator, seen, seen ? limit + 1 : 0);
  if (status) {
    tj_free(g->allocator, list, list ? sizeof(uint32_t) * (limit + 1) : 0);
    return status;
  }
  *out = list;
  *out_count = count;
  return NULL;
}

typedef struct grad_job_t {
  uint32_t* outs;  // selected output indices
  uint32_t num_outs;
  uint32_t* wrts;  // selected input indices
  uint32_t num_wrts;
  char** names;  // grad output names, num_wrts
  uint32_t* grad_nodes;
} grad_job_t;

static tj_status_t build(ad_t* ad, grad_job_t* job, tj_graph_t** out_joint) {
  const tj_graph_t* g = ad->src;
  char name[512];
  // Tangents first, right after the inputs.
  for (uint32_t i = 0; i < job->num_outs; ++i) {
    const tj_output_t* o = &g->outputs[job->outs[i]];
    const tj_node_t* node = &g->nodes[o->node];
    grad_name(o->name, name, sizeof(name));
    if (name_taken(name, g, true, g->num_inputs)) {
      return tj_invalid(
          "tj_graph_grad: the tangent of output \"%s\" would "
          "be named \"%s\", which an input of @%s already is",
          o->name, name, g->name);
    }
    int64_t dims[TJ_MAX_RANK];
    TJ_RETURN_IF_ERROR(tj_rewriter_dims(&ad->rw, node->rank, node->dims, dims));
    tj_attrs_t attrs;
    memset(&attrs, 0, sizeof(attrs));
    attrs.name = name;
    uint32_t tangent;
    TJ_RETURN_IF_ERROR(emit(ad, TJ_OP_INPUT, 0, NULL, &attrs, node->dtype,
                            node->rank, dims, &tangent));
    // Seeds: grad[y] += tangent (an output listed twice gets both).
    if (ad->needs[o->node]) {
      if (ad->grad[o->node] == TJ_NODE_NONE) {
        ad->grad[o->node] = tangent;
      } else {
        TJ_RETURN_IF_ERROR(
            op2(ad, TJ_OP_ADD, ad->grad[o->node], tangent, &ad->grad[o->node]));
      }
    }
  }
  // The forward.
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    if (g->nodes[i].op != TJ_OP_INPUT) {
      TJ_RETURN_IF_ERROR(tj_rewriter_clone(&ad->rw, i));
    }
  }
  // The backward: users before their operands (reverse node order), so a
  // node's gradient is complete when its rule runs.
  for (uint32_t i = g->num_nodes; i-- > 0;) {
    if (ad->grad[i] == TJ_NODE_NONE || !ad->needs[i]) continue;
    if (g->nodes[i].op == TJ_OP_INPUT) continue;
    TJ_RETURN_IF_ERROR(backprop_node(ad, i));
  }
  for (uint32_t i = 0; i < job->num_wrts; ++i) {
    uint32_t input = g->inputs[job->wrts[i]];
    const tj_node_t* node = &g->nodes[input];
    grad_name(node->attrs.name, name, sizeof(name));
    if (name_taken(name, g, false, g->num_outputs)) {
      return tj_invalid(
          "tj_graph_grad: the gradient of input \"%s\" would "
          "be named \"%s\", which an output of @%s already is",
          node->attrs.name, name, g->name);
    }
    job->names[i] = tj_strdup(ad->allocator, name);
    if (!job->names[i]) return tj_status_oom();
    uint32_t grad = ad->grad[input];
    if (grad == TJ_NODE_NONE) {
      int64_t dims[TJ_MAX_RANK];
      dims_of(ad, ad->rw.map[input], dims);
      TJ_RETURN_IF_ERROR(full(ad, node->dtype, node->rank, dims, 0.0, &grad));
    }
    job->grad_nodes[i] = grad;
  }
  return tj_rewriter_finish_outputs(&ad->rw, true, job->num_wrts,
                                    job->grad_nodes,
                                    (const char* const*)job->names, out_joint);
}

TJ_API tj_status_t tj_graph_grad(const tj_graph_t* graph, int32_t num_outputs,
                                 const int32_t* output_indices, int32_t num_wrt,
                                 const int32_t* wrt_input_indices,
                                 tj_graph_t** out_joint) {
  if (!out_joint) return tj_invalid("tj_graph_grad: out_joint is NULL");
  *out_joint = NULL;
  if (!graph) return tj_invalid("tj_graph_grad: graph is NULL");
  if (!graph->finalized)
    return tj_invalid("tj_graph_grad: graph @%s is not finalized", graph->name);
  tj_allocator_t al = graph->allocator;
  grad_job_t job;
  memset(&job, 0, sizeof(job));
  ad_t ad;
  memset(&ad, 0, sizeof(ad));
  ad.src = graph;
  ad.allocator = al;
  uint32_t n = graph->num_nodes;
  tj_status_t status = select_values(graph, false, num_outputs, output_indices,
                                     &job.outs, &job.num_outs);
  if (!status)
    status = select_values(graph, true, num_wrt, wrt_input_indices, &job.wrts,
                           &job.num_wrts);
  if (!status) {
    ad.grad = tj_alloc(al, sizeof(uint32_t) * n);
    ad.needs = tj_calloc(al, n, sizeof(bool));
    job.names = tj_calloc(al, job.num_wrts, sizeof(char*));
    job.grad_nodes = tj_alloc(al, sizeof(uint32_t) * job.num_wrts);
    if (!ad.grad || !ad.needs || !job.names || !job.grad_nodes)
      status = tj_status_oom();
  }
  if (!status) {
    for (uint32_t i = 0; i < n; ++i) ad.grad[i] = TJ_NODE_NONE;
    for (uint32_t i = 0; i < job.num_wrts; ++i) {
      ad.needs[graph->inputs[job.wrts[i]]] = true;
    }
    // Forward: a node needs a gradient if a differentiated input reaches
    // it through float values and ops gradients flow through.
    for (uint32_t i = 0; i < n; ++i) {
      const tj_node_t* node = &graph->nodes[i];
      if (node->op == TJ_OP_INPUT ||
          (!tj_dtype_is_float(node->dtype) && node->op != TJ_OP_QUANTIZE) ||
          !kVjpRules[node->op].fn) {
        continue;
      }
      for (uint32_t k = 0; k < node->num_operands && !ad.needs[i]; ++k) {
        uint32_t o = node->operands[k];
        ad.needs[i] = o != TJ_NODE_NONE && ad.needs[o];
      }
    }
    status = tj_rewriter_begin(&ad.rw, graph);
    if (!status) {
      status = build(&ad, &job, out_joint);  // finishes or leaves to abandon
      if (status) tj_rewriter_abandon(&ad.rw);
    }
  }
  if (job.names) {
    for (uint32_t i = 0; i < job.num_wrts; ++i) {
      if (job.names[i]) tj_free_string(al, job.names[i]);
    }
  }
  tj_free(al, job.names, job.names ? sizeof(char*) * job.num_wrts : 0);
  tj_free(al, job.grad_nodes,
          job.grad_nodes ? sizeof(uint32_t) * job.num_wrts : 0);
  tj_free(al, job.outs,
          job.outs ? sizeof(uint32_t) * (graph->num_outputs + 1) : 0);
  tj_free(al, job.wrts,
          job.wrts ? sizeof(uint32_t) * (graph->num_inputs + 1) : 0);
  tj_free(al, ad.grad, ad.grad ? sizeof(uint32_t) * n : 0);
  tj_free(al, ad.needs, ad.needs ? n : 0);
  return status;
}
