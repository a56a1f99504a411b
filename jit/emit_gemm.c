// The GEMM template: packed B blocks, a register-tiled microkernel with
// llvm.fma on <W x float>, and the epilogue applied to each finished tile.
// Two paths, chosen at run time from M (a kernel serves every M):
//
// Small M (M <= SMALL_M, B with unit stride along n): nothing is packed.
// Packing B costs a read and a write of the whole weight per run, which for
// a GEMV-like M = 1 is 2-3x the work of the product itself (a 16 MB weight
// read once); the microkernel reads B's rows in place instead, with masked
// loads at the right edge, over all of K in one pass, and the epilogue
// runs on the tile as usual. The consecutive n blocks of one call form one
// span of columns, walked in strips as wide as the registers allow for the
// rows at hand (1 row: 4 x NR; 2-3 rows: 2 x NR; more: NR): B is then read
// in runs of 512-1024 contiguous bytes per row, which streams at ~85 GB/s
// from L3 here where 256-byte runs (one NR panel) reach ~56 GB/s. The path
// is a function of its own, which the x86 JIT leaves out of the kernel's
// first compile and builds when a run first takes it (emit_small_m_fn).
//
// Otherwise (BLIS order):
//   for u in [begin, end):                       // (batch, n block, m block)
//     for k0 in [0, K) step kc:                  // one pass when K <= kc
//       pack B[k0 : k0+kc, n0 : n0+nc] into scratch as panels [nc/NR][kc][NR]
//         (zero padded; skipped when the previous unit of this call packed
//         the same block and K <= kc)
//       [when A is not k-contiguous: pack A[m0 : m0+mc, k0 : k0+kc] as
//        slivers [mc/MR][kc][MR]; units then go n block fastest, and the
//        A block, not B's, is what consecutive units reuse]
//       for m in [m0, m0+mc) step MR:            // A sliver (MR x kc) in L1
//         for each NR panel:                     // B panel streams from L2
//           ukernel: MR x NR accumulators over kc (rows past M re-read the
//             last valid row and are never stored)
//           last pass: epilogue on the tile, one row at a time
//
// Transposed operands cost nothing extra: packing is where a layout
// change is free. A B with unit stride along k (B = W^T, as in dx = dy @
// W^T) is packed by W x W in-register transposes of k-contiguous vectors
// (shufflevector interleaves: vpermt2ps on AVX-512) instead of gathers; an
// A with unit stride along m (A = X^T, as in dW = X^T @ dy) would otherwise
// be read one k column at a time at a large (often power-of-two) stride,
// touching a new cache line and page per k step with every line mapping
// to the same L1 set, so A's block is copied into [kc][MR] slivers first,
// reading a row of A^T's block (along m) at a time, once per thread and m
// block.
//
// f16 and bf16 operands (accumulated in f32) take the same paths: packing
// widens them to f32 (bf16: a 16-bit shift; f16: vcvtph2ps, or integer
// code without F16C), A is always packed then (tj_kir_gemm_packs_a), and
// the in-place microkernels widen B's vectors and A's broadcasts as they
// read them. Where the CPU has avx512bf16, a bf16 x bf16 GEMM's packed
// path instead keeps bf16 and packs pairs along k, B panels as [kc/2][NR]
// and A slivers as [kc/2][MR] 32-bit lanes of two bf16 (an odd kc's last
// pair zero padded), and the microkernel's FMA is vdpbf16ps, two products
// per f32 lane per instruction: ~1.8x the f32 path's rate on one core
// of the Zen 5 (bench/gemm_bench.c bf16), but 0.6x on the Xeon with AMX
// (bench/RESULTS.md, amxbf16). Its sums differ slightly from the FMA
// chain's (see ukernel_step_dot); the small-M path stays on widening,
// being bound by reading B, which bf16 already halves. On the AMX tier of
// a CPU with amx-bf16, a bf16 GEMM with K a constant multiple of 32 and a
// k-contiguous A runs the packed path on the tiles instead (tdpbf16ps on
// the same pair panels, A read in place; see the AMX section); other K,
// and a constant M of at most 16, keep vdpbf16ps.
//
// 8-bit operands (qgemm, issue 17) take the packed path only, with i32
// accumulators: B in quads of k for vpdpbusd (or i16 pairs for pmaddwd
// without VNNI or with a u8 B, A then packed as pairs too), A's quads read
// in place; on the AMX tier the tile microkernel (emit_amx_ukernel) runs
// on the same quad panels. See group_t and the AMX section.
//
// The microkernel is its own noinline function: its register allocation
// then sees only the accumulators and the K loop, and the epilogue's
// constants (GELU's polynomials) never compete with the accumulators for
// registers, which is what made codegen slow and spill-prone when both
// shared a function (LLVM-NOTES). The tile crosses from the microkernel to
// the epilogue through a 64-byte-aligned stack buffer that stays in L1.
//
// Scratch per call (tj_kir_launch_info sizes it): the packed B block
// (kc x nc), then the packed A block when tj_kir_gemm_packs_a (mc / MR
// slivers of MR x kc and a vector of slack each),
// then, when K > kc, the unit's partial sums (mc x nc); each part starts
// 64-byte aligned.

#include <stdio.h>
#include <string.h>

#include <llvm-c/DebugInfo.h>

#include "jit/emit_gemm.h"
#include "jit/emit_llvm.h"
#include "lib/dtype.h"

// M at or below which B is read in place (see above). At M = 16 the
// in-place path reads each B block 3 times (6-row tiles) from L2 where
// the packed path writes it once and reads it 3 times: about even, so
// the threshold sits there (bench/gemm_bench.c measures both sides).
#define SMALL_M 16
// Rows of A^T the A packing prefetches ahead: its rows are a full row of
// A^T apart (often a multiple of 4 KiB), which the hardware prefetchers do
// not follow (dW = X^T @ dy at K = 2048: 1.48 -> 1.17x OpenBLAS's time).
#define PREFETCH_A_ROWS 16
// Rows of B the B packing prefetches ahead (pack_b_contiguous).
#define PREFETCH_B_ROWS 16
// Rows of a quantized B the in-place microkernels prefetch ahead.
#define BQ_AHEAD 16

static LLVMValueRef i64c(tj_emit_t* em, int64_t v) {
  return LLVMConstInt(em->t_i64, (unsigned long long)v, 1);
}

static LLVMValueRef i32c(tj_emit_t* em, int64_t v) {
  return LLVMConstInt(em->t_i32, (unsigned long long)v, 1);
}

static LLVMValueRef ceil_div(tj_emit_t* em, LLVMValueRef a, int64_t b) {
  return LLVMBuildUDiv(em->b, LLVMBuildAdd(em->b, a, i64c(em, b - 1), ""),
                       i64c(em, b), "");
}

static LLVMValueRef align64(tj_emit_t* em, LLVMValueRef bytes) {
  return LLVMBuildAnd(em->b, LLVMBuildAdd(em->b, bytes, i64c(em, 63), ""),
                      i64c(em, ~(int64_t)63), "");
}

static LLVMValueRef gep_f32(tj_emit_t* em, LLVMValueRef ptr,
                            LLVMValueRef count) {
  return LLVMBuildGEP2(em->b, em->t_f32, ptr, &count, 1, "");
}

static LLVMValueRef gep_i8(tj_emit_t* em, LLVMValueRef ptr,
                           LLVMValueRef count) {
  return LLVMBuildGEP2(em->b, em->t_i8, ptr, &count, 1, "");
}

// Masked load / gather of |vt| whose elements are |align|-byte aligned.
static LLVMValueRef masked_load_a(tj_emit_t* em, LLVMTypeRef vt,
                                  LLVMValueRef ptr, LLVMValueRef mask,
                                  int32_t align) {
  LLVMTypeRef types[2] = {vt, em->t_ptr};
  LLVMValueRef args[4] = {ptr, i32c(em, align), mask, LLVMConstNull(vt)};
  return tj_emit_intrinsic(em, "llvm.masked.load", types, 2, args, 4);
}

static LLVMValueRef masked_gather_a(tj_emit_t* em, LLVMTypeRef vt,
                                    LLVMValueRef ptrs, LLVMValueRef mask,
                                    int32_t align) {
  LLVMTypeRef types[2] = {vt, LLVMTypeOf(ptrs)};
  LLVMValueRef args[4] = {ptrs, i32c(em, align), mask, LLVMConstNull(vt)};
  return tj_emit_intrinsic(em, "llvm.masked.gather", types, 2, args, 4);
}

//===--- operands of f32, f16 or bf16 ---===//
//
// A and B may hold f16 or bf16 (tj_kir_t.allow_half_gemm). Wherever the
// template reads them (packing, the in-place microkernels) the values are
// widened to f32 exactly (bf16: a 16-bit shift; f16: vcvtph2ps with F16C),
// and everything after that is the f32 template. With avx512bf16 a bf16
// GEMM instead packs bf16 pairs for vdpbf16ps (the "dot" path below).

static int32_t op_bytes(tj_dtype_t dt) { return dt == TJ_DTYPE_F32 ? 4 : 2; }

// Element |count| of an operand of |dt| from |ptr|.
static LLVMValueRef gep_op(tj_emit_t* em, tj_dtype_t dt, LLVMValueRef ptr,
                           LLVMValueRef count) {
  return LLVMBuildGEP2(em->b, tj_emit_memory_type(em, dt), ptr, &count, 1, "");
}

// |w| consecutive operand elements at |ptr| as <w x float>; lanes off in
// |mask| (NULL: none) read as 0 and are not accessed.
static LLVMValueRef load_op_vec(tj_emit_t* em, tj_dtype_t dt, int32_t w,
                                LLVMValueRef ptr, LLVMValueRef mask) {
  LLVMTypeRef vt = LLVMVectorType(tj_emit_memory_type(em, dt), (unsigned)w);
  LLVMValueRef v;
  if (mask) {
    v = masked_load_a(em, vt, ptr, mask, op_bytes(dt));
  } else {
    v = LLVMBuildLoad2(em->b, vt, ptr, "b");
    LLVMSetAlignment(v, (unsigned)op_bytes(dt));
  }
  return tj_emit_widen(em, dt, v);
}

// The operand elements at the |w| pointers |ptrs| as <w x float>.
static LLVMValueRef gather_op_vec(tj_emit_t* em, tj_dtype_t dt, int32_t w,
                                  LLVMValueRef ptrs, LLVMValueRef mask) {
  LLVMTypeRef vt = LLVMVectorType(tj_emit_memory_type(em, dt), (unsigned)w);
  return tj_emit_widen(em, dt,
                       masked_gather_a(em, vt, ptrs, mask, op_bytes(dt)));
}

//===--- quantized B (qfold, issue 17) ---===//
//
// A B of quantized weights (tj_kir_bq_t) is dequantized where it is read:
// by the B packing of the packed path (into the usual f32 panels) and by
// the in-place microkernels of the small-M path, so the weight crosses
// memory as 1 byte (int8) or half a byte (int4) per element instead of 4.
// Each value is (q - zero) * scale: q - zero is an exact integer and the
// product one f32 rounding, as the reference's dequantize computes it, so
// the sums differ from the unfolded graph's only by the order of their
// additions.

typedef struct bq_read_t {
  int32_t bits;  // 8 or 4
  bool int4_signed;
  tj_dtype_t qdt;  // i8 or u8
} bq_read_t;

// |w| bytes (or, for int4, the |w| nibbles of w / 2 bytes) at |ptr| as
// <w x i32>; lanes off in |mask| (NULL: none) read as 0.
static LLVMValueRef bq_ints(tj_emit_t* em, const bq_read_t* r, int32_t w,
                            LLVMValueRef ptr, LLVMValueRef mask, bool zero) {
  LLVMTypeRef iv = LLVMVectorType(em->t_i32, (unsigned)w);
  if (r->bits == 8 || zero) {
    // Zero points are unpacked (a byte each) for int4 too.
    LLVMTypeRef bt = LLVMVectorType(em->t_i8, (unsigned)w);
    LLVMValueRef v;
    if (mask) {
      v = masked_load_a(em, bt, ptr, mask, 1);
    } else {
      v = LLVMBuildLoad2(em->b, bt, ptr, "q");
      LLVMSetAlignment(v, 1);
    }
    bool sign = zero && r->bits == 4 ? r->int4_signed : r->qdt == TJ_DTYPE_I8;
    return sign ? LLVMBuildSExt(em->b, v, iv, "")
                : LLVMBuildZExt(em->b, v, iv, "");
  }
  const int32_t h = w / 2;
  LLVMTypeRef ht = LLVMVectorType(em->t_i8, (unsigned)h);
  LLVMValueRef v;
  if (mask) {
    // Byte i holds lanes 2i and 2i + 1: valid when lane 2i is.
    LLVMValueRef idx[32];
    for (int32_t i = 0; i < h; ++i) idx[i] = i32c(em, 2 * i);
    LLVMValueRef bm =
        LLVMBuildShuffleVector(em->b, mask, LLVMGetUndef(LLVMTypeOf(mask)),
                               LLVMConstVector(idx, (unsigned)h), "");
    v = masked_load_a(em, ht, ptr, bm, 1);
  } else {
    v = LLVMBuildLoad2(em->b, ht, ptr, "q4");
    LLVMSetAlignment(v, 1);
  }
  LLVMTypeRef hi32 = LLVMVectorType(em->t_i32, (unsigned)h);
  LLVMValueRef x = LLVMBuildZExt(em->b, v, hi32, "");
  LLVMValueRef lo = LLVMBuildAnd(
      em->b, x, tj_emit_splat(em, LLVMConstInt(em->t_i32, 15, 0), h), "");
  LLVMValueRef hi = LLVMBuildLShr(
      em->b, x, tj_emit_splat(em, LLVMConstInt(em->t_i32, 4, 0), h), "");
  LLVMValueRef idx[64];
  for (int32_t i = 0; i < h; ++i) {
    idx[2 * i] = i32c(em, i);
    idx[2 * i + 1] = i32c(em, h + i);
  }
  LLVMValueRef q = LLVMBuildShuffleVector(
      em->b, lo, hi, LLVMConstVector(idx, (unsigned)w), "");
  if (r->int4_signed) {
    // [0, 15] bits as [-8, 7]: (x ^ 8) - 8.
    LLVMValueRef eight = tj_emit_splat(em, LLVMConstInt(em->t_i32, 8, 0), w);
    q = LLVMBuildSub(em->b, LLVMBuildXor(em->b, q, eight, ""), eight, "");
  }
  return q;
}

// The dequantized B columns [col, col + w) of one row as <w x float>: the
// row's bytes at |qrow| (int4: half a byte a column; |col| even), the
// group's scale at |srow| and zero points at |zrow| (NULL: none).
static LLVMValueRef bq_load(tj_emit_t* em, const bq_read_t* r, int32_t w,
                            LLVMValueRef qrow, LLVMValueRef srow,
                            LLVMValueRef zrow, int64_t col, LLVMValueRef mask) {
  LLVMValueRef qp = gep_i8(em, qrow, i64c(em, r->bits == 4 ? col / 2 : col));
  LLVMValueRef q = bq_ints(em, r, w, qp, mask, false);
  if (zrow) {
    q = LLVMBuildSub(
        em->b, q,
        bq_ints(em, r, w, gep_i8(em, zrow, i64c(em, col)), mask, true), "");
  }
  LLVMTypeRef fv = LLVMVectorType(em->t_f32, (unsigned)w);
  LLVMValueRef sp = gep_f32(em, srow, i64c(em, col));
  LLVMValueRef sv;
  if (mask) {
    sv = masked_load_a(em, fv, sp, mask, 4);
  } else {
    sv = LLVMBuildLoad2(em->b, fv, sp, "scale");
    LLVMSetAlignment(sv, 4);
  }
  return LLVMBuildFMul(em->b, LLVMBuildSIToFP(em->b, q, fv, ""), sv, "");
}

// The scale (or zero point) row of k row |kk|: |base| + (kk / group) *
// |ss| elements of |elem| (one row when |group| is 0).
static LLVMValueRef bq_group_row(tj_emit_t* em, LLVMTypeRef elem,
                                 LLVMValueRef base, LLVMValueRef ss,
                                 int64_t group, LLVMValueRef kk) {
  if (!group) return base;
  LLVMValueRef gi = LLVMBuildUDiv(em->b, kk, i64c(em, group), "");
  LLVMValueRef off = LLVMBuildMul(em->b, gi, ss, "");
  return LLVMBuildGEP2(em->b, elem, base, &off, 1, "");
}

//===--- the microkernel ---===//

// The options live in jit/emit_gemm.h (the attention template reuses the
// microkernel).
typedef tj_ukernel_opts_t ukernel_opts_t;

typedef struct ukernel_t {
  tj_emit_t* em;
  const ukernel_opts_t* o;
  LLVMTypeRef vt;
  unsigned valign;
  LLVMValueRef rowp[16], mask[16];
  LLVMValueRef a_next;  // prefetch_a_next: the next sliver's first row
  LLVMValueRef b, ldb, ka;
  LLVMValueRef rows;                      // b_rows: the i64 row offsets
  LLVMValueRef arows;                     // a_rows: A's k offsets (i64)
  LLVMValueRef bq_scale, bq_zero, bq_ss;  // qfold: the quantized B's tables
  LLVMValueRef bq_bmask[16];              // qfold, int4 pairs: the bytes' masks
  LLVMValueRef a_tail;  // a_inplace: <4 x i1>, the last quad's valid k
  // The last |scalars| values of each accumulator set are f32 scalars
  // (qfold: the rows' sums of x), not vectors.
  int32_t scalars;
} ukernel_t;

// One k-pair step of the dot microkernel: |brow| is the panel's row of
// pairs (nr 32-bit lanes), |koff| the pair's offset in each sliver row.
// vdpbf16ps adds a[2i] * b[2i] + a[2i+1] * b[2i+1] to f32 lane i: the
// products are exact in f32, but the instruction flushes bf16 denormal
// inputs and f32 denormal results to zero and rounds once per pair
// (round-to-nearest-even), so a dot path sum differs from the f32 FMA
// chain over widened values by about one f32 ulp per pair.
static void ukernel_step_dot(ukernel_t* u, LLVMValueRef brow, LLVMValueRef koff,
                             LLVMValueRef* acc) {
  tj_emit_t* em = u->em;
  LLVMBuilderRef b = em->b;
  const int32_t w = em->target.lanes, nv = u->o->nr / w;
  LLVMTypeRef pairs =
      LLVMVectorType(LLVMBFloatTypeInContext(em->ctx), (unsigned)(2 * w));
  LLVMTypeRef iv = LLVMVectorType(em->t_i32, (unsigned)w);
  LLVMValueRef bvec[16], splat[16];
  for (int32_t v = 0; v < nv; ++v) {
    LLVMValueRef bv = LLVMBuildLoad2(
        b, iv, gep_f32(em, brow, i64c(em, (int64_t)v * w)), "bpair");
    LLVMSetAlignment(bv, u->valign);
    bvec[v] = LLVMBuildBitCast(b, bv, pairs, "");
  }
  for (int32_t r = 0; r < u->o->mr; ++r) {
    LLVMValueRef av =
        LLVMBuildLoad2(b, em->t_i32, gep_f32(em, u->rowp[r], koff), "apair");
    LLVMSetAlignment(av, 4);
    splat[r] = LLVMBuildBitCast(b, tj_emit_splat(em, av, w), pairs, "");
  }
  for (int32_t r = 0; r < u->o->mr; ++r) {
    for (int32_t v = 0; v < nv; ++v) {
      LLVMValueRef args[3] = {acc[r * nv + v], splat[r], bvec[v]};
      acc[r * nv + v] = tj_emit_intrinsic(
          em, "llvm.x86.avx512bf16.dpbf16ps.512", NULL, 0, args, 3);
    }
  }
}

