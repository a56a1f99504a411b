// The sm_90a main loop of the 8-bit GEMM (qgemm on CUDA, issue 17):
// wgmma.mma_async m64n<tile_n>k32 .s32 with .s8/.u8 operands (either,
// mixed) and i32 accumulators, for the kernels of matmul_i32
// (tj_kir_gemm_is_int8), and .f32 with .e4m3/.e5m2 operands (either,
// mixed: float8 wgmma takes any pair, so nothing is flipped) and f32
// accumulators for matmul_f8's (fp8, tj_kir_gemm_is_f8).
//
// 8-bit wgmma operands cannot be transposed: A and B must both be K-major
// in shared memory. A k-tile is 128 of k, one 128-byte row per row of A and
// per column of B, in the 128-byte swizzle layout of the bf16 kernel
// (emit_nvptx_wgmma.c): 1024-byte atoms of 8 rows in which 16-byte chunk c
// of row r sits at chunk c ^ (r & 7). A stage holds A's tile_m rows (the
// rows of warpgroup w from 8192 w), then B's tile_n rows. Both descriptors
// start 32 bytes further per k32 (inside the swizzled rows) with SBO 1024.
//   A (k contiguous) is copied global -> shared with 16-byte cp.async.cg,
//     zero-filled past M and K;
//   B with k contiguous (transpose(w) of an [N, K] weight, the layout of
//     Linear and MatMulNBits weights): the same;
//   B with n contiguous ([K, N] row-major, as MatMulInteger gives it):
//     through registers. A thread loads 4x4 blocks (4 rows of k, 4 bytes
//     of n each, 32-bit ld.global; a warp reads 8 blocks of n from each of
//     16 rows, whole 32-byte sectors), transposes each into 4 words of 4
//     consecutive k with byte shuffles and stores them with st.shared.
//     Edge blocks load byte by byte, zero past K and N.
// Pipeline (per k-tile kt, |stages| - 2 k-tiles loading ahead), as the
// bf16 cp.async schedule: cp.async.wait_group, fence.proxy.async (the
// thread's cp.async and st.shared writes become visible to the async
// proxy, which wgmma reads through), bar.sync (so the wgmmas of kt - 2 are
// done in every warpgroup and their stage is free), the four k32 wgmmas of
// kt, the loads of kt + stages - 2, wgmma.wait_group 1. The accumulators
// are tied in/out operands of every wgmma and wait asm (see
// emit_nvptx_wgmma.c for why).
// Mixed signs (u8 x s8, s8 x u8): wgmma with mixed integer types needs PTX
// ISA 8.4 and our sm_90a modules are 8.0, so the u8 operand is flipped to
// s8 (x ^ 0x80 = x - 128) in shared memory: after its cp.async lands each
// thread flips the chunks it copied (before the fence.proxy.async; the
// n-contiguous B flips its words in registers), and the s8 x s8 result
// misses 128 times the other operand's sums along k, which the threads
// accumulate from the stages (dp4a over 32-byte quarters of its rows, the
// 4 quarters of a row in 4 adjacent lanes) and add back when C is staged:
//   A u8: sum (a - 128) b = sum a b - 128 colsum_k(b);
//   B u8: sum a (b - 128) = sum a b - 128 rowsum_k(a).
// Zero fill past K flips to -128 but meets the other operand's zeros there;
// past M or N it only reaches rows and columns of C that are not stored.
// After the loop the accumulator fragment (the f32 m64nNk16 one, as s32)
// is staged in shared memory as i32, where the GEMM template's epilogue
// reads it as the kernel's i32 acc: the dequantization (a cast and the
// row and column scales), zero-point corrections and stores fuse there.

#include <stdio.h>
#include <string.h>

#include "jit/emit_nvptx.h"

#define kBK 128        // k per stage: one 128-byte swizzle row of 8-bit
#define kRow 128       // bytes of a swizzle row
#define kAtom 1024     // 8 rows: the swizzle pattern's period
#define kPanel 8192    // 64 rows of 128 bytes: a warpgroup's A
#define kMaxCopies 16  // 16-byte chunks per thread per operand and stage
#define kMaxBlocks 16  // 4x4 blocks of an n-contiguous B per thread
#define kMaxAcc 128    // i32 accumulators a thread (m64n256)

typedef struct chunk_t {
  LLVMValueRef src;    // pointer of this chunk at k-tile 0
  LLVMValueRef dst;    // i32 byte offset inside the stage
  LLVMValueRef limit;  // i64 k left from the chunk's first element
  LLVMValueRef ok;     // i1: the row is inside M (A) or N (B)
} chunk_t;

typedef struct block_t {
  LLVMValueRef src;     // B[krow, col] at k-tile 0 (clamped inside B)
  LLVMValueRef krow;    // i64 k of the block's first row in the k-tile
  LLVMValueRef col;     // i64 n of its first column
  LLVMValueRef dst[4];  // i32 stage offsets of the words of n col + j
} block_t;

