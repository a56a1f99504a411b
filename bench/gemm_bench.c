// The capstone block gelu(x @ w + b) (tanh form, f32, K = 1024, N = 4096)
// as one JIT-compiled kernel, beside OpenBLAS cblas_sgemm measured in the
// same run (dlopen'ed, never linked). Medians of several runs after a
// warm-up, 1 and 2 threads, ratios printed.
//
//   usage: gemm_bench [runs]     (default 7)
//
// Run OpenBLAS at its best on this machine: the environment's
// OPENBLAS_CORETYPE=Haswell makes it 1.8x slower (shared/BENCHMARKING.md):
//   (unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; ./build/bench/gemm_bench)

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "backends/x86/thread_pool.h"
#include "jit/kernel_ir.h"
#include "jit/x86_jit.h"

enum { kRowMajor = 101, kNoTrans = 111 };
typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k,
                         float alpha, const float* a, int lda, const float* b,
                         int ldb, float beta, float* c, int ldc);
typedef char* (*corename_fn)(void);
typedef void (*set_threads_fn)(int);

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
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

static tj_kir_t* build_capstone(int64_t n, int64_t k_dim) {
  tj_kir_t* k = NULL;
  if (!ok(tj_kir_create(tj_allocator_system(), TJ_KIR_GEMM, "capstone", &k),
          "create")) {
    return NULL;
  }
  uint32_t B = tj_kir_add_param(k, "B");
  tj_kir_ival_t dims[2] = {tj_kir_runtime(B), tj_kir_constant(n)};
  tj_kir_set_space(k, 2, dims);
  tj_kir_ival_t sx[2] = {tj_kir_constant(k_dim), tj_kir_constant(1)};
  tj_kir_ival_t sw[2] = {tj_kir_constant(n), tj_kir_constant(1)};
  tj_kir_ival_t sb[2] = {tj_kir_constant(0), tj_kir_constant(1)};
  tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_GEMM_A, sx);
  tj_kir_add_buffer(k, "w", TJ_DTYPE_F32, TJ_KIR_GEMM_B, sw);
  uint32_t b = tj_kir_add_buffer(k, "b", TJ_DTYPE_F32, TJ_KIR_INPUT, sb);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sw);
  tj_kir_set_gemm(k, tj_kir_constant(k_dim), NULL);
  uint32_t acc = tj_kir_acc(k);
  uint32_t v = tj_kir_binary(k, TJ_OP_ADD, acc, tj_kir_load(k, b));
  uint32_t v3 = tj_kir_binary(k, TJ_OP_MUL, v, tj_kir_binary(k, TJ_OP_MUL, v, v));
  uint32_t inner = tj_kir_binary(
      k, TJ_OP_ADD, v,
      tj_kir_binary(k, TJ_OP_MUL, v3,
                    tj_kir_const_float(k, TJ_DTYPE_F32, 0.044715)));
  uint32_t t = tj_kir_unary(
      k, TJ_OP_TANH,
      tj_kir_binary(k, TJ_OP_MUL, inner,
                    tj_kir_const_float(k, TJ_DTYPE_F32, 0.7978845608028654)));
  uint32_t half = tj_kir_binary(k, TJ_OP_MUL, v,
                                tj_kir_const_float(k, TJ_DTYPE_F32, 0.5));
  tj_kir_store(k, y, tj_kir_binary(
                         k, TJ_OP_MUL, half,
                         tj_kir_binary(k, TJ_OP_ADD, t,
                                       tj_kir_const_float(k, TJ_DTYPE_F32, 1))));
  if (!ok(tj_kir_finalize(k), "finalize")) {
    tj_kir_destroy(k);
    return NULL;
  }
  return k;
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
  printf("machine: %s, %d CPUs\n", model, cpus);
}