// One group step of the integer microkernel (issue 17): |brow| is the
// panel's row of groups (nr 32-bit lanes), |koff| the group's offset in
// each sliver row. Pairs: pmaddwd adds a0*b0 + a1*b1 of i16 (exact: the
// values are 8-bit) into each i32 lane. Quads: vpdpbusd adds four u8 x s8
// products (exact, no intermediate saturation) into each i32 lane; the
// sums wrap as i32 does. Quads without VNNI (a B of 7-bit constants,
// tj_kir_t.b_int7): vpmaddubsw sums the u8 x s8 products two by two into
// i16 (|a0*b0 + a1*b1| <= 255 * 64 * 2 = 32640 for b in [-64, 63]: its
// saturation never happens) and vpmaddwd by ones adds those pairs into the
// i32 lane, the same quad sum with two instructions instead of one.
static void ukernel_step_int(ukernel_t* u, LLVMValueRef brow, LLVMValueRef kk,
                             LLVMValueRef koff, LLVMValueRef* acc) {
  tj_emit_t* em = u->em;
  LLVMBuilderRef b = em->b;
  const int32_t w = em->target.lanes, nv = u->o->nr / w;
  LLVMTypeRef iv = LLVMVectorType(em->t_i32, (unsigned)w);
  LLVMTypeRef hv = LLVMVectorType(em->t_i16, (unsigned)(2 * w));
  bool quads = u->o->igroup == 4;
  bool maddubs = quads && !em->target.vnni;
  const char* madd = w == 16  ? "llvm.x86.avx512.pmaddw.d.512"
                     : w == 8 ? "llvm.x86.avx2.pmadd.wd"
                              : "llvm.x86.sse2.pmadd.wd";
  const char* fn = !quads    ? madd
                   : maddubs ? (w == 16 ? "llvm.x86.avx512.pmaddubs.w.512"
                                        : "llvm.x86.avx2.pmadd.ub.sw")
                   : w == 16 ? "llvm.x86.avx512.vpdpbusd.512"
                             : "llvm.x86.avx512.vpdpbusd.256";
  LLVMTypeRef bytes = LLVMVectorType(em->t_i8, (unsigned)(4 * w));
  LLVMValueRef ones =
      maddubs ? tj_emit_splat(em, LLVMConstInt(em->t_i16, 1, 0), 2 * w) : NULL;
  LLVMValueRef bvec[16], splat[16];
  for (int32_t v = 0; v < nv; ++v) {
    LLVMValueRef bv = LLVMBuildLoad2(
        b, iv, gep_f32(em, brow, i64c(em, (int64_t)v * w)), "bgroup");
    LLVMSetAlignment(bv, u->valign);
    bvec[v] = quads ? bv : LLVMBuildBitCast(b, bv, hv, "");
  }
  for (int32_t r = 0; r < u->o->mr; ++r) {
    LLVMValueRef av;
    if (u->o->a_inplace) {
      // The quad's 4 bytes of row r, in place (see tj_ukernel_opts_t).
      LLVMValueRef at =
          gep_i8(em, u->rowp[r], LLVMBuildShl(b, kk, i64c(em, 2), ""));
      if (u->a_tail) {
        LLVMTypeRef qt = LLVMVectorType(em->t_i8, 4);
        av = LLVMBuildBitCast(b, masked_load_a(em, qt, at, u->a_tail, 1),
                              em->t_i32, "");
      } else {
        av = LLVMBuildLoad2(b, em->t_i32, at, "aquad");
        LLVMSetAlignment(av, 1);
      }
      if (u->o->a_flip) {
        av = LLVMBuildXor(b, av, LLVMConstInt(em->t_i32, 0x80808080u, 0), "");
      }
    } else {
      av =
          LLVMBuildLoad2(b, em->t_i32, gep_f32(em, u->rowp[r], koff), "agroup");
      LLVMSetAlignment(av, 4);
    }
    splat[r] = tj_emit_splat(em, av, w);
    if (!quads) splat[r] = LLVMBuildBitCast(b, splat[r], hv, "");
  }
  for (int32_t r = 0; r < u->o->mr; ++r) {
    for (int32_t v = 0; v < nv; ++v) {
      if (maddubs) {
        LLVMValueRef ub[2] = {LLVMBuildBitCast(b, splat[r], bytes, ""),
                              LLVMBuildBitCast(b, bvec[v], bytes, "")};
        LLVMValueRef wd[2] = {tj_emit_intrinsic(em, fn, NULL, 0, ub, 2), ones};
        acc[r * nv + v] =
            LLVMBuildAdd(b, acc[r * nv + v],
                         tj_emit_intrinsic(em, madd, NULL, 0, wd, 2), "");
      } else if (quads) {
        LLVMValueRef args[3] = {acc[r * nv + v], splat[r], bvec[v]};
        acc[r * nv + v] = tj_emit_intrinsic(em, fn, NULL, 0, args, 3);
      } else {
        LLVMValueRef args[2] = {splat[r], bvec[v]};
        acc[r * nv + v] =
            LLVMBuildAdd(b, acc[r * nv + v],
                         tj_emit_intrinsic(em, fn, NULL, 0, args, 2), "");
      }
    }
  }
}

//===--- the quantized-B microkernel (qfold, issue 17) ---===//
//
// The in-place microkernels of an int4 B factor the scale out of each
// group of k rows, as ggml's dot products do:
//   tile[r][c] += s[g][c] * (sum_{k in g} x[r][k] * q[k][c]
//                            - z[g][c] * sum_{k in g} x[r][k])
// so that the K loop converts each weight to f32 and multiplies it by the
// activation, nothing more: no scale load and multiply per weight (the
// scale changes once per group of 32-128 rows, per channel not at all),
// no zero point per weight. At each group's end the group's sums are
// scaled into the tile (on the stack, in L1). The q * x products are the
// reference's (q - z) * s * x up to f32 reassociation.
//
// int4 B: 2w columns are w bytes, loaded and widened to one i32 lane each
// (vpmovzxbd/vpmovsxbd); the low nibbles are the even columns and the high
// ones the odd columns, two vectors accumulated as they come (even, odd)
// rather than interleaved into column order per k row: the accumulators
// of a pair are put back in column order once per group, by two shuffles.
// Signed nibbles are sign-extended by shifts ((b << 28) >> 28 for the low
// one; the high one is the sign-extended byte >> 4). A strip of an odd
// number of vectors reads its last vector in column order (bq_ints).
// 4096 x 4096 at M = 1 here: 1.2-1.4 -> 0.38-0.45 ms, f32 3.3 ms.
//
// int8 B keeps the dequantize per weight (bq_load in ukernel_step): the
// same factoring made M = 1-3 faster but M >= 4 (64-column strips, one
// 4096-byte row per k step) 2x slower here, for a reason not found yet.

// Whether vector |v| of a strip of |nv| starts an int4 pair (v, v + 1).
static bool bq_pair(const ukernel_t* u, int32_t v, int32_t nv) {
  return u->o->bq_bits == 4 && v % 2 == 0 && v + 1 < nv;
}

// One k step of the quantized-B microkernel: |acc| holds mr * nv sums
// (pairs in (even, odd) order) and, with zero points, one more per row:
// that row's sum of x (a scalar).
static void ukernel_step_bq(ukernel_t* u, LLVMValueRef kk, LLVMValueRef* acc) {
  tj_emit_t* em = u->em;
  LLVMBuilderRef b = em->b;
  const int32_t w = em->target.lanes, nv = u->o->nr / w, mr = u->o->mr;
  const tj_dtype_t adt = u->o->a_dtype;
  const bq_read_t r = {u->o->bq_bits, u->o->bq_int4_signed, u->o->bq_qdt};
  LLVMTypeRef iv = LLVMVectorType(em->t_i32, (unsigned)w);
  LLVMTypeRef bv8 = LLVMVectorType(em->t_i8, (unsigned)w);
  LLVMValueRef brow = gep_i8(em, u->b, LLVMBuildMul(b, kk, u->ldb, ""));
  LLVMValueRef koff = LLVMBuildMul(b, kk, u->ka, "");
  {
    // The strip's row BQ_AHEAD rows further on, into L1: the rows are ldb
    // bytes apart (half a page or more for a wide weight), which the
    // hardware prefetchers do not follow (4096 x 4096 int4 at M = 1 here:
    // 0.55 -> 0.38-0.45 ms).
    LLVMValueRef ahead =
        gep_i8(em, brow, LLVMBuildMul(b, i64c(em, BQ_AHEAD), u->ldb, ""));
    LLVMTypeRef pt = em->t_ptr;
    int64_t row_bytes = (int64_t)u->o->nr * u->o->bq_bits / 8;
    for (int64_t off = 0; off < row_bytes; off += 64) {
      LLVMValueRef args[4] = {gep_i8(em, ahead, i64c(em, off)), i32c(em, 0),
                              i32c(em, 3), i32c(em, 1)};
      tj_emit_intrinsic(em, "llvm.prefetch", &pt, 1, args, 4);
    }
  }
  LLVMValueRef splat[16];
  for (int32_t row = 0; row < mr; ++row) {
    LLVMValueRef av = LLVMBuildLoad2(b, tj_emit_memory_type(em, adt),
                                     gep_op(em, adt, u->rowp[row], koff), "a");
    LLVMSetAlignment(av, (unsigned)op_bytes(adt));
    LLVMValueRef x = tj_emit_widen(em, adt, av);
    splat[row] = tj_emit_splat(em, x, w);
    if (u->o->bq_zero) {
      acc[mr * nv + row] = LLVMBuildFAdd(b, acc[mr * nv + row], x, "xsum");
    }
  }
  LLVMTypeRef t = u->vt;
  const char* fma = em->target.has_fma ? "llvm.fma" : "llvm.fmuladd";
  for (int32_t v = 0; v < nv;) {
    LLVMValueRef q[2];
    int32_t n = 1;
    if (bq_pair(u, v, nv)) {
      LLVMValueRef p = gep_i8(em, brow, i64c(em, (int64_t)v * w / 2));
      LLVMValueRef bytes;
      if (u->o->masked) {
        bytes = masked_load_a(em, bv8, p, u->bq_bmask[v], 1);
      } else {
        bytes = LLVMBuildLoad2(b, bv8, p, "q4");
        LLVMSetAlignment(bytes, 1);
      }
      LLVMValueRef lo, hi;
      if (r.int4_signed) {
        LLVMValueRef x = LLVMBuildSExt(b, bytes, iv, "");
        LLVMValueRef c28 = tj_emit_iconst(iv, 28);
        lo = LLVMBuildAShr(b, LLVMBuildShl(b, x, c28, ""), c28, "");
        hi = LLVMBuildAShr(b, x, tj_emit_iconst(iv, 4), "");
      } else {
        LLVMValueRef x = LLVMBuildZExt(b, bytes, iv, "");
        lo = LLVMBuildAnd(b, x, tj_emit_iconst(iv, 15), "");
        hi = LLVMBuildLShr(b, x, tj_emit_iconst(iv, 4), "");
      }
      q[0] = LLVMBuildSIToFP(b, lo, u->vt, "");
      q[1] = LLVMBuildSIToFP(b, hi, u->vt, "");
      n = 2;
    } else {
      int64_t col = (int64_t)v * w;
      LLVMValueRef p = gep_i8(em, brow, i64c(em, r.bits == 4 ? col / 2 : col));
      q[0] = LLVMBuildSIToFP(
          b, bq_ints(em, &r, w, p, u->o->masked ? u->mask[v] : NULL, false),
          u->vt, "");
    }
    // Each pair right before its FMAs: a strip of 16 vectors and their
    // pairs all live at once would not fit beside the accumulators.
    for (int32_t i = 0; i < n; ++i) {
      for (int32_t row = 0; row < mr; ++row) {
        LLVMValueRef args[3] = {splat[row], q[i], acc[row * nv + v + i]};
        acc[row * nv + v + i] = tj_emit_intrinsic(em, fma, &t, 1, args, 3);
      }
    }
    v += n;
  }
}

// One k step on accumulator set |acc| (mr * nv values, updated).
static void ukernel_step(ukernel_t* u, LLVMValueRef kk, LLVMValueRef* acc) {
  if (u->o->bq_bits == 4) {
    ukernel_step_bq(u, kk, acc);
    return;
  }
  tj_emit_t* em = u->em;
  LLVMBuilderRef b = em->b;
  const int32_t w = em->target.lanes, nv = u->o->nr / w;
  const tj_dtype_t adt = u->o->a_dtype, bdt = u->o->b_dtype;
  LLVMValueRef brow;
  if (u->rows) {
    LLVMValueRef ro = LLVMBuildLoad2(
        b, em->t_i64, LLVMBuildGEP2(b, em->t_i64, u->rows, &kk, 1, ""), "row");
    LLVMSetAlignment(ro, 8);
    brow = gep_op(em, bdt, u->b, ro);
  } else {
    brow = gep_op(em, bdt, u->b, LLVMBuildMul(b, kk, u->ldb, ""));
  }
  if (u->o->prefetch_next) {
    // The same row of the next strip, into L2 (see ukernel_opts_t).
    LLVMTypeRef pt = em->t_ptr;
    for (int32_t off = u->o->nr; off < 2 * u->o->nr;
         off += 64 / op_bytes(bdt)) {
      LLVMValueRef args[4] = {gep_op(em, bdt, brow, i64c(em, off)), i32c(em, 0),
                              i32c(em, 2), i32c(em, 1)};
      tj_emit_intrinsic(em, "llvm.prefetch", &pt, 1, args, 4);
    }
  }
  LLVMValueRef koff;
  if (u->arows) {
    koff = LLVMBuildLoad2(
        b, em->t_i64, LLVMBuildGEP2(b, em->t_i64, u->arows, &kk, 1, ""), "ak");
    LLVMSetAlignment(koff, 8);
  } else {
    koff = LLVMBuildMul(b, kk, u->ka, "");
  }
  LLVMValueRef splat[16];
  // qfold, int8: this row's scale and zero point row.
  bq_read_t bqr = {u->o->bq_bits, u->o->bq_int4_signed, u->o->bq_qdt};
  LLVMValueRef srow = NULL, zrow = NULL;
  if (bqr.bits) {
    srow =
        bq_group_row(em, em->t_f32, u->bq_scale, u->bq_ss, u->o->bq_group, kk);
    if (u->o->bq_zero) {
      zrow =
          bq_group_row(em, em->t_i8, u->bq_zero, u->bq_ss, u->o->bq_group, kk);
    }
  }
  if (u->o->dot) {
    ukernel_step_dot(u, brow, koff, acc);
    return;
  }
  if (u->o->igroup) {
    ukernel_step_int(u, brow, kk, koff, acc);
    return;
  }
  if (u->a_next) {
    // Step kk's share of the next sliver: mr elements a step cover its mr
    // rows of kc elements in the call's kc steps.
    LLVMTypeRef pt = em->t_ptr;
    LLVMValueRef args[4] = {
        gep_op(em, adt, u->a_next, LLVMBuildMul(b, kk, i64c(em, u->o->mr), "")),
        i32c(em, 0), i32c(em, 2), i32c(em, 1)};
    tj_emit_intrinsic(em, "llvm.prefetch", &pt, 1, args, 4);
  }
  for (int32_t r = 0; r < u->o->mr; ++r) {
    LLVMValueRef av = LLVMBuildLoad2(b, tj_emit_memory_type(em, adt),
                                     gep_op(em, adt, u->rowp[r], koff), "a");
    LLVMSetAlignment(av, (unsigned)op_bytes(adt));
    splat[r] = tj_emit_splat(em, tj_emit_widen(em, adt, av), w);
  }
  LLVMTypeRef t = u->vt;
  const char* fma = em->target.has_fma ? "llvm.fma" : "llvm.fmuladd";
  if (u->o->direct && u->o->mr < nv) {
    // Each B vector right before its FMAs, every row's broadcast live: the
    // in-place tiles are up to 4 panels wide, and all B vectors of a step
    // live at once would not fit beside the accumulators. (Taller tiles
    // hold fewer B vectors than broadcasts: the order below.)
    for (int32_t v = 0; v < nv; ++v) {
      LLVMValueRef bm = u->o->masked ? u->mask[v] : NULL;
      LLVMValueRef bv =
          bqr.bits ? bq_load(em, &bqr, w, brow, srow, zrow, (int64_t)v * w, bm)
                   : load_op_vec(
                         em, bdt, w,
                         gep_op(em, bdt, brow, i64c(em, (int64_t)v * w)), bm);
      for (int32_t r = 0; r < u->o->mr; ++r) {
        LLVMValueRef args[3] = {splat[r], bv, acc[r * nv + v]};
        acc[r * nv + v] = tj_emit_intrinsic(em, fma, &t, 1, args, 3);
      }
    }
    return;
  }
  LLVMValueRef bvec[16];
  for (int32_t v = 0; v < nv; ++v) {
    LLVMValueRef p = gep_op(em, bdt, brow, i64c(em, (int64_t)v * w));
    if (bqr.bits) {
      bvec[v] = bq_load(em, &bqr, w, brow, srow, zrow, (int64_t)v * w,
                        u->o->masked ? u->mask[v] : NULL);
    } else if (u->o->masked || bdt != TJ_DTYPE_F32) {
      bvec[v] = load_op_vec(em, bdt, w, p, u->o->masked ? u->mask[v] : NULL);
    } else {
      bvec[v] = LLVMBuildLoad2(b, u->vt, p, "b");
      LLVMSetAlignment(bvec[v], u->o->direct ? 4 : u->valign);
    }
  }
  for (int32_t r = 0; r < u->o->mr; ++r) {
    for (int32_t v = 0; v < nv; ++v) {
      LLVMValueRef args[3] = {splat[r], bvec[v], acc[r * nv + v]};
      acc[r * nv + v] = tj_emit_intrinsic(em, fma, &t, 1, args, 3);
    }
  }
}

// Marks the loop whose latch is |br| "llvm.loop.unroll.disable": the
// in-place microkernels come in a dozen variants, and unrolling each K loop
// (which their FMAs do not need) made them most of the kernel's compile
// time.
static void no_unroll(tj_emit_t* em, LLVMValueRef br) {
  static const char kDisable[] = "llvm.loop.unroll.disable";
  LLVMMetadataRef tmp = LLVMTemporaryMDNode(em->ctx, NULL, 0);
  LLVMMetadataRef what[1] = {
      LLVMMDStringInContext2(em->ctx, kDisable, sizeof(kDisable) - 1)};
  LLVMMetadataRef ops[2] = {tmp, LLVMMDNodeInContext2(em->ctx, what, 1)};
  LLVMMetadataRef loop = LLVMMDNodeInContext2(em->ctx, ops, 2);
  LLVMMetadataReplaceAllUsesWith(tmp, loop);  // a loop id refers to itself
  LLVMSetMetadata(br, LLVMGetMDKindIDInContext(em->ctx, "llvm.loop", 9),
                  LLVMMetadataAsValue(em->ctx, loop));
}

// tj_emit_loop_end for a loop LLVM must not unroll (see the callers).
static void loop_end_no_unroll(tj_emit_t* em, tj_emit_loop_t* loop) {
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(em->b);
  tj_emit_loop_end(em, loop);
  no_unroll(em, LLVMGetBasicBlockTerminator(latch));
}

// for (k = k0; k < k1; k += n) one step on each of |n| accumulator sets
// (k1 - k0 must be a multiple of n). |acc| holds n sets of |per| values,
// replaced by the values after the loop.
static void ukernel_loop(ukernel_t* u, LLVMValueRef k0, LLVMValueRef k1,
                         int32_t n, int32_t per, LLVMValueRef* acc) {
  tj_emit_t* em = u->em;
  LLVMBuilderRef b = em->b;
  LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(b));
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(em->ctx, fn, "k");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(em->ctx, fn, "kdone");
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, k0, k1, ""), body, done);
  LLVMPositionBuilderAtEnd(b, body);
  LLVMValueRef kphi = LLVMBuildPhi(b, em->t_i64, "kk");
  LLVMValueRef phis[2 * 16 * 16 + 32], next[2 * 16 * 16 + 32];
  int32_t total = n * per;
  for (int32_t i = 0; i < total; ++i) {
    phis[i] =
        LLVMBuildPhi(b, i % per >= per - u->scalars ? em->t_f32 : u->vt, "acc");
    next[i] = phis[i];
  }
  for (int32_t c = 0; c < n; ++c) {
    ukernel_step(u, c ? LLVMBuildAdd(b, kphi, i64c(em, c), "") : kphi,
                 next + c * per);
  }
  LLVMValueRef knext = LLVMBuildAdd(b, kphi, i64c(em, n), "");
  LLVMBasicBlockRef body_end = LLVMGetInsertBlock(b);
  LLVMValueRef br = LLVMBuildCondBr(
      b, LLVMBuildICmp(b, LLVMIntSLT, knext, k1, ""), body, done);
  if (u->o->direct) no_unroll(em, br);
  LLVMAddIncoming(kphi, &k0, &pre, 1);
  LLVMAddIncoming(kphi, &knext, &body_end, 1);
  for (int32_t i = 0; i < total; ++i) {
    LLVMAddIncoming(phis[i], &acc[i], &pre, 1);
    LLVMAddIncoming(phis[i], &next[i], &body_end, 1);
  }
  LLVMPositionBuilderAtEnd(b, done);
  for (int32_t i = 0; i < total; ++i) {
    LLVMValueRef out =
        LLVMBuildPhi(b, i % per >= per - u->scalars ? em->t_f32 : u->vt, "out");
    LLVMAddIncoming(out, &acc[i], &pre, 1);
    LLVMAddIncoming(out, &next[i], &body_end, 1);
    acc[i] = out;
  }
}

