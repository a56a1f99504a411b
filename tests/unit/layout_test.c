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

static const int32_t kToLast[4] = {0, 2, 3, 1};

// A squeeze-excite block and a classifier head written in NHWC between
// NCHW ops (convs of the builder's channels_last): x [B, 16, 6, 6] to
// NHWC; the global pool over H and W (keepdims), sigmoid(pool * a) (a
// [16], small), x * that, back to NCHW; and softmax over the channels of
// the scaled value's global pool ([B, 16]). Every op moves to NCHW, where
// the pools are row reductions.
static tj_graph_t* build_se_head(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "se_head");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){B, 16, 6, 6}, "x");
  tj_value_t a = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){16}, "a");
  tj_value_t t = tj_graph_transpose(g, x, kToLast);
  tj_value_t m = tj_graph_mean(g, t, 2, (int32_t[]){1, 2}, true);
  tj_value_t y = tj_graph_mul(g, t, tj_graph_sigmoid(g, tj_graph_mul(g, m, a)));
  tj_graph_output(g, tj_graph_transpose(g, y, kToFirst), "y");
  tj_value_t pool = tj_graph_mean(g, y, 2, (int32_t[]){1, 2}, false);
  tj_graph_output(g, tj_graph_softmax(g, pool, 1), "probs");
  return g;
}

static const spec_t kSeIn[2] = {{TJ_DTYPE_F32, 4, {3, 16, 6, 6}, -1, 1},
                                {TJ_DTYPE_F32, 1, {16}, -2, 2}};
static const spec_t kSeOut[2] = {{TJ_DTYPE_F32, 4, {3, 16, 6, 6}, 0, 0},
                                 {TJ_DTYPE_F32, 2, {3, 16}, 0, 0}};

// A pool and a softmax between a transpose and its inverse: x [B, 8, 8, 8]
// to NCHW, a 3x3 L2 pool (stride 2, pads 1: decompose's pad, strided
// slices and adds, which move; x86's and CUDA's native max and average
// pool kernels read NCHW, and their transposes stay), log_softmax over the
// channels, back to NHWC.
static tj_graph_t* build_pools(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "pools");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){B, 8, 8, 8}, "x");
  tj_value_t t = tj_graph_transpose(g, x, kToFirst);
  tj_conv_attrs_t a;
  memset(&a, 0, sizeof(a));
  a.kernel[0] = a.kernel[1] = 3;
  a.strides[0] = a.strides[1] = 2;
  a.pads_begin[0] = a.pads_begin[1] = a.pads_end[0] = a.pads_end[1] = 1;
  a.p = 2;
  tj_value_t lp = tj_graph_lp_pool(g, t, &a);
  tj_value_t ls = tj_graph_log_softmax(g, lp, 1);
  tj_graph_output(g, tj_graph_transpose(g, ls, kToLast), "y");
  return g;
}

static const spec_t kPoolsIn[1] = {{TJ_DTYPE_F32, 4, {2, 8, 8, 8}, -2, 2}};
static const spec_t kPoolsOut[1] = {{TJ_DTYPE_F32, 4, {2, 4, 4, 8}, 0, 0}};

// A transformer's head split: x [B, 5, 32] as [B, 5, 4, 8], heads first
// ([B, 4, 5, 8]); a layer norm over the head dim (gamma, beta [8]); the
// rotate-half of the normed value (slices of the head dim, concat) times
// s [8], added; heads back, [B, 5, 32].
static tj_graph_t* build_heads(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "heads");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){B, 5, 32}, "x");
  tj_value_t gamma =
      tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){8}, "gamma");
  tj_value_t beta = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){8}, "beta");
  tj_value_t s = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){8}, "s");
  const int32_t heads[4] = {0, 2, 1, 3};
  tj_value_t t = tj_graph_transpose(
      g, tj_graph_reshape(g, x, 4, (int64_t[]){B, 5, 4, 8}), heads);
  tj_value_t n = tj_graph_layer_norm(g, t, gamma, beta, 1e-5);
  const int64_t whole = INT64_MAX;
  tj_value_t lo = tj_graph_slice(g, n, (int64_t[]){0, 0, 0, 0},
                                 (int64_t[]){whole, 4, 5, 4}, NULL);
  tj_value_t hi = tj_graph_slice(g, n, (int64_t[]){0, 0, 0, 4},
                                 (int64_t[]){whole, 4, 5, 8}, NULL);
  tj_value_t rot =
      tj_graph_concat(g, 2, (tj_value_t[]){tj_graph_neg(g, hi), lo}, 3);
  tj_value_t y = tj_graph_add(g, n, tj_graph_mul(g, rot, s));
  tj_value_t back = tj_graph_transpose(g, y, heads);
  tj_graph_output(g, tj_graph_reshape(g, back, 3, (int64_t[]){B, 5, 32}), "y");
  return g;
}

