// The CUDA CONV template (issue 15, task cudaconv: kir/lower_conv.c,
// jit/emit_nvptx_conv.c) on the GPU: CUDA keeps an f32 groups == 1 conv
// whole (tj_window_conv_whole, as x86 does) and runs it as one implicit
// GEMM kernel. Each case is compiled twice, exact f32 (FFMA) and with
// allow_tf32 (mma.sync .tf32), and checked against the reference
// interpreter (f64, rounded once): exact within 1e-4 relative + 2e-6 * K
// absolute (K = C x taps, the f32 sums' length), TF32 within 1e-3
// relative + 3e-3 * sqrt(K) absolute (each operand rounded to 10 mantissa
// bits, a relative error near 2^-11 a product, random in sign: the inputs
// are in [-1, 1], so the sum's error grows as sqrt(K) and stays about 10x
// below this; a tap lost or read from the wrong place is off by far
// more). A plain conv must be exactly one kernel (the decomposition is
// several) and no case has a graph break. Shapes: 1D, 2D, 3D; stride,
// dilation, asymmetric pads and pads wider than the kernel reaches; odd C
// and O, O past one 128-channel tile, more pixels than a 128-pixel tile
// and images that end inside one; K not a multiple of the 8-deep k-tile;
// K deep enough over few pixels that the launch splits it; with and
// without bias; the batch symbolic, one executable run at N = 3, 1 and 0.
// Followers (convepi: the kernel's epilogue, jit/emit_nvptx_conv.c's
// epilogue_map), each case one kernel in all: relu; relu(y + residual),
// the residual of y's shape; y + a per-channel [O, 1, 1] operand clipped
// to [0, 6]; y cast to f16 (compared within one more f16 rounding,
// 2^-10 relative); at P a multiple of 4 (the vector path) and not (pixel
// by pixel). On the deep shapes whose conv splits k at batch 1 (a kernel
// with an epilogue does not split) the followers stay a kernel of their
// own: two kernels. The TF32 cases run on mma.sync (TJ_NVPTX_CONV=mma)
// and again on the sm_90a wgmma kernel, the default there
// (TJ_NVPTX_CONV=wgmma and wgmma64: 128 x 128 and 128 x 64 tiles, 64 x 128
// at 64 output channels or fewer, operands rounded to nearest TF32 in
// shared memory, within the same bound), and so do
// ResNet's layer classes (kResnet: the 7x7 stem, 3x3 and 1x1 at stride 1
// and 2, the downsample, deep K at 7x7, O past one tile; with relu and
// residual epilogues) at batch 32 and 1 of one symbolic-batch executable.
// tf32_rounded: ResNet's classes at batch 2 on inputs in [0, 1), where
// truncation's bias does not cancel, within 4e-4 relative (rounded_tol)
// on the default kernel, mma.sync and both wgmma tiles; the wgmma kernel
// with truncated operands (TJ_NVPTX_CONV=wgmma64-trunc) must break that
// bound (on the H200 every output of every class did). prepared_weights:
// the weight a constant of the graph, which the wgmma kernel reads
// prepared at upload (rounded, tap-major), on the cases and classes
// within the same bounds. Tests named on the command line run alone.
// Skips (exit 77) without a driver or GPU.

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorjit/tj_executable.h"
#include "tensorjit/tj_graph.h"
#include "tensorjit/tj_tensor.h"
#include "lib/dtype.h"
#include "tests/cuda/cuda_test_util.h"

// _SPLIT: the followers of a conv whose launch splits k in more than two
// slices at batch 1 (the symbolic batch's smallest), which fuse keeps out
// of its kernel (the CUDA backend's conv_epilogue_fits): two kernels.
typedef enum post_e {
  P_NONE,
  P_RELU,
  P_RESIDUAL,
  P_CHANNEL_CLIP,
  P_F16,
  P_RELU_SPLIT,
  P_RESIDUAL_SPLIT
} post_t;

typedef struct case_t {
  const char* name;
  int32_t n;     // spatial axes
  int64_t c, o;  // channels in, out
  int64_t s[3];  // input spatial sizes
  int64_t k[3];  // kernel
  bool bias;
  post_t post;
  tj_conv_attrs_t a;
} case_t;

