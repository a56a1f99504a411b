// The CUDA CONV template (issue 15, task cudaconv: jit/emit_nvptx_conv.c)
// without a GPU. CUDA keeps an f32 groups == 1 conv whole, as x86 does
// (tj_window_conv_whole): every variant (1D, 2D, 3D; stride, dilation,
// asymmetric pads; odd C and O; bias or none; a symbolic batch) compiled
// for sm_90a and sm_80, exact f32 and with allow_tf32, is one kernel with
// no graph break whose PTX holds the template's path (the 4-byte
// zero-filling cp.async gathers; FFMA, or TF32: on sm_90a by default
// wgmma m64n64k8 on operands rounded by half a TF32 ulp added, elsewhere
// mma.sync m16n8k8 on cvt.rna-rounded ones; no GEMM candidate kernels),
// and ptxas -arch=sm_90a assembles it when the
// test is given ptxas's path (registers and spills printed). Followers of
// a dense conv (relu, a residual add, a per-channel operand and clip, a
// cast to f16) are its kernel's epilogue: one kernel, vector stores of
// the FFMA and TF32 tiles where P allows, no split-k atomics. A grouped
// conv still decomposes (several kernels, no graph break). The launch of a
// kernel-IR conv: its grid for run-time batches, k split into slices
// (the output zeroed first) where the tiles alone leave SMs idle, unless
// the kernel has an epilogue, nothing
// for an empty one, INVALID_ARGUMENT for a negative batch; the emitter's
// refusal of a conv past its 32-bit indices, naming the kernel. The offline
// compile fails each allocation in turn: OUT_OF_MEMORY, nothing leaked. The
// wgmma TF32 kernel (TJ_NVPTX_CONV=wgmma and wgmma64) on every dense
// variant and ResNet's 1x1, 1x1/2 and 3x3/2 classes: m64n128k8 or m64n64k8
// .tf32 on sm_90a (mma.sync on sm_80), assembled by ptxas with no spill and
// no C7508/C7510/C7511/C7515: offline (no graph constants known) reading
// the weight prepared (16-byte copies always; no tap table where it is
// tap-major), and with TJ_NVPTX_CONV=wgmma64-plain as the graph has it
// (16-byte weight copies where K % 4 == 0). The preparation itself
// (tj_nvptx_conv_prepare_weight): its layouts and its rounding to
// nearest TF32. Numbers on the GPU: tests/cuda/cuda_conv_test.c.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_entry.h"
#include "jit/nvptx.h"
#include "kir/kernel_ir.h"
#include "tests/unit/ptx_check.h"
#include "tests/unit/test.h"

static const char* g_ptxas = "";
static tj_context_t* g_ctx;
// Contexts with TJ_NVPTX_CONV=wgmma and =wgmma64: the TF32 conv on wgmma
// (sm_90a), 128 x 128 and 128 x 64 tiles.
static tj_context_t* g_wgmma_ctx;
static tj_context_t* g_wgmma64_ctx;
// TJ_NVPTX_CONV=wgmma64-trunc: the operands left to the tensor cores'
// truncation (no cvt.rna), for measuring what rounding costs.
static tj_context_t* g_trunc_ctx;
// TJ_NVPTX_CONV=wgmma64-plain: the weight read as the graph has it, not
// prepared (an offline compile knows no graph constants: its wgmma
// kernels otherwise read the weight prepared).
static tj_context_t* g_plain_ctx;

// Followers of the conv, its kernel's epilogue (lib/passes/fuse.c's
// conv_epilogue, jit/emit_nvptx_conv.c's epilogue_map): relu; relu(y +
// residual) with the residual of y's shape; y + a per-channel [O, 1, 1]
// operand, clipped to [0, 6]; y cast to f16. P_RELU_SPLIT: relu after a
// conv whose launch splits k in more than two slices at batch 1 (the
// symbolic batch's smallest; 132 SMs offline), which keeps it out
// (conv_epilogue_fits): two kernels.
typedef enum post_e {
  P_NONE,
  P_RELU,
  P_RESIDUAL,
  P_CHANNEL_CLIP,
  P_F16,
  P_RELU_SPLIT
} post_t;

typedef struct variant_t {
  const char* name;
  int32_t n;
  int64_t c, o, s[3], k[3];
  bool bias;
  int64_t groups;
  tj_conv_attrs_t a;
  post_t post;
} variant_t;

