// ops15b (issue 15): range with run-time inputs (tj_graph_range, ONNX
// Range whose scalars are graph inputs). The length is a value symbol,
// computed from the scalars when a run binds its symbols: one executable
// runs many lengths (empty, negative delta, fractional steps) with a fused
// region after the op, compiled for x86 at every ISA tier the host has,
// against loops written here (numpy.arange) and the reference interpreter;
// one host call, no graph break, no recompile, plain tj_executable_run with
// the length from tj_executable_output_shape. Then integer dtypes at their
// extremes (exact lengths), f64, f16 and bf16, constants mixed with inputs,
// prepare before any data, the text form, the errors and the OOM sweep.

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/dtype.h"
#include "tensorjit.h"
#include "tests/unit/test.h"

static tj_context_t* g_ctx[3];
static const char* g_isa[3];
static int g_num_ctx;

static tj_executable_t* compile_x86(tj_graph_t* g) {
  tj_compile_options_t o = tj_test_x86_options(2);
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  return exe;
}

// y = range(start, limit, delta) of |dt| inputs; z = y * 2 + 1 and s =
// sum(z): a fused region after the op.
static tj_graph_t* build(tj_context_t* ctx, tj_dtype_t dt) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "range", &g));
  tj_value_t a = tj_graph_input(g, dt, 0, NULL, "start");
  tj_value_t b = tj_graph_input(g, dt, 0, NULL, "limit");
  tj_value_t c = tj_graph_input(g, dt, 0, NULL, "delta");
  tj_value_t y = tj_graph_range(g, a, b, c);
  tj_value_t z = tj_graph_add(g, tj_graph_mul(g, y, tj_graph_scalar(g, dt, 2)),
                              tj_graph_scalar(g, dt, 1));
  tj_graph_output(g, y, "y");
  tj_graph_output(g, z, "z");
  tj_graph_output(g, tj_graph_sum(g, z, 0, NULL, false), "s");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

// numpy.arange's length.
static int64_t want_len(double start, double limit, double delta) {
  double n = ceil((limit - start) / delta);
  return n > 0 ? (int64_t)n : 0;
}

// Runs the f32 graph once on |exe| and on the reference at (start, limit,
// delta); checks the length, y, z and s.
static void run_f32(tj_graph_t* g, tj_executable_t* exe, float start,
                    float limit, float delta, const char* isa) {
  tj_tensor_t in[3] = {tj_tensor_make(&start, TJ_DTYPE_F32, 0, NULL),
                       tj_tensor_make(&limit, TJ_DTYPE_F32, 0, NULL),
                       tj_tensor_make(&delta, TJ_DTYPE_F32, 0, NULL)};
  int32_t rank = -1;
  int64_t len = -1;
  CHECK_OK(tj_executable_output_shape(exe, in, 3, 0, &rank, &len));
  const int64_t want = want_len(start, limit, delta);
  CHECK_EQ_INT(1, rank);
  CHECK_EQ_INT((int)want, (int)len);
  if (len != want) return;
  float* y = calloc((size_t)len + 1, sizeof(float));
  float* z = calloc((size_t)len + 1, sizeof(float));
  float* ry = calloc((size_t)len + 1, sizeof(float));
  float* rz = calloc((size_t)len + 1, sizeof(float));
  float s = -1, rs = -2;
  tj_tensor_t out[3] = {tj_tensor_make(y, TJ_DTYPE_F32, 1, &len),
                        tj_tensor_make(z, TJ_DTYPE_F32, 1, &len),
                        tj_tensor_make(&s, TJ_DTYPE_F32, 0, NULL)};
  tj_tensor_t ref[3] = {tj_tensor_make(ry, TJ_DTYPE_F32, 1, &len),
                        tj_tensor_make(rz, TJ_DTYPE_F32, 1, &len),
                        tj_tensor_make(&rs, TJ_DTYPE_F32, 0, NULL)};
  CHECK_OK(tj_executable_run(exe, in, 3, out, 3));
  CHECK_OK(tj_reference_run(g, in, 3, ref, 3));
  double sum = 0;
  int bad = 0;
  for (int64_t i = 0; i < len; ++i) {
    float v = start + (float)i * delta;
    float w = v * 2 + 1;
    sum += w;
    if ((y[i] != v || z[i] != w || ry[i] != v || rz[i] != w) && bad++ < 3)
      fprintf(stderr, "%s: range(%g, %g, %g)[%lld]: %g %g, want %g %g\n", isa,
              start, limit, delta, (long long)i, y[i], z[i], v, w);
  }
  CHECK_EQ_INT(0, bad);
  CHECK(fabs(s - sum) <= 1e-5 * fmax(1, fabs(sum)));
  CHECK(fabs(rs - sum) <= 1e-5 * fmax(1, fabs(sum)));
  free(y);
  free(z);
  free(ry);
  free(rz);
}