static const case_t kCases[] = {
    {"3x3_s1_p1",
     2,
     5,
     7,
     {9, 11},
     {3, 3},
     true,
     P_NONE,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}}},
    {"3x3_s2_asym",
     2,
     3,
     13,
     {10, 7},
     {3, 3},
     true,
     P_NONE,
     {.strides = {2, 2}, .pads_begin = {0, 2}, .pads_end = {1, 0}}},
    {"3x3_d2",
     2,
     4,
     6,
     {12, 9},
     {3, 3},
     false,
     P_NONE,
     {.dilations = {2, 2}, .pads_begin = {2, 1}, .pads_end = {2, 3}}},
    {"7x7_s2_p3",
     2,
     3,
     67,
     {33, 29},
     {7, 7},
     true,
     P_NONE,
     {.strides = {2, 2}, .pads_begin = {3, 3}, .pads_end = {3, 3}}},
    {"1x1", 2, 17, 9, {5, 6}, {1, 1}, true, P_NONE, {.groups = 0}},
    {"1x1_s2", 2, 8, 70, {7, 9}, {1, 1}, false, P_NONE, {.strides = {2, 2}}},
    {"1x5_wide_pad",
     2,
     6,
     5,
     {4, 8},
     {1, 5},
     true,
     P_NONE,
     {.strides = {1, 3}, .pads_begin = {2, 4}, .pads_end = {0, 5}}},
    {"many_k_o",
     2,
     70,
     131,
     {6, 5},
     {3, 3},
     true,
     P_NONE,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}}},
    {"wide_image",
     2,
     9,
     33,
     {21, 23},
     {3, 3},
     true,
     P_NONE,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}}},
    // 338 k-tiles over 1 or 2 blocks: k split into 10 slices.
    {"deep_split",
     2,
     300,
     40,
     {7, 7},
     {3, 3},
     true,
     P_NONE,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}}},
    {"1d",
     1,
     4,
     9,
     {31},
     {5},
     true,
     P_NONE,
     {.strides = {2}, .dilations = {2}, .pads_begin = {3}, .pads_end = {1}}},
    {"1d_long",
     1,
     16,
     24,
     {300},
     {3},
     false,
     P_NONE,
     {.pads_begin = {1}, .pads_end = {1}}},
    {"3d",
     3,
     3,
     5,
     {5, 6, 7},
     {3, 2, 3},
     true,
     P_NONE,
     {.strides = {1, 2, 1}, .pads_begin = {1, 0, 1}, .pads_end = {1, 1, 0}}},
    {"relu",
     2,
     5,
     9,
     {8, 8},
     {3, 3},
     true,
     P_RELU,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}}},
    {"residual",
     2,
     6,
     6,
     {7, 9},
     {3, 3},
     true,
     P_RESIDUAL,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}}},
    // resnet's conv + bias -> relu and conv -> add -> relu at 14x14 (P 196:
    // vector loads and stores), O past one 128-channel tile.
    {"relu_14",
     2,
     32,
     136,
     {14, 14},
     {3, 3},
     true,
     P_RELU,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}}},
    {"residual_14",
     2,
     16,
     64,
     {14, 14},
     {3, 3},
     false,
     P_RESIDUAL,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}}},
    // A per-channel operand (stride 0 along the pixels) and clip: P 30 (2
    // wide runs for TF32, pixel by pixel for FFMA), then P 64.
    {"channel_clip_1x1",
     2,
     17,
     131,
     {5, 6},
     {1, 1},
     true,
     P_CHANNEL_CLIP,
     {.groups = 0}},
    {"channel_clip_s2",
     2,
     7,
     70,
     {16, 15},
     {3, 3},
     false,
     P_CHANNEL_CLIP,
     {.strides = {2, 2}, .pads_begin = {1, 1}, .pads_end = {1, 1}}},
    {"cast_f16",
     2,
     9,
     33,
     {8, 8},
     {3, 3},
     true,
     P_F16,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}}},
    {"cast_f16_odd",
     2,
     5,
     7,
     {9, 11},
     {3, 3},
     false,
     P_F16,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}}},
    // The deep_split shape, and resnet's last 3x3 (K 4608 at 7x7), with
    // followers: the conv split, the followers a kernel of their own.
    {"deep_relu",
     2,
     300,
     40,
     {7, 7},
     {3, 3},
     true,
     P_RELU_SPLIT,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}}},
    {"deep_residual",
     2,
     512,
     130,
     {7, 7},
     {3, 3},
     true,
     P_RESIDUAL_SPLIT,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}}},
    {"3d_relu",
     3,
     3,
     5,
     {5, 6, 7},
     {3, 2, 3},
     true,
     P_RELU,
     {.strides = {1, 2, 1}, .pads_begin = {1, 0, 1}, .pads_end = {1, 1, 0}}},
    {"1d_residual",
     1,
     16,
     24,
     {300},
     {3},
     false,
     P_RESIDUAL,
     {.pads_begin = {1}, .pads_end = {1}}},
};

