// Every allocation the middle end makes may fail: the default pipeline (and
// the scoreboard, which runs it per stage) must then return OUT_OF_MEMORY
// and leak nothing, for every N of "fail the Nth allocation" until it
// succeeds (Lua's memerr.lua).

#include <string.h>

#include "tests/unit/test.h"

#include "backends/reference/reference_eval.h"
#include "lib/passes/pass.h"

// A graph that exercises every pass: composites, foldable constants,
// duplicates, dead code, a matmul epilogue, reductions, views, in place.
static const char kText[] =
    "func @mix[B](%x: bf16[B,16], %w: bf16[16,16], %b: bf16[16], "
    "%z: f32[B,16], %v: f32[16,16]) {\n"
    "  %h = linear %x, %w, %b : bf16[B,16]\n"
    "  %g = gelu %h {approximate} : bf16[B,16]\n"
    "  %s = softmax %g {axis=1} : bf16[B,16]\n"
    "  %c1 = constant [1, 2] : f32[2]\n"
    "  %c2 = exp %c1 : f32[2]\n"
    "  %dead = neg %z : f32[B,16]\n"
    "  %n = layer_norm %z, none, none {eps=1e-05} : f32[B,16]\n"
    "  %m1 = matmul %n, %v : f32[B,16]\n"
    "  %m2 = matmul %z, %v : f32[B,16]\n"
    "  %a = add %m1, %m2 : f32[B,16]\n"
    "  %r = reshape %a : f32[B*16]\n"
    "  %o = sum %a {axes=[1]} : f32[B]\n"
    "  return %s as \"s\", %o as \"o\", %c2 as \"c\", %r as \"r\"\n"
    "}\n";

// conv, pools and conv_transpose: their decompositions allocate constants
// (avg_pool's divisor, conv_transpose's 0/1 matrices) and scratch.
static const char kConvText[] =
    "func @cnn[B](%x: f32[B,2,5,5], %w: f32[4,2,3,3], %b: f32[4], "
    "%t: f32[4,2,2,2]) {\n"
    "  %c = conv %x, %w, %b {low=[1,1] high=[1,1]} : f32[B,4,5,5]\n"
    "  %a = avg_pool %c {kernel=[3,3] strides=[2,2] low=[1,1] high=[0,0]} "
    ": f32[B,4,2,2]\n"
    "  %m = max_pool %c {kernel=[2,2] strides=[2,2] ceil_mode} : "
    "f32[B,4,3,3]\n"
    "  %u = conv_transpose %a, %t, none {strides=[2,2]} : f32[B,2,4,4]\n"
    "  return %u as \"u\", %m as \"m\"\n"
    "}\n";
// attn (issue 14): a written-out causal attention that attention_match
// rewrites, and the op with grouped-query heads and a bool mask, both
// decomposed again.
static const char kAttentionText[] =
    "func @attn[B, T](%q: f32[B,4,T,8], %k: f32[B,4,T,8], %v: f32[B,4,T,8], "
    "%kk: f32[B,2,T,8], %m: bool[T,T]) {\n"
    "  %kt = transpose %k {perm=[0,1,3,2]} : f32[B,4,8,T]\n"
    "  %s = matmul %q, %kt : f32[B,4,T,T]\n"
    "  %c = constant [0.25] : f32[]\n"
    "  %ss = mul %s, %c : f32[B,4,T,T]\n"
    "  %r = iota {axis=0} : i64[T,T]\n"
    "  %cc = iota {axis=1} : i64[T,T]\n"
    "  %keep = ge %r, %cc : bool[T,T]\n"
    "  %ninf = constant [-inf] : f32[]\n"
    "  %w = where %keep, %ss, %ninf : f32[B,4,T,T]\n"
    "  %p = softmax %w {axis=3} : f32[B,4,T,T]\n"
    "  %y = matmul %p, %v : f32[B,4,T,8]\n"
    "  %z = attention %q, %kk, %kk, %m {scale=0.5 causal} : f32[B,4,T,8]\n"
    "  return %y as \"y\", %z as \"z\"\n"
    "}\n";
static const char* g_text = kText;

static tj_status_t run_pipeline(tj_graph_t* g) {
  tj_graph_t* copy = NULL;
  TJ_RETURN_IF_ERROR(tj_graph_clone(g, &copy));
  tj_plan_t plan;
  tj_plan_initialize(&plan, copy);
  tj_pass_ctx_t ctx;
  tj_pass_ctx_initialize(&ctx, tj_graph_context(g));
  ctx.verify_each = true;
  ctx.evaluate = tj_pass_reference_evaluator;
  tj_status_t status = tj_pipeline_default(&ctx, &plan);
  char* text = NULL;
  if (!status) status = tj_plan_print(&plan, &text);
  tj_context_free_string(tj_graph_context(g), text);
  tj_plan_deinitialize(&plan);
  return status;
}

static tj_status_t run_scoreboard(tj_graph_t* g) {
  const char* names[] = {"B"};
  const int64_t values[] = {3};
  tj_scoreboard_t sb;
  return tj_graph_scoreboard(g, 1, names, values, &sb);
}

