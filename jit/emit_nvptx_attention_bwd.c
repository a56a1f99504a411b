// attention_dq and attention_dkv for NVPTX (fabwdcuda): FlashAttention-2's
// backward as two kernels on mma.sync m16n8k16, for f16/bf16 q, k, v, dL/dy
// and head dims 64 and 128, no mask but causal (cuda_native_op in
// backends/cuda/cuda_backend.c keeps the nodes whole only then). p and ds
// are recomputed in registers from the scores and lse, never stored:
//   p = 2^(s scale log2(e) - lse log2(e)),  ds = p (dp - delta),
//   dp = dy . v,  dq = scale ds k,  dk = scale ds^T q,  dv = p^T dy.
// Neither kernel uses atomics: each output row is summed by one block, so
// the results are the same every run.
//
// attention_dq: one block of 4 warps per (query tile of 64 rows, head), as
// the forward; Q and dY tiles once, then per K/V tile of 64 keys (causal:
// none past the block's last row), the next tile copying under this one
// (two K/V buffer pairs):
//   S = Q . K^T, dP = dY . V^T (fragments as the forward's S);
//   ds in registers (masks only on tiles that cross Tk or the diagonal);
//   dQ += dS . K (dS rounded to the input dtype: the A fragment; K by
//   ldmatrix.trans, as the forward's V).
// attention_dkv: one block of 4 warps per (64 keys, kv head), warp w owning
// keys 16w .. 16w + 15; K and V tiles once, then per (query head g of the
// group, query tile) (causal: from the tile holding the block's first key),
// Q, dY, lse and delta copying one step ahead:
//   S^T = K . Q^T, dP^T = V . dY^T (keys as rows, so P^T and dS^T come out
//   as A fragments of the next products);
//   dV += P^T . dY, dK += dS^T . Q (dY and Q by ldmatrix.trans);
// at head dim 128 the queries of a tile go in two halves of 32, so that
// S^T and dP^T take half the registers beside dK and dV (128 a thread).
// Rows past Tq or Tk are zero-filled copies: a query past Tq has dy = 0 and
// delta = 0 (ds = 0, dy-weighted terms 0), a key past Tk has k = v = 0 in
// dq's sums (and its own dk/dv rows are not stored); only attention_dq
// masks keys past Tk, so that p of a zero key cannot overflow.
//
// Results go through the warp's own rows of a tile no other warp reads (an
// A operand's rows), then 16 bytes a lane, as the forward stores y.

#include <math.h>
#include <string.h>

#include "jit/emit_nvptx_attention.h"

// Per-lane geometry of the m16n8k16 fragments (see the forward).
typedef struct lanes_t {
  LLVMValueRef wrow;       // the warp's first row of a tile: 16 w
  LLVMValueRef l15, l16;   // A fragments: row lane & 15, chunk + lane / 16
  LLVMValueRef krow, kch;  // B from an [n, k] tile (no .trans)
  LLVMValueRef vrow, vch;  // B from a [k, n] tile (.trans)
  LLVMValueRef g, t2;      // C fragments: rows g, g + 8; columns 2t, 2t + 1
  // Byte offsets of the lane's chunk (row, chunk) of each kind above, and
  // the swizzle key (lane & 7) << 4 that all three share.
  LLVMValueRef a_off, nk_off, kn_off, key16;
} lanes_t;

static void lane_geometry(fa_t* f, lanes_t* L) {
  LLVMBuilderRef b = f->b;
  LLVMValueRef l7 = LLVMBuildAnd(b, f->lane, c32(f, 7), "");
  LLVMValueRef l8 =
      LLVMBuildAnd(b, LLVMBuildLShr(b, f->lane, c32(f, 3), ""), c32(f, 1), "");
  L->l15 = LLVMBuildAnd(b, f->lane, c32(f, 15), "");
  L->l16 = LLVMBuildLShr(b, f->lane, c32(f, 4), "");
  L->wrow = LLVMBuildMul(b, f->warp, c32(f, 16), "wrow");
  L->krow = LLVMBuildAdd(b, LLVMBuildShl(b, L->l16, c32(f, 3), ""), l7, "");
  L->kch = l8;
  L->vrow = LLVMBuildAdd(b, LLVMBuildShl(b, l8, c32(f, 3), ""), l7, "");
  L->vch = L->l16;
  L->g = LLVMBuildLShr(b, f->lane, c32(f, 2), "g");
  L->t2 =
      LLVMBuildShl(b, LLVMBuildAnd(b, f->lane, c32(f, 3), ""), c32(f, 1), "");
  LLVMValueRef rb = c32(f, f->row_bytes), c16 = c32(f, 16);
  L->a_off = LLVMBuildAdd(
      b, LLVMBuildMul(b, LLVMBuildAdd(b, L->wrow, L->l15, ""), rb, ""),
      LLVMBuildMul(b, L->l16, c16, ""), "");
  L->nk_off = LLVMBuildAdd(b, LLVMBuildMul(b, L->krow, rb, ""),
                           LLVMBuildMul(b, L->kch, c16, ""), "");
  L->kn_off = LLVMBuildAdd(b, LLVMBuildMul(b, L->vrow, rb, ""),
                           LLVMBuildMul(b, L->vch, c16, ""), "");
  L->key16 = LLVMBuildShl(b, l7, c32(f, 4), "");
}

