// lib/passes/quant_decompose.c
//
// quantize and dequantize (lib/quant.h) as core pointwise and movement ops,
// so that they fuse with their producers and consumers into one native
// kernel on every target (decompose's arm, lib/passes/decompose.c):
//
//   scale, zero point   per tensor: a scalar; per axis: reshaped to
//                       [1.., D, ..1]; blocked: gathered along the axis at
//                       iota(D) / B
//   quantize (ints)     t = x / s; r = round(t) (+ zp); clamp to [lo, hi];
//                       cast (all in f32, f64 for f64 x)
//   quantize (float8)   cast(x / s (+ zp)) (saturating); without saturation
//                       where(|t| past the last rounding to max, NaN or
//                       +-inf bits, cast)
//   int4 pack           v & 15; even + 16 * odd elements (strided slices of
//                       the last axis, padded with 0 when odd); cast to u8
//   int4 unpack         gather(q, j / 2) >> 4 (j & 1) & 15 (signed: (n ^ 8)
//                       - 8), j = iota of the logical last dim
//   dequantize          (cast(q) - zp) * s in f32 (f64 for an f64 scale),
//                       cast to the scale's dtype
//
// Each step rounds as the reference (backends/reference, eval_quant) does,
// so kernels and the interpreter agree bit for bit.

#include <string.h>

#include "lib/dtype.h"
#include "lib/passes/quant.h"
#include "lib/quant.h"

typedef struct qd_t {
  tj_rewriter_t* rw;
} qd_t;

static tj_status_t append(qd_t* d, tj_op_t op, uint32_t n, const uint32_t* ops,
                          uint32_t* out) {
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = op;
  desc.num_operands = n;
  desc.operands = ops;
  return tj_rewriter_append(d->rw, &desc, out);
}

static tj_status_t op1(qd_t* d, tj_op_t op, uint32_t a, uint32_t* out) {
  return append(d, op, 1, &a, out);
}

static tj_status_t op2(qd_t* d, tj_op_t op, uint32_t a, uint32_t b,
                       uint32_t* out) {
  uint32_t ops[2] = {a, b};
  return append(d, op, 2, ops, out);
}

static const tj_node_t* nd(qd_t* d, uint32_t n) {
  return &d->rw->dst->nodes[n];
}

// a (op) a scalar c of a's dtype.
static tj_status_t op_c(qd_t* d, tj_op_t op, uint32_t a, double c,
                        uint32_t* out) {
  uint32_t k;
  TJ_RETURN_IF_ERROR(tj_rewriter_scalar(d->rw, nd(d, a)->dtype, c, &k));
  return op2(d, op, a, k, out);
}

static tj_status_t cast(qd_t* d, uint32_t a, tj_dtype_t dtype, uint32_t* out) {
  if (nd(d, a)->dtype == dtype) {
    *out = a;
    return NULL;
  }
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_CAST;
  desc.num_operands = 1;
  desc.operands = &a;
  desc.dtype = dtype;
  return tj_rewriter_append(d->rw, &desc, out);
}

static tj_status_t shaped(qd_t* d, tj_op_t op, uint32_t a, int32_t rank,
                          const int64_t* dims, uint32_t* out) {
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = op;  // reshape or broadcast_to
  desc.num_operands = 1;
  desc.operands = &a;
  desc.dtype = nd(d, a)->dtype;
  desc.rank = rank;
  desc.dims = dims;
  return tj_rewriter_append(d->rw, &desc, out);
}

// a sliced along |axis| to [start, stop) by |step|, whole elsewhere.
static tj_status_t slice_axis(qd_t* d, uint32_t a, int32_t axis, int64_t start,
                              int64_t stop, int64_t step, uint32_t* out) {
  const int32_t r = nd(d, a)->rank;
  int64_t ints[3 * TJ_MAX_RANK];
  for (int32_t i = 0; i < r; ++i) {
    ints[i] = i == axis ? start : 0;
    ints[r + i] = i == axis ? stop : INT64_MAX;
    ints[2 * r + i] = i == axis ? step : 1;
  }
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_SLICE;
  desc.num_operands = 1;
  desc.operands = &a;
  desc.attrs.ints = ints;
  desc.attrs.num_ints = (uint32_t)(3 * r);
  return tj_rewriter_append(d->rw, &desc, out);
}

// A rank-0 constant of |dtype| holding the raw byte |bits| (float8 NaN and
// infinity, which a converted scalar cannot give: conversions saturate).
static tj_status_t byte_constant(qd_t* d, tj_dtype_t dtype, uint8_t bits,
                                 uint32_t* out) {
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_CONSTANT;
  desc.dtype = dtype;
  desc.attrs.data = &bits;
  return tj_rewriter_append(d->rw, &desc, out);
}

