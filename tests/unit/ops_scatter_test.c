// The scatters of issue 15: scatter_elements and scatter_nd (ONNX
// ScatterElements, ScatterND) with every reduction, as native kernels (a
// copy, then the walk of the updates on the SCAN phase of the ROW_REDUCE
// template). Every graph is compiled for x86 at each ISA tier the host has,
// generic (symbolic dims as params) and specialized, run and compared with
// tj_reference_run (tier_ops_check.h), with no graph break: odd sizes,
// symbolic dims (0 included), negative and out-of-range indices (wrapped
// once, then clamped), duplicate indices (random indices over short axes
// collide often: the last update wins or they combine in row-major order,
// on the kernels as in the reference), the dtypes, the run-time error of
// updates aimed at an empty axis; values written by hand; the gradients
// through compiled kernels; the PTX of every kernel through ptxas
// -arch=sm_90a where it is installed; the builder's errors; and every
// allocation failure of compiling and running a scatter.

#include <stdlib.h>

#include "backends/cuda/cuda_entry.h"
#include "tests/unit/ptx_check.h"
#include "tests/unit/tier_ops_check.h"

//===--- scatter_elements ---===//

// data [B, 7, 5] f32; along 1 with indices [B, 9, 5] (more updates than
// the axis holds: duplicates), every reduction; along 2 with indices
// [B, 3, 4] (smaller than data off the axis); along 0 (the symbolic axis).
static tj_graph_t* build_elements(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "scatter_elements");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t d = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){B, 7, 5}, "d");
  tj_value_t i = tj_graph_input(g, TJ_DTYPE_I64, 3, (int64_t[]){B, 9, 5}, "i");
  tj_value_t u = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){B, 9, 5}, "u");
  tj_value_t j = tj_graph_input(g, TJ_DTYPE_I32, 3, (int64_t[]){B, 3, 4}, "j");
  tj_value_t v = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){B, 3, 4}, "v");
  static const tj_scatter_reduction_t kRed[5] = {
      TJ_SCATTER_REDUCTION_NONE, TJ_SCATTER_REDUCTION_ADD,
      TJ_SCATTER_REDUCTION_MUL, TJ_SCATTER_REDUCTION_MAX,
      TJ_SCATTER_REDUCTION_MIN};
  // Along 1: none, add, mul, max, min summed into one output (each term
  // checked through the sum; max and min also alone below).
  tj_value_t sum = tj_graph_scatter_elements(g, d, i, u, 1, kRed[0]);
  for (int r = 1; r < 5; ++r) {
    sum = tj_graph_add(g, sum,
                       tj_graph_scatter_elements(g, d, i, u, -2, kRed[r]));
  }
  tj_graph_output(g, sum, "a");
  tj_graph_output(g, tj_graph_scatter_elements(g, d, i, u, 1, kRed[3]), "b");
  tj_graph_output(g, tj_graph_scatter_elements(g, d, j, v, 2, kRed[0]), "c");
  tj_graph_output(g, tj_graph_scatter_elements(g, d, j, v, -1, kRed[1]), "e");
  // Along the symbolic axis 0.
  tj_graph_output(g, tj_graph_scatter_elements(g, d, j, v, 0, kRed[4]), "f");
  return g;
}

TEST(scatter_elements_every_reduction_symbolic) {
  static const int64_t kSizes[] = {2, 3, 6};
  for (size_t s = 0; s < TJ_ARRAY_SIZE(kSizes); ++s) {
    int64_t B = kSizes[s];
    // Indices from -10 to 9 over axes of 7, 5 and B: negative ones wrap,
    // those out of range clamp to the ends.
    spec_t in[5] = {{TJ_DTYPE_F32, 3, {B, 7, 5}, -1, 1},
                    {TJ_DTYPE_I64, 3, {B, 9, 5}, -10, 9},
                    {TJ_DTYPE_F32, 3, {B, 9, 5}, 0.5, 1.5},
                    {TJ_DTYPE_I32, 3, {B, 3, 4}, -7, 6},
                    {TJ_DTYPE_F32, 3, {B, 3, 4}, -1, 1}};
    spec_t out[5] = {{TJ_DTYPE_F32, 3, {B, 7, 5}, 0, 0},
                     {TJ_DTYPE_F32, 3, {B, 7, 5}, 0, 0},
                     {TJ_DTYPE_F32, 3, {B, 7, 5}, 0, 0},
                     {TJ_DTYPE_F32, 3, {B, 7, 5}, 0, 0},
                     {TJ_DTYPE_F32, 3, {B, 7, 5}, 0, 0}};
    // f32 sums and products of at most 9 terms in one order on both sides.
    check_ops("scatter_elements", build_elements, 5, in, 5, out, 1e-5, NULL);
  }
}

