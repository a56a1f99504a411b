// Type inference and attribute normalization for every op in lib/ops.def,
// and tj_graph_append, the one door through which nodes enter a graph.
//
// Rules that apply to every op:
//   - No implicit dtype promotion: operands that combine must have equal
//     dtypes; each op accepts a class of dtypes (the DTYPES column of
//     lib/ops.def).
//   - Broadcasting is numpy's, right-aligned. When two dims cannot be
//     compared now because one is symbolic (B vs C, B vs 7), inference
//     assumes them equal, records a run-time guard a == b and continues with
//     the constant if there is one, else with the first operand's dim. Two
//     different constants are an error. The same rule joins matmul's inner
//     dims, concat's non-axis dims and the [N] parameters of composites.
//   - Attributes are stored normalized (axes >= 0 and sorted, slice bounds
//     clamped), so that equal nodes have equal attributes and re-inferring a
//     stored node reproduces it exactly (what tj_ir_verify checks).
//   - Every result must have a byte size (constant dims only, zero dims
//     left out of the product: the size rule of tj_graph.h) that fits in
//     TJ_MAX_TENSOR_BYTES.
//   - On failure nothing is appended; only interned dim expressions and
//     grown (empty) capacity may remain.

#include "lib/infer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lib/custom_op.h"
#include "lib/dtype.h"
#include "lib/quant.h"
#include "lib/scatter.h"
#include "lib/window.h"

typedef struct infer_t {
  tj_graph_t* graph;
  const tj_node_desc_t* desc;
  uint32_t index;  // the node's index (the one it would get, when new)
  bool existing;
  tj_ir_inferred_t* out;
} infer_t;

//===--- error messages ---===//

// Appends printf-style text to a fixed buffer, truncating quietly.
static void append_text(char* buf, size_t size, size_t* len, const char* format,
                        ...) TJ_PRINTF_LIKE(4, 5);
static void append_text(char* buf, size_t size, size_t* len, const char* format,
                        ...) {
  if (*len + 1 >= size) return;
  va_list args;
  va_start(args, format);
  int n = vsnprintf(buf + *len, size - *len, format, args);
  va_end(args);
  if (n < 0) return;
  *len += (size_t)n < size - *len ? (size_t)n : size - *len - 1;
}

static void format_operand(const tj_graph_t* graph, uint32_t operand,
                           uint32_t limit, char* buf, size_t size) {
  if (operand == TJ_NODE_NONE) {
    snprintf(buf, size, "none");
  } else if (operand >= limit || operand >= graph->num_nodes) {
    snprintf(buf, size, "?");
  } else {
    tj_ir_format_type(graph, operand, buf, size);
  }
}

// "<op> (node %<index>): <problem>; operands <type>, <type>".
static tj_status_t node_errorv(const tj_graph_t* graph,
                               const tj_node_desc_t* desc, uint32_t index,
                               tj_status_code_t code, const char* format,
                               va_list args) {
  if (code == TJ_STATUS_OUT_OF_MEMORY) return tj_status_oom();
  char message[2048];
  size_t len = 0;
  if ((unsigned)desc->op < TJ_OP_COUNT_) {
    append_text(message, sizeof(message), &len, "%s",
                tj_op_info(desc->op)->name);
  } else {
    append_text(message, sizeof(message), &len, "op %d", (int)desc->op);
  }
  append_text(message, sizeof(message), &len, " (node %%%u): ", index);
  if (len + 1 < sizeof(message)) {
    int n = vsnprintf(message + len, sizeof(message) - len, format, args);
    if (n > 0)
      len += (size_t)n < sizeof(message) - len ? (size_t)n
                                               : sizeof(message) - len - 1;
  }
  uint32_t shown = desc->operands ? desc->num_operands : 0;
  for (uint32_t i = 0; i < shown; ++i) {
    if (i == 8) {
      append_text(message, sizeof(message), &len, ", ...");
      break;
    }
    char type[160];
    format_operand(graph, desc->operands[i], index, type, sizeof(type));
    append_text(message, sizeof(message), &len, "%s%s",
                i == 0 ? "; operands " : ", ", type);
  }
  return tj_status_make(code, "%s", message);
}

tj_status_t tj_ir_node_error(const tj_graph_t* graph,
                             const tj_node_desc_t* desc, tj_status_code_t code,
                             const char* format, ...) {
  va_list args;
  va_start(args, format);
  tj_status_t status =
      node_errorv(graph, desc, graph->num_nodes, code, format, args);
  va_end(args);
  return status;
}

static tj_status_t fail(infer_t* c, tj_status_code_t code, const char* format,
                        ...) TJ_PRINTF_LIKE(3, 4);
static tj_status_t fail(infer_t* c, tj_status_code_t code, const char* format,
                        ...) {
  va_list args;
  va_start(args, format);
  tj_status_t status =
      node_errorv(c->graph, c->desc, c->index, code, format, args);
  va_end(args);
  return status;
}

#define INVALID TJ_STATUS_INVALID_ARGUMENT

// Re-words a status from the dim table (e.g. an overflowing sum) as an error
// of this node; OUT_OF_MEMORY passes through unchanged.
static tj_status_t wrap(infer_t* c, tj_status_t status) {
  if (!status || tj_status_code(status) == TJ_STATUS_OUT_OF_MEMORY)
    return status;
  tj_status_t wrapped =
      fail(c, tj_status_code(status), "%s", tj_status_message(status));
  tj_status_free(status);
  return wrapped;
}

// Small rotating buffers so one message can show several dims.
typedef struct dimtext_t {
  char text[4][96];
  int next;
} dimtext_t;

static const char* dimstr(infer_t* c, dimtext_t* t, int64_t dim) {
  char* buf = t->text[t->next++ % 4];
  tj_dim_format(&c->graph->dims, dim, buf, sizeof(t->text[0]));
  return buf;
}

//===--- operands and dtypes ---===//

static const tj_node_t* in(infer_t* c, uint32_t i) {
  uint32_t operand = c->desc->operands[i];
  return operand == TJ_NODE_NONE ? NULL : &c->graph->nodes[operand];
}

// Optional operands: gamma/beta of the norms and the bias of linear.
static bool is_optional(tj_op_t op, uint32_t slot) {
  switch (op) {
    case TJ_OP_LAYER_NORM:
      return slot == 1 || slot == 2;
    case TJ_OP_RMS_NORM:
      return slot == 1;
    case TJ_OP_LINEAR:
    case TJ_OP_CONV:
    case TJ_OP_CONV_TRANSPOSE:
      return slot == 2;
    case TJ_OP_ATTENTION:
    case TJ_OP_ATTENTION_DQ:
    case TJ_OP_ATTENTION_DKV:
      return slot == 3;
    case TJ_OP_ATTENTION_LSE:
      return slot == 2;
    case TJ_OP_MATMUL_INTEGER:
      return slot == 2 || slot == 3;
    case TJ_OP_QUANTIZE:  // the zero point
    case TJ_OP_DEQUANTIZE:
      return slot == 2;
    default:
      return false;
  }
}

static tj_status_t check_operands(infer_t* c) {
  const tj_node_desc_t* d = c->desc;
  int32_t arity = tj_op_info(d->op)->arity;
  if (arity >= 0 && d->num_operands != (uint32_t)arity)
    return fail(c, INVALID, "takes %d operands, got %u", arity,
                d->num_operands);
  if (arity < 0 && d->num_operands == 0 && d->op != TJ_OP_CUSTOM)
    return fail(c, INVALID, "needs at least one operand");
  if (d->num_operands > 0 && !d->operands)
    return fail(c, INVALID, "operands is NULL");
  for (uint32_t i = 0; i < d->num_operands; ++i) {
    uint32_t operand = d->operands[i];
    if (operand == TJ_NODE_NONE) {
      if (!is_optional(d->op, i))
        return fail(c, INVALID, "operand %u is none", i);
    } else if (operand >= c->index) {
      return fail(c, INVALID,
                  "operand %u (value id %llu) is not an earlier value of "
                  "this graph",
                  i, (unsigned long long)operand + 1);
    }
  }
  return NULL;
}

// Whether |dtype| is one the op's (main) operands may have (lib/ops.def).
// max and min take bool too: logical or and and (ONNX).
static tj_status_t check_class(infer_t* c, tj_dtype_t dtype) {
  // float8, float4 and the 4- and 2-bit integers are storage dtypes: only
  // ops that do no arithmetic on them (ANY operands, no reduction, no
  // comparison: casts, where, movement) take them.
  const tj_op_info_t* info = tj_op_info(c->desc->op);
  if (tj_dtype_is_narrow(dtype) &&
      (info->dtypes != TJ_OP_DTYPES_ANY ||
       info->pattern == TJ_OP_PATTERN_REDUCE ||
       tj_op_has(c->desc->op, TJ_OPF_BOOL_RESULT))) {
    return fail(c, INVALID,
                "%s is a storage dtype (cast it, or dequantize it, first)",
                tj_dtype_name(dtype));
  }
  switch (info->dtypes) {
    case TJ_OP_DTYPES_NUMERIC:
      if (dtype == TJ_DTYPE_BOOL)
        return fail(c, INVALID, "needs a numeric dtype, got bool");
      break;
    case TJ_OP_DTYPES_FLOAT:
      if (!tj_dtype_is_float(dtype))
        return fail(c, INVALID, "needs a float dtype, got %s",
                    tj_dtype_name(dtype));
      break;
    case TJ_OP_DTYPES_BOOL:
      if (dtype != TJ_DTYPE_BOOL)
        return fail(c, INVALID, "needs bool, got %s", tj_dtype_name(dtype));
      break;
    case TJ_OP_DTYPES_INT:
      if (!tj_dtype_is_int(dtype))
        return fail(c, INVALID, "needs an integer dtype, got %s",
                    tj_dtype_name(dtype));
      break;
    case TJ_OP_DTYPES_ANY:
      break;
  }
  return NULL;
}

static tj_status_t check_dtype_valid(infer_t* c, tj_dtype_t dtype) {
  if (!tj_dtype_is_valid(dtype))
    return fail(c, INVALID, "dtype %d is not a dtype", (int)dtype);
  return NULL;
}

static tj_status_t check_same_dtype(infer_t* c, tj_dtype_t a, tj_dtype_t b) {
  if (a != b)
    return fail(c, INVALID, "dtype mismatch %s vs %s", tj_dtype_name(a),
                tj_dtype_name(b));
  return NULL;
}

//===--- dims and shapes ---===//

typedef enum dims_rule_e {
  DIMS_ANY,       // constants or symbolic dims of this graph
  DIMS_CONSTANT,  // constants only
  DIMS_RESHAPE,   // DIMS_ANY plus TJ_DIM_INFER
} dims_rule_t;

