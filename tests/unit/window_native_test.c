// The x86 direct window kernel (dwbw, issue 15: kir/lower_window.c,
// jit/emit_window.c). x86 keeps an f32 depthwise conv (groups = C, one
// input channel a group, any channel multiplier) and max/avg pools whole;
// each case here is compiled at every ISA tier the host has (host, avx2,
// sse2) and checked against the reference interpreter (f64, rounded once)
// within 1e-4 relative + 2e-6 * taps absolute, and through the stats and
// the profile: the whole graph is one kernel, of the "conv" template (no
// pad boxes, no decomposition) and no graph break remains. Shapes: odd
// sizes, rows narrower and wider than a vector, 3x3/5x5/7x7 and 1x5/5x1
// windows, strides 1 to 5 (5: lanes gathered), dilation 2 and 3,
// asymmetric pads and pads wider than the window reaches, ceil_mode,
// count_include_pad with and without it, 1D and 3D; the batch symbolic
// with one executable run at N = 3, 1 and 0; NaN in max_pool's input
// propagates as in the reference. The row strides 2 to 4 of 1-D and 2-D
// windows take the phase variant (rows split into phases on the stack):
// its cases add odd widths, rows narrower than a vector, planes of two
// row blocks and a row too wide for its ring. window_oom_sweep fails each
// allocation of a compile and run in turn.

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

typedef enum kind_e { K_DW, K_MAX, K_AVG } kind_t;

typedef struct case_t {
  const char* name;
  kind_t kind;
  int32_t n;     // spatial axes
  int64_t c;     // channels
  int64_t mult;  // depthwise: output channels per input channel (0 = 1)
  int64_t s[3];  // input spatial sizes
  bool bias;
  bool nan;  // max_pool: some inputs NaN
  tj_conv_attrs_t a;
} case_t;

#define K2(a, b) .kernel = {a, b}
#define S2(a, b) .strides = {a, b}
#define PB(a, b) .pads_begin = {a, b}
#define PE(a, b) .pads_end = {a, b}

