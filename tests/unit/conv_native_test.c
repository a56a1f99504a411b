// The x86 CONV template (issue 15, task convdirect: kir/lower_conv.c,
// jit/emit_conv.c). x86 keeps an f32 conv whole (groups 1, or grouped with
// more than one input channel a group: one GEMM a group); each case
// here is compiled at every ISA tier the host has (host, avx2, sse2) and
// checked against the reference interpreter (f64, rounded once) within
// 1e-4 relative + 2e-6 * K absolute (K = C x taps, the f32 sums' length),
// and through the profile: the conv ran as a kernel of the "conv" template
// (not the pad/im2col/matmul decomposition) and no graph break remains.
// Shapes: odd sizes, 1x1/3x3/7x7 and 1x5/5x1 kernels, stride 2, dilation 2,
// asymmetric pads, pads wider than the kernel reaches, C and O not
// multiples of the tiles, 1D and 3D; the batch symbolic with one
// executable run at N = 3, 1 and 0; followers (relu, a residual add, a
// sigmoid gate, clip, a row-broadcast residual, the conv also an output)
// after it, fused into its kernel as the epilogue (convfuse: one kernel
// in all). Grouped convs (groups 2, 3, 4, 32; odd channels a group; a
// group's channels past one block of 192; the shifted, packed, joined
// and in-place variants; 1D and 3D) take the same checks; grouped_nan
// puts NaN into one group's input and checks it reaches only that group's
// outputs, and tj_verify's observed run.
// conv_oom_sweep fails each allocation of a compile and run in turn.
// nchwc_chains (issue 15): values held blocked (NCHWc) between ocvec convs,
// checked the same way, by tj_verify and in the kernels' dumps, and under
// TJ_LAYOUT=nchw, the stem's shape storing blocks from the shifted variant
// among them (nchwc2); conv_oom_sweep_nchwc sweeps such a chain.

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorjit/tj_executable.h"
#include "tensorjit/tj_graph.h"
#include "tensorjit/tj_tensor.h"
#include "tensorjit/tj_verify.h"
#include "tests/unit/test.h"

enum { kMaxCtx = 3 };
static tj_context_t* g_ctx[kMaxCtx];
static const char* g_isa[kMaxCtx];
static int g_num_ctx;

// Followers, fused into the conv's kernel as its epilogue (convfuse): relu;
// relu(conv + residual); y * sigmoid(y); clip to [0, 6] (relu6); a
// residual broadcast along the rows ([H, 1], whose strides are not
// row-major over the pixels: the epilogue walks one output row at a time);
// the conv also stored as a second output beside relu(y).
typedef enum post_e {
  P_NONE,
  P_RELU,
  P_RESIDUAL,
  P_GATE,
  P_CLIP,
  P_ROWS,
  P_TWO
} post_t;

