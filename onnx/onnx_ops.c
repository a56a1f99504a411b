// The ONNX importer's op converters: one function per ONNX op (or family),
// each mapping the node onto libtensorjit's builders exactly, and the table
// that names each op's attributes (any other attribute is an error).

#include <math.h>
#include <string.h>

#include "onnx/onnx_internal.h"

typedef struct op_entry_t op_entry_t;
typedef tj_status_t (*convert_fn)(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                  const op_entry_t* e);
typedef tj_value_t (*unary_fn)(tj_graph_t*, tj_value_t);
typedef tj_value_t (*binary_fn)(tj_graph_t*, tj_value_t, tj_value_t);
typedef tj_value_t (*reduce_fn)(tj_graph_t*, tj_value_t, int32_t,
                                const int32_t*, bool);

struct op_entry_t {
  const char* op;
  const char* attrs;  // the attributes it takes, each followed by ','
  convert_fn fn;
  unary_fn unary;
  binary_fn binary;
  reduce_fn reduce;
  int32_t param;
};

//===--- helpers ---===//

#define G (im->graph)

static tj_status_t fail(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                        const char* fmt, ...) TJ_PRINTF_LIKE(3, 4);
static tj_status_t fail(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                        const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  tj_status_t s = tj_status_makev(TJ_STATUS_UNSUPPORTED, fmt, args);
  va_end(args);
  return tj_status_annotate(s, "onnx: node %d \"%s\" (%s, opset %lld)",
                            (int)n->index, n->proto->name ? n->proto->name : "",
                            n->proto->op_type, (long long)im->opset);
}

static tj_status_t bad(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                       const char* fmt, ...) TJ_PRINTF_LIKE(3, 4);
static tj_status_t bad(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                       const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  tj_status_t s = tj_status_makev(TJ_STATUS_INVALID_ARGUMENT, fmt, args);
  va_end(args);
  return tj_status_annotate(s, "onnx: node %d \"%s\" (%s, opset %lld)",
                            (int)n->index, n->proto->name ? n->proto->name : "",
                            n->proto->op_type, (long long)im->opset);
}

static bool has_in(tj_onnx_node_t* n, int32_t i) {
  return i < n->num_inputs && n->inputs[i] != NULL;
}
static bool has_out(tj_onnx_node_t* n, size_t k) {
  return k < n->proto->n_output && n->proto->output[k][0];
}

static tj_value_t in(tj_onnx_importer_t* im, tj_onnx_node_t* n, int32_t i) {
  return has_in(n, i) ? tj_onnx_value(im, n->inputs[i]) : tj_value_none();
}

static tj_status_t need_inputs(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                               int32_t lo, int32_t hi) {
  int32_t count = 0;
  for (int32_t i = 0; i < n->num_inputs; ++i) count += has_in(n, i);
  if (n->num_inputs > hi || count < lo)
    return bad(im, n, "%d inputs; it takes %d to %d", (int)n->num_inputs,
               (int)lo, (int)hi);
  for (int32_t i = 0; i < lo; ++i) {
    if (!has_in(n, i)) return bad(im, n, "input %d is required", (int)i);
  }
  return NULL;
}

static tj_status_t graph_error(tj_onnx_importer_t* im, tj_onnx_node_t* n) {
  tj_status_t s = tj_graph_status(G);
  if (!s) s = tj_internal("a builder returned none without an error");
  return tj_status_annotate(s, "onnx: node %d \"%s\" (%s, opset %lld)",
                            (int)n->index, n->proto->name ? n->proto->name : "",
                            n->proto->op_type, (long long)im->opset);
}

// Defines output |k| as graph value |v|.
static tj_status_t out(tj_onnx_importer_t* im, tj_onnx_node_t* n, size_t k,
                       tj_value_t v) {
  if (tj_value_is_none(v)) return graph_error(im, n);
  if (!has_out(n, k)) return NULL;
  tj_onnx_val_t val;
  memset(&val, 0, sizeof val);
  val.value = v;
  val.dtype = tj_graph_value_dtype(G, v);
  val.rank = tj_graph_value_rank(G, v);
  tj_graph_value_dims(G, v, val.dims);
  return tj_onnx_define(im, n->proto->output[k], &val);
}

// Defines output |k| as known data (copied into the arena).
static tj_status_t out_known(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             size_t k, tj_dtype_t dtype, int32_t rank,
                             const int64_t* dims, const void* data,
                             size_t bytes, bool symbolic) {
  if (!has_out(n, k)) return NULL;
  tj_onnx_val_t val;
  memset(&val, 0, sizeof val);
  val.dtype = dtype;
  val.rank = rank;
  if (rank) memcpy(val.dims, dims, sizeof(int64_t) * (size_t)rank);
  val.data = bytes ? tj_arena_memdup(&im->arena, data, bytes)
                   : tj_arena_alloc(&im->arena, 0);
  if (!val.data) return tj_status_oom();
  val.symbolic = symbolic;
  return tj_onnx_define(im, n->proto->output[k], &val);
}

static tj_status_t no_extra_outputs(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                    size_t keep) {
  for (size_t k = keep; k < n->proto->n_output; ++k) {
    if (has_out(n, k))
      return fail(im, n, "output %zu (\"%s\") is not supported", k,
                  n->proto->output[k]);
  }
  return NULL;
}

static const Onnx__AttributeProto* attr(tj_onnx_node_t* n, const char* name) {
  for (size_t i = 0; i < n->proto->n_attribute; ++i) {
    const Onnx__AttributeProto* a = n->proto->attribute[i];
    if (a->name && strcmp(a->name, name) == 0) return a;
  }
  return NULL;
}
static int64_t attr_i(tj_onnx_node_t* n, const char* name, int64_t def) {
  const Onnx__AttributeProto* a = attr(n, name);
  return a && a->has_i ? a->i : def;
}
static double attr_f(tj_onnx_node_t* n, const char* name, double def) {
  const Onnx__AttributeProto* a = attr(n, name);
  return a && a->has_f ? a->f : def;
}
static bool attr_s_is(tj_onnx_node_t* n, const char* name, const char* def,
                      const char* value) {
  const Onnx__AttributeProto* a = attr(n, name);
  if (!a || !a->has_s) return strcmp(def, value) == 0;
  size_t len = strlen(value);
  return a->s.len == len && memcmp(a->s.data, value, len) == 0;
}

static int32_t rank_of(tj_onnx_node_t* n, int32_t i) {
  return n->inputs[i] ? n->inputs[i]->rank : 0;
}
static tj_dtype_t dtype_of(tj_onnx_node_t* n, int32_t i) {
  return n->inputs[i] ? n->inputs[i]->dtype : TJ_DTYPE_F32;
}

static tj_status_t norm_axis(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             int64_t axis, int32_t rank, int32_t* out_axis) {
  *out_axis = 0;
  if (axis < -rank || axis >= rank)
    return bad(im, n, "axis %lld is outside rank %d", (long long)axis,
               (int)rank);
  *out_axis = (int32_t)(axis < 0 ? axis + rank : axis);
  return NULL;
}

#define MAX_INTS 64

// The known integer contents of input |i| (a shape, axes, bounds, pads).
static tj_status_t known_ints(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                              int32_t i, const char* what, int32_t* out_count,
                              int64_t* out, bool allow_symbolic) {
  tj_onnx_val_t* v = n->inputs[i];
  if (!v->data)
    return fail(im, n,
                "input %d (%s, \"%s\") must be a constant or computed from "
                "constants and static dims",
                (int)i, what, n->proto->input[i]);
  if (v->symbolic && !allow_symbolic)
    return fail(im, n,
                "input %d (%s, \"%s\") holds symbolic dims; it must be a "
                "constant",
                (int)i, what, n->proto->input[i]);
  if (v->rank > 1 || (v->dtype != TJ_DTYPE_I64 && v->dtype != TJ_DTYPE_I32))
    return bad(im, n, "input %d (%s) must be a 1-D int64 or int32 tensor",
               (int)i, what);
  int64_t count = v->rank == 0 ? 1 : v->dims[0];
  if (count > MAX_INTS)
    return fail(im, n, "input %d (%s) has %lld entries", (int)i, what,
                (long long)count);
  for (int64_t k = 0; k < count; ++k) {
    out[k] = v->dtype == TJ_DTYPE_I64 ? ((const int64_t*)v->data)[k]
                                      : ((const int32_t*)v->data)[k];
  }
  *out_count = (int32_t)count;
  return NULL;
}

static tj_status_t attr_ints(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             const char* name, int32_t* out_count,
                             int64_t* out) {
  const Onnx__AttributeProto* a = attr(n, name);
  *out_count = 0;
  if (!a) return NULL;
  if (a->n_ints > MAX_INTS)
    return fail(im, n, "attribute %s has %zu entries", name, a->n_ints);
  for (size_t k = 0; k < a->n_ints; ++k) out[k] = a->ints[k];
  *out_count = (int32_t)a->n_ints;
  return NULL;
}

static tj_value_t scalar(tj_onnx_importer_t* im, tj_dtype_t dtype, double v) {
  return tj_graph_scalar(G, dtype, v);
}

static bool is_float(tj_dtype_t d) {
  return d == TJ_DTYPE_F32 || d == TJ_DTYPE_F16 || d == TJ_DTYPE_BF16 ||
         d == TJ_DTYPE_F64;
}

static int64_t numel_of_val(const tj_onnx_val_t* v) {
  int64_t n = 1;
  for (int32_t i = 0; i < v->rank; ++i) n *= v->dims[i] < 0 ? 0 : v->dims[i];
  return n;
}

static double half_to_f64(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  double v = exp == 0    ? ldexp(man, -24)
             : exp == 31 ? (man ? NAN : INFINITY)
                         : ldexp(man + 1024, exp - 25);
  return sign ? -v : v;
}

// Element 0 of known |v| as a double.
static double element_f64(const tj_onnx_val_t* v) {
  const void* p = v->data;
  switch (v->dtype) {
    case TJ_DTYPE_F32:
      return *(const float*)p;
    case TJ_DTYPE_F64:
      return *(const double*)p;
    case TJ_DTYPE_F16:
      return half_to_f64(*(const uint16_t*)p);
    case TJ_DTYPE_BF16: {
      uint32_t bits = (uint32_t) * (const uint16_t*)p << 16;
      float f;
      memcpy(&f, &bits, sizeof f);
      return f;
    }
    case TJ_DTYPE_I8:
      return *(const int8_t*)p;
    case TJ_DTYPE_I32:
      return *(const int32_t*)p;
    case TJ_DTYPE_I64:
      return (double)*(const int64_t*)p;
    case TJ_DTYPE_BOOL:
    case TJ_DTYPE_U8:
      return *(const uint8_t*)p;
    case TJ_DTYPE_I16:
      return *(const int16_t*)p;
    case TJ_DTYPE_U16:
      return *(const uint16_t*)p;
    case TJ_DTYPE_U32:
      return *(const uint32_t*)p;
    case TJ_DTYPE_U64:
      return (double)*(const uint64_t*)p;
    default:
      return 0;
  }
}

static tj_value_t gather_list(tj_onnx_importer_t* im, tj_value_t x,
                              int32_t axis, const int64_t* idx, int64_t count);

// Element 0 of known integer |v| (0 for other dtypes).
static int64_t element_i64(const tj_onnx_val_t* v) {
  switch (v->dtype) {
    case TJ_DTYPE_I8:
      return *(const int8_t*)v->data;
    case TJ_DTYPE_I32:
      return *(const int32_t*)v->data;
    case TJ_DTYPE_I64:
      return *(const int64_t*)v->data;
    case TJ_DTYPE_U8:
      return *(const uint8_t*)v->data;
    case TJ_DTYPE_I16:
      return *(const int16_t*)v->data;
    case TJ_DTYPE_U16:
      return *(const uint16_t*)v->data;
    case TJ_DTYPE_U32:
      return *(const uint32_t*)v->data;
    case TJ_DTYPE_U64:  // the bits
      return (int64_t) * (const uint64_t*)v->data;
    default:
      return 0;
  }
}

//===--- elementwise ---===//

static tj_status_t cv_unary(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                            const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  return out(im, n, 0, e->unary(G, in(im, n, 0)));
}

static tj_status_t cv_binary(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  return out(im, n, 0, e->binary(G, in(im, n, 0), in(im, n, 1)));
}

// Max, Min, Sum, Mean: a left fold over 1 or more inputs.
static tj_status_t cv_variadic(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                               const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 32));
  tj_value_t acc = in(im, n, 0);
  for (int32_t i = 1; i < n->num_inputs; ++i)
    acc = e->binary(G, acc, in(im, n, i));
  if (e->param && n->num_inputs > 1)  // Mean
    acc =
        tj_graph_div(G, acc, scalar(im, dtype_of(n, 0), (double)n->num_inputs));
  return out(im, n, 0, acc);
}

static tj_status_t cv_identity(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                               const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  tj_onnx_val_t copy = *n->inputs[0];
  if (!has_out(n, 0)) return NULL;
  return tj_onnx_define(im, n->proto->output[0], &copy);
}

static tj_status_t cv_dropout(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                              const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 3));
  if (has_in(n, 2)) {
    tj_onnx_val_t* t = n->inputs[2];
    if (!t->data || t->dtype != TJ_DTYPE_BOOL || t->rank != 0)
      return fail(im, n, "training_mode must be a constant bool scalar");
    if (*(const uint8_t*)t->data)
      return fail(im, n, "training_mode = true is not supported");
  }
  if (has_out(n, 0)) {
    tj_onnx_val_t copy = *n->inputs[0];
    TJ_RETURN_IF_ERROR(tj_onnx_define(im, n->proto->output[0], &copy));
  }
  if (has_out(n, 1)) {
    tj_onnx_val_t* x = n->inputs[0];
    TJ_RETURN_IF_ERROR(
        out(im, n, 1, tj_graph_full(G, TJ_DTYPE_BOOL, x->rank, x->dims, 1)));
  }
  return NULL;
}

static tj_status_t cv_pow(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                          const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  tj_value_t a = in(im, n, 0), b = in(im, n, 1);
  if (!is_float(dtype_of(n, 0))) {
    // Integers: in f64 (exact while the result fits in 53 bits), truncated
    // back.
    tj_dtype_t d = dtype_of(n, 0);
    if (d == TJ_DTYPE_BOOL) return fail(im, n, "Pow of bool");
    tj_value_t y = tj_graph_pow(G, tj_graph_cast(G, a, TJ_DTYPE_F64),
                                tj_graph_cast(G, b, TJ_DTYPE_F64));
    return out(im, n, 0, tj_graph_cast(G, y, d));
  }
  if (dtype_of(n, 1) != dtype_of(n, 0)) b = tj_graph_cast(G, b, dtype_of(n, 0));
  return out(im, n, 0, tj_graph_pow(G, a, b));
}

static tj_status_t cv_xor(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                          const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  if (dtype_of(n, 0) != TJ_DTYPE_BOOL) return bad(im, n, "Xor takes bool");
  return out(im, n, 0, tj_graph_ne(G, in(im, n, 0), in(im, n, 1)));
}

static tj_status_t cv_where(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                            const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 3, 3));
  return out(im, n, 0,
             tj_graph_where(G, in(im, n, 0), in(im, n, 1), in(im, n, 2)));
}

// Elementwise functions written with the core ops. |param| picks which.
enum {
  FN_RECIPROCAL,
  FN_SOFTPLUS,
  FN_SOFTSIGN,
  FN_LEAKY_RELU,
  FN_ELU,
  FN_SELU,
  FN_CELU,
  FN_THRESHOLDED_RELU,
  FN_HARD_SIGMOID,
  FN_HARD_SWISH,
  FN_MISH,
  FN_TAN,
  FN_SINH,
  FN_COSH,
  FN_ASINH,
  FN_ACOSH,
  FN_ATANH,
  FN_SHRINK,
  FN_GELU,
  FN_IS_INF,
};