//===--- scatter_nd ---===//

// A KV cache [B, 4, 13, 8] written at rows (b, h, t) by indices [B, 5, 3]
// (k = 3: rows of 8); a table [11, 6] by indices [2, 3, 1] (k = 1: whole
// rows, index_put); elementwise (k = rank) into [5, 4] with duplicates;
// every reduction on the k = 1 form.
static tj_graph_t* build_nd(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "scatter_nd");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t c =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){B, 4, 13, 8}, "cache");
  tj_value_t ci =
      tj_graph_input(g, TJ_DTYPE_I64, 3, (int64_t[]){B, 5, 3}, "ci");
  tj_value_t cu =
      tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){B, 5, 8}, "cu");
  tj_value_t t = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){11, 6}, "t");
  tj_value_t ti =
      tj_graph_input(g, TJ_DTYPE_I32, 3, (int64_t[]){2, 3, 1}, "ti");
  tj_value_t tu =
      tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){2, 3, 6}, "tu");
  tj_graph_output(
      g, tj_graph_scatter_nd(g, c, ci, cu, TJ_SCATTER_REDUCTION_NONE), "a");
  tj_value_t sum = tj_graph_scatter_nd(g, t, ti, tu, TJ_SCATTER_REDUCTION_NONE);
  for (int r = 1; r < 5; ++r) {
    sum = tj_graph_add(
        g, sum, tj_graph_scatter_nd(g, t, ti, tu, (tj_scatter_reduction_t)r));
  }
  tj_graph_output(g, sum, "b");
  // Elementwise: indices [3, 2] into t[:5, :4] (a computed data operand).
  tj_value_t e =
      tj_graph_slice(g, t, (int64_t[]){0, 0}, (int64_t[]){5, 4}, NULL);
  tj_value_t ei = tj_graph_reshape(g, ti, 2, (int64_t[]){3, 2});
  tj_value_t eu = tj_graph_reshape(
      g,
      tj_graph_slice(g, tu, (int64_t[]){0, 0, 0}, (int64_t[]){1, 1, 3}, NULL),
      1, (int64_t[]){3});
  tj_graph_output(
      g, tj_graph_scatter_nd(g, e, ei, eu, TJ_SCATTER_REDUCTION_ADD), "c");
  return g;
}

TEST(scatter_nd_every_reduction_symbolic) {
  for (int64_t B = 2; B <= 5; B += 3) {
    spec_t in[6] = {{TJ_DTYPE_F32, 4, {B, 4, 13, 8}, -1, 1},
                    {TJ_DTYPE_I64, 3, {B, 5, 3}, -14, 13},
                    {TJ_DTYPE_F32, 3, {B, 5, 8}, -1, 1},
                    {TJ_DTYPE_F32, 2, {11, 6}, -1, 1},
                    {TJ_DTYPE_I32, 3, {2, 3, 1}, -12, 12},
                    {TJ_DTYPE_F32, 3, {2, 3, 6}, 0.5, 1.5}};
    spec_t out[3] = {{TJ_DTYPE_F32, 4, {B, 4, 13, 8}, 0, 0},
                     {TJ_DTYPE_F32, 2, {11, 6}, 0, 0},
                     {TJ_DTYPE_F32, 2, {5, 4}, 0, 0}};
    check_ops("scatter_nd", build_nd, 6, in, 3, out, 1e-5, NULL);
  }
}

//===--- dtypes ---===//

