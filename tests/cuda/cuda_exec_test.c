// The CUDA target end to end through the public API: graphs compiled with
// tj_compile(target = TJ_TARGET_CUDA) and run with tj_executable_run on CPU
// and on device tensors, compared with tj_reference_run. Skipped (exit 77,
// with the reason) where no driver or GPU is found.
//
// Tolerances (|got - want| <= atol + rtol * |want|; NaN matches NaN):
//   f32  as tests/unit/x86_exec_test.c: simple ops 1e-6, transcendentals
//        4e-6 (the GPU's approximate math is <= a few ulp, measured and
//        bounded by math_accuracy below), reductions and matmuls 1e-5 to
//        2e-5;
//   f16  2e-3 / 1e-3 and bf16 1.6e-2 / 1e-2 against the reference, which
//        rounds every op of a decomposed composite to the dtype (kernels
//        keep f32 inside a fused group, kernel_ir.h);
//   capstone bf16 additionally against the exact math of the same inputs
//        (the graph in f32 on the reference) with torch's bf16 rtol 1.6e-2
//        and atol 1e-4 (the matmul result is rounded to bf16 before the
//        epilogue, as in eager PyTorch).
// Every case runs at B = 0, 1, 7 and 257 from ONE executable.

#include <math.h>

#include "backends/cuda/cuda_executable.h"
#include "lib/dtype.h"
#include "tests/cuda/cuda_test_util.h"

static tj_context_t* g_ctx;
static tj_cuda_device_t* g_dev;  // the test's own handle, for device memory

//===--- random data ---===//

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint64_t rng_next(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

static double rng_uniform(double lo, double hi) {
  return lo + (hi - lo) * (double)(rng_next() >> 11) / 9007199254740992.0;
}

static void fill(tj_dtype_t d, void* p, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; ++i) {
    if (d == TJ_DTYPE_BOOL) {
      tj_store_i64(d, p, i, (int64_t)(rng_next() & 1));
    } else if (tj_dtype_is_float(d)) {
      tj_store_f64(d, p, i, rng_uniform(lo, hi));
    } else {
      tj_store_i64(d, p, i, (int64_t)floor(rng_uniform(lo, hi)));
    }
  }
}

static int64_t numel(int32_t rank, const int64_t* dims) {
  int64_t n = 1;
  for (int32_t d = 0; d < rank; ++d) n *= dims[d];
  return n;
}

typedef struct tol_t {
  double rtol, atol;
} tol_t;

static tol_t tol_for(tj_dtype_t d, double f32_rtol) {
  switch (d) {
    case TJ_DTYPE_F16:
      return (tol_t){2e-3, 1e-3};
    case TJ_DTYPE_BF16:
      return (tol_t){1.6e-2, 1e-2};
    case TJ_DTYPE_F64:
      return (tol_t){1e-13, 1e-14};
    default:
      return (tol_t){f32_rtol, f32_rtol};
  }
}

static bool compare(const char* what, tj_dtype_t d, const void* got,
                    const void* want, int64_t n, tol_t tol) {
  int misses = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool same;
    if (tj_dtype_is_float(d)) {
      double g = tj_load_f64(d, got, i), w = tj_load_f64(d, want, i);
      if (isnan(w) || isnan(g) || isinf(w) || isinf(g)) {
        same = (isnan(w) && isnan(g)) || g == w;
      } else {
        same = fabs(g - w) <= tol.atol + tol.rtol * fabs(w);
      }
      if (!same && misses++ < 3)
        fprintf(stderr, "  %s[%lld] = %.9g, want %.9g\n", what, (long long)i, g,
                w);
    } else {
      int64_t g = tj_load_i64(d, got, i), w = tj_load_i64(d, want, i);
      same = g == w;
      if (!same && misses++ < 3)
        fprintf(stderr, "  %s[%lld] = %lld, want %lld\n", what, (long long)i,
                (long long)g, (long long)w);
    }
  }
  if (misses > 3) fprintf(stderr, "  %s: %d misses\n", what, misses);
  return misses == 0;
}

//===--- device memory of the test ---===//

static tj_cu_deviceptr_t dev_upload(const void* host, size_t bytes) {
  tj_cu_deviceptr_t p = 0;
  CHECK_OK(tj_cuda_device_alloc(g_dev, bytes ? bytes : 1, &p));
  if (bytes) CHECK_OK(tj_cuda_copy_to_device(g_dev, p, host, bytes));
  CHECK_OK(tj_cuda_device_synchronize(g_dev));
  return p;
}

static void dev_download(void* host, tj_cu_deviceptr_t p, size_t bytes) {
  if (bytes) CHECK_OK(tj_cuda_copy_to_host(g_dev, host, p, bytes));
  CHECK_OK(tj_cuda_device_synchronize(g_dev));
}

static tj_tensor_t on_device(tj_tensor_t t, tj_cu_deviceptr_t p) {
  t.data = (void*)(uintptr_t)p;
  t.device_type = TJ_DEVICE_CUDA;
  t.device_id = g_dev->ordinal;
  return t;
}

//===--- cases ---===//

#define MAX_IO 8

typedef struct case_t {
  const char* name;
  tj_graph_t* g;
  int64_t B;
  double lo[MAX_IO], hi[MAX_IO];
  int num_inputs;
  tol_t tol;
  bool device_io;  // inputs and outputs as CUDA tensors
} case_t;

static tj_value_t input(case_t* c, tj_dtype_t dtype, int32_t rank,
                        const int64_t* dims, double lo, double hi) {
  char name[16];
  snprintf(name, sizeof(name), "in%d", c->num_inputs);
  c->lo[c->num_inputs] = lo;
  c->hi[c->num_inputs] = hi;
  ++c->num_inputs;
  return tj_graph_input(c->g, dtype, rank, dims, name);
}

static void output(case_t* c, tj_value_t v) {
  char name[16];
  snprintf(name, sizeof(name), "out%d", tj_graph_num_outputs(c->g));
  tj_graph_output(c->g, v, name);
}

static tj_compile_options_t cuda_options(void) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.verify_each = true;
  return o;
}

typedef struct report_t {
  int kernels, breaks;
} report_t;

static const int64_t kBatches[] = {0, 1, 7, 257};

