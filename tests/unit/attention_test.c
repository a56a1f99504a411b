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
#include "tests/unit/test.h"

enum { kMaxCtx = 3 };
static tj_context_t* g_ctx[kMaxCtx];
static const char* g_isa[kMaxCtx];
static int g_num_ctx;

typedef enum mask_e {
  M_NONE,
  M_BOOL_TT,     // bool [Tq, Tk], row 0 fully masked
  M_ADD_B1TT,    // additive [B, 1, Tq, Tk]
  M_BOOL_FULL,   // bool [B..., H, Tq, Tk]
  M_ADD_NEGINF,  // additive [Tq, Tk] of 0 and -inf (row 1 all -inf)
} mask_t;

typedef struct case_t {
  const char* name;
  int32_t nb;    // batch dims: 1 ([B]) or 2 ([2, B])
  int64_t b[3];  // B per run (two or three runs when symbolic)
  int64_t tq[3], tk[3];
  int64_t h, hkv, d, dv;
  bool causal;
  mask_t mask;
  double scale;  // 0: default
  bool symbolic;
} case_t;

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double uniform(double lo, double hi) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * (double)(g_rng >> 11) / 9007199254740992.0;
}

// A dense tensor of |dtype| filled from uniform(lo, hi) (bool: 70 % true).
static void* fill(tj_dtype_t dtype, int64_t n, double lo, double hi) {
  size_t es = tj_dtype_size(dtype);
  unsigned char* p = malloc((size_t)(n ? n : 1) * es);
  for (int64_t i = 0; i < n; ++i) {
    double v = dtype == TJ_DTYPE_BOOL ? (uniform(0, 1) < 0.7) : uniform(lo, hi);
    tj_store_f64(dtype, p, i, v);
  }
  return p;
}

static double at(tj_dtype_t dtype, const void* p, int64_t i) {
  return tj_load_f64(dtype, p, i);
}

// The oracle: y [batch, H, Tq, Dv] from the definition (two passes).
static void oracle(const case_t* c, tj_dtype_t dt, int64_t batch, int64_t tq,
                   int64_t tk, const void* q, const void* k, const void* v,
                   const void* m, double* y) {
  const int64_t g = c->h / c->hkv;
  const double scale = c->scale ? c->scale : 1.0 / sqrt((double)c->d);
  double* s = malloc((size_t)(tk ? tk : 1) * sizeof(double));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < c->h; ++h)
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t hk = h / g;
        double mx = -INFINITY;
        for (int64_t j = 0; j < tk; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < c->d; ++e)
            dot += at(dt, q, ((b * c->h + h) * tq + i) * c->d + e) *
                   at(dt, k, ((b * c->hkv + hk) * tk + j) * c->d + e);
          double x = dot * scale;
          bool keep = !(c->causal && j > i);
          switch (c->mask) {
            case M_BOOL_TT:
              keep = keep && at(TJ_DTYPE_BOOL, m, i * tk + j) != 0;
              break;
            case M_BOOL_FULL:
              keep = keep && at(TJ_DTYPE_BOOL, m,
                                ((b * c->h + h) * tq + i) * tk + j) != 0;
              break;
            case M_ADD_B1TT:
              x += at(dt, m, (b * tq + i) * tk + j);
              break;
            case M_ADD_NEGINF:
              x += at(dt, m, i * tk + j);
              break;
            case M_NONE:
              break;
          }
          s[j] = keep ? x : -INFINITY;
          if (s[j] > mx) mx = s[j];
        }
        double sum = 0;
        for (int64_t j = 0; j < tk; ++j)
          sum += mx == -INFINITY ? 0 : exp(s[j] - mx);
        for (int64_t e = 0; e < c->dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < tk && sum > 0; ++j)
            acc += exp(s[j] - mx) / sum *
                   at(dt, v, ((b * c->hkv + hk) * tk + j) * c->dv + e);
          y[((b * c->h + h) * tq + i) * c->dv + e] = acc;
        }
      }
  free(s);
}

static bool compare(const char* what, const char* name, tj_dtype_t dt,
                    int64_t n, const double* want, const void* got,
                    double tol) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    double g = at(dt, got, i), w = want[i];
    if (!(fabs(g - w) <= tol + tol * fabs(w))) {
      if (bad++ < 3)
        fprintf(stderr, "%s %s (%s): [%lld] got %.9g want %.9g\n", name, what,
                tj_dtype_name(dt), (long long)i, g, w);
    }
  }
  return bad == 0;
}

