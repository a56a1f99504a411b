// The CONV template's direct window variant (dwbw, issue 15): a depthwise
// conv, max_pool or avg_pool over NCHW f32 (kir/lower_window.c), one pass
// over x with no padded copy and no pad boxes:
//
//   for u in [begin, end):                // (image, channel, row block)
//     for each output row (od, oh) of the block:
//       interior = every (kd, kh) tap row of it lies inside x
//       for j0 in [0, OW) step lanes:     // a vector of output columns
//         if interior and the columns' taps all lie inside the row:
//           acc = op over the taps of plain loads of x's rows
//         else:
//           the same with masked loads: a lane whose tap lies outside x
//           reads nothing and takes the op's identity (0, or -inf for
//           max); avg_pool counts the lanes' taps as it goes
//         out[row, j0 ..] = acc (+ bias, / count)
//
// A tap row is read by the kw column taps at kw offsets from it: the rows
// of a unit stay in L1 across its output rows, so each element of x comes
// from memory once. Lanes a stride s > 1 apart read the span of s * lanes
// elements and keep every s-th (one or two wide loads and a shuffle), as
// the CONV template's packing does; s > 4 gathers. Strides 2 to 4 over at
// most two spatial axes take the phase variant below instead: each input
// row split once into its s phases on the stack, every tap a plain load.
// Every size but the batch is a constant of the kernel.

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "jit/emit_llvm.h"
#include "kir/schedule.h"

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

// floor(a / b) for b > 0.
static int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

typedef struct window_t {
  tj_emit_t* em;
  const tj_kir_conv_t* cv;
  int32_t op;  // tj_kir_window_t
  int32_t w;   // lanes
  int32_t xb, wb, ob, bb;
  int64_t ow, ks;  // output columns; taps per output
  LLVMTypeRef vf, vi32;
  // Per unit and row (set by the caller before emit_chunk).
  LLVMValueRef xplane, wrow, bias, orow;
  LLVMValueRef r0, r1;  // the row's first tap coordinates (d, h), i64
} window_t;

// |v| read at stride s along a row: lanes i of the result are elements
// ptr[i * s], those whose |mask| lane is off (NULL: all on) reading
// nothing and giving |pass|.
static LLVMValueRef load_lanes(window_t* wd, LLVMValueRef ptr,
                               LLVMValueRef mask, LLVMValueRef pass) {
  tj_emit_t* em = wd->em;
  LLVMBuilderRef b = em->b;
  const int64_t s = wd->cv->stride[2];
  const int32_t w = wd->w;
  if (s == 1) {
    if (!mask) {
      LLVMValueRef v = LLVMBuildLoad2(b, wd->vf, ptr, "");
      LLVMSetAlignment(v, 4);
      return v;
    }
    LLVMTypeRef lt[2] = {wd->vf, em->t_ptr};
    LLVMValueRef args[4] = {ptr, c32(em, 4), mask, pass};
    return tj_emit_intrinsic(em, "llvm.masked.load", lt, 2, args, 4);
  }
  if (s <= 4) {
    LLVMTypeRef st = LLVMVectorType(em->t_f32, (unsigned)(s * w));
    LLVMValueRef span;
    if (!mask && em->target.avx512) {
      // The span's last s - 1 elements are not lanes: a constant mask
      // leaves them unread, so that a vector whose last lane reads the
      // row's last element is still a plain one (AVX-512 masks are free).
      LLVMValueRef on[64];
      for (int64_t i = 0; i < s * w; ++i)
        on[i] = LLVMConstInt(em->t_i1, i <= (w - 1) * s, 0);
      LLVMTypeRef lt[2] = {st, em->t_ptr};
      LLVMValueRef args[4] = {ptr, c32(em, 4),
                              LLVMConstVector(on, (unsigned)(s * w)),
                              LLVMGetUndef(st)};
      span = tj_emit_intrinsic(em, "llvm.masked.load", lt, 2, args, 4);
    } else if (!mask) {
      span = LLVMBuildLoad2(b, st, ptr, "");
      LLVMSetAlignment(span, 4);
    } else {
      // The mask spread to every s-th lane of the span (the lanes between
      // are not read), the pass-through value likewise.
      LLVMValueRef spread[64];
      for (int64_t i = 0; i < s * w; ++i)
        spread[i] = c32(em, i % s == 0 ? i / s : w);
      LLVMValueRef smask = LLVMBuildShuffleVector(
          b, mask, LLVMConstNull(LLVMVectorType(em->t_i1, (unsigned)w)),
          LLVMConstVector(spread, (unsigned)(s * w)), "");
      LLVMValueRef spass = LLVMBuildShuffleVector(
          b, pass, pass, LLVMConstVector(spread, (unsigned)(s * w)), "");
      LLVMTypeRef lt[2] = {st, em->t_ptr};
      LLVMValueRef args[4] = {ptr, c32(em, 4), smask, spass};
      span = tj_emit_intrinsic(em, "llvm.masked.load", lt, 2, args, 4);
    }
    LLVMValueRef pick[16];
    for (int32_t i = 0; i < w; ++i) pick[i] = c32(em, i * s);
    return LLVMBuildShuffleVector(b, span, LLVMGetUndef(st),
                                  LLVMConstVector(pick, (unsigned)w), "");
  }
  LLVMValueRef offs = LLVMBuildMul(b, tj_emit_iota(em, em->t_i64, w),
                                   tj_emit_splat(em, c64(em, s), w), "");
  LLVMValueRef ptrs = LLVMBuildGEP2(b, em->t_f32, ptr, &offs, 1, "");
  LLVMValueRef all = LLVMConstAllOnes(LLVMVectorType(em->t_i1, (unsigned)w));
  LLVMTypeRef gt[2] = {wd->vf, LLVMVectorType(em->t_ptr, (unsigned)w)};
  LLVMValueRef args[4] = {ptrs, c32(em, 4), mask ? mask : all, pass};
  return tj_emit_intrinsic(em, "llvm.masked.gather", gt, 2, args, 4);
}

// acc combined with the tap value |v| (weight |wt| for depthwise).
static LLVMValueRef combine(window_t* wd, LLVMValueRef acc, LLVMValueRef v,
                            LLVMValueRef wt) {
  tj_emit_t* em = wd->em;
  LLVMBuilderRef b = em->b;
  switch (wd->op) {
    case TJ_KIR_WINDOW_DEPTHWISE:
      return tj_emit_fmuladd(em, v, wt, acc);
    case TJ_KIR_WINDOW_MAX: {
      // NaN propagates, as the reference's maximum: the larger of the two
      // (v when either is NaN), then acc again where acc is NaN already.
      LLVMValueRef m = LLVMBuildSelect(
          b, LLVMBuildFCmp(b, LLVMRealOGT, acc, v, ""), acc, v, "");
      return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUNO, acc, acc, ""),
                             acc, m, "");
    }
    default:
      return LLVMBuildFAdd(b, acc, v, "");
  }
}

