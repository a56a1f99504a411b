// The ROW_REDUCE template: one work unit per row; the phases run in order
// over the row while it is in cache.
//
//   for row in [begin, end):
//     pointers at (row's multi-index, 0)
//     REDUCE: U vector accumulators (independent chains hide the add/max
//             latency), main loop of U*W elements, a W loop, a masked tail
//             whose inactive lanes contribute the identity; then the U
//             accumulators are merged and the lanes reduced as a tree
//             (blocked partial sums, not a serial chain). A float sum runs
//             the main loop in blocks of SUM_BLOCK elements whose sums are
//             added pairwise (cascade_t): error grows with SUM_BLOCK / (U*W)
//             + log2(len), not len.
//     MAP:    the pointwise line loop (tj_emit_line_map).
//     ROW:    the body once, with scalars.
//
// Column schedule: when the reduced (last) dim is strided in memory and the
// dim before it is contiguous, e.g. db = sum over B of dy for a row-major
// dy [B, N] (a kernel space [N, B] whose rows are dy's columns), the row
// schedule above would gather every vector from W different cache lines
// (and scatter a MAP's stores), 16 lines per 16 floats. Then the lanes run
// across rows instead, and a call walks its rows in strips:
//
//   for each strip of up to STRIP_VECTORS * W rows in [begin, end) that are
//       consecutive along the next-to-last dim:
//     total = identity
//     for j0 in [0, len) step J_BLOCK:          // blocked sums
//       block = identity
//       for j in [j0, min(len, j0 + J_BLOCK)):  // one contiguous run per j
//         for each vector of rows of the strip (masked at the strip's end):
//           the REDUCE phases accumulate into block, the MAP phases store
//       total = combine(total, block)
//       float sums, every COLUMN_RUN blocks: total to the pairwise levels
//     float sums: total += the levels held
//     ROW phases: once per row, scalar, with that row's totals
//
// so memory is read (and written) in runs of the strip's width, as the
// rows schedule reads a contiguous row. The REDUCE and MAP phases share one
// walk, their common loads issued once (tj_emit_load_cache_t), which needs
// that no REDUCE or MAP phase reads a row result (a max-subtracted softmax
// over a strided dim keeps the row schedule) and that one MAP at most
// comes last. Float sums are blocked as above, runs of COLUMN_RUN blocks
// added pairwise through COLUMN_LEVELS levels: error grows with J_BLOCK +
// COLUMN_RUN + log2(len) (+ len / 2^22 past 2^22 rows), not len.
//
// ARGMAX keeps (value, index) per lane with "first max, NaN wins" order:
// a candidate wins if it is larger, or NaN over a number, or equal with a
// smaller index. The order is total, so the lane tree finds the first max.

#include <string.h>

#include "jit/emit_llvm.h"
#include "lib/dtype.h"

#define ARGMAX_NONE INT64_MAX  // index of a lane that has seen no element
// Column schedule (see above): vectors of rows per strip, and the length
// of a block of the reduced dim. A strip of 32 vectors is 2 KiB of f32 per
// buffer per step of j on AVX-512: long enough runs for the prefetchers,
// and the accumulators (2 x 2 KiB per REDUCE phase) stay in L1.
#define STRIP_VECTORS 32
#define J_BLOCK 256
// Float sums: runs of COLUMN_RUN blocks summed in |total|, the runs summed
// pairwise through COLUMN_LEVELS levels (2^COLUMN_LEVELS runs: 2^22 rows),
// 2 KiB of stack per level on AVX-512. Pushing a run every 16 blocks keeps
// the carries off the blocks' path.
#define COLUMN_RUN_LOG2 4
#define COLUMN_RUN (1 << COLUMN_RUN_LOG2)
#define COLUMN_LEVELS 10
// Row schedule: elements per block of a float sum (a multiple of every
// chains * lanes); 4096 is 64 to 256 terms per accumulator lane.
#define SUM_BLOCK 4096

static LLVMValueRef i64c(tj_emit_t* em, int64_t v) {
  return LLVMConstInt(em->t_i64, (unsigned long long)v, 1);
}

static bool is_bool(tj_dtype_t d) { return d == TJ_DTYPE_BOOL; }

static LLVMValueRef identity(tj_emit_t* em, tj_kir_reduce_t op, tj_dtype_t dt,
                             LLVMTypeRef type) {
  bool fl = tj_dtype_is_float(dt);
  int64_t imax = tj_dtype_int_highest(dt);
  int64_t imin = tj_dtype_int_lowest(dt);
  switch (op) {
    case TJ_KIR_REDUCE_SUM:
      return fl ? tj_emit_fconst(type, 0.0) : tj_emit_iconst(type, 0);
    case TJ_KIR_REDUCE_PROD:
      return fl ? tj_emit_fconst(type, 1.0) : tj_emit_iconst(type, 1);
    case TJ_KIR_REDUCE_MAX:
    case TJ_KIR_REDUCE_ARGMAX:
      return fl ? tj_emit_fconst(type, -__builtin_inf())
                : tj_emit_iconst(type, imin);
    case TJ_KIR_REDUCE_MIN:
      return fl ? tj_emit_fconst(type, __builtin_inf())
                : tj_emit_iconst(type, is_bool(dt) ? -1 : imax);
  }
  return tj_emit_iconst(type, 0);
}

