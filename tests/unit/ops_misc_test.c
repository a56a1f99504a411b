// The small ops of issue 15 as native kernels (gather, mod, bitwise ops,
// shifts, ...): kernel-IR bodies against the oracle of x86_test_util.h on
// the JIT of every tier the host has, and graphs: every graph is
// compiled for x86 at each ISA tier the host has (a context per tier:
// the host's, AVX2, SSE2; asking for a tier above the host's gives the
// host's), generic (symbolic dims as params) and specialized to the shape,
// run, and compared with tj_reference_run: floats within a relative
// tolerance, integers and bools exactly. Each compiled executable must have
// no graph break. Edge values: negative and out-of-range indices, empty
// dims, symbolic dims; errors must be the reference's.

#include "tests/unit/tier_ops_check.h"

//===--- gather ---===//

// An embedding lookup fused with a positional add: table[50, 24] f32,
// ids[B, 7] i32 with negative and out-of-range values (wrapped, clamped).
static tj_graph_t* build_embedding(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "embedding");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t t = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){50, 24}, "t");
  tj_value_t ids = tj_graph_input(g, TJ_DTYPE_I32, 2, (int64_t[]){B, 7}, "ids");
  tj_value_t pos = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){7, 24}, "p");
  tj_value_t e = tj_graph_gather(g, t, ids, 0);
  tj_graph_output(g, tj_graph_add(g, e, pos), "y");
  return g;
}

TEST(gather_embedding) {
  for (int64_t B = 0; B <= 5; B += 5) {
    spec_t in[3] = {{TJ_DTYPE_F32, 2, {50, 24}, -2, 2},
                    {TJ_DTYPE_I32, 2, {B, 7}, -70, 70},
                    {TJ_DTYPE_F32, 2, {7, 24}, -1, 1}};
    spec_t out[1] = {{TJ_DTYPE_F32, 3, {B, 7, 24}, 0, 0}};
    check_ops("embedding", build_embedding, 3, in, 1, out, 1e-6, NULL);
  }
}

// An inner axis of symbolic size N, i64 indices computed in the kernel
// (ids * 3 - 2), an f16 table; and an integer table along the last axis.
static tj_graph_t* build_inner(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "inner");
  int64_t N = tj_graph_symbol(g, "N");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F16, 3, (int64_t[]){3, N, 5}, "x");
  tj_value_t ids = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){2, 2}, "i");
  tj_value_t k = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){4, N}, "k");
  tj_value_t three = tj_graph_scalar(g, TJ_DTYPE_I64, 3);
  tj_value_t two = tj_graph_scalar(g, TJ_DTYPE_I64, 2);
  tj_value_t idx = tj_graph_sub(g, tj_graph_mul(g, ids, three), two);
  tj_graph_output(g, tj_graph_gather(g, x, idx, 1), "y");
  tj_graph_output(g, tj_graph_gather(g, k, ids, -1), "z");
  return g;
}

TEST(gather_inner_axis_symbolic) {
  for (int64_t N = 1; N <= 9; N += 4) {
    spec_t in[3] = {{TJ_DTYPE_F16, 3, {3, N, 5}, -4, 4},
                    {TJ_DTYPE_I64, 2, {2, 2}, -12, 12},
                    {TJ_DTYPE_I64, 2, {4, N}, -1e12, 1e12}};
    spec_t out[2] = {{TJ_DTYPE_F16, 4, {3, 2, 2, 5}, 0, 0},
                     {TJ_DTYPE_I64, 3, {4, 2, 2}, 0, 0}};
    check_ops("inner", build_inner, 3, in, 2, out, 0, NULL);
  }
  // N = 0: nothing to pick, on the reference and in the kernel alike.
  spec_t in[3] = {{TJ_DTYPE_F16, 3, {3, 0, 5}, -4, 4},
                  {TJ_DTYPE_I64, 2, {2, 2}, -12, 12},
                  {TJ_DTYPE_I64, 2, {4, 0}, 0, 0}};
  spec_t out[2] = {{TJ_DTYPE_F16, 4, {3, 2, 2, 5}, 0, 0},
                   {TJ_DTYPE_I64, 3, {4, 2, 2}, 0, 0}};
  check_ops("inner_empty", build_inner, 3, in, 2, out, 0, "is empty");
}