// ResNet's layer classes, spatial sizes and some O cut so that the f64
// reference stays near 2 GMAC at batch 32 (the kernels see the same
// classes of K, strides and grids short of the SMs).
static const case_t kResnet[] = {
    {"rn_stem_7x7_s2",
     2,
     3,
     64,
     {32, 32},
     {7, 7},
     true,
     P_RELU,
     {.strides = {2, 2}, .pads_begin = {3, 3}, .pads_end = {3, 3}}},
    // K 576 would split in 2 slices at batch 1, which fuse allows for (at
    // most 2: conv_epilogue_fits): the relu its epilogue, never split.
    {"rn_3x3_64",
     2,
     64,
     64,
     {14, 14},
     {3, 3},
     true,
     P_RELU,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}}},
    {"rn_1x1_256_64",
     2,
     256,
     64,
     {14, 14},
     {1, 1},
     true,
     P_RELU,
     {.groups = 0}},
    {"rn_1x1_64_256_res",
     2,
     64,
     256,
     {14, 14},
     {1, 1},
     true,
     P_RESIDUAL,
     {.groups = 0}},
    {"rn_3x3_s2_128",
     2,
     128,
     128,
     {14, 14},
     {3, 3},
     true,
     P_NONE,
     {.strides = {2, 2}, .pads_begin = {1, 1}, .pads_end = {1, 1}}},
    {"rn_1x1_s2_256_512",
     2,
     256,
     512,
     {14, 14},
     {1, 1},
     false,
     P_NONE,
     {.strides = {2, 2}}},
    {"rn_3x3_256_128_res",
     2,
     256,
     128,
     {7, 7},
     {3, 3},
     true,
     P_RESIDUAL_SPLIT,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}}},
    {"rn_3x3_512_72",
     2,
     512,
     72,
     {7, 7},
     {3, 3},
     true,
     P_NONE,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}}},
};

