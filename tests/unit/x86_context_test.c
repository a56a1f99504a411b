// The x86 runtime a context shares between its executables
// (backends/x86/x86_backend.h): one JIT and one thread pool per context,
// used by several executables at once from several threads, code of
// destroyed executables unloaded, threads released with the context; and
// the cold part of a kernel set (the GEMM's small-M path: its loop and
// microkernels), built in the background right after tj_compile (so a
// later small run compiles nothing; an executable destroyed meanwhile
// waits for that build and leaks nothing), or with a host parallel_for by
// the first run that needs it; right at every M <= 16, cached, built once
// when several pool workers need it at once, and reported (OUT_OF_MEMORY)
// when it fails, in the background or in a run; the host's context and
// the executables released in either order during that build; and
// tj_executable_prepare building all of it at load time.
//
// Results are compared with the reference target (tj_compile with
// TJ_TARGET_REFERENCE): |got - want| <= 1e-4 + 1e-4 * |want| (f32 sums of
// at most 64 products against f64, and gelu's polynomial tanh).

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/x86/x86_backend.h"
#include "tests/unit/test.h"

#define TOL 1e-4
// How long a test waits for a background build: LLVM under ASan on a
// loaded 2-core machine.
#define LONG_WAIT_MS 20000

//===--- graphs ---===//

typedef enum kind_e {
  KIND_GEMM = 0,
  KIND_POINTWISE = 1,
  KIND_REDUCE = 2
} kind_t;

#define NUM_KINDS 3
#define K_DIM 64
#define N_DIM 256
#define W_DIM 1024  // pointwise and reduction row length

// gemm:      y = gelu(x @ w + b), x [B, 64], w [64, 256], b [256]
// pointwise: y = tanh(x) * 2 + x, x [B, 1024]
// reduce:    y = sum(exp(x * 0.5), axis 1), x [B, 1024]
// Sizes are big enough at B >= 128 for the kernels to spread over the pool
// (x86_backend.c runs smaller work inline). |salt| makes graphs with
// different kernel text (so different cache keys) when needed.
static tj_graph_t* make_graph(tj_context_t* ctx, kind_t kind, double salt) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "ctx_test", &g));
  int64_t B = tj_graph_symbol(g, "B");
  if (kind == KIND_GEMM) {
    tj_value_t x =
        tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, K_DIM}, "x");
    tj_value_t w =
        tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){K_DIM, N_DIM}, "w");
    tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){N_DIM}, "b");
    tj_value_t h = tj_graph_linear(g, x, w, b);
    if (salt != 0) {
      h = tj_graph_add(g, h, tj_graph_scalar(g, TJ_DTYPE_F32, salt));
    }
    tj_graph_output(g, tj_graph_gelu(g, h, true), "y");
  } else {
    tj_value_t x =
        tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, W_DIM}, "x");
    if (kind == KIND_POINTWISE) {
      tj_value_t y = tj_graph_add(
          g,
          tj_graph_mul(g, tj_graph_tanh(g, x),
                       tj_graph_scalar(g, TJ_DTYPE_F32, 2.0 + salt)),
          x);
      tj_graph_output(g, y, "y");
    } else {
      tj_value_t e = tj_graph_exp(
          g, tj_graph_mul(g, x, tj_graph_scalar(g, TJ_DTYPE_F32, 0.5 + salt)));
      tj_graph_output(g, tj_graph_sum(g, e, 1, (int32_t[]){1}, false), "y");
    }
  }
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static int num_inputs(kind_t kind) { return kind == KIND_GEMM ? 3 : 1; }

static uint32_t g_seed = 12345;

static void fill(float* p, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) {
    g_seed = g_seed * 1664525u + 1013904223u;
    p[i] = scale * ((float)(g_seed >> 8) / 16777216.0f - 0.5f);
  }
}

// One problem: inputs for batch |B| and the reference output.
typedef struct problem_t {
  kind_t kind;
  int64_t B;
  float* in[3];
  int64_t in_shape[3][2];
  int32_t in_rank[3];
  float* want;
  int64_t out_shape[2];
  int32_t out_rank;
  int64_t out_elems;
} problem_t;

static void tensors(const problem_t* p, tj_tensor_t* in) {
  for (int i = 0; i < num_inputs(p->kind); ++i) {
    in[i] =
        tj_tensor_make(p->in[i], TJ_DTYPE_F32, p->in_rank[i], p->in_shape[i]);
  }
}

