// Threads on the public API, written for ThreadSanitizer (scripts/test.sh
// runs it in a TSan build; the plain build runs it too):
// - 8 threads running one x86 executable at once, each with batches of its
//   own and shared ones, generic (specialize NEVER), exact-shape
//   (ALWAYS, so the first runs of a shape race to specialize it) and
//   per power-of-two bucket;
// - 8 threads compiling different graphs (and some the same one) in one
//   context and one disk cache directory (a temp dir), then a fresh
//   context loading them from that directory, again from 8 threads;
// - tj_executable_prepare of shapes on some threads while others run;
// - executables compiled, run and released on some threads while another
//   thread runs a different executable of the same context.
// Every result is compared with the reference target:
// |got - want| <= 1e-4 + 1e-4 * |want|. Worker threads count failures in
// atomics; the CHECK macros run on the main thread only.

#define _XOPEN_SOURCE 700

#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/test.h"

#define TOL 1e-4
#define NTHREADS 8
#define K_DIM 32
#define N_DIM 48
#define W_DIM 96

// The batches the threads run: thread t starts at batches[t] and goes
// round, so every batch is run by several threads, often at once. The two
// largest are work enough for the context's thread pool (x86_backend.c
// runs less inline: 2^18 multiply-adds of a GEMM, 2^15 elements).
static const int64_t batches[NTHREADS] = {1, 2, 3, 7, 17, 64, 200, 400};

static atomic_int g_bad;  // failures on worker threads

static void fail(const char* what, tj_status_t s) {
  atomic_fetch_add(&g_bad, 1);
  fprintf(stderr, "%s: %s\n", what, s ? tj_status_message(s) : "mismatch");
  tj_status_free(s);
}

//===--- graphs and problems ---===//

// kind 0: y = gelu(x @ w + b + salt), x [B, 32], w [32, 48], b [48]
// kind 1: y = sum(exp(x * (0.5 + salt)), axis 1), x [B, 96]
static tj_graph_t* make_graph(tj_context_t* ctx, int kind, double salt) {
  tj_graph_t* g = NULL;
  tj_status_t s = tj_graph_create(ctx, "threads", &g);
  if (s) {
    fail("tj_graph_create", s);
    return NULL;
  }
  int64_t B = tj_graph_symbol(g, "B");
  if (kind == 0) {
    tj_value_t x =
        tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, K_DIM}, "x");
    tj_value_t w =
        tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){K_DIM, N_DIM}, "w");
    tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){N_DIM}, "b");
    tj_value_t h = tj_graph_add(g, tj_graph_linear(g, x, w, b),
                                tj_graph_scalar(g, TJ_DTYPE_F32, salt));
    tj_graph_output(g, tj_graph_gelu(g, h, true), "y");
  } else {
    tj_value_t x =
        tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, W_DIM}, "x");
    tj_value_t e = tj_graph_exp(
        g, tj_graph_mul(g, x, tj_graph_scalar(g, TJ_DTYPE_F32, 0.5 + salt)));
    tj_graph_output(g, tj_graph_sum(g, e, 1, (int32_t[]){1}, false), "y");
  }
  s = tj_graph_finalize(g);
  if (s) {
    fail("tj_graph_finalize", s);
    tj_graph_destroy(g);
    return NULL;
  }
  return g;
}

// Inputs of one batch and the reference's output.
typedef struct problem_t {
  int kind;
  int64_t B;
  int n_in;
  float* in[3];
  int64_t shape[3][2];
  int32_t rank[3];
  float* want;
  int64_t out_shape[2];
  int32_t out_rank;
  int64_t out_elems;
} problem_t;

static void fill(float* p, int64_t n, uint32_t seed) {
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = 2.0f * ((float)(seed >> 8) / 16777216.0f - 0.5f);
  }
}

static void tensors(const problem_t* p, tj_tensor_t* in) {
  for (int i = 0; i < p->n_in; ++i) {
    in[i] = tj_tensor_make(p->in[i], TJ_DTYPE_F32, p->rank[i], p->shape[i]);
  }
}

