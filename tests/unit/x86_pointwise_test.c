// POINTWISE kernels built directly in kernel IR, JIT-compiled for every x86
// level the host has (AVX-512, AVX2, SSE2), run on arrays and compared with
// the double-precision interpreter: every op, dtypes, casts, broadcast and
// strided (gather/scatter) operands, odd sizes and tails.

#include "tests/unit/x86_test_util.h"

static tj_kir_t* new_kernel(const char* name) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_POINTWISE, name, &k));
  return k;
}

//===--- tests ---===//

typedef struct unary_case_t {
  tj_op_t op;
  fill_t fill;
  double ulps;
} unary_case_t;

static const unary_case_t kUnaryF32[] = {
    {TJ_OP_NEG, {-1e3, 1e3, true, false}, 0},
    {TJ_OP_ABS, {-1e3, 1e3, true, false}, 0},
    {TJ_OP_EXP, {-110, 95, true, false}, 2},
    {TJ_OP_LOG, {0, 1e4, true, false}, 2},
    {TJ_OP_SQRT, {0, 1e6, true, false}, 0},
    {TJ_OP_RSQRT, {0, 1e6, true, false}, 1},
    {TJ_OP_TANH, {-12, 12, true, false}, 3},
    {TJ_OP_SIGMOID, {-110, 40, true, false}, 3},
    {TJ_OP_ERF, {-5, 5, true, false}, 3},
    {TJ_OP_ERFC, {-5, 10, true, false}, 7},
    {TJ_OP_SIN, {-200, 200, true, false}, 3},
    {TJ_OP_COS, {-200, 200, true, false}, 3},
    {TJ_OP_ASIN, {-1, 1, true, false}, 3},
    {TJ_OP_ACOS, {-1, 1, true, false}, 3},
    {TJ_OP_ATAN, {-1e3, 1e3, true, false}, 3},
    {TJ_OP_RELU, {-1e3, 1e3, true, false}, 0},
    {TJ_OP_FLOOR, {-1e3, 1e3, true, false}, 0},
    {TJ_OP_CEIL, {-1e3, 1e3, true, false}, 0},
    {TJ_OP_ROUND, {-40, 40, true, false}, 0},
    {TJ_OP_SIGN, {-1e3, 1e3, true, false}, 0},
};

// y = op(x) over 1037 f32 values (a full-vector body and a tail).
TEST(unary_f32_every_op) {
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kUnaryF32); ++i) {
    const unary_case_t* c = &kUnaryF32[i];
    char name[64];
    snprintf(name, sizeof(name), "unary_%s", tj_op_info(c->op)->name);
    tj_kir_t* k = new_kernel(name);
    tj_kir_ival_t dims[1] = {tj_kir_constant(1037)};
    tj_kir_set_space(k, 1, dims);
    uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, kUnit);
    uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, kUnit);
    tj_kir_store(k, y, tj_kir_unary(k, c->op, tj_kir_load(k, x)));
    fill_t fills[2] = {c->fill, {0, 0, false, false}};
    check_kernel(k, NULL, fills, c->ulps, 0);
    tj_kir_destroy(k);
  }
  // isnan gives bool.
  tj_kir_t* k = new_kernel("isnan");
  tj_kir_ival_t dims[1] = {tj_kir_constant(333)};
  tj_kir_set_space(k, 1, dims);
  uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, kUnit);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_BOOL, TJ_KIR_OUTPUT, kUnit);
  tj_kir_store(k, y, tj_kir_unary(k, TJ_OP_ISNAN, tj_kir_load(k, x)));
  fill_t fills[2] = {{-1, 1, true, false}, {0, 0, false, false}};
  check_kernel(k, NULL, fills, 0, 0);
  tj_kir_destroy(k);
}

typedef struct binary_case_t {
  tj_op_t op;
  fill_t a, b;
  double ulps;
} binary_case_t;

