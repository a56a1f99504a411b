// Kernel IR samples for the NVPTX tests: every template with the body
// features that change the generated code (vector/gather/broadcast access,
// f16/bf16 conversions, transcendentals, each reduction, tensor-core and
// CUDA-core GEMMs with fused epilogues). Shared by the ptxas test (CI) and
// the GPU test, which checks each against scalar host math.

#ifndef TJ_TESTS_CUDA_NVPTX_SAMPLES_H_
#define TJ_TESTS_CUDA_NVPTX_SAMPLES_H_

#include <string.h>

#include "kir/kernel_ir.h"

typedef enum sample_e {
  SAMPLE_GELU_BIAS,         // y[B,N] f32 = gelu_erf(x + b[N])
  SAMPLE_BF16_MAP,          // y[B,N] bf16 = x * x + exp(-x), x bf16
  SAMPLE_TRANSPOSED,        // y[N,B] f32 = where(x > 0, x, 0.1 x), x[B,N] read
                            // transposed (a param stride along the inner dim)
  SAMPLE_SOFTMAX,           // y[R,L] f32 = softmax(x) along L
  SAMPLE_LAYERNORM_BF16,    // y[R,L] bf16 = (x - mean) * rstd, plus mean, rstd
                            // per row (f32), x bf16
  SAMPLE_ARGMAX,            // idx[R] i64 = argmax x[R,L] f32
  SAMPLE_GEMM_F32,          // y[M,N] f32 = relu(x[M,K] @ w[K,N] + b[N])
  SAMPLE_GEMM_BF16,         // y[M,N] bf16 = gelu_tanh(x @ w + b), bf16 operands
  SAMPLE_GEMM_F16_BATCHED,  // y[2,M,N] f32 = x[2,M,K] @ w[K,N] + r[2,M,N],
                            // f16 operands
  SAMPLE_GEMM_BF16_BMM,     // y[B,M,N] bf16 = 0.125 (q[B,M,K] @ k[B,N,K]^T):
                            // attention's scores, both operands batched, B
                            // K-major, every size a runtime param
  SAMPLE_COUNT_,
} sample_t;

static const char* const kSampleNames[SAMPLE_COUNT_] = {
    "gelu_bias", "bf16_map", "transposed", "softmax",          "layernorm_bf16",
    "argmax",    "gemm_f32", "gemm_bf16",  "gemm_f16_batched", "gemm_bf16_bmm",
};

static inline uint32_t s_const(tj_kir_t* k, double v) {
  return tj_kir_const_float(k, TJ_DTYPE_F32, v);
}

// gelu with erf: 0.5 x (1 + erf(x / sqrt 2)), f32.
static inline uint32_t s_gelu_erf(tj_kir_t* k, uint32_t x) {
  uint32_t e = tj_kir_unary(
      k, TJ_OP_ERF,
      tj_kir_binary(k, TJ_OP_MUL, x, s_const(k, 0.70710678118654752)));
  return tj_kir_binary(k, TJ_OP_MUL,
                       tj_kir_binary(k, TJ_OP_MUL, s_const(k, 0.5), x),
                       tj_kir_binary(k, TJ_OP_ADD, s_const(k, 1.0), e));
}

// gelu, tanh form: 0.5 x (1 + tanh(0.79788456 (x + 0.044715 x^3))), f32.
static inline uint32_t s_gelu_tanh(tj_kir_t* k, uint32_t x) {
  uint32_t x3 =
      tj_kir_binary(k, TJ_OP_MUL, x, tj_kir_binary(k, TJ_OP_MUL, x, x));
  uint32_t inner = tj_kir_binary(
      k, TJ_OP_MUL, s_const(k, 0.7978845608028654),
      tj_kir_binary(k, TJ_OP_ADD, x,
                    tj_kir_binary(k, TJ_OP_MUL, s_const(k, 0.044715), x3)));
  uint32_t t = tj_kir_unary(k, TJ_OP_TANH, inner);
  return tj_kir_binary(k, TJ_OP_MUL,
                       tj_kir_binary(k, TJ_OP_MUL, s_const(k, 0.5), x),
                       tj_kir_binary(k, TJ_OP_ADD, s_const(k, 1.0), t));
}

