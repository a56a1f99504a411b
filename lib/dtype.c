// Element conversions between every dtype and double / int64_t.
//
// f16 and bf16 are produced by one correctly rounded step from the double
// (round to nearest, ties to even), never through f32: converting through f32
// would round twice and could land one ulp off at a tie. f32 -> f16/bf16 goes
// through the same routine, which is exact because every f32 is a double.

#include "lib/dtype.h"

#include <math.h>
#include <string.h>

//===--- small IEEE formats ---===//

// Rounds |value| to a binary format with |mant_bits| stored mantissa bits
// and |exp_bits| exponent bits (f16: 10, 5; bf16: 7, 8) and returns its bit
// pattern. Subnormal results, overflow to infinity and signed zeros follow
// IEEE 754; NaN becomes the quiet NaN of the same sign.
static uint32_t round_to_small_float(double value, int mant_bits,
                                     int exp_bits) {
  uint64_t bits;
  memcpy(&bits, &value, sizeof(bits));
  const uint32_t sign = (uint32_t)(bits >> 63) << (mant_bits + exp_bits);
  const int exp_field = (int)((bits >> 52) & 0x7FF);
  const uint64_t frac = bits & ((UINT64_C(1) << 52) - 1);
  const uint32_t exp_all_ones = (UINT32_C(1) << exp_bits) - 1;
  const uint32_t inf = exp_all_ones << mant_bits;
  if (exp_field == 0x7FF) {
    if (frac != 0) return sign | inf | (UINT32_C(1) << (mant_bits - 1));
    return sign | inf;
  }
  if (exp_field == 0 && frac == 0) return sign;  // signed zero

  // value = sig * 2^lsb_exp exactly.
  uint64_t sig;
  int lsb_exp;
  if (exp_field == 0) {
    sig = frac;
    lsb_exp = -1074;
  } else {
    sig = frac | (UINT64_C(1) << 52);
    lsb_exp = exp_field - 1075;
  }
  const int lead_bit = 63 - __builtin_clzll(sig);
  const int lead_exp = lsb_exp + lead_bit;  // value in [2^lead_exp, 2^(+1))
  const int bias = (int)(exp_all_ones >> 1);
  const int min_normal_exp = 1 - bias;
  if (lead_exp > bias) return sign | inf;  // >= 2^(bias+1): overflow

  // The result's exponent; below the normal range the quantum stays fixed
  // (subnormals). The result is r * 2^(exp - mant_bits), r an integer.
  const int exp = lead_exp > min_normal_exp ? lead_exp : min_normal_exp;
  const int shift = exp - mant_bits - lsb_exp;  // >= 1 for every double input
  uint64_t r;
  if (shift > 53) {
    r = 0;  // below half the smallest subnormal: rounds to zero
  } else {
    r = sig >> shift;
    const uint64_t rem = sig & ((UINT64_C(1) << shift) - 1);
    const uint64_t half = UINT64_C(1) << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
  }
  // For a normal result r is in [2^m, 2^(m+1)] and the implicit bit adds one
  // to the exponent field; for a subnormal one the field is 0 and r < 2^m,
  // and r == 2^m after rounding up is exactly the smallest normal. A carry
  // out of the largest finite value lands on the infinity pattern.
  const uint64_t field = (uint64_t)(exp - min_normal_exp) << mant_bits;
  uint64_t out = field + r;
  if (out > inf) out = inf;
  return sign | (uint32_t)out;
}

// The double value of a small-format bit pattern (exact).
static double small_float_to_double(uint32_t bits, int mant_bits,
                                    int exp_bits) {
  const uint32_t exp_all_ones = (UINT32_C(1) << exp_bits) - 1;
  const int bias = (int)(exp_all_ones >> 1);
  const bool negative = (bits >> (mant_bits + exp_bits)) & 1;
  const uint32_t exp_field = (bits >> mant_bits) & exp_all_ones;
  const uint32_t mant = bits & ((UINT32_C(1) << mant_bits) - 1);
  double magnitude;
  if (exp_field == exp_all_ones) {
    magnitude = mant ? (double)NAN : (double)INFINITY;
  } else if (exp_field == 0) {
    magnitude = ldexp((double)mant, 1 - bias - mant_bits);
  } else {
    magnitude = ldexp((double)(mant | (UINT32_C(1) << mant_bits)),
                      (int)exp_field - bias - mant_bits);
  }
  return negative ? -magnitude : magnitude;
}

