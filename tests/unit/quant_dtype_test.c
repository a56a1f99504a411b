// The quantization dtypes (issue 17): u8, f8e4m3 (ONNX float8e4m3fn) and
// f8e5m2. The scalar conversions of lib/dtype.c against hand-derived ONNX
// values (round half to even, saturation, NaN, -0, subnormals, every
// pattern round-tripping), the .tj text form, the storage-dtype rule, and
// compiled casts and u8 arithmetic on x86 at every ISA tier the host has
// (a context per tier: the host's, AVX2, SSE2), generic and specialized,
// compared bit for bit with tj_reference_run.

#include <math.h>
#include <string.h>

#include "backends/cuda/cuda_entry.h"
#include "tests/unit/ptx_check.h"
#include "lib/dtype.h"
#include "tests/unit/cast_bits_check.h"
#include "tests/unit/test.h"

//===--- scalar conversions ---===//

TEST(f8e4m3_values) {
  static const struct {
    double x;
    uint8_t bits;
  } kCases[] = {
      {0.0, 0x00},      {-0.0, 0x80},      {1.0, 0x38},
      {-2.0, 0xC0},     {448.0, 0x7E},     {-448.0, 0xFE},
      {449.0, 0x7E},    {464.0, 0x7E},     {1e9, 0x7E},
      {INFINITY, 0x7E}, {-INFINITY, 0xFE}, {256.0, 0x78},
      {240.0, 0x77},    {248.0, 0x78},     {1.0625, 0x38},
      {1.1875, 0x3A},   {0x1p-6, 0x08},    {0x1p-9, 0x01},
      {0x1p-10, 0x00},  {0x3p-10, 0x02},   {0x1.000001p-10, 0x01},
      {0x7p-9, 0x07},   {0x7.8p-9, 0x08},  {-0x1p-12, 0x80},
      {272.0, 0x78},    {304.0, 0x7A},     {0.3, 0x2A},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kCases); ++i) {
    uint8_t got = tj_f64_to_f8e4m3(kCases[i].x);
    if (got != kCases[i].bits) {
      fprintf(stderr, "  e4m3(%a) = 0x%02x, want 0x%02x\n", kCases[i].x, got,
              kCases[i].bits);
    }
    CHECK_EQ_INT(kCases[i].bits, got);
  }
  CHECK_EQ_INT(0x7F, tj_f64_to_f8e4m3(NAN));
  CHECK_EQ_INT(0xFF, tj_f64_to_f8e4m3(-NAN));
  CHECK(isnan(tj_f8e4m3_to_f64(0x7F)) && isnan(tj_f8e4m3_to_f64(0xFF)));
  CHECK(tj_f8e4m3_to_f64(0x7E) == 448.0);
  CHECK(tj_f8e4m3_to_f64(0x01) == 0x1p-9);
  // Every non-NaN pattern decodes and encodes back to itself.
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) continue;
    CHECK_EQ_INT(b, tj_f64_to_f8e4m3(tj_f8e4m3_to_f64((uint8_t)b)));
  }
}

TEST(f8e5m2_values) {
  static const struct {
    double x;
    uint8_t bits;
  } kCases[] = {
      {0.0, 0x00},       {-0.0, 0x80},    {1.0, 0x3C},     {-1.5, 0xBE},
      {57344.0, 0x7B},   {61440.0, 0x7B}, {1e9, 0x7B},     {INFINITY, 0x7B},
      {-INFINITY, 0xFB}, {0x1p-14, 0x04}, {0x1p-16, 0x01}, {0x1p-17, 0x00},
      {0x3p-17, 0x02},   {1.125, 0x3C},   {1.375, 0x3E},   {49152.0, 0x7A},
      {0.3, 0x35},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kCases); ++i) {
    uint8_t got = tj_f64_to_f8e5m2(kCases[i].x);
    if (got != kCases[i].bits) {
      fprintf(stderr, "  e5m2(%a) = 0x%02x, want 0x%02x\n", kCases[i].x, got,
              kCases[i].bits);
    }
    CHECK_EQ_INT(kCases[i].bits, got);
  }
  CHECK_EQ_INT(0x7F, tj_f64_to_f8e5m2(NAN));
  CHECK(isinf(tj_f8e5m2_to_f64(0x7C)) && tj_f8e5m2_to_f64(0xFC) < 0);
  CHECK(isnan(tj_f8e5m2_to_f64(0x7D)) && isnan(tj_f8e5m2_to_f64(0xFE)));
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) > 0x7B) continue;  // infinities and NaNs
    CHECK_EQ_INT(b, tj_f64_to_f8e5m2(tj_f8e5m2_to_f64((uint8_t)b)));
  }
}

