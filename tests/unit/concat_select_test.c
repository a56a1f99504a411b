// A concat whose inputs are pointwise functions of slices of the same
// tensors is one select per element, one kernel, where the boxes made a
// kernel an input (rope14, issue 14; kir/lower_select.c). At every x86
// tier, generic (B symbolic) and specialized, against the reference
// interpreter (tier_ops_check.h; f32 within 1e-5, f16 8e-3, bf16 4e-2
// relative: the kernel rounds once where the reference rounds every op,
// here terms up to 4 in magnitude, 2 ulps of which the tolerances allow):
//   - rotary embeddings as the Llama block builds them, v * cos +
//     concat([-hi, lo], 3) * sin, with v an input and v a transposed view
//     of one ([B, T, H*D] read as [B, H, T, D]); head dims 8 and 64
//     (halves a multiple of every tier's lanes: vector loads), 10 and 9
//     (halves of 5, and of 5 and 4: vectors straddle the halves, gathers);
//     f32, f16, bf16; batch 0, 1 and 3;
//   - three inputs, scaled, negated and shifted, of unequal sizes;
//   - a non-last axis (the select's offsets uniform along the vector);
//   - a symbolic concat axis (x [B, S]: concat([3x, -x], 1), S = 5, 16);
// and the kernel counts: one kernel where the select applies, the boxes
// kept for a concat of two tensors (each box reads its input once), and
// TJ_CONCAT_SELECT=off (read when a context is created) bringing the boxes
// back with the same numbers.

#include <stdlib.h>

#include "tests/unit/tier_ops_check.h"

static tj_dtype_t g_dt = TJ_DTYPE_F32;
static int64_t g_d = 8;      // rope's head dim
static bool g_view = false;  // rope's v a transposed view of an input
static int64_t g_s = 5;      // the symbolic concat's S
enum { kT = 5, kH = 3 };

static double tol_of(tj_dtype_t dt) {
  return dt == TJ_DTYPE_BF16 ? 4e-2 : dt == TJ_DTYPE_F16 ? 8e-3 : 1e-5;
}

static tj_value_t slice_last(tj_graph_t* g, tj_value_t v, int32_t rank,
                             int32_t axis, int64_t start, int64_t stop) {
  int64_t starts[TJ_MAX_RANK] = {0}, stops[TJ_MAX_RANK];
  for (int32_t d = 0; d < rank; ++d) stops[d] = INT64_MAX;
  starts[axis] = start;
  stops[axis] = stop;
  return tj_graph_slice(g, v, starts, stops, NULL);
}

// v [B, H, T, D] (or x [B, T, H*D] viewed so), cos and sin [T, D].
static tj_graph_t* build_rope(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "rope");
  int64_t B = tj_graph_symbol(g, "B"), D = g_d, half = g_d / 2;
  tj_value_t v;
  if (g_view) {
    tj_value_t x = tj_graph_input(g, g_dt, 3, (int64_t[]){B, kT, kH * D}, "x");
    v = tj_graph_transpose(g,
                           tj_graph_reshape(g, x, 4, (int64_t[]){B, kT, kH, D}),
                           (const int32_t[]){0, 2, 1, 3});
  } else {
    v = tj_graph_input(g, g_dt, 4, (int64_t[]){B, kH, kT, D}, "v");
  }
  tj_value_t c = tj_graph_input(g, g_dt, 2, (int64_t[]){kT, D}, "cos");
  tj_value_t s = tj_graph_input(g, g_dt, 2, (int64_t[]){kT, D}, "sin");
  tj_value_t lo = slice_last(g, v, 4, 3, 0, half);
  tj_value_t hi = slice_last(g, v, 4, 3, half, INT64_MAX);
  tj_value_t rot =
      tj_graph_concat(g, 2, (tj_value_t[]){tj_graph_neg(g, hi), lo}, 3);
  tj_graph_output(
      g, tj_graph_add(g, tj_graph_mul(g, v, c), tj_graph_mul(g, rot, s)), "y");
  return g;
}

