// argtopk's native host kernel (backends/runtime/host_topk.h; lastbreak,
// issue 15): no graph break runs on the reference interpreter.
//
// The kernel itself against tj_reference_run of the same argtopk (the
// oracle): every dtype argtopk takes, rows of 0 to 4,096 and 50,257 (a
// vocabulary), k = 0, 1, small, at the heap's bound and n, largest and
// smallest, ties, NaN, -0 and +0, infinities, strided rows (the axis not
// last, a reversed stride), one slot or several (a parallel_for that runs
// its ranges in reverse order, on distinct slots). Then compiled: every
// x86 tier, generic and specialized, against the reference with no graph
// break and one native host kernel: top-50 of [8, 50257] f32, full sorts of
// [4, 4096], f16 / bf16 / f64 / integer rows, a sort along a symbolic axis
// and the top-k along axis 0; TJ_LOG=graph_breaks says "native host
// kernel" and nothing runs on the reference interpreter; TJ_NATIVE_TOPK=off
// gives the graph break back with the same numbers; the scoreboard's host
// call; the failing-allocation sweep over compile and run.

#include <math.h>
#include <stdlib.h>

#include "backends/runtime/host_topk.h"
#include "tests/unit/tier_ops_check.h"

//===--- the kernel against the reference ---===//

// Row-major data of |count| elements of |dtype|: values from a small set
// (ties) with NaN, +-0 and +-inf mixed in for floats, or the whole range
// of an integer dtype.
static void* kernel_data(tj_dtype_t dtype, int64_t count, bool tied) {
  void* p = calloc((size_t)(count ? count : 1), tj_dtype_size(dtype));
  for (int64_t i = 0; i < count; ++i) {
    double u = rng_unit();
    if (tj_dtype_is_float(dtype)) {
      double v = tied ? floor(u * 9) - 4 : (u - 0.5) * 1000;
      double w = rng_unit();
      if (w < 0.04) v = NAN;
      if (w >= 0.04 && w < 0.06) v = -0.0;
      if (w >= 0.06 && w < 0.08) v = 0.0;
      if (w >= 0.08 && w < 0.09) v = INFINITY;
      if (w >= 0.09 && w < 0.10) v = -INFINITY;
      if (w >= 0.10 && w < 0.11) v = -NAN;
      tj_store_f64(dtype, p, i, v);
      continue;
    }
    int64_t lo = tj_dtype_int_lowest(dtype), hi = tj_dtype_int_highest(dtype);
    uint64_t bits = (uint64_t)(u * 18446744073709551615.0);
    int64_t v;
    if (tied) {
      v = (int64_t)(u * 7) - (tj_dtype_is_unsigned(dtype) ? 0 : 3);
    } else if (dtype == TJ_DTYPE_I64 || dtype == TJ_DTYPE_U64) {
      v = (int64_t)bits;
    } else {
      v = lo + (int64_t)(bits % (uint64_t)(hi - lo + 1));
    }
    tj_store_i64(dtype, p, i, v);
  }
  return p;
}

// Ranges of [0, n) handed out last first, each on its own slot.
static void reverse_parallel(void* user_data, int64_t n, tj_host_task_fn task,
                             void* context) {
  int32_t slots = *(const int32_t*)user_data;
  for (int32_t s = slots; s-- > 0;) {
    int64_t lo = n * s / slots, hi = n * (s + 1) / slots;
    if (lo < hi) task(context, lo, hi, s);
  }
}

typedef struct kernel_case_t {
  tj_dtype_t dtype;
  int32_t rank, axis;
  int64_t dims[3];
  int64_t k;
  bool largest, tied, reversed;  // reversed: the axis read backwards
} kernel_case_t;

static tj_allocator_t g_sys;