static void problem_init(problem_t* p, tj_context_t* ctx, kind_t kind,
                         int64_t B) {
  memset(p, 0, sizeof(*p));
  p->kind = kind;
  p->B = B;
  if (kind == KIND_GEMM) {
    int64_t shapes[3][2] = {{B, K_DIM}, {K_DIM, N_DIM}, {N_DIM, 0}};
    int32_t ranks[3] = {2, 2, 1};
    memcpy(p->in_shape, shapes, sizeof(shapes));
    memcpy(p->in_rank, ranks, sizeof(ranks));
    p->out_rank = 2;
    p->out_shape[0] = B;
    p->out_shape[1] = N_DIM;
  } else {
    p->in_shape[0][0] = B;
    p->in_shape[0][1] = W_DIM;
    p->in_rank[0] = 2;
    p->out_rank = kind == KIND_POINTWISE ? 2 : 1;
    p->out_shape[0] = B;
    p->out_shape[1] = W_DIM;
  }
  for (int i = 0; i < num_inputs(kind); ++i) {
    int64_t n =
        p->in_shape[i][0] * (p->in_rank[i] == 2 ? p->in_shape[i][1] : 1);
    p->in[i] = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    fill(p->in[i], n, 2.0f);
  }
  p->out_elems = p->out_shape[0] * (p->out_rank == 2 ? p->out_shape[1] : 1);
  p->want =
      malloc(sizeof(float) * (size_t)(p->out_elems > 0 ? p->out_elems : 1));
  // The oracle.
  tj_graph_t* g = make_graph(ctx, kind, 0);
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_REFERENCE;
  tj_executable_t* ref = NULL;
  CHECK_OK(tj_compile(g, &o, &ref));
  tj_tensor_t in[3];
  tensors(p, in);
  tj_tensor_t out =
      tj_tensor_make(p->want, TJ_DTYPE_F32, p->out_rank, p->out_shape);
  CHECK_OK(tj_executable_run(ref, in, num_inputs(kind), &out, 1));
  tj_executable_release(ref);
  tj_graph_destroy(g);
}

static void problem_deinit(problem_t* p) {
  for (int i = 0; i < 3; ++i) free(p->in[i]);
  free(p->want);
}

// Runs |exe| on |p| into |got| (out_elems floats); whether all match.
static bool run_and_compare(tj_executable_t* exe, const problem_t* p,
                            float* got) {
  tj_tensor_t in[3];
  tensors(p, in);
  for (int64_t i = 0; i < p->out_elems; ++i) got[i] = -12345.0f;
  tj_tensor_t out =
      tj_tensor_make(got, TJ_DTYPE_F32, p->out_rank, p->out_shape);
  tj_status_t s = tj_executable_run(exe, in, num_inputs(p->kind), &out, 1);
  if (s) {
    fprintf(stderr, "run: %s\n", tj_status_message(s));
    tj_status_free(s);
    return false;
  }
  for (int64_t i = 0; i < p->out_elems; ++i) {
    double want = p->want[i], d = (double)got[i] - want;
    if (!(d <= TOL + TOL * (want < 0 ? -want : want) &&
          -d <= TOL + TOL * (want < 0 ? -want : want))) {
      fprintf(stderr, "kind %d B %lld: element %lld is %.9g, want %.9g\n",
              (int)p->kind, (long long)p->B, (long long)i, (double)got[i],
              want);
      return false;
    }
  }
  return true;
}

static tj_executable_t* compile(tj_graph_t* g, int32_t threads,
                                tj_specialize_t specialize) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.x86.num_threads = threads;
  o.specialize = specialize;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  return exe;
}

// A host job system that runs everything on the calling thread: with a
// host parallel_for the library starts no threads of its own, so the cold
// part is built by the first run that needs it.
static void serial_parallel_for(void* user_data, int64_t count, int64_t grain,
                                tj_task_fn task, void* task_context) {
  (void)user_data;
  (void)grain;
  if (count > 0) task(task_context, 0, count);
}

static tj_executable_t* compile_hosted(tj_graph_t* g, int32_t threads) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.x86.num_threads = threads;
  o.x86.parallel_for = serial_parallel_for;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &o, &exe));
  return exe;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

// Waits (|ms| at most) until |jit| has loaded |loads| objects, e.g. a
// cold part built in the background; whether it did.
static bool wait_for_loads(tj_x86_jit_t* jit, uint64_t loads, int ms) {
  for (int i = 0; i < ms; ++i) {
    tj_x86_jit_stats_t st;
    tj_x86_jit_stats(jit, &st);
    if (st.loads >= loads) return true;
    sleep_ms(1);
  }
  return false;
}

// Threads of this process (entries of /proc/self/task), or -1.
static int count_threads(void) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

// Lines of /proc/self/maps: every JIT code allocation is at least one
// mapping, so code that is never unmapped shows up here.
static int count_mappings(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  int n = 0;
  for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
  fclose(f);
  return n;
}

//===--- tests ---===//

