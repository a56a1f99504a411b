// The CONV template for NVPTX (issue 15): a groups == 1 convolution as an
// implicit GEMM, out[n, o, p] = b[o] + sum_k w[o, k] * X(k, (n, p)), with
// k = (c, taps) (K = C x taps) and the GEMM's columns the output pixels of
// every image, (n, p) flattened (N x P of them, N the run-time batch).
//
// One 128 x 128 tile of out per block of 256 threads: 128 output channels
// (ctaid.y) by 128 pixels (ctaid.x). Per k-tile of 8:
//   - A, the weight's rows w[o, k0 : k0+8], read in place (k-contiguous),
//     stored transposed ([k][o]) in shared memory;
//   - B, the patch matrix X(k0 : k0+8, pixels), gathered from x through
//     the window: each thread owns one pixel column (its image, its
//     window origin i * stride - low, computed once) and decomposes the
//     k rows it copies into (c, taps); a tap outside x is a 4-byte
//     cp.async of 0 source bytes, which zero-fills: no padded copy of x
//     is made and the main loop needs no masks;
//   both by 4-byte cp.async.ca into a ring of 4 stages, 3 k-tiles ahead
//   of the math (the f32 SIMT GEMM's pipeline, emit_nvptx_gemm.c).
// The math, f32 operands:
//   - CUDA cores (exact f32): each thread an 8 x 8 register tile of FFMAs,
//     A and B read from shared memory as float4 (the SIMT GEMM's layout);
//   - TF32 tensor cores (tj_nvptx_options_t.gemm_tf32, from the compile
//     option allow_tf32, as for GEMMs): 8 warps as 2 (o) x 4 (pixels),
//     each a 64 x 32 warp tile of mma.sync m16n8k8 .tf32 (inline PTX; the
//     operands rounded to TF32 by cvt.rna), f32 accumulators. Both shared
//     tiles then have rows of 136 floats, so a fragment's 32 loads (rows
//     t4, columns grp) hit 32 banks.
//   - TF32 on wgmma (sm_90a, the default there; tj_nvptx_options_t.
//     conv_kernel, TJ_NVPTX_CONV=wgmma or wgmma64, =mma the way back to
//     mma.sync): a 128 x bn tile (bn 128 or 64), two consumer
//     warpgroups of 64 output channels, m64n<bn>k8 .tf32 from shared
//     memory (at most 64 output channels: 64 x 128 tiles, each warpgroup
//     m64n64 on half the pixels). TF32 wgmma reads both operands K-major only,
//     so k-tiles are 32 f32, one 128-byte row of the 128-byte swizzle per
//     output channel (the weight's rows as stored, by 16-byte cp.async where K
//     % 4 == 0 and w is 16-byte aligned) and per pixel (the patch matrix
//     gathered as above, stored [pixel][k]); 6 stages (bn 128, one block an SM)
//     or 4 (bn 64, two), 4 k-tiles or 2 ahead of the math. The tensor cores
//     ignore the operands' low 13 mantissa bits, so each thread rounds
//     its own copies in place to nearest once they land (half a TF32 ulp
//     added, to_tf32_half_ulp; wg_round_tile;
//     tj_nvptx_options_t.conv_truncate leaves them truncated). A constant
//     weight is read prepared at upload instead (tj_nvptx_kernel_t.
//     conv_prepared; tj_nvptx_conv_prepare_weight): rounded already, rows
//     padded to the k-tile, and tap-major where C is a multiple of 32 (2D),
//     so that a k-tile is one tap's 32 channels and the patches are
//     gathered with one window check and address a k-tile
//     (gather_tap_major); only the patches are rounded then.
// Too few tiles to fill the GPU (batch 1 at 14x14 or 7x7: one or two
// pixel tiles; K up to 4608): the launch splits k into nctaid.z slices of
// at least 32 k-tiles, each block adds its slice's sums into out by
// atomic adds (out zeroed by the launcher first: tj_nvptx_launch_t's
// zero_bytes; the first slice adds the bias). The sums' order then
// varies from run to run.
// Epilogue from the registers: + b[o], stored to out's rows (a pixel run
// of 4, or 2 for TF32, as one vector store where P is a multiple of it and
// out is 16-byte aligned, checked at run time; else element by element).
// A conv with elementwise followers (lib/passes/fuse.c's conv_epilogue;
// kir/lower_conv.c's tj_lower_body_conv) runs them there, as the MAP
// phase reading the accumulator (+ b[o]) as TJ_KIR_ACC, on the same runs
// of pixels: resnet's conv -> add -> relu is one kernel. Such a kernel
// never splits k (tj_nvptx_conv_launch): a slice holds a partial sum,
// and relu(a) + relu(b) is not relu(a + b).
// Every size but the batch is a constant of the kernel (kir/lower_conv.c),
// so the index arithmetic is by constants, in i32 where it fits.

#include <stdio.h>
#include <string.h>

#include "jit/emit_nvptx.h"

#define kBM 128  // output channels a block
#define kBN 128  // output pixels a block
#define kBK 8
#define kThreads 256
#define kStages 4
#define kCopies (kBM * kBK / kThreads)  // 4-byte copies per operand a thread
#define kMinSliceK 256                  // k a slice of a split conv, at least
#define kMaxSlices 16
// The wgmma kernel (sm_90a, TF32): k-tiles of 32 f32, one 128-byte row of
// the 128-byte swizzle (SW128) per output channel and per pixel.
#define kWgBK 32
#define kRow 128
#define kAtom 1024
#define kMaxCopies 16  // 4-byte copies per operand a thread, at most

typedef struct conv_t {
  tj_nvptx_emit_t* nv;
  tj_emit_t* em;
  LLVMBuilderRef b;
  const tj_kir_t* k;
  uint32_t xb, wb, ob;
  int32_t bb;  // the bias, -1 for none
  bool tf32;
  // TF32 on wgmma (sm_90a): a 128 x bn tile, two consumer warpgroups of
  // 64 output channels each (m64n<bn>k8), both operands K-major SW128.
  bool wg;
  // The wgmma kernel rounds its operands to TF32 in shared memory
  // (wg_round_tile); without it the tensor cores truncate them.
  bool round;
  // wgmma: the weight is read prepared (tj_nvptx_conv_prepare_weight):
  // rounded already, rows of kp floats (16-byte copies, no k bound);
  // tap_major: its k is t * C + c, and the patches are gathered a k-tile
  // (one tap, 32 channels) at a time (gather_tap_major).
  bool prep, tap_major;
  int64_t kp;
  // wgmma: bm output channels by bn pixels a block, each warpgroup's
  // wgmma m64n<wn>; wide (O <= 64): bm 64, the two warpgroups on the same
  // 64 weight rows and pixel halves [wn w, wn w + wn) (bn = 2 wn), so no
  // half of a 128-row tile multiplies padding.
  bool wide;
  int32_t bm, wn;
  int32_t bn, bk, stages;
  int32_t b_copies;              // B copies a thread (4 bytes each)
  LLVMValueRef ring, ring_addr;  // the 1024-aligned ring: pointer, i32
  LLVMValueRef a_vec;            // i1: A by 16-byte copies
  LLVMTypeRef acc_struct;        // bn / 2 floats: the wgmma's D
  // The kernel's MAP phase has instructions: elementwise followers (relu,
  // a residual add, casts) evaluated on the accumulators at the store.
  bool epi;
  int64_t O, C, K, KS, P, INS;
  int64_t od[3], in[3], ker[3], st[3], dil[3], low[3];
  int32_t axis0;     // the first spatial axis of the three
  LLVMTypeRef it;    // i32, or i64 where an image's x does not fit i32
  int32_t a_stride;  // floats per row of the A tile ([k][o])
  int32_t b_stride;  // floats per row of the B tile ([k][pixel])
  int32_t a_bytes, stage_bytes;
  LLVMValueRef tid, o0, p0, np, smem;
  LLVMValueRef kt0, kt1;  // i64: the block's slice of k-tiles
  LLVMValueRef split;     // i1: more than one slice (nctaid.z > 1)
  LLVMValueRef first;     // i1: the first slice (ctaid.z == 0)
  LLVMValueRef acc;       // alloca [64 x float]
  // Copies: A's rows and k, B's pixel (one per thread) and k rows; the
  // wgmma kernel's 16-byte copies of A (a16_k: the chunk's first k).
  LLVMValueRef a_src[kMaxCopies], a_dst[kMaxCopies], a_ok[kMaxCopies],
      a_k[kMaxCopies];
  LLVMValueRef b_dst[kMaxCopies], b_k[kMaxCopies];
  LLVMValueRef b_chunk[kMaxCopies / 4];  // the wgmma kernel's B chunks
  LLVMValueRef a16_src[4], a16_dst[4], a16_ok[4], a16_k[4];
  LLVMValueRef pix_ok, x_image, origin[3];
  // The wgmma kernel's tap table (tap_table): per k, x's offset and the
  // tap's displacement along the last two axes; NULL where it is not used.
  LLVMValueRef taps;
  LLVMValueRef x_pixel;  // x's offset of the pixel's window origin
  // gather_tap_major: x's offset (i64) of the thread's copy i of its first
  // chunk from channel c0 of the tile's tap.
  LLVMValueRef b_eoff[4];
} conv_t;

static LLVMValueRef c32(conv_t* g, int64_t v) {
  return LLVMConstInt(g->em->t_i32, (unsigned long long)v, 1);
}
static LLVMValueRef c64(conv_t* g, int64_t v) {
  return LLVMConstInt(g->em->t_i64, (unsigned long long)v, 1);
}
static LLVMValueRef cit(conv_t* g, int64_t v) {
  return LLVMConstInt(g->it, (unsigned long long)v, 1);
}

static LLVMValueRef smem_at(conv_t* g, LLVMValueRef base, LLVMValueRef off) {
  return LLVMBuildGEP2(g->b, g->em->t_i8, base, &off, 1, "");
}

static LLVMValueRef acc_slot(conv_t* g, int32_t i) {
  LLVMValueRef idx[2] = {c32(g, 0), c32(g, i)};
  return LLVMBuildGEP2(g->b, LLVMArrayType2(g->em->t_f32, 64), g->acc, idx, 2,
                       "");
}

static LLVMValueRef call(conv_t* g, const char* name, LLVMValueRef* args,
                         unsigned n) {
  return tj_emit_intrinsic(g->em, name, NULL, 0, args, n);
}

static void cp_async4(conv_t* g, LLVMValueRef stage_base, LLVMValueRef dst,
                      LLVMValueRef src, LLVMValueRef ok) {
  LLVMValueRef args[3] = {
      smem_at(g, stage_base, dst),
      LLVMBuildAddrSpaceCast(g->b, src, g->nv->t_ptr_global, ""),
      tj_emit_select(g->em, ok, c32(g, 4), c32(g, 0))};
  call(g, "llvm.nvvm.cp.async.ca.shared.global.4.s", args, 3);
}

//===--- copies ---===//

static void pixel_setup(conv_t* g, LLVMValueRef bn);

static void copy_setup(conv_t* g) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  for (int32_t i = 0; i < kCopies; ++i) {
    LLVMValueRef e = LLVMBuildAdd(b, g->tid, c32(g, i * kThreads), "");
    // A: k fastest, so a warp reads 4 runs of 8 k of the weight's rows.
    LLVMValueRef am = LLVMBuildLShr(b, e, c32(g, 3), "");
    LLVMValueRef ak = LLVMBuildAnd(b, e, c32(g, kBK - 1), "");
    g->a_dst[i] = LLVMBuildMul(
        b,
        LLVMBuildAdd(b, LLVMBuildMul(b, ak, c32(g, g->a_stride), ""), am, ""),
        c32(g, 4), "");
    LLVMValueRef o =
        LLVMBuildAdd(b, g->o0, LLVMBuildZExt(b, am, em->t_i64, ""), "");
    g->a_ok[i] = LLVMBuildICmp(b, LLVMIntSLT, o, c64(g, g->O), "");
    g->a_k[i] = ak;
    LLVMValueRef off = LLVMBuildAdd(
        b,
        LLVMBuildMul(b, tj_emit_select(em, g->a_ok[i], o, c64(g, 0)),
                     c64(g, g->K), ""),
        LLVMBuildZExt(b, ak, em->t_i64, ""), "");
    g->a_src[i] = tj_emit_advance(em, g->wb, em->base[g->wb], off);
    // B: pixels fastest (consecutive x at stride 1); a thread's column is
    // tid % 128 for every copy, its k rows tid / 128 + 2 i.
    LLVMValueRef bn = LLVMBuildAnd(b, g->tid, c32(g, kBN - 1), "");
    LLVMValueRef bk = LLVMBuildLShr(b, e, c32(g, 7), "");
    g->b_dst[i] = LLVMBuildAdd(
        b, c32(g, g->a_bytes),
        LLVMBuildMul(
            b,
            LLVMBuildAdd(b, LLVMBuildMul(b, bk, c32(g, g->b_stride), ""), bn,
                         ""),
            c32(g, 4), ""),
        "");
    g->b_k[i] = bk;
  }
  pixel_setup(g, LLVMBuildAnd(b, g->tid, c32(g, kBN - 1), ""));
}

