// Differential test of the middle end: seeded random graphs (random ops,
// shapes, broadcasts, a symbolic batch dim B, composites, and patterns the
// canonicalizer rewrites) go through the default pipeline with verification
// after every pass; the input graph and the pipeline's graph then run on the
// reference interpreter with the same random inputs and must agree within
// the dtype's tolerance. The fusion groups and memory plan are verified by
// the pipeline (verify_each). A second canonicalize must change nothing.
//
// A second test does the same with generate_large's graphs of 100 to 250
// nodes: kDefaultLargeGraphs seeds in CI, TJ_RANDOM_GRAPH_SEEDS=<count>
// for long local runs.
//
// A failing seed prints its graph and the optimized plan. Reproduce one
// with: passes_random_test SEED [COUNT] (both sizes of graph from that
// seed); TJ_RANDOM_PRINT=1 prints passing seeds too.

#include <float.h>

#include "tests/unit/random_graph.h"

#include "lib/passes/fusion.h"
#include "backends/reference/reference_eval.h"
#include "lib/passes/pass.h"

enum { kDefaultGraphs = 3000, kDefaultLargeGraphs = 300 };

static int g_failed_seeds, g_ill_conditioned;

static void print_failure(uint64_t seed, const tj_graph_t* g,
                          const tj_plan_t* plan, const char* what) {
  ++g_failed_seeds;
  fprintf(stderr, "seed %llu: %s\n", (unsigned long long)seed, what);
  char* text = NULL;
  if (!tj_graph_print(g, &text)) {
    fprintf(stderr, "--- input graph ---\n%s", text);
    tj_context_free_string(tj_graph_context(g), text);
  }
  if (plan && plan->graph && !tj_plan_print(plan, &text)) {
    fprintf(stderr, "--- after the default pipeline ---\n%s", text);
    tj_context_free_string(tj_graph_context(g), text);
  }
}

static int g_compared, g_skipped, g_fused_groups, g_nodes_in, g_overflowed;

typedef tj_graph_t* (*generator_fn)(tj_context_t* ctx, uint64_t seed);

static void check_seed(tj_context_t* ctx, uint64_t seed, generator_fn gen) {
  tj_graph_t* g = gen(ctx, seed);
  if (!g) {
    ++g_skipped;
    return;
  }
  int64_t B = 1 + (int64_t)(seed % 4);
  inputs_t in;
  run_t want, got;
  memset(&want, 0, sizeof(want));
  memset(&got, 0, sizeof(got));
  if (!make_inputs(g, B, seed, false, &in)) {
    ++g_skipped;
    tj_graph_destroy(g);
    return;
  }
  tj_status_t st = run_graph(g, &in, &want);
  if (st) {  // e.g. argmax over an empty axis: the graph itself fails
    tj_status_free(st);
    ++g_skipped;
    run_free(&want);
    inputs_free(&in);
    tj_graph_destroy(g);
    return;
  }
  // A graph whose own outputs move beyond the tolerance when its inputs
  // move by a few ulps (a cancellation feeding rsqrt, a comparison of
  // near-equal values) cannot be checked against rewrites that round
  // differently: it still runs through the pipeline, but is not compared.
  // The same holds for the optimized graph, whose own rounding may put a
  // cancellation in front of a pole (layer_norm's outputs summed to exactly
  // 0 in the reference, to 1e-8 in the decomposition, then rsqrt).
  inputs_t in2;
  bool conditioned = make_inputs(g, B, seed, true, &in2);
  if (conditioned) conditioned = stable(g, &in2, &want);
  tj_graph_t* copy = NULL;
  CHECK_OK(tj_graph_clone(g, &copy));
  tj_plan_t plan;
  tj_plan_initialize(&plan, copy);
  tj_pass_ctx_t pctx;
  tj_pass_ctx_initialize(&pctx, ctx);
  pctx.verify_each = true;
  pctx.evaluate = tj_pass_reference_evaluator;
  pctx.symbol_hints[0] = B;
  st = tj_pipeline_default(&pctx, &plan);
  char what[512];
  if (st) {
    snprintf(what, sizeof(what), "pipeline failed: %s", tj_status_message(st));
    print_failure(seed, g, &plan, what);
    tj_status_free(st);
    CHECK(false);
  } else {
    ++g_compared;
    g_fused_groups += (int)plan.fusion->num_groups;
    g_nodes_in += (int)g->num_nodes;
    st = run_graph(plan.graph, &in, &got);
    if (!st && conditioned) conditioned = stable(plan.graph, &in2, &got);
    if (!conditioned) ++g_ill_conditioned;
    if (st) {
      snprintf(what, sizeof(what), "optimized graph failed to run: %s",
               tj_status_message(st));
      print_failure(seed, g, &plan, what);
      tj_status_free(st);
      CHECK(false);
    } else {
      bool ok =
          !conditioned || outputs_agree(g, &want, &got, what, sizeof(what));
      if (!ok && unstable_under_noise(g, B, seed, &want)) {
        ++g_ill_conditioned;
        ok = true;
      }
      if (!ok && only_overflow(g, &in, plan.graph, NULL, B, seed)) {
        ++g_overflowed;
        ok = true;
      }
      if (!ok) print_failure(seed, g, &plan, what);
      CHECK(ok);
      if (ok && getenv("TJ_RANDOM_PRINT")) {  // to look at what passes do
        print_failure(seed, g, &plan, "passed");
        --g_failed_seeds;
      }
    }
    // A second canonicalization finds nothing to do.
    tj_graph_t* again = NULL;
    if (!tj_graph_clone(plan.graph, &again)) {
      tj_plan_t p2;
      tj_plan_initialize(&p2, again);
      uint32_t before = again->num_nodes;
      CHECK_OK(tj_pipeline_run_one(&pctx, &p2, &tj_pass_info_canonicalize));
      if (p2.graph != again || p2.graph->num_nodes != before) {
        print_failure(seed, g, &plan, "canonicalize is not idempotent");
        CHECK(false);
      }
      tj_plan_deinitialize(&p2);
    }
  }
  tj_plan_deinitialize(&plan);
  inputs_free(&in2);
  run_free(&want);
  run_free(&got);
  inputs_free(&in);
  tj_graph_destroy(g);
}

