// libFuzzer target: the ONNX importer (tj_onnx_import) on arbitrary bytes.
// A malformed model is a clean status and fine; an imported graph must
// print (tj_graph_print). A crash, a leak, or a failure that leaves a graph
// behind is the fuzzer's signal. External data is refused (no base
// directory), so no input reaches the filesystem.

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tensorjit.h"

static tj_context_t* g_context;

// libFuzzer's entry point.
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!g_context) {
    tj_status_t status = tj_context_create(NULL, &g_context);
    if (status) abort();
  }
  tj_graph_t* graph = NULL;
  tj_status_t status = tj_onnx_import(g_context, data, size, NULL, &graph);
  if (status) {
    if (graph) abort();  // a failure must leave no graph behind
    tj_status_free(status);
    return 0;
  }
  char* printed = NULL;
  status = tj_graph_print(graph, &printed);
  tj_graph_destroy(graph);
  if (status) {
    fprintf(stderr, "fuzz_onnx: an imported graph does not print: %s\n",
            tj_status_message(status));
    abort();
  }
  tj_context_free_string(g_context, printed);
  return 0;
}
