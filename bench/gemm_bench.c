// The capstone block gelu(x @ w + b) (tanh form, f32, K = 1024, N = 4096)
// as one JIT-compiled kernel, beside OpenBLAS cblas_sgemm measured in the
// same run (dlopen'ed, never linked), from M = 1 (a GEMV over the 16 MB
// weight, also beside cblas_sgemv) to 2048; and the capstone's backward
// GEMMs with a transposed operand, dx = dy @ W^T and dW = X^T @ dy, beside
// cblas_sgemm with the same transposes. Medians of several runs after a
// warm-up, 1 and 2 threads, ratios to the faster library call printed.
//
//   usage: gemm_bench [runs] [case]   (default 7 runs; case: fwd, dx, dW
//                                     or one row, e.g. fwd1, dx2048)
//   GEMM_BENCH_SCHEDULE="tile_m,tile_n,mc,nc,kc" sets the kernels' schedule
//   (0 = auto), e.g. "8,32,0,0,0".
//   GEMM_BENCH_CLOCK=cpu times the thread's CPU time, minimum of the runs
//   (1-thread rows only; see g_cpu_clock).
//   GEMM_BENCH_EPILOGUE=erf|silu makes the fwd rows' epilogue the erf-form
//   GELU as decompose writes it, x * erfc(x * -sqrt(1/2)) * 0.5 (the GPT
//   block's MLP), or x * sigmoid(x) (the Llama block's SwiGLU gate),
//   instead of the tanh form.
//   GEMM_BENCH_ASM=file writes the capstone kernel's assembly there.
//   GEMM_BENCH_ISA=avx2|sse2|v4 forces a lower instruction-set level than
//   the host's (the AVX2 tier can be timed on an AVX-512 host; compare it
//   with OpenBLAS's AVX2 kernels: OPENBLAS_CORETYPE=Zen or Haswell).
//   The "gemm" rows are plain f32 GEMMs (M, K, N) = (2048, 1024, 4096),
//   (256, 1024, 4096), (1024, 1024, 1024), the x86_bench shapes, and
//   (18, 1024, 4096), the smallest M of the packed path, where packing
//   the 16 MB of B is about half of the time.
//
// bf16 (gemm_bench [runs] bf16, also after the f32 table): bf16 x bf16 ->
// f32 at (M, K, N) = (2048, 1024, 4096), (256, 1024, 4096), (1024, 1024,
// 1024), (1, 4096, 4096), (16, 4096, 4096) and the capstone all in bf16
// at B = 256, 2048, 1 and 16, ours (the host's level: the AMX tiles where
// the CPU has amx-bf16, else vdpbf16ps; beside it, on such a CPU, the
// vdpbf16ps path of an avx512 JIT; and the widening path of an x86-64-v4
// JIT) beside ours in f32, cblas_sbgemm when the OpenBLAS exports it, and
// cblas_sgemm, with each timing's spread.
//
// Run OpenBLAS at its best on this machine: the environment's
// OPENBLAS_CORETYPE=Haswell makes it 1.8x slower (shared/BENCHMARKING.md):
//   (unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; ./build/bench/gemm_bench)

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "backends/x86/thread_pool.h"
#include "kir/kernel_ir.h"
#include "jit/x86_jit.h"

enum { kRowMajor = 101, kNoTrans = 111 };
typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k,
                         float alpha, const float* a, int lda, const float* b,
                         int ldb, float beta, float* c, int ldc);
typedef char* (*corename_fn)(void);
typedef void (*set_threads_fn)(int);

// GEMM_BENCH_CLOCK=cpu: time the calling thread's CPU time and report the
// minimum, not the median: on a host shared with other work, the time a
// 1-thread run spends descheduled then does not count (2-thread rows are
// then meaningless: the pool's other thread is not counted).
static bool g_cpu_clock;

