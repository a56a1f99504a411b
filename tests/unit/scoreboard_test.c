// tj_graph_scoreboard (include/tensorjit/tj_optimize.h) on the capstone of
// seed 001, y = gelu(x @ w + b) with B = 2048 in bf16, built through the
// public builder: eager launches at least 5 kernels and moves many times the
// activation; after fusion one kernel moves about 2x. The byte counts are
// checked exactly against the arithmetic below.

#include "tests/unit/test.h"

static tj_context_t* g_ctx;

// The capstone graph: x[B,1024] @ w[1024,4096] + b[4096], gelu (tanh form).
static tj_graph_t* capstone(tj_dtype_t dtype) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, "block", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, dtype, 2, (int64_t[]){B, 1024}, "x");
  tj_value_t w = tj_graph_input(g, dtype, 2, (int64_t[]){1024, 4096}, "w");
  tj_value_t b = tj_graph_input(g, dtype, 1, (int64_t[]){4096}, "b");
  tj_graph_output(g, tj_graph_gelu(g, tj_graph_linear(g, x, w, b), true), "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static const char* const kB[] = {"B"};

TEST(capstone_bf16_eager_vs_fused) {
  tj_graph_t* g = capstone(TJ_DTYPE_BF16);
  tj_scoreboard_t sb;
  const int64_t B = 2048;
  CHECK_OK(tj_graph_scoreboard(g, 1, kB, &B, &sb));
  const int64_t A = B * 4096 * 2;  // the activation: y in bf16
  const int64_t X = B * 1024 * 2, W = 1024 * 4096 * 2, BIAS = 4096 * 2;
  CHECK_EQ_INT(A, sb.activation_bytes);
  CHECK_EQ_INT(X + W + BIAS, sb.input_bytes);

  const tj_scoreboard_row_t* eager = &sb.rows[TJ_STAGE_EAGER];
  // matmul, bias add, and the 6 ops of gelu's tanh form
  // x * sigmoid(x * (c0 + c1 * x^2)), each its own kernel.
  CHECK(eager->kernels >= 5);
  CHECK_EQ_INT(8, eager->kernels);
  // Each writes one activation; reads: x and w, then A + b, A, A + c1,
  // A + c0, 2A (x and u), A, 2A (x and sigmoid) (rank-0 bf16 constants
  // are 2 bytes).
  CHECK_EQ_INT(8 * A, eager->bytes_written);
  CHECK_EQ_INT(X + W + 9 * A + BIAS + 2 + 2, eager->bytes_read);
  CHECK_EQ_INT(0, eager->graph_breaks);
  CHECK(eager->percent_compiled == 0.0);

  // Composites are host calls until decomposed.
  const tj_scoreboard_row_t* canon = &sb.rows[TJ_STAGE_CANONICALIZE];
  CHECK_EQ_INT(2, canon->graph_breaks);
  CHECK_EQ_INT(8, canon->kernels);

  const tj_scoreboard_row_t* dec = &sb.rows[TJ_STAGE_DECOMPOSE];
  CHECK_EQ_INT(0, dec->graph_breaks);
  CHECK(dec->percent_compiled == 100.0);
  CHECK_EQ_INT(10, dec->kernels);  // the f32 upcast adds two casts

  // Fused: one matmul kernel with the bias + gelu epilogue. It reads x, w,
  // b and the two f32 gelu constants, and writes y once.
  for (int s = TJ_STAGE_FUSE; s <= TJ_STAGE_MEMPLAN; ++s) {
    const tj_scoreboard_row_t* r = &sb.rows[s];
    CHECK_EQ_INT(1, r->kernels);
    CHECK_EQ_INT(X + W + BIAS + 4 + 4, r->bytes_read);
    CHECK_EQ_INT(A, r->bytes_written);
    CHECK_EQ_INT(X + W + BIAS + 8 + A, r->peak_bytes);
  }
  // About 2x the activation fused, against ~18x eager.
  double fused_ratio = (double)(sb.rows[TJ_STAGE_FUSE].bytes_read +
                                sb.rows[TJ_STAGE_FUSE].bytes_written) /
                       (double)A;
  double eager_ratio =
      (double)(eager->bytes_read + eager->bytes_written) / (double)A;
  CHECK(fused_ratio > 1.5 && fused_ratio < 2.0);
  CHECK(eager_ratio > 10.0);
  CHECK_EQ_INT(0, sb.arena_bytes);  // no intermediate is left
  // Eager keeps all 8 activations; planned, only inputs and the output.
  CHECK(eager->peak_bytes > 4 * sb.rows[TJ_STAGE_MEMPLAN].peak_bytes);
  tj_graph_destroy(g);
}

// Every symbol value changes the bytes, never the kernel counts.
TEST(capstone_scales_with_B) {
  tj_graph_t* g = capstone(TJ_DTYPE_F32);
  for (int64_t B = 1; B <= 4096; B *= 8) {
    tj_scoreboard_t sb;
    CHECK_OK(tj_graph_scoreboard(g, 1, kB, &B, &sb));
    CHECK_EQ_INT(8, sb.rows[TJ_STAGE_EAGER].kernels);
    CHECK_EQ_INT(1, sb.rows[TJ_STAGE_MEMPLAN].kernels);
    CHECK_EQ_INT(B * 4096 * 4, sb.rows[TJ_STAGE_FUSE].bytes_written);
  }
  tj_graph_destroy(g);
}

// softmax and layer_norm: six-ish ops eager, one kernel fused.
TEST(softmax_and_layer_norm_fuse_to_one_kernel) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, "norms", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 512}, "x");
  tj_value_t gamma =
      tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){512}, "gamma");
  tj_graph_output(g, tj_graph_softmax(g, x, -1), "s");
  tj_graph_output(g, tj_graph_layer_norm(g, x, gamma, tj_value_none(), 1e-5),
                  "n");
  CHECK_OK(tj_graph_finalize(g));
  tj_scoreboard_t sb;
  const int64_t b = 64;
  CHECK_OK(tj_graph_scoreboard(g, 1, kB, &b, &sb));
  CHECK(sb.rows[TJ_STAGE_EAGER].kernels >= 12);
  // One kernel per composite (they reduce over the same axis of the same
  // x, so they even share one: sibling fusion).
  CHECK(sb.rows[TJ_STAGE_FUSE].kernels <= 2);
  CHECK(sb.rows[TJ_STAGE_FUSE].bytes_read <= 2 * (b * 512 * 4) + 512 * 4 + 64);
  tj_graph_destroy(g);
}