static LLVMValueRef combine(tj_emit_t* em, tj_kir_reduce_t op, tj_dtype_t dt,
                            LLVMValueRef a, LLVMValueRef b) {
  LLVMBuilderRef bl = em->b;
  bool fl = tj_dtype_is_float(dt);
  switch (op) {
    case TJ_KIR_REDUCE_SUM:
      return fl ? LLVMBuildFAdd(bl, a, b, "") : LLVMBuildAdd(bl, a, b, "");
    case TJ_KIR_REDUCE_PROD:
      return fl ? LLVMBuildFMul(bl, a, b, "") : LLVMBuildMul(bl, a, b, "");
    case TJ_KIR_REDUCE_MAX:
    case TJ_KIR_REDUCE_MIN: {
      bool max = op == TJ_KIR_REDUCE_MAX;
      if (is_bool(dt)) {
        return max ? LLVMBuildOr(bl, a, b, "") : LLVMBuildAnd(bl, a, b, "");
      }
      if (!fl) {
        // u64 in its order; the other unsigned are held non-negative.
        LLVMIntPredicate p = dt == TJ_DTYPE_U64
                                 ? (max ? LLVMIntUGT : LLVMIntULT)
                                 : (max ? LLVMIntSGT : LLVMIntSLT);
        return tj_emit_select(em, LLVMBuildICmp(bl, p, a, b, ""), a, b);
      }
      return tj_emit_fminmax(em, max, a, b);
    }
    case TJ_KIR_REDUCE_ARGMAX:
      break;
  }
  return a;
}

// Whether candidate (bv, bi) beats (av, ai) in the argmax order; |b_valid|
// masks candidates that are not elements.
static LLVMValueRef argmax_take(tj_emit_t* em, tj_dtype_t dt, LLVMValueRef av,
                                LLVMValueRef ai, LLVMValueRef bv,
                                LLVMValueRef bi, LLVMValueRef b_valid) {
  LLVMBuilderRef bl = em->b;
  LLVMTypeRef it = LLVMTypeOf(ai);
  LLVMValueRef a_none =
      LLVMBuildICmp(bl, LLVMIntEQ, ai, tj_emit_iconst(it, ARGMAX_NONE), "");
  LLVMValueRef gt, eq;
  if (tj_dtype_is_float(dt)) {
    LLVMValueRef a_nan = LLVMBuildFCmp(bl, LLVMRealUNO, av, av, "");
    LLVMValueRef b_nan = LLVMBuildFCmp(bl, LLVMRealUNO, bv, bv, "");
    gt = LLVMBuildOr(bl, LLVMBuildFCmp(bl, LLVMRealOGT, bv, av, ""),
                     LLVMBuildAnd(bl, b_nan, LLVMBuildNot(bl, a_nan, ""), ""),
                     "");
    eq = LLVMBuildOr(bl, LLVMBuildFCmp(bl, LLVMRealOEQ, bv, av, ""),
                     LLVMBuildAnd(bl, a_nan, b_nan, ""), "");
  } else {
    gt = LLVMBuildICmp(
        bl, is_bool(dt) || dt == TJ_DTYPE_U64 ? LLVMIntUGT : LLVMIntSGT, bv, av,
        "");
    eq = LLVMBuildICmp(bl, LLVMIntEQ, bv, av, "");
  }
  LLVMValueRef earlier = LLVMBuildICmp(bl, LLVMIntSLT, bi, ai, "");
  LLVMValueRef better = LLVMBuildOr(bl, LLVMBuildOr(bl, a_none, gt, ""),
                                    LLVMBuildAnd(bl, eq, earlier, ""), "");
  return LLVMBuildAnd(bl, b_valid, better, "");
}

static LLVMValueRef argmax_valid(tj_emit_t* em, LLVMValueRef bi) {
  return LLVMBuildICmp(em->b, LLVMIntNE, bi,
                       tj_emit_iconst(LLVMTypeOf(bi), ARGMAX_NONE), "");
}

// Lanes [first, first + n) of |v| (a scalar when n == 1).
static LLVMValueRef lanes_of(tj_emit_t* em, LLVMValueRef v, int32_t first,
                             int32_t n) {
  if (n == 1) {
    return LLVMBuildExtractElement(
        em->b, v, LLVMConstInt(em->t_i32, (unsigned long long)first, 0), "");
  }
  LLVMValueRef idx[32];
  for (int32_t i = 0; i < n; ++i) {
    idx[i] = LLVMConstInt(em->t_i32, (unsigned long long)(first + i), 0);
  }
  return LLVMBuildShuffleVector(em->b, v, LLVMGetPoison(LLVMTypeOf(v)),
                                LLVMConstVector(idx, (unsigned)n), "");
}

typedef struct acc_t {
  LLVMValueRef value, index;  // allocas (index: ARGMAX only)
} acc_t;

static void accumulate(tj_emit_t* em, const tj_kir_phase_t* ph, tj_dtype_t dt,
                       const acc_t* acc, LLVMValueRef v, LLVMValueRef first,
                       LLVMValueRef mask) {
  int32_t w = em->target.lanes;
  LLVMTypeRef vt = LLVMTypeOf(v);
  LLVMValueRef av = LLVMBuildLoad2(em->b, vt, acc->value, "");
  if (ph->reduce == TJ_KIR_REDUCE_ARGMAX) {
    LLVMTypeRef it = tj_emit_vec(em, em->t_i64, w);
    LLVMValueRef ai = LLVMBuildLoad2(em->b, it, acc->index, "");
    LLVMValueRef bi = LLVMBuildAdd(em->b, tj_emit_splat(em, first, w),
                                   tj_emit_iota(em, em->t_i64, w), "");
    LLVMValueRef valid =
        mask ? mask : tj_emit_iconst(tj_emit_vec(em, em->t_i1, w), 1);
    LLVMValueRef take = argmax_take(em, dt, av, ai, v, bi, valid);
    LLVMBuildStore(em->b, tj_emit_select(em, take, v, av), acc->value);
    LLVMBuildStore(em->b, tj_emit_select(em, take, bi, ai), acc->index);
    return;
  }
  if (mask) v = tj_emit_select(em, mask, v, identity(em, ph->reduce, dt, vt));
  LLVMBuildStore(em->b, combine(em, ph->reduce, dt, av, v), acc->value);
}

