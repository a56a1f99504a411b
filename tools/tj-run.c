// tj-run: runs tools over one .tj graph. Implemented so far:
//
//   tj-run --scoreboard [--func NAME] FILE.tj [--sym NAME=VALUE]...
//
// A file may hold several functions separated by lines "// -----" (as the
// lit tests do): each is handled in turn under a "== @name ==" heading, or
// only the one named by --func.
//
// --scoreboard prints, per pipeline stage (eager, canonicalize, decompose,
// fuse, memplan), the kernels the graph would launch, the bytes they move, the
// memory held at the peak, graph breaks and the share of nodes compiled,
// for the given symbol values (tj_graph_scoreboard in tj_optimize.h).
// "moved" is bytes read + written, also as a multiple of the activation
// (the bytes of the graph's outputs).
//
//   tj-run --grad [--scoreboard] [--print] [--recompute=LEVEL] FILE.tj
//          [--sym NAME=VALUE]...
//
// differentiates every float output with respect to every float input
// (tj_graph_grad, tj_autodiff.h) and partitions the joint graph into a
// forward and a backward graph (tj_graph_partition; LEVEL is none,
// pointwise (the default), reductions or all). --print prints the joint,
// forward and backward graphs and what the partition saved. --scoreboard
// prints both halves' scoreboards and the training step eager against
// optimized: "eager" runs the save-everything partition op by op (what
// eager autograd does), "optimized" the min-cut partition after the whole
// pipeline (fused, memory planned).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorjit.h"
#include "tools/tool_io.h"

enum { kMaxSyms = 64 };

#define TJ_RETURN_IF_ERROR_TOOL(expr) \
  do {                                \
    tj_status_t status_ = (expr);     \
    if (status_) return status_;      \
  } while (0)

static void usage(FILE* out) {
  fprintf(out,
          "usage: tj-run --scoreboard [--func NAME] FILE.tj "
          "[--sym NAME=VALUE]...\n"
          "       tj-run --grad [--scoreboard] [--print] [--recompute=LEVEL]"
          " [--func NAME] FILE.tj [--sym NAME=VALUE]...\n"
          "Prints the optimizer's scoreboard for a .tj graph: kernels,\n"
          "bytes moved and peak memory per pipeline stage. With --grad,\n"
          "for its forward and backward graphs (LEVEL: none, pointwise,\n"
          "reductions, all). A file of several functions separated by\n"
          "lines '// -----' is handled function by function, or only\n"
          "@NAME with --func NAME.\n");
}

static double mb(int64_t bytes) { return (double)bytes / 1e6; }

static void print_symbols(int32_t num_syms, char** names,
                          const int64_t* values) {
  for (int32_t i = 0; i < num_syms; ++i) {
    printf(" %s=%lld", names[i], (long long)values[i]);
  }
}

static void print_scoreboard(const tj_graph_t* graph, int32_t num_syms,
                             char** names, const int64_t* values,
                             const tj_scoreboard_t* sb) {
  (void)graph;
  printf("scoreboard");
  print_symbols(num_syms, names, values);
  printf("\nactivation (outputs) %.2f MB, inputs and constants %.2f MB\n\n",
         mb(sb->activation_bytes), mb(sb->input_bytes));
  printf("%-13s %6s %8s %10s %10s %10s %8s %10s %7s %9s\n", "stage", "nodes",
         "kernels", "read MB", "write MB", "moved MB", "x act", "peak MB",
         "breaks", "compiled");
  for (int s = 0; s < TJ_STAGE_COUNT_; ++s) {
    const tj_scoreboard_row_t* r = &sb->rows[s];
    int64_t moved = r->bytes_read + r->bytes_written;
    double ratio = sb->activation_bytes
                       ? (double)moved / (double)sb->activation_bytes
                       : 0.0;
    printf(
        "%-13s %6lld %8lld %10.2f %10.2f %10.2f %8.2f %10.2f %7lld %8.0f%%\n",
        tj_stage_name(r->stage), (long long)r->nodes, (long long)r->kernels,
        mb(r->bytes_read), mb(r->bytes_written), mb(moved), ratio,
        mb(r->peak_bytes), (long long)r->graph_breaks, r->percent_compiled);
  }
  printf("\nmemplan arena %.2f MB (most intermediates live at once: %.2f MB)\n",
         mb(sb->arena_bytes), mb(sb->live_peak_bytes));
}