// Marks |fn| nounwind and noinline, and with |deferrable| "tj-deferrable":
// only the small-M path calls the in-place microkernels, so the x86 JIT
// may compile them apart from the kernel, when a run first takes that
// path (jit/x86_jit.h, hot and cold parts).
static void add_attrs(tj_emit_t* em, LLVMValueRef fn, bool deferrable) {
  static const char* attrs[] = {"nounwind", "noinline"};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(attrs); ++i) {
    unsigned kind = LLVMGetEnumAttributeKindForName(attrs[i], strlen(attrs[i]));
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(em->ctx, kind, 0));
  }
  if (deferrable) {
    static const char kDeferrable[] = "tj-deferrable";
    LLVMAddAttributeAtIndex(
        fn, LLVMAttributeFunctionIndex,
        LLVMCreateStringAttribute(em->ctx, kDeferrable, sizeof(kDeferrable) - 1,
                                  "", 0));
  }
}

// The quantized-B microkernel's body (see ukernel_step_bq): the tile
// (kept with |accum|, else zeroed), then for each group of k rows the
// group's sums over its rows (chains as the float kernels), scaled into
// the tile. The tile's mr x nr floats are at |tile| with row stride |ld|.
static void ukernel_bq_body(ukernel_t* u, LLVMValueRef kc, LLVMValueRef tile,
                            LLVMValueRef ld, LLVMValueRef accum) {
  tj_emit_t* em = u->em;
  LLVMBuilderRef b = em->b;
  const ukernel_opts_t* o = u->o;
  const int32_t w = em->target.lanes, nv = o->nr / w, mr = o->mr;
  const int32_t per = mr * nv + (o->bq_zero ? mr : 0), chains = o->chains;
  const bq_read_t r = {o->bq_bits, o->bq_int4_signed, o->bq_qdt};
  const int64_t group = o->bq_group;
  LLVMValueRef zero = tj_emit_fconst(u->vt, 0.0);
  LLVMValueRef tp[16 * 16];
  for (int32_t row = 0; row < mr; ++row) {
    for (int32_t v = 0; v < nv; ++v) {
      LLVMValueRef p =
          gep_f32(em, tile,
                  LLVMBuildAdd(b, LLVMBuildMul(b, i64c(em, row), ld, ""),
                               i64c(em, (int64_t)v * w), ""));
      LLVMValueRef old = LLVMBuildLoad2(b, u->vt, p, "");
      LLVMSetAlignment(old, u->valign);
      LLVMSetAlignment(
          LLVMBuildStore(b, LLVMBuildSelect(b, accum, old, zero, ""), p),
          u->valign);
      tp[row * nv + v] = p;
    }
  }
  // for (gi = 0; gi < groups; ++gi): rows [gi * group, min(kc, (gi + 1) *
  // group)), or all of kc as one group (per channel).
  LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(b));
  LLVMValueRef groups = group ? ceil_div(em, kc, group) : i64c(em, 1);
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(em->ctx, fn, "group");
  LLVMBasicBlockRef done =
      LLVMAppendBasicBlockInContext(em->ctx, fn, "groups_done");
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, i64c(em, 0), groups, ""),
                  body, done);
  LLVMPositionBuilderAtEnd(b, body);
  LLVMValueRef gi = LLVMBuildPhi(b, em->t_i64, "gi");
  LLVMValueRef k0 = group ? LLVMBuildMul(b, gi, i64c(em, group), "") : gi;
  LLVMValueRef k1 =
      group ? tj_emit_min_i64(em, kc, LLVMBuildAdd(b, k0, i64c(em, group), ""))
            : kc;
  LLVMValueRef acc[2 * 16 * 16 + 32];
  u->scalars = o->bq_zero ? mr : 0;
  for (int32_t i = 0; i < chains * per; ++i) {
    acc[i] = i % per >= mr * nv ? LLVMConstReal(em->t_f32, 0.0) : zero;
  }
  if (chains > 1) {
    LLVMValueRef kmain = LLVMBuildSub(
        b, k1,
        LLVMBuildSRem(b, LLVMBuildSub(b, k1, k0, ""), i64c(em, chains), ""),
        "");
    ukernel_loop(u, k0, kmain, chains, per, acc);
    ukernel_loop(u, kmain, k1, 1, per, acc);
    for (int32_t c = 1; c < chains; ++c) {
      for (int32_t i = 0; i < per; ++i) {
        acc[i] = LLVMBuildFAdd(b, acc[i], acc[c * per + i], "");
      }
    }
  } else {
    ukernel_loop(u, k0, k1, 1, per, acc);
  }
  // The group's scale (and zero point) row.
  LLVMValueRef srow = u->bq_scale, zrow = u->bq_zero;
  if (group) {
    LLVMValueRef off = LLVMBuildMul(b, gi, u->bq_ss, "");
    srow = gep_f32(em, srow, off);
    zrow = gep_i8(em, zrow, off);
  }
  LLVMTypeRef t = u->vt;
  const char* fma = em->target.has_fma ? "llvm.fma" : "llvm.fmuladd";
  for (int32_t v = 0; v < nv; ++v) {
    LLVMValueRef mask = o->masked ? u->mask[v] : NULL;
    LLVMValueRef sp = gep_f32(em, srow, i64c(em, (int64_t)v * w));
    LLVMValueRef sv;
    if (mask) {
      sv = masked_load_a(em, u->vt, sp, mask, 4);
    } else {
      sv = LLVMBuildLoad2(b, u->vt, sp, "scale");
      LLVMSetAlignment(sv, 4);
    }
    LLVMValueRef nzf = NULL;  // -z as f32
    if (o->bq_zero) {
      LLVMValueRef z = bq_ints(
          em, &r, w, gep_i8(em, zrow, i64c(em, (int64_t)v * w)), mask, true);
      nzf = LLVMBuildFNeg(b, LLVMBuildSIToFP(b, z, u->vt, ""), "");
    }
    for (int32_t row = 0; row < mr; ++row) {
      LLVMValueRef d;
      if (bq_pair(u, v & ~1, nv)) {
        // Column order from the pair's (even, odd) sums.
        LLVMValueRef idx[64];
        const int32_t base = v % 2 ? w / 2 : 0;
        for (int32_t i = 0; i < w; ++i) {
          idx[i] = i32c(em, (i % 2 ? w : 0) + base + i / 2);
        }
        const int32_t a0 = row * nv + (v & ~1);
        d = LLVMBuildShuffleVector(b, acc[a0], acc[a0 + 1],
                                   LLVMConstVector(idx, (unsigned)w), "");
      } else {
        d = acc[row * nv + v];
      }
      if (nzf) {
        LLVMValueRef args[3] = {nzf, tj_emit_splat(em, acc[mr * nv + row], w),
                                d};
        d = tj_emit_intrinsic(em, fma, &t, 1, args, 3);
      }
      LLVMValueRef old = LLVMBuildLoad2(b, u->vt, tp[row * nv + v], "");
      LLVMSetAlignment(old, u->valign);
      LLVMValueRef args[3] = {d, sv, old};
      LLVMSetAlignment(
          LLVMBuildStore(b, tj_emit_intrinsic(em, fma, &t, 1, args, 3),
                         tp[row * nv + v]),
          u->valign);
    }
  }
  LLVMValueRef gnext = LLVMBuildAdd(b, gi, i64c(em, 1), "");
  LLVMBasicBlockRef body_end = LLVMGetInsertBlock(b);
  no_unroll(em,
            LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, gnext, groups, ""),
                            body, done));
  LLVMValueRef g0 = i64c(em, 0);
  LLVMAddIncoming(gi, &g0, &pre, 1);
  LLVMAddIncoming(gi, &gnext, &body_end, 1);
  LLVMPositionBuilderAtEnd(b, done);
}

// void ukernel(ptr a, i64 lda, i64 ka, ptr b, i64 ldb, i64 kc, i64 mr_valid,
//              ptr tile, i64 ld, i1 accumulate, i64 cols)
// tile[r*ld + c] (+)= sum_k a[r*lda + k*ka] * B(k, c), r < mr, c < nr, with
// B(k, c) = b[k*nr + c] (packed; ldb and cols unused) or b[k*ldb + c] for
// c < cols and 0 beyond (direct).
LLVMValueRef tj_emit_ukernel(tj_emit_t* em, const ukernel_opts_t* o) {
  const int32_t w = em->target.lanes;
  const int32_t mr = o->mr, nv = o->nr / w;
  char name[256];
  // The packed path's microkernel keeps the plain name (tests look for
  // it); the in-place ones are named by their row count.
  if (o->name) {
    snprintf(name, sizeof(name), "%s", o->name);
  } else if (o->direct) {
    snprintf(name, sizeof(name), "tj_ukernel_%s_d%d%s", em->k->name, mr,
             o->masked ? "_edge" : "");
  } else {
    snprintf(name, sizeof(name), "tj_ukernel_%s", em->k->name);
  }
  LLVMTypeRef params[14] = {em->t_ptr, em->t_i64, em->t_i64, em->t_ptr,
                            em->t_i64, em->t_i64, em->t_i64, em->t_ptr,
                            em->t_i64, em->t_i1,  em->t_i64, em->t_ptr,
                            em->t_ptr, em->t_i64};
  // qfold: a quantized B's scale, zero point and group stride.
  // b_rows: the row offsets' table; a_rows: A's k offsets and row starts.
  LLVMTypeRef fty = LLVMFunctionType(em->t_void, params,
                                     o->bq_bits  ? 14
                                     : o->a_rows ? 13
                                     : o->b_rows ? 12
                                                 : 11,
                                     0);
  LLVMValueRef fn = LLVMAddFunction(em->mod, name, fty);
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  add_attrs(em, fn, o->direct && !o->hot);
  LLVMValueRef a = LLVMGetParam(fn, 0), lda = LLVMGetParam(fn, 1),
               ka = LLVMGetParam(fn, 2), bp = LLVMGetParam(fn, 3),
               ldb = LLVMGetParam(fn, 4), kc = LLVMGetParam(fn, 5),
               mrv = LLVMGetParam(fn, 6), tile = LLVMGetParam(fn, 7),
               ld = LLVMGetParam(fn, 8), accum = LLVMGetParam(fn, 9),
               cols = LLVMGetParam(fn, 10);
  LLVMBuilderRef saved = em->b;
  LLVMBuilderRef b = LLVMCreateBuilderInContext(em->ctx);
  em->b = b;
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(em->ctx, fn, "entry");
  LLVMPositionBuilderAtEnd(b, entry);
  ukernel_t u;
  memset(&u, 0, sizeof(u));
  u.em = em;
  u.o = o;
  u.vt = LLVMVectorType(o->igroup ? em->t_i32 : em->t_f32, (unsigned)w);
  u.valign = (unsigned)w * 4;
  u.b = bp;
  u.ldb = o->direct ? ldb : i64c(em, o->panel_ld ? o->panel_ld : o->nr);
  u.ka = ka;
  if (o->b_rows) u.rows = LLVMGetParam(fn, 11);
  if (o->a_rows) u.arows = LLVMGetParam(fn, 11);
  if (o->bq_bits) {
    u.bq_scale = LLVMGetParam(fn, 11);
    u.bq_zero = LLVMGetParam(fn, 12);
    u.bq_ss = LLVMGetParam(fn, 13);
  }
  LLVMValueRef last = LLVMBuildSub(b, mrv, i64c(em, 1), "");
  for (int32_t r = 0; r < mr; ++r) {
    LLVMValueRef rr = tj_emit_min_i64(em, i64c(em, r), last);
    if (o->a_rows) {
      LLVMValueRef pix = LLVMGetParam(fn, 12);
      LLVMValueRef po = LLVMBuildLoad2(
          b, em->t_i64, LLVMBuildGEP2(b, em->t_i64, pix, &rr, 1, ""), "apix");
      LLVMSetAlignment(po, 8);
      u.rowp[r] = gep_op(em, o->a_dtype, a, po);
      continue;
    }
    u.rowp[r] = o->a_inplace
                    ? gep_i8(em, a, LLVMBuildMul(b, rr, lda, ""))
                    : gep_op(em, o->a_dtype, a, LLVMBuildMul(b, rr, lda, ""));
  }
  if (o->prefetch_a_next) {
    u.a_next = gep_op(em, o->a_dtype, a,
                      LLVMBuildMul(b, i64c(em, mr), lda, "next_sliver"));
  }
  if (o->masked) {
    for (int32_t v = 0; v < nv; ++v) {
      u.mask[v] = tj_emit_lane_mask(
          em, LLVMBuildSub(b, cols, i64c(em, (int64_t)v * w), ""), w);
    }
  }
  if (o->bq_bits == 4) {
    if (o->masked) {
      // An int4 pair's bytes: byte i holds columns 2i and 2i + 1.
      for (int32_t v = 0; v + 1 < nv; v += 2) {
        LLVMValueRef left = LLVMBuildSub(b, cols, i64c(em, (int64_t)v * w), "");
        u.bq_bmask[v] = tj_emit_lane_mask(
            em,
            LLVMBuildAShr(b, LLVMBuildAdd(b, left, i64c(em, 1), ""),
                          i64c(em, 1), ""),
            w);
      }
    }
    ukernel_bq_body(&u, kc, tile, ld, accum);
    LLVMBuildRetVoid(b);
    LLVMDisposeBuilder(b);
    em->b = saved;
    return fn;
  }
  const int32_t per = mr * nv, chains = o->chains;
  LLVMValueRef acc[2 * 16 * 16];
  LLVMValueRef zero =
      o->igroup ? LLVMConstNull(u.vt) : tj_emit_fconst(u.vt, 0.0);
  for (int32_t r = 0; r < mr; ++r) {
    for (int32_t v = 0; v < nv; ++v) {
      LLVMValueRef p =
          gep_f32(em, tile,
                  LLVMBuildAdd(b, LLVMBuildMul(b, i64c(em, r), ld, ""),
                               i64c(em, (int64_t)v * w), ""));
      LLVMValueRef old = LLVMBuildLoad2(b, u.vt, p, "");
      LLVMSetAlignment(old, u.valign);
      acc[r * nv + v] = LLVMBuildSelect(b, accum, old, zero, "");
    }
  }
  for (int32_t i = per; i < chains * per; ++i) acc[i] = zero;
  LLVMValueRef k0 = i64c(em, 0);
  if (chains > 1) {
    // kc rounded down to a multiple of the chains, then the rest on set 0.
    LLVMValueRef kmain =
        LLVMBuildSub(b, kc, LLVMBuildSRem(b, kc, i64c(em, chains), ""), "");
    ukernel_loop(&u, k0, kmain, chains, per, acc);
    ukernel_loop(&u, kmain, kc, 1, per, acc);
    for (int32_t c = 1; c < chains; ++c) {
      for (int32_t i = 0; i < per; ++i) {
        acc[i] = o->igroup ? LLVMBuildAdd(b, acc[i], acc[c * per + i], "")
                           : LLVMBuildFAdd(b, acc[i], acc[c * per + i], "");
      }
    }
  } else if (o->a_inplace) {
    // Whole quads in place, then the pass's last quad (when k is not a
    // multiple of 4) through a masked load: 0 or 1 more step.
    LLVMValueRef full = LLVMBuildUDiv(b, cols, i64c(em, 4), "");
    ukernel_loop(&u, k0, full, 1, per, acc);
    u.a_tail = tj_emit_lane_mask(
        em, LLVMBuildSub(b, cols, LLVMBuildShl(b, full, i64c(em, 2), ""), ""),
        4);
    ukernel_loop(&u, full, kc, 1, per, acc);
    u.a_tail = NULL;
  } else {
    ukernel_loop(&u, k0, kc, 1, per, acc);
  }
  if (o->corr) {
    // The panel's correction row (after its kc groups), on every row.
    LLVMValueRef crow = gep_f32(em, bp, LLVMBuildMul(b, kc, u.ldb, ""));
    for (int32_t v = 0; v < nv; ++v) {
      LLVMValueRef cv = LLVMBuildLoad2(
          b, u.vt, gep_f32(em, crow, i64c(em, (int64_t)v * w)), "corr");
      LLVMSetAlignment(cv, u.valign);
      for (int32_t r = 0; r < mr; ++r) {
        acc[r * nv + v] = LLVMBuildAdd(b, acc[r * nv + v], cv, "");
      }
    }
  }
  for (int32_t r = 0; r < mr; ++r) {
    for (int32_t v = 0; v < nv; ++v) {
      LLVMValueRef p =
          gep_f32(em, tile,
                  LLVMBuildAdd(b, LLVMBuildMul(b, i64c(em, r), ld, ""),
                               i64c(em, (int64_t)v * w), ""));
      LLVMSetAlignment(LLVMBuildStore(b, acc[r * nv + v], p), u.valign);
    }
  }
  LLVMBuildRetVoid(b);
  LLVMDisposeBuilder(b);
  em->b = saved;
  return fn;
}

//===--- the AMX microkernel (qgemm and bf16, issue 17) ---===//
//
// Where the CPU has AMX (tj_emit_target_t.amx) an integer GEMM whose K is
// a compile-time multiple of 64 multiplies on the tiles: C tiles of 16 x
// 16 i32 += A tile (16 rows x 64 bytes of k) . B tile (16 quad rows x 16
// columns: the VNNI4 quads the B packing already writes, one 64-byte tile
// row per panel row of 16 columns). The 8 tiles are 4 C tiles (a 16 x 64
// tile of C, one panel wide), the A tile, and 3 B tiles taken in turn.
// A is read in place (k-contiguous rows, row stride lda). The tdpb*d
// variants take each sign combination (s8 or u8 A, s8 or u8 B) exactly,
// so nothing is flipped and the panels carry no correction row. The
// multiple of 64 is what keeps the edges exact and in bounds without a
// second tile configuration: every k step is a whole A tile of the row
// and a whole B tile of the panel; rows past M are configured away (the
// configuration's row count is the call's valid rows), columns past N are
// the zero padding of the last panel. Other K take the vpdpbusd kernel.
//
// A bf16 x bf16 GEMM runs the same kernel with tdpbf16ps where the CPU
// also has amx-bf16 (tj_emit_target_t.amx_bf16): a 64-byte tile row is 32
// bf16 of k, and the dot path's B panels ([kc/2][64] lanes of a bf16
// pair) are AMX's VNNI2 B layout, 16 pair rows a tile. K must then be a
// compile-time multiple of 32, for the same reason; other K take
// vdpbf16ps. C tiles are f32 (as the dot path's accumulators): tdpbf16ps
// adds each product of a pair to the f32 lane in turn (products of bf16
// are exact in f32), rounding to nearest even whatever MXCSR says, with
// bf16 denormal inputs read as zero and denormal results flushed, as
// vdpbf16ps does (see ukernel_step_dot).
//
// void amx_ukernel(ptr a, i64 lda, i64 ka, ptr b, i64 ldb, i64 kq,
//                  i64 mr_valid, ptr tile, i64 ld, i1 accumulate, i64 cols)
// as tj_emit_ukernel's packed form with mr 16 and nr 64; kq (the panel's
// 32-bit rows: quads, or bf16 pairs) is a multiple of 16; lda is in A's
// elements; ldb is the B panel's row stride in 32-bit lanes (64, packed
// per run or prepacked); ka and cols are unused.

