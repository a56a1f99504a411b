// swiglu (issue 14) on the GPU: the dual GEMM, mul(silu(x @ wg), x @ wu)
// as one kernel (sm_90a), against tj_reference_run.
//   - the forms: silu, mul's operands swapped, gelu (GEGLU), [N, K]
//     weights read K-major, a [B, 24, d] input (one rank-2 GEMM of B*24
//     rows), and the Llama MLP (rmsnorm, the dual GEMM, the down projection
//     with the residual); bf16 and f16, M symbolic: one executable runs
//     M = 1, 7, 197 and 1000 (no M a tile multiple), at N 1024, K 512 and
//     ragged N 136, K 72;
//   - every GEMM candidate forced on the silu form: those with a dual form
//     (the cp.async wgmma tiles of 128 and 256 columns, the TMA
//     cooperative, pingpong and 256-row schedules, cuBLASLt twice and the
//     epilogue kernel) must run as forced, the others (mma.sync, 64-column
//     tiles, split-K) fall back to the module's kernel; all one kernel, no
//     host step;
//   - TJ_DUAL_GEMM=off: two GEMM kernels, the same numbers;
//   - f32 with allow_tf32: no dual GEMM (two kernels), numbers within TF32's
//     tolerance.
// bf16 within 3e-2 and f16 within 1e-2 (relative, absolute below 1), TF32
// within 1e-2. Skips (exit 77) without a driver or GPU; on a GPU that is
// not sm_90a the dual forms keep two kernels.
// Usage: cuda_swiglu_test [FILTER]: only the tests whose name contains it.

#include <math.h>
#include <stdlib.h>

#include "backends/cuda/cuda_executable.h"
#include "lib/dtype.h"
#include "tests/cuda/cuda_test_util.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double tol_of(tj_dtype_t dt) {
  return dt == TJ_DTYPE_BF16 ? 3e-2 : 1e-2;
}

static bool g_sm90a;  // the device runs the dual GEMM

//===--- the graphs ---===//

typedef enum form_e {
  FORM_SILU,     // mul(silu(x @ wg), x @ wu), x [M, K]
  FORM_SWAPPED,  // mul(x @ wu, silu(x @ wg))
  FORM_GELU,     // mul(gelu(x @ wg), x @ wu)
  FORM_KMAJOR,   // wg, wu [N, K] read transposed
  FORM_LINEAR3,  // x [M, 24, K]
  FORM_MLP,      // x + down(silu(rmsnorm(x) @ wg) * (rmsnorm(x) @ wu))
} form_t;

static const char* const kFormNames[] = {"silu",   "swapped", "gelu",
                                         "kmajor", "linear3", "mlp"};

enum { kT = 24 };

typedef struct shape_t {
  form_t form;
  int64_t n, k;
} shape_t;

// Inputs: x, wg, wu (and wd for the MLP).
static tj_graph_t* build(tj_context_t* ctx, tj_dtype_t dt, const shape_t* s) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "swiglu", &g));
  if (!g) return NULL;
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = s->form == FORM_LINEAR3
                     ? tj_graph_input(g, dt, 3, (int64_t[]){B, kT, s->k}, "x")
                     : tj_graph_input(g, dt, 2, (int64_t[]){B, s->k}, "x");
  tj_value_t wg, wu;
  if (s->form == FORM_KMAJOR) {
    wg = tj_graph_transpose(
        g, tj_graph_input(g, dt, 2, (int64_t[]){s->n, s->k}, "wg"),
        (int32_t[]){1, 0});
    wu = tj_graph_transpose(
        g, tj_graph_input(g, dt, 2, (int64_t[]){s->n, s->k}, "wu"),
        (int32_t[]){1, 0});
  } else {
    wg = tj_graph_input(g, dt, 2, (int64_t[]){s->k, s->n}, "wg");
    wu = tj_graph_input(g, dt, 2, (int64_t[]){s->k, s->n}, "wu");
  }
  tj_value_t h =
      s->form == FORM_MLP ? tj_graph_rms_norm(g, x, (tj_value_t){0}, 1e-6) : x;
  tj_value_t gate = tj_graph_matmul(g, h, wg);
  tj_value_t up = tj_graph_matmul(g, h, wu);
  tj_value_t act = s->form == FORM_GELU ? tj_graph_gelu(g, gate, false)
                                        : tj_graph_silu(g, gate);
  tj_value_t y = s->form == FORM_SWAPPED ? tj_graph_mul(g, up, act)
                                         : tj_graph_mul(g, act, up);
  if (s->form == FORM_MLP) {
    tj_value_t wd = tj_graph_input(g, dt, 2, (int64_t[]){s->n, s->k}, "wd");
    y = tj_graph_add(g, x, tj_graph_matmul(g, y, wd));
  }
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

typedef struct data_t {
  int32_t num_in;
  void* in[4];
  int64_t dims[4][3];
  int32_t ranks[4];
  int64_t ny;
  int64_t y_dims[3];
  int32_t y_rank;
  void* want;
} data_t;