// A gather as a reduction's prologue (a row sum of looked-up rows), one in
// a matmul epilogue (x @ w + table[ids]), and a bool table.
static tj_graph_t* build_prologue_epilogue(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "pro_epi");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t t = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){30, 16}, "t");
  tj_value_t ids = tj_graph_input(g, TJ_DTYPE_I64, 1, (int64_t[]){B}, "ids");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 8}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){8, 16}, "w");
  tj_value_t m = tj_graph_input(g, TJ_DTYPE_BOOL, 1, (int64_t[]){30}, "m");
  tj_value_t rows = tj_graph_gather(g, t, ids, 0);
  tj_graph_output(g, tj_graph_sum(g, rows, 1, (int32_t[]){1}, false), "s");
  tj_graph_output(g, tj_graph_add(g, tj_graph_matmul(g, x, w), rows), "y");
  tj_graph_output(g, tj_graph_gather(g, m, ids, 0), "b");
  return g;
}

TEST(gather_prologue_and_epilogue) {
  int64_t B = 37;
  spec_t in[5] = {{TJ_DTYPE_F32, 2, {30, 16}, -1, 1},
                  {TJ_DTYPE_I64, 1, {B}, -40, 40},
                  {TJ_DTYPE_F32, 2, {B, 8}, -1, 1},
                  {TJ_DTYPE_F32, 2, {8, 16}, -1, 1},
                  {TJ_DTYPE_BOOL, 1, {30}, 0, 1}};
  spec_t out[3] = {{TJ_DTYPE_F32, 1, {B}, 0, 0},
                   {TJ_DTYPE_F32, 2, {B, 16}, 0, 0},
                   {TJ_DTYPE_BOOL, 1, {B}, 0, 0}};
  check_ops("prologue_epilogue", build_prologue_epilogue, 5, in, 3, out, 1e-5,
            NULL);
}

//===--- remainders, bitwise ops and shifts ---===//

// Each op on i8, i32 and i64 against the kernel-IR oracle at every tier:
// full-range operands, divisors in [-3, 3] (0 and -1 among them), shift
// counts from -3 to past the width.
TEST(integer_ops_every_tier) {
  static const tj_dtype_t dts[] = {TJ_DTYPE_I8, TJ_DTYPE_I32, TJ_DTYPE_I64};
  static const tj_op_t ops[] = {TJ_OP_MOD,         TJ_OP_FMOD,
                                TJ_OP_BITWISE_AND, TJ_OP_BITWISE_OR,
                                TJ_OP_BITWISE_XOR, TJ_OP_SHIFT_LEFT,
                                TJ_OP_SHIFT_RIGHT, TJ_OP_BITWISE_NOT};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(dts); ++t) {
    double bits = 8.0 * (double)tj_dtype_size(dts[t]);
    double lim = dts[t] == TJ_DTYPE_I8    ? 127
                 : dts[t] == TJ_DTYPE_I32 ? 2147483647.0
                                          : 9e18;
    for (size_t i = 0; i < TJ_ARRAY_SIZE(ops); ++i) {
      tj_op_t op = ops[i];
      char name[64];
      snprintf(name, sizeof(name), "%s_%s", tj_op_info(op)->name,
               tj_dtype_name(dts[t]));
      tj_kir_t* k = NULL;
      CHECK_OK(
          tj_kir_create(tj_allocator_system(), TJ_KIR_POINTWISE, name, &k));
      tj_kir_ival_t dims[1] = {tj_kir_constant(203)};
      tj_kir_set_space(k, 1, dims);
      uint32_t a = tj_kir_add_buffer(k, "a", dts[t], TJ_KIR_INPUT, kUnit);
      uint32_t b = tj_kir_add_buffer(k, "b", dts[t], TJ_KIR_INPUT, kUnit);
      uint32_t y = tj_kir_add_buffer(k, "y", dts[t], TJ_KIR_OUTPUT, kUnit);
      uint32_t la = tj_kir_load(k, a), lb = tj_kir_load(k, b);
      tj_kir_store(k, y,
                   op == TJ_OP_BITWISE_NOT ? tj_kir_unary(k, op, la)
                                           : tj_kir_binary(k, op, la, lb));
      fill_t fills[3] = {{-lim - 1, lim, false, false},
                         {-lim - 1, lim, false, false},
                         {0, 0, false, false}};
      if (op == TJ_OP_MOD || op == TJ_OP_FMOD) {
        fills[1] = (fill_t){-3, 3, false, false};
      } else if (op == TJ_OP_SHIFT_LEFT || op == TJ_OP_SHIFT_RIGHT) {
        fills[1] = (fill_t){-3, fmin(bits + 3, 127), false, false};
      }
      check_kernel(k, NULL, fills, 0, 0);
      tj_kir_destroy(k);
    }
  }
}