typedef struct qg_t {
  tj_nvptx_emit_t* nv;
  tj_emit_t* em;
  LLVMBuilderRef b;
  const tj_nvptx_qgemm_t* p;
  int32_t threads, a_bytes, stage_bytes, a_copies, b_copies, b_blocks;
  int32_t num_acc, ahead;
  LLVMValueRef ring;       // ptr addrspace(3): the 1024-aligned ring
  LLVMValueRef ring_addr;  // i32: its shared-window address
  LLVMValueRef acc;        // alloca [num_acc x i32]
  LLVMTypeRef acc_struct;  // {i32 x num_acc}: the asm results
  LLVMValueRef wg;         // i32: this thread's warpgroup
  LLVMValueRef k_tiles;    // i64
  // Mixed signs: the summed operand's rows (tile_n of B, tile_m of A),
  // where they start in a stage, the 32-byte units a thread sums, its
  // running sums (alloca [units x i32]) and the sums' shared region.
  int32_t sum_rows, sum_base, sum_units;
  LLVMValueRef sums;
  int32_t sums_offset;  // bytes past the ring's start
  chunk_t a_copy[kMaxCopies], b_copy[kMaxCopies];
  block_t b_block[kMaxBlocks];
} qg_t;

static LLVMValueRef c32(qg_t* q, int64_t v) {
  return LLVMConstInt(q->em->t_i32, (unsigned long long)v, 1);
}
static LLVMValueRef c64(qg_t* q, int64_t v) {
  return LLVMConstInt(q->em->t_i64, (unsigned long long)v, 1);
}

static LLVMValueRef at(qg_t* q, LLVMValueRef base, LLVMValueRef off) {
  return LLVMBuildGEP2(q->b, q->em->t_i8, base, &off, 1, "");
}

static LLVMValueRef call(qg_t* q, const char* name, LLVMValueRef* args,
                         unsigned n) {
  return tj_emit_intrinsic(q->em, name, NULL, 0, args, n);
}

// Inline PTX: LLVM 19 has no wgmma, fence.proxy or descriptor intrinsics.
static LLVMValueRef inline_asm(qg_t* q, LLVMTypeRef ret, const char* text,
                               const char* constraints, LLVMValueRef* args,
                               unsigned n) {
  return tj_emit_inline_asm(q->em, ret, text, constraints, args, n);
}

static void plain_asm(qg_t* q, const char* text) {
  inline_asm(q, q->em->t_void, text, "~{memory}", NULL, 0);
}

static LLVMValueRef acc_slot(qg_t* q, int32_t i) {
  LLVMValueRef idx[2] = {c32(q, 0), c32(q, i)};
  return LLVMBuildGEP2(q->b, LLVMArrayType2(q->em->t_i32, (unsigned)q->num_acc),
                       q->acc, idx, 2, "");
}

// Runs |text| with the accumulators as tied in/out operands $0.. and
// |extra| further inputs (constraints |extra_cons|) after them.
static void acc_asm(qg_t* q, const char* text, LLVMValueRef* extra,
                    int32_t num_extra, const char* extra_cons) {
  int32_t n = q->num_acc;
  char cons[1400];
  size_t len = 0;
  for (int32_t i = 0; i < n; ++i)
    len += (size_t)snprintf(cons + len, sizeof(cons) - len, "=r,");
  len += (size_t)snprintf(cons + len, sizeof(cons) - len, "%s", extra_cons);
  for (int32_t i = 0; i < n; ++i)
    len += (size_t)snprintf(cons + len, sizeof(cons) - len, "%s%d",
                            len && cons[len - 1] != ',' ? "," : "", i);
  snprintf(cons + len, sizeof(cons) - len, ",~{memory}");
  LLVMValueRef args[kMaxAcc + 4];
  for (int32_t i = 0; i < num_extra; ++i) args[i] = extra[i];
  for (int32_t i = 0; i < n; ++i)
    args[num_extra + i] =
        LLVMBuildLoad2(q->b, q->em->t_i32, acc_slot(q, i), "");
  LLVMValueRef r =
      inline_asm(q, q->acc_struct, text, cons, args, (unsigned)(num_extra + n));
  for (int32_t i = 0; i < n; ++i)
    LLVMBuildStore(q->b, LLVMBuildExtractValue(q->b, r, (unsigned)i, ""),
                   acc_slot(q, i));
}

static void wgmma_wait(qg_t* q, int32_t pending) {
  char text[64];
  snprintf(text, sizeof(text), "wgmma.wait_group.sync.aligned %d;",
           (int)pending);
  acc_asm(q, text, NULL, 0, "");
}

// The wgmma operand type of an 8-bit dtype: s8, u8, or the float8
// formats (fp8, issue 17).
static const char* wgmma_type(tj_dtype_t dt) {
  switch (dt) {
    case TJ_DTYPE_U8:
      return "u8";
    case TJ_DTYPE_F8E4M3:
      return "e4m3";
    case TJ_DTYPE_F8E5M2:
      return "e5m2";
    default:
      return "s8";
  }
}

static bool is_float8(tj_dtype_t dt) {
  return dt == TJ_DTYPE_F8E4M3 || dt == TJ_DTYPE_F8E5M2;
}

// One m64n<tile_n>k32 on descriptors |da| and |db| (i64): D = A B + D
// when |accumulate| (i32) is nonzero, else D = A B. Integer wgmma has no
// scale or transpose operands; float8 wgmma (f32 accumulators, held in the
// same 32-bit registers: PTX lets a .b32 register stand for an .f32 one)
// takes the operand scales +1 and no transposes.
static void wgmma(qg_t* q, LLVMValueRef da, LLVMValueRef db,
                  LLVMValueRef accumulate) {
  int32_t n = q->num_acc;
  bool f8 = is_float8(q->p->a_dtype);
  char text[2400];
  size_t len =
      (size_t)snprintf(text, sizeof(text),
                       "{\n.reg .pred p;\nsetp.ne.b32 p, $%d, 0;\n"
                       "wgmma.mma_async.sync.aligned.m64n%dk32.%s.%s.%s {",
                       (int)n + 2, (int)q->p->tile_n, f8 ? "f32" : "s32",
                       q->p->flip_a ? "s8" : wgmma_type(q->p->a_dtype),
                       q->p->flip_b ? "s8" : wgmma_type(q->p->b_dtype));
  for (int32_t i = 0; i < n; ++i)
    len += (size_t)snprintf(text + len, sizeof(text) - len, "%s$%d",
                            i ? "," : "", (int)i);
  snprintf(text + len, sizeof(text) - len, "}, $%d, $%d, p%s;\n}", (int)n,
           (int)n + 1, f8 ? ", 1, 1" : "");
  LLVMValueRef d[3] = {da, db, accumulate};
  acc_asm(q, text, d, 3, "l,l,r,");
}