// One case through tj_host_topk_run, dense (or reversed along the axis)
// and with a parallel_for of 3 slots, against tj_reference_run.
static void check_topk_kernel(const kernel_case_t* c) {
  int64_t count = 1, ydims[3];
  for (int32_t d = 0; d < c->rank; ++d) {
    count *= c->dims[d];
    ydims[d] = d == c->axis ? c->k : c->dims[d];
  }
  int64_t ycount = count / (c->dims[c->axis] ? c->dims[c->axis] : 1) * c->k;
  if (c->dims[c->axis] == 0) ycount = 0;
  void* x = kernel_data(c->dtype, count, c->tied);
  int64_t* want = calloc((size_t)(ycount ? ycount : 1), sizeof(int64_t));
  int64_t* got = calloc((size_t)(ycount ? ycount : 1), sizeof(int64_t));
  // The oracle reads the reversed case's row as it is laid out backwards:
  // a copy of x with each row reversed along the axis.
  void* xr = x;
  int64_t strides[3], dense[3];
  int64_t step = 1;
  for (int32_t d = c->rank; d-- > 0;) {
    dense[d] = step;
    strides[d] = step;
    step *= c->dims[d];
  }
  const void* base = x;
  size_t size = tj_dtype_size(c->dtype);
  if (c->reversed && c->dims[c->axis] > 0) {
    strides[c->axis] = -dense[c->axis];
    base = (const unsigned char*)x +
           (size_t)((c->dims[c->axis] - 1) * dense[c->axis]) * size;
    xr = calloc((size_t)count, size);
    int64_t n = c->dims[c->axis];
    for (int64_t i = 0; i < count; ++i) {
      int64_t j = i / dense[c->axis] % n;
      int64_t from = i + (n - 1 - 2 * j) * dense[c->axis];
      memcpy((unsigned char*)xr + (size_t)i * size,
             (const unsigned char*)x + (size_t)from * size, size);
    }
  }
  tj_context_t* ctx = g_ctx[0];
  tj_graph_t* g = new_graph(ctx, "kernel");
  tj_value_t in = tj_graph_input(g, c->dtype, c->rank, c->dims, "x");
  tj_graph_output(g, tj_graph_argtopk(g, in, c->k, c->axis, c->largest), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_tensor_t xt = tj_tensor_make(xr, c->dtype, c->rank, c->dims);
  tj_tensor_t yt = tj_tensor_make(want, TJ_DTYPE_I64, c->rank, ydims);
  CHECK_OK(tj_reference_run(g, &xt, 1, &yt, 1));
  int32_t three = 3;
  tj_host_parallel_t par = {reverse_parallel, three, &three};
  for (int spread = 0; spread < 2; ++spread) {
    memset(got, 0xA5, (size_t)(ycount ? ycount : 1) * sizeof(int64_t));
    CHECK_OK(tj_host_topk_run(g_sys, spread ? &par : NULL, c->dtype, c->rank,
                              c->dims, base, strides, c->axis, c->k, c->largest,
                              got));
    int64_t bad = -1;
    for (int64_t i = 0; i < ycount && bad < 0; ++i)
      if (got[i] != want[i]) bad = i;
    if (bad >= 0) {
      fprintf(stderr,
              "  %s [%lld,%lld,%lld] axis %d k %lld %s%s%s%s: element %lld: "
              "got %lld, want %lld\n",
              tj_dtype_name(c->dtype), (long long)c->dims[0],
              (long long)(c->rank > 1 ? c->dims[1] : 0),
              (long long)(c->rank > 2 ? c->dims[2] : 0), (int)c->axis,
              (long long)c->k, c->largest ? "largest" : "smallest",
              c->tied ? " tied" : "", c->reversed ? " reversed" : "",
              spread ? " spread" : "", (long long)bad, (long long)got[bad],
              (long long)want[bad]);
    }
    CHECK_EQ_INT(-1, (int)bad);
  }
  tj_graph_destroy(g);
  if (xr != x) free(xr);
  free(x);
  free(want);
  free(got);
}

static const tj_dtype_t kDtypes[] = {TJ_DTYPE_F32, TJ_DTYPE_F16, TJ_DTYPE_BF16,
                                     TJ_DTYPE_F64, TJ_DTYPE_I8,  TJ_DTYPE_I16,
                                     TJ_DTYPE_I32, TJ_DTYPE_I64, TJ_DTYPE_U8,
                                     TJ_DTYPE_U16, TJ_DTYPE_U32, TJ_DTYPE_U64};

TEST(kernel_against_reference) {
  // Row lengths around the insertion sort's (32) and the heap's bound
  // (16 k <= n), k from 0 to n.
  static const int64_t kRows[] = {1, 5, 32, 33, 257, 1000, 4096};
  int cases = 0;
  for (size_t d = 0; d < sizeof(kDtypes) / sizeof(kDtypes[0]); ++d) {
    for (size_t r = 0; r < sizeof(kRows) / sizeof(kRows[0]); ++r) {
      int64_t n = kRows[r];
      int64_t ks[6] = {0, 1, 5, n / 16, n / 16 + 1, n};
      for (int ki = 0; ki < 6; ++ki) {
        int64_t k = ks[ki] > n ? n : ks[ki];
        for (int v = 0; v < 4; ++v) {
          kernel_case_t c = {kDtypes[d],   2,    1, {3, n, 0}, k, (v & 1) != 0,
                             (v & 2) != 0, false};
          // A reversed row and axis 0 on every other case.
          if ((ki + v) % 3 == 1) c.reversed = true;
          if ((ki + v) % 3 == 2) {
            c.rank = 3;
            c.axis = 0;
            c.dims[0] = n;
            c.dims[1] = 2;
            c.dims[2] = 3;
          }
          check_topk_kernel(&c);
          ++cases;
        }
      }
    }
  }
  // An empty row, rows of nothing, a vocabulary row.
  kernel_case_t empty = {TJ_DTYPE_F32, 2, 1, {4, 0, 0}, 0, true, false, false};
  check_topk_kernel(&empty);
  kernel_case_t none = {TJ_DTYPE_F32, 2, 1, {0, 9, 0}, 3, true, false, false};
  check_topk_kernel(&none);
  kernel_case_t vocab = {TJ_DTYPE_F32, 2,    1,     {2, 50257, 0},
                         50,           true, false, false};
  check_topk_kernel(&vocab);
  vocab.k = 50257;
  vocab.tied = true;
  check_topk_kernel(&vocab);
  printf("# %d kernel cases against the reference\n", cases + 4);
}

TEST(kernel_refuses_other_dtypes) {
  int64_t dims[1] = {4};
  bool x[4] = {true, false, true, false};
  int64_t y[4];
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "bool",
               tj_host_topk_run(g_sys, NULL, TJ_DTYPE_BOOL, 1, dims, x, NULL, 0,
                                2, true, y));
  CHECK(!tj_host_topk_takes(TJ_DTYPE_F8E4M3));
  CHECK(tj_host_topk_takes(TJ_DTYPE_BF16));
}

