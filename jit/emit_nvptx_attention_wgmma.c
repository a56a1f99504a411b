// The ATTENTION forward on sm_90a's wgmma (issue 14): FlashAttention-3's
// structure for f16/bf16 q, k, v with head dims 64 and 128, no mask
// operand (causal or not), and attention_lse (the same loop without V).
// tj_nvptx_emit_attention picks it (tj_nvptx_options_t.attention_kernel);
// the mma.sync kernel of emit_nvptx_attention.c stays for the other archs,
// masks, and as the fallback.
//
//   grid: one block per (query tile of kWgBM rows, batch.. x kv head x
//     group member), the tiles of one head walking from the last one down
//     (tj_nvptx_fa_block), as the mma.sync kernel;
//   block: kWgs consumer warpgroups of 128 threads, warpgroup w owning
//     query rows 64 w .. 64 w + 63 of the tile; every thread also copies
//     (cp.async, 16 bytes a copy, rows past Tq and Tk zero-filled);
//   shared memory: Q once, then K and V tiles of bn keys, each double
//     buffered: tile j + 1 loads under the whole of step j; bn is 64, so
//     that two blocks share an SM (49 or 97 KiB, at most 128 registers a
//     thread, no spill) and one's softmax runs under the other's wgmmas;
//     the WGMMA_WIDE variant takes 128 keys and one block an SM (up to
//     161 KiB and 255 registers);
//   step j (one barrier):
//     cp.async.wait_group 0, fence.proxy.async, bar.sync: K_j and V_j have
//       landed for the async proxy, and every warpgroup is done with step
//       j - 1, whose buffers K_j+1 and V_j+1 now take;
//     S = Q . K_j^T: d / 16 wgmma m64n<bn>k16, both operands in shared
//       memory (K is a K-major B, as stored), f32 accumulators;
//     the online softmax on S's accumulator fragment, as the mma.sync
//       kernel does it on its C fragments (wgmma's m64nN f32 fragment is
//       four warps' m16n8 fragments: register 4 n + e of the thread at
//       lane l of warp q holds row 16 q + l / 4 + 8 (e / 2), column 8 n +
//       2 (l % 4) + e % 2), masks only on tiles that reach past Tk or the
//       block's first diagonal;
//     O += P . V_j: P rounded to the input dtype in registers is wgmma's A
//       fragment (keys 16 kk .. 16 kk + 15 are S's columns of n-blocks
//       2 kk and 2 kk + 1, the layout m16n8k16's A fragment has), V an
//       MN-major B (trans-b: keys are wgmma's k, contiguous d its n);
//       bn / 16 wgmma m64n<d>k16;
//   y = O / l, staged in the warp's own 16 rows of Q, 16-byte stores.
// Tiles are laid out as wgmma's 128-byte swizzle (SW128) wants them, in
// panels of 64 columns (one 128-byte row of f16/bf16): panel p of a tile
// of R rows holds columns 64 p .. 64 p + 63 of every row, row r at r *
// 128, its 16-byte chunk c at c ^ (r & 7); panels are R * 128 bytes apart
// and every tile starts on a 1024-byte boundary. Q and K are then K-major
// operands (8-row atoms 1024 bytes apart: SBO; +32 bytes per k16 inside a
// panel, the next panel at k 64), V an MN-major one (16 keys = 2048 bytes
// per k16, its 64-column panels R * 128 bytes apart: LBO), as the GEMM's
// operands are (emit_nvptx_wgmma.c). The accumulators are tied in/out
// operands of every wgmma and wait asm, so that LLVM neither reads them
// early nor moves other writes between them; each step waits for its
// wgmmas (wait_group 0) before the registers they read or write are
// touched again.

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "jit/emit_nvptx_attention.h"

#define kWgs 2             // consumer warpgroups a block
#define kWgBM (64 * kWgs)  // query rows a block

