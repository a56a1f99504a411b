// The ops of issue 15's task topk: argtopk and what is built on it (topk,
// sort, argsort), einsum by decomposition, and the inverse trigonometric
// functions.
//
// argtopk: the reference semantics against an independent oracle here
// (a stable O(n^2) rank per element, NaN largest); every x86 tier, generic
// and specialized, against the reference (an argtopk no decomposition takes
// runs as argtopk's native host kernel, not a graph break: the test states
// the counts; topk_native_test covers that kernel); odd row lengths, ties, NaN,
// integers (u64 beyond 2^63), a symbolic batch and a sort along a symbolic
// axis; the values' gradient against finite differences; the builder's errors;
// the allocation failures of building, gradient and reference run. einsum:
// equations of every kind (matmul, batch, trace, diagonal, outer, ellipsis
// broadcast, implicit output, three operands) compiled at every tier with no
// graph break against the reference, and against loops here; malformed
// equations. asin/acos/atan: every tier against the reference; their PTX and
// einsum's through ptxas -arch=sm_90a where it is installed.

#include <stdlib.h>

#include "tests/unit/ptx_check.h"
#include "tests/unit/tier_ops_check.h"

//===--- the oracle ---===//

// Whether element |x| (index i) ranks before |y| (index j) in argtopk's
// order: by value (NaN largest), ties by index.
static bool ranks_before(double x, int64_t i, double y, int64_t j,
                         bool largest) {
  bool xn = isnan(x), yn = isnan(y);
  if (xn != yn) return largest ? xn : yn;
  if (!xn && x != y) return largest ? x > y : x < y;
  return i < j;
}

// out[r * k + p] = the index of the element whose rank in row r is p.
static void oracle_rows(const double* x, int64_t rows, int64_t n, int64_t k,
                        bool largest, int64_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x + r * n;
    for (int64_t i = 0; i < n; ++i) {
      int64_t rank = 0;
      for (int64_t j = 0; j < n; ++j)
        rank += j != i && ranks_before(row[j], j, row[i], i, largest);
      if (rank < k) out[r * k + rank] = i;
    }
  }
}

// Row-major [rows, n] f64 with ties (values from a small set) and NaNs.
static void tied_values(double* x, int64_t count, bool nans) {
  for (int64_t i = 0; i < count; ++i) {
    double u = rng_unit();
    x[i] = nans && u < 0.1 ? NAN : floor(u * 7) - 3;
  }
}

//===--- reference semantics against the oracle ---===//

// argtopk of f64 [R, N] along 1 for several N and k, both orders; the
// reference's result equals the oracle's exactly.
TEST(argtopk_reference_matches_oracle) {
  static const int64_t kN[] = {1, 2, 7, 37, 130};
  for (size_t c = 0; c < TJ_ARRAY_SIZE(kN); ++c) {
    int64_t n = kN[c], rows = 5;
    int64_t ks[4] = {0, 1, n / 2, n};
    double* x = malloc(sizeof(double) * (size_t)(rows * n));
    int64_t* want = malloc(sizeof(int64_t) * (size_t)(rows * n + 1));
    int64_t* got = malloc(sizeof(int64_t) * (size_t)(rows * n + 1));
    tied_values(x, rows * n, true);
    for (int ki = 0; ki < 4; ++ki) {
      for (int largest = 0; largest < 2; ++largest) {
        int64_t k = ks[ki];
        tj_graph_t* g = new_graph(g_ctx[0], "argtopk_ref");
        tj_value_t v =
            tj_graph_input(g, TJ_DTYPE_F64, 2, (int64_t[]){rows, n}, "x");
        tj_graph_output(g, tj_graph_argtopk(g, v, k, 1, largest != 0), "y");
        CHECK_OK(tj_graph_finalize(g));
        tj_tensor_t in =
            tj_tensor_make(x, TJ_DTYPE_F64, 2, (int64_t[]){rows, n});
        tj_tensor_t out =
            tj_tensor_make(got, TJ_DTYPE_I64, 2, (int64_t[]){rows, k});
        CHECK_OK(tj_reference_run(g, &in, 1, &out, 1));
        oracle_rows(x, rows, n, k, largest != 0, want);
        bool ok = memcmp(got, want, sizeof(int64_t) * (size_t)(rows * k)) == 0;
        if (!ok)
          fprintf(stderr, "  argtopk n=%lld k=%lld largest=%d differs\n",
                  (long long)n, (long long)k, largest);
        CHECK(ok);
        tj_graph_destroy(g);
      }
    }
    free(x);
    free(want);
    free(got);
  }
}