// A K-major shared-memory matrix descriptor: start |addr| (i32), 128-byte
// swizzle, 8-row atoms 1024 bytes apart (LBO unused).
static LLVMValueRef descriptor(qg_t* q, LLVMValueRef addr) {
  return tj_nvptx_wgmma_descriptor(q->em, addr, 16, kAtom);
}

// min(max(v, 0), hi) for i64 |v|.
static LLVMValueRef clamp0(qg_t* q, LLVMValueRef v, int64_t hi) {
  LLVMValueRef lo = tj_emit_select(
      q->em, LLVMBuildICmp(q->b, LLVMIntSLT, v, c64(q, 0), ""), c64(q, 0), v);
  return tj_emit_min_i64(q->em, lo, c64(q, hi));
}

//===--- copies ---===//

// The 16-byte chunks of a K-major operand (buffer |buf| from |base|, rows
// |stride| elements apart, |origin| its first row, |rows| its extent) into
// the stage at byte |dst0|.
static void kmajor_setup(qg_t* q, chunk_t* out, int32_t copies, uint32_t buf,
                         LLVMValueRef base, LLVMValueRef stride,
                         LLVMValueRef origin, LLVMValueRef rows, int32_t dst0) {
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  for (int32_t i = 0; i < copies; ++i) {
    // Chunk c = tid + threads i: row c / 8, chunk c % 8 of the row.
    LLVMValueRef c = LLVMBuildAdd(b, q->p->tid, c32(q, i * q->threads), "");
    LLVMValueRef row = LLVMBuildLShr(b, c, c32(q, 3), "");
    LLVMValueRef ch = LLVMBuildAnd(b, c, c32(q, 7), "");
    chunk_t* k = &out[i];
    k->dst = LLVMBuildAdd(
        b, c32(q, dst0),
        LLVMBuildAdd(
            b, LLVMBuildMul(b, row, c32(q, kRow), ""),
            LLVMBuildShl(
                b, LLVMBuildXor(b, ch, LLVMBuildAnd(b, row, c32(q, 7), ""), ""),
                c32(q, 4), ""),
            ""),
        "");
    LLVMValueRef g =
        LLVMBuildAdd(b, origin, LLVMBuildZExt(b, row, em->t_i64, ""), "");
    LLVMValueRef col =
        LLVMBuildMul(b, LLVMBuildZExt(b, ch, em->t_i64, ""), c64(q, 16), "");
    k->ok = LLVMBuildICmp(b, LLVMIntSLT, g, rows, "");
    // Rows past the extent point at the origin's (and copy 0 bytes).
    LLVMValueRef off = LLVMBuildAdd(
        b, LLVMBuildMul(b, tj_emit_select(em, k->ok, g, origin), stride, ""),
        col, "");
    k->src = tj_emit_advance(em, buf, base, off);
    k->limit = LLVMBuildSub(b, q->p->kdim, col, "");
  }
}

// The 4x4 blocks of an n-contiguous B: block c = tid + threads i covers n
// 4 (8 (c / 32 % G) + c % 8) and k 4 (4 (c / 32 / G) + c / 8 % 4) of the
// tile, G = tile_n / 32, so that a warp reads 32 bytes of n from 16 rows.
static void nmajor_setup(qg_t* q) {
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  const tj_nvptx_qgemm_t* p = q->p;
  int32_t groups = p->tile_n / 32;
  for (int32_t i = 0; i < q->b_blocks; ++i) {
    LLVMValueRef c = LLVMBuildAdd(b, p->tid, c32(q, i * q->threads), "");
    LLVMValueRef r = LLVMBuildLShr(b, c, c32(q, 5), "");
    LLVMValueRef nq = LLVMBuildAdd(
        b,
        LLVMBuildMul(b, LLVMBuildURem(b, r, c32(q, groups), ""), c32(q, 8), ""),
        LLVMBuildAnd(b, c, c32(q, 7), ""), "");
    LLVMValueRef kq = LLVMBuildAdd(
        b,
        LLVMBuildMul(b, LLVMBuildUDiv(b, r, c32(q, groups), ""), c32(q, 4), ""),
        LLVMBuildAnd(b, LLVMBuildLShr(b, c, c32(q, 3), ""), c32(q, 3), ""), "");
    LLVMValueRef nl = LLVMBuildShl(b, nq, c32(q, 2), "");
    LLVMValueRef kl = LLVMBuildShl(b, kq, c32(q, 2), "");
    block_t* k = &q->b_block[i];
    // Word j (n nl + j, k kl..kl + 3) at row nl + j of B's part of the
    // stage, chunk kl / 16 swizzled by the row, byte kl % 16 of it; nl is a
    // multiple of 4, so (nl + j) & 7 is (nl & 7) + j.
    LLVMValueRef chunk = LLVMBuildLShr(b, kl, c32(q, 4), "");
    LLVMValueRef in_chunk = LLVMBuildAnd(b, kl, c32(q, 15), "");
    LLVMValueRef n7 = LLVMBuildAnd(b, nl, c32(q, 7), "");
    for (int32_t j = 0; j < 4; ++j) {
      LLVMValueRef row = LLVMBuildAdd(b, nl, c32(q, j), "");
      LLVMValueRef sw =
          LLVMBuildXor(b, chunk, LLVMBuildAdd(b, n7, c32(q, j), ""), "");
      k->dst[j] = LLVMBuildAdd(
          b, c32(q, q->a_bytes),
          LLVMBuildAdd(
              b, LLVMBuildMul(b, row, c32(q, kRow), ""),
              LLVMBuildAdd(b, LLVMBuildShl(b, sw, c32(q, 4), ""), in_chunk, ""),
              ""),
          "");
    }
    k->krow = LLVMBuildZExt(b, kl, em->t_i64, "");
    k->col = LLVMBuildAdd(b, p->n0, LLVMBuildZExt(b, nl, em->t_i64, ""), "");
    // Columns past N start at n0 (their bytes are zero).
    LLVMValueRef safe = tj_emit_select(
        em, LLVMBuildICmp(b, LLVMIntSLT, k->col, p->n, ""), k->col, p->n0);
    k->src = tj_emit_advance(
        em, p->b, p->b_base,
        LLVMBuildAdd(b, LLVMBuildMul(b, k->krow, p->sb, ""), safe, ""));
  }
}