static const variant_t kVariants[] = {
    {"3x3_p1",
     2,
     64,
     64,
     {14, 14},
     {3, 3},
     true,
     1,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     P_NONE},
    {"7x7_s2_stem",
     2,
     3,
     64,
     {32, 32},
     {7, 7},
     false,
     1,
     {.strides = {2, 2}, .pads_begin = {3, 3}, .pads_end = {3, 3}},
     P_NONE},
    {"1x1", 2, 17, 131, {5, 6}, {1, 1}, true, 1, {.groups = 0}, P_NONE},
    {"3x3_d2_asym",
     2,
     5,
     7,
     {12, 9},
     {3, 3},
     false,
     1,
     {.dilations = {2, 2}, .pads_begin = {2, 0}, .pads_end = {1, 3}},
     P_NONE},
    {"1d_s2_d2",
     1,
     4,
     9,
     {31},
     {5},
     true,
     1,
     {.strides = {2}, .dilations = {2}, .pads_begin = {3}, .pads_end = {1}},
     P_NONE},
    {"3d",
     3,
     3,
     5,
     {5, 6, 7},
     {3, 2, 3},
     true,
     1,
     {.strides = {1, 2, 1}, .pads_begin = {1, 0, 1}, .pads_end = {1, 1, 0}},
     P_NONE},
    {"grouped_decomposes",
     2,
     8,
     8,
     {9, 9},
     {3, 3},
     true,
     2,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     P_NONE},
    // A 3x3 at 14x14 (P = 196, a multiple of 4: vector stores; K = 288,
    // too shallow to split).
    {"epi_relu",
     2,
     32,
     64,
     {14, 14},
     {3, 3},
     true,
     1,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     P_RELU},
    {"epi_residual_relu",
     2,
     32,
     64,
     {14, 14},
     {3, 3},
     true,
     1,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     P_RESIDUAL},
    {"epi_channel_clip",
     2,
     17,
     131,
     {5, 6},
     {1, 1},
     false,
     1,
     {.groups = 0},
     P_CHANNEL_CLIP},
    {"epi_f16",
     2,
     16,
     24,
     {8, 8},
     {3, 3},
     true,
     1,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     P_F16},
    // 3x3 256-64 at 14x14: K 2304 splits in 9 at batch 1 (resnet's 64-64,
    // K 576, splits in 2, which fuse allows for).
    {"epi_kept_out",
     2,
     256,
     64,
     {14, 14},
     {3, 3},
     true,
     1,
     {.pads_begin = {1, 1}, .pads_end = {1, 1}},
     P_RELU_SPLIT},
};

static int64_t def1(int64_t v) { return v ? v : 1; }

static tj_graph_t* build(tj_context_t* ctx, const variant_t* v) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "conv", &g));
  if (!g) return NULL;
  const int32_t r = v->n + 2;
  int64_t xd[5] = {tj_graph_symbol(g, "N"), v->c};
  int64_t wd[5] = {v->o, v->c / def1(v->groups)};
  for (int32_t i = 0; i < v->n; ++i) {
    xd[2 + i] = v->s[i];
    wd[2 + i] = v->k[i];
  }
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, r, xd, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, r, wd, "w");
  tj_value_t b = tj_value_none();
  if (v->bias) b = tj_graph_input(g, TJ_DTYPE_F32, 1, &v->o, "b");
  tj_conv_attrs_t a = v->a;
  a.groups = def1(v->groups);
  tj_value_t y = tj_graph_conv(g, x, w, b, &a);
  int64_t yd[5] = {xd[0], v->o};
  for (int32_t i = 0; i < v->n; ++i) yd[2 + i] = v->s[i];  // pads keep it
  if (v->post == P_RELU) {
    y = tj_graph_relu(g, y);
  } else if (v->post == P_RELU_SPLIT) {
    y = tj_graph_relu(g, y);
  } else if (v->post == P_RESIDUAL) {
    tj_value_t res = tj_graph_input(g, TJ_DTYPE_F32, r, yd, "res");
    y = tj_graph_relu(g, tj_graph_add(g, y, res));
  } else if (v->post == P_CHANNEL_CLIP) {
    int64_t cd[3] = {v->o, 1, 1};
    tj_value_t sh = tj_graph_input(g, TJ_DTYPE_F32, 3, cd, "shift");
    y = tj_graph_minimum(
        g,
        tj_graph_maximum(g, tj_graph_add(g, y, sh),
                         tj_graph_scalar(g, TJ_DTYPE_F32, 0.0)),
        tj_graph_scalar(g, TJ_DTYPE_F32, 6.0));
  } else if (v->post == P_F16) {
    y = tj_graph_cast(g, y, TJ_DTYPE_F16);
  }
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static void check_variant(const variant_t* v, tj_nvptx_arch_t arch, bool tf32) {
  char what[128];
  snprintf(what, sizeof(what), "%s %s%s", v->name,
           arch == TJ_NVPTX_SM_90A ? "sm_90a" : "sm_80", tf32 ? " tf32" : "");
  tj_graph_t* g = build(g_ctx, v);
  if (!g) return;
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.cuda.allow_tf32 = tf32;
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  tj_allocator_t al = tj_allocator_system();
  CHECK_OK(tj_cuda_compile_ptx(g, &o, arch, al, &ptx));
  CHECK_EQ_INT(0, ptx.num_host_steps);
  const bool whole = def1(v->groups) == 1;
  const bool apart = v->post == P_RELU_SPLIT;  // the conv and the relu
  const uint32_t kernels = apart ? 2 : 1;
  if (whole != (ptx.num_kernels == kernels))
    fprintf(stderr, "%s: %u kernels\n", what, ptx.num_kernels);
  CHECK(whole == (ptx.num_kernels == kernels));
  CHECK(ptx.ptx != NULL);
  if (ptx.ptx && whole) {
    CHECK(strstr(ptx.ptx, "cp.async.ca.shared.global") != NULL);
    bool mma = strstr(ptx.ptx,
                      "mma.sync.aligned.m16n8k8.row.col.f32.tf32."
                      "tf32.f32") != NULL;
    // TF32's default on sm_90a: wgmma on 128 x 64 tiles; both round.
    const bool wg = tf32 && arch == TJ_NVPTX_SM_90A;
    bool wgmma =
        strstr(ptx.ptx, "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32") !=
        NULL;
    // mma.sync's operands by cvt.rna, wgmma's by half a TF32 ulp added.
    bool cvt = strstr(ptx.ptx, "cvt.rna.tf32.f32") != NULL;
    bool half_ulp = strstr(ptx.ptx, "setp.lt.f32 p, a, 0f7F800000") != NULL;
    CHECK(mma == (tf32 && !wg));
    CHECK(wgmma == wg);
    CHECK(cvt == (tf32 && !wg));
    CHECK(half_ulp == wg);
    if (!tf32) CHECK(strstr(ptx.ptx, "fma.rn.f32") != NULL);
    if (mma != (tf32 && !wg))
      fprintf(stderr, "%s: mma.sync %d\n", what, (int)mma);
    CHECK_EQ_INT(0, (int)ptx.num_variant_kernels);
    // Only a kernel without followers splits k (its slices meet by
    // atomic adds); the followers' kernel stores once, by vectors of 4
    // pixels (FFMA) or 2 (TF32) where P allows: 196 and 64 here.
    const bool epi = v->post != P_NONE && !apart;
    CHECK((strstr(ptx.ptx, "atom.global.add.f32") != NULL) == !epi);
    if (v->post == P_RELU || v->post == P_RESIDUAL) {
      // relu(x): x <= 0 ? 0 : x, which keeps NaN.
      CHECK(strstr(ptx.ptx, "setp.le.f32") != NULL);
      CHECK(strstr(ptx.ptx, tf32 ? "st.global.v2.f32" : "st.global.v4.f32") !=
            NULL);
    }
    if (v->post == P_RESIDUAL)
      CHECK(strstr(ptx.ptx, tf32 ? "ld.global.v2.f32" : "ld.global.v4.f32") !=
            NULL);
    if (v->post == P_CHANNEL_CLIP) CHECK(strstr(ptx.ptx, "min.f32") != NULL);
    if (v->post == P_F16) CHECK(strstr(ptx.ptx, "cvt.rn.f16.f32") != NULL);
  }
  if (arch == TJ_NVPTX_SM_90A) tj_test_assemble_ptx(g_ptxas, what, ptx.ptx);
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
}

