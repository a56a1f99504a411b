// GPU benchmark of the NVPTX kernels beside cuBLAS and the copy engine,
// measured in one process on one stream with CUDA events (mean of N runs
// after warm-up). Prints a table; never a pass/fail.
//
//   cuda_bench [--quick | --gemm [--shape=M,K,N]... [--loop=TEXT]...
//               [--plain] [--profile] [--erf] [--bt] |
//               (--f32 | --f32-exact | --batched) [--profile]]
//
// --gemm prints only the tensor-core GEMM table (every main loop and tile,
// TMA's included, on the bf16 shapes of issues 12 and 13, medians of 7
// samples). --shape runs the shapes given instead (any M, K, N), --loop
// only the main loops whose name contains TEXT, --plain leaves out the
// fused kernels;
// --profile launches each kept kernel (plain, then fused unless --plain)
// and cuBLAS once per shape, untimed,
// for a profiler (ncu) to capture one launch of each; --bt reads B
// transposed, y = x @ w^T with w an [N, K] weight (PyTorch's Linear: our
// K-major B, cuBLAS with transa = T on it); --erf fuses gelu's erf form,
// the capstone's, instead of the tanh form. --f32 prints the f32
// table (the exact CUDA-core loops and the TF32 ones beside cuBLAS);
// --f32-exact its exact rows alone. --batched prints the batched attention
// GEMMs of issue 13 beside cuBLAS's strided batched GEMM. --profile after
// --f32, --f32-exact or --batched launches every timed kernel once instead.
//
// cuBLAS is opened with dlopen (libcublas.so.13 or .12); without it only
// our numbers are printed.

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_kir.h"
#include "bench/cuda_bench_util.h"
#include "lib/dtype.h"
#include "tests/cuda/nvptx_samples.h"

static tj_cuda_device_t* g_dev;
static tj_nvptx_target_t* g_target;
static int g_iters = 20;
// --gemm --bt: B is w^T of an [N, K] w (run_blas and the GEMM table's
// kernels read it so).
static bool g_bt;

//===--- timing ---===//

typedef bench_work_fn work_fn;

// Mean GPU time of |iters| calls of |fn| (device entered), in ms.
// --profile with --f32, --f32-exact or --batched: every timing launches its
// work once, untimed, for a profiler (ncu) to capture one launch of each.
static bool g_profile_once;

static double time_ms(work_fn fn, void* ctx, int iters) {
  if (g_profile_once) {
    fn(ctx);
    bench_die(tj_cuda_device_synchronize(g_dev), "sync");
    return 1.0;
  }
  return bench_mean_ms(g_dev, fn, ctx, 3, iters, true);
}

typedef struct kir_run_t {
  tj_cuda_kir_kernel_t* k;
  tj_cu_deviceptr_t buffers[8];
  int64_t scalars[8];
} kir_run_t;

static void run_kir(void* ctx) {
  kir_run_t* r = ctx;
  bench_die(tj_cuda_kir_launch(r->k, r->buffers, r->scalars), "launch");
}

static tj_cu_deviceptr_t dev_random_bf16(int64_t n, float scale) {
  uint16_t* h = malloc((size_t)n * 2);
  uint64_t s = 88172645463325252ull;
  for (int64_t i = 0; i < n; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    h[i] = tj_f32_to_bf16(scale * ((float)(s >> 40) / 16777216.0f - 0.5f));
  }
  tj_cu_deviceptr_t p;
  bench_die(tj_cuda_device_alloc(g_dev, (size_t)n * 2, &p), "alloc");
  bench_die(tj_cuda_copy_to_device(g_dev, p, h, (size_t)n * 2), "copy");
  bench_die(tj_cuda_device_synchronize(g_dev), "sync");
  free(h);
  return p;
}

static tj_cu_deviceptr_t dev_random_f32(int64_t n, float scale) {
  float* h = malloc((size_t)n * 4);
  uint64_t s = 88172645463325252ull;
  for (int64_t i = 0; i < n; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    h[i] = scale * ((float)(s >> 40) / 16777216.0f - 0.5f);
  }
  tj_cu_deviceptr_t p;
  bench_die(tj_cuda_device_alloc(g_dev, (size_t)n * 4, &p), "alloc");
  bench_die(tj_cuda_copy_to_device(g_dev, p, h, (size_t)n * 4), "copy");
  bench_die(tj_cuda_device_synchronize(g_dev), "sync");
  free(h);
  return p;
}

// max |a - b| over |n| f32 of device memory.
static double max_abs_f32(tj_cu_deviceptr_t a, tj_cu_deviceptr_t b, int64_t n) {
  float* ha = malloc((size_t)n * 4);
  float* hb = malloc((size_t)n * 4);
  bench_die(tj_cuda_device_synchronize(g_dev), "sync");
  bench_die(tj_cuda_copy_to_host(g_dev, ha, a, (size_t)n * 4), "copy");
  bench_die(tj_cuda_copy_to_host(g_dev, hb, b, (size_t)n * 4), "copy");
  bench_die(tj_cuda_device_synchronize(g_dev), "sync");
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = fabs((double)ha[i] - (double)hb[i]);
    if (d > worst || d != d) worst = d;
  }
  free(ha);
  free(hb);
  return worst;
}

static tj_cu_deviceptr_t dev_zeros(size_t bytes) {
  tj_cu_deviceptr_t p;
  bench_die(tj_cuda_device_alloc(g_dev, bytes, &p), "alloc");
  bench_die(tj_cuda_fill_bytes(g_dev, p, 0, bytes), "fill");
  return p;
}

//===--- cuBLAS through dlopen ---===//

typedef int (*cublas_create_fn)(void** handle);
typedef int (*cublas_set_stream_fn)(void* handle, tj_cu_stream_t stream);
typedef int (*cublas_gemm_ex_fn)(void* handle, int transa, int transb, int m,
                                 int n, int k, const void* alpha, const void* a,
                                 int atype, int lda, const void* b, int btype,
                                 int ldb, const void* beta, void* c, int ctype,
                                 int ldc, int compute, int algo);

typedef int (*cublas_gemm_strided_fn)(void* handle, int transa, int transb,
                                      int m, int n, int k, const void* alpha,
                                      const void* a, int atype, int lda,
                                      long long stride_a, const void* b,
                                      int btype, int ldb, long long stride_b,
                                      const void* beta, void* c, int ctype,
                                      int ldc, long long stride_c, int batch,
                                      int compute, int algo);

static struct {
  void* handle;
  cublas_gemm_ex_fn gemm_ex;
  cublas_gemm_strided_fn gemm_strided;
  char version[64];
} g_blas;