// The byte offset in the swizzled tile at |tile| of chunk (r0 + row, c0 +
// ch), lane part |lane_off| = r0 row_bytes + 16 c0 with c0 in {0, 1} and
// r0 & 7 = lane & 7, constants |row| (a multiple of 8) and |ch| (even).
// The swizzle XORs bits 4-6 only, which just c0 + (ch & 7) set (no carry
// past them), so the rest of the constant is added after the XOR: there
// it folds into the ldmatrix's immediate offset, and only 4 values a
// lane stay live across the loops, not one per (row, chunk) (a hoisted
// swizzled offset each cost a register: 255 and spills).
static LLVMValueRef swz(fa_t* f, const lanes_t* L, LLVMValueRef tile,
                        LLVMValueRef lane_off, int32_t row, int32_t ch) {
  LLVMBuilderRef b = f->b;
  LLVMValueRef lo = LLVMBuildXor(
      b, LLVMBuildAdd(b, lane_off, c32(f, 16 * (ch & 7)), ""), L->key16, "");
  return LLVMBuildAdd(b, LLVMBuildAdd(b, tile, lo, ""),
                      c32(f, row * f->row_bytes + 16 * (ch & ~7)), "");
}

// The A fragment of k-block |kk| of the warp's 16 rows of the tile at byte
// |tile| (i32).
static void frag_a(fa_t* f, const lanes_t* L, LLVMValueRef tile, int32_t kk,
                   LLVMValueRef* out) {
  ldmatrix(f, false, swz(f, L, tile, L->a_off, 0, 2 * kk), out);
}

// acc[n] (n-blocks of 8 rows of the [n, k] tile at |bt|, from row 16 np0,
// 2 np blocks) += A . B^T over the head dim; A from |afr| (cached
// fragments) or else loaded from the tile at |at|.
static void gemm_nt(fa_t* f, const lanes_t* L, LLVMValueRef (*afr)[4],
                    LLVMValueRef at, LLVMValueRef bt, int32_t np0, int32_t np,
                    LLVMValueRef (*acc)[4]) {
  for (int32_t kk = 0; kk < f->d / 16; ++kk) {
    LLVMValueRef a[4];
    if (afr) {
      memcpy(a, afr[kk], sizeof(a));
    } else {
      frag_a(f, L, at, kk, a);
    }
    for (int32_t p = 0; p < np; ++p) {
      LLVMValueRef bf[4];
      ldmatrix(f, false, swz(f, L, bt, L->nk_off, 16 * (np0 + p), 2 * kk), bf);
      mma(f, a, &bf[0], acc[2 * p]);
      mma(f, a, &bf[2], acc[2 * p + 1]);
    }
  }
}

// acc[j] (the head dim's d / 8 n-blocks) += P . B, P's A fragments pf[i]
// for k-blocks kk0 + i (16 rows each of the [k, n] tile at |bt|), i < nkk.
static void gemm_nn(fa_t* f, const lanes_t* L, LLVMValueRef (*pf)[4],
                    int32_t kk0, int32_t nkk, LLVMValueRef bt,
                    LLVMValueRef (*acc)[4]) {
  for (int32_t i = 0; i < nkk; ++i) {
    for (int32_t np = 0; np < f->d / 16; ++np) {
      LLVMValueRef bf[4];
      ldmatrix(f, true, swz(f, L, bt, L->kn_off, 16 * (kk0 + i), 2 * np), bf);
      mma(f, pf[i], &bf[0], acc[2 * np]);
      mma(f, pf[i], &bf[2], acc[2 * np + 1]);
    }
  }
}

// C fragments of n-blocks 2 i, 2 i + 1 as the A fragment of k-block i.
static void pack_a(fa_t* f, LLVMValueRef (*c)[4], int32_t nkk,
                   LLVMValueRef (*out)[4]) {
  for (int32_t i = 0; i < nkk; ++i) {
    out[i][0] = pack(f, c[2 * i][0], c[2 * i][1]);
    out[i][1] = pack(f, c[2 * i][2], c[2 * i][3]);
    out[i][2] = pack(f, c[2 * i + 1][0], c[2 * i + 1][1]);
    out[i][3] = pack(f, c[2 * i + 1][2], c[2 * i + 1][3]);
  }
}

