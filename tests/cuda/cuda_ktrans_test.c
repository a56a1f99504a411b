// ktrans (issues 13, 14, 17) on the GPU: x @ w^T with w an [N, K] weight
// (PyTorch's Linear layout: B contiguous along k), bf16 and f16, against
// tj_reference_run, with every GEMM candidate of the autotuner forced in
// turn (the module's kernel, mma.sync bk32/bk64, the cp.async wgmma tiles,
// cuBLASLt with W transposed + the epilogue kernel, the TMA cooperative,
// pingpong and 256-row schedules, split-K in 2, 4 and 8 slices) and
// autotuned. Each executable must report the candidate that was forced
// (not a fallback), one kernel and no graph break (no host step).
//   - y = x @ w^T and y = gelu(x @ w^T + b), x [M, K] with M symbolic: one
//     executable per candidate runs M = 2048 (N 4096, K 1024; the
//     reference on the first and last 64 rows) and decode-sized M = 1, 5,
//     16 (whole); ragged M 197, N 131, K 72 (no dim a tile multiple);
//   - linear3d: gelu(x[B, 96, 512] @ w^T + b) with one [384, 512] weight,
//     one rank-2 GEMM of B*96 rows (every rank-2 candidate), B = 3;
//   - batched: x[2, M, 136] @ transpose(w[2, 100, 136]), a weight per batch
//     entry, and attention's scores x[2, 3, M, 64] @ transpose(w[2, 3, 72,
//     64]) (the batched candidates: the module's kernel, mma.sync, the
//     cp.async wgmma tiles);
//   - f32 with allow_tf32: gelu(x @ w^T + b) on the TF32 candidates.
// bf16 within 3e-2 and f16 within 1e-2 (relative, absolute below 1), TF32
// within 1e-2. Skips (exit 77) without a driver or GPU.

#include <math.h>

#include "backends/cuda/cuda_executable.h"
#include "lib/dtype.h"
#include "tests/cuda/cuda_test_util.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double tol_of(tj_dtype_t dt) {
  return dt == TJ_DTYPE_BF16 ? 3e-2 : 1e-2;
}

//===--- the graphs ---===//

typedef enum form_e {
  FORM_PLAIN,    // x[M, K] @ transpose(w[N, K])
  FORM_GELU,     // gelu(x @ w^T + b)
  FORM_LINEAR3,  // gelu(x[B, T, K] @ w^T + b)
  FORM_BATCHED,  // x[2, M, K] @ transpose(w[2, N, K], (0, 2, 1))
  FORM_HEADS,    // x[2, 3, M, K] @ transpose(w[2, 3, N, K]): q @ k^T
} form_t;

static const char* const kFormNames[] = {"plain", "gelu_bias", "linear3d",
                                         "batched", "heads"};

enum { kT = 96 };  // linear3d's rows a batch entry

typedef struct shape_t {
  form_t form;
  int64_t n, k;
} shape_t;

static tj_graph_t* build(tj_context_t* ctx, tj_dtype_t dt, const shape_t* s) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "ktrans", &g));
  if (!g) return NULL;
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x, w;
  if (s->form == FORM_HEADS) {
    x = tj_graph_input(g, dt, 4, (int64_t[]){2, 3, B, s->k}, "x");
    w = tj_graph_input(g, dt, 4, (int64_t[]){2, 3, s->n, s->k}, "w");
    w = tj_graph_transpose(g, w, (int32_t[]){0, 1, 3, 2});
  } else if (s->form == FORM_BATCHED) {
    x = tj_graph_input(g, dt, 3, (int64_t[]){2, B, s->k}, "x");
    w = tj_graph_input(g, dt, 3, (int64_t[]){2, s->n, s->k}, "w");
    w = tj_graph_transpose(g, w, (int32_t[]){0, 2, 1});
  } else {
    x = s->form == FORM_LINEAR3
            ? tj_graph_input(g, dt, 3, (int64_t[]){B, kT, s->k}, "x")
            : tj_graph_input(g, dt, 2, (int64_t[]){B, s->k}, "x");
    w = tj_graph_input(g, dt, 2, (int64_t[]){s->n, s->k}, "w");
    w = tj_graph_transpose(g, w, (int32_t[]){1, 0});
  }
  tj_value_t y;
  if (s->form == FORM_GELU || s->form == FORM_LINEAR3) {
    tj_value_t b = tj_graph_input(g, dt, 1, (int64_t[]){s->n}, "b");
    y = tj_graph_gelu(g, tj_graph_linear(g, x, w, b), false);
  } else {
    y = tj_graph_matmul(g, x, w);
  }
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

