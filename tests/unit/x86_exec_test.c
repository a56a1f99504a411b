// The x86 executable end to end: graphs built through the public API,
// compiled with tj_compile (the whole middle end, the lowering of fusion
// groups to kernel IR, one JIT module) and run with tj_executable_run,
// compared with tj_reference_run.
//
// Tolerances (|got - want| <= atol + rtol * |want|; NaN matches NaN, inf
// matches the same inf; ints and bools exactly):
//   f32  simple ops 1e-6 rel (one f32 rounding away from the reference's
//        double-then-round), transcendentals 4e-6 rel (a few ulp,
//        jit/vecmath.h), reductions and matmul 1e-5 rel plus an absolute
//        term scaled by the reduced length (f32 accumulation vs f64);
//   f16  2e-3 rel (2 ulp), bf16 1.6e-2 rel (2 ulp); f64 1e-13 rel.
// Every op of lib/ops.def is covered in small graphs with a symbolic batch
// B run at B = 0, 1, 7, 33 and 257 from ONE executable (no recompiles), with
// broadcasting and odd sizes.

#include <pthread.h>
#include <stdatomic.h>

#include "lib/dtype.h"
#include "tests/unit/test.h"

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

//===--- graphs under test ---===//

#define MAX_IO 8

typedef struct tol_t {
  double rtol, atol;
} tol_t;

// What a case builds: inputs with value ranges, outputs, a tolerance.
typedef struct case_t {
  const char* name;
  tj_graph_t* g;
  int64_t B;  // the symbol
  double lo[MAX_IO], hi[MAX_IO];
  int num_inputs;
  tol_t tol;
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

// Compares output |o| elementwise; prints the first misses.
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
      if (!same && misses++ < 3) {
        fprintf(stderr, "  %s[%lld] = %.9g, want %.9g\n", what, (long long)i, g,
                w);
      }
    } else {
      int64_t g = tj_load_i64(d, got, i), w = tj_load_i64(d, want, i);
      same = g == w;
      if (!same && misses++ < 3) {
        fprintf(stderr, "  %s[%lld] = %lld, want %lld\n", what, (long long)i,
                (long long)g, (long long)w);
      }
    }
  }
  return misses == 0;
}

typedef struct run_report_t {
  int kernels, breaks;
} run_report_t;

// Runs |c| (finalized) compiled with |opts| at each batch in |bs| and
// compares every output with the reference interpreter.
static bool run_case(case_t* c, const tj_compile_options_t* opts,
                     const int64_t* bs, int nb, run_report_t* report) {
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
  for (int k = 0; k < nb && ok; ++k) {
    int64_t B = bs[k];
    tj_tensor_t in[MAX_IO], got[MAX_IO], want[MAX_IO];
    int64_t shapes[2 * MAX_IO + MAX_IO][TJ_MAX_RANK];
    void* bufs[3 * MAX_IO] = {0};
    for (int i = 0; i < ni; ++i) {
      tj_value_t v = tj_graph_input_value(c->g, i);
      tj_dtype_t d = tj_graph_value_dtype(c->g, v);
      int32_t rank = tj_graph_value_rank(c->g, v);
      tj_graph_value_dims(c->g, v, shapes[i]);
      for (int32_t a = 0; a < rank; ++a) {
        if (shapes[i][a] == c->B) shapes[i][a] = B;
      }
      int64_t n = numel(rank, shapes[i]);
      bufs[i] = malloc((size_t)(n ? n : 1) * tj_dtype_size(d));
      fill(d, bufs[i], n, c->lo[i], c->hi[i]);
      in[i] = tj_tensor_make(bufs[i], d, rank, shapes[i]);
    }
    bool rejected = false;
    for (int o = 0; o < no && ok; ++o) {
      int32_t rank;
      int64_t* shape = shapes[MAX_IO + o];
      s = tj_executable_output_shape(exe, in, ni, o, &rank, shape);
      if (s) {
        // Inputs the graph's guards reject (B == 2*B): the graph rejects
        // them too, and there is nothing to run.
        tj_status_t s2 = tj_graph_output_shape(c->g, in, ni, o, &rank, shape);
        if (!s2 || tj_status_code(s2) != tj_status_code(s)) {
          fprintf(stderr, "%s: output_shape: %s\n", c->name,
                  tj_status_message(s));
          ok = false;
        }
        tj_status_free(s);
        tj_status_free(s2);
        rejected = true;
        break;
      }
      tj_dtype_t d = tj_graph_value_dtype(c->g, tj_graph_output_value(c->g, o));
      size_t bytes = (size_t)numel(rank, shape) * tj_dtype_size(d);
      bufs[MAX_IO + o] = malloc(bytes ? bytes : 1);
      bufs[2 * MAX_IO + o] = malloc(bytes ? bytes : 1);
      memset(bufs[MAX_IO + o], 0xAB, bytes);
      got[o] = tj_tensor_make(bufs[MAX_IO + o], d, rank, shape);
      want[o] = tj_tensor_make(bufs[2 * MAX_IO + o], d, rank, shape);
    }
    bool both_failed = rejected;
    if (ok && !rejected) {
      // Both must succeed, or both reject the inputs the same way (argmax
      // of an empty axis).
      tj_status_t s1 = tj_executable_run(exe, in, ni, got, no);
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
      char what[96];
      snprintf(what, sizeof(what), "%s B=%lld out%d", c->name, (long long)B, o);
      ok = compare(what, got[o].dtype, got[o].data, want[o].data,
                   numel(got[o].rank, got[o].shape), c->tol);
    }
    for (int i = 0; i < 3 * MAX_IO; ++i) free(bufs[i]);
  }
  tj_executable_stats_t st;
  tj_executable_stats(exe, &st);
  if (opts->specialize == TJ_SPECIALIZE_NEVER && st.recompiles != 0) {
    fprintf(stderr, "%s: %lld recompiles\n", c->name, (long long)st.recompiles);
    ok = false;
  }
  if (report) {
    report->kernels = st.num_kernels;
    report->breaks = st.num_graph_breaks;
  }
  tj_executable_release(exe);
  return ok;
}

static tj_context_t* g_ctx;
static const int64_t kBatches[] = {0, 1, 7, 33, 257};

static void begin(case_t* c, const char* name) {
  memset(c, 0, sizeof(*c));
  c->name = name;
  CHECK_OK(tj_graph_create(g_ctx, name, &c->g));
  c->B = tj_graph_symbol(c->g, "B");
  c->tol = (tol_t){1e-6, 1e-6};
}

