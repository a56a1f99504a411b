// The reference interpreter: runs a finalized graph one node at a time on
// the CPU. It is the oracle every compiled backend is checked against and the
// eager baseline, so it favours being obviously right over being fast (the
// one exception is the matmul loop, which must handle the capstone's
// 2048x1024x4096 product in seconds).
//
// Semantics, per node (the eager semantics):
//   - every node's result is a dense row-major buffer of the node's dtype;
//     operands are read through strides, so caller inputs may be strided and
//     are never copied;
//   - float math is done in double and rounded to the node's dtype once per
//     node; composites (gelu, softmax, layer_norm, linear, ...) are one node
//     and so are computed from their definitions in double and rounded once;
//   - integer math is exact in int64 (never through double) and wraps to the
//     dtype's width;
//   - sums and products accumulate in double (floats) or int64 (ints).
// A buffer is freed right after the last node that reads it, so peak memory
// is the live set, not the whole graph.

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backends/reference/reference_eval.h"
#include "lib/base.h"
#include "lib/custom_op.h"
#include "lib/dtype.h"
#include "lib/ir.h"
#include "lib/quant.h"
#include "lib/scatter.h"
#include "lib/window.h"

//===----------------------------------------------------------------------===//
// Views and iteration
//===----------------------------------------------------------------------===//

// A strided view of elements: element (i0, ..., ik) lives at
// data + (sum i_d * strides[d]) * elem_size. Strides may be 0 (broadcast) or
// negative (caller tensors).
typedef struct view_t {
  tj_dtype_t dtype;
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
  int64_t strides[TJ_MAX_RANK];  // in elements
  unsigned char* data;           // element (0, ..., 0); NULL if empty
} view_t;

// A row-major iteration over |dims| that carries the element offsets of up
// to kMaxIterOperands views along (an N-d counter, as numpy's nditer).
enum { kMaxIterOperands = 4 };

typedef struct iter_t {
  int32_t rank;
  int32_t num_operands;
  int64_t dims[TJ_MAX_RANK];
  int64_t index[TJ_MAX_RANK];
  int64_t strides[kMaxIterOperands][TJ_MAX_RANK];
  int64_t offsets[kMaxIterOperands];
} iter_t;

static void iter_initialize(iter_t* it, int32_t rank, const int64_t* dims) {
  memset(it, 0, sizeof(*it));
  it->rank = rank;
  for (int32_t d = 0; d < rank; ++d) it->dims[d] = dims[d];
}

// Adds an operand whose strides (|rank| of them, aligned with the iteration
// dims) are |strides|.
static void iter_add_operand(iter_t* it, const int64_t* strides) {
  int32_t k = it->num_operands++;
  for (int32_t d = 0; d < it->rank; ++d) it->strides[k][d] = strides[d];
}

// Steps to the next index in row-major order. Call it numel - 1 times (or
// numel times; the last call wraps around to the origin).
static void iter_next(iter_t* it) {
  for (int32_t d = it->rank - 1; d >= 0; --d) {
    ++it->index[d];
    for (int32_t k = 0; k < it->num_operands; ++k) {
      it->offsets[k] += it->strides[k][d];
    }
    if (it->index[d] < it->dims[d]) return;
    for (int32_t k = 0; k < it->num_operands; ++k) {
      it->offsets[k] -= it->strides[k][d] * it->dims[d];
    }
    it->index[d] = 0;
  }
}

static int64_t dims_numel(int32_t rank, const int64_t* dims) {
  int64_t n = 1;
  for (int32_t d = 0; d < rank; ++d) n *= dims[d];
  return n;
}

static void row_major_strides(int32_t rank, const int64_t* dims,
                              int64_t* strides) {
  int64_t s = 1;
  for (int32_t d = rank - 1; d >= 0; --d) {
    strides[d] = s;
    s *= dims[d] > 0 ? dims[d] : 1;
  }
}

static int64_t view_numel(const view_t* v) {
  return dims_numel(v->rank, v->dims);
}

// The strides that read |v| broadcast (numpy rules, aligned at the right) to
// the |rank| dims |dims|: a size-1 axis stretched to more gets stride 0.
static void broadcast_strides(const view_t* v, int32_t rank,
                              const int64_t* dims, int64_t* out_strides) {
  int32_t lead = rank - v->rank;
  for (int32_t d = 0; d < rank; ++d) {
    int32_t vd = d - lead;
    if (vd < 0 || (v->dims[vd] == 1 && dims[d] != 1)) {
      out_strides[d] = 0;
    } else {
      out_strides[d] = v->strides[vd];
    }
  }
}

static unsigned char* elem_ptr(const view_t* v, int64_t offset) {
  return v->data + offset * (int64_t)tj_dtype_size(v->dtype);
}

// Copies |src| element by element (raw bytes, same dtype) into the dense
// row-major buffer |dst| in |src|'s logical row-major order.
static void copy_to_dense(const view_t* src, unsigned char* dst) {
  int64_t n = view_numel(src);
  if (n == 0) return;
  size_t es = tj_dtype_size(src->dtype);
  iter_t it;
  iter_initialize(&it, src->rank, src->dims);
  iter_add_operand(&it, src->strides);
  for (int64_t i = 0; i < n; ++i, iter_next(&it)) {
    memcpy(dst + (size_t)i * es, elem_ptr(src, it.offsets[0]), es);
  }
}

// Copies |src| into |dst|: same dtype and dims, both strided.
static void copy_view(const view_t* src, const view_t* dst) {
  int64_t n = view_numel(src);
  if (n == 0) return;
  size_t es = tj_dtype_size(src->dtype);
  iter_t it;
  iter_initialize(&it, src->rank, src->dims);
  iter_add_operand(&it, src->strides);
  iter_add_operand(&it, dst->strides);
  for (int64_t i = 0; i < n; ++i, iter_next(&it)) {
    memcpy(elem_ptr(dst, it.offsets[1]), elem_ptr(src, it.offsets[0]), es);
  }
}

//===----------------------------------------------------------------------===//
// The run
//===----------------------------------------------------------------------===//

typedef struct value_t {
  view_t view;
  void* owned;  // the dense buffer of a computed node, or NULL
  size_t owned_bytes;
} value_t;

typedef struct run_t {
  const tj_graph_t* graph;
  tj_allocator_t allocator;
  const tj_tensor_t* inputs;
  int64_t symbols[TJ_MAX_SYMBOLS];
  value_t* values;     // one per node
  uint32_t* last_use;  // the last node reading each node (itself if none)
} run_t;

static const tj_node_t* node_at(const run_t* run, uint32_t index) {
  return &run->graph->nodes[index];
}

static const char* op_name(tj_op_t op) { return tj_op_info(op)->name; }

// "f32[3,4]" for a concrete shape.
static void format_shape(tj_dtype_t dtype, int32_t rank, const int64_t* dims,
                         char* buf, size_t size) {
  int n = snprintf(buf, size, "%s[", tj_dtype_name(dtype));
  for (int32_t d = 0; d < rank && n >= 0 && (size_t)n < size; ++d) {
    n += snprintf(buf + n, size - (size_t)n, "%s%lld", d ? "," : "",
                  (long long)dims[d]);
  }
  if (n >= 0 && (size_t)n < size) snprintf(buf + n, size - (size_t)n, "]");
}

static void* scratch_alloc(run_t* run, size_t bytes) {
  return tj_alloc(run->allocator, bytes);
}

static void scratch_free(run_t* run, void* ptr, size_t bytes) {
  tj_free(run->allocator, ptr, bytes);
}

// Scratch arrays of |count| elements of |elem_size|: NULL with |*out_bytes|
// == 0 for an empty array; OUT_OF_MEMORY on failure or size overflow.
static tj_status_t scratch_array(run_t* run, int64_t count, size_t elem_size,
                                 void** out_ptr, size_t* out_bytes) {
  *out_ptr = NULL;
  *out_bytes = 0;
  if (count <= 0) return NULL;
  size_t bytes;
  if ((uint64_t)count > SIZE_MAX ||
      __builtin_mul_overflow((size_t)count, elem_size, &bytes)) {
    return tj_status_oom();
  }
  void* p = scratch_alloc(run, bytes);
  if (!p) return tj_status_oom();
  *out_ptr = p;
  *out_bytes = bytes;
  return NULL;
}

// Allocates node |index|'s dense result buffer and fills in its view.
static tj_status_t allocate_result(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  value_t* value = &run->values[index];
  view_t* v = &value->view;
  memset(v, 0, sizeof(*v));
  v->dtype = node->dtype;
  v->rank = node->rank;
  TJ_RETURN_IF_ERROR(
      tj_ir_concrete_dims(run->graph, index, run->symbols, v->dims));
  row_major_strides(v->rank, v->dims, v->strides);
  int64_t numel = 1;
  int64_t bytes = 0;
  bool too_big = false;
  for (int32_t d = 0; d < v->rank; ++d) {
    if (v->dims[d] < 0 || tj_mul_overflow_i64(numel, v->dims[d], &numel)) {
      too_big = true;
    }
  }
  if (!too_big &&
      tj_mul_overflow_i64(numel, (int64_t)tj_dtype_size(v->dtype), &bytes)) {
    too_big = true;
  }
  if (too_big || bytes > TJ_MAX_TENSOR_BYTES) {
    char shape[160];
    format_shape(v->dtype, v->rank, v->dims, shape, sizeof(shape));
    return tj_invalid("%s (node %%%u): result %s is too large",
                      op_name(node->op), index, shape);
  }
  if (bytes == 0) return NULL;
  void* p = scratch_alloc(run, (size_t)bytes);
  if (!p) return tj_status_oom();
  value->owned = p;
  value->owned_bytes = (size_t)bytes;
  v->data = p;
  return NULL;
}

static void release_value(run_t* run, uint32_t index) {
  value_t* value = &run->values[index];
  if (value->owned) scratch_free(run, value->owned, value->owned_bytes);
  value->owned = NULL;
  value->owned_bytes = 0;
  value->view.data = NULL;
}

static const view_t* operand_view(const run_t* run, uint32_t index,
                                  uint32_t slot) {
  uint32_t operand = node_at(run, index)->operands[slot];
  if (operand == TJ_NODE_NONE) return NULL;
  return &run->values[operand].view;
}

// A view of caller tensor |t| (shape already checked against the node).
static void tensor_view(const tj_tensor_t* t, view_t* v) {
  memset(v, 0, sizeof(*v));
  v->dtype = t->dtype;
  v->rank = t->rank;
  for (int32_t d = 0; d < t->rank; ++d) v->dims[d] = t->shape[d];
  if (t->strides) {
    for (int32_t d = 0; d < t->rank; ++d) v->strides[d] = t->strides[d];
  } else {
    row_major_strides(v->rank, v->dims, v->strides);
  }
  v->data = t->data ? (unsigned char*)t->data + t->byte_offset : NULL;
}

//===----------------------------------------------------------------------===//
// Scalar semantics
//===----------------------------------------------------------------------===//

static const double kSqrt2OverPi = 0.79788456080286535587989211986876;
static const double kSqrtHalf = 0.70710678118654752440084436210485;

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

// Ties to even, independent of the floating-point environment.
static double round_half_even(double x) {
  double r = floor(x);
  double diff = x - r;
  if (diff > 0.5 || (diff == 0.5 && fmod(r, 2.0) != 0.0)) r += 1.0;
  return r == 0.0 ? copysign(0.0, x) : r;
}

static double gelu(double x, bool approximate) {
  if (approximate) {
    // 0.5 (1 + tanh(z)) as sigmoid(2 z): 1 + tanh(z) cancels to 0 for
    // z below about -19 even in double, where the product is a tiny
    // negative number (and its log NaN, not -inf).
    return x * sigmoid(2.0 * kSqrt2OverPi * (x + 0.044715 * x * x * x));
  }
  // Through erfc: 1 + erf(x / sqrt 2) cancels to 0 below x = -5.7 in
  // f32 (-8 in f64), while erfc keeps its relative accuracy there.
  return 0.5 * x * erfc(-x * kSqrtHalf);
}

// Float elementwise unary ops (also the fallback for any dtype).
static double unary_f64(const tj_node_t* node, double x) {
  switch (node->op) {
    case TJ_OP_NEG:
      return -x;
    case TJ_OP_ABS:
      return fabs(x);
    case TJ_OP_EXP:
      return exp(x);
    case TJ_OP_LOG:
      return log(x);
    case TJ_OP_SQRT:
      return sqrt(x);
    case TJ_OP_RSQRT:
      return 1.0 / sqrt(x);
    case TJ_OP_TANH:
      return tanh(x);
    case TJ_OP_SIGMOID:
      return sigmoid(x);
    case TJ_OP_ERF:
      return erf(x);
    case TJ_OP_ERFC:
      return erfc(x);
    case TJ_OP_SIN:
      return sin(x);
    case TJ_OP_COS:
      return cos(x);
    case TJ_OP_ASIN:
      return asin(x);
    case TJ_OP_ACOS:
      return acos(x);
    case TJ_OP_ATAN:
      return atan(x);
    case TJ_OP_RELU:
      return x > 0.0 ? x : (isnan(x) ? x : 0.0);
    case TJ_OP_FLOOR:
      return floor(x);
    case TJ_OP_CEIL:
      return ceil(x);
    case TJ_OP_ROUND:
      return round_half_even(x);
    case TJ_OP_SIGN:
      return x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : x;  // 0, NaN
    case TJ_OP_NOT:
      return x == 0.0 ? 1.0 : 0.0;
    case TJ_OP_GELU:
      return gelu(x, node->attrs.approximate);
    case TJ_OP_SILU:
      return x * sigmoid(x);
    default:
      return NAN;
  }
}

// Whether |op| has an exact integer form (it takes integers or bool); the
// others compute in double.
static bool unary_has_int_form(tj_op_t op) {
  return tj_op_info(op)->dtypes != TJ_OP_DTYPES_FLOAT;
}

static int64_t unary_i64(tj_op_t op, tj_dtype_t dtype, int64_t x) {
  if (dtype == TJ_DTYPE_U64) {  // the bits of an unsigned: never negative
    switch (op) {
      case TJ_OP_ABS:
      case TJ_OP_RELU:
        return x;
      case TJ_OP_SIGN:
        return x != 0;
      default:
        break;
    }
  }
  switch (op) {
    case TJ_OP_NEG:
      return (int64_t)(0 - (uint64_t)x);  // wraps
    case TJ_OP_ABS:
      return x < 0 ? (int64_t)(0 - (uint64_t)x) : x;
    case TJ_OP_RELU:
      return x > 0 ? x : 0;
    case TJ_OP_SIGN:
      return (x > 0) - (x < 0);
    case TJ_OP_NOT:
      return x == 0;
    case TJ_OP_BITWISE_NOT:
      return ~x;
    default:
      return 0;
  }
}

static bool is_comparison(tj_op_t op) {
  return tj_op_info(op)->kind == TJ_OP_KIND_BINARY &&
         tj_op_has(op, TJ_OPF_BOOL_RESULT);
}

static bool compare_f64(tj_op_t op, double a, double b) {
  switch (op) {
    case TJ_OP_EQ:
      return a == b;
    case TJ_OP_NE:
      return a != b;
    case TJ_OP_LT:
      return a < b;
    case TJ_OP_LE:
      return a <= b;
    case TJ_OP_GT:
      return a > b;
    case TJ_OP_GE:
      return a >= b;
    default:
      return false;
  }
}