// Builds the case's graph; dims symbolic where asked, else run 0's.
static tj_graph_t* build(tj_context_t* ctx, const case_t* c, tj_dtype_t dt) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(ctx, c->name, &g)) return NULL;
  int64_t B = c->b[0], T = c->tq[0], S = c->tk[0];
  if (c->symbolic) {
    B = tj_graph_symbol(g, "B");
    T = tj_graph_symbol(g, "T");
    S = tj_graph_symbol(g, "S");
  }
  int32_t r = c->nb + 3, o = c->nb - 1;
  int64_t qd[5] = {2, B, c->h, T, c->d}, kd[5] = {2, B, c->hkv, S, c->d},
          vd[5] = {2, B, c->hkv, S, c->dv};
  tj_value_t q = tj_graph_input(g, dt, r, qd + 1 - o, "q");
  tj_value_t k = tj_graph_input(g, dt, r, kd + 1 - o, "k");
  tj_value_t v = tj_graph_input(g, dt, r, vd + 1 - o, "v");
  tj_value_t m = tj_value_none();
  switch (c->mask) {
    case M_BOOL_TT:
      m = tj_graph_input(g, TJ_DTYPE_BOOL, 2, (int64_t[]){T, S}, "m");
      break;
    case M_ADD_NEGINF:
      m = tj_graph_input(g, dt, 2, (int64_t[]){T, S}, "m");
      break;
    case M_ADD_B1TT:
      m = tj_graph_input(g, dt, 4, (int64_t[]){B, 1, T, S}, "m");
      break;
    case M_BOOL_FULL: {
      int64_t md[5] = {2, B, c->h, T, S};
      m = tj_graph_input(g, TJ_DTYPE_BOOL, r, md + 1 - o, "m");
      break;
    }
    case M_NONE:
      break;
  }
  tj_graph_output(g, tj_graph_attention(g, q, k, v, m, c->scale, c->causal),
                  "y");
  tj_status_t st = tj_graph_finalize(g);
  if (st) {
    fprintf(stderr, "%s: %s\n", c->name, tj_status_message(st));
    tj_status_free(st);
    tj_graph_destroy(g);
    return NULL;
  }
  return g;
}

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
      const int64_t B = c->b[run], tq = c->tq[run], tk = c->tk[run];
      const int64_t batch = B * (c->nb == 2 ? 2 : 1);
      const int64_t nq = batch * c->h * tq * c->d;
      const int64_t nk = batch * c->hkv * tk * c->d;
      const int64_t nv = batch * c->hkv * tk * c->dv;
      const int64_t ny = batch * c->h * tq * c->dv;
      g_rng = 0x1234567ull + (uint64_t)run;  // the same data per context
      void* q = fill(dt, nq, -2, 2);
      void* k = fill(dt, nk, -2, 2);
      void* v = fill(dt, nv, -1, 1);
      void* m = NULL;
      int64_t md[5];
      int32_t mr = 0;
      tj_dtype_t mdt = TJ_DTYPE_BOOL;
      switch (c->mask) {
        case M_BOOL_TT:
          mr = 2, md[0] = tq, md[1] = tk;
          m = fill(mdt, tq * tk, 0, 1);
          for (int64_t j = 0; j < tk; ++j) tj_store_f64(mdt, m, j, 0);
          break;
        case M_ADD_NEGINF:
          mdt = dt, mr = 2, md[0] = tq, md[1] = tk;
          m = fill(dt, tq * tk, -1, 1);
          for (int64_t e = 0; e < tq * tk; ++e)
            tj_store_f64(dt, m, e,
                         (e / tk == 1 || at(dt, m, e) < -0.3) ? -INFINITY : 0);
          break;
        case M_ADD_B1TT:
          mdt = dt, mr = 4, md[0] = B, md[1] = 1, md[2] = tq, md[3] = tk;
          m = fill(dt, B * tq * tk, -3, 3);
          break;
        case M_BOOL_FULL: {
          int64_t full[5] = {2, B, c->h, tq, tk};
          mr = r;
          memcpy(md, full + 1 - o, (size_t)r * sizeof(int64_t));
          m = fill(mdt, batch * c->h * tq * tk, 0, 1);
          break;
        }
        case M_NONE:
          break;
      }
      double* want = malloc((size_t)(ny ? ny : 1) * sizeof(double));
      oracle(c, dt, batch, tq, tk, q, k, v, m, want);
      int64_t qd[5] = {2, B, c->h, tq, c->d}, kd[5] = {2, B, c->hkv, tk, c->d},
              vd[5] = {2, B, c->hkv, tk, c->dv},
              yd[5] = {2, B, c->h, tq, c->dv};
      tj_tensor_t ins[4] = {tj_tensor_make(q, dt, r, qd + 1 - o),
                            tj_tensor_make(k, dt, r, kd + 1 - o),
                            tj_tensor_make(v, dt, r, vd + 1 - o),
                            tj_tensor_make(m, mdt, mr, md)};
      void* got = calloc((size_t)(ny ? ny : 1), tj_dtype_size(dt));
      tj_tensor_t out = tj_tensor_make(got, dt, r, yd + 1 - o);
      const int32_t nin = m ? 4 : 3;
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
      free(want);
      free(m);
      free(v);
      free(k);
      free(q);
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