TEST(bad_symbols) {
  tj_graph_t* g = capstone(TJ_DTYPE_F32);
  tj_scoreboard_t sb;
  const int64_t v = 8, zero = 0;
  const char* const other[] = {"C"};
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "no value for symbol B",
               tj_graph_scoreboard(g, 0, NULL, NULL, &sb));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "has no symbol 'C'",
               tj_graph_scoreboard(g, 1, other, &v, &sb));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "symbol B = 0",
               tj_graph_scoreboard(g, 1, kB, &zero, &sb));
  CHECK_EQ_INT(0, sb.rows[TJ_STAGE_EAGER].kernels);  // zeroed on failure
  tj_graph_destroy(g);
  tj_graph_t* open = NULL;
  CHECK_OK(tj_graph_create(g_ctx, "open", &open));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "not finalized",
               tj_graph_scoreboard(open, 0, NULL, NULL, &sb));
  tj_graph_destroy(open);
  CHECK_STREQ("fuse", tj_stage_name(TJ_STAGE_FUSE));
  CHECK_STREQ("?", tj_stage_name(TJ_STAGE_COUNT_));
}

int main(void) {
  CHECK_OK(tj_context_create(NULL, &g_ctx));
  RUN_TEST(capstone_bf16_eager_vs_fused);
  RUN_TEST(capstone_scales_with_B);
  RUN_TEST(softmax_and_layer_norm_fuse_to_one_kernel);
  RUN_TEST(bad_symbols);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
