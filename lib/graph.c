// The public graph builder (include/tensorjit/tj_graph.h).
//
// Every builder call packs its arguments into a tj_node_desc_t and hands it
// to tj_graph_append (lib/infer.c), which owns all checking and inference;
// this file only adds the sticky-error discipline of the public API: the
// first failure is recorded on the graph, and every later call (after an
// error or after finalize) does nothing and returns the none value.
//
// A none operand where an operand is required is recorded as an error when
// the graph has none yet: such a value can only come from a failure on
// another graph or from the caller, and ignoring it silently would let a
// partial graph finalize.

#include <stdio.h>
#include <string.h>

#include "lib/custom_op.h"
#include "lib/dtype.h"
#include "lib/infer.h"
#include "lib/quant.h"
#include "lib/window.h"

//===--- lifecycle ---===//

tj_status_t tj_graph_create(tj_context_t* context, const char* name,
                            tj_graph_t** out_graph) {
  if (!out_graph) return tj_invalid("tj_graph_create: out_graph is NULL");
  *out_graph = NULL;
  if (!context) return tj_invalid("tj_graph_create: context is NULL");
  if (!name) name = "main";
  if (!tj_is_c_identifier(name))
    return tj_invalid(
        "tj_graph_create: graph name \"%s\" is not a C identifier", name);
  tj_allocator_t allocator = tj_context_allocator(context);
  tj_graph_t* graph = tj_calloc(allocator, 1, sizeof(*graph));
  if (!graph) return tj_status_oom();
  graph->context = context;
  graph->allocator = allocator;
  tj_arena_initialize(&graph->arena, allocator);
  tj_dimtab_initialize(&graph->dims, allocator);
  graph->name = tj_arena_strdup(&graph->arena, name);
  if (!graph->name) {
    tj_graph_destroy(graph);
    return tj_status_oom();
  }
  *out_graph = graph;
  return NULL;
}

void tj_graph_destroy(tj_graph_t* graph) {
  if (!graph) return;
  tj_allocator_t a = graph->allocator;
  tj_free(a, graph->nodes, (size_t)graph->node_capacity * sizeof(tj_node_t));
  tj_free(a, graph->inputs, (size_t)graph->input_capacity * sizeof(uint32_t));
  tj_free(a, graph->outputs,
          (size_t)graph->output_capacity * sizeof(tj_output_t));
  tj_free(a, graph->guards, (size_t)graph->guard_capacity * sizeof(tj_guard_t));
  tj_dimtab_deinitialize(&graph->dims);
  tj_arena_deinitialize(&graph->arena);
  tj_status_free(graph->error);
  tj_free(a, graph, sizeof(*graph));
}

tj_context_t* tj_graph_context(const tj_graph_t* graph) {
  return graph ? graph->context : NULL;
}

tj_status_t tj_graph_finalize(tj_graph_t* graph) {
  if (!graph) return tj_invalid("tj_graph_finalize: graph is NULL");
  // A copy: the original stays recorded, so the error remains sticky (also
  // one recorded by a builder call after an earlier finalize).
  if (graph->error) return tj_status_clone(graph->error);
  if (graph->finalized) return NULL;
  if (graph->num_outputs == 0)
    return tj_invalid("graph @%s has no outputs: mark one with tj_graph_output",
                      graph->name);
  TJ_RETURN_IF_ERROR(tj_ir_verify(graph));
  graph->finalized = true;
  return NULL;
}

tj_status_t tj_graph_status(const tj_graph_t* graph) {
  if (!graph) return tj_invalid("tj_graph_status: graph is NULL");
  return tj_status_clone(graph->error);
}

//===--- internal builder entry points ---===//

void tj_graph_record_error(tj_graph_t* graph, tj_status_t status) {
  if (!status) return;
  if (graph->error) {
    tj_status_free(status);
  } else {
    graph->error = status;
  }
}

tj_status_t tj_graph_append_output(tj_graph_t* graph, uint32_t node,
                                   const char* name) {
  const char* shown = name ? name : "(null)";
  if (graph->finalized)
    return tj_invalid("output \"%s\": the graph is finalized", shown);
  if (node >= graph->num_nodes)
    return tj_invalid("output \"%s\": node %%%u is not in this graph", shown,
                      node);
  if (!tj_is_c_identifier(name))
    return tj_invalid("output \"%s\": name is not a C identifier", shown);
  for (uint32_t i = 0; i < graph->num_outputs; ++i) {
    if (strcmp(graph->outputs[i].name, name) == 0)
      return tj_invalid("output \"%s\": name is already used by output %u",
                        name, i);
  }
  TJ_RETURN_IF_ERROR(tj_array_reserve(
      graph->allocator, (void**)&graph->outputs, &graph->output_capacity,
      graph->num_outputs + 1, sizeof(tj_output_t)));
  const char* copy = tj_arena_strdup(&graph->arena, name);
  if (!copy) return tj_status_oom();
  tj_output_t* out = &graph->outputs[graph->num_outputs++];
  out->node = node;
  out->name = copy;
  return NULL;
}

tj_status_t tj_graph_add_guard(tj_graph_t* graph, int64_t a, int64_t b,
                               uint32_t node) {
  if (a == b) return NULL;
  // One guard per pair: broadcasting the same symbols again adds nothing.
  for (uint32_t i = 0; i < graph->num_guards; ++i) {
    const tj_guard_t* g = &graph->guards[i];
    if ((g->a == a && g->b == b) || (g->a == b && g->b == a)) return NULL;
  }
  TJ_RETURN_IF_ERROR(tj_array_reserve(
      graph->allocator, (void**)&graph->guards, &graph->guard_capacity,
      graph->num_guards + 1, sizeof(tj_guard_t)));
  tj_guard_t* g = &graph->guards[graph->num_guards++];
  g->a = a;
  g->b = b;
  g->node = node;
  return NULL;
}

//===--- builder plumbing ---===//

