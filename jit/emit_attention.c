// The ATTENTION template (issue 14): FlashAttention-2's forward on the CPU,
// for the tier's vector width, built from the GEMM template's microkernel
// and B packing (jit/emit_gemm.h).
//
//   for u in [begin, end):         // (batch.., kv head, group member, qblk)
//     O = 0, m = -inf, l = 0 for the unit's uq query rows (f32, scratch)
//     kend = Tk, or with causal min(Tk, last row + 1): key tiles wholly
//       above the diagonal are never read
//     for j0 in [0, kend) step bn:                  // one K/V tile
//       pack K[j0 : j0+bn, :]^T as f32 panels [bn/nr][d][nr] (widened,
//         transposed in registers where K's head dim is contiguous)
//       for each block of bm rows of the unit:
//         S = Q_rows . K^T: the packed microkernel, bm x nr per panel,
//           reading Q's rows in place (f16/bf16 widened as broadcast)
//         per row: s * scale (+ additive mask; -inf where the bool mask is
//           false, past Tk, or causal j > i: partially masked tiles are
//           masked in registers), m' = max(m, rowmax), p = exp(s - m')
//           (m' = -inf: 0 instead, so a row with no key left keeps p = 0),
//           l = exp(m - m') l + sum p, O_row *= exp(m - m')
//         O_rows += P . V[j0 : j0+kn, :]: the in-place microkernel over
//           nr columns of V at a time (masked at the right edge)
//     y = O / l (0 where l = 0), rounded to the output's dtype
//
// Query heads map to kv heads through the space (h = hkv * G + g): K and V
// have stride 0 along G, so grouped-query attention never copies them.
// Everything accumulates in f32; P is not rounded before P . V. f16/bf16
// q rows are widened into scratch once per unit.

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "jit/emit_gemm.h"
#include "jit/emit_llvm.h"
#include "jit/vecmath.h"

static LLVMValueRef c64(tj_emit_t* em, int64_t v) {
  return LLVMConstInt(em->t_i64, (unsigned long long)v, 1);
}

static LLVMValueRef gep_f32(tj_emit_t* em, LLVMValueRef ptr, LLVMValueRef n) {
  return LLVMBuildGEP2(em->b, em->t_f32, ptr, &n, 1, "");
}

static LLVMValueRef gep_i8(tj_emit_t* em, LLVMValueRef ptr, LLVMValueRef n) {
  return LLVMBuildGEP2(em->b, em->t_i8, ptr, &n, 1, "");
}

static LLVMValueRef align64(tj_emit_t* em, LLVMValueRef bytes) {
  return LLVMBuildAnd(em->b, LLVMBuildAdd(em->b, bytes, c64(em, 63), ""),
                      c64(em, ~(int64_t)63), "");
}

static LLVMValueRef min64(tj_emit_t* em, LLVMValueRef a, LLVMValueRef b) {
  return tj_emit_min_i64(em, a, b);
}

static LLVMValueRef vload(tj_emit_t* em, LLVMTypeRef vt, LLVMValueRef p) {
  LLVMValueRef v = LLVMBuildLoad2(em->b, vt, p, "");
  LLVMSetAlignment(v, 4);
  return v;
}

static void vstore(tj_emit_t* em, LLVMValueRef v, LLVMValueRef p) {
  LLVMSetAlignment(LLVMBuildStore(em->b, v, p), 4);
}

static LLVMValueRef reduce(tj_emit_t* em, const char* name, LLVMValueRef v) {
  LLVMTypeRef t = LLVMTypeOf(v);
  if (strcmp(name, "llvm.vector.reduce.fadd") == 0) {
    LLVMValueRef args[2] = {LLVMConstReal(em->t_f32, 0.0), v};
    LLVMValueRef r = tj_emit_intrinsic(em, name, &t, 1, args, 2);
    LLVMSetFastMathFlags(r, LLVMFastMathAllowReassoc);
    return r;
  }
  return tj_emit_intrinsic(em, name, &t, 1, &v, 1);
}

static void call(tj_emit_t* em, LLVMValueRef fn, LLVMValueRef* args,
                 unsigned n) {
  LLVMBuildCall2(em->b, LLVMGlobalGetValueType(fn), fn, args, n, "");
}

