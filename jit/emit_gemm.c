// The GEMM template: packed B blocks, a register-tiled microkernel with
// llvm.fma on <W x float>, and the epilogue applied to each finished tile.
//
//   for u in [begin, end):                       // (batch, n block, m block)
//     for k0 in [0, K) step kc:                  // one pass when K <= kc
//       pack B[k0 : k0+kc, n0 : n0+nc] into scratch as panels [nc/NR][kc][NR]
//         (zero padded; skipped when the previous unit of this call packed
//         the same block and K <= kc)
//       for m in [m0, m0+mc) step MR:            // A sliver (MR x kc) in L1
//         for each NR panel:                     // B panel streams from L2
//           ukernel: MR x NR accumulators over kc (rows past M re-read the
//             last valid row and are never stored)
//           last pass: epilogue on the tile, one row at a time
//
// The microkernel is its own noinline function: its register allocation
// then sees only the accumulators and the K loop, and the epilogue's
// constants (GELU's polynomials) never compete with the accumulators for
// registers, which is what made codegen slow and spill-prone when both
// shared a function (LLVM-NOTES). The tile crosses from the microkernel to
// the epilogue through a 64-byte-aligned stack buffer that stays in L1.

#include <stdio.h>
#include <string.h>

#include "jit/emit_llvm.h"
#include "lib/dtype.h"

static LLVMValueRef i64c(tj_emit_t* em, int64_t v) {
  return LLVMConstInt(em->t_i64, (unsigned long long)v, 1);
}

static LLVMValueRef ceil_div(tj_emit_t* em, LLVMValueRef a, int64_t b) {
  return LLVMBuildUDiv(em->b, LLVMBuildAdd(em->b, a, i64c(em, b - 1), ""),
                       i64c(em, b), "");
}

static LLVMValueRef gep_f32(tj_emit_t* em, LLVMValueRef ptr,
                            LLVMValueRef count) {
  return LLVMBuildGEP2(em->b, em->t_f32, ptr, &count, 1, "");
}