typedef struct case_t {
  const char* name;
  int32_t n;     // spatial axes
  int64_t c, o;  // channels in, out
  int64_t s[3];  // input spatial sizes
  int64_t k[3];  // kernel
  bool bias;
  post_t post;
  int64_t groups;  // 0: 1
  tj_conv_attrs_t a;
  // The weight a constant of the graph (random, from the test's seed), which
  // the x86 backend prepacks at compile time (tj_kir_t.b_prepacked); else
  // an input, read in place.
  bool wconst;
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
     0,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     false},
    {"3x3_s2_asym",
     2,
     3,
     13,
     {10, 7},
     {3, 3},
     true,
     P_NONE,
     0,
     {.strides = {2, 2}, .pads_begin = {0, 2}, .pads_end = {1, 0}},
     false},
    {"3x3_d2",
     2,
     4,
     6,
     {12, 9},
     {3, 3},
     false,
     P_NONE,
     0,
     {.dilations = {2, 2}, .pads_begin = {2, 1}, .pads_end = {2, 3}},
     false},
    {"7x7_s2_p3",
     2,
     3,
     8,
     {23, 19},
     {7, 7},
     true,
     P_NONE,
     0,
     {.strides = {2, 2}, .pads_begin = {3, 3}, .pads_end = {3, 3}},
     false},
    {"1x1", 2, 17, 9, {5, 6}, {1, 1}, true, P_NONE, 0, {.groups = 0}, false},
    {"1x1_s2",
     2,
     8,
     70,
     {7, 9},
     {1, 1},
     false,
     P_NONE,
     0,
     {.strides = {2, 2}},
     false},
    {"1x5_5x1_wide_pad",
     2,
     6,
     5,
     {4, 8},
     {1, 5},
     true,
     P_NONE,
     0,
     {.strides = {1, 3}, .pads_begin = {2, 4}, .pads_end = {0, 5}},
     false},
    {"many_k",
     2,
     70,
     11,
     {6, 5},
     {3, 3},
     true,
     P_NONE,
     0,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     false},
    {"1d",
     1,
     4,
     9,
     {31},
     {5},
     true,
     P_NONE,
     0,
     {.strides = {2}, .dilations = {2}, .pads_begin = {3}, .pads_end = {1}},
     false},
    {"3d",
     3,
     3,
     5,
     {5, 6, 7},
     {3, 2, 3},
     true,
     P_NONE,
     0,
     {.strides = {1, 2, 1}, .pads_begin = {1, 0, 1}, .pads_end = {1, 1, 0}},
     false},
    {"relu",
     2,
     5,
     9,
     {8, 8},
     {3, 3},
     true,
     P_RELU,
     0,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     false},
    {"residual",
     2,
     6,
     6,
     {7, 9},
     {3, 3},
     true,
     P_RESIDUAL,
     0,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     false},
    {"gate", 2, 4, 7, {6, 5}, {1, 1}, true, P_GATE, 0, {.groups = 0}, false},
    {"clip_s2",
     2,
     7,
     13,
     {11, 9},
     {3, 3},
     true,
     P_CLIP,
     0,
     {.strides = {2, 2}, .pads_begin = {1, 1}, .pads_end = {1, 1}},
     false},
    {"rows_residual",
     2,
     5,
     8,
     {7, 7},
     {3, 3},
     false,
     P_ROWS,
     0,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     false},
    {"two_outputs_1x1",
     2,
     12,
     20,
     {5, 5},
     {1, 1},
     true,
     P_TWO,
     0,
     {.groups = 0},
     false},
    {"1d_residual",
     1,
     6,
     6,
     {40},
     {3},
     true,
     P_RESIDUAL,
     0,
     {.dilations = {3}, .pads_begin = {3}, .pads_end = {3}},
     false},
    {"3d_clip",
     3,
     4,
     7,
     {4, 5, 6},
     {3, 3, 3},
     false,
     P_CLIP,
     0,
     {.strides = {2, 1, 2}, .pads_begin = {1, 1, 1}, .pads_end = {1, 1, 1}},
     false},
    {"many_channels_residual",
     2,
     40,
     200,
     {9, 10},
     {3, 3},
     true,
     P_RESIDUAL,
     0,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     false},
    // Constant weights, prepacked; O past one block of 192 channels with
    // C x taps * pixels small enough that the patches are packed once
    // for all channel blocks (tj_kir_conv_schedule_t.reuse), and not.
    {"const_w_3x3",
     2,
     9,
     13,
     {8, 7},
     {3, 3},
     true,
     P_NONE,
     0,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     true},
    {"const_w_1x1_s2_reuse",
     2,
     24,
     400,
     {14, 13},
     {1, 1},
     true,
     P_RELU,
     0,
     {.strides = {2, 2}},
     true},
    {"const_w_3x3_reuse_residual",
     2,
     30,
     199,
     {6, 9},
     {3, 3},
     false,
     P_RESIDUAL,
     0,
     {.strides = {1, 2}, .pads_begin = {1, 0}, .pads_end = {1, 2}},
     true},
    {"const_w_1x1_direct",
     2,
     33,
     200,
     {5, 7},
     {1, 1},
     true,
     P_CLIP,
     0,
     {.groups = 0},
     true},
    {"in_place_w_reuse",
     2,
     7,
     390,
     {9, 9},
     {3, 3},
     true,
     P_NONE,
     0,
     {.strides = {2, 2}, .pads_begin = {1, 1}, .pads_end = {1, 1}},
     false},
    {"const_w_3d_reuse",
     3,
     5,
     200,
     {3, 4, 5},
     {3, 3, 3},
     true,
     P_RELU,
     0,
     {.pads_begin = {1, 1, 1}, .pads_end = {1, 1, 1}},
     true},
    // A 1x1 kernel with one output position (squeeze-excite's FCs after
    // its global pool; the second strided down to it) decomposes to one
    // GEMM of M = N, not the template's pixel blocks of one pixel.
    {"fc_one_position",
     2,
     37,
     29,
     {1, 1},
     {1, 1},
     true,
     P_RELU,
     0,
     {.groups = 0},
     true},
    {"fc_strided_to_one",
     1,
     19,
     23,
     {4},
     {1},
     false,
     P_NONE,
     0,
     {.strides = {5}},
     false},
    // Grouped (issue 15, grouped): one GEMM a group on the template.
    {"grouped_2",
     2,
     4,
     6,
     {6, 7},
     {3, 3},
     true,
     P_NONE,
     2,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     false},
    {"grouped_4_odd_s2_relu",
     2,
     12,
     20,
     {9, 11},
     {3, 3},
     true,
     P_RELU,
     4,
     {.strides = {2, 2}, .pads_begin = {1, 1}, .pads_end = {1, 1}},
     true},
    // Output rows of 18: the shifted variant (a group's 2 channels).
    {"grouped_32_shifted_residual",
     2,
     64,
     64,
     {16, 18},
     {3, 3},
     true,
     P_RESIDUAL,
     32,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     true},
    {"grouped_3_dilated_clip",
     2,
     15,
     9,
     {11, 13},
     {3, 3},
     false,
     P_CLIP,
     3,
     {.dilations = {2, 2}, .pads_begin = {2, 1}, .pads_end = {1, 3}},
     false},
    {"grouped_1x1_in_place_gate",
     2,
     8,
     12,
     {5, 7},
     {1, 1},
     true,
     P_GATE,
     4,
     {.groups = 0},
     true},
    {"grouped_1x1_s2",
     2,
     6,
     9,
     {7, 9},
     {1, 1},
     false,
     P_NONE,
     3,
     {.strides = {2, 2}},
     false},
    // A group's 200 channels: two channel blocks a group (192 + 8).
    {"grouped_2_blocks_rows",
     2,
     6,
     400,
     {5, 6},
     {3, 3},
     true,
     P_ROWS,
     2,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     true},
    {"grouped_3d_relu",
     3,
     6,
     4,
     {3, 4, 5},
     {3, 3, 3},
     true,
     P_RELU,
     2,
     {.pads_begin = {1, 1, 1}, .pads_end = {1, 1, 1}},
     false},
    {"grouped_1d_s3_two",
     1,
     8,
     8,
     {50},
     {5},
     true,
     P_TWO,
     4,
     {.strides = {3}, .pads_begin = {2}, .pads_end = {4}},
     true},
    // Three convs equal but for where the padding goes (the same output
    // sizes), compiled one after another in one context: their kernels
    // differ only in the window's low pads, which the kernel set's cache
    // key must tell apart (it did not when the key was first made from
    // tj_kir_code_bytes: the second and third ran the first's kernel).
    {"pads_low_2_0",
     2,
     3,
     5,
     {8, 8},
     {3, 3},
     false,
     P_NONE,
     0,
     {.pads_begin = {2, 0}, .pads_end = {0, 2}},
     false},
    {"pads_low_0_2",
     2,
     3,
     5,
     {8, 8},
     {3, 3},
     false,
     P_NONE,
     0,
     {.pads_begin = {0, 2}, .pads_end = {2, 0}},
     false},
    {"pads_low_1_1",
     2,
     3,
     5,
     {8, 8},
     {3, 3},
     false,
     P_NONE,
     0,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     false},
    // x86conv2: O <= 64 with output rows of 14 or more, the padding at
    // most 1/16 of a padded row, reads its patches in place from a padded
    // copy of the image (tj_kir_conv_schedule_t.shifted): more than one
    // block of columns an image (a block's rows cut at its ends), K past
    // one pass of 256, dilation, pads wider than the kernel reaches,
    // asymmetric pads, the epilogue's residual and row-broadcast operands,
    // 1D, C and O not multiples of the tiles.
    {"shifted_3x3",
     2,
     5,
     13,
     {9, 30},
     {3, 3},
     true,
     P_NONE,
     0,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     false},
    {"shifted_const_w_residual",
     2,
     19,
     61,
     {12, 40},
     {3, 3},
     true,
     P_RESIDUAL,
     0,
     {.pads_begin = {2, 0}, .pads_end = {0, 2}},
     true},
    {"shifted_two_passes_relu",
     2,
     40,
     14,
     {10, 40},
     {3, 3},
     false,
     P_RELU,
     0,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     true},
    {"shifted_wide_pads_rows",
     2,
     3,
     8,
     {5, 70},
     {5, 5},
     true,
     P_ROWS,
     0,
     {.pads_begin = {3, 4}, .pads_end = {4, 3}},
     false},
    {"shifted_dilated",
     2,
     6,
     9,
     {11, 80},
     {3, 3},
     false,
     P_CLIP,
     0,
     {.dilations = {2, 2}, .pads_begin = {2, 2}, .pads_end = {2, 2}},
     true},
    {"shifted_1d",
     1,
     6,
     9,
     {130},
     {5},
     true,
     P_NONE,
     0,
     {.dilations = {2}, .pads_begin = {3}, .pads_end = {5}},
     false},
    // Strides 2 to 4: the padded image split into its phases, each tap a
    // shifted phase (the 7x7/2 stem, 3x3/2, a stride 3 beside a dilation).
    {"shifted_7x7_s2",
     2,
     3,
     10,
     {9, 121},
     {7, 7},
     true,
     P_RELU,
     0,
     {.strides = {2, 2}, .pads_begin = {3, 3}, .pads_end = {3, 3}},
     true},
    {"shifted_3x3_s2_asym_residual",
     2,
     7,
     13,
     {11, 40},
     {3, 3},
     true,
     P_RESIDUAL,
     0,
     {.strides = {2, 2}, .pads_begin = {1, 0}, .pads_end = {0, 1}},
     true},
    {"shifted_s1x3_d2",
     2,
     4,
     6,
     {8, 70},
     {3, 3},
     false,
     P_NONE,
     0,
     {.strides = {1, 3},
      .dilations = {1, 2},
      .pads_begin = {1, 2},
      .pads_end = {1, 2}},
     false},
    {"shifted_1d_s2",
     1,
     5,
     7,
     {100},
     {4},
     true,
     P_NONE,
     0,
     {.strides = {2}, .pads_begin = {1}, .pads_end = {2}},
     false},
    // x86conv3: a constant weight of O > 64 channels over the shifted
    // variant's geometry but not its shapes multiplies with the output
    // channels along the vector (tj_kir_conv_schedule_t.ocvec): O not a
    // multiple of the channel panel (zero past O), two channel blocks,
    // several pixel blocks and a partial pixel group, K over several
    // passes, strides, dilation, asymmetric pads, 1D, and every epilogue
    // kind the variant's transposed block feeds.
    {"ocvec_3x3_residual",
     2,
     19,
     70,
     {15, 17},
     {3, 3},
     true,
     P_RESIDUAL,
     0,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     true},
    {"ocvec_two_blocks_s2_relu",
     2,
     40,
     300,
     {13, 9},
     {3, 3},
     false,
     P_RELU,
     0,
     {.strides = {2, 1}, .pads_begin = {0, 2}, .pads_end = {1, 0}},
     true},
    {"ocvec_dilated_rows",
     2,
     5,
     96,
     {11, 20},
     {3, 3},
     true,
     P_ROWS,
     0,
     {.dilations = {2, 2}, .pads_begin = {2, 2}, .pads_end = {2, 2}},
     true},
    {"ocvec_1d_s3_clip",
     1,
     6,
     80,
     {50},
     {5},
     true,
     P_CLIP,
     0,
     {.strides = {3}, .pads_begin = {2}, .pads_end = {4}},
     true},
    {"ocvec_two_outputs",
     2,
     33,
     129,
     {7, 7},
     {3, 3},
     true,
     P_TWO,
     0,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     true},
};

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

// One graph: y = post(conv(x, w, b)), the batch the symbol N.
static tj_graph_t* build(tj_context_t* ctx, const case_t* c, int64_t* xd,
                         int64_t* wd, int64_t* yd) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(ctx, "conv_native", &g)) return NULL;
  const int32_t r = c->n + 2;
  const int64_t groups = def1(c->groups);
  int64_t N = tj_graph_symbol(g, "N");
  xd[0] = N;
  xd[1] = c->c;
  wd[0] = c->o;
  wd[1] = c->c / groups;
  yd[0] = N;
  yd[1] = c->o;
  for (int32_t i = 0; i < c->n; ++i) {
    xd[2 + i] = c->s[i];
    wd[2 + i] = c->k[i];
    yd[2 + i] = out_size(c, i);
  }
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, r, xd, "x");
  tj_value_t w;
  if (c->wconst) {
    int64_t nw = 1;
    for (int32_t i = 0; i < r; ++i) nw *= wd[i];
    float* data = malloc((size_t)nw * sizeof(float));
    for (int64_t i = 0; i < nw; ++i) data[i] = uniform();
    w = tj_graph_constant(g, TJ_DTYPE_F32, r, wd, data,
                          (size_t)nw * sizeof(float));
    free(data);
  } else {
    w = tj_graph_input(g, TJ_DTYPE_F32, r, wd, "w");
  }
  tj_value_t b = {0};
  if (c->bias) b = tj_graph_input(g, TJ_DTYPE_F32, 1, &c->o, "b");
  tj_conv_attrs_t a = c->a;
  a.groups = groups;
  tj_value_t y = tj_graph_conv(g, x, w, b, &a);
  if (c->post == P_RELU) {
    y = tj_graph_relu(g, y);
  } else if (c->post == P_RESIDUAL) {
    tj_value_t res = tj_graph_input(g, TJ_DTYPE_F32, r, yd, "res");
    y = tj_graph_relu(g, tj_graph_add(g, y, res));
  } else if (c->post == P_GATE) {
    y = tj_graph_mul(g, y, tj_graph_sigmoid(g, y));
  } else if (c->post == P_CLIP) {
    tj_value_t zero = tj_graph_scalar(g, TJ_DTYPE_F32, 0.0);
    tj_value_t six = tj_graph_scalar(g, TJ_DTYPE_F32, 6.0);
    y = tj_graph_minimum(g, tj_graph_maximum(g, y, zero), six);
  } else if (c->post == P_ROWS) {
    int64_t rd[2] = {yd[r - 2], 1};
    tj_value_t res = tj_graph_input(g, TJ_DTYPE_F32, 2, rd, "res");
    y = tj_graph_relu(g, tj_graph_add(g, y, res));
  } else if (c->post == P_TWO) {
    tj_graph_output(g, y, "conv");
    y = tj_graph_relu(g, y);
  }
  tj_graph_output(g, y, "y");
  tj_status_t s = tj_graph_finalize(g);
  if (s) {
    fprintf(stderr, "%s: %s\n", c->name, tj_status_message(s));
    tj_status_free(s);
    tj_graph_destroy(g);
    return NULL;
  }
  return g;
}