// False once the graph can take no more nodes (error recorded or final).
// A call after tj_graph_finalize is the caller's mistake, not a silent
// no-op: it records a sticky error naming |call|, so that a wrapper that
// sees the none value finds the reason in tj_graph_status.
static bool building(tj_graph_t* graph, const char* call) {
  if (!graph || graph->error) return false;
  if (graph->finalized) {
    tj_graph_record_error(
        graph, tj_invalid("%s: graph @%s is finalized: build every node "
                          "before tj_graph_finalize",
                          call, graph->name));
    return false;
  }
  return true;
}

// building() for the calls that take their op as an argument.
static bool building_op(tj_graph_t* graph, tj_op_t op) {
  char call[64];
  snprintf(call, sizeof(call), "tj_graph_%s", tj_op_infos[op].name);
  return building(graph, call);
}

static uint32_t operand(tj_value_t value) {
  return value.id == 0 ? TJ_NODE_NONE : value.id - 1;
}

static tj_node_desc_t make_desc(tj_op_t op, uint32_t num_operands,
                                const uint32_t* operands) {
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = op;
  desc.num_operands = num_operands;
  desc.operands = operands;
  return desc;
}

static tj_value_t append(tj_graph_t* graph, const tj_node_desc_t* desc) {
  uint32_t node = 0;
  tj_status_t status = tj_graph_append(graph, desc, &node);
  if (status) {
    tj_graph_record_error(graph, status);
    return tj_value_none();
  }
  tj_value_t value = {node + 1};
  return value;
}

// Records an error worded like an inference error for |desc|.
static tj_value_t reject(tj_graph_t* graph, const tj_node_desc_t* desc,
                         const char* problem) {
  tj_graph_record_error(
      graph,
      tj_ir_node_error(graph, desc, TJ_STATUS_INVALID_ARGUMENT, "%s", problem));
  return tj_value_none();
}

// The node behind |value|, or NULL when it is none or foreign.
static const tj_node_t* node_of(const tj_graph_t* graph, tj_value_t value) {
  if (!graph || value.id == 0 || value.id > graph->num_nodes) return NULL;
  return &graph->nodes[value.id - 1];
}

static tj_value_t unary(tj_graph_t* graph, tj_op_t op, tj_value_t a) {
  if (!building_op(graph, op)) return tj_value_none();
  uint32_t ops[1] = {operand(a)};
  tj_node_desc_t desc = make_desc(op, 1, ops);
  return append(graph, &desc);
}

static tj_value_t binary(tj_graph_t* graph, tj_op_t op, tj_value_t a,
                         tj_value_t b) {
  if (!building_op(graph, op)) return tj_value_none();
  uint32_t ops[2] = {operand(a), operand(b)};
  tj_node_desc_t desc = make_desc(op, 2, ops);
  return append(graph, &desc);
}

//===--- symbolic dims ---===//

int64_t tj_graph_symbol(tj_graph_t* graph, const char* name) {
  if (!graph) return TJ_DIM_INVALID;
  int64_t dim = TJ_DIM_INVALID;
  if (!graph->error && graph->finalized) {
    // Looking up an existing symbol changes nothing, so it stays allowed
    // on a finalized graph; a new one is refused.
    uint32_t id;
    if (name && tj_dim_find_symbol(&graph->dims, name, &id) &&
        tj_dim_symbol(&graph->dims, name, &dim) == NULL)
      return dim;
  }
  if (!building(graph, "tj_graph_symbol")) return TJ_DIM_INVALID;
  tj_status_t status = tj_dim_symbol(&graph->dims, name, &dim);
  if (status) {
    tj_graph_record_error(graph, status);
    return TJ_DIM_INVALID;
  }
  return dim;
}

typedef enum dim_op_e { DIM_ADD, DIM_SUB, DIM_MUL, DIM_DIV } dim_op_t;

static int64_t dim_op(tj_graph_t* graph, dim_op_t op, int64_t a, int64_t b) {
  static const char* const kNames[] = {"tj_graph_dim_add", "tj_graph_dim_sub",
                                       "tj_graph_dim_mul", "tj_graph_dim_div"};
  if (!building(graph, kNames[op])) return TJ_DIM_INVALID;
  int64_t dim = TJ_DIM_INVALID;
  tj_status_t status = NULL;
  switch (op) {
    case DIM_ADD:
      status = tj_dim_add(&graph->dims, a, b, &dim);
      break;
    case DIM_SUB:
      status = tj_dim_sub(&graph->dims, a, b, &dim);
      break;
    case DIM_MUL:
      status = tj_dim_mul(&graph->dims, a, b, &dim);
      break;
    case DIM_DIV: {
      bool exact = false;
      status = tj_dim_div_exact(&graph->dims, a, b, &dim, &exact);
      if (!status && !exact) {
        char sa[128], sb[128];
        tj_dim_format(&graph->dims, a, sa, sizeof(sa));
        tj_dim_format(&graph->dims, b, sb, sizeof(sb));
        status = tj_invalid("%s does not divide %s exactly", sb, sa);
      }
      break;
    }
  }
  if (status) {
    tj_graph_record_error(graph, tj_status_annotate(status, "%s", kNames[op]));
    return TJ_DIM_INVALID;
  }
  return dim;
}

int64_t tj_graph_dim_add(tj_graph_t* graph, int64_t a, int64_t b) {
  return dim_op(graph, DIM_ADD, a, b);
}

int64_t tj_graph_dim_sub(tj_graph_t* graph, int64_t a, int64_t b) {
  return dim_op(graph, DIM_SUB, a, b);
}

int64_t tj_graph_dim_mul(tj_graph_t* graph, int64_t a, int64_t b) {
  return dim_op(graph, DIM_MUL, a, b);
}

int64_t tj_graph_dim_div(tj_graph_t* graph, int64_t a, int64_t b) {
  return dim_op(graph, DIM_DIV, a, b);
}

//===--- leaves ---===//

static tj_value_t leaf(tj_graph_t* graph, tj_op_t op, tj_dtype_t dtype,
                       int32_t rank, const int64_t* dims, tj_attrs_t attrs) {
  if (!building_op(graph, op)) return tj_value_none();
  tj_node_desc_t desc = make_desc(op, 0, NULL);
  desc.dtype = dtype;
  desc.rank = rank;
  desc.dims = dims;
  desc.attrs = attrs;
  return append(graph, &desc);
}