static LLVMValueRef stage_offset(qg_t* q, LLVMValueRef stage) {
  return LLVMBuildTrunc(q->b,
                        LLVMBuildMul(q->b, stage, c64(q, q->stage_bytes), ""),
                        q->em->t_i32, "");
}

static void cp_async16(qg_t* q, LLVMValueRef base, LLVMValueRef dst,
                       LLVMValueRef src, LLVMValueRef bytes) {
  LLVMValueRef args[3] = {
      at(q, base, dst),
      LLVMBuildAddrSpaceCast(q->b, src, q->nv->t_ptr_global, ""),
      LLVMBuildTrunc(q->b, bytes, q->em->t_i32, "")};
  call(q, "llvm.nvvm.cp.async.cg.shared.global.16.s", args, 3);
}

// The chunks |c| (of buffer |buf|) of k-tile |kt| at k |k0|, into the
// stage at |base|; whole ones when |full| is true.
static void load_chunks(qg_t* q, const chunk_t* c, int32_t n, uint32_t buf,
                        LLVMValueRef base, LLVMValueRef kt, LLVMValueRef k0,
                        bool full) {
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  LLVMValueRef step = LLVMBuildMul(b, kt, c64(q, kBK), "");
  for (int32_t i = 0; i < n; ++i) {
    if (full) {
      LLVMValueRef args[2] = {
          at(q, base, c[i].dst),
          LLVMBuildAddrSpaceCast(b, tj_emit_advance(em, buf, c[i].src, step),
                                 q->nv->t_ptr_global, "")};
      call(q, "llvm.nvvm.cp.async.cg.shared.global.16", args, 2);
      continue;
    }
    LLVMValueRef left = clamp0(q, LLVMBuildSub(b, c[i].limit, k0, ""), 16);
    LLVMValueRef bytes = tj_emit_select(em, c[i].ok, left, c64(q, 0));
    LLVMValueRef src = tj_emit_advance(
        em, buf, c[i].src,
        tj_emit_select(em, LLVMBuildICmp(b, LLVMIntSGT, bytes, c64(q, 0), ""),
                       step, c64(q, 0)));
    cp_async16(q, base, c[i].dst, src, bytes);
  }
}

// The thread's chunks |c| of the stage at |base|, xor 0x80 in every byte.
static void flip_chunks(qg_t* q, const chunk_t* c, int32_t n,
                        LLVMValueRef base) {
  LLVMTypeRef v4 = LLVMVectorType(q->em->t_i32, 4);
  LLVMValueRef bits[4];
  for (int32_t j = 0; j < 4; ++j) bits[j] = c32(q, (int32_t)0x80808080);
  LLVMValueRef mask = LLVMConstVector(bits, 4);
  for (int32_t i = 0; i < n; ++i) {
    LLVMValueRef ptr = at(q, base, c[i].dst);
    LLVMValueRef v = LLVMBuildLoad2(q->b, v4, ptr, "");
    LLVMSetAlignment(v, 16);
    LLVMSetAlignment(LLVMBuildStore(q->b, LLVMBuildXor(q->b, v, mask, ""), ptr),
                     16);
  }
}

static LLVMValueRef global_load(qg_t* q, LLVMTypeRef ty, LLVMValueRef ptr,
                                unsigned align) {
  LLVMValueRef v = LLVMBuildLoad2(
      q->b, ty, LLVMBuildAddrSpaceCast(q->b, ptr, q->nv->t_ptr_global, ""), "");
  LLVMSetAlignment(v, align);
  return v;
}

static void shared_store(qg_t* q, LLVMValueRef base, LLVMValueRef off,
                         LLVMValueRef v) {
  LLVMSetAlignment(LLVMBuildStore(q->b, v, at(q, base, off)), 4);
}