//===--- --grad: the training step ---===//

typedef struct grad_args_t {
  bool print;
  bool scoreboard;
  tj_recompute_t recompute;
  int32_t num_syms;
  char** names;
  const int64_t* values;
} grad_args_t;

static const char* recompute_name(tj_recompute_t level) {
  static const char* const kNames[] = {"none", "pointwise", "reductions",
                                       "all"};
  return (unsigned)level < 4 ? kNames[level] : "?";
}

static bool parse_recompute(const char* text, tj_recompute_t* out) {
  for (int level = 0; level < 4; ++level) {
    if (strcmp(text, recompute_name((tj_recompute_t)level)) == 0) {
      *out = (tj_recompute_t)level;
      return true;
    }
  }
  return false;
}

static tj_status_t print_graph(const char* title, const tj_graph_t* graph) {
  char* text = NULL;
  tj_status_t status = tj_graph_print(graph, &text);
  if (!status) printf("// --- %s ---\n%s", title, text);
  tj_context_free_string(tj_graph_context(graph), text);
  return status;
}

static void print_saved(const char* what, const tj_partition_stats_t* st) {
  printf(
      "%s: %d activations (%lld bytes, %lld of them forward outputs), "
      "%d inputs read again (%lld bytes), %d nodes recomputed\n",
      what, (int)st->num_saved, (long long)st->saved_bytes,
      (long long)st->saved_output_bytes, (int)st->num_saved_inputs,
      (long long)st->saved_input_bytes, (int)st->num_recomputed);
}

// The forward and backward of |joint| at |level| (both NULL on failure).
static tj_status_t split(const tj_graph_t* graph, const tj_graph_t* joint,
                         const grad_args_t* a, tj_recompute_t level,
                         tj_graph_t** fwd, tj_graph_t** bwd,
                         tj_partition_stats_t* stats) {
  tj_partition_options_t options;
  tj_partition_options_initialize(&options);
  options.recompute = level;
  options.num_symbols = a->num_syms;
  options.symbol_names = (const char* const*)a->names;
  options.symbol_values = a->values;
  return tj_graph_partition(joint, tj_graph_num_inputs(graph),
                            tj_graph_num_outputs(graph), &options, fwd, bwd,
                            stats);
}

static int64_t moved(const tj_scoreboard_row_t* r) {
  return r->bytes_read + r->bytes_written;
}