// i32 adds that wrap, i64 max, f64 min, f16 adds (f32 inside the kernel,
// rounded to f16 at each update as the reference), u8 products that wrap
// and bools replaced (none), bf16 through scatter_nd.
static tj_graph_t* build_dtypes(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "scatter_dtypes");
  int64_t B = tj_graph_symbol(g, "B");
  int64_t s[2] = {B, 6}, w[2] = {B, 10};
  tj_value_t i = tj_graph_input(g, TJ_DTYPE_I32, 2, w, "i");
  tj_value_t a = tj_graph_input(g, TJ_DTYPE_I32, 2, s, "a");
  tj_value_t au = tj_graph_input(g, TJ_DTYPE_I32, 2, w, "au");
  tj_value_t f = tj_graph_input(g, TJ_DTYPE_F16, 2, s, "f");
  tj_value_t fu = tj_graph_input(g, TJ_DTYPE_F16, 2, w, "fu");
  tj_graph_output(
      g, tj_graph_scatter_elements(g, a, i, au, 1, TJ_SCATTER_REDUCTION_ADD),
      "ya");
  tj_graph_output(
      g,
      tj_graph_scatter_elements(g, tj_graph_cast(g, a, TJ_DTYPE_I64), i,
                                tj_graph_cast(g, au, TJ_DTYPE_I64), 1,
                                TJ_SCATTER_REDUCTION_MAX),
      "yb");
  tj_graph_output(g,
                  tj_graph_cast(g,
                                tj_graph_scatter_elements(
                                    g, tj_graph_cast(g, f, TJ_DTYPE_F64), i,
                                    tj_graph_cast(g, fu, TJ_DTYPE_F64), 1,
                                    TJ_SCATTER_REDUCTION_MIN),
                                TJ_DTYPE_F16),
                  "yc");
  tj_graph_output(
      g, tj_graph_scatter_elements(g, f, i, fu, 1, TJ_SCATTER_REDUCTION_ADD),
      "yd");
  // u8 products that wrap plus bools replaced (none), as i32.
  tj_value_t zero = tj_graph_full(g, TJ_DTYPE_I32, 0, NULL, 0);
  tj_value_t bools = tj_graph_gt(g, a, zero);
  tj_value_t ubools = tj_graph_lt(g, au, zero);
  tj_graph_output(
      g,
      tj_graph_add(
          g,
          tj_graph_cast(
              g,
              tj_graph_scatter_elements(g, tj_graph_cast(g, a, TJ_DTYPE_U8), i,
                                        tj_graph_cast(g, au, TJ_DTYPE_U8), 1,
                                        TJ_SCATTER_REDUCTION_MUL),
              TJ_DTYPE_I32),
          tj_graph_cast(g,
                        tj_graph_scatter_elements(g, bools, i, ubools, 1,
                                                  TJ_SCATTER_REDUCTION_NONE),
                        TJ_DTYPE_I32)),
      "ye");
  tj_value_t bi =
      tj_graph_sub(g, tj_graph_iota(g, TJ_DTYPE_I32, 2, (int64_t[]){4, 1}, 0),
                   tj_graph_full(g, TJ_DTYPE_I32, 0, NULL, 2));
  tj_value_t bd = tj_graph_cast(g, tj_graph_reshape(g, f, 2, (int64_t[]){6, B}),
                                TJ_DTYPE_BF16);
  tj_value_t bv = tj_graph_cast(
      g,
      tj_graph_transpose(g,
                         tj_graph_slice(g, fu, (int64_t[]){0, 0},
                                        (int64_t[]){INT64_MAX, 4}, NULL),
                         (int32_t[]){1, 0}),
      TJ_DTYPE_BF16);
  tj_graph_output(
      g,
      tj_graph_cast(
          g, tj_graph_scatter_nd(g, bd, bi, bv, TJ_SCATTER_REDUCTION_NONE),
          TJ_DTYPE_F32),
      "yf");
  return g;
}

TEST(scatter_every_dtype) {
  for (int64_t B = 1; B <= 5; B += 4) {
    spec_t in[5] = {{TJ_DTYPE_I32, 2, {B, 10}, -6, 5},
                    {TJ_DTYPE_I32, 2, {B, 6}, -2000000000, 2000000000},
                    {TJ_DTYPE_I32, 2, {B, 10}, -2000000000, 2000000000},
                    {TJ_DTYPE_F16, 2, {B, 6}, -2, 2},
                    {TJ_DTYPE_F16, 2, {B, 10}, -2, 2}};
    spec_t out[6] = {
        {TJ_DTYPE_I32, 2, {B, 6}, 0, 0}, {TJ_DTYPE_I64, 2, {B, 6}, 0, 0},
        {TJ_DTYPE_F16, 2, {B, 6}, 0, 0}, {TJ_DTYPE_F16, 2, {B, 6}, 0, 0},
        {TJ_DTYPE_I32, 2, {B, 6}, 0, 0}, {TJ_DTYPE_F32, 2, {6, B}, 0, 0}};
    // f16: adds rounded to f16 at each update on both sides; one f16 ulp
    // where the f32 and f64 sums round apart.
    check_ops("scatter_dtypes", build_dtypes, 5, in, 6, out, 2e-3, NULL);
  }
}