//===--- pairwise sums of blocks ---===//
//
// A float sum in one accumulator per lane stops growing once the lane's
// partial sum is 2^24 times its terms (f32: 2^30 ones sum to 2^29 over 32
// lanes). So a long sum is cut into blocks, each summed into fresh
// accumulators, and the block sums are added pairwise: a binary counter of
// partial sums, level l holding the sum of 2^l blocks, as numpy's pairwise
// sum. The error then grows with the block length per lane plus log2 of
// the number of blocks, not with the length.

#define CASCADE_LEVELS 64

typedef struct cascade_t {
  LLVMTypeRef vt, array;
  LLVMValueRef stack;  // [CASCADE_LEVELS x vt]: level l, valid where bit l
  LLVMValueRef count;  // blocks pushed (i64)
  LLVMValueRef carry;  // vt scratch
} cascade_t;

static void cascade_init(tj_emit_t* em, cascade_t* c, LLVMTypeRef vt) {
  c->vt = vt;
  c->array = LLVMArrayType(vt, CASCADE_LEVELS);
  c->stack = tj_emit_alloca(em, c->array, "sum_levels");
  c->count = tj_emit_alloca(em, em->t_i64, "sum_blocks");
  c->carry = tj_emit_alloca(em, vt, "sum_carry");
  LLVMBuildStore(em->b, i64c(em, 0), c->count);
}

static LLVMValueRef cascade_slot(tj_emit_t* em, const cascade_t* c,
                                 LLVMValueRef level) {
  LLVMValueRef idx[2] = {i64c(em, 0), level};
  return LLVMBuildGEP2(em->b, c->array, c->stack, idx, 2, "");
}

static LLVMValueRef bit_count(tj_emit_t* em, const char* name, LLVMValueRef x) {
  LLVMValueRef args[2] = {x, LLVMConstInt(em->t_i1, 0, 0)};
  LLVMTypeRef t = em->t_i64;
  return tj_emit_intrinsic(em, name, &t, 1, args, 2);
}

// Pushes block sum |v|: the levels below the counter's lowest clear bit
// are folded into it (each the sum of as many blocks as it has), and it
// takes that level.
static void cascade_push(tj_emit_t* em, const cascade_t* c, LLVMValueRef v) {
  LLVMValueRef n = LLVMBuildLoad2(em->b, em->t_i64, c->count, "");
  LLVMValueRef level = bit_count(em, "llvm.cttz", LLVMBuildNot(em->b, n, ""));
  LLVMBuildStore(em->b, v, c->carry);
  tj_emit_loop_t l;
  LLVMValueRef i =
      tj_emit_loop_begin(em, &l, i64c(em, 0), level, i64c(em, 1), "sum_carry");
  LLVMValueRef below = LLVMBuildLoad2(em->b, c->vt, cascade_slot(em, c, i), "");
  LLVMValueRef cur = LLVMBuildLoad2(em->b, c->vt, c->carry, "");
  LLVMBuildStore(em->b, LLVMBuildFAdd(em->b, below, cur, ""), c->carry);
  tj_emit_loop_end(em, &l);
  LLVMBuildStore(em->b, LLVMBuildLoad2(em->b, c->vt, c->carry, ""),
                 cascade_slot(em, c, level));
  LLVMBuildStore(em->b, LLVMBuildAdd(em->b, n, i64c(em, 1), ""), c->count);
}

// The sum of every level held, smallest first, plus |v|.
static LLVMValueRef cascade_total(tj_emit_t* em, const cascade_t* c,
                                  LLVMValueRef v) {
  LLVMValueRef n = LLVMBuildLoad2(em->b, em->t_i64, c->count, "");
  LLVMValueRef top =
      LLVMBuildSub(em->b, i64c(em, 64), bit_count(em, "llvm.ctlz", n), "");
  LLVMBuildStore(em->b, v, c->carry);
  tj_emit_loop_t l;
  LLVMValueRef i =
      tj_emit_loop_begin(em, &l, i64c(em, 0), top, i64c(em, 1), "sum_fold");
  LLVMValueRef bit =
      LLVMBuildAnd(em->b, LLVMBuildLShr(em->b, n, i, ""), i64c(em, 1), "");
  tj_emit_if_t held;
  tj_emit_if_begin(em, &held,
                   LLVMBuildICmp(em->b, LLVMIntNE, bit, i64c(em, 0), ""),
                   "sum_held");
  LLVMValueRef level = LLVMBuildLoad2(em->b, c->vt, cascade_slot(em, c, i), "");
  LLVMValueRef cur = LLVMBuildLoad2(em->b, c->vt, c->carry, "");
  LLVMBuildStore(em->b, LLVMBuildFAdd(em->b, cur, level, ""), c->carry);
  tj_emit_if_end(em, &held);
  tj_emit_loop_end(em, &l);
  return LLVMBuildLoad2(em->b, c->vt, c->carry, "");
}

// Whether a phase is expensive per element (TRANSCENDENTAL ops): fewer
// accumulator chains then, since the body already has ILP and copies of
// it cost compile time.
static bool heavy_body(const tj_kir_phase_t* ph) {
  for (uint32_t i = 0; i < ph->num_insts; ++i) {
    const tj_kir_inst_t* in = &ph->insts[i];
    if (in->kind == TJ_KIR_OP && tj_op_has(in->op, TJ_OPF_TRANSCENDENTAL)) {
      return true;
    }
  }
  return false;
}

