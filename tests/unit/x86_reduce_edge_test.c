// Reductions at their edges, end to end (tj_compile on x86, then
// tj_executable_run, against tj_reference_run): axes whose fixed size is 0
// (the identity, or NaN for mean), a contraction with K = 0, argmax over an
// empty axis, max and min on bool (logical or and and), the sign of zero
// through tanh, sin and rsqrt, max and min over mixed signed zeros, and
// layer_norm of rows of equal values and of rows far from 0.

#include "lib/dtype.h"
#include "tests/unit/test.h"

#define MAX_IO 8

static tj_context_t* g_ctx;
static uint64_t g_rng = 0x2545f4914f6cdd1dull;

static uint64_t rng_next(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

typedef struct io_t {
  tj_tensor_t t[MAX_IO];
  void* data[MAX_IO];
  int64_t dims[MAX_IO][TJ_MAX_RANK];
  int n;
} io_t;

static int64_t numel(const tj_tensor_t* t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t->rank; ++d) n *= t->shape[d];
  return n;
}

// Tensor |slot| of |io|: |dtype| and |dims| (malloc'd; at least one byte)
// filled with |fill| repeated, or random values in [-4, 4) (bool: 0 or 1)
// when |fill| is NAN.
static void make(io_t* io, int slot, tj_dtype_t dtype, int32_t rank,
                 const int64_t* dims, double fill) {
  int64_t n = 1;
  for (int32_t d = 0; d < rank; ++d) n *= dims[d];
  size_t bytes = (size_t)n * tj_dtype_size(dtype);
  void* p = malloc(bytes ? bytes : 1);
  for (int64_t i = 0; i < n; ++i) {
    double v = fill;
    if (isnan(fill)) {
      v = dtype == TJ_DTYPE_BOOL ? (double)(rng_next() % 2)
                                 : (double)(rng_next() % 64) / 8.0 - 4.0;
    }
    if (tj_dtype_is_float(dtype)) {
      tj_store_f64(dtype, p, i, v);
    } else {
      tj_store_i64(dtype, p, i, (int64_t)v);
    }
  }
  memcpy(io->dims[slot], dims, sizeof(int64_t) * (size_t)rank);
  io->data[slot] = p;
  io->t[slot] = tj_tensor_make(p, dtype, rank, io->dims[slot]);
}

static void free_io(io_t* io) {
  for (int i = 0; i < io->n; ++i) free(io->data[i]);
  io->n = 0;
}

// Output tensors for |exe| and |in|, each element |sentinel|.
static bool make_outputs(const tj_executable_t* exe, const tj_graph_t* g,
                         const io_t* in, double sentinel, io_t* out) {
  out->n = tj_graph_num_outputs(g);
  for (int i = 0; i < out->n; ++i) {
    int32_t rank = 0;
    int64_t dims[TJ_MAX_RANK];
    tj_status_t s =
        tj_executable_output_shape(exe, in->t, in->n, i, &rank, dims);
    if (s) {
      CHECK_OK(s);
      out->n = i;
      free_io(out);
      return false;
    }
    tj_dtype_t dt = tj_graph_value_dtype(g, tj_graph_output_value(g, i));
    make(out, i, dt, rank, dims, sentinel);
  }
  return true;
}

// Element i of |t| as a double (NaN stays NaN; -0 stays -0).
static double elem(const tj_tensor_t* t, int64_t i) {
  if (tj_dtype_is_float(t->dtype)) return tj_load_f64(t->dtype, t->data, i);
  return (double)tj_load_i64(t->dtype, t->data, i);
}

