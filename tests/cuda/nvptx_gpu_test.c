// Kernels lowered from the kernel IR, run on the GPU and compared with
// scalar host math in double. One compiled kernel per sample serves every
// size below (sizes are runtime params), including sizes that take the
// vector and the scalar paths and partial GEMM tiles. Skips (exit 77)
// without a driver or GPU.

#include <math.h>

#include "backends/cuda/cuda_kir.h"
#include "lib/dtype.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/nvptx_samples.h"

static tj_cuda_device_t* g_device;
static tj_nvptx_target_t* g_target;
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static float frand(float lo, float hi) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return lo + (hi - lo) * (float)((g_rng >> 40) * (1.0 / 16777216.0));
}

static uint64_t urand(uint64_t n) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng % n;
}

//===--- device buffers ---===//

static tj_cu_deviceptr_t upload(const void* host, size_t bytes) {
  tj_cu_deviceptr_t p = 0;
  CHECK_OK(tj_cuda_device_alloc(g_device, bytes, &p));
  CHECK_OK(tj_cuda_copy_to_device(g_device, p, host, bytes));
  return p;
}

static tj_cu_deviceptr_t device_zeros(size_t bytes) {
  tj_cu_deviceptr_t p = 0;
  CHECK_OK(tj_cuda_device_alloc(g_device, bytes, &p));
  CHECK_OK(tj_cuda_fill_bytes(g_device, p, 0xff, bytes));  // poison
  return p;
}

static void download(void* host, tj_cu_deviceptr_t p, size_t bytes) {
  CHECK_OK(tj_cuda_copy_to_host(g_device, host, p, bytes));
  CHECK_OK(tj_cuda_device_synchronize(g_device));
}

static void release(tj_cu_deviceptr_t p) {
  CHECK_OK(tj_cuda_device_free(g_device, p));
}

//===--- kernels ---===//

typedef struct compiled_t {
  tj_kir_t* k;
  tj_cuda_kir_kernel_t* ck;
} compiled_t;

static compiled_t compile_with(sample_t s, const tj_nvptx_options_t* options) {
  compiled_t c = {NULL, NULL};
  CHECK_OK(sample_build(tj_allocator_system(), s, &c.k));
  if (!c.k) return c;
  CHECK_OK(tj_cuda_kir_compile(g_device, g_target, c.k, options, &c.ck, NULL));
  if (c.ck)
    printf("# %s: %d regs, %d local bytes, compile %.1f ms, load %.1f ms\n",
           kSampleNames[s], c.ck->function.num_regs, c.ck->function.local_bytes,
           c.ck->compile_ms, c.ck->load_ms);
  return c;
}

static compiled_t compile(sample_t s) { return compile_with(s, NULL); }

static void release_compiled(compiled_t* c) {
  tj_cuda_kir_destroy(c->ck);
  tj_kir_destroy(c->k);
}

static bool launch(const compiled_t* c, const tj_cu_deviceptr_t* buffers,
                   const int64_t* scalars) {
  if (!c->ck) return false;
  tj_status_t s = tj_cuda_kir_launch(c->ck, buffers, scalars);
  CHECK_OK(tj_status_clone(s));
  bool ok = s == NULL;
  tj_status_free(s);
  return ok;
}

// |got| within atol + rtol |ref| of |ref|, NaN where |ref| is NaN.
static int count_bad(const char* what, const float* got, const double* ref,
                     int64_t n, double rtol, double atol) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool ok = isnan(ref[i])
                  ? isnan(got[i])
                  : fabs((double)got[i] - ref[i]) <= atol + rtol * fabs(ref[i]);
    if (!ok && bad++ < 5)
      fprintf(stderr, "  %s[%lld]: got %.9g, want %.9g\n", what, (long long)i,
              (double)got[i], ref[i]);
  }
  return bad;
}

static double gelu_erf(double x) {
  return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}
static double gelu_tanh(double x) {
  return 0.5 * x *
         (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
static float bf16_round(double v) { return tj_bf16_to_f32(tj_f64_to_bf16(v)); }

//===--- pointwise ---===//

TEST(gelu_bias) {
  compiled_t c = compile(SAMPLE_GELU_BIAS);
  int64_t sizes[][2] = {{37, 1000}, {5, 1001}, {3, 4096}, {1, 3}, {2000, 8}};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(sizes); ++t) {
    int64_t bsz = sizes[t][0], n = sizes[t][1], total = bsz * n;
    float* x = malloc((size_t)total * 4);
    float* b = malloc((size_t)n * 4);
    float* y = malloc((size_t)total * 4);
    double* ref = malloc((size_t)total * 8);
    for (int64_t i = 0; i < total; ++i) x[i] = frand(-4, 4);
    for (int64_t i = 0; i < n; ++i) b[i] = frand(-1, 1);
    for (int64_t i = 0; i < total; ++i)
      ref[i] = gelu_erf((double)(x[i] + b[i % n]));
    tj_cu_deviceptr_t d[3] = {upload(x, (size_t)total * 4),
                              upload(b, (size_t)n * 4),
                              device_zeros((size_t)total * 4)};
    int64_t scalars[2] = {bsz, n};
    if (launch(&c, d, scalars)) {
      download(y, d[2], (size_t)total * 4);
      CHECK_EQ_INT(0, count_bad("gelu_bias", y, ref, total, 2e-6, 1e-6));
    }
    for (int i = 0; i < 3; ++i) release(d[i]);
    free(x), free(b), free(y), free(ref);
  }
  release_compiled(&c);
}

TEST(bf16_map) {
  compiled_t c = compile(SAMPLE_BF16_MAP);
  int64_t sizes[][2] = {{7, 1024}, {3, 1023}, {1, 1}};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(sizes); ++t) {
    int64_t total = sizes[t][0] * sizes[t][1];
    uint16_t* x = malloc((size_t)total * 2);
    uint16_t* y = malloc((size_t)total * 2);
    float* got = malloc((size_t)total * 4);
    double* ref = malloc((size_t)total * 8);
    for (int64_t i = 0; i < total; ++i) {
      x[i] = tj_f32_to_bf16(frand(-3, 3));
      double v = tj_bf16_to_f32(x[i]);
      ref[i] = bf16_round(v * v + exp(-v));
    }
    tj_cu_deviceptr_t d[2] = {upload(x, (size_t)total * 2),
                              device_zeros((size_t)total * 2)};
    if (launch(&c, d, sizes[t])) {
      download(y, d[1], (size_t)total * 2);
      for (int64_t i = 0; i < total; ++i) got[i] = tj_bf16_to_f32(y[i]);
      // f32 math then one rounding vs double then one rounding: at most
      // one bf16 ulp apart.
      CHECK_EQ_INT(0, count_bad("bf16_map", got, ref, total, 1.0 / 128, 0));
    }
    release(d[0]), release(d[1]);
    free(x), free(y), free(got), free(ref);
  }
  release_compiled(&c);
}

TEST(transposed) {
  compiled_t c = compile(SAMPLE_TRANSPOSED);
  int64_t bsz = 33, n = 65, total = bsz * n;
  float* x = malloc((size_t)total * 4);
  float* y = malloc((size_t)total * 4);
  double* ref = malloc((size_t)total * 8);
  for (int64_t i = 0; i < total; ++i) x[i] = frand(-1, 1);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < bsz; ++j) {
      float v = x[j * n + i];
      ref[i * bsz + j] = v > 0 ? v : (double)(v * 0.1f);
    }
  tj_cu_deviceptr_t d[2] = {upload(x, (size_t)total * 4),
                            device_zeros((size_t)total * 4)};
  int64_t scalars[2] = {bsz, n};
  if (launch(&c, d, scalars)) {
    download(y, d[1], (size_t)total * 4);
    CHECK_EQ_INT(0, count_bad("transposed", y, ref, total, 0, 0));
  }
  release(d[0]), release(d[1]);
  free(x), free(y), free(ref);
  release_compiled(&c);
}

//===--- row reductions ---===//

