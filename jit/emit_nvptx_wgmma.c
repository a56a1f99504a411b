// The sm_90a GEMM main loop: wgmma.mma_async with both operands in shared
// memory, for f16/bf16 A and B and f32 accumulators in registers.
//
// A block of tile_m / 64 consumer warpgroups (128 threads each) computes a
// tile_m x tile_n tile of C; warpgroup w owns rows [64 w, 64 w + 64) and
// issues m64n<tile_n>k16 instructions. All threads also copy: the k-tiles
// (64 elements of k, one 128-byte row of f16/bf16) of A and B go global ->
// shared with 16-byte cp.async.cg into a ring of |stages| stages, with
// zero fill past M, N and K (so the math needs no masks), laid out as
// wgmma's 128-byte swizzle (SW128) expects, 1024-byte atoms of 8 rows of
// 128 bytes in which 16-byte chunk c of row r sits at chunk c ^ (r & 7):
//   A (K-major): row m of the tile at m * 128; atoms of 8 rows are 1024
//     bytes apart (SBO), the warpgroup's 64 rows start at 8192 w;
//   B (MN-major, the [K, N] row-major w of x @ w, read with trans-b): one
//     64 n x 64 k panel of 8 KiB per 64 columns, in which k row r holds
//     64 n at r * 128; 8-row groups of k are 1024 bytes apart (SBO), the
//     64-column panels 8192 (LBO).
//   B (K-major, the [N, K] weight of x @ w^T, tj_kir_gemm_b_kmajor): as
//     A, row n of the tile at n * 128, atoms 1024 bytes apart (SBO), read
//     with trans-b 0 (K-major is wgmma's own B layout).
// The descriptors' start address steps through k: +32 bytes per k16 in A
// and a K-major B (inside the swizzled row, as the hardware applies the XOR
// to address bits), +2048 bytes (16 rows) in an MN-major B.
//
// Pipeline, per k-tile kt (one barrier a k-tile):
//   cp.async.wait_group  tile kt has landed (this thread's copies)
//   fence.proxy.async    ... and is visible to the async proxy (wgmma)
//   bar.sync             every thread's copies; every warpgroup is past
//                        its wait_group 1 of kt-1, so the wgmmas of kt-2
//                        are done and their stage is free
//   wgmma x4, commit     on tile kt
//   cp.async             tile kt + stages - 2 into that stage
//   wait_group 1         (the wgmmas of kt may run on while the next
//                        iteration waits for its data)
// or, with |drain|, wait_group 0 and tile kt + stages - 1 into the stage
// of kt - 1: one more k-tile of prefetch, for a bubble in the tensor
// cores at each k-tile that a second block on the SM can fill.
// The accumulators are tied in/out operands of every wgmma and wait asm,
// so LLVM can neither read them early nor move other writes between them
// (ptxas would serialize the wgmmas, C7515). No calls inside the loop.
//
// With |tma| the same ring is filled by TMA from a producer warpgroup and
// drained by consumer warpgroups through mbarriers instead ("TMA,
// warp-specialized" below).
//
// TF32 (|tf32|, f32 A and B, TMA only): wgmma's .tf32 operands must both
// be K-major in shared memory, and B ([K, N] row-major) is N-major. So the
// kernel computes C^T = B^T A^T instead: wgmma's A operand (64 rows of n by
// k8) comes from registers, which have no layout constraint, loaded with
// ld.shared from the B panels TMA wrote (32 n x 32 k, 4 KiB, SW128: row k
// holds 32 n, chunk c of 4 n at c ^ (k & 7)); wgmma's B operand is the A
// tile as TMA writes it (a row of 32 f32 of k is one 128-byte swizzle
// row, so its descriptor is the bf16 one: +32 bytes per k8, SBO 1024).
// A k-tile is 32 of k, so a stage has the bf16 stage's bytes. Consumer
// warpgroup w of a cooperative tile takes columns [w tile_n / 2, (w + 1)
// tile_n / 2) of every row (m64n<tile_m>k8 per 64 of them); pingpong's
// take all columns (m64n64k8 per 64). The accumulators are C^T's fragment
// (row n, column m), transposed into the staged C tile. Each k-tile's
// wgmmas are waited for (wait_group 0) before the next k-tile loads new
// fragments into the registers they read. A K-major B's panels (32 n x 32
// k, from a map over [N, K]) hold row n at n * 128, chunk c of 4 k at
// c ^ (n & 7); its fragments are loaded from there, the rest is the same.
// Operands are not rounded to tf32: the tensor cores ignore the low 13
// mantissa bits (truncation, as cuBLAS's TF32 mode does for operands in
// shared memory).

#include <stdio.h>
#include <string.h>

#include "jit/emit_nvptx.h"

#define kBK 64         // k per stage: one 128-byte swizzle row of f16/bf16
#define kRow 128       // bytes of a swizzle row
#define kAtom 1024     // 8 rows: the swizzle pattern's period
#define kPanel 8192    // 64 rows of 128 bytes: a warpgroup's A, a B panel
#define kMaxCopies 16  // 16-byte chunks per thread per operand and stage
#define kMaxAcc 128    // f32 accumulators a thread (m64n256)

typedef struct copy_t {
  LLVMValueRef src;    // pointer of this chunk at k-tile 0
  LLVMValueRef step;   // i64 elements to advance per k-tile
  LLVMValueRef dst;    // i32 byte offset inside the stage
  LLVMValueRef limit;  // i64 elements left along the contiguous dim
  LLVMValueRef ok;     // A: i1 row < M; B: NULL
  LLVMValueRef krow;   // B: i64 k row inside the tile
} copy_t;

typedef struct wg_t {
  tj_nvptx_emit_t* nv;
  tj_emit_t* em;
  LLVMBuilderRef b;
  const tj_nvptx_wgmma_t* p;
  int32_t threads, a_bytes, stage_bytes, a_copies, b_copies, num_acc;
  LLVMValueRef ring;       // ptr addrspace(3): the 1024-aligned ring
  LLVMValueRef ring_addr;  // i32: its shared-window address
  LLVMValueRef acc;        // alloca [num_acc x float]
  LLVMTypeRef acc_struct;  // {float x num_acc}: the asm results
  copy_t a_copy[kMaxCopies], b_copy[kMaxCopies];
  LLVMValueRef wg;       // i32: this thread's warpgroup
  LLVMValueRef k_tiles;  // i64
  int32_t ahead;         // k-tiles loading beyond the one in the math
  LLVMValueRef bars;     // TMA: i32 address of full[0] (empty[s] follows)
  int32_t bk;            // k per stage: 64 (f16/bf16), 32 (tf32)
  // 64-row blocks of a tile that one consumer warpgroup computes, each
  // with its own block_acc accumulators (num_acc = blocks * block_acc):
  // 1, except TMA pingpong with tile_m 128 and cooperative with 256 (2).
  int32_t blocks, block_acc;
} wg_t;

static LLVMValueRef c32(wg_t* w, int64_t v) {
  return LLVMConstInt(w->em->t_i32, (unsigned long long)v, 1);
}
static LLVMValueRef c64(wg_t* w, int64_t v) {
  return LLVMConstInt(w->em->t_i64, (unsigned long long)v, 1);
}

static LLVMValueRef at(wg_t* w, LLVMValueRef base, LLVMValueRef off) {
  return LLVMBuildGEP2(w->b, w->em->t_i8, base, &off, 1, "");
}

static LLVMValueRef call(wg_t* w, const char* name, LLVMValueRef* args,
                         unsigned n) {
  return tj_emit_intrinsic(w->em, name, NULL, 0, args, n);
}

// Inline PTX: LLVM 19 has no wgmma, fence.proxy or descriptor intrinsics.
static LLVMValueRef inline_asm(wg_t* w, LLVMTypeRef ret, const char* text,
                               const char* constraints, LLVMValueRef* args,
                               unsigned n) {
  return tj_emit_inline_asm(w->em, ret, text, constraints, args, n);
}

static void plain_asm(wg_t* w, const char* text) {
  inline_asm(w, w->em->t_void, text, "~{memory}", NULL, 0);
}

static LLVMValueRef acc_slot(wg_t* w, int32_t i) {
  LLVMValueRef idx[2] = {c32(w, 0), c32(w, i)};
  return LLVMBuildGEP2(w->b, LLVMArrayType2(w->em->t_f32, (unsigned)w->num_acc),
                       w->acc, idx, 2, "");
}

// Runs |text| with accumulators [first, first + n) as tied in/out
// operands $0.. and |extra| further inputs (constraints |extra_cons|)
// after them.
static void acc_asm_range(wg_t* w, int32_t first, int32_t n, const char* text,
                          LLVMValueRef* extra, int32_t num_extra,
                          const char* extra_cons) {
  char cons[1400];
  size_t len = 0;
  for (int32_t i = 0; i < n; ++i)
    len += (size_t)snprintf(cons + len, sizeof(cons) - len, "=f,");
  len += (size_t)snprintf(cons + len, sizeof(cons) - len, "%s", extra_cons);
  for (int32_t i = 0; i < n; ++i)
    len += (size_t)snprintf(cons + len, sizeof(cons) - len, "%s%d",
                            len && cons[len - 1] != ',' ? "," : "", i);
  snprintf(cons + len, sizeof(cons) - len, ",~{memory}");
  LLVMValueRef args[kMaxAcc + 4];
  for (int32_t i = 0; i < num_extra; ++i) args[i] = extra[i];
  for (int32_t i = 0; i < n; ++i)
    args[num_extra + i] =
        LLVMBuildLoad2(w->b, w->em->t_f32, acc_slot(w, first + i), "");
  LLVMTypeRef floats[kMaxAcc];
  for (int32_t i = 0; i < n; ++i) floats[i] = w->em->t_f32;
  LLVMTypeRef ret = n == w->num_acc ? w->acc_struct
                                    : LLVMStructTypeInContext(
                                          w->em->ctx, floats, (unsigned)n, 0);
  LLVMValueRef r =
      inline_asm(w, ret, text, cons, args, (unsigned)(num_extra + n));
  for (int32_t i = 0; i < n; ++i)
    LLVMBuildStore(w->b, LLVMBuildExtractValue(w->b, r, (unsigned)i, ""),
                   acc_slot(w, first + i));
}

static void acc_asm(wg_t* w, const char* text, LLVMValueRef* extra,
                    int32_t num_extra, const char* extra_cons) {
  acc_asm_range(w, 0, w->num_acc, text, extra, num_extra, extra_cons);
}

// wgmma.wait_group |pending|, the accumulators tied through it.
static void wgmma_wait(wg_t* w, int32_t pending) {
  char text[64];
  snprintf(text, sizeof(text), "wgmma.wait_group.sync.aligned %d;",
           (int)pending);
  acc_asm(w, text, NULL, 0, "");
}

// One m64n<tile_n>k16 on descriptors |da| and |db| (i64) into the
// accumulators of row block |j|: D = A B + D when |accumulate| (i32) is
// nonzero, else D = A B.
static void wgmma(wg_t* w, int32_t j, LLVMValueRef da, LLVMValueRef db,
                  LLVMValueRef accumulate) {
  int32_t n = w->block_acc;
  char text[2400];
  size_t len =
      (size_t)snprintf(text, sizeof(text),
                       "{\n.reg .pred p;\nsetp.ne.b32 p, $%d, 0;\n"
                       "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {",
                       (int)n + 2, (int)w->p->tile_n,
                       w->p->f16 ? "f16" : "bf16", w->p->f16 ? "f16" : "bf16");
  for (int32_t i = 0; i < n; ++i)
    len += (size_t)snprintf(text + len, sizeof(text) - len, "%s$%d",
                            i ? "," : "", (int)i);
  // scale-d p, scale-a 1, scale-b 1, trans-a 0 (A K-major), trans-b 1
  // (B MN-major) or 0 (K-major B, x @ w^T).
  snprintf(text + len, sizeof(text) - len, "}, $%d, $%d, p, 1, 1, 0, %d;\n}",
           (int)n, (int)n + 1, w->p->b_kmajor ? 0 : 1);
  LLVMValueRef d[3] = {da, db, accumulate};
  acc_asm_range(w, j * n, n, text, d, 3, "l,l,r,");
}

