// tj_verify (tj_verify.h, backends/verify.c): clean graphs verify clean on
// x86 at every ISA tier the host has (a small graph, the capstone, random
// graphs of 100+ nodes); a wrong kernel planted through the test hook
// (tj_verify_test_compile_planted) is named at its group and node and
// called a wrong fused kernel, the unfused pipeline agreeing with the
// reference; a wrong fold planted through the passes' evaluator is blamed
// on its pass; the reference target compares outputs only; errors; and every
// allocation failure of a check is OUT_OF_MEMORY and leaks nothing.

#include "backends/cuda/cuda_entry.h"
#include "backends/reference/reference_eval.h"
#include "backends/verify.h"
#include "lib/passes/fusion.h"
#include "tests/unit/random_graph.h"
#include "tests/unit/verify_util.h"

// y = sum(exp(x * 0.5) + b, 1) and z = sum(h * h, 1) with
// h = relu(x @ w + b2): a pointwise prologue into a reduction, and a GEMM
// with an epilogue whose value h crosses into another group without being
// an output.
static tj_graph_t* small_graph(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(ctx, "small", &g)) return NULL;
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 16}, "x");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){16}, "b");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){16, 8}, "w");
  tj_value_t b2 = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){8}, "b2");
  tj_value_t half = tj_graph_scalar(g, TJ_DTYPE_F32, 0.5);
  tj_value_t e = tj_graph_add(g, tj_graph_exp(g, tj_graph_mul(g, x, half)), b);
  int32_t axis1[1] = {1};
  tj_graph_output(g, tj_graph_sum(g, e, 1, axis1, false), "y");
  tj_value_t h =
      tj_graph_relu(g, tj_graph_add(g, tj_graph_matmul(g, x, w), b2));
  tj_graph_output(g, tj_graph_sum(g, tj_graph_mul(g, h, h), 1, axis1, false),
                  "z");
  tj_status_t st = tj_graph_finalize(g);
  if (st) {
    tj_status_free(st);
    tj_graph_destroy(g);
    return NULL;
  }
  return g;
}

static tj_verify_options_t options_b(const char* const* names,
                                     const int64_t* values) {
  tj_verify_options_t o;
  tj_verify_options_initialize(&o);
  o.num_symbols = 1;
  o.symbol_names = names;
  o.symbol_values = values;
  return o;
}

// A verdict a correct pipeline may get: clean, or drift (summation order,
// which large magnitudes among the edge values bring out in a GEMM or a
// long sum, and which the f64 budget of 1e-9 catches in a reduction).
static bool passes(const tj_verify_report_t* r) {
  bool ok = r->verdict == TJ_VERIFY_CLEAN || r->verdict == TJ_VERIFY_DRIFT;
  if (!ok) fprintf(stderr, "%s", r->text);
  return ok;
}

TEST(small_graph_is_clean_at_every_tier) {
  int tiers = 0;
  for (size_t i = 0; i < num_tiers(); ++i) {
    tj_context_t* ctx = tier_context(kTiers[i]);
    tj_graph_t* g = ctx ? small_graph(ctx) : NULL;
    tj_compile_options_t co = x86_options();
    tj_executable_t* exe = NULL;
    tj_status_t st = g ? tj_compile(g, &co, &exe) : NULL;
    if (st || !exe) {  // a tier the host does not have
      tj_status_free(st);
      tj_graph_destroy(g);
      tj_context_destroy(ctx);
      continue;
    }
    ++tiers;
    int64_t bv[1] = {5};
    tj_verify_options_t vo = options_b(kB, bv);
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      vo.seed = seed;
      vo.edge_values = seed != 3;
      tj_verify_report_t* r = NULL;
      CHECK_OK(tj_verify(exe, g, NULL, 0, &vo, &r));
      if (r) {
        CHECK(passes(r));
        CHECK(r->boundaries);
        // More values than the outputs: the boundaries in between.
        CHECK(r->num_values > 2 + 2);
        if (seed == 3) CHECK_EQ_INT(TJ_VERIFY_CLEAN, r->verdict);
        if (r->verdict == TJ_VERIFY_CLEAN) {
          CHECK_EQ_INT(-1, r->first_bad);
          CHECK_CONTAINS(r->text, "verdict: clean");
        }
      }
      tj_verify_report_destroy(r);
    }
    tj_executable_release(exe);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
  }
  CHECK(tiers >= min_tiers());  // the host's, and sse2 unless host-only
}

// The capstone: y = gelu(x @ w + b), one GEMM with its epilogue. With
// edge values its K = 1024 sums cancel: errors far beyond rtol * |want|
// that are within rtol * the terms' magnitudes, so clean (not drift).
TEST(capstone_is_clean_at_every_tier) {
  int tiers = 0;
  for (size_t i = 0; i < num_tiers(); ++i) {
    tj_context_t* ctx = tier_context(kTiers[i]);
    if (!ctx) continue;
    tj_graph_t* g = NULL;
    CHECK_OK(tj_graph_create(ctx, "capstone", &g));
    int64_t B = tj_graph_symbol(g, "B");
    tj_value_t x =
        tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 1024}, "x");
    tj_value_t w =
        tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){1024, 4096}, "w");
    tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4096}, "b");
    tj_graph_output(g, tj_graph_gelu(g, tj_graph_linear(g, x, w, b), false),
                    "y");
    CHECK_OK(tj_graph_finalize(g));
    tj_compile_options_t co = x86_options();
    tj_executable_t* exe = NULL;
    tj_status_t st = tj_compile(g, &co, &exe);
    if (!st) {
      ++tiers;
      int64_t bv[1] = {3};
      tj_verify_options_t vo = options_b(kB, bv);
      tj_verify_report_t* r = NULL;
      for (uint64_t seed = 1; seed <= 2; ++seed) {
        vo.seed = seed;
        CHECK_OK(tj_verify(exe, g, NULL, 0, &vo, &r));
        if (r) {
          CHECK_EQ_INT(TJ_VERIFY_CLEAN, r->verdict);
          if (r->verdict != TJ_VERIFY_CLEAN) fprintf(stderr, "%s", r->text);
          // The cancellation is there: errors beyond rtol * |want|.
          CHECK(r->max_rel_error > vo.rtol[TJ_DTYPE_F32]);
          CHECK_CONTAINS(r->text, "atol + rtol x condition");
        }
        tj_verify_report_destroy(r);
        r = NULL;
      }
      vo.edge_values = false;
      CHECK_OK(tj_verify(exe, g, NULL, 0, &vo, &r));
      if (r) {
        CHECK_EQ_INT(TJ_VERIFY_CLEAN, r->verdict);
        if (r->verdict != TJ_VERIFY_CLEAN) fprintf(stderr, "%s", r->text);
      }
      tj_verify_report_destroy(r);
    }
    tj_status_free(st);
    tj_executable_release(exe);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
  }
  CHECK(tiers >= min_tiers());
}