// GEMM_BENCH_EPILOGUE: the fwd rows' activation.
typedef enum { EPI_TANH, EPI_ERF, EPI_SILU } epi_t;
static epi_t g_epi = EPI_TANH;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(g_cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  if (g_cpu_clock) return v[0];
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static bool ok(tj_status_t s, const char* what) {
  if (!s) return true;
  fprintf(stderr, "%s: %s\n", what, tj_status_message(s));
  tj_status_free(s);
  return false;
}

// Page-faulting fresh memory costs ~11 us a page here: allocate aligned,
// ask for huge pages and touch everything before timing.
static float* alloc_floats(size_t n) {
  size_t bytes = (n * sizeof(float) + 4095) / 4096 * 4096;
  float* p = aligned_alloc(4096, bytes);
  if (!p) return NULL;
  madvise(p, bytes, MADV_HUGEPAGE);
  memset(p, 0, bytes);
  return p;
}

// A GEMM kernel with symbolic M: C[M, N] = epilogue(A @ B) where A is
// [M, K] (or stored [K, M] when |a_trans|), B is [K, N] (or stored [N, K]
// when |b_trans|, the dx = dy @ W^T case) and the epilogue is the
// capstone's gelu(acc + b) (tanh form) or a plain store.
// With |dt| bf16 (or f16) the operands are of that dtype and, with |gelu|,
// so are the bias and the result, as the lowering writes a half matmul:
// gelu(round(acc) + b) rounded; plain half GEMMs store the f32 sums.
static tj_kir_t* build_gemm_dt(const char* name, int64_t n, int64_t k_dim,
                               bool a_trans, bool b_trans, bool gelu,
                               tj_dtype_t dt) {
  tj_kir_t* k = NULL;
  if (!ok(tj_kir_create(tj_allocator_system(), TJ_KIR_GEMM, name, &k),
          "create")) {
    return NULL;
  }
  uint32_t M = tj_kir_add_param(k, "M");
  tj_kir_ival_t dims[2] = {tj_kir_runtime(M), tj_kir_constant(n)};
  tj_kir_set_space(k, 2, dims);
  tj_kir_ival_t sx[2] = {tj_kir_constant(k_dim), tj_kir_constant(1)};
  if (a_trans) {
    sx[0] = tj_kir_constant(1);
    sx[1] = tj_kir_runtime(M);
  }
  tj_kir_ival_t sw[2] = {tj_kir_constant(n), tj_kir_constant(1)};
  if (b_trans) {
    sw[0] = tj_kir_constant(1);
    sw[1] = tj_kir_constant(k_dim);
  }
  tj_kir_ival_t sy[2] = {tj_kir_constant(n), tj_kir_constant(1)};
  tj_kir_ival_t sb[2] = {tj_kir_constant(0), tj_kir_constant(1)};
  tj_dtype_t edt = gelu ? dt : TJ_DTYPE_F32;  // bias and result
  tj_kir_add_buffer(k, "x", dt, TJ_KIR_GEMM_A, sx);
  tj_kir_add_buffer(k, "w", dt, TJ_KIR_GEMM_B, sw);
  uint32_t b = tj_kir_add_buffer(k, "b", edt, TJ_KIR_INPUT, sb);
  uint32_t y = tj_kir_add_buffer(k, "y", edt, TJ_KIR_OUTPUT, sy);
  k->allow_half_gemm = dt != TJ_DTYPE_F32;
  // GEMM_BENCH_SCHEDULE="tile_m,tile_n,mc,nc,kc" (0: auto) tries a schedule.
  tj_kir_gemm_schedule_t sched = {0, 0, 0, 0, 0};
  const char* env = getenv("GEMM_BENCH_SCHEDULE");
  if (env) {
    sscanf(env, "%d,%d,%d,%d,%d", &sched.tile_m, &sched.tile_n, &sched.mc,
           &sched.nc, &sched.kc);
  }
  tj_kir_set_gemm(k, tj_kir_constant(k_dim), &sched);
  uint32_t acc = tj_kir_acc(k);
  if (!gelu) {
    tj_kir_store(k, y, acc);
  } else {
    if (edt != TJ_DTYPE_F32) acc = tj_kir_cast(k, edt, acc);
    uint32_t v = tj_kir_binary(k, TJ_OP_ADD, acc, tj_kir_load(k, b));
    if (edt != TJ_DTYPE_F32) v = tj_kir_cast(k, TJ_DTYPE_F32, v);
    uint32_t out;
    if (g_epi == EPI_ERF) {
      uint32_t e = tj_kir_unary(
          k, TJ_OP_ERFC,
          tj_kir_binary(
              k, TJ_OP_MUL, v,
              tj_kir_const_float(k, TJ_DTYPE_F32, -0.7071067811865476)));
      out = tj_kir_binary(k, TJ_OP_MUL, tj_kir_binary(k, TJ_OP_MUL, v, e),
                          tj_kir_const_float(k, TJ_DTYPE_F32, 0.5));
    } else if (g_epi == EPI_SILU) {
      out = tj_kir_binary(k, TJ_OP_MUL, v, tj_kir_unary(k, TJ_OP_SIGMOID, v));
    } else {
      uint32_t v3 =
          tj_kir_binary(k, TJ_OP_MUL, v, tj_kir_binary(k, TJ_OP_MUL, v, v));
      uint32_t inner = tj_kir_binary(
          k, TJ_OP_ADD, v,
          tj_kir_binary(k, TJ_OP_MUL, v3,
                        tj_kir_const_float(k, TJ_DTYPE_F32, 0.044715)));
      uint32_t t = tj_kir_unary(
          k, TJ_OP_TANH,
          tj_kir_binary(
              k, TJ_OP_MUL, inner,
              tj_kir_const_float(k, TJ_DTYPE_F32, 0.7978845608028654)));
      uint32_t half = tj_kir_binary(k, TJ_OP_MUL, v,
                                    tj_kir_const_float(k, TJ_DTYPE_F32, 0.5));
      out =
          tj_kir_binary(k, TJ_OP_MUL, half,
                        tj_kir_binary(k, TJ_OP_ADD, t,
                                      tj_kir_const_float(k, TJ_DTYPE_F32, 1)));
    }
    if (edt != TJ_DTYPE_F32) out = tj_kir_cast(k, edt, out);
    tj_kir_store(k, y, out);
  }
  if (!ok(tj_kir_finalize(k), "finalize")) {
    tj_kir_destroy(k);
    return NULL;
  }
  return k;
}

static tj_kir_t* build_gemm(const char* name, int64_t n, int64_t k_dim,
                            bool a_trans, bool b_trans, bool gelu) {
  return build_gemm_dt(name, n, k_dim, a_trans, b_trans, gelu, TJ_DTYPE_F32);
}

typedef struct run_t {
  tj_kir_fn_t fn;
  void* const* buffers;
  const int64_t* scalars;
  unsigned char* scratch;
  int64_t stride;
} run_t;

static void task(void* context, int64_t begin, int64_t end, int32_t thread) {
  run_t* r = context;
  r->fn(r->buffers, r->scalars, r->scratch + (size_t)thread * (size_t)r->stride,
        begin, end);
}

static void print_machine(void) {
  FILE* f = fopen("/proc/cpuinfo", "r");
  char line[512];
  int cpus = 0;
  char model[256] = "?";
  while (f && fgets(line, sizeof(line), f)) {
    if (strncmp(line, "model name", 10) == 0) {
      ++cpus;
      char* colon = strchr(line, ':');
      if (colon) {
        snprintf(model, sizeof(model), "%s", colon + 2);
        model[strcspn(model, "\n")] = 0;
      }
    }
  }
  if (f) fclose(f);
  double load[3] = {-1, -1, -1};
  if (getloadavg(load, 3) != 3) load[0] = load[1] = load[2] = -1;
  printf("machine: %s, %d CPUs, load %.2f %.2f %.2f\n", model, cpus, load[0],
         load[1], load[2]);
}

typedef struct compiled_t {
  tj_x86_module_t* module;
  tj_kir_fn_t fn;
} compiled_t;

static bool compile(tj_x86_jit_t* jit, const tj_kir_t* k, compiled_t* out) {
  tj_x86_object_t obj;
  const tj_kir_t* ks[1] = {k};
  out->module = NULL;
  if (!ok(tj_x86_jit_compile(jit, ks, 1, &obj), "compile")) return false;
  bool good =
      ok(tj_x86_jit_load(jit, obj.data, obj.size, &out->module), "load") &&
      ok(tj_x86_module_lookup(out->module, k->name, &out->fn), "lookup");
  tj_x86_object_deinitialize(&obj);
  return good;
}

typedef struct bench_case_t {
  const char* name;
  int64_t m, n, k;
  bool a_trans, b_trans, gelu;
} bench_case_t;

// The forward capstone at batch M (GEMV-like for M = 1: the small-M path
// reads the weight in place), and the two backward GEMMs of the capstone
// at batch B: dx = dy @ W^T (B stored [N, K]) and dW = X^T @ dy (A stored
// [K, M]).
static const bench_case_t kCases[] = {
    {"fwd", 1, 4096, 1024, false, false, true},
    {"fwd", 4, 4096, 1024, false, false, true},
    {"fwd", 16, 4096, 1024, false, false, true},
    {"fwd", 32, 4096, 1024, false, false, true},
    {"fwd", 256, 4096, 1024, false, false, true},
    {"fwd", 2048, 4096, 1024, false, false, true},
    {"gemm", 2048, 4096, 1024, false, false, false},
    {"gemm", 256, 4096, 1024, false, false, false},
    {"gemm", 1024, 1024, 1024, false, false, false},
    {"gemm", 18, 4096, 1024, false, false, false},
    {"dx", 256, 1024, 4096, false, true, false},
    {"dx", 2048, 1024, 4096, false, true, false},
    {"dW", 1024, 4096, 256, true, false, false},
    {"dW", 1024, 4096, 2048, true, false, false},
};

//===--- bf16 ---===//

typedef void (*sbgemm_fn)(int order, int ta, int tb, int m, int n, int k,
                          float alpha, const uint16_t* a, int lda,
                          const uint16_t* b, int ldb, float beta, float* c,
                          int ldc);

// The spread of |runs| timings: (max - min) / |mid|, in percent.
static double spread_pct(const double* t, int runs, double mid) {
  double lo = t[0], hi = t[0];
  for (int i = 1; i < runs; ++i) {
    lo = fmin(lo, t[i]);
    hi = fmax(hi, t[i]);
  }
  return mid > 0 ? 100 * (hi - lo) / mid : NAN;
}

// Median ms of |runs| runs of |fn| (compiled from |k|) at M = |m| on
// |bufs| with |threads| threads (a timing repeats small problems to ~2 ms);
// their spread in |*out_spread| (NULL: not wanted).
static double time_kernel(const tj_x86_jit_t* jit, const tj_kir_t* k,
                          tj_kir_fn_t fn, void* const* bufs, int64_t m,
                          int threads, int runs, double* out_spread) {
  if (out_spread) *out_spread = NAN;
  tj_thread_pool_t* pool = NULL;
  if (!ok(tj_thread_pool_create(tj_allocator_system(), threads, &pool),
          "pool")) {
    return NAN;
  }
  int64_t scalars[1] = {m};
  tj_kir_launch_t launch;
  if (!ok(tj_kir_launch_info(k, tj_x86_jit_lanes(jit), scalars, &launch),
          "launch")) {
    tj_thread_pool_destroy(pool);
    return NAN;
  }
  int64_t stride = (launch.scratch_bytes + 4095) / 4096 * 4096;
  unsigned char* scratch =
      (unsigned char*)alloc_floats((size_t)(stride * threads) / sizeof(float));
  run_t r = {fn, bufs, scalars, scratch, stride};
  double s0 = now_ms();
  tj_thread_pool_parallel_for(pool, launch.units, task, &r);  // warm-up
  double once = now_ms() - s0;
  int inner = once > 0 && once < 2 ? (int)(2 / once) + 1 : 1;
  double t[64];
  for (int i = 0; i < runs; ++i) {
    double s = now_ms();
    for (int q = 0; q < inner; ++q) {
      tj_thread_pool_parallel_for(pool, launch.units, task, &r);
    }
    t[i] = (now_ms() - s) / inner;
  }
  free(scratch);
  tj_thread_pool_destroy(pool);
  double mid = median(t, runs);
  if (out_spread) *out_spread = spread_pct(t, runs, mid);
  return mid;
}

// f32 -> bf16, round to nearest even (finite values).
static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

static void bench_bf16(tj_x86_jit_t* jit, int runs, sgemm_fn sgemm,
                       sbgemm_fn sbgemm, set_threads_fn set_threads) {
  static const struct {
    const char* name;
    int64_t m, k, n;
    bool gelu;
  } cases[] = {
      {"gemm", 2048, 1024, 4096, false},
      {"gemm", 256, 1024, 4096, false},
      {"gemm", 1024, 1024, 1024, false},
      // Decode sizes (issue 17's shapes): the small-M path (B read in
      // place, widened in the microkernel) on every tier.
      {"gemm", 1, 4096, 4096, false},
      {"gemm", 16, 4096, 4096, false},
      {"capst", 256, 1024, 4096, true},
      {"capst", 2048, 1024, 4096, true},
      {"capst", 1, 1024, 4096, true},
      {"capst", 16, 1024, 4096, true},
  };
  static const int thread_counts[] = {1, 2};
  tj_x86_jit_options_t o4 = {.isa = TJ_X86_ISA_X86_64_V4};
  tj_x86_jit_t* jit4 = NULL;
  if (!ok(tj_x86_jit_create(tj_allocator_system(), &o4, &jit4), "jit v4")) {
    jit4 = NULL;
  }
  const char* key = tj_x86_jit_target_key(jit);
  bool dot = strstr(key, "+avx512bf16") != NULL;
  // The host's level is amx with amx-bf16: its bf16 GEMMs with K % 32 == 0
  // run on the tiles; an avx512 JIT times vdpbf16ps beside them.
  bool tiles =
      tj_x86_jit_isa(jit) == TJ_X86_ISA_AMX && strstr(key, "+amx-bf16");
  tj_x86_jit_t* jit_dot = NULL;
  tj_x86_jit_options_t o512 = {.isa = TJ_X86_ISA_AVX512};
  if (tiles &&
      !ok(tj_x86_jit_create(tj_allocator_system(), &o512, &jit_dot), "jit")) {
    jit_dot = NULL;
  }
  printf(
      "\nbf16 x bf16 -> f32 (capst: gelu(x@w+b), bf16 in and out); host "
      "%s avx512bf16, %s amx-bf16; sbgemm: %s\n",
      dot ? "has" : "lacks", tiles ? "has" : "lacks",
      sbgemm ? "cblas_sbgemm" : "the OpenBLAS exports no cblas_sbgemm");
  printf(
      "%-5s %5s %5s %5s %3s | %8s %4s %7s | %8s %4s | %8s | %8s %4s | %8s "
      "%4s | %8s %4s | %7s %7s %7s %7s\n",
      "case", "M", "K", "N", "thr", "bf16 ms", "+-%", "GFLOP/s", "dot ms",
      "+-%", "widen ms", "f32 ms", "+-%", "sbgemm", "+-%", "sgemm ms", "+-%",
      "bf/dot", "bf/f32", "bf/sbg", "bf/sgm");
  for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ++ci) {
    int64_t M = cases[ci].m, K = cases[ci].k, N = cases[ci].n;
    bool gelu = cases[ci].gelu;
    tj_kir_t* kb = build_gemm_dt("bf", N, K, false, false, gelu, TJ_DTYPE_BF16);
    tj_kir_t* kf = build_gemm_dt("f", N, K, false, false, gelu, TJ_DTYPE_F32);
    if (!kb || !kf) return;
    compiled_t cb, cw = {0}, cd = {0}, cf;
    if (!compile(jit, kb, &cb) || !compile(jit, kf, &cf)) return;
    bool have_widen = jit4 && compile(jit4, kb, &cw);
    bool have_dot = jit_dot && compile(jit_dot, kb, &cd);
    float* xf = alloc_floats((size_t)(M * K));
    float* wf = alloc_floats((size_t)(K * N));
    float* bf = alloc_floats((size_t)N);
    float* yf = alloc_floats((size_t)(M * N));
    float* ref = alloc_floats((size_t)(M * N));
    uint16_t* xb = (uint16_t*)alloc_floats((size_t)(M * K));
    uint16_t* wb = (uint16_t*)alloc_floats((size_t)(K * N));
    uint16_t* bb = (uint16_t*)alloc_floats((size_t)N);
    float* yb = alloc_floats((size_t)(M * N));  // f32 or bf16 results
    if (!xf || !wf || !bf || !yf || !ref || !xb || !wb || !bb || !yb) return;
    srand(1);
    // The same values in both dtypes (bf16-representable floats).
    for (int64_t i = 0; i < M * K; ++i) {
      xb[i] = to_bf16((float)rand() / (float)RAND_MAX - 0.5f);
      xf[i] = from_bf16(xb[i]);
    }
    for (int64_t i = 0; i < K * N; ++i) {
      wb[i] = to_bf16(((float)rand() / (float)RAND_MAX - 0.5f) * 0.06f);
      wf[i] = from_bf16(wb[i]);
    }
    for (int64_t i = 0; i < N; ++i) {
      bb[i] = to_bf16((float)rand() / (float)RAND_MAX - 0.5f);
      bf[i] = from_bf16(bb[i]);
    }
    void* bufs_b[4] = {xb, wb, bb, yb};
    void* bufs_f[4] = {xf, wf, bf, yf};
    for (size_t ti = 0; ti < sizeof(thread_counts) / sizeof(thread_counts[0]);
         ++ti) {
      int threads = thread_counts[ti];
      double t_widen = NAN, t_dot = NAN, t_sb = NAN, t_s = NAN;
      double sp_bf, sp_dot = NAN, sp_f32, sp_sb = NAN, sp_s = NAN;
      if (have_widen) {
        t_widen = time_kernel(jit4, kb, cw.fn, bufs_b, M, threads, runs, NULL);
      }
      double t_f32 =
          time_kernel(jit, kf, cf.fn, bufs_f, M, threads, runs, &sp_f32);
      if (have_dot) {
        t_dot =
            time_kernel(jit_dot, kb, cd.fn, bufs_b, M, threads, runs, &sp_dot);
      }
      double t_bf =
          time_kernel(jit, kb, cb.fn, bufs_b, M, threads, runs, &sp_bf);
      double t[64];
      if (set_threads) set_threads(threads);
      if (sbgemm) {
        for (int i = 0; i < runs; ++i) {
          double s0 = now_ms();
          sbgemm(kRowMajor, kNoTrans, kNoTrans, (int)M, (int)N, (int)K, 1.0f,
                 xb, (int)K, wb, (int)N, 0.0f, ref, (int)N);
          t[i] = now_ms() - s0;
        }
        t_sb = median(t, runs);
        sp_sb = spread_pct(t, runs, t_sb);
      }
      if (sgemm) {
        for (int i = 0; i < runs; ++i) {
          double s0 = now_ms();
          sgemm(kRowMajor, kNoTrans, kNoTrans, (int)M, (int)N, (int)K, 1.0f, xf,
                (int)K, wf, (int)N, 0.0f, ref, (int)N);
          t[i] = now_ms() - s0;
        }
        t_s = median(t, runs);
        sp_s = spread_pct(t, runs, t_s);
      }
      double gf = 2.0 * (double)M * (double)N * (double)K / 1e6;
      printf(
          "%-5s %5lld %5lld %5lld %3d | %8.3f %4.0f %7.1f | %8.3f %4.0f | "
          "%8.3f | %8.3f %4.0f | %8.3f %4.0f | %8.3f %4.0f | %7.3f %7.3f "
          "%7.3f %7.3f\n",
          cases[ci].name, (long long)M, (long long)K, (long long)N, threads,
          t_bf, sp_bf, gf / t_bf, t_dot, sp_dot, t_widen, t_f32, sp_f32, t_sb,
          sp_sb, t_s, sp_s, t_bf / t_dot, t_bf / t_f32, t_bf / t_sb,
          t_bf / t_s);
      fflush(stdout);
      if (sgemm && !gelu) {
        // Sanity: the bf16 product equals sgemm's of the same values to
        // f32 accumulation error.
        double worst = 0;
        for (int q = 0; q < 1000; ++q) {
          int64_t i = (int64_t)rand() % (M * N);
          worst = fmax(worst, fabs((double)yb[i] - (double)ref[i]));
        }
        if (worst > 1e-4) printf("  WARNING: max |bf16 - sgemm| = %g\n", worst);
      }
    }
    free(xf);
    free(wf);
    free(bf);
    free(yf);
    free(ref);
    free(xb);
    free(wb);
    free(bb);
    free(yb);
    tj_x86_module_destroy(cb.module);
    tj_x86_module_destroy(cf.module);
    if (have_widen) tj_x86_module_destroy(cw.module);
    if (have_dot) tj_x86_module_destroy(cd.module);
    tj_kir_destroy(kb);
    tj_kir_destroy(kf);
  }
  printf(
      "(bf16: the host's level, %s; dot: vdpbf16ps (an avx512 JIT, run only "
      "where bf16 is on the tiles); widen: f16/bf16 -> f32 while packing, f32 "
      "FMAs, the x86-64-v4 JIT; %s of %d runs, +-%%: (max - min) / that)\n",
      tiles ? "the AMX tiles (tdpbf16ps) where K % 32 == 0"
      : dot ? "vdpbf16ps on bf16 pairs"
            : "the widening path",
      g_cpu_clock ? "minimum CPU time" : "medians", runs);
  if (jit4) tj_x86_jit_destroy(jit4);
  if (jit_dot) tj_x86_jit_destroy(jit_dot);
}

