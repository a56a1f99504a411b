// The capstone block y = gelu(x @ w + b) on the GPU through the public API
// (tj_compile with TJ_TARGET_CUDA, device tensors, the bench's stream),
// beside cuBLASLt (matmul alone, + bias, + bias+GELU epilogue) in the same
// process; the host overhead of a run with and without CUDA graphs; compile
// time cold and warm from the disk cache. Timings: CUDA events on one
// stream, mean of N runs after warm-up. Prints a table; never a pass/fail.
// The autotuned rows print their first run's wall time (it tunes); the
// background row (TJ_AUTOTUNE_BACKGROUND) prints its first run's, the
// runs' while the candidates compile (default kernel) against the tuned
// steady state, the rest of the job's time and the run that times.
//
//   cuda_capstone [--quick] [--f32] [--splitk] [--out FILE]
//
// --f32 runs only the f32 block, at B = 2048 and 16384, with allow_tf32
// rows (ours autotuned with TF32 allowed; cuBLASLt in its TF32 mode).
//
// --splitk runs only y = x @ w + b on shapes of small M x N and long K
// (issue 13's split-K), bf16 and exact f32: ours with each GEMM candidate
// that matters there forced (the fused kernel, split-K 2, 4 and 8) and
// autotuned, beside cuBLASLt's matmul + bias; each figure the median of 5
// samples (each a mean of N runs), with their range.
//
// --out writes "key value" lines that bench/torch_capstone.py reads to
// print ratios beside torch eager and torch.compile.

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/cuda/cublaslt.h"
#include "backends/cuda/cuda_executable.h"
#include "bench/cuda_bench_util.h"
#include "lib/dtype.h"

static tj_cuda_device_t* g_dev;
static tj_context_t* g_ctx;
static tj_cublaslt_t* g_lt;
static FILE* g_out;
static int g_iters = 50;

static double wall_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static void record(const char* key, double value) {
  if (g_out) fprintf(g_out, "%s %.6g\n", key, value);
}

//===--- timing ---===//

typedef bench_work_fn work_fn;

// Mean GPU time of |fn| on the bench's stream, in ms, after 3 warm-ups.
static double time_ms(work_fn fn, void* ctx, int iters) {
  return bench_mean_ms(g_dev, fn, ctx, 3, iters, false);
}

static tj_cu_deviceptr_t dev_random(tj_dtype_t dt, int64_t n, double scale) {
  return bench_dev_random(g_dev, dt, n, -scale / 2, scale / 2,
                          88172645463325252ull ^ (uint64_t)n);
}

static tj_tensor_t dev_tensor(tj_cu_deviceptr_t p, tj_dtype_t dt, int32_t rank,
                              const int64_t* shape) {
  return bench_dev_tensor(g_dev, p, dt, rank, shape);
}

//===--- the capstone ---===//

static tj_graph_t* capstone_graph(tj_dtype_t dt, int64_t K, int64_t N,
                                  bool approximate) {
  tj_graph_t* g;
  bench_die(tj_graph_create(g_ctx, "capstone", &g), "graph");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, dt, 2, (int64_t[]){B, K}, "x");
  tj_value_t w = tj_graph_input(g, dt, 2, (int64_t[]){K, N}, "w");
  tj_value_t b = tj_graph_input(g, dt, 1, (int64_t[]){N}, "b");
  tj_graph_output(g, tj_graph_gelu(g, tj_graph_linear(g, x, w, b), approximate),
                  "y");
  bench_die(tj_graph_finalize(g), "finalize");
  return g;
}

// Set while compiling the background-tuned row: TJ_AUTOTUNE_BACKGROUND
// instead of ON.
static bool g_background;

