// The narrow dtypes of ONNX beyond float8 e4m3fn/e5m2 (issue 15, onnxdt):
// f8e4m3fnuz, f8e5m2fnuz, f4e2m1, f8e8m0, i4, u4, i2 and u2. lib/dtype.c's
// conversions against exact tables (every pattern decoded, round half to
// even at every tie, saturation and saturate=0, NaN, -0, subnormals), the
// storage-dtype rule, the .tj text form, ONNX's packed 4- and 2-bit tensors
// unpacked by the importer (with an OOM sweep), and compiled casts on x86
// at every ISA tier the host has (the host's, AVX2, SSE2), generic and
// specialized, compared bit for bit with tj_reference_run; their PTX
// through ptxas -arch=sm_90a where it is installed.

#include <math.h>
#include <string.h>

#include "lib/dtype.h"
#include "onnx/onnx_tensor.h"
#include "tests/unit/ptx_check.h"
#include "tests/unit/cast_bits_check.h"
#include "tests/unit/test.h"

static double dec(tj_dtype_t d, int b) {
  return tj_narrow_to_f64(d, (uint8_t)b);
}

//===--- decoding: every pattern ---===//

TEST(decode_every_pattern) {
  // FNUZ is FN's layout with the bias one higher: every pattern but the
  // NaNs is half the e4m3fn (e5m2) value; 0x80 is the one NaN.
  for (int b = 0; b < 256; ++b) {
    if (b == 0x80) {
      CHECK(isnan(dec(TJ_DTYPE_F8E4M3FNUZ, b)));
      CHECK(isnan(dec(TJ_DTYPE_F8E5M2FNUZ, b)));
      continue;
    }
    if ((b & 0x7F) != 0x7F)
      CHECK(dec(TJ_DTYPE_F8E4M3FNUZ, b) == tj_f8e4m3_to_f64((uint8_t)b) / 2);
    if ((b & 0x7F) < 0x7C)
      CHECK(dec(TJ_DTYPE_F8E5M2FNUZ, b) == tj_f8e5m2_to_f64((uint8_t)b) / 2);
  }
  CHECK(dec(TJ_DTYPE_F8E4M3FNUZ, 0x7F) == 240.0);
  CHECK(dec(TJ_DTYPE_F8E4M3FNUZ, 0xFF) == -240.0);
  CHECK(dec(TJ_DTYPE_F8E4M3FNUZ, 0x01) == 0x1p-10);
  CHECK(dec(TJ_DTYPE_F8E5M2FNUZ, 0x7F) == 57344.0);
  CHECK(dec(TJ_DTYPE_F8E5M2FNUZ, 0x7C) == 32768.0);
  CHECK(dec(TJ_DTYPE_F8E5M2FNUZ, 0x01) == 0x1p-17);
  // E2M1: the whole table.
  static const double kE2M1[16] = {0,  0.5,  1,  1.5,  2,  3,  4,  6,
                                   -0, -0.5, -1, -1.5, -2, -3, -4, -6};
  for (int b = 0; b < 16; ++b) {
    CHECK(dec(TJ_DTYPE_F4E2M1, b) == kE2M1[b]);
    CHECK(signbit(dec(TJ_DTYPE_F4E2M1, b)) == (b >= 8));
  }
  // E8M0: 2^(b - 127), 0xFF NaN.
  for (int b = 0; b < 255; ++b)
    CHECK(dec(TJ_DTYPE_F8E8M0, b) == ldexp(1, b - 127));
  CHECK(isnan(dec(TJ_DTYPE_F8E8M0, 0xFF)));
  // The small integers are held at their value.
  int8_t m3 = -3;
  CHECK(tj_load_f64(TJ_DTYPE_I4, &m3, 0) == -3.0);
  CHECK_EQ_INT(-3, tj_load_i64(TJ_DTYPE_I4, &m3, 0));
  CHECK_STREQ("f8e4m3fnuz", tj_dtype_name(TJ_DTYPE_F8E4M3FNUZ));
  CHECK_STREQ("u2", tj_dtype_name(TJ_DTYPE_U2));
  for (int d = TJ_DTYPE_F8E4M3FNUZ; d <= TJ_DTYPE_U2; ++d)
    CHECK_EQ_INT(1, tj_dtype_size((tj_dtype_t)d));
}

//===--- encoding: ties, saturation, specials ---===//

typedef struct {
  double x;
  uint8_t sat, nosat;  // saturate=1, saturate=0
} enc_case_t;