// Shared byte offset (i32) of 16-byte chunk |ch| of row |row| (both i32)
// in a panelled tile of |rows| rows.
LLVMValueRef tj_nvptx_fa_panel_offset(fa_t* f, int32_t rows, LLVMValueRef row,
                                      LLVMValueRef ch) {
  LLVMBuilderRef b = f->b;
  LLVMValueRef panel = LLVMBuildLShr(b, ch, c32(f, 3), "");
  LLVMValueRef c = LLVMBuildAnd(b, ch, c32(f, 7), "");
  return LLVMBuildAdd(
      b,
      LLVMBuildAdd(b, LLVMBuildMul(b, panel, c32(f, rows * kSwRow), ""),
                   LLVMBuildMul(b, row, c32(f, kSwRow), ""), ""),
      LLVMBuildShl(b,
                   LLVMBuildXor(b, c, LLVMBuildAnd(b, row, c32(f, 7), ""), ""),
                   c32(f, 4), ""),
      "");
}

// Starts the copy of rows [r0, r0 + |rows|) of a [.., d] operand of
// buffer |buf| (row r at |base| + r * |stride| elements; rows >= |limit|
// are zero-filled) into the panelled tile at byte |dst| (i32) of |tiles|.
void tj_nvptx_fa_load_rows(fa_t* f, LLVMValueRef tiles, int32_t rows,
                           uint32_t buf, LLVMValueRef base, LLVMValueRef stride,
                           LLVMValueRef r0, LLVMValueRef limit,
                           LLVMValueRef dst) {
  LLVMBuilderRef b = f->b;
  tj_emit_t* em = f->em;
  const int32_t shift = f->chunks == 8 ? 3 : 4;
  for (int32_t i = 0; i < rows * f->chunks / kWgThreads; ++i) {
    LLVMValueRef c = LLVMBuildAdd(b, f->tid, c32(f, i * kWgThreads), "");
    LLVMValueRef row = LLVMBuildLShr(b, c, c32(f, shift), "");
    LLVMValueRef ch = LLVMBuildAnd(b, c, c32(f, f->chunks - 1), "");
    LLVMValueRef gr =
        LLVMBuildAdd(b, r0, LLVMBuildZExt(b, row, em->t_i64, ""), "");
    LLVMValueRef ok = LLVMBuildICmp(b, LLVMIntSLT, gr, limit, "");
    // Rows past the limit read nothing (src-size 0) from row 0.
    LLVMValueRef off = LLVMBuildAdd(
        b, LLVMBuildMul(b, tj_emit_select(em, ok, gr, c64(f, 0)), stride, ""),
        LLVMBuildMul(b, LLVMBuildZExt(b, ch, em->t_i64, ""), c64(f, 8), ""),
        "");
    LLVMValueRef src = LLVMBuildAddrSpaceCast(
        b, tj_emit_advance(em, buf, base, off), f->nv->t_ptr_global, "");
    LLVMValueRef at =
        LLVMBuildAdd(b, dst, tj_nvptx_fa_panel_offset(f, rows, row, ch), "");
    LLVMValueRef args[3] = {LLVMBuildGEP2(b, em->t_i8, tiles, &at, 1, ""), src,
                            tj_emit_select(em, ok, c32(f, 16), c32(f, 0))};
    intrinsic(f, "llvm.nvvm.cp.async.cg.shared.global.16.s", args, 3);
  }
}

void tj_nvptx_fa_asm(fa_t* f, const char* text) {
  tj_emit_inline_asm(f->em, f->em->t_void, text, "~{memory}", NULL, 0);
}

// Runs |text| with the |n| accumulators |acc| as tied in/out operands
// $0 .. $n-1 (updated in place) and |num_extra| further inputs
// (constraints |extra_cons|, each followed by a comma) numbered from $n.
static void acc_asm(fa_t* f, const char* text, LLVMValueRef* acc, int32_t n,
                    LLVMValueRef* extra, int32_t num_extra,
                    const char* extra_cons) {
  char cons[1024];
  size_t len = 0;
  for (int32_t i = 0; i < n; ++i)
    len += (size_t)snprintf(cons + len, sizeof(cons) - len, "=f,");
  len += (size_t)snprintf(cons + len, sizeof(cons) - len, "%s", extra_cons);
  for (int32_t i = 0; i < n; ++i)
    len += (size_t)snprintf(cons + len, sizeof(cons) - len, "%s%d",
                            i ? "," : "", (int)i);
  snprintf(cons + len, sizeof(cons) - len, ",~{memory}");
  LLVMValueRef args[132];
  LLVMTypeRef floats[64];
  for (int32_t i = 0; i < num_extra; ++i) args[i] = extra[i];
  for (int32_t i = 0; i < n; ++i) {
    args[num_extra + i] = acc[i];
    floats[i] = f->em->t_f32;
  }
  LLVMTypeRef ret = LLVMStructTypeInContext(f->em->ctx, floats, (unsigned)n, 0);
  LLVMValueRef r = tj_emit_inline_asm(f->em, ret, text, cons, args,
                                      (unsigned)(num_extra + n));
  for (int32_t i = 0; i < n; ++i)
    acc[i] = LLVMBuildExtractValue(f->b, r, (unsigned)i, "");
}