static tj_value_t scalar(tj_graph_t* g, double value) {
  return tj_graph_full(g, g_dt, 0, NULL, value);
}

// x [B, 13]: concat([2 x[:, 9:], -x[:, 4:9], x[:, :4] + 1], 1) * x + 0.5.
static tj_graph_t* build_three(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "three");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, g_dt, 2, (int64_t[]){B, 13}, "x");
  tj_value_t a =
      tj_graph_mul(g, slice_last(g, x, 2, 1, 9, INT64_MAX), scalar(g, 2.0));
  tj_value_t b = tj_graph_neg(g, slice_last(g, x, 2, 1, 4, 9));
  tj_value_t c = tj_graph_add(g, slice_last(g, x, 2, 1, 0, 4), scalar(g, 1.0));
  tj_value_t y = tj_graph_concat(g, 3, (tj_value_t[]){a, b, c}, 1);
  tj_graph_output(g, tj_graph_add(g, tj_graph_mul(g, y, x), scalar(g, 0.5)),
                  "y");
  return g;
}

// x [B, 7, 6]: concat([x[:, 3:], -x[:, :3]], 1) + x.
static tj_graph_t* build_middle(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "middle");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, g_dt, 3, (int64_t[]){B, 7, 6}, "x");
  tj_value_t y = tj_graph_concat(
      g, 2,
      (tj_value_t[]){slice_last(g, x, 3, 1, 3, INT64_MAX),
                     tj_graph_neg(g, slice_last(g, x, 3, 1, 0, 3))},
      1);
  tj_graph_output(g, tj_graph_add(g, y, x), "y");
  return g;
}

// x [B, S] (S symbolic): concat([3 x, -x], 1).
static tj_graph_t* build_symbolic(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "symbolic");
  int64_t B = tj_graph_symbol(g, "B"), S = tj_graph_symbol(g, "S");
  tj_value_t x = tj_graph_input(g, g_dt, 2, (int64_t[]){B, S}, "x");
  tj_value_t y = tj_graph_concat(
      g, 2,
      (tj_value_t[]){tj_graph_mul(g, x, scalar(g, 3.0)), tj_graph_neg(g, x)},
      1);
  tj_graph_output(g, y, "y");
  return g;
}

// x, y [B, 6]: concat([x, -y], 1) (two tensors: boxes).
static tj_graph_t* build_two_tensors(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "two_tensors");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, g_dt, 2, (int64_t[]){B, 6}, "x");
  tj_value_t y = tj_graph_input(g, g_dt, 2, (int64_t[]){B, 6}, "y");
  tj_graph_output(
      g, tj_graph_concat(g, 2, (tj_value_t[]){x, tj_graph_neg(g, y)}, 1), "y");
  return g;
}

static spec_t spec(int32_t rank, const int64_t* dims) {
  spec_t s = {.dtype = g_dt, .rank = rank, .lo = -2.0, .hi = 2.0};
  memcpy(s.dims, dims, sizeof(int64_t) * (size_t)rank);
  return s;
}

static void check_rope(int64_t b) {
  spec_t in[3], out = spec(4, (int64_t[]){b, kH, kT, g_d});
  in[0] = g_view ? spec(3, (int64_t[]){b, kT, kH * g_d})
                 : spec(4, (int64_t[]){b, kH, kT, g_d});
  in[1] = in[2] = spec(2, (int64_t[]){kT, g_d});
  char what[96];
  snprintf(what, sizeof(what), "rope %s d%lld b%lld%s", tj_dtype_name(g_dt),
           (long long)g_d, (long long)b, g_view ? " view" : "");
  check_ops(what, build_rope, 3, in, 1, &out, tol_of(g_dt), NULL);
}

static const tj_dtype_t kDtypes[3] = {TJ_DTYPE_F32, TJ_DTYPE_F16,
                                      TJ_DTYPE_BF16};

