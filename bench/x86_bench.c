// The x86 backend's benchmark table (the x86 JIT issue): every figure is
// ours beside the alternative measured in the same run, as a ratio, median
// of --reps runs, with 1 and 2 threads.
//
//   - fused pointwise triad y = b + s*c vs a STREAM triad loop compiled with
//     -O3 -march=native; softmax and layer_norm rows in GB/s;
//   - f32 GEMM (M,K,N) = (2048,1024,4096), (256,1024,4096), (1024,1024,1024)
//     vs OpenBLAS cblas_sgemm (dlopen'd);
//   - the capstone gelu(x@w+b), B = 256 and 2048: generic kernel vs the
//     exact-shape specialization vs OpenBLAS matmul alone (numpy eager is
//     printed by bench/capstone_bench);
//   - compile time cold and warm (a fresh process loading the disk cache);
//     run overhead of a tiny graph.
//
// Compare against OpenBLAS at its best: run as
//   (unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; build/bench/x86_bench)

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/stream_triad.h"
#include "tensorjit.h"

static int g_reps = 7;
// The pause before the first B = 1 run of the "after a pause" figure:
// longer than the background build of the small-M paths (~60 ms).
#define PAUSE_MS 150

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int compare_doubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), compare_doubles);
  return v[n / 2];
}

static void check(tj_status_t status, const char* what) {
  if (!status) return;
  fprintf(stderr, "x86_bench: %s: %s\n", what, tj_status_message(status));
  tj_status_free(status);
  exit(1);
}

static float* make_data(int64_t n, uint32_t seed, float scale) {
  float* p = aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64));
  if (!p) exit(1);
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = scale * ((float)(seed >> 8) / 16777216.0f - 0.5f);
  }
  return p;
}

//===--- OpenBLAS through dlopen ---===//

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float*, int,
                         const float*, int, float, float*, int);
static sgemm_fn g_sgemm;
static void (*g_set_threads)(int);
static char* (*g_corename)(void);

static void load_openblas(void) {
  void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!h) return;
  g_sgemm = (sgemm_fn)(uintptr_t)dlsym(h, "cblas_sgemm");
  g_set_threads =
      (void (*)(int))(uintptr_t)dlsym(h, "openblas_set_num_threads");
  g_corename = (char* (*)(void))(uintptr_t)dlsym(h, "openblas_get_corename");
}

static double openblas_ms(int threads, int64_t m, int64_t k, int64_t n,
                          const float* a, const float* b, float* c) {
  if (!g_sgemm || !g_set_threads) return NAN;
  g_set_threads(threads);
  double t[64];
  g_sgemm(101, 111, 111, (int)m, (int)n, (int)k, 1.0f, a, (int)k, b, (int)n,
          0.0f, c, (int)n);
  for (int r = 0; r < g_reps; ++r) {
    double s = now_ms();
    g_sgemm(101, 111, 111, (int)m, (int)n, (int)k, 1.0f, a, (int)k, b, (int)n,
            0.0f, c, (int)n);
    t[r] = now_ms() - s;
  }
  return median(t, g_reps);
}

//===--- our executables ---===//

static tj_context_t* g_ctx;

static tj_executable_t* compile_graph(tj_graph_t* g, int threads,
                                      tj_specialize_t specialize) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.x86.num_threads = threads;
  o.specialize = specialize;
  tj_executable_t* exe = NULL;
  check(tj_compile(g, &o, &exe), "tj_compile");
  return exe;
}

static double run_ms(tj_executable_t* exe, const tj_tensor_t* in, int nin,
                     const tj_tensor_t* out, int nout) {
  double t[64];
  check(tj_executable_run(exe, in, nin, out, nout), "run");
  for (int r = 0; r < g_reps; ++r) {
    double s = now_ms();
    check(tj_executable_run(exe, in, nin, out, nout), "run");
    t[r] = now_ms() - s;
  }
  return median(t, g_reps);
}

static tj_graph_t* new_graph(const char* name) {
  tj_graph_t* g = NULL;
  check(tj_graph_create(g_ctx, name, &g), "graph");
  return g;
}

