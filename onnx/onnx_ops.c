// The ONNX importer's op converters: one function per ONNX op (or family),
// each mapping the node onto libtensorjit's builders exactly, and the table
// that names each op's attributes (any other attribute is an error).

#include <math.h>
#include <string.h>

#include "lib/dtype.h"
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

// Optional, OptionalHasElement and OptionalGetElement (onnxseq, issue 15)
// on values known at import: an optional holding a tensor is that tensor,
// an empty one a value marked none. Optional and sequence graph inputs are
// not read (tj_onnx_import refuses them by name).
static tj_status_t cv_optional(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                               const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 0, 1));
  if (has_in(n, 0)) return cv_identity(im, n, e);
  if (!attr(n, "type"))
    return bad(im, n, "an empty Optional needs its type attribute");
  if (!has_out(n, 0)) return NULL;
  tj_onnx_val_t val;
  memset(&val, 0, sizeof val);
  val.none = true;
  return tj_onnx_define(im, n->proto->output[0], &val);
}

static tj_status_t cv_optional_has_element(tj_onnx_importer_t* im,
                                           tj_onnx_node_t* n,
                                           const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 0, 1));
  uint8_t has = has_in(n, 0) && !n->inputs[0]->none;
  return out_known(im, n, 0, TJ_DTYPE_BOOL, 0, NULL, &has, 1, false);
}

static tj_status_t cv_optional_get_element(tj_onnx_importer_t* im,
                                           tj_onnx_node_t* n,
                                           const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  if (n->inputs[0]->none)
    return bad(im, n, "input 0 (\"%s\") is an empty optional",
               n->proto->input[0]);
  return cv_identity(im, n, e);
}

static tj_status_t cv_dropout(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                              const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 3));
  // A ratio known to be 0 drops nothing: the identity in either mode, so
  // training_mode may then be anything (even fed at run time).
  const tj_onnx_val_t* r = has_in(n, 1) ? n->inputs[1] : NULL;
  bool keep_all = r && r->data && numel_of_val(r) == 1 && is_float(r->dtype) &&
                  element_f64(r) == 0;
  if (has_in(n, 2) && !keep_all) {
    tj_onnx_val_t* t = n->inputs[2];
    if (!t->data || t->dtype != TJ_DTYPE_BOOL || t->rank != 0)
      return fail(im, n, "training_mode must be a constant bool scalar");
    if (*(const uint8_t*)t->data)
      return fail(im, n,
                  "training_mode = true with a ratio not known to be 0 draws "
                  "a random mask (random ops are not supported)");
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
  // round_mode (opset 25) applies to float8e8m0 only; its cast rounds up.
  if (to == TJ_DTYPE_F8E8M0 && !attr_s_is(n, "round_mode", "up", "up"))
    return fail(im, n,
                "round_mode other than \"up\" is not supported: casts to "
                "float8e8m0 round up");
  tj_onnx_val_t* x = n->inputs[0];
  if (x->symbolic) {
    if (to != TJ_DTYPE_I64) return fail(im, n, "cast of a symbolic shape");
    return cv_identity(im, n, e);
  }
  tj_value_t y = tj_graph_cast(G, in(im, n, 0), to);
  double bound;
  bool inclusive;
  if (attr_i(n, "saturate", 1) == 0 &&
      tj_narrow_overflow_bound(to, &bound, &inclusive)) {
    // saturate=0: what rounds past the largest finite (or is infinite)
    // becomes the format's infinity or NaN instead of +-max. The test runs
    // in f32 (f64 for f64), where the bound is exact and rounding an
    // integer or a half to it is monotonic.
    tj_dtype_t xd = dtype_of(n, 0);
    tj_dtype_t cd = xd == TJ_DTYPE_F64 ? TJ_DTYPE_F64 : TJ_DTYPE_F32;
    tj_value_t xc =
        xd == cd ? in(im, n, 0) : tj_graph_cast(G, in(im, n, 0), cd);
    tj_value_t hi = scalar(im, cd, bound), lo = scalar(im, cd, -bound);
    tj_value_t over =
        inclusive ? tj_graph_ge(G, xc, hi) : tj_graph_gt(G, xc, hi);
    tj_value_t under =
        inclusive ? tj_graph_le(G, xc, lo) : tj_graph_lt(G, xc, lo);
    uint8_t pos = tj_f64_to_narrow(to, (double)INFINITY, false);
    uint8_t neg = tj_f64_to_narrow(to, -(double)INFINITY, false);
    y = tj_graph_where(
        G, over, tj_graph_constant(G, to, 0, NULL, &pos, 1),
        tj_graph_where(G, under, tj_graph_constant(G, to, 0, NULL, &neg, 1),
                       y));
  }
  return out(im, n, 0, y);
}

// BitCast (opset 26): the same bits read as |to|, of the same size.
static tj_status_t cv_bitcast(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                              const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  const Onnx__AttributeProto* a = attr(n, "to");
  if (!a || !a->has_i) return bad(im, n, "attribute to is required");
  tj_dtype_t to;
  if (!onnx_to_dtype(a->i, &to))
    return fail(im, n, "bitcast to dtype %s is not supported",
                tj_onnx_type_name((int32_t)a->i));
  return out(im, n, 0, tj_graph_bitcast(G, in(im, n, 0), to));
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
  bool training = attr_i(n, "training_mode", 0) != 0;
  TJ_RETURN_IF_ERROR(no_extra_outputs(im, n, training ? 3 : 1));
  int32_t rank = rank_of(n, 0);
  if (rank < 2) return bad(im, n, "the input has rank %d", (int)rank);
  tj_dtype_t d = dtype_of(n, 0);
  tj_value_t x = in(im, n, 0);
  tj_value_t scale = per_channel(im, in(im, n, 1), rank);
  tj_value_t bias = per_channel(im, in(im, n, 2), rank);
  tj_value_t mean = per_channel(im, in(im, n, 3), rank);
  tj_value_t var = per_channel(im, in(im, n, 4), rank);
  if (training) {
    // Normalized by the batch's statistics (over every axis but 1, the
    // variance biased); outputs 1 and 2 are the running mean and variance
    // moved toward them: r * momentum + batch * (1 - momentum).
    // The statistics over one axis: x as [C, everything else] (a
    // reduction over several axes is no native kernel when x is also
    // used whole).
    int32_t perm[TJ_MAX_RANK] = {1, 0};
    for (int32_t a = 2; a < rank; ++a) perm[a] = a;
    const tj_onnx_val_t* xv = n->inputs[0];
    int64_t c = xv->dims[1];
    const int64_t flat[2] = {
        c,
        tj_graph_dim_mul(G, xv->dims[0], dims_product(im, xv->dims, 2, rank))};
    tj_value_t xt =
        tj_graph_reshape(G, tj_graph_transpose(G, x, perm), 2, flat);
    int32_t last = 1;
    tj_value_t m2 = tj_graph_mean(G, xt, 1, &last, true);
    tj_value_t c2 = tj_graph_sub(G, xt, m2);
    tj_value_t v2 = tj_graph_mean(G, tj_graph_mul(G, c2, c2), 1, &last, true);
    tj_value_t bm = per_channel(im, tj_graph_reshape(G, m2, 1, &c), rank);
    tj_value_t bv = per_channel(im, tj_graph_reshape(G, v2, 1, &c), rank);
    double momentum = attr_f(n, "momentum", 0.9);
    const int64_t* cdims = n->inputs[3]->dims;
    int32_t crank = rank_of(n, 3);
    tj_value_t keep = scalar(im, d, momentum),
               take = scalar(im, d, 1 - momentum);
    tj_value_t run_mean = tj_graph_add(
        G, tj_graph_mul(G, in(im, n, 3), keep),
        tj_graph_mul(G, tj_graph_reshape(G, bm, crank, cdims), take));
    tj_value_t run_var = tj_graph_add(
        G, tj_graph_mul(G, in(im, n, 4), keep),
        tj_graph_mul(G, tj_graph_reshape(G, bv, crank, cdims), take));
    TJ_RETURN_IF_ERROR(out(im, n, 1, run_mean));
    TJ_RETURN_IF_ERROR(out(im, n, 2, run_var));
    mean = bm;
    var = bv;
  }
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

// Attention (opsets 23 to 25). Q, K, V as [B, H, S, D], or as [B, S, H*D]
// with q_num_heads and kv_num_heads; past_key/past_value ([B, Hkv, P, D])
// are concatenated before K and V along the sequence axis and are the
// present_key/present_value outputs. Every mask ONNX composes (attn_mask,
// bool or added, shorter than the keys and padded; is_causal, aligned at
// the bottom right by the offset P, or per batch nonpad_kv_seqlen[b] - Sq;
// the sliding window left_window_size/right_window_size around the same
// offset; keys j >= nonpad_kv_seqlen[b]) is built from iota comparisons
// into one mask, so the whole node stays one attention op (fused into the
// flash kernel on x86). softcap (c * tanh(s / c) before the mask), the
// qk_matmul_output output and a softmax_precision narrower than the
// compute type change the scores themselves: those nodes decompose into
// matmul, softmax and elementwise ops instead, with ONNX's reference
// semantics (modes 0 and 1 give the softcapped scores, 2 adds the mask, 3
// the probabilities; a row with every key masked gives 0).

typedef struct attn_t {
  bool causal, has_nonpad, has_past;
  int64_t left, right;  // -1: unbounded
  int64_t sq, sk, past;
  tj_value_t nonpad;  // [B] i64
} attn_t;

// The bool mask of the keys each query may see by causality, the sliding
// window and nonpad_kv_seqlen: [Sq, Sk], or [B, 1, Sq, Sk] when it depends
// on the batch (nonpad_kv_seqlen). None when nothing restricts the keys.
static tj_value_t attn_structure(tj_onnx_importer_t* im, const attn_t* a) {
  bool window = a->left >= 0 || a->right >= 0;
  if (!a->causal && !window && !a->has_nonpad) return tj_value_none();
  const int64_t dims[2] = {a->sq, a->sk};
  tj_value_t i = tj_graph_iota(G, TJ_DTYPE_I64, 2, dims, 0);
  tj_value_t j = tj_graph_iota(G, TJ_DTYPE_I64, 2, dims, 1);
  tj_value_t nonpad = tj_value_none();
  if (a->has_nonpad) {
    int64_t bdims[TJ_MAX_RANK];
    tj_graph_value_dims(G, a->nonpad, bdims);
    const int64_t shape[3] = {bdims[0], 1, 1};
    nonpad = tj_graph_reshape(G, tj_graph_cast(G, a->nonpad, TJ_DTYPE_I64), 3,
                              shape);
  }
  // diff = (offset + i) - j: the query's absolute position minus the key's.
  // The offset is the count of valid keys before the query block: P with a
  // past, nonpad_kv_seqlen[b] - Sq with an external cache, else 0.
  tj_value_t diff = tj_graph_sub(G, i, j);
  if (a->has_nonpad)
    diff = tj_graph_add(G, diff,
                        tj_graph_sub(G, nonpad, tj_onnx_dim_value(G, a->sq)));
  else if (a->has_past)
    diff = tj_graph_add(G, diff, tj_onnx_dim_value(G, a->past));
  tj_value_t allowed = tj_value_none();
  tj_value_t zero = scalar(im, TJ_DTYPE_I64, 0);
  tj_value_t conds[4];
  int32_t count = 0;
  if (a->causal) conds[count++] = tj_graph_ge(G, diff, zero);
  if (a->left >= 0)
    conds[count++] =
        tj_graph_le(G, diff, scalar(im, TJ_DTYPE_I64, (double)a->left));
  if (a->right >= 0)
    conds[count++] =
        tj_graph_ge(G, diff, scalar(im, TJ_DTYPE_I64, -(double)a->right));
  if (a->has_nonpad) conds[count++] = tj_graph_lt(G, j, nonpad);
  for (int32_t c = 0; c < count; ++c)
    allowed = c ? tj_graph_logical_and(G, allowed, conds[c]) : conds[c];
  if (tj_graph_value_rank(G, allowed) == 3) {
    int64_t d3[TJ_MAX_RANK];
    tj_graph_value_dims(G, allowed, d3);
    const int64_t d4[4] = {d3[0], 1, d3[1], d3[2]};
    allowed = tj_graph_reshape(G, allowed, 4, d4);
  }
  return allowed;
}

// [B, Hkv*G, S, X] -> [B, Hkv, G, S, X] (G > 1), or [B, Hkv, 1, S, X]
// (G = 1, for K and V against grouped queries).
static tj_value_t split_heads(tj_onnx_importer_t* im, tj_value_t x, int64_t hkv,
                              int64_t group) {
  int64_t d[TJ_MAX_RANK];
  tj_graph_value_dims(G, x, d);
  const int64_t shape[5] = {d[0], hkv, group, d[2], d[3]};
  return tj_graph_reshape(G, x, 5, shape);
}

static tj_status_t cv_attention(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 3, 7));
  TJ_RETURN_IF_ERROR(no_extra_outputs(im, n, 4));
  int32_t rank = rank_of(n, 0);
  if (rank != 3 && rank != 4)
    return bad(im, n, "Q has rank %d (3 or 4)", (int)rank);
  if (rank_of(n, 1) != rank || rank_of(n, 2) != rank)
    return bad(im, n, "Q, K and V differ in rank");
  tj_dtype_t dtype = dtype_of(n, 0);
  if (!is_float(dtype))
    return bad(im, n, "Q is %s (a float type)", tj_dtype_name(dtype));
  attn_t a;
  memset(&a, 0, sizeof a);
  a.causal = attr_i(n, "is_causal", 0) != 0;
  a.left = attr_i(n, "left_window_size", -1);
  a.right = attr_i(n, "right_window_size", -1);
  if (a.left < -1 || a.right < -1)
    return bad(im, n,
               "left_window_size %lld, right_window_size %lld (each "
               "-1 or >= 0)",
               (long long)a.left, (long long)a.right);
  double softcap = attr_f(n, "softcap", 0);
  if (!(softcap >= 0) || isinf(softcap))
    return bad(im, n, "softcap %g (0, none, or a finite positive cap)",
               softcap);
  int64_t mode = attr_i(n, "qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3)
    return bad(im, n, "qk_matmul_output_mode %lld (0 to 3)", (long long)mode);
  tj_dtype_t compute =
      dtype == TJ_DTYPE_F16 || dtype == TJ_DTYPE_BF16 ? TJ_DTYPE_F32 : dtype;
  tj_dtype_t sm_dtype = compute;
  if (attr(n, "softmax_precision")) {
    int64_t p = attr_i(n, "softmax_precision", 1);
    if (!onnx_to_dtype(p, &sm_dtype) || !is_float(sm_dtype))
      return fail(im, n, "softmax_precision %lld (a float type)", (long long)p);
  }
  if (has_in(n, 4) != has_in(n, 5))
    return bad(im, n, "past_key and past_value go together");
  a.has_past = has_in(n, 4);
  a.has_nonpad = has_in(n, 6);
  if (a.has_past && a.has_nonpad)
    return bad(im, n, "nonpad_kv_seqlen with past_key and past_value");
  tj_value_t q = in(im, n, 0), k = in(im, n, 1), v = in(im, n, 2);
  static const int32_t kPerm[4] = {0, 2, 1, 3};  // its own inverse
  int64_t qh = attr_i(n, "q_num_heads", 0), kvh = attr_i(n, "kv_num_heads", 0);
  if (rank == 3) {
    // [B, S, H*D] -> [B, H, S, D].
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
  } else {
    const int64_t* qd = n->inputs[0]->dims;
    const int64_t* kd = n->inputs[1]->dims;
    if ((qh && qh != qd[1]) || (kvh && kvh != kd[1]))
      return bad(im, n,
                 "q_num_heads %lld and kv_num_heads %lld disagree "
                 "with Q's and K's head dims",
                 (long long)qh, (long long)kvh);
  }
  if (a.has_past) {
    for (int32_t i = 4; i < 6; ++i) {
      if (rank_of(n, i) != 4)
        return bad(im, n, "input %d (%s) has rank %d (4)", (int)i,
                   i == 4 ? "past_key" : "past_value", (int)rank_of(n, i));
    }
    a.past = n->inputs[4]->dims[2];
    if (n->inputs[5]->dims[2] != a.past)
      return bad(im, n, "past_key and past_value differ in length");
    tj_value_t kk[2] = {in(im, n, 4), k}, vv[2] = {in(im, n, 5), v};
    k = tj_graph_concat(G, 2, kk, 2);
    v = tj_graph_concat(G, 2, vv, 2);
  }
  TJ_RETURN_IF_ERROR(out(im, n, 1, k));
  TJ_RETURN_IF_ERROR(out(im, n, 2, v));
  if (a.has_nonpad) {
    if (rank_of(n, 6) != 1 ||
        !(dtype_of(n, 6) == TJ_DTYPE_I64 || dtype_of(n, 6) == TJ_DTYPE_I32))
      return bad(im, n, "nonpad_kv_seqlen must be a 1-D int64 tensor");
    a.nonpad = in(im, n, 6);
  }
  int64_t qd[TJ_MAX_RANK], kd[TJ_MAX_RANK], vd[TJ_MAX_RANK];
  tj_graph_value_dims(G, q, qd);
  tj_graph_value_dims(G, k, kd);
  tj_graph_value_dims(G, v, vd);
  a.sq = qd[2];
  a.sk = kd[2];
  // attn_mask: its last dim may be shorter than the keys: padded with
  // false or -inf.
  tj_value_t mask = has_in(n, 3) ? in(im, n, 3) : tj_value_none();
  bool bool_mask = false;
  if (has_in(n, 3)) {
    const tj_onnx_val_t* mv = n->inputs[3];
    bool_mask = mv->dtype == TJ_DTYPE_BOOL;
    if (!bool_mask && !is_float(mv->dtype))
      return bad(im, n, "attn_mask is %s (bool or float)",
                 tj_dtype_name(mv->dtype));
    if (mv->rank < 1) return bad(im, n, "attn_mask is a scalar");
    int64_t last = mv->dims[mv->rank - 1];
    if (last != a.sk) {
      if (last < 0 || a.sk < 0)
        return fail(im, n,
                    "attn_mask's last dim and the key count differ "
                    "symbolically (padding it needs both constant)");
      if (last > a.sk)
        return bad(im, n, "attn_mask has %lld keys, more than the %lld keys",
                   (long long)last, (long long)a.sk);
      int64_t lo[TJ_MAX_RANK] = {0}, hi[TJ_MAX_RANK] = {0};
      hi[mv->rank - 1] = a.sk - last;
      mask = tj_graph_pad(G, mask, lo, hi, bool_mask ? 0.0 : -INFINITY);
    }
    if (!bool_mask) mask = tj_graph_cast(G, mask, compute);
  }
  bool has_scale = attr(n, "scale") != NULL;
  double scale = attr_f(n, "scale", 0);
  if (!isfinite(scale)) return bad(im, n, "scale %g", scale);
  bool decompose = softcap > 0 || has_out(n, 3) || sm_dtype != compute ||
                   (has_scale && scale == 0);
  // Top-left causality with no cache is the attention op's own flag.
  bool plain_causal = a.causal && !a.has_nonpad && a.left < 0 && a.right < 0 &&
                      (!a.has_past || a.past == 0);
  attn_t structural = a;
  if (plain_causal && !decompose) structural.causal = false;
  tj_value_t allowed = attn_structure(im, &structural);
  if (!decompose) {
    if (!tj_value_is_none(allowed)) {
      if (tj_value_is_none(mask))
        mask = allowed;
      else if (bool_mask)
        mask = tj_graph_logical_and(G, mask, allowed);
      else
        mask = tj_graph_add(G, mask,
                            tj_graph_where(G, allowed, scalar(im, compute, 0),
                                           scalar(im, compute, -INFINITY)));
    }
    if (!tj_value_is_none(mask) &&
        tj_graph_value_dtype(G, mask) != TJ_DTYPE_BOOL)
      mask = tj_graph_cast(G, mask, dtype);
    tj_value_t y = tj_graph_attention(G, q, k, v, mask, scale, plain_causal);
    if (rank == 3) {
      int64_t yd[TJ_MAX_RANK];
      tj_graph_value_dims(G, y, yd);
      int64_t width = tj_graph_dim_mul(G, yd[1], yd[3]);
      int64_t shape[3] = {yd[0], yd[2], width};
      y = tj_graph_reshape(G, tj_graph_transpose(G, y, kPerm), 3, shape);
    }
    return out(im, n, 0, y);
  }
  // Decomposed: s = scale * q k^T (softcapped), + bias, softmax, p v; in f32
  // for f16 and bf16. Grouped queries multiply [B, Hkv, G, Sq, D] by
  // [B, Hkv, 1, D, Sk], so K and V are never repeated.
  int64_t h = qd[1], hkv = kd[1];
  if (h < 0 || hkv <= 0 || h % hkv || vd[1] != hkv)
    return bad(im, n,
               "%lld query heads and %lld/%lld key/value heads (a "
               "multiple of them)",
               (long long)h, (long long)hkv, (long long)vd[1]);
  if (!has_scale) scale = qd[3] > 0 ? 1.0 / sqrt((double)qd[3]) : 1.0;
  int64_t group = h / hkv;
  tj_value_t qc = tj_graph_cast(G, q, compute);
  tj_value_t kc = tj_graph_cast(G, k, compute);
  tj_value_t vc = tj_graph_cast(G, v, compute);
  static const int32_t kSwapLast[5] = {0, 1, 2, 4, 3};
  tj_value_t kt = tj_graph_transpose(G, split_heads(im, kc, hkv, 1), kSwapLast);
  tj_value_t s = tj_graph_matmul(G, split_heads(im, qc, hkv, group), kt);
  int64_t sd[TJ_MAX_RANK];
  tj_graph_value_dims(G, s, sd);
  const int64_t sdims[4] = {sd[0], h, a.sq, a.sk};
  s = tj_graph_reshape(G, s, 4, sdims);
  s = tj_graph_mul(G, s, scalar(im, compute, scale));
  if (softcap > 0)
    s = tj_graph_mul(
        G, tj_graph_tanh(G, tj_graph_div(G, s, scalar(im, compute, softcap))),
        scalar(im, compute, softcap));
  tj_value_t bias = tj_value_none();
  if (!tj_value_is_none(mask) && !bool_mask) bias = mask;
  tj_value_t keep = bool_mask ? mask : tj_value_none();
  if (!tj_value_is_none(allowed))
    keep = tj_value_is_none(keep) ? allowed
                                  : tj_graph_logical_and(G, keep, allowed);
  if (!tj_value_is_none(keep)) {
    tj_value_t b = tj_graph_where(G, keep, scalar(im, compute, 0),
                                  scalar(im, compute, -INFINITY));
    bias = tj_value_is_none(bias) ? b : tj_graph_add(G, bias, b);
  }
  tj_value_t sb = tj_value_is_none(bias) ? s : tj_graph_add(G, s, bias);
  tj_value_t p = tj_graph_cast(
      G, tj_graph_softmax(G, tj_graph_cast(G, sb, sm_dtype), 3), compute);
  if (!tj_value_is_none(bias)) {
    // A row whose bias is -inf at every key gives 0, decided on the bias
    // (its scores may be NaN).
    int32_t last = tj_graph_value_rank(G, bias) - 1;
    tj_value_t dead = tj_graph_eq(G, tj_graph_max(G, bias, 1, &last, true),
                                  scalar(im, compute, -INFINITY));
    p = tj_graph_where(G, dead, scalar(im, compute, 0), p);
  }
  tj_value_t qk = mode == 3 ? p : mode == 2 ? sb : s;
  TJ_RETURN_IF_ERROR(out(im, n, 3, tj_graph_cast(G, qk, dtype)));
  tj_value_t y = tj_graph_matmul(G, split_heads(im, p, hkv, group),
                                 split_heads(im, vc, hkv, 1));
  int64_t yd[TJ_MAX_RANK];
  tj_graph_value_dims(G, y, yd);
  if (rank == 3) {
    // [B, Hkv, G, Sq, Dv] -> [B, Sq, H*Dv].
    static const int32_t kToRows[5] = {0, 3, 1, 2, 4};
    int64_t width = tj_graph_dim_mul(G, h, yd[4]);
    const int64_t shape[3] = {yd[0], a.sq, width};
    y = tj_graph_reshape(G, tj_graph_transpose(G, y, kToRows), 3, shape);
  } else {
    const int64_t shape[4] = {yd[0], h, a.sq, yd[4]};
    y = tj_graph_reshape(G, y, 4, shape);
  }
  return out(im, n, 0, tj_graph_cast(G, y, dtype));
}

