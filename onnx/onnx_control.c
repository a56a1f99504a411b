// The ONNX importer's control flow: If, Loop and Scan. The IR has no
// control flow of its own, so a tensor compiler that wants fused code
// imports each subgraph inline, into the one graph being built:
//
//   If    a condition known at import takes only its branch; a run-time
//         condition imports both branches and selects each output
//         elementwise (both branches are computed; every op the importer
//         maps is a pure function of its inputs, so running the untaken
//         one changes only the time spent).
//   Loop  a trip count and condition known at import (the condition each
//         iteration too) unroll the body; loop-carried values may change
//         shape between iterations; scan outputs are stacked on a new
//         axis 0.
//   Scan  (opset 9+) unrolled over its static sequence length, each scan
//         input sliced along its axis in its direction, each scan output
//         stacked along its axis in its direction.
//
// A subgraph is imported in a scope of its own (tj_onnx_scope_push): its
// inputs are defined as the values given, its nodes see every outer value
// by name (outer-scope capture), and its names are forgotten afterwards.
// Unrolling is capped at TJ_ONNX_UNROLL_LIMIT body node copies.

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "onnx/onnx_internal.h"

#define G (im->graph)

// Subgraphs nest at most this deep (a hostile model could nest them as deep
// as its bytes allow).
#define MAX_DEPTH 32
// A Loop or Scan carries, and scans, at most this many values.
#define MAX_VALUES 64

bool tj_onnx_is_control(const char* op_type) {
  return strcmp(op_type, "If") == 0 || strcmp(op_type, "Loop") == 0 ||
         strcmp(op_type, "Scan") == 0;
}

//===--- helpers ---===//

static int64_t numel(const tj_onnx_val_t* v) {
  int64_t count = 1;
  for (int32_t i = 0; i < v->rank; ++i)
    count *= v->dims[i] < 0 ? 0 : v->dims[i];
  return count;
}

// "f32[2,?,3]" (? a symbolic dim) into |buf|.
static const char* type_str(const tj_onnx_val_t* v, char* buf, size_t size) {
  int o = snprintf(buf, size, "%s[", tj_dtype_name(v->dtype));
  for (int32_t i = 0; i < v->rank && o > 0 && (size_t)o < size; ++i) {
    if (v->dims[i] < 0)
      o += snprintf(buf + o, size - (size_t)o, "%s?", i ? "," : "");
    else
      o += snprintf(buf + o, size - (size_t)o, "%s%lld", i ? "," : "",
                    (long long)v->dims[i]);
  }
  if (o > 0 && (size_t)o < size) snprintf(buf + o, size - (size_t)o, "]");
  return buf;
}

static bool same_type(const tj_onnx_val_t* a, const tj_onnx_val_t* b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int32_t i = 0; i < a->rank; ++i)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

static const Onnx__AttributeProto* find_attr(const tj_onnx_node_t* n,
                                             const char* name) {
  for (size_t i = 0; i < n->proto->n_attribute; ++i) {
    const Onnx__AttributeProto* a = n->proto->attribute[i];
    if (a->name && strcmp(a->name, name) == 0) return a;
  }
  return NULL;
}

static tj_status_t graph_attr(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                              const char* name, const Onnx__GraphProto** out) {
  const Onnx__AttributeProto* a = find_attr(n, name);
  *out = NULL;
  if (!a)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "attribute %s (a graph) is required", name);
  if (!a->g)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "attribute %s is not a graph", name);
  *out = a->g;
  return NULL;
}

// Up to |max| ints of attribute |name| into |out| (|*count| of them; 0
// when absent).
static tj_status_t ints_attr(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                             const char* name, int64_t* out, int32_t* count,
                             int32_t max) {
  const Onnx__AttributeProto* a = find_attr(n, name);
  *count = 0;
  if (!a) return NULL;
  if (a->n_ints > (size_t)max)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "attribute %s has %zu entries for %d values",
                              name, a->n_ints, (int)max);
  for (size_t i = 0; i < a->n_ints; ++i) out[i] = a->ints[i];
  *count = (int32_t)a->n_ints;
  return NULL;
}

// |*out| describes graph value |v| (none: the graph's error, named).
static tj_status_t val_of(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                          tj_value_t v, tj_onnx_val_t* out) {
  memset(out, 0, sizeof *out);
  if (tj_value_is_none(v)) {
    tj_status_t s = tj_graph_status(G);
    if (!s) s = tj_internal("a builder returned none without an error");
    return tj_status_annotate(s, "onnx: node %d \"%s\" (%s, opset %lld)",
                              (int)n->index,
                              n->proto->name ? n->proto->name : "",
                              n->proto->op_type, (long long)im->opset);
  }
  out->value = v;
  out->dtype = tj_graph_value_dtype(G, v);
  out->rank = tj_graph_value_rank(G, v);
  tj_graph_value_dims(G, v, out->dims);
  return NULL;
}

// A known bool or int64 scalar of the arena.
static tj_status_t known_scalar(tj_onnx_importer_t* im, tj_dtype_t dtype,
                                int64_t value, tj_onnx_val_t* out) {
  memset(out, 0, sizeof *out);
  out->dtype = dtype;
  if (dtype == TJ_DTYPE_BOOL) {
    uint8_t* p = tj_arena_alloc(&im->arena, 1);
    if (!p) return tj_status_oom();
    *p = value != 0;
    out->data = p;
  } else {
    int64_t* p = tj_arena_alloc(&im->arena, sizeof *p);
    if (!p) return tj_status_oom();
    *p = value;
    out->data = p;
  }
  return NULL;
}

// The truth of known single-element |v|.
static bool known_truth(const tj_onnx_val_t* v) {
  size_t size = tj_dtype_size(v->dtype);
  const uint8_t* p = v->data;
  for (size_t i = 0; i < size; ++i)
    if (p[i]) return true;
  return false;
}

//===--- subgraphs ---===//

