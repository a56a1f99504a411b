// The x86 GEMM autotuner through tj_compile / tj_executable_run: every
// candidate (generated schedules, OpenBLAS + epilogue) gives the
// reference's values; a decision is timed once per shape bucket, then
// reused from memory, from another context through the disk cache, and not
// at all when the cache is off; the budget bounds the timing; an absent
// OpenBLAS is a logged, skipped candidate; options are validated.
//
// OPENBLAS_CORETYPE and friends are left as the environment sets them.

#include <unistd.h>

#include "backends/x86/gemm_tune.h"
#include "backends/x86/openblas.h"
#include "lib/dtype.h"
#include "tests/unit/test.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;

static double rng_uniform(double lo, double hi) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return lo + (hi - lo) * (double)(g_rng >> 11) / 9007199254740992.0;
}

typedef struct log_t {
  char text[16384];
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

static int count_of(const char* text, const char* needle) {
  int n = 0;
  for (const char* p = strstr(text, needle); p; p = strstr(p + 1, needle)) ++n;
  return n;
}

// y = tanh(x @ w + b) + r, z = x @ v^T, u = p^T @ x: a fused epilogue and
// both transposed layouts. x [B, 48], w [48, 70], v [40, 48], p [B, 24].
enum { K = 48, N = 70, NV = 40, NP = 24 };

static tj_graph_t* make_graph(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "tuned", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, K}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){K, N}, "w");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){N}, "b");
  tj_value_t r = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, N}, "r");
  tj_value_t v = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){NV, K}, "v");
  tj_value_t p = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, NP}, "p");
  tj_value_t y = tj_graph_add(
      g, tj_graph_tanh(g, tj_graph_add(g, tj_graph_matmul(g, x, w), b)), r);
  tj_graph_output(g, y, "y");
  tj_graph_output(
      g, tj_graph_matmul(g, x, tj_graph_transpose(g, v, (int32_t[]){1, 0})),
      "z");
  tj_graph_output(
      g, tj_graph_matmul(g, tj_graph_transpose(g, p, (int32_t[]){1, 0}), x),
      "u");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

typedef struct io_t {
  int64_t B;
  float* in[6];
  float* out[3];
  int64_t in_shape[6][2], out_shape[3][2];
  tj_tensor_t inputs[6], outputs[3];
} io_t;

static void io_make(io_t* io, int64_t B) {
  memset(io, 0, sizeof(*io));
  io->B = B;
  int64_t shapes[6][2] = {{B, K}, {K, N}, {1, N}, {B, N}, {NV, K}, {B, NP}};
  int32_t ranks[6] = {2, 2, 1, 2, 2, 2};
  for (int i = 0; i < 6; ++i) {
    int64_t n = shapes[i][0] * shapes[i][1];
    io->in[i] = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t e = 0; e < n; ++e) io->in[i][e] = (float)rng_uniform(-1, 1);
    if (ranks[i] == 1) {
      io->in_shape[i][0] = shapes[i][1];
    } else {
      io->in_shape[i][0] = shapes[i][0];
      io->in_shape[i][1] = shapes[i][1];
    }
    io->inputs[i] =
        tj_tensor_make(io->in[i], TJ_DTYPE_F32, ranks[i], io->in_shape[i]);
  }
  int64_t oshapes[3][2] = {{B, N}, {B, NV}, {NP, K}};
  for (int i = 0; i < 3; ++i) {
    int64_t n = oshapes[i][0] * oshapes[i][1];
    io->out[i] = calloc((size_t)(n ? n : 1), sizeof(float));
    io->out_shape[i][0] = oshapes[i][0];
    io->out_shape[i][1] = oshapes[i][1];
    io->outputs[i] =
        tj_tensor_make(io->out[i], TJ_DTYPE_F32, 2, io->out_shape[i]);
  }
}

static void io_free(io_t* io) {
  for (int i = 0; i < 6; ++i) free(io->in[i]);
  for (int i = 0; i < 3; ++i) free(io->out[i]);
}

static int64_t out_numel(const io_t* io, int i) {
  return io->out_shape[i][0] * io->out_shape[i][1];
}

// |got| vs |want| outputs: f32 dot products of length <= max(K, B) of
// values in [-1, 1].
static bool io_close(const io_t* got, const io_t* want, const char* what) {
  double atol = 2.4e-7 * (double)(K + got->B + 1);
  bool ok = true;
  for (int i = 0; i < 3; ++i) {
    for (int64_t e = 0; e < out_numel(got, i); ++e) {
      double g = got->out[i][e], w = want->out[i][e];
      if (fabs(g - w) > atol + 2e-6 * fabs(w)) {
        fprintf(stderr, "  %s: output %d [%lld] = %.9g, want %.9g\n", what, i,
                (long long)e, g, w);
        ok = false;
        break;
      }
    }
  }
  return ok;
}