// u64 compares as unsigned: flipping the sign bit maps its order onto
// int64's (the other unsigned dtypes load as non-negative int64).
static int64_t order_key(tj_dtype_t dtype, int64_t x) {
  return dtype == TJ_DTYPE_U64 ? (int64_t)((uint64_t)x ^ (UINT64_C(1) << 63))
                               : x;
}

static bool compare_i64(tj_op_t op, tj_dtype_t dtype, int64_t a, int64_t b) {
  a = order_key(dtype, a);
  b = order_key(dtype, b);
  switch (op) {
    case TJ_OP_EQ:
      return a == b;
    case TJ_OP_NE:
      return a != b;
    case TJ_OP_LT:
      return a < b;
    case TJ_OP_LE:
      return a <= b;
    case TJ_OP_GT:
      return a > b;
    case TJ_OP_GE:
      return a >= b;
    default:
      return false;
  }
}

static double binary_f64(tj_op_t op, double a, double b) {
  switch (op) {
    case TJ_OP_ADD:
      return a + b;
    case TJ_OP_SUB:
      return a - b;
    case TJ_OP_MUL:
      return a * b;
    case TJ_OP_DIV:
      return a / b;
    case TJ_OP_POW:
      return pow(a, b);
    case TJ_OP_MAXIMUM:
      if (isnan(a) || isnan(b)) return a + b;  // NaN propagates
      return a > b ? a : b;
    case TJ_OP_MINIMUM:
      if (isnan(a) || isnan(b)) return a + b;
      return a < b ? a : b;
    case TJ_OP_AND:
      return (a != 0.0 && b != 0.0) ? 1.0 : 0.0;
    case TJ_OP_OR:
      return (a != 0.0 || b != 0.0) ? 1.0 : 0.0;
    case TJ_OP_FMOD:
      return fmod(a, b);
    case TJ_OP_MOD: {
      // numpy.mod: the sign of b; a zero result is a zero of b's sign.
      double r = fmod(a, b);
      if (r != 0.0 && (r < 0.0) != (b < 0.0)) r += b;
      return r == 0.0 ? copysign(0.0, b) : r;
    }
    default:
      return NAN;
  }
}

// Integer arithmetic through uint64_t so that overflow wraps instead of
// being undefined; the store then wraps to the dtype's width.
static int64_t binary_i64(tj_op_t op, tj_dtype_t dtype, int64_t a, int64_t b) {
  if (dtype == TJ_DTYPE_U64) {
    const uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
    switch (op) {
      case TJ_OP_DIV:
        return ub == 0 ? 0 : (int64_t)(ua / ub);
      case TJ_OP_MOD:
      case TJ_OP_FMOD:
        return ub == 0 ? 0 : (int64_t)(ua % ub);
      case TJ_OP_MAXIMUM:
        return ua > ub ? a : b;
      case TJ_OP_MINIMUM:
        return ua < ub ? a : b;
      case TJ_OP_SHIFT_LEFT:
        return ub >= 64 ? 0 : (int64_t)(ua << ub);
      case TJ_OP_SHIFT_RIGHT:
        return ub >= 64 ? 0 : (int64_t)(ua >> ub);
      default:
        break;
    }
  }
  switch (op) {
    case TJ_OP_ADD:
      return (int64_t)((uint64_t)a + (uint64_t)b);
    case TJ_OP_SUB:
      return (int64_t)((uint64_t)a - (uint64_t)b);
    case TJ_OP_MUL:
      return (int64_t)((uint64_t)a * (uint64_t)b);
    case TJ_OP_DIV:
      if (b == 0) return 0;
      if (a == INT64_MIN && b == -1) return INT64_MIN;  // wraps
      return a / b;  // C truncates toward zero
    case TJ_OP_MAXIMUM:
      return a > b ? a : b;
    case TJ_OP_MINIMUM:
      return a < b ? a : b;
    case TJ_OP_AND:
      return a != 0 && b != 0;
    case TJ_OP_OR:
      return a != 0 || b != 0;
    case TJ_OP_MOD:
    case TJ_OP_FMOD: {
      if (b == 0 || b == -1) return 0;  // x mod 0 = 0; no INT64_MIN % -1
      int64_t r = a % b;                // C: the sign of a
      if (op == TJ_OP_MOD && r != 0 && (r < 0) != (b < 0)) r += b;
      return r;
    }
    case TJ_OP_BITWISE_AND:
      return a & b;
    case TJ_OP_BITWISE_OR:
      return a | b;
    case TJ_OP_BITWISE_XOR:
      return a ^ b;
    // Operands are sign-extended to 64 bits and the result wraps to the
    // dtype, so shifting the i64 form gives every width's answer: b >= the
    // dtype's bits (up to 63) already shifts out (or in) every bit.
    case TJ_OP_SHIFT_LEFT:
      return b < 0 || b >= 64 ? 0 : (int64_t)((uint64_t)a << b);
    case TJ_OP_SHIFT_RIGHT:
      return b < 0 || b >= 64 ? (a < 0 ? -1 : 0) : a >> b;
    default:
      return 0;
  }
}

// Integer ops with no integer form (pow) compute in double.
static bool binary_has_int_form(tj_op_t op) {
  return tj_op_info(op)->dtypes != TJ_OP_DTYPES_FLOAT;
}

//===----------------------------------------------------------------------===//
// Elementwise nodes
//===----------------------------------------------------------------------===//

static tj_status_t eval_unary(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const view_t* a = operand_view(run, index, 0);
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  view_t* out = &run->values[index].view;
  int64_t n = view_numel(out);
  if (n == 0) return NULL;
  iter_t it;
  iter_initialize(&it, a->rank, a->dims);
  iter_add_operand(&it, a->strides);
  const tj_dtype_t in = a->dtype, res = out->dtype;
  if (node->op == TJ_OP_CAST) {
    for (int64_t i = 0; i < n; ++i, iter_next(&it)) {
      // u64 -> float converts the unsigned value (its int64 would be
      // negative from 2^63).
      if (tj_dtype_is_float(in) || tj_dtype_is_f8(in) ||
          (in == TJ_DTYPE_U64 &&
           (tj_dtype_is_float(res) || tj_dtype_is_f8(res)))) {
        tj_store_f64(res, out->data, i,
                     tj_load_f64(in, a->data, it.offsets[0]));
      } else {
        tj_store_i64(res, out->data, i,
                     tj_load_i64(in, a->data, it.offsets[0]));
      }
    }
  } else if (node->op == TJ_OP_BITCAST) {
    // The element's bytes as they are (a bool result: nonzero is true).
    const size_t es = tj_dtype_size(res);
    for (int64_t i = 0; i < n; ++i, iter_next(&it)) {
      unsigned char* dst = elem_ptr(out, i);
      memcpy(dst, elem_ptr(a, it.offsets[0]), es);
      if (res == TJ_DTYPE_BOOL) dst[0] = dst[0] != 0;
    }
  } else if (node->op == TJ_OP_ISNAN) {
    for (int64_t i = 0; i < n; ++i, iter_next(&it)) {
      bool nan = tj_dtype_is_float(in) &&
                 isnan(tj_load_f64(in, a->data, it.offsets[0]));
      tj_store_i64(res, out->data, i, nan);
    }
  } else if (!tj_dtype_is_float(in) && unary_has_int_form(node->op)) {
    for (int64_t i = 0; i < n; ++i, iter_next(&it)) {
      int64_t x = tj_load_i64(in, a->data, it.offsets[0]);
      tj_store_i64(res, out->data, i, unary_i64(node->op, in, x));
    }
  } else {
    for (int64_t i = 0; i < n; ++i, iter_next(&it)) {
      double x = tj_load_f64(in, a->data, it.offsets[0]);
      tj_store_f64(res, out->data, i, unary_f64(node, x));
    }
  }
  return NULL;
}

static tj_status_t eval_binary(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const view_t* a = operand_view(run, index, 0);
  const view_t* b = operand_view(run, index, 1);
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  view_t* out = &run->values[index].view;
  int64_t n = view_numel(out);
  if (n == 0) return NULL;
  int64_t sa[TJ_MAX_RANK], sb[TJ_MAX_RANK];
  broadcast_strides(a, out->rank, out->dims, sa);
  broadcast_strides(b, out->rank, out->dims, sb);
  iter_t it;
  iter_initialize(&it, out->rank, out->dims);
  iter_add_operand(&it, sa);
  iter_add_operand(&it, sb);
  const tj_op_t op = node->op;
  const tj_dtype_t in = a->dtype, res = out->dtype;
  const bool exact =
      !tj_dtype_is_float(in) && (is_comparison(op) || binary_has_int_form(op));
  for (int64_t i = 0; i < n; ++i, iter_next(&it)) {
    if (exact) {
      int64_t x = tj_load_i64(in, a->data, it.offsets[0]);
      int64_t y = tj_load_i64(in, b->data, it.offsets[1]);
      int64_t r = is_comparison(op) ? compare_i64(op, in, x, y)
                                    : binary_i64(op, in, x, y);
      tj_store_i64(res, out->data, i, r);
    } else {
      double x = tj_load_f64(in, a->data, it.offsets[0]);
      double y = tj_load_f64(in, b->data, it.offsets[1]);
      if (is_comparison(op)) {
        tj_store_i64(res, out->data, i, compare_f64(op, x, y));
      } else {
        tj_store_f64(res, out->data, i, binary_f64(op, x, y));
      }
    }
  }
  return NULL;
}

static tj_status_t eval_where(run_t* run, uint32_t index) {
  const view_t* cond = operand_view(run, index, 0);
  const view_t* a = operand_view(run, index, 1);
  const view_t* b = operand_view(run, index, 2);
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  view_t* out = &run->values[index].view;
  int64_t n = view_numel(out);
  if (n == 0) return NULL;
  int64_t sc[TJ_MAX_RANK], sa[TJ_MAX_RANK], sb[TJ_MAX_RANK];
  broadcast_strides(cond, out->rank, out->dims, sc);
  broadcast_strides(a, out->rank, out->dims, sa);
  broadcast_strides(b, out->rank, out->dims, sb);
  iter_t it;
  iter_initialize(&it, out->rank, out->dims);
  iter_add_operand(&it, sc);
  iter_add_operand(&it, sa);
  iter_add_operand(&it, sb);
  size_t es = tj_dtype_size(out->dtype);
  for (int64_t i = 0; i < n; ++i, iter_next(&it)) {
    bool c = tj_load_i64(cond->dtype, cond->data, it.offsets[0]) != 0;
    // Raw bytes: exact for every dtype, i64 included.
    const unsigned char* src =
        c ? elem_ptr(a, it.offsets[1]) : elem_ptr(b, it.offsets[2]);
    memcpy(out->data + (size_t)i * es, src, es);
  }
  return NULL;
}

//===----------------------------------------------------------------------===//
// Leaves
//===----------------------------------------------------------------------===//

static tj_status_t eval_input(run_t* run, uint32_t index) {
  const tj_graph_t* g = run->graph;
  for (uint32_t k = 0; k < g->num_inputs; ++k) {
    if (g->inputs[k] == index) {
      tensor_view(&run->inputs[k], &run->values[index].view);
      return NULL;
    }
  }
  return tj_internal("input (node %%%u) is not in the graph's input list",
                     index);
}

static tj_status_t eval_constant(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  view_t* v = &run->values[index].view;
  memset(v, 0, sizeof(*v));
  v->dtype = node->dtype;
  v->rank = node->rank;
  TJ_RETURN_IF_ERROR(
      tj_ir_concrete_dims(run->graph, index, run->symbols, v->dims));
  row_major_strides(v->rank, v->dims, v->strides);
  // Read-only: no node writes through an operand view.
  v->data = view_numel(v) ? (unsigned char*)node->attrs.data : NULL;
  return NULL;
}

static tj_status_t eval_full(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  view_t* out = &run->values[index].view;
  int64_t n = view_numel(out);
  for (int64_t i = 0; i < n; ++i) {
    tj_store_f64(out->dtype, out->data, i, node->attrs.value);
  }
  return NULL;
}

