// The layout pass (lib/passes/layout.c; issue 15, seed stage 07) in
// compiled executables: a channels-last conv chain (bias, relu, a residual
// add between the convs, one of the graph's input, a value in the middle
// also an output) and a
// chain of elementwise ops between a transpose and its inverse (a small
// broadcast operand, a where, a cast), each compiled for x86 at every
// ISA tier the host has, generic and specialized, and compared with the
// reference interpreter, with no graph break (tier_ops_check.h). The
// conv chain's transposes the pass cancels are kernels no longer: 6
// kernels where TJ_LAYOUT=off, with the same numbers, has 8. Then every
// allocation of a compile and run that moves transposes, failed in turn.

#include <stdlib.h>

#include "tests/unit/tier_ops_check.h"

static const int32_t kToFirst[4] = {0, 3, 1, 2};

// x [B, 6, 6, 8] channels-last: conv+bias, relu; conv, + the relu (the
// residual), relu; conv, + x (a residual that the first conv also reads,
// transposed), relu. Outputs that and the middle relu.
static tj_graph_t* build_nhwc(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "nhwc");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){B, 6, 6, 8}, "x");
  tj_value_t w[3];
  for (int i = 0; i < 3; ++i) {
    char name[8];
    snprintf(name, sizeof(name), "w%d", i);
    w[i] = tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){8, 8, 3, 3}, name);
  }
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){8}, "b");
  tj_conv_attrs_t a;
  memset(&a, 0, sizeof(a));
  a.pads_begin[0] = a.pads_begin[1] = a.pads_end[0] = a.pads_end[1] = 1;
  a.channels_last = true;
  tj_value_t r1 = tj_graph_relu(g, tj_graph_conv(g, x, w[0], b, &a));
  tj_value_t c2 = tj_graph_conv(g, r1, w[1], tj_value_none(), &a);
  tj_value_t r2 = tj_graph_relu(g, tj_graph_add(g, c2, r1));
  tj_value_t c3 = tj_graph_conv(g, r2, w[2], tj_value_none(), &a);
  tj_graph_output(g, tj_graph_relu(g, tj_graph_add(g, c3, x)), "y");
  tj_graph_output(g, r2, "mid");
  return g;
}

static const spec_t kNhwcIn[5] = {{TJ_DTYPE_F32, 4, {3, 6, 6, 8}, -1, 1},
                                  {TJ_DTYPE_F32, 4, {8, 8, 3, 3}, -0.3, 0.3},
                                  {TJ_DTYPE_F32, 4, {8, 8, 3, 3}, -0.3, 0.3},
                                  {TJ_DTYPE_F32, 4, {8, 8, 3, 3}, -0.3, 0.3},
                                  {TJ_DTYPE_F32, 1, {8}, -0.5, 0.5}};
static const spec_t kNhwcOut[2] = {{TJ_DTYPE_F32, 4, {3, 6, 6, 8}, 0, 0},
                                   {TJ_DTYPE_F32, 4, {3, 6, 6, 8}, 0, 0}};

// x [B, 5, 4, 16] -> [B, 16, 5, 4]; exp(t) * s (s [16, 1, 1], small),
// where(t > 0, that, t) as f64, back to [B, 5, 4, 16].
static tj_graph_t* build_chain(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "chain");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){B, 5, 4, 16}, "x");
  tj_value_t s = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){16, 1, 1}, "s");
  tj_value_t t = tj_graph_transpose(g, x, kToFirst);
  tj_value_t e = tj_graph_mul(g, tj_graph_exp(g, t), s);
  tj_value_t zero = tj_graph_full(g, TJ_DTYPE_F32, 0, NULL, 0.0);
  tj_value_t sel = tj_graph_where(g, tj_graph_gt(g, t, zero), e, t);
  tj_value_t wide = tj_graph_cast(g, sel, TJ_DTYPE_F64);
  tj_graph_output(g, tj_graph_transpose(g, wide, (int32_t[]){0, 2, 3, 1}), "y");
  return g;
}

static const spec_t kChainIn[2] = {{TJ_DTYPE_F32, 4, {2, 5, 4, 16}, -2, 2},
                                   {TJ_DTYPE_F32, 3, {16, 1, 1}, -1, 1}};
static const spec_t kChainOut[1] = {{TJ_DTYPE_F64, 4, {2, 5, 4, 16}, 0, 0}};