// The inputs of one run at M = |m| (B for linear3d) and their reference.
typedef struct data_t {
  int32_t num_in;
  void* in[3];
  int64_t dims[3][4];
  int32_t ranks[3];
  int64_t ny;  // elements of y
  int64_t y_dims[4];
  int32_t y_rank;
} data_t;

static void data_make(tj_dtype_t dt, const shape_t* s, int64_t m, data_t* d) {
  memset(d, 0, sizeof(*d));
  bool bias = s->form == FORM_GELU || s->form == FORM_LINEAR3;
  d->num_in = bias ? 3 : 2;
  switch (s->form) {
    case FORM_HEADS:
      d->ranks[0] = d->ranks[1] = 4;
      memcpy(d->dims[0], (int64_t[]){2, 3, m, s->k}, sizeof(int64_t) * 4);
      memcpy(d->dims[1], (int64_t[]){2, 3, s->n, s->k}, sizeof(int64_t) * 4);
      d->y_rank = 4;
      memcpy(d->y_dims, (int64_t[]){2, 3, m, s->n}, sizeof(int64_t) * 4);
      break;
    case FORM_BATCHED:
      d->ranks[0] = d->ranks[1] = 3;
      memcpy(d->dims[0], (int64_t[]){2, m, s->k}, sizeof(int64_t) * 3);
      memcpy(d->dims[1], (int64_t[]){2, s->n, s->k}, sizeof(int64_t) * 3);
      d->y_rank = 3;
      memcpy(d->y_dims, (int64_t[]){2, m, s->n}, sizeof(int64_t) * 3);
      break;
    case FORM_LINEAR3:
      d->ranks[0] = 3;
      d->ranks[1] = 2;
      memcpy(d->dims[0], (int64_t[]){m, kT, s->k}, sizeof(int64_t) * 3);
      memcpy(d->dims[1], (int64_t[]){s->n, s->k}, sizeof(int64_t) * 2);
      d->y_rank = 3;
      memcpy(d->y_dims, (int64_t[]){m, kT, s->n}, sizeof(int64_t) * 3);
      break;
    default:
      d->ranks[0] = d->ranks[1] = 2;
      memcpy(d->dims[0], (int64_t[]){m, s->k}, sizeof(int64_t) * 2);
      memcpy(d->dims[1], (int64_t[]){s->n, s->k}, sizeof(int64_t) * 2);
      d->y_rank = 2;
      memcpy(d->y_dims, (int64_t[]){m, s->n}, sizeof(int64_t) * 2);
      break;
  }
  d->ranks[2] = 1;
  d->dims[2][0] = s->n;
  // Terms of the sums ~ 1 / sqrt(K): outputs of order 1.
  double scales[3] = {1.0, 1.0 / sqrt((double)s->k), 0.5};
  for (int32_t i = 0; i < d->num_in; ++i) {
    int64_t n = 1;
    for (int32_t j = 0; j < d->ranks[i]; ++j) n *= d->dims[i][j];
    d->in[i] = tj_test_random_tensor(&g_rng, dt, n, scales[i]);
  }
  d->ny = 1;
  for (int32_t j = 0; j < d->y_rank; ++j) d->ny *= d->y_dims[j];
}

static void data_free(data_t* d) {
  for (int32_t i = 0; i < d->num_in; ++i) free(d->in[i]);
}