static tj_attrs_t no_attrs(void) {
  tj_attrs_t attrs;
  memset(&attrs, 0, sizeof(attrs));
  return attrs;
}

tj_value_t tj_graph_input(tj_graph_t* graph, tj_dtype_t dtype, int32_t rank,
                          const int64_t* dims, const char* name) {
  tj_attrs_t attrs = no_attrs();
  attrs.name = name;
  return leaf(graph, TJ_OP_INPUT, dtype, rank, dims, attrs);
}

static tj_value_t constant(tj_graph_t* graph, tj_dtype_t dtype, int32_t rank,
                           const int64_t* dims, const void* data,
                           size_t data_bytes, bool borrowed) {
  if (!building_op(graph, TJ_OP_CONSTANT)) return tj_value_none();
  tj_node_desc_t desc = make_desc(TJ_OP_CONSTANT, 0, NULL);
  desc.dtype = dtype;
  desc.rank = rank;
  desc.dims = dims;
  desc.attrs.data = data;
  desc.attrs.borrowed = borrowed;
  desc.has_data_bytes = true;
  desc.data_bytes = data_bytes;
  return append(graph, &desc);
}

tj_value_t tj_graph_constant(tj_graph_t* graph, tj_dtype_t dtype, int32_t rank,
                             const int64_t* dims, const void* data,
                             size_t data_bytes) {
  return constant(graph, dtype, rank, dims, data, data_bytes, false);
}

tj_value_t tj_graph_constant_borrowed(tj_graph_t* graph, tj_dtype_t dtype,
                                      int32_t rank, const int64_t* dims,
                                      const void* data, size_t data_bytes) {
  return constant(graph, dtype, rank, dims, data, data_bytes, true);
}

tj_value_t tj_graph_scalar(tj_graph_t* graph, tj_dtype_t dtype, double value) {
  // The element is converted here and copied into the arena by the append.
  uint64_t storage = 0;
  size_t bytes = 0;
  if (tj_dtype_is_valid(dtype)) {
    tj_store_f64(dtype, &storage, 0, value);
    bytes = tj_dtype_size(dtype);
  }
  return tj_graph_constant(graph, dtype, 0, NULL, &storage, bytes);
}

tj_value_t tj_graph_full(tj_graph_t* graph, tj_dtype_t dtype, int32_t rank,
                         const int64_t* dims, double value) {
  tj_attrs_t attrs = no_attrs();
  attrs.value = value;
  return leaf(graph, TJ_OP_FULL, dtype, rank, dims, attrs);
}

tj_value_t tj_graph_iota(tj_graph_t* graph, tj_dtype_t dtype, int32_t rank,
                         const int64_t* dims, int32_t axis) {
  tj_attrs_t attrs = no_attrs();
  attrs.axis = axis;
  return leaf(graph, TJ_OP_IOTA, dtype, rank, dims, attrs);
}

void tj_graph_output(tj_graph_t* graph, tj_value_t value, const char* name) {
  if (!building(graph, "tj_graph_output")) return;
  if (value.id == 0) {
    tj_graph_record_error(graph, tj_invalid("output \"%s\": the value is none",
                                            name ? name : "(null)"));
    return;
  }
  tj_graph_record_error(graph,
                        tj_graph_append_output(graph, value.id - 1, name));
}

//===--- elementwise ---===//

tj_value_t tj_graph_where(tj_graph_t* graph, tj_value_t cond, tj_value_t a,
                          tj_value_t b) {
  if (!building(graph, "tj_graph_where")) return tj_value_none();
  uint32_t ops[3] = {operand(cond), operand(a), operand(b)};
  tj_node_desc_t desc = make_desc(TJ_OP_WHERE, 3, ops);
  return append(graph, &desc);
}

tj_value_t tj_graph_cast(tj_graph_t* graph, tj_value_t a, tj_dtype_t dtype) {
  if (!building(graph, "tj_graph_cast")) return tj_value_none();
  uint32_t ops[1] = {operand(a)};
  tj_node_desc_t desc = make_desc(TJ_OP_CAST, 1, ops);
  desc.dtype = dtype;
  return append(graph, &desc);
}

tj_value_t tj_graph_bitcast(tj_graph_t* graph, tj_value_t a, tj_dtype_t dtype) {
  if (!building(graph, "tj_graph_bitcast")) return tj_value_none();
  uint32_t ops[1] = {operand(a)};
  tj_node_desc_t desc = make_desc(TJ_OP_BITCAST, 1, ops);
  desc.dtype = dtype;
  return append(graph, &desc);
}

//===--- reductions ---===//

static tj_value_t reduce(tj_graph_t* graph, tj_op_t op, tj_value_t a,
                         int32_t num_axes, const int32_t* axes, bool keepdims) {
  if (!building_op(graph, op)) return tj_value_none();
  uint32_t ops[1] = {operand(a)};
  tj_node_desc_t desc = make_desc(op, 1, ops);
  if (num_axes < 0 || num_axes > TJ_MAX_RANK)
    return reject(graph, &desc, "num_axes is out of range [0, 8]");
  if (num_axes > 0 && !axes) return reject(graph, &desc, "axes is NULL");
  int64_t ints[TJ_MAX_RANK];
  for (int32_t i = 0; i < num_axes; ++i) ints[i] = axes[i];
  desc.attrs.ints = ints;
  desc.attrs.num_ints = (uint32_t)num_axes;
  desc.attrs.keepdims = keepdims;
  return append(graph, &desc);
}

// The builders of a shared form (tj_op_form_t), one per lib/ops.def row
// whose FORM is not OWN.
#define TJ_FORM_OWN(fn, OP)
#define TJ_FORM_UNARY(fn, OP)                                 \
  tj_value_t tj_graph_##fn(tj_graph_t* graph, tj_value_t a) { \
    return unary(graph, TJ_OP_##OP, a);                       \
  }