static const case_t kCases[] = {
    {"dw_3x3_p1", K_DW, 2, 5, 0, {9, 11}, true, false, {PB(1, 1), PE(1, 1)}},
    {"dw_3x3_p1_wide",
     K_DW,
     2,
     3,
     0,
     {7, 37},
     true,
     false,
     {PB(1, 1), PE(1, 1)}},
    {"dw_3x3_s2_p1",
     K_DW,
     2,
     4,
     0,
     {13, 40},
     false,
     false,
     {S2(2, 2), PB(1, 1), PE(1, 1)}},
    {"dw_5x5_s2_p2",
     K_DW,
     2,
     3,
     0,
     {11, 21},
     true,
     false,
     {S2(2, 2), PB(2, 2), PE(2, 2)}},
    {"dw_3x3_s3",
     K_DW,
     2,
     2,
     0,
     {10, 50},
     true,
     false,
     {S2(3, 3), PB(1, 0), PE(0, 2)}},
    {"dw_3x3_s5_gather",
     K_DW,
     2,
     2,
     0,
     {12, 90},
     true,
     false,
     {S2(1, 5), PB(1, 2), PE(1, 2)}},
    {"dw_d2_asym",
     K_DW,
     2,
     5,
     0,
     {9, 23},
     true,
     false,
     {.dilations = {2, 2}, PB(2, 1), PE(1, 3)}},
    {"dw_7x7_wide_pad",
     K_DW,
     2,
     2,
     0,
     {5, 6},
     true,
     false,
     {K2(7, 7), PB(4, 5), PE(5, 4)}},
    {"dw_1x5_5x1",
     K_DW,
     2,
     3,
     0,
     {8, 19},
     false,
     false,
     {S2(1, 3), PB(2, 4), PE(0, 5)}},
    {"dw_mult2", K_DW, 2, 3, 2, {9, 17}, true, false, {PB(1, 1), PE(1, 1)}},
    {"dw_1d",
     K_DW,
     1,
     4,
     0,
     {45},
     true,
     false,
     {.strides = {2}, .dilations = {3}, .pads_begin = {3}, .pads_end = {1}}},
    {"dw_3d",
     K_DW,
     3,
     3,
     0,
     {5, 6, 21},
     true,
     false,
     {.strides = {1, 2, 1}, .pads_begin = {1, 0, 1}, .pads_end = {1, 1, 0}}},
    {"max_3x3_s2_p1",
     K_MAX,
     2,
     4,
     0,
     {13, 37},
     false,
     false,
     {K2(3, 3), S2(2, 2), PB(1, 1), PE(1, 1)}},
    {"max_3x3_s2_p1_ceil",
     K_MAX,
     2,
     3,
     0,
     {12, 36},
     false,
     false,
     {K2(3, 3), S2(2, 2), PB(1, 1), PE(1, 1), .ceil_mode = true}},
    {"max_2x2_s2_ceil_odd",
     K_MAX,
     2,
     3,
     0,
     {9, 33},
     false,
     false,
     {K2(2, 2), S2(2, 2), .ceil_mode = true}},
    {"max_d2_asym",
     K_MAX,
     2,
     2,
     0,
     {10, 29},
     false,
     false,
     {K2(3, 2), .dilations = {2, 3}, PB(2, 0), PE(1, 2)}},
    {"max_nan",
     K_MAX,
     2,
     3,
     0,
     {9, 21},
     false,
     true,
     {K2(3, 3), PB(1, 1), PE(1, 1)}},
    {"max_s4",
     K_MAX,
     2,
     2,
     0,
     {8, 70},
     false,
     false,
     {K2(4, 4), S2(4, 4), PB(1, 1), PE(1, 1)}},
    {"max_1d",
     K_MAX,
     1,
     3,
     0,
     {50},
     false,
     true,
     {.kernel = {5},
      .strides = {3},
      .pads_begin = {2},
      .pads_end = {2},
      .ceil_mode = true}},
    {"max_3d",
     K_MAX,
     3,
     2,
     0,
     {5, 7, 19},
     false,
     false,
     {.kernel = {2, 3, 3},
      .strides = {2, 2, 2},
      .pads_begin = {0, 1, 1},
      .pads_end = {1, 1, 1}}},
    {"avg_3x3_p1",
     K_AVG,
     2,
     4,
     0,
     {9, 28},
     false,
     false,
     {K2(3, 3), PB(1, 1), PE(1, 1)}},
    {"avg_3x3_p1_incl",
     K_AVG,
     2,
     4,
     0,
     {9, 28},
     false,
     false,
     {K2(3, 3), PB(1, 1), PE(1, 1), .count_include_pad = true}},
    {"avg_3x3_s2_ceil",
     K_AVG,
     2,
     3,
     0,
     {10, 31},
     false,
     false,
     {K2(3, 3), S2(2, 2), PB(1, 1), PE(1, 2), .ceil_mode = true}},
    {"avg_3x3_s2_ceil_incl",
     K_AVG,
     2,
     3,
     0,
     {10, 31},
     false,
     false,
     {K2(3, 3), S2(2, 2), PB(1, 1), PE(1, 2), .ceil_mode = true,
      .count_include_pad = true}},
    {"avg_5x5_d2_incl",
     K_AVG,
     2,
     2,
     0,
     {11, 26},
     false,
     false,
     {K2(5, 5), .dilations = {2, 2}, PB(3, 2), PE(2, 4),
      .count_include_pad = true}},
    {"avg_2x2_s2",
     K_AVG,
     2,
     5,
     0,
     {14, 56},
     false,
     false,
     {K2(2, 2), S2(2, 2)}},
    {"avg_3d_incl",
     K_AVG,
     3,
     2,
     0,
     {6, 5, 17},
     false,
     false,
     {.kernel = {3, 3, 3},
      .strides = {2, 1, 2},
      .pads_begin = {1, 1, 1},
      .pads_end = {1, 1, 1},
      .count_include_pad = true}},
    // The phase variant (row stride 2 to 4, at most two spatial axes):
    // odd widths, rows narrower than a vector, dilation, a channel
    // multiplier, rows the stride skips, pads that reach past the window's
    // first column, ceil_mode, planes of two row blocks (a unit starting
    // mid-plane) and a row too wide for the ring (the span loads instead).
    {"max_3x3_s2_odd_nan",
     K_MAX,
     2,
     3,
     0,
     {9, 113},
     false,
     true,
     {K2(3, 3), S2(2, 2), PB(1, 1), PE(1, 1)}},
    {"max_3x3_s2_narrow_nan",
     K_MAX,
     2,
     2,
     0,
     {7, 15},
     false,
     true,
     {K2(3, 3), S2(2, 2), PB(1, 1), PE(1, 1)}},
    {"max_3x3_s2_ceil_odd_nan",
     K_MAX,
     2,
     2,
     0,
     {11, 33},
     false,
     true,
     {K2(3, 3), S2(2, 2), .ceil_mode = true}},
    {"max_3x3_s2_p2",
     K_MAX,
     2,
     2,
     0,
     {8, 20},
     false,
     false,
     {K2(3, 3), S2(2, 2), PB(2, 2), PE(2, 2)}},
    {"max_2x3_s3x2_nan",
     K_MAX,
     2,
     2,
     0,
     {14, 31},
     false,
     true,
     {K2(2, 3), S2(3, 2), PB(0, 1), PE(1, 1)}},
    {"max_1d_s2_nan",
     K_MAX,
     1,
     3,
     0,
     {37},
     false,
     true,
     {.kernel = {3}, .strides = {2}, .pads_begin = {1}, .pads_end = {1}}},
    {"dw_3x3_s2_d2_odd",
     K_DW,
     2,
     3,
     0,
     {13, 29},
     true,
     false,
     {S2(2, 2), .dilations = {2, 2}, PB(2, 2), PE(2, 1)}},
    {"dw_mult2_s2",
     K_DW,
     2,
     2,
     2,
     {9, 19},
     true,
     false,
     {S2(2, 2), PB(1, 1), PE(1, 1)}},
    {"dw_3x3_s2_two_blocks",
     K_DW,
     2,
     1,
     0,
     {260, 261},
     false,
     false,
     {S2(2, 2), PB(1, 1), PE(1, 1)}},
    {"max_3x3_s2_two_blocks_nan",
     K_MAX,
     2,
     1,
     0,
     {261, 260},
     false,
     true,
     {K2(3, 3), S2(2, 2), PB(1, 1), PE(1, 1)}},
    {"avg_3x3_s2_odd_ceil",
     K_AVG,
     2,
     2,
     0,
     {12, 45},
     false,
     false,
     {K2(3, 3), S2(2, 2), PB(1, 1), PE(1, 1), .ceil_mode = true}},
    {"avg_3x3_s2_odd_ceil_incl",
     K_AVG,
     2,
     2,
     0,
     {12, 45},
     false,
     false,
     {K2(3, 3), S2(2, 2), PB(1, 1), PE(1, 1), .ceil_mode = true,
      .count_include_pad = true}},
    {"max_3x3_s2_wider_than_ring_nan",
     K_MAX,
     2,
     1,
     0,
     {5, 4201},
     false,
     true,
     {K2(3, 3), S2(2, 2), PB(1, 1), PE(1, 1)}},
    // mobile2: output rows of at most 16 columns take the channel vector
    // variant (a unit an image's block of lanes channels, the planes
    // transposed into a padded buffer): mobilenet's 5x5 layers at 14x14
    // and 7x7 with channel counts that no tier's lanes divide (a partial
    // last block), stride 2, dilation, a row of exactly 16 and one of 17
    // (the row variant), rows narrower than the lanes, max_pool's NaN and
    // ceil_mode.
    {"cvec_dw_5x5_p2_c40",
     K_DW,
     2,
     40,
     0,
     {14, 14},
     true,
     false,
     {K2(5, 5), PB(2, 2), PE(2, 2)}},
    {"cvec_dw_5x5_p2_7x7_c24",
     K_DW,
     2,
     24,
     0,
     {7, 7},
     true,
     false,
     {K2(5, 5), PB(2, 2), PE(2, 2)}},
    {"cvec_dw_5x5_s2_p2_c20",
     K_DW,
     2,
     20,
     0,
     {14, 14},
     true,
     false,
     {K2(5, 5), S2(2, 2), PB(2, 2), PE(2, 2)}},
    {"cvec_dw_3x3_row16_c17",
     K_DW,
     2,
     17,
     0,
     {5, 16},
     false,
     false,
     {PB(1, 1), PE(1, 1)}},
    {"cvec_dw_3x3_row17_c17",
     K_DW,
     2,
     17,
     0,
     {5, 17},
     true,
     false,
     {PB(1, 1), PE(1, 1)}},
    {"cvec_dw_3x3_d2_asym_c9",
     K_DW,
     2,
     9,
     0,
     {12, 11},
     true,
     false,
     {.dilations = {2, 2}, PB(2, 1), PE(1, 3)}},
    {"cvec_dw_1x1_c33", K_DW, 2, 33, 0, {6, 6}, true, false, {K2(1, 1)}},
    {"cvec_dw_3x3_narrow_c3",
     K_DW,
     2,
     3,
     0,
     {3, 2},
     true,
     false,
     {PB(1, 1), PE(1, 1)}},
    {"cvec_max_3x3_s2_c19_nan",
     K_MAX,
     2,
     19,
     0,
     {13, 13},
     false,
     true,
     {K2(3, 3), S2(2, 2), PB(1, 1), PE(1, 1)}},
    {"cvec_max_2x2_s2_ceil_c5_nan",
     K_MAX,
     2,
     5,
     0,
     {7, 9},
     false,
     true,
     {K2(2, 2), S2(2, 2), .ceil_mode = true}},
};

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float uniform(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static int64_t def1(int64_t v) { return v ? v : 1; }

// One graph: y = the window op of x (and w, b), the batch the symbol N.
static tj_graph_t* build(tj_context_t* ctx, const case_t* c, int64_t* xd,
                         int64_t* wd, int64_t* yd) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(ctx, "window_native", &g)) return NULL;
  const int32_t r = c->n + 2;
  int64_t N = tj_graph_symbol(g, "N");
  xd[0] = N;
  xd[1] = c->c;
  wd[0] = c->c * def1(c->mult);
  wd[1] = 1;
  for (int32_t i = 0; i < c->n; ++i) {
    xd[2 + i] = c->s[i];
    wd[2 + i] = c->a.kernel[i] ? c->a.kernel[i] : 3;
  }
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, r, xd, "x");
  tj_value_t y;
  tj_conv_attrs_t a = c->a;
  if (c->kind == K_DW) {
    tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, r, wd, "w");
    tj_value_t b = {0};
    if (c->bias) b = tj_graph_input(g, TJ_DTYPE_F32, 1, &wd[0], "b");
    a.groups = c->c;
    y = tj_graph_conv(g, x, w, b, &a);
  } else if (c->kind == K_MAX) {
    y = tj_graph_max_pool(g, x, &a);
  } else {
    y = tj_graph_avg_pool(g, x, &a);
  }
  tj_graph_output(g, y, "y");
  tj_status_t s = tj_graph_finalize(g);
  if (s) {
    fprintf(stderr, "%s: %s\n", c->name, tj_status_message(s));
    tj_status_free(s);
    tj_graph_destroy(g);
    return NULL;
  }
  tj_graph_value_dims(g, y, yd);
  return g;
}