static tj_status_t check_dims(infer_t* c, int32_t rank, const int64_t* dims,
                              dims_rule_t rule) {
  if (rank < 0 || rank > TJ_MAX_RANK)
    return fail(c, INVALID, "rank %d is out of range [0, %d]", (int)rank,
                TJ_MAX_RANK);
  if (rank > 0 && !dims) return fail(c, INVALID, "dims is NULL");
  for (int32_t i = 0; i < rank; ++i) {
    int64_t d = dims[i];
    if (d >= 0) continue;
    if (d == TJ_DIM_INFER && rule == DIMS_RESHAPE) continue;
    if (tj_dim_expr(&c->graph->dims, d)) {
      if (rule != DIMS_CONSTANT) continue;
      dimtext_t t = {0};
      return fail(c, INVALID, "dim %d is %s; constants need constant dims",
                  (int)i, dimstr(c, &t, d));
    }
    return fail(c, INVALID,
                "dim %d is %lld, which is neither a size nor a symbolic dim "
                "of this graph",
                (int)i, (long long)d);
  }
  return NULL;
}

// Normalizes |axis| (negative counts from the end) for |rank| axes.
static tj_status_t normalize_axis(infer_t* c, int64_t axis, int32_t rank,
                                  int64_t* out) {
  if (axis < -(int64_t)rank || axis >= rank)
    return fail(c, INVALID, "axis %lld is out of range for rank %d",
                (long long)axis, (int)rank);
  *out = axis < 0 ? axis + rank : axis;
  return NULL;
}

static bool guard_recorded(const tj_graph_t* graph, int64_t a, int64_t b) {
  for (uint32_t i = 0; i < graph->num_guards; ++i) {
    const tj_guard_t* g = &graph->guards[i];
    if ((g->a == a && g->b == b) || (g->a == b && g->b == a)) return true;
  }
  return false;
}

static tj_status_t guard(infer_t* c, int64_t a, int64_t b) {
  if (!c->existing) return tj_graph_add_guard(c->graph, a, b, c->index);
  if (guard_recorded(c->graph, a, b)) return NULL;
  dimtext_t t = {0};
  return fail(c, INVALID, "needs the guard %s == %s, which is not recorded",
              dimstr(c, &t, a), dimstr(c, &t, b));
}

// Two dims that must be equal: the dim they agree on, guarding what cannot
// be decided now. |*conflict| for two different constants.
static tj_status_t unify(infer_t* c, int64_t x, int64_t y, int64_t* out,
                         bool* conflict) {
  *conflict = false;
  if (x == y) {
    *out = x;
    return NULL;
  }
  if (x >= 0 && y >= 0) {
    *conflict = true;
    return NULL;
  }
  TJ_RETURN_IF_ERROR(guard(c, x, y));
  *out = y >= 0 ? y : x;
  return NULL;
}

// One axis of numpy broadcasting: a constant 1 yields to the other dim.
static tj_status_t broadcast_dim(infer_t* c, int64_t x, int64_t y, int64_t* out,
                                 bool* conflict) {
  *conflict = false;
  if (x == 1 || y == 1) {
    *out = x == 1 ? y : x;
    return NULL;
  }
  return unify(c, x, y, out, conflict);
}

// Broadcasts shape (ra, a) with (rb, b) into (*out_rank, out).
static tj_status_t broadcast_shapes(infer_t* c, int32_t ra, const int64_t* a,
                                    int32_t rb, const int64_t* b,
                                    int32_t* out_rank, int64_t* out) {
  int32_t rank = ra > rb ? ra : rb;
  int64_t dims[TJ_MAX_RANK];
  for (int32_t i = 0; i < rank; ++i) {
    int32_t ia = i - (rank - ra), ib = i - (rank - rb);
    int64_t x = ia >= 0 ? a[ia] : 1;
    int64_t y = ib >= 0 ? b[ib] : 1;
    bool conflict;
    TJ_RETURN_IF_ERROR(broadcast_dim(c, x, y, &dims[i], &conflict));
    if (conflict)
      return fail(c, INVALID,
                  "cannot broadcast %lld against %lld (result "
                  "axis %d)",
                  (long long)x, (long long)y, (int)i);
  }
  *out_rank = rank;
  memcpy(out, dims, (size_t)rank * sizeof(int64_t));
  return NULL;
}

static void set_result(infer_t* c, tj_dtype_t dtype, int32_t rank,
                       const int64_t* dims) {
  c->out->dtype = dtype;
  c->out->rank = rank;
  if (rank > 0) memcpy(c->out->dims, dims, (size_t)rank * sizeof(int64_t));
}

// Bytes of the constant part of a shape (0 when a dim is 0); false if the
// element size times the constant non-zero dims exceeds the limit: the size
// rule of tj_graph.h, under which a tensor with no elements may not have
// huge other dims either, so that every partial product of its dims fits.
static bool byte_size_fits(tj_dtype_t dtype, int32_t rank, const int64_t* dims,
                           int64_t* out_bytes) {
  int64_t bytes = (int64_t)tj_dtype_size(dtype);
  bool too_big = false, empty = false;
  for (int32_t i = 0; i < rank; ++i) {
    empty |= dims[i] == 0;
    if (dims[i] > 0 && (tj_mul_overflow_i64(bytes, dims[i], &bytes) ||
                        bytes > TJ_MAX_TENSOR_BYTES))
      too_big = true;
    if (too_big) bytes = TJ_MAX_TENSOR_BYTES;  // keep later steps defined
  }
  *out_bytes = empty ? 0 : bytes;
  return !too_big;
}

static tj_status_t check_size(infer_t* c, tj_dtype_t dtype, int32_t rank,
                              const int64_t* dims) {
  int64_t bytes;
  if (byte_size_fits(dtype, rank, dims, &bytes)) return NULL;
  char shape[512];
  tj_shape_format(&c->graph->dims, rank, dims, shape, sizeof(shape));
  bool empty = false;
  for (int32_t i = 0; i < rank; ++i) empty |= dims[i] == 0;
  return fail(
      c, INVALID, "tensor size overflows: %s%s is more than 2^48 bytes%s",
      tj_dtype_name(dtype), shape, empty ? " without its zero dims" : "");
}

//===--- leaves ---===//

static tj_status_t infer_input(infer_t* c) {
  const tj_node_desc_t* d = c->desc;
  TJ_RETURN_IF_ERROR(check_dtype_valid(c, d->dtype));
  TJ_RETURN_IF_ERROR(check_dims(c, d->rank, d->dims, DIMS_ANY));
  const char* name = d->attrs.name;
  if (!tj_is_c_identifier(name))
    return fail(c, INVALID, "input name \"%s\" is not a C identifier",
                name ? name : "(null)");
  // A stored input is in graph->inputs already; the verifier checks names.
  if (!c->existing) {
    for (uint32_t i = 0; i < c->graph->num_inputs; ++i) {
      uint32_t other = c->graph->inputs[i];
      if (strcmp(c->graph->nodes[other].attrs.name, name) == 0)
        return fail(c, INVALID,
                    "input name \"%s\" is already used by node %%%u", name,
                    other);
    }
  }
  set_result(c, d->dtype, d->rank, d->dims);
  c->out->attrs.name = name;
  return NULL;
}

static tj_status_t infer_constant(infer_t* c) {
  const tj_node_desc_t* d = c->desc;
  TJ_RETURN_IF_ERROR(check_dtype_valid(c, d->dtype));
  TJ_RETURN_IF_ERROR(check_dims(c, d->rank, d->dims, DIMS_CONSTANT));
  TJ_RETURN_IF_ERROR(check_size(c, d->dtype, d->rank, d->dims));
  int64_t bytes = 0;
  byte_size_fits(d->dtype, d->rank, d->dims, &bytes);
  if (d->has_data_bytes && d->data_bytes != (uint64_t)bytes)
    return fail(c, INVALID,
                "data is %llu bytes but the constant's type needs %lld",
                (unsigned long long)d->data_bytes, (long long)bytes);
  if (!d->attrs.data && bytes > 0)
    return fail(c, INVALID, "data is NULL for %lld bytes", (long long)bytes);
  set_result(c, d->dtype, d->rank, d->dims);
  c->out->attrs.data = d->attrs.data;
  c->out->attrs.borrowed = d->attrs.borrowed;
  return NULL;
}

static tj_status_t infer_full(infer_t* c) {
  const tj_node_desc_t* d = c->desc;
  TJ_RETURN_IF_ERROR(check_dtype_valid(c, d->dtype));
  TJ_RETURN_IF_ERROR(check_dims(c, d->rank, d->dims, DIMS_ANY));
  set_result(c, d->dtype, d->rank, d->dims);
  c->out->attrs.value = d->attrs.value;
  return NULL;
}

static tj_status_t infer_iota(infer_t* c) {
  const tj_node_desc_t* d = c->desc;
  TJ_RETURN_IF_ERROR(check_dtype_valid(c, d->dtype));
  TJ_RETURN_IF_ERROR(check_class(c, d->dtype));
  TJ_RETURN_IF_ERROR(check_dims(c, d->rank, d->dims, DIMS_ANY));
  TJ_RETURN_IF_ERROR(
      normalize_axis(c, d->attrs.axis, d->rank, &c->out->attrs.axis));
  set_result(c, d->dtype, d->rank, d->dims);
  return NULL;
}

//===--- elementwise ---===//

static tj_status_t infer_unary(infer_t* c) {
  const tj_node_t* a = in(c, 0);
  tj_dtype_t dtype = a->dtype;
  if (c->desc->op == TJ_OP_CAST || c->desc->op == TJ_OP_BITCAST) {
    dtype = c->desc->dtype;
    TJ_RETURN_IF_ERROR(check_dtype_valid(c, dtype));
    if (c->desc->op == TJ_OP_BITCAST) {
      if (tj_dtype_size(dtype) != tj_dtype_size(a->dtype))
        return fail(c, INVALID,
                    "bitcast needs dtypes of one size: %s is %zu bytes, %s %zu",
                    tj_dtype_name(a->dtype), tj_dtype_size(a->dtype),
                    tj_dtype_name(dtype), tj_dtype_size(dtype));
      // A byte holds one 4- or 2-bit element, so its bits are not theirs.
      if (tj_dtype_is_small_int(dtype) || tj_dtype_is_small_int(a->dtype) ||
          dtype == TJ_DTYPE_F4E2M1 || a->dtype == TJ_DTYPE_F4E2M1)
        return fail(c, TJ_STATUS_UNSUPPORTED,
                    "bitcast of %s to %s: 4- and 2-bit dtypes "
                    "are held one per byte",
                    tj_dtype_name(a->dtype), tj_dtype_name(dtype));
    }
  } else {
    TJ_RETURN_IF_ERROR(check_class(c, a->dtype));
    if (tj_op_has(c->desc->op, TJ_OPF_BOOL_RESULT)) dtype = TJ_DTYPE_BOOL;
  }
  set_result(c, dtype, a->rank, a->dims);
  return NULL;
}