#define TJ_FORM_BINARY(fn, OP)                                              \
  tj_value_t tj_graph_##fn(tj_graph_t* graph, tj_value_t a, tj_value_t b) { \
    return binary(graph, TJ_OP_##OP, a, b);                                 \
  }
#define TJ_FORM_REDUCE(fn, OP)                                                \
  tj_value_t tj_graph_##fn(tj_graph_t* graph, tj_value_t a, int32_t num_axes, \
                           const int32_t* axes, bool keepdims) {              \
    return reduce(graph, TJ_OP_##OP, a, num_axes, axes, keepdims);            \
  }
#define TJ_OP(name, text, arity, kind, attrs, dtypes, pattern, form, builder, \
              flags)                                                          \
  TJ_FORM_##form(builder, name)
#include "lib/ops.def"
#undef TJ_OP
#undef TJ_FORM_OWN
#undef TJ_FORM_UNARY
#undef TJ_FORM_BINARY
#undef TJ_FORM_REDUCE

tj_value_t tj_graph_argmax(tj_graph_t* graph, tj_value_t a, int32_t axis,
                           bool keepdims) {
  return reduce(graph, TJ_OP_ARGMAX, a, 1, &axis, keepdims);
}

tj_value_t tj_graph_argmin(tj_graph_t* graph, tj_value_t a, int32_t axis,
                           bool keepdims) {
  return reduce(graph, TJ_OP_ARGMIN, a, 1, &axis, keepdims);
}

//===--- data movement ---===//

tj_value_t tj_graph_reshape(tj_graph_t* graph, tj_value_t a, int32_t rank,
                            const int64_t* dims) {
  if (!building(graph, "tj_graph_reshape")) return tj_value_none();
  uint32_t ops[1] = {operand(a)};
  tj_node_desc_t desc = make_desc(TJ_OP_RESHAPE, 1, ops);
  desc.rank = rank;
  desc.dims = dims;
  return append(graph, &desc);
}

tj_value_t tj_graph_transpose(tj_graph_t* graph, tj_value_t a,
                              const int32_t* perm) {
  if (!building(graph, "tj_graph_transpose")) return tj_value_none();
  uint32_t ops[1] = {operand(a)};
  tj_node_desc_t desc = make_desc(TJ_OP_TRANSPOSE, 1, ops);
  const tj_node_t* node = node_of(graph, a);
  int64_t ints[TJ_MAX_RANK];
  // Without a valid operand the append reports the operand, not the perm.
  if (node) {
    if (node->rank > 0 && !perm) return reject(graph, &desc, "perm is NULL");
    for (int32_t i = 0; i < node->rank; ++i) ints[i] = perm[i];
    desc.attrs.ints = ints;
    desc.attrs.num_ints = (uint32_t)node->rank;
  }
  return append(graph, &desc);
}

tj_value_t tj_graph_broadcast_to(tj_graph_t* graph, tj_value_t a, int32_t rank,
                                 const int64_t* dims) {
  if (!building(graph, "tj_graph_broadcast_to")) return tj_value_none();
  uint32_t ops[1] = {operand(a)};
  tj_node_desc_t desc = make_desc(TJ_OP_BROADCAST_TO, 1, ops);
  desc.rank = rank;
  desc.dims = dims;
  return append(graph, &desc);
}

tj_value_t tj_graph_slice(tj_graph_t* graph, tj_value_t a,
                          const int64_t* starts, const int64_t* stops,
                          const int64_t* steps) {
  if (!building(graph, "tj_graph_slice")) return tj_value_none();
  uint32_t ops[1] = {operand(a)};
  tj_node_desc_t desc = make_desc(TJ_OP_SLICE, 1, ops);
  const tj_node_t* node = node_of(graph, a);
  int64_t ints[3 * TJ_MAX_RANK];
  if (node) {
    int32_t rank = node->rank;
    if (rank > 0 && (!starts || !stops))
      return reject(graph, &desc, "starts and stops must not be NULL");
    for (int32_t i = 0; i < rank; ++i) {
      ints[i] = starts[i];
      ints[rank + i] = stops[i];
      ints[2 * rank + i] = steps ? steps[i] : 1;
    }
    desc.attrs.ints = ints;
    desc.attrs.num_ints = (uint32_t)(3 * rank);
  }
  return append(graph, &desc);
}

tj_value_t tj_graph_concat(tj_graph_t* graph, int32_t count,
                           const tj_value_t* values, int32_t axis) {
  if (!building(graph, "tj_graph_concat")) return tj_value_none();
  tj_node_desc_t desc = make_desc(TJ_OP_CONCAT, 0, NULL);
  desc.attrs.axis = axis;
  if (count < 0) return reject(graph, &desc, "count is negative");
  if (count > 0 && !values) return reject(graph, &desc, "values is NULL");
  uint32_t small[16];
  uint32_t* ops = small;
  size_t bytes = (size_t)count * sizeof(uint32_t);
  if ((size_t)count > TJ_ARRAY_SIZE(small)) {
    ops = tj_alloc(graph->allocator, bytes);
    if (!ops) {
      tj_graph_record_error(graph, tj_status_oom());
      return tj_value_none();
    }
  }
  for (int32_t i = 0; i < count; ++i) ops[i] = operand(values[i]);
  desc.num_operands = (uint32_t)count;
  desc.operands = ops;
  tj_value_t result = append(graph, &desc);
  if (ops != small) tj_free(graph->allocator, ops, bytes);
  return result;
}

tj_value_t tj_graph_pad(tj_graph_t* graph, tj_value_t a, const int64_t* low,
                        const int64_t* high, double value) {
  if (!building(graph, "tj_graph_pad")) return tj_value_none();
  uint32_t ops[1] = {operand(a)};
  tj_node_desc_t desc = make_desc(TJ_OP_PAD, 1, ops);
  desc.attrs.value = value;
  const tj_node_t* node = node_of(graph, a);
  int64_t ints[2 * TJ_MAX_RANK];
  if (node) {
    int32_t rank = node->rank;
    if (rank > 0 && (!low || !high))
      return reject(graph, &desc, "low and high must not be NULL");
    for (int32_t i = 0; i < rank; ++i) {
      ints[i] = low[i];
      ints[rank + i] = high[i];
    }
    desc.attrs.ints = ints;
    desc.attrs.num_ints = (uint32_t)(2 * rank);
  }
  return append(graph, &desc);
}

