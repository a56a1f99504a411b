// linear3d (issues 13 and 14) on the GPU: the transformer blocks' linear
// y = gelu(x @ w + b) + r with x [B, T, K] (B symbolic) is one rank-2 GEMM
// of B*T rows (kir/lower_index.c, gemm_joins_m), so every rank-2 candidate
// serves it: each forced in turn (the module's kernel, cuBLASLt + the
// epilogue kernel, the TMA schedules, split-K in 2, 4 and 8 slices; exact
// f32's 256x128 CUDA-core tile), the
// executable reports that candidate ran (not the fallback a batched GEMM
// gets), and its numbers match tj_reference_run at two batch sizes from
// one executable; a plain bf16 matmul of rank 3 through cuBLASLt writes
// its output directly. bf16 within 3e-2 relative (the reference rounds
// every op to bf16), exact f32 (no TF32: its candidates are the module's
// kernel, cuBLASLt's sgemm and split-K) within 1e-4. Skips (exit 77)
// without a driver or GPU.

#include <math.h>

#include "backends/cuda/cuda_executable.h"
#include "lib/dtype.h"
#include "tests/cuda/cuda_test_util.h"

enum { T = 96, K = 512, N = 384 };

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static tj_graph_t* build(tj_context_t* ctx, tj_dtype_t dt, bool plain) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "linear3", &g));
  if (!g) return NULL;
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, dt, 3, (int64_t[]){B, T, K}, "x");
  tj_value_t w = tj_graph_input(g, dt, 2, (int64_t[]){K, N}, "w");
  if (plain) {
    tj_graph_output(g, tj_graph_matmul(g, x, w), "y");
  } else {
    tj_value_t b = tj_graph_input(g, dt, 1, (int64_t[]){N}, "b");
    tj_value_t r = tj_graph_input(g, dt, 3, (int64_t[]){B, T, N}, "r");
    tj_value_t y = tj_graph_gelu(g, tj_graph_linear(g, x, w, b), false);
    tj_graph_output(g, tj_graph_add(g, y, r), "y");
  }
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

// Runs |exe| (compiled from |g|) at batch |b| against the reference.
static void run_at(tj_graph_t* g, tj_executable_t* exe, tj_dtype_t dt,
                   bool plain, int64_t b, const char* what) {
  int64_t dims[4][3] = {{b, T, K}, {K, N}, {N}, {b, T, N}};
  int32_t ranks[4] = {3, 2, 1, 3};
  double scales[4] = {1.0, 0.0625, 1.0, 1.0};
  int32_t num_in = plain ? 2 : 4;
  void* data[4];
  tj_tensor_t in[4];
  for (int32_t i = 0; i < num_in; ++i) {
    int64_t n = 1;
    for (int32_t d = 0; d < ranks[i]; ++d) n *= dims[i][d];
    data[i] = tj_test_random_tensor(&g_rng, dt, n, scales[i]);
    in[i] = tj_tensor_make(data[i], dt, ranks[i], dims[i]);
  }
  int64_t ny = b * T * N;
  void* want = calloc((size_t)ny, tj_dtype_size(dt));
  void* got = calloc((size_t)ny, tj_dtype_size(dt));
  tj_tensor_t want_t = tj_tensor_make(want, dt, 3, dims[3]);
  tj_tensor_t got_t = tj_tensor_make(got, dt, 3, dims[3]);
  CHECK_OK(tj_reference_run(g, in, num_in, &want_t, 1));
  CHECK_OK(tj_executable_run(exe, in, num_in, &got_t, 1));
  bool ok = tj_test_close_enough(what, dt, got, want, ny,
                                 dt == TJ_DTYPE_BF16 ? 3e-2 : 1e-4);
  if (!ok) fprintf(stderr, "  (%s at B = %lld)\n", what, (long long)b);
  CHECK(ok);
  for (int32_t i = 0; i < num_in; ++i) free(data[i]);
  free(want);
  free(got);
}

// Forces candidate |forced| (NULL: autotuned) on the linear in |dt|; the
// choice the executable reports must start with |expect|.
static void check_candidate(tj_dtype_t dt, bool plain, const char* forced,
                            const char* expect) {
  tj_context_t* ctx = tj_test_cuda_context_create(forced);
  if (!ctx) return;
  tj_graph_t* g = build(ctx, dt, plain);
  tj_compile_options_t o;
  tj_test_cuda_compile_options(&o, dt);
  o.cuda.allow_tf32 = false;  // the exact f32 candidates
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  if (exe) {
    char what[96];
    snprintf(what, sizeof(what), "%s%s candidate %s", tj_dtype_name(dt),
             plain ? " plain" : "", forced ? forced : "tuned");
    run_at(g, exe, dt, plain, 3, what);
    tj_cuda_program_stats_t cs;
    tj_test_check_gemm_choice(what, exe, expect, &cs);
    printf("# %s: %s\n", what, cs.gemm_choice);
    run_at(g, exe, dt, plain, 1, what);
    tj_executable_stats_t stats = {.struct_size = sizeof(stats)};
    tj_executable_stats(exe, &stats);
    CHECK_EQ_INT(0, stats.num_graph_breaks);
    CHECK_EQ_INT(1, stats.num_kernels);
    CHECK_EQ_INT(0, stats.recompiles);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

TEST(bf16_every_rank2_candidate) {
  static const struct {
    const char* forced;
    const char* expect;
  } kCases[] = {
      {"0", "fused default"},
      {"4", "cublaslt matmul + epilogue"},
      {"6", "fused wgmma 128x128"},
      {"7", "fused tma ws 128x128 s4 persistent"},
      {"8", "fused tma ws 128x256 s4 persistent"},
      {"9", "fused tma pingpong"},
      {"10", "fused tma ws 128x256 s3"},
      {"11", "fused tma ws 128x64"},
      {"12", "split-k 2"},
      {"13", "split-k 4"},
      {"14", "split-k 8"},
      {"17", "fused wgmma 128x64 s4"},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kCases); ++i) {
    check_candidate(TJ_DTYPE_BF16, false, kCases[i].forced, kCases[i].expect);
  }
  check_candidate(TJ_DTYPE_BF16, false, NULL, "");
  // A plain matmul: cuBLASLt into the output itself (lt_direct).
  check_candidate(TJ_DTYPE_BF16, true, "4", "cublaslt");
}

TEST(f32_exact_candidates) {
  check_candidate(TJ_DTYPE_F32, false, "0", "fused default");
  check_candidate(TJ_DTYPE_F32, false, "4", "cublaslt matmul + epilogue");
  check_candidate(TJ_DTYPE_F32, false, "12", "split-k 2");
  check_candidate(TJ_DTYPE_F32, false, "13", "split-k 4");
  // The 256x128 CUDA-core tile (issue 13, sgemm): M = 288 and 96, a part
  // tile of rows, under the fused bias, gelu and residual.
  check_candidate(TJ_DTYPE_F32, false, "18", "fused f32 cuda cores 256x128");
  check_candidate(TJ_DTYPE_F32, false, NULL, "");
}

int main(void) {
  tj_test_require_gpu();
  RUN_TEST(bf16_every_rank2_candidate);
  RUN_TEST(f32_exact_candidates);
  TEST_MAIN_END();
}