float tj_f16_to_f32(uint16_t bits) {
  return (float)small_float_to_double(bits, 10, 5);
}

uint16_t tj_f32_to_f16(float value) { return tj_f64_to_f16((double)value); }

float tj_bf16_to_f32(uint16_t bits) {
  // bf16 is the upper half of an f32; this also keeps NaN payloads.
  uint32_t wide = (uint32_t)bits << 16;
  float value;
  memcpy(&value, &wide, sizeof(value));
  return value;
}

uint16_t tj_f32_to_bf16(float value) { return tj_f64_to_bf16((double)value); }

uint16_t tj_f64_to_f16(double value) {
  return (uint16_t)round_to_small_float(value, 10, 5);
}

uint16_t tj_f64_to_bf16(double value) {
  return (uint16_t)round_to_small_float(value, 7, 8);
}

//===--- float8 ---===//

double tj_f8e4m3_to_f64(uint8_t bits) {
  // E4M3FN has no infinity: exponent field 15 holds normal numbers (256 to
  // 448) and only S.1111.111 is NaN.
  if ((bits & 0x7F) == 0x7F) return (bits & 0x80) ? -(double)NAN : (double)NAN;
  const bool negative = bits & 0x80;
  const unsigned exp_field = (bits >> 3) & 0xF;
  const unsigned mant = bits & 0x7;
  double magnitude = exp_field == 0
                         ? ldexp((double)mant, -9)
                         : ldexp((double)(mant | 8), (int)exp_field - 10);
  return negative ? -magnitude : magnitude;
}

double tj_f8e5m2_to_f64(uint8_t bits) {
  return small_float_to_double(bits, 2, 5);
}

uint8_t tj_f64_to_f8e4m3(double value) {
  const uint8_t sign = signbit(value) ? 0x80 : 0;
  if (isnan(value)) return sign | 0x7F;
  const double a = fabs(value);
  if (a < 256.0) {
    // Below 2^8 the IEEE-style format with 4 exponent bits and bias 7
    // agrees with E4M3FN; a carry to 256 lands on 0x78, which E4M3FN reads
    // as 256 too.
    return (uint8_t)(sign | round_to_small_float(a, 3, 4));
  }
  // Exponent field 15: 256 + 32 * mant. 464 and above round past 448
  // (to the NaN pattern or beyond) and saturate to 448 (0x7E); an infinity
  // too.
  if (!(a < 464.0) || (a == 464.0)) return sign | 0x7E;
  const double q = nearbyint(a / 32.0);  // 8..14, ties to even
  return (uint8_t)(sign | (0x78 + (unsigned)(q - 8.0)));
}

uint8_t tj_f64_to_f8e5m2(double value) {
  const uint8_t sign = signbit(value) ? 0x80 : 0;
  if (isnan(value)) return sign | 0x7F;
  uint32_t bits = round_to_small_float(fabs(value), 2, 5);
  if (bits >= 0x7C) bits = 0x7B;  // saturate: +-57344
  return (uint8_t)(sign | bits);
}

//===--- the other narrow floats ---===//

// The format of |d|, or NULL where it is none of these. A pointer to a
// constant, not a copy: tj_load_f64 and tj_store_f64 inline the narrow
// conversions, and a local struct whose address is taken gives them a
// stack frame that ASan allocates (its fake stack) on every call, the
// reference interpreter's hottest path in the sanitizer build.
static const tj_minifloat_t* minifloat_of(tj_dtype_t d) {
  static const tj_minifloat_t kF8E4M3 = {3, 7, 7, 0x7E, TJ_MINIFLOAT_FN};
  static const tj_minifloat_t kF8E5M2 = {2, 15, 7, 0x7B, TJ_MINIFLOAT_IEEE};
  static const tj_minifloat_t kF8E4M3Fnuz = {3, 8, 7, 0x7F, TJ_MINIFLOAT_FNUZ};
  static const tj_minifloat_t kF8E5M2Fnuz = {2, 16, 7, 0x7F, TJ_MINIFLOAT_FNUZ};
  static const tj_minifloat_t kF4E2M1 = {1, 1, 3, 0x7, TJ_MINIFLOAT_NONE};
  switch (d) {
    case TJ_DTYPE_F8E4M3:
      return &kF8E4M3;
    case TJ_DTYPE_F8E5M2:
      return &kF8E5M2;
    case TJ_DTYPE_F8E4M3FNUZ:
      return &kF8E4M3Fnuz;
    case TJ_DTYPE_F8E5M2FNUZ:
      return &kF8E5M2Fnuz;
    case TJ_DTYPE_F4E2M1:
      return &kF4E2M1;
    default:
      return NULL;
  }
}

