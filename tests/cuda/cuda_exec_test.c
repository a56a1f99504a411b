// The CUDA target's own behaviour end to end through the public API: GEMM
// candidates, the GPU's approximate math, the capstone on CPU and device
// tensors, CUDA-graph replay, the caching allocator, strided device
// tensors, the cubin cache (warm start without LLVM or ptxas),
// specialization (the driver's policies on CUDA), errors and background
// autotuning (TJ_AUTOTUNE_BACKGROUND);
// graphs compiled with tj_compile(target = TJ_TARGET_CUDA), compared with
// tj_reference_run. The op/dtype conformance of the CUDA backend is
// tests/cuda/cuda_conformance_test.c (the shared body tests/conformance/,
// whose tolerances apply here too). Skipped (exit 77, with the reason)
// where no driver or GPU is found.
//
// Capstone bf16 is checked also against the exact math of the same inputs
// (the graph in f32 on the reference) with torch's bf16 rtol 1.6e-2 and
// atol 1e-4 (the matmul result is rounded to bf16 before the epilogue, as
// in eager PyTorch).

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <unistd.h>

#include "backends/cuda/cuda_executable.h"
#include "backends/cuda/cuda_program.h"
#include "jit/cache.h"
#include "lib/dtype.h"
#include "tests/conformance/conformance.h"
#include "tests/cuda/cuda_test_util.h"

static tj_context_t* g_ctx;
static tj_cuda_device_t* g_dev;  // the test's own handle, for device memory
static tj_cts_backend_t g_be;    // CUDA in g_ctx, CPU tensors

//===--- the conformance suite's pieces ---===//

typedef tj_cts_tol_t tol_t;
typedef tj_value_t (*unary_fn)(tj_graph_t*, tj_value_t);

static void fill(tj_dtype_t d, void* p, int64_t n, double lo, double hi) {
  tj_cts_fill(d, p, n, lo, hi);
}

static tol_t tol_for(tj_dtype_t d, double f32_rtol) {
  return tj_cts_tol_for(d, f32_rtol);
}

static bool compare(const char* what, tj_dtype_t d, const void* got,
                    const void* want, int64_t n, tol_t tol) {
  return tj_cts_compare(what, d, got, want, n, tol);
}

static tj_compile_options_t cuda_options(void) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.verify_each = true;
  return o;
}

//===--- device memory of the test ---===//

static tj_cu_deviceptr_t dev_upload(const void* host, size_t bytes) {
  tj_cu_deviceptr_t p = 0;
  CHECK_OK(tj_cuda_device_alloc(g_dev, bytes ? bytes : 1, &p));
  if (bytes) CHECK_OK(tj_cuda_copy_to_device(g_dev, p, host, bytes));
  CHECK_OK(tj_cuda_device_synchronize(g_dev));
  return p;
}

static void dev_download(void* host, tj_cu_deviceptr_t p, size_t bytes) {
  if (bytes) CHECK_OK(tj_cuda_copy_to_host(g_dev, host, p, bytes));
  CHECK_OK(tj_cuda_device_synchronize(g_dev));
}

static tj_tensor_t on_device(tj_tensor_t t, tj_cu_deviceptr_t p) {
  t.data = (void*)(uintptr_t)p;
  t.device_type = TJ_DEVICE_CUDA;
  t.device_id = g_dev->ordinal;
  return t;
}

// Every GEMM candidate of the autotuner, forced: the other tile schedules,
// cuBLASLt + the epilogue as a pointwise kernel and the TMA schedules (7,
// 8, 10, 11 and 16 cooperative, 9 and 15 pingpong; the batched case, x [2, B,
// 64] @ w [64, 72], is one rank-2 GEMM of 2B rows (kir/lower_index.c), so it
// takes them too), and 17, the cp.async wgmma 128x64 tile. Then the same
// on batched_matmuls' GEMMs with both operands batched (rank 3 and 4):
// the cp.async tiles, and the TMA schedules through rank-3 tensor maps
// with the batch folded into the tile index; cuBLASLt (4) takes rank-2
// GEMMs only and falls back to the module's kernel there.
TEST(gemm_candidates) {
  static const char* const kForced[] = {"1", "2", "3",  "4",  "5",  "6",  "7",
                                        "8", "9", "10", "11", "15", "16", "17"};
  static const char* const kGroups[] = {"half_matmuls", "batched_matmuls"};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kForced) * 2; ++i) {
    const char* forced = kForced[i % TJ_ARRAY_SIZE(kForced)];
    const char* group = kGroups[i / TJ_ARRAY_SIZE(kForced)];
    tj_context_options_t o = tj_test_context_options();
    o.cuda_gemm_candidate = forced;
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_context_create(&o, &ctx));
    tj_cts_backend_t be = g_be;
    be.context = ctx;
    int before = tj_cts_failures;
    CHECK(tj_cts_run_group(&be, group));
    if (tj_cts_failures != before) {
      fprintf(stderr, "  (with cuda_gemm_candidate %s)\n", forced);
    }
    tj_context_destroy(ctx);
  }
}

// allow_tf32's f32 GEMM candidates, forced: the exact kernel (0),
// cuBLASLt's TF32 mode (4) and the TMA schedules on wgmma .tf32 (7, 8, 10
// cooperative, 9 pingpong), against the reference within the TF32 budget
// the group states (the odd-N case has no TMA form: it falls back).
TEST(tf32_candidates) {
  static const char* const kForced[] = {"0", "4", "7", "8", "9", "10"};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kForced); ++i) {
    tj_context_options_t o = tj_test_context_options();
    o.cuda_gemm_candidate = kForced[i];
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_context_create(&o, &ctx));
    tj_cts_backend_t be = g_be;
    be.context = ctx;
    int before = tj_cts_failures;
    tj_cts_run_group(&be, "tf32_matmuls");
    if (tj_cts_failures != before) {
      fprintf(stderr, "  (with cuda_gemm_candidate %s)\n", kForced[i]);
    }
    tj_context_destroy(ctx);
  }
}

// Split-K in 2, 4 and 8 slices (candidates 12 to 14), forced, against the
// reference: bf16 on the module's tensor-core main loop, exact f32 on the
// CUDA-core kernel, the partials summed in slice order before the epilogue
// (bias, gelu, residual). Then the same bf16 case again, twice on one
// executable: the order of the sum is fixed, so the two results agree to
// the bit.
TEST(split_k_candidates) {
  static const char* const kForced[] = {"12", "13", "14"};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kForced); ++i) {
    tj_context_options_t o = tj_test_context_options();
    o.cuda_gemm_candidate = kForced[i];
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_context_create(&o, &ctx));
    tj_cts_backend_t be = g_be;
    be.context = ctx;
    int before = tj_cts_failures;
    tj_cts_run_group(&be, "splitk_matmuls");
    if (tj_cts_failures != before) {
      fprintf(stderr, "  (with cuda_gemm_candidate %s)\n", kForced[i]);
    }
    tj_graph_t* g = NULL;
    CHECK_OK(tj_graph_create(ctx, "splitk_twice", &g));
    enum { M = 96, K = 1024, N = 256 };
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){M, K}, "x");
    tj_value_t w = tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){K, N}, "w");
    tj_graph_output(g, tj_graph_matmul(g, x, w), "y");
    CHECK_OK(tj_graph_finalize(g));
    tj_compile_options_t co = cuda_options();
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &co, &exe));
    uint16_t* xs = malloc(sizeof(uint16_t) * M * K);
    uint16_t* ws = malloc(sizeof(uint16_t) * K * N);
    uint16_t* y[2] = {calloc(M * N, 2), calloc(M * N, 2)};
    fill(TJ_DTYPE_BF16, xs, M * K, -1, 1);
    fill(TJ_DTYPE_BF16, ws, K * N, -1, 1);
    for (int r = 0; r < 2; ++r) {
      tj_tensor_t in[2] = {
          tj_tensor_make(xs, TJ_DTYPE_BF16, 2, (int64_t[]){M, K}),
          tj_tensor_make(ws, TJ_DTYPE_BF16, 2, (int64_t[]){K, N})};
      tj_tensor_t out =
          tj_tensor_make(y[r], TJ_DTYPE_BF16, 2, (int64_t[]){M, N});
      CHECK_OK(tj_executable_run(exe, in, 2, &out, 1));
    }
    CHECK(memcmp(y[0], y[1], sizeof(uint16_t) * M * N) == 0);
    tj_cuda_program_stats_t cs;
    CHECK_OK(tj_executable_cuda_stats(exe, &cs));
    CHECK(strncmp(cs.gemm_choice, "split-k", 7) == 0);
    free(xs);
    free(ws);
    free(y[0]);
    free(y[1]);
    tj_executable_release(exe);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
  }
}

// Exact f32 GEMMs (no allow_tf32) have one candidate beside their own
// kernel: cuBLASLt's exact sgemm (4; plain matmuls straight into their
// output, others through the epilogue kernel), against the reference.
TEST(f32_cublaslt_candidate) {
  tj_context_options_t o = tj_test_context_options();
  o.cuda_gemm_candidate = "4";
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&o, &ctx));
  tj_cts_backend_t be = g_be;
  be.context = ctx;
  tj_cts_run_group(&be, "matmuls");
  tj_context_destroy(ctx);
}

//===--- the GPU's approximate math ---===//

// Max error in ulps of f32 |got| against the exact |want|, over values
// whose result is a normal float (subnormal results flush to 0).
static double ulp_error(float got, double want) {
  if (want == 0 || fabs(want) < 0x1p-126 || isinf(want)) return 0;
  if (isnan(got)) return INFINITY;
  int e;
  frexp(want, &e);
  return fabs((double)got - want) / ldexp(1.0, e - 24);
}

static double sigmoid_d(double x) { return 1 / (1 + exp(-x)); }