// One vector of output columns from |j0|: plain loads when |masked| is
// false (every tap inside x), else masked ones; stores it (the lanes
// before OW when masked).
static void emit_chunk(window_t* wd, LLVMValueRef j0, bool masked) {
  tj_emit_t* em = wd->em;
  LLVMBuilderRef b = em->b;
  const tj_kir_conv_t* cv = wd->cv;
  const int32_t w = wd->w;
  const bool max = wd->op == TJ_KIR_WINDOW_MAX;
  const bool avg =
      wd->op == TJ_KIR_WINDOW_AVG || wd->op == TJ_KIR_WINDOW_AVG_PAD;
  const bool pad_counts = wd->op == TJ_KIR_WINDOW_AVG_PAD;
  LLVMValueRef ident = tj_emit_fconst(wd->vf, max ? -INFINITY : 0.0);
  LLVMValueRef acc_slot = tj_emit_alloca(em, wd->vf, "acc");
  LLVMBuildStore(b, ident, acc_slot);
  LLVMValueRef cnt_slot = NULL;
  if (masked && avg) {
    cnt_slot = tj_emit_alloca(em, wd->vf, "count");
    LLVMBuildStore(b, tj_emit_fconst(wd->vf, 0.0), cnt_slot);
  }
  // The lanes' first column coordinates (i32) and which lanes are outputs.
  LLVMValueRef iota = tj_emit_iota(em, em->t_i32, w);
  LLVMValueRef col0 =
      LLVMBuildSub(b, LLVMBuildMul(b, j0, c64(em, cv->stride[2]), ""),
                   c64(em, cv->low[2]), "col0");
  LLVMValueRef lane_col = NULL, live = NULL;
  if (masked) {
    lane_col = LLVMBuildAdd(
        b, tj_emit_splat(em, LLVMBuildTrunc(b, col0, em->t_i32, ""), w),
        LLVMBuildMul(b, iota, tj_emit_splat(em, c32(em, cv->stride[2]), w), ""),
        "lane_col");
    live = tj_emit_lane_mask(em, LLVMBuildSub(b, c64(em, wd->ow), j0, ""), w);
  }
  const int64_t in_inner[2] = {cv->in[1] * cv->in[2], cv->in[2]};
  tj_emit_loop_t l0, l1, l2;
  LLVMValueRef t0 = tj_emit_loop_begin(
      em, &l0, c64(em, 0), c64(em, cv->kernel[0]), c64(em, 1), "kd");
  LLVMValueRef t1 = tj_emit_loop_begin(
      em, &l1, c64(em, 0), c64(em, cv->kernel[1]), c64(em, 1), "kh");
  {
    LLVMValueRef p0 = LLVMBuildAdd(
        b, wd->r0, LLVMBuildMul(b, t0, c64(em, cv->dilation[0]), ""), "");
    LLVMValueRef p1 = LLVMBuildAdd(
        b, wd->r1, LLVMBuildMul(b, t1, c64(em, cv->dilation[1]), ""), "");
    LLVMValueRef xrow =
        gep(em, em->t_f32, wd->xplane,
            LLVMBuildAdd(
                b,
                LLVMBuildAdd(b, LLVMBuildMul(b, p0, c64(em, in_inner[0]), ""),
                             LLVMBuildMul(b, p1, c64(em, in_inner[1]), ""), ""),
                col0, ""));
    LLVMValueRef row_ok = NULL, row_pad_ok = NULL;
    if (masked) {
      row_ok = LLVMBuildAnd(
          b, LLVMBuildICmp(b, LLVMIntULT, p0, c64(em, cv->in[0]), ""),
          LLVMBuildICmp(b, LLVMIntULT, p1, c64(em, cv->in[1]), ""), "row_ok");
      if (pad_counts) {
        // count_include_pad: taps within the declared pads count, those
        // past them (ceil_mode's last windows) do not.
        LLVMValueRef ok = NULL;
        const LLVMValueRef p[2] = {p0, p1};
        for (int32_t d = 0; d < 2; ++d) {
          LLVMValueRef lo =
              LLVMBuildICmp(b, LLVMIntSGE, p[d], c64(em, -cv->low[d]), "");
          LLVMValueRef hi = LLVMBuildICmp(b, LLVMIntSLT, p[d],
                                          c64(em, cv->in[d] + cv->high[d]), "");
          LLVMValueRef both = LLVMBuildAnd(b, lo, hi, "");
          ok = ok ? LLVMBuildAnd(b, ok, both, "") : both;
        }
        row_pad_ok = ok;
      }
    }
    // The row's taps combine into a partial of their own, then into acc:
    // a dependency chain of kw + kh ops, not kw * kh (the rows' partials
    // overlap in the core), which bounded the stride-2 kernels.
    LLVMValueRef row_slot = tj_emit_alloca(em, wd->vf, "row");
    LLVMBuildStore(b, ident, row_slot);
    LLVMValueRef tap_row = LLVMBuildMul(
        b,
        LLVMBuildAdd(b, LLVMBuildMul(b, t0, c64(em, cv->kernel[1]), ""), t1,
                     ""),
        c64(em, cv->kernel[2]), "");
    LLVMValueRef t2 = tj_emit_loop_begin(
        em, &l2, c64(em, 0), c64(em, cv->kernel[2]), c64(em, 1), "kw");
    {
      LLVMValueRef tcol = LLVMBuildMul(b, t2, c64(em, cv->dilation[2]), "");
      LLVMValueRef ptr = gep(em, em->t_f32, xrow, tcol);
      LLVMValueRef mask = NULL;
      if (masked) {
        LLVMValueRef c = LLVMBuildAdd(
            b, lane_col,
            tj_emit_splat(em, LLVMBuildTrunc(b, tcol, em->t_i32, ""), w), "");
        mask = LLVMBuildICmp(b, LLVMIntULT, c,
                             tj_emit_splat(em, c32(em, cv->in[2]), w), "");
        mask = LLVMBuildAnd(b, mask, live, "");
        mask = LLVMBuildAnd(b, mask, tj_emit_splat(em, row_ok, w), "");
        if (avg) {
          LLVMValueRef counted = mask;
          if (pad_counts) {
            LLVMValueRef lo =
                LLVMBuildICmp(b, LLVMIntSGE, c,
                              tj_emit_splat(em, c32(em, -cv->low[2]), w), "");
            LLVMValueRef hi = LLVMBuildICmp(
                b, LLVMIntSLT, c,
                tj_emit_splat(em, c32(em, cv->in[2] + cv->high[2]), w), "");
            counted = LLVMBuildAnd(b, LLVMBuildAnd(b, lo, hi, ""),
                                   tj_emit_splat(em, row_pad_ok, w), "");
          }
          LLVMValueRef one = LLVMBuildUIToFP(b, counted, wd->vf, "");
          LLVMValueRef cnt = LLVMBuildLoad2(b, wd->vf, cnt_slot, "");
          LLVMBuildStore(b, LLVMBuildFAdd(b, cnt, one, ""), cnt_slot);
        }
      }
      LLVMValueRef wt = NULL;
      if (wd->op == TJ_KIR_WINDOW_DEPTHWISE) {
        LLVMValueRef ws = LLVMBuildLoad2(
            b, em->t_f32,
            gep(em, em->t_f32, wd->wrow, LLVMBuildAdd(b, tap_row, t2, "")), "");
        LLVMSetAlignment(ws, 4);
        wt = tj_emit_splat(em, ws, w);
      }
      LLVMValueRef v = load_lanes(wd, ptr, mask, ident);
      LLVMValueRef part = LLVMBuildLoad2(b, wd->vf, row_slot, "");
      LLVMBuildStore(b, combine(wd, part, v, wt), row_slot);
    }
    tj_emit_loop_end(em, &l2);
    LLVMValueRef acc = LLVMBuildLoad2(b, wd->vf, acc_slot, "");
    LLVMValueRef part = LLVMBuildLoad2(b, wd->vf, row_slot, "");
    // Depthwise rows add (their products are in the partial already).
    LLVMBuildStore(b,
                   wd->op == TJ_KIR_WINDOW_DEPTHWISE
                       ? LLVMBuildFAdd(b, acc, part, "")
                       : combine(wd, acc, part, NULL),
                   acc_slot);
  }
  tj_emit_loop_end(em, &l1);
  tj_emit_loop_end(em, &l0);
  LLVMValueRef acc = LLVMBuildLoad2(b, wd->vf, acc_slot, "");
  if (wd->op == TJ_KIR_WINDOW_DEPTHWISE && wd->bias)
    acc = LLVMBuildFAdd(b, acc, wd->bias, "");
  if (avg) {
    LLVMValueRef cnt = masked ? LLVMBuildLoad2(b, wd->vf, cnt_slot, "")
                              : tj_emit_fconst(wd->vf, (double)wd->ks);
    acc = LLVMBuildFDiv(b, acc, cnt, "");
  }
  LLVMValueRef dst = gep(em, em->t_f32, wd->orow, j0);
  if (!masked) {
    LLVMSetAlignment(LLVMBuildStore(b, acc, dst), 4);
  } else {
    LLVMTypeRef st[2] = {wd->vf, em->t_ptr};
    LLVMValueRef args[4] = {acc, dst, c32(em, 4), live};
    tj_emit_intrinsic(em, "llvm.masked.store", st, 2, args, 4);
  }
}

