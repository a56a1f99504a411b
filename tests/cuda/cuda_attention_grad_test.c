// attention's backward on the CUDA target (issue 14, fabwd): the joint
// graph of one attention from tj_graph_grad (y, dL/dq, dL/dk, dL/dv; the
// VJP's attention_lse, attention_dq and attention_dkv, fused kernels for
// f16/bf16 at head dims 64 and 128 without a mask (fabwdcuda: at most 8
// kernels a step, asserted), decomposed otherwise, beside the forward's
// flash kernel where it applies) compiled for
// CUDA with no graph break and compared with the f64 reference on the
// same rounded inputs: bf16 within 2e-2 of each output's largest
// magnitude, f32 within 2e-4 absolute + relative. Shapes cross several
// 64-row and 64-key tiles: grouped-query heads, causal with Tq != Tk, a
// bool mask with a fully masked row, head dims 64 and 128 (the flash
// forward's) and 40 (decomposed), symbolic B and T at two bindings; the
// fused cases in f16 too: odd T, Tq != Tk both ways, causal, 1 to 4 query
// heads a kv head. lsefwd: the forward's kernel writes attention_lse too,
// so the fused step is one kernel fewer (at most 7) than with
// TJ_ATTENTION_LSE=separate, whose step the fused bf16 cases also run
// (the same numbers); the forward graph whose outputs are y and
// attention_lse of the same scores is one kernel on both forward kernels
// (wgmma, TJ_NVPTX_ATTENTION=mma), y within the bound above and lse
// within 1e-3 absolute + relative of the f64 reference; the joint graph
// split by tj_graph_partition with save_attention_lse (the forward one
// kernel writing y and lse, the backward with no lse kernel: one kernel
// fewer than the split without it), forward then backward on the GPU,
// gives the gradients within the bound above. fa3bwd: on sm_90a the fused
// backward runs on wgmma by default; the fused cases run again under
// TJ_NVPTX_ATTENTION=mma (the mma.sync backward) and wgmma-wide.
// fa3bwd2: at T 1024 (long enough for the kernels' rings of buffers to
// wrap many times) the default backward gives the same bits twice and the
// mma.sync backward's gradients within the bf16 bound. Skips (exit 77)
// without a driver or GPU.

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/dtype.h"
#include "tensorjit/tj_autodiff.h"
#include "tests/cuda/cuda_test_util.h"

static tj_context_t* g_ctx;
// lsefwd: TJ_ATTENTION_LSE=separate (attention_lse a kernel of its own),
// and TJ_NVPTX_ATTENTION=mma (the mma.sync forward writing lse).
static tj_context_t* g_sep_ctx;
static tj_context_t* g_mma_ctx;
// fa3bwd: TJ_NVPTX_ATTENTION=wgmma-wide; fa3bwd2: wgmma-pingpong.
static tj_context_t* g_wide_ctx;
static tj_context_t* g_pingpong_ctx;

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static double uniform(double lo, double hi) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * (double)(g_rng >> 11) / 9007199254740992.0;
}

typedef struct case_t {
  const char* name;
  int64_t b, h, hkv, tq, tk, d;
  bool causal, mask, symbolic;
  int64_t b2, t2;  // the second binding (symbolic: Tq = Tk = T)
  bool fused;      // f16/bf16 take the fused backward kernels (fabwdcuda)
} case_t;

static const case_t kCases[] = {
    {"d64_gqa_causal_wide", 2, 4, 2, 70, 130, 64, true, false, false, 0, 0,
     true},
    {"d128_bool_mask", 1, 4, 4, 130, 100, 128, false, true, false, 0, 0, false},
    {"d40_causal_tall", 1, 2, 1, 90, 65, 40, true, false, false, 0, 0, false},
    {"d64_symbolic", 2, 4, 2, 129, 129, 64, true, true, true, 1, 200, false},
    // fabwdcuda: the fused backward.
    {"d128_causal_tall", 1, 4, 4, 193, 77, 128, true, false, false, 0, 0, true},
    {"d128_gqa4_wide", 2, 8, 2, 65, 191, 128, false, false, false, 0, 0, true},
    {"d64_mha_odd", 1, 2, 2, 127, 127, 64, false, false, false, 0, 0, true},
    {"d128_symbolic_gqa_causal", 2, 4, 2, 129, 129, 128, true, false, true, 1,
     200, true},
    {"d64_symbolic_mqa", 1, 4, 1, 64, 64, 64, false, false, true, 3, 131, true},
};

