// Unit tests of lib/dtype.c: f16/bf16 conversions at their edges (max,
// subnormals, ties, NaN, infinities), the single rounding from double, and
// the cast semantics of tj_store_f64 / tj_store_i64.

#include "tests/unit/test.h"

#include "lib/dtype.h"

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

static float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

TEST(f16_decode) {
  CHECK(tj_f16_to_f32(0x3C00) == 1.0f);
  CHECK(tj_f16_to_f32(0xC000) == -2.0f);
  CHECK(tj_f16_to_f32(0x7BFF) == 65504.0f);           // max
  CHECK(tj_f16_to_f32(0x0400) == ldexpf(1.0f, -14));  // min normal
  CHECK(tj_f16_to_f32(0x0001) == ldexpf(1.0f, -24));  // min subnormal
  CHECK(tj_f16_to_f32(0x03FF) == ldexpf(1023.0f, -24));
  CHECK(isinf(tj_f16_to_f32(0x7C00)) && tj_f16_to_f32(0x7C00) > 0);
  CHECK(isinf(tj_f16_to_f32(0xFC00)) && tj_f16_to_f32(0xFC00) < 0);
  CHECK(isnan(tj_f16_to_f32(0x7E00)));
  CHECK(isnan(tj_f16_to_f32(0x7C01)));  // signalling pattern stays NaN
  CHECK(tj_f16_to_f32(0x8000) == 0.0f && signbit(tj_f16_to_f32(0x8000)));
}

TEST(f16_encode_edges) {
  CHECK_EQ_INT(0x3C00, tj_f32_to_f16(1.0f));
  CHECK_EQ_INT(0x7BFF, tj_f64_to_f16(65504.0));
  CHECK_EQ_INT(0x7BFF, tj_f64_to_f16(65519.99));  // below the tie
  CHECK_EQ_INT(0x7C00, tj_f64_to_f16(65520.0));   // tie, odd max -> inf
  CHECK_EQ_INT(0x7C00, tj_f64_to_f16(1e300));
  CHECK_EQ_INT(0xFC00, tj_f64_to_f16(-1e6));
  CHECK_EQ_INT(0x7C00, tj_f32_to_f16(INFINITY));
  CHECK_EQ_INT(0xFC00, tj_f32_to_f16(-INFINITY));
  CHECK_EQ_INT(0x8000, tj_f64_to_f16(-0.0));
  CHECK_EQ_INT(0x0000, tj_f64_to_f16(1e-300));   // underflow to +0
  CHECK_EQ_INT(0x8000, tj_f64_to_f16(-5e-324));  // double subnormal -> -0
  uint16_t nan = tj_f32_to_f16(NAN);
  CHECK((nan & 0x7C00) == 0x7C00 && (nan & 0x03FF) != 0);
  CHECK((tj_f64_to_f16(-(double)NAN) & 0x8000) != 0);
  // Subnormals and their ties (2^-24 is the quantum).
  CHECK_EQ_INT(0x0001, tj_f64_to_f16(ldexp(1.0, -24)));
  CHECK_EQ_INT(0x0000, tj_f64_to_f16(ldexp(1.0, -25)));  // tie -> even 0
  CHECK_EQ_INT(0x0001, tj_f64_to_f16(ldexp(1.0, -25) * 1.0000001));
  CHECK_EQ_INT(0x0002, tj_f64_to_f16(ldexp(3.0, -25)));     // tie -> even 2
  CHECK_EQ_INT(0x0400, tj_f64_to_f16(ldexp(2047.0, -25)));  // rounds to normal
  CHECK_EQ_INT(0x03FF, tj_f64_to_f16(ldexp(1023.0, -24)));
  // Normal ties: 1 + 2^-11 lies halfway between 0x3C00 and 0x3C01.
  CHECK_EQ_INT(0x3C00, tj_f64_to_f16(1.0 + ldexp(1.0, -11)));
  CHECK_EQ_INT(0x3C02, tj_f64_to_f16(1.0 + ldexp(3.0, -11)));
  CHECK_EQ_INT(0x3C01, tj_f64_to_f16(1.0 + ldexp(1.0, -11) + ldexp(1.0, -40)));
}

