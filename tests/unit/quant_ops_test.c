// quantize and dequantize (issue 17, quant2): ONNX QuantizeLinear and
// DequantizeLinear semantics. Exact values of the reference (ties to even,
// saturation, zero points, int4 packing, float8 with and without
// saturation) written out by hand; then every granularity and dtype
// compiled for x86 at every ISA tier the host has, generic and specialized
// (tier_ops_check.h), equal to the reference bit for bit with no graph
// break (the ops decompose into fusing pointwise kernels); the PTX of the
// same graphs through ptxas -arch=sm_90a where it is installed; bad scale
// and zero-point shapes named; the straight-through gradient.

#include <stdlib.h>

#include "backends/cuda/cuda_entry.h"
#include "tests/unit/ptx_check.h"
#include "tests/unit/tier_ops_check.h"

//===--- exact values on the reference ---===//

static tj_tensor_t t_of(void* p, tj_dtype_t d, int32_t rank,
                        const int64_t* dims) {
  return tj_tensor_make(p, d, rank, dims);
}

// quantize(x) for a constant x with scale s (rank 0), no zero point.
static void run_quantize(tj_dtype_t qd, const tj_quant_attrs_t* a,
                         const float* x, int64_t n, float s, void* out,
                         int64_t out_n) {
  tj_graph_t* g = new_graph(g_ctx[0], "q");
  tj_value_t xv = tj_graph_input(g, TJ_DTYPE_F32, 1, &n, "x");
  tj_value_t sv = tj_graph_scalar(g, TJ_DTYPE_F32, s);
  tj_graph_output(g, tj_graph_quantize(g, xv, sv, tj_value_none(), a), "q");
  CHECK_OK(tj_graph_finalize(g));
  tj_tensor_t in = t_of((void*)x, TJ_DTYPE_F32, 1, &n);
  tj_tensor_t o = t_of(out, qd, 1, &out_n);
  CHECK_OK(tj_reference_run(g, &in, 1, &o, 1));
  tj_graph_destroy(g);
}

TEST(ties_to_even_and_saturation) {
  const float x[] = {0.5f,   1.5f,   2.5f,  -0.5f,   -1.5f,  -2.5f,
                     126.5f, 127.5f, 200.f, -128.5f, -300.f, 0.f};
  const int8_t want_i8[] = {0, 2, 2, 0, -2, -2, 126, 127, 127, -128, -128, 0};
  int8_t got[12];
  tj_quant_attrs_t a = {.dtype = TJ_DTYPE_I8};
  run_quantize(TJ_DTYPE_I8, &a, x, 12, 1.0f, got, 12);
  for (int i = 0; i < 12; ++i) CHECK_EQ_INT(want_i8[i], got[i]);
  // u8: negative values saturate to 0.
  const uint8_t want_u8[] = {0, 2, 2, 0, 0, 0, 126, 128, 200, 0, 0, 0};
  uint8_t gu[12];
  a.dtype = TJ_DTYPE_U8;
  run_quantize(TJ_DTYPE_U8, &a, x, 12, 1.0f, gu, 12);
  for (int i = 0; i < 12; ++i) CHECK_EQ_INT(want_u8[i], gu[i]);
}

TEST(int4_packing_low_nibble_first) {
  // 7 values (odd): signed [-8, 7] packed, the last high nibble 0.
  const float x[] = {1.f, -1.f, 7.5f, -9.f, 2.5f, 3.f, -8.f};
  tj_quant_attrs_t a = {.dtype = TJ_DTYPE_U8, .int4 = TJ_INT4_SIGNED};
  uint8_t got[4];
  run_quantize(TJ_DTYPE_U8, &a, x, 7, 1.0f, got, 4);
  // 1 | -1 (0xF) << 4; 7 (8 saturates) | -8 (0x8) << 4; 2 | 3 << 4; -8.
  CHECK_EQ_INT(0xF1, got[0]);
  CHECK_EQ_INT(0x87, got[1]);
  CHECK_EQ_INT(0x32, got[2]);
  CHECK_EQ_INT(0x08, got[3]);
  a.int4 = TJ_INT4_UNSIGNED;
  run_quantize(TJ_DTYPE_U8, &a, x, 7, 1.0f, got, 4);
  CHECK_EQ_INT(0x01, got[0]);  // -1 saturates to 0
  CHECK_EQ_INT(0x08, got[1]);  // 7.5 -> 8, -9 -> 0
  CHECK_EQ_INT(0x32, got[2]);
  CHECK_EQ_INT(0x00, got[3]);
}