//===--- compiled: every tier, no graph break ---===//

// One native host kernel and no graph break in |exe|.
static void check_native_counts(tj_executable_t* exe, int32_t kernels) {
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  CHECK_EQ_INT(0, st.num_graph_breaks);
  CHECK_EQ_INT(kernels, st.num_host_kernels);
}

static tj_dtype_t g_dtype;
static int64_t g_rows, g_n, g_k;
static int32_t g_axis;
static bool g_largest, g_values;

// argtopk of x [g_rows, g_n] (or [g_n, g_rows] along axis 0), and with
// g_values also the values gathered (topk) plus 1, a kernel after it.
static tj_graph_t* build_topk(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "topk_native");
  int64_t dims[2] = {g_rows, g_n};
  if (g_axis == 0) {
    dims[0] = g_n;
    dims[1] = g_rows;
  }
  tj_value_t x = tj_graph_input(g, g_dtype, 2, dims, "x");
  tj_value_t i = tj_graph_argtopk(g, x, g_k, g_axis, g_largest);
  tj_graph_output(g, i, "i");
  if (g_values) {
    tj_value_t v = tj_graph_gather_elements(g, x, i, g_axis);
    tj_graph_output(g, tj_graph_add(g, v, tj_graph_scalar(g, g_dtype, 1.0)),
                    "v");
  }
  return g;
}