static tj_status_t cv_fn(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                         const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  tj_value_t x = in(im, n, 0);
  tj_dtype_t d = dtype_of(n, 0);
  if (!is_float(d) && e->param != FN_RECIPROCAL)
    return fail(im, n, "%s of %s (float dtypes only)", e->op, tj_dtype_name(d));
#define S(v) scalar(im, d, (v))
  tj_value_t y = tj_value_none();
  tj_value_t zero = S(0), one = S(1);
  switch (e->param) {
    case FN_RECIPROCAL:
      y = tj_graph_div(G, one, x);
      break;
    case FN_SOFTPLUS:
      y = tj_graph_log(G, tj_graph_add(G, tj_graph_exp(G, x), one));
      break;
    case FN_SOFTSIGN:
      y = tj_graph_div(G, x, tj_graph_add(G, tj_graph_abs(G, x), one));
      break;
    case FN_LEAKY_RELU:
      y = tj_graph_where(G, tj_graph_lt(G, x, zero),
                         tj_graph_mul(G, x, S(attr_f(n, "alpha", 0.01))), x);
      break;
    case FN_ELU:
    case FN_CELU: {
      double alpha = attr_f(n, "alpha", 1.0);
      tj_value_t t = e->param == FN_CELU ? tj_graph_div(G, x, S(alpha)) : x;
      tj_value_t neg =
          tj_graph_mul(G, S(alpha), tj_graph_sub(G, tj_graph_exp(G, t), one));
      y = e->param == FN_CELU
              ? tj_graph_add(G, tj_graph_maximum(G, x, zero),
                             tj_graph_minimum(G, zero, neg))
              : tj_graph_where(G, tj_graph_lt(G, x, zero), neg, x);
      break;
    }
    case FN_SELU: {
      double alpha = attr_f(n, "alpha", 1.67326319217681884765625);
      double gamma = attr_f(n, "gamma", 1.05070102214813232421875);
      tj_value_t neg = tj_graph_sub(
          G, tj_graph_mul(G, S(alpha), tj_graph_exp(G, x)), S(alpha));
      y = tj_graph_mul(G, S(gamma),
                       tj_graph_where(G, tj_graph_le(G, x, zero), neg, x));
      break;
    }
    case FN_THRESHOLDED_RELU:
      y = tj_graph_where(G, tj_graph_gt(G, x, S(attr_f(n, "alpha", 1.0))), x,
                         zero);
      break;
    case FN_HARD_SIGMOID:
    case FN_HARD_SWISH: {
      bool swish = e->param == FN_HARD_SWISH;
      double alpha = swish ? 1.0 / 6 : attr_f(n, "alpha", 0.2);
      double beta = swish ? 0.5 : attr_f(n, "beta", 0.5);
      tj_value_t h = tj_graph_maximum(
          G, zero,
          tj_graph_minimum(
              G, one, tj_graph_add(G, tj_graph_mul(G, x, S(alpha)), S(beta))));
      y = swish ? tj_graph_mul(G, x, h) : h;
      break;
    }
    case FN_MISH:
      y = tj_graph_mul(
          G, x,
          tj_graph_tanh(
              G, tj_graph_log(G, tj_graph_add(G, tj_graph_exp(G, x), one))));
      break;
    case FN_TAN:
      y = tj_graph_div(G, tj_graph_sin(G, x), tj_graph_cos(G, x));
      break;
    case FN_SINH:
    case FN_COSH: {
      tj_value_t a = tj_graph_exp(G, x),
                 b = tj_graph_exp(G, tj_graph_neg(G, x));
      y = tj_graph_mul(
          G, S(0.5),
          e->param == FN_SINH ? tj_graph_sub(G, a, b) : tj_graph_add(G, a, b));
      break;
    }
    case FN_ASINH:
    case FN_ACOSH: {
      tj_value_t sq = tj_graph_mul(G, x, x);
      sq = e->param == FN_ASINH ? tj_graph_add(G, sq, one)
                                : tj_graph_sub(G, sq, one);
      y = tj_graph_log(G, tj_graph_add(G, x, tj_graph_sqrt(G, sq)));
      break;
    }
    case FN_ATANH:
      y = tj_graph_mul(G, S(0.5),
                       tj_graph_log(G, tj_graph_div(G, tj_graph_add(G, one, x),
                                                    tj_graph_sub(G, one, x))));
      break;
    case FN_SHRINK: {
      double lambd = attr_f(n, "lambd", 0.5), bias = attr_f(n, "bias", 0.0);
      y = tj_graph_where(G, tj_graph_lt(G, x, S(-lambd)),
                         tj_graph_add(G, x, S(bias)),
                         tj_graph_where(G, tj_graph_gt(G, x, S(lambd)),
                                        tj_graph_sub(G, x, S(bias)), zero));
      break;
    }
    case FN_GELU:
      if (!attr_s_is(n, "approximate", "none", "none") &&
          !attr_s_is(n, "approximate", "none", "tanh"))
        return fail(im, n, "approximate must be \"none\" or \"tanh\"");
      y = tj_graph_gelu(G, x, attr_s_is(n, "approximate", "none", "tanh"));
      break;
    case FN_IS_INF: {
      tj_value_t inf = S(INFINITY);
      bool pos = attr_i(n, "detect_positive", 1) != 0;
      bool neg = attr_i(n, "detect_negative", 1) != 0;
      tj_value_t p = tj_graph_eq(G, x, inf),
                 m = tj_graph_eq(G, x, S(-INFINITY));
      y = pos && neg ? tj_graph_logical_or(G, p, m)
          : pos      ? p
          : neg      ? m
                     : tj_graph_ne(G, x, x);  // never true for non-NaN
      if (!pos && !neg) y = tj_graph_logical_and(G, y, tj_graph_eq(G, x, x));
      break;
    }
    default:
      break;
  }
#undef S
  return out(im, n, 0, y);
}

static tj_status_t cv_prelu(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                            const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  tj_value_t x = in(im, n, 0);
  tj_value_t zero = scalar(im, dtype_of(n, 0), 0);
  return out(im, n, 0,
             tj_graph_where(G, tj_graph_lt(G, x, zero),
                            tj_graph_mul(G, x, in(im, n, 1)), x));
}

static tj_status_t cv_clip(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                           const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 3));
  tj_value_t y = in(im, n, 0);
  if (has_in(n, 1)) y = tj_graph_maximum(G, y, in(im, n, 1));
  if (has_in(n, 2)) y = tj_graph_minimum(G, y, in(im, n, 2));
  return out(im, n, 0, y);
}

static bool onnx_to_dtype(int64_t to, tj_dtype_t* d) {
  return to >= INT32_MIN && to <= INT32_MAX && tj_onnx_dtype((int32_t)to, d);
}

static tj_status_t cv_cast(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                           const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, e->param ? 2 : 1, e->param ? 2 : 1));
  tj_dtype_t to;
  if (e->param) {  // CastLike
    to = dtype_of(n, 1);
  } else {
    const Onnx__AttributeProto* a = attr(n, "to");
    if (!a || !a->has_i) return bad(im, n, "attribute to is required");
    if (!onnx_to_dtype(a->i, &to))
      return fail(im, n, "cast to dtype %s is not supported",
                  tj_onnx_type_name((int32_t)a->i));
  }
  const Onnx__AttributeProto* sat = attr(n, "saturate");
  if ((to == TJ_DTYPE_F8E4M3 || to == TJ_DTYPE_F8E5M2) && sat && sat->has_i &&
      sat->i == 0) {
    return fail(im, n,
                "saturate=0 (float8 overflow to NaN/inf) is not "
                "supported: casts to float8 saturate");
  }
  tj_onnx_val_t* x = n->inputs[0];
  if (x->symbolic) {
    if (to != TJ_DTYPE_I64) return fail(im, n, "cast of a symbolic shape");
    return cv_identity(im, n, e);
  }
  return out(im, n, 0, tj_graph_cast(G, in(im, n, 0), to));
}

//===--- contraction ---===//

static tj_status_t cv_matmul(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  return out(im, n, 0, tj_graph_matmul(G, in(im, n, 0), in(im, n, 1)));
}

// qgemm (issue 17): MatMulInteger onto matmul_integer. A 1-D
// a_zero_point (one per row of a 2-D A, or one element) becomes [M, 1].
static tj_status_t cv_matmul_integer(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                     const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 4));
  tj_value_t za = tj_value_none(), zb = tj_value_none();
  if (has_in(n, 2)) {
    za = in(im, n, 2);
    if (rank_of(n, 2) == 1 && rank_of(n, 0) >= 2) {
      int64_t dims[2] = {n->inputs[2]->dims[0], 1};
      za = tj_graph_reshape(G, za, 2, dims);
    }
  }
  if (has_in(n, 3)) zb = in(im, n, 3);
  return out(im, n, 0,
             tj_graph_matmul_integer(G, in(im, n, 0), in(im, n, 1), za, zb));
}

static tj_status_t cv_gemm(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                           const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 3));
  static const int32_t kSwap[2] = {1, 0};
  tj_value_t a = in(im, n, 0), b = in(im, n, 1);
  if (rank_of(n, 0) != 2 || rank_of(n, 1) != 2)
    return bad(im, n, "A and B must be matrices");
  if (attr_i(n, "transA", 0)) a = tj_graph_transpose(G, a, kSwap);
  if (attr_i(n, "transB", 0)) b = tj_graph_transpose(G, b, kSwap);
  tj_dtype_t d = dtype_of(n, 0);
  double alpha = attr_f(n, "alpha", 1.0), beta = attr_f(n, "beta", 1.0);
  tj_value_t y = tj_graph_matmul(G, a, b);
  if (alpha != 1.0) y = tj_graph_mul(G, y, scalar(im, d, alpha));
  if (has_in(n, 2) && beta != 0.0) {
    tj_value_t c = in(im, n, 2);
    if (beta != 1.0) c = tj_graph_mul(G, c, scalar(im, d, beta));
    y = tj_graph_add(G, y, c);
  }
  return out(im, n, 0, y);
}

//===--- reductions ---===//

enum { RD_PLAIN, RD_SUM_SQUARE, RD_L1, RD_L2, RD_LOG_SUM, RD_LOG_SUM_EXP };

// The reduction's axes: attribute before |input_opset|, input 1 from it.
// *|out_identity| when empty axes mean "no reduction".
static tj_status_t reduce_axes(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                               int64_t input_opset, int32_t* out_count,
                               int32_t* axes, bool* out_identity) {
  int64_t raw[MAX_INTS];
  int32_t count = 0;
  *out_identity = false;
  if (im->opset >= input_opset) {
    if (attr(n, "axes"))
      return fail(im, n, "attribute axes (an input since opset %lld)",
                  (long long)input_opset);
    if (has_in(n, 1))
      TJ_RETURN_IF_ERROR(known_ints(im, n, 1, "axes", &count, raw, false));
    if (count == 0 && attr_i(n, "noop_with_empty_axes", 0))
      *out_identity = true;
  } else {
    if (n->num_inputs > 1)
      return bad(im, n, "axes is an attribute before opset %lld",
                 (long long)input_opset);
    TJ_RETURN_IF_ERROR(attr_ints(im, n, "axes", &count, raw));
  }
  int32_t rank = rank_of(n, 0);
  for (int32_t i = 0; i < count; ++i)
    TJ_RETURN_IF_ERROR(norm_axis(im, n, raw[i], rank, &axes[i]));
  // Sorted, no repeats.
  for (int32_t i = 1; i < count; ++i) {
    for (int32_t j = i; j > 0 && axes[j - 1] > axes[j]; --j) {
      int32_t t = axes[j];
      axes[j] = axes[j - 1];
      axes[j - 1] = t;
    }
  }
  for (int32_t i = 1; i < count; ++i) {
    if (axes[i] == axes[i - 1])
      return bad(im, n, "axis %d repeats", (int)axes[i]);
  }
  *out_count = count;
  return NULL;
}

static tj_status_t cv_reduce(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 2));
  int64_t input_opset = strcmp(e->op, "ReduceSum") == 0 ? 13 : 18;
  int32_t axes[MAX_INTS], count = 0;
  bool identity = false;
  TJ_RETURN_IF_ERROR(reduce_axes(im, n, input_opset, &count, axes, &identity));
  tj_value_t x = in(im, n, 0);
  tj_dtype_t d = dtype_of(n, 0);
  bool keep = attr_i(n, "keepdims", 1) != 0;
  if (identity) {
    // The input as it is (with the elementwise prologue of L1, L2, ...).
    switch (e->param) {
      case RD_SUM_SQUARE:
        x = tj_graph_mul(G, x, x);
        break;
      case RD_L1:
        x = tj_graph_abs(G, x);
        break;
      case RD_L2:
        x = tj_graph_abs(G, x);
        break;
      case RD_LOG_SUM:
        x = tj_graph_log(G, x);
        break;
      default:
        break;
    }
    return out(im, n, 0, x);
  }
  if (rank_of(n, 0) == 0) count = 0;
  tj_value_t y;
  switch (e->param) {
    case RD_SUM_SQUARE:
      y = tj_graph_sum(G, tj_graph_mul(G, x, x), count, axes, keep);
      break;
    case RD_L1:
      y = tj_graph_sum(G, tj_graph_abs(G, x), count, axes, keep);
      break;
    case RD_L2:
      if (!is_float(d)) return fail(im, n, "ReduceL2 of %s", tj_dtype_name(d));
      y = tj_graph_sqrt(
          G, tj_graph_sum(G, tj_graph_mul(G, x, x), count, axes, keep));
      break;
    case RD_LOG_SUM:
      y = tj_graph_log(G, tj_graph_sum(G, x, count, axes, keep));
      break;
    case RD_LOG_SUM_EXP:
      y = tj_graph_log(G,
                       tj_graph_sum(G, tj_graph_exp(G, x), count, axes, keep));
      break;
    default:
      y = e->reduce(G, x, count, axes, keep);
      break;
  }
  return out(im, n, 0, y);
}

static tj_status_t cv_argmax(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  int32_t axis;
  TJ_RETURN_IF_ERROR(
      norm_axis(im, n, attr_i(n, "axis", 0), rank_of(n, 0), &axis));
  bool keep = attr_i(n, "keepdims", 1) != 0;
  tj_value_t x = in(im, n, 0);
  // ArgMin (param 1): the native argmin, exact on every dtype.
  tj_value_t (*arg)(tj_graph_t*, tj_value_t, int32_t, bool) =
      e->param ? tj_graph_argmin : tj_graph_argmax;
  if (!attr_i(n, "select_last_index", 0))
    return out(im, n, 0, arg(G, x, axis, keep));
  // The last extremum: the first of the reversed axis, mapped back.
  int64_t d = n->inputs[0]->dims[axis];
  if (d < 0 || d > (1 << 24))
    return fail(im, n, "select_last_index on an axis of %lld", (long long)d);
  int64_t* idx = tj_arena_alloc(&im->arena, (size_t)(d + 1) * sizeof(int64_t));
  if (!idx) return tj_status_oom();
  for (int64_t i = 0; i < d; ++i) idx[i] = d - 1 - i;
  tj_value_t r = arg(G, gather_list(im, x, axis, idx, d), axis, keep);
  return out(im, n, 0,
             tj_graph_sub(G, scalar(im, TJ_DTYPE_I64, (double)(d - 1)), r));
}

//===--- softmax family ---===//

// dims[lo..hi) multiplied (dims may be symbolic).
static int64_t dims_product(tj_onnx_importer_t* im, const int64_t* dims,
                            int32_t lo, int32_t hi) {
  int64_t p = 1;
  for (int32_t i = lo; i < hi; ++i) p = tj_graph_dim_mul(G, p, dims[i]);
  return p;
}

enum { SM_SOFTMAX, SM_LOG_SOFTMAX, SM_HARDMAX };

static tj_value_t softmax_last(tj_onnx_importer_t* im, tj_value_t x,
                               int32_t axis, int32_t rank, tj_dtype_t d,
                               const int64_t* dims, int32_t kind) {
  if (kind == SM_SOFTMAX) return tj_graph_softmax(G, x, axis);
  if (kind == SM_LOG_SOFTMAX) return tj_graph_log_softmax(G, x, axis);
  tj_value_t idx = tj_graph_argmax(G, x, axis, true);
  tj_value_t iota = tj_graph_iota(G, TJ_DTYPE_I64, rank, dims, axis);
  return tj_graph_cast(G, tj_graph_eq(G, iota, idx), d);
}

static tj_status_t cv_softmax(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                              const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  tj_onnx_val_t* xv = n->inputs[0];
  int32_t rank = xv->rank, axis;
  if (rank == 0) return bad(im, n, "a scalar input");
  bool legacy = im->opset < 13;
  TJ_RETURN_IF_ERROR(
      norm_axis(im, n, attr_i(n, "axis", legacy ? 1 : -1), rank, &axis));
  tj_value_t x = in(im, n, 0);
  if (!legacy || axis == rank - 1)
    return out(im, n, 0,
               softmax_last(im, x, axis, rank, xv->dtype, xv->dims, e->param));
  // Before opset 13: over the input coerced to 2-D at |axis|.
  int64_t flat[2] = {dims_product(im, xv->dims, 0, axis),
                     dims_product(im, xv->dims, axis, rank)};
  tj_value_t x2 = tj_graph_reshape(G, x, 2, flat);
  tj_value_t y2 = softmax_last(im, x2, 1, 2, xv->dtype, flat, e->param);
  return out(im, n, 0, tj_graph_reshape(G, y2, rank, xv->dims));
}

//===--- normalization ---===//

// |v| ([C]) reshaped to [C, 1, ...] for a rank-|rank| NC... input.
static tj_value_t per_channel(tj_onnx_importer_t* im, tj_value_t v,
                              int32_t rank) {
  int64_t dims[TJ_MAX_RANK];
  tj_graph_value_dims(G, v, dims);
  int64_t c = dims[0];
  dims[0] = c;
  for (int32_t i = 1; i < rank - 1; ++i) dims[i] = 1;
  return tj_graph_reshape(G, v, rank - 1 > 0 ? rank - 1 : 1, dims);
}

static tj_status_t cv_batch_norm(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                 const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 5, 5));
  if (attr_i(n, "training_mode", 0))
    return fail(im, n, "training_mode = 1 is not supported");
  TJ_RETURN_IF_ERROR(no_extra_outputs(im, n, 1));
  int32_t rank = rank_of(n, 0);
  if (rank < 2) return bad(im, n, "the input has rank %d", (int)rank);
  tj_dtype_t d = dtype_of(n, 0);
  tj_value_t x = in(im, n, 0);
  tj_value_t scale = per_channel(im, in(im, n, 1), rank);
  tj_value_t bias = per_channel(im, in(im, n, 2), rank);
  tj_value_t mean = per_channel(im, in(im, n, 3), rank);
  tj_value_t var = per_channel(im, in(im, n, 4), rank);
  tj_value_t inv = tj_graph_rsqrt(
      G, tj_graph_add(G, var, scalar(im, d, attr_f(n, "epsilon", 1e-5))));
  tj_value_t y =
      tj_graph_mul(G, tj_graph_sub(G, x, mean), tj_graph_mul(G, scale, inv));
  return out(im, n, 0, tj_graph_add(G, y, bias));
}

