// The weight-only quantized GEMM's tensor-core main loop for NVPTX (issue
// 17): the same product as emit_nvptx_wqgemm.c,
// C[m, n] = sum_k A[m, k] * (q[k, n] - zero[k / g, n]) * scale[k / g, n],
// on mma.sync m16n8k16 (bf16 or f16 operands, f32 accumulators), for a
// 16-row tile of C whatever M is (rows past M are computed, not stored).
//
// Fragments without shared memory. A block of 256 threads (w->threads:
// 128 for the tile layout under f16/bf16 A, four blocks an SM) owns 16
// rows and 64 columns of C; its 8 (4) warps take chunks of K round-robin,
// and K may be split across blocks too (join_splits). Inside a
// warp, lane (g = lane / 4, t = lane % 4) reads 8 consecutive columns
// n0 + 8g .. +7 of k rows 4t .. 4t+3 of each 16-row step (4 words of int4,
// 8 of int8, straight from the [K, N] layout lib/passes/quant_prepack.c
// writes: 8 lanes read one row's 32 or 64 contiguous bytes, whole
// sectors). The sum over k is free to permute k, and the tile is free to
// permute n, so the mma's slots are relabelled to match what the lane
// holds: B slot (k 2t+i, 2t+8+i) is k row 4t+i (4t+2+i), and B column g
// of mma tile j (0..7) is column n0 + 8g + j; A's slots take the same k
// rows (4 consecutive elements of rows g and g + 8: one vector load), and
// C element (row, 2t + i) of tile j is column n0 + 16t + 8i + j.
//
// Rounding, as the reference's dequantize (lib/quant.c):
// - f16/bf16 A: B is (q - zero) * scale computed in f32 (exact: |q - zero|
//   <= 255 times a 16-bit scale fits 24 bits) and rounded once to A's
//   dtype, the reference's dequantized weight; the mma's products of two
//   16-bit values are exact in f32, so only the order of the f32 sums
//   differs from the reference.
// - f32 A: a dequantized f32 weight is not a bf16, so B is q - zero
//   (integers up to 255: exact in bf16), A is split into three bf16 terms
//   hi + mid + lo (exactly a: 8 + 8 + 8 significant bits), three mmas
//   add the exact products a * (q - zero) into a per-group f32 sum, and
//   that sum times the group's scale goes into C. Against the reference's
//   sum of a * round_f32((q - zero) * scale) this differs by the f32
//   rounding of each term's weight (2^-24 relative) and the tensor core's
//   f32 additions; cuda_wqgemm_test's bound (1e-6 of sum_k |a| max |w|)
//   holds that with room.
// The dequantize itself is the magic-number trick of emit_nvptx_wqgemm.c:
// float(0x4B000000 | u) - (2^23 + bias + zero) is q - zero exactly, the
// values then rounded two at a time (cvt.rn.bf16x2.f32); int4 under f32 A
// does it in bf16 pairs instead (b_fragments: 0x4300 | u is 128 + u), 1.5
// instructions a weight where the f32 way takes 4.
//
// Loads: each chunk's weight words are issued at once (32 registers a
// lane: 8 steps of int4, 4 of int8), the next chunk's before the current
// one's mmas (a second set); a warp's A elements
// are read by it alone (no reuse inside the block), so they come straight
// from global memory two steps ahead of their mma. The warps' partial
// tiles are then added in warp order through shared memory (so results do
// not depend on timing) into the staged C tile the GEMM template's
// epilogue reads, only the rows inside M (the epilogue stores no other).

#include <stdio.h>
#include <string.h>

#include "jit/emit_nvptx.h"

#define kTileN 64
#define kTiles 8  // mma n8 tiles across kTileN
// w->ring: a warp's chunks in flight (kRingStages - 1 ahead of its mmas),
// each kChunkBytes of the tile layout (4 steps of 512 bytes for int4, 2
// of 1024 for int8), the lane's 16 bytes of a step at 16 lane.
#define kRingStages 5
#define kChunkBytes 2048

typedef struct wm_t {
  tj_nvptx_emit_t* nv;
  tj_emit_t* em;
  LLVMBuilderRef b;
  const tj_nvptx_wqgemm_t* w;
  bool split;              // f32 A: three bf16 terms, scale after the sum
  int32_t steps;           // 16-row steps a chunk
  int32_t fold;            // steps a group's sum covers (split)
  int32_t words;           // i32 weight words a lane a k row: 1 or 2
  int32_t ahead;           // steps of A loaded ahead of their mma
  bool upper_only;         // rows g + 8 are past the tile: their A is 0
  bool tiled;              // B in the tile layout (jit/nvptx.h)
  LLVMValueRef btile;      // tiled: the lane's unit in the tile's step 0
  LLVMValueRef npad;       // tiled: i64 N padded to 64 (scale row pitch)
  LLVMTypeRef op;          // the mma operands' element type (f16 or bf16)
  LLVMValueRef g, t;       // i64 lane / 4, lane % 4
  LLVMValueRef wcol;       // i64 the lane's first weight column
  LLVMValueRef arow[2];    // A's rows g and g + 8 (clamped to the tile)
  LLVMValueRef rows;       // i64 rows of the tile inside M (1 .. 16)
  int32_t threads, warps;  // the block's (w->threads)
  LLVMValueRef acc, gacc;  // alloca [32 x float]
  LLVMValueRef ring_lane;  // w->ring: i64 byte offset of the lane's unit
                           // in its warp's slot 0
} wm_t;

// Floats between the warps' partial tiles in shared memory, after the
// staged C; with w->ring each warp's region is its ring first.
static int32_t red_stride(const tj_nvptx_wqgemm_t* w) {
  return w->ring ? kRingStages * kChunkBytes / 4 : 16 * kTileN;
}

static LLVMValueRef c32(wm_t* q, int64_t v) {
  return LLVMConstInt(q->em->t_i32, (unsigned long long)v, 1);
}
static LLVMValueRef c64(wm_t* q, int64_t v) {
  return LLVMConstInt(q->em->t_i64, (unsigned long long)v, 1);
}
static LLVMValueRef cf(wm_t* q, double v) {
  return LLVMConstReal(q->em->t_f32, v);
}
static LLVMValueRef gep(wm_t* q, LLVMTypeRef t, LLVMValueRef p,
                        LLVMValueRef i) {
  return LLVMBuildGEP2(q->b, t, p, &i, 1, "");
}
static LLVMValueRef min64(wm_t* q, LLVMValueRef a, LLVMValueRef b) {
  return tj_emit_min_i64(q->em, a, b);
}
static LLVMValueRef slot(wm_t* q, LLVMValueRef arr, int32_t i) {
  LLVMValueRef idx[2] = {c32(q, 0), c32(q, i)};
  return LLVMBuildGEP2(q->b, LLVMArrayType2(q->em->t_f32, 4 * kTiles), arr, idx,
                       2, "");
}

// The LLVM type of A and the scale.
static LLVMTypeRef in_type(wm_t* q) {
  LLVMContextRef cx = LLVMGetTypeContext(q->em->t_f32);
  return q->w->dtype == TJ_DTYPE_F16    ? LLVMHalfTypeInContext(cx)
         : q->w->dtype == TJ_DTYPE_BF16 ? LLVMBFloatTypeInContext(cx)
                                        : q->em->t_f32;
}

static LLVMValueRef to_f32(wm_t* q, LLVMValueRef v) {
  return LLVMTypeOf(v) == q->em->t_f32
             ? v
             : LLVMBuildFPExt(q->b, v, q->em->t_f32, "");
}

// Two values of the operand type packed in an i32 (|lo| in bits 0-15, the
// lower k slot, as the mma fragments hold them).
static LLVMValueRef pack(wm_t* q, LLVMValueRef lo, LLVMValueRef hi) {
  LLVMBuilderRef b = q->b;
  LLVMValueRef v = LLVMGetUndef(LLVMVectorType(q->op, 2));
  v = LLVMBuildInsertElement(b, v, lo, c32(q, 0), "");
  v = LLVMBuildInsertElement(b, v, hi, c32(q, 1), "");
  return LLVMBuildBitCast(b, v, q->em->t_i32, "");
}