static const binary_case_t kBinaryF32[] = {
    {TJ_OP_ADD, {-1e3, 1e3, true, false}, {-1e3, 1e3, true, false}, 0},
    {TJ_OP_SUB, {-1e3, 1e3, true, false}, {-1e3, 1e3, true, false}, 0},
    {TJ_OP_MUL, {-1e3, 1e3, true, false}, {-1e3, 1e3, true, false}, 0},
    {TJ_OP_DIV, {-1e3, 1e3, true, false}, {-1e3, 1e3, true, false}, 0},
    {TJ_OP_POW, {0, 30, true, false}, {-6, 6, true, false}, 1},
    {TJ_OP_POW, {-8, 8, false, false}, {-9, 9, false, true}, 1},
    {TJ_OP_MAXIMUM, {-9, 9, true, true}, {-9, 9, true, true}, 0},
    {TJ_OP_MINIMUM, {-9, 9, true, true}, {-9, 9, true, true}, 0},
};

// out[i, j] = a[i, j] op b[., j] with a in padded rows and b a broadcast
// row; then with b a broadcast column.
TEST(binary_f32_broadcast) {
  for (int bcast = 0; bcast < 2; ++bcast) {
    for (size_t i = 0; i < TJ_ARRAY_SIZE(kBinaryF32); ++i) {
      const binary_case_t* c = &kBinaryF32[i];
      char name[64];
      snprintf(name, sizeof(name), "bin_%s_%zu_%d", tj_op_info(c->op)->name, i,
               bcast);
      tj_kir_t* k = new_kernel(name);
      tj_kir_ival_t dims[2] = {tj_kir_constant(5), tj_kir_constant(77)};
      tj_kir_set_space(k, 2, dims);
      tj_kir_ival_t sa[2] = {tj_kir_constant(80), tj_kir_constant(1)};
      tj_kir_ival_t row[2] = {tj_kir_constant(0), tj_kir_constant(1)};
      tj_kir_ival_t col[2] = {tj_kir_constant(1), tj_kir_constant(0)};
      tj_kir_ival_t sy[2] = {tj_kir_constant(77), tj_kir_constant(1)};
      uint32_t a = tj_kir_add_buffer(k, "a", TJ_DTYPE_F32, TJ_KIR_INPUT, sa);
      uint32_t b = tj_kir_add_buffer(k, "b", TJ_DTYPE_F32, TJ_KIR_INPUT,
                                     bcast ? col : row);
      uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sy);
      tj_kir_store(
          k, y, tj_kir_binary(k, c->op, tj_kir_load(k, a), tj_kir_load(k, b)));
      fill_t fills[3] = {c->a, c->b, {0, 0, false, false}};
      check_kernel(k, NULL, fills, c->ulps, 0);
      tj_kir_destroy(k);
    }
  }
}