static void check_cases(tj_dtype_t d, const enc_case_t* c, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint8_t s = tj_f64_to_narrow(d, c[i].x, true);
    uint8_t u = tj_f64_to_narrow(d, c[i].x, false);
    if (s != c[i].sat || u != c[i].nosat)
      fprintf(stderr, "  %s(%a): 0x%02x / 0x%02x, want 0x%02x / 0x%02x\n",
              tj_dtype_name(d), c[i].x, s, u, c[i].sat, c[i].nosat);
    CHECK_EQ_INT(c[i].sat, s);
    CHECK_EQ_INT(c[i].nosat, u);
  }
}

TEST(encode_cases) {
  static const enc_case_t kE4M3FNUZ[] = {
      {0.0, 0x00, 0x00},       {-0.0, 0x00, 0x00},  // no -0
      {-0x1p-12, 0x00, 0x00},  {1.0, 0x40, 0x40},
      {240.0, 0x7F, 0x7F},     {-240.0, 0xFF, 0xFF},
      {247.9, 0x7F, 0x7F},     {248.0, 0x7F, 0x80},  // tie to even: past max
      {1e9, 0x7F, 0x80},       {INFINITY, 0x7F, 0x80},
      {-INFINITY, 0xFF, 0x80}, {NAN, 0x80, 0x80},
      {-NAN, 0x80, 0x80},      {0x1p-10, 0x01, 0x01},
      {0x1p-11, 0x00, 0x00},   {0x3p-11, 0x02, 0x02},  // ties to even
      {1.0625, 0x40, 0x40},    {1.1875, 0x42, 0x42},
  };
  check_cases(TJ_DTYPE_F8E4M3FNUZ, kE4M3FNUZ, TJ_ARRAY_SIZE(kE4M3FNUZ));
  static const enc_case_t kE5M2FNUZ[] = {
      {57344.0, 0x7F, 0x7F}, {61439.0, 0x7F, 0x7F}, {61440.0, 0x7F, 0x80},
      {-1e6, 0xFF, 0x80},    {0x1p-17, 0x01, 0x01}, {0x1p-18, 0x00, 0x00},
      {1.0, 0x40, 0x40},     {1.125, 0x40, 0x40},   {1.375, 0x42, 0x42},
      {NAN, 0x80, 0x80},
  };
  check_cases(TJ_DTYPE_F8E5M2FNUZ, kE5M2FNUZ, TJ_ARRAY_SIZE(kE5M2FNUZ));
  // ONNX Cast's saturate=0 on the OCP formats.
  static const enc_case_t kE4M3[] = {
      {464.0, 0x7E, 0x7E},
      {464.5, 0x7E, 0x7F},
      {-1e9, 0xFE, 0xFF},
      {INFINITY, 0x7E, 0x7F},
  };
  check_cases(TJ_DTYPE_F8E4M3, kE4M3, TJ_ARRAY_SIZE(kE4M3));
  static const enc_case_t kE5M2[] = {
      {61439.0, 0x7B, 0x7B},
      {61440.0, 0x7B, 0x7C},
      {-INFINITY, 0xFB, 0xFC},
  };
  check_cases(TJ_DTYPE_F8E5M2, kE5M2, TJ_ARRAY_SIZE(kE5M2));
  // E2M1 always saturates; NaN is -0 (ONNX's reference).
  static const enc_case_t kE2M1[] = {
      {0.25, 0x0, 0x0}, {0.26, 0x1, 0x1}, {0.75, 0x2, 0x2},
      {1.25, 0x2, 0x2}, {1.75, 0x4, 0x4}, {2.5, 0x4, 0x4},
      {3.5, 0x6, 0x6},  {-3.5, 0xE, 0xE}, {5.0, 0x6, 0x6},
      {5.01, 0x7, 0x7}, {1e6, 0x7, 0x7},  {-INFINITY, 0xF, 0xF},
      {NAN, 0x8, 0x8},  {-0.0, 0x8, 0x8}, {0.01, 0x0, 0x0},
  };
  check_cases(TJ_DTYPE_F4E2M1, kE2M1, TJ_ARRAY_SIZE(kE2M1));
  // E8M0 rounds |x| up to a power of two.
  static const enc_case_t kE8M0[] = {
      {0.0, 0x00, 0x00},      {0.124, 0x7C, 0x7C},   {0.125, 0x7C, 0x7C},
      {1.1, 0x80, 0x80},      {-4.0, 0x81, 0x81},    {0x1p-127, 0x01, 0x01},
      {0x1p-126, 0x01, 0x01}, {0x1p127, 0xFE, 0xFE}, {0x1.8p127, 0xFE, 0xFF},
      {INFINITY, 0xFE, 0xFF}, {NAN, 0xFF, 0xFF},
  };
  check_cases(TJ_DTYPE_F8E8M0, kE8M0, TJ_ARRAY_SIZE(kE8M0));
}