// Hand-checked rows: NaN first when largest, last when smallest; ties in
// index order either way; -0 and +0 tie.
TEST(argtopk_by_hand) {
  const double x[6] = {2, NAN, -1, 2, -0.0, 0.0};
  static const int64_t kLargest[6] = {1, 0, 3, 4, 5, 2};
  static const int64_t kSmallest[6] = {2, 4, 5, 0, 3, 1};
  for (int largest = 0; largest < 2; ++largest) {
    tj_graph_t* g = new_graph(g_ctx[0], "argtopk_hand");
    tj_value_t v = tj_graph_input(g, TJ_DTYPE_F64, 1, (int64_t[]){6}, "x");
    tj_value_t idx;
    tj_value_t vals = tj_graph_sort(g, v, 0, largest != 0, &idx);
    tj_graph_output(g, idx, "i");
    tj_graph_output(g, vals, "v");
    CHECK_OK(tj_graph_finalize(g));
    int64_t got[6];
    double sorted[6];
    tj_tensor_t in = tj_tensor_make((void*)x, TJ_DTYPE_F64, 1, (int64_t[]){6});
    tj_tensor_t out[2] = {
        tj_tensor_make(got, TJ_DTYPE_I64, 1, (int64_t[]){6}),
        tj_tensor_make(sorted, TJ_DTYPE_F64, 1, (int64_t[]){6})};
    CHECK_OK(tj_reference_run(g, &in, 1, out, 2));
    const int64_t* want = largest ? kLargest : kSmallest;
    for (int i = 0; i < 6; ++i) {
      CHECK_EQ_INT(want[i], got[i]);
      double w = x[want[i]];
      CHECK(isnan(w) ? isnan(sorted[i]) : sorted[i] == w);
    }
    tj_graph_destroy(g);
  }
}

//===--- compiled at every tier ---===//

// tier_ops_check.h's check with |breaks| graph breaks on every compiled
// executable (none since argtopk's native host kernel). Indices and gathered
// values exactly (same() compares integers exactly); a float computed from them
// (exp) within 2 ulp.
static void check_with_breaks(const char* what, build_fn build, int32_t num_in,
                              const spec_t* in, int32_t num_out,
                              const spec_t* out, int32_t breaks) {
  check_ops_breaks(what, build, num_in, in, num_out, out, 2.5e-7, NULL, breaks);
}

// x [B, 37, 5] f32: topk 4 largest along 1 (values feed a kernel), 3
// smallest along -1 (k <= 16: native selection passes); i32 [B, 19] sorted
// descending with ties (a short row: native rank kernels); a sort of f16
// along the symbolic axis (argtopk's native host kernel).
static tj_graph_t* build_topk(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "topk");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){B, 37, 5}, "x");
  tj_value_t a = tj_graph_input(g, TJ_DTYPE_I32, 2, (int64_t[]){B, 19}, "a");
  tj_value_t h = tj_graph_input(g, TJ_DTYPE_F16, 2, (int64_t[]){3, B}, "h");
  tj_value_t i1, i2, i3, i4;
  tj_value_t v1 = tj_graph_topk(g, x, 4, 1, true, &i1);
  tj_graph_output(g, tj_graph_exp(g, v1), "v1");
  tj_graph_output(g, i1, "i1");
  tj_graph_output(g, tj_graph_topk(g, x, 3, -1, false, &i2), "v2");
  tj_graph_output(g, i2, "i2");
  tj_graph_output(g, tj_graph_sort(g, a, 1, true, &i3), "v3");
  tj_graph_output(g, i3, "i3");
  tj_graph_output(g, tj_graph_sort(g, h, 1, false, &i4), "v4");
  tj_graph_output(g, i4, "i4");
  return g;
}