// The 4x4 blocks of an n-contiguous B for k-tile |kt| at k |k0|.
static void load_blocks(qg_t* q, LLVMValueRef base, LLVMValueRef kt,
                        LLVMValueRef k0, bool full) {
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  const tj_nvptx_qgemm_t* p = q->p;
  LLVMValueRef step =
      LLVMBuildMul(b, LLVMBuildMul(b, kt, c64(q, kBK), ""), p->sb, "");
  // Word j of the result is byte j of the 4 rows: a 4x4 byte transpose.
  LLVMValueRef mask[16];
  for (int32_t j = 0; j < 4; ++j) {
    for (int32_t i = 0; i < 4; ++i) mask[j * 4 + i] = c32(q, i * 4 + j);
  }
  LLVMValueRef transpose = LLVMConstVector(mask, 16);
  LLVMTypeRef v4 = LLVMVectorType(em->t_i32, 4);
  LLVMTypeRef v16 = LLVMVectorType(em->t_i8, 16);
  for (int32_t i = 0; i < q->b_blocks; ++i) {
    const block_t* k = &q->b_block[i];
    LLVMValueRef src = tj_emit_advance(em, p->b, k->src, step);
    if (full) {
      LLVMValueRef rows = LLVMGetUndef(v4);
      for (int32_t r = 0; r < 4; ++r) {
        LLVMValueRef ptr = tj_emit_advance(
            em, p->b, src, LLVMBuildMul(b, c64(q, r), p->sb, ""));
        rows = LLVMBuildInsertElement(
            b, rows, global_load(q, em->t_i32, ptr, 4), c32(q, r), "");
      }
      LLVMValueRef bytes = LLVMBuildBitCast(b, rows, v16, "");
      LLVMValueRef words = LLVMBuildBitCast(
          b, LLVMBuildShuffleVector(b, bytes, bytes, transpose, ""), v4, "");
      for (int32_t j = 0; j < 4; ++j) {
        LLVMValueRef wj = LLVMBuildExtractElement(b, words, c32(q, j), "");
        if (p->flip_b)
          wj = LLVMBuildXor(b, wj, c32(q, (int32_t)0x80808080), "");
        shared_store(q, base, k->dst[j], wj);
      }
      continue;
    }
    LLVMValueRef word[4] = {c32(q, 0), c32(q, 0), c32(q, 0), c32(q, 0)};
    for (int32_t r = 0; r < 4; ++r) {
      LLVMValueRef k_ok = LLVMBuildICmp(
          b, LLVMIntSLT,
          LLVMBuildAdd(b, k0, LLVMBuildAdd(b, k->krow, c64(q, r), ""), ""),
          p->kdim, "");
      for (int32_t j = 0; j < 4; ++j) {
        LLVMValueRef ok = LLVMBuildAnd(
            b, k_ok,
            LLVMBuildICmp(b, LLVMIntSLT, LLVMBuildAdd(b, k->col, c64(q, j), ""),
                          p->n, ""),
            "");
        LLVMValueRef off = LLVMBuildAdd(
            b, LLVMBuildAdd(b, step, LLVMBuildMul(b, c64(q, r), p->sb, ""), ""),
            c64(q, j), "");
        // A byte past K or N reads B[0, 0] (the block's own rows may be
        // past K: K < 128) and is dropped.
        LLVMValueRef ptr = LLVMBuildSelect(
            b, ok, tj_emit_advance(em, p->b, k->src, off), p->b_base, "");
        LLVMValueRef v =
            LLVMBuildZExt(b, global_load(q, em->t_i8, ptr, 1), em->t_i32, "");
        v = tj_emit_select(em, ok, v, c32(q, 0));
        word[j] =
            LLVMBuildOr(b, word[j], LLVMBuildShl(b, v, c32(q, 8 * r), ""), "");
      }
    }
    for (int32_t j = 0; j < 4; ++j) {
      if (p->flip_b)
        word[j] = LLVMBuildXor(b, word[j], c32(q, (int32_t)0x80808080), "");
      shared_store(q, base, k->dst[j], word[j]);
    }
  }
}

// Issues the loads of k-tile |kt| into stage |stage| (both i64); |inner|
// (i1): the block's tile is inside M and N.
static void load_tile(qg_t* q, LLVMValueRef stage, LLVMValueRef kt,
                      LLVMValueRef inner) {
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  const tj_nvptx_qgemm_t* p = q->p;
  LLVMValueRef base = at(q, q->ring, stage_offset(q, stage));
  LLVMValueRef k0 = LLVMBuildMul(b, kt, c64(q, kBK), "k0");
  LLVMValueRef full = LLVMBuildAnd(
      b, inner,
      LLVMBuildICmp(b, LLVMIntSLE, LLVMBuildAdd(b, k0, c64(q, kBK), ""),
                    p->kdim, ""),
      "");
  for (int pass = 0; pass < 2; ++pass) {
    tj_emit_if_t branch;
    tj_emit_if_begin(em, &branch, pass ? LLVMBuildNot(b, full, "") : full,
                     pass ? "edge_tile" : "full_tile");
    load_chunks(q, q->a_copy, q->a_copies, p->a, base, kt, k0, !pass);
    if (p->b_kmajor)
      load_chunks(q, q->b_copy, q->b_copies, p->b, base, kt, k0, !pass);
    else
      load_blocks(q, base, kt, k0, !pass);
    tj_emit_if_end(em, &branch);
  }
}

static void cp_commit(qg_t* q) {
  call(q, "llvm.nvvm.cp.async.commit.group", NULL, 0);
}

static void cp_wait(qg_t* q, int32_t pending) {
  LLVMValueRef n = c32(q, pending);
  call(q, "llvm.nvvm.cp.async.wait.group", &n, 1);
}

//===--- mixed signs: the other operand's sums along k ---===//

