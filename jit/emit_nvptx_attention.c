// The ATTENTION template for NVPTX (issue 14): FlashAttention-2's forward
// with tensor cores, for f16/bf16 q, k, v and head dims 64 and 128 (the
// CUDA backend keeps the attention op whole only then: cuda_native_op in
// backends/cuda/cuda_backend.c; anything else is UNSUPPORTED here). On
// sm_90a the forward and attention_lse without a mask operand run on
// wgmma instead (emit_nvptx_attention_wgmma.c, 1.4-1.9x this kernel on
// the H200), unless TJ_NVPTX_ATTENTION=mma asks for this one.
//
//   grid: one block per (query tile of 64 rows, batch.. x kv head x group
//     member), the tiles of one head walking from the last one down, so
//     that causal attention starts its longest blocks first;
//   block: 4 warps, warp w owning query rows 16w .. 16w + 15 of the tile;
//   Q tile -> shared memory (cp.async, 16 bytes a copy, rows past Tq
//     zero-filled) -> A fragments in registers (ldmatrix), once;
//   for each K/V tile of 64 keys (causal: only tiles left of the block's
//     last row; tiles past the diagonal are never loaded):
//     wait for K_j; the copies of V_j and K_{j+1} (into the other K
//       buffer) start;
//     S = Q . K_j^T: mma.sync m16n8k16 (f32 accumulators), K fragments by
//       ldmatrix from K's rows (they are the "col" B operand as stored);
//     in registers: t = S * scale * log2(e) (+ additive mask * log2(e)),
//       -inf where j >= Tk, causal j > i, or the bool mask is false (tiles
//       that need no mask skip the compares, a uniform branch);
//       m' = max(m, rowmax t) over the quad's 4 lanes; p = 2^(t - m')
//       (ex2.approx; m' = -inf uses 0, so a row with no key so far keeps
//       p = 0); l = 2^(m - m') l + rowsum p; O *= 2^(m - m');
//     wait for V_j;
//     O += P . V_j: P rounded to the input dtype is already the A fragment
//       of the next mma (a C fragment's layout), V fragments by
//       ldmatrix.trans;
//   y = O / l (0 where l = 0: every key masked, what the reference gives),
//   rounded, staged in the warp's own rows of the Q tile and stored 16
//   bytes a lane.
// Two K buffers and one V buffer suffice: each copy starts after the
// barrier that every warp passes once done with the buffer's previous
// tile; K_{j+1} loads under the whole of step j, V_j under Q.K_j and the
// softmax. Shared tiles are XOR-swizzled by 16-byte chunk (chunk c of row
// r at c ^ (r & 7)), so that the 8 rows an ldmatrix phase reads hit
// distinct banks.
//
// Strides along the batch, head and T dims come from the kernel IR (any
// symbolic sizes are read at run time); the launch checks that they are
// multiples of 8 elements and the buffers 16-byte aligned, as the 16-byte
// copies need (tj_nvptx_gemm_check_pointers).

#include <math.h>
#include <string.h>

#include "jit/emit_nvptx_attention.h"

tj_status_t tj_nvptx_fa_buffers(fa_t* f) {
  const tj_kir_t* k = f->k;
  f->mb = -1;
  f->lob = -1;
  f->op = k->attention.op;
  const bool bwd =
      f->op == TJ_KIR_ATTENTION_DQ || f->op == TJ_KIR_ATTENTION_DKV;
  int found = 0;
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    switch (k->buffers[i].role) {
      case TJ_KIR_ATTN_Q:
        f->qb = i, found |= 1;
        break;
      case TJ_KIR_ATTN_K:
        f->kb = i, found |= 2;
        break;
      case TJ_KIR_ATTN_V:
        f->vb = i, found |= 4;
        break;
      case TJ_KIR_OUTPUT:
        // The forward with_lse writes y, then lse.
        if (found & 8) {
          if (f->lob >= 0 || !k->attention.with_lse)
            return tj_invalid("kernel @%s: a second output %%%s", k->name,
                              k->buffers[i].name);
          f->lob = (int32_t)i;
        } else {
          f->ob = i, found |= 8;
        }
        break;
      case TJ_KIR_ATTN_MASK:
        f->mb = (int32_t)i;
        break;
      case TJ_KIR_ATTN_DO:
        f->dob = i, found |= 16;
        break;
      case TJ_KIR_ATTN_LSE:
        f->lseb = i, found |= 32;
        break;
      case TJ_KIR_ATTN_DELTA:
        f->deltab = i, found |= 64;
        break;
      default:
        return tj_invalid("kernel @%s: buffer %%%s has no attention role",
                          k->name, k->buffers[i].name);
    }
  }
  const int want = f->op == TJ_KIR_ATTENTION_LSE ? 11 : bwd ? 127 : 15;
  if (found != want || k->rank < 4 || k->attention.with_lse != (f->lob >= 0))
    return tj_invalid("kernel @%s: not an attention kernel", k->name);
  if (f->op == TJ_KIR_ATTENTION_LSE) f->vb = f->kb;  // no v: checks pass
  tj_dtype_t dt = k->buffers[f->qb].dtype;
  if (f->mb >= 0 && k->buffers[f->mb].dtype != TJ_DTYPE_BOOL &&
      k->buffers[f->mb].dtype != dt) {
    return tj_invalid("kernel @%s: a %s mask for %s attention", k->name,
                      tj_dtype_name(k->buffers[f->mb].dtype),
                      tj_dtype_name(dt));
  }
  return NULL;
}