// Three executables of one context (and a fourth with another thread
// count) share one JIT; those with the same thread count share one pool.
TEST(one_jit_and_pool_per_context) {
  tj_context_t* ctx = NULL;
  // Released executables are unloaded, not kept for a later equal compile
  // (region_compile_test checks that).
  tj_context_options_t co = tj_test_context_options();
  co.retain_compiled = 0;
  CHECK_OK(tj_context_create(&co, &ctx));
  tj_executable_t* exes[NUM_KINDS + 1];
  tj_graph_t* graphs[NUM_KINDS];
  for (int k = 0; k < NUM_KINDS; ++k) {
    graphs[k] = make_graph(ctx, (kind_t)k, 0);
    exes[k] = compile(graphs[k], 2, TJ_SPECIALIZE_NEVER);
  }
  tj_x86_jit_t* jit = tj_x86_context_jit(ctx);
  CHECK(jit != NULL);
  CHECK_EQ_INT(1, tj_x86_context_num_pools(ctx));
  // One module per executable, and the GEMM's cold part (background:
  // prepare waits for that build, which ends after the part is linked
  // and remembered in the memory cache).
  for (int k = 0; k < NUM_KINDS; ++k)
    CHECK_OK(tj_executable_prepare(exes[k], NULL, 0));
  CHECK(wait_for_loads(jit, NUM_KINDS + 1, LONG_WAIT_MS));
  tj_x86_jit_stats_t st;
  tj_x86_jit_stats(jit, &st);
  CHECK_EQ_INT(NUM_KINDS + 1, (int)st.live_modules);
  CHECK_EQ_INT(NUM_KINDS + 1, (int)st.compiles);
  // Another thread count: a second pool, same JIT.
  exes[NUM_KINDS] = compile(graphs[0], 3, TJ_SPECIALIZE_NEVER);
  CHECK(tj_x86_context_jit(ctx) == jit);
  CHECK_EQ_INT(2, tj_x86_context_num_pools(ctx));
  CHECK_OK(tj_executable_prepare(exes[NUM_KINDS], NULL, 0));
  CHECK(wait_for_loads(jit, NUM_KINDS + 3, LONG_WAIT_MS));
  tj_x86_jit_stats(jit, &st);
  // Same kernel text: the memory cache serves both parts, the JIT loads
  // them again.
  CHECK_EQ_INT(NUM_KINDS + 1, (int)st.compiles);
  CHECK_EQ_INT(NUM_KINDS + 3, (int)st.live_modules);
  for (int k = 0; k < NUM_KINDS; ++k) {
    problem_t p;
    problem_init(&p, ctx, (kind_t)k, 130);
    float* got = malloc(sizeof(float) * (size_t)p.out_elems);
    CHECK(run_and_compare(exes[k], &p, got));
    if (k == 0) CHECK(run_and_compare(exes[NUM_KINDS], &p, got));
    free(got);
    problem_deinit(&p);
  }
  for (int k = 0; k <= NUM_KINDS; ++k) tj_executable_release(exes[k]);
  tj_x86_jit_stats(jit, &st);
  CHECK_EQ_INT(0, (int)st.live_modules);
  for (int k = 0; k < NUM_KINDS; ++k) tj_graph_destroy(graphs[k]);
  tj_context_destroy(ctx);
}

// Threads: 20 executables with 3 threads each add the pool's 2 workers
// once, not 40; destroying the context joins them.
TEST(threads_released_with_context) {
  int before = count_threads();
  CHECK(before >= 1);
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = make_graph(ctx, KIND_POINTWISE, 0);
  tj_executable_t* exes[20];
  for (int i = 0; i < 20; ++i) exes[i] = compile(g, 3, TJ_SPECIALIZE_NEVER);
  CHECK_EQ_INT(before + 2, count_threads());
  for (int i = 0; i < 20; ++i) tj_executable_release(exes[i]);
  // The pool belongs to the context, not to the executables.
  CHECK_EQ_INT(before + 2, count_threads());
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  CHECK_EQ_INT(before, count_threads());
}

typedef struct worker_t {
  tj_executable_t* exe;
  const problem_t* problems;  // one per batch size
  int num_problems;
  int iterations;
  int seed;
  atomic_bool* go;
  bool ok;
} worker_t;

static void* worker_main(void* arg) {
  worker_t* w = arg;
  int64_t max_elems = 0;
  for (int i = 0; i < w->num_problems; ++i) {
    if (w->problems[i].out_elems > max_elems) {
      max_elems = w->problems[i].out_elems;
    }
  }
  float* got = malloc(sizeof(float) * (size_t)max_elems);
  w->ok = got != NULL;
  while (!atomic_load(w->go)) {
  }
  for (int it = 0; w->ok && it < w->iterations; ++it) {
    const problem_t* p = &w->problems[(it + w->seed) % w->num_problems];
    w->ok = run_and_compare(w->exe, p, got);
  }
  free(got);
  return NULL;
}

// Three executables (GEMM, pointwise, reduction), each run from two
// threads at once, all six on one context's pool, at several B. A run that
// finds the pool busy runs inline; every result must still be right, and
// the AFTER_N specializations compile while the others run.
TEST(several_executables_share_the_pool) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  enum { NB = 4, PER_EXE = 2 };
  const int64_t batches[NB] = {1, 7, 130, 513};
  problem_t problems[NUM_KINDS][NB];
  tj_graph_t* graphs[NUM_KINDS];
  tj_executable_t* exes[NUM_KINDS];
  for (int k = 0; k < NUM_KINDS; ++k) {
    for (int b = 0; b < NB; ++b) {
      problem_init(&problems[k][b], ctx, (kind_t)k, batches[b]);
    }
    graphs[k] = make_graph(ctx, (kind_t)k, 0);
    tj_compile_options_t o;
    tj_compile_options_initialize(&o);
    o.x86.num_threads = 2;
    o.specialize = TJ_SPECIALIZE_AFTER_N;
    o.specialize_after = 3;
    CHECK_OK(tj_compile(graphs[k], &o, &exes[k]));
  }
  CHECK_EQ_INT(1, tj_x86_context_num_pools(ctx));
  atomic_bool go;
  atomic_init(&go, false);
  pthread_t threads[NUM_KINDS * PER_EXE];
  worker_t workers[NUM_KINDS * PER_EXE];
  for (int i = 0; i < NUM_KINDS * PER_EXE; ++i) {
    int k = i / PER_EXE;
    workers[i] = (worker_t){exes[k], problems[k], NB, 24, i, &go, false};
    CHECK_EQ_INT(0,
                 pthread_create(&threads[i], NULL, worker_main, &workers[i]));
  }
  atomic_store(&go, true);
  for (int i = 0; i < NUM_KINDS * PER_EXE; ++i) {
    pthread_join(threads[i], NULL);
    CHECK(workers[i].ok);
  }
  for (int k = 0; k < NUM_KINDS; ++k) {
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exes[k], &st);
    CHECK_EQ_INT(24 * PER_EXE, (int)st.runs);
    CHECK(st.recompiles >= 1);
    tj_executable_release(exes[k]);
    tj_graph_destroy(graphs[k]);
    for (int b = 0; b < NB; ++b) problem_deinit(&problems[k][b]);
  }
  tj_x86_jit_stats_t jst;
  tj_x86_jit_stats(tj_x86_context_jit(ctx), &jst);
  CHECK_EQ_INT(0, (int)jst.live_modules);
  tj_context_destroy(ctx);
}

