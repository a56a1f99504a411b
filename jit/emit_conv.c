// The CONV template (issue 15): a convolution on the CPU as an implicit
// GEMM, out[o, p] = b[o] + sum_k w[o, k] * X(k, p) per image, with k = (c,
// taps) and p the output pixel, built from the GEMM template's microkernel
// (jit/emit_gemm.h). Grouped (more groups than 1, more than one input
// channel a group), one such GEMM a group: c runs over the group's input
// channels and o over its output channels, a unit's channels in one group:
//
//   for u in [begin, end):          // (image, channel block, pixel block)
//     the unit's pixel coordinates: i * stride - low per spatial axis, and
//       their offset in x (-2^30 past the last pixel, so they fail the
//       bounds check)
//     for k0 in [0, K) step kc:
//       pack X(k0 : k0+kc, pixels) as f32 panels [nc/nr][kc][nr], each row
//         a masked gather of x at the pixels' offsets plus the tap's;
//         lanes outside x (the padding) are 0: no padded copy of x exists
//       for each block of mr channels, each panel:
//         acc (+)= w[o rows, k0 : k0+kc] . panel  (the packed microkernel,
//           reading w's rows in place: they are k-contiguous, which is how
//           the GEMM reads an unpacked A)
//     out[o, p] = acc + b[o] for the unit's valid pixels (masked tail), or
//       the epilogue (the MAP phase: relu, a residual add, ...) on it
//
// Every size but the batch is a constant of the kernel (kir/lower_conv.c),
// so the index arithmetic is by constants. f32 only.

#include <stdio.h>
#include <string.h>

#include "jit/emit_gemm.h"
#include "jit/emit_llvm.h"

static LLVMValueRef c64(tj_emit_t* em, int64_t v) {
  return LLVMConstInt(em->t_i64, (unsigned long long)v, 1);
}

static LLVMValueRef c32(tj_emit_t* em, int64_t v) {
  return LLVMConstInt(em->t_i32, (unsigned long long)v, 1);
}

static LLVMValueRef gep(tj_emit_t* em, LLVMTypeRef t, LLVMValueRef ptr,
                        LLVMValueRef n) {
  return LLVMBuildGEP2(em->b, t, ptr, &n, 1, "");
}

static void set_align(LLVMValueRef inst, unsigned bytes) {
  LLVMSetAlignment(inst, bytes);
}

static int64_t align64(int64_t bytes) { return (bytes + 63) / 64 * 64; }

// Lanes i < w of x at xrow[off + i * sx] where |mask| is set (0 elsewhere):
// the span of sx * w elements from off, every sx-th kept (the mask spread
// the same way), as the pointwise emitter's load_span does for strided
// windows. Masked-off lanes are not read, so off may lie outside x when
// they are the lanes that would.
static LLVMValueRef span_load(tj_emit_t* em, LLVMValueRef xrow,
                              LLVMValueRef off, LLVMValueRef mask, int64_t sx) {
  LLVMBuilderRef b = em->b;
  const int32_t w = em->target.lanes;
  LLVMTypeRef st = LLVMVectorType(em->t_f32, (unsigned)(sx * w));
  LLVMValueRef smask = mask;
  if (sx > 1) {
    LLVMValueRef spread[64];
    for (int64_t i = 0; i < sx * w; ++i)
      spread[i] = c32(em, i % sx == 0 ? i / sx : w);
    smask = LLVMBuildShuffleVector(
        b, mask, LLVMConstNull(LLVMVectorType(em->t_i1, (unsigned)w)),
        LLVMConstVector(spread, (unsigned)(sx * w)), "");
  }
  LLVMTypeRef lt[2] = {st, em->t_ptr};
  LLVMValueRef largs[4] = {gep(em, em->t_f32, xrow, off), c32(em, 4), smask,
                           tj_emit_fconst(st, 0.0)};
  LLVMValueRef lv = tj_emit_intrinsic(em, "llvm.masked.load", lt, 2, largs, 4);
  if (sx > 1) {
    LLVMValueRef pick[16];
    for (int32_t i = 0; i < w; ++i) pick[i] = c32(em, i * sx);
    lv = LLVMBuildShuffleVector(b, lv, LLVMGetUndef(st),
                                LLVMConstVector(pick, (unsigned)w), "");
  }
  return lv;
}

// One vector of a unit's pixels packed for every row of a pass: row kk
// (tap table entry kk: its offset in x and its tap's offsets along the
// axes) masked to the lanes whose tap lies inside x, loaded with the one
// kind of load the vector takes, stored at dst + kk * nr.
typedef enum pack_kind_t {
  kPackInside,   // one span, every tap of every lane inside x: no mask
  kPackRun,      // the lanes read one span of x
  kPackTwoRows,  // lanes < at one span, the rest another
  kPackGather,   // a masked gather at offs
} pack_kind_t;

typedef struct pack_t {
  const tj_kir_conv_t* cv;
  int32_t first;  // the first checked axis
  int64_t kc, nr;
  LLVMValueRef xbase, taps, tdel, kn, dst;
  LLVMValueRef cvec[3];  // the lanes' corner coordinates (i32)
  LLVMValueRef offs;     // the lanes' offsets in x (i64)
  LLVMValueRef o_first, at, o_second;
} pack_t;

static void pack_rows(tj_emit_t* em, const pack_t* pk, pack_kind_t kind) {
  LLVMBuilderRef b = em->b;
  const int32_t w = em->target.lanes;
  const int64_t sx = pk->cv->stride[2];
  LLVMTypeRef vf = LLVMVectorType(em->t_f32, (unsigned)w);
  LLVMValueRef lo = NULL;
  if (kind == kPackTwoRows) {
    lo = LLVMBuildICmp(
        b, LLVMIntULT, tj_emit_iota(em, em->t_i32, w),
        tj_emit_splat(em, LLVMBuildTrunc(b, pk->at, em->t_i32, ""), w), "lo");
  }
  tj_emit_loop_t kl;
  LLVMValueRef kk =
      tj_emit_loop_begin(em, &kl, c64(em, 0), pk->kn, c64(em, 1), "kk");
  LLVMValueRef rb =
      LLVMBuildLoad2(b, em->t_i64, gep(em, em->t_i64, pk->taps, kk), "rowbase");
  set_align(rb, 8);
  LLVMValueRef xrow = gep(em, em->t_f32, pk->xbase, rb);
  LLVMValueRef mask = NULL;
  for (int32_t d = pk->first; d < 3 && kind != kPackInside; ++d) {
    LLVMValueRef td =
        LLVMBuildLoad2(b, em->t_i32,
                       gep(em, em->t_i32, pk->tdel,
                           LLVMBuildAdd(b, kk, c64(em, d * pk->kc), "")),
                       "");
    set_align(td, 4);
    LLVMValueRef in =
        LLVMBuildAdd(b, pk->cvec[d], tj_emit_splat(em, td, w), "");
    LLVMValueRef ok = LLVMBuildICmp(
        b, LLVMIntULT, in, tj_emit_splat(em, c32(em, pk->cv->in[d]), w), "");
    mask = mask ? LLVMBuildAnd(b, mask, ok, "") : ok;
  }
  LLVMValueRef v;
  if (kind == kPackInside) {
    // An all-true mask: the masked load folds to a plain one.
    v = span_load(em, xrow, pk->o_first,
                  tj_emit_splat(em, LLVMConstInt(em->t_i1, 1, 0), w), sx);
  } else if (kind == kPackRun) {
    v = span_load(em, xrow, pk->o_first, mask, sx);
  } else if (kind == kPackTwoRows) {
    LLVMValueRef first_row =
        span_load(em, xrow, pk->o_first, LLVMBuildAnd(b, mask, lo, ""), sx);
    LLVMValueRef second_row =
        span_load(em, xrow, pk->o_second,
                  LLVMBuildAnd(b, mask, LLVMBuildNot(b, lo, ""), ""), sx);
    v = LLVMBuildSelect(b, lo, first_row, second_row, "");
  } else {
    LLVMTypeRef gtypes[2] = {vf, LLVMVectorType(em->t_ptr, (unsigned)w)};
    LLVMValueRef offs = pk->offs;
    LLVMValueRef ptrs = LLVMBuildGEP2(b, em->t_f32, xrow, &offs, 1, "");
    LLVMValueRef args[4] = {ptrs, c32(em, 4), mask, tj_emit_fconst(vf, 0.0)};
    v = tj_emit_intrinsic(em, "llvm.masked.gather", gtypes, 2, args, 4);
  }
  set_align(LLVMBuildStore(b, v,
                           gep(em, em->t_f32, pk->dst,
                               LLVMBuildMul(b, kk, c64(em, pk->nr), ""))),
            4);
  tj_emit_loop_end(em, &kl);
}

// Whether the epilogue may walk a unit's pixels as one line, its vectors
// crossing output rows: every buffer it touches has spatial strides
// row-major over the output's (or 0: a per-channel or scalar operand), and
// no instruction reads an index. Otherwise it walks one output row at a
// time (a 7x7 output then fills 7 of a vector's lanes).
static bool flat_epilogue(const tj_kir_t* k) {
  const tj_kir_phase_t* ph = &k->phases[0];
  for (uint32_t i = 0; i < ph->num_insts; ++i) {
    if (ph->insts[i].kind == TJ_KIR_INDEX) return false;
  }
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &k->buffers[b];
    if (buf->role != TJ_KIR_INPUT && buf->role != TJ_KIR_OUTPUT) continue;
    for (int32_t d = 2; d + 1 < k->rank; ++d) {
      const tj_kir_ival_t a = buf->strides[d], c = buf->strides[d + 1];
      if (a.param >= 0 || c.param >= 0 ||
          a.value != c.value * k->dims[d + 1].value) {
        return false;
      }
    }
  }
  return true;
}

// nchwc: an epilogue input held blocked (tj_kir_conv_t.inblock) at channel
// |o|: its strides (those within a block) put channel o at o, and its block
// o / w lies (o / w) w (P - 1) further on.
static LLVMValueRef inblock_skew(tj_emit_t* em, uint32_t bi, LLVMValueRef o,
                                 int64_t P) {
  const int32_t w = em->target.lanes;
  if (!(em->k->conv.inblock >> bi & 1u)) return c64(em, 0);
  LLVMBuilderRef b = em->b;
  return LLVMBuildMul(b, LLVMBuildUDiv(b, o, c64(em, w), ""),
                      c64(em, w * (P - 1)), "skew");
}

// The epilogue on the vector |v| pixels into the line |pt| (the line's
// sums from |arow|) plus |bias|, its lanes under |mask| (NULL: all).
static tj_status_t epilogue_vector(tj_emit_t* em, const tj_emit_point_t* pt,
                                   LLVMValueRef arow, LLVMValueRef v,
                                   LLVMValueRef bias, LLVMValueRef mask) {
  LLVMBuilderRef b = em->b;
  const int32_t w = em->target.lanes;
  LLVMTypeRef vf = LLVMVectorType(em->t_f32, (unsigned)w);
  tj_emit_point_t p;
  tj_emit_line_point(em, pt, v, pt->index[em->k->rank - 1], &p);
  p.mask = mask;
  LLVMValueRef src = gep(em, em->t_f32, arow, v), sum;
  if (mask) {
    LLVMTypeRef lt[2] = {vf, em->t_ptr};
    LLVMValueRef largs[4] = {src, c32(em, 4), mask, tj_emit_fconst(vf, 0.0)};
    sum = tj_emit_intrinsic(em, "llvm.masked.load", lt, 2, largs, 4);
  } else {
    sum = LLVMBuildLoad2(b, vf, src, "");
    set_align(sum, 4);
  }
  p.acc = LLVMBuildFAdd(b, sum, bias, "");
  return tj_emit_body(em, &em->k->phases[0], &p, NULL);
}