// Runs |exe| on |p|; whether it succeeded and every element matches.
static bool run_check(tj_executable_t* exe, const problem_t* p) {
  float* got = malloc(sizeof(float) * (size_t)p->out_elems);
  if (!got) return false;
  for (int64_t i = 0; i < p->out_elems; ++i) got[i] = -12345.0f;
  tj_tensor_t in[3];
  tensors(p, in);
  tj_tensor_t out =
      tj_tensor_make(got, TJ_DTYPE_F32, p->out_rank, p->out_shape);
  tj_status_t s = tj_executable_run(exe, in, p->n_in, &out, 1);
  bool ok = !s;
  if (s) fail("tj_executable_run", s);
  for (int64_t i = 0; ok && i < p->out_elems; ++i) {
    double want = p->want[i], d = (double)got[i] - want;
    double tol = TOL + TOL * (want < 0 ? -want : want);
    if (!(d <= tol && -d <= tol)) {
      fprintf(stderr, "kind %d B %lld: element %lld is %.9g, want %.9g\n",
              p->kind, (long long)p->B, (long long)i, (double)got[i], want);
      atomic_fetch_add(&g_bad, 1);
      ok = false;
    }
  }
  free(got);
  return ok;
}

// Sets up |p| (kind, batch, salt) and its reference output; whether all
// went well. problem_deinit frees it either way.
static bool problem_init(problem_t* p, tj_context_t* ctx, int kind, int64_t B,
                         double salt) {
  memset(p, 0, sizeof(*p));
  p->kind = kind;
  p->B = B;
  if (kind == 0) {
    p->n_in = 3;
    int64_t shapes[3][2] = {{B, K_DIM}, {K_DIM, N_DIM}, {N_DIM, 0}};
    int32_t ranks[3] = {2, 2, 1};
    memcpy(p->shape, shapes, sizeof(shapes));
    memcpy(p->rank, ranks, sizeof(ranks));
    p->out_rank = 2;
    p->out_shape[0] = B;
    p->out_shape[1] = N_DIM;
    p->out_elems = B * N_DIM;
  } else {
    p->n_in = 1;
    p->shape[0][0] = B;
    p->shape[0][1] = W_DIM;
    p->rank[0] = 2;
    p->out_rank = 1;
    p->out_shape[0] = B;
    p->out_elems = B;
  }
  for (int i = 0; i < p->n_in; ++i) {
    int64_t n = p->shape[i][0] * (p->rank[i] == 2 ? p->shape[i][1] : 1);
    p->in[i] = malloc(sizeof(float) * (size_t)n);
    if (!p->in[i]) return false;
    fill(p->in[i], n, (uint32_t)(B * 7919 + i * 104729 + kind));
  }
  p->want = malloc(sizeof(float) * (size_t)p->out_elems);
  if (!p->want) return false;
  tj_graph_t* g = make_graph(ctx, kind, salt);
  if (!g) return false;
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_REFERENCE;
  tj_executable_t* ref = NULL;
  tj_status_t s = tj_compile(g, &o, &ref);
  if (!s) {
    tj_tensor_t in[3];
    tensors(p, in);
    tj_tensor_t out =
        tj_tensor_make(p->want, TJ_DTYPE_F32, p->out_rank, p->out_shape);
    s = tj_executable_run(ref, in, p->n_in, &out, 1);
  }
  tj_executable_release(ref);
  tj_graph_destroy(g);
  if (s) {
    fail("reference", s);
    return false;
  }
  return true;
}

static void problem_deinit(problem_t* p) {
  for (int i = 0; i < 3; ++i) free(p->in[i]);
  free(p->want);
}

static tj_executable_t* compile_x86(tj_graph_t* g, tj_specialize_t spec,
                                    bool bucket, const char* cache_dir) {
  if (!g) return NULL;
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.x86.num_threads = 4;
  o.specialize = spec;
  o.bucket_pow2 = bucket;
  o.cache_dir = cache_dir;
  tj_executable_t* exe = NULL;
  tj_status_t s = tj_compile(g, &o, &exe);
  if (s) fail("tj_compile", s);
  return exe;
}

// Starts |n| threads on |fn| with arguments args[i] (|size| bytes apart)
// and joins them; whether all started.
static bool run_threads(int n, void* (*fn)(void*), void* args, size_t size) {
  pthread_t th[NTHREADS * 2];
  int started = 0;
  for (; started < n; ++started) {
    if (pthread_create(&th[started], NULL, fn,
                       (char*)args + size * (size_t)started)) {
      break;
    }
  }
  for (int i = 0; i < started; ++i) pthread_join(th[i], NULL);
  return started == n;
}

//===--- 8 threads, one executable, different batches ---===//

typedef struct shared_run_t {
  tj_executable_t* exe;
  problem_t* problems;  // NTHREADS of them, one per batch
  pthread_barrier_t* start;
  int first;
} shared_run_t;

static void* shared_run_thread(void* arg) {
  shared_run_t* a = arg;
  pthread_barrier_wait(a->start);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < NTHREADS; ++i) {
      run_check(a->exe, &a->problems[(a->first + i) % NTHREADS]);
    }
  }
  return NULL;
}