static tj_status_t eval_iota(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  view_t* out = &run->values[index].view;
  int64_t n = view_numel(out);
  if (n == 0) return NULL;
  int32_t axis = (int32_t)node->attrs.axis;
  iter_t it;
  iter_initialize(&it, out->rank, out->dims);
  for (int64_t i = 0; i < n; ++i, iter_next(&it)) {
    tj_store_i64(out->dtype, out->data, i, it.index[axis]);
  }
  return NULL;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

// The initial value of max/min over no elements (and before the first one):
// tj_dtype_int_lowest / tj_dtype_int_highest (lib/dtype.h).

static tj_status_t eval_reduce(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const tj_op_t op = node->op;
  const view_t* a = operand_view(run, index, 0);
  bool reduced[TJ_MAX_RANK] = {false};
  int32_t argmax_axis = -1;
  const bool is_arg = op == TJ_OP_ARGMAX || op == TJ_OP_ARGMIN;
  if (is_arg) {
    argmax_axis = (int32_t)node->attrs.axis;
    reduced[argmax_axis] = true;
    if (a->dims[argmax_axis] == 0) {
      char shape[160];
      format_shape(a->dtype, a->rank, a->dims, shape, sizeof(shape));
      return tj_invalid("%s (node %%%u): axis %d of %s is empty",
                        tj_op_info(op)->name, index, argmax_axis, shape);
    }
  } else {
    for (uint32_t k = 0; k < node->attrs.num_ints; ++k) {
      reduced[node->attrs.ints[k]] = true;
    }
  }
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  view_t* out = &run->values[index].view;
  const int64_t out_n = view_numel(out);
  if (out_n == 0) return NULL;

  // Accumulator k for the output element whose row-major index is k: the
  // accumulator strides are the output's with 0 on reduced axes.
  int64_t acc_strides[TJ_MAX_RANK];
  int64_t count = 1;  // elements reduced into each output
  {
    int64_t s = 1;
    for (int32_t d = a->rank - 1; d >= 0; --d) {
      if (reduced[d]) {
        acc_strides[d] = 0;
        count *= a->dims[d];
      } else {
        acc_strides[d] = s;
        s *= a->dims[d];
      }
    }
  }
  const bool exact = !tj_dtype_is_float(a->dtype);
  void* acc = NULL;
  size_t acc_bytes = 0;
  int64_t* arg = NULL;
  size_t arg_bytes = 0;
  TJ_RETURN_IF_ERROR(scratch_array(run, out_n, 8, &acc, &acc_bytes));
  if (is_arg) {
    tj_status_t s = scratch_array(run, out_n, 8, (void**)&arg, &arg_bytes);
    if (s) {
      scratch_free(run, acc, acc_bytes);
      return s;
    }
  }
  double* accd = (double*)acc;
  int64_t* acci = (int64_t*)acc;
  for (int64_t k = 0; k < out_n; ++k) {
    switch (op) {
      case TJ_OP_PROD:
        if (exact)
          acci[k] = 1;
        else
          accd[k] = 1.0;
        break;
      case TJ_OP_MAX:
        if (exact)
          acci[k] = tj_dtype_int_lowest(a->dtype);
        else
          accd[k] = -INFINITY;
        break;
      case TJ_OP_MIN:
        if (exact)
          acci[k] = tj_dtype_int_highest(a->dtype);
        else
          accd[k] = INFINITY;
        break;
      default:
        if (exact)
          acci[k] = 0;
        else
          accd[k] = 0.0;
        break;
    }
  }

  const int64_t n = view_numel(a);
  iter_t it;
  iter_initialize(&it, a->rank, a->dims);
  iter_add_operand(&it, a->strides);
  iter_add_operand(&it, acc_strides);
  for (int64_t i = 0; i < n; ++i, iter_next(&it)) {
    const int64_t k = it.offsets[1];
    if (exact) {
      int64_t x = tj_load_i64(a->dtype, a->data, it.offsets[0]);
      // Compares in the dtype's order (u64 unsigned); the sums wrap alike.
      const int64_t kx = order_key(a->dtype, x);
      const int64_t ka = order_key(a->dtype, acci[k]);
      switch (op) {
        case TJ_OP_SUM:
        case TJ_OP_MEAN:
          acci[k] = (int64_t)((uint64_t)acci[k] + (uint64_t)x);
          break;
        case TJ_OP_PROD:
          acci[k] = (int64_t)((uint64_t)acci[k] * (uint64_t)x);
          break;
        case TJ_OP_MAX:
          if (kx > ka) acci[k] = x;
          break;
        case TJ_OP_MIN:
          if (kx < ka) acci[k] = x;
          break;
        case TJ_OP_ARGMAX:
          // The first element along the axis starts the search, so the
          // first maximum wins.
          if (it.index[argmax_axis] == 0 || kx > ka) {
            acci[k] = x;
            arg[k] = it.index[argmax_axis];
          }
          break;
        case TJ_OP_ARGMIN:
          if (it.index[argmax_axis] == 0 || kx < ka) {
            acci[k] = x;
            arg[k] = it.index[argmax_axis];
          }
          break;
        default:
          break;
      }
    } else {
      double x = tj_load_f64(a->dtype, a->data, it.offsets[0]);
      switch (op) {
        case TJ_OP_SUM:
        case TJ_OP_MEAN:
          accd[k] += x;
          break;
        case TJ_OP_PROD:
          accd[k] *= x;
          break;
        // A NaN, once in, stays: NaN > y and y > NaN fail. -0 is below
        // +0 (IEEE 754-2019 maximum/minimum), so that a reduction's value
        // does not depend on its order: the compiled kernels combine in
        // lane trees.
        case TJ_OP_MAX:
          if (isnan(x) || x > accd[k] || (x == accd[k] && !signbit(x)))
            accd[k] = x;
          break;
        case TJ_OP_MIN:
          if (isnan(x) || x < accd[k] || (x == accd[k] && signbit(x)))
            accd[k] = x;
          break;
        case TJ_OP_ARGMAX:
          // The first NaN wins; otherwise the first maximum.
          if (it.index[argmax_axis] == 0 ||
              (!isnan(accd[k]) && (isnan(x) || x > accd[k]))) {
            accd[k] = x;
            arg[k] = it.index[argmax_axis];
          }
          break;
        case TJ_OP_ARGMIN:
          if (it.index[argmax_axis] == 0 ||
              (!isnan(accd[k]) && (isnan(x) || x < accd[k]))) {
            accd[k] = x;
            arg[k] = it.index[argmax_axis];
          }
          break;
        default:
          break;
      }
    }
  }

  for (int64_t k = 0; k < out_n; ++k) {
    if (is_arg) {
      tj_store_i64(out->dtype, out->data, k, arg[k]);
    } else if (exact) {
      int64_t r = acci[k];
      if (op == TJ_OP_MEAN) {
        r = !count ? 0
            : a->dtype == TJ_DTYPE_U64
                ? (int64_t)((uint64_t)r / (uint64_t)count)
                : r / count;
      }
      tj_store_i64(out->dtype, out->data, k, r);
    } else {
      double r = accd[k];
      if (op == TJ_OP_MEAN) r /= (double)count;  // 0 / 0 = NaN when empty
      tj_store_f64(out->dtype, out->data, k, r);
    }
  }
  scratch_free(run, arg, arg_bytes);
  scratch_free(run, acc, acc_bytes);
  return NULL;
}

//===----------------------------------------------------------------------===//
// Matmul and linear
//===----------------------------------------------------------------------===//

// Rows of a processed together (each row of b is then reused that many times)
// and the width of the column blocks (a block of an accumulator row stays in
// L1 across the k loop).
enum { kMatmulRows = 8, kMatmulCols = 512 };

// acc[r][j] += sum_k a[r][k] * b[k][j] over |rows| rows, all dense row-major
// doubles. The innermost loop runs along a row of b and of acc, contiguous
// and unaliased; its fixed-width chunks are what gcc's -O2 ("very cheap")
// vectorizer accepts, as a loop of unknown trip count would need peeling.
// The sum over k for each output is still taken in k order, like the naive
// loop, so the result does not depend on the blocking.
enum { kMatmulChunk = 8 };

static void matmul_block_f64(int64_t rows, int64_t k_dim, int64_t n_dim,
                             const double* restrict a, const double* restrict b,
                             double* restrict acc) {
  for (int64_t j0 = 0; j0 < n_dim; j0 += kMatmulCols) {
    const int64_t j1 = j0 + kMatmulCols < n_dim ? j0 + kMatmulCols : n_dim;
    for (int64_t k = 0; k < k_dim; ++k) {
      const double* restrict brow = b + k * n_dim;
      for (int64_t r = 0; r < rows; ++r) {
        const double av = a[r * k_dim + k];
        double* restrict arow = acc + r * n_dim;
        int64_t j = j0;
        for (; j + kMatmulChunk <= j1; j += kMatmulChunk) {
          for (int t = 0; t < kMatmulChunk; ++t)
            arow[j + t] += av * brow[j + t];
        }
        for (; j < j1; ++j) arow[j] += av * brow[j];
      }
    }
  }
}

// The integer form: exact, wrapping.
static void matmul_block_i64(int64_t rows, int64_t k_dim, int64_t n_dim,
                             const int64_t* restrict a,
                             const int64_t* restrict b, int64_t* restrict acc) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < k_dim; ++k) {
      const uint64_t av = (uint64_t)a[r * k_dim + k];
      const int64_t* restrict brow = b + k * n_dim;
      int64_t* restrict arow = acc + r * n_dim;
      for (int64_t j = 0; j < n_dim; ++j) {
        arow[j] = (int64_t)((uint64_t)arow[j] + av * (uint64_t)brow[j]);
      }
    }
  }
}

// numpy.matmul(a, b) (+ bias broadcast to the result when |bias| is not
// NULL), summed in double (int64 for integers) and rounded once. Operands
// are first put in the "full form" [batch..., M, K] x [batch..., K, N] ->
// [batch..., M, N], where a rank-1 a is one row (M = 1) and a rank-1 b one
// column (N = 1); the result's dense layout is the same either way.
// numpy.matmul of |a| and |b| (+ |bias|, or NULL) into node |index|.
static tj_status_t eval_matmul_views(run_t* run, uint32_t index,
                                     const view_t* a, const view_t* b,
                                     const view_t* bias) {
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  view_t* out = &run->values[index].view;

  const bool a_mat = a->rank >= 2, b_mat = b->rank >= 2;
  const int64_t m_dim = a_mat ? a->dims[a->rank - 2] : 1;
  const int64_t k_dim = a->dims[a->rank - 1];
  const int64_t a_sm = a_mat ? a->strides[a->rank - 2] : 0;
  const int64_t a_sk = a->strides[a->rank - 1];
  const int64_t kb_dim = b_mat ? b->dims[b->rank - 2] : b->dims[0];
  const int64_t n_dim = b_mat ? b->dims[b->rank - 1] : 1;
  const int64_t b_sk = b_mat ? b->strides[b->rank - 2] : b->strides[0];
  const int64_t b_sn = b_mat ? b->strides[b->rank - 1] : 0;
  const int32_t batch_rank = out->rank - (a_mat ? 1 : 0) - (b_mat ? 1 : 0);
  if (k_dim != kb_dim || batch_rank < 0) {
    return tj_internal("matmul (node %%%u): operand shapes do not contract",
                       index);
  }
  if (view_numel(out) == 0) return NULL;

  // Batch strides of a and b (broadcast over the result's batch dims), and
  // the bias's full-form strides.
  int64_t batch_strides[3][TJ_MAX_RANK];
  const view_t* sides[2] = {a, b};
  for (int s = 0; s < 2; ++s) {
    view_t batch = *sides[s];
    batch.rank = sides[s]->rank >= 2 ? sides[s]->rank - 2 : 0;
    broadcast_strides(&batch, batch_rank, out->dims, batch_strides[s]);
  }
  int64_t bias_sm = 0, bias_sn = 0;
  if (bias) {
    int64_t full[TJ_MAX_RANK];
    broadcast_strides(bias, out->rank, out->dims, full);
    for (int32_t d = 0; d < batch_rank; ++d) batch_strides[2][d] = full[d];
    if (a_mat) bias_sm = full[batch_rank];
    if (b_mat) bias_sn = full[out->rank - 1];
  } else {
    for (int32_t d = 0; d < batch_rank; ++d) batch_strides[2][d] = 0;
  }

  const bool exact = !tj_dtype_is_float(out->dtype);
  void *bmat = NULL, *amat = NULL, *acc = NULL;
  size_t bmat_bytes = 0, amat_bytes = 0, acc_bytes = 0;
  tj_status_t status = scratch_array(run, k_dim * n_dim, 8, &bmat, &bmat_bytes);
  if (!status) {
    status = scratch_array(run, kMatmulRows * k_dim, 8, &amat, &amat_bytes);
  }
  if (!status) {
    status = scratch_array(run, kMatmulRows * n_dim, 8, &acc, &acc_bytes);
  }
  if (status) {
    scratch_free(run, bmat, bmat_bytes);
    scratch_free(run, amat, amat_bytes);
    return status;
  }

  iter_t it;
  iter_initialize(&it, batch_rank, out->dims);
  for (int s = 0; s < 3; ++s) iter_add_operand(&it, batch_strides[s]);
  const int64_t batches = dims_numel(batch_rank, out->dims);
  bool have_b = false;      // whether |bmat| holds a converted matrix
  int64_t converted_b = 0;  // and the offset of that matrix in b
  for (int64_t batch = 0; batch < batches; ++batch, iter_next(&it)) {
    const int64_t a_off = it.offsets[0], b_off = it.offsets[1];
    const int64_t bias_off = it.offsets[2];
    // b is converted once per distinct matrix (once in all for a broadcast
    // weight).
    if (!have_b || b_off != converted_b) {
      for (int64_t k = 0; k < k_dim; ++k) {
        for (int64_t j = 0; j < n_dim; ++j) {
          int64_t off = b_off + k * b_sk + j * b_sn;
          if (exact) {
            ((int64_t*)bmat)[k * n_dim + j] =
                tj_load_i64(b->dtype, b->data, off);
          } else {
            ((double*)bmat)[k * n_dim + j] =
                tj_load_f64(b->dtype, b->data, off);
          }
        }
      }
      have_b = true;
      converted_b = b_off;
    }
    for (int64_t m0 = 0; m0 < m_dim; m0 += kMatmulRows) {
      const int64_t rows = m_dim - m0 < kMatmulRows ? m_dim - m0 : kMatmulRows;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < k_dim; ++k) {
          int64_t off = a_off + (m0 + r) * a_sm + k * a_sk;
          if (exact) {
            ((int64_t*)amat)[r * k_dim + k] =
                tj_load_i64(a->dtype, a->data, off);
          } else {
            ((double*)amat)[r * k_dim + k] =
                tj_load_f64(a->dtype, a->data, off);
          }
        }
      }
      memset(acc, 0, (size_t)(rows * n_dim) * 8);
      if (exact) {
        matmul_block_i64(rows, k_dim, n_dim, amat, bmat, acc);
      } else {
        matmul_block_f64(rows, k_dim, n_dim, amat, bmat, acc);
      }
      const int64_t out_row0 = (batch * m_dim + m0) * n_dim;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < n_dim; ++j) {
          const int64_t o = out_row0 + r * n_dim + j;
          const int64_t bo = bias_off + (m0 + r) * bias_sm + j * bias_sn;
          if (exact) {
            int64_t v = ((int64_t*)acc)[r * n_dim + j];
            if (bias) {
              v = (int64_t)((uint64_t)v +
                            (uint64_t)tj_load_i64(bias->dtype, bias->data, bo));
            }
            tj_store_i64(out->dtype, out->data, o, v);
          } else {
            double v = ((double*)acc)[r * n_dim + j];
            if (bias) v += tj_load_f64(bias->dtype, bias->data, bo);
            tj_store_f64(out->dtype, out->data, o, v);
          }
        }
      }
    }
  }
  scratch_free(run, acc, acc_bytes);
  scratch_free(run, amat, amat_bytes);
  scratch_free(run, bmat, bmat_bytes);
  return NULL;
}

static tj_status_t eval_matmul(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const view_t* bias =
      node->num_operands > 2 ? operand_view(run, index, 2) : NULL;
  return eval_matmul_views(run, index, operand_view(run, index, 0),
                           operand_view(run, index, 1), bias);
}

// qgemm (issue 17): |x| - |zp| (zp broadcast to x's shape; NULL: 0) as a
// dense i64 view over |*data| (allocated here, |*bytes| long).
static tj_status_t shifted_i64(run_t* run, const view_t* x, const view_t* zp,
                               view_t* out, void** data, size_t* bytes) {
  int64_t numel = view_numel(x);
  TJ_RETURN_IF_ERROR(scratch_array(run, numel > 0 ? numel : 1, 8, data, bytes));
  *out = *x;
  out->dtype = TJ_DTYPE_I64;
  out->data = *data;
  int64_t step = 1;
  for (int32_t d = x->rank - 1; d >= 0; --d) {
    out->strides[d] = step;
    step *= x->dims[d];
  }
  int64_t zs[TJ_MAX_RANK] = {0};
  if (zp) broadcast_strides(zp, x->rank, x->dims, zs);
  iter_t it;
  iter_initialize(&it, x->rank, x->dims);
  iter_add_operand(&it, x->strides);
  iter_add_operand(&it, zs);
  for (int64_t i = 0; i < numel; ++i, iter_next(&it)) {
    int64_t v = tj_load_i64(x->dtype, x->data, it.offsets[0]);
    if (zp) v -= tj_load_i64(zp->dtype, zp->data, it.offsets[1]);
    ((int64_t*)*data)[i] = v;
  }
  return NULL;
}

// matmul_integer: the matmul of (a - a_zp) and (b - b_zp), exact in i64,
// stored as i32.
static tj_status_t eval_matmul_integer(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const view_t* zp[2] = {NULL, NULL};
  for (uint32_t s = 2; s < 4 && s < node->num_operands; ++s) {
    if (node->operands[s] != TJ_NODE_NONE) {
      zp[s - 2] = operand_view(run, index, s);
    }
  }
  view_t v[2];
  void* data[2] = {NULL, NULL};
  size_t bytes[2] = {0, 0};
  tj_status_t status = NULL;
  for (uint32_t s = 0; s < 2 && !status; ++s) {
    status = shifted_i64(run, operand_view(run, index, s), zp[s], &v[s],
                         &data[s], &bytes[s]);
  }
  if (!status) status = eval_matmul_views(run, index, &v[0], &v[1], NULL);
  for (int s = 0; s < 2; ++s) scratch_free(run, data[s], bytes[s]);
  return status;
}