// |host_kernels|: 1 where the host kernel runs it, 0 where decompose's
// native forms do (k <= 4, or rows of at most 256 with k <= 16).
static void check_compiled_n(const char* what, tj_dtype_t dtype, int64_t rows,
                             int64_t n, int64_t k, int32_t axis, bool largest,
                             bool values, double lo, double hi,
                             int32_t host_kernels) {
  g_dtype = dtype;
  g_rows = rows;
  g_n = n;
  g_k = k;
  g_axis = axis;
  g_largest = largest;
  g_values = values;
  int64_t kk = k < 0 ? n : k;
  spec_t in[1] = {{dtype, 2, {rows, n}, lo, hi}};
  spec_t out[2] = {{TJ_DTYPE_I64, 2, {rows, kk}, 0, 0},
                   {dtype, 2, {rows, kk}, 0, 0}};
  if (axis == 0) {
    in[0].dims[0] = n;
    in[0].dims[1] = rows;
    out[0].dims[0] = out[1].dims[0] = kk;
    out[0].dims[1] = out[1].dims[1] = rows;
  }
  check_ops(what, build_topk, 1, in, values ? 2 : 1, out, 1e-6, NULL);
  // And the count (the host's tier).
  tj_graph_t* g = build_topk(g_ctx[0]);
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t o = tj_test_x86_options(2);
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  check_native_counts(exe, host_kernels);
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

static void check_compiled(const char* what, tj_dtype_t dtype, int64_t rows,
                           int64_t n, int64_t k, int32_t axis, bool largest,
                           bool values, double lo, double hi) {
  check_compiled_n(what, dtype, rows, n, k, axis, largest, values, lo, hi, 1);
}

TEST(compiled_every_tier) {
  // Top-k sampling over a GPT-2 vocabulary, with the values.
  check_compiled("top-50 of [8, 50257] f32", TJ_DTYPE_F32, 8, 50257, 50, 1,
                 true, true, -10, 10);
  // Full sorts (argsort) of rows of 4096 and 257, both orders.
  check_compiled("argsort [4, 4096] f32", TJ_DTYPE_F32, 4, 4096, -1, 1, false,
                 false, -1, 1);
  check_compiled("sort [3, 257] i32, ties", TJ_DTYPE_I32, 3, 257, 257, 1, true,
                 true, -4, 4);
  check_compiled("top-100 of [3, 1000] f16", TJ_DTYPE_F16, 3, 1000, 100, 1,
                 true, true, -3, 3);
  check_compiled("bottom-17 of [5, 1000] bf16", TJ_DTYPE_BF16, 5, 1000, 17, 1,
                 false, true, -3, 3);
  check_compiled("top-40 of [2, 300] f64", TJ_DTYPE_F64, 2, 300, 40, 1, true,
                 true, -1, 1);
  check_compiled("bottom-300 of [2, 300] u8, ties", TJ_DTYPE_U8, 2, 300, 300, 1,
                 false, false, 0, 20);
  check_compiled("top-64 of [1000, 3] i64 along axis 0", TJ_DTYPE_I64, 3, 1000,
                 64, 0, true, true, -1e12, 1e12);
  // x86 sorts long rows natively past k = 4 rather than decompose them
  // into k selection passes; k <= 4 and short rows stay native kernels.
  check_compiled("top-8 of [4, 1000] f32", TJ_DTYPE_F32, 4, 1000, 8, 1, true,
                 true, -1, 1);
  check_compiled_n("top-4 of [4, 1000] f32 (selection passes)", TJ_DTYPE_F32, 4,
                   1000, 4, 1, true, true, -1, 1, 0);
  check_compiled_n("top-8 of [4, 256] f32 (selection passes)", TJ_DTYPE_F32, 4,
                   256, 8, 1, false, true, -1, 1, 0);
}

// NaN, +-0 and ties through the compiled path: [2, 600] f32 whose rows
// hold NaN, both zeros and repeated values, top-20 and the full sort,
// exactly the reference's indices.
TEST(compiled_nan_zero_and_ties) {
  enum { R = 2, N = 600 };
  float x[R * N];
  for (int i = 0; i < R * N; ++i) {
    int m = (i * 37) % 11;
    x[i] = m == 0 ? NAN : m == 1 ? -0.0f : m == 2 ? 0.0f : (float)(m % 5) - 2;
  }
  for (int largest = 0; largest < 2; ++largest) {
    for (int full = 0; full < 2; ++full) {
      int64_t k = full ? N : 20;
      int64_t want[R * N], got[R * N];
      tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 2, (int64_t[]){R, N});
      tj_tensor_t yw = tj_tensor_make(want, TJ_DTYPE_I64, 2, (int64_t[]){R, k});
      tj_tensor_t yg = tj_tensor_make(got, TJ_DTYPE_I64, 2, (int64_t[]){R, k});
      for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
        tj_graph_t* g = new_graph(g_ctx[t], "nan_ties");
        tj_value_t v =
            tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){R, N}, "x");
        tj_graph_output(g, tj_graph_argtopk(g, v, k, 1, largest), "y");
        CHECK_OK(tj_graph_finalize(g));
        CHECK_OK(tj_reference_run(g, &in, 1, &yw, 1));
        tj_compile_options_t o = tj_test_x86_options(2);
        tj_executable_t* exe = NULL;
        CHECK_OK(tj_compile(g, &o, &exe));
        CHECK_OK(tj_executable_run(exe, &in, 1, &yg, 1));
        CHECK(memcmp(got, want, sizeof(int64_t) * (size_t)(R * k)) == 0);
        check_native_counts(exe, 1);
        tj_executable_release(exe);
        tj_graph_destroy(g);
      }
    }
  }
}

