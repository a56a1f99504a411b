// The ONNX importer's sequence ops, resolved statically: a sequence whose
// length is known at import (the usual case in exported models: built by
// SequenceConstruct or SplitToSequence of static shapes, edited at known
// positions) is a list of tensor values, the way onnx_control.c unrolls
// Loop and Scan; the IR has no sequence type. A position that is not known
// at import is an error naming the node.

#include <string.h>

#include "onnx/onnx_internal.h"

bool tj_onnx_is_sequence_op(const char* op) {
  static const char* const kOps[] = {"SequenceEmpty",   "SequenceConstruct",
                                     "SequenceInsert",  "SequenceErase",
                                     "SequenceAt",      "SequenceLength",
                                     "SplitToSequence", "ConcatFromSequence"};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kOps); ++i)
    if (strcmp(op, kOps[i]) == 0) return true;
  return false;
}

static const Onnx__AttributeProto* attr(const tj_onnx_node_t* n,
                                        const char* name) {
  for (size_t i = 0; i < n->proto->n_attribute; ++i) {
    const Onnx__AttributeProto* a = n->proto->attribute[i];
    if (a->name && strcmp(a->name, name) == 0) return a;
  }
  return NULL;
}

static int64_t attr_i(const tj_onnx_node_t* n, const char* name, int64_t def) {
  const Onnx__AttributeProto* a = attr(n, name);
  return a && a->has_i ? a->i : def;
}

// The attributes |n| may have (each followed by ','); any other is an
// error naming it.
static tj_status_t check_attrs(const tj_onnx_importer_t* im,
                               const tj_onnx_node_t* n, const char* taken) {
  for (size_t i = 0; i < n->proto->n_attribute; ++i) {
    const char* name = n->proto->attribute[i]->name;
    size_t len = name ? strlen(name) : 0;
    const char* hit = len ? strstr(taken, name) : NULL;
    while (hit && !((hit == taken || hit[-1] == ',') && hit[len] == ','))
      hit = strstr(hit + 1, name);
    if (!hit)
      return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                                "unsupported attribute %s", name ? name : "");
  }
  return NULL;
}

static bool has_in(const tj_onnx_node_t* n, int32_t i) {
  return i < n->num_inputs && n->inputs[i] != NULL;
}

// A copy of |v| in the arena: a sequence's element outlives a later
// redefinition of the name it came from.
static tj_onnx_val_t* copy_val(tj_onnx_importer_t* im, const tj_onnx_val_t* v) {
  return tj_arena_memdup(&im->arena, v, sizeof *v);
}

// An element made from graph value |v|; NULL after an error (*|status|).
static tj_onnx_val_t* value_elem(tj_onnx_importer_t* im,
                                 const tj_onnx_node_t* n, tj_value_t v,
                                 tj_status_t* status) {
  if (tj_value_is_none(v)) {
    tj_status_t s = tj_graph_status(im->graph);
    if (!s) s = tj_internal("a builder returned none without an error");
    *status = tj_status_annotate(s, "onnx: node %d (%s)", (int)n->index,
                                 n->proto->op_type);
    return NULL;
  }
  tj_onnx_val_t val;
  memset(&val, 0, sizeof val);
  val.value = v;
  val.dtype = tj_graph_value_dtype(im->graph, v);
  val.rank = tj_graph_value_rank(im->graph, v);
  tj_graph_value_dims(im->graph, v, val.dims);
  tj_onnx_val_t* e = copy_val(im, &val);
  if (!e) *status = tj_status_oom();
  return e;
}

// Defines output 0 as the sequence of |count| elements of |dtype|.
static tj_status_t define_seq(tj_onnx_importer_t* im, const tj_onnx_node_t* n,
                              tj_dtype_t dtype, int32_t count,
                              tj_onnx_val_t* const* elems) {
  if (n->proto->n_output < 1 || !n->proto->output[0][0]) return NULL;
  tj_onnx_val_t val;
  memset(&val, 0, sizeof val);
  val.dtype = dtype;
  val.is_sequence = true;
  val.seq_length = count;
  tj_onnx_val_t** copy =
      tj_arena_alloc(&im->arena, sizeof(*copy) * (size_t)(count + 1));
  if (!copy) return tj_status_oom();
  if (count) memcpy(copy, elems, sizeof(*copy) * (size_t)count);
  val.seq = copy;
  return tj_onnx_define(im, n->proto->output[0], &val);
}