TEST(u8_conversions) {
  uint8_t v[4];
  tj_store_f64(TJ_DTYPE_U8, v, 0, 255.9);  // truncates toward zero
  tj_store_f64(TJ_DTYPE_U8, v, 1, 256.0);  // out of range: 0
  tj_store_f64(TJ_DTYPE_U8, v, 2, -0.5);   // truncates to 0
  tj_store_i64(TJ_DTYPE_U8, v, 3, -1);     // integers wrap
  CHECK_EQ_INT(255, v[0]);
  CHECK_EQ_INT(0, v[1]);
  CHECK_EQ_INT(0, v[2]);
  CHECK_EQ_INT(255, v[3]);
  CHECK_EQ_INT(255, tj_load_i64(TJ_DTYPE_U8, v, 3));
  CHECK(tj_load_f64(TJ_DTYPE_U8, v, 0) == 255.0);
  CHECK_STREQ("u8", tj_dtype_name(TJ_DTYPE_U8));
  CHECK_STREQ("f8e4m3", tj_dtype_name(TJ_DTYPE_F8E4M3));
  CHECK_STREQ("f8e5m2", tj_dtype_name(TJ_DTYPE_F8E5M2));
  CHECK_EQ_INT(1, tj_dtype_size(TJ_DTYPE_F8E5M2));
}

//===--- graphs ---===//

TEST(text_round_trip) {
  static const char kText[] =
      "func @q(%x: f32[4]) {\n"
      "  %c = constant [0, 255] : u8[2]\n"
      "  %d = constant [-57344, 0.25, nan] : f8e5m2[3]\n"
      "  %y = cast %x : f8e4m3[4]\n"
      "  return %y as \"y\", %c as \"c\", %d as \"d\"\n"
      "}\n";
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_parse(g_ctx[0], kText, sizeof(kText) - 1, "q.tj", &g));
  if (!g) return;
  char* printed = NULL;
  CHECK_OK(tj_graph_print(g, &printed));
  CHECK_CONTAINS(printed, "constant [0, 255] : u8[2]");
  CHECK_CONTAINS(printed, "constant [-57344, 0.25, nan] : f8e5m2[3]");
  CHECK_CONTAINS(printed, "cast %x : f8e4m3[4]");
  tj_context_free_string(g_ctx[0], printed);
  tj_graph_destroy(g);
  static const char kBad[] =
      "func @q() {\n"
      "  %c = constant [500] : f8e4m3[1]\n"
      "  return %c as \"c\"\n"
      "}\n";
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "out of range for f8e4m3",
               tj_graph_parse(g_ctx[0], kBad, sizeof(kBad) - 1, "q.tj", &g));
}

TEST(float8_is_a_storage_dtype) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx[0], "storage", &g));
  int64_t dims[1] = {4};
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F8E4M3, 1, dims, "x");
  tj_value_t r = tj_graph_reshape(g, x, 1, dims);  // movement: fine
  tj_graph_output(g, tj_graph_add(g, r, r), "y");
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "f8e4m3 is a storage dtype",
               tj_graph_finalize(g));
  tj_graph_destroy(g);
}

static tj_dtype_t g_from, g_to;

// cast(x: from) -> to, over a symbolic length.
static tj_graph_t* build_cast(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "cast", &g));
  int64_t dims[1] = {tj_graph_symbol(g, "N")};
  tj_value_t x = tj_graph_input(g, g_from, 1, dims, "x");
  tj_graph_output(g, tj_graph_cast(g, x, g_to), "y");
  return g;
}