// The phase variant (stride 2 to 4 along the row, at most two spatial
// axes): the span loads above cost a shuffle a tap, kw * kh per vector,
// which with max_pool's NaN-keeping steps (four instructions, two on the
// shuffle port) bounded the stride-2 kernels. Here each input row a unit
// reads is split once into its s phases, column c = e * s + q going to
// phase q at index e, in a ring of kh rows on the stack; tap kw of output
// column j then reads phase (kw * dilation - low) mod s at index
// j + floor((kw * dilation - low) / s): one plain load. The phases keep
// the op's identity (0, or -inf for max) around the row's elements and
// one ring row of nothing but the identity stands for the tap rows
// outside x, so that no tap needs a mask: the pads fall out of the data.
// A row is split when the first output row that reads it comes (s
// shuffles a vector of the row's outputs) and is read by every output row
// whose taps reach it, so the shuffles drop from kw * kh a vector to s *
// the vertical stride (9 -> 4 at 3x3/2). The weights are splat once a
// unit, and max_pool's NaN is found beside its max, not in each step.
// Max pools keep NaN as the reference does, in two parts: the plain
// maximum (one vmaxps, the second operand where either is NaN; a
// NaN-keeping max a step was four instructions, two on the shuffle port)
// and, beside it, whether any tap is NaN, two taps a compare, the NaN put
// in at the end. plain_max: |acc| and |v|, or |v| where |acc| is NULL.
static LLVMValueRef plain_max(LLVMBuilderRef b, LLVMValueRef acc,
                              LLVMValueRef v) {
  if (!acc) return v;
  return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, acc, v, ""), acc, v,
                         "");
}

// Notes tap |v| in |*nan| (whether a tap so far is NaN), pairing it with
// the odd tap held in |*prev|.
static void note_nan(LLVMBuilderRef b, LLVMValueRef v, LLVMValueRef* nan,
                     LLVMValueRef* prev) {
  if (!*prev) {
    *prev = v;
    return;
  }
  LLVMValueRef un = LLVMBuildFCmp(b, LLVMRealUNO, *prev, v, "");
  *nan = *nan ? LLVMBuildOr(b, *nan, un, "") : un;
  *prev = NULL;
}

// The maximum |acc| with NaN where a tap noted by note_nan was NaN.
static LLVMValueRef put_nan(window_t* wd, LLVMValueRef acc, LLVMValueRef nan,
                            LLVMValueRef prev) {
  LLVMBuilderRef b = wd->em->b;
  if (prev) {
    LLVMValueRef un = LLVMBuildFCmp(b, LLVMRealUNO, prev, prev, "");
    nan = nan ? LLVMBuildOr(b, nan, un, "") : un;
  }
  return LLVMBuildSelect(b, nan, tj_emit_fconst(wd->vf, NAN), acc, "");
}

typedef struct phase_plan_t {
  int64_t s;       // stride along the row
  int64_t padl;    // identity elements before a phase's first
  int64_t pl;      // floats a phase (a multiple of the lanes)
  int64_t ring;    // ring rows: the tap rows an output row spans
  int64_t chunks;  // s * lanes spans a row, the last maybe partial
} phase_plan_t;

// Whether the phase variant takes this kernel, and its plan.
static bool phase_plan(const window_t* wd, const int64_t od[3],
                       phase_plan_t* out) {
  const tj_kir_conv_t* cv = wd->cv;
  const int64_t s = cv->stride[2], w = wd->w;
  if (s < 2 || s > 4 || cv->in[0] != 1 || cv->kernel[0] != 1 || od[0] != 1 ||
      wd->ks > 64) {
    return false;
  }
  const int64_t e_last =
      floor_div((cv->kernel[2] - 1) * cv->dilation[2] - cv->low[2], s);
  const int64_t padl = cv->low[2] > 0 ? (cv->low[2] + s - 1) / s : 0;
  const int64_t chunks = (cv->in[2] + s * w - 1) / (s * w);
  // The lanes read reach index max(OW, lanes) - 1 + e_last; the splits
  // write chunks * lanes indices.
  int64_t used = (od[2] > w ? od[2] : w) + e_last;
  if (used < chunks * w) used = chunks * w;
  const int64_t pl = (padl + used + w - 1) / w * w;
  const int64_t ring = (cv->kernel[1] - 1) * cv->dilation[1] + 1;
  // The ring and its identity row stay in L1 beside the rows of x.
  if ((ring + 1) * s * pl * 4 > 32 * 1024) return false;
  *out = (phase_plan_t){s, padl, pl, ring, chunks};
  return true;
}

// Splits row |p| of the unit's plane into ring row |dst|'s phases.
static void phase_split(window_t* wd, const phase_plan_t* pp, LLVMValueRef p,
                        LLVMValueRef dst, LLVMValueRef ident) {
  tj_emit_t* em = wd->em;
  LLVMBuilderRef b = em->b;
  const int64_t s = pp->s, in = wd->cv->in[2];
  const int32_t w = wd->w;
  LLVMTypeRef st = LLVMVectorType(em->t_f32, (unsigned)(s * w));
  LLVMValueRef xrow =
      gep(em, em->t_f32, wd->xplane, LLVMBuildMul(b, p, c64(em, in), ""));
  LLVMValueRef pick[4][16];
  for (int64_t q = 0; q < s; ++q)
    for (int32_t i = 0; i < w; ++i) pick[q][i] = c32(em, i * s + q);
  const int64_t full = in / (s * w);
  for (int64_t m = 0; m < pp->chunks; ++m) {
    LLVMValueRef src = gep(em, em->t_f32, xrow, c64(em, m * s * w));
    LLVMValueRef span;
    if (m < full) {
      span = LLVMBuildLoad2(b, st, src, "");
      LLVMSetAlignment(span, 4);
    } else {
      // The row's tail: the lanes past it read nothing and take the
      // identity, which the phases hold past the row's elements.
      LLVMValueRef on[64];
      for (int64_t i = 0; i < s * w; ++i)
        on[i] = LLVMConstInt(em->t_i1, m * s * w + i < in, 0);
      LLVMValueRef spass = LLVMBuildShuffleVector(
          b, ident, ident,
          LLVMConstNull(LLVMVectorType(em->t_i32, (unsigned)(s * w))), "");
      LLVMTypeRef lt[2] = {st, em->t_ptr};
      LLVMValueRef args[4] = {src, c32(em, 4),
                              LLVMConstVector(on, (unsigned)(s * w)), spass};
      span = tj_emit_intrinsic(em, "llvm.masked.load", lt, 2, args, 4);
    }
    for (int64_t q = 0; q < s; ++q) {
      LLVMValueRef v = LLVMBuildShuffleVector(
          b, span, LLVMGetUndef(st), LLVMConstVector(pick[q], (unsigned)w), "");
      LLVMValueRef at =
          gep(em, em->t_f32, dst, c64(em, q * pp->pl + pp->padl + m * w));
      LLVMSetAlignment(LLVMBuildStore(b, v, at), 4);
    }
  }
}

