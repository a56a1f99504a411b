// The integer GEMM (qgemm, issue 17): u8 x s8 -> i32 (matmul_i32) at the
// host's best tier (AMX tiles where the CPU has them, else vpdpbusd with
// AVX512-VNNI) and, with QGEMM_BENCH_ALT, at a second tier in the same run
// (e.g. avx512: VNNI on an AMX host), beside our f32 GEMM (matmul) and
// OpenBLAS cblas_sgemm (dlopen'ed, never linked), at (M, N, K) = (256,
// 1024, 4096), (2048, 1024, 4096), (4096, 4096, 4096) and the decode
// shapes (1, 4096, 4096), (16, 4096, 4096), on 1 thread and on all the
// CPUs. Each figure is the median of |runs| (default 5) timed runs after
// a warm-up, with the spread (min..max); GOPS counts 2 M N K. Our
// executables come from the public API (tj_compile, tj_executable_run),
// the way a host would run them. B is an input (packed every run), or
// with QGEMM_BENCH_CONST=1 a constant (a weight: the int8 GEMMs prepack
// it at compile time; our f32 GEMM's B is then a constant too).
//
//   usage: qgemm_bench [runs]
//   QGEMM_BENCH_ISA=avx512|avx2|x86-64-v3|sse2|x86-64-v4 forces the main
//   tier; QGEMM_BENCH_ALT=<tier> adds the int8 GEMM at that tier as a
//   column; QGEMM_BENCH_INT7=1 makes B's values 7-bit ([-64, 63]: the
//   vpmaddubsw path of the tiers without VNNI); QGEMM_BENCH_SHAPES=small
//   keeps the shapes with M < 4096.
//
// Run OpenBLAS at its best (shared/BENCHMARKING.md, trap 1):
//   (unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; ./build/bench/qgemm_bench)

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "tensorjit/tj_executable.h"
#include "tensorjit/tj_graph.h"

enum { kMaxRuns = 64 };
typedef char* (*corename_fn)(void);

// y = a @ b for a [M, K] of |adt|, b [K, N] of |bdt| (matmul_i32 when the
// operands are 8-bit, else matmul).
// |bconst|: B is that constant (borrowed), not an input.
static tj_executable_t* build(tj_context_t* ctx, tj_dtype_t adt, tj_dtype_t bdt,
                              int64_t m, int64_t n, int64_t k, int32_t threads,
                              const void* bconst) {
  tj_graph_t* g = NULL;
  if (!ok(tj_graph_create(ctx, "qgemm_bench", &g), "graph")) return NULL;
  int64_t ad[2] = {m, k}, bd[2] = {k, n};
  tj_value_t a = tj_graph_input(g, adt, 2, ad, "a");
  tj_value_t b = bconst ? tj_graph_constant_borrowed(
                              g, bdt, 2, bd, bconst,
                              (size_t)(k * n) * (bdt == TJ_DTYPE_F32 ? 4 : 1))
                        : tj_graph_input(g, bdt, 2, bd, "b");
  tj_graph_output(g,
                  adt == TJ_DTYPE_F32 ? tj_graph_matmul(g, a, b)
                                      : tj_graph_matmul_i32(g, a, b),
                  "y");
  tj_executable_t* exe = NULL;
  if (ok(tj_graph_finalize(g), "finalize")) {
    tj_compile_options_t o;
    tj_compile_options_initialize(&o);
    o.target = TJ_TARGET_X86;
    o.x86.num_threads = threads;
    if (!ok(tj_compile(g, &o, &exe), "compile")) exe = NULL;
  }
  tj_graph_destroy(g);
  return exe;
}

static stat_t time_exe(tj_executable_t* exe, tj_tensor_t* in, uint32_t nin,
                       tj_tensor_t* out, int runs) {
  stat_t bad = {-1, -1, -1};
  if (!exe || !ok(tj_executable_run(exe, in, nin, out, 1), "run")) return bad;
  double t[kMaxRuns];
  for (int r = 0; r < runs; ++r) {
    double t0 = now_ms();
    tj_executable_run(exe, in, nin, out, 1);
    t[r] = now_ms() - t0;
  }
  return stats_of(t, runs);
}