TEST(softmax) {
  compiled_t c = compile(SAMPLE_SOFTMAX);
  int64_t sizes[][2] = {{100, 1000}, {7, 4097}, {1000, 10}, {3, 1}};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(sizes); ++t) {
    int64_t r = sizes[t][0], l = sizes[t][1], total = r * l;
    float* x = malloc((size_t)total * 4);
    float* y = malloc((size_t)total * 4);
    double* ref = malloc((size_t)total * 8);
    for (int64_t i = 0; i < total; ++i) x[i] = frand(-10, 10);
    for (int64_t i = 0; i < r; ++i) {
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < l; ++j) mx = fmax(mx, x[i * l + j]);
      for (int64_t j = 0; j < l; ++j) sum += exp(x[i * l + j] - mx);
      for (int64_t j = 0; j < l; ++j)
        ref[i * l + j] = exp(x[i * l + j] - mx) / sum;
    }
    tj_cu_deviceptr_t d[2] = {upload(x, (size_t)total * 4),
                              device_zeros((size_t)total * 4)};
    if (launch(&c, d, sizes[t])) {
      download(y, d[1], (size_t)total * 4);
      CHECK_EQ_INT(0, count_bad("softmax", y, ref, total, 1e-5, 1e-9));
    }
    release(d[0]), release(d[1]);
    free(x), free(y), free(ref);
  }
  release_compiled(&c);
}

TEST(layernorm_bf16) {
  compiled_t c = compile(SAMPLE_LAYERNORM_BF16);
  int64_t sizes[][2] = {{64, 768}, {5, 100}, {300, 4096}};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(sizes); ++t) {
    int64_t r = sizes[t][0], l = sizes[t][1], total = r * l;
    uint16_t* x = malloc((size_t)total * 2);
    uint16_t* y = malloc((size_t)total * 2);
    float* got = malloc((size_t)total * 4);
    double* ref = malloc((size_t)total * 8);
    float* mean = malloc((size_t)r * 4);
    float* rstd = malloc((size_t)r * 4);
    double* ref_mean = malloc((size_t)r * 8);
    double* ref_rstd = malloc((size_t)r * 8);
    for (int64_t i = 0; i < total; ++i) x[i] = tj_f32_to_bf16(frand(-2, 3));
    for (int64_t i = 0; i < r; ++i) {
      double s = 0, q = 0;
      for (int64_t j = 0; j < l; ++j) s += tj_bf16_to_f32(x[i * l + j]);
      double m = s / (double)l;
      for (int64_t j = 0; j < l; ++j) {
        double dd = tj_bf16_to_f32(x[i * l + j]) - m;
        q += dd * dd;
      }
      double rs = 1.0 / sqrt(q / (double)l + 1e-5);
      ref_mean[i] = m;
      ref_rstd[i] = rs;
      for (int64_t j = 0; j < l; ++j)
        ref[i * l + j] = bf16_round((tj_bf16_to_f32(x[i * l + j]) - m) * rs);
    }
    tj_cu_deviceptr_t d[4] = {
        upload(x, (size_t)total * 2), device_zeros((size_t)total * 2),
        device_zeros((size_t)r * 4), device_zeros((size_t)r * 4)};
    if (launch(&c, d, sizes[t])) {
      download(y, d[1], (size_t)total * 2);
      download(mean, d[2], (size_t)r * 4);
      download(rstd, d[3], (size_t)r * 4);
      for (int64_t i = 0; i < total; ++i) got[i] = tj_bf16_to_f32(y[i]);
      CHECK_EQ_INT(0, count_bad("layernorm", got, ref, total, 1.6e-2, 1e-2));
      CHECK_EQ_INT(0, count_bad("mean", mean, ref_mean, r, 1e-5, 1e-6));
      CHECK_EQ_INT(0, count_bad("rstd", rstd, ref_rstd, r, 1e-5, 0));
    }
    for (int i = 0; i < 4; ++i) release(d[i]);
    free(x), free(y), free(got), free(ref), free(mean), free(rstd);
    free(ref_mean), free(ref_rstd);
  }
  release_compiled(&c);
}

TEST(argmax) {
  compiled_t c = compile(SAMPLE_ARGMAX);
  int64_t sizes[][2] = {{50, 333}, {4, 5000}, {3, 0}};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(sizes); ++t) {
    int64_t r = sizes[t][0], l = sizes[t][1], total = r * l;
    float* x = malloc((size_t)(total ? total : 1) * 4);
    int64_t* idx = malloc((size_t)r * 8);
    int64_t* want = malloc((size_t)r * 8);
    for (int64_t i = 0; i < total; ++i)
      x[i] = (float)(int)frand(0, 20);  // ties
    if (l > 10) {
      x[1 * l + 7] = NAN;  // the first NaN wins
      x[1 * l + 9] = NAN;
      for (int64_t j = 0; j < l; ++j) x[2 * l + j] = -INFINITY;
    }
    for (int64_t i = 0; i < r; ++i) {
      int64_t best = 0;
      for (int64_t j = 1; j < l; ++j) {
        float v = x[i * l + j], bv = x[i * l + best];
        if (isnan(bv)) break;
        if (isnan(v) || v > bv) best = j;
      }
      want[i] = best;
    }
    tj_cu_deviceptr_t d[2] = {upload(x, (size_t)(total ? total : 1) * 4),
                              device_zeros((size_t)r * 8)};
    if (launch(&c, d, sizes[t])) {
      download(idx, d[1], (size_t)r * 8);
      int bad = 0;
      for (int64_t i = 0; i < r; ++i) {
        if (idx[i] != want[i] && bad++ < 5)
          fprintf(stderr, "  argmax row %lld: got %lld, want %lld\n",
                  (long long)i, (long long)idx[i], (long long)want[i]);
      }
      CHECK_EQ_INT(0, bad);
    }
    release(d[0]), release(d[1]);
    free(x), free(idx), free(want);
  }
  release_compiled(&c);
}

//===--- GEMM ---===//

// Checks |n_check| outputs (all when 0) of C[m, n] against |ref_at|.
typedef double (*ref_fn)(void* ctx, int64_t i, int64_t j);

static int check_gemm_out(const char* what, const float* got, int64_t m,
                          int64_t n, int64_t n_check, ref_fn ref, void* ctx,
                          double rtol, double atol) {
  int bad = 0;
  int64_t count = n_check ? n_check : m * n;
  for (int64_t t = 0; t < count; ++t) {
    int64_t i = n_check ? (int64_t)urand((uint64_t)m) : t / n;
    int64_t j = n_check ? (int64_t)urand((uint64_t)n) : t % n;
    double want = ref(ctx, i, j);
    double g = got[i * n + j];
    if (!(fabs(g - want) <= atol + rtol * fabs(want)) && bad++ < 5)
      fprintf(stderr, "  %s[%lld, %lld]: got %.7g, want %.7g\n", what,
              (long long)i, (long long)j, g, want);
  }
  return bad;
}

typedef struct gemm_case_t {
  int64_t m, n, k;
  const float *x, *w, *b, *r;  // as floats (bf16/f16 inputs widened)
  bool gelu, relu;
} gemm_case_t;

static double dot(const gemm_case_t* g, int64_t i, int64_t j) {
  double s = 0;
  for (int64_t q = 0; q < g->k; ++q)
    s += (double)g->x[i * g->k + q] * (double)g->w[q * g->n + j];
  return s;
}

static double ref_f32(void* ctx, int64_t i, int64_t j) {
  const gemm_case_t* g = ctx;
  double v = dot(g, i, j) + g->b[j];
  return v > 0 ? v : 0;
}

static double ref_bf16(void* ctx, int64_t i, int64_t j) {
  const gemm_case_t* g = ctx;
  return bf16_round(gelu_tanh(dot(g, i, j) + g->b[j]));
}

static void gemm_f32_with(const tj_nvptx_options_t* options) {
  compiled_t c = compile_with(SAMPLE_GEMM_F32, options);
  // Odd M, N and K (4-byte copies: the rows are not 16-byte aligned);
  // whole tiles; M, N and K partial with 16-byte aligned rows (16-byte
  // copies, a K tail of 4 or 12); one element; K = 0 (bias alone).
  int64_t sizes[][3] = {{1000, 300, 77},  {256, 256, 256}, {1000, 300, 76},
                        {520, 260, 1032}, {1, 1, 1},       {130, 5, 0}};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(sizes); ++t) {
    int64_t m = sizes[t][0], n = sizes[t][1], kk = sizes[t][2];
    float* x = malloc((size_t)(m * kk + 1) * 4);
    float* w = malloc((size_t)(kk * n + 1) * 4);
    float* b = malloc((size_t)n * 4);
    float* y = malloc((size_t)(m * n) * 4);
    for (int64_t i = 0; i < m * kk; ++i) x[i] = frand(-1, 1);
    for (int64_t i = 0; i < kk * n; ++i) w[i] = frand(-1, 1);
    for (int64_t i = 0; i < n; ++i) b[i] = frand(-1, 1);
    tj_cu_deviceptr_t d[4] = {upload(x, (size_t)(m * kk + 1) * 4),
                              upload(w, (size_t)(kk * n + 1) * 4),
                              upload(b, (size_t)n * 4),
                              device_zeros((size_t)(m * n) * 4)};
    if (launch(&c, d, sizes[t])) {
      download(y, d[3], (size_t)(m * n) * 4);
      gemm_case_t g = {m, n, kk, x, w, b, NULL, false, true};
      CHECK_EQ_INT(0, check_gemm_out("gemm_f32", y, m, n, 0, ref_f32, &g, 1e-5,
                                     1e-5 * (double)(kk + 1)));
    }
    for (int i = 0; i < 4; ++i) release(d[i]);
    free(x), free(w), free(b), free(y);
  }
  release_compiled(&c);
}

