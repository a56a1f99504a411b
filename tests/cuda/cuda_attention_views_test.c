// Attention reading q, k and v through the blocks' head views on the GPU
// (issue 14, tj_pass_ctx_t.attention_views): x [B, T, d] @ w viewed as
// [B, T, H, D] and transposed to [B, H, T, D] (GPT's heads()) is read in
// place by the attention kernel, its rows H*D apart, where a copy kernel
// per operand wrote it out first. Against tj_reference_run:
//   - q, k and v all views of matmuls (grouped-query heads: k and v of 2
//     heads for 4 query heads, causal, at T 130; and not grouped nor
//     causal at T 77: no tile multiple), D 64 and 128, f16 and bf16, B
//     symbolic (one executable runs B = 1 and 3);
//   - q a view of an input, k and v of matmuls; linears with a bias (GPT's),
//     the views reading the bias add that the GEMM's epilogue writes;
//   - the blocks' merge: y transposed to [B, T, H, D] and read as [B, T,
//     H*D] by an output projection, written there by the kernel;
//   - the kernel count: with the views, the copy kernels are gone
//     (TJ_ATTENTION_VIEWS=off brings them back, the same numbers).
// bf16 within 3e-2, f16 within 1e-2 (relative, absolute below 1): the
// kernels' own tolerances (cuda_attention_test). Skips (exit 77) without
// a driver or GPU.
// Usage: cuda_attention_views_test [FILTER]: only the tests whose name
// contains it.

#include <math.h>
#include <stdlib.h>

#include "backends/cuda/cuda_executable.h"
#include "lib/dtype.h"
#include "tests/cuda/cuda_test_util.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
enum { kH = 4, kDm = 64 };  // query heads; the model dim x is read with

typedef struct shape_t {
  int64_t t, d, hkv;
  bool causal;
  bool q_input;  // q a view of an input [B, T, H, D], not of a matmul
  bool bias;     // linears with a bias (GPT's): the views read the bias add
  bool merge;    // y viewed as [B, T, H*D] @ wo [H*D, kDm] (the blocks' merge)
} shape_t;

// x @ w, or with |s->bias| linear(x, w, b) of a b [N] read after the
// weights.
static tj_value_t project(tj_graph_t* g, tj_dtype_t dt, const shape_t* s,
                          tj_value_t x, tj_value_t w, int64_t n,
                          const char* bname) {
  if (!s->bias) return tj_graph_matmul(g, x, w);
  tj_value_t b = tj_graph_input(g, dt, 1, (int64_t[]){n}, bname);
  return tj_graph_linear(g, x, w, b);
}

// Inputs: x [B, T, kDm], wq [kDm, H*D] (or q [B, T, H, D]), wk, wv [kDm,
// Hkv*D], then with |s->bias| bq, bk, bv; y [B, H, T, D].
static tj_graph_t* build(tj_context_t* ctx, tj_dtype_t dt, const shape_t* s) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "views", &g));
  if (!g) return NULL;
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, dt, 3, (int64_t[]){B, s->t, kDm}, "x");
  tj_value_t q4 = tj_value_none(), wq = tj_value_none();
  if (s->q_input) {
    q4 = tj_graph_input(g, dt, 4, (int64_t[]){B, s->t, kH, s->d}, "q");
  } else {
    wq = tj_graph_input(g, dt, 2, (int64_t[]){kDm, kH * s->d}, "wq");
  }
  tj_value_t wk =
      tj_graph_input(g, dt, 2, (int64_t[]){kDm, s->hkv * s->d}, "wk");
  tj_value_t wv =
      tj_graph_input(g, dt, 2, (int64_t[]){kDm, s->hkv * s->d}, "wv");
  if (!s->q_input)
    q4 = tj_graph_reshape(g, project(g, dt, s, x, wq, kH * s->d, "bq"), 4,
                          (int64_t[]){B, s->t, kH, s->d});
  const int32_t perm[4] = {0, 2, 1, 3};
  tj_value_t k4 =
      tj_graph_reshape(g, project(g, dt, s, x, wk, s->hkv * s->d, "bk"), 4,
                       (int64_t[]){B, s->t, s->hkv, s->d});
  tj_value_t v4 =
      tj_graph_reshape(g, project(g, dt, s, x, wv, s->hkv * s->d, "bv"), 4,
                       (int64_t[]){B, s->t, s->hkv, s->d});
  tj_value_t y = tj_graph_attention(
      g, tj_graph_transpose(g, q4, perm), tj_graph_transpose(g, k4, perm),
      tj_graph_transpose(g, v4, perm), tj_value_none(), 0.0, s->causal);
  if (s->merge) {
    tj_value_t wo = tj_graph_input(g, dt, 2, (int64_t[]){kH * s->d, kDm}, "wo");
    y = tj_graph_matmul(g,
                        tj_graph_reshape(g, tj_graph_transpose(g, y, perm), 3,
                                         (int64_t[]){B, s->t, kH * s->d}),
                        wo);
  }
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