// The epilogue (the kernel's MAP phase) over the unit's finished block:
// acc [ocn][pn] (row stride nc) plus the bias is y at (n, o0 + row, p0 +
// column), which the phase reads as TJ_KIR_ACC while it loads its inputs
// and stores its outputs at that point, a vector of pixels at a time. With
// |n| NULL the unit is joined: p0 is a pixel of the batch, and each line
// (which never crosses an image: L divides P) finds its own image.
static tj_status_t store_epilogue(tj_emit_t* em, int32_t bb, LLVMValueRef acc,
                                  int64_t nc, LLVMValueRef n, LLVMValueRef o0,
                                  LLVMValueRef ocn, LLVMValueRef p0,
                                  LLVMValueRef pn) {
  const tj_kir_t* k = em->k;
  LLVMBuilderRef b = em->b;
  const int32_t w = em->target.lanes, r = k->rank;
  LLVMTypeRef vf = LLVMVectorType(em->t_f32, (unsigned)w);
  int64_t P = 1;
  for (int32_t d = 2; d < r; ++d) P *= k->dims[d].value;
  // Lines of L pixels: the whole image, or one output row.
  const int64_t L = flat_epilogue(k) ? P : k->dims[r - 1].value;
  LLVMValueRef pend = LLVMBuildAdd(b, p0, pn, "");
  LLVMValueRef line0 = LLVMBuildUDiv(b, p0, c64(em, L), "");
  LLVMValueRef line1 = LLVMBuildUDiv(
      b, LLVMBuildAdd(b, pend, c64(em, L - 1), ""), c64(em, L), "");
  tj_emit_loop_t orl;
  LLVMValueRef rr =
      tj_emit_loop_begin(em, &orl, c64(em, 0), ocn, c64(em, 1), "orow");
  LLVMValueRef o = LLVMBuildAdd(b, o0, rr, "o");
  LLVMValueRef bias = tj_emit_fconst(vf, 0.0);
  if (bb >= 0) {
    LLVMValueRef bv = LLVMBuildLoad2(
        b, em->t_f32, tj_emit_advance(em, (uint32_t)bb, em->base[bb], o), "");
    set_align(bv, 4);
    bias = tj_emit_splat(em, bv, w);
  }
  tj_emit_loop_t ll;
  LLVMValueRef line =
      tj_emit_loop_begin(em, &ll, line0, line1, c64(em, 1), "line");
  LLVMValueRef lbeg = LLVMBuildMul(b, line, c64(em, L), "");
  LLVMValueRef s = LLVMBuildSelect(
      b, LLVMBuildICmp(b, LLVMIntSGT, p0, lbeg, ""), p0, lbeg, "s");
  LLVMValueRef e =
      tj_emit_min_i64(em, pend, LLVMBuildAdd(b, lbeg, c64(em, L), ""));
  LLVMValueRef len = LLVMBuildSub(b, e, s, "len");
  // The point of pixel s: its coordinates along the spatial dims.
  tj_emit_point_t pt;
  memset(&pt, 0, sizeof(pt));
  pt.lanes = w;
  pt.vdim = r - 1;
  pt.index[0] = n ? n : LLVMBuildUDiv(b, s, c64(em, P), "n");
  pt.index[1] = o;
  LLVMValueRef rest = n ? s : LLVMBuildURem(b, s, c64(em, P), "");
  for (int32_t d = r - 1; d >= 2; --d) {
    pt.index[d] = LLVMBuildURem(b, rest, c64(em, k->dims[d].value), "");
    rest = LLVMBuildUDiv(b, rest, c64(em, k->dims[d].value), "");
  }
  for (uint32_t bi = 0; bi < k->num_buffers; ++bi) {
    tj_kir_role_t role = k->buffers[bi].role;
    if (role != TJ_KIR_INPUT && role != TJ_KIR_OUTPUT) {
      pt.ptr[bi] = em->base[bi];  // read by the GEMM part, not here
      continue;
    }
    LLVMValueRef off = inblock_skew(em, bi, o, P);
    for (int32_t d = 0; d < r; ++d) {
      off = LLVMBuildAdd(
          b, off, LLVMBuildMul(b, pt.index[d], tj_emit_stride(em, bi, d), ""),
          "");
    }
    pt.ptr[bi] = tj_emit_advance(em, bi, em->base[bi], off);
  }
  LLVMValueRef arow = gep(em, em->t_f32, acc,
                          LLVMBuildAdd(b, LLVMBuildMul(b, rr, c64(em, nc), ""),
                                       LLVMBuildSub(b, s, p0, ""), ""));
  // Full vectors unmasked, then the masked tail: masked loads and stores
  // of every vector made mobilenet_v2's 1x1 16-96 @112 with its relu6 3.7x
  // the time of the plain store (AVX2's masked stores are slow on AMD).
  LLVMValueRef full = LLVMBuildMul(b, LLVMBuildUDiv(b, len, c64(em, w), ""),
                                   c64(em, w), "full");
  tj_emit_loop_t vl;
  LLVMValueRef v =
      tj_emit_loop_begin(em, &vl, c64(em, 0), full, c64(em, w), "v");
  TJ_RETURN_IF_ERROR(epilogue_vector(em, &pt, arow, v, bias, NULL));
  tj_emit_loop_end(em, &vl);
  tj_emit_if_t tail;
  tj_emit_if_begin(em, &tail, LLVMBuildICmp(b, LLVMIntSLT, full, len, ""),
                   "etail");
  TJ_RETURN_IF_ERROR(epilogue_vector(
      em, &pt, arow, full, bias,
      tj_emit_lane_mask(em, LLVMBuildSub(b, len, full, ""), w)));
  tj_emit_if_end(em, &tail);
  tj_emit_loop_end(em, &ll);
  tj_emit_loop_end(em, &orl);
  return NULL;
}

// out = acc + bias over a unit's valid pixels [p0, p0 + pn) (of the
// batch when |join|, else of image n), image by image (a joined unit's
// pixels may span several); acc [ocn][pn], row stride nc.
static void store_plain(tj_emit_t* em, int32_t ob, int32_t bb, LLVMValueRef acc,
                        int64_t nc, LLVMValueRef n, bool join, LLVMValueRef o0,
                        LLVMValueRef ocn, LLVMValueRef p0, LLVMValueRef pn) {
  const tj_kir_t* k = em->k;
  LLVMBuilderRef b = em->b;
  const int32_t w = em->target.lanes;
  LLVMTypeRef vf = LLVMVectorType(em->t_f32, (unsigned)w);
  const int64_t O = k->dims[1].value;
  int64_t P = 1;
  for (int32_t d = 2; d < k->rank; ++d) P *= k->dims[d].value;
  LLVMValueRef gp0 =
      join ? p0 : LLVMBuildAdd(b, LLVMBuildMul(b, n, c64(em, P), ""), p0, "");
  LLVMValueRef gend = LLVMBuildAdd(b, gp0, pn, "");
  tj_emit_loop_t il;
  LLVMValueRef img = tj_emit_loop_begin(
      em, &il, LLVMBuildUDiv(b, gp0, c64(em, P), ""),
      LLVMBuildUDiv(b, LLVMBuildAdd(b, gend, c64(em, P - 1), ""), c64(em, P),
                    ""),
      c64(em, 1), "img");
  LLVMValueRef ibeg = LLVMBuildMul(b, img, c64(em, P), "");
  LLVMValueRef sp = LLVMBuildSelect(
      b, LLVMBuildICmp(b, LLVMIntSGT, gp0, ibeg, ""), gp0, ibeg, "s");
  LLVMValueRef ep =
      tj_emit_min_i64(em, gend, LLVMBuildAdd(b, ibeg, c64(em, P), ""));
  LLVMValueRef len = LLVMBuildSub(b, ep, sp, "len");
  LLVMValueRef obase = tj_emit_advance(
      em, (uint32_t)ob, em->base[ob],
      LLVMBuildAdd(b, LLVMBuildMul(b, img, c64(em, O * P), ""),
                   LLVMBuildAdd(b, LLVMBuildMul(b, o0, c64(em, P), ""),
                                LLVMBuildSub(b, sp, ibeg, ""), ""),
                   ""));
  LLVMValueRef acc0 = gep(em, em->t_f32, acc, LLVMBuildSub(b, sp, gp0, ""));
  LLVMValueRef full = LLVMBuildMul(b, LLVMBuildUDiv(b, len, c64(em, w), ""),
                                   c64(em, w), "full");
  tj_emit_loop_t orl;
  LLVMValueRef rr =
      tj_emit_loop_begin(em, &orl, c64(em, 0), ocn, c64(em, 1), "orow");
  {
    LLVMValueRef bias = tj_emit_fconst(vf, 0.0);
    if (bb >= 0) {
      LLVMValueRef bv =
          LLVMBuildLoad2(b, em->t_f32,
                         tj_emit_advance(em, (uint32_t)bb, em->base[bb],
                                         LLVMBuildAdd(b, o0, rr, "")),
                         "");
      set_align(bv, 4);
      bias = tj_emit_splat(em, bv, w);
    }
    LLVMValueRef arow =
        gep(em, em->t_f32, acc0, LLVMBuildMul(b, rr, c64(em, nc), ""));
    LLVMValueRef orow = tj_emit_advance(em, (uint32_t)ob, obase,
                                        LLVMBuildMul(b, rr, c64(em, P), ""));
    tj_emit_loop_t cl;
    LLVMValueRef c =
        tj_emit_loop_begin(em, &cl, c64(em, 0), full, c64(em, w), "oc");
    {
      LLVMValueRef v = LLVMBuildLoad2(b, vf, gep(em, em->t_f32, arow, c), "");
      set_align(v, 4);
      v = LLVMBuildFAdd(b, v, bias, "");
      set_align(LLVMBuildStore(b, v, gep(em, em->t_f32, orow, c)), 4);
    }
    tj_emit_loop_end(em, &cl);
    tj_emit_if_t tail;
    tj_emit_if_begin(em, &tail, LLVMBuildICmp(b, LLVMIntSLT, full, len, ""),
                     "otail");
    {
      LLVMValueRef v =
          LLVMBuildLoad2(b, vf, gep(em, em->t_f32, arow, full), "");
      set_align(v, 4);
      v = LLVMBuildFAdd(b, v, bias, "");
      LLVMValueRef mask =
          tj_emit_lane_mask(em, LLVMBuildSub(b, len, full, ""), w);
      LLVMTypeRef types[2] = {vf, em->t_ptr};
      LLVMValueRef args[4] = {v, gep(em, em->t_f32, orow, full), c32(em, 4),
                              mask};
      tj_emit_intrinsic(em, "llvm.masked.store", types, 2, args, 4);
    }
    tj_emit_if_end(em, &tail);
  }
  tj_emit_loop_end(em, &orl);
  tj_emit_loop_end(em, &il);
}