TEST(gemm_f32) {
  // The CUDA-core loop's 128x128 tile (default), and the 256x128 one
  // (issue 13, sgemm) at k-tiles of 8 and 16, with 4-byte copies alone
  // and with A transposed in shared memory.
  static const tj_nvptx_options_t kOptions[] = {
      {.gemm_tile_m = 256},
      {.gemm_tile_m = 256, .gemm_tile_k = 16, .gemm_stages = 3},
      {.gemm_tile_m = 256, .gemm_f32_scalar_copies = true},
      {.gemm_tile_m = 256, .gemm_f32_a_transposed = true},
      // The tuner's candidate 18.
      {.gemm_tile_m = 256,
       .gemm_tile_k = 16,
       .gemm_stages = 3,
       .gemm_f32_a_transposed = true}};
  gemm_f32_with(NULL);
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kOptions); ++i)
    gemm_f32_with(&kOptions[i]);
}

static void gemm_bf16_gelu_bias(const tj_nvptx_options_t* options) {
  compiled_t c = compile_with(SAMPLE_GEMM_BF16, options);
  // Partial tiles and a K tail; a bigger one; the capstone's shape
  // (checked on a sample of outputs).
  int64_t sizes[][3] = {{1000, 264, 72}, {512, 512, 1024}, {2048, 4096, 1024}};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(sizes); ++t) {
    int64_t m = sizes[t][0], n = sizes[t][1], kk = sizes[t][2];
    uint16_t* xb = malloc((size_t)(m * kk) * 2);
    uint16_t* wb = malloc((size_t)(kk * n) * 2);
    uint16_t* bb = malloc((size_t)n * 2);
    uint16_t* yb = malloc((size_t)(m * n) * 2);
    float* x = malloc((size_t)(m * kk) * 4);
    float* w = malloc((size_t)(kk * n) * 4);
    float* b = malloc((size_t)n * 4);
    float* y = malloc((size_t)(m * n) * 4);
    for (int64_t i = 0; i < m * kk; ++i) {
      xb[i] = tj_f32_to_bf16(frand(-1, 1));
      x[i] = tj_bf16_to_f32(xb[i]);
    }
    for (int64_t i = 0; i < kk * n; ++i) {
      wb[i] = tj_f32_to_bf16(frand(-1, 1) * 0.1f);
      w[i] = tj_bf16_to_f32(wb[i]);
    }
    for (int64_t i = 0; i < n; ++i) {
      bb[i] = tj_f32_to_bf16(frand(-1, 1));
      b[i] = tj_bf16_to_f32(bb[i]);
    }
    tj_cu_deviceptr_t d[4] = {
        upload(xb, (size_t)(m * kk) * 2), upload(wb, (size_t)(kk * n) * 2),
        upload(bb, (size_t)n * 2), device_zeros((size_t)(m * n) * 2)};
    if (launch(&c, d, sizes[t])) {
      download(yb, d[3], (size_t)(m * n) * 2);
      for (int64_t i = 0; i < m * n; ++i) y[i] = tj_bf16_to_f32(yb[i]);
      gemm_case_t g = {m, n, kk, x, w, b, NULL, true, false};
      int64_t sample = m * n > 300000 ? 20000 : 0;
      CHECK_EQ_INT(0, check_gemm_out("gemm_bf16", y, m, n, sample, ref_bf16, &g,
                                     1.6e-2, 1e-2));
    }
    for (int i = 0; i < 4; ++i) release(d[i]);
    free(xb), free(wb), free(bb), free(yb), free(x), free(w), free(b), free(y);
  }
  release_compiled(&c);
}

TEST(gemm_bf16_gelu_bias) {
  gemm_bf16_gelu_bias(NULL);
  // The other k-tile and ring depths.
  // (mma.sync explicitly: on sm_90a the default is the wgmma loop).
  tj_nvptx_options_t bk64 = {.gemm_tile_k = 64,
                             .gemm_stages = 3,
                             .gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC},
                     two = {.gemm_tile_k = 32,
                            .gemm_stages = 2,
                            .gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC};
  gemm_bf16_gelu_bias(&bk64);
  gemm_bf16_gelu_bias(&two);
}

typedef struct batched_t {
  gemm_case_t g[2];
} batched_t;

static double ref_batched(void* ctx, int64_t i, int64_t j) {
  // Rows 0..m-1 batch 0, m..2m-1 batch 1 (the output is [2, m, n]).
  const batched_t* bt = ctx;
  int64_t m = bt->g[0].m;
  const gemm_case_t* g = &bt->g[i >= m ? 1 : 0];
  int64_t ii = i % m;
  return dot(g, ii, j) + g->r[ii * g->n + j];
}

TEST(gemm_f16_batched_residual) {
  compiled_t c = compile(SAMPLE_GEMM_F16_BATCHED);
  int64_t m = 300, n = 136, kk = 200;
  uint16_t* xh = malloc((size_t)(2 * m * kk) * 2);
  uint16_t* wh = malloc((size_t)(kk * n) * 2);
  float* x = malloc((size_t)(2 * m * kk) * 4);
  float* w = malloc((size_t)(kk * n) * 4);
  float* r = malloc((size_t)(2 * m * n) * 4);
  float* y = malloc((size_t)(2 * m * n) * 4);
  for (int64_t i = 0; i < 2 * m * kk; ++i) {
    xh[i] = tj_f32_to_f16(frand(-1, 1));
    x[i] = tj_f16_to_f32(xh[i]);
  }
  for (int64_t i = 0; i < kk * n; ++i) {
    wh[i] = tj_f32_to_f16(frand(-1, 1));
    w[i] = tj_f16_to_f32(wh[i]);
  }
  for (int64_t i = 0; i < 2 * m * n; ++i) r[i] = frand(-5, 5);
  tj_cu_deviceptr_t d[4] = {upload(xh, (size_t)(2 * m * kk) * 2),
                            upload(wh, (size_t)(kk * n) * 2),
                            upload(r, (size_t)(2 * m * n) * 4),
                            device_zeros((size_t)(2 * m * n) * 4)};
  int64_t scalars[5] = {m, n, kk, m * kk, m * n};
  if (launch(&c, d, scalars)) {
    download(y, d[3], (size_t)(2 * m * n) * 4);
    batched_t bt = {{{m, n, kk, x, w, NULL, r, false, false},
                     {m, n, kk, x + m * kk, w, NULL, r + m * n, false, false}}};
    CHECK_EQ_INT(0, check_gemm_out("gemm_f16", y, 2 * m, n, 0, ref_batched, &bt,
                                   1e-5, 1e-4));
  }
  for (int i = 0; i < 4; ++i) release(d[i]);
  free(xh), free(wh), free(x), free(w), free(r), free(y);
  release_compiled(&c);
}

//===--- wgmma (sm_90a) ---===//