static void tensors(tj_dtype_t dt, const data_t* d, tj_tensor_t* in) {
  for (int32_t i = 0; i < d->num_in; ++i)
    in[i] = tj_tensor_make(d->in[i], dt, d->ranks[i], d->dims[i]);
}

// The reference of rows [r0, r0 + rows) of a rank-2 form's y (the graph's
// B is symbolic: the rows' slice of x is a run of its own), or of all of
// y (rows < 0).
static void* reference(tj_graph_t* g, tj_dtype_t dt, const data_t* d,
                       int64_t r0, int64_t rows) {
  size_t es = tj_dtype_size(dt);
  tj_tensor_t in[3];
  tensors(dt, d, in);
  int64_t y_dims[4];
  memcpy(y_dims, d->y_dims, sizeof(y_dims));
  int64_t ny = d->ny;
  int64_t x_dims[2] = {rows, d->dims[0][1]};
  if (rows >= 0) {
    in[0] = tj_tensor_make((char*)d->in[0] + (size_t)(r0 * x_dims[1]) * es, dt,
                           2, x_dims);
    y_dims[0] = rows;
    ny = rows * y_dims[1];
  }
  void* want = calloc((size_t)ny, es);
  tj_tensor_t want_t = tj_tensor_make(want, dt, d->y_rank, y_dims);
  CHECK_OK(tj_reference_run(g, in, d->num_in, &want_t, 1));
  return want;
}

//===--- the candidates ---===//

typedef struct candidate_t {
  const char* forced;  // NULL: autotuned
  const char* expect;  // the choice's prefix
  bool rank2;          // needs a rank-2 GEMM
  int32_t split;       // split-K's slices: needs K a multiple of 64 s
} candidate_t;

// The TMA schedules take the batched forms too: a K-major B with a batch
// is a rank-3 tensor map over [entries, N, K].
static const candidate_t kCandidates[] = {
    {NULL, "", false, 0},
    {"0", "fused default", false, 0},
    {"1", "fused mma bk32 s3", false, 0},
    {"2", "fused mma bk64 s3", false, 0},
    {"3", "fused wgmma 128x256 s4", false, 0},
    {"4", "cublaslt", true, 0},
    {"5", "fused wgmma 64x128 s4", false, 0},
    {"6", "fused wgmma 128x128 s4", false, 0},
    {"7", "fused tma ws 128x128 s4 persistent", false, 0},
    {"8", "fused tma ws 128x256 s4 persistent", false, 0},
    {"9", "fused tma pingpong 64x256", false, 0},
    {"10", "fused tma ws 128x256 s3", false, 0},
    {"11", "fused tma ws 128x64 s8", false, 0},
    {"12", "split-k 2", true, 2},
    {"13", "split-k 4", true, 4},
    {"14", "split-k 8", true, 8},
    {"15", "fused tma pingpong 128x128", false, 0},
    {"16", "fused tma ws 256x128", false, 0},
    {"17", "fused wgmma 128x64 s4", false, 0},
};

// TF32 (allow_tf32): the exact kernel, cuBLASLt's TF32 mode, the TMA
// schedules on wgmma .tf32 (cuda_exec_test's tf32_candidates).
static const candidate_t kTf32Candidates[] = {
    {NULL, "", false, 0},
    {"4", "cublaslt", true, 0},
    {"7", "fused tma ws 128x128 s4 persistent", true, 0},
    {"8", "fused tma ws 128x256 s4 persistent", true, 0},
    {"9", "fused tma pingpong 64x256", true, 0},
    {"10", "fused tma ws 128x256 s3", true, 0},
};

static bool applies(const candidate_t* c, const shape_t* s) {
  if (c->rank2 && s->form >= FORM_BATCHED) return false;
  return c->split == 0 || s->k % (64 * c->split) == 0;
}

// The runs of one case: inputs at each M and their reference, computed
// once (on a graph of g_ref_ctx) for all the candidates.
typedef struct run_t {
  int64_t m;
  bool sampled;  // the reference of the first and last 64 rows only
  data_t d;
  void* want[2];
} run_t;