tj_value_t tj_graph_gather(tj_graph_t* graph, tj_value_t a, tj_value_t indices,
                           int32_t axis) {
  if (!building(graph, "tj_graph_gather")) return tj_value_none();
  uint32_t ops[2] = {operand(a), operand(indices)};
  tj_node_desc_t desc = make_desc(TJ_OP_GATHER, 2, ops);
  desc.attrs.axis = axis;
  return append(graph, &desc);
}

// ops (issue 15): gather_elements and gather_nd (attr.axis: the axis, the
// batch dims).
tj_value_t tj_graph_gather_elements(tj_graph_t* graph, tj_value_t a,
                                    tj_value_t indices, int32_t axis) {
  if (!building(graph, "tj_graph_gather_elements")) return tj_value_none();
  uint32_t ops[2] = {operand(a), operand(indices)};
  tj_node_desc_t desc = make_desc(TJ_OP_GATHER_ELEMENTS, 2, ops);
  desc.attrs.axis = axis;
  return append(graph, &desc);
}

// ops3 (issue 15): cumsum and cumprod (attr.ints = [exclusive, reverse]).
static tj_value_t scan_node(tj_graph_t* graph, tj_op_t op, const char* fn,
                            tj_value_t a, int32_t axis, bool exclusive,
                            bool reverse) {
  if (!building(graph, fn)) return tj_value_none();
  uint32_t ops[1] = {operand(a)};
  tj_node_desc_t desc = make_desc(op, 1, ops);
  int64_t flags[2] = {exclusive ? 1 : 0, reverse ? 1 : 0};
  desc.attrs.axis = axis;
  desc.attrs.ints = flags;
  desc.attrs.num_ints = 2;
  return append(graph, &desc);
}

tj_value_t tj_graph_cumsum(tj_graph_t* graph, tj_value_t a, int32_t axis,
                           bool exclusive, bool reverse) {
  return scan_node(graph, TJ_OP_CUMSUM, "tj_graph_cumsum", a, axis, exclusive,
                   reverse);
}

tj_value_t tj_graph_cumprod(tj_graph_t* graph, tj_value_t a, int32_t axis,
                            bool exclusive, bool reverse) {
  return scan_node(graph, TJ_OP_CUMPROD, "tj_graph_cumprod", a, axis, exclusive,
                   reverse);
}

// scatter (issue 15): attr.axis (0 for scatter_nd), attr.ints =
// [reduction].
static tj_value_t scatter_node(tj_graph_t* graph, tj_op_t op, const char* fn,
                               tj_value_t data, tj_value_t indices,
                               tj_value_t updates, int32_t axis,
                               tj_scatter_reduction_t reduction) {
  if (!building(graph, fn)) return tj_value_none();
  uint32_t ops[3] = {operand(data), operand(indices), operand(updates)};
  tj_node_desc_t desc = make_desc(op, 3, ops);
  int64_t ints[1] = {(int64_t)reduction};
  desc.attrs.axis = axis;
  desc.attrs.ints = ints;
  desc.attrs.num_ints = 1;
  return append(graph, &desc);
}

tj_value_t tj_graph_scatter_elements(tj_graph_t* graph, tj_value_t data,
                                     tj_value_t indices, tj_value_t updates,
                                     int32_t axis,
                                     tj_scatter_reduction_t reduction) {
  return scatter_node(graph, TJ_OP_SCATTER_ELEMENTS,
                      "tj_graph_scatter_elements", data, indices, updates, axis,
                      reduction);
}

tj_value_t tj_graph_scatter_nd(tj_graph_t* graph, tj_value_t data,
                               tj_value_t indices, tj_value_t updates,
                               tj_scatter_reduction_t reduction) {
  return scatter_node(graph, TJ_OP_SCATTER_ND, "tj_graph_scatter_nd", data,
                      indices, updates, 0, reduction);
}

// topk (issue 15): one argtopk node does the selection; topk's values and
// sort's are gather_elements of it, so they fuse as any gather and the
// gradient flows through gather_elements' VJP.
tj_value_t tj_graph_argtopk(tj_graph_t* graph, tj_value_t a, int64_t k,
                            int32_t axis, bool largest) {
  if (!building(graph, "tj_graph_argtopk")) return tj_value_none();
  uint32_t ops[1] = {operand(a)};
  tj_node_desc_t desc = make_desc(TJ_OP_ARGTOPK, 1, ops);
  int64_t ints[2] = {k, largest ? 1 : 0};
  desc.attrs.axis = axis;
  desc.attrs.ints = ints;
  desc.attrs.num_ints = 2;
  return append(graph, &desc);
}

tj_value_t tj_graph_topk(tj_graph_t* graph, tj_value_t a, int64_t k,
                         int32_t axis, bool largest, tj_value_t* out_indices) {
  if (out_indices) *out_indices = tj_value_none();
  if (k < 0) {
    if (!building(graph, "tj_graph_topk")) return tj_value_none();
    // -1 is argtopk's whole-axis spelling, not a k a caller may pass here.
    tj_graph_record_error(
        graph,
        tj_invalid("tj_graph_topk: k must be >= 0, got %lld", (long long)k));
    return tj_value_none();
  }
  tj_value_t indices = tj_graph_argtopk(graph, a, k, axis, largest);
  if (tj_value_is_none(indices)) return tj_value_none();
  if (out_indices) *out_indices = indices;
  return tj_graph_gather_elements(graph, a, indices, axis);
}

tj_value_t tj_graph_argsort(tj_graph_t* graph, tj_value_t a, int32_t axis,
                            bool descending) {
  return tj_graph_argtopk(graph, a, -1, axis, descending);
}