// Runs |g| (finalized) on |in| with x86 and the reference, outputs
// pre-filled with a sentinel; every element must be equal, NaN where the
// reference has NaN and of the same sign (zeros and infinities too).
// |rtol| bounds the difference of finite values, relative above 1.
static void check_graph(tj_graph_t* g, const io_t* in, double rtol,
                        const char* what) {
  tj_executable_t* exe = NULL;
  tj_executable_t* ref = NULL;
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  CHECK_OK(tj_compile(g, &opts, &exe));
  opts.target = TJ_TARGET_REFERENCE;
  CHECK_OK(tj_compile(g, &opts, &ref));
  // Two sentinels: for bool, one of them differs from any answer.
  for (int pass = 0; pass < 2 && exe && ref; ++pass) {
    io_t got = {0}, want = {0};
    if (make_outputs(exe, g, in, pass ? 0 : 77, &got) &&
        make_outputs(ref, g, in, -55, &want)) {
      CHECK_OK(tj_executable_run(exe, in->t, in->n, got.t, got.n));
      CHECK_OK(tj_executable_run(ref, in->t, in->n, want.t, want.n));
      for (int o = 0; o < got.n; ++o) {
        int64_t n = numel(&got.t[o]);
        for (int64_t i = 0; i < n; ++i) {
          double a = elem(&got.t[o], i), b = elem(&want.t[o], i);
          bool ok =
              isnan(b) ? isnan(a)
                       : !isnan(a) && signbit(a) == signbit(b) &&
                             (a == b || fabs(a - b) <= rtol * fmax(fabs(b), 1));
          ++g_test_checks;
          if (!ok) {
            ++g_test_failures;
            fprintf(stderr, "%s: %s: output %d element %lld: x86 %g, ref %g\n",
                    g_test_current, what, o, (long long)i, a, b);
            break;
          }
        }
      }
    }
    free_io(&got);
    free_io(&want);
  }
  tj_executable_release(exe);
  tj_executable_release(ref);
}

typedef tj_value_t (*reduce_fn)(tj_graph_t*, tj_value_t, int32_t,
                                const int32_t*, bool);

typedef struct reduce_op_t {
  const char* name;
  reduce_fn fn;
} reduce_op_t;

static const reduce_op_t kReduceOps[] = {
    {"sum", tj_graph_sum}, {"mean", tj_graph_mean}, {"max", tj_graph_max},
    {"min", tj_graph_min}, {"prod", tj_graph_prod},
};

// op(x) over |axes| for x of a fixed |dims|, alone and with a pointwise
// epilogue fused after it.
static void check_reduce(const reduce_op_t* op, tj_dtype_t dt, int32_t rank,
                         const int64_t* dims, int32_t num_axes,
                         const int32_t* axes, bool keepdims) {
  char what[128];
  int len = snprintf(what, sizeof(what), "%s %s[", op->name, tj_dtype_name(dt));
  for (int32_t d = 0; d < rank; ++d) {
    len += snprintf(what + len, sizeof(what) - (size_t)len, "%s%lld",
                    d ? "," : "", (long long)dims[d]);
  }
  len += snprintf(what + len, sizeof(what) - (size_t)len, "] axes");
  for (int32_t a = 0; a < num_axes; ++a) {
    len += snprintf(what + len, sizeof(what) - (size_t)len, " %d", axes[a]);
  }
  snprintf(what + len, sizeof(what) - (size_t)len, "%s",
           keepdims ? " keepdims" : "");
  tj_graph_t* g;
  CHECK_OK(tj_graph_create(g_ctx, "edge", &g));
  tj_value_t x = tj_graph_input(g, dt, rank, dims, "x");
  tj_value_t y = op->fn(g, x, num_axes, axes, keepdims);
  tj_graph_output(g, y, "y");
  if (dt != TJ_DTYPE_BOOL) {
    // A MAP/ROW epilogue in the same kernel: y * 2 + 1.
    tj_value_t two = tj_graph_scalar(g, dt, 2);
    tj_graph_output(
        g, tj_graph_add(g, tj_graph_mul(g, y, two), tj_graph_scalar(g, dt, 1)),
        "z");
  }
  tj_status_t s = tj_graph_finalize(g);
  if (s) {
    CHECK_OK(s);
    tj_graph_destroy(g);
    return;
  }
  io_t in = {0};
  in.n = 1;
  make(&in, 0, dt, rank, dims, NAN);
  check_graph(g, &in, 1e-6, what);
  free_io(&in);
  tj_graph_destroy(g);
}