enum { kAmxRows = 16, kAmxCols = 64 };

static LLVMValueRef i8c(tj_emit_t* em, int64_t v) {
  return LLVMConstInt(em->t_i8, (unsigned long long)v, 0);
}

static void amx_call(tj_emit_t* em, const char* name, LLVMValueRef* args,
                     unsigned n) {
  tj_emit_intrinsic(em, name, NULL, 0, args, n);
}

static LLVMValueRef emit_amx_ukernel(tj_emit_t* em, tj_dtype_t adt,
                                     tj_dtype_t bdt) {
  char name[256];
  snprintf(name, sizeof(name), "tj_ukernel_%s", em->k->name);
  LLVMTypeRef params[11] = {em->t_ptr, em->t_i64, em->t_i64, em->t_ptr,
                            em->t_i64, em->t_i64, em->t_i64, em->t_ptr,
                            em->t_i64, em->t_i1,  em->t_i64};
  LLVMTypeRef fty = LLVMFunctionType(em->t_void, params, 11, 0);
  LLVMValueRef fn = LLVMAddFunction(em->mod, name, fty);
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  add_attrs(em, fn, false);
  LLVMValueRef a = LLVMGetParam(fn, 0), lda = LLVMGetParam(fn, 1),
               bp = LLVMGetParam(fn, 3), ldb = LLVMGetParam(fn, 4),
               kq = LLVMGetParam(fn, 5), mrv = LLVMGetParam(fn, 6),
               tile = LLVMGetParam(fn, 7), ld = LLVMGetParam(fn, 8),
               accum = LLVMGetParam(fn, 9);
  // The loop and branch helpers build in em->fn (allocas in em->entry).
  LLVMBuilderRef saved = em->b;
  LLVMValueRef saved_fn = em->fn;
  LLVMBasicBlockRef saved_entry = em->entry;
  LLVMBuilderRef b = LLVMCreateBuilderInContext(em->ctx);
  em->b = b;
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(em->ctx, fn, "entry");
  em->fn = fn;
  em->entry = entry;
  LLVMPositionBuilderAtEnd(b, entry);
  // The tile configuration (palette 1): bytes per row (u16 at 16 + 2i) and
  // rows (u8 at 48 + i) of tiles 0-3 (C) and 4 (A): the call's valid rows;
  // tiles 5-7 (B): 16 rows. Every tile row is 64 bytes.
  LLVMTypeRef cfg_t = LLVMVectorType(em->t_i8, 64);
  LLVMValueRef cfg = LLVMBuildAlloca(b, cfg_t, "tilecfg");
  LLVMSetAlignment(cfg, 64);
  LLVMSetAlignment(LLVMBuildStore(b, LLVMConstNull(cfg_t), cfg), 64);
  LLVMBuildStore(b, i8c(em, 1), cfg);
  LLVMValueRef rows = LLVMBuildTrunc(b, mrv, em->t_i8, "");
  for (int32_t t = 0; t < 8; ++t) {
    LLVMValueRef colsb = gep_i8(em, cfg, i64c(em, 16 + 2 * t));
    LLVMSetAlignment(
        LLVMBuildStore(b, LLVMConstInt(em->t_i16, kAmxCols, 0), colsb), 2);
    LLVMBuildStore(b, t < 5 ? rows : i8c(em, kAmxRows),
                   gep_i8(em, cfg, i64c(em, 48 + t)));
  }
  LLVMValueRef cfg_arg[1] = {cfg};
  amx_call(em, "llvm.x86.ldtilecfg", cfg_arg, 1);
  // C tiles 0-3: columns 16c.. of the tile at |tile| (row stride ld i32).
  LLVMValueRef ldb_bytes = LLVMBuildMul(b, ld, i64c(em, 4), "");
  LLVMValueRef cptr[4];
  for (int32_t c = 0; c < 4; ++c) cptr[c] = gep_f32(em, tile, i64c(em, 16 * c));
  tj_emit_if_t load_c, zero_c;
  tj_emit_if_begin(em, &load_c, accum, "amx_load_c");
  for (int32_t c = 0; c < 4; ++c) {
    LLVMValueRef args[3] = {i8c(em, c), cptr[c], ldb_bytes};
    amx_call(em, "llvm.x86.tileloadd64", args, 3);
  }
  tj_emit_if_end(em, &load_c);
  tj_emit_if_begin(em, &zero_c, LLVMBuildNot(b, accum, ""), "amx_zero_c");
  for (int32_t c = 0; c < 4; ++c) {
    LLVMValueRef args[1] = {i8c(em, c)};
    amx_call(em, "llvm.x86.tilezero", args, 1);
  }
  tj_emit_if_end(em, &zero_c);
  // tdpb[s|u][s|u]d: A's signedness, then B's; tdpbf16ps for bf16.
  const char* dp =
      adt == TJ_DTYPE_BF16 ? "llvm.x86.tdpbf16ps"
      : adt == TJ_DTYPE_I8
          ? (bdt == TJ_DTYPE_I8 ? "llvm.x86.tdpbssd" : "llvm.x86.tdpbsud")
          : (bdt == TJ_DTYPE_I8 ? "llvm.x86.tdpbusd" : "llvm.x86.tdpbuud");
  LLVMValueRef lda_bytes =
      LLVMBuildMul(b, lda, i64c(em, adt == TJ_DTYPE_BF16 ? 2 : 1), "");
  // A panel row: 64 columns' quads (ldb).
  LLVMValueRef panel_row = LLVMBuildMul(b, ldb, i64c(em, 4), "");  // bytes
  tj_emit_loop_t kl;
  LLVMValueRef step = tj_emit_loop_begin(
      em, &kl, i64c(em, 0), LLVMBuildUDiv(b, kq, i64c(em, kAmxRows), ""),
      i64c(em, 1), "amx_k");
  LLVMValueRef a_args[3] = {
      i8c(em, 4), gep_i8(em, a, LLVMBuildMul(b, step, i64c(em, 64), "")),
      lda_bytes};
  amx_call(em, "llvm.x86.tileloadd64", a_args, 3);
  LLVMValueRef brow = gep_i8(
      em, bp,
      LLVMBuildMul(b, step, LLVMBuildMul(b, panel_row, i64c(em, kAmxRows), ""),
                   ""));
  for (int32_t c = 0; c < 4; ++c) {
    int64_t t = 5 + c % 3;
    LLVMValueRef b_args[3] = {i8c(em, t), gep_i8(em, brow, i64c(em, 64 * c)),
                              panel_row};
    amx_call(em, "llvm.x86.tileloadd64", b_args, 3);
    LLVMValueRef d_args[3] = {i8c(em, c), i8c(em, 4), i8c(em, t)};
    amx_call(em, dp, d_args, 3);
  }
  loop_end_no_unroll(em, &kl);
  for (int32_t c = 0; c < 4; ++c) {
    LLVMValueRef args[3] = {i8c(em, c), cptr[c], ldb_bytes};
    amx_call(em, "llvm.x86.tilestored64", args, 3);
  }
  // Back to the init state: a thread that leaves tiles in use makes every
  // context switch save and restore their 8 KiB.
  amx_call(em, "llvm.x86.tilerelease", NULL, 0);
  LLVMBuildRetVoid(b);
  LLVMDisposeBuilder(b);
  em->b = saved;
  em->fn = saved_fn;
  em->entry = saved_entry;
  return fn;
}

//===--- packing ---===//

// Packs rows [k_begin, k_end) of a B block whose column c of row k is at
// src[k*sk + c*sn] into panels dst[c / NR][k][c % NR] (|dst| at panel 0,
// panels kc rows long), with masked gathers of the |nlen| valid columns
// and zeros beyond (a B with unit stride along n takes pack_b_contiguous).
static void pack_b_rows(tj_emit_t* em, const tj_kir_gemm_schedule_t* s,
                        tj_dtype_t dt, LLVMValueRef src, LLVMValueRef sk,
                        LLVMValueRef sn, LLVMValueRef k_begin,
                        LLVMValueRef k_end, LLVMValueRef kc, LLVMValueRef nlen,
                        LLVMValueRef dst) {
  const int32_t w = em->target.lanes, nv = s->tile_n / w;
  tj_emit_loop_t panels;
  LLVMValueRef j =
      tj_emit_loop_begin(em, &panels, i64c(em, 0),
                         ceil_div(em, nlen, s->tile_n), i64c(em, 1), "panel");
  LLVMValueRef col0 = LLVMBuildMul(em->b, j, i64c(em, s->tile_n), "");
  LLVMValueRef cols = LLVMBuildSub(em->b, nlen, col0, "");
  LLVMValueRef src_j = gep_op(em, dt, src, LLVMBuildMul(em->b, col0, sn, ""));
  LLVMValueRef dst_j =
      gep_f32(em, dst, LLVMBuildMul(em->b, col0, kc, ""));  // j*NR*kc
  LLVMValueRef mask[16];
  LLVMValueRef offs = LLVMBuildMul(em->b, tj_emit_iota(em, em->t_i64, w),
                                   tj_emit_splat(em, sn, w), "");
  for (int32_t v = 0; v < nv; ++v) {
    mask[v] = tj_emit_lane_mask(
        em, LLVMBuildSub(em->b, cols, i64c(em, (int64_t)v * w), ""), w);
  }
  tj_emit_loop_t kl;
  LLVMValueRef kk =
      tj_emit_loop_begin(em, &kl, k_begin, k_end, i64c(em, 1), "pack_k");
  LLVMValueRef row = gep_op(em, dt, src_j, LLVMBuildMul(em->b, kk, sk, ""));
  LLVMValueRef out =
      gep_f32(em, dst_j, LLVMBuildMul(em->b, kk, i64c(em, s->tile_n), ""));
  for (int32_t v = 0; v < nv; ++v) {
    LLVMValueRef p = gep_op(
        em, dt, row, LLVMBuildMul(em->b, i64c(em, (int64_t)v * w), sn, ""));
    LLVMValueRef val =
        gather_op_vec(em, dt, w, gep_op(em, dt, p, offs), mask[v]);
    LLVMValueRef st =
        LLVMBuildStore(em->b, val, gep_f32(em, out, i64c(em, (int64_t)v * w)));
    LLVMSetAlignment(st, (unsigned)w * 4);
  }
  // Both loops stay loops (see emit_epilogue): the copy is bound by
  // memory, not by the loop's few instructions, and its unrolled copies
  // (8 k rows by 2 panels, twice over after unswitching) cost LLVM time.
  loop_end_no_unroll(em, &kl);
  loop_end_no_unroll(em, &panels);
}

// Packs a B block with unit stride along n (rows kc, columns nlen, row k
// at src[k*sk]) into panels dst[c / NR][k][c % NR], zero padded: k
// outermost, so that each row of the block is read as one contiguous run
// of nlen elements (nc * 4 bytes) and scattered to the panels, with the
// row PREFETCH_B_ROWS ahead prefetched. Rows are usually a whole row of B
// apart (N * 4 bytes, often a multiple of 4 KiB): panel by panel, each
// row gave one 64-byte line at a time at that stride, which the hardware
// prefetchers do not follow (on AVX2, NR = 16 floats: one line a row).
// Only the last, partial panel is masked.
static void pack_b_contiguous(tj_emit_t* em, const tj_kir_gemm_schedule_t* s,
                              tj_dtype_t dt, LLVMValueRef src, LLVMValueRef sk,
                              LLVMValueRef kc, LLVMValueRef nlen,
                              LLVMValueRef dst) {
  const int32_t w = em->target.lanes, nv = s->tile_n / w;
  LLVMValueRef full =
      LLVMBuildUDiv(em->b, nlen, i64c(em, s->tile_n), "full_panels");
  LLVMValueRef col_rest = LLVMBuildMul(em->b, full, i64c(em, s->tile_n), "");
  LLVMValueRef rest = LLVMBuildSub(em->b, nlen, col_rest, "");
  LLVMValueRef mask[16];
  for (int32_t v = 0; v < nv; ++v) {
    mask[v] = tj_emit_lane_mask(
        em, LLVMBuildSub(em->b, rest, i64c(em, (int64_t)v * w), ""), w);
  }
  // Panel j starts j * NR * kc floats into dst.
  LLVMValueRef panel_stride =
      LLVMBuildMul(em->b, kc, i64c(em, s->tile_n), "panel_stride");
  LLVMValueRef dst_rest =
      gep_f32(em, dst, LLVMBuildMul(em->b, full, panel_stride, ""));
  tj_emit_loop_t kl;
  LLVMValueRef kk =
      tj_emit_loop_begin(em, &kl, i64c(em, 0), kc, i64c(em, 1), "pack_k");
  LLVMValueRef row = gep_op(em, dt, src, LLVMBuildMul(em->b, kk, sk, ""));
  {
    // A prefetch never faults: past the block's last row or column it
    // only fetches a line for nothing.
    LLVMValueRef ahead = gep_op(
        em, dt, row, LLVMBuildMul(em->b, i64c(em, PREFETCH_B_ROWS), sk, ""));
    LLVMTypeRef pt = em->t_ptr;
    int32_t per_line = 64 / op_bytes(dt);
    for (int32_t off = 0; off < s->nc; off += per_line) {
      LLVMValueRef args[4] = {gep_op(em, dt, ahead, i64c(em, off)), i32c(em, 0),
                              i32c(em, 3), i32c(em, 1)};
      tj_emit_intrinsic(em, "llvm.prefetch", &pt, 1, args, 4);
    }
  }
  LLVMValueRef out_k =
      gep_f32(em, dst, LLVMBuildMul(em->b, kk, i64c(em, s->tile_n), ""));
  tj_emit_loop_t pl;
  LLVMValueRef j =
      tj_emit_loop_begin(em, &pl, i64c(em, 0), full, i64c(em, 1), "panel");
  LLVMValueRef from =
      gep_op(em, dt, row, LLVMBuildMul(em->b, j, i64c(em, s->tile_n), ""));
  LLVMValueRef out =
      gep_f32(em, out_k, LLVMBuildMul(em->b, j, panel_stride, ""));
  for (int32_t v = 0; v < nv; ++v) {
    LLVMValueRef val = load_op_vec(
        em, dt, w, gep_op(em, dt, from, i64c(em, (int64_t)v * w)), NULL);
    LLVMSetAlignment(
        LLVMBuildStore(em->b, val, gep_f32(em, out, i64c(em, (int64_t)v * w))),
        (unsigned)w * 4);
  }
  loop_end_no_unroll(em, &pl);
  tj_emit_if_t edge;
  tj_emit_if_begin(em, &edge,
                   LLVMBuildICmp(em->b, LLVMIntSGT, rest, i64c(em, 0), ""),
                   "pack_edge");
  {
    LLVMValueRef from_e = gep_op(em, dt, row, col_rest);
    LLVMValueRef out_e =
        gep_f32(em, dst_rest, LLVMBuildMul(em->b, kk, i64c(em, s->tile_n), ""));
    for (int32_t v = 0; v < nv; ++v) {
      LLVMValueRef val = load_op_vec(
          em, dt, w, gep_op(em, dt, from_e, i64c(em, (int64_t)v * w)), mask[v]);
      LLVMSetAlignment(
          LLVMBuildStore(em->b, val,
                         gep_f32(em, out_e, i64c(em, (int64_t)v * w))),
          (unsigned)w * 4);
    }
  }
  tj_emit_if_end(em, &edge);
  loop_end_no_unroll(em, &kl);
}

// qfold: packs rows [0, kc) of a quantized B block (row k's bytes at
// src + k * sk, its columns from the block's first; k0: the block's first
// row in B, for the groups) into f32 panels dst[c / NR][k][c % NR],
// dequantized, zero padded: k outermost as in pack_b_contiguous, full
// panels unmasked, the last one masked.
static void pack_b_quant(tj_emit_t* em, const tj_kir_gemm_schedule_t* s,
                         const bq_read_t* r, int64_t group, LLVMValueRef src,
                         LLVMValueRef sk, LLVMValueRef scale, LLVMValueRef zero,
                         LLVMValueRef ss, LLVMValueRef k0, LLVMValueRef kc,
                         LLVMValueRef nlen, LLVMValueRef dst) {
  const int32_t w = em->target.lanes, nv = s->tile_n / w;
  LLVMValueRef full =
      LLVMBuildUDiv(em->b, nlen, i64c(em, s->tile_n), "full_panels");
  LLVMValueRef col_rest = LLVMBuildMul(em->b, full, i64c(em, s->tile_n), "");
  LLVMValueRef rest = LLVMBuildSub(em->b, nlen, col_rest, "");
  LLVMValueRef mask[16];
  for (int32_t v = 0; v < nv; ++v) {
    mask[v] = tj_emit_lane_mask(
        em, LLVMBuildSub(em->b, rest, i64c(em, (int64_t)v * w), ""), w);
  }
  LLVMValueRef panel_stride =
      LLVMBuildMul(em->b, kc, i64c(em, s->tile_n), "panel_stride");
  tj_emit_loop_t kl;
  LLVMValueRef kk =
      tj_emit_loop_begin(em, &kl, i64c(em, 0), kc, i64c(em, 1), "qpack_k");
  LLVMValueRef row = gep_i8(em, src, LLVMBuildMul(em->b, kk, sk, ""));
  LLVMValueRef kabs = LLVMBuildAdd(em->b, k0, kk, "");
  LLVMValueRef srow = bq_group_row(em, em->t_f32, scale, ss, group, kabs);
  LLVMValueRef zrow =
      zero ? bq_group_row(em, em->t_i8, zero, ss, group, kabs) : NULL;
  LLVMValueRef out_k =
      gep_f32(em, dst, LLVMBuildMul(em->b, kk, i64c(em, s->tile_n), ""));
  tj_emit_loop_t pl;
  LLVMValueRef j =
      tj_emit_loop_begin(em, &pl, i64c(em, 0), full, i64c(em, 1), "qpanel");
  LLVMValueRef col0 = LLVMBuildMul(em->b, j, i64c(em, s->tile_n), "");
  LLVMValueRef qcol0 =
      r->bits == 4 ? LLVMBuildUDiv(em->b, col0, i64c(em, 2), "") : col0;
  LLVMValueRef out =
      gep_f32(em, out_k, LLVMBuildMul(em->b, j, panel_stride, ""));
  for (int32_t v = 0; v < nv; ++v) {
    LLVMValueRef val =
        bq_load(em, r, w, gep_i8(em, row, qcol0), gep_f32(em, srow, col0),
                zrow ? gep_i8(em, zrow, col0) : NULL, (int64_t)v * w, NULL);
    LLVMSetAlignment(
        LLVMBuildStore(em->b, val, gep_f32(em, out, i64c(em, (int64_t)v * w))),
        (unsigned)w * 4);
  }
  loop_end_no_unroll(em, &pl);
  tj_emit_if_t edge;
  tj_emit_if_begin(em, &edge,
                   LLVMBuildICmp(em->b, LLVMIntSGT, rest, i64c(em, 0), ""),
                   "qpack_edge");
  {
    LLVMValueRef qc = r->bits == 4
                          ? LLVMBuildUDiv(em->b, col_rest, i64c(em, 2), "")
                          : col_rest;
    LLVMValueRef out_e = gep_f32(
        em, gep_f32(em, dst, LLVMBuildMul(em->b, full, panel_stride, "")),
        LLVMBuildMul(em->b, kk, i64c(em, s->tile_n), ""));
    for (int32_t v = 0; v < nv; ++v) {
      LLVMValueRef val = bq_load(
          em, r, w, gep_i8(em, row, qc), gep_f32(em, srow, col_rest),
          zrow ? gep_i8(em, zrow, col_rest) : NULL, (int64_t)v * w, mask[v]);
      LLVMSetAlignment(
          LLVMBuildStore(em->b, val,
                         gep_f32(em, out_e, i64c(em, (int64_t)v * w))),
          (unsigned)w * 4);
    }
  }
  tj_emit_if_end(em, &edge);
  loop_end_no_unroll(em, &kl);
}