TEST(math_accuracy) {
  static const struct {
    const char* name;
    unary_fn fn;
    double (*exact)(double);
    float lo, hi;
    double approx_bound;   // ulp, with the GPU's approximate math
    double precise_bound;  // ulp, precise_math (jit/vecmath.h's bounds)
  } kOps[] = {
      {"exp", tj_graph_exp, exp, -87.0f, 88.5f, 3, 2.5},
      {"tanh", tj_graph_tanh, tanh, -9.0f, 9.0f, 3, 2.5},
      {"sigmoid", tj_graph_sigmoid, sigmoid_d, -80.0f, 30.0f, 5, 2.5},
      {"erf", tj_graph_erf, erf, -5.0f, 5.0f, 3, 2.5},
      {"erfc", tj_graph_erfc, erfc, -5.0f, 10.0f, 7, 7},
      {"asin", tj_graph_asin, asin, -1.0f, 1.0f, 2, 2},
      {"acos", tj_graph_acos, acos, -1.0f, 1.0f, 2, 2},
      {"atan", tj_graph_atan, atan, -50.0f, 50.0f, 2.5, 2.5},
  };
  const int64_t n = 1 << 21;
  float* xs = malloc(sizeof(float) * (size_t)n);
  float* ys = malloc(sizeof(float) * (size_t)n);
  printf("# f32 math on the GPU, max ulp over %lld points: approx / precise\n",
         (long long)n);
  for (size_t o = 0; o < TJ_ARRAY_SIZE(kOps); ++o) {
    for (int64_t i = 0; i < n; ++i) {
      xs[i] = kOps[o].lo + (kOps[o].hi - kOps[o].lo) * (float)i / (float)n;
    }
    double worst[2] = {0, 0};
    for (int precise = 0; precise < 2; ++precise) {
      tj_graph_t* g;
      CHECK_OK(tj_graph_create(g_ctx, kOps[o].name, &g));
      tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){n}, "x");
      tj_graph_output(g, kOps[o].fn(g, x), "y");
      CHECK_OK(tj_graph_finalize(g));
      tj_compile_options_t opts = cuda_options();
      opts.cuda.precise_math = precise != 0;
      tj_executable_t* exe = NULL;
      CHECK_OK(tj_compile(g, &opts, &exe));
      if (exe) {
        tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 1, (int64_t[]){n});
        tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 1, (int64_t[]){n});
        CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
        for (int64_t i = 0; i < n; ++i) {
          double e = ulp_error(ys[i], kOps[o].exact((double)xs[i]));
          if (e > worst[precise]) worst[precise] = e;
        }
        tj_executable_release(exe);
      }
      tj_graph_destroy(g);
    }
    printf("#   %-8s %6.2f / %6.2f ulp\n", kOps[o].name, worst[0], worst[1]);
    CHECK(worst[0] <= kOps[o].approx_bound);
    CHECK(worst[1] <= kOps[o].precise_bound);
  }
  free(xs);
  free(ys);
}

// gelu (erf) of f16 and bf16 values with the GPU's approximate math:
// nvptx_math.c's form for values rounded to 16 bits (one rcp.approx, one
// ex2.approx), within 1.5e-5 of gelu relative before the rounding, so each
// result is gelu correctly rounded to the dtype, or its neighbour where
// gelu lies within that bound of a rounding midpoint. Every finite input
// of |x| <= 16 (and +-inf: +inf gives inf, -inf NaN, as x erfc(-x/sqrt 2)
// / 2 does); the precise path printed beside it.
static double gelu_exact(double x) {
  return 0.5 * x * erfc(-x * 0.70710678118654752440);
}

TEST(gelu_half_accuracy) {
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  for (size_t d = 0; d < TJ_ARRAY_SIZE(kTypes); ++d) {
    tj_dtype_t dt = kTypes[d];
    uint16_t* xs = malloc(sizeof(uint16_t) * 65536);
    uint16_t* ys = malloc(sizeof(uint16_t) * 65536);
    int64_t n = 0;
    for (uint32_t bits = 0; bits < 65536; ++bits) {
      double v = dt == TJ_DTYPE_BF16 ? tj_bf16_to_f32((uint16_t)bits)
                                     : tj_f16_to_f32((uint16_t)bits);
      if ((isfinite(v) && fabs(v) <= 16) || isinf(v)) xs[n++] = (uint16_t)bits;
    }
    int eps_bits = dt == TJ_DTYPE_BF16 ? 8 : 11;             // significand bits
    double tiny = dt == TJ_DTYPE_BF16 ? 0x1p-133 : 0x1p-24;  // min subnormal
    for (int precise = 0; precise < 2; ++precise) {
      tj_graph_t* g;
      CHECK_OK(tj_graph_create(g_ctx, "gelu16", &g));
      tj_value_t x = tj_graph_input(g, dt, 1, (int64_t[]){n}, "x");
      tj_graph_output(g, tj_graph_gelu(g, x, false), "y");
      CHECK_OK(tj_graph_finalize(g));
      tj_compile_options_t opts = cuda_options();
      opts.cuda.precise_math = precise != 0;
      tj_executable_t* exe = NULL;
      CHECK_OK(tj_compile(g, &opts, &exe));
      if (exe) {
        tj_tensor_t in = tj_tensor_make(xs, dt, 1, (int64_t[]){n});
        tj_tensor_t out = tj_tensor_make(ys, dt, 1, (int64_t[]){n});
        CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
        int64_t misses = 0, not_nearest = 0;
        double worst_ulp = 0;
        for (int64_t i = 0; i < n; ++i) {
          double xv = dt == TJ_DTYPE_BF16 ? tj_bf16_to_f32(xs[i])
                                          : tj_f16_to_f32(xs[i]);
          double got = dt == TJ_DTYPE_BF16 ? tj_bf16_to_f32(ys[i])
                                           : tj_f16_to_f32(ys[i]);
          double want = gelu_exact(xv);
          if (isinf(xv)) {
            bool ok = xv > 0 ? isinf(got) && got > 0 : isnan(got);
            if (!ok) ++misses;
            continue;
          }
          double nearest = dt == TJ_DTYPE_BF16
                               ? tj_bf16_to_f32(tj_f64_to_bf16(want))
                               : tj_f16_to_f32(tj_f64_to_f16(want));
          int e;
          frexp(want, &e);
          double ulp = fmax(ldexp(1.0, e - eps_bits), tiny);
          double err = fabs(got - want);
          if (got != nearest) ++not_nearest;
          if (err / ulp > worst_ulp) worst_ulp = err / ulp;
          // Rounded from within 1.5e-5 |want| of want (approx), or 1e-6.
          double rel = precise ? 1e-6 : 1.5e-5;
          if (!(err <= 0.5 * ulp + rel * fabs(want)) && misses++ < 3) {
            fprintf(stderr, "  gelu %s%s(%.9g) = %.9g, exact %.9g\n",
                    tj_dtype_name(dt), precise ? " precise" : "", xv, got,
                    want);
          }
        }
        printf(
            "# gelu %s %s: %lld inputs, max %.3f ulp, %lld not the "
            "nearest (%.3f%%)\n",
            tj_dtype_name(dt), precise ? "precise" : "approx", (long long)n,
            worst_ulp, (long long)not_nearest,
            100.0 * (double)not_nearest / (double)n);
        CHECK_EQ_INT(0, misses);
        tj_executable_release(exe);
      }
      tj_graph_destroy(g);
    }
    free(xs);
    free(ys);
  }
}

//===--- the capstone ---===//