//===----------------------------------------------------------------------===//
// Lane ops: softmax, log_softmax (attr.axis), layer_norm, rms_norm (last)
//===----------------------------------------------------------------------===//

static tj_status_t eval_lanes(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const tj_op_t op = node->op;
  const view_t* x = operand_view(run, index, 0);
  const tj_node_t* first_node = node_at(run, node->operands[0]);
  // gamma, beta: absent operands stay NULL (then 1 and 0).
  const view_t* gamma =
      node->num_operands > 1 ? operand_view(run, index, 1) : NULL;
  const view_t* beta =
      node->num_operands > 2 ? operand_view(run, index, 2) : NULL;
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  view_t* out = &run->values[index].view;
  if (view_numel(out) == 0) return NULL;
  int32_t axis = (op == TJ_OP_SOFTMAX || op == TJ_OP_LOG_SOFTMAX)
                     ? (int32_t)node->attrs.axis
                     : x->rank - 1;
  // A rank-0 tensor is one lane of one element.
  view_t x1, out1;
  if (x->rank == 0) {
    x1 = *x;
    out1 = *out;
    x1.rank = out1.rank = 1;
    x1.dims[0] = out1.dims[0] = 1;
    x1.strides[0] = out1.strides[0] = 0;
    x = &x1;
    out = &out1;
    axis = 0;
  }
  const int64_t len = x->dims[axis];
  int64_t sg[TJ_MAX_RANK] = {0}, sb[TJ_MAX_RANK] = {0};
  if (gamma) broadcast_strides(gamma, x->rank, x->dims, sg);
  if (beta) broadcast_strides(beta, x->rank, x->dims, sb);
  // Iterate over the lanes' starts: the shape with the axis collapsed.
  int64_t lane_dims[TJ_MAX_RANK];
  for (int32_t d = 0; d < x->rank; ++d) lane_dims[d] = x->dims[d];
  lane_dims[axis] = 1;
  iter_t it;
  iter_initialize(&it, x->rank, lane_dims);
  iter_add_operand(&it, x->strides);
  iter_add_operand(&it, out->strides);
  iter_add_operand(&it, sg);
  iter_add_operand(&it, sb);
  const int64_t lanes = dims_numel(x->rank, lane_dims);
  const int64_t xs = x->strides[axis], os = out->strides[axis];
  const double eps = node->attrs.value;
  for (int64_t lane = 0; lane < lanes; ++lane, iter_next(&it)) {
    const int64_t x0 = it.offsets[0], o0 = it.offsets[1];
    const int64_t g0 = it.offsets[2], b0 = it.offsets[3];
#define X(t) tj_load_f64(x->dtype, x->data, x0 + (t) * xs)
    if (op == TJ_OP_SOFTMAX || op == TJ_OP_LOG_SOFTMAX) {
      double max = -INFINITY;
      for (int64_t t = 0; t < len; ++t) {
        double v = X(t);
        if (isnan(v) || v > max) max = isnan(max) ? max : v;
      }
      double sum = 0.0;
      for (int64_t t = 0; t < len; ++t) sum += exp(X(t) - max);
      const double log_sum = log(sum);
      for (int64_t t = 0; t < len; ++t) {
        double r =
            op == TJ_OP_SOFTMAX ? exp(X(t) - max) / sum : X(t) - max - log_sum;
        tj_store_f64(out->dtype, out->data, o0 + t * os, r);
      }
    } else {
      double scale;
      double mean = 0.0;
      double shift = 0.0;
      double correction = 0.0;
      if (op == TJ_OP_LAYER_NORM) {
        // Shifted data, s as the decomposition takes it
        // (tj_layer_norm_shifts_by_first): x - s is exact here, and the
        // exact zeros of (x - s) - mean(x - s) carry its signs.
        shift = X(0);
        if (!tj_layer_norm_shifts_by_first(first_node->rank,
                                           first_node->dims)) {
          for (int64_t t = 1; t < len; ++t) {  // max, -0 below +0
            double v = X(t);
            if (isnan(shift)) break;
            if (isnan(v) || v > shift || (v == shift && !signbit(v))) shift = v;
          }
        }
        // m = s + mean(x - s), c = x - m, then c - mean(c): the
        // decomposition's form (lib/passes/decompose.c), in double.
        for (int64_t t = 0; t < len; ++t) mean += X(t) - shift;
        mean = shift + mean / (double)len;
        for (int64_t t = 0; t < len; ++t) correction += X(t) - mean;
        correction /= (double)len;
        double var = 0.0;
        for (int64_t t = 0; t < len; ++t) {
          double c = X(t) - mean;
          var += c * c;
        }
        var /= (double)len;
        scale = 1.0 / sqrt(var + eps);
      } else {  // rms_norm: no centring
        double sq = 0.0;
        for (int64_t t = 0; t < len; ++t) sq += X(t) * X(t);
        scale = 1.0 / sqrt(sq / (double)len + eps);
      }
      for (int64_t t = 0; t < len; ++t) {
        double r = (X(t) - mean - correction) * scale;
        if (gamma) {
          r *= tj_load_f64(gamma->dtype, gamma->data, g0 + t * sg[axis]);
        }
        if (beta) {
          r += tj_load_f64(beta->dtype, beta->data, b0 + t * sb[axis]);
        }
        tj_store_f64(out->dtype, out->data, o0 + t * os, r);
      }
    }
#undef X
  }
  return NULL;
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

// reshape, transpose, broadcast_to and slice: a view of the operand, copied
// into the dense result.
static tj_status_t eval_view_op(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const view_t* a = operand_view(run, index, 0);
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  view_t* out = &run->values[index].view;
  view_t src = *a;
  switch (node->op) {
    case TJ_OP_RESHAPE:
      break;  // a's row-major order is the result's
    case TJ_OP_TRANSPOSE:
      for (int32_t d = 0; d < out->rank; ++d) {
        int64_t from = node->attrs.ints[d];
        src.dims[d] = a->dims[from];
        src.strides[d] = a->strides[from];
      }
      break;
    case TJ_OP_BROADCAST_TO:
      src.rank = out->rank;
      broadcast_strides(a, out->rank, out->dims, src.strides);
      for (int32_t d = 0; d < out->rank; ++d) src.dims[d] = out->dims[d];
      break;
    case TJ_OP_SLICE: {
      // ints = starts, stops, steps, already normalized (start in [0, dim]);
      // the result's dims are the element counts.
      // Indexed, not offset: ints is NULL for rank 0.
      const int64_t* ints = node->attrs.ints;
      int64_t offset = 0;
      for (int32_t d = 0; d < a->rank; ++d) {
        src.dims[d] = out->dims[d];
        src.strides[d] = a->strides[d] * ints[2 * a->rank + d];
        offset += ints[d] * a->strides[d];
      }
      // An empty result reads nothing (and its start may be one past the
      // end).
      if (view_numel(out) > 0) src.data = elem_ptr(a, offset);
      break;
    }
    default:
      return tj_internal("%s (node %%%u) is not a view op", op_name(node->op),
                         index);
  }
  copy_to_dense(&src, out->data);
  return NULL;
}

static tj_status_t eval_concat(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  view_t* out = &run->values[index].view;
  const int32_t axis = (int32_t)node->attrs.axis;
  int64_t start = 0;
  for (uint32_t k = 0; k < node->num_operands; ++k) {
    const view_t* part = operand_view(run, index, k);
    view_t dst = *out;
    dst.dims[axis] = part->dims[axis];
    if (view_numel(part) > 0) {
      dst.data = elem_ptr(out, start * out->strides[axis]);
      copy_view(part, &dst);
    }
    start += part->dims[axis];
  }
  return NULL;
}

static tj_status_t eval_pad(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const view_t* a = operand_view(run, index, 0);
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  view_t* out = &run->values[index].view;
  const int64_t n = view_numel(out);
  for (int64_t i = 0; i < n; ++i) {
    tj_store_f64(out->dtype, out->data, i, node->attrs.value);
  }
  if (view_numel(a) == 0) return NULL;
  const int64_t* low = node->attrs.ints;  // then high[rank]
  view_t dst = *out;
  int64_t offset = 0;
  for (int32_t d = 0; d < a->rank; ++d) {
    dst.dims[d] = a->dims[d];
    offset += low[d] * out->strides[d];
  }
  dst.data = elem_ptr(out, offset);
  copy_view(a, &dst);
  return NULL;
}

// numpy.take(a, indices, axis): out = a.shape[:axis] + indices.shape +
// a.shape[axis+1:]. A negative index counts from the end (once); the
// result is then clamped into [0, n - 1] (lib/ops.def), so every index
// picks a row. Only an empty axis has no row to pick: an error when there
// are indices, checked first so that an error leaves no partial work.
static tj_status_t eval_gather(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const view_t* a = operand_view(run, index, 0);
  const view_t* idx = operand_view(run, index, 1);
  const int32_t axis = (int32_t)node->attrs.axis;
  const int64_t axis_len = a->dims[axis];
  const int64_t num_idx = view_numel(idx);
  if (num_idx > 0 && axis_len == 0 && dims_numel(axis, a->dims) > 0 &&
      dims_numel(a->rank - axis - 1, a->dims + axis + 1) > 0) {
    char shape[160];
    format_shape(a->dtype, a->rank, a->dims, shape, sizeof(shape));
    return tj_invalid("gather (node %%%u): axis %d of %s is empty", index, axis,
                      shape);
  }

  int64_t* picks = NULL;
  size_t picks_bytes = 0;
  TJ_RETURN_IF_ERROR(scratch_array(run, num_idx, sizeof(int64_t),
                                   (void**)&picks, &picks_bytes));
  if (num_idx > 0) {
    iter_t it;
    iter_initialize(&it, idx->rank, idx->dims);
    iter_add_operand(&it, idx->strides);
    for (int64_t j = 0; j < num_idx; ++j, iter_next(&it)) {
      int64_t v = tj_load_i64(idx->dtype, idx->data, it.offsets[0]);
      int64_t p = v < 0 ? v + axis_len : v;
      if (p >= axis_len) p = axis_len - 1;
      if (p < 0) p = 0;
      picks[j] = p;
    }
  }
  tj_status_t status = allocate_result(run, index);
  if (status || view_numel(&run->values[index].view) == 0) {
    scratch_free(run, picks, picks_bytes);
    return status;
  }
  view_t* out = &run->values[index].view;
  const size_t es = tj_dtype_size(a->dtype);
  const int64_t outer = dims_numel(axis, a->dims);
  const int32_t inner_rank = a->rank - axis - 1;
  const int64_t inner = dims_numel(inner_rank, a->dims + axis + 1);
  iter_t outer_it;
  iter_initialize(&outer_it, axis, a->dims);
  iter_add_operand(&outer_it, a->strides);
  int64_t o = 0;  // next output element (dense)
  for (int64_t i = 0; i < outer; ++i, iter_next(&outer_it)) {
    for (int64_t j = 0; j < num_idx; ++j) {
      const int64_t base = outer_it.offsets[0] + picks[j] * a->strides[axis];
      iter_t in_it;
      iter_initialize(&in_it, inner_rank, a->dims + axis + 1);
      iter_add_operand(&in_it, a->strides + axis + 1);
      for (int64_t t = 0; t < inner; ++t, iter_next(&in_it)) {
        memcpy(out->data + (size_t)o * es, elem_ptr(a, base + in_it.offsets[0]),
               es);
        ++o;
      }
    }
  }
  scratch_free(run, picks, picks_bytes);
  return NULL;
}

// one_hot (ONNX OneHot): y = values[1] where y's index along the axis
// equals the index (plus depth when negative), else values[0]; an index out
// of range after that matches nothing.
// ops (issue 15): an index |v| along an axis of |n| > 0 elements, as
// gather treats it: negative wraps once, then clamped into [0, n - 1].
static int64_t pick_index(int64_t v, int64_t n) {
  int64_t p = v < 0 ? v + n : v;
  if (p >= n) p = n - 1;
  return p < 0 ? 0 : p;
}

static tj_status_t empty_axis_error(const tj_node_t* node, uint32_t index,
                                    const view_t* a, int32_t axis) {
  char shape[160];
  format_shape(a->dtype, a->rank, a->dims, shape, sizeof(shape));
  return tj_invalid("%s (node %%%u): axis %d of %s is empty",
                    tj_op_info(node->op)->name, index, axis, shape);
}

// numpy.take_along_axis: y[i] = a[i with i[axis] = pick(indices[i])].
static tj_status_t eval_gather_elements(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const view_t* a = operand_view(run, index, 0);
  const view_t* idx = operand_view(run, index, 1);
  const int32_t axis = (int32_t)node->attrs.axis;
  const int64_t n = a->dims[axis], count = view_numel(idx);
  if (count > 0 && n == 0) return empty_axis_error(node, index, a, axis);
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  if (count == 0) return NULL;
  view_t* out = &run->values[index].view;
  const size_t es = tj_dtype_size(a->dtype);
  int64_t astr[TJ_MAX_RANK];
  memcpy(astr, a->strides, sizeof(astr));
  astr[axis] = 0;
  iter_t it;
  iter_initialize(&it, idx->rank, idx->dims);
  iter_add_operand(&it, idx->strides);
  iter_add_operand(&it, astr);
  for (int64_t o = 0; o < count; ++o, iter_next(&it)) {
    int64_t p =
        pick_index(tj_load_i64(idx->dtype, idx->data, it.offsets[0]), n);
    memcpy(out->data + (size_t)o * es,
           elem_ptr(a, it.offsets[1] + p * a->strides[axis]), es);
  }
  return NULL;
}

// ops3 (issue 15): cumsum and cumprod along attr.axis, attr.ints =
// [exclusive, reverse]: floats accumulate in f64 (rounded once per element
// stored), integers in i64 with wrapping (the store keeps the low bits).
static tj_status_t eval_scan(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const view_t* a = operand_view(run, index, 0);
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  view_t* out = &run->values[index].view;
  if (view_numel(out) == 0) return NULL;
  const int32_t axis = (int32_t)node->attrs.axis, rank = a->rank;
  const bool exclusive = node->attrs.ints[0] != 0;
  const bool reverse = node->attrs.ints[1] != 0;
  const bool prod = node->op == TJ_OP_CUMPROD;
  const bool fl = tj_dtype_is_float(a->dtype);
  const int64_t n = a->dims[axis];
  int64_t dense[TJ_MAX_RANK], rows[TJ_MAX_RANK];
  int64_t step = 1;
  for (int32_t d = rank; d-- > 0;) {
    dense[d] = step;
    step *= a->dims[d];
  }
  memcpy(rows, a->dims, sizeof(int64_t) * (size_t)rank);
  rows[axis] = 1;
  iter_t it;
  iter_initialize(&it, rank, rows);
  iter_add_operand(&it, a->strides);
  iter_add_operand(&it, dense);
  const int64_t num_rows = dims_numel(rank, rows);
  for (int64_t r = 0; r < num_rows; ++r, iter_next(&it)) {
    double f = prod ? 1.0 : 0.0;
    uint64_t u = prod ? 1 : 0;
    for (int64_t s = 0; s < n; ++s) {
      int64_t k = reverse ? n - 1 - s : s;
      int64_t ia = it.offsets[0] + k * a->strides[axis];
      int64_t io = it.offsets[1] + k * dense[axis];
      if (fl) {
        double x = tj_load_f64(a->dtype, a->data, ia);
        if (!exclusive) f = prod ? f * x : f + x;
        tj_store_f64(out->dtype, out->data, io, f);
        if (exclusive) f = prod ? f * x : f + x;
      } else {
        uint64_t x = (uint64_t)tj_load_i64(a->dtype, a->data, ia);
        if (!exclusive) u = prod ? u * x : u + x;
        tj_store_i64(out->dtype, out->data, io, (int64_t)u);
        if (exclusive) u = prod ? u * x : u + x;
      }
    }
  }
  return NULL;
}

// topk (issue 15): argtopk, a stable merge sort of each row by key
// (numpy.argsort(kind="stable")), then its first k indices.
typedef struct topk_entry_t {
  double f;    // float keys
  int64_t i;   // integer keys (u64 as its bits)
  int64_t at;  // the index along the axis
} topk_entry_t;

typedef struct topk_order_t {
  bool fl, unsigned_, largest;
} topk_order_t;

// Whether |x| ranks strictly before |y|: NaN is the largest float, and
// equal keys never rank before each other (the sort keeps index order).
static bool topk_before(const topk_order_t* o, const topk_entry_t* x,
                        const topk_entry_t* y) {
  if (o->fl) {
    bool xn = isnan(x->f), yn = isnan(y->f);
    if (xn || yn) return o->largest ? xn && !yn : yn && !xn;
    return o->largest ? x->f > y->f : x->f < y->f;
  }
  if (o->unsigned_) {
    uint64_t a = (uint64_t)x->i, b = (uint64_t)y->i;
    return o->largest ? a > b : a < b;
  }
  return o->largest ? x->i > y->i : x->i < y->i;
}

// Bottom-up merge sort of |e| (n entries) through |tmp|; a tie takes the
// left run's entry first, which keeps it stable.
static void topk_sort(const topk_order_t* o, topk_entry_t* e, topk_entry_t* tmp,
                      int64_t n) {
  for (int64_t width = 1; width < n; width *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * width) {
      int64_t mid = lo + width < n ? lo + width : n;
      int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
      int64_t i = lo, j = mid, t = lo;
      while (i < mid && j < hi)
        tmp[t++] = topk_before(o, &e[j], &e[i]) ? e[j++] : e[i++];
      while (i < mid) tmp[t++] = e[i++];
      while (j < hi) tmp[t++] = e[j++];
    }
    memcpy(e, tmp, (size_t)n * sizeof(*e));
  }
}

