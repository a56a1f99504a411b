// Accuracy of the vectorized transcendentals (jit/vecmath.c) against libm
// in double (long double for f64), on every x86 level the host has: a
// sweep of ~1M inputs per function over its useful range plus special
// values. Prints the maximum ulp error per function and level, and checks
// it against the bounds stated in jit/vecmath.h.

#include "tests/unit/x86_test_util.h"

typedef double (*ref_fn)(double);

static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

typedef struct sweep_t {
  tj_op_t op;
  ref_fn ref;
  double lo, hi;     // uniform part of the sweep
  bool log_uniform;  // add |x| = 2^u samples of both signs, u < log_max
  bool positive_only;
  double bound;  // max ulp allowed (vecmath.h)
  int log_max;   // 0: 8
} sweep_t;

static const sweep_t kSweeps[] = {
    {TJ_OP_EXP, exp, -104, 89, false, false, 1, 0},
    {TJ_OP_LOG, log, 0, 100, true, true, 1, 0},
    {TJ_OP_TANH, tanh, -10, 10, true, false, 2, 0},
    {TJ_OP_SIGMOID, ref_sigmoid, -104, 30, true, false, 2.5, 0},
    {TJ_OP_ERF, erf, -5, 5, true, false, 1.5, 0},
    {TJ_OP_ERFC, erfc, -5, 10.05, true, false, 7, 0},
    // Up to the largest f32: the reduction is exact for every finite x.
    {TJ_OP_SIN, sin, -1e5, 1e5, true, false, 2, 128},
    {TJ_OP_COS, cos, -1e5, 1e5, true, false, 2, 128},
    {TJ_OP_ASIN, asin, -1, 1, true, false, 2, 0},
    {TJ_OP_ACOS, acos, -1, 1, true, false, 2, 0},
    {TJ_OP_ATAN, atan, -100, 100, true, false, 2.5, 0},
};

#define SWEEP_N (1 << 20)

// The f32 ulp of |x|'s binade; results in the subnormal range use the
// subnormal spacing.
static double ulp32(double x) { return ulp_of(TJ_DTYPE_F32, x); }

// Error of |got| in f32 ulps against the exact |want|; a |want| beyond the
// f32 range must have overflowed to the same infinity.
static double err32(float got, double want) {
  if (isinf((float)want)) return got == (float)want ? 0 : INFINITY;
  if (isnan(want)) return isnan(got) ? 0 : INFINITY;
  return fabs((double)got - want) / ulp32(want);
}

static tj_kir_t* unary_kernel(tj_op_t op, tj_dtype_t dt) {
  char name[64];
  snprintf(name, sizeof(name), "vm_%s_%s", tj_op_info(op)->name,
           tj_dtype_name(dt));
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_POINTWISE, name, &k));
  uint32_t n = tj_kir_add_param(k, "N");
  tj_kir_ival_t dims[1] = {tj_kir_runtime(n)};
  tj_kir_set_space(k, 1, dims);
  uint32_t x = tj_kir_add_buffer(k, "x", dt, TJ_KIR_INPUT, kUnit);
  uint32_t y = tj_kir_add_buffer(k, "y", dt, TJ_KIR_OUTPUT, kUnit);
  tj_kir_store(k, y, tj_kir_unary(k, op, tj_kir_load(k, x)));
  CHECK_OK(tj_kir_finalize(k));
  return k;
}

static void make_inputs(const sweep_t* s, float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double v;
    if (s->log_uniform && (i & 1)) {
      v = ldexp(rng_uniform(1, 2),
                (int)rng_uniform(-149, s->log_max ? s->log_max : 8));
      if (!s->positive_only && (i & 2)) v = -v;
    } else {
      v = rng_uniform(s->lo, s->hi);
    }
    x[i] = (float)v;
  }
}

