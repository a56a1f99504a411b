// The scans of issue 15 (task ops3): cumsum and cumprod (ONNX CumSum,
// CumProd) as native kernels, the SCAN phase of the ROW_REDUCE template.
// Every graph is compiled for x86 at each ISA tier the host has, generic
// (symbolic dims as params) and specialized, run and compared with
// tj_reference_run (tier_ops_check.h), with no graph break; symbolic dims
// run at several sizes (0 included), the scanned axis symbolic too; every
// flag; the dtypes (integers wrap, exactly as the reference); long axes
// (one dependent chain per row); the gradients through compiled kernels;
// the PTX of every kernel through ptxas -arch=sm_90a where it is installed;
// the builder's errors; and every allocation failure of tj_graph_grad.

#include <stdlib.h>

#include "backends/cuda/cuda_entry.h"
#include "tests/unit/ptx_check.h"
#include "tests/unit/tier_ops_check.h"

//===--- every flag, symbolic dims ---===//

// x [B, 7, 37] f32: cumsum along 1; along 2 exclusive and reversed; along
// the symbolic axis 0 reversed (of 2 * x: the scan reads a computed
// value from memory); cumprod along 2, exclusive.
static tj_graph_t* build_flags(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "scan_flags");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){B, 7, 37}, "x");
  tj_value_t p = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){B, 7, 37}, "p");
  tj_value_t two = tj_graph_full(g, TJ_DTYPE_F32, 0, NULL, 2.0);
  tj_graph_output(g, tj_graph_cumsum(g, x, 1, false, false), "a");
  tj_graph_output(g, tj_graph_cumsum(g, x, -1, true, true), "b");
  tj_graph_output(g,
                  tj_graph_exp(g, tj_graph_cumsum(g, tj_graph_mul(g, x, two), 0,
                                                  false, true)),
                  "c");
  tj_graph_output(g, tj_graph_cumprod(g, p, 2, true, false), "d");
  return g;
}

TEST(scans_every_flag_symbolic) {
  static const int64_t kSizes[] = {0, 1, 6};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kSizes); ++i) {
    int64_t B = kSizes[i];
    spec_t in[2] = {{TJ_DTYPE_F32, 3, {B, 7, 37}, -1, 1},
                    {TJ_DTYPE_F32, 3, {B, 7, 37}, 0.8, 1.2}};
    spec_t out[4] = {{TJ_DTYPE_F32, 3, {B, 7, 37}, 0, 0},
                     {TJ_DTYPE_F32, 3, {B, 7, 37}, 0, 0},
                     {TJ_DTYPE_F32, 3, {B, 7, 37}, 0, 0},
                     {TJ_DTYPE_F32, 3, {B, 7, 37}, 0, 0}};
    check_ops("scan_flags", build_flags, 2, in, 4, out, 1e-5, NULL);
  }
}

//===--- dtypes ---===//

// i32 sums that wrap, i64 products, f64 sums, f16 sums (f32 inside the
// kernel, rounded once per element as the reference), u8 sums that wrap,
// bf16 products reversed.
static tj_graph_t* build_dtypes(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "scan_dtypes");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t a = tj_graph_input(g, TJ_DTYPE_I32, 2, (int64_t[]){B, 19}, "a");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){5, B}, "b");
  tj_value_t c = tj_graph_input(g, TJ_DTYPE_F64, 2, (int64_t[]){B, 33}, "c");
  tj_value_t d = tj_graph_input(g, TJ_DTYPE_F16, 2, (int64_t[]){B, 12}, "d");
  tj_value_t e = tj_graph_input(g, TJ_DTYPE_U8, 2, (int64_t[]){3, 40}, "e");
  tj_value_t f = tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){4, 9}, "f");
  tj_graph_output(g, tj_graph_cumsum(g, a, 1, false, false), "ya");
  tj_graph_output(g, tj_graph_cumprod(g, b, 1, false, false), "yb");
  tj_graph_output(g, tj_graph_cumsum(g, c, 1, true, true), "yc");
  tj_graph_output(g, tj_graph_cumsum(g, d, -1, false, false), "yd");
  tj_graph_output(g, tj_graph_cumsum(g, e, 1, false, true), "ye");
  tj_graph_output(g, tj_graph_cumprod(g, f, 1, false, true), "yf");
  return g;
}

TEST(scans_every_dtype) {
  for (int64_t B = 2; B <= 7; B += 5) {
    spec_t in[6] = {{TJ_DTYPE_I32, 2, {B, 19}, -2000000000, 2000000000},
                    {TJ_DTYPE_I64, 2, {5, B}, -9, 9},
                    {TJ_DTYPE_F64, 2, {B, 33}, -3, 3},
                    {TJ_DTYPE_F16, 2, {B, 12}, 0, 2},
                    {TJ_DTYPE_U8, 2, {3, 40}, 0, 255},
                    {TJ_DTYPE_BF16, 2, {4, 9}, 0.5, 1.5}};
    spec_t out[6] = {
        {TJ_DTYPE_I32, 2, {B, 19}, 0, 0}, {TJ_DTYPE_I64, 2, {5, B}, 0, 0},
        {TJ_DTYPE_F64, 2, {B, 33}, 0, 0}, {TJ_DTYPE_F16, 2, {B, 12}, 0, 0},
        {TJ_DTYPE_U8, 2, {3, 40}, 0, 0},  {TJ_DTYPE_BF16, 2, {4, 9}, 0, 0}};
    // f16: one f16 ulp (2^-10 relative) between an f32 and an f64 sum that
    // round apart; bf16: one bf16 ulp (2^-7).
    check_ops("scan_dtypes", build_dtypes, 6, in, 6, out, 8e-3, NULL);
  }
}