static tj_status_t eval_topk(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const view_t* a = operand_view(run, index, 0);
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  view_t* out = &run->values[index].view;
  const int32_t axis = (int32_t)node->attrs.axis, rank = a->rank;
  const int64_t n = a->dims[axis], k = out->dims[axis];
  if (view_numel(out) == 0) return NULL;
  topk_order_t order = {tj_dtype_is_float(a->dtype),
                        tj_dtype_is_unsigned(a->dtype),
                        node->attrs.ints[1] != 0};
  size_t bytes = 0;
  topk_entry_t* e = NULL;
  TJ_RETURN_IF_ERROR(scratch_array(run, 2 * n, sizeof(*e), (void**)&e, &bytes));
  int64_t dense[TJ_MAX_RANK], rows[TJ_MAX_RANK];
  int64_t step = 1;
  for (int32_t d = rank; d-- > 0;) {
    dense[d] = step;
    step *= out->dims[d];
  }
  memcpy(rows, a->dims, sizeof(int64_t) * (size_t)rank);
  rows[axis] = 1;
  iter_t it;
  iter_initialize(&it, rank, rows);
  iter_add_operand(&it, a->strides);
  iter_add_operand(&it, dense);
  const int64_t num_rows = dims_numel(rank, rows);
  for (int64_t r = 0; r < num_rows; ++r, iter_next(&it)) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t ia = it.offsets[0] + j * a->strides[axis];
      e[j].at = j;
      if (order.fl)
        e[j].f = tj_load_f64(a->dtype, a->data, ia);
      else
        e[j].i = tj_load_i64(a->dtype, a->data, ia);
    }
    topk_sort(&order, e, e + n, n);
    for (int64_t j = 0; j < k; ++j)
      tj_store_i64(out->dtype, out->data, it.offsets[1] + j * dense[axis],
                   e[j].at);
  }
  scratch_free(run, e, bytes);
  return NULL;
}

// ONNX GatherND with b = attr.axis batch dims and k = indices' last dim.
static tj_status_t eval_gather_nd(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const view_t* a = operand_view(run, index, 0);
  const view_t* idx = operand_view(run, index, 1);
  const int32_t b = (int32_t)node->attrs.axis, q = idx->rank;
  const int32_t k = (int32_t)idx->dims[q - 1];
  const int32_t inner_rank = a->rank - b - k;
  const int64_t outer = dims_numel(q - 1, idx->dims);
  const int64_t inner = dims_numel(inner_rank, a->dims + b + k);
  if (outer * inner > 0) {
    for (int32_t j = 0; j < k; ++j) {
      if (a->dims[b + j] == 0) return empty_axis_error(node, index, a, b + j);
    }
  }
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  if (outer * inner == 0) return NULL;
  view_t* out = &run->values[index].view;
  const size_t es = tj_dtype_size(a->dtype);
  int64_t astr[TJ_MAX_RANK] = {0};
  for (int32_t d = 0; d < b; ++d) astr[d] = a->strides[d];
  iter_t it;
  iter_initialize(&it, q - 1, idx->dims);
  iter_add_operand(&it, idx->strides);
  iter_add_operand(&it, astr);
  int64_t o = 0;  // next output element (dense)
  for (int64_t i = 0; i < outer; ++i, iter_next(&it)) {
    int64_t base = it.offsets[1];
    for (int32_t j = 0; j < k; ++j) {
      int64_t v = tj_load_i64(idx->dtype, idx->data,
                              it.offsets[0] + j * idx->strides[q - 1]);
      base += pick_index(v, a->dims[b + j]) * a->strides[b + j];
    }
    iter_t in_it;
    iter_initialize(&in_it, inner_rank, a->dims + b + k);
    iter_add_operand(&in_it, a->strides + b + k);
    for (int64_t t = 0; t < inner; ++t, iter_next(&in_it)) {
      memcpy(out->data + (size_t)o * es, elem_ptr(a, base + in_it.offsets[0]),
             es);
      ++o;
    }
  }
  return NULL;
}

// scatter (issue 15): out[o] combined with update |u| by |reduction|
// (tj_scatter_reduction_t), rounded to the dtype at each update as the
// kernels store it: floats in f64 (exact for the sum or product of two
// f32 before that rounding), integers in i64 wrapping, NaN propagating
// through max and min.
static void scatter_one(const view_t* out, int64_t o, const view_t* up,
                        int64_t u, int64_t reduction) {
  if (reduction == TJ_SCATTER_REDUCTION_NONE) {
    memcpy(elem_ptr(out, o), elem_ptr(up, u), tj_dtype_size(out->dtype));
    return;
  }
  if (tj_dtype_is_float(out->dtype)) {
    double x = tj_load_f64(out->dtype, out->data, o);
    double y = tj_load_f64(up->dtype, up->data, u);
    double r = reduction == TJ_SCATTER_REDUCTION_ADD   ? x + y
               : reduction == TJ_SCATTER_REDUCTION_MUL ? x * y
               : isnan(x) || isnan(y)                  ? NAN
               : reduction == TJ_SCATTER_REDUCTION_MAX ? (x > y ? x : y)
                                                       : (x < y ? x : y);
    tj_store_f64(out->dtype, out->data, o, r);
    return;
  }
  int64_t x = tj_load_i64(out->dtype, out->data, o);
  int64_t y = tj_load_i64(up->dtype, up->data, u);
  int64_t r = reduction == TJ_SCATTER_REDUCTION_ADD
                  ? (int64_t)((uint64_t)x + (uint64_t)y)
              : reduction == TJ_SCATTER_REDUCTION_MUL
                  ? (int64_t)((uint64_t)x * (uint64_t)y)
              : reduction == TJ_SCATTER_REDUCTION_MAX ? (x > y ? x : y)
                                                      : (x < y ? x : y);
  tj_store_i64(out->dtype, out->data, o, r);
}

// ONNX ScatterElements and ScatterND: y = data, then every update in
// row-major order (the last of duplicates wins, or they combine in that
// order), each index treated as gather's. Updates aimed at an empty axis
// are an error, checked before anything is written.
static tj_status_t eval_scatter(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const view_t* data = operand_view(run, index, 0);
  const view_t* idx = operand_view(run, index, 1);
  const view_t* up = operand_view(run, index, 2);
  const int64_t reduction = node->attrs.ints[0];
  const bool nd = node->op == TJ_OP_SCATTER_ND;
  const int32_t axis = (int32_t)node->attrs.axis;
  const int32_t k = nd ? (int32_t)idx->dims[idx->rank - 1] : 1;
  const int64_t count = view_numel(up);
  for (int32_t j = 0; count > 0 && j < k; ++j) {
    int32_t d = nd ? j : axis;
    if (data->dims[d] == 0) return empty_axis_error(node, index, data, d);
  }
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  view_t* out = &run->values[index].view;
  copy_view(data, out);
  if (count == 0) return NULL;
  if (!nd) {
    int64_t ostr[TJ_MAX_RANK];
    memcpy(ostr, out->strides, sizeof(ostr));
    ostr[axis] = 0;
    iter_t it;
    iter_initialize(&it, idx->rank, idx->dims);
    iter_add_operand(&it, idx->strides);
    iter_add_operand(&it, up->strides);
    iter_add_operand(&it, ostr);
    for (int64_t i = 0; i < count; ++i, iter_next(&it)) {
      int64_t p = pick_index(tj_load_i64(idx->dtype, idx->data, it.offsets[0]),
                             data->dims[axis]);
      scatter_one(out, it.offsets[2] + p * out->strides[axis], up,
                  it.offsets[1], reduction);
    }
    return NULL;
  }
  const int32_t q = idx->rank, inner_rank = data->rank - k;
  const int64_t outer = dims_numel(q - 1, idx->dims);
  const int64_t inner = dims_numel(inner_rank, data->dims + k);
  iter_t it;
  iter_initialize(&it, q - 1, idx->dims);
  iter_add_operand(&it, idx->strides);
  iter_add_operand(&it, up->strides);
  for (int64_t i = 0; i < outer; ++i, iter_next(&it)) {
    int64_t base = 0;
    for (int32_t j = 0; j < k; ++j) {
      int64_t v = tj_load_i64(idx->dtype, idx->data,
                              it.offsets[0] + j * idx->strides[q - 1]);
      base += pick_index(v, data->dims[j]) * out->strides[j];
    }
    iter_t in_it;
    iter_initialize(&in_it, inner_rank, data->dims + k);
    iter_add_operand(&in_it, out->strides + k);
    iter_add_operand(&in_it, up->strides + q - 1);
    for (int64_t t = 0; t < inner; ++t, iter_next(&in_it)) {
      scatter_one(out, base + in_it.offsets[0], up,
                  it.offsets[1] + in_it.offsets[1], reduction);
    }
  }
  return NULL;
}

static tj_status_t eval_one_hot(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const view_t* ix = operand_view(run, index, 0);
  const view_t* v = operand_view(run, index, 1);
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  view_t* out = &run->values[index].view;
  const int64_t n = view_numel(out);
  if (n == 0) return NULL;
  const int32_t axis = (int32_t)node->attrs.axis;
  const int64_t depth = out->dims[axis];
  const size_t es = tj_dtype_size(out->dtype);
  int64_t istrides[TJ_MAX_RANK];
  for (int32_t d = 0, j = 0; d < out->rank; ++d) {
    istrides[d] = d == axis ? 0 : ix->strides[j++];
  }
  iter_t it;
  iter_initialize(&it, out->rank, out->dims);
  iter_add_operand(&it, istrides);
  iter_add_operand(&it, out->strides);
  for (int64_t k = 0; k < n; ++k, iter_next(&it)) {
    int64_t i = tj_load_i64(ix->dtype, ix->data, it.offsets[0]);
    if (i < 0) i += depth;
    int64_t pick = i == it.index[axis] ? 1 : 0;
    memcpy(elem_ptr(out, it.offsets[1]), elem_ptr(v, pick * v->strides[0]), es);
  }
  return NULL;
}

//===----------------------------------------------------------------------===//
// Convolution and pooling (lib/window.h), directly from the definitions
//===----------------------------------------------------------------------===//

// One spatial layout for 1 to 3 axes: missing axes are size 1 with a
// kernel, stride and dilation of 1 and no padding.
typedef struct win3_t {
  int64_t in[3], out[3], k[3], s[3], d[3], lo[3], hi[3];
  int64_t xs[3], ws[3];  // x's and w's element strides per axis
} win3_t;

static void win3_init(win3_t* v, const tj_window_t* w, const view_t* x,
                      const view_t* wt, const view_t* out) {
  for (int32_t a = 0; a < 3; ++a) {
    int32_t i = a - (3 - w->n);  // spatial axes are the last n of 3
    bool real = i >= 0;
    v->in[a] = real ? x->dims[2 + i] : 1;
    v->out[a] = real ? out->dims[2 + i] : 1;
    v->k[a] = real ? w->kernel[i] : 1;
    v->s[a] = real ? w->strides[i] : 1;
    v->d[a] = real ? w->dilations[i] : 1;
    v->lo[a] = real ? w->low[i] : 0;
    v->hi[a] = real ? w->high[i] : 0;
    v->xs[a] = real ? x->strides[2 + i] : 0;
    v->ws[a] = real && wt ? wt->strides[2 + i] : 0;
  }
}

// |v| converted to double, dense row-major, in a scratch array (NULL for an
// empty view): the direct conv below reads each x and w element once per
// tap it meets, and a conversion per read (tj_load_f64) was most of its
// time. The values are those tj_load_f64 gives, so the sums are the same.
static tj_status_t dense_f64(run_t* run, const view_t* v, double** out,
                             size_t* out_bytes) {
  const int64_t n = view_numel(v);
  TJ_RETURN_IF_ERROR(
      scratch_array(run, n, sizeof(double), (void**)out, out_bytes));
  if (n == 0) return NULL;
  iter_t it;
  iter_initialize(&it, v->rank, v->dims);
  iter_add_operand(&it, v->strides);
  for (int64_t i = 0; i < n; ++i, iter_next(&it))
    (*out)[i] = tj_load_f64(v->dtype, v->data, it.offsets[0]);
  return NULL;
}

