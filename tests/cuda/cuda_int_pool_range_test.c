// Issue 15 (session 25): two ops of session 24 that had run on x86 only,
// on the GPU against the reference interpreter.
//  - max_pool of every integer dtype (decompose's fused pointwise max over
//    strided slices): exact, the dtype's extremes drawn often, a wrapping
//    add after it, no graph break and no host call;
//  - Range with run-time scalars (tj_graph_range): one executable runs many
//    lengths (empty, negative steps, fractions) from CPU tensors, a fused
//    region after it; a scalar given as a CUDA tensor is refused with a
//    message that says to give it as a CPU tensor.

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/dtype.h"
#include "tensorjit.h"
#include "tests/cuda/cuda_test_util.h"

static tj_context_t* g_ctx;
static tj_cuda_device_t* g_dev;  // the test's own handle, for device memory

static tj_executable_t* compile_cuda(tj_graph_t* g) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.cache_dir = "";
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  return exe;
}

static tj_executable_stats_t stats_of(const tj_executable_t* exe) {
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  return st;
}

//===--- integer max pools ---===//

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static uint64_t next_u64(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return g_rng ^ (g_rng >> 29);
}

static const tj_dtype_t kDtypes[] = {
    TJ_DTYPE_U8,  TJ_DTYPE_I8,  TJ_DTYPE_I16, TJ_DTYPE_U16,
    TJ_DTYPE_I32, TJ_DTYPE_U32, TJ_DTYPE_I64, TJ_DTYPE_U64,
};

typedef struct pool_t {
  const char* name;
  int32_t n;
  int64_t in[3], kernel[3], stride[3], dilation[3], lo[3], hi[3];
  bool ceil_mode;
} pool_t;

static const pool_t kPools[] = {
    {"1d_k2_d2", 1, {11}, {2}, {1}, {2}, {0}, {0}, false},
    {"2d_3x3_s2_p1", 2, {9, 10}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, false},
    {"3d_2x2x2_s2_ceil",
     3,
     {5, 4, 5},
     {2, 2, 2},
     {2, 2, 2},
     {1, 1, 1},
     {0, 0, 0},
     {0, 0, 0},
     true},
};

// Every fourth element is the dtype's lowest or highest value (the pads'
// value and the wrap of the add after the pool), the rest any bits.
static void fill(tj_dtype_t dt, void* x, int64_t n) {
  const size_t es = tj_dtype_size(dt);
  const bool is_signed = dt == TJ_DTYPE_I8 || dt == TJ_DTYPE_I16 ||
                         dt == TJ_DTYPE_I32 || dt == TJ_DTYPE_I64;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t r = next_u64();
    uint64_t bits = r >> 8;
    if ((r & 3) == 0) {
      const uint64_t top = 1ull << (8 * es - 1);
      bits = (r & 4) ? (is_signed ? top : 0) : (is_signed ? top - 1 : ~0ull);
    }
    memcpy((char*)x + (size_t)i * es, &bits, es);  // little-endian low bytes
  }
}