//===--- long axes, size-1 and empty axes ---===//

// A row of 4099 (no multiple of a vector), a column of 3001 (the scanned
// axis strided in memory), and a scan over an axis of 1.
static tj_graph_t* build_long(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "scan_long");
  tj_value_t r = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 4099}, "r");
  tj_value_t c = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3001, 5}, "c");
  tj_value_t o = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){4, 1, 6}, "o");
  tj_graph_output(g, tj_graph_cumsum(g, r, 1, false, false), "yr");
  tj_graph_output(g, tj_graph_cumsum(g, c, 0, true, false), "yc");
  tj_graph_output(g, tj_graph_cumsum(g, o, 1, false, true), "yo");
  return g;
}

TEST(scans_long_and_unit_axes) {
  spec_t in[3] = {{TJ_DTYPE_F32, 2, {3, 4099}, 0, 1},
                  {TJ_DTYPE_F32, 2, {3001, 5}, 0, 1},
                  {TJ_DTYPE_F32, 3, {4, 1, 6}, -1, 1}};
  spec_t out[3] = {{TJ_DTYPE_F32, 2, {3, 4099}, 0, 0},
                   {TJ_DTYPE_F32, 2, {3001, 5}, 0, 0},
                   {TJ_DTYPE_F32, 3, {4, 1, 6}, 0, 0}};
  // A serial f32 chain of n positive terms: relative error below n * 2^-24
  // (2.4e-4 at n = 4099), typically sqrt(n) * 2^-24.
  check_ops("scan_long", build_long, 3, in, 3, out, 2.5e-4, NULL);
}

// The scanned axis empty (a symbolic one at 0 and a constant 0), and
// other axes empty.
static tj_graph_t* build_empty(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "scan_empty");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){3, B, 4}, "x");
  tj_value_t z = tj_graph_input(g, TJ_DTYPE_I32, 2, (int64_t[]){0, 5}, "z");
  tj_graph_output(g, tj_graph_cumsum(g, x, 1, false, false), "y");
  tj_graph_output(g, tj_graph_cumprod(g, x, 2, true, true), "w");
  tj_graph_output(g, tj_graph_cumsum(g, z, 1, false, false), "v");
  return g;
}

TEST(scans_of_empty_axes) {
  for (int64_t B = 0; B <= 2; B += 2) {
    spec_t in[2] = {{TJ_DTYPE_F32, 3, {3, B, 4}, -1, 1},
                    {TJ_DTYPE_I32, 2, {0, 5}, 0, 0}};
    spec_t out[3] = {{TJ_DTYPE_F32, 3, {3, B, 4}, 0, 0},
                     {TJ_DTYPE_F32, 3, {3, B, 4}, 0, 0},
                     {TJ_DTYPE_I32, 2, {0, 5}, 0, 0}};
    check_ops("scan_empty", build_empty, 2, in, 3, out, 1e-6, NULL);
  }
}

//===--- gradients through compiled kernels ---===//

// The joint graph of sum(t1 * cumsum(x, 1, exclusive)) + sum(t2 *
// cumprod(p, 0, reverse)): its gradients are scans the other way, compiled.
static tj_graph_t* build_grads(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "scan_grads");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 9}, "x");
  tj_value_t p = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 3}, "p");
  tj_graph_output(g, tj_graph_cumsum(g, x, 1, true, false), "y");
  tj_graph_output(g, tj_graph_cumprod(g, p, 0, false, true), "z");
  CHECK_OK(tj_graph_finalize(g));
  tj_graph_t* joint = NULL;
  CHECK_OK(tj_graph_grad(g, 0, NULL, 0, NULL, &joint));
  tj_graph_destroy(g);
  return joint;
}

TEST(scan_gradients_compiled) {
  for (int64_t B = 1; B <= 5; B += 4) {
    // Inputs: x, p, then the cotangents of y and z.
    spec_t in[4] = {{TJ_DTYPE_F32, 2, {B, 9}, -1, 1},
                    {TJ_DTYPE_F32, 2, {B, 3}, 0.5, 1.5},
                    {TJ_DTYPE_F32, 2, {B, 9}, -1, 1},
                    {TJ_DTYPE_F32, 2, {B, 3}, -1, 1}};
    spec_t out[4] = {{TJ_DTYPE_F32, 2, {B, 9}, 0, 0},
                     {TJ_DTYPE_F32, 2, {B, 3}, 0, 0},
                     {TJ_DTYPE_F32, 2, {B, 9}, 0, 0},
                     {TJ_DTYPE_F32, 2, {B, 3}, 0, 0}};
    check_ops("scan_grads", build_grads, 4, in, 4, out, 1e-5, NULL);
  }
}

