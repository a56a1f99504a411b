// conv, conv_transpose and the pools (lib/window.h): each case is run by a
// direct nested-loop oracle written here, by the reference interpreter and
// compiled for x86 at every ISA tier the host has (host, avx2, sse2), with
// no graph break. f32 within 1e-4 relative + 1e-4 absolute of the oracle
// (the reference within 1e-5: it computes in double and rounds once).
// Shapes are odd, strides 2, dilations 2, pads asymmetric, groups 1, 2 and
// depthwise, 1D/2D/3D, a symbolic batch B bound to 2 and to 3.

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorjit/tj_executable.h"
#include "tensorjit/tj_graph.h"
#include "tensorjit/tj_tensor.h"
#include "tests/unit/test.h"

enum { kMaxCtx = 3 };
static tj_context_t* g_ctx[kMaxCtx];
static const char* g_isa[kMaxCtx];
static int g_num_ctx;

typedef enum kind_e { K_CONV, K_CONV_T, K_MAX, K_AVG, K_LP } kind_t;

typedef struct case_t {
  const char* name;
  kind_t kind;
  int32_t n;     // spatial axes
  int64_t c, o;  // channels in, out (conv)
  int64_t s[3];  // input spatial sizes
  bool bias;
  bool symbolic_batch;
  bool relu_pool;  // conv -> + bias -> relu -> max_pool 3x3/2
  tj_conv_attrs_t a;
} case_t;

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static double uniform(double lo, double hi) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * (double)(g_rng >> 11) / 9007199254740992.0;
}

static int64_t def1(int64_t v) { return v ? v : 1; }

// The output size per the header's rule (independent of lib/infer.c).
static int64_t out_size(const case_t* k, int32_t i, int64_t kernel) {
  const tj_conv_attrs_t* a = &k->a;
  int64_t s = def1(a->strides[i]), d = def1(a->dilations[i]);
  int64_t in = k->s[i];
  if (k->kind == K_CONV_T)
    return s * (in - 1) + a->output_padding[i] + d * (kernel - 1) + 1 -
           a->pads_begin[i] - a->pads_end[i];
  int64_t room = in + a->pads_begin[i] + a->pads_end[i] - d * (kernel - 1) - 1;
  int64_t o = room / s + 1;
  if (a->ceil_mode) {
    o = (room + s - 1) / s + 1;
    if ((o - 1) * s >= in + a->pads_begin[i]) --o;
  }
  return o;
}

// Row-major index helpers over up to 5 dims.
static int64_t idx(int32_t rank, const int64_t* dims, const int64_t* at) {
  int64_t r = 0;
  for (int32_t i = 0; i < rank; ++i) r = r * dims[i] + at[i];
  return r;
}

