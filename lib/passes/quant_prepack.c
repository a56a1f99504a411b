// lib/passes/quant_prepack.c
//
// qfold (issue 17): weights stored transposed and quantized, transpose(
// dequantize(q, scale, zp)) over constants, as ONNX Runtime's MatMulNBits
// (and a Linear layer's [N, K] weight) give them, are relaid once at
// compile time as dequantize(q', scale', zp') of the [K, N] weight, the
// layout the x86 GEMM reads quantized weights in (kir/lower_gemm.c): q'
// [K, N] (int4: re-packed two a byte along N), scale' and zp' [N] (per
// output channel) or [ceil(K / g), N] (groups along K). A zero point that
// is a fill (full) becomes a constant, or nothing when it is 0. The
// relayout moves bits only, so the result is the same dequantized weight:
// every target computes the same numbers, and a target that does not read
// quantized weights decomposes the new dequantize as it did the old one.
//
// Requires: nothing.  Preserves: inputs, outputs, symbols, guards.
// Invalidates: fusion groups, memory plan.  Idempotent (its results are
// not transposes).

#include <string.h>

#include "lib/passes/pass.h"
#include "lib/quant.h"

// A zero point the relayout can read: none, a constant, or a full.
static bool zp_known(const tj_graph_t* g, uint32_t zp) {
  if (zp == TJ_NODE_NONE) return true;
  const tj_node_t* z = &g->nodes[zp];
  return (z->op == TJ_OP_CONSTANT || z->op == TJ_OP_FULL) &&
         (z->dtype == TJ_DTYPE_I8 || z->dtype == TJ_DTYPE_U8);
}

// The transposed dequantize |t| reads, when it can be relaid: its decoded
// attributes in |out| (the [N, K] dequantize's).
static bool match(const tj_graph_t* g, const tj_node_t* t,
                  tj_quant_shape_t* out) {
  if (t->op != TJ_OP_TRANSPOSE || t->rank != 2 || t->attrs.num_ints != 2 ||
      t->attrs.ints[0] != 1) {
    return false;
  }
  const tj_node_t* d = &g->nodes[t->operands[0]];
  if (d->op != TJ_OP_DEQUANTIZE || d->rank != 2 || d->num_operands != 3 ||
      d->attrs.num_ints != TJ_QUANT_NUM_INTS) {
    return false;
  }
  const tj_node_t* q = &g->nodes[d->operands[0]];
  const tj_node_t* s = &g->nodes[d->operands[1]];
  uint32_t zp = d->operands[2];
  // The relayout copies the scale as f32 (an f16/bf16 one stays).
  if (q->op != TJ_OP_CONSTANT || s->op != TJ_OP_CONSTANT ||
      s->dtype != TJ_DTYPE_F32 ||
      (q->dtype != TJ_DTYPE_I8 && q->dtype != TJ_DTYPE_U8) ||
      !zp_known(g, zp)) {
    return false;
  }
  char msg[8];
  const tj_node_t* z = zp == TJ_NODE_NONE ? NULL : &g->nodes[zp];
  if (!tj_quant_check(false, q, s, z, q->dtype, d->attrs.axis, d->attrs.ints,
                      d->attrs.num_ints, out, msg, sizeof(msg))) {
    return false;
  }
  for (int32_t i = 0; i < 2; ++i) {
    if (!tj_dim_is_const(out->dims[i]) || out->dims[i] < 1) return false;
  }
  // Per output channel (axis 0 of [N, K]) or groups along K (axis 1).
  return (out->gran == TJ_QUANT_PER_AXIS && out->axis == 0) ||
         (out->gran == TJ_QUANT_PER_BLOCK && out->axis == 1);
}

// Element (n, k) of the [N, K] q: its raw value (int4: the nibble).
static uint8_t q_at(const tj_quant_shape_t* qs, const uint8_t* q, int64_t n,
                    int64_t k) {
  if (!qs->int4) return q[n * qs->qdims[1] + k];
  uint8_t byte = q[n * qs->qdims[1] + k / 2];
  return (uint8_t)(k & 1 ? byte >> 4 : byte & 15);
}

// Appends a constant of |dtype| [rows, cols] (rank 1 when |rows| is 0)
// holding |data| (copied).
static tj_status_t constant(tj_rewriter_t* rw, tj_dtype_t dtype, int64_t rows,
                            int64_t cols, const void* data, uint32_t* out) {
  int64_t dims[2] = {rows ? rows : cols, cols};
  tj_node_desc_t cd;
  memset(&cd, 0, sizeof(cd));
  cd.op = TJ_OP_CONSTANT;
  cd.dtype = dtype;
  cd.rank = rows ? 2 : 1;
  cd.dims = dims;
  cd.attrs.data = data;
  return tj_rewriter_append(rw, &cd, out);
}