// Unit u = tid + threads j of the summed rows: row u / 4, physical chunks
// 2 (u % 4) and 2 (u % 4) + 1 of it (a row's 8 chunks in some swizzled
// order: the sum does not care which k is where).
static LLVMValueRef unit_offset(qg_t* q, int32_t j) {
  LLVMBuilderRef b = q->b;
  LLVMValueRef u = LLVMBuildAdd(b, q->p->tid, c32(q, j * q->threads), "");
  return LLVMBuildAdd(
      b, c32(q, q->sum_base),
      LLVMBuildAdd(
          b,
          LLVMBuildMul(b, LLVMBuildLShr(b, u, c32(q, 2), ""), c32(q, kRow), ""),
          LLVMBuildMul(b, LLVMBuildAnd(b, u, c32(q, 3), ""), c32(q, 32), ""),
          ""),
      "");
}

static LLVMValueRef sum_slot(qg_t* q, int32_t j) {
  LLVMValueRef idx[2] = {c32(q, 0), c32(q, j)};
  return LLVMBuildGEP2(q->b,
                       LLVMArrayType2(q->em->t_i32, (unsigned)q->sum_units),
                       q->sums, idx, 2, "");
}

// Adds the signed bytes of the thread's units in stage |stage| (i64) to
// its running sums.
static void sum_stage(qg_t* q, LLVMValueRef stage) {
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  LLVMValueRef base = at(q, q->ring, stage_offset(q, stage));
  LLVMTypeRef v4 = LLVMVectorType(em->t_i32, 4);
  for (int32_t j = 0; j < q->sum_units; ++j) {
    LLVMValueRef ptr = at(q, base, unit_offset(q, j));
    LLVMValueRef s = LLVMBuildLoad2(b, em->t_i32, sum_slot(q, j), "");
    for (int32_t h = 0; h < 2; ++h) {
      LLVMValueRef v = LLVMBuildLoad2(b, v4, at(q, ptr, c32(q, 16 * h)), "");
      LLVMSetAlignment(v, 16);
      for (int32_t e = 0; e < 4; ++e) {
        LLVMValueRef args[3] = {LLVMBuildExtractElement(b, v, c32(q, e), ""),
                                c32(q, 0x01010101), s};
        s = inline_asm(q, em->t_i32, "dp4a.s32.s32 $0, $1, $2, $3;", "=r,r,r,r",
                       args, 3);
      }
    }
    LLVMBuildStore(b, s, sum_slot(q, j));
  }
}

// Combines the 4 lanes of each row and stores the row sums (i32) at the
// sums region, row r at 4 r.
static void store_sums(qg_t* q) {
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  for (int32_t j = 0; j < q->sum_units; ++j) {
    LLVMValueRef s = LLVMBuildLoad2(b, em->t_i32, sum_slot(q, j), "");
    for (int32_t off = 1; off <= 2; off *= 2) {
      LLVMValueRef args[4] = {c32(q, -1), s, c32(q, off), c32(q, 0x1f)};
      s = LLVMBuildAdd(b, s, call(q, "llvm.nvvm.shfl.sync.bfly.i32", args, 4),
                       "");
    }
    LLVMValueRef u = LLVMBuildAdd(b, q->p->tid, c32(q, j * q->threads), "");
    tj_emit_if_t first;
    tj_emit_if_begin(
        em, &first,
        LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildAnd(b, u, c32(q, 3), ""),
                      c32(q, 0), ""),
        "row_sum");
    LLVMValueRef off = LLVMBuildAdd(
        b, c32(q, q->sums_offset),
        LLVMBuildShl(b, LLVMBuildLShr(b, u, c32(q, 2), ""), c32(q, 2), ""), "");
    LLVMSetAlignment(LLVMBuildStore(b, s, at(q, q->ring, off)), 4);
    tj_emit_if_end(em, &first);
  }
}

// 128 times the sum of row |r| (i32, in the tile) of the summed operand.
static LLVMValueRef correction(qg_t* q, LLVMValueRef r) {
  LLVMValueRef off = LLVMBuildAdd(q->b, c32(q, q->sums_offset),
                                  LLVMBuildShl(q->b, r, c32(q, 2), ""), "");
  LLVMValueRef v = LLVMBuildLoad2(q->b, q->em->t_i32, at(q, q->ring, off), "");
  LLVMSetAlignment(v, 4);
  return LLVMBuildShl(q->b, v, c32(q, 7), "");
}

//===--- math ---===//

// The four k32 steps of k-tile |kt| in stage |stage| (both i64).
static void compute_tile(qg_t* q, LLVMValueRef kt, LLVMValueRef stage) {
  LLVMBuilderRef b = q->b;
  LLVMValueRef base =
      LLVMBuildAdd(b, q->ring_addr, stage_offset(q, stage), "stage_addr");
  LLVMValueRef a_addr =
      LLVMBuildAdd(b, base, LLVMBuildMul(b, q->wg, c32(q, kPanel), ""), "");
  LLVMValueRef b_addr = LLVMBuildAdd(b, base, c32(q, q->a_bytes), "");
  plain_asm(q, "wgmma.fence.sync.aligned;");
  for (int32_t kk = 0; kk < kBK / 32; ++kk) {
    LLVMValueRef da =
        descriptor(q, LLVMBuildAdd(b, a_addr, c32(q, kk * 32), ""));
    LLVMValueRef db =
        descriptor(q, LLVMBuildAdd(b, b_addr, c32(q, kk * 32), ""));
    // The first k32 overwrites the accumulators, which start undefined
    // (zeroing them inside the pipeline makes ptxas serialize, C7515).
    LLVMValueRef accumulate =
        kk ? c32(q, 1)
           : LLVMBuildZExt(b, LLVMBuildICmp(b, LLVMIntNE, kt, c64(q, 0), ""),
                           q->em->t_i32, "");
    wgmma(q, da, db, accumulate);
  }
  plain_asm(q, "wgmma.commit_group.sync.aligned;");
}