tj_status_t tj_nvptx_fa_check_kernel(fa_t* f) {
  TJ_RETURN_IF_ERROR(tj_nvptx_fa_buffers(f));
  const tj_kir_t* k = f->k;
  const bool bwd =
      f->op == TJ_KIR_ATTENTION_DQ || f->op == TJ_KIR_ATTENTION_DKV;
  tj_dtype_t dt = k->buffers[f->qb].dtype;
  const tj_dtype_t odt = f->op == TJ_KIR_ATTENTION_LSE ? TJ_DTYPE_F32 : dt;
  if ((dt != TJ_DTYPE_F16 && dt != TJ_DTYPE_BF16) ||
      k->buffers[f->kb].dtype != dt || k->buffers[f->vb].dtype != dt ||
      k->buffers[f->ob].dtype != odt ||
      (f->lob >= 0 && k->buffers[f->lob].dtype != TJ_DTYPE_F32) ||
      (bwd && (k->buffers[f->dob].dtype != dt ||
               k->buffers[f->lseb].dtype != TJ_DTYPE_F32 ||
               k->buffers[f->deltab].dtype != TJ_DTYPE_F32))) {
    return tj_unsupported(
        "kernel @%s: CUDA's attention template takes f16 or bf16 q, k, v "
        "(q is %s)",
        k->name, tj_dtype_name(dt));
  }
  if (bwd && f->mb >= 0) {
    return tj_unsupported(
        "kernel @%s: CUDA's attention backward takes no mask but causal",
        k->name);
  }
  const tj_kir_attention_t* a = &k->attention;
  if (a->d.param >= 0 || a->dv.param >= 0 || a->d.value != a->dv.value ||
      (a->d.value != 64 && a->d.value != 128)) {
    return tj_unsupported(
        "kernel @%s: CUDA's attention template takes head dims 64 and 128 "
        "(d %lld, dv %lld)",
        k->name, (long long)a->d.value, (long long)a->dv.value);
  }
  f->f16 = dt == TJ_DTYPE_F16;
  f->d = (int32_t)a->d.value;
  f->chunks = f->d / 8;
  f->row_bytes = f->d * 2;
  f->tile_bytes = kBM * f->row_bytes;
  return NULL;
}

void tj_nvptx_fa_block(fa_t* f, int64_t rows_per_block, int64_t keys_per_tile,
                       tj_nvptx_fa_block_t* out) {
  tj_emit_t* em = f->em;
  LLVMBuilderRef b = f->b;
  const int32_t r = f->k->rank;
  out->tq = em->dim[r - 2];
  out->tk = em->dim[r - 1];
  // The block's head (outer index) and query tile, last tiles first.
  LLVMValueRef outer = c64(f, 1);
  for (int32_t i = 0; i + 2 < r; ++i)
    outer = LLVMBuildMul(b, outer, em->dim[i], "");
  LLVMValueRef qtiles =
      LLVMBuildSDiv(b, LLVMBuildAdd(b, out->tq, c64(f, rows_per_block - 1), ""),
                    c64(f, rows_per_block), "qtiles");
  LLVMValueRef pid = tj_nvptx_sreg64(f->nv, "ctaid.x");
  LLVMValueRef head = LLVMBuildURem(b, pid, outer, "head");
  LLVMValueRef qt = LLVMBuildSub(b, LLVMBuildSub(b, qtiles, c64(f, 1), ""),
                                 LLVMBuildUDiv(b, pid, outer, ""), "qt");
  out->q0 = LLVMBuildMul(b, qt, c64(f, rows_per_block), "q0");
  memset(&out->at, 0, sizeof(out->at));
  out->at.lanes = 1;
  tj_emit_decompose(em, head, r - 2, &out->at);
  // Keys the block reads: causal rows end at q0 + rows_per_block - 1.
  LLVMValueRef kend = out->tk;
  if (f->k->attention.causal) {
    kend = tj_emit_min_i64(
        em, out->tk, LLVMBuildAdd(b, out->q0, c64(f, rows_per_block), ""));
  }
  out->ntiles =
      LLVMBuildSDiv(b, LLVMBuildAdd(b, kend, c64(f, keys_per_tile - 1), ""),
                    c64(f, keys_per_tile), "ntiles");
}

