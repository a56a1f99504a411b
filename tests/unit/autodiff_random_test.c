// Differential test of autodiff and partitioning on the middle end's random
// graphs (tests/unit/random_graph.h): each graph is differentiated (every
// float output, with random tangents, with respect to every float input)
// and the joint graph run on the reference interpreter is the oracle. Two
// optimized routes must agree with it within the dtype's tolerance:
//   1. the joint graph through the default pipeline (canonicalize, CSE,
//      decompose, fuse, memory plan, verified after every pass);
//   2. the partitioned forward and backward graphs, each through the
//      default pipeline, the backward fed by name from the forward.
// Graphs whose own gradients move beyond the tolerance when the inputs
// move by a few ulps are run but not compared (as passes_random_test).
//
// Reproduce a seed with: autodiff_random_test SEED [COUNT].

#include "tests/unit/random_graph.h"

#include "lib/passes/fusion.h"
#include "backends/reference/reference_eval.h"
#include "lib/passes/pass.h"

enum { kDefaultGraphs = 400 };

static int g_compared, g_skipped, g_ill_conditioned, g_failed, g_no_grad;
static int64_t g_grad_nodes, g_saved_values;

static bool agree(const tj_graph_t* g, const run_t* want, const run_t* got,
                  int32_t first, int32_t count, int32_t got_first, char* what,
                  size_t size) {
  for (int32_t o = 0; o < count; ++o) {
    int32_t w = first + o, h = got_first + o;
    tj_dtype_t working = working_dtype(g, want->dtype[w]);
    int64_t n = (int64_t)(want->bytes[w] / tj_dtype_size(want->dtype[w]));
    if (want->bytes[w] != got->bytes[h]) {
      if (what) snprintf(what, size, "output %d: sizes differ", w);
      return false;
    }
    for (int64_t k = 0; k < n; ++k) {
      double a = tj_load_f64(want->dtype[w], want->data[w], k);
      double b = tj_load_f64(got->dtype[h], got->data[h], k);
      // Gradients may come out as +0 on one route and -0 on the other (a
      // sum of zeros in another order): the sign of a zero gradient means
      // nothing.
      if (a == 0 && b == 0) continue;
      if (!close_enough(working, a, b)) {
        if (what)
          snprintf(what, size, "output %d element %lld: joint %.9g, got %.9g",
                   w, (long long)k, a, b);
        return false;
      }
    }
  }
  return true;
}

static void report(uint64_t seed, const tj_graph_t* g, const tj_graph_t* joint,
                   const char* what) {
  ++g_failed;
  fprintf(stderr, "seed %llu: %s\n", (unsigned long long)seed, what);
  char* text = NULL;
  if (!tj_graph_print(g, &text)) {
    fprintf(stderr, "--- graph ---\n%s", text);
    tj_context_free_string(tj_graph_context(g), text);
  }
  if (joint && !tj_graph_print(joint, &text)) {
    fprintf(stderr, "--- joint ---\n%s", text);
    tj_context_free_string(tj_graph_context(g), text);
  }
}

// |*graph| through the default pipeline (replaced by the optimized graph).
static tj_status_t optimize(tj_graph_t** graph, int64_t B) {
  tj_pass_ctx_t ctx;
  tj_pass_ctx_initialize(&ctx, tj_graph_context(*graph));
  ctx.verify_each = true;
  ctx.evaluate = tj_pass_reference_evaluator;
  ctx.symbol_hints[0] = B;
  tj_plan_t plan;
  tj_plan_initialize(&plan, *graph);
  tj_status_t st = tj_pipeline_default(&ctx, &plan);
  *graph = plan.graph;
  plan.graph = NULL;
  tj_plan_deinitialize(&plan);
  return st;
}

// The inputs of |bwd| by name, from |fwd|'s inputs and outputs and the
// joint graph's tangents; false if one has no source.
static bool wire(const tj_graph_t* fwd, const tj_graph_t* bwd,
                 const tj_graph_t* joint, uint32_t num_primals,
                 const inputs_t* in, const run_t* fout, inputs_t* bin) {
  memset(bin, 0, sizeof(*bin));
  bin->count = tj_graph_num_inputs(bwd);
  for (int32_t i = 0; i < bin->count; ++i) {
    const char* name = tj_graph_input_name(bwd, i);
    bool found = false;
    for (int32_t k = 0; k < tj_graph_num_inputs(fwd) && !found; ++k) {
      if (strcmp(name, tj_graph_input_name(fwd, k)) == 0) {
        bin->t[i] = in->t[k];
        found = true;
      }
    }
    for (int32_t k = 0; k < tj_graph_num_outputs(fwd) && !found; ++k) {
      if (strcmp(name, tj_graph_output_name(fwd, k)) == 0) {
        bin->t[i] = tj_tensor_make(fout->data[k], fout->dtype[k], fout->rank[k],
                                   fout->shape[k]);
        found = true;
      }
    }
    for (int32_t k = (int32_t)num_primals;
         k < tj_graph_num_inputs(joint) && !found; ++k) {
      if (strcmp(name, tj_graph_input_name(joint, k)) == 0) {
        bin->t[i] = in->t[k];
        found = true;
      }
    }
    if (!found) return false;
  }
  return true;
}

