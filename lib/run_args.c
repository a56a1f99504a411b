// The memory of the tensors a caller hands to a run, checked once for every
// target (x86, the reference interpreter, CUDA): where each tensor's bytes
// lie, that its pointer arithmetic does not wrap, that no output's elements
// share memory, and that no output overlaps an input or another output.
//
// Each tensor is reduced to a byte interval [lo, hi): the lowest and one
// past the highest byte any of its elements can touch. Two tensors overlap
// when their intervals intersect. This is conservative for layouts that
// interleave (a tensor of the even columns and one of the odd columns of the
// same buffer overlap by this rule); the headers say "must not overlap", and
// a run must not depend on which element of an interleaving is written first.

#include <stdio.h>
#include <string.h>

#include "lib/ir.h"

// One tensor's bytes: [lo, hi), empty when lo == hi (no element).
typedef struct extent_t {
  uintptr_t lo, hi;
} extent_t;

// Tensors whose extents are kept between the pairwise checks; beyond this
// many an extent is recomputed each time it is needed.
#define KEPT_EXTENTS 32

typedef struct args_t {
  const tj_graph_t* graph;
  const tj_tensor_t* inputs;
  const tj_tensor_t* outputs;
  extent_t kept[KEPT_EXTENTS];
} args_t;

// Tensor |k| of the run: the inputs, then the outputs.
static const tj_tensor_t* arg_tensor(const args_t* a, uint32_t k) {
  uint32_t ni = a->graph->num_inputs;
  return k < ni ? &a->inputs[k] : &a->outputs[k - ni];
}

static void arg_name(const args_t* a, uint32_t k, char* buf, size_t size) {
  const tj_graph_t* g = a->graph;
  uint32_t ni = g->num_inputs;
  const char* name =
      k < ni ? g->nodes[g->inputs[k]].attrs.name : g->outputs[k - ni].name;
  snprintf(buf, size, "%s \"%s\"", k < ni ? "input" : "output",
           name ? name : "?");
}

static int64_t abs_i64(int64_t v) { return v < 0 ? -v : v; }

// The extent of tensor |k| (shape already checked: every dim >= 0 and the
// element count fits in int64). INVALID_ARGUMENT when its data pointer is
// NULL with elements to hold, when its strides reach further than int64
// bytes, or when data + byte_offset + an element's offset leaves the
// address space.
static tj_status_t compute_extent(const args_t* a, uint32_t k, extent_t* out) {
  const tj_tensor_t* t = arg_tensor(a, k);
  out->lo = out->hi = 0;
  char name[160];
  // Every target forms data + byte_offset, elements or not: it must not
  // wrap (found by tests/fuzz/fuzz_run_args on a zero-element tensor).
  if (t->data && (uint64_t)t->byte_offset > UINTPTR_MAX - (uintptr_t)t->data) {
    arg_name(a, k, name, sizeof(name));
    return tj_invalid("%s: data %p + byte_offset %llu leaves the address space",
                      name, t->data, (unsigned long long)t->byte_offset);
  }
  for (int32_t d = 0; d < t->rank; ++d) {
    if (t->shape[d] == 0) return NULL;  // no element: no memory touched
  }
  if (!t->data) {
    arg_name(a, k, name, sizeof(name));
    return tj_invalid("%s: data is NULL", name);
  }
  // Offsets of the first and last element reached, in elements.
  int64_t min_off = 0, max_off = 0, dense = 1;
  bool overflow = false;
  for (int32_t d = t->rank; d-- > 0;) {
    int64_t stride = t->strides ? t->strides[d] : dense, span = 0;
    if (!t->strides)
      overflow |= tj_mul_overflow_i64(dense, t->shape[d], &dense);
    overflow |= tj_mul_overflow_i64(t->shape[d] - 1, stride, &span);
    if (span < 0) {
      overflow |= tj_add_overflow_i64(min_off, span, &min_off);
    } else {
      overflow |= tj_add_overflow_i64(max_off, span, &max_off);
    }
  }
  const int64_t es = (int64_t)tj_dtype_size(t->dtype);
  int64_t lo_bytes = 0, hi_bytes = 0, span_bytes = 0;
  overflow |= tj_mul_overflow_i64(min_off, es, &lo_bytes);
  overflow |= tj_add_overflow_i64(max_off, 1, &hi_bytes) ||
              tj_mul_overflow_i64(hi_bytes, es, &hi_bytes);
  overflow |= __builtin_sub_overflow(hi_bytes, lo_bytes, &span_bytes);
  if (overflow) {
    arg_name(a, k, name, sizeof(name));
    return tj_invalid("%s: its strides reach more than 2^63 bytes", name);
  }
  // Address arithmetic in uintptr_t, where wrapping is defined and checked.
  uintptr_t base = (uintptr_t)t->data;
  uintptr_t lo_neg = (uintptr_t) - (uint64_t)lo_bytes;  // lo_bytes <= 0
  if ((uint64_t)t->byte_offset > UINTPTR_MAX - base ||
      base + (uintptr_t)t->byte_offset < lo_neg ||
      (uint64_t)hi_bytes > UINTPTR_MAX - (base + (uintptr_t)t->byte_offset)) {
    arg_name(a, k, name, sizeof(name));
    return tj_invalid(
        "%s: data %p + byte_offset %llu and its strides leave the address "
        "space",
        name, t->data, (unsigned long long)t->byte_offset);
  }
  uintptr_t p = base + (uintptr_t)t->byte_offset;
  out->lo = p - lo_neg;
  out->hi = p + (uintptr_t)hi_bytes;
  return NULL;
}