// t[n] (n-blocks n0 .. n0 + nn of a 64-column tile) set to -inf where the
// column fails its row's bound: col < bound[h] (|upper|) or col >= bound[h]
// (i32, relative to the tile). Emitted under |cond| (a uniform branch) so
// that tiles that need no mask skip the compares.
static void mask_tile(fa_t* f, const lanes_t* L, LLVMValueRef cond,
                      LLVMValueRef* bound, bool upper, int32_t n0, int32_t nn,
                      LLVMValueRef (*t)[4]) {
  LLVMBuilderRef b = f->b;
  tj_emit_t* em = f->em;
  LLVMBasicBlockRef plain = LLVMGetInsertBlock(b);
  tj_emit_if_t br;
  tj_emit_if_begin(em, &br, cond, "mask");
  LLVMValueRef m[8][4];
  for (int32_t n = 0; n < nn; ++n)
    for (int32_t e = 0; e < 4; ++e) {
      LLVMValueRef col =
          LLVMBuildAdd(b, L->t2, c32(f, 8 * (n0 + n) + (e & 1)), "");
      LLVMValueRef ok = LLVMBuildICmp(b, upper ? LLVMIntSLT : LLVMIntSGE, col,
                                      bound[e / 2], "");
      m[n][e] = tj_emit_select(em, ok, t[n][e], cf(f, -INFINITY));
    }
  LLVMBasicBlockRef masked = LLVMGetInsertBlock(b);
  tj_emit_if_end(em, &br);
  for (int32_t n = 0; n < nn; ++n)
    for (int32_t e = 0; e < 4; ++e) {
      LLVMValueRef phi = LLVMBuildPhi(b, em->t_f32, "");
      LLVMValueRef vals[2] = {m[n][e], t[n][e]};
      LLVMBasicBlockRef from[2] = {masked, plain};
      LLVMAddIncoming(phi, vals, from, 2);
      t[n][e] = phi;
    }
}

// Stores acc (d / 8 n-blocks of the warp's 16 rows) times |mul| as rows
// r0 + 16 w .. of the output at |dst| (row stride |stride|, |col| elements
// in), rows >= |limit| skipped; staged in the warp's rows of the tile at
// byte |stage|, which no other warp reads.
static void store_rows(fa_t* f, const lanes_t* L, LLVMValueRef (*acc)[4],
                       double mul, int32_t stage, LLVMValueRef dst,
                       LLVMValueRef r0, LLVMValueRef limit, LLVMValueRef stride,
                       int64_t col) {
  LLVMBuilderRef b = f->b;
  tj_emit_t* em = f->em;
  LLVMValueRef t4 = LLVMBuildShl(b, L->t2, c32(f, 1), "");  // 4t bytes
  for (int32_t j = 0; j < f->d / 8; ++j) {
    for (int32_t h = 0; h < 2; ++h) {
      LLVMValueRef v =
          pack(f, LLVMBuildFMul(b, acc[j][2 * h], cf(f, mul), ""),
               LLVMBuildFMul(b, acc[j][2 * h + 1], cf(f, mul), ""));
      LLVMValueRef row = LLVMBuildAdd(
          b, L->wrow, LLVMBuildAdd(b, L->g, c32(f, 8 * h), ""), "");
      LLVMValueRef off = LLVMBuildAdd(
          b, c32(f, stage),
          LLVMBuildAdd(b, swizzled(f, row, c32(f, j)), t4, ""), "");
      LLVMSetAlignment(LLVMBuildStore(b, v, smem_at(f, off)), 4);
    }
  }
  LLVMValueRef full = c32(f, -1);
  intrinsic(f, "llvm.nvvm.bar.warp.sync", &full, 1);
  const int32_t shift = f->chunks == 8 ? 3 : 4;
  LLVMTypeRef v4 = LLVMVectorType(em->t_i32, 4);
  for (int32_t i = 0; i < 16 * f->chunks / 32; ++i) {
    LLVMValueRef c = LLVMBuildAdd(b, f->lane, c32(f, 32 * i), "");
    LLVMValueRef rw = LLVMBuildLShr(b, c, c32(f, shift), "");
    LLVMValueRef ch = LLVMBuildAnd(b, c, c32(f, f->chunks - 1), "");
    LLVMValueRef row = LLVMBuildAdd(b, L->wrow, rw, "");
    LLVMValueRef gi =
        LLVMBuildAdd(b, r0, LLVMBuildZExt(b, row, em->t_i64, ""), "");
    LLVMValueRef v = LLVMBuildLoad2(
        b, v4,
        smem_at(f, LLVMBuildAdd(b, c32(f, stage), swizzled(f, row, ch), "")),
        "");
    LLVMSetAlignment(v, 16);
    tj_emit_if_t in;
    tj_emit_if_begin(em, &in, LLVMBuildICmp(b, LLVMIntSLT, gi, limit, ""),
                     "st");
    LLVMValueRef p = tj_emit_advance(
        em, f->ob, dst,
        LLVMBuildAdd(
            b, LLVMBuildMul(b, gi, stride, ""),
            LLVMBuildAdd(b,
                         LLVMBuildMul(b, LLVMBuildZExt(b, ch, em->t_i64, ""),
                                      c64(f, 8), ""),
                         c64(f, col), ""),
            ""));
    LLVMSetAlignment(LLVMBuildStore(b, v, p), 16);
    tj_emit_if_end(em, &in);
  }
}