// The weight words of k row |kk| (i64) at the lane's 8 columns: |fast|,
// one aligned 4- or 8-byte load; else byte by byte, each byte clamped to
// the row (columns past N read a neighbour and are never stored).
static void load_words(wm_t* q, LLVMValueRef kk, bool fast, LLVMValueRef* out) {
  const tj_nvptx_wqgemm_t* w = q->w;
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  LLVMValueRef row =
      gep(q, em->t_i8, w->b_base, LLVMBuildMul(b, kk, w->sb_k, ""));
  LLVMValueRef byte0 =
      w->bits == 4 ? LLVMBuildLShr(b, q->wcol, c64(q, 1), "") : q->wcol;
  if (fast) {
    LLVMTypeRef vt = LLVMVectorType(em->t_i32, (unsigned)q->words);
    LLVMValueRef v = LLVMBuildLoad2(b, vt, gep(q, em->t_i8, row, byte0), "wq");
    LLVMSetAlignment(v, (unsigned)(4 * q->words));
    for (int32_t i = 0; i < q->words; ++i)
      out[i] = LLVMBuildExtractElement(b, v, c32(q, i), "");
    return;
  }
  LLVMValueRef last = LLVMBuildSub(b, w->row_bytes, c64(q, 1), "");
  for (int32_t i = 0; i < q->words; ++i) {
    LLVMValueRef word = c32(q, 0);
    for (int32_t j = 0; j < 4; ++j) {
      LLVMValueRef at =
          min64(q, LLVMBuildAdd(b, byte0, c64(q, i * 4 + j), ""), last);
      LLVMValueRef by =
          LLVMBuildLoad2(b, em->t_i8, gep(q, em->t_i8, row, at), "");
      word = LLVMBuildOr(b, word,
                         LLVMBuildShl(b, LLVMBuildZExt(b, by, em->t_i32, ""),
                                      c32(q, 8 * j), ""),
                         "");
    }
    out[i] = word;
  }
}

// Tiled B (tj_nvptx_wq_tile): the lane's 16-byte unit(s) of the step at
// k row |k| (a multiple of 16, inside K padded to 128 rows: no clamp),
// as out[word][half].
static void load_tiled(wm_t* q, LLVMValueRef k, LLVMValueRef out[4][2]) {
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  int32_t bytes = q->w->bits == 4 ? 512 : 1024;
  LLVMValueRef at =
      LLVMBuildMul(b, LLVMBuildSDiv(b, k, c64(q, 16), ""), c64(q, bytes), "");
  LLVMTypeRef vt = LLVMVectorType(em->t_i32, 4);
  for (int32_t h = 0; h < q->words; ++h) {
    LLVMValueRef p =
        gep(q, em->t_i8, q->btile, LLVMBuildAdd(b, at, c64(q, 512 * h), ""));
    LLVMValueRef v = LLVMBuildLoad2(b, vt, p, "wt");
    LLVMSetAlignment(v, 16);
    for (int32_t i = 0; i < 4; ++i)
      out[i][h] = LLVMBuildExtractElement(b, v, c32(q, i), "");
  }
}

// The scale (A's dtype) at column |col| (clamped to N) of group row |grow|.
static LLVMValueRef load_scale(wm_t* q, LLVMValueRef grow, LLVMValueRef col) {
  const tj_nvptx_wqgemm_t* w = q->w;
  LLVMValueRef c = min64(q, col, LLVMBuildSub(q->b, w->n, c64(q, 1), ""));
  LLVMValueRef at = LLVMBuildAdd(q->b, grow, c, "");
  LLVMTypeRef t = in_type(q);
  return to_f32(q, LLVMBuildLoad2(q->b, t, gep(q, t, w->s_base, at), "s"));
}

// 2^23 + bias + zero at column |col| (clamped) of group row |grow|.
static LLVMValueRef load_offset(wm_t* q, LLVMValueRef grow, LLVMValueRef col) {
  const tj_nvptx_wqgemm_t* w = q->w;
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  double bias = w->flip ? (w->bits == 4 ? 8.0 : 128.0) : 0.0;
  LLVMValueRef off = cf(q, 8388608.0 + bias);
  if (!w->z_base) return off;
  LLVMValueRef c = min64(q, col, LLVMBuildSub(b, w->n, c64(q, 1), ""));
  LLVMValueRef at = LLVMBuildAdd(b, grow, c, "");
  LLVMValueRef z =
      LLVMBuildLoad2(b, em->t_i8, gep(q, em->t_i8, w->z_base, at), "z");
  z = w->zero_signed ? LLVMBuildSIToFP(b, z, em->t_f32, "")
                     : LLVMBuildUIToFP(b, z, em->t_f32, "");
  return LLVMBuildFAdd(b, off, z, "");
}

// The first element of the group row holding k row |k| (tiled: rows of
// N padded to 64 columns).
static LLVMValueRef group_row(wm_t* q, LLVMValueRef k) {
  const tj_nvptx_wqgemm_t* w = q->w;
  if (!w->group) return c64(q, 0);
  return LLVMBuildMul(q->b, LLVMBuildSDiv(q->b, k, c64(q, w->group), ""),
                      q->tiled ? q->npad : w->ss_g, "");
}

// Tiled: the scales (as f32) or the offsets 2^23 + bias + zero of the 8
// columns |col| .. +7 of group row |grow|, from rows padded to 64
// columns (backends/cuda/cuda_program.c pads them with the weight): one
// vector load each, no clamp.
static void load_run8(wm_t* q, bool scales, LLVMValueRef grow, LLVMValueRef col,
                      LLVMValueRef out[8]) {
  const tj_nvptx_wqgemm_t* w = q->w;
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  LLVMValueRef at = LLVMBuildAdd(b, grow, col, "");
  if (!scales && !w->z_base) {
    for (int32_t j = 0; j < 8; ++j) out[j] = load_offset(q, grow, col);
    return;
  }
  LLVMTypeRef t = scales ? in_type(q) : em->t_i8;
  LLVMValueRef v = LLVMBuildLoad2(b, LLVMVectorType(t, 8),
                                  gep(q, t, scales ? w->s_base : w->z_base, at),
                                  scales ? "s8" : "z8");
  LLVMSetAlignment(v, scales ? (t == em->t_f32 ? 32 : 16) : 8);
  double bias = w->flip ? (w->bits == 4 ? 8.0 : 128.0) : 0.0;
  for (int32_t j = 0; j < 8; ++j) {
    LLVMValueRef e = LLVMBuildExtractElement(b, v, c32(q, j), "");
    if (scales) {
      out[j] = to_f32(q, e);
      continue;
    }
    e = w->zero_signed ? LLVMBuildSIToFP(b, e, em->t_f32, "")
                       : LLVMBuildUIToFP(b, e, em->t_f32, "");
    out[j] = LLVMBuildFAdd(b, cf(q, 8388608.0 + bias), e, "");
  }
}

// A's 4 elements of row |r| (0: g, 1: g + 8) at k rows k0 + 4t .. +3, as
// f32: |fast|, one vector load (the rows are inside K); else one by one,
// 0 past K.
static void load_a(wm_t* q, int32_t r, LLVMValueRef k0, bool fast,
                   LLVMValueRef out[4]) {
  const tj_nvptx_wqgemm_t* w = q->w;
  LLVMBuilderRef b = q->b;
  LLVMTypeRef t = in_type(q);
  if (r == 1 && q->upper_only) {
    for (int32_t i = 0; i < 4; ++i) out[i] = cf(q, 0.0);
    return;
  }
  LLVMValueRef k =
      LLVMBuildAdd(b, k0, LLVMBuildMul(b, q->t, c64(q, 4), ""), "");
  if (fast) {
    LLVMTypeRef vt = LLVMVectorType(t, 4);
    LLVMValueRef v = LLVMBuildLoad2(b, vt, gep(q, t, q->arow[r], k), "a");
    LLVMSetAlignment(v, t == q->em->t_f32 ? 16 : 8);
    for (int32_t i = 0; i < 4; ++i)
      out[i] = to_f32(q, LLVMBuildExtractElement(b, v, c32(q, i), ""));
    return;
  }
  LLVMValueRef klast = LLVMBuildSub(b, w->kdim, c64(q, 1), "");
  for (int32_t i = 0; i < 4; ++i) {
    LLVMValueRef ki = LLVMBuildAdd(b, k, c64(q, i), "");
    LLVMValueRef at = LLVMBuildMul(b, min64(q, ki, klast), w->sa_k, "");
    LLVMValueRef v =
        to_f32(q, LLVMBuildLoad2(b, t, gep(q, t, q->arow[r], at), "a"));
    out[i] = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, ki, w->kdim, ""),
                             v, cf(q, 0.0), "");
  }
}

// The A fragments of one step: frag[term][4] (i32 registers a0a1, a2a3,
// a4a5, a6a7), one term (A's dtype) or three (f32 A: hi, mid, lo bf16).
static void a_fragments(wm_t* q, LLVMValueRef x[2][4],
                        LLVMValueRef frag[3][4]) {
  LLVMBuilderRef b = q->b;
  int32_t terms = q->split ? 3 : 1;
  // parts[term][row][i]
  LLVMValueRef parts[3][2][4];
  for (int32_t r = 0; r < 2; ++r) {
    for (int32_t i = 0; i < 4; ++i) {
      LLVMValueRef v = x[r][i];
      if (!q->split) {
        parts[0][r][i] = LLVMBuildFPTrunc(b, v, q->op, "");
        continue;
      }
      // a = hi + mid + lo exactly; a non-finite a leaves its hi alone
      // (the rest 0), so that inf * w is inf (or NaN) as the reference's.
      LLVMValueRef hi = LLVMBuildFPTrunc(b, v, q->op, "hi");
      LLVMValueRef rest = LLVMBuildFSub(b, v, to_f32(q, hi), "");
      rest = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealORD, rest, rest, ""),
                             rest, cf(q, 0.0), "");
      LLVMValueRef mid = LLVMBuildFPTrunc(b, rest, q->op, "mid");
      LLVMValueRef lo = LLVMBuildFPTrunc(
          b, LLVMBuildFSub(b, rest, to_f32(q, mid), ""), q->op, "lo");
      parts[0][r][i] = hi;
      parts[1][r][i] = mid;
      parts[2][r][i] = lo;
    }
  }
  for (int32_t s = 0; s < terms; ++s) {
    frag[s][0] = pack(q, parts[s][0][0], parts[s][0][1]);
    frag[s][1] = pack(q, parts[s][1][0], parts[s][1][1]);
    frag[s][2] = pack(q, parts[s][0][2], parts[s][0][3]);
    frag[s][3] = pack(q, parts[s][1][2], parts[s][1][3]);
  }
}