// The thread's pixel, column |bn| (i32) of the block's tile: its image
// and window origin.
static void pixel_setup(conv_t* g, LLVMValueRef bn) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMValueRef gp =
      LLVMBuildAdd(b, g->p0, LLVMBuildZExt(b, bn, em->t_i64, ""), "");
  g->pix_ok = LLVMBuildICmp(b, LLVMIntSLT, gp, g->np, "");
  gp = tj_emit_select(em, g->pix_ok, gp, c64(g, 0));
  LLVMValueRef n = LLVMBuildUDiv(b, gp, c64(g, g->P), "n");
  LLVMValueRef pix = LLVMBuildTrunc(
      b, LLVMBuildSub(b, gp, LLVMBuildMul(b, n, c64(g, g->P), ""), ""),
      em->t_i32, "pix");
  g->x_image = LLVMBuildMul(b, n, c64(g, g->C * g->INS), "");
  LLVMValueRef rest = pix;
  for (int32_t d = 2; d >= g->axis0; --d) {
    LLVMValueRef idx =
        d == g->axis0 ? rest : LLVMBuildURem(b, rest, c32(g, g->od[d]), "");
    if (d != g->axis0) rest = LLVMBuildUDiv(b, rest, c32(g, g->od[d]), "");
    LLVMValueRef org = LLVMBuildSub(
        b, LLVMBuildMul(b, idx, c32(g, g->st[d]), ""), c32(g, g->low[d]), "");
    g->origin[d] = LLVMBuildSExt(b, org, g->it, "");
  }
}

static void gather(conv_t* g, LLVMValueRef base, LLVMValueRef k0,
                   LLVMValueRef bk, LLVMValueRef dst);

static void gather_tabled(conv_t* g, LLVMValueRef base, LLVMValueRef k0,
                          LLVMValueRef bk, LLVMValueRef dst);

static void load_tile(conv_t* g, LLVMValueRef stage, LLVMValueRef kt) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMValueRef base = smem_at(
      g, g->smem,
      LLVMBuildTrunc(b, LLVMBuildMul(b, stage, c64(g, g->stage_bytes), ""),
                     em->t_i32, ""));
  LLVMValueRef k0 =
      LLVMBuildTrunc(b, LLVMBuildMul(b, kt, c64(g, kBK), ""), em->t_i32, "k0");
  for (int32_t i = 0; i < kCopies; ++i) {
    LLVMValueRef ak_ok = LLVMBuildICmp(
        b, LLVMIntSLT, LLVMBuildAdd(b, k0, g->a_k[i], ""), c32(g, g->K), "");
    LLVMValueRef a_ok = LLVMBuildAnd(b, ak_ok, g->a_ok[i], "");
    LLVMValueRef asrc = tj_emit_advance(
        em, g->wb, g->a_src[i],
        tj_emit_select(em, a_ok, LLVMBuildZExt(b, k0, em->t_i64, ""),
                       c64(g, 0)));
    cp_async4(g, base, g->a_dst[i], asrc, a_ok);
    gather(g, base, k0, g->b_k[i], g->b_dst[i]);
  }
}

// The 4-byte copy of B element (k0 + |bk|, the thread's pixel) to |dst|
// (i32 offsets from |base|): row k is (c, taps) by constants; the tap's
// coordinate per axis is origin + t * dilation, inside x when below the
// size as unsigned. Elsewhere it copies 0 bytes, which zero-fills.
static void gather(conv_t* g, LLVMValueRef base, LLVMValueRef k0,
                   LLVMValueRef bk, LLVMValueRef dst) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  if (g->taps) {
    gather_tabled(g, base, k0, bk, dst);
    return;
  }
  LLVMValueRef kk = LLVMBuildAdd(b, k0, bk, "");
  LLVMValueRef ok = LLVMBuildAnd(
      b, g->pix_ok, LLVMBuildICmp(b, LLVMIntSLT, kk, c32(g, g->K), ""), "");
  kk = tj_emit_select(em, ok, kk, c32(g, 0));
  LLVMValueRef c = LLVMBuildUDiv(b, kk, c32(g, g->KS), "c");
  LLVMValueRef t =
      LLVMBuildSub(b, kk, LLVMBuildMul(b, c, c32(g, g->KS), ""), "t");
  LLVMValueRef off =
      LLVMBuildMul(b, LLVMBuildZExt(b, c, g->it, ""), cit(g, g->INS), "");
  int64_t pitch = 1;
  for (int32_t d = 2; d >= g->axis0; --d) {
    LLVMValueRef td = t;
    if (d != g->axis0) {
      td = LLVMBuildURem(b, t, c32(g, g->ker[d]), "");
      t = LLVMBuildUDiv(b, t, c32(g, g->ker[d]), "");
    }
    LLVMValueRef coord = g->origin[d];
    if (g->ker[d] > 1) {
      coord = LLVMBuildAdd(b, coord,
                           LLVMBuildMul(b, LLVMBuildZExt(b, td, g->it, ""),
                                        cit(g, g->dil[d]), ""),
                           "");
    }
    // Axes that no window can leave (no padding, kernel 1, stride 1)
    // need no check.
    bool can_leave = g->low[d] != 0 || g->ker[d] > 1 ||
                     (g->od[d] - 1) * g->st[d] >= g->in[d];
    if (can_leave) {
      ok = LLVMBuildAnd(
          b, ok, LLVMBuildICmp(b, LLVMIntULT, coord, cit(g, g->in[d]), ""), "");
    }
    off = LLVMBuildAdd(b, off, LLVMBuildMul(b, coord, cit(g, pitch), ""), "");
    pitch *= g->in[d];
  }
  LLVMValueRef xoff = LLVMBuildAdd(
      b, g->x_image,
      g->it == em->t_i64 ? off : LLVMBuildSExt(b, off, em->t_i64, ""), "");
  LLVMValueRef src = tj_emit_advance(em, g->xb, em->base[g->xb],
                                     tj_emit_select(em, ok, xoff, c64(g, 0)));
  cp_async4(g, base, dst, src, ok);
}

// The wgmma kernel's tap table, for 1D and 2D convs: entry k (k0 + bk
// of a gather, the same across a warp: one broadcast from L1) is {x's offset of
// tap k from the window origin, its displacement along axis 1 (high 16 bits)
// and axis 2 (low)}; entries past K have the displacement kFar along both,
// which no coordinate check passes. A gather is then a load, two adds and two
// unsigned compares instead of k's division into (c, taps) by constants
// (a multiply-high and shift chain per division, three for a 2D tap). The table
// is a global of the module, not .const: a model's conv kernels share one
// module, and their tables (resnet18's add to 250 KB) would pass the 64 KB
// constant bank.
#define kFar 0x4000

static bool tap_table_fits(const conv_t* g) {
  const int64_t entries = (g->K + kWgBK - 1) / kWgBK * kWgBK;
  if (g->axis0 < 1 || entries * 8 > (1 << 20) || g->it != g->em->t_i32)
    return false;
  for (int32_t d = 1; d <= 2; ++d) {
    // Coordinates of valid and far taps in i16 (a window origin is at
    // least -low), and no far tap inside x.
    if (g->in[d] + g->low[d] + (g->ker[d] - 1) * g->dil[d] >= kFar ||
        (g->od[d] - 1) * g->st[d] >= kFar)
      return false;
  }
  return true;
}

static tj_status_t tap_table(conv_t* g) {
  tj_emit_t* em = g->em;
  const int64_t entries = (g->K + kWgBK - 1) / kWgBK * kWgBK;
  LLVMTypeRef et = LLVMVectorType(em->t_i32, 2);
  tj_allocator_t al = g->k->allocator;
  LLVMValueRef* v = tj_calloc(al, (size_t)entries, sizeof(*v));
  if (!v) return tj_status_oom();
  for (int64_t k = 0; k < entries; ++k) {
    int64_t off = 0, da = kFar, db = kFar;
    if (k < g->K) {
      int64_t c = k / g->KS, t = k % g->KS;
      int64_t t2 = t % g->ker[2], t1 = g->axis0 == 1 ? t / g->ker[2] : 0;
      da = t1 * g->dil[1];
      db = t2 * g->dil[2];
      off = c * g->INS + da * g->in[2] + db;
    }
    LLVMValueRef f[2] = {
        LLVMConstInt(em->t_i32, (unsigned long long)off, 0),
        LLVMConstInt(em->t_i32, (unsigned long long)((da << 16) | db), 0)};
    v[k] = LLVMConstVector(f, 2);
  }
  char name[256];
  snprintf(name, sizeof(name), "conv_taps_%s", g->k->name);
  LLVMTypeRef at = LLVMArrayType2(et, (uint64_t)entries);
  LLVMValueRef tab = LLVMAddGlobalInAddressSpace(em->mod, at, name, 1);
  LLVMSetInitializer(tab, LLVMConstArray2(et, v, (uint64_t)entries));
  LLVMSetGlobalConstant(tab, 1);
  LLVMSetLinkage(tab, LLVMInternalLinkage);
  LLVMSetAlignment(tab, 8);
  tj_free(al, v, (size_t)entries * sizeof(*v));
  g->taps = tab;
  return NULL;
}

static void gather_tabled(conv_t* g, LLVMValueRef base, LLVMValueRef k0,
                          LLVMValueRef bk, LLVMValueRef dst) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMTypeRef et = LLVMVectorType(em->t_i32, 2);
  LLVMValueRef idx[2] = {c32(g, 0), LLVMBuildAdd(b, k0, bk, "")};
  const int64_t entries = (g->K + kWgBK - 1) / kWgBK * kWgBK;
  LLVMValueRef e =
      LLVMBuildLoad2(b, et,
                     LLVMBuildGEP2(b, LLVMArrayType2(et, (uint64_t)entries),
                                   g->taps, idx, 2, ""),
                     "tap");
  LLVMSetAlignment(e, 8);
  LLVMValueRef off = LLVMBuildExtractElement(b, e, c32(g, 0), "");
  LLVMValueRef disp = LLVMBuildExtractElement(b, e, c32(g, 1), "");
  LLVMValueRef ok =
      LLVMBuildICmp(b, LLVMIntULT,
                    LLVMBuildAdd(b, g->origin[2],
                                 LLVMBuildAnd(b, disp, c32(g, 0xFFFF), ""), ""),
                    c32(g, g->in[2]), "");
  if (g->axis0 == 1) {
    ok = LLVMBuildAnd(
        b, ok,
        LLVMBuildICmp(b, LLVMIntULT,
                      LLVMBuildAdd(b, g->origin[1],
                                   LLVMBuildLShr(b, disp, c32(g, 16), ""), ""),
                      c32(g, g->in[1]), ""),
        "");
  }
  LLVMValueRef xoff = LLVMBuildAdd(
      b, g->x_image,
      LLVMBuildSExt(b, LLVMBuildAdd(b, g->x_pixel, off, ""), em->t_i64, ""),
      "");
  LLVMValueRef src = tj_emit_advance(em, g->xb, em->base[g->xb],
                                     tj_emit_select(em, ok, xoff, c64(g, 0)));
  cp_async4(g, base, dst, src, ok);
}