// |v|'s dims with |data| dense row-major (element strides).
static view_t dense_view(const view_t* v, double* data) {
  view_t d = *v;
  d.dtype = TJ_DTYPE_F64;
  d.data = (unsigned char*)data;
  int64_t stride = 1;
  for (int32_t a = v->rank - 1; a >= 0; --a) {
    d.strides[a] = stride;
    stride *= v->dims[a];
  }
  return d;
}

// A conv's taps along one axis for output position |j|: the k in [*lo,
// *hi) whose input position j * s + k * d - pad lies in [0, in) (one run of
// k, increasing with it), and that position at k = 0 (*base).
static void conv_taps(const win3_t* v, int32_t a, int64_t j, int64_t* lo,
                      int64_t* hi, int64_t* base) {
  const int64_t p = j * v->s[a] - v->lo[a], d = v->d[a];
  const int64_t first = p >= 0 ? 0 : (-p + d - 1) / d;
  const int64_t end = v->in[a] - p <= 0 ? 0 : (v->in[a] - p + d - 1) / d;
  *lo = first;
  *hi = end < v->k[a] ? end : v->k[a];
  *base = p;
}

// conv (cross-correlation, groups) on dense double copies of x and w
// (dense_f64): each output element sums x * w over its group's channels and
// the taps inside x, in the order c, k0, k1, k2 (a tap in the padding adds
// nothing), in double, plus the bias, rounded once.
static tj_status_t eval_conv(run_t* run, const tj_window_t* w, const view_t* x,
                             const view_t* wt, const view_t* bias,
                             const view_t* out) {
  double *xf = NULL, *wf = NULL;
  size_t xf_bytes = 0, wf_bytes = 0;
  TJ_RETURN_IF_ERROR(dense_f64(run, x, &xf, &xf_bytes));
  tj_status_t status = dense_f64(run, wt, &wf, &wf_bytes);
  if (status) {
    scratch_free(run, xf, xf_bytes);
    return status;
  }
  const view_t xd = dense_view(x, xf), wd = dense_view(wt, wf);
  win3_t v;
  win3_init(&v, w, &xd, &wd, out);
  const int64_t batch = out->dims[0], out_c = out->dims[1];
  const int64_t cg = x->dims[1] / w->groups, og = out_c / w->groups;
  int64_t e = 0;  // the dense output element
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t o = 0; o < out_c; ++o)
      for (int64_t j0 = 0; j0 < v.out[0]; ++j0)
        for (int64_t j1 = 0; j1 < v.out[1]; ++j1)
          for (int64_t j2 = 0; j2 < v.out[2]; ++j2, ++e) {
            int64_t lo0, hi0, p0, lo1, hi1, p1, lo2, hi2, p2;
            conv_taps(&v, 0, j0, &lo0, &hi0, &p0);
            conv_taps(&v, 1, j1, &lo1, &hi1, &p1);
            conv_taps(&v, 2, j2, &lo2, &hi2, &p2);
            const int64_t c0 = (o / og) * cg;  // o's group's channels
            double acc = 0;
            for (int64_t c = c0; c < c0 + cg; ++c) {
              const int64_t xc = b * xd.strides[0] + c * xd.strides[1];
              const int64_t wc = o * wd.strides[0] + (c - c0) * wd.strides[1];
              for (int64_t k0 = lo0; k0 < hi0; ++k0) {
                const int64_t x0 = xc + (p0 + k0 * v.d[0]) * v.xs[0];
                const int64_t w0 = wc + k0 * v.ws[0];
                for (int64_t k1 = lo1; k1 < hi1; ++k1) {
                  const int64_t x1 = x0 + (p1 + k1 * v.d[1]) * v.xs[1];
                  const int64_t w1 = w0 + k1 * v.ws[1];
                  for (int64_t k2 = lo2; k2 < hi2; ++k2) {
                    acc += xf[x1 + (p2 + k2 * v.d[2]) * v.xs[2]] *
                           wf[w1 + k2 * v.ws[2]];
                  }
                }
              }
            }
            double r = acc;
            if (bias)
              r += tj_load_f64(bias->dtype, bias->data, o * bias->strides[0]);
            tj_store_f64(out->dtype, out->data, e, r);
          }
  scratch_free(run, wf, wf_bytes);
  scratch_free(run, xf, xf_bytes);
  return NULL;
}

static tj_status_t eval_window(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const tj_op_t op = node->op;
  const tj_window_t w = tj_window_of(&node->attrs);
  const view_t* x = operand_view(run, index, 0);
  const bool conv = op == TJ_OP_CONV || op == TJ_OP_CONV_TRANSPOSE;
  const view_t* wt = conv ? operand_view(run, index, 1) : NULL;
  const view_t* bias = conv ? operand_view(run, index, 2) : NULL;
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  view_t* out = &run->values[index].view;
  const int64_t numel = view_numel(out);
  if (numel == 0) return NULL;
  win3_t v;
  win3_init(&v, &w, x, wt, out);
  const int64_t batch = out->dims[0], out_c = out->dims[1];
  const int64_t in_c = x->dims[1];
  const int64_t plane = v.out[0] * v.out[1] * v.out[2];
  if (op == TJ_OP_CONV_TRANSPOSE) {
    // Scatter every x element through the kernel into a dense double
    // accumulator laid out like the result.
    double* acc = NULL;
    size_t acc_bytes = 0;
    TJ_RETURN_IF_ERROR(
        scratch_array(run, numel, sizeof(double), (void**)&acc, &acc_bytes));
    memset(acc, 0, acc_bytes);
    const int64_t cg = in_c / w.groups, og = out_c / w.groups;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t c = 0; c < in_c; ++c) {
        const int64_t g = c / cg;
        for (int64_t i0 = 0; i0 < v.in[0]; ++i0)
          for (int64_t i1 = 0; i1 < v.in[1]; ++i1)
            for (int64_t i2 = 0; i2 < v.in[2]; ++i2) {
              const double xv =
                  tj_load_f64(x->dtype, x->data,
                              b * x->strides[0] + c * x->strides[1] +
                                  i0 * v.xs[0] + i1 * v.xs[1] + i2 * v.xs[2]);
              for (int64_t k0 = 0; k0 < v.k[0]; ++k0) {
                int64_t j0 = i0 * v.s[0] + k0 * v.d[0] - v.lo[0];
                if (j0 < 0 || j0 >= v.out[0]) continue;
                for (int64_t k1 = 0; k1 < v.k[1]; ++k1) {
                  int64_t j1 = i1 * v.s[1] + k1 * v.d[1] - v.lo[1];
                  if (j1 < 0 || j1 >= v.out[1]) continue;
                  for (int64_t k2 = 0; k2 < v.k[2]; ++k2) {
                    int64_t j2 = i2 * v.s[2] + k2 * v.d[2] - v.lo[2];
                    if (j2 < 0 || j2 >= v.out[2]) continue;
                    const int64_t woff = c * wt->strides[0] + k0 * v.ws[0] +
                                         k1 * v.ws[1] + k2 * v.ws[2];
                    const int64_t ooff = (j0 * v.out[1] + j1) * v.out[2] + j2;
                    for (int64_t o = 0; o < og; ++o) {
                      double wv = tj_load_f64(wt->dtype, wt->data,
                                              woff + o * wt->strides[1]);
                      acc[(b * out_c + g * og + o) * plane + ooff] += xv * wv;
                    }
                  }
                }
              }
            }
      }
    for (int64_t e = 0; e < numel; ++e) {
      double r = acc[e];
      if (bias) {
        int64_t o = (e / plane) % out_c;
        r += tj_load_f64(bias->dtype, bias->data, o * bias->strides[0]);
      }
      tj_store_f64(out->dtype, out->data, e, r);
    }
    scratch_free(run, acc, acc_bytes);
    return NULL;
  }
  if (op == TJ_OP_CONV) return eval_conv(run, &w, x, wt, bias, out);
  // A pool: each output element's window over its own channel.
  const bool include_pad = (w.flags & TJ_WINDOW_COUNT_INCLUDE_PAD) != 0;
  const bool int_pool = op == TJ_OP_MAX_POOL && tj_dtype_is_int(x->dtype);
  const bool unsigned_pool = x->dtype == TJ_DTYPE_U64;
  int64_t e = 0;  // the dense output element
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t o = 0; o < out_c; ++o)
      for (int64_t j0 = 0; j0 < v.out[0]; ++j0)
        for (int64_t j1 = 0; j1 < v.out[1]; ++j1)
          for (int64_t j2 = 0; j2 < v.out[2]; ++j2, ++e) {
            const int64_t c = o;
            double acc = 0, best = -INFINITY;
            // An integer max_pool compares exactly in int64 (u64 unsigned)
            // from the dtype's lowest value, its pad.
            int64_t ibest = tj_dtype_int_lowest(x->dtype);
            int64_t inside = 0, padded = 0;
            for (int64_t k0 = 0; k0 < v.k[0]; ++k0) {
              int64_t p0 = j0 * v.s[0] + k0 * v.d[0] - v.lo[0];
              if (p0 < -v.lo[0] || p0 >= v.in[0] + v.hi[0]) continue;
              for (int64_t k1 = 0; k1 < v.k[1]; ++k1) {
                int64_t p1 = j1 * v.s[1] + k1 * v.d[1] - v.lo[1];
                if (p1 < -v.lo[1] || p1 >= v.in[1] + v.hi[1]) continue;
                for (int64_t k2 = 0; k2 < v.k[2]; ++k2) {
                  int64_t p2 = j2 * v.s[2] + k2 * v.d[2] - v.lo[2];
                  if (p2 < -v.lo[2] || p2 >= v.in[2] + v.hi[2]) continue;
                  ++padded;
                  if (p0 < 0 || p0 >= v.in[0] || p1 < 0 || p1 >= v.in[1] ||
                      p2 < 0 || p2 >= v.in[2])
                    continue;
                  ++inside;
                  const int64_t xoff = b * x->strides[0] + c * x->strides[1] +
                                       p0 * v.xs[0] + p1 * v.xs[1] +
                                       p2 * v.xs[2];
                  const double xv = tj_load_f64(x->dtype, x->data, xoff);
                  switch (op) {
                    case TJ_OP_MAX_POOL:
                      if (int_pool) {
                        const int64_t xi = tj_load_i64(x->dtype, x->data, xoff);
                        if (unsigned_pool ? (uint64_t)xi > (uint64_t)ibest
                                          : xi > ibest)
                          ibest = xi;
                        break;
                      }
                      // maximum(best, x) in tap order: NaN propagates,
                      // and of equal values (+0 and -0) the later tap
                      // wins, as the decomposition's chain of maximum.
                      if (isnan(xv) || isnan(best)) {
                        best = NAN;
                      } else if (!(best > xv)) {
                        best = xv;
                      }
                      break;
                    case TJ_OP_AVG_POOL:
                      acc += xv;
                      break;
                    default:  // lp_pool
                      acc += pow(fabs(xv), w.p);
                      break;
                  }
                }
              }
            }
            double r;
            switch (op) {
              case TJ_OP_MAX_POOL:
                if (int_pool) {
                  tj_store_i64(out->dtype, out->data, e, ibest);
                  continue;
                }
                r = best;
                break;
              case TJ_OP_AVG_POOL:
                r = acc / (double)(include_pad ? padded : inside);
                break;
              default:
                r = pow(acc, 1.0 / w.p);
                break;
            }
            tj_store_f64(out->dtype, out->data, e, r);
          }
  return NULL;
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

// Whether |v| is dense row-major (strides of size-1 dims do not matter).
static bool view_is_dense(const view_t* v) {
  int64_t expect = 1;
  for (int32_t d = v->rank - 1; d >= 0; --d) {
    if (v->dims[d] != 1 && v->strides[d] != expect) return false;
    expect *= v->dims[d];
  }
  return true;
}

// A custom op: its registered host implementation on dense buffers of the
// node's dtypes (lib/custom_op.c). A strided caller input is copied dense
// first when the op needs it (every signature op does).
static tj_status_t eval_custom(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const tj_custom_op_t* op = tj_custom_op_of(run->graph, node);
  if (!op)
    return tj_invalid(
        "custom (node %%%u): op \"%s\" version %lld is not registered in the "
        "graph's context",
        index, node->attrs.name ? node->attrs.name : "?",
        (long long)node->attrs.axis);
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  uint32_t n = node->num_operands;
  tj_tensor_t ins[64];
  void* temps[64];
  size_t temp_bytes[64];
  bool contiguous = (op->flags & TJ_CUSTOM_OP_CONTIGUOUS_INPUTS) != 0;
  tj_status_t status = NULL;
  for (uint32_t i = 0; i < n; ++i) {
    const view_t* v = operand_view(run, index, i);
    temps[i] = NULL;
    temp_bytes[i] = 0;
    ins[i] = tj_tensor_make(v->data, v->dtype, v->rank, v->dims);
    if (view_is_dense(v)) continue;
    if (!contiguous) {
      ins[i].strides = v->strides;
      continue;
    }
    if (!status) {
      status = scratch_array(run, view_numel(v), tj_dtype_size(v->dtype),
                             &temps[i], &temp_bytes[i]);
    }
    if (!status && temps[i]) {
      copy_to_dense(v, temps[i]);
      ins[i].data = temps[i];
    }
  }
  view_t* y = &run->values[index].view;
  // The op may report a smaller shape (data-dependent dims) in |actual|.
  int64_t actual[TJ_MAX_RANK];
  memcpy(actual, y->dims, sizeof(actual));
  tj_tensor_t out = tj_tensor_make(y->data, y->dtype, y->rank, actual);
  double floats[TJ_CUSTOM_MAX_ATTRS];
  tj_custom_attrs_t attrs;
  tj_custom_attrs_of(&node->attrs, &attrs, floats);
  if (!status) status = tj_custom_op_invoke(op, ins, (int32_t)n, &attrs, &out);
  if (!status)
    status =
        tj_custom_bind_result(run->graph, index, y->dims, actual, run->symbols);
  if (!status) {
    memcpy(y->dims, actual, sizeof(int64_t) * (size_t)y->rank);
    row_major_strides(y->rank, y->dims, y->strides);
  }
  for (uint32_t i = 0; i < n; ++i) scratch_free(run, temps[i], temp_bytes[i]);
  if (status && tj_status_code(status) != TJ_STATUS_OUT_OF_MEMORY)
    status = tj_status_annotate(status, "custom (node %%%u)", index);
  return status;
}

//===----------------------------------------------------------------------===//
// attention (issue 14)
//===----------------------------------------------------------------------===//

// The operands and strides attention's score rows read (forward and
// backward evaluate the same rows).
typedef struct score_row_t {
  const view_t *q, *k, *m;
  const int64_t *sq, *sk, *sm;
  int32_t r;
  int64_t d, tk;
  double scale;
  bool causal;
} score_row_t;