// Every finite pattern round-trips; at every midpoint between neighbours
// the encoding picks the even one, and just off it the nearer one; the
// overflow bound agrees with where saturate=0 stops giving +-max.
TEST(round_trips_ties_and_bounds) {
  static const tj_dtype_t kFloats[] = {TJ_DTYPE_F8E4M3, TJ_DTYPE_F8E5M2,
                                       TJ_DTYPE_F8E4M3FNUZ, TJ_DTYPE_F8E5M2FNUZ,
                                       TJ_DTYPE_F4E2M1};
  for (size_t f = 0; f < TJ_ARRAY_SIZE(kFloats); ++f) {
    const tj_dtype_t d = kFloats[f];
    tj_minifloat_t mf;
    CHECK(tj_minifloat_format(d, &mf));
    const int top = 1 << (mf.sign_bit + 1);
    for (int b = 0; b < top; ++b) {
      const int mag = b & ((1 << mf.sign_bit) - 1);
      if ((uint32_t)mag > mf.max_mag) continue;
      const double v = dec(d, b);
      if (isnan(v) || (v == 0 && mf.special == TJ_MINIFLOAT_FNUZ && b))
        continue;
      CHECK_EQ_INT(b, tj_f64_to_narrow(d, v, true));
      if ((uint32_t)mag == mf.max_mag) continue;
      const double next = dec(d, b + 1);
      const double mid = (v + next) / 2;
      const int even = (mag & 1) ? b + 1 : b;
      CHECK_EQ_INT(even, tj_f64_to_narrow(d, mid, true));
      CHECK_EQ_INT(b, tj_f64_to_narrow(d, nextafter(mid, v), true));
    }
    double bound;
    bool inclusive;
    if (!tj_narrow_overflow_bound(d, &bound, &inclusive)) {
      CHECK_EQ_INT(TJ_DTYPE_F4E2M1, d);
      continue;
    }
    const uint8_t at = tj_f64_to_narrow(d, bound, false);
    const uint8_t below = tj_f64_to_narrow(d, nextafter(bound, 0), false);
    const uint8_t above =
        tj_f64_to_narrow(d, nextafter(bound, INFINITY), false);
    CHECK_EQ_INT(mf.max_mag, below);
    CHECK(above != mf.max_mag);
    CHECK_EQ_INT(above, tj_f64_to_narrow(d, INFINITY, false));
    CHECK_EQ_INT(inclusive ? above : mf.max_mag, at);
  }
}

TEST(small_integers) {
  static const struct {
    tj_dtype_t d;
    int64_t lo, hi;
  } kInts[] = {{TJ_DTYPE_I4, -8, 7},
               {TJ_DTYPE_U4, 0, 15},
               {TJ_DTYPE_I2, -2, 1},
               {TJ_DTYPE_U2, 0, 3}};
  for (size_t k = 0; k < TJ_ARRAY_SIZE(kInts); ++k) {
    const tj_dtype_t d = kInts[k].d;
    CHECK(tj_dtype_is_int(d) && tj_dtype_is_narrow(d));
    CHECK_EQ_INT(kInts[k].lo, tj_dtype_int_lowest(d));
    CHECK_EQ_INT(kInts[k].hi, tj_dtype_int_highest(d));
    const int64_t span = kInts[k].hi - kInts[k].lo + 1;
    for (int64_t v = kInts[k].lo - 2 * span; v <= kInts[k].hi + 2 * span; ++v) {
      uint8_t b = 0xA5;
      // Integers wrap modulo 2^bits (as numpy's astype would).
      tj_store_i64(d, &b, 0, v);
      int64_t want = ((v - kInts[k].lo) % span + span) % span + kInts[k].lo;
      CHECK_EQ_INT(want, tj_load_i64(d, &b, 0));
      // Floats truncate toward zero; out of range gives 0 (ONNX 1.23's
      // Cast data: 8.0 -> int4 0, -9.0 -> 0).
      tj_store_f64(d, &b, 0, (double)v + (v < 0 ? -0.75 : 0.75));
      want = v >= kInts[k].lo && v <= kInts[k].hi ? v : 0;
      CHECK_EQ_INT(want, tj_load_i64(d, &b, 0));
    }
    uint8_t b = 0xA5;
    tj_store_f64(d, &b, 0, NAN);
    CHECK_EQ_INT(0, b);
  }
}