static tj_graph_t* build(const case_t* c, tj_dtype_t dt) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(g_ctx, c->name, &g)) return NULL;
  const int64_t B = c->symbolic ? tj_graph_symbol(g, "B") : c->b;
  const int64_t T = c->symbolic ? tj_graph_symbol(g, "T") : 0;
  const int64_t tq = c->symbolic ? T : c->tq, tk = c->symbolic ? T : c->tk;
  tj_value_t q = tj_graph_input(g, dt, 4, (int64_t[]){B, c->h, tq, c->d}, "q");
  tj_value_t k =
      tj_graph_input(g, dt, 4, (int64_t[]){B, c->hkv, tk, c->d}, "k");
  tj_value_t v =
      tj_graph_input(g, dt, 4, (int64_t[]){B, c->hkv, tk, c->d}, "v");
  tj_value_t m =
      c->mask ? tj_graph_input(g, TJ_DTYPE_BOOL, 2, (int64_t[]){tq, tk}, "m")
              : tj_value_none();
  tj_graph_output(g, tj_graph_attention(g, q, k, v, m, 0, c->causal), "y");
  tj_graph_t* joint = NULL;
  tj_status_t st = tj_graph_finalize(g);
  if (!st) st = tj_graph_grad(g, 0, NULL, 3, (int32_t[]){0, 1, 2}, &joint);
  CHECK_OK(st);
  tj_graph_destroy(g);
  return joint;
}

// Runs |joint| (on the reference in f64 when |exe| is NULL) on the values
// |in| (q, k, v, mask, dy), rounded to |dt|; the 4 outputs as f64.
static void run(const case_t* c, tj_graph_t* joint, tj_executable_t* exe,
                tj_dtype_t dt, int64_t b, int64_t tq, int64_t tk,
                double* const* in, double** out) {
  int64_t dims[5][4] = {{b, c->h, tq, c->d},
                        {b, c->hkv, tk, c->d},
                        {b, c->hkv, tk, c->d},
                        {tq, tk, 0, 0},
                        {b, c->h, tq, c->d}};
  static const int kOut[4] = {4, 0, 1, 2};
  tj_tensor_t ins[5], outs[4];
  void* bufs[9];
  int nin = 0;
  for (int i = 0; i < 5; ++i) {
    if (i == 3 && !c->mask) continue;
    const int r = i == 3 ? 2 : 4;
    const tj_dtype_t et = i == 3 ? TJ_DTYPE_BOOL : dt;
    int64_t n = 1;
    for (int a = 0; a < r; ++a) n *= dims[i][a];
    bufs[nin] = malloc((size_t)n * tj_dtype_size(et));
    for (int64_t e = 0; e < n; ++e) tj_store_f64(et, bufs[nin], e, in[i][e]);
    ins[nin] = tj_tensor_make(bufs[nin], et, r, dims[i]);
    ++nin;
  }
  for (int o = 0; o < 4; ++o) {
    const int64_t* dd = dims[kOut[o]];
    const int64_t n = dd[0] * dd[1] * dd[2] * dd[3];
    bufs[nin + o] = calloc((size_t)n, tj_dtype_size(dt));
    outs[o] = tj_tensor_make(bufs[nin + o], dt, 4, dd);
  }
  if (exe)
    CHECK_OK(tj_executable_run(exe, ins, nin, outs, 4));
  else
    CHECK_OK(tj_reference_run(joint, ins, nin, outs, 4));
  for (int o = 0; o < 4; ++o) {
    const int64_t* dd = dims[kOut[o]];
    const int64_t n = dd[0] * dd[1] * dd[2] * dd[3];
    for (int64_t e = 0; e < n; ++e)
      out[o][e] = tj_load_f64(dt, bufs[nin + o], e);
  }
  for (int i = 0; i < nin + 4; ++i) free(bufs[i]);
}

// The kernels of |joint| compiled for CUDA in |ctx|'s settings (-1: the
// compile failed).
static int kernels_in(tj_context_t* ctx, const case_t* c, tj_dtype_t dt) {
  tj_context_t* saved = g_ctx;
  g_ctx = ctx;
  tj_graph_t* joint = build(c, dt);
  g_ctx = saved;
  if (!joint) return -1;
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.target = TJ_TARGET_CUDA;
  opts.cache_dir = "";
  tj_executable_t* exe = NULL;
  int n = -1;
  CHECK_OK(tj_compile(joint, &opts, &exe));
  if (exe) {
    tj_executable_stats_t stats;
    memset(&stats, 0, sizeof(stats));
    tj_executable_stats(exe, &stats);
    n = stats.num_kernels;
  }
  tj_executable_release(exe);
  tj_graph_destroy(joint);
  return n;
}