static tj_status_t infer_binary(infer_t* c) {
  const tj_node_t* a = in(c, 0);
  const tj_node_t* b = in(c, 1);
  TJ_RETURN_IF_ERROR(check_same_dtype(c, a->dtype, b->dtype));
  TJ_RETURN_IF_ERROR(check_class(c, a->dtype));
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(
      broadcast_shapes(c, a->rank, a->dims, b->rank, b->dims, &rank, dims));
  set_result(
      c, tj_op_has(c->desc->op, TJ_OPF_BOOL_RESULT) ? TJ_DTYPE_BOOL : a->dtype,
      rank, dims);
  return NULL;
}

static tj_status_t infer_where(infer_t* c) {
  const tj_node_t* cond = in(c, 0);
  const tj_node_t* a = in(c, 1);
  const tj_node_t* b = in(c, 2);
  if (cond->dtype != TJ_DTYPE_BOOL)
    return fail(c, INVALID, "cond must be bool, got %s",
                tj_dtype_name(cond->dtype));
  TJ_RETURN_IF_ERROR(check_same_dtype(c, a->dtype, b->dtype));
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(broadcast_shapes(c, cond->rank, cond->dims, a->rank,
                                      a->dims, &rank, dims));
  TJ_RETURN_IF_ERROR(
      broadcast_shapes(c, rank, dims, b->rank, b->dims, &rank, dims));
  set_result(c, a->dtype, rank, dims);
  return NULL;
}

//===--- reductions ---===//

static tj_status_t infer_reduction(infer_t* c) {
  const tj_node_desc_t* d = c->desc;
  const tj_node_t* a = in(c, 0);
  TJ_RETURN_IF_ERROR(check_class(c, a->dtype));
  bool reduced[TJ_MAX_RANK] = {false};
  uint32_t n = d->attrs.num_ints;
  if (n > 0 && !d->attrs.ints) return fail(c, INVALID, "axes is NULL");
  bool arg = d->op == TJ_OP_ARGMAX || d->op == TJ_OP_ARGMIN;
  if (arg) {
    if (n > 1) return fail(c, INVALID, "takes one axis, got %u", n);
    int64_t axis = 0;
    TJ_RETURN_IF_ERROR(normalize_axis(
        c, n == 1 ? d->attrs.ints[0] : d->attrs.axis, a->rank, &axis));
    if (a->dims[axis] == 0)
      return fail(c, INVALID, "axis %lld is empty", (long long)axis);
    reduced[axis] = true;
    c->out->attrs.axis = axis;
  } else if (n == 0) {
    for (int32_t i = 0; i < a->rank; ++i) reduced[i] = true;
  } else {
    for (uint32_t i = 0; i < n; ++i) {
      int64_t axis = 0;
      TJ_RETURN_IF_ERROR(normalize_axis(c, d->attrs.ints[i], a->rank, &axis));
      if (reduced[axis])
        return fail(c, INVALID, "axis %lld is repeated",
                    (long long)d->attrs.ints[i]);
      reduced[axis] = true;
    }
  }
  int64_t dims[TJ_MAX_RANK];
  int32_t rank = 0;
  for (int32_t i = 0; i < a->rank; ++i) {
    if (reduced[i]) {
      c->out->ints[c->out->attrs.num_ints++] = i;
      if (d->attrs.keepdims) dims[rank++] = 1;
    } else {
      dims[rank++] = a->dims[i];
    }
  }
  c->out->attrs.keepdims = d->attrs.keepdims;
  set_result(c, arg ? TJ_DTYPE_I64 : a->dtype, rank, dims);
  return NULL;
}

//===--- contraction ---===//

// numpy.matmul of shapes (ra, a) x (rb, b) into (*out_rank, out).
static tj_status_t matmul_shape(infer_t* c, int32_t ra, const int64_t* a,
                                int32_t rb, const int64_t* b, int32_t* out_rank,
                                int64_t* out) {
  if (ra < 1 || rb < 1) return fail(c, INVALID, "operands must have rank >= 1");
  // Rank-1 operands are promoted to [1, K] and [K, 1]; the added dim is
  // dropped from the result again.
  int64_t k_a = a[ra - 1];
  int64_t k_b = rb == 1 ? b[0] : b[rb - 2];
  int64_t k;
  bool conflict;
  TJ_RETURN_IF_ERROR(unify(c, k_a, k_b, &k, &conflict));
  if (conflict)
    return fail(c, INVALID, "inner dims differ: %lld vs %lld", (long long)k_a,
                (long long)k_b);
  int32_t batch_a = ra > 2 ? ra - 2 : 0;
  int32_t batch_b = rb > 2 ? rb - 2 : 0;
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(broadcast_shapes(c, batch_a, a, batch_b, b, &rank, dims));
  if (ra >= 2) dims[rank++] = a[ra - 2];
  if (rb >= 2) dims[rank++] = b[rb - 1];
  *out_rank = rank;
  memcpy(out, dims, (size_t)rank * sizeof(int64_t));
  return NULL;
}

static tj_status_t infer_matmul(infer_t* c) {
  const tj_node_t* a = in(c, 0);
  const tj_node_t* b = in(c, 1);
  TJ_RETURN_IF_ERROR(check_same_dtype(c, a->dtype, b->dtype));
  TJ_RETURN_IF_ERROR(check_class(c, a->dtype));
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(
      matmul_shape(c, a->rank, a->dims, b->rank, b->dims, &rank, dims));
  set_result(c, a->dtype, rank, dims);
  return NULL;
}

// qgemm (issue 17): matmul_i32 and matmul_integer: i8/u8 operands (mixed
// allowed), an i32 result of numpy.matmul's shape.
static tj_status_t check_int8(infer_t* c, const char* what, tj_dtype_t dt) {
  if (dt == TJ_DTYPE_I8 || dt == TJ_DTYPE_U8) return NULL;
  return fail(c, INVALID, "%s must be i8 or u8, got %s", what,
              tj_dtype_name(dt));
}

// A zero point |zp| of |x| (the operand it shifts): x's dtype, a scalar or
// broadcastable to x's shape with the dim aligned to x's K axis (|k_back|
// dims from the end) of size 1.
static tj_status_t check_zero_point(infer_t* c, const char* what,
                                    const tj_node_t* zp, const tj_node_t* x,
                                    int32_t k_back) {
  if (zp->dtype != x->dtype) {
    return fail(c, INVALID, "%s is %s; it must have its operand's dtype %s",
                what, tj_dtype_name(zp->dtype), tj_dtype_name(x->dtype));
  }
  if (zp->rank > x->rank) {
    return fail(c, INVALID, "%s has rank %d, more than its operand's %d", what,
                (int)zp->rank, (int)x->rank);
  }
  for (int32_t i = 0; i < zp->rank; ++i) {
    int64_t z = zp->dims[zp->rank - 1 - i], d = x->dims[x->rank - 1 - i];
    if (i == k_back ? z != 1 : (z != 1 && z != d)) {
      return fail(c, INVALID,
                  "%s must be a scalar, one per row of a [.., M, 1] or one "
                  "per column of b [.., 1, N]; dim %d does not fit",
                  what, (int)(zp->rank - 1 - i));
    }
  }
  return NULL;
}

// fp8 (issue 17): matmul_f8: f8e4m3/f8e5m2 operands (mixed allowed), an
// f32 result of numpy.matmul's shape.
static tj_status_t infer_matmul_f8(infer_t* c) {
  const tj_node_t* a = in(c, 0);
  const tj_node_t* b = in(c, 1);
  for (int i = 0; i < 2; ++i) {
    tj_dtype_t dt = (i ? b : a)->dtype;
    if (dt != TJ_DTYPE_F8E4M3 && dt != TJ_DTYPE_F8E5M2) {
      return fail(c, INVALID, "%s must be f8e4m3 or f8e5m2, got %s",
                  i ? "b" : "a", tj_dtype_name(dt));
    }
  }
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(
      matmul_shape(c, a->rank, a->dims, b->rank, b->dims, &rank, dims));
  set_result(c, TJ_DTYPE_F32, rank, dims);
  return NULL;
}

static tj_status_t infer_matmul_integer(infer_t* c) {
  const tj_node_t* a = in(c, 0);
  const tj_node_t* b = in(c, 1);
  TJ_RETURN_IF_ERROR(check_int8(c, "a", a->dtype));
  TJ_RETURN_IF_ERROR(check_int8(c, "b", b->dtype));
  if (c->desc->num_operands > 2) {
    const tj_node_t* za = in(c, 2);
    const tj_node_t* zb = in(c, 3);
    if (za) TJ_RETURN_IF_ERROR(check_zero_point(c, "a_zero_point", za, a, 0));
    if (zb) {
      TJ_RETURN_IF_ERROR(
          check_zero_point(c, "b_zero_point", zb, b, b->rank >= 2 ? 1 : 0));
    }
  }
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(
      matmul_shape(c, a->rank, a->dims, b->rank, b->dims, &rank, dims));
  set_result(c, TJ_DTYPE_I32, rank, dims);
  return NULL;
}

//===--- data movement ---===//

static tj_status_t infer_reshape(infer_t* c) {
  const tj_node_desc_t* d = c->desc;
  const tj_node_t* a = in(c, 0);
  TJ_RETURN_IF_ERROR(check_dims(c, d->rank, d->dims, DIMS_RESHAPE));
  tj_dimtab_t* tab = &c->graph->dims;
  int32_t infer_at = -1;
  int64_t known = 1;
  for (int32_t i = 0; i < d->rank; ++i) {
    if (d->dims[i] == TJ_DIM_INFER) {
      if (infer_at >= 0) return fail(c, INVALID, "more than one dim is -1");
      infer_at = i;
      continue;
    }
    TJ_RETURN_IF_ERROR(wrap(c, tj_dim_mul(tab, known, d->dims[i], &known)));
  }
  int64_t numel;
  TJ_RETURN_IF_ERROR(wrap(c, tj_dim_product(tab, a->rank, a->dims, &numel)));
  int64_t dims[TJ_MAX_RANK];
  if (d->rank > 0) memcpy(dims, d->dims, (size_t)d->rank * sizeof(int64_t));
  dimtext_t t = {0};
  if (infer_at >= 0) {
    bool ok = false;
    TJ_RETURN_IF_ERROR(
        wrap(c, tj_dim_div_exact(tab, numel, known, &dims[infer_at], &ok)));
    if (!ok)
      return fail(c, INVALID,
                  "cannot infer dim %d: %s elements are not a multiple of %s",
                  (int)infer_at, dimstr(c, &t, numel), dimstr(c, &t, known));
  } else if (numel != known) {
    return fail(c, INVALID, "element count differs: %s vs %s",
                dimstr(c, &t, numel), dimstr(c, &t, known));
  }
  set_result(c, a->dtype, d->rank, dims);
  return NULL;
}