bool tj_minifloat_format(tj_dtype_t d, tj_minifloat_t* out) {
  const tj_minifloat_t* f = minifloat_of(d);
  if (f) *out = *f;
  return f != NULL;
}

static double minifloat_decode(const tj_minifloat_t* f, uint32_t bits) {
  const uint32_t mag = bits & ((UINT32_C(1) << f->sign_bit) - 1);
  const bool negative = (bits >> f->sign_bit) & 1;
  if (f->special == TJ_MINIFLOAT_FNUZ && bits == 0x80) return (double)NAN;
  double magnitude;
  if (mag > f->max_mag) {  // FN's all ones, IEEE's infinity and NaNs
    magnitude = f->special == TJ_MINIFLOAT_IEEE && mag == f->max_mag + 1
                    ? (double)INFINITY
                    : (double)NAN;
  } else {
    const uint32_t exp_field = mag >> f->mant_bits;
    const uint32_t mant = mag & ((UINT32_C(1) << f->mant_bits) - 1);
    magnitude = exp_field == 0
                    ? ldexp((double)mant, 1 - f->bias - f->mant_bits)
                    : ldexp((double)(mant | (UINT32_C(1) << f->mant_bits)),
                            (int)exp_field - f->bias - f->mant_bits);
  }
  return negative ? -magnitude : magnitude;
}

static uint8_t minifloat_encode(const tj_minifloat_t* f, double value,
                                bool saturate) {
  const uint32_t sign = signbit(value) ? UINT32_C(1) << f->sign_bit : 0;
  if (isnan(value)) {
    switch (f->special) {
      case TJ_MINIFLOAT_FNUZ:
        return 0x80;
      case TJ_MINIFLOAT_NONE:  // E2M1: -0, as ONNX's reference has it
        return (uint8_t)(UINT32_C(1) << f->sign_bit);
      default:
        return (uint8_t)(sign | 0x7F);
    }
  }
  const double a = fabs(value);
  const int min_exp = 1 - f->bias;  // the smallest normal is 2^min_exp
  uint32_t mag;
  if (isinf(a)) {
    mag = f->max_mag + 1;
  } else if (a < ldexp(1.0, min_exp)) {
    // Subnormal: a count of 2^(min_exp - mant_bits) quanta (scaling by a
    // power of two is exact; one rounding). 2^mant_bits quanta is the
    // smallest normal's pattern.
    mag = (uint32_t)nearbyint(ldexp(a, f->mant_bits - min_exp));
  } else {
    int e;
    (void)frexp(a, &e);  // a in [2^(e-1), 2^e)
    const int lead = e - 1;
    if (lead + f->bias > 32) {
      mag = f->max_mag + 1;  // far out of range
    } else {
      // q in [2^m, 2^(m+1)]; q = 2^(m+1) carries into the exponent field.
      const double q = nearbyint(ldexp(a, f->mant_bits - lead));
      mag = ((uint32_t)(lead + f->bias) << f->mant_bits) + (uint32_t)q -
            (UINT32_C(1) << f->mant_bits);
    }
  }
  if (mag > f->max_mag) {
    if (saturate || f->special == TJ_MINIFLOAT_NONE) {
      mag = f->max_mag;
    } else if (f->special == TJ_MINIFLOAT_FNUZ) {
      return 0x80;
    } else if (f->special == TJ_MINIFLOAT_FN) {
      return (uint8_t)(sign | 0x7F);
    } else {
      return (uint8_t)(sign | (f->max_mag + 1));  // infinity
    }
  }
  if (f->special == TJ_MINIFLOAT_FNUZ && mag == 0) return 0;  // no -0
  return (uint8_t)(sign | mag);
}

double tj_narrow_to_f64(tj_dtype_t d, uint8_t bits) {
  if (d == TJ_DTYPE_F8E8M0)
    return bits == 0xFF ? (double)NAN : ldexp(1.0, (int)bits - 127);
  const tj_minifloat_t* f = minifloat_of(d);
  return f ? minifloat_decode(f, bits) : 0.0;
}