static tj_status_t emit_reduce_phase(tj_emit_t* em, const tj_kir_phase_t* ph,
                                     const tj_emit_point_t* row,
                                     LLVMValueRef len, LLVMValueRef* out) {
  int32_t w = em->target.lanes;
  tj_dtype_t dt = ph->insts[ph->num_insts - 1].dtype;  // the yield's
  LLVMTypeRef vt = tj_emit_vec(em, tj_emit_compute_type(em, dt), w);
  LLVMTypeRef it = tj_emit_vec(em, em->t_i64, w);
  bool argmax = ph->reduce == TJ_KIR_REDUCE_ARGMAX;
  int32_t chains = argmax ? 1 : heavy_body(ph) ? 2 : 4;
  acc_t acc[4];
  for (int32_t u = 0; u < chains; ++u) {
    acc[u].value = tj_emit_alloca(em, vt, "acc");
    LLVMBuildStore(em->b, identity(em, ph->reduce, dt, vt), acc[u].value);
    acc[u].index = NULL;
    if (argmax) {
      acc[u].index = tj_emit_alloca(em, it, "acc_index");
      LLVMBuildStore(em->b, tj_emit_iconst(it, ARGMAX_NONE), acc[u].index);
    }
  }
  LLVMValueRef zero = i64c(em, 0);
  // Main loop: |chains| vectors per iteration; for float sums, in blocks of
  // SUM_BLOCK elements added pairwise (see cascade_t).
  int64_t step = (int64_t)chains * w;
  LLVMValueRef main_end = LLVMBuildAnd(em->b, len, i64c(em, ~(step - 1)), "");
  bool pairwise = ph->reduce == TJ_KIR_REDUCE_SUM && tj_dtype_is_float(dt);
  cascade_t cascade;
  tj_emit_loop_t blocks, loop;
  LLVMValueRef start = zero, end = main_end;
  if (pairwise) {
    cascade_init(em, &cascade, vt);
    start = tj_emit_loop_begin(em, &blocks, zero, main_end, i64c(em, SUM_BLOCK),
                               "red_block");
    end = tj_emit_min_i64(em, main_end,
                          LLVMBuildAdd(em->b, start, i64c(em, SUM_BLOCK), ""));
    for (int32_t u = 0; u < chains; ++u) {
      LLVMBuildStore(em->b, identity(em, ph->reduce, dt, vt), acc[u].value);
    }
  }
  LLVMValueRef i =
      tj_emit_loop_begin(em, &loop, start, end, i64c(em, step), "red");
  for (int32_t u = 0; u < chains; ++u) {
    LLVMValueRef off = LLVMBuildAdd(em->b, i, i64c(em, (int64_t)u * w), "");
    tj_emit_point_t p;
    tj_emit_line_point(em, row, off, zero, &p);
    p.mask = NULL;
    LLVMValueRef v;
    TJ_RETURN_IF_ERROR(tj_emit_body(em, ph, &p, &v));
    accumulate(em, ph, dt, &acc[u], v, off, NULL);
  }
  tj_emit_loop_end(em, &loop);
  if (pairwise) {
    LLVMValueRef v = LLVMBuildLoad2(em->b, vt, acc[0].value, "");
    for (int32_t u = 1; u < chains; ++u) {
      v = combine(em, ph->reduce, dt, v,
                  LLVMBuildLoad2(em->b, vt, acc[u].value, ""));
    }
    cascade_push(em, &cascade, v);
    tj_emit_loop_end(em, &blocks);
    // The rest (under |step| elements) in fresh accumulators.
    for (int32_t u = 0; u < chains; ++u) {
      LLVMBuildStore(em->b, identity(em, ph->reduce, dt, vt), acc[u].value);
    }
  }
  // Remaining full vectors.
  LLVMValueRef full = LLVMBuildAnd(em->b, len, i64c(em, ~(int64_t)(w - 1)), "");
  if (chains > 1) {
    i = tj_emit_loop_begin(em, &loop, main_end, full, i64c(em, w), "red1");
    tj_emit_point_t p;
    tj_emit_line_point(em, row, i, zero, &p);
    p.mask = NULL;
    LLVMValueRef v;
    TJ_RETURN_IF_ERROR(tj_emit_body(em, ph, &p, &v));
    accumulate(em, ph, dt, &acc[0], v, i, NULL);
    tj_emit_loop_end(em, &loop);
  }
  // Masked tail.
  tj_emit_if_t tail;
  tj_emit_if_begin(em, &tail, LLVMBuildICmp(em->b, LLVMIntSLT, full, len, ""),
                   "red_tail");
  {
    tj_emit_point_t p;
    tj_emit_line_point(em, row, full, zero, &p);
    p.mask = tj_emit_lane_mask(em, LLVMBuildSub(em->b, len, full, ""), w);
    LLVMValueRef v;
    TJ_RETURN_IF_ERROR(tj_emit_body(em, ph, &p, &v));
    accumulate(em, ph, dt, &acc[0], v, full, p.mask);
  }
  tj_emit_if_end(em, &tail);
  // Merge the chains, then the lanes.
  LLVMValueRef v = LLVMBuildLoad2(em->b, vt, acc[0].value, "");
  LLVMValueRef vi = argmax ? LLVMBuildLoad2(em->b, it, acc[0].index, "") : NULL;
  for (int32_t u = 1; u < chains; ++u) {
    v = combine(em, ph->reduce, dt, v,
                LLVMBuildLoad2(em->b, vt, acc[u].value, ""));
  }
  if (pairwise) v = cascade_total(em, &cascade, v);
  for (int32_t n = w; n > 1; n /= 2) {
    int32_t half = n / 2;
    LLVMValueRef lo = lanes_of(em, v, 0, half);
    LLVMValueRef hi = lanes_of(em, v, half, half);
    if (argmax) {
      LLVMValueRef lo_i = lanes_of(em, vi, 0, half);
      LLVMValueRef hi_i = lanes_of(em, vi, half, half);
      LLVMValueRef take =
          argmax_take(em, dt, lo, lo_i, hi, hi_i, argmax_valid(em, hi_i));
      v = tj_emit_select(em, take, hi, lo);
      vi = tj_emit_select(em, take, hi_i, lo_i);
    } else {
      v = combine(em, ph->reduce, dt, lo, hi);
    }
  }
  if (w == 1) {
    v = lanes_of(em, v, 0, 1);
    if (argmax) vi = lanes_of(em, vi, 0, 1);
  }
  if (argmax) {
    // An empty row has no max: index 0.
    v = tj_emit_select(em, argmax_valid(em, vi), vi, i64c(em, 0));
  }
  *out = v;
  return NULL;
}