static int64_t numel(int32_t r, const int64_t* d) {
  int64_t n = 1;
  for (int32_t i = 0; i < r; ++i) n *= d[i];
  return n;
}

static float* random_buffer(int64_t n) {
  float* p = malloc((size_t)(n ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) p[i] = uniform();
  return p;
}

// Whether the profile of |exe| has a kernel of the conv template.
// Whether a kernel of template |detail| ("conv", "gemm") ran.
static bool ran_kernel(tj_executable_t* exe, const tj_tensor_t* ins,
                       int32_t nin, const tj_tensor_t* outs, int32_t nout,
                       const char* detail) {
  tj_profile_report_t* rep = NULL;
  tj_status_t s = tj_executable_profile(exe, ins, nin, outs, nout, 1, &rep);
  if (s) {
    fprintf(stderr, "profile: %s\n", tj_status_message(s));
    tj_status_free(s);
    return false;
  }
  bool found = false;
  for (int32_t i = 0; i < rep->num_entries; ++i) {
    found |= rep->entries[i].kind == TJ_PROFILE_KERNEL &&
             strcmp(rep->entries[i].detail, detail) == 0;
  }
  tj_profile_report_destroy(rep);
  return found;
}

static void run_case(const case_t* c) {
  const int32_t r = c->n + 2;
  int64_t xd[5], wd[5], yd[5];
  int64_t taps = 1;
  for (int32_t i = 0; i < c->n; ++i) taps *= c->k[i];
  const double kk = (double)(c->c / def1(c->groups) * taps);
  int64_t plane = 1;
  for (int32_t i = 0; i < c->n; ++i) plane *= out_size(c, i);
  const bool fc = taps == 1 && plane == 1;
  // Dense or grouped with more than one input channel a group.
  const bool native = (def1(c->groups) == 1 || c->c / c->groups > 1) && !fc;
  for (int ci = 0; ci < g_num_ctx; ++ci) {
    tj_graph_t* g = build(g_ctx[ci], c, xd, wd, yd);
    CHECK(g != NULL);
    if (!g) continue;
    tj_compile_options_t opts = tj_test_x86_options(2);
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &opts, &exe));
    if (!exe) {
      tj_graph_destroy(g);
      continue;
    }
    tj_executable_stats_t stats;
    memset(&stats, 0, sizeof(stats));
    tj_executable_stats(exe, &stats);
    CHECK_EQ_INT(0, stats.num_graph_breaks);
    // The followers are the conv kernel's epilogue: one kernel in all.
    if (native) {
      if (stats.num_kernels != 1)
        fprintf(stderr, "%s on %s: %d kernels\n", c->name, g_isa[ci],
                stats.num_kernels);
      CHECK_EQ_INT(1, stats.num_kernels);
    }
    // One executable, three batches; the last one empty.
    static const int64_t batches[3] = {3, 1, 0};
    for (int bi = 0; bi < 3; ++bi) {
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
      // P_TWO: the conv, then relu of it, side by side.
      const int32_t nout = c->post == P_TWO ? 2 : 1;
      const int64_t nall = ny * nout;
      float* got = calloc((size_t)(nall ? nall : 1), sizeof(float));
      float* want = calloc((size_t)(nall ? nall : 1), sizeof(float));
      tj_tensor_t ins[4];
      int32_t nin = 0;
      ins[nin++] = tj_tensor_make(x, TJ_DTYPE_F32, r, xs);
      if (!c->wconst) ins[nin++] = tj_tensor_make(w, TJ_DTYPE_F32, r, wd);
      if (c->bias) ins[nin++] = tj_tensor_make(b, TJ_DTYPE_F32, 1, &c->o);
      if (c->post == P_RESIDUAL)
        ins[nin++] = tj_tensor_make(res, TJ_DTYPE_F32, r, ys);
      const int64_t rows[2] = {ys[r - 2], 1};
      if (c->post == P_ROWS)
        ins[nin++] = tj_tensor_make(res, TJ_DTYPE_F32, 2, rows);
      tj_tensor_t outs[2], gots[2];
      for (int32_t j = 0; j < nout; ++j) {
        outs[j] = tj_tensor_make(want + j * ny, TJ_DTYPE_F32, r, ys);
        gots[j] = tj_tensor_make(got + j * ny, TJ_DTYPE_F32, r, ys);
      }
      CHECK_OK(tj_reference_run(g, ins, nin, outs, nout));
      CHECK_OK(tj_executable_run(exe, ins, nin, gots, nout));
      int64_t bad = 0, first = -1;
      for (int64_t i = 0; i < nall; ++i) {
        double tol = 1e-4 * fabs((double)want[i]) + 2e-6 * kk;
        if (!(fabs((double)got[i] - (double)want[i]) <= tol)) {
          if (first < 0) first = i;
          ++bad;
        }
      }
      if (bad) {
        fprintf(
            stderr, "%s on %s, N=%lld: %lld of %lld wrong, [%lld] %g vs %g\n",
            c->name, g_isa[ci], (long long)N, (long long)bad, (long long)nall,
            (long long)first, (double)got[first], (double)want[first]);
      }
      CHECK_EQ_INT(0, bad);
      if (bi == 0) {
        // The conv template ran, unless the conv is an FC, which ran as a
        // GEMM.
        bool conv = ran_kernel(exe, ins, nin, gots, nout, "conv");
        if (conv != native)
          fprintf(stderr, "%s on %s: conv kernel %s\n", c->name, g_isa[ci],
                  conv ? "ran" : "did not run");
        CHECK(conv == native);
        if (fc) CHECK(ran_kernel(exe, ins, nin, gots, nout, "gemm"));
      }
      free(x);
      free(w);
      free(b);
      free(res);
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

// TJ_X86_CONV forces the ocvec variant wherever it can take a conv (a
// constant weight: every shape of the table, O < 64, strides 2 to 4, 7x7
// outputs, 1D) or keeps it off (the cases the rule gives it); the
// numbers are checked as in |cases|, at every tier, with contexts made
// under the setting.
TEST(cases_forced) {
  static const char* const kModes[2] = {"ocvec", "packed"};
  tj_context_t* saved[kMaxCtx];
  const char* saved_isa[kMaxCtx];
  memcpy(saved, g_ctx, sizeof(saved));
  memcpy(saved_isa, g_isa, sizeof(saved_isa));
  const int saved_n = g_num_ctx;
  for (int m = 0; m < 2; ++m) {
    setenv("TJ_X86_CONV", kModes[m], 1);
    g_num_ctx = tj_test_tier_contexts(g_ctx, g_isa);
    unsetenv("TJ_X86_CONV");
    for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i) {
      const case_t* c = &kCases[i];
      if (!c->wconst) continue;  // (never prepacked: neither variant)
      if (m == 1 && strncmp(c->name, "ocvec_", 6) != 0) continue;
      run_case(c);
    }
    for (int i = 0; i < g_num_ctx; ++i) tj_context_destroy(g_ctx[i]);
  }
  memcpy(g_ctx, saved, sizeof(saved));
  memcpy(g_isa, saved_isa, sizeof(saved_isa));
  g_num_ctx = saved_n;
}

// A grouped conv (4 groups of 2 input and 3 output channels, a bias, a
// constant weight) with NaN at one pixel of one input channel of group 1:
// on the shifted variant (output rows of 16) and the packed one (stride
// 2), at every tier, batches 2, 1 and 0 of one executable, NaN exactly in
// group 1's outputs whose window covers the pixel (the reference's), the
// rest within tolerance; and tj_verify's observed run clean at batch 2.
TEST(grouped_nan) {
  static const tj_conv_attrs_t kAttrs[2] = {
      {.pads_begin = {1, 1}, .pads_end = {1, 1}},
      {.strides = {2, 2}, .pads_begin = {1, 1}, .pads_end = {1, 1}},
  };
  for (int ai = 0; ai < 2; ++ai) {
    for (int ci = 0; ci < g_num_ctx; ++ci) {
      tj_graph_t* g = NULL;
      CHECK_OK(tj_graph_create(g_ctx[ci], "grouped_nan", &g));
      if (!g) continue;
      const int64_t N = tj_graph_symbol(g, "N");
      const int64_t wd[4] = {12, 2, 3, 3}, bd = 12;
      tj_value_t x =
          tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){N, 8, 10, 16}, "x");
      float wv[12 * 2 * 9];
      for (int i = 0; i < 12 * 18; ++i) wv[i] = uniform();
      tj_value_t w = tj_graph_constant(g, TJ_DTYPE_F32, 4, wd, wv, sizeof(wv));
      tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, &bd, "b");
      tj_conv_attrs_t a = kAttrs[ai];
      a.groups = 4;
      tj_graph_output(g, tj_graph_conv(g, x, w, b, &a), "y");
      CHECK_OK(tj_graph_finalize(g));
      tj_compile_options_t opts = tj_test_x86_options(2);
      tj_executable_t* exe = NULL;
      CHECK_OK(tj_compile(g, &opts, &exe));
      if (!exe) {
        tj_graph_destroy(g);
        continue;
      }
      const int64_t oh = ai ? 5 : 10, ow = ai ? 8 : 16;
      static const int64_t batches[3] = {2, 1, 0};
      for (int bi = 0; bi < 3; ++bi) {
        const int64_t n = batches[bi];
        const int64_t xs[4] = {n, 8, 10, 16}, ys[4] = {n, 12, oh, ow};
        const int64_t nx = numel(4, xs), ny = numel(4, ys);
        float* xv = random_buffer(nx);
        float* bv = random_buffer(12);
        // Channel 3 (group 1), pixel (4, 6) of the last image.
        if (n) xv[(n - 1) * 8 * 160 + 3 * 160 + 4 * 16 + 6] = NAN;
        float* want = calloc((size_t)(ny ? ny : 1), sizeof(float));
        float* got = calloc((size_t)(ny ? ny : 1), sizeof(float));
        tj_tensor_t ins[2] = {tj_tensor_make(xv, TJ_DTYPE_F32, 4, xs),
                              tj_tensor_make(bv, TJ_DTYPE_F32, 1, &bd)};
        tj_tensor_t wo = tj_tensor_make(want, TJ_DTYPE_F32, 4, ys);
        tj_tensor_t go = tj_tensor_make(got, TJ_DTYPE_F32, 4, ys);
        CHECK_OK(tj_reference_run(g, ins, 2, &wo, 1));
        CHECK_OK(tj_executable_run(exe, ins, 2, &go, 1));
        int64_t bad = 0, nans = 0, first = -1;
        for (int64_t i = 0; i < ny; ++i) {
          const int64_t o = i / (oh * ow) % 12;
          if (isnan(want[i])) {
            ++nans;
            // Only group 1's channels (3 to 5) see the NaN.
            if (o < 3 || o > 5) ++bad;
          }
          const bool ok = isnan(want[i])
                              ? isnan(got[i])
                              : fabs((double)got[i] - (double)want[i]) <=
                                    1e-4 * fabs((double)want[i]) + 2e-6 * 18.0;
          if (!ok) {
            if (first < 0) first = i;
            ++bad;
          }
        }
        if (bad) {
          fprintf(stderr,
                  "grouped_nan %d on %s, N=%lld: %lld wrong, [%lld] %g vs "
                  "%g\n",
                  ai, g_isa[ci], (long long)n, (long long)bad, (long long)first,
                  (double)got[first], (double)want[first]);
        }
        CHECK_EQ_INT(0, bad);
        CHECK(n == 0 || nans > 0);
        if (n == 2) {
          CHECK(ran_kernel(exe, ins, 2, &go, 1, "conv"));
          tj_verify_options_t vo;
          tj_verify_options_initialize(&vo);
          tj_verify_report_t* rep = NULL;
          CHECK_OK(tj_verify(exe, g, ins, 2, &vo, &rep));
          if (rep && (rep->verdict != TJ_VERIFY_CLEAN || !rep->boundaries))
            fprintf(stderr, "grouped_nan %d on %s: %s\n", ai, g_isa[ci],
                    rep->text);
          CHECK(rep && rep->verdict == TJ_VERIFY_CLEAN && rep->boundaries);
          tj_verify_report_destroy(rep);
        }
        free(xv);
        free(bv);
        free(want);
        free(got);
      }
      tj_executable_release(exe);
      tj_graph_destroy(g);
    }
  }
}