//===--- odd and empty sizes ---===//

// A long axis (1037 updates into 1031 elements per row, 3 rows) and empty
// updates (a symbolic count of 0).
static tj_graph_t* build_sizes(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "scatter_sizes");
  int64_t N = tj_graph_symbol(g, "N");
  tj_value_t d = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 1031}, "d");
  tj_value_t i = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){3, 1037}, "i");
  tj_value_t u = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 1037}, "u");
  tj_value_t ni = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){N, 1}, "ni");
  tj_value_t nu = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){N, 3}, "nu");
  tj_graph_output(
      g, tj_graph_scatter_elements(g, d, i, u, 1, TJ_SCATTER_REDUCTION_ADD),
      "a");
  tj_graph_output(
      g,
      tj_graph_scatter_nd(g, tj_graph_transpose(g, d, (int32_t[]){1, 0}), ni,
                          nu, TJ_SCATTER_REDUCTION_NONE),
      "b");
  return g;
}

TEST(scatter_long_and_empty) {
  for (int64_t N = 0; N <= 40; N += 40) {
    spec_t in[5] = {{TJ_DTYPE_F32, 2, {3, 1031}, -1, 1},
                    {TJ_DTYPE_I64, 2, {3, 1037}, -1031, 1030},
                    {TJ_DTYPE_F32, 2, {3, 1037}, -1, 1},
                    {TJ_DTYPE_I64, 2, {N, 1}, -1031, 1030},
                    {TJ_DTYPE_F32, 2, {N, 3}, -1, 1}};
    spec_t out[2] = {{TJ_DTYPE_F32, 2, {3, 1031}, 0, 0},
                     {TJ_DTYPE_F32, 2, {1031, 3}, 0, 0}};
    check_ops("scatter_sizes", build_sizes, 5, in, 2, out, 1e-5, NULL);
  }
}

// Updates aimed at an axis that is empty at run time: INVALID_ARGUMENT from
// the reference and the kernels alike, naming the op and the shape.
static tj_graph_t* build_empty_axis(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "scatter_empty_axis");
  int64_t N = tj_graph_symbol(g, "N");
  tj_value_t d = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, N}, "d");
  tj_value_t i = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){3, 2}, "i");
  tj_value_t u = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 2}, "u");
  tj_graph_output(
      g, tj_graph_scatter_elements(g, d, i, u, 1, TJ_SCATTER_REDUCTION_NONE),
      "y");
  return g;
}

TEST(scatter_into_an_empty_axis) {
  spec_t in[3] = {{TJ_DTYPE_F32, 2, {3, 0}, 0, 0},
                  {TJ_DTYPE_I64, 2, {3, 2}, 0, 0},
                  {TJ_DTYPE_F32, 2, {3, 2}, 0, 1}};
  spec_t out[1] = {{TJ_DTYPE_F32, 2, {3, 0}, 0, 0}};
  check_ops("scatter_empty_axis", build_empty_axis, 3, in, 1, out, 0,
            "scatter_elements (node %3): axis 1 of f32[3,0] is empty");
}

//===--- gradients through compiled kernels ---===//