//===--- graphs ---===//

TEST(text_round_trip_and_storage_rule) {
  static const char kText[] =
      "func @n(%x: f32[4]) {\n"
      "  %a = constant [-240, 0.5, nan] : f8e4m3fnuz[3]\n"
      "  %b = constant [-6, 0.5] : f4e2m1[2]\n"
      "  %c = constant [-8, 7] : i4[2]\n"
      "  %d = constant [0.25] : f8e8m0[1]\n"
      "  %y = cast %x : u2[4]\n"
      "  return %y as \"y\", %a as \"a\", %b as \"b\", %c as \"c\", %d as "
      "\"d\"\n"
      "}\n";
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_parse(g_ctx[0], kText, sizeof(kText) - 1, "n.tj", &g));
  if (!g) return;
  char* printed = NULL;
  CHECK_OK(tj_graph_print(g, &printed));
  CHECK_CONTAINS(printed, "constant [-240, 0.5, nan] : f8e4m3fnuz[3]");
  CHECK_CONTAINS(printed, "constant [-6, 0.5] : f4e2m1[2]");
  CHECK_CONTAINS(printed, "constant [-8, 7] : i4[2]");
  CHECK_CONTAINS(printed, "constant [0.25] : f8e8m0[1]");
  CHECK_CONTAINS(printed, "cast %x : u2[4]");
  tj_context_free_string(g_ctx[0], printed);
  tj_graph_destroy(g);
  static const char kBad[] =
      "func @n() {\n"
      "  %c = constant [8] : i4[1]\n"
      "  return %c as \"c\"\n"
      "}\n";
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "value 8 out of range for i4",
               tj_graph_parse(g_ctx[0], kBad, sizeof(kBad) - 1, "n.tj", &g));
  static const char kBadF[] =
      "func @n() {\n"
      "  %c = constant [7] : f4e2m1[1]\n"
      "  return %c as \"c\"\n"
      "}\n";
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "out of range for f4e2m1",
               tj_graph_parse(g_ctx[0], kBadF, sizeof(kBadF) - 1, "n.tj", &g));
  // No arithmetic on a storage dtype.
  static const tj_dtype_t kNarrow[] = {TJ_DTYPE_I4, TJ_DTYPE_F4E2M1,
                                       TJ_DTYPE_F8E8M0, TJ_DTYPE_U2};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kNarrow); ++i) {
    CHECK_OK(tj_graph_create(g_ctx[0], "storage", &g));
    int64_t dims[1] = {4};
    tj_value_t x = tj_graph_input(g, kNarrow[i], 1, dims, "x");
    tj_value_t r = tj_graph_reshape(g, x, 1, dims);  // movement: fine
    tj_graph_output(g, tj_graph_add(g, r, r), "y");
    char want[64];
    snprintf(want, sizeof(want), "%s is a storage dtype",
             tj_dtype_name(kNarrow[i]));
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, want, tj_graph_finalize(g));
    tj_graph_destroy(g);
  }
}

//===--- ONNX's packed tensors ---===//

// A TensorProto of |dims| and ONNX |elem_type| whose raw_data is |raw|.
static size_t tensor_proto(uint8_t* out, const int64_t* dims, int rank,
                           int elem_type, const uint8_t* raw, size_t n) {
  size_t k = 0;
  for (int i = 0; i < rank; ++i) {
    out[k++] = 0x08;  // field 1 (dims), varint
    out[k++] = (uint8_t)dims[i];
  }
  out[k++] = 0x10;  // field 2 (data_type)
  out[k++] = (uint8_t)elem_type;
  out[k++] = 0x4A;  // field 9 (raw_data), bytes
  out[k++] = (uint8_t)n;
  memcpy(out + k, raw, n);
  return k + n;
}

static uint8_t g_proto[64];
static size_t g_proto_size;