// One mma.sync m16n8k16 into the 4 floats at |d|.
static void mma(wm_t* q, LLVMValueRef a[4], LLVMValueRef bf[2],
                LLVMValueRef d[4]) {
  LLVMBuilderRef b = q->b;
  bool f16 = q->w->dtype == TJ_DTYPE_F16;
  LLVMTypeRef h2 = LLVMVectorType(q->em->t_f16, 2);
  LLVMValueRef args[10];
  for (int i = 0; i < 4; ++i)
    args[i] = f16 ? LLVMBuildBitCast(b, a[i], h2, "") : a[i];
  for (int i = 0; i < 2; ++i)
    args[4 + i] = f16 ? LLVMBuildBitCast(b, bf[i], h2, "") : bf[i];
  for (int i = 0; i < 4; ++i) args[6 + i] = d[i];
  LLVMValueRef r = tj_nvptx_call(q->nv,
                                 f16 ? "llvm.nvvm.mma.m16n8k16.row.col.f32.f32"
                                     : "llvm.nvvm.mma.m16n8k16.row.col.bf16",
                                 args, 10);
  for (unsigned i = 0; i < 4; ++i) d[i] = LLVMBuildExtractValue(b, r, i, "");
}

// The scales of the lane's C columns n0 + 16t + 8i + j, index i * 8 + j.
static void c_scales(wm_t* q, LLVMValueRef grow, LLVMValueRef cs[16]) {
  LLVMBuilderRef b = q->b;
  LLVMValueRef base =
      LLVMBuildAdd(b, q->w->n0, LLVMBuildMul(b, q->t, c64(q, 16), ""), "");
  if (q->tiled) {
    load_run8(q, true, grow, base, cs);
    load_run8(q, true, grow, LLVMBuildAdd(b, base, c64(q, 8), ""), cs + 8);
    return;
  }
  for (int32_t i = 0; i < 16; ++i)
    cs[i] = load_scale(q, grow, LLVMBuildAdd(b, base, c64(q, i), ""));
}

// acc[4j + e] += gacc[4j + e] * its column's scale; gacc = 0.
static void fold_group(wm_t* q, LLVMValueRef* acc, LLVMValueRef* gacc,
                       LLVMValueRef cs[16]) {
  for (int32_t j = 0; j < kTiles; ++j) {
    for (int32_t e = 0; e < 4; ++e) {
      LLVMValueRef s = cs[(e & 1) * 8 + j];
      acc[4 * j + e] =
          tj_emit_fmuladd(q->em, gacc[4 * j + e], s, acc[4 * j + e]);
      gacc[4 * j + e] = cf(q, 0.0);
    }
  }
}

// Two f32 values rounded to the operand type and packed, |lo| in bits
// 0-15 (one cvt.rn.{bf16,f16}x2.f32, whose first source is the upper half).
static LLVMValueRef pack_f32(wm_t* q, LLVMValueRef lo, LLVMValueRef hi) {
  LLVMValueRef args[2] = {hi, lo};
  LLVMValueRef v =
      tj_nvptx_call(q->nv,
                    q->op == q->em->t_f16 ? "llvm.nvvm.ff2f16x2.rn"
                                          : "llvm.nvvm.ff2bf16x2.rn",
                    args, 2);
  return LLVMBuildBitCast(q->b, v, q->em->t_i32, "");
}

// The B fragments of mma tile |j| (column wcol + j) from a step's weight
// words (rows 4t .. 4t+3): {rows 0, 1} and {rows 2, 3}, each the lower
// row in bits 0-15.
static void b_fragments(wm_t* q, LLVMValueRef words[4][2], int32_t j,
                        LLVMValueRef offset[8], LLVMValueRef scale[8],
                        LLVMValueRef bf[2]) {
  const tj_nvptx_wqgemm_t* w = q->w;
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  LLVMValueRef flip =
      c32(q, w->bits == 4 ? (int64_t)0x88888888 : (int64_t)0x80808080);
  if (q->tiled && w->bits == 4) {
    // Tiled int4 (jit/nvptx.h): word j / 2 holds column j's rows 4t and
    // 4t + 1 in nibbles 2 (j & 1) and 2 (j & 1) + 4, rows 4t + 2 and 4t +
    // 3 one nibble up. A pair shifted down, masked and or-ed into the
    // halves of 128 (bf16 0x4300) or 1024 (f16 0x6400), whose low
    // mantissa bits are 0, is 128 + u (1024 + u) in each half, exactly;
    // minus 128 + bias + zero (1024 + ...; at most 143 or 1039: exact) it
    // is q - zero, exact; times the scale (f16/bf16 A) one rounding of
    // the exact product: the reference's dequantized weight, at two
    // values for three instructions.
    bool f16 = q->op == em->t_f16;
    LLVMTypeRef v2 = LLVMVectorType(q->op, 2);
    LLVMValueRef word = words[j / 2][0];
    if (w->flip) word = LLVMBuildXor(b, word, flip, "");
    LLVMValueRef off = LLVMBuildFPTrunc(
        b,
        LLVMBuildFSub(b, offset[j], cf(q, 8388608.0 - (f16 ? 1024.0 : 128.0)),
                      ""),
        q->op, "");
    LLVMValueRef offs = LLVMGetUndef(v2), sc = NULL;
    offs = LLVMBuildInsertElement(b, offs, off, c32(q, 0), "");
    offs = LLVMBuildInsertElement(b, offs, off, c32(q, 1), "");
    if (!q->split) {
      LLVMValueRef s1 = LLVMBuildFPTrunc(b, scale[j], q->op, "");
      sc = LLVMGetUndef(v2);
      sc = LLVMBuildInsertElement(b, sc, s1, c32(q, 0), "");
      sc = LLVMBuildInsertElement(b, sc, s1, c32(q, 1), "");
    }
    for (int32_t p = 0; p < 2; ++p) {
      LLVMValueRef x =
          LLVMBuildLShr(b, word, c32(q, 4 * (2 * (j & 1) + p)), "");
      x = LLVMBuildOr(b, LLVMBuildAnd(b, x, c32(q, 0x000F000F), ""),
                      c32(q, f16 ? 0x64006400 : 0x43004300), "");
      LLVMValueRef d =
          LLVMBuildFSub(b, LLVMBuildBitCast(b, x, v2, ""), offs, "qz");
      if (sc) d = LLVMBuildFMul(b, d, sc, "w");
      bf[p] = LLVMBuildBitCast(b, d, em->t_i32, "");
    }
    return;
  }
  if (q->split && w->bits == 4) {
    // int4 times f32 A: q - zero straight in bf16 (Marlin's trick). Rows r
    // and r + 1 share a register: their words' halves holding column j
    // side by side, each nibble shifted down and or-ed into 0x4300 (bf16
    // 128, whose last mantissa bit is 1) gives 128 + u in both halves;
    // one sub.bf16x2 of 128 + bias + zero (at most 143: exact) leaves
    // q - zero, exact.
    LLVMTypeRef v2 = LLVMVectorType(q->op, 2);
    for (int32_t p = 0; p < 2; ++p) {
      LLVMValueRef lo = words[2 * p][0], hi = words[2 * p + 1][0];
      if (w->flip) {
        lo = LLVMBuildXor(b, lo, flip, "");
        hi = LLVMBuildXor(b, hi, flip, "");
      }
      // Columns 0-3 in the words' low halves, 4-7 in their high halves.
      LLVMValueRef pair =
          j < 4 ? LLVMBuildOr(b, LLVMBuildAnd(b, lo, c32(q, 0xFFFF), ""),
                              LLVMBuildShl(b, hi, c32(q, 16), ""), "")
                : LLVMBuildOr(
                      b, LLVMBuildLShr(b, lo, c32(q, 16), ""),
                      LLVMBuildAnd(b, hi, c32(q, (int64_t)0xFFFF0000), ""), "");
      LLVMValueRef x = LLVMBuildLShr(b, pair, c32(q, 4 * (j % 4)), "");
      x = LLVMBuildOr(b, LLVMBuildAnd(b, x, c32(q, 0x000F000F), ""),
                      c32(q, 0x43004300), "");
      LLVMValueRef off = LLVMBuildFPTrunc(
          b, LLVMBuildFSub(b, offset[j], cf(q, 8388608.0 - 128.0), ""), q->op,
          "");
      LLVMValueRef offs = LLVMGetUndef(v2);
      offs = LLVMBuildInsertElement(b, offs, off, c32(q, 0), "");
      offs = LLVMBuildInsertElement(b, offs, off, c32(q, 1), "");
      LLVMValueRef d =
          LLVMBuildFSub(b, LLVMBuildBitCast(b, x, v2, ""), offs, "qz");
      bf[p] = LLVMBuildBitCast(b, d, em->t_i32, "");
    }
    return;
  }
  // Else in f32: the field or-ed into 2^23's mantissa, minus 2^23 + bias
  // + zero (q - zero, exact), times the scale for f16/bf16 A (exact in
  // f32), then one rounding to the operand type per value (two a cvt).
  LLVMValueRef h[4];
  for (int32_t i = 0; i < 4; ++i) {
    // Tiled int8: row i is byte i of word j % 4 of half j / 4.
    LLVMValueRef word =
        q->tiled ? words[j % 4][j / 4] : words[i][w->bits == 4 ? 0 : j / 4];
    int32_t shift = q->tiled ? 8 * i : w->bits == 4 ? 4 * j : 8 * (j % 4);
    if (w->flip) word = LLVMBuildXor(b, word, flip, "");
    LLVMValueRef u = LLVMBuildAnd(b, LLVMBuildLShr(b, word, c32(q, shift), ""),
                                  c32(q, w->bits == 4 ? 15 : 255), "");
    LLVMValueRef f = LLVMBuildBitCast(
        b, LLVMBuildOr(b, u, c32(q, 0x4B000000), ""), em->t_f32, "");
    LLVMValueRef v = LLVMBuildFSub(b, f, offset[j], "qz");
    if (!q->split) v = LLVMBuildFMul(b, v, scale[j], "w");
    h[i] = v;
  }
  bf[0] = pack_f32(q, h[0], h[1]);
  bf[1] = pack_f32(q, h[2], h[3]);
}