static void open_cublas(void) {
  const char* names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
  void* lib = NULL;
  for (size_t i = 0; i < 3 && !lib; ++i) {
    lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (lib) snprintf(g_blas.version, sizeof(g_blas.version), "%s", names[i]);
  }
  if (!lib) {
    printf("# cuBLAS not found: %s\n", dlerror());
    return;
  }
  cublas_create_fn create;
  cublas_set_stream_fn set_stream;
  void* sym = dlsym(lib, "cublasCreate_v2");
  memcpy(&create, &sym, sizeof(sym));
  sym = dlsym(lib, "cublasSetStream_v2");
  memcpy(&set_stream, &sym, sizeof(sym));
  sym = dlsym(lib, "cublasGemmEx");
  memcpy(&g_blas.gemm_ex, &sym, sizeof(sym));
  sym = dlsym(lib, "cublasGemmStridedBatchedEx");
  memcpy(&g_blas.gemm_strided, &sym, sizeof(sym));
  if (!create || !set_stream || !g_blas.gemm_ex) return;
  bench_die(tj_cuda_device_enter(g_dev), "enter");
  if (create(&g_blas.handle) != 0 ||
      set_stream(g_blas.handle, g_dev->stream) != 0) {
    printf("# cublasCreate failed\n");
    g_blas.handle = NULL;
  }
  tj_cuda_device_leave(g_dev);
}

typedef struct blas_run_t {
  int m, n, k, dtype, out_dtype;
  tj_cu_deviceptr_t a, b, c;
  int compute;  // cublasComputeType_t; 0: CUBLAS_COMPUTE_32F
} blas_run_t;

// Row-major C[m,n] = A[m,k] B[k,n] is column-major C^T = B^T A^T; with
// g_bt, B is w^T of a row-major [N, K] w: cuBLAS's A is w transposed.
static void run_blas(void* ctx) {
  blas_run_t* r = ctx;
  float one = 1.0f, zero = 0.0f;
  int status = g_blas.gemm_ex(
      g_blas.handle, g_bt ? 1 : 0, 0, r->n, r->m, r->k, &one,
      (void*)(uintptr_t)r->b, r->dtype, g_bt ? r->k : r->n,
      (void*)(uintptr_t)r->a, r->dtype, r->k, &zero, (void*)(uintptr_t)r->c,
      r->out_dtype, r->n, r->compute ? r->compute : 68 /* 32F */, -1);
  if (status != 0) {
    fprintf(stderr, "cublasGemmEx: status %d\n", status);
    exit(1);
  }
}

typedef struct blas_batched_t {
  int batch, m, n, k;
  tj_cu_deviceptr_t a, b, c;
} blas_batched_t;

// Row-major bf16 C[i] = A[i] B[i] for each of |batch| dense entries.
static void run_blas_batched(void* ctx) {
  blas_batched_t* r = ctx;
  float one = 1.0f, zero = 0.0f;
  int status = g_blas.gemm_strided(
      g_blas.handle, 0, 0, r->n, r->m, r->k, &one, (void*)(uintptr_t)r->b, 14,
      r->n, (long long)r->k * r->n, (void*)(uintptr_t)r->a, 14, r->k,
      (long long)r->m * r->k, &zero, (void*)(uintptr_t)r->c, 14, r->n,
      (long long)r->m * r->n, r->batch, 68 /* 32F */, -1);
  if (status != 0) {
    fprintf(stderr, "cublasGemmStridedBatchedEx: status %d\n", status);
    exit(1);
  }
}

//===--- kernels ---===//

static tj_cuda_kir_kernel_t* compile(const tj_kir_t* k, const char* what,
                                     const tj_nvptx_options_t* options) {
  tj_cuda_kir_kernel_t* ck = NULL;
  bench_die(tj_cuda_kir_compile(g_dev, g_target, k, options, &ck, NULL), what);
  printf(
      "# %-22s %3d regs, %d local bytes, LLVM->PTX %.1f ms, driver "
      "load %.1f ms\n",
      what, ck->function.num_regs, ck->function.local_bytes, ck->compile_ms,
      ck->load_ms);
  return ck;
}

// A plain matmul: y = cast(acc), operands and output of |dt|.
static tj_kir_t* plain_gemm(tj_dtype_t dt) {
  tj_kir_t* k = NULL;
  bench_die(tj_kir_create(tj_allocator_system(), TJ_KIR_GEMM,
                          dt == TJ_DTYPE_F32 ? "mm_f32" : "mm_bf16", &k),
            "kir");
  tj_kir_ival_t m = tj_kir_runtime(tj_kir_add_param(k, "M"));
  tj_kir_ival_t n = tj_kir_runtime(tj_kir_add_param(k, "N"));
  tj_kir_ival_t kk = tj_kir_runtime(tj_kir_add_param(k, "K"));
  tj_kir_ival_t dims[2] = {m, n};
  tj_kir_set_space(k, 2, dims);
  tj_kir_gemm_schedule_t sched;
  memset(&sched, 0, sizeof(sched));
  tj_kir_set_gemm(k, kk, &sched);
  tj_kir_ival_t c1 = tj_kir_constant(1);
  tj_kir_ival_t sa[2] = {kk, c1}, sb[2] = {n, c1};
  tj_kir_add_buffer(k, "x", dt, TJ_KIR_GEMM_A, sa);
  tj_kir_add_buffer(k, "w", dt, TJ_KIR_GEMM_B, sb);
  uint32_t y = tj_kir_add_buffer(k, "y", dt, TJ_KIR_OUTPUT, sb);
  uint32_t acc = tj_kir_acc(k);
  tj_kir_store(k, y, dt == TJ_DTYPE_F32 ? acc : tj_kir_cast(k, dt, acc));
  if (k->error) bench_die(tj_status_clone(k->error), "kir");
  return k;
}

// --gemm --erf's fused kernel: y = bf16(gelu(x @ w + b)) with gelu's erf
// form as decompose writes it, x * erfc(x * -sqrt(1/2)) * 0.5 (the
// capstone's; the default fused kernel, the SAMPLE_GEMM_BF16 sample, has
// the tanh form), bf16 operands and bias.
static tj_kir_t* erf_gemm_bf16(void) {
  tj_kir_t* k = NULL;
  bench_die(
      tj_kir_create(tj_allocator_system(), TJ_KIR_GEMM, "gemm_erf_bf16", &k),
      "kir");
  tj_kir_ival_t m = tj_kir_runtime(tj_kir_add_param(k, "M"));
  tj_kir_ival_t n = tj_kir_runtime(tj_kir_add_param(k, "N"));
  tj_kir_ival_t kk = tj_kir_runtime(tj_kir_add_param(k, "K"));
  tj_kir_ival_t dims[2] = {m, n};
  tj_kir_set_space(k, 2, dims);
  tj_kir_gemm_schedule_t sched;
  memset(&sched, 0, sizeof(sched));
  tj_kir_set_gemm(k, kk, &sched);
  tj_kir_ival_t c0 = tj_kir_constant(0), c1 = tj_kir_constant(1);
  tj_kir_ival_t sa[2] = {kk, c1}, sw[2] = {n, c1}, sb[2] = {c0, c1};
  tj_kir_add_buffer(k, "x", TJ_DTYPE_BF16, TJ_KIR_GEMM_A, sa);
  tj_kir_add_buffer(k, "w", TJ_DTYPE_BF16, TJ_KIR_GEMM_B, sw);
  uint32_t b = tj_kir_add_buffer(k, "b", TJ_DTYPE_BF16, TJ_KIR_INPUT, sb);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_BF16, TJ_KIR_OUTPUT, sw);
  uint32_t v = tj_kir_binary(k, TJ_OP_ADD, tj_kir_acc(k),
                             tj_kir_cast(k, TJ_DTYPE_F32, tj_kir_load(k, b)));
  uint32_t e = tj_kir_unary(
      k, TJ_OP_ERFC,
      tj_kir_binary(k, TJ_OP_MUL, v,
                    tj_kir_const_float(k, TJ_DTYPE_F32, -0.70710678118654752)));
  uint32_t g = tj_kir_binary(k, TJ_OP_MUL, tj_kir_binary(k, TJ_OP_MUL, v, e),
                             tj_kir_const_float(k, TJ_DTYPE_F32, 0.5));
  tj_kir_store(k, y, tj_kir_cast(k, TJ_DTYPE_BF16, g));
  if (k->error) bench_die(tj_status_clone(k->error), "kir");
  return k;
}