// Checks a subgraph input or output's declared type, if any, against
// |val|: only tensors, and a declared dtype must be |val|'s.
static tj_status_t check_declared(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                  const char* what, const char* kind,
                                  size_t index,
                                  const Onnx__ValueInfoProto* info,
                                  const tj_onnx_val_t* val) {
  const Onnx__TypeProto* t = info->type;
  if (!t || t->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET) return NULL;
  // An optional is the value it holds, or an empty one (onnx_ops.c); a
  // sequence a list of tensors of its element type (onnx_sequence.c).
  if (t->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE &&
      t->optional_type && t->optional_type->elem_type) {
    if (val->none) return NULL;
    t = t->optional_type->elem_type;
  }
  if (t->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE &&
      t->sequence_type && val->is_sequence) {
    const Onnx__TypeProto* e = t->sequence_type->elem_type;
    if (e && e->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE &&
        e->tensor_type && e->tensor_type->has_elem_type &&
        e->tensor_type->elem_type) {
      tj_dtype_t dtype;
      if (!tj_onnx_dtype(e->tensor_type->elem_type, &dtype) ||
          dtype != val->dtype)
        return tj_onnx_node_error(
            im, n, TJ_STATUS_INVALID_ARGUMENT,
            "%s %s %zu \"%s\" is declared a sequence of %s but holds %s", what,
            kind, index, info->name,
            tj_onnx_type_name(e->tensor_type->elem_type),
            tj_dtype_name(val->dtype));
    }
    return NULL;
  }
  if (val->is_sequence || val->none)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "%s %s %zu \"%s\" is declared a tensor but is %s",
                              what, kind, index, info->name,
                              val->none ? "an empty optional" : "a sequence");
  if (t->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !t->tensor_type)
    return tj_onnx_node_error(
        im, n, TJ_STATUS_UNSUPPORTED,
        "%s %s %zu \"%s\" is not a tensor (sequence, map, optional and "
        "sparse values are not supported)",
        what, kind, index, info->name);
  const Onnx__TypeProto__Tensor* tt = t->tensor_type;
  if (!tt->has_elem_type || tt->elem_type == 0) return NULL;
  tj_dtype_t dtype;
  if (!tj_onnx_dtype(tt->elem_type, &dtype))
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "%s %s %zu \"%s\": dtype %s is not supported",
                              what, kind, index, info->name,
                              tj_onnx_type_name(tt->elem_type));
  if (dtype != val->dtype)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "%s %s %zu \"%s\" is declared %s but is %s", what,
                              kind, index, info->name, tj_dtype_name(dtype),
                              tj_dtype_name(val->dtype));
  return NULL;
}

// Imports |body| (node |n|'s attribute |what|) once, in a scope of its own:
// body input i is |ins|[i], its nodes capture outer values by name, and
// |outs|[k] gets a copy of body output k (|num_outs| of them). |iteration|
// (-1: none) names the unrolled copy in errors.
static tj_status_t import_body(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                               const Onnx__GraphProto* body, const char* what,
                               int64_t iteration, const tj_onnx_val_t* ins,
                               size_t num_ins, tj_onnx_val_t* outs,
                               size_t num_outs) {
  if (body->n_input != num_ins || body->n_output < num_outs)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "%s has %zu inputs and %zu outputs; %zu and %zu "
                              "expected",
                              what, body->n_input, body->n_output, num_ins,
                              num_outs);
  if (im->scope_depth >= MAX_DEPTH)
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "subgraphs nest deeper than %d", MAX_DEPTH);
  if (body->n_sparse_initializer)
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "%s has sparse initializers", what);
  int64_t copies = body->n_node ? (int64_t)body->n_node : 1;
  im->unrolled_nodes += copies;
  if (im->unrolled_nodes > TJ_ONNX_UNROLL_LIMIT)
    return tj_onnx_node_error(
        im, n, TJ_STATUS_UNSUPPORTED,
        "unrolling %s: %lld body node copies are above the limit of %d "
        "(TJ_ONNX_UNROLL_LIMIT; the IR has no run-time loops)",
        what, (long long)im->unrolled_nodes, TJ_ONNX_UNROLL_LIMIT);
  tj_onnx_scope_t scope;
  tj_onnx_scope_push(im, &scope);
  tj_status_t status = NULL;
  for (size_t i = 0; !status && i < body->n_initializer; ++i) {
    const Onnx__TensorProto* t = body->initializer[i];
    if (!t->name || !t->name[0]) {
      status = tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                  "%s: initializer %zu has no name", what, i);
      break;
    }
    tj_onnx_val_t val;
    status = tj_onnx_tensor_value(im, t, t->name, &val);
    if (!status) status = tj_onnx_define(im, t->name, &val);
  }
  for (size_t i = 0; !status && i < num_ins; ++i) {
    const Onnx__ValueInfoProto* info = body->input[i];
    if (!info->name || !info->name[0]) {
      status = tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                  "%s input %zu has no name", what, i);
      break;
    }
    status = check_declared(im, n, what, "input", i, info, &ins[i]);
    if (!status) status = tj_onnx_define(im, info->name, &ins[i]);
  }
  int32_t counter = 0;
  if (!status)
    status = tj_onnx_walk_nodes(im, body->node, body->n_node, &counter);
  for (size_t k = 0; !status && k < num_outs; ++k) {
    const Onnx__ValueInfoProto* info = body->output[k];
    tj_onnx_val_t* v = info->name ? tj_onnx_lookup(im, info->name) : NULL;
    if (!v) {
      status = tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                  "%s output %zu \"%s\" is not defined", what,
                                  k, info->name ? info->name : "");
      break;
    }
    status = check_declared(im, n, what, "output", k, info, v);
    outs[k] = *v;
  }
  tj_onnx_scope_pop(im, &scope);
  if (status && tj_status_code(status) != TJ_STATUS_OUT_OF_MEMORY) {
    // The If, Loop or Scan and the construct, then the inner node's error.
    char at[48] = "";
    if (iteration >= 0)
      snprintf(at, sizeof at, ", iteration %lld", (long long)iteration);
    status = tj_status_annotate(
        status, "onnx: node %d \"%s\" (%s, opset %lld): %s%s", (int)n->index,
        n->proto->name ? n->proto->name : "", n->proto->op_type,
        (long long)im->opset, what, at);
  }
  return status;
}

// Defines node output |k| (if the node names it) as |val|.
static tj_status_t define_out(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                              size_t k, const tj_onnx_val_t* val) {
  if (k >= n->proto->n_output || !n->proto->output[k][0]) return NULL;
  return tj_onnx_define(im, n->proto->output[k], val);
}

//===--- slicing and stacking ---===//

