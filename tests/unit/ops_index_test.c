// The indexing ops and reductions of issue 15 (task ops) as native
// kernels: reductions over any set of axes (iterated in the kernel, no
// permute), gather_elements and gather_nd. Every graph is compiled for x86
// at each ISA tier the host has (a context per tier: the host's, AVX2,
// SSE2; asking for a tier above the host's gives the host's), generic
// (symbolic dims as params) and specialized to the shape, run, and
// compared with tj_reference_run: floats within a relative tolerance,
// integers and bools exactly. Each compiled executable must have no graph
// break. Edge values: negative and out-of-range indices, empty dims,
// symbolic dims; errors must be the reference's.

#include "tests/unit/tier_ops_check.h"

//===--- reductions over any set of axes ---===//

typedef tj_value_t (*reduce_fn)(tj_graph_t*, tj_value_t, int32_t,
                                const int32_t*, bool);

// The case the builders below read.
static struct {
  reduce_fn fn;
  tj_dtype_t dtype;
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];  // -1: the symbol B
  int32_t num_axes;
  int32_t axes[TJ_MAX_RANK];
  bool keepdims;
} g_red;

static tj_value_t red_input(tj_graph_t* g, const char* name) {
  int64_t B = tj_graph_symbol(g, "B");
  int64_t dims[TJ_MAX_RANK];
  for (int32_t d = 0; d < g_red.rank; ++d) {
    dims[d] = g_red.dims[d] < 0 ? B : g_red.dims[d];
  }
  return tj_graph_input(g, g_red.dtype, g_red.rank, dims, name);
}

static tj_graph_t* build_reduce(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "reduce_axes");
  tj_value_t x = red_input(g, "x");
  tj_graph_output(g, g_red.fn(g, x, g_red.num_axes, g_red.axes, g_red.keepdims),
                  "y");
  return g;
}

// A prologue (x * y + 1, y broadcast along the first axis) and an epilogue
// (the reduction times 2), and a second reduction of the same input.
static tj_graph_t* build_reduce_fused(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "reduce_axes_fused");
  tj_value_t x = red_input(g, "x");
  int64_t B = tj_graph_symbol(g, "B"), ydims[TJ_MAX_RANK];
  for (int32_t d = 0; d < g_red.rank; ++d) {
    ydims[d] = d == 0 ? 1 : g_red.dims[d] < 0 ? B : g_red.dims[d];
  }
  tj_value_t y = tj_graph_input(g, g_red.dtype, g_red.rank, ydims, "y");
  tj_value_t one = tj_graph_full(g, g_red.dtype, 0, NULL, 1.0);
  tj_value_t p = tj_graph_add(g, tj_graph_mul(g, x, y), one);
  tj_value_t s = g_red.fn(g, p, g_red.num_axes, g_red.axes, g_red.keepdims);
  tj_graph_output(g, tj_graph_add(g, s, s), "s2");
  tj_graph_output(
      g, tj_graph_max(g, p, g_red.num_axes, g_red.axes, g_red.keepdims), "m");
  return g;
}

// The reduced shape of g_red (B = |b|).
static spec_t red_out(int64_t b) {
  spec_t s = {g_red.dtype, 0, {0}, 0, 0};
  for (int32_t d = 0; d < g_red.rank; ++d) {
    bool reduced = g_red.num_axes == 0;
    for (int32_t k = 0; k < g_red.num_axes; ++k) {
      int32_t a =
          g_red.axes[k] < 0 ? g_red.axes[k] + g_red.rank : g_red.axes[k];
      reduced |= a == d;
    }
    int64_t v = g_red.dims[d] < 0 ? b : g_red.dims[d];
    if (!reduced) {
      s.dims[s.rank++] = v;
    } else if (g_red.keepdims) {
      s.dims[s.rank++] = 1;
    }
  }
  return s;
}

static void check_reduce(const char* what, bool fused, double lo, double hi,
                         double tol) {
  for (int64_t b = 0; b <= 5; b += 5) {
    spec_t in[2] = {{g_red.dtype, g_red.rank, {0}, lo, hi},
                    {g_red.dtype, g_red.rank, {0}, lo, hi}};
    for (int32_t d = 0; d < g_red.rank; ++d) {
      in[0].dims[d] = g_red.dims[d] < 0 ? b : g_red.dims[d];
      in[1].dims[d] = d == 0 ? 1 : in[0].dims[d];
    }
    spec_t out[2] = {red_out(b), red_out(b)};
    if (fused) {
      check_ops(what, build_reduce_fused, 2, in, 2, out, tol, NULL);
    } else {
      check_ops(what, build_reduce, 1, in, 1, out, tol, NULL);
    }
  }
}