// A sort along a symbolic axis (argsort of [R, L], L symbolic), L = 1, 31,
// 300 and 5000 from one executable, strided input too.
TEST(compiled_symbolic_length) {
  for (int t = 0; t < tj_test_tiers(kTiers); ++t) {
    tj_graph_t* g = new_graph(g_ctx[t], "symbolic");
    int64_t L = tj_graph_symbol(g, "L");
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, L}, "x");
    tj_graph_output(g, tj_graph_argsort(g, x, 1, true), "y");
    CHECK_OK(tj_graph_finalize(g));
    tj_compile_options_t o = tj_test_x86_options(2);
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &o, &exe));
    check_native_counts(exe, 1);
    static const int64_t kL[] = {1, 31, 300, 5000};
    for (size_t i = 0; i < sizeof(kL) / sizeof(kL[0]); ++i) {
      int64_t n = kL[i];
      spec_t s = {TJ_DTYPE_F32, 2, {3, 2 * n}, -5, 5};
      float* data = make_data(&s);
      int64_t* want = calloc((size_t)(3 * n), sizeof(int64_t));
      int64_t* got = calloc((size_t)(3 * n), sizeof(int64_t));
      // Every other element of rows of 2n: a strided caller tensor.
      int64_t dims[2] = {3, n}, strides[2] = {2 * n, 2};
      tj_tensor_t in = tj_tensor_make(data, TJ_DTYPE_F32, 2, dims);
      in.strides = strides;
      tj_tensor_t yw = tj_tensor_make(want, TJ_DTYPE_I64, 2, dims);
      tj_tensor_t yg = tj_tensor_make(got, TJ_DTYPE_I64, 2, dims);
      CHECK_OK(tj_reference_run(g, &in, 1, &yw, 1));
      CHECK_OK(tj_executable_run(exe, &in, 1, &yg, 1));
      CHECK(memcmp(got, want, sizeof(int64_t) * (size_t)(3 * n)) == 0);
      free(data);
      free(want);
      free(got);
    }
    tj_executable_release(exe);
    tj_graph_destroy(g);
  }
}

//===--- what the log says; the switch back to the reference ---===//

typedef struct remarks_t {
  char text[16384];
} remarks_t;

static void collect_remarks(tj_severity_t severity, const char* message,
                            size_t size, void* user_data) {
  (void)severity;
  remarks_t* r = user_data;
  size_t used = strlen(r->text);
  snprintf(r->text + used, sizeof(r->text) - used, "%.*s\n", (int)size,
           message);
}