TEST(f32_every_tier_many_lengths) {
  static const float kCases[][3] = {
      {1, 5, 2}, {0, 10, 1},           {10, 4, -3},   {5, 5, 1},
      {5, 1, 1}, {0.5f, 3.25f, 0.25f}, {-7, 1000, 3}, {0, 1, 0.1f},
      {1, 5, 2}, {2, -2, -0.5f},
  };
  for (int c = 0; c < g_num_ctx; ++c) {
    tj_graph_t* g = build(g_ctx[c], TJ_DTYPE_F32);
    tj_executable_t* exe = compile_x86(g);
    if (!exe) {
      tj_graph_destroy(g);
      continue;
    }
    for (size_t k = 0; k < sizeof(kCases) / sizeof(kCases[0]); ++k)
      run_f32(g, exe, kCases[k][0], kCases[k][1], kCases[k][2], g_isa[c]);
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    CHECK_EQ_INT(0, st.num_graph_breaks);
    CHECK_EQ_INT(1, st.num_host_calls);
    CHECK(st.num_kernels >= 1);
    tj_executable_release(exe);
    tj_graph_destroy(g);
  }
}

// One run of y = range(start, limit, delta) of |dt| on x86 (every tier)
// and the reference: the length must be |len| and element i must be
// |first| + i * |step| as tj_load_i64 / tj_load_f64 reads it.
static void run_typed(tj_dtype_t dt, const void* start, const void* limit,
                      const void* delta, int64_t len, double first,
                      double step) {
  const size_t es = tj_dtype_size(dt);
  for (int c = 0; c < g_num_ctx; ++c) {
    tj_graph_t* g = NULL;
    CHECK_OK(tj_graph_create(g_ctx[c], "typed", &g));
    tj_value_t a = tj_graph_input(g, dt, 0, NULL, "start");
    tj_value_t b = tj_graph_input(g, dt, 0, NULL, "limit");
    tj_value_t d = tj_graph_input(g, dt, 0, NULL, "delta");
    tj_graph_output(g, tj_graph_range(g, a, b, d), "y");
    CHECK_OK(tj_graph_finalize(g));
    tj_executable_t* exe = compile_x86(g);
    tj_tensor_t in[3] = {tj_tensor_make((void*)start, dt, 0, NULL),
                         tj_tensor_make((void*)limit, dt, 0, NULL),
                         tj_tensor_make((void*)delta, dt, 0, NULL)};
    int32_t rank = -1;
    int64_t got_len = -1;
    if (exe)
      CHECK_OK(tj_executable_output_shape(exe, in, 3, 0, &rank, &got_len));
    CHECK(got_len == len);
    int64_t n = len < 8 ? len : 8;  // a window of the first elements
    if (got_len != len || !exe) {
      tj_executable_release(exe);
      tj_graph_destroy(g);
      continue;
    }
    unsigned char* y = calloc((size_t)len + 1, es);
    unsigned char* r = calloc((size_t)len + 1, es);
    tj_tensor_t out = tj_tensor_make(y, dt, 1, &len);
    tj_tensor_t ref = tj_tensor_make(r, dt, 1, &len);
    CHECK_OK(tj_executable_run(exe, in, 3, &out, 1));
    CHECK_OK(tj_reference_run(g, in, 3, &ref, 1));
    CHECK(memcmp(y, r, (size_t)len * es) == 0);
    for (int64_t i = 0; i < n; ++i) {
      if (tj_dtype_is_int(dt)) {
        // In u64, as the kernel's wrapping int64 arithmetic: i * delta may
        // pass INT64_MAX on the way to an element that fits.
        int64_t want =
            (int64_t)((uint64_t)tj_load_i64(dt, start, 0) +
                      (uint64_t)i * (uint64_t)tj_load_i64(dt, delta, 0));
        CHECK(tj_load_i64(dt, y, i) == want);
      } else {
        CHECK(tj_load_f64(dt, y, i) == first + (double)i * step);
      }
    }
    free(y);
    free(r);
    tj_executable_release(exe);
    tj_graph_destroy(g);
  }
}

