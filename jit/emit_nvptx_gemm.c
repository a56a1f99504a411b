// The GEMM template for NVPTX: C[.., m, n] = epilogue(sum_k A[.., m, k] *
// B[.., k, n]) for one 128x128 tile of C per block of 256 threads.
//
// Tensor cores (f16/bf16 A and B, f32 accumulators; sm_80 and later):
//   - A (row-major, k contiguous) and B (row-major, n contiguous) k-tiles of
//     bk = 32 (or 64) are copied global -> shared with 16-byte cp.async.cg
//     into a ring of stages (4 by default), stages - 1 tiles ahead of the
//     math (zero-filled past M, N and K, so edges need no masks in the main
//     loop); two blocks share an SM (<= 128 registers a thread);
//   - 8 warps as 2 (m) x 4 (n), each a 64x32 warp tile: 4 x 4 mma.sync
//     m16n8k16 per 16 of k, fragments loaded with ldmatrix (.trans for B);
//   - shared tiles are XOR-swizzled by 16-byte chunk, so that the 8 rows one
//     ldmatrix phase reads hit 32 distinct banks:
//       A row r (128 bytes, bk 64): chunk c at c ^ (r & 7)
//       A row r (64 bytes, bk 32):  chunk c at c ^ ((r >> 1) & 3)
//       B row k (256 bytes):         chunk c at c ^ (k & 7)
//   - a K-major B (contiguous along k: the [N, K] weight of x @ w^T,
//     tj_kir_gemm_b_kmajor) is copied and stored as A is, row n of the
//     tile in A's layout for row m, and its fragments loaded by ldmatrix
//     without .trans (a row of n is a column of the col-major fragment);
// On sm_90a (by default, or with gemm_kernel = WGMMA) the f16/bf16 main
// loop is wgmma.mma_async instead, with tiles of 64 or 128 x 64, 128 or
// 256 (emit_nvptx_wgmma.c; a K-major B there too, without trans-b); its
// accumulators land in the same staged C tile and go through the same
// epilogue.
// CUDA cores (f32 A and B, any strides): the same ring with 4-byte cp.async
// (A stored transposed, rows padded against bank conflicts), k-tiles of 8
// (or 16), each thread an 8x8 register tile of FMAs; where A is contiguous
// along k and B along n with 16-byte aligned rows (checked per block at
// run time), 16-byte cp.async instead, A kept row-major (f32v_*). With
// gemm_tile_m 256, 256x128 tiles, each thread 8x16 (f32w_*).
// TF32 tensor cores (f32 A and B with gemm_tf32 and gemm_tma, sm_90a):
// the TMA wgmma schedules with .tf32 operands (emit_nvptx_wgmma.c).
//
// Epilogue: the accumulator tile goes through shared memory (row stride
// 136 floats against bank conflicts) so that every thread then walks whole
// rows of C: the kernel IR's epilogue phase (bias, gelu, residual, casts,
// stores) runs on 8 or 4 consecutive columns per step with vector loads
// and stores when sizes and alignment allow, else column by column.
//
// Blocks are rastered in groups of kGroupM tile rows so that the blocks
// running together share B columns and A rows in L2.

#include <string.h>

#include "jit/emit_nvptx.h"

#define kBM 128
#define kBN 128
#define kThreads 256
#define kGroupM 8
// The weight-only GEMM's most blocks a tile along K (emit_nvptx_wqmma.c).
#define kWqMaxSplits 4
// ... in the tile layout: a warp's chunk is 32 16-byte loads, so that a
// block's warps may take one chunk each.
#define kWqMaxSplitsTiled 8
#define kCStride (kBN + 8)  // floats per row of the staged C tile
#define kCBytes (kBM * kCStride * 4)

// Tensor-core path: k-tiles of 32 or 64 (tj_nvptx_options_t).
#define kTcDefaultBK 32
#define kTcDefaultStages 4
#define kTcMaxCopies 4  // 16-byte chunks per thread per operand and k-tile

// CUDA-core path: k-tiles of 8 (default) or 16 (gemm_tile_k).
#define kF32DefaultBK 8
#define kF32Stages 4
#define kF32MaxCopies 8  // 4-byte copies per thread per operand and k-tile
// A is stored transposed, [k][m], rows of kBM floats padded to
// kF32AStride: the copies of a warp write 2 or 4 m of 16 or 8 k, which
// unpadded rows (512 bytes apart) would put in one bank.
#define kF32AStride (kBM + 4)

static int32_t max_i32(int32_t a, int32_t b) { return a > b ? a : b; }

typedef struct gemm_t {
  tj_nvptx_emit_t* nv;
  tj_emit_t* em;
  LLVMBuilderRef b;
  const tj_kir_t* k;
  uint32_t a, bb;  // the A and B buffers
  // swiglu (issue 14): a dual GEMM's B2 buffer (tj_kir_gemm_is_dual), or
  // TJ_KIR_NONE. The block's tile of C is then tile_n columns of both
  // products, staged side by side (C2's tile_n columns after C's).
  uint32_t b2;
  tj_dtype_t in_dtype;
  int32_t rank;
  LLVMValueRef m, n, kdim;  // i64 sizes
  LLVMValueRef m0, n0;      // i64 tile origin
  LLVMValueRef tid;         // i32
  LLVMValueRef smem;        // ptr addrspace(3): the dynamic shared memory
  tj_emit_point_t batch;    // pointers at the batch entry's origin
  LLVMValueRef acc;         // alloca [acc_len x float]
  int32_t acc_len;          // 64 (0 reads as 64), or 128 (f32 256x128)
  // Tensor cores: the k-tile and what it implies (CUDA cores: bk 8 or
  // 16, a_bytes and stage_bytes likewise).
  int32_t bk;           // 32 or 64
  int32_t a_bytes;      // one stage's A tile: kBM x bk halves
  int32_t stage_bytes;  // A and B tiles
  int32_t copies;       // 16-byte chunks per thread per operand
  // The block's tile of C and its staging in shared memory (the wgmma
  // path varies them; the others use kBM x kBN, kThreads, kCStride).
  int32_t tile_m, tile_n, threads, c_stride;
  LLVMTypeRef acc_type;  // of the staged C tile: i32 (8-bit), else f32
  bool c_swizzled;       // the wgmma kernels' tj_nvptx_wgmma_c_col layout
  // B contiguous along k (tj_kir_gemm_b_kmajor: x @ w^T): the tensor-core
  // loops keep its tile K-major in shared memory, rows of n laid out as
  // A's rows of m.
  bool b_kmajor;
  // The f32 256x128 loop with A transposed in shared memory
  // (gemm_f32_a_transposed; f32w_*).
  bool f32w_at;
  // The TMA schedules of a batched GEMM: the batch entries are folded into
  // the tile index (entry t / |tiles_per_entry|), so the persistent grid's
  // blocks run over every entry's tiles and the grid has no z.
  bool fold_batch;
  LLVMValueRef tiles_per_entry;  // i64
  uint32_t store_out;  // the TMA store's output buffer (tma_store_output)
  // gemm_cluster: the grouped raster runs over pairs of vertically
  // adjacent tiles, a cluster's, and the block takes the pair's
  // |cluster_rank| (i64) one.
  int32_t cluster;  // 1 or 2
  LLVMValueRef cluster_rank;
} gemm_t;

static LLVMValueRef c32(gemm_t* g, int64_t v) {
  return LLVMConstInt(g->em->t_i32, (unsigned long long)v, 1);
}
static LLVMValueRef c64(gemm_t* g, int64_t v) {
  return LLVMConstInt(g->em->t_i64, (unsigned long long)v, 1);
}

static LLVMValueRef smem_at(gemm_t* g, LLVMValueRef base, LLVMValueRef off) {
  return LLVMBuildGEP2(g->b, g->em->t_i8, base, &off, 1, "");
}

static LLVMValueRef to_global(gemm_t* g, LLVMValueRef ptr) {
  return LLVMBuildAddrSpaceCast(g->b, ptr, g->nv->t_ptr_global, "");
}

static LLVMValueRef call(gemm_t* g, const char* name, LLVMValueRef* args,
                         unsigned n) {
  return tj_emit_intrinsic(g->em, name, NULL, 0, args, n);
}

static LLVMValueRef acc_slot(gemm_t* g, int32_t i) {
  LLVMValueRef idx[2] = {c32(g, 0), c32(g, i)};
  return LLVMBuildGEP2(
      g->b, LLVMArrayType2(g->em->t_f32, g->acc_len ? g->acc_len : 64), g->acc,
      idx, 2, "");
}

static void commit(gemm_t* g) {
  call(g, "llvm.nvvm.cp.async.commit.group", NULL, 0);
}

static void wait_groups(gemm_t* g, int32_t pending) {
  LLVMValueRef n = c32(g, pending);
  call(g, "llvm.nvvm.cp.async.wait.group", &n, 1);
}

// min(max(v, 0), hi) for i64 |v|.
static LLVMValueRef clamp0(gemm_t* g, LLVMValueRef v, int64_t hi) {
  LLVMValueRef lo = tj_emit_select(
      g->em, LLVMBuildICmp(g->b, LLVMIntSLT, v, c64(g, 0), ""), c64(g, 0), v);
  return tj_emit_min_i64(g->em, lo, c64(g, hi));
}

//===--- tile origin and batch ---===//

// The origin (m0, n0) of tile |pid| (i64) in the grouped raster order.
static void tile_coords(gemm_t* g, LLVMValueRef pid, LLVMValueRef* out_m0,
                        LLVMValueRef* out_n0) {
  LLVMBuilderRef b = g->b;
  int32_t rows = g->tile_m * (g->cluster > 1 ? g->cluster : 1);
  LLVMValueRef tiles_m = LLVMBuildSDiv(
      b, LLVMBuildAdd(b, g->m, c64(g, rows - 1), ""), c64(g, rows), "");
  LLVMValueRef tiles_n =
      LLVMBuildSDiv(b, LLVMBuildAdd(b, g->n, c64(g, g->tile_n - 1), ""),
                    c64(g, g->tile_n), "");
  LLVMValueRef per_group = LLVMBuildMul(b, tiles_n, c64(g, kGroupM), "");
  LLVMValueRef group = LLVMBuildSDiv(b, pid, per_group, "");
  LLVMValueRef first_m = LLVMBuildMul(b, group, c64(g, kGroupM), "");
  LLVMValueRef size = tj_emit_min_i64(
      g->em, LLVMBuildSub(b, tiles_m, first_m, ""), c64(g, kGroupM));
  LLVMValueRef in_group = LLVMBuildSRem(b, pid, per_group, "");
  LLVMValueRef tm =
      LLVMBuildAdd(b, first_m, LLVMBuildSRem(b, in_group, size, ""), "tm");
  LLVMValueRef tn = LLVMBuildSDiv(b, in_group, size, "tn");
  *out_m0 = LLVMBuildMul(b, tm, c64(g, rows), "m0");
  if (g->cluster > 1)
    *out_m0 = LLVMBuildAdd(
        b, *out_m0, LLVMBuildMul(b, g->cluster_rank, c64(g, g->tile_m), ""),
        "m0");
  *out_n0 = LLVMBuildMul(b, tn, c64(g, g->tile_n), "n0");
}

// Tiles of C in one batch entry (i64); with clusters, pairs of tiles.
static LLVMValueRef tile_count(gemm_t* g) {
  LLVMBuilderRef b = g->b;
  int32_t rows = g->tile_m * (g->cluster > 1 ? g->cluster : 1);
  LLVMValueRef tiles_m = LLVMBuildSDiv(
      b, LLVMBuildAdd(b, g->m, c64(g, rows - 1), ""), c64(g, rows), "");
  LLVMValueRef tiles_n =
      LLVMBuildSDiv(b, LLVMBuildAdd(b, g->n, c64(g, g->tile_n - 1), ""),
                    c64(g, g->tile_n), "");
  return LLVMBuildMul(b, tiles_m, tiles_n, "tiles");
}

// The block's batch entry (ctaid.z) and, unless persistent, its tile
// (ctaid.x).
static void tile_origin(gemm_t* g) {
  // The weight-only GEMM's cluster join: the S blocks of a cluster (the
  // splits of one tile) are S consecutive ctaid.x.
  if (g->nv->info->wq_cluster) {
    LLVMValueRef s = LLVMBuildZExt(
        g->b,
        tj_emit_inline_asm(g->em, g->em->t_i32,
                           "mov.u32 $0, %cluster_nctarank;", "=r", NULL, 0),
        g->em->t_i64, "");
    tile_coords(g,
                LLVMBuildUDiv(g->b, tj_nvptx_sreg64(g->nv, "ctaid.x"), s, ""),
                &g->m0, &g->n0);
  } else if (!g->nv->info->persistent) {
    tile_coords(g, tj_nvptx_sreg64(g->nv, "ctaid.x"), &g->m0, &g->n0);
  }
  memset(&g->batch, 0, sizeof(g->batch));
  g->batch.lanes = 1;
  tj_emit_decompose(g->em, tj_nvptx_sreg64(g->nv, "ctaid.z"), g->rank - 2,
                    &g->batch);
}

//===--- tensor-core main loop ---===//

typedef struct tc_copy_t {
  LLVMValueRef src;       // generic pointer of this thread's chunk at k = 0
  LLVMValueRef step;      // i64 elements to advance per k-tile
  LLVMValueRef dst;       // i32 byte offset inside the stage
  LLVMValueRef limit;     // i64: elements left along the contiguous dim at k0
  LLVMValueRef outer_ok;  // i1 (A: row < M), or NULL (B: checked per tile)
  LLVMValueRef krow;      // B: this chunk's k within the tile (i64)
  LLVMValueRef col;       // B: first n of the chunk (i64)
} tc_copy_t;

// The 16-byte chunk |ch| of A row |row| in the swizzled tile (i32 bytes).
static LLVMValueRef a_chunk_offset(gemm_t* g, LLVMValueRef row,
                                   LLVMValueRef ch) {
  LLVMBuilderRef b = g->b;
  LLVMValueRef key = g->bk == 64
                         ? LLVMBuildAnd(b, row, c32(g, 7), "")
                         : LLVMBuildAnd(b, LLVMBuildLShr(b, row, c32(g, 1), ""),
                                        c32(g, 3), "");
  return LLVMBuildAdd(
      b, LLVMBuildMul(b, row, c32(g, g->bk * 2), ""),
      LLVMBuildShl(b, LLVMBuildXor(b, ch, key, ""), c32(g, 4), ""), "");
}

static void tc_copy_setup(gemm_t* g, tc_copy_t* a_copy, tc_copy_t* b_copy) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  int32_t r = g->rank;
  int32_t a_chunks = g->bk / 8;  // per A row
  int32_t a_shift = a_chunks == 8 ? 3 : 2;
  LLVMValueRef sa_m = tj_emit_stride(em, g->a, r - 2);
  LLVMValueRef sb_k = tj_emit_stride(em, g->bb, r - 2);
  LLVMValueRef sb_n = tj_emit_stride(em, g->bb, r - 1);
  for (int32_t i = 0; i < g->copies; ++i) {
    // A: chunk c = tid + 256 i: row c / chunks, chunk c % chunks.
    LLVMValueRef c = LLVMBuildAdd(b, g->tid, c32(g, i * kThreads), "");
    LLVMValueRef row = LLVMBuildLShr(b, c, c32(g, a_shift), "");
    LLVMValueRef ch = LLVMBuildAnd(b, c, c32(g, a_chunks - 1), "");
    a_copy[i].dst = a_chunk_offset(g, row, ch);
    LLVMValueRef row64 = LLVMBuildZExt(b, row, em->t_i64, "");
    LLVMValueRef ch64 = LLVMBuildZExt(b, ch, em->t_i64, "");
    LLVMValueRef gm = LLVMBuildAdd(b, g->m0, row64, "");
    a_copy[i].outer_ok = LLVMBuildICmp(b, LLVMIntSLT, gm, g->m, "");
    // Rows past M read row m0 (never used: src-size 0).
    LLVMValueRef off = LLVMBuildAdd(
        b,
        LLVMBuildMul(b, tj_emit_select(em, a_copy[i].outer_ok, gm, g->m0), sa_m,
                     ""),
        LLVMBuildMul(b, ch64, c64(g, 8), ""), "");
    a_copy[i].src = tj_emit_advance(em, g->a, g->batch.ptr[g->a], off);
    a_copy[i].step = c64(g, g->bk);
    a_copy[i].limit =
        LLVMBuildSub(g->b, g->kdim, LLVMBuildMul(b, ch64, c64(g, 8), ""), "");
    if (g->b_kmajor) {
      // B K-major: row n of the tile as A's row m (kBN = kBM rows of bk),
      // at a_bytes; rows past N read row n0 with 0 bytes.
      tc_copy_t* bc = &b_copy[i];
      bc->dst =
          LLVMBuildAdd(b, c32(g, g->a_bytes), a_chunk_offset(g, row, ch), "");
      LLVMValueRef gn = LLVMBuildAdd(b, g->n0, row64, "");
      bc->outer_ok = LLVMBuildICmp(b, LLVMIntSLT, gn, g->n, "");
      LLVMValueRef boff = LLVMBuildAdd(
          b,
          LLVMBuildMul(b, tj_emit_select(em, bc->outer_ok, gn, g->n0), sb_n,
                       ""),
          LLVMBuildMul(b, ch64, c64(g, 8), ""), "");
      bc->src = tj_emit_advance(em, g->bb, g->batch.ptr[g->bb], boff);
      bc->step = c64(g, g->bk);
      bc->limit = a_copy[i].limit;
      bc->krow = bc->col = NULL;
      continue;
    }
    // B: chunk c: k row c / 16, chunk c % 16.
    LLVMValueRef krow = LLVMBuildLShr(b, c, c32(g, 4), "");
    LLVMValueRef bch = LLVMBuildAnd(b, c, c32(g, 15), "");
    LLVMValueRef bsw =
        LLVMBuildXor(b, bch, LLVMBuildAnd(b, krow, c32(g, 7), ""), "");
    b_copy[i].dst =
        LLVMBuildAdd(b, c32(g, g->a_bytes),
                     LLVMBuildAdd(b, LLVMBuildMul(b, krow, c32(g, 256), ""),
                                  LLVMBuildShl(b, bsw, c32(g, 4), ""), ""),
                     "");
    b_copy[i].krow = LLVMBuildZExt(b, krow, em->t_i64, "");
    b_copy[i].col = LLVMBuildAdd(
        b, g->n0,
        LLVMBuildMul(b, LLVMBuildZExt(b, bch, em->t_i64, ""), c64(g, 8), ""),
        "");
    b_copy[i].step = LLVMBuildMul(b, sb_k, c64(g, g->bk), "");
    b_copy[i].limit = LLVMBuildSub(b, g->n, b_copy[i].col, "");
    b_copy[i].outer_ok = NULL;
    // Columns past N start at n0 (src-size 0 then).
    LLVMValueRef col = tj_emit_select(
        em, LLVMBuildICmp(b, LLVMIntSLT, b_copy[i].col, g->n, ""),
        b_copy[i].col, g->n0);
    b_copy[i].src = tj_emit_advance(
        em, g->bb, g->batch.ptr[g->bb],
        LLVMBuildAdd(b, LLVMBuildMul(b, b_copy[i].krow, sb_k, ""), col, ""));
  }
}