// A shared-memory matrix descriptor: start |addr| (i32), 128-byte
// swizzle, leading and stride byte offsets |lbo|, |sbo|.
static LLVMValueRef descriptor(wg_t* w, LLVMValueRef addr, int64_t lbo,
                               int64_t sbo) {
  return tj_nvptx_wgmma_descriptor(w->em, addr, lbo, sbo);
}

// min(max(v, 0), hi) for i64 |v|.
static LLVMValueRef clamp0(wg_t* w, LLVMValueRef v, int64_t hi) {
  LLVMValueRef lo = tj_emit_select(
      w->em, LLVMBuildICmp(w->b, LLVMIntSLT, v, c64(w, 0), ""), c64(w, 0), v);
  return tj_emit_min_i64(w->em, lo, c64(w, hi));
}

//===--- copies ---===//

// The copies of the tile at (|m0|, |n0|) (i64).
static void copy_setup(wg_t* w, LLVMValueRef m0, LLVMValueRef n0) {
  LLVMBuilderRef b = w->b;
  tj_emit_t* em = w->em;
  const tj_nvptx_wgmma_t* p = w->p;
  for (int32_t i = 0; i < w->a_copies; ++i) {
    // Chunk c = tid + threads i: row c / 8, chunk c % 8 of the row.
    LLVMValueRef c = LLVMBuildAdd(b, p->tid, c32(w, i * w->threads), "");
    LLVMValueRef row = LLVMBuildLShr(b, c, c32(w, 3), "");
    LLVMValueRef ch = LLVMBuildAnd(b, c, c32(w, 7), "");
    copy_t* a = &w->a_copy[i];
    a->dst = LLVMBuildAdd(
        b, LLVMBuildMul(b, row, c32(w, kRow), ""),
        LLVMBuildShl(
            b, LLVMBuildXor(b, ch, LLVMBuildAnd(b, row, c32(w, 7), ""), ""),
            c32(w, 4), ""),
        "");
    LLVMValueRef gm =
        LLVMBuildAdd(b, m0, LLVMBuildZExt(b, row, em->t_i64, ""), "");
    LLVMValueRef col =
        LLVMBuildMul(b, LLVMBuildZExt(b, ch, em->t_i64, ""), c64(w, 8), "");
    a->ok = LLVMBuildICmp(b, LLVMIntSLT, gm, p->m, "");
    // Rows past M point at row m0 (and copy 0 bytes).
    LLVMValueRef off = LLVMBuildAdd(
        b, LLVMBuildMul(b, tj_emit_select(em, a->ok, gm, m0), p->sa_m, ""), col,
        "");
    a->src = tj_emit_advance(em, p->a, p->a_base, off);
    a->step = c64(w, kBK);
    a->limit = LLVMBuildSub(b, p->kdim, col, "");
    a->krow = NULL;
  }
  int32_t per_row = p->tile_n / 8;  // chunks of a B row
  int32_t shift = per_row == 8 ? 3 : per_row == 16 ? 4 : 5;
  for (int32_t i = 0; i < w->b_copies && p->b_kmajor; ++i) {
    // K-major B: row n of the tile as A's row m, after A's tile.
    LLVMValueRef c = LLVMBuildAdd(b, p->tid, c32(w, i * w->threads), "");
    LLVMValueRef row = LLVMBuildLShr(b, c, c32(w, 3), "");
    LLVMValueRef ch = LLVMBuildAnd(b, c, c32(w, 7), "");
    copy_t* bc = &w->b_copy[i];
    bc->dst = LLVMBuildAdd(
        b, c32(w, w->a_bytes),
        LLVMBuildAdd(
            b, LLVMBuildMul(b, row, c32(w, kRow), ""),
            LLVMBuildShl(
                b, LLVMBuildXor(b, ch, LLVMBuildAnd(b, row, c32(w, 7), ""), ""),
                c32(w, 4), ""),
            ""),
        "");
    // Dual: rows [tile_n / 2, tile_n) of the tile are B2's rows from n0.
    LLVMValueRef b_base = p->b_base, nrow = row;
    if (p->dual) {
      LLVMValueRef second =
          LLVMBuildICmp(b, LLVMIntUGE, row, c32(w, p->tile_n / 2), "b2_row");
      b_base = tj_emit_select(em, second, p->b2_base, p->b_base);
      nrow = LLVMBuildSub(
          b, row, tj_emit_select(em, second, c32(w, p->tile_n / 2), c32(w, 0)),
          "");
    }
    LLVMValueRef gn =
        LLVMBuildAdd(b, n0, LLVMBuildZExt(b, nrow, em->t_i64, ""), "");
    LLVMValueRef col =
        LLVMBuildMul(b, LLVMBuildZExt(b, ch, em->t_i64, ""), c64(w, 8), "");
    bc->ok = LLVMBuildICmp(b, LLVMIntSLT, gn, p->n, "");
    // Rows past N point at row n0 (and copy 0 bytes).
    LLVMValueRef off = LLVMBuildAdd(
        b, LLVMBuildMul(b, tj_emit_select(em, bc->ok, gn, n0), p->sb_n, ""),
        col, "");
    bc->src = tj_emit_advance(em, p->b, b_base, off);
    bc->step = c64(w, kBK);
    bc->limit = LLVMBuildSub(b, p->kdim, col, "");
    bc->krow = NULL;
  }
  for (int32_t i = 0; i < w->b_copies && !p->b_kmajor; ++i) {
    LLVMValueRef c = LLVMBuildAdd(b, p->tid, c32(w, i * w->threads), "");
    LLVMValueRef krow = LLVMBuildLShr(b, c, c32(w, shift), "");
    LLVMValueRef nch = LLVMBuildAnd(b, c, c32(w, per_row - 1), "");
    LLVMValueRef panel = LLVMBuildLShr(b, nch, c32(w, 3), "");
    LLVMValueRef ch = LLVMBuildAnd(b, nch, c32(w, 7), "");
    copy_t* bc = &w->b_copy[i];
    bc->dst = LLVMBuildAdd(
        b, c32(w, w->a_bytes),
        LLVMBuildAdd(
            b,
            LLVMBuildAdd(b, LLVMBuildMul(b, panel, c32(w, kPanel), ""),
                         LLVMBuildMul(b, krow, c32(w, kRow), ""), ""),
            LLVMBuildShl(
                b,
                LLVMBuildXor(b, ch, LLVMBuildAnd(b, krow, c32(w, 7), ""), ""),
                c32(w, 4), ""),
            ""),
        "");
    bc->krow = LLVMBuildZExt(b, krow, em->t_i64, "");
    // Dual: chunks [per_row / 2, per_row) of a k row are B2's, from n0.
    LLVMValueRef b_base = p->b_base, ncol = nch;
    if (p->dual) {
      LLVMValueRef second =
          LLVMBuildICmp(b, LLVMIntUGE, nch, c32(w, per_row / 2), "b2_chunk");
      b_base = tj_emit_select(em, second, p->b2_base, p->b_base);
      ncol = LLVMBuildSub(
          b, nch, tj_emit_select(em, second, c32(w, per_row / 2), c32(w, 0)),
          "");
    }
    LLVMValueRef col = LLVMBuildAdd(
        b, n0,
        LLVMBuildMul(b, LLVMBuildZExt(b, ncol, em->t_i64, ""), c64(w, 8), ""),
        "");
    bc->limit = LLVMBuildSub(b, p->n, col, "");
    bc->ok = NULL;
    // Columns past N start at n0 (and copy 0 bytes).
    LLVMValueRef safe = tj_emit_select(
        em, LLVMBuildICmp(b, LLVMIntSLT, col, p->n, ""), col, n0);
    bc->src = tj_emit_advance(
        em, p->b, b_base,
        LLVMBuildAdd(b, LLVMBuildMul(b, bc->krow, p->sb_k, ""), safe, ""));
    bc->step = LLVMBuildMul(b, p->sb_k, c64(w, kBK), "");
  }
}

static LLVMValueRef stage_offset(wg_t* w, LLVMValueRef stage) {
  return LLVMBuildTrunc(w->b,
                        LLVMBuildMul(w->b, stage, c64(w, w->stage_bytes), ""),
                        w->em->t_i32, "");
}

static void cp_async16(wg_t* w, LLVMValueRef base, LLVMValueRef dst,
                       LLVMValueRef src, LLVMValueRef bytes) {
  LLVMValueRef args[3] = {
      at(w, base, dst),
      LLVMBuildAddrSpaceCast(w->b, src, w->nv->t_ptr_global, ""),
      LLVMBuildTrunc(w->b, bytes, w->em->t_i32, "")};
  call(w, "llvm.nvvm.cp.async.cg.shared.global.16.s", args, 3);
}

// The copies of k-tile |kt| of an interior tile (inside M, N and K):
// whole 16-byte chunks, no bounds arithmetic.
static void load_full_tile(wg_t* w, LLVMValueRef base, LLVMValueRef kt) {
  for (int32_t i = 0; i < w->a_copies + w->b_copies; ++i) {
    const copy_t* c =
        i < w->a_copies ? &w->a_copy[i] : &w->b_copy[i - w->a_copies];
    LLVMValueRef src =
        tj_emit_advance(w->em, i < w->a_copies ? w->p->a : w->p->b, c->src,
                        LLVMBuildMul(w->b, kt, c->step, ""));
    LLVMValueRef args[2] = {
        at(w, base, c->dst),
        LLVMBuildAddrSpaceCast(w->b, src, w->nv->t_ptr_global, "")};
    call(w, "llvm.nvvm.cp.async.cg.shared.global.16", args, 2);
  }
}

// One 16-byte chunk of a K-major operand (A, or B read transposed) on an
// edge tile: the elements left before K, as bytes, none past the outer
// bound (M, or N); the source stays put when nothing is copied.
static void kmajor_chunk(wg_t* w, LLVMValueRef base, const copy_t* c,
                         uint32_t operand, LLVMValueRef k0, LLVMValueRef kt) {
  LLVMBuilderRef b = w->b;
  tj_emit_t* em = w->em;
  LLVMValueRef left = clamp0(w, LLVMBuildSub(b, c->limit, k0, ""), 8);
  LLVMValueRef bytes = tj_emit_select(
      em, c->ok, LLVMBuildMul(b, left, c64(w, 2), ""), c64(w, 0));
  LLVMValueRef src = tj_emit_advance(
      em, operand, c->src,
      tj_emit_select(em, LLVMBuildICmp(b, LLVMIntSGT, bytes, c64(w, 0), ""),
                     LLVMBuildMul(b, kt, c->step, ""), c64(w, 0)));
  cp_async16(w, base, c->dst, src, bytes);
}

