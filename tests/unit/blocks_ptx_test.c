// The transformer blocks of bench/transformer_blocks.py (issue 14) compiled
// for CUDA without a GPU: the GPT-style block (LayerNorm, Q/K/V linears
// with bias, causal attention, output projection, residual, GELU MLP) and
// the Llama-style block (RMSNorm, grouped-query heads, rotary embeddings,
// causal attention, SwiGLU MLP), in f32 and bf16, at the bench's shapes
// (T 512, B 2 and 16) and with a symbolic B: every node runs in a kernel,
// none on the host (a host step on CUDA stages every tensor it touches
// through host memory; the f32 Llama block had one, 358 ms a call on the
// H200), and the PTX assembles with ptxas -arch=sm_90a when the test is
// given its path. Numbers on the GPU: bench/transformer_blocks.py.

#include <stdio.h>
#include <stdlib.h>

#include "tests/unit/ptx_check.h"
#include "tests/unit/blocks_graphs.h"

static const char* g_ptxas = "";
static tj_context_t* g_ctx;

static tj_graph_t* gpt_block(tj_dtype_t dt, int64_t b, int64_t t) {
  return tj_test_gpt_block(g_ctx, dt, b, t);
}

static tj_graph_t* llama_block(tj_dtype_t dt, int64_t b, int64_t t) {
  return tj_test_llama_block(g_ctx, dt, b, t);
}

// The sanitizer leg (tj_test_sanitizer_subset) compiles the blocks at a
// symbolic B alone, here and in block_linears_are_rank2_gemm_candidates: a
// constant B runs the same emitters with its sizes folded, and the plain
// leg compiles both. At a symbolic B the GEMM candidates are left out
// (autotuning off): block_linears_are_rank2_gemm_candidates (a meson test
// of its own, blocks_linears_test, in both legs) compiles and checks those
// of the same four blocks with the same options; they took about 90% of
// each compile here.
TEST(both_blocks_every_dtype_no_host_step) {
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_F32, TJ_DTYPE_BF16};
  static const int64_t kBatch[] = {2, 0};  // 0: symbolic B
  for (int kind = 0; kind < 2; ++kind) {
    for (size_t i = 0; i < sizeof(kTypes) / sizeof(kTypes[0]); ++i) {
      for (size_t j = 0; j < sizeof(kBatch) / sizeof(kBatch[0]); ++j) {
        if (kBatch[j] && tj_test_sanitizer_subset()) continue;
        char what[96];
        snprintf(what, sizeof(what), "%s %s B=%lld", kind ? "llama" : "gpt",
                 tj_dtype_name(kTypes[i]), (long long)kBatch[j]);
        tj_graph_t* g = kind ? llama_block(kTypes[i], kBatch[j], 512)
                             : gpt_block(kTypes[i], kBatch[j], 512);
        CHECK(g != NULL);
        if (!g) continue;
        printf("# %s\n", what);
        tj_compile_options_t o;
        tj_compile_options_initialize(&o);
        if (!kBatch[j]) o.autotune = TJ_AUTOTUNE_OFF;
        tj_test_check_ptx_with(g_ptxas, what, g, &o);
      }
    }
  }
}