static void cp_async16(gemm_t* g, LLVMValueRef stage_base, LLVMValueRef dst,
                       LLVMValueRef src, LLVMValueRef bytes) {
  LLVMValueRef args[3] = {smem_at(g, stage_base, dst), to_global(g, src),
                          LLVMBuildTrunc(g->b, bytes, g->em->t_i32, "")};
  call(g, "llvm.nvvm.cp.async.cg.shared.global.16.s", args, 3);
}

// Issues the copies of k-tile |kt| into stage |stage| (both i64).
// One 16-byte chunk of a K-major operand (A, or B read transposed) for
// k-tile |kt|: the elements left before K, as bytes, none past the outer
// bound (M, or N); the source stays put when nothing is copied.
static void kmajor_chunk(gemm_t* g, LLVMValueRef base, const tc_copy_t* c,
                         uint32_t operand, LLVMValueRef k0, LLVMValueRef kt) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMValueRef left = clamp0(g, LLVMBuildSub(b, c->limit, k0, ""), 8);
  LLVMValueRef bytes = tj_emit_select(
      em, c->outer_ok, LLVMBuildMul(b, left, c64(g, 2), ""), c64(g, 0));
  LLVMValueRef src = tj_emit_advance(
      em, operand, c->src,
      tj_emit_select(em, LLVMBuildICmp(b, LLVMIntSGT, bytes, c64(g, 0), ""),
                     LLVMBuildMul(b, kt, c->step, ""), c64(g, 0)));
  cp_async16(g, base, c->dst, src, bytes);
}

static void tc_load(gemm_t* g, const tc_copy_t* a_copy, const tc_copy_t* b_copy,
                    LLVMValueRef stage, LLVMValueRef kt) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMValueRef base = smem_at(
      g, g->smem,
      LLVMBuildTrunc(b, LLVMBuildMul(b, stage, c64(g, g->stage_bytes), ""),
                     em->t_i32, ""));
  LLVMValueRef k0 = LLVMBuildMul(b, kt, c64(g, g->bk), "k0");
  for (int32_t i = 0; i < g->copies; ++i) {
    kmajor_chunk(g, base, &a_copy[i], g->a, k0, kt);
    if (g->b_kmajor) {  // B K-major: as A, rows of n past N read nothing
      kmajor_chunk(g, base, &b_copy[i], g->bb, k0, kt);
      continue;
    }
    // B: rows past K and columns past N read nothing.
    LLVMValueRef krow_ok = LLVMBuildICmp(
        b, LLVMIntSLT, LLVMBuildAdd(b, k0, b_copy[i].krow, ""), g->kdim, "");
    LLVMValueRef bleft = clamp0(g, b_copy[i].limit, 8);
    LLVMValueRef bbytes = tj_emit_select(
        em, krow_ok, LLVMBuildMul(b, bleft, c64(g, 2), ""), c64(g, 0));
    LLVMValueRef bsrc = tj_emit_advance(
        em, g->bb, b_copy[i].src,
        tj_emit_select(em, LLVMBuildICmp(b, LLVMIntSGT, bbytes, c64(g, 0), ""),
                       LLVMBuildMul(b, kt, b_copy[i].step, ""), c64(g, 0)));
    cp_async16(g, base, b_copy[i].dst, bsrc, bbytes);
  }
}

static LLVMValueRef ldmatrix(gemm_t* g, bool trans, LLVMValueRef ptr,
                             LLVMValueRef out[4]) {
  LLVMTypeRef pt = g->nv->t_ptr_shared;
  LLVMValueRef r = tj_emit_intrinsic(
      g->em,
      trans ? "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.b16"
            : "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16",
      &pt, 1, &ptr, 1);
  for (unsigned i = 0; i < 4; ++i)
    out[i] = LLVMBuildExtractValue(g->b, r, i, "");
  return r;
}

// One mma.sync m16n8k16 on accumulators acc[base .. base+3].
static void mma(gemm_t* g, LLVMValueRef a[4], LLVMValueRef bf[2],
                int32_t base) {
  tj_emit_t* em = g->em;
  LLVMBuilderRef b = g->b;
  LLVMValueRef args[10];
  bool f16 = g->in_dtype == TJ_DTYPE_F16;
  LLVMTypeRef h2 = LLVMVectorType(em->t_f16, 2);
  for (int i = 0; i < 4; ++i)
    args[i] = f16 ? LLVMBuildBitCast(b, a[i], h2, "") : a[i];
  for (int i = 0; i < 2; ++i)
    args[4 + i] = f16 ? LLVMBuildBitCast(b, bf[i], h2, "") : bf[i];
  LLVMValueRef slots[4];
  for (int i = 0; i < 4; ++i) {
    slots[i] = acc_slot(g, base + i);
    args[6 + i] = LLVMBuildLoad2(b, em->t_f32, slots[i], "");
  }
  LLVMValueRef d = call(g,
                        f16 ? "llvm.nvvm.mma.m16n8k16.row.col.f32.f32"
                            : "llvm.nvvm.mma.m16n8k16.row.col.bf16",
                        args, 10);
  for (unsigned i = 0; i < 4; ++i)
    LLVMBuildStore(b, LLVMBuildExtractValue(b, d, i, ""), slots[i]);
}

// Accumulator index of (mi, ni, e): 16 values per m16 row block.
static int32_t tc_acc_index(int32_t mi, int32_t ni, int32_t e) {
  return (mi * 4 + ni) * 4 + e;
}

static void tc_compute(gemm_t* g, LLVMValueRef stage, LLVMValueRef a_off[4][4],
                       LLVMValueRef b_off[4][2]) {
  LLVMBuilderRef b = g->b;
  LLVMValueRef base = smem_at(
      g, g->smem,
      LLVMBuildTrunc(b, LLVMBuildMul(b, stage, c64(g, g->stage_bytes), ""),
                     g->em->t_i32, ""));
  for (int32_t kk = 0; kk < g->bk / 16; ++kk) {
    LLVMValueRef af[4][4], bf[4][2];
    for (int32_t mi = 0; mi < 4; ++mi)
      ldmatrix(g, false, smem_at(g, base, a_off[kk][mi]), af[mi]);
    for (int32_t np = 0; np < 2; ++np) {
      LLVMValueRef r[4];
      // K-major B: its rows of n are the fragment's columns as stored.
      ldmatrix(g, !g->b_kmajor, smem_at(g, base, b_off[kk][np]), r);
      bf[np * 2][0] = r[0];
      bf[np * 2][1] = r[1];
      bf[np * 2 + 1][0] = r[2];
      bf[np * 2 + 1][1] = r[3];
    }
    for (int32_t mi = 0; mi < 4; ++mi)
      for (int32_t ni = 0; ni < 4; ++ni)
        mma(g, af[mi], bf[ni], tc_acc_index(mi, ni, 0));
  }
}

// Byte offsets (inside a stage) of this lane's ldmatrix rows.
static void tc_fragment_offsets(gemm_t* g, LLVMValueRef wm, LLVMValueRef wn,
                                LLVMValueRef lane, LLVMValueRef a_off[4][4],
                                LLVMValueRef b_off[4][2]) {
  LLVMBuilderRef b = g->b;
  LLVMValueRef l15 = LLVMBuildAnd(b, lane, c32(g, 15), "");
  LLVMValueRef l16 = LLVMBuildLShr(b, lane, c32(g, 4), "");
  for (int32_t kk = 0; kk < g->bk / 16; ++kk) {
    for (int32_t mi = 0; mi < 4; ++mi) {
      LLVMValueRef row =
          LLVMBuildAdd(b, LLVMBuildMul(b, wm, c32(g, 64), ""),
                       LLVMBuildAdd(b, c32(g, mi * 16), l15, ""), "");
      LLVMValueRef ch = LLVMBuildAdd(b, c32(g, kk * 2), l16, "");
      a_off[kk][mi] = a_chunk_offset(g, row, ch);
    }
    for (int32_t np = 0; np < 2 && g->b_kmajor; ++np) {
      // K-major B, ldmatrix without .trans: lanes 0-7 give rows n of
      // k 0-7 (b0, b1 of the first n8 block), 8-15 its k 8-15 (b2, b3),
      // 16-31 the same for the second n8 block.
      LLVMValueRef row = LLVMBuildAdd(
          b, LLVMBuildMul(b, wn, c32(g, 32), ""),
          LLVMBuildAdd(b, c32(g, np * 16),
                       LLVMBuildAdd(b, LLVMBuildAnd(b, lane, c32(g, 7), ""),
                                    LLVMBuildShl(b, l16, c32(g, 3), ""), ""),
                       ""),
          "");
      LLVMValueRef ch = LLVMBuildAdd(
          b, c32(g, kk * 2),
          LLVMBuildAnd(b, LLVMBuildLShr(b, lane, c32(g, 3), ""), c32(g, 1), ""),
          "");
      b_off[kk][np] =
          LLVMBuildAdd(b, c32(g, g->a_bytes), a_chunk_offset(g, row, ch), "");
    }
    for (int32_t np = 0; np < 2 && !g->b_kmajor; ++np) {
      LLVMValueRef krow = LLVMBuildAdd(b, c32(g, kk * 16), l15, "");
      LLVMValueRef ch =
          LLVMBuildAdd(b, LLVMBuildMul(b, wn, c32(g, 4), ""),
                       LLVMBuildAdd(b, c32(g, np * 2), l16, ""), "");
      LLVMValueRef sw =
          LLVMBuildXor(b, ch, LLVMBuildAnd(b, krow, c32(g, 7), ""), "");
      b_off[kk][np] =
          LLVMBuildAdd(b, c32(g, g->a_bytes),
                       LLVMBuildAdd(b, LLVMBuildMul(b, krow, c32(g, 256), ""),
                                    LLVMBuildShl(b, sw, c32(g, 4), ""), ""),
                       "");
    }
  }
}

// The pipelined main loop shared by both paths: |load| issues k-tile kt
// into a stage, |compute| consumes one.
typedef struct pipeline_t {
  int32_t stages;
  void (*load)(gemm_t* g, void* ctx, LLVMValueRef stage, LLVMValueRef kt);
  void (*compute)(gemm_t* g, void* ctx, LLVMValueRef stage);
  void* ctx;
  LLVMValueRef k_tiles;  // i64
} pipeline_t;

static void run_pipeline(gemm_t* g, const pipeline_t* p) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  for (int32_t s = 0; s < p->stages - 1; ++s) {
    tj_emit_if_t have;
    tj_emit_if_begin(em, &have,
                     LLVMBuildICmp(b, LLVMIntSLT, c64(g, s), p->k_tiles, ""),
                     "prologue");
    p->load(g, p->ctx, c64(g, s), c64(g, s));
    tj_emit_if_end(em, &have);
    // Empty groups keep the group count in step with the k-tiles.
    commit(g);
  }
  tj_emit_loop_t loop;
  LLVMValueRef kt =
      tj_emit_loop_begin(em, &loop, c64(g, 0), p->k_tiles, c64(g, 1), "kt");
  wait_groups(g, p->stages - 2);
  tj_nvptx_barrier(g->nv);
  // The stage refilled here was read in the previous iteration, which
  // every thread has finished: it passed the barrier above.
  LLVMValueRef next = LLVMBuildAdd(b, kt, c64(g, p->stages - 1), "");
  tj_emit_if_t more;
  tj_emit_if_begin(em, &more,
                   LLVMBuildICmp(b, LLVMIntSLT, next, p->k_tiles, ""),
                   "prefetch");
  p->load(g, p->ctx, LLVMBuildSRem(b, next, c64(g, p->stages), ""), next);
  tj_emit_if_end(em, &more);
  commit(g);
  p->compute(g, p->ctx, LLVMBuildSRem(b, kt, c64(g, p->stages), ""));
  tj_emit_loop_end(em, &loop);
  wait_groups(g, 0);
  // The C tile reuses the ring's shared memory.
  tj_nvptx_barrier(g->nv);
}

typedef struct tc_ctx_t {
  tc_copy_t a_copy[kTcMaxCopies], b_copy[kTcMaxCopies];
  LLVMValueRef a_off[4][4], b_off[4][2];
} tc_ctx_t;

static void tc_load_cb(gemm_t* g, void* ctx, LLVMValueRef stage,
                       LLVMValueRef kt) {
  tc_ctx_t* c = ctx;
  tc_load(g, c->a_copy, c->b_copy, stage, kt);
}

static void tc_compute_cb(gemm_t* g, void* ctx, LLVMValueRef stage) {
  tc_ctx_t* c = ctx;
  tc_compute(g, stage, c->a_off, c->b_off);
}

// Writes the tensor-core accumulators to the staged C tile.
static void tc_stage_c(gemm_t* g, LLVMValueRef wm, LLVMValueRef wn,
                       LLVMValueRef lane) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMValueRef grp = LLVMBuildLShr(b, lane, c32(g, 2), "");
  LLVMValueRef t4 = LLVMBuildAnd(b, lane, c32(g, 3), "");
  LLVMTypeRef v2 = LLVMVectorType(em->t_f32, 2);
  for (int32_t mi = 0; mi < 4; ++mi) {
    for (int32_t ni = 0; ni < 4; ++ni) {
      for (int32_t h = 0; h < 2; ++h) {
        LLVMValueRef row =
            LLVMBuildAdd(b, LLVMBuildMul(b, wm, c32(g, 64), ""),
                         LLVMBuildAdd(b, c32(g, mi * 16 + h * 8), grp, ""), "");
        LLVMValueRef col =
            LLVMBuildAdd(b, LLVMBuildMul(b, wn, c32(g, 32), ""),
                         LLVMBuildAdd(b, c32(g, ni * 8),
                                      LLVMBuildMul(b, t4, c32(g, 2), ""), ""),
                         "");
        LLVMValueRef off = LLVMBuildMul(
            b,
            LLVMBuildAdd(b, LLVMBuildMul(b, row, c32(g, kCStride), ""), col,
                         ""),
            c32(g, 4), "");
        LLVMValueRef v = LLVMGetUndef(v2);
        for (int32_t e = 0; e < 2; ++e) {
          LLVMValueRef x = LLVMBuildLoad2(
              b, em->t_f32, acc_slot(g, tc_acc_index(mi, ni, h * 2 + e)), "");
          v = LLVMBuildInsertElement(b, v, x, c32(g, e), "");
        }
        LLVMValueRef st = LLVMBuildStore(b, v, smem_at(g, g->smem, off));
        LLVMSetAlignment(st, 8);
      }
    }
  }
}

//===--- CUDA-core (f32) main loop ---===//

typedef struct f32_ctx_t {
  // Per copy i < bk / 2: A element (m, k) and B element (k, n) of this
  // thread.
  LLVMValueRef a_src[kF32MaxCopies], a_dst[kF32MaxCopies];
  LLVMValueRef a_m_ok[kF32MaxCopies], a_k[kF32MaxCopies];
  LLVMValueRef b_src[kF32MaxCopies], b_dst[kF32MaxCopies];
  LLVMValueRef b_n_ok[kF32MaxCopies], b_k[kF32MaxCopies];
  LLVMValueRef a_step, b_step;  // i64 elements per k-tile
  LLVMValueRef ty, tx;          // i32 thread coordinates in the 16x16 grid
} f32_ctx_t;

