// ops15b (issue 15): max_pool of integer x (ONNX MaxPool of int8 and uint8;
// every integer dtype here), padded with the dtype's lowest value. Each
// dtype and window (1-D to 3-D, strides, dilations, ceil_mode, pads) is
// compiled for x86 at every ISA tier the host has and run against loops
// written here and the reference interpreter, exactly, values across the
// dtype's whole range; the pool and an add after it run as native kernels
// (no graph break). Then ONNX's test_maxpool_2d_uint8 numbers, symbolic
// dims, the errors (avg/lp pools stay float, bool and storage dtypes are
// refused) and the OOM sweep.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/dtype.h"
#include "tensorjit.h"
#include "tests/unit/test.h"

static tj_context_t* g_ctx[3];
static const char* g_isa[3];
static int g_num_ctx;

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return g_rng ^ (g_rng >> 29);
}

static const tj_dtype_t kDtypes[] = {
    TJ_DTYPE_I8,  TJ_DTYPE_U8,  TJ_DTYPE_I16, TJ_DTYPE_U16,
    TJ_DTYPE_I32, TJ_DTYPE_U32, TJ_DTYPE_I64, TJ_DTYPE_U64,
};

// A value of |dt| as tj_load_i64 gives it: a quarter of them the dtype's
// extremes (so that lowest, the pad, meets real lowest values), the rest
// uniform over its range.
static int64_t draw(tj_dtype_t dt) {
  uint64_t r = next_u64();
  switch (r & 7) {
    case 0:
      return tj_dtype_int_lowest(dt);
    case 1:
      return tj_dtype_int_highest(dt);
    default:
      break;
  }
  int64_t lo = tj_dtype_int_lowest(dt), hi = tj_dtype_int_highest(dt);
  if (dt == TJ_DTYPE_I64 || dt == TJ_DTYPE_U64) return (int64_t)(r >> 3 ^ r);
  uint64_t span = (uint64_t)(hi - lo) + 1;
  return lo + (int64_t)((r >> 8) % span);
}

typedef struct window_t {
  const char* name;
  int32_t n;  // spatial axes
  int64_t in[3], kernel[3], stride[3], dilation[3], lo[3], hi[3];
  bool ceil_mode;
} window_t;

static const window_t kWindows[] = {
    {"2d 3x3/2 pad 1", 2, {9, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 0},
    {"2d 5x5 pad 2 (onnx)",
     2,
     {5, 5},
     {5, 5},
     {1, 1},
     {1, 1},
     {2, 2},
     {2, 2},
     0},
    {"1d k3 dil 2 ceil", 1, {11}, {3}, {2}, {2}, {1}, {0}, 1},
    {"3d 2x3x2 pad",
     3,
     {4, 5, 3},
     {2, 3, 2},
     {1, 2, 1},
     {1, 1, 1},
     {1, 0, 1},
     {0, 1, 0},
     0},
};

static int64_t out_size(const window_t* w, int32_t i) {
  int64_t room =
      w->in[i] + w->lo[i] + w->hi[i] - w->dilation[i] * (w->kernel[i] - 1) - 1;
  int64_t o = room / w->stride[i] + 1;
  if (w->ceil_mode) {
    o = (room + w->stride[i] - 1) / w->stride[i] + 1;
    // The last window must start inside x or its low pad (ONNX).
    if ((o - 1) * w->stride[i] >= w->in[i] + w->lo[i]) --o;
  }
  return o;
}

static tj_conv_attrs_t attrs_of(const window_t* w) {
  tj_conv_attrs_t a;
  memset(&a, 0, sizeof(a));
  for (int32_t i = 0; i < w->n; ++i) {
    a.kernel[i] = w->kernel[i];
    a.strides[i] = w->stride[i];
    a.dilations[i] = w->dilation[i];
    a.pads_begin[i] = w->lo[i];
    a.pads_end[i] = w->hi[i];
  }
  a.ceil_mode = w->ceil_mode;
  return a;
}

// y = max_pool(x) + 1 (wrapping) of x [2, 3, in...]: the pool and a
// pointwise op after it.
static tj_graph_t* build(tj_context_t* ctx, tj_dtype_t dt, const window_t* w,
                         tj_value_t* out_pool) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "int_pool", &g));
  int64_t xd[5] = {2, 3};
  for (int32_t i = 0; i < w->n; ++i) xd[2 + i] = w->in[i];
  tj_value_t x = tj_graph_input(g, dt, 2 + w->n, xd, "x");
  tj_conv_attrs_t a = attrs_of(w);
  tj_value_t p = tj_graph_max_pool(g, x, &a);
  tj_graph_output(g, p, "p");
  tj_graph_output(g, tj_graph_add(g, p, tj_graph_scalar(g, dt, 1)), "q");
  if (out_pool) *out_pool = p;
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