TEST(f32_accuracy_sweeps) {
  float* x = malloc(SWEEP_N * sizeof(float));
  float* y = malloc(SWEEP_N * sizeof(float));
  printf("# max ulp error, f32, %d inputs each:\n", SWEEP_N);
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kSweeps); ++i) {
    const sweep_t* s = &kSweeps[i];
    make_inputs(s, x, SWEEP_N);
    tj_kir_t* k = unary_kernel(s->op, TJ_DTYPE_F32);
    for (int j = 0; j < g_num_jits; ++j) {
      compiled_t c;
      if (!compile_kernel(g_jits[j], k, &c)) continue;
      int64_t scalars[1] = {SWEEP_N};
      void* bufs[2] = {x, y};
      run_kernel(g_jits[j], k, c.fn, bufs, scalars, NULL);
      double worst = 0, at = 0;
      for (int64_t e = 0; e < SWEEP_N; ++e) {
        double err = err32(y[e], s->ref((double)x[e]));
        if (!(err <= worst)) {  // also catches NaN
          worst = isnan(err) ? INFINITY : err;
          at = x[e];
        }
      }
      printf("#   %-8s %-5s %6.3f ulp (at %.9g)\n", tj_op_info(s->op)->name,
             g_isa_names[j], worst, at);
      CHECK(worst <= s->bound);
      release_kernel(&c);
    }
    tj_kir_destroy(k);
  }
  free(x);
  free(y);
}

// pow through double exp/log: positive bases over a wide exponent range,
// negative bases with integer exponents.
TEST(pow_accuracy) {
  const int64_t n = 1 << 18;
  float* x = malloc((size_t)n * 4);
  float* e = malloc((size_t)n * 4);
  float* y = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; ++i) {
    if (i & 1) {
      x[i] = (float)rng_uniform(-10, 10);
      e[i] = (float)floor(rng_uniform(-30, 30));
    } else {
      x[i] = (float)ldexp(rng_uniform(1, 2), (int)rng_uniform(-20, 20));
      e[i] = (float)rng_uniform(-4, 4);
    }
  }
  tj_kir_t* k = NULL;
  CHECK_OK(
      tj_kir_create(tj_allocator_system(), TJ_KIR_POINTWISE, "vm_pow", &k));
  uint32_t np = tj_kir_add_param(k, "N");
  tj_kir_ival_t dims[1] = {tj_kir_runtime(np)};
  tj_kir_set_space(k, 1, dims);
  uint32_t bx = tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_INPUT, kUnit);
  uint32_t be = tj_kir_add_buffer(k, "e", TJ_DTYPE_F32, TJ_KIR_INPUT, kUnit);
  uint32_t by = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, kUnit);
  tj_kir_store(
      k, by,
      tj_kir_binary(k, TJ_OP_POW, tj_kir_load(k, bx), tj_kir_load(k, be)));
  CHECK_OK(tj_kir_finalize(k));
  for (int j = 0; j < g_num_jits; ++j) {
    compiled_t c;
    if (!compile_kernel(g_jits[j], k, &c)) continue;
    int64_t scalars[1] = {n};
    void* bufs[3] = {x, e, y};
    run_kernel(g_jits[j], k, c.fn, bufs, scalars, NULL);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      double want = pow(x[i], e[i]);
      if (isinf(want) || fabs(want) > 3.4e38 || fabs(want) < 1.2e-38) {
        continue;  // overflow/underflow checked with the special values
      }
      double err = fabs((double)y[i] - want) / ulp32(want);
      if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
    }
    printf("#   %-8s %-5s %6.3f ulp\n", "pow", g_isa_names[j], worst);
    CHECK(worst <= 1);
    release_kernel(&c);
  }
  tj_kir_destroy(k);
  free(x);
  free(e);
  free(y);
}