static void f32_setup(gemm_t* g, f32_ctx_t* c) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  int32_t r = g->rank;
  LLVMValueRef sa_m = tj_emit_stride(em, g->a, r - 2);
  LLVMValueRef sa_k = tj_emit_stride(em, g->a, r - 1);
  LLVMValueRef sb_k = tj_emit_stride(em, g->bb, r - 2);
  LLVMValueRef sb_n = tj_emit_stride(em, g->bb, r - 1);
  c->a_step = LLVMBuildMul(b, sa_k, c64(g, g->bk), "");
  c->b_step = LLVMBuildMul(b, sb_k, c64(g, g->bk), "");
  for (int32_t i = 0; i < g->copies; ++i) {
    LLVMValueRef e = LLVMBuildAdd(b, g->tid, c32(g, i * kThreads), "");
    // A: k fastest, so a warp reads along rows of a row-major A.
    LLVMValueRef am = LLVMBuildLShr(b, e, c32(g, g->bk == 16 ? 4 : 3), "");
    LLVMValueRef ak = LLVMBuildAnd(b, e, c32(g, g->bk - 1), "");
    c->a_dst[i] = LLVMBuildMul(
        b,
        LLVMBuildAdd(b, LLVMBuildMul(b, ak, c32(g, kF32AStride), ""), am, ""),
        c32(g, 4), "");
    LLVMValueRef gm =
        LLVMBuildAdd(b, g->m0, LLVMBuildZExt(b, am, em->t_i64, ""), "");
    c->a_m_ok[i] = LLVMBuildICmp(b, LLVMIntSLT, gm, g->m, "");
    c->a_k[i] = LLVMBuildZExt(b, ak, em->t_i64, "");
    LLVMValueRef off = LLVMBuildAdd(
        b,
        LLVMBuildMul(b, tj_emit_select(em, c->a_m_ok[i], gm, g->m0), sa_m, ""),
        LLVMBuildMul(b, c->a_k[i], sa_k, ""), "");
    c->a_src[i] = tj_emit_advance(em, g->a, g->batch.ptr[g->a], off);
    // B: n fastest.
    LLVMValueRef bk = LLVMBuildLShr(b, e, c32(g, 7), "");
    LLVMValueRef bn = LLVMBuildAnd(b, e, c32(g, 127), "");
    c->b_dst[i] = LLVMBuildAdd(
        b, c32(g, g->a_bytes),
        LLVMBuildMul(
            b, LLVMBuildAdd(b, LLVMBuildMul(b, bk, c32(g, kBN), ""), bn, ""),
            c32(g, 4), ""),
        "");
    LLVMValueRef gn =
        LLVMBuildAdd(b, g->n0, LLVMBuildZExt(b, bn, em->t_i64, ""), "");
    c->b_n_ok[i] = LLVMBuildICmp(b, LLVMIntSLT, gn, g->n, "");
    c->b_k[i] = LLVMBuildZExt(b, bk, em->t_i64, "");
    LLVMValueRef boff = LLVMBuildAdd(
        b, LLVMBuildMul(b, c->b_k[i], sb_k, ""),
        LLVMBuildMul(b, tj_emit_select(em, c->b_n_ok[i], gn, g->n0), sb_n, ""),
        "");
    c->b_src[i] = tj_emit_advance(em, g->bb, g->batch.ptr[g->bb], boff);
  }
  c->ty = LLVMBuildLShr(b, g->tid, c32(g, 4), "ty");
  c->tx = LLVMBuildAnd(b, g->tid, c32(g, 15), "tx");
}

static void cp_async4(gemm_t* g, LLVMValueRef stage_base, LLVMValueRef dst,
                      LLVMValueRef src, LLVMValueRef ok) {
  LLVMValueRef args[3] = {smem_at(g, stage_base, dst), to_global(g, src),
                          tj_emit_select(g->em, ok, c32(g, 4), c32(g, 0))};
  call(g, "llvm.nvvm.cp.async.ca.shared.global.4.s", args, 3);
}

static void f32_load_cb(gemm_t* g, void* ctx, LLVMValueRef stage,
                        LLVMValueRef kt) {
  f32_ctx_t* c = ctx;
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMValueRef base = smem_at(
      g, g->smem,
      LLVMBuildTrunc(b, LLVMBuildMul(b, stage, c64(g, g->stage_bytes), ""),
                     em->t_i32, ""));
  LLVMValueRef k0 = LLVMBuildMul(b, kt, c64(g, g->bk), "");
  for (int32_t i = 0; i < g->copies; ++i) {
    LLVMValueRef ak_ok = LLVMBuildICmp(
        b, LLVMIntSLT, LLVMBuildAdd(b, k0, c->a_k[i], ""), g->kdim, "");
    LLVMValueRef a_ok = LLVMBuildAnd(b, ak_ok, c->a_m_ok[i], "");
    LLVMValueRef asrc = tj_emit_advance(
        em, g->a, c->a_src[i],
        tj_emit_select(em, a_ok, LLVMBuildMul(b, kt, c->a_step, ""),
                       c64(g, 0)));
    cp_async4(g, base, c->a_dst[i], asrc, a_ok);
    LLVMValueRef bk_ok = LLVMBuildICmp(
        b, LLVMIntSLT, LLVMBuildAdd(b, k0, c->b_k[i], ""), g->kdim, "");
    LLVMValueRef b_ok = LLVMBuildAnd(b, bk_ok, c->b_n_ok[i], "");
    LLVMValueRef bsrc = tj_emit_advance(
        em, g->bb, c->b_src[i],
        tj_emit_select(em, b_ok, LLVMBuildMul(b, kt, c->b_step, ""),
                       c64(g, 0)));
    cp_async4(g, base, c->b_dst[i], bsrc, b_ok);
  }
}

// A float4 from shared byte offset |off| (16-byte aligned).
static LLVMValueRef load_v4(gemm_t* g, LLVMValueRef base, LLVMValueRef off) {
  LLVMValueRef v = LLVMBuildLoad2(g->b, LLVMVectorType(g->em->t_f32, 4),
                                  smem_at(g, base, off), "");
  LLVMSetAlignment(v, 16);
  return v;
}

// acc[i * cols + j] += a[i] * bb[j] for every i < rows, j < cols, one
// fma each in that order: the CUDA-core main loops' outer product of a
// thread's fragments (8x8 on 128x128 tiles, 8x16 on 256x128).
static void fma_outer(gemm_t* g, const LLVMValueRef* a, int32_t rows,
                      const LLVMValueRef* bb, int32_t cols) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMTypeRef t = em->t_f32;
  for (int32_t i = 0; i < rows; ++i) {
    for (int32_t j = 0; j < cols; ++j) {
      LLVMValueRef slot = acc_slot(g, i * cols + j);
      LLVMValueRef args[3] = {a[i], bb[j], LLVMBuildLoad2(b, t, slot, "")};
      LLVMBuildStore(b, tj_emit_intrinsic(em, "llvm.fma", &t, 1, args, 3),
                     slot);
    }
  }
}

static void f32_compute_cb(gemm_t* g, void* ctx, LLVMValueRef stage) {
  f32_ctx_t* c = ctx;
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMValueRef base = smem_at(
      g, g->smem,
      LLVMBuildTrunc(b, LLVMBuildMul(b, stage, c64(g, g->stage_bytes), ""),
                     em->t_i32, ""));
  LLVMValueRef ty4 = LLVMBuildMul(b, c->ty, c32(g, 16), "");  // bytes
  LLVMValueRef tx4 = LLVMBuildMul(b, c->tx, c32(g, 16), "");
  for (int32_t kk = 0; kk < g->bk; ++kk) {
    LLVMValueRef av[2], bv[2];
    for (int32_t h = 0; h < 2; ++h) {
      av[h] = load_v4(
          g, base,
          LLVMBuildAdd(b, c32(g, kk * kF32AStride * 4 + h * 64 * 4), ty4, ""));
      bv[h] = load_v4(
          g, base,
          LLVMBuildAdd(b, c32(g, g->a_bytes + kk * kBN * 4 + h * 64 * 4), tx4,
                       ""));
    }
    LLVMValueRef a[8], bb[8];
    for (int32_t i = 0; i < 8; ++i) {
      a[i] = LLVMBuildExtractElement(b, av[i / 4], c32(g, i % 4), "");
      bb[i] = LLVMBuildExtractElement(b, bv[i / 4], c32(g, i % 4), "");
    }
    fma_outer(g, a, 8, bb, 8);
  }
}

//===--- CUDA-core (f32) main loop, 16-byte copies ---===//
//
// Where A is contiguous along k and B along n, with 16-byte aligned rows
// (checked per block at run time: f32_vector_ok), each thread copies one
// 16-byte chunk of A and one of B per 8 of k (4x fewer cp.async, and
// their address arithmetic, than the 4-byte path). A then stays row-major
// in shared memory, [m][bk]: a thread reads 2 consecutive k of each of its
// 8 rows with one ld.shared.v2 (all lanes of a quarter warp read one row,
// a broadcast; 4 k as v4 keep 32 registers of A live, which spilled under
// the 128-register cap), then runs those k from registers; B as in
// the 4-byte path. The thread's 8x8 tile of C is the same, so the staging
// of C is shared.

typedef struct f32v_ctx_t {
  // Per copy i < bk / 8: one 16-byte chunk of A (row m, k offset) and of
  // B (row k, n offset), or fewer bytes at the edges.
  LLVMValueRef a_src[kF32MaxCopies], a_dst[kF32MaxCopies];
  LLVMValueRef a_m_ok[kF32MaxCopies], a_k[kF32MaxCopies];
  LLVMValueRef b_src[kF32MaxCopies], b_dst[kF32MaxCopies];
  LLVMValueRef b_left[kF32MaxCopies], b_k[kF32MaxCopies];
  LLVMValueRef a_step, b_step;  // i64 elements per k-tile
  LLVMValueRef ty, tx;
} f32v_ctx_t;

// Whether this block's A and B allow the 16-byte copies: contiguous along
// k and n (known when compiling) and 16-byte aligned bases and row
// pitches (i1, uniform across the block).
static LLVMValueRef f32_vector_ok(gemm_t* g) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  int32_t r = g->rank;
  const tj_kir_t* k = g->k;
  if (g->nv->options.gemm_f32_scalar_copies ||
      !tj_kir_ival_is_const(k->buffers[g->a].strides[r - 1], 1) ||
      !tj_kir_ival_is_const(k->buffers[g->bb].strides[r - 1], 1))
    return NULL;
  LLVMValueRef bits =
      LLVMBuildOr(b, LLVMBuildPtrToInt(b, g->batch.ptr[g->a], em->t_i64, ""),
                  LLVMBuildPtrToInt(b, g->batch.ptr[g->bb], em->t_i64, ""), "");
  bits = LLVMBuildOr(
      b, bits, LLVMBuildShl(b, tj_emit_stride(em, g->a, r - 2), c64(g, 2), ""),
      "");
  bits = LLVMBuildOr(
      b, bits, LLVMBuildShl(b, tj_emit_stride(em, g->bb, r - 2), c64(g, 2), ""),
      "");
  return LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildAnd(b, bits, c64(g, 15), ""),
                       c64(g, 0), "f32v");
}

static void f32v_setup(gemm_t* g, f32v_ctx_t* c) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  int32_t r = g->rank;
  LLVMValueRef sa_m = tj_emit_stride(em, g->a, r - 2);
  LLVMValueRef sb_k = tj_emit_stride(em, g->bb, r - 2);
  c->a_step = c64(g, g->bk);
  c->b_step = LLVMBuildMul(b, sb_k, c64(g, g->bk), "");
  int32_t chunks = g->bk / 4;  // of A's rows
  for (int32_t i = 0; i < g->bk / 8; ++i) {
    LLVMValueRef e = LLVMBuildAdd(b, g->tid, c32(g, i * kThreads), "");
    LLVMValueRef am = LLVMBuildUDiv(b, e, c32(g, chunks), "");
    LLVMValueRef ac = LLVMBuildURem(b, e, c32(g, chunks), "");
    c->a_dst[i] =
        LLVMBuildMul(b,
                     LLVMBuildAdd(b, LLVMBuildMul(b, am, c32(g, g->bk), ""),
                                  LLVMBuildMul(b, ac, c32(g, 4), ""), ""),
                     c32(g, 4), "");
    LLVMValueRef gm =
        LLVMBuildAdd(b, g->m0, LLVMBuildZExt(b, am, em->t_i64, ""), "");
    c->a_m_ok[i] = LLVMBuildICmp(b, LLVMIntSLT, gm, g->m, "");
    c->a_k[i] =
        LLVMBuildZExt(b, LLVMBuildMul(b, ac, c32(g, 4), ""), em->t_i64, "");
    LLVMValueRef off = LLVMBuildAdd(
        b,
        LLVMBuildMul(b, tj_emit_select(em, c->a_m_ok[i], gm, g->m0), sa_m, ""),
        c->a_k[i], "");
    c->a_src[i] = tj_emit_advance(em, g->a, g->batch.ptr[g->a], off);
    // B: 32 chunks a row of the tile.
    LLVMValueRef bk = LLVMBuildLShr(b, e, c32(g, 5), "");
    LLVMValueRef bn =
        LLVMBuildMul(b, LLVMBuildAnd(b, e, c32(g, 31), ""), c32(g, 4), "");
    c->b_dst[i] = LLVMBuildAdd(
        b, c32(g, g->a_bytes),
        LLVMBuildMul(
            b, LLVMBuildAdd(b, LLVMBuildMul(b, bk, c32(g, kBN), ""), bn, ""),
            c32(g, 4), ""),
        "");
    LLVMValueRef gn =
        LLVMBuildAdd(b, g->n0, LLVMBuildZExt(b, bn, em->t_i64, ""), "");
    c->b_left[i] = clamp0(g, LLVMBuildSub(b, g->n, gn, ""), 4);
    c->b_k[i] = LLVMBuildZExt(b, bk, em->t_i64, "");
    LLVMValueRef n_ok = LLVMBuildICmp(b, LLVMIntSLT, gn, g->n, "");
    LLVMValueRef boff = LLVMBuildAdd(b, LLVMBuildMul(b, c->b_k[i], sb_k, ""),
                                     tj_emit_select(em, n_ok, gn, g->n0), "");
    c->b_src[i] = tj_emit_advance(em, g->bb, g->batch.ptr[g->bb], boff);
  }
  c->ty = LLVMBuildLShr(b, g->tid, c32(g, 4), "ty");
  c->tx = LLVMBuildAnd(b, g->tid, c32(g, 15), "tx");
}

static void f32v_load_cb(gemm_t* g, void* ctx, LLVMValueRef stage,
                         LLVMValueRef kt) {
  f32v_ctx_t* c = ctx;
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMValueRef base = smem_at(
      g, g->smem,
      LLVMBuildTrunc(b, LLVMBuildMul(b, stage, c64(g, g->stage_bytes), ""),
                     em->t_i32, ""));
  LLVMValueRef k0 = LLVMBuildMul(b, kt, c64(g, g->bk), "");
  for (int32_t i = 0; i < g->bk / 8; ++i) {
    // A: the chunk's k left in its row (K need not be a multiple of 4).
    LLVMValueRef aleft = clamp0(
        g, LLVMBuildSub(b, g->kdim, LLVMBuildAdd(b, k0, c->a_k[i], ""), ""), 4);
    LLVMValueRef abytes = tj_emit_select(
        em, c->a_m_ok[i], LLVMBuildMul(b, aleft, c64(g, 4), ""), c64(g, 0));
    LLVMValueRef asrc = tj_emit_advance(
        em, g->a, c->a_src[i],
        tj_emit_select(em, LLVMBuildICmp(b, LLVMIntSGT, abytes, c64(g, 0), ""),
                       LLVMBuildMul(b, kt, c->a_step, ""), c64(g, 0)));
    cp_async16(g, base, c->a_dst[i], asrc, abytes);
    LLVMValueRef k_ok = LLVMBuildICmp(
        b, LLVMIntSLT, LLVMBuildAdd(b, k0, c->b_k[i], ""), g->kdim, "");
    LLVMValueRef bbytes = tj_emit_select(
        em, k_ok, LLVMBuildMul(b, c->b_left[i], c64(g, 4), ""), c64(g, 0));
    LLVMValueRef bsrc = tj_emit_advance(
        em, g->bb, c->b_src[i],
        tj_emit_select(em, LLVMBuildICmp(b, LLVMIntSGT, bbytes, c64(g, 0), ""),
                       LLVMBuildMul(b, kt, c->b_step, ""), c64(g, 0)));
    cp_async16(g, base, c->b_dst[i], bsrc, bbytes);
  }
}