// Writes the accumulators to the staged C tile at |smem| as i32, zeros
// where |any| (i1) is false (K = 0 ran no wgmma). Thread t of warpgroup
// wg (warp w = t / 32 % 4, lane l) holds, in register i, row 64 wg + 16 w
// + l / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (l % 4) + i % 2.
static void stage_c(qg_t* q, LLVMValueRef any) {
  LLVMBuilderRef b = q->b;
  tj_emit_t* em = q->em;
  const tj_nvptx_qgemm_t* p = q->p;
  LLVMValueRef w =
      LLVMBuildAnd(b, LLVMBuildLShr(b, p->tid, c32(q, 5), ""), c32(q, 3), "");
  LLVMValueRef lane = LLVMBuildAnd(b, p->tid, c32(q, 31), "");
  LLVMValueRef row =
      LLVMBuildAdd(b,
                   LLVMBuildAdd(b, LLVMBuildMul(b, q->wg, c32(q, 64), ""),
                                LLVMBuildMul(b, w, c32(q, 16), ""), ""),
                   LLVMBuildLShr(b, lane, c32(q, 2), ""), "");
  LLVMValueRef col0 =
      LLVMBuildMul(b, LLVMBuildAnd(b, lane, c32(q, 3), ""), c32(q, 2), "");
  LLVMValueRef base = LLVMBuildMul(
      b,
      LLVMBuildAdd(b, LLVMBuildMul(b, row, c32(q, p->c_stride), ""), col0, ""),
      c32(q, 4), "");
  LLVMTypeRef v2 = LLVMVectorType(em->t_i32, 2);
  // Mixed signs: the flipped operand's missing 128 * sums (by row of C
  // for a flipped B, by column for a flipped A); zero when K is 0.
  LLVMValueRef row_fix[2] = {NULL, NULL};
  for (int32_t h = 0; h < 2 && p->flip_b; ++h)
    row_fix[h] = correction(q, LLVMBuildAdd(b, row, c32(q, 8 * h), ""));
  for (int32_t i = 0; i < q->num_acc; i += 2) {
    int32_t off = ((8 * ((i / 2) % 2)) * p->c_stride + 8 * (i / 4)) * 4;
    LLVMValueRef v = LLVMGetUndef(v2);
    for (int32_t e = 0; e < 2; ++e) {
      LLVMValueRef x = LLVMBuildLoad2(b, em->t_i32, acc_slot(q, i + e), "");
      if (p->flip_b) x = LLVMBuildAdd(b, x, row_fix[(i / 2) % 2], "");
      if (p->flip_a)
        x = LLVMBuildAdd(
            b, x,
            correction(q, LLVMBuildAdd(b, col0, c32(q, 8 * (i / 4) + e), "")),
            "");
      x = tj_emit_select(em, any, x, c32(q, 0));
      v = LLVMBuildInsertElement(b, v, x, c32(q, e), "");
    }
    LLVMValueRef st = LLVMBuildStore(
        b, v, at(q, p->smem, LLVMBuildAdd(b, base, c32(q, off), "")));
    LLVMSetAlignment(st, 8);
  }
}

//===--- entry ---===//

static int32_t ring_bytes(const tj_nvptx_qgemm_t* p) {
  return p->stages * (p->tile_m + p->tile_n) * kRow;
}

// The sums of a mixed-sign GEMM: one i32 a row of the summed operand.
static int32_t sums_bytes(const tj_nvptx_qgemm_t* p) {
  if (p->flip_a) return p->tile_n * 4;
  return p->flip_b ? p->tile_m * 4 : 0;
}

int32_t tj_nvptx_qgemm_shared_bytes(const tj_nvptx_qgemm_t* p,
                                    int32_t c_bytes) {
  int32_t ring = ring_bytes(p);
  return (ring > c_bytes ? ring : c_bytes) + sums_bytes(p) + kAtom;
}