// A wrong kernel planted in the capstone's GEMM group is still named with
// edge values on: budgets that scale with the terms of its sums leave no
// room for a wrong epilogue.
TEST(planted_wrong_kernel_in_the_capstone_is_named_with_edge_values) {
  for (size_t i = 0; i < num_tiers(); ++i) {
    if (i != 0 && strcmp(kTiers[i], "sse2") != 0) continue;
    tj_context_t* ctx = tier_context(kTiers[i]);
    tj_graph_t* g = NULL;
    CHECK_OK(tj_test_build_capstone(ctx, 1024, 4096, &g));
    tj_compile_options_t co = x86_options();
    tj_executable_t* exe = NULL;
    // The epilogue's gelu: x * erfc(x * -sqrt(1/2)) * 0.5.
    CHECK_OK(
        tj_verify_test_compile_planted(g, &co, 0, TJ_OP_ERFC, TJ_OP_ERF, &exe));
    int64_t bv[1] = {3};
    tj_verify_options_t vo = options_b(kB, bv);
    CHECK(vo.edge_values);
    tj_verify_report_t* r = NULL;
    if (exe) CHECK_OK(tj_verify(exe, g, NULL, 0, &vo, &r));
    if (r) {
      CHECK_EQ_INT(TJ_VERIFY_WRONG_FUSED_KERNEL, r->verdict);
      CHECK(r->first_bad >= 0);
      if (r->first_bad >= 0) {
        const tj_verify_value_t* v = &r->values[r->first_bad];
        CHECK_EQ_INT(0, v->group);
        CHECK(v->mismatches > 100);
        CHECK(v->first_bad_condition > 0);
      }
      if (r->verdict != TJ_VERIFY_WRONG_FUSED_KERNEL) {
        fprintf(stderr, "%s", r->text);
      }
    }
    tj_verify_report_destroy(r);
    tj_executable_release(exe);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
  }
}

// The budget is settable, and drift is told from a wrong kernel: under an
// f32 budget of rtol 1e-8 (below one rounding) exp(x) * x leaves it by a
// rounding or two, the unfused pipeline alike and within the drift
// factor (100 budgets): drift. Under the default budget: clean.
TEST(a_budget_below_one_rounding_is_drift) {
  tj_context_t* ctx = tier_context("host");
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "drift", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 64}, "x");
  tj_graph_output(g, tj_graph_mul(g, tj_graph_exp(g, x), x), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t co = x86_options();
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &co, &exe));
  int64_t bv[1] = {16};
  tj_verify_options_t vo = options_b(kB, bv);
  vo.edge_values = false;
  tj_verify_report_t* r = NULL;
  if (exe) CHECK_OK(tj_verify(exe, g, NULL, 0, &vo, &r));
  if (r) CHECK_EQ_INT(TJ_VERIFY_CLEAN, r->verdict);
  tj_verify_report_destroy(r);
  r = NULL;
  vo.rtol[TJ_DTYPE_F32] = 1e-8;
  vo.atol[TJ_DTYPE_F32] = 0;
  if (exe) CHECK_OK(tj_verify(exe, g, NULL, 0, &vo, &r));
  if (r) {
    CHECK_EQ_INT(TJ_VERIFY_DRIFT, r->verdict);
    CHECK(r->unfused_ran);
    CHECK(!r->unfused_within_budget);
    CHECK_EQ_INT(0, (int)r->fused_unfused_mismatches);
    CHECK(r->first_bad >= 0);
    if (r->first_bad >= 0) CHECK(r->values[r->first_bad].rtol == 1e-8);
    CHECK_CONTAINS(r->text, "verdict: drift");
    CHECK_CONTAINS(r->text, "rtol 1e-08");
    if (r->verdict != TJ_VERIFY_DRIFT) fprintf(stderr, "%s", r->text);
  }
  tj_verify_report_destroy(r);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// tj_verify_conditions, rule by rule, on values picked for cancellation:
// the sum of the magnitudes of the terms, carried through each op.
TEST(conditions_scale_with_the_terms) {
  tj_context_t* ctx = tier_context("host");
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "cond", &g));
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, "x");
  tj_value_t a = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){1, 3}, "a");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 1}, "b");
  int32_t axis0[1] = {0};
  tj_graph_output(g, tj_graph_sum(g, x, 1, axis0, false), "sum");
  tj_graph_output(g, tj_graph_matmul(g, a, b), "matmul");
  tj_graph_output(g,
                  tj_graph_exp(g, tj_graph_slice(g, x, (int64_t[]){3},
                                                 (int64_t[]){4}, NULL)),
                  "exp");
  tj_graph_output(g, tj_graph_min(g, x, 1, axis0, false), "min");
  tj_graph_output(g, tj_graph_floor(g, tj_graph_abs(g, x)), "floor");
  // The cancelled sum times 1e-3: the product carries the sum's condition.
  tj_graph_output(g,
                  tj_graph_mul(g, tj_graph_sum(g, x, 1, axis0, false),
                               tj_graph_scalar(g, TJ_DTYPE_F32, 1e-3)),
                  "scaled");
  CHECK_OK(tj_graph_finalize(g));
  float xv[4] = {1e4f, -1e4f, 2.99999f, 0.5f};
  float av[3] = {3, -4, 1}, bv[3] = {2, 1.5f, 0};
  tj_tensor_t in[3] = {tj_tensor_make(xv, TJ_DTYPE_F32, 1, (int64_t[]){4}),
                       tj_tensor_make(av, TJ_DTYPE_F32, 2, (int64_t[]){1, 3}),
                       tj_tensor_make(bv, TJ_DTYPE_F32, 2, (int64_t[]){3, 1})};
  tj_verify_options_t vo;
  tj_verify_options_initialize(&vo);
  tj_verify_tensors_t c;
  CHECK_OK(tj_verify_conditions(g, in, 3, vo.rtol, &c));
  CHECK_EQ_INT(6, c.count);
  if (c.count == 6) {
    for (int i = 0; i < 6; ++i) CHECK_EQ_INT(TJ_DTYPE_F64, c.tensors[i].dtype);
    const double x2 = (double)xv[2];
    // sum: |1e4| + |-1e4| + |x2| + |0.5|, not |the sum| = 3.49999.
    CHECK(fabs(((double*)c.data[0])[0] - (20000.5 + x2)) < 1e-9);
    // matmul: 3 * 2 + 4 * 1.5 + 0 = 12; the product itself is 0.
    CHECK(fabs(((double*)c.data[1])[0] - 12.0) < 1e-12);
    // exp(0.5): |y| + |y'| * c_x = e^0.5 * (1 + 0.5), to first order in
    // the step eta = rtol(f32).
    double e = exp(0.5) * 1.5;
    CHECK(fabs(((double*)c.data[2])[0] - e) < 1e-4 * e);
    // min: the largest term's condition, 1e4, not |min| alone.
    CHECK(fabs(((double*)c.data[3])[0] - 1e4) < 1e-9);
    // floor(|2.99999|): a step of 1 within reach of the budget counts
    // whole (1 / eta); floor(|0.5|) stays 0 within reach: exactly 0.
    double* fl = c.data[4];
    CHECK(fl[2] > 1.0 / vo.rtol[TJ_DTYPE_F32]);
    CHECK(fl[3] == 0.0);
    // s * 1e-3, s the cancelled sum (x2 + 0.5): 1e-3 * c_s, plus |s| *
    // 1e-3 for the scalar's own budget, plus the product's own |y|.
    double scaled = ((double*)c.data[5])[0];
    double want = 1e-3 * (20000.5 + x2 + 2 * (x2 + 0.5));
    CHECK(fabs(scaled - want) < 1e-5);
    if (!(fabs(scaled - want) < 1e-5))
      fprintf(stderr, "scaled %.17g, want %.17g\n", scaled, want);
  }
  tj_verify_tensors_deinitialize(&c);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// Whether group |group| of |rp| writes |node| to memory.
static bool group_writes(const tj_run_plan_t* rp, uint32_t group,
                         uint32_t node) {
  const tj_group_t* g = &rp->fusion->groups[group];
  for (uint32_t j = 0; j < g->num_outputs; ++j) {
    if (g->outputs[j] == node) return true;
  }
  return false;
}

TEST(planted_wrong_kernel_is_named) {
  tj_context_t* ctx = tier_context("host");
  tj_graph_t* g = small_graph(ctx);
  CHECK(g != NULL);
  if (!g) {
    tj_context_destroy(ctx);
    return;
  }
  tj_compile_options_t co = x86_options();
  tj_executable_t* clean = NULL;
  CHECK_OK(tj_compile(g, &co, &clean));
  const tj_run_plan_t* rp = tj_executable_run_plan(clean);
  int planted = 0;
  // Plant add -> sub in every group that has an add, one at a time.
  for (uint32_t s = 0; clean && s < rp->fusion->num_groups; ++s) {
    uint32_t group = rp->steps[s].group;
    tj_executable_t* exe = NULL;
    tj_status_t st = tj_verify_test_compile_planted(g, &co, group, TJ_OP_ADD,
                                                    TJ_OP_SUB, &exe);
    if (st) {  // no add in this group
      CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, tj_status_code(st));
      tj_status_free(st);
      continue;
    }
    ++planted;
    int64_t bv[1] = {4};
    tj_verify_options_t vo = options_b(kB, bv);
    tj_verify_report_t* r = NULL;
    CHECK_OK(tj_verify(exe, g, NULL, 0, &vo, &r));
    if (r) {
      CHECK_EQ_INT(TJ_VERIFY_WRONG_FUSED_KERNEL, r->verdict);
      CHECK(r->first_bad >= 0);
      if (r->first_bad >= 0) {
        const tj_verify_value_t* v = &r->values[r->first_bad];
        CHECK_EQ_INT(group, v->group);
        CHECK_EQ_INT(s, v->step);
        CHECK(group_writes(tj_executable_run_plan(exe), group, v->node));
        CHECK(v->mismatches > 0);
        CHECK(v->max_abs_error > 0);
        // Every value before it is clean.
        for (int32_t i = 0; i < r->first_bad; ++i) {
          CHECK_EQ_INT(0, r->values[i].mismatches);
        }
      }
      CHECK(r->unfused_ran);
      CHECK(r->unfused_within_budget);
      CHECK_CONTAINS(r->text, "verdict: wrong fused kernel");
      if (r->first_bad < 0 || r->values[r->first_bad].step != (int32_t)s) {
        fprintf(stderr, "planted in group %u (step %u):\n%s", group, s,
                r->text);
      }
      CHECK_CONTAINS(r->text, "first divergence: group");
      CHECK_CONTAINS(r->text, "the fused kernel of this group is wrong");
    }
    tj_verify_report_destroy(r);
    tj_executable_release(exe);
  }
  CHECK(planted >= 2);  // the exp + add prologue's group, the GEMM epilogue
  tj_executable_release(clean);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// A constant evaluator that folds wrongly: the reference's results with