// y = gelu(x @ w + b), x: [B, 1024], w: [1024, 4096], b: [4096], exact
// (erf) gelu; ONE executable for B = 1, 7, 2048: no recompile, one kernel.
// Rows are independent: B = 2048 is checked on its first and last 16 rows
// against the reference run on those rows.
static void capstone(tj_dtype_t dt, bool device_io) {
  const int64_t K = 1024, N = 4096;
  tj_graph_t* g;
  tj_graph_t* gf;  // the same block in f32: the exact math of the inputs
  CHECK_OK(tj_graph_create(g_ctx, "capstone", &g));
  CHECK_OK(tj_graph_create(g_ctx, "capstone_f32", &gf));
  tj_graph_t* gs[2] = {g, gf};
  for (int i = 0; i < 2; ++i) {
    tj_dtype_t d = i == 0 ? dt : TJ_DTYPE_F32;
    int64_t B = tj_graph_symbol(gs[i], "B");
    tj_value_t x = tj_graph_input(gs[i], d, 2, (int64_t[]){B, K}, "x");
    tj_value_t w = tj_graph_input(gs[i], d, 2, (int64_t[]){K, N}, "w");
    tj_value_t b = tj_graph_input(gs[i], d, 1, (int64_t[]){N}, "b");
    tj_value_t mm = tj_graph_matmul(gs[i], x, w);
    tj_graph_output(
        gs[i], tj_graph_gelu(gs[i], tj_graph_add(gs[i], mm, b), false), "y");
    // The f32 graph also returns x @ w, to bound the bf16 rounding of it.
    if (i == 1) tj_graph_output(gs[i], mm, "mm");
    CHECK_OK(tj_graph_finalize(gs[i]));
  }
  tj_compile_options_t opts = cuda_options();
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  size_t es = tj_dtype_size(dt);
  void* ws = malloc((size_t)(K * N) * es);
  void* bs = malloc((size_t)N * es);
  fill(dt, ws, K * N, -0.05, 0.05);
  fill(dt, bs, N, -1, 1);
  float* wf = malloc(sizeof(float) * (size_t)(K * N));
  float* bf = malloc(sizeof(float) * (size_t)N);
  for (int64_t i = 0; i < K * N; ++i) wf[i] = (float)tj_load_f64(dt, ws, i);
  for (int64_t i = 0; i < N; ++i) bf[i] = (float)tj_load_f64(dt, bs, i);
  tj_cu_deviceptr_t dw = 0, db = 0;
  if (device_io) {
    dw = dev_upload(ws, (size_t)(K * N) * es);
    db = dev_upload(bs, (size_t)N * es);
  }
  static const int64_t kB[] = {1, 7, 2048};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kB) && exe; ++i) {
    int64_t bv = kB[i];
    void* xs = malloc((size_t)(bv * K) * es);
    void* ys = malloc((size_t)(bv * N) * es);
    fill(dt, xs, bv * K, -1, 1);
    int64_t xshape[2] = {bv, K}, yshape[2] = {bv, N};
    int64_t wshape[2] = {K, N}, bshape[1] = {N};
    tj_tensor_t in[3] = {tj_tensor_make(xs, dt, 2, xshape),
                         tj_tensor_make(ws, dt, 2, wshape),
                         tj_tensor_make(bs, dt, 1, bshape)};
    tj_tensor_t out = tj_tensor_make(ys, dt, 2, yshape);
    if (device_io) {
      tj_cu_deviceptr_t dx = dev_upload(xs, (size_t)(bv * K) * es);
      tj_cu_deviceptr_t dy = dev_upload(ys, (size_t)(bv * N) * es);
      tj_tensor_t din[3] = {on_device(in[0], dx), on_device(in[1], dw),
                            on_device(in[2], db)};
      tj_tensor_t dout = on_device(out, dy);
      CHECK_OK(tj_executable_run(exe, din, 3, &dout, 1));
      dev_download(ys, dy, (size_t)(bv * N) * es);
      CHECK_OK(tj_cuda_device_free(g_dev, dx));
      CHECK_OK(tj_cuda_device_free(g_dev, dy));
    } else {
      CHECK_OK(tj_executable_run(exe, in, 3, &out, 1));
    }
    int64_t rows = bv < 16 ? bv : 16;
    for (int part = 0; part < (bv > 16 ? 2 : 1); ++part) {
      int64_t row0 = part ? bv - rows : 0;
      int64_t sub_x[2] = {rows, K}, sub_y[2] = {rows, N};
      // The reference of the graph itself (it rounds after every op).
      void* want = malloc((size_t)(rows * N) * es);
      tj_tensor_t rin[3] = {
          tj_tensor_make((char*)xs + (size_t)(row0 * K) * es, dt, 2, sub_x),
          in[1], in[2]};
      tj_tensor_t rout = tj_tensor_make(want, dt, 2, sub_y);
      CHECK_OK(tj_reference_run(g, rin, 3, &rout, 1));
      char what[96];
      snprintf(what, sizeof(what), "capstone %s B=%lld rows@%lld",
               tj_dtype_name(dt), (long long)bv, (long long)row0);
      const void* mine = (char*)ys + (size_t)(row0 * N) * es;
      tol_t tol = dt == TJ_DTYPE_F32 ? (tol_t){2e-5, 2e-5} : tol_for(dt, 0);
      CHECK(compare(what, dt, mine, want, rows * N, tol));
      if (dt != TJ_DTYPE_F32) {
        // The exact math of these inputs, with torch's bf16 rtol.
        float* xf = malloc(sizeof(float) * (size_t)(rows * K));
        float* exact = malloc(sizeof(float) * (size_t)(rows * N));
        float* mmf = malloc(sizeof(float) * (size_t)(rows * N));
        float* minef = malloc(sizeof(float) * (size_t)(rows * N));
        for (int64_t j = 0; j < rows * K; ++j)
          xf[j] = (float)tj_load_f64(dt, xs, row0 * K + j);
        for (int64_t j = 0; j < rows * N; ++j)
          minef[j] = (float)tj_load_f64(dt, mine, j);
        tj_tensor_t fin[3] = {tj_tensor_make(xf, TJ_DTYPE_F32, 2, sub_x),
                              tj_tensor_make(wf, TJ_DTYPE_F32, 2, wshape),
                              tj_tensor_make(bf, TJ_DTYPE_F32, 1, bshape)};
        tj_tensor_t fout[2] = {tj_tensor_make(exact, TJ_DTYPE_F32, 2, sub_y),
                               tj_tensor_make(mmf, TJ_DTYPE_F32, 2, sub_y)};
        CHECK_OK(tj_reference_run(gf, fin, 3, fout, 2));
        // torch's bf16 rtol, plus what rounding x @ w to the dtype before
        // the bias (the graph's semantics, as eager PyTorch) can move the
        // result: |gelu'| <= 1.13 times one ulp of |x @ w|.
        double ulp = dt == TJ_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
        int64_t misses = 0;
        for (int64_t j = 0; j < rows * N; ++j) {
          double bound =
              1.6e-2 * fabs(exact[j]) + 1.13 * ulp * fabs(mmf[j]) + 1e-5;
          if (!(fabs(minef[j] - exact[j]) <= bound) && misses++ < 3) {
            fprintf(stderr,
                    "  capstone %s B=%lld [%lld]: %.6g, exact %.6g "
                    "(x@w %.4g)\n",
                    tj_dtype_name(dt), (long long)bv, (long long)(row0 * N + j),
                    minef[j], exact[j], mmf[j]);
          }
        }
        CHECK_EQ_INT(0, misses);
        free(xf);
        free(exact);
        free(mmf);
        free(minef);
      }
      free(want);
    }
    free(xs);
    free(ys);
  }
  if (exe) {
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    CHECK_EQ_INT(0, st.recompiles);
    CHECK_EQ_INT(1, st.num_kernels);
    CHECK_EQ_INT(0, st.num_graph_breaks);
    CHECK_EQ_INT(3, st.runs);
    tj_cuda_program_stats_t cs;
    CHECK_OK(tj_executable_cuda_stats(exe, &cs));
    printf(
        "# capstone %s (%s I/O): compile %.1f ms (PTX %zu bytes from %s, "
        "load %.1f ms), %lld graph captures, %lld graph launches; %lld "
        "buckets tuned in %.0f ms, last GEMM: %s\n",
        tj_dtype_name(dt), device_io ? "device" : "host", st.compile_ms,
        cs.ptx_bytes, cs.ptx_source, cs.load_ms, (long long)cs.graph_captures,
        (long long)cs.graph_launches, (long long)cs.tunings, cs.tuning_ms,
        cs.gemm_choice);
    // Three shapes: each run replays a captured graph, except a run that
    // made a cuBLASLt plan (launched directly; captured the next time).
    CHECK(cs.graph_captures <= 3);
    CHECK_EQ_INT(3, cs.graph_launches + cs.kernel_launches);
    tj_executable_release(exe);
  }
  if (dw) CHECK_OK(tj_cuda_device_free(g_dev, dw));
  if (db) CHECK_OK(tj_cuda_device_free(g_dev, db));
  free(ws);
  free(bs);
  free(wf);
  free(bf);
  tj_graph_destroy(g);
  tj_graph_destroy(gf);
}

TEST(capstone_bf16) { capstone(TJ_DTYPE_BF16, true); }
TEST(capstone_f32) { capstone(TJ_DTYPE_F32, false); }

//===--- CUDA graphs, the allocator ---===//

// A small MLP block: two GEMMs and a softmax, three kernels.
static tj_graph_t* block_graph(void) {
  tj_graph_t* g;
  CHECK_OK(tj_graph_create(g_ctx, "block", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){B, 256}, "x");
  tj_value_t w1 =
      tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){256, 512}, "w1");
  tj_value_t w2 =
      tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){512, 128}, "w2");
  tj_value_t h = tj_graph_gelu(g, tj_graph_matmul(g, x, w1), true);
  tj_value_t y = tj_graph_softmax(g, tj_graph_matmul(g, h, w2), -1);
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

TEST(graphs_equal_plain_launches) {
  tj_graph_t* g = block_graph();
  tj_executable_t* exe[2] = {NULL, NULL};
  for (int i = 0; i < 2; ++i) {
    tj_compile_options_t o = cuda_options();
    o.cuda.disable_graphs = i == 1;
    // The same kernels in both (the autotuner could pick differently).
    o.autotune = TJ_AUTOTUNE_OFF;
    CHECK_OK(tj_compile(g, &o, &exe[i]));
  }
  if (!exe[0] || !exe[1]) return;
  static const int64_t kB[] = {64, 3, 64, 64, 3};
  uint16_t* w1 = malloc(2 * 256 * 512);
  uint16_t* w2 = malloc(2 * 512 * 128);
  fill(TJ_DTYPE_BF16, w1, 256 * 512, -0.1, 0.1);
  fill(TJ_DTYPE_BF16, w2, 512 * 128, -0.1, 0.1);
  for (size_t r = 0; r < TJ_ARRAY_SIZE(kB); ++r) {
    int64_t B = kB[r];
    uint16_t* x = malloc((size_t)(2 * B * 256));
    uint16_t* y[2] = {malloc((size_t)(2 * B * 128)),
                      malloc((size_t)(2 * B * 128))};
    fill(TJ_DTYPE_BF16, x, B * 256, -1, 1);
    tj_tensor_t in[3] = {
        tj_tensor_make(x, TJ_DTYPE_BF16, 2, (int64_t[]){B, 256}),
        tj_tensor_make(w1, TJ_DTYPE_BF16, 2, (int64_t[]){256, 512}),
        tj_tensor_make(w2, TJ_DTYPE_BF16, 2, (int64_t[]){512, 128})};
    for (int i = 0; i < 2; ++i) {
      tj_tensor_t out =
          tj_tensor_make(y[i], TJ_DTYPE_BF16, 2, (int64_t[]){B, 128});
      CHECK_OK(tj_executable_run(exe[i], in, 3, &out, 1));
    }
    // The same kernels, launched or replayed: bitwise the same.
    CHECK(memcmp(y[0], y[1], (size_t)(2 * B * 128)) == 0);
    free(x);
    free(y[0]);
    free(y[1]);
  }
  tj_cuda_program_stats_t st[2];
  CHECK_OK(tj_executable_cuda_stats(exe[0], &st[0]));
  CHECK_OK(tj_executable_cuda_stats(exe[1], &st[1]));
  tj_executable_stats_t es = {.struct_size = sizeof(es)};
  tj_executable_stats(exe[0], &es);
  printf(
      "# block: %d kernels; graphs: %lld captures, %lld replays, %lld "
      "launches; plain: %lld launches\n",
      es.num_kernels, (long long)st[0].graph_captures,
      (long long)st[0].graph_launches, (long long)st[0].kernel_launches,
      (long long)st[1].kernel_launches);
  CHECK(es.num_kernels >= 2);
  // Two shapes; the staging arena is the same for every run of a shape.
  CHECK_EQ_INT(2, st[0].graph_captures);
  CHECK_EQ_INT(5, st[0].graph_launches);
  CHECK_EQ_INT(0, st[0].kernel_launches);
  CHECK_EQ_INT(0, st[1].graph_launches);
  CHECK_EQ_INT(5 * es.num_kernels, st[1].kernel_launches);
  tj_executable_release(exe[0]);
  tj_executable_release(exe[1]);
  free(w1);
  free(w2);
  tj_graph_destroy(g);
}