static void run_pool(tj_dtype_t dt, const pool_t* w) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, "cuda_int_pool", &g));
  if (!g) return;
  const int32_t rank = 2 + w->n;
  int64_t xd[5] = {tj_graph_symbol(g, "N"), 3};
  tj_conv_attrs_t a;
  memset(&a, 0, sizeof(a));
  for (int32_t i = 0; i < w->n; ++i) {
    xd[2 + i] = w->in[i];
    a.kernel[i] = w->kernel[i];
    a.strides[i] = w->stride[i];
    a.dilations[i] = w->dilation[i];
    a.pads_begin[i] = w->lo[i];
    a.pads_end[i] = w->hi[i];
  }
  a.ceil_mode = w->ceil_mode;
  tj_value_t x = tj_graph_input(g, dt, rank, xd, "x");
  tj_value_t p = tj_graph_max_pool(g, x, &a);
  tj_graph_output(g, p, "p");
  tj_graph_output(g, tj_graph_add(g, p, tj_graph_scalar(g, dt, 1)), "q");
  CHECK_OK(tj_graph_finalize(g));
  tj_executable_t* exe = compile_cuda(g);
  if (exe) {
    const tj_executable_stats_t st = stats_of(exe);
    CHECK_EQ_INT(0, st.num_graph_breaks);
    CHECK_EQ_INT(0, st.num_host_calls);
  }
  const size_t es = tj_dtype_size(dt);
  static const int64_t kBatches[] = {2, 1, 0};
  for (size_t bi = 0; exe && bi < TJ_ARRAY_SIZE(kBatches); ++bi) {
    xd[0] = kBatches[bi];
    int64_t xn = 1;
    for (int32_t i = 0; i < rank; ++i) xn *= xd[i];
    void* xb = malloc((size_t)(xn ? xn : 1) * es);
    fill(dt, xb, xn);
    tj_tensor_t in = tj_tensor_make(xb, dt, rank, xd);
    int64_t yd[5];
    int32_t yr = 0;
    CHECK_OK(tj_executable_output_shape(exe, &in, 1, 0, &yr, yd));
    CHECK_EQ_INT(rank, yr);
    int64_t yn = 1;
    for (int32_t i = 0; i < rank; ++i) yn *= yd[i];
    const size_t bytes = (size_t)(yn ? yn : 1) * es;
    void* got[2] = {malloc(bytes), malloc(bytes)};
    void* want[2] = {calloc(1, bytes), calloc(1, bytes)};
    memset(got[0], 0xa5, bytes);
    memset(got[1], 0xa5, bytes);
    tj_tensor_t o[2] = {tj_tensor_make(got[0], dt, rank, yd),
                        tj_tensor_make(got[1], dt, rank, yd)};
    tj_tensor_t r[2] = {tj_tensor_make(want[0], dt, rank, yd),
                        tj_tensor_make(want[1], dt, rank, yd)};
    CHECK_OK(tj_reference_run(g, &in, 1, r, 2));
    CHECK_OK(tj_executable_run(exe, &in, 1, o, 2));
    for (int k = 0; k < 2; ++k) {
      int64_t bad = 0, first = -1;
      for (int64_t i = 0; i < yn; ++i) {
        if (memcmp((char*)got[k] + i * (int64_t)es,
                   (char*)want[k] + i * (int64_t)es, es) != 0 &&
            bad++ == 0)
          first = i;
      }
      if (bad)
        fprintf(stderr,
                "%s %s N=%lld %s: %lld of %lld wrong, [%lld] %lld vs "
                "%lld\n",
                tj_dtype_name(dt), w->name, (long long)xd[0], k ? "q" : "p",
                (long long)bad, (long long)yn, (long long)first,
                (long long)tj_load_i64(dt, got[k], first),
                (long long)tj_load_i64(dt, want[k], first));
      CHECK_EQ_INT(0, bad);
    }
    free(xb);
    for (int k = 0; k < 2; ++k) {
      free(got[k]);
      free(want[k]);
    }
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

TEST(integer_max_pools) {
  for (size_t d = 0; d < TJ_ARRAY_SIZE(kDtypes); ++d)
    for (size_t w = 0; w < TJ_ARRAY_SIZE(kPools); ++w)
      run_pool(kDtypes[d], &kPools[w]);
}

//===--- Range ---===//

// y = range(start, limit, delta) of |dt| inputs; z = y * 2 + 1 and s =
// sum(z): a fused region after the op.
static tj_graph_t* build_range(tj_dtype_t dt) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, "cuda_range", &g));
  if (!g) return NULL;
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