// void ukernel(ptr a, i64 lda, i64 ka, ptr bp, i64 kc, i64 mr_valid,
//              ptr tile, i64 ld, i1 accumulate)
// tile[r*ld + c] (+)= sum_k a[r*lda + k*ka] * bp[k*NR + c], r < MR, c < NR.
static LLVMValueRef emit_ukernel(tj_emit_t* em,
                                 const tj_kir_gemm_schedule_t* s) {
  const int32_t w = em->target.lanes;
  const int32_t mr = s->tile_m, nv = s->tile_n / w;
  char name[256];
  snprintf(name, sizeof(name), "tj_ukernel_%s", em->k->name);
  LLVMTypeRef params[9] = {em->t_ptr, em->t_i64, em->t_i64,
                           em->t_ptr, em->t_i64, em->t_i64,
                           em->t_ptr, em->t_i64, em->t_i1};
  LLVMTypeRef fty = LLVMFunctionType(em->t_void, params, 9, 0);
  LLVMValueRef fn = LLVMAddFunction(em->mod, name, fty);
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  static const char* attrs[] = {"nounwind", "noinline"};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(attrs); ++i) {
    unsigned kind = LLVMGetEnumAttributeKindForName(attrs[i], strlen(attrs[i]));
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(em->ctx, kind, 0));
  }
  LLVMValueRef a = LLVMGetParam(fn, 0), lda = LLVMGetParam(fn, 1),
               ka = LLVMGetParam(fn, 2), bp = LLVMGetParam(fn, 3),
               kc = LLVMGetParam(fn, 4), mrv = LLVMGetParam(fn, 5),
               tile = LLVMGetParam(fn, 6), ld = LLVMGetParam(fn, 7),
               accum = LLVMGetParam(fn, 8);
  LLVMBuilderRef saved = em->b;
  LLVMBuilderRef b = LLVMCreateBuilderInContext(em->ctx);
  em->b = b;
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(em->ctx, fn, "entry");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(em->ctx, fn, "k");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(em->ctx, fn, "done");
  LLVMPositionBuilderAtEnd(b, entry);
  LLVMTypeRef vt = LLVMVectorType(em->t_f32, (unsigned)w);
  unsigned valign = (unsigned)w * 4;
  LLVMValueRef rowp[16];
  LLVMValueRef last = LLVMBuildSub(b, mrv, i64c(em, 1), "");
  for (int32_t r = 0; r < mr; ++r) {
    LLVMValueRef rr = tj_emit_min_i64(em, i64c(em, r), last);
    rowp[r] = gep_f32(em, a, LLVMBuildMul(b, rr, lda, ""));
  }
  LLVMValueRef init[16 * 16];
  LLVMValueRef zero = tj_emit_fconst(vt, 0.0);
  for (int32_t r = 0; r < mr; ++r) {
    for (int32_t v = 0; v < nv; ++v) {
      LLVMValueRef p = gep_f32(
          em, tile,
          LLVMBuildAdd(b, LLVMBuildMul(b, i64c(em, r), ld, ""),
                       i64c(em, (int64_t)v * w), ""));
      LLVMValueRef old = LLVMBuildLoad2(b, vt, p, "");
      LLVMSetAlignment(old, valign);
      init[r * nv + v] = LLVMBuildSelect(b, accum, old, zero, "");
    }
  }
  LLVMValueRef k0 = i64c(em, 0);
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSGT, kc, k0, ""), body, done);

  LLVMPositionBuilderAtEnd(b, body);
  LLVMValueRef kphi = LLVMBuildPhi(b, em->t_i64, "kk");
  LLVMValueRef acc[16 * 16];
  for (int32_t i = 0; i < mr * nv; ++i) acc[i] = LLVMBuildPhi(b, vt, "acc");
  LLVMValueRef bvec[16];
  LLVMValueRef brow = gep_f32(em, bp, LLVMBuildMul(b, kphi, i64c(em, s->tile_n), ""));
  for (int32_t v = 0; v < nv; ++v) {
    bvec[v] = LLVMBuildLoad2(b, vt, gep_f32(em, brow, i64c(em, (int64_t)v * w)),
                             "b");
    LLVMSetAlignment(bvec[v], valign);
  }
  LLVMValueRef koff = LLVMBuildMul(b, kphi, ka, "");
  LLVMValueRef next[16 * 16];
  for (int32_t r = 0; r < mr; ++r) {
    LLVMValueRef av = LLVMBuildLoad2(b, em->t_f32, gep_f32(em, rowp[r], koff), "a");
    LLVMSetAlignment(av, 4);
    LLVMValueRef splat = tj_emit_splat(em, av, w);
    for (int32_t v = 0; v < nv; ++v) {
      LLVMValueRef args[3] = {splat, bvec[v], acc[r * nv + v]};
      LLVMTypeRef t = vt;
      next[r * nv + v] = tj_emit_intrinsic(
          em, em->target.has_fma ? "llvm.fma" : "llvm.fmuladd", &t, 1, args, 3);
    }
  }
  LLVMValueRef knext = LLVMBuildAdd(b, kphi, i64c(em, 1), "");
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, knext, kc, ""), body, done);
  LLVMBasicBlockRef from_entry[1] = {entry}, from_body[1] = {body};
  LLVMAddIncoming(kphi, &k0, from_entry, 1);
  LLVMAddIncoming(kphi, &knext, from_body, 1);
  for (int32_t i = 0; i < mr * nv; ++i) {
    LLVMAddIncoming(acc[i], &init[i], from_entry, 1);
    LLVMAddIncoming(acc[i], &next[i], from_body, 1);
  }

  LLVMPositionBuilderAtEnd(b, done);
  LLVMValueRef out[16 * 16];
  for (int32_t i = 0; i < mr * nv; ++i) {
    out[i] = LLVMBuildPhi(b, vt, "out");
    LLVMAddIncoming(out[i], &init[i], from_entry, 1);
    LLVMAddIncoming(out[i], &next[i], from_body, 1);
  }
  for (int32_t r = 0; r < mr; ++r) {
    for (int32_t v = 0; v < nv; ++v) {
      LLVMValueRef phi = out[r * nv + v];
      LLVMValueRef p = gep_f32(
          em, tile,
          LLVMBuildAdd(b, LLVMBuildMul(b, i64c(em, r), ld, ""),
                       i64c(em, (int64_t)v * w), ""));
      LLVMSetAlignment(LLVMBuildStore(b, phi, p), valign);
    }
  }
  LLVMBuildRetVoid(b);
  LLVMDisposeBuilder(b);
  em->b = saved;
  return fn;
}