// (x - mean) * rsqrt(var + eps) over |axes|, var the biased variance.
static tj_value_t normalize(tj_onnx_importer_t* im, tj_value_t x, tj_dtype_t d,
                            int32_t count, const int32_t* axes, double eps) {
  tj_value_t mean = tj_graph_mean(G, x, count, axes, true);
  tj_value_t c = tj_graph_sub(G, x, mean);
  tj_value_t var = tj_graph_mean(G, tj_graph_mul(G, c, c), count, axes, true);
  return tj_graph_mul(
      G, c, tj_graph_rsqrt(G, tj_graph_add(G, var, scalar(im, d, eps))));
}

static tj_status_t cv_instance_norm(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                    const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 3, 3));
  int32_t rank = rank_of(n, 0);
  if (rank < 3) return bad(im, n, "the input has rank %d", (int)rank);
  int32_t axes[TJ_MAX_RANK];
  for (int32_t i = 2; i < rank; ++i) axes[i - 2] = i;
  tj_value_t y = normalize(im, in(im, n, 0), dtype_of(n, 0), rank - 2, axes,
                           attr_f(n, "epsilon", 1e-5));
  y = tj_graph_mul(G, y, per_channel(im, in(im, n, 1), rank));
  return out(im, n, 0, tj_graph_add(G, y, per_channel(im, in(im, n, 2), rank)));
}

static tj_status_t cv_mvn(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                          const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  int64_t raw[MAX_INTS] = {0, 2, 3};
  int32_t count = 3, axes[MAX_INTS];
  if (attr(n, "axes"))
    TJ_RETURN_IF_ERROR(attr_ints(im, n, "axes", &count, raw));
  for (int32_t i = 0; i < count; ++i)
    TJ_RETURN_IF_ERROR(norm_axis(im, n, raw[i], rank_of(n, 0), &axes[i]));
  // ONNX's reference: (x - mean) / (sqrt(var) + 1e-9).
  tj_value_t x = in(im, n, 0);
  tj_dtype_t d = dtype_of(n, 0);
  tj_value_t mean = tj_graph_mean(G, x, count, axes, true);
  tj_value_t c = tj_graph_sub(G, x, mean);
  tj_value_t var = tj_graph_sub(
      G, tj_graph_mean(G, tj_graph_mul(G, x, x), count, axes, true),
      tj_graph_mul(G, mean, mean));
  tj_value_t den = tj_graph_add(G, tj_graph_sqrt(G, var), scalar(im, d, 1e-9));
  return out(im, n, 0, tj_graph_div(G, c, den));
}

// LayerNormalization's and RMSNormalization's shared attributes: the first
// normalized axis (of input 0, not a scalar), epsilon, and stash_type,
// which must be 1 (float).
static tj_status_t norm_attrs(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                              int32_t* axis, double* eps) {
  if (attr_i(n, "stash_type", 1) != 1)
    return fail(im, n, "stash_type %lld (only 1, float, is supported)",
                (long long)attr_i(n, "stash_type", 1));
  int32_t rank = n->inputs[0]->rank;
  if (rank == 0) return bad(im, n, "a scalar input");
  TJ_RETURN_IF_ERROR(norm_axis(im, n, attr_i(n, "axis", -1), rank, axis));
  *eps = attr_f(n, "epsilon", 1e-5);
  return NULL;
}

static tj_status_t cv_layer_norm(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                 const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 3));
  TJ_RETURN_IF_ERROR(no_extra_outputs(im, n, 3));
  tj_onnx_val_t* xv = n->inputs[0];
  int32_t rank = xv->rank, axis;
  double eps;
  TJ_RETURN_IF_ERROR(norm_attrs(im, n, &axis, &eps));
  tj_value_t x = in(im, n, 0), gamma = in(im, n, 1), beta = in(im, n, 2);
  // Normalized over [axis, rank): flatten those dims into one.
  int64_t inner = dims_product(im, xv->dims, axis, rank);
  int64_t shape[TJ_MAX_RANK];
  memcpy(shape, xv->dims, sizeof(int64_t) * (size_t)axis);
  shape[axis] = inner;
  bool flatten = axis != rank - 1;
  if (flatten) x = tj_graph_reshape(G, x, axis + 1, shape);
  // gamma and beta broadcast against x[axis:]: give them that shape, flat.
  tj_value_t g = tj_graph_reshape(
      G, tj_graph_broadcast_to(G, gamma, rank - axis, xv->dims + axis), 1,
      &inner);
  tj_value_t b = tj_value_none();
  if (has_in(n, 2))
    b = tj_graph_reshape(
        G, tj_graph_broadcast_to(G, beta, rank - axis, xv->dims + axis), 1,
        &inner);
  tj_value_t y = tj_graph_layer_norm(G, x, g, b, eps);
  if (flatten) y = tj_graph_reshape(G, y, rank, xv->dims);
  if (has_out(n, 1) || has_out(n, 2)) {
    // Mean and InvStdDev (float), shaped x.shape[:axis] + [1, ...].
    int32_t last = axis;
    int64_t kept[TJ_MAX_RANK];
    memcpy(kept, xv->dims, sizeof(int64_t) * (size_t)axis);
    for (int32_t i = axis; i < rank; ++i) kept[i] = 1;
    tj_value_t mean = tj_graph_mean(G, x, 1, &last, true);
    tj_value_t c = tj_graph_sub(G, x, mean);
    tj_value_t var = tj_graph_mean(G, tj_graph_mul(G, c, c), 1, &last, true);
    tj_value_t inv =
        tj_graph_rsqrt(G, tj_graph_add(G, var, scalar(im, xv->dtype, eps)));
    mean =
        tj_graph_cast(G, tj_graph_reshape(G, mean, rank, kept), TJ_DTYPE_F32);
    inv = tj_graph_cast(G, tj_graph_reshape(G, inv, rank, kept), TJ_DTYPE_F32);
    TJ_RETURN_IF_ERROR(out(im, n, 1, mean));
    TJ_RETURN_IF_ERROR(out(im, n, 2, inv));
  }
  return out(im, n, 0, y);
}

// RMSNormalization (opset 23): x / sqrt(mean(x^2 over [axis, rank)) + eps)
// * scale. stash_type 1 (the only one ONNX defines a reference for): f16
// and bf16 compute in f32 and round once at the end.
static tj_status_t cv_rms_norm(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                               const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  TJ_RETURN_IF_ERROR(no_extra_outputs(im, n, 1));
  tj_onnx_val_t* xv = n->inputs[0];
  int32_t rank = xv->rank, axis;
  double eps;
  TJ_RETURN_IF_ERROR(norm_attrs(im, n, &axis, &eps));
  tj_dtype_t dtype = xv->dtype;
  tj_dtype_t wide =
      dtype == TJ_DTYPE_F16 || dtype == TJ_DTYPE_BF16 ? TJ_DTYPE_F32 : dtype;
  tj_value_t x = tj_graph_cast(G, in(im, n, 0), wide);
  tj_value_t scale = tj_graph_cast(G, in(im, n, 1), wide);
  int32_t axes[TJ_MAX_RANK], count = 0;
  for (int32_t i = axis; i < rank; ++i) axes[count++] = i;
  tj_value_t ms = tj_graph_mean(G, tj_graph_mul(G, x, x), count, axes, true);
  tj_value_t inv =
      tj_graph_rsqrt(G, tj_graph_add(G, ms, scalar(im, wide, eps)));
  tj_value_t y = tj_graph_mul(G, tj_graph_mul(G, x, inv), scale);
  return out(im, n, 0, tj_graph_cast(G, y, dtype));
}

// Attention (opset 23) onto the attention op, without a KV cache: Q, K, V
// as [B, H, S, D], or as [B, S, H*D] with q_num_heads and kv_num_heads;
// attn_mask bool (true attends) or added; is_causal top-left aligned (no
// past, so ONNX's offset is 0); scale 0 or absent means 1/sqrt(D). A fully
// masked row gives 0, as ONNX's reference does. Refused, by name: past_key,
// past_value, nonpad_kv_seqlen, softcap, and the present_* and qk_matmul
// outputs.
static tj_status_t cv_attention(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 3, 7));
  for (int32_t i = 4; i < 7; ++i) {
    if (has_in(n, i))
      return fail(im, n,
                  "input %d (past_key, past_value or "
                  "nonpad_kv_seqlen: a KV cache)",
                  (int)i);
  }
  TJ_RETURN_IF_ERROR(no_extra_outputs(im, n, 1));
  if (attr_f(n, "softcap", 0) != 0) return fail(im, n, "softcap");
  int32_t rank = rank_of(n, 0);
  if (rank != 3 && rank != 4)
    return bad(im, n, "Q has rank %d (3 or 4)", (int)rank);
  if (rank_of(n, 1) != rank || rank_of(n, 2) != rank)
    return bad(im, n, "Q, K and V differ in rank");
  tj_value_t q = in(im, n, 0), k = in(im, n, 1), v = in(im, n, 2);
  int64_t qh = 0, kvh = 0;
  static const int32_t kPerm[4] = {0, 2, 1, 3};  // its own inverse
  if (rank == 3) {
    // [B, S, H*D] -> [B, H, S, D].
    qh = attr_i(n, "q_num_heads", 0);
    kvh = attr_i(n, "kv_num_heads", 0);
    if (qh <= 0 || kvh <= 0)
      return bad(im, n, "3-D inputs need q_num_heads and kv_num_heads");
    tj_value_t* vals[3] = {&q, &k, &v};
    const int64_t heads[3] = {qh, kvh, kvh};
    for (int32_t i = 0; i < 3; ++i) {
      const tj_onnx_val_t* t = n->inputs[i];
      int64_t hidden = t->dims[2];
      if (hidden < 0 || hidden % heads[i])  // symbolic, or uneven
        return bad(im, n, "input %d: hidden size not a multiple of %lld",
                   (int)i, (long long)heads[i]);
      int64_t shape[4] = {t->dims[0], t->dims[1], heads[i], hidden / heads[i]};
      *vals[i] =
          tj_graph_transpose(G, tj_graph_reshape(G, *vals[i], 4, shape), kPerm);
    }
  }
  tj_value_t mask = has_in(n, 3) ? in(im, n, 3) : tj_value_none();
  double scale = attr_f(n, "scale", 0);
  tj_value_t y = tj_graph_attention(G, q, k, v, mask, scale,
                                    attr_i(n, "is_causal", 0) != 0);
  if (rank == 3) {
    // [B, H, Sq, Dv] -> [B, Sq, H*Dv].
    const tj_onnx_val_t* qv = n->inputs[0];
    int64_t dv = n->inputs[2]->dims[2] / kvh, width;
    if (__builtin_mul_overflow(qh, dv, &width))
      return bad(im, n, "q_num_heads x the value head size overflows");
    int64_t shape[3] = {qv->dims[0], qv->dims[1], width};
    y = tj_graph_reshape(G, tj_graph_transpose(G, y, kPerm), 3, shape);
  }
  return out(im, n, 0, y);
}

static tj_status_t cv_global_pool(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                  const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  int32_t rank = rank_of(n, 0);
  if (rank < 3) return bad(im, n, "the input has rank %d", (int)rank);
  int32_t axes[TJ_MAX_RANK];
  for (int32_t i = 2; i < rank; ++i) axes[i - 2] = i;
  tj_value_t x = in(im, n, 0);
  if (e->param == 2) {  // GlobalLpPool
    double p = (double)attr_i(n, "p", 2);
    tj_dtype_t d = dtype_of(n, 0);
    tj_value_t s =
        tj_graph_sum(G, tj_graph_pow(G, tj_graph_abs(G, x), scalar(im, d, p)),
                     rank - 2, axes, true);
    return out(im, n, 0, tj_graph_pow(G, s, scalar(im, d, 1.0 / p)));
  }
  return out(im, n, 0, e->reduce(G, x, rank - 2, axes, true));
}

//===--- remainders, bitwise ops, one-hot ---===//

static tj_status_t cv_mod(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                          const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  int64_t fmod = attr_i(n, "fmod", 0);
  if (fmod != 0 && fmod != 1)
    return bad(im, n, "fmod = %lld; it is 0 or 1", (long long)fmod);
  if (!fmod && is_float(dtype_of(n, 0)))
    return bad(im, n, "fmod = 0 on %s; ONNX requires fmod = 1 for floats",
               tj_dtype_name(dtype_of(n, 0)));
  tj_value_t a = in(im, n, 0), b = in(im, n, 1);
  return out(im, n, 0, fmod ? tj_graph_fmod(G, a, b) : tj_graph_mod(G, a, b));
}

// BitShift (opset 11): direction LEFT or RIGHT. ONNX defines it on the
// unsigned dtypes (a logical shift; counts >= the bits give 0); the signed
// ones get shift_left / shift_right's rule (arithmetic right shift).
static tj_status_t cv_bit_shift(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                const op_entry_t* e) {
  (void)e;
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  const bool left = attr_s_is(n, "direction", "", "LEFT");
  if (!left && !attr_s_is(n, "direction", "", "RIGHT"))
    return bad(im, n, "direction must be \"LEFT\" or \"RIGHT\"");
  tj_value_t a = in(im, n, 0), b = in(im, n, 1);
  return out(
      im, n, 0,
      left ? tj_graph_shift_left(G, a, b) : tj_graph_shift_right(G, a, b));
}

static tj_status_t cv_one_hot(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                              const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 3, 3));
  tj_onnx_val_t* depth = n->inputs[1];
  if (!depth->data || depth->symbolic)
    return fail(im, n, "input 1 (depth, \"%s\") must be a constant",
                n->proto->input[1]);
  if (depth->rank > 1 || numel_of_val(depth) != 1)
    return bad(im, n, "depth must hold one element");
  // A non-integer depth is cast to int64 (ONNX), i.e. truncated.
  int64_t d = element_i64(depth);
  if (is_float(depth->dtype)) {
    double dv = element_f64(depth);
    if (!(dv >= 0 && dv < 9e18))
      return bad(im, n, "depth %g is not a count", dv);
    d = (int64_t)dv;
  } else if (depth->dtype == TJ_DTYPE_BOOL) {
    return bad(im, n, "depth of bool");
  }
  if (d < 0) return bad(im, n, "depth %lld < 0", (long long)d);
  if (rank_of(n, 2) != 1 || n->inputs[2]->dims[0] != 2)
    return bad(im, n, "values must be a [2] tensor (off, on)");
  tj_value_t idx = in(im, n, 0);
  tj_dtype_t it = dtype_of(n, 0);
  // Non-integer indices are cast to int64 (ONNX: truncation).
  if (it != TJ_DTYPE_I32 && it != TJ_DTYPE_I64) {
    if (it == TJ_DTYPE_BOOL) return bad(im, n, "indices of bool");
    idx = tj_graph_cast(G, idx, TJ_DTYPE_I64);
  }
  int64_t axis = attr_i(n, "axis", -1);
  int32_t r = rank_of(n, 0);
  if (axis < -(int64_t)r - 1 || axis > r)
    return bad(im, n, "axis %lld is outside [%d, %d]", (long long)axis,
               (int)(-r - 1), (int)r);
  return out(im, n, 0,
             tj_graph_one_hot(G, idx, in(im, n, 2), d, (int32_t)axis));
}

//===--- convolution and pooling ---===//

// The window attributes of Conv, ConvTranspose and the pools (param of the
// entry: POOL_*), with auto_pad resolved for the input's spatial sizes.
enum { POOL_NONE, POOL_MAX, POOL_AVG, POOL_LP, CONV_T };