static int64_t numel(int32_t r, const int64_t* d) {
  int64_t n = 1;
  for (int32_t i = 0; i < r; ++i) n *= d[i];
  return n;
}

static float* random_buffer(int64_t n, bool nan) {
  float* p = malloc((size_t)(n ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) p[i] = uniform();
  // A NaN in every 97th element: windows with one, with none.
  for (int64_t i = 13; nan && i < n; i += 97) p[i] = NAN;
  return p;
}

// The kernel templates in |exe|'s profile: whether all of them are "conv".
static int32_t conv_kernels(tj_executable_t* exe, const tj_tensor_t* ins,
                            int32_t nin, const tj_tensor_t* out,
                            int32_t* out_others) {
  tj_profile_report_t* rep = NULL;
  *out_others = 0;
  tj_status_t s = tj_executable_profile(exe, ins, nin, out, 1, 1, &rep);
  if (s) {
    fprintf(stderr, "profile: %s\n", tj_status_message(s));
    tj_status_free(s);
    return -1;
  }
  int32_t found = 0;
  for (int32_t i = 0; i < rep->num_entries; ++i) {
    if (rep->entries[i].kind != TJ_PROFILE_KERNEL) continue;
    if (strcmp(rep->entries[i].detail, "conv") == 0) {
      ++found;
    } else {
      ++*out_others;
    }
  }
  tj_profile_report_destroy(rep);
  return found;
}

static void run_case(const case_t* c) {
  const int32_t r = c->n + 2;
  int64_t xd[5], wd[5], yd[TJ_MAX_RANK];
  for (int ci = 0; ci < g_num_ctx; ++ci) {
    tj_graph_t* g = build(g_ctx[ci], c, xd, wd, yd);
    CHECK(g != NULL);
    if (!g) continue;
    int64_t taps = 1;
    for (int32_t i = 0; i < c->n; ++i) taps *= wd[2 + i];
    tj_compile_options_t opts = tj_test_x86_options(2);
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &opts, &exe));
    if (!exe) {
      tj_graph_destroy(g);
      continue;
    }
    tj_executable_stats_t stats = {.struct_size = sizeof(stats)};
    tj_executable_stats(exe, &stats);
    CHECK_EQ_INT(0, stats.num_graph_breaks);
    CHECK_EQ_INT(1, stats.num_kernels);
    static const int64_t batches[3] = {3, 1, 0};
    for (int bi = 0; bi < 3; ++bi) {
      const int64_t N = batches[bi];
      int64_t xs[5], ys[5];
      memcpy(xs, xd, sizeof(xs));
      memcpy(ys, yd, sizeof(ys));
      xs[0] = ys[0] = N;
      const int64_t nx = numel(r, xs), nw = numel(r, wd), ny = numel(r, ys);
      float* x = random_buffer(nx, c->nan);
      float* w = random_buffer(nw, false);
      float* b = random_buffer(wd[0], false);
      float* got = calloc((size_t)(ny ? ny : 1), sizeof(float));
      float* want = calloc((size_t)(ny ? ny : 1), sizeof(float));
      tj_tensor_t ins[3];
      int32_t nin = 0;
      ins[nin++] = tj_tensor_make(x, TJ_DTYPE_F32, r, xs);
      if (c->kind == K_DW) {
        ins[nin++] = tj_tensor_make(w, TJ_DTYPE_F32, r, wd);
        if (c->bias) ins[nin++] = tj_tensor_make(b, TJ_DTYPE_F32, 1, wd);
      }
      tj_tensor_t out = tj_tensor_make(want, TJ_DTYPE_F32, r, ys);
      CHECK_OK(tj_reference_run(g, ins, nin, &out, 1));
      out = tj_tensor_make(got, TJ_DTYPE_F32, r, ys);
      CHECK_OK(tj_executable_run(exe, ins, nin, &out, 1));
      int64_t bad = 0, first = -1, nans = 0;
      for (int64_t i = 0; i < ny; ++i) {
        double tol = 1e-4 * fabs((double)want[i]) + 2e-6 * (double)taps;
        bool ok = isnan(want[i])
                      ? isnan(got[i])
                      : fabs((double)got[i] - (double)want[i]) <= tol;
        nans += isnan(want[i]);
        if (!ok) {
          if (first < 0) first = i;
          ++bad;
        }
      }
      if (bad) {
        fprintf(stderr,
                "%s on %s, N=%lld: %lld of %lld wrong, [%lld] %g vs %g\n",
                c->name, g_isa[ci], (long long)N, (long long)bad, (long long)ny,
                (long long)first, (double)got[first], (double)want[first]);
      }
      CHECK_EQ_INT(0, bad);
      // The NaN cases have windows with a NaN and windows without.
      if (c->nan && N == 3) CHECK(nans > 0 && nans < ny);
      if (bi == 0) {
        int32_t others = 0;
        int32_t convs = conv_kernels(exe, ins, nin, &out, &others);
        if (convs != 1 || others != 0) {
          fprintf(stderr, "%s on %s: %d conv kernels, %d others\n", c->name,
                  g_isa[ci], convs, others);
        }
        CHECK_EQ_INT(1, convs);
        CHECK_EQ_INT(0, others);
      }
      free(x);
      free(w);
      free(b);
      free(got);
      free(want);
    }
    tj_executable_release(exe);
    tj_graph_destroy(g);
  }
}