TEST(dtypes) {
  // i64 from near its lowest to near its highest in steps of 2^62: the
  // span overflows int64, the length (4) is exact.
  int64_t a64 = INT64_MIN + 5, b64 = INT64_MAX - 1, d64 = (int64_t)1 << 62;
  run_typed(TJ_DTYPE_I64, &a64, &b64, &d64, 4, 0, 0);
  int64_t e64 = 7, f64l = -8, g64 = -3;  // 7, 4, 1, -2, -5: 5
  run_typed(TJ_DTYPE_I64, &e64, &f64l, &g64, 5, 0, 0);
  int32_t a32 = -3, b32 = 10, d32 = 4;  // -3, 1, 5, 9
  run_typed(TJ_DTYPE_I32, &a32, &b32, &d32, 4, 0, 0);
  int16_t a16 = 100, b16 = -100, d16 = -7;  // ceil(200 / 7) = 29
  run_typed(TJ_DTYPE_I16, &a16, &b16, &d16, 29, 0, 0);
  int8_t a8 = -128, b8 = 127, d8 = 50;  // ceil(255 / 50) = 6
  run_typed(TJ_DTYPE_I8, &a8, &b8, &d8, 6, 0, 0);
  double af = 0.5, bf = 2.0, df = 0.25;
  run_typed(TJ_DTYPE_F64, &af, &bf, &df, 6, 0.5, 0.25);
  uint16_t h[3] = {tj_f32_to_f16(1), tj_f32_to_f16(5), tj_f32_to_f16(2)};
  run_typed(TJ_DTYPE_F16, &h[0], &h[1], &h[2], 2, 1, 2);
  uint16_t bh[3] = {tj_f32_to_bf16(-1), tj_f32_to_bf16(2),
                    tj_f32_to_bf16(0.5f)};
  run_typed(TJ_DTYPE_BF16, &bh[0], &bh[1], &bh[2], 6, -1, 0.5);
}