// The patches of k-tile |k0| of a tap-major K (a prepared weight, C a
// multiple of 32): the tile is channels c0 .. c0 + 31 of one tap t, so a
// thread checks its pixel's tap once and copies its 4-byte elements from
// INS apart (channel k of the tile at c0 + k): the tap's decomposition, a
// window check and one address a k-tile, then each copy an add and its
// cp.async (the tabled gather looks up, checks and addresses each). A
// pixel past N x P has its origin far (kFar), outside every check.
static void gather_tap_major(conv_t* g, LLVMValueRef base, LLVMValueRef k0) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMValueRef t = LLVMBuildUDiv(b, k0, c32(g, g->C), "tap");
  LLVMValueRef c0 =
      LLVMBuildSub(b, k0, LLVMBuildMul(b, t, c32(g, g->C), ""), "c0");
  LLVMValueRef t1 = LLVMBuildUDiv(b, t, c32(g, g->ker[2]), "");
  LLVMValueRef t2 =
      LLVMBuildSub(b, t, LLVMBuildMul(b, t1, c32(g, g->ker[2]), ""), "");
  LLVMValueRef da = LLVMBuildMul(b, t1, c32(g, g->dil[1]), "");
  LLVMValueRef db = LLVMBuildMul(b, t2, c32(g, g->dil[2]), "");
  LLVMValueRef ok = LLVMBuildAnd(
      b,
      LLVMBuildICmp(b, LLVMIntULT, LLVMBuildAdd(b, g->origin[1], da, ""),
                    c32(g, g->in[1]), ""),
      LLVMBuildICmp(b, LLVMIntULT, LLVMBuildAdd(b, g->origin[2], db, ""),
                    c32(g, g->in[2]), ""),
      "tap_ok");
  LLVMValueRef off = LLVMBuildAdd(
      b,
      LLVMBuildAdd(b, g->x_pixel, LLVMBuildMul(b, c0, c32(g, g->INS), ""), ""),
      LLVMBuildAdd(b, LLVMBuildMul(b, da, c32(g, g->in[2]), ""), db, ""), "");
  LLVMValueRef xoff = tj_emit_select(
      em, ok,
      LLVMBuildAdd(b, g->x_image, LLVMBuildSExt(b, off, em->t_i64, ""), ""),
      c64(g, 0));
  const int32_t q = g->bn / 8, per_row = 32 / q;
  for (int32_t i = 0; i < 4; ++i) {
    LLVMValueRef p = tj_emit_advance(em, g->xb, em->base[g->xb],
                                     LLVMBuildAdd(b, xoff, g->b_eoff[i], ""));
    for (int32_t j = 0; j < q / 4; ++j) {
      LLVMValueRef src =
          tj_emit_advance(em, g->xb, p, c64(g, 4 * per_row * j * g->INS));
      cp_async4(g, base, g->b_dst[j * 4 + i], src, ok);
    }
  }
}

//===--- the math ---===//

static LLVMValueRef load_f32(conv_t* g, LLVMValueRef base, LLVMValueRef off) {
  LLVMValueRef v =
      LLVMBuildLoad2(g->b, g->em->t_f32, smem_at(g, base, off), "");
  LLVMSetAlignment(v, 4);
  return v;
}

static LLVMValueRef load_v4(conv_t* g, LLVMValueRef base, LLVMValueRef off) {
  LLVMValueRef v = LLVMBuildLoad2(g->b, LLVMVectorType(g->em->t_f32, 4),
                                  smem_at(g, base, off), "");
  LLVMSetAlignment(v, 16);
  return v;
}

// CUDA cores: thread (ty, tx) = (tid / 16, tid % 16) owns rows ty * 4 +
// {0..3} and 64 more, columns tx * 4 + {0..3} and 64 more.
static void simt_compute(conv_t* g, LLVMValueRef base) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMValueRef ty4 =
      LLVMBuildMul(b, LLVMBuildLShr(b, g->tid, c32(g, 4), ""), c32(g, 16), "");
  LLVMValueRef tx4 =
      LLVMBuildMul(b, LLVMBuildAnd(b, g->tid, c32(g, 15), ""), c32(g, 16), "");
  for (int32_t kk = 0; kk < kBK; ++kk) {
    LLVMValueRef av[2], bv[2];
    for (int32_t h = 0; h < 2; ++h) {
      av[h] = load_v4(
          g, base,
          LLVMBuildAdd(b, c32(g, (kk * g->a_stride + h * 64) * 4), ty4, ""));
      bv[h] = load_v4(
          g, base,
          LLVMBuildAdd(b, c32(g, g->a_bytes + (kk * g->b_stride + h * 64) * 4),
                       tx4, ""));
    }
    LLVMValueRef a[8], bb[8];
    for (int32_t i = 0; i < 8; ++i) {
      a[i] = LLVMBuildExtractElement(b, av[i / 4], c32(g, i % 4), "");
      bb[i] = LLVMBuildExtractElement(b, bv[i / 4], c32(g, i % 4), "");
    }
    LLVMTypeRef t = em->t_f32;
    for (int32_t i = 0; i < 8; ++i) {
      for (int32_t j = 0; j < 8; ++j) {
        LLVMValueRef slot = acc_slot(g, i * 8 + j);
        LLVMValueRef args[3] = {a[i], bb[j],
                                LLVMBuildLoad2(b, em->t_f32, slot, "")};
        LLVMBuildStore(b, tj_emit_intrinsic(em, "llvm.fma", &t, 1, args, 3),
                       slot);
      }
    }
  }
}

// An f32 rounded to TF32 (nearest, ties away), as the .tf32 operand bits.
static LLVMValueRef to_tf32(conv_t* g, LLVMValueRef x) {
  return tj_emit_inline_asm(g->em, g->em->t_i32, "cvt.rna.tf32.f32 $0, $1;",
                            "=r,f", &x, 1);
}

// TF32 tensor cores: warp w is (wm, wn) = (w / 4, w % 4), a 64 x 32 warp
// tile of 4 x 4 m16n8k8 tiles; acc (mi, ni, e) at (mi * 4 + ni) * 4 + e.
static void tf32_compute(conv_t* g, LLVMValueRef base) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMValueRef lane = LLVMBuildAnd(b, g->tid, c32(g, 31), "");
  LLVMValueRef warp = LLVMBuildLShr(b, g->tid, c32(g, 5), "");
  LLVMValueRef wm = LLVMBuildLShr(b, warp, c32(g, 2), "");
  LLVMValueRef wn = LLVMBuildAnd(b, warp, c32(g, 3), "");
  LLVMValueRef grp = LLVMBuildLShr(b, lane, c32(g, 2), "");
  LLVMValueRef t4 = LLVMBuildAnd(b, lane, c32(g, 3), "");
  // A[o][k] sits at [k][o]: (k * a_stride + o) * 4.
  LLVMValueRef a0 = LLVMBuildMul(
      b,
      LLVMBuildAdd(
          b, LLVMBuildMul(b, t4, c32(g, g->a_stride), ""),
          LLVMBuildAdd(b, LLVMBuildMul(b, wm, c32(g, 64), ""), grp, ""), ""),
      c32(g, 4), "");
  LLVMValueRef b0 = LLVMBuildAdd(
      b, c32(g, g->a_bytes),
      LLVMBuildMul(
          b,
          LLVMBuildAdd(
              b, LLVMBuildMul(b, t4, c32(g, g->b_stride), ""),
              LLVMBuildAdd(b, LLVMBuildMul(b, wn, c32(g, 32), ""), grp, ""),
              ""),
          c32(g, 4), ""),
      "");
  LLVMValueRef af[4][4], bf[4][2];
  for (int32_t mi = 0; mi < 4; ++mi) {
    for (int32_t r = 0; r < 4; ++r) {
      // a0: (grp, t4), a1: (grp + 8, t4), a2: (grp, t4 + 4), a3: both.
      int32_t dm = mi * 16 + (r & 1) * 8, dk = (r >> 1) * 4;
      af[mi][r] = to_tf32(
          g, load_f32(
                 g, base,
                 LLVMBuildAdd(b, a0, c32(g, (dk * g->a_stride + dm) * 4), "")));
    }
  }
  for (int32_t ni = 0; ni < 4; ++ni) {
    for (int32_t r = 0; r < 2; ++r) {
      // b0: (k t4, n grp), b1: (k t4 + 4, n grp).
      bf[ni][r] = to_tf32(
          g,
          load_f32(g, base,
                   LLVMBuildAdd(
                       b, b0, c32(g, (r * 4 * g->b_stride + ni * 8) * 4), "")));
    }
  }
  LLVMTypeRef f4[4] = {em->t_f32, em->t_f32, em->t_f32, em->t_f32};
  LLVMTypeRef ret = LLVMStructTypeInContext(em->ctx, f4, 4, 0);
  for (int32_t mi = 0; mi < 4; ++mi) {
    for (int32_t ni = 0; ni < 4; ++ni) {
      LLVMValueRef args[10], slots[4];
      for (int32_t r = 0; r < 4; ++r) args[r] = af[mi][r];
      args[4] = bf[ni][0];
      args[5] = bf[ni][1];
      for (int32_t e = 0; e < 4; ++e) {
        slots[e] = acc_slot(g, (mi * 4 + ni) * 4 + e);
        args[6 + e] = LLVMBuildLoad2(b, em->t_f32, slots[e], "");
      }
      LLVMValueRef d = tj_emit_inline_asm(
          em, ret,
          "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
          "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};",
          "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3", args, 10);
      for (unsigned e = 0; e < 4; ++e)
        LLVMBuildStore(b, LLVMBuildExtractValue(b, d, e, ""), slots[e]);
    }
  }
}

// The ring over the block's k-tiles [kt0, kt1): stages - 1 in flight
// ahead of the math; the stage refilled in an iteration was read in the
// previous one, which every thread has finished (it passed that
// iteration's barrier).
static void main_loop(conv_t* g) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMValueRef count = LLVMBuildSub(b, g->kt1, g->kt0, "");
  for (int32_t s = 0; s < kStages - 1; ++s) {
    tj_emit_if_t have;
    tj_emit_if_begin(em, &have,
                     LLVMBuildICmp(b, LLVMIntSLT, c64(g, s), count, ""),
                     "prologue");
    load_tile(g, c64(g, s), LLVMBuildAdd(b, g->kt0, c64(g, s), ""));
    tj_emit_if_end(em, &have);
    // Empty groups keep the group count in step with the k-tiles.
    call(g, "llvm.nvvm.cp.async.commit.group", NULL, 0);
  }
  tj_emit_loop_t loop;
  LLVMValueRef j =
      tj_emit_loop_begin(em, &loop, c64(g, 0), count, c64(g, 1), "j");
  LLVMValueRef pending = c32(g, kStages - 2);
  call(g, "llvm.nvvm.cp.async.wait.group", &pending, 1);
  tj_nvptx_barrier(g->nv);
  LLVMValueRef next = LLVMBuildAdd(b, j, c64(g, kStages - 1), "");
  tj_emit_if_t more;
  tj_emit_if_begin(em, &more, LLVMBuildICmp(b, LLVMIntSLT, next, count, ""),
                   "prefetch");
  load_tile(g, LLVMBuildSRem(b, next, c64(g, kStages), ""),
            LLVMBuildAdd(b, g->kt0, next, ""));
  tj_emit_if_end(em, &more);
  call(g, "llvm.nvvm.cp.async.commit.group", NULL, 0);
  LLVMValueRef stage = LLVMBuildSRem(b, j, c64(g, kStages), "");
  LLVMValueRef base = smem_at(
      g, g->smem,
      LLVMBuildTrunc(b, LLVMBuildMul(b, stage, c64(g, g->stage_bytes), ""),
                     em->t_i32, ""));
  if (g->tf32) {
    tf32_compute(g, base);
  } else {
    simt_compute(g, base);
  }
  tj_emit_loop_end(em, &loop);
  LLVMValueRef none = c32(g, 0);
  call(g, "llvm.nvvm.cp.async.wait.group", &none, 1);
}

//===--- the wgmma kernel (sm_90a, TF32) ---===//