// One wgmma.mma_async m64n128k16 bf16 (A K-major, B MN-major through
// trans-b, both 128-byte swizzled) on a shared-memory image the host laid
// out, for each candidate (LBO, SBO) of B's descriptor: checks the swizzle,
// the descriptors and the accumulator fragment layout that
// jit/emit_nvptx_wgmma.c relies on, independently of it.
static char* wgmma_probe_ptx(void) {
  size_t cap = 16384, len = 0;
  char* t = malloc(cap);
#define P(...) len += (size_t)snprintf(t + len, cap - len, __VA_ARGS__)
  P(".version 8.0\n.target sm_90a\n.address_size 64\n"
    ".extern .shared .align 1024 .b8 probe_smem[];\n"
    ".visible .entry tj_wgmma_probe(.param .u64 p_img, .param .u64 p_out,\n"
    "    .param .u64 p_da, .param .u64 p_db)\n{\n"
    ".reg .b32 %%r<20>;\n.reg .b64 %%rd<20>;\n.reg .f32 %%f<64>;\n"
    ".reg .pred %%p<2>;\n"
    "ld.param.u64 %%rd1, [p_img];\nld.param.u64 %%rd2, [p_out];\n"
    "ld.param.u64 %%rd3, [p_da];\nld.param.u64 %%rd4, [p_db];\n"
    "cvta.to.global.u64 %%rd1, %%rd1;\ncvta.to.global.u64 %%rd2, %%rd2;\n"
    "mov.u32 %%r1, probe_smem;\nadd.u32 %%r2, %%r1, 1023;\n"
    "and.b32 %%r2, %%r2, -1024;\nmov.u32 %%r3, %%tid.x;\nmov.u32 %%r4, 0;\n"
    "COPY:\nshl.b32 %%r5, %%r4, 7;\nadd.u32 %%r5, %%r5, %%r3;\n"
    "shl.b32 %%r6, %%r5, 4;\ncvt.u64.u32 %%rd5, %%r6;\n"
    "add.u64 %%rd6, %%rd1, %%rd5;\n"
    "ld.global.v4.u32 {%%r7, %%r8, %%r9, %%r10}, [%%rd6];\n"
    "add.u32 %%r11, %%r2, %%r6;\n"
    "st.shared.v4.u32 [%%r11], {%%r7, %%r8, %%r9, %%r10};\n"
    "add.u32 %%r4, %%r4, 1;\nsetp.lt.u32 %%p1, %%r4, 12;\n@%%p1 bra COPY;\n"
    "fence.proxy.async.shared::cta;\nbar.sync 0;\n"
    "cvt.u64.u32 %%rd7, %%r2;\nshr.u64 %%rd7, %%rd7, 4;\n"
    "and.b64 %%rd7, %%rd7, 16383;\nor.b64 %%rd8, %%rd7, %%rd3;\n"
    "add.u32 %%r12, %%r2, 8192;\ncvt.u64.u32 %%rd9, %%r12;\n"
    "shr.u64 %%rd9, %%rd9, 4;\nand.b64 %%rd9, %%rd9, 16383;\n"
    "or.b64 %%rd10, %%rd9, %%rd4;\nsetp.ne.u32 %%p0, %%r3, %%r3;\n"
    "wgmma.fence.sync.aligned;\n"
    "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {");
  for (int i = 0; i < 64; ++i) P("%s%%f%d", i ? ", " : "", i);
  P("}, %%rd8, %%rd10, %%p0, 1, 1, 0, 1;\n"
    "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n"
    // row 16 w + l / 4, col 2 (l % 4): (row * 128 + col) * 4 bytes.
    "shr.u32 %%r13, %%r3, 5;\nand.b32 %%r14, %%r3, 31;\n"
    "shr.u32 %%r15, %%r14, 2;\nshl.b32 %%r13, %%r13, 4;\n"
    "add.u32 %%r13, %%r13, %%r15;\nand.b32 %%r16, %%r14, 3;\n"
    "shl.b32 %%r16, %%r16, 1;\nshl.b32 %%r13, %%r13, 7;\n"
    "add.u32 %%r13, %%r13, %%r16;\nmul.wide.u32 %%rd11, %%r13, 4;\n"
    "add.u64 %%rd11, %%rd2, %%rd11;\n");
  for (int i = 0; i < 64; ++i) {
    int off = ((8 * ((i / 2) % 2)) * 128 + 8 * (i / 4) + i % 2) * 4;
    P("st.global.f32 [%%rd11+%d], %%f%d;\n", off, i);
  }
  P("ret;\n}\n");
#undef P
  return t;
}

TEST(wgmma_descriptor_probe) {
  enum { M = 64, N = 128, K = 16, kImage = 8192 + 16384 };
  uint8_t* img = calloc(kImage, 1);
  float a[M][K], b[K][N];
  for (int m = 0; m < M; ++m) {
    for (int k = 0; k < K; ++k) {
      a[m][k] = (float)((int)urand(5) - 2);
      uint16_t v = tj_f32_to_bf16(a[m][k]);
      int off = m * 128 + (((k / 8) ^ (m & 7)) << 4) + (k % 8) * 2;
      memcpy(img + off, &v, 2);
    }
  }
  for (int k = 0; k < K; ++k) {
    for (int n = 0; n < N; ++n) {
      b[k][n] = (float)((int)urand(5) - 2);
      uint16_t v = tj_f32_to_bf16(b[k][n]);
      int nn = n % 64;
      int off = 8192 + (n / 64) * 8192 + k * 128 + (((nn / 8) ^ (k & 7)) << 4) +
                (nn % 8) * 2;
      memcpy(img + off, &v, 2);
    }
  }
  char* ptx = wgmma_probe_ptx();
  tj_cuda_module_t* mod = NULL;
  CHECK_OK(tj_cuda_module_load(g_device, ptx, &mod));
  tj_cuda_kernel_t kern;
  memset(&kern, 0, sizeof(kern));
  if (mod)
    CHECK_OK(tj_cuda_kernel_get(mod, "tj_wgmma_probe", kImage + 1024, &kern));
  tj_cu_deviceptr_t d_img = upload(img, kImage);
  tj_cu_deviceptr_t d_out = device_zeros(M * N * 4);
  // (LBO, SBO) of B: the 64-column panel stride and the 8-row group
  // stride as emit_nvptx_wgmma.c has them, then swapped.
  static const int64_t kCand[2][2] = {{8192, 1024}, {1024, 8192}};
  uint64_t da = (1ull << 16) | (64ull << 32) | (1ull << 62);
  int good = -1;
  for (int c = 0; c < 2 && kern.function; ++c) {
    uint64_t db = ((uint64_t)(kCand[c][0] >> 4) << 16) |
                  ((uint64_t)(kCand[c][1] >> 4) << 32) | (1ull << 62);
    void* args[4] = {&d_img, &d_out, &da, &db};
    tj_cuda_launch_t l = {{1, 1, 1}, {128, 1, 1}, kImage + 1024, 0};
    CHECK_OK(tj_cuda_kernel_launch(&kern, &l, args));
    static float out[M * N];
    download(out, d_out, sizeof(out));
    int bad = 0;
    for (int m = 0; m < M; ++m) {
      for (int n = 0; n < N; ++n) {
        float want = 0;
        for (int k = 0; k < K; ++k) want += a[m][k] * b[k][n];
        if (out[m * N + n] != want && bad++ < 3)
          printf("#   LBO %lld SBO %lld: C[%d, %d] = %g, want %g\n",
                 (long long)kCand[c][0], (long long)kCand[c][1], m, n,
                 (double)out[m * N + n], (double)want);
      }
    }
    printf("# wgmma probe, B MN-major LBO %lld SBO %lld: %d of %d wrong\n",
           (long long)kCand[c][0], (long long)kCand[c][1], bad, M * N);
    if (bad == 0 && good < 0) good = c;
  }
  CHECK_EQ_INT(0, good);
  release(d_img);
  release(d_out);
  tj_cuda_module_destroy(mod);
  free(ptx);
  free(img);
}

// gelu (erf) as decompose writes it: x * erfc(x * -sqrt(1/2)) * 0.5, f32;
// with approximate math and a cast to f16/bf16 after it, NVPTX's 16-bit
// gelu (tj_emit_target_t.gelu_half).
static uint32_t gelu_erfc(tj_kir_t* k, uint32_t x) {
  uint32_t e = tj_kir_unary(
      k, TJ_OP_ERFC,
      tj_kir_binary(k, TJ_OP_MUL, x, s_const(k, -0.70710678118654752)));
  return tj_kir_binary(k, TJ_OP_MUL, tj_kir_binary(k, TJ_OP_MUL, x, e),
                       s_const(k, 0.5));
}