static char* dumped_kir(const char* dir) {
  char* all = calloc(1, 1);
  size_t len = 0;
  DIR* d = opendir(dir);
  struct dirent* e;
  while (d && (e = readdir(d)) != NULL) {
    size_t nl = strlen(e->d_name);
    if (nl < 4 || strcmp(e->d_name + nl - 4, ".kir") != 0) continue;
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    FILE* f = fopen(path, "rb");
    if (!f) continue;
    char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), f)) > 0) {
      all = realloc(all, len + got + 1);
      memcpy(all + len, buf, got);
      len += got;
      all[len] = '\0';
    }
    fclose(f);
  }
  if (d) closedir(d);
  return all;
}

// A constant weight is prepacked at compile time (the kernel is marked
// w_prepacked), an input weight is read in place (not marked); both
// kernels carry their followers as the epilogue (a map phase storing the
// relu, no separate pointwise kernel).
TEST(prepacked_weight_marked) {
  for (int wc = 0; wc < 2; ++wc) {
    char dir[] = "/tmp/tj_conv_native_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    tj_context_options_t co;
    tj_context_options_initialize(&co);
    co.dump_dir = dir;
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_context_create(&co, &ctx));
    case_t c = kCases[0];
    c.wconst = wc == 1;
    c.post = P_RELU;
    int64_t xd[5], wd[5], yd[5];
    tj_graph_t* g = ctx ? build(ctx, &c, xd, wd, yd) : NULL;
    CHECK(g != NULL);
    tj_compile_options_t opts = tj_test_x86_options(1);
    tj_executable_t* exe = NULL;
    if (g) CHECK_OK(tj_compile(g, &opts, &exe));
    char* kir = dumped_kir(dir);
    char cname[32];
    snprintf(cname, sizeof(cname), " c %" PRId64 " ", c.c);
    CHECK(strstr(kir, cname) != NULL);  // the conv kernel was dumped
    CHECK_EQ_INT(wc, strstr(kir, "w_prepacked") != NULL);
    CHECK(strstr(kir, "acc") != NULL);
    CHECK(strstr(kir, "pointwise") == NULL);
    free(kir);
    tj_executable_release(exe);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
    tj_test_remove_tree(dir);
  }
}

// The rule (tj_kir_conv_ocvec_rule) gives the ocvec variant to a constant
// weight at stride 1 with O >= 64 and output rows of 14 or more (the
// kernel is marked ocvec); not to an input weight, nor under
// TJ_X86_CONV=packed, nor at 7x7 outputs, nor at stride 2 (r18c: a stem of
// 3 input channels takes it for a blocked output alone; this one's output
// is the graph's, row-major, so it goes back to the shifted variant), where
// TJ_X86_CONV=ocvec still puts it.
TEST(ocvec_variant_marked) {
  static const struct {
    int64_t o, side;
    bool wconst;
    const char* setting;
    bool ocvec;
    int64_t c, stride;  // 0: kCases[0]'s
  } kRows[] = {{64, 16, true, NULL, true, 0, 0},
               {96, 14, true, NULL, true, 0, 0},
               {96, 14, false, NULL, false, 0, 0},
               {96, 14, true, "packed", false, 0, 0},
               {96, 7, true, NULL, false, 0, 0},
               {48, 16, true, NULL, false, 0, 0},
               {48, 7, true, "ocvec", true, 0, 0},
               {64, 32, true, NULL, false, 3, 2},
               {64, 32, true, "ocvec", true, 3, 2},
               {64, 32, false, "ocvec", false, 3, 2}};
  for (size_t i = 0; i < sizeof(kRows) / sizeof(kRows[0]); ++i) {
    char dir[] = "/tmp/tj_conv_native_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    if (kRows[i].setting) setenv("TJ_X86_CONV", kRows[i].setting, 1);
    tj_context_options_t co;
    tj_context_options_initialize(&co);
    co.dump_dir = dir;
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_context_create(&co, &ctx));
    unsetenv("TJ_X86_CONV");
    case_t c = kCases[0];
    c.o = kRows[i].o;
    c.s[0] = c.s[1] = kRows[i].side;
    c.wconst = kRows[i].wconst;
    if (kRows[i].c) c.c = kRows[i].c;
    if (kRows[i].stride) {
      c.a.strides[0] = c.a.strides[1] = kRows[i].stride;
    }
    int64_t xd[5], wd[5], yd[5];
    tj_graph_t* g = ctx ? build(ctx, &c, xd, wd, yd) : NULL;
    CHECK(g != NULL);
    tj_compile_options_t opts = tj_test_x86_options(1);
    tj_executable_t* exe = NULL;
    if (g) CHECK_OK(tj_compile(g, &opts, &exe));
    char* kir = dumped_kir(dir);
    char cname[32];
    snprintf(cname, sizeof(cname), " c %" PRId64 " ", c.c);
    CHECK(strstr(kir, cname) != NULL);  // the conv kernel was dumped
    if ((strstr(kir, " ocvec") != NULL) != kRows[i].ocvec)
      fprintf(stderr, "ocvec_variant_marked row %zu: ocvec %s\n", i,
              kRows[i].ocvec ? "missing" : "taken");
    CHECK_EQ_INT(kRows[i].ocvec, strstr(kir, " ocvec") != NULL);
    free(kir);
    tj_executable_release(exe);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
    tj_test_remove_tree(dir);
  }
}