// The oracle: each window's largest tap inside x, from the dtype's lowest
// (u64 compared unsigned); |y| dense [2, 3, out...].
static void oracle(tj_dtype_t dt, const window_t* w, const void* x,
                   const int64_t* od, void* y) {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, lo[3] = {0, 0, 0};
  for (int32_t i = 0; i < w->n; ++i) {
    in[i] = w->in[i];
    out[i] = od[i];
    k[i] = w->kernel[i];
    s[i] = w->stride[i];
    d[i] = w->dilation[i];
    lo[i] = w->lo[i];
  }
  int64_t e = 0;
  for (int64_t nc = 0; nc < 6; ++nc)
    for (int64_t j0 = 0; j0 < out[0]; ++j0)
      for (int64_t j1 = 0; j1 < out[1]; ++j1)
        for (int64_t j2 = 0; j2 < out[2]; ++j2, ++e) {
          int64_t best = tj_dtype_int_lowest(dt);
          for (int64_t a = 0; a < k[0]; ++a)
            for (int64_t b = 0; b < k[1]; ++b)
              for (int64_t c = 0; c < k[2]; ++c) {
                int64_t p0 = j0 * s[0] + a * d[0] - lo[0];
                int64_t p1 = j1 * s[1] + b * d[1] - lo[1];
                int64_t p2 = j2 * s[2] + c * d[2] - lo[2];
                if (p0 < 0 || p0 >= in[0] || p1 < 0 || p1 >= in[1] || p2 < 0 ||
                    p2 >= in[2])
                  continue;
                int64_t v = tj_load_i64(
                    dt, x, ((nc * in[0] + p0) * in[1] + p1) * in[2] + p2);
                if (dt == TJ_DTYPE_U64 ? (uint64_t)v > (uint64_t)best
                                       : v > best)
                  best = v;
              }
          tj_store_i64(dt, y, e, best);
        }
}

static void run_case(tj_dtype_t dt, const window_t* w) {
  const size_t es = tj_dtype_size(dt);
  int64_t xd[5] = {2, 3}, yd[5] = {2, 3}, od[3] = {1, 1, 1};
  int64_t xn = 6, yn = 6;
  for (int32_t i = 0; i < w->n; ++i) {
    xd[2 + i] = w->in[i];
    od[i] = yd[2 + i] = out_size(w, i);
    xn *= w->in[i];
    yn *= yd[2 + i];
  }
  void* x = malloc((size_t)xn * es);
  void* want = malloc((size_t)yn * es);
  void* ref[2] = {malloc((size_t)yn * es), malloc((size_t)yn * es)};
  void* got[2] = {malloc((size_t)yn * es), malloc((size_t)yn * es)};
  CHECK(x && want && ref[0] && ref[1] && got[0] && got[1]);
  for (int64_t i = 0; i < xn; ++i) tj_store_i64(dt, x, i, draw(dt));
  oracle(dt, w, x, od, want);
  const int32_t rank = 2 + w->n;
  tj_tensor_t in = tj_tensor_make(x, dt, rank, xd);
  for (int c = 0; c < g_num_ctx; ++c) {
    tj_value_t p;
    tj_graph_t* g = build(g_ctx[c], dt, w, &p);
    int64_t dims[TJ_MAX_RANK];
    tj_graph_value_dims(g, p, dims);
    for (int32_t i = 0; i < rank; ++i) CHECK(dims[i] == yd[i]);
    CHECK(tj_graph_value_dtype(g, p) == dt);
    tj_tensor_t r[2] = {tj_tensor_make(ref[0], dt, rank, yd),
                        tj_tensor_make(ref[1], dt, rank, yd)};
    tj_tensor_t o[2] = {tj_tensor_make(got[0], dt, rank, yd),
                        tj_tensor_make(got[1], dt, rank, yd)};
    if (c == 0) CHECK_OK(tj_reference_run(g, &in, 1, r, 2));
    tj_compile_options_t opts = tj_test_x86_options(2);
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &opts, &exe));
    if (exe) {
      CHECK_OK(tj_executable_run(exe, &in, 1, o, 2));
      tj_executable_stats_t st = {.struct_size = sizeof(st)};
      tj_executable_stats(exe, &st);
      CHECK_EQ_INT(0, st.num_graph_breaks);
      CHECK_EQ_INT(0, st.num_host_calls);
    }
    int bad = 0;
    for (int64_t i = 0; i < yn; ++i) {
      int64_t wv = tj_load_i64(dt, want, i);
      int64_t wq = (int64_t)((uint64_t)wv + 1);  // (u64: INT64_MAX + 1 wraps)
      tj_store_i64(dt, want, i, wq);             // wraps to the dtype
      wq = tj_load_i64(dt, want, i);
      tj_store_i64(dt, want, i, wv);
      bool ok = tj_load_i64(dt, got[0], i) == wv &&
                tj_load_i64(dt, got[1], i) == wq &&
                (c > 0 || (tj_load_i64(dt, ref[0], i) == wv &&
                           tj_load_i64(dt, ref[1], i) == wq));
      if (!ok && bad++ < 3)
        fprintf(stderr,
                "%s %s (%s): element %lld: want %lld, x86 %lld, ref %lld\n",
                tj_dtype_name(dt), w->name, g_isa[c], (long long)i,
                (long long)wv, (long long)tj_load_i64(dt, got[0], i),
                (long long)tj_load_i64(dt, ref[0], i));
    }
    CHECK_EQ_INT(0, bad);
    tj_executable_release(exe);
    tj_graph_destroy(g);
  }
  free(x);
  free(want);
  for (int i = 0; i < 2; ++i) {
    free(ref[i]);
    free(got[i]);
  }
}