static bool run_case(case_t* c, const tj_compile_options_t* opts,
                     report_t* report) {
  tj_status_t s = tj_graph_finalize(c->g);
  if (s) {
    fprintf(stderr, "%s: finalize: %s\n", c->name, tj_status_message(s));
    tj_status_free(s);
    return false;
  }
  tj_executable_t* exe = NULL;
  s = tj_compile(c->g, opts, &exe);
  if (s) {
    fprintf(stderr, "%s: compile: %s\n", c->name, tj_status_message(s));
    tj_status_free(s);
    return false;
  }
  bool ok = true;
  int ni = tj_graph_num_inputs(c->g), no = tj_graph_num_outputs(c->g);
  for (size_t k = 0; k < TJ_ARRAY_SIZE(kBatches) && ok; ++k) {
    int64_t B = kBatches[k];
    tj_tensor_t in[MAX_IO], got[MAX_IO], want[MAX_IO], din[MAX_IO],
        dout[MAX_IO];
    int64_t shapes[2 * MAX_IO][TJ_MAX_RANK];
    void* bufs[3 * MAX_IO] = {0};
    size_t bytes[2 * MAX_IO] = {0};
    tj_cu_deviceptr_t dptr[2 * MAX_IO] = {0};
    for (int i = 0; i < ni; ++i) {
      tj_value_t v = tj_graph_input_value(c->g, i);
      tj_dtype_t d = tj_graph_value_dtype(c->g, v);
      int32_t rank = tj_graph_value_rank(c->g, v);
      tj_graph_value_dims(c->g, v, shapes[i]);
      for (int32_t a = 0; a < rank; ++a) {
        if (shapes[i][a] == c->B) shapes[i][a] = B;
      }
      int64_t n = numel(rank, shapes[i]);
      bytes[i] = (size_t)n * tj_dtype_size(d);
      bufs[i] = malloc(bytes[i] ? bytes[i] : 1);
      fill(d, bufs[i], n, c->lo[i], c->hi[i]);
      in[i] = tj_tensor_make(bufs[i], d, rank, shapes[i]);
      if (c->device_io) {
        dptr[i] = dev_upload(bufs[i], bytes[i]);
        din[i] = on_device(in[i], dptr[i]);
      }
    }
    bool rejected = false;
    for (int o = 0; o < no && ok; ++o) {
      int32_t rank;
      int64_t* shape = shapes[MAX_IO + o];
      s = tj_executable_output_shape(exe, in, ni, o, &rank, shape);
      if (s) {
        tj_status_free(s);
        rejected = true;
        break;
      }
      tj_dtype_t d = tj_graph_value_dtype(c->g, tj_graph_output_value(c->g, o));
      bytes[MAX_IO + o] = (size_t)numel(rank, shape) * tj_dtype_size(d);
      size_t nb = bytes[MAX_IO + o];
      bufs[MAX_IO + o] = malloc(nb ? nb : 1);
      bufs[2 * MAX_IO + o] = malloc(nb ? nb : 1);
      memset(bufs[MAX_IO + o], 0xAB, nb);
      got[o] = tj_tensor_make(bufs[MAX_IO + o], d, rank, shape);
      want[o] = tj_tensor_make(bufs[2 * MAX_IO + o], d, rank, shape);
      if (c->device_io) {
        dptr[MAX_IO + o] = dev_upload(bufs[MAX_IO + o], nb);
        dout[o] = on_device(got[o], dptr[MAX_IO + o]);
      }
    }
    bool both_failed = rejected;
    if (ok && !rejected) {
      tj_status_t s1 = c->device_io ? tj_executable_run(exe, din, ni, dout, no)
                                    : tj_executable_run(exe, in, ni, got, no);
      tj_status_t s2 = tj_reference_run(c->g, in, ni, want, no);
      if (s1 || s2) {
        both_failed = s1 && s2 && tj_status_code(s1) == tj_status_code(s2);
        if (!both_failed) {
          fprintf(stderr, "%s B=%lld: run: %s / reference: %s\n", c->name,
                  (long long)B, s1 ? tj_status_message(s1) : "ok",
                  s2 ? tj_status_message(s2) : "ok");
          ok = false;
        }
      }
      tj_status_free(s1);
      tj_status_free(s2);
    }
    for (int o = 0; o < no && ok && !both_failed; ++o) {
      if (c->device_io)
        dev_download(got[o].data, dptr[MAX_IO + o], bytes[MAX_IO + o]);
      char what[96];
      snprintf(what, sizeof(what), "%s B=%lld out%d", c->name, (long long)B, o);
      ok = compare(what, got[o].dtype, got[o].data, want[o].data,
                   numel(got[o].rank, got[o].shape), c->tol);
    }
    for (int i = 0; i < 2 * MAX_IO; ++i) {
      if (dptr[i]) CHECK_OK(tj_cuda_device_free(g_dev, dptr[i]));
    }
    for (int i = 0; i < 3 * MAX_IO; ++i) free(bufs[i]);
  }
  tj_executable_stats_t st;
  tj_executable_stats(exe, &st);
  if (st.recompiles != 0) {
    fprintf(stderr, "%s: %lld recompiles\n", c->name, (long long)st.recompiles);
    ok = false;
  }
  report->kernels = st.num_kernels;
  report->breaks = st.num_graph_breaks;
  tj_executable_release(exe);
  return ok;
}

static void begin(case_t* c, const char* name) {
  memset(c, 0, sizeof(*c));
  c->name = name;
  CHECK_OK(tj_graph_create(g_ctx, name, &c->g));
  c->B = tj_graph_symbol(c->g, "B");
  c->tol = (tol_t){1e-6, 1e-6};
}

// Runs |c| and destroys its graph; checks the kernel and graph-break
// counts when they are >= 0.
static void finish(case_t* c, int kernels, int breaks) {
  tj_compile_options_t opts = cuda_options();
  report_t r = {0, 0};
  bool ok = run_case(c, &opts, &r);
  ++g_test_checks;
  if (!ok) {
    ++g_test_failures;
    fprintf(stderr, "FAILED case %s\n", c->name);
  }
  if (kernels >= 0 && r.kernels != kernels) {
    ++g_test_failures;
    fprintf(stderr, "case %s: %d kernels, expected %d\n", c->name, r.kernels,
            kernels);
  }
  if (breaks >= 0 && r.breaks != breaks) {
    ++g_test_failures;
    fprintf(stderr, "case %s: %d graph breaks, expected %d\n", c->name,
            r.breaks, breaks);
  }
  tj_graph_destroy(c->g);
  c->g = NULL;
}

//===--- elementwise ---===//

typedef tj_value_t (*unary_fn)(tj_graph_t*, tj_value_t);
typedef tj_value_t (*binary_fn)(tj_graph_t*, tj_value_t, tj_value_t);

static const struct {
  const char* name;
  unary_fn fn;
  double lo, hi;
  double rtol;      // f32; 0: exact
  bool ints;        // also on i32 / i64 / i8
  bool f64_breaks;  // no f64 GPU code: a host step
} kUnary[] = {
    {"neg", tj_graph_neg, -10, 10, 0, true, false},
    {"abs", tj_graph_abs, -10, 10, 0, true, false},
    {"exp", tj_graph_exp, -20, 20, 4e-6, false, false},
    {"log", tj_graph_log, 1e-3, 100, 4e-6, false, false},
    {"sqrt", tj_graph_sqrt, 0, 100, 1e-6, false, false},
    {"rsqrt", tj_graph_rsqrt, 1e-3, 100, 2e-6, false, false},
    {"tanh", tj_graph_tanh, -6, 6, 4e-6, false, true},
    {"sigmoid", tj_graph_sigmoid, -20, 20, 4e-6, false, false},
    {"erf", tj_graph_erf, -4, 4, 4e-6, false, true},
    {"sin", tj_graph_sin, -10, 10, 4e-6, false, true},
    {"cos", tj_graph_cos, -10, 10, 4e-6, false, true},
    {"relu", tj_graph_relu, -10, 10, 0, true, false},
    {"floor", tj_graph_floor, -10, 10, 0, false, false},
    {"round", tj_graph_round, -10, 10, 0, false, false},
    {"sign", tj_graph_sign, -10, 10, 0, true, false},
};