// RotaryEmbedding (opset 23): x is [B, H, S, D], or [B, S, H*D] with
// num_heads; the first rotary_embedding_dim (R, default D) entries of each
// head rotate by the angles whose cos and sin are cos_cache/sin_cache
// ([B, S, R/2], or [max_position, R/2] gathered at position_ids [B, S]):
// pairs (x[k], x[k + R/2]), or (x[2k], x[2k+1]) when interleaved, become
// (c x1 - s x2, s x1 + c x2); the rest pass through.
static tj_status_t cv_rotary(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 3, 4));
  const tj_onnx_val_t* xv = n->inputs[0];
  int32_t rank = xv->rank;
  if (rank != 3 && rank != 4)
    return bad(im, n, "the input has rank %d (3 or 4)", (int)rank);
  if (!is_float(xv->dtype))
    return bad(im, n, "the input is %s (a float type)",
               tj_dtype_name(xv->dtype));
  if (dtype_of(n, 1) != xv->dtype || dtype_of(n, 2) != xv->dtype)
    return bad(im, n, "cos_cache and sin_cache must be of the input's type");
  int64_t heads = attr_i(n, "num_heads", 0);
  bool interleaved = attr_i(n, "interleaved", 0) != 0;
  tj_value_t x = in(im, n, 0);
  int64_t dims[4];
  if (rank == 3) {
    // [B, S, H*D] -> [B, S, H, D].
    int64_t hidden = xv->dims[2];
    if (heads <= 0)
      return bad(im, n, "a 3-D input needs num_heads (got %lld)",
                 (long long)heads);
    if (hidden < 0 || hidden % heads)
      return bad(im, n, "hidden size %lld is not a multiple of num_heads %lld",
                 (long long)hidden, (long long)heads);
    const int64_t shape[4] = {xv->dims[0], xv->dims[1], heads, hidden / heads};
    memcpy(dims, shape, sizeof shape);
    x = tj_graph_reshape(G, x, 4, dims);
  } else {
    memcpy(dims, xv->dims, sizeof dims);
    if (heads && heads != dims[1])
      return bad(im, n, "num_heads %lld but the input has %lld heads",
                 (long long)heads, (long long)dims[1]);
  }
  int64_t d = dims[3];
  if (d < 0) return fail(im, n, "the head size is symbolic");
  int64_t rd = attr_i(n, "rotary_embedding_dim", 0);
  if (rd == 0) rd = d;
  if (rd < 0 || rd > d || rd % 2)
    return bad(im, n,
               "rotary_embedding_dim %lld (even, at most the head "
               "size %lld)",
               (long long)rd, (long long)d);
  int64_t half = rd / 2;
  tj_value_t c = in(im, n, 1), s = in(im, n, 2);
  if (has_in(n, 3)) {
    // position_ids [B, S] index the caches' first axis.
    if (rank_of(n, 1) != 2 || rank_of(n, 2) != 2)
      return bad(im, n, "with position_ids the caches must be 2-D");
    tj_value_t pos = in(im, n, 3);
    c = tj_graph_gather(G, c, pos, 0);
    s = tj_graph_gather(G, s, pos, 0);
  } else if (rank_of(n, 1) != 3 || rank_of(n, 2) != 3) {
    return bad(im, n, "without position_ids the caches must be 3-D");
  }
  int64_t cd[TJ_MAX_RANK];
  tj_graph_value_dims(G, c, cd);
  if (tj_graph_value_rank(G, c) != 3 || cd[2] != half)
    return bad(im, n, "the caches' last dim must be %lld (half of %lld)",
               (long long)half, (long long)rd);
  // [B, S, R/2] against [B, H, S, .] (4-D) or [B, S, H, .] (3-D).
  const int64_t c4[4] = {cd[0], rank == 4 ? 1 : cd[1], rank == 4 ? cd[1] : 1,
                         half};
  c = tj_graph_reshape(G, c, 4, c4);
  s = tj_graph_reshape(G, s, 4, c4);
  // Element k of the result is x[k] c[ci[k]] + x[pk[k]] s[ci[k]] sign[k],
  // pk[k] the other element of k's pair and sign -1 on its first element:
  // gathers along the last axis and elementwise ops, no concat, so the
  // whole rotation is one kernel (concats along a reshaped axis are not).
  int64_t* pk = tj_arena_alloc(&im->arena, sizeof(int64_t) * (size_t)d * 2);
  float* sign = tj_arena_alloc(&im->arena, sizeof(float) * (size_t)d);
  if (!pk || !sign) return tj_status_oom();
  int64_t* ci = pk + d;
  for (int64_t k = 0; k < d; ++k) {
    bool first = interleaved ? k % 2 == 0 : k < half;
    pk[k] = k >= rd ? k : interleaved ? k ^ 1 : first ? k + half : k - half;
    ci[k] = k >= rd ? 0 : interleaved ? k / 2 : first ? k : k - half;
    sign[k] = k >= rd ? 0.0f : first ? -1.0f : 1.0f;
  }
  tj_value_t sg = tj_graph_cast(
      G, tj_graph_constant(G, TJ_DTYPE_F32, 1, &d, sign, sizeof(float) * d),
      xv->dtype);
  tj_value_t cg = gather_list(im, c, 3, ci, d);
  tj_value_t sgn = tj_graph_mul(G, gather_list(im, s, 3, ci, d), sg);
  tj_value_t rot =
      tj_graph_add(G, tj_graph_mul(G, x, cg),
                   tj_graph_mul(G, gather_list(im, x, 3, pk, d), sgn));
  if (rd < d) {
    // The entries past R pass through.
    tj_value_t keep = tj_graph_lt(G, tj_graph_iota(G, TJ_DTYPE_I64, 1, &d, 0),
                                  scalar(im, TJ_DTYPE_I64, (double)rd));
    rot = tj_graph_where(G, keep, rot, x);
  }
  if (rank == 3) rot = tj_graph_reshape(G, rot, 3, xv->dims);
  return out(im, n, 0, rot);
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

// The conv attributes of a Conv-like node whose input 0 is x and input
// |wi| the weight.
static tj_status_t conv_window(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                               int32_t wi, bool transpose, tj_conv_attrs_t* a) {
  int32_t rank = rank_of(n, 0);
  if (rank_of(n, wi) != rank)
    return bad(im, n, "the weight has rank %d, the input %d",
               (int)rank_of(n, wi), (int)rank);
  int64_t kernel[3] = {0, 0, 0};
  int64_t v[MAX_INTS];
  int32_t c;
  TJ_RETURN_IF_ERROR(attr_ints(im, n, "kernel_shape", &c, v));
  for (int32_t i = 0; i < rank - 2 && i < 3; ++i) {
    int64_t wd = n->inputs[wi]->dims[i + 2];
    if (wd < 0) return fail(im, n, "the weight has a symbolic dim");
    if (c && (c != rank - 2 || v[i] != wd))
      return bad(im, n, "kernel_shape does not match the weight");
    kernel[i] = wd;
  }
  TJ_RETURN_IF_ERROR(
      window_attrs(im, n, transpose ? CONV_T : POOL_NONE, kernel, a));
  int64_t g = attr_i(n, "group", 1);
  if (g < 1) return bad(im, n, "group = %lld", (long long)g);
  a->groups = g;
  return NULL;
}

static tj_status_t cv_conv(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                           const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 3));
  tj_conv_attrs_t a;
  TJ_RETURN_IF_ERROR(conv_window(im, n, 1, e->param != 0, &a));
  tj_value_t x = in(im, n, 0), w = in(im, n, 1), b = in(im, n, 2);
  return out(im, n, 0,
             e->param ? tj_graph_conv_transpose(G, x, w, b, &a)
                      : tj_graph_conv(G, x, w, b, &a));
}

// QLinearMatMul, QLinearConv and ConvInteger (onnxseq, issue 15). The
// integer product is exact: matmul_integer, or a float conv of the
// zero-point-shifted operands (integer_conv). QLinear*'s requantization is
// ONNX's reference's: the int32 product times the scales' ratio (computed in
// the scales' dtype, then widened, as numpy's promotion of an int32 array does)
// in f64, plus y_zero_point, rounded half to even and clipped to the output
// dtype.

// An 8-bit integer dtype's range; false for another dtype.
static bool int8_range(tj_dtype_t d, double* lo, double* hi) {
  if (d == TJ_DTYPE_I8) {
    *lo = -128;
    *hi = 127;
    return true;
  }
  if (d == TJ_DTYPE_U8) {
    *lo = 0;
    *hi = 255;
    return true;
  }
  return false;
}

// round_half_even(acc * scale + zero_point) clipped to |d|'s range, in |d|.
static tj_value_t requantize(tj_onnx_importer_t* im, tj_value_t acc,
                             tj_value_t scale, tj_value_t zero_point,
                             tj_dtype_t d) {
  double lo = 0, hi = 0;
  int8_range(d, &lo, &hi);
  tj_value_t y = tj_graph_mul(G, tj_graph_cast(G, acc, TJ_DTYPE_F64),
                              tj_graph_cast(G, scale, TJ_DTYPE_F64));
  if (!tj_value_is_none(zero_point))
    y = tj_graph_add(G, y, tj_graph_cast(G, zero_point, TJ_DTYPE_F64));
  y = tj_graph_round(G, y);
  y = tj_graph_maximum(G, y, tj_graph_scalar(G, TJ_DTYPE_F64, lo));
  y = tj_graph_minimum(G, y, tj_graph_scalar(G, TJ_DTYPE_F64, hi));
  return tj_graph_cast(G, y, d);
}

// Input |i| (a per-row scale or zero point of A: 1-D of more than one
// element) as [M, 1]; any other shape as it is.
static tj_value_t per_row(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                          int32_t i) {
  tj_value_t v = in(im, n, i);
  if (has_in(n, i) && rank_of(n, i) == 1 && rank_of(n, 0) >= 2) {
    int64_t dims[2] = {n->inputs[i]->dims[0], 1};
    v = tj_graph_reshape(G, v, 2, dims);
  }
  return v;
}

static tj_status_t cv_qlinear_matmul(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                     const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 8, 8));
  tj_dtype_t d = dtype_of(n, 7);
  double lo, hi;
  if (!int8_range(dtype_of(n, 0), &lo, &hi) ||
      !int8_range(dtype_of(n, 3), &lo, &hi) || !int8_range(d, &lo, &hi))
    return fail(im, n, "a, b and y must be int8 or uint8, not %s, %s, %s",
                tj_dtype_name(dtype_of(n, 0)), tj_dtype_name(dtype_of(n, 3)),
                tj_dtype_name(d));
  tj_dtype_t sd = dtype_of(n, 1);
  if (!is_float(sd) || dtype_of(n, 4) != sd || dtype_of(n, 6) != sd)
    return bad(im, n, "the scales must be of one float dtype");
  tj_value_t acc = tj_graph_matmul_integer(G, in(im, n, 0), in(im, n, 3),
                                           per_row(im, n, 2), in(im, n, 5));
  if (tj_value_is_none(acc)) return graph_error(im, n);
  tj_value_t scale = tj_graph_div(
      G, tj_graph_mul(G, per_row(im, n, 1), in(im, n, 4)), in(im, n, 6));
  return out(im, n, 0, requantize(im, acc, scale, in(im, n, 7), d));
}

// x - x_zero_point, or w - w_zero_point with a 1-D zero point per output
// channel, in |d|.
static tj_value_t shifted(tj_onnx_importer_t* im, tj_onnx_node_t* n, int32_t i,
                          int32_t zi, tj_dtype_t d) {
  tj_value_t v = tj_graph_cast(G, in(im, n, i), d);
  if (zi < 0 || !has_in(n, zi)) return v;
  tj_value_t z = tj_graph_cast(G, in(im, n, zi), d);
  if (rank_of(n, zi) == 1) {
    int64_t dims[TJ_MAX_RANK];
    dims[0] = n->inputs[zi]->dims[0];
    for (int32_t k = 1; k < rank_of(n, i); ++k) dims[k] = 1;
    z = tj_graph_reshape(G, z, rank_of(n, i), dims);
  }
  return tj_graph_sub(G, v, z);
}

// The integer conv of x (input 0) and w (input |wi|), zero points |xz| and
// |wz|, plus an int32 bias (input |bi|, -1: none), exact, in f64. The conv
// runs in f32 when every partial sum is below 2^24 whatever the order (a
// tap's product is at most 255 * 255 in magnitude), which a native kernel
// does; else in f64 (a graph break on x86: no f64 matmul kernel).
static tj_status_t integer_conv(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                int32_t wi, int32_t xz, int32_t wz, int32_t bi,
                                tj_value_t* out_acc) {
  double lo, hi;
  if (!int8_range(dtype_of(n, 0), &lo, &hi) ||
      !int8_range(dtype_of(n, wi), &lo, &hi))
    return fail(im, n, "x and w must be int8 or uint8, not %s and %s",
                tj_dtype_name(dtype_of(n, 0)), tj_dtype_name(dtype_of(n, wi)));
  for (int32_t z = 0; z < 2; ++z) {
    int32_t zi = z ? wz : xz;
    if (has_in(n, zi) &&
        (rank_of(n, zi) > 1 ||
         (rank_of(n, zi) == 1 && n->inputs[zi]->dims[0] != 1 &&
          (!z || n->inputs[zi]->dims[0] != n->inputs[wi]->dims[0]))))
      return bad(im, n, "%s_zero_point must be a scalar%s", z ? "w" : "x",
                 z ? " or one per output channel" : "");
  }
  tj_conv_attrs_t a;
  TJ_RETURN_IF_ERROR(conv_window(im, n, wi, false, &a));
  // Taps per output: w's dims after the first.
  double taps = 1;
  for (int32_t k = 1; k < rank_of(n, wi); ++k)
    taps *= (double)n->inputs[wi]->dims[k];
  tj_dtype_t d =
      taps * 255.0 * 255.0 < 16777216.0 ? TJ_DTYPE_F32 : TJ_DTYPE_F64;
  tj_value_t x = shifted(im, n, 0, xz, d), w = shifted(im, n, wi, wz, d);
  tj_value_t acc = tj_graph_conv(G, x, w, tj_value_none(), &a);
  if (tj_value_is_none(acc)) return graph_error(im, n);
  acc = tj_graph_cast(G, acc, TJ_DTYPE_F64);
  if (bi >= 0 && has_in(n, bi)) {
    // The bias [O] per output channel: [1, O, 1, ...].
    int32_t rank = rank_of(n, 0);
    int64_t dims[TJ_MAX_RANK];
    for (int32_t k = 0; k < rank; ++k) dims[k] = 1;
    dims[1] = n->inputs[bi]->dims[0];
    tj_value_t b = tj_graph_cast(G, in(im, n, bi), TJ_DTYPE_F64);
    acc = tj_graph_add(G, acc, tj_graph_reshape(G, b, rank, dims));
  }
  *out_acc = acc;
  return tj_value_is_none(acc) ? graph_error(im, n) : NULL;
}

static tj_status_t cv_conv_integer(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                   const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 4));
  tj_value_t acc;
  TJ_RETURN_IF_ERROR(integer_conv(im, n, 1, 2, 3, -1, &acc));
  return out(im, n, 0, tj_graph_cast(G, acc, TJ_DTYPE_I32));
}

static tj_status_t cv_qlinear_conv(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                   const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 8, 9));
  tj_dtype_t d = dtype_of(n, 7);
  double lo, hi;
  if (!int8_range(d, &lo, &hi))
    return fail(im, n, "y must be int8 or uint8, not %s", tj_dtype_name(d));
  if (has_in(n, 8) && (dtype_of(n, 8) != TJ_DTYPE_I32 || rank_of(n, 8) != 1))
    return bad(im, n, "the bias must be 1-D int32, not %s rank %d",
               tj_dtype_name(dtype_of(n, 8)), (int)rank_of(n, 8));
  tj_dtype_t sd = dtype_of(n, 1);
  if (!is_float(sd) || dtype_of(n, 4) != sd || dtype_of(n, 6) != sd)
    return bad(im, n, "the scales must be of one float dtype");
  tj_value_t acc;
  TJ_RETURN_IF_ERROR(integer_conv(im, n, 3, 2, 5, 8, &acc));
  // A 1-D w_scale is per output channel: [1, O, 1, ...].
  tj_value_t ws = in(im, n, 4);
  int32_t rank = rank_of(n, 0);
  if (rank_of(n, 4) == 1) {
    int64_t dims[TJ_MAX_RANK];
    for (int32_t k = 0; k < rank; ++k) dims[k] = 1;
    dims[1] = n->inputs[4]->dims[0];
    ws = tj_graph_reshape(G, ws, rank, dims);
  } else if (rank_of(n, 4) > 1) {
    return bad(im, n, "w_scale must be a scalar or 1-D");
  }
  tj_value_t scale =
      tj_graph_div(G, tj_graph_mul(G, in(im, n, 1), ws), in(im, n, 6));
  return out(im, n, 0, requantize(im, acc, scale, in(im, n, 7), d));
}