enum { kSampleRows = 64 };

static tj_context_t* g_ref_ctx;

// |ms|: M of each run, a negative entry -M for M rows of which the first
// and last kSampleRows are checked.
static void runs_make(tj_dtype_t dt, const shape_t* s, const int64_t* ms,
                      int32_t num, run_t* runs) {
  tj_graph_t* g = build(g_ref_ctx, dt, s);
  for (int32_t i = 0; i < num; ++i) {
    run_t* r = &runs[i];
    memset(r, 0, sizeof(*r));
    r->m = ms[i] < 0 ? -ms[i] : ms[i];
    r->sampled = ms[i] < 0;
    data_make(dt, s, r->m, &r->d);
    if (!g) continue;
    if (r->sampled) {
      r->want[0] = reference(g, dt, &r->d, 0, kSampleRows);
      r->want[1] = reference(g, dt, &r->d, r->m - kSampleRows, kSampleRows);
    } else {
      r->want[0] = reference(g, dt, &r->d, 0, -1);
    }
  }
  tj_graph_destroy(g);
}

static void runs_free(run_t* runs, int32_t num) {
  for (int32_t i = 0; i < num; ++i) {
    data_free(&runs[i].d);
    free(runs[i].want[0]);
    free(runs[i].want[1]);
  }
}

// Compiles |s| in |dt| with |c| forced and checks each of |runs|.
static void check(tj_dtype_t dt, const shape_t* s, const candidate_t* c,
                  const run_t* runs, int32_t num_runs) {
  tj_context_t* ctx = tj_test_cuda_context_create(c->forced);
  if (!ctx) return;
  tj_graph_t* g = build(ctx, dt, s);
  tj_compile_options_t o;
  tj_test_cuda_compile_options(&o, dt);
  tj_executable_t* exe = NULL;
  if (g) CHECK_OK(tj_compile(g, &o, &exe));
  char what[128];
  snprintf(what, sizeof(what), "%s %s n%lld k%lld candidate %s",
           tj_dtype_name(dt), kFormNames[s->form], (long long)s->n,
           (long long)s->k, c->forced ? c->forced : "tuned");
  double tol = dt == TJ_DTYPE_F32 ? 1e-2 : tol_of(dt);
  size_t es = tj_dtype_size(dt);
  for (int32_t i = 0; exe && i < num_runs; ++i) {
    const run_t* r = &runs[i];
    if (!r->want[0]) continue;
    tj_tensor_t in[3];
    tensors(dt, &r->d, in);
    void* got = calloc((size_t)r->d.ny, es);
    tj_tensor_t got_t = tj_tensor_make(got, dt, r->d.y_rank, r->d.y_dims);
    CHECK_OK(tj_executable_run(exe, in, r->d.num_in, &got_t, 1));
    bool ok = true;
    if (r->sampled) {
      int64_t n = s->n, starts[2] = {0, r->m - kSampleRows};
      for (int j = 0; j < 2; ++j)
        ok &= tj_test_close_enough(what, dt,
                                   (char*)got + (size_t)(starts[j] * n) * es,
                                   r->want[j], kSampleRows * n, tol);
    } else {
      ok = tj_test_close_enough(what, dt, got, r->want[0], r->d.ny, tol);
    }
    if (!ok) fprintf(stderr, "  (%s at M = %lld)\n", what, (long long)r->m);
    CHECK(ok);
    free(got);
  }
  if (exe) {
    tj_cuda_program_stats_t cs;
    bool want_choice = c->forced && applies(c, s);
    tj_test_check_gemm_choice(what, exe, want_choice ? c->expect : NULL, &cs);
    printf("# %s: %s\n", what, cs.gemm_choice);
    // The GEMM runs on the GPU: one kernel, no host step.
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    if (st.num_graph_breaks != 0 || st.num_kernels != 1)
      fprintf(stderr, "  %s: %d kernels, %d graph breaks\n", what,
              (int)st.num_kernels, (int)st.num_graph_breaks);
    CHECK_EQ_INT(0, st.num_graph_breaks);
    CHECK_EQ_INT(1, st.num_kernels);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// Every candidate of |cands| on |s| in |dt| at |ms| (runs_make).
static void check_all(tj_dtype_t dt, const shape_t* s, const candidate_t* cands,
                      size_t num_cands, const int64_t* ms, int32_t num_ms) {
  run_t runs[4];
  runs_make(dt, s, ms, num_ms, runs);
  for (size_t c = 0; c < num_cands; ++c) {
    if (s->form >= FORM_BATCHED && !applies(&cands[c], s)) continue;
    check(dt, s, &cands[c], runs, num_ms);
  }
  runs_free(runs, num_ms);
}

static const tj_dtype_t kTypes[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};

// M = 2048 (sampled rows) and decode M = 1, 5, 16 on one executable, at
// N 4096, K 1024 (issue 13's (2048, 1024, 4096)); ragged 197 x 131 x 72.
TEST(rank2_every_candidate) {
  static const int64_t kLarge[] = {-2048, 1, 5, 16};
  static const int64_t kRagged[] = {197};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(kTypes); ++t) {
    for (int f = FORM_PLAIN; f <= FORM_GELU; ++f) {
      shape_t large = {(form_t)f, 4096, 1024};
      shape_t ragged = {(form_t)f, 131, 72};
      check_all(kTypes[t], &large, kCandidates, TJ_ARRAY_SIZE(kCandidates),
                kLarge, 4);
      check_all(kTypes[t], &ragged, kCandidates, TJ_ARRAY_SIZE(kCandidates),
                kRagged, 1);
    }
  }
}

// x[B, 96, 512] @ w^T with one weight: a rank-2 GEMM of B*96 rows, so the
// rank-2 candidates take it.
TEST(linear3d_every_candidate) {
  static const int64_t kB[] = {3};
  shape_t s = {FORM_LINEAR3, 384, 512};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(kTypes); ++t)
    check_all(kTypes[t], &s, kCandidates, TJ_ARRAY_SIZE(kCandidates), kB, 1);
}