static void run_case(const case_t* c, tj_dtype_t dt) {
  tj_graph_t* joint = build(c, dt);
  tj_graph_t* ref = build(c, TJ_DTYPE_F64);
  CHECK(joint != NULL && ref != NULL);
  tj_executable_t* exe = NULL;
  if (joint) {
    tj_compile_options_t opts;
    tj_compile_options_initialize(&opts);
    opts.target = TJ_TARGET_CUDA;
    opts.verify_each = true;
    opts.cache_dir = "";
    CHECK_OK(tj_compile(joint, &opts, &exe));
  }
  if (exe) {
    tj_executable_stats_t stats;
    memset(&stats, 0, sizeof(stats));
    tj_executable_stats(exe, &stats);
    CHECK_EQ_INT(0, stats.num_graph_breaks);
    printf("# %s %s: %d kernels\n", c->name, tj_dtype_name(dt),
           stats.num_kernels);
    // The fused step: forward (with lse, lsefwd), delta, dq, dkv and [dk |
    // dv]'s slices; with TJ_ATTENTION_LSE=separate one more, the lse's.
    if (c->fused && dt != TJ_DTYPE_F32) {
      const bool sep = g_ctx == g_sep_ctx;
      CHECK(stats.num_kernels <= (sep ? 8 : 7));
      if (!sep)
        CHECK_EQ_INT(stats.num_kernels + 1, kernels_in(g_sep_ctx, c, dt));
    }
  }
  for (int bi = 0; bi < (c->symbolic ? 2 : 1) && exe && ref; ++bi) {
    const int64_t b = bi ? c->b2 : c->b;
    const int64_t tq = bi ? c->t2 : c->tq, tk = bi ? c->t2 : c->tk;
    const int64_t sizes[5] = {b * c->h * tq * c->d, b * c->hkv * tk * c->d,
                              b * c->hkv * tk * c->d, tq * tk,
                              b * c->h * tq * c->d};
    double* in[5];
    for (int i = 0; i < 5; ++i) {
      in[i] = malloc((size_t)sizes[i] * sizeof(double));
      for (int64_t e = 0; e < sizes[i]; ++e) {
        // A mask's first row all false: a fully masked query row.
        in[i][e] =
            i == 3 ? (double)(e >= tk && uniform(0, 1) < 0.85) : uniform(-1, 1);
      }
    }
    // The reference sees the inputs as rounded to |dt|.
    for (int i = 0; i < 5; ++i) {
      if (i == 3) continue;
      for (int64_t e = 0; e < sizes[i]; ++e) {
        uint64_t tmp = 0;
        tj_store_f64(dt, &tmp, 0, in[i][e]);
        in[i][e] = tj_load_f64(dt, &tmp, 0);
      }
    }
    static const int kOut[4] = {4, 0, 1, 2};
    double *want[4], *got[4];
    for (int o = 0; o < 4; ++o) {
      want[o] = malloc((size_t)sizes[kOut[o]] * sizeof(double));
      got[o] = malloc((size_t)sizes[kOut[o]] * sizeof(double));
    }
    run(c, ref, NULL, TJ_DTYPE_F64, b, tq, tk, in, want);
    run(c, joint, exe, dt, b, tq, tk, in, got);
    for (int o = 0; o < 4; ++o) {
      const int64_t n = sizes[kOut[o]];
      double mx = 0;
      for (int64_t e = 0; e < n; ++e) mx = fmax(mx, fabs(want[o][e]));
      int wrong = 0;
      for (int64_t e = 0; e < n; ++e) {
        const double tol = dt == TJ_DTYPE_F32 ? 2e-4 + 2e-4 * fabs(want[o][e])
                                              : 2e-2 * (mx > 1 ? mx : 1);
        if (!(fabs(got[o][e] - want[o][e]) <= tol) && wrong++ < 3)
          fprintf(stderr,
                  "%s %s B=%lld T=%lld: output %d [%lld] %.6g vs %.6g\n",
                  c->name, tj_dtype_name(dt), (long long)b, (long long)tq, o,
                  (long long)e, got[o][e], want[o][e]);
      }
      CHECK_EQ_INT(0, wrong);
    }
    for (int i = 0; i < 5; ++i) free(in[i]);
    for (int o = 0; o < 4; ++o) {
      free(want[o]);
      free(got[o]);
    }
  }
  tj_executable_release(exe);
  tj_graph_destroy(joint);
  tj_graph_destroy(ref);
}