// --bt: |k|'s B read as w^T of an [N, K] w (k stride 1, n stride K), the
// layout of x @ w^T; the kernel is not finalized yet, so its strides may
// still change.
static void transpose_b(tj_kir_t* k) {
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    if (k->buffers[i].role != TJ_KIR_GEMM_B) continue;
    k->buffers[i].strides[0] = tj_kir_constant(1);
    k->buffers[i].strides[1] = k->gemm_k;
  }
}

// y = 2 x + 1 over a flat f32 vector of N elements: the memory path alone.
static tj_kir_t* affine_map(void) {
  tj_kir_t* k = NULL;
  bench_die(
      tj_kir_create(tj_allocator_system(), TJ_KIR_POINTWISE, "affine", &k),
      "kir");
  tj_kir_ival_t n = tj_kir_runtime(tj_kir_add_param(k, "N"));
  tj_kir_set_space(k, 1, &n);
  tj_kir_ival_t s1 = tj_kir_constant(1);
  uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, &s1);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, &s1);
  uint32_t v = tj_kir_binary(k, TJ_OP_MUL, tj_kir_load(k, x),
                             tj_kir_const_float(k, TJ_DTYPE_F32, 2.0));
  tj_kir_store(
      k, y,
      tj_kir_binary(k, TJ_OP_ADD, v, tj_kir_const_float(k, TJ_DTYPE_F32, 1.0)));
  bench_die(tj_kir_finalize(k), "kir");
  return k;
}

static void bench_gemm_bf16(int64_t m, int64_t n, int64_t kk,
                            tj_cuda_kir_kernel_t* fused,
                            tj_cuda_kir_kernel_t* plain) {
  tj_cu_deviceptr_t x = dev_random_bf16(m * kk, 2.0f);
  tj_cu_deviceptr_t w = dev_random_bf16(kk * n, 0.2f);
  tj_cu_deviceptr_t b = dev_random_bf16(n, 1.0f);
  tj_cu_deviceptr_t y = dev_zeros((size_t)(m * n) * 2);
  double flop = 2.0 * (double)m * (double)n * (double)kk;
  kir_run_t f = {fused, {x, w, b, y}, {m, n, kk}};
  kir_run_t p = {plain, {x, w, y}, {m, n, kk}};
  double t_fused = time_ms(run_kir, &f, g_iters);
  double t_plain = time_ms(run_kir, &p, g_iters);
  printf(
      "| bf16 M=%lld N=%lld K=%lld | ours gelu(x@w+b) %.3f ms (%.0f TFLOP/s) "
      "| ours x@w %.3f ms (%.0f) ",
      (long long)m, (long long)n, (long long)kk, t_fused, flop / t_fused * 1e-9,
      t_plain, flop / t_plain * 1e-9);
  if (g_blas.handle) {
    blas_run_t r = {(int)m, (int)n, (int)kk, 14, 14, x, w, y, 0};
    double t_blas = time_ms(run_blas, &r, g_iters);
    printf(
        "| cuBLAS x@w %.3f ms (%.0f) | fused/cuBLAS %.2fx, plain/cuBLAS "
        "%.2fx |\n",
        t_blas, flop / t_blas * 1e-9, t_fused / t_blas, t_plain / t_blas);
  } else {
    printf("|\n");
  }
  tj_cuda_device_free(g_dev, x), tj_cuda_device_free(g_dev, w);
  tj_cuda_device_free(g_dev, b), tj_cuda_device_free(g_dev, y);
}

static int compare_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

// Median of 7 samples of time_ms(|iters|).
static double median_ms(work_fn fn, void* ctx, int iters) {
  if (g_profile_once) return time_ms(fn, ctx, iters);
  double t[7];
  for (int i = 0; i < 7; ++i) t[i] = time_ms(fn, ctx, iters);
  qsort(t, 7, sizeof(double), compare_double);
  return t[3];
}

// The table: bf16 y = x @ w (M, K, N) for each tensor-core main
// loop and tile, beside cuBLAS (GemmEx, bf16 in and out, f32 compute) on
// the same buffers; medians of 7 samples; "speed" is cuBLAS time / ours.
typedef struct gemm_filter_t {
  int64_t shapes[8][3];
  int num_shapes;  // 0: every shape
  const char* loops[8];
  int num_loops;  // 0: every main loop
  bool plain_only, profile;
} gemm_filter_t;

static bool keep_loop(const gemm_filter_t* f, const char* name) {
  for (int i = 0; i < f->num_loops; ++i)
    if (strstr(name, f->loops[i])) return true;
  return f->num_loops == 0;
}

