// From symbolic shapes to concrete ones at run time: binding each symbol to
// the size it has in the caller's input tensors, checking everything the
// graph assumed (dtypes, ranks, constant dims, expression dims, the guards
// recorded while building), and evaluating node shapes under the binding.
//
// A plain symbol dim (B) of an input binds the symbol; a later plain use
// must agree. Expression dims (B*2) are only checked, after every plain
// symbol is bound: solving them would need division, and a symbol that
// appears only inside expressions is reported as unbound instead.

#include <stdio.h>
#include <string.h>

#include "lib/custom_op.h"
#include "lib/ir.h"

// Where a symbol got its value, for messages that name both sides.
typedef struct binding_t {
  int32_t input;
  int32_t axis;
} binding_t;

static const char* input_name(const tj_graph_t* graph, int32_t k) {
  return graph->nodes[graph->inputs[k]].attrs.name;
}

static tj_status_t check_input(const tj_graph_t* graph, int32_t k,
                               const tj_tensor_t* t, int64_t* values,
                               binding_t* bindings) {
  const tj_node_t* node = &graph->nodes[graph->inputs[k]];
  const char* name = node->attrs.name;
  TJ_RETURN_IF_ERROR(tj_ir_check_device(t, "input", name, true));
  if (t->dtype != node->dtype)
    return tj_invalid("input \"%s\" is %s but the graph says %s", name,
                      tj_dtype_name(t->dtype), tj_dtype_name(node->dtype));
  if (t->rank != node->rank)
    return tj_invalid("input \"%s\" has rank %d but the graph says %d", name,
                      (int)t->rank, (int)node->rank);
  if (t->rank > 0 && !t->shape)
    return tj_invalid("input \"%s\": shape is NULL", name);
  int64_t numel = 1;
  bool overflow = false;
  for (int32_t d = 0; d < t->rank; ++d) {
    int64_t size = t->shape[d];
    if (size < 0)
      return tj_invalid("input \"%s\" dim %d is %lld; sizes must be >= 0", name,
                        (int)d, (long long)size);
    overflow |= tj_mul_overflow_i64(numel, size, &numel);
    int64_t expected = node->dims[d];
    if (expected >= 0) {
      if (size != expected)
        return tj_invalid("input \"%s\" dim %d is %lld but the graph says %lld",
                          name, (int)d, (long long)size, (long long)expected);
      continue;
    }
    int32_t sym = tj_dim_as_symbol(&graph->dims, expected);
    if (sym < 0) continue;  // an expression: checked once all are bound
    if (values[sym] < 0) {
      values[sym] = size;
      bindings[sym].input = k;
      bindings[sym].axis = d;
    } else if (values[sym] != size) {
      const binding_t* b = &bindings[sym];
      return tj_invalid(
          "input \"%s\" dim %d is %lld but the graph says %s, "
          "which input \"%s\" dim %d set to %lld",
          name, (int)d, (long long)size,
          tj_dim_symbol_name(&graph->dims, (uint32_t)sym),
          input_name(graph, b->input), (int)b->axis, (long long)values[sym]);
    }
  }
  if (overflow)
    return tj_invalid("input \"%s\": element count overflows int64", name);
  if (!t->data && numel > 0)
    return tj_invalid("input \"%s\": data is NULL for %lld elements", name,
                      (long long)numel);
  return NULL;
}

// The expression dims of input |k|, now that the plain symbols are bound.
static tj_status_t check_input_expressions(const tj_graph_t* graph, int32_t k,
                                           const tj_tensor_t* t,
                                           const int64_t* values) {
  const tj_node_t* node = &graph->nodes[graph->inputs[k]];
  for (int32_t d = 0; d < node->rank; ++d) {
    int64_t dim = node->dims[d];
    if (dim >= 0 || tj_dim_as_symbol(&graph->dims, dim) >= 0) continue;
    char text[128];
    tj_dim_format(&graph->dims, dim, text, sizeof(text));
    int64_t expected = 0;
    tj_status_t status = tj_dim_eval(&graph->dims, dim, values, &expected);
    if (status)
      return tj_status_annotate(status, "input \"%s\" dim %d (%s)",
                                node->attrs.name, (int)d, text);
    if (t->shape[d] != expected)
      return tj_invalid(
          "input \"%s\" dim %d is %lld but the graph says "
          "%s = %lld",
          node->attrs.name, (int)d, (long long)t->shape[d], text,
          (long long)expected);
  }
  return NULL;
}

static tj_status_t check_guards(const tj_graph_t* graph,
                                const int64_t* values) {
  for (uint32_t i = 0; i < graph->num_guards; ++i) {
    const tj_guard_t* g = &graph->guards[i];
    const char* op = tj_op_info(graph->nodes[g->node].op)->name;
    char a_text[128], b_text[128];
    tj_dim_format(&graph->dims, g->a, a_text, sizeof(a_text));
    tj_dim_format(&graph->dims, g->b, b_text, sizeof(b_text));
    int64_t a = 0, b = 0;
    tj_status_t status = tj_dim_eval(&graph->dims, g->a, values, &a);
    if (!status) status = tj_dim_eval(&graph->dims, g->b, values, &b);
    if (status)
      return tj_status_annotate(status, "guard %s == %s (%s, node %%%u)",
                                a_text, b_text, op, g->node);
    if (a != b)
      return tj_invalid(
          "guard %s == %s failed: %s is %lld but %s is %lld "
          "(required by %s, node %%%u)",
          a_text, b_text, a_text, (long long)a, b_text, (long long)b, op,
          g->node);
  }
  return NULL;
}