// Det (onnxseq, issue 15) of [..., n, n] for n up to 3, by cofactor
// expansion over the matrix's elements (each a strided slice): the exact
// polynomial numpy.linalg.det's LU evaluates. Larger matrices need a
// pivoted elimination, which is not built; they are an error.
static tj_status_t cv_det(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                          const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  const tj_onnx_val_t* xv = n->inputs[0];
  int32_t rank = xv->rank;
  if (rank < 2 || !is_float(xv->dtype))
    return bad(im, n, "the input must be float [..., n, n], not %s rank %d",
               tj_dtype_name(xv->dtype), (int)rank);
  int64_t m = xv->dims[rank - 1];
  if (m != xv->dims[rank - 2] || m < 1)
    return bad(im, n, "the matrices are %lldx%lld, not square",
               (long long)xv->dims[rank - 2], (long long)m);
  if (m > 3)
    return fail(im, n,
                "%lldx%lld matrices: Det is built for up to 3x3 (cofactor "
                "expansion)",
                (long long)m, (long long)m);
  tj_value_t x = in(im, n, 0);
  // a[i][j]: x[..., i, j] as [...].
  tj_value_t a[3][3];
  int64_t bdims[TJ_MAX_RANK];
  for (int32_t d = 0; d < rank - 2; ++d) bdims[d] = xv->dims[d];
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      int64_t starts[TJ_MAX_RANK], stops[TJ_MAX_RANK];
      for (int32_t d = 0; d < rank; ++d) {
        starts[d] = 0;
        stops[d] = INT64_MAX;
      }
      starts[rank - 2] = i;
      stops[rank - 2] = i + 1;
      starts[rank - 1] = j;
      stops[rank - 1] = j + 1;
      a[i][j] = tj_graph_reshape(G, tj_graph_slice(G, x, starts, stops, NULL),
                                 rank - 2, bdims);
    }
  }
#define MUL(p, q) tj_graph_mul(G, (p), (q))
#define SUB(p, q) tj_graph_sub(G, (p), (q))
  tj_value_t det;
  if (m == 1) {
    det = a[0][0];
  } else if (m == 2) {
    det = SUB(MUL(a[0][0], a[1][1]), MUL(a[0][1], a[1][0]));
  } else {
    tj_value_t c0 = SUB(MUL(a[1][1], a[2][2]), MUL(a[1][2], a[2][1]));
    tj_value_t c1 = SUB(MUL(a[1][0], a[2][2]), MUL(a[1][2], a[2][0]));
    tj_value_t c2 = SUB(MUL(a[1][0], a[2][1]), MUL(a[1][1], a[2][0]));
    det = tj_graph_add(G, SUB(MUL(a[0][0], c0), MUL(a[0][1], c1)),
                       MUL(a[0][2], c2));
  }
#undef MUL
#undef SUB
  return out(im, n, 0, det);
}

// MaxUnpool (onnxseq, issue 15), as ONNX's reference: each x element is
// written at its flat index (MaxPool's Indices) into zeros of the inferred
// shape, (in - 1) * stride - pads + kernel per spatial axis; an
// output_shape input (a constant) pads that with zeros at the end.
static tj_status_t cv_max_unpool(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                 const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 3));
  const tj_onnx_val_t* xv = n->inputs[0];
  int32_t rank = xv->rank, sp = rank - 2;
  if (sp < 1 || sp > 3)
    return fail(im, n, "the input has rank %d; 3 to 5 are supported",
                (int)rank);
  if (rank_of(n, 1) != rank ||
      memcmp(n->inputs[1]->dims, xv->dims, sizeof(int64_t) * (size_t)rank))
    return bad(im, n, "the indices must have the input's shape");
  int64_t kernel[MAX_INTS], strides[MAX_INTS], pads[MAX_INTS];
  int32_t nk, ns, np;
  TJ_RETURN_IF_ERROR(attr_ints(im, n, "kernel_shape", &nk, kernel));
  TJ_RETURN_IF_ERROR(attr_ints(im, n, "strides", &ns, strides));
  TJ_RETURN_IF_ERROR(attr_ints(im, n, "pads", &np, pads));
  if (nk != sp || (ns && ns != sp) || (np && np != 2 * sp))
    return bad(im, n, "kernel_shape needs %d values, strides %d and pads %d",
               (int)sp, (int)sp, (int)(2 * sp));
  int64_t inferred[TJ_MAX_RANK], total = 1, numel = 1;
  for (int32_t d = 0; d < rank; ++d) {
    if (xv->dims[d] < 0) return fail(im, n, "input dim %d is symbolic", (int)d);
    numel *= xv->dims[d];
    if (d < 2) {
      inferred[d] = xv->dims[d];
    } else {
      int32_t k = d - 2;
      inferred[d] = (xv->dims[d] - 1) * (ns ? strides[k] : 1) -
                    (np ? pads[k] + pads[sp + k] : 0) + kernel[k];
      if (inferred[d] < 0)
        return bad(im, n, "the inferred output dim %d is negative", (int)d);
    }
    total *= inferred[d];
  }
  tj_value_t flat_x = tj_graph_reshape(G, in(im, n, 0), 1, &numel);
  tj_value_t flat_i = tj_graph_reshape(G, in(im, n, 1), 1, &numel);
  tj_value_t zeros = tj_graph_full(G, xv->dtype, 1, &total, 0);
  tj_value_t y = tj_graph_scatter_elements(G, zeros, flat_i, flat_x, 0,
                                           TJ_SCATTER_REDUCTION_NONE);
  y = tj_graph_reshape(G, y, rank, inferred);
  if (has_in(n, 2)) {
    int64_t shape[MAX_INTS], low[TJ_MAX_RANK] = {0}, high[TJ_MAX_RANK];
    int32_t count;
    TJ_RETURN_IF_ERROR(
        known_ints(im, n, 2, "output_shape", &count, shape, false));
    if (count != rank)
      return bad(im, n, "output_shape has %d values, not %d", (int)count,
                 (int)rank);
    for (int32_t d = 0; d < rank; ++d) {
      high[d] = shape[d] - inferred[d];
      if (high[d] < 0)
        return bad(im, n, "output_shape[%d] = %lld is below the inferred %lld",
                   (int)d, (long long)shape[d], (long long)inferred[d]);
    }
    y = tj_graph_pad(G, y, low, high, 0);
  }
  return out(im, n, 0, y);
}

// MaxPool's Indices output: the flat index (row-major over N, C and the
// spatial axes; storage_order 1: the spatial axes column-major) of each
// window's first maximum, padding excluded. The window's taps are strided
// slices of x padded with the dtype's lowest value; a running compare keeps the
// first maximum and its position, computed from iotas. Spatial dims constant.
static tj_status_t max_pool_indices(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                    const tj_conv_attrs_t* a, tj_value_t y,
                                    tj_value_t* out_idx) {
  const tj_onnx_val_t* xv = n->inputs[0];
  int32_t rank = xv->rank, sp = rank - 2;
  int64_t order = attr_i(n, "storage_order", 0);
  if (order != 0 && order != 1)
    return bad(im, n, "storage_order %lld", (long long)order);
  int64_t yd[TJ_MAX_RANK];
  tj_graph_value_dims(G, y, yd);
  int64_t taps = 1, plane = 1, stride_of[3];
  for (int32_t i = 0; i < sp; ++i) {
    if (xv->dims[2 + i] < 0 || yd[2 + i] < 0)
      return fail(im, n, "Indices of a symbolic spatial dim");
    taps *= a->kernel[i];
    plane *= xv->dims[2 + i];
  }
  if (taps > 1024)
    return fail(im, n, "Indices of a %lld-tap window", (long long)taps);
  // The spatial strides of the flat index.
  for (int32_t i = 0, acc = 1; i < sp; ++i) {
    int32_t axis = order ? i : sp - 1 - i;
    stride_of[axis] = acc;
    acc *= (int32_t)xv->dims[2 + axis];
  }
  int64_t low[TJ_MAX_RANK] = {0}, high[TJ_MAX_RANK] = {0};
  int64_t s[3], d[3];
  for (int32_t i = 0; i < sp; ++i) {
    s[i] = a->strides[i] ? a->strides[i] : 1;
    d[i] = a->dilations[i] ? a->dilations[i] : 1;
    int64_t extent = (yd[2 + i] - 1) * s[i] + (a->kernel[i] - 1) * d[i] + 1;
    low[2 + i] = a->pads_begin[i];
    high[2 + i] = extent - a->pads_begin[i] - xv->dims[2 + i];
    if (high[2 + i] < 0) high[2 + i] = 0;
  }
  // Padded with the dtype's lowest value (an integer's minimum), as
  // max_pool pads.
  double lowest = tj_dtype_is_int(xv->dtype)
                      ? (double)tj_dtype_int_lowest(xv->dtype)
                      : -INFINITY;
  tj_value_t xp = tj_graph_pad(G, in(im, n, 0), low, high, lowest);
  // The N and C part of the index, and each spatial axis's output iota.
  int64_t nc[TJ_MAX_RANK];
  for (int32_t i = 0; i < rank; ++i) nc[i] = i < 2 ? yd[i] : 1;
  tj_value_t base = tj_graph_add(
      G,
      tj_graph_mul(G, tj_graph_iota(G, TJ_DTYPE_I64, rank, nc, 0),
                   scalar(im, TJ_DTYPE_I64, (double)(xv->dims[1] * plane))),
      tj_graph_mul(G, tj_graph_iota(G, TJ_DTYPE_I64, rank, nc, 1),
                   scalar(im, TJ_DTYPE_I64, (double)plane)));
  tj_value_t at[3];
  for (int32_t i = 0; i < sp; ++i) {
    int64_t one[TJ_MAX_RANK];
    for (int32_t j = 0; j < rank; ++j) one[j] = 1;
    one[2 + i] = yd[2 + i];
    at[i] = tj_graph_mul(G, tj_graph_iota(G, TJ_DTYPE_I64, rank, one, 2 + i),
                         scalar(im, TJ_DTYPE_I64, (double)s[i]));
  }
  tj_value_t best = tj_value_none(), idx = tj_value_none();
  for (int64_t t = 0; t < taps; ++t) {
    int64_t starts[TJ_MAX_RANK] = {0}, stops[TJ_MAX_RANK], steps[TJ_MAX_RANK];
    stops[0] = stops[1] = INT64_MAX;
    steps[0] = steps[1] = 1;
    tj_value_t pos = base;
    for (int32_t i = sp - 1, rest = (int32_t)t; i >= 0; --i) {
      int64_t k = rest % a->kernel[i];
      rest /= (int32_t)a->kernel[i];
      starts[2 + i] = k * d[i];
      stops[2 + i] = starts[2 + i] + (yd[2 + i] - 1) * s[i] + 1;
      steps[2 + i] = s[i];
      // The input coordinate o * s + k * d - pad.
      tj_value_t coord = tj_graph_add(
          G, at[i],
          scalar(im, TJ_DTYPE_I64, (double)(k * d[i] - a->pads_begin[i])));
      pos = tj_graph_add(
          G, pos,
          tj_graph_mul(G, coord,
                       scalar(im, TJ_DTYPE_I64, (double)stride_of[i])));
    }
    tj_value_t v = tj_graph_slice(G, xp, starts, stops, steps);
    if (t == 0) {
      best = v;
      idx = tj_graph_broadcast_to(G, pos, rank, yd);
    } else {
      tj_value_t win = tj_graph_gt(G, v, best);
      best = tj_graph_where(G, win, v, best);
      idx = tj_graph_where(G, win, pos, idx);
    }
  }
  *out_idx = idx;
  return NULL;
}

static tj_status_t cv_pool(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                           const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  TJ_RETURN_IF_ERROR(no_extra_outputs(im, n, e->param == POOL_MAX ? 2 : 1));
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
    case POOL_MAX: {
      tj_value_t y = tj_graph_max_pool(G, x, &a);
      if (has_out(n, 1) && !tj_value_is_none(y)) {
        tj_value_t idx;
        TJ_RETURN_IF_ERROR(max_pool_indices(im, n, &a, y, &idx));
        TJ_RETURN_IF_ERROR(out(im, n, 1, idx));
      }
      return out(im, n, 0, y);
    }
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
  TJ_RETURN_IF_ERROR(known_ints(im, n, 1, "starts", &ns, st, true));
  TJ_RETURN_IF_ERROR(known_ints(im, n, 2, "ends", &ne, en, true));
  // Bounds computed from symbolic dims (x[:, :, P:P+T], onnx_dims.c): an
  // entry <= -2 of such a vector is a dim, not an index from the end.
  const bool sym_st = n->inputs[1]->symbolic, sym_en = n->inputs[2]->symbolic;
  int64_t dyn_start[TJ_MAX_RANK], dyn_end[TJ_MAX_RANK];
  bool dyn[TJ_MAX_RANK] = {false};
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
    if ((sym_st && st[k] <= -2) || (sym_en && en[k] <= -2)) {
      if (step != 1)
        return fail(im, n, "a step of %lld between symbolic bounds",
                    (long long)step);
      dyn[a] = true;
      dyn_start[a] = st[k];
      dyn_end[a] = en[k];
      continue;
    }
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
    if (dyn[a])
      TJ_RETURN_IF_ERROR(
          tj_onnx_slice_dims(im, n, &y, a, dyn_start[a], dyn_end[a]));
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
  tj_value_t computed = tj_value_none();
  bool constant = attr_s_is(n, "mode", "constant", "constant");
  if (has_in(n, 2)) {
    tj_onnx_val_t* v = n->inputs[2];
    if (numel_of_val(v) != 1 || v->rank > 1)
      return bad(im, n, "constant_value must have one element");
    if (v->dtype != x->dtype)
      return bad(im, n, "constant_value is %s, the input %s",
                 tj_dtype_name(v->dtype), tj_dtype_name(x->dtype));
    if (v->data)
      value = element_f64(v);
    else if (constant)  // known only at run time: selected in below
      computed = in(im, n, 2);
  }
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
  if (constant) {
    tj_value_t padded = tj_graph_pad(G, y, low, high, value);
    if (!tj_value_is_none(computed)) {
      // Pad with 0, then select the computed value outside the input.
      int64_t ydims[TJ_MAX_RANK];
      tj_graph_value_dims(G, y, ydims);
      tj_value_t inside = tj_graph_pad(
          G, tj_graph_full(G, TJ_DTYPE_BOOL, rank, ydims, 1), low, high, 0);
      padded = tj_graph_where(G, inside, padded, computed);
    }
    return out(im, n, 0, padded);
  }
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

// scatter (issue 15): ScatterElements (and the deprecated Scatter, opset 9
// to 10, without reduction) and ScatterND. Indices out of range are
// clamped, as Gather's (ONNX calls them an error).
static tj_status_t scatter_reduction(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                     tj_scatter_reduction_t* out) {
  static const char* const kNames[] = {"none", "add", "mul", "max", "min"};
  for (int32_t r = 0; r < 5; ++r) {
    if (attr_s_is(n, "reduction", "none", kNames[r])) {
      *out = (tj_scatter_reduction_t)r;
      return NULL;
    }
  }
  return bad(im, n, "unknown reduction");
}

static tj_status_t cv_scatter_elements(tj_onnx_importer_t* im,
                                       tj_onnx_node_t* n, const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 3, 3));
  int32_t axis;
  TJ_RETURN_IF_ERROR(
      norm_axis(im, n, attr_i(n, "axis", 0), rank_of(n, 0), &axis));
  tj_scatter_reduction_t r = TJ_SCATTER_REDUCTION_NONE;
  TJ_RETURN_IF_ERROR(scatter_reduction(im, n, &r));
  return out(im, n, 0,
             tj_graph_scatter_elements(G, in(im, n, 0), in(im, n, 1),
                                       in(im, n, 2), axis, r));
}

static tj_status_t cv_scatter_nd(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                 const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 3, 3));
  tj_scatter_reduction_t r = TJ_SCATTER_REDUCTION_NONE;
  TJ_RETURN_IF_ERROR(scatter_reduction(im, n, &r));
  return out(
      im, n, 0,
      tj_graph_scatter_nd(G, in(im, n, 0), in(im, n, 1), in(im, n, 2), r));
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

// ddshape (issue 15): the ops whose output size the data decides, onto
// the library's data-dependent builders (one host kernel each, the rest
// core ops; lib/dd_ops.c).
static tj_status_t cv_nonzero(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                              const op_entry_t* e) {
  (void)e;
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  return out(im, n, 0, tj_graph_nonzero(G, in(im, n, 0)));
}

static tj_status_t cv_compress(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                               const op_entry_t* e) {
  (void)e;
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  bool has_axis = attr(n, "axis") != NULL;
  int32_t axis = (int32_t)attr_i(n, "axis", 0);
  return out(im, n, 0,
             tj_graph_compress(G, in(im, n, 0), in(im, n, 1), has_axis, axis));
}

static tj_status_t cv_unique(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             const op_entry_t* e) {
  (void)e;
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  bool has_axis = attr(n, "axis") != NULL;
  int32_t axis = (int32_t)attr_i(n, "axis", 0);
  bool sorted = attr_i(n, "sorted", 1) != 0;
  tj_value_t idx, inv, cnt;
  tj_value_t y = tj_graph_unique(
      G, in(im, n, 0), has_axis, axis, sorted, has_out(n, 1) ? &idx : NULL,
      has_out(n, 2) ? &inv : NULL, has_out(n, 3) ? &cnt : NULL);
  TJ_RETURN_IF_ERROR(out(im, n, 0, y));
  if (has_out(n, 1)) TJ_RETURN_IF_ERROR(out(im, n, 1, idx));
  if (has_out(n, 2)) TJ_RETURN_IF_ERROR(out(im, n, 2, inv));
  if (has_out(n, 3)) TJ_RETURN_IF_ERROR(out(im, n, 3, cnt));
  return no_extra_outputs(im, n, 4);
}

static tj_status_t cv_nms(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                          const op_entry_t* e) {
  (void)e;
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 5));
  return out(im, n, 0,
             tj_graph_non_max_suppression(
                 G, in(im, n, 0), in(im, n, 1), in(im, n, 2), in(im, n, 3),
                 in(im, n, 4), attr_i(n, "center_point_box", 0) != 0));
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
  bool known = true;
  for (int32_t i = 0; i < 3; ++i) {
    if (n->inputs[i]->rank > 1 ||
        (n->inputs[i]->rank == 1 && n->inputs[i]->dims[0] != 1))
      return bad(im, n, "input %d is not a scalar", (int)i);
    known &= n->inputs[i]->data && !n->inputs[i]->symbolic;
  }
  // Scalars known only at run time: the length is computed from their
  // values before each run (tj_graph_range), so they must be graph inputs
  // or constants (its error says so).
  if (!known)
    return out(im, n, 0,
               tj_graph_range(G, in(im, n, 0), in(im, n, 1), in(im, n, 2)));
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

// numpy's float floor division (npy_floor_divide), which ONNX's
// reference MelWeightMatrix takes for its bin indices.
static double floor_divide(double a, double b) {
  double mod = fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
  double f = floor(div);
  if (div - f > 0.5) f += 1;
  return f;
}

