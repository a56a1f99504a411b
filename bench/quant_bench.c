// Weight-only quantized matmul (qfold, issue 17): y = x @ W with W
// [K, N] constant, as f32 (our GEMM), int8 per output channel and int4 per
// group of 128 (tj_graph_quantize_weights of the same graph: the x86 GEMM
// reads the quantized bytes and dequantizes in registers), beside the int8
// GEMM (matmul_i32, u8 x s8 -> i32, both operands 8-bit) and OpenBLAS
// cblas_sgemm (dlopen'ed, never linked) measured in the same run. Decode
// shapes M = 1, 4, 16 and a prefill M = 256, N = K = 4096. Each figure is
// the median of |runs| (default 5) timed runs after a warm-up, with the
// spread (min..max); one thread unless QUANT_BENCH_THREADS says more.
// Decode shapes cycle through copies of the weights (distinct memory,
// each copy its own executable or buffer) totalling at least
// QUANT_BENCH_COLD_MB (default 256; 0: one copy), so that no format's
// weights are read from the last-level cache where another's cannot be
// (this VM's L3 is 32 MB: int8's 16 MB and int4's 8.5 MB fit, f32's 64 MB
// does not).
//
//   usage: quant_bench [runs]
//   QUANT_BENCH_ISA=avx2|sse2 forces a lower tier.
//   QUANT_BENCH_CLOCK=cpu times each run in the calling thread's CPU time
//   instead of wall time (one thread only): on a machine shared with
//   other work, a run longer than the scheduler's slice is preempted and
//   its wall time counts the other processes' turns.
//
// Run OpenBLAS at its best (shared/BENCHMARKING.md, trap 1):
//   (unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; ./build/bench/quant_bench)

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"
#include "tensorjit.h"

enum { kMaxRuns = 64 };

static int32_t g_threads = 1;
static bool g_cpu_clock = false;

// Wall time, or with QUANT_BENCH_CLOCK=cpu this thread's CPU time, in ms.
static double clock_ms(void) {
  if (!g_cpu_clock) return now_ms();
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static tj_executable_t* compile(tj_graph_t* g) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_X86;
  o.x86.num_threads = g_threads;
  tj_executable_t* exe = NULL;
  if (!ok(tj_compile(g, &o, &exe), "compile")) return NULL;
  return exe;
}

// x [M, K] @ W: |format| 0 f32, 8 int8 per channel, 4 int4 per group 128.
static tj_executable_t* build_weights(tj_context_t* ctx, const float* w,
                                      int64_t m, int64_t n, int64_t k,
                                      int format) {
  tj_graph_t* g = NULL;
  if (!ok(tj_graph_create(ctx, "quant_bench", &g), "graph")) return NULL;
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){m, k}, "x");
  // Copied (not borrowed): each executable holds weights of its own.
  tj_value_t wv = tj_graph_constant(g, TJ_DTYPE_F32, 2, (int64_t[]){k, n}, w,
                                    (size_t)(k * n) * 4);
  tj_graph_output(g, tj_graph_matmul(g, x, wv), "y");
  tj_executable_t* exe = NULL;
  if (ok(tj_graph_finalize(g), "finalize")) {
    if (format == 0) {
      exe = compile(g);
    } else {
      tj_quantize_weights_options_t o;
      tj_quantize_weights_options_initialize(&o);
      o.format =
          format == 8 ? TJ_WEIGHT_INT8_PER_CHANNEL : TJ_WEIGHT_INT4_PER_GROUP;
      o.group_size = 128;
      tj_graph_t* q = NULL;
      if (ok(tj_graph_quantize_weights(g, &o, &q, NULL), "quantize")) {
        exe = compile(q);
        tj_graph_destroy(q);
      }
    }
  }
  tj_graph_destroy(g);
  return exe;
}

// u8 x [M, K] @ s8 W [K, N] -> i32 (matmul_i32), W an input as qgemm_bench.
static tj_executable_t* build_i8(tj_context_t* ctx, int64_t m, int64_t n,
                                 int64_t k) {
  tj_graph_t* g = NULL;
  if (!ok(tj_graph_create(ctx, "quant_bench_i8", &g), "graph")) return NULL;
  tj_value_t a = tj_graph_input(g, TJ_DTYPE_U8, 2, (int64_t[]){m, k}, "a");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_I8, 2, (int64_t[]){k, n}, "b");
  tj_graph_output(g, tj_graph_matmul_i32(g, a, b), "y");
  tj_executable_t* exe = NULL;
  if (ok(tj_graph_finalize(g), "finalize")) exe = compile(g);
  tj_graph_destroy(g);
  return exe;
}

enum { kMaxCopies = 64 };