uint8_t tj_f64_to_narrow(tj_dtype_t d, double value, bool saturate) {
  if (d == TJ_DTYPE_F8E8M0) {
    // As ONNX's reference reads an f32: its exponent field, plus one when
    // any mantissa bit is set (an f32 subnormal's field is 0, so it gives
    // 2^-126, and 2^-127 itself too). The sign is ignored.
    const double a = fabs(value);
    if (isnan(a)) return 0xFF;
    if (isinf(a)) return saturate ? 0xFE : 0xFF;
    if (a == 0.0) return 0;
    if (a < 0x1p-126) return 1;
    int e;
    const double fr = frexp(a, &e);  // a = fr * 2^e, fr in [0.5, 1)
    const int field = e - 1 + 127 + (fr != 0.5);
    if (field > 254) return saturate ? 0xFE : 0xFF;
    return (uint8_t)field;
  }
  const tj_minifloat_t* f = minifloat_of(d);
  return f ? minifloat_encode(f, value, saturate) : 0;
}

bool tj_narrow_overflow_bound(tj_dtype_t d, double* out_bound,
                              bool* out_inclusive) {
  if (d == TJ_DTYPE_F8E8M0) {  // above 2^127 rounds up past it
    *out_bound = 0x1p127;
    *out_inclusive = false;
    return true;
  }
  tj_minifloat_t f;
  if (!tj_minifloat_format(d, &f) || f.special == TJ_MINIFLOAT_NONE)
    return false;
  // The midpoint between the largest finite and the next step; a tie
  // rounds to even, which is the step past max when max's last bit is odd.
  const double max = minifloat_decode(&f, f.max_mag);
  const int exp_field = (int)(f.max_mag >> f.mant_bits);
  *out_bound = max + ldexp(0.5, exp_field - f.bias - f.mant_bits);
  *out_inclusive = (f.max_mag & 1) != 0;
  return true;
}

//===--- casts ---===//

// Float -> integer as tj_graph_cast defines it: truncate toward zero; NaN
// and values whose truncation does not fit in [lo, hi] give 0. The bounds
// are compared as exclusive doubles (lo - 1, hi + 1) so that e.g. 127.9
// still fits an i8; for i64 the upper bound 2^63 is exact in a double.
static int64_t f64_to_int_checked(double value, double below, double above) {
  if (!(value > below && value < above)) return 0;  // NaN fails too
  return (int64_t)value;
}

static int64_t f64_to_i64(double value) {
  // -2^63 is representable and in range; 2^63 is the first value out.
  if (!(value >= -9223372036854775808.0 && value < 9223372036854775808.0)) {
    return 0;
  }
  return (int64_t)value;
}

double tj_load_f64(tj_dtype_t dtype, const void* data, int64_t index) {
  const unsigned char* p = (const unsigned char*)data;
  switch (dtype) {
    case TJ_DTYPE_F32: {
      float v;
      memcpy(&v, p + index * 4, 4);
      return v;
    }
    case TJ_DTYPE_F16: {
      uint16_t v;
      memcpy(&v, p + index * 2, 2);
      return small_float_to_double(v, 10, 5);
    }
    case TJ_DTYPE_BF16: {
      uint16_t v;
      memcpy(&v, p + index * 2, 2);
      return tj_bf16_to_f32(v);
    }
    case TJ_DTYPE_F64: {
      double v;
      memcpy(&v, p + index * 8, 8);
      return v;
    }
    case TJ_DTYPE_I8:
      return (double)(int8_t)p[index];
    case TJ_DTYPE_I32: {
      int32_t v;
      memcpy(&v, p + index * 4, 4);
      return v;
    }
    case TJ_DTYPE_I64: {
      int64_t v;
      memcpy(&v, p + index * 8, 8);
      return (double)v;
    }
    case TJ_DTYPE_BOOL:
      return p[index] != 0 ? 1.0 : 0.0;
    case TJ_DTYPE_U8:
      return (double)p[index];
    case TJ_DTYPE_F8E4M3:
      return tj_f8e4m3_to_f64(p[index]);
    case TJ_DTYPE_F8E5M2:
      return tj_f8e5m2_to_f64(p[index]);
    case TJ_DTYPE_I16: {
      int16_t v;
      memcpy(&v, p + index * 2, 2);
      return v;
    }
    case TJ_DTYPE_U16: {
      uint16_t v;
      memcpy(&v, p + index * 2, 2);
      return v;
    }
    case TJ_DTYPE_U32: {
      uint32_t v;
      memcpy(&v, p + index * 4, 4);
      return v;
    }
    case TJ_DTYPE_U64: {
      uint64_t v;
      memcpy(&v, p + index * 8, 8);
      return (double)v;
    }
    case TJ_DTYPE_F8E4M3FNUZ:
    case TJ_DTYPE_F8E5M2FNUZ:
    case TJ_DTYPE_F4E2M1:
    case TJ_DTYPE_F8E8M0:
      return tj_narrow_to_f64(dtype, p[index]);
    case TJ_DTYPE_I4:
    case TJ_DTYPE_I2:
      return (double)(int8_t)p[index];
    case TJ_DTYPE_U4:
    case TJ_DTYPE_U2:
      return (double)p[index];
    default:
      return 0.0;
  }
}