static void print_machine(void) {
  FILE* f = fopen("/proc/cpuinfo", "r");
  char line[8192], model[256] = "?";
  int cpus = 0;
  bool vnni = false, amx = false;
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
      amx = amx || strstr(line, " amx_int8") != NULL;
    }
  }
  if (f) fclose(f);
  double load[3] = {-1, -1, -1};
  if (getloadavg(load, 3) != 3) load[0] = load[1] = load[2] = -1;
  printf(
      "machine: %s, %d CPUs, avx512_vnni %s, amx_int8 %s, load %.2f %.2f "
      "%.2f\n",
      model, cpus, vnni ? "yes" : "no", amx ? "yes" : "no", load[0], load[1],
      load[2]);
}

int main(int argc, char** argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 5;
  if (runs < 1) runs = 1;
  if (runs > kMaxRuns) runs = kMaxRuns;
  print_machine();
  sgemm_fn sgemm = NULL;
  set_threads_fn set_threads = NULL;
  void* blas = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (blas) {
    // dlsym's object pointers become function pointers by copy.
    void* p = dlsym(blas, "cblas_sgemm");
    memcpy(&sgemm, &p, sizeof(p));
    p = dlsym(blas, "openblas_set_num_threads");
    memcpy(&set_threads, &p, sizeof(p));
    corename_fn corename = NULL;
    p = dlsym(blas, "openblas_get_corename");
    memcpy(&corename, &p, sizeof(p));
    const char* env = getenv("OPENBLAS_CORETYPE");
    printf("openblas: %s (OPENBLAS_CORETYPE %s)\n", corename ? corename() : "?",
           env ? env : "unset");
  } else {
    printf("openblas: not found (sgemm column empty)\n");
  }
  tj_context_options_t co;
  tj_context_options_initialize(&co);
  co.x86_isa = getenv("QGEMM_BENCH_ISA");
  tj_context_t* ctx = NULL;
  if (!ok(tj_context_create(&co, &ctx), "context")) return 1;
  const char* alt_isa = getenv("QGEMM_BENCH_ALT");
  tj_context_t* alt = NULL;
  if (alt_isa && *alt_isa) {
    tj_context_options_t ao;
    tj_context_options_initialize(&ao);
    ao.x86_isa = alt_isa;
    if (!ok(tj_context_create(&ao, &alt), "alt context")) alt = NULL;
  }
  const char* env = getenv("QGEMM_BENCH_CONST");
  bool cb = env && *env == '1';
  env = getenv("QGEMM_BENCH_INT7");
  bool int7 = env && *env == '1';
  env = getenv("QGEMM_BENCH_SHAPES");
  bool small = env && strcmp(env, "small") == 0;
  printf("B: %s, %s values\n", cb ? "a constant" : "an input",
         int7 ? "7-bit" : "8-bit");
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int32_t all = ncpu > 1 ? (int32_t)ncpu : 1;
  printf("tier: %s%s%s; medians of %d runs (min..max), GOPS = 2MNK / time\n",
         co.x86_isa ? co.x86_isa : "host", alt ? ", alt tier: " : "",
         alt ? alt_isa : "", runs);
  printf(
      "%5s %5s %5s %3s | %23s %6s | %23s %6s | %23s %6s | %23s %6s | "
      "%6s %6s %6s\n",
      "M", "N", "K", "thr", "u8s8 ms", "GOPS", "u8s8 alt ms", "GOPS",
      "our f32 ms", "GFLOP", "sgemm ms", "GFLOP", "i8/f32", "alt/f32", "i8/sg");
  static const int64_t kShapes[][3] = {{256, 1024, 4096},
                                       {2048, 1024, 4096},
                                       {4096, 4096, 4096},
                                       {1, 4096, 4096},
                                       {16, 4096, 4096}};
  for (size_t s = 0; s < sizeof(kShapes) / sizeof(kShapes[0]); ++s) {
    int64_t m = kShapes[s][0], n = kShapes[s][1], k = kShapes[s][2];
    if (small && m >= 4096) continue;
    int64_t ad[2] = {m, k}, bd[2] = {k, n}, yd[2] = {m, n};
    uint8_t* a8 = malloc((size_t)(m * k));
    int8_t* b8 = malloc((size_t)(k * n));
    float* af = malloc((size_t)(m * k) * 4);
    float* bf = malloc((size_t)(k * n) * 4);
    int32_t* y32 = malloc((size_t)(m * n) * 4);
    float* yf = malloc((size_t)(m * n) * 4);
    for (int64_t i = 0; i < m * k; ++i) {
      a8[i] = (uint8_t)(i * 7 % 256);
      af[i] = (float)a8[i];
    }
    for (int64_t i = 0; i < k * n; ++i) {
      b8[i] = int7 ? (int8_t)(i * 13 % 128 - 64) : (int8_t)(i * 13 % 256 - 128);
      bf[i] = (float)b8[i];
    }
    double ops = 2.0 * (double)m * (double)n * (double)k;
    int32_t threads[2] = {1, all};
    for (int ti = 0; ti < (all > 1 ? 2 : 1); ++ti) {
      int32_t thr = threads[ti];
      tj_tensor_t in8[2] = {tj_tensor_make(a8, TJ_DTYPE_U8, 2, ad),
                            tj_tensor_make(b8, TJ_DTYPE_I8, 2, bd)};
      tj_tensor_t inf[2] = {tj_tensor_make(af, TJ_DTYPE_F32, 2, ad),
                            tj_tensor_make(bf, TJ_DTYPE_F32, 2, bd)};
      tj_tensor_t o32 = tj_tensor_make(y32, TJ_DTYPE_I32, 2, yd);
      tj_tensor_t of = tj_tensor_make(yf, TJ_DTYPE_F32, 2, yd);
      const uint32_t nin = cb ? 1 : 2;
      tj_executable_t* e8 =
          build(ctx, TJ_DTYPE_U8, TJ_DTYPE_I8, m, n, k, thr, cb ? b8 : NULL);
      stat_t t8 = time_exe(e8, in8, nin, &o32, runs);
      tj_executable_release(e8);
      stat_t ta = {-1, -1, -1};
      if (alt) {
        tj_executable_t* ea =
            build(alt, TJ_DTYPE_U8, TJ_DTYPE_I8, m, n, k, thr, cb ? b8 : NULL);
        ta = time_exe(ea, in8, nin, &o32, runs);
        tj_executable_release(ea);
      }
      tj_executable_t* ef =
          build(ctx, TJ_DTYPE_F32, TJ_DTYPE_F32, m, n, k, thr, cb ? bf : NULL);
      stat_t tf = time_exe(ef, inf, nin, &of, runs);
      tj_executable_release(ef);
      stat_t tb = {-1, -1, -1};
      if (sgemm) {
        if (set_threads) set_threads(thr);
        double t[kMaxRuns];
        sgemm(kRowMajor, kNoTrans, kNoTrans, (int)m, (int)n, (int)k, 1.0f, af,
              (int)k, bf, (int)n, 0.0f, yf, (int)n);
        for (int r = 0; r < runs; ++r) {
          double t0 = now_ms();
          sgemm(kRowMajor, kNoTrans, kNoTrans, (int)m, (int)n, (int)k, 1.0f, af,
                (int)k, bf, (int)n, 0.0f, yf, (int)n);
          t[r] = now_ms() - t0;
        }
        tb = stats_of(t, runs);
      }
      printf(
          "%5lld %5lld %5lld %3d | %7.3f (%6.3f..%6.3f) %6.0f | %7.3f "
          "(%6.3f..%6.3f) %6.0f | %7.3f (%6.3f..%6.3f) %6.0f | %7.3f "
          "(%6.3f..%6.3f) %6.0f | %5.2fx %5.2fx %5.2fx\n",
          (long long)m, (long long)n, (long long)k, thr, t8.med, t8.lo, t8.hi,
          ops / t8.med * 1e-6, ta.med, ta.lo, ta.hi,
          ta.med > 0 ? ops / ta.med * 1e-6 : 0.0, tf.med, tf.lo, tf.hi,
          ops / tf.med * 1e-6, tb.med, tb.lo, tb.hi,
          tb.med > 0 ? ops / tb.med * 1e-6 : 0.0, tf.med / t8.med,
          ta.med > 0 ? tf.med / ta.med : 0.0,
          tb.med > 0 ? tb.med / t8.med : 0.0);
      fflush(stdout);
    }
    free(a8);
    free(b8);
    free(af);
    free(bf);
    free(y32);
    free(yf);
  }
  tj_context_destroy(alt);
  tj_context_destroy(ctx);
  if (blas) dlclose(blas);
  return 0;
}