// Transposes the w x w matrix held in |rows| (row i = rows[i]) in place:
// log2(w) rounds of interleaving row i with row i + w/2, each of which
// rotates the (row, column) bit string of every element by one bit.
static void transpose(tj_emit_t* em, int32_t w, LLVMValueRef* rows) {
  LLVMValueRef lo_idx[64], hi_idx[64];
  for (int32_t i = 0; i < w / 2; ++i) {
    lo_idx[2 * i] = i32c(em, i);
    lo_idx[2 * i + 1] = i32c(em, w + i);
    hi_idx[2 * i] = i32c(em, w / 2 + i);
    hi_idx[2 * i + 1] = i32c(em, w + w / 2 + i);
  }
  LLVMValueRef lo = LLVMConstVector(lo_idx, (unsigned)w);
  LLVMValueRef hi = LLVMConstVector(hi_idx, (unsigned)w);
  LLVMValueRef tmp[64];
  for (int32_t round = 1; round < w; round *= 2) {
    for (int32_t i = 0; i < w / 2; ++i) {
      tmp[2 * i] =
          LLVMBuildShuffleVector(em->b, rows[i], rows[i + w / 2], lo, "");
      tmp[2 * i + 1] =
          LLVMBuildShuffleVector(em->b, rows[i], rows[i + w / 2], hi, "");
    }
    for (int32_t i = 0; i < w; ++i) rows[i] = tmp[i];
  }
}

// Packs the B block at |src| (rows kc, columns nlen) into panels [nc/NR]
// [kc][NR], zero padded.
static void emit_pack_b(tj_emit_t* em, const tj_kir_gemm_schedule_t* s,
                        uint32_t bbuf, LLVMValueRef src, LLVMValueRef kc,
                        LLVMValueRef nlen, LLVMValueRef dst) {
  const tj_kir_t* k = em->k;
  const tj_kir_ival_t* st = k->buffers[bbuf].strides;
  tj_emit_pack_b(em, s, k->buffers[bbuf].dtype, src,
                 tj_emit_stride(em, bbuf, k->rank - 2),
                 tj_emit_stride(em, bbuf, k->rank - 1),
                 tj_kir_ival_is_const(st[k->rank - 1], 1),
                 tj_kir_ival_is_const(st[k->rank - 2], 1), kc, nlen, dst);
}

void tj_emit_pack_b(tj_emit_t* em, const tj_kir_gemm_schedule_t* s,
                    tj_dtype_t dt, LLVMValueRef src, LLVMValueRef sk,
                    LLVMValueRef sn, bool unit_n, bool unit_k, LLVMValueRef kc,
                    LLVMValueRef nlen, LLVMValueRef dst) {
  const int32_t w = em->target.lanes, nv = s->tile_n / w;
  if (unit_n) {
    pack_b_contiguous(em, s, dt, src, sk, kc, nlen, dst);
    return;
  }
  if (!unit_k) {
    pack_b_rows(em, s, dt, src, sk, sn, i64c(em, 0), kc, kc, nlen, dst);
    return;
  }
  // B^T: column c is contiguous along k. Per panel and per w columns of
  // it, w x w blocks: w k-vectors (one per column) transposed into w
  // n-vectors (one per k row of the panel).
  LLVMValueRef kfull = LLVMBuildAnd(em->b, kc, i64c(em, ~(int64_t)(w - 1)), "");
  tj_emit_loop_t panels;
  LLVMValueRef j =
      tj_emit_loop_begin(em, &panels, i64c(em, 0),
                         ceil_div(em, nlen, s->tile_n), i64c(em, 1), "tpanel");
  LLVMValueRef col0 = LLVMBuildMul(em->b, j, i64c(em, s->tile_n), "");
  LLVMValueRef cols = LLVMBuildSub(em->b, nlen, col0, "");
  LLVMValueRef dst_j = gep_f32(em, dst, LLVMBuildMul(em->b, col0, kc, ""));
  tj_emit_loop_t vl;
  LLVMValueRef v = tj_emit_loop_begin(em, &vl, i64c(em, 0), i64c(em, nv),
                                      i64c(em, 1), "tvec");
  LLVMValueRef c0 = LLVMBuildMul(em->b, v, i64c(em, w), "");
  LLVMValueRef colsrc[64], colmask[64];
  LLVMTypeRef mt = LLVMVectorType(em->t_i1, (unsigned)w);
  for (int32_t i = 0; i < w; ++i) {
    LLVMValueRef c = LLVMBuildAdd(em->b, c0, i64c(em, i), "");
    colsrc[i] =
        gep_op(em, dt, src,
               LLVMBuildMul(em->b, LLVMBuildAdd(em->b, col0, c, ""), sn, ""));
    LLVMValueRef valid = LLVMBuildICmp(em->b, LLVMIntSLT, c, cols, "");
    colmask[i] = LLVMBuildSelect(em->b, valid, LLVMConstAllOnes(mt),
                                 LLVMConstNull(mt), "");
  }
  LLVMValueRef dst_v = gep_f32(em, dst_j, c0);
  tj_emit_loop_t kl;
  LLVMValueRef kb =
      tj_emit_loop_begin(em, &kl, i64c(em, 0), kfull, i64c(em, w), "tk");
  LLVMValueRef rows[64];
  for (int32_t i = 0; i < w; ++i) {
    rows[i] = load_op_vec(em, dt, w, gep_op(em, dt, colsrc[i], kb), colmask[i]);
  }
  transpose(em, w, rows);
  for (int32_t i = 0; i < w; ++i) {
    LLVMValueRef p =
        gep_f32(em, dst_v,
                LLVMBuildMul(em->b, LLVMBuildAdd(em->b, kb, i64c(em, i), ""),
                             i64c(em, s->tile_n), ""));
    LLVMSetAlignment(LLVMBuildStore(em->b, rows[i], p), (unsigned)w * 4);
  }
  tj_emit_loop_end(em, &kl);
  tj_emit_loop_end(em, &vl);
  tj_emit_loop_end(em, &panels);
  // The last kc % w rows by gathers.
  pack_b_rows(em, s, dt, src, sk, sn, kfull, kc, kc, nlen, dst);
}

// Packs the A block at |src| (|mrows| rows, kc columns) into slivers of MR
// rows, dst[sl * stride + k * MR + r] with stride = kc * MR + W floats (a
// vector of slack after each sliver); rows past |mrows| are zero. The k
// loop is outermost so that a transposed A (contiguous along m) is read a
// whole row of the block at a time: per-sliver packing read 6 floats per
// k at a stride of one A row, usually a multiple of 4 KiB, which maps
// every k of a sliver to one L1 set, missed L1 on each of them, and cost
// ~9 cycles per k, a third of the microkernel's time.
static void emit_pack_a(tj_emit_t* em, const tj_kir_gemm_schedule_t* s,
                        uint32_t abuf, LLVMValueRef src, LLVMValueRef kc,
                        LLVMValueRef mrows, LLVMValueRef dst,
                        LLVMValueRef stride) {
  const tj_kir_t* k = em->k;
  const int32_t w = em->target.lanes, mr = s->tile_m;
  const int32_t chunks = (mr + w - 1) / w;
  const tj_dtype_t dt = k->buffers[abuf].dtype;
  LLVMValueRef sm = tj_emit_stride(em, abuf, k->rank - 2);
  LLVMValueRef sk = tj_emit_stride(em, abuf, k->rank - 1);
  bool unit_m = tj_kir_ival_is_const(k->buffers[abuf].strides[k->rank - 2], 1);
  LLVMValueRef offs = LLVMBuildMul(em->b, tj_emit_iota(em, em->t_i64, w),
                                   tj_emit_splat(em, sm, w), "");
  LLVMValueRef nsl = ceil_div(em, mrows, mr);
  tj_emit_loop_t kl;
  LLVMValueRef kk =
      tj_emit_loop_begin(em, &kl, i64c(em, 0), kc, i64c(em, 1), "pack_a");
  LLVMValueRef row = gep_op(em, dt, src, LLVMBuildMul(em->b, kk, sk, ""));
  if (unit_m) {
    LLVMValueRef ahead = gep_op(
        em, dt, row, LLVMBuildMul(em->b, i64c(em, PREFETCH_A_ROWS), sk, ""));
    tj_emit_loop_t pl;
    LLVMValueRef off =
        tj_emit_loop_begin(em, &pl, i64c(em, 0), mrows,
                           i64c(em, 64 / op_bytes(dt)), "pack_a_prefetch");
    LLVMTypeRef pt = em->t_ptr;
    LLVMValueRef args[4] = {gep_op(em, dt, ahead, off), i32c(em, 0),
                            i32c(em, 3), i32c(em, 1)};
    tj_emit_intrinsic(em, "llvm.prefetch", &pt, 1, args, 4);
    tj_emit_loop_end(em, &pl);
  }
  LLVMValueRef out_k =
      gep_f32(em, dst, LLVMBuildMul(em->b, kk, i64c(em, mr), ""));
  tj_emit_loop_t sl;
  LLVMValueRef q = tj_emit_loop_begin(em, &sl, i64c(em, 0), nsl, i64c(em, 1),
                                      "pack_a_sliver");
  LLVMValueRef m = LLVMBuildMul(em->b, q, i64c(em, mr), "");
  LLVMValueRef valid =
      tj_emit_min_i64(em, LLVMBuildSub(em->b, mrows, m, ""), i64c(em, mr));
  LLVMValueRef from = gep_op(em, dt, row, LLVMBuildMul(em->b, m, sm, ""));
  LLVMValueRef out = gep_f32(em, out_k, LLVMBuildMul(em->b, q, stride, ""));
  for (int32_t c = 0; c < chunks; ++c) {
    LLVMValueRef mask = tj_emit_lane_mask(
        em, LLVMBuildSub(em->b, valid, i64c(em, (int64_t)c * w), ""), w);
    LLVMValueRef val;
    if (unit_m) {
      val = load_op_vec(em, dt, w,
                        gep_op(em, dt, from, i64c(em, (int64_t)c * w)), mask);
    } else {
      LLVMValueRef base = gep_op(
          em, dt, from, LLVMBuildMul(em->b, i64c(em, (int64_t)c * w), sm, ""));
      val = gather_op_vec(em, dt, w, gep_op(em, dt, base, offs), mask);
    }
    // A whole vector: its lanes past MR land in the next k's rows, which
    // later iterations overwrite, and past the last k in the slack.
    LLVMSetAlignment(
        LLVMBuildStore(em->b, val, gep_f32(em, out, i64c(em, (int64_t)c * w))),
        4);
  }
  tj_emit_loop_end(em, &sl);
  tj_emit_loop_end(em, &kl);
}

//===--- packing bf16 pairs (the dot path) ---===//
//
// vdpbf16ps multiplies 32-bit lanes holding two bf16 each: the packed B
// panel is [kc/2][NR] pairs (B[2p][n], B[2p+1][n]) and the A sliver
// [kc/2][MR] pairs (A[m][2p], A[m][2p+1]), the first of each pair in the
// low half (where it is in memory). An odd kc's last pair has a zero high
// half on both sides: never a read past the block, and 0 * 0 adds
// nothing.

static LLVMValueRef gep16(tj_emit_t* em, LLVMValueRef ptr, LLVMValueRef count) {
  return LLVMBuildGEP2(em->b, em->t_i16, ptr, &count, 1, "");
}

// <w x i16> |lo|, |hi| -> <2w x i16> lo[0], hi[0], lo[1], hi[1], ..
static LLVMValueRef interleave(tj_emit_t* em, int32_t w, LLVMValueRef lo,
                               LLVMValueRef hi) {
  LLVMValueRef idx[128];
  for (int32_t i = 0; i < w; ++i) {
    idx[2 * i] = i32c(em, i);
    idx[2 * i + 1] = i32c(em, w + i);
  }
  return LLVMBuildShuffleVector(em->b, lo, hi,
                                LLVMConstVector(idx, (unsigned)(2 * w)), "");
}

// |w| raw bf16 at |ptr| (contiguous) or at the pointers |ptr| + |offs|
// (when |offs| is not NULL), lanes off in |mask| 0 and not accessed.
static LLVMValueRef load16(tj_emit_t* em, int32_t w, LLVMValueRef ptr,
                           LLVMValueRef offs, LLVMValueRef mask) {
  LLVMTypeRef vt = LLVMVectorType(em->t_i16, (unsigned)w);
  if (offs) return masked_gather_a(em, vt, gep16(em, ptr, offs), mask, 2);
  return masked_load_a(em, vt, ptr, mask, 2);
}

// What one packed 32-bit lane holds (bf16 pairs, qgemm's integer groups):
// |g| consecutive k of one operand element, the first in the low bits.
// bf16: 2 raw 16-bit values. Integer (issue 17): 2 i8/u8 widened to i16
// (sign or zero extended: pmaddwd multiplies them exactly, any dtype
// mix), or 4 raw bytes for vpdpbusd, |flip| xoring 0x80 (s8 a + 128 is
// the u8 operand the instruction takes; the B panel then carries the
// correction row -128 * colsum(B), |corr|).
typedef struct group_t {
  int32_t g;      // 2 or 4
  tj_dtype_t dt;  // the operand's dtype
  bool widen;     // i8/u8 -> i16 lanes (g == 2)
  bool flip;      // xor 0x80 (g == 4)
  bool corr;      // B: a row of -128 * column sums after each panel
} group_t;

static const group_t kBf16Pairs = {2, TJ_DTYPE_BF16, false, false, false};

// |w| elements of gp->dt at |ptr| (contiguous) or at |ptr| + |offs| (when
// not NULL) as the group's lane type, lanes off in |mask| 0 and not read.
static LLVMValueRef load_group_elems(tj_emit_t* em, const group_t* gp,
                                     int32_t w, LLVMValueRef ptr,
                                     LLVMValueRef offs, LLVMValueRef mask) {
  if (gp->dt == TJ_DTYPE_BF16) return load16(em, w, ptr, offs, mask);
  LLVMTypeRef vt = LLVMVectorType(em->t_i8, (unsigned)w);
  LLVMValueRef v = offs
                       ? masked_gather_a(em, vt, gep_i8(em, ptr, offs), mask, 1)
                       : masked_load_a(em, vt, ptr, mask, 1);
  if (gp->widen) {
    LLVMTypeRef wt = LLVMVectorType(em->t_i16, (unsigned)w);
    return gp->dt == TJ_DTYPE_I8 ? LLVMBuildSExt(em->b, v, wt, "")
                                 : LLVMBuildZExt(em->b, v, wt, "");
  }
  if (gp->flip) {
    v = LLVMBuildXor(em->b, v,
                     tj_emit_splat(em, LLVMConstInt(em->t_i8, 0x80, 0), w), "");
  }
  return v;
}

// Element |count| of the group's operand at |ptr|.
static LLVMValueRef gep_group(tj_emit_t* em, const group_t* gp,
                              LLVMValueRef ptr, LLVMValueRef count) {
  return gp->dt == TJ_DTYPE_BF16 ? gep16(em, ptr, count)
                                 : gep_i8(em, ptr, count);
}

// <w x T> v[0..g) -> <g*w x T> v0[0], v1[0], .., v0[1], v1[1], ..
static LLVMValueRef interleave_group(tj_emit_t* em, int32_t w, int32_t g,
                                     LLVMValueRef* v) {
  if (g == 2) return interleave(em, w, v[0], v[1]);
  LLVMValueRef idx[256];
  for (int32_t i = 0; i < 2 * w; ++i) idx[i] = i32c(em, i);
  LLVMValueRef cat = LLVMConstVector(idx, (unsigned)(2 * w));
  LLVMValueRef lo = LLVMBuildShuffleVector(em->b, v[0], v[1], cat, "");
  LLVMValueRef hi = LLVMBuildShuffleVector(em->b, v[2], v[3], cat, "");
  for (int32_t i = 0; i < w; ++i) {
    idx[4 * i] = i32c(em, i);
    idx[4 * i + 1] = i32c(em, w + i);
    idx[4 * i + 2] = i32c(em, 2 * w + i);
    idx[4 * i + 3] = i32c(em, 3 * w + i);
  }
  return LLVMBuildShuffleVector(em->b, lo, hi,
                                LLVMConstVector(idx, (unsigned)(4 * w)), "");
}

// Packs groups [p_begin, p_end) of the B block whose column c of row k is
// at src[k*sk + c*sn] into panels dst[c / NR][p][c % NR] (32-bit lanes of
// gp->g values, panels |prows| lanes long: kcg = ceil(kc / g) groups, and
// with gp->corr the correction row at kcg, accumulated here and zeroed
// when p_begin is 0); rows >= kc and columns >= nlen read as 0.
static void pack_b_pairs(tj_emit_t* em, const tj_kir_gemm_schedule_t* s,
                         const group_t* gp, LLVMValueRef src, LLVMValueRef sk,
                         LLVMValueRef sn, bool unit_n, LLVMValueRef p_begin,
                         LLVMValueRef p_end, LLVMValueRef kc,
                         LLVMValueRef prows, LLVMValueRef nlen,
                         LLVMValueRef dst) {
  const int32_t w = em->target.lanes, nv = s->tile_n / w, G = gp->g;
  LLVMTypeRef iv = LLVMVectorType(em->t_i32, (unsigned)w);
  tj_emit_loop_t panels;
  LLVMValueRef j =
      tj_emit_loop_begin(em, &panels, i64c(em, 0),
                         ceil_div(em, nlen, s->tile_n), i64c(em, 1), "ppanel");
  LLVMValueRef col0 = LLVMBuildMul(em->b, j, i64c(em, s->tile_n), "");
  LLVMValueRef cols = LLVMBuildSub(em->b, nlen, col0, "");
  LLVMValueRef src_j =
      gep_group(em, gp, src, LLVMBuildMul(em->b, col0, sn, ""));
  LLVMValueRef dst_j = gep_f32(em, dst, LLVMBuildMul(em->b, col0, prows, ""));
  LLVMValueRef corr_row = NULL;
  if (gp->corr) {
    corr_row =
        gep_f32(em, dst_j,
                LLVMBuildMul(em->b, LLVMBuildSub(em->b, prows, i64c(em, 1), ""),
                             i64c(em, s->tile_n), ""));
    tj_emit_if_t zero;
    tj_emit_if_begin(em, &zero,
                     LLVMBuildICmp(em->b, LLVMIntEQ, p_begin, i64c(em, 0), ""),
                     "corr_zero");
    for (int32_t v = 0; v < nv; ++v) {
      LLVMSetAlignment(
          LLVMBuildStore(em->b, LLVMConstNull(iv),
                         gep_f32(em, corr_row, i64c(em, (int64_t)v * w))),
          (unsigned)w * 4);
    }
    tj_emit_if_end(em, &zero);
  }
  LLVMValueRef mask[16];
  for (int32_t v = 0; v < nv; ++v) {
    mask[v] = tj_emit_lane_mask(
        em, LLVMBuildSub(em->b, cols, i64c(em, (int64_t)v * w), ""), w);
  }
  LLVMValueRef offs = unit_n
                          ? NULL
                          : LLVMBuildMul(em->b, tj_emit_iota(em, em->t_i64, w),
                                         tj_emit_splat(em, sn, w), "");
  tj_emit_loop_t pl;
  LLVMValueRef p =
      tj_emit_loop_begin(em, &pl, p_begin, p_end, i64c(em, 1), "pack_pair");
  LLVMValueRef k = LLVMBuildMul(em->b, p, i64c(em, G), "");
  LLVMValueRef ok[4], row[4];
  for (int32_t q = 0; q < G; ++q) {
    LLVMValueRef kq = LLVMBuildAdd(em->b, k, i64c(em, q), "");
    ok[q] = tj_emit_splat(em, LLVMBuildICmp(em->b, LLVMIntSLT, kq, kc, ""), w);
    row[q] = gep_group(em, gp, src_j, LLVMBuildMul(em->b, kq, sk, ""));
  }
  LLVMValueRef out =
      gep_f32(em, dst_j, LLVMBuildMul(em->b, p, i64c(em, s->tile_n), ""));
  for (int32_t v = 0; v < nv; ++v) {
    LLVMValueRef off = LLVMBuildMul(em->b, i64c(em, (int64_t)v * w), sn, "");
    LLVMValueRef e[4];
    for (int32_t q = 0; q < G; ++q) {
      // Group 0's row is valid whenever the loop runs (k < kc).
      LLVMValueRef m = q ? LLVMBuildAnd(em->b, mask[v], ok[q], "") : mask[v];
      e[q] =
          load_group_elems(em, gp, w, gep_group(em, gp, row[q], off), offs, m);
    }
    LLVMValueRef st =
        LLVMBuildStore(em->b, interleave_group(em, w, G, e),
                       gep_f32(em, out, i64c(em, (int64_t)v * w)));
    LLVMSetAlignment(st, (unsigned)w * 4);
    if (gp->corr) {
      // The bytes as stored are s8 (no flip on B): their sum, times -128.
      LLVMValueRef sum = LLVMBuildSExt(em->b, e[0], iv, "");
      for (int32_t q = 1; q < G; ++q) {
        sum = LLVMBuildAdd(em->b, sum, LLVMBuildSExt(em->b, e[q], iv, ""), "");
      }
      LLVMValueRef cp = gep_f32(em, corr_row, i64c(em, (int64_t)v * w));
      LLVMValueRef old = LLVMBuildLoad2(em->b, iv, cp, "");
      LLVMSetAlignment(old, (unsigned)w * 4);
      LLVMValueRef upd = LLVMBuildSub(
          em->b, old,
          LLVMBuildShl(em->b, sum,
                       tj_emit_splat(em, LLVMConstInt(em->t_i32, 7, 0), w), ""),
          "");
      LLVMSetAlignment(LLVMBuildStore(em->b, upd, cp), (unsigned)w * 4);
    }
  }
  tj_emit_loop_end(em, &pl);
  tj_emit_loop_end(em, &panels);
}