// The joint graph of scatter_elements (add) and scatter_nd (none): their
// gradients are gathers and a scatter of zeros, compiled.
static tj_graph_t* build_grads(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "scatter_grads");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t d = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 6}, "d");
  tj_value_t i = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){B, 4}, "i");
  tj_value_t u = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 4}, "u");
  tj_value_t j = tj_graph_input(g, TJ_DTYPE_I32, 2, (int64_t[]){4, 1}, "j");
  tj_graph_output(
      g, tj_graph_scatter_elements(g, d, i, u, 1, TJ_SCATTER_REDUCTION_ADD),
      "y");
  tj_graph_output(
      g,
      tj_graph_scatter_nd(g, tj_graph_transpose(g, d, (int32_t[]){1, 0}), j,
                          tj_graph_transpose(g, u, (int32_t[]){1, 0}),
                          TJ_SCATTER_REDUCTION_NONE),
      "z");
  CHECK_OK(tj_graph_finalize(g));
  tj_graph_t* joint = NULL;
  CHECK_OK(tj_graph_grad(g, 0, NULL, 0, NULL, &joint));
  tj_graph_destroy(g);
  return joint;
}

TEST(scatter_gradients_compiled) {
  for (int64_t B = 1; B <= 5; B += 4) {
    // Inputs: d, i, u, j, then the cotangents of y and z.
    spec_t in[6] = {
        {TJ_DTYPE_F32, 2, {B, 6}, -1, 1}, {TJ_DTYPE_I64, 2, {B, 4}, -7, 6},
        {TJ_DTYPE_F32, 2, {B, 4}, -1, 1}, {TJ_DTYPE_I32, 2, {4, 1}, -6, 5},
        {TJ_DTYPE_F32, 2, {B, 6}, -1, 1}, {TJ_DTYPE_F32, 2, {6, B}, -1, 1}};
    spec_t out[4] = {{TJ_DTYPE_F32, 2, {B, 6}, 0, 0},
                     {TJ_DTYPE_F32, 2, {6, B}, 0, 0},
                     {TJ_DTYPE_F32, 2, {B, 6}, 0, 0},
                     {TJ_DTYPE_F32, 2, {B, 4}, 0, 0}};
    check_ops("scatter_grads", build_grads, 6, in, 4, out, 1e-5, NULL);
  }
}

// mul, max and min have no VJP: refused by name.
TEST(scatter_gradient_refused) {
  tj_graph_t* g = new_graph(g_ctx[0], "scatter_grad_refused");
  tj_value_t d = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 4}, "d");
  tj_value_t i = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){3, 2}, "i");
  tj_value_t u = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 2}, "u");
  tj_graph_output(
      g, tj_graph_scatter_elements(g, d, i, u, 1, TJ_SCATTER_REDUCTION_MAX),
      "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_graph_t* joint = NULL;
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "no VJP for reduction max",
               tj_graph_grad(g, 0, NULL, 0, NULL, &joint));
  CHECK(joint == NULL);
  tj_graph_destroy(g);
}

//===--- by hand ---===//