// The oracle: every output element from its definition, in double.
static void oracle(const case_t* k, int64_t batch, const float* x,
                   const float* w, const float* b, const int64_t* xd,
                   const int64_t* wd, const int64_t* yd, double* y) {
  const int32_t n = k->n, rank = n + 2;
  const tj_conv_attrs_t* a = &k->a;
  const int64_t groups = def1(a->groups);
  int64_t ynumel = 1;
  for (int32_t i = 0; i < rank; ++i) ynumel *= yd[i];
  (void)batch;
  if (k->kind == K_CONV_T) {
    // y[n, g*Og + o, i*s + k*d - pb] += x[n, g*Cg + c, i] * w[g*Cg + c, o, k]
    for (int64_t e = 0; e < ynumel; ++e) y[e] = 0;
    const int64_t cg = xd[1] / groups, og = wd[1];
    int64_t xnumel = 1;
    for (int32_t i = 0; i < rank; ++i) xnumel *= xd[i];
    for (int64_t e = 0; e < xnumel; ++e) {
      int64_t at[5] = {0}, r = e;
      for (int32_t i = rank - 1; i >= 0; --i) {
        at[i] = r % xd[i];
        r /= xd[i];
      }
      int64_t taps = 1;
      for (int32_t i = 0; i < n; ++i) taps *= wd[2 + i];
      for (int64_t t = 0; t < taps; ++t) {
        int64_t kk[3], q = t, yat[5];
        bool in = true;
        for (int32_t i = n - 1; i >= 0; --i) {
          kk[i] = q % wd[2 + i];
          q /= wd[2 + i];
        }
        for (int32_t i = 0; i < n; ++i) {
          yat[2 + i] = at[2 + i] * def1(a->strides[i]) +
                       kk[i] * def1(a->dilations[i]) - a->pads_begin[i];
          in &= yat[2 + i] >= 0 && yat[2 + i] < yd[2 + i];
        }
        if (!in) continue;
        for (int64_t o = 0; o < og; ++o) {
          int64_t wat[5];
          wat[0] = at[1];
          wat[1] = o;
          for (int32_t i = 0; i < n; ++i) wat[2 + i] = kk[i];
          yat[0] = at[0];
          yat[1] = (at[1] / cg) * og + o;
          y[idx(rank, yd, yat)] += (double)x[e] * (double)w[idx(rank, wd, wat)];
        }
      }
    }
    if (b) {
      int64_t plane = ynumel / (yd[0] * yd[1]);
      for (int64_t e = 0; e < ynumel; ++e) y[e] += b[(e / plane) % yd[1]];
    }
    return;
  }
  for (int64_t e = 0; e < ynumel; ++e) {
    int64_t at[5] = {0}, r = e;
    for (int32_t i = rank - 1; i >= 0; --i) {
      at[i] = r % yd[i];
      r /= yd[i];
    }
    const bool conv = k->kind == K_CONV;
    const int64_t cg = conv ? xd[1] / groups : 1;
    const int64_t og = conv ? yd[1] / groups : 1;
    const int64_t c0 = conv ? (at[1] / og) * cg : at[1];
    int64_t taps = 1, kd[3];
    for (int32_t i = 0; i < n; ++i) {
      kd[i] = conv ? wd[2 + i] : a->kernel[i];
      taps *= kd[i];
    }
    double acc = 0, best = -INFINITY;
    int64_t inside = 0, padded = 0;
    for (int64_t c = c0; c < c0 + cg; ++c) {
      for (int64_t t = 0; t < taps; ++t) {
        int64_t kk[3], q = t, xat[5];
        bool in_x = true, in_pad = true;
        for (int32_t i = n - 1; i >= 0; --i) {
          kk[i] = q % kd[i];
          q /= kd[i];
        }
        xat[0] = at[0];
        xat[1] = c;
        for (int32_t i = 0; i < n; ++i) {
          int64_t p = at[2 + i] * def1(a->strides[i]) +
                      kk[i] * def1(a->dilations[i]) - a->pads_begin[i];
          xat[2 + i] = p;
          in_x &= p >= 0 && p < xd[2 + i];
          in_pad &= p >= -a->pads_begin[i] && p < xd[2 + i] + a->pads_end[i];
        }
        padded += in_pad;
        if (!in_x) continue;
        ++inside;
        double xv = x[idx(rank, xd, xat)];
        switch (k->kind) {
          case K_CONV: {
            int64_t wat[5];
            wat[0] = at[1];
            wat[1] = c - c0;
            for (int32_t i = 0; i < n; ++i) wat[2 + i] = kk[i];
            acc += xv * (double)w[idx(rank, wd, wat)];
            break;
          }
          case K_MAX:
            best = xv > best ? xv : best;
            break;
          case K_AVG:
            acc += xv;
            break;
          default:
            acc += pow(fabs(xv), a->p ? a->p : 2);
            break;
        }
      }
    }
    switch (k->kind) {
      case K_CONV:
        y[e] = acc + (b ? b[at[1]] : 0);
        break;
      case K_MAX:
        y[e] = best;
        break;
      case K_AVG:
        y[e] = acc / (double)(a->count_include_pad ? padded : inside);
        break;
      default:
        y[e] = pow(acc, 1.0 / (a->p ? a->p : 2));
        break;
    }
  }
}