static tj_status_t parse_packed(tj_allocator_t allocator) {
  tj_context_options_t o = tj_test_context_options();
  o.allocator = allocator;
  tj_context_t* ctx = NULL;
  TJ_RETURN_IF_ERROR(tj_context_create(&o, &ctx));
  tj_dtype_t d;
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
  void* data = NULL;
  size_t bytes = 0;
  tj_status_t s = tj_onnx_tensor_parse(ctx, g_proto, g_proto_size, &d, &rank,
                                       dims, &data, &bytes);
  tj_free(tj_context_allocator(ctx), data, bytes);
  tj_context_destroy(ctx);
  return s;
}

TEST(onnx_packed_tensors) {
  // int4 [2, 3]: -8..-3 as 0x98 0xBA 0xDC, low nibble first.
  static const struct {
    int elem_type;
    tj_dtype_t dtype;
    int64_t dims[2];
    uint8_t raw[4];
    size_t n;
    int8_t want[7];
  } kCases[] = {
      {22, TJ_DTYPE_I4, {2, 3}, {0x98, 0xBA, 0x7C}, 3, {-8, -7, -6, -5, -4, 7}},
      {21, TJ_DTYPE_U4, {1, 3}, {0x21, 0x0F}, 2, {1, 2, 15}},
      {26, TJ_DTYPE_I2, {1, 5}, {0x1E, 0x02}, 2, {-2, -1, 1, 0, -2}},
      {25, TJ_DTYPE_U2, {1, 4}, {0xE4}, 1, {0, 1, 2, 3}},
      {23, TJ_DTYPE_F4E2M1, {1, 3}, {0xF1, 0x08}, 2, {1, 0xF, 8}},
  };
  for (size_t c = 0; c < TJ_ARRAY_SIZE(kCases); ++c) {
    uint8_t proto[64];
    size_t size = tensor_proto(proto, kCases[c].dims, 2, kCases[c].elem_type,
                               kCases[c].raw, kCases[c].n);
    tj_dtype_t d;
    int32_t rank;
    int64_t dims[TJ_MAX_RANK];
    void* data = NULL;
    size_t bytes = 0;
    CHECK_OK(tj_onnx_tensor_parse(g_ctx[0], proto, size, &d, &rank, dims, &data,
                                  &bytes));
    CHECK_EQ_INT(kCases[c].dtype, d);
    const int64_t n = kCases[c].dims[0] * kCases[c].dims[1];
    CHECK_EQ_INT(n, (int64_t)bytes);
    for (int64_t i = 0; data && i < n; ++i)
      CHECK_EQ_INT(kCases[c].want[i], ((int8_t*)data)[i]);
    tj_free(tj_context_allocator(g_ctx[0]), data, bytes);
    // One byte short of the packed size is an error naming both.
    size = tensor_proto(proto, kCases[c].dims, 2, kCases[c].elem_type,
                        kCases[c].raw, kCases[c].n - 1);
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "raw_data has",
                 tj_onnx_tensor_parse(g_ctx[0], proto, size, &d, &rank, dims,
                                      &data, &bytes));
  }
  g_proto_size = tensor_proto(g_proto, kCases[0].dims, 2, 22, kCases[0].raw, 3);
  CHECK(tj_test_oom_sweep("packed int4 tensor", parse_packed) > 0);
}

//===--- compiled casts, every tier ---===//

static tj_dtype_t g_from, g_to;
static bool g_bitcast;  // build_cast builds a bitcast instead

static tj_graph_t* build_cast(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "cast", &g));
  int64_t dims[1] = {tj_graph_symbol(g, "N")};
  tj_value_t x = tj_graph_input(g, g_from, 1, dims, "x");
  tj_graph_output(
      g, g_bitcast ? tj_graph_bitcast(g, x, g_to) : tj_graph_cast(g, x, g_to),
      "y");
  return g;
}

// check_bits of cast(from -> to) on |in|.
static void check_cast_bits(const void* in, int64_t n) {
  char what[64];
  snprintf(what, sizeof(what), "%s->%s", tj_dtype_name(g_from),
           tj_dtype_name(g_to));
  check_bits(what, build_cast, g_from, in, n, g_to);
}

static const tj_dtype_t kWides[] = {TJ_DTYPE_F32,  TJ_DTYPE_F64, TJ_DTYPE_F16,
                                    TJ_DTYPE_BF16, TJ_DTYPE_I32, TJ_DTYPE_I8,
                                    TJ_DTYPE_U8};

