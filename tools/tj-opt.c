// tj-opt: reads .tj text, parses and verifies it, runs passes on it, and
// prints it back, or the kernel IR its fusion groups lower to.
//
//   tj-opt [--split-input-file] [--passes=a,b,c] [FILE|-]
//   tj-opt --emit=kir [--symbols=B=8,S=4] [--lanes=16] [--passes=..] FILE
//   either with --attention-lse-output: fuse as for a target whose attention
//   kernel also writes the attention_lse of its scores (CUDA's; lsefwd)
//
// --emit=kir runs the passes (the default pipeline unless --passes says
// otherwise; then fuse and memplan if they have not run, as a compile does)
// and lowers every fusion group (kir/lower.h), printing per group its
// kernels (tj_kir_print) with what their params and buffers stand for, or
// why the group has none (a view, or a graph break: the group runs on the
// host). Without --symbols the lowering is the generic one (symbolic sizes
// are params); with it, the one specialized to those values (every symbol
// of the graph needs one). --lanes=N adds the schedule decided for a target
// whose vectors hold N floats (kir/schedule.h): the resolved GEMM schedule
// and, where the sizes are known, the work units and scratch bytes.
//
// With --split-input-file the input is cut at lines "// -----" and every
// piece is handled on its own (errors in one do not stop the others; line
// numbers stay those of the whole file); the printed functions are joined
// by "// -----" lines. Any error goes to stderr and makes the exit status 1.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kir/lower.h"
#include "kir/schedule.h"
#include "lib/ir.h"
#include "backends/reference/reference_eval.h"
#include "lib/passes/pass.h"
#include "tensorjit.h"
#include "tools/tool_io.h"

typedef struct options_t {
  bool split_input_file;
  bool emit_kir;        // --emit=kir; false: print the graph
  const char* passes;   // NULL: none given
  const char* symbols;  // --symbols=B=8,..; NULL: the generic lowering
  int32_t lanes;        // --lanes=N; 0: no schedule printed
  // --attention-lse-output: fuse as for a target whose attention kernel
  // writes lse too (tj_pass_ctx_t.attention_lse_output; lsefwd).
  bool attention_lse_output;
  // --dual-gemm: fuse as for a target that runs two matmuls of one A as a
  // dual GEMM (tj_pass_ctx_t.dual_gemm; swiglu, issue 14), every pair the
  // pass offers.
  bool dual_gemm;
  // --attention-views: fuse as for a target whose attention kernel reads
  // q, k and v through transposes (tj_pass_ctx_t.attention_views; issue
  // 14).
  bool attention_views;
  // --concat-boxes: lower every concat as boxes, never as one select
  // (tj_pass_ctx_t.concat_boxes, TJ_CONCAT_SELECT=off; rope14, issue 14).
  bool concat_boxes;
  const char* path;  // "-" is stdin
} options_t;

//===----------------------------------------------------------------------===//
// Pass pipeline: the one place that knows about --passes. Names come from
// lib/passes/passes.def ("default" is the default pipeline); the IR is
// verified after every pass; folding evaluates on the reference interpreter.
// Once `fuse` has run, the grouped form is printed (fused regions inline).
//===----------------------------------------------------------------------===//