// Every reduction over axes whose fixed size is 0: the output must hold
// the identity (sum 0, prod 1, max -inf, min +inf; bool max false, min
// true) or NaN (mean), not the caller's old bytes.
TEST(empty_fixed_axes) {
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_F32, TJ_DTYPE_F64,
                                      TJ_DTYPE_F16, TJ_DTYPE_I32,
                                      TJ_DTYPE_I8,  TJ_DTYPE_BOOL};
  static const int64_t k03[2] = {0, 3}, k30[2] = {3, 0}, k203[3] = {2, 0, 33};
  static const int32_t kAxis0[1] = {0}, kAxis1[1] = {1}, kAxes01[2] = {0, 1};
  for (size_t t = 0; t < sizeof(kTypes) / sizeof(kTypes[0]); ++t) {
    tj_dtype_t dt = kTypes[t];
    for (size_t o = 0; o < sizeof(kReduceOps) / sizeof(kReduceOps[0]); ++o) {
      const reduce_op_t* op = &kReduceOps[o];
      bool is_mean = op->fn == tj_graph_mean;
      bool is_minmax = op->fn == tj_graph_max || op->fn == tj_graph_min;
      if (is_mean && !tj_dtype_is_float(dt)) continue;
      if (dt == TJ_DTYPE_BOOL && !is_minmax) continue;
      for (int keep = 0; keep < 2; ++keep) {
        check_reduce(op, dt, 2, k03, 1, kAxis0, keep);
        check_reduce(op, dt, 2, k03, 0, NULL, keep);
        check_reduce(op, dt, 2, k03, 2, kAxes01, keep);
        check_reduce(op, dt, 2, k30, 1, kAxis1, keep);
        check_reduce(op, dt, 2, k30, 1, kAxis0, keep);  // empty output
        check_reduce(op, dt, 3, k203, 1, kAxis1, keep);
      }
    }
  }
}

// x @ w (+ b, gelu) with a contraction dim of fixed size 0: zeros, plus
// the epilogue.
TEST(empty_contraction) {
  for (int sym = 0; sym < 2; ++sym) {
    for (int epilogue = 0; epilogue < 2; ++epilogue) {
      tj_graph_t* g;
      CHECK_OK(tj_graph_create(g_ctx, "k0", &g));
      int64_t B = sym ? tj_graph_symbol(g, "B") : 5;
      tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 0}, "x");
      tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){0, 7}, "w");
      tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){7}, "b");
      tj_value_t y = tj_graph_matmul(g, x, w);
      if (epilogue) y = tj_graph_gelu(g, tj_graph_add(g, y, b), false);
      tj_graph_output(g, y, "y");
      CHECK_OK(tj_graph_finalize(g));
      io_t in = {0};
      in.n = 3;
      make(&in, 0, TJ_DTYPE_F32, 2, (int64_t[]){5, 0}, 1);
      make(&in, 1, TJ_DTYPE_F32, 2, (int64_t[]){0, 7}, 1);
      make(&in, 2, TJ_DTYPE_F32, 1, (int64_t[]){7}, NAN);
      check_graph(g, &in, 1e-5, epilogue ? "gelu(x@w+b), K=0" : "x@w, K=0");
      free_io(&in);
      tj_graph_destroy(g);
    }
  }
}

// argmax has no answer over an empty axis: INVALID_ARGUMENT naming the op
// when the graph is built (a fixed 0), and when it runs (a symbolic one),
// on x86 and the reference alike.
TEST(argmax_empty_axis) {
  tj_graph_t* g;
  CHECK_OK(tj_graph_create(g_ctx, "argmax0", &g));
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 0}, "x");
  tj_graph_output(g, tj_graph_argmax(g, x, 1, false), "y");
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "axis 1 is empty",
               tj_graph_finalize(g));
  tj_graph_destroy(g);

  CHECK_OK(tj_graph_create(g_ctx, "argmaxB", &g));
  int64_t B = tj_graph_symbol(g, "B");
  x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, B}, "x");
  tj_graph_output(g, tj_graph_argmax(g, x, 1, false), "y");
  CHECK_OK(tj_graph_finalize(g));
  float xs[1];
  int64_t ys[3] = {0};
  tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 2, (int64_t[]){3, 0});
  tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_I64, 1, (int64_t[]){3});
  for (int ref = 0; ref < 2; ++ref) {
    tj_compile_options_t opts;
    tj_compile_options_initialize(&opts);
    if (ref) opts.target = TJ_TARGET_REFERENCE;
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &opts, &exe));
    if (!exe) continue;
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "is empty",
                 tj_executable_run(exe, &in, 1, &out, 1));
    tj_executable_release(exe);
  }
  tj_graph_destroy(g);
}