// Every pattern's value, the midpoints between neighbours (ties) and just
// off them, and specials, from every wide dtype; every pattern back.
TEST(casts_every_tier) {
  static const tj_dtype_t kNarrow[] = {TJ_DTYPE_F8E4M3FNUZ, TJ_DTYPE_F8E5M2FNUZ,
                                       TJ_DTYPE_F4E2M1,     TJ_DTYPE_F8E8M0,
                                       TJ_DTYPE_I4,         TJ_DTYPE_U4,
                                       TJ_DTYPE_I2,         TJ_DTYPE_U2};
  enum { kN = 256 * 4 + 32 };
  for (size_t f = 0; f < TJ_ARRAY_SIZE(kNarrow); ++f) {
    const tj_dtype_t d = kNarrow[f];
    const bool is_int = tj_dtype_is_int(d);
    double* vals = calloc(kN, sizeof(double));
    int64_t n = 0;
    uint8_t pats[256];
    int num_pats = 0;
    if (is_int) {
      for (int64_t v = tj_dtype_int_lowest(d); v <= tj_dtype_int_highest(d);
           ++v) {
        pats[num_pats++] = (uint8_t)v;
      }
    } else {
      const int top = d == TJ_DTYPE_F4E2M1 ? 16 : 256;
      for (int b = 0; b < top; ++b) pats[num_pats++] = (uint8_t)b;
    }
    for (int i = 0; i < num_pats; ++i) {
      const double v = tj_load_f64(d, &pats[i], 0);
      vals[n++] = v;
      if (i + 1 < num_pats) {
        const double next = tj_load_f64(d, &pats[i + 1], 0);
        if (isfinite(v) && isfinite(next) && next > v) {
          const double mid = (v + next) / 2;
          vals[n++] = mid;
          vals[n++] = nextafter(mid, INFINITY);
          vals[n++] = nextafter(mid, -INFINITY);
        }
      }
    }
    static const double kSpecial[] = {
        INFINITY, -INFINITY, NAN,  1e30, -1e30,    250.0, -7.5,  60000,
        1e-30,    -0.0,      -9.0, 16.0, 0x1p-127, 3e38,  -3e38, 0x1p-140};
    for (size_t s = 0; s < TJ_ARRAY_SIZE(kSpecial); ++s)
      vals[n++] = kSpecial[s];
    for (size_t w = 0; w < TJ_ARRAY_SIZE(kWides); ++w) {
      void* in = calloc((size_t)n, tj_dtype_size(kWides[w]));
      for (int64_t i = 0; i < n; ++i) tj_store_f64(kWides[w], in, i, vals[i]);
      g_from = kWides[w];
      g_to = d;
      check_cast_bits(in, n);
      free(in);
      g_from = d;
      g_to = kWides[w];
      check_cast_bits(pats, num_pats);
    }
    // Integer to integer wraps: i32 -> small int.
    int32_t wide[64];
    for (int i = 0; i < 64; ++i) wide[i] = i * 37 - 1000;
    g_from = TJ_DTYPE_I32;
    g_to = d;
    if (is_int) check_cast_bits(wide, 64);
    free(vals);
  }
}