// max_pool 3x3 / 2, pads 1 of relu(y) in place: the chain's tail.
static void oracle_relu_pool(int32_t rank, const int64_t* yd, const double* y,
                             const int64_t* pd, double* p) {
  int64_t numel = 1;
  for (int32_t i = 0; i < rank; ++i) numel *= pd[i];
  for (int64_t e = 0; e < numel; ++e) {
    int64_t at[5] = {0}, r = e;
    for (int32_t i = rank - 1; i >= 0; --i) {
      at[i] = r % pd[i];
      r /= pd[i];
    }
    double best = -INFINITY;
    for (int64_t t = 0; t < 9; ++t) {
      int64_t yat[5] = {at[0], at[1], at[2] * 2 + t / 3 - 1,
                        at[3] * 2 + t % 3 - 1, 0};
      if (yat[2] < 0 || yat[2] >= yd[2] || yat[3] < 0 || yat[3] >= yd[3])
        continue;
      double v = y[idx(rank, yd, yat)];
      v = v > 0 ? v : 0;
      best = v > best ? v : best;
    }
    p[e] = best;
  }
}

static tj_value_t build_op(tj_graph_t* g, const case_t* k, tj_value_t x,
                           tj_value_t w, tj_value_t b) {
  switch (k->kind) {
    case K_CONV:
      return tj_graph_conv(g, x, w, b, &k->a);
    case K_CONV_T:
      return tj_graph_conv_transpose(g, x, w, b, &k->a);
    case K_MAX:
      return tj_graph_max_pool(g, x, &k->a);
    case K_AVG:
      return tj_graph_avg_pool(g, x, &k->a);
    default:
      return tj_graph_lp_pool(g, x, &k->a);
  }
}

static bool close(double want, float got, double rtol, double atol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return want == (double)got;
  return fabs((double)got - want) <= atol + rtol * fabs(want);
}

static bool compare(const char* what, const char* name, int64_t count,
                    const double* want, const float* got, double rtol,
                    double atol) {
  for (int64_t e = 0; e < count; ++e) {
    if (!close(want[e], got[e], rtol, atol)) {
      fprintf(stderr, "%s: %s: element %lld is %.9g, want %.9g\n", name, what,
              (long long)e, (double)got[e], want[e]);
      return false;
    }
  }
  return true;
}