// Accumulators in entry-block slots (SROA makes them registers again).
static void acc_slots(fa_t* f, LLVMValueRef (*slot)[4], int32_t n) {
  for (int32_t j = 0; j < n; ++j)
    for (int32_t e = 0; e < 4; ++e) {
      slot[j][e] = tj_emit_alloca(f->em, f->em->t_f32, "acc");
      LLVMBuildStore(f->b, cf(f, 0.0), slot[j][e]);
    }
}
static void acc_load(fa_t* f, LLVMValueRef (*slot)[4], int32_t n,
                     LLVMValueRef (*out)[4]) {
  for (int32_t j = 0; j < n; ++j)
    for (int32_t e = 0; e < 4; ++e) out[j][e] = load_f32(f, slot[j][e]);
}
static void acc_store(fa_t* f, LLVMValueRef (*slot)[4], int32_t n,
                      LLVMValueRef (*v)[4]) {
  for (int32_t j = 0; j < n; ++j)
    for (int32_t e = 0; e < 4; ++e) LLVMBuildStore(f->b, v[j][e], slot[j][e]);
}

static void zero(fa_t* f, LLVMValueRef (*acc)[4], int32_t n) {
  for (int32_t j = 0; j < n; ++j)
    for (int32_t e = 0; e < 4; ++e) acc[j][e] = cf(f, 0.0);
}

static LLVMValueRef load_global_f32(fa_t* f, uint32_t buf, LLVMValueRef base,
                                    LLVMValueRef off) {
  return LLVMBuildLoad2(f->b, f->em->t_f32,
                        tj_emit_advance(f->em, buf, base, off), "");
}

// ceil(x / 64) of an i64.
static LLVMValueRef tiles_of(fa_t* f, LLVMValueRef x) {
  return LLVMBuildSDiv(f->b, LLVMBuildAdd(f->b, x, c64(f, kBM - 1), ""),
                       c64(f, kBM), "");
}