// A hand-computed gradient: d/dx of sum(cumsum(x)) is [n, n-1, .., 1]
// (the reversed scan of ones); reversed, [1, 2, .., n].
TEST(cumsum_gradient_by_hand) {
  for (int rev = 0; rev < 2; ++rev) {
    tj_graph_t* g = new_graph(g_ctx[0], "cumsum_grad");
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F64, 1, (int64_t[]){5}, "x");
    tj_graph_output(g, tj_graph_cumsum(g, x, 0, false, rev != 0), "y");
    CHECK_OK(tj_graph_finalize(g));
    tj_graph_t* joint = NULL;
    CHECK_OK(tj_graph_grad(g, 0, NULL, 0, NULL, &joint));
    double xv[5] = {1, 2, 3, 4, 5}, ones[5] = {1, 1, 1, 1, 1}, y[5], gx[5];
    tj_tensor_t in[2] = {tj_tensor_make(xv, TJ_DTYPE_F64, 1, (int64_t[]){5}),
                         tj_tensor_make(ones, TJ_DTYPE_F64, 1, (int64_t[]){5})};
    tj_tensor_t out[2] = {tj_tensor_make(y, TJ_DTYPE_F64, 1, (int64_t[]){5}),
                          tj_tensor_make(gx, TJ_DTYPE_F64, 1, (int64_t[]){5})};
    CHECK_OK(tj_reference_run(joint, in, 2, out, 2));
    for (int i = 0; i < 5; ++i) {
      CHECK(gx[i] == (rev ? i + 1 : 5 - i));
      CHECK(y[i] == (rev ? (15 - i * (i + 1) / 2) : (i + 1) * (i + 2) / 2));
    }
    tj_graph_destroy(joint);
    tj_graph_destroy(g);
  }
}

//===--- errors ---===//

TEST(scan_builder_errors) {
  tj_graph_t* g = new_graph(g_ctx[0], "scan_errors");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 4}, "x");
  tj_graph_cumsum(g, x, 2, false, false);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "cumsum", tj_graph_status(g));
  tj_graph_destroy(g);
  g = new_graph(g_ctx[0], "scan_errors");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_BOOL, 1, (int64_t[]){3}, "b");
  tj_graph_cumprod(g, b, 0, false, false);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "cumprod", tj_graph_status(g));
  tj_graph_destroy(g);
  g = new_graph(g_ctx[0], "scan_errors");
  tj_value_t s = tj_graph_input(g, TJ_DTYPE_F32, 0, NULL, "s");
  tj_graph_cumsum(g, s, 0, false, false);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "rank", tj_graph_status(g));
  tj_graph_destroy(g);
}

//===--- PTX ---===//

static const char* g_ptxas = "";

// The graph's kernels through the NVPTX emitter (no GPU needed), every
// one native, assembled by ptxas -arch=sm_90a when it is installed.
static void check_ptx(const char* what, build_fn build) {
  tj_test_check_ptx(g_ptxas, what, build(g_ctx[0]));
}

TEST(scan_ptx) {
  check_ptx("scan_flags", build_flags);
  check_ptx("scan_dtypes", build_dtypes);
  check_ptx("scan_grads", build_grads);
  printf("# PTX assembled by ptxas: %s\n", g_ptxas[0] ? g_ptxas : "skipped");
}

//===--- allocation failures ---===//

static tj_status_t grad_attempt(tj_allocator_t allocator) {
  tj_context_options_t options = tj_test_context_options();
  options.allocator = allocator;
  tj_context_t* ctx = NULL;
  TJ_RETURN_IF_ERROR(tj_context_create(&options, &ctx));
  tj_graph_t* g = NULL;
  tj_status_t st = tj_graph_create(ctx, "scan_grads", &g);
  if (!st) {
    int64_t B = tj_graph_symbol(g, "B");
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 9}, "x");
    tj_graph_output(g, tj_graph_cumsum(g, x, 1, true, false), "y");
    tj_graph_output(g, tj_graph_cumprod(g, x, 0, false, true), "z");
    st = tj_graph_finalize(g);
  }
  tj_graph_t* joint = NULL;
  if (!st) st = tj_graph_grad(g, 0, NULL, 0, NULL, &joint);
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return st;
}

TEST(scan_grad_oom_sweep) {
  CHECK(tj_test_oom_sweep("scan grad", grad_attempt) > 0);
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
  RUN_TEST(scans_every_flag_symbolic);
  RUN_TEST(scans_every_dtype);
  RUN_TEST(scans_long_and_unit_axes);
  RUN_TEST(scans_of_empty_axes);
  RUN_TEST(scan_gradients_compiled);
  RUN_TEST(cumsum_gradient_by_hand);
  RUN_TEST(scan_builder_errors);
  RUN_TEST(scan_ptx);
  RUN_TEST(scan_grad_oom_sweep);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  close_jits();
  TEST_MAIN_END();
}