static void run_case(const case_t* k) {
  const int32_t n = k->n, rank = n + 2;
  const bool conv = k->kind == K_CONV || k->kind == K_CONV_T;
  const bool channels_last = k->a.channels_last;
  const int64_t groups = def1(k->a.groups);
  int64_t wd[5] = {0}, kern[3] = {0};
  if (conv) {
    wd[0] = k->kind == K_CONV ? k->o : k->c;
    wd[1] = k->kind == K_CONV ? k->c / groups : k->o / groups;
    for (int32_t i = 0; i < n; ++i) wd[2 + i] = k->a.kernel[i];
  }
  for (int32_t i = 0; i < n; ++i) kern[i] = k->a.kernel[i];
  int64_t wnumel = 1;
  for (int32_t i = 0; i < rank && conv; ++i) wnumel *= wd[i];
  float* w = conv ? malloc((size_t)wnumel * sizeof(float)) : NULL;
  float* b = k->bias ? malloc((size_t)k->o * sizeof(float)) : NULL;
  for (int64_t e = 0; conv && e < wnumel; ++e) w[e] = (float)uniform(-1, 1);
  for (int64_t e = 0; b && e < k->o; ++e) b[e] = (float)uniform(-1, 1);
  for (int64_t batch = 2; batch <= (k->symbolic_batch ? 3 : 2); ++batch) {
    int64_t xd[5], yd[5], pd[5];
    xd[0] = yd[0] = batch;
    xd[1] = k->c;
    yd[1] = conv ? k->o : k->c;
    for (int32_t i = 0; i < n; ++i) {
      xd[2 + i] = k->s[i];
      yd[2 + i] = out_size(k, i, kern[i]);
    }
    int64_t xnumel = 1, ynumel = 1, pnumel = 1;
    for (int32_t i = 0; i < rank; ++i) {
      xnumel *= xd[i];
      ynumel *= yd[i];
    }
    if (k->relu_pool) {
      pd[0] = yd[0];
      pd[1] = yd[1];
      for (int32_t i = 2; i < 4; ++i) pd[i] = (yd[i] + 2 - 3) / 2 + 1;
      for (int32_t i = 0; i < rank; ++i) pnumel *= pd[i];
    }
    const int64_t* rd = k->relu_pool ? pd : yd;
    const int64_t rnumel = k->relu_pool ? pnumel : ynumel;
    float* x = malloc((size_t)xnumel * sizeof(float));
    for (int64_t e = 0; e < xnumel; ++e) x[e] = (float)uniform(-2, 2);
    double* want = malloc((size_t)ynumel * sizeof(double));
    oracle(k, batch, x, w, b, xd, wd, yd, want);
    if (k->relu_pool) {
      double* p = malloc((size_t)pnumel * sizeof(double));
      oracle_relu_pool(rank, yd, want, pd, p);
      free(want);
      want = p;
    }
    // channels-last: the caller's x and y are [N, S..., C].
    float* xl = x;
    int64_t xld[5], rld[5];
    double* want_l = want;
    if (channels_last) {
      xl = malloc((size_t)xnumel * sizeof(float));
      want_l = malloc((size_t)rnumel * sizeof(double));
      int64_t perm[5] = {0};
      for (int32_t i = 0; i < n; ++i) perm[1 + i] = 2 + i;
      perm[rank - 1] = 1;
      for (int32_t i = 0; i < rank; ++i) {
        xld[i] = xd[perm[i]];
        rld[i] = rd[perm[i]];
      }
      for (int64_t e = 0; e < xnumel; ++e) {
        int64_t at[5] = {0}, r = e, lat[5];
        for (int32_t i = rank - 1; i >= 0; --i) {
          at[i] = r % xd[i];
          r /= xd[i];
        }
        for (int32_t i = 0; i < rank; ++i) lat[i] = at[perm[i]];
        xl[idx(rank, xld, lat)] = x[e];
      }
      for (int64_t e = 0; e < rnumel; ++e) {
        int64_t at[5] = {0}, r = e, lat[5];
        for (int32_t i = rank - 1; i >= 0; --i) {
          at[i] = r % rd[i];
          r /= rd[i];
        }
        for (int32_t i = 0; i < rank; ++i) lat[i] = at[perm[i]];
        want_l[idx(rank, rld, lat)] = want[e];
      }
    } else {
      memcpy(xld, xd, sizeof(xd));
      memcpy(rld, rd, sizeof(xd));
    }
    float* got = malloc((size_t)rnumel * sizeof(float));
    for (int ci = -1; ci < g_num_ctx; ++ci) {
      // ci == -1: the reference interpreter on the first context's graph.
      tj_context_t* ctx = g_ctx[ci < 0 ? 0 : ci];
      tj_graph_t* g = NULL;
      CHECK_OK(tj_graph_create(ctx, k->name, &g));
      int64_t in_dims[5];
      memcpy(in_dims, xld, sizeof(in_dims));
      if (k->symbolic_batch) in_dims[0] = tj_graph_symbol(g, "B");
      tj_value_t xv = tj_graph_input(g, TJ_DTYPE_F32, rank, in_dims, "x");
      tj_value_t wv = tj_value_none(), bv = tj_value_none();
      if (conv)
        wv = tj_graph_constant(g, TJ_DTYPE_F32, rank, wd, w,
                               (size_t)wnumel * sizeof(float));
      if (b) bv = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){k->o}, "b");
      tj_value_t y = build_op(g, k, xv, wv, bv);
      if (k->relu_pool) {
        tj_conv_attrs_t pa;
        memset(&pa, 0, sizeof(pa));
        pa.kernel[0] = pa.kernel[1] = 3;
        pa.strides[0] = pa.strides[1] = 2;
        pa.pads_begin[0] = pa.pads_begin[1] = 1;
        pa.pads_end[0] = pa.pads_end[1] = 1;
        pa.channels_last = channels_last;
        y = tj_graph_max_pool(g, tj_graph_relu(g, y), &pa);
      }
      tj_graph_output(g, y, "y");
      tj_status_t st = tj_graph_finalize(g);
      CHECK_OK(st);
      if (st) {
        tj_graph_destroy(g);
        continue;
      }
      tj_tensor_t ins[2] = {
          tj_tensor_make(xl, TJ_DTYPE_F32, rank, xld),
          tj_tensor_make(b, TJ_DTYPE_F32, 1, (int64_t[]){k->o})};
      tj_tensor_t out = tj_tensor_make(got, TJ_DTYPE_F32, rank, rld);
      const int32_t num_in = b ? 2 : 1;
      memset(got, 0, (size_t)rnumel * sizeof(float));
      char what[64];
      if (ci < 0) {
        CHECK_OK(tj_reference_run(g, ins, num_in, &out, 1));
        snprintf(what, sizeof(what), "reference, batch %lld", (long long)batch);
        CHECK(compare(what, k->name, rnumel, want_l, got, 1e-5, 1e-5));
      } else {
        tj_compile_options_t opts;
        tj_compile_options_initialize(&opts);
        opts.verify_each = true;
        opts.cache_dir = "";
        tj_executable_t* exe = NULL;
        CHECK_OK(tj_compile(g, &opts, &exe));
        if (exe) {
          CHECK_OK(tj_executable_run(exe, ins, num_in, &out, 1));
          tj_executable_stats_t stats;
          tj_executable_stats(exe, &stats);
          if (stats.num_graph_breaks != 0)
            fprintf(stderr, "%s: %d graph breaks on %s\n", k->name,
                    stats.num_graph_breaks, g_isa[ci]);
          CHECK_EQ_INT(0, stats.num_graph_breaks);
          snprintf(what, sizeof(what), "x86 %s, batch %lld", g_isa[ci],
                   (long long)batch);
          CHECK(compare(what, k->name, rnumel, want_l, got, 1e-4, 1e-4));
          tj_executable_release(exe);
        }
      }
      tj_graph_destroy(g);
    }
    free(got);
    if (channels_last) {
      free(xl);
      free(want_l);
    }
    free(want);
    free(x);
  }
  free(w);
  free(b);
}