void tj_nvptx_fa_dkv_setup(fa_t* f, int64_t keys_per_block,
                           tj_nvptx_fa_dkv_t* out) {
  tj_emit_t* em = f->em;
  LLVMBuilderRef b = f->b;
  const int32_t r = f->k->rank;
  memset(out, 0, sizeof(*out));
  out->tq = em->dim[r - 2];
  out->tk = em->dim[r - 1];
  out->group = em->dim[r - 3];
  LLVMValueRef outer = c64(f, 1);
  for (int32_t i = 0; i + 3 < r; ++i)
    outer = LLVMBuildMul(b, outer, em->dim[i], "");
  LLVMValueRef pid = tj_nvptx_sreg64(f->nv, "ctaid.x");
  LLVMValueRef head = LLVMBuildURem(b, pid, outer, "head");
  out->kt = LLVMBuildUDiv(b, pid, outer, "kt");
  out->k0 = LLVMBuildMul(b, out->kt, c64(f, keys_per_block), "k0");
  out->at.lanes = 1;
  tj_emit_decompose(em, head, r - 3, &out->at);
  out->sk = tj_emit_stride(em, f->kb, r - 1);
  out->sv = tj_emit_stride(em, f->vb, r - 1);
  out->so = tj_emit_stride(em, f->ob, r - 1);
  out->sqg = tj_emit_stride(em, f->qb, r - 3);
  out->sdog = tj_emit_stride(em, f->dob, r - 3);
  out->slg = tj_emit_stride(em, f->lseb, r - 3);
  out->sdlg = tj_emit_stride(em, f->deltab, r - 3);
  out->sq = tj_emit_stride(em, f->qb, r - 2);
  out->sdo = tj_emit_stride(em, f->dob, r - 2);
  out->sl = tj_emit_stride(em, f->lseb, r - 2);
  out->sdl = tj_emit_stride(em, f->deltab, r - 2);
}

tj_status_t tj_nvptx_fa_store_lse(fa_t* f, uint32_t buf, LLVMValueRef obase,
                                  LLVMValueRef so, LLVMValueRef* row_i,
                                  LLVMValueRef tq, LLVMValueRef* m_slot,
                                  LLVMValueRef* l_slot) {
  LLVMBuilderRef b = f->b;
  tj_emit_t* em = f->em;
  LLVMValueRef lead = LLVMBuildICmp(
      b, LLVMIntEQ, LLVMBuildAnd(b, f->lane, c32(f, 3), ""), c32(f, 0), "");
  for (int32_t h = 0; h < 2; ++h) {
    LLVMValueRef l = load_f32(f, l_slot[h]);
    l = LLVMBuildFAdd(b, l, shfl_xor(f, l, 1), "");
    l = LLVMBuildFAdd(b, l, shfl_xor(f, l, 2), "");
    LLVMValueRef lg = intrinsic(f, "llvm.nvvm.lg2.approx.f", &l, 1);
    LLVMValueRef v =
        LLVMBuildFMul(b, LLVMBuildFAdd(b, load_f32(f, m_slot[h]), lg, ""),
                      cf(f, 0.69314718055994531), "");
    v = tj_emit_select(em, LLVMBuildFCmp(b, LLVMRealOGT, l, cf(f, 0), ""), v,
                       cf(f, -INFINITY));
    tj_emit_if_t in;
    tj_emit_if_begin(
        em, &in,
        LLVMBuildAnd(b, lead, LLVMBuildICmp(b, LLVMIntSLT, row_i[h], tq, ""),
                     ""),
        "lse");
    LLVMValueRef dst =
        tj_emit_advance(em, buf, obase, LLVMBuildMul(b, row_i[h], so, ""));
    LLVMBuildStore(b, v, dst);
    tj_emit_if_end(em, &in);
  }
  return NULL;
}

