// attention (issue 14) on x86, f32, through the public API: per shape the
// attention op, the same attention written out (q @ k^T * scale, iota
// causal where, softmax, @ v: what attention_match rewrites onto the op),
// and a plain C loop in the same process (online softmax per query row,
// one thread, the compiler's -O2) as the alternative. Median of --reps
// (default 5) runs after a warm-up, with min and max; GFLOP/s counts
// 4 B H Tq Tk D (half when causal).
//
// Today both of ours decompose into two GEMMs around a masked softmax (no
// fused kernel yet), so they should match; the written-out graph shows what
// a model that is not matched would get.
//
//   build/bench/attention_bench [--reps N]

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensorjit.h"

static int g_reps = 5;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int compare_doubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

typedef struct shape_t {
  int64_t b, h, hkv, t, d;
  bool causal;
} shape_t;

static void check(tj_status_t st, const char* what) {
  if (!st) return;
  fprintf(stderr, "attention_bench: %s: %s\n", what, tj_status_message(st));
  exit(1);
}

static tj_executable_t* compile(tj_context_t* ctx, const shape_t* s,
                                bool written_out) {
  tj_graph_t* g = NULL;
  check(tj_graph_create(ctx, "attn", &g), "graph");
  int64_t qd[4] = {s->b, s->h, s->t, s->d}, kd[4] = {s->b, s->hkv, s->t, s->d};
  tj_value_t q = tj_graph_input(g, TJ_DTYPE_F32, 4, qd, "q");
  tj_value_t k = tj_graph_input(g, TJ_DTYPE_F32, 4, kd, "k");
  tj_value_t v = tj_graph_input(g, TJ_DTYPE_F32, 4, kd, "v");
  const float scale = 1.0f / sqrtf((float)s->d);
  tj_value_t y;
  if (!written_out) {
    y = tj_graph_attention(g, q, k, v, tj_value_none(), scale, s->causal);
  } else {
    tj_value_t kt = tj_graph_transpose(g, k, (int32_t[]){0, 1, 3, 2});
    tj_value_t sc = tj_graph_mul(
        g, tj_graph_matmul(g, q, kt),
        tj_graph_constant(g, TJ_DTYPE_F32, 0, NULL, &scale, sizeof(scale)));
    if (s->causal) {
      int64_t tt[2] = {s->t, s->t};
      float ninf = -INFINITY;
      tj_value_t keep = tj_graph_ge(g, tj_graph_iota(g, TJ_DTYPE_I64, 2, tt, 0),
                                    tj_graph_iota(g, TJ_DTYPE_I64, 2, tt, 1));
      sc = tj_graph_where(
          g, keep, sc,
          tj_graph_constant(g, TJ_DTYPE_F32, 0, NULL, &ninf, sizeof(ninf)));
    }
    y = tj_graph_matmul(g, tj_graph_softmax(g, sc, -1), v);
  }
  tj_graph_output(g, y, "y");
  check(tj_graph_finalize(g), "finalize");
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  tj_executable_t* exe = NULL;
  check(tj_compile(g, &opts, &exe), "compile");
  tj_graph_destroy(g);
  return exe;
}

// The alternative: per (b, h, i) an online softmax over the keys.
static void plain_c(const shape_t* s, const float* q, const float* k,
                    const float* v, float* y) {
  const int64_t g = s->h / s->hkv, T = s->t, D = s->d;
  const float scale = 1.0f / sqrtf((float)D);
  float* acc = malloc((size_t)D * sizeof(float));
  for (int64_t b = 0; b < s->b; ++b)
    for (int64_t h = 0; h < s->h; ++h) {
      const float* kb = k + (b * s->hkv + h / g) * T * D;
      const float* vb = v + (b * s->hkv + h / g) * T * D;
      for (int64_t i = 0; i < T; ++i) {
        const float* qi = q + ((b * s->h + h) * T + i) * D;
        float m = -INFINITY, l = 0;
        memset(acc, 0, (size_t)D * sizeof(float));
        const int64_t n = s->causal ? i + 1 : T;
        for (int64_t j = 0; j < n; ++j) {
          float dot = 0;
          for (int64_t e = 0; e < D; ++e) dot += qi[e] * kb[j * D + e];
          dot *= scale;
          float m2 = dot > m ? dot : m, a = expf(m - m2), p = expf(dot - m2);
          l = l * a + p;
          for (int64_t e = 0; e < D; ++e)
            acc[e] = acc[e] * a + p * vb[j * D + e];
          m = m2;
        }
        float* yi = y + ((b * s->h + h) * T + i) * D;
        for (int64_t e = 0; e < D; ++e) yi[e] = acc[e] / l;
      }
    }
  free(acc);
}