// [4, 300] argsort beside a softmax: compiled with TJ_LOG=graph_breaks,
// and again under TJ_NATIVE_TOPK=off (read at compile).
TEST(log_and_native_off) {
  static remarks_t remarks;
  memset(&remarks, 0, sizeof(remarks));
  tj_context_options_t o = tj_test_context_options();
  o.log = "graph_breaks";
  o.diagnostic_fn = collect_remarks;
  o.diagnostic_user_data = &remarks;
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&o, &ctx));
  g_dtype = TJ_DTYPE_F32;
  g_rows = 4;
  g_n = 300;
  g_k = -1;
  g_axis = 1;
  g_largest = false;
  g_values = true;
  tj_graph_t* g = build_topk(ctx);
  CHECK_OK(tj_graph_finalize(g));
  spec_t s = {TJ_DTYPE_F32, 2, {4, 300}, -1, 1};
  float* x = make_data(&s);
  int64_t want[1200], got[1200];
  float vw[1200], vg[1200];
  int64_t dims[2] = {4, 300};
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 2, dims);
  tj_tensor_t ow[2] = {tj_tensor_make(want, TJ_DTYPE_I64, 2, dims),
                       tj_tensor_make(vw, TJ_DTYPE_F32, 2, dims)};
  tj_tensor_t og[2] = {tj_tensor_make(got, TJ_DTYPE_I64, 2, dims),
                       tj_tensor_make(vg, TJ_DTYPE_F32, 2, dims)};
  CHECK_OK(tj_reference_run(g, &in, 1, ow, 2));
  // The switch is read when a context is created: a second one.
  setenv("TJ_NATIVE_TOPK", "off", 1);
  tj_context_t* ctx_off = NULL;
  CHECK_OK(tj_context_create(&o, &ctx_off));
  unsetenv("TJ_NATIVE_TOPK");
  tj_graph_t* g_off = build_topk(ctx_off);
  CHECK_OK(tj_graph_finalize(g_off));
  for (int off = 0; off < 2; ++off) {
    memset(remarks.text, 0, sizeof(remarks.text));
    tj_compile_options_t co = tj_test_x86_options(2);
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(off ? g_off : g, &co, &exe));
    CHECK_OK(tj_executable_run(exe, &in, 1, og, 2));
    CHECK(memcmp(got, want, sizeof(want)) == 0);
    CHECK(memcmp(vg, vw, sizeof(vw)) == 0);
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    CHECK_EQ_INT(off ? 1 : 0, st.num_graph_breaks);
    CHECK_EQ_INT(off ? 0 : 1, st.num_host_kernels);
    if (off) {
      CHECK_CONTAINS(remarks.text, "runs on the host (reference interpreter)");
      CHECK(strstr(remarks.text, "native host kernel") == NULL);
    } else {
      CHECK_CONTAINS(remarks.text,
                     "f32 rows of 300, k -1) runs as a native host kernel, "
                     "not on the reference interpreter");
      CHECK(strstr(remarks.text, "reference interpreter)") == NULL);
    }
    // The profile names the step.
    tj_profile_report_t* r = NULL;
    CHECK_OK(tj_executable_profile(exe, &in, 1, og, 2, 2, &r));
    int hosts = 0;
    for (int32_t e = 0; e < r->num_entries; ++e) {
      if (r->entries[e].kind != TJ_PROFILE_HOST) continue;
      ++hosts;
      if (!off) CHECK_CONTAINS(r->entries[e].detail, "native host kernel");
      if (off) CHECK_CONTAINS(r->entries[e].detail, "argtopk");
    }
    CHECK_EQ_INT(1, hosts);
    tj_profile_report_destroy(r);
    tj_executable_release(exe);
  }
  // Under the switch decompose keeps its selection passes for k <= 16 on
  // long rows: top-8 of [4, 300], no break, no host kernel.
  g_k = 8;
  g_values = false;
  tj_graph_t* g8 = build_topk(ctx_off);
  CHECK_OK(tj_graph_finalize(g8));
  int64_t w8[32], got8[32];
  int64_t d8[2] = {4, 8};
  tj_tensor_t o8w = tj_tensor_make(w8, TJ_DTYPE_I64, 2, d8);
  tj_tensor_t o8g = tj_tensor_make(got8, TJ_DTYPE_I64, 2, d8);
  CHECK_OK(tj_reference_run(g8, &in, 1, &o8w, 1));
  tj_compile_options_t c8 = tj_test_x86_options(2);
  tj_executable_t* e8 = NULL;
  CHECK_OK(tj_compile(g8, &c8, &e8));
  CHECK_OK(tj_executable_run(e8, &in, 1, &o8g, 1));
  CHECK(memcmp(got8, w8, sizeof(w8)) == 0);
  check_native_counts(e8, 0);
  tj_executable_release(e8);
  tj_graph_destroy(g8);
  // Anything but "off" warns and keeps the kernel.
  tj_test_diagnostics_t d;
  tj_context_options_t wo = tj_test_context_options();
  tj_test_collect_into(&wo, &d);
  setenv("TJ_NATIVE_TOPK", "of", 1);
  tj_context_t* wctx = NULL;
  CHECK_OK(tj_context_create(&wo, &wctx));
  unsetenv("TJ_NATIVE_TOPK");
  tj_graph_t* wg = build_topk(wctx);
  CHECK_OK(tj_graph_finalize(wg));
  tj_compile_options_t co = tj_test_x86_options(1);
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(wg, &co, &exe));
  check_native_counts(exe, 1);
  CHECK_CONTAINS(d.text, "TJ_NATIVE_TOPK: \"of\" is not off and is ignored");
  tj_executable_release(exe);
  tj_graph_destroy(wg);
  tj_context_destroy(wctx);
  free(x);
  tj_graph_destroy(g_off);
  tj_context_destroy(ctx_off);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// The scoreboard (target-free) counts an argtopk left whole as a host