// One run at (start, limit, delta), given as doubles and stored as |dt|:
// the length is numpy.arange's, y and z equal the reference's element for
// element (and start + i * delta for integers), s within 1e-5.
static void run_range(tj_graph_t* g, tj_executable_t* exe, tj_dtype_t dt,
                      const double v[3]) {
  const size_t es = tj_dtype_size(dt);
  uint64_t sc[3] = {0, 0, 0};
  tj_tensor_t in[3];
  for (int i = 0; i < 3; ++i) {
    tj_store_f64(dt, &sc[i], 0, v[i]);
    in[i] = tj_tensor_make(&sc[i], dt, 0, NULL);
  }
  int32_t rank = -1;
  int64_t len = -1;
  CHECK_OK(tj_executable_output_shape(exe, in, 3, 0, &rank, &len));
  const double st = tj_load_f64(dt, &sc[0], 0), li = tj_load_f64(dt, &sc[1], 0),
               de = tj_load_f64(dt, &sc[2], 0);
  const double n = ceil((li - st) / de);
  const int64_t want_len = n > 0 ? (int64_t)n : 0;
  CHECK_EQ_INT(1, rank);
  CHECK_EQ_INT((int)want_len, (int)len);
  if (len != want_len) return;
  const size_t bytes = (size_t)(len + 1) * es;
  void* y = malloc(bytes);
  void* z = malloc(bytes);
  void* ry = calloc(1, bytes);
  void* rz = calloc(1, bytes);
  uint64_t s = 0, rs = 0;
  tj_tensor_t out[3] = {tj_tensor_make(y, dt, 1, &len),
                        tj_tensor_make(z, dt, 1, &len),
                        tj_tensor_make(&s, dt, 0, NULL)};
  tj_tensor_t ref[3] = {tj_tensor_make(ry, dt, 1, &len),
                        tj_tensor_make(rz, dt, 1, &len),
                        tj_tensor_make(&rs, dt, 0, NULL)};
  CHECK_OK(tj_executable_run(exe, in, 3, out, 3));
  CHECK_OK(tj_reference_run(g, in, 3, ref, 3));
  int bad = 0;
  for (int64_t i = 0; i < len; ++i) {
    bool ok = memcmp((char*)y + i * (int64_t)es, (char*)ry + i * (int64_t)es,
                     es) == 0 &&
              memcmp((char*)z + i * (int64_t)es, (char*)rz + i * (int64_t)es,
                     es) == 0;
    if (!tj_dtype_is_float(dt))
      ok = ok && tj_load_i64(dt, y, i) == (int64_t)st + i * (int64_t)de;
    if (!ok && bad++ < 3)
      fprintf(stderr, "%s range(%g, %g, %g)[%lld]: %g %g, reference %g %g\n",
              tj_dtype_name(dt), st, li, de, (long long)i,
              tj_load_f64(dt, y, i), tj_load_f64(dt, z, i),
              tj_load_f64(dt, ry, i), tj_load_f64(dt, rz, i));
  }
  CHECK_EQ_INT(0, bad);
  const double gs = tj_load_f64(dt, &s, 0), ws = tj_load_f64(dt, &rs, 0);
  CHECK(fabs(gs - ws) <= 1e-5 * fmax(1, fabs(ws)));
  free(y);
  free(z);
  free(ry);
  free(rz);
}

TEST(range_many_lengths_one_executable) {
  static const tj_dtype_t kRangeDtypes[] = {TJ_DTYPE_F32, TJ_DTYPE_I64,
                                            TJ_DTYPE_I32, TJ_DTYPE_F64};
  static const double kCases[][3] = {
      {1, 5, 2},         {0, 10, 1},    {10, 4, -3},   {5, 5, 1},
      {5, 1, 1},         {-7, 1000, 3}, {2, -2, -1},   {0, 100000, 7},
      {0.5, 3.25, 0.25}, {0, 1, 0.1},   {2, -2, -0.5},
  };
  for (size_t d = 0; d < TJ_ARRAY_SIZE(kRangeDtypes); ++d) {
    const tj_dtype_t dt = kRangeDtypes[d];
    tj_graph_t* g = build_range(dt);
    tj_executable_t* exe = g ? compile_cuda(g) : NULL;
    if (!exe) {
      tj_graph_destroy(g);
      continue;
    }
    const size_t n = tj_dtype_is_float(dt) ? TJ_ARRAY_SIZE(kCases) : 8;
    for (size_t k = 0; k < n; ++k) run_range(g, exe, dt, kCases[k]);
    const tj_executable_stats_t st = stats_of(exe);
    CHECK_EQ_INT(0, st.num_graph_breaks);
    CHECK_EQ_INT(1, st.num_host_calls);
    tj_executable_release(exe);
    tj_graph_destroy(g);
  }
}