// gelu(x @ w + b) with |dt| operands, bias and output, as the capstone
// fuses it (the tanh form, or with |erf| decompose's erf form);
// |batch| > 1 adds a leading batch dim (x and y batch strides from the
// params MK, MN; w and b broadcast). Scalars: M, N, K, MK, MN.
static tj_kir_t* half_gemm_kir(tj_dtype_t dt, int64_t batch, bool erf) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_GEMM,
                         batch > 1 ? "wg_batched" : "wg_gemm", &k));
  if (!k) return NULL;
  tj_kir_ival_t m = tj_kir_runtime(tj_kir_add_param(k, "M"));
  tj_kir_ival_t n = tj_kir_runtime(tj_kir_add_param(k, "N"));
  tj_kir_ival_t kk = tj_kir_runtime(tj_kir_add_param(k, "K"));
  tj_kir_ival_t mk = tj_kir_runtime(tj_kir_add_param(k, "MK"));
  tj_kir_ival_t mn = tj_kir_runtime(tj_kir_add_param(k, "MN"));
  tj_kir_ival_t c0 = tj_kir_constant(0), c1 = tj_kir_constant(1);
  int32_t r = batch > 1 ? 3 : 2;
  int32_t o = r - 2;  // index of the M dim
  tj_kir_ival_t dims[3] = {tj_kir_constant(batch), m, n};
  tj_kir_ival_t sa[3] = {mk, kk, c1}, sw[3] = {c0, n, c1};
  tj_kir_ival_t sb[3] = {c0, c0, c1}, sy[3] = {mn, n, c1};
  tj_kir_set_space(k, r, dims + (1 - o));
  tj_kir_gemm_schedule_t sched;
  memset(&sched, 0, sizeof(sched));
  tj_kir_set_gemm(k, kk, &sched);
  tj_kir_add_buffer(k, "x", dt, TJ_KIR_GEMM_A, sa + (1 - o));
  tj_kir_add_buffer(k, "w", dt, TJ_KIR_GEMM_B, sw + (1 - o));
  uint32_t b = tj_kir_add_buffer(k, "b", dt, TJ_KIR_INPUT, sb + (1 - o));
  uint32_t y = tj_kir_add_buffer(k, "y", dt, TJ_KIR_OUTPUT, sy + (1 - o));
  uint32_t v = tj_kir_binary(k, TJ_OP_ADD, tj_kir_acc(k),
                             tj_kir_cast(k, TJ_DTYPE_F32, tj_kir_load(k, b)));
  tj_kir_store(k, y,
               tj_kir_cast(k, dt, erf ? gelu_erfc(k, v) : s_gelu_tanh(k, v)));
  CHECK(k->error == NULL);
  return k;
}

typedef struct half_case_t {
  int64_t m, n, k;
  const float *x, *w, *b;  // widened; x is [batch, m, k]
  tj_dtype_t dt;
  bool erf;  // gelu's erf form
} half_case_t;

static double half_round(tj_dtype_t dt, double v) {
  return dt == TJ_DTYPE_BF16 ? bf16_round(v) : tj_f16_to_f32(tj_f64_to_f16(v));
}

// Row i of the [batch * m, n] output.
static double ref_half(void* ctx, int64_t i, int64_t j) {
  const half_case_t* h = ctx;
  const float* x = h->x + i * h->k;
  double s = 0;
  for (int64_t q = 0; q < h->k; ++q)
    s += (double)x[q] * (double)h->w[q * h->n + j];
  return half_round(h->dt,
                    h->erf ? gelu_erf(s + h->b[j]) : gelu_tanh(s + h->b[j]));
}

static uint16_t to_half(tj_dtype_t dt, float v) {
  return dt == TJ_DTYPE_BF16 ? tj_f32_to_bf16(v) : tj_f32_to_f16(v);
}

static float from_half(tj_dtype_t dt, uint16_t v) {
  return dt == TJ_DTYPE_BF16 ? tj_bf16_to_f32(v) : tj_f16_to_f32(v);
}

// Runs |c| (compiled from half_gemm_kir) on each of |sizes| and checks
// every output (a sample of 20000 on big ones) within torch's
// assert_close tolerances for the dtype.
static void check_half_gemm(const compiled_t* c, tj_dtype_t dt, bool erf,
                            int64_t batch, const int64_t (*sizes)[3],
                            size_t count) {
  for (size_t t = 0; t < count; ++t) {
    int64_t m = sizes[t][0], n = sizes[t][1], kk = sizes[t][2];
    int64_t nx = batch * m * kk, ny = batch * m * n;
    uint16_t* xh = malloc((size_t)nx * 2 + 2);
    uint16_t* wh = malloc((size_t)(kk * n) * 2 + 2);
    uint16_t* bh = malloc((size_t)n * 2);
    uint16_t* yh = malloc((size_t)ny * 2);
    float* x = malloc((size_t)nx * 4 + 4);
    float* w = malloc((size_t)(kk * n) * 4 + 4);
    float* b = malloc((size_t)n * 4);
    float* y = malloc((size_t)ny * 4);
    for (int64_t i = 0; i < nx; ++i) {
      xh[i] = to_half(dt, frand(-1, 1));
      x[i] = from_half(dt, xh[i]);
    }
    for (int64_t i = 0; i < kk * n; ++i) {
      wh[i] = to_half(dt, frand(-1, 1) * 0.1f);
      w[i] = from_half(dt, wh[i]);
    }
    for (int64_t i = 0; i < n; ++i) {
      bh[i] = to_half(dt, frand(-1, 1));
      b[i] = from_half(dt, bh[i]);
    }
    tj_cu_deviceptr_t d[4] = {
        upload(xh, (size_t)nx * 2 + 2), upload(wh, (size_t)(kk * n) * 2 + 2),
        upload(bh, (size_t)n * 2), device_zeros((size_t)ny * 2)};
    int64_t scalars[5] = {m, n, kk, m * kk, m * n};
    if (launch(c, d, scalars)) {
      download(yh, d[3], (size_t)ny * 2);
      for (int64_t i = 0; i < ny; ++i) y[i] = from_half(dt, yh[i]);
      half_case_t h = {m, n, kk, x, w, b, dt, erf};
      char what[64];
      snprintf(what, sizeof(what), "%s %lldx%lldx%lld", tj_dtype_name(dt),
               (long long)m, (long long)n, (long long)kk);
      int64_t sample = ny > 600000 ? 20000 : 0;
      bool bf = dt == TJ_DTYPE_BF16;
      CHECK_EQ_INT(0, check_gemm_out(what, y, batch * m, n, sample, ref_half,
                                     &h, bf ? 1.6e-2 : 1e-3, bf ? 1e-2 : 1e-4));
    }
    for (int i = 0; i < 4; ++i) release(d[i]);
    free(xh), free(wh), free(bh), free(yh), free(x), free(w), free(b);
    free(y);
  }
}

static compiled_t compile_kir(tj_kir_t* k, const tj_nvptx_options_t* o,
                              const char* what) {
  compiled_t c = {k, NULL};
  if (!k) return c;
  CHECK_OK(tj_cuda_kir_compile(g_device, g_target, k, o, &c.ck, NULL));
  if (c.ck)
    printf("# %s: %s %dx%d s%d, %d regs, %d local bytes, %d B shared\n", what,
           c.ck->info.wgmma ? "wgmma" : "mma.sync", c.ck->info.tile_m,
           c.ck->info.tile_n, c.ck->info.stages, c.ck->function.num_regs,
           c.ck->function.local_bytes, c.ck->info.shared_bytes);
  return c;
}

// Odd M (1, 17, 1000), N and K multiples and non-multiples of the tiles.
static const int64_t kHalfSizes[][3] = {{1, 264, 72},
                                        {17, 128, 64},
                                        {1000, 264, 200},
                                        {300, 520, 1024},
                                        {2048, 4096, 1024}};

TEST(wgmma_gemm) {
  // The default on sm_90a, then each tile the autotuner may pick.
  static const tj_nvptx_options_t kTiles[] = {
      {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
       .gemm_tile_m = 128,
       .gemm_tile_n = 256,
       .gemm_stages = 4},
      {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
       .gemm_tile_m = 64,
       .gemm_tile_n = 128,
       .gemm_stages = 4},
      {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
       .gemm_tile_m = 128,
       .gemm_tile_n = 128,
       .gemm_stages = 3},
      {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
       .gemm_tile_m = 64,
       .gemm_tile_n = 64,
       .gemm_stages = 8},
      // The tuner's candidate 17, for batched GEMMs of small N.
      {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
       .gemm_tile_m = 128,
       .gemm_tile_n = 64,
       .gemm_stages = 4},
      {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
       .gemm_tile_m = 128,
       .gemm_tile_n = 128,
       .gemm_stages = 3,
       .gemm_wgmma_drain = true},
      {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
       .gemm_tile_m = 128,
       .gemm_tile_n = 256,
       .gemm_stages = 3,
       .gemm_wgmma_drain = true},
      {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
       .gemm_tile_m = 128,
       .gemm_tile_n = 256,
       .gemm_stages = 4,
       .gemm_persistent = true},
      {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
       .gemm_tile_m = 64,
       .gemm_tile_n = 128,
       .gemm_stages = 5,
       .gemm_persistent = true},
  };
  const tj_dtype_t kTypes[2] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  for (int d = 0; d < 2; ++d) {
    compiled_t c =
        compile_kir(half_gemm_kir(kTypes[d], 1, false), NULL, "default");
    if (c.ck) CHECK(c.ck->info.wgmma);
    check_half_gemm(&c, kTypes[d], false, 1, kHalfSizes,
                    TJ_ARRAY_SIZE(kHalfSizes));
    release_compiled(&c);
  }
  for (size_t v = 0; v < TJ_ARRAY_SIZE(kTiles); ++v) {
    // Every other tile: gelu's erf form with approximate math (the
    // 16-bit gelu of nvptx_math.c).
    bool erf = v % 2 == 1;
    tj_nvptx_options_t o = kTiles[v];
    o.approx_math = erf;
    compiled_t c =
        compile_kir(half_gemm_kir(TJ_DTYPE_BF16, 1, erf), &o, "variant");
    check_half_gemm(&c, TJ_DTYPE_BF16, erf, 1, kHalfSizes,
                    TJ_ARRAY_SIZE(kHalfSizes) - 1);
    release_compiled(&c);
  }
  // Batch dims: [3, M, K] @ [K, N], f16 and bf16.
  static const int64_t kBatched[][3] = {{17, 136, 200}, {300, 256, 64}};
  for (int d = 0; d < 2; ++d) {
    compiled_t c =
        compile_kir(half_gemm_kir(kTypes[d], 3, false), NULL, "batched");
    check_half_gemm(&c, kTypes[d], false, 3, kBatched, TJ_ARRAY_SIZE(kBatched));
    release_compiled(&c);
  }
}

