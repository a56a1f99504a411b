// Element conversions shared by the reference interpreter, constant folding
// and the text printer/parser: every dtype to and from double (and int64 for
// exact integer paths). f16 and bf16 round to nearest even.

#ifndef TJ_LIB_DTYPE_H_
#define TJ_LIB_DTYPE_H_

#include "lib/base.h"

static inline bool tj_dtype_is_float(tj_dtype_t d) {
  return d == TJ_DTYPE_F32 || d == TJ_DTYPE_F16 || d == TJ_DTYPE_BF16 ||
         d == TJ_DTYPE_F64;
}
// The 4- and 2-bit integers (one per byte, held at their value).
static inline bool tj_dtype_is_small_int(tj_dtype_t d) {
  return d == TJ_DTYPE_I4 || d == TJ_DTYPE_U4 || d == TJ_DTYPE_I2 ||
         d == TJ_DTYPE_U2;
}
static inline bool tj_dtype_is_int(tj_dtype_t d) {
  return d == TJ_DTYPE_I8 || d == TJ_DTYPE_I32 || d == TJ_DTYPE_I64 ||
         d == TJ_DTYPE_U8 || d == TJ_DTYPE_I16 || d == TJ_DTYPE_U16 ||
         d == TJ_DTYPE_U32 || d == TJ_DTYPE_U64 || tj_dtype_is_small_int(d);
}
// The unsigned integers. Kernels hold u8, u16 and u32 zero-extended in a
// wider integer (their signed operations are exact there); u64 needs the
// unsigned operations themselves.
static inline bool tj_dtype_is_unsigned(tj_dtype_t d) {
  return d == TJ_DTYPE_U8 || d == TJ_DTYPE_U16 || d == TJ_DTYPE_U32 ||
         d == TJ_DTYPE_U64 || d == TJ_DTYPE_U4 || d == TJ_DTYPE_U2;
}
// The smallest and largest value of an integer dtype (bool: 0, 1), as the
// int64 that tj_load_i64 gives (u64's largest: -1, its bits).
static inline int64_t tj_dtype_int_lowest(tj_dtype_t d) {
  switch (d) {
    case TJ_DTYPE_I8:
      return INT8_MIN;
    case TJ_DTYPE_I4:
      return -8;
    case TJ_DTYPE_I2:
      return -2;
    case TJ_DTYPE_I16:
      return INT16_MIN;
    case TJ_DTYPE_I32:
      return INT32_MIN;
    case TJ_DTYPE_I64:
      return INT64_MIN;
    default:
      return 0;  // bool and the unsigned
  }
}
static inline int64_t tj_dtype_int_highest(tj_dtype_t d) {
  switch (d) {
    case TJ_DTYPE_I8:
      return INT8_MAX;
    case TJ_DTYPE_I4:
      return 7;
    case TJ_DTYPE_U4:
      return 15;
    case TJ_DTYPE_I2:
      return 1;
    case TJ_DTYPE_U2:
      return 3;
    case TJ_DTYPE_I16:
      return INT16_MAX;
    case TJ_DTYPE_I32:
      return INT32_MAX;
    case TJ_DTYPE_U8:
      return UINT8_MAX;
    case TJ_DTYPE_U16:
      return UINT16_MAX;
    case TJ_DTYPE_U32:
      return UINT32_MAX;
    case TJ_DTYPE_U64:
      return -1;
    case TJ_DTYPE_BOOL:
      return 1;
    default:
      return INT64_MAX;
  }
}
// The narrow floats (every float8 and float4 format): a byte holding the
// bits, which kernels carry as such; casts decode and encode them.
static inline bool tj_dtype_is_f8(tj_dtype_t d) {
  return d == TJ_DTYPE_F8E4M3 || d == TJ_DTYPE_F8E5M2 ||
         d == TJ_DTYPE_F8E4M3FNUZ || d == TJ_DTYPE_F8E5M2FNUZ ||
         d == TJ_DTYPE_F4E2M1 || d == TJ_DTYPE_F8E8M0;
}
// The storage dtypes: no arithmetic, comparison or reduction; casts,
// movement, where, quantize and dequantize only (lib/infer.c).
static inline bool tj_dtype_is_narrow(tj_dtype_t d) {
  return tj_dtype_is_f8(d) || tj_dtype_is_small_int(d);
}