TEST(rope_numbers) {
  const int64_t heads[4] = {8, 64, 10, 9};
  for (int t = 0; t < 3; ++t) {
    g_dt = kDtypes[t];
    for (int h = 0; h < 4; ++h) {
      g_d = heads[h];
      for (int view = 0; view < 2; ++view) {
        g_view = view;
        check_rope(3);
      }
    }
    g_d = 8;
    g_view = false;
    check_rope(0);
    check_rope(1);
  }
  g_dt = TJ_DTYPE_F32;
}

TEST(three_inputs) {
  for (int t = 0; t < 3; ++t) {
    g_dt = kDtypes[t];
    spec_t x = spec(2, (int64_t[]){3, 13});
    check_ops("three", build_three, 1, &x, 1, &x, tol_of(g_dt), NULL);
  }
  g_dt = TJ_DTYPE_F32;
}

TEST(middle_axis) {
  for (int t = 0; t < 3; ++t) {
    g_dt = kDtypes[t];
    spec_t x = spec(3, (int64_t[]){3, 7, 6});
    check_ops("middle", build_middle, 1, &x, 1, &x, tol_of(g_dt), NULL);
  }
  g_dt = TJ_DTYPE_F32;
}

TEST(symbolic_axis) {
  const int64_t sizes[2] = {5, 16};
  for (int i = 0; i < 2; ++i) {
    g_s = sizes[i];
    spec_t x = spec(2, (int64_t[]){3, g_s});
    spec_t y = spec(2, (int64_t[]){3, 2 * g_s});
    check_ops("symbolic", build_symbolic, 1, &x, 1, &y, 1e-6, NULL);
  }
}

TEST(kernel_counts) {
  g_dt = TJ_DTYPE_F32;
  g_d = 8;
  g_view = false;
  CHECK_EQ_INT(1, tj_test_kernels_of(g_ctx[0], build_rope));
  CHECK_EQ_INT(1, tj_test_kernels_of(g_ctx[0], build_three));
  CHECK_EQ_INT(1, tj_test_kernels_of(g_ctx[0], build_middle));
  CHECK_EQ_INT(1, tj_test_kernels_of(g_ctx[0], build_symbolic));
  CHECK_EQ_INT(2, tj_test_kernels_of(g_ctx[0], build_two_tensors));
  spec_t two[2] = {spec(2, (int64_t[]){3, 6}), spec(2, (int64_t[]){3, 6})};
  spec_t two_out = spec(2, (int64_t[]){3, 12});
  check_ops("two tensors", build_two_tensors, 2, two, 1, &two_out, 1e-6, NULL);
}

// TJ_CONCAT_SELECT=off: the boxes again (two kernels for rope, three for
// three inputs), the same numbers.
TEST(switch_off) {
  tj_context_t* saved[kTiers];
  memcpy(saved, g_ctx, sizeof(saved));
  setenv("TJ_CONCAT_SELECT", "off", 1);
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  unsetenv("TJ_CONCAT_SELECT");
  g_dt = TJ_DTYPE_F32;
  g_d = 10;
  g_view = true;
  CHECK_EQ_INT(2, tj_test_kernels_of(g_ctx[0], build_rope));
  CHECK_EQ_INT(3, tj_test_kernels_of(g_ctx[0], build_three));
  check_rope(3);
  spec_t x = spec(2, (int64_t[]){3, 13});
  check_ops("three boxes", build_three, 1, &x, 1, &x, 1e-5, NULL);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  memcpy(g_ctx, saved, sizeof(saved));
  g_d = 8;
  g_view = false;
}

int main(void) {
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(rope_numbers);
  RUN_TEST(three_inputs);
  RUN_TEST(middle_axis);
  RUN_TEST(symbolic_axis);
  RUN_TEST(kernel_counts);
  RUN_TEST(switch_off);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  close_jits();
  TEST_MAIN_END();
}
