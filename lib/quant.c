// lib/quant.c: the type rule and element semantics of quantize and
// dequantize (lib/quant.h).

#include "lib/quant.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lib/dtype.h"

static bool bad(char* msg, size_t size, const char* format, ...)
    TJ_PRINTF_LIKE(3, 4);
static bool bad(char* msg, size_t size, const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(msg, size, format, args);
  va_end(args);
  return false;
}

static bool is_quant_dtype(tj_dtype_t d) {
  return d == TJ_DTYPE_I8 || d == TJ_DTYPE_U8 || d == TJ_DTYPE_I16 ||
         d == TJ_DTYPE_U16 || d == TJ_DTYPE_F8E4M3 || d == TJ_DTYPE_F8E5M2;
}

bool tj_quant_check(bool quantize, const tj_node_t* a, const tj_node_t* scale,
                    const tj_node_t* zp, tj_dtype_t qdtype, int64_t axis,
                    const int64_t* ints, uint32_t num_ints,
                    tj_quant_shape_t* out, char* msg, size_t msg_size) {
  memset(out, 0, sizeof(*out));
  int64_t v[TJ_QUANT_NUM_INTS] = {0, 1, 0, 0};
  if (ints) {
    if (num_ints != TJ_QUANT_NUM_INTS)
      return bad(msg, msg_size, "expects %d attribute ints, got %u",
                 TJ_QUANT_NUM_INTS, num_ints);
    memcpy(v, ints, sizeof(v));
  }
  out->block = v[TJ_QUANT_BLOCK];
  out->saturate = v[TJ_QUANT_SATURATE] != 0;
  out->int4 = (int32_t)v[TJ_QUANT_INT4];
  out->odd = v[TJ_QUANT_ODD] != 0;
  if (out->block < 0)
    return bad(msg, msg_size, "block_size %lld is negative",
               (long long)out->block);
  if (out->int4 < 0 || out->int4 > 2)
    return bad(msg, msg_size, "int4 must be 0, 1 (signed) or 2 (unsigned)");
  if (out->odd && !out->int4)
    return bad(msg, msg_size, "odd applies to int4 only");
  // The quantized side.
  const tj_node_t* q = quantize ? NULL : a;
  if (!quantize) qdtype = q->dtype;
  out->qdtype = qdtype;
  if (out->int4) {
    if (qdtype != TJ_DTYPE_U8)
      return bad(msg, msg_size, "packed int4 is held in u8, not %s",
                 tj_dtype_name(qdtype));
  } else if (!is_quant_dtype(qdtype) && (quantize || qdtype != TJ_DTYPE_I32)) {
    return bad(msg, msg_size,
               "the quantized dtype must be i8, u8, i16, u16, f8e4m3 or "
               "f8e5m2%s, not %s",
               quantize ? "" : " (or i32)", tj_dtype_name(qdtype));
  }
  // The float side.
  if (!tj_dtype_is_float(scale->dtype))
    return bad(msg, msg_size, "the scale must be a float dtype, not %s",
               tj_dtype_name(scale->dtype));
  if (quantize && !tj_dtype_is_float(a->dtype))
    return bad(msg, msg_size, "x must be a float dtype, not %s",
               tj_dtype_name(a->dtype));
  out->fdtype = quantize ? a->dtype : scale->dtype;
  // Shapes: logical dims (x's, or q's unpacked) and stored q dims.
  out->rank = a->rank;
  out->qrank = a->rank;
  if (a->rank > 0) {  // rank 0 may have no dims array
    memcpy(out->dims, a->dims, sizeof(int64_t) * (size_t)a->rank);
    memcpy(out->qdims, a->dims, sizeof(int64_t) * (size_t)a->rank);
  }
  if (out->int4) {
    if (a->rank < 1) return bad(msg, msg_size, "packed int4 needs rank >= 1");
    const int64_t last = a->dims[a->rank - 1];
    if (!tj_dim_is_const(last))
      return bad(msg, msg_size,
                 "packed int4 needs a constant last dim (it is packed)");
    if (quantize) {
      out->odd = (last & 1) != 0;
      out->qdims[a->rank - 1] = (last + 1) / 2;
    } else {
      if (out->odd && last == 0)
        return bad(msg, msg_size, "odd with an empty packed last dim");
      out->dims[a->rank - 1] = 2 * last - (out->odd ? 1 : 0);
    }
  }
  // Granularity from the scale's shape.
  if (scale->rank == 0) {
    out->gran = TJ_QUANT_PER_TENSOR;
    if (out->block)
      return bad(msg, msg_size, "a block_size needs a scale of x's rank");
  } else {
    if (axis < -(int64_t)out->rank || axis >= out->rank)
      return bad(msg, msg_size, "axis %lld is out of range for rank %d",
                 (long long)axis, (int)out->rank);
    out->axis = axis < 0 ? axis + out->rank : axis;
    const int64_t d = out->dims[out->axis];
    if (!out->block) {
      out->gran = TJ_QUANT_PER_AXIS;
      if (scale->rank != 1 || scale->dims[0] != d)
        return bad(msg, msg_size,
                   "a per-axis scale must be 1-D of x's dim %lld along "
                   "axis %lld",
                   (long long)d, (long long)out->axis);
    } else {
      out->gran = TJ_QUANT_PER_BLOCK;
      if (scale->rank != out->rank)
        return bad(msg, msg_size,
                   "a blocked scale must have x's rank %d, got rank %d",
                   (int)out->rank, (int)scale->rank);
      if (!tj_dim_is_const(d))
        return bad(msg, msg_size,
                   "the blocked axis %lld must have a constant dim",
                   (long long)out->axis);
      for (int32_t i = 0; i < out->rank; ++i) {
        const int64_t want =
            i == out->axis ? (d + out->block - 1) / out->block : out->dims[i];
        if (scale->dims[i] != want)
          return bad(msg, msg_size, "a blocked scale's dim %d must be %s%lld",
                     (int)i, i == out->axis ? "ceil(D / block_size) = " : "",
                     tj_dim_is_const(want) ? (long long)want : -1LL);
      }
    }
  }
  if (zp) {
    tj_dtype_t want = out->int4 == 1   ? TJ_DTYPE_I8
                      : out->int4 == 2 ? TJ_DTYPE_U8
                                       : qdtype;
    if (qdtype == TJ_DTYPE_I32 && !out->int4)
      return bad(msg, msg_size, "an i32 input takes no zero point");
    if (zp->dtype != want)
      return bad(msg, msg_size, "the zero point must be %s, not %s",
                 tj_dtype_name(want), tj_dtype_name(zp->dtype));
    if (zp->rank != scale->rank ||
        (zp->rank &&
         memcmp(zp->dims, scale->dims, sizeof(int64_t) * (size_t)zp->rank)))
      return bad(msg, msg_size, "the zero point must have the scale's shape");
  }
  return true;
}