// Element |index| of |x| along |axis| (the axis dropped).
static tj_status_t take(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                        tj_onnx_val_t* x, int32_t axis, int64_t index,
                        tj_onnx_val_t* out) {
  int64_t len = x->dims[axis];
  int64_t dims[TJ_MAX_RANK];
  int32_t rank = 0;
  for (int32_t i = 0; i < x->rank; ++i)
    if (i != axis) dims[rank++] = x->dims[i];
  if (x->data) {
    // Known: copied on the host, so shape computations stay known.
    size_t esize = tj_dtype_size(x->dtype);
    int64_t outer = 1, inner = 1;
    for (int32_t i = 0; i < axis; ++i) outer *= x->dims[i];
    for (int32_t i = axis + 1; i < x->rank; ++i) inner *= x->dims[i];
    size_t chunk = (size_t)inner * esize;
    size_t bytes = (size_t)outer * chunk;
    uint8_t* data = tj_arena_alloc(&im->arena, bytes);
    if (!data) return tj_status_oom();
    for (int64_t o = 0; o < outer; ++o)
      memcpy(data + (size_t)o * chunk,
             (const uint8_t*)x->data + (size_t)(o * len + index) * chunk,
             chunk);
    memset(out, 0, sizeof *out);
    out->dtype = x->dtype;
    out->rank = rank;
    memcpy(out->dims, dims, sizeof dims);
    out->data = data;
    out->symbolic = x->symbolic;
    return NULL;
  }
  int64_t starts[TJ_MAX_RANK], stops[TJ_MAX_RANK];
  for (int32_t i = 0; i < x->rank; ++i) {
    starts[i] = 0;
    stops[i] = INT64_MAX;
  }
  starts[axis] = index;
  stops[axis] = index + 1;
  tj_value_t v = tj_graph_slice(G, tj_onnx_value(im, x), starts, stops, NULL);
  return val_of(im, n, tj_graph_reshape(G, v, rank, dims), out);
}

// Stacks |count| values of one type along a new |axis| (|reverse|: the last
// one first), as a scan output.
static tj_status_t stack(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                         const char* what, int32_t index, tj_onnx_val_t* parts,
                         int64_t count, int64_t axis, bool reverse,
                         tj_onnx_val_t* out) {
  const tj_onnx_val_t* first = &parts[0];
  for (int64_t t = 1; t < count; ++t) {
    if (!same_type(&parts[t], first)) {
      char a[160], b[160];
      return tj_onnx_node_error(
          im, n, TJ_STATUS_INVALID_ARGUMENT,
          "scan output %d of %s is %s in iteration %lld but %s in iteration 0",
          (int)index, what, type_str(&parts[t], a, sizeof a), (long long)t,
          type_str(first, b, sizeof b));
    }
  }
  int32_t rank = first->rank + 1;
  if (axis < -rank || axis >= rank)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "scan output %d: axis %lld is outside rank %d",
                              (int)index, (long long)axis, (int)rank);
  if (axis < 0) axis += rank;
  if (rank > TJ_MAX_RANK)
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "scan output %d: rank %d is above %d", (int)index,
                              (int)rank, TJ_MAX_RANK);
  memset(out, 0, sizeof *out);
  out->dtype = first->dtype;
  out->rank = rank;
  for (int32_t i = 0, j = 0; i < rank; ++i)
    out->dims[i] = i == axis ? count : first->dims[j++];
  bool all_known = true, symbolic = false;
  for (int64_t t = 0; t < count; ++t) {
    all_known &= parts[t].data != NULL;
    symbolic |= parts[t].symbolic;
  }
  if (all_known && numel(out) <= TJ_ONNX_FOLD_LIMIT) {
    size_t esize = tj_dtype_size(first->dtype);
    int64_t outer = 1, inner = 1;
    for (int32_t i = 0; i < axis; ++i) outer *= first->dims[i];
    for (int32_t i = (int32_t)axis; i < first->rank; ++i)
      inner *= first->dims[i];
    size_t chunk = (size_t)inner * esize;
    uint8_t* data = tj_arena_alloc(&im->arena, (size_t)(outer * count) * chunk);
    if (!data) return tj_status_oom();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t t = 0; t < count; ++t) {
        const tj_onnx_val_t* p = &parts[reverse ? count - 1 - t : t];
        memcpy(data + (size_t)(o * count + t) * chunk,
               (const uint8_t*)p->data + (size_t)o * chunk, chunk);
      }
    }
    out->data = data;
    out->symbolic = symbolic;
    return NULL;
  }
  if (symbolic)
    return tj_onnx_node_error(
        im, n, TJ_STATUS_UNSUPPORTED,
        "scan output %d is a shape with symbolic dims that is not known",
        (int)index);
  tj_value_t* values = tj_alloc(im->allocator, (size_t)count * sizeof *values);
  if (!values) return tj_status_oom();
  int64_t dims[TJ_MAX_RANK];
  for (int32_t i = 0, j = 0; i < rank; ++i)
    dims[i] = i == axis ? 1 : first->dims[j++];
  for (int64_t t = 0; t < count; ++t) {
    tj_onnx_val_t* p = &parts[reverse ? count - 1 - t : t];
    values[t] = tj_graph_reshape(G, tj_onnx_value(im, p), rank, dims);
  }
  tj_value_t v =
      count == 1 ? values[0]
                 : tj_graph_concat(G, (int32_t)count, values, (int32_t)axis);
  tj_free(im->allocator, values, (size_t)count * sizeof *values);
  return val_of(im, n, v, out);
}

// Per-iteration scan outputs: |width| values an iteration, grown as the
// loop runs (its length may be known only at its end).
typedef struct {
  tj_onnx_val_t* vals;
  uint32_t capacity;  // in iterations
  int64_t count;      // iterations stored
  int32_t width;
} scans_t;

static tj_status_t scans_append(tj_onnx_importer_t* im, scans_t* s,
                                const tj_onnx_val_t* vals) {
  if (!s->width) {
    s->count++;
    return NULL;
  }
  if (s->count >= UINT32_MAX / 2) return tj_status_oom();
  TJ_RETURN_IF_ERROR(tj_array_reserve(
      im->allocator, (void**)&s->vals, &s->capacity, (uint32_t)s->count + 1,
      (size_t)s->width * sizeof(tj_onnx_val_t)));
  memcpy(&s->vals[s->count * s->width], vals,
         (size_t)s->width * sizeof(tj_onnx_val_t));
  s->count++;
  return NULL;
}

static void scans_free(tj_onnx_importer_t* im, scans_t* s) {
  tj_free(im->allocator, s->vals,
          (size_t)s->capacity * (size_t)s->width * sizeof(tj_onnx_val_t));
}