//===--- TMA, warp-specialized (sm_90a) ---===//

// The TMA schedules the autotuner may pick, a non-persistent grid, and
// pingpong (64-row tiles, and 128-row ones).
static const tj_nvptx_options_t kTma[] = {
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
     .gemm_tma = true,
     .gemm_persistent = true,
     .gemm_tile_m = 128,
     .gemm_tile_n = 128,
     .gemm_stages = 4},
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
     .gemm_tma = true,
     .gemm_persistent = true,
     .gemm_tile_m = 128,
     .gemm_tile_n = 256,
     .gemm_stages = 4},
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
     .gemm_tma = true,
     .gemm_tile_m = 128,
     .gemm_tile_n = 128,
     .gemm_stages = 5},
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,  // pingpong
     .gemm_tma = true,
     .gemm_persistent = true,
     .gemm_tile_m = 64,
     .gemm_tile_n = 256,
     .gemm_stages = 4},
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,  // pingpong
     .gemm_tma = true,
     .gemm_persistent = true,
     .gemm_tile_m = 64,
     .gemm_tile_n = 128,
     .gemm_stages = 6},
    // Two 64-row blocks a consumer warpgroup (issue 13, hopper7):
    // pingpong on 128-row tiles (the tuner's candidate 15), then on a grid
    // of a block a tile, cooperative on 256-row tiles (16) and with 64
    // columns.
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
     .gemm_tma = true,
     .gemm_pingpong = true,
     .gemm_persistent = true,
     .gemm_tile_m = 128,
     .gemm_tile_n = 128,
     .gemm_stages = 4},
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
     .gemm_tma = true,
     .gemm_pingpong = true,
     .gemm_tile_m = 128,
     .gemm_tile_n = 64,
     .gemm_stages = 6},
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
     .gemm_tma = true,
     .gemm_persistent = true,
     .gemm_tile_m = 256,
     .gemm_tile_n = 128,
     .gemm_stages = 3},
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
     .gemm_tma = true,
     .gemm_tile_m = 256,
     .gemm_tile_n = 64,
     .gemm_stages = 4},
    // The TMA store epilogue (issue 13, hopper8): pingpong on 128- and
    // 64-row tiles, cooperative on 128- and 256-row ones; 128x256 s4 has
    // no room for the output tile and keeps the staged epilogue.
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
     .gemm_tma = true,
     .gemm_tma_store = true,
     .gemm_pingpong = true,
     .gemm_persistent = true,
     .gemm_tile_m = 128,
     .gemm_tile_n = 128,
     .gemm_stages = 4},
    // ... its pairs' epilogues in order (issue 13, cap2048: what the
    // lockstep replaces, kept for measuring it).
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
     .gemm_tma = true,
     .gemm_tma_store = true,
     .gemm_epilogue_in_order = true,
     .gemm_pingpong = true,
     .gemm_persistent = true,
     .gemm_tile_m = 128,
     .gemm_tile_n = 128,
     .gemm_stages = 4},
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
     .gemm_tma = true,
     .gemm_tma_store = true,
     .gemm_pingpong = true,
     .gemm_tile_m = 128,
     .gemm_tile_n = 64,
     .gemm_stages = 6},
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
     .gemm_tma = true,
     .gemm_tma_store = true,
     .gemm_persistent = true,
     .gemm_tile_m = 64,
     .gemm_tile_n = 256,
     .gemm_stages = 4},
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
     .gemm_tma = true,
     .gemm_tma_store = true,
     .gemm_persistent = true,
     .gemm_tile_m = 128,
     .gemm_tile_n = 128,
     .gemm_stages = 5},
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
     .gemm_tma = true,
     .gemm_tma_store = true,
     .gemm_persistent = true,
     .gemm_tile_m = 256,
     .gemm_tile_n = 128,
     .gemm_stages = 3},
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
     .gemm_tma = true,
     .gemm_tma_store = true,
     .gemm_persistent = true,
     .gemm_tile_m = 128,
     .gemm_tile_n = 256,
     .gemm_stages = 4},
    // 2-block clusters with B multicast (issue 13, hopper8): cooperative
    // 128x256 persistent, pingpong 128x128 with the TMA store, and a
    // block a tile pair (the pair's second tile past M where the tile
    // rows are odd: 1, 17, 129, 300 rows).
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
     .gemm_tma = true,
     .gemm_cluster = true,
     .gemm_persistent = true,
     .gemm_tile_m = 128,
     .gemm_tile_n = 256,
     .gemm_stages = 4},
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
     .gemm_tma = true,
     .gemm_cluster = true,
     .gemm_tma_store = true,
     .gemm_pingpong = true,
     .gemm_persistent = true,
     .gemm_tile_m = 128,
     .gemm_tile_n = 128,
     .gemm_stages = 4},
    {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
     .gemm_tma = true,
     .gemm_cluster = true,
     .gemm_tile_m = 128,
     .gemm_tile_n = 128,
     .gemm_stages = 5},
};

// Odd M, N and K (K = 0 too: no load, C is the epilogue of zeros) and a
// big tile count, so the persistent grid loops.
static const int64_t kTmaSizes[][3] = {
    {1, 264, 72},  {17, 128, 64}, {1000, 264, 200},  {300, 520, 1024},
    {129, 200, 8}, {64, 128, 0},  {2048, 4096, 1024}};

// y (f32) = x @ w + r: the residual and the cast epilogue on the TMA path.
static tj_kir_t* residual_kir(tj_dtype_t dt) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_GEMM, "tma_res", &k));
  if (!k) return NULL;
  tj_kir_ival_t m = tj_kir_runtime(tj_kir_add_param(k, "M"));
  tj_kir_ival_t n = tj_kir_runtime(tj_kir_add_param(k, "N"));
  tj_kir_ival_t kk = tj_kir_runtime(tj_kir_add_param(k, "K"));
  tj_kir_ival_t c1 = tj_kir_constant(1);
  tj_kir_ival_t dims[2] = {m, n}, sa[2] = {kk, c1}, sw[2] = {n, c1};
  tj_kir_set_space(k, 2, dims);
  tj_kir_gemm_schedule_t sched;
  memset(&sched, 0, sizeof(sched));
  tj_kir_set_gemm(k, kk, &sched);
  tj_kir_add_buffer(k, "x", dt, TJ_KIR_GEMM_A, sa);
  tj_kir_add_buffer(k, "w", dt, TJ_KIR_GEMM_B, sw);
  uint32_t r = tj_kir_add_buffer(k, "r", dt, TJ_KIR_INPUT, sw);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sw);
  tj_kir_store(k, y,
               tj_kir_binary(k, TJ_OP_ADD, tj_kir_acc(k),
                             tj_kir_cast(k, TJ_DTYPE_F32, tj_kir_load(k, r))));
  CHECK(k->error == NULL);
  return k;
}

typedef struct res_case_t {
  int64_t n, k;
  const float *x, *w, *r;
} res_case_t;

static double ref_res(void* ctx, int64_t i, int64_t j) {
  const res_case_t* h = ctx;
  double s = 0;
  for (int64_t q = 0; q < h->k; ++q)
    s += (double)h->x[i * h->k + q] * (double)h->w[q * h->n + j];
  return s + h->r[i * h->n + j];
}

