// Background autotuning (TJ_AUTOTUNE_BACKGROUND) on x86: the first run of
// a new bucket returns what autotune off returns, bit for bit, and queues
// the tuning; once tj_context_wait_autotune returns, the executable runs
// the decision (the tuner's counters and TJ_LOG=autotune say so) and
// matches the reference; a later compile takes the decision from the
// cache; releasing an executable while its job is queued or running, and
// destroying the context with jobs queued, neither crash nor leak nor
// hang; runs from several threads while a job publishes (the TSan leg);
// and the failing-allocator sweep through a run that queues a job (a job
// that fails leaves the generated kernel and never fails a later run).
//
// The ISA tier is the host's or TJ_X86_ISA's (tests/unit/meson.build runs
// this test again at the lower tiers).

#include <pthread.h>
#include <unistd.h>

#include "backends/x86/gemm_tune.h"
#include "tests/unit/test.h"

typedef struct log_t {
  pthread_mutex_t mutex;
  char text[32768];
  size_t length;
} log_t;

static void capture(tj_severity_t severity, const char* message, size_t length,
                    void* user_data) {
  (void)severity;
  log_t* log = user_data;
  pthread_mutex_lock(&log->mutex);
  if (log->length + length + 2 < sizeof(log->text)) {
    memcpy(log->text + log->length, message, length);
    log->length += length;
    log->text[log->length++] = '\n';
    log->text[log->length] = '\0';
  }
  pthread_mutex_unlock(&log->mutex);
}

static int count_of(log_t* log, const char* needle) {
  pthread_mutex_lock(&log->mutex);
  int n = 0;
  for (const char* p = strstr(log->text, needle); p; p = strstr(p + 1, needle))
    ++n;
  pthread_mutex_unlock(&log->mutex);
  return n;
}

static void log_init(log_t* log) {
  memset(log, 0, sizeof(*log));
  pthread_mutex_init(&log->mutex, NULL);
}

// y = tanh(x @ w + b): x [B, K], w [K, N], b [N].
enum { K = 96, N = 80 };

static tj_graph_t* make_graph(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "bgtuned", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, K}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){K, N}, "w");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){N}, "b");
  tj_graph_output(
      g, tj_graph_tanh(g, tj_graph_add(g, tj_graph_matmul(g, x, w), b)), "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

typedef struct io_t {
  int64_t B;
  float *x, *w, *b, *y;
  int64_t shapes[4][2];  // the tensors point at them
  tj_tensor_t in[3], out;
} io_t;

static void io_make(io_t* io, int64_t B, uint32_t seed) {
  io->B = B;
  io->x = malloc(sizeof(float) * (size_t)(B * K));
  io->w = malloc(sizeof(float) * K * N);
  io->b = malloc(sizeof(float) * N);
  io->y = calloc((size_t)(B * N), sizeof(float));
  uint32_t r = seed * 2654435761u + 1;
  for (int64_t i = 0; i < B * K; ++i) {
    r = r * 1664525u + 1013904223u;
    io->x[i] = (float)((r >> 8) % 2001) / 1000.0f - 1.0f;
  }
  for (int64_t i = 0; i < K * N; ++i) {
    r = r * 1664525u + 1013904223u;
    io->w[i] = (float)((r >> 8) % 2001) / 1000.0f - 1.0f;
  }
  for (int64_t i = 0; i < N; ++i) io->b[i] = (float)(i % 7) * 0.1f - 0.3f;
  int64_t shapes[4][2] = {{B, K}, {K, N}, {N, 0}, {B, N}};
  memcpy(io->shapes, shapes, sizeof(shapes));
  io->in[0] = tj_tensor_make(io->x, TJ_DTYPE_F32, 2, io->shapes[0]);
  io->in[1] = tj_tensor_make(io->w, TJ_DTYPE_F32, 2, io->shapes[1]);
  io->in[2] = tj_tensor_make(io->b, TJ_DTYPE_F32, 1, io->shapes[2]);
  io->out = tj_tensor_make(io->y, TJ_DTYPE_F32, 2, io->shapes[3]);
}

static void io_free(io_t* io) {
  free(io->x);
  free(io->w);
  free(io->b);
  free(io->y);
}

// The reference interpreter's y for |io|'s inputs, in double: f32 dot
// products of length K of values in [-1, 1], then tanh (slope <= 1).
static bool matches_reference(const io_t* io) {
  double atol = 2.4e-7 * (K + 1) + 1e-6;
  for (int64_t m = 0; m < io->B; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = io->b[n];
      for (int64_t k = 0; k < K; ++k) {
        acc += (double)io->x[m * K + k] * io->w[k * N + n];
      }
      double want = tanh(acc), got = io->y[m * N + n];
      if (fabs(got - want) > atol) {
        fprintf(stderr, "  y[%lld, %lld] = %.9g, want %.9g\n", (long long)m,
                (long long)n, got, want);
        return false;
      }
    }
  }
  return true;
}