static const case_t kCases[] = {
    {"plain", 1, {2}, {5}, {7}, 4, 4, 64, 64, false, M_NONE, 0, false},
    {"gqa_causal_long_q",
     1,
     {1},
     {19},
     {11},
     8,
     2,
     80,
     48,
     true,
     M_NONE,
     0,
     false},
    {"mqa_causal_long_k",
     1,
     {2},
     {9},
     {37},
     8,
     1,
     128,
     128,
     true,
     M_NONE,
     0.05,
     false},
    {"bool_mask_rows_off",
     1,
     {2},
     {6},
     {13},
     4,
     2,
     64,
     64,
     false,
     M_BOOL_TT,
     0,
     false},
    {"additive_b1tt",
     1,
     {3},
     {7},
     {7},
     2,
     2,
     16,
     24,
     true,
     M_ADD_B1TT,
     0.3,
     false},
    {"neginf_rows_two_batch_dims",
     2,
     {2},
     {5},
     {9},
     4,
     4,
     32,
     32,
     false,
     M_ADD_NEGINF,
     0,
     false},
    {"full_bool_mask_two_batch_dims",
     2,
     {1},
     {3},
     {66},
     6,
     3,
     64,
     40,
     true,
     M_BOOL_FULL,
     0,
     false},
    {"symbolic_b_t_s",
     1,
     {2, 3},
     {17, 5},
     {33, 70},
     4,
     2,
     64,
     64,
     true,
     M_BOOL_TT,
     0,
     true},
    {"symbolic_additive",
     1,
     {1, 2},
     {1, 65},
     {65, 3},
     8,
     1,
     64,
     64,
     false,
     M_ADD_B1TT,
     0,
     true},
};

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

// The flash kernel's edges (see the top), in every dtype.
static const case_t kFlash[] = {
    {"d1_t1_s3_causal", 1, {2}, {1}, {3}, 2, 2, 1, 1, true, M_NONE, 0, false},
    {"d7_t17_s65_gqa_bool",
     1,
     {1},
     {17},
     {65},
     4,
     2,
     7,
     7,
     false,
     M_BOOL_TT,
     0,
     false},
    {"d64_t64_s257_causal_gqa",
     1,
     {1},
     {64},
     {257},
     2,
     1,
     64,
     64,
     true,
     M_NONE,
     0,
     false},
    {"d80_t65_s64_additive",
     1,
     {2},
     {65},
     {64},
     2,
     2,
     80,
     80,
     false,
     M_ADD_B1TT,
     0,
     false},
    {"d128_t257_s17_causal_neginf",
     1,
     {1},
     {257},
     {17},
     2,
     2,
     128,
     128,
     true,
     M_ADD_NEGINF,
     0,
     false},
    {"d64_symbolic_three_sizes",
     1,
     {1, 2, 3},
     {3, 64, 17},
     {65, 257, 1},
     4,
     2,
     64,
     64,
     true,
     M_BOOL_TT,
     0,
     true},
};

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
  tj_context_options_t co = tj_test_context_options();
  co.allocator = allocator;
  co.log = "";
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
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
  static const char* isas[] = {"host", "avx2", "sse2"};
  for (int i = 0; i < 3; ++i) {
    // avx2 only where it is not the host's own tier.
    if (i == 1 && !__builtin_cpu_supports("avx512f")) continue;
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.x86_isa = isas[i];
    o.log = "";
    tj_context_t* ctx = NULL;
    tj_status_t st = tj_context_create(&o, &ctx);
    if (st) {
      tj_status_free(st);
      continue;
    }
    g_isa[g_num_ctx] = isas[i];
    g_ctx[g_num_ctx++] = ctx;
  }
  RUN_TEST(inference_and_errors);
  RUN_TEST(cases_f32);
  RUN_TEST(cases_half);
  RUN_TEST(flash_matrix);
  RUN_TEST(flash_oom_sweep);
  RUN_TEST(vjp);
  for (int i = 0; i < g_num_ctx; ++i) tj_context_destroy(g_ctx[i]);
  TEST_MAIN_END();
}