// Runs the case at every batch and destroys its graph; checks kernel and
// graph-break counts when |kernels| / |breaks| are >= 0.
static void finish(case_t* c, int kernels, int breaks) {
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.verify_each = true;
  run_report_t r = {0, 0};
  bool ok = run_case(c, &opts, kBatches, (int)TJ_ARRAY_SIZE(kBatches), &r);
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

typedef struct unary_case_t {
  const char* name;
  unary_fn fn;
  double lo, hi;
  double rtol;  // f32
  bool ints;    // also on i32 / i64 / i8
} unary_case_t;

static const unary_case_t kUnary[] = {
    {"neg", tj_graph_neg, -10, 10, 0, true},
    {"abs", tj_graph_abs, -10, 10, 0, true},
    {"exp", tj_graph_exp, -20, 20, 4e-6, false},
    {"log", tj_graph_log, 1e-3, 100, 4e-6, false},
    {"sqrt", tj_graph_sqrt, 0, 100, 1e-6, false},
    {"rsqrt", tj_graph_rsqrt, 1e-3, 100, 2e-6, false},
    {"tanh", tj_graph_tanh, -6, 6, 4e-6, false},
    {"sigmoid", tj_graph_sigmoid, -20, 20, 4e-6, false},
    {"erf", tj_graph_erf, -4, 4, 4e-6, false},
    {"sin", tj_graph_sin, -10, 10, 4e-6, false},
    {"cos", tj_graph_cos, -10, 10, 4e-6, false},
    {"relu", tj_graph_relu, -10, 10, 0, true},
    {"floor", tj_graph_floor, -10, 10, 0, false},
    {"ceil", tj_graph_ceil, -10, 10, 0, false},
    {"round", tj_graph_round, -10, 10, 0, false},
    {"sign", tj_graph_sign, -10, 10, 0, true},
};

TEST(unary_ops) {
  static const tj_dtype_t kFloat[] = {TJ_DTYPE_F32, TJ_DTYPE_F64, TJ_DTYPE_F16,
                                      TJ_DTYPE_BF16};
  static const tj_dtype_t kInt[] = {TJ_DTYPE_I32, TJ_DTYPE_I64, TJ_DTYPE_I8};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kUnary); ++i) {
    const unary_case_t* u = &kUnary[i];
    for (size_t t = 0; t < TJ_ARRAY_SIZE(kFloat) + TJ_ARRAY_SIZE(kInt); ++t) {
      bool is_int = t >= TJ_ARRAY_SIZE(kFloat);
      if (is_int && !u->ints) continue;
      tj_dtype_t d = is_int ? kInt[t - TJ_ARRAY_SIZE(kFloat)] : kFloat[t];
      char name[64];
      snprintf(name, sizeof(name), "%s_%s", u->name, tj_dtype_name(d));
      case_t c;
      begin(&c, name);
      tj_value_t x = input(&c, d, 2, (int64_t[]){c.B, 33}, u->lo, u->hi);
      output(&c, u->fn(c.g, x));
      // Transcendentals of f16/bf16 values: a few ulp of the dtype.
      c.tol = tol_for(d, u->rtol > 0 ? u->rtol : 1e-7);
      if (d == TJ_DTYPE_F64 && u->rtol > 0) c.tol = (tol_t){1e-13, 1e-300};
      if (u->rtol == 0) c.tol.atol = 0;
      finish(&c, 1, 0);
    }
  }
}

TEST(logical_and_predicates) {
  case_t c;
  begin(&c, "isnan_not_and_or");
  tj_value_t x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 17}, -1, 1);
  tj_value_t y = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){17}, -1, 1);
  tj_value_t q = tj_graph_sqrt(c.g, x);  // NaN for x < 0
  tj_value_t n = tj_graph_isnan(c.g, q);
  tj_value_t l = tj_graph_lt(c.g, x, y);
  output(&c, tj_graph_logical_and(c.g, n, tj_graph_logical_not(c.g, l)));
  output(&c, tj_graph_logical_or(c.g, n, l));
  finish(&c, 1, 0);
}

typedef struct binary_case_t {
  const char* name;
  binary_fn fn;
  double lo, hi;
  bool ints;
} binary_case_t;

static const binary_case_t kBinary[] = {
    {"add", tj_graph_add, -10, 10, true},
    {"sub", tj_graph_sub, -10, 10, true},
    {"mul", tj_graph_mul, -10, 10, true},
    {"div", tj_graph_div, -10, 10, true},
    {"pow", tj_graph_pow, 0.5, 3, false},
    {"maximum", tj_graph_maximum, -10, 10, true},
    {"minimum", tj_graph_minimum, -10, 10, true},
    {"eq", tj_graph_eq, -3, 3, true},
    {"ne", tj_graph_ne, -3, 3, true},
    {"lt", tj_graph_lt, -3, 3, true},
    {"le", tj_graph_le, -3, 3, true},
    {"gt", tj_graph_gt, -3, 3, true},
    {"ge", tj_graph_ge, -3, 3, true},
};

TEST(binary_ops_broadcast) {
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_F32,  TJ_DTYPE_F64, TJ_DTYPE_F16,
                                      TJ_DTYPE_BF16, TJ_DTYPE_I32, TJ_DTYPE_I64,
                                      TJ_DTYPE_I8};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kBinary); ++i) {
    const binary_case_t* b = &kBinary[i];
    for (size_t t = 0; t < TJ_ARRAY_SIZE(kTypes); ++t) {
      tj_dtype_t d = kTypes[t];
      if (!tj_dtype_is_float(d) && !b->ints) continue;
      char name[64];
      snprintf(name, sizeof(name), "%s_%s", b->name, tj_dtype_name(d));
      case_t c;
      begin(&c, name);
      // [B,7,33] op [33], and [B,1,33] op [7,1]: both broadcast forms.
      tj_value_t x = input(&c, d, 3, (int64_t[]){c.B, 7, 33}, b->lo, b->hi);
      tj_value_t y = input(&c, d, 1, (int64_t[]){33}, b->lo, b->hi);
      tj_value_t z = input(&c, d, 3, (int64_t[]){c.B, 1, 33}, b->lo, b->hi);
      tj_value_t w = input(&c, d, 2, (int64_t[]){7, 1}, b->lo, b->hi);
      output(&c, b->fn(c.g, x, y));
      output(&c, b->fn(c.g, z, w));
      c.tol =
          tol_for(d, d == TJ_DTYPE_F32 && b->fn == tj_graph_pow ? 4e-6 : 1e-7);
      if (b->fn == tj_graph_pow && d == TJ_DTYPE_F64) c.tol.rtol = 1e-13;
      finish(&c, -1, 0);
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
  finish(&c, 1, 0);

  static const tj_dtype_t kTypes[] = {TJ_DTYPE_F32, TJ_DTYPE_F16, TJ_DTYPE_BF16,
                                      TJ_DTYPE_F64, TJ_DTYPE_I8,  TJ_DTYPE_I32,
                                      TJ_DTYPE_I64, TJ_DTYPE_BOOL};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kTypes); ++i) {
    for (size_t j = 0; j < TJ_ARRAY_SIZE(kTypes); ++j) {
      tj_dtype_t from = kTypes[i], to = kTypes[j];
      if (from == to) continue;
      char name[64];
      snprintf(name, sizeof(name), "cast_%s_%s", tj_dtype_name(from),
               tj_dtype_name(to));
      begin(&c, name);
      // Within i8 range so every conversion is defined and exact enough.
      tj_value_t x = input(&c, from, 2, (int64_t[]){c.B, 7}, -100, 100);
      output(&c, tj_graph_cast(c.g, x, to));
      // f64 -> f16/bf16 rounds through f32 in kernels (kernel_ir.h).
      c.tol = tol_for(to, 1e-7);
      finish(&c, 1, 0);
    }
  }
}