static tj_context_t* make_context(log_t* log, tj_allocator_t* allocator) {
  tj_context_options_t co;
  tj_context_options_initialize(&co);
  co.log = "autotune";
  co.diagnostic_fn = log ? capture : NULL;
  co.diagnostic_user_data = log;
  if (allocator) co.allocator = *allocator;
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&co, &ctx));
  return ctx;
}

static tj_executable_t* compile(tj_context_t* ctx, tj_autotune_t autotune,
                                const char* dir, int32_t budget_ms) {
  tj_graph_t* g = make_graph(ctx);
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.autotune = autotune;
  o.cache_dir = dir;
  o.x86.autotune_budget_ms = budget_ms;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  tj_graph_destroy(g);
  return exe;
}

static tj_x86_tuner_stats_t stats_of(tj_executable_t* exe) {
  tj_x86_tuner_stats_t ts;
  tj_x86_tuner_stats(tj_x86_executable_tuner(exe), &ts);
  return ts;
}

static void make_dir(char* dir) { CHECK(mkdtemp(dir) != NULL); }

static void remove_dir(const char* dir) {
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
}

TEST(first_run_is_autotune_off_then_tuned) {
  char dir[] = "/tmp/tj_bgtune_XXXXXX";
  make_dir(dir);
  log_t log;
  log_init(&log);
  tj_context_t* ctx = make_context(&log, NULL);
  tj_executable_t* off = compile(ctx, TJ_AUTOTUNE_OFF, dir, 0);
  tj_executable_t* bg = compile(ctx, TJ_AUTOTUNE_BACKGROUND, dir, 20);
  CHECK(tj_x86_executable_tuner(off) == NULL);
  CHECK(tj_x86_executable_tuner(bg) != NULL);
  io_t a, b;
  io_make(&a, 37, 1);
  io_make(&b, 37, 1);
  CHECK_OK(tj_executable_run(off, a.in, 3, &a.out, 1));
  CHECK_OK(tj_executable_run(bg, b.in, 3, &b.out, 1));
  // The first run did not wait for the timing: autotune off's kernel.
  CHECK(memcmp(a.y, b.y, sizeof(float) * 37 * N) == 0);
  CHECK(matches_reference(&b));
  CHECK_EQ_INT(1, count_of(&log, "tuning queued in the background"));
  tj_context_wait_autotune(ctx);
  tj_x86_tuner_stats_t ts = stats_of(bg);
  CHECK_EQ_INT(1, ts.jobs_queued);
  CHECK_EQ_INT(1, ts.jobs_done);
  CHECK_EQ_INT(0, ts.jobs_failed);
  CHECK_EQ_INT(1, ts.tunings);
  CHECK_EQ_INT(1, count_of(&log, "background job finished"));
  // The next run serves the decision (whichever candidate won).
  memset(b.y, 0, sizeof(float) * 37 * N);
  CHECK_OK(tj_executable_run(bg, b.in, 3, &b.out, 1));
  CHECK(matches_reference(&b));
  CHECK_EQ_INT(1, count_of(&log, "swapped in"));
  // Same bucket (33..64): no new job; another bucket: one more.
  io_t c;
  io_make(&c, 50, 2);
  CHECK_OK(tj_executable_run(bg, c.in, 3, &c.out, 1));
  CHECK(matches_reference(&c));
  CHECK_EQ_INT(1, stats_of(bg).jobs_queued);
  io_t d;
  io_make(&d, 130, 3);
  CHECK_OK(tj_executable_run(bg, d.in, 3, &d.out, 1));
  CHECK(matches_reference(&d));
  CHECK_EQ_INT(2, stats_of(bg).jobs_queued);
  tj_context_wait_autotune(ctx);
  CHECK_EQ_INT(2, stats_of(bg).jobs_done);
  // A later compile: its job finds the decision in the cache, times
  // nothing.
  tj_executable_t* again = compile(ctx, TJ_AUTOTUNE_BACKGROUND, dir, 20);
  CHECK_OK(tj_executable_run(again, b.in, 3, &b.out, 1));
  tj_context_wait_autotune(ctx);
  ts = stats_of(again);
  CHECK_EQ_INT(1, ts.jobs_done);
  CHECK_EQ_INT(0, ts.tunings);
  CHECK_EQ_INT(1, ts.cached);
  CHECK_OK(tj_executable_run(again, b.in, 3, &b.out, 1));
  CHECK(matches_reference(&b));
  tj_executable_release(again);
  tj_executable_release(bg);
  tj_executable_release(off);
  tj_context_destroy(ctx);
  io_free(&a);
  io_free(&b);
  io_free(&c);
  io_free(&d);
  remove_dir(dir);
}