// The bf16 B block at |src| (kc rows, nlen columns) as pair panels.
static void emit_pack_b_pairs(tj_emit_t* em, const tj_kir_gemm_schedule_t* s,
                              uint32_t bbuf, LLVMValueRef src, LLVMValueRef kc,
                              LLVMValueRef nlen, LLVMValueRef dst) {
  const tj_kir_t* k = em->k;
  const int32_t w = em->target.lanes, nv = s->tile_n / w;
  LLVMValueRef sk = tj_emit_stride(em, bbuf, k->rank - 2);
  LLVMValueRef sn = tj_emit_stride(em, bbuf, k->rank - 1);
  const tj_kir_ival_t* st = k->buffers[bbuf].strides;
  bool unit_n = tj_kir_ival_is_const(st[k->rank - 1], 1);
  bool unit_k = tj_kir_ival_is_const(st[k->rank - 2], 1);
  LLVMValueRef kc2 = ceil_div(em, kc, 2);
  if (unit_n || !unit_k) {
    pack_b_pairs(em, s, &kBf16Pairs, src, sk, sn, unit_n, i64c(em, 0), kc2, kc,
                 kc2, nlen, dst);
    return;
  }
  // B^T: a column's pairs are contiguous, w of them one 32-bit vector;
  // w columns' vectors transposed give w pair rows of the panel (as the
  // f32 packing does with floats).
  LLVMTypeRef iv = LLVMVectorType(em->t_i32, (unsigned)w);
  LLVMValueRef pfull = LLVMBuildMul(
      em->b, LLVMBuildUDiv(em->b, kc, i64c(em, 2 * w), ""), i64c(em, w), "");
  tj_emit_loop_t panels;
  LLVMValueRef j =
      tj_emit_loop_begin(em, &panels, i64c(em, 0),
                         ceil_div(em, nlen, s->tile_n), i64c(em, 1), "tppanel");
  LLVMValueRef col0 = LLVMBuildMul(em->b, j, i64c(em, s->tile_n), "");
  LLVMValueRef cols = LLVMBuildSub(em->b, nlen, col0, "");
  LLVMValueRef dst_j = gep_f32(em, dst, LLVMBuildMul(em->b, col0, kc2, ""));
  tj_emit_loop_t vl;
  LLVMValueRef v = tj_emit_loop_begin(em, &vl, i64c(em, 0), i64c(em, nv),
                                      i64c(em, 1), "tpvec");
  LLVMValueRef c0 = LLVMBuildMul(em->b, v, i64c(em, w), "");
  LLVMValueRef colsrc[64], colmask[64];
  LLVMTypeRef mt = LLVMVectorType(em->t_i1, (unsigned)w);
  for (int32_t i = 0; i < w; ++i) {
    LLVMValueRef c = LLVMBuildAdd(em->b, c0, i64c(em, i), "");
    colsrc[i] = gep16(
        em, src, LLVMBuildMul(em->b, LLVMBuildAdd(em->b, col0, c, ""), sn, ""));
    LLVMValueRef valid = LLVMBuildICmp(em->b, LLVMIntSLT, c, cols, "");
    colmask[i] = LLVMBuildSelect(em->b, valid, LLVMConstAllOnes(mt),
                                 LLVMConstNull(mt), "");
  }
  LLVMValueRef dst_v = gep_f32(em, dst_j, c0);
  tj_emit_loop_t pl;
  LLVMValueRef pb =
      tj_emit_loop_begin(em, &pl, i64c(em, 0), pfull, i64c(em, w), "tpk");
  LLVMValueRef kb = LLVMBuildMul(em->b, pb, i64c(em, 2), "");
  LLVMValueRef rows[64];
  for (int32_t i = 0; i < w; ++i) {
    rows[i] = masked_load_a(em, iv, gep16(em, colsrc[i], kb), colmask[i], 2);
  }
  transpose(em, w, rows);
  for (int32_t i = 0; i < w; ++i) {
    LLVMValueRef p =
        gep_f32(em, dst_v,
                LLVMBuildMul(em->b, LLVMBuildAdd(em->b, pb, i64c(em, i), ""),
                             i64c(em, s->tile_n), ""));
    LLVMSetAlignment(LLVMBuildStore(em->b, rows[i], p), (unsigned)w * 4);
  }
  tj_emit_loop_end(em, &pl);
  tj_emit_loop_end(em, &vl);
  tj_emit_loop_end(em, &panels);
  // The last pairs (fewer than w, or an odd kc's last one) by gathers.
  pack_b_pairs(em, s, &kBf16Pairs, src, sk, sn, false, pfull, kc2, kc, kc2,
               nlen, dst);
}

// One chunk of w rows of A pair p (at |from|, the chunk's row 0 at k =
// 2p): a <2w x i16> of pairs, |tail| when k + 1 is past kc.
static LLVMValueRef a_pairs(tj_emit_t* em, LLVMValueRef from, LLVMValueRef sk,
                            LLVMValueRef offs, bool unit_m, bool unit_k,
                            LLVMValueRef mask, bool tail) {
  const int32_t w = em->target.lanes;
  LLVMTypeRef pv = LLVMVectorType(em->t_i16, (unsigned)(2 * w));
  LLVMValueRef lo_offs = unit_m ? NULL : offs;
  if (unit_k && !unit_m && !tail) {
    // Each row's pair is one 32-bit word: one gather of w words.
    LLVMTypeRef iv = LLVMVectorType(em->t_i32, (unsigned)w);
    LLVMValueRef pair = masked_gather_a(em, iv, gep16(em, from, offs), mask, 2);
    return LLVMBuildBitCast(em->b, pair, pv, "");
  }
  LLVMValueRef lo = load16(em, w, from, lo_offs, mask);
  LLVMValueRef hi = tail ? LLVMConstNull(LLVMVectorType(em->t_i16, (unsigned)w))
                         : load16(em, w, gep16(em, from, sk), lo_offs, mask);
  return interleave(em, w, lo, hi);
}

// Packs the bf16 A block at |src| (|mrows| rows, kc columns) as slivers of
// MR rows of pairs: dst[sl * stride + p * MR + r] (32-bit lanes; stride =
// ceil(kc / 2) * MR + W, a vector of slack after each sliver); rows past
// |mrows| are zero. k pairs outermost, as emit_pack_a and for its reason.
static void emit_pack_a_pairs(tj_emit_t* em, const tj_kir_gemm_schedule_t* s,
                              const group_t* gp, uint32_t abuf,
                              LLVMValueRef src, LLVMValueRef kc,
                              LLVMValueRef mrows, LLVMValueRef dst,
                              LLVMValueRef stride) {
  const tj_kir_t* k = em->k;
  const int32_t w = em->target.lanes, mr = s->tile_m;
  const int32_t chunks = (mr + w - 1) / w;
  LLVMValueRef sm = tj_emit_stride(em, abuf, k->rank - 2);
  LLVMValueRef sk = tj_emit_stride(em, abuf, k->rank - 1);
  const tj_kir_ival_t* st = k->buffers[abuf].strides;
  bool unit_m = tj_kir_ival_is_const(st[k->rank - 2], 1);
  bool unit_k = tj_kir_ival_is_const(st[k->rank - 1], 1);
  LLVMValueRef offs = LLVMBuildMul(em->b, tj_emit_iota(em, em->t_i64, w),
                                   tj_emit_splat(em, sm, w), "");
  LLVMValueRef nsl = ceil_div(em, mrows, mr);
  tj_emit_loop_t pl;
  const int32_t G = gp->g;
  LLVMValueRef p = tj_emit_loop_begin(em, &pl, i64c(em, 0), ceil_div(em, kc, G),
                                      i64c(em, 1), "pack_a_pair");
  LLVMValueRef kk = LLVMBuildMul(em->b, p, i64c(em, G), "");
  LLVMValueRef has_hi = LLVMBuildICmp(
      em->b, LLVMIntSLT, LLVMBuildAdd(em->b, kk, i64c(em, 1), ""), kc, "");
  LLVMValueRef row = gep_group(em, gp, src, LLVMBuildMul(em->b, kk, sk, ""));
  LLVMValueRef ok[4] = {NULL, NULL, NULL, NULL};
  for (int32_t q = 1; q < G; ++q) {
    ok[q] = tj_emit_splat(
        em,
        LLVMBuildICmp(em->b, LLVMIntSLT,
                      LLVMBuildAdd(em->b, kk, i64c(em, q), ""), kc, ""),
        w);
  }
  if (unit_m && gp->dt == TJ_DTYPE_BF16) {
    // A^T: the next rows' lines, as emit_pack_a does.
    LLVMValueRef ahead =
        gep16(em, row, LLVMBuildMul(em->b, i64c(em, PREFETCH_A_ROWS), sk, ""));
    tj_emit_loop_t fl;
    LLVMValueRef off = tj_emit_loop_begin(em, &fl, i64c(em, 0), mrows,
                                          i64c(em, 32), "pack_a_prefetch");
    LLVMTypeRef pt = em->t_ptr;
    for (int32_t r = 0; r < 2; ++r) {
      LLVMValueRef at = gep16(em, ahead, off);
      if (r) at = gep16(em, at, sk);
      LLVMValueRef args[4] = {at, i32c(em, 0), i32c(em, 3), i32c(em, 1)};
      tj_emit_intrinsic(em, "llvm.prefetch", &pt, 1, args, 4);
    }
    tj_emit_loop_end(em, &fl);
  }
  LLVMValueRef out_p =
      gep_f32(em, dst, LLVMBuildMul(em->b, p, i64c(em, mr), ""));
  tj_emit_loop_t sl;
  LLVMValueRef q = tj_emit_loop_begin(em, &sl, i64c(em, 0), nsl, i64c(em, 1),
                                      "pack_a_psliver");
  LLVMValueRef m = LLVMBuildMul(em->b, q, i64c(em, mr), "");
  LLVMValueRef valid =
      tj_emit_min_i64(em, LLVMBuildSub(em->b, mrows, m, ""), i64c(em, mr));
  LLVMValueRef from = gep_group(em, gp, row, LLVMBuildMul(em->b, m, sm, ""));
  LLVMValueRef out = gep_f32(em, out_p, LLVMBuildMul(em->b, q, stride, ""));
  for (int32_t c = 0; c < chunks; ++c) {
    LLVMValueRef mask = tj_emit_lane_mask(
        em, LLVMBuildSub(em->b, valid, i64c(em, (int64_t)c * w), ""), w);
    if (gp->dt != TJ_DTYPE_BF16) {
      // Integer groups (issue 17): G masked loads (gathers along m), the
      // rows past kc read as 0.
      LLVMValueRef at = gep_i8(
          em, from, LLVMBuildMul(em->b, i64c(em, (int64_t)c * w), sm, ""));
      LLVMValueRef e[4];
      for (int32_t g = 0; g < G; ++g) {
        LLVMValueRef mg = g ? LLVMBuildAnd(em->b, mask, ok[g], "") : mask;
        LLVMValueRef rg =
            gep_i8(em, at, LLVMBuildMul(em->b, i64c(em, g), sk, ""));
        e[g] = load_group_elems(em, gp, w, rg, unit_m ? NULL : offs, mg);
      }
      LLVMSetAlignment(
          LLVMBuildStore(em->b, interleave_group(em, w, G, e),
                         gep_f32(em, out, i64c(em, (int64_t)c * w))),
          4);
      continue;
    }
    LLVMValueRef at =
        gep16(em, from, LLVMBuildMul(em->b, i64c(em, (int64_t)c * w), sm, ""));
    LLVMValueRef dst_c = gep_f32(em, out, i64c(em, (int64_t)c * w));
    // A whole vector, as in emit_pack_a: lanes past MR land in the next
    // pairs' rows (rewritten later) or, after the last pair, in the slack.
    tj_emit_if_t full, tail;
    tj_emit_if_begin(em, &full, has_hi, "pair_full");
    LLVMSetAlignment(
        LLVMBuildStore(em->b,
                       a_pairs(em, at, sk, offs, unit_m, unit_k, mask, false),
                       dst_c),
        4);
    tj_emit_if_end(em, &full);
    tj_emit_if_begin(em, &tail, LLVMBuildNot(em->b, has_hi, ""), "pair_tail");
    LLVMSetAlignment(
        LLVMBuildStore(em->b,
                       a_pairs(em, at, sk, offs, unit_m, unit_k, mask, true),
                       dst_c),
        4);
    tj_emit_if_end(em, &tail);
  }
  tj_emit_loop_end(em, &sl);
  tj_emit_loop_end(em, &pl);
}

//===--- the epilogue ---===//

// Vectors the packed path's epilogue takes at once (see emit_epilogue):
// 2 on AVX2 and SSE2 when a tile row holds an even number of vectors,
// else 1 (AVX-512: its 32 registers already hold GELU's constants, and
// its tile rows are 4 vectors long).
static int32_t epilogue_group(const tj_emit_t* em,
                              const tj_kir_gemm_schedule_t* s) {
  int32_t w = em->target.lanes;
  return w <= 8 && (s->tile_n / w) % 2 == 0 ? 2 : 1;
}

// The epilogue over the finished tile at (|tile|, |ld|): rows [0, rows) of
// C rows starting at |m|, columns [col0, col0 + min(cols, nv * W)), the
// tile row holding |nv| vectors. Both loops stay loops: the body (GELU's
// polynomials) is large and its iterations are independent, for the
// out-of-order core to overlap. LLVM unrolled the packed path's constant
// 4 vectors; that and the unrolled B packing (emit_pack_b) were a third
// of the capstone kernel's LLVM time (51 -> 34 ms without both), for no
// speed that bench/gemm_bench.c can see.
//
// |group| vectors (1, or 2 where |nv| is a multiple of 2) go through the
// body as one vector of group * W lanes, which LLVM's type legalization
// splits back into |group| registers, op by op: the two dependency chains
// of GELU (~45 dependent operations each, a division among them) are then
// interleaved in the instruction stream instead of following each other,
// and the out-of-order window, which one chain at a time left mostly
// waiting, holds two chains that advance together. On AVX2 (6x16 tile, 2
// vectors a row) that took the capstone's epilogue at B = 2048, 1 thread,
// from 15-25 ms to 1-3 ms beside a GEMM of 160-170 ms (a Zen 5 running the
// AVX2 JIT: bench/gemm_bench.c fwd2048 against gemm2048 with
// GEMM_BENCH_ISA=avx2 GEMM_BENCH_CLOCK=cpu). AVX-512 keeps group 1.
static tj_status_t emit_epilogue(tj_emit_t* em, const tj_emit_point_t* batch,
                                 LLVMValueRef tile, LLVMValueRef ld,
                                 LLVMValueRef rows, LLVMValueRef m,
                                 LLVMValueRef col0, LLVMValueRef cols,
                                 LLVMValueRef nv, int32_t group) {
  const tj_kir_t* k = em->k;
  const int32_t w = em->target.lanes * group;
  const int32_t dm = k->rank - 2, dn = k->rank - 1;
  LLVMTypeRef vt = LLVMVectorType(
      tj_kir_gemm_is_int8(k) ? em->t_i32 : em->t_f32, (unsigned)w);
  tj_emit_loop_t rl;
  LLVMValueRef r =
      tj_emit_loop_begin(em, &rl, i64c(em, 0), rows, i64c(em, 1), "epi_row");
  LLVMValueRef mm = LLVMBuildAdd(em->b, m, r, "");
  tj_emit_point_t row = *batch;
  row.lanes = w;
  row.index[dm] = mm;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    if (k->buffers[b].role != TJ_KIR_INPUT &&
        k->buffers[b].role != TJ_KIR_OUTPUT) {
      continue;
    }
    LLVMValueRef off = LLVMBuildAdd(
        em->b, LLVMBuildMul(em->b, mm, tj_emit_stride(em, b, dm), ""),
        LLVMBuildMul(em->b, col0, tj_emit_stride(em, b, dn), ""), "");
    row.ptr[b] = tj_emit_advance(em, b, batch->ptr[b], off);
  }
  LLVMValueRef tile_row = gep_f32(em, tile, LLVMBuildMul(em->b, r, ld, ""));
  tj_emit_loop_t vl;
  LLVMValueRef v =
      tj_emit_loop_begin(em, &vl, i64c(em, 0), nv, i64c(em, group), "epi_vec");
  LLVMValueRef off = LLVMBuildMul(em->b, v, i64c(em, em->target.lanes), "");
  tj_emit_point_t p;
  tj_emit_line_point(em, &row, off, col0, &p);
  p.mask = tj_emit_lane_mask(em, LLVMBuildSub(em->b, cols, off, ""), w);
  LLVMValueRef acc = LLVMBuildLoad2(em->b, vt, gep_f32(em, tile_row, off), "");
  LLVMSetAlignment(acc, (unsigned)em->target.lanes * 4);
  p.acc = acc;
  TJ_RETURN_IF_ERROR(tj_emit_body(em, &k->phases[0], &p, NULL));
  loop_end_no_unroll(em, &vl);
  tj_emit_loop_end(em, &rl);
  return NULL;
}

//===--- the kernel ---===//

typedef struct gemm_t {
  tj_emit_t* em;
  tj_kir_gemm_schedule_t s;
  uint32_t abuf, bbuf;
  int32_t dm, dn;
  LLVMValueRef M, N, K, nmb, nnb;
  LLVMValueRef tile;  // tile_m x tile_n f32 on the stack
  LLVMValueRef sa_m, sa_k, sb_k, sb_n;
  tj_dtype_t adt, bdt;  // the operands' dtypes
  bool dot;             // bf16 pairs and vdpbf16ps (the packed path)
  // qgemm (issue 17): i8/u8 operands in packed groups of igroup k (2 or 4;
  // 0: not an integer gemm), A and B's packing (ga, gb), i32 accumulators.
  int32_t igroup;
  group_t ga, gb;
  bool a_inplace;  // quads read from A's rows in place (tj_ukernel_opts_t)
  bool amx;        // the AMX microkernel (emit_amx_ukernel)
  // qfold (issue 17): a quantized B (bq.bits 0: not), its scale and zero
  // point buffers (zbuf TJ_KIR_NONE: none) and the scale's group stride.
  bq_read_t bq;
  int64_t bq_group;
  uint32_t sbuf, zbuf;
  LLVMValueRef ss;
} gemm_t;