typedef struct timing_t {
  double median, min, max;
} timing_t;

static timing_t time_runs(tj_executable_t* exe, const shape_t* s, float* q,
                          float* k, float* v, float* y) {
  int64_t qd[4] = {s->b, s->h, s->t, s->d}, kd[4] = {s->b, s->hkv, s->t, s->d};
  tj_tensor_t ins[3] = {tj_tensor_make(q, TJ_DTYPE_F32, 4, qd),
                        tj_tensor_make(k, TJ_DTYPE_F32, 4, kd),
                        tj_tensor_make(v, TJ_DTYPE_F32, 4, kd)};
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 4, qd);
  double t[64];
  for (int r = -1; r < g_reps; ++r) {
    double t0 = now_ms();
    if (exe)
      check(tj_executable_run(exe, ins, 3, &out, 1), "run");
    else
      plain_c(s, q, k, v, y);
    if (r >= 0) t[r] = now_ms() - t0;
  }
  qsort(t, (size_t)g_reps, sizeof(double), compare_doubles);
  return (timing_t){t[g_reps / 2], t[0], t[g_reps - 1]};
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      g_reps = atoi(argv[++i]);
  }
  if (g_reps < 1 || g_reps > 64) g_reps = 5;
  tj_context_t* ctx = NULL;
  check(tj_context_create(NULL, &ctx), "context");
  static const shape_t kShapes[] = {
      {2, 8, 8, 256, 64, false},
      {2, 8, 8, 256, 64, true},
      {1, 8, 2, 512, 64, true},
      {1, 4, 4, 512, 128, false},
  };
  printf("attention f32, median of %d (min-max) ms; GFLOP/s\n", g_reps);
  printf("%-28s %22s %22s %22s\n", "B H Hkv T D causal", "op", "written out",
         "plain C loop");
  for (size_t i = 0; i < sizeof(kShapes) / sizeof(kShapes[0]); ++i) {
    const shape_t* s = &kShapes[i];
    size_t nq = (size_t)(s->b * s->h * s->t * s->d);
    size_t nk = (size_t)(s->b * s->hkv * s->t * s->d);
    float* q = malloc(nq * sizeof(float));
    float* k = malloc(nk * sizeof(float));
    float* v = malloc(nk * sizeof(float));
    float* y = malloc(nq * sizeof(float));
    srand(1);
    for (size_t e = 0; e < nq; ++e) q[e] = (float)((double)rand() / RAND_MAX - 0.5);
    for (size_t e = 0; e < nk; ++e) k[e] = (float)((double)rand() / RAND_MAX - 0.5);
    for (size_t e = 0; e < nk; ++e) v[e] = (float)((double)rand() / RAND_MAX - 0.5);
    tj_executable_t* op = compile(ctx, s, false);
    // A written-out grouped-query form needs k repeated: not measured.
    tj_executable_t* wo = s->hkv == s->h ? compile(ctx, s, true) : NULL;
    timing_t t[3] = {time_runs(op, s, q, k, v, y),
                     wo ? time_runs(wo, s, q, k, v, y) : (timing_t){0, 0, 0},
                     time_runs(NULL, s, q, k, v, y)};
    double flops = 4.0 * (double)(s->b * s->h) * (double)s->t * (double)s->t *
                   (double)s->d * (s->causal ? 0.5 : 1.0);
    printf("%lld %lld %lld %lld %lld %-5s      ", (long long)s->b,
           (long long)s->h, (long long)s->hkv, (long long)s->t, (long long)s->d,
           s->causal ? "yes" : "no");
    for (int j = 0; j < 3; ++j)
      if (t[j].median == 0)
        printf(" %22s", "-");
      else
        printf(" %6.2f (%5.2f-%5.2f) %5.1f", t[j].median, t[j].min, t[j].max,
               flops / t[j].median * 1e-6);
    printf("\n");
    tj_executable_release(op);
    if (wo) tj_executable_release(wo);
    free(q);
    free(k);
    free(v);
    free(y);
  }
  tj_context_destroy(ctx);
  return 0;
}