// max and min of bool are any and all (ONNX's ReduceMax/Min on bool), on
// rows, columns and everything, against the reference and against any/all
// computed here.
TEST(bool_max_min) {
  static const int32_t kAxis0[1] = {0}, kAxis1[1] = {1};
  for (int64_t rows = 1; rows <= 67; rows += 33) {
    for (int64_t cols = 1; cols <= 301; cols += 60) {
      int64_t dims[2] = {rows, cols};
      for (int o = 2; o < 4; ++o) {
        check_reduce(&kReduceOps[o], TJ_DTYPE_BOOL, 2, dims, 1, kAxis0, false);
        check_reduce(&kReduceOps[o], TJ_DTYPE_BOOL, 2, dims, 1, kAxis1, false);
        check_reduce(&kReduceOps[o], TJ_DTYPE_BOOL, 2, dims, 0, NULL, false);
      }
    }
  }
  // Exact answers: any/all of rows with one odd element.
  tj_graph_t* g;
  CHECK_OK(tj_graph_create(g_ctx, "anyall", &g));
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_BOOL, 2, (int64_t[]){4, 37}, "x");
  tj_graph_output(g, tj_graph_max(g, x, 1, kAxis1, false), "any");
  tj_graph_output(g, tj_graph_min(g, x, 1, kAxis1, false), "all");
  CHECK_OK(tj_graph_finalize(g));
  bool xs[4][37], any[4], all[4];
  memset(xs, 0, sizeof(xs));
  memset(xs[2], 1, sizeof(xs[2]));
  memset(xs[3], 1, sizeof(xs[3]));
  xs[1][36] = true;   // row 1: one true
  xs[3][17] = false;  // row 3: one false
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, NULL, &exe));
  if (exe) {
    tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_BOOL, 2, (int64_t[]){4, 37});
    tj_tensor_t out[2] = {
        tj_tensor_make(any, TJ_DTYPE_BOOL, 1, (int64_t[]){4}),
        tj_tensor_make(all, TJ_DTYPE_BOOL, 1, (int64_t[]){4})};
    CHECK_OK(tj_executable_run(exe, &in, 1, out, 2));
    CHECK(!any[0] && any[1] && any[2] && any[3]);
    CHECK(!all[0] && !all[1] && all[2] && !all[3]);
    tj_executable_release(exe);
  }
  tj_graph_destroy(g);
}

// The sign of zero end to end: tanh and sin of -0 and of inputs that
// underflow to -0 are -0 (C99), and rsqrt of that is -inf, as the
// reference gives (the chain the random differential test found).
TEST(signed_zero_chain) {
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_F32, TJ_DTYPE_F64, TJ_DTYPE_F16,
                                      TJ_DTYPE_BF16};
  for (size_t t = 0; t < sizeof(kTypes) / sizeof(kTypes[0]); ++t) {
    tj_dtype_t dt = kTypes[t];
    tj_graph_t* g;
    CHECK_OK(tj_graph_create(g_ctx, "signed_zero", &g));
    tj_value_t x = tj_graph_input(g, dt, 1, (int64_t[]){19}, "x");
    tj_value_t w = tj_graph_input(g, dt, 1, (int64_t[]){19}, "w");
    tj_value_t v = tj_graph_mul(g, x, w);  // underflows to -0
    tj_graph_output(g, tj_graph_tanh(g, v), "tanh");
    tj_graph_output(g, tj_graph_sin(g, v), "sin");
    tj_graph_output(g, tj_graph_erf(g, v), "erf");
    tj_graph_output(g, tj_graph_rsqrt(g, tj_graph_tanh(g, v)), "rsqrt_tanh");
    tj_graph_output(g, tj_graph_rsqrt(g, tj_graph_sin(g, v)), "rsqrt_sin");
    CHECK_OK(tj_graph_finalize(g));
    io_t in = {0};
    in.n = 2;
    make(&in, 0, dt, 1, (int64_t[]){19}, -0.0);
    make(&in, 1, dt, 1, (int64_t[]){19}, 1e-30);
    for (int i = 0; i < 19; i += 2) tj_store_f64(dt, in.data[0], i, 1e-30);
    for (int i = 0; i < 19; i += 3) tj_store_f64(dt, in.data[1], i, -1.0);
    check_graph(g, &in, 0, "signed zeros");
    free_io(&in);
    tj_graph_destroy(g);
  }
}