// Offset (i32) of element |k| (0..31) of row |row| in an SW128 tile: rows
// of 128 bytes, 16-byte chunk c of row r at chunk c ^ (r & 7).
static LLVMValueRef sw128(conv_t* g, LLVMValueRef row, LLVMValueRef k) {
  LLVMBuilderRef b = g->b;
  LLVMValueRef ch = LLVMBuildXor(b, LLVMBuildLShr(b, k, c32(g, 2), ""),
                                 LLVMBuildAnd(b, row, c32(g, 7), ""), "");
  return LLVMBuildAdd(
      b,
      LLVMBuildAdd(b, LLVMBuildMul(b, row, c32(g, kRow), ""),
                   LLVMBuildShl(b, ch, c32(g, 4), ""), ""),
      LLVMBuildMul(b, LLVMBuildAnd(b, k, c32(g, 3), ""), c32(g, 4), ""), "");
}

// A (the weight, [o][k] as stored: K-major) in 16-byte chunks where K is a
// multiple of 4 and w 16-byte aligned (a16_*), else 4 bytes at a time
// (addressed in wg_load_tile); B (the patch matrix, stored [pixel][k]: K-major,
// as TF32 wgmma wants both operands) 4 bytes at a time, gathered through the
// window.
static tj_status_t wg_copy_setup(conv_t* g) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  const int32_t threads = kThreads;
  for (int32_t i = 0; i < g->bm / 32; ++i) {
    // Chunk e: row e / 8, chunk e % 8 (a warp reads 4 rows' 128 bytes).
    LLVMValueRef e = LLVMBuildAdd(b, g->tid, c32(g, i * threads), "");
    LLVMValueRef row = LLVMBuildLShr(b, e, c32(g, 3), "");
    LLVMValueRef k =
        LLVMBuildMul(b, LLVMBuildAnd(b, e, c32(g, 7), ""), c32(g, 4), "");
    g->a16_dst[i] = sw128(g, row, k);
    g->a16_k[i] = k;
    LLVMValueRef o =
        LLVMBuildAdd(b, g->o0, LLVMBuildZExt(b, row, em->t_i64, ""), "");
    g->a16_ok[i] = LLVMBuildICmp(b, LLVMIntSLT, o, c64(g, g->O), "");
    LLVMValueRef off = LLVMBuildAdd(
        b,
        LLVMBuildMul(b, tj_emit_select(em, g->a16_ok[i], o, c64(g, 0)),
                     c64(g, g->prep ? g->kp : g->K), ""),
        LLVMBuildZExt(b, k, em->t_i64, ""), "");
    g->a16_src[i] = tj_emit_advance(em, g->wb, em->base[g->wb], off);
  }
  // B: warp w copies pixels [w q, w q + q) (q = bn / 8), lane l pixel
  // l % q and the 16-byte chunks (4 k each) l / q + (32 / q) j of its row,
  // j < q / 4, whole, so that wg_round_tile rounds them as vectors. Copy
  // i of a chunk is its element (i + l / 8) % 4: the 8 lanes of a group
  // hold 8 rows of the swizzle (8 distinct chunks) and the 4 groups, whose
  // chunks coincide, distinct elements, so a warp's 32 4-byte stores hit
  // 32 banks (one element for all would be 4-way); the 8 lanes' 16-byte
  // chunks cover the banks once.
  const int32_t q = g->bn / 8, per_row = 32 / q;
  LLVMValueRef lane = LLVMBuildAnd(b, g->tid, c32(g, 31), "");
  LLVMValueRef col = LLVMBuildAdd(
      b, LLVMBuildAnd(b, lane, c32(g, q - 1), ""),
      LLVMBuildMul(b, LLVMBuildLShr(b, g->tid, c32(g, 5), ""), c32(g, q), ""),
      "");
  LLVMValueRef cb = LLVMBuildUDiv(b, lane, c32(g, q), "");
  LLVMValueRef rot = LLVMBuildLShr(b, lane, c32(g, 3), "");
  for (int32_t j = 0; j < q / 4; ++j) {
    LLVMValueRef k4 = LLVMBuildMul(
        b, LLVMBuildAdd(b, cb, c32(g, per_row * j), ""), c32(g, 4), "");
    g->b_chunk[j] = LLVMBuildAdd(b, c32(g, g->a_bytes), sw128(g, col, k4), "");
    for (int32_t i = 0; i < 4; ++i) {
      LLVMValueRef k = LLVMBuildAdd(
          b, k4,
          LLVMBuildAnd(b, LLVMBuildAdd(b, rot, c32(g, i), ""), c32(g, 3), ""),
          "");
      g->b_k[j * 4 + i] = k;
      g->b_dst[j * 4 + i] =
          LLVMBuildAdd(b, c32(g, g->a_bytes), sw128(g, col, k), "");
    }
  }
  pixel_setup(g, col);
  if (g->tap_major) {
    for (int32_t i = 0; i < 4; ++i)
      g->b_eoff[i] = LLVMBuildMul(b, LLVMBuildZExt(b, g->b_k[i], em->t_i64, ""),
                                  c64(g, g->INS), "");
  }
  if (tap_table_fits(g)) {
    if (!g->tap_major) TJ_RETURN_IF_ERROR(tap_table(g));
    // A pixel past N x P: its origin far along the last axis, so that no
    // tap passes the check.
    g->origin[2] = tj_emit_select(em, g->pix_ok, g->origin[2], c32(g, kFar));
    g->x_pixel = g->origin[2];
    if (g->axis0 == 1) {
      g->x_pixel =
          LLVMBuildAdd(b, LLVMBuildMul(b, g->origin[1], c32(g, g->in[2]), ""),
                       g->x_pixel, "");
    }
  }
  g->a_vec = LLVMConstInt(em->t_i1, g->prep, 0);
  if (g->K % 4 == 0 && !g->prep) {
    LLVMValueRef at = LLVMBuildPtrToInt(b, em->base[g->wb], em->t_i64, "");
    g->a_vec = LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildAnd(b, at, c64(g, 15), ""),
                             c64(g, 0), "a_vec");
  }
  return NULL;
}

static void wg_load_tile(conv_t* g, LLVMValueRef stage, LLVMValueRef kt) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMValueRef base = smem_at(
      g, g->ring,
      LLVMBuildTrunc(b, LLVMBuildMul(b, stage, c64(g, g->stage_bytes), ""),
                     em->t_i32, ""));
  LLVMValueRef k0 = LLVMBuildTrunc(b, LLVMBuildMul(b, kt, c64(g, kWgBK), ""),
                                   em->t_i32, "k0");
  tj_emit_if_t vec, elems;
  if (g->prep) {
    // Rows of kp, a multiple of the k-tile: no k bound.
    for (int32_t i = 0; i < g->bm / 32; ++i) {
      LLVMValueRef src = tj_emit_advance(em, g->wb, g->a16_src[i],
                                         LLVMBuildZExt(b, k0, em->t_i64, ""));
      LLVMValueRef args[3] = {
          smem_at(g, base, g->a16_dst[i]),
          LLVMBuildAddrSpaceCast(b, src, g->nv->t_ptr_global, ""),
          tj_emit_select(em, g->a16_ok[i], c32(g, 16), c32(g, 0))};
      call(g, "llvm.nvvm.cp.async.cg.shared.global.16.s", args, 3);
    }
    if (g->tap_major) {
      gather_tap_major(g, base, k0);
    } else {
      for (int32_t i = 0; i < g->b_copies; ++i)
        gather(g, base, k0, g->b_k[i], g->b_dst[i]);
    }
    return;
  }
  if (g->K % 4 == 0) {
    // K a multiple of 4: a chunk is all inside K or all past it.
    tj_emit_if_begin(em, &vec, g->a_vec, "a_vec");
    for (int32_t i = 0; i < g->bm / 32; ++i) {
      LLVMValueRef ok = LLVMBuildAnd(
          b, g->a16_ok[i],
          LLVMBuildICmp(b, LLVMIntSLT, LLVMBuildAdd(b, k0, g->a16_k[i], ""),
                        c32(g, g->K), ""),
          "");
      LLVMValueRef src = tj_emit_advance(
          em, g->wb, g->a16_src[i],
          tj_emit_select(em, ok, LLVMBuildZExt(b, k0, em->t_i64, ""),
                         c64(g, 0)));
      LLVMValueRef args[3] = {
          smem_at(g, base, g->a16_dst[i]),
          LLVMBuildAddrSpaceCast(b, src, g->nv->t_ptr_global, ""),
          tj_emit_select(em, ok, c32(g, 16), c32(g, 0))};
      call(g, "llvm.nvvm.cp.async.cg.shared.global.16.s", args, 3);
    }
    tj_emit_if_end(em, &vec);
  }
  // 4 bytes at a time (conv1's K = 147, or an unaligned w): addressed
  // here, not kept in registers across the loop (the 16-byte path's
  // registers are live too).
  tj_emit_if_begin(em, &elems, LLVMBuildNot(b, g->a_vec, ""), "a_elems");
  for (int32_t i = 0; i < g->bm * kWgBK / kThreads; ++i) {
    LLVMValueRef e = LLVMBuildAdd(b, g->tid, c32(g, i * kThreads), "");
    LLVMValueRef row = LLVMBuildLShr(b, e, c32(g, 5), "");
    LLVMValueRef k = LLVMBuildAnd(b, e, c32(g, kWgBK - 1), "");
    LLVMValueRef o =
        LLVMBuildAdd(b, g->o0, LLVMBuildZExt(b, row, em->t_i64, ""), "");
    LLVMValueRef kk = LLVMBuildAdd(b, k0, k, "");
    LLVMValueRef ok =
        LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSLT, o, c64(g, g->O), ""),
                     LLVMBuildICmp(b, LLVMIntSLT, kk, c32(g, g->K), ""), "");
    LLVMValueRef off = LLVMBuildAdd(b, LLVMBuildMul(b, o, c64(g, g->K), ""),
                                    LLVMBuildZExt(b, kk, em->t_i64, ""), "");
    LLVMValueRef src = tj_emit_advance(em, g->wb, em->base[g->wb],
                                       tj_emit_select(em, ok, off, c64(g, 0)));
    cp_async4(g, base, sw128(g, row, k), src, ok);
  }
  tj_emit_if_end(em, &elems);
  for (int32_t i = 0; i < g->b_copies; ++i)
    gather(g, base, k0, g->b_k[i], g->b_dst[i]);
}

// Runs |text| with the bn / 2 accumulators as tied in/out operands $0..
// and |extra| further inputs (constraints |extra_cons|) after them, so
// that LLVM neither reads them before a wait nor writes them between
// wgmmas (ptxas would serialize those, C7515).
static void acc_asm(conv_t* g, const char* text, LLVMValueRef* extra,
                    int32_t num_extra, const char* extra_cons) {
  const int32_t n = g->wn / 2;
  char cons[800];
  size_t len = 0;
  for (int32_t i = 0; i < n; ++i)
    len += (size_t)snprintf(cons + len, sizeof(cons) - len, "=f,");
  len += (size_t)snprintf(cons + len, sizeof(cons) - len, "%s", extra_cons);
  for (int32_t i = 0; i < n; ++i)
    len += (size_t)snprintf(cons + len, sizeof(cons) - len, "%s%d",
                            len && cons[len - 1] != ',' ? "," : "", i);
  snprintf(cons + len, sizeof(cons) - len, ",~{memory}");
  LLVMValueRef args[64 + 4];
  for (int32_t i = 0; i < num_extra; ++i) args[i] = extra[i];
  for (int32_t i = 0; i < n; ++i)
    args[num_extra + i] =
        LLVMBuildLoad2(g->b, g->em->t_f32, acc_slot(g, i), "");
  LLVMValueRef r = tj_emit_inline_asm(g->em, g->acc_struct, text, cons, args,
                                      (unsigned)(num_extra + n));
  for (int32_t i = 0; i < n; ++i)
    LLVMBuildStore(g->b, LLVMBuildExtractValue(g->b, r, (unsigned)i, ""),
                   acc_slot(g, i));
}