// The double is just above a tie; rounding through f32 would first land on
// the tie and then round to even, one ulp off.
TEST(f16_bf16_single_rounding_from_double) {
  double x = 1.0 + ldexp(1.0, -11) + ldexp(1.0, -40);
  CHECK_EQ_INT(0x3C00, tj_f32_to_f16((float)x));  // what double rounding gives
  CHECK_EQ_INT(0x3C01, tj_f64_to_f16(x));
  double y = 1.0 + ldexp(1.0, -8) + ldexp(1.0, -40);
  CHECK_EQ_INT(0x3F80, tj_f32_to_bf16((float)y));
  CHECK_EQ_INT(0x3F81, tj_f64_to_bf16(y));
}

TEST(f16_exhaustive_round_trip_and_ties) {
  int bad = 0;
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = tj_f16_to_f32((uint16_t)b);
    if (isnan(f)) continue;
    if (tj_f32_to_f16(f) != b) ++bad;
    if (tj_f64_to_f16((double)f) != b) ++bad;
  }
  CHECK_EQ_INT(0, bad);
  // Every midpoint between adjacent finite positive values rounds to the
  // one with the even mantissa (the midpoint is exact in double).
  int bad_ties = 0;
  for (uint32_t b = 0; b < 0x7BFF; ++b) {
    double lo = tj_f16_to_f32((uint16_t)b);
    double hi = tj_f16_to_f32((uint16_t)(b + 1));
    uint16_t want = (b & 1) ? (uint16_t)(b + 1) : (uint16_t)b;
    if (tj_f64_to_f16((lo + hi) / 2) != want) ++bad_ties;
    if (tj_f64_to_f16(-(lo + hi) / 2) != (want | 0x8000)) ++bad_ties;
  }
  CHECK_EQ_INT(0, bad_ties);
}

TEST(bf16_edges) {
  CHECK_EQ_INT(0x3F80, tj_f32_to_bf16(1.0f));
  CHECK(tj_bf16_to_f32(0x3F80) == 1.0f);
  CHECK(tj_bf16_to_f32(0x7F7F) == f32_from_bits(0x7F7F0000));  // max
  CHECK_EQ_INT(0x7F7F, tj_f32_to_bf16(f32_from_bits(0x7F7F7FFF)));
  CHECK_EQ_INT(0x7F80, tj_f32_to_bf16(f32_from_bits(0x7F7F8000)));  // tie
  CHECK_EQ_INT(0x7F80, tj_f32_to_bf16(3.4028235e38f));  // FLT_MAX -> inf
  CHECK_EQ_INT(0x7F80, tj_f64_to_bf16(1e39));
  CHECK_EQ_INT(0xFF80, tj_f32_to_bf16(-INFINITY));
  CHECK_EQ_INT(0x8000, tj_f32_to_bf16(-0.0f));
  // Ties to even in the normal range.
  CHECK_EQ_INT(0x3F80, tj_f32_to_bf16(f32_from_bits(0x3F808000)));
  CHECK_EQ_INT(0x3F82, tj_f32_to_bf16(f32_from_bits(0x3F818000)));
  CHECK_EQ_INT(0x3F81, tj_f32_to_bf16(f32_from_bits(0x3F808001)));
  // Subnormals: 0x0001 is 2^-133.
  CHECK(tj_bf16_to_f32(0x0001) == ldexpf(1.0f, -133));
  CHECK_EQ_INT(0x0001, tj_f64_to_bf16(ldexp(1.0, -133)));
  CHECK_EQ_INT(0x0000, tj_f32_to_bf16(f32_from_bits(0x00008000)));  // tie
  CHECK_EQ_INT(0x0002, tj_f32_to_bf16(f32_from_bits(0x00018000)));  // tie
  CHECK_EQ_INT(0x0080, tj_f64_to_bf16(ldexp(1.0, -126)));  // min normal
  CHECK_EQ_INT(0x0000, tj_f64_to_bf16(ldexp(1.0, -134)));  // tie -> 0
  CHECK_EQ_INT(0x0001, tj_f64_to_bf16(ldexp(1.0, -134) * 1.5));
  uint16_t nan = tj_f32_to_bf16(NAN);
  CHECK((nan & 0x7F80) == 0x7F80 && (nan & 0x007F) != 0);
  CHECK(isnan(tj_bf16_to_f32(0x7FC0)));
  CHECK(isnan(tj_bf16_to_f32(0x7F81)));
  int bad = 0;
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = tj_bf16_to_f32((uint16_t)b);
    if (isnan(f)) continue;
    if (tj_f32_to_bf16(f) != b || f32_bits(f) != (b << 16)) ++bad;
  }
  CHECK_EQ_INT(0, bad);
}

