// The integer dtypes of issue 15: i16, u16, u32 and u64. The scalar
// conversions of lib/dtype.c (wrapping, float -> unsigned of negative and
// out-of-range values), the .tj text form (u64 beyond 2^63), and graphs
// compiled for x86 at every ISA tier the host has, generic and
// specialized, compared bit for bit with tj_reference_run
// (tests/unit/tier_ops_check.h): arithmetic wrapping as numpy, division and
// remainder by 0 (0), unsigned compares, max/min and shifts (logical, by
// counts past the width), casts to and from every dtype, reductions and
// argmax/argmin. Then the same graphs through the NVPTX emitter, assembled
// by ptxas -arch=sm_90a where it is installed (no GPU needed).

#include "backends/cuda/cuda_entry.h"
#include "tests/unit/ptx_check.h"
#include "tests/unit/tier_ops_check.h"

static const tj_dtype_t kNew[] = {TJ_DTYPE_I16, TJ_DTYPE_U16, TJ_DTYPE_U32,
                                  TJ_DTYPE_U64};

//===--- scalar conversions ---===//

TEST(names_and_sizes) {
  CHECK_STREQ("i16", tj_dtype_name(TJ_DTYPE_I16));
  CHECK_STREQ("u16", tj_dtype_name(TJ_DTYPE_U16));
  CHECK_STREQ("u32", tj_dtype_name(TJ_DTYPE_U32));
  CHECK_STREQ("u64", tj_dtype_name(TJ_DTYPE_U64));
  CHECK_EQ_INT(2, tj_dtype_size(TJ_DTYPE_I16));
  CHECK_EQ_INT(2, tj_dtype_size(TJ_DTYPE_U16));
  CHECK_EQ_INT(4, tj_dtype_size(TJ_DTYPE_U32));
  CHECK_EQ_INT(8, tj_dtype_size(TJ_DTYPE_U64));
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kNew); ++i) {
    CHECK(tj_dtype_is_int(kNew[i]));
    CHECK_EQ_INT(kNew[i] != TJ_DTYPE_I16, tj_dtype_is_unsigned(kNew[i]));
  }
}

TEST(conversions) {
  // Integers wrap (two's complement), as numpy's astype.
  int16_t i16;
  tj_store_i64(TJ_DTYPE_I16, &i16, 0, 32768);
  CHECK_EQ_INT(-32768, i16);
  uint16_t u16;
  tj_store_i64(TJ_DTYPE_U16, &u16, 0, -1);
  CHECK_EQ_INT(65535, u16);
  uint32_t u32;
  tj_store_i64(TJ_DTYPE_U32, &u32, 0, -2);
  CHECK(u32 == 4294967294u);
  CHECK_EQ_INT(4294967294ll, tj_load_i64(TJ_DTYPE_U32, &u32, 0));
  uint64_t u64;
  tj_store_i64(TJ_DTYPE_U64, &u64, 0, -1);
  CHECK(u64 == UINT64_MAX);
  CHECK(tj_load_f64(TJ_DTYPE_U64, &u64, 0) == 18446744073709551616.0);
  // Floats truncate toward zero; NaN and values whose truncation does not
  // fit give 0 (the rule of the other integers): -0.5 -> 0, -1 -> 0 (out),
  // 65535.9 -> 65535, 65536 -> 0.
  static const struct {
    tj_dtype_t dtype;
    double x;
    int64_t want;
  } kCases[] = {
      {TJ_DTYPE_U16, -0.5, 0},
      {TJ_DTYPE_U16, -1.0, 0},
      {TJ_DTYPE_U16, 65535.9, 65535},
      {TJ_DTYPE_U16, 65536.0, 0},
      {TJ_DTYPE_I16, -32768.9, -32768},
      {TJ_DTYPE_I16, -32769.0, 0},
      {TJ_DTYPE_I16, 32767.5, 32767},
      {TJ_DTYPE_I16, NAN, 0},
      {TJ_DTYPE_U32, 4294967295.5, 4294967295ll},
      {TJ_DTYPE_U32, 4294967296.0, 0},
      {TJ_DTYPE_U32, -7.0, 0},
      {TJ_DTYPE_U64, 18446744073709549568.0, (int64_t)18446744073709549568ull},
      {TJ_DTYPE_U64, 18446744073709551616.0, 0},
      {TJ_DTYPE_U64, 9223372036854775808.0, INT64_MIN},
      {TJ_DTYPE_U64, -0.99, 0},
      {TJ_DTYPE_U64, -1.0, 0},
      {TJ_DTYPE_U64, INFINITY, 0},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kCases); ++i) {
    uint64_t buf = 0;
    tj_store_f64(kCases[i].dtype, &buf, 0, kCases[i].x);
    int64_t got = tj_load_i64(kCases[i].dtype, &buf, 0);
    if (got != kCases[i].want) {
      fprintf(stderr, "  %s(%.17g) = %lld, want %lld\n",
              tj_dtype_name(kCases[i].dtype), kCases[i].x, (long long)got,
              (long long)kCases[i].want);
    }
    CHECK(got == kCases[i].want);
  }
}

