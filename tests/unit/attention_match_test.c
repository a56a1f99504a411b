// attention_match (lib/passes/attention_match.c) on a hand-built GPT-style
// pre-norm transformer block (layer_norm, one QKV linear, heads by reshape
// and transpose, scores q @ k^T scaled, masked, softmax, @ v, heads merged,
// output projection, residual, GELU MLP, residual), in two spellings:
//   causal:  * 0.25, where(iota row >= iota col, s, -inf)   (Python builder)
//   padding: / 4, + an additive [B, 1, 1, T] mask           (ONNX importer)
// Checks: the default pipeline's graph right after attention_match (and
// dce) holds exactly one attention node and no softmax; the block compiled for
// x86 at every ISA tier (no graph break, symbolic B and T bound to two values)
// equals the reference interpreter on the written-out graph within 1e-4
// absolute + relative; a refused spelling (finite fill) keeps its softmax.

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/reference/reference_eval.h"
#include "lib/ir.h"
#include "lib/passes/pass.h"
#include "tensorjit/tj_executable.h"
#include "tensorjit/tj_graph.h"
#include "tensorjit/tj_tensor.h"
#include "tests/unit/test.h"

enum { kMaxCtx = 3, kC = 64, kH = 4, kDh = 16, kF = 128 };
static tj_context_t* g_ctx[kMaxCtx];
static const char* g_isa[kMaxCtx];
static int g_num_ctx;

typedef enum spelling_e { S_CAUSAL, S_PADDING, S_FINITE_FILL } spelling_t;

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float uniform(double lo, double hi) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)(lo + (hi - lo) * (double)(g_rng >> 11) / 9007199254740992.0);
}

enum { kNumW = 7 };
// wqkv, bqkv, wo, w1, w2, b1 and the [C] bias of wo and w2.
static float* g_w[kNumW];
static const int64_t kWd[kNumW][2] = {
    {kC, 3 * kC}, {3 * kC, 0}, {kC, kC}, {kC, kF}, {kF, kC}, {kF, 0}, {kC, 0}};

static tj_value_t weight(tj_graph_t* g, int i) {
  int32_t rank = kWd[i][1] ? 2 : 1;
  size_t n = (size_t)kWd[i][0] * (size_t)(kWd[i][1] ? kWd[i][1] : 1);
  return tj_graph_constant(g, TJ_DTYPE_F32, rank, kWd[i], g_w[i],
                           n * sizeof(float));
}

static tj_value_t scalar(tj_graph_t* g, float v) {
  return tj_graph_constant(g, TJ_DTYPE_F32, 0, NULL, &v, sizeof(v));
}