TEST(float8_saturate_or_not) {
  const float x[] = {500.f, -500.f, 464.f, 465.f, INFINITY, NAN, 1.f, 70000.f};
  uint8_t got[8];
  tj_quant_attrs_t a = {.dtype = TJ_DTYPE_F8E4M3};
  run_quantize(TJ_DTYPE_F8E4M3, &a, x, 8, 1.0f, got, 8);
  const uint8_t sat[] = {0x7E, 0xFE, 0x7E, 0x7E, 0x7E, 0x7F, 0x38, 0x7E};
  for (int i = 0; i < 8; ++i) CHECK_EQ_INT(sat[i], got[i]);
  a.no_saturate = true;
  run_quantize(TJ_DTYPE_F8E4M3, &a, x, 8, 1.0f, got, 8);
  const uint8_t nosat[] = {0x7F, 0xFF, 0x7E, 0x7F, 0x7F, 0x7F, 0x38, 0x7F};
  for (int i = 0; i < 8; ++i) CHECK_EQ_INT(nosat[i], got[i]);
  a.dtype = TJ_DTYPE_F8E5M2;
  run_quantize(TJ_DTYPE_F8E5M2, &a, x, 8, 1.0f, got, 8);
  // 70000 and inf overflow to inf; 500 is 512 (0x60).
  CHECK_EQ_INT(0x60, got[0]);
  CHECK_EQ_INT(0xE0, got[1]);
  CHECK_EQ_INT(0x7C, got[4]);
  CHECK_EQ_INT(0x7C, got[7]);
  CHECK_EQ_INT(0x3C, got[6]);
}

//===--- compiled at every tier against the reference ---===//

static tj_dtype_t g_qd;
static tj_quant_attrs_t g_attrs;
static bool g_zp;
static int32_t g_srank;
static int64_t g_sdims[TJ_MAX_RANK];

// x [B, 6, 10] f32 -> quantize -> q, and dequantize(q) (both outputs).
static tj_graph_t* build_qdq(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "qdq");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){B, 6, 10}, "x");
  tj_value_t s = tj_graph_input(g, TJ_DTYPE_F32, g_srank, g_sdims, "s");
  tj_dtype_t zd = g_attrs.int4 == TJ_INT4_SIGNED     ? TJ_DTYPE_I8
                  : g_attrs.int4 == TJ_INT4_UNSIGNED ? TJ_DTYPE_U8
                                                     : g_qd;
  tj_value_t z =
      g_zp ? tj_graph_input(g, zd, g_srank, g_sdims, "z") : tj_value_none();
  tj_value_t q = tj_graph_quantize(g, x, s, z, &g_attrs);
  tj_graph_output(g, q, "q");
  tj_graph_output(g, tj_graph_dequantize(g, q, s, z, &g_attrs), "y");
  return g;
}