static void f32v_compute_cb(gemm_t* g, void* ctx, LLVMValueRef stage) {
  f32v_ctx_t* c = ctx;
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMValueRef base = smem_at(
      g, g->smem,
      LLVMBuildTrunc(b, LLVMBuildMul(b, stage, c64(g, g->stage_bytes), ""),
                     em->t_i32, ""));
  // Row ty * 4 + i % 4 + 64 * (i / 4) of A, in bytes.
  LLVMValueRef arow = LLVMBuildMul(b, c->ty, c32(g, 16 * g->bk), "");
  LLVMValueRef tx4 = LLVMBuildMul(b, c->tx, c32(g, 16), "");
  LLVMTypeRef v2 = LLVMVectorType(em->t_f32, 2);
  for (int32_t q = 0; q < g->bk / 2; ++q) {
    LLVMValueRef av[8];
    for (int32_t i = 0; i < 8; ++i) {
      int32_t row = i % 4 + 64 * (i / 4);
      LLVMValueRef off =
          LLVMBuildAdd(b, arow, c32(g, (row * g->bk + q * 2) * 4), "");
      av[i] = LLVMBuildLoad2(b, v2, smem_at(g, base, off), "");
      LLVMSetAlignment(av[i], 8);
    }
    for (int32_t j = 0; j < 2; ++j) {
      int32_t kk = q * 2 + j;
      LLVMValueRef bv[2];
      for (int32_t h = 0; h < 2; ++h) {
        bv[h] = load_v4(
            g, base,
            LLVMBuildAdd(b, c32(g, g->a_bytes + kk * kBN * 4 + h * 64 * 4), tx4,
                         ""));
      }
      LLVMValueRef a[8], bb[8];
      for (int32_t i = 0; i < 8; ++i) {
        a[i] = LLVMBuildExtractElement(b, av[i], c32(g, j), "");
        bb[i] = LLVMBuildExtractElement(b, bv[i / 4], c32(g, i % 4), "");
      }
      fma_outer(g, a, 8, bb, 8);
    }
  }
}

// A CUDA-core thread's 8 rows of accumulators into the staged C tile
// (|stride| floats a row): row i (< 8) of the thread's is the tile's
// |row0| + |row_off|[i]; it holds |groups| groups of 4 consecutive
// columns, group j at |col0| + j * |group_step|, from accumulators
// (i * groups + j) * 4 on; each group one 16-byte shared store. Shared by
// the 128x128 (8x8 a thread) and 256x128 (8x16) loops.
static void simt_stage_c(gemm_t* g, LLVMValueRef row0, LLVMValueRef col0,
                         int32_t stride, const int32_t row_off[8],
                         int32_t groups, int32_t group_step) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMTypeRef v4 = LLVMVectorType(em->t_f32, 4);
  LLVMValueRef off0 = LLVMBuildMul(
      b, LLVMBuildAdd(b, LLVMBuildMul(b, row0, c32(g, stride), ""), col0, ""),
      c32(g, 4), "");
  for (int32_t i = 0; i < 8; ++i) {
    for (int32_t j = 0; j < groups; ++j) {
      LLVMValueRef v = LLVMGetUndef(v4);
      for (int32_t e = 0; e < 4; ++e)
        v = LLVMBuildInsertElement(
            b, v,
            LLVMBuildLoad2(b, em->t_f32, acc_slot(g, (i * groups + j) * 4 + e),
                           ""),
            c32(g, e), "");
      LLVMValueRef off = LLVMBuildAdd(
          b, off0, c32(g, (row_off[i] * stride + j * group_step) * 4), "");
      LLVMSetAlignment(LLVMBuildStore(b, v, smem_at(g, g->smem, off)), 16);
    }
  }
}

// The thread's 8x8 accumulators into the staged C tile (either copy path:
// thread (ty, tx) = (tid / 16, tid % 16) holds rows ty * 4 + {0..3} and
// 64 more, columns tx * 4 + {0..3} and 64 more).
static void f32_stage_c(gemm_t* g) {
  LLVMBuilderRef b = g->b;
  LLVMValueRef ty = LLVMBuildLShr(b, g->tid, c32(g, 4), "");
  LLVMValueRef tx = LLVMBuildAnd(b, g->tid, c32(g, 15), "");
  LLVMValueRef row0 = LLVMBuildMul(b, ty, c32(g, 4), "");
  LLVMValueRef col0 = LLVMBuildMul(b, tx, c32(g, 4), "");
  int32_t row_off[8];
  for (int32_t i = 0; i < 8; ++i) row_off[i] = (i / 4) * 64 + i % 4;
  simt_stage_c(g, row0, col0, kCStride, row_off, 2, 64);
}

//===--- CUDA-core (f32) main loop, 256x128 tiles (gemm_tile_m 256) ---===//
//
// cuBLAS's sgemm tile on the H200 (sm80_xmma_gemm_f32f32..._tilesize
// 256x128x8, warps 4x2): one block of 256 threads an SM, each thread 8 rows
// x 16 columns of C (128 accumulators, up to 255 registers), so that a k
// step's 6 shared loads of 16 bytes feed 128 FMAs (the 128x128 tile: 4
// loads, or 2 and 8 of 8 bytes, for 64).
//   - warps 4 (m) x 2 (n), each 64x64 of C; lane = lm * 4 + ln holds rows
//     wm * 64 + lm + 8 * i (i < 8) and columns wn * 64 + ln * 4 + 16 * j +
//     {0..3} (j < 4);
//   - A stays row-major in shared memory, [256][bk + 4]: a thread reads 4
//     consecutive k of each of its rows with one ld.shared.v4 (the lanes of
//     a quarter warp read 2 rows, 4 bytes short of 16 banks apart with the
//     padding: no conflict), then runs those 4 k from registers; B is
//     [bk][128], 4 ld.shared.v4 a k (64 contiguous bytes a quarter warp);
//   - copies: 16-byte cp.async where A is contiguous along k and B along n
//     with 16-byte aligned rows (f32_vector_ok, per block at run time),
//     else 4-byte ones into the same layout (any strides, a K-major B
//     included);
//   - every output sums its k in order, one fma each, as the 128x128 loop.
#define kF32WideM 256
#define kF32WideMaxCopies 16  // 4-byte copies of A per thread, bk 16

typedef struct f32w_ctx_t {
  bool vec;    // 16-byte copies (of B, and of A unless transposed)
  bool a_vec;  // A's
  int32_t a_copies, b_copies;
  // Per copy: destination (i32 bytes in the stage), source at k-tile 0,
  // the row (A) or column (B) in bounds, and the copy's first k in the
  // tile (i64); B's 16-byte chunks: the columns left before N (i64, 0..4).
  LLVMValueRef a_src[kF32WideMaxCopies], a_dst[kF32WideMaxCopies];
  LLVMValueRef a_m_ok[kF32WideMaxCopies], a_k[kF32WideMaxCopies];
  LLVMValueRef b_src[kF32WideMaxCopies], b_dst[kF32WideMaxCopies];
  LLVMValueRef b_n_ok[kF32WideMaxCopies], b_k[kF32WideMaxCopies];
  LLVMValueRef b_left[kF32WideMaxCopies];
  LLVMValueRef a_step, b_step;  // i64 elements per k-tile
  LLVMValueRef a_frag, b_frag;  // i32 bytes: the thread's row 0, column 0
} f32w_ctx_t;

// Floats per row of the A tile: 16 bytes of padding (see above); with
// gemm_f32_a_transposed, rows of k, 256 m and 16 bytes.
static int32_t f32w_a_stride(const gemm_t* g) {
  return g->f32w_at ? kF32WideM + 4 : g->bk + 4;
}

// The thread's first row of C in the tile, and row |i| (< 8) of its 8
// from there: lm + 8 i in the row-major A layout, lm * 4 + i % 4 + 32 *
// (i / 4) in the transposed one (two 16-byte loads of 4 rows a k).
static LLVMValueRef f32w_row0(gemm_t* g) {
  LLVMBuilderRef b = g->b;
  LLVMValueRef warp = LLVMBuildLShr(b, g->tid, c32(g, 5), "");
  LLVMValueRef lm =
      LLVMBuildLShr(b, LLVMBuildAnd(b, g->tid, c32(g, 31), ""), c32(g, 2), "");
  if (g->f32w_at) lm = LLVMBuildMul(b, lm, c32(g, 4), "");
  return LLVMBuildAdd(
      b, LLVMBuildMul(b, LLVMBuildLShr(b, warp, c32(g, 1), ""), c32(g, 64), ""),
      lm, "row0");
}
static int32_t f32w_row(const gemm_t* g, int32_t i) {
  return g->f32w_at ? i % 4 + 32 * (i / 4) : 8 * i;
}

static void f32w_setup(gemm_t* g, f32w_ctx_t* c, bool vec) {
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  int32_t r = g->rank;
  int32_t as = f32w_a_stride(g);
  LLVMValueRef sa_m = tj_emit_stride(em, g->a, r - 2);
  LLVMValueRef sa_k = tj_emit_stride(em, g->a, r - 1);
  LLVMValueRef sb_k = tj_emit_stride(em, g->bb, r - 2);
  LLVMValueRef sb_n = tj_emit_stride(em, g->bb, r - 1);
  c->vec = vec;
  c->a_vec = vec && !g->f32w_at;
  c->a_step =
      c->a_vec ? c64(g, g->bk) : LLVMBuildMul(b, sa_k, c64(g, g->bk), "");
  c->b_step = LLVMBuildMul(b, sb_k, c64(g, g->bk), "");
  // Elements a copy moves, and per row of the tile (A: bk, B: 128).
  int32_t per = vec ? 4 : 1, a_per = c->a_vec ? 4 : 1;
  c->a_copies = kF32WideM * g->bk / a_per / kThreads;
  c->b_copies = kBN * g->bk / per / kThreads;
  int32_t a_row = g->bk / a_per, b_row = kBN / per;  // copies a tile row
  for (int32_t i = 0; i < c->a_copies; ++i) {
    LLVMValueRef e = LLVMBuildAdd(b, g->tid, c32(g, i * kThreads), "");
    LLVMValueRef am = LLVMBuildUDiv(b, e, c32(g, a_row), "");
    LLVMValueRef ak = LLVMBuildMul(b, LLVMBuildURem(b, e, c32(g, a_row), ""),
                                   c32(g, a_per), "");
    // Transposed: element (m, k) at k * as + m (a warp's 4 m of 8 k hit
    // 32 banks, as stride 260 is 4 banks on).
    c->a_dst[i] = LLVMBuildMul(
        b,
        g->f32w_at
            ? LLVMBuildAdd(b, LLVMBuildMul(b, ak, c32(g, as), ""), am, "")
            : LLVMBuildAdd(b, LLVMBuildMul(b, am, c32(g, as), ""), ak, ""),
        c32(g, 4), "");
    LLVMValueRef gm =
        LLVMBuildAdd(b, g->m0, LLVMBuildZExt(b, am, em->t_i64, ""), "");
    c->a_m_ok[i] = LLVMBuildICmp(b, LLVMIntSLT, gm, g->m, "");
    c->a_k[i] = LLVMBuildZExt(b, ak, em->t_i64, "");
    LLVMValueRef off = LLVMBuildAdd(
        b,
        LLVMBuildMul(b, tj_emit_select(em, c->a_m_ok[i], gm, g->m0), sa_m, ""),
        c->a_vec ? c->a_k[i] : LLVMBuildMul(b, c->a_k[i], sa_k, ""), "");
    c->a_src[i] = tj_emit_advance(em, g->a, g->batch.ptr[g->a], off);
  }
  for (int32_t i = 0; i < c->b_copies; ++i) {
    LLVMValueRef e = LLVMBuildAdd(b, g->tid, c32(g, i * kThreads), "");
    LLVMValueRef bk = LLVMBuildUDiv(b, e, c32(g, b_row), "");
    LLVMValueRef bn = LLVMBuildMul(b, LLVMBuildURem(b, e, c32(g, b_row), ""),
                                   c32(g, per), "");
    c->b_dst[i] = LLVMBuildAdd(
        b, c32(g, g->a_bytes),
        LLVMBuildMul(
            b, LLVMBuildAdd(b, LLVMBuildMul(b, bk, c32(g, kBN), ""), bn, ""),
            c32(g, 4), ""),
        "");
    LLVMValueRef gn =
        LLVMBuildAdd(b, g->n0, LLVMBuildZExt(b, bn, em->t_i64, ""), "");
    c->b_n_ok[i] = LLVMBuildICmp(b, LLVMIntSLT, gn, g->n, "");
    c->b_left[i] = clamp0(g, LLVMBuildSub(b, g->n, gn, ""), 4);
    c->b_k[i] = LLVMBuildZExt(b, bk, em->t_i64, "");
    LLVMValueRef boff = LLVMBuildAdd(
        b, LLVMBuildMul(b, c->b_k[i], sb_k, ""),
        LLVMBuildMul(b, tj_emit_select(em, c->b_n_ok[i], gn, g->n0), sb_n, ""),
        "");
    c->b_src[i] = tj_emit_advance(em, g->bb, g->batch.ptr[g->bb], boff);
  }
  LLVMValueRef warp = LLVMBuildLShr(b, g->tid, c32(g, 5), "");
  LLVMValueRef lane = LLVMBuildAnd(b, g->tid, c32(g, 31), "");
  LLVMValueRef row = f32w_row0(g);
  LLVMValueRef col = LLVMBuildAdd(
      b, LLVMBuildMul(b, LLVMBuildAnd(b, warp, c32(g, 1), ""), c32(g, 64), ""),
      LLVMBuildMul(b, LLVMBuildAnd(b, lane, c32(g, 3), ""), c32(g, 4), ""), "");
  c->a_frag = LLVMBuildMul(b, row, c32(g, g->f32w_at ? 4 : as * 4), "a_frag");
  c->b_frag = LLVMBuildAdd(b, c32(g, g->a_bytes),
                           LLVMBuildMul(b, col, c32(g, 4), ""), "b_frag");
}

static void f32w_load_cb(gemm_t* g, void* ctx, LLVMValueRef stage,
                         LLVMValueRef kt) {
  f32w_ctx_t* c = ctx;
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMValueRef base = smem_at(
      g, g->smem,
      LLVMBuildTrunc(b, LLVMBuildMul(b, stage, c64(g, g->stage_bytes), ""),
                     em->t_i32, ""));
  LLVMValueRef k0 = LLVMBuildMul(b, kt, c64(g, g->bk), "");
  for (int32_t i = 0; i < c->a_copies; ++i) {
    LLVMValueRef left =
        LLVMBuildSub(b, g->kdim, LLVMBuildAdd(b, k0, c->a_k[i], ""), "");
    LLVMValueRef ok;
    if (c->a_vec) {
      // The chunk's k left in its row (K need not be a multiple of 4).
      LLVMValueRef bytes = tj_emit_select(
          em, c->a_m_ok[i], LLVMBuildMul(b, clamp0(g, left, 4), c64(g, 4), ""),
          c64(g, 0));
      ok = LLVMBuildICmp(b, LLVMIntSGT, bytes, c64(g, 0), "");
      LLVMValueRef src = tj_emit_advance(
          em, g->a, c->a_src[i],
          tj_emit_select(em, ok, LLVMBuildMul(b, kt, c->a_step, ""),
                         c64(g, 0)));
      cp_async16(g, base, c->a_dst[i], src, bytes);
    } else {
      ok = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSGT, left, c64(g, 0), ""),
                        c->a_m_ok[i], "");
      LLVMValueRef src = tj_emit_advance(
          em, g->a, c->a_src[i],
          tj_emit_select(em, ok, LLVMBuildMul(b, kt, c->a_step, ""),
                         c64(g, 0)));
      cp_async4(g, base, c->a_dst[i], src, ok);
    }
  }
  for (int32_t i = 0; i < c->b_copies; ++i) {
    LLVMValueRef k_ok = LLVMBuildICmp(
        b, LLVMIntSLT, LLVMBuildAdd(b, k0, c->b_k[i], ""), g->kdim, "");
    if (c->vec) {
      LLVMValueRef bytes = tj_emit_select(
          em, k_ok, LLVMBuildMul(b, c->b_left[i], c64(g, 4), ""), c64(g, 0));
      LLVMValueRef src = tj_emit_advance(
          em, g->bb, c->b_src[i],
          tj_emit_select(em, LLVMBuildICmp(b, LLVMIntSGT, bytes, c64(g, 0), ""),
                         LLVMBuildMul(b, kt, c->b_step, ""), c64(g, 0)));
      cp_async16(g, base, c->b_dst[i], src, bytes);
    } else {
      LLVMValueRef ok = LLVMBuildAnd(b, k_ok, c->b_n_ok[i], "");
      LLVMValueRef src = tj_emit_advance(
          em, g->bb, c->b_src[i],
          tj_emit_select(em, ok, LLVMBuildMul(b, kt, c->b_step, ""),
                         c64(g, 0)));
      cp_async4(g, base, c->b_dst[i], src, ok);
    }
  }
}