// Every variant with and without TF32 on both archs; the sanitizer leg
// (tj_test_sanitizer_subset) on one arch a pair, alternating down the
// variants, so that each variant still meets both archs and each arch both
// math modes.
TEST(variants) {
  const bool subset = tj_test_sanitizer_subset();
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kVariants); ++i) {
    for (int tf32 = 0; tf32 < 2; ++tf32) {
      const bool sm90 = (i + (size_t)tf32) % 2 == 0;
      if (!subset || sm90) check_variant(&kVariants[i], TJ_NVPTX_SM_90A, tf32);
      if (!subset || !sm90) check_variant(&kVariants[i], TJ_NVPTX_SM_80, tf32);
    }
  }
}

// ResNet's layer classes beside kVariants, for the wgmma kernel: a 1x1
// stride-1 bottleneck conv (K = 256, 16-byte weight copies; P = 3136, not
// a multiple of 128), a 1x1 stride-2 downsample, and a 3x3 stride-2 with
// its relu.
static const variant_t kWgmmaVariants[] = {
    {"rn_1x1_256_64",
     2,
     256,
     64,
     {56, 56},
     {1, 1},
     true,
     1,
     {.groups = 0},
     P_RELU},
    {"rn_1x1_s2_256_512",
     2,
     256,
     512,
     {28, 28},
     {1, 1},
     true,
     1,
     {.strides = {2, 2}},
     P_NONE},
    {"rn_3x3_s2_128",
     2,
     128,
     128,
     {28, 28},
     {3, 3},
     true,
     1,
     {.strides = {2, 2}, .pads_begin = {1, 1}, .pads_end = {1, 1}},
     P_NONE},
};

static const char* const kWgmmaNotes[] = {"C7508", "C7510", "C7511", "C7515"};