static void bench_gemm_table(const tj_kir_t* k_plain, const tj_kir_t* k_fused,
                             const gemm_filter_t* filter) {
  static const struct {
    const char* name;
    tj_nvptx_options_t o;
  } kLoops[] = {
      {"mma.sync bk32 s4", {.gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC}},
      {"wgmma 128x128 s4",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tile_m = 128,
        .gemm_tile_n = 128,
        .gemm_stages = 4}},
      {"wgmma 128x128 s3",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tile_m = 128,
        .gemm_tile_n = 128,
        .gemm_stages = 3}},
      {"wgmma 128x256 s4",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tile_m = 128,
        .gemm_tile_n = 256,
        .gemm_stages = 4}},
      {"wgmma 128x256 s4 drain",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tile_m = 128,
        .gemm_tile_n = 256,
        .gemm_stages = 4,
        .gemm_wgmma_drain = true}},
      {"wgmma 128x256 s4 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tile_m = 128,
        .gemm_tile_n = 256,
        .gemm_stages = 4,
        .gemm_persistent = true}},
      {"wgmma 128x128 s6 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tile_m = 128,
        .gemm_tile_n = 128,
        .gemm_stages = 6,
        .gemm_persistent = true}},
      {"wgmma 64x128 s4",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tile_m = 64,
        .gemm_tile_n = 128,
        .gemm_stages = 4}},
      {"wgmma 64x128 s5 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tile_m = 64,
        .gemm_tile_n = 128,
        .gemm_stages = 5,
        .gemm_persistent = true}},
      {"tma ws 128x128 s4 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 128,
        .gemm_stages = 4,
        .gemm_persistent = true}},
      {"tma ws 128x256 s4 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 256,
        .gemm_stages = 4,
        .gemm_persistent = true}},
      {"tma ws 128x256 s3",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 256,
        .gemm_stages = 3}},
      {"tma pingpong 64x256 s4 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tile_m = 64,
        .gemm_tile_n = 256,
        .gemm_stages = 4,
        .gemm_persistent = true}},
      {"tma pingpong 64x128 s6 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tile_m = 64,
        .gemm_tile_n = 128,
        .gemm_stages = 6,
        .gemm_persistent = true}},
      // One parameter at a time around the tuner's TMA candidates (issue
      // 13, hopper2): ring depth, persistence, 64-wide tiles for small M.
      {"tma ws 128x256 s3 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 256,
        .gemm_stages = 3,
        .gemm_persistent = true}},
      {"tma ws 128x128 s6 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 128,
        .gemm_stages = 6,
        .gemm_persistent = true}},
      {"tma ws 128x64 s8 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 64,
        .gemm_stages = 8,
        .gemm_persistent = true}},
      {"tma pingpong 64x256 s3 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tile_m = 64,
        .gemm_tile_n = 256,
        .gemm_stages = 3,
        .gemm_persistent = true}},
      // Two row blocks a consumer warpgroup (issue 13, hopper7): pingpong
      // on 128-row tiles and cooperative on 256-row ones.
      {"tma pingpong 128x128 s4 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_pingpong = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 128,
        .gemm_stages = 4,
        .gemm_persistent = true}},
      {"tma pingpong 128x128 s5 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_pingpong = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 128,
        .gemm_stages = 5,
        .gemm_persistent = true}},
      {"tma ws 256x128 s3 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tile_m = 256,
        .gemm_tile_n = 128,
        .gemm_stages = 3,
        .gemm_persistent = true}},
      {"tma ws 256x128 s4 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tile_m = 256,
        .gemm_tile_n = 128,
        .gemm_stages = 4,
        .gemm_persistent = true}},
      // The epilogue in registers and one TMA store a tile (issue 13,
      // hopper8), beside the same schedules' staged epilogue above.
      {"tma pingpong 128x128 s4 persistent store",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tma_store = true,
        .gemm_pingpong = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 128,
        .gemm_stages = 4,
        .gemm_persistent = true}},
      // The same with its pairs' epilogues one after another, not in
      // lockstep (issue 13, cap2048: session 19's kernel).
      {"tma pingpong 128x128 s4 persistent store in order",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tma_store = true,
        .gemm_epilogue_in_order = true,
        .gemm_pingpong = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 128,
        .gemm_stages = 4,
        .gemm_persistent = true}},
      {"tma pingpong 128x128 s5 persistent store",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tma_store = true,
        .gemm_pingpong = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 128,
        .gemm_stages = 5,
        .gemm_persistent = true}},
      {"tma ws 128x128 s4 persistent store",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tma_store = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 128,
        .gemm_stages = 4,
        .gemm_persistent = true}},
      {"tma ws 128x256 s3 persistent store",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tma_store = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 256,
        .gemm_stages = 3,
        .gemm_persistent = true}},
      {"tma ws 256x128 s3 persistent store",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tma_store = true,
        .gemm_tile_m = 256,
        .gemm_tile_n = 128,
        .gemm_stages = 3,
        .gemm_persistent = true}},
      {"tma pingpong 64x256 s4 persistent store",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tma_store = true,
        .gemm_tile_m = 64,
        .gemm_tile_n = 256,
        .gemm_stages = 4,
        .gemm_persistent = true}},
      // 2-block clusters, B multicast into both (issue 13, hopper8).
      {"tma ws 128x256 s4 persistent cluster",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_cluster = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 256,
        .gemm_stages = 4,
        .gemm_persistent = true}},
      {"tma ws 128x256 s3 persistent cluster store",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_cluster = true,
        .gemm_tma_store = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 256,
        .gemm_stages = 3,
        .gemm_persistent = true}},
      {"tma pingpong 128x128 s4 persistent cluster store",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_cluster = true,
        .gemm_tma_store = true,
        .gemm_pingpong = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 128,
        .gemm_stages = 4,
        .gemm_persistent = true}},
      {"tma ws 256x128 s3 persistent cluster store",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_cluster = true,
        .gemm_tma_store = true,
        .gemm_tile_m = 256,
        .gemm_tile_n = 128,
        .gemm_stages = 3,
        .gemm_persistent = true}},
  };
  enum { kLoopsCount = sizeof(kLoops) / sizeof(kLoops[0]) };
  // (M, K, N): the shapes (13), then two of the first table's.
  static const int64_t kShapes[][3] = {{2048, 1024, 4096}, {8192, 768, 2304},
                                       {8192, 768, 768},   {8192, 768, 3072},
                                       {8192, 3072, 768},  {4096, 4096, 4096},
                                       {256, 1024, 4096},  {1024, 1024, 1024}};
  enum { kShapesCount = sizeof(kShapes) / sizeof(kShapes[0]) };
  tj_cuda_kir_kernel_t* ks[kLoopsCount];
  tj_cuda_kir_kernel_t* kf[kLoopsCount];
  for (int l = 0; l < kLoopsCount; ++l) {
    ks[l] = kf[l] = NULL;
    if (!keep_loop(filter, kLoops[l].name)) continue;
    // The fused kernel as the capstone compiles it (approximate math).
    tj_nvptx_options_t fo = kLoops[l].o;
    fo.approx_math = true;
    tj_status_t fs =
        filter->plain_only
            ? NULL
            : tj_cuda_kir_compile(g_dev, g_target, k_fused, &fo, &kf[l], NULL);
    if (fs) kf[l] = NULL;
    tj_status_free(fs);
    tj_status_t st = tj_cuda_kir_compile(g_dev, g_target, k_plain, &kLoops[l].o,
                                         &ks[l], NULL);
    if (st) {
      printf("# %s: %s\n", kLoops[l].name, tj_status_message(st));
      tj_status_free(st);
      continue;
    }
    printf("# %-18s %3d regs, %d local bytes, %d B shared\n", kLoops[l].name,
           ks[l]->function.num_regs, ks[l]->function.local_bytes,
           ks[l]->info.shared_bytes);
  }
  printf(
      "\n| bf16 %s (M, K, N) | main loop | ours ms | TFLOP/s | cuBLAS ms "
      "| speed vs cuBLAS | ours gelu(%s+b) ms | fused / cuBLAS %s "
      "|\n|---|---|---|---|---|---|---|---|\n",
      g_bt ? "x@w^T" : "x@w", g_bt ? "x@w^T" : "x@w", g_bt ? "x@w^T" : "x@w");
  // --shape's shapes in its order (the table's or any other: the
  // capstone's B = 16384), else the table's.
  int num_shapes = filter->num_shapes ? filter->num_shapes : kShapesCount;
  for (int s = 0; s < num_shapes; ++s) {
    const int64_t* sh = filter->num_shapes ? filter->shapes[s] : kShapes[s];
    int64_t m = sh[0], kk = sh[1], n = sh[2];
    tj_cu_deviceptr_t x = dev_random_bf16(m * kk, 2.0f);
    tj_cu_deviceptr_t w = dev_random_bf16(kk * n, 0.2f);
    tj_cu_deviceptr_t y = dev_zeros((size_t)(m * n) * 2);
    tj_cu_deviceptr_t bias = dev_random_bf16(n, 1.0f);
    double flop = 2.0 * (double)m * (double)n * (double)kk;
    if (filter->profile) {
      // One launch each, in the table's order, for ncu to capture.
      printf("# profile (%lld, %lld, %lld): cuBLAS", (long long)m,
             (long long)kk, (long long)n);
      if (g_blas.handle) {
        blas_run_t r = {(int)m, (int)n, (int)kk, 14, 14, x, w, y, 0};
        run_blas(&r);
      }
      for (int l = 0; l < kLoopsCount; ++l) {
        if (!ks[l]) continue;
        printf(", %s", kLoops[l].name);
        kir_run_t p = {ks[l], {x, w, y}, {m, n, kk}};
        run_kir(&p);
        if (kf[l]) {
          printf(", %s fused", kLoops[l].name);
          kir_run_t f = {kf[l], {x, w, bias, y}, {m, n, kk}};
          run_kir(&f);
        }
      }
      printf("\n");
      bench_die(tj_cuda_device_synchronize(g_dev), "sync");
      tj_cuda_device_free(g_dev, x), tj_cuda_device_free(g_dev, w);
      tj_cuda_device_free(g_dev, y), tj_cuda_device_free(g_dev, bias);
      continue;
    }
    double t_blas = 0;
    if (g_blas.handle) {
      blas_run_t r = {(int)m, (int)n, (int)kk, 14, 14, x, w, y, 0};
      t_blas = median_ms(run_blas, &r, g_iters);
    }
    double best = 0;
    int best_l = -1;
    for (int l = 0; l < kLoopsCount; ++l) {
      if (!ks[l]) continue;
      kir_run_t p = {ks[l], {x, w, y}, {m, n, kk}};
      double t = median_ms(run_kir, &p, g_iters);
      double tf = 0;
      if (kf[l]) {
        kir_run_t f = {kf[l], {x, w, bias, y}, {m, n, kk}};
        tf = median_ms(run_kir, &f, g_iters);
      }
      printf(
          "| (%lld, %lld, %lld) | %s | %.4f | %.0f | %.4f | %.2fx | %.4f "
          "| %.2fx |\n",
          (long long)m, (long long)kk, (long long)n, kLoops[l].name, t,
          flop / t * 1e-9, t_blas, t_blas > 0 ? t_blas / t : 0.0, tf,
          t_blas > 0 ? tf / t_blas : 0.0);
      if (best_l < 0 || t < best) best = t, best_l = l;
    }
    if (best_l >= 0)
      printf(
          "| (%lld, %lld, %lld) | **best: %s** | %.4f | %.0f | %.4f | "
          "**%.2fx** |\n",
          (long long)m, (long long)kk, (long long)n, kLoops[best_l].name, best,
          flop / best * 1e-9, t_blas, t_blas > 0 ? t_blas / best : 0.0);
    tj_cuda_device_free(g_dev, x), tj_cuda_device_free(g_dev, w);
    tj_cuda_device_free(g_dev, y), tj_cuda_device_free(g_dev, bias);
  }
  for (int l = 0; l < kLoopsCount; ++l) {
    tj_cuda_kir_destroy(ks[l]);
    tj_cuda_kir_destroy(kf[l]);
  }
}