static void qdq_case(const char* what, tj_dtype_t qd, tj_int4_t int4,
                     int32_t axis, int64_t block, bool zp, double zlo,
                     double zhi) {
  g_qd = qd;
  memset(&g_attrs, 0, sizeof(g_attrs));
  g_attrs.dtype = qd;
  g_attrs.int4 = int4;
  g_attrs.axis = axis;
  g_attrs.block_size = block;
  g_zp = zp;
  const int64_t x_dims[3] = {4, 6, 10};
  if (axis == -1) {
    g_srank = 0;
  } else if (!block) {
    g_srank = 1;
    g_sdims[0] = x_dims[axis];
  } else {
    g_srank = 3;
    g_sdims[0] = 4;  // replaced by B below for the graph
    for (int i = 0; i < 3; ++i)
      g_sdims[i] = i == axis ? (x_dims[i] + block - 1) / block : x_dims[i];
  }
  spec_t in[3] = {{TJ_DTYPE_F32, 3, {4, 6, 10}, -3, 3},
                  {TJ_DTYPE_F32, g_srank, {0}, 0.01, 0.05},
                  {int4 == TJ_INT4_SIGNED     ? TJ_DTYPE_I8
                   : int4 == TJ_INT4_UNSIGNED ? TJ_DTYPE_U8
                                              : qd,
                   g_srank,
                   {0},
                   zlo,
                   zhi}};
  memcpy(in[1].dims, g_sdims, sizeof(g_sdims));
  memcpy(in[2].dims, g_sdims, sizeof(g_sdims));
  spec_t out[2] = {{int4 ? TJ_DTYPE_U8 : qd, 3, {4, 6, int4 ? 5 : 10}, 0, 0},
                   {TJ_DTYPE_F32, 3, {4, 6, 10}, 0, 0}};
  check_ops(what, build_qdq, zp ? 3 : 2, in, 2, out, 0.0, NULL);
}

TEST(qdq_every_granularity_every_tier) {
  // Blocked scales hold B as a constant 4 (the blocked scale has x's rank).
  qdq_case("i8 per tensor", TJ_DTYPE_I8, TJ_INT4_NONE, -1, 0, true, -5, 5);
  qdq_case("u8 per axis 1", TJ_DTYPE_U8, TJ_INT4_NONE, 1, 0, true, 100, 150);
  qdq_case("i8 per axis 2", TJ_DTYPE_I8, TJ_INT4_NONE, 2, 0, false, 0, 0);
  qdq_case("f8e4m3 per axis", TJ_DTYPE_F8E4M3, TJ_INT4_NONE, 1, 0, false, 0, 0);
  qdq_case("f8e5m2 per tensor", TJ_DTYPE_F8E5M2, TJ_INT4_NONE, -1, 0, false, 0,
           0);
}

// Blocked (the scale of x's rank): x [4, 6, 10] constant dims.
static tj_graph_t* build_blocked(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "blocked");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){4, 6, 10}, "x");
  tj_value_t s = tj_graph_input(g, TJ_DTYPE_F32, g_srank, g_sdims, "s");
  tj_dtype_t zd = g_attrs.int4 == TJ_INT4_SIGNED     ? TJ_DTYPE_I8
                  : g_attrs.int4 == TJ_INT4_UNSIGNED ? TJ_DTYPE_U8
                                                     : g_qd;
  tj_value_t z =
      g_zp ? tj_graph_input(g, zd, g_srank, g_sdims, "z") : tj_value_none();
  tj_value_t q = tj_graph_quantize(g, x, s, z, &g_attrs);
  tj_graph_output(g, q, "q");
  tj_graph_output(g, tj_graph_dequantize(g, q, s, z, &g_attrs), "y");
  return g;
}

static void blocked_case(const char* what, tj_dtype_t qd, tj_int4_t int4,
                         int32_t axis, int64_t block, bool zp, double zlo,
                         double zhi, int64_t last) {
  g_qd = qd;
  memset(&g_attrs, 0, sizeof(g_attrs));
  g_attrs.dtype = qd;
  g_attrs.int4 = int4;
  g_attrs.axis = axis;
  g_attrs.block_size = block;
  g_zp = zp;
  (void)last;
  const int64_t x_dims[3] = {4, 6, 10};
  g_srank = 3;
  for (int i = 0; i < 3; ++i)
    g_sdims[i] = i == axis ? (x_dims[i] + block - 1) / block : x_dims[i];
  tj_dtype_t zd = int4 == TJ_INT4_SIGNED     ? TJ_DTYPE_I8
                  : int4 == TJ_INT4_UNSIGNED ? TJ_DTYPE_U8
                                             : qd;
  spec_t in[3] = {{TJ_DTYPE_F32, 3, {4, 6, 10}, -1, 1},
                  {TJ_DTYPE_F32, 3, {0}, 0.05, 0.2},
                  {zd, 3, {0}, zlo, zhi}};
  memcpy(in[1].dims, g_sdims, sizeof(g_sdims));
  memcpy(in[2].dims, g_sdims, sizeof(g_sdims));
  spec_t out[2] = {{int4 ? TJ_DTYPE_U8 : qd, 3, {4, 6, int4 ? 5 : 10}, 0, 0},
                   {TJ_DTYPE_F32, 3, {4, 6, 10}, 0, 0}};
  check_ops(what, build_blocked, zp ? 3 : 2, in, 2, out, 0.0, NULL);
}