// mod and fmod on floats at every tier, NaN, infinities and zeros among the
// operands: exact (fmod is exact in any precision; mod adds b once).
TEST(float_remainders_every_tier) {
  static const tj_dtype_t dts[] = {TJ_DTYPE_F32, TJ_DTYPE_F64, TJ_DTYPE_F16};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(dts); ++t) {
    for (int m = 0; m < 2; ++m) {
      tj_op_t op = m ? TJ_OP_MOD : TJ_OP_FMOD;
      char name[64];
      snprintf(name, sizeof(name), "%s_%s", tj_op_info(op)->name,
               tj_dtype_name(dts[t]));
      tj_kir_t* k = NULL;
      CHECK_OK(
          tj_kir_create(tj_allocator_system(), TJ_KIR_POINTWISE, name, &k));
      tj_kir_ival_t dims[1] = {tj_kir_constant(301)};
      tj_kir_set_space(k, 1, dims);
      uint32_t a = tj_kir_add_buffer(k, "a", dts[t], TJ_KIR_INPUT, kUnit);
      uint32_t b = tj_kir_add_buffer(k, "b", dts[t], TJ_KIR_INPUT, kUnit);
      uint32_t y = tj_kir_add_buffer(k, "y", dts[t], TJ_KIR_OUTPUT, kUnit);
      tj_kir_store(k, y,
                   tj_kir_binary(k, op, tj_kir_load(k, a), tj_kir_load(k, b)));
      fill_t fills[3] = {{-1e3, 1e3, true, false},
                         {-20, 20, true, false},
                         {0, 0, false, false}};
      // f16 keeps f32 math between the rounding of loads and stores; mod's
      // one add rounds to f32 first (at most one f16 ulp).
      check_kernel(k, NULL, fills, dts[t] == TJ_DTYPE_F16 && m ? 1 : 0, 0);
      tj_kir_destroy(k);
    }
  }
}

// A chain of them fused into one kernel through tj_compile: masks, hashes
// and wraps of the kind an ONNX graph has, with symbolic B and B = 0.
static tj_graph_t* build_bits(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "bits");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t a = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){B, 19}, "a");
  tj_value_t s = tj_graph_input(g, TJ_DTYPE_I64, 1, (int64_t[]){19}, "s");
  tj_value_t d = tj_graph_input(g, TJ_DTYPE_I32, 2, (int64_t[]){B, 19}, "d");
  tj_value_t e = tj_graph_input(g, TJ_DTYPE_I32, 1, (int64_t[]){19}, "e");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 19}, "x");
  tj_value_t h = tj_graph_bitwise_xor(g, tj_graph_shift_left(g, a, s),
                                      tj_graph_shift_right(g, a, s));
  h = tj_graph_bitwise_and(g, tj_graph_bitwise_not(g, h),
                           tj_graph_bitwise_or(g, a, s));
  tj_graph_output(g, tj_graph_mul(g, h, a), "h");  // wraps
  tj_graph_output(
      g, tj_graph_add(g, tj_graph_mod(g, d, e), tj_graph_fmod(g, d, e)), "r");
  tj_value_t c = tj_graph_scalar(g, TJ_DTYPE_F32, 2.5);
  tj_graph_output(
      g, tj_graph_sub(g, tj_graph_mod(g, x, c), tj_graph_fmod(g, x, c)), "f");
  return g;
}