// The output rows [r_begin, r_end) of the unit set up in |wd| (its plane,
// weights and bias), 2-D or 1-D, through the phase ring |ring|.
static void phase_rows(window_t* wd, const phase_plan_t* pp, LLVMValueRef ring,
                       LLVMValueRef colcnt, LLVMValueRef r_begin,
                       LLVMValueRef r_end, LLVMValueRef oplane) {
  tj_emit_t* em = wd->em;
  LLVMBuilderRef b = em->b;
  const tj_kir_conv_t* cv = wd->cv;
  const int32_t w = wd->w;
  const int64_t s = pp->s, kh = cv->kernel[1], kw = cv->kernel[2];
  const int64_t in1 = cv->in[1], rowf = s * pp->pl;
  const bool dw = wd->op == TJ_KIR_WINDOW_DEPTHWISE;
  const bool max = wd->op == TJ_KIR_WINDOW_MAX;
  const bool avg =
      wd->op == TJ_KIR_WINDOW_AVG || wd->op == TJ_KIR_WINDOW_AVG_PAD;
  LLVMValueRef ident = tj_emit_fconst(wd->vf, max ? -INFINITY : 0.0);
  // The weights, splat once a unit (wd->ks <= 64).
  LLVMValueRef wt[64];
  for (int64_t t = 0; dw && t < wd->ks; ++t) {
    LLVMValueRef ws = LLVMBuildLoad2(
        b, em->t_f32, gep(em, em->t_f32, wd->wrow, c64(em, t)), "");
    LLVMSetAlignment(ws, 4);
    wt[t] = tj_emit_splat(em, ws, w);
  }
  // The next row of x to split: rows below it are in the ring already
  // (or were never read: strides past the kernel's rows skip some).
  LLVMValueRef next = tj_emit_alloca(em, em->t_i64, "next");
  LLVMBuildStore(b, c64(em, 0), next);
  tj_emit_loop_t rl;
  LLVMValueRef rr =
      tj_emit_loop_begin(em, &rl, r_begin, r_end, c64(em, 1), "row");
  LLVMValueRef first =
      LLVMBuildSub(b, LLVMBuildMul(b, rr, c64(em, cv->stride[1]), ""),
                   c64(em, cv->low[1]), "first");
  {
    LLVMValueRef last =
        LLVMBuildAdd(b, first, c64(em, (kh - 1) * cv->dilation[1]), "");
    LLVMValueRef from = LLVMBuildLoad2(b, em->t_i64, next, "");
    LLVMValueRef lo = tj_emit_min_i64(em, first, from);
    from = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, lo, from, ""), first,
                           from, "");  // max(first, next)
    LLVMValueRef to = tj_emit_min_i64(em, LLVMBuildAdd(b, last, c64(em, 1), ""),
                                      c64(em, in1));
    tj_emit_loop_t sl;
    LLVMValueRef p = tj_emit_loop_begin(em, &sl, from, to, c64(em, 1), "split");
    phase_split(wd, pp, p,
                gep(em, em->t_f32, ring,
                    LLVMBuildMul(b, LLVMBuildURem(b, p, c64(em, pp->ring), ""),
                                 c64(em, rowf), "")),
                ident);
    tj_emit_loop_end(em, &sl);
    LLVMValueRef n0 = LLVMBuildLoad2(b, em->t_i64, next, "");
    LLVMValueRef hi = tj_emit_min_i64(em, n0, to);
    LLVMBuildStore(
        b,
        LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, hi, n0, ""), to, n0, ""),
        next);  // max(next, to)
  }
  // The tap rows' ring rows (the identity row for those outside x) and,
  // for avg_pool, how many of them count.
  LLVMValueRef rowp[64];
  LLVMValueRef rcount = tj_emit_fconst(em->t_f32, 0.0);
  for (int64_t t = 0; t < kh; ++t) {
    LLVMValueRef p = LLVMBuildAdd(b, first, c64(em, t * cv->dilation[1]), "");
    LLVMValueRef inside = LLVMBuildICmp(b, LLVMIntULT, p, c64(em, in1), "");
    LLVMValueRef slot =
        LLVMBuildSelect(b, inside, LLVMBuildURem(b, p, c64(em, pp->ring), ""),
                        c64(em, pp->ring), "");
    rowp[t] =
        gep(em, em->t_f32, ring, LLVMBuildMul(b, slot, c64(em, rowf), ""));
    if (avg) {
      LLVMValueRef counted = inside;
      if (wd->op == TJ_KIR_WINDOW_AVG_PAD) {
        // count_include_pad: rows within the declared pads count, those
        // past them (ceil_mode's last windows) do not.
        counted = LLVMBuildAnd(
            b, LLVMBuildICmp(b, LLVMIntSGE, p, c64(em, -cv->low[1]), ""),
            LLVMBuildICmp(b, LLVMIntSLT, p, c64(em, in1 + cv->high[1]), ""),
            "");
      }
      rcount = LLVMBuildFAdd(b, rcount,
                             LLVMBuildUIToFP(b, counted, em->t_f32, ""), "");
    }
  }
  LLVMValueRef orow =
      gep(em, em->t_f32, oplane, LLVMBuildMul(b, rr, c64(em, wd->ow), ""));
  tj_emit_loop_t cl;
  LLVMValueRef j0 = tj_emit_loop_begin(em, &cl, c64(em, 0), c64(em, wd->ow),
                                       c64(em, w), "j0");
  {
    // As in the span variant, the last vector of a row ends at its end.
    if (wd->ow >= w) j0 = tj_emit_min_i64(em, j0, c64(em, wd->ow - w));
    LLVMValueRef acc = NULL, nan = NULL, prev = NULL;
    for (int64_t t = 0; t < kh; ++t) {
      LLVMValueRef part = NULL;
      for (int64_t u = 0; u < kw; ++u) {
        const int64_t off = u * cv->dilation[2] - cv->low[2];
        const int64_t e = floor_div(off, s), q = off - e * s;
        LLVMValueRef at =
            gep(em, em->t_f32, rowp[t],
                LLVMBuildAdd(b, j0, c64(em, q * pp->pl + pp->padl + e), ""));
        LLVMValueRef v = LLVMBuildLoad2(b, wd->vf, at, "");
        LLVMSetAlignment(v, 4);
        if (dw) {
          part = part ? tj_emit_fmuladd(em, v, wt[t * kw + u], part)
                      : LLVMBuildFMul(b, v, wt[t * kw + u], "");
        } else if (max) {
          part = plain_max(b, part, v);
          note_nan(b, v, &nan, &prev);
        } else {
          part = part ? LLVMBuildFAdd(b, part, v, "") : v;
        }
      }
      if (!acc) {
        acc = part;
      } else if (max) {
        acc = plain_max(b, acc, part);
      } else {
        acc = LLVMBuildFAdd(b, acc, part, "");
      }
    }
    // Sums from their own zero, +0, as the loop above (its partials start
    // at the identity) and the reference: the first tap's -0 (or -0
    // product) alone would otherwise stay -0. One add a vector.
    if (!max) acc = LLVMBuildFAdd(b, acc, tj_emit_fconst(wd->vf, 0.0), "");
    if (max) acc = put_nan(wd, acc, nan, prev);
    if (dw && wd->bias) acc = LLVMBuildFAdd(b, acc, wd->bias, "");
    if (avg) {
      LLVMValueRef cc =
          LLVMBuildLoad2(b, wd->vf, gep(em, em->t_f32, colcnt, j0), "");
      LLVMSetAlignment(cc, 4);
      acc = LLVMBuildFDiv(
          b, acc, LLVMBuildFMul(b, tj_emit_splat(em, rcount, w), cc, ""), "");
    }
    LLVMValueRef dst = gep(em, em->t_f32, orow, j0);
    if (wd->ow >= w) {
      LLVMSetAlignment(LLVMBuildStore(b, acc, dst), 4);
    } else {
      LLVMTypeRef st[2] = {wd->vf, em->t_ptr};
      LLVMValueRef args[4] = {acc, dst, c32(em, 4),
                              tj_emit_lane_mask(em, c64(em, wd->ow), w)};
      tj_emit_intrinsic(em, "llvm.masked.store", st, 2, args, 4);
    }
  }
  tj_emit_loop_end(em, &cl);
  tj_emit_loop_end(em, &rl);
}