TEST(unary_ops) {
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_F32,  TJ_DTYPE_F64, TJ_DTYPE_F16,
                                      TJ_DTYPE_BF16, TJ_DTYPE_I32, TJ_DTYPE_I8};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kUnary); ++i) {
    for (size_t t = 0; t < TJ_ARRAY_SIZE(kTypes); ++t) {
      tj_dtype_t d = kTypes[t];
      if (!tj_dtype_is_float(d) && !kUnary[i].ints) continue;
      char name[64];
      snprintf(name, sizeof(name), "%s_%s", kUnary[i].name, tj_dtype_name(d));
      case_t c;
      begin(&c, name);
      tj_value_t x =
          input(&c, d, 2, (int64_t[]){c.B, 33}, kUnary[i].lo, kUnary[i].hi);
      output(&c, kUnary[i].fn(c.g, x));
      double rtol = kUnary[i].rtol;
      c.tol = tol_for(d, rtol > 0 ? rtol : 1e-7);
      if (d == TJ_DTYPE_F64 && rtol > 0) c.tol = (tol_t){1e-13, 1e-300};
      if (rtol == 0) c.tol.atol = 0;
      bool brk = d == TJ_DTYPE_F64 && kUnary[i].f64_breaks;
      finish(&c, brk ? 0 : 1, brk ? 1 : 0);
    }
  }
}

static const struct {
  const char* name;
  binary_fn fn;
  double lo, hi;
  bool ints;
} kBinary[] = {
    {"add", tj_graph_add, -10, 10, true},
    {"sub", tj_graph_sub, -10, 10, true},
    {"mul", tj_graph_mul, -10, 10, true},
    {"div", tj_graph_div, -10, 10, true},
    {"pow", tj_graph_pow, 0.5, 3, false},
    {"maximum", tj_graph_maximum, -10, 10, true},
    {"minimum", tj_graph_minimum, -10, 10, true},
    {"eq", tj_graph_eq, -3, 3, true},
    {"lt", tj_graph_lt, -3, 3, true},
    {"ge", tj_graph_ge, -3, 3, true},
};

TEST(binary_ops_broadcast) {
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_F32, TJ_DTYPE_F64,
                                      TJ_DTYPE_F16, TJ_DTYPE_BF16,
                                      TJ_DTYPE_I32, TJ_DTYPE_I64};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kBinary); ++i) {
    for (size_t t = 0; t < TJ_ARRAY_SIZE(kTypes); ++t) {
      tj_dtype_t d = kTypes[t];
      if (!tj_dtype_is_float(d) && !kBinary[i].ints) continue;
      char name[64];
      snprintf(name, sizeof(name), "%s_%s", kBinary[i].name, tj_dtype_name(d));
      case_t c;
      begin(&c, name);
      double lo = kBinary[i].lo, hi = kBinary[i].hi;
      tj_value_t x = input(&c, d, 3, (int64_t[]){c.B, 7, 33}, lo, hi);
      tj_value_t y = input(&c, d, 1, (int64_t[]){33}, lo, hi);
      tj_value_t z = input(&c, d, 3, (int64_t[]){c.B, 1, 33}, lo, hi);
      tj_value_t w = input(&c, d, 2, (int64_t[]){7, 1}, lo, hi);
      output(&c, kBinary[i].fn(c.g, x, y));
      output(&c, kBinary[i].fn(c.g, z, w));
      bool is_pow = kBinary[i].fn == tj_graph_pow;
      c.tol = tol_for(d, d == TJ_DTYPE_F32 && is_pow ? 4e-6 : 1e-7);
      if (is_pow && d == TJ_DTYPE_F64) c.tol.rtol = 1e-13;
      // f64 pow has no GPU code: its group runs on the host.
      finish(&c, -1, is_pow && d == TJ_DTYPE_F64 ? -1 : 0);
    }
  }
}

TEST(where_and_casts) {
  case_t c;
  begin(&c, "where");
  tj_value_t p = input(&c, TJ_DTYPE_BOOL, 2, (int64_t[]){c.B, 9}, 0, 1);
  tj_value_t a = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 9}, -5, 5);
  tj_value_t b = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){9}, -5, 5);
  output(&c, tj_graph_where(c.g, p, a, b));
  output(&c, tj_graph_logical_not(c.g, tj_graph_isnan(c.g, a)));
  finish(&c, 1, 0);
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_F32, TJ_DTYPE_F16, TJ_DTYPE_BF16,
                                      TJ_DTYPE_F64, TJ_DTYPE_I8,  TJ_DTYPE_I64,
                                      TJ_DTYPE_BOOL};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kTypes); ++i) {
    for (size_t j = 0; j < TJ_ARRAY_SIZE(kTypes); ++j) {
      tj_dtype_t from = kTypes[i], to = kTypes[j];
      if (from == to) continue;
      char name[64];
      snprintf(name, sizeof(name), "cast_%s_%s", tj_dtype_name(from),
               tj_dtype_name(to));
      begin(&c, name);
      tj_value_t x = input(&c, from, 2, (int64_t[]){c.B, 7}, -100, 100);
      output(&c, tj_graph_cast(c.g, x, to));
      c.tol = tol_for(to, 1e-7);
      finish(&c, 1, 0);
    }
  }
}

//===--- reductions and composites ---===//

typedef tj_value_t (*reduce_fn)(tj_graph_t*, tj_value_t, int32_t,
                                const int32_t*, bool);