static void check_residual(const compiled_t* c, tj_dtype_t dt) {
  static const int64_t kSizes[][3] = {{33, 200, 136}, {257, 392, 520}};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(kSizes); ++t) {
    int64_t m = kSizes[t][0], n = kSizes[t][1], kk = kSizes[t][2];
    uint16_t* xh = malloc((size_t)(m * kk) * 2);
    uint16_t* wh = malloc((size_t)(kk * n) * 2);
    uint16_t* rh = malloc((size_t)(m * n) * 2);
    float* x = malloc((size_t)(m * kk) * 4);
    float* w = malloc((size_t)(kk * n) * 4);
    float* r = malloc((size_t)(m * n) * 4);
    float* y = malloc((size_t)(m * n) * 4);
    for (int64_t i = 0; i < m * kk; ++i) {
      xh[i] = to_half(dt, frand(-1, 1));
      x[i] = from_half(dt, xh[i]);
    }
    for (int64_t i = 0; i < kk * n; ++i) {
      wh[i] = to_half(dt, frand(-1, 1) * 0.1f);
      w[i] = from_half(dt, wh[i]);
    }
    for (int64_t i = 0; i < m * n; ++i) {
      rh[i] = to_half(dt, frand(-1, 1));
      r[i] = from_half(dt, rh[i]);
    }
    tj_cu_deviceptr_t d[4] = {
        upload(xh, (size_t)(m * kk) * 2), upload(wh, (size_t)(kk * n) * 2),
        upload(rh, (size_t)(m * n) * 2), device_zeros((size_t)(m * n) * 4)};
    int64_t scalars[3] = {m, n, kk};
    if (launch(c, d, scalars)) {
      download(y, d[3], (size_t)(m * n) * 4);
      res_case_t h = {n, kk, x, w, r};
      char what[64];
      snprintf(what, sizeof(what), "tma residual %s %lldx%lldx%lld",
               tj_dtype_name(dt), (long long)m, (long long)n, (long long)kk);
      // f32 accumulation of K products of bf16/f16 values.
      CHECK_EQ_INT(0, check_gemm_out(what, y, m, n, 0, ref_res, &h, 1e-5,
                                     1e-4 * (double)kk / 64));
    }
    for (int i = 0; i < 4; ++i) release(d[i]);
    free(xh), free(wh), free(rh), free(x), free(w), free(r), free(y);
  }
}

TEST(tma_gemm) {
  const tj_dtype_t kTypes[2] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  for (size_t v = 0; v < TJ_ARRAY_SIZE(kTma); ++v) {
    for (int d = 0; d < 2; ++d) {
      // Each schedule with gelu's tanh form in one dtype and its erf form
      // with approximate math (nvptx_math.c's 16-bit gelu) in the other.
      bool erf = (v + (size_t)d) % 2 == 1;
      tj_nvptx_options_t o = kTma[v];
      o.approx_math = erf;
      compiled_t c = compile_kir(half_gemm_kir(kTypes[d], 1, erf), &o, "tma");
      if (c.ck) CHECK(c.ck->info.tma && c.ck->info.threads == 384);
      if (c.ck) CHECK_EQ_INT(kTma[v].gemm_tma_store, c.ck->info.tma_store);
      if (c.ck) CHECK_EQ_INT(kTma[v].gemm_cluster ? 2 : 0, c.ck->info.cluster);
      check_half_gemm(&c, kTypes[d], erf, 1, kTmaSizes,
                      TJ_ARRAY_SIZE(kTmaSizes));
      release_compiled(&c);
      compiled_t r = compile_kir(residual_kir(kTypes[d]), &kTma[v], "tma res");
      check_residual(&r, kTypes[d]);
      release_compiled(&r);
    }
  }
}

// y (bf16) = bf16(x @ w + b) into rows |YP| elements apart: the TMA store
// (gemm_tma_store) where TMA can address the output, today's epilogue
// where it cannot (a pitch of 8-byte multiples, a base 2 bytes off 16).
static tj_kir_t* pitched_kir(void) {
  tj_kir_t* k = NULL;
  CHECK_OK(
      tj_kir_create(tj_allocator_system(), TJ_KIR_GEMM, "tma_pitched", &k));
  if (!k) return NULL;
  tj_kir_ival_t m = tj_kir_runtime(tj_kir_add_param(k, "M"));
  tj_kir_ival_t n = tj_kir_runtime(tj_kir_add_param(k, "N"));
  tj_kir_ival_t kk = tj_kir_runtime(tj_kir_add_param(k, "K"));
  tj_kir_ival_t yp = tj_kir_runtime(tj_kir_add_param(k, "YP"));
  tj_kir_ival_t c0 = tj_kir_constant(0), c1 = tj_kir_constant(1);
  tj_kir_ival_t dims[2] = {m, n}, sa[2] = {kk, c1}, sw[2] = {n, c1};
  tj_kir_ival_t sb[2] = {c0, c1}, sy[2] = {yp, c1};
  tj_kir_set_space(k, 2, dims);
  tj_kir_gemm_schedule_t sched;
  memset(&sched, 0, sizeof(sched));
  tj_kir_set_gemm(k, kk, &sched);
  tj_kir_add_buffer(k, "x", TJ_DTYPE_BF16, TJ_KIR_GEMM_A, sa);
  tj_kir_add_buffer(k, "w", TJ_DTYPE_BF16, TJ_KIR_GEMM_B, sw);
  uint32_t b = tj_kir_add_buffer(k, "b", TJ_DTYPE_BF16, TJ_KIR_INPUT, sb);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_BF16, TJ_KIR_OUTPUT, sy);
  tj_kir_store(k, y,
               tj_kir_cast(k, TJ_DTYPE_BF16,
                           tj_kir_binary(k, TJ_OP_ADD, tj_kir_acc(k),
                                         tj_kir_cast(k, TJ_DTYPE_F32,
                                                     tj_kir_load(k, b)))));
  CHECK(k->error == NULL);
  return k;
}

// Every element of the [M, N] output at pitch |yp| and byte offset
// |skew| within 1 bf16 ulp of the f64 reference, and the pitch's padding
// (the poison device_zeros left) untouched: the TMA store clips its boxes
// at N and M.
static void check_pitched(const compiled_t* c, int64_t m, int64_t n, int64_t kk,
                          int64_t yp, int64_t skew) {
  uint16_t* xh = malloc((size_t)(m * kk) * 2);
  uint16_t* wh = malloc((size_t)(kk * n) * 2);
  uint16_t* bh = malloc((size_t)n * 2);
  uint16_t* yh = malloc((size_t)(m * yp) * 2);
  for (int64_t i = 0; i < m * kk; ++i) xh[i] = tj_f32_to_bf16(frand(-1, 1));
  for (int64_t i = 0; i < kk * n; ++i)
    wh[i] = tj_f32_to_bf16(frand(-1, 1) * 0.1f);
  for (int64_t i = 0; i < n; ++i) bh[i] = tj_f32_to_bf16(frand(-1, 1));
  tj_cu_deviceptr_t y = device_zeros((size_t)(m * yp) * 2 + 16);
  tj_cu_deviceptr_t d[4] = {upload(xh, (size_t)(m * kk) * 2),
                            upload(wh, (size_t)(kk * n) * 2),
                            upload(bh, (size_t)n * 2), y + (uint64_t)skew};
  int64_t scalars[4] = {m, n, kk, yp};
  if (launch(c, d, scalars)) {
    download(yh, d[3], (size_t)(m * yp) * 2);
    int bad = 0, touched = 0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < yp; ++j) {
        uint16_t got = yh[i * yp + j];
        if (j >= n) {
          touched += got != 0xffff;
          continue;
        }
        double ref = tj_bf16_to_f32(bh[j]);
        for (int64_t q = 0; q < kk; ++q)
          ref += (double)tj_bf16_to_f32(xh[i * kk + q]) *
                 (double)tj_bf16_to_f32(wh[q * n + j]);
        double g = tj_bf16_to_f32(got);
        if (!(fabs(g - ref) <= 1e-3 + fabs(ref) / 128) && bad++ < 5)
          fprintf(stderr, "  pitched y[%lld, %lld]: got %.6g, want %.6g\n",
                  (long long)i, (long long)j, g, ref);
      }
    }
    printf(
        "# tma pitched %lldx%lldx%lld, pitch %lld, skew %lld: %d bad, %d "
        "padding elements written\n",
        (long long)m, (long long)n, (long long)kk, (long long)yp,
        (long long)skew, bad, touched);
    CHECK_EQ_INT(0, bad);
    CHECK_EQ_INT(0, touched);
  }
  for (int i = 0; i < 3; ++i) release(d[i]);
  release(y);
  free(xh), free(wh), free(bh), free(yh);
}