TEST(grads_bf16) {
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i)
    run_case(&kCases[i], TJ_DTYPE_BF16);
}

TEST(grads_f16) {
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i)
    if (kCases[i].fused) run_case(&kCases[i], TJ_DTYPE_F16);
}

TEST(grads_f32) {
  run_case(&kCases[0], TJ_DTYPE_F32);
  run_case(&kCases[2], TJ_DTYPE_F32);
}

// The step as before lsefwd: attention_lse a kernel of its own.
TEST(grads_bf16_lse_separate) {
  tj_context_t* saved = g_ctx;
  g_ctx = g_sep_ctx;
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i)
    if (kCases[i].fused) run_case(&kCases[i], TJ_DTYPE_BF16);
  g_ctx = saved;
}

// fa3bwd: the fused cases under the TJ_NVPTX_ATTENTION settings the
// default (wgmma on sm_90a: grads_bf16, grads_f16) does not run: mma (the
// mma.sync backward) in bf16 and f16, wgmma-wide (dq's 128-key steps at d
// 64) in bf16.
TEST(grads_mma_and_wide) {
  tj_context_t* saved = g_ctx;
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i) {
    if (!kCases[i].fused) continue;
    g_ctx = g_mma_ctx;
    run_case(&kCases[i], TJ_DTYPE_BF16);
    run_case(&kCases[i], TJ_DTYPE_F16);
    g_ctx = g_wide_ctx;
    run_case(&kCases[i], TJ_DTYPE_BF16);
  }
  g_ctx = saved;
}

// |c| compiled for CUDA in |ctx|'s settings (NULL: it failed); the joint
// graph in |*out_joint|.
static tj_executable_t* compile_in(tj_context_t* ctx, const case_t* c,
                                   tj_dtype_t dt, tj_graph_t** out_joint) {
  tj_context_t* saved = g_ctx;
  g_ctx = ctx;
  *out_joint = build(c, dt);
  g_ctx = saved;
  if (!*out_joint) return NULL;
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.target = TJ_TARGET_CUDA;
  opts.cache_dir = "";
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(*out_joint, &opts, &exe));
  return exe;
}

// fa3bwd2: steps long enough for the backward's rings of buffers to wrap
// many times (T 1024: 16 query tiles a dkv block, 16 key tiles a dq
// block; at d 128 step i's last wgmmas run on under step i + 1, reading
// a third buffer): the default kernels (wgmma on sm_90a) give the same
// bits on a second run, and the mma.sync backward's gradients
// (TJ_NVPTX_ATTENTION=mma, whose buffers never wrap under a running
// product) within the bf16 bound of the cases above. No f64 reference at
// this size: the two kernels check each other. The same for
// TJ_NVPTX_ATTENTION=wgmma-pingpong's kernels.
TEST(long_steps_deterministic) {
  static const case_t kLong[] = {
      {"d128_long", 1, 4, 4, 1024, 1024, 128, false, false, false, 0, 0, true},
      {"d128_long_causal_gqa", 1, 4, 2, 1024, 1024, 128, true, false, false, 0,
       0, true},
      {"d64_long_causal", 1, 4, 4, 1024, 1024, 64, true, false, false, 0, 0,
       true},
  };
  for (size_t ci = 0; ci < sizeof(kLong) / sizeof(kLong[0]); ++ci) {
    const case_t* c = &kLong[ci];
    for (int pi = 0; pi < 2; ++pi) {
      tj_graph_t *joint = NULL, *joint_mma = NULL;
      tj_executable_t* exe =
          compile_in(pi ? g_pingpong_ctx : g_ctx, c, TJ_DTYPE_BF16, &joint);
      tj_executable_t* mma =
          compile_in(g_mma_ctx, c, TJ_DTYPE_BF16, &joint_mma);
      CHECK(exe != NULL && mma != NULL);
      const int64_t sizes[5] = {
          c->b * c->h * c->tq * c->d, c->b * c->hkv * c->tk * c->d,
          c->b * c->hkv * c->tk * c->d, 0, c->b * c->h * c->tq * c->d};
      static const int kOut[4] = {4, 0, 1, 2};
      double *in[5], *got[2][4], *want[4];
      for (int i = 0; i < 5; ++i) {
        in[i] = malloc((size_t)(sizes[i] ? sizes[i] : 1) * sizeof(double));
        for (int64_t e = 0; e < sizes[i]; ++e) in[i][e] = uniform(-1, 1);
      }
      for (int o = 0; o < 4; ++o) {
        const size_t n = (size_t)sizes[kOut[o]] * sizeof(double);
        got[0][o] = malloc(n);
        got[1][o] = malloc(n);
        want[o] = malloc(n);
      }
      if (exe && mma) {
        for (int r = 0; r < 2; ++r)
          run(c, joint, exe, TJ_DTYPE_BF16, c->b, c->tq, c->tk, in, got[r]);
        run(c, joint_mma, mma, TJ_DTYPE_BF16, c->b, c->tq, c->tk, in, want);
        for (int o = 0; o < 4; ++o) {
          const int64_t n = sizes[kOut[o]];
          double mx = 0;
          for (int64_t e = 0; e < n; ++e) mx = fmax(mx, fabs(want[o][e]));
          const double tol = 2e-2 * (mx > 1 ? mx : 1);
          int64_t differ = 0, wrong = 0;
          for (int64_t e = 0; e < n; ++e) {
            differ += memcmp(&got[0][o][e], &got[1][o][e], sizeof(double)) != 0;
            if (!(fabs(got[0][o][e] - want[o][e]) <= tol) && wrong++ < 3)
              fprintf(stderr,
                      "%s%s: output %d [%lld] %.6g vs mma.sync's %.6g\n",
                      c->name, pi ? " pingpong" : "", o, (long long)e,
                      got[0][o][e], want[o][e]);
          }
          CHECK_EQ_INT(0, differ);
          CHECK_EQ_INT(0, wrong);
          CHECK(mx > 0);  // not a vacuous comparison
        }
      }
      for (int i = 0; i < 5; ++i) free(in[i]);
      for (int o = 0; o < 4; ++o) {
        free(got[0][o]);
        free(got[1][o]);
        free(want[o]);
      }
      tj_executable_release(exe);
      tj_executable_release(mma);
      tj_graph_destroy(joint);
      tj_graph_destroy(joint_mma);
    }
  }
}