typedef struct attn_t {
  tj_emit_t* em;
  tj_kir_attention_schedule_t s;
  int32_t w;
  uint32_t qb, kb, vb, ob;
  int32_t mb;  // -1: no mask
  LLVMTypeRef vt;
  LLVMValueRef d, dv, dvp, tq, tk;
  LLVMValueRef qs, ks, vs, os, ms_i, ms_j;  // row strides (Tq / Tk)
  LLVMValueRef uk_s, uk_pv, uk_pv_edge;
  LLVMValueRef kt, st, o, m, l, qf;  // scratch parts
} attn_t;

// The unit's softmax update of row |r| of the score tile: scores of keys
// [j0, j0 + kn) for query |i| (of the row's mask pointer |mrow|) scaled,
// masked, exponentiated in place; the row's running max and sum and its
// output accumulators (|orow|, dvp floats) rescaled.
static void row_update(attn_t* a, LLVMValueRef srow, LLVMValueRef i,
                       LLVMValueRef j0, LLVMValueRef kn, LLVMValueRef mrow,
                       LLVMValueRef mslot, LLVMValueRef lslot,
                       LLVMValueRef orow) {
  tj_emit_t* em = a->em;
  LLVMBuilderRef b = em->b;
  const tj_kir_t* k = em->k;
  const int32_t w = a->w;
  LLVMTypeRef vt = a->vt;
  LLVMValueRef ninf = tj_emit_fconst(vt, -INFINITY);
  LLVMValueRef scale = tj_emit_fconst(vt, k->attention.scale);
  LLVMValueRef iota = tj_emit_iota(em, em->t_i64, w);
  LLVMValueRef vmax = tj_emit_alloca(em, vt, "vmax");
  LLVMBuildStore(b, ninf, vmax);
  tj_emit_loop_t cl;
  LLVMValueRef c =
      tj_emit_loop_begin(em, &cl, c64(em, 0), kn, c64(em, w), "sc");
  {
    LLVMValueRef p = gep_f32(em, srow, c);
    LLVMValueRef t = LLVMBuildFMul(b, vload(em, vt, p), scale, "");
    LLVMValueRef lanes = LLVMBuildAdd(b, tj_emit_splat(em, c, w), iota, "");
    LLVMValueRef valid =
        LLVMBuildICmp(b, LLVMIntSLT, lanes, tj_emit_splat(em, kn, w), "valid");
    if (a->mb >= 0) {
      tj_emit_point_t pt;
      memset(&pt, 0, sizeof(pt));
      pt.lanes = w;
      pt.vdim = k->rank - 1;
      pt.mask = valid;
      pt.ptr[a->mb] = tj_emit_advance(
          em, (uint32_t)a->mb, mrow,
          LLVMBuildMul(b, LLVMBuildAdd(b, j0, c, ""), a->ms_j, ""));
      LLVMValueRef mv = tj_emit_load(em, &pt, (uint32_t)a->mb);
      if (k->buffers[a->mb].dtype == TJ_DTYPE_BOOL) {
        valid = LLVMBuildAnd(b, valid, mv, "");
      } else {
        t = LLVMBuildFAdd(b, t, mv, "");
      }
    }
    if (k->attention.causal) {
      LLVMValueRef j = LLVMBuildAdd(b, tj_emit_splat(em, j0, w), lanes, "");
      valid = LLVMBuildAnd(
          b, valid,
          LLVMBuildICmp(b, LLVMIntSLE, j, tj_emit_splat(em, i, w), ""), "");
    }
    t = LLVMBuildSelect(b, valid, t, ninf, "");
    vstore(em, t, p);
    LLVMValueRef args[2] = {LLVMBuildLoad2(b, vt, vmax, ""), t};
    LLVMBuildStore(b, tj_emit_intrinsic(em, "llvm.maxnum", &vt, 1, args, 2),
                   vmax);
  }
  tj_emit_loop_end(em, &cl);
  LLVMValueRef tmax =
      reduce(em, "llvm.vector.reduce.fmax", LLVMBuildLoad2(b, vt, vmax, ""));
  LLVMValueRef m_old = LLVMBuildLoad2(b, em->t_f32, mslot, "m_old");
  LLVMValueRef margs[2] = {m_old, tmax};
  LLVMValueRef m_new =
      tj_emit_intrinsic(em, "llvm.maxnum", &em->t_f32, 1, margs, 2);
  LLVMValueRef none = LLVMBuildFCmp(b, LLVMRealOEQ, m_new,
                                    LLVMConstReal(em->t_f32, -INFINITY), "");
  LLVMValueRef m_use =
      LLVMBuildSelect(b, none, LLVMConstReal(em->t_f32, 0.0), m_new, "m_use");
  LLVMValueRef mu = tj_emit_splat(em, m_use, w);
  LLVMValueRef alpha_v =
      tj_vm_exp(em, LLVMBuildFSub(b, tj_emit_splat(em, m_old, w), mu, ""));
  LLVMValueRef vsum = tj_emit_alloca(em, vt, "vsum");
  LLVMBuildStore(b, tj_emit_fconst(vt, 0.0), vsum);
  c = tj_emit_loop_begin(em, &cl, c64(em, 0), kn, c64(em, w), "pc");
  {
    LLVMValueRef p = gep_f32(em, srow, c);
    LLVMValueRef e = tj_vm_exp(em, LLVMBuildFSub(b, vload(em, vt, p), mu, ""));
    // Lanes past kn hold stale values: 0, so the sum skips them.
    LLVMValueRef lanes = LLVMBuildAdd(b, tj_emit_splat(em, c, w), iota, "");
    e = LLVMBuildSelect(
        b, LLVMBuildICmp(b, LLVMIntSLT, lanes, tj_emit_splat(em, kn, w), ""), e,
        tj_emit_fconst(vt, 0.0), "");
    vstore(em, e, p);
    LLVMBuildStore(b, LLVMBuildFAdd(b, LLVMBuildLoad2(b, vt, vsum, ""), e, ""),
                   vsum);
  }
  tj_emit_loop_end(em, &cl);
  LLVMValueRef alpha =
      LLVMBuildExtractElement(b, alpha_v, LLVMConstInt(em->t_i32, 0, 0), "");
  LLVMValueRef sum =
      reduce(em, "llvm.vector.reduce.fadd", LLVMBuildLoad2(b, vt, vsum, ""));
  LLVMValueRef l_old = LLVMBuildLoad2(b, em->t_f32, lslot, "");
  LLVMBuildStore(
      b, LLVMBuildFAdd(b, LLVMBuildFMul(b, alpha, l_old, ""), sum, ""), lslot);
  LLVMBuildStore(b, m_new, mslot);
  // O_row *= alpha (alpha = 1 when the max did not move: skipped).
  tj_emit_if_t moved;
  tj_emit_if_begin(
      em, &moved,
      LLVMBuildFCmp(b, LLVMRealUNE, alpha, LLVMConstReal(em->t_f32, 1.0), ""),
      "rescale");
  c = tj_emit_loop_begin(em, &cl, c64(em, 0), a->dvp, c64(em, w), "oc");
  {
    LLVMValueRef p = gep_f32(em, orow, c);
    vstore(em, LLVMBuildFMul(b, vload(em, vt, p), alpha_v, ""), p);
  }
  tj_emit_loop_end(em, &cl);
  tj_emit_if_end(em, &moved);
}