// Comparisons give bool; where selects; and/or/not on bool.
TEST(compare_where_logic) {
  static const tj_op_t cmps[] = {TJ_OP_EQ, TJ_OP_NE, TJ_OP_LT,
                                 TJ_OP_LE, TJ_OP_GT, TJ_OP_GE};
  static const tj_dtype_t dts[] = {TJ_DTYPE_F32, TJ_DTYPE_I32, TJ_DTYPE_BOOL,
                                   TJ_DTYPE_F16, TJ_DTYPE_I64};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(dts); ++t) {
    for (size_t i = 0; i < TJ_ARRAY_SIZE(cmps); ++i) {
      char name[64];
      snprintf(name, sizeof(name), "cmp_%s_%s", tj_op_info(cmps[i])->name,
               tj_dtype_name(dts[t]));
      tj_kir_t* k = new_kernel(name);
      tj_kir_ival_t dims[1] = {tj_kir_constant(131)};
      tj_kir_set_space(k, 1, dims);
      uint32_t a = tj_kir_add_buffer(k, "a", dts[t], TJ_KIR_INPUT, kUnit);
      uint32_t b = tj_kir_add_buffer(k, "b", dts[t], TJ_KIR_INPUT, kUnit);
      uint32_t y =
          tj_kir_add_buffer(k, "y", TJ_DTYPE_BOOL, TJ_KIR_OUTPUT, kUnit);
      uint32_t c =
          tj_kir_binary(k, cmps[i], tj_kir_load(k, a), tj_kir_load(k, b));
      tj_kir_store(k, y, c);
      // Few distinct values so that equality happens often.
      fill_t f = {-3, 3, false, true};
      fill_t fills[3] = {f, f, f};
      if (t == 0) fills[0].specials = true;
      check_kernel(k, NULL, fills, 0, 0);
      tj_kir_destroy(k);
    }
  }
  tj_kir_t* k = new_kernel("where_logic");
  tj_kir_ival_t dims[1] = {tj_kir_constant(99)};
  tj_kir_set_space(k, 1, dims);
  uint32_t p = tj_kir_add_buffer(k, "p", TJ_DTYPE_BOOL, TJ_KIR_INPUT, kUnit);
  uint32_t q = tj_kir_add_buffer(k, "q", TJ_DTYPE_BOOL, TJ_KIR_INPUT, kUnit);
  uint32_t a = tj_kir_add_buffer(k, "a", TJ_DTYPE_F64, TJ_KIR_INPUT, kUnit);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F64, TJ_KIR_OUTPUT, kUnit);
  uint32_t z = tj_kir_add_buffer(k, "z", TJ_DTYPE_BOOL, TJ_KIR_OUTPUT, kUnit);
  uint32_t lp = tj_kir_load(k, p), lq = tj_kir_load(k, q);
  uint32_t both =
      tj_kir_binary(k, TJ_OP_AND, lp, tj_kir_unary(k, TJ_OP_NOT, lq));
  uint32_t either = tj_kir_binary(k, TJ_OP_OR, both, lq);
  uint32_t la = tj_kir_load(k, a);
  tj_kir_store(
      k, y,
      tj_kir_where(k, both, la, tj_kir_const_float(k, TJ_DTYPE_F64, -7.5)));
  tj_kir_store(k, z, tj_kir_binary(k, TJ_OP_MAXIMUM, either, lp));
  fill_t f = {-5, 5, false, false};
  fill_t fills[5] = {f, f, f, f, f};
  check_kernel(k, NULL, fills, 0, 0);
  tj_kir_destroy(k);
}

// Integer arithmetic wraps; division by 0 gives 0, by -1 negates.
TEST(integer_ops) {
  static const tj_dtype_t dts[] = {TJ_DTYPE_I8, TJ_DTYPE_I32, TJ_DTYPE_I64};
  static const tj_op_t bins[] = {TJ_OP_ADD, TJ_OP_SUB,     TJ_OP_MUL,
                                 TJ_OP_DIV, TJ_OP_MAXIMUM, TJ_OP_MINIMUM};
  static const tj_op_t uns[] = {TJ_OP_NEG, TJ_OP_ABS, TJ_OP_RELU, TJ_OP_SIGN};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(dts); ++t) {
    double lim = dts[t] == TJ_DTYPE_I8 ? 127 : 2e9;
    for (size_t i = 0; i < TJ_ARRAY_SIZE(bins) + TJ_ARRAY_SIZE(uns); ++i) {
      bool unary = i >= TJ_ARRAY_SIZE(bins);
      tj_op_t op = unary ? uns[i - TJ_ARRAY_SIZE(bins)] : bins[i];
      char name[64];
      snprintf(name, sizeof(name), "int_%s_%s", tj_op_info(op)->name,
               tj_dtype_name(dts[t]));
      tj_kir_t* k = new_kernel(name);
      tj_kir_ival_t dims[1] = {tj_kir_constant(203)};
      tj_kir_set_space(k, 1, dims);
      uint32_t a = tj_kir_add_buffer(k, "a", dts[t], TJ_KIR_INPUT, kUnit);
      uint32_t b = tj_kir_add_buffer(k, "b", dts[t], TJ_KIR_INPUT, kUnit);
      uint32_t y = tj_kir_add_buffer(k, "y", dts[t], TJ_KIR_OUTPUT, kUnit);
      uint32_t la = tj_kir_load(k, a), lb = tj_kir_load(k, b);
      tj_kir_store(
          k, y, unary ? tj_kir_unary(k, op, la) : tj_kir_binary(k, op, la, lb));
      fill_t fills[3] = {{-lim - 1, lim, false, false},
                         {-3, 3, false, false},  // many 0 and -1 divisors
                         {0, 0, false, false}};
      if (op == TJ_OP_ADD || op == TJ_OP_MUL) fills[1] = fills[0];
      check_kernel(k, NULL, fills, 0, 0);
      tj_kir_destroy(k);
    }
  }
}