// Stacks scan output |k| of every iteration into node output |first_out| +
// |k|.
static tj_status_t define_scan_out(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                   const scans_t* s, int32_t k,
                                   size_t first_out, int64_t axis,
                                   bool reverse) {
  size_t o = first_out + (size_t)k;
  if (o >= n->proto->n_output || !n->proto->output[o][0]) return NULL;
  if (s->count == 0)
    return tj_onnx_node_error(
        im, n, TJ_STATUS_UNSUPPORTED,
        "zero iterations: scan output %d (\"%s\") would be empty of a shape "
        "no iteration gave",
        (int)k, n->proto->output[o]);
  tj_onnx_val_t* parts =
      tj_alloc(im->allocator, (size_t)s->count * sizeof *parts);
  if (!parts) return tj_status_oom();
  for (int64_t t = 0; t < s->count; ++t) parts[t] = s->vals[t * s->width + k];
  tj_onnx_val_t val;
  tj_status_t status =
      stack(im, n, "the body", k, parts, s->count, axis, reverse, &val);
  tj_free(im->allocator, parts, (size_t)s->count * sizeof *parts);
  if (!status) status = define_out(im, n, o, &val);
  return status;
}

// Defines node output |o| (scan output |k|) as an empty known tensor of
// [0] + |elem|'s shape: a loop that ran zero times.
static tj_status_t define_empty(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                int32_t k, size_t o,
                                const tj_onnx_val_t* elem) {
  if (o >= n->proto->n_output || !n->proto->output[o][0]) return NULL;
  if (elem->rank + 1 > TJ_MAX_RANK)
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "scan output %d: rank %d is above %d", (int)k,
                              (int)elem->rank + 1, TJ_MAX_RANK);
  tj_onnx_val_t val;
  memset(&val, 0, sizeof val);
  val.dtype = elem->dtype;
  val.rank = elem->rank + 1;
  for (int32_t i = 0; i < elem->rank; ++i) {
    if (elem->dims[i] < 0)
      return tj_onnx_node_error(
          im, n, TJ_STATUS_UNSUPPORTED,
          "zero iterations: scan output %d (\"%s\") would be an empty "
          "tensor of a symbolic dim",
          (int)k, n->proto->output[o]);
    val.dims[i + 1] = elem->dims[i];
  }
  val.data = tj_arena_alloc(&im->arena, 0);
  if (!val.data) return tj_status_oom();
  return define_out(im, n, o, &val);
}

//===--- If ---===//

tj_status_t tj_onnx_convert_if(tj_onnx_importer_t* im, tj_onnx_node_t* n) {
  if (im->scope_depth == 0) im->unrolled_nodes = 0;
  if (n->num_inputs != 1 || !n->inputs[0])
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "%d inputs; it takes the condition only",
                              (int)n->num_inputs);
  const Onnx__GraphProto *then_g, *else_g;
  TJ_RETURN_IF_ERROR(graph_attr(im, n, "then_branch", &then_g));
  TJ_RETURN_IF_ERROR(graph_attr(im, n, "else_branch", &else_g));
  size_t num_out = n->proto->n_output;
  if (num_out > MAX_VALUES)
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "%zu outputs (at most %d)", num_out, MAX_VALUES);
  if (then_g->n_output != num_out || else_g->n_output != num_out)
    return tj_onnx_node_error(
        im, n, TJ_STATUS_INVALID_ARGUMENT,
        "%zu outputs, but then_branch has %zu and else_branch %zu", num_out,
        then_g->n_output, else_g->n_output);
  tj_onnx_val_t* cond = n->inputs[0];
  if (numel(cond) != 1)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "the condition has %lld elements; one expected",
                              (long long)numel(cond));
  if (cond->symbolic)
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "the condition is a symbolic dim (a shape "
                              "element known only at run time)");
  // In the arena, not on the stack: subgraphs nest MAX_DEPTH deep.
  tj_onnx_val_t* then_out =
      tj_arena_alloc(&im->arena, 2 * (num_out + 1) * sizeof *then_out);
  if (!then_out) return tj_status_oom();
  tj_onnx_val_t* else_out = then_out + num_out + 1;
  if (cond->data) {
    // Known at import: only the taken branch exists (the other may not even
    // be valid for these inputs, as in ONNX's own function bodies).
    bool taken = known_truth(cond);
    TJ_RETURN_IF_ERROR(import_body(im, n, taken ? then_g : else_g,
                                   taken ? "then_branch" : "else_branch", -1,
                                   NULL, 0, then_out, num_out));
    for (size_t k = 0; k < num_out; ++k)
      TJ_RETURN_IF_ERROR(define_out(im, n, k, &then_out[k]));
    return NULL;
  }
  TJ_RETURN_IF_ERROR(import_body(im, n, then_g, "then_branch", -1, NULL, 0,
                                 then_out, num_out));
  TJ_RETURN_IF_ERROR(import_body(im, n, else_g, "else_branch", -1, NULL, 0,
                                 else_out, num_out));
  // Both branches computed; each output selected by the run-time condition.
  tj_value_t c = tj_graph_reshape(G, tj_onnx_value(im, cond), 0, NULL);
  if (cond->dtype != TJ_DTYPE_BOOL)
    c = tj_graph_ne(G, c, tj_graph_scalar(G, cond->dtype, 0));
  for (size_t k = 0; k < num_out; ++k) {
    tj_onnx_val_t* a = &then_out[k];
    tj_onnx_val_t* b = &else_out[k];
    if (a->is_sequence || b->is_sequence || a->none || b->none)
      return tj_onnx_node_error(
          im, n, TJ_STATUS_UNSUPPORTED,
          "output %zu is a sequence or an optional, so input 0 (the "
          "condition, \"%s\") must be a constant: sequences and optionals "
          "are resolved at import",
          k, n->proto->input[0]);
    if (!same_type(a, b)) {
      char ta[160], tb[160];
      return tj_onnx_node_error(
          im, n, TJ_STATUS_UNSUPPORTED,
          "output %zu: then_branch gives %s, else_branch %s; with a condition "
          "known only at run time both branches are computed and selected "
          "elementwise, so they must agree in dtype and shape",
          k, type_str(a, ta, sizeof ta), type_str(b, tb, sizeof tb));
    }
    if (a->data && b->data && a->symbolic == b->symbolic &&
        memcmp(a->data, b->data, (size_t)numel(a) * tj_dtype_size(a->dtype)) ==
            0) {
      TJ_RETURN_IF_ERROR(define_out(im, n, k, a));  // the same either way
      continue;
    }
    if (a->symbolic || b->symbolic)
      return tj_onnx_node_error(
          im, n, TJ_STATUS_UNSUPPORTED,
          "output %zu is a shape with symbolic dims chosen by a condition "
          "known only at run time",
          k);
    tj_onnx_val_t val;
    TJ_RETURN_IF_ERROR(val_of(
        im, n, tj_graph_where(G, c, tj_onnx_value(im, a), tj_onnx_value(im, b)),
        &val));
    TJ_RETURN_IF_ERROR(define_out(im, n, k, &val));
  }
  return NULL;
}