TEST(reductions) {
  static const struct {
    const char* name;
    reduce_fn fn;
    double lo, hi;
  } kOps[] = {
      {"sum", tj_graph_sum, -1, 1},      {"mean", tj_graph_mean, -1, 1},
      {"max", tj_graph_max, -9, 9},      {"min", tj_graph_min, -9, 9},
      {"prod", tj_graph_prod, 0.9, 1.1},
  };
  static const struct {
    const char* name;
    int32_t num_axes;
    int32_t axes[3];
  } kAxes[] = {
      {"last", 1, {-1}}, {"first", 1, {0}},     {"mid", 1, {1}},
      {"all", 0, {0}},   {"outer2", 2, {0, 2}},
  };
  for (size_t o = 0; o < TJ_ARRAY_SIZE(kOps); ++o) {
    for (size_t a = 0; a < TJ_ARRAY_SIZE(kAxes); ++a) {
      char name[64];
      snprintf(name, sizeof(name), "%s_%s", kOps[o].name, kAxes[a].name);
      case_t c;
      begin(&c, name);
      tj_value_t x = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 7, 33},
                           kOps[o].lo, kOps[o].hi);
      output(&c,
             kOps[o].fn(c.g, x, kAxes[a].num_axes, kAxes[a].axes, a % 2 == 0));
      c.tol = (tol_t){2e-5, 2e-5};
      finish(&c, -1, strcmp(kAxes[a].name, "outer2") == 0 ? 1 : 0);
    }
  }
  case_t c;
  begin(&c, "sum_i32_max_i64_f64");
  tj_value_t xi = input(&c, TJ_DTYPE_I32, 2, (int64_t[]){c.B, 257}, -50, 50);
  output(&c, tj_graph_sum(c.g, xi, 1, (int32_t[]){1}, false));
  tj_value_t xl = input(&c, TJ_DTYPE_I64, 2, (int64_t[]){c.B, 7}, -50, 50);
  output(&c, tj_graph_max(c.g, xl, 1, (int32_t[]){0}, true));
  tj_value_t xd = input(&c, TJ_DTYPE_F64, 2, (int64_t[]){c.B, 33}, -1, 1);
  output(&c, tj_graph_sum(c.g, xd, 1, (int32_t[]){1}, false));
  c.tol = (tol_t){1e-12, 1e-12};
  finish(&c, -1, 0);
  begin(&c, "argmax");
  tj_value_t xa = input(&c, TJ_DTYPE_I32, 3, (int64_t[]){c.B, 7, 33}, 0, 4);
  output(&c, tj_graph_argmax(c.g, xa, -1, false));
  output(&c, tj_graph_argmax(c.g, xa, 0, true));  // B = 0: an error in both
  finish(&c, 2, 0);
}

TEST(softmax_layer_norm) {
  case_t c;
  begin(&c, "softmax");
  tj_value_t x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 1000}, -8, 8);
  output(&c, tj_graph_softmax(c.g, x, -1));
  c.tol = (tol_t){2e-5, 1e-7};
  finish(&c, 1, 0);

  begin(&c, "log_softmax_axis0");
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 33}, -8, 8);
  output(&c, tj_graph_log_softmax(c.g, x, 0));
  c.tol = (tol_t){2e-5, 2e-5};
  finish(&c, -1, 0);

  begin(&c, "layer_norm");
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 1023}, -3, 3);
  tj_value_t gamma = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){1023}, 0.5, 2);
  tj_value_t beta = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){1023}, -1, 1);
  output(&c, tj_graph_layer_norm(c.g, x, gamma, beta, 1e-5));
  c.tol = (tol_t){5e-5, 5e-5};
  finish(&c, 1, 0);

  begin(&c, "layer_norm_bf16");
  x = input(&c, TJ_DTYPE_BF16, 2, (int64_t[]){c.B, 4096}, -3, 3);
  output(&c,
         tj_graph_layer_norm(c.g, x, (tj_value_t){0}, (tj_value_t){0}, 1e-5));
  c.tol = tol_for(TJ_DTYPE_BF16, 0);
  finish(&c, -1, 0);

  begin(&c, "rms_norm_silu");
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 64}, -3, 3);
  gamma = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){64}, 0.5, 2);
  output(&c, tj_graph_silu(c.g, tj_graph_rms_norm(c.g, x, gamma, 1e-6)));
  c.tol = (tol_t){2e-5, 2e-5};
  finish(&c, -1, 0);

  begin(&c, "gelu_erf_tanh_f16");
  x = input(&c, TJ_DTYPE_F16, 2, (int64_t[]){c.B, 33}, -4, 4);
  output(&c, tj_graph_gelu(c.g, x, false));
  output(&c, tj_graph_gelu(c.g, x, true));
  c.tol = (tol_t){4e-3, 2e-3};
  finish(&c, 1, 0);
}

//===--- matmul ---===//

static void half_matmul_cases(void);

TEST(matmuls) {
  case_t c;
  begin(&c, "matmul_f32_bias_relu");
  tj_value_t x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 33}, -1, 1);
  tj_value_t w = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){33, 17}, -1, 1);
  tj_value_t b = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){17}, -1, 1);
  output(&c, tj_graph_relu(c.g, tj_graph_linear(c.g, x, w, b)));
  c.tol = (tol_t){1e-5, 1e-5};
  finish(&c, 1, 0);

  begin(&c, "matmul_f32_batched_transposed");
  x = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 7, 33}, -1, 1);
  w = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){65, 33}, -1, 1);
  tj_value_t r = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 7, 65}, -1, 1);
  tj_value_t wt = tj_graph_transpose(c.g, w, (int32_t[]){1, 0});
  output(&c, tj_graph_add(c.g, tj_graph_matmul(c.g, x, wt), r));
  c.tol = (tol_t){1e-5, 1e-5};
  finish(&c, 1, 0);

  begin(&c, "matmul_f32_vectors");
  tj_value_t v = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){33}, -1, 1);
  tj_value_t m = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 33}, -1, 1);
  output(&c, tj_graph_matmul(c.g, m, v));
  output(&c, tj_graph_matmul(c.g, v, v));
  c.tol = (tol_t){1e-5, 1e-5};
  finish(&c, 2, 0);

  half_matmul_cases();
  // K = 33: rows of 66 bytes break the tensor cores' 16-byte copies; the
  // matmul runs on the host.
  begin(&c, "matmul_bf16_misaligned_host");
  x = input(&c, TJ_DTYPE_BF16, 2, (int64_t[]){c.B, 33}, -1, 1);
  w = input(&c, TJ_DTYPE_BF16, 2, (int64_t[]){33, 16}, -1, 1);
  output(&c, tj_graph_exp(c.g, tj_graph_matmul(c.g, x, w)));
  c.tol = tol_for(TJ_DTYPE_BF16, 0);
  finish(&c, -1, 1);

  begin(&c, "matmul_f64_host");
  x = input(&c, TJ_DTYPE_F64, 2, (int64_t[]){c.B, 5}, -1, 1);
  w = input(&c, TJ_DTYPE_F64, 2, (int64_t[]){5, 3}, -1, 1);
  output(&c, tj_graph_exp(c.g, tj_graph_matmul(c.g, x, w)));
  c.tol = (tol_t){1e-13, 1e-13};
  finish(&c, -1, 1);
}

