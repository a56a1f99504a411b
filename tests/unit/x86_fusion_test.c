// Fusion, memory planning and the x86 lowering of fused groups, on graphs
// that once went wrong: each is the smallest graph found for one root
// cause, compiled for x86 and compared with the reference interpreter
// (f32: 1e-4 relative and absolute, random_graph.h's close_enough). The
// graphs these were shrunk from (GridSample from the ONNX node tests) are
// tests/python/test_fusion_repros.py.

#include "tests/unit/random_graph.h"

#include "lib/passes/fusion.h"
#include "lib/passes/pass.h"

static tj_context_t* g_ctx;

// Finalizes |g|, runs it on x86 and on the reference with random inputs
// (|index_input|, if not negative, gets in-range indices for a gather from
// a table of |index_range| rows) and checks that they agree.
static void check_x86_matches_reference(tj_graph_t* g, int32_t index_input,
                                        int64_t index_range) {
  CHECK_OK(tj_graph_finalize(g));
  inputs_t in;
  CHECK(make_inputs_ex(g, 1, 7, false, false, &in));
  if (index_input >= 0) {
    int64_t n = 1;
    for (int32_t d = 0; d < in.t[index_input].rank; ++d) {
      n *= in.shape[index_input][d];
    }
    for (int64_t k = 0; k < n; ++k) {
      ((int64_t*)in.data[index_input])[k] = (k * 5 + 3) % index_range;
    }
  }
  run_t want, got;
  CHECK_OK(run_graph(g, &in, &want));
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.verify_each = true;
  opts.cache_dir = "";
  opts.x86.num_threads = 1;
  tj_status_t st = run_compiled(g, &in, &opts, &got);
  CHECK_OK(st);
  char what[256] = "";
  if (!st) {
    bool ok = outputs_agree(g, &want, &got, what, sizeof(what));
    if (!ok) fprintf(stderr, "  %s\n", what);
    CHECK(ok);
  }
  run_free(&want);
  run_free(&got);
  inputs_free(&in);
}

// A pointwise group with two outputs, the first written in place of an
// input the second still reads: b = exp(y) + t is computed after a =
// exp(y) is stored over t (memplan gives a the slot of t, which this group
// reads last). The lowering stored each output as soon as it had it, so b
// read a's value instead of t's: kir/lower.c now computes every
// output before the first store.
TEST(in_place_output_is_stored_after_every_load) {
  tj_graph_t* g;
  CHECK_OK(tj_graph_create(g_ctx, "store_order", &g));
  tj_value_t table = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){6, 4}, "c");
  tj_value_t index = tj_graph_input(g, TJ_DTYPE_I64, 1, (int64_t[]){4}, "i");
  tj_value_t y = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){4, 4}, "y");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){4, 4}, "w");
  tj_value_t t = tj_graph_gather(g, table, index, 0);
  tj_value_t a = tj_graph_exp(g, y);
  tj_value_t b = tj_graph_add(g, a, t);
  // Matmuls read a and b from memory: both are outputs of their group.
  tj_graph_output(g, tj_graph_matmul(g, a, w), "p");
  tj_graph_output(g, tj_graph_matmul(g, b, w), "q");
  check_x86_matches_reference(g, 1, 6);
  tj_graph_destroy(g);
}

// The same store order in a matmul group: the epilogue's two outputs, the
// first in place of the residual the second reads.
TEST(in_place_matmul_epilogue_is_stored_after_every_load) {
  tj_graph_t* g;
  CHECK_OK(tj_graph_create(g_ctx, "epilogue_order", &g));
  tj_value_t table = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){6, 8}, "c");
  tj_value_t index = tj_graph_input(g, TJ_DTYPE_I64, 1, (int64_t[]){8}, "i");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){8, 8}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){8, 8}, "w");
  tj_value_t r = tj_graph_gather(g, table, index, 0);
  tj_value_t m = tj_graph_matmul(g, x, w);
  tj_value_t a = tj_graph_exp(g, tj_graph_tanh(g, m));
  tj_value_t b = tj_graph_add(g, a, r);
  tj_graph_output(g, tj_graph_matmul(g, a, w), "p");
  tj_graph_output(g, tj_graph_matmul(g, b, w), "q");
  check_x86_matches_reference(g, 1, 6);
  tj_graph_destroy(g);
}

// transpose(neg(t)): neg reads t elementwise, but the transpose makes each
// point of the output read t at another index, so the output must not take
// t's memory in place. lib/passes/memplan.c looked only at t's readers and
// gave it the slot; the lowering then refused the group (INTERNAL "written
// in place of ... but the kernel reads ... at another index").
TEST(no_in_place_through_a_movement_op) {
  tj_graph_t* g;
  CHECK_OK(tj_graph_create(g_ctx, "in_place_transpose", &g));
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){8, 8, 3}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){8, 8}, "w");
  tj_value_t t = tj_graph_sum(g, x, 1, (int32_t[]){2}, false);
  tj_value_t c = tj_graph_transpose(g, tj_graph_neg(g, t), (int32_t[]){1, 0});
  tj_graph_output(g, tj_graph_matmul(g, c, w), "y");
  check_x86_matches_reference(g, -1, 0);
  tj_graph_destroy(g);
}

// A chain of 200 cheap elementwise ops: phase 1 of the fuser inlined all
// of them into the one kernel of the output, which its own classify() then
// rejected (INTERNAL "not a legal group: more nodes than fuse_max_nodes").
// Now a node that would grow a kernel past the limit is materialized.
TEST(long_chain_respects_fuse_max_nodes) {
  tj_graph_t* g;
  CHECK_OK(tj_graph_create(g_ctx, "chain", &g));
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){37}, "x");
  float half = 0.5f;
  tj_value_t c =
      tj_graph_constant(g, TJ_DTYPE_F32, 0, NULL, &half, sizeof(half));
  tj_value_t v = x;
  for (int i = 0; i < 200; ++i) {
    v = i % 2 ? tj_graph_add(g, v, x) : tj_graph_mul(g, v, c);
  }
  tj_graph_output(g, v, "y");
  check_x86_matches_reference(g, -1, 0);
  // Every group the fuser makes is within the limit, also a small one.
  tj_graph_t* copy = NULL;
  CHECK_OK(tj_graph_clone(g, &copy));
  tj_plan_t plan;
  tj_plan_initialize(&plan, copy);
  tj_pass_ctx_t pctx;
  tj_pass_ctx_initialize(&pctx, g_ctx);
  pctx.verify_each = true;
  pctx.fuse_max_nodes = 16;
  CHECK_OK(tj_pipeline_default(&pctx, &plan));
  if (plan.fusion) {
    CHECK(plan.fusion->num_groups >= 200 / 16);
    for (uint32_t k = 0; k < plan.fusion->num_groups; ++k) {
      CHECK(plan.fusion->groups[k].num_nodes <= 16);
    }
  }
  tj_plan_deinitialize(&plan);
  tj_graph_destroy(g);
}

int main(void) {
  CHECK_OK(tj_context_create(NULL, &g_ctx));
  RUN_TEST(in_place_output_is_stored_after_every_load);
  RUN_TEST(in_place_matmul_epilogue_is_stored_after_every_load);
  RUN_TEST(no_in_place_through_a_movement_op);
  RUN_TEST(long_chain_respects_fuse_max_nodes);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