// Device buffers that change from run to run: 12 output buffers and 3
// inputs x used in turn, more keys than graph slots. A miss fills the free
// slots, then updates the least recently used graph of the same kernels
// in place; every output is bitwise the plain launches' for its x.
TEST(graphs_follow_new_buffers) {
  enum { kOuts = 12, kXs = 3, kRuns = 2 * kOuts, B = 64 };
  tj_graph_t* g = block_graph();
  tj_executable_t* exe[2] = {NULL, NULL};
  for (int i = 0; i < 2; ++i) {
    tj_compile_options_t o = cuda_options();
    o.cuda.disable_graphs = i == 1;
    o.autotune = TJ_AUTOTUNE_OFF;
    CHECK_OK(tj_compile(g, &o, &exe[i]));
  }
  if (!exe[0] || !exe[1]) {
    tj_executable_release(exe[0]);
    tj_executable_release(exe[1]);
    tj_graph_destroy(g);
    return;
  }
  const size_t x_bytes = 2 * B * 256, y_bytes = 2 * B * 128;
  uint16_t* w1 = malloc(2 * 256 * 512);
  uint16_t* w2 = malloc(2 * 512 * 128);
  uint16_t* host = malloc(x_bytes);
  uint16_t* want = malloc(kXs * y_bytes);
  uint16_t* got = malloc(y_bytes);
  fill(TJ_DTYPE_BF16, w1, 256 * 512, -0.1, 0.1);
  fill(TJ_DTYPE_BF16, w2, 512 * 128, -0.1, 0.1);
  tj_cu_deviceptr_t dw1 = dev_upload(w1, 2 * 256 * 512);
  tj_cu_deviceptr_t dw2 = dev_upload(w2, 2 * 512 * 128);
  tj_cu_deviceptr_t dx[kXs], dy[kOuts];
  for (int i = 0; i < kXs; ++i) {
    fill(TJ_DTYPE_BF16, host, B * 256, -1 - i, 1 + i);
    dx[i] = dev_upload(host, x_bytes);
  }
  // Outputs start as NaNs (0xff bytes), so a buffer a run did not write
  // shows.
  memset(got, 0xff, y_bytes);
  for (int i = 0; i < kOuts; ++i) dy[i] = dev_upload(got, y_bytes);
  tj_tensor_t in[3] = {
      tj_tensor_make(NULL, TJ_DTYPE_BF16, 2, (int64_t[]){B, 256}),
      on_device(tj_tensor_make(NULL, TJ_DTYPE_BF16, 2, (int64_t[]){256, 512}),
                dw1),
      on_device(tj_tensor_make(NULL, TJ_DTYPE_BF16, 2, (int64_t[]){512, 128}),
                dw2)};
  tj_tensor_t out = tj_tensor_make(NULL, TJ_DTYPE_BF16, 2, (int64_t[]){B, 128});
  // The plain launches' outputs, one per x.
  for (int i = 0; i < kXs; ++i) {
    in[0] = on_device(in[0], dx[i]);
    tj_tensor_t o = on_device(out, dy[0]);
    CHECK_OK(tj_executable_run(exe[1], in, 3, &o, 1));
    dev_download((unsigned char*)want + (size_t)i * y_bytes, dy[0], y_bytes);
  }
  // Every run through graphs, all outputs checked at the end (runs whose
  // buffers an earlier graph still pointed at would show here).
  for (int r = 0; r < kRuns; ++r) {
    in[0] = on_device(in[0], dx[r % kXs]);
    tj_tensor_t o = on_device(out, dy[r % kOuts]);
    CHECK_OK(tj_executable_run(exe[0], in, 3, &o, 1));
    if (r == kOuts - 1 || r == kRuns - 1) {
      for (int j = 0; j < kOuts; ++j) {
        int x = (r - kOuts + 1 + j) % kXs;  // the last run on dy[j]
        dev_download(got, dy[(r - kOuts + 1 + j) % kOuts], y_bytes);
        CHECK(memcmp(got, (unsigned char*)want + (size_t)x * y_bytes,
                     y_bytes) == 0);
      }
      memset(got, 0xff, y_bytes);
      for (int j = 0; j < kOuts; ++j)
        CHECK_OK(tj_cuda_copy_to_device(g_dev, dy[j], got, y_bytes));
      CHECK_OK(tj_cuda_device_synchronize(g_dev));
    }
  }
  tj_cuda_program_stats_t st;
  CHECK_OK(tj_executable_cuda_stats(exe[0], &st));
  printf(
      "# new buffers: %d runs, %lld captures, %lld instantiations, %lld "
      "updates, %lld graph launches, %lld kernel launches\n",
      kRuns, (long long)st.graph_captures, (long long)st.graph_instantiations,
      (long long)st.graph_updates, (long long)st.graph_launches,
      (long long)st.kernel_launches);
  // Each run a new key (its x and y pair comes back only after 12 runs,
  // when 8 slots no longer hold it): the first TJ_CUDA_MAX_GRAPHS fill the
  // slots, the rest update one.
  CHECK_EQ_INT(kRuns, st.graph_captures);
  CHECK_EQ_INT(TJ_CUDA_MAX_GRAPHS, st.graph_instantiations);
  CHECK_EQ_INT(kRuns - TJ_CUDA_MAX_GRAPHS, st.graph_updates);
  CHECK_EQ_INT(kRuns, st.graph_launches);
  CHECK_EQ_INT(0, st.kernel_launches);
  // Two buffers in turn: after the first two runs, replays only.
  tj_cuda_program_stats_t before = st;
  for (int r = 0; r < 6; ++r) {
    in[0] = on_device(in[0], dx[0]);
    tj_tensor_t o = on_device(out, dy[r % 2]);
    CHECK_OK(tj_executable_run(exe[0], in, 3, &o, 1));
  }
  CHECK_OK(tj_executable_cuda_stats(exe[0], &st));
  CHECK(st.graph_captures - before.graph_captures <= 2);
  CHECK_EQ_INT(6, st.graph_launches - before.graph_launches);
  for (int i = 0; i < 2; ++i) {
    dev_download(got, dy[i], y_bytes);
    CHECK(memcmp(got, want, y_bytes) == 0);
  }
  for (int i = 0; i < kXs; ++i) CHECK_OK(tj_cuda_device_free(g_dev, dx[i]));
  for (int i = 0; i < kOuts; ++i) CHECK_OK(tj_cuda_device_free(g_dev, dy[i]));
  CHECK_OK(tj_cuda_device_free(g_dev, dw1));
  CHECK_OK(tj_cuda_device_free(g_dev, dw2));
  free(w1);
  free(w2);
  free(host);
  free(want);
  free(got);
  tj_executable_release(exe[0]);
  tj_executable_release(exe[1]);
  tj_graph_destroy(g);
}

// Runs enqueued on the legacy default stream (CU_STREAM_LEGACY, torch's
// current stream unless the caller chose one), which cannot be captured:
// the program captures on a stream of its own and launches the graphs on
// the legacy stream, with the plain launches' numbers.
TEST(graphs_on_the_legacy_stream) {
  enum { B = 48 };
  tj_graph_t* g = block_graph();
  tj_executable_t* exe[2] = {NULL, NULL};
  for (int i = 0; i < 2; ++i) {
    tj_compile_options_t o = cuda_options();
    o.cuda.stream = (void*)(uintptr_t)1;  // CU_STREAM_LEGACY
    o.cuda.disable_graphs = i == 1;
    o.autotune = TJ_AUTOTUNE_OFF;
    CHECK_OK(tj_compile(g, &o, &exe[i]));
  }
  if (exe[0] && exe[1]) {
    uint16_t* w1 = malloc(2 * 256 * 512);
    uint16_t* w2 = malloc(2 * 512 * 128);
    uint16_t* x = malloc(2 * B * 256);
    uint16_t* y[2] = {malloc(2 * B * 128), malloc(2 * B * 128)};
    fill(TJ_DTYPE_BF16, w1, 256 * 512, -0.1, 0.1);
    fill(TJ_DTYPE_BF16, w2, 512 * 128, -0.1, 0.1);
    fill(TJ_DTYPE_BF16, x, B * 256, -1, 1);
    tj_cu_deviceptr_t dy[2] = {dev_upload(y[0], 2 * B * 128),
                               dev_upload(y[1], 2 * B * 128)};
    tj_tensor_t in[3] = {
        tj_tensor_make(x, TJ_DTYPE_BF16, 2, (int64_t[]){B, 256}),
        tj_tensor_make(w1, TJ_DTYPE_BF16, 2, (int64_t[]){256, 512}),
        tj_tensor_make(w2, TJ_DTYPE_BF16, 2, (int64_t[]){512, 128})};
    for (int r = 0; r < 4; ++r) {
      for (int i = 0; i < 2; ++i) {
        // Device outputs: a run on them returns before they are written,
        // so the download below waits for the legacy stream's work.
        tj_tensor_t out = on_device(
            tj_tensor_make(NULL, TJ_DTYPE_BF16, 2, (int64_t[]){B, 128}), dy[i]);
        CHECK_OK(tj_executable_run(exe[i], in, 3, &out, 1));
      }
      CHECK_OK(tj_cuda_device_enter(g_dev));
      CHECK_EQ_INT(0, g_dev->cu.cuStreamSynchronize(NULL));  // the legacy
      tj_cuda_device_leave(g_dev);
      dev_download(y[0], dy[0], 2 * B * 128);
      dev_download(y[1], dy[1], 2 * B * 128);
      CHECK(memcmp(y[0], y[1], 2 * B * 128) == 0);
    }
    tj_cuda_program_stats_t st;
    CHECK_OK(tj_executable_cuda_stats(exe[0], &st));
    printf(
        "# legacy stream: 4 runs, %lld captures, %lld graph launches, "
        "%lld kernel launches\n",
        (long long)st.graph_captures, (long long)st.graph_launches,
        (long long)st.kernel_launches);
    CHECK_EQ_INT(1, st.graph_captures);
    CHECK_EQ_INT(4, st.graph_launches);
    CHECK_EQ_INT(0, st.kernel_launches);
    CHECK_OK(tj_cuda_device_free(g_dev, dy[0]));
    CHECK_OK(tj_cuda_device_free(g_dev, dy[1]));
    free(w1);
    free(w2);
    free(x);
    free(y[0]);
    free(y[1]);
  }
  tj_executable_release(exe[0]);
  tj_executable_release(exe[1]);
  tj_graph_destroy(g);
}