static void check_seed(tj_context_t* ctx, uint64_t seed) {
  tj_graph_t* g = generate(ctx, seed);
  if (!g) {
    ++g_skipped;
    return;
  }
  char what[512];
  tj_graph_t* joint = NULL;
  tj_status_t st = tj_graph_grad(g, 0, NULL, 0, NULL, &joint);
  if (st) {
    // Only "nothing to differentiate" is an acceptable refusal.
    if (!strstr(tj_status_message(st), "no float")) {
      snprintf(what, sizeof(what), "tj_graph_grad failed: %s",
               tj_status_message(st));
      report(seed, g, NULL, what);
      CHECK(false);
    } else {
      ++g_no_grad;
    }
    tj_status_free(st);
    tj_graph_destroy(g);
    return;
  }
  g_grad_nodes += joint->num_nodes - g->num_nodes;
  int64_t B = 1 + (int64_t)(seed % 4);
  uint32_t np = g->num_inputs, nf = g->num_outputs;
  int32_t ng = (int32_t)joint->num_outputs - (int32_t)nf;
  inputs_t in, in2;
  run_t want, want2, got, fout, bout;
  memset(&want, 0, sizeof(want));
  memset(&want2, 0, sizeof(want2));
  memset(&got, 0, sizeof(got));
  memset(&fout, 0, sizeof(fout));
  memset(&bout, 0, sizeof(bout));
  memset(&in2, 0, sizeof(in2));
  tj_graph_t* fwd = NULL;
  tj_graph_t* bwd = NULL;
  tj_graph_t* opt = NULL;
  // A graph that cannot run on its own inputs (a symbol no input binds, an
  // impossible guard) is skipped, even if its joint graph can (a tangent
  // may bind the symbol).
  inputs_t fin;
  if (make_inputs_ex(joint, B, seed, false, false, &in)) {
    fin = in;  // a view: the primal inputs only
    fin.count = (int32_t)np;
    st = run_graph(g, &fin, &want);
    run_free(&want);
    if (!st) st = run_graph(joint, &in, &want);
  } else {
    st = tj_internal("no inputs");
  }
  if (st) {
    tj_status_free(st);
    ++g_skipped;
    goto done;
  }
  // Conditioning: the joint graph against itself on perturbed inputs.
  bool conditioned = make_inputs_ex(joint, B, seed, true, false, &in2);
  if (conditioned) {
    st = run_graph(joint, &in2, &want2);
    conditioned = !st && agree(joint, &want, &want2, 0,
                               (int32_t)joint->num_outputs, 0, NULL, 0);
    tj_status_free(st);
  }
  if (!conditioned) ++g_ill_conditioned;

  // Route 1: the joint graph optimized.
  st = tj_graph_clone(joint, &opt);
  if (!st) st = optimize(&opt, B);
  if (!st) st = run_graph(opt, &in, &got);
  if (st) {
    snprintf(what, sizeof(what), "optimized joint graph failed: %s",
             tj_status_message(st));
    tj_status_free(st);
    report(seed, g, joint, what);
    CHECK(false);
    goto done;
  }
  if (conditioned && !agree(joint, &want, &got, 0, (int32_t)joint->num_outputs,
                            0, what, sizeof(what))) {
    report(seed, g, joint, what);
    CHECK(false);
  }

  // Route 2: forward and backward, each optimized.
  tj_partition_options_t options;
  tj_partition_options_initialize(&options);
  const char* names[1] = {"B"};
  options.num_symbols = 1;
  options.symbol_names = names;
  options.symbol_values = &B;
  tj_partition_stats_t stats;
  st = tj_graph_partition(joint, (int32_t)np, (int32_t)nf, &options, &fwd, &bwd,
                          &stats);
  if (!st) st = optimize(&fwd, B);
  if (!st) st = optimize(&bwd, B);
  if (!st) st = run_graph(fwd, &fin, &fout);
  inputs_t bin;
  if (!st && !wire(fwd, bwd, joint, np, &in, &fout, &bin)) {
    st = tj_internal("a backward input has no source");
  }
  if (!st) st = run_graph(bwd, &bin, &bout);
  if (st) {
    snprintf(what, sizeof(what), "partition route failed: %s",
             tj_status_message(st));
    tj_status_free(st);
    report(seed, g, joint, what);
    CHECK(false);
    goto done;
  }
  g_saved_values += stats.num_saved;
  ++g_compared;
  if (conditioned &&
      (!agree(joint, &want, &fout, 0, (int32_t)nf, 0, what, sizeof(what)) ||
       !agree(joint, &want, &bout, (int32_t)nf, ng, 0, what, sizeof(what)))) {
    report(seed, g, joint, what);
    CHECK(false);
  }
done:
  run_free(&want);
  run_free(&want2);
  run_free(&got);
  run_free(&fout);
  run_free(&bout);
  inputs_free(&in);
  inputs_free(&in2);
  tj_graph_destroy(opt);
  tj_graph_destroy(fwd);
  tj_graph_destroy(bwd);
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
}

static uint64_t g_first_seed = 1;
static uint64_t g_count = kDefaultGraphs;

TEST(random_graph_gradients_agree_optimized_and_unoptimized) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  for (uint64_t seed = g_first_seed; seed < g_first_seed + g_count; ++seed) {
    check_seed(ctx, seed);
  }
  printf(
      "# %d graphs compared (%d without float inputs or outputs, %d "
      "skipped, %d ill-conditioned run but not compared), %d failed; "
      "%lld backward nodes, %lld saved values\n",
      g_compared, g_no_grad, g_skipped, g_ill_conditioned, g_failed,
      (long long)g_grad_nodes, (long long)g_saved_values);
  CHECK(g_compared >= (int)(g_count * 7 / 10));
  tj_context_destroy(ctx);
}

int main(int argc, char** argv) {
  if (argc > 1) {
    g_first_seed = strtoull(argv[1], NULL, 10);
    g_count = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
  }
  RUN_TEST(random_graph_gradients_agree_optimized_and_unoptimized);
  TEST_MAIN_END();
}