// max and min over zeros of both signs: -0 is below +0 (IEEE 754-2019), so
// the answer does not depend on the order in which lanes combine. The
// builder fuzzer found the AVX2 tier's lane tree giving -0 where the
// reference, which then kept the first of equal values, gave +0 (min over
// in2 * 0). Every tier, rows and column schedules and a full reduction,
// every float dtype; the answer is also checked exactly: min is -0 where
// any reduced zero is -0, max is +0 where any is +0.
TEST(signed_zero_max_min) {
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_F32, TJ_DTYPE_F64, TJ_DTYPE_F16,
                                      TJ_DTYPE_BF16};
  static const int32_t kAxis0[1] = {0}, kAxis1[1] = {1};
  tj_context_t* ctxs[3];
  const char* isas[3];
  int num_tiers = tj_test_tier_contexts(ctxs, isas);
  for (int tier = 0; tier < num_tiers; ++tier) {
    for (size_t t = 0; t < sizeof(kTypes) / sizeof(kTypes[0]); ++t) {
      tj_dtype_t dt = kTypes[t];
      const int64_t dims[2] = {7, 67};
      tj_graph_t* g;
      CHECK_OK(tj_graph_create(ctxs[tier], "zeros", &g));
      tj_value_t x = tj_graph_input(g, dt, 2, dims, "x");
      tj_graph_output(g, tj_graph_min(g, x, 1, kAxis1, false), "min_rows");
      tj_graph_output(g, tj_graph_max(g, x, 1, kAxis1, false), "max_rows");
      tj_graph_output(g, tj_graph_min(g, x, 1, kAxis0, false), "min_cols");
      tj_graph_output(g, tj_graph_max(g, x, 1, kAxis0, false), "max_cols");
      tj_graph_output(g, tj_graph_min(g, x, 0, NULL, false), "min_all");
      tj_graph_output(g, tj_graph_max(g, x, 0, NULL, false), "max_all");
      CHECK_OK(tj_graph_finalize(g));
      io_t in = {0};
      in.n = 1;
      make(&in, 0, dt, 2, dims, 0.0);
      // Row 0 all +0, row 1 all -0, the others mixed at random; column 0
      // all +0 below row 1.
      for (int64_t i = 0; i < dims[0]; ++i) {
        for (int64_t j = 0; j < dims[1]; ++j) {
          bool neg = i == 1 || (i > 1 && j > 0 && rng_next() % 3 == 0);
          tj_store_f64(dt, in.data[0], i * dims[1] + j, neg ? -0.0 : 0.0);
        }
      }
      check_graph(g, &in, 0, isas[tier]);
      tj_executable_t* exe = NULL;
      CHECK_OK(tj_compile(g, NULL, &exe));
      io_t out = {0};
      if (exe && make_outputs(exe, g, &in, 5, &out)) {
        CHECK_OK(tj_executable_run(exe, in.t, in.n, out.t, out.n));
        for (int64_t i = 0; i < dims[0]; ++i) {
          bool any_neg = false, any_pos = false;
          for (int64_t j = 0; j < dims[1]; ++j) {
            bool neg = signbit(elem(&in.t[0], i * dims[1] + j));
            any_neg |= neg;
            any_pos |= !neg;
          }
          CHECK(signbit(elem(&out.t[0], i)) == any_neg);
          CHECK(signbit(elem(&out.t[1], i)) == !any_pos);
        }
        CHECK(signbit(elem(&out.t[4], 0)) && !signbit(elem(&out.t[5], 0)));
        CHECK(!signbit(elem(&out.t[3], 0)) && signbit(elem(&out.t[2], 1)));
      }
      free_io(&out);
      tj_executable_release(exe);
      free_io(&in);
      tj_graph_destroy(g);
    }
    tj_context_destroy(ctxs[tier]);
  }
}