TEST(allocator_reuse) {
  tj_graph_t* g = block_graph();
  tj_compile_options_t o = cuda_options();
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  if (!exe) return;
  uint16_t* w1 = calloc(256 * 512, 2);
  uint16_t* w2 = calloc(512 * 128, 2);
  uint16_t* x = calloc(512 * 256, 2);
  uint16_t* y = calloc(512 * 128, 2);
  tj_cuda_program_stats_t before, after;
  static const int64_t kB[] = {512, 8, 512, 100, 512};
  for (size_t r = 0; r < TJ_ARRAY_SIZE(kB); ++r) {
    int64_t B = kB[r];
    tj_tensor_t in[3] = {
        tj_tensor_make(x, TJ_DTYPE_BF16, 2, (int64_t[]){B, 256}),
        tj_tensor_make(w1, TJ_DTYPE_BF16, 2, (int64_t[]){256, 512}),
        tj_tensor_make(w2, TJ_DTYPE_BF16, 2, (int64_t[]){512, 128})};
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_BF16, 2, (int64_t[]){B, 128});
    CHECK_OK(tj_executable_run(exe, in, 3, &out, 1));
    if (r == 0) CHECK_OK(tj_executable_cuda_stats(exe, &before));
  }
  CHECK_OK(tj_executable_cuda_stats(exe, &after));
  printf(
      "# allocator: %lld driver allocs, %lld cache hits; arena %lld bytes, "
      "%lld growths over %lld runs\n",
      (long long)after.allocator.num_driver_allocs,
      (long long)after.allocator.num_cache_hits, (long long)after.arena_bytes,
      (long long)after.arena_growths, (long long)after.runs);
  // The largest shape came first: no later run allocated device memory.
  CHECK_EQ_INT(1, after.arena_growths);
  CHECK_EQ_INT(before.allocator.num_driver_allocs,
               after.allocator.num_driver_allocs);
  CHECK_EQ_INT(before.allocator.num_allocs, after.allocator.num_allocs);
  tj_executable_release(exe);
  // A second executable of the context reuses the freed arena block.
  CHECK_OK(tj_compile(g, &o, &exe));
  if (exe) {
    tj_tensor_t in[3] = {
        tj_tensor_make(x, TJ_DTYPE_BF16, 2, (int64_t[]){512, 256}),
        tj_tensor_make(w1, TJ_DTYPE_BF16, 2, (int64_t[]){256, 512}),
        tj_tensor_make(w2, TJ_DTYPE_BF16, 2, (int64_t[]){512, 128})};
    tj_tensor_t out =
        tj_tensor_make(y, TJ_DTYPE_BF16, 2, (int64_t[]){512, 128});
    CHECK_OK(tj_executable_run(exe, in, 3, &out, 1));
    tj_cuda_program_stats_t again;
    CHECK_OK(tj_executable_cuda_stats(exe, &again));
    CHECK(again.allocator.num_cache_hits > after.allocator.num_cache_hits);
    tj_executable_release(exe);
  }
  free(w1);
  free(w2);
  free(x);
  free(y);
  tj_graph_destroy(g);
}

//===--- strided device tensors ---===//

// y = x * 2 + 1 over [B, 8]: exact in f32, so every layout must give the
// reference bit for bit.
static tj_graph_t* affine_graph(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "affine", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 8}, "x");
  tj_value_t two = tj_graph_scalar(g, TJ_DTYPE_F32, 2.0);
  tj_value_t one = tj_graph_scalar(g, TJ_DTYPE_F32, 1.0);
  tj_graph_output(g, tj_graph_add(g, tj_graph_mul(g, x, two), one), "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

// Element (i, j) of a [b, 8] tensor with |strides| at element |base| of a
// float array.
static float* at(float* a, int64_t base, const int64_t* strides, int64_t i,
                 int64_t j) {
  return a + base + i * strides[0] + j * strides[1];
}

TEST(strided_device_tensors) {
  tj_graph_t* g = affine_graph(g_ctx);
  tj_compile_options_t o = cuda_options();
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  if (!exe) {
    tj_graph_destroy(g);
    return;
  }
  const int64_t b = 5;
  enum { kRaw = 2 * 5 * 8 + 16 };  // room for every layout below
  int64_t shape[2] = {b, 8};
  static const struct {
    const char* name;
    int64_t strides[2];
    int64_t base;  // element offset of (0, 0)
  } kIn[] = {
      {"column-major", {1, 5}, 0},
      {"reversed rows and columns", {-8, -1}, 39},
      {"rows broadcast (stride 0)", {0, 1}, 3},
      {"every other row, offset", {16, 1}, 5},
  };
  static const struct {
    const char* name;
    int64_t strides[2];
    int64_t base;
  } kOut[] = {
      {"dense", {8, 1}, 0},
      {"every other row, offset", {16, 1}, 7},
      {"transposed, reversed", {-1, -5}, 39},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kIn); ++i) {
    for (size_t k = 0; k < TJ_ARRAY_SIZE(kOut); ++k) {
      float xs[kRaw], ys[kRaw], dense_x[5 * 8], want[5 * 8];
      for (int e = 0; e < kRaw; ++e) xs[e] = (float)(e * 3 % 17) - 8.0f;
      for (int e = 0; e < kRaw; ++e) ys[e] = -777.0f;  // sentinel
      for (int64_t r = 0; r < b; ++r) {
        for (int64_t c = 0; c < 8; ++c) {
          dense_x[r * 8 + c] = *at(xs, kIn[i].base, kIn[i].strides, r, c);
        }
      }
      tj_cu_deviceptr_t dx = 0, dy = 0;
      CHECK_OK(tj_cuda_device_alloc(g_dev, sizeof(xs), &dx));
      CHECK_OK(tj_cuda_device_alloc(g_dev, sizeof(ys), &dy));
      CHECK_OK(tj_cuda_copy_to_device(g_dev, dx, xs, sizeof(xs)));
      CHECK_OK(tj_cuda_copy_to_device(g_dev, dy, ys, sizeof(ys)));
      CHECK_OK(tj_cuda_device_synchronize(g_dev));
      tj_tensor_t in =
          tj_tensor_make((void*)(uintptr_t)dx, TJ_DTYPE_F32, 2, shape);
      in.device_type = TJ_DEVICE_CUDA;
      in.device_id = g_dev->ordinal;
      in.strides = kIn[i].strides;
      in.byte_offset = (uint64_t)kIn[i].base * sizeof(float);
      tj_tensor_t out = in;
      out.data = (void*)(uintptr_t)dy;
      out.strides = kOut[k].strides;
      out.byte_offset = (uint64_t)kOut[k].base * sizeof(float);
      // Twice: the second run replays the captured CUDA graph.
      for (int rep = 0; rep < 2; ++rep) {
        CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
      }
      CHECK_OK(tj_cuda_copy_to_host(g_dev, ys, dy, sizeof(ys)));
      CHECK_OK(tj_cuda_device_synchronize(g_dev));
      tj_tensor_t rin = tj_tensor_make(dense_x, TJ_DTYPE_F32, 2, shape);
      tj_tensor_t rout = tj_tensor_make(want, TJ_DTYPE_F32, 2, shape);
      CHECK_OK(tj_reference_run(g, &rin, 1, &rout, 1));
      int wrong = 0, touched = 0;
      for (int64_t r = 0; r < b; ++r) {
        for (int64_t c = 0; c < 8; ++c) {
          wrong +=
              *at(ys, kOut[k].base, kOut[k].strides, r, c) != want[r * 8 + c];
        }
      }
      for (int e = 0; e < kRaw; ++e) touched += ys[e] != -777.0f;
      if (wrong || touched != b * 8)
        fprintf(stderr, "  in %s, out %s: %d wrong, %d floats written\n",
                kIn[i].name, kOut[k].name, wrong, touched);
      CHECK_EQ_INT(0, wrong);
      CHECK_EQ_INT(b * 8, touched);  // nothing outside the output's elements
      CHECK_OK(tj_cuda_device_free(g_dev, dx));
      CHECK_OK(tj_cuda_device_free(g_dev, dy));
    }
  }
  tj_cuda_program_stats_t cs;
  CHECK_OK(tj_executable_cuda_stats(exe, &cs));
  // Every run gathers its input; the non-dense outputs are scattered.
  CHECK_EQ_INT(2 * 4 * 3 + 2 * 4 * 2, cs.strided_copies);
  printf(
      "# strided device tensors: %lld gathers/scatters, %lld graph "
      "launches\n",
      (long long)cs.strided_copies, (long long)cs.graph_launches);
  // An output whose elements share memory is refused before any work.
  tj_cu_deviceptr_t d = 0;
  CHECK_OK(tj_cuda_device_alloc(g_dev, 64 * sizeof(float), &d));
  tj_tensor_t in = tj_tensor_make((void*)(uintptr_t)d, TJ_DTYPE_F32, 2, shape);
  in.device_type = TJ_DEVICE_CUDA;
  in.device_id = g_dev->ordinal;
  tj_tensor_t out = in;
  int64_t overlap[2] = {0, 1}, interleaved[2] = {4, 1};
  out.strides = overlap;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "must not overlap itself",
               tj_executable_run(exe, &in, 1, &out, 1));
  out.strides = interleaved;  // rows of 8 four elements apart
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "output \"y\"",
               tj_executable_run(exe, &in, 1, &out, 1));
  CHECK_OK(tj_cuda_device_free(g_dev, d));
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

//===--- the cubin cache ---===//

typedef struct cached_t {
  tj_executable_stats_t es;
  tj_cuda_program_stats_t cs;
  bool right;  // the run matched the reference
} cached_t;

// Compiles affine_graph in a context of its own (empty memory cache, as in
// a new process) with the disk cache in |dir|, unless |ctx| is given, and
// runs it once at B = 5.
static void compile_cached(tj_context_t* ctx, const char* dir, cached_t* r) {
  memset(r, 0, sizeof(*r));
  tj_context_t* own = NULL;
  if (!ctx) {
    CHECK_OK(tj_test_context_create(&own));
    ctx = own;
  }
  tj_graph_t* g = affine_graph(ctx);
  tj_compile_options_t o = cuda_options();
  o.cache_dir = dir;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  if (exe) {
    float xs[5 * 8], ys[5 * 8], want[5 * 8];
    fill(TJ_DTYPE_F32, xs, 5 * 8, -4, 4);
    int64_t shape[2] = {5, 8};
    tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 2, shape);
    tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 2, shape);
    tj_tensor_t ref = tj_tensor_make(want, TJ_DTYPE_F32, 2, shape);
    CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
    CHECK_OK(tj_reference_run(g, &in, 1, &ref, 1));
    r->right = memcmp(ys, want, sizeof(ys)) == 0;
    r->es.struct_size = sizeof(r->es);
    tj_executable_stats(exe, &r->es);
    CHECK_OK(tj_executable_cuda_stats(exe, &r->cs));
    tj_executable_release(exe);
  }
  tj_graph_destroy(g);
  tj_context_destroy(own);
}