static const spec_t kHeadsIn[4] = {{TJ_DTYPE_F32, 3, {2, 5, 32}, -2, 2},
                                   {TJ_DTYPE_F32, 1, {8}, 0.5, 1.5},
                                   {TJ_DTYPE_F32, 1, {8}, -0.5, 0.5},
                                   {TJ_DTYPE_F32, 1, {8}, -1, 1}};
static const spec_t kHeadsOut[1] = {{TJ_DTYPE_F32, 3, {2, 5, 32}, 0, 0}};

// A pad and a concat along the channels: x [B, 4, 4, 8] to NCHW, padded
// (H by 1 before, W by 2 after, 0.5), joined with its tanh, back.
static tj_graph_t* build_pad_concat(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "pad_concat");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){B, 4, 4, 8}, "x");
  tj_value_t t = tj_graph_transpose(g, x, kToFirst);
  tj_value_t p =
      tj_graph_pad(g, t, (int64_t[]){0, 0, 1, 0}, (int64_t[]){0, 0, 0, 2}, 0.5);
  tj_value_t c =
      tj_graph_concat(g, 2, (tj_value_t[]){p, tj_graph_tanh(g, p)}, 1);
  tj_graph_output(g, tj_graph_transpose(g, c, kToLast), "y");
  return g;
}

static const spec_t kPadConcatIn[1] = {{TJ_DTYPE_F32, 4, {3, 4, 4, 8}, -2, 2}};
static const spec_t kPadConcatOut[1] = {{TJ_DTYPE_F32, 4, {3, 5, 6, 16}, 0, 0}};

TEST(moved_transposes_keep_the_numbers) {
  check_ops("nhwc", build_nhwc, 5, kNhwcIn, 2, kNhwcOut, 1e-4, NULL);
  check_ops("chain", build_chain, 2, kChainIn, 1, kChainOut, 1e-6, NULL);
  check_ops("se_head", build_se_head, 2, kSeIn, 2, kSeOut, 1e-5, NULL);
  check_ops("pools", build_pools, 1, kPoolsIn, 1, kPoolsOut, 1e-5, NULL);
  check_ops("heads", build_heads, 4, kHeadsIn, 1, kHeadsOut, 1e-4, NULL);
  check_ops("pad_concat", build_pad_concat, 1, kPadConcatIn, 1, kPadConcatOut,
            1e-6, NULL);
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
  const build_fn builds[6] = {build_nhwc,  build_chain, build_se_head,
                              build_pools, build_heads, build_pad_concat};
  const char* names[6] = {"nhwc",  "chain", "se_head",
                          "pools", "heads", "pad_concat"};
  for (int i = 0; i < 6; ++i) {
    int32_t k_on = tj_test_kernels_of(on, builds[i]);
    int32_t k_off = tj_test_kernels_of(off, builds[i]);
    printf("# %s: %d kernels, %d with TJ_LAYOUT=off\n", names[i], (int)k_on,
           (int)k_off);
    if (builds[i] == build_nhwc) {
      // The convs' transposes are kernels; the cancelled ones are gone.
      CHECK(k_on < k_off);
    } else {
      // The transposes were strided reads of the ops' kernels.
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

static void chain_build(tj_graph_t* g) {
  tj_value_t x =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){1, 4, 4, 4}, "x");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, "b");
  tj_value_t t = tj_graph_transpose(g, x, (int32_t[]){0, 3, 1, 2});
  // transpose -> exp -> + b (a reshape of it, 1/16 of the add: small)
  // -> inverse transpose
  tj_value_t e = tj_graph_exp(g, t);
  tj_value_t bb = tj_graph_reshape(g, b, 3, (int64_t[]){4, 1, 1});
  tj_graph_output(
      g, tj_graph_transpose(g, tj_graph_add(g, e, bb), (int32_t[]){0, 2, 3, 1}),
      "y");
}

