// The weight-only quantized GEMM on the GPU (issue 17, qfold,
// jit/emit_nvptx_wqmma.c): every case of tests/unit/wqgemm_cuda_cases.h
// compiled once for CUDA (M symbolic, no graph break) and run at M = 1 to
// 17 and 64 against tj_reference_run (the dequantize, then the product),
// on the tensor-core kernel (TJ_CUDA_WQGEMM=mma), on the CUDA-core one
// (=fma), on the tensor-core kernel reading the tile layout (=tiles, the
// weight, scale and zero point relaid at upload) and on the default (the
// tile layout for f16/bf16 x, CUDA cores for f32 x, at a symbolic M),
// and the split cases at 1, 2 and 8 K splits and on 256-thread blocks:
// within 1e-6 of sum_k |x| * max
// |w| of each output (f32 sums in another order), on gelu(. + b); f16/bf16
// cases a few roundings of their dtype more. Skips (exit 77) without a driver
// or GPU.

#include <math.h>
#include <stdlib.h>

#include "tests/cuda/cuda_test_util.h"
#include "tests/unit/wqgemm_cuda_cases.h"

static tj_context_t* g_ctx;
static tj_context_t* g_mma_ctx;       // TJ_CUDA_WQGEMM=mma: tensor cores
static tj_context_t* g_tiled_ctx;     // TJ_CUDA_WQGEMM=tiles: the tile layout
static tj_context_t* g_fma_ctx;       // TJ_CUDA_WQGEMM=fma: CUDA cores
static tj_context_t* g_split_ctx[3];  // TJ_CUDA_WQGEMM=split1, 2, 8
static tj_context_t* g_b256_ctx;      // TJ_CUDA_WQGEMM=blocks256
static tj_context_t* g_cluster_ctx;   // TJ_CUDA_WQGEMM=cluster