tj_status_t tj_nvptx_emit_qgemm(tj_nvptx_emit_t* nv,
                                const tj_nvptx_qgemm_t* p) {
  if ((p->tile_m != 64 && p->tile_m != 128) ||
      (p->tile_n != 64 && p->tile_n != 128 && p->tile_n != 256) ||
      p->stages < 3 || p->stages > 8 || (p->flip_a && p->flip_b))
    return tj_internal("qgemm: a %dx%d tile with %d stages", (int)p->tile_m,
                       (int)p->tile_n, (int)p->stages);
  qg_t q;
  memset(&q, 0, sizeof(q));
  q.nv = nv;
  q.em = &nv->em;
  q.b = nv->em.b;
  q.p = p;
  tj_emit_t* em = q.em;
  LLVMBuilderRef b = q.b;
  q.threads = p->tile_m / 64 * 128;
  q.a_bytes = p->tile_m * kRow;
  q.stage_bytes = q.a_bytes + p->tile_n * kRow;
  q.a_copies = p->tile_m * 8 / q.threads;
  q.b_copies = p->b_kmajor ? p->tile_n * 8 / q.threads : 0;
  q.b_blocks = p->b_kmajor ? 0 : kBK / 4 * p->tile_n / 4 / q.threads;
  q.num_acc = p->tile_n / 2;
  q.ahead = p->stages - 2;
  LLVMTypeRef ints[kMaxAcc];
  for (int32_t i = 0; i < q.num_acc; ++i) ints[i] = em->t_i32;
  q.acc_struct = LLVMStructTypeInContext(em->ctx, ints, (unsigned)q.num_acc, 0);
  q.acc =
      tj_emit_alloca(em, LLVMArrayType2(em->t_i32, (unsigned)q.num_acc), "acc");
  for (int32_t i = 0; i < q.num_acc; ++i)
    LLVMBuildStore(b, LLVMGetUndef(em->t_i32), acc_slot(&q, i));
  // The swizzle is a function of the shared address: align the ring to
  // its 1024-byte period (the launch adds that much slack).
  LLVMValueRef addr = LLVMBuildPtrToInt(b, p->smem, em->t_i32, "");
  LLVMValueRef pad = LLVMBuildAnd(b, LLVMBuildSub(b, c32(&q, 0), addr, ""),
                                  c32(&q, kAtom - 1), "");
  q.ring = at(&q, p->smem, pad);
  q.ring_addr = LLVMBuildAdd(b, addr, pad, "ring_addr");
  q.wg = LLVMBuildLShr(b, p->tid, c32(&q, 7), "wg");
  q.k_tiles = LLVMBuildSDiv(b, LLVMBuildAdd(b, p->kdim, c64(&q, kBK - 1), ""),
                            c64(&q, kBK), "k_tiles");
  LLVMValueRef any =
      LLVMBuildICmp(b, LLVMIntSGT, q.k_tiles, c64(&q, 0), "any_k");
  if (p->flip_a || p->flip_b) {
    // A flipped: B's rows (columns of C) are summed; B flipped: A's.
    q.sum_rows = p->flip_a ? p->tile_n : p->tile_m;
    q.sum_base = p->flip_a ? q.a_bytes : 0;
    q.sum_units = q.sum_rows * 4 / q.threads;
    int32_t ring = ring_bytes(p), c_bytes = p->tile_m * p->c_stride * 4;
    q.sums_offset = ring > c_bytes ? ring : c_bytes;
    q.sums = tj_emit_alloca(
        em, LLVMArrayType2(em->t_i32, (unsigned)q.sum_units), "sums");
    for (int32_t j = 0; j < q.sum_units; ++j)
      LLVMBuildStore(b, c32(&q, 0), sum_slot(&q, j));
  }

  kmajor_setup(&q, q.a_copy, q.a_copies, p->a, p->a_base, p->sa_m, p->m0, p->m,
               0);
  if (p->b_kmajor)
    kmajor_setup(&q, q.b_copy, q.b_copies, p->b, p->b_base, p->sb, p->n0, p->n,
                 q.a_bytes);
  else
    nmajor_setup(&q);
  LLVMValueRef inner = LLVMBuildAnd(
      b,
      LLVMBuildICmp(b, LLVMIntSLE,
                    LLVMBuildAdd(b, p->m0, c64(&q, p->tile_m), ""), p->m, ""),
      LLVMBuildICmp(b, LLVMIntSLE,
                    LLVMBuildAdd(b, p->n0, c64(&q, p->tile_n), ""), p->n, ""),
      "inner");
  // The first |ahead| k-tiles, one commit each, empty or not: the loop's
  // waits count groups.
  for (int32_t s = 0; s < q.ahead; ++s) {
    tj_emit_if_t have;
    tj_emit_if_begin(em, &have,
                     LLVMBuildICmp(b, LLVMIntSLT, c64(&q, s), q.k_tiles, ""),
                     "prologue");
    load_tile(&q, c64(&q, s), c64(&q, s), inner);
    tj_emit_if_end(em, &have);
  }
  for (int32_t s = 0; s < q.ahead; ++s) cp_commit(&q);
  tj_emit_loop_t loop;
  LLVMValueRef kt =
      tj_emit_loop_begin(em, &loop, c64(&q, 0), q.k_tiles, c64(&q, 1), "kt");
  cp_wait(&q, q.ahead - 1);
  LLVMValueRef stage = LLVMBuildSRem(b, kt, c64(&q, p->stages), "stage");
  if (p->flip_a || (p->flip_b && p->b_kmajor)) {
    LLVMValueRef base = at(&q, q.ring, stage_offset(&q, stage));
    if (p->flip_a) flip_chunks(&q, q.a_copy, q.a_copies, base);
    if (p->flip_b) flip_chunks(&q, q.b_copy, q.b_copies, base);
  }
  plain_asm(&q, "fence.proxy.async.shared::cta;");
  tj_nvptx_barrier(nv);
  compute_tile(&q, kt, stage);
  if (p->flip_a || p->flip_b) sum_stage(&q, stage);
  LLVMValueRef next = LLVMBuildAdd(b, kt, c64(&q, q.ahead), "");
  tj_emit_if_t more;
  tj_emit_if_begin(em, &more, LLVMBuildICmp(b, LLVMIntSLT, next, q.k_tiles, ""),
                   "prefetch");
  load_tile(&q, LLVMBuildSRem(b, next, c64(&q, p->stages), ""), next, inner);
  tj_emit_if_end(em, &more);
  cp_commit(&q);
  wgmma_wait(&q, 1);
  tj_emit_loop_end(em, &loop);
  wgmma_wait(&q, 0);
  cp_wait(&q, 0);
  if (p->flip_a || p->flip_b) store_sums(&q);
  // The C tile reuses the ring: every warpgroup's wgmmas must be done
  // (and the sums are stored).
  tj_nvptx_barrier(nv);
  stage_c(&q, any);
  tj_nvptx_barrier(nv);
  return NULL;
}