TEST(topk_every_tier_symbolic) {
  static const int64_t kSizes[] = {0, 1, 6};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kSizes); ++i) {
    int64_t B = kSizes[i];
    spec_t in[3] = {{TJ_DTYPE_F32, 3, {B, 37, 5}, -1, 1},
                    {TJ_DTYPE_I32, 2, {B, 19}, -3, 3},
                    {TJ_DTYPE_F16, 2, {3, B}, -2, 2}};
    spec_t out[8] = {{TJ_DTYPE_F32, 3, {B, 4, 5}, 0, 0},
                     {TJ_DTYPE_I64, 3, {B, 4, 5}, 0, 0},
                     {TJ_DTYPE_F32, 3, {B, 37, 3}, 0, 0},
                     {TJ_DTYPE_I64, 3, {B, 37, 3}, 0, 0},
                     {TJ_DTYPE_I32, 2, {B, 19}, 0, 0},
                     {TJ_DTYPE_I64, 2, {B, 19}, 0, 0},
                     {TJ_DTYPE_F16, 2, {3, B}, 0, 0},
                     {TJ_DTYPE_I64, 2, {3, B}, 0, 0}};
    // The sort along the symbolic axis is a host kernel; the rest kernels.
    check_with_breaks("topk", build_topk, 3, in, 8, out, 0);
  }
}

// u64 beyond 2^63 (unsigned order), i8 with ties; rows of 300: the top 5
// (selection passes) and the 20 smallest (k > 16 of a long row: argtopk's
// native host kernel).
static tj_graph_t* build_topk_dtypes(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "topk_dtypes");
  tj_value_t u = tj_graph_input(g, TJ_DTYPE_U64, 2, (int64_t[]){4, 9}, "u");
  tj_value_t c = tj_graph_input(g, TJ_DTYPE_I8, 2, (int64_t[]){3, 33}, "c");
  tj_graph_output(g, tj_graph_argtopk(g, u, 5, 1, true), "iu");
  tj_graph_output(g, tj_graph_argsort(g, c, 0, false), "ic");
  tj_value_t l = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){2, 300}, "l");
  tj_graph_output(g, tj_graph_argtopk(g, l, 5, 1, true), "i5");
  tj_graph_output(g, tj_graph_argtopk(g, l, 20, 1, false), "i6");
  return g;
}

TEST(topk_dtypes) {
  spec_t in[3] = {{TJ_DTYPE_U64, 2, {4, 9}, 0, 18446744073709551615.0},
                  {TJ_DTYPE_I8, 2, {3, 33}, -2, 2},
                  {TJ_DTYPE_F32, 2, {2, 300}, -1, 1}};
  spec_t out[4] = {{TJ_DTYPE_I64, 2, {4, 5}, 0, 0},
                   {TJ_DTYPE_I64, 2, {3, 33}, 0, 0},
                   {TJ_DTYPE_I64, 2, {2, 5}, 0, 0},
                   {TJ_DTYPE_I64, 2, {2, 20}, 0, 0}};
  check_with_breaks("topk_dtypes", build_topk_dtypes, 3, in, 4, out, 0);
  // u64 by hand: 2^63 + 1 ranks above 5, which a signed compare would not.
  tj_graph_t* g = new_graph(g_ctx[0], "topk_u64");
  tj_value_t u = tj_graph_input(g, TJ_DTYPE_U64, 1, (int64_t[]){3}, "u");
  tj_graph_output(g, tj_graph_argtopk(g, u, 1, 0, true), "i");
  CHECK_OK(tj_graph_finalize(g));
  uint64_t xs[3] = {5, (1ull << 63) + 1, 7};
  int64_t got = -1;
  tj_tensor_t in_t = tj_tensor_make(xs, TJ_DTYPE_U64, 1, (int64_t[]){3});
  tj_tensor_t out_t = tj_tensor_make(&got, TJ_DTYPE_I64, 1, (int64_t[]){1});
  CHECK_OK(tj_reference_run(g, &in_t, 1, &out_t, 1));
  CHECK_EQ_INT(1, got);
  tj_graph_destroy(g);
}