// MelWeightMatrix at import, from its known scalars (its shape depends on
// them): ONNX's reference step by step, f32 where numpy computes the
// edges' mel values in f32 (a float32 input over Python ints), f64 from
// the division by log(10) on; triangles [dft_length / 2 + 1, num_mel_bins].
static tj_status_t cv_mel_weight_matrix(tj_onnx_importer_t* im,
                                        tj_onnx_node_t* n,
                                        const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 5, 5));
  for (int32_t i = 0; i < 5; ++i) {
    if (!n->inputs[i]->data || n->inputs[i]->symbolic)
      return fail(im, n,
                  "input %d must be a constant (the matrix's shape and "
                  "values are computed at import)",
                  (int)i);
    if (numel_of_val(n->inputs[i]) != 1)
      return bad(im, n, "input %d is not a scalar", (int)i);
  }
  const int64_t mels = element_i64(n->inputs[0]);
  const int64_t dft = element_i64(n->inputs[1]);
  const int64_t rate = element_i64(n->inputs[2]);
  if (mels < 1 || mels > 4096 || dft < 1 || dft > (1 << 20) || rate < 1)
    return bad(im, n, "num_mel_bins %lld, dft_length %lld, sample_rate %lld",
               (long long)mels, (long long)dft, (long long)rate);
  tj_dtype_t d = TJ_DTYPE_F32;
  const Onnx__AttributeProto* a = attr(n, "output_datatype");
  if (a && a->has_i && !onnx_to_dtype(a->i, &d))
    return fail(im, n, "output_datatype %s is not supported",
                tj_onnx_type_name((int32_t)a->i));
  double edge[2];
  for (int32_t k = 0; k < 2; ++k) {
    double hz = element_f64(n->inputs[3 + k]);
    if (n->inputs[3 + k]->dtype == TJ_DTYPE_F32) {
      float mel = 2595.0f * log1pf((float)hz / 700.0f);
      edge[k] = (double)mel / log(10.0);
    } else {
      edge[k] = 2595.0 * log1p(hz / 700.0) / log(10.0);
    }
  }
  const int64_t bins = mels + 2, rows = dft / 2 + 1;
  const double step = (edge[1] - edge[0]) / (double)bins;
  int64_t* at = tj_arena_alloc(&im->arena, (size_t)bins * sizeof(int64_t));
  double* w =
      tj_arena_alloc(&im->arena, (size_t)(rows * mels) * sizeof(double));
  uint8_t* buf =
      tj_arena_alloc(&im->arena, (size_t)(rows * mels) * tj_dtype_size(d));
  if (!at || !w || !buf) return tj_status_oom();
  for (int64_t k = 0; k < bins; ++k) {
    double f = (double)k * step + edge[0];
    f = 700.0 * expm1(f / 2595.0 * log(10.0));
    at[k] = (int64_t)floor_divide((double)(dft + 1) * f, (double)rate);
  }
  memset(w, 0, (size_t)(rows * mels) * sizeof(double));
  for (int64_t i = 0; i < mels; ++i) {
    const int64_t lo = at[i], mid = at[i + 1], hi = at[i + 2];
    if (lo < 0 || hi >= rows + 1 || mid < lo || hi < mid)
      return fail(im, n,
                  "mel bin %lld's edges %lld, %lld, %lld leave the %lld "
                  "frequency bins",
                  (long long)i, (long long)lo, (long long)mid, (long long)hi,
                  (long long)rows);
    if (mid == lo) {
      if (mid < rows) w[mid * mels + i] = 1;
    } else {
      for (int64_t j = lo; j <= mid && j < rows; ++j)
        w[j * mels + i] = (double)(j - lo) / (double)(mid - lo);
    }
    for (int64_t j = mid; j < hi && j < rows; ++j)
      w[j * mels + i] = (double)(hi - j) / (double)(hi - mid);
  }
  for (int64_t k = 0; k < rows * mels; ++k) tj_store_f64(d, buf, k, w[k]);
  int64_t dims[2] = {rows, mels};
  return out_known(im, n, 0, d, 2, dims, buf,
                   (size_t)(rows * mels) * tj_dtype_size(d), false);
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
    TJ_RETURN_IF_ERROR(known_ints(im, n, 1, "k", &count, ks, true));
    if (count != 1) return bad(im, n, "k must be a scalar");
    k = ks[0];
    // k computed from symbolic dims (triu(P + 1) of a causal mask over a
    // KV cache): the dim's value at run time.
    if (n->inputs[1]->symbolic && k <= -2) kv = tj_onnx_dim_value(G, k);
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
  // SpaceToDepth inverts DepthToSpace of the same mode (opset 28 added
  // mode): DCR puts the block offset outermost in the channel, CRD
  // innermost.
  bool crd = attr_s_is(n, "mode", "DCR", "CRD");
  if (!crd && !attr_s_is(n, "mode", "DCR", "DCR"))
    return fail(im, n, "an unknown mode");
  int64_t d6[6] = {N, C, H / b, b, W / b, b};
  static const int32_t kDcr[6] = {0, 3, 5, 1, 2, 4},
                       kCrd[6] = {0, 1, 3, 5, 2, 4};
  int64_t o4[4] = {N, C * b * b, H / b, W / b};
  y = tj_graph_reshape(G, y, 6, d6);
  y = tj_graph_transpose(G, y, crd ? kCrd : kDcr);
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

// Upsample (param 1; opsets 9 and 10) is Resize-10 with its nearest mode
// taking the floor: ONNX's reference repeats each element |scale| times.
static tj_status_t cv_resize(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             const op_entry_t* e) {
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
  r.nearest = e->param ? 2
                       : rs_choice(n, "nearest_mode", "round_prefer_floor",
                                   kNearest, 4);
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
      if (xv->dims[axes[i]] < 0 && v != 1)
        return fail(im, n, "axis %d of symbolic size scaled by %g",
                    (int)axes[i], v);
      if (xv->dims[axes[i]] >= 0)
        sizes[axes[i]] =
            (int64_t)floor(v * (double)xv->dims[axes[i]]);  // as numpy astype
    }
  } else {
    // sizes may hold symbolic dims where they keep the input's own (the
    // batch of F.interpolate(x, size=(h, w)) exported with a dynamic
    // batch: Concat(Shape(x)[:2], [h, w])); those axes stay as they are.
    int32_t count;
    int64_t want[MAX_INTS];
    TJ_RETURN_IF_ERROR(known_ints(im, n, 3, "sizes", &count, want, true));
    if (count != num_axes) return bad(im, n, "sizes must be %d ints", num_axes);
    bool symbolic = false;
    for (int32_t i = 0; i < num_axes; ++i) {
      const int64_t have = xv->dims[axes[i]];
      sizes[axes[i]] = want[i];
      if (have < 0 || want[i] < 0) {
        if (want[i] != have)
          return fail(im, n,
                      "axis %d of symbolic size: sizes must keep it (%s "
                      "input dim, %s size)",
                      (int)axes[i], have < 0 ? "a symbolic" : "a static",
                      want[i] < 0 ? "a symbolic" : "a static");
        scales[axes[i]] = 1;
        symbolic = true;
        continue;
      }
      scales[axes[i]] = (double)want[i] / (double)have;
    }
    if (policy != 0 && symbolic)
      return fail(im, n,
                  "keep_aspect_ratio_policy over an axis of symbolic size");
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

//===--- GridSample and AffineGrid (onnxcov) ---===//

enum { GS_NEAREST, GS_LINEAR, GS_CUBIC };
enum { GS_ZEROS, GS_BORDER, GS_REFLECTION };

// ONNX's reflection of |u| into [lo, hi]: by the nearer border, as many
// times as it takes (lo == hi: every point is lo).
static tj_value_t gs_reflect(tj_onnx_importer_t* im, tj_value_t u, double lo,
                             double hi, tj_dtype_t dt) {
  double range = hi - lo;
  if (!(range > 0))
    return tj_graph_add(G, tj_graph_mul(G, u, scalar(im, dt, 0)),
                        scalar(im, dt, lo));
  tj_value_t vlo = scalar(im, dt, lo), vhi = scalar(im, dt, hi);
  tj_value_t below = tj_graph_lt(G, u, vlo), above = tj_graph_gt(G, u, vhi);
  tj_value_t dx = tj_graph_where(G, below, tj_graph_sub(G, vlo, u),
                                 tj_graph_sub(G, u, vhi));
  tj_value_t nr = tj_graph_floor(G, tj_graph_div(G, dx, scalar(im, dt, range)));
  tj_value_t r =
      tj_graph_sub(G, dx, tj_graph_mul(G, nr, scalar(im, dt, range)));
  tj_value_t even = tj_graph_eq(G, tj_graph_fmod(G, nr, scalar(im, dt, 2)),
                                scalar(im, dt, 0));
  tj_value_t up = tj_graph_add(G, vlo, r), down = tj_graph_sub(G, vhi, r);
  tj_value_t from_lo = tj_graph_where(G, even, up, down);
  tj_value_t from_hi = tj_graph_where(G, even, down, up);
  return tj_graph_where(G, below, from_lo,
                        tj_graph_where(G, above, from_hi, u));
}

// Keys' cubic convolution weight (a = -0.75) of tap |k| (0..3, at offsets
// -1..2) for the fraction |t|.
static tj_value_t gs_cubic_weight(tj_onnx_importer_t* im, tj_value_t t, int k,
                                  tj_dtype_t dt) {
  const double a = -0.75;
  // The distance to the tap: 1 + t, t, 1 - t, 2 - t.
  static const double kOff[4] = {1, 0, 1, 2}, kSign[4] = {1, 1, -1, -1};
  tj_value_t x = tj_graph_add(G, scalar(im, dt, kOff[k]),
                              tj_graph_mul(G, t, scalar(im, dt, kSign[k])));
  if (k == 1 || k == 2) {
    // ((a + 2) x - (a + 3)) x^2 + 1
    tj_value_t p = tj_graph_sub(G, tj_graph_mul(G, x, scalar(im, dt, a + 2)),
                                scalar(im, dt, a + 3));
    return tj_graph_add(G, tj_graph_mul(G, p, tj_graph_mul(G, x, x)),
                        scalar(im, dt, 1));
  }
  // ((a x - 5a) x + 8a) x - 4a
  tj_value_t p = tj_graph_sub(G, tj_graph_mul(G, x, scalar(im, dt, a)),
                              scalar(im, dt, 5 * a));
  p = tj_graph_add(G, tj_graph_mul(G, p, x), scalar(im, dt, 8 * a));
  return tj_graph_sub(G, tj_graph_mul(G, p, x), scalar(im, dt, 4 * a));
}

// GridSample (opsets 16 to 22): y[n, c, o] = the interpolation of x[n, c]
// at grid[n, o] (normalized to [-1, 1], the last spatial axis first). Each
// spatial axis gives 1 (nearest), 2 (linear) or 4 (cubic) taps, each an
// index and a weight computed elementwise from the grid (padding: zeros
// weighs taps outside by 0, border clamps them, reflection folds them
// back); every combination of taps is a gather_elements of x flattened
// over its spatial axes, weighted and summed. x's spatial dims constant.
static tj_status_t cv_grid_sample(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                  const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  const tj_onnx_val_t* xv = n->inputs[0];
  const tj_onnx_val_t* gv = n->inputs[1];
  int32_t r = xv->rank - 2;
  if (r < 1 || r > 3 || (im->opset < 20 && r != 2))
    return fail(im, n, "%d spatial axes (%s)", (int)r,
                im->opset < 20 ? "2 before opset 20" : "1 to 3");
  if (gv->rank != r + 2 || gv->dims[r + 1] != r)
    return bad(im, n, "the grid must be [N, %d spatial dims, %d]", (int)r,
               (int)r);
  if (!is_float(xv->dtype) || !is_float(gv->dtype))
    return bad(im, n, "x and the grid must be float");
  bool new_names = im->opset >= 20;
  int mode;
  if (attr_s_is(n, "mode", new_names ? "linear" : "bilinear", "nearest"))
    mode = GS_NEAREST;
  else if (attr_s_is(n, "mode", new_names ? "linear" : "bilinear",
                     new_names ? "linear" : "bilinear"))
    mode = GS_LINEAR;
  else if (attr_s_is(n, "mode", "", new_names ? "cubic" : "bicubic"))
    mode = GS_CUBIC;
  else
    return fail(im, n, "mode (%s)",
                new_names ? "nearest, linear or cubic"
                          : "nearest, bilinear or bicubic");
  int pad;
  if (attr_s_is(n, "padding_mode", "zeros", "zeros"))
    pad = GS_ZEROS;
  else if (attr_s_is(n, "padding_mode", "zeros", "border"))
    pad = GS_BORDER;
  else if (attr_s_is(n, "padding_mode", "zeros", "reflection"))
    pad = GS_REFLECTION;
  else
    return fail(im, n, "padding_mode (zeros, border or reflection)");
  bool align = attr_i(n, "align_corners", 0) != 0;
  for (int32_t i = 0; i < r; ++i) {
    if (xv->dims[2 + i] < 0)
      return fail(im, n, "x's spatial dim %d is symbolic", (int)i);
  }
  tj_dtype_t dt = gv->dtype == TJ_DTYPE_F64 || xv->dtype == TJ_DTYPE_F64
                      ? TJ_DTYPE_F64
                      : TJ_DTYPE_F32;
  int64_t nb = xv->dims[0], c = xv->dims[1];
  int64_t outs = dims_product(im, gv->dims, 1, r + 1);
  int64_t plane = dims_product(im, xv->dims, 2, r + 2);
  const int64_t col[3] = {gv->dims[0], 1, outs};
  tj_value_t grid = tj_graph_cast(G, in(im, n, 1), dt);
  // Per spatial axis: its taps' indices [N, 1, O] (i64, in range) and
  // weights (dt).
  tj_value_t idx[3][4], wt[3][4];
  int taps = mode == GS_NEAREST ? 1 : mode == GS_LINEAR ? 2 : 4;
  int64_t stride = 1;
  int64_t strides[3];
  for (int32_t i = r - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= xv->dims[2 + i];
  }
  for (int32_t i = 0; i < r; ++i) {
    int64_t len = xv->dims[2 + i];
    double lo = align ? 0 : -0.5, hi = align ? len - 1.0 : len - 0.5;
    // The grid's component for axis i is r - 1 - i (x first).
    int64_t starts[TJ_MAX_RANK] = {0}, stops[TJ_MAX_RANK];
    for (int32_t a = 0; a < r + 2; ++a) stops[a] = INT64_MAX;
    starts[r + 1] = r - 1 - i;
    stops[r + 1] = r - i;
    tj_value_t g = tj_graph_reshape(
        G, tj_graph_slice(G, grid, starts, stops, NULL), 3, col);
    // Denormalized: (g + 1) (len - 1) / 2, or ((g + 1) len - 1) / 2.
    tj_value_t u = tj_graph_add(G, g, scalar(im, dt, 1));
    u = align ? tj_graph_mul(G, u, scalar(im, dt, (len - 1) / 2.0))
              : tj_graph_mul(
                    G,
                    tj_graph_sub(G, tj_graph_mul(G, u, scalar(im, dt, len)),
                                 scalar(im, dt, 1)),
                    scalar(im, dt, 0.5));
    if (mode == GS_NEAREST) u = tj_graph_round(G, u);
    if (pad == GS_BORDER) {
      tj_value_t out_of =
          tj_graph_logical_or(G, tj_graph_lt(G, u, scalar(im, dt, lo)),
                              tj_graph_gt(G, u, scalar(im, dt, hi)));
      tj_value_t clamped =
          tj_graph_minimum(G, tj_graph_maximum(G, u, scalar(im, dt, 0)),
                           scalar(im, dt, len - 1.0));
      u = tj_graph_where(G, out_of, clamped, u);
    } else if (pad == GS_REFLECTION) {
      u = gs_reflect(im, u, lo, hi, dt);
    }
    tj_value_t base, t = tj_value_none();
    if (mode == GS_NEAREST) {
      base = tj_graph_cast(G, u, TJ_DTYPE_I64);  // truncates, as ONNX's
    } else {
      tj_value_t f = tj_graph_floor(G, u);
      t = tj_graph_sub(G, u, f);
      base = tj_graph_cast(G, f, TJ_DTYPE_I64);
    }
    for (int k = 0; k < taps; ++k) {
      int64_t off = mode == GS_CUBIC ? k - 1 : k;
      tj_value_t ix =
          off ? tj_graph_add(G, base, scalar(im, TJ_DTYPE_I64, (double)off))
              : base;
      tj_value_t w = mode == GS_NEAREST ? scalar(im, dt, 1)
                     : mode == GS_LINEAR
                         ? (k ? t : tj_graph_sub(G, scalar(im, dt, 1), t))
                         : gs_cubic_weight(im, t, k, dt);
      tj_value_t zero_i = scalar(im, TJ_DTYPE_I64, 0);
      tj_value_t last_i = scalar(im, TJ_DTYPE_I64, (double)(len - 1));
      if (pad == GS_ZEROS) {
        tj_value_t inside = tj_graph_logical_and(G, tj_graph_ge(G, ix, zero_i),
                                                 tj_graph_le(G, ix, last_i));
        w = tj_graph_where(G, inside, w, scalar(im, dt, 0));
      } else if (pad == GS_REFLECTION && mode != GS_NEAREST) {
        // The tap folded back into range (ONNX reflects each tap too).
        tj_value_t fx = gs_reflect(im, tj_graph_cast(G, ix, dt), lo, hi, dt);
        ix = tj_graph_cast(G, tj_graph_maximum(G, fx, scalar(im, dt, 0)),
                           TJ_DTYPE_I64);
      }
      ix = tj_graph_minimum(G, tj_graph_maximum(G, ix, zero_i), last_i);
      idx[i][k] =
          tj_graph_mul(G, ix, scalar(im, TJ_DTYPE_I64, (double)strides[i]));
      wt[i][k] = w;
    }
  }
  const int64_t flat[3] = {nb, c, plane};
  const int64_t wide[3] = {gv->dims[0], c, outs};
  tj_value_t xf = tj_graph_reshape(G, in(im, n, 0), 3, flat);
  tj_value_t y = tj_value_none();
  int combos = 1;
  for (int32_t i = 0; i < r; ++i) combos *= taps;
  for (int combo = 0; combo < combos; ++combo) {
    tj_value_t f = tj_value_none(), w = tj_value_none();
    for (int32_t i = 0, rest = combo; i < r; ++i, rest /= taps) {
      int k = rest % taps;
      f = i ? tj_graph_add(G, f, idx[i][k]) : idx[i][k];
      w = i ? tj_graph_mul(G, w, wt[i][k]) : wt[i][k];
    }
    tj_value_t v =
        tj_graph_cast(G,
                      tj_graph_gather_elements(
                          G, xf, tj_graph_broadcast_to(G, f, 3, wide), 2),
                      dt);
    tj_value_t term = tj_graph_mul(G, v, w);
    y = combo ? tj_graph_add(G, y, term) : term;
  }
  int64_t ydims[TJ_MAX_RANK];
  ydims[0] = gv->dims[0];
  ydims[1] = c;
  for (int32_t i = 0; i < r; ++i) ydims[2 + i] = gv->dims[1 + i];
  y = tj_graph_reshape(G, y, r + 2, ydims);
  return out(im, n, 0, tj_graph_cast(G, y, xv->dtype));
}

// AffineGrid (opset 20): grid[n, p] = theta[n] (x_p, y_p[, z_p], 1), the
// base coordinates of each output point (the last spatial axis first)
// spread over [-1, 1] (align_corners: on the end pixels' centers, else
// their edges): one matmul with a constant base grid. size is constant.
static tj_status_t cv_affine_grid(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                  const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  const tj_onnx_val_t* tv = n->inputs[0];
  int64_t size[MAX_INTS];
  int32_t count = 0;
  TJ_RETURN_IF_ERROR(known_ints(im, n, 1, "size", &count, size, false));
  int32_t r = count - 2;
  if (r != 2 && r != 3)
    return bad(im, n, "size has %d entries (4 or 5)", (int)count);
  if (!is_float(tv->dtype) || tv->rank != 3 || tv->dims[1] != r ||
      tv->dims[2] != r + 1)
    return bad(im, n, "theta must be float [N, %d, %d]", (int)r, (int)r + 1);
  bool align = attr_i(n, "align_corners", 0) != 0;
  int64_t points = 1;
  for (int32_t i = 0; i < r; ++i) {
    if (size[2 + i] <= 0 || size[2 + i] > TJ_ONNX_FOLD_LIMIT)
      return fail(im, n, "spatial size %lld", (long long)size[2 + i]);
    points *= size[2 + i];
  }
  if (points > TJ_ONNX_FOLD_LIMIT)
    return fail(im, n, "a grid of %lld points (at most %d)", (long long)points,
                TJ_ONNX_FOLD_LIMIT);
  double* base =
      tj_arena_alloc(&im->arena, sizeof(double) * (size_t)(points * (r + 1)));
  if (!base) return tj_status_oom();
  for (int64_t p = 0; p < points; ++p) {
    int64_t rest = p;
    for (int32_t i = r - 1; i >= 0; --i) {
      int64_t len = size[2 + i], at = rest % len;
      rest /= len;
      double v = align ? (len > 1 ? -1.0 + 2.0 * at / (len - 1) : -1.0)
                       : -1.0 + (2.0 * at + 1.0) / len;
      base[p * (r + 1) + (r - 1 - i)] = v;  // x (the last axis) first
    }
    base[p * (r + 1) + r] = 1.0;
  }
  const int64_t bdims[2] = {points, r + 1};
  tj_value_t b = tj_graph_cast(
      G,
      tj_graph_constant(G, TJ_DTYPE_F64, 2, bdims, base,
                        sizeof(double) * (size_t)(points * (r + 1))),
      tv->dtype);
  static const int32_t kSwap[3] = {0, 2, 1};
  tj_value_t g =
      tj_graph_matmul(G, b, tj_graph_transpose(G, in(im, n, 0), kSwap));
  int64_t gdims[TJ_MAX_RANK];
  gdims[0] = tv->dims[0];
  for (int32_t i = 0; i < r; ++i) gdims[1 + i] = size[2 + i];
  gdims[r + 1] = r;
  return out(im, n, 0, tj_graph_reshape(G, g, r + 2, gdims));
}

//===--- small ops (onnxcov) ---===//

// x * sigmoid(alpha x): silu for alpha 1.
static tj_value_t swish(tj_onnx_importer_t* im, tj_value_t x, tj_dtype_t d,
                        double alpha) {
  if (alpha == 1.0) return tj_graph_silu(G, x);
  return tj_graph_mul(
      G, x, tj_graph_sigmoid(G, tj_graph_mul(G, x, scalar(im, d, alpha))));
}

// Swish (opset 24): x * sigmoid(alpha x). SwiGLU (opset 28): Swish(a) * b,
// a and b of one shape and dtype.
static tj_status_t cv_swish(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                            const op_entry_t* e) {
  bool glu = e->param != 0;
  TJ_RETURN_IF_ERROR(need_inputs(im, n, glu ? 2 : 1, glu ? 2 : 1));
  tj_dtype_t d = dtype_of(n, 0);
  if (!is_float(d))
    return bad(im, n, "the input is %s (a float type)", tj_dtype_name(d));
  double alpha = attr_f(n, "alpha", 1.0);
  if (!isfinite(alpha)) return bad(im, n, "alpha %g", alpha);
  tj_value_t y = swish(im, in(im, n, 0), d, alpha);
  if (glu) {
    const tj_onnx_val_t* a = n->inputs[0];
    const tj_onnx_val_t* b = n->inputs[1];
    if (b->dtype != d || b->rank != a->rank ||
        memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank))
      return bad(im, n,
                 "A and B must have one shape and dtype (no "
                 "broadcasting)");
    y = tj_graph_mul(G, y, in(im, n, 1));
  }
  return out(im, n, 0, y);
}

