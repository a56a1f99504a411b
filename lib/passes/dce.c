// lib/passes/dce.c
//
// Dead code elimination: keeps the nodes some graph output depends on (and
// every input, which is part of the signature), drops the rest. No op has a
// side effect but custom ops not declared pure, which are kept: reachability
// from the outputs and from those is the whole rule.
//
// Requires: nothing.  Preserves: node order of the survivors, input order
// and names, output names, symbols, guards.  Invalidates: fusion groups and
// the memory plan (new graph).  Idempotent.

#include <string.h>

#include "lib/custom_op.h"
#include "lib/passes/pass.h"

tj_status_t tj_pass_dce(tj_pass_ctx_t* ctx, tj_plan_t* plan) {
  (void)ctx;
  const tj_graph_t* g = plan->graph;
  uint32_t n = g->num_nodes;
  bool* live = tj_calloc(g->allocator, n ? n : 1, sizeof(bool));
  if (!live) return tj_status_oom();
  uint32_t num_live = 0;
  for (uint32_t i = 0; i < g->num_outputs; ++i) live[g->outputs[i].node] = true;
  // A custom op not declared pure runs whether used or not.
  for (uint32_t i = 0; i < n; ++i) {
    if (g->nodes[i].op == TJ_OP_CUSTOM &&
        !tj_custom_node_is_pure(g, &g->nodes[i])) {
      live[i] = true;
    }
  }
  // Operands precede their users: one backward sweep closes the set.
  for (uint32_t i = n; i-- > 0;) {
    if (!live[i]) continue;
    ++num_live;
    const tj_node_t* node = &g->nodes[i];
    for (uint32_t k = 0; k < node->num_operands; ++k) {
      if (node->operands[k] != TJ_NODE_NONE) live[node->operands[k]] = true;
    }
  }
  for (uint32_t i = 0; i < g->num_inputs; ++i) {
    if (!live[g->inputs[i]]) ++num_live;
  }
  if (num_live == n) {  // nothing to remove: keep the graph as it is
    tj_free(g->allocator, live, n ? n : 1);
    return NULL;
  }
  tj_rewriter_t rw;
  tj_status_t status = tj_rewriter_begin(&rw, g);
  for (uint32_t i = 0; !status && i < n; ++i) {
    if (live[i] && g->nodes[i].op != TJ_OP_INPUT) {
      status = tj_rewriter_clone(&rw, i);
    }
  }
  tj_free(g->allocator, live, n ? n : 1);
  if (status) {
    tj_rewriter_abandon(&rw);
    return status;
  }
  tj_graph_t* out = NULL;
  TJ_RETURN_IF_ERROR(tj_rewriter_finish(&rw, &out));
  tj_plan_set_graph(plan, out);
  return NULL;
}