// Assembles |ptx| for sm_90a with ptxas -v: the exit status, 1 where the
// log has a wgmma performance note (kWgmmaNotes: wgmma serialized or its
// pipeline broken); |*spills| the spilled bytes. Prints the register,
// spill and warning lines.
static int run_ptxas(const char* what, const char* ptx, long* spills) {
  *spills = 0;
  char path[] = "/tmp/tj_conv_ptx_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  FILE* f = fdopen(fd, "w");
  if (!f) return -1;
  fputs(ptx, f);
  fclose(f);
  char cmd[1200];
  snprintf(cmd, sizeof(cmd), "'%s' -v -arch=sm_90a -o /dev/null '%s' 2>&1",
           g_ptxas, path);
  FILE* p = popen(cmd, "r");
  int rc = -1;
  if (p) {
    char line[512];
    bool note = false;
    while (fgets(line, sizeof(line), p)) {
      if (strstr(line, "registers") || strstr(line, "spill") ||
          strstr(line, "error") || strstr(line, "warning"))
        printf("#   %s: %s", what, line);
      for (size_t i = 0; i < TJ_ARRAY_SIZE(kWgmmaNotes); ++i)
        if (strstr(line, kWgmmaNotes[i])) note = true;
      for (const char* sp = strstr(line, "bytes spill"); sp;
           sp = strstr(sp + 1, "bytes spill")) {
        const char* q = sp;
        while (q > line && (q[-1] == ' ' || (q[-1] >= '0' && q[-1] <= '9')))
          --q;
        *spills += strtol(q, NULL, 10);
      }
    }
    rc = pclose(p);
    if (rc == 0 && note) rc = 1;
  }
  remove(path);
  return rc;
}

// |v| with allow_tf32 in |ctx| (TJ_NVPTX_CONV=wgmma or wgmma64, tile |bn|
// pixels): on sm_90a one kernel of m64n<bn>k8 .tf32 wgmmas on operands
// rounded in shared memory (half a TF32 ulp added; unless |trunc|), no GEMM
// candidate kernels, the patch gathered by 4-byte zero-filling cp.async, the
// weight by 16-byte cp.async where K is a multiple of 4, the followers' vector
// stores, split-k atomics only without followers; assembled by ptxas with
// no spill and no wgmma note. On sm_80 the same context keeps mma.sync.
static void check_wgmma_variant(const variant_t* v, tj_context_t* ctx,
                                int32_t bn, bool trunc, bool plain) {
  char what[128];
  snprintf(what, sizeof(what), "%s wgmma n%d%s%s", v->name, (int)bn,
           trunc ? " trunc" : "", plain ? " plain" : "");
  tj_graph_t* g = build(ctx, v);
  if (!g) return;
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  o.cuda.allow_tf32 = true;
  tj_allocator_t al = tj_allocator_system();
  for (int a = 0; a < 2; ++a) {
    tj_nvptx_arch_t arch = a == 0 ? TJ_NVPTX_SM_90A : TJ_NVPTX_SM_80;
    tj_cuda_offline_ptx_t ptx;
    memset(&ptx, 0, sizeof(ptx));
    CHECK_OK(tj_cuda_compile_ptx(g, &o, arch, al, &ptx));
    const bool apart = v->post == P_RELU_SPLIT;
    CHECK_EQ_INT(apart ? 2 : 1, (int)ptx.num_kernels);
    // No GEMM candidate kernels: a conv runs the main loop its context
    // chose (candidates compiled without the setting ran mma.sync under
    // wgmma64, and a decision cached by an mma context chose them).
    CHECK_EQ_INT(0, (int)ptx.num_variant_kernels);
    CHECK(ptx.variants_ptx == NULL ||
          strstr(ptx.variants_ptx, "mma.sync.aligned") == NULL);
    CHECK(ptx.ptx != NULL);
    if (!ptx.ptx) continue;
    char inst[96];
    // At most 64 output channels: 64 x 128 tiles of two m64n64 halves.
    snprintf(inst, sizeof(inst),
             "wgmma.mma_async.sync.aligned.m64n%dk8.f32.tf32.tf32",
             (int)(v->o <= 64 ? 64 : bn));
    const bool wg = strstr(ptx.ptx, inst) != NULL;
    const bool mma = strstr(ptx.ptx, "mma.sync.aligned.m16n8k8") != NULL;
    if (wg != (arch == TJ_NVPTX_SM_90A))
      fprintf(stderr, "%s %s: wgmma %d\n", what, tj_nvptx_arch_name(arch),
              (int)wg);
    CHECK(wg == (arch == TJ_NVPTX_SM_90A));
    CHECK(mma == (arch != TJ_NVPTX_SM_90A));
    CHECK(strstr(ptx.ptx, "cp.async.ca.shared.global") != NULL);
    if (arch == TJ_NVPTX_SM_90A) {
      int64_t taps = 1;
      for (int32_t i = 0; i < v->n; ++i) taps *= v->k[i];
      // Rounded in place (half a TF32 ulp added to finite values, the
      // tensor cores dropping the low bits): 16-byte chunks as vectors.
      CHECK(strstr(ptx.ptx, "cvt.rna.tf32.f32") == NULL);
      CHECK((strstr(ptx.ptx, "setp.lt.f32 p, a, 0f7F800000") != NULL) ==
            !trunc);
      // (the inline asm's predicated add; a bare ", 4096;" can be an
      // offset of a prepared weight's rows)
      CHECK((strstr(ptx.ptx, "@p add.u32 %r") != NULL) == !trunc);
      if (!trunc && v->c * taps % 4 == 0)
        CHECK(strstr(ptx.ptx, "st.shared.v4.b32") != NULL ||
              strstr(ptx.ptx, "st.shared.v4.u32") != NULL);
      // A prepared weight (rows padded to the k-tile) always takes
      // 16-byte copies; a tap-major one (C a multiple of 32, 2D) needs no
      // tap table.
      CHECK((strstr(ptx.ptx, "cp.async.cg.shared.global") != NULL) ==
            (!plain || v->c * taps % 4 == 0));
      const bool tap_major =
          !plain && tj_nvptx_conv_weight_tap_major(v->c, v->n);
      if (v->n == 2)
        CHECK((strstr(ptx.ptx, "conv_taps_") != NULL) == !tap_major);
      const bool epi = v->post != P_NONE && !apart;
      CHECK((strstr(ptx.ptx, "atom.global.add.f32") != NULL) == !epi);
      if (v->post == P_RELU || v->post == P_RESIDUAL)
        CHECK(strstr(ptx.ptx, "st.global.v2.f32") != NULL);
      if (v->post == P_RESIDUAL)
        CHECK(strstr(ptx.ptx, "ld.global.v2.f32") != NULL);
      if (v->post == P_F16) CHECK(strstr(ptx.ptx, "cvt.rn.f16.f32") != NULL);
      if (g_ptxas[0]) {
        long spills = 0;
        int rc = run_ptxas(what, ptx.ptx, &spills);
        if (rc) fprintf(stderr, "  %s: ptxas %d\n", what, rc);
        CHECK_EQ_INT(0, rc);
        CHECK_EQ_INT(0, (int)spills);
      }
    }
    tj_cuda_offline_ptx_deinitialize(al, &ptx);
  }
  tj_graph_destroy(g);
}