tj_status_t tj_ir_concrete_dims(const tj_graph_t* graph, uint32_t index,
                                const int64_t* symbol_values,
                                int64_t* out_dims) {
  if (index >= graph->num_nodes)
    return tj_invalid("node %%%u is not in graph @%s", index, graph->name);
  const tj_node_t* node = &graph->nodes[index];
  for (int32_t d = 0; d < node->rank; ++d) {
    tj_status_t status =
        tj_dim_eval(&graph->dims, node->dims[d], symbol_values, &out_dims[d]);
    if (status)
      return tj_status_annotate(status, "%s (node %%%u) dim %d",
                                tj_op_info(node->op)->name, index, (int)d);
  }
  return NULL;
}

// Every node's concrete size must fit, as at build time for constant dims
// (the size rule of tj_graph.h: zero dims are left out of the product, so an
// empty tensor with huge other dims fails too): run-time code may then
// multiply sizes, in any order, without checking.
static tj_status_t check_node_sizes(const tj_graph_t* graph,
                                    const int64_t* values) {
  int64_t dims[TJ_MAX_RANK];
  for (uint32_t i = 0; i < graph->num_nodes; ++i) {
    const tj_node_t* node = &graph->nodes[i];
    TJ_RETURN_IF_ERROR(tj_ir_concrete_dims(graph, i, values, dims));
    int64_t bytes = (int64_t)tj_dtype_size(node->dtype);
    bool too_big = false;
    for (int32_t d = 0; d < node->rank; ++d) {
      if (dims[d] == 0) continue;
      too_big |= tj_mul_overflow_i64(bytes, dims[d], &bytes) ||
                 bytes > TJ_MAX_TENSOR_BYTES;
      if (too_big) bytes = TJ_MAX_TENSOR_BYTES;
    }
    if (too_big) {
      char shape[256];
      tj_shape_format(&graph->dims, node->rank, dims, shape, sizeof(shape));
      bool empty = false;
      for (int32_t d = 0; d < node->rank; ++d) empty |= dims[d] == 0;
      return tj_invalid(
          "%s (node %%%u): tensor size overflows: %s%s is more "
          "than 2^48 bytes%s under these input shapes",
          tj_op_info(node->op)->name, i, tj_dtype_name(node->dtype), shape,
          empty ? " without its zero dims" : "");
    }
  }
  return NULL;
}

static tj_status_t bind(const tj_graph_t* graph, const tj_tensor_t* inputs,
                        int32_t num_inputs, bool read, int64_t* symbol_values) {
  for (int i = 0; i < TJ_MAX_SYMBOLS; ++i) symbol_values[i] = -1;
  if (num_inputs < 0 || (uint32_t)num_inputs != graph->num_inputs)
    return tj_invalid("graph @%s takes %u inputs, got %d", graph->name,
                      graph->num_inputs, (int)num_inputs);
  if (num_inputs > 0 && !inputs) return tj_invalid("inputs is NULL");
  binding_t bindings[TJ_MAX_SYMBOLS];
  memset(bindings, 0, sizeof(bindings));
  for (int32_t k = 0; k < num_inputs; ++k)
    TJ_RETURN_IF_ERROR(
        check_input(graph, k, &inputs[k], symbol_values, bindings));
  for (int32_t k = 0; k < num_inputs; ++k)
    TJ_RETURN_IF_ERROR(
        check_input_expressions(graph, k, &inputs[k], symbol_values));
  // A range's length, from its scalars' values, before anything is sized.
  TJ_RETURN_IF_ERROR(tj_dd_bind_values(graph, inputs, read, symbol_values));
  // Data-dependent symbols stand at their upper bounds until their op runs.
  TJ_RETURN_IF_ERROR(tj_custom_bind_dynamic(graph, symbol_values));
  TJ_RETURN_IF_ERROR(check_guards(graph, symbol_values));
  return check_node_sizes(graph, symbol_values);
}

tj_status_t tj_ir_bind_symbols(const tj_graph_t* graph,
                               const tj_tensor_t* inputs, int32_t num_inputs,
                               int64_t* symbol_values) {
  return bind(graph, inputs, num_inputs, true, symbol_values);
}

tj_status_t tj_ir_bind_shapes(const tj_graph_t* graph,
                              const tj_tensor_t* inputs, int32_t num_inputs,
                              int64_t* symbol_values) {
  return bind(graph, inputs, num_inputs, false, symbol_values);
}

tj_status_t tj_graph_output_shape(const tj_graph_t* graph,
                                  const tj_tensor_t* inputs, int32_t num_inputs,
                                  int32_t output_index, int32_t* out_rank,
                                  int64_t* out_dims) {
  if (!graph || !out_rank || !out_dims)
    return tj_invalid(
        "tj_graph_output_shape: graph, out_rank and out_dims "
        "must not be NULL");
  *out_rank = 0;
  if (!graph->finalized)
    return tj_invalid("graph @%s is not finalized", graph->name);
  if (output_index < 0 || (uint32_t)output_index >= graph->num_outputs)
    return tj_invalid("graph @%s has %u outputs; index %d is out of range",
                      graph->name, graph->num_outputs, (int)output_index);
  int64_t values[TJ_MAX_SYMBOLS];
  TJ_RETURN_IF_ERROR(tj_ir_bind_symbols(graph, inputs, num_inputs, values));
  uint32_t node = graph->outputs[output_index].node;
  TJ_RETURN_IF_ERROR(tj_ir_concrete_dims(graph, node, values, out_dims));
  *out_rank = graph->nodes[node].rank;
  return NULL;
}
