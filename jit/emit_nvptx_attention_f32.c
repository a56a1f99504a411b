// The ATTENTION template for NVPTX in f32 (issue 14): FlashAttention-2's
// forward on CUDA cores, every product an f32 FFMA (no TF32: an f32 graph
// must not silently lose precision), for head dims D = Dv up to 128 that
// are multiples of 4 (16-byte copies of whole rows).
//
//   grid and block placement: tj_nvptx_fa_block, as the f16/bf16
//     kernel (emit_nvptx_attention.c);
//   block: 128 threads; thread t owns query rows 4 (t / 8) .. + 3 of the
//     64-row tile and, of each tile of bn keys (64, or 32 where 64 would
//     leave one block an SM: d 128), keys t % 8 + 8c (c < bn / 8): the 8
//     lanes of a row group hold a row's bn scores between them;
//   Q tile -> shared memory once; for each K/V tile of bn keys (causal:
//     only tiles left of the block's last row):
//     wait for K_j, barrier; the copy of V_j starts;
//     S = Q . K_j^T: a 4 x bn/8 register tile a thread, 16-byte shared loads
//       along d (Q's the same address across a row group's 8 lanes,
//       a broadcast; K's 8 rows 8 apart, distinct banks since a padded row
//       is an odd number of 16-byte chunks);
//     t = S * scale * log2(e) (+ additive mask * log2(e)), -inf where
//       j >= Tk, causal j > i or the bool mask is false; m' = max(m, rowmax
//       t) over the row group's 8 lanes (shuffles); p = 2^(t - m')
//       (ex2.approx: m' = -inf uses 0, so a row with no key so far keeps
//       p = 0); l = 2^(m - m') l + rowsum p (per lane, summed at the end);
//       O *= 2^(m - m'); P -> shared memory;
//     wait for V_j, barrier; the copy of K_{j+1} starts;
//     O += P . V_j: each thread its 4 rows x its 16-byte chunks t % 8 + 8c
//       of d, P read 4 keys at a time (broadcast), V a chunk at a time;
//   y = O / l (0 where l = 0: every key masked, what the reference gives),
//   stored 16 bytes a thread per row and chunk.
// Why ex2.approx is exact enough: scale * log2(e) is folded into one
// multiplication of each score, so t - m' carries one rounding of t, as
// exp(s - m) would of s; ex2.approx adds 2 ulp. The GPU test holds the
// output to 1e-5 absolute + relative (tests/cuda/cuda_attention_test.c).
//
// Shared memory: Q (64 rows), K and V (bn rows) tiles, rows padded to an
// odd number of 16-byte chunks, then P [64][bn + 4]: 68 KiB at d 64 (3
// blocks an SM on the H200), 75 KiB at d 128 with bn 32 (2 blocks; 116 KiB
// with bn 64).

#include <math.h>
#include <string.h>

#include "jit/emit_nvptx_attention.h"

static LLVMValueRef load_v4(fa_t* f, LLVMValueRef off) {
  LLVMValueRef v = LLVMBuildLoad2(f->b, LLVMVectorType(f->em->t_f32, 4),
                                  smem_at(f, off), "");
  LLVMSetAlignment(v, 16);
  return v;
}

static LLVMValueRef lane_of(fa_t* f, LLVMValueRef v, int32_t i) {
  return LLVMBuildExtractElement(f->b, v, c32(f, i), "");
}