// A SCAN phase (ops3, issue 15): the body once per element, in order along
// the row (backwards when reverse), scalar, with ^p the running combine of
// the values yielded so far. The row's elements are one dependent chain;
// the rows of a call are independent (work units run in parallel).
static tj_status_t emit_scan_phase(tj_emit_t* em, uint32_t p,
                                   const tj_emit_point_t* row, LLVMValueRef len,
                                   LLVMValueRef* rows) {
  const tj_kir_phase_t* ph = &em->k->phases[p];
  tj_dtype_t dt = ph->result_dtype;
  LLVMTypeRef et = tj_emit_compute_type(em, dt);
  LLVMValueRef acc = tj_emit_alloca(em, et, "scan");
  LLVMBuildStore(em->b, identity(em, ph->reduce, dt, et), acc);
  tj_emit_loop_t loop;
  LLVMValueRef i =
      tj_emit_loop_begin(em, &loop, i64c(em, 0), len, i64c(em, 1), "scan");
  LLVMValueRef j =
      ph->reverse ? LLVMBuildSub(
                        em->b, LLVMBuildSub(em->b, len, i64c(em, 1), ""), i, "")
                  : i;
  tj_emit_point_t pt;
  tj_emit_line_point(em, row, j, i64c(em, 0), &pt);
  pt.lanes = 1;
  pt.mask = NULL;
  LLVMValueRef prefix = LLVMBuildLoad2(em->b, et, acc, "prefix");
  rows[p] = prefix;
  LLVMValueRef y;
  TJ_RETURN_IF_ERROR(tj_emit_body(em, ph, &pt, &y));
  LLVMBuildStore(em->b, combine(em, ph->reduce, dt, prefix, y), acc);
  tj_emit_loop_end(em, &loop);
  rows[p] = NULL;  // no later phase reads a scan
  return NULL;
}

//===--- the column schedule ---===//

static bool has_row_ref(const tj_kir_phase_t* ph) {
  for (uint32_t i = 0; i < ph->num_insts; ++i) {
    if (ph->insts[i].kind == TJ_KIR_ROW) return true;
  }
  return false;
}

// Whether |k| takes the column schedule (see the top of the file): some
// buffer is neither contiguous nor broadcast along the reduced dim, every
// buffer is one of the two along the dim before it, and the phases allow
// one walk (no row results read before the ROW phases; no ARGMAX; no bool
// accumulators, which have no vector memory form here).
static bool use_columns(const tj_emit_t* em) {
  const tj_kir_t* k = em->k;
  if (k->rank < 2 || em->target.lanes < 2) return false;
  int32_t vd = k->rank - 1, cd = k->rank - 2;
  bool strided = false;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    const tj_kir_ival_t* st = k->buffers[b].strides;
    if (!tj_kir_ival_is_const(st[cd], 1) && !tj_kir_ival_is_const(st[cd], 0)) {
      return false;
    }
    if (!tj_kir_ival_is_const(st[vd], 1) && !tj_kir_ival_is_const(st[vd], 0)) {
      strided = true;
    }
  }
  if (!strided) return false;
  bool mapped = false;
  for (uint32_t p = 0; p < k->num_phases; ++p) {
    const tj_kir_phase_t* ph = &k->phases[p];
    if (ph->kind == TJ_KIR_PHASE_ROW) continue;
    if (ph->kind == TJ_KIR_PHASE_SCAN) return false;
    // After a MAP's stores nothing else may run in the walk: it would read
    // an element (through an in-place alias) that the row schedule reads
    // only after the whole row is stored.
    if (has_row_ref(ph) || mapped) return false;
    mapped = ph->kind == TJ_KIR_PHASE_MAP;
    if (ph->kind == TJ_KIR_PHASE_REDUCE &&
        (ph->reduce == TJ_KIR_REDUCE_ARGMAX ||
         is_bool(ph->insts[ph->num_insts - 1].dtype))) {
      return false;
    }
  }
  return true;
}

// |point| moved by |count| elements along dim |d| (index and pointers).
static void move_along(tj_emit_t* em, const tj_emit_point_t* point, int32_t d,
                       LLVMValueRef count, tj_emit_point_t* out) {
  const tj_kir_t* k = em->k;
  *out = *point;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    if (tj_kir_ival_is_const(k->buffers[b].strides[d], 0)) continue;
    out->ptr[b] = tj_emit_advance(
        em, b, point->ptr[b],
        LLVMBuildMul(em->b, count, tj_emit_stride(em, b, d), ""));
  }
  out->index[d] = LLVMBuildAdd(em->b, point->index[d], count, "");
}

// Per REDUCE phase: its accumulators, arrays of STRIP_VECTORS vectors.
typedef struct column_acc_t {
  LLVMTypeRef vt, array;
  LLVMValueRef block, total;
  // Float sums: COLUMN_LEVELS + 1 arrays: level l < COLUMN_LEVELS is the
  // sum of 2^l runs of COLUMN_RUN blocks where bit l of the strip's run
  // count is set (see cascade_t); the last one sums what passes the top.
  LLVMTypeRef levels_type;
  LLVMValueRef levels, carry;
  tj_dtype_t dtype;
} column_acc_t;

static LLVMValueRef acc_slot(tj_emit_t* em, const column_acc_t* a,
                             LLVMValueRef array, LLVMValueRef v) {
  LLVMValueRef idx[2] = {i64c(em, 0), v};
  return LLVMBuildGEP2(em->b, a->array, array, idx, 2, "");
}

// Vector |v| of level |l| of a float sum's levels.
static LLVMValueRef level_slot(tj_emit_t* em, const column_acc_t* a,
                               LLVMValueRef l, LLVMValueRef v) {
  LLVMValueRef idx[3] = {i64c(em, 0), l, v};
  return LLVMBuildGEP2(em->b, a->levels_type, a->levels, idx, 3, "");
}

