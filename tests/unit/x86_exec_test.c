// The x86 executable's own behaviour end to end: the capstone, strided
// CPU tensors, specialization policies, the kernel cache, the host's
// parallel_for hook, concurrent runs, random graphs, errors and OOM sweeps;
// graphs built through the public API, compiled with tj_compile and run
// with tj_executable_run, compared with tj_reference_run. The op/dtype
// conformance of the x86 backend is tests/unit/x86_conformance_test.c (the
// shared body tests/conformance/), whose tolerances apply here too.

#include <pthread.h>
#include <stdatomic.h>

#include "lib/dtype.h"
#include "tests/conformance/conformance.h"
#include "tests/unit/test.h"

//===--- the conformance suite's pieces ---===//

#define MAX_IO TJ_CTS_MAX_IO

typedef tj_cts_tol_t tol_t;
typedef tj_cts_case_t case_t;
typedef tj_cts_report_t run_report_t;
typedef tj_value_t (*unary_fn)(tj_graph_t*, tj_value_t);
typedef tj_value_t (*binary_fn)(tj_graph_t*, tj_value_t, tj_value_t);
typedef tj_value_t (*reduce_fn)(tj_graph_t*, tj_value_t, int32_t,
                                const int32_t*, bool);

static tj_context_t* g_ctx;
static tj_cts_backend_t g_be;  // x86 in g_ctx

static uint64_t rng_next(void) { return tj_cts_rng_next(); }

static void fill(tj_dtype_t d, void* p, int64_t n, double lo, double hi) {
  tj_cts_fill(d, p, n, lo, hi);
}

static bool compare(const char* what, tj_dtype_t d, const void* got,
                    const void* want, int64_t n, tol_t tol) {
  return tj_cts_compare(what, d, got, want, n, tol);
}

static void begin(case_t* c, const char* name) { tj_cts_begin(&g_be, c, name); }

static tj_value_t input(case_t* c, tj_dtype_t dtype, int32_t rank,
                        const int64_t* dims, double lo, double hi) {
  return tj_cts_input(c, dtype, rank, dims, lo, hi);
}

static void output(case_t* c, tj_value_t v) { tj_cts_output(c, v); }

static bool run_case(case_t* c, const tj_compile_options_t* opts,
                     const int64_t* bs, int nb, run_report_t* report) {
  return tj_cts_run_case(&g_be, c, opts, bs, nb, TJ_CTS_IO_HOST, report);
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
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
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
  log_t log;
  memset(&log, 0, sizeof(log));
  tj_context_options_t co = tj_test_context_options();
  co.log = "recompiles";
  co.diagnostic_fn = capture;
  co.diagnostic_user_data = &log;
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&co, &ctx));
  tj_graph_t* g = small_graph(ctx);
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  tj_executable_stats_t st = {.struct_size = sizeof(st)};

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
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
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
  for (int i = 0; i < 4; ++i) CHECK_OK(tj_test_context_create(&ctx[i]));
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
  opts.x86.parallel_for = serial_parallel_for;
  opts.x86.num_threads = 4;
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
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
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
    tj_cts_seed(0x9E3779B97F4A7C15ull ^
                ((uint64_t)(seed + 1) * 0x2545F4914F6CDD1Dull));
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
  // A struct not filled by tj_compile_options_initialize (or from another
  // version of the header) is refused, never read past its end.
  memset(&opts, 0, sizeof(opts));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "tj_compile_options_initialize",
               tj_compile(g, &opts, &exe));
  tj_compile_options_initialize(&opts);
  CHECK(opts.struct_size == sizeof(opts));
  opts.struct_size = sizeof(opts) + 8;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "struct_size",
               tj_compile(g, &opts, &exe));
  CHECK(exe == NULL);
  tj_compile_options_initialize(&opts);
  opts.autotune = (tj_autotune_t)7;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "autotune",
               tj_compile(g, &opts, &exe));
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
  tj_context_options_t co = tj_test_context_options();
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
  opts.x86.num_threads = 1;
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
  tj_test_skip_host_tier();  // the tiers suite's avx2 run
  // No disk cache unless a test names one: counts of compiled kernels must
  // not depend on earlier runs. (Contexts still share nothing.)
  CHECK_OK(tj_test_context_create(&g_ctx));
  g_be = (tj_cts_backend_t){"x86", TJ_TARGET_X86, g_ctx, NULL, NULL, NULL};
  // `x86_exec_test quick` skips the slow parts (OOM sweeps, capstone).
  bool quick = argc > 1 && strcmp(argv[1], "quick") == 0;
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
