// tj-opt: reads .tj text, parses and verifies it, runs passes on it, and
// prints it back.
//
//   tj-opt [--split-input-file] [--passes=a,b,c] [FILE|-]
//
// With --split-input-file the input is cut at lines "// -----" and every
// piece is handled on its own (errors in one do not stop the others; line
// numbers stay those of the whole file); the printed functions are joined
// by "// -----" lines. Any error goes to stderr and makes the exit status 1.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/ir.h"
#include "backends/reference/reference_eval.h"
#include "lib/passes/pass.h"
#include "tensorjit.h"
#include "tools/tool_io.h"

typedef struct options_t {
  bool split_input_file;
  const char* passes;  // NULL: none given
  const char* path;    // "-" is stdin
} options_t;

//===----------------------------------------------------------------------===//
// Pass pipeline: the one place that knows about --passes. Names come from
// lib/passes/passes.def ("default" is the default pipeline); the IR is
// verified after every pass; folding evaluates on the reference interpreter.
// Once `fuse` has run, the grouped form is printed (fused regions inline).
//===----------------------------------------------------------------------===//

// Checks the comma-separated pass list |spec| before any input is read (an
// empty list runs nothing). Returns false after printing the error.
static bool check_pass_pipeline(const char* spec) {
  for (const char* s = spec; *s;) {
    const char* end = strchr(s, ',');
    size_t n = end ? (size_t)(end - s) : strlen(s);
    if (n == 0) {
      fprintf(stderr, "tj-opt: empty pass name in --passes=%s\n", spec);
      return false;
    }
    if (!(n == 7 && memcmp(s, "default", 7) == 0) && !tj_pass_find(s, n)) {
      fprintf(stderr, "tj-opt: unknown pass '%.*s' in --passes=%s\n", (int)n, s,
              spec);
      return false;
    }
    if (!end) break;
    s = end + 1;
    if (!*s) {
      fprintf(stderr, "tj-opt: empty pass name in --passes=%s\n", spec);
      return false;
    }
  }
  return true;
}

// Runs the passes of |spec| (already checked; NULL for none) on |*graph|,
// which may be replaced, and prints the result into |*printed|.
static tj_status_t run_pass_pipeline(const char* spec, tj_graph_t** graph,
                                     char** printed) {
  *printed = NULL;
  if (!spec || !*spec) return tj_graph_print(*graph, printed);
  tj_pass_ctx_t ctx;
  tj_pass_ctx_initialize(&ctx, tj_graph_context(*graph));
  ctx.verify_each = true;
  ctx.evaluate = tj_pass_reference_evaluator;
  tj_plan_t plan;
  tj_plan_initialize(&plan, *graph);
  tj_status_t status = tj_pipeline_run_list(&ctx, &plan, spec);
  if (!status) status = tj_plan_print(&plan, printed);
  // Hand the (possibly new) graph back; the groups and plan die here.
  *graph = plan.graph;
  plan.graph = NULL;
  tj_plan_deinitialize(&plan);
  return status;
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

static void usage(FILE* out) {
  fprintf(out,
          "usage: tj-opt [--split-input-file] [--passes=a,b,c] [FILE|-]\n"
          "Parses and verifies a .tj graph, runs passes, prints it.\n");
}

static bool parse_args(int argc, char** argv, options_t* o) {
  memset(o, 0, sizeof(*o));
  o->path = "-";
  bool have_path = false;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (strcmp(a, "--split-input-file") == 0) {
      o->split_input_file = true;
    } else if (strncmp(a, "--passes=", 9) == 0) {
      o->passes = a + 9;
      if (!check_pass_pipeline(o->passes)) return false;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    } else if (a[0] == '-' && a[1] != '\0') {
      fprintf(stderr, "tj-opt: unknown option '%s'\n", a);
      usage(stderr);
      return false;
    } else if (have_path) {
      fprintf(stderr, "tj-opt: more than one input file\n");
      return false;
    } else {
      o->path = a;
      have_path = true;
    }
  }
  return true;
}

static int g_printed;

// Parses, verifies, transforms and prints one function. |text| starts with
// |skip_lines| newlines standing in for the file before this piece.
static bool process(tj_context_t* context, const options_t* o, const char* text,
                    size_t length, const char* filename) {
  tj_graph_t* graph = NULL;
  tj_status_t status = tj_graph_parse(context, text, length, filename, &graph);
  if (!status) status = tj_ir_verify(graph);
  char* printed = NULL;
  if (!status) status = run_pass_pipeline(o->passes, &graph, &printed);
  if (status) {
    fprintf(stderr, "%s\n", tj_status_message(status));
    tj_status_free(status);
    tj_graph_destroy(graph);
    return false;
  }
  if (g_printed++) fputs("// -----\n", stdout);
  fputs(printed, stdout);
  tj_context_free_string(context, printed);
  tj_graph_destroy(graph);
  return true;
}

typedef struct piece_args_t {
  tj_context_t* context;
  const options_t* options;
  const char* filename;
} piece_args_t;

static bool process_piece(const char* text, size_t length, void* user) {
  const piece_args_t* a = user;
  return process(a->context, a->options, text, length, a->filename);
}

int main(int argc, char** argv) {
  options_t o;
  if (!parse_args(argc, argv, &o)) return 1;
  size_t length = 0;
  char* text = tj_tool_read_file("tj-opt", o.path, &length);
  if (!text) return 1;
  const char* filename = strcmp(o.path, "-") == 0 ? "<stdin>" : o.path;
  tj_context_t* context = NULL;
  tj_status_t status = tj_context_create(NULL, &context);
  if (status) {
    fprintf(stderr, "tj-opt: %s\n", tj_status_message(status));
    tj_status_free(status);
    free(text);
    return 1;
  }
  piece_args_t args = {context, &o, filename};
  bool ok = tj_tool_for_each_piece("tj-opt", text, length, o.split_input_file,
                                   process_piece, &args);
  tj_context_destroy(context);
  free(text);
  fflush(stdout);
  return ok ? 0 : 1;
}