int64_t tj_quant_qmin(tj_dtype_t qdtype, int32_t int4) {
  if (int4) return int4 == 1 ? -8 : 0;
  if (qdtype == TJ_DTYPE_I16 || qdtype == TJ_DTYPE_U16)
    return tj_dtype_int_lowest(qdtype);
  return qdtype == TJ_DTYPE_I8 ? -128 : qdtype == TJ_DTYPE_U8 ? 0 : INT32_MIN;
}

int64_t tj_quant_qmax(tj_dtype_t qdtype, int32_t int4) {
  if (int4) return int4 == 1 ? 7 : 15;
  if (qdtype == TJ_DTYPE_I16 || qdtype == TJ_DTYPE_U16)
    return tj_dtype_int_highest(qdtype);
  return qdtype == TJ_DTYPE_I8 ? 127 : qdtype == TJ_DTYPE_U8 ? 255 : INT32_MAX;
}

double tj_quant_divide(tj_dtype_t fdtype, double x, double s) {
  // A double quotient of two floats rounded to float is the float quotient
  // (53 >= 2 * 24 + 2).
  const double t = x / s;
  return fdtype == TJ_DTYPE_F64 ? t : (double)(float)t;
}

int64_t tj_quant_to_int(double t, double zp, int64_t lo, int64_t hi) {
  if (isnan(t)) return 0;
  double r = nearbyint(t) + zp;  // the default rounding: ties to even
  if (r < (double)lo) return lo;
  if (r > (double)hi) return hi;
  return (int64_t)r;
}