// layer_norm centres shifted data (lib/passes/decompose.c): a row of equal
// values gives exact zeros, so the output is beta itself (and NaN where
// gamma is infinite, 0 * inf, as in the reference), and a row offset far
// from 0 against its spread (1e4 + k 2^-10) keeps its normalized values'
// accuracy, which x - mean(x) loses to mean's rounding (2^-24 * 1e4
// against a spread of 1e-2). Over a constant last axis (the row's first
// element is the shift) and a symbolic one (its max).
TEST(layer_norm_shifted_rows) {
  tj_context_t* ctxs[3];
  const char* isas[3];
  int num_tiers = tj_test_tier_contexts(ctxs, isas);
  for (int tier = 0; tier < num_tiers; ++tier) {
    for (int symbolic = 0; symbolic < 2; ++symbolic) {
      enum { kRows = 3, kCols = 37 };
      tj_graph_t* g;
      CHECK_OK(tj_graph_create(ctxs[tier], "shifted", &g));
      int64_t n = symbolic ? tj_graph_symbol(g, "N") : kCols;
      const int64_t xdims[2] = {kRows, n}, wdims[1] = {n};
      tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, xdims, "x");
      tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 1, wdims, "w");
      tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, wdims, "b");
      tj_graph_output(g, tj_graph_layer_norm(g, x, w, b, 1e-5), "y");
      CHECK_OK(tj_graph_finalize(g));
      const int64_t in_x[2] = {kRows, kCols}, in_w[1] = {kCols};
      io_t in = {0};
      in.n = 3;
      make(&in, 0, TJ_DTYPE_F32, 2, in_x, NAN);
      make(&in, 1, TJ_DTYPE_F32, 1, in_w, NAN);
      make(&in, 2, TJ_DTYPE_F32, 1, in_w, NAN);
      tj_store_f64(TJ_DTYPE_F32, in.data[1], 5, INFINITY);
      for (int64_t j = 0; j < kCols; ++j) {
        tj_store_f64(TJ_DTYPE_F32, in.data[0], j, 0.9078);  // row 0: equal
        tj_store_f64(TJ_DTYPE_F32, in.data[0], kCols + j,   // row 1: offset
                     1e4 + ldexp((double)((j * 7) % 23) - 11, -10));
      }
      check_graph(g, &in, 1e-4, isas[tier]);
      tj_executable_t* exe = NULL;
      CHECK_OK(tj_compile(g, NULL, &exe));
      io_t out = {0};
      if (exe && make_outputs(exe, g, &in, 5, &out)) {
        CHECK_OK(tj_executable_run(exe, in.t, in.n, out.t, out.n));
        for (int64_t j = 0; j < kCols; ++j) {
          double y = elem(&out.t[0], j), beta = elem(&in.t[2], j);
          CHECK(j == 5 ? isnan(y) : y == beta);
        }
      }
      free_io(&out);
      tj_executable_release(exe);
      free_io(&in);
      tj_graph_destroy(g);
    }
    tj_context_destroy(ctxs[tier]);
  }
}