TEST(wgmma_variants) {
  for (int t = 0; t < 2; ++t) {
    tj_context_t* ctx = t ? g_wgmma64_ctx : g_wgmma_ctx;
    int32_t bn = t ? 64 : 128;
    for (size_t i = 0; i < TJ_ARRAY_SIZE(kVariants); ++i) {
      if (def1(kVariants[i].groups) != 1) continue;
      check_wgmma_variant(&kVariants[i], ctx, bn, false, false);
    }
    for (size_t i = 0; i < TJ_ARRAY_SIZE(kWgmmaVariants); ++i)
      check_wgmma_variant(&kWgmmaVariants[i], ctx, bn, false, false);
  }
  // Truncated: the stem (4-byte weight copies) and a 1x1 (16-byte).
  check_wgmma_variant(&kVariants[1], g_trunc_ctx, 64, true, false);
  check_wgmma_variant(&kWgmmaVariants[0], g_trunc_ctx, 64, true, false);
  // The weight as the graph has it: every dense variant and ResNet's.
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kVariants); ++i) {
    if (def1(kVariants[i].groups) != 1) continue;
    check_wgmma_variant(&kVariants[i], g_plain_ctx, 64, false, true);
  }
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kWgmmaVariants); ++i)
    check_wgmma_variant(&kWgmmaVariants[i], g_plain_ctx, 64, false, true);
}

static uint32_t bits_of(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}

static float float_of(uint32_t u) {
  float v;
  memcpy(&v, &u, 4);
  return v;
}

// The weight prepared for the wgmma kernel (tj_nvptx_conv_prepare_weight):
// rows of C x taps rounded up to 32, zeros past; k = c * taps + t, or t *
// C + c where C is a multiple of 32 in 2D; values rounded to TF32 to
// nearest, ties away (cvt.rna), the low 13 bits 0, Inf and NaN kept, past
// the largest TF32 to Inf.
TEST(prepared_weight) {
  CHECK(tj_nvptx_conv_weight_tap_major(64, 2));
  CHECK(!tj_nvptx_conv_weight_tap_major(64, 1));
  CHECK(!tj_nvptx_conv_weight_tap_major(3, 2));
  CHECK(!tj_nvptx_conv_weight_tap_major(48, 2));
  CHECK_EQ_INT(2 * 32 * 4, (int)tj_nvptx_conv_weight_bytes(2, 3, 5));
  CHECK_EQ_INT(3 * 288 * 4, (int)tj_nvptx_conv_weight_bytes(3, 32, 9));
  // Rounding: 1 + 2^-11 is a tie (TF32's ulp at 1 is 2^-10).
  static const uint32_t kIn[][2] = {
      {0x3F800000u, 0x3F800000u},  // 1
      {0x3F801000u, 0x3F802000u},  // 1 + 2^-11: a tie, away from 0
      {0xBF801000u, 0xBF802000u},  // its negative
      {0x3F800FFFu, 0x3F800000u},  // just under the tie
      {0x3F802FFFu, 0x3F802000u},  // 1 + 2^-10 and a bit: down
      {0x3F803000u, 0x3F804000u},  // 1 + 3 x 2^-11: a tie, away
      {0x7F7FFFFFu, 0x7F800000u},  // FLT_MAX: past the largest TF32
      {0x7F800000u, 0x7F800000u},  // Inf
      {0xFF800000u, 0xFF800000u},  // -Inf
      {0x7FC00001u, 0x7FC00001u},  // NaN kept
      {0x00000FFFu, 0x00000000u},  // a denormal rounded down
      {0x00001000u, 0x00002000u},  // a denormal tie
  };
  enum { kN = sizeof(kIn) / sizeof(kIn[0]) };
  float w[kN], dst[32];
  for (int i = 0; i < kN; ++i) w[i] = float_of(kIn[i][0]);
  // o 1, c 3, taps 4: 12 values, c-major, rows of 32.
  tj_nvptx_conv_prepare_weight(1, 3, 4, 2, w, dst);
  for (int i = 0; i < kN; ++i) {
    if (bits_of(dst[i]) != kIn[i][1])
      fprintf(stderr, "rounding %08x: %08x, want %08x\n", kIn[i][0],
              bits_of(dst[i]), kIn[i][1]);
    CHECK_EQ_INT((int64_t)kIn[i][1], (int64_t)bits_of(dst[i]));
  }
  for (int i = kN; i < 32; ++i) CHECK_EQ_INT(0, (int64_t)bits_of(dst[i]));
  // Layouts, on integers (exact in TF32): w[o][c][t] = o * 1000 + c * 10 +
  // t. 2D, C 32, 3 taps: tap-major, rows of 96; 1D: c-major.
  enum { kO = 2, kC = 32, kT = 3 };
  static float src[kO * kC * kT], out[kO * kC * kT];
  for (int o = 0; o < kO; ++o)
    for (int c = 0; c < kC; ++c)
      for (int t = 0; t < kT; ++t)
        src[(o * kC + c) * kT + t] = (float)(o * 1000 + c * 10 + t);
  for (int sp = 1; sp <= 2; ++sp) {
    tj_nvptx_conv_prepare_weight(kO, kC, kT, sp, src, out);
    int64_t bad = 0;
    for (int o = 0; o < kO; ++o)
      for (int c = 0; c < kC; ++c)
        for (int t = 0; t < kT; ++t) {
          int k = sp == 2 ? t * kC + c : c * kT + t;
          if (out[o * kC * kT + k] != (float)(o * 1000 + c * 10 + t)) ++bad;
        }
    CHECK_EQ_INT(0, bad);
  }
}

