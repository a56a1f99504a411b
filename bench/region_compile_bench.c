// Region compile (issue 16): compile time of a stack of N identical layers
// (different weights, graph inputs) against one layer, as
// region_compile_test builds it: h = layer_norm(h + tanh(h @ w_i + b_i) *
// 0.5), two kernels per layer, x86, one thread.
//
//   cold     a fresh context (no memory cache; no disk cache)
//   warm     the same graph again while the first executable lives (the
//            compile memo shares its compiled graph): the median of 31
//   rebuilt  an equal graph built again (its structural key computed; the
//            building itself not counted) while the first lives: the
//            median of 31
//   reload   the same graph after every executable of it was released
//            (the context keeps the compiled core: retain_compiled)
//   rebuilt after release  an equal graph built again after that
//   unmemoized  the same graph compiled with the memo out of play (the
//            pass list "default", the same pipeline): the passes and
//            lowering run, the kernels come from the memory cache (the
//            path of a new graph made of known blocks): the median of 31
//   restart  a fresh process (this program run again) whose context's
//            disk cache holds the kernels (a service restarted): its
//            first tj_compile, one per repetition; the cache directory
//            is a new temporary one, filled by a first such process
//
// Usage: region_compile_bench [--reps R] [--layers N] [--loop K]
// --loop K: only the unmemoized compile, K times in a row for 1 and N
// layers (one context, interleaved in blocks of 100), printing the median
// and the minimum thread CPU time of each: on a loaded machine the minimum
// of many is the steadier figure.
// Prints the median and the range of tj_executable_stats' compile_ms over
// R repetitions of each, for 1 and N layers, and the ratios of medians;
// then the same for the calling thread's CPU time in tj_compile
// (CLOCK_THREAD_CPUTIME_ID: what a loaded machine's other processes do not
// inflate; it leaves out LLVM's background threads, so read the cold row's
// wall time).

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tensorjit.h"

enum { WIDTH = 32 };

static tj_graph_t* build(tj_context_t* ctx, int layers) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(ctx, "mlp", &g)) return NULL;
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t h = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, WIDTH}, "x");
  tj_value_t half = tj_graph_scalar(g, TJ_DTYPE_F32, 0.5);
  for (int l = 0; l < layers; ++l) {
    char wn[16], bn[16];
    snprintf(wn, sizeof(wn), "w%d", l);
    snprintf(bn, sizeof(bn), "b%d", l);
    tj_value_t w =
        tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){WIDTH, WIDTH}, wn);
    tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){WIDTH}, bn);
    tj_value_t z = tj_graph_add(g, tj_graph_matmul(g, h, w), b);
    h = tj_graph_add(g, h, tj_graph_mul(g, tj_graph_tanh(g, z), half));
    h = tj_graph_layer_norm(g, h, tj_value_none(), tj_value_none(), 1e-5);
  }
  tj_graph_output(g, h, "y");
  tj_status_t s = tj_graph_finalize(g);
  if (s) {
    fprintf(stderr, "finalize: %s\n", tj_status_message(s));
    tj_status_free(s);
    tj_graph_destroy(g);
    return NULL;
  }
  return g;
}

static double thread_cpu_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static double g_cpu_ms;  // the last compile's thread CPU time

static double compile_ms(const tj_graph_t* g, tj_executable_t** out) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.x86.num_threads = 1;
  double c0 = thread_cpu_ms();
  tj_status_t s = tj_compile(g, &o, out);
  g_cpu_ms = thread_cpu_ms() - c0;
  if (s) {
    fprintf(stderr, "compile: %s\n", tj_status_message(s));
    exit(1);
  }
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(*out, &st);
  return st.compile_ms;
}

enum { kFigures = 7 };

typedef struct figures_t {
  double v[kFigures];    // cold, warm, rebuilt, reload, rebuilt after
                         // release, unmemoized, restart
  double cpu[kFigures];  // the same, thread CPU time
} figures_t;

static int cmp_double(const void* a, const void* b);

static double compile_with(const tj_graph_t* g, const char* pipeline) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.x86.num_threads = 1;
  o.pipeline = pipeline;
  tj_executable_t* e = NULL;
  double c0 = thread_cpu_ms();
  tj_status_t s = tj_compile(g, &o, &e);
  g_cpu_ms = thread_cpu_ms() - c0;
  if (s) {
    fprintf(stderr, "compile: %s\n", tj_status_message(s));
    exit(1);
  }
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(e, &st);
  tj_executable_release(e);
  return st.compile_ms;
}