// Issues the copies of k-tile |kt| into stage |stage| (both i64); |inner|
// (i1): the block's tile is inside M and N.
static void load_tile(wg_t* w, LLVMValueRef stage, LLVMValueRef kt,
                      LLVMValueRef inner) {
  LLVMBuilderRef b = w->b;
  tj_emit_t* em = w->em;
  const tj_nvptx_wgmma_t* p = w->p;
  LLVMValueRef base = at(w, w->ring, stage_offset(w, stage));
  LLVMValueRef k0 = LLVMBuildMul(b, kt, c64(w, kBK), "k0");
  LLVMValueRef full = LLVMBuildAnd(
      b, inner,
      LLVMBuildICmp(b, LLVMIntSLE, LLVMBuildAdd(b, k0, c64(w, kBK), ""),
                    p->kdim, ""),
      "");
  tj_emit_if_t fast, edge;
  tj_emit_if_begin(em, &fast, full, "full_tile");
  load_full_tile(w, base, kt);
  tj_emit_if_end(em, &fast);
  tj_emit_if_begin(em, &edge, LLVMBuildNot(b, full, ""), "edge_tile");
  for (int32_t i = 0; i < w->a_copies; ++i) {
    kmajor_chunk(w, base, &w->a_copy[i], p->a, k0, kt);
  }
  // K-major B: as A, rows of n past N copy nothing.
  for (int32_t i = 0; i < w->b_copies && p->b_kmajor; ++i) {
    kmajor_chunk(w, base, &w->b_copy[i], p->b, k0, kt);
  }
  for (int32_t i = 0; i < w->b_copies && !p->b_kmajor; ++i) {
    const copy_t* bc = &w->b_copy[i];
    LLVMValueRef krow_ok = LLVMBuildICmp(
        b, LLVMIntSLT, LLVMBuildAdd(b, k0, bc->krow, ""), p->kdim, "");
    LLVMValueRef bytes = tj_emit_select(
        em, krow_ok, LLVMBuildMul(b, clamp0(w, bc->limit, 8), c64(w, 2), ""),
        c64(w, 0));
    LLVMValueRef src = tj_emit_advance(
        em, p->b, bc->src,
        tj_emit_select(em, LLVMBuildICmp(b, LLVMIntSGT, bytes, c64(w, 0), ""),
                       LLVMBuildMul(b, kt, bc->step, ""), c64(w, 0)));
    cp_async16(w, base, bc->dst, src, bytes);
  }
  tj_emit_if_end(em, &edge);
}

static void cp_commit(wg_t* w) {
  call(w, "llvm.nvvm.cp.async.commit.group", NULL, 0);
}

static void cp_wait(wg_t* w, int32_t pending) {
  LLVMValueRef n = c32(w, pending);
  call(w, "llvm.nvvm.cp.async.wait.group", &n, 1);
}

//===--- math ---===//

// The four k16 steps of k-tile |kt| in stage |stage| (both i64) for
// the w->blocks row blocks of 64 from block |wg| (i32) on, each a wgmma
// a k16 into its own accumulators.
static void compute_tile(wg_t* w, LLVMValueRef kt, LLVMValueRef stage,
                         LLVMValueRef wg) {
  LLVMBuilderRef b = w->b;
  LLVMValueRef base =
      LLVMBuildAdd(b, w->ring_addr, stage_offset(w, stage), "stage_addr");
  LLVMValueRef a_addr =
      LLVMBuildAdd(b, base, LLVMBuildMul(b, wg, c32(w, kPanel), ""), "");
  LLVMValueRef b_addr = LLVMBuildAdd(b, base, c32(w, w->a_bytes), "");
  plain_asm(w, "wgmma.fence.sync.aligned;");
  for (int32_t kk = 0; kk < kBK / 16; ++kk) {
    // B: +16 k rows per k16; panels of 64 columns kPanel apart. K-major
    // B: as A, +32 bytes per k16 inside its swizzled rows of n.
    LLVMValueRef db =
        w->p->b_kmajor
            ? descriptor(w, LLVMBuildAdd(b, b_addr, c32(w, kk * 32), ""), 16,
                         kAtom)
            : descriptor(w, LLVMBuildAdd(b, b_addr, c32(w, kk * 16 * kRow), ""),
                         kPanel, kAtom);
    // The first k16 overwrites the accumulators: they start undefined,
    // as zeroing them with movs inside the pipeline (it spans the loop's
    // back edge) makes ptxas serialize the wgmmas (C7515).
    LLVMValueRef accumulate =
        kk ? c32(w, 1)
           : LLVMBuildZExt(b, LLVMBuildICmp(b, LLVMIntNE, kt, c64(w, 0), ""),
                           w->em->t_i32, "");
    for (int32_t j = 0; j < w->blocks; ++j) {
      // A: +32 bytes per k16 inside the swizzled rows; LBO unused (1).
      LLVMValueRef da = descriptor(
          w, LLVMBuildAdd(b, a_addr, c32(w, j * kPanel + kk * 32), ""), 16,
          kAtom);
      wgmma(w, j, da, db, accumulate);
    }
  }
  plain_asm(w, "wgmma.commit_group.sync.aligned;");
}

//===--- TF32 math (C^T = B^T A^T) ---===//

// One m64n<tile_m>k8 (.tf32): D = A B + D when |accumulate| (i32) is
// nonzero, else D = A B, on accumulators [first, first + tile_m / 2),
// with A the fragment |a| (4 x i32) and B the descriptor |db| (i64).
static void wgmma_tf32(wg_t* w, int32_t first, LLVMValueRef* a, LLVMValueRef db,
                       LLVMValueRef accumulate) {
  int32_t n = w->p->tile_m / 2;
  char text[1200];
  size_t len =
      (size_t)snprintf(text, sizeof(text),
                       "{\n.reg .pred p;\nsetp.ne.b32 p, $%d, 0;\n"
                       "wgmma.mma_async.sync.aligned.m64n%dk8.f32.tf32.tf32 {",
                       (int)n + 5, (int)w->p->tile_m);
  for (int32_t i = 0; i < n; ++i)
    len += (size_t)snprintf(text + len, sizeof(text) - len, "%s$%d",
                            i ? "," : "", (int)i);
  // scale-d p, scale-a 1, scale-b 1 (tf32 has no transpose operands).
  snprintf(text + len, sizeof(text) - len,
           "}, {$%d,$%d,$%d,$%d}, $%d, p, 1, 1;\n}", (int)n, (int)n + 1,
           (int)n + 2, (int)n + 3, (int)n + 4);
  LLVMValueRef d[6] = {a[0], a[1], a[2], a[3], db, accumulate};
  acc_asm_range(w, first, n, text, d, 6, "r,r,r,r,l,r,");
}

// Shared byte offset (i32) of B element (k, n) of a stage's B panels
// (|k| and |n| i32, inside the stage's k-tile and the block's tile).
static LLVMValueRef tf32_b_offset(wg_t* w, LLVMValueRef k, LLVMValueRef n) {
  LLVMBuilderRef b = w->b;
  if (w->p->b_kmajor) {
    // K-major B: row n holds 32 k, chunk c of 4 k at c ^ (n & 7). The
    // lanes of one load differ in n & 7 (g) and k & 3 (t): 32 banks.
    LLVMValueRef swz = LLVMBuildXor(b, LLVMBuildLShr(b, k, c32(w, 2), ""),
                                    LLVMBuildAnd(b, n, c32(w, 7), ""), "");
    return LLVMBuildAdd(
        b,
        LLVMBuildAdd(b, LLVMBuildMul(b, n, c32(w, kRow), ""),
                     LLVMBuildShl(b, swz, c32(w, 4), ""), ""),
        LLVMBuildShl(b, LLVMBuildAnd(b, k, c32(w, 3), ""), c32(w, 2), ""), "");
  }
  LLVMValueRef panel = LLVMBuildLShr(b, n, c32(w, 5), "");
  LLVMValueRef chunk =
      LLVMBuildAnd(b, LLVMBuildLShr(b, n, c32(w, 2), ""), c32(w, 7), "");
  LLVMValueRef swz =
      LLVMBuildXor(b, chunk, LLVMBuildAnd(b, k, c32(w, 7), ""), "");
  LLVMValueRef off =
      LLVMBuildAdd(b, LLVMBuildMul(b, panel, c32(w, 32 * kRow), ""),
                   LLVMBuildAdd(b, LLVMBuildMul(b, k, c32(w, kRow), ""),
                                LLVMBuildShl(b, swz, c32(w, 4), ""), ""),
                   "");
  return LLVMBuildAdd(
      b, off, LLVMBuildShl(b, LLVMBuildAnd(b, n, c32(w, 3), ""), c32(w, 2), ""),
      "");
}

// The four k8 steps of k-tile |kt| in stage |stage| (i64) for the
// warpgroup whose columns start at |n_wg| (i32, in the tile).
static void compute_tile_tf32(wg_t* w, LLVMValueRef kt, LLVMValueRef stage,
                              LLVMValueRef n_wg) {
  LLVMBuilderRef b = w->b;
  tj_emit_t* em = w->em;
  const tj_nvptx_wgmma_t* p = w->p;
  LLVMValueRef soff = stage_offset(w, stage);
  LLVMValueRef a_addr = LLVMBuildAdd(b, w->ring_addr, soff, "stage_addr");
  LLVMValueRef b_panels =
      at(w, w->ring, LLVMBuildAdd(b, soff, c32(w, w->a_bytes), ""));
  // Fragment of A (= B^T) for thread (warp q, lane l), g = l / 4, t = l % 4:
  // registers 0..3 hold rows (our n) 16 q + g, + 8, + g, + 8 and columns
  // (our k) t, t, t + 4, t + 4 of each 64 x 8 slab.
  LLVMValueRef q =
      LLVMBuildAnd(b, LLVMBuildLShr(b, p->tid, c32(w, 5), ""), c32(w, 3), "");
  LLVMValueRef lane = LLVMBuildAnd(b, p->tid, c32(w, 31), "");
  LLVMValueRef g = LLVMBuildLShr(b, lane, c32(w, 2), "");
  LLVMValueRef t = LLVMBuildAnd(b, lane, c32(w, 3), "");
  LLVMValueRef row = LLVMBuildAdd(
      b, n_wg, LLVMBuildAdd(b, LLVMBuildMul(b, q, c32(w, 16), ""), g, ""), "");
  int32_t blocks = w->num_acc / (p->tile_m / 2);
  enum { kSteps = 4 };
  LLVMValueRef frag[4][kSteps][4];
  for (int32_t j = 0; j < blocks; ++j) {
    for (int32_t s = 0; s < kSteps; ++s) {
      for (int32_t r = 0; r < 4; ++r) {
        LLVMValueRef n = LLVMBuildAdd(b, row, c32(w, 64 * j + 8 * (r & 1)), "");
        LLVMValueRef k = LLVMBuildAdd(b, t, c32(w, 8 * s + 4 * (r >> 1)), "");
        LLVMValueRef v = LLVMBuildLoad2(
            b, em->t_i32, at(w, b_panels, tf32_b_offset(w, k, n)), "frag");
        LLVMSetAlignment(v, 4);
        frag[j][s][r] = v;
      }
    }
  }
  plain_asm(w, "wgmma.fence.sync.aligned;");
  for (int32_t s = 0; s < kSteps; ++s) {
    // wgmma's B is the A tile, K-major: +32 bytes per k8 inside the
    // swizzled rows, 8-row atoms 1024 bytes apart; LBO unused (1).
    LLVMValueRef db =
        descriptor(w, LLVMBuildAdd(b, a_addr, c32(w, s * 32), ""), 16, kAtom);
    // As in compute_tile: the first k-step overwrites the accumulators.
    LLVMValueRef accumulate =
        s ? c32(w, 1)
          : LLVMBuildZExt(b, LLVMBuildICmp(b, LLVMIntNE, kt, c64(w, 0), ""),
                          em->t_i32, "");
    for (int32_t j = 0; j < blocks; ++j)
      wgmma_tf32(w, j * (p->tile_m / 2), frag[j][s], db, accumulate);
  }
  plain_asm(w, "wgmma.commit_group.sync.aligned;");
}