// Query row i's scores into s[0..tk): scale * q.k plus an additive mask;
// a key dropped by a bool mask or causality is -inf. Returns their max
// (NaN if any score is NaN). q0, k0 and m0 are the row's (and head's)
// offsets into q, k and the mask.
static double attention_score_row(const score_row_t* a, int64_t i, int64_t q0,
                                  int64_t k0, int64_t m0, double* s) {
  const view_t *q = a->q, *k = a->k, *m = a->m;
  const int32_t r = a->r;
  double max = -INFINITY;
  for (int64_t j = 0; j < a->tk; ++j) {
    double x = -INFINITY;
    bool keep = !(a->causal && j > i);
    if (keep && m && m->dtype == TJ_DTYPE_BOOL)
      keep = tj_load_f64(m->dtype, m->data, m0 + j * a->sm[r - 1]) != 0;
    if (keep) {
      const int64_t kj = k0 + j * a->sk[r - 2];
      double dot = 0.0;
      for (int64_t e = 0; e < a->d; ++e)
        dot += tj_load_f64(q->dtype, q->data, q0 + e * a->sq[r - 1]) *
               tj_load_f64(k->dtype, k->data, kj + e * a->sk[r - 1]);
      x = a->scale * dot;
      if (m && m->dtype != TJ_DTYPE_BOOL)
        x += tj_load_f64(m->dtype, m->data, m0 + j * a->sm[r - 1]);
    }
    s[j] = x;
    if (isnan(x) || x > max) max = isnan(max) ? max : x;
  }
  return max;
}

// One query row at a time in double: the scores (scale * q.k, the mask
// added or applied, causal keys j > i dropped), their max, p = exp(s - max),
// y = sum p v / sum p; a row with no key left is 0, and a row with a +inf
// score NaN (exp(inf - inf), as softmax gives).
static tj_status_t eval_attention(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const view_t* q = operand_view(run, index, 0);
  const view_t* k = operand_view(run, index, 1);
  const view_t* v = operand_view(run, index, 2);
  const view_t* m = operand_view(run, index, 3);
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  const view_t* out = &run->values[index].view;
  if (view_numel(out) == 0) return NULL;
  const int32_t r = out->rank, nb = r - 3;
  const int64_t h_count = out->dims[r - 3], tq = out->dims[r - 2];
  const int64_t dv = out->dims[r - 1], d = q->dims[r - 1];
  const int64_t tk = k->dims[r - 2], group = h_count / k->dims[r - 3];
  const double scale = node->attrs.value;
  const bool causal = node->attrs.num_ints && node->attrs.ints[0];
  // Strides of each operand broadcast to the result's batch dims.
  int64_t target[TJ_MAX_RANK], sq[TJ_MAX_RANK], sk[TJ_MAX_RANK],
      sv[TJ_MAX_RANK], sm[TJ_MAX_RANK] = {0};
  memcpy(target, out->dims, (size_t)r * sizeof(int64_t));
  const view_t* ops[3] = {q, k, v};
  int64_t* strides[3] = {sq, sk, sv};
  for (int i = 0; i < 3; ++i) {
    for (int32_t a = nb; a < r; ++a) target[a] = ops[i]->dims[a];
    broadcast_strides(ops[i], r, target, strides[i]);
  }
  target[r - 3] = h_count;
  target[r - 2] = tq;
  target[r - 1] = tk;
  if (m) broadcast_strides(m, r, target, sm);
  double* s = NULL;
  size_t s_bytes = 0;
  TJ_RETURN_IF_ERROR(
      scratch_array(run, tk + dv, sizeof(double), (void**)&s, &s_bytes));
  double* acc = s + tk;
  int64_t bidx[TJ_MAX_RANK] = {0};
  const int64_t batches = dims_numel(nb, out->dims);
  for (int64_t b = 0; b < batches; ++b) {
    int64_t oq = 0, ok = 0, ov = 0, om = 0, oo = 0;
    for (int32_t a = 0; a < nb; ++a) {
      oq += bidx[a] * sq[a];
      ok += bidx[a] * sk[a];
      ov += bidx[a] * sv[a];
      om += bidx[a] * sm[a];
      oo += bidx[a] * out->strides[a];
    }
    for (int64_t h = 0; h < h_count; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t q0 = oq + h * sq[r - 3] + i * sq[r - 2];
        const int64_t m0 = om + h * sm[r - 3] + i * sm[r - 2];
        const double max = attention_score_row(
            &(const score_row_t){q, k, m, sq, sk, sm, r, d, tk, scale, causal},
            i, q0, ok + hk * sk[r - 3], m0, s);
        for (int64_t e = 0; e < dv; ++e) acc[e] = 0.0;
        double sum = 0.0;
        if (max != -INFINITY) {
          for (int64_t j = 0; j < tk; ++j) {
            const double p = exp(s[j] - max);
            if (p == 0.0) continue;
            sum += p;
            const int64_t v0 = ov + hk * sv[r - 3] + j * sv[r - 2];
            for (int64_t e = 0; e < dv; ++e)
              acc[e] += p * tj_load_f64(v->dtype, v->data, v0 + e * sv[r - 1]);
          }
        }
        const int64_t o0 =
            oo + h * out->strides[r - 3] + i * out->strides[r - 2];
        for (int64_t e = 0; e < dv; ++e)
          tj_store_f64(out->dtype, out->data, o0 + e * out->strides[r - 1],
                       sum > 0.0    ? acc[e] / sum
                       : isnan(sum) ? sum
                                    : (isnan(max) ? max : 0.0));
      }
    }
    for (int32_t a = nb - 1; a >= 0; --a) {
      if (++bidx[a] < out->dims[a]) break;
      bidx[a] = 0;
    }
  }
  scratch_free(run, s, s_bytes);
  return NULL;
}

// attention's backward (issue 14, fabwd), one query row at a time in
// double as eval_attention: the scores s, then attention_lse stores
// log sum exp(s) (-inf on a row with no key); attention_dq and
// attention_dkv take p = exp(s - lse) from the given lse (0 where it is
// -inf) and ds = p (g.v - delta): dq = scale sum_j ds_j k_j per row, and
// dk += scale ds_j q_i, dv += p_j g_i into a double buffer of the whole
// [B..., Hkv, Tk, D + Dv] result, rounded once at the end.
static tj_status_t eval_attention_bwd(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const bool lse_op = node->op == TJ_OP_ATTENTION_LSE;
  const bool dkv_op = node->op == TJ_OP_ATTENTION_DKV;
  const view_t* q = operand_view(run, index, 0);
  const view_t* k = operand_view(run, index, 1);
  const view_t* v = lse_op ? NULL : operand_view(run, index, 2);
  const view_t* m = operand_view(run, index, lse_op ? 2 : 3);
  const view_t* g = lse_op ? NULL : operand_view(run, index, 4);
  const view_t* lv = lse_op ? NULL : operand_view(run, index, 5);
  const view_t* dl = lse_op ? NULL : operand_view(run, index, 6);
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  const view_t* out = &run->values[index].view;
  if (view_numel(out) == 0) return NULL;
  const int32_t r = q->rank, nb = r - 3;
  const int64_t h_count = q->dims[r - 3], d = q->dims[r - 1];
  const int64_t hkv = k->dims[r - 3], group = h_count / hkv;
  const int64_t tk = k->dims[r - 2];
  const int64_t dv = v ? v->dims[r - 1] : 0;
  const int64_t tq = q->dims[r - 2];
  const double scale = node->attrs.value;
  const bool causal = node->attrs.num_ints && node->attrs.ints[0];
  // Strides of each operand broadcast to [B..., X, Y, Z] (its own last
  // three dims), the mask's to [B..., H, Tq, Tk], the rows' (lse, delta:
  // rank r - 1) to [B..., H, Tq].
  int64_t target[TJ_MAX_RANK], sq[TJ_MAX_RANK], sk[TJ_MAX_RANK],
      sv[TJ_MAX_RANK] = {0}, sg[TJ_MAX_RANK] = {0}, sm[TJ_MAX_RANK] = {0},
      sl[TJ_MAX_RANK] = {0}, sd[TJ_MAX_RANK] = {0}, so[TJ_MAX_RANK] = {0};
  memcpy(target, out->dims, (size_t)nb * sizeof(int64_t));
  const view_t* ops[4] = {q, k, v, g};
  int64_t* strides[4] = {sq, sk, sv, sg};
  for (int i = 0; i < 4; ++i) {
    if (!ops[i]) continue;
    for (int32_t a = nb; a < r; ++a) target[a] = ops[i]->dims[a];
    broadcast_strides(ops[i], r, target, strides[i]);
  }
  target[r - 3] = h_count;
  target[r - 2] = tq;
  target[r - 1] = tk;
  if (m) broadcast_strides(m, r, target, sm);
  if (lv) broadcast_strides(lv, r - 1, target, sl);
  if (dl) broadcast_strides(dl, r - 1, target, sd);
  if (lse_op) {
    memcpy(so, out->strides, (size_t)(r - 1) * sizeof(int64_t));
  } else {
    memcpy(so, out->strides, (size_t)r * sizeof(int64_t));
  }
  const int64_t batches = dims_numel(nb, out->dims);
  // Scratch: the row's scores [tk], and for dkv the whole result in double.
  const int64_t acc_count = dkv_op ? batches * hkv * tk * (d + dv) : d;
  double* s = NULL;
  size_t s_bytes = 0;
  TJ_RETURN_IF_ERROR(
      scratch_array(run, tk + acc_count, sizeof(double), (void**)&s, &s_bytes));
  double* acc = s + tk;
  for (int64_t e = 0; e < acc_count; ++e) acc[e] = 0.0;
  int64_t bidx[TJ_MAX_RANK] = {0};
  for (int64_t b = 0; b < batches; ++b) {
    int64_t oq = 0, ok = 0, ov = 0, og = 0, om = 0, ol = 0, od = 0, oo = 0;
    for (int32_t a = 0; a < nb; ++a) {
      oq += bidx[a] * sq[a];
      ok += bidx[a] * sk[a];
      ov += bidx[a] * sv[a];
      og += bidx[a] * sg[a];
      om += bidx[a] * sm[a];
      ol += bidx[a] * sl[a];
      od += bidx[a] * sd[a];
      oo += bidx[a] * so[a];
    }
    for (int64_t h = 0; h < h_count; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t q0 = oq + h * sq[r - 3] + i * sq[r - 2];
        const int64_t m0 = om + h * sm[r - 3] + i * sm[r - 2];
        const double max = attention_score_row(
            &(const score_row_t){q, k, m, sq, sk, sm, r, d, tk, scale, causal},
            i, q0, ok + hk * sk[r - 3], m0, s);
        if (lse_op) {
          double sum = 0.0;
          if (max != -INFINITY && !isnan(max))
            for (int64_t j = 0; j < tk; ++j) sum += exp(s[j] - max);
          const double lse = isnan(max)         ? max
                             : max == -INFINITY ? -INFINITY
                                                : max + log(sum);
          tj_store_f64(out->dtype, out->data,
                       oo + h * so[r - 3] + i * so[r - 2], lse);
          continue;
        }
        const double lse = tj_load_f64(lv->dtype, lv->data,
                                       ol + h * sl[r - 3] + i * sl[r - 2]);
        const double delta = tj_load_f64(dl->dtype, dl->data,
                                         od + h * sd[r - 3] + i * sd[r - 2]);
        const int64_t g0 = og + h * sg[r - 3] + i * sg[r - 2];
        if (!dkv_op)
          for (int64_t e = 0; e < d; ++e) acc[e] = 0.0;
        for (int64_t j = 0; j < tk; ++j) {
          const double p = lse == -INFINITY ? 0.0 : exp(s[j] - lse);
          if (p == 0.0) continue;
          const int64_t v0 = ov + hk * sv[r - 3] + j * sv[r - 2];
          const int64_t k0 = ok + hk * sk[r - 3] + j * sk[r - 2];
          double dp = 0.0;
          for (int64_t e = 0; e < dv; ++e)
            dp += tj_load_f64(g->dtype, g->data, g0 + e * sg[r - 1]) *
                  tj_load_f64(v->dtype, v->data, v0 + e * sv[r - 1]);
          const double ds = p * (dp - delta);
          if (!dkv_op) {
            for (int64_t e = 0; e < d; ++e)
              acc[e] += scale * ds *
                        tj_load_f64(k->dtype, k->data, k0 + e * sk[r - 1]);
            continue;
          }
          double* row = acc + ((b * hkv + hk) * tk + j) * (d + dv);
          for (int64_t e = 0; e < d; ++e)
            row[e] +=
                scale * ds * tj_load_f64(q->dtype, q->data, q0 + e * sq[r - 1]);
          for (int64_t e = 0; e < dv; ++e)
            row[d + e] +=
                p * tj_load_f64(g->dtype, g->data, g0 + e * sg[r - 1]);
        }
        if (!dkv_op) {
          const int64_t o0 = oo + h * so[r - 3] + i * so[r - 2];
          for (int64_t e = 0; e < d; ++e)
            tj_store_f64(out->dtype, out->data, o0 + e * so[r - 1], acc[e]);
        }
      }
    }
    if (dkv_op) {
      for (int64_t hk = 0; hk < hkv; ++hk)
        for (int64_t j = 0; j < tk; ++j) {
          const double* row = acc + ((b * hkv + hk) * tk + j) * (d + dv);
          const int64_t o0 = oo + hk * so[r - 3] + j * so[r - 2];
          for (int64_t e = 0; e < d + dv; ++e)
            tj_store_f64(out->dtype, out->data, o0 + e * so[r - 1], row[e]);
        }
    }
    for (int32_t a = nb - 1; a >= 0; --a) {
      if (++bidx[a] < out->dims[a]) break;
      bidx[a] = 0;
    }
  }
  scratch_free(run, s, s_bytes);
  return NULL;
}

//===----------------------------------------------------------------------===//
// quantize and dequantize (issue 17, quant2; lib/quant.h)
//===----------------------------------------------------------------------===//