// A constant start and delta around an input limit; prepare before any
// data binds the length to 0 and the first run still sizes itself.
TEST(constants_and_prepare) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx[0], "mixed", &g));
  tj_value_t lim = tj_graph_input(g, TJ_DTYPE_I64, 0, NULL, "limit");
  int64_t three = 3, two = 2;
  tj_value_t a =
      tj_graph_constant(g, TJ_DTYPE_I64, 0, NULL, &three, sizeof(three));
  tj_value_t d = tj_graph_constant(g, TJ_DTYPE_I64, 0, NULL, &two, sizeof(two));
  tj_value_t y = tj_graph_range(g, a, lim, d);
  tj_graph_output(g, tj_graph_cast(g, y, TJ_DTYPE_F32), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_executable_t* exe = compile_x86(g);
  int64_t limit = 0;
  tj_tensor_t in = tj_tensor_make(NULL, TJ_DTYPE_I64, 0, NULL);
  if (exe) CHECK_OK(tj_executable_prepare(exe, &in, 1));
  for (limit = 2; limit < 40; limit += 9) {
    in = tj_tensor_make(&limit, TJ_DTYPE_I64, 0, NULL);
    int64_t len = limit > 3 ? (limit - 3 + 1) / 2 : 0;
    float y_out[32];
    tj_tensor_t out = tj_tensor_make(y_out, TJ_DTYPE_F32, 1, &len);
    if (exe) CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
    for (int64_t i = 0; i < len; ++i) CHECK(y_out[i] == (float)(3 + 2 * i));
    // An output sized for another length is the caller's error.
    int64_t wrong = len + 1;
    out = tj_tensor_make(y_out, TJ_DTYPE_F32, 1, &wrong);
    if (exe)
      CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "",
                   tj_executable_run(exe, &in, 1, &out, 1));
  }
  tj_executable_release(exe);
  // The text form prints the built-in node and parses it back.
  char* text = NULL;
  CHECK_OK(tj_graph_print(g, &text));
  CHECK_CONTAINS(text, "op=\"tj_range\"");
  tj_graph_t* back = NULL;
  CHECK_OK(tj_graph_parse(g_ctx[0], text, strlen(text), "range.tj", &back));
  char* again = NULL;
  CHECK_OK(tj_graph_print(back, &again));
  CHECK_STREQ(text, again);
  limit = 12;
  int64_t len = 5;
  float y_back[5];
  in = tj_tensor_make(&limit, TJ_DTYPE_I64, 0, NULL);
  tj_tensor_t out = tj_tensor_make(y_back, TJ_DTYPE_F32, 1, &len);
  CHECK_OK(tj_reference_run(back, &in, 1, &out, 1));
  CHECK(y_back[4] == 11);
  tj_context_free_string(g_ctx[0], text);
  tj_context_free_string(g_ctx[0], again);
  tj_graph_destroy(back);
  tj_graph_destroy(g);
}

static void build_error(int which, tj_status_code_t code, const char* needle) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx[0], "bad", &g));
  tj_dtype_t dt = which == 3 ? TJ_DTYPE_U8 : TJ_DTYPE_F32;
  tj_value_t a = tj_graph_input(g, dt, 0, NULL, "start");
  tj_value_t b = tj_graph_input(g, which == 1 ? TJ_DTYPE_F64 : dt,
                                which == 2 ? 1 : 0, (int64_t[]){3}, "limit");
  tj_value_t d = tj_graph_input(g, dt, 0, NULL, "delta");
  if (which == 0) {
    // Scalar arithmetic is fine; a reduction is not.
    tj_value_t x = tj_graph_input(g, dt, 1, (int64_t[]){4}, "x");
    a = tj_graph_add(g, a, tj_graph_sum(g, x, 0, NULL, false));
  }
  tj_value_t y = tj_graph_range(g, a, b, d);
  CHECK(tj_value_is_none(y));
  CHECK_STATUS(code, needle, tj_graph_finalize(g));
  tj_graph_destroy(g);
}

TEST(errors) {
  build_error(0, TJ_STATUS_UNSUPPORTED,
              "range: start must be a constant or a scalar computed from "
              "graph inputs and constants (casts, reshapes, scalar "
              "arithmetic), since the length is computed before the run; it "
              "depends on node %4 (sum)");
  build_error(1, TJ_STATUS_INVALID_ARGUMENT,
              "range: limit is f64 but start is f32");
  build_error(2, TJ_STATUS_INVALID_ARGUMENT,
              "range: limit has 1 dims, not a scalar");
  build_error(3, TJ_STATUS_INVALID_ARGUMENT,
              "range: needs a float or signed integer dtype, got u8");
  // delta 0 at run time, on x86 and the reference alike; NaN too.
  tj_graph_t* g = build(g_ctx[0], TJ_DTYPE_F32);
  tj_executable_t* exe = compile_x86(g);
  float s = 1, l = 4, d = 0, y[8], z[8], sum;
  int64_t len = 3;
  tj_tensor_t in[3] = {tj_tensor_make(&s, TJ_DTYPE_F32, 0, NULL),
                       tj_tensor_make(&l, TJ_DTYPE_F32, 0, NULL),
                       tj_tensor_make(&d, TJ_DTYPE_F32, 0, NULL)};
  tj_tensor_t out[3] = {tj_tensor_make(y, TJ_DTYPE_F32, 1, &len),
                        tj_tensor_make(z, TJ_DTYPE_F32, 1, &len),
                        tj_tensor_make(&sum, TJ_DTYPE_F32, 0, NULL)};
  if (exe)
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "delta is 0",
                 tj_executable_run(exe, in, 3, out, 3));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "delta is 0",
               tj_reference_run(g, in, 3, out, 3));
  d = NAN;
  if (exe)
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "is NaN",
                 tj_executable_run(exe, in, 3, out, 3));
  d = 1e-30f;
  if (exe)
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "elements",
                 tj_executable_run(exe, in, 3, out, 3));
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