static void data_make(tj_graph_t* ref, tj_dtype_t dt, const shape_t* s,
                      int64_t m, data_t* d) {
  memset(d, 0, sizeof(*d));
  bool l3 = s->form == FORM_LINEAR3;
  d->num_in = s->form == FORM_MLP ? 4 : 3;
  d->ranks[0] = l3 ? 3 : 2;
  if (l3) {
    memcpy(d->dims[0], (int64_t[]){m, kT, s->k}, sizeof(int64_t) * 3);
  } else {
    memcpy(d->dims[0], (int64_t[]){m, s->k}, sizeof(int64_t) * 2);
  }
  for (int i = 1; i < 3; ++i) {
    d->ranks[i] = 2;
    d->dims[i][0] = s->form == FORM_KMAJOR ? s->n : s->k;
    d->dims[i][1] = s->form == FORM_KMAJOR ? s->k : s->n;
  }
  d->ranks[3] = 2;
  d->dims[3][0] = s->n;
  d->dims[3][1] = s->k;
  d->y_rank = d->ranks[0];
  memcpy(d->y_dims, d->dims[0], sizeof(d->y_dims));
  d->y_dims[d->y_rank - 1] = s->form == FORM_MLP ? s->k : s->n;
  // Terms ~ 1 / sqrt(K): products of order 1.
  double scales[4] = {1.0, 2.0 / sqrt((double)s->k), 2.0 / sqrt((double)s->k),
                      1.0 / sqrt((double)s->n)};
  for (int32_t i = 0; i < d->num_in; ++i) {
    int64_t n = 1;
    for (int32_t j = 0; j < d->ranks[i]; ++j) n *= d->dims[i][j];
    d->in[i] = tj_test_random_tensor(&g_rng, dt, n, scales[i]);
  }
  d->ny = 1;
  for (int32_t j = 0; j < d->y_rank; ++j) d->ny *= d->y_dims[j];
  if (!ref) return;
  tj_tensor_t in[4];
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

// Compiles |s| in |dt| (|forced|: a TJ_CUDA_GEMM_CANDIDATE; NULL: tuned)
// and checks each run against the reference; the kernels it must have and
// the choice's prefix (|expect|, NULL: not checked).
static void check(tj_dtype_t dt, const shape_t* s, const char* forced,
                  const char* expect, uint32_t want_kernels, data_t* runs,
                  int32_t num_runs) {
  tj_context_t* ctx = tj_test_cuda_context_create(forced);
  if (!ctx) return;
  tj_graph_t* g = build(ctx, dt, s);
  tj_compile_options_t o;
  tj_test_cuda_compile_options(&o, dt);
  tj_executable_t* exe = NULL;
  if (g) CHECK_OK(tj_compile(g, &o, &exe));
  char what[160];
  snprintf(what, sizeof(what), "%s %s n%lld k%lld candidate %s%s",
           tj_dtype_name(dt), kFormNames[s->form], (long long)s->n,
           (long long)s->k, forced ? forced : "tuned",
           getenv("TJ_DUAL_GEMM") ? " TJ_DUAL_GEMM=off" : "");
  double tol = dt == TJ_DTYPE_F32 ? 1e-2 : tol_of(dt);
  for (int32_t i = 0; exe && i < num_runs; ++i) {
    data_t* r = &runs[i];
    if (!r->want) continue;
    tj_tensor_t in[4];
    for (int32_t j = 0; j < r->num_in; ++j)
      in[j] = tj_tensor_make(r->in[j], dt, r->ranks[j], r->dims[j]);
    void* got = calloc((size_t)r->ny, tj_dtype_size(dt));
    tj_tensor_t got_t = tj_tensor_make(got, dt, r->y_rank, r->y_dims);
    CHECK_OK(tj_executable_run(exe, in, r->num_in, &got_t, 1));
    bool ok = tj_test_close_enough(what, dt, got, r->want, r->ny, tol);
    if (!ok)
      fprintf(stderr, "  (%s at M = %lld)\n", what, (long long)r->dims[0][0]);
    CHECK(ok);
    free(got);
  }
  if (exe) {
    tj_cuda_program_stats_t cs;
    tj_test_check_gemm_choice(what, exe, expect, &cs);
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    if (st.num_graph_breaks != 0 || st.num_kernels != (int32_t)want_kernels)
      fprintf(stderr, "  %s: %d kernels (want %u), %d graph breaks\n", what,
              (int)st.num_kernels, want_kernels, (int)st.num_graph_breaks);
    CHECK_EQ_INT(0, st.num_graph_breaks);
    CHECK_EQ_INT((int)want_kernels, (int)st.num_kernels);
    printf("# %s: %d kernels, %s\n", what, (int)st.num_kernels, cs.gemm_choice);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

static const int64_t kMs[] = {1, 7, 197, 1000};
enum { kNumMs = 4 };

static void runs_make(tj_dtype_t dt, const shape_t* s, data_t* runs) {
  tj_graph_t* ref = build(g_ref_ctx, dt, s);
  for (int32_t i = 0; i < kNumMs; ++i) {
    // linear3's M counts batch entries of 24 rows.
    int64_t m = s->form == FORM_LINEAR3 ? (kMs[i] + kT - 1) / kT : kMs[i];
    data_make(ref, dt, s, m, &runs[i]);
  }
  tj_graph_destroy(ref);
}

static void runs_free(data_t* runs) {
  for (int32_t i = 0; i < kNumMs; ++i) data_free(&runs[i]);
}

// The kernels of |s|: one GEMM kernel for the dual pair, two without.
static uint32_t kernels_of(const shape_t* s, bool dual) {
  return (dual ? 1u : 2u) + (s->form == FORM_MLP ? 2u : 0u);
}

static const tj_dtype_t kTypes[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};

TEST(forms_tuned) {
  for (size_t t = 0; t < TJ_ARRAY_SIZE(kTypes); ++t) {
    for (int f = FORM_SILU; f <= FORM_MLP; ++f) {
      shape_t shapes[2] = {{(form_t)f, 1024, 512}, {(form_t)f, 136, 72}};
      for (int j = 0; j < 2; ++j) {
        if (j && f == FORM_MLP) continue;
        data_t runs[kNumMs];
        runs_make(kTypes[t], &shapes[j], runs);
        check(kTypes[t], &shapes[j], NULL, NULL,
              kernels_of(&shapes[j], g_sm90a), runs, kNumMs);
        runs_free(runs);
      }
    }
  }
}

typedef struct candidate_t {
  const char* forced;
  const char* expect;  // the choice's prefix
} candidate_t;

// Those without a dual form fall back to the module's kernel (0).
static const candidate_t kCandidates[] = {
    {"0", "fused default"},
    {"1", "fused default"},
    {"2", "fused default"},
    {"3", "fused wgmma 128x256 s4"},
    {"4", "cublaslt matmul + epilogue"},
    {"5", "fused wgmma 64x128 s4"},
    {"6", "fused wgmma 128x128 s4"},
    {"7", "fused tma ws 128x128 s4 persistent"},
    {"8", "fused tma ws 128x256 s4 persistent"},
    {"9", "fused tma pingpong 64x256"},
    {"10", "fused tma ws 128x256 s3"},
    {"11", "fused default"},
    {"12", "fused default"},
    {"13", "fused default"},
    {"15", "fused tma pingpong 128x128"},
    {"16", "fused tma ws 256x128"},
    {"17", "fused default"},
};

TEST(every_candidate) {
  if (!g_sm90a) return;
  shape_t shapes[2] = {{FORM_SILU, 1024, 512}, {FORM_KMAJOR, 136, 72}};
  for (int j = 0; j < 2; ++j) {
    data_t runs[kNumMs];
    runs_make(TJ_DTYPE_BF16, &shapes[j], runs);
    for (size_t c = 0; c < TJ_ARRAY_SIZE(kCandidates); ++c)
      check(TJ_DTYPE_BF16, &shapes[j], kCandidates[c].forced,
            kCandidates[c].expect, 1, runs, kNumMs);
    runs_free(runs);
  }
}

// TJ_DUAL_GEMM=off (read when a context is created): two GEMMs again.
TEST(dual_gemm_off) {
  setenv("TJ_DUAL_GEMM", "off", 1);
  shape_t s = {FORM_SILU, 1024, 512};
  data_t runs[kNumMs];
  runs_make(TJ_DTYPE_BF16, &s, runs);
  check(TJ_DTYPE_BF16, &s, NULL, NULL, kernels_of(&s, false), runs, kNumMs);
  runs_free(runs);
  unsetenv("TJ_DUAL_GEMM");
}

// f32 (allow_tf32): no dual form; two kernels.
TEST(f32_two_kernels) {
  shape_t s = {FORM_SILU, 1024, 512};
  data_t runs[kNumMs];
  runs_make(TJ_DTYPE_F32, &s, runs);
  check(TJ_DTYPE_F32, &s, NULL, NULL, kernels_of(&s, false), runs, kNumMs);
  runs_free(runs);
}

#define RUN_IF(filter, name) \
  if (!(filter) || strstr(#name, (filter))) RUN_TEST(name)

int main(int argc, char** argv) {
  const char* filter = argc > 1 ? argv[1] : NULL;
  g_sm90a = tj_test_require_gpu();
  if (tj_test_context_create(&g_ref_ctx) != NULL) return 1;
  RUN_IF(filter, forms_tuned);
  RUN_IF(filter, every_candidate);
  RUN_IF(filter, dual_gemm_off);
  RUN_IF(filter, f32_two_kernels);
  tj_context_destroy(g_ref_ctx);
  TEST_MAIN_END();
}