static void f32w_compute_cb(gemm_t* g, void* ctx, LLVMValueRef stage) {
  f32w_ctx_t* c = ctx;
  LLVMBuilderRef b = g->b;
  tj_emit_t* em = g->em;
  LLVMValueRef base = smem_at(
      g, g->smem,
      LLVMBuildTrunc(b, LLVMBuildMul(b, stage, c64(g, g->stage_bytes), ""),
                     em->t_i32, ""));
  int32_t as = f32w_a_stride(g);
  for (int32_t q = 0; q < g->bk / 4; ++q) {
    // 4 k of the thread's 8 rows (row-major A; transposed: per k below).
    LLVMValueRef av[8];
    for (int32_t i = 0; i < 8 && !g->f32w_at; ++i)
      av[i] = load_v4(
          g, base,
          LLVMBuildAdd(b, c->a_frag, c32(g, (i * 8 * as + q * 4) * 4), ""));
    for (int32_t kq = 0; kq < 4; ++kq) {
      int32_t kk = q * 4 + kq;
      // Transposed A: the thread's rows 0-3 and 32-35 at this k.
      for (int32_t h = 0; h < 2 && g->f32w_at; ++h)
        av[h] = load_v4(
            g, base,
            LLVMBuildAdd(b, c->a_frag, c32(g, (kk * as + h * 32) * 4), ""));
      LLVMValueRef bv[4];
      for (int32_t j = 0; j < 4; ++j)
        bv[j] = load_v4(
            g, base,
            LLVMBuildAdd(b, c->b_frag, c32(g, (kk * kBN + j * 16) * 4), ""));
      LLVMValueRef a[8], bb[16];
      for (int32_t i = 0; i < 8; ++i)
        a[i] = g->f32w_at
                   ? LLVMBuildExtractElement(b, av[i / 4], c32(g, i % 4), "")
                   : LLVMBuildExtractElement(b, av[i], c32(g, kq), "");
      for (int32_t j = 0; j < 16; ++j)
        bb[j] = LLVMBuildExtractElement(b, bv[j / 4], c32(g, j % 4), "");
      fma_outer(g, a, 8, bb, 16);
    }
  }
}

// The thread's 8x16 accumulators into the staged C tile (rows and
// columns as in f32w_setup).
static void f32w_stage_c(gemm_t* g) {
  LLVMBuilderRef b = g->b;
  LLVMValueRef warp = LLVMBuildLShr(b, g->tid, c32(g, 5), "");
  LLVMValueRef lane = LLVMBuildAnd(b, g->tid, c32(g, 31), "");
  LLVMValueRef row = f32w_row0(g);
  LLVMValueRef col = LLVMBuildAdd(
      b, LLVMBuildMul(b, LLVMBuildAnd(b, warp, c32(g, 1), ""), c32(g, 64), ""),
      LLVMBuildMul(b, LLVMBuildAnd(b, lane, c32(g, 3), ""), c32(g, 4), ""), "");
  int32_t row_off[8];
  for (int32_t i = 0; i < 8; ++i) row_off[i] = f32w_row(g, i);
  simt_stage_c(g, row, col, g->c_stride, row_off, 4, 16);
}

// The 256x128 main loop (after tile_origin): 16-byte copies where this
// block's operands allow them, else the 4-byte ones, the same compute.
static void f32w_main_loop(gemm_t* g, const pipeline_t* p) {
  tj_emit_t* em = g->em;
  LLVMValueRef vec = f32_vector_ok(g);
  for (int32_t pass = vec ? 0 : 1; pass < 2; ++pass) {
    tj_emit_if_t branch;
    if (vec)
      tj_emit_if_begin(em, &branch, pass ? LLVMBuildNot(g->b, vec, "") : vec,
                       pass ? "f32w_s" : "f32w_v");
    f32w_ctx_t c;
    f32w_setup(g, &c, pass == 0);
    pipeline_t pw = *p;
    pw.load = f32w_load_cb;
    pw.compute = f32w_compute_cb;
    pw.ctx = &c;
    run_pipeline(g, &pw);
    if (vec) tj_emit_if_end(em, &branch);
  }
  f32w_stage_c(g);
}

//===--- the epilogue ---===//

// Whether a buffer of |role| is read by the main loop, not the epilogue.
static bool gemm_operand(tj_kir_role_t role) {
  return role == TJ_KIR_GEMM_A || role == TJ_KIR_GEMM_B ||
         role == TJ_KIR_GEMM_B2 || role == TJ_KIR_GEMM_BSCALE ||
         role == TJ_KIR_GEMM_BZERO;
}

// The point (batch, row, col) with |lanes| columns.
static void epilogue_point(gemm_t* g, LLVMValueRef row, LLVMValueRef col,
                           int32_t lanes, tj_emit_point_t* p) {
  const tj_kir_t* k = g->k;
  tj_emit_t* em = g->em;
  int32_t r = g->rank;
  *p = g->batch;
  p->lanes = lanes;
  p->vdim = r - 1;
  p->mask = NULL;
  p->index[r - 2] = row;
  p->index[r - 1] = col;
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    if (gemm_operand(k->buffers[i].role)) continue;
    LLVMValueRef off = LLVMBuildAdd(
        g->b, LLVMBuildMul(g->b, row, tj_emit_stride(em, i, r - 2), ""),
        LLVMBuildMul(g->b, col, tj_emit_stride(em, i, r - 1), ""), "");
    p->ptr[i] = tj_emit_advance(em, i, g->batch.ptr[i], off);
  }
}

// Whether |lanes|-wide epilogue steps may run: N a multiple of |lanes| and
// every epilogue buffer contiguous along n with aligned rows.
static LLVMValueRef epilogue_vector_ok(gemm_t* g, int32_t lanes) {
  const tj_kir_t* k = g->k;
  tj_emit_t* em = g->em;
  LLVMBuilderRef b = g->b;
  int32_t r = g->rank;
  LLVMValueRef ok = LLVMBuildICmp(
      b, LLVMIntEQ, LLVMBuildSRem(b, g->n, c64(g, lanes), ""), c64(g, 0), "");
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    const tj_kir_buffer_t* buf = &k->buffers[i];
    if (gemm_operand(buf->role)) continue;
    if (!tj_kir_ival_is_const(buf->strides[r - 1], 1)) continue;
    int64_t bytes = (int64_t)lanes * (int64_t)tj_dtype_size(buf->dtype);
    ok = LLVMBuildAnd(
        b, ok,
        LLVMBuildICmp(
            b, LLVMIntEQ,
            LLVMBuildAnd(b, LLVMBuildPtrToInt(b, em->base[i], em->t_i64, ""),
                         c64(g, bytes - 1), ""),
            c64(g, 0), ""),
        "");
    for (int32_t d = 0; d < r - 1; ++d) {
      if (tj_kir_ival_is_const(buf->strides[d], 0)) continue;
      ok = LLVMBuildAnd(b, ok,
                        LLVMBuildICmp(b, LLVMIntEQ,
                                      LLVMBuildSRem(b, tj_emit_stride(em, i, d),
                                                    c64(g, lanes), ""),
                                      c64(g, 0), ""),
                        "");
    }
  }
  return ok;
}

// Columns per epilogue step: 16 bytes of the widest epilogue buffer that
// is contiguous along n (8 columns for bf16/f16-only epilogues, 4 with an
// f32 buffer), 4 when none is.
static int32_t epilogue_lanes(const tj_kir_t* k, int32_t rank) {
  int32_t widest = 0;
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    const tj_kir_buffer_t* buf = &k->buffers[i];
    if (gemm_operand(buf->role)) continue;
    if (!tj_kir_ival_is_const(buf->strides[rank - 1], 1)) continue;
    int32_t s = (int32_t)tj_dtype_size(buf->dtype);
    if (s > widest) widest = s;
  }
  if (widest == 0) return 4;
  int32_t lanes = 16 / widest;
  return lanes < 1 ? 1 : lanes > 8 ? 8 : lanes;
}

// Byte offset (i32) of staged C column |cl| of row |r| (both i64),
// swizzled where the main loop staged it so (c_swizzled).
static LLVMValueRef c_offset(gemm_t* g, LLVMValueRef r, LLVMValueRef cl) {
  LLVMBuilderRef b = g->b;
  if (g->c_swizzled)
    cl = LLVMBuildXor(
        b, cl,
        LLVMBuildAnd(b, LLVMBuildLShr(b, cl, c64(g, 3), ""), c64(g, 4), ""),
        "c_col");
  return LLVMBuildTrunc(
      b,
      LLVMBuildMul(
          b,
          LLVMBuildAdd(b, LLVMBuildMul(b, r, c64(g, g->c_stride), ""), cl, ""),
          c64(g, 4), ""),
      g->em->t_i32, "");
}

// The |lanes| staged accumulators at |c_off| (and, swizzled 8 lanes, the
// upper 4 at |c_off_hi|), as a vector.
static LLVMValueRef staged_acc(gemm_t* g, LLVMValueRef c, LLVMValueRef c_off,
                               LLVMValueRef c_off_hi, int32_t lanes) {
  LLVMBuilderRef b = g->b;
  if (c_off_hi) {
    LLVMTypeRef t = LLVMVectorType(g->acc_type, 4);
    LLVMValueRef half[2];
    for (int32_t h = 0; h < 2; ++h) {
      half[h] =
          LLVMBuildLoad2(b, t, smem_at(g, c, h ? c_off_hi : c_off), "acc");
      LLVMSetAlignment(half[h], 16);
    }
    LLVMValueRef mask[8];
    for (int32_t e = 0; e < 8; ++e) mask[e] = c32(g, e);
    return LLVMBuildShuffleVector(b, half[0], half[1], LLVMConstVector(mask, 8),
                                  "acc");
  }
  LLVMValueRef acc =
      LLVMBuildLoad2(b, LLVMVectorType(g->acc_type, (unsigned)lanes),
                     smem_at(g, c, c_off), "acc");
  LLVMSetAlignment(acc, lanes < 4 ? (unsigned)lanes * 4 : 16);
  return acc;
}

// The epilogue of rows [row0, row0 + rows) of the tile at (m0, n0), whose
// f32 accumulators are staged at |c| (row row0 first, c_stride apart).
static tj_status_t emit_epilogue_rows(gemm_t* g, LLVMValueRef c, int32_t row0,
                                      int32_t rows) {
  tj_emit_t* em = g->em;
  LLVMBuilderRef b = g->b;
  const tj_kir_phase_t* ph = &g->k->phases[0];
  int32_t lanes = epilogue_lanes(g->k, g->rank);
  LLVMValueRef vec_ok = epilogue_vector_ok(g, lanes);
  int32_t per_row = g->tile_n / lanes;
  tj_emit_loop_t loop;
  LLVMValueRef it =
      tj_emit_loop_begin(em, &loop, LLVMBuildZExt(b, g->tid, em->t_i64, ""),
                         c64(g, rows * per_row), c64(g, g->threads), "item");
  LLVMValueRef r = LLVMBuildSDiv(b, it, c64(g, per_row), "");
  LLVMValueRef cl = LLVMBuildMul(b, LLVMBuildSRem(b, it, c64(g, per_row), ""),
                                 c64(g, lanes), "");
  LLVMValueRef row =
      LLVMBuildAdd(b, g->m0, LLVMBuildAdd(b, r, c64(g, row0), ""), "row");
  LLVMValueRef col = LLVMBuildAdd(b, g->n0, cl, "col");
  // The staged columns [cl, cl + lanes) are at c_off, one 16-byte chunk
  // or, with 8 lanes, two, of which the swizzle may swap the two: then the
  // second is loaded from c_off_hi.
  LLVMValueRef c_off = c_offset(g, r, cl);
  LLVMValueRef c_off_hi =
      lanes > 4 && g->c_swizzled
          ? c_offset(g, r, LLVMBuildAdd(b, cl, c64(g, 4), ""))
          : NULL;
  // A dual GEMM's second product: tile_n columns further along the row.
  bool dual = g->b2 != TJ_KIR_NONE;
  LLVMValueRef cl2 = LLVMBuildAdd(b, cl, c64(g, g->tile_n), "");
  LLVMValueRef c2_off = dual ? c_offset(g, r, cl2) : NULL;
  LLVMValueRef c2_off_hi =
      dual && c_off_hi ? c_offset(g, r, LLVMBuildAdd(b, cl2, c64(g, 4), ""))
                       : NULL;
  tj_emit_if_t in_rows;
  tj_emit_if_begin(em, &in_rows, LLVMBuildICmp(b, LLVMIntSLT, row, g->m, ""),
                   "in_rows");
  LLVMValueRef full = LLVMBuildAnd(
      b, vec_ok,
      LLVMBuildICmp(b, LLVMIntSLE, LLVMBuildAdd(b, col, c64(g, lanes), ""),
                    g->n, ""),
      "");
  tj_emit_if_t vector, scalar;
  tj_emit_if_begin(em, &vector, full, "vector");
  {
    tj_emit_point_t p;
    epilogue_point(g, row, col, lanes, &p);
    p.acc = staged_acc(g, c, c_off, c_off_hi, lanes);
    if (dual) p.acc2 = staged_acc(g, c, c2_off, c2_off_hi, lanes);
    TJ_RETURN_IF_ERROR(tj_emit_body(em, ph, &p, NULL));
    tj_nvptx_align_accesses(g->nv, &p, lanes);
  }
  tj_emit_if_end(em, &vector);
  tj_emit_if_begin(em, &scalar, LLVMBuildNot(b, full, ""), "scalar");
  for (int32_t e = 0; e < lanes; ++e) {
    LLVMValueRef ce = LLVMBuildAdd(b, col, c64(g, e), "");
    tj_emit_if_t in_cols;
    tj_emit_if_begin(em, &in_cols, LLVMBuildICmp(b, LLVMIntSLT, ce, g->n, ""),
                     "in_cols");
    tj_emit_point_t p;
    epilogue_point(g, row, ce, 1, &p);
    bool hi = c_off_hi && e >= 4;
    p.acc =
        LLVMBuildLoad2(b, g->acc_type,
                       smem_at(g, c,
                               LLVMBuildAdd(b, hi ? c_off_hi : c_off,
                                            c32(g, (hi ? e - 4 : e) * 4), "")),
                       "");
    if (dual)
      p.acc2 = LLVMBuildLoad2(
          b, g->acc_type,
          smem_at(g, c,
                  LLVMBuildAdd(b, hi ? c2_off_hi : c2_off,
                               c32(g, (hi ? e - 4 : e) * 4), "")),
          "");
    TJ_RETURN_IF_ERROR(tj_emit_body(em, ph, &p, NULL));
    tj_emit_if_end(em, &in_cols);
  }
  tj_emit_if_end(em, &scalar);
  tj_emit_if_end(em, &in_rows);
  tj_emit_loop_end(em, &loop);
  return NULL;
}

static tj_status_t emit_epilogue(gemm_t* g) {
  return emit_epilogue_rows(g, g->smem, 0, g->tile_m);
}

//===--- entry ---===//

static tj_status_t check_gemm(const tj_kir_t* k, uint32_t* out_a,
                              uint32_t* out_b) {
  int32_t na = 0, nb = 0;
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    if (k->buffers[i].role == TJ_KIR_GEMM_A) {
      *out_a = i;
      ++na;
    }
    if (k->buffers[i].role == TJ_KIR_GEMM_B) {
      *out_b = i;
      ++nb;
    }
  }
  if (na != 1 || nb != 1 || k->rank < 2 || k->num_phases != 1 ||
      k->phases[0].kind != TJ_KIR_PHASE_MAP)
    return tj_invalid(
        "kernel @%s: a gemm needs rank >= 2, one A, one B and one epilogue",
        k->name);
  tj_dtype_t da = k->buffers[*out_a].dtype, db = k->buffers[*out_b].dtype;
  // matmul_i32's i8/u8 operands may be mixed (emit_qgemm), and so may
  // matmul_f8's e4m3/e5m2 (fp8); a quantized B is i8/u8 under an f32 A
  // (emit_wqgemm).
  if (tj_kir_gemm_is_int8(k) || tj_kir_gemm_is_f8(k) || k->bq.bits) return NULL;
  if (da != db)
    return tj_unsupported("kernel @%s: gemm operands of two dtypes (%s, %s)",
                          k->name, tj_dtype_name(da), tj_dtype_name(db));
  if (da != TJ_DTYPE_F32 && da != TJ_DTYPE_F16 && da != TJ_DTYPE_BF16)
    return tj_unsupported("kernel @%s: %s gemm operands on the GPU", k->name,
                          tj_dtype_name(da));
  return NULL;
}

// The wgmma defaults: 128x128 tiles of two consumer warpgroups, a ring of
// three 32 KiB stages, so that two blocks share an SM and one's prologue
// and epilogue overlap the other's main loop: the fastest fused
// gelu(x @ w + b) at M = 2048 and 16384 (K = 1024, N = 4096) on an H200
// without autotuning (bench/cuda_bench --gemm).
#define kWgDefaultTile 128
#define kWgDefaultStages 3

// tj_nvptx_wgmma_t's callbacks for the persistent kernel.
static void wgmma_tile_origin(void* ctx, LLVMValueRef tile,
                              LLVMValueRef* out_m0, LLVMValueRef* out_n0,
                              LLVMValueRef* out_batch) {
  gemm_t* g = ctx;
  *out_batch = NULL;
  if (g->fold_batch) {
    // Entry-major: an entry's tiles run on neighbouring blocks at once,
    // which share its operands in L2, and the grouped raster inside it.
    *out_batch = LLVMBuildUDiv(g->b, tile, g->tiles_per_entry, "entry");
    tile = LLVMBuildURem(g->b, tile, g->tiles_per_entry, "entry_tile");
  }
  tile_coords(g, tile, out_m0, out_n0);
}