// Special values, exactly, as C99 defines them.
TEST(special_values) {
  static const struct {
    tj_op_t op;
    float in, out;
    bool nan_out;
  } cases[] = {
      {TJ_OP_EXP, -INFINITY, 0, false},
      {TJ_OP_EXP, INFINITY, INFINITY, false},
      {TJ_OP_EXP, NAN, 0, true},
      {TJ_OP_EXP, 0, 1, false},
      {TJ_OP_EXP, 89, INFINITY, false},
      {TJ_OP_EXP, -104, 0, false},
      {TJ_OP_LOG, 0, -INFINITY, false},
      {TJ_OP_LOG, -0.0f, -INFINITY, false},
      {TJ_OP_LOG, -1, 0, true},
      {TJ_OP_LOG, INFINITY, INFINITY, false},
      {TJ_OP_LOG, 1, 0, false},
      {TJ_OP_LOG, NAN, 0, true},
      {TJ_OP_TANH, INFINITY, 1, false},
      {TJ_OP_TANH, -INFINITY, -1, false},
      {TJ_OP_TANH, NAN, 0, true},
      {TJ_OP_TANH, 0, 0, false},
      {TJ_OP_ERF, INFINITY, 1, false},
      {TJ_OP_ERF, -INFINITY, -1, false},
      {TJ_OP_ERF, NAN, 0, true},
      {TJ_OP_ERF, 0, 0, false},
      {TJ_OP_ERFC, INFINITY, 0, false},
      {TJ_OP_ERFC, -INFINITY, 2, false},
      {TJ_OP_ERFC, NAN, 0, true},
      {TJ_OP_ERFC, 0, 1, false},
      {TJ_OP_ERFC, 11, 0, false},
      {TJ_OP_SIGMOID, INFINITY, 1, false},
      {TJ_OP_SIGMOID, -INFINITY, 0, false},
      {TJ_OP_SIGMOID, NAN, 0, true},
      {TJ_OP_SIGMOID, 0, 0.5f, false},
      {TJ_OP_SIN, INFINITY, 0, true},
      {TJ_OP_SIN, NAN, 0, true},
      {TJ_OP_SIN, 0, 0, false},
      {TJ_OP_COS, -INFINITY, 0, true},
      {TJ_OP_COS, 0, 1, false},
      {TJ_OP_ASIN, 1, (float)M_PI_2, false},
      {TJ_OP_ASIN, -1, (float)-M_PI_2, false},
      {TJ_OP_ASIN, 1.0000001f, 0, true},
      {TJ_OP_ASIN, -2, 0, true},
      {TJ_OP_ASIN, INFINITY, 0, true},
      {TJ_OP_ASIN, NAN, 0, true},
      {TJ_OP_ACOS, 1, 0, false},
      {TJ_OP_ACOS, -1, (float)M_PI, false},
      {TJ_OP_ACOS, 0, (float)M_PI_2, false},
      {TJ_OP_ACOS, -1.0000001f, 0, true},
      {TJ_OP_ACOS, NAN, 0, true},
      {TJ_OP_ATAN, INFINITY, (float)M_PI_2, false},
      {TJ_OP_ATAN, -INFINITY, (float)-M_PI_2, false},
      {TJ_OP_ATAN, 1, (float)M_PI_4, false},
      {TJ_OP_ATAN, NAN, 0, true},
  };
  for (int j = 0; j < g_num_jits; ++j) {
    for (size_t i = 0; i < TJ_ARRAY_SIZE(cases); ++i) {
      tj_kir_t* k = unary_kernel(cases[i].op, TJ_DTYPE_F32);
      compiled_t c;
      if (compile_kernel(g_jits[j], k, &c)) {
        float x[17], y[17];
        for (int e = 0; e < 17; ++e) x[e] = cases[i].in;
        int64_t scalars[1] = {17};
        void* bufs[2] = {x, y};
        run_kernel(g_jits[j], k, c.fn, bufs, scalars, NULL);
        bool ok = true;
        for (int e = 0; e < 17; ++e) {
          ok &= cases[i].nan_out ? isnan(y[e]) : y[e] == cases[i].out;
        }
        if (!ok) {
          fprintf(stderr, "  %s(%g) = %g on %s\n",
                  tj_op_info(cases[i].op)->name, cases[i].in, y[0],
                  g_isa_names[j]);
        }
        CHECK(ok);
        release_kernel(&c);
      }
      tj_kir_destroy(k);
    }
  }
}