TEST(cases) {
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i)
    run_case(&kCases[i]);
}

// Windows of -0 (x all -0; the depthwise weight 1): sums start from +0
// as on the reference, so avg_pool and the depthwise conv give +0 on every
// path of the template (the masked loop and the ring), and max_pool -0.
TEST(negative_zero_windows) {
  static const case_t kZeroCases[] = {
      {"avg_1x1_s2",
       K_AVG,
       2,
       3,
       0,
       {9, 20},
       false,
       false,
       {K2(1, 1), S2(2, 2)}},
      {"avg_3x3", K_AVG, 2, 3, 0, {9, 20}, false, false, {K2(3, 3)}},
      {"dw_1x1", K_DW, 2, 3, 0, {9, 20}, false, false, {K2(1, 1)}},
      {"dw_3x3_p1", K_DW, 2, 3, 0, {9, 20}, false, false, {PB(1, 1), PE(1, 1)}},
      {"max_2x2", K_MAX, 2, 3, 0, {9, 20}, false, false, {K2(2, 2)}},
  };
  for (size_t k = 0; k < sizeof(kZeroCases) / sizeof(kZeroCases[0]); ++k) {
    const case_t* c = &kZeroCases[k];
    for (int ci = 0; ci < g_num_ctx; ++ci) {
      int64_t xd[5], wd[5], yd[TJ_MAX_RANK];
      tj_graph_t* g = build(g_ctx[ci], c, xd, wd, yd);
      CHECK(g != NULL);
      if (!g) continue;
      tj_compile_options_t opts = tj_test_x86_options(2);
      tj_executable_t* exe = NULL;
      CHECK_OK(tj_compile(g, &opts, &exe));
      xd[0] = yd[0] = 2;
      const int64_t nx = numel(4, xd), nw = numel(4, wd), ny = numel(4, yd);
      float* x = malloc((size_t)nx * sizeof(float));
      float* w = malloc((size_t)nw * sizeof(float));
      float* want = calloc((size_t)ny, sizeof(float));
      float* got = calloc((size_t)ny, sizeof(float));
      for (int64_t i = 0; i < nx; ++i) x[i] = -0.0f;
      for (int64_t i = 0; i < nw; ++i) w[i] = 1.0f;
      tj_tensor_t ins[2] = {tj_tensor_make(x, TJ_DTYPE_F32, 4, xd),
                            tj_tensor_make(w, TJ_DTYPE_F32, 4, wd)};
      const int32_t nin = c->kind == K_DW ? 2 : 1;
      tj_tensor_t out = tj_tensor_make(want, TJ_DTYPE_F32, 4, yd);
      CHECK_OK(tj_reference_run(g, ins, nin, &out, 1));
      out = tj_tensor_make(got, TJ_DTYPE_F32, 4, yd);
      if (exe) CHECK_OK(tj_executable_run(exe, ins, nin, &out, 1));
      int64_t bad = 0;
      const bool negative = c->kind == K_MAX;
      for (int64_t i = 0; i < ny; ++i)
        bad += got[i] != 0.0f || (signbit(got[i]) != 0) != negative ||
               (signbit(want[i]) != 0) != negative;
      if (bad)
        fprintf(stderr, "%s on %s: %lld of %lld zeros of the wrong sign\n",
                c->name, g_isa[ci], (long long)bad, (long long)ny);
      CHECK_EQ_INT(0, bad);
      free(x);
      free(w);
      free(want);
      free(got);
      tj_executable_release(exe);
      tj_graph_destroy(g);
    }
  }
}