static tj_status_t emit_dq(fa_t* f) {
  tj_nvptx_emit_t* nv = f->nv;
  tj_emit_t* em = f->em;
  LLVMBuilderRef b = f->b;
  const tj_kir_t* k = f->k;
  const int32_t r = k->rank, d = f->d, nd = d / 8, T = f->tile_bytes;
  const bool causal = k->attention.causal;
  // Q, dY, then two (K, V) pairs.
  nv->info->shared_bytes = 6 * T;
  lanes_t L;
  lane_geometry(f, &L);
  // The forwards' placement: a block per (head, query tile), causal's
  // longest blocks (the last query tiles) first, the keys it reads.
  tj_nvptx_fa_block_t blk;
  tj_nvptx_fa_block(f, kBM, kBN, &blk);
  LLVMValueRef tq = blk.tq, tk = blk.tk, q0 = blk.q0, ntiles = blk.ntiles;
  const tj_emit_point_t at = blk.at;
  LLVMValueRef sq = tj_emit_stride(em, f->qb, r - 2);
  LLVMValueRef sdo = tj_emit_stride(em, f->dob, r - 2);
  LLVMValueRef sk = tj_emit_stride(em, f->kb, r - 1);
  LLVMValueRef sv = tj_emit_stride(em, f->vb, r - 1);
  LLVMValueRef so = tj_emit_stride(em, f->ob, r - 2);
  LLVMValueRef sl = tj_emit_stride(em, f->lseb, r - 2);
  LLVMValueRef sdl = tj_emit_stride(em, f->deltab, r - 2);
  const int32_t sQ = 0, sO = T;

  LLVMValueRef qrows = LLVMBuildSub(b, tq, q0, "");
  load_tile(
      f, f->qb,
      tj_emit_advance(em, f->qb, at.ptr[f->qb], LLVMBuildMul(b, q0, sq, "")),
      sq, c64(f, 0), qrows, sQ);
  load_tile(
      f, f->dob,
      tj_emit_advance(em, f->dob, at.ptr[f->dob], LLVMBuildMul(b, q0, sdo, "")),
      sdo, c64(f, 0), qrows, sO);
  commit(f);
  tj_emit_if_t any;
  tj_emit_if_begin(em, &any,
                   LLVMBuildICmp(b, LLVMIntSGT, ntiles, c64(f, 0), ""), "kv0");
  load_tile(f, f->kb, at.ptr[f->kb], sk, c64(f, 0), tk, 2 * T);
  load_tile(f, f->vb, at.ptr[f->vb], sv, c64(f, 0), tk, 3 * T);
  tj_emit_if_end(em, &any);
  commit(f);

  // This thread's rows g and g + 8: lse in base 2 (+inf for a row with
  // no key, so that its p is 0) and delta, and the keys each row sees.
  LLVMValueRef lse2[2], delta[2], rel_hi[2];
  LLVMValueRef lim_lo =
      causal ? tj_emit_min_i64(em, tk, LLVMBuildAdd(b, q0, c64(f, 1), "")) : tk;
  LLVMValueRef tq_1 = LLVMBuildSub(b, tq, c64(f, 1), "");
  LLVMValueRef row_lim[2];
  for (int32_t h = 0; h < 2; ++h) {
    LLVMValueRef rr =
        LLVMBuildAdd(b, L.wrow, LLVMBuildAdd(b, L.g, c32(f, 8 * h), ""), "");
    LLVMValueRef i =
        LLVMBuildAdd(b, q0, LLVMBuildZExt(b, rr, em->t_i64, ""), "");
    LLVMValueRef ic = tj_emit_min_i64(em, i, tq_1);  // rows past Tq: any row
    LLVMValueRef lse = load_global_f32(f, f->lseb, at.ptr[f->lseb],
                                       LLVMBuildMul(b, ic, sl, ""));
    lse2[h] = tj_emit_select(
        em, LLVMBuildFCmp(b, LLVMRealOEQ, lse, cf(f, -INFINITY), ""),
        cf(f, INFINITY), LLVMBuildFMul(b, lse, cf(f, kLog2e), ""));
    delta[h] = load_global_f32(f, f->deltab, at.ptr[f->deltab],
                               LLVMBuildMul(b, ic, sdl, ""));
    row_lim[h] =
        causal ? tj_emit_min_i64(em, tk, LLVMBuildAdd(b, i, c64(f, 1), ""))
               : tk;
  }

  // At head dim 64 the Q and dY fragments stay in registers (32 a thread);
  // at 128 they would take 64 beside dQ's 64, so they are read from shared
  // memory at each use.
  const bool cache = d == 64;
  LLVMValueRef qf[8][4], gf[8][4];
  if (cache) {
    wait_groups(f, 1);
    tj_nvptx_barrier(nv);
    for (int32_t kk = 0; kk < d / 16; ++kk) {
      frag_a(f, &L, c32(f, sQ), kk, qf[kk]);
      frag_a(f, &L, c32(f, sO), kk, gf[kk]);
    }
  }
  LLVMValueRef dq_slot[16][4];
  acc_slots(f, dq_slot, nd);
  const double c2 = k->attention.scale * kLog2e;

  tj_emit_loop_t loop;
  LLVMValueRef jt =
      tj_emit_loop_begin(em, &loop, c64(f, 0), ntiles, c64(f, 1), "kv");
  LLVMValueRef j0 = LLVMBuildMul(b, jt, c64(f, kBN), "j0");
  wait_groups(f, 0);  // K_j, V_j
  tj_nvptx_barrier(nv);
  // Every warp is past step j - 1: its buffers take K_j+1, V_j+1.
  LLVMValueRef kcur = LLVMBuildAdd(
      b, c32(f, 2 * T),
      LLVMBuildMul(
          b,
          LLVMBuildTrunc(b, LLVMBuildAnd(b, jt, c64(f, 1), ""), em->t_i32, ""),
          c32(f, 2 * T), ""),
      "kcur");
  LLVMValueRef vcur = LLVMBuildAdd(b, kcur, c32(f, T), "vcur");
  LLVMValueRef knext = LLVMBuildSub(b, c32(f, 6 * T), kcur, "knext");
  LLVMValueRef jn = LLVMBuildAdd(b, jt, c64(f, 1), "");
  tj_emit_if_t next;
  tj_emit_if_begin(em, &next, LLVMBuildICmp(b, LLVMIntSLT, jn, ntiles, ""),
                   "kvnext");
  LLVMValueRef jn0 = LLVMBuildMul(b, jn, c64(f, kBN), "");
  load_tile_at(f, f->kb, at.ptr[f->kb], sk, jn0, tk, knext);
  load_tile_at(f, f->vb, at.ptr[f->vb], sv, jn0, tk,
               LLVMBuildAdd(b, knext, c32(f, T), ""));
  tj_emit_if_end(em, &next);
  commit(f);

  LLVMValueRef s[8][4], dp[8][4];
  zero(f, s, 8);
  zero(f, dp, 8);
  gemm_nt(f, &L, cache ? qf : NULL, c32(f, sQ), kcur, 0, 4, s);
  gemm_nt(f, &L, cache ? gf : NULL, c32(f, sO), vcur, 0, 4, dp);
  for (int32_t n = 0; n < 8; ++n)
    for (int32_t e = 0; e < 4; ++e)
      s[n][e] = LLVMBuildFMul(b, s[n][e], cf(f, c2), "");
  // Keys past Tk and (causal) past the row: only tiles that reach past the
  // keys every row of the block sees.
  for (int32_t h = 0; h < 2; ++h) {
    LLVMValueRef x = LLVMBuildSub(b, row_lim[h], j0, "");
    x = tj_emit_select(em, LLVMBuildICmp(b, LLVMIntSLT, x, c64(f, 0), ""),
                       c64(f, 0), x);
    x = tj_emit_min_i64(em, x, c64(f, kBN));
    rel_hi[h] = LLVMBuildTrunc(b, x, em->t_i32, "rel");
  }
  mask_tile(f, &L,
            LLVMBuildICmp(b, LLVMIntSGT, LLVMBuildAdd(b, j0, c64(f, kBN), ""),
                          lim_lo, ""),
            rel_hi, true, 0, 8, s);
  for (int32_t n = 0; n < 8; ++n)
    for (int32_t e = 0; e < 4; ++e) {
      const int32_t h = e / 2;
      LLVMValueRef p = ex2(f, LLVMBuildFSub(b, s[n][e], lse2[h], ""));
      s[n][e] = LLVMBuildFMul(b, p, LLVMBuildFSub(b, dp[n][e], delta[h], ""),
                              "");  // ds
    }
  LLVMValueRef dsf[4][4];
  pack_a(f, s, 4, dsf);
  LLVMValueRef acc[16][4];
  acc_load(f, dq_slot, nd, acc);
  gemm_nn(f, &L, dsf, 0, 4, kcur, acc);
  acc_store(f, dq_slot, nd, acc);
  tj_emit_loop_end(em, &loop);

  acc_load(f, dq_slot, nd, acc);
  store_rows(f, &L, acc, k->attention.scale, sQ, at.ptr[f->ob], q0, tq, so, 0);
  return NULL;
}