static tj_executable_t* compile_cuda(const tj_graph_t* g, bool graphs,
                                     bool precise, bool tune, bool tf32,
                                     const char* cache_dir) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.cuda.stream = g_dev->stream;
  o.cuda.disable_graphs = !graphs;
  o.cuda.precise_math = precise;
  o.cuda.allow_tf32 = tf32;
  o.autotune = tune ? TJ_AUTOTUNE_ON : TJ_AUTOTUNE_OFF;
  if (tune && g_background) o.autotune = TJ_AUTOTUNE_BACKGROUND;
  o.cache_dir = cache_dir;
  tj_executable_t* exe = NULL;
  bench_die(tj_compile(g, &o, &exe), "tj_compile");
  return exe;
}

typedef struct ours_t {
  tj_executable_t* exe;
  tj_tensor_t in[3], out;
} ours_t;

static void run_ours(void* ctx) {
  ours_t* o = ctx;
  bench_die(tj_executable_run(o->exe, o->in, 3, &o->out, 1), "run");
}

typedef struct lt_run_t {
  tj_cublaslt_gemm_t* gemm;
  tj_cu_deviceptr_t x, w, b, y, ws;
} lt_run_t;

static void run_lt(void* ctx) {
  lt_run_t* r = ctx;
  bench_die(tj_cuda_device_enter(g_dev), "enter");
  bench_die(tj_cublaslt_gemm_run(r->gemm, r->x, r->w, r->b, r->y, r->ws,
                                 g_dev->stream),
            "cublasLt");
  tj_cuda_device_leave(g_dev);
}

static double max_abs_diff(tj_dtype_t dt, tj_cu_deviceptr_t a,
                           tj_cu_deviceptr_t b, int64_t n) {
  size_t bytes = (size_t)n * tj_dtype_size(dt);
  void* ha = malloc(bytes);
  void* hb = malloc(bytes);
  bench_die(tj_cuda_device_synchronize(g_dev), "sync");
  bench_die(tj_cuda_copy_to_host(g_dev, ha, a, bytes), "copy");
  bench_die(tj_cuda_copy_to_host(g_dev, hb, b, bytes), "copy");
  bench_die(tj_cuda_device_synchronize(g_dev), "sync");
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = fabs(tj_load_f64(dt, ha, i) - tj_load_f64(dt, hb, i));
    if (d > worst || isnan(d)) worst = d;
  }
  free(ha);
  free(hb);
  return worst;
}

