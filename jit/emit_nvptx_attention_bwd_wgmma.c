// attention_dkv on sm_90a's wgmma (issue 14, fa3bwd): FlashAttention-3's
// dK/dV loop for f16/bf16 q, k, v, dL/dy with head dims 64 and 128, no
// mask but causal, grouped-query heads. tj_nvptx_emit_attention_bwd picks
// it (tj_nvptx_options_t.attention_kernel); the mma.sync kernel of
// emit_nvptx_attention_bwd.c stays for the other archs and
// TJ_NVPTX_ATTENTION=mma.
//
//   grid: one block per (kDkvBN = 128 keys, kv head), the first keys
//     (causal's longest blocks) first, as the mma.sync kernel;
//   block: two consumer warpgroups, warpgroup w owning keys 64 w .. 64 w
//     + 63 of the block's; every thread also copies (cp.async);
//   shared memory: K and V once (128 rows), then per step (head g of the
//     group, query tile of bq = 64 rows) Q, dY and the tile's lse and
//     delta, triple buffered: step i + 1 copies under the whole of step i
//     (wgmma-stepwise: double buffered);
//   step i (one barrier):
//     cp.async.wait_group 0, fence.proxy.async, bar.sync (three buffers:
//       step i - 1's dV and dK may still run);
//     S^T = K . Q^T and dP^T = V . dY^T: d / 16 wgmma m64n<bq>k16 each,
//       both operands in shared memory (Q and dY are K-major Bs, as
//       stored), two commit groups;
//     wait for S^T (wait_group 1): P^T = 2^(s scale log2 e - lse log2 e)
//       on its fragment (column = query: lse by column), the causal mask
//       on the tiles that cross the diagonal, while dP^T's wgmmas run;
//     dV += P^T . dY issued; wait for dP^T: dS^T = P^T (dP^T - delta)
//       under dV's wgmmas; dK += dS^T . Q: P^T and dS^T rounded to the
//       input dtype are wgmma's A fragments from registers (the forward's
//       P), dY and Q MN-major Bs (trans-b: queries are wgmma's k); bq / 16
//       wgmma m64n<d>k16 each, waited for by step i + 1's first wait, so
//       that they run under its barrier and S^T (fa3bwd2; wgmma-stepwise:
//       before step i ends);
//     causal at d 64: a warpgroup whose keys all come after the step's
//       queries skips it (fa3bwd2);
//     wgmma-pingpong: the second warpgroup issues S^T and dP^T after the
//       first has issued its own (see pingpong(); off by default here).
//   dK (times scale) and dV staged in the warp's own rows of K and V, then
//     16-byte stores.
// Queries past Tq read zero rows with lse = delta = 0 (ds = 0, dy = 0);
// keys past Tk are zero rows whose dk and dv are not stored. No atomics:
// each dk/dv row is summed by one warpgroup, the same way every run.

#include <math.h>
#include <string.h>

#include "jit/emit_nvptx_attention.h"

#define kDkvBN 128    // keys a block: 64 a warpgroup
#define kMaxStep 128  // queries a dkv step, keys a dq step: at most

typedef struct dkv_t {
  fa_t* f;
  int32_t bq;       // queries a step
  int32_t q_bytes;  // a Q or dY tile
  tj_nvptx_fa_dkv_t blk;
  LLVMValueRef qt0, nq;  // first query tile, tiles a head
} dkv_t;

// The first query row of step |it| (i64): tile qt0 + it % nq.
static LLVMValueRef step_q0(dkv_t* s, LLVMValueRef it) {
  fa_t* f = s->f;
  LLVMBuilderRef b = f->b;
  return LLVMBuildMul(
      b, LLVMBuildAdd(b, s->qt0, LLVMBuildURem(b, it, s->nq, ""), ""),
      c64(f, s->bq), "q0");
}

// Starts the copies of step |it| (head g = it / nq of the group, its query
// tile) into Q, dY at bytes |qdst|, |qdst| + q_bytes, and its bq lse then
// bq delta floats at |ldst|: thread t < bq copies lse row t, t < 2 bq
// delta row t - bq (4 bytes at |ldst| + 4 t). Rows past Tq read nothing:
// zero rows, lse and delta 0.
static void issue_step(dkv_t* s, LLVMValueRef it, LLVMValueRef qdst,
                       LLVMValueRef ldst) {
  fa_t* f = s->f;
  LLVMBuilderRef b = f->b;
  tj_emit_t* em = f->em;
  LLVMValueRef gg = LLVMBuildUDiv(b, it, s->nq, "g");
  LLVMValueRef q0 = step_q0(s, it);
  tj_nvptx_fa_load_rows(f, f->smem, s->bq, f->qb,
                        tj_emit_advance(em, f->qb, s->blk.at.ptr[f->qb],
                                        LLVMBuildMul(b, gg, s->blk.sqg, "")),
                        s->blk.sq, q0, s->blk.tq, qdst);
  tj_nvptx_fa_load_rows(f, f->smem, s->bq, f->dob,
                        tj_emit_advance(em, f->dob, s->blk.at.ptr[f->dob],
                                        LLVMBuildMul(b, gg, s->blk.sdog, "")),
                        s->blk.sdo, q0, s->blk.tq,
                        LLVMBuildAdd(b, qdst, c32(f, s->q_bytes), ""));
  // Warps 0-3 (a uniform branch).
  tj_emit_if_t few;
  tj_emit_if_begin(em, &few,
                   LLVMBuildICmp(b, LLVMIntULT, f->tid, c32(f, 2 * s->bq), ""),
                   "ld");
  LLVMValueRef ltid = LLVMBuildZExt(b, f->tid, em->t_i64, "");
  LLVMValueRef row =
      LLVMBuildAdd(b, q0, LLVMBuildAnd(b, ltid, c64(f, s->bq - 1), ""), "");
  LLVMValueRef ok = LLVMBuildICmp(b, LLVMIntSLT, row, s->blk.tq, "");
  LLVMValueRef rc = tj_emit_select(em, ok, row, c64(f, 0));
  LLVMValueRef is_lse = LLVMBuildICmp(b, LLVMIntULT, f->tid, c32(f, s->bq), "");
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
  tj_emit_if_end(em, &few);
}