tj_value_t tj_graph_sort(tj_graph_t* graph, tj_value_t a, int32_t axis,
                         bool descending, tj_value_t* out_indices) {
  if (out_indices) *out_indices = tj_value_none();
  tj_value_t indices = tj_graph_argtopk(graph, a, -1, axis, descending);
  if (tj_value_is_none(indices)) return tj_value_none();
  if (out_indices) *out_indices = indices;
  return tj_graph_gather_elements(graph, a, indices, axis);
}

tj_value_t tj_graph_gather_nd(tj_graph_t* graph, tj_value_t a,
                              tj_value_t indices, int32_t batch_dims) {
  if (!building(graph, "tj_graph_gather_nd")) return tj_value_none();
  uint32_t ops[2] = {operand(a), operand(indices)};
  tj_node_desc_t desc = make_desc(TJ_OP_GATHER_ND, 2, ops);
  desc.attrs.axis = batch_dims;
  return append(graph, &desc);
}

// opsmisc: the result type of one_hot is indices' shape with |depth|
// inserted at |axis| (counted over the result's rank), values' dtype.
tj_value_t tj_graph_one_hot(tj_graph_t* graph, tj_value_t indices,
                            tj_value_t values, int64_t depth, int32_t axis) {
  if (!building(graph, "tj_graph_one_hot")) return tj_value_none();
  uint32_t ops[2] = {operand(indices), operand(values)};
  tj_node_desc_t desc = make_desc(TJ_OP_ONE_HOT, 2, ops);
  desc.attrs.axis = axis;
  const tj_node_t* in = node_of(graph, indices);
  const tj_node_t* vn = node_of(graph, values);
  int64_t dims[TJ_MAX_RANK];
  if (in && vn) {
    int32_t rank = in->rank + 1;
    if (rank > TJ_MAX_RANK) return reject(graph, &desc, "rank too large");
    if (axis < -rank || axis >= rank) {
      return reject(graph, &desc, "axis is out of range");
    }
    int32_t a = axis < 0 ? axis + rank : axis;
    for (int32_t i = 0, j = 0; i < rank; ++i) {
      dims[i] = i == a ? depth : in->dims[j++];
    }
    desc.dtype = vn->dtype;
    desc.rank = rank;
    desc.dims = dims;
  }
  return append(graph, &desc);
}

//===--- composites ---===//

tj_value_t tj_graph_gelu(tj_graph_t* graph, tj_value_t x, bool approximate) {
  if (!building(graph, "tj_graph_gelu")) return tj_value_none();
  uint32_t ops[1] = {operand(x)};
  tj_node_desc_t desc = make_desc(TJ_OP_GELU, 1, ops);
  desc.attrs.approximate = approximate;
  return append(graph, &desc);
}

static tj_value_t softmax_like(tj_graph_t* graph, tj_op_t op, tj_value_t x,
                               int32_t axis) {
  if (!building_op(graph, op)) return tj_value_none();
  uint32_t ops[1] = {operand(x)};
  tj_node_desc_t desc = make_desc(op, 1, ops);
  desc.attrs.axis = axis;
  return append(graph, &desc);
}

tj_value_t tj_graph_softmax(tj_graph_t* graph, tj_value_t x, int32_t axis) {
  return softmax_like(graph, TJ_OP_SOFTMAX, x, axis);
}

tj_value_t tj_graph_log_softmax(tj_graph_t* graph, tj_value_t x, int32_t axis) {
  return softmax_like(graph, TJ_OP_LOG_SOFTMAX, x, axis);
}

tj_value_t tj_graph_layer_norm(tj_graph_t* graph, tj_value_t x,
                               tj_value_t gamma, tj_value_t beta, double eps) {
  if (!building(graph, "tj_graph_layer_norm")) return tj_value_none();
  uint32_t ops[3] = {operand(x), operand(gamma), operand(beta)};
  tj_node_desc_t desc = make_desc(TJ_OP_LAYER_NORM, 3, ops);
  desc.attrs.value = eps;
  return append(graph, &desc);
}

tj_value_t tj_graph_rms_norm(tj_graph_t* graph, tj_value_t x, tj_value_t gamma,
                             double eps) {
  if (!building(graph, "tj_graph_rms_norm")) return tj_value_none();
  uint32_t ops[2] = {operand(x), operand(gamma)};
  tj_node_desc_t desc = make_desc(TJ_OP_RMS_NORM, 2, ops);
  desc.attrs.value = eps;
  return append(graph, &desc);
}

tj_value_t tj_graph_linear(tj_graph_t* graph, tj_value_t x, tj_value_t w,
                           tj_value_t b) {
  if (!building(graph, "tj_graph_linear")) return tj_value_none();
  uint32_t ops[3] = {operand(x), operand(w), operand(b)};
  tj_node_desc_t desc = make_desc(TJ_OP_LINEAR, 3, ops);
  return append(graph, &desc);
}

// qgemm (issue 17): zero points may be none.
tj_value_t tj_graph_matmul_integer(tj_graph_t* graph, tj_value_t a,
                                   tj_value_t b, tj_value_t a_zero_point,
                                   tj_value_t b_zero_point) {
  if (!building(graph, "tj_graph_matmul_integer")) return tj_value_none();
  uint32_t ops[4] = {operand(a), operand(b), operand(a_zero_point),
                     operand(b_zero_point)};
  tj_node_desc_t desc = make_desc(TJ_OP_MATMUL_INTEGER, 4, ops);
  return append(graph, &desc);
}

// attention (issue 14): scale 0 is resolved to 1 / sqrt(D) by inference.
tj_value_t tj_graph_attention(tj_graph_t* graph, tj_value_t q, tj_value_t k,
                              tj_value_t v, tj_value_t mask, double scale,
                              bool causal) {
  if (!building(graph, "tj_graph_attention")) return tj_value_none();
  uint32_t ops[4] = {operand(q), operand(k), operand(v), operand(mask)};
  tj_node_desc_t desc = make_desc(TJ_OP_ATTENTION, 4, ops);
  int64_t flag = causal ? 1 : 0;
  desc.attrs.value = scale;
  desc.attrs.ints = &flag;
  desc.attrs.num_ints = 1;
  return append(graph, &desc);
}