TEST(every_integer_dtype_every_tier) {
  for (size_t d = 0; d < sizeof(kDtypes) / sizeof(kDtypes[0]); ++d)
    for (size_t w = 0; w < sizeof(kWindows) / sizeof(kWindows[0]); ++w)
      run_case(kDtypes[d], &kWindows[w]);
}

// ONNX's test_maxpool_2d_uint8: x = 1..25 as u8 [1, 1, 5, 5], 5x5, pads 2.
TEST(onnx_maxpool_2d_uint8) {
  static const uint8_t kWant[25] = {13, 14, 15, 15, 15, 18, 19, 20, 20,
                                    20, 23, 24, 25, 25, 25, 23, 24, 25,
                                    25, 25, 23, 24, 25, 25, 25};
  uint8_t x[25], y[25];
  for (int i = 0; i < 25; ++i) x[i] = (uint8_t)(i + 1);
  int64_t d[4] = {1, 1, 5, 5};
  for (int c = 0; c < g_num_ctx; ++c) {
    tj_graph_t* g = NULL;
    CHECK_OK(tj_graph_create(g_ctx[c], "onnx", &g));
    tj_conv_attrs_t a;
    memset(&a, 0, sizeof(a));
    a.kernel[0] = a.kernel[1] = 5;
    a.pads_begin[0] = a.pads_begin[1] = a.pads_end[0] = a.pads_end[1] = 2;
    tj_value_t xv = tj_graph_input(g, TJ_DTYPE_U8, 4, d, "x");
    tj_graph_output(g, tj_graph_max_pool(g, xv, &a), "y");
    CHECK_OK(tj_graph_finalize(g));
    tj_compile_options_t opts = tj_test_x86_options(1);
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &opts, &exe));
    tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_U8, 4, d);
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_U8, 4, d);
    memset(y, 0, sizeof(y));
    if (exe) CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
    CHECK(memcmp(y, kWant, sizeof(y)) == 0);
    tj_executable_release(exe);
    tj_graph_destroy(g);
  }
}