// array[v] = identity for v in [0, nvec).
static void acc_fill(tj_emit_t* em, const tj_kir_phase_t* ph,
                     const column_acc_t* a, LLVMValueRef array,
                     LLVMValueRef nvec) {
  tj_emit_loop_t l;
  LLVMValueRef v =
      tj_emit_loop_begin(em, &l, i64c(em, 0), nvec, i64c(em, 1), "col_init");
  LLVMBuildStore(em->b, identity(em, ph->reduce, a->dtype, a->vt),
                 acc_slot(em, a, array, v));
  tj_emit_loop_end(em, &l);
}

// The REDUCE and MAP phases at |point| (vectors of rows |v|).
static tj_status_t column_step(tj_emit_t* em, const column_acc_t* accs,
                               tj_emit_point_t* point, LLVMValueRef v) {
  const tj_kir_t* k = em->k;
  tj_emit_load_cache_t cache;
  memset(&cache, 0, sizeof(cache));
  cache.slot = 0;
  cache.insert = true;
  em->load_cache = &cache;
  tj_status_t status = NULL;
  for (uint32_t p = 0; !status && p < k->num_phases; ++p) {
    const tj_kir_phase_t* ph = &k->phases[p];
    if (ph->kind == TJ_KIR_PHASE_MAP) {
      status = tj_emit_body(em, ph, point, NULL);
    } else if (ph->kind == TJ_KIR_PHASE_REDUCE) {
      LLVMValueRef x;
      status = tj_emit_body(em, ph, point, &x);
      if (!status) {
        acc_t acc = {acc_slot(em, &accs[p], accs[p].block, v), NULL};
        accumulate(em, ph, accs[p].dtype, &acc, x, NULL, point->mask);
      }
    }
  }
  em->load_cache = NULL;
  return status;
}