static int32_t gcd32(int32_t a, int32_t b) {
  while (b) {
    int32_t r = a % b;
    a = b;
    b = r;
  }
  return a;
}

// One chunk (q->steps steps of 16 k rows from |k0|): |fast|, every row
// inside K and aligned vector loads; else clamped scalar loads.
// A whole chunk's words from |k0| on the vector path, stored into |pre|
// ([32 x i32]: step, row, word), so that they are in flight while the
// previous chunk computes.
static void prefetch_chunk(wm_t* q, LLVMValueRef k0, LLVMValueRef pre) {
  LLVMBuilderRef b = q->b;
  LLVMValueRef t4 = LLVMBuildMul(b, q->t, c64(q, 4), "");
  for (int32_t s = 0; s < q->steps; ++s) {
    LLVMValueRef unit[4][2];
    if (q->tiled) load_tiled(q, LLVMBuildAdd(b, k0, c64(q, 16 * s), ""), unit);
    for (int32_t i = 0; i < 4; ++i) {
      LLVMValueRef v[2];
      LLVMValueRef kk =
          LLVMBuildAdd(b, LLVMBuildAdd(b, k0, t4, ""), c64(q, 16 * s + i), "");
      if (q->tiled)
        for (int32_t d = 0; d < q->words; ++d) v[d] = unit[i][d];
      else
        load_words(q, kk, true, v);
      for (int32_t d = 0; d < q->words; ++d) {
        LLVMValueRef idx[2] = {c32(q, 0), c32(q, (s * 4 + i) * q->words + d)};
        LLVMBuildStore(b, v[d],
                       LLVMBuildGEP2(b, LLVMArrayType2(q->em->t_i32, 32), pre,
                                     idx, 2, ""));
      }
    }
  }
}

static void emit_steps(wm_t* q, LLVMValueRef k0, bool fast, int32_t steps,
                       LLVMValueRef given[8][4][2]) {
  const tj_nvptx_wqgemm_t* w = q->w;
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  int32_t fold = gcd32(q->fold, steps);
  int32_t ahead = q->ahead;
  LLVMValueRef klast = LLVMBuildSub(b, w->kdim, c64(q, 1), "");
  LLVMValueRef t4 = LLVMBuildMul(b, q->t, c64(q, 4), "");
  // Every weight word of the chunk first (or prefetched, |given|):
  // words[step][row i][word].
  LLVMValueRef words[8][4][2];
  for (int32_t s = 0; s < steps; ++s) {
    if (q->tiled && !given) {
      load_tiled(q, LLVMBuildAdd(b, k0, c64(q, 16 * s), ""), words[s]);
      continue;
    }
    for (int32_t i = 0; i < 4; ++i) {
      if (given) {
        for (int32_t d = 0; d < q->words; ++d) words[s][i][d] = given[s][i][d];
        continue;
      }
      LLVMValueRef kk =
          LLVMBuildAdd(b, LLVMBuildAdd(b, k0, t4, ""), c64(q, 16 * s + i), "");
      load_words(q, fast ? kk : min64(q, kk, klast), fast, words[s][i]);
    }
  }
  LLVMValueRef acc[4 * kTiles], gacc[4 * kTiles];
  for (int32_t i = 0; i < 4 * kTiles; ++i) {
    acc[i] = LLVMBuildLoad2(b, em->t_f32, slot(q, q->acc, i), "");
    gacc[i] =
        q->split ? LLVMBuildLoad2(b, em->t_f32, slot(q, q->gacc, i), "") : NULL;
  }
  LLVMValueRef x[8][2][4];
  for (int32_t s = 0; s < steps && s < ahead; ++s)
    for (int32_t r = 0; r < 2; ++r)
      load_a(q, r, LLVMBuildAdd(b, k0, c64(q, 16 * s), ""), fast, x[s][r]);
  LLVMValueRef scale[8] = {0}, offset[8] = {0}, cs[16] = {0}, grow = NULL;
  bool per_group = w->group != 0;
  for (int32_t s = 0; s < steps; ++s) {
    LLVMValueRef ks = LLVMBuildAdd(b, k0, c64(q, 16 * s), "");
    if (s + ahead < steps)
      for (int32_t r = 0; r < 2; ++r)
        load_a(q, r, LLVMBuildAdd(b, k0, c64(q, 16 * (s + ahead)), ""), fast,
               x[s + ahead][r]);
    // A new group: its scales and zero points (the steps of a fold lie in
    // one group: fold divides group / 16 and the chunk's steps).
    if (s % fold == 0) {
      grow = group_row(q, min64(q, ks, klast));
      if (q->tiled) {
        load_run8(q, false, grow, q->wcol, offset);
        if (!q->split) load_run8(q, true, grow, q->wcol, scale);
      }
      for (int32_t j = 0; j < 8 && !q->tiled; ++j) {
        LLVMValueRef col = LLVMBuildAdd(b, q->wcol, c64(q, j), "");
        offset[j] = load_offset(q, grow, col);
        if (!q->split) scale[j] = load_scale(q, grow, col);
      }
      // Tiled (128 registers): the C scales only when the fold needs
      // them, not held across its steps.
      if (q->split && per_group && !q->tiled) c_scales(q, grow, cs);
    }
    LLVMValueRef af[3][4];
    a_fragments(q, x[s], af);
    for (int32_t j = 0; j < kTiles; ++j) {
      LLVMValueRef bf[2];
      b_fragments(q, words[s], j, offset, scale, bf);
      if (!q->split) {
        mma(q, af[0], bf, &acc[4 * j]);
        continue;
      }
      // The small terms first, so that each adds into a smaller sum.
      for (int32_t term = 2; term >= 0; --term)
        mma(q, af[term], bf, &gacc[4 * j]);
    }
    if (q->split && per_group && (s + 1) % fold == 0) {
      if (q->tiled) c_scales(q, grow, cs);
      fold_group(q, acc, gacc, cs);
    }
  }
  for (int32_t i = 0; i < 4 * kTiles; ++i) {
    LLVMBuildStore(b, acc[i], slot(q, q->acc, i));
    if (q->split) LLVMBuildStore(b, gacc[i], slot(q, q->gacc, i));
  }
}

// The tile's K splits joined (w->max_splits > 1, S = |splits| > 1): each
// block stores its staged tile into its slot of a module-global workspace
// [n_tiles][max_splits][16 x 64] and counts itself in on the tile's
// counter; the last to arrive adds the S partials in split order (so the
// sum does not depend on which block is last) into its staged tile, puts
// the counter back to 0 for the next launch and goes on to the epilogue;
// the others return. The workspace and counters are the module's, so two
// launches of one kernel must not overlap (one stream: they do not).
// The staged tile's items |it0| .. + threads - 1 (rows it0 / 64 ..)
// hold a row inside M: rows past M are never stored (the epilogue reads
// rows inside M only), so at decode (M = 1) the sums below touch one row
// in 16.
static void begin_live_rows(wm_t* q, tj_emit_if_t* live, int32_t it0) {
  tj_emit_if_begin(
      q->em, live,
      LLVMBuildICmp(q->b, LLVMIntSGT, q->rows, c64(q, it0 / kTileN), ""),
      "live");
}