// The disk cache entry holding a cubin (a payload that starts as an ELF
// file): its key and a copy of the payload (free()). False if none.
// The first entry of the disk cache in |dir| whose payload starts with
// the |magic_size| bytes of |magic|: its key and a malloc'd copy of the
// payload.
static bool find_entry(const char* dir, const char* magic, size_t magic_size,
                       tj_cache_key_t* key, void** payload, size_t* size) {
  DIR* d = opendir(dir);
  if (!d) return false;
  bool found = false;
  struct dirent* e;
  while (!found && (e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (n != 36 || strcmp(e->d_name + 32, ".tjo") != 0) continue;
    char hi[17], lo[17];
    memcpy(hi, e->d_name, 16);
    memcpy(lo, e->d_name + 16, 16);
    hi[16] = lo[16] = '\0';
    tj_cache_key_t k = {strtoull(lo, NULL, 16), strtoull(hi, NULL, 16)};
    void* bytes = NULL;
    size_t bytes_size = 0;
    bool hit = false;
    const char* why = NULL;
    CHECK_OK(tj_disk_cache_load(NULL, dir, k, tj_allocator_system(), &bytes,
                                &bytes_size, &hit, &why));
    if (hit && bytes_size > magic_size &&
        memcmp(bytes, magic, magic_size) == 0) {
      *key = k;
      *payload = malloc(bytes_size);
      memcpy(*payload, bytes, bytes_size);
      *size = bytes_size;
      found = true;
    }
    if (bytes) tj_free(tj_allocator_system(), bytes, bytes_size);
  }
  closedir(d);
  return found;
}

// The one module's caches (TJ_CUDA_COMPILE_THREADS=module: its PTX and
// its cubin by the driver's linker); cubin_cache_chunks has the chunks'.
TEST(cubin_cache) {
  setenv("TJ_CUDA_COMPILE_THREADS", "module", 1);
  char dir[] = "/tmp/tj_cuda_cubin_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  cached_t cold, again, warm, r;
  // Cold: LLVM, then the driver's linker (ptxas); PTX and cubin stored.
  compile_cached(ctx, dir, &cold);
  CHECK(cold.right);
  CHECK_STREQ("LLVM", cold.cs.ptx_source);
  CHECK_STREQ("driver linker", cold.cs.cubin_source);
  CHECK_EQ_INT(1, cold.cs.cubin_misses);
  CHECK_EQ_INT(0, cold.cs.cubin_hits);
  CHECK(cold.cs.cubin_bytes > 0);
  CHECK_EQ_INT(0, cold.es.cache_hits);
  CHECK(cold.es.cache_misses >= 1);
  // The same context: the cubin from its memory cache.
  compile_cached(ctx, dir, &again);
  CHECK(again.right);
  CHECK_STREQ("memory cache", again.cs.cubin_source);
  CHECK_EQ_INT(1, again.cs.cubin_hits);
  // A fresh context (a new process, as far as caches can tell): the cubin
  // from disk, no LLVM, no ptxas.
  compile_cached(NULL, dir, &warm);
  CHECK(warm.right);
  CHECK_STREQ("disk cache", warm.cs.cubin_source);
  CHECK_CONTAINS(warm.cs.ptx_source, "none");
  CHECK_EQ_INT(1, warm.cs.cubin_hits);
  CHECK_EQ_INT(0, warm.cs.cubin_misses);
  CHECK(warm.cs.compile_ms == 0 && warm.cs.link_ms == 0);
  CHECK_EQ_INT(cold.es.cache_misses, warm.es.cache_hits);
  CHECK_EQ_INT(0, warm.es.cache_misses);
  printf(
      "# cubin cache: cold compile %.2f ms (LLVM %.2f, ptxas %.2f), warm "
      "from disk %.2f ms (load %.2f), %zu-byte cubin\n",
      cold.es.compile_ms, cold.cs.compile_ms, cold.cs.link_ms,
      warm.es.compile_ms, warm.cs.load_ms, warm.cs.cubin_bytes);
  // A foreign, a truncated, a corrupted cubin entry, and one corrupted
  // with its checksum recomputed (its section table beyond the end: only
  // the structural check of jit/object_check.h sees it): each is a miss
  // (the cubin is made again from the cached PTX, without LLVM, and
  // rewritten), never a crash, and the next fresh context hits again.
  tj_cache_key_t key;
  void* cubin = NULL;
  size_t size = 0;
  CHECK(find_entry(dir,
                   "\x7f"
                   "ELF",
                   4, &key, &cubin, &size));
  for (int how = 0; cubin && how < 4; ++how) {
    if (how == 3) {
      unsigned char* bad = malloc(size);
      CHECK(bad != NULL && size > 64);
      if (bad) {
        memcpy(bad, cubin, size);
        uint64_t far = (uint64_t)size * 2;
        memcpy(bad + 0x28, &far, sizeof(far));  // e_shoff
        CHECK_OK(tj_disk_cache_store(dir, key, bad, size));
        free(bad);
      }
    } else if (how == 0) {
      static const char kJunk[] = "this is not a cubin, though checksummed";
      CHECK_OK(tj_disk_cache_store(dir, key, kJunk, sizeof(kJunk)));
    } else if (how == 1) {
      CHECK_OK(tj_disk_cache_store(dir, key, cubin, size / 2));
    } else {
      // Flip a byte of the file itself: the checksum no longer matches.
      char path[1200], hex[33];
      tj_cache_key_format(key, hex);
      snprintf(path, sizeof(path), "%s/%s.tjo", dir, hex);
      FILE* f = fopen(path, "r+b");
      CHECK(f != NULL);
      if (f) {
        CHECK(fseek(f, -1, SEEK_END) == 0);
        int c = fgetc(f);
        CHECK(fseek(f, -1, SEEK_END) == 0);
        fputc(c ^ 0x5a, f);
        fclose(f);
      }
    }
    compile_cached(NULL, dir, &r);
    CHECK(r.right);
    CHECK_EQ_INT(1, r.cs.cubin_misses);
    CHECK_EQ_INT(0, r.cs.cubin_hits);
    CHECK_STREQ("disk cache", r.cs.ptx_source);  // no LLVM
    CHECK_STREQ("driver linker", r.cs.cubin_source);
    compile_cached(NULL, dir, &r);
    CHECK(r.right);
    CHECK_EQ_INT(1, r.cs.cubin_hits);
    CHECK_STREQ("disk cache", r.cs.cubin_source);
  }
  // A PTX entry with a right checksum and a wrong text (and no cubin, so
  // that the PTX is needed): the driver refuses it, which is a miss: LLVM
  // compiles the module again, the run is right, and the entries are
  // rewritten, so the next fresh context hits the cubin.
  tj_cache_key_t ptx_key;
  void* ptx = NULL;
  size_t ptx_size = 0;
  CHECK(find_entry(dir, "//", 2, &ptx_key, &ptx, &ptx_size));
  if (ptx && cubin) {
    static const char kNotPtx[] = ".version 8.0\n.target sm_90a\nnot ptx;\n";
    CHECK_OK(tj_disk_cache_store(dir, ptx_key, kNotPtx, sizeof(kNotPtx)));
    char path[1200], hex[33];
    tj_cache_key_format(key, hex);
    snprintf(path, sizeof(path), "%s/%s.tjo", dir, hex);
    CHECK(unlink(path) == 0);
    compile_cached(NULL, dir, &r);
    CHECK(r.right);
    CHECK_STREQ("LLVM", r.cs.ptx_source);
    CHECK_STREQ("driver linker", r.cs.cubin_source);
    compile_cached(NULL, dir, &r);
    CHECK(r.right);
    CHECK_STREQ("disk cache", r.cs.cubin_source);
  }
  free(ptx);
  free(cubin);
  tj_context_destroy(ctx);
  char cmd[1100];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
  unsetenv("TJ_CUDA_COMPILE_THREADS");
}

// The chunks' caches (TJ_CUDA_COMPILE_THREADS=auto, issue 14): each
// chunk's cubin, made by
// nvJitLink where it is found (else the driver's linker: TJ_NVJITLINK=off
// in the second round), kept in the memory and disk caches; a fresh
// context loads them with no LLVM and no assembler; a corrupt entry is a
// miss that LLVM and the assembler make again, never a crash.
TEST(cubin_cache_chunks) {
  setenv("TJ_CUDA_COMPILE_THREADS", "auto", 1);
  for (int round = 0; round < 2; ++round) {
    if (round == 1) setenv("TJ_NVJITLINK", "off", 1);
    char dir[] = "/tmp/tj_cuda_chunks_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_test_context_create(&ctx));
    cached_t cold, again, warm, r;
    compile_cached(ctx, dir, &cold);
    CHECK(cold.right);
    CHECK_STREQ("LLVM", cold.cs.ptx_source);
    printf(
        "# chunks, round %d: cubins by %s, %u chunks on %u threads, "
        "compile %.2f ms (assembly %.2f)\n",
        round, cold.cs.cubin_source, cold.cs.chunks, cold.cs.compile_threads,
        cold.cs.compile_ms, cold.cs.link_ms);
    if (round == 1) CHECK_STREQ("driver linker", cold.cs.cubin_source);
    CHECK(strcmp(cold.cs.cubin_source, "nvJitLink") == 0 ||
          strcmp(cold.cs.cubin_source, "driver linker") == 0);
    CHECK(cold.cs.chunks >= 1);
    CHECK_EQ_INT(cold.cs.chunks, cold.cs.chunks_compiled);
    CHECK_EQ_INT(cold.cs.chunks, cold.cs.cubin_misses);
    CHECK_EQ_INT(0, cold.cs.cubin_hits);
    CHECK(cold.cs.cubin_bytes > 0);
    compile_cached(ctx, dir, &again);
    CHECK(again.right);
    CHECK_STREQ("memory cache", again.cs.cubin_source);
    CHECK_EQ_INT(again.cs.chunks, again.cs.cubin_hits);
    CHECK_EQ_INT(0, again.cs.chunks_compiled);
    compile_cached(NULL, dir, &warm);
    CHECK(warm.right);
    CHECK_STREQ("disk cache", warm.cs.cubin_source);
    CHECK_CONTAINS(warm.cs.ptx_source, "none");
    CHECK_EQ_INT(warm.cs.chunks, warm.cs.cubin_hits);
    CHECK_EQ_INT(0, warm.cs.cubin_misses);
    CHECK(warm.cs.compile_ms == 0 && warm.cs.link_ms == 0);
    tj_cache_key_t key;
    void* cubin = NULL;
    size_t size = 0;
    CHECK(find_entry(dir,
                     "\x7f"
                     "ELF",
                     4, &key, &cubin, &size));
    if (cubin) {
      static const char kJunk[] = "this is not a cubin, though checksummed";
      CHECK_OK(tj_disk_cache_store(dir, key, kJunk, sizeof(kJunk)));
      compile_cached(NULL, dir, &r);
      CHECK(r.right);
      CHECK_EQ_INT(1, r.cs.cubin_misses);
      CHECK_EQ_INT(r.cs.chunks - 1, r.cs.cubin_hits);
      CHECK_STREQ("LLVM", r.cs.ptx_source);
      compile_cached(NULL, dir, &r);
      CHECK(r.right);
      CHECK_EQ_INT(r.cs.chunks, r.cs.cubin_hits);
    }
    free(cubin);
    tj_context_destroy(ctx);
    char cmd[1100];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    unsetenv("TJ_NVJITLINK");
  }
  unsetenv("TJ_CUDA_COMPILE_THREADS");
}

// One run of affine_graph with a column-major device input (which takes
// a strided-copy kernel, compiled apart from the module) in a fresh context
// with the disk cache in |dir|; returns the CUDA stats and whether y is
// right.
static bool run_strided_cached(const char* dir, tj_cuda_program_stats_t* cs) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = affine_graph(ctx);
  tj_compile_options_t o = cuda_options();
  o.cache_dir = dir;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  bool right = false;
  memset(cs, 0, sizeof(*cs));
  if (exe) {
    float xs[5 * 8], ys[5 * 8];
    for (int e = 0; e < 40; ++e) xs[e] = (float)(e % 11) - 5.0f;
    tj_cu_deviceptr_t dx = 0, dy = 0;
    CHECK_OK(tj_cuda_device_alloc(g_dev, sizeof(xs), &dx));
    CHECK_OK(tj_cuda_device_alloc(g_dev, sizeof(ys), &dy));
    CHECK_OK(tj_cuda_copy_to_device(g_dev, dx, xs, sizeof(xs)));
    CHECK_OK(tj_cuda_device_synchronize(g_dev));
    int64_t shape[2] = {5, 8}, column_major[2] = {1, 5};
    tj_tensor_t in =
        tj_tensor_make((void*)(uintptr_t)dx, TJ_DTYPE_F32, 2, shape);
    in.device_type = TJ_DEVICE_CUDA;
    in.device_id = g_dev->ordinal;
    in.strides = column_major;
    tj_tensor_t out = in;
    out.data = (void*)(uintptr_t)dy;
    out.strides = NULL;
    CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
    CHECK_OK(tj_cuda_device_synchronize(g_dev));
    CHECK_OK(tj_cuda_copy_to_host(g_dev, ys, dy, sizeof(ys)));
    CHECK_OK(tj_cuda_device_synchronize(g_dev));
    right = true;
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t c = 0; c < 8; ++c)
        right &= ys[r * 8 + c] == 2.0f * xs[c * 5 + r] + 1.0f;
    CHECK_OK(tj_executable_cuda_stats(exe, cs));
    tj_executable_release(exe);
    CHECK_OK(tj_cuda_device_free(g_dev, dx));
    CHECK_OK(tj_cuda_device_free(g_dev, dy));
  }
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return right;
}

