// fp8 (issue 17): quant_matmul, a matmul of two dequantized 8-bit operands
// run as the integer GEMM with the scales in its epilogue. Each graph is
// compiled for x86 at every ISA tier the host has, generic (symbolic M)
// and specialized, on odd sizes, and compared with the reference
// interpreter's float matmul of the dequantized operands: the fold sums
// the products exactly in i32, so the difference is the reference's own
// f32 roundings (|error| <= (K + 3) * 2^-24 * sum |a * b|; the tolerance
// below is relative to max(1, |y|)). Static QDQ as tj_calibrate makes it
// (u8 activation with a zero point per tensor, i8 weight per output
// column), per-row scales and zero points of A given as inputs, per
// tensor B, batched A. The default pipeline must turn each into
// matmul_i32 (and not with tj_pass_ctx_t.quant_matmul off), and leave a
// blocked or per-K dequantize alone. fp8: the same with float8 operands
// (matmul_f8, an f32 GEMM of the decoded values on x86): static QDQ to
// e4m3 (saturating) and e5m2 against e4m3 weights, per-row A scales, and
// a non-saturating quantize whose overflow is NaN (NaN rows in y, as the
// reference has them), matmul_f8 itself (batched, saturating casts) and
// its refusal of an f32 operand. Then the OOM sweep.

#include <stdlib.h>

#include "lib/passes/pass.h"
#include "tests/unit/tier_ops_check.h"

enum { K = 67, N = 45 };
// f32 sums of K products in the reference against exact ones.
static const double kTol = 2e-5;
static int8_t g_w[K * N];
static float g_ws[N];

static uint8_t g_w8[K * N];  // e4m3 bits, no NaN

static void make_weights(void) {
  for (int i = 0; i < K * N; ++i) g_w[i] = (int8_t)(rng_unit() * 255.0 - 127);
  for (int n = 0; n < N; ++n) g_ws[n] = 0.01f + 0.04f * (float)rng_unit();
  for (int i = 0; i < K * N; ++i) {
    uint8_t v = (uint8_t)(rng_unit() * 256.0);
    g_w8[i] = (v & 0x7F) == 0x7F ? (uint8_t)(v & 0xF0) : v;
  }
}

// fp8: y = dequantize(quantize(x, s) to |g_f8a|) @ dequantize(W e4m3, s
// per column); per tensor s = 1/400 (|x| past 1.12 saturates, or with
// |g_f8_nosat| past 1.16 becomes NaN), or per row (|g_f8_row|: s [M] an
// input).
static tj_dtype_t g_f8a = TJ_DTYPE_F8E4M3;
static bool g_f8_row, g_f8_nosat;
static tj_graph_t* build_f8(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "f8_qdq");
  int64_t M = tj_graph_symbol(g, "M");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){M, K}, "x");
  float sx = 1.0f / 400.0f;
  tj_value_t s = g_f8_row
                     ? tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){M}, "sx")
                     : tj_graph_constant(g, TJ_DTYPE_F32, 0, NULL, &sx, 4);
  tj_quant_attrs_t qa = {.dtype = g_f8a, .no_saturate = g_f8_nosat};
  tj_value_t q = tj_graph_quantize(g, x, s, tj_value_none(), &qa);
  tj_value_t a = tj_graph_dequantize(g, q, s, tj_value_none(), &qa);
  tj_value_t wq = tj_graph_constant(g, TJ_DTYPE_F8E4M3, 2, (int64_t[]){K, N},
                                    g_w8, sizeof(g_w8));
  tj_value_t ws =
      tj_graph_constant(g, TJ_DTYPE_F32, 1, (int64_t[]){N}, g_ws, sizeof(g_ws));
  tj_quant_attrs_t wa = {.dtype = TJ_DTYPE_F8E4M3, .axis = 1};
  tj_value_t w = tj_graph_dequantize(g, wq, ws, tj_value_none(), &wa);
  tj_graph_output(g, tj_graph_matmul(g, a, w), "y");
  return g;
}

// matmul_f8 itself: y = matmul_f8(cast(x, e4m3), cast(w, e5m2)) * 0.5,
// x [2, M, K] batched against w [K, N] (the reference decodes and sums in
// f64; x86 runs the decomposition, an f32 GEMM of exact values).
static tj_graph_t* build_f8_op(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "f8_op");
  int64_t M = tj_graph_symbol(g, "M");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){2, M, K}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){K, N}, "w");
  tj_value_t y = tj_graph_matmul_f8(g, tj_graph_cast(g, x, TJ_DTYPE_F8E4M3),
                                    tj_graph_cast(g, w, TJ_DTYPE_F8E5M2));
  float half = 0.5f;
  tj_graph_output(
      g,
      tj_graph_mul(g, y, tj_graph_constant(g, TJ_DTYPE_F32, 0, NULL, &half, 4)),
      "y");
  return g;
}