static tj_status_t wgmma_epilogue(void* ctx, LLVMValueRef m0, LLVMValueRef n0,
                                  LLVMValueRef batch, LLVMValueRef c,
                                  int32_t row0, int32_t rows) {
  gemm_t* g = ctx;
  g->m0 = m0;
  g->n0 = n0;
  // The epilogue's buffers (output, bias, residual) at this tile's entry.
  if (batch) tj_emit_decompose(g->em, batch, g->rank - 2, &g->batch);
  return emit_epilogue_rows(g, c, row0, rows);
}

// Marks the loads of the current block from |p|'s pointers into inputs
// that every row of the tile reads alike (a bias: stride 0 along m) as
// !invariant.load: nothing writes them while the kernel runs, so GVN
// merges a thread's loads of one column across its rows and across the
// output tile's shared-memory stores between them (which LLVM 19 cannot
// tell from global memory), and NVPTX loads them through the
// non-coherent cache (ld.global.nc). The TMA store's epilogue then loads
// a pingpong 128x128 thread's 16 bias pairs once each, not 32 times.
static void mark_row_invariant_loads(gemm_t* g, const tj_emit_point_t* p) {
  const tj_kir_t* k = g->k;
  LLVMValueRef ptrs[TJ_KIR_MAX_BUFFERS];
  int32_t n = 0;
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    const tj_kir_buffer_t* buf = &k->buffers[i];
    if (buf->role == TJ_KIR_INPUT &&
        tj_kir_ival_is_const(buf->strides[g->rank - 2], 0))
      ptrs[n++] = p->ptr[i];
  }
  if (n == 0) return;
  unsigned kind = LLVMGetMDKindIDInContext(g->em->ctx, "invariant.load", 14);
  LLVMValueRef empty = LLVMMetadataAsValue(
      g->em->ctx, LLVMMDNodeInContext2(g->em->ctx, NULL, 0));
  LLVMBasicBlockRef bb = LLVMGetInsertBlock(g->b);
  for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in;
       in = LLVMGetNextInstruction(in)) {
    if (LLVMGetInstructionOpcode(in) != LLVMLoad) continue;
    for (int32_t j = 0; j < n; ++j)
      if (LLVMGetOperand(in, 0) == ptrs[j]) LLVMSetMetadata(in, kind, empty);
  }
}

// The epilogue of one column pair for the TMA store (tj_nvptx_wgmma_t.
// epilogue_pair): the kernel IR's epilogue phase, 2 lanes wide, with the
// output redirected to shared memory. Rows and columns past M and N are
// read at the last row and column pair (N is even where this runs): the
// TMA store drops what they compute.
static tj_status_t wgmma_epilogue_pair(void* ctx, LLVMValueRef m0,
                                       LLVMValueRef n0, LLVMValueRef row,
                                       LLVMValueRef col, LLVMValueRef acc,
                                       LLVMValueRef dst) {
  gemm_t* g = ctx;
  (void)m0, (void)n0;
  tj_emit_t* em = g->em;
  LLVMBuilderRef b = g->b;
  LLVMValueRef r =
      tj_emit_min_i64(em, row, LLVMBuildSub(b, g->m, c64(g, 1), ""));
  LLVMValueRef c =
      tj_emit_min_i64(em, col, LLVMBuildSub(b, g->n, c64(g, 2), ""));
  tj_emit_point_t p;
  epilogue_point(g, r, c, 2, &p);
  p.ptr[g->store_out] = dst;
  p.acc = acc;
  TJ_RETURN_IF_ERROR(tj_emit_body(em, &g->k->phases[0], &p, NULL));
  tj_nvptx_align_accesses(g->nv, &p, 2);
  mark_row_invariant_loads(g, &p);
  return NULL;
}

// swiglu (issue 14): wgmma_epilogue_pair for a dual GEMM, C2's pair
// |acc2| beside C's.
static tj_status_t wgmma_epilogue_pair_dual(void* ctx, LLVMValueRef row,
                                            LLVMValueRef col, LLVMValueRef acc,
                                            LLVMValueRef acc2,
                                            LLVMValueRef dst) {
  gemm_t* g = ctx;
  tj_emit_t* em = g->em;
  LLVMBuilderRef b = g->b;
  LLVMValueRef r =
      tj_emit_min_i64(em, row, LLVMBuildSub(b, g->m, c64(g, 1), ""));
  LLVMValueRef c =
      tj_emit_min_i64(em, col, LLVMBuildSub(b, g->n, c64(g, 2), ""));
  tj_emit_point_t p;
  epilogue_point(g, r, c, 2, &p);
  p.ptr[g->store_out] = dst;
  p.acc = acc;
  p.acc2 = acc2;
  TJ_RETURN_IF_ERROR(tj_emit_body(em, &g->k->phases[0], &p, NULL));
  tj_nvptx_align_accesses(g->nv, &p, 2);
  return NULL;
}

// The buffer a TMA store may write (tj_nvptx_options_t.gemm_tma_store):
// the epilogue's one stored buffer, an output of f16, bf16 or f32
// contiguous along n that the epilogue does not read; -1 if there is
// none such.
static int32_t tma_store_output(const tj_kir_t* k) {
  const tj_kir_phase_t* ph = &k->phases[0];
  int32_t out = -1, stores = 0;
  for (uint32_t i = 0; i < ph->num_insts; ++i) {
    if (ph->insts[i].kind == TJ_KIR_STORE) {
      out = (int32_t)ph->insts[i].ref;
      ++stores;
    }
    if (ph->insts[i].kind == TJ_KIR_STORE_AT) return -1;
  }
  if (stores != 1) return -1;
  for (uint32_t i = 0; i < ph->num_insts; ++i) {
    tj_kir_inst_kind_t kind = ph->insts[i].kind;
    if ((kind == TJ_KIR_LOAD || kind == TJ_KIR_LOAD_AT) &&
        ph->insts[i].ref == (uint32_t)out)
      return -1;
  }
  const tj_kir_buffer_t* buf = &k->buffers[out];
  if (buf->role != TJ_KIR_OUTPUT ||
      !tj_kir_ival_is_const(buf->strides[k->rank - 1], 1) ||
      (buf->dtype != TJ_DTYPE_BF16 && buf->dtype != TJ_DTYPE_F16 &&
       buf->dtype != TJ_DTYPE_F32))
    return -1;
  return out;
}

// The wgmma tile (m 64|128, n 64|128|256) and pipeline depth (3 to 8
// stages) that |o| asks for, or the defaults; shared by the 16-bit/tf32
// and the 8-bit wgmma kernels.
static tj_status_t wgmma_shape(const tj_kir_t* k, const tj_nvptx_options_t* o,
                               int32_t* tile_m, int32_t* tile_n,
                               int32_t* stages) {
  *tile_m = o->gemm_tile_m ? o->gemm_tile_m : kWgDefaultTile;
  *tile_n = o->gemm_tile_n ? o->gemm_tile_n : kWgDefaultTile;
  *stages = o->gemm_stages ? o->gemm_stages : kWgDefaultStages;
  if (*tile_m != 64 && *tile_m != 128 && *tile_m != 256)
    return tj_invalid(
        "kernel @%s: gemm_tile_m %d; wgmma takes 64 or 128 (256: the TMA "
        "cooperative schedule)",
        k->name, (int)*tile_m);
  if (*tile_n != 64 && *tile_n != 128 && *tile_n != 256)
    return tj_invalid("kernel @%s: gemm_tile_n %d; wgmma takes 64, 128 or 256",
                      k->name, (int)*tile_n);
  if (*stages < 3 || *stages > 8)
    return tj_invalid("kernel @%s: gemm_stages %d; wgmma takes 3 to 8", k->name,
                      (int)*stages);
  return NULL;
}

// The sm_90a GEMM: the wgmma main loop (emit_nvptx_wgmma.c), then the
// same staged epilogue as the mma.sync path.
static tj_status_t emit_wgmma_gemm(gemm_t* g) {
  tj_nvptx_emit_t* nv = g->nv;
  tj_emit_t* em = g->em;
  const tj_kir_t* k = g->k;
  const tj_nvptx_options_t* o = &nv->options;
  tj_nvptx_kernel_t* info = nv->info;
  int32_t r = g->rank;
  tj_nvptx_wgmma_t w;
  memset(&w, 0, sizeof(w));
  TJ_RETURN_IF_ERROR(wgmma_shape(k, o, &w.tile_m, &w.tile_n, &w.stages));
  if (o->gemm_tile_k != 0 && o->gemm_tile_k != 64)
    return tj_invalid("kernel @%s: gemm_tile_k %d; wgmma k-tiles are 64",
                      k->name, (int)o->gemm_tile_k);
  w.tma = o->gemm_tma;
  if (w.tma && o->gemm_wgmma_drain)
    return tj_unsupported("kernel @%s: the TMA gemm takes no gemm_wgmma_drain",
                          k->name);
  // Pingpong: tile_m 64, or 128 with gemm_pingpong (two row blocks of
  // tile_n / 2 accumulators a thread: at most 128, so tile_n <= 128).
  w.pingpong = w.tma && (w.tile_m == 64 || o->gemm_pingpong);
  bool f32 = g->in_dtype == TJ_DTYPE_F32;
  if (o->gemm_pingpong && (!w.tma || w.tile_m != 128 || w.tile_n > 128 || f32))
    return tj_unsupported(
        "kernel @%s: gemm_pingpong takes gemm_tma, 128x64 or 128x128 tiles "
        "and f16/bf16 operands (here %dx%d, %s%s)",
        k->name, (int)w.tile_m, (int)w.tile_n, tj_dtype_name(g->in_dtype),
        w.tma ? "" : ", no TMA");
  if (w.tile_m == 256 && (!w.tma || w.tile_n > 128 || f32))
    return tj_unsupported(
        "kernel @%s: gemm_tile_m 256 takes gemm_tma (cooperative), tile_n 64 "
        "or 128 and f16/bf16 operands (here %dx%d, %s%s)",
        k->name, (int)w.tile_m, (int)w.tile_n, tj_dtype_name(g->in_dtype),
        w.tma ? "" : ", no TMA");
  w.cluster = o->gemm_cluster;
  if (w.cluster && (!w.tma || f32 || r != 2 || w.tile_n < 128))
    return tj_unsupported(
        "kernel @%s: gemm_cluster takes gemm_tma, a rank-2 gemm of f16/bf16 "
        "operands and tile_n 128 or 256 (here rank %d, %dx%d, %s%s)",
        k->name, (int)r, (int)w.tile_m, (int)w.tile_n,
        tj_dtype_name(g->in_dtype), w.tma ? "" : ", no TMA");
  // swiglu (issue 14): a dual GEMM's wgmma covers tile_n / 2 columns of
  // each product (the block's tile of C is that wide).
  w.dual = g->b2 != TJ_KIR_NONE;
  if (w.dual && (w.tile_n < 128 || w.cluster || f32))
    return tj_unsupported(
        "kernel @%s: a dual gemm takes f16/bf16 operands and tile_n 128 or "
        "256, no cluster (here %dx%d, %s)",
        k->name, (int)w.tile_m, (int)w.tile_n, tj_dtype_name(g->in_dtype));
  g->tile_m = w.tile_m;
  g->tile_n = w.dual ? w.tile_n / 2 : w.tile_n;
  g->cluster = w.cluster ? 2 : 1;
  if (w.cluster)
    g->cluster_rank = LLVMBuildZExt(
        em->b,
        tj_emit_inline_asm(em, em->t_i32, "mov.u32 $0, %cluster_ctarank;", "=r",
                           NULL, 0),
        em->t_i64, "cluster_rank");
  // The epilogue's threads: one consumer warpgroup (pingpong), both
  // (cooperative TMA), or tile_m / 64 warpgroups (cp.async).
  g->threads = w.pingpong ? 128 : w.tma ? 256 : w.tile_m / 64 * 128;
  g->c_stride = w.tile_n + 8;
  g->c_swizzled = true;
  w.c_stride = g->c_stride;
  w.drain = o->gemm_wgmma_drain;
  w.persistent = o->gemm_persistent;
  w.a = g->a;
  w.b = g->bb;
  w.f16 = g->in_dtype == TJ_DTYPE_F16;
  w.tf32 = g->in_dtype == TJ_DTYPE_F32;
  if (w.tf32 && (!w.tma || (w.tile_m == 128 && w.tile_n < 128)))
    return tj_unsupported(
        "kernel @%s: the tf32 gemm takes the TMA schedules with tile_m 64, or "
        "128 and tile_n 128 or 256 (here %dx%d%s)",
        k->name, (int)w.tile_m, (int)w.tile_n, w.tma ? "" : ", no TMA");
  // The TMA store: where the output allows one and its tile fits.
  int32_t out = tma_store_output(k);
  w.tma_store = o->gemm_tma_store && w.tma && !w.tf32 && r == 2 && out >= 0 &&
                nv->store_map_ok;
  w.pairs_in_order = o->gemm_epilogue_in_order;
  if (w.tma_store) {
    g->store_out = (uint32_t)out;
    w.store_bytes = (int32_t)tj_dtype_size(k->buffers[out].dtype);
    if (tj_nvptx_wgmma_shared_bytes(&w, 0) > 227 * 1024) w.tma_store = false;
  }
  int32_t c_bytes = w.tile_m * w.c_stride * 4;
  int32_t shared = tj_nvptx_wgmma_shared_bytes(&w, c_bytes);
  if (shared > 227 * 1024)
    return tj_invalid(
        "kernel @%s: a %dx%d wgmma tile with %d stages needs %d bytes of "
        "shared memory; the limit is 227 KiB",
        k->name, (int)w.tile_m, (int)w.tile_n, (int)w.stages, (int)shared);
  info->threads = w.tma ? 384 : g->threads;
  info->tensor_cores = true;
  info->wgmma = true;
  info->tma = w.tma;
  info->cluster = w.cluster ? 2 : 0;
  info->persistent = w.persistent;
  info->tile_m = w.tile_m;
  info->tile_n = g->tile_n;  // of C: a dual GEMM's wgmma is twice as wide
  info->dual = w.dual;
  info->tile_k = w.tf32 ? 32 : 64;
  info->stages = w.stages;
  info->group_m = kGroupM;
  info->shared_bytes = shared;
  info->vector_lanes = epilogue_lanes(k, r);
  // Two blocks per SM where both rings fit (228 KiB an SM, 1 KiB of it
  // reserved per block): one block's epilogue then overlaps the other's
  // main loop. The register cap that implies (65536 / 2 / threads) holds
  // the accumulators only up to 64 a thread.
  info->min_blocks_per_sm =
      !w.persistent && 2 * (shared + 1024) <= 228 * 1024 && w.tile_n <= 128 ? 2
                                                                            : 0;
  // TMA: one block an SM, whose register cap (65536 / 384 = 168) is what
  // setmaxnreg redistributes; ptxas ignores setmaxnreg without one (C7508).
  if (w.tma) info->min_blocks_per_sm = 1;
  g->m = em->dim[r - 2];
  g->n = em->dim[r - 1];
  g->kdim = em->gemm_k;
  g->tid = tj_nvptx_sreg(nv, "tid.x");
  g->smem = tj_nvptx_dynamic_shared(nv);
  tile_origin(g);
  if (w.persistent || w.tma) {
    w.tiles = tile_count(g);
    w.tile_origin = wgmma_tile_origin;
    w.epilogue = wgmma_epilogue;
    w.ctx = g;
  }
  // TMA, batched: the tile index runs over every entry's tiles
  // (tj_nvptx_launch_config sizes the grid likewise).
  g->fold_batch = w.tma && r > 2;
  if (g->fold_batch) {
    g->tiles_per_entry = w.tiles;
    for (int32_t d = 0; d < r - 2; ++d)
      w.tiles = LLVMBuildMul(em->b, w.tiles, em->dim[d], "all_tiles");
    w.a_batched = tj_nvptx_gemm_operand_batched(k, g->a);
    w.b_batched = tj_nvptx_gemm_operand_batched(k, g->bb);
  }
  w.a_base = g->batch.ptr[g->a];
  w.b_base = g->batch.ptr[g->bb];
  if (w.dual) {
    w.b2 = g->b2;
    w.b2_base = g->batch.ptr[g->b2];
  }
  w.sa_m = tj_emit_stride(em, g->a, r - 2);
  w.sb_k = tj_emit_stride(em, g->bb, r - 2);
  w.b_kmajor = g->b_kmajor;
  w.sb_n = tj_emit_stride(em, g->bb, r - 1);
  w.m = g->m;
  w.n = g->n;
  w.kdim = g->kdim;
  w.m0 = g->m0;
  w.n0 = g->n0;
  w.tid = g->tid;
  w.smem = g->smem;
  if (w.tma) {
    for (int i = 0; i < 2; ++i) {
      if (!nv->tensor_map[i])
        return tj_internal("kernel @%s: no tensor-map parameters", k->name);
    }
    w.map_a = LLVMBuildPtrToInt(em->b, nv->tensor_map[0], em->t_i64, "map_a");
    w.map_b = LLVMBuildPtrToInt(em->b, nv->tensor_map[1], em->t_i64, "map_b");
    if (w.dual) {
      if (!nv->tensor_map[2])
        return tj_internal("kernel @%s: no B2 tensor map", k->name);
      w.map_b2 =
          LLVMBuildPtrToInt(em->b, nv->tensor_map[2], em->t_i64, "map_b2");
    }
    if (w.tma_store) {
      // A dual GEMM's output map follows B2's.
      w.map_c = LLVMBuildPtrToInt(em->b, nv->tensor_map[w.dual ? 3 : 2],
                                  em->t_i64, "map_c");
      w.epilogue_pair_dual = wgmma_epilogue_pair_dual;
      // The host encoded the output's map, and the epilogue's 2-wide
      // steps are aligned.
      w.store_ok = LLVMBuildAnd(
          em->b,
          LLVMBuildICmp(em->b, LLVMIntNE, nv->store_map_ok, c32(g, 0), ""),
          epilogue_vector_ok(g, 2), "store_ok");
      w.epilogue_pair = wgmma_epilogue_pair;
    }
    // The epilogue runs on the consumer warpgroups alone: both
    // (cooperative) or each on its own tiles (pingpong).
    g->tid = w.pingpong
                 ? LLVMBuildAnd(em->b, g->tid, c32(g, 127), "consumer_tid")
                 : LLVMBuildSub(em->b, g->tid, c32(g, 128), "consumer_tid");
  }
  TJ_RETURN_IF_ERROR(tj_nvptx_emit_wgmma(nv, &w));
  return w.persistent || w.tma ? NULL : emit_epilogue(g);
}