// The layout of a sign-magnitude narrow float (every tj_dtype_is_f8 dtype
// but E8M0): |mant_bits| stored mantissa bits below the exponent, |bias|,
// the sign at bit |sign_bit|, |max_mag| the largest finite magnitude
// pattern, and how it spells what does not fit.
typedef enum tj_minifloat_special_e {
  TJ_MINIFLOAT_FN,    // no infinity; magnitude all ones is NaN (E4M3FN)
  TJ_MINIFLOAT_IEEE,  // infinity at max_mag + 1, NaN above (E5M2)
  TJ_MINIFLOAT_FNUZ,  // no infinity, no -0; NaN is 0x80
  TJ_MINIFLOAT_NONE,  // no infinity or NaN (E2M1): they saturate
} tj_minifloat_special_t;
typedef struct tj_minifloat_t {
  int mant_bits;
  int bias;
  int sign_bit;
  uint32_t max_mag;
  tj_minifloat_special_t special;
} tj_minifloat_t;
// The layout of |d|; false for E8M0 and the dtypes that are no narrow
// float.
bool tj_minifloat_format(tj_dtype_t d, tj_minifloat_t* out);
// A narrow float's bits -> double, exactly.
double tj_narrow_to_f64(tj_dtype_t d, uint8_t bits);
// double -> a narrow float's bits, rounding once to nearest even (E8M0:
// up, to the next power of two, of |value|; sign ignored). |saturate|
// (ONNX Cast's attribute, 1 by default): values that round past the
// largest finite and infinities become +-max; else they become the
// format's infinity (E5M2) or NaN (E4M3FN: S.1111111, FNUZ: 0x80, E8M0:
// 0xFF). E2M1 always saturates; NaN becomes the format's NaN (E2M1, which
// has none: -0, as ONNX's reference).
uint8_t tj_f64_to_narrow(tj_dtype_t d, double value, bool saturate);
// Whether |value| overflows a non-saturating cast to narrow float |d| (it
// rounds past the largest finite, or is infinite): |value| > *out_bound,
// or >= when *out_inclusive (E8M0: |value|). False for E2M1, which always
// saturates, and for the dtypes that are no narrow float.
bool tj_narrow_overflow_bound(tj_dtype_t d, double* out_bound,
                              bool* out_inclusive);
static inline bool tj_dtype_is_valid(tj_dtype_t d) {
  return (unsigned)d < TJ_DTYPE_COUNT_;
}

// IEEE binary16 / bfloat16 bits <-> float, round to nearest even; NaN stays
// NaN, overflow gives infinity.
float tj_f16_to_f32(uint16_t bits);
uint16_t tj_f32_to_f16(float value);
float tj_bf16_to_f32(uint16_t bits);
uint16_t tj_f32_to_bf16(float value);
// Double -> f16/bf16 with a single rounding (not via f32).
uint16_t tj_f64_to_f16(double value);
uint16_t tj_f64_to_bf16(double value);
// float8 (tj_base.h): bits -> double is exact; double -> bits rounds once to
// nearest even and saturates (+-inf and out-of-range values give +-max,
// NaN gives 0x7F with the sign bit), as ONNX Cast with saturate=1.
double tj_f8e4m3_to_f64(uint8_t bits);
double tj_f8e5m2_to_f64(uint8_t bits);
uint8_t tj_f64_to_f8e4m3(double value);
uint8_t tj_f64_to_f8e5m2(double value);

// Element |index| of a dense array of |dtype| at |data|, as double.
double tj_load_f64(tj_dtype_t dtype, const void* data, int64_t index);
// Stores |value| converted to |dtype| (the conversion of tj_graph_cast:
// float->int truncates toward zero, NaN and out-of-range give 0; bool is
// value != 0; float8 saturates).
void tj_store_f64(tj_dtype_t dtype, void* data, int64_t index, double value);
// Exact integer paths (i64 does not fit in a double). A u64 travels as its
// bits (values from 2^63 read negative): convert it to a float through
// tj_load_f64, not through (double) of its int64.
int64_t tj_load_i64(tj_dtype_t dtype, const void* data, int64_t index);
void tj_store_i64(tj_dtype_t dtype, void* data, int64_t index, int64_t value);

// Parses a dtype name ("f32", ...) of |length| bytes; false if unknown.
bool tj_dtype_from_name(const char* name, size_t length, tj_dtype_t* out);

#endif  // TJ_LIB_DTYPE_H_