bool tj_quant_f8_overflows(tj_dtype_t qdtype, double t) {
  const double a = fabs(t);
  return qdtype == TJ_DTYPE_F8E4M3 ? a > 464.0 : a >= 61440.0;
}

uint8_t tj_quant_to_f8(tj_dtype_t qdtype, double t, bool saturate) {
  if (!saturate && !isnan(t) && tj_quant_f8_overflows(qdtype, t)) {
    const uint8_t sign = signbit(t) ? 0x80 : 0;
    return (uint8_t)(sign | (qdtype == TJ_DTYPE_F8E4M3 ? 0x7F : 0x7C));
  }
  return qdtype == TJ_DTYPE_F8E4M3 ? tj_f64_to_f8e4m3(t) : tj_f64_to_f8e5m2(t);
}

bool tj_quant_gemm_weight(const tj_graph_t* g, uint32_t node, bool gpu) {
  const tj_node_t* n = &g->nodes[node];
  // f32; on the GPU f16 and bf16 too (scale, dequantized B and A alike).
  bool half = n->dtype == TJ_DTYPE_F16 || n->dtype == TJ_DTYPE_BF16;
  if (n->op != TJ_OP_DEQUANTIZE || n->num_operands < 2 || n->rank != 2 ||
      (n->dtype != TJ_DTYPE_F32 && !(gpu && half))) {
    return false;
  }
  const tj_node_t* q = &g->nodes[n->operands[0]];
  const tj_node_t* s = &g->nodes[n->operands[1]];
  uint32_t zp = n->num_operands > 2 ? n->operands[2] : TJ_NODE_NONE;
  int64_t block =
      n->attrs.num_ints > TJ_QUANT_BLOCK ? n->attrs.ints[TJ_QUANT_BLOCK] : 0;
  bool int4 = n->attrs.num_ints > TJ_QUANT_INT4 && n->attrs.ints[TJ_QUANT_INT4];
  bool blocked = s->rank == 2 && block > 0 && n->attrs.axis == 0 &&
                 s->dims[1] == n->dims[1];
  bool per_n = s->rank == 1 && n->attrs.axis == 1 && s->dims[0] == n->dims[1];
  if (q->op != TJ_OP_CONSTANT || s->op != TJ_OP_CONSTANT ||
      (q->dtype != TJ_DTYPE_I8 && q->dtype != TJ_DTYPE_U8) || q->rank != 2 ||
      s->dtype != n->dtype || (!blocked && !per_n) ||
      (zp != TJ_NODE_NONE &&
       (g->nodes[zp].op != TJ_OP_CONSTANT || g->nodes[zp].rank != s->rank))) {
    return false;
  }
  // The GPU kernel's chunks of 32 (int4) or 16 (int8) rows lie inside
  // one group (jit/emit_nvptx_wqgemm.c).
  if (gpu && blocked && block % (int4 ? 32 : 16) != 0) return false;
  bool used = false;
  for (uint32_t u = node + 1; u < g->num_nodes; ++u) {
    const tj_node_t* un = &g->nodes[u];
    for (uint32_t k = 0; k < un->num_operands; ++k) {
      if (un->operands[k] != node) continue;
      // linear (x @ w + b) decomposes into a matmul that reads w as B.
      if ((un->op != TJ_OP_MATMUL && un->op != TJ_OP_LINEAR) || k != 1 ||
          un->operands[0] == node ||
          g->nodes[un->operands[0]].dtype != n->dtype) {
        return false;
      }
      used = true;
    }
  }
  for (uint32_t o = 0; o < g->num_outputs; ++o) {
    if (g->outputs[o].node == node) return false;
  }
  return used;
}
