// The first run of a new shape bucket with x86 GEMM autotuning, three ways,
// on the capstone y = gelu(x @ w + b) (f32, tanh form) through the public
// API: autotune off (no timing), ON (the first run builds the variant
// kernels and times the candidates before it computes) and BACKGROUND (the
// first run computes with the generated kernel and queues the timing on
// the context's thread). For each: the first run's wall and process CPU
// time; for BACKGROUND also the runs while the job works, the job's
// remaining time (tj_context_wait_autotune) and the tuned steady state,
// beside ON's steady state. Each sample is a fresh context with the disk
// cache off (so every sample is a cold tuning); the modes alternate
// within a repetition so that they see the same load. Medians of --reps
// samples with their range. Timings are printed, never asserted.
//
//   autotune_first_run_bench [--reps 5] [--b 256] [--k 1024] [--n 1024]

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensorjit.h"

static double wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static double cpu_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void check(tj_status_t status, const char* what) {
  if (!status) return;
  fprintf(stderr, "autotune_first_run_bench: %s: %s\n", what,
          tj_status_message(status));
  exit(1);
}

static int compare_doubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

// Median of |n| values (sorted in place), and their range.
static double median(double* v, int n, double* lo, double* hi) {
  qsort(v, (size_t)n, sizeof(double), compare_doubles);
  *lo = v[0];
  *hi = v[n - 1];
  return v[n / 2];
}

enum { kOff, kOn, kBackground, kModes };
static const char* const kModeNames[kModes] = {"off", "on (sync)",
                                               "background"};

typedef struct sample_t {
  double first_wall, first_cpu;  // the first run
  double during;                 // BACKGROUND: a run while the job works
  double wait;                   // BACKGROUND: tj_context_wait_autotune
  double steady;                 // median of 9 runs after tuning
} sample_t;

static sample_t sample(int mode, int64_t B, int64_t K, int64_t N, float* x,
                       float* w, float* b, float* y) {
  tj_context_options_t co;
  tj_context_options_initialize(&co);
  co.cache_dir = "";
  tj_context_t* ctx = NULL;
  check(tj_context_create(&co, &ctx), "context");
  tj_graph_t* g = NULL;
  check(tj_graph_create(ctx, "capstone", &g), "graph");
  int64_t sb = tj_graph_symbol(g, "B");
  tj_value_t vx = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){sb, K}, "x");
  tj_value_t vw = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){K, N}, "w");
  tj_value_t vb = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){N}, "b");
  tj_graph_output(
      g,
      tj_graph_gelu(g, tj_graph_add(g, tj_graph_matmul(g, vx, vw), vb), true),
      "y");
  check(tj_graph_finalize(g), "finalize");
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.autotune = mode == kOff  ? TJ_AUTOTUNE_OFF
               : mode == kOn ? TJ_AUTOTUNE_ON
                             : TJ_AUTOTUNE_BACKGROUND;
  tj_executable_t* exe = NULL;
  check(tj_compile(g, &o, &exe), "compile");
  int64_t xs[2] = {B, K}, ws[2] = {K, N}, bs[1] = {N}, ys[2] = {B, N};
  tj_tensor_t in[3] = {tj_tensor_make(x, TJ_DTYPE_F32, 2, xs),
                       tj_tensor_make(w, TJ_DTYPE_F32, 2, ws),
                       tj_tensor_make(b, TJ_DTYPE_F32, 1, bs)};
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, ys);
  sample_t s = {0};
  double w0 = wall_ms(), c0 = cpu_ms();
  check(tj_executable_run(exe, in, 3, &out, 1), "run");
  s.first_wall = wall_ms() - w0;
  s.first_cpu = cpu_ms() - c0;
  if (mode == kBackground) {
    w0 = wall_ms();
    check(tj_executable_run(exe, in, 3, &out, 1), "run");
    s.during = wall_ms() - w0;
    w0 = wall_ms();
    tj_context_wait_autotune(ctx);
    s.wait = wall_ms() - w0;
  }
  double runs[9], lo, hi;
  for (int i = 0; i < 9; ++i) {
    w0 = wall_ms();
    check(tj_executable_run(exe, in, 3, &out, 1), "run");
    runs[i] = wall_ms() - w0;
  }
  s.steady = median(runs, 9, &lo, &hi);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

int main(int argc, char** argv) {
  int reps = 5;
  int64_t B = 256, K = 1024, N = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--b")) B = atoll(argv[i + 1]);
    if (!strcmp(argv[i], "--k")) K = atoll(argv[i + 1]);
    if (!strcmp(argv[i], "--n")) N = atoll(argv[i + 1]);
  }
  if (reps < 1 || reps > 64) reps = 5;
  float* x = malloc(sizeof(float) * (size_t)(B * K));
  float* w = malloc(sizeof(float) * (size_t)(K * N));
  float* b = malloc(sizeof(float) * (size_t)N);
  float* y = malloc(sizeof(float) * (size_t)(B * N));
  for (int64_t i = 0; i < B * K; ++i) x[i] = (float)(i % 17) / 17.0f - 0.5f;
  for (int64_t i = 0; i < K * N; ++i) w[i] = (float)(i % 13) / 130.0f - 0.05f;
  for (int64_t i = 0; i < N; ++i) b[i] = 0.01f * (float)(i % 7);
  sample_t s[kModes][64];
  for (int r = 0; r < reps; ++r) {
    for (int m = 0; m < kModes; ++m) s[m][r] = sample(m, B, K, N, x, w, b, y);
  }
  printf(
      "capstone gelu(x @ w + b) f32, B=%lld K=%lld N=%lld; medians of %d "
      "cold samples [range]\n",
      (long long)B, (long long)K, (long long)N, reps);
  printf("  %-12s %26s %26s %26s\n", "autotune", "first run wall ms",
         "first run CPU ms", "tuned steady ms");
  // Per mode: first run wall, first run CPU, steady, and for BACKGROUND a
  // run while the job works and the job's remaining time.
  double med[kModes][5], lo[kModes][5], hi[kModes][5], v[64];
  for (int m = 0; m < kModes; ++m) {
    for (int f = 0; f < 5; ++f) {
      for (int r = 0; r < reps; ++r) {
        const sample_t* q = &s[m][r];
        double fv[5] = {q->first_wall, q->first_cpu, q->steady, q->during,
                        q->wait};
        v[r] = fv[f];
      }
      med[m][f] = median(v, reps, &lo[m][f], &hi[m][f]);
    }
    printf("  %-12s", kModeNames[m]);
    for (int f = 0; f < 3; ++f) {
      printf(" %9.2f [%6.2f-%7.2f]", med[m][f], lo[m][f], hi[m][f]);
    }
    printf("\n");
  }
  printf(
      "  background: a run while the job works %.2f ms [%.2f-%.2f]; the "
      "job's remaining time %.1f ms [%.1f-%.1f]\n",
      med[kBackground][3], lo[kBackground][3], hi[kBackground][3],
      med[kBackground][4], lo[kBackground][4], hi[kBackground][4]);
  printf(
      "  first run background / on: %.3fx; a run while the job works / "
      "on's tuned steady: %.2fx; off steady / on steady: %.2fx\n",
      med[kBackground][0] / med[kOn][0], med[kBackground][3] / med[kOn][2],
      med[kOff][2] / med[kOn][2]);
  free(x);
  free(w);
  free(b);
  free(y);
  return 0;
}