static tj_status_t window_attrs(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                int32_t kind, const int64_t* kernel,
                                tj_conv_attrs_t* a) {
  memset(a, 0, sizeof *a);
  int32_t rank = rank_of(n, 0);
  int32_t sp = rank - 2;
  if (sp < 1 || sp > 3)
    return fail(im, n, "the input has rank %d; 3 to 5 are supported",
                (int)rank);
  const int64_t* xd = n->inputs[0]->dims;
  // Every size below 2^31, so that the pad arithmetic cannot overflow.
  const int64_t big = (int64_t)1 << 31;
  for (int32_t i = 0; i < sp; ++i) {
    if (xd[i + 2] >= big || kernel[i] >= big)
      return fail(im, n, "spatial dim %d is too large", (int)(i + 2));
  }
  static const char* const kSized[] = {"strides", "dilations", "pads",
                                       "output_padding", "output_shape"};
  int64_t v[MAX_INTS];
  int32_t c;
  for (size_t k = 0; k < TJ_ARRAY_SIZE(kSized); ++k) {
    TJ_RETURN_IF_ERROR(attr_ints(im, n, kSized[k], &c, v));
    for (int32_t i = 0; i < c; ++i) {
      if (v[i] >= big || v[i] <= -big)
        return bad(im, n, "%s[%d] = %lld is out of range", kSized[k], (int)i,
                   (long long)v[i]);
    }
  }
  TJ_RETURN_IF_ERROR(attr_ints(im, n, "strides", &c, v));
  if (c && c != sp) return bad(im, n, "strides has %d entries", (int)c);
  for (int32_t i = 0; i < sp; ++i) {
    a->strides[i] = c ? v[i] : 1;
    if (a->strides[i] < 1) return bad(im, n, "a stride is < 1");
  }
  TJ_RETURN_IF_ERROR(attr_ints(im, n, "dilations", &c, v));
  if (c && c != sp) return bad(im, n, "dilations has %d entries", (int)c);
  for (int32_t i = 0; i < sp; ++i) {
    a->dilations[i] = c ? v[i] : 1;
    if (a->dilations[i] < 1) return bad(im, n, "a dilation is < 1");
  }
  for (int32_t i = 0; i < sp; ++i) {
    a->kernel[i] = kernel[i];
    if (kernel[i] < 1) return bad(im, n, "a kernel size is < 1");
  }
  TJ_RETURN_IF_ERROR(attr_ints(im, n, "pads", &c, v));
  if (c && c != 2 * sp) return bad(im, n, "pads has %d entries", (int)c);
  for (int32_t i = 0; i < sp && c; ++i) {
    a->pads_begin[i] = v[i];
    a->pads_end[i] = v[sp + i];
    if (v[i] < 0 || v[sp + i] < 0) return bad(im, n, "a pad is < 0");
  }
  if (kind == POOL_MAX || kind == POOL_AVG || kind == POOL_LP) {
    int64_t cm = attr_i(n, "ceil_mode", 0);
    if (cm != 0 && cm != 1)
      return bad(im, n, "ceil_mode = %lld", (long long)cm);
    a->ceil_mode = cm != 0;
  }
  if (kind == CONV_T) {
    TJ_RETURN_IF_ERROR(attr_ints(im, n, "output_padding", &c, v));
    if (c && c != sp)
      return bad(im, n, "output_padding has %d entries", (int)c);
    for (int32_t i = 0; i < sp && c; ++i) a->output_padding[i] = v[i];
  }
  bool upper = attr_s_is(n, "auto_pad", "NOTSET", "SAME_UPPER");
  bool lower = attr_s_is(n, "auto_pad", "NOTSET", "SAME_LOWER");
  bool valid = attr_s_is(n, "auto_pad", "NOTSET", "VALID");
  if (!upper && !lower && !valid &&
      !attr_s_is(n, "auto_pad", "NOTSET", "NOTSET"))
    return fail(im, n, "unsupported auto_pad value");
  if (kind == CONV_T) {
    int32_t oc;
    int64_t os[MAX_INTS];
    TJ_RETURN_IF_ERROR(attr_ints(im, n, "output_shape", &oc, os));
    if (oc == sp + 2) {  // the full shape: its spatial entries
      memmove(os, os + 2, sizeof(int64_t) * (size_t)sp);
      oc = sp;
    }
    if (oc && oc != sp)
      return bad(im, n, "output_shape has %d entries", (int)oc);
    if (!oc && !upper && !lower) {
      if (valid)
        for (int32_t i = 0; i < sp; ++i) a->pads_begin[i] = a->pads_end[i] = 0;
      return NULL;
    }
    // total = stride * (S - 1) + output_padding + dilation * (K - 1) + 1
    // - out, out = output_shape or S * stride; split as the ONNX reference
    // (floor division): SAME_UPPER puts the odd pad at the end. A negative
    // end pad is an output padding.
    for (int32_t i = 0; i < sp; ++i) {
      if (xd[i + 2] < 0)
        return fail(im, n, "auto_pad or output_shape on symbolic dim %d",
                    (int)(i + 2));
      int64_t o = oc ? os[i] : xd[i + 2] * a->strides[i];
      int64_t total = a->strides[i] * (xd[i + 2] - 1) + a->output_padding[i] +
                      a->dilations[i] * (a->kernel[i] - 1) + 1 - o;
      int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      int64_t b = upper ? half : total - half, end = total - b;
      if (b < 0) return fail(im, n, "output_shape needs a negative pad");
      if (end < 0) {
        a->output_padding[i] += -end;
        end = 0;
      }
      a->pads_begin[i] = b;
      a->pads_end[i] = end;
    }
    return NULL;
  }
  if (valid) {
    for (int32_t i = 0; i < sp; ++i) a->pads_begin[i] = a->pads_end[i] = 0;
  } else if (upper || lower) {
    // out = ceil(S / stride); total = (out - 1) * stride + dilation *
    // (K - 1) + 1 - S (at least 0), the odd pad at the end (SAME_UPPER) or
    // the beginning (SAME_LOWER).
    for (int32_t i = 0; i < sp; ++i) {
      int64_t s = xd[i + 2], st = a->strides[i];
      int64_t k = a->dilations[i] * (a->kernel[i] - 1) + 1;
      int64_t total;
      if (s < 0) {
        if (st != 1)
          return fail(im, n, "auto_pad with stride %lld on symbolic dim %d",
                      (long long)st, (int)(i + 2));
        total = k - 1;
      } else {
        int64_t o = (s + st - 1) / st;
        total = (o - 1) * st + k - s;
        if (total < 0) total = 0;
      }
      a->pads_begin[i] = upper ? total / 2 : total - total / 2;
      a->pads_end[i] = total - a->pads_begin[i];
    }
  }
  return NULL;
}

static tj_status_t cv_conv(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                           const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 3));
  int32_t rank = rank_of(n, 0);
  if (rank_of(n, 1) != rank)
    return bad(im, n, "the weight has rank %d, the input %d",
               (int)rank_of(n, 1), (int)rank);
  int64_t kernel[3] = {0, 0, 0};
  int64_t v[MAX_INTS];
  int32_t c;
  TJ_RETURN_IF_ERROR(attr_ints(im, n, "kernel_shape", &c, v));
  for (int32_t i = 0; i < rank - 2 && i < 3; ++i) {
    int64_t wd = n->inputs[1]->dims[i + 2];
    if (wd < 0) return fail(im, n, "the weight has a symbolic dim");
    if (c && (c != rank - 2 || v[i] != wd))
      return bad(im, n, "kernel_shape does not match the weight");
    kernel[i] = wd;
  }
  tj_conv_attrs_t a;
  TJ_RETURN_IF_ERROR(
      window_attrs(im, n, e->param ? CONV_T : POOL_NONE, kernel, &a));
  int64_t g = attr_i(n, "group", 1);
  if (g < 1) return bad(im, n, "group = %lld", (long long)g);
  a.groups = g;
  tj_value_t x = in(im, n, 0), w = in(im, n, 1), b = in(im, n, 2);
  return out(im, n, 0,
             e->param ? tj_graph_conv_transpose(G, x, w, b, &a)
                      : tj_graph_conv(G, x, w, b, &a));
}

static tj_status_t cv_pool(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                           const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  if (e->param == POOL_MAX) {
    if (has_out(n, 1))
      return fail(im, n, "output 1 (Indices, \"%s\") is not supported",
                  n->proto->output[1]);
  }
  TJ_RETURN_IF_ERROR(no_extra_outputs(im, n, 1));
  int64_t v[MAX_INTS];
  int32_t c;
  TJ_RETURN_IF_ERROR(attr_ints(im, n, "kernel_shape", &c, v));
  if (c != rank_of(n, 0) - 2)
    return bad(im, n, "kernel_shape has %d entries for an input of rank %d",
               (int)c, (int)rank_of(n, 0));
  int64_t kernel[3] = {0, 0, 0};
  for (int32_t i = 0; i < c && i < 3; ++i) kernel[i] = v[i];
  tj_conv_attrs_t a;
  TJ_RETURN_IF_ERROR(window_attrs(im, n, (int32_t)e->param, kernel, &a));
  tj_value_t x = in(im, n, 0);
  switch (e->param) {
    case POOL_MAX:
      return out(im, n, 0, tj_graph_max_pool(G, x, &a));
    case POOL_AVG: {
      int64_t cip = attr_i(n, "count_include_pad", 0);
      if (cip != 0 && cip != 1)
        return bad(im, n, "count_include_pad = %lld", (long long)cip);
      a.count_include_pad = cip != 0;
      return out(im, n, 0, tj_graph_avg_pool(G, x, &a));
    }
    default: {
      int64_t p = attr_i(n, "p", 2);
      if (p < 1) return bad(im, n, "p = %lld", (long long)p);
      a.p = (double)p;
      return out(im, n, 0, tj_graph_lp_pool(G, x, &a));
    }
  }
}

//===--- shapes ---===//

static tj_status_t cv_reshape(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                              const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  int64_t shape[MAX_INTS];
  int32_t count;
  TJ_RETURN_IF_ERROR(known_ints(im, n, 1, "shape", &count, shape, true));
  if (count > TJ_MAX_RANK)
    return fail(im, n, "rank %d is above %d", (int)count, TJ_MAX_RANK);
  tj_onnx_val_t* x = n->inputs[0];
  bool allowzero = attr_i(n, "allowzero", 0) != 0;
  for (int32_t i = 0; i < count; ++i) {
    if (shape[i] == 0 && !allowzero) {
      if (i >= x->rank)
        return bad(im, n, "shape[%d] = 0 copies no dim", (int)i);
      shape[i] = x->dims[i];
    }
  }
  return out(im, n, 0, tj_graph_reshape(G, in(im, n, 0), count, shape));
}

static tj_status_t cv_flatten(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                              const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  tj_onnx_val_t* x = n->inputs[0];
  int64_t axis = attr_i(n, "axis", 1);
  if (axis < 0) axis += x->rank;
  if (axis < 0 || axis > x->rank) return bad(im, n, "axis out of range");
  int64_t flat[2] = {dims_product(im, x->dims, 0, (int32_t)axis),
                     dims_product(im, x->dims, (int32_t)axis, x->rank)};
  return out(im, n, 0, tj_graph_reshape(G, in(im, n, 0), 2, flat));
}

static tj_status_t cv_transpose(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  int32_t rank = rank_of(n, 0), perm[TJ_MAX_RANK];
  int64_t raw[MAX_INTS];
  int32_t count = 0;
  TJ_RETURN_IF_ERROR(attr_ints(im, n, "perm", &count, raw));
  if (!attr(n, "perm")) {
    for (int32_t i = 0; i < rank; ++i) perm[i] = rank - 1 - i;
  } else {
    if (count != rank)
      return bad(im, n, "perm has %d entries for rank %d", (int)count,
                 (int)rank);
    for (int32_t i = 0; i < rank; ++i)
      TJ_RETURN_IF_ERROR(norm_axis(im, n, raw[i], rank, &perm[i]));
  }
  return out(im, n, 0, tj_graph_transpose(G, in(im, n, 0), perm));
}

static tj_status_t squeeze_axes(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                int32_t* count, int64_t* raw) {
  *count = 0;
  if (im->opset >= 13) {
    if (attr(n, "axes"))
      return fail(im, n, "attribute axes (an input since opset 13)");
    if (has_in(n, 1)) return known_ints(im, n, 1, "axes", count, raw, false);
    return NULL;
  }
  return attr_ints(im, n, "axes", count, raw);
}

static tj_status_t cv_squeeze(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                              const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 2));
  tj_onnx_val_t* x = n->inputs[0];
  int64_t raw[MAX_INTS];
  int32_t count;
  TJ_RETURN_IF_ERROR(squeeze_axes(im, n, &count, raw));
  bool drop[TJ_MAX_RANK] = {false};
  if (count == 0) {
    for (int32_t i = 0; i < x->rank; ++i) {
      if (x->dims[i] < 0)
        return fail(im, n, "squeeze without axes of a symbolic dim");
      drop[i] = x->dims[i] == 1;
    }
  }
  for (int32_t i = 0; i < count; ++i) {
    int32_t a;
    TJ_RETURN_IF_ERROR(norm_axis(im, n, raw[i], x->rank, &a));
    if (x->dims[a] != 1) return bad(im, n, "axis %d is not of size 1", (int)a);
    drop[a] = true;
  }
  int64_t dims[TJ_MAX_RANK];
  int32_t r = 0;
  for (int32_t i = 0; i < x->rank; ++i)
    if (!drop[i]) dims[r++] = x->dims[i];
  return out(im, n, 0, tj_graph_reshape(G, in(im, n, 0), r, dims));
}

static tj_status_t cv_unsqueeze(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 2));
  tj_onnx_val_t* x = n->inputs[0];
  int64_t raw[MAX_INTS];
  int32_t count;
  TJ_RETURN_IF_ERROR(squeeze_axes(im, n, &count, raw));
  int32_t rank = x->rank + count;
  if (count == 0) return bad(im, n, "axes is required");
  if (rank > TJ_MAX_RANK)
    return fail(im, n, "rank %d is above %d", (int)rank, TJ_MAX_RANK);
  bool add[TJ_MAX_RANK] = {false};
  for (int32_t i = 0; i < count; ++i) {
    int32_t a;
    TJ_RETURN_IF_ERROR(norm_axis(im, n, raw[i], rank, &a));
    if (add[a]) return bad(im, n, "axis %d repeats", (int)a);
    add[a] = true;
  }
  int64_t dims[TJ_MAX_RANK];
  for (int32_t i = 0, j = 0; i < rank; ++i) dims[i] = add[i] ? 1 : x->dims[j++];
  return out(im, n, 0, tj_graph_reshape(G, in(im, n, 0), rank, dims));
}

static tj_status_t cv_concat(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 32));
  tj_value_t vals[32];
  int32_t count = 0, axis;
  TJ_RETURN_IF_ERROR(
      norm_axis(im, n, attr_i(n, "axis", 0), rank_of(n, 0), &axis));
  for (int32_t i = 0; i < n->num_inputs; ++i) {
    if (!has_in(n, i)) continue;
    // Inputs with no elements add nothing.
    tj_onnx_val_t* v = n->inputs[i];
    if (v->rank > axis && v->dims[axis] == 0 && n->num_inputs > 1) continue;
    vals[count++] = in(im, n, i);
  }
  if (count == 0) vals[count++] = in(im, n, 0);
  if (count == 1) return out(im, n, 0, vals[0]);
  return out(im, n, 0, tj_graph_concat(G, count, vals, axis));
}

// A movement of known shape vectors with symbolic dims: Concat, Gather,
// Unsqueeze, Squeeze, Slice of 1-D i64 values, done here on the host.
static tj_status_t cv_shape(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                            const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  tj_onnx_val_t* x = n->inputs[0];
  int64_t start = attr_i(n, "start", 0), end = attr_i(n, "end", x->rank);
  if (start < 0) start += x->rank;
  if (end < 0) end += x->rank;
  start = start < 0 ? 0 : start > x->rank ? x->rank : start;
  end = end < start ? start : end > x->rank ? x->rank : end;
  int64_t dims[TJ_MAX_RANK];
  bool symbolic = false;
  for (int64_t i = start; i < end; ++i) {
    dims[i - start] = x->dims[i];
    symbolic |= x->dims[i] < 0;
  }
  int64_t len = end - start;
  return out_known(im, n, 0, TJ_DTYPE_I64, 1, &len, dims,
                   sizeof(int64_t) * (size_t)len, symbolic);
}

static tj_status_t cv_size(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                           const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  tj_onnx_val_t* x = n->inputs[0];
  int64_t size = 1;
  for (int32_t i = 0; i < x->rank; ++i) {
    if (x->dims[i] < 0) return fail(im, n, "Size of a symbolic shape");
    size *= x->dims[i];
  }
  return out_known(im, n, 0, TJ_DTYPE_I64, 0, NULL, &size, sizeof size, false);
}

static tj_status_t cv_constant(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                               const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 0, 0));
  if (n->proto->n_attribute != 1)
    return bad(im, n, "exactly one value attribute is required");
  const Onnx__AttributeProto* a = n->proto->attribute[0];
  const char* name = a->name ? a->name : "";
  if (strcmp(name, "value") == 0) {
    if (!a->t) return bad(im, n, "value has no tensor");
    tj_onnx_val_t val;
    TJ_RETURN_IF_ERROR(
        tj_onnx_tensor_value(im, a->t, n->proto->output[0], &val));
    if (!has_out(n, 0)) return NULL;
    return tj_onnx_define(im, n->proto->output[0], &val);
  }
  if (strcmp(name, "value_float") == 0) {
    float f = a->f;
    return out_known(im, n, 0, TJ_DTYPE_F32, 0, NULL, &f, sizeof f, false);
  }
  if (strcmp(name, "value_int") == 0) {
    int64_t i = a->i;
    return out_known(im, n, 0, TJ_DTYPE_I64, 0, NULL, &i, sizeof i, false);
  }
  if (strcmp(name, "value_floats") == 0) {
    int64_t len = (int64_t)a->n_floats;
    return out_known(im, n, 0, TJ_DTYPE_F32, 1, &len, a->floats,
                     a->n_floats * sizeof(float), false);
  }
  if (strcmp(name, "value_ints") == 0) {
    int64_t len = (int64_t)a->n_ints;
    return out_known(im, n, 0, TJ_DTYPE_I64, 1, &len, a->ints,
                     a->n_ints * sizeof(int64_t), false);
  }
  return fail(im, n, "attribute %s is not supported", name);
}

static tj_status_t cv_constant_of_shape(tj_onnx_importer_t* im,
                                        tj_onnx_node_t* n,
                                        const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  int64_t shape[MAX_INTS];
  int32_t count;
  TJ_RETURN_IF_ERROR(known_ints(im, n, 0, "shape", &count, shape, true));
  if (count > TJ_MAX_RANK)
    return fail(im, n, "rank %d is above %d", (int)count, TJ_MAX_RANK);
  tj_dtype_t d = TJ_DTYPE_F32;
  double value = 0;
  const Onnx__AttributeProto* a = attr(n, "value");
  if (a) {
    if (!a->t) return bad(im, n, "value has no tensor");
    tj_onnx_val_t v;
    TJ_RETURN_IF_ERROR(tj_onnx_tensor_value(im, a->t, "value", &v));
    if (numel_of_val(&v) != 1) return bad(im, n, "value must have one element");
    d = v.dtype;
    value = element_f64(&v);
  }
  return out(im, n, 0, tj_graph_full(G, d, count, shape, value));
}