// bitcast: the bytes unchanged (a bool result normalized), every tier,
// against the reference; and a byte count the reference can check by hand.
TEST(bitcast_every_tier) {
  static const tj_dtype_t kPairs[][2] = {
      {TJ_DTYPE_F32, TJ_DTYPE_I32},       {TJ_DTYPE_I32, TJ_DTYPE_F32},
      {TJ_DTYPE_F64, TJ_DTYPE_I64},       {TJ_DTYPE_I64, TJ_DTYPE_F64},
      {TJ_DTYPE_U32, TJ_DTYPE_I32},       {TJ_DTYPE_I8, TJ_DTYPE_U8},
      {TJ_DTYPE_U8, TJ_DTYPE_I8},         {TJ_DTYPE_BOOL, TJ_DTYPE_U8},
      {TJ_DTYPE_U8, TJ_DTYPE_BOOL},       {TJ_DTYPE_U16, TJ_DTYPE_I16},
      {TJ_DTYPE_F16, TJ_DTYPE_I16},       {TJ_DTYPE_I16, TJ_DTYPE_F16},
      {TJ_DTYPE_BF16, TJ_DTYPE_U16},      {TJ_DTYPE_U16, TJ_DTYPE_BF16},
      {TJ_DTYPE_F16, TJ_DTYPE_BF16},      {TJ_DTYPE_F8E4M3, TJ_DTYPE_U8},
      {TJ_DTYPE_U8, TJ_DTYPE_F8E5M2FNUZ}, {TJ_DTYPE_U64, TJ_DTYPE_F64},
  };
  enum { kN = 517 };
  unsigned char* in = malloc(kN * 8);
  uint64_t state = 0x9E3779B97F4A7C15u;
  for (int i = 0; i < kN * 8; ++i) {
    state = state * 6364136223846793005u + 1442695040888963407u;
    in[i] = (unsigned char)(state >> 56);
  }
  g_bitcast = true;
  for (size_t p = 0; p < TJ_ARRAY_SIZE(kPairs); ++p) {
    g_from = kPairs[p][0];
    g_to = kPairs[p][1];
    // Valid inputs of the source dtype: bool 0/1, u8..u32 as they come.
    if (g_from == TJ_DTYPE_BOOL)
      for (int i = 0; i < kN; ++i) in[i] &= 1;
    // f16 and bf16 NaNs keep their NaN-ness, not their payload (kernels
    // hold those dtypes as f32): no such pattern here (bit 14 clear: the
    // exponent is not all ones).
    const bool half = g_from == TJ_DTYPE_F16 || g_from == TJ_DTYPE_BF16 ||
                      g_to == TJ_DTYPE_F16 || g_to == TJ_DTYPE_BF16;
    if (half)
      for (int i = 1; i < kN * 8; i += 2) in[i] &= 0xBF;
    check_cast_bits(in, kN);
  }
  g_bitcast = false;
  // By hand: 1.0f is 0x3F800000.
  tj_graph_t* g = NULL;
  g_from = TJ_DTYPE_F32;
  g_to = TJ_DTYPE_I32;
  g_bitcast = true;
  g = build_cast(g_ctx[0]);
  g_bitcast = false;
  CHECK_OK(tj_graph_finalize(g));
  float one[2] = {1.0f, -2.0f};
  int32_t bits[2] = {0, 0};
  int64_t n = 2;
  tj_tensor_t it = tj_tensor_make(one, TJ_DTYPE_F32, 1, &n);
  tj_tensor_t ot = tj_tensor_make(bits, TJ_DTYPE_I32, 1, &n);
  CHECK_OK(tj_reference_run(g, &it, 1, &ot, 1));
  CHECK_EQ_INT(0x3F800000, bits[0]);
  CHECK_EQ_INT((int32_t)0xC0000000u, bits[1]);
  tj_graph_destroy(g);
  // Sizes must agree; the 4- and 2-bit dtypes are refused.
  static const tj_dtype_t kBad[][2] = {{TJ_DTYPE_F32, TJ_DTYPE_I64},
                                       {TJ_DTYPE_I4, TJ_DTYPE_I8},
                                       {TJ_DTYPE_U8, TJ_DTYPE_F4E2M1}};
  static const char* const kWhy[] = {"bitcast needs dtypes of one size",
                                     "4- and 2-bit dtypes",
                                     "4- and 2-bit dtypes"};
  for (size_t b = 0; b < TJ_ARRAY_SIZE(kBad); ++b) {
    g_from = kBad[b][0];
    g_to = kBad[b][1];
    g_bitcast = true;
    g = build_cast(g_ctx[0]);
    g_bitcast = false;
    tj_status_t s = tj_graph_finalize(g);
    CHECK(s != NULL);
    if (s) {
      CHECK_CONTAINS(tj_status_message(s), kWhy[b]);
      tj_status_free(s);
    }
    tj_graph_destroy(g);
  }
  free(in);
}

// quantize / dequantize with i16 and u16 (ONNX QuantizeLinear opset 21),
// per tensor with a zero point, every tier against the reference and the
// hand-computed values: saturation at the dtype's range, ties to even.
static tj_dtype_t g_qdtype;

static tj_graph_t* build_qdq(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "qdq", &g));
  int64_t dims[1] = {8};
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, dims, "x");
  tj_value_t s = tj_graph_scalar(g, TJ_DTYPE_F32, 2.0);
  tj_value_t z = tj_graph_scalar(g, g_qdtype, 3.0);
  tj_quant_attrs_t a = {.dtype = g_qdtype};
  tj_value_t q = tj_graph_quantize(g, x, s, z, &a);
  tj_graph_output(g, q, "q");
  tj_graph_output(g, tj_graph_dequantize(g, q, s, z, &a), "y");
  return g;
}