static const int64_t kBatches[] = {3, 1, 0};
static const int64_t kResnetBatches[] = {32, 1};

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float uniform(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static int64_t def1(int64_t v) { return v ? v : 1; }

static int64_t out_size(const case_t* c, int32_t i) {
  const tj_conv_attrs_t* a = &c->a;
  int64_t room = c->s[i] + a->pads_begin[i] + a->pads_end[i] -
                 def1(a->dilations[i]) * (c->k[i] - 1) - 1;
  return room / def1(a->strides[i]) + 1;
}

// TEST(prepared_weights): the weight is a constant of the graph holding
// these values (the wgmma kernel then reads it prepared at upload:
// rounded to TF32, tap-major where C is a multiple of 32), not an input.
static float* g_const_w;

// y = post(conv(x, w, b)), the batch the symbol N.
static tj_graph_t* build(tj_context_t* ctx, const case_t* c, int64_t* xd,
                         int64_t* wd, int64_t* yd) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(ctx, "cuda_conv", &g)) return NULL;
  const int32_t r = c->n + 2;
  int64_t N = tj_graph_symbol(g, "N");
  xd[0] = yd[0] = N;
  xd[1] = wd[1] = c->c;
  wd[0] = yd[1] = c->o;
  for (int32_t i = 0; i < c->n; ++i) {
    xd[2 + i] = c->s[i];
    wd[2 + i] = c->k[i];
    yd[2 + i] = out_size(c, i);
  }
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, r, xd, "x");
  int64_t nw = 1;
  for (int32_t i = 0; i < r; ++i) nw *= wd[i];
  tj_value_t w = g_const_w ? tj_graph_constant(g, TJ_DTYPE_F32, r, wd,
                                               g_const_w, (size_t)nw * 4)
                           : tj_graph_input(g, TJ_DTYPE_F32, r, wd, "w");
  tj_value_t b = {0};
  if (c->bias) b = tj_graph_input(g, TJ_DTYPE_F32, 1, &c->o, "b");
  tj_value_t y = tj_graph_conv(g, x, w, b, &c->a);
  if (c->post == P_RELU || c->post == P_RELU_SPLIT) {
    y = tj_graph_relu(g, y);
  } else if (c->post == P_RESIDUAL || c->post == P_RESIDUAL_SPLIT) {
    tj_value_t res = tj_graph_input(g, TJ_DTYPE_F32, r, yd, "res");
    y = tj_graph_relu(g, tj_graph_add(g, y, res));
  } else if (c->post == P_CHANNEL_CLIP) {
    int64_t cd[4] = {c->o, 1, 1, 1};
    tj_value_t sh = tj_graph_input(g, TJ_DTYPE_F32, r - 1, cd, "shift");
    y = tj_graph_minimum(
        g,
        tj_graph_maximum(g, tj_graph_add(g, y, sh),
                         tj_graph_scalar(g, TJ_DTYPE_F32, 0.0)),
        tj_graph_scalar(g, TJ_DTYPE_F32, 6.0));
  } else if (c->post == P_F16) {
    y = tj_graph_cast(g, y, TJ_DTYPE_F16);
  }
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static int64_t numel(int32_t r, const int64_t* d) {
  int64_t n = 1;
  for (int32_t i = 0; i < r; ++i) n *= d[i];
  return n;
}

// TEST(tf32_rounded): inputs in [0, 1) and its tolerance (rounded_tol).
static bool g_positive;