static void wg_wait(conv_t* g, int32_t pending) {
  char text[64];
  snprintf(text, sizeof(text), "wgmma.wait_group.sync.aligned %d;",
           (int)pending);
  acc_asm(g, text, NULL, 0, "");
}

static void plain_asm(conv_t* g, const char* text) {
  tj_emit_inline_asm(g->em, g->em->t_void, text, "~{memory}", NULL, 0);
}

// The four k8 steps of k-tile |j| (i64, of the block's slice) in stage
// |stage| (i64): warpgroup tid / 128 takes output channels [64 wg, 64 wg +
// 64) of the tile by every pixel. Both descriptors step +32 bytes per k8
// inside the swizzled rows (the hardware applies the XOR to the address
// bits), 8-row atoms 1024 bytes apart (SBO); LBO unused (1).
static void wg_compute(conv_t* g, LLVMValueRef j, LLVMValueRef stage) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  // Warpgroup w: weight rows [64 w, 64 w + 64) by every pixel, or (wide)
  // all 64 rows by pixels [wn w, wn w + wn).
  LLVMValueRef soff = LLVMBuildTrunc(
      b, LLVMBuildMul(b, stage, c64(g, g->stage_bytes), ""), em->t_i32, "");
  // A prepared weight's kernel keeps stage 0's descriptors (loop
  // invariants): a stage and a k8 step add their offset / 16 to the start
  // address field (bits 0-13; the ring lies below 256 KiB, so the field
  // never carries). The plain kernel, at 128 registers, has no room for
  // them (4 bytes spilled): it makes each from its address.
  LLVMValueRef base =
      g->prep ? g->ring_addr : LLVMBuildAdd(b, g->ring_addr, soff, "");
  LLVMValueRef wg = LLVMBuildLShr(b, g->tid, c32(g, 7), "");
  LLVMValueRef a_addr =
      g->wide ? base
              : LLVMBuildAdd(b, base,
                             LLVMBuildMul(b, wg, c32(g, 64 * kRow), ""), "");
  LLVMValueRef b_addr = LLVMBuildAdd(b, base, c32(g, g->a_bytes), "");
  if (g->wide)
    b_addr = LLVMBuildAdd(b, b_addr,
                          LLVMBuildMul(b, wg, c32(g, g->wn * kRow), ""), "");
  LLVMValueRef da0 = NULL, db0 = NULL;
  if (g->prep) {
    LLVMValueRef s16 =
        LLVMBuildZExt(b, LLVMBuildLShr(b, soff, c32(g, 4), ""), em->t_i64, "");
    da0 = LLVMBuildAdd(b, tj_nvptx_wgmma_descriptor(em, a_addr, 16, kAtom), s16,
                       "");
    db0 = LLVMBuildAdd(b, tj_nvptx_wgmma_descriptor(em, b_addr, 16, kAtom), s16,
                       "");
  }
  const int32_t n = g->wn / 2;
  char text[1200];
  size_t len =
      (size_t)snprintf(text, sizeof(text),
                       "{\n.reg .pred p;\nsetp.ne.b32 p, $%d, 0;\n"
                       "wgmma.mma_async.sync.aligned.m64n%dk8.f32.tf32.tf32 {",
                       (int)n + 2, (int)g->wn);
  for (int32_t i = 0; i < n; ++i)
    len += (size_t)snprintf(text + len, sizeof(text) - len, "%s$%d",
                            i ? "," : "", (int)i);
  // scale-d p, scale-a 1, scale-b 1 (tf32 has no transpose operands).
  snprintf(text + len, sizeof(text) - len, "}, $%d, $%d, p, 1, 1;\n}", (int)n,
           (int)n + 1);
  plain_asm(g, "wgmma.fence.sync.aligned;");
  for (int32_t kk = 0; kk < kWgBK / 8; ++kk) {
    LLVMValueRef da =
        g->prep
            ? LLVMBuildAdd(b, da0, c64(g, kk * 2), "")
            : tj_nvptx_wgmma_descriptor(
                  em, LLVMBuildAdd(b, a_addr, c32(g, kk * 32), ""), 16, kAtom);
    LLVMValueRef db =
        g->prep
            ? LLVMBuildAdd(b, db0, c64(g, kk * 2), "")
            : tj_nvptx_wgmma_descriptor(
                  em, LLVMBuildAdd(b, b_addr, c32(g, kk * 32), ""), 16, kAtom);
    // The slice's first k8 overwrites the accumulators: they start
    // undefined, as zeroing them by movs that reach the loop would make
    // ptxas serialize the wgmmas (C7515).
    LLVMValueRef accumulate =
        kk ? c32(g, 1)
           : LLVMBuildZExt(b, LLVMBuildICmp(b, LLVMIntNE, j, c64(g, 0), ""),
                           em->t_i32, "");
    LLVMValueRef extra[3] = {da, db, accumulate};
    acc_asm(g, text, extra, 3, "l,l,r,");
  }
  plain_asm(g, "wgmma.commit_group.sync.aligned;");
}

// An f32 rounded to TF32 for wgmma: half a TF32 ulp (0x1000) added to a
// finite value's bits, the low 13 bits left for the tensor cores to drop
// (CUTLASS's round_half_ulp_truncate), which is cvt.rna's result (nearest,
// ties away) in two instructions (FSETP, a predicated IADD) instead of
// cvt.rna's three (and a LOP3 clearing the bits); Inf and NaN unchanged.
static LLVMValueRef to_tf32_half_ulp(conv_t* g, LLVMValueRef x) {
  // |x| < Inf as one FSETP with the |.| modifier (testp.finite takes a
  // LOP3 and an ISETP); NaN compares false.
  return tj_emit_inline_asm(g->em, g->em->t_i32,
                            "{\n.reg .pred p;\n.reg .f32 a;\nabs.f32 a, $1;\n"
                            "setp.lt.f32 p, a, 0f7F800000;\nmov.b32 $0, $1;\n"
                            "@p add.u32 $0, $0, 4096;\n}",
                            "=r,f", &x, 1);
}

// The 16-byte chunk at |off| (i32, 16-byte aligned) from |base| rounded
// to TF32 in place (to_tf32_half_ulp).
static void round_chunk(conv_t* g, LLVMValueRef base, LLVMValueRef off) {
  LLVMBuilderRef b = g->b;
  LLVMValueRef v = load_v4(g, base, off);
  LLVMValueRef r = LLVMGetUndef(LLVMVectorType(g->em->t_i32, 4));
  for (int32_t e = 0; e < 4; ++e)
    r = LLVMBuildInsertElement(
        b, r, to_tf32_half_ulp(g, LLVMBuildExtractElement(b, v, c32(g, e), "")),
        c32(g, e), "");
  LLVMSetAlignment(LLVMBuildStore(b, r, smem_at(g, base, off)), 16);
}

// The weight's part of wg_round_tile.
static void wg_round_weight(conv_t* g, LLVMValueRef base) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  tj_emit_if_t vec, elems;
  if (g->K % 4 == 0) {
    tj_emit_if_begin(em, &vec, g->a_vec, "round_a_vec");
    for (int32_t i = 0; i < g->bm / 32; ++i)
      round_chunk(g, base, g->a16_dst[i]);
    tj_emit_if_end(em, &vec);
  }
  tj_emit_if_begin(em, &elems, LLVMBuildNot(b, g->a_vec, ""), "round_a");
  for (int32_t i = 0; i < g->bm * kWgBK / kThreads; ++i) {
    LLVMValueRef e = LLVMBuildAdd(b, g->tid, c32(g, i * kThreads), "");
    LLVMValueRef off = sw128(g, LLVMBuildLShr(b, e, c32(g, 5), ""),
                             LLVMBuildAnd(b, e, c32(g, kWgBK - 1), ""));
    LLVMSetAlignment(
        LLVMBuildStore(b, to_tf32_half_ulp(g, load_f32(g, base, off)),
                       smem_at(g, base, off)),
        4);
  }
  tj_emit_if_end(em, &elems);
}

// Rounds this thread's copies in |stage| (i64) to TF32 in place, to
// nearest, ties away (mma.sync's cvt.rna, tf32_compute): wgmma reads
// .tf32 operands from shared memory as f32 and ignores their low 13
// mantissa bits, a truncation whose bias (toward zero, 2^-11 relative an
// operand on average) adds up over a network (0.088 of 11.1 on resnet18
// against mma.sync's 0.007). cp.async.wait_group made the thread's own
// copies visible to it, so it rewrites exactly those, with the addresses
// it copied to (no other thread's data, no barrier of its own); the
// fence.proxy.async after it hands the rewritten tile to wgmma. The
// thread's B copies and 16-byte A copies fill whole chunks, rounded as
// 16-byte vectors; 4-byte A copies (the stem's K 147) one by one;
// zero-filled copies stay 0. A prepared weight is rounded already: only
// the patches are rounded then.
static void wg_round_tile(conv_t* g, LLVMValueRef stage) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMValueRef base = smem_at(
      g, g->ring,
      LLVMBuildTrunc(b, LLVMBuildMul(b, stage, c64(g, g->stage_bytes), ""),
                     em->t_i32, ""));
  // A prepared weight is rounded already.
  if (!g->prep) wg_round_weight(g, base);
  for (int32_t j = 0; j < g->b_copies / 4; ++j)
    round_chunk(g, base, g->b_chunk[j]);
}

// The ring over the block's k-tiles [kt0, kt1), per k-tile j:
//   cp.async.wait_group  tile j has landed (this thread's copies)
//   cvt.rna              this thread's copies of it rounded to TF32
//                        (wg_round_tile)
//   fence.proxy.async    ... and is visible to wgmma (the async proxy)
//   bar.sync             every thread's copies; every warpgroup is past
//                        its wait_group 1 of j - 1, so the wgmmas of j - 2
//                        are done and their stage is free
//   wgmma x4, commit     on tile j
//   cp.async             tile j + stages - 2 into that stage
//   wait_group 1         (tile j's wgmmas run on under the next wait)
// as the wgmma GEMM's non-TMA loop (emit_nvptx_wgmma.c).
static void wg_main_loop(conv_t* g) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  const int32_t ahead = g->stages - 2;
  LLVMValueRef count = LLVMBuildSub(b, g->kt1, g->kt0, "");
  for (int32_t s = 0; s < ahead; ++s) {
    tj_emit_if_t have;
    tj_emit_if_begin(em, &have,
                     LLVMBuildICmp(b, LLVMIntSLT, c64(g, s), count, ""),
                     "prologue");
    wg_load_tile(g, c64(g, s), LLVMBuildAdd(b, g->kt0, c64(g, s), ""));
    tj_emit_if_end(em, &have);
    call(g, "llvm.nvvm.cp.async.commit.group", NULL, 0);
  }
  tj_emit_loop_t loop;
  LLVMValueRef j =
      tj_emit_loop_begin(em, &loop, c64(g, 0), count, c64(g, 1), "j");
  LLVMValueRef pending = c32(g, ahead - 1);
  call(g, "llvm.nvvm.cp.async.wait.group", &pending, 1);
  LLVMValueRef stage = LLVMBuildSRem(b, j, c64(g, g->stages), "stage");
  if (g->round) wg_round_tile(g, stage);
  plain_asm(g, "fence.proxy.async.shared::cta;");
  tj_nvptx_barrier(g->nv);
  wg_compute(g, j, stage);
  LLVMValueRef next = LLVMBuildAdd(b, j, c64(g, ahead), "");
  tj_emit_if_t more;
  tj_emit_if_begin(em, &more, LLVMBuildICmp(b, LLVMIntSLT, next, count, ""),
                   "prefetch");
  wg_load_tile(g, LLVMBuildSRem(b, next, c64(g, g->stages), ""),
               LLVMBuildAdd(b, g->kt0, next, ""));
  tj_emit_if_end(em, &more);
  call(g, "llvm.nvvm.cp.async.commit.group", NULL, 0);
  wg_wait(g, 1);
  tj_emit_loop_end(em, &loop);
  wg_wait(g, 0);
  LLVMValueRef none = c32(g, 0);
  call(g, "llvm.nvvm.cp.async.wait.group", &none, 1);
}

//===--- the epilogue ---===//