// Zero-mean rows whose first element (layer_norm's shift s) is far out:
// mean(x - s) is then rounded at s's scale, an error shared by the whole
// row, which the corrected two-pass centring (c - mean(c)) takes out. Its
// absence put CUDA's rows 1.5e-6 off (cuda_row_test); here s is 64 against
// a spread of 2, which without the correction is ~1e-5 off.
TEST(layer_norm_large_first_element) {
  tj_context_t* ctxs[3];
  const char* isas[3];
  int num_tiers = tj_test_tier_contexts(ctxs, isas);
  static const int64_t kCols[] = {509, 4097};
  for (int tier = 0; tier < num_tiers; ++tier) {
    for (size_t c = 0; c < sizeof(kCols) / sizeof(kCols[0]); ++c) {
      enum { kRows = 4 };
      const int64_t cols = kCols[c];
      tj_graph_t* g;
      CHECK_OK(tj_graph_create(ctxs[tier], "far_first", &g));
      const int64_t xdims[2] = {kRows, cols};
      tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, xdims, "x");
      tj_graph_output(
          g, tj_graph_layer_norm(g, x, tj_value_none(), tj_value_none(), 1e-5),
          "y");
      CHECK_OK(tj_graph_finalize(g));
      io_t in = {0};
      in.n = 1;
      make(&in, 0, TJ_DTYPE_F32, 2, xdims, 0.0);
      for (int64_t i = 0; i < kRows * cols; ++i) {  // full-mantissa values
        double u = (double)(rng_next() >> 11) * 0x1p-53;
        double v = i % cols == 0 ? 64.0 + u : 4.0 * u - 2.0;
        tj_store_f64(TJ_DTYPE_F32, in.data[0], i, v);
      }
      tj_compile_options_t o;
      tj_compile_options_initialize(&o);
      tj_executable_t *exe = NULL, *ref = NULL;
      CHECK_OK(tj_compile(g, &o, &exe));
      o.target = TJ_TARGET_REFERENCE;
      CHECK_OK(tj_compile(g, &o, &ref));
      io_t got = {0}, want = {0};
      if (exe && ref && make_outputs(exe, g, &in, 0, &got) &&
          make_outputs(ref, g, &in, 0, &want)) {
        CHECK_OK(tj_executable_run(exe, in.t, in.n, got.t, got.n));
        CHECK_OK(tj_executable_run(ref, in.t, in.n, want.t, want.n));
        double worst = 0;
        for (int64_t i = 0; i < kRows * cols; ++i) {
          double w = elem(&want.t[0], i);
          worst = fmax(worst, fabs(elem(&got.t[0], i) - w) / fmax(fabs(w), 1));
        }
        fprintf(stderr, "# %s [%d, %lld]: max error %g\n", isas[tier], kRows,
                (long long)cols, worst);
        CHECK(worst <= 1e-6);
      }
      free_io(&got);
      free_io(&want);
      tj_executable_release(exe);
      tj_executable_release(ref);
      free_io(&in);
      tj_graph_destroy(g);
    }
    tj_context_destroy(ctxs[tier]);
  }
}

// Sibling reductions of one row (none reading another's result) in one
// row kernel: a float sum long enough for several pairwise blocks
// (SUM_BLOCK 4096) beside a max, a second sum and a sum of exponentials,
// and an argmax after them, each with its own accumulators. Rows shorter
// than a vector, of a masked tail, and of several blocks, at every tier,
// against the reference.
TEST(sibling_reductions) {
  tj_context_t* ctxs[3];
  const char* isas[3];
  int num_tiers = tj_test_tier_contexts(ctxs, isas);
  static const int64_t kCols[] = {3, 509, 4097, 9001};
  for (int tier = 0; tier < num_tiers; ++tier) {
    for (size_t c = 0; c < sizeof(kCols) / sizeof(kCols[0]); ++c) {
      tj_graph_t* g;
      CHECK_OK(tj_graph_create(ctxs[tier], "siblings", &g));
      const int64_t xdims[2] = {5, kCols[c]};
      tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, xdims, "x");
      const int32_t axis = 1;
      tj_value_t e = tj_graph_exp(g, x);
      tj_graph_output(g, tj_graph_sum(g, x, 1, &axis, false), "sum");
      tj_graph_output(g, tj_graph_max(g, x, 1, &axis, false), "max");
      tj_graph_output(
          g, tj_graph_sum(g, tj_graph_mul(g, x, x), 1, &axis, false), "sum_sq");
      tj_graph_output(g, tj_graph_sum(g, e, 1, &axis, false), "sum_exp");
      tj_graph_output(g, tj_graph_argmax(g, x, 1, false), "argmax");
      CHECK_OK(tj_graph_finalize(g));
      io_t in = {0};
      in.n = 1;
      make(&in, 0, TJ_DTYPE_F32, 2, xdims, NAN);
      char what[64];
      snprintf(what, sizeof(what), "%s [5, %lld]", isas[tier],
               (long long)kCols[c]);
      check_graph(g, &in, 2e-6, what);
      free_io(&in);
      tj_graph_destroy(g);
    }
    tj_context_destroy(ctxs[tier]);
  }
}

int main(void) {
  CHECK_OK(tj_test_context_create(&g_ctx));  // no disk cache
  RUN_TEST(empty_fixed_axes);
  RUN_TEST(empty_contraction);
  RUN_TEST(argmax_empty_axis);
  RUN_TEST(bool_max_min);
  RUN_TEST(signed_zero_chain);
  RUN_TEST(signed_zero_max_min);
  RUN_TEST(layer_norm_shifted_rows);
  RUN_TEST(layer_norm_large_first_element);
  RUN_TEST(sibling_reductions);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
