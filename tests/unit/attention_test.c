// attention (issue 14, lib/ops.def): each case is run by a nested-loop
// oracle written here (two-pass softmax in double on the inputs as rounded
// to their dtype), by the reference interpreter and compiled for x86 at
// every ISA tier the host has (host, avx2, sse2) with no graph break.
// Tolerances, absolute + relative to the oracle: f32 1e-4 compiled and
// 1e-5 reference (double, rounded once); f16 2e-3 and bf16 1e-2 for both
// (one rounding of the output, f32 inside). Shapes: Tq != Tk, T not a
// multiple of any tile, D 64/80/128 and Dv != D, grouped-query heads
// (H / Hkv = 1, 2, 4, 8), two batch dims, causal with Tq < Tk and Tq > Tk,
// bool masks (with fully masked rows: 0) and additive ones, a non-default
// scale, and symbolic B, T and S: one executable run at two bindings.
//
// On x86 the op is one flash-attention kernel (issue 14, task flashx86:
// jit/emit_attention.c): every compiled case checks through the stats that
// the executable is that one kernel (the decomposition is at least three:
// two matmuls never share one). flash_matrix runs the kernel's edges:
// f32, bf16 and f16; D 1, 7, 64, 80, 128; T 1, 3, 17, 64, 65, 257 with
// Tq != Tk; masks with fully masked rows, causal both ways, grouped-query
// heads, and symbolic B, T and S at three bindings of one executable.
// flash_oom_sweep fails each allocation of a compile and run in turn.

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/dtype.h"
#include "tensorjit/tj_autodiff.h"
#include "tensorjit/tj_executable.h"
#include "tensorjit/tj_graph.h"
#include "tensorjit/tj_tensor.h"
#include "tests/unit/attention_cases.h"
#include "tests/unit/test.h"

enum { kMaxCtx = 3 };
static tj_context_t* g_ctx[kMaxCtx];
static const char* g_isa[kMaxCtx];
static int g_num_ctx;

static void run_case(const case_t* c, tj_dtype_t dt) {
  const double tol_c = dt == TJ_DTYPE_F32   ? 1e-4
                       : dt == TJ_DTYPE_F16 ? 2e-3
                                            : 1e-2;
  const double tol_r = dt == TJ_DTYPE_F32 ? 1e-5 : tol_c;
  const int runs = c->symbolic ? (c->b[2] ? 3 : 2) : 1;
  const int32_t r = c->nb + 3, o = c->nb - 1;
  // Per context (-1: the reference on the first context's graph) one graph
  // and one executable, run at each binding.
  for (int ci = -1; ci < g_num_ctx; ++ci) {
    tj_graph_t* g = build(g_ctx[ci < 0 ? 0 : ci], c, dt);
    CHECK(g != NULL);
    if (!g) continue;
    tj_executable_t* exe = NULL;
    if (ci >= 0) {
      tj_compile_options_t opts;
      tj_compile_options_initialize(&opts);
      opts.verify_each = true;
      opts.cache_dir = "";
      // Symbolic flash cases also run specialized programs (every size a
      // constant) from their second run of a shape on.
      if (c->symbolic && c->b[2]) {
        opts.specialize = TJ_SPECIALIZE_AFTER_N;
        opts.specialize_after = 1;
      }
      CHECK_OK(tj_compile(g, &opts, &exe));
      if (exe) {
        tj_executable_stats_t stats;
        memset(&stats, 0, sizeof(stats));
        tj_executable_stats(exe, &stats);
        if (stats.num_graph_breaks)
          fprintf(stderr, "%s: %d graph breaks on %s\n", c->name,
                  stats.num_graph_breaks, g_isa[ci]);
        CHECK_EQ_INT(0, stats.num_graph_breaks);
        // The fused kernel ran: the whole graph is one kernel.
        if (stats.num_kernels != 1)
          fprintf(stderr, "%s: %d kernels on %s\n", c->name, stats.num_kernels,
                  g_isa[ci]);
        CHECK_EQ_INT(1, stats.num_kernels);
      }
    }
    for (int run = 0; run < runs; ++run) {
      case_run_t x;
      case_run_make(c, dt, run, &x);
      const int64_t B = x.B, tq = x.tq, tk = x.tk, ny = x.ny;
      const double* want = x.want;
      const tj_tensor_t* ins = x.ins;
      void* got = calloc((size_t)(ny ? ny : 1), tj_dtype_size(dt));
      tj_tensor_t out = tj_tensor_make(got, dt, r, x.yd + 1 - o);
      const int32_t nin = x.nin;
      char what[96];
      if (ci < 0) {
        CHECK_OK(tj_reference_run(g, ins, nin, &out, 1));
        snprintf(what, sizeof(what), "reference, B=%lld T=%lld S=%lld",
                 (long long)B, (long long)tq, (long long)tk);
        CHECK(compare(what, c->name, dt, ny, want, got, tol_r));
      } else if (exe) {
        // Specializing cases: the generic run, then the specialized one.
        for (int rep = 0; rep < (c->symbolic && c->b[2] ? 2 : 1); ++rep) {
          memset(got, 0, (size_t)(ny ? ny : 1) * tj_dtype_size(dt));
          CHECK_OK(tj_executable_run(exe, ins, nin, &out, 1));
          snprintf(what, sizeof(what), "x86 %s%s, B=%lld T=%lld S=%lld",
                   g_isa[ci], rep ? " specialized" : "", (long long)B,
                   (long long)tq, (long long)tk);
          CHECK(compare(what, c->name, dt, ny, want, got, tol_c));
        }
      }
      free(got);
      case_run_free(&x);
    }
    if (exe && c->symbolic && c->b[2]) {
      tj_executable_stats_t stats;
      memset(&stats, 0, sizeof(stats));
      tj_executable_stats(exe, &stats);
      CHECK(stats.recompiles >= 3);  // one specialization per binding
    }
    tj_executable_release(exe);
    tj_graph_destroy(g);
  }
}