// Compiles (with an exact-shape specialization too), runs and destroys an
// executable 200 times in one context: the JIT unloads the code of each,
// reuses one JITDylib, and the process neither maps more memory nor
// grows its JITDylib count as it goes. Every 10th compile has new kernel
// text, so LLVM compiles (the memory cache serves the rest).
TEST(compile_and_destroy_is_bounded) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  problem_t p;
  problem_init(&p, ctx, KIND_GEMM, 9);
  float* got = malloc(sizeof(float) * (size_t)p.out_elems);
  int maps_at_20 = 0;
  for (int i = 0; i < 200; ++i) {
    // Every 10th graph adds a tiny constant of its own (no effect on the
    // values, a new kernel text).
    double salt = i % 10 == 5 ? 1e-30 * (i + 1) : 0;
    tj_graph_t* g = make_graph(ctx, KIND_GEMM, salt);
    tj_executable_t* exe = compile(g, 2, TJ_SPECIALIZE_ALWAYS);
    CHECK(run_and_compare(exe, &p, got));
    tj_executable_release(exe);
    tj_graph_destroy(g);
    if (i == 19) maps_at_20 = count_mappings();
  }
  tj_x86_jit_stats_t st;
  tj_x86_jit_stats(tj_x86_context_jit(ctx), &st);
  CHECK_EQ_INT(0, (int)st.live_modules);
  // Per executable: the generic set's hot part, the specialization's hot
  // part and (B = 9 takes the small-M path) its cold part: 600 loads, of
  // at most three modules at once.
  CHECK_EQ_INT(600, (int)st.loads);
  CHECK(st.dylibs <= 3);
  CHECK(st.compiles >= 21);
  int maps_at_200 = count_mappings();
  // A leak of one mapping per executable would add 180; allow the
  // allocator its arenas (ASan's grew by 20 under a loaded machine).
  CHECK(maps_at_20 > 0 && maps_at_200 - maps_at_20 < 60);
  if (maps_at_200 - maps_at_20 >= 60) {
    fprintf(stderr, "mappings: %d after 20, %d after 200\n", maps_at_20,
            maps_at_200);
  }
  free(got);
  problem_deinit(&p);
  tj_context_destroy(ctx);
}

// The GEMM kernel's small-M paths (M <= 16) are a cold part: with a host
// parallel_for, compiled by the first run that needs them, not by
// tj_compile nor behind the host's back in the meantime (the sleep gives a
// background build time to show up), and cached like the rest (a second
// context with the same disk cache compiles nothing).
TEST(small_m_paths_on_first_use) {
  char dir[] = "/tmp/tj-ctx-test-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.x86.num_threads = 2;
  o.x86.parallel_for = serial_parallel_for;
  o.cache_dir = dir;
  for (int round = 0; round < 2; ++round) {
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_test_context_create(&ctx));
    tj_graph_t* g = make_graph(ctx, KIND_GEMM, 0);
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &o, &exe));
    tj_x86_jit_t* jit = tj_x86_context_jit(ctx);
    sleep_ms(150);
    tj_x86_jit_stats_t st;
    tj_x86_jit_stats(jit, &st);
    // Round 0: the hot part by LLVM; round 1: from the disk cache.
    CHECK_EQ_INT(round == 0 ? 1 : 0, (int)st.compiles);
    CHECK_EQ_INT(1, (int)st.loads);
    const int64_t batches[4] = {130, 7, 1, 16};
    for (int b = 0; b < 4; ++b) {
      problem_t p;
      problem_init(&p, ctx, KIND_GEMM, batches[b]);
      float* got = malloc(sizeof(float) * (size_t)p.out_elems);
      CHECK(run_and_compare(exe, &p, got));
      free(got);
      problem_deinit(&p);
      tj_x86_jit_stats(jit, &st);
      // The cold part comes with the first small batch (B = 7), once.
      int want = round == 1 ? 0 : b == 0 ? 1 : 2;
      CHECK_EQ_INT(want, (int)st.compiles);
      CHECK_EQ_INT(b == 0 ? 1 : 2, (int)st.live_modules);
    }
    tj_executable_release(exe);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
  }
  char command[128];
  snprintf(command, sizeof(command), "rm -rf '%s'", dir);
  CHECK_EQ_INT(0, system(command));
}

