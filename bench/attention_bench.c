// attention (issue 14) on x86 through the public API: per shape and dtype
// (f32, bf16) the attention op, which compiles to one fused
// flash-attention kernel (jit/emit_attention.c); the decomposed path, the
// same attention written out (q @ k^T * scale, iota causal where, softmax,
// @ v) compiled with a pipeline without attention_match, so that it stays
// two GEMMs around a fused masked softmax; and the best alternative in the
// same process: torch's scaled_dot_product_attention where torch is
// importable (bench/attention_torch.py, run separately: this program
// links no Python), else this plain C loop (online softmax per query row,
// one thread, the compiler's -O2, f32 on the same values). Median of
// --reps (default 5) runs after a warm-up, with min and max; GFLOP/s counts
// 4 B H Tq Tk D (half when causal). The plain loop is slow (~1 GF/s): at
// T 2048 it runs --plain-reps times (default 1).
//
//   build/bench/attention_bench [--reps N] [--plain-reps N] [--quick]

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensorjit.h"

static int g_reps = 5, g_plain_reps = 1;

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
  tj_dtype_t dt;
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
  tj_value_t q = tj_graph_input(g, s->dt, 4, qd, "q");
  tj_value_t k = tj_graph_input(g, s->dt, 4, kd, "k");
  tj_value_t v = tj_graph_input(g, s->dt, 4, kd, "v");
  const float scale = 1.0f / sqrtf((float)s->d);
  tj_value_t y;
  if (!written_out) {
    y = tj_graph_attention(g, q, k, v, tj_value_none(), scale, s->causal);
  } else {
    tj_value_t kt = tj_graph_transpose(g, k, (int32_t[]){0, 1, 3, 2});
    // Scores in f32 (the decomposition's own upcast of half inputs).
    tj_value_t sc = tj_graph_mul(
        g, tj_graph_cast(g, tj_graph_matmul(g, q, kt), TJ_DTYPE_F32),
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
    y = tj_graph_matmul(g, tj_graph_cast(g, tj_graph_softmax(g, sc, -1), s->dt),
                        v);
  }
  tj_graph_output(g, y, "y");
  check(tj_graph_finalize(g), "finalize");
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  // The decomposed path: the default pipeline without attention_match.
  if (written_out)
    opts.pipeline =
        "canonicalize,cse,dce,decompose,canonicalize,cse,dce,fuse,memplan";
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

// |exe| on |q|, |k|, |v| of s->dt (y too); NULL: the plain loop on the
// f32 copies |qf|, |kf|, |vf| into |yf|.
static timing_t time_runs(tj_executable_t* exe, const shape_t* s, void* q,
                          void* k, void* v, void* y, float* qf, float* kf,
                          float* vf, float* yf) {
  int64_t qd[4] = {s->b, s->h, s->t, s->d}, kd[4] = {s->b, s->hkv, s->t, s->d};
  tj_tensor_t ins[3] = {tj_tensor_make(q, s->dt, 4, qd),
                        tj_tensor_make(k, s->dt, 4, kd),
                        tj_tensor_make(v, s->dt, 4, kd)};
  tj_tensor_t out = tj_tensor_make(y, s->dt, 4, qd);
  double t[64];
  const int reps = exe || s->t < 2048 ? g_reps : g_plain_reps;
  for (int r = exe ? -1 : 0; r < reps; ++r) {
    double t0 = now_ms();
    if (exe)
      check(tj_executable_run(exe, ins, 3, &out, 1), "run");
    else
      plain_c(s, qf, kf, vf, yf);
    if (r >= 0) t[r] = now_ms() - t0;
  }
  qsort(t, (size_t)reps, sizeof(double), compare_doubles);
  return (timing_t){t[reps / 2], t[0], t[reps - 1]};
}

// |n| values of |dt| from the f32 |src|, which gets them back as rounded.
static void* to_dtype(tj_dtype_t dt, float* src, size_t n) {
  if (dt == TJ_DTYPE_F32) return src;
  uint16_t* p = malloc(n * sizeof(uint16_t));
  for (size_t e = 0; e < n; ++e) {  // bf16, nearest even
    uint32_t bits;
    memcpy(&bits, &src[e], 4);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    p[e] = (uint16_t)(bits >> 16);
    bits = (uint32_t)p[e] << 16;
    memcpy(&src[e], &bits, 4);
  }
  return p;
}

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      g_reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--plain-reps") == 0 && i + 1 < argc)
      g_plain_reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--quick") == 0)
      quick = true;
  }
  if (g_reps < 1 || g_reps > 64) g_reps = 5;
  if (g_plain_reps < 1 || g_plain_reps > 64) g_plain_reps = 1;
  tj_context_t* ctx = NULL;
  check(tj_context_create(NULL, &ctx), "context");
  shape_t shapes[40];
  int n = 0;
  static const tj_dtype_t dts[2] = {TJ_DTYPE_F32, TJ_DTYPE_BF16};
  for (int di = 0; di < 2; ++di)
    for (int64_t t = 512; t <= (quick ? 512 : 2048); t *= 4)
      for (int64_t d = 64; d <= 128; d *= 2)
        for (int c = 0; c < 2; ++c)
          shapes[n++] = (shape_t){1, 8, 8, t, d, c != 0, dts[di]};
  shapes[n++] = (shape_t){1, 8, 2, 512, 64, true, TJ_DTYPE_F32};  // GQA
  printf("attention, 1 thread per core, median of %d (min-max) ms; GFLOP/s\n",
         g_reps);
  printf("%-32s %22s %22s %22s\n", "dtype B H Hkv T D causal", "fused (op)",
         "decomposed", "plain C loop");
  for (int i = 0; i < n; ++i) {
    const shape_t* s = &shapes[i];
    size_t nq = (size_t)(s->b * s->h * s->t * s->d);
    size_t nk = (size_t)(s->b * s->hkv * s->t * s->d);
    float* qf = malloc(nq * sizeof(float));
    float* kf = malloc(nk * sizeof(float));
    float* vf = malloc(nk * sizeof(float));
    float* yf = malloc(nq * sizeof(float));
    srand(1);
    for (size_t e = 0; e < nq; ++e)
      qf[e] = (float)((double)rand() / RAND_MAX - 0.5);
    for (size_t e = 0; e < nk; ++e)
      kf[e] = (float)((double)rand() / RAND_MAX - 0.5);
    for (size_t e = 0; e < nk; ++e)
      vf[e] = (float)((double)rand() / RAND_MAX - 0.5);
    void* q = to_dtype(s->dt, qf, nq);
    void* k = to_dtype(s->dt, kf, nk);
    void* v = to_dtype(s->dt, vf, nk);
    void* y = malloc(nq * 4);
    tj_executable_t* op = compile(ctx, s, false);
    // A written-out grouped-query form needs k repeated: not measured.
    tj_executable_t* wo = s->hkv == s->h ? compile(ctx, s, true) : NULL;
    timing_t t[3] = {
        time_runs(op, s, q, k, v, y, qf, kf, vf, yf),
        wo ? time_runs(wo, s, q, k, v, y, qf, kf, vf, yf) : (timing_t){0, 0, 0},
        time_runs(NULL, s, q, k, v, y, qf, kf, vf, yf)};
    double flops = 4.0 * (double)(s->b * s->h) * (double)s->t * (double)s->t *
                   (double)s->d * (s->causal ? 0.5 : 1.0);
    printf("%-5s %lld %lld %lld %lld %lld %-5s      ", tj_dtype_name(s->dt),
           (long long)s->b, (long long)s->h, (long long)s->hkv, (long long)s->t,
           (long long)s->d, s->causal ? "yes" : "no");
    for (int j = 0; j < 3; ++j)
      if (t[j].median == 0)
        printf(" %22s", "-");
      else
        printf(" %7.2f (%6.2f-%6.2f) %5.1f", t[j].median, t[j].min, t[j].max,
               flops / t[j].median * 1e-6);
    printf("\n");
    fflush(stdout);
    tj_executable_release(op);
    if (wo) tj_executable_release(wo);
    if (q != qf) free(q);
    if (k != kf) free(k);
    if (v != vf) free(v);
    free(y);
    free(qf);
    free(kf);
    free(vf);
    free(yf);
  }
  tj_context_destroy(ctx);
  return 0;
}
