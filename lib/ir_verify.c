// The IR verifier and small node queries.
//
// tj_ir_verify re-runs inference on every stored node and demands the stored
// type and attributes back exactly. That one check covers operand dtypes,
// shapes, guards and attribute normalization with the same code that built
// the node, so the verifier cannot drift from the builder. Anything wrong is
// INTERNAL: a well-formed builder never produces it, so it is a bug in the
// pass (or parser) that made the graph.

#include <stdio.h>
#include <string.h>

#include "lib/infer.h"

int tj_ir_format_type(const tj_graph_t* graph, uint32_t index, char* buf,
                      size_t size) {
  if (index >= graph->num_nodes) return snprintf(buf, size, "?");
  const tj_node_t* node = &graph->nodes[index];
  const char* dtype = tj_dtype_name(node->dtype);
  int n = snprintf(buf, size, "%s", dtype);
  if (n < 0) return n;
  size_t used = (size_t)n < size ? (size_t)n : (size > 0 ? size - 1 : 0);
  int m = tj_shape_format(&graph->dims, node->rank, node->dims, buf + used,
                          size - used);
  return n + m;
}

tj_status_t tj_ir_node_numel(tj_graph_t* graph, uint32_t index,
                             int64_t* out_numel) {
  if (index >= graph->num_nodes)
    return tj_invalid("node %%%u is not in graph @%s", index, graph->name);
  const tj_node_t* node = &graph->nodes[index];
  return tj_dim_product(&graph->dims, node->rank, node->dims, out_numel);
}

static bool same_double(double a, double b) {
  return memcmp(&a, &b, sizeof(a)) == 0;  // NaN payloads and -0.0 included
}

static bool same_attrs(const tj_attrs_t* a, const tj_attrs_t* b) {
  if (a->num_ints != b->num_ints || a->axis != b->axis ||
      a->keepdims != b->keepdims || a->approximate != b->approximate ||
      a->borrowed != b->borrowed || !same_double(a->value, b->value) ||
      a->data != b->data)
    return false;
  if (a->num_ints > 0 &&
      memcmp(a->ints, b->ints, a->num_ints * sizeof(int64_t)) != 0)
    return false;
  if ((a->name == NULL) != (b->name == NULL)) return false;
  return a->name == NULL || strcmp(a->name, b->name) == 0;
}

static tj_status_t verify_node(tj_graph_t* graph, uint32_t index) {
  const tj_node_t* node = &graph->nodes[index];
  if ((unsigned)node->op >= TJ_OP_COUNT_)
    return tj_internal("verify: node %%%u has unknown op %d", index,
                       (int)node->op);
  const char* op = tj_op_info(node->op)->name;
  if (node->rank < 0 || node->rank > TJ_MAX_RANK)
    return tj_internal("verify: node %%%u (%s) has rank %d", index, op,
                       (int)node->rank);
  if ((node->rank > 0 && !node->dims) ||
      (node->num_operands > 0 && !node->operands) ||
      (node->attrs.num_ints > 0 && !node->attrs.ints))
    return tj_internal("verify: node %%%u (%s) has a NULL payload", index, op);

  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = node->op;
  desc.num_operands = node->num_operands;
  desc.operands = node->operands;
  desc.dtype = node->dtype;
  desc.rank = node->rank;
  desc.dims = node->dims;
  desc.attrs = node->attrs;
  tj_ir_inferred_t r;
  tj_status_t status = tj_ir_infer(graph, &desc, index, true, &r);
  if (status) {
    if (tj_status_code(status) == TJ_STATUS_OUT_OF_MEMORY) return status;
    tj_status_t internal = tj_internal("verify: %s", tj_status_message(status));
    tj_status_free(status);
    return internal;
  }
  bool same_type =
      r.dtype == node->dtype && r.rank == node->rank &&
      (node->rank == 0 ||
       memcmp(r.dims, node->dims, (size_t)node->rank * sizeof(int64_t)) == 0);
  if (!same_type) {
    char stored[256], inferred[256], shape[224];
    tj_ir_format_type(graph, index, stored, sizeof(stored));
    tj_shape_format(&graph->dims, r.rank, r.dims, shape, sizeof(shape));
    snprintf(inferred, sizeof(inferred), "%s%s", tj_dtype_name(r.dtype), shape);
    return tj_internal(
        "verify: node %%%u (%s) has type %s but inference "
        "gives %s",
        index, op, stored, inferred);
  }
  if (!same_attrs(&r.attrs, &node->attrs))
    return tj_internal(
        "verify: node %%%u (%s) has attributes that are not "
        "in normalized form",
        index, op);
  return NULL;
}

static tj_status_t verify_inputs(const tj_graph_t* graph) {
  uint32_t input_nodes = 0;
  for (uint32_t i = 0; i < graph->num_nodes; ++i)
    input_nodes += graph->nodes[i].op == TJ_OP_INPUT;
  if (input_nodes != graph->num_inputs)
    return tj_internal("verify: %u input nodes but %u inputs listed",
                       input_nodes, graph->num_inputs);
  for (uint32_t k = 0; k < graph->num_inputs; ++k) {
    uint32_t node = graph->inputs[k];
    if (node >= graph->num_nodes || graph->nodes[node].op != TJ_OP_INPUT)
      return tj_internal("verify: input %u is not an input node", k);
    for (uint32_t j = 0; j < k; ++j) {
      uint32_t other = graph->inputs[j];
      if (other == node || strcmp(graph->nodes[other].attrs.name,
                                  graph->nodes[node].attrs.name) == 0)
        return tj_internal(
            "verify: inputs %u and %u repeat node %%%u or "
            "its name",
            j, k, node);
    }
  }
  return NULL;
}

static tj_status_t verify_outputs_and_guards(const tj_graph_t* graph) {
  for (uint32_t k = 0; k < graph->num_outputs; ++k) {
    const tj_output_t* out = &graph->outputs[k];
    if (out->node >= graph->num_nodes || !out->name)
      return tj_internal("verify: output %u does not name a node", k);
    for (uint32_t j = 0; j < k; ++j) {
      if (strcmp(graph->outputs[j].name, out->name) == 0)
        return tj_internal("verify: outputs %u and %u are both \"%s\"", j, k,
                           out->name);
    }
  }
  for (uint32_t k = 0; k < graph->num_guards; ++k) {
    const tj_guard_t* g = &graph->guards[k];
    bool a_ok = g->a >= 0 || tj_dim_expr(&graph->dims, g->a);
    bool b_ok = g->b >= 0 || tj_dim_expr(&graph->dims, g->b);
    if (!a_ok || !b_ok || g->node >= graph->num_nodes)
      return tj_internal("verify: guard %u is malformed", k);
  }
  return NULL;
}

tj_status_t tj_ir_verify(const tj_graph_t* graph) {
  // Re-inference may call the dim table's intern function. For a graph
  // whose nodes were all built by inference every expression it needs is
  // already interned, so this finds and never inserts; the cast only
  // satisfies the signature of the shared inference code.
  tj_graph_t* mutable_graph = (tj_graph_t*)graph;
  for (uint32_t i = 0; i < graph->num_nodes; ++i)
    TJ_RETURN_IF_ERROR(verify_node(mutable_graph, i));
  TJ_RETURN_IF_ERROR(verify_inputs(graph));
  return verify_outputs_and_guards(graph);
}