// matmul_f8 itself on a bad operand: an f32 A.
static tj_graph_t* build_f8_bad(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "f8_bad");
  tj_value_t a = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){2, 3}, "a");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F8E4M3, 2, (int64_t[]){3, 2}, "b");
  tj_graph_output(g, tj_graph_matmul_f8(g, a, b), "y");
  return g;
}

// y = dequantize(quantize(x, 2/255, 128)) @ dequantize(W, s per column) + b.
static tj_graph_t* build_static(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "static_qdq");
  int64_t M = tj_graph_symbol(g, "M");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){2, M, K}, "x");
  float sx = 2.0f / 255.0f;
  uint8_t zx = 128;
  tj_value_t s = tj_graph_constant(g, TJ_DTYPE_F32, 0, NULL, &sx, 4);
  tj_value_t z = tj_graph_constant(g, TJ_DTYPE_U8, 0, NULL, &zx, 1);
  tj_quant_attrs_t qa = {.dtype = TJ_DTYPE_U8};
  tj_value_t q = tj_graph_quantize(g, x, s, z, &qa);
  tj_value_t a = tj_graph_dequantize(g, q, s, z, &qa);
  tj_value_t wq =
      tj_graph_constant(g, TJ_DTYPE_I8, 2, (int64_t[]){K, N}, g_w, sizeof(g_w));
  tj_value_t ws =
      tj_graph_constant(g, TJ_DTYPE_F32, 1, (int64_t[]){N}, g_ws, sizeof(g_ws));
  tj_quant_attrs_t wa = {.dtype = TJ_DTYPE_I8, .axis = 1};
  tj_value_t w = tj_graph_dequantize(g, wq, ws, tj_value_none(), &wa);
  tj_graph_output(g, tj_graph_matmul(g, a, w), "y");
  return g;
}

// y = dequantize(qa, sa[M], za[M]) @ dequantize(qb, sb[N], zb[N]), every
// operand an input; |B_PER_TENSOR| makes sb and zb scalars.
static bool g_b_per_tensor;
static tj_graph_t* build_inputs(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "per_row");
  int64_t M = tj_graph_symbol(g, "M");
  int32_t br = g_b_per_tensor ? 0 : 1;
  tj_value_t qa = tj_graph_input(g, TJ_DTYPE_I8, 2, (int64_t[]){M, K}, "qa");
  tj_value_t sa = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){M}, "sa");
  tj_value_t za = tj_graph_input(g, TJ_DTYPE_I8, 1, (int64_t[]){M}, "za");
  tj_value_t qb = tj_graph_input(g, TJ_DTYPE_U8, 2, (int64_t[]){K, N}, "qb");
  tj_value_t sb = tj_graph_input(g, TJ_DTYPE_F32, br, (int64_t[]){N}, "sb");
  tj_value_t zb = tj_graph_input(g, TJ_DTYPE_U8, br, (int64_t[]){N}, "zb");
  tj_quant_attrs_t aa = {.dtype = TJ_DTYPE_I8, .axis = 0};
  tj_quant_attrs_t ba = {.dtype = TJ_DTYPE_U8, .axis = 1};
  tj_value_t a = tj_graph_dequantize(g, qa, sa, za, &aa);
  tj_value_t b = tj_graph_dequantize(g, qb, sb, zb, &ba);
  tj_graph_output(g, tj_graph_relu(g, tj_graph_matmul(g, a, b)), "y");
  return g;
}

// A blocked A (groups of 16 along K): refused, the float matmul stays.
static tj_graph_t* build_blocked(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "blocked");
  int64_t M = tj_graph_symbol(g, "M");
  int64_t groups = (K + 15) / 16;
  tj_value_t qa = tj_graph_input(g, TJ_DTYPE_I8, 2, (int64_t[]){M, K}, "qa");
  tj_value_t sa =
      tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){M, groups}, "sa");
  tj_value_t qb = tj_graph_input(g, TJ_DTYPE_U8, 2, (int64_t[]){K, N}, "qb");
  tj_value_t sb = tj_graph_input(g, TJ_DTYPE_F32, 0, NULL, "sb");
  tj_quant_attrs_t aa = {.dtype = TJ_DTYPE_I8, .axis = 1, .block_size = 16};
  tj_quant_attrs_t ba = {.dtype = TJ_DTYPE_U8};
  tj_value_t a = tj_graph_dequantize(g, qa, sa, tj_value_none(), &aa);
  tj_value_t b = tj_graph_dequantize(g, qb, sb, tj_value_none(), &ba);
  tj_graph_output(g, tj_graph_matmul(g, a, b), "y");
  return g;
}