// nchwc (issue 15): a value that an ocvec conv writes and only ocvec convs
// read, as their x or as a residual of their output's shape, is held
// blocked between them ([N][C / w][H][W][w], w the tier's lanes:
// nchwc_assign in backends/x86/x86_program.c): chains of two and three
// convs (conv -> relu -> conv), channels that the lanes do not divide at
// some tiers (72 at 16 lanes: that value stays row-major), a residual join
// (the last conv adds relu(conv 0), read blocked by its epilogue), a skip
// (conv 1 adds the chain's row-major input, gathered by an epilogue that
// stores blocked), a max pool that reads relu(conv 0) too (it stays
// row-major: the pool's output is a graph output, which stays row-major,
// and a pool reads blocks only where it writes them), resnet's stem (7x7/2
// 3-64, r18c: on the ocvec variant where it stores blocks, else the shifted
// one) storing blocks for a conv's x and residual,
// a max pool between convs that reads and writes blocks (r18: the stem ->
// max pool -> basic block of resnet; a NaN in x, which must come through
// the pool), and TJ_LAYOUT=nchw, which blocks nothing. Each chain is compiled
// at every tier, its blocked values counted in the kernels' dumps ("yblock w"
// on the producer, "xblock w" on each conv or pool reading it as x, "inblock"
// on each reading it as a residual), and checked against the reference at
// batches 2, 1 and 0, and by tj_verify (its observer sees the blocked values
// row-major).
typedef struct chain_t {
  const char* name;
  int64_t c, h, w;
  int64_t o[3];   // the convs' output channels; 0: fewer convs
  bool join;      // the last conv adds relu(conv 0) (a residual join)
  bool skip;      // conv 1 adds x (c == o[1])
  bool pool;      // relu(conv 0) is max-pooled too, a second output
  int64_t k0;     // conv 0's window, stride 2, pads k0 / 2 (0: 3x3/1, pads
                  // 1): the stem's shape, stored blocked from the shifted
                  // variant, or a strided 3x3 on the packed one (nchwc2)
  bool down;      // the last conv adds a 1x1/2 conv of x (resnet's
                  // downsample, packed, stored blocked for the residual)
  int64_t mpool;  // r18: relu(conv 0) max-pooled 3x3 at this stride, pads
                  // 1, before conv 1 (and the join's residual), read and
                  // written blocked (resnet's stem -> max pool -> layer1)
} chain_t;

static const chain_t kChains[] = {
    {"two", 24, 15, 17, {64, 64, 0}, false, false, false, 0, false, 0},
    {"three_odd", 16, 14, 18, {72, 64, 80}, false, false, false, 0, false, 0},
    {"join", 16, 14, 16, {64, 64, 0}, true, false, false, 0, false, 0},
    {"skip", 64, 14, 15, {80, 64, 96}, false, true, false, 0, false, 0},
    {"pool", 16, 16, 14, {64, 64, 0}, false, false, true, 0, false, 0},
    // nchwc2: resnet's stem (7x7/2 from 3 channels, rows of 45) writing
    // blocks to a 3x3 conv (r18c: from the ocvec variant), and to a max
    // pool whose output is a graph output (row-major: so is its x, and the
    // stem takes the shifted variant).
    {"stem", 3, 19, 90, {64, 64, 0}, false, false, false, 7, false, 0},
    {"stem_pool", 3, 19, 90, {64, 64, 0}, false, false, true, 7, false, 0},
    {"stem_three", 3, 17, 92, {64, 80, 64}, true, false, false, 7, false, 0},
    // nchwc2: resnet's first block of a stage: a 3x3/2 (r18c: on the ocvec
    // variant, packed before) and a 1x1/2 downsample (packed, its pixel
    // blocks joined across images) storing blocks for the second conv's x
    // and residual.
    {"down", 16, 30, 29, {80, 80, 0}, false, false, false, 3, true, 0},
    {"down_three", 32, 28, 28, {96, 64, 64}, false, false, false, 3, true, 0},
    // r18: a max pool between convs reading and writing blocks: resnet's
    // stem -> max pool 3x3/2 -> a basic block (its residual the pool's
    // output), odd sizes; a 3x3/1 pool between two 3x3 convs.
    {"stem_mpool", 3, 21, 90, {64, 64, 64}, true, false, false, 7, false, 2},
    {"mpool_one", 16, 13, 17, {64, 80, 0}, false, false, false, 0, false, 1},
};

// The spatial size after conv 0 of |ch| from |in| (and the max pool after
// it with |mpool|).
static int64_t chain_out(const chain_t* ch, int64_t in) {
  const int64_t c0 = ch->k0 ? (in + 2 * (ch->k0 / 2) - ch->k0) / 2 + 1 : in;
  return ch->mpool ? (c0 - 1) / ch->mpool + 1 : c0;
}

// The graph of |ch|: y = relu(conv_k(... relu(conv_0(x)) ...)), the last
// conv adding relu(conv 0) before its relu with |join|, conv 1 adding x
// with |skip|; the convs 3x3 with pads 1 and constant weights and biases;
// with |pool| also max_pool(relu(conv 0)).
// |fixed| >= 0: a constant batch of that many images, else a symbolic one.
static tj_graph_t* build_chain(tj_context_t* ctx, const chain_t* ch,
                               int64_t fixed) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(ctx, "nchwc_chain", &g)) return NULL;
  int64_t N = fixed >= 0 ? fixed : tj_graph_symbol(g, "N");
  tj_value_t v = tj_graph_input(g, TJ_DTYPE_F32, 4,
                                (int64_t[]){N, ch->c, ch->h, ch->w}, "x");
  tj_value_t x = v, first = v;
  int64_t cin = ch->c;
  for (int i = 0; i < 3 && ch->o[i]; ++i) {
    const int64_t o = ch->o[i];
    const int64_t kk = i == 0 && ch->k0 ? ch->k0 : 3;
    const int64_t st = i == 0 && ch->k0 ? 2 : 1;
    const int64_t nw = o * cin * kk * kk;
    float* wv = random_buffer(nw);
    for (int64_t j = 0; j < nw; ++j) wv[j] *= 0.2f;
    float* bv = random_buffer(o);
    tj_value_t w =
        tj_graph_constant(g, TJ_DTYPE_F32, 4, (int64_t[]){o, cin, kk, kk}, wv,
                          (size_t)nw * sizeof(float));
    tj_value_t b = tj_graph_constant(g, TJ_DTYPE_F32, 1, &o, bv,
                                     (size_t)o * sizeof(float));
    free(wv);
    free(bv);
    tj_conv_attrs_t a = {.kernel = {kk, kk},
                         .strides = {st, st},
                         .pads_begin = {kk / 2, kk / 2},
                         .pads_end = {kk / 2, kk / 2}};
    v = tj_graph_conv(g, v, w, b, &a);
    const bool last = i == 2 || !ch->o[i + 1];
    if (last && ch->join) v = tj_graph_add(g, v, first);
    if (last && ch->down) {
      const int64_t nd = o * ch->c;
      float* dv = random_buffer(nd);
      tj_value_t dw =
          tj_graph_constant(g, TJ_DTYPE_F32, 4, (int64_t[]){o, ch->c, 1, 1}, dv,
                            (size_t)nd * sizeof(float));
      free(dv);
      tj_conv_attrs_t da = {.kernel = {1, 1}, .strides = {2, 2}};
      v = tj_graph_add(g, v, tj_graph_conv(g, x, dw, (tj_value_t){0}, &da));
    }
    if (i == 1 && ch->skip) v = tj_graph_add(g, v, x);
    v = tj_graph_relu(g, v);
    if (i == 0 && ch->mpool) {
      tj_conv_attrs_t pa = {.kernel = {3, 3},
                            .strides = {ch->mpool, ch->mpool},
                            .pads_begin = {1, 1},
                            .pads_end = {1, 1}};
      v = tj_graph_max_pool(g, v, &pa);
    }
    if (i == 0) first = v;
    cin = o;
  }
  tj_graph_output(g, v, "y");
  if (ch->pool) {
    tj_conv_attrs_t pa = {.kernel = {3, 3},
                          .strides = {2, 2},
                          .pads_begin = {1, 1},
                          .pads_end = {1, 1}};
    tj_graph_output(g, tj_graph_max_pool(g, first, &pa), "pool");
  }
  tj_status_t fs = tj_graph_finalize(g);
  if (fs) {
    fprintf(stderr, "nchwc %s: %s\n", ch->name, tj_status_message(fs));
    tj_status_free(fs);
    tj_graph_destroy(g);
    return NULL;
  }
  return g;
}

// The values of |ch| held blocked at |lanes| lanes: each conv's relu that
// the next conv reads (and with |join| the last one's residual), both
// convs' channels multiples of the lanes, no pool reading it, and with
// |down| the downsample the last conv adds; how many of them a conv reads
// as x (|*xs|) and as a residual (|*residuals|).
static int chain_blocked(const chain_t* ch, int64_t lanes, bool nchw, int* xs,
                         int* residuals) {
  int n = 0, last = 0;
  *residuals = *xs = 0;
  for (int i = 0; i < 3 && ch->o[i]; ++i) last = ch->o[i];
  for (int i = 0; i + 1 < 3 && ch->o[i + 1]; ++i) {
    if ((i == 0 && ch->pool) || nchw || ch->o[i] % lanes != 0) continue;
    ++n;
    ++*xs;
    if (i == 0 && ch->mpool) {  // the pool's output, read by conv 1
      ++n;
      ++*xs;
    }
    if (i == 0 && ch->join) ++*residuals;
  }
  if (ch->down && !nchw && last % lanes == 0) {
    ++n;
    ++*residuals;
  }
  return n;
}

static int count_of(const char* text, const char* what) {
  int n = 0;
  for (const char* p = strstr(text, what); p; p = strstr(p + 1, what)) ++n;
  return n;
}

// A tier's vector lanes: the host's 16 where the x86 JIT takes AVX-512
// (avx512f, bw, dq and vl), else 8 (AVX2); avx2 8; sse2 4.
static int64_t tier_lanes(const char* isa) {
  if (strcmp(isa, "sse2") == 0) return 4;
  if (strcmp(isa, "avx2") == 0) return 8;
  return __builtin_cpu_supports("avx512f") &&
                 __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("avx512vl")
             ? 16
             : 8;
}