// LRN (opset 13): x / (bias + alpha / size * sum of x^2 over the channels
// c - floor((size-1)/2) .. c + ceil((size-1)/2))^beta, the window sum as
// |size| slices of the zero-padded squares.
static tj_status_t cv_lrn(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                          const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  const tj_onnx_val_t* xv = n->inputs[0];
  if (xv->rank < 3 || !is_float(xv->dtype))
    return bad(im, n, "the input must be float [N, C, D1, ...]");
  int64_t size = attr_i(n, "size", 0);
  if (size <= 0 || size > 1024)
    return bad(im, n, "size %lld (1 to 1024)", (long long)size);
  if (xv->dims[1] < 0) return fail(im, n, "the channel dim is symbolic");
  double alpha = attr_f(n, "alpha", 1e-4), beta = attr_f(n, "beta", 0.75);
  double bias = attr_f(n, "bias", 1.0);
  tj_dtype_t d = xv->dtype;
  tj_dtype_t wide = d == TJ_DTYPE_F16 || d == TJ_DTYPE_BF16 ? TJ_DTYPE_F32 : d;
  tj_value_t x = tj_graph_cast(G, in(im, n, 0), wide);
  int32_t rank = xv->rank;
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  int64_t low[TJ_MAX_RANK] = {0}, high[TJ_MAX_RANK] = {0};
  low[1] = lo;
  high[1] = hi;
  tj_value_t sq = tj_graph_pad(G, tj_graph_mul(G, x, x), low, high, 0);
  tj_value_t sum = tj_value_none();
  for (int64_t k = 0; k < size; ++k) {
    int64_t starts[TJ_MAX_RANK] = {0}, stops[TJ_MAX_RANK];
    for (int32_t a = 0; a < rank; ++a) stops[a] = INT64_MAX;
    starts[1] = k;
    stops[1] = k + xv->dims[1];
    tj_value_t s = tj_graph_slice(G, sq, starts, stops, NULL);
    sum = k ? tj_graph_add(G, sum, s) : s;
  }
  tj_value_t den = tj_graph_add(
      G, scalar(im, wide, bias),
      tj_graph_mul(G, sum, scalar(im, wide, alpha / (double)size)));
  tj_value_t y =
      tj_graph_div(G, x, tj_graph_pow(G, den, scalar(im, wide, beta)));
  return out(im, n, 0, tj_graph_cast(G, y, d));
}

// GroupNormalization (opsets 18 and 21): x [N, C, ...] normalized over
// each group of C / num_groups channels and the spatial dims, then scaled
// and shifted per channel (opset 21) or per group (opset 18). stash_type
// 1: f16/bf16 compute in f32.
static tj_status_t cv_group_norm(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                 const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 3, 3));
  const tj_onnx_val_t* xv = n->inputs[0];
  int32_t rank = xv->rank;
  if (rank < 2 || !is_float(xv->dtype))
    return bad(im, n, "the input must be float [N, C, ...]");
  if (attr_i(n, "stash_type", 1) != 1)
    return fail(im, n, "stash_type %lld (only 1, float, is supported)",
                (long long)attr_i(n, "stash_type", 1));
  int64_t groups = attr_i(n, "num_groups", 0), c = xv->dims[1];
  if (c < 0) return fail(im, n, "the channel dim is symbolic");
  if (groups <= 0 || c % groups)
    return bad(im, n, "num_groups %lld does not divide %lld channels",
               (long long)groups, (long long)c);
  bool channelwise = im->opset >= 21;
  int64_t want = channelwise ? c : groups;
  for (int32_t i = 1; i < 3; ++i) {
    if (rank_of(n, i) != 1 || n->inputs[i]->dims[0] != want)
      return bad(im, n, "%s must be [%lld]", i == 1 ? "scale" : "bias",
                 (long long)want);
  }
  tj_dtype_t d = xv->dtype;
  tj_dtype_t wide = d == TJ_DTYPE_F16 || d == TJ_DTYPE_BF16 ? TJ_DTYPE_F32 : d;
  // [N, G, C/G, spatial]: normalized over the last two axes, scaled per
  // channel ([G, C/G, 1]) or group ([G, 1, 1]) there, reshaped back last.
  int64_t cg = c / groups;
  const int64_t gdims[4] = {xv->dims[0], groups, cg,
                            dims_product(im, xv->dims, 2, rank)};
  tj_value_t x =
      tj_graph_reshape(G, tj_graph_cast(G, in(im, n, 0), wide), 4, gdims);
  static const int32_t kAxes[2] = {2, 3};
  tj_value_t y = normalize(im, x, wide, 2, kAxes, attr_f(n, "epsilon", 1e-5));
  const int64_t sdims[3] = {groups, channelwise ? cg : 1, 1};
  tj_value_t scale =
      tj_graph_reshape(G, tj_graph_cast(G, in(im, n, 1), wide), 3, sdims);
  tj_value_t bias =
      tj_graph_reshape(G, tj_graph_cast(G, in(im, n, 2), wide), 3, sdims);
  y = tj_graph_add(G, tj_graph_mul(G, y, scale), bias);
  y = tj_graph_reshape(G, y, rank, xv->dims);
  return out(im, n, 0, tj_graph_cast(G, y, d));
}

// LpNormalization (opset 22): x / (sum |x|) or x / sqrt(sum x^2) along
// axis; 0 where the norm is 0.
static tj_status_t cv_lp_norm(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                              const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  const tj_onnx_val_t* xv = n->inputs[0];
  if (!is_float(xv->dtype) || xv->rank == 0)
    return bad(im, n, "the input must be a float tensor of rank >= 1");
  int64_t p = attr_i(n, "p", 2);
  if (p != 1 && p != 2) return bad(im, n, "p %lld (1 or 2)", (long long)p);
  int32_t axis;
  TJ_RETURN_IF_ERROR(norm_axis(im, n, attr_i(n, "axis", -1), xv->rank, &axis));
  tj_dtype_t d = xv->dtype;
  tj_value_t x = in(im, n, 0);
  tj_value_t norm =
      p == 1 ? tj_graph_sum(G, tj_graph_abs(G, x), 1, &axis, true)
             : tj_graph_sqrt(
                   G, tj_graph_sum(G, tj_graph_mul(G, x, x), 1, &axis, true));
  tj_value_t zero = scalar(im, d, 0);
  return out(im, n, 0,
             tj_graph_where(G, tj_graph_eq(G, norm, zero), zero,
                            tj_graph_div(G, x, norm)));
}

// CenterCropPad (opset 18): each listed axis cropped (start floor((dim -
// s) / 2)) or zero-padded (floor((s - dim) / 2) before) to the constant
// shape.
static tj_status_t cv_center_crop_pad(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                      const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  const tj_onnx_val_t* xv = n->inputs[0];
  int32_t rank = xv->rank;
  int64_t shape[MAX_INTS], raw[MAX_INTS];
  int32_t count = 0, na = 0;
  TJ_RETURN_IF_ERROR(known_ints(im, n, 1, "shape", &count, shape, false));
  if (attr(n, "axes")) {
    TJ_RETURN_IF_ERROR(attr_ints(im, n, "axes", &na, raw));
  } else {
    na = rank;
    for (int32_t i = 0; i < rank; ++i) raw[i] = i;
  }
  if (na != count)
    return bad(im, n, "shape has %d entries for %d axes", (int)count, (int)na);
  int64_t starts[TJ_MAX_RANK] = {0}, stops[TJ_MAX_RANK];
  int64_t low[TJ_MAX_RANK] = {0}, high[TJ_MAX_RANK] = {0};
  bool cut = false, grow = false;
  for (int32_t a = 0; a < rank; ++a) stops[a] = INT64_MAX;
  for (int32_t i = 0; i < na; ++i) {
    int32_t a;
    TJ_RETURN_IF_ERROR(norm_axis(im, n, raw[i], rank, &a));
    int64_t dim = xv->dims[a], s = shape[i];
    if (s < 0) return bad(im, n, "shape entry %lld", (long long)s);
    if (dim < 0) return fail(im, n, "axis %d is symbolic", (int)a);
    if (s < dim) {
      starts[a] = (dim - s) / 2;
      stops[a] = starts[a] + s;
      cut = true;
    } else if (s > dim) {
      low[a] = (s - dim) / 2;
      high[a] = s - dim - low[a];
      grow = true;
    }
  }
  tj_value_t y = in(im, n, 0);
  if (cut) y = tj_graph_slice(G, y, starts, stops, NULL);
  if (grow) y = tj_graph_pad(G, y, low, high, 0);
  if (!cut && !grow) y = tj_graph_reshape(G, y, rank, xv->dims);
  return out(im, n, 0, y);
}

// ReverseSequence (opset 10): along time_axis, the first sequence_lens[b]
// entries of batch b reversed: a gather_elements at
// t < len ? len - 1 - t : t.
static tj_status_t cv_reverse_sequence(tj_onnx_importer_t* im,
                                       tj_onnx_node_t* n, const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 2));
  const tj_onnx_val_t* xv = n->inputs[0];
  int32_t rank = xv->rank;
  int64_t batch_axis = attr_i(n, "batch_axis", 1);
  int64_t time_axis = attr_i(n, "time_axis", 0);
  if (rank < 2 || (batch_axis != 0 && batch_axis != 1) ||
      (time_axis != 0 && time_axis != 1) || batch_axis == time_axis)
    return bad(im, n,
               "batch_axis %lld and time_axis %lld (0 and 1) of rank "
               "%d",
               (long long)batch_axis, (long long)time_axis, (int)rank);
  if (rank_of(n, 1) != 1 ||
      !(dtype_of(n, 1) == TJ_DTYPE_I64 || dtype_of(n, 1) == TJ_DTYPE_I32))
    return bad(im, n, "sequence_lens must be a 1-D int64 tensor");
  int64_t lshape[TJ_MAX_RANK];
  for (int32_t a = 0; a < rank; ++a) lshape[a] = 1;
  lshape[batch_axis] = n->inputs[1]->dims[0];
  tj_value_t len = tj_graph_reshape(
      G, tj_graph_cast(G, in(im, n, 1), TJ_DTYPE_I64), rank, lshape);
  tj_value_t t =
      tj_graph_iota(G, TJ_DTYPE_I64, rank, xv->dims, (int32_t)time_axis);
  tj_value_t rev =
      tj_graph_sub(G, tj_graph_sub(G, len, scalar(im, TJ_DTYPE_I64, 1)), t);
  tj_value_t idx = tj_graph_where(G, tj_graph_lt(G, t, len), rev, t);
  return out(
      im, n, 0,
      tj_graph_gather_elements(G, in(im, n, 0), idx, (int32_t)time_axis));
}

enum { WIN_HANN, WIN_HAMMING, WIN_BLACKMAN };

// HannWindow, HammingWindow, BlackmanWindow (opset 17): for n in
// [0, size), with N = size (periodic, the default) or size - 1: Hann
// sin^2(pi n / N), Hamming 25/46 - 21/46 cos(2 pi n / N), Blackman
// 0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N); computed in f64 from
// an iota (size must be known: it is the output's length), then cast to
// output_datatype.
static tj_status_t cv_window(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 1));
  int64_t size_v[MAX_INTS];
  int32_t count = 0;
  TJ_RETURN_IF_ERROR(known_ints(im, n, 0, "size", &count, size_v, false));
  if (count != 1 || n->inputs[0]->rank != 0)
    return bad(im, n, "size must be a scalar");
  int64_t size = size_v[0];
  if (size < 0) return bad(im, n, "size %lld", (long long)size);
  tj_dtype_t d;
  int64_t odt = attr_i(n, "output_datatype", 1);
  if (!onnx_to_dtype(odt, &d) || d == TJ_DTYPE_BOOL)
    return fail(im, n, "output_datatype %lld", (long long)odt);
  double big_n = attr_i(n, "periodic", 1) ? (double)size : (double)size - 1;
  tj_value_t i = tj_graph_iota(G, TJ_DTYPE_F64, 1, &size, 0);
  // The angle 2 pi n / N (N = 0, a single-point symmetric window: inf or
  // NaN, as ONNX's reference gives).
  tj_value_t ang =
      tj_graph_div(G, tj_graph_mul(G, i, scalar(im, TJ_DTYPE_F64, 2 * M_PI)),
                   scalar(im, TJ_DTYPE_F64, big_n));
  tj_value_t y;
  if (e->param == WIN_HANN) {
    tj_value_t s =
        tj_graph_sin(G, tj_graph_mul(G, ang, scalar(im, TJ_DTYPE_F64, 0.5)));
    y = tj_graph_mul(G, s, s);
  } else if (e->param == WIN_HAMMING) {
    double alpha = 25.0 / 46.0;
    y = tj_graph_sub(G, scalar(im, TJ_DTYPE_F64, alpha),
                     tj_graph_mul(G, tj_graph_cos(G, ang),
                                  scalar(im, TJ_DTYPE_F64, 1 - alpha)));
  } else {
    tj_value_t c2 =
        tj_graph_cos(G, tj_graph_mul(G, ang, scalar(im, TJ_DTYPE_F64, 2)));
    y = tj_graph_add(G,
                     tj_graph_sub(G, scalar(im, TJ_DTYPE_F64, 0.42),
                                  tj_graph_mul(G, tj_graph_cos(G, ang),
                                               scalar(im, TJ_DTYPE_F64, 0.5))),
                     tj_graph_mul(G, c2, scalar(im, TJ_DTYPE_F64, 0.08)));
  }
  return out(im, n, 0, tj_graph_cast(G, y, d));
}

// TensorScatter (opset 24): a KV-cache write. present = past_cache with
// update's L entries along |axis| written from write_indices[b] (0 when
// absent) on, wrapping modulo the cache length M in circular mode. As a
// gather: cache position s takes update[o] where o = s - w (circular:
// (s - w) mod M) is in [0, L), else keeps past_cache[s]; one fused kernel.
static tj_status_t cv_tensor_scatter(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                     const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 3));
  const tj_onnx_val_t* pv = n->inputs[0];
  const tj_onnx_val_t* uv = n->inputs[1];
  int32_t rank = pv->rank, axis;
  if (rank < 2 || uv->rank != rank || uv->dtype != pv->dtype)
    return bad(im, n,
               "past_cache and update must have one rank (>= 2) and "
               "dtype");
  TJ_RETURN_IF_ERROR(norm_axis(im, n, attr_i(n, "axis", -2), rank, &axis));
  if (axis == 0) return bad(im, n, "axis 0 is the batch axis");
  bool circular = attr_s_is(n, "mode", "linear", "circular");
  if (!circular && !attr_s_is(n, "mode", "linear", "linear"))
    return fail(im, n, "mode (linear or circular)");
  for (int32_t a = 0; a < rank; ++a) {
    if (a != axis && uv->dims[a] != pv->dims[a])
      return bad(im, n, "update's dim %d differs from past_cache's", (int)a);
  }
  int64_t m = pv->dims[axis], len = uv->dims[axis];
  if (m >= 0 && len >= 0 && len > m)
    return bad(im, n, "update has %lld entries along axis %d, the cache %lld",
               (long long)len, (int)axis, (long long)m);
  tj_value_t s = tj_graph_iota(G, TJ_DTYPE_I64, rank, pv->dims, axis);
  tj_value_t o = s;
  if (has_in(n, 2)) {
    if (rank_of(n, 2) != 1 ||
        !(dtype_of(n, 2) == TJ_DTYPE_I64 || dtype_of(n, 2) == TJ_DTYPE_I32))
      return bad(im, n, "write_indices must be a 1-D int64 tensor");
    int64_t wshape[TJ_MAX_RANK];
    for (int32_t a = 0; a < rank; ++a) wshape[a] = 1;
    wshape[0] = n->inputs[2]->dims[0];
    tj_value_t w = tj_graph_reshape(
        G, tj_graph_cast(G, in(im, n, 2), TJ_DTYPE_I64), rank, wshape);
    o = tj_graph_sub(G, s, w);
  }
  if (circular) o = tj_graph_mod(G, o, tj_onnx_dim_value(G, m));
  tj_value_t inside =
      tj_graph_logical_and(G, tj_graph_ge(G, o, scalar(im, TJ_DTYPE_I64, 0)),
                           tj_graph_lt(G, o, tj_onnx_dim_value(G, len)));
  tj_value_t idx = tj_graph_where(G, inside, o, scalar(im, TJ_DTYPE_I64, 0));
  tj_value_t taken = tj_graph_gather_elements(G, in(im, n, 1), idx, axis);
  return out(im, n, 0, tj_graph_where(G, inside, taken, in(im, n, 0)));
}

// The [len * c, m * cout] matrix of a |big_n|-point DFT (see cv_dft) of
// |len| inputs of |c| (1 or 2) components, in the arena: m bins (N/2 + 1
// onesided forward) of cout (2; irfft 1) components. NULL after an error
// (*out_status).
static double* dft_matrix(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                          int64_t len, int64_t c, int64_t big_n, bool inverse,
                          bool onesided, int64_t* out_m, int64_t* out_cout,
                          tj_status_t* out_status) {
  bool irfft = inverse && onesided;
  int64_t m = !inverse && onesided ? big_n / 2 + 1 : big_n;
  int64_t cout = irfft ? 1 : 2;
  int64_t rows = len * c, cols = m * cout;
  *out_m = m;
  *out_cout = cout;
  *out_status = NULL;
  if (rows > (1 << 14) || cols > (1 << 14) || rows * cols > (1 << 22)) {
    *out_status = fail(im, n,
                       "a %lld-point transform of %lld inputs (the matrix "
                       "form is limited to 4M coefficients)",
                       (long long)big_n, (long long)len);
    return NULL;
  }
  double* w =
      tj_arena_alloc(&im->arena, sizeof(double) * (size_t)(rows * cols));
  if (!w) {
    *out_status = tj_status_oom();
    return NULL;
  }
  memset(w, 0, sizeof(double) * (size_t)(rows * cols));
  double inv_n = 1.0 / (double)big_n;
  for (int64_t j = 0; j < len && j < big_n; ++j) {
    if (irfft && j > big_n / 2) break;
    // irfft: bins 0 and N/2 (N even) once, the others for their mirror
    // image too.
    double twice = irfft && j != 0 && 2 * j != big_n ? 2.0 : 1.0;
    for (int64_t k = 0; k < m; ++k) {
      double theta = 2.0 * M_PI * (double)((j * k) % big_n) * inv_n;
      double co = cos(theta), si = sin(theta);
      double* re_row = w + (j * c) * cols;                      // from Re x
      double* im_row = c == 2 ? w + (j * c + 1) * cols : NULL;  // from Im x
      if (irfft) {
        re_row[k] = twice * co * inv_n;
        if (im_row) im_row[k] = -twice * si * inv_n;
      } else if (inverse) {
        re_row[2 * k] = co * inv_n;
        re_row[2 * k + 1] = si * inv_n;
        if (im_row) {
          im_row[2 * k] = -si * inv_n;
          im_row[2 * k + 1] = co * inv_n;
        }
      } else {
        re_row[2 * k] = co;
        re_row[2 * k + 1] = -si;
        if (im_row) {
          im_row[2 * k] = si;
          im_row[2 * k + 1] = co;
        }
      }
    }
  }
  return w;
}