// The number of |op| nodes after the default pipeline (quant_matmul on or
// off).
static int count_after_pipeline(build_fn build, bool fold, tj_op_t op) {
  tj_graph_t* g = build(g_ctx[0]);
  CHECK_OK(tj_graph_finalize(g));
  tj_graph_t* copy = NULL;
  CHECK_OK(tj_graph_clone(g, &copy));
  tj_pass_ctx_t ctx;
  tj_pass_ctx_initialize(&ctx, g_ctx[0]);
  ctx.verify_each = true;
  ctx.quant_matmul = fold;
  tj_plan_t plan;
  tj_plan_initialize(&plan, copy);
  CHECK_OK(tj_pipeline_default(&ctx, &plan));
  int count = 0;
  for (uint32_t i = 0; i < plan.graph->num_nodes; ++i)
    count += plan.graph->nodes[i].op == op;
  tj_plan_deinitialize(&plan);
  tj_graph_destroy(g);
  return count;
}

TEST(f8_static_qdq) {
  static const int64_t kM[] = {1, 6, 31};
  static const tj_dtype_t kA[] = {TJ_DTYPE_F8E4M3, TJ_DTYPE_F8E5M2};
  for (int row = 0; row < 2; ++row) {
    for (int ai = 0; ai < 2; ++ai) {
      g_f8a = kA[ai];
      g_f8_row = row != 0;
      g_f8_nosat = false;
      CHECK_EQ_INT(0, count_after_pipeline(build_f8, true, TJ_OP_DEQUANTIZE));
      for (size_t i = 0; i < sizeof(kM) / sizeof(kM[0]); ++i) {
        spec_t in[2] = {{TJ_DTYPE_F32, 2, {kM[i], K}, -1.2, 1.2},
                        {TJ_DTYPE_F32, 1, {kM[i]}, 0.002, 0.004}};
        spec_t out = {TJ_DTYPE_F32, 2, {kM[i], N}, 0, 0};
        check_ops(ai ? "f8 e5m2 x e4m3 qdq" : "f8 e4m3 qdq", build_f8,
                  row ? 2 : 1, in, 1, &out, kTol, NULL);
      }
    }
  }
  // Not saturating: |x / s| past 464 is NaN, which the GEMM propagates.
  g_f8a = TJ_DTYPE_F8E4M3;
  g_f8_row = false;
  g_f8_nosat = true;
  spec_t in = {TJ_DTYPE_F32, 2, {40, K}, -1.17, 1.17};
  spec_t out = {TJ_DTYPE_F32, 2, {40, N}, 0, 0};
  check_ops("f8 e4m3 qdq, NaN past the range", build_f8, 1, &in, 1, &out, kTol,
            NULL);
  for (int64_t m = 1; m <= 19; m += 18) {
    spec_t op_in[2] = {{TJ_DTYPE_F32, 3, {2, m, K}, -500, 500},  // saturates
                       {TJ_DTYPE_F32, 2, {K, N}, -3, 3}};
    spec_t op_out = {TJ_DTYPE_F32, 3, {2, m, N}, 0, 0};
    check_ops("matmul_f8", build_f8_op, 2, op_in, 1, &op_out, kTol, NULL);
  }
  tj_graph_t* g = build_f8_bad(g_ctx[0]);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "a must be f8e4m3 or f8e5m2, got f32", tj_graph_finalize(g));
  tj_graph_destroy(g);
}

TEST(fires_and_refuses) {
  CHECK_EQ_INT(1, count_after_pipeline(build_static, true, TJ_OP_MATMUL_I32));
  CHECK_EQ_INT(0, count_after_pipeline(build_static, false, TJ_OP_MATMUL_I32));
  CHECK_EQ_INT(1, count_after_pipeline(build_static, false, TJ_OP_MATMUL));
  g_b_per_tensor = false;
  CHECK_EQ_INT(1, count_after_pipeline(build_inputs, true, TJ_OP_MATMUL_I32));
  CHECK_EQ_INT(0, count_after_pipeline(build_blocked, true, TJ_OP_MATMUL_I32));
  CHECK_EQ_INT(1, count_after_pipeline(build_blocked, true, TJ_OP_MATMUL));
}

TEST(static_qdq) {
  static const int64_t kM[] = {1, 5, 33};
  for (size_t i = 0; i < sizeof(kM) / sizeof(kM[0]); ++i) {
    spec_t in = {TJ_DTYPE_F32, 3, {2, kM[i], K}, -1.2, 1.2};  // saturates
    spec_t out = {TJ_DTYPE_F32, 3, {2, kM[i], N}, 0, 0};
    check_ops("static qdq", build_static, 1, &in, 1, &out, kTol, NULL);
  }
}