// 1 added to the first element of every f32 result.
static tj_status_t wrong_fold(void* user_data, const tj_graph_t* graph,
                              void* const* outputs) {
  TJ_RETURN_IF_ERROR(tj_pass_reference_evaluator(user_data, graph, outputs));
  for (uint32_t i = 0; i < graph->num_outputs; ++i) {
    const tj_node_t* n = &graph->nodes[graph->outputs[i].node];
    bool empty = false;
    for (int32_t d = 0; d < n->rank; ++d) empty = empty || n->dims[d] == 0;
    if (n->dtype == TJ_DTYPE_F32 && !empty) ((float*)outputs[i])[0] += 1.0f;
  }
  return NULL;
}

// y = relu(x + c1 * c2) with constants c1, c2: canonicalize folds c1 * c2.
static tj_graph_t* folded_graph(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(ctx, "folded", &g)) return NULL;
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 4}, "x");
  static const float c1[4] = {1, 2, 3, 4}, c2[4] = {0.5f, 0.25f, 2, -1};
  tj_value_t a =
      tj_graph_constant(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, c1, sizeof(c1));
  tj_value_t b =
      tj_graph_constant(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, c2, sizeof(c2));
  tj_graph_output(
      g, tj_graph_relu(g, tj_graph_add(g, x, tj_graph_mul(g, a, b))), "y");
  tj_status_t st = tj_graph_finalize(g);
  if (st) {
    tj_status_free(st);
    tj_graph_destroy(g);
    return NULL;
  }
  return g;
}

// A wrong result of a pass (canonicalize's folding, through a planted
// evaluator) agrees with the optimized graph at every boundary but not
// with the caller's graph: "wrong passes", blamed on the first
// canonicalize.
// The PTX of |g| for sm_90a (no GPU: the CUDA backend opened offline) with
// |debug|, and the executable's run plan's steps in |out_steps| (kernels
// per group, 0 for a group that is not KERNELS). NULL on failure.
static char* offline_ptx(const tj_graph_t* g, const tj_compile_debug_t* debug,
                         uint32_t* out_steps, uint32_t max_steps) {
  tj_compile_options_t co = x86_options();
  co.target = TJ_TARGET_CUDA;
  co.autotune = TJ_AUTOTUNE_OFF;
  tj_cuda_offline_arg_t arg = {.arch = TJ_NVPTX_SM_90A};
  tj_executable_t* exe = NULL;
  CHECK_OK(
      tj_compile_with_backend(g, &co, &tj_backend_cuda, &arg, debug, &exe));
  if (!exe) return NULL;
  void *target, *program;
  tj_executable_backend(exe, &target, &program);
  const char* ptx = tj_cuda_backend_ptx(program);
  char* copy = ptx ? strdup(ptx) : NULL;
  const tj_run_plan_t* rp = tj_executable_run_plan(exe);
  for (uint32_t s = 0; s < max_steps; ++s) {
    bool k = s < rp->num_steps && rp->steps[s].kind == TJ_RUN_STEP_KERNELS;
    out_steps[s] = k ? rp->steps[s].num_kernels : 0;
  }
  tj_executable_release(exe);
  return copy;
}

// The text of the kernels of group |group| in |ptx| (from its first
// ".entry tj_kernel_gN_" to the next entry of another group), copied; ""
// if none.
static char* group_ptx(const char* ptx, uint32_t group) {
  char name[32];
  snprintf(name, sizeof(name), ".entry tj_kernel_g%u_", group);
  const char* start = strstr(ptx, name);
  if (!start) return strdup("");
  const char* end = start + 1;
  while ((end = strstr(end, ".entry ")) &&
         strncmp(end, name, strlen(name)) == 0)
    ++end;
  size_t n = end ? (size_t)(end - start) : strlen(start);
  return strndup(start, n);
}