// call from the fused stages on, not a kernel and not a graph break.
TEST(scoreboard_counts_a_host_call) {
  tj_graph_t* g = new_graph(g_ctx[0], "board");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){4, 300}, "x");
  tj_graph_output(g, tj_graph_argsort(g, x, 1, false), "i");
  tj_graph_output(g, tj_graph_relu(g, x), "r");
  CHECK_OK(tj_graph_finalize(g));
  tj_scoreboard_t sb;
  CHECK_OK(tj_graph_scoreboard(g, 0, NULL, NULL, &sb));
  const tj_scoreboard_row_t* fused = &sb.rows[TJ_STAGE_FUSE];
  CHECK_EQ_INT(1, (int)fused->host_calls);
  CHECK_EQ_INT(1, (int)fused->kernels);  // the relu
  CHECK_EQ_INT(0, (int)fused->graph_breaks);
  tj_graph_destroy(g);
}

//===--- allocation failures ---===//

// Compiles and runs top-20 of [3, 700] f32 (the native kernel's scratch
// and the run plan's step among the allocations).
static tj_status_t native_attempt(tj_allocator_t allocator) {
  tj_context_t* ctx = NULL;
  TJ_RETURN_IF_ERROR(tj_test_sweep_context_create(allocator, &ctx));
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  tj_status_t st = tj_graph_create(ctx, "topk_native_oom", &g);
  if (!st) {
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 700}, "x");
    tj_graph_output(g, tj_graph_argtopk(g, x, 20, 1, true), "i");
    st = tj_graph_finalize(g);
  }
  if (!st) {
    tj_compile_options_t o = tj_test_x86_options(1);
    st = tj_compile(g, &o, &exe);
  }
  if (!st) {
    static float x[3 * 700];
    for (int i = 0; i < 3 * 700; ++i) x[i] = (float)((i * 7919) % 1013);
    int64_t y[3 * 20];
    tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 2, (int64_t[]){3, 700});
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_I64, 2, (int64_t[]){3, 20});
    st = tj_executable_run(exe, &in, 1, &out, 1);
    // Row 0's first index holds its largest value.
    float best = 0;
    for (int i = 0; i < 700; ++i) best = x[i] > best ? x[i] : best;
    if (!st && x[y[0]] != best) st = tj_internal("row 0: a wrong index");
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return st;
}

TEST(native_oom_sweep) {
  CHECK(tj_test_oom_sweep("topk_native", native_attempt) > 0);
}

int main(void) {
  g_sys = tj_allocator_system();
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o = tj_test_context_options();
    o.x86_isa = kIsa[t];
    o.log = "";
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(kernel_against_reference);
  RUN_TEST(kernel_refuses_other_dtypes);
  RUN_TEST(compiled_every_tier);
  RUN_TEST(compiled_nan_zero_and_ties);
  RUN_TEST(compiled_symbolic_length);
  RUN_TEST(log_and_native_off);
  RUN_TEST(scoreboard_counts_a_host_call);
  RUN_TEST(native_oom_sweep);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  TEST_MAIN_END();
}