TEST(blocked_and_int4_every_tier) {
  blocked_case("i8 block 4 along 2 (ragged)", TJ_DTYPE_I8, TJ_INT4_NONE, 2, 4,
               true, -3, 3, 10);
  blocked_case("u8 block 4 along 1", TJ_DTYPE_U8, TJ_INT4_NONE, 1, 4, true, 120,
               130, 10);
  blocked_case("int4 block 4 along 2", TJ_DTYPE_U8, TJ_INT4_SIGNED, 2, 4, false,
               0, 0, 10);
  blocked_case("uint4 block 3 along 2 + zp", TJ_DTYPE_U8, TJ_INT4_UNSIGNED, 2,
               3, true, 6, 9, 10);
  blocked_case("int4 block 2 along 0 + zp", TJ_DTYPE_U8, TJ_INT4_SIGNED, 0, 2,
               true, -2, 2, 10);
}

// int4 with an odd last dim and float8 without saturation.
static tj_graph_t* build_odd(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "odd");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 7}, "x");
  tj_value_t s = tj_graph_scalar(g, TJ_DTYPE_F32, 0.25);
  tj_quant_attrs_t a = {.dtype = TJ_DTYPE_U8, .int4 = TJ_INT4_SIGNED};
  tj_value_t q = tj_graph_quantize(g, x, s, tj_value_none(), &a);
  tj_graph_output(g, q, "q");
  a.odd = true;
  tj_graph_output(g, tj_graph_dequantize(g, q, s, tj_value_none(), &a), "y");
  tj_quant_attrs_t f = {.dtype = TJ_DTYPE_F8E4M3, .no_saturate = true};
  tj_value_t s8 = tj_graph_scalar(g, TJ_DTYPE_F32, 0.01);
  tj_value_t q8 = tj_graph_quantize(g, x, s8, tj_value_none(), &f);
  tj_graph_output(g, q8, "q8");
  f.dtype = TJ_DTYPE_F8E5M2;
  tj_value_t s5 = tj_graph_scalar(g, TJ_DTYPE_F32, 1e-4);
  tj_graph_output(g, tj_graph_quantize(g, x, s5, tj_value_none(), &f), "q5");
  tj_graph_output(g, tj_graph_dequantize(g, q8, s8, tj_value_none(), NULL),
                  "y8");
  return g;
}

TEST(odd_int4_and_float8_no_saturate_every_tier) {
  for (int64_t B = 1; B <= 5; B += 4) {
    spec_t in[1] = {{TJ_DTYPE_F32, 2, {B, 7}, -8, 8}};
    spec_t out[5] = {{TJ_DTYPE_U8, 2, {B, 4}, 0, 0},
                     {TJ_DTYPE_F32, 2, {B, 7}, 0, 0},
                     {TJ_DTYPE_F8E4M3, 2, {B, 7}, 0, 0},
                     {TJ_DTYPE_F8E5M2, 2, {B, 7}, 0, 0},
                     {TJ_DTYPE_F32, 2, {B, 7}, 0, 0}};
    check_ops("odd int4, float8", build_odd, 1, in, 5, out, 0.0, NULL);
  }
}

//===--- errors ---===//

static void expect_error(const char* want, int64_t s_len, int32_t axis,
                         tj_dtype_t zd) {
  tj_graph_t* g = new_graph(g_ctx[0], "bad");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 4}, "x");
  tj_value_t s = tj_graph_input(g, TJ_DTYPE_F32, 1, &s_len, "s");
  tj_value_t z = zd == TJ_DTYPE_BOOL ? tj_value_none()
                                     : tj_graph_input(g, zd, 1, &s_len, "z");
  tj_quant_attrs_t a = {.dtype = TJ_DTYPE_I8, .axis = axis};
  tj_graph_output(g, tj_graph_quantize(g, x, s, z, &a), "q");
  tj_status_t st = tj_graph_finalize(g);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, want, st);
  tj_graph_destroy(g);
}