// The bug the H200 found: the CUDA backend emits a group's kernels when it
// accepts them, while the run plan is built, and the hook that plants a
// wrong kernel ran only after that, so the planted defect never reached
// the CUDA program. Now the driver runs the hook before the backend
// accepts a group, on every target. Offline (no GPU): with add -> sub
// planted in one group, that group's PTX differs from the clean compile's
// and every other group's is the same.
TEST(planted_kernel_reaches_the_cuda_program) {
  tj_context_t* ctx = tier_context("host");
  tj_graph_t* g = ctx ? small_graph(ctx) : NULL;
  enum { kMaxSteps = 32 };
  uint32_t clean_steps[kMaxSteps], steps[kMaxSteps];
  char* clean = g ? offline_ptx(g, NULL, clean_steps, kMaxSteps) : NULL;
  CHECK(clean != NULL);
  int planted = 0;
  for (uint32_t q = 0; clean && q < kMaxSteps; ++q) {
    if (clean_steps[q] == 0) continue;
    tj_verify_plant_t plant = {q, TJ_OP_ADD, TJ_OP_SUB, false};
    tj_compile_debug_t debug;
    memset(&debug, 0, sizeof(debug));
    debug.lowered = tj_verify_test_plant;
    debug.user = &plant;
    char* ptx = offline_ptx(g, &debug, steps, kMaxSteps);
    CHECK(ptx != NULL);
    if (!ptx || !plant.planted) {  // no add in this group
      free(ptx);
      continue;
    }
    ++planted;
    CHECK_EQ_INT(clean_steps[q], steps[q]);
    for (uint32_t other = 0; other < kMaxSteps; ++other) {
      if (clean_steps[other] == 0) continue;
      char* want = group_ptx(clean, other);
      char* got = group_ptx(ptx, other);
      CHECK(want[0] != '\0');
      if (other == q) {
        CHECK(strcmp(want, got) != 0);
      } else {
        CHECK_STREQ(want, got);
      }
      free(want);
      free(got);
    }
    free(ptx);
  }
  CHECK(planted >= 2);  // the reduction's prologue and the GEMM's epilogue
  free(clean);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

TEST(planted_wrong_fold_is_blamed_on_its_pass) {
  tj_context_t* ctx = tier_context("host");
  tj_graph_t* g = folded_graph(ctx);
  CHECK(g != NULL);
  tj_compile_options_t co = x86_options();
  tj_compile_debug_t debug;
  memset(&debug, 0, sizeof(debug));
  debug.evaluate = wrong_fold;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile_debug(g, &co, &debug, &exe));
  int64_t bv[1] = {3};
  tj_verify_options_t vo = options_b(kB, bv);
  vo.edge_values = false;
  tj_verify_report_t* r = NULL;
  if (exe) CHECK_OK(tj_verify(exe, g, NULL, 0, &vo, &r));
  if (r) {
    CHECK_EQ_INT(TJ_VERIFY_WRONG_PASSES, r->verdict);
    CHECK(r->first_bad >= 0 && r->values[r->first_bad].against_caller);
    CHECK_STREQ("canonicalize", r->blamed_pass);
    CHECK_EQ_INT(0, r->blamed_pass_index);
    CHECK_CONTAINS(r->text, "verdict: wrong passes");
    CHECK_CONTAINS(r->text,
                   "after pass 0 of the default pipeline, canonicalize");
    if (r->verdict != TJ_VERIFY_WRONG_PASSES) fprintf(stderr, "%s", r->text);
  }
  tj_verify_report_destroy(r);
  r = NULL;
  // The same graph compiled normally is clean, and blames nothing.
  tj_executable_t* clean = NULL;
  CHECK_OK(tj_compile(g, &co, &clean));
  if (clean) CHECK_OK(tj_verify(clean, g, NULL, 0, &vo, &r));
  if (r) {
    CHECK_EQ_INT(TJ_VERIFY_CLEAN, r->verdict);
    CHECK_EQ_INT(-1, r->blamed_pass_index);
    CHECK_STREQ("", r->blamed_pass);
  }
  tj_verify_report_destroy(r);
  tj_executable_release(clean);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

TEST(reference_target_compares_outputs) {
  tj_context_t* ctx = tier_context("host");
  tj_graph_t* g = small_graph(ctx);
  tj_compile_options_t co;
  tj_compile_options_initialize(&co);
  co.target = TJ_TARGET_REFERENCE;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &co, &exe));
  int64_t bv[1] = {2};
  tj_verify_options_t vo = options_b(kB, bv);
  tj_verify_report_t* r = NULL;
  CHECK_OK(tj_verify(exe, g, NULL, 0, &vo, &r));
  if (r) {
    CHECK_EQ_INT(TJ_VERIFY_CLEAN, r->verdict);
    CHECK(!r->boundaries);
    CHECK_EQ_INT(2, r->num_values);
    CHECK_CONTAINS(r->text, "outputs only");
  }
  tj_verify_report_destroy(r);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

TEST(given_inputs_and_errors) {
  tj_context_t* ctx = tier_context("host");
  tj_graph_t* g = small_graph(ctx);
  tj_compile_options_t co = x86_options();
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &co, &exe));
  tj_verify_report_t* r = NULL;
  // No value for B.
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "symbol",
               tj_verify(exe, g, NULL, 0, NULL, &r));
  CHECK(r == NULL);
  int64_t bad_v[1] = {2};
  const char* const bad_n[1] = {"C"};
  tj_verify_options_t vo = options_b(bad_n, bad_v);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "has no symbol C",
               tj_verify(exe, g, NULL, 0, &vo, &r));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "executable is NULL",
               tj_verify(NULL, g, NULL, 0, NULL, &r));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "out_report is NULL",
               tj_verify(exe, g, NULL, 0, NULL, NULL));
  tj_verify_options_t sized;
  tj_verify_options_initialize(&sized);
  sized.struct_size = 8;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "struct_size",
               tj_verify(exe, g, NULL, 0, &sized, &r));
  tj_verify_options_initialize(&sized);
  sized.rtol[TJ_DTYPE_F32] = -1;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "f32 budget",
               tj_verify(exe, g, NULL, 0, &sized, &r));
  // Given inputs, with NaN and infinities: NaN positions agree.
  float x[3 * 16], b[16], w[16 * 8], b2[8];
  for (int i = 0; i < 3 * 16; ++i) x[i] = (float)((i * 7) % 11) / 8.0f - 0.6f;
  x[5] = NAN;
  x[17] = INFINITY;
  for (int i = 0; i < 16; ++i) b[i] = (float)i / 16.0f;
  for (int i = 0; i < 16 * 8; ++i) w[i] = (float)((i * 5) % 7) / 7.0f - 0.5f;
  for (int i = 0; i < 8; ++i) b2[i] = -0.25f;
  tj_tensor_t in[4] = {tj_tensor_make(x, TJ_DTYPE_F32, 2, (int64_t[]){3, 16}),
                       tj_tensor_make(b, TJ_DTYPE_F32, 1, (int64_t[]){16}),
                       tj_tensor_make(w, TJ_DTYPE_F32, 2, (int64_t[]){16, 8}),
                       tj_tensor_make(b2, TJ_DTYPE_F32, 1, (int64_t[]){8})};
  CHECK_OK(tj_verify(exe, g, in, 4, NULL, &r));
  if (r) {
    CHECK_EQ_INT(TJ_VERIFY_CLEAN, r->verdict);
    if (r->verdict != TJ_VERIFY_CLEAN) fprintf(stderr, "%s", r->text);
  }
  tj_verify_report_destroy(r);
  r = NULL;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "takes 4 inputs",
               tj_verify(exe, g, in, 3, NULL, &r));
  // A graph that is not the executable's.
  tj_graph_t* other = NULL;
  CHECK_OK(tj_graph_create(ctx, "other", &other));
  tj_graph_output(
      other, tj_graph_input(other, TJ_DTYPE_F32, 1, (int64_t[]){4}, "x"), "y");
  CHECK_OK(tj_graph_finalize(other));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "is not the graph",
               tj_verify(exe, other, NULL, 0, NULL, &r));
  tj_graph_destroy(other);
  CHECK_STREQ("wrong fused kernel",
              tj_verify_verdict_name(TJ_VERIFY_WRONG_FUSED_KERNEL));
  CHECK_STREQ("?", tj_verify_verdict_name((tj_verify_verdict_t)99));
  tj_verify_report_destroy(NULL);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// Random graphs of 100+ nodes (random_graph.h's generate_large) verify