// f16, bf16 and f64 math: loads widen, math in f32 (f64), stores round.
TEST(half_and_double_math) {
  static const tj_dtype_t dts[] = {TJ_DTYPE_F16, TJ_DTYPE_BF16, TJ_DTYPE_F64};
  static const tj_op_t uns[] = {
      TJ_OP_EXP, TJ_OP_LOG,  TJ_OP_TANH,  TJ_OP_ERF, TJ_OP_SIGMOID, TJ_OP_SIN,
      TJ_OP_COS, TJ_OP_SQRT, TJ_OP_ROUND, TJ_OP_NEG, TJ_OP_ERFC};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(dts); ++t) {
    for (size_t i = 0; i < TJ_ARRAY_SIZE(uns); ++i) {
      char name[64];
      snprintf(name, sizeof(name), "h_%s_%s", tj_op_info(uns[i])->name,
               tj_dtype_name(dts[t]));
      tj_kir_t* k = new_kernel(name);
      tj_kir_ival_t dims[1] = {tj_kir_constant(157)};
      tj_kir_set_space(k, 1, dims);
      uint32_t x = tj_kir_add_buffer(k, "x", dts[t], TJ_KIR_INPUT, kUnit);
      uint32_t y = tj_kir_add_buffer(k, "y", dts[t], TJ_KIR_OUTPUT, kUnit);
      tj_kir_store(k, y, tj_kir_unary(k, uns[i], tj_kir_load(k, x)));
      double lo = uns[i] == TJ_OP_LOG || uns[i] == TJ_OP_SQRT ? 0 : -8;
      fill_t fills[2] = {{lo, 8, true, false}, {0, 0, false, false}};
      // f16/bf16: one rounding of an f32 result that is itself within a
      // few f32 ulp; f64: exp/log <= 1 ulp, sigmoid from them <= 3.
      check_kernel(k, NULL, fills, dts[t] == TJ_DTYPE_F64 ? 3 : 1, 0);
      tj_kir_destroy(k);
    }
    // A chain with a broadcast constant: (x * c + b) / 3.
    char name[64];
    snprintf(name, sizeof(name), "h_chain_%s", tj_dtype_name(dts[t]));
    tj_kir_t* k = new_kernel(name);
    tj_kir_ival_t dims[2] = {tj_kir_constant(3), tj_kir_constant(45)};
    tj_kir_set_space(k, 2, dims);
    tj_kir_ival_t sx[2] = {tj_kir_constant(45), tj_kir_constant(1)};
    tj_kir_ival_t sb[2] = {tj_kir_constant(1), tj_kir_constant(0)};
    uint32_t x = tj_kir_add_buffer(k, "x", dts[t], TJ_KIR_INPUT, sx);
    uint32_t b = tj_kir_add_buffer(k, "b", dts[t], TJ_KIR_INPUT, sb);
    uint32_t y = tj_kir_add_buffer(k, "y", dts[t], TJ_KIR_OUTPUT, sx);
    uint32_t v = tj_kir_binary(k, TJ_OP_MUL, tj_kir_load(k, x),
                               tj_kir_const_float(k, dts[t], 1.7));
    v = tj_kir_binary(k, TJ_OP_ADD, v, tj_kir_load(k, b));
    v = tj_kir_binary(k, TJ_OP_DIV, v, tj_kir_const_float(k, dts[t], 3.0));
    tj_kir_store(k, y, v);
    fill_t fills[3] = {{-50, 50, false, false}, {-5, 5, false, false}, kNoFill};
    check_kernel(k, NULL, fills, 1, 0);
    tj_kir_destroy(k);
  }
}