// attention's backward (issue 14, fabwd): attention's attributes.
static tj_value_t attention_bwd(tj_graph_t* graph, tj_op_t op, uint32_t n,
                                const uint32_t* ops, double scale,
                                bool causal) {
  tj_node_desc_t desc = make_desc(op, n, ops);
  int64_t flag = causal ? 1 : 0;
  desc.attrs.value = scale;
  desc.attrs.ints = &flag;
  desc.attrs.num_ints = 1;
  return append(graph, &desc);
}

tj_value_t tj_graph_attention_lse(tj_graph_t* graph, tj_value_t q, tj_value_t k,
                                  tj_value_t mask, double scale, bool causal) {
  if (!building(graph, "tj_graph_attention_lse")) return tj_value_none();
  uint32_t ops[3] = {operand(q), operand(k), operand(mask)};
  return attention_bwd(graph, TJ_OP_ATTENTION_LSE, 3, ops, scale, causal);
}

tj_value_t tj_graph_attention_dq(tj_graph_t* graph, tj_value_t q, tj_value_t k,
                                 tj_value_t v, tj_value_t mask, tj_value_t g,
                                 tj_value_t lse, tj_value_t delta, double scale,
                                 bool causal) {
  if (!building(graph, "tj_graph_attention_dq")) return tj_value_none();
  uint32_t ops[7] = {operand(q), operand(k),   operand(v),    operand(mask),
                     operand(g), operand(lse), operand(delta)};
  return attention_bwd(graph, TJ_OP_ATTENTION_DQ, 7, ops, scale, causal);
}

tj_value_t tj_graph_attention_dkv(tj_graph_t* graph, tj_value_t q, tj_value_t k,
                                  tj_value_t v, tj_value_t mask, tj_value_t g,
                                  tj_value_t lse, tj_value_t delta,
                                  double scale, bool causal) {
  if (!building(graph, "tj_graph_attention_dkv")) return tj_value_none();
  uint32_t ops[7] = {operand(q), operand(k),   operand(v),    operand(mask),
                     operand(g), operand(lse), operand(delta)};
  return attention_bwd(graph, TJ_OP_ATTENTION_DKV, 7, ops, scale, causal);
}

//===--- quantization (issue 17, quant2; lib/quant.h) ---===//

static void quant_ints(const tj_quant_attrs_t* a, int64_t* ints) {
  ints[TJ_QUANT_BLOCK] = a ? a->block_size : 0;
  ints[TJ_QUANT_SATURATE] = a && a->no_saturate ? 0 : 1;
  ints[TJ_QUANT_INT4] = a ? (int64_t)a->int4 : 0;
  ints[TJ_QUANT_ODD] = a && a->odd ? 1 : 0;
}

// quantize is TYPED: the result type is computed here (a malformed call is
// left for inference to name).
tj_value_t tj_graph_quantize(tj_graph_t* graph, tj_value_t x, tj_value_t scale,
                             tj_value_t zero_point,
                             const tj_quant_attrs_t* attrs) {
  if (!building(graph, "tj_graph_quantize")) return tj_value_none();
  uint32_t ops[3] = {operand(x), operand(scale), operand(zero_point)};
  tj_node_desc_t desc = make_desc(TJ_OP_QUANTIZE, 3, ops);
  int64_t ints[TJ_QUANT_NUM_INTS];
  quant_ints(attrs, ints);
  desc.attrs.ints = ints;
  desc.attrs.num_ints = TJ_QUANT_NUM_INTS;
  desc.attrs.axis = attrs ? attrs->axis : 0;
  desc.dtype = attrs ? attrs->dtype : TJ_DTYPE_I8;
  const tj_node_t* xn = node_of(graph, x);
  int64_t dims[TJ_MAX_RANK];
  if (xn) {
    desc.rank = xn->rank;
    if (xn->rank > 0)
      memcpy(dims, xn->dims, sizeof(int64_t) * (size_t)xn->rank);
    if (ints[TJ_QUANT_INT4] && xn->rank > 0 &&
        tj_dim_is_const(dims[xn->rank - 1])) {
      dims[xn->rank - 1] = (dims[xn->rank - 1] + 1) / 2;
      ints[TJ_QUANT_ODD] = xn->dims[xn->rank - 1] & 1;
    }
    desc.dims = dims;
  }
  return append(graph, &desc);
}

tj_value_t tj_graph_dequantize(tj_graph_t* graph, tj_value_t q,
                               tj_value_t scale, tj_value_t zero_point,
                               const tj_quant_attrs_t* attrs) {
  if (!building(graph, "tj_graph_dequantize")) return tj_value_none();
  uint32_t ops[3] = {operand(q), operand(scale), operand(zero_point)};
  tj_node_desc_t desc = make_desc(TJ_OP_DEQUANTIZE, 3, ops);
  int64_t ints[TJ_QUANT_NUM_INTS];
  quant_ints(attrs, ints);
  desc.attrs.ints = ints;
  desc.attrs.num_ints = TJ_QUANT_NUM_INTS;
  desc.attrs.axis = attrs ? attrs->axis : 0;
  return append(graph, &desc);
}

//===--- convolution and pooling (composites) ---===//