static void io_copy_inputs(io_t* dst, const io_t* src) {
  for (int i = 0; i < 6; ++i) {
    int64_t n = src->in_shape[i][0] *
                (src->inputs[i].rank == 2 ? src->in_shape[i][1] : 1);
    memcpy(dst->in[i], src->in[i], sizeof(float) * (size_t)n);
  }
}

// A context whose diagnostics go to |log|, with |log_categories| and
// |openblas| as its log and OpenBLAS settings (NULL: the environment's).
static tj_context_t* make_context_with(log_t* log, const char* log_categories,
                                       const char* openblas) {
  tj_context_options_t co;
  tj_context_options_initialize(&co);
  co.log = log_categories;
  co.openblas = openblas;
  co.diagnostic_fn = capture;
  co.diagnostic_user_data = log;
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&co, &ctx));
  return ctx;
}

static tj_context_t* make_context(log_t* log) {
  return make_context_with(log, NULL, NULL);
}

// The threads OpenBLAS runs, so that its candidate is available; 0 (the
// default) when the library is absent.
static int32_t blas_threads(void) {
  char why[256];
  const tj_openblas_t* blas = tj_openblas_open(NULL, why, sizeof(why));
  return blas && blas->get_num_threads ? blas->get_num_threads() : 0;
}

static tj_compile_options_t tuned_options(const char* dir, int32_t budget) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.autotune = TJ_AUTOTUNE_ON;
  o.x86.autotune_budget_ms = budget;
  o.cache_dir = dir;
  o.x86.num_threads = blas_threads();
  return o;
}

static void run_reference(tj_context_t* ctx, io_t* io) {
  tj_graph_t* g = make_graph(ctx);
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_REFERENCE;
  tj_executable_t* ref = NULL;
  CHECK_OK(tj_compile(g, &o, &ref));
  CHECK_OK(tj_executable_run(ref, io->inputs, 6, io->outputs, 3));
  tj_executable_release(ref);
  tj_graph_destroy(g);
}

// Every available candidate of every GEMM, forced in turn, gives the
// reference's values; the generated ones agree with one another to f32
// rounding too. OpenBLAS, when the library is here, is one of them.
TEST(candidates_agree) {
  log_t log;
  memset(&log, 0, sizeof(log));
  tj_context_t* ctx = make_context(&log);
  tj_graph_t* g = make_graph(ctx);
  tj_compile_options_t o = tuned_options("", 20);
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  tj_x86_tuner_t* tuner = tj_x86_executable_tuner(exe);
  CHECK(tuner != NULL);
  // The candidates of the first GEMM kernel (all GEMMs share the list's
  // shape: generated, OpenBLAS, variants).
  const char* names[TJ_X86_TUNER_MAX_CANDIDATES];
  bool avail[TJ_X86_TUNER_MAX_CANDIDATES];
  int32_t n = 0;
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  for (uint32_t k = 0; k < (uint32_t)st.num_kernels && n == 0; ++k) {
    n = tj_x86_tuner_candidates(tuner, k, names, avail);
  }
  CHECK(n >= 3);
  // The generated kernel's tile is the ISA's (6x64 with AVX-512, 6x16 with
  // AVX2): ask the library, never assume the host.
  CHECK(strncmp(names[0], "jit ", 4) == 0);
  CHECK(strncmp(names[2], "jit ", 4) == 0);
  CHECK_CONTAINS(names[1], "openblas");
  bool have_blas = blas_threads() > 0;
  CHECK(avail[1] == have_blas);
  static const int64_t batches[] = {1, 5, 37};
  for (size_t bi = 0; bi < TJ_ARRAY_SIZE(batches); ++bi) {
    io_t want, first;
    io_make(&want, batches[bi]);
    io_make(&first, batches[bi]);
    io_copy_inputs(&first, &want);
    run_reference(ctx, &want);
    for (int32_t c = 0; c < n; ++c) {
      if (!avail[c]) continue;
      CHECK_OK(tj_x86_tuner_force(tuner, names[c]));
      io_t got;
      io_make(&got, batches[bi]);
      io_copy_inputs(&got, &want);
      CHECK_OK(tj_executable_run(exe, got.inputs, 6, got.outputs, 3));
      char what[128];
      snprintf(what, sizeof(what), "B=%lld %s", (long long)batches[bi],
               names[c]);
      CHECK(io_close(&got, &want, what));
      if (c == 0) {
        for (int i = 0; i < 3; ++i) {
          memcpy(first.out[i], got.out[i],
                 sizeof(float) * (size_t)out_numel(&got, i));
        }
      } else {
        CHECK(io_close(&got, &first, what));
      }
      io_free(&got);
    }
    io_free(&want);
    io_free(&first);
  }
  tj_x86_tuner_stats_t ts;
  tj_x86_tuner_stats(tuner, &ts);
  CHECK(ts.variant_runs > 0);
  CHECK(have_blas == (ts.openblas_runs > 0));
  CHECK_EQ_INT(0, ts.tunings);  // forced: nothing timed
  // A name no candidate has on any host, whatever its tier: candidates are
  // matched by their whole name, "jit MxN ncX kcY" (schedule_name in
  // backends/x86/gemm_tune.c) or "openblas ...", so "jit 99x99" never
  // matches; nor could any tier's tile be 99x99, as tj_kir_gemm_resolve
  // (kir/schedule.c) caps a tile's accumulators at 28 zmm (AVX-512) or 13
  // ymm/xmm registers.
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "no GEMM kernel",
               tj_x86_tuner_force(tuner, "jit 99x99"));
  CHECK_OK(tj_x86_tuner_force(tuner, NULL));
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