static void capstone(tj_dtype_t dt, int64_t B, int64_t K, int64_t N) {
  const char* dn = tj_dtype_name(dt);
  tj_cu_deviceptr_t x = dev_random(dt, B * K, 2.0);
  tj_cu_deviceptr_t w = dev_random(dt, K * N, 0.1);
  tj_cu_deviceptr_t b = dev_random(dt, N, 2.0);
  size_t ybytes = (size_t)(B * N) * tj_dtype_size(dt);
  tj_cu_deviceptr_t y, y_lt;
  bench_die(tj_cuda_device_alloc(g_dev, ybytes, &y), "alloc");
  bench_die(tj_cuda_device_alloc(g_dev, ybytes, &y_lt), "alloc");
  int64_t xs[2] = {B, K}, ws[2] = {K, N}, bs[1] = {N}, ys[2] = {B, N};
  double flop = 2.0 * (double)B * (double)K * (double)N;
  printf("\n%s gelu(x @ w + b), B=%lld K=%lld N=%lld (%.1f GFLOP)\n", dn,
         (long long)B, (long long)K, (long long)N, flop * 1e-9);
  printf("  %-44s %9s %9s\n", "", "ms", "TFLOP/s");
  struct {
    const char* name;
    const char* key;
    bool approximate, graphs, precise, tune, tf32, background;
  } kOurs[] = {
      {"ours gelu erf, autotuned, CUDA graph", "ours_erf", false, true, false,
       true, false, false},
      {"ours gelu erf, autotuned in the background", "ours_bg", false, true,
       false, true, false, true},
      {"ours fused 1 kernel (autotune off)", "ours_fused", false, true, false,
       false, false, false},
      {"ours fused, plain launches", "ours_fused_plain", false, false, false,
       false, false, false},
      {"ours fused, precise math", "ours_fused_precise", false, true, true,
       false, false, false},
      {"ours gelu erf, autotuned, allow_tf32", "ours_tf32", false, true, false,
       true, true, false},
      {"ours gelu tanh, autotuned (as cuBLASLt's)", "ours_tanh", true, true,
       false, true, false, false},
  };
  char key[96];
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kOurs); ++i) {
    if (kOurs[i].tf32 && dt != TJ_DTYPE_F32) continue;
    tj_graph_t* g = capstone_graph(dt, K, N, kOurs[i].approximate);
    ours_t o;
    g_background = kOurs[i].background;
    o.exe = compile_cuda(g, kOurs[i].graphs, kOurs[i].precise, kOurs[i].tune,
                         kOurs[i].tf32, "");
    g_background = false;
    o.in[0] = dev_tensor(x, dt, 2, xs);
    o.in[1] = dev_tensor(w, dt, 2, ws);
    o.in[2] = dev_tensor(b, dt, 1, bs);
    o.out = dev_tensor(y, dt, 2, ys);
    // The first run tunes the GEMM for this bucket (unless cached).
    double t0 = wall_us();
    run_ours(&o);
    bench_die(tj_cuda_device_synchronize(g_dev), "sync");
    double first_ms = (wall_us() - t0) * 1e-3;
    // Background: the first run served the default kernel and queued the
    // candidates' compile; the runs until it ends are the default's, then
    // one run times them. Their wall times, the job's wait and the
    // timing run, before the steady state below.
    double during_ms = 0, wait_ms = 0, timing_run_ms = 0;
    if (kOurs[i].background) {
      during_ms = time_ms(run_ours, &o, g_iters);
      t0 = wall_us();
      tj_context_wait_autotune(g_ctx);
      wait_ms = (wall_us() - t0) * 1e-3;
      t0 = wall_us();
      run_ours(&o);
      bench_die(tj_cuda_device_synchronize(g_dev), "sync");
      timing_run_ms = (wall_us() - t0) * 1e-3;
    }
    double ms = time_ms(run_ours, &o, g_iters);
    tj_cuda_program_stats_t cs;
    bench_die(tj_executable_cuda_stats(o.exe, &cs), "stats");
    printf("  %-44s %9.4f %9.1f", kOurs[i].name, ms, flop / ms * 1e-9);
    if (kOurs[i].background) {
      printf(
          "   [%s; first run %.1f ms, runs while compiling %.4f ms (%.2fx "
          "tuned), job %.0f ms more, timing run %.0f ms]",
          cs.gemm_choice, first_ms, during_ms, during_ms / ms, wait_ms,
          timing_run_ms);
      snprintf(key, sizeof(key), "ours_bg_first_run_%s_B%lld_ms", dn,
               (long long)B);
      record(key, first_ms);
      snprintf(key, sizeof(key), "ours_bg_timing_run_%s_B%lld_ms", dn,
               (long long)B);
      record(key, timing_run_ms);
    } else if (kOurs[i].tune) {
      printf("   [%s; first run %.0f ms%s]", cs.gemm_choice, first_ms,
             cs.tuning_cache_hits ? ", decision cached" : "");
      if (!kOurs[i].tf32 && !kOurs[i].approximate) {
        snprintf(key, sizeof(key), "ours_sync_first_run_%s_B%lld_ms", dn,
                 (long long)B);
        record(key, first_ms);
      }
    }
    printf("\n");
    snprintf(key, sizeof(key), "%s_%s_B%lld_ms", kOurs[i].key, dn,
             (long long)B);
    record(key, ms);
    tj_executable_release(o.exe);
    tj_graph_destroy(g);
  }
  if (!g_lt) return;
  struct {
    const char* name;
    const char* key;
    tj_cublaslt_epilogue_t epilogue;
    bool tf32;
  } kLt[] = {
      {"cuBLASLt matmul alone", "cublas_matmul", TJ_CUBLASLT_EPILOGUE_NONE,
       false},
      {"cuBLASLt matmul + bias", "cublas_bias", TJ_CUBLASLT_EPILOGUE_BIAS,
       false},
      {"cuBLASLt TF32 matmul alone", "cublas_tf32_matmul",
       TJ_CUBLASLT_EPILOGUE_NONE, true},
      {"cuBLASLt TF32 matmul + bias + gelu(tanh)", "cublas_tf32_bias_gelu",
       TJ_CUBLASLT_EPILOGUE_BIAS_GELU, true},
      {"cuBLASLt matmul + bias + gelu(tanh) epilogue", "cublas_bias_gelu",
       TJ_CUBLASLT_EPILOGUE_BIAS_GELU, false},
  };
  size_t ws_bytes = 32u << 20;
  tj_cu_deviceptr_t workspace;
  bench_die(tj_cuda_device_alloc(g_dev, ws_bytes, &workspace), "alloc");
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kLt); ++i) {
    if (kLt[i].tf32 && dt != TJ_DTYPE_F32) continue;
    lt_run_t r = {NULL, x, w, b, y_lt, workspace};
    tj_status_t s = tj_cublaslt_gemm_plan_tf32(
        g_lt, dt, kLt[i].tf32, B, N, K, kLt[i].epilogue, ws_bytes, &r.gemm);
    if (s) {
      printf("  %-44s %s\n", kLt[i].name, tj_status_message(s));
      tj_status_free(s);
      continue;
    }
    double ms = time_ms(run_lt, &r, g_iters);
    printf("  %-44s %9.4f %9.1f\n", kLt[i].name, ms, flop / ms * 1e-9);
    snprintf(key, sizeof(key), "%s_%s_B%lld_ms", kLt[i].key, dn, (long long)B);
    record(key, ms);
    if (kLt[i].epilogue == TJ_CUBLASLT_EPILOGUE_BIAS_GELU) {
      // y still holds ours with the tanh gelu (the last of kOurs).
      printf("  max |ours tanh - cuBLASLt| = %.3g\n",
             max_abs_diff(dt, y, y_lt, B * N));
    }
    tj_cublaslt_gemm_destroy(r.gemm);
  }
  bench_die(tj_cuda_device_free(g_dev, workspace), "free");
  bench_die(tj_cuda_device_free(g_dev, x), "free");
  bench_die(tj_cuda_device_free(g_dev, w), "free");
  bench_die(tj_cuda_device_free(g_dev, b), "free");
  bench_die(tj_cuda_device_free(g_dev, y), "free");
  bench_die(tj_cuda_device_free(g_dev, y_lt), "free");
}