static float* random_buffer(int64_t n) {
  float* p = malloc((size_t)(n ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; ++i)
    p[i] = g_positive ? fabsf(uniform()) : uniform();
  return p;
}

// The bound of TEST(tf32_rounded) on a sum of |kk| products of inputs in
// [0, 1): operands rounded to nearest (cvt.rna) err by at most 2^-11
// relative each, at random in sign, so the sum's relative error is about
// 5e-4 / sqrt(kk) (1.6e-5 at K 1152) and 4e-4 of |want| is many of those;
// truncated operands err by 2^-11 on average, always toward zero, a bias
// of about 2^-10 (9.8e-4) of the sum, which fails it. The sums' own
// f32 rounding adds K x 2^-24 at most.
static double rounded_tol(double want, double kk) {
  return 4e-4 * fabs(want) + 6e-8 * kk;
}

// One compiled variant of a case: its context, TF32 or exact, a label;
// |must_fail|: the output must break the bound somewhere (the truncating
// kernel under rounded_tol, which shows the bound tells the two apart).
typedef struct variant_t {
  tj_context_t* ctx;
  bool tf32;
  const char* label;
  bool must_fail;
} variant_t;

// |c| compiled once per variant (each in its own context), run at each of
// |batches| on the same inputs, each output checked against one reference
// run (the f64 reference is the slow part at batch 32).
static void run_variants(const case_t* c, const variant_t* vs,
                         int32_t num_variants, const int64_t* batches,
                         int32_t num_batches) {
  enum { kMaxVariants = 4 };
  const int32_t r = c->n + 2;
  int64_t xd[5], wd[5], yd[5];
  int64_t taps = 1;
  for (int32_t i = 0; i < c->n; ++i) taps *= c->k[i];
  const double kk = (double)(c->c * taps);
  tj_graph_t* g[kMaxVariants] = {NULL};
  tj_executable_t* exe[kMaxVariants] = {NULL};
  bool ok = num_variants <= kMaxVariants;
  if (g_const_w) {
    free(g_const_w);
    g_const_w = random_buffer(c->o * (int64_t)kk);
  }
  for (int32_t v = 0; ok && v < num_variants; ++v) {
    g[v] = build(vs[v].ctx, c, xd, wd, yd);
    if (!g[v]) {
      ok = false;
      break;
    }
    tj_compile_options_t opts;
    tj_compile_options_initialize(&opts);
    opts.target = TJ_TARGET_CUDA;
    opts.cache_dir = "";
    opts.cuda.allow_tf32 = vs[v].tf32;
    CHECK_OK(tj_compile(g[v], &opts, &exe[v]));
    if (!exe[v]) {
      ok = false;
      break;
    }
    tj_executable_stats_t stats = {.struct_size = sizeof(stats)};
    tj_executable_stats(exe[v], &stats);
    CHECK_EQ_INT(0, stats.num_graph_breaks);
    // The followers are the conv kernel's epilogue: one kernel in all,
    // unless the conv splits k at batch 1.
    const int32_t kernels =
        c->post == P_RELU_SPLIT || c->post == P_RESIDUAL_SPLIT ? 2 : 1;
    if (stats.num_kernels != kernels)
      fprintf(stderr, "%s%s: %d kernels, want %d\n", c->name, vs[v].label,
              (int)stats.num_kernels, (int)kernels);
    CHECK_EQ_INT(kernels, stats.num_kernels);
  }
  const tj_dtype_t yt = c->post == P_F16 ? TJ_DTYPE_F16 : TJ_DTYPE_F32;
  const size_t ye = tj_dtype_size(yt);
  for (int32_t bi = 0; ok && bi < num_batches; ++bi) {
    const int64_t N = batches[bi];
    int64_t xs[5], ys[5];
    memcpy(xs, xd, sizeof(xs));
    memcpy(ys, yd, sizeof(ys));
    xs[0] = ys[0] = N;
    const int64_t nx = numel(r, xs), nw = numel(r, wd), ny = numel(r, ys);
    float* x = random_buffer(nx);
    float* w = random_buffer(nw);
    float* b = random_buffer(c->o);
    float* res = random_buffer(ny);
    // Shifts of 0 to 6: the clip cuts both ends.
    float* shift = random_buffer(c->o);
    for (int64_t i = 0; i < c->o; ++i) shift[i] = 3.0f + 3.0f * shift[i];
    unsigned char* got = malloc((size_t)(ny ? ny : 1) * ye);
    unsigned char* want = calloc((size_t)(ny ? ny : 1), ye);
    tj_tensor_t ins[4];
    int32_t nin = 0;
    ins[nin++] = tj_tensor_make(x, TJ_DTYPE_F32, r, xs);
    if (!g_const_w) ins[nin++] = tj_tensor_make(w, TJ_DTYPE_F32, r, wd);
    if (c->bias) ins[nin++] = tj_tensor_make(b, TJ_DTYPE_F32, 1, &c->o);
    if (c->post == P_RESIDUAL || c->post == P_RESIDUAL_SPLIT)
      ins[nin++] = tj_tensor_make(res, TJ_DTYPE_F32, r, ys);
    // The tensor keeps a pointer to its dims: they outlive the runs.
    int64_t cd[4] = {c->o, 1, 1, 1};
    if (c->post == P_CHANNEL_CLIP)
      ins[nin++] = tj_tensor_make(shift, TJ_DTYPE_F32, r - 1, cd);
    tj_tensor_t out = tj_tensor_make(want, yt, r, ys);
    CHECK_OK(tj_reference_run(g[0], ins, nin, &out, 1));
    for (int32_t v = 0; v < num_variants; ++v) {
      const bool tf32 = vs[v].tf32;
      memset(got, 0xff, (size_t)(ny ? ny : 1) * ye);  // NaN in f32 and f16
      out = tj_tensor_make(got, yt, r, ys);
      CHECK_OK(tj_executable_run(exe[v], ins, nin, &out, 1));
      int64_t bad = 0, first = -1;
      double got_first = 0, want_first = 0;
      for (int64_t i = 0; i < ny; ++i) {
        double gv, wv;
        if (yt == TJ_DTYPE_F16) {
          uint16_t gh, wh;
          memcpy(&gh, got + i * 2, 2);
          memcpy(&wh, want + i * 2, 2);
          gv = tj_f16_to_f32(gh);
          wv = tj_f16_to_f32(wh);
        } else {
          float gf, wf;
          memcpy(&gf, got + i * 4, 4);
          memcpy(&wf, want + i * 4, 4);
          gv = gf;
          wv = wf;
        }
        double tol = g_positive ? rounded_tol(wv, kk)
                     : tf32     ? 1e-3 * fabs(wv) + 3e-3 * sqrt(kk)
                                : 1e-4 * fabs(wv) + 2e-6 * kk;
        if (yt == TJ_DTYPE_F16) tol += fabs(wv) / 1024.0;
        if (!(fabs(gv - wv) <= tol)) {
          if (first < 0) {
            first = i;
            got_first = gv;
            want_first = wv;
          }
          ++bad;
        }
      }
      if (bad && !vs[v].must_fail) {
        fprintf(stderr, "%s%s%s, N=%lld: %lld of %lld wrong, [%lld] %g vs %g\n",
                c->name, tf32 ? " tf32" : "", vs[v].label, (long long)N,
                (long long)bad, (long long)ny, (long long)first, got_first,
                want_first);
      }
      if (vs[v].must_fail) {
        printf("# %s%s, N=%lld: %lld of %lld past the bound\n", c->name,
               vs[v].label, (long long)N, (long long)bad, (long long)ny);
        CHECK(bad > 0);
      } else {
        CHECK_EQ_INT(0, bad);
      }
    }
    free(x);
    free(w);
    free(b);
    free(res);
    free(shift);
    free(got);
    free(want);
  }
  for (int32_t v = 0; v < num_variants; ++v) {
    if (exe[v]) tj_executable_release(exe[v]);
    if (g[v]) tj_graph_destroy(g[v]);
  }
}

static void run_case(tj_context_t* ctx, const case_t* c, bool tf32,
                     const int64_t* batches, int32_t num_batches) {
  variant_t v = {ctx, tf32, "", false};
  run_variants(c, &v, 1, batches, num_batches);
}

// A context with TJ_NVPTX_CONV=|kernel| (settings are read when a context
// is created).
static tj_context_t* conv_context(const char* kernel) {
  setenv("TJ_NVPTX_CONV", kernel, 1);
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  unsetenv("TJ_NVPTX_CONV");
  return ctx;
}

TEST(cases_exact_f32) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kCases); ++i)
    run_case(ctx, &kCases[i], false, kBatches, 3);
  tj_context_destroy(ctx);
}