// TJ_LOG=cache remarks about a kernel set's cold part: how many there
// were and the number of deferred functions the last one named.
typedef struct cold_remarks_t {
  pthread_mutex_t mutex;
  int lines;
  int deferred;
  int announced;  // "...; <n> functions deferred to first use" at compile
} cold_remarks_t;

// The number right before |at| in |text|, or -1.
static int number_before(const char* text, const char* at) {
  const char* p = at;
  while (p > text && p[-1] >= '0' && p[-1] <= '9') --p;
  return p < at ? atoi(p) : -1;
}

static void on_diagnostic(tj_severity_t severity, const char* message,
                          size_t length, void* user_data) {
  (void)severity;
  cold_remarks_t* r = user_data;
  char text[512];
  size_t n = length < sizeof(text) - 1 ? length : sizeof(text) - 1;
  memcpy(text, message, n);
  text[n] = '\0';
  // "cache: @<graph>: <n> deferred functions (small-M GEMM paths) ..."
  const char* at = strstr(text, " deferred functions");
  const char* hot = strstr(text, " functions deferred to first use");
  pthread_mutex_lock(&r->mutex);
  if (at) {
    ++r->lines;
    r->deferred = number_before(text, at);
  }
  if (hot) r->announced = number_before(text, hot);
  pthread_mutex_unlock(&r->mutex);
}

// Every row count of the small-M path through tj_compile, from one generic
// kernel (host parallel_for: built on first use): M = 17 (packed) first
// compiles nothing more; the first small M builds the cold part, which holds
// the path's loop function (1) besides its microkernels (a full strip and an
// edge one per row count: an even number), once; M = 1..16 then all match the
// reference.
TEST(small_m_every_row_count) {
  cold_remarks_t remarks;
  memset(&remarks, 0, sizeof(remarks));
  pthread_mutex_init(&remarks.mutex, NULL);
  tj_context_options_t co = tj_test_context_options();
  co.diagnostic_fn = on_diagnostic;
  co.diagnostic_user_data = &remarks;
  co.log = "cache";
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&co, &ctx));
  tj_graph_t* g = make_graph(ctx, KIND_GEMM, 0);
  tj_executable_t* exe = compile_hosted(g, 2);
  tj_x86_jit_t* jit = tj_x86_context_jit(ctx);
  tj_x86_jit_stats_t st;
  for (int i = 0; i <= 16; ++i) {
    int64_t b = i == 0 ? 17 : i;
    problem_t p;
    problem_init(&p, ctx, KIND_GEMM, b);
    float* got = malloc(sizeof(float) * (size_t)p.out_elems);
    CHECK(run_and_compare(exe, &p, got));
    free(got);
    problem_deinit(&p);
    tj_x86_jit_stats(jit, &st);
    CHECK_EQ_INT(b == 17 ? 1 : 2, (int)st.compiles);
    pthread_mutex_lock(&remarks.mutex);
    CHECK_EQ_INT(b == 17 ? 0 : 1, remarks.lines);
    pthread_mutex_unlock(&remarks.mutex);
  }
  CHECK(remarks.deferred >= 3);
  CHECK_EQ_INT(1, remarks.deferred % 2);
  CHECK_EQ_INT(remarks.announced, remarks.deferred);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  pthread_mutex_destroy(&remarks.mutex);
}