// tj_nvptx_wgmma_c_col of an i32 column: where the staged C row keeps it.
static LLVMValueRef c_col(wg_t* w, LLVMValueRef col) {
  return LLVMBuildXor(
      w->b, col,
      LLVMBuildAnd(w->b, LLVMBuildLShr(w->b, col, c32(w, 3), ""), c32(w, 4),
                   ""),
      "c_col");
}

// stage_c for the tf32 accumulators (C^T's fragment): register i of block
// j of thread (warp q, lane l) holds C row (m) 8 (i' / 4) + 2 (l % 4) +
// i' % 2 and column (n) n_wg + 64 j + 16 q + l / 4 + 8 ((i' / 2) % 2), with
// i' = i - j tile_m / 2. Rows [row0, row0 + rows) are written, |rows| a
// multiple of 8, so a register's 8-row group is all in or all out.
// Columns are swizzled (tj_nvptx_wgmma_c_col): the part of a column that
// varies by thread (n_wg + 16 q + l / 4, n_wg a multiple of 16) holds its
// bit 5, and the constant part (64 j + 8 x) has no bit 2 for the swizzle
// to flip, so swizzling the former is swizzling the sum.
static void stage_c_tf32(wg_t* w, LLVMValueRef n_wg, LLVMValueRef c,
                         int32_t row0, int32_t rows, LLVMValueRef any) {
  LLVMBuilderRef b = w->b;
  tj_emit_t* em = w->em;
  const tj_nvptx_wgmma_t* p = w->p;
  LLVMValueRef q =
      LLVMBuildAnd(b, LLVMBuildLShr(b, p->tid, c32(w, 5), ""), c32(w, 3), "");
  LLVMValueRef lane = LLVMBuildAnd(b, p->tid, c32(w, 31), "");
  LLVMValueRef col = c_col(
      w, LLVMBuildAdd(b, n_wg,
                      LLVMBuildAdd(b, LLVMBuildMul(b, q, c32(w, 16), ""),
                                   LLVMBuildLShr(b, lane, c32(w, 2), ""), ""),
                      ""));
  LLVMValueRef row =
      LLVMBuildMul(b, LLVMBuildAnd(b, lane, c32(w, 3), ""), c32(w, 2), "");
  LLVMValueRef base = LLVMBuildMul(
      b,
      LLVMBuildAdd(b, LLVMBuildMul(b, row, c32(w, p->c_stride), ""), col, ""),
      c32(w, 4), "");
  LLVMValueRef zero = LLVMConstReal(em->t_f32, 0.0);
  int32_t per = p->tile_m / 2;
  for (int32_t i = 0; i < w->num_acc; ++i) {
    int32_t j = i / per, r = i % per;
    int32_t m = 8 * (r / 4) + r % 2;
    if (8 * (r / 4) < row0 || 8 * (r / 4) >= row0 + rows) continue;
    int32_t n = 64 * j + 8 * ((r / 2) % 2);
    int32_t off = ((m - row0) * p->c_stride + n) * 4;
    // A select into a new value, not a write to the accumulator (C7515).
    LLVMValueRef x = tj_emit_select(
        em, any, LLVMBuildLoad2(b, em->t_f32, acc_slot(w, i), ""), zero);
    LLVMValueRef st =
        LLVMBuildStore(b, x, at(w, c, LLVMBuildAdd(b, base, c32(w, off), "")));
    LLVMSetAlignment(st, 4);
  }
}

// Writes the accumulators of row block |j| of the warpgroup's blocks
// (from block |wg| (i32) on) that fall in rows [row0, row0 + rows) of the
// tile to |c| (row row0 at its start), zeros where |any| (i1) is false
// (K = 0 ran no wgmma). Thread t (warp q = t / 32 % 4, lane l) holds, in
// register i of block j's accumulators, row 64 (wg + j) + 16 q + l / 4 + 8
// ((i / 2) % 2), col 8 (i / 4) + 2 (l % 4) + i % 2 (the m64nNk16 f32
// accumulator fragment); |rows| is a
// multiple of 16, so a warp's rows are all in or all out. Columns are
// swizzled (tj_nvptx_wgmma_c_col): register i's column 8 (i / 4) decides
// the swap, which moves the thread's 2 (l % 4) by 4 within the 8.
static void stage_c(wg_t* w, LLVMValueRef wg, int32_t j, LLVMValueRef c,
                    int32_t row0, int32_t rows, LLVMValueRef any) {
  LLVMBuilderRef b = w->b;
  tj_emit_t* em = w->em;
  const tj_nvptx_wgmma_t* p = w->p;
  LLVMValueRef q =
      LLVMBuildAnd(b, LLVMBuildLShr(b, p->tid, c32(w, 5), ""), c32(w, 3), "");
  LLVMValueRef lane = LLVMBuildAnd(b, p->tid, c32(w, 31), "");
  LLVMValueRef warp_row = LLVMBuildAdd(
      b, LLVMBuildMul(b, LLVMBuildAdd(b, wg, c32(w, j), ""), c32(w, 64), ""),
      LLVMBuildMul(b, q, c32(w, 16), ""), "");
  tj_emit_if_t mine;
  bool all = row0 == 0 && rows == p->tile_m;
  if (!all) {
    LLVMValueRef in = LLVMBuildAnd(
        b, LLVMBuildICmp(b, LLVMIntSGE, warp_row, c32(w, row0), ""),
        LLVMBuildICmp(b, LLVMIntSLT, warp_row, c32(w, row0 + rows), ""), "");
    tj_emit_if_begin(em, &mine, in, "stage_rows");
  }
  LLVMValueRef row =
      LLVMBuildAdd(b, LLVMBuildSub(b, warp_row, c32(w, row0), ""),
                   LLVMBuildLShr(b, lane, c32(w, 2), ""), "");
  LLVMValueRef col0 =
      LLVMBuildMul(b, LLVMBuildAnd(b, lane, c32(w, 3), ""), c32(w, 2), "");
  LLVMValueRef row_off = LLVMBuildMul(b, row, c32(w, p->c_stride), "");
  LLVMValueRef base[2] = {
      LLVMBuildMul(b, LLVMBuildAdd(b, row_off, col0, ""), c32(w, 4), ""),
      LLVMBuildMul(
          b, LLVMBuildAdd(b, row_off, LLVMBuildXor(b, col0, c32(w, 4), ""), ""),
          c32(w, 4), "")};
  LLVMTypeRef v2 = LLVMVectorType(em->t_f32, 2);
  LLVMValueRef zero = LLVMConstReal(em->t_f32, 0.0);
  int32_t first = j * w->block_acc;
  for (int32_t i = 0; i < w->block_acc; i += 2) {
    int32_t col = 8 * (i / 4);
    bool swap = tj_nvptx_wgmma_c_col(col) != col;
    int32_t off = ((8 * ((i / 2) % 2)) * p->c_stride + col) * 4;
    LLVMValueRef v = LLVMGetUndef(v2);
    for (int32_t e = 0; e < 2; ++e) {
      // A select into a new value, not a write to the accumulator: that
      // would be a non-wgmma definition inside a persistent pipeline.
      LLVMValueRef x = tj_emit_select(
          em, any, LLVMBuildLoad2(b, em->t_f32, acc_slot(w, first + i + e), ""),
          zero);
      v = LLVMBuildInsertElement(b, v, x, c32(w, e), "");
    }
    LLVMValueRef st = LLVMBuildStore(
        b, v, at(w, c, LLVMBuildAdd(b, base[swap], c32(w, off), "")));
    LLVMSetAlignment(st, 8);
  }
  if (!all) tj_emit_if_end(em, &mine);
}

//===--- entry ---===//

static int32_t ring_bytes(const tj_nvptx_wgmma_t* p) {
  return p->stages * (p->tile_m * kRow + kBK * p->tile_n * 2);
}

// Rows of C staged at a time by the persistent kernel, in a region of its
// own, so that the next tile's first k-tiles load during the epilogue.
#define kPersistentRows 32

// TMA: the ring's full and empty mbarriers (8 bytes each, at most 8
// stages) and pingpong's two turn barriers sit between the ring and the C
// rows.
#define kBarrierBytes 256
// Shared memory a block may have (227 KiB), and the rows of C a TMA
// block stages at a time: the whole tile when it fits beside the ring.
#define kMaxShared (227 * 1024)

// Pingpong has a region of C rows per consumer warpgroup.
static int32_t tma_c_regions(const tj_nvptx_wgmma_t* p) {
  return p->pingpong ? 2 : 1;
}

// Bytes from the ring's start to the first C region: the barriers, and
// with a TMA store the rest of their 1024 bytes, so that the output's
// swizzled panels start on the swizzle's period as the map expects.
static int32_t c_region_offset(const tj_nvptx_wgmma_t* p) {
  return ring_bytes(p) + (p->tma_store ? kAtom : kBarrierBytes);
}

static int32_t tma_c_rows(const tj_nvptx_wgmma_t* p) {
  int32_t rows = p->tile_m;
  while (rows > 16 && c_region_offset(p) + kAtom +
                              tma_c_regions(p) * rows * p->c_stride * 4 >
                          kMaxShared)
    rows /= 2;
  return rows;
}

// The output tile a region holds for the TMA store: every row of the
// tile (both warpgroups' in a cooperative one) in panels of 128 bytes of
// columns, panel q at q tile_m 128, row r of it at r 128 with its 16-byte
// chunk c at c ^ (r & 7) (the map's 128-byte swizzle).
static int32_t store_tile_bytes(const tj_nvptx_wgmma_t* p) {
  return p->tile_m * (p->dual ? p->tile_n / 2 : p->tile_n) * p->store_bytes;
}

// A region holds the staged f32 rows or, with a TMA store, the output
// tile instead (the kernel takes one or the other at run time).
static int32_t c_region_bytes(const tj_nvptx_wgmma_t* p) {
  int32_t staged = tma_c_rows(p) * p->c_stride * 4;
  if (!p->tma_store) return staged;
  int32_t out = store_tile_bytes(p);
  int32_t bytes = staged > out ? staged : out;
  return (bytes + kAtom - 1) / kAtom * kAtom;
}

int32_t tj_nvptx_wgmma_shared_bytes(const tj_nvptx_wgmma_t* p,
                                    int32_t c_bytes) {
  int32_t ring = ring_bytes(p);
  if (p->tma)
    return c_region_offset(p) + tma_c_regions(p) * c_region_bytes(p) + kAtom;
  if (p->persistent) return ring + kPersistentRows * p->c_stride * 4 + kAtom;
  return (ring > c_bytes ? ring : c_bytes) + kAtom;
}