// The TF32 cases on mma.sync (the default on sm_90a is the wgmma kernel,
// cases_tf32_wgmma).
TEST(cases_tf32) {
  tj_context_t* ctx = conv_context("mma");
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kCases); ++i)
    run_case(ctx, &kCases[i], true, kBatches, 3);
  tj_context_destroy(ctx);
}

// The TF32 cases on the wgmma kernel, both tiles, on the same inputs.
TEST(cases_tf32_wgmma) {
  tj_context_t* wg = conv_context("wgmma");
  tj_context_t* wg64 = conv_context("wgmma64");
  const variant_t vs[2] = {{wg, true, " wgmma", false},
                           {wg64, true, " wgmma64", false}};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kCases); ++i)
    run_variants(&kCases[i], vs, 2, kBatches, 3);
  tj_context_destroy(wg64);
  tj_context_destroy(wg);
}

// ResNet's classes at batch 32 and 1: exact f32, TF32 on mma.sync and on
// both wgmma tiles, one reference run a batch.
TEST(resnet_classes) {
  tj_context_t* mma = conv_context("mma");
  tj_context_t* wg = conv_context("wgmma");
  tj_context_t* wg64 = conv_context("wgmma64");
  const variant_t vs[4] = {{mma, false, "", false},
                           {mma, true, " mma", false},
                           {wg, true, " wgmma", false},
                           {wg64, true, " wgmma64", false}};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kResnet); ++i)
    run_variants(&kResnet[i], vs, 4, kResnetBatches, 2);
  tj_context_destroy(wg64);
  tj_context_destroy(wg);
  tj_context_destroy(mma);
}