// Whether a step's last wgmmas (dV and dK; dQ) are waited for in the next
// step, under its barrier and first products, not before it ends
// (TJ_NVPTX_ATTENTION=wgmma-stepwise: before, as session 18's first
// kernels did).
static bool defer_waits(const tj_nvptx_emit_t* nv) {
  return nv->options.attention_kernel != TJ_NVPTX_ATTENTION_WGMMA_STEPWISE;
}

// Taking turns: the second warpgroup issues a step's first products (S^T and
// dP^T; S and dP) after the first has issued its own (named barrier 1: the
// first arrives, the second waits), so that the tensor cores take them in that
// order and the two warpgroups' exponentials run one after the other, each
// under products, rather than both at once under the first products alone. dq
// takes turns by default (round 1 on the H200: dq 0.741 -> 0.678 ms at d 128,
// 0.748 -> 0.731 at 64, T 2048), dkv only with wgmma-pingpong (its d 64 and
// causal steps ran 7-29% slower); wgmma-stepwise neither.
static bool pingpong(const tj_nvptx_emit_t* nv, bool dq) {
  const tj_nvptx_attention_kernel_t v = nv->options.attention_kernel;
  if (v == TJ_NVPTX_ATTENTION_WGMMA_PINGPONG) return true;
  return dq && v != TJ_NVPTX_ATTENTION_WGMMA_STEPWISE;
}

// The first warpgroup (|first|: wg == 0) arrives at named barrier 1 of
// kWgThreads threads, the second waits there (a uniform branch each).
static void order_warpgroups(fa_t* f, LLVMValueRef first, bool arrive) {
  tj_emit_if_t br;
  tj_emit_if_begin(f->em, &br, arrive ? first : LLVMBuildNot(f->b, first, ""),
                   arrive ? "wg_arrive" : "wg_wait");
  tj_nvptx_fa_asm(f, arrive ? "bar.arrive 1, 256;" : "bar.sync 1, 256;");
  tj_emit_if_end(f->em, &br);
}

// a * b + c (f32), one fma.rn.
static LLVMValueRef fma3(fa_t* f, LLVMValueRef a, LLVMValueRef b,
                         LLVMValueRef c) {
  LLVMValueRef args[3] = {a, b, c};
  return tj_emit_intrinsic(f->em, "llvm.fma", &f->em->t_f32, 1, args, 3);
}

// |n| f32 slots in the entry block, zeroed (SROA makes them registers).
static void zero_slots(fa_t* f, LLVMValueRef* slot, int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    slot[i] = tj_emit_alloca(f->em, f->em->t_f32, "acc");
    LLVMBuildStore(f->b, cf(f, 0.0), slot[i]);
  }
}

static void load_slots(fa_t* f, LLVMValueRef* slot, LLVMValueRef* out,
                       int32_t n) {
  for (int32_t i = 0; i < n; ++i) out[i] = load_f32(f, slot[i]);
}

static void store_slots(fa_t* f, LLVMValueRef* slot, LLVMValueRef* v,
                        int32_t n) {
  for (int32_t i = 0; i < n; ++i) LLVMBuildStore(f->b, v[i], slot[i]);
}

// Fragment (m64n<bq>) columns n-blocks 2 kk, 2 kk + 1 as the A fragment of
// k-block kk, rounded to the input dtype.
static void pack_a(fa_t* f, LLVMValueRef (*c)[4], int32_t nkk,
                   LLVMValueRef (*out)[4]) {
  for (int32_t i = 0; i < nkk; ++i) {
    out[i][0] = pack(f, c[2 * i][0], c[2 * i][1]);
    out[i][1] = pack(f, c[2 * i][2], c[2 * i][3]);
    out[i][2] = pack(f, c[2 * i + 1][0], c[2 * i + 1][1]);
    out[i][3] = pack(f, c[2 * i + 1][2], c[2 * i + 1][3]);
  }
}

// Issues d / 16 k16 wgmmas acc (m64n<b_rows>) = A . B^T over the head
// dim, A the 64 rows at shared address |a_addr| of a panelled tile of
// |a_rows| rows, B the tile of |b_rows| rows at |b_addr| (K-major);
// commits them as one group.
static void issue_nt(fa_t* f, LLVMValueRef* acc, LLVMValueRef a_addr,
                     int32_t a_rows, LLVMValueRef b_addr, int32_t b_rows) {
  LLVMBuilderRef b = f->b;
  tj_emit_t* em = f->em;
  for (int32_t i = 0; i < b_rows / 2; ++i) acc[i] = LLVMGetUndef(em->t_f32);
  tj_nvptx_fa_asm(f, "wgmma.fence.sync.aligned;");
  for (int32_t kk = 0; kk < f->d / 16; ++kk) {
    // +32 bytes per k16 inside a panel, the next panel every 4.
    LLVMValueRef da = tj_nvptx_wgmma_descriptor(
        em,
        LLVMBuildAdd(b, a_addr,
                     c32(f, (kk / 4) * a_rows * kSwRow + (kk % 4) * 32), ""),
        16, kSwAtom);
    LLVMValueRef db = tj_nvptx_wgmma_descriptor(
        em,
        LLVMBuildAdd(b, b_addr,
                     c32(f, (kk / 4) * b_rows * kSwRow + (kk % 4) * 32), ""),
        16, kSwAtom);
    tj_nvptx_fa_wgmma_ss(f, acc, b_rows, da, db, kk > 0);
  }
  tj_nvptx_fa_asm(f, "wgmma.commit_group.sync.aligned;");
}

// Issues acc (m64n<d>) += A . B, A the |nkk| register fragments |af| (16
// k each), B the first 16 nkk rows of the [b_rows, d] tile at shared
// address |b_addr| (MN-major); one commit group.
static void issue_nn(fa_t* f, LLVMValueRef* acc, LLVMValueRef (*af)[4],
                     int32_t nkk, LLVMValueRef b_addr, int32_t b_rows) {
  LLVMBuilderRef b = f->b;
  tj_nvptx_fa_asm(f, "wgmma.fence.sync.aligned;");
  for (int32_t kk = 0; kk < nkk; ++kk) {
    // 16 rows per k16; the 64-column panels b_rows rows apart.
    LLVMValueRef db = tj_nvptx_wgmma_descriptor(
        f->em, LLVMBuildAdd(b, b_addr, c32(f, kk * 16 * kSwRow), ""),
        b_rows * kSwRow, kSwAtom);
    tj_nvptx_fa_wgmma_rs(f, acc, f->d, af[kk], db);
  }
  tj_nvptx_fa_asm(f, "wgmma.commit_group.sync.aligned;");
}