static tj_status_t infer_transpose(infer_t* c) {
  const tj_node_desc_t* d = c->desc;
  const tj_node_t* a = in(c, 0);
  if (d->attrs.num_ints != (uint32_t)a->rank)
    return fail(c, INVALID, "perm has %u entries for rank %d",
                d->attrs.num_ints, (int)a->rank);
  if (a->rank > 0 && !d->attrs.ints) return fail(c, INVALID, "perm is NULL");
  bool used[TJ_MAX_RANK] = {false};
  int64_t dims[TJ_MAX_RANK];
  for (int32_t i = 0; i < a->rank; ++i) {
    int64_t axis = 0;
    TJ_RETURN_IF_ERROR(normalize_axis(c, d->attrs.ints[i], a->rank, &axis));
    if (used[axis])
      return fail(c, INVALID, "perm repeats axis %lld", (long long)axis);
    used[axis] = true;
    c->out->ints[i] = axis;
    dims[i] = a->dims[axis];
  }
  c->out->attrs.num_ints = (uint32_t)a->rank;
  set_result(c, a->dtype, a->rank, dims);
  return NULL;
}

static tj_status_t infer_broadcast_to(infer_t* c) {
  const tj_node_desc_t* d = c->desc;
  const tj_node_t* a = in(c, 0);
  TJ_RETURN_IF_ERROR(check_dims(c, d->rank, d->dims, DIMS_ANY));
  if (d->rank < a->rank)
    return fail(c, INVALID, "cannot broadcast rank %d to rank %d", (int)a->rank,
                (int)d->rank);
  int32_t lead = d->rank - a->rank;
  for (int32_t i = 0; i < a->rank; ++i) {
    int64_t x = a->dims[i], y = d->dims[lead + i];
    if (x == y || x == 1) continue;
    int64_t unused;
    bool conflict;
    TJ_RETURN_IF_ERROR(unify(c, x, y, &unused, &conflict));
    if (conflict) {
      dimtext_t t = {0};
      return fail(c, INVALID, "cannot broadcast dim %d (%s) to %s", (int)i,
                  dimstr(c, &t, x), dimstr(c, &t, y));
    }
  }
  set_result(c, a->dtype, d->rank, d->dims);
  return NULL;
}

// Any start at or below -TJ_MAX_TENSOR_BYTES (and stop at or above it) lies
// beyond every possible dim, so it clamps to the edge whatever B turns out
// to be: that is what lets a symbolic axis be sliced "whole".
static bool slice_is_whole(int64_t start, int64_t stop, int64_t step) {
  return (start == 0 || start <= -TJ_MAX_TENSOR_BYTES) &&
         stop >= TJ_MAX_TENSOR_BYTES && step == 1;
}

// numpy's normalization of one bound for a positive step.
static int64_t clamp_bound(int64_t bound, int64_t n) {
  if (bound < 0) {
    bound += n;  // no overflow: bound < 0 <= n
    if (bound < 0) bound = 0;
  }
  return bound > n ? n : bound;
}

static tj_status_t infer_slice(infer_t* c) {
  const tj_node_desc_t* d = c->desc;
  const tj_node_t* a = in(c, 0);
  int32_t rank = a->rank;
  if (d->attrs.num_ints != (uint32_t)(3 * rank))
    return fail(c, INVALID,
                "needs %d starts, stops and steps for rank %d, got %u ints",
                (int)(3 * rank), (int)rank, d->attrs.num_ints);
  if (rank > 0 && !d->attrs.ints)
    return fail(c, INVALID, "starts/stops/steps is NULL");
  // Indexed, not offset: ints is NULL for rank 0.
  const int64_t* ints = d->attrs.ints;
  int64_t* out = c->out->ints;
  int64_t dims[TJ_MAX_RANK];
  for (int32_t i = 0; i < rank; ++i) {
    int64_t n = a->dims[i];
    int64_t start = ints[i], stop = ints[rank + i], step = ints[2 * rank + i];
    if (step <= 0)
      return fail(c, INVALID, "step %lld on axis %d must be > 0",
                  (long long)step, (int)i);
    if (n < 0) {
      if (!slice_is_whole(start, stop, step)) {
        dimtext_t t = {0};
        return fail(
            c, TJ_STATUS_UNSUPPORTED,
            "axis %d has symbolic size %s and can only be sliced "
            "whole (start 0, stop INT64_MAX, step 1), got %lld:%lld:%lld",
            (int)i, dimstr(c, &t, n), (long long)start, (long long)stop,
            (long long)step);
      }
      out[i] = 0;
      out[rank + i] = INT64_MAX;
      out[2 * rank + i] = 1;
      dims[i] = n;
      continue;
    }
    start = clamp_bound(start, n);
    stop = clamp_bound(stop, n);
    out[i] = start;
    out[rank + i] = stop;
    out[2 * rank + i] = step;
    // ceil((stop - start) / step) without overflowing for a huge step.
    dims[i] = stop > start ? (stop - start - 1) / step + 1 : 0;
  }
  c->out->attrs.num_ints = (uint32_t)(3 * rank);
  set_result(c, a->dtype, rank, dims);
  return NULL;
}

static tj_status_t infer_concat(infer_t* c) {
  const tj_node_desc_t* d = c->desc;
  const tj_node_t* first = in(c, 0);
  int32_t rank = first->rank;
  if (rank < 1) return fail(c, INVALID, "operands must have rank >= 1");
  int64_t axis = 0;
  TJ_RETURN_IF_ERROR(normalize_axis(c, d->attrs.axis, rank, &axis));
  int64_t dims[TJ_MAX_RANK];
  memcpy(dims, first->dims, (size_t)rank * sizeof(int64_t));
  for (uint32_t k = 1; k < d->num_operands; ++k) {
    const tj_node_t* v = in(c, k);
    if (v->dtype != first->dtype)
      return fail(c, INVALID, "dtype mismatch %s vs %s (operand %u)",
                  tj_dtype_name(first->dtype), tj_dtype_name(v->dtype), k);
    if (v->rank != rank)
      return fail(c, INVALID, "rank mismatch %d vs %d (operand %u)", (int)rank,
                  (int)v->rank, k);
    for (int32_t i = 0; i < rank; ++i) {
      if (i == axis) {
        TJ_RETURN_IF_ERROR(wrap(
            c, tj_dim_add(&c->graph->dims, dims[i], v->dims[i], &dims[i])));
        continue;
      }
      bool conflict;
      int64_t before = dims[i];
      TJ_RETURN_IF_ERROR(unify(c, before, v->dims[i], &dims[i], &conflict));
      if (conflict)
        return fail(c, INVALID, "dim %d differs: %lld vs %lld (operand %u)",
                    (int)i, (long long)before, (long long)v->dims[i], k);
    }
  }
  c->out->attrs.axis = axis;
  set_result(c, first->dtype, rank, dims);
  return NULL;
}

static tj_status_t infer_pad(infer_t* c) {
  const tj_node_desc_t* d = c->desc;
  const tj_node_t* a = in(c, 0);
  int32_t rank = a->rank;
  if (d->attrs.num_ints != (uint32_t)(2 * rank))
    return fail(c, INVALID, "needs %d low and high pads for rank %d, got %u",
                (int)(2 * rank), (int)rank, d->attrs.num_ints);
  if (rank > 0 && !d->attrs.ints) return fail(c, INVALID, "low/high is NULL");
  int64_t dims[TJ_MAX_RANK];
  for (int32_t i = 0; i < rank; ++i) {
    int64_t low = d->attrs.ints[i], high = d->attrs.ints[rank + i];
    if (low < 0 || high < 0)
      return fail(c, INVALID, "padding of axis %d is %lld, %lld; must be >= 0",
                  (int)i, (long long)low, (long long)high);
    tj_dimtab_t* tab = &c->graph->dims;
    TJ_RETURN_IF_ERROR(wrap(c, tj_dim_add(tab, a->dims[i], low, &dims[i])));
    TJ_RETURN_IF_ERROR(wrap(c, tj_dim_add(tab, dims[i], high, &dims[i])));
    c->out->ints[i] = low;
    c->out->ints[rank + i] = high;
  }
  c->out->attrs.num_ints = (uint32_t)(2 * rank);
  c->out->attrs.value = d->attrs.value;
  set_result(c, a->dtype, rank, dims);
  return NULL;
}

static tj_status_t infer_gather(infer_t* c) {
  const tj_node_t* a = in(c, 0);
  const tj_node_t* indices = in(c, 1);
  if (indices->dtype != TJ_DTYPE_I32 && indices->dtype != TJ_DTYPE_I64)
    return fail(c, INVALID, "indices must be i32 or i64, got %s",
                tj_dtype_name(indices->dtype));
  if (a->rank < 1) return fail(c, INVALID, "a must have rank >= 1");
  int64_t axis = 0;
  TJ_RETURN_IF_ERROR(normalize_axis(c, c->desc->attrs.axis, a->rank, &axis));
  int32_t rank = a->rank - 1 + indices->rank;
  if (rank > TJ_MAX_RANK)
    return fail(c, INVALID, "result rank %d exceeds %d", (int)rank,
                TJ_MAX_RANK);
  int64_t dims[TJ_MAX_RANK];
  int32_t n = 0;
  for (int32_t i = 0; i < axis; ++i) dims[n++] = a->dims[i];
  for (int32_t i = 0; i < indices->rank; ++i) dims[n++] = indices->dims[i];
  for (int32_t i = (int32_t)axis + 1; i < a->rank; ++i) dims[n++] = a->dims[i];
  c->out->attrs.axis = axis;
  set_result(c, a->dtype, rank, dims);
  return NULL;
}

// ops (issue 15): gather_elements: y has indices' shape (a's rank); along
// every axis but |axis| indices' dim is a's, or both are constants and
// indices' is at most a's.
static tj_status_t infer_gather_elements(infer_t* c) {
  const tj_node_t* a = in(c, 0);
  const tj_node_t* ix = in(c, 1);
  if (ix->dtype != TJ_DTYPE_I32 && ix->dtype != TJ_DTYPE_I64)
    return fail(c, INVALID, "indices must be i32 or i64, got %s",
                tj_dtype_name(ix->dtype));
  if (a->rank < 1) return fail(c, INVALID, "a must have rank >= 1");
  if (ix->rank != a->rank)
    return fail(c, INVALID, "indices have rank %d, a has rank %d",
                (int)ix->rank, (int)a->rank);
  int64_t axis = 0;
  TJ_RETURN_IF_ERROR(normalize_axis(c, c->desc->attrs.axis, a->rank, &axis));
  for (int32_t d = 0; d < a->rank; ++d) {
    if (d == axis || ix->dims[d] == a->dims[d]) continue;
    if (ix->dims[d] < 0 || a->dims[d] < 0 || ix->dims[d] > a->dims[d])
      return fail(c, INVALID,
                  "indices' dim %d must be a's or a constant at most a's", d);
  }
  c->out->attrs.axis = axis;
  set_result(c, a->dtype, ix->rank, ix->dims);
  return NULL;
}