//===--- Loop ---===//

// The node of |body| whose output 0 is |name|, or NULL.
static const Onnx__NodeProto* producer(const Onnx__GraphProto* body,
                                       const char* name) {
  for (size_t i = 0; i < body->n_node; ++i) {
    const Onnx__NodeProto* p = body->node[i];
    if (p->n_output >= 1 && p->op_type && strcmp(p->output[0], name) == 0)
      return p;
  }
  return NULL;
}

// Whether the |count| value infos all have names (an optional string that a
// malformed file may leave out).
static bool all_named(Onnx__ValueInfoProto* const* infos, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (!infos[i]->name || !infos[i]->name[0]) return false;
  return true;
}

// Whether body output |out| is body input |in| itself or Identity of it.
static bool passes(const Onnx__GraphProto* body, const char* out,
                   const char* in) {
  if (strcmp(out, in) == 0) return true;
  const Onnx__NodeProto* p = producer(body, out);
  return p && strcmp(p->op_type, "Identity") == 0 && p->n_input == 1 &&
         strcmp(p->input[0], in) == 0;
}

// Whether any node of the main graph after node |index|, or a graph
// output, reads |name|.
static bool read_later(const tj_onnx_importer_t* im, int32_t index,
                       const char* name) {
  const Onnx__GraphProto* g = im->model->graph;
  for (size_t i = 0; i < g->n_output; ++i)
    if (g->output[i]->name && strcmp(g->output[i]->name, name) == 0)
      return true;
  for (size_t i = (size_t)index + 1; i < g->n_node; ++i)
    for (size_t k = 0; k < g->node[i]->n_input; ++k)
      if (strcmp(g->node[i]->input[k], name) == 0) return true;
  return false;
}

// A Loop with a run-time trip count whose body is ONNX's expanded Range:
// one loop-carried value prev and one scan output, the body prev + d (d
// from outside the body) carried, prev scanned, the condition passed on.
// Its scan output is then the running sum tj_graph_range_count computes,
// of max(M, 0) elements (0 where the condition is false), its length a
// value symbol computed before the run. *|out_taken| false when the body
// is not of that form (nothing defined).
static tj_status_t loop_running_sum(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                    const Onnx__GraphProto* body,
                                    bool* out_taken) {
  *out_taken = false;
  if (body->n_input != 3 || body->n_output != 3 || n->num_inputs != 3 ||
      body->n_node > 3 || !n->inputs[0] || !n->inputs[2] ||
      !all_named(body->input, 3) || !all_named(body->output, 3))
    return NULL;
  const char* cond = body->input[1]->name;
  const char* prev = body->input[2]->name;
  if (!passes(body, body->output[0]->name, cond) ||
      !passes(body, body->output[2]->name, prev))
    return NULL;
  const Onnx__NodeProto* add = producer(body, body->output[1]->name);
  if (!add || strcmp(add->op_type, "Add") != 0 || add->n_input != 2)
    return NULL;
  int which = strcmp(add->input[0], prev) == 0   ? 1
              : strcmp(add->input[1], prev) == 0 ? 0
                                                 : -1;
  if (which < 0) return NULL;
  const char* dname = add->input[which];
  if (producer(body, dname) || strcmp(dname, cond) == 0 ||
      strcmp(dname, prev) == 0 || strcmp(dname, body->input[0]->name) == 0)
    return NULL;
  for (size_t i = 0; i < body->n_node; ++i) {
    const Onnx__NodeProto* p = body->node[i];
    if (p != add && (!p->op_type || strcmp(p->op_type, "Identity") != 0))
      return NULL;
  }
  tj_onnx_val_t* delta = tj_onnx_lookup(im, dname);
  tj_onnx_val_t* start = n->inputs[2];
  if (!delta || delta->rank != 0 || start->rank != 0 ||
      delta->dtype != start->dtype || delta->is_sequence || start->is_sequence)
    return NULL;
  *out_taken = true;
  // The final carried value (the sum one step further) is not made: it
  // must be unread.
  if (n->proto->n_output > 0 && n->proto->output[0][0] &&
      (im->scope_depth > 0 || read_later(im, n->index, n->proto->output[0])))
    return tj_onnx_node_error(
        im, n, TJ_STATUS_UNSUPPORTED,
        "with a run-time trip count (\"%s\") the body runs as a running "
        "sum whose scan output is computed, but its final loop-carried "
        "value \"%s\" is read: not supported",
        n->proto->input[0], n->proto->output[0]);
  tj_value_t count =
      tj_graph_reshape(G, tj_onnx_value(im, n->inputs[0]), 0, NULL);
  tj_onnx_val_t* c = n->inputs[1];
  if (c && c->data && !known_truth(c)) {
    count = tj_graph_scalar(G, TJ_DTYPE_I64, 0);
  } else if (c && !c->data) {
    // The loop runs only while cond holds, and the body passes it on.
    tj_dtype_t ct = tj_graph_value_dtype(G, count);
    count = tj_graph_mul(
        G, count,
        tj_graph_cast(G, tj_graph_reshape(G, tj_onnx_value(im, c), 0, NULL),
                      ct));
  }
  tj_onnx_val_t val;
  TJ_RETURN_IF_ERROR(
      val_of(im, n,
             tj_graph_range_count(G, tj_onnx_value(im, start), count,
                                  tj_onnx_value(im, delta)),
             &val));
  return define_out(im, n, 1, &val);
}