// Runs copy r % copies on run r (copy c: executable exes[c], inputs
// in[c * n_in ..]); each copy runs once first.
static stat_t time_exes(tj_executable_t** exes, int copies, tj_tensor_t* in,
                        int32_t n_in, tj_tensor_t* out, int runs) {
  stat_t bad = {-1, -1, -1};
  for (int c = 0; c < copies; ++c) {
    if (!exes[c] ||
        !ok(tj_executable_run(exes[c], in + c * n_in, n_in, out, 1), "run")) {
      return bad;
    }
  }
  double t[kMaxRuns];
  for (int r = 0; r < runs; ++r) {
    int c = r % copies;
    double t0 = clock_ms();
    tj_executable_run(exes[c], in + c * n_in, n_in, out, 1);
    t[r] = clock_ms() - t0;
  }
  return stats_of(t, runs);
}

// Copies of a weight of |bytes| for |m| rows: enough to exceed the cold
// size at decode shapes, one for prefill.
static int copies_for(int64_t m, double bytes) {
  const char* env = getenv("QUANT_BENCH_COLD_MB");
  double cold = (env ? atof(env) : 256.0) * 1e6;
  if (m > 16 || cold <= 0) return 1;
  int c = (int)((cold + bytes - 1) / bytes);
  return c < 1 ? 1 : c > kMaxCopies ? kMaxCopies : c;
}

static void print_machine(void) {
  FILE* f = fopen("/proc/cpuinfo", "r");
  char line[8192], model[256] = "?";
  int cpus = 0;
  bool vnni = false;
  while (f && fgets(line, sizeof(line), f)) {
    if (strncmp(line, "model name", 10) == 0) {
      ++cpus;
      char* colon = strchr(line, ':');
      if (colon) {
        snprintf(model, sizeof(model), "%s", colon + 2);
        model[strcspn(model, "\n")] = 0;
      }
    }
    if (strncmp(line, "flags", 5) == 0) {
      vnni = vnni || strstr(line, " avx512_vnni") != NULL;
    }
  }
  if (f) fclose(f);
  double load[3] = {-1, -1, -1};
  if (getloadavg(load, 3) != 3) load[0] = load[1] = load[2] = -1;
  printf("machine: %s, %d CPUs, avx512_vnni %s, load %.2f %.2f %.2f\n", model,
         cpus, vnni ? "yes" : "no", load[0], load[1], load[2]);
}

static void print_stat(stat_t s) {
  printf(" %8.3f (%7.3f..%7.3f)", s.med, s.lo, s.hi);
}