// ONNX's examples: ScatterElements along 1 with a negative index and a
// duplicate (the last wins; add sums both); ScatterND's 1-D example.
TEST(scatter_values_by_hand) {
  for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
    tj_graph_t* g = new_graph(g_ctx[t], "scatter_hand");
    tj_value_t d = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){1, 5}, "d");
    tj_value_t i = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){1, 3}, "i");
    tj_value_t u = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){1, 3}, "u");
    tj_value_t e = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){8}, "e");
    tj_value_t ei = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){4, 1}, "ei");
    tj_value_t eu = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, "eu");
    tj_graph_output(
        g, tj_graph_scatter_elements(g, d, i, u, 1, TJ_SCATTER_REDUCTION_NONE),
        "a");
    tj_graph_output(
        g, tj_graph_scatter_elements(g, d, i, u, 1, TJ_SCATTER_REDUCTION_ADD),
        "b");
    tj_graph_output(
        g, tj_graph_scatter_nd(g, e, ei, eu, TJ_SCATTER_REDUCTION_NONE), "c");
    CHECK_OK(tj_graph_finalize(g));
    float dv[5] = {1, 2, 3, 4, 5}, uv[3] = {1.5f, 2.5f, 3.5f};
    int64_t iv[3] = {1, -2, 1};
    float ev[8] = {1, 2, 3, 4, 5, 6, 7, 8}, euv[4] = {9, 10, 11, 12};
    int64_t eiv[4] = {4, 3, 1, 7};
    float a[5], b[5], c[8];
    tj_tensor_t in[6] = {
        tj_tensor_make(dv, TJ_DTYPE_F32, 2, (int64_t[]){1, 5}),
        tj_tensor_make(iv, TJ_DTYPE_I64, 2, (int64_t[]){1, 3}),
        tj_tensor_make(uv, TJ_DTYPE_F32, 2, (int64_t[]){1, 3}),
        tj_tensor_make(ev, TJ_DTYPE_F32, 1, (int64_t[]){8}),
        tj_tensor_make(eiv, TJ_DTYPE_I64, 2, (int64_t[]){4, 1}),
        tj_tensor_make(euv, TJ_DTYPE_F32, 1, (int64_t[]){4})};
    tj_tensor_t out[3] = {tj_tensor_make(a, TJ_DTYPE_F32, 2, (int64_t[]){1, 5}),
                          tj_tensor_make(b, TJ_DTYPE_F32, 2, (int64_t[]){1, 5}),
                          tj_tensor_make(c, TJ_DTYPE_F32, 1, (int64_t[]){8})};
    static const float kA[5] = {1, 3.5f, 3, 2.5f, 5};
    static const float kB[5] = {1, 7, 3, 6.5f, 5};
    static const float kC[8] = {1, 11, 3, 10, 9, 6, 7, 12};
    for (int run = 0; run < 2; ++run) {
      memset(a, 0, sizeof(a));
      memset(b, 0, sizeof(b));
      memset(c, 0, sizeof(c));
      if (run == 0) {
        CHECK_OK(tj_reference_run(g, in, 6, out, 3));
      } else {
        tj_compile_options_t o;
        tj_compile_options_initialize(&o);
        o.target = TJ_TARGET_X86;
        o.cache_dir = "";
        tj_executable_t* exe = NULL;
        CHECK_OK(tj_compile(g, &o, &exe));
        CHECK_OK(tj_executable_run(exe, in, 6, out, 3));
        tj_executable_release(exe);
      }
      for (int k = 0; k < 5; ++k) CHECK(a[k] == kA[k] && b[k] == kB[k]);
      for (int k = 0; k < 8; ++k) CHECK(c[k] == kC[k]);
    }
    tj_graph_destroy(g);
  }
}

//===--- errors ---===//

TEST(scatter_builder_errors) {
  tj_context_t* ctx = g_ctx[0];
  tj_graph_t* g = new_graph(ctx, "scatter_errors");
  tj_value_t d = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 4}, "d");
  tj_value_t i = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){3, 2}, "i");
  tj_value_t f = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 2}, "f");
  tj_graph_scatter_elements(g, d, i, f, 2, TJ_SCATTER_REDUCTION_NONE);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "scatter_elements",
               tj_graph_status(g));
  tj_graph_destroy(g);
  // Updates of another dtype; float indices; a bad reduction; indices
  // larger than data off the axis; bool arithmetic.
  static const char* const kWant[] = {
      "updates are f64 but data is f32", "indices must be i32 or i64",
      "reduction", "indices' dim 0", "reduction add of bool"};
  for (int c = 0; c < 5; ++c) {
    g = new_graph(ctx, "scatter_errors");
    tj_dtype_t dt = c == 4 ? TJ_DTYPE_BOOL : TJ_DTYPE_F32;
    d = tj_graph_input(g, dt, 2, (int64_t[]){3, 4}, "d");
    i = tj_graph_input(g, c == 1 ? TJ_DTYPE_F32 : TJ_DTYPE_I64, 2,
                       (int64_t[]){c == 3 ? 4 : 3, 2}, "i");
    f = tj_graph_input(g, c == 0 ? TJ_DTYPE_F64 : dt, 2,
                       (int64_t[]){c == 3 ? 4 : 3, 2}, "f");
    tj_graph_scatter_elements(g, d, i, f, 1,
                              c == 2   ? (tj_scatter_reduction_t)7
                              : c == 4 ? TJ_SCATTER_REDUCTION_ADD
                                       : TJ_SCATTER_REDUCTION_NONE);
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, kWant[c], tj_graph_status(g));
    tj_graph_destroy(g);
  }
  // scatter_nd: k above the rank; updates of the wrong shape.
  for (int c = 0; c < 2; ++c) {
    g = new_graph(ctx, "scatter_errors");
    d = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 4}, "d");
    i = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){5, c ? 1 : 3}, "i");
    f = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){5, 3}, "f");
    tj_graph_scatter_nd(g, d, i, f, TJ_SCATTER_REDUCTION_NONE);
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
                 c ? "updates must be indices.shape[:-1] + data.shape[1:]"
                   : "1 <= k <= 2",
                 tj_graph_status(g));
    tj_graph_destroy(g);
  }
}