// Stores the warp's 16 rows of |acc| (m64n<d>) times |mul| as rows
// |row0| .. of the output at |dst| (|stride| elements a row, |col| in),
// rows >= |limit| skipped; staged in the same rows of the panelled
// tile of |stage_rows| rows at byte |stage|. |wrow|: the warp's first row of
// the block's, |g|, |t2| its lane's fragment row and column.
static void store_rows(fa_t* f, LLVMValueRef* acc, double mul, int32_t stage,
                       int32_t stage_rows, LLVMValueRef wrow, LLVMValueRef g,
                       LLVMValueRef t2, LLVMValueRef dst, LLVMValueRef row0,
                       LLVMValueRef limit, LLVMValueRef stride, int64_t col) {
  LLVMBuilderRef b = f->b;
  tj_emit_t* em = f->em;
  LLVMValueRef t4 = LLVMBuildShl(b, t2, c32(f, 1), "");  // 4t bytes
  for (int32_t j = 0; j < f->d / 8; ++j) {
    for (int32_t h = 0; h < 2; ++h) {
      LLVMValueRef v =
          pack(f, LLVMBuildFMul(b, acc[4 * j + 2 * h], cf(f, mul), ""),
               LLVMBuildFMul(b, acc[4 * j + 2 * h + 1], cf(f, mul), ""));
      LLVMValueRef row =
          LLVMBuildAdd(b, wrow, LLVMBuildAdd(b, g, c32(f, 8 * h), ""), "");
      LLVMValueRef off = LLVMBuildAdd(
          b, c32(f, stage),
          LLVMBuildAdd(b,
                       tj_nvptx_fa_panel_offset(f, stage_rows, row, c32(f, j)),
                       t4, ""),
          "");
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
    LLVMValueRef row = LLVMBuildAdd(b, wrow, rw, "");
    LLVMValueRef gi =
        LLVMBuildAdd(b, row0, LLVMBuildZExt(b, row, em->t_i64, ""), "");
    LLVMValueRef v = LLVMBuildLoad2(
        b, v4,
        smem_at(f, LLVMBuildAdd(
                       b, c32(f, stage),
                       tj_nvptx_fa_panel_offset(f, stage_rows, row, ch), "")),
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

tj_status_t tj_nvptx_emit_attention_dkv_wgmma(fa_t* f) {
  tj_nvptx_emit_t* nv = f->nv;
  tj_emit_t* em = f->em;
  LLVMBuilderRef b = f->b;
  const tj_kir_t* k = f->k;
  const int32_t d = f->d, nacc = d / 2;
  const bool causal = k->attention.causal;
  dkv_t st;
  memset(&st, 0, sizeof(st));
  st.f = f;
  // Queries a step: 64. 128 at d 64 (S^T and dP^T in 128 registers
  // beside dK and dV's 64) spilled 88-316 bytes.
  const int32_t bq = 64;
  st.bq = bq;
  st.q_bytes = bq * d * 2;
  const int32_t kv_bytes = kDkvBN * d * 2;
  const int32_t l_bytes = 2 * bq * 4;  // a step's lse and delta
  // K, V, then three (Q, dY) pairs, then three (lse, delta) pairs: step
  // i's dV and dK are waited for in step i + 1, so step i + 1's copies go
  // to a third buffer.
  const int32_t sK = 0, sV = kv_bytes, sQ = 2 * kv_bytes;
  const bool defer = defer_waits(nv);
  const int32_t nqb = defer ? 3 : 2;
  const int32_t sL = sQ + 2 * nqb * st.q_bytes;
  tj_nvptx_kernel_t* info = nv->info;
  info->threads = kWgThreads;
  // The slack aligns the tiles to the swizzle's 1024-byte period.
  info->shared_bytes = sL + nqb * l_bytes + kSwAtom;
  info->min_blocks_per_sm = 1;
  info->wgmma = true;
  info->tile_m = kDkvBN;
  info->tile_n = bq;
  LLVMValueRef dyn = tj_nvptx_dynamic_shared(nv);
  LLVMValueRef addr = LLVMBuildPtrToInt(b, dyn, em->t_i32, "");
  LLVMValueRef pad = LLVMBuildAnd(b, LLVMBuildSub(b, c32(f, 0), addr, ""),
                                  c32(f, kSwAtom - 1), "");
  f->smem = LLVMBuildGEP2(b, em->t_i8, dyn, &pad, 1, "tiles");
  LLVMValueRef tiles_addr = LLVMBuildAdd(b, addr, pad, "tiles_addr");
  f->tid = tj_nvptx_sreg(nv, "tid.x");
  f->lane = LLVMBuildAnd(b, f->tid, c32(f, 31), "lane");
  f->warp = LLVMBuildLShr(b, f->tid, c32(f, 5), "warp");
  LLVMValueRef wg = LLVMBuildLShr(b, f->tid, c32(f, 7), "wg");

  tj_nvptx_fa_dkv_setup(f, kDkvBN, &st.blk);
  const tj_nvptx_fa_dkv_t* blk = &st.blk;
  LLVMValueRef tq = blk->tq, tk = blk->tk, group = blk->group;
  LLVMValueRef k0 = blk->k0;
  LLVMValueRef sk = blk->sk, sv = blk->sv, so = blk->so;

  LLVMValueRef krows = LLVMBuildSub(b, tk, k0, "");
  tj_nvptx_fa_load_rows(f, f->smem, kDkvBN, f->kb,
                        tj_emit_advance(em, f->kb, blk->at.ptr[f->kb],
                                        LLVMBuildMul(b, k0, sk, "")),
                        sk, c64(f, 0), krows, c32(f, sK));
  tj_nvptx_fa_load_rows(f, f->smem, kDkvBN, f->vb,
                        tj_emit_advance(em, f->vb, blk->at.ptr[f->vb],
                                        LLVMBuildMul(b, k0, sv, "")),
                        sv, c64(f, 0), krows, c32(f, sV));
  commit(f);

  // Steps: (g, query tile) for g < G, query tiles from qt0 (causal: the
  // tile of the block's first key; no earlier query sees it).
  LLVMValueRef qtiles =
      LLVMBuildSDiv(b, LLVMBuildAdd(b, tq, c64(f, bq - 1), ""), c64(f, bq), "");
  st.qt0 =
      causal ? tj_emit_min_i64(em, LLVMBuildSDiv(b, k0, c64(f, bq), ""), qtiles)
             : c64(f, 0);
  st.nq = LLVMBuildSub(b, qtiles, st.qt0, "nq");
  LLVMValueRef steps = LLVMBuildMul(b, group, st.nq, "steps");
  tj_emit_if_t first;
  tj_emit_if_begin(em, &first,
                   LLVMBuildICmp(b, LLVMIntSGT, steps, c64(f, 0), ""), "step0");
  issue_step(&st, c64(f, 0), c32(f, sQ), c32(f, sL));
  tj_emit_if_end(em, &first);
  commit(f);

  // Per thread: rows (keys) g, g + 8 of its warp's 16, columns 2t, 2t + 1
  // of each 8-column block.
  LLVMValueRef g = LLVMBuildLShr(b, f->lane, c32(f, 2), "g");
  LLVMValueRef t2 =
      LLVMBuildShl(b, LLVMBuildAnd(b, f->lane, c32(f, 3), ""), c32(f, 1), "");
  LLVMValueRef wrow = LLVMBuildMul(b, f->warp, c32(f, 16), "wrow");  // block
  LLVMValueRef key[2];
  for (int32_t h = 0; h < 2; ++h) {
    LLVMValueRef rr =
        LLVMBuildAdd(b, wrow, LLVMBuildAdd(b, g, c32(f, 8 * h), ""), "");
    key[h] = LLVMBuildAdd(b, k0, LLVMBuildZExt(b, rr, em->t_i64, ""), "key");
  }
  // The warpgroup's K and V rows: 64 wg rows into each panel.
  LLVMValueRef wg_off = LLVMBuildMul(b, wg, c32(f, 64 * kSwRow), "");
  LLVMValueRef k_addr =
      LLVMBuildAdd(b, tiles_addr, LLVMBuildAdd(b, c32(f, sK), wg_off, ""), "");
  LLVMValueRef v_addr =
      LLVMBuildAdd(b, tiles_addr, LLVMBuildAdd(b, c32(f, sV), wg_off, ""), "");
  LLVMValueRef dk_slot[64], dv_slot[64];
  zero_slots(f, dk_slot, nacc);
  zero_slots(f, dv_slot, nacc);
  const double c2 = k->attention.scale * kLog2e;

  tj_emit_loop_t loop;
  LLVMValueRef it =
      tj_emit_loop_begin(em, &loop, c64(f, 0), steps, c64(f, 1), "step");
  // Step it's Q, dY, lse and delta have landed for both proxies; every
  // warpgroup is past step it - 1, so step it - 2's wgmmas are done (each
  // waits for the step before's in its first wait) and its buffers take
  // step it + 1.
  wait_groups(f, 0);
  tj_nvptx_fa_asm(f, "fence.proxy.async.shared::cta;");
  tj_nvptx_barrier(nv);
  LLVMValueRef sel =
      LLVMBuildTrunc(b, LLVMBuildURem(b, it, c64(f, nqb), ""), em->t_i32, "");
  LLVMValueRef sel_n =
      tj_emit_select(em, LLVMBuildICmp(b, LLVMIntEQ, sel, c32(f, nqb - 1), ""),
                     c32(f, 0), LLVMBuildAdd(b, sel, c32(f, 1), ""));
  LLVMValueRef qcur = LLVMBuildAdd(
      b, c32(f, sQ), LLVMBuildMul(b, sel, c32(f, 2 * st.q_bytes), ""), "qcur");
  LLVMValueRef ocur = LLVMBuildAdd(b, qcur, c32(f, st.q_bytes), "ocur");
  LLVMValueRef lcur = LLVMBuildAdd(
      b, c32(f, sL), LLVMBuildMul(b, sel, c32(f, l_bytes), ""), "lcur");
  LLVMValueRef itn = LLVMBuildAdd(b, it, c64(f, 1), "");
  tj_emit_if_t next;
  tj_emit_if_begin(em, &next, LLVMBuildICmp(b, LLVMIntSLT, itn, steps, ""),
                   "stepnext");
  issue_step(
      &st, itn,
      LLVMBuildAdd(b, c32(f, sQ),
                   LLVMBuildMul(b, sel_n, c32(f, 2 * st.q_bytes), ""), ""),
      LLVMBuildAdd(b, c32(f, sL), LLVMBuildMul(b, sel_n, c32(f, l_bytes), ""),
                   ""));
  tj_emit_if_end(em, &next);
  commit(f);

  // Causal: a warpgroup whose first key comes after the step's last query
  // (the second one on the block's first step of each head: queries k0 ..
  // k0 + 63) has p = 0 and ds = 0 in every place, adds nothing and skips
  // the step, leaving the tensor cores to the other (a uniform branch).
  // At d 64 only: at 128 the branch spilled 96-108 bytes (ptxas).
  LLVMValueRef q0 = step_q0(&st, it);
  const bool pp = pingpong(nv, false);
  LLVMValueRef wg_first =
      pp ? LLVMBuildICmp(b, LLVMIntEQ, wg, c32(f, 0), "") : NULL;
  if (pp) order_warpgroups(f, wg_first, false);
  const bool skips = causal && d == 64;
  tj_emit_if_t live;
  LLVMValueRef is_live = NULL;
  if (skips) {
    LLVMValueRef wkey0 = LLVMBuildAdd(
        b, k0,
        LLVMBuildZExt(b, LLVMBuildShl(b, wg, c32(f, 6), ""), em->t_i64, ""),
        "wkey0");
    is_live = LLVMBuildICmp(b, LLVMIntSGT, LLVMBuildAdd(b, q0, c64(f, bq), ""),
                            wkey0, "live");
    tj_emit_if_begin(em, &live, is_live, "live");
  }
  LLVMValueRef q_addr = LLVMBuildAdd(b, tiles_addr, qcur, "q_addr");
  LLVMValueRef o_addr = LLVMBuildAdd(b, tiles_addr, ocur, "o_addr");
  LLVMValueRef sf[kMaxStep / 2], dpf[kMaxStep / 2];
  issue_nt(f, sf, k_addr, kDkvBN, q_addr, bq);
  issue_nt(f, dpf, v_addr, kDkvBN, o_addr, bq);
  // The first warpgroup is never skipped (its keys start at the block's
  // first, no later than any step's first query), so it always arrives.
  if (pp) order_warpgroups(f, wg_first, true);
  // S^T, and with it the step before's dV and dK (issued before it).
  tj_nvptx_fa_wgmma_wait(f, 1, sf, bq / 2);
  LLVMValueRef(*s)[4] = (LLVMValueRef(*)[4])sf;
  LLVMValueRef(*dp)[4] = (LLVMValueRef(*)[4])dpf;
  const int32_t ns = bq / 8;
  // The exponent s scale log2 e - lse log2 e, one fma; the columns' lse
  // (then delta) as pairs (2t, 2t + 1) of each block.
  LLVMTypeRef f2 = LLVMVectorType(em->t_f32, 2);
  LLVMValueRef loff[kMaxStep / 8];
  for (int32_t n = 0; n < ns; ++n) {
    LLVMValueRef col = LLVMBuildAdd(b, t2, c32(f, 8 * n), "");
    LLVMValueRef off = loff[n] =
        LLVMBuildAdd(b, lcur, LLVMBuildShl(b, col, c32(f, 2), ""), "");
    LLVMValueRef lv = LLVMBuildLoad2(b, f2, smem_at(f, off), "");
    LLVMSetAlignment(lv, 8);
    for (int32_t e = 0; e < 4; ++e) {
      LLVMValueRef l2 =
          LLVMBuildFMul(b, LLVMBuildExtractElement(b, lv, c32(f, e & 1), ""),
                        cf(f, -kLog2e), "");
      s[n][e] = fma3(f, s[n][e], cf(f, c2), l2);
    }
  }
  if (causal) {
    // Column (query q0 + col) kept where col >= key - q0; only steps whose
    // queries start before the block's last key need it (a uniform
    // branch).
    LLVMBasicBlockRef plain = LLVMGetInsertBlock(b);
    tj_emit_if_t br;
    tj_emit_if_begin(em, &br,
                     LLVMBuildICmp(b, LLVMIntSLT, q0,
                                   LLVMBuildAdd(b, k0, c64(f, kDkvBN), ""), ""),
                     "mask");
    LLVMValueRef bound[2];
    for (int32_t h = 0; h < 2; ++h) {
      LLVMValueRef x = LLVMBuildSub(b, key[h], q0, "");
      x = tj_emit_select(em, LLVMBuildICmp(b, LLVMIntSLT, x, c64(f, 0), ""),
                         c64(f, 0), x);
      x = tj_emit_min_i64(em, x, c64(f, bq));
      bound[h] = LLVMBuildTrunc(b, x, em->t_i32, "");
    }
    LLVMValueRef m[kMaxStep / 8][4];
    for (int32_t n = 0; n < ns; ++n)
      for (int32_t e = 0; e < 4; ++e) {
        LLVMValueRef col = LLVMBuildAdd(b, t2, c32(f, 8 * n + (e & 1)), "");
        LLVMValueRef ok = LLVMBuildICmp(b, LLVMIntSGE, col, bound[e / 2], "");
        m[n][e] = tj_emit_select(em, ok, s[n][e], cf(f, -INFINITY));
      }
    LLVMBasicBlockRef masked = LLVMGetInsertBlock(b);
    tj_emit_if_end(em, &br);
    for (int32_t n = 0; n < ns; ++n)
      for (int32_t e = 0; e < 4; ++e) {
        LLVMValueRef phi = LLVMBuildPhi(b, em->t_f32, "");
        LLVMValueRef vals[2] = {m[n][e], s[n][e]};
        LLVMBasicBlockRef from[2] = {masked, plain};
        LLVMAddIncoming(phi, vals, from, 2);
        s[n][e] = phi;
      }
  }
  for (int32_t n = 0; n < ns; ++n)
    for (int32_t e = 0; e < 4; ++e) s[n][e] = ex2(f, s[n][e]);  // P^T
  // dV += P^T . dY runs under dS^T's arithmetic.
  LLVMValueRef pf[kMaxStep / 16][4], dsf[kMaxStep / 16][4];
  pack_a(f, s, bq / 16, pf);
  LLVMValueRef dv[64], dk[64];
  load_slots(f, dv_slot, dv, nacc);
  issue_nn(f, dv, pf, bq / 16, o_addr, bq);
  tj_nvptx_fa_wgmma_wait(f, 1, dpf, bq / 2);  // dP^T; dV may run
  LLVMValueRef dl[kMaxStep / 8];
  for (int32_t n = 0; n < ns; ++n) {
    dl[n] = LLVMBuildLoad2(
        b, f2, smem_at(f, LLVMBuildAdd(b, loff[n], c32(f, 4 * bq), "")), "");
    LLVMSetAlignment(dl[n], 8);
  }
  for (int32_t n = 0; n < ns; ++n)
    for (int32_t e = 0; e < 4; ++e)
      dp[n][e] = LLVMBuildFMul(
          b, s[n][e],
          LLVMBuildFSub(b, dp[n][e],
                        LLVMBuildExtractElement(b, dl[n], c32(f, e & 1), ""),
                        ""),
          "");  // ds^T
  pack_a(f, dp, bq / 16, dsf);
  load_slots(f, dk_slot, dk, nacc);
  issue_nn(f, dk, dsf, bq / 16, q_addr, bq);
  // Deferred: dV and dK run on under the next step's barrier and S^T,
  // dP^T; nothing touches their registers before that step's first wait.
  if (!defer) {
    tj_nvptx_fa_wgmma_wait(f, 1, dv, nacc);
    tj_nvptx_fa_wgmma_wait(f, 0, dk, nacc);
  }
  store_slots(f, dv_slot, dv, nacc);
  store_slots(f, dk_slot, dk, nacc);
  if (skips) {
    tj_emit_if_end(em, &live);
    // A skipped step still waits for the step before's dV and dK, whose
    // buffers step it + 2's copies take at the next barrier.
    if (defer) {
      tj_emit_if_t skip;
      tj_emit_if_begin(em, &skip, LLVMBuildNot(b, is_live, ""), "skip");
      load_slots(f, dv_slot, dv, nacc);
      load_slots(f, dk_slot, dk, nacc);
      tj_nvptx_fa_wgmma_wait(f, 0, dv, nacc);
      tj_nvptx_fa_wgmma_wait(f, 0, dk, nacc);
      store_slots(f, dv_slot, dv, nacc);
      store_slots(f, dk_slot, dk, nacc);
      tj_emit_if_end(em, &skip);
    }
  }
  tj_emit_loop_end(em, &loop);

  load_slots(f, dk_slot, dk, nacc);
  load_slots(f, dv_slot, dv, nacc);
  if (defer) {
    tj_nvptx_fa_wgmma_wait(f, 0, dv, nacc);
    tj_nvptx_fa_wgmma_wait(f, 0, dk, nacc);
  }
  // With no step, K and V's copies may still be in flight; every
  // warpgroup's wgmmas have read K and V before their rows are reused.
  wait_groups(f, 0);
  tj_nvptx_barrier(nv);
  store_rows(f, dk, k->attention.scale, sK, kDkvBN, wrow, g, t2,
             blk->at.ptr[f->ob], k0, tk, so, 0);
  store_rows(f, dv, 1.0, sV, kDkvBN, wrow, g, t2, blk->at.ptr[f->ob], k0, tk,
             so, d);
  return NULL;
}

// attention_dq on wgmma: the forward's block (kWgBM = 128 query rows over
// two warpgroups, tj_nvptx_fa_block) and K/V tiles of bn keys (V double
// buffered, K triple where dQ's wait is deferred); Q and dY once; per
// step j (the second warpgroup issuing S and dP after the first,
// pingpong(), unless wgmma-stepwise):
//   S = Q . K_j^T and dP = dY . V_j^T (wgmma m64n<bn>k16 from shared
//   memory, K and V K-major Bs), two groups; wait for S: P = 2^(s scale
//   log2 e - lse log2 e) (lse by row, in registers), masks on tiles that
//   reach past Tk or the block's first diagonal; wait for dP: dS = P (dP -
//   delta); dQ += dS . K_j (dS the A fragment from registers, K an MN-major
//   B: keys are wgmma's k); waited for by step j + 1's first wait at one
//   block an SM (d 128; fa3bwd2), before the next step at two (d 64).
// dQ times scale is staged in the warp's own rows of Q.
#define kDqBM 128

tj_status_t tj_nvptx_emit_attention_dq_wgmma(fa_t* f) {
  tj_nvptx_emit_t* nv = f->nv;
  tj_emit_t* em = f->em;
  LLVMBuilderRef b = f->b;
  const tj_kir_t* k = f->k;
  const int32_t r = k->rank, d = f->d, nacc = d / 2;
  const bool causal = k->attention.causal;
  // Keys a step: 64, or with TJ_NVPTX_ATTENTION=wgmma-wide 128 at d 64.
  const int32_t bn =
      nv->options.attention_kernel == TJ_NVPTX_ATTENTION_WGMMA_WIDE && d == 64
          ? 128
          : 64;
  const int32_t q_bytes = kDqBM * d * 2, kv_bytes = bn * d * 2;
  // Q, dY, then K_0, K_1, V_0, V_1.
  // Q, dY, three K buffers (step j's dQ, which reads K_j, is waited for in
  // step j + 1, whose copies go to a third buffer; stepwise: two), two V.
  // Two blocks an SM (d 64, 64 keys a step) wait in the step: in 128
  // registers dQ in flight beside S and dP serialized the wgmmas (C7512).
  const bool two_blocks = d == 64 && bn == 64;
  const bool defer = defer_waits(nv) && !two_blocks;
  const int32_t nkb = defer ? 3 : 2;
  const int32_t sQ = 0, sO = q_bytes, sK = 2 * q_bytes,
                sV = 2 * q_bytes + nkb * kv_bytes;
  tj_nvptx_kernel_t* info = nv->info;
  info->threads = kWgThreads;
  info->shared_bytes = sV + 2 * kv_bytes + kSwAtom;
  // At d 64 two blocks an SM (64 KiB each; ptxas: 128 registers, 0-4
  // bytes spilled), so that one's exponentials run under the other's
  // wgmmas, as the forward's blocks do; at d 128 one (223-243 registers).
  info->min_blocks_per_sm = two_blocks ? 2 : 1;
  info->wgmma = true;
  info->tile_m = kDqBM;
  info->tile_n = bn;
  LLVMValueRef dyn = tj_nvptx_dynamic_shared(nv);
  LLVMValueRef addr = LLVMBuildPtrToInt(b, dyn, em->t_i32, "");
  LLVMValueRef pad = LLVMBuildAnd(b, LLVMBuildSub(b, c32(f, 0), addr, ""),
                                  c32(f, kSwAtom - 1), "");
  f->smem = LLVMBuildGEP2(b, em->t_i8, dyn, &pad, 1, "tiles");
  LLVMValueRef tiles_addr = LLVMBuildAdd(b, addr, pad, "tiles_addr");
  f->tid = tj_nvptx_sreg(nv, "tid.x");
  f->lane = LLVMBuildAnd(b, f->tid, c32(f, 31), "lane");
  f->warp = LLVMBuildLShr(b, f->tid, c32(f, 5), "warp");
  LLVMValueRef wg = LLVMBuildLShr(b, f->tid, c32(f, 7), "wg");
  tj_nvptx_fa_block_t blk;
  tj_nvptx_fa_block(f, kDqBM, bn, &blk);
  LLVMValueRef tq = blk.tq, tk = blk.tk, q0 = blk.q0, ntiles = blk.ntiles;
  const tj_emit_point_t at = blk.at;
  LLVMValueRef sq = tj_emit_stride(em, f->qb, r - 2);
  LLVMValueRef sdo = tj_emit_stride(em, f->dob, r - 2);
  LLVMValueRef sk = tj_emit_stride(em, f->kb, r - 1);
  LLVMValueRef sv = tj_emit_stride(em, f->vb, r - 1);
  LLVMValueRef so = tj_emit_stride(em, f->ob, r - 2);
  LLVMValueRef sl = tj_emit_stride(em, f->lseb, r - 2);
  LLVMValueRef sdl = tj_emit_stride(em, f->deltab, r - 2);

  // Q, dY, K_0 and V_0.
  LLVMValueRef qrows = LLVMBuildSub(b, tq, q0, "");
  tj_nvptx_fa_load_rows(
      f, f->smem, kDqBM, f->qb,
      tj_emit_advance(em, f->qb, at.ptr[f->qb], LLVMBuildMul(b, q0, sq, "")),
      sq, c64(f, 0), qrows, c32(f, sQ));
  tj_nvptx_fa_load_rows(
      f, f->smem, kDqBM, f->dob,
      tj_emit_advance(em, f->dob, at.ptr[f->dob], LLVMBuildMul(b, q0, sdo, "")),
      sdo, c64(f, 0), qrows, c32(f, sO));
  tj_nvptx_fa_load_rows(f, f->smem, bn, f->kb, at.ptr[f->kb], sk, c64(f, 0), tk,
                        c32(f, sK));
  tj_nvptx_fa_load_rows(f, f->smem, bn, f->vb, at.ptr[f->vb], sv, c64(f, 0), tk,
                        c32(f, sV));
  commit(f);

  // This thread's rows g and g + 8 of its warp's 16: -lse in base 2 (-inf
  // for a row with no key, so that its p is 0), delta, the keys it sees.
  LLVMValueRef g = LLVMBuildLShr(b, f->lane, c32(f, 2), "g");
  LLVMValueRef t2 =
      LLVMBuildShl(b, LLVMBuildAnd(b, f->lane, c32(f, 3), ""), c32(f, 1), "");
  LLVMValueRef wrow = LLVMBuildMul(b, f->warp, c32(f, 16), "wrow");
  LLVMValueRef tq_1 = LLVMBuildSub(b, tq, c64(f, 1), "");
  LLVMValueRef nlse2[2], delta[2], row_lim[2];
  for (int32_t h = 0; h < 2; ++h) {
    LLVMValueRef rr =
        LLVMBuildAdd(b, wrow, LLVMBuildAdd(b, g, c32(f, 8 * h), ""), "");
    LLVMValueRef i =
        LLVMBuildAdd(b, q0, LLVMBuildZExt(b, rr, em->t_i64, ""), "i");
    LLVMValueRef ic = tj_emit_min_i64(em, i, tq_1);  // rows past Tq: any row
    LLVMValueRef lse =
        LLVMBuildLoad2(b, em->t_f32,
                       tj_emit_advance(em, f->lseb, at.ptr[f->lseb],
                                       LLVMBuildMul(b, ic, sl, "")),
                       "");
    nlse2[h] = tj_emit_select(
        em, LLVMBuildFCmp(b, LLVMRealOEQ, lse, cf(f, -INFINITY), ""),
        cf(f, -INFINITY), LLVMBuildFMul(b, lse, cf(f, -kLog2e), ""));
    delta[h] = LLVMBuildLoad2(b, em->t_f32,
                              tj_emit_advance(em, f->deltab, at.ptr[f->deltab],
                                              LLVMBuildMul(b, ic, sdl, "")),
                              "");
    row_lim[h] =
        causal ? tj_emit_min_i64(em, tk, LLVMBuildAdd(b, i, c64(f, 1), ""))
               : tk;
  }
  // The keys every row of the block sees: tiles below need no mask.
  LLVMValueRef lim_lo =
      causal ? tj_emit_min_i64(em, tk, LLVMBuildAdd(b, q0, c64(f, 1), "")) : tk;
  LLVMValueRef wg_off = LLVMBuildMul(b, wg, c32(f, 64 * kSwRow), "");
  LLVMValueRef q_addr =
      LLVMBuildAdd(b, tiles_addr, LLVMBuildAdd(b, c32(f, sQ), wg_off, ""), "");
  LLVMValueRef o_addr =
      LLVMBuildAdd(b, tiles_addr, LLVMBuildAdd(b, c32(f, sO), wg_off, ""), "");
  LLVMValueRef dq_slot[64];
  zero_slots(f, dq_slot, nacc);
  const double c2 = k->attention.scale * kLog2e;

  tj_emit_loop_t loop;
  LLVMValueRef jt =
      tj_emit_loop_begin(em, &loop, c64(f, 0), ntiles, c64(f, 1), "kv");
  // K_j, V_j (and Q, dY) have landed for both proxies; every warpgroup is
  // past step j - 1, whose buffers now take K_j+1 and V_j+1.
  wait_groups(f, 0);
  tj_nvptx_fa_asm(f, "fence.proxy.async.shared::cta;");
  tj_nvptx_barrier(nv);
  LLVMValueRef odd = LLVMBuildMul(
      b, LLVMBuildTrunc(b, LLVMBuildAnd(b, jt, c64(f, 1), ""), em->t_i32, ""),
      c32(f, kv_bytes), "");
  LLVMValueRef ksel =
      LLVMBuildTrunc(b, LLVMBuildURem(b, jt, c64(f, nkb), ""), em->t_i32, "");
  LLVMValueRef ksel_n =
      tj_emit_select(em, LLVMBuildICmp(b, LLVMIntEQ, ksel, c32(f, nkb - 1), ""),
                     c32(f, 0), LLVMBuildAdd(b, ksel, c32(f, 1), ""));
  LLVMValueRef kcur = LLVMBuildAdd(
      b, c32(f, sK), LLVMBuildMul(b, ksel, c32(f, kv_bytes), ""), "kcur");
  LLVMValueRef vcur = LLVMBuildAdd(b, c32(f, sV), odd, "vcur");
  LLVMValueRef jn = LLVMBuildAdd(b, jt, c64(f, 1), "");
  tj_emit_if_t next;
  tj_emit_if_begin(em, &next, LLVMBuildICmp(b, LLVMIntSLT, jn, ntiles, ""),
                   "kvnext");
  LLVMValueRef jn0 = LLVMBuildMul(b, jn, c64(f, bn), "");
  tj_nvptx_fa_load_rows(
      f, f->smem, bn, f->kb, at.ptr[f->kb], sk, jn0, tk,
      LLVMBuildAdd(b, c32(f, sK), LLVMBuildMul(b, ksel_n, c32(f, kv_bytes), ""),
                   ""));
  tj_nvptx_fa_load_rows(f, f->smem, bn, f->vb, at.ptr[f->vb], sv, jn0, tk,
                        LLVMBuildSub(b, c32(f, 2 * sV + kv_bytes), vcur, ""));
  tj_emit_if_end(em, &next);
  commit(f);

  LLVMValueRef k_addr = LLVMBuildAdd(b, tiles_addr, kcur, "k_addr");
  LLVMValueRef v_addr = LLVMBuildAdd(b, tiles_addr, vcur, "v_addr");
  LLVMValueRef sf[kMaxStep / 2], dpf[kMaxStep / 2];
  const bool pp = pingpong(nv, true);
  LLVMValueRef wg_first =
      pp ? LLVMBuildICmp(b, LLVMIntEQ, wg, c32(f, 0), "") : NULL;
  if (pp) order_warpgroups(f, wg_first, false);
  issue_nt(f, sf, q_addr, kDqBM, k_addr, bn);
  issue_nt(f, dpf, o_addr, kDqBM, v_addr, bn);
  if (pp) order_warpgroups(f, wg_first, true);
  tj_nvptx_fa_wgmma_wait(f, 1, sf, bn / 2);
  LLVMValueRef(*s)[4] = (LLVMValueRef(*)[4])sf;
  LLVMValueRef(*dp)[4] = (LLVMValueRef(*)[4])dpf;
  const int32_t ns = bn / 8;
  // The exponent s scale log2 e - lse log2 e, one fma (-inf where lse is:
  // p = 0).
  for (int32_t n = 0; n < ns; ++n)
    for (int32_t e = 0; e < 4; ++e)
      s[n][e] = fma3(f, s[n][e], cf(f, c2), nlse2[e / 2]);
  // Keys past Tk and (causal) past the row: only tiles that reach past
  // the keys every row of the block sees (a uniform branch).
  LLVMValueRef j0 = LLVMBuildMul(b, jt, c64(f, bn), "j0");
  {
    LLVMBasicBlockRef plain = LLVMGetInsertBlock(b);
    tj_emit_if_t br;
    tj_emit_if_begin(
        em, &br,
        LLVMBuildICmp(b, LLVMIntSGT, LLVMBuildAdd(b, j0, c64(f, bn), ""),
                      lim_lo, ""),
        "mask");
    LLVMValueRef rel[2];
    for (int32_t h = 0; h < 2; ++h) {
      LLVMValueRef x = LLVMBuildSub(b, row_lim[h], j0, "");
      x = tj_emit_select(em, LLVMBuildICmp(b, LLVMIntSLT, x, c64(f, 0), ""),
                         c64(f, 0), x);
      x = tj_emit_min_i64(em, x, c64(f, bn));
      rel[h] = LLVMBuildTrunc(b, x, em->t_i32, "rel");
    }
    LLVMValueRef m[kMaxStep / 8][4];
    for (int32_t n = 0; n < ns; ++n)
      for (int32_t e = 0; e < 4; ++e) {
        LLVMValueRef col = LLVMBuildAdd(b, t2, c32(f, 8 * n + (e & 1)), "");
        LLVMValueRef ok = LLVMBuildICmp(b, LLVMIntSLT, col, rel[e / 2], "");
        m[n][e] = tj_emit_select(em, ok, s[n][e], cf(f, -INFINITY));
      }
    LLVMBasicBlockRef masked = LLVMGetInsertBlock(b);
    tj_emit_if_end(em, &br);
    for (int32_t n = 0; n < ns; ++n)
      for (int32_t e = 0; e < 4; ++e) {
        LLVMValueRef phi = LLVMBuildPhi(b, em->t_f32, "");
        LLVMValueRef vals[2] = {m[n][e], s[n][e]};
        LLVMBasicBlockRef from[2] = {masked, plain};
        LLVMAddIncoming(phi, vals, from, 2);
        s[n][e] = phi;
      }
  }
  for (int32_t n = 0; n < ns; ++n)
    for (int32_t e = 0; e < 4; ++e) s[n][e] = ex2(f, s[n][e]);  // P
  tj_nvptx_fa_wgmma_wait(f, 0, dpf, bn / 2);
  for (int32_t n = 0; n < ns; ++n)
    for (int32_t e = 0; e < 4; ++e)
      dp[n][e] = LLVMBuildFMul(
          b, s[n][e], LLVMBuildFSub(b, dp[n][e], delta[e / 2], ""), "");  // ds
  LLVMValueRef dsf[kMaxStep / 16][4];
  pack_a(f, dp, bn / 16, dsf);
  LLVMValueRef dq[64];
  load_slots(f, dq_slot, dq, nacc);
  issue_nn(f, dq, dsf, bn / 16, k_addr, bn);
  // Deferred: dQ runs on under the next step's barrier and S, dP; its
  // registers are untouched before that step's first wait.
  if (!defer) tj_nvptx_fa_wgmma_wait(f, 0, dq, nacc);
  store_slots(f, dq_slot, dq, nacc);
  tj_emit_loop_end(em, &loop);
  load_slots(f, dq_slot, dq, nacc);
  if (defer) tj_nvptx_fa_wgmma_wait(f, 0, dq, nacc);

  // With no key tile, Q's copies may still be in flight; every
  // warpgroup's wgmmas have read Q before its rows are reused.
  wait_groups(f, 0);
  tj_nvptx_barrier(nv);
  load_slots(f, dq_slot, dq, nacc);
  store_rows(f, dq, k->attention.scale, sQ, kDqBM, wrow, g, t2, at.ptr[f->ob],
             q0, tq, so, 0);
  return NULL;
}