TEST(load_store_every_dtype) {
  unsigned char buf[64];
  for (int d = 0; d < TJ_DTYPE_COUNT_; ++d) {
    tj_dtype_t dt = (tj_dtype_t)d;
    memset(buf, 0xAB, sizeof(buf));
    // 5 has no i2, u2, f4e2m1 or f8e8m0 form; 1 has.
    const int v = dt == TJ_DTYPE_BOOL || tj_dtype_is_narrow(dt) ? 1 : 5;
    tj_store_f64(dt, buf, 3, (double)v);
    CHECK(tj_load_f64(dt, buf, 3) == (double)v);
    CHECK_EQ_INT(v, tj_load_i64(dt, buf, 3));
    // Neighbours untouched.
    size_t es = tj_dtype_size(dt);
    CHECK(buf[2 * es] == 0xAB && buf[4 * es] == 0xAB);
  }
  // Exact i64 (beyond 2^53).
  int64_t big = INT64_C(9007199254740993);
  tj_store_i64(TJ_DTYPE_I64, buf, 1, big);
  CHECK_EQ_INT(big, tj_load_i64(TJ_DTYPE_I64, buf, 1));
  tj_store_i64(TJ_DTYPE_I64, buf, 0, INT64_MIN);
  CHECK(tj_load_i64(TJ_DTYPE_I64, buf, 0) == INT64_MIN);
}

TEST(cast_float_to_int) {
  unsigned char buf[16];
#define STORE_I(dt, v) \
  (tj_store_f64((dt), buf, 0, (v)), tj_load_i64((dt), buf, 0))
  CHECK_EQ_INT(127, STORE_I(TJ_DTYPE_I8, 127.9));
  CHECK_EQ_INT(0, STORE_I(TJ_DTYPE_I8, 128.0));  // out of range -> 0
  CHECK_EQ_INT(-128, STORE_I(TJ_DTYPE_I8, -128.9));
  CHECK_EQ_INT(0, STORE_I(TJ_DTYPE_I8, -129.0));
  CHECK_EQ_INT(-2, STORE_I(TJ_DTYPE_I8, -2.7));  // toward zero
  CHECK_EQ_INT(0, STORE_I(TJ_DTYPE_I8, (double)NAN));
  CHECK_EQ_INT(0, STORE_I(TJ_DTYPE_I32, (double)INFINITY));
  CHECK_EQ_INT(2147483647, STORE_I(TJ_DTYPE_I32, 2147483647.5));
  CHECK_EQ_INT(0, STORE_I(TJ_DTYPE_I32, 2147483648.0));
  CHECK_EQ_INT(INT32_MIN, STORE_I(TJ_DTYPE_I32, -2147483648.9));
  CHECK_EQ_INT(0, STORE_I(TJ_DTYPE_I64, 9223372036854775808.0));
  CHECK(STORE_I(TJ_DTYPE_I64, -9223372036854775808.0) == INT64_MIN);
  CHECK_EQ_INT(INT64_C(4611686018427387904),
               STORE_I(TJ_DTYPE_I64, 4611686018427387904.0));
  CHECK_EQ_INT(0, STORE_I(TJ_DTYPE_I64, (double)-INFINITY));
  // Anything -> bool is x != 0; NaN is nonzero.
  CHECK_EQ_INT(1, STORE_I(TJ_DTYPE_BOOL, (double)NAN));
  CHECK_EQ_INT(1, STORE_I(TJ_DTYPE_BOOL, 0.25));
  CHECK_EQ_INT(0, STORE_I(TJ_DTYPE_BOOL, -0.0));
#undef STORE_I
  // Loading a float as an integer uses the same rule.
  float f = -3.99f;
  CHECK_EQ_INT(-3, tj_load_i64(TJ_DTYPE_F32, &f, 0));
  f = NAN;
  CHECK_EQ_INT(0, tj_load_i64(TJ_DTYPE_F32, &f, 0));
}