//===--- split-K (issue 13) ---===//

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

// Median of 5 samples of time_ms, and their range.
static double median_ms(work_fn fn, void* ctx, double* lo, double* hi) {
  double t[5];
  for (int i = 0; i < 5; ++i) t[i] = time_ms(fn, ctx, g_iters);
  qsort(t, 5, sizeof(double), cmp_double);
  *lo = t[0];
  *hi = t[4];
  return t[2];
}

static void splitk(tj_dtype_t dt, int64_t M, int64_t K, int64_t N) {
  const char* dn = tj_dtype_name(dt);
  tj_cu_deviceptr_t x = dev_random(dt, M * K, 2.0);
  tj_cu_deviceptr_t w = dev_random(dt, K * N, 0.1);
  tj_cu_deviceptr_t b = dev_random(dt, N, 2.0);
  size_t ybytes = (size_t)(M * N) * tj_dtype_size(dt);
  tj_cu_deviceptr_t y, y_ref, y_lt;
  bench_die(tj_cuda_device_alloc(g_dev, ybytes, &y), "alloc");
  bench_die(tj_cuda_device_alloc(g_dev, ybytes, &y_ref), "alloc");
  bench_die(tj_cuda_device_alloc(g_dev, ybytes, &y_lt), "alloc");
  int64_t xs[2] = {M, K}, ws[2] = {K, N}, bs[1] = {N}, ys[2] = {M, N};
  double flop = 2.0 * (double)M * (double)K * (double)N;
  printf("\n%s x @ w + b, (M, K, N) = (%lld, %lld, %lld)\n", dn, (long long)M,
         (long long)K, (long long)N);
  printf("  %-34s %9s %19s %8s %10s\n", "", "ms", "range", "TFLOP/s",
         "max diff");
  static const struct {
    const char* name;
    const char* forced;  // cuda_gemm_candidate; NULL: autotuned
  } kOurs[] = {
      {"ours fused kernel (candidate 0)", "0"},
      {"ours split-k 2 (candidate 12)", "12"},
      {"ours split-k 4 (candidate 13)", "13"},
      {"ours split-k 8 (candidate 14)", "14"},
      {"ours autotuned", NULL},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kOurs); ++i) {
    tj_context_options_t co;
    tj_context_options_initialize(&co);
    co.cuda_gemm_candidate = kOurs[i].forced;
    tj_context_t* ctx = NULL;
    bench_die(tj_context_create(&co, &ctx), "context");
    tj_graph_t* g;
    bench_die(tj_graph_create(ctx, "linear", &g), "graph");
    tj_value_t vx = tj_graph_input(g, dt, 2, xs, "x");
    tj_value_t vw = tj_graph_input(g, dt, 2, ws, "w");
    tj_value_t vb = tj_graph_input(g, dt, 1, bs, "b");
    tj_graph_output(g, tj_graph_linear(g, vx, vw, vb), "y");
    bench_die(tj_graph_finalize(g), "finalize");
    ours_t o;
    o.exe = compile_cuda(g, true, false, kOurs[i].forced == NULL, false, "");
    o.in[0] = dev_tensor(x, dt, 2, xs);
    o.in[1] = dev_tensor(w, dt, 2, ws);
    o.in[2] = dev_tensor(b, dt, 1, bs);
    o.out = dev_tensor(i == 0 ? y_ref : y, dt, 2, ys);
    run_ours(&o);
    bench_die(tj_cuda_device_synchronize(g_dev), "sync");
    double lo, hi;
    double ms = median_ms(run_ours, &o, &lo, &hi);
    tj_cuda_program_stats_t cs;
    bench_die(tj_executable_cuda_stats(o.exe, &cs), "stats");
    printf("  %-34s %9.4f %9.4f-%-9.4f %8.1f %10.3g   [%s]\n", kOurs[i].name,
           ms, lo, hi, flop / ms * 1e-9,
           i == 0 ? 0.0 : max_abs_diff(dt, y, y_ref, M * N), cs.gemm_choice);
    char key[96];
    snprintf(key, sizeof(key), "splitk_%s_%s_%lld_%lld_%lld_ms",
             kOurs[i].forced ? kOurs[i].forced : "tuned", dn, (long long)M,
             (long long)K, (long long)N);
    record(key, ms);
    tj_executable_release(o.exe);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
  }
  if (g_lt) {
    size_t ws_bytes = 32u << 20;
    tj_cu_deviceptr_t workspace;
    bench_die(tj_cuda_device_alloc(g_dev, ws_bytes, &workspace), "alloc");
    lt_run_t r = {NULL, x, w, b, y_lt, workspace};
    tj_status_t s = tj_cublaslt_gemm_plan_tf32(
        g_lt, dt, false, M, N, K, TJ_CUBLASLT_EPILOGUE_BIAS, ws_bytes, &r.gemm);
    if (s) {
      printf("  cuBLASLt: %s\n", tj_status_message(s));
      tj_status_free(s);
    } else {
      double lo, hi;
      double ms = median_ms(run_lt, &r, &lo, &hi);
      printf("  %-34s %9.4f %9.4f-%-9.4f %8.1f %10.3g\n",
             "cuBLASLt matmul + bias", ms, lo, hi, flop / ms * 1e-9,
             max_abs_diff(dt, y_lt, y_ref, M * N));
      tj_cublaslt_gemm_destroy(r.gemm);
    }
    bench_die(tj_cuda_device_free(g_dev, workspace), "free");
  }
  tj_cu_deviceptr_t bufs[] = {x, w, b, y, y_ref, y_lt};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(bufs); ++i)
    bench_die(tj_cuda_device_free(g_dev, bufs[i]), "free");
}