// The block on x [B, T, C]; the padding spelling adds input "mask".
static tj_graph_t* build(tj_context_t* ctx, spelling_t sp) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(ctx, "block", &g)) return NULL;
  int64_t B = tj_graph_symbol(g, "B"), T = tj_graph_symbol(g, "T");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){B, T, kC}, "x");
  tj_value_t h =
      tj_graph_layer_norm(g, x, tj_value_none(), tj_value_none(), 1e-5);
  tj_value_t qkv = tj_graph_linear(g, h, weight(g, 0), weight(g, 1));
  qkv = tj_graph_reshape(g, qkv, 5, (int64_t[]){B, T, 3, kH, kDh});
  qkv = tj_graph_transpose(g, qkv, (int32_t[]){2, 0, 3, 1, 4});
  tj_value_t part[3];
  for (int i = 0; i < 3; ++i) {
    tj_value_t s = tj_graph_slice(
        g, qkv, (int64_t[]){i, 0, 0, 0, 0},
        (int64_t[]){i + 1, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX},
        (int64_t[]){1, 1, 1, 1, 1});
    part[i] = tj_graph_reshape(g, s, 4, (int64_t[]){B, kH, T, kDh});
  }
  tj_value_t kt = tj_graph_transpose(g, part[1], (int32_t[]){0, 1, 3, 2});
  tj_value_t s = tj_graph_matmul(g, part[0], kt);
  tj_value_t ninf = scalar(g, -INFINITY);
  if (sp == S_PADDING) {
    s = tj_graph_div(g, s, scalar(g, 4.0f));
    tj_value_t m =
        tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){B, 1, 1, T}, "mask");
    s = tj_graph_add(g, s, m);
  } else {
    s = tj_graph_mul(g, s, scalar(g, 0.25f));
    tj_value_t row = tj_graph_iota(g, TJ_DTYPE_I64, 2, (int64_t[]){T, T}, 0);
    tj_value_t col = tj_graph_iota(g, TJ_DTYPE_I64, 2, (int64_t[]){T, T}, 1);
    tj_value_t fill = sp == S_CAUSAL ? ninf : scalar(g, -3.0e38f);
    s = tj_graph_where(g, tj_graph_ge(g, row, col), s, fill);
  }
  tj_value_t p = tj_graph_softmax(g, s, -1);
  tj_value_t o = tj_graph_matmul(g, p, part[2]);
  o = tj_graph_transpose(g, o, (int32_t[]){0, 2, 1, 3});
  o = tj_graph_reshape(g, o, 3, (int64_t[]){B, T, kC});
  x = tj_graph_add(g, x, tj_graph_linear(g, o, weight(g, 2), weight(g, 6)));
  h = tj_graph_layer_norm(g, x, tj_value_none(), tj_value_none(), 1e-5);
  h = tj_graph_gelu(g, tj_graph_linear(g, h, weight(g, 3), weight(g, 5)), true);
  x = tj_graph_add(g, x, tj_graph_linear(g, h, weight(g, 4), weight(g, 6)));
  tj_graph_output(g, x, "y");
  tj_status_t st = tj_graph_finalize(g);
  CHECK_OK(st);
  if (st) {
    tj_graph_destroy(g);
    return NULL;
  }
  return g;
}

// Counts |op| in the default pipeline's graph right after attention_match
// (and dce), or after the decompose stage.
static int count_after(tj_graph_t* g, bool matched_stage, tj_op_t op) {
  tj_graph_t* copy = NULL;
  CHECK_OK(tj_graph_clone(g, &copy));
  if (!copy) return -1;
  tj_plan_t plan;
  tj_plan_initialize(&plan, copy);
  tj_pass_ctx_t ctx;
  tj_pass_ctx_initialize(&ctx, tj_graph_context(g));
  ctx.verify_each = true;
  ctx.evaluate = tj_pass_reference_evaluator;
  if (matched_stage) {
    CHECK_OK(tj_pipeline_default_until(&ctx, &plan, "canonicalize"));
    CHECK_OK(tj_pass_attention_match(&ctx, &plan));
    CHECK_OK(tj_pass_dce(&ctx, &plan));
  } else {
    CHECK_OK(tj_pipeline_default_until(&ctx, &plan, "decompose"));
  }
  int n = 0;
  for (uint32_t i = 0; i < plan.graph->num_nodes; ++i)
    n += plan.graph->nodes[i].op == op;
  tj_plan_deinitialize(&plan);
  return n;
}

static bool close_enough(const char* what, int64_t n, const float* want,
                         const float* got) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!(fabsf(got[i] - want[i]) <= 1e-4f + 1e-4f * fabsf(want[i]))) {
      if (bad++ < 3)
        fprintf(stderr, "%s: [%lld] got %.9g want %.9g\n", what, (long long)i,
                got[i], want[i]);
    }
  }
  return bad == 0;
}