// Kernels compiled apart from the module go through the cubin cache too:
// a second process (here a fresh context) compiles none of them.
TEST(kernel_cubin_cache) {
  char dir[] = "/tmp/tj_cuda_kernel_cubin_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  tj_cuda_program_stats_t cold, warm;
  CHECK(run_strided_cached(dir, &cold));
  CHECK(cold.kernel_cubin_misses >= 1);
  CHECK_EQ_INT(0, cold.kernel_cubin_hits);
  CHECK(run_strided_cached(dir, &warm));
  CHECK_EQ_INT(cold.kernel_cubin_misses, warm.kernel_cubin_hits);
  CHECK_EQ_INT(0, warm.kernel_cubin_misses);
  CHECK_EQ_INT(1, warm.cubin_hits);
  // Without a disk cache nothing is counted (and nothing is stored).
  tj_cuda_program_stats_t none;
  CHECK(run_strided_cached("", &none));
  CHECK_EQ_INT(0, none.kernel_cubin_hits + none.kernel_cubin_misses);
  char cmd[1100];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
}

// The driver's specialization on CUDA (it used to ignore |specialize|):
// under ALWAYS every new shape gets its own program, exact-shape kernels
// in a module of their own, and gives the reference results; under
// AFTER_N (2) the second run of a shape makes it; NEVER makes none. (The
// gather was a graph break between the kernels; it is a kernel now.)
static tj_graph_t* specialize_graph(void) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, "specialized", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 64}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){64, 32}, "w");
  tj_value_t idx = tj_graph_input(g, TJ_DTYPE_I32, 1, (int64_t[]){2}, "idx");
  tj_value_t y = tj_graph_tanh(g, tj_graph_matmul(g, x, w));
  tj_graph_output(g, y, "y");
  tj_graph_output(g, tj_graph_gather(g, tj_graph_exp(g, x), idx, 1), "g");
  tj_graph_output(g, tj_graph_sum(g, x, 1, (int32_t[]){1}, false), "s");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static void specialize_run(tj_executable_t* exe, const tj_graph_t* g,
                           int64_t B) {
  float* x = malloc(sizeof(float) * (size_t)(B * 64 + 1));
  float* w = malloc(sizeof(float) * 64 * 32);
  int32_t idx[2] = {63, 1};
  fill(TJ_DTYPE_F32, x, B * 64, -1, 1);
  fill(TJ_DTYPE_F32, w, 64 * 32, -0.2, 0.2);
  int64_t xs[2] = {B, 64}, ws[2] = {64, 32}, is[1] = {2}, ys[2] = {B, 32},
          gs[2] = {B, 2}, ss[1] = {B};
  tj_tensor_t in[3] = {tj_tensor_make(x, TJ_DTYPE_F32, 2, xs),
                       tj_tensor_make(w, TJ_DTYPE_F32, 2, ws),
                       tj_tensor_make(idx, TJ_DTYPE_I32, 1, is)};
  int64_t n[3] = {B * 32, B * 2, B};
  float* got[3];
  float* want[3];
  for (int i = 0; i < 3; ++i) {
    got[i] = calloc((size_t)n[i] + 1, sizeof(float));
    want[i] = calloc((size_t)n[i] + 1, sizeof(float));
  }
  tj_tensor_t out[3] = {tj_tensor_make(got[0], TJ_DTYPE_F32, 2, ys),
                        tj_tensor_make(got[1], TJ_DTYPE_F32, 2, gs),
                        tj_tensor_make(got[2], TJ_DTYPE_F32, 1, ss)};
  tj_tensor_t ref[3] = {tj_tensor_make(want[0], TJ_DTYPE_F32, 2, ys),
                        tj_tensor_make(want[1], TJ_DTYPE_F32, 2, gs),
                        tj_tensor_make(want[2], TJ_DTYPE_F32, 1, ss)};
  CHECK_OK(tj_executable_run(exe, in, 3, out, 3));
  CHECK_OK(tj_reference_run(g, in, 3, ref, 3));
  static const char* const kNames[3] = {"specialize y", "specialize g",
                                        "specialize s"};
  for (int i = 0; i < 3; ++i) {
    CHECK(compare(kNames[i], TJ_DTYPE_F32, got[i], want[i], n[i],
                  tol_for(TJ_DTYPE_F32, 1e-4)));
    free(got[i]);
    free(want[i]);
  }
  free(x);
  free(w);
}

TEST(specialize) {
  tj_graph_t* g = specialize_graph();
  static const tj_specialize_t kPolicies[3] = {
      TJ_SPECIALIZE_ALWAYS, TJ_SPECIALIZE_AFTER_N, TJ_SPECIALIZE_NEVER};
  static const int64_t kB[] = {3, 5, 3, 1, 5};
  static const int kRecompiles[3] = {3, 2, 0};  // B = 3, 5, 1 / 3, 5 / none
  for (int p = 0; p < 3; ++p) {
    tj_compile_options_t o = cuda_options();
    o.specialize = kPolicies[p];
    o.specialize_after = 2;
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &o, &exe));
    if (!exe) continue;
    for (size_t r = 0; r < TJ_ARRAY_SIZE(kB); ++r) {
      specialize_run(exe, g, kB[r]);
    }
    tj_executable_stats_t es = {.struct_size = sizeof(es)};
    tj_executable_stats(exe, &es);
    printf(
        "# specialize policy %d: %d kernels, %d graph breaks, %lld "
        "recompiles, %lld hits + %lld misses\n",
        (int)kPolicies[p], es.num_kernels, es.num_graph_breaks,
        (long long)es.recompiles, (long long)es.cache_hits,
        (long long)es.cache_misses);
    CHECK_EQ_INT(kRecompiles[p], (int)es.recompiles);
    CHECK_EQ_INT(0, es.num_graph_breaks);  // gather is a kernel now
    CHECK_EQ_INT((int)TJ_ARRAY_SIZE(kB), (int)es.runs);
    // Every program's kernels count once, from a cache or compiled.
    CHECK_EQ_INT((int)(es.num_kernels * (1 + es.recompiles)),
                 (int)(es.cache_hits + es.cache_misses));
    tj_executable_release(exe);
  }
  // tj_executable_prepare under ALWAYS makes the shape's program.
  tj_compile_options_t o = cuda_options();
  o.specialize = TJ_SPECIALIZE_ALWAYS;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  if (exe) {
    int64_t xs[2] = {9, 64}, ws[2] = {64, 32}, is[1] = {2};
    tj_tensor_t in[3] = {tj_tensor_make(NULL, TJ_DTYPE_F32, 2, xs),
                         tj_tensor_make(NULL, TJ_DTYPE_F32, 2, ws),
                         tj_tensor_make(NULL, TJ_DTYPE_I32, 1, is)};
    CHECK_OK(tj_executable_prepare(exe, in, 3));
    specialize_run(exe, g, 9);
    tj_executable_stats_t es = {.struct_size = sizeof(es)};
    tj_executable_stats(exe, &es);
    CHECK_EQ_INT(1, (int)es.recompiles);
    tj_executable_release(exe);
  }
  tj_graph_destroy(g);
}

TEST(errors) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, "errors", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 8}, "x");
  tj_graph_output(g, tj_graph_exp(g, x), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t o = cuda_options();
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  if (exe) {
    float host[32] = {0};
    tj_cu_deviceptr_t d = dev_upload(host, sizeof(host));
    int64_t shape[2] = {4, 8}, strides[2] = {1, 4};
    tj_tensor_t in = on_device(tj_tensor_make(host, TJ_DTYPE_F32, 2, shape), d);
    tj_tensor_t out = tj_tensor_make(host, TJ_DTYPE_F32, 2, shape);
    tj_tensor_t bad = in;
    bad.device_id = 7;
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "device 7",
                 tj_executable_run(exe, &bad, 1, &out, 1));
    bad = in;
    bad.device_type = (tj_device_type_t)9;
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "neither CPU nor CUDA",
                 tj_executable_run(exe, &bad, 1, &out, 1));
    // A strided CUDA input is gathered on the device (it used to be
    // refused): exp(0) lands in |host| all the same.
    bad = in;
    bad.strides = strides;
    CHECK_OK(tj_executable_run(exe, &bad, 1, &out, 1));
    CHECK(host[0] == 1.0f && host[31] == 1.0f);
    memset(host, 0, sizeof(host));
    // A device input with a CPU output: exp(0) lands in |host|.
    CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
    CHECK(host[0] == 1.0f);
    CHECK_OK(tj_cuda_device_free(g_dev, d));
    tj_executable_release(exe);
  }
  o.cuda.device = 99;
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "drives CUDA device",
               tj_compile(g, &o, &exe));
  tj_graph_destroy(g);
}
//===--- background autotuning ---===//