// The native rank kernels (rows <= 256) on rows with ties and NaN, both
// orders, every tier: exactly the oracle's indices, no graph break.
static bool g_largest;
static tj_graph_t* build_nan_rows(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "topk_nan");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){6, 41}, "x");
  tj_graph_output(g, tj_graph_argtopk(g, x, 7, 1, g_largest), "i");
  tj_graph_output(g, tj_graph_argsort(g, x, 1, g_largest), "s");
  return g;
}

TEST(topk_native_nan_and_ties) {
  enum { R = 6, N = 41, K = 7 };
  double xd[R * N];
  float xf[R * N];
  tied_values(xd, R * N, true);
  for (int i = 0; i < R * N; ++i) xf[i] = (float)xd[i];
  int64_t want_k[R * K], want_s[R * N], got_k[R * K], got_s[R * N];
  for (int largest = 0; largest < 2; ++largest) {
    g_largest = largest != 0;
    oracle_rows(xd, R, N, K, g_largest, want_k);
    oracle_rows(xd, R, N, N, g_largest, want_s);
    for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
      tj_graph_t* g = build_nan_rows(g_ctx[t]);
      CHECK_OK(tj_graph_finalize(g));
      tj_compile_options_t o;
      tj_compile_options_initialize(&o);
      o.target = TJ_TARGET_X86;
      o.verify_each = true;
      o.cache_dir = "";
      tj_executable_t* exe = NULL;
      CHECK_OK(tj_compile(g, &o, &exe));
      if (exe) {
        tj_tensor_t in = tj_tensor_make(xf, TJ_DTYPE_F32, 2, (int64_t[]){R, N});
        tj_tensor_t out[2] = {
            tj_tensor_make(got_k, TJ_DTYPE_I64, 2, (int64_t[]){R, K}),
            tj_tensor_make(got_s, TJ_DTYPE_I64, 2, (int64_t[]){R, N})};
        CHECK_OK(tj_executable_run(exe, &in, 1, out, 2));
        CHECK(memcmp(got_k, want_k, sizeof got_k) == 0);
        CHECK(memcmp(got_s, want_s, sizeof got_s) == 0);
        tj_executable_stats_t stats = {.struct_size = sizeof(stats)};
        tj_executable_stats(exe, &stats);
        CHECK_EQ_INT(0, stats.num_graph_breaks);
        tj_executable_release(exe);
      }
      tj_graph_destroy(g);
    }
  }
}

//===--- the values' gradient ---===//