// lsefwd: y = attention(q, k, v) and lse = attention_lse(q, k) of |c| (no
// mask) as the outputs of one graph, built in |ctx|.
static tj_graph_t* build_y_lse(tj_context_t* ctx, const case_t* c,
                               tj_dtype_t dt) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(ctx, c->name, &g)) return NULL;
  tj_value_t q =
      tj_graph_input(g, dt, 4, (int64_t[]){c->b, c->h, c->tq, c->d}, "q");
  tj_value_t k =
      tj_graph_input(g, dt, 4, (int64_t[]){c->b, c->hkv, c->tk, c->d}, "k");
  tj_value_t v =
      tj_graph_input(g, dt, 4, (int64_t[]){c->b, c->hkv, c->tk, c->d}, "v");
  tj_graph_output(
      g, tj_graph_attention(g, q, k, v, tj_value_none(), 0, c->causal), "y");
  tj_graph_output(
      g, tj_graph_attention_lse(g, q, k, tj_value_none(), 0, c->causal), "lse");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static void run_y_lse(tj_context_t* ctx, const case_t* c, tj_dtype_t dt) {
  tj_graph_t* g = build_y_lse(ctx, c, dt);
  tj_graph_t* ref = build_y_lse(g_ctx, c, TJ_DTYPE_F64);
  CHECK(g != NULL && ref != NULL);
  if (!g || !ref) {
    tj_graph_destroy(g);
    tj_graph_destroy(ref);
    return;
  }
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.target = TJ_TARGET_CUDA;
  opts.verify_each = true;
  opts.cache_dir = "";
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  if (exe) {
    tj_executable_stats_t stats;
    memset(&stats, 0, sizeof(stats));
    tj_executable_stats(exe, &stats);
    CHECK_EQ_INT(0, stats.num_graph_breaks);
    CHECK_EQ_INT(1, stats.num_kernels);
  }
  const int64_t nq = c->b * c->h * c->tq * c->d;
  const int64_t nk = c->b * c->hkv * c->tk * c->d;
  const int64_t nl = c->b * c->h * c->tq;
  const int64_t qd[4] = {c->b, c->h, c->tq, c->d};
  const int64_t kd[4] = {c->b, c->hkv, c->tk, c->d};
  const int64_t n_in[3] = {nq, nk, nk};
  const tj_dtype_t lt = TJ_DTYPE_F32;  // tj_attention_lse_dtype of f16/bf16
  void* ins_h[3];
  void* ins_r[3];
  tj_tensor_t in_h[3], in_r[3];
  for (int i = 0; i < 3; ++i) {
    ins_h[i] = malloc((size_t)n_in[i] * tj_dtype_size(dt));
    ins_r[i] = malloc((size_t)n_in[i] * sizeof(double));
    for (int64_t e = 0; e < n_in[i]; ++e) {
      tj_store_f64(dt, ins_h[i], e, uniform(-2, 2));
      ((double*)ins_r[i])[e] = tj_load_f64(dt, ins_h[i], e);
    }
    in_h[i] = tj_tensor_make(ins_h[i], dt, 4, i ? kd : qd);
    in_r[i] = tj_tensor_make(ins_r[i], TJ_DTYPE_F64, 4, i ? kd : qd);
  }
  void* y = calloc((size_t)nq, tj_dtype_size(dt));
  float* lse = calloc((size_t)nl, sizeof(float));
  double* y_r = calloc((size_t)nq, sizeof(double));
  double* lse_r = calloc((size_t)nl, sizeof(double));
  tj_tensor_t out_h[2] = {tj_tensor_make(y, dt, 4, qd),
                          tj_tensor_make(lse, lt, 3, qd)};
  tj_tensor_t out_r[2] = {tj_tensor_make(y_r, TJ_DTYPE_F64, 4, qd),
                          tj_tensor_make(lse_r, TJ_DTYPE_F64, 3, qd)};
  if (exe) CHECK_OK(tj_executable_run(exe, in_h, 3, out_h, 2));
  CHECK_OK(tj_reference_run(ref, in_r, 3, out_r, 2));
  double mx = 0;
  for (int64_t e = 0; e < nq; ++e) mx = fmax(mx, fabs(y_r[e]));
  int wrong = 0;
  for (int64_t e = 0; exe && e < nq; ++e) {
    const double got = tj_load_f64(dt, y, e);
    if (!(fabs(got - y_r[e]) <= 2e-2 * (mx > 1 ? mx : 1)) && wrong++ < 3)
      fprintf(stderr, "%s %s y and lse: y[%lld] %.6g vs %.6g\n", c->name,
              tj_dtype_name(dt), (long long)e, got, y_r[e]);
  }
  for (int64_t e = 0; exe && e < nl; ++e) {
    if (!(fabs(lse[e] - lse_r[e]) <= 1e-3 + 1e-3 * fabs(lse_r[e])) &&
        wrong++ < 6)
      fprintf(stderr, "%s %s y and lse: lse[%lld] %.7g vs %.7g\n", c->name,
              tj_dtype_name(dt), (long long)e, (double)lse[e], lse_r[e]);
  }
  CHECK_EQ_INT(0, wrong);
  for (int i = 0; i < 3; ++i) {
    free(ins_h[i]);
    free(ins_r[i]);
  }
  free(y);
  free(lse);
  free(y_r);
  free(lse_r);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_graph_destroy(ref);
}