#define ATTRS(...) {__VA_ARGS__}

TEST(conv2d) {
  static const case_t cases[] = {
      {"c2_basic",
       K_CONV,
       2,
       3,
       8,
       {9, 11},
       true,
       true,
       false,
       ATTRS(.kernel = {3, 3}, .pads_begin = {1, 1}, .pads_end = {1, 1})},
      {"c2_stride2_asym",
       K_CONV,
       2,
       5,
       6,
       {13, 10},
       true,
       false,
       false,
       ATTRS(.kernel = {3, 2}, .strides = {2, 2}, .pads_begin = {2, 0},
             .pads_end = {1, 1})},
      {"c2_dilation2",
       K_CONV,
       2,
       4,
       7,
       {11, 9},
       false,
       true,
       false,
       ATTRS(.kernel = {3, 3}, .dilations = {2, 2}, .pads_begin = {1, 2},
             .pads_end = {2, 1})},
      {"c2_groups2",
       K_CONV,
       2,
       6,
       4,
       {7, 9},
       true,
       false,
       false,
       ATTRS(.kernel = {3, 3}, .strides = {2, 1}, .groups = 2,
             .pads_begin = {1, 1}, .pads_end = {0, 1})},
      {"c2_depthwise",
       K_CONV,
       2,
       5,
       5,
       {9, 8},
       true,
       true,
       false,
       ATTRS(.kernel = {3, 3}, .groups = 5, .pads_begin = {1, 1},
             .pads_end = {1, 1})},
      {"c2_depthwise_mult2",
       K_CONV,
       2,
       3,
       6,
       {7, 7},
       false,
       false,
       false,
       ATTRS(.kernel = {3, 3}, .strides = {2, 2}, .groups = 3)},
      {"c2_1x1",
       K_CONV,
       2,
       8,
       5,
       {7, 5},
       true,
       true,
       false,
       ATTRS(.kernel = {1, 1})},
      {"c2_1x1_stride2",
       K_CONV,
       2,
       6,
       4,
       {9, 7},
       false,
       false,
       false,
       ATTRS(.kernel = {1, 1}, .strides = {2, 2})},
      {"c2_valid_3x3",
       K_CONV,
       2,
       3,
       5,
       {8, 9},
       true,
       false,
       false,
       ATTRS(.kernel = {3, 3})},
      {"c2_7x7_stem",
       K_CONV,
       2,
       3,
       8,
       {23, 21},
       true,
       false,
       false,
       ATTRS(.kernel = {7, 7}, .strides = {2, 2}, .pads_begin = {3, 3},
             .pads_end = {3, 3})},
      {"c2_channels_last",
       K_CONV,
       2,
       4,
       6,
       {9, 7},
       true,
       true,
       false,
       ATTRS(.kernel = {3, 3}, .pads_begin = {1, 1}, .pads_end = {1, 1},
             .channels_last = true)},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i)
    run_case(&cases[i]);
}