// avg_pool's count of column taps per output column (those inside x, or
// within the pads for count_include_pad), max(OW, lanes) of them, as a
// constant array.
static LLVMValueRef phase_colcount(window_t* wd) {
  tj_emit_t* em = wd->em;
  const tj_kir_conv_t* cv = wd->cv;
  const int64_t n = wd->ow > wd->w ? wd->ow : wd->w;
  const bool pad = wd->op == TJ_KIR_WINDOW_AVG_PAD;
  const int64_t lo = pad ? -cv->low[2] : 0;
  const int64_t hi = cv->in[2] + (pad ? cv->high[2] : 0);
  tj_allocator_t a = em->k->allocator;
  LLVMValueRef* v = tj_calloc(a, (size_t)n, sizeof(*v));
  if (!v) return NULL;
  for (int64_t j = 0; j < n; ++j) {
    int64_t count = 0;
    for (int64_t u = 0; u < cv->kernel[2]; ++u) {
      const int64_t c = j * cv->stride[2] - cv->low[2] + u * cv->dilation[2];
      count += c >= lo && c < hi;
    }
    // Lanes past OW are not stored; 1 keeps their division quiet.
    v[j] =
        LLVMConstReal(em->t_f32, j < wd->ow && count > 0 ? (double)count : 1.0);
  }
  LLVMTypeRef at = LLVMArrayType2(em->t_f32, (uint64_t)n);
  LLVMValueRef g = LLVMAddGlobal(em->mod, at, "window_colcount");
  LLVMSetInitializer(g, LLVMConstArray2(em->t_f32, v, (uint64_t)n));
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
  tj_free(a, v, (size_t)n * sizeof(*v));
  return g;
}

// Stores |ident| (a vector of |w| floats) over the |floats| floats of the
// stack buffer |buf|: the window padding's value before any tap lands.
static void fill_stack(tj_emit_t* em, LLVMValueRef buf, int64_t floats,
                       int32_t w, LLVMValueRef ident) {
  tj_emit_loop_t fl;
  LLVMValueRef i = tj_emit_loop_begin(em, &fl, c64(em, 0), c64(em, floats),
                                      c64(em, w), "fill");
  LLVMSetAlignment(LLVMBuildStore(em->b, ident, gep(em, em->t_f32, buf, i)), 4);
  tj_emit_loop_end(em, &fl);
}

// The channel vector variant (mobile2, issue 15; tj_kir_window_cvec): at
// output rows of 16 columns or fewer (mobilenet's 5x5 depthwise layers at
// 14x14 and 7x7) a vector of output columns is mostly masked lanes and
// every tap a masked load. Here a unit is one image's block of w channels,
// held as MLAS's and oneDNN's NCHWc depthwise kernels hold them: its w
// planes are copied into a stack buffer [rows][cols][w], transposed in
// registers a tile of w columns at a time and padded with the op's
// identity (the pads written once a call, the interior every unit), so
// that each tap of each output pixel is one plain vector load of its w
// channels, and a tile of w output pixels (w accumulators, independent
// chains) is transposed back and stored as w channel rows, masked to the
// block's channels and the row's pixels.