// An f32 GEMM (the blocks' linears with their bias and GELU epilogue) has
// GEMM candidates without allow_tf32 too: cuBLASLt's exact sgemm and the
// epilogue kernel after it (candidate 4, <entry>_c4), split-K and the
// exact kernel's 256x128 tile (18), none of the tensor-core main loops;
// with allow_tf32 the TF32 ones join (and 18 leaves).
TEST(f32_gemm_has_the_cublaslt_candidate) {
  for (int tf32 = 0; tf32 < 2; ++tf32) {
    tj_graph_t* g = NULL;
    CHECK_OK(tj_graph_create(g_ctx, "f32_linear", &g));
    int64_t B = tj_graph_symbol(g, "B");
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 768}, "x");
    tj_value_t w =
        tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){768, 3072}, "w");
    tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){3072}, "b");
    tj_graph_output(g, tj_graph_gelu(g, tj_graph_linear(g, x, w, b), false),
                    "y");
    CHECK_OK(tj_graph_finalize(g));
    tj_compile_options_t o;
    tj_compile_options_initialize(&o);
    o.cuda.allow_tf32 = tf32 != 0;
    tj_allocator_t al = tj_allocator_system();
    tj_cuda_offline_ptx_t ptx;
    memset(&ptx, 0, sizeof(ptx));
    CHECK_OK(tj_cuda_compile_ptx(g, &o, TJ_NVPTX_SM_90A, al, &ptx));
    CHECK_EQ_INT(1, ptx.num_kernels);
    CHECK_EQ_INT(0, ptx.num_host_steps);
    CHECK(ptx.variants_ptx != NULL);
    if (ptx.variants_ptx) {
      CHECK(strstr(ptx.variants_ptx, "_c4(") != NULL);
      if (!tf32) {
        // No tensor-core main loop (candidates 1 to 11 but cuBLASLt's 4,
        // 15 and 16); split-K (12 to 14, issue 13) where K = 768 splits in
        // whole k-tiles: in 2 and 4 slices, each a partial and a reduce
        // kernel.
        for (int c = 1; c <= 16; c = c == 11 ? 15 : c + 1) {
          char name[16];
          snprintf(name, sizeof(name), "_c%d(", c);
          if (c != 4) CHECK(strstr(ptx.variants_ptx, name) == NULL);
        }
        CHECK(strstr(ptx.variants_ptx, "_c12r(") != NULL);
        CHECK(strstr(ptx.variants_ptx, "_c13r(") != NULL);
        CHECK(strstr(ptx.variants_ptx, "_c14(") == NULL);
        // The exact CUDA-core kernel on 256x128 tiles (issue 13, sgemm).
        CHECK(strstr(ptx.variants_ptx, "_c18(") != NULL);
        CHECK_EQ_INT(6, ptx.num_variant_kernels);
      } else {
        CHECK(ptx.num_variant_kernels > 1);
        CHECK(strstr(ptx.variants_ptx, "_c18(") == NULL);
      }
    }
    tj_cuda_offline_ptx_deinitialize(al, &ptx);
    // With autotuning off (and no candidate forced) a GPU run compiles no
    // candidate, and the offline program has none: the same module alone.
    o.autotune = TJ_AUTOTUNE_OFF;
    CHECK_OK(tj_cuda_compile_ptx(g, &o, TJ_NVPTX_SM_90A, al, &ptx));
    CHECK_EQ_INT(1, ptx.num_kernels);
    CHECK(ptx.ptx != NULL && ptx.variants_ptx == NULL);
    CHECK_EQ_INT(0, ptx.num_variant_kernels);
    tj_cuda_offline_ptx_deinitialize(al, &ptx);
    tj_graph_destroy(g);
  }
}

// linear3d (issues 13, 14): the blocks' linears x[B, T, d] @ w[d, n] are
// one rank-2 GEMM each (kir/lower_index.c, gemm_joins_m), so each has the
// rank-2 candidates a batched GEMM lacks: cuBLASLt (its epilogue kernel,
// <entry>_epi.._c4), split-K (<entry>_sk2.._c12, K being a multiple of 128
// in both blocks) and, in bf16, the TMA warp-specialized schedules
// (<entry>_c7, _c9). Counted over the matmul kernels of the program: GPT's
// 6 linears (q, k, v, the output projection, the MLP's two) and Llama's 7
// (q, k, v, o, gate, up, down). Attention is one kernel in both dtypes
// (bf16 on tensor cores, f32 on FFMA, jit/emit_nvptx_attention_f32.c: the
// f32 blocks used to decompose it into batched matmuls of the scores), so
// every matmul kernel is a linear. At B symbolic and, in bf16, at B = 16
// (B*T = 8192, the bench's larger size).

static bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_';
}

// Whether |variants| has an entry named |name|... ending in |suffix|.
static bool has_variant(const char* variants, const char* name,
                        const char* suffix) {
  size_t n = strlen(name), sn = strlen(suffix);
  for (const char* p = variants; (p = strstr(p, name)) != NULL; p += n) {
    if (p > variants && ident_char(p[-1])) continue;
    const char* e = p + n;
    while (ident_char(*e)) ++e;
    if (*e == '(' && (size_t)(e - p) >= n + sn &&
        memcmp(e - sn, suffix, sn) == 0)
      return true;
  }
  return false;
}