// One logical element at a time (x's, or q's unpacked): its scale and zero
// point by granularity, then the element rule of lib/quant.h; int4 writes
// the even element's nibble and ors the odd one's (row-major order).
static tj_status_t eval_quant(run_t* run, uint32_t index) {
  const tj_node_t* node = node_at(run, index);
  const bool quantize = node->op == TJ_OP_QUANTIZE;
  const view_t* a = operand_view(run, index, 0);
  const view_t* s = operand_view(run, index, 1);
  const view_t* z = operand_view(run, index, 2);
  TJ_RETURN_IF_ERROR(allocate_result(run, index));
  const view_t* out = &run->values[index].view;
  const tj_attrs_t* at = &node->attrs;
  const int64_t block = at->ints[TJ_QUANT_BLOCK];
  const int32_t int4 = (int32_t)at->ints[TJ_QUANT_INT4];
  const bool saturate = at->ints[TJ_QUANT_SATURATE] != 0;
  const view_t* q = quantize ? out : a;  // the stored (packed) side
  const view_t* f = quantize ? a : out;  // the float side, logical shape
  const int32_t r = f->rank;
  const int64_t n = view_numel(f);
  const int64_t axis = at->axis;
  const int64_t lo = tj_quant_qmin(q->dtype, int4);
  const int64_t hi = tj_quant_qmax(q->dtype, int4);
  const tj_dtype_t fd = quantize ? a->dtype : s->dtype;
  int64_t idx[TJ_MAX_RANK] = {0};
  for (int64_t k = 0; k < n; ++k) {
    int64_t fo = 0, qo = 0, so = 0, zo = 0;
    for (int32_t d = 0; d < r; ++d) {
      fo += idx[d] * f->strides[d];
      qo += (int4 && d == r - 1 ? idx[d] / 2 : idx[d]) * q->strides[d];
      if (s->rank == 0) continue;
      // per axis: s[idx[axis]]; blocked: s[idx with idx[axis] / block]
      const int32_t sd = block ? d : 0;
      if (!block && d != axis) continue;
      const int64_t i = d == axis && block ? idx[d] / block : idx[d];
      so += i * s->strides[sd];
      if (z) zo += i * z->strides[sd];
    }
    const double scale = tj_load_f64(s->dtype, s->data, so);
    const double zp = z ? tj_load_f64(z->dtype, z->data, zo) : 0.0;
    const bool high = int4 && (idx[r - 1] & 1);
    if (quantize) {
      const double t =
          tj_quant_divide(fd, tj_load_f64(a->dtype, a->data, fo), scale);
      if (tj_dtype_is_f8(q->dtype)) {
        double u = t + zp;
        if (fd != TJ_DTYPE_F64) u = (double)(float)u;
        *elem_ptr(q, qo) = tj_quant_to_f8(q->dtype, u, saturate);
      } else if (int4) {
        const uint8_t nib = (uint8_t)(tj_quant_to_int(t, zp, lo, hi) & 15);
        uint8_t* byte = elem_ptr(q, qo);
        *byte = high ? (uint8_t)(*byte | (nib << 4)) : nib;
      } else {
        tj_store_i64(q->dtype, q->data, qo, tj_quant_to_int(t, zp, lo, hi));
      }
    } else {
      double v;
      if (int4) {
        int64_t nib = (*elem_ptr(q, qo) >> (high ? 4 : 0)) & 15;
        if (int4 == 1 && nib >= 8) nib -= 16;
        v = (double)nib;
      } else {
        v = tj_load_f64(q->dtype, q->data, qo);
      }
      double y;
      if (fd == TJ_DTYPE_F64) {
        y = (v - zp) * scale;
      } else {
        y = (double)(float)((double)(float)(v - zp) * scale);
      }
      tj_store_f64(out->dtype, out->data, fo, y);
    }
    for (int32_t d = r - 1; d >= 0; --d) {
      if (++idx[d] < f->dims[d]) break;
      idx[d] = 0;
    }
  }
  return NULL;
}

static tj_status_t eval_node(run_t* run, uint32_t index) {
  switch (node_at(run, index)->op) {
    case TJ_OP_INPUT:
      return eval_input(run, index);
    case TJ_OP_CONSTANT:
      return eval_constant(run, index);
    case TJ_OP_FULL:
      return eval_full(run, index);
    case TJ_OP_IOTA:
      return eval_iota(run, index);
    case TJ_OP_WHERE:
      return eval_where(run, index);
    case TJ_OP_MATMUL:
    case TJ_OP_LINEAR:
      return eval_matmul(run, index);
    case TJ_OP_MATMUL_I32:
    case TJ_OP_MATMUL_F8:  // float8 decodes exactly; f64 sums, one rounding
      return eval_matmul(run, index);
    case TJ_OP_MATMUL_INTEGER:
      return eval_matmul_integer(run, index);
    case TJ_OP_RESHAPE:
    case TJ_OP_TRANSPOSE:
    case TJ_OP_BROADCAST_TO:
    case TJ_OP_SLICE:
      return eval_view_op(run, index);
    case TJ_OP_CONCAT:
      return eval_concat(run, index);
    case TJ_OP_PAD:
      return eval_pad(run, index);
    case TJ_OP_GATHER:
      return eval_gather(run, index);
    case TJ_OP_GATHER_ELEMENTS:
      return eval_gather_elements(run, index);
    case TJ_OP_GATHER_ND:
      return eval_gather_nd(run, index);
    case TJ_OP_CUMSUM:
    case TJ_OP_CUMPROD:
      return eval_scan(run, index);
    case TJ_OP_SCATTER_ELEMENTS:
    case TJ_OP_SCATTER_ND:
      return eval_scatter(run, index);
    case TJ_OP_ARGTOPK:
      return eval_topk(run, index);
    case TJ_OP_CUSTOM:
      return eval_custom(run, index);
    case TJ_OP_ONE_HOT:
      return eval_one_hot(run, index);
    case TJ_OP_ATTENTION:
      return eval_attention(run, index);
    case TJ_OP_ATTENTION_LSE:
    case TJ_OP_ATTENTION_DQ:
    case TJ_OP_ATTENTION_DKV:
      return eval_attention_bwd(run, index);
    case TJ_OP_QUANTIZE:
    case TJ_OP_DEQUANTIZE:
      return eval_quant(run, index);
    case TJ_OP_CONV:
    case TJ_OP_CONV_TRANSPOSE:
    case TJ_OP_MAX_POOL:
    case TJ_OP_AVG_POOL:
    case TJ_OP_LP_POOL:
      return eval_window(run, index);
    case TJ_OP_SOFTMAX:
    case TJ_OP_LOG_SOFTMAX:
    case TJ_OP_LAYER_NORM:
    case TJ_OP_RMS_NORM:
      return eval_lanes(run, index);
    default:
      break;
  }
  // The op classes of lib/ops.def: unary and pointwise composites (gelu,
  // silu) element by element, binary with broadcasting, reductions.
  const tj_op_info_t* info = tj_op_info(node_at(run, index)->op);
  if (info->kind == TJ_OP_KIND_UNARY ||
      (info->kind == TJ_OP_KIND_COMPOSITE &&
       info->pattern == TJ_OP_PATTERN_ELEMENTWISE)) {
    return eval_unary(run, index);
  }
  if (info->kind == TJ_OP_KIND_BINARY) return eval_binary(run, index);
  if (info->kind == TJ_OP_KIND_REDUCTION) return eval_reduce(run, index);
  return tj_internal("reference: no implementation for op %d (node %%%u)",
                     (int)node_at(run, index)->op, index);
}

// Checks the caller's tensors beyond what tj_ir_bind_symbols checks: CPU,
// outputs of the right dtype and shape, then their memory as every target
// does (tj_ir_check_run_memory: no output sharing memory with an input, as
// the interpreter may still read an input after writing an output).
static tj_status_t check_tensors(const run_t* run, const tj_tensor_t* outputs,
                                 int32_t num_outputs) {
  const tj_graph_t* g = run->graph;
  for (uint32_t k = 0; k < g->num_inputs; ++k) {
    const tj_tensor_t* t = &run->inputs[k];
    const char* name = node_at(run, g->inputs[k])->attrs.name;
    TJ_RETURN_IF_ERROR(tj_ir_check_device(t, "input", name, false));
  }
  for (int32_t k = 0; k < num_outputs; ++k) {
    const tj_tensor_t* t = &outputs[k];
    const uint32_t node_index = g->outputs[k].node;
    const tj_node_t* node = node_at(run, node_index);
    const char* name = g->outputs[k].name ? g->outputs[k].name : "?";
    int64_t dims[TJ_MAX_RANK];
    TJ_RETURN_IF_ERROR(tj_ir_concrete_dims(g, node_index, run->symbols, dims));
    char want[160], got[160];
    format_shape(node->dtype, node->rank, dims, want, sizeof(want));
    TJ_RETURN_IF_ERROR(tj_ir_check_device(t, "output", name, false));
    if (t->rank > 0 && !t->shape) {
      return tj_invalid(
          "tj_reference_run: output %d \"%s\": shape is NULL for rank %d", k,
          name, (int)t->rank);
    }
    bool shape_ok = t->rank == node->rank;
    for (int32_t d = 0; shape_ok && d < t->rank; ++d) {
      shape_ok = t->shape[d] == dims[d];
    }
    if (t->dtype != node->dtype || !shape_ok) {
      if (t->rank >= 0 && t->rank <= TJ_MAX_RANK && (t->shape || !t->rank)) {
        format_shape(t->dtype, t->rank, t->shape, got, sizeof(got));
      } else {
        snprintf(got, sizeof(got), "%s with rank %d", tj_dtype_name(t->dtype),
                 (int)t->rank);
      }
      return tj_invalid(
          "tj_reference_run: output %d \"%s\" is %s but the "
          "graph computes %s",
          k, name, got, want);
    }
  }
  tj_status_t status = tj_ir_check_run_memory(g, run->inputs, outputs);
  return status ? tj_status_annotate(status, "tj_reference_run") : NULL;
}

// Writes node |index|'s value to every output that names it.
static tj_status_t write_outputs(const run_t* run, uint32_t index,
                                 const tj_tensor_t* outputs) {
  const tj_graph_t* g = run->graph;
  for (uint32_t k = 0; k < g->num_outputs; ++k) {
    if (g->outputs[k].node != index) continue;
    // Data-dependent dims are known now: the actual shape goes to the
    // output's shape array (the run's own, tj_reference_run_shaped), and
    // the copy below writes the data dense in it.
    if (tj_custom_output_is_dynamic(g, k)) {
      TJ_RETURN_IF_ERROR(tj_ir_concrete_dims(g, index, run->symbols,
                                             (int64_t*)outputs[k].shape));
    }
    view_t dst;
    tensor_view(&outputs[k], &dst);
    copy_view(&run->values[index].view, &dst);
  }
  return NULL;
}

static tj_status_t run_nodes(run_t* run, const tj_tensor_t* outputs) {
  const tj_graph_t* g = run->graph;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    TJ_RETURN_IF_ERROR(eval_node(run, i));
    TJ_RETURN_IF_ERROR(write_outputs(run, i, outputs));
    const tj_node_t* node = node_at(run, i);
    for (uint32_t k = 0; k < node->num_operands; ++k) {
      uint32_t operand = node->operands[k];
      if (operand != TJ_NODE_NONE && run->last_use[operand] == i) {
        release_value(run, operand);
      }
    }
    if (run->last_use[i] == i) release_value(run, i);
  }
  return NULL;
}

static tj_status_t run_graph(const tj_graph_t* graph, const tj_tensor_t* inputs,
                             int32_t num_inputs, const tj_tensor_t* outputs,
                             int32_t num_outputs, bool own_shapes) {
  if (!graph) return tj_invalid("tj_reference_run: graph is NULL");
  if (!graph->finalized) {
    return tj_invalid(
        "tj_reference_run: graph '%s' is not finalized (call "
        "tj_graph_finalize first)",
        graph->name ? graph->name : "?");
  }
  if (num_inputs != (int32_t)graph->num_inputs) {
    return tj_invalid(
        "tj_reference_run: graph '%s' has %u inputs but %d "
        "were given",
        graph->name ? graph->name : "?", graph->num_inputs, (int)num_inputs);
  }
  if (num_inputs > 0 && !inputs) {
    return tj_invalid("tj_reference_run: inputs is NULL but num_inputs is %d",
                      (int)num_inputs);
  }
  if (num_outputs != (int32_t)graph->num_outputs) {
    return tj_invalid(
        "tj_reference_run: graph '%s' has %u outputs but %d "
        "were given",
        graph->name ? graph->name : "?", graph->num_outputs, (int)num_outputs);
  }
  if (num_outputs > 0 && !outputs) {
    return tj_invalid("tj_reference_run: outputs is NULL but num_outputs is %d",
                      (int)num_outputs);
  }

  TJ_RETURN_IF_ERROR(tj_custom_check_outputs(graph, outputs, own_shapes));
  run_t run;
  memset(&run, 0, sizeof(run));
  run.graph = graph;
  run.allocator = graph->allocator;
  run.inputs = inputs;
  TJ_RETURN_IF_ERROR(
      tj_ir_bind_symbols(graph, inputs, num_inputs, run.symbols));
  TJ_RETURN_IF_ERROR(check_tensors(&run, outputs, num_outputs));
  if (graph->num_nodes == 0) return NULL;

  const size_t values_bytes = sizeof(value_t) * graph->num_nodes;
  const size_t uses_bytes = sizeof(uint32_t) * graph->num_nodes;
  run.values = tj_calloc(run.allocator, graph->num_nodes, sizeof(value_t));
  if (!run.values) return tj_status_oom();
  run.last_use = tj_alloc(run.allocator, uses_bytes);
  if (!run.last_use) {
    tj_free(run.allocator, run.values, values_bytes);
    return tj_status_oom();
  }
  for (uint32_t i = 0; i < graph->num_nodes; ++i) {
    run.last_use[i] = i;
    const tj_node_t* node = &graph->nodes[i];
    for (uint32_t k = 0; k < node->num_operands; ++k) {
      if (node->operands[k] != TJ_NODE_NONE) {
        run.last_use[node->operands[k]] = i;
      }
    }
  }

  tj_status_t status = run_nodes(&run, outputs);
  for (uint32_t i = 0; i < graph->num_nodes; ++i) release_value(&run, i);
  tj_free(run.allocator, run.last_use, uses_bytes);
  tj_free(run.allocator, run.values, values_bytes);
  return status;
}

tj_status_t tj_reference_run(const tj_graph_t* graph, const tj_tensor_t* inputs,
                             int32_t num_inputs, const tj_tensor_t* outputs,
                             int32_t num_outputs) {
  return run_graph(graph, inputs, num_inputs, outputs, num_outputs, false);
}

tj_status_t tj_reference_run_own_shapes(const tj_graph_t* graph,
                                        const tj_tensor_t* inputs,
                                        int32_t num_inputs,
                                        const tj_tensor_t* outputs,
                                        int32_t num_outputs) {
  return run_graph(graph, inputs, num_inputs, outputs, num_outputs, true);
}

tj_status_t tj_reference_run_shaped(const tj_graph_t* graph,
                                    const tj_tensor_t* inputs,
                                    int32_t num_inputs,
                                    const tj_tensor_t* outputs,
                                    int32_t num_outputs, int64_t* out_shapes) {
  if (!graph) return tj_invalid("tj_reference_run: graph is NULL");
  if (num_outputs != (int32_t)graph->num_outputs)
    return tj_invalid(
        "tj_reference_run: graph '%s' has %u outputs but %d were given",
        graph->name ? graph->name : "?", graph->num_outputs, (int)num_outputs);
  if (num_outputs > 0 && (!outputs || !out_shapes))
    return tj_invalid("tj_reference_run_shaped: outputs or out_shapes is NULL");
  // The outputs with shape arrays of the run's own (|out_shapes|).
  size_t bytes = sizeof(tj_tensor_t) * (size_t)(num_outputs ? num_outputs : 1);
  tj_tensor_t* own = tj_alloc(graph->allocator, bytes);
  if (!own) return tj_status_oom();
  tj_status_t status = NULL;
  for (int32_t i = 0; !status && i < num_outputs; ++i) {
    own[i] = outputs[i];
    if (outputs[i].rank < 0 || outputs[i].rank > TJ_MAX_RANK ||
        (outputs[i].rank > 0 && !outputs[i].shape)) {
      status = tj_invalid("tj_reference_run: output %d: rank %d with %s shape",
                          (int)i, (int)outputs[i].rank,
                          outputs[i].shape ? "a" : "a NULL");
      break;
    }
    int64_t* shape = out_shapes + (size_t)i * TJ_MAX_RANK;
    for (int32_t k = 0; k < outputs[i].rank; ++k)
      shape[k] = outputs[i].shape[k];
    own[i].shape = shape;
  }
  if (!status)
    status = run_graph(graph, inputs, num_inputs, own, num_outputs, true);
  tj_free(graph->allocator, own, bytes);
  return status;
}