// Packs B[k0 : k0+kc, n0 : n0+nlen] (|src| at its first element) into
// |dst| as zero-padded panels [ceil(nlen/NR)][kc][NR].
static void emit_pack(tj_emit_t* em, const tj_kir_gemm_schedule_t* s,
                      uint32_t bbuf, LLVMValueRef src, LLVMValueRef kc,
                      LLVMValueRef nlen, LLVMValueRef dst) {
  const tj_kir_t* k = em->k;
  const int32_t w = em->target.lanes, nv = s->tile_n / w;
  LLVMTypeRef vt = LLVMVectorType(em->t_f32, (unsigned)w);
  LLVMValueRef sk = tj_emit_stride(em, bbuf, k->rank - 2);
  LLVMValueRef sn = tj_emit_stride(em, bbuf, k->rank - 1);
  bool unit = tj_kir_ival_is_const(k->buffers[bbuf].strides[k->rank - 1], 1);
  LLVMValueRef align = LLVMConstInt(em->t_i32, 4, 0);
  tj_emit_loop_t panels;
  LLVMValueRef j = tj_emit_loop_begin(em, &panels, i64c(em, 0),
                                      ceil_div(em, nlen, s->tile_n),
                                      i64c(em, 1), "panel");
  LLVMValueRef col0 = LLVMBuildMul(em->b, j, i64c(em, s->tile_n), "");
  LLVMValueRef cols = LLVMBuildSub(em->b, nlen, col0, "");
  LLVMValueRef src_j = gep_f32(em, src, LLVMBuildMul(em->b, col0, sn, ""));
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
  LLVMValueRef kk = tj_emit_loop_begin(em, &kl, i64c(em, 0), kc, i64c(em, 1),
                                       "pack_k");
  LLVMValueRef row = gep_f32(em, src_j, LLVMBuildMul(em->b, kk, sk, ""));
  LLVMValueRef out =
      gep_f32(em, dst_j, LLVMBuildMul(em->b, kk, i64c(em, s->tile_n), ""));
  for (int32_t v = 0; v < nv; ++v) {
    LLVMValueRef p = gep_f32(
        em, row, LLVMBuildMul(em->b, i64c(em, (int64_t)v * w), sn, ""));
    LLVMValueRef val;
    if (unit) {
      LLVMTypeRef types[2] = {vt, em->t_ptr};
      LLVMValueRef args[4] = {p, align, mask[v], LLVMConstNull(vt)};
      val = tj_emit_intrinsic(em, "llvm.masked.load", types, 2, args, 4);
    } else {
      LLVMValueRef ptrs = LLVMBuildGEP2(em->b, em->t_f32, p, &offs, 1, "");
      LLVMTypeRef types[2] = {vt, LLVMTypeOf(ptrs)};
      LLVMValueRef args[4] = {ptrs, align, mask[v], LLVMConstNull(vt)};
      val = tj_emit_intrinsic(em, "llvm.masked.gather", types, 2, args, 4);
    }
    LLVMValueRef st = LLVMBuildStore(
        em->b, val, gep_f32(em, out, i64c(em, (int64_t)v * w)));
    LLVMSetAlignment(st, (unsigned)w * 4);
  }
  tj_emit_loop_end(em, &kl);
  tj_emit_loop_end(em, &panels);
}