static void join_splits(wm_t* q, LLVMValueRef splits, LLVMValueRef split) {
  const tj_nvptx_wqgemm_t* w = q->w;
  tj_nvptx_emit_t* nv = q->nv;
  tj_emit_t* em = q->em;
  LLVMBuilderRef b = q->b;
  char name[256];
  snprintf(name, sizeof(name), "wq_partials_%s", em->k->name);
  LLVMTypeRef wt = LLVMArrayType2(
      em->t_f32, (uint64_t)(w->n_tiles * w->max_splits * 16 * kTileN));
  LLVMValueRef ws = LLVMAddGlobalInAddressSpace(em->mod, wt, name, 1);
  LLVMSetInitializer(ws, LLVMConstNull(wt));
  LLVMSetLinkage(ws, LLVMInternalLinkage);
  snprintf(name, sizeof(name), "wq_arrivals_%s", em->k->name);
  LLVMTypeRef ct = LLVMArrayType2(em->t_i32, (uint64_t)w->n_tiles);
  LLVMValueRef cnt = LLVMAddGlobalInAddressSpace(em->mod, ct, name, 1);
  LLVMSetInitializer(cnt, LLVMConstNull(ct));
  LLVMSetLinkage(cnt, LLVMInternalLinkage);
  LLVMValueRef tile = LLVMBuildSDiv(b, w->n0, c64(q, kTileN), "tile");
  LLVMValueRef tile_base =
      LLVMBuildMul(b, tile, c64(q, w->max_splits * 16 * kTileN), "");
  LLVMValueRef tid = LLVMBuildZExt(b, w->tid, em->t_i64, "");
  // ws[tile][split][item] = staged C (row item / 64, column item % 64).
  LLVMValueRef mine = LLVMBuildAdd(
      b, tile_base, LLVMBuildMul(b, split, c64(q, 16 * kTileN), ""), "");
  for (int32_t it0 = 0; it0 < 16 * kTileN; it0 += q->threads) {
    tj_emit_if_t live;
    begin_live_rows(q, &live, it0);
    LLVMValueRef it = LLVMBuildAdd(b, tid, c64(q, it0), "");
    LLVMValueRef at =
        LLVMBuildAdd(b,
                     LLVMBuildMul(b, LLVMBuildUDiv(b, it, c64(q, kTileN), ""),
                                  c64(q, w->c_stride), ""),
                     LLVMBuildURem(b, it, c64(q, kTileN), ""), "");
    LLVMValueRef v = LLVMBuildLoad2(
        b, em->t_f32, LLVMBuildGEP2(b, em->t_f32, w->smem, &at, 1, ""), "");
    LLVMValueRef dst = gep(q, em->t_f32, ws, LLVMBuildAdd(b, mine, it, ""));
    LLVMSetVolatile(LLVMBuildStore(b, v, dst), 1);
    tj_emit_if_end(em, &live);
  }
  // The stores visible to the GPU before the count (__threadfence).
  tj_nvptx_call(nv, "llvm.nvvm.membar.gl", NULL, 0);
  tj_nvptx_barrier(nv);
  // Thread 0 counts the block in; the flag goes through shared memory
  // (the reduction area, free now).
  LLVMValueRef flag =
      LLVMBuildGEP2(b, em->t_f32, w->smem,
                    (LLVMValueRef[]){c32(q, 16 * w->c_stride)}, 1, "flag");
  tj_emit_if_t first;
  tj_emit_if_begin(em, &first,
                   LLVMBuildICmp(b, LLVMIntEQ, w->tid, c32(q, 0), ""), "t0");
  LLVMValueRef old =
      LLVMBuildAtomicRMW(b, LLVMAtomicRMWBinOpAdd, gep(q, em->t_i32, cnt, tile),
                         c32(q, 1), LLVMAtomicOrderingMonotonic, 0);
  LLVMValueRef last =
      LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildZExt(b, old, em->t_i64, ""),
                    LLVMBuildSub(b, splits, c64(q, 1), ""), "");
  LLVMBuildStore(b, LLVMBuildZExt(b, last, em->t_i32, ""), flag);
  tj_emit_if_end(em, &first);
  tj_nvptx_barrier(nv);
  LLVMValueRef is_last = LLVMBuildICmp(
      b, LLVMIntNE, LLVMBuildLoad2(b, em->t_i32, flag, ""), c32(q, 0), "last");
  LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(b));
  LLVMBasicBlockRef leave = LLVMAppendBasicBlockInContext(
      LLVMGetTypeContext(em->t_f32), fn, "wq_not_last");
  LLVMBasicBlockRef go = LLVMAppendBasicBlockInContext(
      LLVMGetTypeContext(em->t_f32), fn, "wq_last");
  LLVMBuildCondBr(b, is_last, go, leave);
  LLVMPositionBuilderAtEnd(b, leave);
  LLVMBuildRetVoid(b);
  LLVMPositionBuilderAtEnd(b, go);
  // The other blocks' stores before ours are read (the acquire side).
  tj_nvptx_call(nv, "llvm.nvvm.membar.gl", NULL, 0);
  // The thread's items go in groups of up to 32 loads: every partial of
  // a group is loaded before its first add (slots past |splits| read the
  // last split's and are not added), so that the loads are in flight
  // together, one L2 round trip a group (one at decode: the groups past
  // the rows inside M are skipped), not one for each split and item. The
  // sums then go in split order.
  int32_t items = 16 * kTileN / q->threads;
  int32_t per_group = w->max_splits >= 32 ? 1 : 32 / w->max_splits;
  if (per_group > items) per_group = items;
  LLVMValueRef slast = LLVMBuildSub(b, splits, c64(q, 1), "");
  for (int32_t i0 = 0; i0 < items; i0 += per_group) {
    tj_emit_if_t live;
    begin_live_rows(q, &live, i0 * q->threads);
    LLVMValueRef part[32][16];
    int32_t n = items - i0 < per_group ? items - i0 : per_group;
    for (int32_t i = 0; i < n; ++i) {
      LLVMValueRef it = LLVMBuildAdd(b, tid, c64(q, (i0 + i) * q->threads), "");
      for (int32_t s = 0; s < w->max_splits; ++s) {
        LLVMValueRef from = min64(q, c64(q, s), slast);
        LLVMValueRef src =
            gep(q, em->t_f32, ws,
                LLVMBuildAdd(
                    b,
                    LLVMBuildAdd(b, tile_base,
                                 LLVMBuildMul(b, from, c64(q, 16 * kTileN), ""),
                                 ""),
                    it, ""));
        part[i][s] = LLVMBuildLoad2(b, em->t_f32, src, "");
        LLVMSetVolatile(part[i][s], 1);
      }
    }
    for (int32_t i = 0; i < n; ++i) {
      LLVMValueRef it = LLVMBuildAdd(b, tid, c64(q, (i0 + i) * q->threads), "");
      LLVMValueRef sum = LLVMBuildFAdd(b, cf(q, 0.0), part[i][0], "");
      for (int32_t s = 1; s < w->max_splits; ++s)
        sum = LLVMBuildSelect(
            b, LLVMBuildICmp(b, LLVMIntSLT, c64(q, s), splits, ""),
            LLVMBuildFAdd(b, sum, part[i][s], ""), sum, "");
      LLVMValueRef at =
          LLVMBuildAdd(b,
                       LLVMBuildMul(b, LLVMBuildUDiv(b, it, c64(q, kTileN), ""),
                                    c64(q, w->c_stride), ""),
                       LLVMBuildURem(b, it, c64(q, kTileN), ""), "");
      LLVMBuildStore(b, sum, LLVMBuildGEP2(b, em->t_f32, w->smem, &at, 1, ""));
    }
    tj_emit_if_end(em, &live);
  }
  tj_emit_if_t reset;
  tj_emit_if_begin(em, &reset,
                   LLVMBuildICmp(b, LLVMIntEQ, w->tid, c32(q, 0), ""), "t0");
  LLVMBuildStore(b, c32(q, 0), gep(q, em->t_i32, cnt, tile));
  tj_emit_if_end(em, &reset);
  tj_nvptx_barrier(nv);
}

// Every thread of every block of the cluster: what each did before is
// visible to the others' after.
static void cluster_sync(wm_t* q) {
  tj_emit_inline_asm(q->em,
                     LLVMVoidTypeInContext(LLVMGetTypeContext(q->em->t_f32)),
                     "barrier.cluster.arrive.release;\n"
                     "barrier.cluster.wait.acquire;",
                     "~{memory}", NULL, 0);
}

