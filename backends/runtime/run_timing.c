// backends/runtime/run_timing.c: the traffic and arithmetic of one launch
// of a lowered kernel (run_timing.h), for tj_executable_profile.

#include "backends/runtime/run_timing.h"

// The extent of dim |d| of a buffer with |role| in |k|'s space.
static double buffer_extent(const tj_kir_t* k, tj_kir_role_t role, int32_t d,
                            const int64_t* scalars) {
  double m = (double)tj_kir_ival_eval(k->dims[d], scalars);
  if (k->kind != TJ_KIR_GEMM || d < k->rank - 2) return m;
  double kk = (double)tj_kir_ival_eval(k->gemm_k, scalars);
  if (role == TJ_KIR_GEMM_A && d == k->rank - 1) return kk;  // [.., m, k]
  if ((role == TJ_KIR_GEMM_B || role == TJ_KIR_GEMM_B2) && d == k->rank - 2)
    return kk;  // [.., k, n]
  return m;
}

void tj_kernel_traffic(const tj_kir_t* k, const int64_t* scalars,
                       double* out_bytes, double* out_flops) {
  double bytes = 0;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &k->buffers[b];
    double elements = 1;
    for (int32_t d = 0; d < k->rank; ++d) {
      if (tj_kir_ival_eval(buf->strides[d], scalars) != 0) {
        elements *= buffer_extent(k, buf->role, d, scalars);
      }
    }
    // ATTENTION: the head dims are no space dims (kernel_ir.h): q and k
    // rows hold d elements, v, dy and the forward's output rows dv; dq's
    // rows d, [dk | dv]'s d + dv; lse, delta and an lse output
    // (attention_lse's, the forward's with_lse) one.
    if (k->kind == TJ_KIR_ATTENTION && buf->role != TJ_KIR_ATTN_MASK &&
        buf->role != TJ_KIR_ATTN_LSE && buf->role != TJ_KIR_ATTN_DELTA &&
        !tj_kir_attention_lse_output(k, b)) {
      const tj_kir_attention_op_t op = k->attention.op;
      const double d = (double)tj_kir_ival_eval(k->attention.d, scalars);
      const double dv = (double)tj_kir_ival_eval(k->attention.dv, scalars);
      if (buf->role == TJ_KIR_ATTN_Q || buf->role == TJ_KIR_ATTN_K) {
        elements *= d;
      } else if (buf->role != TJ_KIR_OUTPUT) {
        elements *= dv;
      } else {
        elements *= op == TJ_KIR_ATTENTION_DQ    ? d
                    : op == TJ_KIR_ATTENTION_DKV ? d + dv
                                                 : dv;
      }
    }
    bytes += elements * (double)tj_dtype_size(buf->dtype);
  }
  double points = 1;
  for (int32_t d = 0; d < k->rank; ++d) {
    points *= (double)tj_kir_ival_eval(k->dims[d], scalars);
  }
  double row_points = 1;  // ROW_REDUCE: the rows
  for (int32_t d = 0; d + 1 < k->rank; ++d) {
    row_points *= (double)tj_kir_ival_eval(k->dims[d], scalars);
  }
  double flops = 0;
  if (k->kind == TJ_KIR_GEMM || k->kind == TJ_KIR_CONV) {
    flops = 2.0 * points * (double)tj_kir_ival_eval(k->gemm_k, scalars);
    if (tj_kir_gemm_is_dual(k)) flops *= 2;  // two products (swiglu)
  }
  if (k->kind == TJ_KIR_ATTENTION && k->rank >= 2) {
    // q . k over d and p . v over dv per (query, key) pair; causal counts
    // the pairs j <= i only (the kernel never reads the tiles past them).
    double tq = (double)tj_kir_ival_eval(k->dims[k->rank - 2], scalars);
    double tk = (double)tj_kir_ival_eval(k->dims[k->rank - 1], scalars);
    double pairs = points;
    if (k->attention.causal && tq * tk > 0) {
      double full = tq < tk ? tq : tk;  // rows i < tk see i + 1 keys
      pairs = points / (tq * tk) * (full * (full + 1) / 2 + (tq - full) * tk);
    }
    // The products per pair: the forward q.k and p.v, attention_lse q.k,
    // attention_dq q.k, dy.v and ds.k, attention_dkv q.k, dy.v, p.dy and
    // ds.q.
    const double d = (double)tj_kir_ival_eval(k->attention.d, scalars);
    const double dv = (double)tj_kir_ival_eval(k->attention.dv, scalars);
    const tj_kir_attention_op_t op = k->attention.op;
    flops = 2.0 * pairs *
            (op == TJ_KIR_ATTENTION_LSE   ? d
             : op == TJ_KIR_ATTENTION_DQ  ? 2 * d + dv
             : op == TJ_KIR_ATTENTION_DKV ? 2 * d + 2 * dv
                                          : d + dv);
  }
  for (uint32_t p = 0; p < k->num_phases; ++p) {
    const tj_kir_phase_t* ph = &k->phases[p];
    double ops = ph->kind == TJ_KIR_PHASE_REDUCE ? 1 : 0;  // the combine
    for (uint32_t i = 0; i < ph->num_insts; ++i) {
      if (ph->insts[i].kind == TJ_KIR_OP) ops += 1;
    }
    double over = ph->kind == TJ_KIR_PHASE_ROW ? row_points : points;
    flops += ops * over;
  }
  *out_bytes = bytes;
  *out_flops = flops;
}