static void one_executable(int kind, tj_specialize_t spec, bool bucket) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  if (!ctx) return;
  problem_t problems[NTHREADS];
  bool ok = true;
  for (int i = 0; i < NTHREADS; ++i) {
    ok &= problem_init(&problems[i], ctx, kind, batches[i], 0.25);
  }
  tj_graph_t* g = make_graph(ctx, kind, 0.25);
  tj_executable_t* exe = ok ? compile_x86(g, spec, bucket, NULL) : NULL;
  if (exe) {
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, NTHREADS);
    shared_run_t args[NTHREADS];
    for (int t = 0; t < NTHREADS; ++t) {
      args[t] = (shared_run_t){exe, problems, &start, t};
    }
    CHECK(run_threads(NTHREADS, shared_run_thread, args, sizeof(args[0])));
    pthread_barrier_destroy(&start);
  }
  CHECK(exe != NULL);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  for (int i = 0; i < NTHREADS; ++i) problem_deinit(&problems[i]);
  tj_context_destroy(ctx);
  CHECK_EQ_INT(0, atomic_exchange(&g_bad, 0));
}

TEST(one_executable_generic) {
  one_executable(0, TJ_SPECIALIZE_NEVER, false);
  one_executable(1, TJ_SPECIALIZE_NEVER, false);
}

TEST(one_executable_specialized) {
  one_executable(0, TJ_SPECIALIZE_ALWAYS, false);
  one_executable(1, TJ_SPECIALIZE_ALWAYS, false);
}

TEST(one_executable_bucketed) {
  one_executable(0, TJ_SPECIALIZE_ALWAYS, true);
  one_executable(1, TJ_SPECIALIZE_AFTER_N, true);
}

//===--- concurrent compiles: one context, one disk cache ---===//

typedef struct compile_arg_t {
  tj_context_t* ctx;
  const char* dir;
  pthread_barrier_t* start;
  int index;
  int64_t misses;
} compile_arg_t;

// Thread i compiles graph (kind i % 2, salt i / 4): threads i and i + 4
// compile the same graph (one cache key), the others different ones.
static void* compile_thread(void* arg) {
  compile_arg_t* a = arg;
  int kind = a->index % 2;
  double salt = 0.125 * (a->index % 4 / 2);
  problem_t p;
  bool ok = problem_init(&p, a->ctx, kind, batches[a->index], salt);
  pthread_barrier_wait(a->start);
  tj_graph_t* g = ok ? make_graph(a->ctx, kind, salt) : NULL;
  tj_executable_t* exe = compile_x86(g, TJ_SPECIALIZE_NEVER, false, a->dir);
  if (exe) {
    run_check(exe, &p);
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    a->misses = st.cache_misses;
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  problem_deinit(&p);
  return NULL;
}

static int remove_entry(const char* path, const struct stat* st, int flag,
                        struct FTW* ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static int64_t compile_round(const char* dir) {
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  o.cache_dir = dir;
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&o, &ctx));
  if (!ctx) return -1;
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, NTHREADS);
  compile_arg_t args[NTHREADS];
  for (int t = 0; t < NTHREADS; ++t) {
    args[t] = (compile_arg_t){ctx, dir, &start, t, -1};
  }
  CHECK(run_threads(NTHREADS, compile_thread, args, sizeof(args[0])));
  pthread_barrier_destroy(&start);
  tj_context_destroy(ctx);
  int64_t misses = 0;
  for (int t = 0; t < NTHREADS; ++t) {
    CHECK(args[t].misses >= 0);
    misses += args[t].misses;
  }
  return misses;
}

TEST(compiles_share_context_and_cache) {
  char dir[] = "/tmp/tj_threads_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  int64_t cold = compile_round(dir);
  CHECK(cold > 0);
  // A fresh context: every kernel comes from the directory.
  CHECK_EQ_INT(0, compile_round(dir));
  CHECK_EQ_INT(0, nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS));
  CHECK_EQ_INT(0, atomic_exchange(&g_bad, 0));
}

//===--- prepare while running ---===//

typedef struct prepare_arg_t {
  tj_executable_t* exe;
  problem_t* problems;
  pthread_barrier_t* start;
  int index;
} prepare_arg_t;