TEST(bitwise_chain_fuses) {
  for (int64_t B = 0; B <= 6; B += 6) {
    spec_t in[5] = {{TJ_DTYPE_I64, 2, {B, 19}, -9e18, 9e18},
                    {TJ_DTYPE_I64, 1, {19}, -2, 70},
                    {TJ_DTYPE_I32, 2, {B, 19}, -2147483648.0, 2147483647.0},
                    {TJ_DTYPE_I32, 1, {19}, -4, 4},
                    {TJ_DTYPE_F32, 2, {B, 19}, -20, 20}};
    spec_t out[3] = {{TJ_DTYPE_I64, 2, {B, 19}, 0, 0},
                     {TJ_DTYPE_I32, 2, {B, 19}, 0, 0},
                     {TJ_DTYPE_F32, 2, {B, 19}, 0, 0}};
    check_ops("bits", build_bits, 5, in, 3, out, 1e-6, NULL);
  }
}

// Builders refuse floats for the integer-only ops, naming the node.
TEST(bitwise_refuses_floats) {
  tj_graph_t* g = new_graph(g_ctx[0], "refuse");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){3}, "x");
  CHECK(tj_value_is_none(tj_graph_shift_left(g, x, x)));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT,
               "shift_left (node %1): needs an integer dtype, got f32",
               tj_graph_finalize(g));
  tj_graph_destroy(g);
}

//===--- argmin ---===//

// argmin along an inner and the last axis: floats with NaNs (the first NaN
// wins) and ties (the first min wins), integers at their lowest value
// (where -x would overflow), symbolic rows and the empty-axis error.
static tj_graph_t* build_argmin(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "argmin");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){B, 5, 37}, "x");
  tj_value_t h = tj_graph_input(g, TJ_DTYPE_F16, 2, (int64_t[]){B, 9}, "h");
  tj_value_t i = tj_graph_input(g, TJ_DTYPE_I8, 2, (int64_t[]){3, B}, "i");
  tj_value_t l = tj_graph_input(g, TJ_DTYPE_I64, 2, (int64_t[]){4, 33}, "l");
  tj_graph_output(g, tj_graph_argmin(g, x, -1, false), "a");
  tj_graph_output(g, tj_graph_argmin(g, x, 1, true), "b");
  tj_graph_output(g, tj_graph_argmin(g, h, 1, false), "c");
  tj_graph_output(g, tj_graph_argmin(g, i, 1, false), "d");
  tj_graph_output(g, tj_graph_argmin(g, l, 1, false), "e");
  return g;
}

TEST(argmin_like_numpy) {
  for (int64_t B = 1; B <= 7; B += 6) {
    // Few distinct values: ties everywhere; i8 and i64 at their lowest.
    spec_t in[4] = {{TJ_DTYPE_F32, 3, {B, 5, 37}, -2, 2},
                    {TJ_DTYPE_F16, 2, {B, 9}, -2, 2},
                    {TJ_DTYPE_I8, 2, {3, B}, -128, -126},
                    {TJ_DTYPE_I64, 2, {4, 33}, -9.2233720368547758e18, -9e18}};
    spec_t out[5] = {{TJ_DTYPE_I64, 2, {B, 5}, 0, 0},
                     {TJ_DTYPE_I64, 3, {B, 1, 37}, 0, 0},
                     {TJ_DTYPE_I64, 1, {B}, 0, 0},
                     {TJ_DTYPE_I64, 1, {3}, 0, 0},
                     {TJ_DTYPE_I64, 1, {4}, 0, 0}};
    check_ops("argmin", build_argmin, 4, in, 5, out, 0, NULL);
  }
  // B = 0: the argmin over B of i is over an empty axis.
  spec_t in[4] = {{TJ_DTYPE_F32, 3, {0, 5, 37}, -2, 2},
                  {TJ_DTYPE_F16, 2, {0, 9}, -2, 2},
                  {TJ_DTYPE_I8, 2, {3, 0}, 0, 0},
                  {TJ_DTYPE_I64, 2, {4, 33}, -5, 5}};
  spec_t out[5] = {{TJ_DTYPE_I64, 2, {0, 5}, 0, 0},
                   {TJ_DTYPE_I64, 3, {0, 1, 37}, 0, 0},
                   {TJ_DTYPE_I64, 1, {0}, 0, 0},
                   {TJ_DTYPE_I64, 1, {3}, 0, 0},
                   {TJ_DTYPE_I64, 1, {4}, 0, 0}};
  check_ops("argmin_empty", build_argmin, 4, in, 5, out, 0, "is empty");
}