// The unit |u|: its batch point, m range and n block. Units are ordered
// (batch, n block, m block fastest) so that a thread running consecutive
// units of one n block packs its B block once; with |a_major| (a kernel
// that packs A) (batch, m block, n block fastest), so that it packs its A
// block once instead: packing a transposed A costs more than packing B.
typedef struct unit_t {
  tj_emit_point_t batch;
  LLVMValueRef key_b;  // batch * nnb + n block: the B block's identity
  LLVMValueRef key_a;  // batch * nmb + m block: the A block's identity
  LLVMValueRef m0, m_end, n0, nlen;
} unit_t;

static void decompose_unit(gemm_t* g, LLVMValueRef u, bool a_major,
                           unit_t* out) {
  tj_emit_t* em = g->em;
  LLVMValueRef mb, nb, bidx;
  if (a_major) {
    nb = LLVMBuildURem(em->b, u, g->nnb, "");
    out->key_a = LLVMBuildUDiv(em->b, u, g->nnb, "");
    mb = LLVMBuildURem(em->b, out->key_a, g->nmb, "");
    bidx = LLVMBuildUDiv(em->b, out->key_a, g->nmb, "");
    out->key_b =
        LLVMBuildAdd(em->b, LLVMBuildMul(em->b, bidx, g->nnb, ""), nb, "");
  } else {
    mb = LLVMBuildURem(em->b, u, g->nmb, "");
    out->key_b = LLVMBuildUDiv(em->b, u, g->nmb, "");
    nb = LLVMBuildURem(em->b, out->key_b, g->nnb, "");
    bidx = LLVMBuildUDiv(em->b, out->key_b, g->nnb, "");
    out->key_a =
        LLVMBuildAdd(em->b, LLVMBuildMul(em->b, bidx, g->nmb, ""), mb, "");
  }
  memset(&out->batch, 0, sizeof(out->batch));
  out->batch.lanes = em->target.lanes;
  out->batch.vdim = g->dn;
  tj_emit_decompose(em, bidx, g->dm, &out->batch);
  out->m0 = LLVMBuildMul(em->b, mb, i64c(em, g->s.mc), "m0");
  out->m_end = tj_emit_min_i64(
      em, g->M, LLVMBuildAdd(em->b, out->m0, i64c(em, g->s.mc), ""));
  out->n0 = LLVMBuildMul(em->b, nb, i64c(em, g->s.nc), "n0");
  out->nlen = tj_emit_min_i64(em, i64c(em, g->s.nc),
                              LLVMBuildSub(em->b, g->N, out->n0, ""));
}

// qfold: B's element offset of column |n| (int4: its byte, n even).
static LLVMValueRef b_col(const gemm_t* g, LLVMValueRef n) {
  if (g->bq.bits != 4) return n;
  return LLVMBuildUDiv(g->em->b, n, i64c(g->em, 2), "");
}

// The direct microkernels: one per row count 1..tile_m, each as wide as
// the registers allow (see the top of the file).
typedef struct direct_t {
  LLVMValueRef fns[17];   // full strips: cols >= width
  LLVMValueRef edge[17];  // after the full strips: NR wide, masked
  int32_t width[17];      // columns of the tile of fns[r]
  int32_t max_tile;       // max over r of r * width[r], floats
} direct_t;

// The small-M path: B read in place, all of K in one pass. Consecutive
// units of one batch entry (one m block each when M <= mc) are one span of
// columns. Emitted into the small-M function (emit_small_m_fn).
static tj_status_t emit_direct(gemm_t* g, const direct_t* d) {
  tj_emit_t* em = g->em;
  const tj_kir_gemm_schedule_t* s = &g->s;
  const int32_t w = em->target.lanes;
  LLVMTypeRef fty = LLVMGlobalGetValueType(d->fns[1]);
  LLVMValueRef uvar = tj_emit_alloca(em, em->t_i64, "dunit");
  LLVMBuildStore(em->b, em->arg_begin, uvar);
  LLVMBasicBlockRef cond =
      LLVMAppendBasicBlockInContext(em->ctx, em->fn, "dspan");
  LLVMBasicBlockRef body =
      LLVMAppendBasicBlockInContext(em->ctx, em->fn, "dspan");
  LLVMBasicBlockRef done =
      LLVMAppendBasicBlockInContext(em->ctx, em->fn, "dspan");
  LLVMBuildBr(em->b, cond);
  LLVMPositionBuilderAtEnd(em->b, cond);
  LLVMValueRef u = LLVMBuildLoad2(em->b, em->t_i64, uvar, "");
  LLVMBuildCondBr(em->b, LLVMBuildICmp(em->b, LLVMIntSLT, u, em->arg_end, ""),
                  body, done);
  LLVMPositionBuilderAtEnd(em->b, body);
  unit_t un;
  decompose_unit(g, u, false, &un);
  // With one m block, units [u, span_end) are n blocks nb.. of one batch
  // entry: columns [n0, min(N, (nb + span) * nc)).
  LLVMValueRef one_mb =
      LLVMBuildICmp(em->b, LLVMIntEQ, g->nmb, i64c(em, 1), "");
  LLVMValueRef nb = LLVMBuildURem(em->b, un.key_b, g->nnb, "");
  LLVMValueRef batch_end =
      LLVMBuildAdd(em->b, LLVMBuildSub(em->b, u, nb, ""), g->nnb, "");
  LLVMValueRef span_end = LLVMBuildSelect(
      em->b, one_mb, tj_emit_min_i64(em, em->arg_end, batch_end),
      LLVMBuildAdd(em->b, u, i64c(em, 1), ""), "span_end");
  LLVMValueRef n_end = tj_emit_min_i64(
      em, g->N,
      LLVMBuildAdd(em->b, un.n0,
                   LLVMBuildMul(em->b, LLVMBuildSub(em->b, span_end, u, ""),
                                i64c(em, s->nc), ""),
                   ""));
  LLVMValueRef nlen = LLVMBuildSub(em->b, n_end, un.n0, "");
  LLVMValueRef b_blk =
      gep_op(em, g->bdt, un.batch.ptr[g->bbuf], b_col(g, un.n0));  // sn == 1
  tj_emit_loop_t ml;
  LLVMValueRef m =
      tj_emit_loop_begin(em, &ml, un.m0, un.m_end, i64c(em, s->tile_m), "dm");
  LLVMValueRef rows = tj_emit_min_i64(em, i64c(em, s->tile_m),
                                      LLVMBuildSub(em->b, un.m_end, m, ""));
  // The microkernel and strip width for these rows.
  LLVMValueRef full = d->fns[s->tile_m], edge = d->edge[s->tile_m];
  LLVMValueRef width = i64c(em, d->width[s->tile_m]);
  for (int32_t r = s->tile_m - 1; r >= 1; --r) {
    LLVMValueRef is_r = LLVMBuildICmp(em->b, LLVMIntEQ, rows, i64c(em, r), "");
    full = LLVMBuildSelect(em->b, is_r, d->fns[r], full, "");
    edge = LLVMBuildSelect(em->b, is_r, d->edge[r], edge, "");
    width = LLVMBuildSelect(em->b, is_r, i64c(em, d->width[r]), width, "");
  }
  LLVMValueRef a_ptr = gep_op(em, g->adt, un.batch.ptr[g->abuf],
                              LLVMBuildMul(em->b, m, g->sa_m, ""));
  // Full strips, then the rest of the span in NR-wide masked pieces (one
  // mask per vector: a masked strip as wide as a full one would need more
  // mask registers than there are, and compiles slowly).
  LLVMValueRef colvar = tj_emit_alloca(em, em->t_i64, "dcol");
  LLVMBuildStore(em->b, i64c(em, 0), colvar);
  LLVMBasicBlockRef jcond =
      LLVMAppendBasicBlockInContext(em->ctx, em->fn, "dstrip");
  LLVMBasicBlockRef jbody =
      LLVMAppendBasicBlockInContext(em->ctx, em->fn, "dstrip");
  LLVMBasicBlockRef jdone =
      LLVMAppendBasicBlockInContext(em->ctx, em->fn, "dstrip");
  LLVMBuildBr(em->b, jcond);
  LLVMPositionBuilderAtEnd(em->b, jcond);
  LLVMValueRef col = LLVMBuildLoad2(em->b, em->t_i64, colvar, "");
  LLVMBuildCondBr(em->b, LLVMBuildICmp(em->b, LLVMIntSLT, col, nlen, ""), jbody,
                  jdone);
  LLVMPositionBuilderAtEnd(em->b, jbody);
  LLVMValueRef cols = LLVMBuildSub(em->b, nlen, col, "");
  LLVMValueRef is_full = LLVMBuildICmp(em->b, LLVMIntSGE, cols, width, "");
  LLVMValueRef fn = LLVMBuildSelect(em->b, is_full, full, edge, "");
  LLVMValueRef step =
      LLVMBuildSelect(em->b, is_full, width, i64c(em, s->tile_n), "");
  LLVMValueRef args[14] = {a_ptr,   g->sa_m,
                           g->sa_k, gep_op(em, g->bdt, b_blk, b_col(g, col)),
                           g->sb_k, g->K,
                           rows,    g->tile,
                           step,    LLVMConstInt(em->t_i1, 0, 0),
                           cols,    NULL,
                           NULL,    NULL};
  if (g->bq.bits) {
    // The scale and zero point at column n0 + col.
    LLVMValueRef c = LLVMBuildAdd(em->b, un.n0, col, "");
    args[11] = gep_f32(em, un.batch.ptr[g->sbuf], c);
    args[12] = g->zbuf != TJ_KIR_NONE ? gep_i8(em, un.batch.ptr[g->zbuf], c)
                                      : LLVMConstNull(em->t_ptr);
    args[13] = g->ss;
  }
  LLVMBuildCall2(em->b, fty, fn, args, g->bq.bits ? 14 : 11, "");
  TJ_RETURN_IF_ERROR(emit_epilogue(em, &un.batch, g->tile, step, rows, m,
                                   LLVMBuildAdd(em->b, un.n0, col, ""), cols,
                                   LLVMBuildUDiv(em->b, step, i64c(em, w), ""),
                                   1));
  LLVMBuildStore(em->b, LLVMBuildAdd(em->b, col, step, ""), colvar);
  LLVMBuildBr(em->b, jcond);
  LLVMPositionBuilderAtEnd(em->b, jdone);
  tj_emit_loop_end(em, &ml);
  LLVMBuildStore(em->b, span_end, uvar);
  LLVMBuildBr(em->b, cond);
  LLVMPositionBuilderAtEnd(em->b, done);
  return NULL;
}

// The values of |g| that live in the function being emitted: sizes,
// block counts, operand strides.
static void gemm_values(gemm_t* g) {
  tj_emit_t* em = g->em;
  g->M = em->dim[g->dm];
  g->N = em->dim[g->dn];
  g->K = em->gemm_k;
  g->nmb = ceil_div(em, g->M, g->s.mc);
  g->nnb = ceil_div(em, g->N, g->s.nc);
  g->sa_m = tj_emit_stride(em, g->abuf, g->dm);
  g->sa_k = tj_emit_stride(em, g->abuf, g->dn);
  g->sb_k = tj_emit_stride(em, g->bbuf, g->dm);
  g->sb_n = tj_emit_stride(em, g->bbuf, g->dn);
  if (g->bq.bits) g->ss = tj_emit_stride(em, g->sbuf, g->dm);
}

// The small-M path as a function of its own, "tj_small_m_<kernel>", with
// the kernel's signature (it takes the kernel's arguments as they are and
// reloads what it needs), noinline and "tj-deferrable". Its loop and its
// copy of the epilogue (GELU's polynomials per strip width) were about
// half of the kernel's LLVM time while inline, and runs with M > 16 never
// need them: as a deferrable function they go, with the microkernels
// they call, to the cold part that the x86 JIT compiles on the first
// small-M run (jit/x86_jit.h). One call per kernel call costs nothing.
static tj_status_t emit_small_m_fn(gemm_t* g, const direct_t* d,
                                   LLVMValueRef* out_fn) {
  tj_emit_t* em = g->em;
  const tj_kir_t* k = em->k;
  *out_fn = NULL;
  char name[256];
  snprintf(name, sizeof(name), "tj_small_m_%s", k->name);
  LLVMValueRef fn =
      LLVMAddFunction(em->mod, name, LLVMGlobalGetValueType(em->fn));
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  add_attrs(em, fn, true);
  static const char kWidth[] = "prefer-vector-width";
  LLVMAttributeRef width = LLVMGetStringAttributeAtIndex(
      em->fn, LLVMAttributeFunctionIndex, kWidth, sizeof(kWidth) - 1);
  if (width) LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, width);
  // The kernel function's emitter state, restored below; the first
  // emission error carries over.
  tj_emit_t saved = *em;
  em->fn = fn;
  em->b = LLVMCreateBuilderInContext(em->ctx);
  em->arg_buffers = LLVMGetParam(fn, 0);
  em->arg_scalars = LLVMGetParam(fn, 1);
  em->arg_scratch = LLVMGetParam(fn, 2);
  em->arg_begin = LLVMGetParam(fn, 3);
  em->arg_end = LLVMGetParam(fn, 4);
  em->entry = LLVMAppendBasicBlockInContext(em->ctx, fn, "entry");
  LLVMPositionBuilderAtEnd(em->b, em->entry);
  // As the kernel's entry block does (jit/emit_llvm.c): what is unused
  // here, O3 removes.
  for (uint32_t p = 0; p < k->num_params; ++p) {
    LLVMValueRef idx = i64c(em, p);
    em->scalar[p] = LLVMBuildLoad2(
        em->b, em->t_i64,
        LLVMBuildGEP2(em->b, em->t_i64, em->arg_scalars, &idx, 1, ""),
        k->param_names[p]);
  }
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    LLVMValueRef idx = i64c(em, b);
    em->base[b] = LLVMBuildLoad2(
        em->b, em->t_ptr,
        LLVMBuildGEP2(em->b, em->t_ptr, em->arg_buffers, &idx, 1, ""),
        k->buffers[b].name);
  }
  for (int32_t dd = 0; dd < k->rank; ++dd) {
    em->dim[dd] = tj_emit_ival(em, k->dims[dd]);
  }
  em->gemm_k = tj_emit_ival(em, k->gemm_k);
  gemm_values(g);
  g->tile = tj_emit_alloca(em, LLVMArrayType(em->t_f32, (unsigned)d->max_tile),
                           "dtile");
  LLVMSetAlignment(g->tile, 64);
  tj_status_t s = emit_direct(g, d);
  if (!s) LLVMBuildRetVoid(em->b);
  LLVMDisposeBuilder(em->b);
  tj_status_t error = em->error;
  *em = saved;
  em->error = error;
  if (s) return s;
  *out_fn = fn;
  return NULL;
}