// Tensor cores: bf16 and f16 operands, K a multiple of 8.
static void half_matmul_cases(void) {
  case_t c;
  tj_value_t x, w, b, r;
  static const tj_dtype_t kHalf[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kHalf); ++i) {
    tj_dtype_t d = kHalf[i];
    char name[64];
    snprintf(name, sizeof(name), "matmul_%s_bias_gelu", tj_dtype_name(d));
    begin(&c, name);
    x = input(&c, d, 2, (int64_t[]){c.B, 200}, -1, 1);
    w = input(&c, d, 2, (int64_t[]){200, 136}, -0.2, 0.2);
    b = input(&c, d, 1, (int64_t[]){136}, -1, 1);
    output(&c, tj_graph_gelu(c.g, tj_graph_linear(c.g, x, w, b), true));
    // The reference rounds 1 + tanh(..) to the dtype: as for gelu alone.
    c.tol = d == TJ_DTYPE_F16 ? (tol_t){4e-3, 2e-3} : tol_for(d, 0);
    finish(&c, 1, 0);

    snprintf(name, sizeof(name), "matmul_%s_batched_residual",
             tj_dtype_name(d));
    begin(&c, name);
    x = input(&c, d, 3, (int64_t[]){2, c.B, 64}, -1, 1);
    w = input(&c, d, 2, (int64_t[]){64, 72}, -0.5, 0.5);
    r = input(&c, d, 3, (int64_t[]){2, c.B, 72}, -1, 1);
    output(&c, tj_graph_add(c.g, tj_graph_matmul(c.g, x, w), r));
    c.tol = tol_for(d, 0);
    finish(&c, 1, 0);
  }
}

// Every GEMM candidate of the autotuner, forced: the other tile schedules
// and cuBLASLt + the epilogue as a pointwise kernel (the batched case
// falls back to the generated kernel: cuBLASLt takes rank-2 GEMMs here).
TEST(gemm_candidates) {
  static const char* const kForced[] = {"1", "2", "3", "4"};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kForced); ++i) {
    setenv("TJ_CUDA_GEMM_CANDIDATE", kForced[i], 1);
    int before = g_test_failures;
    half_matmul_cases();
    if (g_test_failures != before) {
      fprintf(stderr, "  (with TJ_CUDA_GEMM_CANDIDATE=%s)\n", kForced[i]);
    }
  }
  unsetenv("TJ_CUDA_GEMM_CANDIDATE");
}

//===--- movement, leaves, device tensors ---===//

static void movement_cases(bool device_io) {
  case_t c;
  begin(&c, device_io ? "dev_transpose_slice" : "transpose_slice");
  c.device_io = device_io;
  tj_value_t x = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 7, 33}, -1, 1);
  tj_value_t t = tj_graph_transpose(c.g, x, (int32_t[]){2, 0, 1});
  tj_value_t s =
      tj_graph_slice(c.g, t, (int64_t[]){1, 0, 1},
                     (int64_t[]){30, INT64_MAX, 7}, (int64_t[]){3, 1, 2});
  tj_value_t y = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){3}, -1, 1);
  output(&c, tj_graph_mul(c.g, tj_graph_exp(c.g, s), y));
  output(&c, tj_graph_broadcast_to(c.g, y, 3, (int64_t[]){2, c.B, 3}));
  c.tol = (tol_t){4e-6, 1e-7};
  finish(&c, -1, 0);

  begin(&c, device_io ? "dev_reshape_concat_pad" : "reshape_concat_pad");
  c.device_io = device_io;
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 12}, -1, 1);
  tj_value_t r =
      tj_graph_reshape(c.g, tj_graph_neg(c.g, x), 3, (int64_t[]){c.B, 3, 4});
  tj_value_t q = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){3, 4}, -1, 1);
  output(&c, tj_graph_add(c.g, r, q));
  tj_value_t a = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 5}, -1, 1);
  tj_value_t b = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 3}, -1, 1);
  tj_value_t cat = tj_graph_concat(c.g, 2, (tj_value_t[]){a, b}, 1);
  output(&c, tj_graph_exp(c.g, cat));
  output(&c, tj_graph_pad(c.g, tj_graph_neg(c.g, a), (int64_t[]){0, 2},
                          (int64_t[]){0, 1}, 7.0));
  c.tol = (tol_t){4e-6, 1e-7};
  finish(&c, -1, 0);

  // gather has no kernel: a graph break between GPU kernels.
  begin(&c, device_io ? "dev_gather_host" : "gather_host");
  c.device_io = device_io;
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){9, 5}, -1, 1);
  tj_value_t idx = input(&c, TJ_DTYPE_I64, 1, (int64_t[]){c.B}, 0, 9);
  output(&c,
         tj_graph_exp(c.g, tj_graph_gather(c.g, tj_graph_neg(c.g, x), idx, 0)));
  c.tol = (tol_t){4e-6, 1e-7};
  finish(&c, -1, 1);

  begin(&c, device_io ? "dev_leaves_aliases" : "leaves_aliases");
  c.device_io = device_io;
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 5}, -1, 1);
  static const float kData[5] = {1, -2, 3.5f, 0.25f, 8};
  tj_value_t k = tj_graph_constant(c.g, TJ_DTYPE_F32, 1, (int64_t[]){5}, kData);
  tj_value_t io = tj_graph_iota(c.g, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 5}, 0);
  y = tj_graph_add(c.g, tj_graph_mul(c.g, x, k), io);
  output(&c, x);
  output(&c, y);
  output(&c, y);
  output(&c, tj_graph_reshape(c.g, y, 2, (int64_t[]){5, c.B}));
  output(&c, tj_graph_iota(c.g, TJ_DTYPE_I32, 2, (int64_t[]){3, c.B}, 1));
  c.tol = (tol_t){1e-6, 1e-7};
  finish(&c, -1, 0);
}

TEST(movement) { movement_cases(false); }
TEST(device_tensors) { movement_cases(true); }

//===--- the GPU's approximate math ---===//

// Max error in ulps of f32 |got| against the exact |want|, over values
// whose result is a normal float (subnormal results flush to 0).
static double ulp_error(float got, double want) {
  if (want == 0 || fabs(want) < 0x1p-126 || isinf(want)) return 0;
  if (isnan(got)) return INFINITY;
  int e;
  frexp(want, &e);
  return fabs((double)got - want) / ldexp(1.0, e - 24);
}

static double sigmoid_d(double x) { return 1 / (1 + exp(-x)); }

TEST(math_accuracy) {
  static const struct {
    const char* name;
    unary_fn fn;
    double (*exact)(double);
    float lo, hi;
    double approx_bound;  // ulp, with the GPU's approximate math
  } kOps[] = {
      {"exp", tj_graph_exp, exp, -87.0f, 88.5f, 3},
      {"tanh", tj_graph_tanh, tanh, -9.0f, 9.0f, 3},
      {"sigmoid", tj_graph_sigmoid, sigmoid_d, -80.0f, 30.0f, 5},
      {"erf", tj_graph_erf, erf, -5.0f, 5.0f, 3},
  };
  const int64_t n = 1 << 21;
  float* xs = malloc(sizeof(float) * (size_t)n);
  float* ys = malloc(sizeof(float) * (size_t)n);
  printf("# f32 math on the GPU, max ulp over %lld points: approx / precise\n",
         (long long)n);
  for (size_t o = 0; o < TJ_ARRAY_SIZE(kOps); ++o) {
    for (int64_t i = 0; i < n; ++i) {
      xs[i] = kOps[o].lo + (kOps[o].hi - kOps[o].lo) * (float)i / (float)n;
    }
    double worst[2] = {0, 0};
    for (int precise = 0; precise < 2; ++precise) {
      tj_graph_t* g;
      CHECK_OK(tj_graph_create(g_ctx, kOps[o].name, &g));
      tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){n}, "x");
      tj_graph_output(g, kOps[o].fn(g, x), "y");
      CHECK_OK(tj_graph_finalize(g));
      tj_compile_options_t opts = cuda_options();
      opts.cuda_precise_math = precise != 0;
      tj_executable_t* exe = NULL;
      CHECK_OK(tj_compile(g, &opts, &exe));
      if (exe) {
        tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 1, (int64_t[]){n});
        tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 1, (int64_t[]){n});
        CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
        for (int64_t i = 0; i < n; ++i) {
          double e = ulp_error(ys[i], kOps[o].exact((double)xs[i]));
          if (e > worst[precise]) worst[precise] = e;
        }
        tj_executable_release(exe);
      }
      tj_graph_destroy(g);
    }
    printf("#   %-8s %6.2f / %6.2f ulp\n", kOps[o].name, worst[0], worst[1]);
    CHECK(worst[0] <= kOps[o].approx_bound);
    CHECK(worst[1] <= 2.5);
  }
  free(xs);
  free(ys);
}