void tj_store_f64(tj_dtype_t dtype, void* data, int64_t index, double value) {
  unsigned char* p = (unsigned char*)data;
  switch (dtype) {
    case TJ_DTYPE_F32: {
      float v = (float)value;  // round to nearest even; overflow -> inf
      memcpy(p + index * 4, &v, 4);
      return;
    }
    case TJ_DTYPE_F16: {
      uint16_t v = tj_f64_to_f16(value);
      memcpy(p + index * 2, &v, 2);
      return;
    }
    case TJ_DTYPE_BF16: {
      uint16_t v = tj_f64_to_bf16(value);
      memcpy(p + index * 2, &v, 2);
      return;
    }
    case TJ_DTYPE_F64:
      memcpy(p + index * 8, &value, 8);
      return;
    case TJ_DTYPE_I8:
      p[index] =
          (unsigned char)(uint8_t)f64_to_int_checked(value, -129.0, 128.0);
      return;
    case TJ_DTYPE_I32: {
      int32_t v =
          (int32_t)f64_to_int_checked(value, -2147483649.0, 2147483648.0);
      memcpy(p + index * 4, &v, 4);
      return;
    }
    case TJ_DTYPE_I64: {
      int64_t v = f64_to_i64(value);
      memcpy(p + index * 8, &v, 8);
      return;
    }
    case TJ_DTYPE_BOOL:
      p[index] = value != 0.0;  // NaN != 0, as numpy's astype(bool)
      return;
    case TJ_DTYPE_U8:
      p[index] = (unsigned char)f64_to_int_checked(value, -1.0, 256.0);
      return;
    case TJ_DTYPE_F8E4M3:
      p[index] = tj_f64_to_f8e4m3(value);
      return;
    case TJ_DTYPE_F8E5M2:
      p[index] = tj_f64_to_f8e5m2(value);
      return;
    case TJ_DTYPE_I16: {
      int16_t v = (int16_t)f64_to_int_checked(value, -32769.0, 32768.0);
      memcpy(p + index * 2, &v, 2);
      return;
    }
    case TJ_DTYPE_U16: {
      uint16_t v = (uint16_t)f64_to_int_checked(value, -1.0, 65536.0);
      memcpy(p + index * 2, &v, 2);
      return;
    }
    case TJ_DTYPE_U32: {
      uint32_t v = (uint32_t)f64_to_int_checked(value, -1.0, 4294967296.0);
      memcpy(p + index * 4, &v, 4);
      return;
    }
    case TJ_DTYPE_U64: {
      // (-1, 2^64): truncation fits (2^64 is exact in a double).
      uint64_t v =
          value > -1.0 && value < 18446744073709551616.0 ? (uint64_t)value : 0;
      memcpy(p + index * 8, &v, 8);
      return;
    }
    case TJ_DTYPE_F8E4M3FNUZ:
    case TJ_DTYPE_F8E5M2FNUZ:
    case TJ_DTYPE_F4E2M1:
    case TJ_DTYPE_F8E8M0:
      p[index] = tj_f64_to_narrow(dtype, value, true);
      return;
    case TJ_DTYPE_I4:
      p[index] = (unsigned char)(uint8_t)f64_to_int_checked(value, -9.0, 8.0);
      return;
    case TJ_DTYPE_U4:
      p[index] = (unsigned char)f64_to_int_checked(value, -1.0, 16.0);
      return;
    case TJ_DTYPE_I2:
      p[index] = (unsigned char)(uint8_t)f64_to_int_checked(value, -3.0, 2.0);
      return;
    case TJ_DTYPE_U2:
      p[index] = (unsigned char)f64_to_int_checked(value, -1.0, 4.0);
      return;
    default:
      return;
  }
}