TEST(bad_scale_and_zero_point_are_named) {
  expect_error("quantize", 3, 1, TJ_DTYPE_BOOL);
  expect_error("per-axis scale must be 1-D of x's dim 4", 3, 1, TJ_DTYPE_BOOL);
  expect_error("zero point must be i8, not u8", 4, 1, TJ_DTYPE_U8);
  expect_error("axis 2 is out of range", 4, 2, TJ_DTYPE_BOOL);
}

//===--- PTX ---===//

static const char* g_ptxas = "";

static void check_ptx(const char* what, build_fn build) {
  tj_test_check_ptx(g_ptxas, what, build(g_ctx[0]));
}

TEST(ptx_of_quantize_and_dequantize) {
  check_ptx("odd int4, float8", build_odd);
  g_qd = TJ_DTYPE_U8;
  memset(&g_attrs, 0, sizeof(g_attrs));
  g_attrs.dtype = TJ_DTYPE_U8;
  g_attrs.int4 = TJ_INT4_UNSIGNED;
  g_attrs.axis = 2;
  g_attrs.block_size = 3;
  g_zp = true;
  g_srank = 3;
  g_sdims[0] = 4;
  g_sdims[1] = 6;
  g_sdims[2] = 4;
  check_ptx("uint4 blocked", build_blocked);
  printf("# PTX assembled by ptxas: %s\n", g_ptxas[0] ? g_ptxas : "skipped");
}

//===--- the straight-through gradient ---===//

TEST(straight_through_gradient) {
  tj_graph_t* g = new_graph(g_ctx[0], "ste");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){5}, "x");
  tj_value_t s = tj_graph_scalar(g, TJ_DTYPE_F32, 0.5);
  tj_quant_attrs_t a = {.dtype = TJ_DTYPE_I8};
  tj_value_t q = tj_graph_quantize(g, x, s, tj_value_none(), &a);
  tj_value_t y = tj_graph_dequantize(g, q, s, tj_value_none(), &a);
  tj_graph_output(g, tj_graph_mul(g, y, x), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_graph_t* joint = NULL;
  CHECK_OK(tj_graph_grad(g, 0, NULL, 0, NULL, &joint));
  // d(y * x)/dx = x + y (the STE: dy/dx = 1).
  float xv[5] = {0.3f, -1.2f, 2.6f, 0.f, 10.f}, gy[5] = {1, 1, 1, 1, 1};
  float yv[5], gx[5];
  int64_t five = 5;
  tj_tensor_t in[2] = {tj_tensor_make(xv, TJ_DTYPE_F32, 1, &five),
                       tj_tensor_make(gy, TJ_DTYPE_F32, 1, &five)};
  tj_tensor_t out[2] = {tj_tensor_make(yv, TJ_DTYPE_F32, 1, &five),
                        tj_tensor_make(gx, TJ_DTYPE_F32, 1, &five)};
  CHECK_OK(tj_reference_run(joint, in, 2, out, 2));
  const float dq[5] = {0.5f, -1.0f, 2.5f, 0.f, 10.f};
  for (int i = 0; i < 5; ++i) {
    CHECK(fabs(yv[i] - dq[i] * xv[i]) < 1e-6);
    CHECK(fabs(gx[i] - (xv[i] + dq[i])) < 1e-6);
  }
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
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
  RUN_TEST(ties_to_even_and_saturation);
  RUN_TEST(int4_packing_low_nibble_first);
  RUN_TEST(float8_saturate_or_not);
  RUN_TEST(qdq_every_granularity_every_tier);
  RUN_TEST(blocked_and_int4_every_tier);
  RUN_TEST(odd_int4_and_float8_no_saturate_every_tier);
  RUN_TEST(bad_scale_and_zero_point_are_named);
  RUN_TEST(ptx_of_quantize_and_dequantize);
  RUN_TEST(straight_through_gradient);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  close_jits();
  TEST_MAIN_END();
}