TEST(int_store_wraps) {
  unsigned char buf[16];
  tj_store_i64(TJ_DTYPE_I8, buf, 0, 300);
  CHECK_EQ_INT(44, tj_load_i64(TJ_DTYPE_I8, buf, 0));
  tj_store_i64(TJ_DTYPE_I8, buf, 0, -129);
  CHECK_EQ_INT(127, tj_load_i64(TJ_DTYPE_I8, buf, 0));
  tj_store_i64(TJ_DTYPE_I32, buf, 0, (INT64_C(1) << 32) + 5);
  CHECK_EQ_INT(5, tj_load_i64(TJ_DTYPE_I32, buf, 0));
  tj_store_i64(TJ_DTYPE_I32, buf, 0, INT64_C(2147483648));
  CHECK_EQ_INT(INT32_MIN, tj_load_i64(TJ_DTYPE_I32, buf, 0));
  tj_store_i64(TJ_DTYPE_BOOL, buf, 0, 256);  // != 0, not truncated to 0
  CHECK_EQ_INT(1, tj_load_i64(TJ_DTYPE_BOOL, buf, 0));
  // Integers to floats round once (through double, harmlessly).
  tj_store_i64(TJ_DTYPE_F32, buf, 0, INT64_MAX);
  CHECK(tj_load_f64(TJ_DTYPE_F32, buf, 0) == 9223372036854775808.0);
  tj_store_i64(TJ_DTYPE_F16, buf, 0, 65519);
  CHECK(tj_load_f64(TJ_DTYPE_F16, buf, 0) == 65504.0);
  tj_store_i64(TJ_DTYPE_F16, buf, 0, 70000);
  CHECK(isinf(tj_load_f64(TJ_DTYPE_F16, buf, 0)));
  tj_store_i64(TJ_DTYPE_BF16, buf, 0, 257);  // tie between 256 and 258
  CHECK(tj_load_f64(TJ_DTYPE_BF16, buf, 0) == 256.0);
}

TEST(dtype_from_name) {
  tj_dtype_t d = TJ_DTYPE_F32;
  CHECK(tj_dtype_from_name("bf16", 4, &d) && d == TJ_DTYPE_BF16);
  CHECK(tj_dtype_from_name("bool", 4, &d) && d == TJ_DTYPE_BOOL);
  CHECK(tj_dtype_from_name("i64x", 3, &d) && d == TJ_DTYPE_I64);
  CHECK(!tj_dtype_from_name("f8", 2, &d));
  CHECK(!tj_dtype_from_name("f32", 2, &d));
  CHECK(tj_dtype_is_float(TJ_DTYPE_BF16) && !tj_dtype_is_float(TJ_DTYPE_I8));
  CHECK(tj_dtype_is_int(TJ_DTYPE_I8) && !tj_dtype_is_int(TJ_DTYPE_BOOL));
}

int main(void) {
  RUN_TEST(f16_decode);
  RUN_TEST(f16_encode_edges);
  RUN_TEST(f16_bf16_single_rounding_from_double);
  RUN_TEST(f16_exhaustive_round_trip_and_ties);
  RUN_TEST(bf16_edges);
  RUN_TEST(load_store_every_dtype);
  RUN_TEST(cast_float_to_int);
  RUN_TEST(int_store_wraps);
  RUN_TEST(dtype_from_name);
  TEST_MAIN_END();
}