// TF32 rounded to nearest on every kernel: ResNet's classes at batch 2 on
// inputs in [0, 1), where truncation's bias does not cancel, within
// rounded_tol (4e-4 relative): the default kernel, mma.sync, both wgmma
// tiles; the wgmma kernel with truncated operands (TJ_NVPTX_CONV=
// wgmma64-trunc) must break it.
TEST(tf32_rounded) {
  tj_context_t* def = NULL;
  CHECK_OK(tj_test_context_create(&def));
  tj_context_t* mma = conv_context("mma");
  tj_context_t* wg = conv_context("wgmma");
  tj_context_t* wg64 = conv_context("wgmma64");
  tj_context_t* trunc = conv_context("wgmma64-trunc");
  const variant_t vs[4] = {{def, true, " default", false},
                           {mma, true, " mma", false},
                           {wg, true, " wgmma", false},
                           {wg64, true, " wgmma64", false}};
  const variant_t tv = {trunc, true, " wgmma64-trunc", true};
  static const int64_t two[1] = {2};
  g_positive = true;
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kResnet); ++i) {
    run_variants(&kResnet[i], vs, 4, two, 1);
    run_variants(&kResnet[i], &tv, 1, two, 1);
  }
  g_positive = false;
  tj_context_destroy(trunc);
  tj_context_destroy(wg64);
  tj_context_destroy(wg);
  tj_context_destroy(mma);
  tj_context_destroy(def);
}

// Constant weights, read prepared at upload by the wgmma kernel (the
// default; rounded to TF32 once, rows padded to the k-tile, tap-major
// where C is a multiple of 32, so that a k-tile is one tap) and as they
// are by TJ_NVPTX_CONV=wgmma64-plain: every kCases shape within the TF32
// bound at batches 3, 1, 0 (default); ResNet's classes at batch 8 and 1
// within it (both), and at batch 2 on inputs in [0, 1) within rounded_tol
// (the host's rounding is to nearest too).
TEST(prepared_weights) {
  tj_context_t* def = NULL;
  CHECK_OK(tj_test_context_create(&def));
  tj_context_t* plain = conv_context("wgmma64-plain");
  const variant_t vs[2] = {{def, true, " default const", false},
                           {plain, true, " wgmma64-plain const", false}};
  g_const_w = random_buffer(1);
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kCases); ++i)
    run_variants(&kCases[i], vs, 1, kBatches, 3);
  // Batch 8, not 32: the f64 reference is the slow part.
  static const int64_t eight_one[2] = {8, 1};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kResnet); ++i)
    run_variants(&kResnet[i], vs, 2, eight_one, 2);
  static const int64_t two[1] = {2};
  g_positive = true;
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kResnet); ++i)
    run_variants(&kResnet[i], vs, 1, two, 1);
  g_positive = false;
  free(g_const_w);
  g_const_w = NULL;
  tj_context_destroy(plain);
  tj_context_destroy(def);
}

// Whether TEST(name) runs: every test, or those named on the command line
// (cuda_conv_test tf32_rounded resnet_classes: a short GPU call).
static int g_argc;
static char** g_argv;
static bool selected(const char* name) {
  for (int i = 1; i < g_argc; ++i)
    if (strcmp(g_argv[i], name) == 0) return true;
  return g_argc < 2;
}
#define RUN_SELECTED(name)               \
  do {                                   \
    if (selected(#name)) RUN_TEST(name); \
  } while (0)

int main(int argc, char** argv) {
  g_argc = argc;
  g_argv = argv;
  tj_cuda_device_t* device = tj_test_open_device_or_skip();
  tj_cuda_device_destroy(device);
  RUN_SELECTED(cases_exact_f32);
  RUN_SELECTED(cases_tf32);
  RUN_SELECTED(cases_tf32_wgmma);
  RUN_SELECTED(resnet_classes);
  RUN_SELECTED(tf32_rounded);
  RUN_SELECTED(prepared_weights);
  TEST_MAIN_END();
}