static void init(wg_t* w, tj_nvptx_emit_t* nv, const tj_nvptx_wgmma_t* p) {
  memset(w, 0, sizeof(*w));
  w->nv = nv;
  w->em = &nv->em;
  w->b = nv->em.b;
  w->p = p;
  tj_emit_t* em = w->em;
  LLVMBuilderRef b = w->b;
  w->threads = p->tma ? 384 : p->tile_m / 64 * 128;
  w->a_bytes = p->tile_m * kRow;
  w->stage_bytes = w->a_bytes + kBK * p->tile_n * 2;
  w->a_copies = p->tile_m * 8 / w->threads;
  w->b_copies = kBK * p->tile_n / 8 / w->threads;
  // TMA tiles of 128 rows a pingpong warpgroup or 256 a cooperative pair:
  // two row blocks a warpgroup (tf32 keeps one: its tiles are C^T's).
  w->blocks = p->tma && !p->tf32 ? p->tile_m / (p->pingpong ? 64 : 128) : 1;
  w->block_acc = p->tile_n / 2;
  w->num_acc = w->blocks * w->block_acc;
  LLVMTypeRef floats[kMaxAcc];
  for (int32_t i = 0; i < w->num_acc; ++i) floats[i] = em->t_f32;
  w->acc_struct =
      LLVMStructTypeInContext(em->ctx, floats, (unsigned)w->num_acc, 0);
  w->acc = tj_emit_alloca(em, LLVMArrayType2(em->t_f32, (unsigned)w->num_acc),
                          "acc");
  for (int32_t i = 0; i < w->num_acc; ++i)
    LLVMBuildStore(b, LLVMGetUndef(em->t_f32), acc_slot(w, i));
  // The swizzle is a function of the shared address: align the ring to
  // its 1024-byte period (the launch adds that much slack).
  LLVMValueRef addr = LLVMBuildPtrToInt(b, p->smem, em->t_i32, "");
  LLVMValueRef pad = LLVMBuildAnd(b, LLVMBuildSub(b, c32(w, 0), addr, ""),
                                  c32(w, kAtom - 1), "");
  w->ring = at(w, p->smem, pad);
  w->ring_addr = LLVMBuildAdd(b, addr, pad, "ring_addr");
  w->wg = LLVMBuildLShr(b, p->tid, c32(w, 7), "wg");
  // A stage is 128 bytes of k a row either way: 64 halves or 32 f32.
  w->bk = p->tf32 ? 32 : kBK;
  w->k_tiles = LLVMBuildSDiv(b, LLVMBuildAdd(b, p->kdim, c64(w, w->bk - 1), ""),
                             c64(w, w->bk), "k_tiles");
  // k-tiles in flight beyond the current one: a stage is free again once
  // the wgmmas that read it are done, which the barrier at the top of
  // an iteration guarantees for the previous k-tile under |drain| and for
  // the one before otherwise.
  w->ahead = p->drain ? p->stages - 1 : p->stages - 2;
}

// The copies of the tile at (m0, n0); returns whether it is inside M and N.
static LLVMValueRef setup_tile(wg_t* w, LLVMValueRef m0, LLVMValueRef n0) {
  LLVMBuilderRef b = w->b;
  const tj_nvptx_wgmma_t* p = w->p;
  copy_setup(w, m0, n0);
  return LLVMBuildAnd(
      b,
      LLVMBuildICmp(b, LLVMIntSLE, LLVMBuildAdd(b, m0, c64(w, p->tile_m), ""),
                    p->m, ""),
      LLVMBuildICmp(
          b, LLVMIntSLE,
          LLVMBuildAdd(b, n0, c64(w, p->dual ? p->tile_n / 2 : p->tile_n), ""),
          p->n, ""),
      "inner");
}

// The first |ahead| k-tiles, without their commits.
static void prologue_loads(wg_t* w, LLVMValueRef inner) {
  for (int32_t s = 0; s < w->ahead; ++s) {
    tj_emit_if_t have;
    tj_emit_if_begin(w->em, &have,
                     LLVMBuildICmp(w->b, LLVMIntSLT, c64(w, s), w->k_tiles, ""),
                     "prologue");
    load_tile(w, c64(w, s), c64(w, s), inner);
    tj_emit_if_end(w->em, &have);
  }
}

// One commit per prologue k-tile, empty or not: the main loop's waits
// count groups.
static void prologue_commits(wg_t* w) {
  for (int32_t s = 0; s < w->ahead; ++s) cp_commit(w);
}

// The k loop of one tile whose prologue is in flight; ends with every
// wgmma of the tile complete (in this warpgroup).
static void main_loop(wg_t* w, LLVMValueRef inner) {
  LLVMBuilderRef b = w->b;
  tj_emit_t* em = w->em;
  const tj_nvptx_wgmma_t* p = w->p;
  tj_emit_loop_t loop;
  LLVMValueRef kt =
      tj_emit_loop_begin(em, &loop, c64(w, 0), w->k_tiles, c64(w, 1), "kt");
  cp_wait(w, w->ahead - 1);
  plain_asm(w, "fence.proxy.async.shared::cta;");
  tj_nvptx_barrier(w->nv);
  // The wgmmas first, so the tensor cores start while the copies issue.
  compute_tile(w, kt, LLVMBuildSRem(b, kt, c64(w, p->stages), ""), w->wg);
  LLVMValueRef next = LLVMBuildAdd(b, kt, c64(w, w->ahead), "");
  tj_emit_if_t more;
  tj_emit_if_begin(em, &more,
                   LLVMBuildICmp(b, LLVMIntSLT, next, w->k_tiles, ""),
                   "prefetch");
  load_tile(w, LLVMBuildSRem(b, next, c64(w, p->stages), ""), next, inner);
  tj_emit_if_end(em, &more);
  cp_commit(w);
  wgmma_wait(w, p->drain ? 0 : 1);
  tj_emit_loop_end(em, &loop);
  wgmma_wait(w, 0);
}

//===--- TMA, warp-specialized ---===//
//
// Threads [0, 128) are the producer warpgroup, [128, 384) two consumer
// warpgroups: cooperative (each tile_m / 2 rows of every tile: 64, or 128
// at tile_m 256), or pingpong (|pingpong|: tile_m 64, or 128 with two m64
// wgmmas a k16; each every other tile; see consumer()). The ring is
// the one above (same stage layout and descriptors: a TMA box of 64 elements x
// rows with the 128-byte swizzle, landing 1024-byte aligned, is what the
// cp.async copies wrote), filled by TMA instead:
//   producer, one thread, per k-tile it (counted across the block's tiles)
//   in stage s = it % stages, phase ph = (it / stages) & 1:
//     wait empty[s] with parity ph ^ 1 (a fresh barrier counts as a
//       completed phase of parity 1, so the first lap does not wait);
//     arrive.expect_tx full[s] with the bytes its boxes bring;
//     cp.async.bulk.tensor: the A box {k0, m0} (64 x tile_m), one B box
//       {n0 + 64 p, k0} (64 x 64) a panel p of 64 columns, skipping the
//       panels wholly past N (their columns of C are never stored);
//   consumer warpgroup w, per k-tile: wait full[s] with parity ph, the
//     four wgmmas of each of its 64-row blocks, commit, wait_group 1 (so
//     the previous k-tile's wgmmas are done), and lane 0 of each warp
//     arrives on that k-tile's empty barrier (count: 4 warps a consumer
//     warpgroup that reads the stage).
// The producer gives its registers to the consumers (setmaxnreg 40 and
// 232; the entry cap comes from maxntid 384 and minctasm 1). TMA
// zero-fills boxes past M, N and K, so the math needs no masks, and
// symbolic sizes come in through the tensor maps.
// After a tile's k-tiles the consumers stage C rows in their own region
// (named barrier 1 over the consumers only: the producer may be loading
// the next tile meanwhile, which is the persistent schedule's overlap)
// and run the epilogue on them.

// The shared-window address |off| bytes into the ring (i32).
static LLVMValueRef ring_at(wg_t* w, LLVMValueRef off) {
  return LLVMBuildAdd(w->b, w->ring_addr, off, "");
}

static LLVMValueRef full_bar(wg_t* w, LLVMValueRef s) {
  return LLVMBuildAdd(w->b, w->bars, LLVMBuildMul(w->b, s, c32(w, 8), ""),
                      "full");
}

static LLVMValueRef empty_bar(wg_t* w, LLVMValueRef s) {
  return LLVMBuildAdd(
      w->b, w->bars,
      LLVMBuildMul(w->b, LLVMBuildAdd(w->b, s, c32(w, w->p->stages), ""),
                   c32(w, 8), ""),
      "empty");
}

// Pingpong: the barrier consumer warpgroup |c| (i32) waits on before a
// tile's k-tiles (the other one arrives when it has waited for all of its
// own tile's).
static LLVMValueRef turn_bar(wg_t* w, LLVMValueRef c) {
  return LLVMBuildAdd(
      w->b, w->bars,
      LLVMBuildMul(w->b, LLVMBuildAdd(w->b, c, c32(w, 2 * w->p->stages), ""),
                   c32(w, 8), ""),
      "turn");
}

static void void_asm(wg_t* w, const char* text, const char* constraints,
                     LLVMValueRef* args, unsigned n) {
  inline_asm(w, w->em->t_void, text, constraints, args, n);
}

// Spins until the phase of parity |parity| (i32) of barrier |bar| has
// completed.
static void mbar_wait(wg_t* w, LLVMValueRef bar, LLVMValueRef parity) {
  LLVMValueRef a[2] = {bar, parity};
  void_asm(w,
           "{\n.reg .pred p;\nTJ_WAIT_${:uid}:\n"
           "mbarrier.try_wait.parity.shared::cta.b64 p, [$0], $1;\n"
           "@!p bra TJ_WAIT_${:uid};\n}",
           "r,r,~{memory}", a, 2);
}

static void mbar_arrive(wg_t* w, LLVMValueRef bar) {
  void_asm(w, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r,~{memory}", &bar,
           1);
}

// One box of |map| (i64) at {|x|, |y|} (i64, innermost first) into
// shared address |dst|, completing on |bar|: 2-D, or 3-D at batch entry
// |z| (i64) of a batched operand's map when |z| is not NULL. The box is
// one entry deep, so it never reads across entries: rows past M (or K) of
// entry z are outside the map's dims and zero-filled, not the next
// entry's.
static void tma_load(wg_t* w, LLVMValueRef dst, LLVMValueRef map,
                     LLVMValueRef x, LLVMValueRef y, LLVMValueRef z,
                     LLVMValueRef bar) {
  LLVMValueRef a[6] = {dst,
                       map,
                       LLVMBuildTrunc(w->b, x, w->em->t_i32, ""),
                       LLVMBuildTrunc(w->b, y, w->em->t_i32, ""),
                       bar,
                       NULL};
  if (!z) {
    void_asm(w,
             "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
             "complete_tx::bytes [$0], [$1, {$2, $3}], [$4];",
             "r,l,r,r,r,~{memory}", a, 5);
    return;
  }
  a[5] = LLVMBuildTrunc(w->b, z, w->em->t_i32, "");
  void_asm(w,
           "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::"
           "complete_tx::bytes [$0], [$1, {$2, $3, $5}], [$4];",
           "r,l,r,r,r,r,~{memory}", a, 6);
}

// tma_load's 2-D box into the same shared address of both blocks of the
// cluster, completing on the same barrier of each.
static void tma_multicast(wg_t* w, LLVMValueRef dst, LLVMValueRef map,
                          LLVMValueRef x, LLVMValueRef y, LLVMValueRef bar) {
  LLVMValueRef a[6] = {dst,
                       map,
                       LLVMBuildTrunc(w->b, x, w->em->t_i32, ""),
                       LLVMBuildTrunc(w->b, y, w->em->t_i32, ""),
                       bar,
                       LLVMConstInt(w->em->t_i16, 3, 0)};
  void_asm(w,
           "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
           "complete_tx::bytes.multicast::cluster [$0], [$1, {$2, $3}], [$4], "
           "$5;",
           "r,l,r,r,r,h,~{memory}", a, 6);
}

// This block's rank in its cluster (i32), read where it is used.
static LLVMValueRef cluster_rank(wg_t* w) {
  return inline_asm(w, w->em->t_i32, "mov.u32 $0, %cluster_ctarank;", "=r",
                    NULL, 0);
}

// Every thread of both blocks of the cluster: what each did before is
// visible to the other's after.
static void cluster_sync(wg_t* w) {
  plain_asm(w,
            "barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;");
}