// iota i32 [n].
static tj_status_t iota_1d(qd_t* d, int64_t n, uint32_t* out) {
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_IOTA;
  desc.dtype = TJ_DTYPE_I32;
  desc.rank = 1;
  desc.dims = &n;
  return tj_rewriter_append(d->rw, &desc, out);
}

static tj_status_t gather(qd_t* d, uint32_t a, uint32_t idx, int64_t axis,
                          uint32_t* out) {
  uint32_t ops[2] = {a, idx};
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_GATHER;
  desc.num_operands = 2;
  desc.operands = ops;
  desc.attrs.axis = axis;
  return tj_rewriter_append(d->rw, &desc, out);
}

// |p| (a scale or zero point of the new graph) made to broadcast against
// the logical shape |ldims| of rank |r|.
static tj_status_t expand(qd_t* d, const tj_quant_shape_t* qs, uint32_t p,
                          int32_t r, const int64_t* ldims, uint32_t* out) {
  if (qs->gran == TJ_QUANT_PER_TENSOR) {
    *out = p;
    return NULL;
  }
  const int32_t axis = (int32_t)qs->axis;
  int64_t dims[TJ_MAX_RANK + 1];
  if (qs->gran == TJ_QUANT_PER_AXIS) {
    for (int32_t i = 0; i < r; ++i) dims[i] = i == axis ? ldims[i] : 1;
    return shaped(d, TJ_OP_RESHAPE, p, r, dims, out);
  }
  // blocked: s[.., idx / block, ..] gathered along the axis (a native
  // indexed load that fuses; a reshape of a broadcast would not).
  uint32_t idx;
  TJ_RETURN_IF_ERROR(iota_1d(d, ldims[axis], &idx));
  TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_DIV, idx, (double)qs->block, &idx));
  return gather(d, p, idx, axis, out);
}

// i32 values of the logical shape packed two a byte along the last axis.
static tj_status_t pack_int4(qd_t* d, uint32_t v, uint32_t* out) {
  const int32_t r = nd(d, v)->rank;
  if (nd(d, v)->dims[r - 1] & 1) {
    int64_t pads[2 * TJ_MAX_RANK] = {0};
    pads[r + r - 1] = 1;
    tj_node_desc_t desc;
    memset(&desc, 0, sizeof(desc));
    desc.op = TJ_OP_PAD;
    desc.num_operands = 1;
    desc.operands = &v;
    desc.attrs.ints = pads;
    desc.attrs.num_ints = (uint32_t)(2 * r);
    TJ_RETURN_IF_ERROR(tj_rewriter_append(d->rw, &desc, &v));
  }
  uint32_t lo, hi, y;
  TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_BITWISE_AND, v, 15.0, &v));
  TJ_RETURN_IF_ERROR(slice_axis(d, v, r - 1, 0, INT64_MAX, 2, &lo));
  TJ_RETURN_IF_ERROR(slice_axis(d, v, r - 1, 1, INT64_MAX, 2, &hi));
  TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_MUL, hi, 16.0, &hi));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_ADD, lo, hi, &y));
  return cast(d, y, TJ_DTYPE_U8, out);
}

// Packed u8 [.., P] to i32 [.., L] (L = 2P, less one when odd): element j
// is byte j / 2 (gathered: a native indexed load that fuses) shifted right
// by 4 (j & 1), & 15; signed: (n ^ 8) - 8.
static tj_status_t unpack_int4(qd_t* d, uint32_t q, const tj_quant_shape_t* qs,
                               uint32_t* out) {
  const int32_t r = nd(d, q)->rank;
  const int64_t l = qs->dims[r - 1];
  uint32_t j, byte, shift, v;
  TJ_RETURN_IF_ERROR(iota_1d(d, l, &j));
  TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_SHIFT_RIGHT, j, 1.0, &byte));
  TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_BITWISE_AND, j, 1.0, &shift));
  TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_SHIFT_LEFT, shift, 2.0, &shift));
  TJ_RETURN_IF_ERROR(gather(d, q, byte, r - 1, &v));
  TJ_RETURN_IF_ERROR(cast(d, v, TJ_DTYPE_I32, &v));
  TJ_RETURN_IF_ERROR(op2(d, TJ_OP_SHIFT_RIGHT, v, shift, &v));
  TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_BITWISE_AND, v, 15.0, &v));
  if (qs->int4 == TJ_INT4_SIGNED) {
    TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_BITWISE_XOR, v, 8.0, &v));
    TJ_RETURN_IF_ERROR(op_c(d, TJ_OP_SUB, v, 8.0, &v));
  }
  *out = v;
  return NULL;
}