// The thread's part of the block tile: 8 rows (local o; 2 for wgmma), 2,
// 4 or bn / 8 groups of |width| consecutive columns (local pixels), and
// where each value sits in the accumulators.
typedef struct part_t {
  LLVMValueRef row[8];
  LLVMValueRef col[16];
  int32_t rows, groups, width;
  int32_t acc[8][16][4];
} part_t;

static void thread_part(conv_t* g, part_t* pt) {
  LLVMBuilderRef b = g->b;
  memset(pt, 0, sizeof(*pt));
  pt->rows = 8;
  if (g->wg) {
    // wgmma's m64nN f32 fragment: register i of thread (warp q of its
    // warpgroup, lane l) is row 16 q + l / 4 + 8 ((i / 2) % 2) of the
    // warpgroup's 64, column 8 (i / 4) + 2 (l % 4) + i % 2.
    // Warpgroup w's rows start at 64 w, or (wide) its columns at wn w.
    LLVMValueRef lane = LLVMBuildAnd(b, g->tid, c32(g, 31), "");
    LLVMValueRef wg = LLVMBuildLShr(b, g->tid, c32(g, 7), "");
    LLVMValueRef r0 = LLVMBuildAdd(
        b,
        LLVMBuildMul(b,
                     LLVMBuildAnd(b, LLVMBuildLShr(b, g->tid, c32(g, 5), ""),
                                  c32(g, 3), ""),
                     c32(g, 16), ""),
        LLVMBuildLShr(b, lane, c32(g, 2), ""), "");
    if (!g->wide)
      r0 = LLVMBuildAdd(b, r0, LLVMBuildMul(b, wg, c32(g, 64), ""), "");
    pt->rows = 2;
    pt->row[0] = r0;
    pt->row[1] = LLVMBuildAdd(b, r0, c32(g, 8), "");
    pt->groups = g->wn / 8;
    pt->width = 2;
    LLVMValueRef c0 =
        LLVMBuildMul(b, LLVMBuildAnd(b, lane, c32(g, 3), ""), c32(g, 2), "");
    if (g->wide)
      c0 = LLVMBuildAdd(b, c0, LLVMBuildMul(b, wg, c32(g, g->wn), ""), "");
    for (int32_t gi = 0; gi < pt->groups; ++gi) {
      pt->col[gi] = LLVMBuildAdd(b, c0, c32(g, gi * 8), "");
      for (int32_t h = 0; h < 2; ++h)
        for (int32_t j = 0; j < 2; ++j) pt->acc[h][gi][j] = gi * 4 + h * 2 + j;
    }
    return;
  }
  if (!g->tf32) {
    LLVMValueRef ty = LLVMBuildLShr(b, g->tid, c32(g, 4), "");
    LLVMValueRef tx = LLVMBuildAnd(b, g->tid, c32(g, 15), "");
    for (int32_t i = 0; i < 8; ++i) {
      pt->row[i] = LLVMBuildAdd(b, LLVMBuildMul(b, ty, c32(g, 4), ""),
                                c32(g, (i % 4) + (i / 4) * 64), "");
    }
    pt->groups = 2;
    pt->width = 4;
    for (int32_t h = 0; h < 2; ++h) {
      pt->col[h] = LLVMBuildAdd(b, LLVMBuildMul(b, tx, c32(g, 4), ""),
                                c32(g, h * 64), "");
      for (int32_t i = 0; i < 8; ++i)
        for (int32_t j = 0; j < 4; ++j) pt->acc[i][h][j] = i * 8 + h * 4 + j;
    }
    return;
  }
  LLVMValueRef lane = LLVMBuildAnd(b, g->tid, c32(g, 31), "");
  LLVMValueRef warp = LLVMBuildLShr(b, g->tid, c32(g, 5), "");
  LLVMValueRef wm = LLVMBuildLShr(b, warp, c32(g, 2), "");
  LLVMValueRef wn = LLVMBuildAnd(b, warp, c32(g, 3), "");
  LLVMValueRef grp = LLVMBuildLShr(b, lane, c32(g, 2), "");
  LLVMValueRef t4 = LLVMBuildAnd(b, lane, c32(g, 3), "");
  // Row i = (mi, half): wm * 64 + mi * 16 + half * 8 + grp; column group
  // ni: wn * 32 + ni * 8 + t4 * 2, 2 wide (c0 c1 | c2 c3 by half).
  for (int32_t i = 0; i < 8; ++i) {
    pt->row[i] = LLVMBuildAdd(
        b, LLVMBuildAdd(b, LLVMBuildMul(b, wm, c32(g, 64), ""), grp, ""),
        c32(g, (i / 2) * 16 + (i % 2) * 8), "");
  }
  pt->groups = 4;
  pt->width = 2;
  for (int32_t ni = 0; ni < 4; ++ni) {
    pt->col[ni] =
        LLVMBuildAdd(b,
                     LLVMBuildAdd(b, LLVMBuildMul(b, wn, c32(g, 32), ""),
                                  LLVMBuildMul(b, t4, c32(g, 2), ""), ""),
                     c32(g, ni * 8), "");
    for (int32_t i = 0; i < 8; ++i)
      for (int32_t j = 0; j < 2; ++j)
        pt->acc[i][ni][j] = ((i / 2) * 4 + ni) * 4 + (i % 2) * 2 + j;
  }
}

static void epilogue(conv_t* g) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  part_t pt;
  thread_part(g, &pt);
  const int32_t w = pt.width;
  // Each column's place in out (n * O * P + p) and whether it exists; a
  // group of w columns lies in one image when P % w == 0 (its first
  // column is a multiple of w).
  LLVMValueRef col_off[16][4], col_ok[16][4];
  for (int32_t h = 0; h < pt.groups; ++h) {
    for (int32_t j = 0; j < w; ++j) {
      LLVMValueRef gp = LLVMBuildAdd(
          b, g->p0,
          LLVMBuildZExt(b, LLVMBuildAdd(b, pt.col[h], c32(g, j), ""), em->t_i64,
                        ""),
          "");
      col_ok[h][j] = LLVMBuildICmp(b, LLVMIntSLT, gp, g->np, "");
      LLVMValueRef n = LLVMBuildUDiv(b, gp, c64(g, g->P), "");
      LLVMValueRef p =
          LLVMBuildSub(b, gp, LLVMBuildMul(b, n, c64(g, g->P), ""), "");
      col_off[h][j] =
          LLVMBuildAdd(b, LLVMBuildMul(b, n, c64(g, g->O * g->P), ""), p, "");
    }
  }
  LLVMValueRef vec_ok = NULL;
  if (g->P % w == 0) {
    LLVMValueRef addr = LLVMBuildPtrToInt(b, em->base[g->ob], em->t_i64, "");
    vec_ok = LLVMBuildICmp(b, LLVMIntEQ,
                           LLVMBuildAnd(b, addr, c64(g, 4 * w - 1), ""),
                           c64(g, 0), "");
  }
  LLVMTypeRef vt = LLVMVectorType(em->t_f32, (unsigned)w);
  for (int32_t i = 0; i < pt.rows; ++i) {
    LLVMValueRef o =
        LLVMBuildAdd(b, g->o0, LLVMBuildZExt(b, pt.row[i], em->t_i64, ""), "");
    tj_emit_if_t in;
    tj_emit_if_begin(em, &in, LLVMBuildICmp(b, LLVMIntSLT, o, c64(g, g->O), ""),
                     "row");
    LLVMValueRef bias = NULL;
    if (g->bb >= 0) {
      // Split along k: the first slice adds it.
      bias = tj_emit_select(
          em, g->first,
          LLVMBuildLoad2(
              b, em->t_f32,
              tj_emit_advance(em, (uint32_t)g->bb, em->base[g->bb], o), ""),
          tj_emit_fconst(em->t_f32, 0.0));
    }
    LLVMValueRef orow = LLVMBuildMul(b, o, c64(g, g->P), "");
    for (int32_t h = 0; h < pt.groups; ++h) {
      LLVMValueRef v[4];
      for (int32_t j = 0; j < w; ++j) {
        v[j] = LLVMBuildLoad2(b, em->t_f32, acc_slot(g, pt.acc[i][h][j]), "");
        if (bias) v[j] = LLVMBuildFAdd(b, v[j], bias, "");
      }
      // Split along k: the slices' sums meet in out (zeroed by the
      // launcher) by atomic adds.
      tj_emit_if_t split;
      tj_emit_if_begin(em, &split, g->split, "split");
      for (int32_t j = 0; j < w; ++j) {
        tj_emit_if_t one;
        tj_emit_if_begin(em, &one, col_ok[h][j], "col");
        LLVMBuildAtomicRMW(
            b, LLVMAtomicRMWBinOpFAdd,
            tj_emit_advance(em, g->ob, em->base[g->ob],
                            LLVMBuildAdd(b, orow, col_off[h][j], "")),
            v[j], LLVMAtomicOrderingMonotonic, 0);
        tj_emit_if_end(em, &one);
      }
      tj_emit_if_end(em, &split);
      LLVMValueRef whole = LLVMBuildNot(b, g->split, "");
      tj_emit_if_t vec;
      if (vec_ok) {
        tj_emit_if_begin(
            em, &vec,
            LLVMBuildAnd(b, whole, LLVMBuildAnd(b, vec_ok, col_ok[h][0], ""),
                         ""),
            "vec");
        LLVMValueRef x = LLVMGetUndef(vt);
        for (int32_t j = 0; j < w; ++j)
          x = LLVMBuildInsertElement(b, x, v[j], c32(g, j), "");
        LLVMValueRef st = LLVMBuildStore(
            b, x,
            tj_emit_advance(em, g->ob, em->base[g->ob],
                            LLVMBuildAdd(b, orow, col_off[h][0], "")));
        LLVMSetAlignment(st, (unsigned)(4 * w));
        tj_emit_if_end(em, &vec);
        // Every column of the group exists when its first does (N x P is a
        // multiple of w), so the element path runs only off vec_ok.
        tj_emit_if_begin(
            em, &vec, LLVMBuildAnd(b, whole, LLVMBuildNot(b, vec_ok, ""), ""),
            "elems");
      }
      for (int32_t j = 0; j < w; ++j) {
        tj_emit_if_t one;
        tj_emit_if_begin(
            em, &one,
            vec_ok ? col_ok[h][j] : LLVMBuildAnd(b, whole, col_ok[h][j], ""),
            "col");
        LLVMBuildStore(
            b, v[j],
            tj_emit_advance(em, g->ob, em->base[g->ob],
                            LLVMBuildAdd(b, orow, col_off[h][j], "")));
        tj_emit_if_end(em, &one);
      }
      if (vec_ok) tj_emit_if_end(em, &vec);
    }
    tj_emit_if_end(em, &in);
  }
}

// Whether the epilogue's w-pixel runs may cross output rows: every buffer
// the MAP phase reads or writes has spatial strides row-major over the
// output's (or all 0: a per-channel operand), and no instruction reads an
// index (emit_conv.c's flat_epilogue, the same rule).
static bool runs_may_cross_rows(const tj_kir_t* k) {
  const tj_kir_phase_t* ph = &k->phases[0];
  for (uint32_t i = 0; i < ph->num_insts; ++i) {
    if (ph->insts[i].kind == TJ_KIR_INDEX) return false;
  }
  for (uint32_t bi = 0; bi < k->num_buffers; ++bi) {
    const tj_kir_buffer_t* buf = &k->buffers[bi];
    if (buf->role != TJ_KIR_INPUT && buf->role != TJ_KIR_OUTPUT) continue;
    for (int32_t d = 2; d < k->rank; ++d) {
      if (buf->strides[d].param >= 0) return false;
    }
    for (int32_t d = 2; d + 1 < k->rank; ++d) {
      if (buf->strides[d].value !=
          buf->strides[d + 1].value * k->dims[d + 1].value)
        return false;
    }
  }
  return true;
}