// Stage and phase parity of k-tile number |it| (i64) as i32.
static void ring_slot(wg_t* w, LLVMValueRef it, LLVMValueRef* out_s,
                      LLVMValueRef* out_phase) {
  LLVMBuilderRef b = w->b;
  LLVMValueRef st = c64(w, w->p->stages);
  *out_s = LLVMBuildTrunc(b, LLVMBuildURem(b, it, st, ""), w->em->t_i32, "s");
  *out_phase = LLVMBuildTrunc(
      b, LLVMBuildAnd(b, LLVMBuildUDiv(b, it, st, ""), c64(w, 1), ""),
      w->em->t_i32, "phase");
}

static LLVMValueRef load_i64(wg_t* w, LLVMValueRef slot) {
  return LLVMBuildLoad2(w->b, w->em->t_i64, slot, "");
}

static void bump(wg_t* w, LLVMValueRef slot) {
  LLVMBuildStore(w->b, LLVMBuildAdd(w->b, load_i64(w, slot), c64(w, 1), ""),
                 slot);
}

static void producer(wg_t* w, LLVMValueRef first, LLVMValueRef step) {
  LLVMBuilderRef b = w->b;
  tj_emit_t* em = w->em;
  const tj_nvptx_wgmma_t* p = w->p;
  plain_asm(w, "setmaxnreg.dec.sync.aligned.u32 40;");
  tj_emit_if_t one;
  tj_emit_if_begin(em, &one, LLVMBuildICmp(b, LLVMIntEQ, p->tid, c32(w, 0), ""),
                   "issuer");
  LLVMValueRef it = tj_emit_alloca(em, em->t_i64, "it");
  LLVMBuildStore(b, c64(w, 0), it);
  // B panels: 64 n x 64 k of f16/bf16 (8 KiB), or 32 n x 32 k of f32
  // (4 KiB); each a box of 128-byte rows: of k rows (N-major B) or of n
  // rows (K-major B, whose map is over [N, K]: coordinates {k, n}).
  int32_t panel_n = p->tf32 ? 32 : 64;
  int32_t panel_bytes = p->tf32 ? 32 * kRow : kPanel;
  int32_t panels = p->tile_n / panel_n;
  // Dual: panels [per_b, panels) are B2's, the same columns as B's.
  int32_t per_b = p->dual ? panels / 2 : panels;
  tj_emit_loop_t tiles, ks;
  LLVMValueRef t = tj_emit_loop_begin(em, &tiles, first, p->tiles, step, "t");
  LLVMValueRef m0, n0, entry;
  p->tile_origin(p->ctx, t, &m0, &n0, &entry);
  // Panels of B with a column inside N: ceil((N - n0) / panel_n), at most
  // all.
  LLVMValueRef live = tj_emit_min_i64(
      em,
      LLVMBuildSDiv(b,
                    LLVMBuildAdd(b, LLVMBuildSub(b, p->n, n0, ""),
                                 c64(w, panel_n - 1), ""),
                    c64(w, panel_n), ""),
      c64(w, per_b));
  LLVMValueRef bytes = LLVMBuildTrunc(
      b,
      LLVMBuildAdd(
          b, c64(w, w->a_bytes),
          LLVMBuildMul(b, live, c64(w, panel_bytes * (p->dual ? 2 : 1)), ""),
          ""),
      em->t_i32, "tx_bytes");
  LLVMValueRef kt =
      tj_emit_loop_begin(em, &ks, c64(w, 0), w->k_tiles, c64(w, 1), "kt");
  LLVMValueRef s, phase;
  ring_slot(w, load_i64(w, it), &s, &phase);
  mbar_wait(w, empty_bar(w, s), LLVMBuildXor(b, phase, c32(w, 1), ""));
  LLVMValueRef full = full_bar(w, s);
  LLVMValueRef tx[2] = {full, bytes};
  void_asm(w, "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;",
           "r,r,~{memory}", tx, 2);
  LLVMValueRef base =
      ring_at(w, LLVMBuildMul(b, s, c32(w, w->stage_bytes), ""));
  LLVMValueRef k0 = LLVMBuildMul(b, kt, c64(w, w->bk), "k0");
  tma_load(w, base, p->map_a, k0, m0, p->a_batched ? entry : NULL, full);
  for (int32_t q = 0; q < panels; ++q) {
    tj_emit_if_t in;
    int32_t qb = q % per_b;  // the panel of its matrix
    LLVMValueRef map_b = q < per_b ? p->map_b : p->map_b2;
    LLVMValueRef live_q = LLVMBuildICmp(b, LLVMIntSLT, c64(w, qb), live, "");
    // Clusters: the panels of this block's parity, into both blocks.
    if (p->cluster)
      live_q = LLVMBuildAnd(
          b, live_q,
          LLVMBuildICmp(b, LLVMIntEQ, cluster_rank(w), c32(w, q % 2), ""), "");
    if (q > 0 || p->cluster) tj_emit_if_begin(em, &in, live_q, "panel");
    LLVMValueRef nq = LLVMBuildAdd(b, n0, c64(w, panel_n * qb), "");
    LLVMValueRef dst =
        LLVMBuildAdd(b, base, c32(w, w->a_bytes + q * panel_bytes), "");
    LLVMValueRef x = p->b_kmajor ? k0 : nq, y = p->b_kmajor ? nq : k0;
    if (p->cluster)
      tma_multicast(w, dst, map_b, x, y, full);
    else
      tma_load(w, dst, map_b, x, y, p->b_batched ? entry : NULL, full);
    if (q > 0 || p->cluster) tj_emit_if_end(em, &in);
  }
  bump(w, it);
  tj_emit_loop_end(em, &ks);
  tj_emit_loop_end(em, &tiles);
  tj_emit_if_end(em, &one);
}

// Lane 0 of each consumer warp: the stage of k-tile |it| (i64) is read.
static void release(wg_t* w, LLVMValueRef it) {
  tj_emit_if_t lane0;
  tj_emit_if_begin(w->em, &lane0,
                   LLVMBuildICmp(w->b, LLVMIntEQ,
                                 LLVMBuildAnd(w->b, w->p->tid, c32(w, 31), ""),
                                 c32(w, 0), ""),
                   "release");
  LLVMValueRef s, phase;
  ring_slot(w, it, &s, &phase);
  mbar_arrive(w, empty_bar(w, s));
  // The partner block's producer multicasts into this block's stage too.
  // (The rank is read here, not kept in a register across the loop.) The
  // arrive has the default .release.cta semantics, as CUTLASS's
  // ClusterBarrier::arrive: the stage was read by wgmma, complete at the
  // wgmma wait before it, and a .release.cluster on every k-tile of every
  // warp is the first suspect for the clusters' 0.34-0.64x (not yet
  // measured on the GPU).
  if (w->p->cluster) {
    LLVMValueRef bar = empty_bar(w, s);
    void_asm(w,
             "{\n.reg .b32 r, peer;\nmov.u32 peer, %cluster_ctarank;\n"
             "xor.b32 peer, peer, 1;\nmapa.shared::cluster.u32 r, $0, peer;\n"
             "mbarrier.arrive.shared::cluster.b64 _, [r];\n}",
             "r,~{memory}", &bar, 1);
  }
  tj_emit_if_end(w->em, &lane0);
}

//===--- the TMA store epilogue ---===//
//
// With |tma_store|, where |store_ok| holds, a tile's epilogue runs on the
// accumulators in registers: each thread applies the kernel's epilogue
// (epilogue_pair) to its fragment's pairs of columns and writes the two
// output elements into the region's output tile (store_tile_bytes), then
// one thread stores the tile with a TMA store a panel. Two named barriers
// a tile: the buffer is free (the issuer waited for the reads of the
// previous tile's stores, a main loop ago), and the tile is written.
// TMA clips rows and columns past M and N, so nothing is masked; the
// epilogue's loads there are clamped to the last row and column pair.

// The thread of a region's group that issues its stores: each pingpong
// warpgroup's first, or the first consumer of a cooperative pair.
static LLVMValueRef store_issuer(wg_t* w) {
  const tj_nvptx_wgmma_t* p = w->p;
  LLVMValueRef t = p->pingpong ? LLVMBuildAnd(w->b, p->tid, c32(w, 127), "")
                               : LLVMBuildSub(w->b, p->tid, c32(w, 128), "");
  return LLVMBuildICmp(w->b, LLVMIntEQ, t, c32(w, 0), "store_issuer");
}

// swiglu (issue 14): accumulators |first| and |first| + 1 as <2 x float>,
// zeros where |any| (i1) is false: a dual GEMM's second product's pair.
static LLVMValueRef dual_pair(wg_t* w, LLVMValueRef any, int32_t first) {
  LLVMValueRef v = LLVMGetUndef(LLVMVectorType(w->em->t_f32, 2));
  for (int32_t e = 0; e < 2; ++e) {
    LLVMValueRef x = tj_emit_select(
        w->em, any,
        LLVMBuildLoad2(w->b, w->em->t_f32, acc_slot(w, first + e), ""),
        LLVMConstReal(w->em->t_f32, 0.0));
    v = LLVMBuildInsertElement(w->b, v, x, c32(w, e), "");
  }
  return v;
}

// The epilogue's pairs in lockstep (issue 13, cap2048): a pair's
// epilogue is one dependent chain (the erf gelu's: an fma, rcp, five
// fmas, ex2, three products). The epilogues of kLockstep pairs are
// emitted one after another and then merged, an instruction of each in
// turn (an instruction whose operand another pair's chain defines, not
// yet placed, waits for it; chains only read earlier ones'), into one
// stream of kLockstep independent chains. They touch memory only by loads
// of the epilogue's inputs and stores of distinct output elements to
// shared memory. On the H200 the plain bf16 GEMM's epilogue at
// 16384x1024x4096 took 0.2013 ms instead of 0.2204, the fused erf gelu
// 1.6% less; ptxas reschedules the gelu's chains itself, so their SASS
// changes little (bench/RESULTS.md, cap2048).
#define kLockstep 4
#define kMaxGroupInsts 1024

typedef struct group_t {
  LLVMBasicBlockRef bb;
  int32_t n;                         // chains
  LLVMValueRef last[kLockstep + 1];  // the block's last instruction
                                     // before chain k (NULL: none)
} group_t;

static void group_begin(wg_t* w, group_t* g) {
  g->bb = LLVMGetInsertBlock(w->b);
  g->n = 0;
}

static void group_mark(wg_t* w, group_t* g) {
  g->last[g->n++] = LLVMGetInsertBlock(w->b) == g->bb
                        ? LLVMGetLastInstruction(g->bb)
                        : (LLVMValueRef)(intptr_t)-1;
}

static int32_t find_inst(LLVMValueRef* insts, int32_t n, LLVMValueRef v) {
  for (int32_t i = n; i-- > 0;)
    if (insts[i] == v) return i;
  return -1;
}

// Merges the chains emitted since the marks (see kLockstep); leaves them
// as they are where any chain left the block.
static void group_end(wg_t* w, group_t* g) {
  if (g->n < 2 || LLVMGetInsertBlock(w->b) != g->bb) return;
  for (int32_t k = 0; k < g->n; ++k)
    if (g->last[k] == (LLVMValueRef)(intptr_t)-1) return;
  LLVMValueRef insts[kMaxGroupInsts];
  int8_t placed[kMaxGroupInsts];
  int32_t n = 0, start[kLockstep + 1];
  for (int32_t c = 0; c < g->n; ++c) {
    start[c] = n;
    LLVMValueRef in = g->last[c] ? LLVMGetNextInstruction(g->last[c])
                                 : LLVMGetFirstInstruction(g->bb);
    LLVMValueRef end = NULL;
    if (c + 1 < g->n)
      end = g->last[c + 1] ? LLVMGetNextInstruction(g->last[c + 1])
                           : LLVMGetFirstInstruction(g->bb);
    for (; in && in != end; in = LLVMGetNextInstruction(in)) {
      if (n == kMaxGroupInsts) return;
      placed[n] = 0;
      insts[n++] = in;
    }
  }
  start[g->n] = n;
  for (int32_t i = 0; i < n; ++i) LLVMInstructionRemoveFromParent(insts[i]);
  LLVMPositionBuilderAtEnd(w->b, g->bb);
  int32_t next[kLockstep], left = n;
  for (int32_t c = 0; c < g->n; ++c) next[c] = start[c];
  while (left > 0) {
    for (int32_t c = 0; c < g->n; ++c) {
      if (next[c] >= start[c + 1]) continue;
      LLVMValueRef x = insts[next[c]];
      bool ready = true;
      for (int32_t o = 0, no = LLVMGetNumOperands(x); o < no && ready; ++o) {
        int32_t d = find_inst(insts, n, LLVMGetOperand(x, (unsigned)o));
        ready = d < 0 || placed[d];
      }
      if (!ready) continue;
      LLVMInsertIntoBuilder(w->b, x);
      placed[next[c]++] = 1;
      --left;
    }
  }
}