static tj_status_t cv_expand(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  int64_t shape[MAX_INTS];
  int32_t count;
  TJ_RETURN_IF_ERROR(known_ints(im, n, 1, "shape", &count, shape, true));
  tj_onnx_val_t* x = n->inputs[0];
  int32_t rank = count > x->rank ? count : x->rank;
  if (rank > TJ_MAX_RANK)
    return fail(im, n, "rank %d is above %d", (int)rank, TJ_MAX_RANK);
  int64_t dims[TJ_MAX_RANK];
  for (int32_t i = 0; i < rank; ++i) {
    int32_t xi = i - (rank - x->rank), si = i - (rank - count);
    int64_t a = xi >= 0 ? x->dims[xi] : 1, b = si >= 0 ? shape[si] : 1;
    if (a == 1)
      dims[i] = b;
    else if (b == 1 || a == b)
      dims[i] = a;
    else
      return bad(im, n, "shape does not broadcast with the input at axis %d",
                 (int)i);
  }
  if (x->symbolic) return fail(im, n, "Expand of a symbolic shape");
  return out(im, n, 0, tj_graph_broadcast_to(G, in(im, n, 0), rank, dims));
}

// Gathers |count| indices along |axis| (a host-built index list).
static tj_value_t gather_list(tj_onnx_importer_t* im, tj_value_t x,
                              int32_t axis, const int64_t* idx, int64_t count) {
  tj_value_t iv =
      tj_graph_constant(G, TJ_DTYPE_I64, 1, &count, count ? idx : NULL,
                        (size_t)count * sizeof(int64_t));
  return tj_graph_gather(G, x, iv, axis);
}

static tj_status_t cv_slice(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                            const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 3, 5));
  tj_onnx_val_t* x = n->inputs[0];
  int32_t rank = x->rank;
  int64_t st[MAX_INTS], en[MAX_INTS], ax[MAX_INTS], sp[MAX_INTS];
  int32_t ns, ne, na = 0, nsp = 0;
  TJ_RETURN_IF_ERROR(known_ints(im, n, 1, "starts", &ns, st, false));
  TJ_RETURN_IF_ERROR(known_ints(im, n, 2, "ends", &ne, en, false));
  if (has_in(n, 3))
    TJ_RETURN_IF_ERROR(known_ints(im, n, 3, "axes", &na, ax, false));
  if (has_in(n, 4))
    TJ_RETURN_IF_ERROR(known_ints(im, n, 4, "steps", &nsp, sp, false));
  if (ns != ne || (has_in(n, 3) && na != ns) || (has_in(n, 4) && nsp != ns))
    return bad(im, n, "starts, ends, axes and steps differ in length");
  int64_t starts[TJ_MAX_RANK], stops[TJ_MAX_RANK], steps[TJ_MAX_RANK];
  int64_t rev_step[TJ_MAX_RANK] = {0}, rev_start[TJ_MAX_RANK],
          rev_end[TJ_MAX_RANK];
  bool seen[TJ_MAX_RANK] = {false};
  for (int32_t i = 0; i < rank; ++i) {
    starts[i] = 0;
    stops[i] = INT64_MAX;
    steps[i] = 1;
  }
  for (int32_t k = 0; k < ns; ++k) {
    int32_t a;
    TJ_RETURN_IF_ERROR(norm_axis(im, n, has_in(n, 3) ? ax[k] : k, rank, &a));
    if (seen[a]) return bad(im, n, "axis %d repeats", (int)a);
    seen[a] = true;
    int64_t step = has_in(n, 4) ? sp[k] : 1;
    if (step == 0) return bad(im, n, "a step of 0");
    int64_t d = x->dims[a];
    if (d < 0) {
      // A symbolic axis: only whole.
      if (step != 1 || !(st[k] == 0 || st[k] <= INT64_MIN / 2) ||
          en[k] < INT32_MAX)
        return fail(im, n, "a partial slice of symbolic axis %d", (int)a);
      continue;
    }
    int64_t s = st[k], t = en[k];
    if (step > 0) {
      s = s < 0 ? (s < -d ? 0 : s + d) : (s > d ? d : s);
      t = t < 0 ? (t < -d ? 0 : t + d) : (t > d ? d : t);
      if (t < s) t = s;
      starts[a] = s;
      stops[a] = t;
      steps[a] = step;
    } else {
      s = s < 0 ? (s < -d ? -1 : s + d) : (s > d - 1 ? d - 1 : s);
      t = t < 0 ? (t < -d ? -1 : t + d) : (t > d - 1 ? d - 1 : t);
      if (d > (1 << 24))
        return fail(im, n, "a negative step on an axis of %lld", (long long)d);
      rev_step[a] = step;
      rev_start[a] = s;
      rev_end[a] = t;
    }
  }
  tj_value_t y = tj_graph_slice(G, in(im, n, 0), starts, stops, steps);
  for (int32_t a = 0; a < rank; ++a) {
    if (!rev_step[a]) continue;
    int64_t count = 0;
    for (int64_t i = rev_start[a]; i > rev_end[a]; i += rev_step[a]) ++count;
    int64_t* idx =
        tj_arena_alloc(&im->arena, (size_t)(count + 1) * sizeof(int64_t));
    if (!idx) return tj_status_oom();
    count = 0;
    for (int64_t i = rev_start[a]; i > rev_end[a]; i += rev_step[a])
      idx[count++] = i;
    y = gather_list(im, y, a, idx, count);
  }
  return out(im, n, 0, y);
}

static tj_status_t cv_pad(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                          const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 4));
  tj_onnx_val_t* x = n->inputs[0];
  int32_t rank = x->rank;
  int64_t pads[MAX_INTS], ax[MAX_INTS];
  int32_t np, na = 0;
  TJ_RETURN_IF_ERROR(known_ints(im, n, 1, "pads", &np, pads, false));
  if (has_in(n, 3))
    TJ_RETURN_IF_ERROR(known_ints(im, n, 3, "axes", &na, ax, false));
  int32_t count = has_in(n, 3) ? na : rank;
  for (int32_t k = 0; k < np; ++k) {
    if (pads[k] > ((int64_t)1 << 40) || pads[k] < -((int64_t)1 << 40))
      return bad(im, n, "pad %lld is out of range", (long long)pads[k]);
  }
  if (np != 2 * count)
    return bad(im, n, "pads has %d entries for %d axes", (int)np, (int)count);
  int64_t low[TJ_MAX_RANK] = {0}, high[TJ_MAX_RANK] = {0};
  for (int32_t k = 0; k < count; ++k) {
    int32_t a;
    TJ_RETURN_IF_ERROR(norm_axis(im, n, has_in(n, 3) ? ax[k] : k, rank, &a));
    low[a] = pads[k];
    high[a] = pads[k + count];
  }
  double value = 0;
  if (has_in(n, 2)) {
    tj_onnx_val_t* v = n->inputs[2];
    if (!v->data) return fail(im, n, "constant_value must be a constant");
    if (numel_of_val(v) != 1)
      return bad(im, n, "constant_value must have one element");
    value = element_f64(v);
  }
  bool constant = attr_s_is(n, "mode", "constant", "constant");
  bool edge = attr_s_is(n, "mode", "constant", "edge");
  bool reflect = attr_s_is(n, "mode", "constant", "reflect");
  bool wrap = attr_s_is(n, "mode", "constant", "wrap");
  if (!constant && !edge && !reflect && !wrap)
    return fail(im, n, "an unknown mode");
  // Negative pads cut: a slice first.
  int64_t starts[TJ_MAX_RANK], stops[TJ_MAX_RANK];
  bool cut = false;
  for (int32_t a = 0; a < rank; ++a) {
    starts[a] = 0;
    stops[a] = INT64_MAX;
    if (low[a] < 0 || high[a] < 0) {
      if (x->dims[a] < 0)
        return fail(im, n, "negative pads on symbolic axis %d", (int)a);
      cut = true;
      starts[a] = low[a] < 0 ? -low[a] : 0;
      stops[a] = high[a] < 0 ? x->dims[a] + high[a] : x->dims[a];
      if (stops[a] < starts[a])
        return bad(im, n, "pads remove more than axis %d", (int)a);
      if (low[a] < 0) low[a] = 0;
      if (high[a] < 0) high[a] = 0;
    }
  }
  tj_value_t y = in(im, n, 0);
  if (cut) y = tj_graph_slice(G, y, starts, stops, NULL);
  if (constant) return out(im, n, 0, tj_graph_pad(G, y, low, high, value));
  int64_t dims[TJ_MAX_RANK];
  tj_graph_value_dims(G, y, dims);
  for (int32_t a = 0; a < rank; ++a) {
    if (!low[a] && !high[a]) continue;
    int64_t d = dims[a];
    if (d <= 0)
      return fail(im, n,
                  "edge, reflect or wrap padding of axis %d of size %lld",
                  (int)a, (long long)d);
    int64_t total = d + low[a] + high[a];
    if (total > (1 << 24)) return fail(im, n, "padding too large");
    int64_t* idx = tj_arena_alloc(&im->arena, (size_t)total * sizeof(int64_t));
    if (!idx) return tj_status_oom();
    for (int64_t i = 0; i < total; ++i) {
      int64_t j = i - low[a];
      if (edge) {
        j = j < 0 ? 0 : j >= d ? d - 1 : j;
      } else if (wrap) {
        j = ((j % d) + d) % d;
      } else if (d == 1) {
        j = 0;
      } else {
        int64_t period = 2 * (d - 1);
        j = ((j % period) + period) % period;
        if (j >= d) j = period - j;
      }
      idx[i] = j;
    }
    y = gather_list(im, y, a, idx, total);
  }
  return out(im, n, 0, y);
}

static tj_status_t cv_gather(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  int32_t axis;
  TJ_RETURN_IF_ERROR(
      norm_axis(im, n, attr_i(n, "axis", 0), rank_of(n, 0), &axis));
  return out(im, n, 0, tj_graph_gather(G, in(im, n, 0), in(im, n, 1), axis));
}

// ops (issue 15): GatherElements and GatherND (indices out of range are
// clamped, as Gather's).
static tj_status_t cv_gather_elements(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                      const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  int32_t axis;
  TJ_RETURN_IF_ERROR(
      norm_axis(im, n, attr_i(n, "axis", 0), rank_of(n, 0), &axis));
  return out(im, n, 0,
             tj_graph_gather_elements(G, in(im, n, 0), in(im, n, 1), axis));
}

static tj_status_t cv_gather_nd(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  int64_t b = attr_i(n, "batch_dims", 0);
  if (b < 0 || b >= TJ_MAX_RANK) {
    return fail(im, n, "batch_dims %lld is out of range", (long long)b);
  }
  return out(im, n, 0,
             tj_graph_gather_nd(G, in(im, n, 0), in(im, n, 1), (int32_t)b));
}

// ops3 (issue 15): CumSum and CumProd (param 1): the axis is a constant
// scalar input (0-D or one element), exclusive and reverse attributes.
static tj_status_t cv_cumulative(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                 const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  int64_t ax[MAX_INTS];
  int32_t count;
  TJ_RETURN_IF_ERROR(known_ints(im, n, 1, "axis", &count, ax, false));
  if (count != 1) return bad(im, n, "axis has %d elements, not 1", (int)count);
  int32_t axis;
  TJ_RETURN_IF_ERROR(norm_axis(im, n, ax[0], rank_of(n, 0), &axis));
  bool exclusive = attr_i(n, "exclusive", 0) != 0;
  bool reverse = attr_i(n, "reverse", 0) != 0;
  tj_value_t x = in(im, n, 0);
  return out(im, n, 0,
             e->param ? tj_graph_cumprod(G, x, axis, exclusive, reverse)
                      : tj_graph_cumsum(G, x, axis, exclusive, reverse));
}

// topk (issue 15): TopK onto tj_graph_topk. K must be known when the
// graph is built (the result's shape depends on it). sorted = 0 leaves the
// order unspecified: the sorted order is one, so both map to the same op.
static tj_status_t cv_topk(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                           const op_entry_t* e) {
  (void)e;
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  int64_t ks[MAX_INTS];
  int32_t count;
  TJ_RETURN_IF_ERROR(known_ints(im, n, 1, "K", &count, ks, false));
  if (count != 1) return bad(im, n, "K has %d elements, not 1", (int)count);
  if (ks[0] < 0) return bad(im, n, "K is %lld, negative", (long long)ks[0]);
  int32_t axis;
  TJ_RETURN_IF_ERROR(
      norm_axis(im, n, attr_i(n, "axis", -1), rank_of(n, 0), &axis));
  bool largest = attr_i(n, "largest", 1) != 0;
  tj_value_t indices;
  tj_value_t values =
      tj_graph_topk(G, in(im, n, 0), ks[0], axis, largest, &indices);
  TJ_RETURN_IF_ERROR(out(im, n, 0, values));
  return out(im, n, 1, indices);
}

// topk (issue 15): Einsum onto tj_graph_einsum (its decomposition).
static tj_status_t cv_einsum(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             const op_entry_t* e) {
  (void)e;
  enum { kMaxOperands = 16 };
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, kMaxOperands));
  const Onnx__AttributeProto* a = attr(n, "equation");
  if (!a || !a->has_s) return bad(im, n, "the equation attribute is missing");
  char eq[256];
  if (a->s.len >= sizeof(eq))
    return fail(im, n, "the equation has %zu characters", a->s.len);
  memcpy(eq, a->s.data, a->s.len);
  eq[a->s.len] = 0;
  tj_value_t xs[kMaxOperands];
  for (int32_t i = 0; i < n->num_inputs; ++i) {
    if (!has_in(n, i)) return bad(im, n, "input %d is missing", (int)i);
    xs[i] = in(im, n, i);
  }
  return out(im, n, 0, tj_graph_einsum(G, eq, xs, n->num_inputs));
}

// topk (issue 15): LpNormalization, x / ||x||_p along the axis (p = 1 or
// 2; no epsilon: a zero row gives NaN, as ONNX's reference).
static tj_status_t cv_lp_normalization(tj_onnx_importer_t* im,
                                       tj_onnx_node_t* n, const op_entry_t* e) {
  (void)e;
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  int64_t p = attr_i(n, "p", 2);
  if (p != 1 && p != 2)
    return fail(im, n, "p = %lld; only 1 and 2 are supported", (long long)p);
  int32_t axis;
  TJ_RETURN_IF_ERROR(
      norm_axis(im, n, attr_i(n, "axis", -1), rank_of(n, 0), &axis));
  tj_value_t x = in(im, n, 0);
  tj_value_t norm =
      p == 1 ? tj_graph_sum(G, tj_graph_abs(G, x), 1, &axis, true)
             : tj_graph_sqrt(
                   G, tj_graph_sum(G, tj_graph_mul(G, x, x), 1, &axis, true));
  return out(im, n, 0, tj_graph_div(G, x, norm));
}

static tj_status_t cv_tile(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                           const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  tj_onnx_val_t* x = n->inputs[0];
  int64_t reps[MAX_INTS];
  int32_t count;
  TJ_RETURN_IF_ERROR(known_ints(im, n, 1, "repeats", &count, reps, false));
  if (count != x->rank)
    return bad(im, n, "repeats has %d entries for rank %d", (int)count,
               (int)x->rank);
  int64_t inter[TJ_MAX_RANK], wide[TJ_MAX_RANK], final[TJ_MAX_RANK];
  int32_t r = 0;
  for (int32_t i = 0; i < x->rank; ++i) {
    if (reps[i] < 0) return bad(im, n, "a negative repeat");
    if (reps[i] != 1) {
      if (r + 2 + (x->rank - i - 1) > TJ_MAX_RANK)
        return fail(im, n, "too many repeated axes");
      inter[r] = 1;
      wide[r++] = reps[i];
    }
    inter[r] = x->dims[i];
    wide[r++] = x->dims[i];
    final[i] = tj_graph_dim_mul(G, reps[i], x->dims[i]);
  }
  tj_value_t y = tj_graph_reshape(G, in(im, n, 0), r, inter);
  y = tj_graph_broadcast_to(G, y, r, wide);
  return out(im, n, 0, tj_graph_reshape(G, y, x->rank, final));
}

static tj_status_t cv_range(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                            const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 3, 3));
  for (int32_t i = 0; i < 3; ++i) {
    if (!n->inputs[i]->data || n->inputs[i]->symbolic)
      return fail(im, n, "input %d must be a constant (the length is static)",
                  (int)i);
    if (numel_of_val(n->inputs[i]) != 1)
      return bad(im, n, "input %d is not a scalar", (int)i);
  }
  tj_dtype_t d = dtype_of(n, 0);
  double start = element_f64(n->inputs[0]), limit = element_f64(n->inputs[1]);
  double delta = element_f64(n->inputs[2]);
  if (delta == 0) return bad(im, n, "delta is 0");
  double len = ceil((limit - start) / delta);
  if (!(len >= 0)) len = 0;
  if (len > (1 << 24)) return fail(im, n, "%g elements", len);
  int64_t count = (int64_t)len;
  size_t esize = tj_dtype_size(d);
  uint8_t* buf = tj_arena_alloc(&im->arena, (size_t)(count + 1) * esize);
  if (!buf) return tj_status_oom();
  // Integers in wrapping int64 arithmetic, from the exact inputs.
  uint64_t istart = (uint64_t)element_i64(n->inputs[0]);
  uint64_t idelta = (uint64_t)element_i64(n->inputs[2]);
  for (int64_t i = 0; i < count; ++i) {
    int64_t v = (int64_t)(istart + (uint64_t)i * idelta);
    switch (d) {
      case TJ_DTYPE_F32:
        ((float*)buf)[i] = (float)start + (float)i * (float)delta;
        break;
      case TJ_DTYPE_F64:
        ((double*)buf)[i] = start + (double)i * delta;
        break;
      case TJ_DTYPE_I32:
        ((int32_t*)buf)[i] = (int32_t)v;
        break;
      case TJ_DTYPE_I64:
        ((int64_t*)buf)[i] = v;
        break;
      case TJ_DTYPE_I8:
        ((int8_t*)buf)[i] = (int8_t)v;
        break;
      default:
        return fail(im, n, "Range of %s", tj_dtype_name(d));
    }
  }
  return out_known(im, n, 0, d, 1, &count, buf, (size_t)count * esize, false);
}