// DFT (opsets 17 to 20) as one matmul: the signal axis moved next to the
// last (real, or real and imaginary) axis, the two flattened, times a
// constant [L*C, M*Cout] matrix of cos and sin of 2 pi jk / N (N the
// dft_length: the input truncated or zero-padded to it): the forward
// transform (M = N, or N/2 + 1 onesided), the inverse (scaled by 1/N), or
// the inverse of a onesided spectrum (irfft: M = N real outputs, the
// Hermitian half counted twice). O(L M) per signal, native on every
// target.
static tj_status_t cv_dft(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                          const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 1, 3));
  const tj_onnx_val_t* xv = n->inputs[0];
  int32_t rank = xv->rank;
  if (rank < 2 || !is_float(xv->dtype))
    return bad(im, n, "the input must be float [..., signal, 1 or 2]");
  int64_t c = xv->dims[rank - 1];
  if (c != 1 && c != 2)
    return bad(im, n, "the last dim is %lld (1: real, 2: complex)",
               (long long)c);
  bool inverse = attr_i(n, "inverse", 0) != 0;
  bool onesided = attr_i(n, "onesided", 0) != 0;
  int64_t raw_axis = 1;
  int64_t vals[MAX_INTS];
  int32_t count = 0;
  if (im->opset >= 20) {
    if (attr(n, "axis")) return fail(im, n, "unsupported attribute axis");
    raw_axis = -2;
    if (has_in(n, 2)) {
      TJ_RETURN_IF_ERROR(known_ints(im, n, 2, "axis", &count, vals, false));
      if (count != 1) return bad(im, n, "axis must be a scalar");
      raw_axis = vals[0];
    }
  } else {
    if (has_in(n, 2)) return bad(im, n, "3 inputs before opset 20");
    raw_axis = attr_i(n, "axis", 1);
  }
  int32_t axis;
  TJ_RETURN_IF_ERROR(norm_axis(im, n, raw_axis, rank, &axis));
  if (axis == rank - 1) return bad(im, n, "axis is the complex axis");
  int64_t len = xv->dims[axis];
  if (len < 0) return fail(im, n, "the signal axis is symbolic");
  int64_t big_n = inverse && onesided ? 2 * (len - 1) : len;
  if (has_in(n, 1)) {
    TJ_RETURN_IF_ERROR(known_ints(im, n, 1, "dft_length", &count, vals, false));
    if (count != 1) return bad(im, n, "dft_length must be a scalar");
    big_n = vals[0];
  }
  if (big_n <= 0) return bad(im, n, "dft_length %lld", (long long)big_n);
  int64_t m, cout;
  tj_status_t st = NULL;
  double* w =
      dft_matrix(im, n, len, c, big_n, inverse, onesided, &m, &cout, &st);
  if (!w) return st;
  int64_t rows = len * c, cols = m * cout;
  // [..., axis, ..., C] -> [..., rest, L, C] -> [..., L*C].
  int32_t perm[TJ_MAX_RANK], back[TJ_MAX_RANK];
  int32_t k = 0;
  for (int32_t a = 0; a < rank - 1; ++a)
    if (a != axis) perm[k++] = a;
  perm[k++] = axis;
  perm[k++] = rank - 1;
  for (int32_t a = 0; a < rank; ++a) back[perm[a]] = a;
  tj_value_t x = tj_graph_transpose(G, in(im, n, 0), perm);
  int64_t td[TJ_MAX_RANK];
  tj_graph_value_dims(G, x, td);
  td[rank - 2] = rows;
  x = tj_graph_reshape(G, x, rank - 1, td);
  const int64_t wd[2] = {rows, cols};
  // The coefficients in x's dtype: an f64 matmul is no native kernel.
  // (ONNX's two inverse tests expect single-precision FFT rounding, about
  // 2e-7 on outputs that are exactly 0, beyond its 1e-7 tolerance.)
  tj_value_t wm =
      tj_graph_cast(G,
                    tj_graph_constant(G, TJ_DTYPE_F64, 2, wd, w,
                                      sizeof(double) * (size_t)(rows * cols)),
                    xv->dtype);
  tj_value_t y = tj_graph_matmul(G, x, wm);
  td[rank - 2] = m;
  td[rank - 1] = cout;
  y = tj_graph_reshape(G, y, rank, td);
  return out(im, n, 0, tj_graph_transpose(G, y, back));
}

// Col2Im (opset 18): the adjoint of im2col, as one conv_transpose. The
// input [N, C*K, L] (K the block's positions, c major) is viewed as
// [N, C*K, L1, ...] over the grid of block positions and transposed-
// convolved with a constant one-hot weight [C*K, 1, block...] in C groups:
// the entry of block position kk lands at i * stride + kk * dilation - pad,
// summed where blocks overlap. image_shape and block_shape constant.
static tj_status_t cv_col2im(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 3, 3));
  const tj_onnx_val_t* xv = n->inputs[0];
  int64_t image[MAX_INTS], block[MAX_INTS], raw[MAX_INTS];
  int32_t ni = 0, nk = 0, count = 0;
  TJ_RETURN_IF_ERROR(known_ints(im, n, 1, "image_shape", &ni, image, false));
  TJ_RETURN_IF_ERROR(known_ints(im, n, 2, "block_shape", &nk, block, false));
  int32_t r = ni;
  if (r < 1 || r > 3 || nk != r)
    return fail(im, n,
                "image_shape and block_shape of %d and %d entries (1 "
                "to 3 spatial axes)",
                (int)ni, (int)nk);
  if (xv->rank != 3 || !is_float(xv->dtype))
    return bad(im, n, "the input must be float [N, C*K, L]");
  tj_conv_attrs_t a;
  memset(&a, 0, sizeof a);
  int64_t kcount = 1, blocks = 1;
  TJ_RETURN_IF_ERROR(attr_ints(im, n, "strides", &count, raw));
  if (count && count != r) return bad(im, n, "strides has %d entries", count);
  for (int32_t i = 0; i < count; ++i) a.strides[i] = raw[i];
  TJ_RETURN_IF_ERROR(attr_ints(im, n, "dilations", &count, raw));
  if (count && count != r) return bad(im, n, "dilations has %d entries", count);
  for (int32_t i = 0; i < count; ++i) a.dilations[i] = raw[i];
  TJ_RETURN_IF_ERROR(attr_ints(im, n, "pads", &count, raw));
  if (count && count != 2 * r) return bad(im, n, "pads has %d entries", count);
  for (int32_t i = 0; i < count; ++i)
    (i < r ? a.pads_begin : a.pads_end)[i % r] = raw[i];
  int64_t grid[3];
  for (int32_t i = 0; i < r; ++i) {
    int64_t s = a.strides[i] ? a.strides[i] : 1;
    int64_t d = a.dilations[i] ? a.dilations[i] : 1;
    if (s <= 0 || d <= 0 || block[i] <= 0 || image[i] <= 0 ||
        a.pads_begin[i] < 0 || a.pads_end[i] < 0 || block[i] > 4096)
      return bad(im, n,
                 "axis %d: image %lld, block %lld, stride %lld, "
                 "dilation %lld, pads %lld/%lld",
                 (int)i, (long long)image[i], (long long)block[i], (long long)s,
                 (long long)d, (long long)a.pads_begin[i],
                 (long long)a.pads_end[i]);
    int64_t span =
        image[i] + a.pads_begin[i] + a.pads_end[i] - (d * (block[i] - 1) + 1);
    if (span < 0)
      return bad(im, n, "axis %d: the block exceeds the image", (int)i);
    grid[i] = span / s + 1;
    // The rows the last block does not reach are output padding.
    a.output_padding[i] = span % s;
    a.kernel[i] = block[i];
    kcount *= block[i];
    blocks *= grid[i];
  }
  int64_t ck = xv->dims[1];
  if (ck < 0 || ck % kcount)
    return bad(im, n, "dim 1 (%lld) is not a multiple of the block size %lld",
               (long long)ck, (long long)kcount);
  if (xv->dims[2] != blocks)
    return bad(im, n, "%lld blocks, the image and block shapes give %lld",
               (long long)xv->dims[2], (long long)blocks);
  int64_t c = ck / kcount;
  if (ck * kcount > (1 << 24))
    return fail(im, n, "a one-hot weight of %lld entries",
                (long long)(ck * kcount));
  a.groups = c;
  float* w = tj_arena_alloc(&im->arena, sizeof(float) * (size_t)(ck * kcount));
  if (!w) return tj_status_oom();
  memset(w, 0, sizeof(float) * (size_t)(ck * kcount));
  for (int64_t ch = 0; ch < ck; ++ch) w[ch * kcount + ch % kcount] = 1.0f;
  int64_t wd[TJ_MAX_RANK] = {ck, 1};
  for (int32_t i = 0; i < r; ++i) wd[2 + i] = block[i];
  tj_value_t wv =
      tj_graph_cast(G,
                    tj_graph_constant(G, TJ_DTYPE_F32, r + 2, wd, w,
                                      sizeof(float) * (size_t)(ck * kcount)),
                    xv->dtype);
  int64_t xd[TJ_MAX_RANK] = {xv->dims[0], ck};
  for (int32_t i = 0; i < r; ++i) xd[2 + i] = grid[i];
  tj_value_t x = tj_graph_reshape(G, in(im, n, 0), r + 2, xd);
  return out(im, n, 0, tj_graph_conv_transpose(G, x, wv, tj_value_none(), &a));
}

// STFT (opset 17): signal [B, L, 1 or 2] cut into F = 1 + (L - T) / step
// frames of T = frame_length (default the window's length, else L) by one
// gather with a constant [F, T] index, weighted by the window (default
// ones), and transformed as DFT does (one matmul; onesided by default):
// [B, F, bins, 2]. frame_step and frame_length must be known.
static tj_status_t cv_stft(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                           const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 4));
  const tj_onnx_val_t* xv = n->inputs[0];
  if (xv->rank != 3 || !is_float(xv->dtype) ||
      (xv->dims[2] != 1 && xv->dims[2] != 2))
    return bad(im, n, "the signal must be float [B, L, 1 or 2]");
  int64_t len = xv->dims[1], c = xv->dims[2];
  if (len < 0) return fail(im, n, "the signal length is symbolic");
  int64_t vals[MAX_INTS];
  int32_t count = 0;
  TJ_RETURN_IF_ERROR(known_ints(im, n, 1, "frame_step", &count, vals, false));
  if (count != 1 || vals[0] <= 0)
    return bad(im, n, "frame_step must be a positive scalar");
  int64_t step = vals[0];
  int64_t frame = has_in(n, 2) ? n->inputs[2]->dims[0] : len;
  if (has_in(n, 2) && (rank_of(n, 2) != 1 || dtype_of(n, 2) != xv->dtype))
    return bad(im, n, "the window must be 1-D of the signal's dtype");
  if (has_in(n, 3)) {
    TJ_RETURN_IF_ERROR(
        known_ints(im, n, 3, "frame_length", &count, vals, false));
    if (count != 1) return bad(im, n, "frame_length must be a scalar");
    if (has_in(n, 2) && vals[0] != frame)
      return bad(im, n, "frame_length %lld, a window of %lld",
                 (long long)vals[0], (long long)frame);
    frame = vals[0];
  }
  if (frame <= 0 || frame > len)
    return bad(im, n, "frame_length %lld for a signal of %lld",
               (long long)frame, (long long)len);
  int64_t frames = 1 + (len - frame) / step;
  bool onesided = attr_i(n, "onesided", 1) != 0;
  int64_t m, cout;
  tj_status_t st = NULL;
  double* w =
      dft_matrix(im, n, frame, c, frame, false, onesided, &m, &cout, &st);
  if (!w) return st;
  if (frames * frame > (1 << 24))
    return fail(im, n, "%lld frames of %lld", (long long)frames,
                (long long)frame);
  int64_t* idx =
      tj_arena_alloc(&im->arena, sizeof(int64_t) * (size_t)(frames * frame));
  if (!idx) return tj_status_oom();
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t t = 0; t < frame; ++t) idx[f * frame + t] = f * step + t;
  const int64_t idims[2] = {frames, frame};
  tj_value_t iv = tj_graph_constant(G, TJ_DTYPE_I64, 2, idims, idx,
                                    sizeof(int64_t) * (size_t)(frames * frame));
  tj_value_t x = tj_graph_gather(G, in(im, n, 0), iv, 1);  // [B, F, T, C]
  if (has_in(n, 2)) {
    const int64_t wdims[2] = {frame, 1};
    x = tj_graph_mul(G, x, tj_graph_reshape(G, in(im, n, 2), 2, wdims));
  }
  int64_t b = xv->dims[0];
  const int64_t flat[3] = {b, frames, frame * c};
  x = tj_graph_reshape(G, x, 3, flat);
  const int64_t wd[2] = {frame * c, m * cout};
  tj_value_t wm = tj_graph_cast(
      G,
      tj_graph_constant(G, TJ_DTYPE_F64, 2, wd, w,
                        sizeof(double) * (size_t)(frame * c * m * cout)),
      xv->dtype);
  const int64_t ydims[4] = {b, frames, m, cout};
  return out(im, n, 0,
             tj_graph_reshape(G, tj_graph_matmul(G, x, wm), 4, ydims));
}

// CausalConvWithState (opset 27): input [B, C, L] left-extended by
// past_state [B, C, k - 1] (zeros when absent), a depthwise conv (the conv
// op, groups C, valid padding) with weight [C, 1, k] and bias, then
// optionally SiLU (activation silu or swish, in f32 for f16/bf16);
// present_state is the last k - 1 positions of the extended input.
static tj_status_t cv_causal_conv(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                  const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 2, 4));
  const tj_onnx_val_t* xv = n->inputs[0];
  const tj_onnx_val_t* wv = n->inputs[1];
  bool silu = attr_s_is(n, "activation", "none", "silu") ||
              attr_s_is(n, "activation", "none", "swish");
  if (!silu && !attr_s_is(n, "activation", "none", "none"))
    return fail(im, n, "activation (none, silu or swish)");
  if (xv->rank != 3 || !is_float(xv->dtype))
    return bad(im, n, "the input must be float [B, C, L]");
  int64_t c = xv->dims[1];
  if (wv->rank != 3 || wv->dims[0] != c || wv->dims[1] != 1 ||
      wv->dims[2] <= 0 || wv->dtype != xv->dtype)
    return bad(im, n, "the weight must be [C, 1, k] of the input's dtype");
  if (c <= 0) return fail(im, n, "the channel dim is symbolic or 0");
  int64_t k = wv->dims[2];
  tj_value_t x = in(im, n, 0);
  tj_value_t ext;
  if (has_in(n, 3)) {
    const tj_onnx_val_t* sv = n->inputs[3];
    if (sv->rank != 3 || sv->dims[1] != c || sv->dims[2] != k - 1 ||
        sv->dtype != xv->dtype)
      return bad(im, n, "past_state must be [B, C, k - 1]");
    tj_value_t parts[2] = {in(im, n, 3), x};
    ext = tj_graph_concat(G, 2, parts, 2);
  } else {
    const int64_t low[3] = {0, 0, k - 1}, high[3] = {0, 0, 0};
    ext = tj_graph_pad(G, x, low, high, 0);
  }
  tj_conv_attrs_t a;
  memset(&a, 0, sizeof a);
  a.kernel[0] = k;
  a.groups = c;
  tj_value_t bias = has_in(n, 2) ? in(im, n, 2) : tj_value_none();
  tj_value_t y = tj_graph_conv(G, ext, in(im, n, 1), bias, &a);
  if (silu) {
    tj_dtype_t wide = xv->dtype == TJ_DTYPE_F16 || xv->dtype == TJ_DTYPE_BF16
                          ? TJ_DTYPE_F32
                          : xv->dtype;
    y = tj_graph_cast(G, tj_graph_silu(G, tj_graph_cast(G, y, wide)),
                      xv->dtype);
  }
  if (has_out(n, 1)) {
    int64_t len = xv->dims[2];
    if (len < 0) return fail(im, n, "present_state of a symbolic length input");
    const int64_t starts[3] = {0, 0, len},
                  stops[3] = {INT64_MAX, INT64_MAX, len + k - 1};
    TJ_RETURN_IF_ERROR(
        out(im, n, 1, tj_graph_slice(G, ext, starts, stops, NULL)));
  }
  return out(im, n, 0, y);
}

// [B, T, H*D] -> [B, H, T, D] in |wide|.
static tj_value_t heads_first(tj_onnx_importer_t* im, tj_value_t x,
                              const int64_t* dims, int64_t heads,
                              tj_dtype_t wide) {
  static const int32_t kPerm[4] = {0, 2, 1, 3};
  const int64_t shape[4] = {dims[0], dims[1], heads, dims[2] / heads};
  return tj_graph_cast(
      G, tj_graph_transpose(G, tj_graph_reshape(G, x, 4, shape), kPerm), wide);
}

// Step |i| of [B, H, T, X] as [B, H, 1, X].
static tj_value_t time_step(tj_onnx_importer_t* im, tj_value_t x, int64_t i) {
  const int64_t starts[4] = {0, 0, i, 0};
  const int64_t stops[4] = {INT64_MAX, INT64_MAX, i + 1, INT64_MAX};
  return tj_graph_slice(G, x, starts, stops, NULL);
}

#define LA_MAX_STEPS 256