// f32 y = x @ w (M, K, N): our exact kernel (CUDA cores) beside cuBLAS
// sgemm (GemmEx, CUBLAS_COMPUTE_32F), and our wgmma .tf32 TMA schedules
// (gemm_tf32, as allow_tf32 lets the autotuner pick) beside cuBLAS in its
// TF32 mode (CUBLAS_COMPUTE_32F_FAST_TF32); medians of 7 samples.
static void bench_f32_table(const tj_kir_t* k_plain, bool exact_only) {
  static const struct {
    const char* name;
    tj_nvptx_options_t o;
  } kLoops[] = {
      {"f32 cuda cores 128x128 bk8 s4", {0}},
      {"f32 cuda cores 128x128 bk8 s3", {.gemm_stages = 3}},
      {"f32 cuda cores 128x128 bk16 s3", {.gemm_tile_k = 16, .gemm_stages = 3}},
      {"f32 cuda cores 128x128 bk16 s4", {.gemm_tile_k = 16, .gemm_stages = 4}},
      {"f32 cuda cores 128x128 bk8 s4, 4-byte copies",
       {.gemm_f32_scalar_copies = true}},
      {"f32 cuda cores 128x128 bk16 s4, 4-byte copies",
       {.gemm_tile_k = 16, .gemm_f32_scalar_copies = true}},
      // 256x128 tiles, 8x16 outputs a thread (issue 13, sgemm; the
      // tuner's exact f32 candidate 18 is bk16 s3 with A transposed).
      {"f32 cuda cores 256x128 bk8 s4", {.gemm_tile_m = 256}},
      {"f32 cuda cores 256x128 bk8 s3", {.gemm_tile_m = 256, .gemm_stages = 3}},
      {"f32 cuda cores 256x128 bk16 s3",
       {.gemm_tile_m = 256, .gemm_tile_k = 16, .gemm_stages = 3}},
      {"f32 cuda cores 256x128 bk16 s4",
       {.gemm_tile_m = 256, .gemm_tile_k = 16, .gemm_stages = 4}},
      {"f32 cuda cores 256x128 bk8 s4, A transposed",
       {.gemm_tile_m = 256, .gemm_f32_a_transposed = true}},
      {"f32 cuda cores 256x128 bk16 s3, A transposed",
       {.gemm_tile_m = 256,
        .gemm_tile_k = 16,
        .gemm_stages = 3,
        .gemm_f32_a_transposed = true}},
      {"tf32 tma ws 128x128 s4 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tf32 = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 128,
        .gemm_stages = 4,
        .gemm_persistent = true}},
      {"tf32 tma ws 128x256 s4 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tf32 = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 256,
        .gemm_stages = 4,
        .gemm_persistent = true}},
      {"tf32 tma pingpong 64x256 s4 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tf32 = true,
        .gemm_tile_m = 64,
        .gemm_tile_n = 256,
        .gemm_stages = 4,
        .gemm_persistent = true}},
      {"tf32 tma ws 128x256 s3",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tf32 = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 256,
        .gemm_stages = 3}},
  };
  enum { kLoopsCount = sizeof(kLoops) / sizeof(kLoops[0]) };
  static const int64_t kShapes[][3] = {{2048, 1024, 4096},
                                       {4096, 4096, 4096},
                                       {8192, 768, 3072},
                                       {1024, 3072, 768}};
  tj_cuda_kir_kernel_t* ks[kLoopsCount];
  for (int l = 0; l < kLoopsCount; ++l) {
    if (exact_only && kLoops[l].o.gemm_tf32) {
      ks[l] = NULL;
      continue;
    }
    tj_status_t st = tj_cuda_kir_compile(g_dev, g_target, k_plain, &kLoops[l].o,
                                         &ks[l], NULL);
    if (st) {
      printf("# %s: %s\n", kLoops[l].name, tj_status_message(st));
      tj_status_free(st);
      ks[l] = NULL;
      continue;
    }
    printf("# %-38s %3d regs, %d local bytes, %d B shared\n", kLoops[l].name,
           ks[l]->function.num_regs, ks[l]->function.local_bytes,
           ks[l]->info.shared_bytes);
  }
  printf(
      "\n| f32 x@w (M, K, N) | kernel | ours ms | TFLOP/s | cuBLAS ms (same "
      "math) | speed vs cuBLAS | max |ours - cuBLAS| |\n"
      "|---|---|---|---|---|---|---|\n");
  for (int s = 0; s < (int)(sizeof(kShapes) / sizeof(kShapes[0])); ++s) {
    int64_t m = kShapes[s][0], kk = kShapes[s][1], n = kShapes[s][2];
    tj_cu_deviceptr_t x = dev_random_f32(m * kk, 2.0f);
    tj_cu_deviceptr_t w = dev_random_f32(kk * n, 0.2f);
    tj_cu_deviceptr_t y = dev_zeros((size_t)(m * n) * 4);
    tj_cu_deviceptr_t y_blas = dev_zeros((size_t)(m * n) * 4);
    double flop = 2.0 * (double)m * (double)n * (double)kk;
    double t_blas[2] = {0, 0};
    if (g_blas.handle) {
      // 0: CUDA_R_32F; 68 CUBLAS_COMPUTE_32F, 77 ..._32F_FAST_TF32.
      for (int tf = 0; tf < 2; ++tf) {
        blas_run_t r = {(int)m, (int)n, (int)kk, 0,           0,
                        x,      w,      y_blas,  tf ? 77 : 68};
        t_blas[tf] = median_ms(run_blas, &r, g_iters);
      }
    }
    for (int l = 0; l < kLoopsCount; ++l) {
      if (!ks[l]) continue;
      bool tf32 = kLoops[l].o.gemm_tf32;
      kir_run_t p = {ks[l], {x, w, y}, {m, n, kk}};
      double t = median_ms(run_kir, &p, g_iters);
      double diff = -1;
      if (g_blas.handle) {
        blas_run_t r = {(int)m, (int)n, (int)kk,       0, 0, x,
                        w,      y_blas, tf32 ? 77 : 68};
        run_blas(&r);
        diff = max_abs_f32(y, y_blas, m * n);
      }
      double tb = t_blas[tf32 ? 1 : 0];
      printf(
          "| (%lld, %lld, %lld) | %s | %.4f | %.1f | %.4f (%s) | %.2fx | "
          "%.3g |\n",
          (long long)m, (long long)kk, (long long)n, kLoops[l].name, t,
          flop / t * 1e-9, tb, tf32 ? "tf32" : "f32", tb > 0 ? tb / t : 0.0,
          diff);
    }
    tj_cuda_device_free(g_dev, x), tj_cuda_device_free(g_dev, w);
    tj_cuda_device_free(g_dev, y), tj_cuda_device_free(g_dev, y_blas);
  }
  for (int l = 0; l < kLoopsCount; ++l) tj_cuda_kir_destroy(ks[l]);
}

