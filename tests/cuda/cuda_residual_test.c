// A GEMM's residual as cuBLASLt's C (issue 14): a matmul whose epilogue
// adds a residual laid out as its output, and at most a bias along n
// (x + attn @ wo, x + linear(h, w, b): the blocks' output and down
// projections), runs as cuBLASLt's candidate in one call, the residual as
// C with beta 1 and the bias as its BIAS epilogue (lt_direct), no
// epilogue kernel. Against tj_reference_run:
//   - the forms: r + x @ w, x @ w + r, r + linear(x, w, b), [N, K] weights
//     read K-major, a bias alone (no residual), and two that keep the
//     epilogue kernel: gelu before the residual, a residual of another
//     dtype;
//   - bf16, f16 and f32 (allow_tf32), M symbolic: one executable runs
//     M = 1, 7, 197 and 1000, at N 512, K 256 and ragged N 136, K 72;
//   - candidate 4 forced: the direct forms write the output from cuBLASLt,
//     with no temporary for an epilogue kernel to read (the run's arena
//     is M*N elements smaller than with TJ_CUBLASLT_RESIDUAL=off, which
//     brings the temporary and the kernel back for the residual forms;
//     the bias alone and the two others are the same either way); tuned,
//     the same numbers.
// Tolerance: cuBLASLt forms x @ w + b + r in f32 and rounds once, where
// the reference rounds the product and each sum to the dtype; with terms
// of order 1 the two differ by a few of the dtype's ulps: bf16 within
// 2e-2, f16 within 3e-3 (relative, absolute below 1), TF32 within 1e-2.
// Skips (exit 77) without a driver or GPU, or without cuBLASLt.
// Usage: cuda_residual_test [FILTER]: only the tests whose name contains it.

#include <math.h>
#include <stdlib.h>

#include "backends/cuda/cublaslt.h"
#include "backends/cuda/cuda_executable.h"
#include "lib/dtype.h"
#include "tests/cuda/cuda_test_util.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static double tol_of(tj_dtype_t dt) {
  return dt == TJ_DTYPE_BF16 ? 2e-2 : dt == TJ_DTYPE_F16 ? 3e-3 : 1e-2;
}

//===--- the graphs ---===//

typedef enum form_e {
  FORM_RESIDUAL,  // r + x @ w
  FORM_SWAPPED,   // x @ w + r
  FORM_LINEAR,    // r + linear(x, w, b)
  FORM_KMAJOR,    // r + x @ w^T, w [N, K]
  FORM_BIAS,      // linear(x, w, b), no residual
  FORM_GELU,      // r + gelu(x @ w): the epilogue kernel
  FORM_F32_R,     // r (f32) + cast(x @ w, f32): the epilogue kernel
} form_t;

static const char* const kFormNames[] = {
    "residual", "swapped", "linear", "kmajor", "bias", "gelu", "f32_r"};

// Whether candidate 4 runs |f| as one cuBLASLt call (with the residual in
// C unless |residual_off|).
static bool direct(form_t f, bool residual_off) {
  if (f == FORM_GELU || f == FORM_F32_R) return false;
  return f == FORM_BIAS || !residual_off;
}

typedef struct shape_t {
  form_t form;
  int64_t n, k;
} shape_t;

enum { kMaxIn = 4 };

// Inputs: x, w, then b and r as the form has them.
static tj_graph_t* build(tj_context_t* ctx, tj_dtype_t dt, const shape_t* s) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "residual", &g));
  if (!g) return NULL;
  int64_t M = tj_graph_symbol(g, "M");
  tj_value_t x = tj_graph_input(g, dt, 2, (int64_t[]){M, s->k}, "x");
  tj_value_t w;
  if (s->form == FORM_KMAJOR) {
    w = tj_graph_transpose(
        g, tj_graph_input(g, dt, 2, (int64_t[]){s->n, s->k}, "w"),
        (int32_t[]){1, 0});
  } else {
    w = tj_graph_input(g, dt, 2, (int64_t[]){s->k, s->n}, "w");
  }
  tj_value_t y;
  if (s->form == FORM_LINEAR || s->form == FORM_BIAS) {
    tj_value_t b = tj_graph_input(g, dt, 1, (int64_t[]){s->n}, "b");
    y = tj_graph_linear(g, x, w, b);
  } else {
    y = tj_graph_matmul(g, x, w);
  }
  tj_dtype_t rt = s->form == FORM_F32_R ? TJ_DTYPE_F32 : dt;
  if (s->form != FORM_BIAS) {
    tj_value_t r = tj_graph_input(g, rt, 2, (int64_t[]){M, s->n}, "r");
    if (s->form == FORM_GELU) y = tj_graph_gelu(g, y, false);
    if (s->form == FORM_F32_R) y = tj_graph_cast(g, y, TJ_DTYPE_F32);
    y = s->form == FORM_SWAPPED ? tj_graph_add(g, y, r) : tj_graph_add(g, r, y);
  }
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