// Every dtype to every dtype, with NaN, infinities and out-of-range values
// for the float -> int saturation rule: one kernel per source dtype with an
// output per target dtype.
TEST(casts_all_pairs) {
  for (int from = 0; from < TJ_DTYPE_COUNT_; ++from) {
    char name[64];
    snprintf(name, sizeof(name), "cast_from_%s",
             tj_dtype_name((tj_dtype_t)from));
    tj_kir_t* k = new_kernel(name);
    tj_kir_ival_t dims[1] = {tj_kir_constant(119)};
    tj_kir_set_space(k, 1, dims);
    uint32_t x =
        tj_kir_add_buffer(k, "x", (tj_dtype_t)from, TJ_KIR_INPUT, kUnit);
    uint32_t lx = tj_kir_load(k, x);
    for (int to = 0; to < TJ_DTYPE_COUNT_; ++to) {
      char out[16];
      snprintf(out, sizeof(out), "to_%s", tj_dtype_name((tj_dtype_t)to));
      uint32_t y =
          tj_kir_add_buffer(k, out, (tj_dtype_t)to, TJ_KIR_OUTPUT, kUnit);
      tj_kir_store(k, y, tj_kir_cast(k, (tj_dtype_t)to, lx));
    }
    bool ffrom = tj_dtype_is_float((tj_dtype_t)from);
    double lim = from == TJ_DTYPE_I8 ? 127 : 3e9;
    fill_t fills[TJ_DTYPE_COUNT_ + 1];
    for (int b = 0; b <= TJ_DTYPE_COUNT_; ++b) fills[b] = kNoFill;
    fills[0] = (fill_t){ffrom ? -3e9 : -lim, ffrom ? 3e9 : lim, ffrom, false};
    // f64 -> f16/bf16 rounds through f32 (kernel_ir.h): allow one ulp
    // there (which the other float outputs of f64 then also get).
    check_kernel(k, NULL, fills, from == TJ_DTYPE_F64 ? 1 : 0, 0);
    tj_kir_destroy(k);
  }
}

// Runtime sizes and strides: gathers and scatters along the vector dim,
// transposed views, and outputs written with a stride.
TEST(runtime_strides) {
  tj_kir_t* k = new_kernel("strided");
  uint32_t R = tj_kir_add_param(k, "R");
  uint32_t C = tj_kir_add_param(k, "C");
  uint32_t SX = tj_kir_add_param(k, "SX");
  uint32_t SY = tj_kir_add_param(k, "SY");
  tj_kir_ival_t dims[2] = {tj_kir_runtime(R), tj_kir_runtime(C)};
  tj_kir_set_space(k, 2, dims);
  // x is read transposed: x[i, j] at j * SX + i.
  tj_kir_ival_t sx[2] = {tj_kir_constant(1), tj_kir_runtime(SX)};
  tj_kir_ival_t sy[2] = {tj_kir_constant(1), tj_kir_runtime(SY)};
  tj_kir_ival_t sz[2] = {tj_kir_runtime(C), tj_kir_constant(1)};
  uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, sx);
  uint32_t h = tj_kir_add_buffer(k, "h", TJ_DTYPE_F16, TJ_KIR_INPUT, sx);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_BF16, TJ_KIR_OUTPUT, sy);
  uint32_t z = tj_kir_add_buffer(k, "z", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sz);
  uint32_t v = tj_kir_binary(k, TJ_OP_MUL, tj_kir_load(k, x),
                             tj_kir_cast(k, TJ_DTYPE_F32, tj_kir_load(k, h)));
  tj_kir_store(k, y, tj_kir_cast(k, TJ_DTYPE_BF16, v));
  tj_kir_store(k, z, tj_kir_unary(k, TJ_OP_TANH, v));
  static const int64_t shapes[][2] = {{1, 1}, {3, 17}, {7, 33}, {2, 100}};
  kernel_set_t set;
  prepare_kernel(k, &set);
  for (size_t i = 0; i < TJ_ARRAY_SIZE(shapes); ++i) {
    int64_t r = shapes[i][0], c = shapes[i][1];
    int64_t scalars[4] = {r, c, r + 2, r + 1};
    fill_t f = {-2, 2, false, false};
    fill_t fills[4] = {f, f, f, f};
    check_prepared(k, &set, scalars, fills, 3, 0);
  }
  release_set(&set);
  tj_kir_destroy(k);
}