//===--- sections ---===//

static void bench_triad(void) {
  const int64_t n = (int64_t)1 << 24;  // 64 MiB per array
  float* b = make_data(n, 1, 1.0f);
  float* c = make_data(n, 2, 1.0f);
  float* a = make_data(n, 3, 1.0f);
  tj_graph_t* g = new_graph("triad");
  tj_value_t vb = tj_graph_input(g, TJ_DTYPE_F32, 1, &n, "b");
  tj_value_t vc = tj_graph_input(g, TJ_DTYPE_F32, 1, &n, "c");
  tj_graph_output(
      g,
      tj_graph_add(g, vb,
                   tj_graph_mul(g, tj_graph_scalar(g, TJ_DTYPE_F32, 3.0), vc)),
      "a");
  check(tj_graph_finalize(g), "finalize");
  tj_tensor_t in[2] = {tj_tensor_make(b, TJ_DTYPE_F32, 1, &n),
                       tj_tensor_make(c, TJ_DTYPE_F32, 1, &n)};
  tj_tensor_t out = tj_tensor_make(a, TJ_DTYPE_F32, 1, &n);
  printf(
      "\n== pointwise triad a = b + 3c, f32[2^24] (GB/s: 12 bytes/elem) ==\n");
  printf("  %7s %12s %14s %8s\n", "threads", "ours GB/s", "stream -O3 GB/s",
         "ratio");
  for (int threads = 1; threads <= 2; ++threads) {
    tj_executable_t* exe = compile_graph(g, threads, TJ_SPECIALIZE_NEVER);
    double ours = run_ms(exe, in, 2, &out, 1);
    double t[64];
    stream_triad(a, b, c, 3.0f, n, threads);
    for (int r = 0; r < g_reps; ++r) {
      double s = now_ms();
      stream_triad(a, b, c, 3.0f, n, threads);
      t[r] = now_ms() - s;
    }
    double ref = median(t, g_reps);
    double bytes = 12.0 * (double)n;
    printf("  %7d %12.1f %14.1f %7.2fx\n", threads, bytes / ours / 1e6,
           bytes / ref / 1e6, ref / ours);
    tj_executable_release(exe);
  }
  tj_graph_destroy(g);
  free(a);
  free(b);
  free(c);
}

static void bench_rows(void) {
  const int64_t rows = 8192, cols = 4096;
  int64_t shape[2] = {rows, cols};
  float* x = make_data(rows * cols, 4, 4.0f);
  float* y = make_data(rows * cols, 5, 1.0f);
  printf("\n== row kernels, f32[%lld,%lld] (GB/s: read x + write y) ==\n",
         (long long)rows, (long long)cols);
  printf("  %-11s %7s %10s\n", "kernel", "threads", "GB/s");
  for (int which = 0; which < 2; ++which) {
    tj_graph_t* g = new_graph(which ? "layer_norm" : "softmax");
    tj_value_t vx = tj_graph_input(g, TJ_DTYPE_F32, 2, shape, "x");
    tj_value_t vy = which ? tj_graph_layer_norm(g, vx, tj_value_none(),
                                                tj_value_none(), 1e-5)
                          : tj_graph_softmax(g, vx, -1);
    tj_graph_output(g, vy, "y");
    check(tj_graph_finalize(g), "finalize");
    tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 2, shape);
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, shape);
    for (int threads = 1; threads <= 2; ++threads) {
      tj_executable_t* exe = compile_graph(g, threads, TJ_SPECIALIZE_NEVER);
      double ms = run_ms(exe, &in, 1, &out, 1);
      printf("  %-11s %7d %10.1f\n", which ? "layer_norm" : "softmax", threads,
             8.0 * (double)(rows * cols) / ms / 1e6);
      tj_executable_release(exe);
    }
    tj_graph_destroy(g);
  }
  free(x);
  free(y);
}