// The packed path.
static tj_status_t emit_packed(gemm_t* g, LLVMValueRef ukernel, bool pack_a) {
  tj_emit_t* em = g->em;
  const tj_kir_gemm_schedule_t* s = &g->s;
  LLVMTypeRef ukernel_ty = LLVMGlobalGetValueType(ukernel);
  LLVMValueRef K = g->K;
  LLVMValueRef single =
      LLVMBuildICmp(em->b, LLVMIntSLE, K, i64c(em, s->kc), "single_pass");
  LLVMValueRef kc_eff = tj_emit_min_i64(em, K, i64c(em, s->kc));
  LLVMValueRef packed = em->arg_scratch;
  // Scratch layout: packed B, packed A, partial sums (64-byte aligned parts,
  // as tj_kir_launch_info sizes them).
  // (An integer gemm's panels hold a correction row more: kc + 1 rows is
  // enough for it and as tj_kir_launch_info sizes them.)
  LLVMValueRef b_bytes = align64(
      em, LLVMBuildMul(
              em->b,
              g->igroup ? LLVMBuildAdd(em->b, kc_eff, i64c(em, 1), "") : kc_eff,
              i64c(em, (int64_t)s->nc * 4), ""));
  LLVMValueRef apack = gep_i8(em, packed, b_bytes);
  // Packed A: mc / MR slivers of kc * MR floats (dot: ceil(kc / 2) * MR
  // pairs, which fit the same scratch) and a vector of slack.
  LLVMValueRef a_stride =
      LLVMBuildAdd(em->b,
                   LLVMBuildMul(em->b,
                                g->dot      ? ceil_div(em, kc_eff, 2)
                                : g->igroup ? ceil_div(em, kc_eff, g->igroup)
                                            : kc_eff,
                                i64c(em, s->tile_m), ""),
                   i64c(em, em->target.lanes), "a_stride");
  LLVMValueRef a_bytes =
      pack_a ? align64(em, LLVMBuildMul(
                               em->b, a_stride,
                               i64c(em, (int64_t)(s->mc / s->tile_m) * 4), ""))
             : i64c(em, 0);
  LLVMValueRef partial = gep_i8(em, apack, a_bytes);
  LLVMValueRef packed_key = tj_emit_alloca(em, em->t_i64, "packed_key");
  LLVMBuildStore(em->b, i64c(em, -1), packed_key);
  LLVMValueRef packed_a_key = tj_emit_alloca(em, em->t_i64, "packed_a_key");
  LLVMBuildStore(em->b, i64c(em, -1), packed_a_key);

  tj_emit_loop_t units;
  LLVMValueRef u = tj_emit_loop_begin(em, &units, em->arg_begin, em->arg_end,
                                      i64c(em, 1), "unit");
  unit_t un;
  decompose_unit(g, u, pack_a, &un);
  LLVMValueRef b_blk =
      gep_op(em, g->bdt, un.batch.ptr[g->bbuf],
             b_col(g, LLVMBuildMul(em->b, un.n0, g->sb_n, "")));
  // Passes over K; K == 0 still runs one (empty) pass so the epilogue
  // writes C = epilogue(0).
  LLVMValueRef passes = LLVMBuildSelect(
      em->b, LLVMBuildICmp(em->b, LLVMIntEQ, K, i64c(em, 0), ""), i64c(em, 1),
      ceil_div(em, K, s->kc), "");
  tj_emit_loop_t pl;
  LLVMValueRef pass =
      tj_emit_loop_begin(em, &pl, i64c(em, 0), passes, i64c(em, 1), "pass");
  LLVMValueRef k0 = LLVMBuildMul(em->b, pass, i64c(em, s->kc), "k0");
  LLVMValueRef kc =
      tj_emit_min_i64(em, i64c(em, s->kc), LLVMBuildSub(em->b, K, k0, ""));
  // The K extent of this pass in the packed layout's rows: k values, or
  // pairs on the dot path.
  LLVMValueRef kc_rows = g->dot      ? ceil_div(em, kc, 2)
                         : g->igroup ? ceil_div(em, kc, g->igroup)
                                     : kc;
  // A panel's rows: kc_rows, and the correction row (integer quads).
  LLVMValueRef prows =
      g->gb.corr ? LLVMBuildAdd(em->b, kc_rows, i64c(em, 1), "") : kc_rows;
  LLVMValueRef first = LLVMBuildICmp(em->b, LLVMIntEQ, pass, i64c(em, 0), "");
  LLVMValueRef last = LLVMBuildICmp(
      em->b, LLVMIntEQ, LLVMBuildAdd(em->b, pass, i64c(em, 1), ""), passes, "");
  if (!em->k->b_prepacked) {
    LLVMValueRef have = LLVMBuildAnd(
        em->b, single,
        LLVMBuildICmp(em->b, LLVMIntEQ,
                      LLVMBuildLoad2(em->b, em->t_i64, packed_key, ""),
                      un.key_b, ""),
        "");
    tj_emit_if_t pack;
    tj_emit_if_begin(em, &pack, LLVMBuildNot(em->b, have, ""), "pack");
    LLVMValueRef b_src =
        gep_op(em, g->bdt, b_blk, LLVMBuildMul(em->b, k0, g->sb_k, ""));
    if (g->bq.bits) {
      pack_b_quant(em, s, &g->bq, g->bq_group, b_src, g->sb_k,
                   gep_f32(em, un.batch.ptr[g->sbuf], un.n0),
                   g->zbuf != TJ_KIR_NONE
                       ? gep_i8(em, un.batch.ptr[g->zbuf], un.n0)
                       : NULL,
                   g->ss, k0, kc, un.nlen, packed);
    } else if (g->dot) {
      emit_pack_b_pairs(em, s, g->bbuf, b_src, kc, un.nlen, packed);
    } else if (g->igroup) {
      bool unit_n =
          tj_kir_ival_is_const(em->k->buffers[g->bbuf].strides[g->dn], 1);
      pack_b_pairs(em, s, &g->gb, b_src, g->sb_k, g->sb_n, unit_n, i64c(em, 0),
                   kc_rows, kc, prows, un.nlen, packed);
    } else {
      emit_pack_b(em, s, g->bbuf, b_src, kc, un.nlen, packed);
    }
    LLVMBuildStore(em->b,
                   LLVMBuildSelect(em->b, single, un.key_b, i64c(em, -1), ""),
                   packed_key);
    tj_emit_if_end(em, &pack);
  }
  if (pack_a) {
    // The unit's A block, as slivers; reused by the following units of the
    // same m block when K is one pass.
    LLVMValueRef have = LLVMBuildAnd(
        em->b, single,
        LLVMBuildICmp(em->b, LLVMIntEQ,
                      LLVMBuildLoad2(em->b, em->t_i64, packed_a_key, ""),
                      un.key_a, ""),
        "");
    tj_emit_if_t pack;
    tj_emit_if_begin(em, &pack, LLVMBuildNot(em->b, have, ""), "pack_a");
    LLVMValueRef a_src =
        gep_op(em, g->adt, un.batch.ptr[g->abuf],
               LLVMBuildAdd(em->b, LLVMBuildMul(em->b, un.m0, g->sa_m, ""),
                            LLVMBuildMul(em->b, k0, g->sa_k, ""), ""));
    LLVMValueRef mrows = LLVMBuildSub(em->b, un.m_end, un.m0, "");
    if (g->dot || g->igroup) {
      emit_pack_a_pairs(em, s, &g->ga, g->abuf, a_src, kc, mrows, apack,
                        a_stride);
    } else {
      emit_pack_a(em, s, g->abuf, a_src, kc, mrows, apack, a_stride);
    }
    LLVMBuildStore(em->b,
                   LLVMBuildSelect(em->b, single, un.key_a, i64c(em, -1), ""),
                   packed_a_key);
    tj_emit_if_end(em, &pack);
  }
  tj_emit_loop_t ml;
  LLVMValueRef m =
      tj_emit_loop_begin(em, &ml, un.m0, un.m_end, i64c(em, s->tile_m), "m");
  LLVMValueRef rows = tj_emit_min_i64(em, i64c(em, s->tile_m),
                                      LLVMBuildSub(em->b, un.m_end, m, ""));
  LLVMValueRef a_src =
      gep_op(em, g->adt, un.batch.ptr[g->abuf],
             LLVMBuildAdd(em->b, LLVMBuildMul(em->b, m, g->sa_m, ""),
                          LLVMBuildMul(em->b, k0, g->sa_k, ""), ""));
  LLVMValueRef a_ptr = a_src, lda = g->sa_m, ka = g->sa_k;
  if (pack_a) {
    // a_stride was sized with kc_eff >= kc; slivers of this pass use kc.
    a_ptr = gep_f32(
        em, apack,
        LLVMBuildMul(em->b,
                     LLVMBuildUDiv(em->b, LLVMBuildSub(em->b, m, un.m0, ""),
                                   i64c(em, s->tile_m), ""),
                     a_stride, ""));
    lda = i64c(em, 1);
    ka = i64c(em, s->tile_m);
  }
  tj_emit_loop_t jl;
  LLVMValueRef j =
      tj_emit_loop_begin(em, &jl, i64c(em, 0), ceil_div(em, un.nlen, s->tile_n),
                         i64c(em, 1), "panel");
  LLVMValueRef col = LLVMBuildMul(em->b, j, i64c(em, s->tile_n), "");
  LLVMValueRef bp = gep_f32(em, packed, LLVMBuildMul(em->b, col, prows, ""));
  if (em->k->b_prepacked) {
    // Panel (n0 + col) / tile_n of the prepacked B, from its quad row k0 / 4
    // (tj_kir_t.b_prepacked: panels of ceil(K / 4) rows of tile_n lanes).
    int64_t kq = (em->k->gemm_k.value + 3) / 4;
    LLVMValueRef panel = LLVMBuildUDiv(
        em->b, LLVMBuildAdd(em->b, un.n0, col, ""), i64c(em, s->tile_n), "");
    bp = gep_f32(
        em, un.batch.ptr[g->bbuf],
        LLVMBuildMul(
            em->b,
            LLVMBuildAdd(em->b, LLVMBuildMul(em->b, panel, i64c(em, kq), ""),
                         LLVMBuildUDiv(em->b, k0, i64c(em, 4), ""), ""),
            i64c(em, s->tile_n), ""));
  }
  // Single pass: the tile lives on the stack. Several passes: it lives in
  // the unit's partial-sum block, row stride nc.
  LLVMValueRef part_tile = gep_f32(
      em, partial,
      LLVMBuildAdd(em->b,
                   LLVMBuildMul(em->b, LLVMBuildSub(em->b, m, un.m0, ""),
                                i64c(em, s->nc), ""),
                   col, ""));
  LLVMValueRef tptr = LLVMBuildSelect(em->b, single, g->tile, part_tile, "");
  LLVMValueRef ld =
      LLVMBuildSelect(em->b, single, i64c(em, s->tile_n), i64c(em, s->nc), "");
  LLVMValueRef args[11] = {a_ptr,
                           lda,
                           ka,
                           bp,
                           i64c(em, s->tile_n),
                           kc_rows,
                           rows,
                           tptr,
                           ld,
                           LLVMBuildNot(em->b, first, ""),
                           g->a_inplace ? kc : i64c(em, s->tile_n)};
  LLVMBuildCall2(em->b, ukernel_ty, ukernel, args, 11, "");
  tj_emit_if_t epi;
  tj_emit_if_begin(em, &epi, last, "epilogue");
  TJ_RETURN_IF_ERROR(emit_epilogue(
      em, &un.batch, tptr, ld, rows, m, LLVMBuildAdd(em->b, un.n0, col, ""),
      LLVMBuildSub(em->b, un.nlen, col, ""),
      i64c(em, s->tile_n / em->target.lanes), epilogue_group(em, s)));
  tj_emit_if_end(em, &epi);
  // Not unrolled: a panel is a call and an epilogue loop, and a copy per
  // panel of a block cost 5 of the capstone kernel's 34 ms of LLVM time.
  loop_end_no_unroll(em, &jl);
  tj_emit_loop_end(em, &ml);
  tj_emit_loop_end(em, &pl);
  tj_emit_loop_end(em, &units);
  return NULL;
}

bool tj_emit_gemm_prepacks_b(const tj_emit_target_t* target,
                             const tj_kir_t* k) {
  if (k->kind != TJ_KIR_GEMM || !tj_kir_gemm_is_int8(k) || k->bq.bits ||
      k->rank < 2) {
    return false;
  }
  const int32_t w = target->lanes, dm = k->rank - 2, dn = k->rank - 1;
  tj_dtype_t adt = TJ_DTYPE_F32, bdt = TJ_DTYPE_F32;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &k->buffers[b];
    if (buf->role == TJ_KIR_GEMM_A) adt = buf->dtype;
    if (buf->role != TJ_KIR_GEMM_B) continue;
    bdt = buf->dtype;
    // One B for every batch: its batch strides are 0.
    for (int32_t d = 0; d < dm; ++d) {
      if (!tj_kir_ival_is_const(buf->strides[d], 0)) return false;
    }
  }
  if (k->dims[dn].param >= 0 || k->gemm_k.param >= 0) return false;
  tj_kir_gemm_schedule_t s;
  tj_kir_gemm_resolve(k, w, &s);
  // As tj_emit_gemm decides: the AMX tiles (any signs, no correction row),
  // else quads for a u8 A (an s8 A needs the per-pass correction row).
  tj_kir_ival_t mdim = k->dims[dm];
  bool small_m = mdim.param < 0 && mdim.value <= kAmxRows;
  if (target->amx && w == 16 && !small_m && tj_kir_gemm_a_k_contiguous(k) &&
      k->gemm_k.value % 64 == 0 && s.kc % 64 == 0 && s.tile_n == kAmxCols &&
      s.nc % s.tile_n == 0) {
    return true;
  }
  if (s.nc % s.tile_n != 0) return false;  // n blocks of whole panels
  return (target->vnni || k->b_int7) && (w == 16 || w == 8) &&
         bdt == TJ_DTYPE_I8 && adt == TJ_DTYPE_U8 && s.kc % 4 == 0 &&
         tj_kir_gemm_a_k_contiguous(k);
}

tj_status_t tj_emit_gemm(tj_emit_t* em) {
  const tj_kir_t* k = em->k;
  gemm_t g;
  memset(&g, 0, sizeof(g));
  g.em = em;
  tj_kir_gemm_resolve(k, em->target.lanes, &g.s);
  const tj_kir_gemm_schedule_t* s = &g.s;
  const int32_t w = em->target.lanes;
  if (s->tile_n % w != 0 || s->tile_m < 1 || s->tile_m > 16 ||
      s->tile_n / w > 16 || w > 64) {
    return tj_internal("kernel @%s: unresolvable gemm tile %dx%d", k->name,
                       s->tile_m, s->tile_n);
  }
  // swiglu (issue 14): the dual GEMM is the CUDA wgmma kernels' (x86 has
  // no tj_backend_t.dual_gemm, so fuse never forms one for it).
  if (tj_kir_gemm_is_dual(k))
    return tj_unsupported("kernel @%s: a dual gemm on x86", k->name);
  g.zbuf = TJ_KIR_NONE;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    if (k->buffers[b].role == TJ_KIR_GEMM_A) g.abuf = b;
    if (k->buffers[b].role == TJ_KIR_GEMM_B) g.bbuf = b;
    if (k->buffers[b].role == TJ_KIR_GEMM_BSCALE) g.sbuf = b;
    if (k->buffers[b].role == TJ_KIR_GEMM_BZERO) g.zbuf = b;
  }
  g.dm = k->rank - 2;
  g.dn = k->rank - 1;
  g.adt = k->buffers[g.abuf].dtype;
  g.bdt = k->buffers[g.bbuf].dtype;
  // fp8 (issue 17): x86 decomposes matmul_f8 into an f32 GEMM of casts;
  // a float8 GEMM kernel only reaches here when that expansion was skipped
  // (a TJ_BISECT budget).
  if (tj_kir_gemm_is_f8(k)) {
    return tj_unsupported("kernel @%s: no x86 gemm template for float8",
                          k->name);
  }
  if (k->bq.bits) {
    g.bq = (bq_read_t){k->bq.bits, k->bq.int4_signed, g.bdt};
    g.bq_group = k->bq.group;
  }
  bool pack_a = tj_kir_gemm_packs_a(k);
  // vdpbf16ps where the CPU has it. Pairs never straddle two K passes when
  // kc is even (odd only through an explicit schedule: such a kernel takes
  // the widening path).
  g.dot = em->target.avx512bf16 && w == 16 && g.adt == TJ_DTYPE_BF16 &&
          g.bdt == TJ_DTYPE_BF16 && pack_a && s->kc % 2 == 0;
  g.ga = kBf16Pairs;
  // A constant M of at most 16 (decode) keeps the vector kernels: a tile
  // product costs the same for 1 valid row as for 16 (see below).
  tj_kir_ival_t mdim = k->dims[g.dm];
  bool small_m = mdim.param < 0 && mdim.value <= kAmxRows;
  // bf16 on the AMX tiles (see emit_amx_ukernel) when the CPU has
  // amx-bf16, K is a constant multiple of 32 (whole A and B tiles every k
  // step) and A is k-contiguous (read in place): B keeps the dot path's
  // pair panels, A is not packed, 16-row tiles on the packed path.
  bool amx_bf16 = g.dot && em->target.amx_bf16 && !small_m &&
                  tj_kir_gemm_a_k_contiguous(k) && k->gemm_k.param < 0 &&
                  k->gemm_k.value % 32 == 0 && s->kc % 32 == 0 &&
                  s->tile_n == kAmxCols;
  if (amx_bf16) {
    g.amx = true;
    pack_a = false;
  }
  if (tj_kir_gemm_is_int8(k)) {
    // qgemm (issue 17): vpdpbusd quads where the tier has it (AVX512-VNNI,
    // AVX-VNNI) and B is s8 (an s8 A is flipped to u8, its -128 * colsum(B)
    // carried in the panel); else i16 pairs by pmaddwd (any dtypes, every
    // tier). Quads never straddle two K passes when kc % 4 == 0. Without
    // VNNI, a B of 7-bit constants (tj_kir_t.b_int7) still takes the quads,
    // multiplied by vpmaddubsw (exact for them, see ukernel_step_int): A
    // read in place, B's panel half the bytes of the pairs' and twice the
    // products per multiply (AVX2 and x86-64-v4; SSE2 has no pmaddubsw).
    g.igroup = (em->target.vnni || k->b_int7) && (w == 16 || w == 8) &&
                       g.bdt == TJ_DTYPE_I8 && s->kc % 4 == 0
                   ? 4
                   : 2;
    bool quads = g.igroup == 4;
    g.ga = (group_t){g.igroup, g.adt, !quads, quads && g.adt == TJ_DTYPE_I8,
                     false};
    g.gb = (group_t){g.igroup, g.bdt, !quads, false,
                     quads && g.adt == TJ_DTYPE_I8};
    // Quads of a k-contiguous A are 4 consecutive bytes of its row: the
    // microkernel broadcasts them from A in place, as the f32 kernel reads
    // its A, flipping an s8 A in the register. Packing A (gathers along m
    // into [kc/4][MR] slivers, every K pass of every unit) cost as much as
    // the product itself at K = 4096.
    g.a_inplace = quads && tj_kir_gemm_a_k_contiguous(k);
    pack_a = !g.a_inplace;
    // AMX tiles (see emit_amx_ukernel) when K is a constant multiple of
    // 64, A k-contiguous, any signs: B in quads without correction, A in
    // place, 16-row tiles. A constant M of at most 16 (decode) keeps
    // vpdpbusd: a tile product costs the same for 1 valid row as for 16,
    // and such a run is a few short units, each packing its B block (N = K
    // = 4096 on the Xeon, 16 threads: M 1, 0.64 ms on the tiles and 0.17
    // with vpdpbusd; M 16, 0.67 and 0.29; one thread at M 16: 2.41 and
    // 2.53).
    if (em->target.amx && w == 16 && !small_m &&
        tj_kir_gemm_a_k_contiguous(k) && k->gemm_k.param < 0 &&
        k->gemm_k.value % 64 == 0 && s->kc % 64 == 0 && s->tile_n == kAmxCols) {
      g.amx = true;
      g.igroup = 4;
      g.ga = (group_t){4, g.adt, false, false, false};
      g.gb = (group_t){4, g.bdt, false, false, false};
      g.a_inplace = true;
      g.s.tile_m = kAmxRows;
      pack_a = false;
    }
  }
  if (k->b_prepacked && !(g.amx || (g.igroup == 4 && !g.gb.corr))) {
    return tj_internal(
        "gemm %s: B is prepacked but this target does not read it as quads",
        k->name);
  }
  // The in-place path needs B's rows contiguous along n (and f32, f16 or
  // bf16: an integer gemm always packs).
  bool direct =
      !g.igroup && tj_kir_ival_is_const(k->buffers[g.bbuf].strides[g.dn], 1);
  ukernel_opts_t po = {.mr = s->tile_m,
                       .nr = s->tile_n,
                       .chains = 1,
                       .a_dtype = TJ_DTYPE_F32,
                       .b_dtype = TJ_DTYPE_F32,
                       .dot = g.dot,
                       .igroup = g.igroup,
                       .corr = g.gb.corr,
                       .a_inplace = g.a_inplace,
                       .a_flip = g.a_inplace && g.adt == TJ_DTYPE_I8};
  LLVMValueRef ukernel =
      g.amx ? emit_amx_ukernel(em, g.adt, g.bdt) : tj_emit_ukernel(em, &po);
  direct_t d;
  memset(&d, 0, sizeof(d));
  d.max_tile = s->tile_m * s->tile_n;
  if (direct) {
    // Accumulators the register file holds beside the B vectors and the
    // broadcast: 24 of 32 zmm, 12 of 16 ymm/xmm.
    const int32_t max_acc = em->target.avx512 ? 24 : 12, nv = s->tile_n / w;
    // Microkernels for 1, 2, 4, .. rows and tile_m rows; other row counts
    // run the next taller one (its extra rows re-read the last valid row
    // and are never stored). Each variant costs ~6 ms of LLVM time, and
    // the in-place path is memory-bound: an idle row costs little.
    for (int32_t r = 1; r <= s->tile_m; ++r) {
      bool own = r == s->tile_m || (r & (r - 1)) == 0;
      if (!own) continue;
      int32_t q = 1;
      while (q < 4 && r * nv * q * 2 <= max_acc && nv * q * 2 <= 16) q *= 2;
      // Fewer than 8 accumulators cannot hide the FMA latency (4 cycles
      // on 2 pipes): two chains over alternating k then.
      ukernel_opts_t o = {.mr = r,
                          .nr = s->tile_n * q,
                          .direct = true,
                          .chains = r * nv * q < 8 ? 2 : 1,
                          .prefetch_next = q == 1,
                          .a_dtype = g.adt,
                          .b_dtype = g.bdt,
                          .bq_bits = g.bq.bits,
                          .bq_int4_signed = g.bq.int4_signed,
                          .bq_zero = g.zbuf != TJ_KIR_NONE,
                          .bq_qdt = g.bdt,
                          .bq_group = g.bq_group};
      d.fns[r] = tj_emit_ukernel(em, &o);
      // The edge pieces sum in the same order as the full strips (same
      // chains), so a column's value does not depend on where a thread's
      // span begins: threaded runs equal serial ones bit for bit.
      ukernel_opts_t e = o;
      e.nr = s->tile_n;
      e.masked = true;
      e.prefetch_next = true;
      d.edge[r] = tj_emit_ukernel(em, &e);
      d.width[r] = o.nr;
      if (r * o.nr > d.max_tile) d.max_tile = r * o.nr;
    }
    for (int32_t r = s->tile_m - 1; r >= 1; --r) {
      if (d.fns[r]) continue;
      d.fns[r] = d.fns[r + 1];
      d.edge[r] = d.edge[r + 1];
      d.width[r] = d.width[r + 1];
    }
  }

  LLVMValueRef small_fn = NULL;
  if (direct) TJ_RETURN_IF_ERROR(emit_small_m_fn(&g, &d, &small_fn));
  // The packed path's tiles are AMX's 16 rows; the small-M path above
  // keeps the schedule's register tiles.
  if (amx_bf16) g.s.tile_m = kAmxRows;
  gemm_values(&g);
  LLVMTypeRef tile_ty =
      LLVMArrayType(em->t_f32, (unsigned)(s->tile_m * s->tile_n));
  g.tile = tj_emit_alloca(em, tile_ty, "tile");
  LLVMSetAlignment(g.tile, 64);
  if (!direct) return emit_packed(&g, ukernel, pack_a);
  LLVMValueRef small =
      LLVMBuildICmp(em->b, LLVMIntSLE, g.M, i64c(em, SMALL_M), "small_m");
  tj_emit_if_t small_if;
  tj_emit_if_begin(em, &small_if, small, "direct");
  LLVMValueRef args[5] = {em->arg_buffers, em->arg_scalars, em->arg_scratch,
                          em->arg_begin, em->arg_end};
  LLVMBuildCall2(em->b, LLVMGlobalGetValueType(small_fn), small_fn, args, 5,
                 "");
  tj_emit_if_end(em, &small_if);
  tj_emit_if_t big_if;
  tj_emit_if_begin(em, &big_if, LLVMBuildNot(em->b, small, ""), "packed");
  TJ_RETURN_IF_ERROR(emit_packed(&g, ukernel, pack_a));
  tj_emit_if_end(em, &big_if);
  return NULL;
}