enum { kWarmCompiles = 31 };

static double median_of(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return v[n / 2];
}

// The restart row's child: one compile in a context whose disk cache is
// |dir|; prints "<compile_ms> <thread CPU ms>".
static int restart_child(int layers, const char* dir) {
  tj_context_t* ctx = NULL;
  tj_context_options_t co;
  tj_context_options_initialize(&co);
  co.cache_dir = dir;
  if (tj_context_create(&co, &ctx)) return 1;
  tj_graph_t* g = build(ctx, layers);
  if (!g) return 1;
  tj_executable_t* e = NULL;
  double ms = compile_ms(g, &e);
  printf("%.6f %.6f\n", ms, g_cpu_ms);
  tj_executable_release(e);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return 0;
}

static char g_cache_dir[64];  // the restart row's disk cache

// Runs restart_child in a new process; its figures to |*ms| and |*cpu|.
static void restart(int layers, double* ms, double* cpu) {
  char n[16];
  snprintf(n, sizeof(n), "%d", layers);
  char self[] = "/proc/self/exe", flag[] = "--restart-child";
  char* argv[] = {self, flag, n, g_cache_dir, NULL};
  int fds[2];
  if (pipe(fds) != 0) exit(1);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  pid_t pid;
  extern char** environ;
  if (posix_spawn(&pid, self, &fa, NULL, argv, environ) != 0) exit(1);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  char out[128] = {0};
  size_t got = 0;
  ssize_t r;
  while (got + 1 < sizeof(out) &&
         (r = read(fds[0], out + got, sizeof(out) - 1 - got)) > 0) {
    got += (size_t)r;
  }
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 ||
      sscanf(out, "%lf %lf", ms, cpu) != 2) {
    fprintf(stderr, "restart child failed\n");
    exit(1);
  }
}