// The first small-M run spread over a pool, right after tj_compile:
// several workers reach the deferred functions at once while the
// background build runs (or before it starts); one build, the others wait
// for it.
TEST(cold_part_from_pool_workers) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  enum { M = 5, K = 512, N = 2048 };  // big enough to spread (x86_backend.c)
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "wide", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, K}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){K, N}, "w");
  tj_graph_output(g, tj_graph_relu(g, tj_graph_matmul(g, x, w)), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_executable_t* exe = compile(g, 4, TJ_SPECIALIZE_NEVER);
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_REFERENCE;
  tj_executable_t* ref = NULL;
  CHECK_OK(tj_compile(g, &o, &ref));
  float* xs = malloc(sizeof(float) * M * K);
  float* ws = malloc(sizeof(float) * K * N);
  float* got = malloc(sizeof(float) * M * N);
  float* want = malloc(sizeof(float) * M * N);
  fill(xs, M * K, 2.0f);
  fill(ws, K * N, 0.1f);
  tj_tensor_t in[2] = {tj_tensor_make(xs, TJ_DTYPE_F32, 2, (int64_t[]){M, K}),
                       tj_tensor_make(ws, TJ_DTYPE_F32, 2, (int64_t[]){K, N})};
  int64_t ys[2] = {M, N};
  tj_tensor_t out_got = tj_tensor_make(got, TJ_DTYPE_F32, 2, ys);
  tj_tensor_t out_want = tj_tensor_make(want, TJ_DTYPE_F32, 2, ys);
  CHECK_OK(tj_executable_run(ref, in, 2, &out_want, 1));
  CHECK_OK(tj_executable_run(exe, in, 2, &out_got, 1));
  int bad = 0;
  for (int64_t i = 0; i < (int64_t)M * N; ++i) {
    double d = fabs((double)got[i] - want[i]);
    if (!(d <= 1e-4 + 1e-4 * fabs((double)want[i]))) ++bad;
  }
  CHECK_EQ_INT(0, bad);
  tj_x86_jit_stats_t st;
  tj_x86_jit_stats(tj_x86_context_jit(ctx), &st);
  CHECK_EQ_INT(2, (int)st.compiles);  // hot part, then the cold part once
  free(xs);
  free(ws);
  free(got);
  free(want);
  tj_executable_release(ref);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// Failing allocations while a run builds the cold part (host parallel_for:
// no background build): that run returns OUT_OF_MEMORY (never wrong
// numbers with an OK status), a later run builds it and is right, and
// nothing leaks.
TEST(cold_part_out_of_memory) {
  long n = 0;
  for (; n < 400; ++n) {
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, -1);
    tj_context_options_t co = tj_test_context_options();
    co.allocator = tj_test_allocator_get(&alloc);
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_context_create(&co, &ctx));
    tj_graph_t* g = make_graph(ctx, KIND_GEMM, 0);
    tj_executable_t* exe = compile_hosted(g, 1);
    problem_t p;
    problem_init(&p, ctx, KIND_GEMM, 3);
    float* got = malloc(sizeof(float) * (size_t)p.out_elems);
    tj_tensor_t in[3];
    tensors(&p, in);
    tj_tensor_t out =
        tj_tensor_make(got, TJ_DTYPE_F32, p.out_rank, p.out_shape);
    alloc.fail_at = alloc.allocations + n;
    tj_status_t s = tj_executable_run(exe, in, 3, &out, 1);
    alloc.fail_at = -1;
    bool done = s == NULL;
    if (s) {
      CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(s));
      tj_status_free(s);
    }
    CHECK(run_and_compare(exe, &p, got));
    free(got);
    problem_deinit(&p);
    tj_executable_release(exe);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
    if (done) break;
  }
  printf("# cold part: %ld failing allocation points\n", n);
  CHECK(n > 0 && n < 400);
}

// Right after tj_compile the cold part builds in the background: once it
// is loaded (two LLVM compiles, two loads), a B = 1 run compiles and loads
// nothing more and is right, and the log says where it was built.
TEST(cold_part_built_in_background) {
  cold_remarks_t remarks;
  memset(&remarks, 0, sizeof(remarks));
  pthread_mutex_init(&remarks.mutex, NULL);
  tj_context_options_t co = tj_test_context_options();
  co.diagnostic_fn = on_diagnostic;
  co.diagnostic_user_data = &remarks;
  co.log = "cache";
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&co, &ctx));
  tj_graph_t* g = make_graph(ctx, KIND_GEMM, 0);
  tj_executable_t* exe = compile(g, 2, TJ_SPECIALIZE_NEVER);
  tj_x86_jit_t* jit = tj_x86_context_jit(ctx);
  CHECK(wait_for_loads(jit, 2, LONG_WAIT_MS));
  tj_x86_jit_stats_t st;
  tj_x86_jit_stats(jit, &st);
  CHECK_EQ_INT(2, (int)st.compiles);
  CHECK_EQ_INT(2, (int)st.live_modules);
  for (int b = 1; b <= 2; ++b) {
    problem_t p;
    problem_init(&p, ctx, KIND_GEMM, b == 1 ? 1 : 16);
    float* got = malloc(sizeof(float) * (size_t)p.out_elems);
    CHECK(run_and_compare(exe, &p, got));
    free(got);
    problem_deinit(&p);
    tj_x86_jit_stats(jit, &st);
    CHECK_EQ_INT(2, (int)st.compiles);
    CHECK_EQ_INT(2, (int)st.loads);
  }
  pthread_mutex_lock(&remarks.mutex);
  CHECK_EQ_INT(1, remarks.lines);
  CHECK(remarks.deferred >= 3);
  pthread_mutex_unlock(&remarks.mutex);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  pthread_mutex_destroy(&remarks.mutex);
}

// An executable destroyed right after tj_compile, while its cold part is
// still building in the background (new kernel text each time, so LLVM
// runs for tens of ms): the release waits for that build, nothing stays
// loaded and (the counting allocator, once the context is gone) nothing
// leaks. ASan/TSan builds check the rest.
TEST(destroy_during_background_build) {
  tj_test_allocator_t alloc;
  tj_test_allocator_initialize(&alloc, -1);
  tj_context_options_t co = tj_test_context_options();
  co.allocator = tj_test_allocator_get(&alloc);
  co.retain_compiled = 0;  // each release unloads (none is kept)
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&co, &ctx));
  for (int i = 0; i < 20; ++i) {
    tj_graph_t* g = make_graph(ctx, KIND_GEMM, 1e-30 * (i + 1));
    tj_executable_t* exe = compile(g, 2, TJ_SPECIALIZE_NEVER);
    tj_executable_release(exe);
    tj_graph_destroy(g);
  }
  tj_x86_jit_stats_t st;
  tj_x86_jit_stats(tj_x86_context_jit(ctx), &st);
  CHECK_EQ_INT(0, (int)st.live_modules);
  // Every hot part compiled; at most one cold part per executable.
  CHECK(st.compiles >= 20 && st.compiles <= 40);
  tj_context_destroy(ctx);
  CHECK_EQ_INT(0, alloc.live_blocks);
  CHECK_EQ_INT(0, alloc.bad_frees);
}

