// The weight-only quantized GEMM on CUDA (issue 17, qfold,
// jit/emit_nvptx_wqgemm.c): the graphs shared by
// tests/unit/wqgemm_ptx_test.c (their PTX through ptxas, no GPU) and
// tests/cuda/cuda_wqgemm_test.c (their numbers on the GPU against
// tj_reference_run). Each case is gelu(x @ dequantize(Wq, scale, zp) + b)
// with x [M, K] f32 and M symbolic: int4 per group of 32, 64 or 128 along
// K (signed or unsigned, with or without zero points) and int8 per output
// channel, odd K and N, the weight given [K, N] or [N, K] then transposed
// (MatMulNBits; lib/passes/quant_prepack.c relays it); x, the scale, the
// bias and y f32, or all f16 or bf16 (then the dequantize gives f16/bf16,
// as tj_graph_quantize_weights writes bf16 weights). An int4 group of 16
// is not the GPU kernel's (its int4 groups are multiples of 32 rows): it
// decomposes.

#ifndef TJ_TESTS_UNIT_WQGEMM_CUDA_CASES_H_
#define TJ_TESTS_UNIT_WQGEMM_CUDA_CASES_H_

#include <stdlib.h>
#include <string.h>

#include "lib/dtype.h"
#include "tests/unit/test.h"

typedef struct wq_case_t {
  const char* name;
  int64_t K, N;
  int bits;         // 8 or 4
  bool is_signed;   // i8 / signed int4, else u8 / unsigned int4
  bool zp;          // zero points
  int64_t group;    // 0: per output channel
  bool transposed;  // weights given [N, K] and transposed (MatMulNBits)
  bool decomposed;  // not the weight-only kernel: the dequantize decomposes
  tj_dtype_t adt;   // x, the scale, the bias and y: f32, f16 or bf16
} wq_case_t;

static const wq_case_t kWqCases[] = {
    {"int4_g32_zp_odd", 250, 77, 4, true, true, 32, false, false, TJ_DTYPE_F32},
    {"int4_g64", 517, 130, 4, true, false, 64, false, false, TJ_DTYPE_F32},
    {"uint4_g128_zp", 384, 255, 4, false, true, 128, false, false,
     TJ_DTYPE_F32},
    {"int4_g128_nbits", 300, 96, 4, true, true, 128, true, false, TJ_DTYPE_F32},
    {"int8_channel", 333, 101, 8, true, false, 0, false, false, TJ_DTYPE_F32},
    {"uint8_channel_zp", 200, 64, 8, false, true, 0, false, false,
     TJ_DTYPE_F32},
    {"int8_channel_nk", 129, 40, 8, true, true, 0, true, false, TJ_DTYPE_F32},
    {"int4_g16_decomposed", 96, 33, 4, true, false, 16, false, true,
     TJ_DTYPE_F32},
    {"int4_g128_bf16", 300, 90, 4, true, true, 128, false, false,
     TJ_DTYPE_BF16},
    {"int8_channel_f16", 200, 75, 8, true, false, 0, false, false,
     TJ_DTYPE_F16},
    {"uint4_g32_f16_zp", 161, 64, 4, false, true, 32, false, false,
     TJ_DTYPE_F16},
    // Aligned rows and whole 64-column tiles: the tensor-core kernel's
    // vector loads, K not a multiple of its 128- (int4) or 64-row (int8)
    // chunks (a last chunk on the clamped path), several chunks a warp.
    {"int4_g128_fast", 1000, 192, 4, true, false, 128, false, false,
     TJ_DTYPE_F32},
    {"int4_g32_bf16_fast", 2056, 128, 4, true, true, 32, false, false,
     TJ_DTYPE_BF16},
    {"uint4_g64_f16_fast", 264, 256, 4, false, false, 64, false, false,
     TJ_DTYPE_F16},
    {"int8_channel_fast", 1000, 128, 8, true, false, 0, false, false,
     TJ_DTYPE_F32},
    {"uint8_channel_bf16_fast", 512, 64, 8, false, true, 0, false, false,
     TJ_DTYPE_BF16},
    // int8 per group of 16 rows (a fold every step), ragged N.
    {"uint8_g16_zp", 96, 70, 8, false, true, 16, false, false, TJ_DTYPE_F32},
    // K long enough to split across 2, 3 or 4 blocks a tile at M <= 16
    // (16 chunks a block or more; K not a multiple of the chunks).
    {"int4_g128_split", 4100, 130, 4, true, false, 128, false, false,
     TJ_DTYPE_F32},
    {"uint8_channel_split_bf16", 4200, 64, 8, false, true, 0, false, false,
     TJ_DTYPE_BF16},
    {"uint4_g32_f16_split", 4100, 96, 4, false, true, 32, false, false,
     TJ_DTYPE_F16},
    {"int8_channel_split3", 4000, 200, 8, true, false, 0, false, false,
     TJ_DTYPE_F32},
};

// The case's float dtype.
static inline tj_dtype_t wq_adt(const wq_case_t* c) { return c->adt; }

// |n| floats as |dt| (f32, f16, bf16) in a new buffer, rounded to nearest
// even.
static inline void* wq_floats(tj_dtype_t dt, const float* v, int64_t n) {
  size_t es = dt == TJ_DTYPE_F32 ? 4 : 2;
  uint8_t* out = malloc(es * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; ++i) tj_store_f64(dt, out, i, (double)v[i]);
  return out;
}

enum { kWqNumCases = sizeof(kWqCases) / sizeof(kWqCases[0]) };

