// lib/passes/decompose.c
//
// Rewrites every composite op (ops.def kind COMPOSITE) into core ops, so
// that fusion sees plain pointwise ops and reductions and a backend needs no
// kernel per composite. matmul stays whole (it is core); linear becomes
// matmul + add, whose add then fuses into the matmul's epilogue.
//
//   gelu (erf)  x * 0.5 * (1 + erf(x * sqrt(1/2)))                 5 ops
//   gelu (tanh) x * sigmoid(x * (c0 + c1 * x * x)),                 6 ops
//               c0 = 2 sqrt(2/pi), c1 = c0 * 0.044715: the tanh form, as
//               0.5 (1 + tanh(z)) == sigmoid(2 z); no 1 + tanh(z)
//               cancellation for negative x, and one op fewer.
//   silu        x * sigmoid(x)
//   softmax     m = max(x, axis); e = exp(x - m); e / sum(e, axis)
//   log_softmax d = x - max(x, axis); d - log(sum(exp(d), axis))
//   layer_norm  c = x - mean(x); c * rsqrt(mean(c * c) + eps) * gamma + beta
//   rms_norm    x * rsqrt(mean(x * x) + eps) * gamma
//   linear      matmul(x, w) + b
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
// left).

#include <string.h>

#include "lib/passes/pass.h"

typedef struct dec_t {
  tj_rewriter_t rw;
  bool upcast_half;
} dec_t;

static tj_status_t op1(dec_t* d, tj_op_t op, uint32_t a, uint32_t* out) {
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = op;
  desc.num_operands = 1;
  desc.operands = &a;
  return tj_rewriter_append(&d->rw, &desc, out);
}

static tj_status_t op2(dec_t* d, tj_op_t op, uint32_t a, uint32_t b,
                       uint32_t* out) {
  uint32_t ops[2] = {a, b};
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = op;
  desc.num_operands = 2;
  desc.operands = ops;
  return tj_rewriter_append(&d->rw, &desc, out);
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

// A reduction over one axis, keeping it.
static tj_status_t reduce(dec_t* d, tj_op_t op, uint32_t a, int64_t axis,
                          uint32_t* out) {
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = op;
  desc.num_operands = 1;
  desc.operands = &a;
  desc.attrs.ints = &axis;
  desc.attrs.num_ints = 1;
  desc.attrs.keepdims = true;
  return tj_rewriter_append(&d->rw, &desc, out);
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

static const double kSqrtHalf = 0.70710678118654752440084436210485;
static const double kTwoSqrt2OverPi = 1.5957691216057307117597842397375;

static tj_status_t gelu(dec_t* d, uint32_t x, bool approximate, uint32_t* out) {
  uint32_t a, b, e;
  if (!approximate) {
    TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_MUL, x, kSqrtHalf, &a));
    TJ_RETURN_IF_ERROR(op1(d, TJ_OP_ERF, a, &e));
    TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_ADD, e, 1.0, &b));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, x, b, &a));
    return op_c(d, TJ_OP_MUL, a, 0.5, out);
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

// layer_norm (center) / rms_norm over the last axis.
static tj_status_t norm(dec_t* d, uint32_t x, uint32_t gamma, uint32_t beta,
                        double eps, bool center, uint32_t* out) {
  int64_t axis = d->rw.dst->nodes[x].rank - 1;
  uint32_t mu, c = x, sq, var, r, y;
  if (center) {
    TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_MEAN, x, axis, &mu));
    TJ_RETURN_IF_ERROR(op2(d, TJ_OP_SUB, x, mu, &c));
  }
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, c, c, &sq));
  TJ_RETURN_IF_ERROR(reduce(d, TJ_OP_MEAN, sq, axis, &var));
  TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_ADD, var, eps, &r));
  TJ_RETURN_IF_ERROR(op1(d, TJ_OP_RSQRT, r, &r));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_MUL, c, r, &y));
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
  uint32_t w3[3] = {neg, wrapped, i};
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_WHERE;
  desc.num_operands = 3;
  desc.operands = w3;
  TJ_RETURN_IF_ERROR(tj_rewriter_append(&d->rw, &desc, &i));
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
    memset(&desc, 0, sizeof(desc));
    desc.op = TJ_OP_SLICE;
    desc.num_operands = 1;
    desc.operands = &values;
    desc.attrs.ints = sl;
    desc.attrs.num_ints = 3;
    TJ_RETURN_IF_ERROR(tj_rewriter_append(&d->rw, &desc, &s));
    TJ_RETURN_IF_ERROR(reshape(d, s, 0, NULL, pick ? &on : &off));
  }
  uint32_t sel[3] = {eq, on, off};
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_WHERE;
  desc.num_operands = 3;
  desc.operands = sel;
  return tj_rewriter_append(&d->rw, &desc, out);
}

static tj_status_t decompose_node(dec_t* d, uint32_t index) {
  const tj_node_t* node = &d->rw.src->nodes[index];
  uint32_t ops[3] = {TJ_NODE_NONE, TJ_NODE_NONE, TJ_NODE_NONE};
  for (uint32_t k = 0; k < node->num_operands && k < 3; ++k) {
    if (node->operands[k] != TJ_NODE_NONE) {
      ops[k] = d->rw.map[node->operands[k]];
    }
  }
  if (node->op == TJ_OP_ONE_HOT) {
    uint32_t y;
    TJ_RETURN_IF_ERROR(one_hot(d, node, ops[0], ops[1], &y));
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

tj_status_t tj_pass_decompose(tj_pass_ctx_t* ctx, tj_plan_t* plan) {
  const tj_graph_t* g = plan->graph;
  bool any = false;
  for (uint32_t i = 0; i < g->num_nodes && !any; ++i) {
    any = tj_op_info(g->nodes[i].op)->kind == TJ_OP_KIND_COMPOSITE;
  }
  if (!any) return NULL;
  dec_t d;
  d.upcast_half = ctx->decompose_upcast_half;
  TJ_RETURN_IF_ERROR(tj_rewriter_begin(&d.rw, g));
  tj_status_t status = NULL;
  for (uint32_t i = 0; !status && i < g->num_nodes; ++i) {
    const tj_node_t* node = &g->nodes[i];
    if (node->op == TJ_OP_INPUT) continue;
    if (tj_op_info(node->op)->kind == TJ_OP_KIND_COMPOSITE) {
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