//===--- host overhead of a run ---===//

static void overhead(void) {
  tj_graph_t* g;
  bench_die(tj_graph_create(g_ctx, "tiny", &g), "graph");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){256}, "x");
  tj_value_t y = tj_graph_add(g, tj_graph_mul(g, x, x), x);
  tj_value_t z =
      tj_graph_exp(g, tj_graph_neg(g, tj_graph_sum(g, y, 0, NULL, true)));
  tj_graph_output(g, tj_graph_mul(g, y, z), "y");  // 2 kernels
  bench_die(tj_graph_finalize(g), "finalize");
  tj_cu_deviceptr_t dx = dev_random(TJ_DTYPE_F32, 256, 1.0);
  tj_cu_deviceptr_t dy;
  bench_die(tj_cuda_device_alloc(g_dev, 1024, &dy), "alloc");
  int64_t shape[1] = {256};
  float hx[256], hy[256];
  for (int i = 0; i < 256; ++i) hx[i] = (float)i / 256.0f;
  printf("\nhost overhead of tj_executable_run, tiny graph (f32[256]):\n");
  const int n = 5000;
  for (int graphs = 1; graphs >= 0; --graphs) {
    tj_executable_t* exe = compile_cuda(g, graphs != 0, false, true, false, "");
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    tj_tensor_t in = dev_tensor(dx, TJ_DTYPE_F32, 1, shape);
    tj_tensor_t out = dev_tensor(dy, TJ_DTYPE_F32, 1, shape);
    for (int i = 0; i < 20; ++i)
      bench_die(tj_executable_run(exe, &in, 1, &out, 1), "run");
    bench_die(tj_cuda_device_synchronize(g_dev), "sync");
    double t0 = wall_us();
    for (int i = 0; i < n; ++i)
      bench_die(tj_executable_run(exe, &in, 1, &out, 1), "run");
    double enqueue = (wall_us() - t0) / n;
    bench_die(tj_cuda_device_synchronize(g_dev), "sync");
    double total = (wall_us() - t0) / n;
    // CPU tensors: copies in and out, and a wait each run.
    tj_tensor_t hin = tj_tensor_make(hx, TJ_DTYPE_F32, 1, shape);
    tj_tensor_t hout = tj_tensor_make(hy, TJ_DTYPE_F32, 1, shape);
    for (int i = 0; i < 20; ++i)
      bench_die(tj_executable_run(exe, &hin, 1, &hout, 1), "run");
    t0 = wall_us();
    for (int i = 0; i < n / 5; ++i)
      bench_die(tj_executable_run(exe, &hin, 1, &hout, 1), "run");
    double host_io = (wall_us() - t0) / (n / 5);
    printf(
        "  %-22s %d kernels: %6.2f us/run to enqueue, %6.2f us/run "
        "end to end; CPU tensors %6.2f us/run\n",
        graphs ? "CUDA graph replay" : "plain launches", st.num_kernels,
        enqueue, total, host_io);
    record(graphs ? "overhead_graph_us" : "overhead_plain_us", enqueue);
    record(graphs ? "overhead_graph_e2e_us" : "overhead_plain_e2e_us", total);
    record(graphs ? "overhead_graph_cpu_io_us" : "overhead_plain_cpu_io_us",
           host_io);
    tj_executable_release(exe);
  }
  bench_die(tj_cuda_device_free(g_dev, dx), "free");
  bench_die(tj_cuda_device_free(g_dev, dy), "free");
  tj_graph_destroy(g);
}