//===--- reductions ---===//

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
      {"all", 0, {0}},   {"outer2", 2, {0, 2}}, {"inner2", 2, {1, 2}},
  };
  for (size_t o = 0; o < TJ_ARRAY_SIZE(kOps); ++o) {
    for (size_t a = 0; a < TJ_ARRAY_SIZE(kAxes); ++a) {
      for (int keep = 0; keep < 2; ++keep) {
        char name[64];
        snprintf(name, sizeof(name), "%s_%s_%s", kOps[o].name, kAxes[a].name,
                 keep ? "keep" : "drop");
        case_t c;
        begin(&c, name);
        tj_value_t x = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 7, 33},
                             kOps[o].lo, kOps[o].hi);
        output(&c,
               kOps[o].fn(c.g, x, kAxes[a].num_axes, kAxes[a].axes, keep != 0));
        // f32 accumulation over up to 257*7*33 elements vs f64.
        c.tol = (tol_t){2e-5, 2e-5};
        // Axes 0 and 2 of a dense [B,7,33] are not one strided axis: the
        // ROW_REDUCE template reduces one; that group runs on the host.
        finish(&c, -1, strcmp(kAxes[a].name, "outer2") == 0 ? 1 : 0);
      }
    }
  }
  // Integer and f64 sums, argmax (with ties: first wins).
  case_t c;
  begin(&c, "sum_i32_max_i64");
  tj_value_t xi = input(&c, TJ_DTYPE_I32, 2, (int64_t[]){c.B, 257}, -50, 50);
  output(&c, tj_graph_sum(c.g, xi, 1, (int32_t[]){1}, false));
  tj_value_t xl = input(&c, TJ_DTYPE_I64, 2, (int64_t[]){c.B, 7}, -50, 50);
  output(&c, tj_graph_max(c.g, xl, 1, (int32_t[]){0}, true));
  finish(&c, 2, 0);
  begin(&c, "sum_f64");
  tj_value_t xd = input(&c, TJ_DTYPE_F64, 2, (int64_t[]){c.B, 33}, -1, 1);
  output(&c, tj_graph_sum(c.g, xd, 1, (int32_t[]){1}, false));
  c.tol = (tol_t){1e-12, 1e-12};
  finish(&c, 1, 0);
  begin(&c, "argmax");
  tj_value_t xa = input(&c, TJ_DTYPE_I32, 3, (int64_t[]){c.B, 7, 33}, 0, 4);
  output(&c, tj_graph_argmax(c.g, xa, -1, false));
  output(&c, tj_graph_argmax(c.g, xa, 0, true));  // B = 0: an error in both
  finish(&c, 2, 0);
}

//===--- composites ---===//

TEST(softmax_layer_norm) {
  case_t c;
  begin(&c, "softmax");
  tj_value_t x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 257}, -8, 8);
  output(&c, tj_graph_softmax(c.g, x, -1));
  c.tol = (tol_t){2e-5, 1e-7};
  finish(&c, 1, 0);

  begin(&c, "softmax_axis0");
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 33}, -8, 8);
  output(&c, tj_graph_softmax(c.g, x, 0));
  c.tol = (tol_t){2e-5, 1e-7};
  finish(&c, 1, 0);

  begin(&c, "log_softmax");
  x = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 3, 33}, -8, 8);
  output(&c, tj_graph_log_softmax(c.g, x, 2));
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
  x = input(&c, TJ_DTYPE_BF16, 2, (int64_t[]){c.B, 33}, -3, 3);
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

TEST(matmuls) {
  case_t c;
  begin(&c, "matmul_bias_relu");
  tj_value_t x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 33}, -1, 1);
  tj_value_t w = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){33, 17}, -1, 1);
  tj_value_t b = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){17}, -1, 1);
  output(&c, tj_graph_relu(c.g, tj_graph_linear(c.g, x, w, b)));
  c.tol = (tol_t){1e-5, 1e-5};
  finish(&c, 1, 0);

  begin(&c, "matmul_batched_transposed");
  x = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 7, 33}, -1, 1);
  w = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){65, 33}, -1, 1);  // used as w^T
  tj_value_t r = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 7, 65}, -1, 1);
  tj_value_t wt = tj_graph_transpose(c.g, w, (int32_t[]){1, 0});
  output(&c, tj_graph_add(c.g, tj_graph_matmul(c.g, x, wt), r));
  c.tol = (tol_t){1e-5, 1e-5};
  finish(&c, 1, 0);

  begin(&c, "matmul_vectors");
  tj_value_t v = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){33}, -1, 1);
  tj_value_t m = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 33}, -1, 1);
  tj_value_t m2 = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){33, c.B}, -1, 1);
  output(&c, tj_graph_matmul(c.g, m, v));   // [B]
  output(&c, tj_graph_matmul(c.g, v, m2));  // [B]
  output(&c, tj_graph_matmul(c.g, v, v));   // []
  c.tol = (tol_t){1e-5, 1e-5};
  finish(&c, 3, 0);

  // Batch broadcasting: [B,1,7,9] @ [3,9,5].
  begin(&c, "matmul_batch_broadcast");
  x = input(&c, TJ_DTYPE_F32, 4, (int64_t[]){c.B, 1, 7, 9}, -1, 1);
  w = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){3, 9, 5}, -1, 1);
  output(&c, tj_graph_matmul(c.g, x, w));
  c.tol = (tol_t){1e-5, 1e-5};
  finish(&c, 1, 0);

  // f64 matmul has no gemm template: a host step, counted as a break.
  begin(&c, "matmul_f64_host");
  x = input(&c, TJ_DTYPE_F64, 2, (int64_t[]){c.B, 5}, -1, 1);
  w = input(&c, TJ_DTYPE_F64, 2, (int64_t[]){5, 3}, -1, 1);
  output(&c, tj_graph_exp(c.g, tj_graph_matmul(c.g, x, w)));
  c.tol = (tol_t){1e-13, 1e-13};
  finish(&c, -1, 1);
}

//===--- movement and leaves ---===//

