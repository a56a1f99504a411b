// lib/passes/quant_matmul.c
//
// fp8 (issue 17): a matmul of two dequantized operands,
//   matmul(dequantize(qa, sa[, za]), dequantize(qb, sb[, zb])),
// as static QDQ (tj_calibrate's quantize -> dequantize of an activation
// against a quantized weight) and ONNX's QDQ MatMul give it, runs as a
// GEMM of the stored 8-bit values with the scales applied to its result:
//   cast(matmul_integer(qa, qb, za', zb'), f32) * sa' * sb
// where za', sa' are per-row values made [M, 1]; with float8 operands
// (e4m3, e5m2, zero points absent or 0) as matmul_f8(qa, qb) * sa' * sb,
// which CUDA sm_90a runs on fp8 wgmma and other targets as an f32 matmul
// of the exactly decoded values. decompose turns
// matmul_integer into matmul_i32 and its zero-point corrections, so the
// integer GEMM (VNNI / AMX on x86, 8-bit wgmma on CUDA) computes the sum of
// (qa - za)(qb - zb) exactly and the scales fuse as its epilogue.
//
// Numerics (int8): the sum is exact in i32 (the fold requires a constant K with
// K * 255 * 255 < 2^31), so the result differs from the reference's
// (dequantize rounds each (q - z) * s to f32, the matmul sums the products
// in f32) only by the reference's own roundings: |error| <= about
// (K + 3) * 2^-24 * sum_k |a_k * b_k|. float8: the products are exact and
// summed in f32, the same bound. The fold fires only where the scales
// are f32 and apply per tensor or per row of A (axis M of [.., M, K]) and
// per tensor or per column of B (axis N of [K, N]); a blocked, int4 or
// 16-bit dequantize, another granularity, a non-f32 result or a symbolic
// or too large K keeps the float matmul. tj_pass_ctx_t.quant_matmul (on
// by default) switches it off.
//
// Requires: nothing.  Preserves: inputs, outputs, symbols, guards.
// Invalidates: fusion groups, memory plan.  Idempotent (its results are
// not matmuls of dequantizes).

#include <string.h>

#include "lib/passes/pass.h"
#include "lib/quant.h"

// The largest K whose i32 sum of 8-bit differences (|q - z| <= 255) cannot
// overflow: 33025 * 65025 < 2^31.
#define QM_MAX_K 33025

// One operand of the matmul: the dequantize it reads, decoded.
typedef struct qm_operand_t {
  const tj_node_t* deq;
  tj_quant_shape_t qs;
  bool per_axis;  // per row of A / per column of B, else per tensor
} qm_operand_t;

static bool is_int8(tj_dtype_t d) {
  return d == TJ_DTYPE_I8 || d == TJ_DTYPE_U8;
}

static bool is_float8(tj_dtype_t d) {
  return d == TJ_DTYPE_F8E4M3 || d == TJ_DTYPE_F8E5M2;
}

// A float8 dequantize's zero point must be absent or zero (ONNX allows
// only 0 there); any other would make q - zp round.
static bool zero_f8(const tj_node_t* z) {
  if (!z) return true;
  if (z->op == TJ_OP_FULL) return z->attrs.value == 0;
  if (z->op != TJ_OP_CONSTANT || !z->attrs.data) return false;
  const uint8_t* bits = z->attrs.data;
  int64_t n = 1;
  for (int32_t i = 0; i < z->rank; ++i) {
    if (!tj_dim_is_const(z->dims[i])) return false;
    n *= z->dims[i];
  }
  for (int64_t i = 0; i < n; ++i) {
    if (bits[i] & 0x7F) return false;  // +0 and -0 only
  }
  return true;
}

// Whether matmul operand |index| (0: A, 1: B) of rank |rank| is a
// dequantize the fold can take: decoded in |out|.
static bool match_operand(const tj_graph_t* g, uint32_t index, int32_t which,
                          qm_operand_t* out) {
  const tj_node_t* d = &g->nodes[index];
  if (d->op != TJ_OP_DEQUANTIZE || d->dtype != TJ_DTYPE_F32 ||
      d->num_operands != 3 || d->attrs.num_ints != TJ_QUANT_NUM_INTS) {
    return false;
  }
  const tj_node_t* q = &g->nodes[d->operands[0]];
  const tj_node_t* s = &g->nodes[d->operands[1]];
  const tj_node_t* z =
      d->operands[2] == TJ_NODE_NONE ? NULL : &g->nodes[d->operands[2]];
  if (!is_int8(q->dtype) && !(is_float8(q->dtype) && zero_f8(z))) return false;
  char msg[8];
  if (!tj_quant_check(false, q, s, z, q->dtype, d->attrs.axis, d->attrs.ints,
                      d->attrs.num_ints, &out->qs, msg, sizeof(msg))) {
    return false;
  }
  if (out->qs.int4) return false;
  out->deq = d;
  // A [.., M, K]: per row is axis M; B [K, N]: per column is axis N.
  if (which == 0 && d->rank < 2) return false;
  if (which == 1 && d->rank != 2) return false;
  if (out->qs.gran == TJ_QUANT_PER_TENSOR) {
    out->per_axis = false;
    return s->rank == 0 && (!z || z->rank == 0);
  }
  if (out->qs.gran != TJ_QUANT_PER_AXIS) return false;
  out->per_axis = true;
  return out->qs.axis == (which == 0 ? d->rank - 2 : 1) && s->rank == 1 &&
         (!z || z->rank == 1);
}