TEST(text_round_trip) {
  static const char kText[] =
      "func @q(%x: u16[4]) {\n"
      "  %a = constant [-32768, 32767] : i16[2]\n"
      "  %b = constant [0, 65535] : u16[2]\n"
      "  %c = constant [0, 4294967295] : u32[2]\n"
      "  %d = constant [0, 9223372036854775808, 18446744073709551615] : "
      "u64[3]\n"
      "  %y = cast %x : u64[4]\n"
      "  return %y as \"y\", %a as \"a\", %b as \"b\", %c as \"c\", %d as "
      "\"d\"\n"
      "}\n";
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_parse(g_ctx[0], kText, sizeof(kText) - 1, "q.tj", &g));
  if (!g) return;
  char* printed = NULL;
  CHECK_OK(tj_graph_print(g, &printed));
  CHECK_CONTAINS(printed, "constant [-32768, 32767] : i16[2]");
  CHECK_CONTAINS(printed, "constant [0, 65535] : u16[2]");
  CHECK_CONTAINS(printed, "constant [0, 4294967295] : u32[2]");
  CHECK_CONTAINS(printed,
                 "[0, 9223372036854775808, 18446744073709551615] : u64[3]");
  CHECK_CONTAINS(printed, "cast %x : u64[4]");
  tj_context_free_string(g_ctx[0], printed);
  tj_graph_destroy(g);
  static const char* const kBad[][2] = {
      {"[32768] : i16[1]", "out of range for i16"},
      {"[-1] : u16[1]", "out of range for u16"},
      {"[4294967296] : u32[1]", "out of range for u32"},
      {"[-1] : u64[1]", "out of range for u64"},
      {"[18446744073709551616] : u64[1]", "integer out of range"},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kBad); ++i) {
    char text[200];
    snprintf(text, sizeof(text),
             "func @q() {\n  %%c = constant %s\n  return %%c as \"c\"\n}\n",
             kBad[i][0]);
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, kBad[i][1],
                 tj_graph_parse(g_ctx[0], text, strlen(text), "q.tj", &g));
  }
}

//===--- graphs at every tier ---===//

static tj_dtype_t g_dt;     // the dtype under test
static tj_dtype_t g_other;  // a cast's other side

static int bits_of(tj_dtype_t d) { return (int)tj_dtype_size(d) * 8; }

// x, z of the whole range, y small (0, 1 and, signed, -1: the divisors
// that trap in C).
static tj_graph_t* build_arith(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "arith");
  int64_t dims[2] = {tj_graph_symbol(g, "N"), 5};
  tj_value_t x = tj_graph_input(g, g_dt, 2, dims, "x");
  tj_value_t y = tj_graph_input(g, g_dt, 2, dims, "y");
  tj_value_t z = tj_graph_input(g, g_dt, 2, dims, "z");
  tj_graph_output(g, tj_graph_add(g, x, z), "add");
  tj_graph_output(g, tj_graph_sub(g, x, z), "sub");
  tj_graph_output(g, tj_graph_mul(g, x, z), "mul");
  tj_graph_output(g, tj_graph_div(g, x, tj_graph_add(g, y, y)), "div");
  tj_graph_output(g, tj_graph_mod(g, x, y), "mod");
  tj_graph_output(g, tj_graph_fmod(g, z, y), "fmod");
  return g;
}

static tj_graph_t* build_order(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "order");
  int64_t dims[2] = {tj_graph_symbol(g, "N"), 5};
  tj_value_t x = tj_graph_input(g, g_dt, 2, dims, "x");
  tj_value_t z = tj_graph_input(g, g_dt, 2, dims, "z");
  tj_graph_output(g, tj_graph_maximum(g, x, z), "max");
  tj_graph_output(g, tj_graph_minimum(g, x, z), "min");
  tj_graph_output(g, tj_graph_lt(g, x, z), "lt");
  tj_graph_output(g, tj_graph_ge(g, x, z), "ge");
  tj_graph_output(g, tj_graph_neg(g, x), "neg");
  // abs, relu and sign of an unsigned value are the value, itself and 0/1.
  tj_value_t s = tj_graph_add(g, tj_graph_abs(g, x), tj_graph_relu(g, z));
  tj_graph_output(g, tj_graph_mul(g, s, tj_graph_sign(g, z)), "unary");
  return g;
}