// ONNX's expanded Range: the trip count cast(relu(ceil((limit - start) /
// delta)), i64) computed in the graph from the inputs, then the running
// sum of a Loop (tj_graph_range_count); and tj_graph_range of computed
// scalars (start * 2, limit - 1). |dt| f32 or f16.
static void run_expanded(tj_dtype_t dt, double start, double limit,
                         double delta) {
  const size_t es = tj_dtype_size(dt);
  unsigned char sv[8], lv[8], dv[8];
  tj_store_f64(dt, sv, 0, start);
  tj_store_f64(dt, lv, 0, limit);
  tj_store_f64(dt, dv, 0, delta);
  start = tj_load_f64(dt, sv, 0);
  limit = tj_load_f64(dt, lv, 0);
  delta = tj_load_f64(dt, dv, 0);
  // The oracle: the count in dt's steps, the running sum in dt.
  unsigned char q[8];
  tj_store_f64(dt, q, 0, limit - start);
  tj_store_f64(dt, q, 0, tj_load_f64(dt, q, 0) / delta);
  double c = ceil(tj_load_f64(dt, q, 0));
  int64_t count = c > 0 ? (int64_t)c : 0;
  double s2 = tj_load_f64(dt, sv, 0) * 2, l1 = limit - 1;
  tj_store_f64(dt, q, 0, s2);
  s2 = tj_load_f64(dt, q, 0);
  tj_store_f64(dt, q, 0, l1);
  l1 = tj_load_f64(dt, q, 0);
  int64_t len2 = (int64_t)fmax(0, ceil((l1 - s2) / delta));
  for (int c2 = 0; c2 < g_num_ctx; ++c2) {
    tj_graph_t* g = NULL;
    CHECK_OK(tj_graph_create(g_ctx[c2], "expanded", &g));
    tj_value_t a = tj_graph_input(g, dt, 0, NULL, "start");
    tj_value_t b = tj_graph_input(g, dt, 0, NULL, "limit");
    tj_value_t d = tj_graph_input(g, dt, 0, NULL, "delta");
    tj_value_t m = tj_graph_cast(
        g,
        tj_graph_relu(
            g, tj_graph_ceil(g, tj_graph_div(g, tj_graph_sub(g, b, a), d))),
        TJ_DTYPE_I64);
    tj_graph_output(g, tj_graph_range_count(g, a, m, d), "y");
    tj_graph_output(
        g,
        tj_graph_range(g, tj_graph_mul(g, a, tj_graph_scalar(g, dt, 2)),
                       tj_graph_sub(g, b, tj_graph_scalar(g, dt, 1)), d),
        "r");
    CHECK_OK(tj_graph_finalize(g));
    tj_executable_t* exe = compile_x86(g);
    tj_tensor_t in[3] = {tj_tensor_make(sv, dt, 0, NULL),
                         tj_tensor_make(lv, dt, 0, NULL),
                         tj_tensor_make(dv, dt, 0, NULL)};
    int32_t rank;
    int64_t len = -1, got2 = -1;
    if (exe) {
      CHECK_OK(tj_executable_output_shape(exe, in, 3, 0, &rank, &len));
      CHECK_OK(tj_executable_output_shape(exe, in, 3, 1, &rank, &got2));
    }
    CHECK(len == count);
    CHECK(got2 == len2);
    if (len != count || got2 != len2 || !exe) {
      tj_executable_release(exe);
      tj_graph_destroy(g);
      continue;
    }
    unsigned char* y = calloc((size_t)count + 1, es);
    unsigned char* ry = calloc((size_t)count + 1, es);
    unsigned char* r = calloc((size_t)len2 + 1, es);
    unsigned char* rr = calloc((size_t)len2 + 1, es);
    tj_tensor_t out[2] = {tj_tensor_make(y, dt, 1, &count),
                          tj_tensor_make(r, dt, 1, &len2)};
    tj_tensor_t ref[2] = {tj_tensor_make(ry, dt, 1, &count),
                          tj_tensor_make(rr, dt, 1, &len2)};
    CHECK_OK(tj_executable_run(exe, in, 3, out, 2));
    CHECK_OK(tj_reference_run(g, in, 3, ref, 2));
    CHECK(memcmp(y, ry, (size_t)count * es) == 0);
    CHECK(memcmp(r, rr, (size_t)len2 * es) == 0);
    unsigned char prev[8];
    memcpy(prev, sv, es);
    for (int64_t i = 0; i < count; ++i) {
      CHECK(memcmp(y + (size_t)i * es, prev, es) == 0);
      tj_store_f64(dt, prev, 0, tj_load_f64(dt, prev, 0) + delta);
    }
    if (len2 > 0) CHECK(tj_load_f64(dt, r, 0) == s2);
    free(y);
    free(ry);
    free(r);
    free(rr);
    tj_executable_release(exe);
    tj_graph_destroy(g);
  }
}