// Releases the executable while its jobs are queued or running: the
// release drops the queued ones and waits for the running one.
TEST(release_during_job) {
  for (int delay_us = 0; delay_us <= 4000; delay_us += 2000) {
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, -1);
    tj_allocator_t al = tj_test_allocator_get(&alloc);
    tj_context_t* ctx = make_context(NULL, &al);
    tj_executable_t* exe = compile(ctx, TJ_AUTOTUNE_BACKGROUND, "", 50);
    int64_t bs[3] = {20, 70, 300};
    for (int i = 0; i < 3; ++i) {
      io_t io;
      io_make(&io, bs[i], (uint32_t)i);
      CHECK_OK(tj_executable_run(exe, io.in, 3, &io.out, 1));
      CHECK(matches_reference(&io));
      io_free(&io);
    }
    CHECK_EQ_INT(3, stats_of(exe).jobs_queued);
    if (delay_us) usleep((useconds_t)delay_us);
    tj_executable_release(exe);
    tj_context_wait_autotune(ctx);
    tj_context_destroy(ctx);
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
  }
}

// Destroys the context with jobs queued (and one running), before the
// executables are released, which the API allows; then releases them.
TEST(context_destroy_with_jobs_queued) {
  tj_test_allocator_t alloc;
  tj_test_allocator_initialize(&alloc, -1);
  tj_allocator_t al = tj_test_allocator_get(&alloc);
  tj_context_t* ctx = make_context(NULL, &al);
  tj_executable_t* exes[3];
  for (int e = 0; e < 3; ++e) {
    exes[e] = compile(ctx, TJ_AUTOTUNE_BACKGROUND, "", 50);
    for (int i = 0; i < 2; ++i) {
      io_t io;
      io_make(&io, i ? 200 : 9, (uint32_t)(e + i));
      CHECK_OK(tj_executable_run(exes[e], io.in, 3, &io.out, 1));
      io_free(&io);
    }
  }
  tj_context_destroy(ctx);
  // No worker any more: a new bucket still runs, untuned, and queues
  // nothing.
  io_t io;
  io_make(&io, 1000, 7);
  CHECK_OK(tj_executable_run(exes[0], io.in, 3, &io.out, 1));
  CHECK(matches_reference(&io));
  io_free(&io);
  for (int e = 0; e < 3; ++e) tj_executable_release(exes[e]);
  CHECK_EQ_INT(0, alloc.live_blocks);
  CHECK_EQ_INT(0, alloc.bad_frees);
}

// Runs from several threads while the worker tunes and publishes: every
// result matches the reference, whichever kernel served it.
typedef struct runner_t {
  tj_executable_t* exe;
  int index;
  atomic_int* bad;
} runner_t;

static void* run_many(void* arg) {
  runner_t* r = arg;
  for (int i = 0; i < 12; ++i) {
    io_t io;
    io_make(&io, 16 + 23 * ((r->index + i) % 6), (uint32_t)(r->index * 31 + i));
    tj_status_t s = tj_executable_run(r->exe, io.in, 3, &io.out, 1);
    if (s || !matches_reference(&io)) atomic_fetch_add(r->bad, 1);
    tj_status_free(s);
    io_free(&io);
  }
  return NULL;
}

TEST(runs_from_threads_while_publishing) {
  log_t log;
  log_init(&log);
  tj_context_t* ctx = make_context(&log, NULL);
  tj_executable_t* exe = compile(ctx, TJ_AUTOTUNE_BACKGROUND, "", 10);
  atomic_int bad;
  atomic_init(&bad, 0);
  enum { kThreads = 4 };
  pthread_t th[kThreads];
  runner_t rs[kThreads];
  for (int i = 0; i < kThreads; ++i) {
    rs[i] = (runner_t){exe, i, &bad};
    CHECK(pthread_create(&th[i], NULL, run_many, &rs[i]) == 0);
  }
  for (int i = 0; i < kThreads; ++i) pthread_join(th[i], NULL);
  CHECK_EQ_INT(0, atomic_load(&bad));
  tj_context_wait_autotune(ctx);
  tj_x86_tuner_stats_t ts = stats_of(exe);
  // Batches 16, 39, 62, 85, 108, 131: buckets 16, 64, 128 and 256, one
  // job each.
  CHECK_EQ_INT(4, ts.jobs_queued);
  CHECK_EQ_INT(4, ts.jobs_done + ts.jobs_failed);
  CHECK_EQ_INT(0, ts.jobs_failed);
  tj_executable_release(exe);
  tj_context_destroy(ctx);
}