typedef struct data_t {
  int32_t num_in;
  void* in[kMaxIn];
  tj_dtype_t dtypes[kMaxIn];
  int64_t dims[kMaxIn][2];
  int32_t ranks[kMaxIn];
  tj_dtype_t y_dtype;
  int64_t ny;
  int64_t y_dims[2];
  void* want;
} data_t;

static void data_make(tj_graph_t* ref, tj_dtype_t dt, const shape_t* s,
                      int64_t m, data_t* d) {
  memset(d, 0, sizeof(*d));
  form_t f = s->form;
  bool kmajor = f == FORM_KMAJOR;
  int32_t n = 0;
  // x: [M, K] of order 1; w: terms ~ 1 / sqrt(K), products of order 1.
  d->dims[n][0] = m;
  d->dims[n][1] = s->k;
  d->dtypes[n] = dt;
  d->ranks[n] = 2;
  d->in[n] = tj_test_random_tensor(&g_rng, dt, m * s->k, 1.0);
  ++n;
  d->dims[n][0] = kmajor ? s->n : s->k;
  d->dims[n][1] = kmajor ? s->k : s->n;
  d->dtypes[n] = dt;
  d->ranks[n] = 2;
  d->in[n] =
      tj_test_random_tensor(&g_rng, dt, s->n * s->k, 2.0 / sqrt((double)s->k));
  ++n;
  if (f == FORM_LINEAR || f == FORM_BIAS) {
    d->dims[n][0] = s->n;
    d->dtypes[n] = dt;
    d->ranks[n] = 1;
    d->in[n] = tj_test_random_tensor(&g_rng, dt, s->n, 1.0);
    ++n;
  }
  if (f != FORM_BIAS) {
    d->dims[n][0] = m;
    d->dims[n][1] = s->n;
    d->dtypes[n] = f == FORM_F32_R ? TJ_DTYPE_F32 : dt;
    d->ranks[n] = 2;
    d->in[n] = tj_test_random_tensor(&g_rng, d->dtypes[n], m * s->n, 1.0);
    ++n;
  }
  d->num_in = n;
  d->y_dtype = f == FORM_F32_R ? TJ_DTYPE_F32 : dt;
  d->y_dims[0] = m;
  d->y_dims[1] = s->n;
  d->ny = m * s->n;
  if (!ref) return;
  tj_tensor_t in[kMaxIn];
  for (int32_t i = 0; i < d->num_in; ++i)
    in[i] = tj_tensor_make(d->in[i], d->dtypes[i], d->ranks[i], d->dims[i]);
  d->want = calloc((size_t)d->ny, tj_dtype_size(d->y_dtype));
  tj_tensor_t want = tj_tensor_make(d->want, d->y_dtype, 2, d->y_dims);
  CHECK_OK(tj_reference_run(ref, in, d->num_in, &want, 1));
}

static void data_free(data_t* d) {
  for (int32_t i = 0; i < d->num_in; ++i) free(d->in[i]);
  free(d->want);
}

static tj_context_t* g_ref_ctx;
static bool g_have_lt;