// Input |i| as a sequence; an error naming it when it is a tensor.
static tj_status_t seq_in(const tj_onnx_importer_t* im, const tj_onnx_node_t* n,
                          int32_t i, const tj_onnx_val_t** out) {
  if (!has_in(n, i) || !n->inputs[i]->is_sequence)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "input %d must be a sequence", (int)i);
  *out = n->inputs[i];
  return NULL;
}

// A known integer scalar input (a position, a split size) into *|out|.
static tj_status_t known_int(const tj_onnx_importer_t* im,
                             const tj_onnx_node_t* n, int32_t i,
                             const char* what, int64_t* out) {
  const tj_onnx_val_t* v = n->inputs[i];
  if (v->is_sequence || v->none || v->rank != 0 ||
      (v->dtype != TJ_DTYPE_I32 && v->dtype != TJ_DTYPE_I64))
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "input %d (%s) must be an int32 or int64 scalar",
                              (int)i, what);
  if (!v->data)
    return tj_onnx_node_error(
        im, n, TJ_STATUS_UNSUPPORTED,
        "input %d (%s, \"%s\") must be a constant: sequences are resolved "
        "at import",
        (int)i, what, n->proto->input[i]);
  *out = v->dtype == TJ_DTYPE_I32 ? *(const int32_t*)v->data
                                  : *(const int64_t*)v->data;
  return NULL;
}

// A position in [-len, len - 1] (|insert|: [-len, len]) made >= 0.
static tj_status_t position(const tj_onnx_importer_t* im,
                            const tj_onnx_node_t* n, int32_t i, int32_t len,
                            bool insert, int32_t* out) {
  int64_t p;
  TJ_RETURN_IF_ERROR(known_int(im, n, i, "position", &p));
  int64_t hi = insert ? len : len - 1;
  if (p < -(int64_t)len || p > hi)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "position %lld is outside [%d, %lld]",
                              (long long)p, -(int)len, (long long)hi);
  *out = (int32_t)(p < 0 ? p + len : p);
  return NULL;
}

static tj_status_t tensor_in(const tj_onnx_importer_t* im,
                             const tj_onnx_node_t* n, int32_t i) {
  if (!has_in(n, i))
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "input %d is required", (int)i);
  if (n->inputs[i]->is_sequence || n->inputs[i]->none)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "input %d (\"%s\") must be a tensor", (int)i,
                              n->proto->input[i]);
  if (n->inputs[i]->symbolic)
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "input %d is a shape with symbolic dims", (int)i);
  return NULL;
}