// Whether matmul |m| can run on the 8-bit operands: its A and B in |a|, |b|.
static bool match(const tj_graph_t* g, const tj_node_t* m, qm_operand_t* a,
                  qm_operand_t* b) {
  if (m->op != TJ_OP_MATMUL || m->dtype != TJ_DTYPE_F32 ||
      m->num_operands != 2) {
    return false;
  }
  if (!match_operand(g, m->operands[0], 0, a) ||
      !match_operand(g, m->operands[1], 1, b)) {
    return false;
  }
  // Both integer or both float8 (f32 sums: no bound on K).
  if (is_float8(a->qs.qdtype) || is_float8(b->qs.qdtype))
    return is_float8(a->qs.qdtype) && is_float8(b->qs.qdtype);
  int64_t K = b->deq->dims[0];
  return tj_dim_is_const(K) && K >= 1 && K <= QM_MAX_K;
}

// |v| [M] as [M, 1] (a per-row value that broadcasts along N).
static tj_status_t per_row(tj_rewriter_t* rw, uint32_t v, uint32_t* out) {
  const tj_node_t* n = &rw->dst->nodes[v];
  int64_t dims[2] = {n->dims[0], 1};
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_RESHAPE;
  desc.num_operands = 1;
  desc.operands = &v;
  desc.dtype = n->dtype;
  desc.rank = 2;
  desc.dims = dims;
  return tj_rewriter_append(rw, &desc, out);
}

// The operand's q, scale and zero point in the new graph, per-row values
// of A made [M, 1].
static tj_status_t parts(tj_rewriter_t* rw, const qm_operand_t* o, bool row,
                         uint32_t* q, uint32_t* s, uint32_t* z) {
  const uint32_t* map = rw->map;
  *q = map[o->deq->operands[0]];
  *s = map[o->deq->operands[1]];
  *z = o->deq->operands[2] == TJ_NODE_NONE ? TJ_NODE_NONE
                                           : map[o->deq->operands[2]];
  if (!row || !o->per_axis) return NULL;
  TJ_RETURN_IF_ERROR(per_row(rw, *s, s));
  if (*z != TJ_NODE_NONE) TJ_RETURN_IF_ERROR(per_row(rw, *z, z));
  return NULL;
}

// cast(matmul_integer(qa, qb, za', zb), f32) * sa' * sb in the new graph;
// float8: matmul_f8(qa, qb) * sa' * sb (the zero points are 0).
static tj_status_t rewrite(tj_rewriter_t* rw, const qm_operand_t* a,
                           const qm_operand_t* b, uint32_t* out) {
  uint32_t qa, sa, za, qb, sb, zb;
  TJ_RETURN_IF_ERROR(parts(rw, a, true, &qa, &sa, &za));
  TJ_RETURN_IF_ERROR(parts(rw, b, false, &qb, &sb, &zb));
  uint32_t ops[4] = {qa, qb, za, zb}, y;
  if (is_float8(a->qs.qdtype)) {
    TJ_RETURN_IF_ERROR(tj_rewriter_op(rw, TJ_OP_MATMUL_F8, 2, ops, &y));
  } else {
    tj_node_desc_t desc;
    memset(&desc, 0, sizeof(desc));
    desc.op = TJ_OP_MATMUL_INTEGER;
    desc.num_operands = 4;
    desc.operands = ops;
    TJ_RETURN_IF_ERROR(tj_rewriter_append(rw, &desc, &y));
    memset(&desc, 0, sizeof(desc));
    desc.op = TJ_OP_CAST;
    desc.num_operands = 1;
    desc.operands = &y;
    desc.dtype = TJ_DTYPE_F32;
    TJ_RETURN_IF_ERROR(tj_rewriter_append(rw, &desc, &y));
  }
  uint32_t m1[2] = {y, sa};
  TJ_RETURN_IF_ERROR(tj_rewriter_op(rw, TJ_OP_MUL, 2, m1, &y));
  uint32_t m2[2] = {y, sb};
  return tj_rewriter_op(rw, TJ_OP_MUL, 2, m2, out);
}

tj_status_t tj_pass_quant_matmul(tj_pass_ctx_t* ctx, tj_plan_t* plan) {
  const tj_graph_t* g = plan->graph;
  qm_operand_t a, b;
  bool any = false;
  for (uint32_t i = 0; i < g->num_nodes && !any; ++i) {
    any = match(g, &g->nodes[i], &a, &b);
  }
  if (!any) return NULL;
  tj_rewriter_t rw;
  TJ_RETURN_IF_ERROR(tj_rewriter_begin(&rw, g));
  tj_status_t status = NULL;
  uint32_t folded = 0;
  for (uint32_t i = 0; !status && i < g->num_nodes; ++i) {
    const tj_node_t* node = &g->nodes[i];
    if (node->op == TJ_OP_INPUT) continue;
    if (match(g, node, &a, &b) && tj_pass_rewrite(ctx, g, i)) {
      status = rewrite(&rw, &a, &b, &rw.map[i]);
      ++folded;
      continue;
    }
    status = tj_rewriter_clone(&rw, i);
  }
  if (status || !folded) {
    tj_rewriter_abandon(&rw);
    return status;
  }
  tj_graph_t* out = NULL;
  TJ_RETURN_IF_ERROR(tj_rewriter_finish(&rw, &out));
  tj_plan_set_graph(plan, out);
  return tj_pass_dce(ctx, plan);
}