// The point of output pixel |gp| (of all images: n * P + p) in channel
// |o|, |lanes| pixels along the last spatial dim, the MAP phase's buffers
// addressed there. |aligned|, when not NULL, becomes whether every buffer
// contiguous along that dim sits at a multiple of |lanes| elements there.
static void map_point(conv_t* g, LLVMValueRef o, LLVMValueRef gp, int32_t lanes,
                      tj_emit_point_t* pt, LLVMValueRef* aligned) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  const tj_kir_t* k = g->k;
  const int32_t r = k->rank;
  memset(pt, 0, sizeof(*pt));
  pt->lanes = lanes;
  pt->vdim = r - 1;
  LLVMValueRef n = LLVMBuildUDiv(b, gp, c64(g, g->P), "");
  LLVMValueRef rest =
      LLVMBuildSub(b, gp, LLVMBuildMul(b, n, c64(g, g->P), ""), "");
  pt->index[0] = n;
  pt->index[1] = o;
  for (int32_t d = r - 1; d >= 2; --d) {
    if (d == 2) {
      pt->index[d] = rest;
      break;
    }
    pt->index[d] = LLVMBuildURem(b, rest, c64(g, k->dims[d].value), "");
    rest = LLVMBuildUDiv(b, rest, c64(g, k->dims[d].value), "");
  }
  if (aligned) *aligned = LLVMConstInt(em->t_i1, 1, 0);
  for (uint32_t bi = 0; bi < k->num_buffers; ++bi) {
    const tj_kir_buffer_t* buf = &k->buffers[bi];
    if (buf->role != TJ_KIR_INPUT && buf->role != TJ_KIR_OUTPUT) {
      pt->ptr[bi] = em->base[bi];  // read by the main loop, not here
      continue;
    }
    LLVMValueRef off = c64(g, 0);
    for (int32_t d = 0; d < r; ++d) {
      if (tj_kir_ival_is_const(buf->strides[d], 0)) continue;
      off = LLVMBuildAdd(
          b, off, LLVMBuildMul(b, pt->index[d], tj_emit_stride(em, bi, d), ""),
          "");
    }
    pt->ptr[bi] = tj_emit_advance(em, bi, em->base[bi], off);
    if (aligned && tj_kir_ival_is_const(buf->strides[r - 1], 1)) {
      int64_t bytes = (int64_t)lanes * (int64_t)tj_dtype_size(buf->dtype);
      LLVMValueRef at = LLVMBuildPtrToInt(b, pt->ptr[bi], em->t_i64, "");
      *aligned =
          LLVMBuildAnd(b, *aligned,
                       LLVMBuildICmp(b, LLVMIntEQ,
                                     LLVMBuildAnd(b, at, c64(g, bytes - 1), ""),
                                     c64(g, 0), ""),
                       "");
    }
  }
}

// The epilogue with a MAP phase: the thread's accumulators (+ b[o]) are
// TJ_KIR_ACC of the phase, run a group of w pixels at a time where the
// group lies in one output row (or may cross rows: runs_may_cross_rows)
// and every contiguous buffer is aligned there (checked at run time: the
// vector loads and stores of the plain path), else pixel by pixel.
static tj_status_t epilogue_map(conv_t* g) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  const tj_kir_t* k = g->k;
  const tj_kir_phase_t* ph = &k->phases[0];
  part_t pt;
  thread_part(g, &pt);
  const int32_t w = pt.width;
  const int64_t last = k->dims[k->rank - 1].value;
  // A group's first pixel is a multiple of w: it lies in one image when P
  // is one, in one row when the row is.
  const bool vec = g->P % w == 0 && (last % w == 0 || runs_may_cross_rows(k));
  LLVMTypeRef vt = LLVMVectorType(em->t_f32, (unsigned)w);
  for (int32_t i = 0; i < pt.rows; ++i) {
    LLVMValueRef o =
        LLVMBuildAdd(b, g->o0, LLVMBuildZExt(b, pt.row[i], em->t_i64, ""), "");
    tj_emit_if_t in;
    tj_emit_if_begin(em, &in, LLVMBuildICmp(b, LLVMIntSLT, o, c64(g, g->O), ""),
                     "row");
    LLVMValueRef bias = NULL;
    if (g->bb >= 0) {
      bias = LLVMBuildLoad2(
          b, em->t_f32,
          tj_emit_advance(em, (uint32_t)g->bb, em->base[g->bb], o), "");
    }
    for (int32_t h = 0; h < pt.groups; ++h) {
      LLVMValueRef v[4];
      for (int32_t j = 0; j < w; ++j) {
        v[j] = LLVMBuildLoad2(b, em->t_f32, acc_slot(g, pt.acc[i][h][j]), "");
        if (bias) v[j] = LLVMBuildFAdd(b, v[j], bias, "");
      }
      LLVMValueRef gp0 = LLVMBuildAdd(
          b, g->p0, LLVMBuildZExt(b, pt.col[h], em->t_i64, ""), "");
      LLVMValueRef use_vec = LLVMConstInt(em->t_i1, 0, 0);
      tj_emit_if_t vif;
      if (vec) {
        // Every pixel of the group exists when its first does (N x P is a
        // multiple of w); the point's addresses are computed under that
        // test, so the alignment test is inside it.
        tj_emit_if_t have;
        LLVMValueRef slot = tj_emit_alloca(em, em->t_i1, "vec");
        LLVMBuildStore(b, use_vec, slot);
        tj_emit_if_begin(em, &have,
                         LLVMBuildICmp(b, LLVMIntSLT, gp0, g->np, ""), "have");
        tj_emit_point_t p;
        LLVMValueRef aligned;
        map_point(g, o, gp0, w, &p, &aligned);
        LLVMBuildStore(b, aligned, slot);
        tj_emit_if_begin(em, &vif, aligned, "vec");
        LLVMValueRef x = LLVMGetUndef(vt);
        for (int32_t j = 0; j < w; ++j)
          x = LLVMBuildInsertElement(b, x, v[j], c32(g, j), "");
        p.acc = x;
        TJ_RETURN_IF_ERROR(tj_emit_body(em, ph, &p, NULL));
        tj_nvptx_align_accesses(g->nv, &p, w);
        tj_emit_if_end(em, &vif);
        tj_emit_if_end(em, &have);
        use_vec = LLVMBuildLoad2(b, em->t_i1, slot, "");
      }
      tj_emit_if_begin(em, &vif, LLVMBuildNot(b, use_vec, ""), "elems");
      for (int32_t j = 0; j < w; ++j) {
        LLVMValueRef gp = LLVMBuildAdd(b, gp0, c64(g, j), "");
        tj_emit_if_t one;
        tj_emit_if_begin(em, &one, LLVMBuildICmp(b, LLVMIntSLT, gp, g->np, ""),
                         "col");
        tj_emit_point_t p;
        map_point(g, o, gp, 1, &p, NULL);
        p.acc = v[j];
        TJ_RETURN_IF_ERROR(tj_emit_body(em, ph, &p, NULL));
        tj_emit_if_end(em, &one);
      }
      tj_emit_if_end(em, &vif);
    }
    tj_emit_if_end(em, &in);
  }
  return NULL;
}

//===--- entry points ---===//

tj_status_t tj_nvptx_emit_conv(tj_nvptx_emit_t* nv) {
  tj_emit_t* em = &nv->em;
  const tj_kir_t* k = em->k;
  const tj_kir_conv_t* cv = &k->conv;
  // The direct window kernels (depthwise conv, pools: kir/lower_window.c)
  // have their own (emit_nvptx_window.c).
  if (cv->window != TJ_KIR_WINDOW_GEMM) return tj_nvptx_emit_window(nv);
  conv_t g;
  memset(&g, 0, sizeof(g));
  g.nv = nv;
  g.em = em;
  g.b = em->b;
  g.k = k;
  g.bb = -1;
  g.epi = k->phases[0].num_insts > 0;
  int32_t xb = -1, wb = -1, ob = -1;
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    const tj_kir_buffer_t* buf = &k->buffers[i];
    // The epilogue's own inputs and outputs take any dtype its body does
    // (a cast to f16 at the store); the GEMM part and the plain store are
    // f32.
    bool epi_buffer =
        g.epi && (buf->role == TJ_KIR_INPUT || buf->role == TJ_KIR_OUTPUT);
    if (buf->dtype != TJ_DTYPE_F32 && !epi_buffer)
      return tj_unsupported("kernel @%s: conv buffer %%%s is %s, not f32",
                            k->name, buf->name, tj_dtype_name(buf->dtype));
    switch (buf->role) {
      case TJ_KIR_CONV_X:
        xb = (int32_t)i;
        break;
      case TJ_KIR_CONV_W:
        wb = (int32_t)i;
        break;
      case TJ_KIR_CONV_BIAS:
        g.bb = (int32_t)i;
        break;
      case TJ_KIR_OUTPUT:
        ob = (int32_t)i;
        break;
      default:  // an epilogue's input
        break;
    }
  }
  if (xb < 0 || wb < 0 || (ob < 0 && !g.epi) || k->rank != cv->spatial + 2)
    return tj_internal("kernel @%s: conv buffers missing", k->name);
  // Grouped convs decompose on CUDA (cuda_native_op keeps groups 1).
  if (tj_kir_conv_groups(cv) != 1)
    return tj_unsupported("kernel @%s: a grouped conv (%d groups)", k->name,
                          cv->groups);
  g.xb = (uint32_t)xb;
  g.wb = (uint32_t)wb;
  g.ob = (uint32_t)(ob < 0 ? 0 : ob);
  g.axis0 = 3 - cv->spatial;
  g.P = g.KS = g.INS = 1;
  for (int32_t d = 0; d < 3; ++d) {
    g.od[d] = d >= g.axis0 ? k->dims[2 + d - g.axis0].value : 1;
    g.in[d] = cv->in[d];
    g.ker[d] = cv->kernel[d];
    g.st[d] = cv->stride[d];
    g.dil[d] = cv->dilation[d];
    g.low[d] = cv->low[d];
    g.P *= g.od[d];
    g.KS *= g.ker[d];
    g.INS *= g.in[d];
  }
  g.O = k->dims[1].value;
  g.C = cv->c;
  g.K = g.C * g.KS;
  // The k index, the pixel index within an image and the window
  // coordinates are i32; an image of x (C x INS) at most i32 too or the
  // in-image offsets go i64.
  if (g.K > INT32_MAX - kStages * kBK || g.P > INT32_MAX ||
      g.O > INT32_MAX / kBM * kBM || g.INS > INT32_MAX / 4)
    return tj_unsupported(
        "kernel @%s: conv of %lld x %lld taps into %lld channels at %lld "
        "pixels is past the CUDA conv template's 32-bit indices",
        k->name, (long long)g.C, (long long)g.KS, (long long)g.O,
        (long long)g.P);
  g.it = g.C * g.INS <= INT32_MAX / 2 ? em->t_i32 : em->t_i64;
  g.tf32 = nv->options.gemm_tf32;
  // The default on sm_90a: wgmma, 128 x 64 tiles.
  tj_nvptx_conv_kernel_t variant = nv->options.conv_kernel;
  if (variant == TJ_NVPTX_CONV_AUTO) variant = TJ_NVPTX_CONV_WGMMA_64;
  g.wg = g.tf32 && nv->arch == TJ_NVPTX_SM_90A &&
         (variant == TJ_NVPTX_CONV_WGMMA || variant == TJ_NVPTX_CONV_WGMMA_64);
  g.round = g.wg && !nv->options.conv_truncate;
  // A weight prepared at upload where the caller allows (a constant); a
  // tap-major one only where the tap-major gather's checks fit (those of
  // the tap table), else the weight is read as it is.
  g.prep = g.wg && !nv->options.conv_plain_weight;
  g.kp = (g.K + kWgBK - 1) / kWgBK * kWgBK;
  g.tap_major = g.prep && tj_nvptx_conv_weight_tap_major(g.C, cv->spatial);
  if (g.tap_major && !tap_table_fits(&g)) g.prep = g.tap_major = false;
  g.bn = kBN;
  g.bk = kBK;
  g.stages = kStages;
  g.a_stride = g.tf32 ? kBM + 8 : kBM + 4;
  g.b_stride = g.tf32 ? kBN + 8 : kBN;
  g.a_bytes = kBK * g.a_stride * 4;
  g.stage_bytes = g.a_bytes + kBK * g.b_stride * 4;
  // Two blocks an SM: 128 registers a thread.
  int32_t blocks_per_sm = 2;
  if (g.wg) {
    // 128 x 128: 32 KiB a stage, 6 stages (4 k-tiles ahead of the math),
    // one block an SM. 128 x 64: 24 KiB a stage, 4 stages, two blocks.
    g.wn = variant == TJ_NVPTX_CONV_WGMMA_64 ? 64 : 128;
    // At most 64 output channels (resnet's stem and first stage): 64 x 128
    // tiles of m64n64 halves, 4 stages of 24 KiB, two blocks an SM.
    g.wide = g.O <= 64;
    if (g.wide) g.wn = 64;
    g.bm = g.wide ? 64 : kBM;
    g.bn = g.wide ? 2 * g.wn : g.wn;
    g.bk = kWgBK;
    g.stages = g.wn == 128 ? 6 : 4;
    blocks_per_sm = g.wn == 128 ? 1 : 2;
    g.a_bytes = g.bm * kRow;
    g.stage_bytes = g.a_bytes + g.bn * kRow;
    g.b_copies = g.bn * kWgBK / kThreads;
  }
  nv->info->threads = kThreads;
  // The wgmma ring is aligned to the swizzle's 1024-byte period at run
  // time: that much slack.
  nv->info->shared_bytes = g.stages * g.stage_bytes + (g.wg ? kAtom : 0);
  nv->info->tensor_cores = g.tf32;
  nv->info->tile_m = g.wg ? g.bm : kBM;
  nv->info->tile_n = g.bn;
  nv->info->tile_k = g.bk;
  nv->info->stages = g.stages;
  nv->info->min_blocks_per_sm = blocks_per_sm;
  nv->info->conv_prepared = g.prep;

  LLVMBuilderRef b = g.b;
  g.tid = tj_nvptx_sreg(nv, "tid.x");
  g.p0 = LLVMBuildMul(b, tj_nvptx_sreg64(nv, "ctaid.x"), c64(&g, g.bn), "p0");
  g.o0 = LLVMBuildMul(b, tj_nvptx_sreg64(nv, "ctaid.y"),
                      c64(&g, g.wg ? g.bm : kBM), "o0");
  g.np = LLVMBuildMul(b, em->dim[0], c64(&g, g.P), "np");
  // The block's slice of the k-tiles: nctaid.z slices of
  // ceil(tiles / slices) (tj_nvptx_conv_launch leaves none empty).
  LLVMValueRef slices = tj_nvptx_sreg64(nv, "nctaid.z");
  LLVMValueRef z = tj_nvptx_sreg64(nv, "ctaid.z");
  const int64_t tiles = (g.K + g.bk - 1) / g.bk;
  LLVMValueRef per = LLVMBuildUDiv(
      b, LLVMBuildAdd(b, c64(&g, tiles - 1), slices, ""), slices, "per");
  g.kt0 = LLVMBuildMul(b, z, per, "kt0");
  g.kt1 = tj_emit_min_i64(em, LLVMBuildAdd(b, g.kt0, per, ""), c64(&g, tiles));
  g.split = LLVMBuildICmp(b, LLVMIntUGT, slices, c64(&g, 1), "split");
  g.first = LLVMBuildICmp(b, LLVMIntEQ, z, c64(&g, 0), "first");
  g.smem = tj_nvptx_dynamic_shared(nv);
  g.acc = tj_emit_alloca(em, LLVMArrayType2(em->t_f32, 64), "acc");
  if (g.wg) {
    LLVMTypeRef floats[64];
    for (int32_t i = 0; i < g.wn / 2; ++i) floats[i] = em->t_f32;
    g.acc_struct =
        LLVMStructTypeInContext(em->ctx, floats, (unsigned)(g.wn / 2), 0);
    for (int32_t i = 0; i < g.wn / 2; ++i)
      LLVMBuildStore(b, LLVMGetUndef(em->t_f32), acc_slot(&g, i));
    // The swizzle is a function of the shared address: align the ring to
    // its 1024-byte period.
    LLVMValueRef addr = LLVMBuildPtrToInt(b, g.smem, em->t_i32, "");
    LLVMValueRef pad = LLVMBuildAnd(b, LLVMBuildSub(b, c32(&g, 0), addr, ""),
                                    c32(&g, kAtom - 1), "");
    g.ring = smem_at(&g, g.smem, pad);
    g.ring_addr = LLVMBuildAdd(b, addr, pad, "ring_addr");
    TJ_RETURN_IF_ERROR(wg_copy_setup(&g));
    wg_main_loop(&g);
  } else {
    for (int32_t i = 0; i < 64; ++i)
      LLVMBuildStore(b, tj_emit_fconst(em->t_f32, 0.0), acc_slot(&g, i));
    copy_setup(&g);
    main_loop(&g);
  }
  if (g.epi) return epilogue_map(&g);
  epilogue(&g);
  return NULL;
}