// d/dx sum(w * topk(x, 3).values) by finite differences on the reference
// (f64): w scattered to the selected positions, 0 elsewhere.
TEST(topk_gradient_finite_differences) {
  enum { N = 8, K = 3 };
  tj_graph_t* g = new_graph(g_ctx[0], "topk_grad");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F64, 2, (int64_t[]){2, N}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F64, 2, (int64_t[]){2, K}, "w");
  tj_value_t vals = tj_graph_topk(g, x, K, 1, true, NULL);
  int32_t axes[2] = {0, 1};
  tj_graph_output(g, tj_graph_sum(g, tj_graph_mul(g, vals, w), 2, axes, false),
                  "loss");
  CHECK_OK(tj_graph_finalize(g));
  tj_graph_t* joint = NULL;
  CHECK_OK(tj_graph_grad(g, 0, NULL, 0, NULL, &joint));
  double xs[2 * N], ws[2 * K], one = 1, loss, gx[2 * N], gw[2 * K];
  for (int i = 0; i < 2 * N; ++i) xs[i] = (double)((i * 5) % 11) - 4.5;
  for (int i = 0; i < 2 * K; ++i) ws[i] = 0.5 + i;
  tj_tensor_t in[3] = {tj_tensor_make(xs, TJ_DTYPE_F64, 2, (int64_t[]){2, N}),
                       tj_tensor_make(ws, TJ_DTYPE_F64, 2, (int64_t[]){2, K}),
                       tj_tensor_make(&one, TJ_DTYPE_F64, 0, NULL)};
  tj_tensor_t out[3] = {tj_tensor_make(&loss, TJ_DTYPE_F64, 0, NULL),
                        tj_tensor_make(gx, TJ_DTYPE_F64, 2, (int64_t[]){2, N}),
                        tj_tensor_make(gw, TJ_DTYPE_F64, 2, (int64_t[]){2, K})};
  CHECK_OK(tj_reference_run(joint, in, 3, out, 3));
  const double h = 1e-6;
  for (int i = 0; i < 2 * N; ++i) {
    double lp, lm, saved = xs[i];
    tj_tensor_t lo = tj_tensor_make(&lp, TJ_DTYPE_F64, 0, NULL);
    xs[i] = saved + h;
    CHECK_OK(tj_reference_run(g, in, 2, &lo, 1));
    lo.data = &lm;
    xs[i] = saved - h;
    CHECK_OK(tj_reference_run(g, in, 2, &lo, 1));
    xs[i] = saved;
    double fd = (lp - lm) / (2 * h);
    if (fabs(fd - gx[i]) > 1e-6) {
      fprintf(stderr, "  d loss / d x[%d]: %g, finite differences %g\n", i,
              gx[i], fd);
    }
    CHECK(fabs(fd - gx[i]) <= 1e-6);
  }
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
}

//===--- errors ---===//

TEST(topk_builder_errors) {
  struct {
    int64_t k;
    int32_t axis;
    tj_dtype_t dtype;
    bool symbolic;
    const char* message;
  } cases[] = {
      {6, 1, TJ_DTYPE_F32, false, "k=6 exceeds the length 5 of axis 1"},
      {2, 0, TJ_DTYPE_F32, true, "symbolic length B"},
      {2, 2, TJ_DTYPE_F32, false, "axis 2 is out of range"},
      {-2, 1, TJ_DTYPE_F32, false, "argtopk"},
      {1, 1, TJ_DTYPE_BOOL, false, "argtopk"},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(cases); ++i) {
    tj_graph_t* g = new_graph(g_ctx[0], "topk_errors");
    int64_t d0 = cases[i].symbolic ? tj_graph_symbol(g, "B") : 3;
    tj_value_t x =
        tj_graph_input(g, cases[i].dtype, 2, (int64_t[]){d0, 5}, "x");
    tj_graph_argtopk(g, x, cases[i].k, cases[i].axis, true);
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, cases[i].message,
                 tj_graph_status(g));
    tj_graph_destroy(g);
  }
  tj_graph_t* g = new_graph(g_ctx[0], "topk_errors");
  tj_value_t s = tj_graph_input(g, TJ_DTYPE_F32, 0, NULL, "s");
  tj_graph_argsort(g, s, 0, false);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "rank", tj_graph_status(g));
  tj_graph_destroy(g);
  g = new_graph(g_ctx[0], "topk_errors");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, "x");
  tj_value_t idx = {7};
  CHECK(tj_value_is_none(tj_graph_topk(g, x, -1, 0, true, &idx)));
  CHECK(tj_value_is_none(idx));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "k must be >= 0",
               tj_graph_status(g));
  tj_graph_destroy(g);
}

//===--- einsum ---===//

typedef struct einsum_case_t {
  const char* eq;
  int32_t n;           // operands
  int32_t rank[3];     // their ranks
  int64_t dims[3][4];  // their dims; -2: the symbol B
  int32_t out_rank;
  int64_t out_dims[4];  // -2: B
} einsum_case_t;