static void run_chain(const chain_t* ch, bool nchw) {
  static const char* isas[] = {"host", "avx2", "sse2"};
  for (int ti = 0; ti < tj_test_tiers(3); ++ti) {
    if (ti == 1 && !__builtin_cpu_supports("avx512f")) continue;
    char dir[] = "/tmp/tj_conv_nchwc_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    if (nchw) setenv("TJ_LAYOUT", "nchw", 1);
    tj_context_options_t co;
    tj_context_options_initialize(&co);
    co.dump_dir = dir;
    co.x86_isa = isas[ti];
    co.log = "";
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_context_create(&co, &ctx));
    unsetenv("TJ_LAYOUT");
    tj_graph_t* g = ctx ? build_chain(ctx, ch, -1) : NULL;
    CHECK(g != NULL);
    tj_compile_options_t opts = tj_test_x86_options(2);
    tj_executable_t* exe = NULL;
    if (g) CHECK_OK(tj_compile(g, &opts, &exe));
    char* kir = dumped_kir(dir);
    const int64_t lanes = tier_lanes(isas[ti]);
    char yb[32], xb[32];
    snprintf(yb, sizeof(yb), " yblock %" PRId64, lanes);
    snprintf(xb, sizeof(xb), " xblock %" PRId64, lanes);
    int res = 0, xs = 0;
    const int want = chain_blocked(ch, lanes, nchw, &xs, &res);
    if (count_of(kir, yb) != want || count_of(kir, xb) != xs ||
        count_of(kir, " inblock ") != res ||
        count_of(kir, "block ") != want + xs + res) {
      fprintf(stderr,
              "nchwc %s on %s: %d blocked outputs, %d x, %d residuals; want "
              "%d, %d, %d\n",
              ch->name, isas[ti], count_of(kir, yb), count_of(kir, xb),
              count_of(kir, " inblock "), want, xs, res);
    }
    CHECK_EQ_INT(want, count_of(kir, yb));
    CHECK_EQ_INT(xs, count_of(kir, xb));
    CHECK_EQ_INT(res, count_of(kir, " inblock "));
    CHECK_EQ_INT(want + xs + res, count_of(kir, "block "));
    // r18c: conv 0 at stride 2 (the stem, 7x7/2 from 3 channels, or a
    // 3x3/2) takes the ocvec variant exactly where its output is stored
    // blocked (its channel vectors straight from the tiles) and the rule's
    // O >= 64 and rows of 14 or more hold, else the shifted or packed one.
    if (ch->k0) {
      char what[32];
      snprintf(what, sizeof(what), "kernel %" PRId64 "x%" PRId64 " stride 2x2",
               ch->k0, ch->k0);
      const char* line = strstr(kir, what);
      const char* end = line ? strchr(line, '\n') : NULL;
      const char* head = line;
      while (head && head > kir && head[-1] != '\n') --head;
      const char* oc = head ? strstr(head, " ocvec") : NULL;
      const int64_t w0 = (ch->w + 2 * (ch->k0 / 2) - ch->k0) / 2 + 1;
      const bool blocked = !nchw && !ch->pool && ch->o[0] % lanes == 0 &&
                           ch->o[0] >= 64 && w0 >= 14;
      const bool ocvec = oc && end && oc < end;
      if (ocvec != blocked)
        fprintf(stderr, "nchwc %s on %s: conv 0 %s ocvec\n", ch->name, isas[ti],
                ocvec ? "took" : "did not take");
      CHECK(line != NULL);
      CHECK_EQ_INT(blocked, ocvec);
    }
    free(kir);
    static const int64_t batches[3] = {2, 1, 0};
    for (int bi = 0; bi < 3 && exe; ++bi) {
      const int64_t N = batches[bi];
      int64_t last = 0;
      for (int i = 0; i < 3 && ch->o[i]; ++i) last = ch->o[i];
      const int64_t h1 = chain_out(ch, ch->h), w1 = chain_out(ch, ch->w);
      const int64_t nx = N * ch->c * ch->h * ch->w;
      const int64_t ny = N * last * h1 * w1;
      const int64_t ph = (h1 - 1) / 2 + 1, pw = (w1 - 1) / 2 + 1;
      const int64_t np = N * ch->o[0] * ph * pw;
      float* x = random_buffer(nx);
      // With a max pool between convs, a NaN in the middle of image 0's
      // channel 0: it reaches the pool through conv 0 and must come out of
      // it (a blocked pool's maxima put the NaN in at the end).
      if (ch->mpool && N > 0) x[(ch->h / 2) * ch->w + ch->w / 2] = NAN;
      float* want_y = calloc((size_t)(ny + np + 1), sizeof(float));
      float* got_y = calloc((size_t)(ny + np + 1), sizeof(float));
      tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 4,
                                      (int64_t[]){N, ch->c, ch->h, ch->w});
      const int32_t nout = ch->pool ? 2 : 1;
      tj_tensor_t outs[2], gots[2];
      const int64_t yd[4] = {N, last, h1, w1};
      const int64_t pd[4] = {N, ch->o[0], ph, pw};
      outs[0] = tj_tensor_make(want_y, TJ_DTYPE_F32, 4, yd);
      gots[0] = tj_tensor_make(got_y, TJ_DTYPE_F32, 4, yd);
      outs[1] = tj_tensor_make(want_y + ny, TJ_DTYPE_F32, 4, pd);
      gots[1] = tj_tensor_make(got_y + ny, TJ_DTYPE_F32, 4, pd);
      CHECK_OK(tj_reference_run(g, &in, 1, outs, nout));
      CHECK_OK(tj_executable_run(exe, &in, 1, gots, nout));
      const int64_t nall = ny + (ch->pool ? np : 0);
      int64_t bad = 0, firstbad = -1;
      for (int64_t i = 0; i < nall; ++i) {
        // Two or three sums of K = C x 9 terms each (the stem's 147).
        double tol = 1e-4 * fabs((double)want_y[i]) + 4e-6 * 9.0 * 80.0;
        if (isnan(want_y[i]) && isnan(got_y[i])) continue;
        if (!(fabs((double)got_y[i] - (double)want_y[i]) <= tol)) {
          if (firstbad < 0) firstbad = i;
          ++bad;
        }
      }
      if (bad) {
        fprintf(stderr,
                "nchwc %s on %s, N=%lld: %lld of %lld wrong, [%lld] %g vs %g\n",
                ch->name, isas[ti], (long long)N, (long long)bad,
                (long long)nall, (long long)firstbad, (double)got_y[firstbad],
                (double)want_y[firstbad]);
      }
      CHECK_EQ_INT(0, bad);
      // tj_verify's observed run sees every value row-major, the blocked
      // ones too: every boundary within budget.
      if (N == 2) {
        tj_verify_options_t vo;
        tj_verify_options_initialize(&vo);
        tj_verify_report_t* rep = NULL;
        CHECK_OK(tj_verify(exe, g, &in, 1, &vo, &rep));
        if (rep && (rep->verdict != TJ_VERIFY_CLEAN || !rep->boundaries))
          fprintf(stderr, "nchwc %s on %s: %s\n", ch->name, isas[ti],
                  rep->text);
        CHECK(rep && rep->verdict == TJ_VERIFY_CLEAN && rep->boundaries);
        tj_verify_report_destroy(rep);
      }
      free(x);
      free(want_y);
      free(got_y);
    }
    tj_executable_release(exe);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
    tj_test_remove_tree(dir);
  }
}

TEST(nchwc_chains) {
  for (size_t i = 0; i < sizeof(kChains) / sizeof(kChains[0]); ++i)
    run_chain(&kChains[i], false);
  run_chain(&kChains[0], true);  // TJ_LAYOUT=nchw: nothing blocked
  run_chain(&kChains[1], true);
  run_chain(&kChains[5], true);   // the stem: nothing blocked
  run_chain(&kChains[8], true);   // a stage's first block: nothing blocked
  run_chain(&kChains[10], true);  // stem -> max pool: nothing blocked
}

// conv16: the conv kernels of a compile's dump (their .tune.txt): each
// kernel's name, its units at the graph's batch (-1: a symbolic batch),
// whether the x86 backend made its blocks smaller (balance_conv_units:
// "asked" oc or nc not 0) and the batch from which it takes the default
// ones again (a symbolic batch; 0: none).
typedef struct tuned_t {
  char name[128];
  long long units;
  bool balanced;
  int from;
} tuned_t;