// The 8-bit GEMM (matmul_i32, issue 17): the s8/u8 wgmma main loop of
// emit_nvptx_qgemm.c (sm_90a), then the staged epilogue on its i32
// accumulators, where the dequantization fuses. matmul_f8 (fp8) takes the
// same loop on e4m3/e5m2 wgmma with f32 accumulators. Defaults as the bf16
// wgmma's: 128x128 tiles, three stages of 32 KiB, two blocks an SM.
static tj_status_t emit_qgemm(gemm_t* g) {
  tj_nvptx_emit_t* nv = g->nv;
  tj_emit_t* em = g->em;
  const tj_kir_t* k = g->k;
  const tj_nvptx_options_t* o = &nv->options;
  tj_nvptx_kernel_t* info = nv->info;
  int32_t r = g->rank;
  if (nv->arch != TJ_NVPTX_SM_90A)
    return tj_unsupported(
        "kernel @%s: the 8-bit gemm runs on wgmma, which needs sm_90a (here "
        "%s)",
        k->name, tj_nvptx_arch_name(nv->arch));
  if (o->gemm_kernel == TJ_NVPTX_GEMM_MMA_SYNC || o->gemm_tma ||
      o->gemm_pingpong || o->gemm_persistent || o->gemm_wgmma_drain ||
      (o->gemm_tile_k != 0 && o->gemm_tile_k != 128))
    return tj_unsupported(
        "kernel @%s: the 8-bit gemm has one schedule (cp.async wgmma, k-tiles "
        "of 128): no gemm_kernel mma_sync, gemm_tma, gemm_pingpong, "
        "gemm_persistent, gemm_wgmma_drain or gemm_tile_k %d",
        k->name, (int)o->gemm_tile_k);
  const tj_kir_buffer_t* A = &k->buffers[g->a];
  const tj_kir_buffer_t* B = &k->buffers[g->bb];
  tj_nvptx_qgemm_t q;
  memset(&q, 0, sizeof(q));
  TJ_RETURN_IF_ERROR(wgmma_shape(k, o, &q.tile_m, &q.tile_n, &q.stages));
  if (q.tile_m > 128)
    return tj_unsupported(
        "kernel @%s: the 8-bit gemm takes gemm_tile_m 64 or 128 (here %d)",
        k->name, (int)q.tile_m);
  // 8-bit wgmma reads both operands K-major: A must be contiguous along
  // k; B along k (copied as is) or along n (transposed on the way).
  q.b_kmajor = tj_kir_ival_is_const(B->strides[r - 2], 1);
  // Mixed signs: the u8 operand runs as s8 (emit_nvptx_qgemm.c). Float8
  // wgmma takes e4m3 and e5m2 in any pair: nothing to flip.
  q.flip_a = A->dtype == TJ_DTYPE_U8 && B->dtype == TJ_DTYPE_I8;
  q.flip_b = A->dtype == TJ_DTYPE_I8 && B->dtype == TJ_DTYPE_U8;
  if (!tj_kir_ival_is_const(A->strides[r - 1], 1) ||
      (!q.b_kmajor && !tj_kir_ival_is_const(B->strides[r - 1], 1)))
    return tj_unsupported(
        "kernel @%s: the 8-bit gemm needs A contiguous along k and B along k "
        "or n (stride 1)",
        k->name);
  g->tile_m = q.tile_m;
  g->tile_n = q.tile_n;
  g->threads = q.tile_m / 64 * 128;
  g->c_stride = q.tile_n + 8;
  q.c_stride = g->c_stride;
  int32_t shared = tj_nvptx_qgemm_shared_bytes(&q, q.tile_m * q.c_stride * 4);
  if (shared > 227 * 1024)
    return tj_invalid(
        "kernel @%s: a %dx%d 8-bit wgmma tile with %d stages needs %d bytes "
        "of shared memory; the limit is 227 KiB",
        k->name, (int)q.tile_m, (int)q.tile_n, (int)q.stages, (int)shared);
  info->threads = g->threads;
  info->tensor_cores = true;
  info->wgmma = true;
  info->tile_m = q.tile_m;
  info->tile_n = q.tile_n;
  info->tile_k = 128;
  info->stages = q.stages;
  info->group_m = kGroupM;
  info->shared_bytes = shared;
  info->vector_lanes = epilogue_lanes(k, r);
  // Two blocks an SM as the bf16 kernel, except with the n-contiguous B,
  // whose transposing loads hold 16 more registers a block: under two
  // blocks' cap of 128 they spilled (ptxas -v, 328 bytes).
  info->min_blocks_per_sm =
      2 * (shared + 1024) <= 228 * 1024 && q.tile_n <= 128 && q.b_kmajor ? 2
                                                                         : 0;
  g->m = em->dim[r - 2];
  g->n = em->dim[r - 1];
  g->kdim = em->gemm_k;
  g->tid = tj_nvptx_sreg(nv, "tid.x");
  g->smem = tj_nvptx_dynamic_shared(nv);
  tile_origin(g);
  q.a = g->a;
  q.b = g->bb;
  q.a_dtype = A->dtype;
  q.b_dtype = B->dtype;
  q.a_base = g->batch.ptr[g->a];
  q.b_base = g->batch.ptr[g->bb];
  q.sa_m = tj_emit_stride(em, g->a, r - 2);
  q.sb = tj_emit_stride(em, g->bb, q.b_kmajor ? r - 1 : r - 2);
  q.m = g->m;
  q.n = g->n;
  q.kdim = g->kdim;
  q.m0 = g->m0;
  q.n0 = g->n0;
  q.tid = g->tid;
  q.smem = g->smem;
  TJ_RETURN_IF_ERROR(tj_nvptx_emit_qgemm(nv, &q));
  return emit_epilogue(g);
}

// The weight-only quantized GEMM (qfold, issue 17): B's quantized weight
// read once by the decode kernel of emit_nvptx_wqgemm.c, which stages a
// 16-row tile of C for the usual epilogue. Blocks are 16 x 64 (int4) or
// 16 x 32 (int8) tiles of C, rastered as the other GEMMs.
static tj_status_t emit_wqgemm(gemm_t* g) {
  tj_nvptx_emit_t* nv = g->nv;
  tj_emit_t* em = g->em;
  const tj_kir_t* k = g->k;
  int32_t r = g->rank;
  uint32_t sc = UINT32_MAX, zr = UINT32_MAX;
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    if (k->buffers[i].role == TJ_KIR_GEMM_BSCALE) sc = i;
    if (k->buffers[i].role == TJ_KIR_GEMM_BZERO) zr = i;
  }
  const tj_kir_buffer_t* B = &k->buffers[g->bb];
  int32_t chunk = k->bq.bits == 4 ? 32 : 16;
  if (sc == UINT32_MAX ||
      (g->in_dtype != TJ_DTYPE_F32 && g->in_dtype != TJ_DTYPE_F16 &&
       g->in_dtype != TJ_DTYPE_BF16) ||
      (B->dtype != TJ_DTYPE_I8 && B->dtype != TJ_DTYPE_U8) ||
      (k->bq.bits != 4 && k->bq.bits != 8) ||
      k->buffers[sc].dtype != g->in_dtype ||
      !tj_kir_ival_is_const(B->strides[r - 1], 1))
    return tj_invalid(
        "kernel @%s: a quantized-B gemm needs an f32, f16 or bf16 A, an "
        "i8/u8 B of %d bits contiguous along n and a scale of A's dtype",
        k->name, (int)k->bq.bits);
  if (k->bq.group % chunk != 0)
    return tj_unsupported(
        "kernel @%s: the quantized-B gemm on the GPU takes groups of a "
        "multiple of %d rows (here %lld)",
        k->name, (int)chunk, (long long)k->bq.group);
  tj_nvptx_wqgemm_t w;
  memset(&w, 0, sizeof(w));
  w.bits = k->bq.bits;
  w.dtype = g->in_dtype;
  bool sgn = w.bits == 4 ? k->bq.int4_signed : B->dtype == TJ_DTYPE_I8;
  w.flip = sgn;
  w.zero_signed = sgn;
  w.group = k->bq.group;
  // Tensor cores (emit_nvptx_wqmma.c) on the tile layout where the caller
  // puts the weight there (tj_nvptx_options_t.wqgemm_tiled): at every M
  // for f16/bf16 A, and for f32 A where M is a constant of 4 (int4) or 8
  // (int8) or more (on the H200, bench/RESULTS.md: faster than the
  // CUDA-core kernel at M = 1 to 16 for bf16 x, but for f32 x, whose three
  // bf16 terms take three mmas a tile, 1.4-1.6x slower at M = 1 and, for
  // int8, still slower at M = 4). On the [K, N] layout where M is a
  // constant of 8 or more. wqgemm_mma: tensor cores at every M.
  const tj_nvptx_options_t* wo = &nv->options;
  int64_t mconst = k->dims[r - 2].param < 0 ? k->dims[r - 2].value : -1;
  bool half = w.dtype != TJ_DTYPE_F32;
  bool want_tc = wo->wqgemm_mma || wo->wqgemm_no_split ||
                 (wo->wqgemm_tiled ? half || mconst >= (w.bits == 4 ? 4 : 8)
                                   : mconst >= 8);
  bool tc = !wo->wqgemm_fma && k->bq.group % 16 == 0 && want_tc;
  w.tiled = tc && wo->wqgemm_tiled && !wo->wqgemm_no_split;
  w.tile_n = tc ? 64 : tj_nvptx_wqgemm_tile_n(w.bits);
  w.c_stride = w.tile_n + 4;
  // Tiled, f16/bf16 A: blocks of 4 warps, four an SM (128 registers a
  // thread), so that the K splits of N / 64 tiles fill the SMs' slots in
  // finer steps (11008 x 4096: 172 tiles x 3 splits in one wave of 528
  // slots, where 8-warp blocks took two of 264); wqgemm_blocks256: the
  // 8-warp blocks, two an SM.
  bool split3 = w.dtype == TJ_DTYPE_F32;
  w.threads = w.tiled && !split3 && !wo->wqgemm_blocks256 ? 128 : 256;
  g->tile_m = 16;
  g->tile_n = w.tile_n;
  g->threads = w.threads;
  g->c_stride = w.c_stride;
  tj_nvptx_kernel_t* info = nv->info;
  info->threads = g->threads;
  info->tile_m = g->tile_m;
  info->tile_n = g->tile_n;
  info->tile_k =
      tc ? (w.bits == 4 ? 128 : 64) / (w.tiled ? 2 : 1) : chunk;  // a chunk
  // Split K across blocks (decode: N / 64 tiles alone leave SMs idle):
  // a rank-2 GEMM whose N is a constant, so that the partials' workspace
  // is a module global of constant size.
  if (tc && !nv->options.wqgemm_no_split && r == 2 &&
      k->dims[r - 1].param < 0 && k->dims[r - 1].value > 0) {
    w.max_splits = w.tiled ? kWqMaxSplitsTiled : kWqMaxSplits;
    w.n_tiles = (k->dims[r - 1].value + 63) / 64;
    info->k_splits = w.max_splits;
    if (w.tiled && wo->wqgemm_splits > 0) {
      w.max_splits = wo->wqgemm_splits > 1 ? wo->wqgemm_splits : 0;
      info->k_splits = w.max_splits;
      info->k_splits_fixed = true;
    }
  }
  info->wq_tiled = w.tiled;
  // sm_90a: the splits of a tile in one cluster, joined through
  // distributed shared memory (tj_nvptx_options_t.wqgemm_cluster).
  w.cluster_join = w.tiled && w.max_splits > 1 && wo->wqgemm_cluster &&
                   nv->arch == TJ_NVPTX_SM_90A;
  info->wq_cluster = w.cluster_join;
  w.programmatic = tc && wo->wqgemm_programmatic && nv->arch == TJ_NVPTX_SM_90A;
  w.ring = w.tiled && !split3 && wo->wqgemm_ring;
  info->wq_programmatic = w.programmatic;
  info->stages = 1;
  info->group_m = kGroupM;
  // One block an SM may take every register: without the bound ptxas
  // picked 128 and spilled the tensor-core loop's accumulators.
  // Tiled: 512 threads an SM (128 registers a thread: four blocks of
  // 128, two of 256), so that one block's loads are in flight while
  // another computes. f32 A's three terms and per-group sums keep one
  // block an SM.
  if (tc) info->min_blocks_per_sm = w.tiled && !split3 ? 512 / w.threads : 1;
  info->shared_bytes =
      tc ? tj_nvptx_wqmma_shared_bytes(&w) : tj_nvptx_wqgemm_shared_bytes(&w);
  info->vector_lanes = epilogue_lanes(k, r);
  g->m = em->dim[r - 2];
  g->n = em->dim[r - 1];
  g->kdim = em->gemm_k;
  g->tid = tj_nvptx_sreg(nv, "tid.x");
  g->smem = tj_nvptx_dynamic_shared(nv);
  tile_origin(g);
  w.a_base = g->batch.ptr[g->a];
  w.b_base = g->batch.ptr[g->bb];
  w.s_base = g->batch.ptr[sc];
  w.z_base = zr == UINT32_MAX ? NULL : g->batch.ptr[zr];
  w.sa_m = tj_emit_stride(em, g->a, r - 2);
  w.sa_k = tj_emit_stride(em, g->a, r - 1);
  w.sb_k = tj_emit_stride(em, g->bb, r - 2);
  w.ss_g = tj_emit_stride(em, sc, r - 2);
  w.row_bytes =
      w.bits == 4 ? LLVMBuildSDiv(g->b, LLVMBuildAdd(g->b, g->n, c64(g, 1), ""),
                                  c64(g, 2), "")
                  : g->n;
  w.m = g->m;
  w.n = g->n;
  w.kdim = g->kdim;
  w.m0 = g->m0;
  w.n0 = g->n0;
  w.tid = g->tid;
  w.smem = g->smem;
  TJ_RETURN_IF_ERROR(tc ? tj_nvptx_emit_wqmma(nv, &w)
                        : tj_nvptx_emit_wqgemm(nv, &w));
  return emit_epilogue(g);
}