static figures_t one_rep(int layers) {
  figures_t f;
  tj_context_t* ctx = NULL;
  tj_context_options_t co;
  tj_context_options_initialize(&co);
  co.cache_dir = "";  // no disk cache: cold means compiled by LLVM
  if (tj_context_create(&co, &ctx)) exit(1);
  tj_graph_t* g = build(ctx, layers);
  if (!g) exit(1);
  tj_executable_t* first = NULL;
  f.v[0] = compile_ms(g, &first);
  f.cpu[0] = g_cpu_ms;
  double v[kWarmCompiles], c[kWarmCompiles];
  for (int i = 0; i < kWarmCompiles; ++i) {
    v[i] = compile_with(g, NULL);
    c[i] = g_cpu_ms;
  }
  f.v[1] = median_of(v, kWarmCompiles);
  f.cpu[1] = median_of(c, kWarmCompiles);
  // Equal graphs built again: each compile computes its key once.
  for (int i = 0; i < kWarmCompiles; ++i) {
    tj_graph_t* g2 = build(ctx, layers);
    if (!g2) exit(1);
    v[i] = compile_with(g2, NULL);
    c[i] = g_cpu_ms;
    tj_graph_destroy(g2);
  }
  f.v[2] = median_of(v, kWarmCompiles);
  f.cpu[2] = median_of(c, kWarmCompiles);
  tj_executable_release(first);
  f.v[3] = compile_with(g, NULL);
  f.cpu[3] = g_cpu_ms;
  tj_graph_t* g3 = build(ctx, layers);
  if (!g3) exit(1);
  f.v[4] = compile_with(g3, NULL);
  f.cpu[4] = g_cpu_ms;
  tj_graph_destroy(g3);
  for (int i = 0; i < kWarmCompiles; ++i) {
    v[i] = compile_with(g, "default");
    c[i] = g_cpu_ms;
  }
  f.v[5] = median_of(v, kWarmCompiles);
  f.cpu[5] = median_of(c, kWarmCompiles);
  restart(layers, &f.v[6], &f.cpu[6]);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return f;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

typedef struct stat_t {
  double median, lo, hi;
} stat_t;

static stat_t summarize(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  stat_t s = {v[n / 2], v[0], v[n - 1]};
  return s;
}

// The --loop mode: K unmemoized compiles of 1 and of |layers| layers.
static int loop_unmemoized(int layers, int k) {
  tj_context_t* ctx = NULL;
  tj_context_options_t co;
  tj_context_options_initialize(&co);
  co.cache_dir = "";
  if (tj_context_create(&co, &ctx)) return 1;
  const int counts[2] = {1, layers};
  tj_graph_t* g[2] = {NULL, NULL};
  tj_executable_t* first[2] = {NULL, NULL};
  double* v[2] = {malloc(sizeof(double) * (size_t)k),
                  malloc(sizeof(double) * (size_t)k)};
  if (!v[0] || !v[1]) return 1;
  for (int c = 0; c < 2; ++c) {
    g[c] = build(ctx, counts[c]);
    if (!g[c]) return 1;
    compile_ms(g[c], &first[c]);  // the kernels into the memory cache
  }
  for (int i = 0; i < k; i += 100) {
    for (int c = 0; c < 2; ++c) {
      for (int j = i; j < i + 100 && j < k; ++j) {
        compile_with(g[c], "default");
        v[c][j] = g_cpu_ms;
      }
    }
  }
  double med[2], lo[2];
  for (int c = 0; c < 2; ++c) {
    med[c] = median_of(v[c], k);
    lo[c] = v[c][0];  // sorted by median_of
    printf(
        "unmemoized, %2d layers, %d compiles: thread CPU median %.4f ms, "
        "min %.4f ms\n",
        counts[c], k, med[c], lo[c]);
    tj_executable_release(first[c]);
    tj_graph_destroy(g[c]);
    free(v[c]);
  }
  printf("ratio %d / 1 layer: median %.2fx, min %.2fx\n", layers,
         med[1] / med[0], lo[1] / lo[0]);
  tj_context_destroy(ctx);
  return 0;
}

int main(int argc, char** argv) {
  int reps = 7, layers = 24, loop = 0;
  if (argc == 4 && strcmp(argv[1], "--restart-child") == 0) {
    return restart_child(atoi(argv[2]), argv[3]);
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--reps") == 0) reps = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--layers") == 0) layers = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--loop") == 0) loop = atoi(argv[i + 1]);
  }
  if (reps < 1 || reps > 100 || layers < 1 || layers > 512) {
    fprintf(stderr,
            "usage: region_compile_bench [--reps R] [--layers N] [--loop K]\n");
    return 2;
  }
  if (loop > 0) return loop_unmemoized(layers, loop);
  const int counts[2] = {1, layers};
  snprintf(g_cache_dir, sizeof(g_cache_dir), "/tmp/tj_region_bench_XXXXXX");
  if (!mkdtemp(g_cache_dir)) return 1;
  for (int c = 0; c < 2; ++c) {
    double ms, cpu;
    restart(counts[c], &ms, &cpu);  // fills the disk cache
  }
  stat_t st[2][2][kFigures];  // [wall, cpu][1 layer, N][figure]
  for (int c = 0; c < 2; ++c) {
    double* v = malloc(sizeof(double) * 2 * kFigures * (size_t)reps);
    if (!v) return 1;
    for (int r = 0; r < reps; ++r) {
      figures_t f = one_rep(counts[c]);
      for (int k = 0; k < kFigures; ++k) {
        v[k * reps + r] = f.v[k];
        v[(kFigures + k) * reps + r] = f.cpu[k];
      }
    }
    for (int w = 0; w < 2; ++w) {
      for (int k = 0; k < kFigures; ++k) {
        st[w][c][k] = summarize(v + (w * kFigures + k) * reps, reps);
      }
    }
    free(v);
  }
  static const char* const kNames[kFigures] = {"cold",
                                               "warm (memo)",
                                               "rebuilt graph (memo)",
                                               "reload (kept)",
                                               "rebuilt after release",
                                               "unmemoized (kernel cache)",
                                               "restart (disk cache)"};
  static const char* const kClocks[2] = {"wall time (compile_ms)",
                                         "thread CPU time of tj_compile"};
  for (int w = 0; w < 2; ++w) {
    printf("# region compile, %d reps, %s, ms (median [min, max])\n", reps,
           kClocks[w]);
    printf("%-26s %-30s %-30s %s\n", "compile", "1 layer", "N layers", "ratio");
    for (int k = 0; k < kFigures; ++k) {
      const stat_t* a = &st[w][0][k];
      const stat_t* b = &st[w][1][k];
      printf("%-26s %9.4f [%.4f, %.4f]   %9.4f [%.4f, %.4f]   %.2fx\n",
             kNames[k], a->median, a->lo, a->hi, b->median, b->lo, b->hi,
             b->median / a->median);
    }
  }
  printf("# N = %d\n", layers);
  char rm[96];
  snprintf(rm, sizeof(rm), "rm -rf %s", g_cache_dir);
  if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", g_cache_dir);
  return 0;
}