// Starts the copy of rows [r0, r0 + |rows|) of a [rows, d] operand of buffer
// |buf| (row r at |base| + r * |stride| elements; rows >= |limit| are
// zero-filled) into the tile at byte |dst| of shared memory.
static void load_rows(fa_t* f, uint32_t buf, LLVMValueRef base,
                      LLVMValueRef stride, LLVMValueRef r0, int32_t rows,
                      LLVMValueRef limit, int32_t dst) {
  LLVMBuilderRef b = f->b;
  tj_emit_t* em = f->em;
  const int32_t total = rows * f->chunks;
  for (int32_t i = 0; i * kThreads < total; ++i) {
    LLVMValueRef c = LLVMBuildAdd(b, f->tid, c32(f, i * kThreads), "");
    tj_emit_if_t in;
    const bool partial = (i + 1) * kThreads > total;
    if (partial) {
      tj_emit_if_begin(
          em, &in, LLVMBuildICmp(b, LLVMIntULT, c, c32(f, total), ""), "chunk");
    }
    LLVMValueRef row = LLVMBuildUDiv(b, c, c32(f, f->chunks), "");
    LLVMValueRef ch = LLVMBuildURem(b, c, c32(f, f->chunks), "");
    LLVMValueRef gr =
        LLVMBuildAdd(b, r0, LLVMBuildZExt(b, row, em->t_i64, ""), "");
    LLVMValueRef ok = LLVMBuildICmp(b, LLVMIntSLT, gr, limit, "");
    // Rows past the limit read nothing (src-size 0) from row 0.
    LLVMValueRef off = LLVMBuildAdd(
        b, LLVMBuildMul(b, tj_emit_select(em, ok, gr, c64(f, 0)), stride, ""),
        LLVMBuildMul(b, LLVMBuildZExt(b, ch, em->t_i64, ""), c64(f, 4), ""),
        "");
    LLVMValueRef src = LLVMBuildAddrSpaceCast(
        b, tj_emit_advance(em, buf, base, off), f->nv->t_ptr_global, "");
    LLVMValueRef at = LLVMBuildAdd(
        b, c32(f, dst),
        LLVMBuildAdd(b, LLVMBuildMul(b, row, c32(f, f->row_bytes), ""),
                     LLVMBuildShl(b, ch, c32(f, 4), ""), ""),
        "");
    LLVMValueRef args[3] = {smem_at(f, at), src,
                            tj_emit_select(em, ok, c32(f, 16), c32(f, 0))};
    tj_nvptx_call(f->nv, "llvm.nvvm.cp.async.cg.shared.global.16.s", args, 3);
    if (partial) tj_emit_if_end(em, &in);
  }
}

static tj_status_t check_kernel(fa_t* f) {
  const tj_kir_t* k = f->k;
  if (k->buffers[f->qb].dtype != TJ_DTYPE_F32 ||
      k->buffers[f->kb].dtype != TJ_DTYPE_F32 ||
      k->buffers[f->vb].dtype != TJ_DTYPE_F32 ||
      k->buffers[f->ob].dtype != TJ_DTYPE_F32) {
    return tj_unsupported(
        "kernel @%s: CUDA's f32 attention template takes f32 q, k, v and "
        "output",
        k->name);
  }
  const tj_kir_attention_t* at = &k->attention;
  if (at->d.param >= 0 || at->dv.param >= 0 || at->d.value != at->dv.value ||
      at->d.value < 4 || at->d.value > 128 || at->d.value % 4 != 0) {
    return tj_unsupported(
        "kernel @%s: CUDA's f32 attention template takes head dims d = dv "
        "up to 128, multiples of 4 (d %lld, dv %lld)",
        k->name, (long long)at->d.value, (long long)at->dv.value);
  }
  f->d = (int32_t)at->d.value;
  f->chunks = f->d / 4;
  f->slots = (f->chunks + 7) / 8;
  f->row_bytes = (f->chunks | 1) * 16;
  f->tile_bytes = kBM * f->row_bytes;
  // 64-key tiles at d 128 take 116 KiB, one block an SM (4 warps, too few
  // to hide shared-memory latency); 32-key tiles take 75 KiB, two.
  f->bn = 3 * f->tile_bytes + kBM * (64 + 4) * 4 > 112 * 1024 ? 32 : 64;
  f->cols = f->bn / 8;
  f->p_row_bytes = (f->bn + 4) * 4;
  return NULL;
}