// The shifted variant's padded image (tj_kir_conv_schedule_t.shifted):
// phase (a1, a2) of channel c, row r, column t is x[c][s1 r + a1 - low1]
// [s2 t + a2 - low2] inside x, else 0, a vector of each phase row at a
// time (masked loads, span loads for s2 > 1; the lanes outside x and past
// the row read nothing).
static void emit_pad_image(tj_emit_t* em, const tj_kir_conv_t* cv,
                           const tj_kir_conv_schedule_t* s, LLVMValueRef xbase,
                           LLVMValueRef xpad) {
  LLVMBuilderRef b = em->b;
  const int32_t w = em->target.lanes;
  LLVMTypeRef vf = LLVMVectorType(em->t_f32, (unsigned)w);
  const int64_t e1 = s->e1, e2 = s->e2, in1 = cv->in[1], in2 = cv->in[2];
  const int64_t s1 = s->s1, s2 = s->s2;
  LLVMValueRef iota = tj_emit_iota(em, em->t_i64, w);
  tj_emit_loop_t rl;
  LLVMValueRef row = tj_emit_loop_begin(
      em, &rl, c64(em, 0), c64(em, cv->c * s1 * s2 * e1), c64(em, 1), "prow");
  // row = ((c s1 + a1) s2 + a2) e1 + r
  LLVMValueRef r = LLVMBuildURem(b, row, c64(em, e1), "");
  LLVMValueRef q = LLVMBuildUDiv(b, row, c64(em, e1), "");
  LLVMValueRef a2 = LLVMBuildURem(b, q, c64(em, s2), "");
  q = LLVMBuildUDiv(b, q, c64(em, s2), "");
  LLVMValueRef a1 = LLVMBuildURem(b, q, c64(em, s1), "");
  LLVMValueRef c = LLVMBuildUDiv(b, q, c64(em, s1), "");
  LLVMValueRef xr = LLVMBuildSub(
      b, LLVMBuildAdd(b, LLVMBuildMul(b, r, c64(em, s1), ""), a1, ""),
      c64(em, cv->low[1]), "xr");
  LLVMValueRef row_in = LLVMBuildICmp(b, LLVMIntULT, xr, c64(em, in1), "");
  // x's row xr of channel c: lane j of vector v reads column s2 (v + j) +
  // a2 - low2.
  LLVMValueRef xrow =
      gep(em, em->t_f32, xbase,
          LLVMBuildAdd(b, LLVMBuildMul(b, c, c64(em, in1 * in2), ""),
                       LLVMBuildMul(b, xr, c64(em, in2), ""), ""));
  LLVMValueRef xc0 = LLVMBuildSub(b, a2, c64(em, cv->low[2]), "");
  LLVMValueRef drow =
      gep(em, em->t_f32, xpad, LLVMBuildMul(b, row, c64(em, e2), ""));
  tj_emit_loop_t vl;
  LLVMValueRef v =
      tj_emit_loop_begin(em, &vl, c64(em, 0), c64(em, e2), c64(em, w), "pv");
  LLVMValueRef col = LLVMBuildAdd(b, tj_emit_splat(em, v, w), iota, "");
  LLVMValueRef in_row =
      LLVMBuildICmp(b, LLVMIntULT, col, tj_emit_splat(em, c64(em, e2), w), "");
  LLVMValueRef xoff =
      LLVMBuildAdd(b, LLVMBuildMul(b, v, c64(em, s2), ""), xc0, "xoff");
  LLVMValueRef xc = LLVMBuildAdd(
      b, LLVMBuildMul(b, col, tj_emit_splat(em, c64(em, s2), w), ""),
      tj_emit_splat(em, xc0, w), "");
  LLVMValueRef in_x = LLVMBuildAnd(
      b,
      LLVMBuildAnd(b,
                   LLVMBuildICmp(b, LLVMIntULT, xc,
                                 tj_emit_splat(em, c64(em, in2), w), ""),
                   in_row, ""),
      tj_emit_splat(em, row_in, w), "");
  LLVMValueRef val = span_load(em, xrow, xoff, in_x, s2);
  LLVMTypeRef lt[2] = {vf, em->t_ptr};
  LLVMValueRef sargs[4] = {val, gep(em, em->t_f32, drow, v), c32(em, 4),
                           in_row};
  tj_emit_intrinsic(em, "llvm.masked.store", lt, 2, sargs, 4);
  tj_emit_loop_end(em, &vl);
  tj_emit_loop_end(em, &rl);
}

// nchwc (issue 15): the ocvec variant's padded copy of a blocked x
// (tj_kir_conv_t.xblock = w: x is [C / w][in1][in2][w] an image), itself
// blocked, [C / w][e1][e2][w]: element (c, r, t) at ((c / w) e1 + r) e2 w
// + t w + c % w, x's pixel (r - low1, t - low2) inside x, else 0. Stride 1
// only (one phase), so each padded pixel's w channels are one contiguous
// vector of x or zeros: a masked load and a store.
static void emit_pad_image_blocked(tj_emit_t* em, const tj_kir_conv_t* cv,
                                   const tj_kir_conv_schedule_t* s,
                                   LLVMValueRef xbase, LLVMValueRef xpad) {
  LLVMBuilderRef b = em->b;
  const int32_t w = em->target.lanes;
  LLVMTypeRef vf = LLVMVectorType(em->t_f32, (unsigned)w);
  const int64_t e1 = s->e1, e2 = s->e2, in1 = cv->in[1], in2 = cv->in[2];
  tj_emit_loop_t rl;
  LLVMValueRef row = tj_emit_loop_begin(
      em, &rl, c64(em, 0), c64(em, cv->c / w * e1), c64(em, 1), "brow");
  LLVMValueRef r = LLVMBuildURem(b, row, c64(em, e1), "");
  LLVMValueRef cb = LLVMBuildUDiv(b, row, c64(em, e1), "");
  LLVMValueRef xr = LLVMBuildSub(b, r, c64(em, cv->low[1]), "xr");
  LLVMValueRef row_in = LLVMBuildICmp(b, LLVMIntULT, xr, c64(em, in1), "");
  LLVMValueRef xrow = gep(
      em, em->t_f32, xbase,
      LLVMBuildMul(b,
                   LLVMBuildAdd(b, LLVMBuildMul(b, cb, c64(em, in1 * in2), ""),
                                LLVMBuildMul(b, xr, c64(em, in2), ""), ""),
                   c64(em, w), ""));
  LLVMValueRef drow =
      gep(em, em->t_f32, xpad, LLVMBuildMul(b, row, c64(em, e2 * w), ""));
  tj_emit_loop_t tl;
  LLVMValueRef t =
      tj_emit_loop_begin(em, &tl, c64(em, 0), c64(em, e2), c64(em, 1), "bcol");
  LLVMValueRef xc = LLVMBuildSub(b, t, c64(em, cv->low[2]), "xc");
  LLVMValueRef in_x = LLVMBuildAnd(
      b, row_in, LLVMBuildICmp(b, LLVMIntULT, xc, c64(em, in2), ""), "");
  // Outside x the address is the row's start, which the mask never reads.
  LLVMValueRef src =
      gep(em, em->t_f32, xrow,
          LLVMBuildSelect(b, in_x, LLVMBuildMul(b, xc, c64(em, w), ""),
                          c64(em, 0), ""));
  LLVMTypeRef lt[2] = {vf, em->t_ptr};
  LLVMValueRef largs[4] = {src, c32(em, 4), tj_emit_splat(em, in_x, w),
                           tj_emit_fconst(vf, 0.0)};
  LLVMValueRef v = tj_emit_intrinsic(em, "llvm.masked.load", lt, 2, largs, 4);
  set_align(
      LLVMBuildStore(
          b, v, gep(em, em->t_f32, drow, LLVMBuildMul(b, t, c64(em, w), ""))),
      4);
  tj_emit_loop_end(em, &tl);
  tj_emit_loop_end(em, &rl);
}

// nchwc: the vector |v| (acc plus bias) of w channels from |o| of pixel
// |px| of image |n| stored into the blocked output at |run| (the channel
// block's run) + px w, through the epilogue when there is one (its
// point's lanes along the channels, dim 1: a blocked output and
// per-channel operands have stride 1 there).
static tj_status_t store_pixel(tj_emit_t* em, int32_t ob, LLVMValueRef v,
                               LLVMValueRef n, LLVMValueRef o, LLVMValueRef px,
                               LLVMValueRef run, int64_t P, bool epilogue) {
  const tj_kir_t* k = em->k;
  LLVMBuilderRef b = em->b;
  const int32_t w = em->target.lanes, r = k->rank;
  LLVMValueRef yoff =
      LLVMBuildAdd(b, run, LLVMBuildMul(b, px, c64(em, w), ""), "yoff");
  if (!epilogue) {
    set_align(LLVMBuildStore(
                  b, v, tj_emit_advance(em, (uint32_t)ob, em->base[ob], yoff)),
              4);
    return NULL;
  }
  tj_emit_point_t p;
  memset(&p, 0, sizeof(p));
  p.lanes = w;
  p.vdim = 1;
  p.index[0] = n;
  p.index[1] = o;
  LLVMValueRef rest = px;
  for (int32_t d = r - 1; d >= 2; --d) {
    p.index[d] = LLVMBuildURem(b, rest, c64(em, k->dims[d].value), "");
    rest = LLVMBuildUDiv(b, rest, c64(em, k->dims[d].value), "");
  }
  for (uint32_t bi = 0; bi < k->num_buffers; ++bi) {
    tj_kir_role_t role = k->buffers[bi].role;
    if (role == TJ_KIR_OUTPUT) {  // the blocked output
      p.ptr[bi] = tj_emit_advance(em, bi, em->base[bi], yoff);
      continue;
    }
    if (role != TJ_KIR_INPUT) {
      p.ptr[bi] = em->base[bi];  // read by the GEMM part, not here
      continue;
    }
    LLVMValueRef off = inblock_skew(em, bi, o, P);
    for (int32_t d = 0; d < r; ++d) {
      off = LLVMBuildAdd(
          b, off, LLVMBuildMul(b, p.index[d], tj_emit_stride(em, bi, d), ""),
          "");
    }
    p.ptr[bi] = tj_emit_advance(em, bi, em->base[bi], off);
  }
  p.acc = v;
  return tj_emit_body(em, &k->phases[0], &p, NULL);
}

// The bias of channels o..o + w (0 without one) and the run of image
// |n|'s channel block o / w in a blocked output of O channels, P pixels.
static LLVMValueRef block_bias(tj_emit_t* em, int32_t bb, LLVMValueRef o) {
  const int32_t w = em->target.lanes;
  LLVMTypeRef vf = LLVMVectorType(em->t_f32, (unsigned)w);
  if (bb < 0) return tj_emit_fconst(vf, 0.0);
  LLVMValueRef bv = LLVMBuildLoad2(
      em->b, vf, tj_emit_advance(em, (uint32_t)bb, em->base[bb], o), "");
  set_align(bv, 4);
  return bv;
}

static LLVMValueRef block_run(tj_emit_t* em, LLVMValueRef n, LLVMValueRef o,
                              int64_t O, int64_t P) {
  LLVMBuilderRef b = em->b;
  const int32_t w = em->target.lanes;
  return LLVMBuildMul(b,
                      LLVMBuildAdd(b, LLVMBuildMul(b, n, c64(em, O / w), ""),
                                   LLVMBuildUDiv(b, o, c64(em, w), ""), ""),
                      c64(em, P * w), "run");
}