static tj_status_t grad_scoreboard(const grad_args_t* a, const tj_graph_t* fwd,
                                   const tj_graph_t* bwd,
                                   const tj_graph_t* eager_fwd,
                                   const tj_graph_t* eager_bwd,
                                   const tj_partition_stats_t* st,
                                   const tj_partition_stats_t* eager_st) {
  tj_scoreboard_t sb[4];  // forward, backward, eager forward, eager backward
  const tj_graph_t* graphs[4] = {fwd, bwd, eager_fwd, eager_bwd};
  const char* const* names = (const char* const*)a->names;
  for (int i = 0; i < 4; ++i) {
    TJ_RETURN_IF_ERROR_TOOL(
        tj_graph_scoreboard(graphs[i], a->num_syms, names, a->values, &sb[i]));
  }
  printf("training step (forward + backward), recompute=%s",
         recompute_name(a->recompute));
  print_symbols(a->num_syms, a->names, a->values);
  printf("\n");
  print_saved("saved (min cut)", st);
  print_saved("saved (save all, eager)", eager_st);
  printf("\n--- forward ---\n");
  print_scoreboard(fwd, a->num_syms, a->names, a->values, &sb[0]);
  printf("\n--- backward ---\n");
  print_scoreboard(bwd, a->num_syms, a->names, a->values, &sb[1]);
  const tj_scoreboard_row_t* opt_f = &sb[0].rows[TJ_STAGE_MEMPLAN];
  const tj_scoreboard_row_t* opt_b = &sb[1].rows[TJ_STAGE_MEMPLAN];
  const tj_scoreboard_row_t* eag_f = &sb[2].rows[TJ_STAGE_EAGER];
  const tj_scoreboard_row_t* eag_b = &sb[3].rows[TJ_STAGE_EAGER];
  printf(
      "\n--- eager (save all, op by op) vs optimized (min cut, fused, "
      "planned) ---\n");
  printf("%-9s %8s %8s %11s %11s %10s %10s %11s %11s\n", "", "kernels",
         "kernels", "moved MB", "moved MB", "peak MB", "peak MB", "saved MB",
         "saved MB");
  printf("%-9s %8s %8s %11s %11s %10s %10s %11s %11s\n", "", "eager", "opt",
         "eager", "opt", "eager", "opt", "eager", "opt");
  printf("%-9s %8lld %8lld %11.2f %11.2f %10.2f %10.2f %11.2f %11.2f\n",
         "forward", (long long)eag_f->kernels, (long long)opt_f->kernels,
         mb(moved(eag_f)), mb(moved(opt_f)), mb(eag_f->peak_bytes),
         mb(opt_f->peak_bytes), mb(eager_st->saved_bytes), mb(st->saved_bytes));
  printf("%-9s %8lld %8lld %11.2f %11.2f %10.2f %10.2f\n", "backward",
         (long long)eag_b->kernels, (long long)opt_b->kernels, mb(moved(eag_b)),
         mb(moved(opt_b)), mb(eag_b->peak_bytes), mb(opt_b->peak_bytes));
  int64_t eag_peak = eag_f->peak_bytes > eag_b->peak_bytes ? eag_f->peak_bytes
                                                           : eag_b->peak_bytes;
  int64_t opt_peak = opt_f->peak_bytes > opt_b->peak_bytes ? opt_f->peak_bytes
                                                           : opt_b->peak_bytes;
  printf("%-9s %8lld %8lld %11.2f %11.2f %10.2f %10.2f\n", "step",
         (long long)(eag_f->kernels + eag_b->kernels),
         (long long)(opt_f->kernels + opt_b->kernels),
         mb(moved(eag_f) + moved(eag_b)), mb(moved(opt_f) + moved(opt_b)),
         mb(eag_peak), mb(opt_peak));
  printf(
      "(step peak: the larger half's; each half counts the saved "
      "activations it writes or reads)\n");
  return NULL;
}

static tj_status_t run_grad(const tj_graph_t* graph, const grad_args_t* a) {
  tj_graph_t* joint = NULL;
  tj_graph_t* g[4] = {NULL, NULL, NULL, NULL};
  tj_partition_stats_t st, eager_st;
  tj_status_t status = tj_graph_grad(graph, 0, NULL, 0, NULL, &joint);
  if (!status) status = split(graph, joint, a, a->recompute, &g[0], &g[1], &st);
  if (!status && a->print) {
    status = print_graph("joint", joint);
    if (!status) status = print_graph("forward", g[0]);
    if (!status) status = print_graph("backward", g[1]);
    if (!status) {
      printf("// recompute=%s", recompute_name(a->recompute));
      print_symbols(a->num_syms, a->names, a->values);
      printf("\n// ");
      print_saved("saved", &st);
    }
  }
  if (!status && a->scoreboard) {
    status = split(graph, joint, a, TJ_RECOMPUTE_NONE, &g[2], &g[3], &eager_st);
    if (!status)
      status = grad_scoreboard(a, g[0], g[1], g[2], g[3], &st, &eager_st);
  }
  for (int i = 0; i < 4; ++i) tj_graph_destroy(g[i]);
  tj_graph_destroy(joint);
  return status;
}

typedef struct run_args_t {
  tj_context_t* context;
  const char* path;
  const char* func;  // NULL: every function
  bool multiple;     // the file has several pieces: print headings
  bool grad;
  bool scoreboard;
  grad_args_t grad_args;
  int32_t matched;  // functions handled
} run_args_t;

// Handles one function of the file.
static bool run_piece(const char* text, size_t length, void* user) {
  run_args_t* a = user;
  tj_graph_t* graph = NULL;
  tj_status_t status =
      tj_tool_load_graph(a->context, text, length, a->path, &graph);
  if (!status && a->func && strcmp(tj_graph_name(graph), a->func) != 0) {
    tj_graph_destroy(graph);
    return true;
  }
  if (!status) {
    if (a->multiple) {
      printf("%s== @%s ==\n", a->matched ? "\n" : "", tj_graph_name(graph));
    }
    ++a->matched;
  }
  if (!status && a->grad) {
    status = run_grad(graph, &a->grad_args);
  } else if (!status) {
    tj_scoreboard_t sb;
    const grad_args_t* g = &a->grad_args;
    status = tj_graph_scoreboard(graph, g->num_syms,
                                 (const char* const*)g->names, g->values, &sb);
    if (!status) print_scoreboard(graph, g->num_syms, g->names, g->values, &sb);
  }
  tj_graph_destroy(graph);
  if (status) {
    fprintf(stderr, "tj-run: %s\n", tj_status_message(status));
    tj_status_free(status);
    return false;
  }
  return true;
}