TEST(conv1d_3d) {
  static const case_t cases[] = {
      {"c1_stride2",
       K_CONV,
       1,
       3,
       5,
       {17},
       true,
       true,
       false,
       ATTRS(.kernel = {5}, .strides = {2}, .pads_begin = {2},
             .pads_end = {1})},
      {"c1_dil2_groups",
       K_CONV,
       1,
       4,
       6,
       {15},
       false,
       false,
       false,
       ATTRS(.kernel = {3}, .dilations = {2}, .groups = 2, .pads_end = {2})},
      {"c3_basic",
       K_CONV,
       3,
       2,
       3,
       {5, 6, 7},
       true,
       true,
       false,
       ATTRS(.kernel = {3, 3, 3}, .pads_begin = {1, 1, 1},
             .pads_end = {1, 1, 1})},
      {"c3_stride2",
       K_CONV,
       3,
       3,
       4,
       {7, 5, 6},
       false,
       false,
       false,
       ATTRS(.kernel = {2, 3, 1}, .strides = {2, 2, 1},
             .pads_begin = {0, 1, 0})},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i)
    run_case(&cases[i]);
}

TEST(conv_transpose) {
  static const case_t cases[] = {
      {"t2_stride2",
       K_CONV_T,
       2,
       4,
       6,
       {5, 6},
       true,
       true,
       false,
       ATTRS(.kernel = {3, 3}, .strides = {2, 2}, .pads_begin = {1, 1},
             .pads_end = {1, 1}, .output_padding = {1, 0})},
      {"t2_groups_dil",
       K_CONV_T,
       2,
       4,
       6,
       {5, 4},
       false,
       false,
       false,
       ATTRS(.kernel = {3, 2}, .dilations = {2, 1}, .groups = 2,
             .pads_begin = {0, 1})},
      {"t1_big_pad",
       K_CONV_T,
       1,
       3,
       2,
       {9},
       true,
       false,
       false,
       ATTRS(.kernel = {3}, .strides = {3}, .pads_begin = {3}, .pads_end = {2},
             .output_padding = {2})},
      {"t3_basic",
       K_CONV_T,
       3,
       2,
       3,
       {3, 4, 3},
       true,
       false,
       false,
       ATTRS(.kernel = {2, 2, 2}, .strides = {2, 1, 2})},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i)
    run_case(&cases[i]);
}