// lsefwd: values by name (a graph's inputs and outputs), as f64.
enum { kMaxNamed = 12 };
typedef struct named_t {
  char name[64];
  double* data;
  int64_t n;
} named_t;
typedef struct env_t {
  named_t v[kMaxNamed];
  int n;
} env_t;

static named_t* env_find(env_t* env, const char* name) {
  for (int i = 0; i < env->n; ++i)
    if (strcmp(env->v[i].name, name) == 0) return &env->v[i];
  return NULL;
}

static void env_add(env_t* env, const char* name, const double* data,
                    int64_t n) {
  CHECK(env->n < kMaxNamed);
  if (env->n >= kMaxNamed) return;
  named_t* x = &env->v[env->n++];
  snprintf(x->name, sizeof(x->name), "%s", name);
  x->n = n;
  x->data = malloc((size_t)(n ? n : 1) * sizeof(double));
  if (data) memcpy(x->data, data, (size_t)n * sizeof(double));
}

static void env_free(env_t* env) {
  for (int i = 0; i < env->n; ++i) free(env->v[i].data);
  env->n = 0;
}

// Runs |g| (constant sizes; on the reference when |exe| is NULL) on the
// values of |env| named as its inputs, in each input's dtype; adds its
// outputs to |env| under their names.
static void run_named(tj_graph_t* g, tj_executable_t* exe, env_t* env) {
  const int32_t nin = tj_graph_num_inputs(g), nout = tj_graph_num_outputs(g);
  tj_tensor_t ins[kMaxNamed], outs[kMaxNamed];
  void* bufs[2 * kMaxNamed];
  int64_t dims[2 * kMaxNamed][TJ_MAX_RANK];
  int64_t count[2 * kMaxNamed];
  CHECK(nin <= kMaxNamed && nout <= kMaxNamed);
  if (nin > kMaxNamed || nout > kMaxNamed) return;
  for (int32_t i = 0; i < nin + nout; ++i) {
    const tj_value_t val = i < nin ? tj_graph_input_value(g, i)
                                   : tj_graph_output_value(g, i - nin);
    const tj_dtype_t dt = tj_graph_value_dtype(g, val);
    const int32_t r = tj_graph_value_rank(g, val);
    tj_graph_value_dims(g, val, dims[i]);
    count[i] = 1;
    for (int32_t a = 0; a < r; ++a) count[i] *= dims[i][a];
    bufs[i] = calloc((size_t)(count[i] ? count[i] : 1), tj_dtype_size(dt));
    if (i < nin) {
      const named_t* src = env_find(env, tj_graph_input_name(g, i));
      CHECK(src != NULL && src->n == count[i]);
      for (int64_t e = 0; src && e < count[i]; ++e)
        tj_store_f64(dt, bufs[i], e, src->data[e]);
      ins[i] = tj_tensor_make(bufs[i], dt, r, dims[i]);
    } else {
      outs[i - nin] = tj_tensor_make(bufs[i], dt, r, dims[i]);
    }
  }
  if (exe)
    CHECK_OK(tj_executable_run(exe, ins, nin, outs, nout));
  else
    CHECK_OK(tj_reference_run(g, ins, nin, outs, nout));
  for (int32_t o = 0; o < nout; ++o) {
    const tj_dtype_t dt = tj_graph_value_dtype(g, tj_graph_output_value(g, o));
    env_add(env, tj_graph_output_name(g, o), NULL, count[nin + o]);
    named_t* x = &env->v[env->n - 1];
    for (int64_t e = 0; e < x->n; ++e)
      x->data[e] = tj_load_f64(dt, bufs[nin + o], e);
  }
  for (int32_t i = 0; i < nin + nout; ++i) free(bufs[i]);
}