// Builds sample |which|. Parameters are named sizes; their order is the
// order of the scalars at launch (see each case). GEMMs with f16/bf16
// operands are left unfinalized: tj_kir_finalize accepts only f32 operands
// today (the x86 JIT's limit), the NVPTX emitter takes all three.
static inline tj_status_t sample_build(tj_allocator_t a, sample_t which,
                                       tj_kir_t** out) {
  *out = NULL;
  tj_kir_t* k = NULL;
  tj_kir_kind_t kind = which <= SAMPLE_TRANSPOSED ? TJ_KIR_POINTWISE
                       : which <= SAMPLE_ARGMAX   ? TJ_KIR_ROW_REDUCE
                                                  : TJ_KIR_GEMM;
  TJ_RETURN_IF_ERROR(tj_kir_create(a, kind, kSampleNames[which], &k));
  tj_kir_ival_t c0 = tj_kir_constant(0), c1 = tj_kir_constant(1);
  bool finalize = true;
  switch (which) {
    case SAMPLE_GELU_BIAS: {  // scalars: B, N
      tj_kir_ival_t bb = tj_kir_runtime(tj_kir_add_param(k, "B"));
      tj_kir_ival_t n = tj_kir_runtime(tj_kir_add_param(k, "N"));
      tj_kir_ival_t dims[2] = {bb, n};
      tj_kir_set_space(k, 2, dims);
      tj_kir_ival_t sx[2] = {n, c1}, sb[2] = {c0, c1};
      uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, sx);
      uint32_t b = tj_kir_add_buffer(k, "b", TJ_DTYPE_F32, TJ_KIR_INPUT, sb);
      uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sx);
      uint32_t v =
          tj_kir_binary(k, TJ_OP_ADD, tj_kir_load(k, x), tj_kir_load(k, b));
      tj_kir_store(k, y, s_gelu_erf(k, v));
      break;
    }
    case SAMPLE_BF16_MAP: {  // scalars: B, N
      tj_kir_ival_t bb = tj_kir_runtime(tj_kir_add_param(k, "B"));
      tj_kir_ival_t n = tj_kir_runtime(tj_kir_add_param(k, "N"));
      tj_kir_ival_t dims[2] = {bb, n};
      tj_kir_set_space(k, 2, dims);
      tj_kir_ival_t s[2] = {n, c1};
      uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_BF16, TJ_KIR_INPUT, s);
      uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_BF16, TJ_KIR_OUTPUT, s);
      uint32_t v = tj_kir_load(k, x);
      uint32_t e = tj_kir_unary(k, TJ_OP_EXP, tj_kir_unary(k, TJ_OP_NEG, v));
      tj_kir_store(
          k, y,
          tj_kir_binary(k, TJ_OP_ADD, tj_kir_binary(k, TJ_OP_MUL, v, v), e));
      break;
    }
    case SAMPLE_TRANSPOSED: {  // scalars: B, N; space [N, B]
      tj_kir_ival_t bb = tj_kir_runtime(tj_kir_add_param(k, "B"));
      tj_kir_ival_t n = tj_kir_runtime(tj_kir_add_param(k, "N"));
      tj_kir_ival_t dims[2] = {n, bb};
      tj_kir_set_space(k, 2, dims);
      tj_kir_ival_t sx[2] = {c1, n}, sy[2] = {bb, c1};
      uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, sx);
      uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sy);
      uint32_t v = tj_kir_load(k, x);
      uint32_t pos = tj_kir_binary(k, TJ_OP_GT, v, s_const(k, 0.0));
      tj_kir_store(
          k, y,
          tj_kir_where(k, pos, v,
                       tj_kir_binary(k, TJ_OP_MUL, v, s_const(k, 0.1))));
      break;
    }
    case SAMPLE_SOFTMAX: {  // scalars: R, L
      tj_kir_ival_t r = tj_kir_runtime(tj_kir_add_param(k, "R"));
      tj_kir_ival_t l = tj_kir_runtime(tj_kir_add_param(k, "L"));
      tj_kir_ival_t dims[2] = {r, l};
      tj_kir_set_space(k, 2, dims);
      tj_kir_ival_t s[2] = {l, c1};
      uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, s);
      uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, s);
      uint32_t p0 =
          tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_MAX);
      tj_kir_yield(k, tj_kir_load(k, x));
      uint32_t p1 =
          tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_SUM);
      tj_kir_yield(k,
                   tj_kir_unary(k, TJ_OP_EXP,
                                tj_kir_binary(k, TJ_OP_SUB, tj_kir_load(k, x),
                                              tj_kir_row(k, p0))));
      tj_kir_begin_phase(k, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM);
      uint32_t e = tj_kir_unary(
          k, TJ_OP_EXP,
          tj_kir_binary(k, TJ_OP_SUB, tj_kir_load(k, x), tj_kir_row(k, p0)));
      tj_kir_store(k, y, tj_kir_binary(k, TJ_OP_DIV, e, tj_kir_row(k, p1)));
      break;
    }
    case SAMPLE_LAYERNORM_BF16: {  // scalars: R, L
      tj_kir_ival_t r = tj_kir_runtime(tj_kir_add_param(k, "R"));
      tj_kir_ival_t l = tj_kir_runtime(tj_kir_add_param(k, "L"));
      uint32_t lp = 1;
      tj_kir_ival_t dims[2] = {r, l};
      tj_kir_set_space(k, 2, dims);
      tj_kir_ival_t s[2] = {l, c1}, srow[2] = {c1, c0};
      uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_BF16, TJ_KIR_INPUT, s);
      uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_BF16, TJ_KIR_OUTPUT, s);
      uint32_t mo =
          tj_kir_add_buffer(k, "mean", TJ_DTYPE_F32, TJ_KIR_OUTPUT, srow);
      uint32_t ro =
          tj_kir_add_buffer(k, "rstd", TJ_DTYPE_F32, TJ_KIR_OUTPUT, srow);
      uint32_t p0 =
          tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_SUM);
      tj_kir_yield(k, tj_kir_cast(k, TJ_DTYPE_F32, tj_kir_load(k, x)));
      uint32_t p1 =
          tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_SUM);
      uint32_t mean =
          tj_kir_binary(k, TJ_OP_DIV, tj_kir_row(k, p0),
                        tj_kir_cast(k, TJ_DTYPE_F32, tj_kir_param(k, lp)));
      uint32_t d = tj_kir_binary(
          k, TJ_OP_SUB, tj_kir_cast(k, TJ_DTYPE_F32, tj_kir_load(k, x)), mean);
      tj_kir_yield(k, tj_kir_binary(k, TJ_OP_MUL, d, d));
      // rstd = rsqrt(var + 1e-5); shared by the MAP and ROW phases.
      tj_kir_begin_phase(k, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM);
      {
        uint32_t lf = tj_kir_cast(k, TJ_DTYPE_F32, tj_kir_param(k, lp));
        uint32_t m = tj_kir_binary(k, TJ_OP_DIV, tj_kir_row(k, p0), lf);
        uint32_t var = tj_kir_binary(k, TJ_OP_DIV, tj_kir_row(k, p1), lf);
        uint32_t rs = tj_kir_unary(
            k, TJ_OP_RSQRT, tj_kir_binary(k, TJ_OP_ADD, var, s_const(k, 1e-5)));
        uint32_t xv = tj_kir_cast(k, TJ_DTYPE_F32, tj_kir_load(k, x));
        uint32_t nrm =
            tj_kir_binary(k, TJ_OP_MUL, tj_kir_binary(k, TJ_OP_SUB, xv, m), rs);
        tj_kir_store(k, y, tj_kir_cast(k, TJ_DTYPE_BF16, nrm));
      }
      tj_kir_begin_phase(k, TJ_KIR_PHASE_ROW, TJ_KIR_REDUCE_SUM);
      {
        uint32_t lf = tj_kir_cast(k, TJ_DTYPE_F32, tj_kir_param(k, lp));
        uint32_t m = tj_kir_binary(k, TJ_OP_DIV, tj_kir_row(k, p0), lf);
        uint32_t var = tj_kir_binary(k, TJ_OP_DIV, tj_kir_row(k, p1), lf);
        uint32_t rs = tj_kir_unary(
            k, TJ_OP_RSQRT, tj_kir_binary(k, TJ_OP_ADD, var, s_const(k, 1e-5)));
        tj_kir_store(k, mo, m);
        tj_kir_store(k, ro, rs);
      }
      break;
    }
    case SAMPLE_ARGMAX: {  // scalars: R, L
      tj_kir_ival_t r = tj_kir_runtime(tj_kir_add_param(k, "R"));
      tj_kir_ival_t l = tj_kir_runtime(tj_kir_add_param(k, "L"));
      tj_kir_ival_t dims[2] = {r, l};
      tj_kir_set_space(k, 2, dims);
      tj_kir_ival_t s[2] = {l, c1}, srow[2] = {c1, c0};
      uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, s);
      uint32_t o =
          tj_kir_add_buffer(k, "idx", TJ_DTYPE_I64, TJ_KIR_OUTPUT, srow);
      uint32_t p0 =
          tj_kir_begin_phase(k, TJ_KIR_PHASE_REDUCE, TJ_KIR_REDUCE_ARGMAX);
      tj_kir_yield(k, tj_kir_load(k, x));
      tj_kir_begin_phase(k, TJ_KIR_PHASE_ROW, TJ_KIR_REDUCE_SUM);
      tj_kir_store(k, o, tj_kir_row(k, p0));
      break;
    }
    case SAMPLE_GEMM_F32:
    case SAMPLE_GEMM_BF16: {  // scalars: M, N, K
      tj_dtype_t dt = which == SAMPLE_GEMM_F32 ? TJ_DTYPE_F32 : TJ_DTYPE_BF16;
      tj_kir_ival_t m = tj_kir_runtime(tj_kir_add_param(k, "M"));
      tj_kir_ival_t n = tj_kir_runtime(tj_kir_add_param(k, "N"));
      tj_kir_ival_t kk = tj_kir_runtime(tj_kir_add_param(k, "K"));
      tj_kir_ival_t dims[2] = {m, n};
      tj_kir_set_space(k, 2, dims);
      tj_kir_gemm_schedule_t sched;
      memset(&sched, 0, sizeof(sched));
      tj_kir_set_gemm(k, kk, &sched);
      tj_kir_ival_t sa[2] = {kk, c1}, sw[2] = {n, c1}, sb[2] = {c0, c1},
                    sy[2] = {n, c1};
      tj_kir_add_buffer(k, "x", dt, TJ_KIR_GEMM_A, sa);
      tj_kir_add_buffer(k, "w", dt, TJ_KIR_GEMM_B, sw);
      uint32_t b = tj_kir_add_buffer(k, "b", dt, TJ_KIR_INPUT, sb);
      uint32_t y = tj_kir_add_buffer(k, "y", dt, TJ_KIR_OUTPUT, sy);
      uint32_t bias = tj_kir_load(k, b);
      if (dt != TJ_DTYPE_F32) bias = tj_kir_cast(k, TJ_DTYPE_F32, bias);
      uint32_t v = tj_kir_binary(k, TJ_OP_ADD, tj_kir_acc(k), bias);
      if (dt == TJ_DTYPE_F32) {
        tj_kir_store(k, y, tj_kir_unary(k, TJ_OP_RELU, v));
      } else {
        tj_kir_store(k, y, tj_kir_cast(k, dt, s_gelu_tanh(k, v)));
        finalize = false;
      }
      break;
    }
    case SAMPLE_GEMM_F16_BATCHED: {  // scalars: M, N, K; batch 2
      tj_kir_ival_t m = tj_kir_runtime(tj_kir_add_param(k, "M"));
      tj_kir_ival_t n = tj_kir_runtime(tj_kir_add_param(k, "N"));
      tj_kir_ival_t kk = tj_kir_runtime(tj_kir_add_param(k, "K"));
      uint32_t pmk = tj_kir_add_param(k, "MK");
      uint32_t pmn = tj_kir_add_param(k, "MN");
      tj_kir_ival_t dims[3] = {tj_kir_constant(2), m, n};
      tj_kir_set_space(k, 3, dims);
      tj_kir_gemm_schedule_t sched;
      memset(&sched, 0, sizeof(sched));
      tj_kir_set_gemm(k, kk, &sched);
      tj_kir_ival_t sa[3] = {tj_kir_runtime(pmk), kk, c1};
      tj_kir_ival_t sw[3] = {c0, n, c1};
      tj_kir_ival_t sr[3] = {tj_kir_runtime(pmn), n, c1};
      tj_kir_add_buffer(k, "x", TJ_DTYPE_F16, TJ_KIR_GEMM_A, sa);
      tj_kir_add_buffer(k, "w", TJ_DTYPE_F16, TJ_KIR_GEMM_B, sw);
      uint32_t res = tj_kir_add_buffer(k, "r", TJ_DTYPE_F32, TJ_KIR_INPUT, sr);
      uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sr);
      tj_kir_store(
          k, y,
          tj_kir_binary(k, TJ_OP_ADD, tj_kir_acc(k), tj_kir_load(k, res)));
      finalize = false;
      break;
    }
    case SAMPLE_GEMM_BF16_BMM: {  // scalars: B, M, N, K, MK, NK, MN
      tj_kir_ival_t bt = tj_kir_runtime(tj_kir_add_param(k, "B"));
      tj_kir_ival_t m = tj_kir_runtime(tj_kir_add_param(k, "M"));
      tj_kir_ival_t n = tj_kir_runtime(tj_kir_add_param(k, "N"));
      tj_kir_ival_t kk = tj_kir_runtime(tj_kir_add_param(k, "K"));
      tj_kir_ival_t mk = tj_kir_runtime(tj_kir_add_param(k, "MK"));
      tj_kir_ival_t nk = tj_kir_runtime(tj_kir_add_param(k, "NK"));
      tj_kir_ival_t mn = tj_kir_runtime(tj_kir_add_param(k, "MN"));
      tj_kir_ival_t dims[3] = {bt, m, n};
      tj_kir_set_space(k, 3, dims);
      tj_kir_gemm_schedule_t sched;
      memset(&sched, 0, sizeof(sched));
      tj_kir_set_gemm(k, kk, &sched);
      // B's strides along (batch, k, n): k contiguous, rows of n K apart.
      tj_kir_ival_t sq[3] = {mk, kk, c1}, sk[3] = {nk, c1, kk};
      tj_kir_ival_t sy[3] = {mn, n, c1};
      tj_kir_add_buffer(k, "q", TJ_DTYPE_BF16, TJ_KIR_GEMM_A, sq);
      tj_kir_add_buffer(k, "k", TJ_DTYPE_BF16, TJ_KIR_GEMM_B, sk);
      uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_BF16, TJ_KIR_OUTPUT, sy);
      tj_kir_store(k, y,
                   tj_kir_cast(k, TJ_DTYPE_BF16,
                               tj_kir_binary(k, TJ_OP_MUL, tj_kir_acc(k),
                                             s_const(k, 0.125))));
      finalize = false;
      break;
    }
    default:
      break;
  }
  tj_status_t status = k->error ? tj_status_clone(k->error) : NULL;
  if (!status && finalize) status = tj_kir_finalize(k);
  if (status) {
    tj_kir_destroy(k);
    return status;
  }
  *out = k;
  return NULL;
}

#endif  // TJ_TESTS_CUDA_NVPTX_SAMPLES_H_