// Sizes around the vector width and the unit block; index, param and
// const ops; two outputs; an output written in place over its input.
TEST(odd_sizes_index_param) {
  static const int64_t sizes[] = {1,    3,    15,   16,   17,  31,
                                  1023, 4095, 4096, 4097, 8193};
  tj_kir_t* k = new_kernel("iota_axpy");
  uint32_t n = tj_kir_add_param(k, "N");
  uint32_t a = tj_kir_add_param(k, "A");
  tj_kir_ival_t dims[1] = {tj_kir_runtime(n)};
  tj_kir_set_space(k, 1, dims);
  uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, kUnit);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, kUnit);
  uint32_t idx =
      tj_kir_add_buffer(k, "idx", TJ_DTYPE_I64, TJ_KIR_OUTPUT, kUnit);
  uint32_t i = tj_kir_index(k, 0);
  uint32_t ai = tj_kir_binary(k, TJ_OP_MUL, i, tj_kir_param(k, a));
  tj_kir_store(k, idx, ai);
  uint32_t f = tj_kir_cast(k, TJ_DTYPE_F32, ai);
  tj_kir_store(k, y, tj_kir_binary(k, TJ_OP_ADD, f, tj_kir_load(k, x)));
  kernel_set_t set;
  prepare_kernel(k, &set);
  for (size_t s = 0; s < TJ_ARRAY_SIZE(sizes); ++s) {
    int64_t scalars[2] = {sizes[s], 3};
    fill_t fills[3] = {{-1, 1, false, false}, kNoFill, kNoFill};
    check_prepared(k, &set, scalars, fills, 0, 0);
  }
  release_set(&set);
  tj_kir_destroy(k);

  // In place: y aliases x (same strides), as memory planning may do.
  for (int j = 0; j < g_num_jits; ++j) {
    k = new_kernel("inplace");
    tj_kir_ival_t d1[1] = {tj_kir_constant(1000)};
    tj_kir_set_space(k, 1, d1);
    x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, kUnit);
    y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, kUnit);
    tj_kir_store(k, y, tj_kir_unary(k, TJ_OP_EXP, tj_kir_load(k, x)));
    CHECK_OK(tj_kir_finalize(k));
    compiled_t c;
    if (compile_kernel(g_jits[j], k, &c)) {
      float data[1000];
      for (int e = 0; e < 1000; ++e) data[e] = (float)e / 100.0f - 5.0f;
      void* bufs[2] = {data, data};
      run_kernel(g_jits[j], k, c.fn, bufs, NULL, NULL);
      double worst = 0;
      for (int e = 0; e < 1000; ++e) {
        double want = exp((double)((float)e / 100.0f - 5.0f));
        worst = fmax(worst, fabs(data[e] - want) / ulp_of(TJ_DTYPE_F32, want));
      }
      CHECK(worst <= 2);
      release_kernel(&c);
    }
    tj_kir_destroy(k);
  }
}