// The length is read on the host before the run: a scalar on the device
// is refused, naming the input, and the executable runs again after it.
TEST(range_scalar_on_the_device_is_refused) {
  tj_graph_t* g = build_range(TJ_DTYPE_I64);
  tj_executable_t* exe = g ? compile_cuda(g) : NULL;
  if (!exe) {
    tj_graph_destroy(g);
    return;
  }
  int64_t v[3] = {0, 6, 2};
  tj_cu_deviceptr_t d = 0;
  CHECK_OK(tj_cuda_device_alloc(g_dev, sizeof(v), &d));
  CHECK_OK(tj_cuda_copy_to_device(g_dev, d, v, sizeof(v)));
  CHECK_OK(tj_cuda_device_synchronize(g_dev));
  tj_tensor_t in[3] = {tj_tensor_make(&v[0], TJ_DTYPE_I64, 0, NULL),
                       tj_tensor_make(&v[1], TJ_DTYPE_I64, 0, NULL),
                       tj_tensor_make(&v[2], TJ_DTYPE_I64, 0, NULL)};
  in[1].data = (void*)(uintptr_t)(d + sizeof(int64_t));
  in[1].device_type = TJ_DEVICE_CUDA;
  in[1].device_id = g_dev->ordinal;
  int32_t rank = -1;
  int64_t len = -1;
  tj_status_t s = tj_executable_output_shape(exe, in, 3, 0, &rank, &len);
  CHECK_EQ_INT(TJ_STATUS_UNSUPPORTED, tj_status_code(s));
  CHECK(s && strstr(tj_status_message(s), "\"limit\"") &&
        strstr(tj_status_message(s), "CPU tensor"));
  if (s) printf("# %s\n", tj_status_message(s));
  tj_status_free(s);
  int64_t y[3] = {0}, z[3] = {0}, sum = 0, three = 3;
  tj_tensor_t out[3] = {tj_tensor_make(y, TJ_DTYPE_I64, 1, &three),
                        tj_tensor_make(z, TJ_DTYPE_I64, 1, &three),
                        tj_tensor_make(&sum, TJ_DTYPE_I64, 0, NULL)};
  s = tj_executable_run(exe, in, 3, out, 3);
  CHECK_EQ_INT(TJ_STATUS_UNSUPPORTED, tj_status_code(s));
  tj_status_free(s);
  // The same executable, the scalars on the host again.
  in[1] = tj_tensor_make(&v[1], TJ_DTYPE_I64, 0, NULL);
  CHECK_OK(tj_executable_run(exe, in, 3, out, 3));
  CHECK(y[0] == 0 && y[1] == 2 && y[2] == 4);
  CHECK(z[0] == 1 && z[1] == 5 && z[2] == 9 && sum == 15);
  CHECK_OK(tj_cuda_device_free(g_dev, d));
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

int main(void) {
  g_dev = tj_test_open_device_or_skip();
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  CHECK_OK(tj_context_create(&o, &g_ctx));
  RUN_TEST(integer_max_pools);
  RUN_TEST(range_many_lengths_one_executable);
  RUN_TEST(range_scalar_on_the_device_is_refused);
  tj_context_destroy(g_ctx);
  tj_cuda_device_destroy(g_dev);
  TEST_MAIN_END();
}