// The offline CUDA compile of a conv (3x3, bias, symbolic batch) with
// allocation |al|: context, graph, passes, lowering, emission and PTX.
static tj_status_t ptx_compile(tj_allocator_t al) {
  tj_context_options_t co = tj_test_context_options();
  co.allocator = al;
  co.log = "";
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  s = tj_graph_create(ctx, "conv_oom", &g);
  if (!s) {
    int64_t N = tj_graph_symbol(g, "N");
    tj_value_t x =
        tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){N, 5, 9, 9}, "x");
    tj_value_t w =
        tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){7, 5, 3, 3}, "w");
    tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){7}, "b");
    tj_conv_attrs_t a = {.pads_begin = {1, 1}, .pads_end = {1, 1}};
    tj_graph_output(g, tj_graph_conv(g, x, w, b, &a), "y");
    s = tj_graph_finalize(g);
  }
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  if (!s) s = tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx);
  if (!s && ptx.num_kernels != 1)
    s = tj_status_make(TJ_STATUS_INTERNAL, "conv_oom: %u kernels",
                       ptx.num_kernels);
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(oom_sweep) {
  CHECK_OK(ptx_compile(tj_allocator_system()));
  CHECK(tj_test_oom_sweep("cuda conv ptx", ptx_compile) > 0);
}

// A CONV kernel as lowering makes it: space [N, O, 9, 11] (N param 0), a
// 3x3 window with pads 1 over x [N, c, 9, 11], row-major strides; with
// |relu| its epilogue stores relu of the conv.
static tj_kir_t* make_kernel(const char* name, int64_t c, int64_t o,
                             bool relu) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_CONV, name, &k));
  if (!k) return NULL;
  uint32_t pn = tj_kir_add_param(k, "N");
  tj_kir_ival_t dims[4] = {tj_kir_runtime(pn), tj_kir_constant(o),
                           tj_kir_constant(9), tj_kir_constant(11)};
  tj_kir_set_space(k, 4, dims);
  tj_kir_ival_t sx[4] = {tj_kir_constant(c * 99), tj_kir_constant(99),
                         tj_kir_constant(11), tj_kir_constant(1)};
  tj_kir_ival_t sw[4] = {tj_kir_constant(c * 9), tj_kir_constant(9),
                         tj_kir_constant(3), tj_kir_constant(1)};
  tj_kir_ival_t so[4] = {tj_kir_constant(o * 99), tj_kir_constant(99),
                         tj_kir_constant(11), tj_kir_constant(1)};
  tj_kir_add_buffer(k, "x", TJ_DTYPE_F32, TJ_KIR_CONV_X, sx);
  tj_kir_add_buffer(k, "w", TJ_DTYPE_F32, TJ_KIR_CONV_W, sw);
  uint32_t out = tj_kir_add_buffer(k, "out", TJ_DTYPE_F32, TJ_KIR_OUTPUT, so);
  tj_kir_conv_t cv;
  memset(&cv, 0, sizeof(cv));
  cv.spatial = 2;
  cv.c = c;
  for (int32_t i = 0; i < 3; ++i) cv.stride[i] = cv.dilation[i] = 1;
  cv.in[0] = cv.kernel[0] = 1;
  cv.in[1] = 9;
  cv.in[2] = 11;
  cv.kernel[1] = cv.kernel[2] = 3;
  cv.low[1] = cv.low[2] = 1;
  tj_kir_set_conv(k, &cv);
  if (relu) tj_kir_store(k, out, tj_kir_unary(k, TJ_OP_RELU, tj_kir_acc(k)));
  CHECK_OK(tj_kir_finalize(k));
  return k;
}