static int tuned_convs(const char* dir, tuned_t* out, int max) {
  int n = 0;
  DIR* d = opendir(dir);
  struct dirent* e;
  while (d && (e = readdir(d)) != NULL && n < max) {
    size_t nl = strlen(e->d_name);
    if (nl < 9 || strcmp(e->d_name + nl - 9, ".tune.txt") != 0) continue;
    char path[1024], text[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    FILE* f = fopen(path, "rb");
    if (!f) continue;
    size_t got = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[got] = '\0';
    const char* cs = strstr(text, "conv schedule:");
    const char* asked = cs ? strstr(cs, "(asked: oc ") : NULL;
    const char* launch = strstr(text, "launch: ");
    int aoc = 0, anc = 0;
    tuned_t* t = &out[n];
    if (!asked || !launch ||
        sscanf(asked, "(asked: oc %d nc %d below batch %d", &aoc, &anc,
               &t->from) != 3 ||
        sscanf(text, "kernel %127s", t->name) != 1) {
      continue;
    }
    if (sscanf(launch, "launch: %lld units", &t->units) != 1) t->units = -1;
    t->balanced = aoc != 0 || anc != 0;
    ++n;
  }
  if (d) closedir(d);
  return n;
}

// The chain's output at |n| images from |exe| against the reference, and
// with |verify| every boundary by tj_verify.
static void check_chain_run(const chain_t* ch, tj_graph_t* g,
                            tj_executable_t* exe, int64_t n, bool verify,
                            const char* isa) {
  int64_t last = 0;
  for (int i = 0; i < 3 && ch->o[i]; ++i) last = ch->o[i];
  const int64_t h1 = chain_out(ch, ch->h), w1 = chain_out(ch, ch->w);
  const int64_t nx = n * ch->c * ch->h * ch->w, ny = n * last * h1 * w1;
  float* x = random_buffer(nx);
  float* want_y = calloc((size_t)ny, sizeof(float));
  float* got_y = calloc((size_t)ny, sizeof(float));
  tj_tensor_t in =
      tj_tensor_make(x, TJ_DTYPE_F32, 4, (int64_t[]){n, ch->c, ch->h, ch->w});
  const int64_t yd[4] = {n, last, h1, w1};
  tj_tensor_t out = tj_tensor_make(want_y, TJ_DTYPE_F32, 4, yd);
  tj_tensor_t got = tj_tensor_make(got_y, TJ_DTYPE_F32, 4, yd);
  CHECK_OK(tj_reference_run(g, &in, 1, &out, 1));
  CHECK_OK(tj_executable_run(exe, &in, 1, &got, 1));
  int64_t bad = 0, firstbad = -1;
  for (int64_t i = 0; i < ny; ++i) {
    double tol = 1e-4 * fabs((double)want_y[i]) + 4e-6 * 9.0 * 256.0;
    if (!(fabs((double)got_y[i] - (double)want_y[i]) <= tol)) {
      if (firstbad < 0) firstbad = i;
      ++bad;
    }
  }
  if (bad) {
    fprintf(stderr,
            "balance %s on %s, N=%lld: %lld of %lld wrong, [%lld] %g vs %g\n",
            ch->name, isa, (long long)n, (long long)bad, (long long)ny,
            (long long)firstbad, (double)got_y[firstbad],
            (double)want_y[firstbad]);
  }
  CHECK_EQ_INT(0, bad);
  if (verify) {
    tj_verify_options_t vo;
    tj_verify_options_initialize(&vo);
    tj_verify_report_t* rep = NULL;
    CHECK_OK(tj_verify(exe, g, &in, 1, &vo, &rep));
    if (rep && rep->verdict != TJ_VERIFY_CLEAN)
      fprintf(stderr, "balance %s on %s: %s\n", ch->name, isa, rep->text);
    CHECK(rep && rep->verdict == TJ_VERIFY_CLEAN);
    tj_verify_report_destroy(rep);
  }
  free(x);
  free(want_y);
  free(got_y);
}

// conv16: with threads enough, a conv whose default units at batch 1 are
// fewer than two a thread takes smaller channel or pixel blocks, and the
// values blocked at one thread (which keeps the default) are still
// blocked. A constant batch |n| (0, 1 or 2) gives it more units than at
// one thread, checked at 16 threads; a symbolic one (|n| < 0), checked at
// 3, keeps the default blocks from the batch that gives them two units a
// thread, and runs at 1 image (the smaller blocks), at that batch less one
// and at that batch (the default ones). The numbers against the reference
// and tj_verify, every tier.
static void run_balanced(const chain_t* ch, int64_t n) {
  static const char* isas[] = {"host", "avx2", "sse2"};
  const int32_t threads = n < 0 ? 3 : 16;
  for (int ti = 0; ti < tj_test_tiers(3); ++ti) {
    if (ti == 1 && !__builtin_cpu_supports("avx512f")) continue;
    enum { kMaxTuned = 32 };
    tuned_t tuned[2][kMaxTuned];
    int nt[2] = {0, 0};
    tj_executable_t* exe = NULL;
    tj_graph_t* g = NULL;
    tj_context_t* ctx = NULL;
    int yblocks[2] = {-1, -1};
    for (int run = 0; run < 2; ++run) {  // 1 thread, then |threads|
      char dir[] = "/tmp/tj_conv_units_XXXXXX";
      CHECK(mkdtemp(dir) != NULL);
      tj_context_options_t co;
      tj_context_options_initialize(&co);
      co.dump_dir = dir;
      co.x86_isa = isas[ti];
      co.log = "";
      tj_context_t* c = NULL;
      CHECK_OK(tj_context_create(&co, &c));
      tj_graph_t* gg = c ? build_chain(c, ch, n) : NULL;
      CHECK(gg != NULL);
      tj_compile_options_t opts = tj_test_x86_options(run ? threads : 1);
      tj_executable_t* e = NULL;
      if (gg) CHECK_OK(tj_compile(gg, &opts, &e));
      nt[run] = tuned_convs(dir, tuned[run], kMaxTuned);
      char* kir = dumped_kir(dir);
      yblocks[run] = count_of(kir, " yblock ");
      free(kir);
      if (run == 1) {
        exe = e;
        g = gg;
        ctx = c;
      } else {
        tj_executable_release(e);
        tj_graph_destroy(gg);
        tj_context_destroy(c);
      }
      tj_test_remove_tree(dir);
    }
    // The same values blocked as at one thread (a constant batch of 0
    // leaves no kernel to run).
    CHECK_EQ_INT(yblocks[0], yblocks[1]);
    if (n != 0) CHECK(nt[0] > 0);
    CHECK_EQ_INT(nt[0], nt[1]);
    int balanced = 0;
    int64_t batches[8] = {1};
    int nb = 1;
    for (int i = 0; i < nt[1]; ++i) {
      const tuned_t* t = &tuned[1][i];
      const tuned_t* base = NULL;
      for (int j = 0; j < nt[0]; ++j) {
        if (strcmp(tuned[0][j].name, t->name) == 0) base = &tuned[0][j];
      }
      CHECK(base != NULL);
      if (!base) continue;
      CHECK(!base->balanced);
      if (getenv("TJ_TEST_VERBOSE") && t->balanced)
        fprintf(stderr,
                "balance %s on %s, N=%lld: %s %lld -> %lld units, default "
                "from batch %d\n",
                ch->name, isas[ti], (long long)n, t->name, base->units,
                t->units, t->from);
      if (!t->balanced) continue;
      ++balanced;
      if (n >= 0) {
        CHECK(base->units < 2 * threads);
        CHECK(t->units > base->units);
        CHECK_EQ_INT(0, t->from);
        continue;
      }
      CHECK(t->from >= 2);
      for (int64_t b = t->from - 1; b <= t->from && nb < 8; ++b) {
        bool seen = false;
        for (int j = 0; j < nb; ++j) seen |= batches[j] == b;
        if (!seen) batches[nb++] = b;
      }
    }
    // At batches 1 and 2 every chain here has a conv of too few units; at
    // 2 and a symbolic batch the basic block's value between its convs is
    // blocked.
    if (n != 0) CHECK(balanced > 0);
    if ((n < 0 || n == 2) && ch->join) CHECK(yblocks[1] > 0);
    if (n >= 0) batches[0] = n;
    for (int j = 0; exe && n != 0 && j < nb; ++j)
      check_chain_run(ch, g, exe, batches[j], j == 0, isas[ti]);
    tj_executable_release(exe);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
  }
}

// resnet18's layer3 and layer4 shapes at half the channels: a basic block
// at 14x14 (two ocvec 3x3s of 128 channels and the join, blocked between
// them but at a constant batch of 1), and a stage's first block into 7x7
// (a packed, joined 3x3/2 128-256, a packed 3x3 256-256 and the 1x1/2
// downsample; nothing blocked, the 7x7 conv not ocvec).
static const chain_t kBalanceChains[] = {
    {"block14", 128, 14, 14, {128, 128, 0}, true, false, false, 0, false, 0},
    {"down7", 128, 14, 14, {256, 256, 0}, false, false, false, 3, true, 0},
};

TEST(balanced_units) {
  for (size_t i = 0; i < sizeof(kBalanceChains) / sizeof(kBalanceChains[0]);
       ++i) {
    for (int64_t n = -1; n < 3; ++n) run_balanced(&kBalanceChains[i], n);
  }
}

// A wrong input shape at run time is an error naming the input, not a
// crash.
TEST(bad_input_shape) {
  int64_t xd[5], wd[5], yd[5];
  tj_graph_t* g = build(g_ctx[0], &kCases[0], xd, wd, yd);
  CHECK(g != NULL);
  if (!g) return;
  tj_compile_options_t opts = tj_test_x86_options(1);
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  static float x[2 * 4 * 9 * 11], w[7 * 5 * 9], b[7], y[2 * 7 * 9 * 11];
  tj_tensor_t ins[3] = {
      tj_tensor_make(x, TJ_DTYPE_F32, 4, (int64_t[]){2, 4, 9, 11}),
      tj_tensor_make(w, TJ_DTYPE_F32, 4, (int64_t[]){7, 5, 3, 3}),
      tj_tensor_make(b, TJ_DTYPE_F32, 1, (int64_t[]){7})};
  tj_tensor_t out =
      tj_tensor_make(y, TJ_DTYPE_F32, 4, (int64_t[]){2, 7, 9, 11});
  if (exe) {
    CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "x",
                 tj_executable_run(exe, ins, 3, &out, 1));
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

// The failing-allocator sweep over a compile and run of a padded, strided
// conv with a symbolic batch, a constant (prepacked) weight and a relu
// after it, its epilogue (the conv's lowering, emission, prepack and
// launch), with the kernels in a warm disk cache so that each
// point is cheap: every failure is OUT_OF_MEMORY and nothing leaks.
static char g_oom_dir[64];

static tj_status_t conv_compile_run(tj_allocator_t allocator) {
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_test_sweep_context_create(allocator, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  s = tj_graph_create(ctx, "conv_oom", &g);
  if (!s) {
    int64_t N = tj_graph_symbol(g, "N");
    tj_value_t x =
        tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){N, 3, 9, 8}, "x");
    // A constant weight: its prepack is swept too.
    float wv[5 * 3 * 3 * 3];
    for (int i = 0; i < 5 * 27; ++i) wv[i] = (float)(i % 5) * 0.2f;
    tj_value_t w = tj_graph_constant(g, TJ_DTYPE_F32, 4,
                                     (int64_t[]){5, 3, 3, 3}, wv, sizeof(wv));
    tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){5}, "b");
    tj_conv_attrs_t a = {
        .strides = {2, 1}, .pads_begin = {1, 0}, .pads_end = {0, 2}};
    tj_graph_output(g, tj_graph_relu(g, tj_graph_conv(g, x, w, b, &a)), "y");
    s = tj_graph_finalize(g);
  }
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.cache_dir = g_oom_dir;
  opts.x86.num_threads = 1;
  if (!s) s = tj_compile(g, &opts, &exe);
  if (!s) {
    static float x[2 * 3 * 9 * 8], b[5], y[2 * 5 * 4 * 8];
    for (int i = 0; i < 2 * 3 * 9 * 8; ++i) x[i] = (float)(i % 7) * 0.1f;
    tj_tensor_t ins[2] = {
        tj_tensor_make(x, TJ_DTYPE_F32, 4, (int64_t[]){2, 3, 9, 8}),
        tj_tensor_make(b, TJ_DTYPE_F32, 1, (int64_t[]){5})};
    tj_tensor_t out =
        tj_tensor_make(y, TJ_DTYPE_F32, 4, (int64_t[]){2, 5, 4, 8});
    s = tj_executable_run(exe, ins, 2, &out, 1);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(conv_oom_sweep) {
  snprintf(g_oom_dir, sizeof(g_oom_dir), "/tmp/tj_conv_oom_XXXXXX");
  CHECK(mkdtemp(g_oom_dir) != NULL);
  CHECK_OK(conv_compile_run(tj_allocator_system()));  // warms the cache
  CHECK(tj_test_oom_sweep("conv", conv_compile_run) > 0);
  tj_test_remove_tree(g_oom_dir);
}

// The same sweep with the conv on the ocvec variant (its weight's prepack
// and the larger scratch).
TEST(conv_oom_sweep_ocvec) {
  setenv("TJ_X86_CONV", "ocvec", 1);
  snprintf(g_oom_dir, sizeof(g_oom_dir), "/tmp/tj_conv_oom_XXXXXX");
  CHECK(mkdtemp(g_oom_dir) != NULL);
  CHECK_OK(conv_compile_run(tj_allocator_system()));  // warms the cache
  CHECK(tj_test_oom_sweep("conv ocvec", conv_compile_run) > 0);
  tj_test_remove_tree(g_oom_dir);
  unsetenv("TJ_X86_CONV");
}

// The tail of the OOM sweeps' compile-and-run: |g| (built by the caller
// in |ctx|; |s| the building's status) compiled on one thread with the
// sweep's cache directory and run once on x into y, both rank 4; the
// executable, graph and context freed whatever failed.
static tj_status_t sweep_compile_run(tj_context_t* ctx, tj_graph_t* g,
                                     tj_status_t s, float* x,
                                     const int64_t* x_dims, float* y,
                                     const int64_t* y_dims) {
  tj_executable_t* exe = NULL;
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.cache_dir = g_oom_dir;
  opts.x86.num_threads = 1;
  if (!s) s = tj_compile(g, &opts, &exe);
  if (!s) {
    tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 4, x_dims);
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 4, y_dims);
    s = tj_executable_run(exe, &in, 1, &out, 1);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

// The failing-allocator sweep over a compile and run of a chain of two
// convs on the ocvec variant (forced: 16 channels) whose middle value is
// held blocked (nchwc_assign's allocations included: its candidate pools'
// flags too, allocated where any conv is; a max pool between the convs
// ended the sweep at 32 points, a failure absorbed before the layout).
// r18c: a stem-like conv (3x3/2 from 3 channels to 64, rows of 16) whose
// output is the graph's: the rule gives it the ocvec variant, and with its
// output row-major the x86 backend lays its weight out again for the
// shifted one (settle_strided_ocvec); every allocation of that swept.
static tj_status_t settled_compile_run(tj_allocator_t allocator) {
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_test_sweep_context_create(allocator, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  s = tj_graph_create(ctx, "settled_oom", &g);
  if (!s) {
    int64_t N = tj_graph_symbol(g, "N");
    tj_value_t x =
        tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){N, 3, 8, 32}, "x");
    static float wv[64 * 3 * 3 * 3];
    for (int i = 0; i < 64 * 27; ++i) wv[i] = (float)(i % 5) * 0.2f;
    tj_value_t w = tj_graph_constant(g, TJ_DTYPE_F32, 4,
                                     (int64_t[]){64, 3, 3, 3}, wv, sizeof(wv));
    tj_conv_attrs_t a = {
        .strides = {2, 2}, .pads_begin = {1, 1}, .pads_end = {1, 1}};
    tj_graph_output(
        g, tj_graph_relu(g, tj_graph_conv(g, x, w, (tj_value_t){0}, &a)), "y");
    s = tj_graph_finalize(g);
  }
  static float x[2 * 3 * 8 * 32], y[2 * 64 * 4 * 16];
  for (int i = 0; i < 2 * 3 * 8 * 32; ++i) x[i] = (float)(i % 7) * 0.1f;
  return sweep_compile_run(ctx, g, s, x, (int64_t[]){2, 3, 8, 32}, y,
                           (int64_t[]){2, 64, 4, 16});
}