// Failing allocations in the background build: the fail point is set,
// for k = 0, 1, ..., k allocations after the compile's "deferred to first
// use" remark (made on the compiling thread just before the build
// starts). Whichever thread meets it, tj_compile fails with OUT_OF_MEMORY
// or the first B = 3 run returns OUT_OF_MEMORY (the background build's
// error, taken by the first run that needs the part) or is right; a second
// run builds the part again and is right; nothing leaks. At least one k
// fails the background build (the part not loaded when the run comes).
typedef struct oom_at_remark_t {
  tj_test_allocator_t* alloc;
  long k;
} oom_at_remark_t;

static void fail_after_remark(tj_severity_t severity, const char* message,
                              size_t length, void* user_data) {
  (void)severity;
  (void)length;
  oom_at_remark_t* r = user_data;
  if (strstr(message, " functions deferred to first use")) {
    r->alloc->fail_at = r->alloc->allocations + r->k;
  }
}

TEST(cold_part_background_out_of_memory) {
  int deferred_failures = 0;
  long k = 0;
  for (; k < 100; ++k) {
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, -1);
    oom_at_remark_t r = {&alloc, k};
    tj_context_options_t co = tj_test_context_options();
    co.allocator = tj_test_allocator_get(&alloc);
    co.diagnostic_fn = fail_after_remark;
    co.diagnostic_user_data = &r;
    co.log = "cache";
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_context_create(&co, &ctx));
    tj_graph_t* g = make_graph(ctx, KIND_GEMM, 0);
    problem_t p;
    problem_init(&p, ctx, KIND_GEMM, 3);
    tj_compile_options_t o;
    tj_compile_options_initialize(&o);
    o.x86.num_threads = 1;
    tj_executable_t* exe = NULL;
    tj_status_t s = tj_compile(g, &o, &exe);
    bool done = false;
    if (s) {
      CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(s));
      tj_status_free(s);
    } else {
      // Time for the background build to finish or fail (a run that comes
      // first builds the part itself: the same outcomes). Not loaded then:
      // it failed, and the run must say so.
      bool loaded = wait_for_loads(tj_x86_context_jit(ctx), 2, 500);
      float* got = malloc(sizeof(float) * (size_t)p.out_elems);
      tj_tensor_t in[3];
      tensors(&p, in);
      tj_tensor_t out =
          tj_tensor_make(got, TJ_DTYPE_F32, p.out_rank, p.out_shape);
      s = tj_executable_run(exe, in, 3, &out, 1);
      if (s) {
        CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(s));
        deferred_failures += !loaded;
        tj_status_free(s);
      }
      done = s == NULL;
      CHECK(run_and_compare(exe, &p, got));
      free(got);
    }
    problem_deinit(&p);
    tj_executable_release(exe);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
    // Done once the fail point lies past every allocation.
    if (done && alloc.fail_at >= alloc.allocations) break;
  }
  printf("# background cold part: %d deferred-build failures in %ld steps\n",
         deferred_failures, k + 1);
  CHECK(deferred_failures > 0);
}

// The host's reference and the executables' ones, dropped in either
// order at any moment of the background build (no wait, or a few ms into
// it): destroying the context first leaves its JIT to the executables (a
// run after it is still right; the release unloads its code from a live
// JIT and waits for or skips its build), and the diagnostic function is
// not called once tj_context_destroy returns (TJ_LOG=cache would remark
// on the finished build). Then nothing leaks. This was the hang at Python
// exit: a garbage collector frees a cycle's objects in no set order.
typedef struct late_remarks_t {
  atomic_bool destroyed;
  atomic_int late;
} late_remarks_t;

static void count_late(tj_severity_t severity, const char* message,
                       size_t length, void* user_data) {
  (void)severity;
  (void)message;
  (void)length;
  late_remarks_t* r = user_data;
  if (atomic_load(&r->destroyed)) atomic_fetch_add(&r->late, 1);
}

TEST(release_in_any_order_during_background_build) {
  for (int i = 0; i < 12; ++i) {
    bool context_first = i % 2 == 0;
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, -1);
    late_remarks_t remarks;
    atomic_init(&remarks.destroyed, false);
    atomic_init(&remarks.late, 0);
    tj_context_options_t co = tj_test_context_options();
    co.allocator = tj_test_allocator_get(&alloc);
    co.diagnostic_fn = count_late;
    co.diagnostic_user_data = &remarks;
    co.log = "cache";
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_context_create(&co, &ctx));
    problem_t p;
    problem_init(&p, ctx, KIND_GEMM, 3);
    // New kernel text each time: LLVM runs in the background for tens of
    // ms. Two executables: one released before the context, one after.
    tj_graph_t* g = make_graph(ctx, KIND_GEMM, 1e-30 * (i + 1));
    tj_executable_t* a = compile(g, 2, TJ_SPECIALIZE_NEVER);
    tj_executable_t* b = compile(g, 2, TJ_SPECIALIZE_NEVER);
    tj_graph_destroy(g);
    sleep_ms((i / 2) % 3 * 5);
    if (context_first) {
      atomic_store(&remarks.destroyed, true);
      tj_context_destroy(ctx);
      float* got = malloc(sizeof(float) * (size_t)p.out_elems);
      CHECK(run_and_compare(b, &p, got));
      free(got);
      tj_executable_release(a);
      tj_executable_release(b);
    } else {
      tj_executable_release(a);
      tj_executable_release(b);
      atomic_store(&remarks.destroyed, true);
      tj_context_destroy(ctx);
    }
    problem_deinit(&p);
    CHECK_EQ_INT(0, atomic_load(&remarks.late));
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
  }
}