// The epilogue over the finished tile at (|tile|, |ld|): rows [0, rows) of
// C rows starting at |m|, columns [col0, col0 + cols) (cols may exceed NR).
static tj_status_t emit_epilogue(tj_emit_t* em,
                                 const tj_kir_gemm_schedule_t* s,
                                 const tj_emit_point_t* batch, LLVMValueRef tile,
                                 LLVMValueRef ld, LLVMValueRef rows,
                                 LLVMValueRef m, LLVMValueRef col0,
                                 LLVMValueRef cols) {
  const tj_kir_t* k = em->k;
  const int32_t w = em->target.lanes, nv = s->tile_n / w;
  const int32_t dm = k->rank - 2, dn = k->rank - 1;
  LLVMTypeRef vt = LLVMVectorType(em->t_f32, (unsigned)w);
  tj_emit_loop_t rl;
  LLVMValueRef r = tj_emit_loop_begin(em, &rl, i64c(em, 0), rows, i64c(em, 1),
                                      "epi_row");
  LLVMValueRef mm = LLVMBuildAdd(em->b, m, r, "");
  tj_emit_point_t row = *batch;
  row.index[dm] = mm;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    if (k->buffers[b].role != TJ_KIR_INPUT && k->buffers[b].role != TJ_KIR_OUTPUT) {
      continue;
    }
    LLVMValueRef off = LLVMBuildAdd(
        em->b, LLVMBuildMul(em->b, mm, tj_emit_stride(em, b, dm), ""),
        LLVMBuildMul(em->b, col0, tj_emit_stride(em, b, dn), ""), "");
    row.ptr[b] = tj_emit_advance(em, b, batch->ptr[b], off);
  }
  LLVMValueRef tile_row = gep_f32(em, tile, LLVMBuildMul(em->b, r, ld, ""));
  for (int32_t v = 0; v < nv; ++v) {
    LLVMValueRef off = i64c(em, (int64_t)v * w);
    tj_emit_point_t p;
    tj_emit_line_point(em, &row, off, col0, &p);
    p.mask = tj_emit_lane_mask(em, LLVMBuildSub(em->b, cols, off, ""), w);
    LLVMValueRef acc = LLVMBuildLoad2(em->b, vt, gep_f32(em, tile_row, off), "");
    LLVMSetAlignment(acc, (unsigned)w * 4);
    p.acc = acc;
    TJ_RETURN_IF_ERROR(tj_emit_body(em, &k->phases[0], &p, NULL));
  }
  tj_emit_loop_end(em, &rl);
  return NULL;
}