tj_status_t tj_decompose_quant(tj_rewriter_t* rw, const tj_node_t* node,
                               const uint32_t* ops, uint32_t* out) {
  qd_t d = {rw};
  const bool quantize = node->op == TJ_OP_QUANTIZE;
  // The attributes again, in the new graph's terms.
  tj_quant_shape_t qs;
  char msg[192];
  if (!tj_quant_check(quantize, nd(&d, ops[0]), nd(&d, ops[1]),
                      ops[2] == TJ_NODE_NONE ? NULL : nd(&d, ops[2]),
                      node->dtype, node->attrs.axis, node->attrs.ints,
                      node->attrs.num_ints, &qs, msg, sizeof(msg)))
    return tj_internal("decompose: %s: %s", tj_op_info(node->op)->name, msg);
  const int32_t r = qs.rank;
  int64_t ldims[TJ_MAX_RANK];
  memcpy(ldims, qs.dims, sizeof(int64_t) * (size_t)r);
  const tj_dtype_t cd = qs.fdtype == TJ_DTYPE_F64 ? TJ_DTYPE_F64 : TJ_DTYPE_F32;
  uint32_t s, z = TJ_NODE_NONE, y;
  TJ_RETURN_IF_ERROR(expand(&d, &qs, ops[1], r, ldims, &s));
  TJ_RETURN_IF_ERROR(cast(&d, s, cd, &s));
  if (ops[2] != TJ_NODE_NONE) {
    TJ_RETURN_IF_ERROR(expand(&d, &qs, ops[2], r, ldims, &z));
    TJ_RETURN_IF_ERROR(cast(&d, z, cd, &z));
  }
  if (!quantize) {
    uint32_t v = ops[0];
    if (qs.int4) TJ_RETURN_IF_ERROR(unpack_int4(&d, v, &qs, &v));
    TJ_RETURN_IF_ERROR(cast(&d, v, cd, &v));
    if (z != TJ_NODE_NONE) TJ_RETURN_IF_ERROR(op2(&d, TJ_OP_SUB, v, z, &v));
    TJ_RETURN_IF_ERROR(op2(&d, TJ_OP_MUL, v, s, &y));
    return cast(&d, y, qs.fdtype, out);
  }
  uint32_t t;
  TJ_RETURN_IF_ERROR(cast(&d, ops[0], cd, &t));
  TJ_RETURN_IF_ERROR(op2(&d, TJ_OP_DIV, t, s, &t));
  if (tj_dtype_is_f8(qs.qdtype)) {
    if (z != TJ_NODE_NONE) TJ_RETURN_IF_ERROR(op2(&d, TJ_OP_ADD, t, z, &t));
    TJ_RETURN_IF_ERROR(cast(&d, t, qs.qdtype, &y));
    if (!qs.saturate) {
      const bool e4m3 = qs.qdtype == TJ_DTYPE_F8E4M3;
      const uint8_t bits = e4m3 ? 0x7F : 0x7C;
      uint32_t a, ov, neg, pos_c, neg_c, sel;
      TJ_RETURN_IF_ERROR(op1(&d, TJ_OP_ABS, t, &a));
      TJ_RETURN_IF_ERROR(
          op_c(&d, e4m3 ? TJ_OP_GT : TJ_OP_GE, a, e4m3 ? 464.0 : 61440.0, &ov));
      TJ_RETURN_IF_ERROR(op_c(&d, TJ_OP_LT, t, 0.0, &neg));
      TJ_RETURN_IF_ERROR(byte_constant(&d, qs.qdtype, bits, &pos_c));
      TJ_RETURN_IF_ERROR(
          byte_constant(&d, qs.qdtype, (uint8_t)(0x80 | bits), &neg_c));
      uint32_t w1[3] = {neg, neg_c, pos_c};
      TJ_RETURN_IF_ERROR(append(&d, TJ_OP_WHERE, 3, w1, &sel));
      uint32_t w2[3] = {ov, sel, y};
      TJ_RETURN_IF_ERROR(append(&d, TJ_OP_WHERE, 3, w2, &y));
    }
    *out = y;
    return NULL;
  }
  TJ_RETURN_IF_ERROR(op1(&d, TJ_OP_ROUND, t, &t));
  if (z != TJ_NODE_NONE) TJ_RETURN_IF_ERROR(op2(&d, TJ_OP_ADD, t, z, &t));
  TJ_RETURN_IF_ERROR(op_c(&d, TJ_OP_MAXIMUM, t,
                          (double)tj_quant_qmin(qs.qdtype, qs.int4), &t));
  TJ_RETURN_IF_ERROR(op_c(&d, TJ_OP_MINIMUM, t,
                          (double)tj_quant_qmax(qs.qdtype, qs.int4), &t));
  if (!qs.int4) return cast(&d, t, qs.qdtype, out);
  TJ_RETURN_IF_ERROR(cast(&d, t, TJ_DTYPE_I32, &t));
  return pack_int4(&d, t, out);
}