// ops3 (issue 15): cumsum and cumprod keep a's type; the axis is
// normalized, the flags are [exclusive, reverse] (0 or 1).
static tj_status_t infer_scan(infer_t* c) {
  const tj_node_t* a = in(c, 0);
  TJ_RETURN_IF_ERROR(check_class(c, a->dtype));
  if (a->rank < 1) return fail(c, INVALID, "a must have rank >= 1");
  const tj_attrs_t* at = &c->desc->attrs;
  if (at->num_ints != 2 || (uint64_t)at->ints[0] > 1 ||
      (uint64_t)at->ints[1] > 1)
    return fail(c, INVALID, "the flags must be [exclusive, reverse], 0 or 1");
  int64_t axis = 0;
  TJ_RETURN_IF_ERROR(normalize_axis(c, at->axis, a->rank, &axis));
  c->out->attrs.axis = axis;
  c->out->ints[0] = at->ints[0];
  c->out->ints[1] = at->ints[1];
  c->out->attrs.num_ints = 2;
  set_result(c, a->dtype, a->rank, a->dims);
  return NULL;
}

// scatter (issue 15): the reduction (attr.ints[0]) and the shared checks:
// indices i32 or i64, updates of data's dtype, no arithmetic on bool.
static tj_status_t scatter_common(infer_t* c, const tj_node_t* data,
                                  const tj_node_t* ix, const tj_node_t* up) {
  const tj_attrs_t* at = &c->desc->attrs;
  if (at->num_ints != 1 || !tj_scatter_reduction_name(at->ints[0]))
    return fail(c, INVALID,
                "the reduction must be one of none, add, mul, max, min "
                "(0 to 4)");
  if (ix->dtype != TJ_DTYPE_I32 && ix->dtype != TJ_DTYPE_I64)
    return fail(c, INVALID, "indices must be i32 or i64, got %s",
                tj_dtype_name(ix->dtype));
  if (up->dtype != data->dtype)
    return fail(c, INVALID, "updates are %s but data is %s",
                tj_dtype_name(up->dtype), tj_dtype_name(data->dtype));
  if (at->ints[0] != TJ_SCATTER_REDUCTION_NONE && data->dtype == TJ_DTYPE_BOOL)
    return fail(c, INVALID, "reduction %s of bool",
                tj_scatter_reduction_name(at->ints[0]));
  c->out->ints[0] = at->ints[0];
  c->out->attrs.num_ints = 1;
  return NULL;
}

// scatter_elements: indices and updates share one shape of data's rank;
// along every axis but |axis| it is data's dim, or both are constants and
// it is at most data's. y has data's type.
static tj_status_t infer_scatter_elements(infer_t* c) {
  const tj_node_t* data = in(c, 0);
  const tj_node_t* ix = in(c, 1);
  const tj_node_t* up = in(c, 2);
  TJ_RETURN_IF_ERROR(scatter_common(c, data, ix, up));
  if (data->rank < 1) return fail(c, INVALID, "data must have rank >= 1");
  if (ix->rank != data->rank)
    return fail(c, INVALID, "indices have rank %d, data has rank %d",
                (int)ix->rank, (int)data->rank);
  for (int32_t d = 0; d < ix->rank; ++d) {
    if (up->rank != ix->rank || up->dims[d] != ix->dims[d])
      return fail(c, INVALID, "updates must have indices' shape");
  }
  int64_t axis = 0;
  TJ_RETURN_IF_ERROR(normalize_axis(c, c->desc->attrs.axis, data->rank, &axis));
  for (int32_t d = 0; d < data->rank; ++d) {
    if (d == axis || ix->dims[d] == data->dims[d]) continue;
    if (ix->dims[d] < 0 || data->dims[d] < 0 || ix->dims[d] > data->dims[d])
      return fail(c, INVALID,
                  "indices' dim %d must be data's or a constant at most "
                  "data's",
                  d);
  }
  c->out->attrs.axis = axis;
  set_result(c, data->dtype, data->rank, data->dims);
  return NULL;
}

// scatter_nd: indices' last dim k is a constant, 1 <= k <= rank(data);
// updates = indices.shape[:-1] + data.shape[k:]. y has data's type.
static tj_status_t infer_scatter_nd(infer_t* c) {
  const tj_node_t* data = in(c, 0);
  const tj_node_t* ix = in(c, 1);
  const tj_node_t* up = in(c, 2);
  TJ_RETURN_IF_ERROR(scatter_common(c, data, ix, up));
  if (ix->rank < 1) return fail(c, INVALID, "indices must have rank >= 1");
  int64_t k = ix->dims[ix->rank - 1];
  if (k < 1 || k > data->rank)
    return fail(c, INVALID,
                "indices' last dim must be a constant k with 1 <= k <= %d",
                (int)data->rank);
  int32_t rank = ix->rank - 1 + data->rank - (int32_t)k;
  bool ok = up->rank == rank;
  for (int32_t d = 0; ok && d < ix->rank - 1; ++d)
    ok = up->dims[d] == ix->dims[d];
  for (int32_t d = (int32_t)k; ok && d < data->rank; ++d)
    ok = up->dims[ix->rank - 1 + d - k] == data->dims[d];
  if (!ok)
    return fail(c, INVALID,
                "updates must be indices.shape[:-1] + data.shape[%lld:]",
                (long long)k);
  c->out->attrs.axis = 0;
  set_result(c, data->dtype, data->rank, data->dims);
  return NULL;
}

// topk (issue 15): argtopk keeps a's shape but for attr.axis, which becomes
// k (the axis itself when k is -1, a sort); the result is i64. k must fit a
// constant axis; along a symbolic one only the whole axis may be taken,
// since no guard can state n >= k.
static tj_status_t infer_topk(infer_t* c) {
  const tj_node_t* a = in(c, 0);
  TJ_RETURN_IF_ERROR(check_class(c, a->dtype));
  if (a->rank < 1) return fail(c, INVALID, "a must have rank >= 1");
  const tj_attrs_t* at = &c->desc->attrs;
  if (at->num_ints != 2 || at->ints[0] < -1 || (uint64_t)at->ints[1] > 1)
    return fail(c, INVALID,
                "the attributes must be [k >= 0 or -1 (the whole axis), "
                "largest 0 or 1]");
  int64_t axis = 0;
  TJ_RETURN_IF_ERROR(normalize_axis(c, at->axis, a->rank, &axis));
  int64_t n = a->dims[axis], k = at->ints[0];
  int64_t dims[TJ_MAX_RANK];
  memcpy(dims, a->dims, (size_t)a->rank * sizeof(int64_t));
  if (k >= 0) {
    dimtext_t t = {0};
    if (!tj_dim_is_const(n))
      return fail(c, INVALID,
                  "k=%lld along axis %lld of symbolic length %s: only the "
                  "whole axis (k = -1) may be taken along a symbolic axis",
                  (long long)k, (long long)axis, dimstr(c, &t, n));
    if (k > n)
      return fail(c, INVALID, "k=%lld exceeds the length %lld of axis %lld",
                  (long long)k, (long long)n, (long long)axis);
    dims[axis] = k;
  }
  c->out->attrs.axis = axis;
  c->out->ints[0] = k;
  c->out->ints[1] = at->ints[1];
  c->out->attrs.num_ints = 2;
  set_result(c, TJ_DTYPE_I64, a->rank, dims);
  return NULL;
}

// ops (issue 15): gather_nd with attr.axis batch dims b: indices' last dim
// k is a constant, 1 <= b + k <= rank(a), b < rank(indices), indices'
// first b dims are a's; y = indices.shape[:-1] + a.shape[b + k:].
static tj_status_t infer_gather_nd(infer_t* c) {
  const tj_node_t* a = in(c, 0);
  const tj_node_t* ix = in(c, 1);
  if (ix->dtype != TJ_DTYPE_I32 && ix->dtype != TJ_DTYPE_I64)
    return fail(c, INVALID, "indices must be i32 or i64, got %s",
                tj_dtype_name(ix->dtype));
  int64_t b = c->desc->attrs.axis;
  if (ix->rank < 1) return fail(c, INVALID, "indices must have rank >= 1");
  if (b < 0 || b >= ix->rank || b >= a->rank)
    return fail(c, INVALID,
                "batch_dims %lld must be >= 0 and below the ranks of a (%d) "
                "and indices (%d)",
                (long long)b, (int)a->rank, (int)ix->rank);
  int64_t k = ix->dims[ix->rank - 1];
  if (k < 1 || b + k > a->rank)
    return fail(c, INVALID,
                "indices' last dim must be a constant k with 1 <= "
                "batch_dims + k <= %d",
                (int)a->rank);
  for (int32_t d = 0; d < b; ++d) {
    if (ix->dims[d] != a->dims[d])
      return fail(c, INVALID, "indices' batch dim %d is not a's", d);
  }
  int32_t rank = ix->rank - 1 + a->rank - (int32_t)(b + k);
  int64_t dims[TJ_MAX_RANK];
  int32_t n = 0;
  for (int32_t d = 0; d < ix->rank - 1; ++d) dims[n++] = ix->dims[d];
  if (rank > TJ_MAX_RANK)
    return fail(c, INVALID, "result rank %d exceeds %d", (int)rank,
                TJ_MAX_RANK);
  for (int32_t d = (int32_t)(b + k); d < a->rank; ++d) dims[n++] = a->dims[d];
  c->out->attrs.axis = b;
  set_result(c, a->dtype, rank, dims);
  return NULL;
}

// opsmisc: one_hot(indices, values) of the written type: indices' shape
// with depth (>= 0, any dim) inserted at axis, values' dtype; values holds
// two elements (off, on).
static tj_status_t infer_one_hot(infer_t* c) {
  const tj_node_desc_t* d = c->desc;
  const tj_node_t* ix = in(c, 0);
  const tj_node_t* v = in(c, 1);
  if (!tj_dtype_is_int(ix->dtype))
    return fail(c, INVALID, "indices must be an integer dtype, got %s",
                tj_dtype_name(ix->dtype));
  if (v->rank != 1 || v->dims[0] != 2)
    return fail(c, INVALID, "values must have shape [2] (off, on)");
  int32_t rank = ix->rank + 1;
  if (rank > TJ_MAX_RANK)
    return fail(c, INVALID, "result rank %d exceeds %d", (int)rank,
                TJ_MAX_RANK);
  int64_t axis = 0;
  TJ_RETURN_IF_ERROR(normalize_axis(c, d->attrs.axis, rank, &axis));
  if (d->dtype != v->dtype || d->rank != rank || !d->dims)
    return fail(c, INVALID, "the result must be %s of rank %d",
                tj_dtype_name(v->dtype), (int)rank);
  TJ_RETURN_IF_ERROR(check_dims(c, d->rank, d->dims, DIMS_ANY));
  int64_t dims[TJ_MAX_RANK];
  for (int32_t i = 0, j = 0; i < rank; ++i) {
    if (i == axis) {
      dims[i] = d->dims[i];
    } else {
      if (d->dims[i] != ix->dims[j])
        return fail(c, INVALID, "the result's dim %d is not indices' dim %d",
                    (int)i, (int)j);
      dims[i] = ix->dims[j++];
    }
  }
  c->out->attrs.axis = axis;
  set_result(c, v->dtype, rank, dims);
  return NULL;
}