static void run_split(const case_t* c, tj_dtype_t dt) {
  tj_graph_t* joint = build(c, dt);
  tj_graph_t* ref = build(c, TJ_DTYPE_F64);
  tj_graph_t *fwd = NULL, *bwd = NULL;
  if (joint) {
    tj_partition_options_t po;
    tj_partition_options_initialize(&po);
    po.save_attention_lse = true;
    CHECK_OK(tj_graph_partition(joint, 3, 1, &po, &fwd, &bwd, NULL));
  }
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.target = TJ_TARGET_CUDA;
  opts.verify_each = true;
  opts.cache_dir = "";
  tj_executable_t *ef = NULL, *eb = NULL;
  if (fwd) CHECK_OK(tj_compile(fwd, &opts, &ef));
  if (bwd) CHECK_OK(tj_compile(bwd, &opts, &eb));
  if (ef && eb) {
    tj_executable_stats_t sf, sb;
    memset(&sf, 0, sizeof(sf));
    memset(&sb, 0, sizeof(sb));
    tj_executable_stats(ef, &sf);
    tj_executable_stats(eb, &sb);
    printf("# %s %s split, lse saved: %d + %d kernels\n", c->name,
           tj_dtype_name(dt), sf.num_kernels, sb.num_kernels);
    CHECK_EQ_INT(0, sf.num_graph_breaks + sb.num_graph_breaks);
    CHECK_EQ_INT(1, sf.num_kernels);
    // The joint step less its forward kernel: no lse kernel either.
    CHECK_EQ_INT(kernels_in(g_ctx, c, dt) - 1, sb.num_kernels);
  }
  if (ef && eb && ref) {
    // The inputs as rounded to |dt|; the f64 reference of the joint graph.
    env_t env = {0}, want = {0};
    for (int32_t i = 0; i < tj_graph_num_inputs(ref); ++i) {
      const tj_value_t val = tj_graph_input_value(ref, i);
      int64_t dims[TJ_MAX_RANK], n = 1;
      tj_graph_value_dims(ref, val, dims);
      for (int32_t a = 0; a < tj_graph_value_rank(ref, val); ++a) n *= dims[a];
      env_add(&env, tj_graph_input_name(ref, i), NULL, n);
      named_t* x = &env.v[env.n - 1];
      for (int64_t e = 0; e < n; ++e) {
        uint64_t tmp = 0;
        tj_store_f64(dt, &tmp, 0, uniform(-1, 1));
        x->data[e] = tj_load_f64(dt, &tmp, 0);
      }
      env_add(&want, x->name, x->data, n);
    }
    run_named(ref, NULL, &want);
    run_named(fwd, ef, &env);
    run_named(bwd, eb, &env);
    for (int32_t o = 0; o < tj_graph_num_outputs(bwd); ++o) {
      const char* name = tj_graph_output_name(bwd, o);
      named_t *a = env_find(&env, name), *w = env_find(&want, name);
      CHECK(a != NULL && w != NULL && a->n == w->n);
      if (!a || !w || a->n != w->n) continue;
      double mx = 0;
      for (int64_t e = 0; e < w->n; ++e) mx = fmax(mx, fabs(w->data[e]));
      int wrong = 0;
      for (int64_t e = 0; e < w->n; ++e)
        if (!(fabs(a->data[e] - w->data[e]) <= 2e-2 * (mx > 1 ? mx : 1)) &&
            wrong++ < 3)
          fprintf(stderr, "%s %s split: %s[%lld] %.6g vs %.6g\n", c->name,
                  tj_dtype_name(dt), name, (long long)e, a->data[e],
                  w->data[e]);
      CHECK_EQ_INT(0, wrong);
    }
    env_free(&env);
    env_free(&want);
  }
  tj_executable_release(ef);
  tj_executable_release(eb);
  tj_graph_destroy(fwd);
  tj_graph_destroy(bwd);
  tj_graph_destroy(joint);
  tj_graph_destroy(ref);
}