// The relaid dequantize of transpose |t| in the new graph.
static tj_status_t relay(tj_rewriter_t* rw, const tj_node_t* t,
                         const tj_quant_shape_t* qs, uint32_t* out) {
  const tj_graph_t* g = rw->src;
  const tj_node_t* d = &g->nodes[t->operands[0]];
  const tj_node_t* sn = &g->nodes[d->operands[1]];
  const uint32_t zp = d->operands[2];
  const int64_t N = qs->dims[0], K = qs->dims[1];
  const bool blocked = qs->gran == TJ_QUANT_PER_BLOCK;
  const int64_t groups = blocked ? (K + qs->block - 1) / qs->block : 1;
  // q' [K, N] (int4: [K, ceil(N / 2)]).
  const int64_t qcols = qs->int4 ? (N + 1) / 2 : N;
  size_t qbytes = (size_t)(K * qcols), sbytes = (size_t)(groups * N);
  tj_allocator_t al = g->allocator;
  uint8_t* qn = tj_calloc(al, qbytes, 1);
  float* sc = tj_alloc(al, sbytes * sizeof(float));
  uint8_t* zn = tj_calloc(al, sbytes, 1);
  tj_status_t status = NULL;
  if (!qn || !sc || !zn) status = tj_status_oom();
  bool any_nonzero = false;
  if (!status) {
    const uint8_t* q = g->nodes[d->operands[0]].attrs.data;
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t n = 0; n < N; ++n) {
        uint8_t v = q_at(qs, q, n, k);
        if (!qs->int4) {
          qn[k * qcols + n] = v;
        } else {
          qn[k * qcols + n / 2] |= (uint8_t)(n & 1 ? v << 4 : v);
        }
      }
    }
    // scale and zero point: [N] stays; [N, groups] becomes [groups, N].
    const float* s = sn->attrs.data;
    const tj_node_t* z = zp == TJ_NODE_NONE ? NULL : &g->nodes[zp];
    for (int64_t gi = 0; gi < groups; ++gi) {
      for (int64_t n = 0; n < N; ++n) {
        int64_t from = blocked ? n * groups + gi : n;
        sc[gi * N + n] = s[from];
        uint8_t zv = 0;
        if (z && z->op == TJ_OP_FULL) {
          zv = (uint8_t)(z->dtype == TJ_DTYPE_I8 ? (int8_t)z->attrs.value
                                                 : (uint8_t)z->attrs.value);
        } else if (z) {
          zv = ((const uint8_t*)z->attrs.data)[z->rank == 0 ? 0 : from];
        }
        zn[gi * N + n] = zv;
        any_nonzero |= zv != 0;
      }
    }
  }
  uint32_t ops[3] = {TJ_NODE_NONE, TJ_NODE_NONE, TJ_NODE_NONE};
  if (!status) {
    status =
        constant(rw, g->nodes[d->operands[0]].dtype, K, qcols, qn, &ops[0]);
  }
  if (!status)
    status = constant(rw, TJ_DTYPE_F32, blocked ? groups : 0, N, sc, &ops[1]);
  if (!status && any_nonzero) {
    status =
        constant(rw, g->nodes[zp].dtype, blocked ? groups : 0, N, zn, &ops[2]);
  }
  tj_free(al, qn, qbytes ? qbytes : 1);
  tj_free(al, sc, sbytes * sizeof(float));
  tj_free(al, zn, sbytes ? sbytes : 1);
  if (status) return status;
  int64_t ints[TJ_QUANT_NUM_INTS];
  memcpy(ints, d->attrs.ints, sizeof(ints));
  ints[TJ_QUANT_ODD] = qs->int4 ? (N & 1) : 0;
  int64_t dims[2] = {K, N};
  tj_node_desc_t dd;
  memset(&dd, 0, sizeof(dd));
  dd.op = TJ_OP_DEQUANTIZE;
  dd.num_operands = 3;
  dd.operands = ops;
  dd.dtype = d->dtype;
  dd.rank = 2;
  dd.dims = dims;
  dd.attrs.ints = ints;
  dd.attrs.num_ints = TJ_QUANT_NUM_INTS;
  dd.attrs.axis = blocked ? 0 : 1;
  return tj_rewriter_append(rw, &dd, out);
}

tj_status_t tj_pass_quant_prepack(tj_pass_ctx_t* ctx, tj_plan_t* plan) {
  const tj_graph_t* g = plan->graph;
  bool any = false;
  tj_quant_shape_t qs;
  for (uint32_t i = 0; i < g->num_nodes && !any; ++i) {
    any = match(g, &g->nodes[i], &qs);
  }
  if (!any) return NULL;
  tj_rewriter_t rw;
  TJ_RETURN_IF_ERROR(tj_rewriter_begin(&rw, g));
  tj_status_t status = NULL;
  uint32_t relaid = 0;
  for (uint32_t i = 0; !status && i < g->num_nodes; ++i) {
    const tj_node_t* node = &g->nodes[i];
    if (node->op == TJ_OP_INPUT) continue;
    if (match(g, node, &qs) && tj_pass_rewrite(ctx, g, i)) {
      status = relay(&rw, node, &qs, &rw.map[i]);
      ++relaid;
      continue;
    }
    status = tj_rewriter_clone(&rw, i);
  }
  if (status || !relaid) {
    tj_rewriter_abandon(&rw);
    return status;
  }
  tj_graph_t* out = NULL;
  TJ_RETURN_IF_ERROR(tj_rewriter_finish(&rw, &out));
  tj_plan_set_graph(plan, out);
  return tj_pass_dce(ctx, plan);
}