tj_status_t tj_onnx_convert_loop(tj_onnx_importer_t* im, tj_onnx_node_t* n) {
  if (im->scope_depth == 0) im->unrolled_nodes = 0;
  const Onnx__GraphProto* body;
  TJ_RETURN_IF_ERROR(graph_attr(im, n, "body", &body));
  if (n->num_inputs < 2)
    return tj_onnx_node_error(
        im, n, TJ_STATUS_INVALID_ARGUMENT,
        "%d inputs; it takes M, cond and the loop-carried values",
        (int)n->num_inputs);
  int32_t carried_n = n->num_inputs - 2;
  if (carried_n > MAX_VALUES || body->n_output > MAX_VALUES + 1)
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "more than %d loop-carried or scanned values",
                              MAX_VALUES);
  if (body->n_input != (size_t)carried_n + 2 ||
      body->n_output < (size_t)carried_n + 1)
    return tj_onnx_node_error(
        im, n, TJ_STATUS_INVALID_ARGUMENT,
        "the body has %zu inputs and %zu outputs for %d loop-carried values "
        "(it takes the iteration number, the condition and them; it gives "
        "the condition, them and the scan outputs)",
        body->n_input, body->n_output, (int)carried_n);
  int32_t scan_n = (int32_t)body->n_output - 1 - carried_n;
  if (n->proto->n_output > (size_t)(carried_n + scan_n))
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "%zu outputs for %d loop-carried and %d scan "
                              "outputs",
                              n->proto->n_output, (int)carried_n, (int)scan_n);
  tj_onnx_val_t* m = n->inputs[0];
  tj_onnx_val_t* cond_in = n->inputs[1];
  if (!m && !cond_in)
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "neither a trip count nor a condition: an "
                              "infinite loop");
  int64_t trips = INT64_MAX;
  if (m && (!m->data || m->symbolic)) {
    bool taken;
    TJ_RETURN_IF_ERROR(loop_running_sum(im, n, body, &taken));
    if (taken) return NULL;
  }
  if (m) {
    if (!m->data || m->symbolic)
      return tj_onnx_node_error(
          im, n, TJ_STATUS_UNSUPPORTED,
          "input 0 (trip count M, \"%s\") must be a constant: the IR has no "
          "run-time loops, so the body is unrolled M times (a dynamic trip "
          "count is taken only by a body that is a running sum, prev + d, "
          "scanned: ONNX's expanded Range)",
          n->proto->input[0]);
    if (numel(m) != 1 || (m->dtype != TJ_DTYPE_I64 && m->dtype != TJ_DTYPE_I32))
      return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                "the trip count must be one int64");
    trips = m->dtype == TJ_DTYPE_I64 ? *(const int64_t*)m->data
                                     : *(const int32_t*)m->data;
  }
  bool go = true;
  if (cond_in) {
    if (!cond_in->data || numel(cond_in) != 1)
      return tj_onnx_node_error(
          im, n, TJ_STATUS_UNSUPPORTED,
          "input 1 (cond, \"%s\") must be a constant: the IR has no run-time "
          "loops, so a loop runs as many times as is known at import",
          n->proto->input[1]);
    go = known_truth(cond_in);
  }
  tj_onnx_val_t* ins =
      tj_arena_alloc(&im->arena, (2 * MAX_VALUES + 3) * sizeof *ins);
  if (!ins) return tj_status_oom();
  tj_onnx_val_t* outs = ins + MAX_VALUES + 2;
  for (int32_t i = 0; i < carried_n; ++i) {
    if (!n->inputs[2 + i])
      return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                                "loop-carried value %d is absent (optional "
                                "values are not supported)",
                                (int)i);
    ins[2 + i] = *n->inputs[2 + i];
  }
  scans_t scans = {NULL, 0, 0, scan_n};
  tj_status_t status = NULL;
  for (int64_t it = 0; !status && go && it < trips; ++it) {
    status = known_scalar(im, TJ_DTYPE_I64, it, &ins[0]);
    if (!status) status = known_scalar(im, TJ_DTYPE_BOOL, 1, &ins[1]);
    if (!status)
      status =
          import_body(im, n, body, "the body", it, ins, (size_t)carried_n + 2,
                      outs, (size_t)carried_n + 1 + (size_t)scan_n);
    if (status) break;
    // Without a cond input the body's condition is ignored (a for loop).
    if (cond_in) {
      if (!outs[0].data || numel(&outs[0]) != 1) {
        status = tj_onnx_node_error(
            im, n, TJ_STATUS_UNSUPPORTED,
            "the body's condition output (\"%s\") is computed at run time in "
            "iteration %lld; it must be a constant: the IR has no run-time "
            "loops",
            body->output[0]->name, (long long)it);
        break;
      }
      go = known_truth(&outs[0]);
    }
    for (int32_t i = 0; i < carried_n; ++i) ins[2 + i] = outs[1 + i];
    status = scans_append(im, &scans, &outs[1 + carried_n]);
  }
  for (int32_t i = 0; !status && i < carried_n; ++i)
    status = define_out(im, n, (size_t)i, &ins[2 + i]);
  if (!status && scans.count == 0 && scan_n > 0) {
    // Zero iterations: each scan output is empty, [0] + the shape one
    // iteration would give it, so the body is imported once for that
    // shape (its nodes stay unused in the graph).
    status = known_scalar(im, TJ_DTYPE_I64, 0, &ins[0]);
    if (!status) status = known_scalar(im, TJ_DTYPE_BOOL, 1, &ins[1]);
    if (!status)
      status = import_body(im, n, body, "the body (the shape of empty scans)",
                           -1, ins, (size_t)carried_n + 2, outs,
                           (size_t)carried_n + 1 + (size_t)scan_n);
    for (int32_t k = 0; !status && k < scan_n; ++k)
      status = define_empty(im, n, k, (size_t)(carried_n + k),
                            &outs[1 + carried_n + k]);
  }
  for (int32_t k = 0; !status && scans.count && k < scan_n; ++k)
    status = define_scan_out(im, n, &scans, k, (size_t)carried_n, 0, false);
  scans_free(im, &scans);
  return status;
}

//===--- Scan ---===//

// Scan's recurrence over |len| elements: |states| (|state_n|, updated in
// place) and scan inputs |xs| (|scan_in|) taken along |axes| in |dirs|;
// each iteration's scan outputs are appended to |scans|. |first| numbers
// the iterations in errors.
static tj_status_t run_scan(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                            const Onnx__GraphProto* body, int32_t state_n,
                            tj_onnx_val_t* states, int32_t scan_in,
                            tj_onnx_val_t* xs, const int32_t* axes,
                            const int64_t* dirs, int64_t len, int32_t scan_out,
                            scans_t* scans, int64_t first) {
  tj_onnx_val_t* ins = tj_arena_alloc(
      &im->arena,
      (size_t)(state_n + scan_in + state_n + scan_out) * sizeof *ins);
  if (!ins) return tj_status_oom();
  tj_onnx_val_t* outs = ins + state_n + scan_in;
  memcpy(ins, states, (size_t)state_n * sizeof *ins);
  tj_status_t status = NULL;
  for (int64_t t = 0; !status && t < len; ++t) {
    for (int32_t j = 0; !status && j < scan_in; ++j) {
      int64_t at = dirs[j] ? len - 1 - t : t;
      status = take(im, n, &xs[j], axes[j], at, &ins[state_n + j]);
    }
    if (!status)
      status = import_body(im, n, body, "the body", first + t, ins,
                           (size_t)(state_n + scan_in), outs,
                           (size_t)(state_n + scan_out));
    if (status) break;
    memcpy(ins, outs, (size_t)state_n * sizeof *ins);
    status = scans_append(im, scans, &outs[state_n]);
  }
  memcpy(states, ins, (size_t)state_n * sizeof *ins);
  return status;
}

