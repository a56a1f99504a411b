// Arithmetic on shape vectors that hold symbolic dims (issue 15, session
// 25). A model exported with dynamic axes computes lengths from Shape's
// output: GPT-2's position ids are Range(past, past + T), a reshape's
// target may be [B, T * heads]. The importer keeps such vectors as known
// int64 data whose entries are dims (onnx_internal.h, |symbolic|); Gather,
// Concat and the other moves fold on them as on constants. Here Add, Sub,
// Mul and Div fold over the dims themselves (tj_graph_dim_add, _sub, _mul,
// _div), and Range over a symbolic length becomes iota * delta + start, a
// generator the fusion pass fuses into its readers: no host step, no value
// symbol, the length a dim like any input's. A Slice between such bounds
// (GPT-2's causal mask, tril[kl - ql : kl, :kl]) gathers iota + start. What is
// no dim for every value of the symbols (T - 1, T / 2) is an error naming the
// node, as is any entry that is neither a dim nor a plain constant.

#include <stdint.h>
#include <string.h>

#include "lib/dtype.h"
#include "onnx/onnx_internal.h"

static bool is_dim(int64_t v) { return v >= 0 || v <= -2; }
static bool is_symbolic(int64_t v) { return v <= -2; }

// The one int64 element of a scalar or [1] input |i|, or false.
static bool one_i64(const tj_onnx_node_t* n, int32_t i, int64_t* out) {
  const tj_onnx_val_t* v = n->inputs[i];
  if (!v || !v->data || v->dtype != TJ_DTYPE_I64) return false;
  if (v->rank > 1 || (v->rank == 1 && v->dims[0] != 1)) return false;
  *out = *(const int64_t*)v->data;
  return true;
}

// The graph's recorded error for node |n|: a dim function's refusal (T - 1
// is no dim) is UNSUPPORTED here, since the model itself is valid.
static tj_status_t graph_error(tj_onnx_importer_t* im, tj_onnx_node_t* n) {
  tj_status_t s = tj_graph_status(im->graph);
  if (!s) return tj_internal("a dim function returned none without an error");
  tj_status_code_t code = tj_status_code(s);
  if (code == TJ_STATUS_INVALID_ARGUMENT) code = TJ_STATUS_UNSUPPORTED;
  tj_status_t e = tj_onnx_node_error(im, n, code, "%s", tj_status_message(s));
  tj_status_free(s);
  return e;
}

// One entry of a symbolic Add, Sub, Mul or Div. Two plain constants take
// ONNX's integer arithmetic (Div truncates); a dim meets a dim through the
// dim functions, whose errors are recorded on the graph.
static tj_status_t entry(tj_onnx_importer_t* im, tj_onnx_node_t* n, char op,
                         int64_t a, int64_t b, int64_t* out) {
  tj_graph_t* g = im->graph;
  if (!is_symbolic(a) && !is_symbolic(b)) {
    bool overflow = false;
    switch (op) {
      case '+':
        overflow = __builtin_add_overflow(a, b, out);
        break;
      case '-':
        overflow = __builtin_sub_overflow(a, b, out);
        break;
      case '*':
        overflow = __builtin_mul_overflow(a, b, out);
        break;
      default:
        if (b == 0)
          return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                    "integer division by zero");
        overflow = a == INT64_MIN && b == -1;
        if (!overflow) *out = a / b;
        break;
    }
    if (overflow || *out <= -2)
      return tj_onnx_node_error(
          im, n, TJ_STATUS_UNSUPPORTED,
          "%lld %c %lld beside symbolic dims: a shape entry below -1",
          (long long)a, op, (long long)b);
    return NULL;
  }
  if (!is_dim(a) || !is_dim(b))
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "%c of a symbolic dim and %lld", op,
                              (long long)(is_dim(a) ? b : a));
  switch (op) {
    case '+':
      *out = tj_graph_dim_add(g, a, b);
      break;
    case '-':
      *out = tj_graph_dim_sub(g, a, b);
      break;
    case '*':
      *out = tj_graph_dim_mul(g, a, b);
      break;
    default:
      *out = tj_graph_dim_div(g, a, b);
      break;
  }
  return *out == TJ_DIM_INVALID ? graph_error(im, n) : NULL;
}