tj_status_t tj_nvptx_emit_attention(tj_nvptx_emit_t* nv) {
  fa_t fa;
  memset(&fa, 0, sizeof(fa));
  fa_t* f = &fa;
  f->nv = nv;
  f->em = &nv->em;
  f->b = nv->em.b;
  f->k = nv->em.k;
  // f32 has its own forward kernel (FFMA tiles: f32 has no exact
  // tensor-core path).
  TJ_RETURN_IF_ERROR(tj_nvptx_fa_buffers(f));
  if (f->op == TJ_KIR_ATTENTION_FORWARD &&
      f->k->buffers[f->qb].dtype == TJ_DTYPE_F32) {
    // f32's attention_lse decomposes (cuda_native_op), so fuse never
    // gives this kernel an lse to write.
    if (f->lob >= 0)
      return tj_unsupported("kernel @%s: the f32 attention writes no lse",
                            f->k->name);
    return tj_nvptx_emit_attention_f32(f);
  }
  TJ_RETURN_IF_ERROR(tj_nvptx_fa_check_kernel(f));
  // The backward on wgmma (fa3bwd) on sm_90a unless mma.sync is asked for
  // (TJ_NVPTX_ATTENTION=mma: FlashAttention-2's kernels; on the H200 the
  // step with wgmma's ran 1.07-1.46x as fast, bench/RESULTS.md).
  if (nv->arch == TJ_NVPTX_SM_90A &&
      nv->options.attention_kernel != TJ_NVPTX_ATTENTION_MMA_SYNC) {
    if (f->op == TJ_KIR_ATTENTION_DKV)
      return tj_nvptx_emit_attention_dkv_wgmma(f);
    if (f->op == TJ_KIR_ATTENTION_DQ)
      return tj_nvptx_emit_attention_dq_wgmma(f);
  }
  if (f->op == TJ_KIR_ATTENTION_DQ || f->op == TJ_KIR_ATTENTION_DKV)
    return tj_nvptx_emit_attention_bwd(f);
  // wgmma where it applies, unless mma.sync is asked for
  // (TJ_NVPTX_ATTENTION=mma): on sm_90a, without a mask operand;
  // elsewhere this kernel.
  if (nv->options.attention_kernel != TJ_NVPTX_ATTENTION_MMA_SYNC &&
      nv->arch == TJ_NVPTX_SM_90A && f->mb < 0)
    return tj_nvptx_emit_attention_wgmma(f);
  // attention_lse (fabwdcuda): the same loop without V, writing the row's
  // log-sum-exp instead of y.
  const bool lse = f->op == TJ_KIR_ATTENTION_LSE;
  tj_emit_t* em = f->em;
  LLVMBuilderRef b = f->b;
  const tj_kir_t* k = f->k;
  const int32_t r = k->rank;
  const int32_t d = f->d;
  tj_nvptx_kernel_t* info = nv->info;
  info->threads = kThreads;
  info->shared_bytes = (lse ? 3 : 4) * f->tile_bytes;  // lse: no V tile
  // Registers for 3 blocks an SM at d 64 (168 a thread; the 128 that 4
  // blocks leave spilled), 2 at d 128 (255, no spill).
  info->min_blocks_per_sm = d == 64 ? 3 : 2;
  f->smem = tj_nvptx_dynamic_shared(nv);
  f->tid = tj_nvptx_sreg(nv, "tid.x");
  f->lane = LLVMBuildAnd(b, f->tid, c32(f, 31), "lane");
  f->warp = LLVMBuildLShr(b, f->tid, c32(f, 5), "warp");
  tj_nvptx_fa_block_t blk;
  tj_nvptx_fa_block(f, kBM, kBN, &blk);
  LLVMValueRef tq = blk.tq, tk = blk.tk, q0 = blk.q0, ntiles = blk.ntiles;
  const tj_emit_point_t at = blk.at;
  LLVMValueRef sq = tj_emit_stride(em, f->qb, r - 2);
  LLVMValueRef sk = tj_emit_stride(em, f->kb, r - 1);
  LLVMValueRef sv = tj_emit_stride(em, f->vb, r - 1);
  LLVMValueRef so = tj_emit_stride(em, f->ob, r - 2);
  LLVMValueRef qbase =
      tj_emit_advance(em, f->qb, at.ptr[f->qb], LLVMBuildMul(b, q0, sq, ""));

  // Q, two K tiles (K_j+1 loads while K_j is read), V.
  const int32_t sQ = 0, sK = f->tile_bytes, sV = 3 * f->tile_bytes;

  // Q, then K_0 (an empty group when there is no key).
  load_tile(f, f->qb, qbase, sq, c64(f, 0), LLVMBuildSub(b, tq, q0, ""), sQ);
  commit(f);
  tj_emit_if_t any;
  tj_emit_if_begin(em, &any,
                   LLVMBuildICmp(b, LLVMIntSGT, ntiles, c64(f, 0), ""), "k0");
  load_tile(f, f->kb, at.ptr[f->kb], sk, c64(f, 0), tk, sK);
  tj_emit_if_end(em, &any);
  commit(f);
  wait_groups(f, 1);
  tj_nvptx_barrier(nv);

  // This lane's ldmatrix rows: the swizzle key of every row it addresses is
  // lane & 7 (tiles of 8 rows), so a chunk's offset is row * row_bytes +
  // ((ch ^ (lane & 7)) << 4).
  LLVMValueRef l7 = LLVMBuildAnd(b, f->lane, c32(f, 7), "");
  LLVMValueRef l15 = LLVMBuildAnd(b, f->lane, c32(f, 15), "");
  LLVMValueRef l16 = LLVMBuildLShr(b, f->lane, c32(f, 4), "");  // 0, 1
  LLVMValueRef l8 =
      LLVMBuildAnd(b, LLVMBuildLShr(b, f->lane, c32(f, 3), ""), c32(f, 1), "");
  LLVMValueRef wrow = LLVMBuildMul(b, f->warp, c32(f, 16), "");
  // Q: matrices (rows 0-7, k lo), (rows 8-15, k lo), (0-7, hi), (8-15, hi).
  LLVMValueRef qf[8][4];
  for (int32_t kk = 0; kk < d / 16; ++kk) {
    LLVMValueRef row = LLVMBuildAdd(b, wrow, l15, "");
    LLVMValueRef ch = LLVMBuildAdd(b, c32(f, 2 * kk), l16, "");
    ldmatrix(f, false, LLVMBuildAdd(b, c32(f, sQ), swizzled(f, row, ch), ""),
             qf[kk]);
  }
  // K: (keys 0-7, k lo), (0-7, k hi), (8-15, lo), (8-15, hi) of a pair of
  // n-blocks; V (.trans): (keys 0-7, d lo), (8-15, d lo), (0-7, hi),
  // (8-15, hi) of a pair of d-blocks.
  LLVMValueRef krow = LLVMBuildAdd(b, LLVMBuildShl(b, l16, c32(f, 3), ""), l7,
                                   "");  // + 16 np
  LLVMValueRef vrow = LLVMBuildAdd(b, LLVMBuildShl(b, l8, c32(f, 3), ""), l7,
                                   "");  // + 16 kk
  LLVMValueRef kch = l8;                 // + 2 kk
  LLVMValueRef vch = l16;                // + 2 np

  // Per thread: rows g and g + 8 of the warp's 16 (C fragment rows), columns
  // 2t, 2t + 1 of each 8-column block.
  LLVMValueRef g = LLVMBuildLShr(b, f->lane, c32(f, 2), "g");
  LLVMValueRef t2 =
      LLVMBuildShl(b, LLVMBuildAnd(b, f->lane, c32(f, 3), ""), c32(f, 1), "");
  LLVMValueRef row_i[2], lim[2], mrow[2] = {NULL, NULL};
  LLVMValueRef ms_j = NULL;
  for (int32_t h = 0; h < 2; ++h) {
    LLVMValueRef rr =
        LLVMBuildAdd(b, wrow, LLVMBuildAdd(b, g, c32(f, 8 * h), ""), "");
    row_i[h] = LLVMBuildAdd(b, q0, LLVMBuildZExt(b, rr, em->t_i64, ""), "i");
    lim[h] =
        k->attention.causal
            ? tj_emit_min_i64(em, tk, LLVMBuildAdd(b, row_i[h], c64(f, 1), ""))
            : tk;
    if (f->mb >= 0) {
      // Rows past Tq read row Tq - 1 (their scores are never stored).
      LLVMValueRef ic =
          tj_emit_min_i64(em, row_i[h], LLVMBuildSub(b, tq, c64(f, 1), ""));
      mrow[h] = tj_emit_advance(
          em, (uint32_t)f->mb, at.ptr[f->mb],
          LLVMBuildMul(b, ic, tj_emit_stride(em, (uint32_t)f->mb, r - 2), ""));
      ms_j = tj_emit_stride(em, (uint32_t)f->mb, r - 1);
    }
  }

  // The keys every row of the block may see: tiles below it need no mask.
  LLVMValueRef lim_lo =
      k->attention.causal
          ? tj_emit_min_i64(em, tk, LLVMBuildAdd(b, q0, c64(f, 1), ""))
          : tk;

  // Loop-carried state: O (d/8 blocks x 4), m and l for the two rows.
  const int32_t nd = lse ? 0 : d / 8;
  LLVMValueRef o_slot[16][4], m_slot[2], l_slot[2];
  for (int32_t j = 0; j < nd; ++j)
    for (int32_t e = 0; e < 4; ++e) {
      o_slot[j][e] = tj_emit_alloca(em, em->t_f32, "o");
      LLVMBuildStore(b, cf(f, 0.0), o_slot[j][e]);
    }
  for (int32_t h = 0; h < 2; ++h) {
    m_slot[h] = tj_emit_alloca(em, em->t_f32, "m");
    l_slot[h] = tj_emit_alloca(em, em->t_f32, "l");
    LLVMBuildStore(b, cf(f, -INFINITY), m_slot[h]);
    LLVMBuildStore(b, cf(f, 0.0), l_slot[h]);
  }
  const double c2 = k->attention.scale * kLog2e;

  tj_emit_loop_t loop;
  LLVMValueRef jt =
      tj_emit_loop_begin(em, &loop, c64(f, 0), ntiles, c64(f, 1), "kv");
  LLVMValueRef j0 = LLVMBuildMul(b, jt, c64(f, kBN), "j0");
  wait_groups(f, 0);  // K_j
  tj_nvptx_barrier(nv);
  // Every warp is past P.V_j-1 and Q.K_j-1: V_j and K_j+1 may land.
  if (!lse) load_tile(f, f->vb, at.ptr[f->vb], sv, j0, tk, sV);
  commit(f);
  LLVMValueRef jn = LLVMBuildAdd(b, jt, c64(f, 1), "");
  LLVMValueRef kcur = LLVMBuildAdd(
      b, c32(f, sK),
      LLVMBuildMul(
          b,
          LLVMBuildTrunc(b, LLVMBuildAnd(b, jt, c64(f, 1), ""), em->t_i32, ""),
          c32(f, f->tile_bytes), ""),
      "kcur");
  LLVMValueRef knext = LLVMBuildSub(b, c32(f, 3 * f->tile_bytes), kcur,
                                    "knext");  // the other K tile
  tj_emit_if_t next;
  tj_emit_if_begin(em, &next, LLVMBuildICmp(b, LLVMIntSLT, jn, ntiles, ""),
                   "knext");
  load_tile_at(f, f->kb, at.ptr[f->kb], sk,
               LLVMBuildMul(b, jn, c64(f, kBN), ""), tk, knext);
  tj_emit_if_end(em, &next);
  commit(f);

  // S = Q . K^T: 8 n-blocks of 8 keys, 4 accumulators each.
  LLVMValueRef s[8][4];
  for (int32_t n = 0; n < 8; ++n)
    for (int32_t e = 0; e < 4; ++e) s[n][e] = cf(f, 0.0);
  for (int32_t kk = 0; kk < d / 16; ++kk) {
    for (int32_t np = 0; np < 4; ++np) {
      LLVMValueRef row = LLVMBuildAdd(b, krow, c32(f, 16 * np), "");
      LLVMValueRef ch = LLVMBuildAdd(b, kch, c32(f, 2 * kk), "");
      LLVMValueRef kf[4];
      ldmatrix(f, false, LLVMBuildAdd(b, kcur, swizzled(f, row, ch), ""), kf);
      mma(f, qf[kk], &kf[0], s[2 * np]);
      mma(f, qf[kk], &kf[2], s[2 * np + 1]);
    }
  }

  // Scores in base 2, then the masks: only tiles that reach past Tk or
  // (causal) past the block's first row, or every tile with a mask
  // operand; the others skip the compares (a uniform branch).
  for (int32_t n = 0; n < 8; ++n)
    for (int32_t e = 0; e < 4; ++e)
      s[n][e] = LLVMBuildFMul(b, s[n][e], cf(f, c2), "");
  LLVMBasicBlockRef unmasked = LLVMGetInsertBlock(b);
  tj_emit_if_t masked;
  if (f->mb < 0) {
    tj_emit_if_begin(
        em, &masked,
        LLVMBuildICmp(b, LLVMIntSGT, LLVMBuildAdd(b, j0, c64(f, kBN), ""),
                      lim_lo, ""),
        "mask");
  }
  LLVMValueRef rel[2];
  for (int32_t h = 0; h < 2; ++h) {
    LLVMValueRef x = LLVMBuildSub(b, lim[h], j0, "");
    x = tj_emit_select(em, LLVMBuildICmp(b, LLVMIntSLT, x, c64(f, 0), ""),
                       c64(f, 0), x);
    x = tj_emit_min_i64(em, x, c64(f, kBN));
    rel[h] = LLVMBuildTrunc(b, x, em->t_i32, "rel");
  }
  LLVMValueRef tk_1 = LLVMBuildSub(b, tk, c64(f, 1), "");
  LLVMValueRef sm[8][4];
  for (int32_t n = 0; n < 8; ++n) {
    for (int32_t e = 0; e < 4; ++e) {
      const int32_t h = e / 2;
      LLVMValueRef col = LLVMBuildAdd(b, t2, c32(f, 8 * n + (e & 1)), "");
      LLVMValueRef ok = LLVMBuildICmp(b, LLVMIntSLT, col, rel[h], "");
      LLVMValueRef x = s[n][e];
      if (f->mb >= 0) {
        // Keys past Tk read key Tk - 1 (masked anyway).
        LLVMValueRef j = tj_emit_min_i64(
            em, LLVMBuildAdd(b, j0, LLVMBuildZExt(b, col, em->t_i64, ""), ""),
            tk_1);
        tj_emit_point_t pt;
        memset(&pt, 0, sizeof(pt));
        pt.lanes = 1;
        pt.ptr[f->mb] = tj_emit_advance(em, (uint32_t)f->mb, mrow[h],
                                        LLVMBuildMul(b, j, ms_j, ""));
        LLVMValueRef mv = tj_emit_load(em, &pt, (uint32_t)f->mb);
        if (k->buffers[f->mb].dtype == TJ_DTYPE_BOOL) {
          ok = LLVMBuildAnd(b, ok, mv, "");
        } else {
          x = LLVMBuildFAdd(b, x, LLVMBuildFMul(b, mv, cf(f, kLog2e), ""), "");
        }
      }
      sm[n][e] = tj_emit_select(em, ok, x, cf(f, -INFINITY));
    }
  }
  if (f->mb < 0) {
    LLVMBasicBlockRef done_masking = LLVMGetInsertBlock(b);
    tj_emit_if_end(em, &masked);
    for (int32_t n = 0; n < 8; ++n)
      for (int32_t e = 0; e < 4; ++e) {
        LLVMValueRef phi = LLVMBuildPhi(b, em->t_f32, "");
        LLVMValueRef vals[2] = {sm[n][e], s[n][e]};
        LLVMBasicBlockRef from[2] = {done_masking, unmasked};
        LLVMAddIncoming(phi, vals, from, 2);
        sm[n][e] = phi;
      }
  }
  LLVMValueRef mx[2] = {cf(f, -INFINITY), cf(f, -INFINITY)};
  for (int32_t n = 0; n < 8; ++n)
    for (int32_t e = 0; e < 4; ++e) {
      s[n][e] = sm[n][e];
      mx[e / 2] = fmax2(f, mx[e / 2], s[n][e]);
    }
  LLVMValueRef m_use[2], alpha[2];
  for (int32_t h = 0; h < 2; ++h) {
    mx[h] = fmax2(f, mx[h], shfl_xor(f, mx[h], 1));
    mx[h] = fmax2(f, mx[h], shfl_xor(f, mx[h], 2));
    LLVMValueRef m_old = load_f32(f, m_slot[h]);
    LLVMValueRef m_new = fmax2(f, m_old, mx[h]);
    LLVMBuildStore(b, m_new, m_slot[h]);
    m_use[h] = tj_emit_select(
        em, LLVMBuildFCmp(b, LLVMRealOEQ, m_new, cf(f, -INFINITY), ""),
        cf(f, 0.0), m_new);
    alpha[h] = ex2(f, LLVMBuildFSub(b, m_old, m_use[h], ""));
  }
  LLVMValueRef sum[2] = {cf(f, 0.0), cf(f, 0.0)};
  for (int32_t n = 0; n < 8; ++n) {
    for (int32_t e = 0; e < 4; ++e) {
      const int32_t h = e / 2;
      s[n][e] = ex2(f, LLVMBuildFSub(b, s[n][e], m_use[h], ""));
      sum[h] = LLVMBuildFAdd(b, sum[h], s[n][e], "");
    }
  }
  for (int32_t h = 0; h < 2; ++h) {
    LLVMBuildStore(
        b,
        LLVMBuildFAdd(b, LLVMBuildFMul(b, load_f32(f, l_slot[h]), alpha[h], ""),
                      sum[h], ""),
        l_slot[h]);
  }
  LLVMValueRef o[16][4];
  for (int32_t j = 0; j < nd; ++j)
    for (int32_t e = 0; e < 4; ++e)
      o[j][e] = LLVMBuildFMul(b, load_f32(f, o_slot[j][e]), alpha[e / 2], "");

  // P as A fragments: keys 16 kk .. 16 kk + 15 are n-blocks 2 kk, 2 kk + 1.
  // attention_lse reads no V: the step ends with the row's l.
  if (!lse) {
    LLVMValueRef pf[4][4];
    for (int32_t kk = 0; kk < 4; ++kk) {
      pf[kk][0] = pack(f, s[2 * kk][0], s[2 * kk][1]);
      pf[kk][1] = pack(f, s[2 * kk][2], s[2 * kk][3]);
      pf[kk][2] = pack(f, s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pf[kk][3] = pack(f, s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
    wait_groups(f, 1);  // V_j (K_j+1 may still be in flight)
    tj_nvptx_barrier(nv);
    // O += P . V.
    for (int32_t kk = 0; kk < 4; ++kk) {
      for (int32_t np = 0; np < nd / 2; ++np) {
        LLVMValueRef row = LLVMBuildAdd(b, vrow, c32(f, 16 * kk), "");
        LLVMValueRef ch = LLVMBuildAdd(b, vch, c32(f, 2 * np), "");
        LLVMValueRef vf[4];
        ldmatrix(f, true, LLVMBuildAdd(b, c32(f, sV), swizzled(f, row, ch), ""),
                 vf);
        mma(f, pf[kk], &vf[0], o[2 * np]);
        mma(f, pf[kk], &vf[2], o[2 * np + 1]);
      }
    }
    for (int32_t j = 0; j < nd; ++j)
      for (int32_t e = 0; e < 4; ++e) LLVMBuildStore(b, o[j][e], o_slot[j][e]);
  }
  tj_emit_loop_end(em, &loop);
  if (lse)
    return tj_nvptx_fa_store_lse(f, f->ob, at.ptr[f->ob], so, row_i, tq, m_slot,
                                 l_slot);
  if (f->lob >= 0) {
    // with_lse (lsefwd): the row's lse from the same m and l, beside y.
    const uint32_t lob = (uint32_t)f->lob;
    TJ_RETURN_IF_ERROR(tj_nvptx_fa_store_lse(f, lob, at.ptr[lob],
                                             tj_emit_stride(em, lob, r - 2),
                                             row_i, tq, m_slot, l_slot));
  }

  // y = O / l, staged in the warp's own 16 rows of the Q tile (no other
  // warp reads them), then stored 16 bytes a lane.
  LLVMValueRef inv[2];
  for (int32_t h = 0; h < 2; ++h) {
    LLVMValueRef l = load_f32(f, l_slot[h]);
    l = LLVMBuildFAdd(b, l, shfl_xor(f, l, 1), "");
    l = LLVMBuildFAdd(b, l, shfl_xor(f, l, 2), "");
    inv[h] = tj_emit_select(em, LLVMBuildFCmp(b, LLVMRealOGT, l, cf(f, 0), ""),
                            LLVMBuildFDiv(b, cf(f, 1.0), l, ""), cf(f, 0.0));
  }
  LLVMValueRef t4 = LLVMBuildShl(b, t2, c32(f, 1), "");  // 4t bytes
  for (int32_t j = 0; j < nd; ++j) {
    for (int32_t h = 0; h < 2; ++h) {
      LLVMValueRef v =
          pack(f, LLVMBuildFMul(b, load_f32(f, o_slot[j][2 * h]), inv[h], ""),
               LLVMBuildFMul(b, load_f32(f, o_slot[j][2 * h + 1]), inv[h], ""));
      LLVMValueRef row =
          LLVMBuildAdd(b, wrow, LLVMBuildAdd(b, g, c32(f, 8 * h), ""), "");
      LLVMValueRef off = LLVMBuildAdd(
          b, c32(f, sQ), LLVMBuildAdd(b, swizzled(f, row, c32(f, j)), t4, ""),
          "");
      LLVMSetAlignment(LLVMBuildStore(b, v, smem_at(f, off)), 4);
    }
  }
  LLVMValueRef full = c32(f, -1);
  intrinsic(f, "llvm.nvvm.bar.warp.sync", &full, 1);
  const int32_t shift = f->chunks == 8 ? 3 : 4;
  LLVMTypeRef v4 = LLVMVectorType(em->t_i32, 4);
  LLVMValueRef obase = at.ptr[f->ob];
  for (int32_t i = 0; i < 16 * f->chunks / 32; ++i) {
    LLVMValueRef c = LLVMBuildAdd(b, f->lane, c32(f, 32 * i), "");
    LLVMValueRef rw = LLVMBuildLShr(b, c, c32(f, shift), "");
    LLVMValueRef ch = LLVMBuildAnd(b, c, c32(f, f->chunks - 1), "");
    LLVMValueRef row = LLVMBuildAdd(b, wrow, rw, "");
    LLVMValueRef gi =
        LLVMBuildAdd(b, q0, LLVMBuildZExt(b, row, em->t_i64, ""), "");
    LLVMValueRef v = LLVMBuildLoad2(
        b, v4,
        smem_at(f, LLVMBuildAdd(b, c32(f, sQ), swizzled(f, row, ch), "")), "");
    LLVMSetAlignment(v, 16);
    tj_emit_if_t in;
    tj_emit_if_begin(em, &in, LLVMBuildICmp(b, LLVMIntSLT, gi, tq, ""), "st");
    LLVMValueRef dst = tj_emit_advance(
        em, f->ob, obase,
        LLVMBuildAdd(
            b, LLVMBuildMul(b, gi, so, ""),
            LLVMBuildMul(b, LLVMBuildZExt(b, ch, em->t_i64, ""), c64(f, 8), ""),
            ""));
    LLVMSetAlignment(LLVMBuildStore(b, v, dst), 16);
    tj_emit_if_end(em, &in);
  }
  return NULL;
}

tj_status_t tj_nvptx_attention_launch(const tj_kir_t* k,
                                      const tj_nvptx_kernel_t* info,
                                      const int64_t* scalars,
                                      tj_nvptx_launch_t* out_launch) {
  const int32_t r = k->rank;
  // attention_dkv's blocks are per kv head (dims before G) and key tile;
  // the others' per query head and query tile.
  const bool dkv = k->attention.op == TJ_KIR_ATTENTION_DKV;
  int64_t outer = 1;
  for (int32_t i = 0; i < r; ++i) {
    int64_t v = tj_kir_ival_eval(k->dims[i], scalars);
    if (v < 0)
      return tj_invalid("kernel @%s: dim %d is %lld", k->name, (int)i,
                        (long long)v);
    if (i + (dkv ? 3 : 2) < r && tj_mul_overflow_i64(outer, v, &outer))
      return tj_invalid("kernel @%s: the iteration space overflows int64",
                        k->name);
  }
  int64_t tq = tj_kir_ival_eval(k->dims[r - 2], scalars);
  // attention_dkv with no query (Tq 0) still launches: its blocks write 0.
  int64_t rows = dkv ? tj_kir_ival_eval(k->dims[r - 1], scalars) : tq;
  // The wgmma forward's blocks take info->tile_m query rows, the others
  // kBM.
  const int64_t per_block = info->tile_m > 0 ? info->tile_m : kBM;
  int64_t blocks = 0;
  if (tj_mul_overflow_i64(outer, (rows + per_block - 1) / per_block, &blocks) ||
      blocks > 2147483647)
    return tj_unsupported("kernel @%s: %lld attention blocks, past the grid",
                          k->name, (long long)blocks);
  if (blocks == 0) {
    out_launch->empty = true;
    return NULL;
  }
  // 16-byte copies of q, k, v and the output rows: every stride a whole
  // number of chunks.
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    const tj_kir_buffer_t* buf = &k->buffers[i];
    // The mask, lse and delta are read, and lse written, an element at a
    // time.
    if (buf->role == TJ_KIR_ATTN_MASK || buf->role == TJ_KIR_ATTN_LSE ||
        buf->role == TJ_KIR_ATTN_DELTA || tj_kir_attention_lse_output(k, i))
      continue;
    const int64_t chunk = 16 / (int64_t)tj_dtype_size(buf->dtype);
    for (int32_t d = 0; d < r; ++d) {
      int64_t s = tj_kir_ival_eval(buf->strides[d], scalars);
      if (s % chunk != 0)
        return tj_unsupported(
            "kernel @%s: attention operand %%%s has stride %lld in dim %d, "
            "not a multiple of %lld elements (16 bytes)",
            k->name, buf->name, (long long)s, (int)d, (long long)chunk);
    }
  }
  out_launch->grid[0] = (uint32_t)blocks;
  out_launch->grid[1] = out_launch->grid[2] = 1;
  out_launch->block[0] = (uint32_t)info->threads;
  out_launch->block[1] = out_launch->block[2] = 1;
  out_launch->shared_bytes = (uint32_t)info->shared_bytes;
  return NULL;
}