tj_status_t tj_emit_attention(tj_emit_t* em) {
  const tj_kir_t* k = em->k;
  LLVMBuilderRef b = em->b;
  attn_t a;
  memset(&a, 0, sizeof(a));
  a.em = em;
  a.w = em->target.lanes;
  a.mb = -1;
  tj_kir_attention_resolve(a.w, &a.s);
  const int32_t w = a.w, r = k->rank;
  // The backward's nodes decompose on x86 (x86_native_op keeps only the
  // forward); their kernel IR has no x86 kernel.
  if (k->attention.op != TJ_KIR_ATTENTION_FORWARD || k->attention.with_lse)
    return tj_unsupported(
        "kernel @%s: x86's attention template computes the forward only "
        "(no lse: attention_lse decomposes here)",
        k->name);
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    switch (k->buffers[i].role) {
      case TJ_KIR_ATTN_Q:
        a.qb = i;
        break;
      case TJ_KIR_ATTN_K:
        a.kb = i;
        break;
      case TJ_KIR_ATTN_V:
        a.vb = i;
        break;
      case TJ_KIR_ATTN_MASK:
        a.mb = (int32_t)i;
        break;
      default:
        a.ob = i;
        break;
    }
  }
  a.vt = LLVMVectorType(em->t_f32, (unsigned)w);
  const tj_dtype_t qdt = k->buffers[a.qb].dtype, kdt = k->buffers[a.kb].dtype,
                   vdt = k->buffers[a.vb].dtype;
  // The microkernels: S = Q . K^T over packed panels, O += P . V in place.
  char n_s[256], n_pv[256], n_pve[256];
  snprintf(n_s, sizeof(n_s), "tj_ukernel_%s_qk", k->name);
  snprintf(n_pv, sizeof(n_pv), "tj_ukernel_%s_pv", k->name);
  snprintf(n_pve, sizeof(n_pve), "tj_ukernel_%s_pv_edge", k->name);
  // f16/bf16 q rows are widened into scratch once per unit (a_dtype f32):
  // the microkernel would otherwise widen each broadcast, every panel.
  tj_ukernel_opts_t os = {.mr = a.s.bm,
                          .nr = a.s.nr,
                          .chains = 1,
                          .a_dtype = TJ_DTYPE_F32,
                          .b_dtype = TJ_DTYPE_F32,
                          .name = n_s,
                          .hot = true};
  tj_ukernel_opts_t opv = {.mr = a.s.bm,
                           .nr = a.s.nr,
                           .direct = true,
                           .chains = 1,
                           .a_dtype = TJ_DTYPE_F32,
                           .b_dtype = vdt,
                           .name = n_pv,
                           .hot = true};
  tj_ukernel_opts_t ope = opv;
  ope.masked = true;
  ope.name = n_pve;
  a.uk_s = tj_emit_ukernel(em, &os);
  a.uk_pv = tj_emit_ukernel(em, &opv);
  a.uk_pv_edge = tj_emit_ukernel(em, &ope);

  a.d = tj_emit_ival(em, k->attention.d);
  a.dv = tj_emit_ival(em, k->attention.dv);
  const int64_t nr = a.s.nr, bm = a.s.bm, bn = a.s.bn, uq = a.s.uq;
  a.dvp =
      LLVMBuildMul(b,
                   LLVMBuildUDiv(b, LLVMBuildAdd(b, a.dv, c64(em, nr - 1), ""),
                                 c64(em, nr), ""),
                   c64(em, nr), "dvp");
  a.tq = em->dim[r - 2];
  a.tk = em->dim[r - 1];
  a.qs = tj_emit_stride(em, a.qb, r - 2);
  a.os = tj_emit_stride(em, a.ob, r - 2);
  a.ks = tj_emit_stride(em, a.kb, r - 1);
  a.vs = tj_emit_stride(em, a.vb, r - 1);
  if (a.mb >= 0) {
    a.ms_i = tj_emit_stride(em, (uint32_t)a.mb, r - 2);
    a.ms_j = tj_emit_stride(em, (uint32_t)a.mb, r - 1);
  }
  // Scratch (tj_kir_launch_info sizes it the same way).
  LLVMValueRef off = c64(em, 0);
  a.kt = em->arg_scratch;
  off = align64(em, LLVMBuildMul(b, a.d, c64(em, bn * 4), ""));
  a.st = gep_i8(em, em->arg_scratch, off);
  off = LLVMBuildAdd(b, off, c64(em, (bm * bn * 4 + 63) / 64 * 64), "");
  a.o = gep_i8(em, em->arg_scratch, off);
  off = LLVMBuildAdd(
      b, off, align64(em, LLVMBuildMul(b, a.dvp, c64(em, uq * 4), "")), "");
  a.m = gep_i8(em, em->arg_scratch, off);
  off = LLVMBuildAdd(b, off, c64(em, (uq * 4 + 63) / 64 * 64), "");
  a.l = gep_i8(em, em->arg_scratch, off);
  off = LLVMBuildAdd(b, off, c64(em, (uq * 4 + 63) / 64 * 64), "");
  a.qf = gep_i8(em, em->arg_scratch, off);

  // Units: (batch.., Hkv, G) row-major, then the query block (fastest).
  LLVMValueRef qblocks = LLVMBuildUDiv(
      b, LLVMBuildAdd(b, a.tq, c64(em, uq - 1), ""), c64(em, uq), "qblocks");
  tj_emit_loop_t ul;
  LLVMValueRef u =
      tj_emit_loop_begin(em, &ul, em->arg_begin, em->arg_end, c64(em, 1), "u");
  LLVMValueRef qblk = LLVMBuildURem(b, u, qblocks, "qblk");
  LLVMValueRef rest = LLVMBuildUDiv(b, u, qblocks, "");
  LLVMValueRef base[TJ_KIR_MAX_BUFFERS];
  for (uint32_t i = 0; i < k->num_buffers; ++i) base[i] = em->base[i];
  for (int32_t d = r - 3; d >= 0; --d) {
    LLVMValueRef idx = LLVMBuildURem(b, rest, em->dim[d], "");
    rest = LLVMBuildUDiv(b, rest, em->dim[d], "");
    for (uint32_t i = 0; i < k->num_buffers; ++i) {
      if (tj_kir_ival_is_const(k->buffers[i].strides[d], 0)) continue;
      base[i] = tj_emit_advance(
          em, i, base[i], LLVMBuildMul(b, idx, tj_emit_stride(em, i, d), ""));
    }
  }
  LLVMValueRef i0 = LLVMBuildMul(b, qblk, c64(em, uq), "i0");
  LLVMValueRef rows = min64(em, c64(em, uq), LLVMBuildSub(b, a.tq, i0, ""));
  // O = 0, m = -inf, l = 0.
  tj_emit_loop_t zl;
  LLVMValueRef z = tj_emit_loop_begin(em, &zl, c64(em, 0),
                                      LLVMBuildMul(b, a.dvp, c64(em, uq), ""),
                                      c64(em, w), "zero");
  vstore(em, tj_emit_fconst(a.vt, 0.0), gep_f32(em, a.o, z));
  tj_emit_loop_end(em, &zl);
  for (int64_t q = 0; q < uq; ++q) {
    LLVMBuildStore(b, LLVMConstReal(em->t_f32, -INFINITY),
                   gep_f32(em, a.m, c64(em, q)));
    LLVMBuildStore(b, LLVMConstReal(em->t_f32, 0.0),
                   gep_f32(em, a.l, c64(em, q)));
  }
  LLVMValueRef kend = a.tk;
  if (k->attention.causal) {
    kend = min64(em, a.tk, LLVMBuildAdd(b, i0, rows, ""));
  }
  tj_kir_gemm_schedule_t ps;
  memset(&ps, 0, sizeof(ps));
  ps.tile_m = (int32_t)bm;
  ps.tile_n = (int32_t)nr;
  ps.nc = (int32_t)bn;
  ps.mc = (int32_t)bm;
  ps.kc = 1;
  const bool k_unit_n =
      tj_kir_ival_is_const(k->buffers[a.kb].strides[r - 1], 1);
  LLVMValueRef qbase =
      tj_emit_advance(em, a.qb, base[a.qb], LLVMBuildMul(b, i0, a.qs, ""));
  LLVMValueRef qlda = a.qs;
  if (qdt != TJ_DTYPE_F32) {
    tj_emit_loop_t wl, el;
    LLVMValueRef wr =
        tj_emit_loop_begin(em, &wl, c64(em, 0), rows, c64(em, 1), "qrow");
    LLVMValueRef src =
        tj_emit_advance(em, a.qb, qbase, LLVMBuildMul(b, wr, a.qs, ""));
    LLVMValueRef dst = gep_f32(em, a.qf, LLVMBuildMul(b, wr, a.d, ""));
    LLVMValueRef e =
        tj_emit_loop_begin(em, &el, c64(em, 0), a.d, c64(em, 1), "qe");
    LLVMValueRef x = LLVMBuildLoad2(b, tj_emit_memory_type(em, qdt),
                                    tj_emit_advance(em, a.qb, src, e), "");
    LLVMSetAlignment(x, 2);
    LLVMBuildStore(b, tj_emit_widen(em, qdt, x), gep_f32(em, dst, e));
    tj_emit_loop_end(em, &el);
    tj_emit_loop_end(em, &wl);
    qbase = a.qf;
    qlda = a.d;
  }
  tj_emit_loop_t jl;
  LLVMValueRef j0 =
      tj_emit_loop_begin(em, &jl, c64(em, 0), kend, c64(em, bn), "j0");
  {
    LLVMValueRef kn = min64(em, c64(em, bn), LLVMBuildSub(b, kend, j0, ""));
    LLVMValueRef ksrc =
        tj_emit_advance(em, a.kb, base[a.kb], LLVMBuildMul(b, j0, a.ks, ""));
    // K^T: element (d, j) at ksrc[j * ks + d].
    tj_emit_pack_b(em, &ps, kdt, ksrc, c64(em, 1), a.ks, k_unit_n, true, a.d,
                   kn, a.kt);
    LLVMValueRef panels = LLVMBuildUDiv(
        b, LLVMBuildAdd(b, kn, c64(em, nr - 1), ""), c64(em, nr), "panels");
    LLVMValueRef vsrc =
        tj_emit_advance(em, a.vb, base[a.vb], LLVMBuildMul(b, j0, a.vs, ""));
    LLVMValueRef dv_full = LLVMBuildMul(
        b, LLVMBuildUDiv(b, a.dv, c64(em, nr), ""), c64(em, nr), "dv_full");
    tj_emit_loop_t rl;
    LLVMValueRef rb =
        tj_emit_loop_begin(em, &rl, c64(em, 0), rows, c64(em, bm), "rb");
    {
      LLVMValueRef mrv = min64(em, c64(em, bm), LLVMBuildSub(b, rows, rb, ""));
      LLVMValueRef qrow =
          qdt == TJ_DTYPE_F32
              ? tj_emit_advance(em, a.qb, qbase, LLVMBuildMul(b, rb, a.qs, ""))
              : gep_f32(em, qbase, LLVMBuildMul(b, rb, a.d, ""));
      tj_emit_loop_t pl;
      LLVMValueRef p =
          tj_emit_loop_begin(em, &pl, c64(em, 0), panels, c64(em, 1), "panel");
      {
        LLVMValueRef args[11] = {
            qrow,
            qlda,
            c64(em, 1),
            gep_f32(
                em, a.kt,
                LLVMBuildMul(b, p, LLVMBuildMul(b, a.d, c64(em, nr), ""), "")),
            c64(em, nr),
            a.d,
            mrv,
            gep_f32(em, a.st, LLVMBuildMul(b, p, c64(em, nr), "")),
            c64(em, bn),
            LLVMConstInt(em->t_i1, 0, 0),
            c64(em, nr)};
        call(em, a.uk_s, args, 11);
      }
      tj_emit_loop_end(em, &pl);
      tj_emit_loop_t sl;
      LLVMValueRef rr =
          tj_emit_loop_begin(em, &sl, c64(em, 0), mrv, c64(em, 1), "row");
      {
        LLVMValueRef ri = LLVMBuildAdd(b, rb, rr, "");
        LLVMValueRef i = LLVMBuildAdd(b, i0, ri, "i");
        LLVMValueRef mrow = NULL;
        if (a.mb >= 0) {
          mrow = tj_emit_advance(em, (uint32_t)a.mb, base[a.mb],
                                 LLVMBuildMul(b, i, a.ms_i, ""));
        }
        row_update(&a, gep_f32(em, a.st, LLVMBuildMul(b, rr, c64(em, bn), "")),
                   i, j0, kn, mrow, gep_f32(em, a.m, ri), gep_f32(em, a.l, ri),
                   gep_f32(em, a.o, LLVMBuildMul(b, ri, a.dvp, "")));
      }
      tj_emit_loop_end(em, &sl);
      LLVMValueRef orows = gep_f32(em, a.o, LLVMBuildMul(b, rb, a.dvp, ""));
      tj_emit_loop_t cl;
      LLVMValueRef c0 =
          tj_emit_loop_begin(em, &cl, c64(em, 0), dv_full, c64(em, nr), "pv");
      {
        LLVMValueRef args[11] = {a.st,
                                 c64(em, bn),
                                 c64(em, 1),
                                 tj_emit_advance(em, a.vb, vsrc, c0),
                                 a.vs,
                                 kn,
                                 mrv,
                                 gep_f32(em, orows, c0),
                                 a.dvp,
                                 LLVMConstInt(em->t_i1, 1, 0),
                                 LLVMBuildSub(b, a.dv, c0, "")};
        call(em, a.uk_pv, args, 11);
      }
      tj_emit_loop_end(em, &cl);
      tj_emit_if_t edge;
      tj_emit_if_begin(em, &edge,
                       LLVMBuildICmp(b, LLVMIntSLT, dv_full, a.dv, ""),
                       "pv_edge");
      {
        LLVMValueRef args[11] = {a.st,
                                 c64(em, bn),
                                 c64(em, 1),
                                 tj_emit_advance(em, a.vb, vsrc, dv_full),
                                 a.vs,
                                 kn,
                                 mrv,
                                 gep_f32(em, orows, dv_full),
                                 a.dvp,
                                 LLVMConstInt(em->t_i1, 1, 0),
                                 LLVMBuildSub(b, a.dv, dv_full, "")};
        call(em, a.uk_pv_edge, args, 11);
      }
      tj_emit_if_end(em, &edge);
    }
    tj_emit_loop_end(em, &rl);
  }
  tj_emit_loop_end(em, &jl);
  // y = O / l (0 where l is 0: no key), in the output's dtype.
  const tj_dtype_t odt = k->buffers[a.ob].dtype;
  LLVMValueRef ov_full =
      LLVMBuildMul(b, LLVMBuildUDiv(b, a.dv, c64(em, w), ""), c64(em, w), "");
  tj_emit_loop_t fl;
  LLVMValueRef fr =
      tj_emit_loop_begin(em, &fl, c64(em, 0), rows, c64(em, 1), "out");
  {
    LLVMValueRef l = LLVMBuildLoad2(b, em->t_f32, gep_f32(em, a.l, fr), "");
    LLVMValueRef inv = LLVMBuildSelect(
        b, LLVMBuildFCmp(b, LLVMRealOEQ, l, LLVMConstReal(em->t_f32, 0.0), ""),
        LLVMConstReal(em->t_f32, 0.0),
        LLVMBuildFDiv(b, LLVMConstReal(em->t_f32, 1.0), l, ""), "inv");
    LLVMValueRef invv = tj_emit_splat(em, inv, w);
    LLVMValueRef orow = gep_f32(em, a.o, LLVMBuildMul(b, fr, a.dvp, ""));
    LLVMValueRef dst =
        tj_emit_advance(em, a.ob, base[a.ob],
                        LLVMBuildMul(b, LLVMBuildAdd(b, i0, fr, ""), a.os, ""));
    tj_emit_loop_t cl;
    LLVMValueRef c =
        tj_emit_loop_begin(em, &cl, c64(em, 0), ov_full, c64(em, w), "oc");
    {
      LLVMValueRef v =
          LLVMBuildFMul(b, vload(em, a.vt, gep_f32(em, orow, c)), invv, "");
      vstore(em, tj_emit_narrow(em, odt, v), tj_emit_advance(em, a.ob, dst, c));
    }
    tj_emit_loop_end(em, &cl);
    tj_emit_if_t tail;
    tj_emit_if_begin(em, &tail, LLVMBuildICmp(b, LLVMIntSLT, ov_full, a.dv, ""),
                     "otail");
    {
      LLVMValueRef v = LLVMBuildFMul(
          b, vload(em, a.vt, gep_f32(em, orow, ov_full)), invv, "");
      v = tj_emit_narrow(em, odt, v);
      LLVMValueRef mask =
          tj_emit_lane_mask(em, LLVMBuildSub(b, a.dv, ov_full, ""), w);
      LLVMTypeRef types[2] = {LLVMTypeOf(v), em->t_ptr};
      LLVMValueRef args[4] = {v, tj_emit_advance(em, a.ob, dst, ov_full),
                              LLVMConstInt(em->t_i32, 2, 0), mask};
      tj_emit_intrinsic(em, "llvm.masked.store", types, 2, args, 4);
    }
    tj_emit_if_end(em, &tail);
  }
  tj_emit_loop_end(em, &fl);
  tj_emit_loop_end(em, &ul);
  return NULL;
}