typedef struct data_t {
  int32_t num_in;
  void* in[8];
  int64_t dims[8][4];
  int32_t ranks[8];
  int64_t ny;
  int64_t y_dims[4];
  int32_t y_rank;
  void* want;
} data_t;

static void add_in(data_t* d, tj_dtype_t dt, int32_t rank, const int64_t* dims,
                   double scale) {
  int64_t n = 1;
  for (int32_t j = 0; j < rank; ++j) n *= dims[j];
  memcpy(d->dims[d->num_in], dims, sizeof(int64_t) * (size_t)rank);
  d->ranks[d->num_in] = rank;
  d->in[d->num_in++] = tj_test_random_tensor(&g_rng, dt, n, scale);
}

static void data_make(tj_graph_t* ref, tj_dtype_t dt, const shape_t* s,
                      int64_t b, data_t* d) {
  memset(d, 0, sizeof(*d));
  // Products of order 1: w's terms ~ 1 / sqrt(kDm).
  double ws = 2.0 / sqrt((double)kDm);
  add_in(d, dt, 3, (int64_t[]){b, s->t, kDm}, 1.0);
  if (s->q_input) {
    add_in(d, dt, 4, (int64_t[]){b, s->t, kH, s->d}, 1.0);
  } else {
    add_in(d, dt, 2, (int64_t[]){kDm, kH * s->d}, ws);
  }
  add_in(d, dt, 2, (int64_t[]){kDm, s->hkv * s->d}, ws);
  add_in(d, dt, 2, (int64_t[]){kDm, s->hkv * s->d}, ws);
  if (s->bias) {
    if (!s->q_input) add_in(d, dt, 1, (int64_t[]){kH * s->d}, 1.0);
    add_in(d, dt, 1, (int64_t[]){s->hkv * s->d}, 1.0);
    add_in(d, dt, 1, (int64_t[]){s->hkv * s->d}, 1.0);
  }
  if (s->merge) {
    add_in(d, dt, 2, (int64_t[]){kH * s->d, kDm},
           1.0 / sqrt((double)(kH * s->d)));
    memcpy(d->y_dims, (int64_t[]){b, s->t, kDm, 0}, sizeof(d->y_dims));
    d->y_rank = 3;
    d->ny = b * s->t * kDm;
  } else {
    memcpy(d->y_dims, (int64_t[]){b, kH, s->t, s->d}, sizeof(d->y_dims));
    d->y_rank = 4;
    d->ny = b * kH * s->t * s->d;
  }
  tj_tensor_t in[8];
  for (int32_t i = 0; i < d->num_in; ++i)
    in[i] = tj_tensor_make(d->in[i], dt, d->ranks[i], d->dims[i]);
  d->want = calloc((size_t)d->ny, tj_dtype_size(dt));
  tj_tensor_t want = tj_tensor_make(d->want, dt, d->y_rank, d->y_dims);
  CHECK_OK(tj_reference_run(ref, in, d->num_in, &want, 1));
}

static void data_free(data_t* d) {
  for (int32_t i = 0; i < d->num_in; ++i) free(d->in[i]);
  free(d->want);
}

static tj_context_t* g_ref_ctx;