//===--- compile time ---===//

static void compile_time(void) {
  char dir[] = "/tmp/tj_cuda_capstone_XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return;
  }
  printf("\ncompile time, bf16 capstone (1 kernel):\n");
  const char* what[] = {"cold (LLVM -> PTX, store)", "warm (disk cache)",
                        "warm (memory cache)"};
  const char* keys[] = {"compile_cold_ms", "compile_disk_ms",
                        "compile_memory_ms"};
  tj_context_t* saved = g_ctx;
  for (int i = 0; i < 3; ++i) {
    // A new context has an empty memory cache; the third reuses one.
    tj_context_t* ctx = NULL;
    if (i < 2) {
      bench_die(tj_context_create(NULL, &ctx), "context");
      g_ctx = ctx;
    } else {
      g_ctx = saved;
    }
    tj_graph_t* g = capstone_graph(TJ_DTYPE_BF16, 1024, 4096, false);
    if (i == 2) {
      tj_executable_release(compile_cuda(g, true, false, true, false, dir));
    }
    tj_executable_t* exe = compile_cuda(g, true, false, true, false, dir);
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    tj_cuda_program_stats_t cs;
    bench_die(tj_executable_cuda_stats(exe, &cs), "stats");
    printf(
        "  %-28s %8.2f ms (PTX from %s: LLVM %.2f ms, driver load %.2f "
        "ms)\n",
        what[i], st.compile_ms, cs.ptx_source, cs.compile_ms, cs.load_ms);
    record(keys[i], st.compile_ms);
    tj_executable_release(exe);
    tj_graph_destroy(g);
    if (ctx) tj_context_destroy(ctx);
  }
  g_ctx = saved;
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(int argc, char** argv) {
  bool quick = false, f32_only = false, splitk_only = false;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) quick = true;
    if (strcmp(argv[i], "--splitk") == 0) splitk_only = true;
    if (strcmp(argv[i], "--f32") == 0) f32_only = true;
    if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
      g_out = fopen(argv[++i], "w");
    }
  }
  if (quick) g_iters = 10;
  tj_status_t s = tj_cuda_device_create(tj_allocator_system(), NULL, &g_dev);
  if (s) {
    printf("no GPU: %s\n", tj_status_message(s));
    tj_status_free(s);
    return 0;
  }
  bench_die(tj_context_create(NULL, &g_ctx), "context");
  s = tj_cublaslt_open(tj_allocator_system(), &g_lt);
  if (s) {
    printf("# %s\n", tj_status_message(s));
    tj_status_free(s);
  }
  printf("# %s, sm_%d%d, %d SMs, driver %d, %s\n", g_dev->name, g_dev->sm_major,
         g_dev->sm_minor, g_dev->num_sms, g_dev->cu.driver_version,
         g_lt ? tj_cublaslt_version(g_lt) : "no cuBLASLt");
  if (splitk_only) {
    static const int64_t kShapes[][3] = {
        {1024, 3072, 768}, {256, 4096, 1024}, {512, 8192, 512}};
    for (size_t i = 0; i < TJ_ARRAY_SIZE(kShapes); ++i) {
      splitk(TJ_DTYPE_BF16, kShapes[i][0], kShapes[i][1], kShapes[i][2]);
      splitk(TJ_DTYPE_F32, kShapes[i][0], kShapes[i][1], kShapes[i][2]);
    }
  } else if (f32_only) {
    capstone(TJ_DTYPE_F32, 2048, 1024, 4096);
    capstone(TJ_DTYPE_F32, 16384, 1024, 4096);
  } else {
    capstone(TJ_DTYPE_BF16, 2048, 1024, 4096);
    if (!quick) capstone(TJ_DTYPE_BF16, 16384, 1024, 4096);
    capstone(TJ_DTYPE_F32, 2048, 1024, 4096);
    overhead();
    compile_time();
  }
  tj_cublaslt_close(g_lt);
  tj_context_destroy(g_ctx);
  tj_cuda_device_destroy(g_dev);
  if (g_out) fclose(g_out);
  return 0;
}