TEST(quantize_16_bit_every_tier) {
  static const float kX[8] = {0.0f, 1.0f, 3.0f, -5.0f, 1e6f, -1e6f, 7.0f, 9.0f};
  // round_half_even(x / 2) + 3, saturated.
  static const int32_t kI16[8] = {3, 3, 5, 1, 32767, -32768, 7, 7};
  static const int32_t kU16[8] = {3, 3, 5, 1, 65535, 0, 7, 7};
  for (int u = 0; u < 2; ++u) {
    g_qdtype = u ? TJ_DTYPE_U16 : TJ_DTYPE_I16;
    const int32_t* want = u ? kU16 : kI16;
    for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
      tj_graph_t* g = build_qdq(g_ctx[t]);
      CHECK_OK(tj_graph_finalize(g));
      int64_t n = 8;
      uint16_t q_ref[8], q[8];
      float y_ref[8], y[8];
      tj_tensor_t in = tj_tensor_make((void*)kX, TJ_DTYPE_F32, 1, &n);
      tj_tensor_t outs_ref[2] = {tj_tensor_make(q_ref, g_qdtype, 1, &n),
                                 tj_tensor_make(y_ref, TJ_DTYPE_F32, 1, &n)};
      tj_tensor_t outs[2] = {tj_tensor_make(q, g_qdtype, 1, &n),
                             tj_tensor_make(y, TJ_DTYPE_F32, 1, &n)};
      CHECK_OK(tj_reference_run(g, &in, 1, outs_ref, 2));
      for (int i = 0; i < 8; ++i) {
        CHECK_EQ_INT(want[i], tj_load_i64(g_qdtype, q_ref, i));
        CHECK(y_ref[i] == (float)((want[i] - 3) * 2));
      }
      tj_compile_options_t o = tj_test_x86_options(1);
      tj_executable_t* exe = NULL;
      CHECK_OK(tj_compile(g, &o, &exe));
      if (exe) {
        CHECK_OK(tj_executable_run(exe, &in, 1, outs, 2));
        CHECK(memcmp(q, q_ref, sizeof(q)) == 0);
        CHECK(memcmp(y, y_ref, sizeof(y)) == 0);
        tj_executable_release(exe);
      }
      tj_graph_destroy(g);
    }
  }
}

// The same casts through the NVPTX emitter (no GPU needed), assembled by
// ptxas -arch=sm_90a when it is installed.
static const char* g_ptxas = "";

TEST(ptx_of_casts) {
  static const tj_dtype_t pairs[][2] = {
      {TJ_DTYPE_F32, TJ_DTYPE_F8E4M3FNUZ}, {TJ_DTYPE_F8E5M2FNUZ, TJ_DTYPE_F16},
      {TJ_DTYPE_F64, TJ_DTYPE_F4E2M1},     {TJ_DTYPE_F4E2M1, TJ_DTYPE_F32},
      {TJ_DTYPE_F32, TJ_DTYPE_F8E8M0},     {TJ_DTYPE_F8E8M0, TJ_DTYPE_F32},
      {TJ_DTYPE_F32, TJ_DTYPE_I4},         {TJ_DTYPE_U2, TJ_DTYPE_F16},
      {TJ_DTYPE_I32, TJ_DTYPE_U4}};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(pairs); ++i) {
    g_from = pairs[i][0];
    g_to = pairs[i][1];
    tj_test_check_ptx(g_ptxas, tj_dtype_name(g_to), build_cast(g_ctx[0]));
  }
  g_bitcast = true;
  g_from = TJ_DTYPE_F16;
  g_to = TJ_DTYPE_I16;
  tj_test_check_ptx(g_ptxas, "bitcast", build_cast(g_ctx[0]));
  g_bitcast = false;
  printf("# PTX assembled by ptxas: %s\n", g_ptxas[0] ? g_ptxas : "skipped");
}

int main(int argc, char** argv) {
  if (argc > 1) g_ptxas = argv[1];
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o = tj_test_context_options();
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(decode_every_pattern);
  RUN_TEST(encode_cases);
  RUN_TEST(round_trips_ties_and_bounds);
  RUN_TEST(small_integers);
  RUN_TEST(text_round_trip_and_storage_rule);
  RUN_TEST(onnx_packed_tensors);
  RUN_TEST(casts_every_tier);
  RUN_TEST(bitcast_every_tier);
  RUN_TEST(quantize_16_bit_every_tier);
  RUN_TEST(ptx_of_casts);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  TEST_MAIN_END();
}