TEST(cases_f32) {
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i)
    run_case(&kCases[i], TJ_DTYPE_F32);
}

TEST(cases_half) {
  // The grouped-query, masked and symbolic cases in bf16 and f16.
  static const size_t picks[] = {1, 3, 4, 7};
  for (size_t i = 0; i < sizeof(picks) / sizeof(picks[0]); ++i) {
    run_case(&kCases[picks[i]], TJ_DTYPE_BF16);
    run_case(&kCases[picks[i]], TJ_DTYPE_F16);
  }
}

TEST(flash_matrix) {
  static const tj_dtype_t dts[] = {TJ_DTYPE_F32, TJ_DTYPE_BF16, TJ_DTYPE_F16};
  for (size_t i = 0; i < sizeof(kFlash) / sizeof(kFlash[0]); ++i)
    for (size_t d = 0; d < 3; ++d) run_case(&kFlash[i], dts[d]);
}

// The failing-allocator sweep over a compile and run of a causal, masked,
// grouped-query attention on x86 (the flash kernel's lowering, emission and
// launch), with the kernels in a warm disk cache so that each point is
// cheap: every failure is OUT_OF_MEMORY and nothing leaks.
static char g_oom_dir[64];

static tj_status_t flash_compile_run(tj_allocator_t allocator) {
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_test_sweep_context_create(allocator, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  s = tj_graph_create(ctx, "flash_oom", &g);
  if (!s) {
    int64_t T = tj_graph_symbol(g, "T");
    tj_value_t q =
        tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){1, 4, T, 8}, "q");
    tj_value_t k =
        tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){1, 2, 9, 8}, "k");
    tj_value_t v =
        tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){1, 2, 9, 8}, "v");
    tj_value_t m = tj_graph_input(g, TJ_DTYPE_BOOL, 2, (int64_t[]){T, 9}, "m");
    tj_graph_output(g, tj_graph_attention(g, q, k, v, m, 0, true), "y");
    s = tj_graph_finalize(g);
  }
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.cache_dir = g_oom_dir;
  opts.x86.num_threads = 1;
  if (!s) s = tj_compile(g, &opts, &exe);
  if (!s) {
    static float q[4 * 5 * 8], kv[2 * 9 * 8], y[4 * 5 * 8];
    static bool m[5 * 9];
    for (int i = 0; i < 4 * 5 * 8; ++i) q[i] = (float)(i % 7) * 0.1f;
    for (int i = 0; i < 2 * 9 * 8; ++i) kv[i] = (float)(i % 5) * 0.2f;
    for (int i = 0; i < 5 * 9; ++i) m[i] = i % 3 != 0;
    tj_tensor_t ins[4] = {
        tj_tensor_make(q, TJ_DTYPE_F32, 4, (int64_t[]){1, 4, 5, 8}),
        tj_tensor_make(kv, TJ_DTYPE_F32, 4, (int64_t[]){1, 2, 9, 8}),
        tj_tensor_make(kv, TJ_DTYPE_F32, 4, (int64_t[]){1, 2, 9, 8}),
        tj_tensor_make(m, TJ_DTYPE_BOOL, 2, (int64_t[]){5, 9})};
    tj_tensor_t out =
        tj_tensor_make(y, TJ_DTYPE_F32, 4, (int64_t[]){1, 4, 5, 8});
    s = tj_executable_run(exe, ins, 4, &out, 1);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(flash_oom_sweep) {
  snprintf(g_oom_dir, sizeof(g_oom_dir), "/tmp/tj_flash_oom_XXXXXX");
  CHECK(mkdtemp(g_oom_dir) != NULL);
  CHECK_OK(flash_compile_run(tj_allocator_system()));  // warms the cache
  CHECK(tj_test_oom_sweep("flash attention", flash_compile_run) > 0);
  tj_test_remove_tree(g_oom_dir);
}

static void expect_error(tj_graph_t* g, const char* needle) {
  tj_status_t st = tj_graph_status(g);
  CHECK(st != NULL);
  if (st) {
    if (!strstr(tj_status_message(st), needle))
      fprintf(stderr, "message: %s (want '%s')\n", tj_status_message(st),
              needle);
    CHECK(strstr(tj_status_message(st), needle) != NULL);
    CHECK(strstr(tj_status_message(st), "attention") != NULL);
    tj_status_free(st);
  }
}

typedef struct bad_t {
  int64_t q[4], k[4], v[4], m[4];
  int32_t mrank;
  tj_dtype_t kdt, mdt;
  double scale;
  const char* needle;
} bad_t;

// Shape inference: symbolic dims carried through; errors name the op.
TEST(inference_and_errors) {
  tj_graph_t* g;
  CHECK_OK(tj_graph_create(g_ctx[0], "infer", &g));
  int64_t B = tj_graph_symbol(g, "B"), T = tj_graph_symbol(g, "T"),
          S = tj_graph_symbol(g, "S");
  tj_value_t q =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){B, 8, T, 64}, "q");
  tj_value_t k =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){1, 2, S, 64}, "k");
  tj_value_t v =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){B, 2, S, 32}, "v");
  tj_value_t y = tj_graph_attention(g, q, k, v, tj_value_none(), 0, true);
  int64_t dims[TJ_MAX_RANK];
  CHECK_EQ_INT(4, tj_graph_value_rank(g, y));
  tj_graph_value_dims(g, y, dims);
  CHECK(dims[0] == B && dims[1] == 8 && dims[2] == T && dims[3] == 32);
  CHECK_OK(tj_graph_status(g));
  tj_graph_destroy(g);

  static const bad_t kBad[] = {
      {{1, 4, 5, 8},
       {1, 4, 5, 6},
       {1, 4, 5, 8},
       {0},
       0,
       TJ_DTYPE_F32,
       TJ_DTYPE_F32,
       0,
       "head dims differ: 8 vs 6"},
      {{1, 6, 5, 8},
       {1, 4, 5, 8},
       {1, 4, 5, 8},
       {0},
       0,
       TJ_DTYPE_F32,
       TJ_DTYPE_F32,
       0,
       "not a multiple of k and v's 4"},
      {{1, 4, 5, 8},
       {1, 4, 5, 8},
       {1, 2, 5, 8},
       {0},
       0,
       TJ_DTYPE_F32,
       TJ_DTYPE_F32,
       0,
       "head counts differ"},
      {{1, 4, 5, 8},
       {1, 4, 6, 8},
       {1, 4, 5, 8},
       {0},
       0,
       TJ_DTYPE_F32,
       TJ_DTYPE_F32,
       0,
       "k and v lengths differ"},
      {{1, 4, 5, 8},
       {1, 4, 6, 8},
       {1, 4, 6, 8},
       {5, 5},
       2,
       TJ_DTYPE_F32,
       TJ_DTYPE_F32,
       0,
       "does not broadcast"},
      {{1, 4, 5, 8},
       {1, 4, 6, 8},
       {1, 4, 6, 8},
       {5, 6},
       2,
       TJ_DTYPE_F32,
       TJ_DTYPE_I32,
       0,
       "must be bool or f32"},
      {{1, 4, 5, 8},
       {1, 4, 6, 8},
       {1, 4, 6, 8},
       {0},
       0,
       TJ_DTYPE_F16,
       TJ_DTYPE_F32,
       0,
       "dtype mismatch"},
      {{1, 4, 5, 8},
       {1, 4, 6, 8},
       {1, 4, 6, 8},
       {0},
       0,
       TJ_DTYPE_F32,
       TJ_DTYPE_F32,
       INFINITY,
       "must be finite"},
  };
  for (size_t i = 0; i < sizeof(kBad) / sizeof(kBad[0]); ++i) {
    const bad_t* b = &kBad[i];
    CHECK_OK(tj_graph_create(g_ctx[0], "bad", &g));
    q = tj_graph_input(g, TJ_DTYPE_F32, 4, b->q, "q");
    k = tj_graph_input(g, b->kdt, 4, b->k, "k");
    v = tj_graph_input(g, TJ_DTYPE_F32, 4, b->v, "v");
    tj_value_t m = b->mrank ? tj_graph_input(g, b->mdt, b->mrank, b->m, "m")
                            : tj_value_none();
    tj_graph_attention(g, q, k, v, m, b->scale, false);
    expect_error(g, b->needle);
    tj_graph_destroy(g);
  }
  // Rank below 3, and a symbolic head dim.
  CHECK_OK(tj_graph_create(g_ctx[0], "rank", &g));
  q = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){5, 8}, "q");
  tj_graph_attention(g, q, q, q, tj_value_none(), 0, false);
  expect_error(g, "rank >= 3");
  tj_graph_destroy(g);
  CHECK_OK(tj_graph_create(g_ctx[0], "symd", &g));
  int64_t D = tj_graph_symbol(g, "D");
  q = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){2, 5, D}, "q");
  tj_graph_attention(g, q, q, q, tj_value_none(), 0, false);
  expect_error(g, "must be constants");
  tj_graph_destroy(g);
}