// The f32 at |p| (this block's shared memory) in the shared memory of the
// cluster's block |rank| (i32).
static LLVMValueRef load_peer(wm_t* q, LLVMValueRef p, LLVMValueRef rank) {
  LLVMValueRef args[2] = {LLVMBuildPtrToInt(q->b, p, q->em->t_i32, ""), rank};
  return tj_emit_inline_asm(q->em, q->em->t_f32,
                            "{\n.reg .b32 r;\n"
                            "mapa.shared::cluster.u32 r, $1, $2;\n"
                            "ld.shared::cluster.f32 $0, [r];\n}",
                            "=f,r,r", args, 2);
}

// The tile's K splits joined inside their cluster (w->cluster_join, S =
// |splits| > 1 blocks, block s the split s): after a cluster barrier
// (every block's staged tile complete), block 0 adds the others' staged
// tiles, read through distributed shared memory, in split order (0 +
// p0 + p1 + ...: join_splits' sums, bitwise) into its own and goes on to
// the epilogue; a second barrier keeps the others' shared memory alive
// until it has read them, then they return. No workspace, fence or
// atomic; only the rows inside M.
static void join_cluster(wm_t* q, LLVMValueRef splits, LLVMValueRef split) {
  const tj_nvptx_wqgemm_t* w = q->w;
  tj_emit_t* em = q->em;
  LLVMBuilderRef b = q->b;
  cluster_sync(q);
  LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(b));
  LLVMContextRef cx = LLVMGetTypeContext(em->t_f32);
  LLVMBasicBlockRef leave = LLVMAppendBasicBlockInContext(cx, fn, "wq_peer");
  LLVMBasicBlockRef go = LLVMAppendBasicBlockInContext(cx, fn, "wq_first");
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntEQ, split, c64(q, 0), ""), go,
                  leave);
  LLVMPositionBuilderAtEnd(b, leave);
  cluster_sync(q);
  LLVMBuildRetVoid(b);
  LLVMPositionBuilderAtEnd(b, go);
  LLVMValueRef tid = LLVMBuildZExt(b, w->tid, em->t_i64, "");
  int32_t items = 16 * kTileN / q->threads;
  int32_t per_group = w->max_splits >= 32 ? 1 : 32 / w->max_splits;
  if (per_group > items) per_group = items;
  LLVMValueRef slast =
      LLVMBuildTrunc(b, LLVMBuildSub(b, splits, c64(q, 1), ""), em->t_i32, "");
  for (int32_t i0 = 0; i0 < items; i0 += per_group) {
    tj_emit_if_t live;
    begin_live_rows(q, &live, i0 * q->threads);
    LLVMValueRef part[32][16], at[32];
    int32_t n = items - i0 < per_group ? items - i0 : per_group;
    for (int32_t i = 0; i < n; ++i) {
      LLVMValueRef it = LLVMBuildAdd(b, tid, c64(q, (i0 + i) * q->threads), "");
      LLVMValueRef idx =
          LLVMBuildAdd(b,
                       LLVMBuildMul(b, LLVMBuildUDiv(b, it, c64(q, kTileN), ""),
                                    c64(q, w->c_stride), ""),
                       LLVMBuildURem(b, it, c64(q, kTileN), ""), "");
      at[i] = LLVMBuildGEP2(b, em->t_f32, w->smem, &idx, 1, "");
      part[i][0] = LLVMBuildLoad2(b, em->t_f32, at[i], "");
      // Slots past |splits| read the last split's and are not added.
      for (int32_t s = 1; s < w->max_splits; ++s)
        part[i][s] = load_peer(
            q, at[i],
            tj_emit_select(em,
                           LLVMBuildICmp(b, LLVMIntSLT, c32(q, s), slast, ""),
                           c32(q, s), slast));
    }
    for (int32_t i = 0; i < n; ++i) {
      LLVMValueRef sum = LLVMBuildFAdd(b, cf(q, 0.0), part[i][0], "");
      for (int32_t s = 1; s < w->max_splits; ++s)
        sum = LLVMBuildSelect(
            b, LLVMBuildICmp(b, LLVMIntSLT, c64(q, s), splits, ""),
            LLVMBuildFAdd(b, sum, part[i][s], ""), sum, "");
      LLVMBuildStore(b, sum, at[i]);
    }
    tj_emit_if_end(em, &live);
  }
  cluster_sync(q);
  tj_nvptx_barrier(q->nv);
}

int32_t tj_nvptx_wqmma_shared_bytes(const tj_nvptx_wqgemm_t* w) {
  int32_t warps = (w->threads ? w->threads : 256) / 32;
  return warps * red_stride(w) * 4 + 16 * w->c_stride * 4;
}

// w->ring: chunk |c| (i64) of the warp's column tile copied into ring slot
// |slot| (i64), the lane's 16 bytes of each step (and half) by one
// cp.async.cg each; not committed.
static void ring_issue(wm_t* q, LLVMValueRef c, LLVMValueRef slot) {
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  int32_t bytes = q->w->bits == 4 ? 512 : 1024;
  LLVMValueRef step0 = LLVMBuildMul(b, c, c64(q, q->steps), "");
  LLVMValueRef dst0 = LLVMBuildAdd(
      b, q->ring_lane, LLVMBuildMul(b, slot, c64(q, kChunkBytes), ""), "");
  for (int32_t s = 0; s < q->steps; ++s) {
    for (int32_t h = 0; h < q->words; ++h) {
      LLVMValueRef at =
          LLVMBuildAdd(b,
                       LLVMBuildMul(b, LLVMBuildAdd(b, step0, c64(q, s), ""),
                                    c64(q, bytes), ""),
                       c64(q, 512 * h), "");
      LLVMValueRef src = LLVMBuildAddrSpaceCast(
          b, gep(q, em->t_i8, q->btile, at), q->nv->t_ptr_global, "");
      LLVMValueRef dst =
          gep(q, em->t_i8, q->w->smem,
              LLVMBuildAdd(b, dst0, c64(q, (s * q->words + h) * 512), ""));
      LLVMValueRef args[3] = {dst, src, c32(q, 16)};
      tj_nvptx_call(q->nv, "llvm.nvvm.cp.async.cg.shared.global.16.s", args, 3);
    }
  }
}

static void ring_commit(wm_t* q) {
  tj_nvptx_call(q->nv, "llvm.nvvm.cp.async.commit.group", NULL, 0);
}

static void ring_wait(wm_t* q, int32_t pending) {
  LLVMValueRef n = c32(q, pending);
  tj_nvptx_call(q->nv, "llvm.nvvm.cp.async.wait.group", &n, 1);
}

// The lane's words of the chunk in ring slot |slot| (i64), as load_tiled
// gives them: out[step][word][half]. Each lane reads back only its own
// copies (complete after its cp.async.wait_group): no barrier.
static void ring_read(wm_t* q, LLVMValueRef slot, LLVMValueRef out[8][4][2]) {
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  LLVMValueRef base = LLVMBuildAdd(
      b, q->ring_lane, LLVMBuildMul(b, slot, c64(q, kChunkBytes), ""), "");
  LLVMTypeRef vt = LLVMVectorType(em->t_i32, 4);
  for (int32_t s = 0; s < q->steps; ++s) {
    for (int32_t h = 0; h < q->words; ++h) {
      LLVMValueRef p =
          gep(q, em->t_i8, q->w->smem,
              LLVMBuildAdd(b, base, c64(q, (s * q->words + h) * 512), ""));
      LLVMValueRef v = LLVMBuildLoad2(b, vt, p, "wr");
      LLVMSetAlignment(v, 16);
      for (int32_t i = 0; i < 4; ++i)
        out[s][i][h] = LLVMBuildExtractElement(b, v, c32(q, i), "");
    }
  }
}