// A static dim |d| of input |i| named in an error when it is symbolic.
static tj_status_t static_dim(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                              int32_t i, int32_t axis, const char* what) {
  if (n->inputs[i]->dims[axis] >= 0) return NULL;
  return tj_onnx_node_error(
      im, n, TJ_STATUS_UNSUPPORTED,
      "input %d (\"%s\"): the %s (axis %d) is a symbolic dim; it must be "
      "static: the IR has no run-time loops, so the body is unrolled once "
      "per element",
      (int)i, n->proto->input[i], what, (int)axis);
}

// Opset 8's Scan: a batch axis 0 on every state and scan input (the
// sequence is axis 1), an optional sequence_lens first, one direction
// per scan input, outputs stacked on axis 1. Unrolled per batch element
// and per step.
static tj_status_t convert_scan8(tj_onnx_importer_t* im, tj_onnx_node_t* n,
                                 const Onnx__GraphProto* body,
                                 int32_t scan_in) {
  int32_t state_n = n->num_inputs - 1 - scan_in;
  if (state_n < 0)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "%d inputs for sequence_lens and %d scan inputs",
                              (int)n->num_inputs, (int)scan_in);
  if (body->n_input != (size_t)(state_n + scan_in) ||
      body->n_output < (size_t)state_n)
    return tj_onnx_node_error(
        im, n, TJ_STATUS_INVALID_ARGUMENT,
        "the body has %zu inputs and %zu outputs for %d states and %d scan "
        "inputs",
        body->n_input, body->n_output, (int)state_n, (int)scan_in);
  int32_t scan_out = (int32_t)body->n_output - state_n;
  if (n->proto->n_output > (size_t)(state_n + scan_out))
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "%zu outputs for %d states and %d scan outputs",
                              n->proto->n_output, (int)state_n, (int)scan_out);
  int64_t dirs[MAX_VALUES] = {0};
  int32_t count;
  TJ_RETURN_IF_ERROR(ints_attr(im, n, "directions", dirs, &count, scan_in));
  if (count && count != scan_in)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "attribute directions has %d entries for %d "
                              "scan inputs",
                              (int)count, (int)scan_in);
  for (int32_t j = 0; j < scan_in; ++j) {
    if (dirs[j] != 0 && dirs[j] != 1)
      return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                "directions[%d] is %lld (0 forward, 1 reverse)",
                                (int)j, (long long)dirs[j]);
  }
  // Every state and scan input: batch first, static and equal; the scan
  // inputs' sequence (axis 1) static and equal.
  int64_t batch = -1, len = -1;
  for (int32_t i = 1; i < n->num_inputs; ++i) {
    tj_onnx_val_t* x = n->inputs[i];
    bool scanned = i > state_n;
    if (!x || x->rank < (scanned ? 2 : 1))
      return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                "input %d must be present, with a batch axis%s",
                                (int)i, scanned ? " and a sequence axis" : "");
    TJ_RETURN_IF_ERROR(static_dim(im, n, i, 0, "batch"));
    if (scanned) TJ_RETURN_IF_ERROR(static_dim(im, n, i, 1, "sequence length"));
    if ((batch >= 0 && x->dims[0] != batch) ||
        (scanned && len >= 0 && x->dims[1] != len))
      return tj_onnx_node_error(
          im, n, TJ_STATUS_INVALID_ARGUMENT,
          "input %d is %lld x %lld; the batch and sequence length of the "
          "others are %lld and %lld",
          (int)i, (long long)x->dims[0], (long long)(scanned ? x->dims[1] : 0),
          (long long)batch, (long long)len);
    batch = x->dims[0];
    if (scanned) len = x->dims[1];
  }
  tj_onnx_val_t* lens = n->inputs[0];
  if (lens) {
    bool full = lens->data && !lens->symbolic && lens->rank == 1 &&
                lens->dims[0] == batch &&
                (lens->dtype == TJ_DTYPE_I32 || lens->dtype == TJ_DTYPE_I64);
    for (int64_t b = 0; full && b < batch; ++b) {
      int64_t l = lens->dtype == TJ_DTYPE_I32 ? ((const int32_t*)lens->data)[b]
                                              : ((const int64_t*)lens->data)[b];
      full = l == len;
    }
    if (!full)
      return tj_onnx_node_error(
          im, n, TJ_STATUS_UNSUPPORTED,
          "input 0 (sequence_lens, \"%s\") must be a constant equal to the "
          "sequence length %lld for every batch element (shorter sequences "
          "are not supported)",
          n->proto->input[0], (long long)len);
  }
  if (batch > TJ_ONNX_UNROLL_LIMIT || len > TJ_ONNX_UNROLL_LIMIT ||
      batch * (len > 0 ? len : 1) > TJ_ONNX_UNROLL_LIMIT)
    return tj_onnx_node_error(
        im, n, TJ_STATUS_UNSUPPORTED,
        "unrolling the body over a batch of %lld and %lld steps is above the "
        "limit of %d body copies (TJ_ONNX_UNROLL_LIMIT)",
        (long long)batch, (long long)len, TJ_ONNX_UNROLL_LIMIT);
  // Per batch element: its states, its scan inputs, then the final states
  // and stacked scan outputs of each element, stacked over the batch.
  size_t per = (size_t)(state_n + scan_in);
  size_t kept = (size_t)batch * (size_t)(state_n + scan_out);
  tj_onnx_val_t* vals =
      tj_arena_alloc(&im->arena, (per + kept + 1) * sizeof *vals);
  if (!vals) return tj_status_oom();
  tj_onnx_val_t* finals = vals + per;  // [state_n + scan_out][batch]
  int32_t axes[MAX_VALUES] = {0};
  scans_t scans = {NULL, 0, 0, scan_out};
  tj_status_t status = NULL;
  for (int64_t b = 0; !status && b < batch; ++b) {
    for (int32_t i = 0; !status && i < (int32_t)per; ++i)
      status = take(im, n, n->inputs[1 + i], 0, b, &vals[i]);
    scans.count = 0;
    if (!status)
      status = run_scan(im, n, body, state_n, vals, scan_in, vals + state_n,
                        axes, dirs, len, scan_out, &scans, b * len);
    for (int32_t i = 0; !status && i < state_n; ++i)
      finals[(size_t)i * (size_t)batch + (size_t)b] = vals[i];
    for (int32_t k = 0; !status && k < scan_out; ++k) {
      if (len == 0) {
        status = tj_onnx_node_error(
            im, n, TJ_STATUS_UNSUPPORTED,
            "zero iterations: scan output %d would be empty of a shape no "
            "iteration gave",
            (int)k);
        break;
      }
      tj_onnx_val_t* parts =
          tj_arena_alloc(&im->arena, (size_t)len * sizeof *parts);
      if (!parts) {
        status = tj_status_oom();
        break;
      }
      for (int64_t t = 0; t < len; ++t) parts[t] = scans.vals[t * scan_out + k];
      status =
          stack(im, n, "the body", k, parts, len, 0, false,
                &finals[(size_t)(state_n + k) * (size_t)batch + (size_t)b]);
    }
  }
  scans_free(im, &scans);
  for (int32_t k = 0; !status && k < state_n + scan_out; ++k) {
    size_t o = (size_t)k;
    if (o >= n->proto->n_output || !n->proto->output[o][0]) continue;
    if (batch == 0) {
      status =
          tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED, "a batch of zero");
      break;
    }
    tj_onnx_val_t val;
    status = stack(im, n, "the batch", k, &finals[o * (size_t)batch], batch, 0,
                   false, &val);
    if (!status) status = define_out(im, n, o, &val);
  }
  return status;
}