// Axes that are not one strided axis of the input: the kernel iterates
// their product and computes each coordinate; every op, keepdims or not,
// axes given in any order or negative.
TEST(reduce_axes_not_one_strided_axis) {
  static const struct {
    const char* name;
    reduce_fn fn;
    double lo, hi;
  } kOps[] = {
      {"sum", tj_graph_sum, -1, 1},      {"mean", tj_graph_mean, -1, 1},
      {"max", tj_graph_max, -9, 9},      {"min", tj_graph_min, -9, 9},
      {"prod", tj_graph_prod, 0.9, 1.1},
  };
  static const struct {
    int32_t rank;
    int64_t dims[4];
    int32_t num_axes;
    int32_t axes[3];
  } kShapes[] = {
      {3, {-1, 7, 33}, 2, {0, 2}},        // outer and inner around a row
      {3, {6, -1, 9}, 2, {2, 0}},         // given out of order
      {4, {3, 5, -1, 17}, 2, {1, 3}},     // two rows dims between
      {4, {4, -1, 3, 5}, 3, {0, -2, 3}},  // three axes, one negative
      {4, {2, 3, 4, -1}, 2, {0, 3}},      // the symbolic dim reduced
  };
  for (size_t o = 0; o < TJ_ARRAY_SIZE(kOps); ++o) {
    for (size_t s = 0; s < TJ_ARRAY_SIZE(kShapes); ++s) {
      for (int keep = 0; keep < 2; ++keep) {
        g_red.fn = kOps[o].fn;
        g_red.dtype = TJ_DTYPE_F32;
        g_red.rank = kShapes[s].rank;
        memcpy(g_red.dims, kShapes[s].dims, sizeof(kShapes[s].dims));
        g_red.num_axes = kShapes[s].num_axes;
        memcpy(g_red.axes, kShapes[s].axes, sizeof(kShapes[s].axes));
        g_red.keepdims = keep != 0;
        // f32 accumulation against the reference's f64.
        check_reduce(kOps[o].name, false, kOps[o].lo, kOps[o].hi, 2e-5);
      }
    }
  }
}

// Integers (exact), f64, bool max/min (any/all), and f16.
TEST(reduce_axes_dtypes) {
  static const struct {
    const char* name;
    reduce_fn fn;
    tj_dtype_t dtype;
    double lo, hi, tol;
  } kCases[] = {
      {"sum_i32", tj_graph_sum, TJ_DTYPE_I32, -50, 50, 0},
      {"max_i64", tj_graph_max, TJ_DTYPE_I64, -1e6, 1e6, 0},
      {"min_i8", tj_graph_min, TJ_DTYPE_I8, -100, 100, 0},
      {"sum_f64", tj_graph_sum, TJ_DTYPE_F64, -1, 1, 1e-12},
      {"max_bool", tj_graph_max, TJ_DTYPE_BOOL, 0, 1, 0},
      {"min_bool", tj_graph_min, TJ_DTYPE_BOOL, 0, 1, 0},
      {"sum_f16", tj_graph_sum, TJ_DTYPE_F16, -1, 1, 2e-2},
  };
  for (size_t c = 0; c < TJ_ARRAY_SIZE(kCases); ++c) {
    g_red.fn = kCases[c].fn;
    g_red.dtype = kCases[c].dtype;
    g_red.rank = 3;
    memcpy(g_red.dims, (int64_t[TJ_MAX_RANK]){3, -1, 11}, sizeof(g_red.dims));
    g_red.num_axes = 2;
    memcpy(g_red.axes, (int32_t[TJ_MAX_RANK]){0, 2}, sizeof(g_red.axes));
    g_red.keepdims = c % 2 == 0;
    check_reduce(kCases[c].name, false, kCases[c].lo, kCases[c].hi,
                 kCases[c].tol);
  }
}