static void expect(tj_status_t s, tj_status_code_t code, const char* needle) {
  CHECK_EQ_INT(code, tj_status_code(s));
  if (s && !strstr(tj_status_message(s), needle))
    fprintf(stderr, "message: %s (want '%s')\n", tj_status_message(s), needle);
  CHECK(s && strstr(tj_status_message(s), needle) != NULL);
  tj_status_free(s);
}

TEST(launch_and_refusals) {
  tj_allocator_t al = tj_allocator_system();
  tj_nvptx_target_t* target = NULL;
  CHECK_OK(tj_nvptx_target_create(al, TJ_NVPTX_SM_90A, &target));
  tj_nvptx_module_t* mod = NULL;
  CHECK_OK(tj_nvptx_module_new(target, al, "conv", &mod));
  tj_kir_t* k = make_kernel("conv", 6, 130, false);
  tj_nvptx_kernel_t info;
  if (k && mod) {
    CHECK_OK(tj_nvptx_module_add_kernel(mod, k, NULL, &info));
    CHECK_EQ_INT(256, info.threads);
    // 4 stages of an A tile (8 rows of 132 floats) and a B tile (8 x 128).
    CHECK_EQ_INT(4 * (8 * 132 + 8 * 128) * 4, info.shared_bytes);
    // N 3: 297 pixels in 3 tiles of 128, 130 channels in 2.
    int64_t sc[1] = {3};
    tj_nvptx_launch_t l;
    CHECK_OK(tj_nvptx_launch_config(k, &info, sc, 132, &l));
    CHECK_EQ_INT(3, l.grid[0]);
    CHECK_EQ_INT(2, l.grid[1]);
    CHECK_EQ_INT(256, l.block[0]);
    CHECK_EQ_INT(info.shared_bytes, l.shared_bytes);
    CHECK(!l.empty);
    CHECK_EQ_INT(1, l.grid[2]);
    CHECK_EQ_INT(0, l.zero_bytes);
    int64_t none[1] = {0};
    CHECK_OK(tj_nvptx_launch_config(k, &info, none, 132, &l));
    CHECK(l.empty);
    int64_t neg[1] = {-1};
    expect(tj_nvptx_launch_config(k, &info, neg, 132, &l),
           TJ_STATUS_INVALID_ARGUMENT, "batch is -1");
  }
  tj_kir_destroy(k);
  // C 512 (576 k-tiles) at N 1: 2 blocks, so k splits into slices of at
  // least 32 k-tiles, 16 at most: 16 slices of 36, which add into out,
  // zeroed by the launcher (99 x 130 floats of buffer 2).
  tj_kir_t* deep = make_kernel("conv_deep", 512, 130, false);
  if (deep && mod) {
    CHECK_OK(tj_nvptx_module_add_kernel(mod, deep, NULL, &info));
    int64_t one[1] = {1};
    tj_nvptx_launch_t l;
    CHECK_OK(tj_nvptx_launch_config(deep, &info, one, 132, &l));
    CHECK_EQ_INT(1, l.grid[0]);
    CHECK_EQ_INT(2, l.grid[1]);
    CHECK_EQ_INT(16, l.grid[2]);
    CHECK_EQ_INT(99 * 130 * 4, l.zero_bytes);
    CHECK_EQ_INT(2, l.zero_buffer);
    // N 32: 25 x 2 tiles, 6 slices of 96 k-tiles.
    int64_t many[1] = {32};
    CHECK_OK(tj_nvptx_launch_config(deep, &info, many, 132, &l));
    CHECK_EQ_INT(25, l.grid[0]);
    CHECK_EQ_INT(6, l.grid[2]);
  }
  tj_kir_destroy(deep);
  // The same with relu as its epilogue: never split (a slice's partial
  // sum cannot take the relu), nothing zeroed.
  tj_kir_t* deep_relu = make_kernel("conv_deep_relu", 512, 130, true);
  if (deep_relu && mod) {
    CHECK_OK(tj_nvptx_module_add_kernel(mod, deep_relu, NULL, &info));
    int64_t one[1] = {1};
    tj_nvptx_launch_t l;
    CHECK_OK(tj_nvptx_launch_config(deep_relu, &info, one, 132, &l));
    CHECK_EQ_INT(1, l.grid[0]);
    CHECK_EQ_INT(2, l.grid[1]);
    CHECK_EQ_INT(1, l.grid[2]);
    CHECK_EQ_INT(0, l.zero_bytes);
  }
  tj_kir_destroy(deep_relu);
  // K = C x 9 within what the kernel IR takes (2^31) but past the
  // template's int32 k index: UNSUPPORTED, naming the kernel.
  tj_kir_t* big = make_kernel("conv_big", 238609294, 4, false);
  if (big && mod)
    expect(tj_nvptx_module_add_kernel(mod, big, NULL, &info),
           TJ_STATUS_UNSUPPORTED, "kernel @conv_big: conv of 238609294 x 9");
  tj_kir_destroy(big);
  // A direct window kernel (a depthwise conv or a pool: cudabw) takes the
  // window emitter (jit/emit_nvptx_window.c): 256 threads; a [N, 6, 9, 11]
  // output of one row a thread (the output is small): planes of 99 items,
  // two a block, so N 3's 18 planes take 9 blocks. 6 output channels over
  // x's 1: a depth multiplier of 6 for the depthwise conv.
  static const tj_kir_window_t kWindows[] = {
      TJ_KIR_WINDOW_DEPTHWISE, TJ_KIR_WINDOW_MAX, TJ_KIR_WINDOW_AVG_PAD};
  for (size_t i = 0; i < sizeof(kWindows) / sizeof(kWindows[0]); ++i) {
    tj_kir_t* win = make_kernel("conv_window", 1, 6, false);
    if (!win || !mod) {
      tj_kir_destroy(win);
      continue;
    }
    win->conv.window = kWindows[i];
    CHECK_OK(tj_nvptx_module_add_kernel(mod, win, NULL, &info));
    CHECK_EQ_INT(256, info.threads);
    CHECK_EQ_INT(0, info.shared_bytes);
    CHECK(!info.conv_prepared);
    int64_t sc[1] = {3};
    tj_nvptx_launch_t l;
    CHECK_OK(tj_nvptx_launch_config(win, &info, sc, 132, &l));
    CHECK_EQ_INT(1, l.grid[0]);
    CHECK_EQ_INT(9, l.grid[1]);
    CHECK_EQ_INT(1, l.grid[2]);
    CHECK_EQ_INT(256, l.block[0]);
    CHECK_EQ_INT(0, l.zero_bytes);
    CHECK(!l.empty);
    int64_t none[1] = {0};
    CHECK_OK(tj_nvptx_launch_config(win, &info, none, 132, &l));
    CHECK(l.empty);
    int64_t neg[1] = {-1};
    expect(tj_nvptx_launch_config(win, &info, neg, 132, &l),
           TJ_STATUS_INVALID_ARGUMENT, "batch is -1");
    tj_nvptx_module_remove_kernel(mod, info.entry);
    tj_kir_destroy(win);
  }
  // A window kernel with an epilogue (fuse never makes one) and one of
  // more taps than the kernel unrolls: UNSUPPORTED.
  tj_kir_t* win_relu = make_kernel("conv_window_relu", 1, 6, true);
  if (win_relu && mod) {
    win_relu->conv.window = TJ_KIR_WINDOW_MAX;
    expect(tj_nvptx_module_add_kernel(mod, win_relu, NULL, &info),
           TJ_STATUS_UNSUPPORTED, "a window kernel with an epilogue");
  }
  tj_kir_destroy(win_relu);
  tj_kir_t* win_big = make_kernel("conv_window_big", 1, 6, false);
  if (win_big && mod) {
    win_big->conv.window = TJ_KIR_WINDOW_MAX;
    win_big->conv.kernel[1] = 9;
    win_big->conv.kernel[2] = 9;
    expect(tj_nvptx_module_add_kernel(mod, win_big, NULL, &info),
           TJ_STATUS_UNSUPPORTED, "a window of 81 taps");
  }
  tj_kir_destroy(win_big);
  tj_nvptx_module_destroy(mod);
  tj_nvptx_target_destroy(target);
}