static uint64_t g_first_seed = 1;
static uint64_t g_count = kDefaultGraphs;

TEST(random_graphs_match_the_reference) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  for (uint64_t seed = g_first_seed; seed < g_first_seed + g_count; ++seed) {
    check_seed(ctx, seed, generate);
  }
  printf(
      "# %d graphs compared (%d skipped, %d ill-conditioned run but not "
      "compared, %d differ only by an f32 overflow), %d failed; %d nodes in, "
      "%d groups out\n",
      g_compared, g_skipped, g_ill_conditioned, g_overflowed, g_failed_seeds,
      g_nodes_in, g_fused_groups);
  CHECK(g_compared >= (int)(g_count * 8 / 10));
  tj_context_destroy(ctx);
}

// random_graph.h's generate_large: 100 to 250 nodes, many multi-use
// values, so that fusion and memplan see long chains, many consumers and
// kernels near fuse_max_nodes.
static uint64_t g_large_count = kDefaultLargeGraphs;

TEST(large_random_graphs_match_the_reference) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  g_compared = g_skipped = g_ill_conditioned = g_failed_seeds = 0;
  g_fused_groups = g_nodes_in = g_overflowed = 0;
  for (uint64_t seed = g_first_seed; seed < g_first_seed + g_large_count;
       ++seed) {
    check_seed(ctx, seed, generate_large);
  }
  printf(
      "# %d large graphs compared (%d skipped, %d ill-conditioned, %d differ "
      "only by an overflow), %d failed; %d nodes in, %d groups out\n",
      g_compared, g_skipped, g_ill_conditioned, g_overflowed, g_failed_seeds,
      g_nodes_in, g_fused_groups);
  CHECK(g_compared >= (int)(g_large_count * 6 / 10));
  tj_context_destroy(ctx);
}

int main(int argc, char** argv) {
  const char* env = getenv("TJ_RANDOM_GRAPH_SEEDS");
  if (env && *env) g_large_count = strtoull(env, NULL, 10);
  if (argc > 1) {
    g_first_seed = strtoull(argv[1], NULL, 10);
    g_count = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    g_large_count = g_count;
  }
  RUN_TEST(random_graphs_match_the_reference);
  RUN_TEST(large_random_graphs_match_the_reference);
  TEST_MAIN_END();
}