static bool any_dual_gemm(void* user, const tj_graph_t* graph, uint32_t a,
                          uint32_t b) {
  (void)user, (void)graph, (void)a, (void)b;
  return true;
}

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
static tj_status_t run_pass_pipeline(const options_t* o, tj_graph_t** graph,
                                     char** printed) {
  const char* spec = o->passes;
  *printed = NULL;
  if (!spec || !*spec) return tj_graph_print(*graph, printed);
  tj_pass_ctx_t ctx;
  tj_pass_ctx_initialize(&ctx, tj_graph_context(*graph));
  ctx.verify_each = true;
  ctx.attention_lse_output = o->attention_lse_output;
  ctx.attention_views = o->attention_views;
  ctx.concat_boxes = o->concat_boxes;
  if (o->dual_gemm) ctx.dual_gemm = any_dual_gemm;
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
// --emit=kir: the kernel IR of every fusion group. The one place that knows
// about --symbols and --lanes.
//===----------------------------------------------------------------------===//

// Runs the passes of |spec| (the default pipeline when NULL), then fuse and
// memplan if the list did not, as tj_compile does.
static tj_status_t run_compile_pipeline(const options_t* o, tj_plan_t* plan) {
  const char* spec = o->passes;
  tj_pass_ctx_t ctx;
  tj_pass_ctx_initialize(&ctx, tj_graph_context(plan->graph));
  ctx.verify_each = true;
  ctx.attention_lse_output = o->attention_lse_output;
  ctx.attention_views = o->attention_views;
  ctx.concat_boxes = o->concat_boxes;
  if (o->dual_gemm) ctx.dual_gemm = any_dual_gemm;
  ctx.evaluate = tj_pass_reference_evaluator;
  if (spec) {
    TJ_RETURN_IF_ERROR(tj_pipeline_run_list(&ctx, plan, spec));
  } else {
    TJ_RETURN_IF_ERROR(tj_pipeline_default(&ctx, plan));
  }
  if (!plan->fusion) {
    TJ_RETURN_IF_ERROR(tj_pipeline_run_one(&ctx, plan, &tj_pass_info_fuse));
  }
  if (!plan->memplan) {
    TJ_RETURN_IF_ERROR(tj_pipeline_run_one(&ctx, plan, &tj_pass_info_memplan));
  }
  return NULL;
}

// Parses --symbols (NAME=VALUE,...) against |graph|'s symbols into |values|
// (by symbol id). Every symbol of the graph needs a value.
static tj_status_t parse_symbols(const char* spec, const tj_graph_t* graph,
                                 int64_t* values) {
  uint32_t n = tj_dim_num_symbols(&graph->dims);
  for (uint32_t i = 0; i < n; ++i) values[i] = -1;
  for (const char* s = spec; *s;) {
    const char* eq = strchr(s, '=');
    const char* end = strchr(s, ',');
    if (!end) end = s + strlen(s);
    if (!eq || eq > end || eq == s) {
      return tj_invalid("--symbols=%s: expected NAME=VALUE, found '%.*s'", spec,
                        (int)(end - s), s);
    }
    char name[64];
    snprintf(name, sizeof(name), "%.*s", (int)(eq - s), s);
    uint32_t id;
    if (!tj_dim_find_symbol(&graph->dims, name, &id)) {
      return tj_invalid("--symbols: the graph has no symbol '%s'", name);
    }
    char* stop;
    long long v = strtoll(eq + 1, &stop, 10);
    if (stop != end || stop == eq + 1 || v < 0) {
      return tj_invalid("--symbols: '%.*s' is not a size", (int)(end - s), s);
    }
    values[id] = v;
    s = *end ? end + 1 : end;
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (values[i] < 0) {
      return tj_invalid("--symbols gives no value for symbol '%s'",
                        tj_dim_symbol_name(&graph->dims, i));
    }
  }
  return NULL;
}

// What the params and buffers of |low| stand for, one comment line each.
static void print_mapping(const tj_lowered_kernel_t* low) {
  const tj_kir_t* k = low->kernel;
  char text[256];
  for (uint32_t p = 0; p < low->num_params; ++p) {
    tj_lowered_kernel_format_dim(low, low->param_dims[p], text, sizeof(text));
    printf("// param $%s = %s\n", k->param_names[p], text);
  }
  for (uint32_t b = 0; b < low->num_buffers; ++b) {
    tj_lowered_kernel_format_dim(low, low->buffer_offset_dims[b], text,
                                 sizeof(text));
    printf("// buf %%%s = %%%u + %s\n", k->buffers[b].name,
           low->buffer_nodes[b], text);
  }
  if (low->nonempty_node != UINT32_MAX) {
    tj_lowered_kernel_format_dim(low, low->nonempty_extent, text, sizeof(text));
    printf("// requires %s > 0 (the axis of %%%u)\n", text, low->nonempty_node);
  }
}

// The schedule of |k| for |lanes|: the resolved GEMM blocking and the
// A-packing decision, and with every size known the work units.
static tj_status_t print_schedule(const tj_kir_t* k, int32_t lanes) {
  if (k->kind == TJ_KIR_GEMM) {
    tj_kir_gemm_schedule_t s;
    tj_kir_gemm_resolve(k, lanes, &s);
    printf("// schedule lanes %d: tile %dx%d mc %d nc %d kc %d, %s\n",
           (int)lanes, (int)s.tile_m, (int)s.tile_n, (int)s.mc, (int)s.nc,
           (int)s.kc,
           tj_kir_gemm_packs_a(k) ? "packs A, units n block fastest"
                                  : "A in place, units m block fastest");
  }
  if (k->num_params > 0) return NULL;
  tj_kir_launch_t launch;
  TJ_RETURN_IF_ERROR(tj_kir_launch_info(k, lanes, NULL, &launch));
  printf("// launch lanes %d: %lld units, %lld scratch bytes\n", (int)lanes,
         (long long)launch.units, (long long)launch.scratch_bytes);
  return NULL;
}

// Lowers and prints every group of |plan|. A group without kernel IR form
// (UNSUPPORTED) is a graph break, printed, not an error.
static tj_status_t emit_kir(const options_t* o, const tj_plan_t* plan) {
  const tj_graph_t* g = plan->graph;
  const tj_fusion_t* fu = plan->fusion;
  int64_t values[TJ_MAX_SYMBOLS];
  if (o->symbols) TJ_RETURN_IF_ERROR(parse_symbols(o->symbols, g, values));
  tj_allocator_t al = tj_context_allocator(tj_graph_context(g));
  tj_lowered_kernel_t* kernels =
      tj_calloc(al, TJ_LOWER_MAX_GROUP_KERNELS, sizeof(tj_lowered_kernel_t));
  if (!kernels) return tj_status_oom();
  tj_status_t status = NULL;
  for (uint32_t q = 0; !status && q < fu->num_groups; ++q) {
    const tj_group_t* grp = &fu->groups[q];
    const tj_node_t* anchor = &g->nodes[grp->anchor];
    printf("// group %u: %s (anchor %s %%%u)", q, tj_group_kind_name(grp->kind),
           tj_op_info(anchor->op)->name, grp->anchor);
    if (grp->kind == TJ_GROUP_VIEW) {
      printf(": a view, no kernel\n");
      continue;
    }
    char name[64];
    snprintf(name, sizeof(name), "%sg%u_%s", o->symbols ? "s" : "", q,
             tj_group_kind_name(grp->kind));
    uint32_t made = 0;
    status =
        tj_lower_group(g, fu, plan->memplan, q, o->symbols ? values : NULL, al,
                       name, kernels, TJ_LOWER_MAX_GROUP_KERNELS, &made);
    if (status && tj_status_code(status) == TJ_STATUS_UNSUPPORTED) {
      printf(": graph break: %s\n", tj_status_message(status));
      tj_status_free(status);
      status = NULL;
      continue;
    }
    if (!status) printf(": %u kernel%s\n", made, made == 1 ? "" : "s");
    for (uint32_t i = 0; !status && i < made; ++i) {
      print_mapping(&kernels[i]);
      char* text = NULL;
      status = tj_kir_print(kernels[i].kernel, &text);
      if (status) break;
      fputs(text, stdout);
      tj_free_string(kernels[i].kernel->allocator, text);
      if (o->lanes) status = print_schedule(kernels[i].kernel, o->lanes);
    }
    for (uint32_t i = 0; i < made; ++i) {
      tj_lowered_kernel_deinitialize(&kernels[i]);
    }
  }
  tj_free(al, kernels,
          sizeof(tj_lowered_kernel_t) * TJ_LOWER_MAX_GROUP_KERNELS);
  return status;
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

static void usage(FILE* out) {
  fprintf(
      out,
      "usage: tj-opt [--split-input-file] [--passes=a,b,c] [FILE|-]\n"
      "       tj-opt --emit=kir [--symbols=B=8,..] [--lanes=N] "
      "[--passes=a,b,c] [FILE|-]\n"
      "       either with --attention-lse-output (fuse as for a target "
      "whose\n"
      "       attention kernel writes attention_lse too), --dual-gemm\n"
      "       (fuse as for a target that runs two matmuls of one A as one\n"
      "       dual gemm) and --attention-views (fuse as for a target whose\n"
      "       attention kernel reads q, k, v through transposes)\n"
      "       and --concat-boxes (cut every concat into boxes, never one\n"
      "       select)\n"
      "Parses and verifies a .tj graph, runs passes, prints it (or, with\n"
      "--emit=kir, the kernel IR of every fusion group).\n");
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
    } else if (strcmp(a, "--attention-lse-output") == 0) {
      o->attention_lse_output = true;
    } else if (strcmp(a, "--dual-gemm") == 0) {
      o->dual_gemm = true;
    } else if (strcmp(a, "--attention-views") == 0) {
      o->attention_views = true;
    } else if (strcmp(a, "--concat-boxes") == 0) {
      o->concat_boxes = true;
    } else if (strcmp(a, "--emit=kir") == 0) {
      o->emit_kir = true;
    } else if (strncmp(a, "--symbols=", 10) == 0) {
      o->symbols = a + 10;
    } else if (strncmp(a, "--lanes=", 8) == 0) {
      char* end;
      long lanes = strtol(a + 8, &end, 10);
      if (*end || end == a + 8 || lanes < 1 || lanes > 64) {
        fprintf(stderr, "tj-opt: --lanes wants 1..64 floats, not '%s'\n",
                a + 8);
        return false;
      }
      o->lanes = (int32_t)lanes;
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
  if (!o->emit_kir && (o->symbols || o->lanes)) {
    fprintf(stderr, "tj-opt: --symbols and --lanes go with --emit=kir\n");
    return false;
  }
  return true;
}

static int g_printed;

// Parses, verifies, transforms and prints one function. |text| starts with
// |skip_lines| newlines standing in for the file before this piece.
static bool process(tj_context_t* context, const options_t* o, const char* text,
                    size_t length, const char* filename) {
  tj_graph_t* graph = NULL;
  tj_status_t status =
      tj_tool_load_graph(context, text, length, filename, &graph);
  if (!status) status = tj_ir_verify(graph);
  char* printed = NULL;
  if (!status && !o->emit_kir) {
    status = run_pass_pipeline(o, &graph, &printed);
  } else if (!status) {
    if (g_printed++) fputs("// -----\n", stdout);
    tj_plan_t plan;
    tj_plan_initialize(&plan, graph);
    graph = NULL;  // the plan owns it
    status = run_compile_pipeline(o, &plan);
    if (!status) status = emit_kir(o, &plan);
    tj_plan_deinitialize(&plan);
  }
  if (status) {
    fprintf(stderr, "%s\n", tj_status_message(status));
    tj_status_free(status);
    tj_graph_destroy(graph);
    return false;
  }
  if (printed) {
    if (g_printed++) fputs("// -----\n", stdout);
    fputs(printed, stdout);
    tj_context_free_string(context, printed);
  }
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
  bool ok = tj_tool_for_each_piece(
      "tj-opt", text, length, o.split_input_file && !tj_tool_is_onnx(o.path),
      process_piece, &args);
  tj_context_destroy(context);
  free(text);
  fflush(stdout);
  return ok ? 0 : 1;
}