tj_status_t tj_nvptx_emit_wqmma(tj_nvptx_emit_t* nv,
                                const tj_nvptx_wqgemm_t* w) {
  tj_emit_t* em = &nv->em;
  wm_t q;
  memset(&q, 0, sizeof(q));
  q.nv = nv;
  q.em = em;
  q.b = em->b;
  q.w = w;
  q.threads = w->threads ? w->threads : 256;
  q.warps = q.threads / 32;
  if ((w->bits != 4 && w->bits != 8) || w->tile_n != kTileN ||
      w->c_stride % 4 != 0 || w->c_stride < kTileN || w->group % 16 != 0 ||
      w->max_splits > 16 ||
      (w->threads != 0 && w->threads != 128 && w->threads != 256))
    return tj_internal(
        "wqmma: bits %d, tile_n %d, c_stride %d, group %lld, splits %d",
        (int)w->bits, (int)w->tile_n, (int)w->c_stride, (long long)w->group,
        (int)w->max_splits);
  LLVMContextRef cx = LLVMGetTypeContext(em->t_f32);
  q.split = w->dtype == TJ_DTYPE_F32;
  q.op = w->dtype == TJ_DTYPE_F16 ? em->t_f16 : LLVMBFloatTypeInContext(cx);
  q.words = w->bits == 4 ? 1 : 2;
  // Tiled: half the chunk (16 words a lane, two chunks in flight), so
  // that the kernel fits 128 registers (two blocks an SM).
  q.steps = (w->bits == 4 ? 8 : 4) / (w->tiled ? 2 : 1);
  // Tiled (128 registers): A a step ahead, not two.
  q.ahead = w->tiled ? 1 : 2;
  q.fold = w->group ? gcd32((int32_t)(w->group / 16), q.steps) : q.steps;
  LLVMBuilderRef b = q.b;
  LLVMValueRef tid = LLVMBuildZExt(b, w->tid, em->t_i64, "");
  LLVMValueRef lane = LLVMBuildAnd(b, tid, c64(&q, 31), "lane");
  LLVMValueRef warp = LLVMBuildLShr(b, tid, c64(&q, 5), "warp");
  q.g = LLVMBuildLShr(b, lane, c64(&q, 2), "g");
  q.t = LLVMBuildAnd(b, lane, c64(&q, 3), "t");
  q.wcol = LLVMBuildAdd(b, w->n0, LLVMBuildMul(b, q.g, c64(&q, 8), ""), "wcol");
  q.tiled = w->tiled;
  if (q.tiled) {
    q.npad =
        LLVMBuildMul(b,
                     LLVMBuildSDiv(b, LLVMBuildAdd(b, w->n, c64(&q, 63), ""),
                                   c64(&q, 64), ""),
                     c64(&q, 64), "npad");
    // The column tile's blocks of 16 rows follow each other (K padded to
    // 128 rows), the lane's unit 16 L bytes into each.
    LLVMValueRef steps = LLVMBuildMul(
        b,
        LLVMBuildSDiv(b, LLVMBuildAdd(b, w->kdim, c64(&q, 127), ""),
                      c64(&q, 128), ""),
        c64(&q, 8), "");
    LLVMValueRef tile = LLVMBuildMul(
        b, LLVMBuildSDiv(b, w->n0, c64(&q, kTileN), ""),
        LLVMBuildMul(b, steps, c64(&q, w->bits == 4 ? 512 : 1024), ""), "");
    q.btile =
        gep(&q, em->t_i8, w->b_base,
            LLVMBuildAdd(b, tile, LLVMBuildMul(b, lane, c64(&q, 16), ""), ""));
  }
  LLVMValueRef rows = min64(&q, LLVMBuildSub(b, w->m, w->m0, ""), c64(&q, 16));
  LLVMValueRef rlast = LLVMBuildSub(b, rows, c64(&q, 1), "");
  q.rows = rows;
  for (int32_t r = 0; r < 2; ++r) {
    LLVMValueRef m = LLVMBuildAdd(
        b, w->m0, min64(&q, LLVMBuildAdd(b, q.g, c64(&q, 8 * r), ""), rlast),
        "");
    q.arow[r] =
        gep(&q, in_type(&q), w->a_base, LLVMBuildMul(b, m, w->sa_m, ""));
  }
  LLVMTypeRef at = LLVMArrayType2(em->t_f32, 4 * kTiles);
  q.acc = tj_emit_alloca(em, at, "wm_acc");
  q.gacc = q.split ? tj_emit_alloca(em, at, "wm_gacc") : NULL;
  for (int32_t i = 0; i < 4 * kTiles; ++i) {
    LLVMBuildStore(b, cf(&q, 0.0), slot(&q, q.acc, i));
    if (q.split) LLVMBuildStore(b, cf(&q, 0.0), slot(&q, q.gacc, i));
  }
  // The vector loads: the tile's columns all inside N, the weight's base
  // and row pitch aligned to its words, A contiguous along k and aligned
  // to 4 elements (its rows too).
  int32_t wbytes = 4 * q.words;
  int32_t abytes = w->dtype == TJ_DTYPE_F32 ? 16 : 8;
  // Tiled B: every unit inside the padded tiles, 16-byte aligned.
  LLVMValueRef mis =
      q.tiled
          ? c64(&q, 0)
          : LLVMBuildOr(
                b,
                LLVMBuildAnd(b, LLVMBuildPtrToInt(b, w->b_base, em->t_i64, ""),
                             c64(&q, wbytes - 1), ""),
                LLVMBuildSRem(b, w->sb_k, c64(&q, wbytes), ""), "");
  mis = LLVMBuildOr(
      b, mis,
      LLVMBuildAnd(b, LLVMBuildPtrToInt(b, w->a_base, em->t_i64, ""),
                   c64(&q, abytes - 1), ""),
      "");
  mis = LLVMBuildOr(b, mis, LLVMBuildSRem(b, w->sa_m, c64(&q, 4), ""), "");
  LLVMValueRef inside =
      q.tiled ? LLVMConstInt(LLVMInt1TypeInContext(cx), 1, 0)
              : LLVMBuildICmp(b, LLVMIntSLE,
                              LLVMBuildAdd(b, w->n0, c64(&q, kTileN), ""), w->n,
                              "");
  LLVMValueRef fast = LLVMBuildAnd(
      b,
      LLVMBuildAnd(b, inside,
                   LLVMBuildICmp(b, LLVMIntEQ, w->sa_k, c64(&q, 1), ""), ""),
      LLVMBuildICmp(b, LLVMIntEQ, mis, c64(&q, 0), ""), "fast");
  // The warp's chunks, round-robin; a chunk wholly inside K on the fast
  // path takes the vector loads.
  int32_t rows_a_chunk = 16 * q.steps;
  LLVMValueRef chunks =
      LLVMBuildSDiv(b, LLVMBuildAdd(b, w->kdim, c64(&q, rows_a_chunk - 1), ""),
                    c64(&q, rows_a_chunk), "chunks");
  // Split s of S (grid y) takes chunks [s C / S, (s + 1) C / S), its
  // warps round-robin.
  LLVMValueRef splits = c64(&q, 1), split = c64(&q, 0);
  if (w->max_splits > 1 && w->cluster_join) {
    splits = LLVMBuildZExt(
        b,
        tj_emit_inline_asm(em, em->t_i32, "mov.u32 $0, %cluster_nctarank;",
                           "=r", NULL, 0),
        em->t_i64, "splits");
    split = LLVMBuildZExt(
        b,
        tj_emit_inline_asm(em, em->t_i32, "mov.u32 $0, %cluster_ctarank;", "=r",
                           NULL, 0),
        em->t_i64, "split");
  } else if (w->max_splits > 1) {
    splits = tj_nvptx_sreg64(nv, "nctaid.y");
    split = tj_nvptx_sreg64(nv, "ctaid.y");
  }
  LLVMValueRef lo =
      LLVMBuildSDiv(b, LLVMBuildMul(b, split, chunks, ""), splits, "lo");
  LLVMValueRef hi = LLVMBuildSDiv(
      b, LLVMBuildMul(b, LLVMBuildAdd(b, split, c64(&q, 1), ""), chunks, ""),
      splits, "hi");
  LLVMValueRef c0 = LLVMBuildAdd(b, lo, warp, "c0");
  LLVMValueRef whole = LLVMBuildSDiv(b, w->kdim, c64(&q, rows_a_chunk), "");
  // The vector path: the chunks wholly inside K, each chunk's words loaded
  // while the one before computes (a second set of 32 registers).
  LLVMValueRef vend =
      LLVMBuildSelect(b, fast, min64(&q, hi, whole), c64(&q, 0), "vend");
  LLVMTypeRef pt = LLVMArrayType2(em->t_i32, 32);
  LLVMValueRef pre = tj_emit_alloca(em, pt, "wm_pre");
  // Programmatic dependent launch: the next kernel in the stream may be
  // scheduled now; this one loads nothing but its constant weight (and
  // sets up) before the kernel ahead of it is done and its writes are
  // visible (griddepcontrol.wait), so that its first chunk's weight loads
  // are in flight under that kernel's end.
  LLVMTypeRef vt = LLVMVoidTypeInContext(cx);
  if (w->programmatic)
    tj_emit_inline_asm(em, vt, "griddepcontrol.launch_dependents;", "~{memory}",
                       NULL, 0);
  bool ring = w->ring && q.tiled && !q.split;
  if (ring) {
    // The warp's ring (its region of the shared memory after the staged
    // C, which its partial tile reuses after the loop): the first
    // kRingStages - 1 chunks, a group each (empty past vend).
    if (q.steps * q.words * 512 != kChunkBytes)
      return tj_internal("wqmma: a chunk of %d bytes", q.steps * q.words * 512);
    q.ring_lane = LLVMBuildAdd(
        b,
        LLVMBuildAdd(b, c64(&q, 16 * w->c_stride * 4),
                     LLVMBuildMul(b, warp, c64(&q, red_stride(w) * 4), ""), ""),
        LLVMBuildMul(b, lane, c64(&q, 16), ""), "ring_lane");
    for (int32_t p = 0; p < kRingStages - 1; ++p) {
      LLVMValueRef cp = LLVMBuildAdd(b, c0, c64(&q, (int64_t)p * q.warps), "");
      tj_emit_if_t in;
      tj_emit_if_begin(em, &in, LLVMBuildICmp(b, LLVMIntSLT, cp, vend, ""),
                       "ring_in");
      ring_issue(&q, cp, c64(&q, p));
      tj_emit_if_end(em, &in);
      ring_commit(&q);
    }
  } else {
    tj_emit_if_t first;
    tj_emit_if_begin(em, &first, LLVMBuildICmp(b, LLVMIntSLT, c0, vend, ""),
                     "first");
    prefetch_chunk(&q, LLVMBuildMul(b, c0, c64(&q, rows_a_chunk), ""), pre);
    tj_emit_if_end(em, &first);
  }
  if (w->programmatic)
    tj_emit_inline_asm(em, vt, "griddepcontrol.wait;", "~{memory}", NULL, 0);
  tj_emit_loop_t loop;
  LLVMValueRef c =
      tj_emit_loop_begin(em, &loop, c0, vend, c64(&q, q.warps), "chunk");
  LLVMValueRef k0 = LLVMBuildMul(b, c, c64(&q, rows_a_chunk), "k0");
  LLVMValueRef cur[8][4][2];
  if (ring) {
    // Chunk j of the warp (c = c0 + j W) is in slot j % S; chunk j + S -
    // 1 goes into slot (j - 1) % S, which the warp read (into registers
    // its mmas have consumed) in the iteration before.
    LLVMValueRef j = LLVMBuildSDiv(b, LLVMBuildSub(b, c, c0, ""),
                                   c64(&q, q.warps), "ring_j");
    LLVMValueRef cn =
        LLVMBuildAdd(b, c, c64(&q, (int64_t)(kRingStages - 1) * q.warps), "cn");
    tj_emit_if_t in;
    tj_emit_if_begin(em, &in, LLVMBuildICmp(b, LLVMIntSLT, cn, vend, ""),
                     "ring_next");
    ring_issue(
        &q, cn,
        LLVMBuildSRem(b, LLVMBuildAdd(b, j, c64(&q, kRingStages - 1), ""),
                      c64(&q, kRingStages), ""));
    tj_emit_if_end(em, &in);
    ring_commit(&q);
    ring_wait(&q, kRingStages - 1);
    ring_read(&q, LLVMBuildSRem(b, j, c64(&q, kRingStages), ""), cur);
  } else {
    for (int32_t s = 0; s < q.steps; ++s)
      for (int32_t i2 = 0; i2 < 4; ++i2)
        for (int32_t d = 0; d < q.words; ++d) {
          LLVMValueRef idx[2] = {c32(&q, 0),
                                 c32(&q, (s * 4 + i2) * q.words + d)};
          cur[s][i2][d] = LLVMBuildLoad2(
              b, em->t_i32, LLVMBuildGEP2(b, pt, pre, idx, 2, ""), "");
        }
    LLVMValueRef cn = LLVMBuildAdd(b, c, c64(&q, q.warps), "cn");
    tj_emit_if_t next;
    tj_emit_if_begin(em, &next, LLVMBuildICmp(b, LLVMIntSLT, cn, vend, ""),
                     "next");
    prefetch_chunk(&q, LLVMBuildMul(b, cn, c64(&q, rows_a_chunk), ""), pre);
    tj_emit_if_end(em, &next);
  }
  if (q.split) {
    // f32 A at M <= 8: rows g + 8 as constant zeros, so that their loads
    // and three-way splits (a third of a step's instructions) are gone.
    tj_emit_if_t up, all;
    LLVMValueRef few = LLVMBuildICmp(b, LLVMIntSLE, rows, c64(&q, 8), "");
    tj_emit_if_begin(em, &up, few, "upper");
    q.upper_only = true;
    emit_steps(&q, k0, true, q.steps, cur);
    q.upper_only = false;
    tj_emit_if_end(em, &up);
    tj_emit_if_begin(em, &all, LLVMBuildNot(b, few, ""), "all");
    emit_steps(&q, k0, true, q.steps, cur);
    tj_emit_if_end(em, &all);
  } else {
    emit_steps(&q, k0, true, q.steps, cur);
  }
  tj_emit_loop_end(em, &loop);
  // Every copy landed before the ring's memory holds the partial tile.
  if (ring) ring_wait(&q, 0);
  // The rest (a last chunk past K, or every chunk where the vector loads
  // do not apply) a step at a time on the clamped path, so that its loads
  // (byte by byte where unaligned) hold fewer registers.
  tj_emit_loop_t rest;
  LLVMValueRef cr =
      tj_emit_loop_begin(em, &rest, c0, hi, c64(&q, q.warps), "rest");
  tj_emit_if_t slow;
  tj_emit_if_begin(em, &slow, LLVMBuildICmp(b, LLVMIntSGE, cr, vend, ""),
                   "slow");
  LLVMValueRef kr = LLVMBuildMul(b, cr, c64(&q, rows_a_chunk), "");
  tj_emit_loop_t step;
  LLVMValueRef ks = tj_emit_loop_begin(
      em, &step, c64(&q, 0), c64(&q, 16 * q.steps), c64(&q, 16), "step");
  emit_steps(&q, LLVMBuildAdd(b, kr, ks, ""), false, 1, NULL);
  tj_emit_loop_end(em, &step);
  tj_emit_if_end(em, &slow);
  tj_emit_loop_end(em, &rest);
  // Per output channel (f32 A): the one scale after the whole sum.
  if (q.split && !w->group) {
    LLVMValueRef acc[4 * kTiles], gacc[4 * kTiles], cs[16];
    for (int32_t i = 0; i < 4 * kTiles; ++i) {
      acc[i] = cf(&q, 0.0);
      gacc[i] = LLVMBuildLoad2(b, em->t_f32, slot(&q, q.gacc, i), "");
    }
    c_scales(&q, c64(&q, 0), cs);
    fold_group(&q, acc, gacc, cs);
    for (int32_t i = 0; i < 4 * kTiles; ++i)
      LLVMBuildStore(b, acc[i], slot(&q, q.acc, i));
  }
  // The warp's partial tile: red[warp][row][column], after the staged C.
  LLVMValueRef red =
      LLVMBuildGEP2(b, em->t_f32, w->smem,
                    (LLVMValueRef[]){c32(&q, 16 * w->c_stride)}, 1, "red");
  LLVMValueRef wbase = LLVMBuildMul(b, warp, c64(&q, red_stride(w)), "");
  for (int32_t j = 0; j < kTiles; ++j) {
    for (int32_t e = 0; e < 4; ++e) {
      LLVMValueRef row = LLVMBuildAdd(b, q.g, c64(&q, e >= 2 ? 8 : 0), "");
      LLVMValueRef col = LLVMBuildAdd(b, LLVMBuildMul(b, q.t, c64(&q, 16), ""),
                                      c64(&q, 8 * (e & 1) + j), "");
      LLVMValueRef idx = LLVMBuildAdd(
          b, wbase,
          LLVMBuildAdd(b, LLVMBuildMul(b, row, c64(&q, kTileN), ""), col, ""),
          "");
      LLVMBuildStore(
          b, LLVMBuildLoad2(b, em->t_f32, slot(&q, q.acc, 4 * j + e), ""),
          LLVMBuildGEP2(b, em->t_f32, red,
                        (LLVMValueRef[]){LLVMBuildTrunc(b, idx, em->t_i32, "")},
                        1, ""));
    }
  }
  tj_nvptx_barrier(nv);
  // The warps' partials in warp order into the staged C tile.
  for (int32_t it0 = 0; it0 < 16 * kTileN; it0 += q.threads) {
    tj_emit_if_t live;
    begin_live_rows(&q, &live, it0);
    LLVMValueRef it = LLVMBuildAdd(b, w->tid, c32(&q, it0), "");
    LLVMValueRef r = LLVMBuildUDiv(b, it, c32(&q, kTileN), "");
    LLVMValueRef cl = LLVMBuildURem(b, it, c32(&q, kTileN), "");
    LLVMValueRef s = cf(&q, 0.0);
    for (int32_t wp = 0; wp < q.warps; ++wp) {
      LLVMValueRef a = LLVMBuildAdd(b, it, c32(&q, wp * red_stride(w)), "");
      s = LLVMBuildFAdd(
          b, s,
          LLVMBuildLoad2(b, em->t_f32,
                         LLVMBuildGEP2(b, em->t_f32, red, &a, 1, ""), ""),
          "");
    }
    LLVMValueRef a =
        LLVMBuildAdd(b, LLVMBuildMul(b, r, c32(&q, w->c_stride), ""), cl, "");
    LLVMBuildStore(b, s, LLVMBuildGEP2(b, em->t_f32, w->smem, &a, 1, ""));
    tj_emit_if_end(em, &live);
  }
  tj_nvptx_barrier(nv);
  if (w->max_splits > 1) {
    tj_emit_if_t many;
    tj_emit_if_begin(em, &many,
                     LLVMBuildICmp(b, LLVMIntSGT, splits, c64(&q, 1), ""),
                     "splits");
    if (w->cluster_join)
      join_cluster(&q, splits, split);
    else
      join_splits(&q, splits, split);
    tj_emit_if_end(em, &many);
  }
  return NULL;
}