// Too few tiles to fill the GPU (a batch-1 layer at 14x14 or 7x7 has 1 or
// 2 pixel tiles): split k into slices of at least kMinSliceTiles k-tiles,
// up to two blocks an SM; the slices add into out, which the launcher
// zeroes first (zero_bytes). f32 sums in another order: not bitwise equal
// to the unsplit kernel's.
//
// A kernel with an epilogue never splits (tj_nvptx_conv_launch): its
// followers (relu, ...) need the whole sum, which no slice has, and a
// second pass after the slices would need a workspace and per-tile
// counters that the launch does not have. Fuse keeps the followers out of
// a conv that would split at its smallest batch instead (the CUDA
// backend's conv_epilogue_fits): a split is worth more than the fusion
// (the 7x7 512-512 layer at batch 1: 4 blocks of 576 k-tiles unsplit).
// The slices of a kernel of |tile_m| x |tile_n| tiles, k-tiles of |tile_k|
// and |blocks_per_sm| blocks an SM.
static int64_t slices_for(int64_t pixels, int64_t channels, int64_t k,
                          int32_t num_sms, int64_t tile_m, int64_t tile_n,
                          int64_t tile_k, int64_t blocks_per_sm) {
  const int64_t gx = (pixels + tile_n - 1) / tile_n;
  const int64_t gy = (channels + tile_m - 1) / tile_m;
  const int64_t tiles = (k + tile_k - 1) / tile_k;
  const int64_t min_tiles = kMinSliceK / tile_k;
  int64_t slices = 1;
  int64_t target = blocks_per_sm * (int64_t)(num_sms > 0 ? num_sms : 1);
  if (gx * gy == 0 || gx * gy >= target) return 1;
  slices = (target + gx * gy - 1) / (gx * gy);
  if (slices > tiles / min_tiles) slices = tiles / min_tiles;
  if (slices > kMaxSlices) slices = kMaxSlices;
  if (slices < 1) slices = 1;
  // The kernel's slices are ceil(tiles / slices) long: as many as that
  // length needs, so that none is empty.
  int64_t per = (tiles + slices - 1) / slices;
  return (tiles + per - 1) / per;
}

int64_t tj_nvptx_conv_slices(const tj_nvptx_options_t* options,
                             tj_nvptx_arch_t arch, int64_t pixels,
                             int64_t channels, int64_t k, int32_t num_sms) {
  // The tiles tj_nvptx_emit_conv takes for these options.
  tj_nvptx_conv_kernel_t variant =
      options ? options->conv_kernel : TJ_NVPTX_CONV_AUTO;
  if (variant == TJ_NVPTX_CONV_AUTO) variant = TJ_NVPTX_CONV_WGMMA_64;
  const bool wg =
      options && options->gemm_tf32 && arch == TJ_NVPTX_SM_90A &&
      (variant == TJ_NVPTX_CONV_WGMMA || variant == TJ_NVPTX_CONV_WGMMA_64);
  if (!wg) return slices_for(pixels, channels, k, num_sms, kBM, kBN, kBK, 2);
  const bool wide = channels <= 64;
  const int64_t wn = wide || variant == TJ_NVPTX_CONV_WGMMA_64 ? 64 : 128;
  return slices_for(pixels, channels, k, num_sms, wide ? 64 : kBM,
                    wide ? 128 : wn, kWgBK, wn == 128 ? 1 : 2);
}

tj_status_t tj_nvptx_conv_launch(const tj_kir_t* k,
                                 const tj_nvptx_kernel_t* info,
                                 const int64_t* scalars, int32_t num_sms,
                                 tj_nvptx_launch_t* out) {
  if (k->conv.window != TJ_KIR_WINDOW_GEMM)
    return tj_nvptx_window_launch(k, info, scalars, out);
  int64_t n = tj_kir_ival_eval(k->dims[0], scalars);
  if (n < 0)
    return tj_invalid("kernel @%s: batch is %lld", k->name, (long long)n);
  int64_t p = 1;
  for (int32_t d = 2; d < k->rank; ++d) p *= k->dims[d].value;
  int64_t o = k->dims[1].value, np;
  if (tj_mul_overflow_i64(n, p, &np))
    return tj_invalid("kernel @%s: batch %lld overflows", k->name,
                      (long long)n);
  if (np == 0 || o == 0) {
    out->empty = true;
    return NULL;
  }
  int64_t gx = (np + info->tile_n - 1) / info->tile_n;
  int64_t gy = (o + info->tile_m - 1) / info->tile_m;
  if (gx > 2147483647 || gy > 65535)
    return tj_unsupported(
        "kernel @%s: %lld pixel tiles x %lld channel tiles is more than one "
        "launch covers",
        k->name, (long long)gx, (long long)gy);
  const bool epilogue = k->phases[0].num_insts > 0;
  const int64_t slices =
      epilogue ? 1
               : slices_for(
                     np, o, k->gemm_k.value, num_sms, info->tile_m,
                     info->tile_n, info->tile_k,
                     info->min_blocks_per_sm > 0 ? info->min_blocks_per_sm : 1);
  out->grid[0] = (uint32_t)gx;
  out->grid[1] = (uint32_t)gy;
  out->grid[2] = (uint32_t)slices;
  if (slices > 1) {
    for (uint32_t i = 0; i < k->num_buffers; ++i) {
      if (k->buffers[i].role == TJ_KIR_OUTPUT) out->zero_buffer = i;
    }
    out->zero_bytes = (uint64_t)(np * o) * 4;
  }
  out->block[0] = (uint32_t)info->threads;
  out->block[1] = out->block[2] = 1;
  out->shared_bytes = (uint32_t)info->shared_bytes;
  return NULL;
}

//===--- the prepared weight ---===//

bool tj_nvptx_conv_weight_tap_major(int64_t c, int32_t spatial) {
  return spatial == 2 && c > 0 && c % kWgBK == 0;
}

int64_t tj_nvptx_conv_weight_bytes(int64_t o, int64_t c, int64_t taps) {
  return o * ((c * taps + kWgBK - 1) / kWgBK * kWgBK) * 4;
}

// cvt.rna.tf32.f32's value: half a TF32 ulp added to a finite value's
// bits, the low 13 cleared (what the kernel's to_tf32_half_ulp leaves to
// the tensor cores).
static float round_tf32(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  if ((u & 0x7F800000u) != 0x7F800000u) u = (u + 0x1000u) & 0xFFFFE000u;
  memcpy(&v, &u, 4);
  return v;
}

void tj_nvptx_conv_prepare_weight(int64_t o, int64_t c, int64_t taps,
                                  int32_t spatial, const void* w, float* dst) {
  const int64_t kp = (c * taps + kWgBK - 1) / kWgBK * kWgBK;
  const bool tap_major = tj_nvptx_conv_weight_tap_major(c, spatial);
  memset(dst, 0, (size_t)tj_nvptx_conv_weight_bytes(o, c, taps));
  for (int64_t oo = 0; oo < o; ++oo) {
    for (int64_t cc = 0; cc < c; ++cc) {
      for (int64_t t = 0; t < taps; ++t) {
        int64_t k = tap_major ? t * c + cc : cc * taps + t;
        float v;
        memcpy(&v, (const char*)w + ((oo * c + cc) * taps + t) * 4, 4);
        dst[oo * kp + k] = round_tf32(v);
      }
    }
  }
}