static void run_tuned(tj_executable_t* exe, tj_context_t* ctx, int64_t B) {
  io_t got, want;
  io_make(&want, B);
  io_make(&got, B);
  io_copy_inputs(&got, &want);
  run_reference(ctx, &want);
  CHECK_OK(tj_executable_run(exe, got.inputs, 6, got.outputs, 3));
  char what[64];
  snprintf(what, sizeof(what), "tuned B=%lld", (long long)B);
  CHECK(io_close(&got, &want, what));
  io_free(&got);
  io_free(&want);
}

// The name of candidate |c| of the first GEMM kernel of |exe| ("" if none).
static void candidate_name(tj_executable_t* exe, int32_t c, char* out,
                           size_t size) {
  const char* names[TJ_X86_TUNER_MAX_CANDIDATES];
  bool avail[TJ_X86_TUNER_MAX_CANDIDATES];
  int32_t n = 0;
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  tj_x86_tuner_t* tuner = tj_x86_executable_tuner(exe);
  for (uint32_t k = 0; tuner && k < (uint32_t)st.num_kernels && n == 0; ++k) {
    n = tj_x86_tuner_candidates(tuner, k, names, avail);
  }
  snprintf(out, size, "%s", c < n ? names[c] : "");
}

// Compiles the tuned graph, runs it for each of |bs| and returns the
// tuner's counters; |variant| (when not NULL) receives the name of the
// first GEMM's first variant candidate.
static tj_x86_tuner_stats_t compile_and_run(tj_context_t* ctx, const char* dir,
                                            const int64_t* bs, int nb,
                                            char* variant, size_t size) {
  tj_graph_t* g = make_graph(ctx);
  tj_compile_options_t o = tuned_options(dir, 20);
  tj_executable_t* exe = NULL;
  tj_x86_tuner_stats_t ts;
  memset(&ts, 0, sizeof(ts));
  CHECK_OK(tj_compile(g, &o, &exe));
  if (exe) {
    for (int i = 0; i < nb; ++i) run_tuned(exe, ctx, bs[i]);
    tj_x86_tuner_stats(tj_x86_executable_tuner(exe), &ts);
    if (variant) candidate_name(exe, 2, variant, size);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  return ts;
}

// Each (GEMM, M bucket, N, K) is timed once: B = 37 and 40 share bucket
// 64, 100 is bucket 128. A second compile in the context reuses the decisions
// from memory, one in a fresh context from disk; without a disk cache a fresh
// context times again. Every run matches the reference.
TEST(decisions_cached) {
  char dir[] = "/tmp/tj_autotune_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  log_t log;
  memset(&log, 0, sizeof(log));
  tj_context_t* ctx = make_context_with(&log, "autotune", NULL);
  const int64_t bs[3] = {37, 40, 100};
  char variant[64] = "";
  tj_x86_tuner_stats_t ts =
      compile_and_run(ctx, dir, bs, 3, variant, sizeof(variant));
  // y and z (M = B): buckets 64 and 128; u (M = 24, K = B): one bucket,
  // three K values.
  CHECK_EQ_INT(7, ts.tunings);
  CHECK_EQ_INT(0, ts.cached);
  CHECK_EQ_INT(1, ts.variant_builds);
  CHECK_EQ_INT(7, count_of(log.text, "timed in"));
  CHECK_EQ_INT(1, count_of(log.text, "variant kernels built in"));
  CHECK_CONTAINS(log.text, "(bucket 64)");
  CHECK_CONTAINS(log.text, "(bucket 128)");
  // The variants are timed too (their tiles depend on the ISA).
  CHECK(strncmp(variant, "jit ", 4) == 0);
  CHECK_CONTAINS(log.text, variant);
  // Same context: the memory cache.
  memset(&log, 0, sizeof(log));
  ts = compile_and_run(ctx, dir, bs, 3, NULL, 0);
  CHECK_EQ_INT(0, ts.tunings);
  CHECK_EQ_INT(7, ts.cached);
  CHECK_EQ_INT(0, count_of(log.text, "timed in"));
  CHECK_EQ_INT(7, count_of(log.text, "decision from the cache"));
  tj_context_destroy(ctx);
  // A fresh context (as a new process would be): the disk cache.
  memset(&log, 0, sizeof(log));
  ctx = make_context_with(&log, "autotune", NULL);
  ts = compile_and_run(ctx, dir, bs, 3, NULL, 0);
  CHECK_EQ_INT(0, ts.tunings);
  CHECK_EQ_INT(7, ts.cached);
  tj_context_destroy(ctx);
  // No disk cache: a fresh context times again.
  memset(&log, 0, sizeof(log));
  ctx = make_context_with(&log, "autotune", NULL);
  ts = compile_and_run(ctx, "", bs, 1, NULL, 0);
  CHECK_EQ_INT(3, ts.tunings);
  tj_context_destroy(ctx);
  char cmd[64];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
}

// A budget far below one run: the generated kernel is still timed (it
// always runs once), the others are skipped as over budget, and the
// decision is the generated kernel.
TEST(budget) {
  log_t log;
  memset(&log, 0, sizeof(log));
  tj_context_t* ctx = make_context_with(&log, "autotune", NULL);
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "big", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 512}, "x");
  tj_value_t w =
      tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){512, 1024}, "w");
  tj_graph_output(g, tj_graph_matmul(g, x, w), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t o = tuned_options("", 1);
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  int64_t b = 512;
  float* xs = calloc(512 * 512, sizeof(float));
  float* ws = calloc(512 * 1024, sizeof(float));
  float* ys = calloc(512 * 1024, sizeof(float));
  for (int i = 0; i < 512 * 512; ++i) xs[i] = (float)(i % 7) - 3;
  for (int i = 0; i < 512 * 1024; ++i) ws[i] = (float)(i % 5) - 2;
  tj_tensor_t in[2] = {
      tj_tensor_make(xs, TJ_DTYPE_F32, 2, (int64_t[]){b, 512}),
      tj_tensor_make(ws, TJ_DTYPE_F32, 2, (int64_t[]){512, 1024})};
  tj_tensor_t out[1] = {
      tj_tensor_make(ys, TJ_DTYPE_F32, 2, (int64_t[]){b, 1024})};
  CHECK_OK(tj_executable_run(exe, in, 2, out, 1));
  // Integer-valued data: every candidate is exact.
  double want = 0;
  for (int q = 0; q < 512; ++q) {
    want += (double)xs[3 * 512 + q] * ws[(size_t)q * 1024 + 11];
  }
  CHECK(ys[3 * 1024 + 11] == (float)want);
  tj_x86_tuner_stats_t ts;
  tj_x86_tuner_stats(tj_x86_executable_tuner(exe), &ts);
  CHECK_EQ_INT(1, ts.tunings);
  CHECK_CONTAINS(log.text, "over the 1 ms budget");
  char generated[64], decision[64 + 8];
  candidate_name(exe, 0, generated, sizeof(generated));
  snprintf(decision, sizeof(decision), "-> %s", generated);
  CHECK(strncmp(generated, "jit ", 4) == 0);
  CHECK_CONTAINS(log.text, decision);
  free(xs);
  free(ws);
  free(ys);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// Without OpenBLAS (a library name that does not exist, or "none") the
// candidate is skipped with the reason logged, and runs still match.
TEST(openblas_absent) {
  static const char* const libs[] = {"/nonexistent/libopenblas.so.0", "none"};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(libs); ++i) {
    log_t log;
    memset(&log, 0, sizeof(log));
    tj_context_t* ctx = make_context_with(&log, "autotune", libs[i]);
    tj_graph_t* g = make_graph(ctx);
    tj_compile_options_t o = tuned_options("", 20);
    o.x86.num_threads = 0;  // no OpenBLAS threads to match
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &o, &exe));
    CHECK_CONTAINS(log.text, "candidate \"openblas sgemm + epilogue\" skipped");
    CHECK_CONTAINS(log.text,
                   i == 0 ? "dlopen" : "disabled by the openblas setting");
    run_tuned(exe, ctx, 9);
    tj_x86_tuner_stats_t ts;
    tj_x86_tuner_stats(tj_x86_executable_tuner(exe), &ts);
    CHECK_EQ_INT(3, ts.tunings);
    CHECK_EQ_INT(0, ts.openblas_runs);
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "openblas",
                 tj_x86_tuner_force(tj_x86_executable_tuner(exe),
                                    "openblas sgemm + epilogue"));
    tj_executable_release(exe);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
  }
}