static const einsum_case_t kEinsum[] = {
    {"ij,jk->ik", 2, {2, 2}, {{3, 5}, {5, 4}}, 2, {3, 4}},
    {"bij,bjk->bik", 2, {3, 3}, {{-2, 3, 5}, {-2, 5, 2}}, 3, {-2, 3, 2}},
    {"ii->", 1, {2}, {{5, 5}}, 0, {0}},
    {"ii->i", 1, {2}, {{4, 4}}, 1, {4}},
    {"bii->bi", 1, {3}, {{-2, 3, 3}}, 2, {-2, 3}},
    {"i,j->ij", 2, {1, 1}, {{3}, {4}}, 2, {3, 4}},
    {"...ij,...jk->...ik", 2, {3, 2}, {{-2, 2, 3}, {3, 4}}, 3, {-2, 2, 4}},
    {"ij,kj", 2, {2, 2}, {{2, 6}, {3, 6}}, 2, {2, 3}},
    {"ij,jk,kl->il", 3, {2, 2, 2}, {{2, 3}, {3, 4}, {4, 5}}, 2, {2, 5}},
    {"bhqd,bhkd->bhqk",
     2,
     {4, 4},
     {{-2, 2, 3, 4}, {-2, 2, 5, 4}},
     4,
     {-2, 2, 3, 5}},
    {"ijk->kji", 1, {3}, {{2, 3, 4}}, 3, {4, 3, 2}},
    {"i,i->", 2, {1, 1}, {{7}, {7}}, 0, {0}},
};

static int32_t g_einsum_case;

static tj_graph_t* build_einsum(tj_context_t* ctx) {
  const einsum_case_t* c = &kEinsum[g_einsum_case];
  tj_graph_t* g = new_graph(ctx, "einsum");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t xs[3];
  for (int32_t i = 0; i < c->n; ++i) {
    int64_t dims[4];
    for (int32_t d = 0; d < c->rank[i]; ++d)
      dims[d] = c->dims[i][d] == -2 ? B : c->dims[i][d];
    char name[8];
    snprintf(name, sizeof(name), "x%d", (int)i);
    xs[i] = tj_graph_input(g, TJ_DTYPE_F32, c->rank[i], dims, name);
  }
  tj_graph_output(g, tj_graph_einsum(g, c->eq, xs, c->n), "y");
  return g;
}

TEST(einsum_every_tier) {
  for (size_t e = 0; e < TJ_ARRAY_SIZE(kEinsum); ++e) {
    g_einsum_case = (int32_t)e;
    const einsum_case_t* c = &kEinsum[e];
    for (int64_t B = 1; B <= 3; B += 2) {
      spec_t in[3], out[1];
      for (int32_t i = 0; i < c->n; ++i) {
        in[i] = (spec_t){TJ_DTYPE_F32, c->rank[i], {0}, -1, 1};
        for (int32_t d = 0; d < c->rank[i]; ++d)
          in[i].dims[d] = c->dims[i][d] == -2 ? B : c->dims[i][d];
      }
      out[0] = (spec_t){TJ_DTYPE_F32, c->out_rank, {0}, 0, 0};
      for (int32_t d = 0; d < c->out_rank; ++d)
        out[0].dims[d] = c->out_dims[d] == -2 ? B : c->out_dims[d];
      check_ops(c->eq, build_einsum, c->n, in, 1, out, 1e-5, NULL);
    }
  }
}