// The case's constants (weights, scales, zero points, bias).
typedef struct wq_data_t {
  uint8_t* q;
  float* s;
  uint8_t* z;
  float* bias;
  int64_t qdims[2], sdims[2];
  int32_t srank;
} wq_data_t;

static uint64_t g_wq_seed = 0x9E3779B97F4A7C15ull;
static inline uint32_t wq_rnd(void) {
  g_wq_seed = g_wq_seed * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(g_wq_seed >> 33);
}

// Random weights for |c|: q in the format's range, scales in [0.01, 0.05],
// zero points within the range.
static inline void wq_make(const wq_case_t* c, wq_data_t* d) {
  const int64_t K = c->K, N = c->N;
  const int64_t groups = c->group ? (K + c->group - 1) / c->group : 1;
  int64_t rows = c->transposed ? N : K, cols = c->transposed ? K : N;
  int64_t qcols = c->bits == 4 ? (cols + 1) / 2 : cols;
  d->qdims[0] = rows;
  d->qdims[1] = qcols;
  d->q = calloc((size_t)(rows * qcols), 1);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      uint8_t v = (uint8_t)wq_rnd();
      if (c->bits == 4) {
        v &= 15;
        d->q[r * qcols + j / 2] |= (uint8_t)(j & 1 ? v << 4 : v);
      } else {
        d->q[r * qcols + j] = v;
      }
    }
  }
  if (!c->group) {
    d->srank = 1;
    d->sdims[0] = N;
  } else {
    d->srank = 2;
    d->sdims[0] = c->transposed ? N : groups;
    d->sdims[1] = c->transposed ? groups : N;
  }
  int64_t ns = N * groups;
  d->s = malloc(sizeof(float) * (size_t)ns);
  d->z = malloc((size_t)ns);
  for (int64_t i = 0; i < ns; ++i) {
    d->s[i] = 0.01f + 0.04f * (float)(wq_rnd() % 1000) / 1000.0f;
    int64_t lo =
        c->bits == 4 ? (c->is_signed ? -8 : 0) : (c->is_signed ? -128 : 0);
    int64_t span = c->bits == 4 ? 16 : 256;
    d->z[i] = (uint8_t)(lo + (int64_t)(wq_rnd() % (uint32_t)span));
  }
  d->bias = malloc(sizeof(float) * (size_t)N);
  for (int64_t n = 0; n < N; ++n)
    d->bias[n] = (float)(wq_rnd() % 200) / 100.0f - 1.0f;
}

static inline void wq_free(wq_data_t* d) {
  free(d->q);
  free(d->s);
  free(d->z);
  free(d->bias);
}

// gelu(x @ dequantize(Wq) + b), x [M, K] with M |m| (0: symbolic).
static inline tj_graph_t* wq_build_m(tj_context_t* ctx, const wq_case_t* c,
                                     const wq_data_t* d, int64_t m) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(ctx, c->name, &g) != NULL) return NULL;
  int64_t M = m ? m : tj_graph_symbol(g, "M");
  tj_dtype_t ft = wq_adt(c);
  size_t fs = ft == TJ_DTYPE_F32 ? 4 : 2;
  tj_value_t x = tj_graph_input(g, ft, 2, (int64_t[]){M, c->K}, "x");
  tj_dtype_t qd = c->bits == 8 && c->is_signed ? TJ_DTYPE_I8 : TJ_DTYPE_U8;
  tj_dtype_t zd = c->is_signed ? TJ_DTYPE_I8 : TJ_DTYPE_U8;
  tj_value_t q = tj_graph_constant(g, qd, 2, d->qdims, d->q,
                                   (size_t)(d->qdims[0] * d->qdims[1]));
  int64_t ns = d->srank == 1 ? d->sdims[0] : d->sdims[0] * d->sdims[1];
  void* sv = wq_floats(ft, d->s, ns);
  tj_value_t s =
      tj_graph_constant(g, ft, d->srank, d->sdims, sv, fs * (size_t)ns);
  free(sv);
  tj_value_t z =
      c->zp ? tj_graph_constant(g, zd, d->srank, d->sdims, d->z, (size_t)ns)
            : tj_value_none();
  tj_quant_attrs_t a = {.dtype = qd};
  if (c->bits == 4) {
    a.int4 = c->is_signed ? TJ_INT4_SIGNED : TJ_INT4_UNSIGNED;
    a.odd = ((c->transposed ? c->K : c->N) & 1) != 0;
  }
  if (c->group) {
    a.block_size = c->group;
    a.axis = c->transposed ? 1 : 0;
  } else {
    a.axis = c->transposed ? 0 : 1;
  }
  tj_value_t w = tj_graph_dequantize(g, q, s, z, &a);
  if (c->transposed) w = tj_graph_transpose(g, w, (int32_t[]){1, 0});
  void* bv = wq_floats(ft, d->bias, c->N);
  tj_value_t b = tj_graph_constant(g, ft, 1, &c->N, bv, fs * (size_t)c->N);
  free(bv);
  tj_value_t y =
      tj_graph_gelu(g, tj_graph_add(g, tj_graph_matmul(g, x, w), b), false);
  tj_graph_output(g, y, "y");
  if (tj_graph_finalize(g) != NULL) {
    tj_graph_destroy(g);
    return NULL;
  }
  return g;
}

// The same with M symbolic.
static inline tj_graph_t* wq_build(tj_context_t* ctx, const wq_case_t* c,
                                   const wq_data_t* d) {
  return wq_build_m(ctx, c, d, 0);
}

#endif  // TJ_TESTS_UNIT_WQGEMM_CUDA_CASES_H_