//===--- the capstone ---===//

// y = gelu(x @ w + b), x: [B, 1024], w: [1024, 4096], b: [4096], exact
// (erf) gelu; ONE executable for B = 1, 7, 2048: no recompile, one kernel.
// Rows are independent: B = 2048 is checked on its first and last 16 rows
// against the reference run on those rows.
static void capstone(tj_dtype_t dt, bool device_io) {
  const int64_t K = 1024, N = 4096;
  tj_graph_t* g;
  tj_graph_t* gf;  // the same block in f32: the exact math of the inputs
  CHECK_OK(tj_graph_create(g_ctx, "capstone", &g));
  CHECK_OK(tj_graph_create(g_ctx, "capstone_f32", &gf));
  tj_graph_t* gs[2] = {g, gf};
  for (int i = 0; i < 2; ++i) {
    tj_dtype_t d = i == 0 ? dt : TJ_DTYPE_F32;
    int64_t B = tj_graph_symbol(gs[i], "B");
    tj_value_t x = tj_graph_input(gs[i], d, 2, (int64_t[]){B, K}, "x");
    tj_value_t w = tj_graph_input(gs[i], d, 2, (int64_t[]){K, N}, "w");
    tj_value_t b = tj_graph_input(gs[i], d, 1, (int64_t[]){N}, "b");
    tj_value_t mm = tj_graph_matmul(gs[i], x, w);
    tj_graph_output(
        gs[i], tj_graph_gelu(gs[i], tj_graph_add(gs[i], mm, b), false), "y");
    // The f32 graph also returns x @ w, to bound the bf16 rounding of it.
    if (i == 1) tj_graph_output(gs[i], mm, "mm");
    CHECK_OK(tj_graph_finalize(gs[i]));
  }
  tj_compile_options_t opts = cuda_options();
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  size_t es = tj_dtype_size(dt);
  void* ws = malloc((size_t)(K * N) * es);
  void* bs = malloc((size_t)N * es);
  fill(dt, ws, K * N, -0.05, 0.05);
  fill(dt, bs, N, -1, 1);
  float* wf = malloc(sizeof(float) * (size_t)(K * N));
  float* bf = malloc(sizeof(float) * (size_t)N);
  for (int64_t i = 0; i < K * N; ++i) wf[i] = (float)tj_load_f64(dt, ws, i);
  for (int64_t i = 0; i < N; ++i) bf[i] = (float)tj_load_f64(dt, bs, i);
  tj_cu_deviceptr_t dw = 0, db = 0;
  if (device_io) {
    dw = dev_upload(ws, (size_t)(K * N) * es);
    db = dev_upload(bs, (size_t)N * es);
  }
  static const int64_t kB[] = {1, 7, 2048};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kB) && exe; ++i) {
    int64_t bv = kB[i];
    void* xs = malloc((size_t)(bv * K) * es);
    void* ys = malloc((size_t)(bv * N) * es);
    fill(dt, xs, bv * K, -1, 1);
    int64_t xshape[2] = {bv, K}, yshape[2] = {bv, N};
    int64_t wshape[2] = {K, N}, bshape[1] = {N};
    tj_tensor_t in[3] = {tj_tensor_make(xs, dt, 2, xshape),
                         tj_tensor_make(ws, dt, 2, wshape),
                         tj_tensor_make(bs, dt, 1, bshape)};
    tj_tensor_t out = tj_tensor_make(ys, dt, 2, yshape);
    if (device_io) {
      tj_cu_deviceptr_t dx = dev_upload(xs, (size_t)(bv * K) * es);
      tj_cu_deviceptr_t dy = dev_upload(ys, (size_t)(bv * N) * es);
      tj_tensor_t din[3] = {on_device(in[0], dx), on_device(in[1], dw),
                            on_device(in[2], db)};
      tj_tensor_t dout = on_device(out, dy);
      CHECK_OK(tj_executable_run(exe, din, 3, &dout, 1));
      dev_download(ys, dy, (size_t)(bv * N) * es);
      CHECK_OK(tj_cuda_device_free(g_dev, dx));
      CHECK_OK(tj_cuda_device_free(g_dev, dy));
    } else {
      CHECK_OK(tj_executable_run(exe, in, 3, &out, 1));
    }
    int64_t rows = bv < 16 ? bv : 16;
    for (int part = 0; part < (bv > 16 ? 2 : 1); ++part) {
      int64_t row0 = part ? bv - rows : 0;
      int64_t sub_x[2] = {rows, K}, sub_y[2] = {rows, N};
      // The reference of the graph itself (it rounds after every op).
      void* want = malloc((size_t)(rows * N) * es);
      tj_tensor_t rin[3] = {
          tj_tensor_make((char*)xs + (size_t)(row0 * K) * es, dt, 2, sub_x),
          in[1], in[2]};
      tj_tensor_t rout = tj_tensor_make(want, dt, 2, sub_y);
      CHECK_OK(tj_reference_run(g, rin, 3, &rout, 1));
      char what[96];
      snprintf(what, sizeof(what), "capstone %s B=%lld rows@%lld",
               tj_dtype_name(dt), (long long)bv, (long long)row0);
      const void* mine = (char*)ys + (size_t)(row0 * N) * es;
      tol_t tol = dt == TJ_DTYPE_F32 ? (tol_t){2e-5, 2e-5} : tol_for(dt, 0);
      CHECK(compare(what, dt, mine, want, rows * N, tol));
      if (dt != TJ_DTYPE_F32) {
        // The exact math of these inputs, with torch's bf16 rtol.
        float* xf = malloc(sizeof(float) * (size_t)(rows * K));
        float* exact = malloc(sizeof(float) * (size_t)(rows * N));
        float* mmf = malloc(sizeof(float) * (size_t)(rows * N));
        float* minef = malloc(sizeof(float) * (size_t)(rows * N));
        for (int64_t j = 0; j < rows * K; ++j)
          xf[j] = (float)tj_load_f64(dt, xs, row0 * K + j);
        for (int64_t j = 0; j < rows * N; ++j)
          minef[j] = (float)tj_load_f64(dt, mine, j);
        tj_tensor_t fin[3] = {tj_tensor_make(xf, TJ_DTYPE_F32, 2, sub_x),
                              tj_tensor_make(wf, TJ_DTYPE_F32, 2, wshape),
                              tj_tensor_make(bf, TJ_DTYPE_F32, 1, bshape)};
        tj_tensor_t fout[2] = {tj_tensor_make(exact, TJ_DTYPE_F32, 2, sub_y),
                               tj_tensor_make(mmf, TJ_DTYPE_F32, 2, sub_y)};
        CHECK_OK(tj_reference_run(gf, fin, 3, fout, 2));
        // torch's bf16 rtol, plus what rounding x @ w to the dtype before
        // the bias (the graph's semantics, as eager PyTorch) can move the
        // result: |gelu'| <= 1.13 times one ulp of |x @ w|.
        double ulp = dt == TJ_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
        int64_t misses = 0;
        for (int64_t j = 0; j < rows * N; ++j) {
          double bound =
              1.6e-2 * fabs(exact[j]) + 1.13 * ulp * fabs(mmf[j]) + 1e-5;
          if (!(fabs(minef[j] - exact[j]) <= bound) && misses++ < 3) {
            fprintf(stderr,
                    "  capstone %s B=%lld [%lld]: %.6g, exact %.6g "
                    "(x@w %.4g)\n",
                    tj_dtype_name(dt), (long long)bv, (long long)(row0 * N + j),
                    minef[j], exact[j], mmf[j]);
          }
        }
        CHECK_EQ_INT(0, misses);
        free(xf);
        free(exact);
        free(mmf);
        free(minef);
      }
      free(want);
    }
    free(xs);
    free(ys);
  }
  if (exe) {
    tj_executable_stats_t st;
    tj_executable_stats(exe, &st);
    CHECK_EQ_INT(0, st.recompiles);
    CHECK_EQ_INT(1, st.num_kernels);
    CHECK_EQ_INT(0, st.num_graph_breaks);
    CHECK_EQ_INT(3, st.runs);
    tj_cuda_program_stats_t cs;
    CHECK_OK(tj_executable_cuda_stats(exe, &cs));
    printf(
        "# capstone %s (%s I/O): compile %.1f ms (PTX %zu bytes from %s, "
        "load %.1f ms), %lld graph captures, %lld graph launches; %lld "
        "buckets tuned in %.0f ms, last GEMM: %s\n",
        tj_dtype_name(dt), device_io ? "device" : "host", st.compile_ms,
        cs.ptx_bytes, cs.ptx_source, cs.load_ms, (long long)cs.graph_captures,
        (long long)cs.graph_launches, (long long)cs.tunings, cs.tuning_ms,
        cs.gemm_choice);
    // Three shapes: each run replays a captured graph, except a run that
    // made a cuBLASLt plan (launched directly; captured the next time).
    CHECK(cs.graph_captures <= 3);
    CHECK_EQ_INT(3, cs.graph_launches + cs.kernel_launches);
    tj_executable_release(exe);
  }
  if (dw) CHECK_OK(tj_cuda_device_free(g_dev, dw));
  if (db) CHECK_OK(tj_cuda_device_free(g_dev, db));
  free(ws);
  free(bs);
  free(wf);
  free(bf);
  tj_graph_destroy(g);
  tj_graph_destroy(gf);
}