static void bench_gemm(void) {
  const int64_t shapes[3][3] = {
      {2048, 1024, 4096}, {256, 1024, 4096}, {1024, 1024, 1024}};
  printf("\n== f32 GEMM vs OpenBLAS cblas_sgemm (core %s) ==\n",
         g_corename ? g_corename() : "unavailable");
  printf("  %6s %6s %6s %7s %10s %10s %12s %8s\n", "M", "K", "N", "threads",
         "ours ms", "GFLOP/s", "OpenBLAS ms", "ratio");
  for (int s = 0; s < 3; ++s) {
    int64_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
    float* a = make_data(m * k, 6, 1.0f);
    float* b = make_data(k * n, 7, 1.0f);
    float* c = make_data(m * n, 8, 1.0f);
    tj_graph_t* g = new_graph("gemm");
    tj_value_t va = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){m, k}, "a");
    tj_value_t vb = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){k, n}, "b");
    tj_graph_output(g, tj_graph_matmul(g, va, vb), "c");
    check(tj_graph_finalize(g), "finalize");
    int64_t as[2] = {m, k}, bs[2] = {k, n}, cs[2] = {m, n};
    tj_tensor_t in[2] = {tj_tensor_make(a, TJ_DTYPE_F32, 2, as),
                         tj_tensor_make(b, TJ_DTYPE_F32, 2, bs)};
    tj_tensor_t out = tj_tensor_make(c, TJ_DTYPE_F32, 2, cs);
    for (int threads = 1; threads <= 2; ++threads) {
      tj_executable_t* exe = compile_graph(g, threads, TJ_SPECIALIZE_NEVER);
      double ours = run_ms(exe, in, 2, &out, 1);
      double blas = openblas_ms(threads, m, k, n, a, b, c);
      printf("  %6lld %6lld %6lld %7d %10.2f %10.1f %12.2f %7.2fx\n",
             (long long)m, (long long)k, (long long)n, threads, ours,
             2.0 * (double)(m * k * n) / ours / 1e6, blas, blas / ours);
      tj_executable_release(exe);
    }
    tj_graph_destroy(g);
    free(a);
    free(b);
    free(c);
  }
}

static tj_graph_t* capstone_graph(void) {
  tj_graph_t* g = new_graph("block");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 1024}, "x");
  tj_value_t w =
      tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){1024, 4096}, "w");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4096}, "b");
  tj_graph_output(g, tj_graph_gelu(g, tj_graph_linear(g, x, w, b), true), "y");
  check(tj_graph_finalize(g), "finalize");
  return g;
}

static void bench_capstone(void) {
  tj_graph_t* g = capstone_graph();
  float* w = make_data(1024 * 4096, 9, 0.06f);
  float* bias = make_data(4096, 10, 1.0f);
  printf("\n== capstone gelu(x@w+b) f32, K=1024 N=4096 ==\n");
  printf("  %5s %7s %11s %15s %12s %13s %13s\n", "B", "threads", "generic ms",
         "specialized ms", "generic/spec", "OpenBLAS mm", "ours/OpenBLAS");
  for (int bi = 0; bi < 2; ++bi) {
    int64_t nb = bi ? 2048 : 256;
    float* x = make_data(nb * 1024, 11, 2.0f);
    float* y = make_data(nb * 4096, 12, 1.0f);
    int64_t xs[2] = {nb, 1024}, ws[2] = {1024, 4096}, bs[1] = {4096},
            ys[2] = {nb, 4096};
    tj_tensor_t in[3] = {tj_tensor_make(x, TJ_DTYPE_F32, 2, xs),
                         tj_tensor_make(w, TJ_DTYPE_F32, 2, ws),
                         tj_tensor_make(bias, TJ_DTYPE_F32, 1, bs)};
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, ys);
    for (int threads = 1; threads <= 2; ++threads) {
      tj_executable_t* gen = compile_graph(g, threads, TJ_SPECIALIZE_NEVER);
      tj_executable_t* spec = compile_graph(g, threads, TJ_SPECIALIZE_ALWAYS);
      double tg = run_ms(gen, in, 3, &out, 1);
      double ts = run_ms(spec, in, 3, &out, 1);
      double blas = openblas_ms(threads, nb, 1024, 4096, x, w, y);
      printf("  %5lld %7d %11.2f %15.2f %12.3f %13.2f %13.3f\n", (long long)nb,
             threads, tg, ts, tg / ts, blas, tg / blas);
      tj_executable_release(gen);
      tj_executable_release(spec);
    }
    free(x);
    free(y);
  }
  free(w);
  free(bias);
  tj_graph_destroy(g);
}