// Whether |text| has a "// -----" line, i.e. several functions.
static bool has_pieces(const char* text, size_t length) {
  for (size_t i = 0; i + 8 <= length; ++i) {
    if ((i == 0 || text[i - 1] == '\n') && memcmp(text + i, "// -----", 8) == 0)
      return true;
  }
  return false;
}

int main(int argc, char** argv) {
  const char* path = NULL;
  const char* func = NULL;
  bool scoreboard = false, grad = false, print = false;
  tj_recompute_t recompute = TJ_RECOMPUTE_POINTWISE;
  char* names[kMaxSyms];
  int64_t values[kMaxSyms];
  int32_t num_syms = 0;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (strcmp(a, "--scoreboard") == 0) {
      scoreboard = true;
    } else if (strcmp(a, "--grad") == 0) {
      grad = true;
    } else if (strcmp(a, "--print") == 0) {
      print = true;
    } else if (strcmp(a, "--func") == 0 || strncmp(a, "--func=", 7) == 0) {
      func = a[6] == '=' ? a + 7 : (i + 1 < argc ? argv[++i] : NULL);
      if (!func || !*func) {
        fprintf(stderr, "tj-run: --func wants a function name\n");
        return 1;
      }
      if (func[0] == '@') ++func;
    } else if (strncmp(a, "--recompute=", 12) == 0) {
      if (!parse_recompute(a + 12, &recompute)) {
        fprintf(stderr,
                "tj-run: --recompute wants none, pointwise, reductions or "
                "all, got '%s'\n",
                a + 12);
        return 1;
      }
    } else if (strcmp(a, "--sym") == 0 || strncmp(a, "--sym=", 6) == 0) {
      const char* spec =
          a[5] == '=' ? a + 6 : (i + 1 < argc ? argv[++i] : NULL);
      const char* eq = spec ? strchr(spec, '=') : NULL;
      char* end = NULL;
      long long v = eq ? strtoll(eq + 1, &end, 10) : 0;
      if (!eq || eq == spec || !end || *end || end == eq + 1 ||
          num_syms == kMaxSyms) {
        fprintf(stderr, "tj-run: --sym wants NAME=VALUE, got '%s'\n",
                spec ? spec : "");
        return 1;
      }
      names[num_syms] = strndup(spec, (size_t)(eq - spec));
      values[num_syms++] = v;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (a[0] == '-' && a[1] != '\0') {
      fprintf(stderr, "tj-run: unknown option '%s'\n", a);
      usage(stderr);
      return 1;
    } else if (path) {
      fprintf(stderr, "tj-run: more than one input file\n");
      return 1;
    } else {
      path = a;
    }
  }
  if ((!scoreboard && !grad) || (print && !grad) || !path) {
    usage(stderr);
    return 1;
  }
  size_t length = 0;
  char* text = tj_tool_read_file("tj-run", path, &length);
  if (!text) return 1;
  tj_context_t* context = NULL;
  tj_status_t status = tj_context_create(NULL, &context);
  int rc = 0;
  if (status) {
    fprintf(stderr, "tj-run: %s\n", tj_status_message(status));
    tj_status_free(status);
    rc = 1;
  } else {
    run_args_t args = {
        .context = context,
        .path = path,
        .func = func,
        .multiple = !tj_tool_is_onnx(path) && has_pieces(text, length) && !func,
        .grad = grad,
        .scoreboard = scoreboard,
        .grad_args = {print, scoreboard, recompute, num_syms, names, values}};
    if (!tj_tool_for_each_piece("tj-run", text, length, !tj_tool_is_onnx(path),
                                run_piece, &args)) {
      rc = 1;
    } else if (func && args.matched == 0) {
      fprintf(stderr, "tj-run: %s has no function @%s\n", path, func);
      rc = 1;
    }
  }
  tj_context_destroy(context);
  for (int32_t i = 0; i < num_syms; ++i) free(names[i]);
  free(text);
  return rc;
}