// The instruction's head up to its accumulator list.
static size_t wgmma_head(fa_t* f, char* text, size_t size, int32_t n_cols,
                         int32_t n) {
  const char* t = f->f16 ? "f16" : "bf16";
  size_t len = (size_t)snprintf(
      text, size, "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {",
      (int)n_cols, t, t);
  for (int32_t i = 0; i < n; ++i)
    len +=
        (size_t)snprintf(text + len, size - len, "%s$%d", i ? "," : "", (int)i);
  return len;
}

// acc (m64n<n_cols> f32) = A . B (+ acc when |accumulate|), A and B by
// descriptors |da| and |db| (i64), B K-major (trans-b 0).
void tj_nvptx_fa_wgmma_ss(fa_t* f, LLVMValueRef* acc, int32_t n_cols,
                          LLVMValueRef da, LLVMValueRef db, bool accumulate) {
  const int32_t n = n_cols / 2;
  char text[1200];
  size_t len = (size_t)snprintf(text, sizeof(text),
                                "{\n.reg .pred p;\nsetp.ne.b32 p, $%d, 0;\n",
                                (int)n + 2);
  len += wgmma_head(f, text + len, sizeof(text) - len, n_cols, n);
  snprintf(text + len, sizeof(text) - len, "}, $%d, $%d, p, 1, 1, 0, 0;\n}",
           (int)n, (int)n + 1);
  LLVMValueRef x[3] = {da, db, c32(f, accumulate ? 1 : 0)};
  acc_asm(f, text, acc, n, x, 3, "l,l,r,");
}

// acc (m64n<n_cols> f32) += A . B, A the register fragment |a| (4 x i32
// of packed pairs), B by descriptor |db| (i64), MN-major (trans-b 1).
void tj_nvptx_fa_wgmma_rs(fa_t* f, LLVMValueRef* acc, int32_t n_cols,
                          LLVMValueRef* a, LLVMValueRef db) {
  const int32_t n = n_cols / 2;
  char text[1200];
  size_t len = (size_t)snprintf(text, sizeof(text),
                                "{\n.reg .pred p;\nsetp.ne.b32 p, $%d, 0;\n",
                                (int)n + 5);
  len += wgmma_head(f, text + len, sizeof(text) - len, n_cols, n);
  snprintf(text + len, sizeof(text) - len,
           "}, {$%d,$%d,$%d,$%d}, $%d, p, 1, 1, 1;\n}", (int)n, (int)n + 1,
           (int)n + 2, (int)n + 3, (int)n + 4);
  LLVMValueRef x[6] = {a[0], a[1], a[2], a[3], db, c32(f, 1)};
  acc_asm(f, text, acc, n, x, 6, "r,r,r,r,l,r,");
}

void tj_nvptx_fa_wgmma_wait(fa_t* f, int32_t pending, LLVMValueRef* acc,
                            int32_t n) {
  char text[48];
  snprintf(text, sizeof(text), "wgmma.wait_group.sync.aligned %d;",
           (int)pending);
  acc_asm(f, text, acc, n, NULL, 0, "");
}

// What the steps of one block share.
typedef struct wfa_t {
  fa_t* f;
  int32_t bn;        // keys a K/V tile
  int32_t kv_bytes;  // a K or V tile
  int32_t sK, sV;    // byte offsets of K_0 and V_0 (K_1, V_1 follow)
  LLVMValueRef tiles_addr, q_addr;  // i32 shared-window addresses
  const tj_emit_point_t* at;
  LLVMValueRef sk, sv, tk, ntiles;
  LLVMValueRef t2, lim[2], lim_lo;
  double c2;  // scale * log2(e)
  LLVMValueRef m_slot[2], l_slot[2];
} wfa_t;