// A weight per batch entry, rank 3 and 4: the batched main loops (the
// rank-2 candidates do not apply and are skipped).
TEST(batched) {
  static const int64_t kM[] = {197, 64};
  shape_t s = {FORM_BATCHED, 100, 136};
  // Attention's scores q @ k^T, [2, 3, T, 64] @ [2, 3, 64, T'].
  shape_t heads = {FORM_HEADS, 72, 64};
  for (size_t t = 0; t < TJ_ARRAY_SIZE(kTypes); ++t) {
    check_all(kTypes[t], &s, kCandidates, TJ_ARRAY_SIZE(kCandidates), kM, 2);
    check_all(kTypes[t], &heads, kCandidates, TJ_ARRAY_SIZE(kCandidates), kM,
              2);
  }
}

TEST(tf32_candidates) {
  static const int64_t kM[] = {-2048, 3};
  shape_t s = {FORM_GELU, 1024, 1024};
  check_all(TJ_DTYPE_F32, &s, kTf32Candidates, TJ_ARRAY_SIZE(kTf32Candidates),
            kM, 2);
}

// Runs test |name| unless |filter| (argv[1]) is given and not part of it.
#define RUN_IF(filter, name) \
  if (!(filter) || strstr(#name, (filter))) RUN_TEST(name)

// Usage: cuda_ktrans_test [FILTER]: only the tests whose name contains
// FILTER (rank2, linear3d, batched, tf32), to split a device run.
int main(int argc, char** argv) {
  const char* filter = argc > 1 ? argv[1] : NULL;
  tj_test_require_gpu();
  if (tj_test_context_create(&g_ref_ctx) != NULL) return 1;
  RUN_IF(filter, rank2_every_candidate);
  RUN_IF(filter, linear3d_every_candidate);
  RUN_IF(filter, batched);
  RUN_IF(filter, tf32_candidates);
  tj_context_destroy(g_ref_ctx);
  TEST_MAIN_END();
}
