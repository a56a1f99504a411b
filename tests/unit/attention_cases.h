// The attention op's test cases (issue 14), shared by the x86 test
// (tests/unit/attention_test.c) and the CUDA one
// (tests/cuda/cuda_attention_test.c): the case table, a nested-loop oracle
// (two-pass softmax in double on the inputs as rounded to their dtype),
// the graph of a case and the inputs of one of its runs.

#ifndef TJ_TESTS_UNIT_ATTENTION_CASES_H_
#define TJ_TESTS_UNIT_ATTENTION_CASES_H_

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/dtype.h"
#include "tensorjit/tj_executable.h"
#include "tensorjit/tj_graph.h"
#include "tensorjit/tj_tensor.h"

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
static inline double uniform(double lo, double hi) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * (double)(g_rng >> 11) / 9007199254740992.0;
}

// A dense tensor of |dtype| filled from uniform(lo, hi) (bool: 70 % true).
static inline void* fill(tj_dtype_t dtype, int64_t n, double lo, double hi) {
  size_t es = tj_dtype_size(dtype);
  unsigned char* p = malloc((size_t)(n ? n : 1) * es);
  for (int64_t i = 0; i < n; ++i) {
    double v = dtype == TJ_DTYPE_BOOL ? (uniform(0, 1) < 0.7) : uniform(lo, hi);
    tj_store_f64(dtype, p, i, v);
  }
  return p;
}

static inline double at(tj_dtype_t dtype, const void* p, int64_t i) {
  return tj_load_f64(dtype, p, i);
}

// The oracle: y [batch, H, Tq, Dv] from the definition (two passes).
static inline void oracle(const case_t* c, tj_dtype_t dt, int64_t batch,
                          int64_t tq, int64_t tk, const void* q, const void* k,
                          const void* v, const void* m, double* y) {
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

static inline bool compare(const char* what, const char* name, tj_dtype_t dt,
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
static inline tj_graph_t* build(tj_context_t* ctx, const case_t* c,
                                tj_dtype_t dt) {
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

// One run of a case: its inputs (the same data for every target), the
// oracle's output and the tensors that describe them. Filled in place
// (the tensors point at the dims held here).
typedef struct case_run_t {
  int64_t B, tq, tk, ny;
  void *q, *k, *v, *m;
  double* want;
  int64_t qd[5], kd[5], vd[5], yd[5], md[5];
  tj_tensor_t ins[4];
  int32_t nin, r, o;
} case_run_t;

static inline void case_run_make(const case_t* c, tj_dtype_t dt, int run,
                                 case_run_t* x) {
  memset(x, 0, sizeof(*x));
  const int32_t r = c->nb + 3, o = c->nb - 1;
  x->r = r, x->o = o;
  const int64_t B = c->b[run], tq = c->tq[run], tk = c->tk[run];
  x->B = B, x->tq = tq, x->tk = tk;
  const int64_t batch = B * (c->nb == 2 ? 2 : 1);
  const int64_t nq = batch * c->h * tq * c->d;
  const int64_t nk = batch * c->hkv * tk * c->d;
  const int64_t nv = batch * c->hkv * tk * c->dv;
  x->ny = batch * c->h * tq * c->dv;
  g_rng = 0x1234567ull + (uint64_t)run;  // the same data per target
  x->q = fill(dt, nq, -2, 2);
  x->k = fill(dt, nk, -2, 2);
  x->v = fill(dt, nv, -1, 1);
  int32_t mr = 0;
  tj_dtype_t mdt = TJ_DTYPE_BOOL;
  int64_t* md = x->md;
  switch (c->mask) {
    case M_BOOL_TT:
      mr = 2, md[0] = tq, md[1] = tk;
      x->m = fill(mdt, tq * tk, 0, 1);
      for (int64_t j = 0; j < tk; ++j) tj_store_f64(mdt, x->m, j, 0);
      break;
    case M_ADD_NEGINF:
      mdt = dt, mr = 2, md[0] = tq, md[1] = tk;
      x->m = fill(dt, tq * tk, -1, 1);
      for (int64_t e = 0; e < tq * tk; ++e)
        tj_store_f64(dt, x->m, e,
                     (e / tk == 1 || at(dt, x->m, e) < -0.3) ? -INFINITY : 0);
      break;
    case M_ADD_B1TT:
      mdt = dt, mr = 4, md[0] = B, md[1] = 1, md[2] = tq, md[3] = tk;
      x->m = fill(dt, B * tq * tk, -3, 3);
      break;
    case M_BOOL_FULL: {
      int64_t full[5] = {2, B, c->h, tq, tk};
      mr = r;
      memcpy(md, full + 1 - o, (size_t)r * sizeof(int64_t));
      x->m = fill(mdt, batch * c->h * tq * tk, 0, 1);
      break;
    }
    case M_NONE:
      break;
  }
  x->want = malloc((size_t)(x->ny ? x->ny : 1) * sizeof(double));
  oracle(c, dt, batch, tq, tk, x->q, x->k, x->v, x->m, x->want);
  const int64_t qd[5] = {2, B, c->h, tq, c->d},
                kd[5] = {2, B, c->hkv, tk, c->d},
                vd[5] = {2, B, c->hkv, tk, c->dv},
                yd[5] = {2, B, c->h, tq, c->dv};
  memcpy(x->qd, qd, sizeof(qd));
  memcpy(x->kd, kd, sizeof(kd));
  memcpy(x->vd, vd, sizeof(vd));
  memcpy(x->yd, yd, sizeof(yd));
  x->ins[0] = tj_tensor_make(x->q, dt, r, x->qd + 1 - o);
  x->ins[1] = tj_tensor_make(x->k, dt, r, x->kd + 1 - o);
  x->ins[2] = tj_tensor_make(x->v, dt, r, x->vd + 1 - o);
  x->ins[3] = tj_tensor_make(x->m, mdt, mr, md);
  x->nin = x->m ? 4 : 3;
}

static inline void case_run_free(case_run_t* x) {
  free(x->want);
  free(x->m);
  free(x->v);
  free(x->k);
  free(x->q);
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

// The flash kernels' edges, in every dtype.
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

#endif  // TJ_TESTS_UNIT_ATTENTION_CASES_H_