static void bench_gemm_f32(int64_t s, tj_cuda_kir_kernel_t* k) {
  tj_cu_deviceptr_t a = dev_zeros((size_t)(s * s) * 4);
  tj_cu_deviceptr_t b = dev_zeros((size_t)(s * s) * 4);
  tj_cu_deviceptr_t c = dev_zeros((size_t)(s * s) * 4);
  double flop = 2.0 * (double)s * (double)s * (double)s;
  kir_run_t r = {k, {a, b, c}, {s, s, s}};
  double t = time_ms(run_kir, &r, g_iters / 4 + 1);
  printf("| f32 %lld^3 | ours %.3f ms (%.1f TFLOP/s) ", (long long)s, t,
         flop / t * 1e-9);
  if (g_blas.handle) {
    blas_run_t br = {(int)s, (int)s, (int)s, 0, 0, a, b, c, 0};
    double tb = time_ms(run_blas, &br, g_iters / 4 + 1);
    printf("| cuBLAS %.3f ms (%.1f) | ours/cuBLAS %.2fx |\n", tb,
           flop / tb * 1e-9, t / tb);
  } else {
    printf("|\n");
  }
  tj_cuda_device_free(g_dev, a), tj_cuda_device_free(g_dev, b);
  tj_cuda_device_free(g_dev, c);
}

typedef struct copy_run_t {
  tj_cu_deviceptr_t dst, src;
  size_t bytes;
} copy_run_t;

static void run_copy(void* ctx) {
  copy_run_t* c = ctx;
  bench_die(tj_cuda_copy_on_device(g_dev, c->dst, c->src, c->bytes), "copy");
}

static void bench_memory(tj_cuda_kir_kernel_t* gelu,
                         tj_cuda_kir_kernel_t* softmax,
                         tj_cuda_kir_kernel_t* affine, int64_t rows,
                         int64_t cols) {
  int64_t n = rows * cols;
  size_t bytes = (size_t)n * 4;
  tj_cu_deviceptr_t x = dev_zeros(bytes), y = dev_zeros(bytes);
  tj_cu_deviceptr_t b = dev_zeros((size_t)cols * 4);
  copy_run_t c = {y, x, bytes};
  double t_copy = time_ms(run_copy, &c, g_iters);
  kir_run_t g = {gelu, {x, b, y}, {rows, cols}};
  double t_gelu = time_ms(run_kir, &g, g_iters);
  kir_run_t s = {softmax, {x, y}, {rows, cols}};
  double t_soft = time_ms(run_kir, &s, g_iters);
  int64_t total = rows * cols;
  kir_run_t a = {affine, {x, y}, {total}};
  double t_affine = time_ms(run_kir, &a, g_iters);
  double gb = 2.0 * (double)bytes * 1e-9;
  printf(
      "| f32 [%lld, %lld] | copy %.0f GB/s | 2x+1 %.0f GB/s (%.2fx) "
      "| gelu(x+b) %.0f GB/s (%.2fx) | softmax %.0f GB/s (%.2fx) |\n",
      (long long)rows, (long long)cols, gb / t_copy * 1e3, gb / t_affine * 1e3,
      t_copy / t_affine, gb / t_gelu * 1e3, t_copy / t_gelu, gb / t_soft * 1e3,
      t_copy / t_soft);
  tj_cuda_device_free(g_dev, x), tj_cuda_device_free(g_dev, y);
  tj_cuda_device_free(g_dev, b);
}

// A batched bf16 matmul y[b] = x[b] @ w[b] of dense [B, M, K] and [B, K, N]
// operands, every size a constant (attention's scores and context).
static tj_kir_t* batched_gemm(int64_t batch, int64_t m, int64_t kk, int64_t n) {
  tj_kir_t* k = NULL;
  bench_die(tj_kir_create(tj_allocator_system(), TJ_KIR_GEMM, "mm_batched", &k),
            "kir");
  tj_kir_ival_t dims[3] = {tj_kir_constant(batch), tj_kir_constant(m),
                           tj_kir_constant(n)};
  tj_kir_set_space(k, 3, dims);
  tj_kir_gemm_schedule_t sched;
  memset(&sched, 0, sizeof(sched));
  tj_kir_set_gemm(k, tj_kir_constant(kk), &sched);
  tj_kir_ival_t c1 = tj_kir_constant(1);
  tj_kir_ival_t sa[3] = {tj_kir_constant(m * kk), tj_kir_constant(kk), c1};
  tj_kir_ival_t sb[3] = {tj_kir_constant(kk * n), tj_kir_constant(n), c1};
  tj_kir_ival_t sy[3] = {tj_kir_constant(m * n), tj_kir_constant(n), c1};
  tj_kir_add_buffer(k, "x", TJ_DTYPE_BF16, TJ_KIR_GEMM_A, sa);
  tj_kir_add_buffer(k, "w", TJ_DTYPE_BF16, TJ_KIR_GEMM_B, sb);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_BF16, TJ_KIR_OUTPUT, sy);
  tj_kir_store(k, y, tj_kir_cast(k, TJ_DTYPE_BF16, tj_kir_acc(k)));
  if (k->error) bench_die(tj_status_clone(k->error), "kir");
  return k;
}

