// libFuzzer target: the .tj parser (tj_graph_parse) on arbitrary bytes.
// When the bytes parse, the graph is printed, the print parsed again and
// printed again: the two prints must be equal (the round trip of
// docs/tj-text-format.md), else the target aborts, which is the fuzzer's
// crash signal. A parse error is a clean status and fine.

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorjit/tj_base.h"
#include "tensorjit/tj_graph.h"

static tj_context_t* g_context;

// Parses |size| bytes of |text| and prints the graph; NULL when it does not
// parse (the status freed). The caller frees the text.
static char* parse_and_print(const char* text, size_t size) {
  tj_graph_t* graph = NULL;
  tj_status_t status = tj_graph_parse(g_context, text, size, "fuzz", &graph);
  if (status) {
    if (graph) abort();  // a failure must leave no graph behind
    tj_status_free(status);
    return NULL;
  }
  char* printed = NULL;
  status = tj_graph_print(graph, &printed);
  tj_graph_destroy(graph);
  if (status) {
    fprintf(stderr, "fuzz_parse: a parsed graph does not print: %s\n",
            tj_status_message(status));
    abort();
  }
  return printed;
}

// libFuzzer's entry point.
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!g_context) {
    tj_status_t status = tj_context_create(NULL, &g_context);
    if (status) abort();
  }
  char* first = parse_and_print((const char*)data, size);
  if (!first) return 0;
  char* second = parse_and_print(first, strlen(first));
  if (!second) {
    fprintf(stderr, "fuzz_parse: the print does not parse again:\n%s\n", first);
    abort();
  }
  if (strcmp(first, second) != 0) {
    fprintf(stderr, "fuzz_parse: round trip differs:\n%s\n---\n%s\n", first,
            second);
    abort();
  }
  tj_context_free_string(g_context, first);
  tj_context_free_string(g_context, second);
  return 0;
}