TEST(pools) {
  static const case_t cases[] = {
      {"max_3x3_s2",
       K_MAX,
       2,
       3,
       0,
       {11, 10},
       false,
       true,
       false,
       ATTRS(.kernel = {3, 3}, .strides = {2, 2}, .pads_begin = {1, 1},
             .pads_end = {1, 1})},
      {"max_ceil_dil",
       K_MAX,
       2,
       2,
       0,
       {10, 9},
       false,
       false,
       false,
       ATTRS(.kernel = {2, 3}, .strides = {2, 2}, .dilations = {2, 1},
             .ceil_mode = true)},
      {"avg_pad_excl",
       K_AVG,
       2,
       3,
       0,
       {9, 8},
       false,
       true,
       false,
       ATTRS(.kernel = {3, 3}, .strides = {2, 2}, .pads_begin = {1, 0},
             .pads_end = {1, 1})},
      {"avg_pad_incl_ceil",
       K_AVG,
       2,
       2,
       0,
       {10, 7},
       false,
       false,
       false,
       ATTRS(.kernel = {3, 2}, .strides = {2, 2}, .pads_begin = {1, 1},
             .pads_end = {1, 0}, .ceil_mode = true, .count_include_pad = true)},
      {"avg_excl_ceil",
       K_AVG,
       1,
       3,
       0,
       {10},
       false,
       false,
       false,
       ATTRS(.kernel = {3}, .strides = {2}, .pads_begin = {1},
             .ceil_mode = true)},
      {"avg_uniform",
       K_AVG,
       2,
       3,
       0,
       {8, 8},
       false,
       true,
       false,
       ATTRS(.kernel = {2, 2}, .strides = {2, 2})},
      {"lp2",
       K_LP,
       2,
       2,
       0,
       {7, 9},
       false,
       false,
       false,
       ATTRS(.kernel = {3, 2}, .strides = {2, 1}, .pads_end = {1, 1})},
      {"lp3",
       K_LP,
       1,
       2,
       0,
       {9},
       false,
       true,
       false,
       ATTRS(.kernel = {3}, .strides = {2}, .p = 3)},
      {"max_3d",
       K_MAX,
       3,
       2,
       0,
       {5, 6, 7},
       false,
       false,
       false,
       ATTRS(.kernel = {2, 2, 3}, .strides = {2, 2, 2},
             .pads_begin = {0, 1, 1})},
      {"max_channels_last",
       K_MAX,
       2,
       3,
       0,
       {9, 8},
       false,
       true,
       false,
       ATTRS(.kernel = {3, 3}, .strides = {2, 2}, .pads_begin = {1, 1},
             .pads_end = {1, 1}, .channels_last = true)},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i)
    run_case(&cases[i]);
}

// conv + bias + relu + max_pool chains: no graph break (checked in
// run_case for every case), also channels-last.
TEST(conv_relu_pool_chain) {
  static const case_t cases[] = {
      {"chain",
       K_CONV,
       2,
       3,
       8,
       {15, 13},
       true,
       true,
       true,
       ATTRS(.kernel = {3, 3}, .strides = {2, 2}, .pads_begin = {1, 1},
             .pads_end = {1, 1})},
      {"chain_1x1",
       K_CONV,
       2,
       6,
       4,
       {9, 9},
       true,
       false,
       true,
       ATTRS(.kernel = {1, 1})},
      {"chain_nhwc",
       K_CONV,
       2,
       4,
       6,
       {11, 9},
       true,
       true,
       true,
       ATTRS(.kernel = {3, 3}, .pads_begin = {1, 1}, .pads_end = {1, 1},
             .channels_last = true)},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i)
    run_case(&cases[i]);
}

static void expect_error(tj_graph_t* g, const char* needle) {
  tj_status_t st = tj_graph_status(g);
  CHECK(st != NULL);
  if (st) {
    if (!strstr(tj_status_message(st), needle))
      fprintf(stderr, "message: %s (want '%s')\n", tj_status_message(st),
              needle);
    CHECK(strstr(tj_status_message(st), needle) != NULL);
    tj_status_free(st);
  }
}