TEST(per_row_inputs) {
  for (int bt = 0; bt < 2; ++bt) {
    g_b_per_tensor = bt != 0;
    int32_t br = bt ? 0 : 1;
    static const int64_t kM[] = {3, 29};
    for (size_t i = 0; i < sizeof(kM) / sizeof(kM[0]); ++i) {
      int64_t m = kM[i];
      spec_t in[6] = {
          {TJ_DTYPE_I8, 2, {m, K}, -128, 127},
          {TJ_DTYPE_F32, 1, {m}, 0.001, 0.02},
          {TJ_DTYPE_I8, 1, {m}, -128, 127},
          {TJ_DTYPE_U8, 2, {K, N}, 0, 255},
          {TJ_DTYPE_F32, br, {N}, 0.001, 0.02},
          {TJ_DTYPE_U8, br, {N}, 0, 255},
      };
      spec_t out = {TJ_DTYPE_F32, 2, {m, N}, 0, 0};
      check_ops(bt ? "per row A, per tensor B" : "per row A, per column B",
                build_inputs, 6, in, 1, &out, kTol, NULL);
    }
  }
}

TEST(blocked_refused_runs) {
  spec_t in[4] = {
      {TJ_DTYPE_I8, 2, {7, K}, -128, 127},
      {TJ_DTYPE_F32, 2, {7, (K + 15) / 16}, 0.001, 0.02},
      {TJ_DTYPE_U8, 2, {K, N}, 0, 255},
      {TJ_DTYPE_F32, 0, {0}, 0.001, 0.02},
  };
  spec_t out = {TJ_DTYPE_F32, 2, {7, N}, 0, 0};
  check_ops("blocked A", build_blocked, 4, in, 1, &out, kTol, NULL);
}

static tj_status_t compile_run(tj_allocator_t allocator) {
  tj_context_options_t co = tj_test_context_options();
  co.allocator = allocator;
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  s = tj_graph_create(ctx, "qmoom", &g);
  tj_executable_t* exe = NULL;
  if (!s) {
    int64_t M = tj_graph_symbol(g, "M");
    tj_value_t qa = tj_graph_input(g, TJ_DTYPE_U8, 2, (int64_t[]){M, 8}, "qa");
    tj_value_t sa = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){M}, "sa");
    static int8_t w[8 * 3] = {1, -2, 3, 4, -5, 6, 7, 8, 9, -10, 11, 12};
    static float ws[3] = {0.5f, 0.25f, 0.125f};
    tj_value_t wq =
        tj_graph_constant(g, TJ_DTYPE_I8, 2, (int64_t[]){8, 3}, w, sizeof(w));
    tj_value_t wsv =
        tj_graph_constant(g, TJ_DTYPE_F32, 1, (int64_t[]){3}, ws, sizeof(ws));
    tj_quant_attrs_t aa = {.dtype = TJ_DTYPE_U8, .axis = 0};
    tj_quant_attrs_t wa = {.dtype = TJ_DTYPE_I8, .axis = 1};
    tj_value_t a = tj_graph_dequantize(g, qa, sa, tj_value_none(), &aa);
    tj_value_t b = tj_graph_dequantize(g, wq, wsv, tj_value_none(), &wa);
    tj_graph_output(g, tj_graph_matmul(g, a, b), "y");
    s = tj_graph_finalize(g);
  }
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.target = TJ_TARGET_X86;
  opts.x86.num_threads = 1;
  if (!s) s = tj_compile(g, &opts, &exe);
  if (!s) {
    uint8_t qa[2 * 8] = {0, 1, 2, 3, 250, 251, 252, 253, 9, 8, 7, 6, 5, 4, 3};
    float sa[2] = {0.5f, 2.0f}, y[2 * 3];
    tj_tensor_t in[2] = {
        tj_tensor_make(qa, TJ_DTYPE_U8, 2, (int64_t[]){2, 8}),
        tj_tensor_make(sa, TJ_DTYPE_F32, 1, (int64_t[]){2}),
    };
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, (int64_t[]){2, 3});
    s = tj_executable_run(exe, in, 2, &out, 1);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(oom_sweep) {
  tj_test_oom_sweep("quant_matmul compile and run", compile_run);
}

int main(void) {
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o = tj_test_context_options();
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  make_weights();
  RUN_TEST(fires_and_refuses);
  RUN_TEST(f8_static_qdq);
  RUN_TEST(static_qdq);
  RUN_TEST(per_row_inputs);
  RUN_TEST(blocked_refused_runs);
  RUN_TEST(oom_sweep);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  TEST_MAIN_END();
}