//===--- composites ---===//

static tj_status_t infer_pointwise_composite(infer_t* c) {
  const tj_node_t* x = in(c, 0);
  TJ_RETURN_IF_ERROR(check_class(c, x->dtype));
  if (tj_op_info(c->desc->op)->attr_kind == TJ_ATTR_KIND_APPROX)
    c->out->attrs.approximate = c->desc->attrs.approximate;
  set_result(c, x->dtype, x->rank, x->dims);
  return NULL;
}

static tj_status_t infer_softmax(infer_t* c) {
  const tj_node_t* x = in(c, 0);
  TJ_RETURN_IF_ERROR(check_class(c, x->dtype));
  if (x->rank < 1) return fail(c, INVALID, "x must have rank >= 1");
  TJ_RETURN_IF_ERROR(
      normalize_axis(c, c->desc->attrs.axis, x->rank, &c->out->attrs.axis));
  set_result(c, x->dtype, x->rank, x->dims);
  return NULL;
}

// A [N] parameter (gamma, beta, bias) of a composite: |x_dtype| and one dim
// that must equal |n| (guarded when symbolic). Returns the agreed N.
static tj_status_t check_vector(infer_t* c, uint32_t slot, const char* what,
                                tj_dtype_t x_dtype, int64_t n, int64_t* out_n) {
  *out_n = n;
  const tj_node_t* v = in(c, slot);
  if (!v) return NULL;
  if (v->dtype != x_dtype)
    return fail(c, INVALID, "dtype mismatch %s vs %s (%s)",
                tj_dtype_name(x_dtype), tj_dtype_name(v->dtype), what);
  dimtext_t t = {0};
  if (v->rank != 1)
    return fail(c, INVALID, "%s must have shape [%s], got rank %d", what,
                dimstr(c, &t, n), (int)v->rank);
  bool conflict;
  TJ_RETURN_IF_ERROR(unify(c, n, v->dims[0], out_n, &conflict));
  if (conflict)
    return fail(c, INVALID, "%s must have shape [%s], got [%s]", what,
                dimstr(c, &t, n), dimstr(c, &t, v->dims[0]));
  return NULL;
}

static tj_status_t infer_norm(infer_t* c) {
  const tj_node_t* x = in(c, 0);
  TJ_RETURN_IF_ERROR(check_class(c, x->dtype));
  if (x->rank < 1) return fail(c, INVALID, "x must have rank >= 1");
  double eps = c->desc->attrs.value;
  if (!isfinite(eps) || eps < 0)
    return fail(c, INVALID, "eps %g must be finite and >= 0", eps);
  int64_t dims[TJ_MAX_RANK];
  memcpy(dims, x->dims, (size_t)x->rank * sizeof(int64_t));
  int64_t* n = &dims[x->rank - 1];
  TJ_RETURN_IF_ERROR(check_vector(c, 1, "gamma", x->dtype, *n, n));
  if (c->desc->op == TJ_OP_LAYER_NORM)
    TJ_RETURN_IF_ERROR(check_vector(c, 2, "beta", x->dtype, *n, n));
  c->out->attrs.value = eps;
  set_result(c, x->dtype, x->rank, dims);
  return NULL;
}

static tj_status_t infer_linear(infer_t* c) {
  const tj_node_t* x = in(c, 0);
  const tj_node_t* w = in(c, 1);
  TJ_RETURN_IF_ERROR(check_class(c, x->dtype));
  TJ_RETURN_IF_ERROR(check_same_dtype(c, x->dtype, w->dtype));
  if (w->rank != 2) return fail(c, INVALID, "w must have rank 2");
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(
      matmul_shape(c, x->rank, x->dims, w->rank, w->dims, &rank, dims));
  TJ_RETURN_IF_ERROR(
      check_vector(c, 2, "b", x->dtype, dims[rank - 1], &dims[rank - 1]));
  set_result(c, x->dtype, rank, dims);
  return NULL;
}

// A registered custom op: the type from its shape function
// (lib/custom_op.c).
static tj_status_t infer_custom(infer_t* c) {
  tj_ir_inferred_t* out = c->out;
  int64_t version = 0;
  tj_status_t status =
      tj_custom_infer(c->graph, c->desc, &out->dtype, &out->rank, out->dims,
                      out->ints, &out->attrs.num_ints, &version);
  if (status) return wrap(c, status);
  out->attrs.name = c->desc->attrs.name;
  out->attrs.axis = version;
  return NULL;
}

//===--- attention (issue 14) ---===//

// tj_graph_attention (tj_graph.h): q [B..., H, Tq, D], k [B..., Hkv, Tk, D],
// v [B..., Hkv, Tk, Dv], mask broadcastable to [B..., H, Tq, Tk]; heads and
// head dims constant. Stores the resolved scale and the causal flag.
//
// attention's backward (fabwd) shares the checks: attention_lse has no v
// (|v_slot| < 0; its mask is operand 2) and gives [B..., H, Tq] of the
// compute dtype; attention_dq and attention_dkv add g [B..., H, Tq, Dv]
// and lse, delta [B..., H, Tq], and give dq [B..., H, Tq, D] and
// [dk | dv] [B..., Hkv, Tk, D + Dv] of q's dtype.
static tj_status_t check_grad_operands(infer_t* c, int32_t r,
                                       const int64_t* full, int64_t d,
                                       int64_t dv);

