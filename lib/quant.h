// lib/quant.h
//
// quantize and dequantize (issue 17, quant2): the attributes' layout, the
// shape rule shared by inference and the builders, and the element
// semantics shared by the reference interpreter and the decomposition's
// constants. ONNX QuantizeLinear / DequantizeLinear (opsets 10 to 23):
//   quantize    q = saturate(round_half_even(x / s) + zp)    (integers)
//               q = float8(x / s + zp), saturating or not     (float8)
//   dequantize  y = (q - zp) * s
// The scale's shape gives the granularity: rank 0 per tensor; rank 1 with
// no block size per axis (s[D_axis]); same rank as x with a block size B
// per block (s dim ceil(D_axis / B) on the axis, x's dims elsewhere).
// int4 (signed [-8, 7] or unsigned [0, 15]) is packed two to a byte in a
// u8 tensor along its last axis, the even element in the low nibble (ONNX,
// MatMulNBits); its zero point is unpacked (i8 or u8 of the scale's shape).

#ifndef TJ_LIB_QUANT_H_
#define TJ_LIB_QUANT_H_

#include "lib/ir.h"

// attrs.ints of a quantize / dequantize node; attrs.axis is normalized.
enum {
  TJ_QUANT_BLOCK = 0,     // block size along the axis, 0: none
  TJ_QUANT_SATURATE = 1,  // float8: 1 saturates to +-max (ONNX default)
  TJ_QUANT_INT4 = 2,      // 0, TJ_QUANT_INT4_SIGNED or TJ_QUANT_INT4_UNSIGNED
  TJ_QUANT_ODD = 3,       // int4: the logical last dim is 2 * packed - 1
  TJ_QUANT_NUM_INTS = 4,
};

typedef enum tj_quant_gran_e {
  TJ_QUANT_PER_TENSOR,
  TJ_QUANT_PER_AXIS,
  TJ_QUANT_PER_BLOCK,
} tj_quant_gran_t;

// A quantize / dequantize node's operands and attributes, decoded.
typedef struct tj_quant_shape_t {
  tj_quant_gran_t gran;
  int64_t axis;   // normalized (per axis, per block)
  int64_t block;  // per block
  int32_t int4;   // 0, 1 signed, 2 unsigned
  bool saturate;
  bool odd;
  tj_dtype_t qdtype;           // quantized element dtype (u8 for int4)
  int32_t rank;                // the logical (unpacked) shape
  int64_t dims[TJ_MAX_RANK];   //
  int32_t qrank;               // the stored q shape (packed for int4)
  int64_t qdims[TJ_MAX_RANK];  //
  tj_dtype_t fdtype;           // the float side: x (quantize), y (dequantize)
} tj_quant_shape_t;

// The type rule of both ops. |quantize|: |a| is x, |qdtype| the result's
// dtype (I8, U8, I16, U16, F8E4M3, F8E5M2; U8 for int4); else |a| is q and the
// result's dtype is the scale's. |zp| may be NULL. |ints| holds
// TJ_QUANT_NUM_INTS values (NULL: all 0 but saturate), |axis| as given
// (negative from the back). On failure returns false with a message in
// |msg|; the caller names the op and node.
bool tj_quant_check(bool quantize, const tj_node_t* a, const tj_node_t* scale,
                    const tj_node_t* zp, tj_dtype_t qdtype, int64_t axis,
                    const int64_t* ints, uint32_t num_ints,
                    tj_quant_shape_t* out, char* msg, size_t msg_size);

// The integer range of a quantized dtype (int4 given by |int4|).
int64_t tj_quant_qmin(tj_dtype_t qdtype, int32_t int4);
int64_t tj_quant_qmax(tj_dtype_t qdtype, int32_t int4);
// x / s in the precision the kernels compute it in: f32 unless |fdtype| is
// f64 (f16 and bf16 are computed in f32).
double tj_quant_divide(tj_dtype_t fdtype, double x, double s);
// round_half_even(t) + zp saturated to [lo, hi]; NaN gives 0.
int64_t tj_quant_to_int(double t, double zp, int64_t lo, int64_t hi);
// t (+ zp) as float8 bits: saturating, or out of range giving NaN (e4m3,
// sign kept) or +-inf (e5m2).
uint8_t tj_quant_to_f8(tj_dtype_t qdtype, double t, bool saturate);
// The smallest |t| that overflows a non-saturating float8 conversion
// (values at it round past max): e4m3 464 exclusive, e5m2 61440 inclusive.
bool tj_quant_f8_overflows(tj_dtype_t qdtype, double t);

// qfold (issue 17): whether dequantize |node| is a weight the GEMMs read
// quantized (the targets' native_op keeps it whole): constants q (i8/u8,
// int4 packed) [K, N], a scale [N] per output column or [ceil(K/g),
// N] per group along K, a constant zero point or none, in the layout
// lib/passes/quant_prepack.c gives them; every user a matmul (or a linear,
// which decomposes into one) reading it as B with an f32 A. |gpu|: groups also
// a multiple of the CUDA kernel's chunk (32 rows for int4, 16 for int8), and
// the scale, the dequantized B and A may be f16 or bf16 (all three alike).
bool tj_quant_gemm_weight(const tj_graph_t* g, uint32_t node, bool gpu);

#endif  // TJ_LIB_QUANT_H_