// Rank-8 space with a mix of broadcast dims and params.
TEST(high_rank_broadcast) {
  tj_kir_t* k = new_kernel("rank8");
  int64_t shape[8] = {2, 1, 3, 2, 1, 2, 3, 19};
  tj_kir_ival_t dims[8], sx[8], sb[8], sy[8];
  int64_t stride = 1, bstride = 1;
  for (int d = 7; d >= 0; --d) {
    dims[d] = tj_kir_constant(shape[d]);
    sx[d] = tj_kir_constant(stride);
    sy[d] = tj_kir_constant(stride);
    bool keep = d % 2 == 1;  // b broadcasts over even dims
    sb[d] = tj_kir_constant(keep ? bstride : 0);
    if (keep) bstride *= shape[d];
    stride *= shape[d];
  }
  tj_kir_set_space(k, 8, dims);
  uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, sx);
  uint32_t b = tj_kir_add_buffer(k, "b", TJ_DTYPE_F32, TJ_KIR_INPUT, sb);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sy);
  tj_kir_store(
      k, y, tj_kir_binary(k, TJ_OP_SUB, tj_kir_load(k, x), tj_kir_load(k, b)));
  fill_t fills[3] = {{-1, 1, false, false}, {-1, 1, false, false}, kNoFill};
  check_kernel(k, NULL, fills, 0, 0);
  tj_kir_destroy(k);
}

// A multithreaded run through the pool gives the serial result.
TEST(threaded_pointwise) {
  tj_thread_pool_t* pool;
  CHECK_OK(tj_thread_pool_create(tj_allocator_system(), 3, &pool));
  tj_kir_t* k = new_kernel("gelu_chain");
  tj_kir_ival_t dims[2] = {tj_kir_constant(37), tj_kir_constant(5001)};
  tj_kir_set_space(k, 2, dims);
  tj_kir_ival_t s[2] = {tj_kir_constant(5001), tj_kir_constant(1)};
  uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, s);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, s);
  uint32_t lx = tj_kir_load(k, x);
  uint32_t e = tj_kir_unary(
      k, TJ_OP_ERF,
      tj_kir_binary(k, TJ_OP_MUL, lx,
                    tj_kir_const_float(k, TJ_DTYPE_F32, 0.70710678)));
  uint32_t g = tj_kir_binary(
      k, TJ_OP_MUL,
      tj_kir_binary(k, TJ_OP_MUL, lx, tj_kir_const_float(k, TJ_DTYPE_F32, 0.5)),
      tj_kir_binary(k, TJ_OP_ADD, e, tj_kir_const_float(k, TJ_DTYPE_F32, 1)));
  tj_kir_store(k, y, g);
  CHECK_OK(tj_kir_finalize(k));
  compiled_t c;
  if (compile_kernel(g_jits[0], k, &c)) {
    size_t n = 37 * 5001;
    float* xs = malloc(n * 4);
    float* y1 = calloc(n, 4);
    float* y2 = calloc(n, 4);
    for (size_t i = 0; i < n; ++i) xs[i] = (float)rng_uniform(-4, 4);
    void* b1[2] = {xs, y1};
    void* b2[2] = {xs, y2};
    run_kernel(g_jits[0], k, c.fn, b1, NULL, NULL);
    run_kernel(g_jits[0], k, c.fn, b2, NULL, pool);
    CHECK(memcmp(y1, y2, n * 4) == 0);
    free(xs);
    free(y1);
    free(y2);
    release_kernel(&c);
  }
  tj_kir_destroy(k);
  tj_thread_pool_destroy(pool);
}

int main(void) {
  open_jits();
  RUN_TEST(unary_f32_every_op);
  RUN_TEST(binary_f32_broadcast);
  RUN_TEST(compare_where_logic);
  RUN_TEST(integer_ops);
  RUN_TEST(half_and_double_math);
  RUN_TEST(casts_all_pairs);
  RUN_TEST(runtime_strides);
  RUN_TEST(odd_sizes_index_param);
  RUN_TEST(high_rank_broadcast);
  RUN_TEST(threaded_pointwise);
  close_jits();
  TEST_MAIN_END();
}