TEST(computed_scalars_and_running_sum) {
  run_expanded(TJ_DTYPE_F32, 1, 5, 2);
  run_expanded(TJ_DTYPE_F32, 0.1, 7.3, 0.3);  // 24 steps of rounding
  run_expanded(TJ_DTYPE_F32, 5, 1, 1);        // none
  run_expanded(TJ_DTYPE_F16, 1, 5, 2);
  run_expanded(TJ_DTYPE_F16, -2, 30, 0.7);
}

static tj_status_t range_attempt(tj_allocator_t allocator) {
  tj_context_t* ctx = NULL;
  TJ_RETURN_IF_ERROR(tj_test_sweep_context_create(allocator, &ctx));
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  tj_status_t s = tj_graph_create(ctx, "oom", &g);
  if (!s) {
    tj_value_t a = tj_graph_input(g, TJ_DTYPE_I32, 0, NULL, "start");
    tj_value_t b = tj_graph_input(g, TJ_DTYPE_I32, 0, NULL, "limit");
    tj_value_t d = tj_graph_input(g, TJ_DTYPE_I32, 0, NULL, "delta");
    tj_value_t y = tj_graph_range(g, a, b, d);
    tj_graph_output(g, tj_graph_mul(g, y, y), "y");
    s = tj_graph_finalize(g);
  }
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.x86.num_threads = 1;
  if (!s) s = tj_compile(g, &opts, &exe);
  int32_t a = 1, b = 9, d = 3, y[3];  // 1, 4, 7
  int64_t len = 3;
  if (!s) {
    tj_tensor_t in[3] = {tj_tensor_make(&a, TJ_DTYPE_I32, 0, NULL),
                         tj_tensor_make(&b, TJ_DTYPE_I32, 0, NULL),
                         tj_tensor_make(&d, TJ_DTYPE_I32, 0, NULL)};
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_I32, 1, &len);
    s = tj_executable_run(exe, in, 3, &out, 1);
    if (!s) CHECK(y[0] == 1 && y[1] == 16 && y[2] == 49);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(oom_sweep) { CHECK(tj_test_oom_sweep("range", range_attempt) > 0); }

int main(void) {
  g_num_ctx = tj_test_tier_contexts(g_ctx, g_isa);
  RUN_TEST(f32_every_tier_many_lengths);
  RUN_TEST(dtypes);
  RUN_TEST(constants_and_prepare);
  RUN_TEST(computed_scalars_and_running_sum);
  RUN_TEST(errors);
  RUN_TEST(oom_sweep);
  for (int i = 0; i < g_num_ctx; ++i) tj_context_destroy(g_ctx[i]);
  TEST_MAIN_END();
}