TEST(tma_store_pitch) {
  for (size_t v = 0; v < TJ_ARRAY_SIZE(kTma); ++v) {
    if (!kTma[v].gemm_tma_store) continue;
    compiled_t c = compile_kir(pitched_kir(), &kTma[v], "tma pitched");
    // A pitch TMA can address (16-byte multiple), then ones it cannot: 8
    // bytes over, and a base 2 bytes past a 16-byte boundary.
    check_pitched(&c, 300, 200, 264, 208, 0);
    check_pitched(&c, 129, 136, 64, 140, 0);
    check_pitched(&c, 129, 136, 64, 144, 2);
    release_compiled(&c);
  }
}

// Attention's scores on the batched sample (nvptx_samples.h), y[b] =
// bf16(0.125 q[b] @ k[b]^T): row i of the [batch * m, n] output.
typedef struct bmm_case_t {
  int64_t m, n, k;
  const float *q, *kt;  // [batch, m, k], [batch, n, k]
} bmm_case_t;

static double ref_bmm(void* ctx, int64_t i, int64_t j) {
  const bmm_case_t* h = ctx;
  int64_t b = i / h->m;
  const float* q = h->q + i * h->k;
  const float* kr = h->kt + (b * h->n + j) * h->k;
  double s = 0;
  for (int64_t t = 0; t < h->k; ++t) s += (double)q[t] * (double)kr[t];
  return bf16_round(0.125 * s);
}

// Runs |c| (SAMPLE_GEMM_BF16_BMM) on batches of 3 (odd), 1 and 0, odd M,
// N and K and K = 0: each batch entry's rows past M and k past K must
// read zeros, not the next entry's (TMA boxes never cross an entry).
static void check_bmm(const compiled_t* c) {
  static const int64_t kSizes[][4] = {
      {3, 17, 72, 64}, {3, 200, 136, 200}, {1, 129, 520, 8},  {3, 64, 128, 0},
      {0, 64, 64, 64}, {5, 300, 264, 72},  {48, 512, 512, 64}};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(kSizes); ++t) {
    int64_t bt = kSizes[t][0], m = kSizes[t][1], n = kSizes[t][2],
            kk = kSizes[t][3];
    int64_t nq = bt * m * kk, nk = bt * n * kk, ny = bt * m * n;
    uint16_t* qh = malloc((size_t)nq * 2 + 2);
    uint16_t* kh = malloc((size_t)nk * 2 + 2);
    uint16_t* yh = malloc((size_t)ny * 2 + 2);
    float* q = malloc((size_t)nq * 4 + 4);
    float* kf = malloc((size_t)nk * 4 + 4);
    float* y = malloc((size_t)ny * 4 + 4);
    for (int64_t i = 0; i < nq; ++i) {
      qh[i] = tj_f32_to_bf16(frand(-1, 1));
      q[i] = tj_bf16_to_f32(qh[i]);
    }
    for (int64_t i = 0; i < nk; ++i) {
      kh[i] = tj_f32_to_bf16(frand(-1, 1));
      kf[i] = tj_bf16_to_f32(kh[i]);
    }
    tj_cu_deviceptr_t d[3] = {upload(qh, (size_t)nq * 2 + 2),
                              upload(kh, (size_t)nk * 2 + 2),
                              device_zeros((size_t)ny * 2 + 2)};
    int64_t scalars[7] = {bt, m, n, kk, m * kk, n * kk, m * n};
    if (launch(c, d, scalars) && ny > 0) {
      download(yh, d[2], (size_t)ny * 2);
      for (int64_t i = 0; i < ny; ++i) y[i] = tj_bf16_to_f32(yh[i]);
      bmm_case_t h = {m, n, kk, q, kf};
      char what[64];
      snprintf(what, sizeof(what), "bmm %lldx%lldx%lldx%lld", (long long)bt,
               (long long)m, (long long)n, (long long)kk);
      int64_t sample = ny > 600000 ? 20000 : 0;
      CHECK_EQ_INT(0, check_gemm_out(what, y, bt * m, n, sample, ref_bmm, &h,
                                     1.6e-2, 1e-2));
    }
    for (int i = 0; i < 3; ++i) release(d[i]);
    free(qh), free(kh), free(yh), free(q), free(kf), free(y);
  }
}

// Batched GEMMs on every TMA schedule (rank-3 tensor maps, the batch in
// the tile index) and on the cp.async tiles, against the host.
TEST(tma_batched_gemm) {
  for (size_t v = 0; v < TJ_ARRAY_SIZE(kTma); ++v) {
    // Clusters take rank-2 GEMMs only (nvptx_ptxas_test's bad_options).
    if (kTma[v].gemm_cluster) continue;
    compiled_t c = compile_with(SAMPLE_GEMM_BF16_BMM, &kTma[v]);
    if (c.ck) CHECK(c.ck->info.tma);
    check_bmm(&c);
    release_compiled(&c);
  }
  static const tj_nvptx_options_t kCpAsync[] = {
      {0},
      {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
       .gemm_tile_m = 128,
       .gemm_tile_n = 64,
       .gemm_stages = 4}};
  for (size_t v = 0; v < TJ_ARRAY_SIZE(kCpAsync); ++v) {
    compiled_t c = compile_with(SAMPLE_GEMM_BF16_BMM, &kCpAsync[v]);
    check_bmm(&c);
    release_compiled(&c);
  }
}

// Tensor maps TMA cannot make are statuses naming the kernel and operand.
TEST(tma_map_errors) {
  compiled_t c =
      compile_kir(half_gemm_kir(TJ_DTYPE_BF16, 1, false), &kTma[0], "tma maps");
  if (!c.ck) return;
  int64_t scalars[5] = {64, 128, 64, 64 * 64, 64 * 128};
  uint64_t ptrs[4] = {0x10000, 0x20000, 0x30000, 0x40000};
  tj_cuda_tensor_maps_t maps;
  CHECK_OK(tj_cuda_gemm_tensor_maps(g_device, c.k, &c.ck->info, ptrs, scalars,
                                    &maps));
  uint64_t odd[4] = {0x10008, 0x20000, 0x30000, 0x40000};
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "TMA cannot address gemm operand %x",
               tj_cuda_gemm_tensor_maps(g_device, c.k, &c.ck->info, odd,
                                        scalars, &maps));
  // A box the driver refuses (512 rows > 256): its error, annotated.
  tj_nvptx_kernel_t big = c.ck->info;
  big.tile_m = 512;
  CHECK_STATUS(
      TJ_STATUS_BACKEND_FAILURE, "tensor map of gemm operand %x",
      tj_cuda_gemm_tensor_maps(g_device, c.k, &big, ptrs, scalars, &maps));
  tj_nvptx_kernel_t plain = c.ck->info;
  plain.tma = false;
  CHECK_STATUS(
      TJ_STATUS_INVALID_ARGUMENT, "not a TMA gemm",
      tj_cuda_gemm_tensor_maps(g_device, c.k, &plain, ptrs, scalars, &maps));
  release_compiled(&c);
}

int main(void) {
  g_device = tj_test_open_device_or_skip();
  const char* arch_name = tj_cuda_device_arch_name(g_device);
  tj_nvptx_arch_t arch;
  if (!arch_name || !tj_nvptx_arch_from_name(arch_name, &arch)) {
    printf("# skipped: %s is older than sm_80\n", g_device->name);
    tj_cuda_device_destroy(g_device);
    return TJ_TEST_EXIT_SKIP;
  }
  CHECK_OK(tj_nvptx_target_create(tj_allocator_system(), arch, &g_target));
  printf("# compiling for %s\n", arch_name);
  RUN_TEST(gelu_bias);
  RUN_TEST(bf16_map);
  RUN_TEST(transposed);
  RUN_TEST(softmax);
  RUN_TEST(layernorm_bf16);
  RUN_TEST(argmax);
  RUN_TEST(gemm_f32);
  RUN_TEST(gemm_bf16_gelu_bias);
  RUN_TEST(gemm_f16_batched_residual);
  if (arch == TJ_NVPTX_SM_90A) {
    RUN_TEST(wgmma_descriptor_probe);
    RUN_TEST(wgmma_gemm);
    RUN_TEST(tma_gemm);
    RUN_TEST(tma_store_pitch);
    RUN_TEST(tma_batched_gemm);
    RUN_TEST(tma_map_errors);
  } else {
    printf("# wgmma tests skipped: %s is not sm_90a\n", arch_name);
  }
  tj_nvptx_target_destroy(g_target);
  tj_cuda_device_destroy(g_device);
  TEST_MAIN_END();
}