static tj_status_t emit_cvec(window_t* wd, int64_t oh, int64_t C) {
  tj_emit_t* em = wd->em;
  LLVMBuilderRef b = em->b;
  const tj_kir_conv_t* cv = wd->cv;
  const int32_t w = wd->w;
  const int64_t ow = wd->ow, ih = cv->in[1], iw = cv->in[2];
  const int64_t kh = cv->kernel[1], kw = cv->kernel[2];
  const int64_t taps = kh * kw;
  const bool dw = wd->op == TJ_KIR_WINDOW_DEPTHWISE;
  int64_t rows, cols;
  tj_kir_window_cvec_extent(em->k, w, &rows, &cols);
  const int64_t blocks = (C + w - 1) / w;
  LLVMTypeRef lt[2] = {wd->vf, em->t_ptr};
  LLVMValueRef ident =
      tj_emit_fconst(wd->vf, wd->op == TJ_KIR_WINDOW_MAX ? -INFINITY : 0.0);

  // The padded block, its pads the identity (written once a call: a unit
  // writes only x's rows and the columns of its tiles, past x's columns
  // the identity again).
  const int64_t floats = rows * cols * w;
  LLVMValueRef buf =
      tj_emit_alloca(em, LLVMArrayType2(em->t_f32, (uint64_t)floats), "cvec");
  LLVMSetAlignment(buf, 64);
  LLVMValueRef wtab = NULL;
  if (dw) {
    const int64_t wtaps = (taps + w - 1) / w * w;
    wtab = tj_emit_alloca(em, LLVMArrayType2(em->t_f32, (uint64_t)(wtaps * w)),
                          "cvec_w");
    LLVMSetAlignment(wtab, 64);
  }
  fill_stack(em, buf, floats, w, ident);

  tj_emit_loop_t ul;
  LLVMValueRef u =
      tj_emit_loop_begin(em, &ul, em->arg_begin, em->arg_end, c64(em, 1), "u");
  LLVMValueRef cb = LLVMBuildURem(b, u, c64(em, blocks), "cblock");
  LLVMValueRef n = LLVMBuildUDiv(b, u, c64(em, blocks), "n");
  LLVMValueRef c0 = LLVMBuildMul(b, cb, c64(em, w), "c0");
  // The block's channels: lanes (and tile rows) below |nch| are real.
  LLVMValueRef nch =
      tj_emit_min_i64(em, c64(em, w), LLVMBuildSub(b, c64(em, C), c0, ""));
  LLVMValueRef chmask = tj_emit_lane_mask(em, nch, w);
  LLVMValueRef chok[16];
  for (int32_t r = 0; r < w; ++r)
    chok[r] = LLVMBuildICmp(b, LLVMIntSGT, nch, c64(em, r), "");
  const int64_t ins = ih * iw, P = oh * ow;
  LLVMValueRef plane0 =
      LLVMBuildAdd(b, LLVMBuildMul(b, n, c64(em, C), ""), c0, "plane0");
  LLVMValueRef xblk =
      tj_emit_advance(em, (uint32_t)wd->xb, em->base[wd->xb],
                      LLVMBuildMul(b, plane0, c64(em, ins), ""));
  LLVMValueRef oblk = tj_emit_advance(em, (uint32_t)wd->ob, em->base[wd->ob],
                                      LLVMBuildMul(b, plane0, c64(em, P), ""));
  LLVMValueRef bias = NULL;
  if (dw) {
    // Tap t's weights of the block's channels, a vector at wtab + t * w:
    // the channels' rows of taps read w taps at a time and transposed in
    // registers (no gather), the channels past C and taps past the last
    // 0 (wtab holds whole tiles).
    LLVMValueRef wbase =
        tj_emit_advance(em, (uint32_t)wd->wb, em->base[wd->wb],
                        LLVMBuildMul(b, c0, c64(em, taps), ""));
    tj_emit_loop_t tl;
    LLVMValueRef t0 = tj_emit_loop_begin(em, &tl, c64(em, 0), c64(em, taps),
                                         c64(em, w), "t0");
    LLVMValueRef tmask =
        tj_emit_lane_mask(em, LLVMBuildSub(b, c64(em, taps), t0, ""), w);
    LLVMValueRef wrow[16];
    for (int32_t r = 0; r < w; ++r) {
      LLVMValueRef m =
          LLVMBuildAnd(b, tmask, tj_emit_splat(em, chok[r], w), "");
      LLVMValueRef args[4] = {
          gep(em, em->t_f32, wbase,
              LLVMBuildAdd(b, t0, c64(em, (int64_t)r * taps), "")),
          c32(em, 4), m, tj_emit_fconst(wd->vf, 0.0)};
      wrow[r] = tj_emit_intrinsic(em, "llvm.masked.load", lt, 2, args, 4);
    }
    tj_emit_transpose_tile(em, wrow, w);
    LLVMValueRef wdst =
        gep(em, em->t_f32, wtab, LLVMBuildMul(b, t0, c64(em, w), ""));
    for (int32_t i = 0; i < w; ++i) {
      LLVMSetAlignment(
          LLVMBuildStore(b, wrow[i],
                         gep(em, em->t_f32, wdst, c64(em, (int64_t)i * w))),
          4);
    }
    tj_emit_loop_end(em, &tl);
    if (wd->bb >= 0) {
      LLVMValueRef bp =
          tj_emit_advance(em, (uint32_t)wd->bb, em->base[wd->bb], c0);
      LLVMValueRef bargs[4] = {bp, c32(em, 4), chmask,
                               tj_emit_fconst(wd->vf, 0.0)};
      bias = tj_emit_intrinsic(em, "llvm.masked.load", lt, 2, bargs, 4);
    }
  }

  // x's rows into the buffer, a tile of w columns (of w channels) at a
  // time: the last tile of a row at least w wide overlaps the one before;
  // a narrower row's tile reads its columns and the identity past them.
  {
    tj_emit_loop_t hl, jl;
    LLVMValueRef h =
        tj_emit_loop_begin(em, &hl, c64(em, 0), c64(em, ih), c64(em, 1), "xh");
    LLVMValueRef j =
        tj_emit_loop_begin(em, &jl, c64(em, 0), c64(em, iw), c64(em, w), "xj");
    LLVMValueRef colmask = NULL;
    if (iw >= w) {
      j = tj_emit_min_i64(em, j, c64(em, iw - w));
    } else {
      colmask = tj_emit_lane_mask(em, c64(em, iw), w);
    }
    LLVMValueRef src =
        gep(em, em->t_f32, xblk,
            LLVMBuildAdd(b, LLVMBuildMul(b, h, c64(em, iw), ""), j, ""));
    LLVMValueRef row[16];
    for (int32_t r = 0; r < w; ++r) {
      LLVMValueRef m = tj_emit_splat(em, chok[r], w);
      if (colmask) m = LLVMBuildAnd(b, m, colmask, "");
      LLVMValueRef args[4] = {
          gep(em, em->t_f32, src, c64(em, (int64_t)r * ins)), c32(em, 4), m,
          ident};
      row[r] = tj_emit_intrinsic(em, "llvm.masked.load", lt, 2, args, 4);
    }
    tj_emit_transpose_tile(em, row, w);
    LLVMValueRef dst =
        gep(em, em->t_f32, buf,
            LLVMBuildMul(
                b,
                LLVMBuildAdd(
                    b,
                    LLVMBuildMul(b, LLVMBuildAdd(b, h, c64(em, cv->low[1]), ""),
                                 c64(em, cols), ""),
                    LLVMBuildAdd(b, j, c64(em, cv->low[2]), ""), ""),
                c64(em, w), ""));
    for (int32_t i = 0; i < w; ++i) {
      LLVMSetAlignment(
          LLVMBuildStore(b, row[i],
                         gep(em, em->t_f32, dst, c64(em, (int64_t)i * w))),
          4);
    }
    tj_emit_loop_end(em, &jl);
    tj_emit_loop_end(em, &hl);
  }

  // The output rows, a tile of w pixels at a time.
  tj_emit_loop_t rl, jl;
  LLVMValueRef r =
      tj_emit_loop_begin(em, &rl, c64(em, 0), c64(em, oh), c64(em, 1), "oh");
  LLVMValueRef j0 =
      tj_emit_loop_begin(em, &jl, c64(em, 0), c64(em, ow), c64(em, w), "j0");
  if (ow >= w) j0 = tj_emit_min_i64(em, j0, c64(em, ow - w));
  // A row narrower than w computes its own pixels only (the tile's other
  // rows are the identity, not stored).
  const int32_t tp = ow < w ? (int32_t)ow : w;
  LLVMValueRef slot[16];
  for (int32_t i = 0; i < tp; ++i) {
    slot[i] = tj_emit_alloca(em, wd->vf, "cacc");
    LLVMBuildStore(b, bias ? bias : ident, slot[i]);
  }
  // The tile's first pixel's first tap in the buffer, in vectors.
  LLVMValueRef base = LLVMBuildAdd(
      b,
      LLVMBuildMul(b, LLVMBuildMul(b, r, c64(em, cv->stride[1]), ""),
                   c64(em, cols), ""),
      LLVMBuildMul(b, j0, c64(em, cv->stride[2]), ""), "");
  tj_emit_loop_t al, bl;
  LLVMValueRef ta =
      tj_emit_loop_begin(em, &al, c64(em, 0), c64(em, kh), c64(em, 1), "kh");
  LLVMValueRef tb =
      tj_emit_loop_begin(em, &bl, c64(em, 0), c64(em, kw), c64(em, 1), "kw");
  {
    LLVMValueRef at = LLVMBuildAdd(
        b, base,
        LLVMBuildAdd(b,
                     LLVMBuildMul(b, ta, c64(em, cv->dilation[1] * cols), ""),
                     LLVMBuildMul(b, tb, c64(em, cv->dilation[2]), ""), ""),
        "");
    LLVMValueRef p =
        gep(em, em->t_f32, buf, LLVMBuildMul(b, at, c64(em, w), ""));
    LLVMValueRef wt = NULL;
    if (dw) {
      LLVMValueRef t =
          LLVMBuildAdd(b, LLVMBuildMul(b, ta, c64(em, kw), ""), tb, "");
      wt = LLVMBuildLoad2(
          b, wd->vf,
          gep(em, em->t_f32, wtab, LLVMBuildMul(b, t, c64(em, w), "")), "");
      LLVMSetAlignment(wt, 4);
    }
    for (int32_t i = 0; i < tp; ++i) {
      LLVMValueRef v = LLVMBuildLoad2(
          b, wd->vf,
          gep(em, em->t_f32, p, c64(em, (int64_t)i * cv->stride[2] * w)), "");
      LLVMSetAlignment(v, 4);
      LLVMValueRef acc = LLVMBuildLoad2(b, wd->vf, slot[i], "");
      LLVMBuildStore(b, combine(wd, acc, v, wt), slot[i]);
    }
  }
  tj_emit_loop_end(em, &bl);
  tj_emit_loop_end(em, &al);
  LLVMValueRef row[16];
  for (int32_t i = 0; i < w; ++i)
    row[i] = i < tp ? LLVMBuildLoad2(b, wd->vf, slot[i], "") : ident;
  tj_emit_transpose_tile(em, row, w);
  LLVMValueRef pix = tj_emit_lane_mask(
      em, tj_emit_min_i64(em, c64(em, w), LLVMBuildSub(b, c64(em, ow), j0, "")),
      w);
  LLVMValueRef orow =
      gep(em, em->t_f32, oblk,
          LLVMBuildAdd(b, LLVMBuildMul(b, r, c64(em, ow), ""), j0, ""));
  for (int32_t c = 0; c < w; ++c) {
    LLVMValueRef keep = LLVMBuildAnd(b, pix, tj_emit_splat(em, chok[c], w), "");
    LLVMValueRef sargs[4] = {row[c],
                             gep(em, em->t_f32, orow, c64(em, (int64_t)c * P)),
                             c32(em, 4), keep};
    tj_emit_intrinsic(em, "llvm.masked.store", lt, 2, sargs, 4);
  }
  tj_emit_loop_end(em, &jl);
  tj_emit_loop_end(em, &rl);
  tj_emit_loop_end(em, &ul);
  return NULL;
}

// The blocked variant (r18, issue 15; tj_kir_window_blocks): a max_pool
// whose x and output the x86 backend holds blocked, [N][C / w][H][W][w]
// (tj_kir_conv_t.xblock and yblock; nchwc_assign), as resnet's max pool
// between the stem (which stores blocks) and layer1's convs (which read
// them). A unit is one image's block of w channels over a block of output
// rows; each output pixel's taps are plain vector loads of their w
// channels, no transpose, no mask and no stack buffer, and the pixel's w
// channels are stored as one vector. Taps outside x (the pads, ceil_mode's
// overhang) read a clamped pixel and take the identity in its place:
// whole rows of them where an output row's tap rows leave x, the columns
// of the first and last few pixels of a row elsewhere.