// A wrong input shape at run time is an error naming the input, not a
// crash.
TEST(bad_input_shape) {
  int64_t xd[5], wd[5], yd[TJ_MAX_RANK];
  tj_graph_t* g = build(g_ctx[0], &kCases[0], xd, wd, yd);
  CHECK(g != NULL);
  if (!g) return;
  tj_compile_options_t opts = tj_test_x86_options(1);
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  static float x[2 * 4 * 9 * 11], w[5 * 9], b[5], y[2 * 5 * 9 * 11];
  tj_tensor_t ins[3] = {
      tj_tensor_make(x, TJ_DTYPE_F32, 4, (int64_t[]){2, 4, 9, 11}),
      tj_tensor_make(w, TJ_DTYPE_F32, 4, (int64_t[]){5, 1, 3, 3}),
      tj_tensor_make(b, TJ_DTYPE_F32, 1, (int64_t[]){5})};
  tj_tensor_t out =
      tj_tensor_make(y, TJ_DTYPE_F32, 4, (int64_t[]){2, 5, 9, 11});
  if (exe) {
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "x",
                 tj_executable_run(exe, ins, 3, &out, 1));
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

// The failing-allocator sweep over a compile and run of a padded, strided
// depthwise conv followed by a ceil_mode max pool and a count_include_pad
// avg pool, the batch symbolic (the window kernels' lowering, emission and
// launch), with the kernels in a warm disk cache so that each point is
// cheap: every failure is OUT_OF_MEMORY and nothing leaks.
static char g_oom_dir[64];

static tj_status_t window_compile_run(tj_allocator_t allocator) {
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_test_sweep_context_create(allocator, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  s = tj_graph_create(ctx, "window_oom", &g);
  if (!s) {
    int64_t N = tj_graph_symbol(g, "N");
    tj_value_t x =
        tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){N, 3, 9, 8}, "x");
    tj_value_t w =
        tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){3, 1, 3, 3}, "w");
    tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){3}, "b");
    tj_conv_attrs_t a = {.strides = {2, 1},
                         .pads_begin = {1, 0},
                         .pads_end = {0, 2},
                         .groups = 3};
    tj_value_t y = tj_graph_conv(g, x, w, b, &a);
    tj_conv_attrs_t m = {
        .kernel = {2, 2}, .strides = {2, 2}, .ceil_mode = true};
    y = tj_graph_max_pool(g, y, &m);
    tj_conv_attrs_t v = {.kernel = {3, 3},
                         .pads_begin = {1, 1},
                         .pads_end = {1, 1},
                         .count_include_pad = true};
    tj_graph_output(g, tj_graph_avg_pool(g, y, &v), "y");
    s = tj_graph_finalize(g);
  }
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.cache_dir = g_oom_dir;
  opts.x86.num_threads = 1;
  if (!s) s = tj_compile(g, &opts, &exe);
  if (!s) {
    // conv: [2, 3, 4, 8]; max_pool: [2, 3, 2, 4]; avg_pool: the same.
    static float x[2 * 3 * 9 * 8], w[3 * 9], b[3], y[2 * 3 * 2 * 4];
    for (int i = 0; i < 2 * 3 * 9 * 8; ++i) x[i] = (float)(i % 7) * 0.1f;
    for (int i = 0; i < 3 * 9; ++i) w[i] = (float)(i % 5) * 0.2f;
    tj_tensor_t ins[3] = {
        tj_tensor_make(x, TJ_DTYPE_F32, 4, (int64_t[]){2, 3, 9, 8}),
        tj_tensor_make(w, TJ_DTYPE_F32, 4, (int64_t[]){3, 1, 3, 3}),
        tj_tensor_make(b, TJ_DTYPE_F32, 1, (int64_t[]){3})};
    tj_tensor_t out =
        tj_tensor_make(y, TJ_DTYPE_F32, 4, (int64_t[]){2, 3, 2, 4});
    s = tj_executable_run(exe, ins, 3, &out, 1);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(window_oom_sweep) {
  snprintf(g_oom_dir, sizeof(g_oom_dir), "/tmp/tj_window_oom_XXXXXX");
  CHECK(mkdtemp(g_oom_dir) != NULL);
  CHECK_OK(window_compile_run(tj_allocator_system()));  // warms the cache
  CHECK(tj_test_oom_sweep("window", window_compile_run) > 0);
  tj_test_remove_tree(g_oom_dir);
}

int main(void) {
  g_num_ctx = tj_test_tier_contexts(g_ctx, g_isa);
  RUN_TEST(cases);
  RUN_TEST(negative_zero_windows);
  RUN_TEST(bad_input_shape);
  RUN_TEST(window_oom_sweep);
  for (int i = 0; i < g_num_ctx; ++i) tj_context_destroy(g_ctx[i]);
  TEST_MAIN_END();
}