static tj_status_t chain_run(tj_executable_t* exe) {
  static float x[64], b[4], y[64];
  for (int i = 0; i < 64; ++i) x[i] = (float)(i % 5) * 0.25f - 0.5f;
  for (int i = 0; i < 4; ++i) b[i] = (float)i;
  tj_tensor_t ins[2] = {
      tj_tensor_make(x, TJ_DTYPE_F32, 4, (int64_t[]){1, 4, 4, 4}),
      tj_tensor_make(b, TJ_DTYPE_F32, 1, (int64_t[]){4})};
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 4, (int64_t[]){1, 4, 4, 4});
  tj_status_t s = tj_executable_run(exe, ins, 2, &out, 1);
  if (!s) {
    // y[0, h, w, c] = exp(x[0, h, w, c]) + b[c]: element 5 is (0, 0, 1, 1)
    CHECK(fabsf(y[5] - (expf(x[5]) + b[1])) < 1e-5f);
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    CHECK_EQ_INT(1, st.num_kernels);
  }
  return s;
}

static tj_status_t chain_compile_run(tj_allocator_t allocator) {
  return tj_test_sweep_compile_run(allocator, "layout_oom", chain_build,
                                   chain_run);
}

// x NCHW [1, 4, 2, 2] -> NHWC -> pad H by 1 before -> concat with its exp
// along the channels -> softmax over W -> global pool (keepdims) -> NCHW:
// every kind of move but the elementwise one's, in one compile and run.
static void axes_build(tj_graph_t* g) {
  tj_value_t x =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){1, 4, 2, 2}, "x");
  tj_value_t t = tj_graph_transpose(g, x, kToLast);
  tj_value_t p =
      tj_graph_pad(g, t, (int64_t[]){0, 1, 0, 0}, (int64_t[]){0, 0, 0, 0}, 0.0);
  tj_value_t c =
      tj_graph_concat(g, 2, (tj_value_t[]){p, tj_graph_exp(g, p)}, 3);
  tj_value_t sm = tj_graph_softmax(g, c, 2);
  tj_value_t m = tj_graph_mean(g, sm, 2, (int32_t[]){1, 2}, true);
  tj_graph_output(g, tj_graph_transpose(g, m, kToFirst), "y");
}

static tj_status_t axes_run(tj_executable_t* exe) {
  static float x[16], y[8];
  for (int i = 0; i < 16; ++i) x[i] = (float)(i % 7) * 0.25f - 0.75f;
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 4, (int64_t[]){1, 4, 2, 2});
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 4, (int64_t[]){1, 8, 1, 1});
  tj_status_t s = tj_executable_run(exe, &in, 1, &out, 1);
  if (!s) {
    // Each (h, c) row's softmax over W sums to 1: its mean over the 3
    // x 2 positions is 1/2 in every channel (padded row or not). A pool
    // or softmax over a wrongly remapped axis gives other numbers.
    for (int i = 0; i < 8; ++i) CHECK(fabsf(y[i] - 0.5f) < 1e-5f);
  }
  return s;
}

static tj_status_t axes_compile_run(tj_allocator_t allocator) {
  return tj_test_sweep_compile_run(allocator, "layout_axes_oom", axes_build,
                                   axes_run);
}

// Every allocation of a whole compile and run failed in turn
// (tj_test_every_allocation).
TEST(oom_sweep) {
  tj_test_every_allocation("layout", chain_compile_run);
  tj_test_every_allocation("layout axes", axes_compile_run);
}

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