tj_status_t tj_nvptx_emit_attention_f32(fa_t* f) {
  tj_nvptx_emit_t* nv = f->nv;
  TJ_RETURN_IF_ERROR(check_kernel(f));
  tj_emit_t* em = f->em;
  LLVMBuilderRef b = f->b;
  const tj_kir_t* k = f->k;
  const int32_t r = k->rank;
  const int32_t mb = f->mb;
  LLVMTypeRef v4 = LLVMVectorType(em->t_f32, 4);
  tj_nvptx_kernel_t* info = nv->info;
  info->threads = kThreads;
  const int32_t kv_bytes = f->bn * f->row_bytes;
  const int32_t sQ = 0, sK = f->tile_bytes, sV = sK + kv_bytes,
                sP = sV + kv_bytes;
  info->shared_bytes = sP + kBM * f->p_row_bytes;
  // Registers for as many blocks as shared memory lets an SM hold.
  info->min_blocks_per_sm = f->chunks <= 16 ? 3 : f->chunks <= 24 ? 2 : 1;
  f->smem = tj_nvptx_dynamic_shared(nv);
  f->tid = tj_nvptx_sreg(nv, "tid.x");
  tj_nvptx_fa_block_t blk;
  tj_nvptx_fa_block(f, kBM, f->bn, &blk);
  LLVMValueRef tq = blk.tq, tk = blk.tk, q0 = blk.q0, ntiles = blk.ntiles;
  const tj_emit_point_t* at = &blk.at;
  LLVMValueRef sq = tj_emit_stride(em, f->qb, r - 2);
  LLVMValueRef sk = tj_emit_stride(em, f->kb, r - 1);
  LLVMValueRef sv = tj_emit_stride(em, f->vb, r - 1);
  LLVMValueRef so = tj_emit_stride(em, f->ob, r - 2);
  LLVMValueRef qbase =
      tj_emit_advance(em, f->qb, at->ptr[f->qb], LLVMBuildMul(b, q0, sq, ""));

  // Q, then K_0 (an empty group when there is no key).
  load_rows(f, f->qb, qbase, sq, c64(f, 0), kBM, LLVMBuildSub(b, tq, q0, ""),
            sQ);
  tj_emit_if_t any;
  tj_emit_if_begin(em, &any,
                   LLVMBuildICmp(b, LLVMIntSGT, ntiles, c64(f, 0), ""), "k0");
  load_rows(f, f->kb, at->ptr[f->kb], sk, c64(f, 0), f->bn, tk, sK);
  tj_emit_if_end(em, &any);
  commit(f);

  LLVMValueRef rg = LLVMBuildLShr(b, f->tid, c32(f, 3), "rg");
  LLVMValueRef cg = LLVMBuildAnd(b, f->tid, c32(f, 7), "cg");
  // Shared offsets of the thread's rows (Q, P) and key rows / chunks (K, V).
  LLVMValueRef qrow[4], prow[4], row_i[4], lim[4], mrow[4] = {0};
  LLVMValueRef ms_j = NULL;
  for (int32_t i = 0; i < 4; ++i) {
    LLVMValueRef rr =
        LLVMBuildAdd(b, LLVMBuildShl(b, rg, c32(f, 2), ""), c32(f, i), "");
    qrow[i] = LLVMBuildAdd(b, c32(f, sQ),
                           LLVMBuildMul(b, rr, c32(f, f->row_bytes), ""), "");
    prow[i] = LLVMBuildAdd(b, c32(f, sP),
                           LLVMBuildMul(b, rr, c32(f, f->p_row_bytes), ""), "");
    row_i[i] = LLVMBuildAdd(b, q0, LLVMBuildZExt(b, rr, em->t_i64, ""), "i");
    lim[i] =
        k->attention.causal
            ? tj_emit_min_i64(em, tk, LLVMBuildAdd(b, row_i[i], c64(f, 1), ""))
            : tk;
    if (mb >= 0) {
      // Rows past Tq read row Tq - 1 (their scores are never stored).
      LLVMValueRef ic =
          tj_emit_min_i64(em, row_i[i], LLVMBuildSub(b, tq, c64(f, 1), ""));
      mrow[i] = tj_emit_advance(
          em, (uint32_t)mb, at->ptr[mb],
          LLVMBuildMul(b, ic, tj_emit_stride(em, (uint32_t)mb, r - 2), ""));
      ms_j = tj_emit_stride(em, (uint32_t)mb, r - 1);
    }
  }
  LLVMValueRef krow[8];
  for (int32_t c = 0; c < f->cols; ++c) {
    krow[c] =
        LLVMBuildAdd(b, c32(f, sK),
                     LLVMBuildMul(b, LLVMBuildAdd(b, cg, c32(f, 8 * c), ""),
                                  c32(f, f->row_bytes), ""),
                     "");
  }
  // Chunk slots of d: chunk cg + 8c, byte offset 16 (cg + 8c).
  LLVMValueRef vch[4];
  for (int32_t c = 0; c < f->slots; ++c)
    vch[c] =
        LLVMBuildShl(b, LLVMBuildAdd(b, cg, c32(f, 8 * c), ""), c32(f, 4), "");

  // Loop-carried state: O (4 rows x slots x 4), m and l for the 4 rows, and
  // the score tile (carried through the d loop).
  LLVMValueRef o_slot[4][4][4], m_slot[4], l_slot[4], s_slot[4][8];
  for (int32_t i = 0; i < 4; ++i) {
    for (int32_t c = 0; c < f->slots; ++c)
      for (int32_t e = 0; e < 4; ++e) {
        o_slot[i][c][e] = tj_emit_alloca(em, em->t_f32, "o");
        LLVMBuildStore(b, cf(f, 0.0), o_slot[i][c][e]);
      }
    for (int32_t c = 0; c < f->cols; ++c)
      s_slot[i][c] = tj_emit_alloca(em, em->t_f32, "s");
    m_slot[i] = tj_emit_alloca(em, em->t_f32, "m");
    l_slot[i] = tj_emit_alloca(em, em->t_f32, "l");
    LLVMBuildStore(b, cf(f, -INFINITY), m_slot[i]);
    LLVMBuildStore(b, cf(f, 0.0), l_slot[i]);
  }
  const double c2 = k->attention.scale * kLog2e;

  tj_emit_loop_t loop;
  LLVMValueRef jt =
      tj_emit_loop_begin(em, &loop, c64(f, 0), ntiles, c64(f, 1), "kv");
  LLVMValueRef j0 = LLVMBuildMul(b, jt, c64(f, f->bn), "j0");
  wait_groups(f, 0);  // K_j
  // Every thread is past P . V_j-1 too: V and P may be overwritten.
  tj_nvptx_barrier(nv);
  load_rows(f, f->vb, at->ptr[f->vb], sv, j0, f->bn, tk, sV);
  commit(f);

  // S = Q . K_j^T along d, 4 elements a step.
  for (int32_t i = 0; i < 4; ++i)
    for (int32_t c = 0; c < f->cols; ++c)
      LLVMBuildStore(b, cf(f, 0.0), s_slot[i][c]);
  {
    tj_emit_loop_t dl;
    LLVMValueRef e4 = tj_emit_loop_begin(em, &dl, c64(f, 0), c64(f, f->chunks),
                                         c64(f, 1), "d");
    LLVMValueRef eoff =
        LLVMBuildShl(b, LLVMBuildTrunc(b, e4, em->t_i32, ""), c32(f, 4), "");
    LLVMValueRef qv[4], kv[8];
    for (int32_t i = 0; i < 4; ++i)
      qv[i] = load_v4(f, LLVMBuildAdd(b, qrow[i], eoff, ""));
    for (int32_t c = 0; c < f->cols; ++c)
      kv[c] = load_v4(f, LLVMBuildAdd(b, krow[c], eoff, ""));
    for (int32_t i = 0; i < 4; ++i)
      for (int32_t c = 0; c < f->cols; ++c) {
        LLVMValueRef acc = load_f32(f, s_slot[i][c]);
        for (int32_t e = 0; e < 4; ++e)
          acc = tj_emit_fmuladd(em, lane_of(f, qv[i], e), lane_of(f, kv[c], e),
                                acc);
        LLVMBuildStore(b, acc, s_slot[i][c]);
      }
    tj_emit_loop_end(em, &dl);
  }

  // Scores in base 2 and the masks.
  LLVMValueRef rel[4];
  for (int32_t i = 0; i < 4; ++i) {
    LLVMValueRef x = LLVMBuildSub(b, lim[i], j0, "");
    x = tj_emit_select(em, LLVMBuildICmp(b, LLVMIntSLT, x, c64(f, 0), ""),
                       c64(f, 0), x);
    x = tj_emit_min_i64(em, x, c64(f, f->bn));
    rel[i] = LLVMBuildTrunc(b, x, em->t_i32, "rel");
  }
  LLVMValueRef tk_1 = LLVMBuildSub(b, tk, c64(f, 1), "");
  LLVMValueRef s[4][8], mx[4];
  for (int32_t i = 0; i < 4; ++i) {
    mx[i] = cf(f, -INFINITY);
    for (int32_t c = 0; c < f->cols; ++c) {
      LLVMValueRef col = LLVMBuildAdd(b, cg, c32(f, 8 * c), "");
      LLVMValueRef ok = LLVMBuildICmp(b, LLVMIntSLT, col, rel[i], "");
      LLVMValueRef x =
          LLVMBuildFMul(b, load_f32(f, s_slot[i][c]), cf(f, c2), "");
      if (mb >= 0) {
        // Keys past Tk read key Tk - 1 (masked anyway).
        LLVMValueRef j = tj_emit_min_i64(
            em, LLVMBuildAdd(b, j0, LLVMBuildZExt(b, col, em->t_i64, ""), ""),
            tk_1);
        tj_emit_point_t pt;
        memset(&pt, 0, sizeof(pt));
        pt.lanes = 1;
        pt.ptr[mb] = tj_emit_advance(em, (uint32_t)mb, mrow[i],
                                     LLVMBuildMul(b, j, ms_j, ""));
        LLVMValueRef mv = tj_emit_load(em, &pt, (uint32_t)mb);
        if (k->buffers[mb].dtype == TJ_DTYPE_BOOL) {
          ok = LLVMBuildAnd(b, ok, mv, "");
        } else {
          x = LLVMBuildFAdd(b, x, LLVMBuildFMul(b, mv, cf(f, kLog2e), ""), "");
        }
      }
      s[i][c] = tj_emit_select(em, ok, x, cf(f, -INFINITY));
      mx[i] = fmax2(f, mx[i], s[i][c]);
    }
  }

  // The online softmax: a row's bn scores lie in its group's 8 lanes.
  for (int32_t i = 0; i < 4; ++i) {
    for (int32_t sh = 1; sh < 8; sh *= 2)
      mx[i] = fmax2(f, mx[i], shfl_xor(f, mx[i], sh));
    LLVMValueRef m_old = load_f32(f, m_slot[i]);
    LLVMValueRef m_new = fmax2(f, m_old, mx[i]);
    LLVMBuildStore(b, m_new, m_slot[i]);
    LLVMValueRef m_use = tj_emit_select(
        em, LLVMBuildFCmp(b, LLVMRealOEQ, m_new, cf(f, -INFINITY), ""),
        cf(f, 0.0), m_new);
    LLVMValueRef d_old = LLVMBuildFSub(b, m_old, m_use, "");
    LLVMValueRef alpha = ex2(f, d_old);
    LLVMValueRef sum = cf(f, 0.0);
    for (int32_t c = 0; c < f->cols; ++c) {
      LLVMValueRef t = LLVMBuildFSub(b, s[i][c], m_use, "");
      LLVMValueRef p = ex2(f, t);
      sum = LLVMBuildFAdd(b, sum, p, "");
      LLVMValueRef off =
          LLVMBuildAdd(b, prow[i],
                       LLVMBuildShl(b, LLVMBuildAdd(b, cg, c32(f, 8 * c), ""),
                                    c32(f, 2), ""),
                       "");
      LLVMSetAlignment(LLVMBuildStore(b, p, smem_at(f, off)), 4);
    }
    LLVMBuildStore(
        b,
        LLVMBuildFAdd(b, LLVMBuildFMul(b, load_f32(f, l_slot[i]), alpha, ""),
                      sum, ""),
        l_slot[i]);
    for (int32_t c = 0; c < f->slots; ++c)
      for (int32_t e = 0; e < 4; ++e)
        LLVMBuildStore(
            b, LLVMBuildFMul(b, load_f32(f, o_slot[i][c][e]), alpha, ""),
            o_slot[i][c][e]);
  }

  wait_groups(f, 0);  // V_j
  // P is whole and every thread is done with K_j: K_j+1 may land.
  tj_nvptx_barrier(nv);
  LLVMValueRef jn = LLVMBuildAdd(b, jt, c64(f, 1), "");
  tj_emit_if_t next;
  tj_emit_if_begin(em, &next, LLVMBuildICmp(b, LLVMIntSLT, jn, ntiles, ""),
                   "knext");
  load_rows(f, f->kb, at->ptr[f->kb], sk,
            LLVMBuildMul(b, jn, c64(f, f->bn), ""), f->bn, tk, sK);
  tj_emit_if_end(em, &next);
  commit(f);

  // O += P . V_j, 4 keys a step.
  {
    tj_emit_loop_t jl;
    LLVMValueRef j4 = tj_emit_loop_begin(em, &jl, c64(f, 0), c64(f, f->bn / 4),
                                         c64(f, 1), "j");
    LLVMValueRef j4i = LLVMBuildTrunc(b, j4, em->t_i32, "");
    LLVMValueRef pv[4];
    for (int32_t i = 0; i < 4; ++i)
      pv[i] = load_v4(
          f, LLVMBuildAdd(b, prow[i], LLVMBuildShl(b, j4i, c32(f, 4), ""), ""));
    LLVMValueRef o[4][4][4];
    for (int32_t i = 0; i < 4; ++i)
      for (int32_t c = 0; c < f->slots; ++c)
        for (int32_t e = 0; e < 4; ++e)
          o[i][c][e] = load_f32(f, o_slot[i][c][e]);
    for (int32_t kk = 0; kk < 4; ++kk) {
      LLVMValueRef vrow = LLVMBuildAdd(
          b, c32(f, sV),
          LLVMBuildMul(b,
                       LLVMBuildAdd(b, LLVMBuildShl(b, j4i, c32(f, 2), ""),
                                    c32(f, kk), ""),
                       c32(f, f->row_bytes), ""),
          "");
      for (int32_t c = 0; c < f->slots; ++c) {
        // A slot past d reads the padding or the next row: its sums are
        // never stored.
        LLVMValueRef vv = load_v4(f, LLVMBuildAdd(b, vrow, vch[c], ""));
        for (int32_t i = 0; i < 4; ++i) {
          LLVMValueRef p = lane_of(f, pv[i], kk);
          for (int32_t e = 0; e < 4; ++e)
            o[i][c][e] = tj_emit_fmuladd(em, p, lane_of(f, vv, e), o[i][c][e]);
        }
      }
    }
    for (int32_t i = 0; i < 4; ++i)
      for (int32_t c = 0; c < f->slots; ++c)
        for (int32_t e = 0; e < 4; ++e)
          LLVMBuildStore(b, o[i][c][e], o_slot[i][c][e]);
    tj_emit_loop_end(em, &jl);
  }
  tj_emit_loop_end(em, &loop);
  // With no key tile, Q's copies are still in flight: none may outlive the
  // block's shared memory.
  wait_groups(f, 0);

  // y = O / l, each row's chunks stored 16 bytes at a time.
  LLVMValueRef obase = at->ptr[f->ob];
  for (int32_t i = 0; i < 4; ++i) {
    LLVMValueRef l = load_f32(f, l_slot[i]);
    for (int32_t sh = 1; sh < 8; sh *= 2)
      l = LLVMBuildFAdd(b, l, shfl_xor(f, l, sh), "");
    LLVMValueRef inv =
        tj_emit_select(em, LLVMBuildFCmp(b, LLVMRealOGT, l, cf(f, 0), ""),
                       LLVMBuildFDiv(b, cf(f, 1.0), l, ""), cf(f, 0.0));
    tj_emit_if_t in;
    tj_emit_if_begin(em, &in, LLVMBuildICmp(b, LLVMIntSLT, row_i[i], tq, ""),
                     "st");
    LLVMValueRef orow =
        tj_emit_advance(em, f->ob, obase, LLVMBuildMul(b, row_i[i], so, ""));
    for (int32_t c = 0; c < f->slots; ++c) {
      LLVMValueRef ch = LLVMBuildAdd(b, cg, c32(f, 8 * c), "");
      tj_emit_if_t has;
      const bool partial = 8 * (c + 1) > f->chunks;
      if (partial) {
        tj_emit_if_begin(
            em, &has, LLVMBuildICmp(b, LLVMIntULT, ch, c32(f, f->chunks), ""),
            "ch");
      }
      LLVMValueRef v = LLVMGetUndef(v4);
      for (int32_t e = 0; e < 4; ++e)
        v = LLVMBuildInsertElement(
            b, v, LLVMBuildFMul(b, load_f32(f, o_slot[i][c][e]), inv, ""),
            c32(f, e), "");
      LLVMValueRef dst = tj_emit_advance(
          em, f->ob, orow,
          LLVMBuildMul(b, LLVMBuildZExt(b, ch, em->t_i64, ""), c64(f, 4), ""));
      LLVMSetAlignment(LLVMBuildStore(b, v, dst), 16);
      if (partial) tj_emit_if_end(em, &has);
    }
    tj_emit_if_end(em, &in);
  }
  return NULL;
}