typedef struct bg_log_t {
  pthread_mutex_t mutex;
  char text[32768];
  size_t length;
} bg_log_t;

static void bg_capture(tj_severity_t severity, const char* message,
                       size_t length, void* user_data) {
  (void)severity;
  bg_log_t* log = user_data;
  pthread_mutex_lock(&log->mutex);
  if (log->length + length + 2 < sizeof(log->text)) {
    memcpy(log->text + log->length, message, length);
    log->length += length;
    log->text[log->length++] = '\n';
    log->text[log->length] = '\0';
  }
  pthread_mutex_unlock(&log->mutex);
}

static bool bg_logged(bg_log_t* log, const char* needle) {
  pthread_mutex_lock(&log->mutex);
  bool found = strstr(log->text, needle) != NULL;
  pthread_mutex_unlock(&log->mutex);
  return found;
}

// gelu(x @ w + b) in bf16, x [B, 256], w [256, 192].
static tj_graph_t* bg_graph(tj_context_t* ctx) {
  tj_graph_t* g;
  CHECK_OK(tj_graph_create(ctx, "bgtune", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){B, 256}, "x");
  tj_value_t w =
      tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){256, 192}, "w");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_BF16, 1, (int64_t[]){192}, "b");
  tj_graph_output(
      g, tj_graph_gelu(g, tj_graph_add(g, tj_graph_matmul(g, x, w), b), false),
      "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static tj_executable_t* bg_compile(tj_graph_t* g, tj_autotune_t autotune,
                                   const char* dir) {
  tj_compile_options_t o = cuda_options();
  o.autotune = autotune;
  o.cache_dir = dir;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  return exe;
}

// TJ_AUTOTUNE_BACKGROUND: the first run of a bucket is autotune off's,
// bit for bit, and queues the candidates' compile; after
// tj_context_wait_autotune the next run times them (logged "swapped in")
// and matches the reference; releasing an executable with its job queued
// or running, and destroying the context with a job queued, are clean.
TEST(background_tuning) {
  char dir[] = "/tmp/tj_cuda_bgtune_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  static bg_log_t log;
  memset(&log, 0, sizeof(log));
  pthread_mutex_init(&log.mutex, NULL);
  tj_context_options_t co = tj_test_context_options();
  co.log = "autotune";
  co.diagnostic_fn = bg_capture;
  co.diagnostic_user_data = &log;
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&co, &ctx));
  tj_graph_t* g = bg_graph(ctx);
  tj_executable_t* off = bg_compile(g, TJ_AUTOTUNE_OFF, dir);
  tj_executable_t* bg = bg_compile(g, TJ_AUTOTUNE_BACKGROUND, dir);
  const int64_t B = 300;
  size_t es = 2;
  void* xs = malloc((size_t)(B * 256) * es);
  void* ws = malloc((size_t)(256 * 192) * es);
  void* bs = malloc(192 * es);
  void* y_off = malloc((size_t)(B * 192) * es);
  void* y_bg = malloc((size_t)(B * 192) * es);
  void* want = malloc((size_t)(B * 192) * es);
  fill(TJ_DTYPE_BF16, xs, B * 256, -1, 1);
  fill(TJ_DTYPE_BF16, ws, 256 * 192, -0.1, 0.1);
  fill(TJ_DTYPE_BF16, bs, 192, -1, 1);
  int64_t xshape[2] = {B, 256}, wshape[2] = {256, 192}, bshape[1] = {192},
          yshape[2] = {B, 192};
  tj_tensor_t in[3] = {tj_tensor_make(xs, TJ_DTYPE_BF16, 2, xshape),
                       tj_tensor_make(ws, TJ_DTYPE_BF16, 2, wshape),
                       tj_tensor_make(bs, TJ_DTYPE_BF16, 1, bshape)};
  tj_tensor_t out_off = tj_tensor_make(y_off, TJ_DTYPE_BF16, 2, yshape);
  tj_tensor_t out_bg = tj_tensor_make(y_bg, TJ_DTYPE_BF16, 2, yshape);
  tj_tensor_t out_want = tj_tensor_make(want, TJ_DTYPE_BF16, 2, yshape);
  CHECK_OK(tj_reference_run(g, in, 3, &out_want, 1));
  CHECK_OK(tj_executable_run(off, in, 3, &out_off, 1));
  CHECK_OK(tj_executable_run(bg, in, 3, &out_bg, 1));
  CHECK(memcmp(y_off, y_bg, (size_t)(B * 192) * es) == 0);
  CHECK(bg_logged(&log, "queued to compile in the background"));
  tj_cuda_program_stats_t cs;
  CHECK_OK(tj_executable_cuda_stats(bg, &cs));
  CHECK_EQ_INT(0, cs.tunings);
  tj_context_wait_autotune(ctx);
  CHECK(bg_logged(&log, "background job finished"));
  CHECK(!bg_logged(&log, "swapped in"));
  CHECK_OK(tj_executable_run(bg, in, 3, &out_bg, 1));
  CHECK(bg_logged(&log, "swapped in"));
  CHECK_OK(tj_executable_cuda_stats(bg, &cs));
  CHECK_EQ_INT(1, cs.tunings);
  printf("# background tuning: %s after %.0f ms of timing\n", cs.gemm_choice,
         cs.tuning_ms);
  CHECK(compare("background-tuned capstone", TJ_DTYPE_BF16, y_bg, want, B * 192,
                tol_for(TJ_DTYPE_BF16, 0)));
  CHECK_OK(tj_executable_run(bg, in, 3, &out_bg, 1));
  CHECK_OK(tj_executable_cuda_stats(bg, &cs));
  CHECK_EQ_INT(1, cs.tunings);
  CHECK(compare("background-tuned capstone, again", TJ_DTYPE_BF16, y_bg, want,
                B * 192, tol_for(TJ_DTYPE_BF16, 0)));
  {
    // Another context on the same disk cache: the decision is cached, so
    // its job compiles the winner alone (none when the module's kernel
    // won), and the run after it takes the decision without timing.
    static bg_log_t log2;
    memset(&log2, 0, sizeof(log2));
    pthread_mutex_init(&log2.mutex, NULL);
    tj_context_options_t co2 = co;
    co2.diagnostic_user_data = &log2;
    tj_context_t* ctx2 = NULL;
    CHECK_OK(tj_context_create(&co2, &ctx2));
    tj_graph_t* g2 = bg_graph(ctx2);
    tj_executable_t* warm = bg_compile(g2, TJ_AUTOTUNE_BACKGROUND, dir);
    CHECK_OK(tj_executable_run(warm, in, 3, &out_bg, 1));
    CHECK(memcmp(y_off, y_bg, (size_t)(B * 192) * es) == 0);
    CHECK(bg_logged(&log2, "the cached decision's"));
    CHECK(bg_logged(&log2, ": 1 candidate kernels queued") ||
          bg_logged(&log2, ": 0 candidate kernels queued"));
    tj_context_wait_autotune(ctx2);
    CHECK_OK(tj_executable_run(warm, in, 3, &out_bg, 1));
    tj_cuda_program_stats_t ws2;
    CHECK_OK(tj_executable_cuda_stats(warm, &ws2));
    CHECK_EQ_INT(1, ws2.tunings);
    CHECK_EQ_INT(1, ws2.tuning_cache_hits);
    CHECK(strcmp(ws2.gemm_choice, cs.gemm_choice) == 0);
    CHECK(compare("capstone tuned from the cache in the background",
                  TJ_DTYPE_BF16, y_bg, want, B * 192,
                  tol_for(TJ_DTYPE_BF16, 0)));
    tj_executable_release(warm);
    tj_graph_destroy(g2);
    tj_context_destroy(ctx2);
    pthread_mutex_destroy(&log2.mutex);
  }
  tj_executable_release(bg);
  // Released with its job queued or running (a new bucket, no cache).
  tj_executable_t* early = bg_compile(g, TJ_AUTOTUNE_BACKGROUND, "");
  CHECK_OK(tj_executable_run(early, in, 3, &out_bg, 1));
  tj_executable_release(early);
  // The context destroyed with a job queued, the executable released
  // after it; its later runs serve the default kernel, or tune in place.
  tj_executable_t* late = bg_compile(g, TJ_AUTOTUNE_BACKGROUND, "");
  CHECK_OK(tj_executable_run(late, in, 3, &out_bg, 1));
  tj_executable_release(off);
  tj_graph_destroy(g);  // graphs go before their context
  tj_context_destroy(ctx);
  CHECK_OK(tj_executable_run(late, in, 3, &out_bg, 1));
  CHECK(compare("capstone after tj_context_destroy", TJ_DTYPE_BF16, y_bg, want,
                B * 192, tol_for(TJ_DTYPE_BF16, 0)));
  tj_executable_release(late);
  free(xs);
  free(ws);
  free(bs);
  free(y_off);
  free(y_bg);
  free(want);
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
}

int main(void) {
  // Counts of compiled kernels must not depend on earlier runs: no disk
  // cache in any context here (tj_test_context_options).
  CHECK_OK(tj_test_context_create(&g_ctx));
  // Skips (exit 77) without a driver or GPU; tj_compile must then say
  // UNSUPPORTED too.
  tj_compile_options_t o = cuda_options();
  if (tj_test_cuda_unsupported(g_ctx, &o)) {
    tj_context_destroy(g_ctx);
    return TJ_TEST_EXIT_SKIP;
  }
  g_dev = tj_test_open_device_or_skip();
  g_be = (tj_cts_backend_t){"cuda", TJ_TARGET_CUDA, g_ctx, NULL, NULL, NULL};
  RUN_TEST(gemm_candidates);
  RUN_TEST(split_k_candidates);
  RUN_TEST(tf32_candidates);
  RUN_TEST(f32_cublaslt_candidate);
  RUN_TEST(math_accuracy);
  RUN_TEST(gelu_half_accuracy);
  RUN_TEST(capstone_bf16);
  RUN_TEST(capstone_f32);
  RUN_TEST(graphs_equal_plain_launches);
  RUN_TEST(graphs_follow_new_buffers);
  RUN_TEST(graphs_on_the_legacy_stream);
  RUN_TEST(allocator_reuse);
  RUN_TEST(strided_device_tensors);
  RUN_TEST(cubin_cache);
  RUN_TEST(cubin_cache_chunks);
  RUN_TEST(kernel_cubin_cache);
  RUN_TEST(specialize);
  RUN_TEST(errors);
  RUN_TEST(background_tuning);
  g_test_checks += tj_cts_checks;
  g_test_failures += tj_cts_failures;
  tj_cuda_device_destroy(g_dev);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