// Inference keeps a symbolic batch and height (stride 1, "same" pads);
// decompose needs constant spatial sizes, so one executable of a symbolic
// batch runs two batch sizes against the reference.
TEST(symbolic_dims) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx[0], "sym", &g));
  int64_t B = tj_graph_symbol(g, "B"), H = tj_graph_symbol(g, "H");
  tj_value_t x =
      tj_graph_input(g, TJ_DTYPE_I32, 4, (int64_t[]){B, 2, H, 6}, "x");
  tj_conv_attrs_t a;
  memset(&a, 0, sizeof(a));
  a.kernel[0] = a.kernel[1] = 3;
  a.pads_begin[0] = a.pads_begin[1] = a.pads_end[0] = a.pads_end[1] = 1;
  tj_value_t y = tj_graph_max_pool(g, x, &a);
  int64_t dims[4];
  tj_graph_value_dims(g, y, dims);
  CHECK(dims[0] == B && dims[1] == 2 && dims[2] == H && dims[3] == 6);
  tj_graph_destroy(g);
  CHECK_OK(tj_graph_create(g_ctx[0], "sym", &g));
  B = tj_graph_symbol(g, "B");
  x = tj_graph_input(g, TJ_DTYPE_I32, 4, (int64_t[]){B, 2, 5, 6}, "x");
  y = tj_graph_max_pool(g, x, &a);
  tj_graph_value_dims(g, y, dims);
  CHECK(dims[0] == B && dims[2] == 5 && dims[3] == 6);
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t opts = tj_test_x86_options(1);
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  const int64_t batches[2] = {1, 3};
  for (int s = 0; s < 2; ++s) {
    int64_t d[4] = {batches[s], 2, 5, 6};
    int64_t n = d[0] * d[1] * d[2] * d[3];
    int32_t* xv = malloc((size_t)n * sizeof(int32_t));
    int32_t* got = calloc((size_t)n, sizeof(int32_t));
    int32_t* ref = calloc((size_t)n, sizeof(int32_t));
    for (int64_t i = 0; i < n; ++i) xv[i] = (int32_t)draw(TJ_DTYPE_I32);
    tj_tensor_t in = tj_tensor_make(xv, TJ_DTYPE_I32, 4, d);
    tj_tensor_t o = tj_tensor_make(got, TJ_DTYPE_I32, 4, d);
    tj_tensor_t r = tj_tensor_make(ref, TJ_DTYPE_I32, 4, d);
    if (exe) CHECK_OK(tj_executable_run(exe, &in, 1, &o, 1));
    CHECK_OK(tj_reference_run(g, &in, 1, &r, 1));
    CHECK(memcmp(got, ref, (size_t)n * sizeof(int32_t)) == 0);
    free(xv);
    free(got);
    free(ref);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

static void expect_error(tj_dtype_t dt, int which, const char* needle) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx[0], "bad", &g));
  tj_value_t x = tj_graph_input(g, dt, 4, (int64_t[]){1, 2, 4, 4}, "x");
  tj_conv_attrs_t a;
  memset(&a, 0, sizeof(a));
  a.kernel[0] = a.kernel[1] = 2;
  tj_value_t y = which == 0   ? tj_graph_max_pool(g, x, &a)
                 : which == 1 ? tj_graph_avg_pool(g, x, &a)
                              : tj_graph_lp_pool(g, x, &a);
  CHECK(tj_value_is_none(y));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, needle, tj_graph_finalize(g));
  tj_graph_destroy(g);
}

// avg and lp pools stay float (ONNX); max_pool refuses bool (ONNX's
// MaxPool takes none) and the storage dtypes.
TEST(errors) {
  expect_error(TJ_DTYPE_I32, 1,
               "avg_pool (node %1): needs a float dtype, got i32");
  expect_error(TJ_DTYPE_U8, 2,
               "lp_pool (node %1): needs a float dtype, got u8");
  expect_error(TJ_DTYPE_BOOL, 0,
               "max_pool (node %1): needs a numeric dtype, got bool");
  expect_error(TJ_DTYPE_I4, 0, "i4 is a storage dtype");
}

// Build, compile and run an i16 pool (with ceil_mode) under the failing
// allocator.
static tj_status_t pool_attempt(tj_allocator_t allocator) {
  tj_context_t* ctx = NULL;
  TJ_RETURN_IF_ERROR(tj_test_sweep_context_create(allocator, &ctx));
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  tj_status_t s = tj_graph_create(ctx, "oom", &g);
  int64_t d[4] = {1, 2, 6, 6}, od[4] = {1, 2, 3, 3};
  if (!s) {
    tj_conv_attrs_t a;
    memset(&a, 0, sizeof(a));
    a.kernel[0] = a.kernel[1] = 3;
    a.strides[0] = a.strides[1] = 2;
    a.pads_begin[0] = a.pads_begin[1] = 1;
    a.ceil_mode = true;
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_I16, 4, d, "x");
    tj_graph_output(g, tj_graph_max_pool(g, x, &a), "y");
    s = tj_graph_finalize(g);
  }
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.x86.num_threads = 1;
  if (!s) s = tj_compile(g, &opts, &exe);
  int16_t x[72], y[18];
  for (int i = 0; i < 72; ++i) x[i] = (int16_t)(i * 37 % 101 - 50);
  if (!s) {
    tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_I16, 4, d);
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_I16, 4, od);
    s = tj_executable_run(exe, &in, 1, &out, 1);
  }
  // Window (0, 0) covers x[0..1][0..1] and the pads.
  if (!s) {
    int16_t m = x[0];
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        if (x[i * 6 + j] > m) m = x[i * 6 + j];
    CHECK_EQ_INT(m, y[0]);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(oom_sweep) { CHECK(tj_test_oom_sweep("int max_pool", pool_attempt) > 0); }

int main(void) {
  g_num_ctx = tj_test_tier_contexts(g_ctx, g_isa);
  RUN_TEST(every_integer_dtype_every_tier);
  RUN_TEST(onnx_maxpool_2d_uint8);
  RUN_TEST(symbolic_dims);
  RUN_TEST(errors);
  RUN_TEST(oom_sweep);
  for (int i = 0; i < g_num_ctx; ++i) tj_context_destroy(g_ctx[i]);
  TEST_MAIN_END();
}