// A fused prologue reading a broadcast operand, an epilogue, and two
// reductions of one value in one kernel.
TEST(reduce_axes_fused) {
  g_red.fn = tj_graph_sum;
  g_red.dtype = TJ_DTYPE_F32;
  g_red.rank = 3;
  memcpy(g_red.dims, (int64_t[TJ_MAX_RANK]){4, -1, 19}, sizeof(g_red.dims));
  g_red.num_axes = 2;
  memcpy(g_red.axes, (int32_t[TJ_MAX_RANK]){0, 2}, sizeof(g_red.axes));
  for (int keep = 0; keep < 2; ++keep) {
    g_red.keepdims = keep != 0;
    check_reduce("fused", true, -1, 1, 2e-5);
  }
}

// Empty reduced axes give the identity; an empty kept axis gives nothing.
TEST(reduce_axes_empty) {
  g_red.fn = tj_graph_sum;
  g_red.dtype = TJ_DTYPE_F32;
  g_red.rank = 3;
  memcpy(g_red.dims, (int64_t[TJ_MAX_RANK]){0, 4, -1}, sizeof(g_red.dims));
  g_red.num_axes = 2;
  memcpy(g_red.axes, (int32_t[TJ_MAX_RANK]){0, 2}, sizeof(g_red.axes));
  g_red.keepdims = false;
  check_reduce("empty_sum", false, -1, 1, 1e-6);
  g_red.fn = tj_graph_max;
  check_reduce("empty_max", false, -1, 1, 1e-6);
  memcpy(g_red.dims, (int64_t[TJ_MAX_RANK]){3, 0, -1}, sizeof(g_red.dims));
  check_reduce("empty_rows", false, -1, 1, 1e-6);
}

//===--- gather_elements and gather_nd ---===//

// Three gather_elements: along a middle axis with a symbolic batch, i64
// indices negative and out of range, fused with a consumer; along the last
// axis with i32 indices computed in the kernel (i * 2 - 3); along the
// first axis of an i32 table with indices smaller than it along axis 1.
static tj_graph_t* build_gather_elements(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "gather_elements");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t a = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){B, 6, 7}, "a");
  tj_value_t i = tj_graph_input(g, TJ_DTYPE_I64, 3, (int64_t[]){B, 9, 7}, "i");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 5}, "b");
  tj_value_t j = tj_graph_input(g, TJ_DTYPE_I32, 2, (int64_t[]){3, 8}, "j");
  tj_value_t c = tj_graph_input(g, TJ_DTYPE_I32, 2, (int64_t[]){4, 6}, "c");
  tj_value_t k = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){B, 5}, "k");
  tj_value_t y = tj_graph_gather_elements(g, a, i, 1);
  tj_graph_output(g, tj_graph_exp(g, y), "y");
  tj_value_t two = tj_graph_full(g, TJ_DTYPE_I32, 0, NULL, 2);
  tj_value_t three = tj_graph_full(g, TJ_DTYPE_I32, 0, NULL, 3);
  tj_value_t jj = tj_graph_sub(g, tj_graph_mul(g, j, two), three);
  tj_graph_output(g, tj_graph_gather_elements(g, b, jj, -1), "z");
  tj_graph_output(g, tj_graph_gather_elements(g, c, k, 0), "w");
  return g;
}

TEST(gather_elements_like_onnx) {
  for (int64_t B = 0; B <= 5; B += 5) {
    spec_t in[6] = {{TJ_DTYPE_F32, 3, {B, 6, 7}, -2, 2},
                    {TJ_DTYPE_I64, 3, {B, 9, 7}, -8, 8},
                    {TJ_DTYPE_F32, 2, {3, 5}, -2, 2},
                    {TJ_DTYPE_I32, 2, {3, 8}, -2, 5},
                    {TJ_DTYPE_I32, 2, {4, 6}, -1000, 1000},
                    {TJ_DTYPE_I64, 2, {B, 5}, -5, 5}};
    spec_t out[3] = {{TJ_DTYPE_F32, 3, {B, 9, 7}, 0, 0},
                     {TJ_DTYPE_F32, 2, {3, 8}, 0, 0},
                     {TJ_DTYPE_I32, 2, {B, 5}, 0, 0}};
    check_ops("gather_elements", build_gather_elements, 6, in, 3, out, 1e-6,
              NULL);
  }
}