// The VJP: grouped-query heads, causal and an additive mask (with -inf
// entries), symbolic B. In f64 on the reference against central
// differences of L = sum(y * r) (1e-6 absolute + relative); in f32
// compiled at every tier against the f64 reference's gradients (1e-4).
enum { kGB = 2, kGH = 4, kGHkv = 2, kGTq = 3, kGTk = 5, kGD = 4, kGDv = 3 };

static tj_graph_t* grad_graph(tj_context_t* ctx, tj_dtype_t dt) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(ctx, "attn_grad", &g)) return NULL;
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t q = tj_graph_input(g, dt, 4, (int64_t[]){B, kGH, kGTq, kGD}, "q");
  tj_value_t k =
      tj_graph_input(g, dt, 4, (int64_t[]){B, kGHkv, kGTk, kGD}, "k");
  tj_value_t v =
      tj_graph_input(g, dt, 4, (int64_t[]){B, kGHkv, kGTk, kGDv}, "v");
  tj_value_t m = tj_graph_input(g, dt, 2, (int64_t[]){kGTq, kGTk}, "m");
  tj_graph_output(g, tj_graph_attention(g, q, k, v, m, 0.7, true), "y");
  tj_graph_t* joint = NULL;
  tj_status_t st = tj_graph_finalize(g);
  if (!st) st = tj_graph_grad(g, 0, NULL, 0, NULL, &joint);
  CHECK_OK(st);
  tj_graph_destroy(g);
  return joint;
}