tj_status_t tj_onnx_convert_scan(tj_onnx_importer_t* im, tj_onnx_node_t* n) {
  if (im->scope_depth == 0) im->unrolled_nodes = 0;
  const Onnx__GraphProto* body;
  TJ_RETURN_IF_ERROR(graph_attr(im, n, "body", &body));
  const Onnx__AttributeProto* nsi = find_attr(n, "num_scan_inputs");
  if (!nsi || !nsi->has_i || nsi->i < 1 || nsi->i > n->num_inputs)
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "num_scan_inputs must be 1 to the %d inputs",
                              (int)n->num_inputs);
  int32_t scan_in = (int32_t)nsi->i;
  if (n->num_inputs > MAX_VALUES || body->n_output > MAX_VALUES)
    return tj_onnx_node_error(im, n, TJ_STATUS_UNSUPPORTED,
                              "more than %d states or scanned values",
                              MAX_VALUES);
  bool opset8 = im->opset < 9;
  static const char* const kOpset9[] = {
      "scan_input_axes", "scan_input_directions", "scan_output_axes",
      "scan_output_directions"};
  for (size_t a = 0; opset8 && a < 4; ++a) {
    if (find_attr(n, kOpset9[a]))
      return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                "attribute %s is Scan 9's; opset %lld's Scan "
                                "takes directions",
                                kOpset9[a], (long long)im->opset);
  }
  if (!opset8 && find_attr(n, "directions"))
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "attribute directions is Scan 8's; opset %lld's "
                              "Scan takes scan_input_directions",
                              (long long)im->opset);
  if (opset8) return convert_scan8(im, n, body, scan_in);
  int32_t state_n = n->num_inputs - scan_in;
  if (body->n_input != (size_t)n->num_inputs ||
      body->n_output < (size_t)state_n)
    return tj_onnx_node_error(
        im, n, TJ_STATUS_INVALID_ARGUMENT,
        "the body has %zu inputs and %zu outputs for %d states and %d scan "
        "inputs",
        body->n_input, body->n_output, (int)state_n, (int)scan_in);
  int32_t scan_out = (int32_t)body->n_output - state_n;
  if (n->proto->n_output > (size_t)(state_n + scan_out))
    return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                              "%zu outputs for %d states and %d scan outputs",
                              n->proto->n_output, (int)state_n, (int)scan_out);
  int64_t in_axes[MAX_VALUES] = {0}, in_dirs[MAX_VALUES] = {0};
  int64_t out_axes[MAX_VALUES] = {0}, out_dirs[MAX_VALUES] = {0};
  int32_t count;
  int64_t* lists[4] = {in_axes, in_dirs, out_axes, out_dirs};
  for (int a = 0; a < 4; ++a) {
    int32_t want = a < 2 ? scan_in : scan_out;
    TJ_RETURN_IF_ERROR(ints_attr(im, n, kOpset9[a], lists[a], &count, want));
    if (count && count != want)
      return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                "attribute %s has %d entries for %d values",
                                kOpset9[a], (int)count, (int)want);
    for (int32_t i = 0; (a & 1) && i < want; ++i) {
      if (lists[a][i] != 0 && lists[a][i] != 1)
        return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                  "%s[%d] is %lld (0 forward, 1 reverse)",
                                  kOpset9[a], (int)i, (long long)lists[a][i]);
    }
  }
  // The sequence length: every scan input's length along its axis, static.
  int64_t len = -1;
  int32_t axes[MAX_VALUES];
  tj_onnx_val_t* vals =
      tj_arena_alloc(&im->arena, (size_t)(n->num_inputs + 1) * sizeof *vals);
  if (!vals) return tj_status_oom();
  for (int32_t i = 0; i < n->num_inputs; ++i) {
    if (!n->inputs[i])
      return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                "input %d is absent", (int)i);
    vals[i] = *n->inputs[i];
  }
  for (int32_t j = 0; j < scan_in; ++j) {
    tj_onnx_val_t* x = n->inputs[state_n + j];
    int64_t axis = in_axes[j];
    if (axis < -x->rank || axis >= x->rank)
      return tj_onnx_node_error(im, n, TJ_STATUS_INVALID_ARGUMENT,
                                "scan input %d: axis %lld is outside rank %d",
                                (int)j, (long long)axis, (int)x->rank);
    axes[j] = (int32_t)(axis < 0 ? axis + x->rank : axis);
    TJ_RETURN_IF_ERROR(
        static_dim(im, n, state_n + j, axes[j], "sequence length"));
    int64_t d = x->dims[axes[j]];
    if (len >= 0 && d != len)
      return tj_onnx_node_error(
          im, n, TJ_STATUS_INVALID_ARGUMENT,
          "scan input %d has sequence length %lld; scan input 0 has %lld",
          (int)j, (long long)d, (long long)len);
    len = d;
  }
  scans_t scans = {NULL, 0, 0, scan_out};
  tj_status_t status =
      run_scan(im, n, body, state_n, vals, scan_in, vals + state_n, axes,
               in_dirs, len, scan_out, &scans, 0);
  for (int32_t i = 0; !status && i < state_n; ++i)
    status = define_out(im, n, (size_t)i, &vals[i]);
  for (int32_t k = 0; !status && k < scan_out; ++k)
    status = define_scan_out(im, n, &scans, k, (size_t)state_n, out_axes[k],
                             out_dirs[k] != 0);
  scans_free(im, &scans);
  return status;
}
