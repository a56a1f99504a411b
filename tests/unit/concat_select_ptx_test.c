// The Llama block's rotary embeddings (rope14, issue 14) compiled for
// CUDA without a GPU: v * cos + concat([-hi, lo], 3) * sin over q viewed
// as [B, H, T, D] from [B, T, H*D] (the blocks' heads()) is one kernel
// (the concat one select per element, kir/lower_select.c), not one a box;
// its vector path reads v rotated with one 16-byte load a vector where the
// vector lies in one half (load_at_piecewise in jit/emit_llvm.c: halves of
// 32 and 64 are multiples of the 8 bf16 or 4 f32 lanes), a gather beside
// it for the vectors that do not; and the PTX assembles with ptxas
// -arch=sm_90a when the test is given its path, with no spills (ptxas -v's
// registers printed). TJ_CONCAT_SELECT=off: two kernels.

#include <stdio.h>
#include <stdlib.h>

#include "tests/unit/ptx_check.h"

static const char* g_ptxas = "";

static tj_graph_t* rope(tj_context_t* ctx, tj_dtype_t dt, int64_t d) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "rope", &g));
  int64_t B = tj_graph_symbol(g, "B"), t = 512, h = 16, half = d / 2;
  tj_value_t x = tj_graph_input(g, dt, 3, (int64_t[]){B, t, h * d}, "x");
  tj_value_t v =
      tj_graph_transpose(g, tj_graph_reshape(g, x, 4, (int64_t[]){B, t, h, d}),
                         (const int32_t[]){0, 2, 1, 3});
  tj_value_t c = tj_graph_input(g, dt, 2, (int64_t[]){t, d}, "cos");
  tj_value_t s = tj_graph_input(g, dt, 2, (int64_t[]){t, d}, "sin");
  int64_t zero[4] = {0, 0, 0, 0}, mid[4] = {0, 0, 0, half};
  int64_t end[4] = {INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX};
  int64_t to_mid[4] = {INT64_MAX, INT64_MAX, INT64_MAX, half};
  tj_value_t lo = tj_graph_slice(g, v, zero, to_mid, NULL);
  tj_value_t hi = tj_graph_slice(g, v, mid, end, NULL);
  tj_value_t rot =
      tj_graph_concat(g, 2, (tj_value_t[]){tj_graph_neg(g, hi), lo}, 3);
  tj_graph_output(
      g, tj_graph_add(g, tj_graph_mul(g, v, c), tj_graph_mul(g, rot, s)), "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static int32_t count(const char* text, const char* needle) {
  int32_t n = 0;
  for (const char* p = text; p && (p = strstr(p, needle)) != NULL; ++p) ++n;
  return n;
}

static int32_t compile(tj_context_t* ctx, tj_dtype_t dt, int64_t d,
                       char** out_ptx) {
  tj_graph_t* g = rope(ctx, dt, d);
  tj_allocator_t al = tj_allocator_system();
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  CHECK_OK(tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx));
  CHECK_EQ_INT(0, ptx.num_host_steps);
  char what[64];
  snprintf(what, sizeof(what), "rope %s d%lld", tj_dtype_name(dt),
           (long long)d);
  tj_test_assemble_ptx(g_ptxas, what, ptx.ptx);
  int32_t kernels = ptx.num_kernels;
  *out_ptx = ptx.ptx ? strdup(ptx.ptx) : NULL;
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
  return kernels;
}

TEST(rope_one_kernel) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  const tj_dtype_t types[3] = {TJ_DTYPE_BF16, TJ_DTYPE_F16, TJ_DTYPE_F32};
  for (int t = 0; t < 3; ++t) {
    for (int64_t d = 64; d <= 128; d += 64) {
      char* ptx = NULL;
      CHECK_EQ_INT(1, compile(ctx, types[t], d, &ptx));
      // The vector path's two items each load x, cos and sin, and x
      // rotated: a vector load (and a gather beside it, for vectors
      // across the halves) where the boxes' kernels had no rotated load.
      int32_t loads = count(ptx, "ld.global.v4.");
      if (loads != 8) fprintf(stderr, "  rope: %d vector loads\n", loads);
      CHECK_EQ_INT(8, loads);
      CHECK_EQ_INT(0, (int)tj_test_ptxas_spills(g_ptxas, "rope", ptx));
      free(ptx);
    }
  }
  tj_context_destroy(ctx);
}

TEST(switch_off) {
  setenv("TJ_CONCAT_SELECT", "off", 1);
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  unsetenv("TJ_CONCAT_SELECT");
  char* ptx = NULL;
  CHECK_EQ_INT(2, compile(ctx, TJ_DTYPE_BF16, 128, &ptx));
  // Each box's two items load x twice (the rotated half is a plain load),
  // cos and sin.
  CHECK_EQ_INT(16, count(ptx, "ld.global.v4."));
  CHECK_EQ_INT(0, (int)tj_test_ptxas_spills(g_ptxas, "rope boxes", ptx));
  free(ptx);
  tj_context_destroy(ctx);
}

int main(int argc, char** argv) {
  if (argc > 1) g_ptxas = argv[1];
  RUN_TEST(rope_one_kernel);
  RUN_TEST(switch_off);
  TEST_MAIN_END();
}