// Compiles |s| in |dt| and checks each run against the reference; returns
// the kernel count (-1 on failure).
static int32_t check(tj_dtype_t dt, const shape_t* s, data_t* runs,
                     int32_t num_runs) {
  tj_context_t* ctx = tj_test_cuda_context_create(NULL);
  if (!ctx) return -1;
  tj_graph_t* g = build(ctx, dt, s);
  tj_compile_options_t o;
  tj_test_cuda_compile_options(&o, dt);
  o.autotune = TJ_AUTOTUNE_OFF;  // the GEMMs are not what is tested here
  tj_executable_t* exe = NULL;
  if (g) CHECK_OK(tj_compile(g, &o, &exe));
  char what[160];
  snprintf(what, sizeof(what), "%s t%lld d%lld hkv%lld%s%s%s%s%s",
           tj_dtype_name(dt), (long long)s->t, (long long)s->d,
           (long long)s->hkv, s->causal ? " causal" : "",
           s->q_input ? " q input" : "", s->bias ? " bias" : "",
           s->merge ? " merge" : "",
           getenv("TJ_ATTENTION_VIEWS") ? " TJ_ATTENTION_VIEWS=off" : "");
  for (int32_t i = 0; exe && i < num_runs; ++i) {
    data_t* r = &runs[i];
    tj_tensor_t in[8];
    for (int32_t j = 0; j < r->num_in; ++j)
      in[j] = tj_tensor_make(r->in[j], dt, r->ranks[j], r->dims[j]);
    void* got = calloc((size_t)r->ny, tj_dtype_size(dt));
    tj_tensor_t got_t = tj_tensor_make(got, dt, r->y_rank, r->y_dims);
    CHECK_OK(tj_executable_run(exe, in, r->num_in, &got_t, 1));
    bool ok = tj_test_close_enough(what, dt, got, r->want, r->ny,
                                   dt == TJ_DTYPE_BF16 ? 3e-2 : 1e-2);
    if (!ok)
      fprintf(stderr, "  (%s at B = %lld)\n", what, (long long)r->y_dims[0]);
    CHECK(ok);
    free(got);
  }
  int32_t kernels = -1;
  if (exe) {
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    CHECK_EQ_INT(0, st.num_graph_breaks);
    kernels = st.num_kernels;
    printf("# %s: %d kernels\n", what, (int)kernels);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return kernels;
}

static const int64_t kBs[] = {1, 3};
enum { kNumBs = 2 };

// Each shape with the views and, with |ab|, without them: the same
// numbers, and the copy kernels (|copies|) gone with them.
static void check_ab(tj_dtype_t dt, const shape_t* s, bool ab, int copies) {
  tj_graph_t* ref = build(g_ref_ctx, dt, s);
  data_t runs[kNumBs];
  for (int32_t i = 0; i < kNumBs; ++i) data_make(ref, dt, s, kBs[i], &runs[i]);
  tj_graph_destroy(ref);
  int32_t on = check(dt, s, runs, kNumBs);
  if (ab) {
    setenv("TJ_ATTENTION_VIEWS", "off", 1);
    int32_t off = check(dt, s, runs, kNumBs);
    unsetenv("TJ_ATTENTION_VIEWS");
    if (on >= 0 && off >= 0) CHECK_EQ_INT(off - copies, on);
  }
  for (int32_t i = 0; i < kNumBs; ++i) data_free(&runs[i]);
}

static const tj_dtype_t kTypes[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};

TEST(heads) {
  // Per dtype: D 64 and 128, grouped (Hkv 2) causal with the A/B, and not
  // grouped (Hkv 4) nor causal.
  for (size_t t = 0; t < TJ_ARRAY_SIZE(kTypes); ++t) {
    for (int d = 64; d <= 128; d += 64) {
      bool grouped = (d == 64) == (t == 0);
      shape_t s = {
          grouped ? 130 : 77, d, grouped ? 2 : 4, grouped, false, false, false};
      check_ab(kTypes[t], &s, grouped, 3);
    }
  }
}

TEST(q_input) {
  shape_t s = {77, 128, 2, true, true, false, false};
  check_ab(TJ_DTYPE_BF16, &s, true, 3);
}

// GPT's linears have a bias: the views read the bias add, written by the
// GEMM's epilogue.
TEST(bias) {
  shape_t s = {130, 64, 4, true, false, true, false};
  check_ab(TJ_DTYPE_BF16, &s, true, 3);
  shape_t s2 = {77, 128, 2, false, true, true, false};
  check_ab(TJ_DTYPE_F16, &s2, true, 3);
}

// The blocks' merge: y transposed to [B, T, H, D] and read as [B, T, H*D]
// by the output projection is written there by the attention kernel (an
// output view), one copy kernel fewer again.
TEST(merge) {
  shape_t s = {130, 64, 4, true, false, true, true};
  check_ab(TJ_DTYPE_BF16, &s, true, 4);
  shape_t s2 = {77, 128, 2, true, false, false, true};
  check_ab(TJ_DTYPE_F16, &s2, true, 4);
}

#define RUN_IF(filter, name) \
  if (!(filter) || strstr(#name, (filter))) RUN_TEST(name)

int main(int argc, char** argv) {
  const char* filter = argc > 1 ? argv[1] : NULL;
  tj_test_require_gpu();
  if (tj_test_context_create(&g_ref_ctx) != NULL) return 1;
  RUN_IF(filter, heads);
  RUN_IF(filter, q_input);
  RUN_IF(filter, bias);
  RUN_IF(filter, merge);
  tj_context_destroy(g_ref_ctx);
  TEST_MAIN_END();
}