tj_status_t tj_emit_gemm(tj_emit_t* em) {
  const tj_kir_t* k = em->k;
  tj_kir_gemm_schedule_t s;
  tj_kir_gemm_resolve(k, em->target.lanes, &s);
  const int32_t w = em->target.lanes;
  if (s.tile_n % w != 0 || s.tile_m > 16 || s.tile_n / w > 16) {
    return tj_internal("kernel @%s: unresolvable gemm tile %dx%d", k->name,
                       s.tile_m, s.tile_n);
  }
  uint32_t abuf = 0, bbuf = 0;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    if (k->buffers[b].role == TJ_KIR_GEMM_A) abuf = b;
    if (k->buffers[b].role == TJ_KIR_GEMM_B) bbuf = b;
  }
  const int32_t dm = k->rank - 2, dn = k->rank - 1;
  LLVMValueRef ukernel = emit_ukernel(em, &s);
  LLVMTypeRef ukernel_ty = LLVMGlobalGetValueType(ukernel);

  LLVMValueRef M = em->dim[dm], N = em->dim[dn], K = em->gemm_k;
  LLVMValueRef nmb = ceil_div(em, M, s.mc), nnb = ceil_div(em, N, s.nc);
  LLVMValueRef single = LLVMBuildICmp(em->b, LLVMIntSLE, K, i64c(em, s.kc),
                                      "single_pass");
  LLVMValueRef kc_eff = tj_emit_min_i64(em, K, i64c(em, s.kc));
  LLVMValueRef packed = em->arg_scratch;
  // Partial sums follow the packed block, 64-byte aligned (as
  // tj_kir_launch_info sizes it).
  LLVMValueRef pack_bytes = LLVMBuildAnd(
      em->b,
      LLVMBuildAdd(em->b, LLVMBuildMul(em->b, kc_eff, i64c(em, (int64_t)s.nc * 4), ""),
                   i64c(em, 63), ""),
      i64c(em, ~(int64_t)63), "");
  LLVMValueRef partial = LLVMBuildGEP2(em->b, em->t_i8, packed, &pack_bytes, 1,
                                       "partial");
  LLVMTypeRef tile_ty = LLVMArrayType(em->t_f32, (unsigned)(s.tile_m * s.tile_n));
  LLVMValueRef tile = tj_emit_alloca(em, tile_ty, "tile");
  LLVMSetAlignment(tile, 64);
  LLVMValueRef packed_key = tj_emit_alloca(em, em->t_i64, "packed_key");
  LLVMBuildStore(em->b, i64c(em, -1), packed_key);

  tj_emit_loop_t units;
  LLVMValueRef u = tj_emit_loop_begin(em, &units, em->arg_begin, em->arg_end,
                                      i64c(em, 1), "unit");
  LLVMValueRef mb = LLVMBuildURem(em->b, u, nmb, "");
  LLVMValueRef key = LLVMBuildUDiv(em->b, u, nmb, "");
  LLVMValueRef nb = LLVMBuildURem(em->b, key, nnb, "");
  LLVMValueRef bidx = LLVMBuildUDiv(em->b, key, nnb, "");
  tj_emit_point_t batch;
  memset(&batch, 0, sizeof(batch));
  batch.lanes = w;
  batch.vdim = dn;
  tj_emit_decompose(em, bidx, dm, &batch);
  LLVMValueRef m0 = LLVMBuildMul(em->b, mb, i64c(em, s.mc), "m0");
  LLVMValueRef m_end = tj_emit_min_i64(
      em, M, LLVMBuildAdd(em->b, m0, i64c(em, s.mc), ""));
  LLVMValueRef n0 = LLVMBuildMul(em->b, nb, i64c(em, s.nc), "n0");
  LLVMValueRef nlen = tj_emit_min_i64(em, i64c(em, s.nc),
                                      LLVMBuildSub(em->b, N, n0, ""));
  LLVMValueRef sa_m = tj_emit_stride(em, abuf, dm);
  LLVMValueRef sa_k = tj_emit_stride(em, abuf, dn);
  LLVMValueRef sb_k = tj_emit_stride(em, bbuf, dm);
  LLVMValueRef sb_n = tj_emit_stride(em, bbuf, dn);
  LLVMValueRef b_blk = gep_f32(em, batch.ptr[bbuf],
                               LLVMBuildMul(em->b, n0, sb_n, ""));
  // Passes over K; K == 0 still runs one (empty) pass so the epilogue
  // writes C = epilogue(0).
  LLVMValueRef passes = LLVMBuildSelect(
      em->b, LLVMBuildICmp(em->b, LLVMIntEQ, K, i64c(em, 0), ""), i64c(em, 1),
      ceil_div(em, K, s.kc), "");
  tj_emit_loop_t pl;
  LLVMValueRef pass = tj_emit_loop_begin(em, &pl, i64c(em, 0), passes,
                                         i64c(em, 1), "pass");
  LLVMValueRef k0 = LLVMBuildMul(em->b, pass, i64c(em, s.kc), "k0");
  LLVMValueRef kc = tj_emit_min_i64(em, i64c(em, s.kc),
                                    LLVMBuildSub(em->b, K, k0, ""));
  LLVMValueRef first = LLVMBuildICmp(em->b, LLVMIntEQ, pass, i64c(em, 0), "");
  LLVMValueRef last = LLVMBuildICmp(
      em->b, LLVMIntEQ, LLVMBuildAdd(em->b, pass, i64c(em, 1), ""), passes, "");
  {
    LLVMValueRef have = LLVMBuildAnd(
        em->b, single,
        LLVMBuildICmp(em->b, LLVMIntEQ,
                      LLVMBuildLoad2(em->b, em->t_i64, packed_key, ""), key, ""),
        "");
    tj_emit_if_t pack;
    tj_emit_if_begin(em, &pack, LLVMBuildNot(em->b, have, ""), "pack");
    emit_pack(em, &s, bbuf,
              gep_f32(em, b_blk, LLVMBuildMul(em->b, k0, sb_k, "")), kc, nlen,
              packed);
    LLVMBuildStore(em->b, LLVMBuildSelect(em->b, single, key, i64c(em, -1), ""),
                   packed_key);
    tj_emit_if_end(em, &pack);
  }
  tj_emit_loop_t ml;
  LLVMValueRef m = tj_emit_loop_begin(em, &ml, m0, m_end, i64c(em, s.tile_m),
                                      "m");
  LLVMValueRef rows = tj_emit_min_i64(em, i64c(em, s.tile_m),
                                      LLVMBuildSub(em->b, m_end, m, ""));
  LLVMValueRef a_ptr = gep_f32(
      em, batch.ptr[abuf],
      LLVMBuildAdd(em->b, LLVMBuildMul(em->b, m, sa_m, ""),
                   LLVMBuildMul(em->b, k0, sa_k, ""), ""));
  tj_emit_loop_t jl;
  LLVMValueRef j = tj_emit_loop_begin(em, &jl, i64c(em, 0),
                                      ceil_div(em, nlen, s.tile_n), i64c(em, 1),
                                      "panel");
  LLVMValueRef col = LLVMBuildMul(em->b, j, i64c(em, s.tile_n), "");
  LLVMValueRef bp = gep_f32(em, packed, LLVMBuildMul(em->b, col, kc, ""));
  // Single pass: the tile lives on the stack. Several passes: it lives in
  // the unit's partial-sum block, row stride nc.
  LLVMValueRef part_tile = gep_f32(
      em, partial,
      LLVMBuildAdd(em->b,
                   LLVMBuildMul(em->b, LLVMBuildSub(em->b, m, m0, ""),
                                i64c(em, s.nc), ""),
                   col, ""));
  LLVMValueRef tptr = LLVMBuildSelect(em->b, single, tile, part_tile, "");
  LLVMValueRef ld = LLVMBuildSelect(em->b, single, i64c(em, s.tile_n),
                                    i64c(em, s.nc), "");
  LLVMValueRef args[9] = {a_ptr, sa_m, sa_k, bp, kc, rows, tptr, ld,
                          LLVMBuildNot(em->b, first, "")};
  LLVMBuildCall2(em->b, ukernel_ty, ukernel, args, 9, "");
  tj_emit_if_t epi;
  tj_emit_if_begin(em, &epi, last, "epilogue");
  TJ_RETURN_IF_ERROR(emit_epilogue(em, &s, &batch, tptr, ld, rows, m,
                                   LLVMBuildAdd(em->b, n0, col, ""),
                                   LLVMBuildSub(em->b, nlen, col, "")));
  tj_emit_if_end(em, &epi);
  tj_emit_loop_end(em, &jl);
  tj_emit_loop_end(em, &ml);
  tj_emit_loop_end(em, &pl);
  tj_emit_loop_end(em, &units);
  return NULL;
}