static tj_status_t emit_columns(tj_emit_t* em) {
  const tj_kir_t* k = em->k;
  const int32_t w = em->target.lanes, vd = k->rank - 1, cd = k->rank - 2;
  const int64_t strip = (int64_t)STRIP_VECTORS * w;
  LLVMValueRef len = em->dim[vd];
  column_acc_t accs[64];
  LLVMValueRef rows[64];
  memset(accs, 0, sizeof(accs));
  bool pairwise = false;  // some float sum
  for (uint32_t p = 0; p < k->num_phases; ++p) {
    const tj_kir_phase_t* ph = &k->phases[p];
    if (ph->kind != TJ_KIR_PHASE_REDUCE) continue;
    column_acc_t* a = &accs[p];
    a->dtype = ph->insts[ph->num_insts - 1].dtype;
    a->vt = tj_emit_vec(em, tj_emit_compute_type(em, a->dtype), w);
    a->array = LLVMArrayType(a->vt, STRIP_VECTORS);
    a->block = tj_emit_alloca(em, a->array, "col_block");
    a->total = tj_emit_alloca(em, a->array, "col_total");
    LLVMSetAlignment(a->block, 64);
    LLVMSetAlignment(a->total, 64);
    if (ph->reduce == TJ_KIR_REDUCE_SUM && tj_dtype_is_float(a->dtype)) {
      a->levels_type = LLVMArrayType(a->array, COLUMN_LEVELS + 1);
      a->levels = tj_emit_alloca(em, a->levels_type, "col_levels");
      a->carry = tj_emit_alloca(em, a->vt, "col_carry");
      LLVMSetAlignment(a->levels, 64);
      pairwise = true;
    }
  }
  LLVMValueRef nblocks = tj_emit_alloca(em, em->t_i64, "col_blocks");
  // for (r = begin; r < end; r += n): one strip of n rows.
  LLVMValueRef rvar = tj_emit_alloca(em, em->t_i64, "col_row");
  LLVMBuildStore(em->b, em->arg_begin, rvar);
  LLVMBasicBlockRef cond =
      LLVMAppendBasicBlockInContext(em->ctx, em->fn, "strip");
  LLVMBasicBlockRef body =
      LLVMAppendBasicBlockInContext(em->ctx, em->fn, "strip_body");
  LLVMBasicBlockRef done =
      LLVMAppendBasicBlockInContext(em->ctx, em->fn, "strip_done");
  LLVMBuildBr(em->b, cond);
  LLVMPositionBuilderAtEnd(em->b, cond);
  LLVMValueRef r = LLVMBuildLoad2(em->b, em->t_i64, rvar, "");
  LLVMBuildCondBr(em->b, LLVMBuildICmp(em->b, LLVMIntSLT, r, em->arg_end, ""),
                  body, done);
  LLVMPositionBuilderAtEnd(em->b, body);
  tj_emit_point_t row;
  memset(&row, 0, sizeof(row));
  row.lanes = w;
  row.vdim = cd;
  row.rows = rows;
  tj_emit_decompose(em, r, vd, &row);
  row.index[vd] = i64c(em, 0);
  // The strip: rows up to the end of the call, of this line along cd, and
  // of the accumulators.
  LLVMValueRef n = tj_emit_min_i64(
      em, LLVMBuildSub(em->b, em->arg_end, r, ""),
      tj_emit_min_i64(em, LLVMBuildSub(em->b, em->dim[cd], row.index[cd], ""),
                      i64c(em, strip)));
  LLVMValueRef nfull = LLVMBuildSDiv(em->b, n, i64c(em, w), "nfull");
  LLVMValueRef rest =
      LLVMBuildSub(em->b, n, LLVMBuildMul(em->b, nfull, i64c(em, w), ""), "");
  LLVMValueRef has_tail =
      LLVMBuildICmp(em->b, LLVMIntSGT, rest, i64c(em, 0), "");
  LLVMValueRef nvec = LLVMBuildAdd(
      em->b, nfull, LLVMBuildZExt(em->b, has_tail, em->t_i64, ""), "");
  for (uint32_t p = 0; p < k->num_phases; ++p) {
    if (accs[p].vt) acc_fill(em, &k->phases[p], &accs[p], accs[p].total, nvec);
    if (accs[p].levels) {
      // The top level, always held.
      LLVMValueRef top_idx[2] = {i64c(em, 0), i64c(em, COLUMN_LEVELS)};
      acc_fill(em, &k->phases[p], &accs[p],
               LLVMBuildGEP2(em->b, accs[p].levels_type, accs[p].levels,
                             top_idx, 2, ""),
               nvec);
    }
  }
  LLVMBuildStore(em->b, i64c(em, 0), nblocks);
  tj_emit_loop_t jbl;
  LLVMValueRef j0 = tj_emit_loop_begin(em, &jbl, i64c(em, 0), len,
                                       i64c(em, J_BLOCK), "col_jblock");
  for (uint32_t p = 0; p < k->num_phases; ++p) {
    if (accs[p].vt) acc_fill(em, &k->phases[p], &accs[p], accs[p].block, nvec);
  }
  LLVMValueRef j_end =
      tj_emit_min_i64(em, len, LLVMBuildAdd(em->b, j0, i64c(em, J_BLOCK), ""));
  tj_emit_loop_t jl;
  LLVMValueRef j = tj_emit_loop_begin(em, &jl, j0, j_end, i64c(em, 1), "col_j");
  tj_emit_point_t at_j;
  move_along(em, &row, vd, j, &at_j);
  tj_emit_loop_t vl;
  LLVMValueRef v =
      tj_emit_loop_begin(em, &vl, i64c(em, 0), nfull, i64c(em, 1), "col_v");
  tj_emit_point_t pt;
  move_along(em, &at_j, cd, LLVMBuildMul(em->b, v, i64c(em, w), ""), &pt);
  pt.mask = NULL;
  TJ_RETURN_IF_ERROR(column_step(em, accs, &pt, v));
  tj_emit_loop_end(em, &vl);
  tj_emit_if_t tail;
  tj_emit_if_begin(em, &tail, has_tail, "col_tail");
  move_along(em, &at_j, cd, LLVMBuildMul(em->b, nfull, i64c(em, w), ""), &pt);
  pt.mask = tj_emit_lane_mask(em, rest, w);
  TJ_RETURN_IF_ERROR(column_step(em, accs, &pt, nfull));
  tj_emit_if_end(em, &tail);
  tj_emit_loop_end(em, &jl);
  // total = combine(total, block), vector by vector.
  tj_emit_loop_t ml;
  v = tj_emit_loop_begin(em, &ml, i64c(em, 0), nvec, i64c(em, 1), "col_merge");
  for (uint32_t p = 0; p < k->num_phases; ++p) {
    const column_acc_t* a = &accs[p];
    if (!a->vt) continue;
    LLVMValueRef ts = acc_slot(em, a, a->total, v);
    LLVMValueRef t = LLVMBuildLoad2(em->b, a->vt, ts, "");
    LLVMValueRef blk =
        LLVMBuildLoad2(em->b, a->vt, acc_slot(em, a, a->block, v), "");
    LLVMBuildStore(em->b, combine(em, k->phases[p].reduce, a->dtype, t, blk),
                   ts);
  }
  tj_emit_loop_end(em, &ml);
  if (pairwise) {
    // Every COLUMN_RUN blocks a float sum's total goes to the level of the
    // push counter's lowest clear bit, carrying the levels below it (past
    // the last level, into the top one), and starts again.
    LLVMValueRef nb = LLVMBuildAdd(
        em->b, LLVMBuildLoad2(em->b, em->t_i64, nblocks, ""), i64c(em, 1), "");
    LLVMBuildStore(em->b, nb, nblocks);
    tj_emit_if_t push;
    tj_emit_if_begin(
        em, &push,
        LLVMBuildICmp(em->b, LLVMIntEQ,
                      LLVMBuildAnd(em->b, nb, i64c(em, COLUMN_RUN - 1), ""),
                      i64c(em, 0), ""),
        "col_push");
    LLVMValueRef pushed = LLVMBuildSub(
        em->b, LLVMBuildLShr(em->b, nb, i64c(em, COLUMN_RUN_LOG2), ""),
        i64c(em, 1), "");
    LLVMValueRef level = tj_emit_min_i64(
        em, bit_count(em, "llvm.cttz", LLVMBuildNot(em->b, pushed, "")),
        i64c(em, COLUMN_LEVELS));
    LLVMValueRef to_top =
        LLVMBuildICmp(em->b, LLVMIntEQ, level, i64c(em, COLUMN_LEVELS), "");
    v = tj_emit_loop_begin(em, &ml, i64c(em, 0), nvec, i64c(em, 1), "col_push");
    for (uint32_t p = 0; p < k->num_phases; ++p) {
      const column_acc_t* a = &accs[p];
      if (!a->levels) continue;
      LLVMValueRef ts = acc_slot(em, a, a->total, v);
      LLVMBuildStore(em->b, LLVMBuildLoad2(em->b, a->vt, ts, ""), a->carry);
      tj_emit_loop_t cl;
      LLVMValueRef l = tj_emit_loop_begin(em, &cl, i64c(em, 0), level,
                                          i64c(em, 1), "col_carry");
      LLVMValueRef below =
          LLVMBuildLoad2(em->b, a->vt, level_slot(em, a, l, v), "");
      LLVMBuildStore(
          em->b,
          LLVMBuildFAdd(em->b, below,
                        LLVMBuildLoad2(em->b, a->vt, a->carry, ""), ""),
          a->carry);
      tj_emit_loop_end(em, &cl);
      LLVMValueRef c = LLVMBuildLoad2(em->b, a->vt, a->carry, "");
      LLVMValueRef dst = level_slot(em, a, level, v);
      LLVMValueRef top = LLVMBuildLoad2(em->b, a->vt, dst, "");
      LLVMBuildStore(
          em->b,
          tj_emit_select(em, to_top, LLVMBuildFAdd(em->b, top, c, ""), c), dst);
      LLVMBuildStore(em->b, identity(em, TJ_KIR_REDUCE_SUM, a->dtype, a->vt),
                     ts);
    }
    tj_emit_loop_end(em, &ml);
    tj_emit_if_end(em, &push);
  }
  tj_emit_loop_end(em, &jbl);
  if (pairwise) {
    // total = the rest + the levels held, smallest first, + the top.
    LLVMValueRef held =
        LLVMBuildLShr(em->b, LLVMBuildLoad2(em->b, em->t_i64, nblocks, ""),
                      i64c(em, COLUMN_RUN_LOG2), "");
    v = tj_emit_loop_begin(em, &ml, i64c(em, 0), nvec, i64c(em, 1), "col_fold");
    for (uint32_t p = 0; p < k->num_phases; ++p) {
      const column_acc_t* a = &accs[p];
      if (!a->levels) continue;
      tj_emit_loop_t fl;
      LLVMValueRef l =
          tj_emit_loop_begin(em, &fl, i64c(em, 0), i64c(em, COLUMN_LEVELS + 1),
                             i64c(em, 1), "col_fold_level");
      LLVMValueRef bit = LLVMBuildAnd(em->b, LLVMBuildLShr(em->b, held, l, ""),
                                      i64c(em, 1), "");
      LLVMValueRef is_held = LLVMBuildOr(
          em->b, LLVMBuildICmp(em->b, LLVMIntNE, bit, i64c(em, 0), ""),
          LLVMBuildICmp(em->b, LLVMIntEQ, l, i64c(em, COLUMN_LEVELS), ""), "");
      tj_emit_if_t if_held;
      tj_emit_if_begin(em, &if_held, is_held, "col_held");
      LLVMValueRef ts = acc_slot(em, a, a->total, v);
      LLVMBuildStore(
          em->b,
          LLVMBuildFAdd(
              em->b, LLVMBuildLoad2(em->b, a->vt, ts, ""),
              LLVMBuildLoad2(em->b, a->vt, level_slot(em, a, l, v), ""), ""),
          ts);
      tj_emit_if_end(em, &if_held);
      tj_emit_loop_end(em, &fl);
    }
    tj_emit_loop_end(em, &ml);
  }
  // The ROW phases, a row at a time, with that row's totals (element i of
  // a total array: its vectors are packed).
  tj_emit_loop_t il;
  LLVMValueRef i =
      tj_emit_loop_begin(em, &il, i64c(em, 0), n, i64c(em, 1), "col_rows");
  tj_emit_point_t once;
  move_along(em, &row, cd, i, &once);
  once.lanes = 1;
  once.mask = NULL;
  for (uint32_t p = 0; p < k->num_phases; ++p) {
    const column_acc_t* a = &accs[p];
    rows[p] = NULL;
    if (!a->vt) continue;
    LLVMTypeRef et = tj_emit_compute_type(em, a->dtype);
    rows[p] = LLVMBuildLoad2(em->b, et,
                             LLVMBuildGEP2(em->b, et, a->total, &i, 1, ""), "");
  }
  for (uint32_t p = 0; p < k->num_phases; ++p) {
    if (k->phases[p].kind != TJ_KIR_PHASE_ROW) continue;
    TJ_RETURN_IF_ERROR(tj_emit_body(em, &k->phases[p], &once, NULL));
  }
  tj_emit_loop_end(em, &il);
  LLVMBuildStore(em->b, LLVMBuildAdd(em->b, r, n, ""), rvar);
  LLVMBuildBr(em->b, cond);
  LLVMPositionBuilderAtEnd(em->b, done);
  return NULL;
}