// Seven samples of time_ms, sorted (one launch under --profile).
static void samples7_ms(work_fn fn, void* ctx, double t[7]) {
  for (int i = 0; i < 7; ++i)
    t[i] = g_profile_once && i ? t[0] : time_ms(fn, ctx, g_iters);
  qsort(t, 7, sizeof(double), compare_double);
}

// Issue 13's batched attention GEMMs, bf16: the scores [16 x 12, 512, 64]
// @ [.., 64, 512] and the context [.., 512, 512] @ [.., 512, 64], ours
// with each main loop the autotuner has for a batched GEMM (the cp.async
// tiles, and the TMA schedules through rank-3 tensor maps with the batch
// in the persistent tile index) beside cuBLAS's strided batched GEMM;
// medians of 7 samples, with the samples' range.
static void bench_batched_table(void) {
  static const struct {
    const char* name;
    tj_nvptx_options_t o;
  } kLoops[] = {
      {"default (wgmma 128x128 s3)", {0}},
      {"wgmma 128x256 s4",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tile_m = 128,
        .gemm_tile_n = 256,
        .gemm_stages = 4}},
      {"wgmma 64x128 s4",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tile_m = 64,
        .gemm_tile_n = 128,
        .gemm_stages = 4}},
      {"wgmma 128x128 s4",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tile_m = 128,
        .gemm_tile_n = 128,
        .gemm_stages = 4}},
      {"wgmma 128x64 s4 (candidate 17)",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tile_m = 128,
        .gemm_tile_n = 64,
        .gemm_stages = 4}},
      // The TMA candidates (7 to 11, 15, 16).
      {"tma ws 128x128 s4 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_persistent = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 128,
        .gemm_stages = 4}},
      {"tma ws 128x256 s4 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_persistent = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 256,
        .gemm_stages = 4}},
      {"tma pingpong 64x256 s4 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_persistent = true,
        .gemm_tile_m = 64,
        .gemm_tile_n = 256,
        .gemm_stages = 4}},
      {"tma ws 128x256 s3",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 256,
        .gemm_stages = 3}},
      {"tma ws 128x64 s8 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_persistent = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 64,
        .gemm_stages = 8}},
      {"tma pingpong 128x128 s4 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_pingpong = true,
        .gemm_persistent = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 128,
        .gemm_stages = 4}},
      {"tma ws 256x128 s3 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_persistent = true,
        .gemm_tile_m = 256,
        .gemm_tile_n = 128,
        .gemm_stages = 3}},
      {"tma pingpong 128x64 s6 persistent",
       {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
        .gemm_tma = true,
        .gemm_pingpong = true,
        .gemm_persistent = true,
        .gemm_tile_m = 128,
        .gemm_tile_n = 64,
        .gemm_stages = 6}},
  };
  static const int64_t kShapes[][4] = {{192, 512, 64, 512},
                                       {192, 512, 512, 64}};
  printf(
      "\n| bf16 batched x@w (B, M, K, N) | main loop | ours ms (range) | "
      "TFLOP/s | cuBLAS ms (range) | speed vs cuBLAS |\n"
      "|---|---|---|---|---|---|\n");
  for (size_t s = 0; s < sizeof(kShapes) / sizeof(kShapes[0]); ++s) {
    int64_t bt = kShapes[s][0], m = kShapes[s][1], kk = kShapes[s][2],
            n = kShapes[s][3];
    tj_kir_t* k = batched_gemm(bt, m, kk, n);
    tj_cu_deviceptr_t x = dev_random_bf16(bt * m * kk, 2.0f);
    tj_cu_deviceptr_t w = dev_random_bf16(bt * kk * n, 0.2f);
    tj_cu_deviceptr_t y = dev_zeros((size_t)(bt * m * n) * 2);
    double flop = 2.0 * (double)bt * (double)m * (double)n * (double)kk;
    double t_blas = 0, lo_blas = 0, hi_blas = 0;
    if (g_blas.handle && g_blas.gemm_strided) {
      blas_batched_t r = {(int)bt, (int)m, (int)n, (int)kk, x, w, y};
      double t[7];
      samples7_ms(run_blas_batched, &r, t);
      t_blas = t[3], lo_blas = t[0], hi_blas = t[6];
    }
    double best = 0;
    const char* best_name = NULL;
    for (size_t l = 0; l < sizeof(kLoops) / sizeof(kLoops[0]); ++l) {
      tj_cuda_kir_kernel_t* ck = NULL;
      tj_status_t st = tj_cuda_kir_compile(g_dev, g_target, k,
                                           l ? &kLoops[l].o : NULL, &ck, NULL);
      if (st) {
        printf("# %s: %s\n", kLoops[l].name, tj_status_message(st));
        tj_status_free(st);
        continue;
      }
      kir_run_t p = {ck, {x, w, y}, {0}};
      double t[7];
      samples7_ms(run_kir, &p, t);
      printf(
          "| (%lld, %lld, %lld, %lld) | %s | %.4f (%.4f-%.4f) | %.0f | %.4f "
          "(%.4f-%.4f) | %.2fx |\n",
          (long long)bt, (long long)m, (long long)kk, (long long)n,
          kLoops[l].name, t[3], t[0], t[6], flop / t[3] * 1e-9, t_blas, lo_blas,
          hi_blas, t_blas > 0 ? t_blas / t[3] : 0.0);
      if (!best_name || t[3] < best) best = t[3], best_name = kLoops[l].name;
      tj_cuda_kir_destroy(ck);
    }
    if (best_name)
      printf(
          "| (%lld, %lld, %lld, %lld) | **best: %s** | %.4f | %.0f | %.4f "
          "| **%.2fx** |\n",
          (long long)bt, (long long)m, (long long)kk, (long long)n, best_name,
          best, flop / best * 1e-9, t_blas, t_blas > 0 ? t_blas / best : 0.0);
    tj_cuda_device_free(g_dev, x), tj_cuda_device_free(g_dev, w);
    tj_cuda_device_free(g_dev, y);
    tj_kir_destroy(k);
  }
}