// tj_executable_prepare with a host parallel_for (nothing builds the
// deferred code behind the host's back): it builds the small-M paths at
// load time, so that runs at every M <= 16 afterwards compile and load
// nothing (the JIT's counters) and are right; a second prepare does
// nothing; data may be NULL; a wrong input count or shape is
// INVALID_ARGUMENT naming the call or the input. With TJ_SPECIALIZE_ALWAYS
// it also compiles the shape's exact-shape kernels, which the first run of
// that shape then uses (no recompile).
TEST(prepare_builds_before_the_first_run) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = make_graph(ctx, KIND_GEMM, 0);
  tj_executable_t* exe = compile_hosted(g, 2);
  tj_x86_jit_t* jit = tj_x86_context_jit(ctx);
  tj_x86_jit_stats_t st;
  tj_x86_jit_stats(jit, &st);
  CHECK_EQ_INT(1, (int)st.compiles);
  problem_t p0;
  problem_init(&p0, ctx, KIND_GEMM, 4);
  tj_tensor_t shapes[3];
  tensors(&p0, shapes);
  for (int i = 0; i < 3; ++i) shapes[i].data = NULL;
  CHECK_OK(tj_executable_prepare(exe, shapes, 3));
  tj_x86_jit_stats(jit, &st);
  CHECK_EQ_INT(2, (int)st.compiles);
  CHECK_EQ_INT(2, (int)st.loads);
  CHECK_OK(tj_executable_prepare(exe, shapes, 3));
  CHECK_OK(tj_executable_prepare(exe, NULL, 0));
  tj_status_t s = tj_executable_prepare(exe, shapes, 2);
  CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, tj_status_code(s));
  CHECK(strstr(tj_status_message(s), "tj_executable_prepare") != NULL);
  tj_status_free(s);
  int64_t bad[2] = {4, K_DIM + 1};
  tj_tensor_t wrong[3] = {shapes[0], shapes[1], shapes[2]};
  wrong[0].shape = bad;
  s = tj_executable_prepare(exe, wrong, 3);
  CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, tj_status_code(s));
  tj_status_free(s);
  problem_deinit(&p0);
  for (int64_t B = 1; B <= 16; ++B) {
    problem_t p;
    problem_init(&p, ctx, KIND_GEMM, B);
    float* got = malloc(sizeof(float) * (size_t)p.out_elems);
    CHECK(run_and_compare(exe, &p, got));
    free(got);
    problem_deinit(&p);
  }
  tj_x86_jit_stats(jit, &st);
  CHECK_EQ_INT(2, (int)st.compiles);
  CHECK_EQ_INT(2, (int)st.loads);
  tj_executable_release(exe);

  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.x86.num_threads = 2;
  o.x86.parallel_for = serial_parallel_for;
  o.specialize = TJ_SPECIALIZE_ALWAYS;
  CHECK_OK(tj_compile(g, &o, &exe));
  problem_t p;
  problem_init(&p, ctx, KIND_GEMM, 5);
  tensors(&p, shapes);
  CHECK_OK(tj_executable_prepare(exe, shapes, 3));
  tj_executable_stats_t es = {.struct_size = sizeof(es)};
  tj_executable_stats(exe, &es);
  CHECK_EQ_INT(1, (int)es.recompiles);
  tj_x86_jit_stats(jit, &st);
  uint64_t loads = st.loads;
  float* got = malloc(sizeof(float) * (size_t)p.out_elems);
  CHECK(run_and_compare(exe, &p, got));
  free(got);
  problem_deinit(&p);
  tj_executable_stats(exe, &es);
  CHECK_EQ_INT(1, (int)es.recompiles);
  tj_x86_jit_stats(jit, &st);
  CHECK_EQ_INT((int)loads, (int)st.loads);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

int main(void) {
  // No disk cache (tj_test_context_options in every context): counts of
  // LLVM compiles must not depend on earlier runs.
  RUN_TEST(one_jit_and_pool_per_context);
  RUN_TEST(threads_released_with_context);
  RUN_TEST(several_executables_share_the_pool);
  RUN_TEST(compile_and_destroy_is_bounded);
  RUN_TEST(small_m_paths_on_first_use);
  RUN_TEST(small_m_every_row_count);
  RUN_TEST(cold_part_from_pool_workers);
  RUN_TEST(cold_part_out_of_memory);
  RUN_TEST(cold_part_built_in_background);
  RUN_TEST(destroy_during_background_build);
  RUN_TEST(cold_part_background_out_of_memory);
  RUN_TEST(release_in_any_order_during_background_build);
  RUN_TEST(prepare_builds_before_the_first_run);
  TEST_MAIN_END();
}