// Compiles |s| in |dt| with candidate |forced| ("4"; NULL: tuned) and
// checks each run against the reference; forced, the choice must be
// cuBLASLt's. Returns the run arena's bytes after the runs (-1 on
// failure).
static int64_t check(tj_dtype_t dt, const shape_t* s, const char* forced,
                     data_t* runs, int32_t num_runs) {
  tj_context_t* ctx = tj_test_cuda_context_create(forced);
  if (!ctx) return -1;
  tj_graph_t* g = build(ctx, dt, s);
  tj_compile_options_t o;
  tj_test_cuda_compile_options(&o, dt);
  o.cuda.disable_graphs = true;
  tj_executable_t* exe = NULL;
  if (g) CHECK_OK(tj_compile(g, &o, &exe));
  const char* off = getenv("TJ_CUBLASLT_RESIDUAL");
  char what[160];
  snprintf(what, sizeof(what), "%s %s n%lld k%lld candidate %s%s",
           tj_dtype_name(dt), kFormNames[s->form], (long long)s->n,
           (long long)s->k, forced ? forced : "tuned",
           off ? " TJ_CUBLASLT_RESIDUAL=off" : "");
  for (int32_t i = 0; exe && i < num_runs; ++i) {
    data_t* r = &runs[i];
    if (!r->want) continue;
    tj_tensor_t in[kMaxIn];
    for (int32_t j = 0; j < r->num_in; ++j)
      in[j] = tj_tensor_make(r->in[j], r->dtypes[j], r->ranks[j], r->dims[j]);
    void* got = calloc((size_t)r->ny, tj_dtype_size(r->y_dtype));
    tj_tensor_t got_t = tj_tensor_make(got, r->y_dtype, 2, r->y_dims);
    CHECK_OK(tj_executable_run(exe, in, r->num_in, &got_t, 1));
    bool ok = tj_test_close_enough(
        what, r->y_dtype, got, r->want, r->ny,
        tol_of(r->y_dtype == TJ_DTYPE_F32 ? TJ_DTYPE_F32 : dt));
    if (!ok)
      fprintf(stderr, "  (%s at M = %lld)\n", what, (long long)r->dims[0][0]);
    CHECK(ok);
    free(got);
  }
  int64_t arena = -1;
  if (exe) {
    tj_cuda_program_stats_t cs;
    CHECK_OK(tj_executable_cuda_stats(exe, &cs));
    arena = cs.arena_bytes;
    if (forced && strncmp(cs.gemm_choice, "cublaslt", 8) != 0) {
      fprintf(stderr, "  %s: ran \"%s\", want cuBLASLt\n", what,
              cs.gemm_choice);
      CHECK(false);
    }
    printf("# %s: %s, arena %lld bytes\n", what, cs.gemm_choice,
           (long long)arena);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return arena;
}

static const int64_t kMs[] = {1, 7, 197, 1000};
enum { kNumMs = 4 };

static void runs_make(tj_dtype_t dt, const shape_t* s, data_t* runs) {
  tj_graph_t* ref = build(g_ref_ctx, dt, s);
  for (int32_t i = 0; i < kNumMs; ++i) data_make(ref, dt, s, kMs[i], &runs[i]);
  tj_graph_destroy(ref);
}

static void runs_free(data_t* runs) {
  for (int32_t i = 0; i < kNumMs; ++i) data_free(&runs[i]);
}

static const tj_dtype_t kTypes[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16, TJ_DTYPE_F32};

// The forced runs' arena bytes at the ragged shape, by dtype and form
// (residual_off compares with them).
static int64_t g_arena[3][FORM_F32_R + 1];

// Every form and dtype with candidate 4 forced, at the ragged shape and
// (f16, bf16) N 512, K 256; tuned too, bf16 r + linear (tuning compiles
// every candidate: seconds a shape). Under
// TJ_CUBLASLT_RESIDUAL=off the ragged shape alone, forced: the residual
// forms then hold the temporary (M*N elements at M = 1000) in the arena,
// the others not, against the same runs with the residual in C.
static void every_form(bool off) {
  for (size_t t = 0; t < TJ_ARRAY_SIZE(kTypes); ++t) {
    tj_dtype_t dt = kTypes[t];
    for (int f = FORM_RESIDUAL; f <= FORM_F32_R; ++f) {
      if (dt == TJ_DTYPE_F32 && f == FORM_F32_R) continue;
      shape_t shapes[2] = {{(form_t)f, 136, 72}, {(form_t)f, 512, 256}};
      int num_shapes = off || dt == TJ_DTYPE_F32 ? 1 : 2;
      bool tuned = !off && dt == TJ_DTYPE_BF16 && f == FORM_LINEAR;
      for (int j = 0; j < num_shapes; ++j) {
        data_t runs[kNumMs];
        runs_make(dt, &shapes[j], runs);
        if (g_have_lt) {
          int64_t arena = check(dt, &shapes[j], "4", runs, kNumMs);
          if (j == 0 && !off) g_arena[t][f] = arena;
          int64_t on = g_arena[t][f];
          if (j == 0 && off && arena >= 0 && on >= 0) {
            int64_t temp =
                direct((form_t)f, false) && !direct((form_t)f, true)
                    ? kMs[kNumMs - 1] * shapes[j].n * (int64_t)tj_dtype_size(dt)
                    : 0;
            bool ok = temp ? arena >= on + temp : arena == on;
            if (!ok)
              fprintf(stderr,
                      "  %s %s: arena %lld bytes, %lld with the residual in "
                      "C (temporary %lld)\n",
                      tj_dtype_name(dt), kFormNames[f], (long long)arena,
                      (long long)on, (long long)temp);
            CHECK(ok);
          }
        }
        if (tuned || !g_have_lt) check(dt, &shapes[j], NULL, runs, kNumMs);
        runs_free(runs);
      }
    }
  }
}

TEST(forms) { every_form(false); }

// TJ_CUBLASLT_RESIDUAL=off (read when a context is created): the residual
// forms take the epilogue kernel and its temporary again, the same
// numbers. After forms.
TEST(residual_off) {
  setenv("TJ_CUBLASLT_RESIDUAL", "off", 1);
  every_form(true);
  unsetenv("TJ_CUBLASLT_RESIDUAL");
}

#define RUN_IF(filter, name) \
  if (!(filter) || strstr(#name, (filter))) RUN_TEST(name)

int main(int argc, char** argv) {
  const char* filter = argc > 1 ? argv[1] : NULL;
  tj_test_require_gpu();
  tj_cublaslt_t* lt = NULL;
  tj_status_t s = tj_cublaslt_open(tj_allocator_system(), &lt);
  g_have_lt = s == NULL;
  if (s) printf("# no cuBLASLt (%s): tuned runs only\n", tj_status_message(s));
  tj_status_free(s);
  tj_cublaslt_close(lt);
  for (size_t t = 0; t < TJ_ARRAY_SIZE(g_arena); ++t)
    for (size_t f = 0; f < TJ_ARRAY_SIZE(g_arena[0]); ++f) g_arena[t][f] = -1;
  if (tj_test_context_create(&g_ref_ctx) != NULL) return 1;
  RUN_IF(filter, forms);
  RUN_IF(filter, residual_off);
  tj_context_destroy(g_ref_ctx);
  TEST_MAIN_END();
}