static tj_status_t split_to_sequence(tj_onnx_importer_t* im,
                                     tj_onnx_node_t* n) {
  TJ_RETURN_IF_ERROR(check_attrs(im, n, "axis,keepdims,"));
  TJ_RETURN_IF_ERROR(tensor_in(im, n, 0));
  tj_onnx_val_t* x = n->inputs[0];
  int64_t axis = attr_i(n, "axis", 0);
  if (axis < -x->rank || axis >= x->rank)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "axis %lld for rank %d", (long long)axis,
                              (int)x->rank);
  int32_t a = (int32_t)(axis < 0 ? axis + x->rank : axis);
  int64_t dim = x->dims[a];
  if (dim < 0)
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "the split axis %d is symbolic", (int)a);
  // The sizes of the pieces.
  int64_t count = 0;
  int64_t* sizes = NULL;
  bool squeeze = false;
  if (!has_in(n, 1)) {
    // One piece per index; keepdims = 0 drops the axis.
    count = dim;
    squeeze = attr_i(n, "keepdims", 1) == 0;
  } else {
    const tj_onnx_val_t* s = n->inputs[1];
    if (!s->data)
      return tj_onnx_node_error(
          im, n, TJ_STATUS_UNSUPPORTED,
          "input 1 (split, \"%s\") must be a constant: sequences are "
          "resolved at import",
          n->proto->input[1]);
    if ((s->dtype != TJ_DTYPE_I32 && s->dtype != TJ_DTYPE_I64) || s->rank > 1)
      return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                "split must be an int scalar or 1-D");
    if (s->rank == 0) {
      int64_t k;
      TJ_RETURN_IF_ERROR(known_int(im, n, 1, "split", &k));
      if (k <= 0)
        return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                  "split %lld is not positive", (long long)k);
      count = (dim + k - 1) / k;
    } else {
      count = s->dims[0];
    }
  }
  if (count > 4096)
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "%lld pieces (at most 4096)", (long long)count);
  sizes = tj_arena_alloc(&im->arena, sizeof(int64_t) * (size_t)(count + 1));
  tj_onnx_val_t** elems =
      tj_arena_alloc(&im->arena, sizeof(*elems) * (size_t)(count + 1));
  if (!sizes || !elems) return tj_status_oom();
  int64_t total = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (!has_in(n, 1)) {
      sizes[i] = 1;
    } else if (n->inputs[1]->rank == 0) {
      int64_t k;
      TJ_RETURN_IF_ERROR(known_int(im, n, 1, "split", &k));
      sizes[i] = dim - total < k ? dim - total : k;
    } else {
      const tj_onnx_val_t* s = n->inputs[1];
      sizes[i] = s->dtype == TJ_DTYPE_I32 ? ((const int32_t*)s->data)[i]
                                          : ((const int64_t*)s->data)[i];
      if (sizes[i] < 0)
        return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                  "split[%lld] = %lld is negative",
                                  (long long)i, (long long)sizes[i]);
    }
    total += sizes[i];
  }
  if (total != dim)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "the split sizes add up to %lld, not the axis "
                              "size %lld",
                              (long long)total, (long long)dim);
  tj_value_t xv = tj_onnx_value(im, x);
  tj_status_t status = NULL;
  int64_t at = 0;
  for (int64_t i = 0; i < count; ++i) {
    int64_t starts[TJ_MAX_RANK], stops[TJ_MAX_RANK];
    for (int32_t d = 0; d < x->rank; ++d) {
      starts[d] = 0;
      stops[d] = INT64_MAX;
    }
    starts[a] = at;
    stops[a] = at + sizes[i];
    at += sizes[i];
    tj_value_t piece = tj_graph_slice(im->graph, xv, starts, stops, NULL);
    if (squeeze && !tj_value_is_none(piece)) {
      int64_t dims[TJ_MAX_RANK];
      int32_t r = 0;
      for (int32_t d = 0; d < x->rank; ++d)
        if (d != a) dims[r++] = x->dims[d];
      piece = tj_graph_reshape(im->graph, piece, r, dims);
    }
    elems[i] = value_elem(im, n, piece, &status);
    if (!elems[i]) return status;
  }
  return define_seq(im, n, x->dtype, (int32_t)count, elems);
}

static tj_status_t concat_from_sequence(tj_onnx_importer_t* im,
                                        tj_onnx_node_t* n) {
  TJ_RETURN_IF_ERROR(check_attrs(im, n, "axis,new_axis,"));
  const tj_onnx_val_t* s = NULL;
  TJ_RETURN_IF_ERROR(seq_in(im, n, 0, &s));
  const Onnx__AttributeProto* ax = attr(n, "axis");
  if (!ax || !ax->has_i)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "the axis attribute is required");
  bool stack = attr_i(n, "new_axis", 0) != 0;
  if (s->seq_length == 0)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "the sequence is empty");
  int32_t rank = s->seq[0]->rank;
  int32_t out_rank = rank + (stack ? 1 : 0);
  if (ax->i < -out_rank || ax->i >= out_rank)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "axis %lld for rank %d", (long long)ax->i,
                              (int)out_rank);
  int32_t a = (int32_t)(ax->i < 0 ? ax->i + out_rank : ax->i);
  tj_value_t* parts =
      tj_arena_alloc(&im->arena, sizeof(tj_value_t) * (size_t)s->seq_length);
  if (!parts) return tj_status_oom();
  for (int32_t i = 0; i < s->seq_length; ++i) {
    tj_onnx_val_t* e = s->seq[i];
    parts[i] = tj_onnx_value(im, e);
    if (stack && !tj_value_is_none(parts[i])) {
      int64_t dims[TJ_MAX_RANK];
      for (int32_t d = 0, k = 0; d < out_rank; ++d)
        dims[d] = d == a ? 1 : e->dims[k++];
      parts[i] = tj_graph_reshape(im->graph, parts[i], out_rank, dims);
    }
  }
  tj_status_t status = NULL;
  tj_onnx_val_t* y = value_elem(
      im, n, tj_graph_concat(im->graph, s->seq_length, parts, a), &status);
  if (!y) return status;
  return tj_onnx_define(im, n->proto->output[0], y);
}