int64_t tj_load_i64(tj_dtype_t dtype, const void* data, int64_t index) {
  const unsigned char* p = (const unsigned char*)data;
  switch (dtype) {
    case TJ_DTYPE_I8:
      return (int8_t)p[index];
    case TJ_DTYPE_I32: {
      int32_t v;
      memcpy(&v, p + index * 4, 4);
      return v;
    }
    case TJ_DTYPE_I64: {
      int64_t v;
      memcpy(&v, p + index * 8, 8);
      return v;
    }
    case TJ_DTYPE_BOOL:
      return p[index] != 0;
    case TJ_DTYPE_U8:
      return p[index];
    case TJ_DTYPE_I16: {
      int16_t v;
      memcpy(&v, p + index * 2, 2);
      return v;
    }
    case TJ_DTYPE_U16: {
      uint16_t v;
      memcpy(&v, p + index * 2, 2);
      return v;
    }
    case TJ_DTYPE_U32: {
      uint32_t v;
      memcpy(&v, p + index * 4, 4);
      return v;
    }
    case TJ_DTYPE_U64: {  // the bits: values >= 2^63 read negative
      int64_t v;
      memcpy(&v, p + index * 8, 8);
      return v;
    }
    case TJ_DTYPE_I4:
    case TJ_DTYPE_I2:
      return (int8_t)p[index];
    case TJ_DTYPE_U4:
    case TJ_DTYPE_U2:
      return p[index];
    default:
      return f64_to_i64(tj_load_f64(dtype, data, index));
  }
}

void tj_store_i64(tj_dtype_t dtype, void* data, int64_t index, int64_t value) {
  unsigned char* p = (unsigned char*)data;
  // Integers wrap to the dtype's width (two's complement), through unsigned
  // types so that no conversion is implementation-defined.
  switch (dtype) {
    case TJ_DTYPE_I8:
      p[index] = (unsigned char)(uint8_t)(uint64_t)value;
      return;
    case TJ_DTYPE_I32: {
      uint32_t v = (uint32_t)(uint64_t)value;
      memcpy(p + index * 4, &v, 4);
      return;
    }
    case TJ_DTYPE_I64:
      memcpy(p + index * 8, &value, 8);
      return;
    case TJ_DTYPE_BOOL:
      p[index] = value != 0;
      return;
    case TJ_DTYPE_U8:
      p[index] = (unsigned char)(uint8_t)(uint64_t)value;
      return;
    case TJ_DTYPE_I16:
    case TJ_DTYPE_U16: {
      uint16_t v = (uint16_t)(uint64_t)value;
      memcpy(p + index * 2, &v, 2);
      return;
    }
    case TJ_DTYPE_U32: {
      uint32_t v = (uint32_t)(uint64_t)value;
      memcpy(p + index * 4, &v, 4);
      return;
    }
    case TJ_DTYPE_U64:
      memcpy(p + index * 8, &value, 8);
      return;
    case TJ_DTYPE_I4:
    case TJ_DTYPE_I2: {
      // The low 4 (2) bits, sign-extended into the byte.
      const int bits = dtype == TJ_DTYPE_I4 ? 4 : 2;
      const uint64_t low = (uint64_t)value & ((UINT64_C(1) << bits) - 1);
      const uint64_t half = UINT64_C(1) << (bits - 1);
      p[index] = (unsigned char)(uint8_t)(low & half ? low - 2 * half : low);
      return;
    }
    case TJ_DTYPE_U4:
      p[index] = (unsigned char)((uint64_t)value & 0xF);
      return;
    case TJ_DTYPE_U2:
      p[index] = (unsigned char)((uint64_t)value & 0x3);
      return;
    default:
      // int64 -> double rounds once; double -> f32/f16/bf16 then rounds
      // again, which is harmless: 53 bits >= 2 * 24 + 2 make the second
      // rounding innocuous.
      tj_store_f64(dtype, data, index, (double)value);
      return;
  }
}

bool tj_dtype_from_name(const char* name, size_t length, tj_dtype_t* out) {
  for (int d = 0; d < TJ_DTYPE_COUNT_; ++d) {
    const char* candidate = tj_dtype_name((tj_dtype_t)d);
    if (strlen(candidate) == length && memcmp(candidate, name, length) == 0) {
      *out = (tj_dtype_t)d;
      return true;
    }
  }
  return false;
}