// Every f8 pattern's value, the midpoints between neighbours (ties), just
// off them, and specials, as f32 and f64 inputs.
TEST(casts_to_and_from_float8_every_tier) {
  enum { kN = 256 * 4 + 16 };
  static const tj_dtype_t f8s[] = {TJ_DTYPE_F8E4M3, TJ_DTYPE_F8E5M2};
  static const tj_dtype_t wides[] = {TJ_DTYPE_F32,  TJ_DTYPE_F64, TJ_DTYPE_F16,
                                     TJ_DTYPE_BF16, TJ_DTYPE_I32, TJ_DTYPE_U8};
  for (size_t f = 0; f < TJ_ARRAY_SIZE(f8s); ++f) {
    double* vals = calloc(kN, sizeof(double));
    int64_t n = 0;
    for (int b = 0; b < 256; ++b) {
      double v = tj_load_f64(f8s[f], &(uint8_t){(uint8_t)b}, 0);
      double next = tj_load_f64(f8s[f], &(uint8_t){(uint8_t)(b + 1)}, 0);
      vals[n++] = v;
      if (isfinite(v) && isfinite(next) && (b & 0x7F) != 0x7F) {
        double mid = (v + next) / 2;
        vals[n++] = mid;
        vals[n++] = nextafter(mid, INFINITY);
        vals[n++] = nextafter(mid, -INFINITY);
      }
    }
    static const double kSpecial[] = {INFINITY, -INFINITY, NAN,   1e30,  -1e30,
                                      470.0,    -470.0,    60000, 1e-30, -0.0};
    for (size_t s = 0; s < TJ_ARRAY_SIZE(kSpecial); ++s) {
      vals[n++] = kSpecial[s];
    }
    for (size_t w = 0; w < TJ_ARRAY_SIZE(wides); ++w) {
      char name[64];
      // wide -> f8
      void* in = calloc((size_t)n, tj_dtype_size(wides[w]));
      for (int64_t i = 0; i < n; ++i) tj_store_f64(wides[w], in, i, vals[i]);
      g_from = wides[w];
      g_to = f8s[f];
      snprintf(name, sizeof(name), "%s->%s", tj_dtype_name(g_from),
               tj_dtype_name(g_to));
      check_bits(name, build_cast, g_from, in, n, g_to);
      free(in);
      // f8 -> wide, every pattern
      uint8_t pats[256];
      for (int b = 0; b < 256; ++b) pats[b] = (uint8_t)b;
      g_from = f8s[f];
      g_to = wides[w];
      snprintf(name, sizeof(name), "%s->%s", tj_dtype_name(g_from),
               tj_dtype_name(g_to));
      check_bits(name, build_cast, g_from, pats, 256, g_to);
    }
    free(vals);
  }
}

// u8 arithmetic wraps modulo 256 inside a fused kernel, compares unsigned,
// and converts to and from the other integers and floats.
static tj_graph_t* build_u8_chain(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "u8_chain", &g));
  int64_t dims[1] = {tj_graph_symbol(g, "N")};
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_U8, 1, dims, "x");
  tj_value_t s = tj_graph_add(g, x, tj_graph_scalar(g, TJ_DTYPE_U8, 200));
  tj_value_t m = tj_graph_mul(g, s, tj_graph_scalar(g, TJ_DTYPE_U8, 3));
  tj_value_t big = tj_graph_gt(g, m, tj_graph_scalar(g, TJ_DTYPE_U8, 100));
  tj_value_t d = tj_graph_div(g, m, tj_graph_scalar(g, TJ_DTYPE_U8, 7));
  tj_value_t sh =
      tj_graph_shift_right(g, m, tj_graph_scalar(g, TJ_DTYPE_U8, 1));
  tj_value_t mx = tj_graph_maximum(g, d, sh);
  tj_value_t y = tj_graph_where(g, big, mx, tj_graph_neg(g, x));
  tj_value_t as_i8 = tj_graph_cast(g, y, TJ_DTYPE_I8);
  tj_value_t back = tj_graph_cast(g, as_i8, TJ_DTYPE_U8);
  tj_value_t f = tj_graph_cast(g, back, TJ_DTYPE_F32);
  tj_value_t r = tj_graph_cast(
      g, tj_graph_sub(g, f, tj_graph_scalar(g, TJ_DTYPE_F32, 20.5)),
      TJ_DTYPE_U8);
  tj_graph_output(g, r, "y");
  return g;
}