TEST(moved_transposes_keep_the_numbers) {
  check_ops("nhwc", build_nhwc, 5, kNhwcIn, 2, kNhwcOut, 1e-4, NULL);
  check_ops("chain", build_chain, 2, kChainIn, 1, kChainOut, 1e-6, NULL);
}

// With the pass off the transposes stay, as kernels or strided copies,
// and the numbers are the same.
TEST(layout_off_keeps_the_transposes) {
  tj_context_t* on = g_ctx[0];
  setenv("TJ_LAYOUT", "off", 1);
  tj_context_t* off = NULL;
  tj_context_options_t o = tj_test_context_options();
  CHECK_OK(tj_context_create(&o, &off));
  unsetenv("TJ_LAYOUT");
  if (!off) return;
  const build_fn builds[2] = {build_nhwc, build_chain};
  for (int i = 0; i < 2; ++i) {
    int32_t k_on = tj_test_kernels_of(on, builds[i]);
    int32_t k_off = tj_test_kernels_of(off, builds[i]);
    printf("# %s: %d kernels, %d with TJ_LAYOUT=off\n", i ? "chain" : "nhwc",
           (int)k_on, (int)k_off);
    // The chain is one pointwise kernel either way (its transposes are
    // strided reads, contiguous with the pass); the convs' are kernels.
    if (builds[i] == build_nhwc) {
      CHECK(k_on < k_off);
    } else {
      CHECK(k_on <= k_off);
    }
  }
  tj_context_t* saved = g_ctx[0];
  g_ctx[0] = off;
  check_ops("nhwc, layout off", build_nhwc, 5, kNhwcIn, 2, kNhwcOut, 1e-4,
            NULL);
  g_ctx[0] = saved;
  tj_context_destroy(off);
}

//===--- every allocation failing in turn ---===//

static tj_status_t chain_compile_run(tj_allocator_t allocator) {
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_test_sweep_context_create(allocator, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  s = tj_graph_create(ctx, "layout_oom", &g);
  if (!s) {
    tj_value_t x =
        tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){1, 2, 2, 4}, "x");
    tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, "b");
    tj_value_t t = tj_graph_transpose(g, x, (int32_t[]){0, 3, 1, 2});
    // transpose -> exp -> + b (a reshape of it) -> inverse transpose
    tj_value_t e = tj_graph_exp(g, t);
    tj_value_t bb = tj_graph_reshape(g, b, 3, (int64_t[]){4, 1, 1});
    tj_graph_output(
        g,
        tj_graph_transpose(g, tj_graph_add(g, e, bb), (int32_t[]){0, 2, 3, 1}),
        "y");
    s = tj_graph_finalize(g);
  }
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.x86.num_threads = 1;
  if (!s) s = tj_compile(g, &opts, &exe);
  if (!s) {
    static float x[16], b[4], y[16];
    for (int i = 0; i < 16; ++i) x[i] = (float)(i % 5) * 0.25f - 0.5f;
    for (int i = 0; i < 4; ++i) b[i] = (float)i;
    tj_tensor_t ins[2] = {
        tj_tensor_make(x, TJ_DTYPE_F32, 4, (int64_t[]){1, 2, 2, 4}),
        tj_tensor_make(b, TJ_DTYPE_F32, 1, (int64_t[]){4})};
    tj_tensor_t out =
        tj_tensor_make(y, TJ_DTYPE_F32, 4, (int64_t[]){1, 2, 2, 4});
    s = tj_executable_run(exe, ins, 2, &out, 1);
    if (!s) {
      // y[0, h, w, c] = exp(x[0, h, w, c]) + b[c]: element 5 is (0, 0, 1, 1)
      CHECK(fabsf(y[5] - (expf(x[5]) + b[1])) < 1e-5f);
      tj_executable_stats_t st = {.struct_size = sizeof(st)};
      tj_executable_stats(exe, &st);
      CHECK_EQ_INT(1, st.num_kernels);
    }
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

// Every allocation of a whole compile and run failed in turn
// (tj_test_every_allocation).
TEST(oom_sweep) { tj_test_every_allocation("layout", chain_compile_run); }

int main(void) {
  open_jits();
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o = tj_test_context_options();
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(moved_transposes_keep_the_numbers);
  RUN_TEST(layout_off_keeps_the_transposes);
  RUN_TEST(oom_sweep);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  close_jits();
  TEST_MAIN_END();
}
