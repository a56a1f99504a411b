// Graphs whose fusion groups no kernel template lowers whole, and matmuls
// of dtypes the GEMM templates do not take (issue 15: "no graph break in
// any compiled executable runs on the reference interpreter"). Each is
// compiled for x86 at every ISA tier the host has (tier_ops_check.h),
// generic and specialized, run, and compared with tj_reference_run, with
// no graph break: the driver splits a group that does not lower into
// kernels of its nodes (backends/compile.c, split_unlowered) and decompose
// makes such a matmul a reduction (lib/passes/decompose.c). With
// TJ_SPLIT_UNLOWERED=off the same graphs still run, on the host, which
// shows that each one is a case the split is for.

#include <stdlib.h>

#include "tests/unit/tier_ops_check.h"

//===--- groups that do not lower whole ---===//

// nllloss's weighted form: a sum over a middle axis scaled by a gather,
// y[r, j] = sum_c x[r, c, j] * w[t[r, j]]; the reduction's epilogue reads
// the gather per output element.
static tj_graph_t* build_row_gather(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "row_gather");
  int64_t R = tj_graph_symbol(g, "R");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){R, 5, 6}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){5}, "w");
  tj_value_t t = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){R, 6}, "t");
  int32_t axis = 1;
  tj_value_t s = tj_graph_sum(g, x, 1, &axis, false);
  tj_graph_output(g, tj_graph_mul(g, s, tj_graph_gather(g, w, t, 0)), "y");
  return g;
}

static const spec_t kRowGatherIn[3] = {{TJ_DTYPE_F32, 3, {3, 5, 6}, -2, 2},
                                       {TJ_DTYPE_F32, 1, {5}, -1, 1},
                                       {TJ_DTYPE_I64, 2, {3, 6}, 0, 4}};
static const spec_t kRowGatherOut[1] = {{TJ_DTYPE_F32, 2, {3, 6}, 0, 0}};

// MeanVarianceNormalization's centring: x - mean over axes {0, 2}, a value
// stored in the shape of a reduction's input over two axes.
static tj_graph_t* build_centre(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "centre");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){4, 5, 6}, "x");
  int32_t axes[2] = {0, 2};
  tj_value_t m = tj_graph_mean(g, x, 2, axes, true);
  tj_graph_output(g, tj_graph_sub(g, x, m), "y");
  return g;
}

static const spec_t kCentreIn[1] = {{TJ_DTYPE_F32, 3, {4, 5, 6}, -3, 3}};
static const spec_t kCentreOut[1] = {{TJ_DTYPE_F32, 3, {4, 5, 6}, 0, 0}};

TEST(groups_that_do_not_lower_are_split) {
  check_ops("row_gather", build_row_gather, 3, kRowGatherIn, 1, kRowGatherOut,
            1e-5, NULL);
  check_ops("centre", build_centre, 1, kCentreIn, 1, kCentreOut, 1e-5, NULL);
}

//===--- matmuls of dtypes no GEMM template takes ---===//

typedef struct mm_case_t {
  const char* what;
  tj_dtype_t dtype;
  int32_t ra, rb, ry;
  int64_t a[4], b[4], y[4];
  bool symbolic;  // a's first dim the symbol B
} mm_case_t;

static const mm_case_t* g_mm;

static tj_graph_t* build_matmul(tj_context_t* ctx) {
  const mm_case_t* c = g_mm;
  tj_graph_t* g = new_graph(ctx, "matmul");
  int64_t a[4];
  memcpy(a, c->a, sizeof(a));
  if (c->symbolic) a[0] = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, c->dtype, c->ra, a, "a");
  tj_value_t w = tj_graph_input(g, c->dtype, c->rb, c->b, "b");
  tj_graph_output(g, tj_graph_matmul(g, x, w), "y");
  return g;
}

static const mm_case_t kMatmuls[] = {
    {"f64 2d", TJ_DTYPE_F64, 2, 2, 2, {5, 7}, {7, 3}, {5, 3}, true},
    {"f64 batched, broadcast",
     TJ_DTYPE_F64,
     4,
     3,
     4,
     {2, 1, 4, 6},
     {3, 6, 5},
     {2, 3, 4, 5},
     false},
    {"f64 vector by matrix", TJ_DTYPE_F64, 1, 2, 1, {6}, {6, 4}, {4}, false},
    {"f64 matrix by vector", TJ_DTYPE_F64, 2, 1, 1, {3, 6}, {6}, {3}, false},
    {"f64 dot", TJ_DTYPE_F64, 1, 1, 0, {33}, {33}, {0}, false},
    {"i32 2d", TJ_DTYPE_I32, 2, 2, 2, {5, 9}, {9, 4}, {5, 4}, true},
    {"i64 batched",
     TJ_DTYPE_I64,
     3,
     3,
     3,
     {2, 3, 8},
     {2, 8, 5},
     {2, 3, 5},
     false},
    {"u8 wraps", TJ_DTYPE_U8, 2, 2, 2, {4, 16}, {16, 3}, {4, 3}, false},
    {"i16 wraps", TJ_DTYPE_I16, 2, 2, 2, {3, 40}, {40, 2}, {3, 2}, true},
};