// Compiles the capstone with the disk cache in g_ctx's cache_dir; prints the
// ms, the cache hits, and the ms of the first run at B = 1, |pause_ms| after
// the compile. That run needs the small-M GEMM paths the compile deferred and
// started building in the background: with no pause it waits for that
// build (a game's first frame right after loading), with one it finds them
// built (a first frame some time after loading). The inputs are made
// before the compile, so that only the pause separates it from the run.
static int compile_only(int pause_ms) {
  tj_graph_t* g = capstone_graph();
  float* x = make_data(1024, 1, 1.0f);
  float* w = make_data(1024 * 4096, 2, 0.05f);
  float* b = make_data(4096, 3, 1.0f);
  float* y = make_data(4096, 4, 1.0f);
  int64_t xs[2] = {1, 1024}, ws[2] = {1024, 4096}, bs[1] = {4096},
          ys[2] = {1, 4096};
  tj_tensor_t in[3] = {tj_tensor_make(x, TJ_DTYPE_F32, 2, xs),
                       tj_tensor_make(w, TJ_DTYPE_F32, 2, ws),
                       tj_tensor_make(b, TJ_DTYPE_F32, 1, bs)};
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, ys);
  double s = now_ms();
  tj_executable_t* exe = compile_graph(g, 0, TJ_SPECIALIZE_NEVER);
  double ms = now_ms() - s;
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  if (pause_ms > 0) usleep((useconds_t)pause_ms * 1000);
  double r = now_ms();
  check(tj_executable_run(exe, in, 3, &out, 1), "run");
  double first = now_ms() - r;
  printf("%.3f %lld %.3f\n", ms, (long long)st.cache_hits, first);
  free(x);
  free(w);
  free(b);
  free(y);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  return 0;
}

static void bench_compile_and_overhead(void) {
  char dir[64];
  snprintf(dir, sizeof(dir), "/tmp/tj-x86-bench-%d", (int)getpid());
  char command[512];
  double cold[16], warm[16], cold_run[16], warm_run[16], paused_run[16];
  int reps = g_reps < 16 ? g_reps : 16;
  for (int r = 0; r < reps; ++r) {
    // Cold: an empty cache directory, fresh process; warm: same directory.
    // Then cold again, with a pause before the first run.
    snprintf(command, sizeof(command),
             "rm -rf '%s' && '/proc/%d/exe' --compile-only '%s' && "
             "'/proc/%d/exe' --compile-only '%s' && rm -rf '%s' && "
             "'/proc/%d/exe' --compile-only '%s' %d",
             dir, (int)getpid(), dir, (int)getpid(), dir, dir, (int)getpid(),
             dir, PAUSE_MS);
    FILE* p = popen(command, "r");
    long long hits0 = -1, hits1 = -1, hits2 = -1;
    double cold2 = NAN;
    if (!p || fscanf(p, "%lf %lld %lf %lf %lld %lf %lf %lld %lf", &cold[r],
                     &hits0, &cold_run[r], &warm[r], &hits1, &warm_run[r],
                     &cold2, &hits2, &paused_run[r]) != 9) {
      cold[r] = warm[r] = cold_run[r] = warm_run[r] = paused_run[r] = NAN;
    }
    if (p) pclose(p);
  }
  snprintf(command, sizeof(command), "rm -rf '%s'", dir);
  if (system(command) != 0)
    fprintf(stderr, "x86_bench: cannot remove %s\n", dir);
  printf("\n== compile time of the capstone (fresh process each) ==\n");
  printf("  cold (LLVM):             %8.2f ms   (goal < 200 ms)\n",
         median(cold, reps));
  printf("  warm (disk cache):       %8.2f ms   (goal < 2 ms)\n",
         median(warm, reps));
  // The small-M GEMM paths are compiled (or loaded) in the background
  // from the end of tj_compile: a B = 1 run right after it waits for the
  // rest of that build, one PAUSE_MS later finds it done. B >= 17 never
  // needs them.
  printf("  first run at B=1 right after the cold compile: %8.2f ms\n",
         median(cold_run, reps));
  printf("  first run at B=1 right after the warm compile: %8.2f ms\n",
         median(warm_run, reps));
  printf("  first run at B=1 %d ms after the cold compile: %8.2f ms\n",
         PAUSE_MS, median(paused_run, reps));

  tj_graph_t* g = new_graph("tiny");
  int64_t four = 4;
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, &four, "x");
  tj_graph_output(g, tj_graph_add(g, x, tj_graph_scalar(g, TJ_DTYPE_F32, 1.0)),
                  "y");
  check(tj_graph_finalize(g), "finalize");
  tj_executable_t* exe = compile_graph(g, 1, TJ_SPECIALIZE_NEVER);
  float xs[4] = {1, 2, 3, 4}, ys[4];
  tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 1, &four);
  tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 1, &four);
  double t[16];
  const int calls = 100000;
  for (int r = 0; r < reps; ++r) {
    double s = now_ms();
    for (int i = 0; i < calls; ++i) {
      check(tj_executable_run(exe, &in, 1, &out, 1), "run");
    }
    t[r] = (now_ms() - s) * 1e3 / calls;
  }
  printf("  run overhead, tiny graph: %7.3f us   (goal < 2 us)\n",
         median(t, reps));
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