int main(int argc, char** argv) {
  bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  bool gemm_only = argc > 1 && strcmp(argv[1], "--gemm") == 0;
  bool f32_only = argc > 1 && strcmp(argv[1], "--f32") == 0;
  bool f32_exact = argc > 1 && strcmp(argv[1], "--f32-exact") == 0;
  bool batched_only = argc > 1 && strcmp(argv[1], "--batched") == 0;
  f32_only |= f32_exact;
  g_profile_once = (f32_only || batched_only) && argc > 2 &&
                   strcmp(argv[2], "--profile") == 0;
  if (quick) g_iters = 5;
  tj_status_t s = tj_cuda_device_create(tj_allocator_system(), NULL, &g_dev);
  if (tj_status_code(s) == TJ_STATUS_UNSUPPORTED) {
    printf("# no GPU: %s\n", tj_status_message(s));
    return 0;
  }
  bench_die(s, "device");
  const char* arch_name = tj_cuda_device_arch_name(g_dev);
  tj_nvptx_arch_t arch;
  if (!arch_name || !tj_nvptx_arch_from_name(arch_name, &arch)) {
    printf("# %s is older than sm_80\n", g_dev->name);
    return 0;
  }
  bench_die(tj_nvptx_target_create(tj_allocator_system(), arch, &g_target),
            "target");
  printf("# %s, sm_%d%d (%s), %d SMs, driver %d\n", g_dev->name,
         g_dev->sm_major, g_dev->sm_minor, arch_name, g_dev->num_sms,
         g_dev->cu.driver_version);
  open_cublas();
  if (g_blas.handle) printf("# cuBLAS: %s\n", g_blas.version);

  tj_kir_t *k_fused, *k_gelu, *k_soft;
  bench_die(sample_build(tj_allocator_system(), SAMPLE_GEMM_BF16, &k_fused),
            "kir");
  bench_die(sample_build(tj_allocator_system(), SAMPLE_GELU_BIAS, &k_gelu),
            "kir");
  bench_die(sample_build(tj_allocator_system(), SAMPLE_SOFTMAX, &k_soft),
            "kir");
  tj_kir_t* k_plain = plain_gemm(TJ_DTYPE_BF16);
  tj_kir_t* k_f32 = plain_gemm(TJ_DTYPE_F32);
  tj_kir_t* k_affine = affine_map();
  if (batched_only) {
    bench_batched_table();
    tj_kir_destroy(k_fused), tj_kir_destroy(k_plain), tj_kir_destroy(k_f32);
    tj_kir_destroy(k_gelu), tj_kir_destroy(k_soft), tj_kir_destroy(k_affine);
    tj_nvptx_target_destroy(g_target);
    tj_cuda_device_destroy(g_dev);
    return 0;
  }
  if (gemm_only || f32_only) {
    if (gemm_only) {
      gemm_filter_t filter = {0};
      for (int i = 2; i < argc; ++i) {
        long long m, k, n;
        if (sscanf(argv[i], "--shape=%lld,%lld,%lld", &m, &k, &n) == 3 &&
            filter.num_shapes < 8) {
          int64_t* sh = filter.shapes[filter.num_shapes++];
          sh[0] = m, sh[1] = k, sh[2] = n;
        } else if (strncmp(argv[i], "--loop=", 7) == 0 &&
                   filter.num_loops < 8) {
          filter.loops[filter.num_loops++] = argv[i] + 7;
        } else if (strcmp(argv[i], "--plain") == 0) {
          filter.plain_only = true;
        } else if (strcmp(argv[i], "--profile") == 0) {
          filter.profile = true;
        } else if (strcmp(argv[i], "--erf") == 0) {
          // The fused kernel with gelu's erf form (give it before --bt).
          tj_kir_destroy(k_fused);
          k_fused = erf_gemm_bf16();
        } else if (strcmp(argv[i], "--bt") == 0) {
          // B K-major: w is [N, K] (the same bytes, read transposed).
          g_bt = true;
          transpose_b(k_plain);
          transpose_b(k_fused);
        } else {
          fprintf(stderr, "cuda_bench --gemm: unknown argument %s\n", argv[i]);
          return 2;
        }
      }
      bench_gemm_table(k_plain, k_fused, &filter);
    }
    if (f32_only) bench_f32_table(k_f32, f32_exact);
    tj_kir_destroy(k_fused), tj_kir_destroy(k_plain), tj_kir_destroy(k_f32);
    tj_kir_destroy(k_gelu), tj_kir_destroy(k_soft), tj_kir_destroy(k_affine);
    tj_nvptx_target_destroy(g_target);
    tj_cuda_device_destroy(g_dev);
    return 0;
  }
  tj_cuda_kir_kernel_t* fused = compile(k_fused, "gelu(x@w+b) bf16", NULL);
  tj_cuda_kir_kernel_t* plain = compile(k_plain, "x@w bf16", NULL);
  tj_cuda_kir_kernel_t* f32 = compile(k_f32, "x@w f32", NULL);
  tj_cuda_kir_kernel_t* gelu = compile(k_gelu, "gelu(x+b) f32", NULL);
  tj_cuda_kir_kernel_t* soft = compile(k_soft, "softmax f32", NULL);
  tj_cuda_kir_kernel_t* affine = compile(k_affine, "2x+1 f32", NULL);

  printf("\n| shape | ours | ours | cuBLAS | ratios |\n");
  bench_gemm_bf16(16384, 4096, 1024, fused, plain);
  bench_gemm_bf16(2048, 4096, 1024, fused, plain);
  if (!quick) {
    bench_gemm_bf16(4096, 4096, 4096, fused, plain);
    bench_gemm_bf16(8192, 8192, 8192, fused, plain);
    // The tensor-core schedule space: k-tile x ring depth.
    static const tj_nvptx_options_t variants[] = {
        {.gemm_tile_k = 32,
         .gemm_stages = 3,
         .gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC},
        {.gemm_tile_k = 32,
         .gemm_stages = 5,
         .gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC},
        {.gemm_tile_k = 64,
         .gemm_stages = 3,
         .gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC},
        {.gemm_tile_k = 64,
         .gemm_stages = 4,
         .gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC}};
    for (size_t v = 0; v < TJ_ARRAY_SIZE(variants); ++v) {
      char name[64];
      snprintf(name, sizeof(name), "bk=%d stages=%d", variants[v].gemm_tile_k,
               variants[v].gemm_stages);
      tj_cuda_kir_kernel_t* vf = compile(k_fused, name, &variants[v]);
      tj_cuda_kir_kernel_t* vp = compile(k_plain, name, &variants[v]);
      printf("# %s\n", name);
      bench_gemm_bf16(16384, 4096, 1024, vf, vp);
      bench_gemm_bf16(8192, 8192, 8192, vf, vp);
      tj_cuda_kir_destroy(vf), tj_cuda_kir_destroy(vp);
    }
  }
  bench_gemm_table(k_plain, k_fused, &(gemm_filter_t){0});
  bench_gemm_f32(quick ? 2048 : 4096, f32);
  printf("\n");
  bench_memory(gelu, soft, affine, quick ? 4096 : 65536, 4096);

  tj_cuda_kir_destroy(fused), tj_cuda_kir_destroy(plain);
  tj_cuda_kir_destroy(f32), tj_cuda_kir_destroy(gelu);
  tj_cuda_kir_destroy(soft), tj_cuda_kir_destroy(affine);
  tj_kir_destroy(k_fused), tj_kir_destroy(k_plain), tj_kir_destroy(k_f32);
  tj_kir_destroy(k_gelu), tj_kir_destroy(k_soft), tj_kir_destroy(k_affine);
  tj_nvptx_target_destroy(g_target);
  tj_cuda_device_destroy(g_dev);
  return 0;
}
