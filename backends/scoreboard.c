// tj_graph_scoreboard (include/tensorjit/tj_optimize.h), the public entry:
// the measuring is lib/passes/scoreboard.c; this file, above both lib/ and
// backends/reference, gives it the reference interpreter as the constant
// evaluator, so that the scoreboard folds exactly as tj_compile does.

#include "backends/reference/reference_eval.h"
#include "backends/runtime/backend.h"

// Weights are measured as x86 reads them (issue 17): a dequantize of
// constant weights that its GEMM reads quantized stays whole, so the
// scoreboard shows the stored bytes; every other op as the target-free
// pipeline has it.
static bool quantized_weights(const tj_graph_t* graph, uint32_t node) {
  return graph->nodes[node].op == TJ_OP_DEQUANTIZE &&
         tj_backend_x86.native_op(graph, node);
}

TJ_API tj_status_t tj_graph_scoreboard(const tj_graph_t* graph,
                                       int32_t num_symbols,
                                       const char* const* symbol_names,
                                       const int64_t* symbol_values,
                                       tj_scoreboard_t* out) {
  return tj_scoreboard_measure(graph, num_symbols, symbol_names, symbol_values,
                               tj_pass_reference_evaluator, NULL,
                               quantized_weights, out);
}