// gather_nd with batch_dims 1 (a [B, 5, 6, 3], indices [B, 4, 2] -> [B, 4,
// 3]), batch_dims 0 picking elements (a [5, 6, 3], indices [B, 3] -> [B])
// and rows (a [7, 4] i32, indices [B, 2, 1] i32 -> [B, 2, 4]).
static tj_graph_t* build_gather_nd(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "gather_nd");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t a =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){B, 5, 6, 3}, "a");
  tj_value_t i = tj_graph_input(g, TJ_DTYPE_I64, 3, (int64_t[]){B, 4, 2}, "i");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){5, 6, 3}, "b");
  tj_value_t j = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){B, 3}, "j");
  tj_value_t c = tj_graph_input(g, TJ_DTYPE_I32, 2, (int64_t[]){7, 4}, "c");
  tj_value_t k = tj_graph_input(g, TJ_DTYPE_I32, 3, (int64_t[]){B, 2, 1}, "k");
  tj_graph_output(g, tj_graph_neg(g, tj_graph_gather_nd(g, a, i, 1)), "y");
  tj_graph_output(g, tj_graph_gather_nd(g, b, j, 0), "z");
  tj_graph_output(g, tj_graph_gather_nd(g, c, k, 0), "w");
  return g;
}

TEST(gather_nd_like_onnx) {
  for (int64_t B = 0; B <= 5; B += 5) {
    spec_t in[6] = {{TJ_DTYPE_F32, 4, {B, 5, 6, 3}, -2, 2},
                    {TJ_DTYPE_I64, 3, {B, 4, 2}, -7, 7},
                    {TJ_DTYPE_F32, 3, {5, 6, 3}, -2, 2},
                    {TJ_DTYPE_I64, 2, {B, 3}, -7, 7},
                    {TJ_DTYPE_I32, 2, {7, 4}, -1000, 1000},
                    {TJ_DTYPE_I32, 3, {B, 2, 1}, -9, 9}};
    spec_t out[3] = {{TJ_DTYPE_F32, 3, {B, 4, 3}, 0, 0},
                     {TJ_DTYPE_F32, 1, {B}, 0, 0},
                     {TJ_DTYPE_I32, 3, {B, 2, 4}, 0, 0}};
    check_ops("gather_nd", build_gather_nd, 6, in, 3, out, 1e-6, NULL);
  }
}

// An indexed axis of symbolic size 0 with a non-empty result is the
// reference's INVALID_ARGUMENT, from the compiled kernel's check too.
static tj_graph_t* build_gather_elements_empty(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "gather_elements_empty");
  int64_t N = tj_graph_symbol(g, "N");
  tj_value_t a = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, N}, "a");
  tj_value_t i = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){3, 2}, "i");
  tj_graph_output(g, tj_graph_gather_elements(g, a, i, 1), "y");
  return g;
}

static tj_graph_t* build_gather_nd_empty(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "gather_nd_empty");
  int64_t N = tj_graph_symbol(g, "N");
  tj_value_t a = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){N, 4}, "a");
  tj_value_t i = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){2, 1}, "i");
  tj_graph_output(g, tj_graph_gather_nd(g, a, i, 0), "y");
  return g;
}

TEST(gathers_from_an_empty_axis) {
  spec_t in[2] = {{TJ_DTYPE_F32, 2, {3, 0}, -1, 1},
                  {TJ_DTYPE_I64, 2, {3, 2}, -3, 3}};
  spec_t out[1] = {{TJ_DTYPE_F32, 2, {3, 2}, 0, 0}};
  check_ops("gather_elements_empty", build_gather_elements_empty, 2, in, 1, out,
            0, "gather_elements (node %2): axis 1 of f32[3,0] is empty");
  spec_t in2[2] = {{TJ_DTYPE_F32, 2, {0, 4}, -1, 1},
                   {TJ_DTYPE_I64, 2, {2, 1}, -3, 3}};
  spec_t out2[1] = {{TJ_DTYPE_F32, 2, {2, 4}, 0, 0}};
  check_ops("gather_nd_empty", build_gather_nd_empty, 2, in2, 1, out2, 0,
            "gather_nd (node %2): axis 0 of f32[0,4] is empty");
}