static tj_status_t cv_eye_like(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                               const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  tj_onnx_val_t* x = n->inputs[0];
  if (x->rank != 2) return bad(im, n, "the input must be 2-D");
  tj_dtype_t d = x->dtype;
  const Onnx__AttributeProto* a = attr(n, "dtype");
  if (a && a->has_i && !onnx_to_dtype(a->i, &d))
    return fail(im, n, "dtype %s is not supported",
                tj_onnx_type_name((int32_t)a->i));
  tj_value_t row = tj_graph_iota(G, TJ_DTYPE_I64, 2, x->dims, 0);
  tj_value_t col = tj_graph_iota(G, TJ_DTYPE_I64, 2, x->dims, 1);
  row =
      tj_graph_add(G, row, scalar(im, TJ_DTYPE_I64, (double)attr_i(n, "k", 0)));
  return out(im, n, 0, tj_graph_cast(G, tj_graph_eq(G, row, col), d));
}

static tj_status_t cv_trilu(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                            const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 2));
  tj_onnx_val_t* x = n->inputs[0];
  if (x->rank < 2) return bad(im, n, "the input has rank %d", (int)x->rank);
  int64_t k = 0;
  tj_value_t kv = tj_value_none();
  if (has_in(n, 1) && !n->inputs[1]->data) {
    // k known only at run time: a scalar tensor.
    if (n->inputs[1]->rank > 1) return bad(im, n, "k must be a scalar");
    kv = tj_graph_reshape(G, tj_graph_cast(G, in(im, n, 1), TJ_DTYPE_I64), 0,
                          NULL);
  } else if (has_in(n, 1)) {
    int64_t ks[MAX_INTS];
    int32_t count;
    TJ_RETURN_IF_ERROR(known_ints(im, n, 1, "k", &count, ks, false));
    if (count != 1) return bad(im, n, "k must be a scalar");
    k = ks[0];
  }
  tj_value_t row =
      tj_graph_iota(G, TJ_DTYPE_I64, x->rank, x->dims, x->rank - 2);
  tj_value_t col =
      tj_graph_iota(G, TJ_DTYPE_I64, x->rank, x->dims, x->rank - 1);
  tj_value_t diff = tj_graph_sub(G, col, row);  // col - row
  tj_value_t ks =
      tj_value_is_none(kv) ? scalar(im, TJ_DTYPE_I64, (double)k) : kv;
  tj_value_t keep = attr_i(n, "upper", 1) ? tj_graph_ge(G, diff, ks)
                                          : tj_graph_le(G, diff, ks);
  return out(im, n, 0,
             tj_graph_where(G, keep, in(im, n, 0), scalar(im, x->dtype, 0)));
}

static tj_status_t cv_depth_space(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                  const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  tj_onnx_val_t* x = n->inputs[0];
  if (x->rank != 4) return bad(im, n, "the input must be 4-D");
  int64_t b = attr_i(n, "blocksize", 0);
  int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
  if (b <= 0 || C < 0 || H < 0 || W < 0)
    return fail(im, n, "needs a positive blocksize and static C, H, W");
  tj_value_t y = in(im, n, 0);
  if (e->param == 0) {  // DepthToSpace
    if (C % (b * b)) return bad(im, n, "C is not a multiple of blocksize^2");
    bool crd = attr_s_is(n, "mode", "DCR", "CRD");
    if (!crd && !attr_s_is(n, "mode", "DCR", "DCR"))
      return fail(im, n, "an unknown mode");
    int64_t c = C / (b * b);
    int64_t d6[6] = {N, b, b, c, H, W}, c6[6] = {N, c, b, b, H, W};
    static const int32_t kDcr[6] = {0, 3, 4, 1, 5, 2},
                         kCrd[6] = {0, 1, 4, 2, 5, 3};
    int64_t o4[4] = {N, c, H * b, W * b};
    y = tj_graph_reshape(G, y, 6, crd ? c6 : d6);
    y = tj_graph_transpose(G, y, crd ? kCrd : kDcr);
    return out(im, n, 0, tj_graph_reshape(G, y, 4, o4));
  }
  if (H % b || W % b)
    return bad(im, n, "H or W is not a multiple of blocksize");
  int64_t d6[6] = {N, C, H / b, b, W / b, b};
  static const int32_t kPerm[6] = {0, 3, 5, 1, 2, 4};
  int64_t o4[4] = {N, C * b * b, H / b, W / b};
  y = tj_graph_reshape(G, y, 6, d6);
  y = tj_graph_transpose(G, y, kPerm);
  return out(im, n, 0, tj_graph_reshape(G, y, 4, o4));
}

static tj_status_t cv_split(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                            const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 2));
  tj_onnx_val_t* x = n->inputs[0];
  int32_t axis;
  TJ_RETURN_IF_ERROR(norm_axis(im, n, attr_i(n, "axis", 0), x->rank, &axis));
  int64_t d = x->dims[axis];
  if (d < 0) return fail(im, n, "Split of symbolic axis %d", (int)axis);
  int64_t parts[MAX_INTS];
  int32_t count = 0;
  int32_t outs = (int32_t)n->proto->n_output;
  if (im->opset >= 13 && attr(n, "split"))
    return fail(im, n, "attribute split (an input since opset 13)");
  if (has_in(n, 1)) {
    TJ_RETURN_IF_ERROR(known_ints(im, n, 1, "split", &count, parts, false));
  } else if (attr(n, "split")) {
    TJ_RETURN_IF_ERROR(attr_ints(im, n, "split", &count, parts));
  } else {
    int64_t num = attr_i(n, "num_outputs", outs);
    if (num <= 0 || num > MAX_INTS)
      return bad(im, n, "%lld outputs", (long long)num);
    // Equal parts; since opset 18 the last may be smaller.
    int64_t each = (d + num - 1) / num;
    if (im->opset < 18 && d % num)
      return bad(im, n, "axis of %lld does not split in %lld", (long long)d,
                 (long long)num);
    for (int64_t i = 0; i < num; ++i) {
      int64_t lo = i * each;
      parts[i] = lo >= d ? 0 : (lo + each > d ? d - lo : each);
    }
    count = (int32_t)num;
  }
  if (count != outs)
    return bad(im, n, "%d parts for %d outputs", (int)count, (int)outs);
  int64_t starts[TJ_MAX_RANK], stops[TJ_MAX_RANK], at = 0;
  for (int32_t k = 0; k < count; ++k) {
    for (int32_t i = 0; i < x->rank; ++i) {
      starts[i] = 0;
      stops[i] = INT64_MAX;
    }
    if (parts[k] < 0 || at + parts[k] > d)
      return bad(im, n, "the parts exceed the axis");
    starts[axis] = at;
    stops[axis] = at + parts[k];
    at += parts[k];
    TJ_RETURN_IF_ERROR(
        out(im, n, (size_t)k,
            tj_graph_slice(G, in(im, n, 0), starts, stops, NULL)));
  }
  if (at != d)
    return bad(im, n, "the parts sum to %lld, not %lld", (long long)at,
               (long long)d);
  return NULL;
}

// The negative log likelihood of |logp| ([N, C, d...]) at |target| ([N,
// d...]) weighted by |weight| ([C] or none), with ONNX's reductions and
// ignore_index.
static tj_status_t nll(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                       tj_value_t logp, const tj_onnx_val_t* lv, int32_t target,
                       int32_t weight) {
  tj_onnx_val_t* tv = n->inputs[target];
  if (lv->rank < 2 || tv->rank != lv->rank - 1)
    return bad(im, n, "input and target ranks do not match");
  tj_dtype_t d = lv->dtype;
  tj_value_t t = tj_graph_cast(G, in(im, n, target), TJ_DTYPE_I64);
  tj_value_t zero_i = scalar(im, TJ_DTYPE_I64, 0);
  tj_value_t ignored = tj_value_none();
  const Onnx__AttributeProto* ia = attr(n, "ignore_index");
  if (ia && ia->has_i) {
    ignored = tj_graph_eq(G, t, scalar(im, TJ_DTYPE_I64, (double)ia->i));
    t = tj_graph_where(G, ignored, zero_i, t);
  }
  int64_t tdims[TJ_MAX_RANK];
  tdims[0] = tv->dims[0];
  tdims[1] = 1;
  for (int32_t i = 1; i < tv->rank; ++i) tdims[i + 1] = tv->dims[i];
  tj_value_t mask =
      tj_graph_eq(G, tj_graph_iota(G, TJ_DTYPE_I64, lv->rank, lv->dims, 1),
                  tj_graph_reshape(G, t, lv->rank, tdims));
  int32_t class_axis = 1;
  tj_value_t picked =
      tj_graph_sum(G, tj_graph_where(G, mask, logp, scalar(im, d, 0)), 1,
                   &class_axis, false);
  tj_value_t w = tj_value_none();
  if (has_in(n, weight)) w = tj_graph_gather(G, in(im, n, weight), t, 0);
  if (!tj_value_is_none(ignored)) {
    if (tj_value_is_none(w)) w = tj_graph_full(G, d, tv->rank, tv->dims, 1);
    w = tj_graph_where(G, ignored, scalar(im, d, 0), w);
  }
  tj_value_t loss = tj_graph_neg(G, picked);
  if (!tj_value_is_none(w)) loss = tj_graph_mul(G, loss, w);
  if (attr_s_is(n, "reduction", "mean", "none")) return out(im, n, 0, loss);
  if (attr_s_is(n, "reduction", "mean", "sum"))
    return out(im, n, 0, tj_graph_sum(G, loss, 0, NULL, false));
  if (!attr_s_is(n, "reduction", "mean", "mean"))
    return fail(im, n, "an unknown reduction");
  if (tj_value_is_none(w))
    return out(im, n, 0, tj_graph_mean(G, loss, 0, NULL, false));
  return out(im, n, 0,
             tj_graph_div(G, tj_graph_sum(G, loss, 0, NULL, false),
                          tj_graph_sum(G, w, 0, NULL, false)));
}

static tj_status_t cv_nll_loss(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                               const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 3));
  if (!is_float(dtype_of(n, 0))) return bad(im, n, "the input must be float");
  return nll(im, n, in(im, n, 0), n->inputs[0], 1, 2);
}

static tj_status_t cv_softmax_ce_loss(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                      const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 3));
  if (!is_float(dtype_of(n, 0))) return bad(im, n, "the scores must be float");
  if (rank_of(n, 0) < 2) return bad(im, n, "the scores need rank >= 2");
  tj_value_t logp = tj_graph_log_softmax(G, in(im, n, 0), 1);
  TJ_RETURN_IF_ERROR(out(im, n, 1, logp));
  return nll(im, n, logp, n->inputs[0], 1, 2);
}

//===--- Resize (dtypes, issue 15) ---===//

// ONNX Resize (opsets 10 to 19) as the ONNX reference computes it: axis by
// axis in increasing order (interpolation is separable), each output
// position j mapping to a source coordinate x by the coordinate
// transformation mode, taps at consecutive indices clamped into the axis
// (edge padding) with the mode's coefficients. An axis becomes one gather
// (nearest) or a weighted sum of gathers of constant indices (linear,
// cubic, antialias), native kernels that fuse; tf_crop_and_resize's
// positions outside the input take extrapolation_value.
enum { RS_MAX_TAPS = 64 };

typedef struct rs_t {
  int mode;     // 0 nearest, 1 linear, 2 cubic
  int nearest;  // 0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil
  int ctm;      // kRsModes
  double a;     // cubic_coeff_a
  bool exclude_outside, antialias;
} rs_t;

static const char* const kRsModes[] = {
    "half_pixel",          "half_pixel_symmetric", "pytorch_half_pixel",
    "align_corners",       "asymmetric",           "tf_crop_and_resize",
    "tf_half_pixel_for_nn"};

// The index of attribute |name|'s string among |options| (|def| when
// absent), or -1.
static int rs_choice(tj_onnx_node_t* n, const char* name, const char* def,
                     const char* const* options, int count) {
  for (int i = 0; i < count; ++i) {
    if (attr_s_is(n, name, def, options[i])) return i;
  }
  return -1;
}