// nchwc (issue 15): the ocvec unit's pixel-major block |acc| (ld |oc|)
// stored straight into a blocked output (tj_kir_conv_t.yblock = w), one
// vector of w channels a pixel: acc's row q from column j is the block
// (o0 + j) / w of pixel p0 + q, at ((n O / w + (o0 + j) / w) P + p0 + q) w,
// plus the bias (a vector of w channels), through the epilogue when there
// is one. No transpose, no channel rows P apart: each block of channels is
// one sequential run.
static tj_status_t store_blocked(tj_emit_t* em, int32_t ob, int32_t bb,
                                 LLVMValueRef acc, int64_t oc, LLVMValueRef n,
                                 LLVMValueRef o0, LLVMValueRef ocn,
                                 LLVMValueRef p0, LLVMValueRef pn,
                                 bool epilogue) {
  const tj_kir_t* k = em->k;
  LLVMBuilderRef b = em->b;
  const int32_t w = em->target.lanes, r = k->rank;
  LLVMTypeRef vf = LLVMVectorType(em->t_f32, (unsigned)w);
  const int64_t O = k->dims[1].value;
  int64_t P = 1;
  for (int32_t d = 2; d < r; ++d) P *= k->dims[d].value;
  tj_emit_loop_t jl, ql;
  LLVMValueRef j =
      tj_emit_loop_begin(em, &jl, c64(em, 0), ocn, c64(em, w), "bj");
  LLVMValueRef o = LLVMBuildAdd(b, o0, j, "o");
  LLVMValueRef bias = block_bias(em, bb, o);
  LLVMValueRef run = block_run(em, n, o, O, P);
  LLVMValueRef q =
      tj_emit_loop_begin(em, &ql, c64(em, 0), pn, c64(em, 1), "bq");
  LLVMValueRef v = LLVMBuildLoad2(
      b, vf,
      gep(em, em->t_f32, acc,
          LLVMBuildAdd(b, LLVMBuildMul(b, q, c64(em, oc), ""), j, "")),
      "");
  set_align(v, 4);
  v = LLVMBuildFAdd(b, v, bias, "");
  TJ_RETURN_IF_ERROR(store_pixel(em, ob, v, n, o, LLVMBuildAdd(b, p0, q, "px"),
                                 run, P, epilogue));
  tj_emit_loop_end(em, &ql);
  tj_emit_loop_end(em, &jl);
  return NULL;
}

// nchwc2 (issue 15): the shifted variant's sums of one output row,
// channel-major at |acc| (ld |nc|: channel o0 + c's pixel q0 + q at c nc
// + q), |ocn| channels (a multiple of w) and |qn| pixels, stored into a
// blocked output: w x w tiles (w channel rows of w pixels, masked to the
// row's pixels) transposed in registers, each of the tile's pixels then a
// vector of w channels plus the bias stored (through the epilogue) at its
// place in the channel block's run, the tile's pixels one contiguous
// stretch. No staging copy (a transpose into the scratch and a pass over it
// took the stem 8-10% longer than its row-major store, not shorter).
static tj_status_t store_rows_blocked(tj_emit_t* em, int32_t ob, int32_t bb,
                                      LLVMValueRef acc, int64_t nc,
                                      LLVMValueRef n, LLVMValueRef o0,
                                      LLVMValueRef ocn, LLVMValueRef q0,
                                      LLVMValueRef qn, bool epilogue) {
  const tj_kir_t* k = em->k;
  LLVMBuilderRef b = em->b;
  const int32_t w = em->target.lanes, r = k->rank;
  LLVMTypeRef vf = LLVMVectorType(em->t_f32, (unsigned)w);
  const int64_t O = k->dims[1].value;
  int64_t P = 1;
  for (int32_t d = 2; d < r; ++d) P *= k->dims[d].value;
  if (w > 16 || (w & (w - 1)) != 0)
    return tj_internal("kernel @%s: a blocked store of %d lanes", k->name, w);
  tj_emit_loop_t jl, tl;
  LLVMValueRef j =
      tj_emit_loop_begin(em, &jl, c64(em, 0), ocn, c64(em, w), "rj");
  LLVMValueRef o = LLVMBuildAdd(b, o0, j, "o");
  LLVMValueRef bias = block_bias(em, bb, o);
  LLVMValueRef run = block_run(em, n, o, O, P);
  LLVMValueRef t0 =
      tj_emit_loop_begin(em, &tl, c64(em, 0), qn, c64(em, w), "rt");
  LLVMValueRef left = LLVMBuildSub(b, qn, t0, "rleft");
  LLVMValueRef mask = tj_emit_lane_mask(em, left, w);
  LLVMValueRef row[16];
  LLVMTypeRef lt[2] = {vf, em->t_ptr};
  for (int32_t c = 0; c < w; ++c) {
    LLVMValueRef src =
        gep(em, em->t_f32, acc,
            LLVMBuildAdd(b,
                         LLVMBuildMul(b, LLVMBuildAdd(b, j, c64(em, c), ""),
                                      c64(em, nc), ""),
                         t0, ""));
    LLVMValueRef largs[4] = {src, c32(em, 4), mask, tj_emit_fconst(vf, 0.0)};
    row[c] = tj_emit_intrinsic(em, "llvm.masked.load", lt, 2, largs, 4);
  }
  tj_emit_transpose_tile(em, row, em->target.lanes);
  LLVMValueRef px0 = LLVMBuildAdd(b, q0, t0, "");
  for (int32_t c = 0; c < w; ++c) {
    // Pixel t0 + c, when inside the row (only the last tile has fewer).
    tj_emit_if_t in;
    const bool guard = c > 0;
    if (guard)
      tj_emit_if_begin(
          em, &in, LLVMBuildICmp(b, LLVMIntSGT, left, c64(em, c), ""), "rpix");
    TJ_RETURN_IF_ERROR(store_pixel(em, ob, LLVMBuildFAdd(b, row[c], bias, ""),
                                   n, o, LLVMBuildAdd(b, px0, c64(em, c), ""),
                                   run, P, epilogue));
    if (guard) tj_emit_if_end(em, &in);
  }
  tj_emit_loop_end(em, &tl);
  tj_emit_loop_end(em, &jl);
  return NULL;
}

// The ocvec unit's block, pixel-major at |acc| (ld |oc|: pixel q's
// channels from q * oc) to channel-major at |acc2| (ld |nc|), its |pn|
// pixels and |ocn| channels. In w x w tiles held in registers: w rows of
// pixels loaded (those past pn repeat the last; oc is a multiple of w, so
// a tile's channels past ocn are read from the block's padding), swapped
// in log2(w) butterfly stages of two-source shuffles, and stored as
// channel rows masked to the tile's valid pixels, the rows past ocn not
// stored. (The scalar loop it replaces, a load and a strided store an
// element, took about 10% of 3x3 64-64 @56.)
static void transpose_block(tj_emit_t* em, LLVMValueRef acc, int64_t oc,
                            LLVMValueRef acc2, int64_t nc, LLVMValueRef pn,
                            LLVMValueRef ocn) {
  LLVMBuilderRef b = em->b;
  const int32_t w = em->target.lanes;
  if (w < 2 || (w & (w - 1)) != 0 || w > 16 || oc % w != 0) {
    tj_emit_loop_t tl, ql;
    LLVMValueRef q =
        tj_emit_loop_begin(em, &tl, c64(em, 0), pn, c64(em, 1), "tq");
    LLVMValueRef ch =
        tj_emit_loop_begin(em, &ql, c64(em, 0), ocn, c64(em, 1), "to");
    LLVMValueRef v = LLVMBuildLoad2(
        b, em->t_f32,
        gep(em, em->t_f32, acc,
            LLVMBuildAdd(b, LLVMBuildMul(b, q, c64(em, oc), ""), ch, "")),
        "");
    set_align(v, 4);
    set_align(
        LLVMBuildStore(
            b, v,
            gep(em, em->t_f32, acc2,
                LLVMBuildAdd(b, LLVMBuildMul(b, ch, c64(em, nc), ""), q, ""))),
        4);
    tj_emit_loop_end(em, &ql);
    tj_emit_loop_end(em, &tl);
    return;
  }
  LLVMTypeRef vf = LLVMVectorType(em->t_f32, (unsigned)w);
  tj_emit_loop_t cl, ql;
  LLVMValueRef c0 =
      tj_emit_loop_begin(em, &cl, c64(em, 0), ocn, c64(em, w), "tc");
  LLVMValueRef q0 =
      tj_emit_loop_begin(em, &ql, c64(em, 0), pn, c64(em, w), "tq");
  LLVMValueRef left = LLVMBuildSub(b, pn, q0, "tleft");
  LLVMValueRef last = LLVMBuildSub(b, left, c64(em, 1), "");
  LLVMValueRef row[16];
  for (int32_t r = 0; r < w; ++r) {
    LLVMValueRef q =
        LLVMBuildAdd(b, q0, tj_emit_min_i64(em, c64(em, r), last), "");
    row[r] = LLVMBuildLoad2(
        b, vf,
        gep(em, em->t_f32, acc,
            LLVMBuildAdd(b, LLVMBuildMul(b, q, c64(em, oc), ""), c0, "")),
        "trow");
    set_align(row[r], 4);
  }
  tj_emit_transpose_tile(em, row, em->target.lanes);
  LLVMValueRef mask = tj_emit_lane_mask(em, left, w);
  LLVMValueRef chans = LLVMBuildSub(b, ocn, c0, "");
  LLVMTypeRef lt[2] = {vf, em->t_ptr};
  for (int32_t c = 0; c < w; ++c) {
    // Channel c0 + c (when below ocn): its row of the tile's pixels.
    LLVMValueRef keep = LLVMBuildAnd(
        b, mask,
        tj_emit_splat(em, LLVMBuildICmp(b, LLVMIntSGT, chans, c64(em, c), ""),
                      w),
        "");
    LLVMValueRef dst =
        gep(em, em->t_f32, acc2,
            LLVMBuildAdd(b,
                         LLVMBuildMul(b, LLVMBuildAdd(b, c0, c64(em, c), ""),
                                      c64(em, nc), ""),
                         q0, ""));
    LLVMValueRef sargs[4] = {row[c], dst, c32(em, 4), keep};
    tj_emit_intrinsic(em, "llvm.masked.store", lt, 2, sargs, 4);
  }
  tj_emit_loop_end(em, &ql);
  tj_emit_loop_end(em, &cl);
}

// A microkernel of the conv's, emitted once: the unit loops of both
// schedules of a symbolic batch (tj_emit_conv) call the same ones.
static LLVMValueRef conv_ukernel(tj_emit_t* em, const tj_ukernel_opts_t* o) {
  LLVMValueRef fn = LLVMGetNamedFunction(em->mod, o->name);
  return fn ? fn : tj_emit_ukernel(em, o);
}