int main(int argc, char** argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 5;
  if (runs < 1) runs = 1;
  if (runs > kMaxRuns) runs = kMaxRuns;
  const char* thr = getenv("QUANT_BENCH_THREADS");
  if (thr && atoi(thr) > 0) g_threads = atoi(thr);
  const char* clk = getenv("QUANT_BENCH_CLOCK");
  g_cpu_clock = clk && strcmp(clk, "cpu") == 0 && g_threads == 1;
  print_machine();
  sgemm_fn sgemm = NULL;
  set_threads_fn set_threads = NULL;
  void* blas = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (blas) {
    void* p = dlsym(blas, "cblas_sgemm");
    memcpy(&sgemm, &p, sizeof(p));
    p = dlsym(blas, "openblas_set_num_threads");
    memcpy(&set_threads, &p, sizeof(p));
  }
  printf("openblas: %s\n", blas ? "libopenblas.so.0" : "not found");
  tj_context_options_t co;
  tj_context_options_initialize(&co);
  co.x86_isa = getenv("QUANT_BENCH_ISA");
  tj_context_t* ctx = NULL;
  if (!ok(tj_context_create(&co, &ctx), "context")) return 1;
  printf("tier %s, %d thread(s); medians of %d runs (min..max), ms of %s\n",
         co.x86_isa ? co.x86_isa : "host", g_threads, runs,
         g_cpu_clock ? "thread CPU time" : "wall time");
  printf("%5s %5s %5s | %26s | %26s | %26s | %26s | %26s | %6s %6s %6s\n", "M",
         "N", "K", "our f32", "int8 weight-only", "int4 g128 weight-only",
         "int8 GEMM (u8 x s8)", "OpenBLAS sgemm", "f32/w8", "f32/w4", "f32/i8");
  static const int64_t kShapes[][3] = {
      {1, 4096, 4096}, {4, 4096, 4096}, {16, 4096, 4096}, {256, 4096, 4096}};
  const int64_t kmax = 4096, nmax = 4096, mmax = 256;
  float* w = malloc((size_t)(kmax * nmax) * 4);
  float* x = malloc((size_t)(mmax * kmax) * 4);
  float* y = malloc((size_t)(mmax * nmax) * 4);
  uint8_t* a8 = malloc((size_t)(mmax * kmax));
  int8_t* b8 = malloc((size_t)(kmax * nmax));
  int32_t* y32 = malloc((size_t)(mmax * nmax) * 4);
  uint64_t r = 1;
  for (int64_t i = 0; i < kmax * nmax; ++i) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    w[i] = (float)((double)(r >> 40) / 16777216.0 - 0.5) * 0.1f;
    b8[i] = (int8_t)(r >> 56);
  }
  for (int64_t i = 0; i < mmax * kmax; ++i) {
    x[i] = (float)(i % 17) * 0.1f - 0.8f;
    a8[i] = (uint8_t)(i * 7);
  }
  for (size_t s = 0; s < sizeof(kShapes) / sizeof(kShapes[0]); ++s) {
    int64_t m = kShapes[s][0], n = kShapes[s][1], k = kShapes[s][2];
    int64_t xd[2] = {m, k}, yd[2] = {m, n}, bd[2] = {k, n};
    tj_tensor_t xin[kMaxCopies];
    for (int c = 0; c < kMaxCopies; ++c) {
      xin[c] = tj_tensor_make(x, TJ_DTYPE_F32, 2, xd);
    }
    tj_tensor_t yo = tj_tensor_make(y, TJ_DTYPE_F32, 2, yd);
    stat_t t[4];
    int ncopies[5];
    for (int f = 0; f < 3; ++f) {
      static const int kFormats[3] = {0, 8, 4};
      static const double kBytes[3] = {4.0, 1.0, 0.53};  // int4: + scales
      int copies = copies_for(m, kBytes[f] * (double)(k * n));
      ncopies[f] = copies;
      tj_executable_t* e[kMaxCopies];
      for (int c = 0; c < copies; ++c) {
        e[c] = build_weights(ctx, w, m, n, k, kFormats[f]);
      }
      t[f] = time_exes(e, copies, xin, 1, &yo, runs);
      for (int c = 0; c < copies; ++c) tj_executable_release(e[c]);
    }
    // The int8 GEMM's W is an input: copies of its buffer.
    int copies8 = copies_for(m, (double)(k * n));
    ncopies[3] = copies8;
    tj_tensor_t in8[2 * kMaxCopies];
    int8_t* b8c[kMaxCopies];
    for (int c = 0; c < copies8; ++c) {
      b8c[c] = c ? malloc((size_t)(k * n)) : b8;
      if (c) memcpy(b8c[c], b8, (size_t)(k * n));
      in8[2 * c] = tj_tensor_make(a8, TJ_DTYPE_U8, 2, xd);
      in8[2 * c + 1] = tj_tensor_make(b8c[c], TJ_DTYPE_I8, 2, bd);
    }
    tj_tensor_t o32 = tj_tensor_make(y32, TJ_DTYPE_I32, 2, yd);
    tj_executable_t* e8 = build_i8(ctx, m, n, k);
    tj_executable_t* e8s[kMaxCopies];
    for (int c = 0; c < copies8; ++c) e8s[c] = e8;
    t[3] = time_exes(e8s, copies8, in8, 2, &o32, runs);
    tj_executable_release(e8);
    for (int c = 1; c < copies8; ++c) free(b8c[c]);
    stat_t tb = {-1, -1, -1};
    int copiesf = copies_for(m, 4.0 * (double)(k * n));
    ncopies[4] = copiesf;
    if (sgemm) {
      if (set_threads) set_threads(g_threads);
      float* wc[kMaxCopies];
      for (int c = 0; c < copiesf; ++c) {
        wc[c] = c ? malloc((size_t)(k * n) * 4) : w;
        if (c) memcpy(wc[c], w, (size_t)(k * n) * 4);
        sgemm(kRowMajor, kNoTrans, kNoTrans, (int)m, (int)n, (int)k, 1.0f, x,
              (int)k, wc[c], (int)n, 0.0f, y, (int)n);
      }
      double tt[kMaxRuns];
      for (int q = 0; q < runs; ++q) {
        double t0 = clock_ms();
        sgemm(kRowMajor, kNoTrans, kNoTrans, (int)m, (int)n, (int)k, 1.0f, x,
              (int)k, wc[q % copiesf], (int)n, 0.0f, y, (int)n);
        tt[q] = clock_ms() - t0;
      }
      tb = stats_of(tt, runs);
      for (int c = 1; c < copiesf; ++c) free(wc[c]);
    }
    printf("%5lld %5lld %5lld |", (long long)m, (long long)n, (long long)k);
    for (int f = 0; f < 4; ++f) {
      print_stat(t[f]);
      printf(" |");
    }
    print_stat(tb);
    printf(" | %5.2fx %5.2fx %5.2fx  (copies %d %d %d %d %d)\n",
           t[0].med / t[1].med, t[0].med / t[2].med, t[0].med / t[3].med,
           ncopies[0], ncopies[1], ncopies[2], ncopies[3], ncopies[4]);
    fflush(stdout);
  }
  free(w);
  free(x);
  free(y);
  free(a8);
  free(b8);
  free(y32);
  tj_context_destroy(ctx);
  if (blas) dlclose(blas);
  return 0;
}