TEST(movement) {
  case_t c;
  begin(&c, "transpose_slice_broadcast");
  tj_value_t x = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 7, 33}, -1, 1);
  tj_value_t t = tj_graph_transpose(c.g, x, (int32_t[]){2, 0, 1});  // 33,B,7
  tj_value_t s = tj_graph_slice(c.g, t, (int64_t[]){1, 0, 1},
                                (int64_t[]){30, INT64_MAX, 7},
                                (int64_t[]){3, 1, 2});  // 10,B,3
  tj_value_t y = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){3}, -1, 1);
  output(&c, tj_graph_mul(c.g, tj_graph_exp(c.g, s), y));
  output(&c, tj_graph_broadcast_to(c.g, y, 3, (int64_t[]){2, c.B, 3}));
  c.tol = (tol_t){4e-6, 1e-7};
  finish(&c, -1, 0);

  // Reshapes that split and merge dims, symbolic ones included.
  begin(&c, "reshape_split_merge");
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 12}, -1, 1);
  tj_value_t r =
      tj_graph_reshape(c.g, tj_graph_neg(c.g, x), 3, (int64_t[]){c.B, 3, 4});
  tj_value_t q = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){3, 4}, -1, 1);
  output(&c, tj_graph_add(c.g, r, q));
  tj_value_t x3 = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 3, 4}, -1, 1);
  tj_value_t merged =
      tj_graph_reshape(c.g, tj_graph_relu(c.g, x3), 2,
                       (int64_t[]){tj_graph_dim_mul(c.g, c.B, 3), 4});
  output(&c, tj_graph_sigmoid(c.g, merged));
  c.tol = (tol_t){4e-6, 1e-7};
  finish(&c, -1, 0);

  begin(&c, "reshape_of_transpose");
  x = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 4, 6}, -1, 1);
  t = tj_graph_transpose(c.g, tj_graph_abs(c.g, x), (int32_t[]){0, 2, 1});
  output(&c, tj_graph_reshape(c.g, t, 2, (int64_t[]){c.B, 24}));
  finish(&c, -1, -1);

  // Pad and concat: one kernel per box of the output in which each takes
  // one branch (here [B,5|3] and [B,2|5|1]: 2 + 3 boxes, one group).
  begin(&c, "concat_pad");
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 5}, -1, 1);
  y = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 3}, -1, 1);
  tj_value_t cat = tj_graph_concat(c.g, 2, (tj_value_t[]){x, y}, 1);
  output(&c, tj_graph_exp(c.g, cat));
  output(&c, tj_graph_pad(c.g, tj_graph_neg(c.g, x), (int64_t[]){0, 2},
                          (int64_t[]){0, 1}, 7.0));
  c.tol = (tol_t){4e-6, 1e-7};
  finish(&c, -1, 0);

  // Along the symbolic axis, three pieces, one a constant; then sliced
  // with a step (the boxes are cut where the slice crosses a bound).
  begin(&c, "concat_symbolic_slice");
  x = input(&c, TJ_DTYPE_I32, 2, (int64_t[]){c.B, 4}, -9, 9);
  y = input(&c, TJ_DTYPE_I32, 2, (int64_t[]){3, 4}, -9, 9);
  static const int32_t kRow[4] = {100, 200, 300, 400};
  tj_value_t row =
      tj_graph_constant(c.g, TJ_DTYPE_I32, 2, (int64_t[]){1, 4}, kRow);
  cat = tj_graph_concat(c.g, 3, (tj_value_t[]){x, y, row}, 0);
  output(&c, tj_graph_mul(c.g, cat, cat));
  tj_value_t two = input(&c, TJ_DTYPE_I32, 2, (int64_t[]){7, 4}, -9, 9);
  tj_value_t cat2 = tj_graph_concat(c.g, 2, (tj_value_t[]){two, y}, 0);
  output(&c,
         tj_graph_slice(c.g, cat2, (int64_t[]){1, 1},
                        (int64_t[]){INT64_MAX, INT64_MAX}, (int64_t[]){2, 2}));
  finish(&c, -1, 0);

  begin(&c, "pad_2d_symbolic");
  x = input(&c, TJ_DTYPE_F16, 3, (int64_t[]){2, c.B, 6}, -4, 4);
  output(&c, tj_graph_sigmoid(c.g, tj_graph_pad(c.g, x, (int64_t[]){0, 1, 2},
                                                (int64_t[]){1, 2, 0}, -1.5)));
  c.tol = tol_for(TJ_DTYPE_F16, 0);
  finish(&c, -1, 0);

  begin(&c, "gather");
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){9, 5}, -1, 1);
  tj_value_t idx = input(&c, TJ_DTYPE_I64, 1, (int64_t[]){c.B}, 0, 9);
  output(&c, tj_graph_exp(c.g, tj_graph_gather(c.g, x, idx, 0)));
  c.tol = (tol_t){4e-6, 1e-7};
  finish(&c, 1, 1);

  begin(&c, "leaves");
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 5}, -1, 1);
  static const float kData[5] = {1, -2, 3.5f, 0.25f, 8};
  tj_value_t k = tj_graph_constant(c.g, TJ_DTYPE_F32, 1, (int64_t[]){5}, kData);
  tj_value_t io = tj_graph_iota(c.g, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 5}, 0);
  tj_value_t fl = tj_graph_full(c.g, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 5}, 0.1);
  output(&c,
         tj_graph_add(c.g, tj_graph_mul(c.g, x, k), tj_graph_add(c.g, io, fl)));
  output(&c, tj_graph_iota(c.g, TJ_DTYPE_I32, 2, (int64_t[]){3, c.B}, 1));
  finish(&c, -1, 0);

  // Outputs that are inputs, constants or the same value twice.
  begin(&c, "output_aliases");
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 5}, -1, 1);
  y = tj_graph_exp(c.g, x);
  output(&c, x);
  output(&c, y);
  output(&c, y);
  output(&c, tj_graph_reshape(c.g, y, 2, (int64_t[]){5, c.B}));
  c.tol = (tol_t){4e-6, 1e-7};
  finish(&c, -1, 0);
}

//===--- the capstone ---===//

// y = gelu(x @ w + b) with x: [B, K], w: [K, N], b: [N]; one executable,
// B = 1, 7, 2048, no recompile, one kernel. B = 2048 is checked on its
// first and last 16 rows (rows are independent) against the reference
// run on those rows: the interpreter's f64 matmul of the full batch takes
// seconds.
TEST(capstone) {
  const int64_t K = 1024, N = 4096;
  tj_graph_t* g;
  CHECK_OK(tj_graph_create(g_ctx, "capstone", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, K}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){K, N}, "w");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){N}, "b");
  tj_graph_output(g, tj_graph_gelu(g, tj_graph_linear(g, x, w, b), false), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, NULL, &exe));
  if (!exe) {
    tj_graph_destroy(g);
    return;
  }
  float* ws = malloc(sizeof(float) * K * N);
  float* bs = malloc(sizeof(float) * N);
  fill(TJ_DTYPE_F32, ws, K * N, -0.05, 0.05);
  fill(TJ_DTYPE_F32, bs, N, -1, 1);
  static const int64_t kB[] = {1, 7, 2048};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kB); ++i) {
    int64_t bv = kB[i];
    float* xs = malloc(sizeof(float) * bv * K);
    float* ys = malloc(sizeof(float) * bv * N);
    fill(TJ_DTYPE_F32, xs, bv * K, -1, 1);
    int64_t xshape[2] = {bv, K}, yshape[2] = {bv, N};
    tj_tensor_t in[3] = {tj_tensor_make(xs, TJ_DTYPE_F32, 2, xshape),
                         tj_tensor_make(ws, TJ_DTYPE_F32, 2, (int64_t[]){K, N}),
                         tj_tensor_make(bs, TJ_DTYPE_F32, 1, (int64_t[]){N})};
    tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 2, yshape);
    CHECK_OK(tj_executable_run(exe, in, 3, &out, 1));
    // Reference on (at most) the first and last 16 rows.
    int64_t rows = bv < 16 ? bv : 16;
    for (int part = 0; part < (bv > 16 ? 2 : 1); ++part) {
      int64_t row0 = part ? bv - rows : 0;
      float* want = malloc(sizeof(float) * rows * N);
      int64_t sub_x[2] = {rows, K}, sub_y[2] = {rows, N};
      tj_tensor_t rin[3] = {in[0], in[1], in[2]};
      rin[0] = tj_tensor_make(xs + row0 * K, TJ_DTYPE_F32, 2, sub_x);
      tj_tensor_t rout = tj_tensor_make(want, TJ_DTYPE_F32, 2, sub_y);
      CHECK_OK(tj_reference_run(g, rin, 3, &rout, 1));
      char what[64];
      snprintf(what, sizeof(what), "capstone B=%lld rows@%lld", (long long)bv,
               (long long)row0);
      // K = 1024 f32 products summed in f32 vs f64: ~1e-5 relative.
      CHECK(compare(what, TJ_DTYPE_F32, ys + row0 * N, want, rows * N,
                    (tol_t){2e-5, 2e-5}));
      free(want);
    }
    free(xs);
    free(ys);
  }
  tj_executable_stats_t st;
  tj_executable_stats(exe, &st);
  CHECK_EQ_INT(0, st.recompiles);
  CHECK_EQ_INT(1, st.num_kernels);
  CHECK_EQ_INT(0, st.num_graph_breaks);
  CHECK_EQ_INT(3, st.runs);
  CHECK_EQ_INT(1, st.cache_misses);
  tj_executable_release(exe);
  free(ws);
  free(bs);
  tj_graph_destroy(g);
}