static const int64_t kGDims[5][4] = {{kGB, kGH, kGTq, kGD},
                                     {kGB, kGHkv, kGTk, kGD},
                                     {kGB, kGHkv, kGTk, kGDv},
                                     {kGTq, kGTk, 1, 1},
                                     {kGB, kGH, kGTq, kGDv}};
static const int32_t kGRank[5] = {4, 4, 4, 2, 4};

static int64_t gnumel(int i) {
  int64_t n = 1;
  for (int32_t d = 0; d < kGRank[i]; ++d) n *= kGDims[i][d];
  return n;
}

// Runs |joint| (reference or |exe|) on f64 |in| (converted to |dt|): y
// and the four gradients, as f64, into |out|.
static void run_joint(tj_graph_t* joint, tj_executable_t* exe, tj_dtype_t dt,
                      double* const* in, double** out) {
  void* bufs[10];
  tj_tensor_t ins[5], outs[5];
  static const int kOutShape[5] = {4, 0, 1, 2, 3};  // y, gq, gk, gv, gm
  for (int i = 0; i < 5; ++i) {
    int64_t n = gnumel(i);
    bufs[i] = malloc((size_t)n * tj_dtype_size(dt));
    for (int64_t e = 0; e < n; ++e) tj_store_f64(dt, bufs[i], e, in[i][e]);
    ins[i] = tj_tensor_make(bufs[i], dt, kGRank[i], kGDims[i]);
    int s = kOutShape[i];
    bufs[5 + i] = calloc((size_t)gnumel(s), tj_dtype_size(dt));
    outs[i] = tj_tensor_make(bufs[5 + i], dt, kGRank[s], kGDims[s]);
  }
  if (exe)
    CHECK_OK(tj_executable_run(exe, ins, 5, outs, 5));
  else
    CHECK_OK(tj_reference_run(joint, ins, 5, outs, 5));
  for (int i = 0; i < 5; ++i) {
    int s = kOutShape[i];
    for (int64_t e = 0; e < gnumel(s); ++e)
      out[i][e] = tj_load_f64(dt, bufs[5 + i], e);
    free(bufs[i]);
    free(bufs[5 + i]);
  }
}