// The sign of zero (C99 F.10): the odd functions give -0 at -0, and keep
// the sign of tiny and subnormal inputs; rsqrt(-0) is -inf. Checked as
// signbit and value against libm, in f32 and f64, on every level.
TEST(signed_zeros) {
  static const tj_op_t ops[] = {
      TJ_OP_TANH,    TJ_OP_SIN, TJ_OP_ERF,  TJ_OP_SQRT, TJ_OP_RSQRT,
      TJ_OP_SIGMOID, TJ_OP_COS, TJ_OP_ASIN, TJ_OP_ATAN, TJ_OP_ACOS};
  static const double ins[] = {-0.0,  0.0,     -1e-30, 1e-30, -1e-40,
                               1e-40, -1e-300, -1e-5,  1e-5,  -0.3};
  enum { N = sizeof(ins) / sizeof(ins[0]) };
  static const tj_dtype_t dts[] = {TJ_DTYPE_F32, TJ_DTYPE_F64};
  for (size_t t = 0; t < 2; ++t) {
    tj_dtype_t dt = dts[t];
    for (size_t o = 0; o < TJ_ARRAY_SIZE(ops); ++o) {
      tj_kir_t* k = unary_kernel(ops[o], dt);
      for (int j = 0; j < g_num_jits; ++j) {
        compiled_t c;
        if (!compile_kernel(g_jits[j], k, &c)) continue;
        float xf[N], yf[N];
        double xd[N], yd[N];
        for (int e = 0; e < N; ++e) {
          xf[e] = (float)ins[e];
          xd[e] = ins[e];
        }
        int64_t scalars[1] = {N};
        void* bufs[2] = {dt == TJ_DTYPE_F32 ? (void*)xf : (void*)xd,
                         dt == TJ_DTYPE_F32 ? (void*)yf : (void*)yd};
        run_kernel(g_jits[j], k, c.fn, bufs, scalars, NULL);
        for (int e = 0; e < N; ++e) {
          double x = dt == TJ_DTYPE_F32 ? (double)xf[e] : xd[e];
          double got = dt == TJ_DTYPE_F32 ? (double)yf[e] : yd[e];
          double want;
          switch (ops[o]) {
            case TJ_OP_TANH:
              want = tanh(x);
              break;
            case TJ_OP_SIN:
              want = sin(x);
              break;
            case TJ_OP_ERF:
              want = erf(x);
              break;
            case TJ_OP_SQRT:
              want = sqrt(x);
              break;
            case TJ_OP_RSQRT:
              want = 1.0 / sqrt(x);
              break;
            case TJ_OP_SIGMOID:
              want = ref_sigmoid(x);
              break;
            case TJ_OP_ASIN:
              want = asin(x);
              break;
            case TJ_OP_ATAN:
              want = atan(x);
              break;
            case TJ_OP_ACOS:
              want = acos(x);
              break;
            default:
              want = cos(x);
              break;
          }
          if (dt == TJ_DTYPE_F32) want = (double)(float)want;
          // NaN (sqrt of a negative) as NaN; else signs always, values
          // exactly at zeros and infinities, within a few ulps elsewhere
          // (the sweeps bound them).
          bool ok = isnan(want)
                        ? isnan(got)
                        : signbit(got) == signbit(want) &&
                              (want == 0 || isinf(want)
                                   ? got == want
                                   : fabs(got - want) <= 4 * ulp_of(dt, want));
          ++g_test_checks;
          if (!ok) {
            ++g_test_failures;
            fprintf(stderr, "  %s(%g) = %g, want %g (%s, %s)\n",
                    tj_op_info(ops[o])->name, x, got, want, tj_dtype_name(dt),
                    g_isa_names[j]);
          }
        }
        release_kernel(&c);
      }
      tj_kir_destroy(k);
    }
  }
}

// f64 exp and log are vectorized too: within 1.5 ulp of long double libm.
TEST(f64_exp_log) {
  const int64_t n = 1 << 18;
  double* x = malloc((size_t)n * 8);
  double* y = malloc((size_t)n * 8);
  static const tj_op_t ops[] = {TJ_OP_EXP, TJ_OP_LOG};
  for (size_t o = 0; o < 2; ++o) {
    for (int64_t i = 0; i < n; ++i) {
      x[i] = ops[o] == TJ_OP_EXP
                 ? rng_uniform(-745, 709)
                 : ldexp(rng_uniform(1, 2), (int)rng_uniform(-1074, 1023));
    }
    tj_kir_t* k = unary_kernel(ops[o], TJ_DTYPE_F64);
    for (int j = 0; j < g_num_jits; ++j) {
      compiled_t c;
      if (!compile_kernel(g_jits[j], k, &c)) continue;
      int64_t scalars[1] = {n};
      void* bufs[2] = {x, y};
      run_kernel(g_jits[j], k, c.fn, bufs, scalars, NULL);
      double worst = 0;
      for (int64_t i = 0; i < n; ++i) {
        long double want = ops[o] == TJ_OP_EXP ? expl((long double)x[i])
                                               : logl((long double)x[i]);
        double w = (double)want;
        double err =
            (double)fabsl((long double)y[i] - want) / ulp_of(TJ_DTYPE_F64, w);
        if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
      }
      printf("#   %-8s %-5s %6.3f ulp (f64)\n", tj_op_info(ops[o])->name,
             g_isa_names[j], worst);
      CHECK(worst <= 1.5);
      release_kernel(&c);
    }
    tj_kir_destroy(k);
  }
  free(x);
  free(y);
}

int main(void) {
  open_jits();
  RUN_TEST(f32_accuracy_sweeps);
  RUN_TEST(pow_accuracy);
  RUN_TEST(special_values);
  RUN_TEST(signed_zeros);
  RUN_TEST(f64_exp_log);
  close_jits();
  TEST_MAIN_END();
}
