// The constant evaluator the drivers install in tj_pass_ctx_t: a graph of
// constants run on the reference interpreter. See reference_eval.h.

#include "backends/reference/reference_eval.h"

#include <string.h>

tj_status_t tj_pass_reference_evaluator(void* user_data,
                                        const tj_graph_t* graph,
                                        void* const* outputs) {
  (void)user_data;
  if (graph->num_inputs != 0) {
    return tj_internal("reference evaluator: the graph has inputs");
  }
  enum { kMaxOutputs = 16 };
  if (graph->num_outputs > kMaxOutputs) {
    return tj_internal("reference evaluator: too many outputs");
  }
  int64_t shapes[kMaxOutputs][TJ_MAX_RANK];
  tj_tensor_t tensors[kMaxOutputs];
  for (uint32_t i = 0; i < graph->num_outputs; ++i) {
    const tj_node_t* node = &graph->nodes[graph->outputs[i].node];
    for (int32_t d = 0; d < node->rank; ++d) {
      if (!tj_dim_is_const(node->dims[d])) {
        return tj_internal("reference evaluator: symbolic output shape");
      }
      shapes[i][d] = node->dims[d];
    }
    tensors[i] = tj_tensor_make(outputs[i], node->dtype, node->rank, shapes[i]);
  }
  return tj_reference_run(graph, NULL, 0, tensors, (int32_t)graph->num_outputs);
}
