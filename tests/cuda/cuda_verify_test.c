// tj_verify and tj_verify_ladder on the CUDA target: an observed run
// launches step by step and copies each group's outputs back, so the
// values between the groups are compared as on x86 (report.boundaries, more
// values than the outputs); a clean graph verifies clean (precise math:
// the x86 polynomials, within the f32 budget); a wrong kernel planted in
// one group (add -> sub) is named at that group and a node it writes,
// every value before it clean; the ladder's diverging rung names a group,
// not an output. Skipped (exit 77) without a driver or GPU.

#include "backends/verify.h"
#include "tests/cuda/cuda_test_util.h"

static const char* const kNames[1] = {"B"};

// y = sum(exp(x * 0.5) + b, 1) and z = sum(h * h, 1), h = relu(x @ w + b2).
static tj_graph_t* small_graph(tj_context_t* ctx) {
  static const char kText[] =
      "func @small[B](%x: f32[B,16], %b: f32[16], %w: f32[16,8], "
      "%b2: f32[8]) {\n"
      "  %half = constant [0.5] : f32[]\n"
      "  %h0 = mul %x, %half : f32[B,16]\n"
      "  %e = exp %h0 : f32[B,16]\n"
      "  %e2 = add %e, %b : f32[B,16]\n"
      "  %y = sum %e2 {axes=[1]} : f32[B]\n"
      "  %m = matmul %x, %w : f32[B,8]\n"
      "  %m2 = add %m, %b2 : f32[B,8]\n"
      "  %h = relu %m2 : f32[B,8]\n"
      "  %hh = mul %h, %h : f32[B,8]\n"
      "  %z = sum %hh {axes=[1]} : f32[B]\n"
      "  return %y as \"y\", %z as \"z\"\n"
      "}\n";
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_parse(ctx, kText, strlen(kText), "small.tj", &g));
  return g;
}

static tj_compile_options_t cuda_options(void) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.cache_dir = "";
  o.autotune = TJ_AUTOTUNE_OFF;
  o.cuda.precise_math = true;
  return o;
}

static tj_verify_options_t verify_options(const int64_t* b) {
  tj_verify_options_t o;
  tj_verify_options_initialize(&o);
  o.num_symbols = 1;
  o.symbol_names = kNames;
  o.symbol_values = b;
  o.edge_values = false;
  return o;
}

static bool group_writes(const tj_run_plan_t* rp, uint32_t group,
                         uint32_t node) {
  const tj_group_t* grp = &rp->fusion->groups[group];
  for (uint32_t j = 0; j < grp->num_outputs; ++j) {
    if (grp->outputs[j] == node) return true;
  }
  return false;
}

TEST(cuda_verify_compares_every_group_boundary) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = ctx ? small_graph(ctx) : NULL;
  tj_compile_options_t co = cuda_options();
  tj_executable_t* exe = NULL;
  if (g) CHECK_OK(tj_compile(g, &co, &exe));
  int64_t b[1] = {5};
  tj_verify_options_t vo = verify_options(b);
  tj_verify_report_t* r = NULL;
  if (exe) CHECK_OK(tj_verify(exe, g, NULL, 0, &vo, &r));
  if (r) {
    printf("%s", r->text);
    CHECK_STREQ("cuda", r->target);
    CHECK(r->boundaries);
    CHECK(r->num_values > 2 + 2);
    CHECK(r->verdict == TJ_VERIFY_CLEAN || r->verdict == TJ_VERIFY_DRIFT);
    CHECK_CONTAINS(r->text, "every group boundary");
  }
  tj_verify_report_destroy(r);
  // Plain runs afterwards (the CUDA graph) still agree.
  r = NULL;
  if (exe) CHECK_OK(tj_verify(exe, g, NULL, 0, &vo, &r));
  if (r) CHECK(r->verdict == TJ_VERIFY_CLEAN || r->verdict == TJ_VERIFY_DRIFT);
  tj_verify_report_destroy(r);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

TEST(cuda_planted_wrong_kernel_is_named_at_its_group) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = ctx ? small_graph(ctx) : NULL;
  tj_compile_options_t co = cuda_options();
  tj_executable_t* clean = NULL;
  if (g) CHECK_OK(tj_compile(g, &co, &clean));
  const tj_run_plan_t* rp = clean ? tj_executable_run_plan(clean) : NULL;
  int planted = 0;
  int64_t b[1] = {4};
  tj_verify_options_t vo = verify_options(b);
  for (uint32_t s = 0; rp && s < rp->num_steps; ++s) {
    if (rp->steps[s].kind != TJ_RUN_STEP_KERNELS) continue;
    uint32_t group = rp->steps[s].group;
    tj_executable_t* exe = NULL;
    tj_status_t st = tj_verify_test_compile_planted(g, &co, group, TJ_OP_ADD,
                                                    TJ_OP_SUB, &exe);
    if (st) {  // no add in this group
      tj_status_free(st);
      continue;
    }
    ++planted;
    tj_verify_report_t* r = NULL;
    CHECK_OK(tj_verify(exe, g, NULL, 0, &vo, &r));
    if (r) {
      CHECK(r->boundaries);
      CHECK(r->first_bad >= 0);
      if (r->first_bad >= 0) {
        const tj_verify_value_t* v = &r->values[r->first_bad];
        CHECK(!v->against_caller);
        CHECK_EQ_INT(group, v->group);
        CHECK_EQ_INT(s, v->step);
        CHECK(group_writes(tj_executable_run_plan(exe), group, v->node));
        for (int32_t i = 0; i < r->first_bad; ++i) {
          CHECK_EQ_INT(0, r->values[i].mismatches);
        }
      }
      CHECK_EQ_INT(TJ_VERIFY_WRONG_FUSED_KERNEL, r->verdict);
      if (r->verdict != TJ_VERIFY_WRONG_FUSED_KERNEL) printf("%s", r->text);
    }
    tj_verify_report_destroy(r);
    tj_executable_release(exe);
  }
  CHECK(planted >= 2);
  tj_executable_release(clean);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

TEST(cuda_ladder_names_the_group) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = ctx ? small_graph(ctx) : NULL;
  tj_compile_options_t co = cuda_options();
  int64_t b[1] = {3};
  tj_verify_options_t vo = verify_options(b);
  // A wrong kernel for every add, whatever the fusion.
  tj_verify_plant_t plant = {TJ_VERIFY_PLANT_EVERY_GROUP, TJ_OP_ADD, TJ_OP_SUB,
                             false};
  tj_compile_debug_t debug;
  memset(&debug, 0, sizeof(debug));
  debug.lowered = tj_verify_test_plant;
  debug.user = &plant;
  tj_ladder_report_t* r = NULL;
  if (g) CHECK_OK(tj_verify_test_ladder(g, &co, &debug, &vo, &r));
  if (r) {
    printf("%s", r->text);
    CHECK_EQ_INT(TJ_LADDER_UNFUSED, r->first_diverging);
    CHECK_STREQ("kernel", r->blame);
    CHECK_CONTAINS(r->rungs[TJ_LADDER_UNFUSED].first_value, "group ");
  }
  tj_ladder_report_destroy(r);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

int main(void) {
  tj_cuda_device_t* device = tj_test_open_device_or_skip();
  tj_cuda_device_destroy(device);
  RUN_TEST(cuda_verify_compares_every_group_boundary);
  RUN_TEST(cuda_planted_wrong_kernel_is_named_at_its_group);
  RUN_TEST(cuda_ladder_names_the_group);
  TEST_MAIN_END();
}