static double rs_cubic(double x, double a) {
  x = fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

// The coefficients for |ratio| (in (0, 1]) at |scale|; their count.
static int rs_coeffs(const rs_t* r, double ratio, double scale, double* c) {
  if (r->mode == 0) {
    bool hi = ratio == 1.0 || (r->nearest == 0   ? ratio > 0.5
                               : r->nearest == 1 ? ratio >= 0.5
                                                 : r->nearest == 3);
    c[0] = !hi, c[1] = hi;
    return 2;
  }
  if (!r->antialias && r->mode == 1) {
    c[0] = 1 - ratio, c[1] = ratio;
    return 2;
  }
  if (!r->antialias) {
    const double a = r->a, s = ratio + 1, t = 1 - ratio, u = t + 1;
    c[0] = ((a * s - 5 * a) * s + 8 * a) * s - 4 * a;
    c[1] = ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1;
    c[2] = ((a + 2) * t - (a + 3)) * t * t + 1;
    c[3] = ((a * u - 5 * a) * u + 8 * a) * u - 4 * a;
    return 4;
  }
  scale = fmin(scale, 1.0);
  const int start = (int)floor((r->mode == 1 ? -1 : -2) / scale) + 1;
  const int count = 2 - 2 * start;  // taps start .. 1 - start
  if (count > RS_MAX_TAPS) return -1;
  double sum = 0;
  for (int i = 0; i < count; ++i) {
    double x = (start + i - ratio) * scale;
    c[i] = r->mode == 1 ? fmin(fmax(1 - fabs(x), 0), 1) : rs_cubic(x, r->a);
    sum += c[i];
  }
  for (int i = 0; i < count; ++i) c[i] /= sum;
  return count;
}

// Resizes axis |ax| of |x| (dims |dims|) from dims[ax] to |out_len| at
// |scale|; roi [lo, hi] for tf_crop_and_resize.
static tj_status_t rs_axis(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                           const rs_t* r, tj_value_t* x, tj_dtype_t dtype,
                           int32_t rank, int64_t* dims, int32_t ax,
                           int64_t out_len, double scale, double lo, double hi,
                           double extrapolation) {
  const int64_t in_len = dims[ax];
  if (in_len <= 0 || out_len <= 0 || out_len > (1 << 24))
    return fail(im, n, "resize of axis %d from %lld to %lld", (int)ax,
                (long long)in_len, (long long)out_len);
  double c[RS_MAX_TAPS];
  const int taps = rs_coeffs(r, 0.5, scale, c);
  if (taps < 0)
    return fail(im, n, "antialias at scale %g needs more than %d taps", scale,
                RS_MAX_TAPS);
  const size_t cells = (size_t)out_len * (size_t)taps;
  int64_t* idx = tj_arena_alloc(&im->arena, cells * sizeof(int64_t));
  double* w = tj_arena_alloc(&im->arena, cells * sizeof(double));
  uint8_t* outside = tj_arena_alloc(&im->arena, (size_t)out_len);
  if (!idx || !w || !outside) return tj_status_oom();
  const double out_width = scale * (double)in_len;
  bool any_outside = false;
  for (int64_t j = 0; j < out_len; ++j) {
    const double y = (double)j;
    double xo;
    switch (r->ctm) {
      case 1: {  // half_pixel_symmetric
        double adjustment = (double)out_len / out_width;
        double center = (double)in_len / 2;
        xo = center * (1 - adjustment) + (y + 0.5) / scale - 0.5;
        break;
      }
      case 2:  // pytorch_half_pixel
        xo = out_width == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
        break;
      case 3:  // align_corners
        xo = out_width == 1 ? 0 : y * (double)(in_len - 1) / (out_width - 1);
        break;
      case 4:  // asymmetric
        xo = y / scale;
        break;
      case 5:  // tf_crop_and_resize
        xo = out_width == 1
                 ? (hi - lo) * (double)(in_len - 1) / 2
                 : y * (hi - lo) * (double)(in_len - 1) / (out_width - 1);
        xo += lo * (double)(in_len - 1);
        break;
      case 6:  // tf_half_pixel_for_nn (opset 11 only)
        xo = (y + 0.5) / scale;
        break;
      default:  // half_pixel
        xo = (y + 0.5) / scale - 0.5;
        break;
    }
    outside[j] = r->ctm == 5 && (xo < 0 || xo > (double)(in_len - 1));
    any_outside |= outside[j];
    const double fl = floor(xo);
    const bool integer = xo == fl;
    if (!isfinite(xo) || fabs(xo) > 1e15)
      return fail(im, n, "resize coordinate %g of axis %d", xo, (int)ax);
    int got = rs_coeffs(r, integer ? 1.0 : xo - fl, scale, c);
    // The taps nearest x, ties to the lower (an even count: from
    // floor(x) - taps/2 + 1, or x - taps/2 when x is an integer).
    int64_t start = (int64_t)fl - taps / 2 + (integer ? 0 : 1);
    double sum = 0;
    for (int k = 0; k < got; ++k) {
      int64_t i = start + k;
      if (r->exclude_outside && (i < 0 || i >= in_len)) c[k] = 0;
      sum += c[k];
      idx[(size_t)k * (size_t)out_len + (size_t)j] = i < 0         ? 0
                                                     : i >= in_len ? in_len - 1
                                                                   : i;
    }
    if (r->exclude_outside && sum == 0) sum = 1;
    for (int k = 0; k < got; ++k) {
      w[(size_t)k * (size_t)out_len + (size_t)j] =
          r->exclude_outside ? c[k] / sum : c[k];
    }
  }
  int64_t wdims[TJ_MAX_RANK];
  for (int32_t d = 0; d < rank - ax; ++d) wdims[d] = d == 0 ? out_len : 1;
  int used = taps;
  if (r->mode == 0) {  // nearest: the one tap of weight 1, one gather
    for (int64_t j = 0; j < out_len; ++j) {
      const size_t up = (size_t)out_len + (size_t)j;
      if (w[up] == 1) idx[j] = idx[up];
      w[j] = 1;
    }
    used = 1;
  }
  tj_value_t acc = tj_value_none();
  for (int k = 0; k < used; ++k) {
    const int64_t* ik = idx + (size_t)k * (size_t)out_len;
    const double* wk = w + (size_t)k * (size_t)out_len;
    bool zero = true, one = true;
    for (int64_t j = 0; j < out_len; ++j) {
      zero &= wk[j] == 0;
      one &= wk[j] == 1;
    }
    if (zero) continue;
    tj_value_t g =
        tj_graph_gather(G, *x,
                        tj_graph_constant(G, TJ_DTYPE_I64, 1, &out_len, ik,
                                          (size_t)out_len * sizeof(int64_t)),
                        ax);
    if (!one) {
      if (!is_float(dtype))
        return fail(im, n, "%s interpolation of %s",
                    r->mode == 1 ? "linear" : "cubic", tj_dtype_name(dtype));
      // The weights in the input's dtype.
      void* wt = tj_arena_alloc(&im->arena,
                                (size_t)out_len * tj_dtype_size(dtype) + 1);
      if (!wt) return tj_status_oom();
      for (int64_t j = 0; j < out_len; ++j) {
        switch (dtype) {
          case TJ_DTYPE_F64:
            ((double*)wt)[j] = wk[j];
            break;
          default:
            ((float*)wt)[j] = (float)wk[j];
            break;
        }
      }
      tj_dtype_t wd = dtype == TJ_DTYPE_F64 ? TJ_DTYPE_F64 : TJ_DTYPE_F32;
      tj_value_t wv = tj_graph_constant(G, wd, rank - ax, wdims, wt,
                                        (size_t)out_len * tj_dtype_size(wd));
      if (wd != dtype) g = tj_graph_cast(G, g, wd);
      g = tj_graph_mul(G, g, wv);
    } else if (is_float(dtype) && dtype != TJ_DTYPE_F64) {
      g = tj_graph_cast(G, g, TJ_DTYPE_F32);
    }
    acc = tj_value_is_none(acc) ? g : tj_graph_add(G, acc, g);
  }
  if (tj_value_is_none(acc)) return fail(im, n, "resize with no taps");
  if (is_float(dtype) && dtype != TJ_DTYPE_F64 && dtype != TJ_DTYPE_F32)
    acc = tj_graph_cast(G, acc, dtype);
  if (any_outside) {
    tj_value_t mask = tj_graph_constant(G, TJ_DTYPE_BOOL, rank - ax, wdims,
                                        outside, (size_t)out_len);
    acc = tj_graph_where(G, mask, scalar(im, dtype, extrapolation), acc);
  }
  *x = acc;
  dims[ax] = out_len;
  return NULL;
}

static tj_status_t cv_resize(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             const op_entry_t* e) {
  (void)e;
  const bool v10 = im->opset < 11;
  TJ_RETURN_IF_ERROR(need_inputs(im, n, v10 ? 2 : 1, v10 ? 2 : 4));
  tj_onnx_val_t* xv = n->inputs[0];
  const int32_t rank = xv->rank;
  const tj_dtype_t dtype = xv->dtype;
  rs_t r = {0};
  static const char* const kModes[] = {"nearest", "linear", "cubic"};
  static const char* const kNearest[] = {"round_prefer_floor",
                                         "round_prefer_ceil", "floor", "ceil"};
  static const char* const kPolicies[] = {"stretch", "not_larger",
                                          "not_smaller"};
  r.mode = rs_choice(n, "mode", "nearest", kModes, 3);
  r.nearest = rs_choice(n, "nearest_mode", "round_prefer_floor", kNearest, 4);
  r.ctm = rs_choice(n, "coordinate_transformation_mode",
                    v10 ? "asymmetric" : "half_pixel", kRsModes, 7);
  const int policy =
      rs_choice(n, "keep_aspect_ratio_policy", "stretch", kPolicies, 3);
  if (r.mode < 0 || r.nearest < 0 || r.ctm < 0 || policy < 0)
    return bad(im, n,
               "unknown mode, nearest_mode, "
               "coordinate_transformation_mode or "
               "keep_aspect_ratio_policy");
  r.a = attr_f(n, "cubic_coeff_a", -0.75);
  r.exclude_outside = attr_i(n, "exclude_outside", 0) != 0;
  r.antialias = attr_i(n, "antialias", 0) != 0 && r.mode != 0;
  const double extrapolation = attr_f(n, "extrapolation_value", 0.0);
  if (xv->symbolic) return fail(im, n, "resize of a shape tensor");
  for (int32_t d = 0; d < rank; ++d) {
    if (xv->dims[d] < 0)
      return fail(im, n, "input dim %d is symbolic; resize needs static dims",
                  (int)d);
  }
  int32_t num_axes = 0;
  int64_t axes[MAX_INTS];
  TJ_RETURN_IF_ERROR(attr_ints(im, n, "axes", &num_axes, axes));
  if (num_axes == 0) {
    num_axes = rank;
    for (int32_t d = 0; d < rank; ++d) axes[d] = d;
  }
  for (int32_t i = 0; i < num_axes; ++i) {
    int32_t a;
    TJ_RETURN_IF_ERROR(norm_axis(im, n, axes[i], rank, &a));
    axes[i] = a;
  }
  // scales (input 1 in opset 10, else 2) or sizes (input 3): constants.
  const int32_t si = v10 ? 1 : 2;
  double scales[TJ_MAX_RANK], roi[2 * TJ_MAX_RANK];
  int64_t sizes[TJ_MAX_RANK];
  for (int32_t d = 0; d < rank; ++d) {
    scales[d] = 1, sizes[d] = xv->dims[d], roi[d] = 0, roi[rank + d] = 1;
  }
  const bool has_scales = has_in(n, si) && numel_of_val(n->inputs[si]) > 0;
  const bool has_sizes = !v10 && has_in(n, 3) && numel_of_val(n->inputs[3]) > 0;
  if (has_scales == has_sizes)
    return bad(im, n, "exactly one of scales and sizes must be given");
  if (has_scales) {
    tj_onnx_val_t* s = n->inputs[si];
    if (!s->data)
      return fail(im, n, "input %d (scales, \"%s\") must be a constant",
                  (int)si, n->proto->input[si]);
    if (!is_float(s->dtype) || numel_of_val(s) != num_axes)
      return bad(im, n, "scales must be %d floats", (int)num_axes);
    for (int32_t i = 0; i < num_axes; ++i) {
      tj_onnx_val_t one = *s;
      one.data = (const char*)s->data + (size_t)i * tj_dtype_size(s->dtype);
      double v = element_f64(&one);
      if (!(v > 0)) return bad(im, n, "scale %g is not positive", v);
      scales[axes[i]] = v;
      sizes[axes[i]] =
          (int64_t)floor(v * (double)xv->dims[axes[i]]);  // as numpy astype
    }
  } else {
    int32_t count;
    int64_t want[MAX_INTS];
    TJ_RETURN_IF_ERROR(known_ints(im, n, 3, "sizes", &count, want, false));
    if (count != num_axes) return bad(im, n, "sizes must be %d ints", num_axes);
    for (int32_t i = 0; i < num_axes; ++i) {
      sizes[axes[i]] = want[i];
      scales[axes[i]] = (double)want[i] / (double)xv->dims[axes[i]];
    }
    if (policy != 0) {
      double s = scales[axes[0]];
      for (int32_t i = 1; i < num_axes; ++i) {
        double v = scales[axes[i]];
        s = policy == 1 ? fmin(s, v) : fmax(s, v);
      }
      for (int32_t i = 0; i < num_axes; ++i) {
        scales[axes[i]] = s;
        sizes[axes[i]] = (int64_t)(s * (double)xv->dims[axes[i]] + 0.5);
      }
    }
  }
  if (r.ctm == 5) {
    if (!has_in(n, 1) || !n->inputs[1]->data)
      return fail(im, n, "tf_crop_and_resize needs a constant roi");
    tj_onnx_val_t* rv = n->inputs[1];
    if (!is_float(rv->dtype) || numel_of_val(rv) != 2 * num_axes)
      return bad(im, n, "roi must be %d floats", 2 * (int)num_axes);
    for (int32_t i = 0; i < 2 * num_axes; ++i) {
      tj_onnx_val_t one = *rv;
      one.data = (const char*)rv->data + (size_t)i * tj_dtype_size(rv->dtype);
      int32_t a = (int32_t)axes[i % num_axes];
      roi[i < num_axes ? a : rank + a] = element_f64(&one);
    }
  }
  tj_value_t x = in(im, n, 0);
  int64_t dims[TJ_MAX_RANK];
  memcpy(dims, xv->dims, sizeof(int64_t) * (size_t)rank);
  for (int32_t a = 0; a < rank; ++a) {
    // An axis the reference leaves alone (scale ~1, same size, whole roi).
    if (fabs(scales[a] - 1) <= 1e-9 && sizes[a] == dims[a] &&
        (r.ctm != 5 ||
         (fabs(roi[a]) <= 1e-9 && fabs(roi[rank + a] - 1) <= 1e-9)))
      continue;
    TJ_RETURN_IF_ERROR(rs_axis(im, n, &r, &x, dtype, rank, dims, a, sizes[a],
                               scales[a], roi[a], roi[rank + a],
                               extrapolation));
  }
  return out(im, n, 0, x);
}

//===--- the table ---===//

#define UN(name, b) \
  { name, "", cv_unary, tj_graph_##b, NULL, NULL, 0 }
#define BIN(name, b) \
  { name, "", cv_binary, NULL, tj_graph_##b, NULL, 0 }
#define FN(name, attrs, p) \
  { name, attrs, cv_fn, NULL, NULL, NULL, p }
#define RED(name, r, p) \
  { name, "axes,keepdims,noop_with_empty_axes,", cv_reduce, NULL, NULL, r, p }
#define OP(name, attrs, f) \
  { name, attrs, f, NULL, NULL, NULL, 0 }

//===--- quantization (issue 17, quant2) ---===//

// A scale or zero point of one element given as 1-D [1] where x's axis
// is not 1: per tensor (opsets before 13 and many exporters write [1]).
static tj_value_t per_tensor_ok(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                int32_t i, int64_t axis_dim) {
  tj_value_t v = in(im, n, i);
  if (rank_of(n, i) == 1 && n->inputs[i]->dims[0] == 1 && axis_dim != 1)
    v = tj_graph_reshape(G, v, 0, NULL);
  return v;
}

static int64_t quant_axis_dim(tj_onnx_node_t* n, int64_t axis) {
  const int32_t r = rank_of(n, 0);
  if (axis < -r || axis >= r) return -1;
  return n->inputs[0]->dims[axis < 0 ? axis + r : axis];
}

// QuantizeLinear (opsets 10 to 23) onto quantize: axis, block_size,
// saturate (float8), output_dtype (without a zero point; u8 by default).
// int4 outputs need the importer's int4 tensors (not yet).
static tj_status_t cv_quantize_linear(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                      const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 3));
  TJ_RETURN_IF_ERROR(no_extra_outputs(im, n, 1));
  const int64_t axis = attr_i(n, "axis", 1);
  const int64_t ad = quant_axis_dim(n, axis);
  tj_dtype_t qd = TJ_DTYPE_U8;
  const int64_t od = attr_i(n, "output_dtype", 0);
  if (has_in(n, 2)) {
    qd = dtype_of(n, 2);
  } else if (od && !onnx_to_dtype(od, &qd)) {
    return fail(im, n, "output_dtype %s is not supported",
                tj_onnx_type_name((int32_t)od));
  }
  if (attr_i(n, "precision", 0))
    return fail(im, n, "precision (x / scale is computed in f32)");
  tj_quant_attrs_t a = {.dtype = qd,
                        .axis = (int32_t)axis,
                        .block_size = attr_i(n, "block_size", 0),
                        .no_saturate = attr_i(n, "saturate", 1) == 0};
  tj_value_t z = has_in(n, 2) ? per_tensor_ok(im, n, 2, ad) : tj_value_none();
  return out(
      im, n, 0,
      tj_graph_quantize(G, in(im, n, 0), per_tensor_ok(im, n, 1, ad), z, &a));
}

// DequantizeLinear (opsets 10 to 23) onto dequantize: the scale's dtype
// (output_dtype, when given, must name it).
static tj_status_t cv_dequantize_linear(tj_onnx_importer_t* im,
                                        tj_onnx_node_t* n,
                                        const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 3));
  TJ_RETURN_IF_ERROR(no_extra_outputs(im, n, 1));
  const int64_t axis = attr_i(n, "axis", 1);
  const int64_t ad = quant_axis_dim(n, axis);
  const int64_t od = attr_i(n, "output_dtype", 0);
  tj_dtype_t want;
  if (od && (!onnx_to_dtype(od, &want) || want != dtype_of(n, 1)))
    return fail(im, n, "output_dtype %s is not the scale's dtype",
                tj_onnx_type_name((int32_t)od));
  if (attr_i(n, "precision", 0))
    return fail(im, n, "precision (computed in f32)");
  tj_quant_attrs_t a = {.axis = (int32_t)axis,
                        .block_size = attr_i(n, "block_size", 0)};
  tj_value_t z = has_in(n, 2) ? per_tensor_ok(im, n, 2, ad) : tj_value_none();
  return out(
      im, n, 0,
      tj_graph_dequantize(G, in(im, n, 0), per_tensor_ok(im, n, 1, ad), z, &a));
}

// DynamicQuantizeLinear (opset 11): u8 with scale (max(x, 0) - min(x, 0))
// / 255 and zero point round(clip(-min / scale, 0, 255)), as ONNX's
// function body.
static tj_status_t cv_dynamic_quantize_linear(tj_onnx_importer_t* im,
                                              tj_onnx_node_t* n,
                                              const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  tj_value_t x = in(im, n, 0);
  const int32_t r = rank_of(n, 0);
  int32_t axes[TJ_MAX_RANK];
  for (int32_t i = 0; i < r; ++i) axes[i] = i;
  tj_value_t zero = scalar(im, TJ_DTYPE_F32, 0.0);
  tj_value_t mn = tj_graph_minimum(G, tj_graph_min(G, x, r, axes, false), zero);
  tj_value_t mx = tj_graph_maximum(G, tj_graph_max(G, x, r, axes, false), zero);
  tj_value_t s =
      tj_graph_div(G, tj_graph_sub(G, mx, mn), scalar(im, TJ_DTYPE_F32, 255));
  tj_value_t zf = tj_graph_sub(G, zero, tj_graph_div(G, mn, s));
  zf = tj_graph_minimum(G, tj_graph_maximum(G, zf, zero),
                        scalar(im, TJ_DTYPE_F32, 255));
  tj_value_t z = tj_graph_cast(G, tj_graph_round(G, zf), TJ_DTYPE_U8);
  tj_quant_attrs_t a = {.dtype = TJ_DTYPE_U8};
  TJ_RETURN_IF_ERROR(out(im, n, 0, tj_graph_quantize(G, x, s, z, &a)));
  TJ_RETURN_IF_ERROR(out(im, n, 1, s));
  return out(im, n, 2, z);
}