// The conv's unit loop under the schedule of a batch below the kernel's
// schedule.kc (|few|: its smaller blocks, kir/schedule.h) or from it on.
static tj_status_t emit_conv_units(tj_emit_t* em, bool few) {
  const tj_kir_t* k = em->k;
  const tj_kir_conv_t* cv = &k->conv;
  LLVMBuilderRef b = em->b;
  const int32_t w = em->target.lanes;
  tj_kir_conv_schedule_t s;
  tj_kir_conv_resolve_batch(k, w, few ? 0 : INT64_MAX, &s);
  int32_t xb = -1, wb = -1, ob = -1, bb = -1;
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    switch (k->buffers[i].role) {
      case TJ_KIR_CONV_X:
        xb = (int32_t)i;
        break;
      case TJ_KIR_CONV_W:
        wb = (int32_t)i;
        break;
      case TJ_KIR_CONV_BIAS:
        bb = (int32_t)i;
        break;
      case TJ_KIR_OUTPUT:
        ob = (int32_t)i;
        break;
      default:  // an epilogue's input
        break;
    }
  }
  const bool epilogue = k->phases[0].num_insts > 0;
  if (xb < 0 || wb < 0 || (ob < 0 && !epilogue)) {
    return tj_internal("kernel @%s: conv buffers missing", k->name);
  }
  // The window's constants, three spatial axes (the leading ones 1).
  int64_t od[3] = {1, 1, 1};
  for (int32_t i = 0; i < cv->spatial; ++i)
    od[3 - cv->spatial + i] = k->dims[2 + i].value;
  const int64_t O = k->dims[1].value, C = cv->c;
  // Grouped (issue 15): group g's OG output channels read its C input
  // channels (x has G C an image), one GEMM a group: a unit's channels lie
  // in one group, its x the group's channels.
  const int64_t G = tj_kir_conv_groups(cv), OG = O / G, CX = C * G;
  const int64_t P = od[0] * od[1] * od[2];
  const int64_t KS = cv->kernel[0] * cv->kernel[1] * cv->kernel[2];
  const int64_t K = C * KS;
  const int64_t INS = cv->in[0] * cv->in[1] * cv->in[2];
  const int64_t nr = s.nr, nc = s.nc, oc = s.oc, mr = s.mr, kc = s.kc;
  const int32_t first = 3 - cv->spatial;  // the first checked axis

  char uname[256];
  snprintf(uname, sizeof(uname), "tj_ukernel_%s_conv", k->name);
  tj_ukernel_opts_t uo = {.mr = (int32_t)mr,
                          .nr = (int32_t)nr,
                          .chains = 1,
                          .a_dtype = TJ_DTYPE_F32,
                          .b_dtype = TJ_DTYPE_F32,
                          .name = uname,
                          .hot = true,
                          .prefetch_a_next = k->b_prepacked};
  LLVMValueRef uk = conv_ukernel(em, &uo);
  // A 1x1 conv with stride 1 and no padding reads x as the GEMM's B in
  // place: rows of P pixels per input channel, nothing to pack.
  const bool direct = tj_kir_conv_reads_x_in_place(k);
  // Stride 1 with wide rows: B read through a table of row offsets into
  // a zero-padded copy of the image (tj_kir_conv_schedule_t.shifted).
  const bool shifted = s.shifted;
  // The last pixel block's partial panel (P % nr pixels) takes a tile of
  // only the vectors it needs over the panel's rows: 3x3 @14 (196 pixels)
  // multiplied 4 panels of 64, 60 columns of them padding.
  const int64_t tail_nv = (P % nr + w - 1) / w;
  // Output channels along the vector (tj_kir_conv_schedule_t.ocvec):
  // pixels broadcast from the padded copy against the prepacked weight.
  const bool ocvec = s.ocvec;
  // nchwc: blocks of the target's lanes (nchwc_assign in
  // backends/x86/x86_program.c marks no other): a blocked x is the ocvec
  // variant's at stride 1 (its padded copy has one phase); a blocked
  // output is stored by the ocvec variant (its channel blocks whole in a
  // unit), or (nchwc2) by the shifted and packed ones at any stride from
  // their channel-major sums, a unit's channels whole blocks of w (one
  // block, or blocks of a multiple of w); a blocked residual is read by
  // the ocvec store or a blocked one.
  const bool xblock_ok = !cv->xblock || (ocvec && s.s1 == 1 && s.s2 == 1 &&
                                         cv->xblock == w && C % w == 0);
  const bool yblock_ok =
      !cv->yblock ||
      (cv->yblock == w && O % w == 0 &&
       (ocvec ? s.oc % w == 0 : !direct && (O <= s.oc || s.oc % w == 0)));
  const bool inblock_ok = !cv->inblock || ocvec || cv->yblock;
  if (!xblock_ok || !yblock_ok || !inblock_ok ||
      (G > 1 && (cv->xblock || cv->yblock || cv->inblock)) ||
      (ocvec && (cv->xblock || cv->yblock || cv->inblock) && s.oc % w != 0)) {
    return tj_internal(
        "kernel @%s: a blocked conv layout (xblock %d, yblock %d, inblock "
        "0x%x) its variant cannot take with %d lanes",
        k->name, cv->xblock, cv->yblock, (unsigned)cv->inblock, w);
  }
  LLVMValueRef ukv = NULL;
  if (ocvec) {
    char vname[256];
    snprintf(vname, sizeof(vname), "tj_ukernel_%s_conv_v", k->name);
    tj_ukernel_opts_t vo = uo;
    vo.prefetch_a_next = false;
    vo.a_rows = true;
    vo.name = vname;
    ukv = conv_ukernel(em, &vo);
  }
  LLVMValueRef ukt = NULL;
  if (!direct && !shifted && !ocvec && tail_nv > 0 && tail_nv < nr / w) {
    char tname[256];
    snprintf(tname, sizeof(tname), "tj_ukernel_%s_conv_t", k->name);
    tj_ukernel_opts_t to = uo;
    to.nr = (int32_t)(tail_nv * w);
    to.panel_ld = (int32_t)nr;
    to.name = tname;
    ukt = conv_ukernel(em, &to);
  }
  LLVMValueRef ukd = NULL, uke = NULL;
  if (direct) {
    char dname[256], ename[256];
    snprintf(dname, sizeof(dname), "tj_ukernel_%s_conv_d", k->name);
    snprintf(ename, sizeof(ename), "tj_ukernel_%s_conv_e", k->name);
    tj_ukernel_opts_t dopt = uo;
    dopt.direct = true;
    dopt.name = dname;
    ukd = conv_ukernel(em, &dopt);
    dopt.masked = true;
    dopt.name = ename;
    uke = conv_ukernel(em, &dopt);
  }
  if (shifted) {
    char dname[256], ename[256];
    snprintf(dname, sizeof(dname), "tj_ukernel_%s_conv_s", k->name);
    snprintf(ename, sizeof(ename), "tj_ukernel_%s_conv_se", k->name);
    tj_ukernel_opts_t dopt = uo;
    dopt.direct = true;
    dopt.b_rows = true;
    dopt.name = dname;
    ukd = conv_ukernel(em, &dopt);
    dopt.masked = true;
    dopt.name = ename;
    uke = conv_ukernel(em, &dopt);
  }

  // The patches packed once for every channel block
  // (tj_kir_conv_schedule_t.reuse), and the weight prepacked at compile
  // time (tj_kir_t.b_prepacked; backends/x86/x86_program.c) rather than
  // read in place.
  const bool reuse = s.reuse && !direct;
  const bool wpacked = k->b_prepacked;
  // Prepacked, pass by pass: the rows of pass k0 (kn long) at k0 * opad,
  // so that a pass over a channel block reads one contiguous run. (Slivers
  // k-major, mr weights a step in one line, ran 1.3x slower on 3x3
  // 512-512 @7: the microkernel's A loads are faster along k.)
  const int64_t opad = (O + s.mr - 1) / s.mr * s.mr;

  LLVMTypeRef vi32 = LLVMVectorType(em->t_i32, (unsigned)w);
  LLVMTypeRef vi64 = LLVMVectorType(em->t_i64, (unsigned)w);
  // Scratch (tj_kir_conv_scratch_bytes sizes it the same way).
  LLVMValueRef bp = em->arg_scratch;
  int64_t off = align64((s.reuse ? s.passes : 1) * kc * nc * 4);
  LLVMValueRef acc = gep(em, em->t_i8, em->arg_scratch, c64(em, off));
  off += align64(oc * nc * 4);
  LLVMValueRef cy = gep(em, em->t_i8, em->arg_scratch, c64(em, off));
  off += align64(nc * 3 * 4);
  LLVMValueRef pix = gep(em, em->t_i8, em->arg_scratch, c64(em, off));
  off += align64(nc * 8);
  LLVMValueRef keyp = gep(em, em->t_i8, em->arg_scratch, c64(em, off));
  off += 64;
  LLVMValueRef taps = gep(em, em->t_i8, em->arg_scratch, c64(em, off));
  off += align64(kc * 8);
  LLVMValueRef tdel = gep(em, em->t_i8, em->arg_scratch, c64(em, off));
  off += align64(kc * 3 * 4);
  // Shifted: the padded image (s.xpad f32), its image's number at keyp.
  LLVMValueRef xpad = gep(em, em->t_i8, em->arg_scratch, c64(em, off));
  // Ocvec: the unit's channel-major block, transposed from |acc|.
  LLVMValueRef acc2 =
      gep(em, em->t_i8, em->arg_scratch, c64(em, off + align64(s.xpad * 4)));
  // No patches held yet (the scratch may hold another run's).
  if (reuse || shifted || ocvec)
    set_align(LLVMBuildStore(b, c64(em, -1), keyp), 8);

  // Joined (tj_kir_conv_schedule_t.join): the pixel blocks run over the
  // batch's N x P pixels, p0 a pixel of the batch, and there is no image
  // per unit (n is 0 here; each pixel's image is in its offset).
  const bool join = s.join;
  LLVMValueRef npix =
      join ? LLVMBuildMul(b, tj_emit_ival(em, k->dims[0]), c64(em, P), "np")
           : c64(em, shifted ? s.cols : P);
  LLVMValueRef pblocks = LLVMBuildUDiv(
      b, LLVMBuildAdd(b, npix, c64(em, nc - 1), ""), c64(em, nc), "pblocks");
  const int64_t gblocks = (OG + oc - 1) / oc, oblocks = G * gblocks;
  tj_emit_loop_t ul;
  LLVMValueRef u =
      tj_emit_loop_begin(em, &ul, em->arg_begin, em->arg_end, c64(em, 1), "u");
  LLVMValueRef pb, obk, n;
  if (reuse) {  // image, pixel block, channel block (fastest)
    obk = LLVMBuildURem(b, u, c64(em, oblocks), "ob");
    LLVMValueRef rest = LLVMBuildUDiv(b, u, c64(em, oblocks), "");
    pb = LLVMBuildURem(b, rest, pblocks, "pb");
    n = LLVMBuildUDiv(b, rest, pblocks, "n");
  } else {  // image, channel block, pixel block (fastest)
    pb = LLVMBuildURem(b, u, pblocks, "pb");
    LLVMValueRef rest = LLVMBuildUDiv(b, u, pblocks, "");
    obk = LLVMBuildURem(b, rest, c64(em, oblocks), "ob");
    n = LLVMBuildUDiv(b, rest, c64(em, oblocks), "n");
  }
  LLVMValueRef grp = LLVMBuildUDiv(b, obk, c64(em, gblocks), "grp");
  LLVMValueRef gob = LLVMBuildMul(
      b, LLVMBuildURem(b, obk, c64(em, gblocks), ""), c64(em, oc), "gob");
  LLVMValueRef o0 =
      LLVMBuildAdd(b, LLVMBuildMul(b, grp, c64(em, OG), ""), gob, "o0");
  LLVMValueRef ocn =
      tj_emit_min_i64(em, c64(em, oc), LLVMBuildSub(b, c64(em, OG), gob, ""));
  LLVMValueRef p0 = LLVMBuildMul(b, pb, c64(em, nc), "p0");
  LLVMValueRef pn =
      tj_emit_min_i64(em, c64(em, nc), LLVMBuildSub(b, npix, p0, ""));
  LLVMValueRef panels = LLVMBuildUDiv(
      b, LLVMBuildAdd(b, pn, c64(em, nr - 1), ""), c64(em, nr), "panels");
  LLVMValueRef pcols = LLVMBuildMul(b, panels, c64(em, nr), "pcols");
  LLVMValueRef xbase = tj_emit_advance(
      em, (uint32_t)xb, em->base[xb],
      LLVMBuildAdd(b, LLVMBuildMul(b, n, c64(em, CX * INS), ""),
                   LLVMBuildMul(b, grp, c64(em, C * INS), ""), ""));
  LLVMValueRef wbase = tj_emit_advance(em, (uint32_t)wb, em->base[wb],
                                       LLVMBuildMul(b, o0, c64(em, K), ""));
  if (shifted || ocvec) {
    // The image's zero-padded copy (of the unit's group's channels),
    // unless the thread's last unit made it.
    LLVMValueRef held = LLVMBuildLoad2(b, em->t_i64, keyp, "held");
    set_align(held, 8);
    LLVMValueRef ikey =
        LLVMBuildAdd(b, LLVMBuildMul(b, n, c64(em, G), ""), grp, "ikey");
    tj_emit_if_t pi;
    tj_emit_if_begin(em, &pi, LLVMBuildICmp(b, LLVMIntNE, ikey, held, ""),
                     "pad_image");
    set_align(LLVMBuildStore(b, ikey, keyp), 8);
    if (cv->xblock) {
      emit_pad_image_blocked(em, cv, &s, xbase, xpad);
    } else {
      emit_pad_image(em, cv, &s, xbase, xpad);
    }
    tj_emit_if_end(em, &pi);
  }

  // With reuse, the unit packs only when the thread's last unit was of
  // another pixel block (or image).
  tj_emit_if_t need_if;
  if (reuse) {
    LLVMValueRef key =
        LLVMBuildAdd(b, LLVMBuildMul(b, n, pblocks, ""), pb, "key");
    LLVMValueRef held = LLVMBuildLoad2(b, em->t_i64, keyp, "held");
    set_align(held, 8);
    tj_emit_if_begin(em, &need_if, LLVMBuildICmp(b, LLVMIntNE, key, held, ""),
                     "pack_unit");
    set_align(LLVMBuildStore(b, key, keyp), 8);
  }
  if (ocvec) {
    // Row j of the unit's tiles: pixel p0 + j (the last one past pn) at
    // its offset in a phase of the padded copy.
    const int64_t rows = (nc + mr - 1) / mr * mr;
    tj_emit_loop_t jl;
    LLVMValueRef j = tj_emit_loop_begin(em, &jl, c64(em, 0), c64(em, rows),
                                        c64(em, 1), "vpix");
    LLVMValueRef p = LLVMBuildAdd(
        b, p0, tj_emit_min_i64(em, j, LLVMBuildSub(b, pn, c64(em, 1), "")), "");
    LLVMValueRef po =
        LLVMBuildAdd(b,
                     LLVMBuildMul(b, LLVMBuildUDiv(b, p, c64(em, od[2]), ""),
                                  c64(em, s.e2), ""),
                     LLVMBuildURem(b, p, c64(em, od[2]), ""), "");
    // (A blocked copy holds a pixel's w channels together.)
    if (cv->xblock) po = LLVMBuildMul(b, po, c64(em, w), "");
    set_align(LLVMBuildStore(b, po, gep(em, em->t_i64, pix, j)), 8);
    tj_emit_loop_end(em, &jl);
  }
  // The pixels' corner coordinates and offsets in x.
  if (!direct && !shifted && !ocvec) {
    tj_emit_loop_t jl;
    LLVMValueRef j =
        tj_emit_loop_begin(em, &jl, c64(em, 0), pcols, c64(em, 1), "pix");
    LLVMValueRef p = LLVMBuildAdd(b, p0, j, "p");
    LLVMValueRef valid = LLVMBuildICmp(b, LLVMIntSLT, p, npix, "");
    LLVMValueRef offset = c64(em, 0);
    if (join) {  // the pixel's image
      offset = LLVMBuildMul(b, LLVMBuildUDiv(b, p, c64(em, P), ""),
                            c64(em, CX * INS), "");
      p = LLVMBuildURem(b, p, c64(em, P), "");
    }
    LLVMValueRef idx[3];
    idx[2] = LLVMBuildURem(b, p, c64(em, od[2]), "");
    LLVMValueRef t = LLVMBuildUDiv(b, p, c64(em, od[2]), "");
    idx[1] = LLVMBuildURem(b, t, c64(em, od[1]), "");
    idx[0] = LLVMBuildUDiv(b, t, c64(em, od[1]), "");
    const int64_t inner[3] = {cv->in[1] * cv->in[2], cv->in[2], 1};
    for (int32_t d = 0; d < 3; ++d) {
      LLVMValueRef c =
          LLVMBuildSub(b, LLVMBuildMul(b, idx[d], c64(em, cv->stride[d]), ""),
                       c64(em, cv->low[d]), "");
      offset = LLVMBuildAdd(b, offset,
                            LLVMBuildMul(b, c, c64(em, inner[d]), ""), "");
      // Past the last pixel: far outside x, so every tap is masked.
      c = LLVMBuildSelect(b, valid, LLVMBuildTrunc(b, c, em->t_i32, ""),
                          c32(em, -(1 << 30)), "");
      set_align(LLVMBuildStore(b, c,
                               gep(em, em->t_i32, cy,
                                   LLVMBuildAdd(b, j, c64(em, d * nc), ""))),
                4);
    }
    offset = LLVMBuildSelect(b, valid, offset, c64(em, 0), "");
    set_align(LLVMBuildStore(b, offset, gep(em, em->t_i64, pix, j)), 8);
    tj_emit_loop_end(em, &jl);
  }

  // One pass over K packing and multiplying; with reuse, a pass packing
  // every kc block (when the unit packs) and then one multiplying.
  for (int32_t round = 0; round < (reuse ? 2 : 1); ++round) {
    const bool packing = !direct && !shifted && !ocvec && round == 0;
    const bool multiplying = !reuse || round == 1;
    tj_emit_loop_t kl;
    LLVMValueRef k0 =
        tj_emit_loop_begin(em, &kl, c64(em, 0), c64(em, K), c64(em, kc), "k0");
    {
      LLVMValueRef kn =
          tj_emit_min_i64(em, c64(em, kc), LLVMBuildSub(b, c64(em, K), k0, ""));
      LLVMValueRef pstride = LLVMBuildMul(b, kn, c64(em, nr), "pstride");
      // This pass's panels: [nc / nr][kn][nr] from kc x nc floats in.
      LLVMValueRef pbase =
          reuse ? gep(em, em->t_f32, bp, LLVMBuildMul(b, k0, c64(em, nc), ""))
                : bp;
      // Pack: row kk is tap t of channel c; lane j reads x at the pixel's
      // offset plus the tap's, where the tap's coordinates are inside x.
      // The pass's taps go to a table first; then each vector of pixels
      // is classified once (one run of x, two runs across an output row,
      // or a gather) and packs all kn rows with that one kind of load, so
      // the per-row loop has no branch and no division (the rows inner,
      // each vector classified per row, packed at 16 cycles a vector).
      if (packing) {
        tj_emit_loop_t tl;
        LLVMValueRef kk =
            tj_emit_loop_begin(em, &tl, c64(em, 0), kn, c64(em, 1), "tkk");
        LLVMValueRef kx = LLVMBuildAdd(b, k0, kk, "");
        LLVMValueRef ci = LLVMBuildUDiv(b, kx, c64(em, KS), "ci");
        LLVMValueRef t = LLVMBuildURem(b, kx, c64(em, KS), "tap");
        LLVMValueRef tap[3];
        tap[2] = LLVMBuildURem(b, t, c64(em, cv->kernel[2]), "");
        t = LLVMBuildUDiv(b, t, c64(em, cv->kernel[2]), "");
        tap[1] = LLVMBuildURem(b, t, c64(em, cv->kernel[1]), "");
        tap[0] = LLVMBuildUDiv(b, t, c64(em, cv->kernel[1]), "");
        const int64_t inner[3] = {cv->in[1] * cv->in[2], cv->in[2], 1};
        LLVMValueRef rowbase = LLVMBuildMul(b, ci, c64(em, INS), "");
        for (int32_t d = 0; d < 3; ++d) {
          LLVMValueRef td =
              LLVMBuildMul(b, tap[d], c64(em, cv->dilation[d]), "");
          set_align(
              LLVMBuildStore(b, LLVMBuildTrunc(b, td, em->t_i32, ""),
                             gep(em, em->t_i32, tdel,
                                 LLVMBuildAdd(b, kk, c64(em, d * kc), ""))),
              4);
          rowbase = LLVMBuildAdd(
              b, rowbase, LLVMBuildMul(b, td, c64(em, inner[d]), ""), "");
        }
        set_align(LLVMBuildStore(b, rowbase, gep(em, em->t_i64, taps, kk)), 8);
        tj_emit_loop_end(em, &tl);

        tj_emit_loop_t jl;
        LLVMValueRef j =
            tj_emit_loop_begin(em, &jl, c64(em, 0), pcols, c64(em, w), "j");
        {
          pack_t pk = {.cv = cv,
                       .first = first,
                       .kc = kc,
                       .nr = nr,
                       .xbase = xbase,
                       .taps = taps,
                       .tdel = tdel,
                       .kn = kn};
          for (int32_t d = first; d < 3; ++d) {
            pk.cvec[d] = LLVMBuildLoad2(
                b, vi32,
                gep(em, em->t_i32, cy, LLVMBuildAdd(b, j, c64(em, d * nc), "")),
                "");
            set_align(pk.cvec[d], 4);
          }
          LLVMValueRef panel = LLVMBuildUDiv(b, j, c64(em, nr), "");
          pk.dst = gep(em, em->t_f32, pbase,
                       LLVMBuildAdd(b, LLVMBuildMul(b, panel, pstride, ""),
                                    LLVMBuildURem(b, j, c64(em, nr), ""), ""));
          LLVMValueRef offs =
              LLVMBuildLoad2(b, vi64, gep(em, em->t_i64, pix, j), "");
          set_align(offs, 8);
          pk.offs = offs;
          const int64_t sx = cv->stride[2];
          if (sx <= 4) {
            // Lanes of one output row with stride 1 along it read
            // consecutive elements: one masked load; other lanes a masked
            // gather.
            LLVMValueRef o_first =
                LLVMBuildExtractElement(b, offs, c32(em, 0), "");
            LLVMValueRef o_last =
                LLVMBuildExtractElement(b, offs, c32(em, w - 1), "");
            LLVMValueRef run = LLVMBuildICmp(
                b, LLVMIntEQ, LLVMBuildSub(b, o_last, o_first, ""),
                c64(em, (w - 1) * sx), "run");
            LLVMValueRef one_image = LLVMConstInt(em->t_i1, 1, 0);
            if (join) {
              // Pixels of two images could look like one run (a jump back
              // at a row and one forward at the image cancelling): such a
              // vector gathers.
              LLVMValueRef pc = LLVMBuildAdd(b, p0, j, "");
              one_image = LLVMBuildICmp(
                  b, LLVMIntEQ, LLVMBuildUDiv(b, pc, c64(em, P), ""),
                  LLVMBuildUDiv(b, LLVMBuildAdd(b, pc, c64(em, w - 1), ""),
                                c64(em, P), ""),
                  "one_image");
              run = LLVMBuildAnd(b, run, one_image, "");
            }
            // A vector crossing one output row boundary (a rows of w - a
            // lanes left in this output row, the rest all in the next):
            // two span loads, each masked to its lanes, and a blend. At
            // 28 or 56 pixels a row and 16 lanes, a third to a half of
            // the vectors cross a row, which the gather took slowly.
            LLVMValueRef pcur = LLVMBuildAdd(b, p0, j, "");
            LLVMValueRef left = LLVMBuildSub(
                b, c64(em, od[2]), LLVMBuildURem(b, pcur, c64(em, od[2]), ""),
                "left");
            LLVMValueRef split = LLVMBuildAnd(
                b, LLVMBuildNot(b, run, ""),
                LLVMBuildICmp(b, LLVMIntULT, left, c64(em, w), ""), "");
            LLVMValueRef at = LLVMBuildSelect(b, split, left, c64(em, 0), "");
            LLVMValueRef o_mid = LLVMBuildLoad2(
                b, em->t_i64,
                gep(em, em->t_i64, pix, LLVMBuildAdd(b, j, at, "")), "");
            LLVMValueRef tail_run = LLVMBuildICmp(
                b, LLVMIntEQ, LLVMBuildSub(b, o_last, o_mid, ""),
                LLVMBuildMul(b, LLVMBuildSub(b, c64(em, w - 1), at, ""),
                             c64(em, sx), ""),
                "");
            split = LLVMBuildAnd(b, LLVMBuildAnd(b, split, tail_run, ""),
                                 one_image, "two");
            pk.o_first = o_first;
            pk.at = at;
            // Lane i of the second load reads o_mid + (i - at) * sx.
            pk.o_second = LLVMBuildSub(
                b, o_mid, LLVMBuildMul(b, at, c64(em, sx), ""), "");
            // Every lane's every tap inside x (the lanes' corners within
            // [0, in - span of the window) along each axis): no masks.
            LLVMValueRef inside = LLVMConstInt(em->t_i1, 1, 0);
            for (int32_t d = first; d < 3; ++d) {
              const int64_t lim =
                  cv->in[d] - (cv->kernel[d] - 1) * cv->dilation[d];
              if (lim <= 0) {
                inside = LLVMConstInt(em->t_i1, 0, 0);
                break;
              }
              LLVMValueRef ok =
                  LLVMBuildICmp(b, LLVMIntULT, pk.cvec[d],
                                tj_emit_splat(em, c32(em, lim), w), "");
              LLVMTypeRef vt = LLVMTypeOf(ok);
              inside =
                  LLVMBuildAnd(b, inside,
                               tj_emit_intrinsic(em, "llvm.vector.reduce.and",
                                                 &vt, 1, &ok, 1),
                               "inside");
            }
            tj_emit_if_t ii, ri, si, gi;
            tj_emit_if_begin(em, &ii, LLVMBuildAnd(b, run, inside, ""),
                             "inside");
            pack_rows(em, &pk, kPackInside);
            tj_emit_if_end(em, &ii);
            tj_emit_if_begin(
                em, &ri, LLVMBuildAnd(b, run, LLVMBuildNot(b, inside, ""), ""),
                "contig");
            pack_rows(em, &pk, kPackRun);
            tj_emit_if_end(em, &ri);
            tj_emit_if_begin(em, &si, split, "two_rows");
            pack_rows(em, &pk, kPackTwoRows);
            tj_emit_if_end(em, &si);
            tj_emit_if_begin(em, &gi,
                             LLVMBuildAnd(b, LLVMBuildNot(b, run, ""),
                                          LLVMBuildNot(b, split, ""), ""),
                             "gather");
            pack_rows(em, &pk, kPackGather);
            tj_emit_if_end(em, &gi);
          } else {
            pack_rows(em, &pk, kPackGather);
          }
        }
        tj_emit_loop_end(em, &jl);
      }
      if (multiplying) {
        // acc (+)= w rows . panels, mr channels at a time.
        LLVMValueRef first_pass =
            LLVMBuildICmp(b, LLVMIntEQ, k0, c64(em, 0), "first");
        LLVMValueRef accumulate = LLVMBuildNot(b, first_pass, "");
        if (shifted || ocvec) {
          // Row kk of the pass (channel ci, tap t) in the padded image.
          tj_emit_loop_t tl;
          LLVMValueRef kk =
              tj_emit_loop_begin(em, &tl, c64(em, 0), kn, c64(em, 1), "skk");
          LLVMValueRef kx = LLVMBuildAdd(b, k0, kk, "");
          LLVMValueRef ci = LLVMBuildUDiv(b, kx, c64(em, KS), "ci");
          LLVMValueRef t = LLVMBuildURem(b, kx, c64(em, KS), "tap");
          LLVMValueRef t2 = LLVMBuildURem(b, t, c64(em, cv->kernel[2]), "");
          LLVMValueRef t1 = LLVMBuildUDiv(b, t, c64(em, cv->kernel[2]), "");
          // The tap's offsets in padded rows and columns: phase (d1 % s1,
          // d2 % s2), shifted by (d1 / s1, d2 / s2) in it.
          LLVMValueRef d1 = LLVMBuildMul(b, t1, c64(em, cv->dilation[1]), "");
          LLVMValueRef d2 = LLVMBuildMul(b, t2, c64(em, cv->dilation[2]), "");
          LLVMValueRef ph = LLVMBuildAdd(
              b,
              LLVMBuildMul(
                  b,
                  LLVMBuildAdd(b, LLVMBuildMul(b, ci, c64(em, s.s1), ""),
                               LLVMBuildURem(b, d1, c64(em, s.s1), ""), ""),
                  c64(em, s.s2), ""),
              LLVMBuildURem(b, d2, c64(em, s.s2), ""), "phase");
          LLVMValueRef ro = LLVMBuildMul(b, ph, c64(em, s.e1 * s.e2), "");
          ro = LLVMBuildAdd(
              b, ro,
              LLVMBuildMul(b, LLVMBuildUDiv(b, d1, c64(em, s.s1), ""),
                           c64(em, s.e2), ""),
              "");
          ro = LLVMBuildAdd(b, ro, LLVMBuildUDiv(b, d2, c64(em, s.s2), ""), "");
          if (cv->xblock) {
            // Blocked copy (stride 1: one phase): channel ci's block, its
            // lane, and the tap's pixels w apart.
            ro = LLVMBuildAdd(
                b,
                LLVMBuildAdd(
                    b,
                    LLVMBuildMul(b, LLVMBuildUDiv(b, ci, c64(em, w), ""),
                                 c64(em, s.e1 * s.e2 * w), ""),
                    LLVMBuildURem(b, ci, c64(em, w), ""), ""),
                LLVMBuildMul(
                    b,
                    LLVMBuildAdd(b, LLVMBuildMul(b, d1, c64(em, s.e2), ""), d2,
                                 ""),
                    c64(em, w), ""),
                "bro");
          }
          set_align(LLVMBuildStore(b, ro, gep(em, em->t_i64, taps, kk)), 8);
          tj_emit_loop_end(em, &tl);
        }
        if (ocvec) {
          // Ocvec: channel panel by panel (its kn x nr weights, 32 KiB at
          // 16 lanes, in L1), each group of mr pixels: tile rows are
          // pixels, acc pixel-major (ld oc).
          tj_emit_loop_t vl, gl;
          LLVMValueRef jp = tj_emit_loop_begin(
              em, &vl, c64(em, 0),
              LLVMBuildUDiv(b, LLVMBuildAdd(b, ocn, c64(em, nr - 1), ""),
                            c64(em, nr), ""),
              c64(em, 1), "vpanel");
          LLVMValueRef wrow = tj_emit_advance(
              em, (uint32_t)wb, em->base[wb],
              LLVMBuildMul(
                  b,
                  LLVMBuildAdd(
                      b,
                      LLVMBuildMul(
                          b,
                          LLVMBuildAdd(b, LLVMBuildUDiv(b, o0, c64(em, nr), ""),
                                       jp, ""),
                          c64(em, K), ""),
                      k0, ""),
                  c64(em, nr), ""));
          LLVMValueRef g0 = tj_emit_loop_begin(em, &gl, c64(em, 0), pn,
                                               c64(em, mr), "vgroup");
          LLVMValueRef mrv =
              tj_emit_min_i64(em, c64(em, mr), LLVMBuildSub(b, pn, g0, ""));
          LLVMValueRef tile =
              gep(em, em->t_f32, acc,
                  LLVMBuildAdd(b, LLVMBuildMul(b, g0, c64(em, oc), ""),
                               LLVMBuildMul(b, jp, c64(em, nr), ""), ""));
          LLVMValueRef args[13] = {xpad,
                                   c64(em, 0),
                                   c64(em, 0),
                                   wrow,
                                   c64(em, nr),
                                   kn,
                                   mrv,
                                   tile,
                                   c64(em, oc),
                                   accumulate,
                                   c64(em, nr),
                                   taps,
                                   gep(em, em->t_i64, pix, g0)};
          LLVMBuildCall2(b, LLVMGlobalGetValueType(ukv), ukv, args, 13, "");
          tj_emit_loop_end(em, &gl);
          tj_emit_loop_end(em, &vl);
        } else {
          // Shifted, panel by panel, each panel's rows (the padded image's
          // kn rows of nr columns: 3x3 over 28 channels about 21 KiB) kept
          // in L1 for every block of mr channels; else channel block by
          // block, the A sliver kept for every panel.
          tj_emit_loop_t ml, pl;
          LLVMValueRef pi = NULL;
          const bool porder = shifted;
          if (porder) {
            pi = tj_emit_loop_begin(em, &pl, c64(em, 0), panels, c64(em, 1),
                                    "panel");
          }
          LLVMValueRef ob0 =
              tj_emit_loop_begin(em, &ml, c64(em, 0), ocn, c64(em, mr), "mb");
          {
            LLVMValueRef mrv =
                tj_emit_min_i64(em, c64(em, mr), LLVMBuildSub(b, ocn, ob0, ""));
            // In place: row o0 + ob0 of w, from k0 (lda K). Prepacked: row o0 +
            // ob0 of the pass's block (lda kn).
            LLVMValueRef arow =
                wpacked
                    ? tj_emit_advance(
                          em, (uint32_t)wb, em->base[wb],
                          LLVMBuildAdd(
                              b, LLVMBuildMul(b, k0, c64(em, opad), ""),
                              LLVMBuildMul(b, LLVMBuildAdd(b, o0, ob0, ""), kn,
                                           ""),
                              ""))
                    : tj_emit_advance(
                          em, (uint32_t)wb, wbase,
                          LLVMBuildAdd(b, LLVMBuildMul(b, ob0, c64(em, K), ""),
                                       k0, ""));
            LLVMValueRef lda = wpacked ? kn : c64(em, K);
            LLVMValueRef ka = c64(em, 1);
            LLVMValueRef trow =
                gep(em, em->t_f32, acc, LLVMBuildMul(b, ob0, c64(em, nc), ""));
            if (!porder) {
              pi = tj_emit_loop_begin(em, &pl, c64(em, 0), panels, c64(em, 1),
                                      "panel");
            }
            if (shifted) {
              // B: the padded image's rows from the table, columns p0 + pi *
              // nr on.
              LLVMValueRef c0 = LLVMBuildMul(b, pi, c64(em, nr), "");
              LLVMValueRef cols = LLVMBuildSub(b, pn, c0, "cols");
              LLVMValueRef bsrc =
                  gep(em, em->t_f32, xpad, LLVMBuildAdd(b, p0, c0, ""));
              LLVMValueRef args[12] = {
                  arow,        lda,        ka,   bsrc,
                  c64(em, 0),  kn,         mrv,  gep(em, em->t_f32, trow, c0),
                  c64(em, nc), accumulate, cols, taps};
              tj_emit_if_t fi, ei;
              LLVMValueRef whole =
                  LLVMBuildICmp(b, LLVMIntSGE, cols, c64(em, nr), "whole");
              tj_emit_if_begin(em, &fi, whole, "sfull");
              LLVMBuildCall2(b, LLVMGlobalGetValueType(ukd), ukd, args, 12, "");
              tj_emit_if_end(em, &fi);
              tj_emit_if_begin(em, &ei, LLVMBuildNot(b, whole, ""), "sedge");
              LLVMBuildCall2(b, LLVMGlobalGetValueType(uke), uke, args, 12, "");
              tj_emit_if_end(em, &ei);
            } else if (!direct) {
              LLVMValueRef args[11] = {
                  arow,
                  lda,
                  ka,
                  gep(em, em->t_f32, pbase, LLVMBuildMul(b, pi, pstride, "")),
                  c64(em, nr),
                  kn,
                  mrv,
                  gep(em, em->t_f32, trow, LLVMBuildMul(b, pi, c64(em, nr), "")),
                  c64(em, nc),
                  accumulate,
                  c64(em, nr)};
              if (!ukt) {
                LLVMBuildCall2(b, LLVMGlobalGetValueType(uk), uk, args, 11, "");
              } else {
                // (Joined, the batch's last panel has (N x P) % nr columns,
                // which the narrower tile may not cover.)
                LLVMValueRef part = LLVMBuildICmp(
                    b, LLVMIntSLE,
                    LLVMBuildSub(b, pn, LLVMBuildMul(b, pi, c64(em, nr), ""),
                                 ""),
                    c64(em, tail_nv * w), "partial");
                tj_emit_if_t wi, ti;
                tj_emit_if_begin(em, &wi, LLVMBuildNot(b, part, ""), "whole");
                LLVMBuildCall2(b, LLVMGlobalGetValueType(uk), uk, args, 11, "");
                tj_emit_if_end(em, &wi);
                tj_emit_if_begin(em, &ti, part, "tail");
                LLVMBuildCall2(b, LLVMGlobalGetValueType(ukt), ukt, args, 11,
                               "");
                tj_emit_if_end(em, &ti);
              }
            } else {
              // B in place: x[c = k0 + k][p0 + pi * nr + col], row stride P.
              LLVMValueRef c0 = LLVMBuildMul(b, pi, c64(em, nr), "");
              LLVMValueRef cols = LLVMBuildSub(b, pn, c0, "cols");
              LLVMValueRef bsrc =
                  gep(em, em->t_f32, xbase,
                      LLVMBuildAdd(b, LLVMBuildMul(b, k0, c64(em, P), ""),
                                   LLVMBuildAdd(b, p0, c0, ""), ""));
              LLVMValueRef args[11] = {
                  arow,        lda,        ka,  bsrc,
                  c64(em, P),  kn,         mrv, gep(em, em->t_f32, trow, c0),
                  c64(em, nc), accumulate, cols};
              tj_emit_if_t fi;
              LLVMValueRef whole =
                  LLVMBuildICmp(b, LLVMIntSGE, cols, c64(em, nr), "whole");
              tj_emit_if_begin(em, &fi, whole, "dfull");
              LLVMBuildCall2(b, LLVMGlobalGetValueType(ukd), ukd, args, 11, "");
              tj_emit_if_end(em, &fi);
              tj_emit_if_t ei;
              tj_emit_if_begin(em, &ei, LLVMBuildNot(b, whole, ""), "dedge");
              LLVMBuildCall2(b, LLVMGlobalGetValueType(uke), uke, args, 11, "");
              tj_emit_if_end(em, &ei);
            }
            if (!porder) tj_emit_loop_end(em, &pl);
          }
          tj_emit_loop_end(em, &ml);
          if (porder) tj_emit_loop_end(em, &pl);
        }
      }
    }
    tj_emit_loop_end(em, &kl);
    if (reuse && round == 0) tj_emit_if_end(em, &need_if);
  }

  if (ocvec && cv->yblock) {
    TJ_RETURN_IF_ERROR(
        store_blocked(em, ob, bb, acc, oc, n, o0, ocn, p0, pn, epilogue));
  } else if (ocvec) {
    transpose_block(em, acc, oc, acc2, nc, pn, ocn);
    if (epilogue) {
      TJ_RETURN_IF_ERROR(store_epilogue(em, bb, acc2, nc, n, o0, ocn, p0, pn));
    } else {
      store_plain(em, ob, bb, acc2, nc, n, false, o0, ocn, p0, pn);
    }
  } else if (shifted) {
    // Output row i1 is columns [i1 * E2, i1 * E2 + out2) of the block.
    const int64_t o2 = od[2], e2 = s.e2;
    LLVMValueRef pend = LLVMBuildAdd(b, p0, pn, "");
    tj_emit_loop_t ll;
    LLVMValueRef i1 = tj_emit_loop_begin(
        em, &ll, LLVMBuildUDiv(b, p0, c64(em, e2), ""),
        LLVMBuildUDiv(b, LLVMBuildAdd(b, pend, c64(em, e2 - 1), ""),
                      c64(em, e2), ""),
        c64(em, 1), "srow");
    LLVMValueRef cb = LLVMBuildMul(b, i1, c64(em, e2), "");
    LLVMValueRef cs = LLVMBuildSelect(
        b, LLVMBuildICmp(b, LLVMIntSGT, p0, cb, ""), p0, cb, "cs");
    LLVMValueRef ce =
        tj_emit_min_i64(em, pend, LLVMBuildAdd(b, cb, c64(em, o2), ""));
    tj_emit_if_t some;
    tj_emit_if_begin(em, &some, LLVMBuildICmp(b, LLVMIntSLT, cs, ce, ""),
                     "srow_some");
    LLVMValueRef q0 = LLVMBuildAdd(b, LLVMBuildMul(b, i1, c64(em, o2), ""),
                                   LLVMBuildSub(b, cs, cb, ""), "q0");
    LLVMValueRef qn = LLVMBuildSub(b, ce, cs, "qn");
    LLVMValueRef accl = gep(em, em->t_f32, acc, LLVMBuildSub(b, cs, p0, ""));
    if (cv->yblock) {
      // nchwc2: each channel block of the row one sequential run (the
      // stem's 64 channel rows of 448 bytes, 50 KB apart, were 20-30% of
      // its time: bench/RESULTS.md, x86e2e2).
      TJ_RETURN_IF_ERROR(store_rows_blocked(em, ob, bb, accl, nc, n, o0, ocn,
                                            q0, qn, epilogue));
    } else if (epilogue) {
      TJ_RETURN_IF_ERROR(store_epilogue(em, bb, accl, nc, n, o0, ocn, q0, qn));
    } else {
      store_plain(em, ob, bb, accl, nc, n, false, o0, ocn, q0, qn);
    }
    tj_emit_if_end(em, &some);
    tj_emit_loop_end(em, &ll);
  } else if (cv->yblock) {
    // nchwc2: the packed variant's channel-major block stored blocked,
    // image by image (a joined unit's pixels may span several).
    LLVMValueRef gp0 =
        join ? p0 : LLVMBuildAdd(b, LLVMBuildMul(b, n, c64(em, P), ""), p0, "");
    LLVMValueRef gend = LLVMBuildAdd(b, gp0, pn, "");
    tj_emit_loop_t il;
    LLVMValueRef img = tj_emit_loop_begin(
        em, &il, LLVMBuildUDiv(b, gp0, c64(em, P), ""),
        LLVMBuildUDiv(b, LLVMBuildAdd(b, gend, c64(em, P - 1), ""), c64(em, P),
                      ""),
        c64(em, 1), "bimg");
    LLVMValueRef ibeg = LLVMBuildMul(b, img, c64(em, P), "");
    LLVMValueRef sp = LLVMBuildSelect(
        b, LLVMBuildICmp(b, LLVMIntSGT, gp0, ibeg, ""), gp0, ibeg, "s");
    LLVMValueRef ep =
        tj_emit_min_i64(em, gend, LLVMBuildAdd(b, ibeg, c64(em, P), ""));
    TJ_RETURN_IF_ERROR(store_rows_blocked(
        em, ob, bb, gep(em, em->t_f32, acc, LLVMBuildSub(b, sp, gp0, "")), nc,
        img, o0, ocn, LLVMBuildSub(b, sp, ibeg, ""),
        LLVMBuildSub(b, ep, sp, ""), epilogue));
    tj_emit_loop_end(em, &il);
  } else if (epilogue) {
    TJ_RETURN_IF_ERROR(
        store_epilogue(em, bb, acc, nc, join ? NULL : n, o0, ocn, p0, pn));
  } else {
    store_plain(em, ob, bb, acc, nc, n, join, o0, ocn, p0, pn);
  }
  tj_emit_loop_end(em, &ul);
  return NULL;
}

tj_status_t tj_emit_conv(tj_emit_t* em) {
  const tj_kir_t* k = em->k;
  const int64_t from = k->schedule.kc;
  if (from <= 0 || (k->schedule.mc == 0 && k->schedule.nc == 0))
    return emit_conv_units(em, true);
  // conv16: a symbolic batch below |from| images takes the smaller blocks,
  // a larger one the default blocks (tj_kir_conv_resolve_batch).
  LLVMBuilderRef b = em->b;
  LLVMValueRef few = LLVMBuildICmp(b, LLVMIntSLT, tj_emit_ival(em, k->dims[0]),
                                   c64(em, from), "few");
  tj_emit_if_t fi;
  tj_emit_if_begin(em, &fi, few, "few_images");
  TJ_RETURN_IF_ERROR(emit_conv_units(em, true));
  tj_emit_if_end(em, &fi);
  tj_emit_if_begin(em, &fi, LLVMBuildNot(b, few, ""), "many_images");
  TJ_RETURN_IF_ERROR(emit_conv_units(em, false));
  tj_emit_if_end(em, &fi);
  return NULL;
}