TEST(conv_oom_sweep_settled) {
  snprintf(g_oom_dir, sizeof(g_oom_dir), "/tmp/tj_conv_oom_XXXXXX");
  CHECK(mkdtemp(g_oom_dir) != NULL);
  CHECK_OK(settled_compile_run(tj_allocator_system()));  // warms the cache
  CHECK(tj_test_oom_sweep("conv settled", settled_compile_run) > 0);
  tj_test_remove_tree(g_oom_dir);
}

static tj_status_t nchwc_compile_run(tj_allocator_t allocator) {
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_test_sweep_context_create(allocator, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  s = tj_graph_create(ctx, "nchwc_oom", &g);
  if (!s) {
    int64_t N = tj_graph_symbol(g, "N");
    tj_value_t v =
        tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){N, 16, 6, 14}, "x");
    static float wv[16 * 16 * 9];
    for (int i = 0; i < 16 * 16 * 9; ++i) wv[i] = (float)(i % 5) * 0.02f;
    tj_conv_attrs_t a = {.pads_begin = {1, 1}, .pads_end = {1, 1}};
    for (int i = 0; i < 2; ++i) {
      tj_value_t w = tj_graph_constant(
          g, TJ_DTYPE_F32, 4, (int64_t[]){16, 16, 3, 3}, wv, sizeof(wv));
      v = tj_graph_relu(g, tj_graph_conv(g, v, w, (tj_value_t){0}, &a));
    }
    tj_graph_output(g, v, "y");
    s = tj_graph_finalize(g);
  }
  static float x[2 * 16 * 6 * 14], y[2 * 16 * 6 * 14];
  for (int i = 0; i < 2 * 16 * 6 * 14; ++i) x[i] = (float)(i % 7) * 0.1f;
  return sweep_compile_run(ctx, g, s, x, (int64_t[]){2, 16, 6, 14}, y,
                           (int64_t[]){2, 16, 6, 14});
}

TEST(conv_oom_sweep_nchwc) {
  setenv("TJ_X86_CONV", "ocvec", 1);
  snprintf(g_oom_dir, sizeof(g_oom_dir), "/tmp/tj_conv_oom_XXXXXX");
  CHECK(mkdtemp(g_oom_dir) != NULL);
  CHECK_OK(nchwc_compile_run(tj_allocator_system()));  // warms the cache
  CHECK(tj_test_oom_sweep("conv nchwc", nchwc_compile_run) > 0);
  tj_test_remove_tree(g_oom_dir);
  unsetenv("TJ_X86_CONV");
}

int main(void) {
  g_num_ctx = tj_test_tier_contexts(g_ctx, g_isa);
  RUN_TEST(cases);
  RUN_TEST(cases_forced);
  RUN_TEST(grouped_nan);
  RUN_TEST(prepacked_weight_marked);
  RUN_TEST(ocvec_variant_marked);
  RUN_TEST(bad_input_shape);
  RUN_TEST(conv_oom_sweep);
  RUN_TEST(conv_oom_sweep_ocvec);
  RUN_TEST(conv_oom_sweep_settled);
  RUN_TEST(nchwc_chains);
  RUN_TEST(balanced_units);
  RUN_TEST(conv_oom_sweep_nchwc);
  for (int i = 0; i < g_num_ctx; ++i) tj_context_destroy(g_ctx[i]);
  TEST_MAIN_END();
}