// Shifts of u8 by counts 0..12 (past its 8 bits): logical, 0 beyond.
static tj_graph_t* build_u8_shifts(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "u8_shifts", &g));
  int64_t dims[1] = {tj_graph_symbol(g, "N")};
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_U8, 1, dims, "x");
  tj_value_t s = tj_graph_mod(g, x, tj_graph_scalar(g, TJ_DTYPE_U8, 13));
  tj_value_t r = tj_graph_bitwise_xor(g, tj_graph_shift_right(g, x, s),
                                      tj_graph_shift_left(g, x, s));
  tj_graph_output(g, r, "y");
  return g;
}

TEST(u8_arithmetic_every_tier) {
  uint8_t in[300];
  for (int i = 0; i < 300; ++i) in[i] = (uint8_t)(i * 37 + i / 256);
  check_bits("u8 chain", build_u8_chain, TJ_DTYPE_U8, in, 300, TJ_DTYPE_U8);
  uint8_t all[256];
  for (int i = 0; i < 256; ++i) all[i] = (uint8_t)(255 - i);
  check_bits("u8 shifts", build_u8_shifts, TJ_DTYPE_U8, all, 256, TJ_DTYPE_U8);
  static const tj_dtype_t others[] = {TJ_DTYPE_I8,  TJ_DTYPE_I32,
                                      TJ_DTYPE_I64, TJ_DTYPE_F32,
                                      TJ_DTYPE_F64, TJ_DTYPE_BOOL};
  for (size_t o = 0; o < TJ_ARRAY_SIZE(others); ++o) {
    char name[64];
    g_from = TJ_DTYPE_U8;
    g_to = others[o];
    snprintf(name, sizeof(name), "u8->%s", tj_dtype_name(g_to));
    check_bits(name, build_cast, g_from, in, 300, g_to);
    // and back: values across and beyond [0, 255]
    void* src = calloc(300, tj_dtype_size(others[o]));
    for (int i = 0; i < 300; ++i) {
      double v = others[o] == TJ_DTYPE_BOOL ? (i & 1) : (i - 40) * 1.75;
      if (others[o] == TJ_DTYPE_I8 || others[o] == TJ_DTYPE_I32 ||
          others[o] == TJ_DTYPE_I64) {
        tj_store_i64(others[o], src, i, (i - 40) * 3);
      } else {
        tj_store_f64(others[o], src, i, v);
      }
    }
    g_from = others[o];
    g_to = TJ_DTYPE_U8;
    snprintf(name, sizeof(name), "%s->u8", tj_dtype_name(g_from));
    check_bits(name, build_cast, g_from, src, 300, g_to);
    free(src);
  }
}

// The same casts and u8 arithmetic through the NVPTX emitter (no GPU
// needed), assembled by ptxas -arch=sm_90a when it is installed.
static const char* g_ptxas = "";

static void check_ptx(const char* what, build_fn build) {
  tj_test_check_ptx(g_ptxas, what, build(g_ctx[0]));
}

TEST(ptx_of_casts_and_u8) {
  static const tj_dtype_t pairs[][2] = {
      {TJ_DTYPE_F32, TJ_DTYPE_F8E4M3}, {TJ_DTYPE_F64, TJ_DTYPE_F8E5M2},
      {TJ_DTYPE_F8E4M3, TJ_DTYPE_F16}, {TJ_DTYPE_F8E5M2, TJ_DTYPE_F32},
      {TJ_DTYPE_I64, TJ_DTYPE_F8E4M3}, {TJ_DTYPE_F32, TJ_DTYPE_U8}};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(pairs); ++i) {
    g_from = pairs[i][0];
    g_to = pairs[i][1];
    check_ptx(tj_dtype_name(g_to), build_cast);
  }
  check_ptx("u8 chain", build_u8_chain);
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
  RUN_TEST(f8e4m3_values);
  RUN_TEST(f8e5m2_values);
  RUN_TEST(u8_conversions);
  RUN_TEST(text_round_trip);
  RUN_TEST(float8_is_a_storage_dtype);
  RUN_TEST(casts_to_and_from_float8_every_tier);
  RUN_TEST(u8_arithmetic_every_tier);
  RUN_TEST(ptx_of_casts_and_u8);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  TEST_MAIN_END();
}