TEST(split_saves_lse) {
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i) {
    if (!kCases[i].fused || kCases[i].symbolic) continue;
    run_split(&kCases[i], TJ_DTYPE_BF16);
    run_split(&kCases[i], TJ_DTYPE_F16);
  }
}

TEST(forward_writes_lse) {
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i) {
    if (!kCases[i].fused) continue;
    run_y_lse(g_ctx, &kCases[i], TJ_DTYPE_BF16);
    run_y_lse(g_ctx, &kCases[i], TJ_DTYPE_F16);
    run_y_lse(g_mma_ctx, &kCases[i], TJ_DTYPE_BF16);
  }
}

// The tests named on the command line (all without one): a device call
// too short for the whole file runs the ones it needs.
static int g_argc;
static char** g_argv;
static bool wanted(const char* name) {
  if (g_argc < 2) return true;
  for (int i = 1; i < g_argc; ++i)
    if (strcmp(g_argv[i], name) == 0) return true;
  return false;
}
#define RUN_WANTED(name)               \
  do {                                 \
    if (wanted(#name)) RUN_TEST(name); \
  } while (0)

int main(int argc, char** argv) {
  g_argc = argc;
  g_argv = argv;
  CHECK_OK(tj_test_context_create(&g_ctx));
  if (tj_test_cuda_unsupported(g_ctx, NULL)) {
    tj_context_destroy(g_ctx);
    return TJ_TEST_EXIT_SKIP;
  }
  // Settings are read when a context is created.
  setenv("TJ_ATTENTION_LSE", "separate", 1);
  CHECK_OK(tj_test_context_create(&g_sep_ctx));
  unsetenv("TJ_ATTENTION_LSE");
  setenv("TJ_NVPTX_ATTENTION", "mma", 1);
  CHECK_OK(tj_test_context_create(&g_mma_ctx));
  setenv("TJ_NVPTX_ATTENTION", "wgmma-wide", 1);
  CHECK_OK(tj_test_context_create(&g_wide_ctx));
  setenv("TJ_NVPTX_ATTENTION", "wgmma-pingpong", 1);
  CHECK_OK(tj_test_context_create(&g_pingpong_ctx));
  unsetenv("TJ_NVPTX_ATTENTION");
  RUN_WANTED(grads_bf16);
  RUN_WANTED(grads_f16);
  RUN_WANTED(long_steps_deterministic);
  RUN_WANTED(grads_mma_and_wide);
  RUN_WANTED(forward_writes_lse);
  RUN_WANTED(grads_f32);
  RUN_WANTED(grads_bf16_lse_separate);
  RUN_WANTED(split_saves_lse);
  tj_context_destroy(g_pingpong_ctx);
  tj_context_destroy(g_wide_ctx);
  tj_context_destroy(g_mma_ctx);
  tj_context_destroy(g_sep_ctx);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