// Shape errors name the op and the rule.
TEST(gather_shape_errors) {
  tj_graph_t* g = new_graph(g_ctx[0], "bad");
  tj_value_t a = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 4}, "a");
  tj_value_t i = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){5, 2}, "i");
  tj_graph_gather_elements(g, a, i, 1);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "gather_elements",
               tj_graph_finalize(g));
  tj_graph_destroy(g);
  g = new_graph(g_ctx[0], "bad");
  a = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 4}, "a");
  i = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){5, 3}, "i");
  tj_graph_gather_nd(g, a, i, 0);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "batch_dims + k",
               tj_graph_finalize(g));
  tj_graph_destroy(g);
  g = new_graph(g_ctx[0], "bad");
  a = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 4}, "a");
  i = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){5, 1}, "i");
  tj_graph_gather_nd(g, a, i, 0);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "indices must be i32 or i64",
               tj_graph_finalize(g));
  tj_graph_destroy(g);
}

//===--- gradients of the gathers ---===//

// The scatter-add the VJPs must equal, in plain loops: gather_elements of
// a [4, 5] along axis 1 by i [4, 7], gather_nd of c [3, 4, 2] (batch 1)
// by j [3, 2, 1]; gradients of sum(y * w) are w scattered.
static const int64_t kGi[4][7] = {{0, 4, 4, -1, 9, 2, -7},
                                  {1, 1, 1, 0, 3, -5, 2},
                                  {4, 3, 2, 1, 0, -2, -3},
                                  {0, 0, 0, 0, 0, 0, 6}};
static const int64_t kGj[3][2] = {{3, -1}, {0, 0}, {7, 2}};

static int64_t pick(int64_t v, int64_t n) {
  int64_t p = v < 0 ? v + n : v;
  return p >= n ? n - 1 : p < 0 ? 0 : p;
}

static tj_graph_t* build_gather_grads(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "gather_grads");
  tj_value_t a = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){4, 5}, "a");
  tj_value_t c = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){3, 4, 2}, "c");
  tj_value_t i = tj_graph_constant(g, TJ_DTYPE_I64, 2, (int64_t[]){4, 7}, kGi,
                                   sizeof(kGi));
  tj_value_t j = tj_graph_constant(g, TJ_DTYPE_I64, 3, (int64_t[]){3, 2, 1},
                                   kGj, sizeof(kGj));
  tj_graph_output(g, tj_graph_gather_elements(g, a, i, 1), "y");
  tj_graph_output(g, tj_graph_gather_nd(g, c, j, 1), "z");
  CHECK_OK(tj_graph_finalize(g));
  tj_graph_t* joint = NULL;
  CHECK_OK(tj_graph_grad(g, 0, NULL, 0, NULL, &joint));
  tj_graph_destroy(g);
  return joint;
}

TEST(gather_vjps_scatter_add) {
  // The joint graph on the reference against the loops, then compiled
  // (check_ops: every tier, no graph break) against the reference.
  tj_graph_t* joint = build_gather_grads(g_ctx[0]);
  float a[20] = {0}, c[24] = {0}, gy[28], gz[3 * 2 * 2];
  float y[28], z[12], ga[20], gc[24], want_a[20] = {0}, want_c[24] = {0};
  for (int t = 0; t < 28; ++t) gy[t] = (float)(t % 5) - 1.5f;
  for (int t = 0; t < 12; ++t) gz[t] = (float)(t % 3) + 0.25f;
  for (int r = 0; r < 4; ++r) {
    for (int t = 0; t < 7; ++t)
      want_a[r * 5 + pick(kGi[r][t], 5)] += gy[r * 7 + t];
  }
  for (int bt = 0; bt < 3; ++bt) {
    for (int q = 0; q < 2; ++q) {
      int64_t p = pick(kGj[bt][q], 4);
      for (int e = 0; e < 2; ++e) {
        want_c[bt * 8 + p * 2 + e] += gz[bt * 4 + q * 2 + e];
      }
    }
  }
  tj_tensor_t in[4] = {
      tj_tensor_make(a, TJ_DTYPE_F32, 2, (int64_t[]){4, 5}),
      tj_tensor_make(c, TJ_DTYPE_F32, 3, (int64_t[]){3, 4, 2}),
      tj_tensor_make(gy, TJ_DTYPE_F32, 2, (int64_t[]){4, 7}),
      tj_tensor_make(gz, TJ_DTYPE_F32, 3, (int64_t[]){3, 2, 2})};
  tj_tensor_t out[4] = {
      tj_tensor_make(y, TJ_DTYPE_F32, 2, (int64_t[]){4, 7}),
      tj_tensor_make(z, TJ_DTYPE_F32, 3, (int64_t[]){3, 2, 2}),
      tj_tensor_make(ga, TJ_DTYPE_F32, 2, (int64_t[]){4, 5}),
      tj_tensor_make(gc, TJ_DTYPE_F32, 3, (int64_t[]){3, 4, 2})};
  CHECK_OK(tj_reference_run(joint, in, 4, out, 4));
  for (int t = 0; t < 20; ++t) CHECK(ga[t] == want_a[t]);
  for (int t = 0; t < 24; ++t) CHECK(gc[t] == want_c[t]);
  tj_graph_destroy(joint);
  spec_t ins[4] = {{TJ_DTYPE_F32, 2, {4, 5}, -1, 1},
                   {TJ_DTYPE_F32, 3, {3, 4, 2}, -1, 1},
                   {TJ_DTYPE_F32, 2, {4, 7}, -1, 1},
                   {TJ_DTYPE_F32, 3, {3, 2, 2}, -1, 1}};
  spec_t outs[4] = {{TJ_DTYPE_F32, 2, {4, 7}, 0, 0},
                    {TJ_DTYPE_F32, 3, {3, 2, 2}, 0, 0},
                    {TJ_DTYPE_F32, 2, {4, 5}, 0, 0},
                    {TJ_DTYPE_F32, 3, {3, 4, 2}, 0, 0}};
  check_ops("gather_grads", build_gather_grads, 4, ins, 4, outs, 1e-5, NULL);
}