// A few equations against loops here (the reference runs the same
// decomposition, so this checks the decomposition itself).
TEST(einsum_against_loops) {
  double a[2 * 3 * 3], b[3 * 4];
  for (int i = 0; i < 18; ++i) a[i] = (double)((i * 7) % 5) - 2;
  for (int i = 0; i < 12; ++i) b[i] = (double)((i * 3) % 7) - 3;
  // "bii,ij->bj": the diagonal of each a[b] times b's rows 0..2.
  tj_graph_t* g = new_graph(g_ctx[0], "einsum_loops");
  tj_value_t xa = tj_graph_input(g, TJ_DTYPE_F64, 3, (int64_t[]){2, 3, 3}, "a");
  tj_value_t xb = tj_graph_input(g, TJ_DTYPE_F64, 2, (int64_t[]){3, 4}, "b");
  tj_graph_output(
      g, tj_graph_einsum(g, "bii,ij->bj", (tj_value_t[]){xa, xb}, 2), "y");
  tj_graph_output(g, tj_graph_einsum(g, "b i j -> j b", &xa, 1), "z");
  CHECK_OK(tj_graph_finalize(g));
  double y[2 * 4], z[3 * 2];
  tj_tensor_t in[2] = {tj_tensor_make(a, TJ_DTYPE_F64, 3, (int64_t[]){2, 3, 3}),
                       tj_tensor_make(b, TJ_DTYPE_F64, 2, (int64_t[]){3, 4})};
  tj_tensor_t out[2] = {tj_tensor_make(y, TJ_DTYPE_F64, 2, (int64_t[]){2, 4}),
                        tj_tensor_make(z, TJ_DTYPE_F64, 2, (int64_t[]){3, 2})};
  CHECK_OK(tj_reference_run(g, in, 2, out, 2));
  for (int bb = 0; bb < 2; ++bb) {
    for (int j = 0; j < 4; ++j) {
      double s = 0;
      for (int i = 0; i < 3; ++i) s += a[bb * 9 + i * 3 + i] * b[i * 4 + j];
      CHECK(fabs(y[bb * 4 + j] - s) < 1e-12);
    }
  }
  for (int j = 0; j < 3; ++j) {
    for (int bb = 0; bb < 2; ++bb) {
      double s = 0;
      for (int i = 0; i < 3; ++i) s += a[bb * 9 + i * 3 + j];
      CHECK(fabs(z[j * 2 + bb] - s) < 1e-12);
    }
  }
  tj_graph_destroy(g);
}

TEST(einsum_errors) {
  static const struct {
    const char* eq;
    const char* message;
  } kBad[] = {
      {"ij,jk", "more terms than operands"},
      {"ij->ik", "an output label is in no operand"},
      {"ijk->i", "do not match its operand's rank"},
      {"i$->i", "malformed"},
      {"ij->ii", "repeated"},
      {"ij-ij", "expected \"->\""},
      {"....->", "malformed"},
      {"ii->i", "unequal dims"},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kBad); ++i) {
    tj_graph_t* g = new_graph(g_ctx[0], "einsum_errors");
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){2, 3}, "x");
    CHECK(tj_value_is_none(tj_graph_einsum(g, kBad[i].eq, &x, 1)));
    tj_status_t st = tj_graph_status(g);
    // Every message names the equation.
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, kBad[i].message, st);
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, kBad[i].eq, tj_graph_status(g));
    tj_graph_destroy(g);
  }
}

//===--- asin, acos, atan ---===//

static tj_graph_t* build_trig(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "trig");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 37}, "x");
  tj_value_t d = tj_graph_input(g, TJ_DTYPE_F16, 1, (int64_t[]){19}, "d");
  tj_value_t t = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 37}, "t");
  tj_graph_output(g, tj_graph_asin(g, x), "a");
  tj_graph_output(g, tj_graph_acos(g, x), "b");
  tj_graph_output(g, tj_graph_atan(g, tj_graph_mul(g, t, t)), "c");
  tj_graph_output(g, tj_graph_asin(g, d), "e");
  return g;
}

TEST(trig_every_tier) {
  for (int64_t B = 1; B <= 4; B += 3) {
    spec_t in[3] = {{TJ_DTYPE_F32, 2, {B, 37}, -1, 1},
                    {TJ_DTYPE_F16, 1, {19}, -1, 1},
                    {TJ_DTYPE_F32, 2, {B, 37}, -30, 30}};
    spec_t out[4] = {{TJ_DTYPE_F32, 2, {B, 37}, 0, 0},
                     {TJ_DTYPE_F32, 2, {B, 37}, 0, 0},
                     {TJ_DTYPE_F32, 2, {B, 37}, 0, 0},
                     {TJ_DTYPE_F16, 1, {19}, 0, 0}};
    // 2 f32 ulp (vecmath.h) relative to max(1, |y|); f16 one ulp (2^-10).
    check_ops("trig", build_trig, 3, in, 4, out, 1e-3, NULL);
  }
}