// com.microsoft MatMulNBits (ONNX Runtime's weight-only quantized
// matmul): Y = A @ dequantize(B)^T (+ bias). B [N, ceil(K / block_size),
// block_size * bits / 8] u8 (4 bits: two a byte, low nibble first; 8 bits:
// one), scales [N * blocks] of A's dtype, zero points packed u8 like B
// (default 8, or 128 for 8 bits). Onto dequantize (unsigned int4 or u8,
// blocked along K), transpose and matmul: the dequantize fuses into the
// GEMM's B producer. Refused by name: other bit widths, g_idx, float zero
// points.
static tj_status_t cv_matmul_nbits(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                   const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 3, 6));
  TJ_RETURN_IF_ERROR(no_extra_outputs(im, n, 1));
  const char* domain = n->proto->domain ? n->proto->domain : "";
  if (strcmp(domain, "com.microsoft") != 0)
    return fail(im, n, "MatMulNBits is an op of domain com.microsoft");
  const int64_t bits = attr_i(n, "bits", 4), k = attr_i(n, "K", 0);
  const int64_t nn = attr_i(n, "N", 0), bs = attr_i(n, "block_size", 0);
  if (bits != 4 && bits != 8)
    return fail(im, n, "bits = %lld (4 and 8 are supported)", (long long)bits);
  if (k < 1 || nn < 1 || bs < 16 || (bs & (bs - 1)) || k > INT32_MAX ||
      nn > INT32_MAX)
    return bad(im, n,
               "K and N (>= 1) and block_size (a power of two >= 16) are "
               "required");
  if (has_in(n, 4)) return fail(im, n, "g_idx (act-order) is not supported");
  const int64_t kb = (k + bs - 1) / bs, blob = bs * bits / 8;
  if (dtype_of(n, 1) != TJ_DTYPE_U8 || rank_of(n, 1) != 3 ||
      n->inputs[1]->dims[0] != nn || n->inputs[1]->dims[1] != kb ||
      n->inputs[1]->dims[2] != blob)
    return bad(im, n, "B must be u8 [N, ceil(K / block_size), %lld]",
               (long long)blob);
  tj_value_t b =
      tj_graph_reshape(G, in(im, n, 1), 2, (int64_t[]){nn, kb * blob});
  tj_value_t s = tj_graph_reshape(G, in(im, n, 2), 2, (int64_t[]){nn, kb});
  tj_value_t z;
  if (has_in(n, 3)) {
    if (dtype_of(n, 3) != TJ_DTYPE_U8)
      return fail(im, n, "zero points of a float dtype are not supported");
    const int64_t zb = bits == 4 ? (kb + 1) / 2 : kb;
    z = tj_graph_reshape(G, in(im, n, 3), 2, (int64_t[]){nn, zb});
    if (bits == 4) {
      tj_quant_attrs_t u = {.int4 = TJ_INT4_UNSIGNED, .odd = (kb & 1) != 0};
      z = tj_graph_cast(G,
                        tj_graph_dequantize(G, z, scalar(im, TJ_DTYPE_F32, 1),
                                            tj_value_none(), &u),
                        TJ_DTYPE_U8);
    }
  } else {
    z = tj_graph_full(G, TJ_DTYPE_U8, 2, (int64_t[]){nn, kb},
                      bits == 4 ? 8 : 128);
  }
  tj_quant_attrs_t a = {.axis = 1,
                        .block_size = bs,
                        .int4 = bits == 4 ? TJ_INT4_UNSIGNED : TJ_INT4_NONE};
  tj_value_t w = tj_graph_dequantize(G, b, s, z, &a);
  if (kb * bs != k) {
    const int64_t starts[2] = {0, 0}, stops[2] = {nn, k}, steps[2] = {1, 1};
    w = tj_graph_slice(G, w, starts, stops, steps);
  }
  static const int32_t kSwap[2] = {1, 0};
  tj_value_t y =
      tj_graph_matmul(G, in(im, n, 0), tj_graph_transpose(G, w, kSwap));
  if (has_in(n, 5)) y = tj_graph_add(G, y, in(im, n, 5));
  return out(im, n, 0, y);
}

static const op_entry_t kOps[] = {
    UN("Abs", abs),
    UN("Neg", neg),
    UN("Exp", exp),
    UN("Log", log),
    UN("Sqrt", sqrt),
    UN("Tanh", tanh),
    UN("Sigmoid", sigmoid),
    UN("Erf", erf),
    UN("Sin", sin),
    UN("Cos", cos),
    UN("Asin", asin),
    UN("Acos", acos),
    UN("Atan", atan),
    UN("Relu", relu),
    UN("Floor", floor),
    UN("Ceil", ceil),
    UN("Round", round),
    UN("Sign", sign),
    UN("Not", logical_not),
    UN("IsNaN", isnan),
    BIN("Add", add),
    BIN("Sub", sub),
    BIN("Mul", mul),
    BIN("Div", div),
    BIN("Equal", eq),
    BIN("Less", lt),
    BIN("LessOrEqual", le),
    BIN("Greater", gt),
    BIN("GreaterOrEqual", ge),
    BIN("And", logical_and),
    BIN("Or", logical_or),
    OP("Xor", "", cv_xor),
    OP("Pow", "", cv_pow),
    OP("Where", "", cv_where),
    {"Max", "", cv_variadic, NULL, tj_graph_maximum, NULL, 0},
    {"Min", "", cv_variadic, NULL, tj_graph_minimum, NULL, 0},
    {"Sum", "", cv_variadic, NULL, tj_graph_add, NULL, 0},
    {"Mean", "", cv_variadic, NULL, tj_graph_add, NULL, 1},
    FN("Reciprocal", "", FN_RECIPROCAL),
    FN("Softplus", "", FN_SOFTPLUS),
    FN("Softsign", "", FN_SOFTSIGN),
    FN("LeakyRelu", "alpha,", FN_LEAKY_RELU),
    FN("Elu", "alpha,", FN_ELU),
    FN("Selu", "alpha,gamma,", FN_SELU),
    FN("Celu", "alpha,", FN_CELU),
    FN("ThresholdedRelu", "alpha,", FN_THRESHOLDED_RELU),
    FN("HardSigmoid", "alpha,beta,", FN_HARD_SIGMOID),
    FN("HardSwish", "", FN_HARD_SWISH),
    FN("Mish", "", FN_MISH),
    FN("Tan", "", FN_TAN),
    FN("Sinh", "", FN_SINH),
    FN("Cosh", "", FN_COSH),
    FN("Asinh", "", FN_ASINH),
    FN("Acosh", "", FN_ACOSH),
    FN("Atanh", "", FN_ATANH),
    FN("Shrink", "bias,lambd,", FN_SHRINK),
    FN("Gelu", "approximate,", FN_GELU),
    FN("IsInf", "detect_negative,detect_positive,", FN_IS_INF),
    OP("PRelu", "", cv_prelu),
    OP("Clip", "", cv_clip),
    OP("Identity", "", cv_identity),
    OP("Dropout", "ratio,seed,", cv_dropout),
    {"Cast", "to,saturate,", cv_cast, NULL, NULL, NULL, 0},
    {"CastLike", "saturate,", cv_cast, NULL, NULL, NULL, 1},
    OP("MatMul", "", cv_matmul),
    OP("Gemm", "alpha,beta,transA,transB,", cv_gemm),
    OP("MatMulInteger", "", cv_matmul_integer),
    RED("ReduceSum", tj_graph_sum, RD_PLAIN),
    RED("ReduceMean", tj_graph_mean, RD_PLAIN),
    RED("ReduceMax", tj_graph_max, RD_PLAIN),
    RED("ReduceMin", tj_graph_min, RD_PLAIN),
    RED("ReduceProd", tj_graph_prod, RD_PLAIN),
    RED("ReduceSumSquare", NULL, RD_SUM_SQUARE),
    RED("ReduceL1", NULL, RD_L1),
    RED("ReduceL2", NULL, RD_L2),
    RED("ReduceLogSum", NULL, RD_LOG_SUM),
    RED("ReduceLogSumExp", NULL, RD_LOG_SUM_EXP),
    OP("ArgMax", "axis,keepdims,select_last_index,", cv_argmax),
    {"ArgMin", "axis,keepdims,select_last_index,", cv_argmax, NULL, NULL, NULL,
     1},
    {"Softmax", "axis,", cv_softmax, NULL, NULL, NULL, SM_SOFTMAX},
    {"LogSoftmax", "axis,", cv_softmax, NULL, NULL, NULL, SM_LOG_SOFTMAX},
    {"Hardmax", "axis,", cv_softmax, NULL, NULL, NULL, SM_HARDMAX},
    OP("BatchNormalization", "epsilon,momentum,training_mode,", cv_batch_norm),
    OP("InstanceNormalization", "epsilon,", cv_instance_norm),
    OP("MeanVarianceNormalization", "axes,", cv_mvn),
    OP("LayerNormalization", "axis,epsilon,stash_type,", cv_layer_norm),
    OP("RMSNormalization", "axis,epsilon,stash_type,", cv_rms_norm),
    OP("Attention",
       "is_causal,kv_num_heads,q_num_heads,qk_matmul_output_mode,scale,"
       "softcap,softmax_precision,",
       cv_attention),
    {"GlobalAveragePool", "", cv_global_pool, NULL, NULL, tj_graph_mean, 0},
    {"GlobalMaxPool", "", cv_global_pool, NULL, NULL, tj_graph_max, 1},
    {"GlobalLpPool", "p,", cv_global_pool, NULL, NULL, NULL, 2},
    {"Conv", "auto_pad,dilations,group,kernel_shape,pads,strides,", cv_conv,
     NULL, NULL, NULL, 0},
    {"ConvTranspose",
     "auto_pad,dilations,group,kernel_shape,output_padding,output_shape,pads,"
     "strides,",
     cv_conv, NULL, NULL, NULL, 1},
    {"MaxPool",
     "auto_pad,ceil_mode,dilations,kernel_shape,pads,storage_order,strides,",
     cv_pool, NULL, NULL, NULL, POOL_MAX},
    {"AveragePool",
     "auto_pad,ceil_mode,count_include_pad,dilations,kernel_shape,pads,"
     "strides,",
     cv_pool, NULL, NULL, NULL, POOL_AVG},
    {"LpPool", "auto_pad,ceil_mode,dilations,kernel_shape,p,pads,strides,",
     cv_pool, NULL, NULL, NULL, POOL_LP},
    OP("Mod", "fmod,", cv_mod),
    BIN("BitwiseAnd", bitwise_and),
    BIN("BitwiseOr", bitwise_or),
    BIN("BitwiseXor", bitwise_xor),
    UN("BitwiseNot", bitwise_not),
    OP("OneHot", "axis,", cv_one_hot),
    OP("Reshape", "allowzero,", cv_reshape),
    OP("Flatten", "axis,", cv_flatten),
    OP("Transpose", "perm,", cv_transpose),
    OP("Squeeze", "axes,", cv_squeeze),
    OP("Unsqueeze", "axes,", cv_unsqueeze),
    OP("Concat", "axis,", cv_concat),
    OP("Shape", "start,end,", cv_shape),
    OP("Size", "", cv_size),
    OP("Constant",
       "value,value_float,value_floats,value_int,value_ints,value_string,"
       "value_strings,sparse_value,",
       cv_constant),
    OP("ConstantOfShape", "value,", cv_constant_of_shape),
    OP("Expand", "", cv_expand),
    OP("Slice", "", cv_slice),
    OP("Pad", "mode,", cv_pad),
    OP("Gather", "axis,", cv_gather),
    OP("Tile", "", cv_tile),
    OP("Range", "", cv_range),
    OP("EyeLike", "dtype,k,", cv_eye_like),
    OP("Trilu", "upper,", cv_trilu),
    {"DepthToSpace", "blocksize,mode,", cv_depth_space, NULL, NULL, NULL, 0},
    {"SpaceToDepth", "blocksize,", cv_depth_space, NULL, NULL, NULL, 1},
    OP("Split", "axis,num_outputs,split,", cv_split),
    OP("NegativeLogLikelihoodLoss", "ignore_index,reduction,", cv_nll_loss),
    OP("SoftmaxCrossEntropyLoss", "ignore_index,reduction,",
       cv_softmax_ce_loss),
    // ops (issue 15)
    OP("GatherElements", "axis,", cv_gather_elements),
    OP("GatherND", "batch_dims,", cv_gather_nd),
    // quant2 (issue 17)
    OP("QuantizeLinear", "axis,block_size,output_dtype,precision,saturate,",
       cv_quantize_linear),
    OP("DequantizeLinear", "axis,block_size,output_dtype,precision,",
       cv_dequantize_linear),
    OP("DynamicQuantizeLinear", "", cv_dynamic_quantize_linear),
    OP("MatMulNBits", "K,N,accuracy_level,bits,block_size,", cv_matmul_nbits),
    // dtypes (issue 15)
    OP("BitShift", "direction,", cv_bit_shift),
    OP("Resize",
       "antialias,axes,coordinate_transformation_mode,cubic_coeff_a,"
       "exclude_outside,extrapolation_value,keep_aspect_ratio_policy,mode,"
       "nearest_mode,",
       cv_resize),
    // ops3 (issue 15)
    {"CumSum", "exclusive,reverse,", cv_cumulative, NULL, NULL, NULL, 0},
    {"CumProd", "exclusive,reverse,", cv_cumulative, NULL, NULL, NULL, 1},
    // topk (issue 15)
    OP("TopK", "axis,largest,sorted,", cv_topk),
    OP("LpNormalization", "axis,p,", cv_lp_normalization),
    OP("Einsum", "equation,", cv_einsum),
};

// ONNX ops with no libtensorjit op to map onto yet, and the op each needs.
static const char* const kWaiting[][2] = {
    {"ScatterElements", "scatter"},
    {"Scatter", "scatter"},
    {"ScatterND", "scatter_nd"},
    {"Upsample", "resize"},
    {"LSTM", "lstm"},
    {"GRU", "gru"},
    {"RNN", "rnn"},
    {"If", "control flow"},
    {"Loop", "control flow"},
    {"Scan", "control flow"},
    {"NonZero", "nonzero (a data-dependent shape)"},
    {"Unique", "unique (a data-dependent shape)"},
    {"Compress", "compress (a data-dependent shape)"},
    {"NonMaxSuppression", "non_max_suppression"},
};

// Ops the converters map in opsets below TJ_ONNX_MIN_OPSET too: the first
// opset whose definition of the op the converter follows (ONNX models
// import the newest opset their ops need, so a model of only these ops may
// say opset 7). Any other op needs TJ_ONNX_MIN_OPSET.
static const struct {
  const char* op;
  int32_t since;
} kSince[] = {
    {"Abs", 6},
    {"Neg", 6},
    {"Exp", 6},
    {"Log", 6},
    {"Sqrt", 6},
    {"Tanh", 6},
    {"Sigmoid", 6},
    {"Relu", 6},
    {"Floor", 6},
    {"Ceil", 6},
    {"Reciprocal", 6},
    {"Sin", 7},
    {"Cos", 7},
    {"Asin", 7},
    {"LpNormalization", 1},
    {"Acos", 7},
    {"Atan", 7},
    {"Tan", 7},
    {"Sinh", 9},
    {"Cosh", 9},
    {"Asinh", 9},
    {"Acosh", 9},
    {"Atanh", 9},
    {"Not", 1},
    {"And", 7},
    {"Or", 7},
    {"Xor", 7},
    {"Add", 7},
    {"Sub", 7},
    {"Mul", 7},
    {"Div", 7},
    {"Elu", 6},
    {"Selu", 6},
    {"HardSigmoid", 6},
    {"LeakyRelu", 6},
    {"ThresholdedRelu", 10},
    {"Softplus", 1},
    {"Softsign", 1},
    {"Shrink", 9},
    {"EyeLike", 9},
    {"ConstantOfShape", 9},
    {"IsInf", 10},
    {"IsNaN", 9},
    {"InstanceNormalization", 6},
    {"GlobalAveragePool", 1},
    {"GlobalMaxPool", 1},
    {"ReduceLogSum", 1},
    {"ReduceSumSquare", 1},
    {"ReduceL1", 1},
    {"ReduceL2", 1},
    {"ReduceLogSumExp", 1},
    {"ReduceMean", 1},
    {"ReduceMax", 1},
    {"ReduceMin", 1},
    {"ReduceProd", 1},
    {"MatMul", 9},
    {"MatMulInteger", 10},
    {"Sign", 9},
    {"Erf", 9},
    {"Where", 9},
    {"Identity", 1},
    {"Transpose", 1},
    {"Shape", 1},
    {"Size", 1},
};

static int64_t since_opset(const char* op) {
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kSince); ++i)
    if (strcmp(kSince[i].op, op) == 0) return kSince[i].since;
  return TJ_ONNX_MIN_OPSET;
}

static const op_entry_t* find_op(const char* op) {
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kOps); ++i)
    if (strcmp(kOps[i].op, op) == 0) return &kOps[i];
  return NULL;
}

bool tj_onnx_op_known(const char* op_type) { return find_op(op_type) != NULL; }

tj_status_t tj_onnx_convert_node(tj_onnx_importer_t* im, tj_onnx_node_t* n) {
  const op_entry_t* e = find_op(n->proto->op_type);
  if (!e) {
    for (size_t i = 0; i < TJ_ARRAY_SIZE(kWaiting); ++i) {
      if (strcmp(kWaiting[i][0], n->proto->op_type) == 0)
        return fail(im, n, "unsupported op: libtensorjit has no %s op",
                    kWaiting[i][1]);
    }
    return fail(im, n, "unsupported op");
  }
  if (im->opset < since_opset(e->op))
    return fail(im, n, "the importer maps %s from opset %lld", e->op,
                (long long)since_opset(e->op));
  for (size_t i = 0; i < n->proto->n_attribute; ++i) {
    const char* name = n->proto->attribute[i]->name;
    if (!name || !name[0]) return bad(im, n, "an attribute has no name");
    const char* hit = strstr(e->attrs, name);
    size_t len = strlen(name);
    bool ok = false;
    while (hit && !ok) {
      ok = (hit == e->attrs || hit[-1] == ',') && hit[len] == ',';
      hit = strstr(hit + 1, name);
    }
    if (!ok) return fail(im, n, "unsupported attribute %s", name);
  }
  for (int32_t i = 0; i < n->num_inputs; ++i) {
    if (im->graph == im->main_graph && n->inputs[i] && n->inputs[i]->symbolic &&
        strcmp(e->op, "Reshape") && strcmp(e->op, "Expand") &&
        strcmp(e->op, "ConstantOfShape") && strcmp(e->op, "Identity") &&
        strcmp(e->op, "Cast"))
      return fail(im, n, "input %d is a shape with symbolic dims", (int)i);
  }
  return e->fn(im, n, e);
}