// Every allocation of tj_graph_grad over the gathers fails in turn:
// OUT_OF_MEMORY and nothing leaked, until it succeeds.
TEST(gather_vjps_oom_sweep) {
  long succeeded_at = -1;
  for (long n = 0; n < 200000 && succeeded_at < 0; ++n) {
    tj_test_allocator_t t;
    tj_test_allocator_initialize(&t, -1);
    tj_context_options_t options;
    tj_context_options_initialize(&options);
    options.allocator = tj_test_allocator_get(&t);
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_context_create(&options, &ctx));
    tj_graph_t* g = new_graph(ctx, "gather_grads");
    tj_value_t a = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){4, 5}, "a");
    tj_value_t c =
        tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){3, 4, 2}, "c");
    tj_value_t i = tj_graph_constant(g, TJ_DTYPE_I64, 2, (int64_t[]){4, 7}, kGi,
                                     sizeof(kGi));
    tj_value_t j = tj_graph_constant(g, TJ_DTYPE_I64, 3, (int64_t[]){3, 2, 1},
                                     kGj, sizeof(kGj));
    tj_graph_output(g, tj_graph_gather_elements(g, a, i, 1), "y");
    tj_graph_output(g, tj_graph_gather_nd(g, c, j, 1), "z");
    CHECK_OK(tj_graph_finalize(g));
    t.fail_at = t.allocations + n;  // only the gradient's allocations fail
    tj_graph_t* joint = NULL;
    tj_status_t st = tj_graph_grad(g, 0, NULL, 0, NULL, &joint);
    if (!st) {
      succeeded_at = n;
    } else if (tj_status_code(st) != TJ_STATUS_OUT_OF_MEMORY) {
      fprintf(stderr, "failing allocation %ld gave %s\n", n,
              tj_status_message(st));
      CHECK(false);
      succeeded_at = 0;
    }
    tj_status_free(st);
    tj_graph_destroy(joint);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
    if (t.live_blocks != 0 || t.bad_frees != 0) {
      fprintf(stderr, "failing allocation %ld leaked %ld blocks\n", n,
              t.live_blocks);
      CHECK(false);
      break;
    }
  }
  printf("# grad of the gathers succeeded once %ld allocations could\n",
         succeeded_at);
  CHECK(succeeded_at > 0);
}

int main(void) {
  open_jits();
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(reduce_axes_not_one_strided_axis);
  RUN_TEST(reduce_axes_dtypes);
  RUN_TEST(reduce_axes_fused);
  RUN_TEST(reduce_axes_empty);
  RUN_TEST(gather_elements_like_onnx);
  RUN_TEST(gather_nd_like_onnx);
  RUN_TEST(gathers_from_an_empty_axis);
  RUN_TEST(gather_shape_errors);
  RUN_TEST(gather_vjps_scatter_add);
  RUN_TEST(gather_vjps_oom_sweep);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  close_jits();
  TEST_MAIN_END();
}