TEST(matmul_of_other_dtypes_is_a_reduction) {
  for (size_t i = 0; i < sizeof(kMatmuls) / sizeof(kMatmuls[0]); ++i) {
    const mm_case_t* c = &kMatmuls[i];
    g_mm = c;
    bool wide = c->dtype == TJ_DTYPE_U8 || c->dtype == TJ_DTYPE_I16;
    double lo = c->dtype == TJ_DTYPE_U8 ? 0 : (wide ? -3000 : -9);
    double hi = c->dtype == TJ_DTYPE_U8 ? 255 : (wide ? 3000 : 9);
    spec_t in[2] = {{c->dtype, c->ra, {0}, lo, hi},
                    {c->dtype, c->rb, {0}, lo, hi}};
    spec_t out[1] = {{c->dtype, c->ry, {0}, 0, 0}};
    memcpy(in[0].dims, c->a, sizeof(c->a));
    memcpy(in[1].dims, c->b, sizeof(c->b));
    memcpy(out[0].dims, c->y, sizeof(c->y));
    check_ops(c->what, build_matmul, 2, in, 1, out, 1e-12, NULL);
  }
}

//===--- the same graphs on the host, as before ---===//

// With the split off, the groups above run on the host (one graph break
// each), with the same numbers; the matmuls are reductions either way.
TEST(split_off_runs_them_on_the_host) {
  tj_context_t* saved[kTiers];
  memcpy(saved, g_ctx, sizeof(saved));
  setenv("TJ_SPLIT_UNLOWERED", "off", 1);
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o = tj_test_context_options();
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  unsetenv("TJ_SPLIT_UNLOWERED");
  check_ops_breaks("row_gather, split off", build_row_gather, 3, kRowGatherIn,
                   1, kRowGatherOut, 1e-5, NULL, 1);
  check_ops_breaks("centre, split off", build_centre, 1, kCentreIn, 1,
                   kCentreOut, 1e-5, NULL, 1);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  memcpy(g_ctx, saved, sizeof(saved));
}

//===--- every allocation failing in turn ---===//

// Compiles and runs the row gather (a split round: a run plan, fusion and
// memory plan dropped and made again) and an i64 matmul with an allocator
// that fails its Nth allocation: OUT_OF_MEMORY, nothing leaked, until it
// runs.
static void split_build(tj_graph_t* g) {
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){2, 5, 6}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){5}, "w");
  tj_value_t t = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){2, 6}, "t");
  tj_value_t n = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){3, 3}, "n");
  int32_t axis = 1;
  tj_value_t sum = tj_graph_sum(g, x, 1, &axis, false);
  tj_graph_output(g, tj_graph_mul(g, sum, tj_graph_gather(g, w, t, 0)), "y");
  tj_graph_output(g, tj_graph_matmul(g, n, n), "nn");
}

static tj_status_t split_run(tj_executable_t* exe) {
  static float x[60], w[5], y[12];
  static int64_t t[12], n[9], nn[9];
  for (int i = 0; i < 60; ++i) x[i] = (float)(i % 7) * 0.5f;
  for (int i = 0; i < 12; ++i) t[i] = i % 5;
  for (int i = 0; i < 9; ++i) n[i] = i - 4;
  tj_tensor_t ins[4] = {
      tj_tensor_make(x, TJ_DTYPE_F32, 3, (int64_t[]){2, 5, 6}),
      tj_tensor_make(w, TJ_DTYPE_F32, 1, (int64_t[]){5}),
      tj_tensor_make(t, TJ_DTYPE_I64, 2, (int64_t[]){2, 6}),
      tj_tensor_make(n, TJ_DTYPE_I64, 2, (int64_t[]){3, 3})};
  tj_tensor_t outs[2] = {
      tj_tensor_make(y, TJ_DTYPE_F32, 2, (int64_t[]){2, 6}),
      tj_tensor_make(nn, TJ_DTYPE_I64, 2, (int64_t[]){3, 3})};
  tj_status_t s = tj_executable_run(exe, ins, 4, outs, 2);
  if (!s) {
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    CHECK_EQ_INT(0, st.num_graph_breaks);
    CHECK_EQ_INT(15, (int)nn[0]);  // n row 0 . column 0: 16 + 3 - 4
  }
  return s;
}

static tj_status_t split_compile_run(tj_allocator_t allocator) {
  return tj_test_sweep_compile_run(allocator, "split_oom", split_build,
                                   split_run);
}

// Every allocation of a whole compile and run failed in turn
// (tj_test_every_allocation).
TEST(oom_sweep) { tj_test_every_allocation("split", split_compile_run); }

int main(void) {
  open_jits();
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o = tj_test_context_options();
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(groups_that_do_not_lower_are_split);
  RUN_TEST(matmul_of_other_dtypes_is_a_reduction);
  RUN_TEST(split_off_runs_them_on_the_host);
  RUN_TEST(oom_sweep);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  close_jits();
  TEST_MAIN_END();
}