// Byte offset (i32) of tile |tile|'s (i64) buffer of the pair at byte
// |first|: the tile number's parity picks it.
static LLVMValueRef buffer(wfa_t* w, int32_t first, LLVMValueRef tile) {
  fa_t* f = w->f;
  LLVMValueRef odd = LLVMBuildTrunc(
      f->b, LLVMBuildAnd(f->b, tile, c64(f, 1), ""), f->em->t_i32, "");
  return LLVMBuildAdd(f->b, c32(f, first),
                      LLVMBuildMul(f->b, odd, c32(f, w->kv_bytes), ""), "");
}

// Starts the copies of K tile |tile| (i64) into its buffer.
static void load_k(wfa_t* w, LLVMValueRef tile) {
  fa_t* f = w->f;
  tj_nvptx_fa_load_rows(f, f->smem, w->bn, f->kb, w->at->ptr[f->kb], w->sk,
                        LLVMBuildMul(f->b, tile, c64(f, w->bn), ""), w->tk,
                        buffer(w, w->sK, tile));
}

static void load_v(wfa_t* w, LLVMValueRef tile) {
  fa_t* f = w->f;
  tj_nvptx_fa_load_rows(f, f->smem, w->bn, f->vb, w->at->ptr[f->vb], w->sv,
                        LLVMBuildMul(f->b, tile, c64(f, w->bn), ""), w->tk,
                        buffer(w, w->sV, tile));
}

// Every thread's copies have landed and are visible to wgmma (the async
// proxy), and every warpgroup is past what it issued before.
static void landed(wfa_t* w) {
  wait_groups(w->f, 0);
  tj_nvptx_fa_asm(w->f, "fence.proxy.async.shared::cta;");
  tj_nvptx_barrier(w->f->nv);
}

// Issues and commits S = Q . K_tile^T into |s| (bn / 2 accumulators).
static void issue_s(wfa_t* w, LLVMValueRef tile, LLVMValueRef* s) {
  fa_t* f = w->f;
  LLVMBuilderRef b = f->b;
  tj_emit_t* em = f->em;
  const int32_t bn = w->bn;
  for (int32_t i = 0; i < bn / 2; ++i) s[i] = LLVMGetUndef(em->t_f32);
  LLVMValueRef k_addr =
      LLVMBuildAdd(b, w->tiles_addr, buffer(w, w->sK, tile), "k_addr");
  tj_nvptx_fa_asm(f, "wgmma.fence.sync.aligned;");
  for (int32_t kk = 0; kk < f->d / 16; ++kk) {
    // +32 bytes per k16 inside a panel, the next panel every 4.
    LLVMValueRef da = tj_nvptx_wgmma_descriptor(
        em,
        LLVMBuildAdd(b, w->q_addr,
                     c32(f, (kk / 4) * kWgBM * kSwRow + (kk % 4) * 32), ""),
        16, kSwAtom);
    LLVMValueRef db = tj_nvptx_wgmma_descriptor(
        em,
        LLVMBuildAdd(b, k_addr, c32(f, (kk / 4) * bn * kSwRow + (kk % 4) * 32),
                     ""),
        16, kSwAtom);
    tj_nvptx_fa_wgmma_ss(f, s, bn, da, db, kk > 0);
  }
  tj_nvptx_fa_asm(f, "wgmma.commit_group.sync.aligned;");
}

// Issues and commits O += P . V_tile (P: bn / 16 A fragments).
static void issue_pv(wfa_t* w, LLVMValueRef tile, LLVMValueRef* o,
                     LLVMValueRef (*pf)[4]) {
  fa_t* f = w->f;
  LLVMBuilderRef b = f->b;
  LLVMValueRef v_addr =
      LLVMBuildAdd(b, w->tiles_addr, buffer(w, w->sV, tile), "v_addr");
  tj_nvptx_fa_asm(f, "wgmma.fence.sync.aligned;");
  for (int32_t kk = 0; kk < w->bn / 16; ++kk) {
    // 16 keys (rows) per k16; V's 64-column panels bn rows apart.
    LLVMValueRef db = tj_nvptx_wgmma_descriptor(
        f->em, LLVMBuildAdd(b, v_addr, c32(f, kk * 16 * kSwRow), ""),
        w->bn * kSwRow, kSwAtom);
    tj_nvptx_fa_wgmma_rs(f, o, f->d, pf[kk], db);
  }
  tj_nvptx_fa_asm(f, "wgmma.commit_group.sync.aligned;");
}