tj_status_t tj_onnx_convert_dim_arith(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                      char op) {
  if (n->num_inputs != 2 || !n->inputs[0] || !n->inputs[1])
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "%d inputs; it takes 2", (int)n->num_inputs);
  const tj_onnx_val_t* a = n->inputs[0];
  const tj_onnx_val_t* b = n->inputs[1];
  for (int32_t i = 0; i < 2; ++i) {
    const tj_onnx_val_t* v = n->inputs[i];
    if (!v->data)
      return tj_onnx_node_error(
          im, n, TJ_STATUS_UNSUPPORTED,
          "input %d (\"%s\") is known only at run time, beside a shape with "
          "symbolic dims",
          (int)i, n->proto->input[i]);
    if (v->dtype != TJ_DTYPE_I64 || v->rank > 1)
      return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                                "input %d of a shape computation is %s of "
                                "rank %d, not an int64 scalar or vector",
                                (int)i, tj_dtype_name(v->dtype), (int)v->rank);
  }
  const int64_t na = a->rank ? a->dims[0] : 1, nb = b->rank ? b->dims[0] : 1;
  if (na != nb && na != 1 && nb != 1)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "shapes [%lld] and [%lld] do not broadcast",
                              (long long)na, (long long)nb);
  const int64_t count = na > nb ? na : nb;
  int64_t* y = tj_arena_alloc(&im->arena, sizeof(int64_t) * (size_t)count);
  if (!y) return tj_status_oom();
  bool symbolic = false;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t x = ((const int64_t*)a->data)[na == 1 ? 0 : k];
    const int64_t z = ((const int64_t*)b->data)[nb == 1 ? 0 : k];
    TJ_RETURN_IF_ERROR(entry(im, n, op, x, z, &y[k]));
    symbolic |= is_symbolic(y[k]);
  }
  if (!n->proto->output[0][0]) return NULL;
  tj_onnx_val_t val;
  memset(&val, 0, sizeof val);
  val.dtype = TJ_DTYPE_I64;
  val.rank = a->rank > b->rank ? a->rank : b->rank;
  val.dims[0] = count;
  val.data = y;
  val.symbolic = symbolic;
  return tj_onnx_define(im, n->proto->output[0], &val);
}

// The length of known vector |v| (a scalar: 1) as *|out_len|, or false
// when |v| is no known scalar or vector of |dtype|.
static bool vector_of(const tj_onnx_val_t* v, tj_dtype_t dtype,
                      int64_t* out_len) {
  if (!v || !v->data || v->dtype != dtype || v->rank > 1) return false;
  *out_len = v->rank ? v->dims[0] : 1;
  return true;
}

// The broadcast length of |num| known vectors (equal or 1), or -1.
static int64_t broadcast_len(const int64_t* lens, int num) {
  int64_t n = 1;
  for (int i = 0; i < num; ++i) {
    if (lens[i] != 1 && n != 1 && lens[i] != n) return -1;
    if (lens[i] != 1) n = lens[i];
  }
  return n;
}

static tj_status_t define_vector(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                 tj_dtype_t dtype, int32_t rank, int64_t len,
                                 const void* data, bool symbolic) {
  if (!n->proto->output[0][0]) return NULL;
  tj_onnx_val_t val;
  memset(&val, 0, sizeof val);
  val.dtype = dtype;
  val.rank = rank;
  val.dims[0] = len;
  val.data = data;
  val.symbolic = symbolic;
  return tj_onnx_define(im, n->proto->output[0], &val);
}

static tj_status_t not_vectors(tj_onnx_importer_t* im, tj_onnx_node_t* n) {
  return tj_onnx_node_error(
      im, n, TJ_STATUS_UNSUPPORTED,
      "inputs beside a shape with symbolic dims must be known scalars or "
      "vectors of matching lengths");
}