tj_status_t tj_nvptx_emit_gemm(tj_nvptx_emit_t* nv) {
  tj_emit_t* em = &nv->em;
  const tj_kir_t* k = em->k;
  gemm_t g;
  memset(&g, 0, sizeof(g));
  g.nv = nv;
  g.em = em;
  g.b = em->b;
  g.k = k;
  g.rank = k->rank;
  TJ_RETURN_IF_ERROR(check_gemm(k, &g.a, &g.bb));
  g.in_dtype = k->buffers[g.a].dtype;
  g.b2 = TJ_KIR_NONE;
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    if (k->buffers[i].role == TJ_KIR_GEMM_B2) g.b2 = i;
  }
  g.acc_type = em->t_f32;
  if (tj_kir_gemm_is_int8(k)) {
    g.acc_type = em->t_i32;
    return emit_qgemm(&g);
  }
  // fp8 (issue 17): the same 8-bit main loop on fp8 wgmma, f32 acc.
  if (tj_kir_gemm_is_f8(k)) return emit_qgemm(&g);
  if (k->bq.bits) return emit_wqgemm(&g);
  tj_nvptx_kernel_t* info = nv->info;
  const tj_nvptx_options_t* o = &nv->options;
  bool tc = g.in_dtype != TJ_DTYPE_F32;
  // f32 on TF32 tensor cores: only the TMA schedules, only when allowed.
  bool tf32 = !tc && o->gemm_tma && o->gemm_kernel != TJ_NVPTX_GEMM_MMA_SYNC;
  if (tf32 && !o->gemm_tf32)
    return tj_unsupported(
        "kernel @%s: the TMA gemm of f32 operands runs on TF32 tensor cores, "
        "which allow_tf32 has not allowed",
        k->name);
  int32_t r = g.rank;
  // B along k (x @ w^T, tj_kir_gemm_b_kmajor) or along n: each main loop
  // stores its tile in the layout its instructions read (see the top).
  g.b_kmajor = tj_kir_gemm_b_kmajor(k);
  if ((tc || tf32) &&
      (!tj_kir_ival_is_const(k->buffers[g.a].strides[r - 1], 1) ||
       (!g.b_kmajor &&
        !tj_kir_ival_is_const(k->buffers[g.bb].strides[r - 1], 1))))
    return tj_unsupported(
        "kernel @%s: the tensor-core gemm needs A contiguous along k and B "
        "along n or k (stride 1)",
        k->name);
  if ((unsigned)o->gemm_kernel > TJ_NVPTX_GEMM_WGMMA)
    return tj_invalid("kernel @%s: gemm_kernel %d", k->name,
                      (int)o->gemm_kernel);
  if ((o->gemm_kernel == TJ_NVPTX_GEMM_WGMMA || tf32) &&
      (!(tc || tf32) || nv->arch != TJ_NVPTX_SM_90A))
    return tj_unsupported(
        "kernel @%s: the wgmma gemm needs sm_90a and f16/bf16 operands, or "
        "f32 ones with gemm_tma and gemm_tf32 (here %s, %s)",
        k->name, tj_nvptx_arch_name(nv->arch), tj_dtype_name(g.in_dtype));
  if (tf32) return emit_wgmma_gemm(&g);
  // swiglu (issue 14): only the wgmma main loops compute two products.
  if (g.b2 != TJ_KIR_NONE && (!tc || nv->arch != TJ_NVPTX_SM_90A ||
                              o->gemm_kernel == TJ_NVPTX_GEMM_MMA_SYNC))
    return tj_unsupported(
        "kernel @%s: a dual gemm runs on the wgmma main loops (sm_90a, "
        "f16/bf16 operands); here %s, %s",
        k->name, tj_nvptx_arch_name(nv->arch), tj_dtype_name(g.in_dtype));
  if (tc &&
      (o->gemm_kernel == TJ_NVPTX_GEMM_WGMMA ||
       (o->gemm_kernel == TJ_NVPTX_GEMM_AUTO && nv->arch == TJ_NVPTX_SM_90A)))
    return emit_wgmma_gemm(&g);
  // The CUDA-core loop takes gemm_tile_m 256 (its 256x128 tile) or 128
  // (the default) with gemm_tile_n 128 (or 0); the rest are wgmma's.
  bool wide = !tc && o->gemm_tile_m == kF32WideM &&
              (o->gemm_tile_n == 0 || o->gemm_tile_n == kBN);
  if ((o->gemm_tile_m || o->gemm_tile_n) && !wide &&
      !(!tc && o->gemm_tile_m == kBM &&
        (o->gemm_tile_n == 0 || o->gemm_tile_n == kBN)))
    return tj_invalid(
        "kernel @%s: gemm_tile_m %d, gemm_tile_n %d; the %s gemm takes "
        "%s",
        k->name, (int)o->gemm_tile_m, (int)o->gemm_tile_n,
        tc ? "mma.sync" : "f32",
        tc ? "none (wgmma options)" : "128x128 or 256x128");
  if (o->gemm_wgmma_drain || o->gemm_persistent || o->gemm_tma ||
      o->gemm_pingpong)
    return tj_invalid(
        "kernel @%s: gemm_wgmma_drain, gemm_persistent, gemm_tma and "
        "gemm_pingpong are wgmma options; this gemm is %s",
        k->name, tc ? "mma.sync" : "f32");
  g.tile_m = wide ? kF32WideM : kBM;
  g.tile_n = kBN;
  g.threads = kThreads;
  g.c_stride = kCStride;
  if (tc) {
    g.bk = o->gemm_tile_k ? o->gemm_tile_k : kTcDefaultBK;
    if (g.bk != 32 && g.bk != 64)
      return tj_invalid("kernel @%s: gemm_tile_k %d; 32 or 64 supported",
                        k->name, (int)g.bk);
    g.a_bytes = kBM * g.bk * 2;
    g.stage_bytes = g.a_bytes + g.bk * kBN * 2;
    g.copies = kBM * g.bk / 8 / kThreads;
  } else {
    // The autotuner's mma.sync candidates ask k-tiles of 32 or 64, which
    // the CUDA-core loop reads as its default.
    g.bk = o->gemm_tile_k == 16 ? 16 : kF32DefaultBK;
    g.f32w_at = wide && o->gemm_f32_a_transposed;
    g.a_bytes = !wide       ? g.bk * kF32AStride * 4
                : g.f32w_at ? g.bk * (kF32WideM + 4) * 4
                            : kF32WideM * (g.bk + 4) * 4;
    g.stage_bytes = g.a_bytes + g.bk * kBN * 4;
    g.copies = kBM * g.bk / kThreads;
  }
  int32_t stages = o->gemm_stages ? o->gemm_stages
                   : tc           ? kTcDefaultStages
                                  : kF32Stages;
  if (stages < 2 || stages > 8)
    return tj_invalid("kernel @%s: gemm_stages %d; 2 to 8 supported", k->name,
                      (int)stages);
  info->threads = kThreads;
  info->tensor_cores = tc;
  info->tile_m = g.tile_m;
  info->tile_n = kBN;
  info->tile_k = g.bk;
  info->stages = stages;
  info->group_m = kGroupM;
  info->shared_bytes = max_i32(g.tile_m * kCStride * 4, stages * g.stage_bytes);
  info->vector_lanes = epilogue_lanes(k, r);
  // Two blocks per SM when their shared memory fits two into the 228 KiB
  // of an sm_80/sm_90 SM: 128 registers a thread. The bk = 64 main loop
  // keeps more fragments live and would spill under that cap (ptxas -v:
  // ~100 bytes), so it runs one block per SM.
  info->min_blocks_per_sm =
      info->shared_bytes <= 110 * 1024 && (!tc || g.bk == 32) ? 2 : 0;
  // 256x128: 128 accumulators a thread, one block an SM (255 registers).
  if (wide) info->min_blocks_per_sm = 1;

  LLVMBuilderRef b = g.b;
  g.m = em->dim[r - 2];
  g.n = em->dim[r - 1];
  g.kdim = em->gemm_k;
  g.tid = tj_nvptx_sreg(nv, "tid.x");
  g.smem = tj_nvptx_dynamic_shared(nv);
  g.acc_len = wide ? 128 : 64;
  g.acc =
      tj_emit_alloca(em, LLVMArrayType2(em->t_f32, (unsigned)g.acc_len), "acc");
  for (int32_t i = 0; i < g.acc_len; ++i)
    LLVMBuildStore(b, LLVMConstReal(em->t_f32, 0.0), acc_slot(&g, i));
  tile_origin(&g);
  LLVMValueRef bk = c64(&g, info->tile_k);
  LLVMValueRef k_tiles = LLVMBuildSDiv(
      b, LLVMBuildAdd(b, g.kdim, c64(&g, info->tile_k - 1), ""), bk, "k_tiles");
  LLVMValueRef lane = tj_nvptx_sreg(nv, "laneid");
  LLVMValueRef warp = LLVMBuildLShr(b, g.tid, c32(&g, 5), "warp");
  LLVMValueRef wm = LLVMBuildLShr(b, warp, c32(&g, 2), "wm");
  LLVMValueRef wn = LLVMBuildAnd(b, warp, c32(&g, 3), "wn");
  pipeline_t p = {.stages = info->stages, .k_tiles = k_tiles};
  if (tc) {
    tc_ctx_t c;
    tc_copy_setup(&g, c.a_copy, c.b_copy);
    tc_fragment_offsets(&g, wm, wn, lane, c.a_off, c.b_off);
    p.load = tc_load_cb;
    p.compute = tc_compute_cb;
    p.ctx = &c;
    run_pipeline(&g, &p);
    tc_stage_c(&g, wm, wn, lane);
  } else if (wide) {
    f32w_main_loop(&g, &p);
  } else {
    // The 16-byte copies where this block's operands allow them, else the
    // 4-byte ones; the C tile is the same.
    LLVMValueRef vec = f32_vector_ok(&g);
    if (vec) {
      int32_t a_bytes = g.a_bytes, stage_bytes = g.stage_bytes;
      g.a_bytes = kBM * g.bk * 4;
      g.stage_bytes = g.a_bytes + g.bk * kBN * 4;
      tj_emit_if_t fast;
      tj_emit_if_begin(em, &fast, vec, "f32v");
      f32v_ctx_t cv;
      f32v_setup(&g, &cv);
      pipeline_t pv = p;
      pv.load = f32v_load_cb;
      pv.compute = f32v_compute_cb;
      pv.ctx = &cv;
      run_pipeline(&g, &pv);
      tj_emit_if_end(em, &fast);
      g.a_bytes = a_bytes;
      g.stage_bytes = stage_bytes;
      vec = LLVMBuildNot(b, vec, "");
    }
    tj_emit_if_t slow;
    if (vec) tj_emit_if_begin(em, &slow, vec, "f32s");
    f32_ctx_t c;
    f32_setup(&g, &c);
    p.load = f32_load_cb;
    p.compute = f32_compute_cb;
    p.ctx = &c;
    run_pipeline(&g, &p);
    if (vec) tj_emit_if_end(em, &slow);
    f32_stage_c(&g);
  }
  tj_nvptx_barrier(nv);
  return emit_epilogue(&g);
}

//===--- launch ---===//

tj_status_t tj_nvptx_gemm_launch(const tj_kir_t* k,
                                 const tj_nvptx_kernel_t* info,
                                 const int64_t* scalars, int32_t num_sms,
                                 tj_nvptx_launch_t* out) {
  int32_t r = k->rank;
  int64_t batch = 1;
  for (int32_t d = 0; d < r; ++d) {
    int64_t v = tj_kir_ival_eval(k->dims[d], scalars);
    if (v < 0)
      return tj_invalid("kernel @%s: dim %d is %lld", k->name, (int)d,
                        (long long)v);
    if (d < r - 2 && tj_mul_overflow_i64(batch, v, &batch))
      return tj_invalid("kernel @%s: batch size overflows", k->name);
  }
  int64_t m = tj_kir_ival_eval(k->dims[r - 2], scalars);
  int64_t n = tj_kir_ival_eval(k->dims[r - 1], scalars);
  int64_t kk = tj_kir_ival_eval(k->gemm_k, scalars);
  if (kk < 0)
    return tj_invalid("kernel @%s: k is %lld", k->name, (long long)kk);
  if (batch == 0 || m == 0 || n == 0) {
    out->empty = true;
    return NULL;
  }
  // Clusters: a cluster of info->cluster blocks a tile each (rows apart)
  // per unit of the raster (emit_wgmma_gemm's tile_count).
  int64_t cluster = info->cluster > 1 ? info->cluster : 1;
  int64_t tm = info->tile_m * cluster, tn = info->tile_n;
  int64_t tiles = ((m + tm - 1) / tm) * ((n + tn - 1) / tn);
  // The TMA schedules fold the batch into the tile index
  // (emit_wgmma_gemm): one grid dim over every entry's tiles.
  if (info->tma && tj_mul_overflow_i64(tiles, batch, &tiles))
    return tj_invalid("kernel @%s: tile count overflows", k->name);
  if (info->tma) batch = 1;
  if (tiles > 2147483647 || batch > 65535)
    return tj_unsupported(
        "kernel @%s: %lld tiles x %lld batch entries is "
        "more than one launch covers",
        k->name, (long long)tiles, (long long)batch);
  if (info->tensor_cores) {
    for (uint32_t i = 0; i < k->num_buffers; ++i) {
      const tj_kir_buffer_t* buf = &k->buffers[i];
      if (buf->role != TJ_KIR_GEMM_A && buf->role != TJ_KIR_GEMM_B &&
          buf->role != TJ_KIR_GEMM_B2)
        continue;
      // 16-byte chunks: every row and batch entry starts 16 bytes aligned
      // (8 halves, or 4 f32 for TF32).
      int64_t per = 16 / (int64_t)tj_dtype_size(buf->dtype);
      // 8-bit operands and a K-major B (x @ w^T): contiguous along k or
      // n, whichever is (the other dims are checked, a k-major B's n
      // included).
      bool any = tj_kir_gemm_is_int8(k) || tj_kir_gemm_is_f8(k) ||
                 (buf->role != TJ_KIR_GEMM_A && tj_kir_gemm_b_kmajor(k));
      for (int32_t d = 0; d < (any ? r : r - 1); ++d) {
        int64_t s = tj_kir_ival_eval(buf->strides[d], scalars);
        if (any && tj_kir_ival_is_const(buf->strides[d], 1)) continue;
        if (s % per != 0)
          return tj_unsupported(
              "kernel @%s: tensor-core gemm operand %%%s has stride %lld in "
              "dim %d; it needs multiples of %lld elements (16 bytes)",
              k->name, buf->name, (long long)s, (int)d, (long long)per);
      }
    }
  }
  // Persistent: one block per SM at most, each looping over tiles (or a
  // cluster per |cluster| SMs over pairs of them).
  int64_t units = num_sms / cluster;
  out->grid[0] =
      (uint32_t)(cluster * (info->persistent && units > 0 && tiles > units
                                ? units
                                : tiles));
  out->cluster = (uint32_t)(cluster > 1 ? cluster : 0);
  out->grid[1] = 1;
  // The weight-only GEMM of one row tile: K split in S blocks a tile (grid
  // y), S the fewest of those that take the least waves of the SMs' blocks
  // (one an SM: the kernel holds ~200 registers a thread), each block
  // giving each of its 8 warps two chunks of K or more (a warp's next
  // chunk loads while its current one computes).
  if (info->k_splits > 1 && batch == 1 && m <= tm && num_sms > 0 &&
      !info->persistent) {
    // Tiled (four blocks of 4 warps or two of 8 an SM): one chunk a
    // warp is enough, its loads all issued before its first mma.
    int64_t chunks = (kk + info->tile_k - 1) / info->tile_k;
    int64_t slots =
        num_sms * (info->min_blocks_per_sm > 1 ? info->min_blocks_per_sm : 1);
    int64_t per_block = info->wq_tiled ? info->threads / 32 : 16;
    int64_t best = 1;
    double best_cost = (double)((tiles + slots - 1) / slots);
    for (int64_t s = 2; s <= info->k_splits && s * per_block <= chunks; ++s) {
      double cost = (double)((tiles * s + slots - 1) / slots) / (double)s;
      if (cost < best_cost) {
        best = s;
        best_cost = cost;
      }
    }
    if (info->k_splits_fixed)
      best = info->k_splits * per_block <= chunks ? info->k_splits : 1;
    if (info->wq_cluster && best > 1) {
      // One cluster of |best| blocks a tile, side by side along x.
      out->grid[0] *= (uint32_t)best;
      out->cluster = (uint32_t)best;
    } else {
      out->grid[1] = (uint32_t)best;
    }
  }
  out->grid[2] = (uint32_t)batch;
  out->programmatic = info->wq_programmatic;
  out->block[0] = (uint32_t)info->threads;
  out->block[1] = out->block[2] = 1;
  out->shared_bytes = (uint32_t)info->shared_bytes;
  return NULL;
}

tj_status_t tj_nvptx_gemm_check_pointers(const tj_kir_t* k,
                                         const tj_nvptx_kernel_t* info,
                                         const uint64_t* buffers) {
  // The attention template copies q, k, v (and dL/dy) and stores its
  // output 16 bytes at a time too (emit_nvptx_attention.c); the mask, lse
  // and delta are read, and lse stored, an element at a time.
  if (k->kind == TJ_KIR_ATTENTION) {
    for (uint32_t i = 0; i < k->num_buffers; ++i) {
      const tj_kir_buffer_t* buf = &k->buffers[i];
      const bool by_element =
          buf->role == TJ_KIR_ATTN_MASK || buf->role == TJ_KIR_ATTN_LSE ||
          buf->role == TJ_KIR_ATTN_DELTA || tj_kir_attention_lse_output(k, i);
      if (!by_element && buffers[i] % 16 != 0)
        return tj_unsupported(
            "kernel @%s: attention operand %%%s at 0x%llx is not 16-byte "
            "aligned",
            k->name, buf->name, (unsigned long long)buffers[i]);
    }
    return NULL;
  }
  if (k->kind != TJ_KIR_GEMM || !info->tensor_cores) return NULL;
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    const tj_kir_buffer_t* buf = &k->buffers[i];
    if ((buf->role == TJ_KIR_GEMM_A || buf->role == TJ_KIR_GEMM_B ||
         buf->role == TJ_KIR_GEMM_B2) &&
        buffers[i] % 16 != 0)
      return tj_unsupported(
          "kernel @%s: tensor-core gemm operand %%%s at 0x%llx is not "
          "16-byte aligned",
          k->name, buf->name, (unsigned long long)buffers[i]);
  }
  return NULL;
}