int main(int argc, char** argv) {
  if ((argc == 3 || argc == 4) && !strcmp(argv[1], "--compile-only")) {
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.cache_dir = argv[2];  // the default of every compile in g_ctx
    check(tj_context_create(&o, &g_ctx), "context");
    int rc = compile_only(argc == 4 ? atoi(argv[3]) : 0);
    tj_context_destroy(g_ctx);
    return rc;
  }
  const char* only = NULL;
  static const char kUsage[] =
      "usage: x86_bench [--reps N] [--only triad|rows|gemm|capstone|compile]\n"
      "  TJ_X86_ISA=avx2|sse2 times a lower ISA tier; compare it with\n"
      "  OpenBLAS's kernels of that ISA (OPENBLAS_CORETYPE=Zen or Haswell)\n";
  for (int i = 1; i < argc; i += 2) {
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(kUsage, stdout);
      return 0;
    } else if (!strcmp(argv[i], "--reps") && v) {
      g_reps = atoi(v);
    } else if (!strcmp(argv[i], "--only") && v) {
      only = v;
    } else {
      fputs(kUsage, stderr);
      return 2;
    }
  }
  if (g_reps < 1 || g_reps > 64) g_reps = 7;
  load_openblas();
  check(tj_context_create(NULL, &g_ctx), "context");
  char cpu[256] = "?\n";
  FILE* info = popen("lscpu | sed -n 's/^Model name: *//p'", "r");
  if (info) {
    if (!fgets(cpu, sizeof(cpu), info)) strcpy(cpu, "?\n");
    pclose(info);
  }
  cpu[strcspn(cpu, "\n")] = '\0';
  // Other work on the host skews every figure (shared/BENCHMARKING.md):
  // print the load average beside them.
  double load[3] = {-1, -1, -1};
  if (getloadavg(load, 3) != 3) load[0] = load[1] = load[2] = -1;
  printf(
      "x86_bench: libtensorjit %s, %ld CPUs, %s, medians of %d runs, load "
      "%.2f %.2f %.2f\n",
      tj_version_string(), sysconf(_SC_NPROCESSORS_ONLN), cpu, g_reps, load[0],
      load[1], load[2]);
  if (!only || !strcmp(only, "triad")) bench_triad();
  if (!only || !strcmp(only, "rows")) bench_rows();
  if (!only || !strcmp(only, "gemm")) bench_gemm();
  if (!only || !strcmp(only, "capstone")) bench_capstone();
  if (!only || !strcmp(only, "compile")) bench_compile_and_overhead();
  tj_context_destroy(g_ctx);
  return 0;
}