TEST(options) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  tj_graph_t* g = make_graph(ctx);
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  CHECK_EQ_INT(TJ_AUTOTUNE_DEFAULT, o.autotune);  // x86: off
  CHECK_EQ_INT(0, o.x86.autotune_budget_ms);
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  CHECK(tj_x86_executable_tuner(exe) == NULL);
  tj_executable_release(exe);
  o.autotune = TJ_AUTOTUNE_ON;
  o.x86.autotune_budget_ms = -1;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "autotune_budget_ms",
               tj_compile(g, &o, &exe));
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// tj_compile + a tuned run with the Nth allocation failing, for every N:
// each fails with OUT_OF_MEMORY and leaks nothing, until one succeeds. The
// kernels come from a disk cache (LLVM on every step would take minutes);
// the decisions are removed from it so that every step times candidates.
static tj_status_t oom_step(tj_allocator_t allocator, const char* dir,
                            bool* ran) {
  *ran = false;
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
    tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, 8}, "x");
    tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){8, 20}, "w");
    tj_graph_output(g, tj_graph_tanh(g, tj_graph_matmul(g, x, w)), "y");
    s = tj_graph_finalize(g);
  }
  tj_compile_options_t o = tuned_options(dir, 2);
  if (!s) s = tj_compile(g, &o, &exe);
  if (!s) {
    float xs[24], ws[160], ys[60];
    for (int i = 0; i < 24; ++i) xs[i] = (float)(i % 5) - 2;
    for (int i = 0; i < 160; ++i) ws[i] = (float)(i % 3) - 1;
    tj_tensor_t in[2] = {
        tj_tensor_make(xs, TJ_DTYPE_F32, 2, (int64_t[]){3, 8}),
        tj_tensor_make(ws, TJ_DTYPE_F32, 2, (int64_t[]){8, 20})};
    tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 2, (int64_t[]){3, 20});
    s = tj_executable_run(exe, in, 2, &out, 1);
    double want = 0;
    for (int q = 0; q < 8; ++q) want += (double)xs[8 + q] * ws[q * 20 + 7];
    if (!s && fabs(ys[20 + 7] - tanh(want)) > 1e-5) {
      s = tj_internal("oom test: wrong result");
    }
    if (!s) *ran = true;
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(oom_sweep) {
  char dir[] = "/tmp/tj_autotune_oom_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  bool ran;
  tj_test_allocator_t warm;
  tj_test_allocator_initialize(&warm, -1);
  CHECK_OK(oom_step(tj_test_allocator_get(&warm), dir, &ran));
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "grep -l -a tjtune %s/* | xargs rm -f", dir);
  CHECK(system(cmd) == 0);
  long n = 0;
  for (;; ++n) {
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, n);
    tj_status_t s = oom_step(tj_test_allocator_get(&alloc), dir, &ran);
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
    if (!s) break;
    if (tj_status_code(s) != TJ_STATUS_OUT_OF_MEMORY) {
      fprintf(stderr, "fail_at %ld: %s: %s\n", n,
              tj_status_code_name(tj_status_code(s)), tj_status_message(s));
    }
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(s));
    tj_status_free(s);
    // A failed decision store leaves nothing behind; one that made it to
    // disk would skip the timing in later steps: remove it again.
    CHECK(system(cmd) == 0);
    if (n > 100000) break;
  }
  printf("# oom sweep: %ld failing allocation points\n", n);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
}

int main(void) {
  tj_test_skip_host_tier();  // the tiers suite's avx2 run
  RUN_TEST(candidates_agree);
  RUN_TEST(decisions_cached);
  RUN_TEST(budget);
  RUN_TEST(openblas_absent);
  RUN_TEST(options);
  RUN_TEST(oom_sweep);
  TEST_MAIN_END();
}