TEST(capstone_bf16) { capstone(TJ_DTYPE_BF16, true); }
TEST(capstone_f32) { capstone(TJ_DTYPE_F32, false); }

//===--- CUDA graphs, the allocator ---===//

// A small MLP block: two GEMMs and a softmax, three kernels.
static tj_graph_t* block_graph(void) {
  tj_graph_t* g;
  CHECK_OK(tj_graph_create(g_ctx, "block", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){B, 256}, "x");
  tj_value_t w1 =
      tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){256, 512}, "w1");
  tj_value_t w2 =
      tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){512, 128}, "w2");
  tj_value_t h = tj_graph_gelu(g, tj_graph_matmul(g, x, w1), true);
  tj_value_t y = tj_graph_softmax(g, tj_graph_matmul(g, h, w2), -1);
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

TEST(graphs_equal_plain_launches) {
  tj_graph_t* g = block_graph();
  tj_executable_t* exe[2] = {NULL, NULL};
  for (int i = 0; i < 2; ++i) {
    tj_compile_options_t o = cuda_options();
    o.cuda_disable_graphs = i == 1;
    // The same kernels in both (the autotuner could pick differently).
    o.cuda_disable_autotune = true;
    CHECK_OK(tj_compile(g, &o, &exe[i]));
  }
  if (!exe[0] || !exe[1]) return;
  static const int64_t kB[] = {64, 3, 64, 64, 3};
  uint16_t* w1 = malloc(2 * 256 * 512);
  uint16_t* w2 = malloc(2 * 512 * 128);
  fill(TJ_DTYPE_BF16, w1, 256 * 512, -0.1, 0.1);
  fill(TJ_DTYPE_BF16, w2, 512 * 128, -0.1, 0.1);
  for (size_t r = 0; r < TJ_ARRAY_SIZE(kB); ++r) {
    int64_t B = kB[r];
    uint16_t* x = malloc((size_t)(2 * B * 256));
    uint16_t* y[2] = {malloc((size_t)(2 * B * 128)),
                      malloc((size_t)(2 * B * 128))};
    fill(TJ_DTYPE_BF16, x, B * 256, -1, 1);
    tj_tensor_t in[3] = {
        tj_tensor_make(x, TJ_DTYPE_BF16, 2, (int64_t[]){B, 256}),
        tj_tensor_make(w1, TJ_DTYPE_BF16, 2, (int64_t[]){256, 512}),
        tj_tensor_make(w2, TJ_DTYPE_BF16, 2, (int64_t[]){512, 128})};
    for (int i = 0; i < 2; ++i) {
      tj_tensor_t out =
          tj_tensor_make(y[i], TJ_DTYPE_BF16, 2, (int64_t[]){B, 128});
      CHECK_OK(tj_executable_run(exe[i], in, 3, &out, 1));
    }
    // The same kernels, launched or replayed: bitwise the same.
    CHECK(memcmp(y[0], y[1], (size_t)(2 * B * 128)) == 0);
    free(x);
    free(y[0]);
    free(y[1]);
  }
  tj_cuda_program_stats_t st[2];
  CHECK_OK(tj_executable_cuda_stats(exe[0], &st[0]));
  CHECK_OK(tj_executable_cuda_stats(exe[1], &st[1]));
  tj_executable_stats_t es;
  tj_executable_stats(exe[0], &es);
  printf(
      "# block: %d kernels; graphs: %lld captures, %lld replays, %lld "
      "launches; plain: %lld launches\n",
      es.num_kernels, (long long)st[0].graph_captures,
      (long long)st[0].graph_launches, (long long)st[0].kernel_launches,
      (long long)st[1].kernel_launches);
  CHECK(es.num_kernels >= 2);
  // Two shapes; the staging arena is the same for every run of a shape.
  CHECK_EQ_INT(2, st[0].graph_captures);
  CHECK_EQ_INT(5, st[0].graph_launches);
  CHECK_EQ_INT(0, st[0].kernel_launches);
  CHECK_EQ_INT(0, st[1].graph_launches);
  CHECK_EQ_INT(5 * es.num_kernels, st[1].kernel_launches);
  tj_executable_release(exe[0]);
  tj_executable_release(exe[1]);
  free(w1);
  free(w2);
  tj_graph_destroy(g);
}