tj_status_t tj_onnx_convert_dim_equal(tj_onnx_importer_t* im,
                                      tj_onnx_node_t* n) {
  int64_t lens[2];
  if (n->num_inputs != 2 || !vector_of(n->inputs[0], TJ_DTYPE_I64, &lens[0]) ||
      !vector_of(n->inputs[1], TJ_DTYPE_I64, &lens[1]))
    return not_vectors(im, n);
  const int64_t len = broadcast_len(lens, 2);
  if (len < 0) return not_vectors(im, n);
  uint8_t* y = tj_arena_alloc(&im->arena, (size_t)len + 1);
  if (!y) return tj_status_oom();
  const int64_t* a = n->inputs[0]->data;
  const int64_t* b = n->inputs[1]->data;
  for (int64_t k = 0; k < len; ++k) {
    const int64_t x = a[lens[0] == 1 ? 0 : k], z = b[lens[1] == 1 ? 0 : k];
    // Equal dims are equal encodings (canonical forms); a dim is never
    // negative; whether T is 5 or another dim is known only at run time.
    if (x == z || (!is_symbolic(x) && !is_symbolic(z)) ||
        (is_symbolic(x) && !is_dim(z)) || (is_symbolic(z) && !is_dim(x))) {
      y[k] = x == z;
      continue;
    }
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "entry %lld compares a symbolic dim with "
                              "another dim: known only at run time",
                              (long long)k);
  }
  const int32_t rank = n->inputs[0]->rank > n->inputs[1]->rank
                           ? n->inputs[0]->rank
                           : n->inputs[1]->rank;
  return define_vector(im, n, TJ_DTYPE_BOOL, rank, len, y, false);
}

tj_status_t tj_onnx_convert_dim_where(tj_onnx_importer_t* im,
                                      tj_onnx_node_t* n) {
  int64_t lens[3];
  if (n->num_inputs != 3 || !vector_of(n->inputs[0], TJ_DTYPE_BOOL, &lens[0]) ||
      n->inputs[0]->symbolic ||
      !vector_of(n->inputs[1], TJ_DTYPE_I64, &lens[1]) ||
      !vector_of(n->inputs[2], TJ_DTYPE_I64, &lens[2]))
    return not_vectors(im, n);
  const int64_t len = broadcast_len(lens, 3);
  if (len < 0) return not_vectors(im, n);
  int64_t* y = tj_arena_alloc(&im->arena, sizeof(int64_t) * (size_t)(len + 1));
  if (!y) return tj_status_oom();
  const uint8_t* c = n->inputs[0]->data;
  const int64_t* a = n->inputs[1]->data;
  const int64_t* b = n->inputs[2]->data;
  bool symbolic = false;
  int32_t rank = 0;
  for (int i = 0; i < 3; ++i)
    rank = n->inputs[i]->rank > rank ? n->inputs[i]->rank : rank;
  for (int64_t k = 0; k < len; ++k) {
    y[k] = c[lens[0] == 1 ? 0 : k] ? a[lens[1] == 1 ? 0 : k]
                                   : b[lens[2] == 1 ? 0 : k];
    symbolic |= is_symbolic(y[k]);
  }
  return define_vector(im, n, TJ_DTYPE_I64, rank, len, y, symbolic);
}

tj_value_t tj_onnx_dim_value(tj_graph_t* g, int64_t d) {
  if (d >= 0) return tj_graph_scalar(g, TJ_DTYPE_I64, (double)d);
  static const int32_t kAxis0[1] = {0};
  return tj_graph_sum(g, tj_graph_full(g, TJ_DTYPE_I64, 1, &d, 1.0), 1, kAxis0,
                      false);
}