// Output pixels [j_begin, j_end) of one output row, its tap rows at
// |rowp| (clamped into x), |rowok| (NULL: every tap row inside x) saying
// which lie inside, columns checked against x's when |colcheck|; stored
// at |orow| (the row's first pixel's block).
static void blocked_pixels(window_t* wd, LLVMValueRef orow,
                           const LLVMValueRef* rowp, const LLVMValueRef* rowok,
                           int64_t j_begin, int64_t j_end, bool colcheck) {
  if (j_begin >= j_end) return;
  tj_emit_t* em = wd->em;
  LLVMBuilderRef b = em->b;
  const tj_kir_conv_t* cv = wd->cv;
  const int32_t w = wd->w;
  const int64_t kh = cv->kernel[1], kw = cv->kernel[2], iw = cv->in[2];
  LLVMValueRef ident = tj_emit_fconst(wd->vf, -INFINITY);
  tj_emit_loop_t jl;
  LLVMValueRef j = tj_emit_loop_begin(em, &jl, c64(em, j_begin), c64(em, j_end),
                                      c64(em, 1), "bj");
  LLVMValueRef c0 = LLVMBuildMul(b, j, c64(em, cv->stride[2]), "");
  LLVMValueRef acc = NULL, nan = NULL, prev = NULL;
  for (int64_t t = 0; t < kh; ++t) {
    for (int64_t u = 0; u < kw; ++u) {
      LLVMValueRef col =
          LLVMBuildAdd(b, c0, c64(em, u * cv->dilation[2] - cv->low[2]), "");
      LLVMValueRef ok = rowok ? rowok[t] : NULL;
      if (colcheck) {
        LLVMValueRef in = LLVMBuildAnd(
            b, LLVMBuildICmp(b, LLVMIntSGE, col, c64(em, 0), ""),
            LLVMBuildICmp(b, LLVMIntSLT, col, c64(em, iw), ""), "");
        col = LLVMBuildSelect(b, in, col, c64(em, 0), "");
        ok = ok ? LLVMBuildAnd(b, ok, in, "") : in;
      }
      LLVMValueRef v = LLVMBuildLoad2(
          b, wd->vf,
          gep(em, em->t_f32, rowp[t], LLVMBuildMul(b, col, c64(em, w), "")),
          "");
      LLVMSetAlignment(v, 4);
      if (ok) v = LLVMBuildSelect(b, ok, v, ident, "");
      acc = plain_max(b, acc, v);
      note_nan(b, v, &nan, &prev);
    }
  }
  acc = put_nan(wd, acc, nan, prev);
  LLVMSetAlignment(
      LLVMBuildStore(
          b, acc, gep(em, em->t_f32, orow, LLVMBuildMul(b, j, c64(em, w), ""))),
      4);
  tj_emit_loop_end(em, &jl);
}

static tj_status_t emit_blocked(window_t* wd, int64_t oh) {
  tj_emit_t* em = wd->em;
  LLVMBuilderRef b = em->b;
  const tj_kir_conv_t* cv = wd->cv;
  const int32_t w = wd->w;
  const int64_t ow = wd->ow, ih = cv->in[1], iw = cv->in[2];
  const int64_t kh = cv->kernel[1], kw = cv->kernel[2];
  const int64_t rb = tj_kir_window_block_rows(em->k, w);
  const int64_t rblocks = (oh + rb - 1) / rb;
  // The output columns whose taps all lie inside x's row: [jlo, jhi).
  const int64_t s2 = cv->stride[2];
  int64_t jlo = (cv->low[2] + s2 - 1) / s2;
  int64_t jhi =
      floor_div(iw - 1 + cv->low[2] - (kw - 1) * cv->dilation[2], s2) + 1;
  if (jlo > ow) jlo = ow;
  if (jhi > ow) jhi = ow;
  if (jhi < jlo) jhi = jlo;

  tj_emit_loop_t ul;
  LLVMValueRef u =
      tj_emit_loop_begin(em, &ul, em->arg_begin, em->arg_end, c64(em, 1), "u");
  LLVMValueRef rbk = LLVMBuildURem(b, u, c64(em, rblocks), "rblock");
  LLVMValueRef blk = LLVMBuildUDiv(b, u, c64(em, rblocks), "blk");
  // blk = n x blocks + the channel block: both layouts' blocks in order.
  LLVMValueRef xblk =
      tj_emit_advance(em, (uint32_t)wd->xb, em->base[wd->xb],
                      LLVMBuildMul(b, blk, c64(em, ih * iw * w), ""));
  LLVMValueRef oblk =
      tj_emit_advance(em, (uint32_t)wd->ob, em->base[wd->ob],
                      LLVMBuildMul(b, blk, c64(em, oh * ow * w), ""));
  LLVMValueRef r_begin = LLVMBuildMul(b, rbk, c64(em, rb), "");
  LLVMValueRef r_end = tj_emit_min_i64(
      em, c64(em, oh), LLVMBuildAdd(b, r_begin, c64(em, rb), ""));
  tj_emit_loop_t rl;
  LLVMValueRef r =
      tj_emit_loop_begin(em, &rl, r_begin, r_end, c64(em, 1), "br");
  {
    LLVMValueRef r0 =
        LLVMBuildSub(b, LLVMBuildMul(b, r, c64(em, cv->stride[1]), ""),
                     c64(em, cv->low[1]), "");
    LLVMValueRef rowp[64], rowok[64];
    LLVMValueRef interior = NULL;
    for (int64_t t = 0; t < kh; ++t) {
      LLVMValueRef h = LLVMBuildAdd(b, r0, c64(em, t * cv->dilation[1]), "");
      LLVMValueRef in =
          LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSGE, h, c64(em, 0), ""),
                       LLVMBuildICmp(b, LLVMIntSLT, h, c64(em, ih), ""), "");
      rowok[t] = in;
      interior = interior ? LLVMBuildAnd(b, interior, in, "") : in;
      h = LLVMBuildSelect(b, in, h, c64(em, 0), "");
      rowp[t] =
          gep(em, em->t_f32, xblk, LLVMBuildMul(b, h, c64(em, iw * w), ""));
    }
    LLVMValueRef orow =
        gep(em, em->t_f32, oblk, LLVMBuildMul(b, r, c64(em, ow * w), ""));
    tj_emit_if_t fi;
    tj_emit_if_begin(em, &fi, interior, "brow_in");
    blocked_pixels(wd, orow, rowp, NULL, 0, jlo, true);
    blocked_pixels(wd, orow, rowp, NULL, jlo, jhi, false);
    blocked_pixels(wd, orow, rowp, NULL, jhi, ow, true);
    tj_emit_if_end(em, &fi);
    tj_emit_if_t ei;
    tj_emit_if_begin(em, &ei, LLVMBuildNot(b, interior, ""), "brow_edge");
    blocked_pixels(wd, orow, rowp, rowok, 0, ow, true);
    tj_emit_if_end(em, &ei);
  }
  tj_emit_loop_end(em, &rl);
  tj_emit_loop_end(em, &ul);
  return NULL;
}