static void run_case(const wq_case_t* c, tj_context_t* ctx) {
  wq_data_t d;
  wq_make(c, &d);
  tj_graph_t* g = wq_build(ctx, c, &d);
  CHECK(g != NULL);
  if (!g) {
    wq_free(&d);
    return;
  }
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.cache_dir = "";
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  if (exe) {
    tj_executable_stats_t stats;
    memset(&stats, 0, sizeof(stats));
    stats.struct_size = sizeof(stats);
    tj_executable_stats(exe, &stats);
    CHECK_EQ_INT(0, stats.num_graph_breaks);
  }
  // Every M of one row tile (the tensor-core kernel pads rows to 16 in
  // its fragments), one past it and several tiles.
  const int64_t ms[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,
                        10, 11, 12, 13, 14, 15, 16, 17, 64};
  for (int i = 0; i < (int)(sizeof(ms) / sizeof(ms[0])) && exe; ++i) {
    int64_t M = ms[i], K = c->K, N = c->N;
    tj_dtype_t ft = wq_adt(c);
    float* x = malloc(sizeof(float) * (size_t)(M * K));
    float* want = malloc(sizeof(float) * (size_t)(M * N));
    float* got = malloc(sizeof(float) * (size_t)(M * N));
    for (int64_t j = 0; j < M * K; ++j)
      x[j] = (float)(wq_rnd() % 2001) / 1000.0f - 1.0f;
    // x as the case's dtype, and back (the values the GPU sees).
    void* xt = wq_floats(ft, x, M * K);
    for (int64_t j = 0; j < M * K; ++j) x[j] = (float)tj_load_f64(ft, xt, j);
    size_t ys = (ft == TJ_DTYPE_F32 ? 4 : 2) * (size_t)(M * N);
    void* wy = malloc(ys);
    void* gy = malloc(ys);
    tj_tensor_t in = tj_tensor_make(xt, ft, 2, (int64_t[]){M, K});
    tj_tensor_t wt = tj_tensor_make(wy, ft, 2, (int64_t[]){M, N});
    tj_tensor_t gt = tj_tensor_make(gy, ft, 2, (int64_t[]){M, N});
    CHECK_OK(tj_reference_run(g, &in, 1, &wt, 1));
    memset(gy, 0xA5, ys);
    CHECK_OK(tj_executable_run(exe, &in, 1, &gt, 1));
    for (int64_t j = 0; j < M * N; ++j) {
      want[j] = (float)tj_load_f64(ft, wy, j);
      got[j] = (float)tj_load_f64(ft, gy, j);
    }
    // The bound per row: 1e-6 of sum_k |x| * max |w| (|q - z| * scale is
    // at most 0.05 * 15 for int4, 0.05 * 255 for int8), the f32 sums'
    // order apart, through gelu (slope at most 1.13). One wrong weight
    // moves a sum by about |x| * scale, far more. f16/bf16: plus a few
    // roundings of the output dtype (the matmul's, the add's, gelu's) of
    // values up to about 4.
    double wmax = 0.05 * (c->bits == 4 ? 15 : 255);
    double eps = ft == TJ_DTYPE_BF16  ? 1.0 / 64
                 : ft == TJ_DTYPE_F16 ? 1.0 / 512
                                      : 0.0;
    int bad = 0;
    for (int64_t j = 0; j < M * N && bad < 5; ++j) {
      double sx = 0;
      for (int64_t k = 0; k < K; ++k) sx += fabs((double)x[j / N * K + k]);
      double tol =
          1e-6 * sx * wmax * 1.13 + 1e-6 + eps * (fabs((double)want[j]) + 4.0);
      if (!(fabs((double)got[j] - (double)want[j]) <= tol)) {
        fprintf(stderr, "  %s at M %lld: element %lld: got %.9g, want %.9g\n",
                c->name, (long long)M, (long long)j, (double)got[j],
                (double)want[j]);
        ++bad;
      }
    }
    CHECK_EQ_INT(0, bad);
    free(xt);
    free(wy);
    free(gy);
    free(x);
    free(want);
    free(got);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  wq_free(&d);
}

TEST(every_case_against_the_reference) {
  for (int i = 0; i < kWqNumCases; ++i) run_case(&kWqCases[i], g_mma_ctx);
}

TEST(every_case_on_the_tile_layout) {
  for (int i = 0; i < kWqNumCases; ++i) run_case(&kWqCases[i], g_tiled_ctx);
}

TEST(every_case_on_the_cuda_core_kernel) {
  for (int i = 0; i < kWqNumCases; ++i) run_case(&kWqCases[i], g_fma_ctx);
}

// The default for a symbolic M: the tile layout's kernel for f16/bf16 x,
// the CUDA-core one for f32 x.
TEST(every_case_on_the_default_kernel) {
  for (int i = 0; i < kWqNumCases; ++i) run_case(&kWqCases[i], g_ctx);
}

// The cases whose K the kernel splits across blocks (N a constant, K of
// 4000 rows or more), at a fixed count of splits: one (no join), two and
// eight (the most: each partial loaded before the first add), and on the
// 256-thread blocks of the tile layout's kernel (the default before
// wqdecode; the join of its 8 warps and of its splits).
static bool is_split_case(const wq_case_t* c) {
  return strstr(c->name, "split") != NULL;
}

TEST(split_cases_at_one_two_and_eight_splits) {
  for (int s = 0; s < 3; ++s)
    for (int i = 0; i < kWqNumCases; ++i)
      if (is_split_case(&kWqCases[i])) run_case(&kWqCases[i], g_split_ctx[s]);
}

TEST(split_cases_on_256_thread_blocks) {
  for (int i = 0; i < kWqNumCases; ++i)
    if (is_split_case(&kWqCases[i])) run_case(&kWqCases[i], g_b256_ctx);
}

// The K splits of a tile as one cluster, joined through distributed
// shared memory (TJ_CUDA_WQGEMM=cluster, sm_90a): every f16/bf16 case
// (the tile layout's kernel, its splits up to 8 a cluster) and the split
// cases.
TEST(cluster_join_cases) {
  for (int i = 0; i < kWqNumCases; ++i)
    if (kWqCases[i].adt != TJ_DTYPE_F32 || is_split_case(&kWqCases[i]))
      run_case(&kWqCases[i], g_cluster_ctx);
}

// Two weight-only GEMMs in a chain, y = (x @ W1) @ W2 (bf16, int4 g128
// then int4 g32, K1 split across blocks), so that the second kernel reads
// what the first wrote: under TJ_CUDA_WQGEMM=pdl (and cluster+pdl+ring)
// the second is launched to start before the first ends and must wait
// for it before it reads x @ W1. Each M runs on new x, so a read of the
// previous run's intermediate would show. Against the reference within
// a 32nd of |want| + 4: x @ W1 (|.| up to ~30) is rounded to bf16 (an
// ulp of 0.125) in both, where the sums' order may flip a rounding, and
// each flip moves y by at most |w2| <= 8 x 0.05 times the ulp; a stale or
// missing input is off by about |want|. (With int8 W2, |w2| up to 12.75,
// M 64 saw four flips add up to 0.7 at |want| 12.5.)
static void run_chain(tj_context_t* ctx) {
  const wq_case_t c1 = {"chain_int4", 4100, 128,   4,     true,
                        false,        128,  false, false, TJ_DTYPE_BF16};
  const wq_case_t c2 = {
      "chain_int4_g32", 128, 96, 4, true, false, 32, false, false,
      TJ_DTYPE_BF16};
  wq_data_t d1, d2;
  wq_make(&c1, &d1);
  wq_make(&c2, &d2);
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "wq_chain", &g));
  if (!g) {
    wq_free(&d1);
    wq_free(&d2);
    return;
  }
  tj_dtype_t ft = TJ_DTYPE_BF16;
  int64_t M = tj_graph_symbol(g, "M");
  tj_value_t v = tj_graph_input(g, ft, 2, (int64_t[]){M, c1.K}, "x");
  const wq_case_t* cs[2] = {&c1, &c2};
  const wq_data_t* ds[2] = {&d1, &d2};
  for (int l = 0; l < 2; ++l) {
    const wq_case_t* c = cs[l];
    const wq_data_t* d = ds[l];
    tj_dtype_t qd = c->bits == 8 ? TJ_DTYPE_I8 : TJ_DTYPE_U8;
    tj_value_t q = tj_graph_constant(g, qd, 2, d->qdims, d->q,
                                     (size_t)(d->qdims[0] * d->qdims[1]));
    int64_t ns = d->srank == 1 ? d->sdims[0] : d->sdims[0] * d->sdims[1];
    void* sv = wq_floats(ft, d->s, ns);
    tj_value_t sc =
        tj_graph_constant(g, ft, d->srank, d->sdims, sv, 2 * (size_t)ns);
    free(sv);
    tj_quant_attrs_t a = {.dtype = qd};
    if (c->bits == 4) a.int4 = TJ_INT4_SIGNED;
    a.block_size = c->group;
    a.axis = c->group ? 0 : 1;
    v = tj_graph_matmul(g, v,
                        tj_graph_dequantize(g, q, sc, tj_value_none(), &a));
  }
  tj_graph_output(g, v, "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.cache_dir = "";
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  const int64_t ms[] = {1, 3, 16, 5, 64, 1};
  for (int i = 0; i < (int)(sizeof(ms) / sizeof(ms[0])) && exe; ++i) {
    int64_t m = ms[i], K = c1.K, N = c2.N;
    float* x = malloc(sizeof(float) * (size_t)(m * K));
    for (int64_t j = 0; j < m * K; ++j)
      x[j] = (float)(wq_rnd() % 2001) / 1000.0f - 1.0f;
    void* xt = wq_floats(ft, x, m * K);
    void* wy = malloc(2 * (size_t)(m * N));
    void* gy = malloc(2 * (size_t)(m * N));
    tj_tensor_t in = tj_tensor_make(xt, ft, 2, (int64_t[]){m, K});
    tj_tensor_t wt = tj_tensor_make(wy, ft, 2, (int64_t[]){m, N});
    tj_tensor_t gt = tj_tensor_make(gy, ft, 2, (int64_t[]){m, N});
    CHECK_OK(tj_reference_run(g, &in, 1, &wt, 1));
    memset(gy, 0xA5, 2 * (size_t)(m * N));
    CHECK_OK(tj_executable_run(exe, &in, 1, &gt, 1));
    int bad = 0;
    for (int64_t j = 0; j < m * N && bad < 5; ++j) {
      double want = tj_load_f64(ft, wy, j), got = tj_load_f64(ft, gy, j);
      if (!(fabs(got - want) <= (fabs(want) + 4.0) / 32)) {
        fprintf(stderr,
                "  chain at M %lld: element %lld: got %.9g, want %.9g\n",
                (long long)m, (long long)j, got, want);
        ++bad;
      }
    }
    CHECK_EQ_INT(0, bad);
    free(x);
    free(xt);
    free(wy);
    free(gy);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  wq_free(&d1);
  wq_free(&d2);
}

static tj_context_t* g_pdl_ctx;          // TJ_CUDA_WQGEMM=pdl
static tj_context_t* g_ring_ctx;         // TJ_CUDA_WQGEMM=ring
static tj_context_t* g_cluster_pdl_ctx;  // TJ_CUDA_WQGEMM=cluster+pdl+ring

TEST(chained_gemms_by_default_and_under_pdl) {
  run_chain(g_ctx);
  run_chain(g_pdl_ctx);
  run_chain(g_ring_ctx);
  run_chain(g_cluster_pdl_ctx);
}

// The same cases as cluster_join_cases under programmatic dependent launch
// and with the weight's cp.async ring; all_settings_cases with both and
// the cluster join.
TEST(pdl_and_ring_cases) {
  for (int i = 0; i < kWqNumCases; ++i)
    if (kWqCases[i].adt != TJ_DTYPE_F32 || is_split_case(&kWqCases[i])) {
      run_case(&kWqCases[i], g_pdl_ctx);
      run_case(&kWqCases[i], g_ring_ctx);
    }
}

TEST(all_settings_cases) {
  for (int i = 0; i < kWqNumCases; ++i)
    if (kWqCases[i].adt != TJ_DTYPE_F32 || is_split_case(&kWqCases[i]))
      run_case(&kWqCases[i], g_cluster_pdl_ctx);
}

int main(void) {
  // Each test's line as it ends, so that a run cut by a timeout shows how
  // far it came.
  setvbuf(stdout, NULL, _IOLBF, 0);
  tj_cuda_device_t* device = tj_test_open_device_or_skip();
  tj_cuda_device_destroy(device);
  if (tj_test_context_create(&g_ctx) != NULL) return 1;
  // The context reads its settings once, when it is created.
  setenv("TJ_CUDA_WQGEMM", "mma", 1);
  tj_status_t st = tj_test_context_create(&g_mma_ctx);
  setenv("TJ_CUDA_WQGEMM", "tiles", 1);
  if (!st) st = tj_test_context_create(&g_tiled_ctx);
  setenv("TJ_CUDA_WQGEMM", "fma", 1);
  if (!st) st = tj_test_context_create(&g_fma_ctx);
  const char* splits[3] = {"split1", "split2", "split8"};
  for (int s = 0; s < 3; ++s) {
    setenv("TJ_CUDA_WQGEMM", splits[s], 1);
    if (!st) st = tj_test_context_create(&g_split_ctx[s]);
  }
  setenv("TJ_CUDA_WQGEMM", "blocks256", 1);
  if (!st) st = tj_test_context_create(&g_b256_ctx);
  setenv("TJ_CUDA_WQGEMM", "cluster", 1);
  if (!st) st = tj_test_context_create(&g_cluster_ctx);
  setenv("TJ_CUDA_WQGEMM", "pdl", 1);
  if (!st) st = tj_test_context_create(&g_pdl_ctx);
  setenv("TJ_CUDA_WQGEMM", "ring", 1);
  if (!st) st = tj_test_context_create(&g_ring_ctx);
  setenv("TJ_CUDA_WQGEMM", "cluster+pdl+ring", 1);
  if (!st) st = tj_test_context_create(&g_cluster_pdl_ctx);
  unsetenv("TJ_CUDA_WQGEMM");
  if (st != NULL) return 1;
  RUN_TEST(every_case_on_the_default_kernel);
  RUN_TEST(cluster_join_cases);
  RUN_TEST(chained_gemms_by_default_and_under_pdl);
  RUN_TEST(pdl_and_ring_cases);
  RUN_TEST(all_settings_cases);
  RUN_TEST(split_cases_at_one_two_and_eight_splits);
  RUN_TEST(split_cases_on_256_thread_blocks);
  RUN_TEST(every_case_on_the_tile_layout);
  RUN_TEST(every_case_against_the_reference);
  RUN_TEST(every_case_on_the_cuda_core_kernel);
  tj_context_destroy(g_cluster_pdl_ctx);
  tj_context_destroy(g_ring_ctx);
  tj_context_destroy(g_pdl_ctx);
  tj_context_destroy(g_cluster_ctx);
  tj_context_destroy(g_b256_ctx);
  for (int s = 0; s < 3; ++s) tj_context_destroy(g_split_ctx[s]);
  tj_context_destroy(g_fma_ctx);
  tj_context_destroy(g_tiled_ctx);
  tj_context_destroy(g_mma_ctx);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