//===--- strided tensors, specialization, hooks, threads ---===//

static tj_graph_t* small_graph(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "small", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 5}, "x");
  tj_value_t y = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){5}, "y");
  tj_value_t s = tj_graph_add(g, x, y);
  tj_graph_output(g, tj_graph_relu(g, s), "r");
  tj_graph_output(g, tj_graph_sum(g, s, 1, (int32_t[]){1}, false), "t");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static void small_inputs(int64_t b, float* xs, float* ys) {
  for (int64_t i = 0; i < b * 5; ++i) xs[i] = (float)((i * 7) % 11) - 5.0f;
  for (int i = 0; i < 5; ++i) ys[i] = 0.5f * (float)i - 1.0f;
}

static bool small_check(int64_t b, const float* xs, const float* ys,
                        const float* r, int64_t r_row, const float* t) {
  for (int64_t i = 0; i < b; ++i) {
    double sum = 0;
    for (int j = 0; j < 5; ++j) {
      double v = (double)xs[i * 5 + j] + ys[j];
      sum += v;
      if (fabs(r[i * r_row + j] - (v > 0 ? v : 0)) > 1e-6) return false;
    }
    if (fabs(t[i] - sum) > 1e-5) return false;
  }
  return true;
}

TEST(strided_inputs_and_outputs) {
  tj_graph_t* g = small_graph(g_ctx);
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, NULL, &exe));
  // x is the transpose of a [5, B] array; r is written into every other
  // row of a [2B, 5] array.
  const int64_t b = 9;
  float xt[5 * 9], xs[9 * 5], ys[5], r[2 * 9 * 5], t[9];
  small_inputs(b, xs, ys);
  for (int64_t i = 0; i < b; ++i) {
    for (int j = 0; j < 5; ++j) xt[j * b + i] = xs[i * 5 + j];
  }
  int64_t xshape[2] = {b, 5}, xstrides[2] = {1, b};
  int64_t rshape[2] = {b, 5}, rstrides[2] = {10, 1};
  tj_tensor_t in[2] = {tj_tensor_make(xt, TJ_DTYPE_F32, 2, xshape),
                       tj_tensor_make(ys, TJ_DTYPE_F32, 1, (int64_t[]){5})};
  in[0].strides = xstrides;
  tj_tensor_t out[2] = {tj_tensor_make(r, TJ_DTYPE_F32, 2, rshape),
                        tj_tensor_make(t, TJ_DTYPE_F32, 1, (int64_t[]){b})};
  out[0].strides = rstrides;
  CHECK_OK(tj_executable_run(exe, in, 2, out, 2));
  CHECK(small_check(b, xs, ys, r, 10, t));
  // Bad calls: wrong output shape, wrong input dtype.
  int64_t bad_shape[1] = {b + 1};
  tj_tensor_t bad_out[2] = {out[0],
                            tj_tensor_make(t, TJ_DTYPE_F32, 1, bad_shape)};
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "output \"t\" dim 0",
               tj_executable_run(exe, in, 2, bad_out, 2));
  tj_tensor_t bad_in[2] = {in[0], in[1]};
  bad_in[1].dtype = TJ_DTYPE_F64;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "input \"y\"",
               tj_executable_run(exe, bad_in, 2, out, 2));
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

typedef struct log_t {
  char text[4096];
  size_t length;
  int count;
} log_t;

static void capture(tj_severity_t severity, const char* message, size_t length,
                    void* user_data) {
  (void)severity;
  log_t* log = user_data;
  ++log->count;
  if (log->length + length + 2 < sizeof(log->text)) {
    memcpy(log->text + log->length, message, length);
    log->length += length;
    log->text[log->length++] = '\n';
    log->text[log->length] = '\0';
  }
}

static void run_small(tj_executable_t* exe, int64_t b) {
  float xs[64 * 5], ys[5], r[64 * 5], t[64];
  small_inputs(b, xs, ys);
  int64_t xshape[2] = {b, 5};
  tj_tensor_t in[2] = {tj_tensor_make(xs, TJ_DTYPE_F32, 2, xshape),
                       tj_tensor_make(ys, TJ_DTYPE_F32, 1, (int64_t[]){5})};
  tj_tensor_t out[2] = {tj_tensor_make(r, TJ_DTYPE_F32, 2, xshape),
                        tj_tensor_make(t, TJ_DTYPE_F32, 1, (int64_t[]){b})};
  CHECK_OK(tj_executable_run(exe, in, 2, out, 2));
  CHECK(small_check(b, xs, ys, r, 5, t));
}

TEST(specialization_policies) {
  char saved[256] = "";
  const char* env = getenv("TJ_LOG");
  if (env) snprintf(saved, sizeof(saved), "%s", env);
  setenv("TJ_LOG", "recompiles", 1);
  log_t log;
  memset(&log, 0, sizeof(log));
  tj_context_options_t co;
  tj_context_options_initialize(&co);
  co.diagnostic_fn = capture;
  co.diagnostic_user_data = &log;
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&co, &ctx));
  tj_graph_t* g = small_graph(ctx);
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  tj_executable_stats_t st;

  // never: B changes, the generic kernels serve, nothing is logged.
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  for (int64_t b = 1; b < 40; b += 6) run_small(exe, b);
  tj_executable_stats(exe, &st);
  CHECK_EQ_INT(0, st.recompiles);
  CHECK_EQ_INT(0, log.count);
  tj_executable_release(exe);

  // always: one specialization per new B, each logged with its reason.
  opts.specialize = TJ_SPECIALIZE_ALWAYS;
  CHECK_OK(tj_compile(g, &opts, &exe));
  run_small(exe, 3);
  run_small(exe, 3);
  run_small(exe, 4);
  tj_executable_stats(exe, &st);
  CHECK_EQ_INT(2, st.recompiles);
  CHECK_EQ_INT(2, log.count);
  CHECK_CONTAINS(log.text, "for B=3 (policy always");
  CHECK_CONTAINS(log.text, "for B=4 (policy always");
  tj_executable_release(exe);

  // after_n: the third run of a shape compiles it.
  memset(&log, 0, sizeof(log));
  opts.specialize = TJ_SPECIALIZE_AFTER_N;
  opts.specialize_after = 3;
  CHECK_OK(tj_compile(g, &opts, &exe));
  run_small(exe, 5);
  run_small(exe, 5);
  tj_executable_stats(exe, &st);
  CHECK_EQ_INT(0, st.recompiles);
  run_small(exe, 5);
  run_small(exe, 5);
  run_small(exe, 6);
  tj_executable_stats(exe, &st);
  CHECK_EQ_INT(1, st.recompiles);
  CHECK_CONTAINS(log.text, "for B=5 (policy after_n: 3 runs");
  CHECK_EQ_INT(5, st.runs);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  if (env) {
    setenv("TJ_LOG", saved, 1);
  } else {
    unsetenv("TJ_LOG");
  }
}