TEST(vjp) {
  tj_graph_t* joint = grad_graph(g_ctx[0], TJ_DTYPE_F64);
  CHECK(joint != NULL);
  if (!joint) return;
  double* in[5];
  double* got[5];
  double* probe[5];
  static const int kOutShape[5] = {4, 0, 1, 2, 3};
  g_rng = 77;
  for (int i = 0; i < 5; ++i) {
    in[i] = malloc((size_t)gnumel(i) * sizeof(double));
    for (int64_t e = 0; e < gnumel(i); ++e) in[i][e] = uniform(-1, 1);
    got[i] = malloc((size_t)gnumel(kOutShape[i]) * sizeof(double));
    probe[i] = malloc((size_t)gnumel(kOutShape[i]) * sizeof(double));
  }
  in[3][2] = -INFINITY;  // one masked key besides causal
  run_joint(joint, NULL, TJ_DTYPE_F64, in, got);
  // Central differences of L = sum(y * r), r = in[4] (the tangent).
  const double h = 1e-6;
  int bad = 0;
  for (int i = 0; i < 4; ++i) {
    for (int64_t e = 0; e < gnumel(i); ++e) {
      if (i == 3 && isinf(in[3][e])) continue;
      const double x0 = in[i][e];
      double l[2];
      for (int side = 0; side < 2; ++side) {
        in[i][e] = x0 + (side ? h : -h);
        run_joint(joint, NULL, TJ_DTYPE_F64, in, probe);
        l[side] = 0;
        for (int64_t j = 0; j < gnumel(4); ++j)
          l[side] += probe[0][j] * in[4][j];
      }
      in[i][e] = x0;
      const double fd = (l[1] - l[0]) / (2 * h), an = got[1 + i][e];
      if (!(fabs(fd - an) <= 1e-6 + 1e-6 * fabs(fd)) && bad++ < 4)
        fprintf(stderr, "vjp: operand %d [%lld] analytic %.12g fd %.12g\n", i,
                (long long)e, an, fd);
    }
  }
  CHECK_EQ_INT(0, bad);
  tj_graph_destroy(joint);
  // f32, compiled at every tier, against the f64 reference's gradients.
  for (int ci = 0; ci < g_num_ctx; ++ci) {
    joint = grad_graph(g_ctx[ci], TJ_DTYPE_F32);
    CHECK(joint != NULL);
    if (!joint) continue;
    tj_compile_options_t opts;
    tj_compile_options_initialize(&opts);
    opts.verify_each = true;
    opts.cache_dir = "";
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(joint, &opts, &exe));
    if (exe) {
      run_joint(joint, exe, TJ_DTYPE_F32, in, probe);
      for (int i = 0; i < 5; ++i) {
        int64_t n = gnumel(kOutShape[i]);
        int wrong = 0;
        for (int64_t e = 0; e < n; ++e)
          if (!(fabs(probe[i][e] - got[i][e]) <=
                1e-4 + 1e-4 * fabs(got[i][e])) &&
              wrong++ < 2)
            fprintf(stderr, "vjp x86 %s: output %d [%lld] %.9g vs %.9g\n",
                    g_isa[ci], i, (long long)e, probe[i][e], got[i][e]);
        CHECK_EQ_INT(0, wrong);
      }
      tj_executable_release(exe);
    }
    tj_graph_destroy(joint);
  }
  for (int i = 0; i < 5; ++i) {
    free(in[i]);
    free(got[i]);
    free(probe[i]);
  }
}

int main(void) {
  g_num_ctx = tj_test_tier_contexts(g_ctx, g_isa);
  RUN_TEST(inference_and_errors);
  RUN_TEST(cases_f32);
  RUN_TEST(cases_half);
  RUN_TEST(flash_matrix);
  RUN_TEST(flash_oom_sweep);
  RUN_TEST(vjp);
  for (int i = 0; i < g_num_ctx; ++i) tj_context_destroy(g_ctx[i]);
  TEST_MAIN_END();
}