// How many kernels of |ptx| have |part| in their name.
static int count_entries(const char* ptx, const char* part) {
  int n = 0;
  for (const char* p = ptx; (p = strstr(p, ".entry ")) != NULL;) {
    p += 7;
    const char* e = strchr(p, '(');
    if (!e || e - p > 200) break;
    char name[256];
    snprintf(name, sizeof(name), "%.*s", (int)(e - p), p);
    if (strstr(name, part)) ++n;
  }
  return n;
}

// How many matmul kernels of |ptx| (|*num_matmuls|) have such a variant.
static int count_with(const char* ptx, const char* variants, const char* suffix,
                      int* num_matmuls) {
  int with = 0;
  *num_matmuls = 0;
  for (const char* p = ptx; (p = strstr(p, ".entry ")) != NULL;) {
    p += 7;
    const char* e = strchr(p, '(');
    if (!e || e - p > 200) break;
    char name[256];
    snprintf(name, sizeof(name), "%.*s", (int)(e - p), p);
    if (!strstr(name, "matmul")) continue;
    ++*num_matmuls;
    if (variants && has_variant(variants, name, suffix)) ++with;
  }
  return with;
}

TEST(block_linears_are_rank2_gemm_candidates) {
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_F32, TJ_DTYPE_BF16};
  static const int64_t kBatch[] = {0, 16};  // 0: symbolic B
  for (int kind = 0; kind < 2; ++kind) {
    const int linears = kind ? 7 : 6;
    for (size_t i = 0; i < TJ_ARRAY_SIZE(kTypes); ++i) {
      for (size_t j = 0; j < TJ_ARRAY_SIZE(kBatch); ++j) {
        if (kBatch[j] && kTypes[i] == TJ_DTYPE_F32) continue;  // time
        if (kBatch[j] && tj_test_sanitizer_subset()) continue;
        // The sanitizer leg: GPT's f32 block and Llama's bf16 one (each
        // dtype's candidates once; both_blocks_every_dtype_no_host_step
        // compiles all four blocks there without them).
        if (tj_test_sanitizer_subset() && kind != (int)i) continue;
        tj_graph_t* g = kind ? llama_block(kTypes[i], kBatch[j], 512)
                             : gpt_block(kTypes[i], kBatch[j], 512);
        CHECK(g != NULL);
        if (!g) continue;
        CHECK_OK(tj_graph_finalize(g));
        tj_allocator_t al = tj_allocator_system();
        tj_cuda_offline_ptx_t ptx;
        memset(&ptx, 0, sizeof(ptx));
        CHECK_OK(tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx));
        CHECK(ptx.ptx != NULL && ptx.variants_ptx != NULL);
        if (ptx.ptx) {
          bool bf16 = kTypes[i] == TJ_DTYPE_BF16;
          int matmuls = 0;
          int lt = count_with(ptx.ptx, ptx.variants_ptx, "_c4", &matmuls);
          int split = count_with(ptx.ptx, ptx.variants_ptx, "_c12", &matmuls);
          int tma = count_with(ptx.ptx, ptx.variants_ptx, "_c7", &matmuls);
          int pingpong = count_with(ptx.ptx, ptx.variants_ptx, "_c9", &matmuls);
          printf(
              "# %s %s B=%lld: %d matmul kernels, cublaslt %d, split-k %d, "
              "tma %d, pingpong %d\n",
              kind ? "llama" : "gpt", tj_dtype_name(kTypes[i]),
              (long long)kBatch[j], matmuls, lt, split, tma, pingpong);
          // Attention is one kernel, the blocks' one opaque group (the node
          // left whole): every matmul kernel is a linear. swiglu (issue
          // 14): in bf16 two linears of one input and one weight shape are
          // one dual GEMM (Llama's gate and up, and its k and v; two of
          // GPT's q, k and v), which has no split-K form (its cuBLASLt
          // candidate runs two GEMMs).
          int dual = bf16 ? (kind ? 2 : 1) : 0;
          CHECK_EQ_INT(1, count_entries(ptx.ptx, "_opaque"));
          CHECK_EQ_INT(linears - dual, matmuls);
          CHECK_EQ_INT(linears - dual, lt);
          CHECK_EQ_INT(linears - 2 * dual, split);
          CHECK_EQ_INT(bf16 ? linears - dual : 0, tma);
          CHECK_EQ_INT(bf16 ? linears - dual : 0, pingpong);
        }
        tj_cuda_offline_ptx_deinitialize(al, &ptx);
        tj_graph_destroy(g);
      }
    }
  }
}