// The tile at (m0, n0) of this warpgroup's row blocks (from block
// |rows_wg|, i32) through the output tile at |region| (i32, bytes into
// the ring), its group's named barrier |bar_args|; zeros where |any| (i1)
// is false (K = 0).
static tj_status_t store_tile(wg_t* w, LLVMValueRef m0, LLVMValueRef n0,
                              LLVMValueRef rows_wg, LLVMValueRef region,
                              LLVMValueRef* bar_args, LLVMValueRef any) {
  LLVMBuilderRef b = w->b;
  tj_emit_t* em = w->em;
  const tj_nvptx_wgmma_t* p = w->p;
  LLVMValueRef issuer = store_issuer(w);
  tj_emit_if_t wait;
  tj_emit_if_begin(em, &wait, issuer, "store_wait");
  plain_asm(w, "cp.async.bulk.wait_group.read 0;");
  tj_emit_if_end(em, &wait);
  void_asm(w, "bar.sync $0, $1;", "r,r,~{memory}", bar_args, 2);
  // Thread (warp q, lane l) holds rows 64 (rows_wg + j) + 16 q + l / 4 +
  // 8 h and columns 8 x + 2 (l % 4) + {0, 1} (stage_c's fragment): its
  // rows are l / 4 modulo 8 (the swizzle's XOR), its column pair
  // 2 (l % 4) bytes_ (2 or 4 bytes each) into a 16-byte chunk or, for f32,
  // the second half of an odd one.
  int32_t eb = p->store_bytes, panel_cols = kRow / eb;
  LLVMValueRef q =
      LLVMBuildAnd(b, LLVMBuildLShr(b, p->tid, c32(w, 5), ""), c32(w, 3), "");
  LLVMValueRef lane = LLVMBuildAnd(b, p->tid, c32(w, 31), "");
  LLVMValueRef sw = LLVMBuildLShr(b, lane, c32(w, 2), "");
  LLVMValueRef row_t =
      LLVMBuildAdd(b,
                   LLVMBuildAdd(b, LLVMBuildMul(b, rows_wg, c32(w, 64), ""),
                                LLVMBuildMul(b, q, c32(w, 16), ""), ""),
                   sw, "row_t");
  LLVMValueRef col_t =
      LLVMBuildMul(b, LLVMBuildAnd(b, lane, c32(w, 3), ""), c32(w, 2), "");
  LLVMValueRef col_bytes = LLVMBuildMul(b, col_t, c32(w, eb), "");
  LLVMValueRef chunk_t = LLVMBuildXor(
      b, LLVMBuildLShr(b, col_bytes, c32(w, 4), ""), sw, "chunk_t");
  LLVMValueRef within = LLVMBuildAnd(b, col_bytes, c32(w, 15), "");
  LLVMValueRef base = LLVMBuildAdd(
      b, region,
      LLVMBuildAdd(b, LLVMBuildMul(b, row_t, c32(w, kRow), ""), within, ""),
      "store_base");
  LLVMValueRef row_m =
      LLVMBuildAdd(b, m0, LLVMBuildZExt(b, row_t, em->t_i64, ""), "row_m");
  LLVMValueRef col_n =
      LLVMBuildAdd(b, n0, LLVMBuildZExt(b, col_t, em->t_i64, ""), "col_n");
  LLVMTypeRef v2 = LLVMVectorType(em->t_f32, 2);
  LLVMValueRef zero = LLVMConstReal(em->t_f32, 0.0);
  // swiglu (issue 14): a dual GEMM's pairs are C's (the first tile_n / 2
  // columns), each with C2's pair block_acc / 2 accumulators on.
  int32_t pair_accs = p->dual ? w->block_acc / 2 : w->block_acc;
  // Pingpong only: there one warpgroup's epilogue runs beside the other's
  // main loop, its warps alone on their schedulers; the cooperative
  // schedules' 128 accumulators a thread spill with the chains' registers
  // (256x128 s3: 12 bytes).
  int32_t lockstep = p->pingpong && !p->pairs_in_order ? kLockstep : 1;
  group_t group;
  group_begin(w, &group);
  for (int32_t j = 0; j < w->blocks; ++j) {
    for (int32_t i = 0; i < pair_accs; i += 2) {
      if (group.n == lockstep) {
        group_end(w, &group);
        group_begin(w, &group);
      }
      group_mark(w, &group);
      int32_t row_c = 64 * j + 8 * ((i / 2) % 2), col_c = 8 * (i / 4);
      int32_t panel = col_c / panel_cols;
      int32_t chunk_c = (col_c % panel_cols) * eb / 16;
      LLVMValueRef off = LLVMBuildAdd(
          b, base,
          LLVMBuildAdd(
              b,
              LLVMBuildShl(b, LLVMBuildXor(b, chunk_t, c32(w, chunk_c), ""),
                           c32(w, 4), ""),
              c32(w, panel * p->tile_m * kRow + row_c * kRow), ""),
          "");
      LLVMValueRef v = LLVMGetUndef(v2);
      for (int32_t e = 0; e < 2; ++e) {
        // A select into a new value, not a write to the accumulator.
        LLVMValueRef x = tj_emit_select(
            em, any,
            LLVMBuildLoad2(b, em->t_f32, acc_slot(w, j * w->block_acc + i + e),
                           ""),
            zero);
        v = LLVMBuildInsertElement(b, v, x, c32(w, e), "");
      }
      if (p->dual) {
        TJ_RETURN_IF_ERROR(p->epilogue_pair_dual(
            p->ctx, LLVMBuildAdd(b, row_m, c64(w, row_c), "row"),
            LLVMBuildAdd(b, col_n, c64(w, col_c), "col"), v,
            dual_pair(w, any, j * w->block_acc + i + w->block_acc / 2),
            at(w, w->ring, off)));
        continue;
      }
      TJ_RETURN_IF_ERROR(p->epilogue_pair(
          p->ctx, m0, n0, LLVMBuildAdd(b, row_m, c64(w, row_c), "row"),
          LLVMBuildAdd(b, col_n, c64(w, col_c), "col"), v,
          at(w, w->ring, off)));
    }
  }
  group_end(w, &group);
  // The generic-proxy writes, visible to the TMA store (async proxy).
  plain_asm(w, "fence.proxy.async.shared::cta;");
  void_asm(w, "bar.sync $0, $1;", "r,r,~{memory}", bar_args, 2);
  tj_emit_if_t issue;
  tj_emit_if_begin(em, &issue, issuer, "store_issue");
  int32_t panels = (p->dual ? p->tile_n / 2 : p->tile_n) / panel_cols;
  for (int32_t k = 0; k < panels; ++k) {
    // Panels wholly past N hold nothing to store.
    LLVMValueRef x = LLVMBuildAdd(b, n0, c64(w, k * panel_cols), "");
    tj_emit_if_t live;
    if (k > 0)
      tj_emit_if_begin(em, &live, LLVMBuildICmp(b, LLVMIntSLT, x, p->n, ""),
                       "store_panel");
    LLVMValueRef a[4] = {
        p->map_c, LLVMBuildTrunc(b, x, em->t_i32, ""),
        LLVMBuildTrunc(b, m0, em->t_i32, ""),
        ring_at(w, LLVMBuildAdd(b, region, c32(w, k * p->tile_m * kRow), ""))};
    void_asm(w,
             "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group "
             "[$0, {$1, $2}], [$3];",
             "l,r,r,r,~{memory}", a, 4);
    if (k > 0) tj_emit_if_end(em, &live);
  }
  plain_asm(w, "cp.async.bulk.commit_group;");
  tj_emit_if_end(em, &issue);
  return NULL;
}