// LinearAttention (opset 27): the recurrence of ONNX's definition over a
// state S [B, Hkv, dk, dv] (past_state or 0, in f32), unrolled over the T
// steps (T constant, at most LA_MAX_STEPS): gated rules decay S by
// exp(decay_t) (per head or per key dim), delta rules replace v_t by
// beta_t (v_t - k_t S), then S += k_t^T v_t and o_t = scale q_t S, query
// head h reading kv head h / (Hq / Hkv). Each step is small matmuls and
// elementwise ops; the outputs are concatenated over time.
static tj_status_t cv_linear_attention(tj_onnx_importer_t* im,
                                       tj_onnx_node_t* n, const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 3, 6));
  bool gating = false, delta = false;
  const char* rule = "gated_delta";
  if (attr_s_is(n, "update_rule", rule, "linear")) {
  } else if (attr_s_is(n, "update_rule", rule, "gated")) {
    gating = true;
  } else if (attr_s_is(n, "update_rule", rule, "delta")) {
    delta = true;
  } else if (attr_s_is(n, "update_rule", rule, "gated_delta")) {
    gating = delta = true;
  } else {
    return fail(im, n, "update_rule (linear, gated, delta or gated_delta)");
  }
  if (gating != has_in(n, 4) || delta != has_in(n, 5))
    return bad(im, n, "the update rule %s decay and %s beta",
               gating ? "needs" : "forbids", delta ? "needs" : "forbids");
  int64_t hq = attr_i(n, "q_num_heads", 0), hkv = attr_i(n, "kv_num_heads", 0);
  if (hq <= 0 || hkv <= 0 || hq % hkv)
    return bad(im, n,
               "q_num_heads %lld, kv_num_heads %lld (a positive "
               "multiple of it)",
               (long long)hq, (long long)hkv);
  const tj_onnx_val_t* qv = n->inputs[0];
  const tj_onnx_val_t* kv = n->inputs[1];
  const tj_onnx_val_t* vv = n->inputs[2];
  if (qv->rank != 3 || kv->rank != 3 || vv->rank != 3 || !is_float(qv->dtype))
    return bad(im, n, "query, key and value must be float [B, T, H*D]");
  int64_t t = qv->dims[1];
  if (t < 0 || t > LA_MAX_STEPS)
    return fail(im, n,
                "%lld steps (the recurrence is unrolled: a constant "
                "T of at most %d)",
                (long long)t, LA_MAX_STEPS);
  if (qv->dims[2] < 0 || qv->dims[2] % hq || kv->dims[2] < 0 ||
      kv->dims[2] % hkv || vv->dims[2] < 0 || vv->dims[2] % hkv)
    return bad(im, n, "hidden sizes not multiples of the head counts");
  int64_t dk = qv->dims[2] / hq, dv = vv->dims[2] / hkv, b = qv->dims[0];
  if (kv->dims[2] / hkv != dk)
    return bad(im, n, "query and key head sizes differ");
  int64_t group = hq / hkv;
  tj_dtype_t f = TJ_DTYPE_F32;
  if (qv->dtype == TJ_DTYPE_F64) f = TJ_DTYPE_F64;
  tj_value_t q4 = heads_first(im, in(im, n, 0), qv->dims, hq, f);
  tj_value_t k4 = heads_first(im, in(im, n, 1), kv->dims, hkv, f);
  tj_value_t v4 = heads_first(im, in(im, n, 2), vv->dims, hkv, f);
  tj_value_t decay = tj_value_none(), beta = tj_value_none();
  if (gating) {
    const tj_onnx_val_t* gv = n->inputs[4];
    if (gv->rank != 3 || (gv->dims[2] != hkv && gv->dims[2] != hkv * dk))
      return bad(im, n, "decay must be [B, T, kv_num_heads (* d_k)]");
    decay = heads_first(im, in(im, n, 4), gv->dims, hkv, f);
  }
  if (delta) {
    const tj_onnx_val_t* bv = n->inputs[5];
    if (bv->rank != 3 || (bv->dims[2] != hkv && bv->dims[2] != 1))
      return bad(im, n, "beta must be [B, T, kv_num_heads or 1]");
    beta = heads_first(im, in(im, n, 5), bv->dims, bv->dims[2], f);
  }
  const int64_t sdims[4] = {b, hkv, dk, dv};
  tj_value_t state;
  tj_dtype_t state_dtype = qv->dtype;
  if (has_in(n, 3)) {
    const tj_onnx_val_t* pv = n->inputs[3];
    if (pv->rank != 4 || memcmp(pv->dims + 1, sdims + 1, 3 * sizeof(int64_t)))
      return bad(im, n, "past_state must be [B, kv_num_heads, d_k, d_v]");
    state_dtype = pv->dtype;
    state = tj_graph_cast(G, in(im, n, 3), f);
  } else {
    state = tj_graph_full(G, f, 4, sdims, 0);
  }
  double scale = attr_f(n, "scale", 0);
  if (scale == 0) scale = 1.0 / sqrt((double)dk);
  tj_value_t* outs =
      tj_arena_alloc(&im->arena, sizeof(tj_value_t) * (size_t)(t ? t : 1));
  if (!outs) return tj_status_oom();
  const int64_t col[4] = {b, hkv, dk, 1};
  const int64_t q5[5] = {b, hkv, group, 1, dk};
  const int64_t s5[5] = {b, hkv, 1, dk, dv};
  const int64_t o4[4] = {b, hq, 1, dv};
  for (int64_t i = 0; i < t; ++i) {
    tj_value_t k_t = time_step(im, k4, i), v_t = time_step(im, v4, i);
    if (gating) {
      // exp(g) per head [B, Hkv, 1, 1] or per key dim [B, Hkv, dk, 1].
      tj_value_t g = time_step(im, decay, i);
      int64_t gd[TJ_MAX_RANK];
      tj_graph_value_dims(G, g, gd);
      const int64_t gcol[4] = {b, hkv, gd[3], 1};
      state = tj_graph_mul(G, state,
                           tj_graph_exp(G, tj_graph_reshape(G, g, 4, gcol)));
    }
    if (delta) {
      tj_value_t got = tj_graph_matmul(G, k_t, state);  // [B, Hkv, 1, dv]
      v_t = tj_graph_mul(G, time_step(im, beta, i), tj_graph_sub(G, v_t, got));
    }
    state = tj_graph_add(
        G, state, tj_graph_mul(G, tj_graph_reshape(G, k_t, 4, col), v_t));
    tj_value_t o =
        tj_graph_matmul(G, tj_graph_reshape(G, time_step(im, q4, i), 5, q5),
                        tj_graph_reshape(G, state, 5, s5));
    outs[i] =
        tj_graph_mul(G, tj_graph_reshape(G, o, 4, o4), scalar(im, f, scale));
  }
  if (t == 0) return fail(im, n, "an empty sequence");
  tj_value_t y = t == 1 ? outs[0] : tj_graph_concat(G, (int32_t)t, outs, 2);
  static const int32_t kPerm[4] = {0, 2, 1, 3};
  const int64_t ydims[3] = {b, t, hq * dv};
  y = tj_graph_reshape(G, tj_graph_transpose(G, y, kPerm), 3, ydims);
  TJ_RETURN_IF_ERROR(out(im, n, 1, tj_graph_cast(G, state, state_dtype)));
  return out(im, n, 0, tj_graph_cast(G, y, qv->dtype));
}

// One axis of RoiAlign's sampling: for |count| rois, the sample positions
// start + bin * (p + (s + 0.5) / S) ([R, out * S]), clamped as ONNX does,
// as low/high indices (i64) and weights (zeroed outside [-1, len]).
static void roi_axis(tj_onnx_importer_t* im, tj_value_t start, tj_value_t bin,
                     int64_t out_len, int64_t ratio, int64_t len, tj_dtype_t f,
                     tj_value_t* lo, tj_value_t* hi, tj_value_t* w_lo,
                     tj_value_t* w_hi) {
  int64_t samples = out_len * ratio;
  double* a = tj_arena_alloc(&im->arena, sizeof(double) * (size_t)samples);
  if (!a) {
    *lo = *hi = *w_lo = *w_hi = tj_value_none();
    return;
  }
  for (int64_t p = 0; p < out_len; ++p)
    for (int64_t s = 0; s < ratio; ++s)
      a[p * ratio + s] = (double)p + ((double)s + 0.5) / (double)ratio;
  tj_value_t av =
      tj_graph_cast(G,
                    tj_graph_constant(G, TJ_DTYPE_F64, 1, &samples, a,
                                      sizeof(double) * (size_t)samples),
                    f);
  tj_value_t y = tj_graph_add(G, start, tj_graph_mul(G, bin, av));  // [R, P]
  tj_value_t valid =
      tj_graph_logical_and(G, tj_graph_ge(G, y, scalar(im, f, -1.0)),
                           tj_graph_le(G, y, scalar(im, f, (double)len)));
  y = tj_graph_maximum(G, y, scalar(im, f, 0));
  tj_value_t fl = tj_graph_floor(G, y);
  tj_value_t top = scalar(im, f, (double)(len - 1));
  tj_value_t edge = tj_graph_ge(G, fl, top);
  tj_value_t low = tj_graph_where(G, edge, top, fl);
  tj_value_t high =
      tj_graph_where(G, edge, top, tj_graph_add(G, fl, scalar(im, f, 1)));
  tj_value_t frac =
      tj_graph_where(G, edge, scalar(im, f, 0), tj_graph_sub(G, y, fl));
  tj_value_t v = tj_graph_cast(G, valid, f);
  *lo = tj_graph_cast(G, low, TJ_DTYPE_I64);
  *hi = tj_graph_cast(G, high, TJ_DTYPE_I64);
  *w_lo = tj_graph_mul(G, tj_graph_sub(G, scalar(im, f, 1), frac), v);
  *w_hi = tj_graph_mul(G, frac, v);
}

// RoiAlign (opsets 10 to 22) with a fixed sampling_ratio: per roi, S x S
// bilinear samples per output bin (ONNX's clamping: samples outside
// [-1, len] weigh 0), each a gather of the roi's image flattened over
// H x W at 4 computed positions, then averaged (avg) or the max of the
// weighted corner terms taken (max, as ONNX's reference does) over each
// bin. sampling_ratio 0 (adaptive: a data-dependent grid) is an error.
static tj_status_t cv_roi_align(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                const op_entry_t* e) {
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 3, 3));
  const tj_onnx_val_t* xv = n->inputs[0];
  const tj_onnx_val_t* rv = n->inputs[1];
  if (xv->rank != 4 || !is_float(xv->dtype) || rv->rank != 2 ||
      rv->dims[1] != 4 || rv->dtype != xv->dtype || rank_of(n, 2) != 1)
    return bad(im, n,
               "X [N, C, H, W], rois [R, 4] of X's dtype and "
               "batch_indices [R] are required");
  int64_t ratio = attr_i(n, "sampling_ratio", 0);
  if (ratio <= 0)
    return fail(im, n,
                "sampling_ratio %lld (adaptive sampling makes the "
                "grid depend on the rois: a positive ratio is needed)",
                (long long)ratio);
  int64_t oh = attr_i(n, "output_height", 1), ow = attr_i(n, "output_width", 1);
  if (oh <= 0 || ow <= 0 || oh * ratio > 4096 || ow * ratio > 4096)
    return bad(im, n, "output %lldx%lld with sampling_ratio %lld",
               (long long)oh, (long long)ow, (long long)ratio);
  bool half = im->opset >= 16 ? attr_s_is(n, "coordinate_transformation_mode",
                                          "half_pixel", "half_pixel")
                              : false;
  if (im->opset >= 16 && !half &&
      !attr_s_is(n, "coordinate_transformation_mode", "half_pixel",
                 "output_half_pixel"))
    return fail(im, n,
                "coordinate_transformation_mode (half_pixel or "
                "output_half_pixel)");
  bool max_mode = attr_s_is(n, "mode", "avg", "max");
  if (!max_mode && !attr_s_is(n, "mode", "avg", "avg"))
    return fail(im, n, "mode (avg or max)");
  int64_t nb = xv->dims[0], c = xv->dims[1], h = xv->dims[2], w = xv->dims[3];
  if (c < 0 || h <= 0 || w <= 0)
    return fail(im, n, "C, H and W must be constant and positive");
  int64_t r = rv->dims[0];
  tj_dtype_t f = xv->dtype == TJ_DTYPE_F64 ? TJ_DTYPE_F64 : TJ_DTYPE_F32;
  double scale = attr_f(n, "spatial_scale", 1.0), off = half ? 0.5 : 0.0;
  tj_value_t rois = tj_graph_cast(G, in(im, n, 1), f);
  tj_value_t corner[4];
  for (int64_t k = 0; k < 4; ++k) {
    const int64_t starts[2] = {0, k}, stops[2] = {INT64_MAX, k + 1};
    corner[k] = tj_graph_sub(
        G,
        tj_graph_mul(G, tj_graph_slice(G, rois, starts, stops, NULL),
                     scalar(im, f, scale)),
        scalar(im, f, off));  // [R, 1]
  }
  tj_value_t rw = tj_graph_sub(G, corner[2], corner[0]);
  tj_value_t rh = tj_graph_sub(G, corner[3], corner[1]);
  if (!half) {
    rw = tj_graph_maximum(G, rw, scalar(im, f, 1));
    rh = tj_graph_maximum(G, rh, scalar(im, f, 1));
  }
  tj_value_t ylo, yhi, wylo, wyhi, xlo, xhi, wxlo, wxhi;
  roi_axis(im, corner[1], tj_graph_div(G, rh, scalar(im, f, (double)oh)), oh,
           ratio, h, f, &ylo, &yhi, &wylo, &wyhi);
  roi_axis(im, corner[0], tj_graph_div(G, rw, scalar(im, f, (double)ow)), ow,
           ratio, w, f, &xlo, &xhi, &wxlo, &wxhi);
  if (tj_value_is_none(ylo) || tj_value_is_none(xlo)) return tj_status_oom();
  // The samples flattened in (ph, pw, iy, ix) order, so that each bin's
  // S x S samples are contiguous and every reshape below only splits:
  // sample s reads row sample pm[s] and column sample qm[s].
  int64_t ss = ratio * ratio, total = oh * ow * ss;
  int64_t* pm = tj_arena_alloc(&im->arena, sizeof(int64_t) * (size_t)total * 2);
  if (!pm) return tj_status_oom();
  int64_t* qm = pm + total;
  for (int64_t i = 0; i < total; ++i) {
    int64_t bin = i / ss, sample = i % ss;
    pm[i] = (bin / ow) * ratio + sample / ratio;
    qm[i] = (bin % ow) * ratio + sample % ratio;
  }
  // The rois' images, [R, C, H*W].
  const int64_t flat[3] = {nb, c, h * w};
  tj_value_t img = tj_graph_gather(
      G, tj_graph_reshape(G, tj_graph_cast(G, in(im, n, 0), f), 3, flat),
      in(im, n, 2), 0);
  const int64_t idx3[3] = {r, 1, total};
  const int64_t wide[3] = {r, c, total};
  tj_value_t ys[2] = {ylo, yhi}, wys[2] = {wylo, wyhi};
  tj_value_t xs[2] = {xlo, xhi}, wxs[2] = {wxlo, wxhi};
  tj_value_t acc = tj_value_none();
  for (int32_t a = 0; a < 2; ++a) {
    for (int32_t b = 0; b < 2; ++b) {
      tj_value_t pos =
          tj_graph_add(G,
                       tj_graph_mul(G, gather_list(im, ys[a], 1, pm, total),
                                    scalar(im, TJ_DTYPE_I64, (double)w)),
                       gather_list(im, xs[b], 1, qm, total));  // [R, total]
      tj_value_t wt = tj_graph_mul(G, gather_list(im, wys[a], 1, pm, total),
                                   gather_list(im, wxs[b], 1, qm, total));
      tj_value_t v = tj_graph_gather_elements(
          G, img,
          tj_graph_broadcast_to(G, tj_graph_reshape(G, pos, 3, idx3), 3, wide),
          2);
      tj_value_t term = tj_graph_mul(G, v, tj_graph_reshape(G, wt, 3, idx3));
      acc = a + b == 0 ? term
            : max_mode ? tj_graph_maximum(G, acc, term)
                       : tj_graph_add(G, acc, term);
    }
  }
  const int64_t d5[5] = {r, c, oh, ow, ss};
  tj_value_t s5 = tj_graph_reshape(G, acc, 5, d5);
  int32_t last = 4;
  tj_value_t y = max_mode ? tj_graph_max(G, s5, 1, &last, false)
                          : tj_graph_mean(G, s5, 1, &last, false);
  return out(im, n, 0, tj_graph_cast(G, y, xv->dtype));
}

//===--- RNN, GRU, LSTM (onnxcov) ---===//

enum { REC_RNN, REC_GRU, REC_LSTM };
#define REC_MAX_STEPS 1024

// Columns [k*h, (k+1)*h) of the 2-D |x|.
static tj_value_t gate_of(tj_onnx_importer_t* im, tj_value_t x, int64_t k,
                          int64_t h) {
  const int64_t starts[2] = {0, k * h}, stops[2] = {INT64_MAX, (k + 1) * h};
  return tj_graph_slice(G, x, starts, stops, NULL);
}

// Entry |d| of the leading axis of |x| (rank |rank|), that axis dropped.
static tj_value_t entry_of(tj_onnx_importer_t* im, tj_value_t x, int32_t rank,
                           int64_t d) {
  int64_t starts[TJ_MAX_RANK] = {0}, stops[TJ_MAX_RANK], dims[TJ_MAX_RANK];
  for (int32_t a = 0; a < rank; ++a) stops[a] = INT64_MAX;
  starts[0] = d;
  stops[0] = d + 1;
  tj_value_t s = tj_graph_slice(G, x, starts, stops, NULL);
  tj_graph_value_dims(G, s, dims);
  return tj_graph_reshape(G, s, rank - 1, dims + 1);
}

static tj_value_t rec_clip(tj_onnx_importer_t* im, tj_value_t x, double clip,
                           tj_dtype_t dt) {
  if (clip <= 0) return x;
  return tj_graph_minimum(G, tj_graph_maximum(G, x, scalar(im, dt, -clip)),
                          scalar(im, dt, clip));
}