// attention_dkv's per-block values for the copies of a step.
typedef struct dkv_t {
  tj_nvptx_fa_dkv_t blk;
  LLVMValueRef qt0, nq;  // first query tile, tiles per head
} dkv_t;

// The first query row of step |it| (i64): tile qt0 + it % nq.
static LLVMValueRef step_q0(fa_t* f, const dkv_t* s, LLVMValueRef it) {
  LLVMBuilderRef b = f->b;
  return LLVMBuildMul(
      b, LLVMBuildAdd(b, s->qt0, LLVMBuildURem(b, it, s->nq, ""), ""),
      c64(f, kBM), "q0");
}

// Starts the copies of step |it| (head g = it / nq of the group, its query
// tile) into Q, dY at bytes |qdst|, |qdst| + T, and its 64 lse then 64
// delta floats at |ldst| (i32s): thread t < 64 copies lse row t, the others
// delta row t - 64, so thread t's 4 bytes land at |ldst| + 4 t. Rows past
// Tq read nothing: Q and dY rows of zeros, lse and delta 0.
static void issue_step(fa_t* f, const dkv_t* s, LLVMValueRef it,
                       LLVMValueRef qdst, LLVMValueRef ldst) {
  LLVMBuilderRef b = f->b;
  tj_emit_t* em = f->em;
  LLVMValueRef gg = LLVMBuildUDiv(b, it, s->nq, "g");
  LLVMValueRef q0 = step_q0(f, s, it);
  load_tile_at(f, f->qb,
               tj_emit_advance(em, f->qb, s->blk.at.ptr[f->qb],
                               LLVMBuildMul(b, gg, s->blk.sqg, "")),
               s->blk.sq, q0, s->blk.tq, qdst);
  load_tile_at(f, f->dob,
               tj_emit_advance(em, f->dob, s->blk.at.ptr[f->dob],
                               LLVMBuildMul(b, gg, s->blk.sdog, "")),
               s->blk.sdo, q0, s->blk.tq,
               LLVMBuildAdd(b, qdst, c32(f, f->tile_bytes), ""));
  LLVMValueRef ltid = LLVMBuildZExt(b, f->tid, em->t_i64, "");
  LLVMValueRef row =
      LLVMBuildAdd(b, q0, LLVMBuildAnd(b, ltid, c64(f, 63), ""), "");
  LLVMValueRef ok = LLVMBuildICmp(b, LLVMIntSLT, row, s->blk.tq, "");
  LLVMValueRef rc = tj_emit_select(em, ok, row, c64(f, 0));
  LLVMValueRef is_lse = LLVMBuildICmp(b, LLVMIntULT, f->tid, c32(f, 64), "");
  LLVMValueRef lp =
      tj_emit_advance(em, f->lseb, s->blk.at.ptr[f->lseb],
                      LLVMBuildAdd(b, LLVMBuildMul(b, gg, s->blk.slg, ""),
                                   LLVMBuildMul(b, rc, s->blk.sl, ""), ""));
  LLVMValueRef dp =
      tj_emit_advance(em, f->deltab, s->blk.at.ptr[f->deltab],
                      LLVMBuildAdd(b, LLVMBuildMul(b, gg, s->blk.sdlg, ""),
                                   LLVMBuildMul(b, rc, s->blk.sdl, ""), ""));
  LLVMValueRef src = LLVMBuildAddrSpaceCast(
      b, LLVMBuildSelect(b, is_lse, lp, dp, ""), f->nv->t_ptr_global, "");
  LLVMValueRef args[3] = {
      smem_at(
          f, LLVMBuildAdd(b, ldst, LLVMBuildShl(b, f->tid, c32(f, 2), ""), "")),
      src, tj_emit_select(em, ok, c32(f, 4), c32(f, 0))};
  intrinsic(f, "llvm.nvvm.cp.async.ca.shared.global.4.s", args, 3);
}