// Shift counts y in [0, bits + 3] (and negative for i16).
static tj_graph_t* build_bits(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "bits");
  int64_t dims[2] = {tj_graph_symbol(g, "N"), 5};
  tj_value_t x = tj_graph_input(g, g_dt, 2, dims, "x");
  tj_value_t y = tj_graph_input(g, g_dt, 2, dims, "y");
  tj_value_t z = tj_graph_input(g, g_dt, 2, dims, "z");
  tj_graph_output(g, tj_graph_bitwise_and(g, x, z), "and");
  tj_graph_output(g, tj_graph_bitwise_or(g, x, z), "or");
  tj_graph_output(g, tj_graph_bitwise_xor(g, x, tj_graph_bitwise_not(g, z)),
                  "xor");
  tj_graph_output(g, tj_graph_shift_left(g, x, y), "shl");
  tj_graph_output(g, tj_graph_shift_right(g, x, y), "shr");
  // A chain in one kernel: every intermediate wraps.
  tj_value_t c = tj_graph_mul(g, tj_graph_add(g, x, z), z);
  c = tj_graph_shift_right(g, c, tj_graph_scalar(g, g_dt, 3));
  c = tj_graph_where(g, tj_graph_gt(g, c, x), tj_graph_sub(g, c, x), c);
  tj_graph_output(g, c, "chain");
  return g;
}

static spec_t full_range(tj_dtype_t d, int64_t n) {
  spec_t s = {d, 2, {n, 5}, 0, 0};
  if (d == TJ_DTYPE_U64) {  // the bits: every u64
    s.lo = -9223372036854775808.0;
    s.hi = 9223372036854775807.0;
  } else {
    s.lo = (double)tj_dtype_int_lowest(d);
    s.hi = (double)tj_dtype_int_highest(d);
  }
  return s;
}

TEST(integer_ops_every_tier) {
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kNew); ++i) {
    g_dt = kNew[i];
    const bool is_signed = !tj_dtype_is_unsigned(g_dt);
    for (int64_t n = 1; n <= 37; n += 36) {
      spec_t x = full_range(g_dt, n), z = full_range(g_dt, n);
      spec_t y = {g_dt, 2, {n, 5}, is_signed ? -1 : 0, 3};
      spec_t in[3] = {x, y, z};
      spec_t out[6];
      for (int k = 0; k < 6; ++k) out[k] = (spec_t){g_dt, 2, {n, 5}, 0, 0};
      char what[64];
      snprintf(what, sizeof(what), "arith %s", tj_dtype_name(g_dt));
      check_ops(what, build_arith, 3, in, 6, out, 0, NULL);
      // Some equal pairs for the compares: z drawn from a small range too.
      spec_t zs = {g_dt, 2, {n, 5}, 0, 2};
      spec_t xs = {g_dt, 2, {n, 5}, 0, 2};
      spec_t order_in[2][2] = {{x, z}, {xs, zs}};
      for (int r = 0; r < 2; ++r) {
        spec_t oo[6];
        for (int k = 0; k < 6; ++k) oo[k] = (spec_t){g_dt, 2, {n, 5}, 0, 0};
        oo[2].dtype = oo[3].dtype = TJ_DTYPE_BOOL;
        snprintf(what, sizeof(what), "order %s", tj_dtype_name(g_dt));
        check_ops(what, build_order, 2, order_in[r], 6, oo, 0, NULL);
      }
      spec_t sh = {g_dt, 2, {n, 5}, is_signed ? -2 : 0, bits_of(g_dt) + 3};
      spec_t bin[3] = {x, sh, z};
      snprintf(what, sizeof(what), "bits %s", tj_dtype_name(g_dt));
      check_ops(what, build_bits, 3, bin, 6, out, 0, NULL);
    }
  }
}

static tj_graph_t* build_cast_to(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "cast_to");
  int64_t dims[1] = {tj_graph_symbol(g, "N")};
  tj_value_t x = tj_graph_input(g, g_other, 1, dims, "x");
  tj_graph_output(g, tj_graph_cast(g, x, g_dt), "y");
  return g;
}

static tj_graph_t* build_cast_from(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "cast_from");
  int64_t dims[1] = {tj_graph_symbol(g, "N")};
  tj_value_t x = tj_graph_input(g, g_dt, 1, dims, "x");
  tj_graph_output(g, tj_graph_cast(g, x, g_other), "y");
  return g;
}