tj_status_t tj_emit_window(tj_emit_t* em) {
  const tj_kir_t* k = em->k;
  LLVMBuilderRef b = em->b;
  window_t wd;
  memset(&wd, 0, sizeof(wd));
  wd.em = em;
  wd.cv = &k->conv;
  wd.op = k->conv.window;
  wd.w = em->target.lanes;
  wd.xb = wd.wb = wd.ob = wd.bb = -1;
  for (uint32_t i = 0; i < k->num_buffers; ++i) {
    switch (k->buffers[i].role) {
      case TJ_KIR_CONV_X:
        wd.xb = (int32_t)i;
        break;
      case TJ_KIR_CONV_W:
        wd.wb = (int32_t)i;
        break;
      case TJ_KIR_CONV_BIAS:
        wd.bb = (int32_t)i;
        break;
      default:
        wd.ob = (int32_t)i;
        break;
    }
  }
  const tj_kir_conv_t* cv = wd.cv;
  const tj_kir_buffer_t* xbuf = wd.xb >= 0 ? &k->buffers[wd.xb] : NULL;
  if (!xbuf || wd.ob < 0 ||
      (wd.op == TJ_KIR_WINDOW_DEPTHWISE) != (wd.wb >= 0) ||
      xbuf->strides[0].param >= 0 || xbuf->strides[1].param >= 0 ||
      xbuf->strides[1].value < 1) {
    return tj_internal("kernel @%s: window kernel buffers", k->name);
  }
  const int32_t w = wd.w;
  wd.vf = LLVMVectorType(em->t_f32, (unsigned)w);
  wd.vi32 = LLVMVectorType(em->t_i32, (unsigned)w);
  int64_t od[3] = {1, 1, 1};
  for (int32_t i = 0; i < cv->spatial; ++i)
    od[3 - cv->spatial + i] = k->dims[2 + i].value;
  const int64_t O = k->dims[1].value;
  const int64_t INS = cv->in[0] * cv->in[1] * cv->in[2];
  const int64_t C = xbuf->strides[0].value / xbuf->strides[1].value;
  const int64_t mult = C > 0 && O % C == 0 ? O / C : 1;
  const int64_t P = od[0] * od[1] * od[2];
  const int64_t R = od[0] * od[1];
  wd.ow = od[2];
  wd.ks = cv->kernel[0] * cv->kernel[1] * cv->kernel[2];
  const int64_t rb = tj_kir_window_rows(k);
  const int64_t rblocks = (R + rb - 1) / rb;
  // The vectors of output columns whose taps all lie inside the row: j0
  // from jlo to jhi (and j0 + lanes <= OW). A span load (stride 2 to 4)
  // reads s * lanes elements from the first lane's.
  const int64_t s2 = cv->stride[2];
  const bool whole_span = s2 > 1 && s2 <= 4 && !em->target.avx512;
  const int64_t reach = (cv->kernel[2] - 1) * cv->dilation[2] +
                        (whole_span ? s2 * w : (w - 1) * s2 + 1);
  const int64_t jlo = (cv->low[2] + s2 - 1) / s2;
  int64_t jhi = floor_div(cv->in[2] + cv->low[2] - reach, s2);
  if (jhi > wd.ow - w) jhi = wd.ow - w;

  if (cv->xblock || cv->yblock) {
    if (cv->xblock != w || cv->yblock != w || !tj_kir_window_blocks(k, w)) {
      return tj_internal(
          "kernel @%s: a blocked window layout (xblock %d, yblock %d) at %d "
          "lanes",
          k->name, cv->xblock, cv->yblock, w);
    }
    return emit_blocked(&wd, od[1]);
  }
  if (tj_kir_window_cvec(k, w)) return emit_cvec(&wd, od[1], O);

  phase_plan_t pp;
  const bool phased = phase_plan(&wd, od, &pp);
  LLVMValueRef ring = NULL, colcnt = NULL;
  if (phased) {
    if (wd.op == TJ_KIR_WINDOW_AVG || wd.op == TJ_KIR_WINDOW_AVG_PAD) {
      colcnt = phase_colcount(&wd);
      if (!colcnt) return tj_status_oom();
    }
    // The ring and its identity row, filled with the identity once a call:
    // the splits write only the phases' elements, never their pads.
    const int64_t floats = (pp.ring + 1) * pp.s * pp.pl;
    ring =
        tj_emit_alloca(em, LLVMArrayType2(em->t_f32, (uint64_t)floats), "ring");
    LLVMSetAlignment(ring, 64);
    LLVMValueRef ident =
        tj_emit_fconst(wd.vf, wd.op == TJ_KIR_WINDOW_MAX ? -INFINITY : 0.0);
    fill_stack(em, ring, floats, w, ident);
  }

  tj_emit_loop_t ul;
  LLVMValueRef u =
      tj_emit_loop_begin(em, &ul, em->arg_begin, em->arg_end, c64(em, 1), "u");
  LLVMValueRef rbk = LLVMBuildURem(b, u, c64(em, rblocks), "rblock");
  LLVMValueRef plane = LLVMBuildUDiv(b, u, c64(em, rblocks), "plane");
  LLVMValueRef o = LLVMBuildURem(b, plane, c64(em, O), "o");
  LLVMValueRef n = LLVMBuildUDiv(b, plane, c64(em, O), "n");
  LLVMValueRef ci = LLVMBuildUDiv(b, o, c64(em, mult), "ci");
  wd.xplane =
      tj_emit_advance(em, (uint32_t)wd.xb, em->base[wd.xb],
                      LLVMBuildAdd(b, LLVMBuildMul(b, n, c64(em, C * INS), ""),
                                   LLVMBuildMul(b, ci, c64(em, INS), ""), ""));
  if (wd.wb >= 0) {
    wd.wrow = tj_emit_advance(em, (uint32_t)wd.wb, em->base[wd.wb],
                              LLVMBuildMul(b, o, c64(em, wd.ks), ""));
  }
  if (wd.bb >= 0) {
    LLVMValueRef bv = LLVMBuildLoad2(
        b, em->t_f32, tj_emit_advance(em, (uint32_t)wd.bb, em->base[wd.bb], o),
        "");
    LLVMSetAlignment(bv, 4);
    wd.bias = tj_emit_splat(em, bv, w);
  }
  LLVMValueRef oplane = tj_emit_advance(em, (uint32_t)wd.ob, em->base[wd.ob],
                                        LLVMBuildMul(b, plane, c64(em, P), ""));
  LLVMValueRef r_begin = LLVMBuildMul(b, rbk, c64(em, rb), "");
  LLVMValueRef r_end = tj_emit_min_i64(
      em, c64(em, R), LLVMBuildAdd(b, r_begin, c64(em, rb), ""));
  if (phased) {
    phase_rows(&wd, &pp, ring, colcnt, r_begin, r_end, oplane);
    tj_emit_loop_end(em, &ul);
    return NULL;
  }
  tj_emit_loop_t rl;
  LLVMValueRef rr =
      tj_emit_loop_begin(em, &rl, r_begin, r_end, c64(em, 1), "row");
  {
    LLVMValueRef oh = LLVMBuildURem(b, rr, c64(em, od[1]), "oh");
    LLVMValueRef odd = LLVMBuildUDiv(b, rr, c64(em, od[1]), "od");
    wd.r0 = LLVMBuildSub(b, LLVMBuildMul(b, odd, c64(em, cv->stride[0]), ""),
                         c64(em, cv->low[0]), "");
    wd.r1 = LLVMBuildSub(b, LLVMBuildMul(b, oh, c64(em, cv->stride[1]), ""),
                         c64(em, cv->low[1]), "");
    wd.orow =
        gep(em, em->t_f32, oplane, LLVMBuildMul(b, rr, c64(em, wd.ow), ""));
    // Whether every tap row of this output row lies inside x.
    LLVMValueRef interior = NULL;
    const LLVMValueRef r[2] = {wd.r0, wd.r1};
    for (int32_t d = 0; d < 2; ++d) {
      const int64_t last = (cv->kernel[d] - 1) * cv->dilation[d];
      LLVMValueRef lo = LLVMBuildICmp(b, LLVMIntSGE, r[d], c64(em, 0), "");
      LLVMValueRef hi =
          LLVMBuildICmp(b, LLVMIntSLT, r[d], c64(em, cv->in[d] - last), "");
      LLVMValueRef both = LLVMBuildAnd(b, lo, hi, "");
      interior = interior ? LLVMBuildAnd(b, interior, both, "") : both;
    }
    tj_emit_loop_t cl;
    LLVMValueRef j0 = tj_emit_loop_begin(em, &cl, c64(em, 0), c64(em, wd.ow),
                                         c64(em, w), "j0");
    {
      // The last vector of a row of at least a vector ends at the row's
      // end, overlapping the one before (its lanes store the same values
      // again), so that it takes the plain loads when its taps allow.
      if (wd.ow >= w) j0 = tj_emit_min_i64(em, j0, c64(em, wd.ow - w));
      LLVMValueRef fast = LLVMConstInt(em->t_i1, 0, 0);
      if (jlo <= jhi) {
        fast = LLVMBuildAnd(
            b, interior,
            LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSGE, j0, c64(em, jlo), ""),
                         LLVMBuildICmp(b, LLVMIntSLE, j0, c64(em, jhi), ""),
                         ""),
            "fast");
      }
      tj_emit_if_t fi;
      tj_emit_if_begin(em, &fi, fast, "inside");
      emit_chunk(&wd, j0, false);
      tj_emit_if_end(em, &fi);
      tj_emit_if_t ei;
      tj_emit_if_begin(em, &ei, LLVMBuildNot(b, fast, ""), "edge");
      emit_chunk(&wd, j0, true);
      tj_emit_if_end(em, &ei);
    }
    tj_emit_loop_end(em, &cl);
  }
  tj_emit_loop_end(em, &rl);
  tj_emit_loop_end(em, &ul);
  return NULL;
}