static tj_status_t emit_dkv(fa_t* f) {
  tj_nvptx_emit_t* nv = f->nv;
  tj_emit_t* em = f->em;
  LLVMBuilderRef b = f->b;
  const tj_kir_t* k = f->k;
  const int32_t d = f->d, nd = d / 8, T = f->tile_bytes;
  const bool causal = k->attention.causal;
  // K, V, two (Q, dY) pairs, two (lse, delta) pairs of 64 floats each.
  const int32_t sK = 0, sV = T, sL = 6 * T;
  nv->info->shared_bytes = 6 * T + 2 * 512;
  lanes_t L;
  lane_geometry(f, &L);
  dkv_t st;
  memset(&st, 0, sizeof(st));
  tj_nvptx_fa_dkv_setup(f, kBN, &st.blk);
  const tj_nvptx_fa_dkv_t* blk = &st.blk;
  LLVMValueRef tq = blk->tq, tk = blk->tk, group = blk->group;
  LLVMValueRef kt = blk->kt, k0 = blk->k0;
  LLVMValueRef sk = blk->sk, sv = blk->sv, so = blk->so;

  LLVMValueRef krows = LLVMBuildSub(b, tk, k0, "");
  load_tile(f, f->kb,
            tj_emit_advance(em, f->kb, blk->at.ptr[f->kb],
                            LLVMBuildMul(b, k0, sk, "")),
            sk, c64(f, 0), krows, sK);
  load_tile(f, f->vb,
            tj_emit_advance(em, f->vb, blk->at.ptr[f->vb],
                            LLVMBuildMul(b, k0, sv, "")),
            sv, c64(f, 0), krows, sV);
  commit(f);

  // Steps: (g, query tile) for g < G, query tiles from qt0 (causal: the
  // tile of the block's first key; no earlier query sees it).
  LLVMValueRef qtiles = tiles_of(f, tq);
  st.qt0 = causal ? tj_emit_min_i64(em, kt, qtiles) : c64(f, 0);
  st.nq = LLVMBuildSub(b, qtiles, st.qt0, "nq");
  LLVMValueRef steps = LLVMBuildMul(b, group, st.nq, "steps");
  tj_emit_if_t first;
  tj_emit_if_begin(em, &first,
                   LLVMBuildICmp(b, LLVMIntSGT, steps, c64(f, 0), ""), "step0");
  issue_step(f, &st, c64(f, 0), c32(f, 2 * T), c32(f, sL));
  tj_emit_if_end(em, &first);
  commit(f);

  // At head dim 64 the warp's K and V fragments stay in registers (32 a
  // thread); at 128 they are read from shared memory at each use, and the
  // queries of a step go in two halves, so that dK and dV (128 registers)
  // fit with S^T and dP^T (ptxas: 32-80 bytes spilled). Shared memory
  // bandwidth bounds this loop (a 512-byte ldmatrix.x4 per 1.3 mma at
  // d 128), so each half re-reading K and V is the cost: 4 slices of 16
  // queries spilled less (12-36 bytes) but read 20% more.
  const bool cache = d == 64;
  const int32_t halves = d == 64 ? 1 : 2, nbl = 8 / halves;
  LLVMValueRef kf[8][4], vf[8][4];
  if (cache) {
    wait_groups(f, 1);
    tj_nvptx_barrier(nv);
    for (int32_t kk = 0; kk < d / 16; ++kk) {
      frag_a(f, &L, c32(f, sK), kk, kf[kk]);
      frag_a(f, &L, c32(f, sV), kk, vf[kk]);
    }
  }
  LLVMValueRef dk_slot[16][4], dv_slot[16][4];
  acc_slots(f, dk_slot, nd);
  acc_slots(f, dv_slot, nd);
  const double c2 = k->attention.scale * kLog2e;
  // This thread's keys (rows g, g + 8 of its warp's 16).
  LLVMValueRef key[2];
  for (int32_t h = 0; h < 2; ++h) {
    LLVMValueRef rr =
        LLVMBuildAdd(b, L.wrow, LLVMBuildAdd(b, L.g, c32(f, 8 * h), ""), "");
    key[h] = LLVMBuildAdd(b, k0, LLVMBuildZExt(b, rr, em->t_i64, ""), "key");
  }

  tj_emit_loop_t loop;
  LLVMValueRef it =
      tj_emit_loop_begin(em, &loop, c64(f, 0), steps, c64(f, 1), "step");
  wait_groups(f, 0);  // step it's Q, dY, lse, delta
  tj_nvptx_barrier(nv);
  // Every warp is past step it - 1: its buffers take step it + 1.
  LLVMValueRef sel =
      LLVMBuildTrunc(b, LLVMBuildAnd(b, it, c64(f, 1), ""), em->t_i32, "");
  LLVMValueRef qcur = LLVMBuildAdd(
      b, c32(f, 2 * T), LLVMBuildMul(b, sel, c32(f, 2 * T), ""), "qcur");
  LLVMValueRef ocur = LLVMBuildAdd(b, qcur, c32(f, T), "ocur");
  LLVMValueRef lcur =
      LLVMBuildAdd(b, c32(f, sL), LLVMBuildMul(b, sel, c32(f, 512), ""), "");
  LLVMValueRef itn = LLVMBuildAdd(b, it, c64(f, 1), "");
  tj_emit_if_t next;
  tj_emit_if_begin(em, &next, LLVMBuildICmp(b, LLVMIntSLT, itn, steps, ""),
                   "stepnext");
  issue_step(f, &st, itn, LLVMBuildSub(b, c32(f, 6 * T), qcur, ""),
             LLVMBuildSub(b, c32(f, 2 * sL + 512), lcur, ""));
  tj_emit_if_end(em, &next);
  commit(f);

  LLVMValueRef q0 = step_q0(f, &st, it);
  // Causal: only the tile on the diagonal (q0 = k0) has queries before
  // some of the block's keys; key > query is masked there.
  LLVMValueRef need_mask =
      causal ? LLVMBuildICmp(b, LLVMIntSLT, q0,
                             LLVMBuildAdd(b, k0, c64(f, kBN), ""), "")
             : NULL;
  LLVMValueRef dk[16][4], dv[16][4];
  acc_load(f, dk_slot, nd, dk);
  acc_load(f, dv_slot, nd, dv);
  LLVMTypeRef f2 = LLVMVectorType(em->t_f32, 2);
  for (int32_t hv = 0; hv < halves; ++hv) {
    const int32_t n0 = hv * nbl;
    LLVMValueRef s[8][4], dp[8][4];
    zero(f, s, nbl);
    zero(f, dp, nbl);
    gemm_nt(f, &L, cache ? kf : NULL, c32(f, sK), qcur, n0 / 2, nbl / 2, s);
    gemm_nt(f, &L, cache ? vf : NULL, c32(f, sV), ocur, n0 / 2, nbl / 2, dp);
    for (int32_t n = 0; n < nbl; ++n)
      for (int32_t e = 0; e < 4; ++e)
        s[n][e] = LLVMBuildFMul(b, s[n][e], cf(f, c2), "");
    if (causal) {
      // Column (query q0 + col) kept where col >= key - q0.
      LLVMValueRef bound[2];
      for (int32_t h = 0; h < 2; ++h) {
        LLVMValueRef x = LLVMBuildSub(b, key[h], q0, "");
        x = tj_emit_select(em, LLVMBuildICmp(b, LLVMIntSLT, x, c64(f, 0), ""),
                           c64(f, 0), x);
        x = tj_emit_min_i64(em, x, c64(f, kBM));
        bound[h] = LLVMBuildTrunc(b, x, em->t_i32, "");
      }
      mask_tile(f, &L, need_mask, bound, false, n0, nbl, s);
    }
    for (int32_t n = 0; n < nbl; ++n) {
      // lse and delta of columns 8 (n0 + n) + 2t, + 1.
      LLVMValueRef col = LLVMBuildAdd(b, L.t2, c32(f, 8 * (n0 + n)), "");
      LLVMValueRef off =
          LLVMBuildAdd(b, lcur, LLVMBuildShl(b, col, c32(f, 2), ""), "");
      LLVMValueRef lv = LLVMBuildLoad2(b, f2, smem_at(f, off), "");
      LLVMSetAlignment(lv, 8);
      LLVMValueRef dl = LLVMBuildLoad2(
          b, f2, smem_at(f, LLVMBuildAdd(b, off, c32(f, 256), "")), "");
      LLVMSetAlignment(dl, 8);
      for (int32_t e = 0; e < 4; ++e) {
        LLVMValueRef ix = c32(f, e & 1);
        LLVMValueRef l2 = LLVMBuildFMul(
            b, LLVMBuildExtractElement(b, lv, ix, ""), cf(f, kLog2e), "");
        LLVMValueRef p = ex2(f, LLVMBuildFSub(b, s[n][e], l2, ""));
        s[n][e] = p;
        dp[n][e] = LLVMBuildFMul(
            b, p,
            LLVMBuildFSub(b, dp[n][e], LLVMBuildExtractElement(b, dl, ix, ""),
                          ""),
            "");  // ds^T
      }
    }
    LLVMValueRef pf[4][4], dsf[4][4];
    pack_a(f, s, nbl / 2, pf);
    pack_a(f, dp, nbl / 2, dsf);
    gemm_nn(f, &L, pf, n0 / 2, nbl / 2, ocur, dv);
    gemm_nn(f, &L, dsf, n0 / 2, nbl / 2, qcur, dk);
  }
  acc_store(f, dk_slot, nd, dk);
  acc_store(f, dv_slot, nd, dv);
  tj_emit_loop_end(em, &loop);

  acc_load(f, dk_slot, nd, dk);
  acc_load(f, dv_slot, nd, dv);
  store_rows(f, &L, dk, k->attention.scale, sK, blk->at.ptr[f->ob], k0, tk, so,
             0);
  store_rows(f, &L, dv, 1.0, sV, blk->at.ptr[f->ob], k0, tk, so, d);
  return NULL;
}

tj_status_t tj_nvptx_emit_attention_bwd(fa_t* f) {
  tj_nvptx_emit_t* nv = f->nv;
  LLVMBuilderRef b = f->b;
  nv->info->threads = kThreads;
  // 255 registers a thread at 2 blocks an SM (ptxas: dq none spilled,
  // dkv at d 128 12-36 bytes); at d 64 dq takes 3 blocks (168 registers,
  // 16-20 bytes spilled), dkv 2 (at 3 it spilled up to 176 bytes).
  nv->info->min_blocks_per_sm =
      f->d == 64 && f->op == TJ_KIR_ATTENTION_DQ ? 3 : 2;
  f->smem = tj_nvptx_dynamic_shared(nv);
  f->tid = tj_nvptx_sreg(nv, "tid.x");
  f->lane = LLVMBuildAnd(b, f->tid, c32(f, 31), "lane");
  f->warp = LLVMBuildLShr(b, f->tid, c32(f, 5), "warp");
  return f->op == TJ_KIR_ATTENTION_DQ ? emit_dq(f) : emit_dkv(f);
}