tj_status_t tj_onnx_convert_sequence(tj_onnx_importer_t* im,
                                     tj_onnx_node_t* n) {
  const char* op = n->proto->op_type;
  if (strcmp(op, "SplitToSequence") == 0) return split_to_sequence(im, n);
  if (strcmp(op, "ConcatFromSequence") == 0) return concat_from_sequence(im, n);
  if (strcmp(op, "SequenceEmpty") == 0) {
    TJ_RETURN_IF_ERROR(check_attrs(im, n, "dtype,"));
    tj_dtype_t dtype = TJ_DTYPE_F32;
    const Onnx__AttributeProto* d = attr(n, "dtype");
    if (d && d->has_i && !tj_onnx_dtype((int32_t)d->i, &dtype))
      return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                                "dtype %s is not supported",
                                tj_onnx_type_name((int32_t)d->i));
    return define_seq(im, n, dtype, 0, NULL);
  }
  TJ_RETURN_IF_ERROR(check_attrs(im, n, ""));
  if (strcmp(op, "SequenceConstruct") == 0) {
    if (n->num_inputs < 1)
      return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT, "no inputs");
    tj_onnx_val_t* elems[32];
    for (int32_t i = 0; i < n->num_inputs; ++i) {
      TJ_RETURN_IF_ERROR(tensor_in(im, n, i));
      if (n->inputs[i]->dtype != n->inputs[0]->dtype)
        return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                  "input %d is %s, input 0 %s", (int)i,
                                  tj_dtype_name(n->inputs[i]->dtype),
                                  tj_dtype_name(n->inputs[0]->dtype));
      elems[i] = copy_val(im, n->inputs[i]);
      if (!elems[i]) return tj_status_oom();
    }
    return define_seq(im, n, n->inputs[0]->dtype, n->num_inputs, elems);
  }
  const tj_onnx_val_t* s = NULL;
  TJ_RETURN_IF_ERROR(seq_in(im, n, 0, &s));
  int32_t len = s->seq_length;
  if (strcmp(op, "SequenceLength") == 0) {
    if (n->proto->n_output < 1 || !n->proto->output[0][0]) return NULL;
    tj_onnx_val_t val;
    memset(&val, 0, sizeof val);
    val.dtype = TJ_DTYPE_I64;
    int64_t* data = tj_arena_alloc(&im->arena, sizeof(int64_t));
    if (!data) return tj_status_oom();
    *data = len;
    val.data = data;
    return tj_onnx_define(im, n->proto->output[0], &val);
  }
  if (strcmp(op, "SequenceAt") == 0) {
    int32_t p;
    if (!has_in(n, 1))
      return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                "input 1 (position) is required");
    TJ_RETURN_IF_ERROR(position(im, n, 1, len, false, &p));
    tj_onnx_val_t copy = *s->seq[p];
    return tj_onnx_define(im, n->proto->output[0], &copy);
  }
  tj_onnx_val_t** elems =
      tj_arena_alloc(&im->arena, sizeof(*elems) * (size_t)(len + 2));
  if (!elems) return tj_status_oom();
  if (strcmp(op, "SequenceInsert") == 0) {
    TJ_RETURN_IF_ERROR(tensor_in(im, n, 1));
    if (len && n->inputs[1]->dtype != s->dtype)
      return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                "the tensor is %s, the sequence's elements %s",
                                tj_dtype_name(n->inputs[1]->dtype),
                                tj_dtype_name(s->dtype));
    int32_t p = len;
    if (has_in(n, 2)) TJ_RETURN_IF_ERROR(position(im, n, 2, len, true, &p));
    tj_onnx_val_t* t = copy_val(im, n->inputs[1]);
    if (!t) return tj_status_oom();
    for (int32_t i = 0, k = 0; i <= len; ++i)
      elems[i] = i == p ? t : s->seq[k++];
    return define_seq(im, n, n->inputs[1]->dtype, len + 1, elems);
  }
  // SequenceErase
  if (len == 0)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "the sequence is empty");
  int32_t p = len - 1;
  if (has_in(n, 1)) TJ_RETURN_IF_ERROR(position(im, n, 1, len, false, &p));
  for (int32_t i = 0, k = 0; i < len; ++i)
    if (i != p) elems[k++] = s->seq[i];
  return define_seq(im, n, s->dtype, len - 1, elems);
}
