// attention's backward (issue 14, fabwd) on x86 through the public API:
// the training step of one attention, y and dL/dq, dL/dk, dL/dv from
// tj_graph_grad (inputs q, k, v and dy), compiled and run as one
// executable. Two forms of the same math: the attention op, whose VJP is
// attention_lse, attention_dq and attention_dkv (lib/autodiff.c; on x86
// these still decompose, as no fused backward kernel exists yet), and the
// written-out attention (q @ k^T * scale, iota causal where, softmax, @ v)
// differentiated op by op. torch's scaled_dot_product_attention forward
// and backward on the CPU is bench/attention_grad_torch.py, run beside it.
// Median of --reps (default 5) runs after a warm-up, (min-max) ms; GFLOP/s
// counts 3.5 x 4 B H T^2 D (forward + backward: 2 + 5 matmuls), half when
// causal.
//
//   build/bench/attention_grad_bench [--reps N] [--quick]

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

static void check(tj_status_t st, const char* what) {
  if (!st) return;
  fprintf(stderr, "attention_grad_bench: %s: %s\n", what,
          tj_status_message(st));
  exit(1);
}

typedef struct shape_t {
  int64_t b, h, t, d;
  bool causal;
} shape_t;

static tj_executable_t* compile(tj_context_t* ctx, const shape_t* s,
                                bool written_out) {
  tj_graph_t* g = NULL;
  check(tj_graph_create(ctx, "attn", &g), "graph");
  int64_t dims[4] = {s->b, s->h, s->t, s->d};
  tj_value_t q = tj_graph_input(g, TJ_DTYPE_F32, 4, dims, "q");
  tj_value_t k = tj_graph_input(g, TJ_DTYPE_F32, 4, dims, "k");
  tj_value_t v = tj_graph_input(g, TJ_DTYPE_F32, 4, dims, "v");
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
  tj_graph_t* joint = NULL;
  check(tj_graph_grad(g, 0, NULL, 0, NULL, &joint), "grad");
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  // The written-out form stays written out: no attention_match.
  if (written_out)
    opts.pipeline =
        "canonicalize,cse,dce,decompose,canonicalize,cse,dce,fuse,memplan";
  tj_executable_t* exe = NULL;
  check(tj_compile(joint, &opts, &exe), "compile");
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
  return exe;
}

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      g_reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--quick") == 0)
      quick = true;
  }
  if (g_reps < 1 || g_reps > 64) g_reps = 5;
  tj_context_t* ctx = NULL;
  check(tj_context_create(NULL, &ctx), "context");
  printf(
      "attention forward + backward, f32, median of %d (min-max) ms; "
      "GFLOP/s\n",
      g_reps);
  printf("%-24s %26s %26s\n", "B H T D causal", "attention op (VJP nodes)",
         "written out");
  for (int64_t t = 512; t <= (quick ? 512 : 1024); t *= 2)
    for (int c = 0; c < 2; ++c) {
      const shape_t s = {1, 8, t, 64, c != 0};
      const size_t n = (size_t)(s.b * s.h * s.t * s.d);
      float* buf = malloc(8 * n * sizeof(float));
      srand(1);
      for (size_t e = 0; e < 4 * n; ++e)
        buf[e] = (float)((double)rand() / RAND_MAX - 0.5);
      int64_t dims[4] = {s.b, s.h, s.t, s.d};
      tj_tensor_t ins[4], outs[4];
      for (int i = 0; i < 4; ++i) {
        ins[i] = tj_tensor_make(buf + i * n, TJ_DTYPE_F32, 4, dims);
        outs[i] = tj_tensor_make(buf + (4 + i) * n, TJ_DTYPE_F32, 4, dims);
      }
      const double flops = 3.5 * 4.0 * (double)(s.b * s.h) * (double)t *
                           (double)t * (double)s.d * (s.causal ? 0.5 : 1.0);
      printf("%lld %lld %lld %lld %-5s        ", (long long)s.b, (long long)s.h,
             (long long)t, (long long)s.d, s.causal ? "yes" : "no");
      for (int form = 0; form < 2; ++form) {
        tj_executable_t* exe = compile(ctx, &s, form == 1);
        double ts[64];
        for (int r = -1; r < g_reps; ++r) {
          double t0 = now_ms();
          check(tj_executable_run(exe, ins, 4, outs, 4), "run");
          if (r >= 0) ts[r] = now_ms() - t0;
        }
        qsort(ts, (size_t)g_reps, sizeof(double), compare_doubles);
        const double med = ts[g_reps / 2];
        printf(" %8.2f (%7.2f-%7.2f) %5.1f", med, ts[0], ts[g_reps - 1],
               flops / med * 1e-6);
        tj_executable_release(exe);
      }
      printf("\n");
      fflush(stdout);
      free(buf);
    }
  tj_context_destroy(ctx);
  return 0;
}