TEST(allocator_reuse) {
  tj_graph_t* g = block_graph();
  tj_compile_options_t o = cuda_options();
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  if (!exe) return;
  uint16_t* w1 = calloc(256 * 512, 2);
  uint16_t* w2 = calloc(512 * 128, 2);
  uint16_t* x = calloc(512 * 256, 2);
  uint16_t* y = calloc(512 * 128, 2);
  tj_cuda_program_stats_t before, after;
  static const int64_t kB[] = {512, 8, 512, 100, 512};
  for (size_t r = 0; r < TJ_ARRAY_SIZE(kB); ++r) {
    int64_t B = kB[r];
    tj_tensor_t in[3] = {
        tj_tensor_make(x, TJ_DTYPE_BF16, 2, (int64_t[]){B, 256}),
        tj_tensor_make(w1, TJ_DTYPE_BF16, 2, (int64_t[]){256, 512}),
        tj_tensor_make(w2, TJ_DTYPE_BF16, 2, (int64_t[]){512, 128})};
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_BF16, 2, (int64_t[]){B, 128});
    CHECK_OK(tj_executable_run(exe, in, 3, &out, 1));
    if (r == 0) CHECK_OK(tj_executable_cuda_stats(exe, &before));
  }
  CHECK_OK(tj_executable_cuda_stats(exe, &after));
  printf(
      "# allocator: %lld driver allocs, %lld cache hits; arena %lld bytes, "
      "%lld growths over %lld runs\n",
      (long long)after.allocator.num_driver_allocs,
      (long long)after.allocator.num_cache_hits, (long long)after.arena_bytes,
      (long long)after.arena_growths, (long long)after.runs);
  // The largest shape came first: no later run allocated device memory.
  CHECK_EQ_INT(1, after.arena_growths);
  CHECK_EQ_INT(before.allocator.num_driver_allocs,
               after.allocator.num_driver_allocs);
  CHECK_EQ_INT(before.allocator.num_allocs, after.allocator.num_allocs);
  tj_executable_release(exe);
  // A second executable of the context reuses the freed arena block.
  CHECK_OK(tj_compile(g, &o, &exe));
  if (exe) {
    tj_tensor_t in[3] = {
        tj_tensor_make(x, TJ_DTYPE_BF16, 2, (int64_t[]){512, 256}),
        tj_tensor_make(w1, TJ_DTYPE_BF16, 2, (int64_t[]){256, 512}),
        tj_tensor_make(w2, TJ_DTYPE_BF16, 2, (int64_t[]){512, 128})};
    tj_tensor_t out =
        tj_tensor_make(y, TJ_DTYPE_BF16, 2, (int64_t[]){512, 128});
    CHECK_OK(tj_executable_run(exe, in, 3, &out, 1));
    tj_cuda_program_stats_t again;
    CHECK_OK(tj_executable_cuda_stats(exe, &again));
    CHECK(again.allocator.num_cache_hits > after.allocator.num_cache_hits);
    tj_executable_release(exe);
  }
  free(w1);
  free(w2);
  free(x);
  free(y);
  tj_graph_destroy(g);
}

TEST(errors) {
  case_t c;
  begin(&c, "errors");
  tj_value_t x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 8}, -1, 1);
  output(&c, tj_graph_exp(c.g, x));
  CHECK_OK(tj_graph_finalize(c.g));
  tj_compile_options_t o = cuda_options();
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(c.g, &o, &exe));
  if (exe) {
    float host[32] = {0};
    tj_cu_deviceptr_t d = dev_upload(host, sizeof(host));
    int64_t shape[2] = {4, 8}, strides[2] = {1, 4};
    tj_tensor_t in = on_device(tj_tensor_make(host, TJ_DTYPE_F32, 2, shape), d);
    tj_tensor_t out = tj_tensor_make(host, TJ_DTYPE_F32, 2, shape);
    tj_tensor_t bad = in;
    bad.device_id = 7;
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "device 7",
                 tj_executable_run(exe, &bad, 1, &out, 1));
    bad = in;
    bad.strides = strides;
    CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "strided CUDA tensor",
                 tj_executable_run(exe, &bad, 1, &out, 1));
    // A device input with a CPU output: exp(0) lands in |host|.
    CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
    CHECK(host[0] == 1.0f);
    CHECK_OK(tj_cuda_device_free(g_dev, d));
    tj_executable_release(exe);
  }
  o.cuda_device = 99;
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "drives CUDA device",
               tj_compile(c.g, &o, &exe));
  tj_graph_destroy(c.g);
}

int main(void) {
  // Counts of compiled kernels must not depend on earlier runs.
  setenv("TJ_CACHE_DIR", "", 1);
  CHECK_OK(tj_context_create(NULL, &g_ctx));
  // Skips (exit 77) without a driver or GPU; tj_compile must then say
  // UNSUPPORTED too.
  tj_graph_t* g;
  CHECK_OK(tj_graph_create(g_ctx, "probe", &g));
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, "x");
  tj_graph_output(g, tj_graph_exp(g, x), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t o = cuda_options();
  tj_executable_t* exe = NULL;
  tj_status_t s = tj_compile(g, &o, &exe);
  if (tj_status_code(s) == TJ_STATUS_UNSUPPORTED) {
    printf("# skipped: tj_compile(TJ_TARGET_CUDA): %s\n", tj_status_message(s));
    tj_status_free(s);
    tj_graph_destroy(g);
    tj_context_destroy(g_ctx);
    return TJ_TEST_EXIT_SKIP;
  }
  CHECK_OK(s);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  g_dev = tj_test_open_device_or_skip();
  RUN_TEST(unary_ops);
  RUN_TEST(binary_ops_broadcast);
  RUN_TEST(where_and_casts);
  RUN_TEST(reductions);
  RUN_TEST(softmax_layer_norm);
  RUN_TEST(matmuls);
  RUN_TEST(gemm_candidates);
  RUN_TEST(movement);
  RUN_TEST(device_tensors);
  RUN_TEST(math_accuracy);
  RUN_TEST(capstone_bf16);
  RUN_TEST(capstone_f32);
  RUN_TEST(graphs_equal_plain_launches);
  RUN_TEST(allocator_reuse);
  RUN_TEST(errors);
  tj_cuda_device_destroy(g_dev);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