//===--- PTX ---===//

static const char* g_ptxas = "";

TEST(ptx_of_einsum_trig_and_argtopk) {
  g_einsum_case = 1;  // batched matmul
  tj_test_check_ptx(g_ptxas, "einsum", build_einsum(g_ctx[0]));
  g_einsum_case = 4;  // batched diagonal
  tj_test_check_ptx(g_ptxas, "einsum diagonal", build_einsum(g_ctx[0]));
  tj_test_check_ptx(g_ptxas, "trig", build_trig(g_ctx[0]));
  // Selection passes (k = 7) and rank kernels (the argsort), both orders.
  g_largest = false;
  tj_test_check_ptx(g_ptxas, "argtopk smallest", build_nan_rows(g_ctx[0]));
  g_largest = true;
  tj_test_check_ptx(g_ptxas, "argtopk largest", build_nan_rows(g_ctx[0]));
  printf("# PTX assembled by ptxas: %s\n", g_ptxas[0] ? g_ptxas : "skipped");
}

//===--- allocation failures ---===//

// Builds topk, sort and einsum, takes the gradient and runs the reference.
static tj_status_t topk_attempt(tj_allocator_t allocator) {
  tj_context_options_t options = tj_test_context_options();
  options.allocator = allocator;
  tj_context_t* ctx = NULL;
  TJ_RETURN_IF_ERROR(tj_context_create(&options, &ctx));
  tj_graph_t* g = NULL;
  tj_status_t st = tj_graph_create(ctx, "topk_oom", &g);
  tj_graph_t* joint = NULL;
  if (!st) {
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 6}, "x");
    tj_value_t i;
    tj_graph_output(g, tj_graph_topk(g, x, 2, 1, true, &i), "v");
    tj_graph_output(g, tj_graph_sort(g, x, 0, false, NULL), "s");
    tj_graph_output(g, tj_graph_einsum(g, "ij,kj->ik", (tj_value_t[]){x, x}, 2),
                    "e");
    st = tj_graph_finalize(g);
  }
  if (!st) st = tj_graph_grad(g, 0, NULL, 0, NULL, &joint);
  if (!st) {
    float xs[18], v[6], s[18], e[9];
    for (int k = 0; k < 18; ++k) xs[k] = (float)((k * 5) % 7);
    tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 2, (int64_t[]){3, 6});
    tj_tensor_t out[3] = {
        tj_tensor_make(v, TJ_DTYPE_F32, 2, (int64_t[]){3, 2}),
        tj_tensor_make(s, TJ_DTYPE_F32, 2, (int64_t[]){3, 6}),
        tj_tensor_make(e, TJ_DTYPE_F32, 2, (int64_t[]){3, 3})};
    st = tj_reference_run(g, &in, 1, out, 3);
  }
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return st;
}

TEST(topk_oom_sweep) { CHECK(tj_test_oom_sweep("topk", topk_attempt) > 0); }

int main(int argc, char** argv) {
  if (argc > 1) g_ptxas = argv[1];
  open_jits();
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(argtopk_reference_matches_oracle);
  RUN_TEST(argtopk_by_hand);
  RUN_TEST(topk_every_tier_symbolic);
  RUN_TEST(topk_dtypes);
  RUN_TEST(topk_native_nan_and_ties);
  RUN_TEST(topk_gradient_finite_differences);
  RUN_TEST(topk_builder_errors);
  RUN_TEST(einsum_every_tier);
  RUN_TEST(einsum_against_loops);
  RUN_TEST(einsum_errors);
  RUN_TEST(trig_every_tier);
  RUN_TEST(ptx_of_einsum_trig_and_argtopk);
  RUN_TEST(topk_oom_sweep);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  close_jits();
  TEST_MAIN_END();
}