// tj_compile + a run that queues a job + the wait + a tuned run, with the
// Nth allocation failing, for every N: a step fails only with OUT_OF_MEMORY
// (from the compile or a run's own work, never from a job) and leaks
// nothing. Some steps fail inside a job: logged, the generated kernel
// stays.
static log_t g_oom_log;
static char g_oom_dir[] = "/tmp/tj_bgtune_oom_XXXXXX";

static tj_status_t oom_step(tj_allocator_t allocator) {
  tj_context_options_t co;
  tj_context_options_initialize(&co);
  co.allocator = allocator;
  co.log = "autotune";
  co.diagnostic_fn = capture;
  co.diagnostic_user_data = &g_oom_log;
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
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.autotune = TJ_AUTOTUNE_BACKGROUND;
  o.x86.autotune_budget_ms = 2;
  o.cache_dir = g_oom_dir;
  if (!s) s = tj_compile(g, &o, &exe);
  float xs[24], ws[160], ys[60];
  for (int i = 0; i < 24; ++i) xs[i] = (float)(i % 5) - 2;
  for (int i = 0; i < 160; ++i) ws[i] = (float)(i % 3) - 1;
  tj_tensor_t in[2] = {tj_tensor_make(xs, TJ_DTYPE_F32, 2, (int64_t[]){3, 8}),
                       tj_tensor_make(ws, TJ_DTYPE_F32, 2, (int64_t[]){8, 20})};
  tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 2, (int64_t[]){3, 20});
  for (int round = 0; !s && round < 2; ++round) {
    s = tj_executable_run(exe, in, 2, &out, 1);
    double want = 0;
    for (int q = 0; q < 8; ++q) want += (double)xs[8 + q] * ws[q * 20 + 7];
    if (!s && fabs(ys[20 + 7] - tanh(want)) > 1e-5) {
      s = tj_internal("oom test: wrong result");
    }
    tj_context_wait_autotune(ctx);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(oom_sweep) {
  log_init(&g_oom_log);
  CHECK(mkdtemp(g_oom_dir) != NULL);
  // The kernels (and the variants) from a warm disk cache: LLVM on every
  // step would take minutes. The decisions are removed after every step
  // so that every step's job times candidates.
  tj_test_allocator_t warm;
  tj_test_allocator_initialize(&warm, -1);
  CHECK_OK(oom_step(tj_test_allocator_get(&warm)));
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "grep -l -a tjtune %s/* | xargs rm -f", g_oom_dir);
  CHECK(system(cmd) == 0);
  long n = 0;
  for (;; ++n) {
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, n);
    tj_status_t s = oom_step(tj_test_allocator_get(&alloc));
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
    CHECK(system(cmd) == 0);
    // A failure inside a job (or in queueing one) leaves the step OK: the
    // sweep ends at the first step whose allocations all succeeded.
    if (!s && alloc.allocations <= n) break;
    if (!s) continue;
    if (tj_status_code(s) != TJ_STATUS_OUT_OF_MEMORY) {
      fprintf(stderr, "fail_at %ld: %s: %s\n", n,
              tj_status_code_name(tj_status_code(s)), tj_status_message(s));
    }
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(s));
    tj_status_free(s);
    if (n > 100000) break;
  }
  // The sweep went through the jobs: some failed there, logged, and the
  // runs after them went on (oom_step checked their values).
  CHECK(count_of(&g_oom_log, "background job failed") > 0);
  printf("# oom sweep: %ld failing allocation points, %d in jobs\n", n,
         count_of(&g_oom_log, "background job failed"));
  remove_dir(g_oom_dir);
}

int main(void) {
  tj_test_skip_host_tier();  // the tiers suite's avx2 run
  RUN_TEST(first_run_is_autotune_off_then_tuned);
  RUN_TEST(release_during_job);
  RUN_TEST(context_destroy_with_jobs_queued);
  RUN_TEST(runs_from_threads_while_publishing);
  RUN_TEST(oom_sweep);
  TEST_MAIN_END();
}