static tj_status_t infer_attention(infer_t* c) {
  const tj_op_t op = c->desc->op;
  const bool has_v = op != TJ_OP_ATTENTION_LSE;
  const tj_node_t* q = in(c, 0);
  const tj_node_t* k = in(c, 1);
  const tj_node_t* v = has_v ? in(c, 2) : k;
  const tj_node_t* m = in(c, has_v ? 3 : 2);
  TJ_RETURN_IF_ERROR(check_class(c, q->dtype));
  TJ_RETURN_IF_ERROR(check_same_dtype(c, q->dtype, k->dtype));
  TJ_RETURN_IF_ERROR(check_same_dtype(c, q->dtype, v->dtype));
  const int32_t r = q->rank;
  if (r < 3 || k->rank != r || v->rank != r)
    return fail(c, INVALID,
                "q, k and v must have one rank >= 3 ([B..., H, T, D]), got "
                "%d, %d and %d",
                (int)q->rank, (int)k->rank, (int)v->rank);
  const int64_t h = q->dims[r - 3], hkv = k->dims[r - 3];
  const int64_t d = q->dims[r - 1], dv = v->dims[r - 1];
  dimtext_t t = {0};
  const int64_t fixed[6] = {h, hkv, v->dims[r - 3], d, k->dims[r - 1], dv};
  for (int i = 0; i < 6; ++i) {
    if (!tj_dim_is_const(fixed[i]))
      return fail(c, INVALID,
                  "heads and head dims must be constants, got %s ([B..., H, "
                  "T, D] axes %d or %d)",
                  dimstr(c, &t, fixed[i]), (int)r - 3, (int)r - 1);
  }
  if (k->dims[r - 1] != d)
    return fail(c, INVALID, "q and k head dims differ: %lld vs %lld",
                (long long)d, (long long)k->dims[r - 1]);
  if (v->dims[r - 3] != hkv)
    return fail(c, INVALID, "k and v head counts differ: %lld vs %lld",
                (long long)hkv, (long long)v->dims[r - 3]);
  if (hkv == 0 || h % hkv != 0)
    return fail(c, INVALID,
                "q's %lld heads are not a multiple of k and v's %lld "
                "(grouped-query attention)",
                (long long)h, (long long)hkv);
  int64_t tk;
  bool conflict;
  TJ_RETURN_IF_ERROR(unify(c, k->dims[r - 2], v->dims[r - 2], &tk, &conflict));
  if (conflict)
    return fail(c, INVALID, "k and v lengths differ: %s vs %s",
                dimstr(c, &t, k->dims[r - 2]), dimstr(c, &t, v->dims[r - 2]));
  int32_t nb, nb2;
  int64_t batch[TJ_MAX_RANK], full[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(
      broadcast_shapes(c, r - 3, q->dims, r - 3, k->dims, &nb, batch));
  TJ_RETURN_IF_ERROR(
      broadcast_shapes(c, nb, batch, r - 3, v->dims, &nb2, full));
  full[r - 3] = h;
  full[r - 2] = q->dims[r - 2];
  full[r - 1] = tk;
  if (m) {
    if (m->dtype != TJ_DTYPE_BOOL && m->dtype != q->dtype)
      return fail(c, INVALID, "the mask must be bool or %s, got %s",
                  tj_dtype_name(q->dtype), tj_dtype_name(m->dtype));
    if (m->rank > r)
      return fail(c, INVALID, "the mask's rank %d exceeds the scores' %d",
                  (int)m->rank, (int)r);
    for (int32_t i = 0; i < m->rank; ++i) {
      int64_t md = m->dims[i], fd = full[r - m->rank + i], agreed;
      if (md == 1) continue;
      TJ_RETURN_IF_ERROR(unify(c, md, fd, &agreed, &conflict));
      if (conflict)
        return fail(c, INVALID,
                    "the mask's dim %d (%s) does not broadcast to the "
                    "scores' %s",
                    (int)i, dimstr(c, &t, md), dimstr(c, &t, fd));
    }
  }
  const tj_attrs_t* a = &c->desc->attrs;
  if (a->num_ints != 1 || !a->ints || (a->ints[0] != 0 && a->ints[0] != 1))
    return fail(c, INVALID, "the causal flag must be one 0 or 1");
  double scale = a->value;
  if (scale == 0) {
    if (d == 0)
      return fail(c, INVALID, "the default scale 1/sqrt(D) needs D > 0");
    scale = 1.0 / sqrt((double)d);
  }
  if (!isfinite(scale))
    return fail(c, INVALID, "scale %g must be finite", scale);
  c->out->attrs.value = scale;
  c->out->ints[0] = a->ints[0];
  c->out->attrs.num_ints = 1;
  if (op == TJ_OP_ATTENTION_LSE) {
    set_result(c, tj_attention_lse_dtype(q->dtype), r - 1, full);
    return NULL;
  }
  if (op != TJ_OP_ATTENTION)
    TJ_RETURN_IF_ERROR(check_grad_operands(c, r, full, d, dv));
  if (op == TJ_OP_ATTENTION_DKV) {
    full[r - 3] = hkv;
    full[r - 2] = tk;
    full[r - 1] = d + dv;
  } else {
    full[r - 1] = op == TJ_OP_ATTENTION_DQ ? d : dv;
  }
  set_result(c, q->dtype, r, full);
  return NULL;
}

// g of q's dtype and the forward's shape; lse and delta of the compute
// dtype and g's shape less its last axis. |full| is [B..., H, Tq, Tk].
static tj_status_t check_grad_operands(infer_t* c, int32_t r,
                                       const int64_t* full, int64_t d,
                                       int64_t dv) {
  (void)d;
  const tj_node_t* q = in(c, 0);
  const tj_node_t* rows[3] = {in(c, 4), in(c, 5), in(c, 6)};
  static const char* const kNames[3] = {"g", "lse", "delta"};
  dimtext_t t = {0};
  for (int i = 0; i < 3; ++i) {
    const tj_node_t* x = rows[i];
    const tj_dtype_t want =
        i == 0 ? q->dtype : tj_attention_lse_dtype(q->dtype);
    const int32_t want_rank = i == 0 ? r : r - 1;
    if (x->dtype != want)
      return fail(c, INVALID, "%s must be %s, got %s", kNames[i],
                  tj_dtype_name(want), tj_dtype_name(x->dtype));
    if (x->rank != want_rank)
      return fail(c, INVALID, "%s must have rank %d, got %d", kNames[i],
                  (int)want_rank, (int)x->rank);
    for (int32_t a = 0; a < want_rank; ++a) {
      const int64_t want_dim = a == r - 1 ? dv : full[a];
      int64_t agreed;
      bool conflict;
      TJ_RETURN_IF_ERROR(unify(c, x->dims[a], want_dim, &agreed, &conflict));
      if (conflict)
        return fail(c, INVALID,
                    "%s's dim %d is %s, the attention's output has %s",
                    kNames[i], (int)a, dimstr(c, &t, x->dims[a]),
                    dimstr(c, &t, want_dim));
    }
  }
  return NULL;
}

//===--- convolution and pooling (lib/window.h) ---===//

// One spatial axis's output size: the conv/pool rule, or conv_transpose's.
// A symbolic |in| is accepted where the result is in + constant.
static tj_status_t window_axis(infer_t* c, int32_t axis, int64_t in, int64_t k,
                               int64_t s, int64_t d, int64_t lo, int64_t hi,
                               int64_t op_pad, bool ceil_mode, int64_t* out) {
  const bool transpose = c->desc->op == TJ_OP_CONV_TRANSPOSE;
  // Attribute magnitudes are bounded first so the arithmetic cannot wrap.
  const int64_t kLimit = (int64_t)1 << 40;
  if (k > kLimit || s > kLimit || d > kLimit || lo > kLimit || hi > kLimit)
    return fail(c, INVALID, "window attribute of spatial axis %d above 2^40",
                (int)axis);
  const int64_t span = d * (k - 1) + 1;  // the dilated window
  dimtext_t t = {0};
  if (!tj_dim_is_const(in)) {
    if (s != 1)
      return fail(c, TJ_STATUS_UNSUPPORTED,
                  "spatial axis %d has symbolic size %s: only stride 1 is "
                  "supported there, got %lld",
                  (int)axis, dimstr(c, &t, in), (long long)s);
    int64_t delta =
        transpose ? op_pad + span - 1 - lo - hi : lo + hi - span + 1;
    // Dims are polynomials with a non-negative constant term here.
    if (delta < 0)
      return fail(c, TJ_STATUS_UNSUPPORTED,
                  "spatial axis %d has symbolic size %s: the output would be "
                  "%s - %lld; only sizes that do not shrink are supported",
                  (int)axis, dimstr(c, &t, in), dimstr(c, &t, in),
                  (long long)-delta);
    return wrap(c, tj_dim_add(&c->graph->dims, in, delta, out));
  }
  if (in > kLimit)
    return fail(c, INVALID, "spatial axis %d has size %lld above 2^40",
                (int)axis, (long long)in);
  int64_t size;
  if (transpose) {
    size = (in > 0 ? s * (in - 1) : 0) + op_pad + span - lo - hi;
  } else {
    int64_t room = in + lo + hi - span;  // the last window's start
    if (room < 0) {
      size = 0;
    } else if (!ceil_mode) {
      size = room / s + 1;
    } else {
      size = (room + s - 1) / s + 1;
      // torch: the last window must start inside x or the begin padding.
      if ((size - 1) * s >= in + lo) --size;
    }
  }
  if (size < 1)
    return fail(c, INVALID,
                "spatial axis %d: output size %lld < 1 (size %lld, kernel "
                "%lld, stride %lld, dilation %lld, pads %lld, %lld)",
                (int)axis, (long long)size, (long long)in, (long long)k,
                (long long)s, (long long)d, (long long)lo, (long long)hi);
  *out = size;
  return NULL;
}

static tj_status_t infer_window(infer_t* c) {
  const tj_node_desc_t* desc = c->desc;
  const tj_op_t op = desc->op;
  const bool conv = op == TJ_OP_CONV || op == TJ_OP_CONV_TRANSPOSE;
  const tj_node_t* x = in(c, 0);
  TJ_RETURN_IF_ERROR(check_class(c, x->dtype));
  const int32_t n = x->rank - 2;
  if (n < 1 || n > TJ_WINDOW_MAX_SPATIAL)
    return fail(c, INVALID,
                "x must have rank 3 to 5 ([N, C] and 1 to 3 spatial axes)");
  const uint32_t num_ints = desc->attrs.num_ints;
  if (num_ints != (uint32_t)(2 + 6 * n) && !(conv && num_ints == 2))
    return fail(c, INVALID,
                "needs 2 + 6 * %d window attributes for %d spatial axes, got "
                "%u",
                (int)n, (int)n, num_ints);
  if (!desc->attrs.ints) return fail(c, INVALID, "window attributes are NULL");
  const int64_t* raw = desc->attrs.ints;
  const bool full = num_ints > 2;
  int64_t groups = raw[0] == 0 ? 1 : raw[0];
  const int64_t flags = raw[1];
  if (groups < 1)
    return fail(c, INVALID, "groups %lld must be >= 1", (long long)raw[0]);
  if (flags & ~(int64_t)(TJ_WINDOW_CEIL_MODE | TJ_WINDOW_COUNT_INCLUDE_PAD))
    return fail(c, INVALID, "unknown window flags %lld", (long long)flags);
  if (conv && flags)
    return fail(c, INVALID, "ceil_mode and count_include_pad are for pools");
  if (!conv && groups != 1)
    return fail(c, INVALID, "groups is for conv and conv_transpose");
  double p = desc->attrs.value;
  if (op == TJ_OP_LP_POOL) {
    if (p == 0) p = 2;
    if (!(p > 0) || !isfinite(p))
      return fail(c, INVALID, "p %g must be finite and > 0", p);
  } else if (p != 0) {
    return fail(c, INVALID, "p is for lp_pool");
  }
  int64_t* out = c->out->ints;
  out[0] = groups;
  out[1] = flags;
  int64_t* kernel = out + 2;
  int64_t* strides = kernel + n;
  int64_t* dilations = strides + n;
  int64_t* low = dilations + n;
  int64_t* high = low + n;
  int64_t* op_pad = high + n;
  for (int32_t i = 0; i < n; ++i) {
    kernel[i] = full ? raw[2 + i] : 0;
    strides[i] = full && raw[2 + n + i] ? raw[2 + n + i] : 1;
    dilations[i] = full && raw[2 + 2 * n + i] ? raw[2 + 2 * n + i] : 1;
    low[i] = full ? raw[2 + 3 * n + i] : 0;
    high[i] = full ? raw[2 + 4 * n + i] : 0;
    op_pad[i] = full ? raw[2 + 5 * n + i] : 0;
    if (strides[i] < 1 || dilations[i] < 1)
      return fail(c, INVALID,
                  "stride %lld and dilation %lld of spatial axis %d must be "
                  ">= 1",
                  (long long)strides[i], (long long)dilations[i], (int)i);
    if (low[i] < 0 || high[i] < 0)
      return fail(c, INVALID, "pads %lld, %lld of spatial axis %d must be >= 0",
                  (long long)low[i], (long long)high[i], (int)i);
    if (op == TJ_OP_CONV_TRANSPOSE) {
      if (op_pad[i] < 0 ||
          (op_pad[i] >= strides[i] && op_pad[i] >= dilations[i]))
        return fail(c, INVALID,
                    "output_padding %lld of spatial axis %d must be >= 0 and "
                    "below the stride or the dilation",
                    (long long)op_pad[i], (int)i);
    } else if (op_pad[i] != 0) {
      return fail(c, INVALID, "output_padding is for conv_transpose");
    }
  }
  int64_t dims[TJ_MAX_RANK];
  dims[0] = x->dims[0];
  dims[1] = x->dims[1];
  if (conv) {
    const tj_node_t* w = in(c, 1);
    TJ_RETURN_IF_ERROR(check_same_dtype(c, x->dtype, w->dtype));
    if (w->rank != x->rank)
      return fail(c, INVALID, "w must have rank %d like x, got %d",
                  (int)x->rank, (int)w->rank);
    for (int32_t i = 0; i < w->rank; ++i) {
      if (!tj_dim_is_const(w->dims[i]))
        return fail(c, TJ_STATUS_UNSUPPORTED, "w must have a constant shape");
    }
    if (!tj_dim_is_const(x->dims[1]))
      return fail(c, TJ_STATUS_UNSUPPORTED,
                  "x must have a constant channel count");
    const int64_t channels = x->dims[1];
    // conv: w [O, C/G, K...]; conv_transpose: w [C, O/G, K...].
    const bool transpose = op == TJ_OP_CONV_TRANSPOSE;
    const int64_t w_in = transpose ? w->dims[0] : w->dims[1] * groups;
    const int64_t out_channels = transpose ? w->dims[1] * groups : w->dims[0];
    if (channels % groups != 0 || out_channels % groups != 0 ||
        w_in != channels)
      return fail(c, INVALID,
                  "x has %lld channels and w implies %lld (groups %lld); "
                  "channels and outputs must be multiples of groups",
                  (long long)channels, (long long)w_in, (long long)groups);
    for (int32_t i = 0; i < n; ++i) {
      if (kernel[i] != 0 && kernel[i] != w->dims[2 + i])
        return fail(c, INVALID,
                    "kernel %lld of spatial axis %d is not w's %lld",
                    (long long)kernel[i], (int)i, (long long)w->dims[2 + i]);
      kernel[i] = w->dims[2 + i];
      if (kernel[i] < 1)
        return fail(c, INVALID, "w has an empty kernel axis %d", (int)i);
    }
    dims[1] = out_channels;
    int64_t o = out_channels;
    TJ_RETURN_IF_ERROR(check_vector(c, 2, "bias", x->dtype, o, &o));
  } else {
    for (int32_t i = 0; i < n; ++i) {
      if (kernel[i] < 1)
        return fail(c, INVALID, "kernel %lld of spatial axis %d must be >= 1",
                    (long long)kernel[i], (int)i);
    }
  }
  for (int32_t i = 0; i < n; ++i) {
    TJ_RETURN_IF_ERROR(window_axis(
        c, i, x->dims[2 + i], kernel[i], strides[i], dilations[i], low[i],
        high[i], op_pad[i], (flags & TJ_WINDOW_CEIL_MODE) != 0, &dims[2 + i]));
  }
  c->out->attrs.num_ints = (uint32_t)(2 + 6 * n);
  c->out->attrs.value = p;
  set_result(c, x->dtype, x->rank, dims);
  return NULL;
}

//===--- quantization (issue 17, quant2) ---===//

// quantize (of the written type: q's dtype, x's shape, int4 packed) and
// dequantize (the scale's dtype, q's shape unpacked); lib/quant.h's rule.
static tj_status_t infer_quant(infer_t* c) {
  const tj_node_desc_t* d = c->desc;
  const bool quantize = d->op == TJ_OP_QUANTIZE;
  tj_quant_shape_t qs;
  char msg[192];
  if (!tj_quant_check(quantize, in(c, 0), in(c, 1), in(c, 2), d->dtype,
                      d->attrs.axis, d->attrs.ints, d->attrs.num_ints, &qs, msg,
                      sizeof(msg)))
    return fail(c, INVALID, "%s", msg);
  if (quantize) {
    if (d->rank != qs.qrank || (qs.qrank && !d->dims) ||
        (qs.qrank &&
         memcmp(d->dims, qs.qdims, sizeof(int64_t) * (size_t)qs.qrank)))
      return fail(c, INVALID, "the result must have %s",
                  qs.int4 ? "x's shape with its last dim packed (D + 1) / 2"
                          : "x's shape");
  }
  c->out->attrs.axis = qs.axis;
  c->out->attrs.num_ints = TJ_QUANT_NUM_INTS;
  c->out->ints[TJ_QUANT_BLOCK] = qs.block;
  c->out->ints[TJ_QUANT_SATURATE] = qs.saturate;
  c->out->ints[TJ_QUANT_INT4] = qs.int4;
  c->out->ints[TJ_QUANT_ODD] = qs.odd;
  if (quantize)
    set_result(c, qs.qdtype, qs.qrank, qs.qdims);
  else
    set_result(c, qs.fdtype, qs.rank, qs.dims);
  return NULL;
}

//===--- entry points ---===//

tj_status_t tj_ir_infer(tj_graph_t* graph, const tj_node_desc_t* desc,
                        uint32_t index, bool existing, tj_ir_inferred_t* out) {
  memset(out, 0, sizeof(*out));
  out->attrs.ints = out->ints;
  infer_t c = {graph, desc, index, existing, out};
  if ((unsigned)desc->op >= TJ_OP_COUNT_)
    return fail(&c, INVALID, "unknown op");
  TJ_RETURN_IF_ERROR(check_operands(&c));
  tj_status_t status = NULL;
  switch (desc->op) {
    case TJ_OP_INPUT:
      status = infer_input(&c);
      break;
    case TJ_OP_CONSTANT:
      status = infer_constant(&c);
      break;
    case TJ_OP_FULL:
      status = infer_full(&c);
      break;
    case TJ_OP_IOTA:
      status = infer_iota(&c);
      break;
    case TJ_OP_WHERE:
      status = infer_where(&c);
      break;
    case TJ_OP_MATMUL:
      status = infer_matmul(&c);
      break;
    case TJ_OP_MATMUL_I32:
    case TJ_OP_MATMUL_INTEGER:
      status = infer_matmul_integer(&c);
      break;
    case TJ_OP_MATMUL_F8:
      status = infer_matmul_f8(&c);
      break;
    case TJ_OP_RESHAPE:
      status = infer_reshape(&c);
      break;
    case TJ_OP_TRANSPOSE:
      status = infer_transpose(&c);
      break;
    case TJ_OP_BROADCAST_TO:
      status = infer_broadcast_to(&c);
      break;
    case TJ_OP_SLICE:
      status = infer_slice(&c);
      break;
    case TJ_OP_CONCAT:
      status = infer_concat(&c);
      break;
    case TJ_OP_PAD:
      status = infer_pad(&c);
      break;
    case TJ_OP_GATHER:
      status = infer_gather(&c);
      break;
    case TJ_OP_GATHER_ELEMENTS:
      status = infer_gather_elements(&c);
      break;
    case TJ_OP_GATHER_ND:
      status = infer_gather_nd(&c);
      break;
    case TJ_OP_CUMSUM:
    case TJ_OP_CUMPROD:
      status = infer_scan(&c);
      break;
    case TJ_OP_SCATTER_ELEMENTS:
      status = infer_scatter_elements(&c);
      break;
    case TJ_OP_SCATTER_ND:
      status = infer_scatter_nd(&c);
      break;
    case TJ_OP_ARGTOPK:
      status = infer_topk(&c);
      break;
    case TJ_OP_SOFTMAX:
    case TJ_OP_LOG_SOFTMAX:
      status = infer_softmax(&c);
      break;
    case TJ_OP_LAYER_NORM:
    case TJ_OP_RMS_NORM:
      status = infer_norm(&c);
      break;
    case TJ_OP_LINEAR:
      status = infer_linear(&c);
      break;
    case TJ_OP_CUSTOM:
      status = infer_custom(&c);
      break;
    case TJ_OP_ONE_HOT:
      status = infer_one_hot(&c);
      break;
    case TJ_OP_ATTENTION:
    case TJ_OP_ATTENTION_LSE:
    case TJ_OP_ATTENTION_DQ:
    case TJ_OP_ATTENTION_DKV:
      status = infer_attention(&c);
      break;
    case TJ_OP_QUANTIZE:
    case TJ_OP_DEQUANTIZE:
      status = infer_quant(&c);
      break;
    case TJ_OP_CONV:
    case TJ_OP_CONV_TRANSPOSE:
    case TJ_OP_MAX_POOL:
    case TJ_OP_AVG_POOL:
    case TJ_OP_LP_POOL:
      status = infer_window(&c);
      break;
    default:
      switch (tj_op_info(desc->op)->kind) {
        case TJ_OP_KIND_UNARY:
          status = infer_unary(&c);
          break;
        case TJ_OP_KIND_BINARY:
          status = infer_binary(&c);
          break;
        case TJ_OP_KIND_REDUCTION:
          status = infer_reduction(&c);
          break;
        default:
          // The pointwise composites (gelu, silu); the others have a case.
          if (tj_op_info(desc->op)->kind == TJ_OP_KIND_COMPOSITE &&
              tj_op_info(desc->op)->pattern == TJ_OP_PATTERN_ELEMENTWISE) {
            status = infer_pointwise_composite(&c);
          } else {
            status = fail(&c, TJ_STATUS_INTERNAL, "no inference rule");
          }
          break;
      }
      break;
  }
  TJ_RETURN_IF_ERROR(status);
  return check_size(&c, out->dtype, out->rank, out->dims);
}

// Copies the node's payloads into the arena and appends it. Capacity is
// reserved before anything is published, so failure leaves no trace but
// unused arena bytes (freed with the graph).
static tj_status_t commit(tj_graph_t* graph, const tj_node_desc_t* desc,
                          const tj_ir_inferred_t* r, uint32_t* out_node) {
  TJ_RETURN_IF_ERROR(tj_array_reserve(graph->allocator, (void**)&graph->nodes,
                                      &graph->node_capacity,
                                      graph->num_nodes + 1, sizeof(tj_node_t)));
  if (desc->op == TJ_OP_INPUT) {
    TJ_RETURN_IF_ERROR(tj_array_reserve(
        graph->allocator, (void**)&graph->inputs, &graph->input_capacity,
        graph->num_inputs + 1, sizeof(uint32_t)));
  }
  tj_arena_t* arena = &graph->arena;
  tj_node_t node;
  memset(&node, 0, sizeof(node));
  node.op = desc->op;
  node.dtype = r->dtype;
  node.rank = r->rank;
  node.num_operands = desc->num_operands;
  node.attrs = r->attrs;
  node.attrs.ints = NULL;
  if (desc->num_operands > 0) {
    node.operands = tj_arena_memdup(
        arena, desc->operands, (size_t)desc->num_operands * sizeof(uint32_t));
    if (!node.operands) return tj_status_oom();
  }
  if (r->rank > 0) {
    node.dims =
        tj_arena_memdup(arena, r->dims, (size_t)r->rank * sizeof(int64_t));
    if (!node.dims) return tj_status_oom();
  }
  if (r->attrs.num_ints > 0) {
    node.attrs.ints = tj_arena_memdup(
        arena, r->ints, (size_t)r->attrs.num_ints * sizeof(int64_t));
    if (!node.attrs.ints) return tj_status_oom();
  }
  if (r->attrs.name) {
    node.attrs.name = tj_arena_strdup(arena, r->attrs.name);
    if (!node.attrs.name) return tj_status_oom();
  }
  if (desc->op == TJ_OP_CONSTANT && !r->attrs.borrowed) {
    int64_t bytes = 0;
    byte_size_fits(r->dtype, r->rank, r->dims, &bytes);
    node.attrs.data = bytes > 0
                          ? tj_arena_memdup(arena, r->attrs.data, (size_t)bytes)
                          : tj_arena_alloc(arena, 0);
    if (!node.attrs.data) return tj_status_oom();
  }
  uint32_t index = graph->num_nodes++;
  graph->nodes[index] = node;
  if (desc->op == TJ_OP_INPUT) graph->inputs[graph->num_inputs++] = index;
  *out_node = index;
  return NULL;
}

tj_status_t tj_graph_append(tj_graph_t* graph, const tj_node_desc_t* desc,
                            uint32_t* out_node) {
  if (graph->finalized)
    return tj_ir_node_error(graph, desc, INVALID, "the graph is finalized");
  // Value ids are index + 1 and TJ_NODE_NONE is reserved.
  if (graph->num_nodes >= UINT32_MAX - 2)
    return tj_ir_node_error(graph, desc, INVALID, "too many nodes");
  uint32_t guards_before = graph->num_guards;
  tj_ir_inferred_t result;
  tj_status_t status =
      tj_ir_infer(graph, desc, graph->num_nodes, false, &result);
  if (!status) status = commit(graph, desc, &result, out_node);
  if (status) graph->num_guards = guards_before;
  return status;
}