static void sweep(tj_status_t (*fn)(tj_graph_t*), const char* what) {
  long succeeded_at = -1;
  for (long n = 0; n < 100000 && succeeded_at < 0; ++n) {
    tj_test_allocator_t t;
    tj_test_allocator_initialize(&t, -1);
    tj_context_options_t options;
    tj_context_options_initialize(&options);
    options.allocator = tj_test_allocator_get(&t);
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_context_create(&options, &ctx));
    tj_graph_t* g = NULL;
    CHECK_OK(tj_graph_parse(ctx, g_text, strlen(g_text), "mix.tj", &g));
    if (!g) {
      tj_context_destroy(ctx);
      return;
    }
    t.fail_at = t.allocations + n;  // only the passes' allocations fail
    tj_status_t status = fn(g);
    if (!status) {
      succeeded_at = n;
    } else if (tj_status_code(status) != TJ_STATUS_OUT_OF_MEMORY) {
      fprintf(stderr, "%s: failing allocation %ld gave %s: %s\n", what, n,
              tj_status_code_name(tj_status_code(status)),
              tj_status_message(status));
      CHECK(false);
    }
    tj_status_free(status);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
    if (t.live_blocks != 0 || t.bad_frees != 0) {
      fprintf(stderr,
              "%s: failing allocation %ld leaked %ld blocks (%d bad "
              "frees)\n",
              what, n, t.live_blocks, t.bad_frees);
      CHECK(false);
      return;
    }
  }
  printf("# %s succeeded once %ld allocations could succeed\n", what,
         succeeded_at);
  CHECK(succeeded_at > 0);
}

TEST(pipeline_reports_every_allocation_failure) {
  sweep(run_pipeline, "pipeline");
}

TEST(scoreboard_reports_every_allocation_failure) {
  sweep(run_scoreboard, "scoreboard");
}

TEST(conv_pipeline_reports_every_allocation_failure) {
  g_text = kConvText;
  sweep(run_pipeline, "conv pipeline");
  g_text = kText;
}

// convx86 (issue 15): a conv whose constant weight (66.8 KB, past
// fold_max_bytes) is regrouped for its GEMM by a transpose that fold takes
// (fold_movement_max_bytes): no transpose is left in the plan, and every
// allocation failure of decompose's materialized pad, the chunks and the
// large fold is reported.
static char* conv_constant_text(void) {
  enum { kCount = 64 * 29 * 3 * 3 };
  const char head[] = "func @cw[B](%x: f32[B,29,4,4]) {\n  %w = constant [";
  const char tail[] =
      "] : f32[64,29,3,3]\n"
      "  %c = conv %x, %w, none {low=[1,1] high=[1,1]} : f32[B,64,4,4]\n"
      "  return %c as \"c\"\n}\n";
  char* text = malloc(sizeof(head) + sizeof(tail) + (size_t)kCount * 8);
  if (!text) return NULL;
  size_t n = (size_t)sprintf(text, "%s", head);
  for (int i = 0; i < kCount; ++i)
    n += (size_t)sprintf(text + n, i ? ", %d" : "%d", i % 7 - 3);
  sprintf(text + n, "%s", tail);
  return text;
}

static tj_status_t run_pipeline_no_transpose(tj_graph_t* g) {
  tj_graph_t* copy = NULL;
  TJ_RETURN_IF_ERROR(tj_graph_clone(g, &copy));
  tj_plan_t plan;
  tj_plan_initialize(&plan, copy);
  tj_pass_ctx_t ctx;
  tj_pass_ctx_initialize(&ctx, tj_graph_context(g));
  ctx.verify_each = true;
  ctx.evaluate = tj_pass_reference_evaluator;
  tj_status_t status = tj_pipeline_default(&ctx, &plan);
  char* text = NULL;
  if (!status) status = tj_plan_print(&plan, &text);
  if (!status) CHECK(text && !strstr(text, "transpose"));
  tj_context_free_string(tj_graph_context(g), text);
  tj_plan_deinitialize(&plan);
  return status;
}

TEST(conv_constant_weight_folds_and_reports_every_allocation_failure) {
  char* text = conv_constant_text();
  CHECK(text != NULL);
  if (!text) return;
  g_text = text;
  sweep(run_pipeline_no_transpose, "conv constant weight pipeline");
  g_text = kText;
  free(text);
}

TEST(attention_pipeline_reports_every_allocation_failure) {
  g_text = kAttentionText;
  sweep(run_pipeline, "attention pipeline");
  g_text = kText;
}

int main(void) {
  RUN_TEST(attention_pipeline_reports_every_allocation_failure);
  RUN_TEST(conv_pipeline_reports_every_allocation_failure);
  RUN_TEST(conv_constant_weight_folds_and_reports_every_allocation_failure);
  RUN_TEST(pipeline_reports_every_allocation_failure);
  RUN_TEST(scoreboard_reports_every_allocation_failure);
  TEST_MAIN_END();
}