// Even threads prepare every batch (and the shared part), odd ones run.
static void* prepare_thread(void* arg) {
  prepare_arg_t* a = arg;
  pthread_barrier_wait(a->start);
  for (int i = 0; i < NTHREADS; ++i) {
    const problem_t* p = &a->problems[(a->index + i) % NTHREADS];
    if (a->index % 2 == 0) {
      tj_tensor_t in[3];
      tensors(p, in);
      for (int j = 0; j < p->n_in; ++j) in[j].data = NULL;
      tj_status_t s = tj_executable_prepare(a->exe, in, p->n_in);
      if (s) fail("tj_executable_prepare", s);
      s = tj_executable_prepare(a->exe, NULL, 0);
      if (s) fail("tj_executable_prepare (shared)", s);
    } else {
      run_check(a->exe, p);
    }
  }
  return NULL;
}

TEST(prepare_while_running) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  if (!ctx) return;
  problem_t problems[NTHREADS];
  bool ok = true;
  for (int i = 0; i < NTHREADS; ++i) {
    ok &= problem_init(&problems[i], ctx, 0, batches[i], 0.5);
  }
  tj_graph_t* g = make_graph(ctx, 0, 0.5);
  tj_executable_t* exe =
      ok ? compile_x86(g, TJ_SPECIALIZE_ALWAYS, false, NULL) : NULL;
  CHECK(exe != NULL);
  if (exe) {
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, NTHREADS);
    prepare_arg_t args[NTHREADS];
    for (int t = 0; t < NTHREADS; ++t) {
      args[t] = (prepare_arg_t){exe, problems, &start, t};
    }
    CHECK(run_threads(NTHREADS, prepare_thread, args, sizeof(args[0])));
    pthread_barrier_destroy(&start);
    // Everything prepared: every batch runs right.
    for (int i = 0; i < NTHREADS; ++i) CHECK(run_check(exe, &problems[i]));
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  for (int i = 0; i < NTHREADS; ++i) problem_deinit(&problems[i]);
  tj_context_destroy(ctx);
  CHECK_EQ_INT(0, atomic_exchange(&g_bad, 0));
}

//===--- release while another executable runs ---===//

typedef struct release_arg_t {
  tj_context_t* ctx;
  tj_executable_t* exe;  // the one run throughout (thread 0)
  problem_t* problem;
  atomic_int* running;  // threads still compiling and releasing
  int index;
} release_arg_t;

// Thread 0 runs its executable until the others are done; each other
// thread compiles, runs and releases executables of its own, three times.
static void* release_thread(void* arg) {
  release_arg_t* a = arg;
  if (a->index == 0) {
    int runs = 0;
    while (atomic_load(a->running) > 0 || runs < 4) {
      run_check(a->exe, a->problem);
      ++runs;
    }
    return NULL;
  }
  int kind = a->index % 2;
  problem_t p;
  if (problem_init(&p, a->ctx, kind, batches[a->index], 1.0 + a->index)) {
    for (int i = 0; i < 3; ++i) {
      tj_graph_t* g = make_graph(a->ctx, kind, 1.0 + a->index);
      tj_executable_t* exe = compile_x86(
          g, i == 1 ? TJ_SPECIALIZE_ALWAYS : TJ_SPECIALIZE_NEVER, false, NULL);
      if (exe) run_check(exe, &p);
      // The graph first, then the executable: either order is allowed.
      tj_graph_destroy(g);
      tj_executable_release(exe);
    }
  }
  problem_deinit(&p);
  atomic_fetch_sub(a->running, 1);
  return NULL;
}

TEST(release_while_another_runs) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  if (!ctx) return;
  problem_t problem;
  bool ok = problem_init(&problem, ctx, 0, 33, 0.75);
  tj_graph_t* g = make_graph(ctx, 0, 0.75);
  tj_executable_t* exe =
      ok ? compile_x86(g, TJ_SPECIALIZE_NEVER, false, NULL) : NULL;
  CHECK(exe != NULL);
  if (exe) {
    atomic_int running = NTHREADS - 1;
    release_arg_t args[NTHREADS];
    for (int t = 0; t < NTHREADS; ++t) {
      args[t] = (release_arg_t){ctx, exe, &problem, &running, t};
    }
    CHECK(run_threads(NTHREADS, release_thread, args, sizeof(args[0])));
  }
  // The context destroyed before the last executable: it lives on until
  // the executable goes.
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  if (exe) CHECK(run_check(exe, &problem));
  tj_executable_release(exe);
  problem_deinit(&problem);
  CHECK_EQ_INT(0, atomic_exchange(&g_bad, 0));
}

int main(void) {
  RUN_TEST(one_executable_generic);
  RUN_TEST(one_executable_specialized);
  RUN_TEST(one_executable_bucketed);
  RUN_TEST(compiles_share_context_and_cache);
  RUN_TEST(prepare_while_running);
  RUN_TEST(release_while_another_runs);
  TEST_MAIN_END();
}