tj_status_t tj_onnx_slice_dims(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                               tj_value_t* y, int32_t axis, int64_t start,
                               int64_t end) {
  tj_graph_t* g = im->graph;
  int64_t dims[TJ_MAX_RANK];
  tj_graph_value_dims(g, *y, dims);
  // An end past every index (INT64_MAX, as exporters write "to the end").
  if (!is_symbolic(end) && end >= INT32_MAX) end = dims[axis];
  if (!is_dim(start) || !is_dim(end))
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "axis %d's bounds %lld and %lld beside a "
                              "symbolic dim: an index from the end",
                              (int)axis, (long long)start, (long long)end);
  const int64_t len = tj_graph_dim_sub(g, end, start);
  if (len == TJ_DIM_INVALID) return graph_error(im, n);
  if (start == 0 && len == dims[axis]) return NULL;  // the whole axis
  tj_value_t at = tj_graph_iota(g, TJ_DTYPE_I64, 1, &len, 0);
  if (start != 0) at = tj_graph_add(g, at, tj_onnx_dim_value(g, start));
  *y = tj_graph_gather(g, *y, at, axis);
  return tj_value_is_none(*y) ? graph_error(im, n) : NULL;
}

bool tj_onnx_range_of_dims(const tj_onnx_node_t* n) {
  int64_t v[3];
  bool symbolic = false;
  for (int32_t i = 0; i < 3; ++i) {
    if (i >= n->num_inputs || !one_i64(n, i, &v[i])) return false;
    symbolic |= n->inputs[i]->symbolic;
  }
  return symbolic;
}

tj_status_t tj_onnx_convert_range_of_dims(tj_onnx_importer_t* im,
                                          tj_onnx_node_t* n) {
  int64_t start = 0, limit = 0, delta = 0;
  one_i64(n, 0, &start);
  one_i64(n, 1, &limit);
  one_i64(n, 2, &delta);
  if (is_symbolic(delta))
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "delta is a symbolic dim");
  if (delta == 0)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT, "delta is 0");
  // The span the steps cover, (limit - start) or (start - limit), as a dim.
  int64_t hi = delta > 0 ? limit : start, lo = delta > 0 ? start : limit;
  int64_t span = 0;
  if (!is_symbolic(lo) && lo < 0) {
    // hi - lo = hi + |lo|, a dim when hi is.
    if (!is_dim(hi) || lo == INT64_MIN)
      return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                                "a span of %lld below a symbolic dim",
                                (long long)lo);
    span = tj_graph_dim_add(im->graph, hi, -lo);
  } else if (!is_dim(hi)) {
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "a range from a symbolic dim to %lld",
                              (long long)hi);
  } else {
    span = tj_graph_dim_sub(im->graph, hi, lo);
  }
  if (span == TJ_DIM_INVALID) return graph_error(im, n);
  const int64_t step = delta > 0 ? delta : -delta;
  int64_t len = span;
  if (step != 1) {
    len = is_symbolic(span) ? tj_graph_dim_div(im->graph, span, step)
                            : span / step + (span % step != 0);
    if (len == TJ_DIM_INVALID) return graph_error(im, n);
  }
  tj_graph_t* g = im->graph;
  tj_value_t y = tj_graph_iota(g, TJ_DTYPE_I64, 1, &len, 0);
  if (delta != 1)
    y = tj_graph_mul(g, y, tj_graph_scalar(g, TJ_DTYPE_I64, (double)delta));
  tj_value_t first = is_symbolic(start)
                         ? tj_onnx_dim_value(g, start)
                         : tj_graph_scalar(g, TJ_DTYPE_I64, (double)start);
  if (is_symbolic(start) || start != 0) y = tj_graph_add(g, y, first);
  if (tj_value_is_none(y)) return graph_error(im, n);
  if (!n->proto->output[0][0]) return NULL;
  tj_onnx_val_t val;
  memset(&val, 0, sizeof val);
  val.dtype = TJ_DTYPE_I64;
  val.rank = 1;
  val.dims[0] = len;
  val.value = y;
  return tj_onnx_define(im, n->proto->output[0], &val);
}