static void run_block(spelling_t sp, const char* name) {
  tj_graph_t* g0 = build(g_ctx[0], sp);
  CHECK(g0 != NULL);
  if (!g0) return;
  const int want_att = sp == S_FINITE_FILL ? 0 : 1;
  CHECK_EQ_INT(want_att, count_after(g0, true, TJ_OP_ATTENTION));
  CHECK_EQ_INT(1 - want_att, count_after(g0, true, TJ_OP_SOFTMAX));
  static const int64_t kB[2] = {2, 3}, kT[2] = {13, 5};
  for (int run = 0; run < 2; ++run) {
    const int64_t B = kB[run], T = kT[run], n = B * T * kC;
    float* x = malloc((size_t)n * sizeof(float));
    float* mask = malloc((size_t)(B * T) * sizeof(float));
    float* want = malloc((size_t)n * sizeof(float));
    float* got = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; ++i) x[i] = uniform(-1, 1);
    for (int64_t i = 0; i < B * T; ++i)
      mask[i] = (i % T) >= T - 2 && (i % T) > 0 ? -INFINITY : uniform(-1, 0);
    tj_tensor_t ins[2] = {
        tj_tensor_make(x, TJ_DTYPE_F32, 3, (int64_t[]){B, T, kC}),
        tj_tensor_make(mask, TJ_DTYPE_F32, 4, (int64_t[]){B, 1, 1, T})};
    const int32_t nin = sp == S_PADDING ? 2 : 1;
    tj_tensor_t out = tj_tensor_make(want, TJ_DTYPE_F32, 3, ins[0].shape);
    CHECK_OK(tj_reference_run(g0, ins, nin, &out, 1));
    for (int ci = 0; ci < g_num_ctx; ++ci) {
      tj_graph_t* g = ci == 0 ? g0 : build(g_ctx[ci], sp);
      if (!g) continue;
      tj_compile_options_t opts;
      tj_compile_options_initialize(&opts);
      opts.verify_each = true;
      opts.cache_dir = "";
      tj_executable_t* exe = NULL;
      CHECK_OK(tj_compile(g, &opts, &exe));
      if (exe) {
        memset(got, 0, (size_t)n * sizeof(float));
        out = tj_tensor_make(got, TJ_DTYPE_F32, 3, ins[0].shape);
        CHECK_OK(tj_executable_run(exe, ins, nin, &out, 1));
        tj_executable_stats_t stats;
        memset(&stats, 0, sizeof(stats));
        tj_executable_stats(exe, &stats);
        CHECK_EQ_INT(0, stats.num_graph_breaks);
        char what[96];
        snprintf(what, sizeof(what), "%s on x86 %s, B=%lld T=%lld", name,
                 g_isa[ci], (long long)B, (long long)T);
        CHECK(close_enough(what, n, want, got));
        tj_executable_release(exe);
      }
      if (g != g0) tj_graph_destroy(g);
    }
    free(got);
    free(want);
    free(mask);
    free(x);
  }
  tj_graph_destroy(g0);
}

TEST(causal_block) { run_block(S_CAUSAL, "causal"); }
TEST(padding_block) { run_block(S_PADDING, "padding"); }
TEST(finite_fill_block_is_refused) { run_block(S_FINITE_FILL, "finite fill"); }

int main(void) {
  for (int i = 0; i < kNumW; ++i) {
    size_t n = (size_t)kWd[i][0] * (size_t)(kWd[i][1] ? kWd[i][1] : 1);
    g_w[i] = malloc(n * sizeof(float));
    double s = kWd[i][1] ? 1.0 / sqrt((double)kWd[i][0]) : 0.1;
    for (size_t e = 0; e < n; ++e) g_w[i][e] = uniform(-s, s);
  }
  g_num_ctx = tj_test_tier_contexts(g_ctx, g_isa);
  RUN_TEST(causal_block);
  RUN_TEST(padding_block);
  RUN_TEST(finite_fill_block_is_refused);
  for (int i = 0; i < g_num_ctx; ++i) tj_context_destroy(g_ctx[i]);
  for (int i = 0; i < kNumW; ++i) free(g_w[i]);
  TEST_MAIN_END();
}