static tj_status_t extent_of(args_t* a, uint32_t k, extent_t* out) {
  if (k < KEPT_EXTENTS) {
    *out = a->kept[k];
    return NULL;
  }
  return compute_extent(a, k, out);
}

// Whether no two elements of |t| (elements exist, extent computed, so every
// span below fits in int64) share memory. With the dims of size > 1 ordered
// by |stride|, each stride must clear the span of the dims before it: dense,
// transposed, padded and reversed layouts pass; a zero stride or dims that
// interleave fail. Insertion sort: rank is at most TJ_MAX_RANK.
static bool elements_disjoint(const tj_tensor_t* t) {
  if (!t->strides) return true;
  int64_t s[TJ_MAX_RANK], n[TJ_MAX_RANK];
  int32_t m = 0;
  for (int32_t d = 0; d < t->rank; ++d) {
    if (t->shape[d] == 1) continue;
    int64_t stride = abs_i64(t->strides[d]);
    int32_t j = m++;
    for (; j > 0 && s[j - 1] > stride; --j) {
      s[j] = s[j - 1];
      n[j] = n[j - 1];
    }
    s[j] = stride;
    n[j] = t->shape[d];
  }
  int64_t reach = 1;  // elements spanned by the dims so far
  for (int32_t j = 0; j < m; ++j) {
    if (s[j] < reach) return false;
    reach += s[j] * (n[j] - 1);
  }
  return true;
}

tj_status_t tj_ir_check_device(const tj_tensor_t* t, const char* role,
                               const char* name, bool allow_cuda) {
  if (!name) name = "?";
  if (t->device_type != TJ_DEVICE_CPU && t->device_type != TJ_DEVICE_CUDA) {
    return tj_invalid("%s \"%s\": device type %d is neither CPU nor CUDA", role,
                      name, (int)t->device_type);
  }
  if (t->device_type == TJ_DEVICE_CUDA && !allow_cuda) {
    return tj_invalid(
        "%s \"%s\" is not a CPU tensor (this target runs on "
        "the CPU)",
        role, name);
  }
  if (t->device_type == TJ_DEVICE_CPU && t->device_id != 0) {
    return tj_invalid(
        "%s \"%s\": a CPU tensor's device_id must be 0 (as "
        "in DLPack), got %d",
        role, name, (int)t->device_id);
  }
  if (t->device_id < 0) {
    return tj_invalid("%s \"%s\": device_id %d is negative", role, name,
                      (int)t->device_id);
  }
  return NULL;
}

static bool same_device(const tj_tensor_t* x, const tj_tensor_t* y) {
  return x->device_type == y->device_type &&
         (x->device_type == TJ_DEVICE_CPU || x->device_id == y->device_id);
}

tj_status_t tj_ir_check_run_memory(const tj_graph_t* graph,
                                   const tj_tensor_t* inputs,
                                   const tj_tensor_t* outputs) {
  args_t a;
  a.graph = graph;
  a.inputs = inputs;
  a.outputs = outputs;
  const uint32_t ni = graph->num_inputs, total = ni + graph->num_outputs;
  char name[160], other[160];
  for (uint32_t k = 0; k < total; ++k) {
    extent_t e;
    TJ_RETURN_IF_ERROR(compute_extent(&a, k, &e));
    if (k < KEPT_EXTENTS) a.kept[k] = e;
    if (k >= ni && e.lo < e.hi && !elements_disjoint(arg_tensor(&a, k))) {
      arg_name(&a, k, name, sizeof(name));
      return tj_invalid(
          "%s: its strides make elements share memory; an output must not "
          "overlap itself",
          name);
    }
  }
  // Every output against every input and every other output.
  for (uint32_t o = ni; o < total; ++o) {
    extent_t eo;
    TJ_RETURN_IF_ERROR(extent_of(&a, o, &eo));
    if (eo.lo == eo.hi) continue;
    for (uint32_t k = 0; k < total; ++k) {
      if (k == o || (k > o && k >= ni) ||
          !same_device(arg_tensor(&a, o), arg_tensor(&a, k))) {
        continue;  // output pairs are checked once, from the later one
      }
      extent_t ek;
      TJ_RETURN_IF_ERROR(extent_of(&a, k, &ek));
      if (ek.lo < ek.hi && eo.lo < ek.hi && ek.lo < eo.hi) {
        arg_name(&a, o, name, sizeof(name));
        arg_name(&a, k, other, sizeof(other));
        return tj_invalid(
            "%s overlaps %s: an output must not share memory "
            "with an input or another output",
            name, other);
      }
    }
  }
  return NULL;
}