// RNN, GRU and LSTM (opsets 14 to 22) unrolled over a constant T: X's
// projection by W for every step is one matmul; each step adds h R^T and
// applies ONNX's gate equations (the default activations; clip;
// linear_before_reset; LSTM's peepholes), holding the state and zeroing Y
// past sequence_lens[b]. reverse walks each batch's sequence from its own
// end (gathers of X and Y by per-batch reversed indices).
static tj_status_t cv_recurrent(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                const op_entry_t* e) {
  int kind = e->param;
  int64_t gates = kind == REC_RNN ? 1 : kind == REC_GRU ? 3 : 4;
  TJ_RETURN_IF_ERROR(need_inputs(im, n, 3, kind == REC_LSTM ? 8 : 6));
  TJ_RETURN_IF_ERROR(no_extra_outputs(im, n, kind == REC_LSTM ? 3 : 2));
  const tj_onnx_val_t* xv = n->inputs[0];
  if (xv->rank != 3 || !is_float(xv->dtype))
    return bad(im, n, "X must be float and 3-D");
  int64_t hs = attr_i(n, "hidden_size", 0);
  if (hs <= 0) return bad(im, n, "hidden_size %lld", (long long)hs);
  int64_t dirs;
  bool reverse_only = false;
  if (attr_s_is(n, "direction", "forward", "forward")) {
    dirs = 1;
  } else if (attr_s_is(n, "direction", "forward", "reverse")) {
    dirs = 1;
    reverse_only = true;
  } else if (attr_s_is(n, "direction", "forward", "bidirectional")) {
    dirs = 2;
  } else {
    return fail(im, n, "direction (forward, reverse or bidirectional)");
  }
  if (attr(n, "activation_alpha") || attr(n, "activation_beta"))
    return fail(im, n,
                "activation_alpha and activation_beta (only the "
                "default activations are supported)");
  const Onnx__AttributeProto* acts = attr(n, "activations");
  if (acts) {
    static const char* const kDefault[3][3] = {
        {"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};
    size_t per = kind == REC_RNN ? 1 : kind == REC_GRU ? 2 : 3;
    bool ok = acts->n_strings == per * (size_t)dirs;
    for (size_t i = 0; ok && i < acts->n_strings; ++i) {
      const char* want = kDefault[kind][i % per];
      ok = acts->strings[i].len == strlen(want);
      for (size_t j = 0; ok && j < strlen(want); ++j) {
        char c = (char)acts->strings[i].data[j];
        ok = (c | 0x20) == (want[j] | 0x20);  // ASCII, any case
      }
    }
    if (!ok) return fail(im, n, "activations other than the defaults");
  }
  if (attr_i(n, "input_forget", 0))
    return fail(im, n, "input_forget = 1 is not supported");
  double clip = attr_f(n, "clip", 0);
  if (attr(n, "clip") && !(clip > 0)) return bad(im, n, "clip %g", clip);
  bool lbr = attr_i(n, "linear_before_reset", 0) != 0;
  int64_t layout = attr_i(n, "layout", 0);
  if (layout != 0 && layout != 1)
    return bad(im, n, "layout %lld", (long long)layout);
  static const int32_t kSwap01[4] = {1, 0, 2, 3};
  static const int32_t kYB[4] = {2, 0, 1, 3};  // [T, D, B, H] -> [B, T, D, H]
  static const int32_t kHB[3] = {1, 0, 2};     // [D, B, H] <-> [B, D, H]
  tj_value_t x = in(im, n, 0);
  if (layout) x = tj_graph_transpose(G, x, kSwap01);
  int64_t xd[TJ_MAX_RANK];
  tj_graph_value_dims(G, x, xd);
  int64_t t_len = xd[0], nb = xd[1];
  if (t_len <= 0 || t_len > REC_MAX_STEPS)
    return fail(im, n, "%lld steps (unrolled: a constant of 1 to %d)",
                (long long)t_len, REC_MAX_STEPS);
  const tj_onnx_val_t* wv = n->inputs[1];
  const tj_onnx_val_t* rv = n->inputs[2];
  if (wv->rank != 3 || wv->dims[0] != dirs || wv->dims[1] != gates * hs ||
      rv->rank != 3 || rv->dims[0] != dirs || rv->dims[1] != gates * hs ||
      rv->dims[2] != hs)
    return bad(im, n, "W and R must be [%lld, %lld, .] (R's last %lld)",
               (long long)dirs, (long long)(gates * hs), (long long)hs);
  tj_dtype_t dt = xv->dtype;
  static const int32_t kT[2] = {1, 0};
  tj_value_t lens = tj_value_none(), valid_all = tj_value_none();
  if (has_in(n, 4)) {
    // [T, B, 1]: step t of batch b is inside its sequence.
    const int64_t l3[3] = {1, nb, 1}, tb[3] = {t_len, nb, 1};
    lens = tj_graph_reshape(G, tj_graph_cast(G, in(im, n, 4), TJ_DTYPE_I64), 3,
                            l3);
    valid_all = tj_graph_lt(G, tj_graph_iota(G, TJ_DTYPE_I64, 3, tb, 0), lens);
  }
  tj_value_t ys[2], hs_out[2], cs_out[2];
  for (int64_t d = 0; d < dirs; ++d) {
    bool rev = reverse_only || d == 1;
    tj_value_t w = entry_of(im, in(im, n, 1), 3, d);  // [G*H, I]
    tj_value_t r = entry_of(im, in(im, n, 2), 3, d);  // [G*H, H]
    tj_value_t wb = tj_value_none(), rb = tj_value_none();
    if (has_in(n, 3)) {
      tj_value_t b = entry_of(im, in(im, n, 3), 2, d);  // [2*G*H]
      const int64_t s0[1] = {0}, e0[1] = {gates * hs}, e1[1] = {2 * gates * hs};
      wb = tj_graph_slice(G, b, s0, e0, NULL);
      rb = tj_graph_slice(G, b, e0, e1, NULL);
    }
    // Per-batch reversed time when walking backwards: [T, B, 1] indices.
    tj_value_t order = tj_value_none();
    if (rev) {
      const int64_t tb[3] = {t_len, nb, 1};
      tj_value_t t = tj_graph_iota(G, TJ_DTYPE_I64, 3, tb, 0);
      tj_value_t last = tj_value_is_none(lens)
                            ? scalar(im, TJ_DTYPE_I64, (double)t_len)
                            : lens;
      tj_value_t back = tj_graph_sub(
          G, tj_graph_sub(G, last, scalar(im, TJ_DTYPE_I64, 1)), t);
      order = tj_value_is_none(lens)
                  ? back
                  : tj_graph_where(G, tj_graph_lt(G, t, lens), back, t);
    }
    tj_value_t xs = x;
    if (rev) {
      const int64_t full[3] = {t_len, nb, xd[2]};
      xs = tj_graph_gather_elements(
          G, x, tj_graph_broadcast_to(G, order, 3, full), 0);
    }
    tj_value_t xw = tj_graph_matmul(G, xs, tj_graph_transpose(G, w, kT));
    if (!tj_value_is_none(wb)) xw = tj_graph_add(G, xw, wb);  // [T, B, G*H]
    tj_value_t rt = tj_graph_transpose(G, r, kT);             // [H, G*H]
    const int64_t bh[2] = {nb, hs};
    tj_value_t h =
        has_in(n, 5)
            ? (layout ? entry_of(im, tj_graph_transpose(G, in(im, n, 5), kHB),
                                 3, d)
                      : entry_of(im, in(im, n, 5), 3, d))
            : tj_graph_full(G, dt, 2, bh, 0);
    tj_value_t c = tj_value_none();
    tj_value_t pi = tj_value_none(), po = tj_value_none(), pf = tj_value_none();
    if (kind == REC_LSTM) {
      c = has_in(n, 6)
              ? (layout ? entry_of(im, tj_graph_transpose(G, in(im, n, 6), kHB),
                                   3, d)
                        : entry_of(im, in(im, n, 6), 3, d))
              : tj_graph_full(G, dt, 2, bh, 0);
      if (has_in(n, 7)) {
        tj_value_t p = entry_of(im, in(im, n, 7), 2, d);  // [3H]
        const int64_t one[2] = {1, 3 * hs};
        p = tj_graph_reshape(G, p, 2, one);
        pi = gate_of(im, p, 0, hs);
        po = gate_of(im, p, 1, hs);
        pf = gate_of(im, p, 2, hs);
      }
    }
    tj_value_t* steps =
        tj_arena_alloc(&im->arena, sizeof(tj_value_t) * (size_t)t_len);
    if (!steps) return tj_status_oom();
    for (int64_t t = 0; t < t_len; ++t) {
      const int64_t s3[3] = {t, 0, 0}, e3[3] = {t + 1, INT64_MAX, INT64_MAX};
      const int64_t b2[2] = {nb, gates * hs};
      tj_value_t gx =
          tj_graph_reshape(G, tj_graph_slice(G, xw, s3, e3, NULL), 2, b2);
      tj_value_t gh = tj_graph_matmul(G, h, rt);
      if (!tj_value_is_none(rb)) gh = tj_graph_add(G, gh, rb);
      tj_value_t h2, c2 = tj_value_none();
      if (kind == REC_RNN) {
        h2 = tj_graph_tanh(G, rec_clip(im, tj_graph_add(G, gx, gh), clip, dt));
      } else if (kind == REC_GRU) {
        tj_value_t z =
            tj_graph_sigmoid(G, rec_clip(im,
                                         tj_graph_add(G, gate_of(im, gx, 0, hs),
                                                      gate_of(im, gh, 0, hs)),
                                         clip, dt));
        tj_value_t rr =
            tj_graph_sigmoid(G, rec_clip(im,
                                         tj_graph_add(G, gate_of(im, gx, 1, hs),
                                                      gate_of(im, gh, 1, hs)),
                                         clip, dt));
        tj_value_t hh;
        if (lbr) {
          hh = tj_graph_mul(G, rr, gate_of(im, gh, 2, hs));
        } else {
          // (r * h) R_h^T + Rb_h.
          const int64_t s2[2] = {0, 2 * hs}, e2[2] = {INT64_MAX, 3 * hs};
          hh = tj_graph_matmul(G, tj_graph_mul(G, rr, h),
                               tj_graph_slice(G, rt, s2, e2, NULL));
          if (!tj_value_is_none(rb)) {
            const int64_t s1[1] = {2 * hs}, e1[1] = {3 * hs};
            hh = tj_graph_add(G, hh, tj_graph_slice(G, rb, s1, e1, NULL));
          }
        }
        hh = tj_graph_tanh(
            G, rec_clip(im, tj_graph_add(G, gate_of(im, gx, 2, hs), hh), clip,
                        dt));
        h2 = tj_graph_add(
            G, tj_graph_mul(G, tj_graph_sub(G, scalar(im, dt, 1), z), hh),
            tj_graph_mul(G, z, h));
      } else {
        tj_value_t g = tj_graph_add(G, gx, gh);  // gates i, o, f, c
        tj_value_t gi = gate_of(im, g, 0, hs), go = gate_of(im, g, 1, hs);
        tj_value_t gf = gate_of(im, g, 2, hs), gc = gate_of(im, g, 3, hs);
        if (!tj_value_is_none(pi)) {
          gi = tj_graph_add(G, gi, tj_graph_mul(G, pi, c));
          gf = tj_graph_add(G, gf, tj_graph_mul(G, pf, c));
        }
        tj_value_t ig = tj_graph_sigmoid(G, rec_clip(im, gi, clip, dt));
        tj_value_t fg = tj_graph_sigmoid(G, rec_clip(im, gf, clip, dt));
        tj_value_t cc = tj_graph_tanh(G, rec_clip(im, gc, clip, dt));
        c2 = tj_graph_add(G, tj_graph_mul(G, fg, c), tj_graph_mul(G, ig, cc));
        if (!tj_value_is_none(po))
          go = tj_graph_add(G, go, tj_graph_mul(G, po, c2));
        tj_value_t og = tj_graph_sigmoid(G, rec_clip(im, go, clip, dt));
        h2 = tj_graph_mul(G, og, tj_graph_tanh(G, c2));
      }
      tj_value_t y = h2;
      if (!tj_value_is_none(valid_all)) {
        const int64_t b1[2] = {nb, 1};
        tj_value_t v = tj_graph_reshape(
            G, tj_graph_slice(G, valid_all, s3, e3, NULL), 2, b1);
        h2 = tj_graph_where(G, v, h2, h);
        if (kind == REC_LSTM) c2 = tj_graph_where(G, v, c2, c);
        y = tj_graph_where(G, v, y, scalar(im, dt, 0));
      }
      h = h2;
      c = c2;
      const int64_t y3[3] = {1, nb, hs};
      steps[t] = tj_graph_reshape(G, y, 3, y3);
    }
    tj_value_t yd =
        t_len == 1 ? steps[0] : tj_graph_concat(G, (int32_t)t_len, steps, 0);
    if (rev) {
      const int64_t full[3] = {t_len, nb, hs};
      yd = tj_graph_gather_elements(
          G, yd, tj_graph_broadcast_to(G, order, 3, full), 0);
    }
    const int64_t y4[4] = {t_len, 1, nb, hs}, h3[3] = {1, nb, hs};
    ys[d] = tj_graph_reshape(G, yd, 4, y4);
    hs_out[d] = tj_graph_reshape(G, h, 3, h3);
    if (kind == REC_LSTM) cs_out[d] = tj_graph_reshape(G, c, 3, h3);
  }
  tj_value_t y = dirs == 1 ? ys[0] : tj_graph_concat(G, 2, ys, 1);
  tj_value_t yh = dirs == 1 ? hs_out[0] : tj_graph_concat(G, 2, hs_out, 0);
  if (layout) {
    y = tj_graph_transpose(G, y, kYB);
    yh = tj_graph_transpose(G, yh, kHB);
  }
  if (kind == REC_LSTM && has_out(n, 2)) {
    tj_value_t yc = dirs == 1 ? cs_out[0] : tj_graph_concat(G, 2, cs_out, 0);
    if (layout) yc = tj_graph_transpose(G, yc, kHB);
    TJ_RETURN_IF_ERROR(out(im, n, 2, yc));
  }
  TJ_RETURN_IF_ERROR(out(im, n, 1, yh));
  return out(im, n, 0, y);
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
  if (tj_dtype_is_small_int(qd)) {
    // 4- and 2-bit: quantize to i8 (u8), whose saturation range holds
    // theirs, clamp to theirs and cast (exact).
    const bool is_signed = qd == TJ_DTYPE_I4 || qd == TJ_DTYPE_I2;
    a.dtype = is_signed ? TJ_DTYPE_I8 : TJ_DTYPE_U8;
    if (!tj_value_is_none(z)) z = tj_graph_cast(G, z, a.dtype);
    tj_value_t q =
        tj_graph_quantize(G, in(im, n, 0), per_tensor_ok(im, n, 1, ad), z, &a);
    q = tj_graph_maximum(G, q, scalar(im, a.dtype, tj_dtype_int_lowest(qd)));
    q = tj_graph_minimum(G, q, scalar(im, a.dtype, tj_dtype_int_highest(qd)));
    return out(im, n, 0, tj_graph_cast(G, q, qd));
  }
  if (qd == TJ_DTYPE_F4E2M1) {
    // float4: cast(x / s + zp), as quantize does float8, with x / s in f32
    // (f64 for f64); per tensor or per axis.
    tj_dtype_t xd = dtype_of(n, 0);
    tj_dtype_t cd = xd == TJ_DTYPE_F64 ? TJ_DTYPE_F64 : TJ_DTYPE_F32;
    tj_value_t x = tj_graph_cast(G, in(im, n, 0), cd);
    tj_value_t sc = tj_graph_cast(G, per_tensor_ok(im, n, 1, ad), cd);
    if (!tj_value_is_none(z)) z = tj_graph_cast(G, z, cd);
    const int32_t r = rank_of(n, 0);
    if (a.block_size)
      return fail(im, n, "a blocked float4e2m1 quantization is not supported");
    if (tj_graph_value_rank(G, sc) == 1 && r > 1) {
      const int64_t k = axis < 0 ? axis + r : axis;
      int64_t dims[TJ_MAX_RANK];
      for (int32_t i = 0; i < r; ++i) dims[i] = i == k ? ad : 1;
      sc = tj_graph_reshape(G, sc, r, dims);
      if (!tj_value_is_none(z)) z = tj_graph_reshape(G, z, r, dims);
    }
    tj_value_t t = tj_graph_div(G, x, sc);
    if (!tj_value_is_none(z)) t = tj_graph_add(G, t, z);
    return out(im, n, 0, tj_graph_cast(G, t, qd));
  }
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
  tj_value_t q = in(im, n, 0);
  const tj_dtype_t qd = dtype_of(n, 0);
  // The 4- and 2-bit integers as i8 (u8), float4 as float8 e4m3 (every
  // e2m1 value is one): exact widenings the op takes.
  tj_dtype_t wide = qd == TJ_DTYPE_I4 || qd == TJ_DTYPE_I2   ? TJ_DTYPE_I8
                    : qd == TJ_DTYPE_U4 || qd == TJ_DTYPE_U2 ? TJ_DTYPE_U8
                    : qd == TJ_DTYPE_F4E2M1                  ? TJ_DTYPE_F8E4M3
                                                             : qd;
  if (wide != qd) {
    q = tj_graph_cast(G, q, wide);
    if (!tj_value_is_none(z)) z = tj_graph_cast(G, z, wide);
  }
  return out(im, n, 0,
             tj_graph_dequantize(G, q, per_tensor_ok(im, n, 1, ad), z, &a));
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

// Control flow (onnx_control.c): the table's signature over its entry
// points.
static tj_status_t cv_if(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                         const op_entry_t* e) {
  return tj_onnx_convert_if(im, n);
}
static tj_status_t cv_loop(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                           const op_entry_t* e) {
  return tj_onnx_convert_loop(im, n);
}
static tj_status_t cv_scan(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                           const op_entry_t* e) {
  return tj_onnx_convert_scan(im, n);
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
    {"Cast", "to,saturate,round_mode,", cv_cast, NULL, NULL, NULL, 0},
    OP("BitCast", "to,", cv_bitcast),
    {"CastLike", "saturate,round_mode,", cv_cast, NULL, NULL, NULL, 1},
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
       "softcap,softmax_precision,left_window_size,right_window_size,",
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
    OP("MelWeightMatrix", "output_datatype,", cv_mel_weight_matrix),
    OP("EyeLike", "dtype,k,", cv_eye_like),
    OP("Trilu", "upper,", cv_trilu),
    {"DepthToSpace", "blocksize,mode,", cv_depth_space, NULL, NULL, NULL, 0},
    {"SpaceToDepth", "blocksize,mode,", cv_depth_space, NULL, NULL, NULL, 1},
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
    // scatter (issue 15)
    OP("ScatterElements", "axis,reduction,", cv_scatter_elements),
    OP("Scatter", "axis,", cv_scatter_elements),
    OP("ScatterND", "reduction,", cv_scatter_nd),
    // onnxcov (issue 15)
    OP("RotaryEmbedding", "interleaved,num_heads,rotary_embedding_dim,",
       cv_rotary),
    OP("GridSample", "align_corners,mode,padding_mode,", cv_grid_sample),
    OP("AffineGrid", "align_corners,", cv_affine_grid),
    {"Swish", "alpha,", cv_swish, NULL, NULL, NULL, 0},
    {"SwiGLU", "alpha,", cv_swish, NULL, NULL, NULL, 1},
    OP("LRN", "alpha,beta,bias,size,", cv_lrn),
    OP("GroupNormalization", "epsilon,num_groups,stash_type,", cv_group_norm),
    OP("LpNormalization", "axis,p,", cv_lp_norm),
    OP("CenterCropPad", "axes,", cv_center_crop_pad),
    OP("ReverseSequence", "batch_axis,time_axis,", cv_reverse_sequence),
    {"HannWindow", "output_datatype,periodic,", cv_window, NULL, NULL, NULL,
     WIN_HANN},
    {"HammingWindow", "output_datatype,periodic,", cv_window, NULL, NULL, NULL,
     WIN_HAMMING},
    {"BlackmanWindow", "output_datatype,periodic,", cv_window, NULL, NULL, NULL,
     WIN_BLACKMAN},
    OP("TensorScatter", "axis,mode,", cv_tensor_scatter),
    OP("DFT", "axis,inverse,onesided,", cv_dft),
    OP("Col2Im", "dilations,pads,strides,", cv_col2im),
    OP("STFT", "onesided,", cv_stft),
    OP("CausalConvWithState", "activation,", cv_causal_conv),
    OP("LinearAttention",
       "chunk_size,kv_num_heads,q_num_heads,scale,update_rule,",
       cv_linear_attention),
    OP("RoiAlign",
       "coordinate_transformation_mode,mode,output_height,output_width,"
       "sampling_ratio,spatial_scale,",
       cv_roi_align),
    OP("Einsum", "equation,", cv_einsum),
    {"RNN",
     "activation_alpha,activation_beta,activations,clip,direction,hidden_size,"
     "layout,",
     cv_recurrent, NULL, NULL, NULL, REC_RNN},
    {"GRU",
     "activation_alpha,activation_beta,activations,clip,direction,hidden_size,"
     "layout,linear_before_reset,",
     cv_recurrent, NULL, NULL, NULL, REC_GRU},
    {"LSTM",
     "activation_alpha,activation_beta,activations,clip,direction,hidden_size,"
     "input_forget,layout,",
     cv_recurrent, NULL, NULL, NULL, REC_LSTM},
    // topk (issue 15)
    OP("TopK", "axis,largest,sorted,", cv_topk),
    // ddshape (issue 15)
    OP("NonZero", "", cv_nonzero),
    OP("Compress", "axis,", cv_compress),
    OP("Unique", "axis,sorted,", cv_unique),
    OP("NonMaxSuppression", "center_point_box,", cv_nms),
    // ctrlflow (issue 15): onnx_control.c
    OP("If", "else_branch,then_branch,", cv_if),
    OP("Loop", "body,", cv_loop),
    OP("Scan",
       "body,directions,num_scan_inputs,scan_input_axes,"
       "scan_input_directions,scan_output_axes,scan_output_directions,",
       cv_scan),
    // onnxseq (issue 15): quantized products
    OP("QLinearMatMul", "", cv_qlinear_matmul),
    {"Upsample", "mode,", cv_resize, NULL, NULL, NULL, 1},
    OP("Optional", "type,", cv_optional),
    OP("OptionalHasElement", "", cv_optional_has_element),
    OP("OptionalGetElement", "", cv_optional_get_element),
    OP("MaxUnpool", "kernel_shape,pads,strides,", cv_max_unpool),
    OP("Det", "", cv_det),
    OP("ConvInteger", "auto_pad,dilations,group,kernel_shape,pads,strides,",
       cv_conv_integer),
    OP("QLinearConv", "auto_pad,dilations,group,kernel_shape,pads,strides,",
       cv_qlinear_conv),
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
    {"ReverseSequence", 10},
    {"If", 1},
    {"Scan", 8},
    {"ConvInteger", 10},
    {"QLinearConv", 10},
    {"QLinearMatMul", 10},
    {"Upsample", 9},
    {"Optional", 15},
    {"OptionalHasElement", 15},
    {"OptionalGetElement", 15},
    {"MaxUnpool", 9},
    // Scatter-9 is ScatterElements-11 under its old name (axis only).
    {"Scatter", 9},
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

bool tj_onnx_op_known(const char* op_type) {
  return find_op(op_type) != NULL || tj_onnx_is_sequence_op(op_type);
}

tj_status_t tj_onnx_convert_node(tj_onnx_importer_t* im, tj_onnx_node_t* n) {
  if (tj_onnx_is_sequence_op(n->proto->op_type))
    return tj_onnx_convert_sequence(im, n);
  const op_entry_t* e = find_op(n->proto->op_type);
  if (!e) return fail(im, n, "unsupported op");
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
  bool symbolic = false;
  for (int32_t i = 0; i < n->num_inputs; ++i)
    symbolic |= n->inputs[i] && n->inputs[i]->symbolic;
  if (symbolic && im->graph == im->main_graph) {
    // Lengths computed from Shape's output (onnx_dims.c).
    static const char* const kArith[] = {"Add", "Sub", "Mul", "Div"};
    for (int k = 0; k < 4; ++k) {
      if (strcmp(e->op, kArith[k]) == 0)
        return tj_onnx_convert_dim_arith(im, n, "+-*/"[k]);
    }
    if (strcmp(e->op, "Range") == 0 && tj_onnx_range_of_dims(n))
      return tj_onnx_convert_range_of_dims(im, n);
    if (strcmp(e->op, "Equal") == 0) return tj_onnx_convert_dim_equal(im, n);
    if (strcmp(e->op, "Where") == 0) return tj_onnx_convert_dim_where(im, n);
    // A shape vector's own shape is static.
    if (strcmp(e->op, "Shape") == 0 || strcmp(e->op, "Size") == 0)
      return e->fn(im, n, e);
  }
  for (int32_t i = 0; i < n->num_inputs; ++i) {
    if (n->inputs[i] && n->inputs[i]->is_sequence &&
        strcmp(e->op, "Identity") && strncmp(e->op, "Optional", 8))
      return fail(im, n, "input %d (\"%s\") is a sequence", (int)i,
                  n->proto->input[i]);
    if (n->inputs[i] && n->inputs[i]->none && strcmp(e->op, "Identity") &&
        strncmp(e->op, "Optional", 8))
      return fail(im, n, "input %d (\"%s\") is an empty optional", (int)i,
                  n->proto->input[i]);
    if (im->graph == im->main_graph && n->inputs[i] && n->inputs[i]->symbolic &&
        strcmp(e->op, "Reshape") && strcmp(e->op, "Expand") &&
        strcmp(e->op, "ConstantOfShape") && strcmp(e->op, "Identity") &&
        strcmp(e->op, "Cast") && !tj_onnx_is_control(e->op) &&
        !(strcmp(e->op, "Slice") == 0 && (i == 1 || i == 2)) &&
        !(strcmp(e->op, "Resize") == 0 && i == 3) &&
        !(strcmp(e->op, "Trilu") == 0 && i == 1))
      return fail(im, n, "input %d is a shape with symbolic dims", (int)i);
  }
  return e->fn(im, n, e);
}