// NaNs placed by hand: the first NaN wins over any min.
static tj_graph_t* build_argmin_nan(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "argmin_nan");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F64, 2, (int64_t[]){3, 40}, "x");
  tj_value_t z = tj_graph_scalar(g, TJ_DTYPE_F64, 0.0);
  // log of a negative is NaN: x in [-1, 10] makes a few per row.
  tj_value_t y = tj_graph_log(g, tj_graph_maximum(g, x, tj_graph_mul(g, x, z)));
  tj_graph_output(g, tj_graph_argmin(g, tj_graph_log(g, x), 1, false), "n");
  tj_graph_output(g, tj_graph_argmin(g, y, 1, false), "m");
  return g;
}

TEST(argmin_nan_wins) {
  spec_t in[1] = {{TJ_DTYPE_F64, 2, {3, 40}, -1, 10}};
  spec_t out[2] = {{TJ_DTYPE_I64, 1, {3}, 0, 0}, {TJ_DTYPE_I64, 1, {3}, 0, 0}};
  check_ops("argmin_nan", build_argmin_nan, 1, in, 2, out, 0, NULL);
}

//===--- one_hot ---===//

// Class ids [B, 6] (negative and out of range among them) to a [B, 6, 10]
// f32 one-hot times a weight, and a symbolic depth along axis 0 of i8
// values: every result fused, no graph break.
static tj_graph_t* build_one_hot(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "one_hot");
  int64_t B = tj_graph_symbol(g, "B");
  int64_t D = tj_graph_symbol(g, "D");
  tj_value_t ids = tj_graph_input(g, TJ_DTYPE_I32, 2, (int64_t[]){B, 6}, "i");
  tj_value_t v = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){2}, "v");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){10}, "w");
  tj_value_t q = tj_graph_input(g, TJ_DTYPE_I8, 1, (int64_t[]){2}, "q");
  tj_value_t k = tj_graph_input(g, TJ_DTYPE_I64, 1, (int64_t[]){D}, "k");
  tj_value_t oh = tj_graph_one_hot(g, ids, v, 10, -1);
  tj_graph_output(g, tj_graph_mul(g, oh, w), "y");
  tj_graph_output(g, tj_graph_one_hot(g, ids, q, D, 0), "z");
  tj_graph_output(g, tj_graph_neg(g, k), "k");  // binds D
  return g;
}

TEST(one_hot_like_onnx) {
  for (int64_t B = 0; B <= 4; B += 4) {
    for (int64_t D = 0; D <= 5; D += 5) {
      spec_t in[5] = {{TJ_DTYPE_I32, 2, {B, 6}, -12, 12},
                      {TJ_DTYPE_F32, 1, {2}, -3, 3},
                      {TJ_DTYPE_F32, 1, {10}, -1, 1},
                      {TJ_DTYPE_I8, 1, {2}, -100, 100},
                      {TJ_DTYPE_I64, 1, {D}, -5, 5}};
      spec_t out[3] = {{TJ_DTYPE_F32, 3, {B, 6, 10}, 0, 0},
                       {TJ_DTYPE_I8, 3, {D, B, 6}, 0, 0},
                       {TJ_DTYPE_I64, 1, {D}, 0, 0}};
      check_ops("one_hot", build_one_hot, 5, in, 3, out, 1e-6, NULL);
    }
  }
}

int main(void) {
  open_jits();
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(gather_embedding);
  RUN_TEST(gather_inner_axis_symbolic);
  RUN_TEST(gather_prologue_and_epilogue);
  RUN_TEST(integer_ops_every_tier);
  RUN_TEST(float_remainders_every_tier);
  RUN_TEST(bitwise_chain_fuses);
  RUN_TEST(bitwise_refuses_floats);
  RUN_TEST(argmin_like_numpy);
  RUN_TEST(argmin_nan_wins);
  RUN_TEST(one_hot_like_onnx);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  close_jits();
  TEST_MAIN_END();
}