// The kernel cache: a second compile in one context hits the memory cache,
// one in a fresh context (a new process, as far as the cache can tell)
// loads the object from disk without LLVM, and a truncated file is a miss
// that is rewritten.
static void compile_small(tj_context_t* ctx, const char* dir, int64_t* hits,
                          int64_t* misses) {
  tj_graph_t* g = small_graph(ctx);
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.cache_dir = dir;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  if (exe) {
    run_small(exe, 9);
    tj_executable_stats_t st;
    tj_executable_stats(exe, &st);
    *hits = st.cache_hits;
    *misses = st.cache_misses;
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

TEST(kernel_cache) {
  char dir[] = "/tmp/tj_x86_cache_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  tj_context_t* ctx[4] = {NULL, NULL, NULL, NULL};
  for (int i = 0; i < 4; ++i) CHECK_OK(tj_context_create(NULL, &ctx[i]));
  int64_t hits = -1, misses = -1;
  compile_small(ctx[0], dir, &hits, &misses);
  CHECK_EQ_INT(0, hits);  // cold: compiled (relu and sum: one kernel)
  CHECK_EQ_INT(1, misses);
  compile_small(ctx[0], dir, &hits, &misses);
  CHECK_EQ_INT(1, hits);  // the context's memory cache
  CHECK_EQ_INT(0, misses);
  compile_small(ctx[1], dir, &hits, &misses);
  CHECK_EQ_INT(1, hits);  // a fresh context: the disk
  CHECK_EQ_INT(0, misses);
  // Truncate every cache file: a miss, never an error, and rewritten.
  char cmd[256];
  snprintf(cmd, sizeof(cmd),
           "for f in %s/*.tjo; do head -c 40 \"$f\" > \"$f.t\" && "
           "mv \"$f.t\" \"$f\"; done",
           dir);
  CHECK(system(cmd) == 0);
  compile_small(ctx[2], dir, &hits, &misses);
  CHECK_EQ_INT(0, hits);
  CHECK_EQ_INT(1, misses);
  compile_small(ctx[3], dir, &hits, &misses);
  CHECK_EQ_INT(1, hits);
  for (int i = 0; i < 4; ++i) tj_context_destroy(ctx[i]);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
}

static atomic_int g_host_calls;

static void serial_parallel_for(void* user_data, int64_t count, int64_t grain,
                                tj_task_fn task, void* task_context) {
  (void)user_data;
  (void)grain;
  atomic_fetch_add(&g_host_calls, 1);
  // Two halves, the second first: any order must do.
  int64_t mid = count / 2;
  task(task_context, mid, count);
  task(task_context, 0, mid);
}

TEST(host_parallel_for) {
  tj_graph_t* g;
  CHECK_OK(tj_graph_create(g_ctx, "hooked", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 256}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){256, 512}, "w");
  tj_graph_output(g, tj_graph_tanh(g, tj_graph_matmul(g, x, w)), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.parallel_for = serial_parallel_for;
  opts.num_threads = 4;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  const int64_t b = 300;
  float* xs = malloc(sizeof(float) * b * 256);
  float* ws = malloc(sizeof(float) * 256 * 512);
  float* got = malloc(sizeof(float) * b * 512);
  float* want = malloc(sizeof(float) * b * 512);
  fill(TJ_DTYPE_F32, xs, b * 256, -1, 1);
  fill(TJ_DTYPE_F32, ws, 256 * 512, -0.1, 0.1);
  int64_t xshape[2] = {b, 256}, yshape[2] = {b, 512};
  tj_tensor_t in[2] = {
      tj_tensor_make(xs, TJ_DTYPE_F32, 2, xshape),
      tj_tensor_make(ws, TJ_DTYPE_F32, 2, (int64_t[]){256, 512})};
  tj_tensor_t out = tj_tensor_make(got, TJ_DTYPE_F32, 2, yshape);
  tj_tensor_t ref = tj_tensor_make(want, TJ_DTYPE_F32, 2, yshape);
  CHECK_OK(tj_executable_run(exe, in, 2, &out, 1));
  CHECK_OK(tj_reference_run(g, in, 2, &ref, 1));
  CHECK(
      compare("hooked", TJ_DTYPE_F32, got, want, b * 512, (tol_t){2e-5, 2e-5}));
  CHECK(atomic_load(&g_host_calls) >= 1);
  tj_executable_release(exe);
  free(xs);
  free(ws);
  free(got);
  free(want);
  tj_graph_destroy(g);
}

typedef struct worker_arg_t {
  tj_executable_t* exe;
  int id;
  bool ok;
} worker_arg_t;

static void* worker(void* p) {
  worker_arg_t* a = p;
  a->ok = true;
  for (int it = 0; it < 40; ++it) {
    int64_t b = 1 + (a->id * 13 + it * 7) % 60;
    float xs[64 * 5], ys[5], r[64 * 5], t[64];
    for (int64_t i = 0; i < b * 5; ++i) {
      xs[i] = (float)((i * 7 + a->id + it) % 11) - 5.0f;
    }
    for (int i = 0; i < 5; ++i) ys[i] = 0.25f * (float)(i + a->id) - 1.0f;
    int64_t xshape[2] = {b, 5};
    tj_tensor_t in[2] = {tj_tensor_make(xs, TJ_DTYPE_F32, 2, xshape),
                         tj_tensor_make(ys, TJ_DTYPE_F32, 1, (int64_t[]){5})};
    tj_tensor_t out[2] = {tj_tensor_make(r, TJ_DTYPE_F32, 2, xshape),
                          tj_tensor_make(t, TJ_DTYPE_F32, 1, (int64_t[]){b})};
    tj_status_t s = tj_executable_run(a->exe, in, 2, out, 2);
    if (s || !small_check(b, xs, ys, r, 5, t)) a->ok = false;
    tj_status_free(s);
  }
  return NULL;
}

TEST(concurrent_runs) {
  tj_graph_t* g = small_graph(g_ctx);
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.specialize = TJ_SPECIALIZE_AFTER_N;  // compiles while others run
  opts.specialize_after = 2;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  pthread_t threads[4];
  worker_arg_t args[4];
  for (int i = 0; i < 4; ++i) {
    args[i] = (worker_arg_t){exe, i, false};
    tj_executable_retain(exe);
    pthread_create(&threads[i], NULL, worker, &args[i]);
  }
  tj_executable_release(exe);  // the workers hold references
  for (int i = 0; i < 4; ++i) {
    pthread_join(threads[i], NULL);
    CHECK(args[i].ok);
  }
  tj_executable_stats_t st;
  tj_executable_stats(exe, &st);
  CHECK_EQ_INT(160, st.runs);
  CHECK(st.recompiles >= 1);
  for (int i = 0; i < 4; ++i) tj_executable_release(exe);
  tj_graph_destroy(g);
}

//===--- random graphs ---===//

// Seeded random graphs through the public builder: elementwise chains with
// broadcasting, reductions, movement (transpose, slice, reshape, concat,
// pad), matmuls and composites over a symbolic batch B; each compiled once
// and run at several B against the reference interpreter. Builder calls
// that inference rejects leave the graph in error: such a seed is skipped.

typedef struct rgen_t {
  case_t* c;
  tj_value_t vals[32];
  int num_vals;
} rgen_t;

static uint32_t rnd(uint32_t n) { return (uint32_t)(rng_next() % n); }

static tj_value_t rand_value(rgen_t* r) {
  return r->vals[r->num_vals - 1 -
                 (int)rnd((uint32_t)(r->num_vals < 3 ? r->num_vals : 3))];
}

static void push(rgen_t* r, tj_value_t v) {
  if (v.id && r->num_vals < 32) r->vals[r->num_vals++] = v;
}

// Inputs take dims the test can size: constants and B itself (not B*4).
static bool plain_dims(const rgen_t* r, int32_t rank, const int64_t* dims) {
  for (int32_t d = 0; d < rank; ++d) {
    if (dims[d] < 0 && dims[d] != r->c->B) return false;
  }
  return true;
}

static tj_value_t rand_input(rgen_t* r, int32_t rank, const int64_t* dims) {
  if (!plain_dims(r, rank, dims)) return (tj_value_t){0};
  return input(r->c, TJ_DTYPE_F32, rank, dims, -2, 2);
}

static void random_step(rgen_t* r) {
  tj_graph_t* g = r->c->g;
  tj_value_t v = rand_value(r);
  int32_t rank = tj_graph_value_rank(g, v);
  int64_t dims[TJ_MAX_RANK];
  tj_graph_value_dims(g, v, dims);
  switch (rnd(10)) {
    case 0: {
      static const unary_fn kFns[] = {
          tj_graph_exp, tj_graph_tanh, tj_graph_sigmoid, tj_graph_neg,
          tj_graph_abs, tj_graph_relu, tj_graph_sin,     tj_graph_erf};
      unary_fn fn = kFns[rnd(TJ_ARRAY_SIZE(kFns))];
      // exp of exp overflows: bound its argument.
      push(r, fn(g, fn == tj_graph_exp ? tj_graph_tanh(g, v) : v));
      break;
    }
    case 1:
    case 2: {
      // Another operand: an earlier value, or an input broadcasting to v.
      int64_t bd[TJ_MAX_RANK];
      int32_t br = rank - (int32_t)rnd((uint32_t)rank + 1);
      for (int32_t d = 0; d < br; ++d) {
        bd[d] = rnd(3) == 0 ? 1 : dims[rank - br + d];
      }
      tj_value_t w = rnd(2) && plain_dims(r, br, bd) ? rand_input(r, br, bd)
                                                     : rand_value(r);
      static const binary_fn kFns[] = {tj_graph_add, tj_graph_sub, tj_graph_mul,
                                       tj_graph_maximum};
      push(r, kFns[rnd(TJ_ARRAY_SIZE(kFns))](g, v, w));
      break;
    }
    case 3: {
      if (rank == 0) break;
      int32_t axes[TJ_MAX_RANK], n = 0;
      for (int32_t d = 0; d < rank; ++d) {
        if (rnd(2)) axes[n++] = d;
      }
      if (n == 0) axes[n++] = rank - 1;
      static const reduce_fn kFns[] = {tj_graph_sum, tj_graph_max,
                                       tj_graph_mean};
      push(r, kFns[rnd(3)](g, v, n, axes, rnd(2) != 0));
      break;
    }
    case 4: {
      if (rank < 2) break;
      int32_t perm[TJ_MAX_RANK];
      for (int32_t d = 0; d < rank; ++d) perm[d] = d;
      for (int32_t d = rank - 1; d > 0; --d) {
        int32_t e = (int32_t)rnd((uint32_t)d + 1), t = perm[d];
        perm[d] = perm[e];
        perm[e] = t;
      }
      push(r, tj_graph_transpose(g, v, perm));
      break;
    }
    case 5: {
      int64_t st[TJ_MAX_RANK], sp[TJ_MAX_RANK], step[TJ_MAX_RANK];
      for (int32_t d = 0; d < rank; ++d) {
        bool fixed = dims[d] > 2;
        st[d] = fixed ? (int64_t)rnd(2) : 0;
        sp[d] = INT64_MAX;
        step[d] = fixed ? 1 + (int64_t)rnd(2) : 1;
      }
      push(r, tj_graph_slice(g, v, st, sp, step));
      break;
    }
    case 6: {
      // Merge the last two dims, or split a constant dim in two.
      if (rank >= 2 && rnd(2)) {
        int64_t nd[TJ_MAX_RANK];
        for (int32_t d = 0; d < rank - 2; ++d) nd[d] = dims[d];
        nd[rank - 2] = tj_graph_dim_mul(g, dims[rank - 2], dims[rank - 1]);
        push(r, tj_graph_reshape(g, tj_graph_relu(g, v), rank - 1, nd));
      } else if (rank >= 1 && rank < 4 && dims[rank - 1] % 4 == 0 &&
                 dims[rank - 1] > 0) {
        int64_t nd[TJ_MAX_RANK];
        for (int32_t d = 0; d < rank - 1; ++d) nd[d] = dims[d];
        nd[rank - 1] = 4;
        nd[rank] = dims[rank - 1] / 4;
        push(r, tj_graph_reshape(g, tj_graph_neg(g, v), rank + 1, nd));
      }
      break;
    }
    case 7: {
      if (rank == 0) break;
      if (rnd(2)) {
        int32_t axis = (int32_t)rnd((uint32_t)rank);
        tj_value_t w = tj_graph_sigmoid(g, v);
        push(r, tj_graph_concat(g, 2, (tj_value_t[]){v, w}, axis));
      } else {
        int64_t lo[TJ_MAX_RANK], hi[TJ_MAX_RANK];
        for (int32_t d = 0; d < rank; ++d) {
          lo[d] = rnd(2);
          hi[d] = rnd(3) == 0 ? 2 : 0;
        }
        push(r, tj_graph_pad(g, v, lo, hi, 0.5));
      }
      break;
    }
    case 8: {
      if (rank < 1 || dims[rank - 1] < 0) break;  // a constant K
      int64_t wd[2] = {dims[rank - 1], 1 + (int64_t)rnd(40)};
      tj_value_t w = input(r->c, TJ_DTYPE_F32, 2, wd, -0.5, 0.5);
      tj_value_t m = tj_graph_matmul(g, v, w);
      if (rnd(2)) m = tj_graph_gelu(g, m, rnd(2) != 0);
      push(r, m);
      break;
    }
    default: {
      if (rank < 1) break;
      push(r, rnd(2) ? tj_graph_softmax(g, v, -1)
                     : tj_graph_layer_norm(g, v, (tj_value_t){0},
                                           (tj_value_t){0}, 1e-5));
      break;
    }
  }
}

TEST(random_graphs) {
  static const int64_t kDims[] = {1, 3, 4, 7, 16, 33};
  int count = 60, compiled = 0, kernels = 0, breaks = 0;
  const char* env = getenv("TJ_X86_RANDOM_COUNT");
  if (env) count = atoi(env);
  for (int seed = 0; seed < count; ++seed) {
    g_rng =
        0x9E3779B97F4A7C15ull ^ ((uint64_t)(seed + 1) * 0x2545F4914F6CDD1Dull);
    char name[32];
    snprintf(name, sizeof(name), "random%d", seed);
    case_t c;
    begin(&c, name);
    rgen_t r;
    memset(&r, 0, sizeof(r));
    r.c = &c;
    int32_t rank = 1 + (int32_t)rnd(3);
    int64_t dims[TJ_MAX_RANK];
    for (int32_t d = 0; d < rank; ++d) {
      dims[d] = d == 0 ? c.B : kDims[rnd(TJ_ARRAY_SIZE(kDims))];
    }
    push(&r, rand_input(&r, rank, dims));
    int steps = 3 + (int)rnd(6);
    for (int i = 0; i < steps && c.num_inputs < MAX_IO - 1; ++i) {
      random_step(&r);
    }
    output(&c, r.vals[r.num_vals - 1]);
    if (r.num_vals > 2) output(&c, r.vals[rnd((uint32_t)r.num_vals - 1)]);
    // f32 through chains of transcendentals, matmuls and normalizations.
    c.tol = (tol_t){2e-4, 2e-4};
    tj_status_t s = tj_graph_status(c.g);
    if (s) {  // inference rejected a random combination: not a test
      tj_status_free(s);
      tj_graph_destroy(c.g);
      continue;
    }
    tj_compile_options_t opts;
    tj_compile_options_initialize(&opts);
    opts.verify_each = true;
    // Every other graph runs exact-shape specializations instead.
    if (seed % 2) opts.specialize = TJ_SPECIALIZE_ALWAYS;
    run_report_t rep = {0, 0};
    static const int64_t kB[] = {1, 5, 33};
    bool ok = run_case(&c, &opts, kB, 3, &rep);
    ++g_test_checks;
    if (!ok) {
      ++g_test_failures;
      char* text = NULL;
      if (!tj_graph_print(c.g, &text)) fprintf(stderr, "%s\n", text);
      tj_context_free_string(g_ctx, text);
    }
    ++compiled;
    kernels += rep.kernels;
    breaks += rep.breaks;
    tj_graph_destroy(c.g);
  }
  printf("# random graphs: %d compiled, %d kernels, %d graph breaks\n",
         compiled, kernels, breaks);
}

//===--- errors and OOM ---===//

TEST(errors) {
  tj_graph_t* g;
  CHECK_OK(tj_graph_create(g_ctx, "unfinished", &g));
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, "x");
  tj_graph_output(g, x, "y");
  tj_executable_t* exe = (tj_executable_t*)1;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "not finalized",
               tj_compile(g, NULL, &exe));
  CHECK(exe == NULL);
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.pipeline = "canonicalize,nosuchpass";
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "nosuchpass",
               tj_compile(g, &opts, &exe));
  opts.pipeline = "dce";  // fuse and memplan are added
  CHECK_OK(tj_compile(g, &opts, &exe));
  float xs[4] = {1, 2, 3, 4}, ys[4] = {0};
  tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 1, (int64_t[]){4});
  tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 1, (int64_t[]){4});
  CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
  CHECK(ys[3] == 4.0f);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "takes 1 inputs",
               tj_executable_run(exe, &in, 0, &out, 1));
  tj_executable_release(exe);
  opts.pipeline = NULL;
  opts.target = TJ_TARGET_REFERENCE;
  CHECK_OK(tj_compile(g, &opts, &exe));
  memset(ys, 0, sizeof(ys));
  CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
  CHECK(ys[2] == 3.0f);
  tj_executable_release(exe);
  tj_executable_release(NULL);
  tj_graph_destroy(g);
}