// clean on x86, on inputs without special values; ill-conditioned ones
// (outputs that move beyond the tolerance when the inputs move by a few
// ulps) are skipped, as in x86_random_graph_test.
TEST(random_graphs_are_clean) {
  tj_context_t* ctx = tier_context("host");
  int checked = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    tj_graph_t* g = generate_large(ctx, seed);
    if (!g) continue;
    int64_t B = 1 + (int64_t)(seed % 4);
    inputs_t in, noisy;
    run_t want;
    memset(&want, 0, sizeof(want));
    bool ok = make_inputs_ex(g, B, seed, false, false, &in);
    tj_status_t st = ok ? run_graph(g, &in, &want) : NULL;
    bool usable = ok && !st &&
                  make_inputs_ex(g, B, seed, true, false, &noisy) &&
                  stable(g, &noisy, &want);
    if (ok && !st) inputs_free(&noisy);
    tj_status_free(st);
    run_free(&want);
    tj_compile_options_t co = x86_options();
    tj_executable_t* exe = NULL;
    if (usable) CHECK_OK(tj_compile(g, &co, &exe));
    if (exe) {
      tj_verify_report_t* r = NULL;
      CHECK_OK(tj_verify(exe, g, in.t, in.count, NULL, &r));
      if (r) {
        ++checked;
        if (!passes(r)) {
          fprintf(stderr, "seed %llu\n", (unsigned long long)seed);
          CHECK(false);
        }
      }
      tj_verify_report_destroy(r);
    }
    tj_executable_release(exe);
    inputs_free(&in);
    tj_graph_destroy(g);
  }
  printf("# %d random graphs verified\n", checked);
  CHECK(checked >= 4);
  tj_context_destroy(ctx);
}

// Every allocation failure inside tj_verify: with a planted kernel (the
// unfused pipeline is compiled and compared too) and with a planted wrong
// fold (the passes are replayed). One context and
// executable; a first check fills the context's kernel cache, so that each
// later one allocates only for itself.
static void sweep(bool fold) {
  tj_test_allocator_t alloc;
  tj_test_allocator_initialize(&alloc, -1);
  tj_context_options_t options;
  tj_context_options_initialize(&options);
  options.allocator = tj_test_allocator_get(&alloc);
  options.cache_dir = "";
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&options, &ctx));
  tj_graph_t* g = fold ? folded_graph(ctx) : small_graph(ctx);
  tj_compile_options_t co = x86_options();
  co.x86.num_threads = 1;
  tj_executable_t* exe = NULL;
  tj_compile_debug_t debug;
  memset(&debug, 0, sizeof(debug));
  debug.evaluate = wrong_fold;
  if (fold) {
    CHECK_OK(tj_compile_debug(g, &co, &debug, &exe));
  } else {
    CHECK_OK(
        tj_verify_test_compile_planted(g, &co, 0, TJ_OP_ADD, TJ_OP_SUB, &exe));
  }
  tj_verify_verdict_t want =
      fold ? TJ_VERIFY_WRONG_PASSES : TJ_VERIFY_WRONG_FUSED_KERNEL;
  int64_t bv[1] = {3};
  tj_verify_options_t vo = options_b(kB, bv);
  tj_verify_report_t* r = NULL;
  if (exe) CHECK_OK(tj_executable_prepare(exe, NULL, 0));
  if (exe) CHECK_OK(tj_verify(exe, g, NULL, 0, &vo, &r));
  tj_verify_report_destroy(r);
  long failures = 0;
  for (long n = 0; exe; ++n) {
    long live_before = alloc.live_blocks;
    alloc.fail_at = alloc.allocations + n;
    r = NULL;
    tj_status_t status = tj_verify(exe, g, NULL, 0, &vo, &r);
    alloc.fail_at = -1;
    if (!status) {
      CHECK(r != NULL);
      if (r) CHECK_EQ_INT(want, r->verdict);
    } else {
      CHECK(r == NULL);
    }
    tj_verify_report_destroy(r);
    CHECK_EQ_INT(live_before, alloc.live_blocks);
    if (!status) {
      CHECK(failures > 10);
      break;
    }
    ++failures;
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(status));
    if (tj_status_code(status) != TJ_STATUS_OUT_OF_MEMORY) {
      fprintf(stderr, "n=%ld: %s\n", n, tj_status_message(status));
    }
    tj_status_free(status);
    if (n > 20000) {
      CHECK(!"tj_verify never succeeds");
      break;
    }
  }
  printf("# %ld failure points\n", failures);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  CHECK_EQ_INT(0, alloc.live_blocks);
  CHECK_EQ_INT(0, alloc.bad_frees);
}