// Consumer warpgroup |cw| (i32, 0 or 1). Cooperative: both take every
// tile, warpgroup cw its rows [h cw, h cw + h), h = tile_m / 2. Pingpong:
// warpgroup cw takes every other tile of the block, all of its rows, so
// that one's epilogue runs while the other's wgmmas do; each has its own C
// rows and named barrier (1 + cw).
static tj_status_t consumer(wg_t* w, LLVMValueRef cw, LLVMValueRef first,
                            LLVMValueRef step, LLVMValueRef any) {
  LLVMBuilderRef b = w->b;
  tj_emit_t* em = w->em;
  const tj_nvptx_wgmma_t* p = w->p;
  bool pingpong = p->pingpong;
  plain_asm(w, "setmaxnreg.inc.sync.aligned.u32 232;");
  int32_t c_rows = tma_c_rows(p);
  LLVMValueRef region = c32(w, c_region_offset(p));
  // The warpgroup's first row block of the stage's A.
  LLVMValueRef rows_wg =
      pingpong ? c32(w, 0) : LLVMBuildMul(b, cw, c32(w, w->blocks), "");
  // TF32: the warpgroup's first column (cooperative: half the columns each).
  LLVMValueRef n_wg =
      pingpong ? c32(w, 0) : LLVMBuildMul(b, cw, c32(w, p->tile_n / 2), "n_wg");
  LLVMValueRef bar_id = c32(w, 1);
  if (pingpong) {
    region = LLVMBuildAdd(
        b, region, LLVMBuildMul(b, cw, c32(w, c_region_bytes(p)), ""), "");
    bar_id = LLVMBuildAdd(b, cw, c32(w, 1), "bar_id");
  }
  LLVMValueRef c_region = at(w, w->ring, region);
  LLVMValueRef bar_args[2] = {bar_id, c32(w, pingpong ? 128 : 256)};
  LLVMValueRef start = first, stride = step;
  if (pingpong) {
    start = LLVMBuildAdd(
        b, first,
        LLVMBuildMul(b, LLVMBuildZExt(b, cw, em->t_i64, ""), step, ""), "");
    stride = LLVMBuildMul(b, step, c64(w, 2), "");
  }
  tj_emit_loop_t tiles, ks;
  LLVMValueRef t = tj_emit_loop_begin(em, &tiles, start, p->tiles, stride, "t");
  LLVMValueRef m0, n0, entry;
  p->tile_origin(p->ctx, t, &m0, &n0, &entry);
  // Pingpong: the warpgroups take turns through the ring, a tile each.
  // Warpgroup cw waits for the other to have seen all of the block's
  // previous tile land (warpgroup 0's first wait passes: a fresh barrier
  // counts as a completed phase of parity 1): without the turns it could
  // wait on a full barrier more than one phase ahead of it, which the
  // parity cannot tell from a completed one.
  if (pingpong) {
    LLVMValueRef u =
        LLVMBuildUDiv(b, LLVMBuildSub(b, t, start, ""), stride, "");
    LLVMValueRef parity = LLVMBuildXor(
        b, LLVMBuildTrunc(b, LLVMBuildAnd(b, u, c64(w, 1), ""), em->t_i32, ""),
        LLVMBuildZExt(b, LLVMBuildICmp(b, LLVMIntEQ, cw, c32(w, 0), ""),
                      em->t_i32, ""),
        "turn_parity");
    mbar_wait(w, turn_bar(w, cw), parity);
  }
  // The block's j-th tile's k-tiles are numbers j k_tiles .. in the ring.
  LLVMValueRef it0 =
      LLVMBuildMul(b, LLVMBuildUDiv(b, LLVMBuildSub(b, t, first, ""), step, ""),
                   w->k_tiles, "it0");
  LLVMValueRef kt =
      tj_emit_loop_begin(em, &ks, c64(w, 0), w->k_tiles, c64(w, 1), "kt");
  LLVMValueRef cur = LLVMBuildAdd(b, it0, kt, "it");
  LLVMValueRef s, phase;
  ring_slot(w, cur, &s, &phase);
  mbar_wait(w, full_bar(w, s), phase);
  if (p->tf32) {
    // The next k-tile's fragments reuse the registers these wgmmas read.
    compute_tile_tf32(w, kt, LLVMBuildZExt(b, s, em->t_i64, ""), n_wg);
    wgmma_wait(w, 0);
    release(w, cur);
  } else {
    compute_tile(w, kt, LLVMBuildZExt(b, s, em->t_i64, ""), rows_wg);
    wgmma_wait(w, 1);
    tj_emit_if_t prev;
    tj_emit_if_begin(em, &prev, LLVMBuildICmp(b, LLVMIntSGT, kt, c64(w, 0), ""),
                     "prev");
    release(w, LLVMBuildSub(b, cur, c64(w, 1), ""));
    tj_emit_if_end(em, &prev);
  }
  tj_emit_loop_end(em, &ks);
  if (pingpong) {
    // This warpgroup's waits for the tile are over: the other's turn.
    tj_emit_if_t lane0;
    tj_emit_if_begin(
        em, &lane0,
        LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildAnd(b, p->tid, c32(w, 31), ""),
                      c32(w, 0), ""),
        "turn_over");
    mbar_arrive(w, turn_bar(w, LLVMBuildSub(b, c32(w, 1), cw, "")));
    tj_emit_if_end(em, &lane0);
  }
  wgmma_wait(w, 0);
  if (!p->tf32) {
    tj_emit_if_t last;
    tj_emit_if_begin(em, &last, any, "last");
    release(w, LLVMBuildSub(b, LLVMBuildAdd(b, it0, w->k_tiles, ""), c64(w, 1),
                            ""));
    tj_emit_if_end(em, &last);
  }
  tj_emit_if_t tma_store, staged;
  if (p->tma_store) {
    tj_emit_if_begin(em, &tma_store, p->store_ok, "tma_store");
    TJ_RETURN_IF_ERROR(store_tile(w, m0, n0, rows_wg, region, bar_args, any));
    tj_emit_if_end(em, &tma_store);
    tj_emit_if_begin(em, &staged, LLVMBuildNot(b, p->store_ok, ""), "staged");
  }
  for (int32_t r = 0; r < p->tile_m; r += c_rows) {
    if (p->tf32) {
      stage_c_tf32(w, n_wg, c_region, r, c_rows, any);
    } else {
      for (int32_t j = 0; j < w->blocks; ++j)
        stage_c(w, rows_wg, j, c_region, r, c_rows, any);
    }
    void_asm(w, "bar.sync $0, $1;", "r,r,~{memory}", bar_args, 2);
    TJ_RETURN_IF_ERROR(p->epilogue(p->ctx, m0, n0, entry, c_region, r, c_rows));
    void_asm(w, "bar.sync $0, $1;", "r,r,~{memory}", bar_args, 2);
  }
  if (p->tma_store) tj_emit_if_end(em, &staged);
  tj_emit_loop_end(em, &tiles);
  if (p->tma_store) {
    // The block's shared memory must outlive the last tile's stores.
    tj_emit_if_t issuer;
    tj_emit_if_begin(em, &issuer, store_issuer(w), "store_drain");
    plain_asm(w, "cp.async.bulk.wait_group 0;");
    tj_emit_if_end(em, &issuer);
  }
  return NULL;
}

static tj_status_t emit_tma(wg_t* w, LLVMValueRef any) {
  LLVMBuilderRef b = w->b;
  tj_emit_t* em = w->em;
  const tj_nvptx_wgmma_t* p = w->p;
  w->bars = LLVMBuildAdd(b, w->ring_addr, c32(w, ring_bytes(p)), "bars");
  tj_emit_if_t t0;
  tj_emit_if_begin(em, &t0, LLVMBuildICmp(b, LLVMIntEQ, p->tid, c32(w, 0), ""),
                   "init");
  for (int32_t s = 0; s < p->stages; ++s) {
    LLVMValueRef full[2] = {full_bar(w, c32(w, s)), c32(w, 1)};
    // One arrival a consumer warp that reads the stage: both warpgroups'
    // (cooperative) or one's (pingpong).
    // Clusters: the partner block's consumers too (its producer writes
    // this stage of both blocks).
    LLVMValueRef empty[2] = {
        empty_bar(w, c32(w, s)),
        c32(w, (p->pingpong ? 4 : 8) * (p->cluster ? 2 : 1))};
    void_asm(w, "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r,~{memory}",
             full, 2);
    void_asm(w, "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r,~{memory}",
             empty, 2);
  }
  // Pingpong's turns: one arrival a warp of the other warpgroup.
  for (int32_t c = 0; c < 2 && p->pingpong; ++c) {
    LLVMValueRef turn[2] = {turn_bar(w, c32(w, c)), c32(w, 4)};
    void_asm(w, "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r,~{memory}",
             turn, 2);
  }
  // The inits are visible to the async proxy (TMA's complete_tx) too.
  plain_asm(w, "fence.mbarrier_init.release.cluster;");
  // With K = 0 the host leaves the maps zeroed (nothing is loaded).
  tj_emit_if_t maps;
  tj_emit_if_begin(em, &maps, any, "prefetch_maps");
  LLVMValueRef map[3] = {p->map_a, p->map_b, p->map_b2};
  for (int i = 0; i < (p->dual ? 3 : 2); ++i)
    void_asm(w, "prefetch.tensormap [$0];", "l,~{memory}", &map[i], 1);
  tj_emit_if_end(em, &maps);
  tj_emit_if_end(em, &t0);
  LLVMValueRef first = tj_nvptx_sreg64(w->nv, "ctaid.x");
  LLVMValueRef step = tj_nvptx_sreg64(w->nv, "nctaid.x");
  if (p->cluster) {
    // The partner's barriers are initialized before either block's
    // multicasts or remote arrivals reach them.
    cluster_sync(w);
    first = LLVMBuildLShr(b, first, c64(w, 1), "cluster_id");
    step = LLVMBuildLShr(b, step, c64(w, 1), "clusters");
  } else {
    tj_nvptx_barrier(w->nv);
  }
  LLVMValueRef is_producer =
      LLVMBuildICmp(b, LLVMIntEQ, w->wg, c32(w, 0), "producer");
  tj_emit_if_t prod, cons;
  tj_emit_if_begin(em, &prod, is_producer, "producer");
  producer(w, first, step);
  tj_emit_if_end(em, &prod);
  tj_emit_if_begin(em, &cons, LLVMBuildNot(b, is_producer, ""), "consumer");
  tj_status_t s = consumer(w, LLVMBuildSub(b, w->wg, c32(w, 1), "consumer"),
                           first, step, any);
  tj_emit_if_end(em, &cons);
  // Neither block exits while the other may still arrive on its barriers.
  if (p->cluster) cluster_sync(w);
  return s;
}

tj_status_t tj_nvptx_emit_wgmma(tj_nvptx_emit_t* nv,
                                const tj_nvptx_wgmma_t* p) {
  wg_t w;
  init(&w, nv, p);
  tj_emit_t* em = w.em;
  LLVMBuilderRef b = w.b;
  LLVMValueRef any =
      LLVMBuildICmp(b, LLVMIntSGT, w.k_tiles, c64(&w, 0), "any_k");
  if (p->dual && (p->tf32 || p->cluster || p->tile_n < 128 ||
                  (p->tma_store && !p->epilogue_pair_dual)))
    return tj_internal(
        "dual wgmma: f16/bf16, tile_n 128 or 256, no cluster (here %dx%d)",
        (int)p->tile_m, (int)p->tile_n);
  if (p->tf32 && (!p->tma || (p->tile_m == 128 && p->tile_n < 128)))
    return tj_internal(
        "tf32 wgmma: TMA only, and 128 or 256 columns a "
        "cooperative tile (here %dx%d)",
        (int)p->tile_m, (int)p->tile_n);
  if (p->tma) return emit_tma(&w, any);
  if (!p->persistent) {
    LLVMValueRef inner = setup_tile(&w, p->m0, p->n0);
    prologue_loads(&w, inner);
    prologue_commits(&w);
    main_loop(&w, inner);
    cp_wait(&w, 0);
    // The C tile reuses the ring: every warpgroup's wgmmas must be done.
    tj_nvptx_barrier(nv);
    stage_c(&w, w.wg, 0, p->smem, 0, p->tile_m, any);
    tj_nvptx_barrier(nv);
    return NULL;
  }
  // Persistent: block b takes tiles b, b + nblocks, ...; while one tile's
  // epilogue runs, the next tile's first k-tiles load into the ring.
  LLVMValueRef c_region = at(&w, w.ring, c32(&w, ring_bytes(p)));
  LLVMValueRef first = tj_nvptx_sreg64(nv, "ctaid.x");
  LLVMValueRef step = tj_nvptx_sreg64(nv, "nctaid.x");
  tj_emit_if_t have;
  tj_emit_if_begin(em, &have, LLVMBuildICmp(b, LLVMIntSLT, first, p->tiles, ""),
                   "first_tile");
  {
    LLVMValueRef m0, n0, entry;
    p->tile_origin(p->ctx, first, &m0, &n0, &entry);
    prologue_loads(&w, setup_tile(&w, m0, n0));
  }
  tj_emit_if_end(em, &have);
  prologue_commits(&w);
  tj_emit_loop_t tiles;
  LLVMValueRef t =
      tj_emit_loop_begin(em, &tiles, first, p->tiles, step, "tile");
  LLVMValueRef m0, n0, entry;
  p->tile_origin(p->ctx, t, &m0, &n0, &entry);
  main_loop(&w, setup_tile(&w, m0, n0));
  // Every warpgroup's wgmmas are done: the ring is free.
  tj_nvptx_barrier(nv);
  LLVMValueRef next = LLVMBuildAdd(b, t, step, "next_tile");
  tj_emit_if_t more;
  tj_emit_if_begin(em, &more, LLVMBuildICmp(b, LLVMIntSLT, next, p->tiles, ""),
                   "next_prologue");
  {
    LLVMValueRef nm0, nn0, next_entry;
    p->tile_origin(p->ctx, next, &nm0, &nn0, &next_entry);
    prologue_loads(&w, setup_tile(&w, nm0, nn0));
  }
  tj_emit_if_end(em, &more);
  prologue_commits(&w);
  for (int32_t r = 0; r < p->tile_m; r += kPersistentRows) {
    stage_c(&w, w.wg, 0, c_region, r, kPersistentRows, any);
    tj_nvptx_barrier(nv);
    TJ_RETURN_IF_ERROR(
        p->epilogue(p->ctx, m0, n0, entry, c_region, r, kPersistentRows));
    tj_nvptx_barrier(nv);
  }
  tj_emit_loop_end(em, &tiles);
  cp_wait(&w, 0);
  return NULL;
}