tj_status_t tj_emit_row_reduce(tj_emit_t* em) {
  const tj_kir_t* k = em->k;
  if (k->num_phases <= 64 && use_columns(em)) return emit_columns(em);
  int32_t vd = k->rank - 1;
  LLVMValueRef len = em->dim[vd];
  LLVMValueRef rows[64];
  if (k->num_phases > 64) {
    return tj_unsupported("kernel @%s: more than 64 phases", k->name);
  }
  tj_emit_loop_t loop;
  LLVMValueRef r = tj_emit_loop_begin(em, &loop, em->arg_begin, em->arg_end,
                                      i64c(em, 1), "row");
  tj_emit_point_t row;
  memset(&row, 0, sizeof(row));
  row.lanes = em->target.lanes;
  row.vdim = vd;
  row.rows = rows;
  tj_emit_decompose(em, r, vd, &row);
  row.index[vd] = i64c(em, 0);
  for (uint32_t p = 0; p < k->num_phases; ++p) {
    const tj_kir_phase_t* ph = &k->phases[p];
    rows[p] = NULL;
    switch (ph->kind) {
      case TJ_KIR_PHASE_REDUCE:
        TJ_RETURN_IF_ERROR(emit_reduce_phase(em, ph, &row, len, &rows[p]));
        break;
      case TJ_KIR_PHASE_MAP:
        TJ_RETURN_IF_ERROR(tj_emit_line_map(em, ph, &row, i64c(em, 0), len));
        break;
      case TJ_KIR_PHASE_ROW: {
        tj_emit_point_t once = row;
        once.lanes = 1;
        once.mask = NULL;
        TJ_RETURN_IF_ERROR(tj_emit_body(em, ph, &once, NULL));
        break;
      }
      case TJ_KIR_PHASE_SCAN:
        TJ_RETURN_IF_ERROR(emit_scan_phase(em, p, &row, len, rows));
        break;
    }
  }
  tj_emit_loop_end(em, &loop);
  return NULL;
}