TEST(every_allocation_failure_is_reported_and_leaks_nothing) {
  sweep(false);
  sweep(true);
}

//===--- tj_diagnose ---===//

static const char kDiagText[] =
    "func @frag[B](%x: f32[B,64], %wa: f32[64,1024], %wb: f32[1024,64], "
    "%wc: f32[64,512], %wd: f32[64,512], %n: i32[4,300]) {\n"
    "  %a = matmul %x, %wa : f32[B,1024]\n"
    "  %b = matmul %a, %wb : f32[B,64]\n"
    "  %c = matmul %b, %wc : f32[B,512]\n"
    "  %d = matmul %b, %wd : f32[B,512]\n"
    "  %e = add %c, %d : f32[B,512]\n"
    "  %s = sum %e {axes=[1]} : f32[B]\n"
    "  %m = argtopk %n {axis=1} : i64[4,300]\n"
    "  return %s as \"y\", %m as \"m\"\n"
    "}\n";

// A big value dying beside a small live one, then two values of half its
// size: the arena a third above what is ever live at once (fragmenting);
// an argsort of rows of 300 (no kernel template: argtopk's native host
// kernel, and a graph break on the reference interpreter under
// TJ_NATIVE_TOPK=off, read when the context is created); specialize=always
// (a recompile for the doubled batch). Bad arguments are INVALID_ARGUMENT
// naming them.
TEST(diagnose_answers_the_ladder) {
  setenv("TJ_NATIVE_TOPK", "off", 1);
  tj_context_t* ctx = tier_context("host");
  unsetenv("TJ_NATIVE_TOPK");
  tj_graph_t* g = NULL;
  if (ctx) {
    CHECK_OK(tj_graph_parse(ctx, kDiagText, strlen(kDiagText), "frag.tj", &g));
  }
  tj_compile_options_t co = x86_options();
  co.specialize = TJ_SPECIALIZE_ALWAYS;
  int64_t bv[1] = {64};
  tj_diagnose_report_t* r = NULL;
  if (g) CHECK_OK(tj_diagnose(g, &co, 1, kB, bv, 2, &r));
  if (r) {
    printf("%s", r->text);
    CHECK_STREQ("x86", r->target);
    CHECK(r->answers[TJ_DIAGNOSE_FRAGMENTING].yes);
    CHECK(r->arena_bytes > r->live_peak_bytes * 5 / 4);
    CHECK(r->answers[TJ_DIAGNOSE_GRAPH_BREAKS].yes);
    CHECK_EQ_INT(1, r->graph_breaks);
    CHECK_CONTAINS(r->answers[TJ_DIAGNOSE_GRAPH_BREAKS].measured, "(argtopk)");
    CHECK(r->answers[TJ_DIAGNOSE_RECOMPILING].yes);
    CHECK(r->recompiles >= 1);
    CHECK(!r->answers[TJ_DIAGNOSE_COLLECTIVE].yes);
    CHECK(r->answers[TJ_DIAGNOSE_FUSIBLE_TRAFFIC].yes);
    CHECK(r->eager_kernels > r->kernels);
    CHECK(r->unfused_run_ms > 0);
    CHECK_CONTAINS(r->text, "Am I fragmenting?            YES");
    CHECK_CONTAINS(r->text, "Does compiling pay?");
  }
  tj_diagnose_report_destroy(r);
  // Without specialization: no recompiles.
  co.specialize = TJ_SPECIALIZE_NEVER;
  r = NULL;
  if (g) CHECK_OK(tj_diagnose(g, &co, 1, kB, bv, 1, &r));
  if (r) {
    CHECK(!r->answers[TJ_DIAGNOSE_RECOMPILING].yes);
    CHECK_EQ_INT(0, r->recompiles);
  }
  tj_diagnose_report_destroy(r);
  // With the native kernel: no graph break, the kernel named as such.
  tj_context_t* native_ctx = tier_context("host");
  tj_graph_t* ng = NULL;
  if (native_ctx) {
    CHECK_OK(tj_graph_parse(native_ctx, kDiagText, strlen(kDiagText), "frag.tj",
                            &ng));
  }
  r = NULL;
  if (ng) CHECK_OK(tj_diagnose(ng, &co, 1, kB, bv, 1, &r));
  if (r) {
    CHECK(!r->answers[TJ_DIAGNOSE_GRAPH_BREAKS].yes);
    CHECK_EQ_INT(0, r->graph_breaks);
    CHECK_CONTAINS(r->answers[TJ_DIAGNOSE_GRAPH_BREAKS].measured,
                   "0 graph breaks (TJ_LOG=graph_breaks); 1 native host "
                   "kernels (argtopk), not graph breaks");
  }
  tj_diagnose_report_destroy(r);
  tj_graph_destroy(ng);
  tj_context_destroy(native_ctx);
  r = NULL;
  if (g) {
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "runs is 0",
                 tj_diagnose(g, &co, 1, kB, bv, 0, &r));
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "B",
                 tj_diagnose(g, &co, 0, NULL, NULL, 1, &r));
    CHECK(r == NULL);
  }
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// Every allocation failure inside tj_diagnose is OUT_OF_MEMORY and leaks
// nothing (a first call fills the context's kernel cache).
// "Am I fragmenting?" from the numbers: the planned arena against its live
// peak everywhere; on CUDA also the caching allocator's reserved -
// allocated (the stats' device memory), which x86 stats never have.
TEST(diagnose_fragmentation_reads_the_caching_allocator) {
  tj_diagnose_report_t r;
  memset(&r, 0, sizeof(r));
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_diagnose_fragmentation(&r, 1000000, 900000, &st);  // x86: no device
  const tj_diagnose_answer_t* a = &r.answers[TJ_DIAGNOSE_FRAGMENTING];
  CHECK(!a->yes);
  CHECK_STREQ("Am I fragmenting?", a->question);
  CHECK(strstr(a->measured, "caching allocator") == NULL);
  CHECK_EQ_INT(0, (int)r.device_reserved_bytes);
  // CUDA, little cached: the arena decides.
  st.device_reserved_bytes = 4000000;
  st.device_allocated_bytes = 3500000;
  st.device_peak_reserved_bytes = 4000000;
  st.device_peak_allocated_bytes = 3900000;
  tj_diagnose_fragmentation(&r, 1000000, 900000, &st);
  CHECK(!a->yes);
  CHECK_CONTAINS(a->measured,
                 "caching allocator: reserved 4.00 MB, allocated 3.50 MB, "
                 "reserved - allocated 0.50 MB (12% of it unused); peaks "
                 "4.00 / 3.90 MB");
  CHECK(r.device_reserved_bytes == 4000000);
  CHECK(r.device_allocated_bytes == 3500000);
  // An outgrown arena cached unused: half of what the driver gave.
  st.device_allocated_bytes = 2000000;
  tj_diagnose_fragmentation(&r, 1000000, 900000, &st);
  CHECK(a->yes);
  CHECK_CONTAINS(a->measured, "(50% of it unused)");
  CHECK_STREQ("bucket shapes; plan the arena per bucket", a->advice);
  // And the arena alone still answers yes without a device.
  memset(&st, 0, sizeof(st));
  tj_diagnose_fragmentation(&r, 1000000, 500000, &st);
  CHECK(a->yes);
  CHECK_CONTAINS(a->measured, "(50% above it)");
}