typedef void (*sgemv_fn)(int order, int trans, int m, int n, float alpha,
                         const float* a, int lda, const float* x, int incx,
                         float beta, float* y, int incy);
enum { kTrans = 112 };

int main(int argc, char** argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 7;
  const char* filter = argc > 2 ? argv[2] : NULL;
  if (runs < 1) runs = 1;
  if (runs > 64) runs = 64;
  static const int thread_counts[] = {1, 2};
  const char* epi_env = getenv("GEMM_BENCH_EPILOGUE");
  if (epi_env && strcmp(epi_env, "erf") == 0) g_epi = EPI_ERF;
  if (epi_env && strcmp(epi_env, "silu") == 0) g_epi = EPI_SILU;
  const char* clock_env = getenv("GEMM_BENCH_CLOCK");
  g_cpu_clock = clock_env && strcmp(clock_env, "cpu") == 0;
  print_machine();

  void* blas = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  sgemm_fn sgemm = NULL;
  sgemv_fn sgemv = NULL;
  corename_fn corename = NULL;
  set_threads_fn set_threads = NULL;
  sbgemm_fn sbgemm = NULL;
  if (blas) {
    // dlsym's object pointers become function pointers by copy (ISO C has
    // no cast between the two).
    void* p = dlsym(blas, "cblas_sgemm");
    if (p) memcpy(&sgemm, &p, sizeof(p));
    p = dlsym(blas, "cblas_sbgemm");
    if (p) memcpy(&sbgemm, &p, sizeof(p));
    p = dlsym(blas, "cblas_sgemv");
    if (p) memcpy(&sgemv, &p, sizeof(p));
    p = dlsym(blas, "openblas_get_corename");
    if (p) memcpy(&corename, &p, sizeof(p));
    p = dlsym(blas, "openblas_set_num_threads");
    if (p) memcpy(&set_threads, &p, sizeof(p));
  }
  const char* env_core = getenv("OPENBLAS_CORETYPE");
  printf("openblas: %s (core %s%s%s)\n",
         sgemm ? "libopenblas.so.0" : "not found", corename ? corename() : "?",
         env_core ? ", OPENBLAS_CORETYPE=" : "", env_core ? env_core : "");

  tj_x86_jit_options_t jit_options = {.isa = TJ_X86_ISA_HOST};
  const char* isa = getenv("GEMM_BENCH_ISA");
  if (isa && strcmp(isa, "avx2") == 0) jit_options.isa = TJ_X86_ISA_AVX2;
  if (isa && strcmp(isa, "sse2") == 0) jit_options.isa = TJ_X86_ISA_SSE2;
  if (isa && strcmp(isa, "v4") == 0) jit_options.isa = TJ_X86_ISA_X86_64_V4;
  tj_x86_jit_t* jit = NULL;
  if (!ok(tj_x86_jit_create(tj_allocator_system(), &jit_options, &jit),
          "jit")) {
    return 1;
  }
  const char* cpu = strstr(tj_x86_jit_target_key(jit), "cpu=");
  printf("jit: %d f32 lanes, %.*s\n", tj_x86_jit_lanes(jit),
         cpu ? (int)strcspn(cpu, ";") : 1, cpu ? cpu : "?");
  {
    // Compile time of the capstone kernel: a throwaway compile pays
    // LLVM's one-time set-up first.
    tj_kir_t* k = build_gemm("capstone", 4096, 1024, false, false, true);
    if (!k) return 1;
    const tj_kir_t* ks[1] = {k};
    tj_x86_object_t obj;
    if (!ok(tj_x86_jit_compile(jit, ks, 1, &obj), "compile")) return 1;
    tj_x86_object_deinitialize(&obj);
    double t0 = now_ms();
    if (!ok(tj_x86_jit_compile(jit, ks, 1, &obj), "compile")) return 1;
    double cold = now_ms() - t0;
    t0 = now_ms();
    tj_x86_jit_t* jit2 = NULL;
    tj_x86_module_t* module = NULL;
    tj_kir_fn_t fn = NULL;
    if (!ok(tj_x86_jit_create(tj_allocator_system(), &jit_options, &jit2),
            "jit") ||
        !ok(tj_x86_jit_load(jit2, obj.data, obj.size, &module), "load") ||
        !ok(tj_x86_module_lookup(module, "capstone", &fn), "lookup")) {
      return 1;
    }
    double warm = now_ms() - t0;
    const char* asm_path = getenv("GEMM_BENCH_ASM");
    if (asm_path) {
      // The capstone kernel's assembly, to read the microkernel's loop.
      char* text = NULL;
      FILE* f = fopen(asm_path, "w");
      if (f && ok(tj_x86_jit_emit_asm(jit, ks, 1, &text), "asm")) {
        fputs(text, f);
        tj_free_string(tj_allocator_system(), text);
      }
      if (f) fclose(f);
    }
    tj_kir_gemm_schedule_t sched;
    tj_kir_gemm_resolve(k, tj_x86_jit_lanes(jit), &sched);
    printf(
        "capstone kernel: tile %dx%d mc %d nc %d kc %d; compile cold %.1f "
        "ms (emit+O3+codegen), warm %.2f ms (new JIT + load + link)\n",
        sched.tile_m, sched.tile_n, sched.mc, sched.nc, sched.kc, cold, warm);
    tj_x86_module_destroy(module);
    tj_x86_jit_destroy(jit2);
    tj_x86_object_deinitialize(&obj);
    tj_kir_destroy(k);
  }

  bool bf16_only = filter && strcmp(filter, "bf16") == 0;
  if (bf16_only) {
    bench_bf16(jit, runs, sgemm, sbgemm, set_threads);
    tj_x86_jit_destroy(jit);
    if (blas) dlclose(blas);
    return 0;
  }
  printf("\n%-4s %5s %5s %5s %3s | %9s %7s | %9s %7s | %9s | %7s\n", "case",
         "M", "N", "K", "thr", "ours ms", "GFLOP/s", "sgemm ms", "GFLOP/s",
         "sgemv ms", "ours/best");
  for (size_t ci = 0; ci < sizeof(kCases) / sizeof(kCases[0]); ++ci) {
    const bench_case_t* bc = &kCases[ci];
    char label[64];
    // Rows are named by the capstone's batch: M, or K for dW.
    snprintf(label, sizeof(label), "%s%lld", bc->name,
             (long long)(bc->a_trans ? bc->k : bc->m));
    if (filter && strcmp(label, filter) != 0 && strcmp(filter, bc->name) != 0) {
      continue;
    }
    int64_t M = bc->m, N = bc->n, K = bc->k;
    bool a_trans = bc->a_trans;
    tj_kir_t* k = build_gemm(bc->name, N, K, a_trans, bc->b_trans, bc->gelu);
    if (!k) return 1;
    compiled_t c;
    if (!compile(jit, k, &c)) return 1;
    float* x = alloc_floats((size_t)(M * K));
    float* w = alloc_floats((size_t)(K * N));
    float* bias = alloc_floats((size_t)N);
    float* y = alloc_floats((size_t)(M * N));
    float* ref = alloc_floats((size_t)(M * N));
    if (!x || !w || !bias || !y || !ref) return 1;
    srand(1);
    for (int64_t i = 0; i < M * K; ++i)
      x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (int64_t i = 0; i < K * N; ++i) {
      w[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * 0.06f;
    }
    for (int64_t i = 0; i < N; ++i)
      bias[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    int ta = a_trans ? kTrans : kNoTrans, tb = bc->b_trans ? kTrans : kNoTrans;
    int lda = a_trans ? (int)M : (int)K, ldb = bc->b_trans ? (int)K : (int)N;
    for (size_t ti = 0; ti < sizeof(thread_counts) / sizeof(thread_counts[0]);
         ++ti) {
      int threads = thread_counts[ti];
      tj_thread_pool_t* pool = NULL;
      if (!ok(tj_thread_pool_create(tj_allocator_system(), threads, &pool),
              "pool")) {
        return 1;
      }
      int64_t scalars[1] = {M};
      tj_kir_launch_t launch;
      if (!ok(tj_kir_launch_info(k, tj_x86_jit_lanes(jit), scalars, &launch),
              "launch")) {
        return 1;
      }
      int64_t stride = (launch.scratch_bytes + 4095) / 4096 * 4096;
      unsigned char* scratch = (unsigned char*)alloc_floats(
          (size_t)(stride * threads) / sizeof(float));
      void* bufs[4] = {x, w, bias, y};
      run_t r = {c.fn, bufs, scalars, scratch, stride};
      // Small problems repeat inside one timing so that a timing is ~2 ms.
      double s0 = now_ms();
      tj_thread_pool_parallel_for(pool, launch.units, task, &r);  // warm-up
      double once = now_ms() - s0;
      int inner = once > 0 && once < 2 ? (int)(2 / once) + 1 : 1;
      double ours[64], theirs[64], gemv[64];
      for (int i = 0; i < runs; ++i) {
        double s = now_ms();
        for (int q = 0; q < inner; ++q) {
          tj_thread_pool_parallel_for(pool, launch.units, task, &r);
        }
        ours[i] = (now_ms() - s) / inner;
      }
      double blas_ms = NAN, gemv_ms = NAN;
      if (sgemm) {
        if (set_threads) set_threads(threads);
        sgemm(kRowMajor, ta, tb, (int)M, (int)N, (int)K, 1.0f, x, lda, w, ldb,
              0.0f, ref, (int)N);
        for (int i = 0; i < runs; ++i) {
          double s = now_ms();
          for (int q = 0; q < inner; ++q) {
            sgemm(kRowMajor, ta, tb, (int)M, (int)N, (int)K, 1.0f, x, lda, w,
                  ldb, 0.0f, ref, (int)N);
          }
          theirs[i] = (now_ms() - s) / inner;
        }
        blas_ms = median(theirs, runs);
      }
      if (sgemv && M == 1 && !bc->b_trans) {
        // y[N] = W^T x for row-major W [K, N].
        for (int i = 0; i < runs; ++i) {
          double s = now_ms();
          for (int q = 0; q < inner; ++q) {
            sgemv(kRowMajor, kTrans, (int)K, (int)N, 1.0f, w, (int)N, x, 1,
                  0.0f, ref, 1);
          }
          gemv[i] = (now_ms() - s) / inner;
        }
        gemv_ms = median(gemv, runs);
      }
      double our_ms = median(ours, runs);
      double flops = 2.0 * (double)M * (double)N * (double)K;
      double best = isnan(gemv_ms) || blas_ms < gemv_ms ? blas_ms : gemv_ms;
      printf(
          "%-4s %5lld %5lld %5lld %3d | %9.4f %7.1f | %9.4f %7.1f | %9.4f "
          "| %7.3f\n",
          bc->name, (long long)M, (long long)N, (long long)K, threads, our_ms,
          flops / our_ms / 1e6, blas_ms, flops / blas_ms / 1e6, gemv_ms,
          our_ms / best);
      fflush(stdout);
      // Sanity: ours equals the epilogue of OpenBLAS's result.
      double worst = 0;
      for (int s = 0; s < 1000 && sgemm; ++s) {
        int64_t i = (int64_t)rand() % (M * N);
        double v = (double)ref[i];
        if (bc->gelu) {
          v += bias[i % N];
          v = g_epi == EPI_ERF    ? 0.5 * v * erfc(v * -0.7071067811865476)
              : g_epi == EPI_SILU ? v / (1 + exp(-v))
                                  : 0.5 * v *
                                        (1 + tanh(0.7978845608028654 *
                                                  (v + 0.044715 * v * v * v)));
        }
        worst = fmax(worst, fabs(v - y[i]));
      }
      if (worst > 1e-4) printf("  WARNING: max |ours - blas| = %g\n", worst);
      free(scratch);
      tj_thread_pool_destroy(pool);
    }
    free(x);
    free(w);
    free(bias);
    free(y);
    free(ref);
    tj_x86_module_destroy(c.module);
    tj_kir_destroy(k);
  }
  printf(
      "(fwd: fused gelu(x@w+b) in one kernel vs cblas_sgemm alone (and "
      "cblas_sgemv at M = 1); dx: x@w^T, dW: x^T@w, plain; medians of %d "
      "runs)\n",
      runs);
  if (!filter) bench_bf16(jit, runs, sgemm, sbgemm, set_threads);
  tj_x86_jit_destroy(jit);
  if (blas) dlclose(blas);
  return 0;
}