// tj_compile + one run with the Nth allocation failing, for every N: each
// fails with OUT_OF_MEMORY and leaks nothing, until one succeeds.
static tj_status_t compile_and_run(tj_allocator_t allocator, bool host) {
  tj_context_options_t co;
  tj_context_options_initialize(&co);
  co.allocator = allocator;
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  s = tj_graph_create(ctx, "oom", &g);
  if (!s) {
    int64_t B = tj_graph_symbol(g, "B");
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 3}, "x");
    tj_value_t y = tj_graph_relu(g, tj_graph_add(g, x, x));
    if (host) {
      tj_value_t i = tj_graph_input(g, TJ_DTYPE_I32, 1, (int64_t[]){2}, "i");
      y = tj_graph_gather(g, y, i, 0);
    }
    tj_graph_output(g, tj_graph_softmax(g, y, 1), "y");
    s = tj_graph_finalize(g);
  }
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.num_threads = 1;
  if (!s) s = tj_compile(g, &opts, &exe);
  if (!s) {
    float xs[6] = {1, -2, 3, 4, -5, 6}, ys[6];
    int32_t is[2] = {1, 0};
    tj_tensor_t in[2] = {tj_tensor_make(xs, TJ_DTYPE_F32, 2, (int64_t[]){2, 3}),
                         tj_tensor_make(is, TJ_DTYPE_I32, 1, (int64_t[]){2})};
    tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 2, (int64_t[]){2, 3});
    s = tj_executable_run(exe, in, host ? 2 : 1, &out, 1);
    if (!s && !(ys[0] > 0 && fabsf(ys[0] + ys[1] + ys[2] - 1) < 1e-5f)) {
      s = tj_internal("oom test: wrong result");
    }
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