// Issue 14 (tj_pass_ctx_t.attention_views): attention reads q, k and v
// through the head views (x @ w as [B, T, H, D], transposed) where they
// are views of a linear's output, GPT's three and Llama's v (its q and k
// come from rotary embeddings, computed kernels), and writes its result
// through the merge's transpose: each one copy kernel fewer than with
// TJ_ATTENTION_VIEWS=off, and still no host step. Autotuning off: the
// count is the program's, and the GEMM candidates of these blocks' linears
// (bf16, symbolic B) are compiled and checked by blocks_linears_test
// (block_linears_are_rank2_gemm_candidates); emitting them here, four
// times, took about two thirds of this test's time.
TEST(attention_reads_head_views) {
  tj_context_t* off_ctx = NULL;
  setenv("TJ_ATTENTION_VIEWS", "off", 1);
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  CHECK_OK(tj_context_create(&o, &off_ctx));
  unsetenv("TJ_ATTENTION_VIEWS");
  if (!off_ctx) return;
  for (int kind = 0; kind < 2; ++kind) {
    uint32_t kernels[2] = {0, 0};
    for (int off = 0; off < 2; ++off) {
      tj_context_t* saved = g_ctx;
      if (off) g_ctx = off_ctx;
      tj_graph_t* g = kind ? llama_block(TJ_DTYPE_BF16, 0, 512)
                           : gpt_block(TJ_DTYPE_BF16, 0, 512);
      g_ctx = saved;
      CHECK(g != NULL);
      if (!g) continue;
      CHECK_OK(tj_graph_finalize(g));
      tj_allocator_t al = tj_allocator_system();
      tj_cuda_offline_ptx_t ptx;
      memset(&ptx, 0, sizeof(ptx));
      tj_compile_options_t co;
      tj_compile_options_initialize(&co);
      co.autotune = TJ_AUTOTUNE_OFF;
      CHECK_OK(tj_cuda_compile_ptx(g, &co, TJ_NVPTX_SM_90A, al, &ptx));
      CHECK_EQ_INT(0, ptx.num_host_steps);
      CHECK(ptx.variants_ptx == NULL);
      kernels[off] = ptx.num_kernels;
      tj_cuda_offline_ptx_deinitialize(al, &ptx);
      tj_graph_destroy(g);
    }
    printf("# %s bf16: %u kernels with the views, %u without\n",
           kind ? "llama" : "gpt", kernels[0], kernels[1]);
    CHECK_EQ_INT((int)kernels[1] - (kind ? 2 : 4), (int)kernels[0]);
  }
  tj_context_destroy(off_ctx);
}

int main(int argc, char** argv) {
  if (argc > 1) g_ptxas = argv[1];
  if (!g_ptxas[0]) printf("# ptxas not given: PTX not assembled\n");
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  CHECK_OK(tj_context_create(&o, &g_ctx));
  // argv[2] "linears" or "views": that test alone (a meson test of its
  // own, so each stays within its time limit); otherwise the others.
  if (argc > 2 && strcmp(argv[2], "linears") == 0) {
    RUN_TEST(block_linears_are_rank2_gemm_candidates);
  } else if (argc > 2 && strcmp(argv[2], "views") == 0) {
    RUN_TEST(attention_reads_head_views);
  } else {
    RUN_TEST(both_blocks_every_dtype_no_host_step);
    RUN_TEST(f32_gemm_has_the_cublaslt_candidate);
  }
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