// Shape inference: symbolic sizes where stride 1 allows it, errors naming
// the op and the problem.
TEST(inference_and_errors) {
  tj_graph_t* g;
  CHECK_OK(tj_graph_create(g_ctx[0], "infer", &g));
  int64_t B = tj_graph_symbol(g, "B"), H = tj_graph_symbol(g, "H");
  tj_value_t x =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){B, 3, H, 9}, "x");
  float wdata[8 * 3 * 3 * 3] = {0};
  tj_value_t w = tj_graph_constant(g, TJ_DTYPE_F32, 4, (int64_t[]){8, 3, 3, 3},
                                   wdata, sizeof(wdata));
  tj_conv_attrs_t a;
  memset(&a, 0, sizeof(a));
  a.pads_begin[0] = 1;
  a.pads_end[0] = 2;
  tj_value_t y = tj_graph_conv(g, x, w, tj_value_none(), &a);
  int64_t dims[TJ_MAX_RANK];
  tj_graph_value_dims(g, y, dims);
  CHECK(dims[0] == B);
  CHECK(dims[1] == 8);
  CHECK(dims[2] < -1 && dims[2] != H);  // H + 1: symbolic
  CHECK(dims[3] == 7);
  a.pads_end[0] = 1;
  y = tj_graph_conv(g, x, w, tj_value_none(), &a);
  tj_graph_value_dims(g, y, dims);
  CHECK(dims[2] == H);  // "same" padding
  a.strides[0] = 2;
  y = tj_graph_conv(g, x, w, tj_value_none(), &a);
  expect_error(g, "only stride 1");
  tj_graph_destroy(g);

  CHECK_OK(tj_graph_create(g_ctx[0], "shrink", &g));
  H = tj_graph_symbol(g, "H");
  x = tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){1, 3, H, 9}, "x");
  w = tj_graph_constant(g, TJ_DTYPE_F32, 4, (int64_t[]){8, 3, 3, 3}, wdata,
                        sizeof(wdata));
  tj_graph_conv(g, x, w, tj_value_none(), NULL);
  expect_error(g, "H - 2");
  tj_graph_destroy(g);

  CHECK_OK(tj_graph_create(g_ctx[0], "errors", &g));
  x = tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){1, 4, 5, 5}, "x");
  w = tj_graph_constant(g, TJ_DTYPE_F32, 4, (int64_t[]){8, 3, 3, 3}, wdata,
                        sizeof(wdata));
  tj_graph_conv(g, x, w, tj_value_none(), NULL);
  expect_error(g, "conv (node");
  tj_graph_destroy(g);

  CHECK_OK(tj_graph_create(g_ctx[0], "errors2", &g));
  x = tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){1, 3, 2, 2}, "x");
  memset(&a, 0, sizeof(a));
  a.kernel[0] = a.kernel[1] = 3;
  tj_graph_max_pool(g, x, &a);
  expect_error(g, "output size 0 < 1");
  tj_graph_destroy(g);

  CHECK_OK(tj_graph_create(g_ctx[0], "errors3", &g));
  x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){3, 2}, "x");
  tj_graph_avg_pool(g, x, &a);
  expect_error(g, "rank 3 to 5");
  tj_graph_destroy(g);

  CHECK_OK(tj_graph_create(g_ctx[0], "errors4", &g));
  x = tj_graph_input(g, TJ_DTYPE_F32, 3, (int64_t[]){3, 2, 6}, "x");
  tj_graph_max_pool(g, x, NULL);
  expect_error(g, "attrs is NULL");
  tj_graph_destroy(g);
}

int main(void) {
  g_num_ctx = tj_test_tier_contexts(g_ctx, g_isa);
  RUN_TEST(conv2d);
  RUN_TEST(conv1d_3d);
  RUN_TEST(conv_transpose);
  RUN_TEST(pools);
  RUN_TEST(conv_relu_pool_chain);
  RUN_TEST(inference_and_errors);
  for (int i = 0; i < g_num_ctx; ++i) tj_context_destroy(g_ctx[i]);
  TEST_MAIN_END();
}