// Every dtype to and from each new one. Floats span the new dtype's range
// and beyond (negative, out of range: 0), integers their whole range.
TEST(casts_every_tier) {
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kNew); ++i) {
    g_dt = kNew[i];
    for (int o = 0; o < TJ_DTYPE_COUNT_; ++o) {
      g_other = (tj_dtype_t)o;
      char what[64];
      snprintf(what, sizeof(what), "%s -> %s", tj_dtype_name(g_other),
               tj_dtype_name(g_dt));
      spec_t src = {g_other, 1, {301}, 0, 0};
      if (tj_dtype_is_float(g_other) || tj_dtype_is_f8(g_other)) {
        double hi = (double)tj_dtype_int_highest(g_dt);
        if (g_dt == TJ_DTYPE_U64) hi = 18446744073709551616.0;
        if (g_other == TJ_DTYPE_F16) hi = fmin(hi, 60000.0);
        src.lo = -0.25 * hi - 2;
        src.hi = 1.25 * hi + 2;
      } else if (g_other == TJ_DTYPE_BOOL) {
        src.lo = 0, src.hi = 1;
      } else {
        src = full_range(g_other, 301);
        src.rank = 1;
        src.dims[0] = 301;
      }
      spec_t dst = {g_dt, 1, {301}, 0, 0};
      check_ops(what, build_cast_to, 1, &src, 1, &dst, 0, NULL);
      snprintf(what, sizeof(what), "%s -> %s", tj_dtype_name(g_dt),
               tj_dtype_name(g_other));
      spec_t from = full_range(g_dt, 301);
      from.rank = 1;
      from.dims[0] = 301;
      spec_t to = {g_other, 1, {301}, 0, 0};
      check_ops(what, build_cast_from, 1, &from, 1, &to, 0, NULL);
    }
  }
}

// sum (wrapping), prod, max, min, argmax and argmin over each axis.
static int32_t g_axis;
static tj_graph_t* build_reduce(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "reduce");
  int64_t dims[2] = {tj_graph_symbol(g, "N"), 7};
  tj_value_t x = tj_graph_input(g, g_dt, 2, dims, "x");
  int32_t ax = g_axis;
  tj_graph_output(g, tj_graph_sum(g, x, 1, &ax, false), "sum");
  tj_graph_output(g, tj_graph_prod(g, x, 1, &ax, false), "prod");
  tj_graph_output(g, tj_graph_max(g, x, 1, &ax, false), "max");
  tj_graph_output(g, tj_graph_min(g, x, 1, &ax, false), "min");
  tj_graph_output(g, tj_graph_argmax(g, x, ax, false), "argmax");
  tj_graph_output(g, tj_graph_argmin(g, x, ax, false), "argmin");
  return g;
}

TEST(reductions_every_tier) {
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kNew); ++i) {
    g_dt = kNew[i];
    for (g_axis = 0; g_axis < 2; ++g_axis) {
      for (int64_t n = 1; n <= 40; n += 39) {
        for (int r = 0; r < 2; ++r) {
          spec_t x = full_range(g_dt, n);
          x.dims[1] = 7;
          if (r) x.lo = 0, x.hi = 3;  // ties: the first wins
          int64_t od = g_axis == 0 ? 7 : n;
          spec_t out[6];
          for (int k = 0; k < 6; ++k) out[k] = (spec_t){g_dt, 1, {od}, 0, 0};
          out[4].dtype = out[5].dtype = TJ_DTYPE_I64;
          char what[64];
          snprintf(what, sizeof(what), "reduce %s axis %d", tj_dtype_name(g_dt),
                   g_axis);
          check_ops(what, build_reduce, 1, &x, 6, out, 0, NULL);
        }
      }
    }
  }
}

//===--- NVPTX ---===//

static const char* g_ptxas = "";

// |build|'s graph through the NVPTX emitter for sm_90a (no GPU needed):
// every node in a kernel, the PTX assembled by ptxas where it is installed.
static void check_ptx(const char* what, build_fn build) {
  tj_test_check_ptx(g_ptxas, what, build(g_ctx[0]));
}

TEST(ptx_every_dtype) {
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kNew); ++i) {
    g_dt = kNew[i];
    check_ptx("arith", build_arith);
    check_ptx("order", build_order);
    check_ptx("bits", build_bits);
    g_axis = 1;
    check_ptx("reduce", build_reduce);
    static const tj_dtype_t others[] = {TJ_DTYPE_F32, TJ_DTYPE_F64,
                                        TJ_DTYPE_F16, TJ_DTYPE_I8,
                                        TJ_DTYPE_U64, TJ_DTYPE_F8E4M3};
    for (size_t o = 0; o < TJ_ARRAY_SIZE(others); ++o) {
      g_other = others[o];
      if (g_other == g_dt) continue;  // no kernel
      check_ptx("cast to", build_cast_to);
      check_ptx("cast from", build_cast_from);
    }
  }
  printf("# PTX assembled by ptxas: %s\n", g_ptxas[0] ? g_ptxas : "skipped");
}

int main(int argc, char** argv) {
  if (argc > 1) g_ptxas = argv[1];
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(names_and_sizes);
  RUN_TEST(conversions);
  RUN_TEST(text_round_trip);
  RUN_TEST(integer_ops_every_tier);
  RUN_TEST(casts_every_tier);
  RUN_TEST(reductions_every_tier);
  RUN_TEST(ptx_every_dtype);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  TEST_MAIN_END();
}