int main(int argc, char** argv) {
  if (argc > 1) g_ptxas = argv[1];
  if (!g_ptxas[0]) printf("# ptxas not given: PTX checked as text only\n");
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  // Settings are read when a context is created.
  unsetenv("TJ_NVPTX_CONV");
  CHECK_OK(tj_context_create(&o, &g_ctx));
  setenv("TJ_NVPTX_CONV", "wgmma", 1);
  CHECK_OK(tj_context_create(&o, &g_wgmma_ctx));
  setenv("TJ_NVPTX_CONV", "wgmma64", 1);
  CHECK_OK(tj_context_create(&o, &g_wgmma64_ctx));
  setenv("TJ_NVPTX_CONV", "wgmma64-trunc", 1);
  CHECK_OK(tj_context_create(&o, &g_trunc_ctx));
  setenv("TJ_NVPTX_CONV", "wgmma64-plain", 1);
  CHECK_OK(tj_context_create(&o, &g_plain_ctx));
  unsetenv("TJ_NVPTX_CONV");
  RUN_TEST(variants);
  RUN_TEST(wgmma_variants);
  RUN_TEST(prepared_weight);
  RUN_TEST(oom_sweep);
  RUN_TEST(launch_and_refusals);
  tj_context_destroy(g_plain_ctx);
  tj_context_destroy(g_trunc_ctx);
  tj_context_destroy(g_wgmma64_ctx);
  tj_context_destroy(g_wgmma_ctx);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