int main(int argc, char** argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 7;
  if (runs < 1) runs = 1;
  const int64_t N = 4096, K = 1024;
  static const int64_t batches[] = {256, 2048};
  static const int thread_counts[] = {1, 2};
  print_machine();

  void* blas = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  sgemm_fn sgemm = NULL;
  corename_fn corename = NULL;
  set_threads_fn set_threads = NULL;
  if (blas) {
    // dlsym's object pointers become function pointers by copy (ISO C has
    // no cast between the two).
    void* p = dlsym(blas, "cblas_sgemm");
    if (p) memcpy(&sgemm, &p, sizeof(p));
    p = dlsym(blas, "openblas_get_corename");
    if (p) memcpy(&corename, &p, sizeof(p));
    p = dlsym(blas, "openblas_set_num_threads");
    if (p) memcpy(&set_threads, &p, sizeof(p));
  }
  const char* env_core = getenv("OPENBLAS_CORETYPE");
  printf("openblas: %s (core %s%s%s)\n",
         sgemm ? "libopenblas.so.0" : "not found", corename ? corename() : "?",
         env_core ? ", OPENBLAS_CORETYPE=" : "", env_core ? env_core : "");

  tj_x86_jit_t* jit = NULL;
  if (!ok(tj_x86_jit_create(tj_allocator_system(), NULL, &jit), "jit")) {
    return 1;
  }
  const char* cpu = strstr(tj_x86_jit_target_key(jit), "cpu=");
  printf("jit: %d f32 lanes, %.*s\n", tj_x86_jit_lanes(jit),
         cpu ? (int)strcspn(cpu, ";") : 1, cpu ? cpu : "?");
  tj_kir_t* k = build_capstone(N, K);
  if (!k) return 1;
  const tj_kir_t* ks[1] = {k};
  // A throwaway compile pays LLVM's one-time set-up first.
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
  if (!ok(tj_x86_jit_create(tj_allocator_system(), NULL, &jit2), "jit") ||
      !ok(tj_x86_jit_load(jit2, obj.data, obj.size, &module), "load") ||
      !ok(tj_x86_module_lookup(module, "capstone", &fn), "lookup")) {
    return 1;
  }
  double warm = now_ms() - t0;
  tj_kir_gemm_schedule_t sched;
  tj_kir_gemm_resolve(k, tj_x86_jit_lanes(jit), &sched);
  printf("capstone kernel: tile %dx%d mc %d nc %d kc %d; compile cold %.1f "
         "ms (emit+O3+codegen), warm %.2f ms (new JIT + load + link)\n",
         sched.tile_m, sched.tile_n, sched.mc, sched.nc, sched.kc, cold, warm);

  printf("\n%6s %3s | %10s %8s | %10s %8s | %7s\n", "B", "thr", "ours ms",
         "GFLOP/s", "blas ms", "GFLOP/s", "ours/blas");
  for (size_t bi = 0; bi < sizeof(batches) / sizeof(batches[0]); ++bi) {
    int64_t B = batches[bi];
    float* x = alloc_floats((size_t)(B * K));
    float* w = alloc_floats((size_t)(K * N));
    float* bias = alloc_floats((size_t)N);
    float* y = alloc_floats((size_t)(B * N));
    float* c = alloc_floats((size_t)(B * N));
    if (!x || !w || !bias || !y || !c) return 1;
    srand(1);
    for (int64_t i = 0; i < B * K; ++i) x[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int64_t i = 0; i < K * N; ++i) w[i] = ((float)rand() / RAND_MAX - 0.5f) * 0.06f;
    for (int64_t i = 0; i < N; ++i) bias[i] = (float)rand() / RAND_MAX - 0.5f;
    for (size_t ti = 0; ti < sizeof(thread_counts) / sizeof(thread_counts[0]);
         ++ti) {
      int threads = thread_counts[ti];
      tj_thread_pool_t* pool = NULL;
      if (!ok(tj_thread_pool_create(tj_allocator_system(), threads, &pool),
              "pool")) {
        return 1;
      }
      int64_t scalars[1] = {B};
      tj_kir_launch_t launch;
      if (!ok(tj_kir_launch_info(k, tj_x86_jit_lanes(jit), scalars, &launch),
              "launch")) {
        return 1;
      }
      int64_t stride = (launch.scratch_bytes + 4095) / 4096 * 4096;
      unsigned char* scratch = (unsigned char*)alloc_floats(
          (size_t)(stride * threads) / sizeof(float));
      void* bufs[4] = {x, w, bias, y};
      run_t r = {fn, bufs, scalars, scratch, stride};
      double ours[64], theirs[64];
      int n = runs > 64 ? 64 : runs;
      tj_thread_pool_parallel_for(pool, launch.units, task, &r);  // warm-up
      for (int i = 0; i < n; ++i) {
        double s = now_ms();
        tj_thread_pool_parallel_for(pool, launch.units, task, &r);
        ours[i] = now_ms() - s;
      }
      double blas_ms = NAN;
      if (sgemm) {
        if (set_threads) set_threads(threads);
        sgemm(kRowMajor, kNoTrans, kNoTrans, (int)B, (int)N, (int)K, 1.0f, x,
              (int)K, w, (int)N, 0.0f, c, (int)N);
        for (int i = 0; i < n; ++i) {
          double s = now_ms();
          sgemm(kRowMajor, kNoTrans, kNoTrans, (int)B, (int)N, (int)K, 1.0f,
                x, (int)K, w, (int)N, 0.0f, c, (int)N);
          theirs[i] = now_ms() - s;
        }
        blas_ms = median(theirs, n);
      }
      double our_ms = median(ours, n);
      double flops = 2.0 * (double)B * (double)N * (double)K;
      printf("%6lld %3d | %10.3f %8.1f | %10.3f %8.1f | %7.3f\n",
             (long long)B, threads, our_ms, flops / our_ms / 1e6, blas_ms,
             flops / blas_ms / 1e6, our_ms / blas_ms);
      // Sanity: our result is gelu(blas result + b) to f32 accuracy.
      double worst = 0;
      for (int s = 0; s < 1000 && sgemm; ++s) {
        int64_t i = (int64_t)rand() % (B * N);
        double v = (double)c[i] + bias[i % N];
        double g = 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
        worst = fmax(worst, fabs(g - y[i]));
      }
      if (worst > 1e-4) printf("  WARNING: max |ours - gelu(blas + b)| = %g\n", worst);
      free(scratch);
      tj_thread_pool_destroy(pool);
    }
    free(x);
    free(w);
    free(bias);
    free(y);
    free(c);
  }
  printf("(ours: fused gelu(x@w+b) in one kernel; blas: cblas_sgemm alone; "
         "medians of %d runs)\n", runs);
  tj_x86_module_destroy(module);
  tj_x86_jit_destroy(jit2);
  tj_x86_object_deinitialize(&obj);
  tj_kir_destroy(k);
  tj_x86_jit_destroy(jit);
  if (blas) dlclose(blas);
  return 0;
}