// The online softmax of the scores |sflat| of tile |tile| (i64): the
// row maxima and sums in w->m_slot and w->l_slot move on, |alpha| gets
// the factor O must be scaled by, |pf| P as the A fragments of P . V.
static void softmax(wfa_t* w, LLVMValueRef tile, LLVMValueRef* sflat,
                    LLVMValueRef* alpha, LLVMValueRef (*pf)[4]) {
  fa_t* f = w->f;
  LLVMBuilderRef b = f->b;
  tj_emit_t* em = f->em;
  const int32_t bn = w->bn, ns = bn / 8;
  LLVMValueRef j0 = LLVMBuildMul(b, tile, c64(f, bn), "j0");
  LLVMValueRef(*s)[4] = (LLVMValueRef(*)[4])sflat;
  // Scores in base 2, then the masks: only tiles that reach past Tk or
  // (causal) past the block's first row; the others skip the compares (a
  // uniform branch).
  for (int32_t n = 0; n < ns; ++n)
    for (int32_t e = 0; e < 4; ++e)
      s[n][e] = LLVMBuildFMul(b, s[n][e], cf(f, w->c2), "");
  LLVMBasicBlockRef unmasked = LLVMGetInsertBlock(b);
  tj_emit_if_t masked;
  tj_emit_if_begin(
      em, &masked,
      LLVMBuildICmp(b, LLVMIntSGT, LLVMBuildAdd(b, j0, c64(f, bn), ""),
                    w->lim_lo, ""),
      "mask");
  LLVMValueRef rel[2];
  for (int32_t h = 0; h < 2; ++h) {
    LLVMValueRef x = LLVMBuildSub(b, w->lim[h], j0, "");
    x = tj_emit_select(em, LLVMBuildICmp(b, LLVMIntSLT, x, c64(f, 0), ""),
                       c64(f, 0), x);
    x = tj_emit_min_i64(em, x, c64(f, bn));
    rel[h] = LLVMBuildTrunc(b, x, em->t_i32, "rel");
  }
  LLVMValueRef sm[16][4];
  for (int32_t n = 0; n < ns; ++n)
    for (int32_t e = 0; e < 4; ++e) {
      LLVMValueRef col = LLVMBuildAdd(b, w->t2, c32(f, 8 * n + (e & 1)), "");
      LLVMValueRef ok = LLVMBuildICmp(b, LLVMIntSLT, col, rel[e / 2], "");
      sm[n][e] = tj_emit_select(em, ok, s[n][e], cf(f, -INFINITY));
    }
  LLVMBasicBlockRef done_masking = LLVMGetInsertBlock(b);
  tj_emit_if_end(em, &masked);
  for (int32_t n = 0; n < ns; ++n)
    for (int32_t e = 0; e < 4; ++e) {
      LLVMValueRef phi = LLVMBuildPhi(b, em->t_f32, "");
      LLVMValueRef vals[2] = {sm[n][e], s[n][e]};
      LLVMBasicBlockRef from[2] = {done_masking, unmasked};
      LLVMAddIncoming(phi, vals, from, 2);
      s[n][e] = phi;
    }

  LLVMValueRef mx[2] = {cf(f, -INFINITY), cf(f, -INFINITY)};
  for (int32_t n = 0; n < ns; ++n)
    for (int32_t e = 0; e < 4; ++e) mx[e / 2] = fmax2(f, mx[e / 2], s[n][e]);
  LLVMValueRef m_use[2];
  for (int32_t h = 0; h < 2; ++h) {
    mx[h] = fmax2(f, mx[h], shfl_xor(f, mx[h], 1));
    mx[h] = fmax2(f, mx[h], shfl_xor(f, mx[h], 2));
    LLVMValueRef m_old = load_f32(f, w->m_slot[h]);
    LLVMValueRef m_new = fmax2(f, m_old, mx[h]);
    LLVMBuildStore(b, m_new, w->m_slot[h]);
    // A row with no key so far (m' = -inf) uses 0: its p stay 0.
    m_use[h] = tj_emit_select(
        em, LLVMBuildFCmp(b, LLVMRealOEQ, m_new, cf(f, -INFINITY), ""),
        cf(f, 0.0), m_new);
    alpha[h] = ex2(f, LLVMBuildFSub(b, m_old, m_use[h], ""));
  }
  LLVMValueRef sum[2] = {cf(f, 0.0), cf(f, 0.0)};
  for (int32_t n = 0; n < ns; ++n)
    for (int32_t e = 0; e < 4; ++e) {
      s[n][e] = ex2(f, LLVMBuildFSub(b, s[n][e], m_use[e / 2], ""));
      sum[e / 2] = LLVMBuildFAdd(b, sum[e / 2], s[n][e], "");
    }
  for (int32_t h = 0; h < 2; ++h) {
    LLVMBuildStore(
        b,
        LLVMBuildFAdd(b,
                      LLVMBuildFMul(b, load_f32(f, w->l_slot[h]), alpha[h], ""),
                      sum[h], ""),
        w->l_slot[h]);
  }
  if (!pf) return;
  // Keys 16 kk .. 16 kk + 15 are n-blocks 2 kk and 2 kk + 1 of S.
  for (int32_t kk = 0; kk < bn / 16; ++kk) {
    pf[kk][0] = pack(f, s[2 * kk][0], s[2 * kk][1]);
    pf[kk][1] = pack(f, s[2 * kk][2], s[2 * kk][3]);
    pf[kk][2] = pack(f, s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pf[kk][3] = pack(f, s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

static void load_slots(fa_t* f, LLVMValueRef* slots, LLVMValueRef* out,
                       int32_t n) {
  for (int32_t i = 0; i < n; ++i) out[i] = load_f32(f, slots[i]);
}

static void store_slots(fa_t* f, LLVMValueRef* slots, LLVMValueRef* v,
                        int32_t n) {
  for (int32_t i = 0; i < n; ++i) LLVMBuildStore(f->b, v[i], slots[i]);
}

// O (|o|, d / 2 accumulators) *= alpha of each thread's two rows.
static void rescale(fa_t* f, LLVMValueRef* o, const LLVMValueRef* alpha) {
  for (int32_t i = 0; i < f->d / 2; ++i)
    o[i] = LLVMBuildFMul(f->b, o[i], alpha[(i % 4) / 2], "");
}

// The loop: step j waits for K_j and V_j, starts the copies of tile
// j + 1, then S_j, its softmax and P_j . V_j, each waited for.
static void run_steps(wfa_t* w, LLVMValueRef* o_slot, bool lse) {
  fa_t* f = w->f;
  LLVMBuilderRef b = f->b;
  tj_emit_t* em = f->em;
  tj_emit_loop_t loop;
  LLVMValueRef jt =
      tj_emit_loop_begin(em, &loop, c64(f, 0), w->ntiles, c64(f, 1), "kv");
  landed(w);  // K_j, V_j (and Q); step j - 1's buffers are free
  LLVMValueRef jn = LLVMBuildAdd(b, jt, c64(f, 1), "");
  tj_emit_if_t next;
  tj_emit_if_begin(em, &next, LLVMBuildICmp(b, LLVMIntSLT, jn, w->ntiles, ""),
                   "next");
  load_k(w, jn);
  if (!lse) load_v(w, jn);
  tj_emit_if_end(em, &next);
  commit(f);
  LLVMValueRef s[64], alpha[2], pf[8][4], o[64];
  issue_s(w, jt, s);
  tj_nvptx_fa_wgmma_wait(f, 0, s, w->bn / 2);
  softmax(w, jt, s, alpha, lse ? NULL : pf);
  if (!lse) {
    load_slots(f, o_slot, o, f->d / 2);
    rescale(f, o, alpha);
    issue_pv(w, jt, o, pf);
    tj_nvptx_fa_wgmma_wait(f, 0, o, f->d / 2);
    store_slots(f, o_slot, o, f->d / 2);
  }
  tj_emit_loop_end(em, &loop);
}

tj_status_t tj_nvptx_emit_attention_wgmma(fa_t* f) {
  tj_nvptx_emit_t* nv = f->nv;
  tj_emit_t* em = f->em;
  LLVMBuilderRef b = f->b;
  const tj_kir_t* k = f->k;
  const int32_t r = k->rank;
  const int32_t d = f->d;
  const bool lse = f->op == TJ_KIR_ATTENTION_LSE;
  const tj_nvptx_attention_kernel_t variant = nv->options.attention_kernel;
  const bool wide = variant == TJ_NVPTX_ATTENTION_WGMMA_WIDE;
  wfa_t w;
  memset(&w, 0, sizeof(w));
  w.f = f;
  w.bn = wide ? 128 : 64;
  const int32_t q_bytes = kWgBM * d * 2;
  w.kv_bytes = w.bn * d * 2;
  // Q, K_0, K_1, then V_0, V_1 (attention_lse reads no V).
  const int32_t sQ = 0;
  w.sK = q_bytes;
  w.sV = q_bytes + 2 * w.kv_bytes;
  tj_nvptx_kernel_t* info = nv->info;
  info->threads = kWgThreads;
  // The slack aligns the tiles to the swizzle's 1024-byte period.
  info->shared_bytes = q_bytes + (lse ? 2 : 4) * w.kv_bytes + kSwAtom;
  info->min_blocks_per_sm = wide ? 1 : 2;
  info->wgmma = true;
  info->tile_m = kWgBM;
  info->tile_n = w.bn;
  LLVMValueRef dyn = tj_nvptx_dynamic_shared(nv);
  LLVMValueRef addr = LLVMBuildPtrToInt(b, dyn, em->t_i32, "");
  LLVMValueRef pad = LLVMBuildAnd(b, LLVMBuildSub(b, c32(f, 0), addr, ""),
                                  c32(f, kSwAtom - 1), "");
  f->smem = LLVMBuildGEP2(b, em->t_i8, dyn, &pad, 1, "tiles");
  w.tiles_addr = LLVMBuildAdd(b, addr, pad, "tiles_addr");
  f->tid = tj_nvptx_sreg(nv, "tid.x");
  f->lane = LLVMBuildAnd(b, f->tid, c32(f, 31), "lane");
  f->warp = LLVMBuildLShr(b, f->tid, c32(f, 5), "warp");
  LLVMValueRef wg = LLVMBuildLShr(b, f->tid, c32(f, 7), "wg");
  tj_nvptx_fa_block_t blk;
  tj_nvptx_fa_block(f, kWgBM, w.bn, &blk);
  LLVMValueRef tq = blk.tq, q0 = blk.q0;
  w.tk = blk.tk;
  w.ntiles = blk.ntiles;
  const tj_emit_point_t at = blk.at;
  w.at = &at;
  LLVMValueRef sq = tj_emit_stride(em, f->qb, r - 2);
  w.sk = tj_emit_stride(em, f->kb, r - 1);
  w.sv = tj_emit_stride(em, f->vb, r - 1);
  LLVMValueRef so = tj_emit_stride(em, f->ob, r - 2);
  LLVMValueRef qbase =
      tj_emit_advance(em, f->qb, at.ptr[f->qb], LLVMBuildMul(b, q0, sq, ""));

  // Q, K_0 and V_0; nothing past Tk: with no key every copy reads 0
  // bytes.
  tj_nvptx_fa_load_rows(f, f->smem, kWgBM, f->qb, qbase, sq, c64(f, 0),
                        LLVMBuildSub(b, tq, q0, ""), c32(f, sQ));
  load_k(&w, c64(f, 0));
  if (!lse) load_v(&w, c64(f, 0));
  commit(f);

  // Per thread: rows g and g + 8 of its warp's 16, columns 2t, 2t + 1 of
  // each 8-column block of S and O.
  LLVMValueRef g = LLVMBuildLShr(b, f->lane, c32(f, 2), "g");
  w.t2 =
      LLVMBuildShl(b, LLVMBuildAnd(b, f->lane, c32(f, 3), ""), c32(f, 1), "");
  LLVMValueRef wrow = LLVMBuildMul(b, f->warp, c32(f, 16), "wrow");
  LLVMValueRef row_i[2];
  for (int32_t h = 0; h < 2; ++h) {
    LLVMValueRef rr =
        LLVMBuildAdd(b, wrow, LLVMBuildAdd(b, g, c32(f, 8 * h), ""), "");
    row_i[h] = LLVMBuildAdd(b, q0, LLVMBuildZExt(b, rr, em->t_i64, ""), "i");
    w.lim[h] = k->attention.causal
                   ? tj_emit_min_i64(em, w.tk,
                                     LLVMBuildAdd(b, row_i[h], c64(f, 1), ""))
                   : w.tk;
  }
  // The keys every row of the block may see: tiles below it need no mask.
  w.lim_lo = k->attention.causal
                 ? tj_emit_min_i64(em, w.tk, LLVMBuildAdd(b, q0, c64(f, 1), ""))
                 : w.tk;

  const int32_t nd = lse ? 0 : d / 8;  // O's 8-column blocks
  LLVMValueRef o_slot[64];
  for (int32_t i = 0; i < 4 * nd; ++i) {
    o_slot[i] = tj_emit_alloca(em, em->t_f32, "o");
    LLVMBuildStore(b, cf(f, 0.0), o_slot[i]);
  }
  for (int32_t h = 0; h < 2; ++h) {
    w.m_slot[h] = tj_emit_alloca(em, em->t_f32, "m");
    w.l_slot[h] = tj_emit_alloca(em, em->t_f32, "l");
    LLVMBuildStore(b, cf(f, -INFINITY), w.m_slot[h]);
    LLVMBuildStore(b, cf(f, 0.0), w.l_slot[h]);
  }
  w.c2 = k->attention.scale * kLog2e;
  // The warpgroup's Q rows: 64 wg rows into each panel.
  w.q_addr = LLVMBuildAdd(
      b, w.tiles_addr,
      LLVMBuildAdd(b, c32(f, sQ), LLVMBuildMul(b, wg, c32(f, 64 * kSwRow), ""),
                   ""),
      "q_addr");
  run_steps(&w, o_slot, lse);
  LLVMValueRef(*o_slots)[4] = (LLVMValueRef(*)[4])o_slot;
  LLVMValueRef* m_slot = w.m_slot;
  LLVMValueRef* l_slot = w.l_slot;
  // With no key tile, Q's copies may still be in flight; every warpgroup's
  // wgmmas have read Q before its rows are reused for y.
  wait_groups(f, 0);
  tj_nvptx_barrier(nv);
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

  // y = O / l, staged in the warp's own 16 rows of the Q tile, then
  // stored 16 bytes a lane.
  LLVMValueRef inv[2];
  for (int32_t h = 0; h < 2; ++h) {
    LLVMValueRef l = load_f32(f, l_slot[h]);
    l = LLVMBuildFAdd(b, l, shfl_xor(f, l, 1), "");
    l = LLVMBuildFAdd(b, l, shfl_xor(f, l, 2), "");
    inv[h] = tj_emit_select(em, LLVMBuildFCmp(b, LLVMRealOGT, l, cf(f, 0), ""),
                            LLVMBuildFDiv(b, cf(f, 1.0), l, ""), cf(f, 0.0));
  }
  LLVMValueRef t4 = LLVMBuildShl(b, w.t2, c32(f, 1), "");  // 4t bytes
  for (int32_t j = 0; j < nd; ++j) {
    for (int32_t h = 0; h < 2; ++h) {
      LLVMValueRef v = pack(
          f, LLVMBuildFMul(b, load_f32(f, o_slots[j][2 * h]), inv[h], ""),
          LLVMBuildFMul(b, load_f32(f, o_slots[j][2 * h + 1]), inv[h], ""));
      LLVMValueRef row =
          LLVMBuildAdd(b, wrow, LLVMBuildAdd(b, g, c32(f, 8 * h), ""), "");
      LLVMValueRef off = LLVMBuildAdd(
          b, c32(f, sQ),
          LLVMBuildAdd(b, tj_nvptx_fa_panel_offset(f, kWgBM, row, c32(f, j)),
                       t4, ""),
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
        smem_at(f,
                LLVMBuildAdd(b, c32(f, sQ),
                             tj_nvptx_fa_panel_offset(f, kWgBM, row, ch), "")),
        "");
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