//===--- PTX ---===//

static const char* g_ptxas = "";

// The graph's kernels through the NVPTX emitter (no GPU needed), every
// one native, assembled by ptxas -arch=sm_90a when it is installed.
static void check_ptx(const char* what, build_fn build) {
  tj_test_check_ptx(g_ptxas, what, build(g_ctx[0]));
}

TEST(scatter_ptx) {
  check_ptx("scatter_elements", build_elements);
  check_ptx("scatter_nd", build_nd);
  check_ptx("scatter_dtypes", build_dtypes);
  check_ptx("scatter_grads", build_grads);
  printf("# PTX assembled by ptxas: %s\n", g_ptxas[0] ? g_ptxas : "skipped");
}

//===--- allocation failures ---===//

// Builds, compiles and runs a scatter_nd and a scatter_elements (symbolic
// dims) under |allocator|.
static tj_status_t compile_attempt(tj_allocator_t allocator) {
  tj_context_options_t options = tj_test_context_options();
  options.allocator = allocator;
  tj_context_t* ctx = NULL;
  TJ_RETURN_IF_ERROR(tj_context_create(&options, &ctx));
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  tj_status_t st = tj_graph_create(ctx, "scatter_oom", &g);
  if (!st) {
    int64_t B = tj_graph_symbol(g, "B");
    tj_value_t d = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 4}, "d");
    tj_value_t i = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){B, 1}, "i");
    tj_value_t u = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 1}, "u");
    tj_graph_output(
        g, tj_graph_scatter_elements(g, d, i, u, 1, TJ_SCATTER_REDUCTION_ADD),
        "y");
    tj_graph_output(
        g,
        tj_graph_scatter_nd(g, d, i,
                            tj_graph_broadcast_to(g, u, 2, (int64_t[]){B, 4}),
                            TJ_SCATTER_REDUCTION_NONE),
        "z");
    st = tj_graph_finalize(g);
  }
  if (!st) {
    tj_compile_options_t o;
    tj_compile_options_initialize(&o);
    o.target = TJ_TARGET_X86;
    o.cache_dir = "";
    st = tj_compile(g, &o, &exe);
  }
  if (!st) {
    float dv[8] = {0}, uv[2] = {1, 2}, y[8], z[8];
    int64_t iv[2] = {1, -1};
    tj_tensor_t in[3] = {
        tj_tensor_make(dv, TJ_DTYPE_F32, 2, (int64_t[]){2, 4}),
        tj_tensor_make(iv, TJ_DTYPE_I64, 2, (int64_t[]){2, 1}),
        tj_tensor_make(uv, TJ_DTYPE_F32, 2, (int64_t[]){2, 1})};
    tj_tensor_t out[2] = {
        tj_tensor_make(y, TJ_DTYPE_F32, 2, (int64_t[]){2, 4}),
        tj_tensor_make(z, TJ_DTYPE_F32, 2, (int64_t[]){2, 4})};
    st = tj_executable_run(exe, in, 3, out, 2);
    if (!st && (y[1] != 1 || y[7] != 2 || z[4] != 2 || z[0] != 0)) {
      st = tj_internal("scatter_oom: wrong values");
    }
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return st;
}

TEST(scatter_compile_oom_sweep) {
  CHECK(tj_test_oom_sweep("scatter compile", compile_attempt) > 0);
}

int main(int argc, char** argv) {
  if (argc > 1) g_ptxas = argv[1];
  open_jits();
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(scatter_elements_every_reduction_symbolic);
  RUN_TEST(scatter_nd_every_reduction_symbolic);
  RUN_TEST(scatter_every_dtype);
  RUN_TEST(scatter_long_and_empty);
  RUN_TEST(scatter_into_an_empty_axis);
  RUN_TEST(scatter_gradients_compiled);
  RUN_TEST(scatter_gradient_refused);
  RUN_TEST(scatter_values_by_hand);
  RUN_TEST(scatter_builder_errors);
  RUN_TEST(scatter_ptx);
  RUN_TEST(scatter_compile_oom_sweep);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  close_jits();
  TEST_MAIN_END();
}
