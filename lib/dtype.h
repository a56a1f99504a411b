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
static inline bool tj_dtype_is_int(tj_dtype_t d) {
  return d == TJ_DTYPE_I8 || d == TJ_DTYPE_I32 || d == TJ_DTYPE_I64;
}
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

// Element |index| of a dense array of |dtype| at |data|, as double.
double tj_load_f64(tj_dtype_t dtype, const void* data, int64_t index);
// Stores |value| converted to |dtype| (the conversion of tj_graph_cast:
// float->int truncates toward zero, NaN and out-of-range give 0; bool is
// value != 0).
void tj_store_f64(tj_dtype_t dtype, void* data, int64_t index, double value);
// Exact integer paths (i64 does not fit in a double).
int64_t tj_load_i64(tj_dtype_t dtype, const void* data, int64_t index);
void tj_store_i64(tj_dtype_t dtype, void* data, int64_t index, int64_t value);

// Parses a dtype name ("f32", ...) of |length| bytes; false if unknown.
bool tj_dtype_from_name(const char* name, size_t length, tj_dtype_t* out);

#endif  // TJ_LIB_DTYPE_H_