// conv, conv_transpose and the pools: the node on channels-first x, with
// transposes around it for channels-last. The WINDOW ints are laid out as
// lib/window.h says, raw (zeros are defaults); inference checks them.
static tj_value_t window_op(tj_graph_t* graph, tj_op_t op, tj_value_t x,
                            tj_value_t w, tj_value_t bias,
                            const tj_conv_attrs_t* attrs) {
  if (!building_op(graph, op)) return tj_value_none();
  const int32_t arity = tj_op_info(op)->arity;
  uint32_t ops[3] = {operand(x), operand(w), operand(bias)};
  tj_node_desc_t desc = make_desc(op, (uint32_t)arity, ops);
  const tj_node_t* node = node_of(graph, x);
  // Without a valid x the append reports the operand.
  if (!node) return append(graph, &desc);
  const int32_t rank = node->rank, n = rank - 2;
  if (n < 1 || n > TJ_WINDOW_MAX_SPATIAL)
    return reject(graph, &desc,
                  "x must have rank 3 to 5 ([N, C] and 1 to 3 spatial axes)");
  if (!attrs && arity == 1)
    return reject(graph, &desc, "attrs is NULL (the pool's kernel is needed)");
  tj_conv_attrs_t zero;
  memset(&zero, 0, sizeof(zero));
  const tj_conv_attrs_t* a = attrs ? attrs : &zero;
  int64_t ints[2 + 6 * TJ_WINDOW_MAX_SPATIAL];
  ints[0] = a->groups;
  ints[1] = (a->ceil_mode ? TJ_WINDOW_CEIL_MODE : 0) |
            (a->count_include_pad ? TJ_WINDOW_COUNT_INCLUDE_PAD : 0);
  const int64_t* lists[6] = {a->kernel,     a->strides,  a->dilations,
                             a->pads_begin, a->pads_end, a->output_padding};
  for (int32_t l = 0; l < 6; ++l) {
    for (int32_t i = 0; i < n; ++i) ints[2 + l * n + i] = lists[l][i];
  }
  desc.attrs.ints = ints;
  desc.attrs.num_ints = (uint32_t)(2 + 6 * n);
  desc.attrs.value = a->p;
  if (!a->channels_last) return append(graph, &desc);
  int32_t to_first[TJ_MAX_RANK], to_last[TJ_MAX_RANK];
  to_first[0] = to_last[0] = 0;
  to_first[1] = rank - 1;
  for (int32_t i = 2; i < rank; ++i) to_first[i] = i - 1;
  for (int32_t i = 1; i < rank - 1; ++i) to_last[i] = i + 1;
  to_last[rank - 1] = 1;
  tj_value_t xf = tj_graph_transpose(graph, x, to_first);
  if (xf.id == 0) return xf;
  ops[0] = operand(xf);
  tj_value_t y = append(graph, &desc);
  if (y.id == 0) return y;
  return tj_graph_transpose(graph, y, to_last);
}

tj_value_t tj_graph_conv(tj_graph_t* graph, tj_value_t x, tj_value_t w,
                         tj_value_t bias, const tj_conv_attrs_t* attrs) {
  return window_op(graph, TJ_OP_CONV, x, w, bias, attrs);
}

tj_value_t tj_graph_conv_transpose(tj_graph_t* graph, tj_value_t x,
                                   tj_value_t w, tj_value_t bias,
                                   const tj_conv_attrs_t* attrs) {
  return window_op(graph, TJ_OP_CONV_TRANSPOSE, x, w, bias, attrs);
}

tj_value_t tj_graph_max_pool(tj_graph_t* graph, tj_value_t x,
                             const tj_conv_attrs_t* attrs) {
  return window_op(graph, TJ_OP_MAX_POOL, x, tj_value_none(), tj_value_none(),
                   attrs);
}

tj_value_t tj_graph_avg_pool(tj_graph_t* graph, tj_value_t x,
                             const tj_conv_attrs_t* attrs) {
  return window_op(graph, TJ_OP_AVG_POOL, x, tj_value_none(), tj_value_none(),
                   attrs);
}

tj_value_t tj_graph_lp_pool(tj_graph_t* graph, tj_value_t x,
                            const tj_conv_attrs_t* attrs) {
  return window_op(graph, TJ_OP_LP_POOL, x, tj_value_none(), tj_value_none(),
                   attrs);
}

//===--- reading a graph ---===//

int32_t tj_graph_num_inputs(const tj_graph_t* graph) {
  return graph ? (int32_t)graph->num_inputs : 0;
}

int32_t tj_graph_num_outputs(const tj_graph_t* graph) {
  return graph ? (int32_t)graph->num_outputs : 0;
}

bool tj_graph_output_is_data_dependent(const tj_graph_t* graph, int32_t index) {
  if (!graph || index < 0 || (uint32_t)index >= graph->num_outputs)
    return false;
  return tj_custom_output_is_dynamic(graph, (uint32_t)index);
}

tj_value_t tj_graph_input_value(const tj_graph_t* graph, int32_t index) {
  if (!graph || index < 0 || (uint32_t)index >= graph->num_inputs)
    return tj_value_none();
  tj_value_t value = {graph->inputs[index] + 1};
  return value;
}

tj_value_t tj_graph_output_value(const tj_graph_t* graph, int32_t index) {
  if (!graph || index < 0 || (uint32_t)index >= graph->num_outputs)
    return tj_value_none();
  tj_value_t value = {graph->outputs[index].node + 1};
  return value;
}

const char* tj_graph_input_name(const tj_graph_t* graph, int32_t index) {
  if (!graph || index < 0 || (uint32_t)index >= graph->num_inputs) return NULL;
  return graph->nodes[graph->inputs[index]].attrs.name;
}

const char* tj_graph_name(const tj_graph_t* graph) {
  return graph ? graph->name : NULL;
}

const char* tj_graph_output_name(const tj_graph_t* graph, int32_t index) {
  if (!graph || index < 0 || (uint32_t)index >= graph->num_outputs) return NULL;
  return graph->outputs[index].name;
}

tj_dtype_t tj_graph_value_dtype(const tj_graph_t* graph, tj_value_t value) {
  const tj_node_t* node = node_of(graph, value);
  return node ? node->dtype : TJ_DTYPE_COUNT_;
}

int32_t tj_graph_value_rank(const tj_graph_t* graph, tj_value_t value) {
  const tj_node_t* node = node_of(graph, value);
  return node ? node->rank : -1;
}

void tj_graph_value_dims(const tj_graph_t* graph, tj_value_t value,
                         int64_t* out_dims) {
  const tj_node_t* node = node_of(graph, value);
  if (!node || !out_dims) return;
  for (int32_t i = 0; i < node->rank; ++i) out_dims[i] = node->dims[i];
}