// An x86 executable has no device memory in its stats.
TEST(x86_stats_have_no_device_memory) {
  tj_context_t* ctx = tier_context("host");
  tj_graph_t* g = small_graph(ctx);
  tj_compile_options_t co = x86_options();
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &co, &exe));
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  st.device_reserved_bytes = -1;
  tj_executable_stats(exe, &st);
  CHECK(st.device_reserved_bytes == 0 && st.device_allocated_bytes == 0 &&
        st.device_arena_bytes == 0);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

TEST(diagnose_oom_sweep) {
  tj_test_allocator_t alloc;
  tj_test_allocator_initialize(&alloc, -1);
  tj_context_options_t options;
  tj_context_options_initialize(&options);
  options.allocator = tj_test_allocator_get(&alloc);
  options.cache_dir = "";
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&options, &ctx));
  static const char kTiny[] =
      "func @tiny[B](%x: f32[B,4]) {\n"
      "  %a = exp %x : f32[B,4]\n"
      "  %b = mul %a, %x : f32[B,4]\n"
      "  return %b as \"y\"\n"
      "}\n";
  tj_graph_t* g = NULL;
  if (ctx) CHECK_OK(tj_graph_parse(ctx, kTiny, strlen(kTiny), "tiny.tj", &g));
  tj_compile_options_t co = x86_options();
  co.x86.num_threads = 1;
  int64_t bv[1] = {2};
  tj_diagnose_report_t* r = NULL;
  if (g) CHECK_OK(tj_diagnose(g, &co, 1, kB, bv, 1, &r));
  tj_diagnose_report_destroy(r);
  long failures = 0;
  for (long n = 0; g; ++n) {
    long live_before = alloc.live_blocks;
    alloc.fail_at = alloc.allocations + n;
    r = NULL;
    tj_status_t status = tj_diagnose(g, &co, 1, kB, bv, 1, &r);
    alloc.fail_at = -1;
    CHECK(status ? r == NULL : r != NULL);
    tj_diagnose_report_destroy(r);
    CHECK_EQ_INT(live_before, alloc.live_blocks);
    if (!status) break;
    ++failures;
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(status));
    tj_status_free(status);
    if (n > 100000) break;
  }
  printf("# tj_diagnose: %ld failing allocation points\n", failures);
  CHECK(failures > 10);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  CHECK_EQ_INT(0, alloc.live_blocks);
}

int main(void) {
  RUN_TEST(small_graph_is_clean_at_every_tier);
  RUN_TEST(capstone_is_clean_at_every_tier);
  RUN_TEST(planted_wrong_kernel_in_the_capstone_is_named_with_edge_values);
  RUN_TEST(conditions_scale_with_the_terms);
  RUN_TEST(a_budget_below_one_rounding_is_drift);
  RUN_TEST(planted_wrong_kernel_is_named);
  RUN_TEST(planted_kernel_reaches_the_cuda_program);
  RUN_TEST(diagnose_answers_the_ladder);
  RUN_TEST(diagnose_oom_sweep);
  RUN_TEST(diagnose_fragmentation_reads_the_caching_allocator);
  RUN_TEST(x86_stats_have_no_device_memory);
  RUN_TEST(planted_wrong_fold_is_blamed_on_its_pass);
  RUN_TEST(reference_target_compares_outputs);
  RUN_TEST(given_inputs_and_errors);
  RUN_TEST(random_graphs_are_clean);
  RUN_TEST(every_allocation_failure_is_reported_and_leaks_nothing);
  TEST_MAIN_END();
}