static void oom_sweep(bool host) {
  long n = 0;
  for (;; ++n) {
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, n);
    tj_status_t s = compile_and_run(tj_test_allocator_get(&alloc), host);
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
    if (!s) break;
    if (tj_status_code(s) != TJ_STATUS_OUT_OF_MEMORY) {
      fprintf(stderr, "fail_at %ld: %s: %s\n", n,
              tj_status_code_name(tj_status_code(s)), tj_status_message(s));
    }
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(s));
    tj_status_free(s);
    if (n > 100000) break;
  }
  printf("# oom sweep (%s): %ld failing allocation points\n",
         host ? "with a host step" : "kernels", n);
}

TEST(oom_sweep_kernels) { oom_sweep(false); }
TEST(oom_sweep_host_step) { oom_sweep(true); }

int main(int argc, char** argv) {
  // No disk cache unless a test names one: counts of compiled kernels must
  // not depend on earlier runs. (Contexts still share nothing.)
  setenv("TJ_CACHE_DIR", "", 1);
  CHECK_OK(tj_context_create(NULL, &g_ctx));
  // `x86_exec_test quick` skips the slow parts (OOM sweeps, capstone).
  bool quick = argc > 1 && strcmp(argv[1], "quick") == 0;
  RUN_TEST(unary_ops);
  RUN_TEST(logical_and_predicates);
  RUN_TEST(binary_ops_broadcast);
  RUN_TEST(where_and_casts);
  RUN_TEST(reductions);
  RUN_TEST(softmax_layer_norm);
  RUN_TEST(matmuls);
  RUN_TEST(movement);
  RUN_TEST(strided_inputs_and_outputs);
  RUN_TEST(specialization_policies);
  RUN_TEST(kernel_cache);
  RUN_TEST(host_parallel_for);
  RUN_TEST(concurrent_runs);
  RUN_TEST(errors);
  RUN_TEST(random_graphs);
  if (!quick) {
    RUN_TEST(capstone);
    RUN_TEST(oom_sweep_kernels);
    RUN_TEST(oom_sweep_host_step);
  }
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
