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
// --quantize=int8|int4[:GROUP] (issue 17) quantizes the graph's constant
// matmul and linear weights first (tj_graph_quantize_weights: int8 per
// output channel, int4 per group of GROUP = 32, 64 or 128 rows, 128 by
// default); with --scoreboard it prints the float graph's scoreboard,
// then the quantized one's, so the weight bytes are seen to fall. The
// other modes run the quantized graph.
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
//
//   tj-run --profile[=RUNS] [--scoreboard] FILE.tj [--sym NAME=VALUE]...
//
// compiles each function for x86 (its compile time per stage, from
// tj_executable_stats) and profiles RUNS runs (20) on inputs of the --sym
// shapes: the top-15 table of tj_executable_profile.
//
//   tj-run --diagnose [--profile=RUNS] [--target=T] FILE.tj [--sym
//   NAME=VALUE]...
//
// answers seed 003's diagnostic ladder with measurements, each with the
// table's verdict: launch bound (the run at the --sym values and with the
// first symbol doubled; host time against kernel time), fusible traffic
// (kernels and bytes, eager against compiled), recompiles, graph breaks,
// one op dominating (the profile's top non-GEMM kernel), collectives (none
// on one device), fragmentation (the arena against its live peak), and
// whether compiling pays: the run against the same graph compiled unfused
// (one op a kernel), and the break-even number of runs.
//
//   tj-run --run [--target=x86|reference|cuda] [--reps=N] [--seed=N]
//          [--input NAME=FILE.npy]... [--inputs FILE.npz] FILE.tj
//          [--sym NAME=VALUE]...
//
// compiles each function for the target and runs it: on random inputs
// (seeded; the symbols' values from --sym; tj_verify's mix of values:
// uniform floats with 1 in 16 an edge value: +-0, denormals, large
// magnitudes, and with --nonfinite NaN and infinities; integers in
// [-4, 4]) or on the given .npy files (numpy's format, version 1-3,
// C order; dtypes <f4 <f8 <f2 |i1 <i4 <i8 |b1 |u1, one file per input, by
// input name) and the members of a .npz file (np.savez's, or the inputs
// file tj-reduce writes: one NAME.npy member per input; tools/tool_npz.h). It
// prints each output (dtype, shape, first values, min, max, mean, NaN and inf
// counts), the run time (median of --reps runs after one warm-up run; default
// 10) and the executable's stats.
//
//   tj-run --verify [same options] FILE.tj [--sym NAME=VALUE]...
//
// checks each function's executable against the reference interpreter at
// every fusion-group boundary (tj_verify, tj_verify.h) and prints the
// report; exit status 2 when a verdict is neither clean nor drift.
//
//   tj-run --ladder [same options] FILE.tj [--sym NAME=VALUE]...
//
// climbs the diagnostic ladder (tj_verify_ladder: the passes on the
// reference, unfused, fused without autotuning, the full pipeline,
// specialized), each rung on the same inputs against the reference, and
// prints which rung diverges first and what to blame; for the passes, the
// pass and the first bad rewrite (TJ_BISECT). --bisect=N|PASS:N compiles
// --run and --verify with that rewrite budget (--ladder: every rung,
// the decomposed one's replay included), --specialize=POLICY with
// that policy (a specialized program's dumps go to TJ_DUMP_DIR as
// <graph>.B=3.<kernel>.*). Exit status 2 when a rung diverges.

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/verify.h"
#include "lib/dtype.h"
#include "lib/ir.h"
#include "tensorjit.h"
#include "tools/tool_io.h"
#include "tools/tool_npz.h"

enum { kMaxSyms = 64 };

#define TJ_RETURN_IF_ERROR_TOOL(expr) \
  do {                                \
    tj_status_t status_ = (expr);     \
    if (status_) return status_;      \
  } while (0)

static void usage(FILE* out) {
  fprintf(
      out,
      "usage: tj-run --scoreboard [--quantize=int8|int4[:GROUP]] [--func "
      "NAME] FILE.tj [--sym NAME=VALUE]...\n"
      "       tj-run --grad [--scoreboard] [--print] [--recompute=LEVEL]"
      " [--func NAME] FILE.tj [--sym NAME=VALUE]...\n"
      "       tj-run --profile[=RUNS] [--target=x86|reference|cuda]"
      " [--scoreboard] [--func NAME] FILE.tj [--sym NAME=VALUE]...\n"
      "       tj-run --diagnose [--profile=RUNS] [--specialize=POLICY]"
      " [--target=x86|reference|cuda] [--func NAME] FILE.tj"
      " [--sym NAME=VALUE]...\n"
      "Prints the optimizer's scoreboard for a .tj graph: kernels,\n"
      "bytes moved and peak memory per pipeline stage. With --grad,\n"
      "for its forward and backward graphs (LEVEL: none, pointwise,\n"
      "reductions, all). A file of several functions separated by\n"
      "lines '// -----' is handled function by function, or only\n"
      "@NAME with --func NAME. --quantize=int8|int4[:GROUP] quantizes\n"
      "the constant matmul weights first (int8 per channel, int4 per\n"
      "group of 32, 64 or 128 rows) and, with --scoreboard, prints the\n"
      "float and the quantized graph's scoreboards.\n"
      "       tj-run --run|--verify|--ladder [--target=x86|reference|cuda]"
      " [--reps=N] [--seed=N]\n"
      "              [--nonfinite] [--no-edge-values] [--bisect=SPEC]"
      " [--specialize=POLICY]"
      " [--input NAME=FILE.npy]... [--inputs FILE.npz]"
      " [--func NAME]\n"
      "              FILE.tj [--sym NAME=VALUE]...\n"
      "--run compiles and runs each function on random inputs (seeded;\n"
      "floats uniform in [-2, 2] with 1 in 16 an edge value: +-0,\n"
      "denormals, large magnitudes; NaN and infinities with\n"
      "--nonfinite; integers in [-4, 4]) or on .npy files given per\n"
      "input name (numpy format, C order; <f4 <f8 <f2 |i1 <i4 <i8 |b1 |u1)\n"
      "or as the NAME.npy members of one .npz file (--inputs),\n"
      "printing each output's shape, first values, min, max and mean,\n"
      "the median run time of --reps runs (default 10) and the stats.\n"
      "--verify checks each executable against the reference\n"
      "interpreter at every fusion-group boundary (tj_verify) and\n"
      "prints the report; exit status 2 when a verdict is neither\n"
      "clean nor drift.\n"
      "--ladder climbs tj_verify_ladder's rungs (decomposed, unfused,\n"
      "fused, full, specialized) on the same inputs, names the first\n"
      "that diverges and what to blame, bisecting a wrong pass to its\n"
      "first bad rewrite; exit status 2 when a rung diverges.\n"
      "--bisect=N|PASS:N compiles with that TJ_BISECT rewrite budget\n"
      "(with --ladder, every rung climbs under it).\n");
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
  // The last two columns split moved MB into weights (constants read, as
  // stored: quantized weights count their bytes) and activations.
  printf("%-13s %6s %8s %10s %10s %10s %8s %10s %7s %9s %10s %10s\n", "stage",
         "nodes", "kernels", "read MB", "write MB", "moved MB", "x act",
         "peak MB", "breaks", "compiled", "weight MB", "act MB");
  for (int s = 0; s < TJ_STAGE_COUNT_; ++s) {
    const tj_scoreboard_row_t* r = &sb->rows[s];
    int64_t moved = r->bytes_read + r->bytes_written;
    double ratio = sb->activation_bytes
                       ? (double)moved / (double)sb->activation_bytes
                       : 0.0;
    printf(
        "%-13s %6lld %8lld %10.2f %10.2f %10.2f %8.2f %10.2f %7lld %8.0f%% "
        "%10.2f %10.2f\n",
        tj_stage_name(r->stage), (long long)r->nodes, (long long)r->kernels,
        mb(r->bytes_read), mb(r->bytes_written), mb(moved), ratio,
        mb(r->peak_bytes), (long long)r->graph_breaks, r->percent_compiled,
        mb(r->weight_bytes_read), mb(moved - r->weight_bytes_read));
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

//===--- --profile: compile stages and where a run's time goes ---===//

// Profiles |exe| (compiled from |graph|) |runs| times on inputs of the
// shapes the symbols |names| = |values| give (floats in [-1, 1), integers
// and bools 0). On success |*out| is the caller's.
static tj_status_t profile_at(const tj_graph_t* graph, tj_executable_t* exe,
                              int32_t num_syms, char** names,
                              const int64_t* values, int32_t runs,
                              tj_profile_report_t** out) {
  int64_t sym[TJ_MAX_SYMBOLS];
  uint32_t ns = tj_dim_num_symbols(&graph->dims);
  for (uint32_t i = 0; i < ns && i < TJ_MAX_SYMBOLS; ++i) {
    sym[i] = -1;
    for (int32_t j = 0; j < num_syms; ++j) {
      if (strcmp(names[j], tj_dim_symbol_name(&graph->dims, i)) == 0) {
        sym[i] = values[j];
      }
    }
  }
  int32_t ni = tj_graph_num_inputs(graph), no = tj_graph_num_outputs(graph);
  tj_tensor_t* tensors = calloc((size_t)(ni + no + 1), sizeof(tj_tensor_t));
  int64_t* shapes = calloc((size_t)(ni + no + 1) * TJ_MAX_RANK, 8);
  void** data = calloc((size_t)(ni + no + 1), sizeof(void*));
  tj_status_t status =
      tensors && shapes && data
          ? NULL
          : tj_status_make(TJ_STATUS_OUT_OF_MEMORY, "tj-run: out of memory");
  uint32_t seed = 1;
  for (int32_t i = 0; i < ni + no && !status; ++i) {
    bool in = i < ni;
    int64_t* shape = shapes + (size_t)i * TJ_MAX_RANK;
    tj_dtype_t dt;
    int32_t rank;
    if (in) {
      uint32_t node = graph->inputs[i];
      status = tj_ir_concrete_dims(graph, node, sym, shape);
      dt = graph->nodes[node].dtype;
      rank = graph->nodes[node].rank;
    } else {
      status =
          tj_executable_output_shape(exe, tensors, ni, i - ni, &rank, shape);
      dt = graph->nodes[graph->outputs[i - ni].node].dtype;
    }
    if (status) break;
    int64_t n = 1;
    for (int32_t d = 0; d < rank; ++d) n *= shape[d];
    size_t bytes = (size_t)n * tj_dtype_size(dt);
    data[i] = calloc(bytes ? bytes : 1, 1);
    if (!data[i]) {
      status = tj_status_make(TJ_STATUS_OUT_OF_MEMORY, "tj-run: out of memory");
      break;
    }
    for (int64_t e = 0; in && dt == TJ_DTYPE_F32 && e < n; ++e) {
      seed = seed * 1664525u + 1013904223u;
      ((float*)data[i])[e] = (float)(seed >> 8) / 8388608.0f - 1.0f;
    }
    tensors[i] = tj_tensor_make(data[i], dt, rank, shape);
  }
  if (!status) {
    status =
        tj_executable_profile(exe, tensors, ni, tensors + ni, no, runs, out);
  }
  for (int32_t i = 0; data && i < ni + no; ++i) free(data[i]);
  free(data);
  free(shapes);
  free(tensors);
  return status;
}

static void print_compile_stages(const tj_executable_t* exe) {
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  printf(
      "compile %.1f ms: passes %.1f, lowering %.1f, LLVM %.1f, ptxas "
      "%.1f, tuning %.1f, cache load %.1f; %d kernels, %d graph breaks\n",
      st.compile_ms, st.passes_ms, st.lowering_ms, st.llvm_ms, st.ptxas_ms,
      st.tuning_ms, st.cache_load_ms, (int)st.num_kernels,
      (int)st.num_graph_breaks);
}

// The compile stages and the profile of |graph| compiled for x86 and run
// |runs| times on inputs of the --sym shapes.
static tj_status_t run_profile(const tj_graph_t* graph, int32_t num_syms,
                               char** names, const int64_t* values,
                               int32_t runs,
                               const tj_compile_options_t* options) {
  tj_executable_t* exe = NULL;
  tj_status_t status = tj_compile(graph, options, &exe);
  tj_profile_report_t* report = NULL;
  if (!status) {
    status = profile_at(graph, exe, num_syms, names, values, runs, &report);
  }
  if (!status) {
    print_compile_stages(exe);
    size_t need = tj_profile_report_format(report, 15, NULL, 0);
    char* text = malloc(need + 1);
    if (text) {
      tj_profile_report_format(report, 15, text, need + 1);
      printf("profile");
      print_symbols(num_syms, names, values);
      printf("\n%s", text);
      free(text);
    }
  }
  tj_profile_report_destroy(report);
  tj_executable_release(exe);
  return status;
}

//===--- --diagnose: seed 003's ladder, measured ---===//

// tj_diagnose's report for |graph| at the --sym values (and the first
// symbol doubled): launch bound, fusible traffic, recompiles, graph
// breaks, one op dominating, collectives, fragmentation, and whether
// compiling pays.
static tj_status_t run_diagnose(const tj_graph_t* graph, int32_t num_syms,
                                char** names, const int64_t* values,
                                int32_t runs,
                                const tj_compile_options_t* options) {
  tj_diagnose_report_t* report = NULL;
  TJ_RETURN_IF_ERROR_TOOL(tj_diagnose(graph, options, num_syms,
                                      (const char* const*)names, values, runs,
                                      &report));
  printf("%s", report->text);
  tj_diagnose_report_destroy(report);
  return NULL;
}

//===--- --run and --verify: executing a graph ---===//

enum { kMaxGiven = 64 };

typedef struct exec_args_t {
  bool run, verify, ladder;
  const char* bisect;          // --bisect=SPEC: tj_compile_options_t.bisect
  tj_specialize_t specialize;  // --specialize=POLICY
  tj_target_t target;
  int32_t reps;
  uint64_t seed;
  bool nonfinite, edge_values;
  int32_t num_given;
  char* given_names[kMaxGiven];
  const char* given_paths[kMaxGiven];
  const char* inputs_npz;  // --inputs FILE.npz
  int verdict_failures;    // verdicts neither clean nor drift
} exec_args_t;

static const char* target_name(tj_target_t t) {
  return t == TJ_TARGET_REFERENCE ? "reference"
         : t == TJ_TARGET_CUDA    ? "cuda"
                                  : "x86";
}

static bool parse_target(const char* text, tj_target_t* out) {
  static const tj_target_t kTargets[] = {TJ_TARGET_X86, TJ_TARGET_REFERENCE,
                                         TJ_TARGET_CUDA};
  for (size_t i = 0; i < sizeof(kTargets) / sizeof(kTargets[0]); ++i) {
    if (strcmp(text, target_name(kTargets[i])) == 0) {
      *out = kTargets[i];
      return true;
    }
  }
  return false;
}

typedef struct given_t {
  tj_tensor_t tensors[kMaxGiven];
  tj_tool_array_t arrays[kMaxGiven];  // the --input files
  tj_tool_array_t* npz;               // the --inputs file's members
  int32_t num_npz;
} given_t;

static void given_free(given_t* g) {
  for (int i = 0; i < kMaxGiven; ++i) free(g->arrays[i].data);
  tj_tool_arrays_free(g->npz, g->num_npz);
}

// The inputs of |graph| by name: from the --input files, else the
// --inputs file's members.
static tj_status_t load_given(const tj_graph_t* graph, const exec_args_t* e,
                              given_t* out) {
  int32_t n = tj_graph_num_inputs(graph);
  if (n > kMaxGiven)
    return tj_status_make(TJ_STATUS_UNSUPPORTED, "more than %d inputs",
                          kMaxGiven);
  if (e->inputs_npz) {
    TJ_RETURN_IF_ERROR_TOOL(
        tj_tool_npz_read(e->inputs_npz, &out->npz, &out->num_npz));
  }
  for (int32_t i = 0; i < n; ++i) {
    const char* name = tj_graph_input_name(graph, i);
    int32_t k = 0;
    while (k < e->num_given && strcmp(e->given_names[k], name) != 0) ++k;
    if (k < e->num_given) {
      TJ_RETURN_IF_ERROR_TOOL(
          tj_tool_npy_read(e->given_paths[k], &out->arrays[i]));
      out->tensors[i] = out->arrays[i].tensor;
      continue;
    }
    k = 0;
    while (k < out->num_npz && strcmp(out->npz[k].name, name) != 0) ++k;
    if (k == out->num_npz) {
      return tj_status_make(TJ_STATUS_INVALID_ARGUMENT,
                            "@%s: no --input %s=FILE.npy%s%s (give every "
                            "input or none)",
                            tj_graph_name(graph), name,
                            e->inputs_npz ? " and no member of " : "",
                            e->inputs_npz ? e->inputs_npz : "");
    }
    out->tensors[i] = out->npz[k].tensor;
  }
  return NULL;
}

static int compare_doubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static void print_output(const char* name, const tj_tensor_t* t) {
  int64_t numel = 1;
  printf("output \"%s\" %s[", name, tj_dtype_name(t->dtype));
  for (int32_t d = 0; d < t->rank; ++d) {
    printf("%s%lld", d ? "," : "", (long long)t->shape[d]);
    numel *= t->shape[d];
  }
  printf("]:");
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  int64_t finite = 0, nans = 0, infs = 0;
  for (int64_t k = 0; k < numel; ++k) {
    double v = tj_dtype_is_float(t->dtype) || tj_dtype_is_f8(t->dtype)
                   ? tj_load_f64(t->dtype, t->data, k)
                   : (double)tj_load_i64(t->dtype, t->data, k);
    if (k < 8) printf(" %.6g", v);
    if (isnan(v)) {
      ++nans;
      continue;
    }
    if (isinf(v)) ++infs;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
    if (isfinite(v)) {
      sum += v;
      ++finite;
    }
  }
  if (numel > 8) printf(" ...");
  if (numel == 0) {
    printf(" (no elements)\n");
    return;
  }
  printf("\n  min %.6g max %.6g mean %.6g (nan %lld, inf %lld)\n", lo, hi,
         finite ? sum / (double)finite : NAN, (long long)nans, (long long)infs);
}

static tj_status_t run_timed(tj_executable_t* exe, const tj_tensor_t* in,
                             int32_t num_in, const tj_verify_tensors_t* out,
                             int32_t reps, double* times) {
  TJ_RETURN_IF_ERROR_TOOL(
      tj_executable_run(exe, in, num_in, out->tensors, out->count));
  for (int32_t r = 0; r < reps; ++r) {
    double start = tj_now_ms();
    TJ_RETURN_IF_ERROR_TOOL(
        tj_executable_run(exe, in, num_in, out->tensors, out->count));
    times[r] = tj_now_ms() - start;
  }
  qsort(times, (size_t)reps, sizeof(double), compare_doubles);
  return NULL;
}

static tj_status_t run_exec(const tj_graph_t* graph, exec_args_t* e,
                            const grad_args_t* syms) {
  tj_compile_options_t options;
  tj_compile_options_initialize(&options);
  options.target = e->target;
  options.bisect = e->bisect;
  options.specialize = e->specialize;
  tj_executable_t* exe = NULL;
  if (e->run || e->verify) {
    TJ_RETURN_IF_ERROR_TOOL(tj_compile(graph, &options, &exe));
  }
  given_t given;
  memset(&given, 0, sizeof(given));
  tj_verify_tensors_t random, outs;
  memset(&random, 0, sizeof(random));
  memset(&outs, 0, sizeof(outs));
  random.allocator = outs.allocator =
      tj_context_allocator(tj_graph_context(graph));
  const tj_tensor_t* in = NULL;
  int32_t num_in = 0;
  tj_status_t status = NULL;
  bool given_inputs = e->num_given || e->inputs_npz;
  if (given_inputs) {
    status = load_given(graph, e, &given);
    in = given.tensors;
    num_in = tj_graph_num_inputs(graph);
  } else if (e->run) {
    int64_t sym[TJ_MAX_SYMBOLS];
    status = tj_verify_bind_names(graph, syms->num_syms,
                                  (const char* const*)syms->names, syms->values,
                                  sym);
    if (!status) {
      status = tj_verify_random_inputs(graph, sym, e->seed, e->edge_values,
                                       e->nonfinite, &random);
    }
    in = random.tensors;
    num_in = random.count;
  }
  if (!status && e->run) {
    printf("run @%s on %s", tj_graph_name(graph), target_name(e->target));
    print_symbols(syms->num_syms, syms->names, syms->values);
    if (given_inputs) {
      printf(", given inputs\n");
    } else {
      printf(", random inputs (seed %llu)\n", (unsigned long long)e->seed);
    }
    status = tj_verify_make_outputs(graph, in, num_in, &outs);
    double* times = status ? NULL : calloc((size_t)e->reps, sizeof(double));
    if (!status && !times)
      status = tj_status_make(TJ_STATUS_OUT_OF_MEMORY, "out of memory");
    if (!status) status = run_timed(exe, in, num_in, &outs, e->reps, times);
    if (!status) {
      for (int32_t i = 0; i < outs.count; ++i) {
        print_output(tj_graph_output_name(graph, i), &outs.tensors[i]);
      }
      printf("time: median %.4f ms over %d runs (min %.4f, max %.4f)\n",
             times[e->reps / 2], (int)e->reps, times[0], times[e->reps - 1]);
      tj_executable_stats_t st = {.struct_size = sizeof(st)};
      tj_executable_stats(exe, &st);
      printf(
          "stats: %d kernels, %d graph breaks, compile %.1f ms, cache %lld "
          "hits / %lld misses, %lld recompiles, %lld runs\n",
          (int)st.num_kernels, (int)st.num_graph_breaks, st.compile_ms,
          (long long)st.cache_hits, (long long)st.cache_misses,
          (long long)st.recompiles, (long long)st.runs);
    }
    free(times);
  }
  if (!status && e->verify) {
    tj_verify_options_t vo;
    tj_verify_options_initialize(&vo);
    vo.num_symbols = syms->num_syms;
    vo.symbol_names = (const char* const*)syms->names;
    vo.symbol_values = syms->values;
    vo.seed = e->seed;
    vo.nonfinite = e->nonfinite;
    vo.edge_values = e->edge_values;
    tj_verify_report_t* report = NULL;
    status = tj_verify(exe, graph, given_inputs ? in : NULL,
                       given_inputs ? num_in : 0, &vo, &report);
    if (!status) {
      printf("%s", report->text);
      if (report->verdict != TJ_VERIFY_CLEAN &&
          report->verdict != TJ_VERIFY_DRIFT) {
        ++e->verdict_failures;
      }
    }
    tj_verify_report_destroy(report);
  }
  if (!status && e->ladder) {
    tj_verify_options_t vo;
    tj_verify_options_initialize(&vo);
    vo.num_symbols = syms->num_syms;
    vo.symbol_names = (const char* const*)syms->names;
    vo.symbol_values = syms->values;
    vo.seed = e->seed;
    vo.nonfinite = e->nonfinite;
    vo.edge_values = e->edge_values;
    tj_ladder_report_t* report = NULL;
    status = tj_verify_ladder(graph, &options, given_inputs ? in : NULL,
                              given_inputs ? num_in : 0, &vo, &report);
    if (!status) {
      printf("%s", report->text);
      if (report->first_diverging >= 0) ++e->verdict_failures;
    }
    tj_ladder_report_destroy(report);
  }
  tj_verify_tensors_deinitialize(&outs);
  tj_verify_tensors_deinitialize(&random);
  given_free(&given);
  tj_executable_release(exe);
  return status;
}

typedef struct run_args_t {
  tj_context_t* context;
  const char* path;
  const char* func;  // NULL: every function
  bool multiple;     // the file has several pieces: print headings
  bool grad;
  bool scoreboard;
  int32_t profile;  // --profile[=RUNS]: runs; 0: no profile
  bool diagnose;
  tj_compile_options_t options;  // --specialize
  grad_args_t grad_args;
  exec_args_t* exec;  // --run / --verify
  int32_t matched;    // functions handled
  // --quantize: format 0 when not given.
  tj_quantize_weights_options_t quantize;
} run_args_t;

// Parses --quantize's value: int8, int4 or int4:GROUP.
static bool parse_quantize(const char* v, tj_quantize_weights_options_t* o) {
  tj_quantize_weights_options_initialize(o);
  if (strcmp(v, "int8") == 0) {
    o->format = TJ_WEIGHT_INT8_PER_CHANNEL;
    return true;
  }
  if (strncmp(v, "int4", 4) != 0 || (v[4] != '\0' && v[4] != ':')) return false;
  o->format = TJ_WEIGHT_INT4_PER_GROUP;
  if (v[4] == '\0') return true;
  char* end = NULL;
  o->group_size = strtoll(v + 5, &end, 10);
  return end != v + 5 && !*end &&
         (o->group_size == 32 || o->group_size == 64 || o->group_size == 128);
}

// --quantize: the float graph's scoreboard (with --scoreboard), then
// |*graph| replaced by its quantized copy, with a line saying how many
// weights were quantized and the weight bytes the kernels read before and
// after (the scoreboard's memplan row, exact: its MB columns round small
// graphs away).
static tj_status_t quantize_piece(run_args_t* a, tj_graph_t** graph) {
  const grad_args_t* g = &a->grad_args;
  const char* const* names = (const char* const*)g->names;
  tj_scoreboard_t before, after;
  TJ_RETURN_IF_ERROR_TOOL(
      tj_graph_scoreboard(*graph, g->num_syms, names, g->values, &before));
  bool board = a->scoreboard && !a->grad;
  if (board)
    print_scoreboard(*graph, g->num_syms, g->names, g->values, &before);
  tj_graph_t* q = NULL;
  int32_t count = 0;
  TJ_RETURN_IF_ERROR_TOOL(
      tj_graph_quantize_weights(*graph, &a->quantize, &q, &count));
  tj_status_t status =
      tj_graph_scoreboard(q, g->num_syms, names, g->values, &after);
  if (status) {
    tj_graph_destroy(q);
    return status;
  }
  tj_graph_destroy(*graph);
  *graph = q;
  int64_t w0 = before.rows[TJ_STAGE_MEMPLAN].weight_bytes_read;
  int64_t w1 = after.rows[TJ_STAGE_MEMPLAN].weight_bytes_read;
  char format[48];
  if (a->quantize.format == TJ_WEIGHT_INT8_PER_CHANNEL) {
    snprintf(format, sizeof(format), "int8 per channel");
  } else {
    snprintf(format, sizeof(format), "int4 per group of %lld",
             (long long)a->quantize.group_size);
  }
  printf(
      "%squantized: %d weights, %s; weight bytes read %lld -> %lld "
      "(%.2fx fewer)\n%s",
      board ? "\n" : "", (int)count, format, (long long)w0, (long long)w1,
      w1 > 0 ? (double)w0 / (double)w1 : 0.0, board ? "\n" : "");
  return NULL;
}

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
  if (!status && a->quantize.format) status = quantize_piece(a, &graph);
  if (!status && (a->exec->run || a->exec->verify || a->exec->ladder)) {
    status = run_exec(graph, a->exec, &a->grad_args);
  } else if (!status && a->grad) {
    status = run_grad(graph, &a->grad_args);
  } else if (!status && a->scoreboard) {
    tj_scoreboard_t sb;
    const grad_args_t* g = &a->grad_args;
    status = tj_graph_scoreboard(graph, g->num_syms,
                                 (const char* const*)g->names, g->values, &sb);
    if (!status) print_scoreboard(graph, g->num_syms, g->names, g->values, &sb);
  }
  if (!status && a->diagnose && !a->grad) {
    const grad_args_t* g = &a->grad_args;
    status = run_diagnose(graph, g->num_syms, g->names, g->values,
                          a->profile ? a->profile : 10, &a->options);
  } else if (!status && a->profile && !a->grad) {
    const grad_args_t* g = &a->grad_args;
    if (a->scoreboard) printf("\n");
    status = run_profile(graph, g->num_syms, g->names, g->values, a->profile,
                         &a->options);
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

// The options of --run and --verify: how many arguments were taken (0:
// not one of them), or -1 after printing an error.
static int parse_exec_option(int argc, char** argv, int i, exec_args_t* e) {
  const char* a = argv[i];
  if (strcmp(a, "--run") == 0) {
    e->run = true;
  } else if (strcmp(a, "--verify") == 0) {
    e->verify = true;
  } else if (strcmp(a, "--ladder") == 0) {
    e->ladder = true;
  } else if (strncmp(a, "--bisect=", 9) == 0) {
    e->bisect = a + 9;
  } else if (strcmp(a, "--nonfinite") == 0) {
    e->nonfinite = true;
  } else if (strcmp(a, "--no-edge-values") == 0) {
    e->edge_values = false;
  } else if (strncmp(a, "--target=", 9) == 0) {
    if (!parse_target(a + 9, &e->target)) {
      fprintf(stderr,
              "tj-run: --target wants x86, reference or cuda, got '%s'\n",
              a + 9);
      return -1;
    }
  } else if (strncmp(a, "--reps=", 7) == 0 || strncmp(a, "--seed=", 7) == 0) {
    char* end = NULL;
    long long v = strtoll(a + 7, &end, 10);
    bool reps = a[2] == 'r';
    if (end == a + 7 || *end || v < (reps ? 1 : 0) || (reps && v > 100000)) {
      fprintf(stderr, "tj-run: %.6s wants %s, got '%s'\n", a,
              reps ? "a count from 1 to 100000" : "a number >= 0", a + 7);
      return -1;
    }
    if (reps) {
      e->reps = (int32_t)v;
    } else {
      e->seed = (uint64_t)v;
    }
  } else if (strcmp(a, "--inputs") == 0 || strncmp(a, "--inputs=", 9) == 0) {
    bool joined = a[8] == '=';
    const char* file = joined ? a + 9 : (i + 1 < argc ? argv[i + 1] : NULL);
    if (!file || !*file) {
      fprintf(stderr, "tj-run: --inputs wants FILE.npz\n");
      return -1;
    }
    e->inputs_npz = file;
    return joined ? 1 : 2;
  } else if (strcmp(a, "--input") == 0 || strncmp(a, "--input=", 8) == 0) {
    bool joined = a[7] == '=';
    const char* spec = joined ? a + 8 : (i + 1 < argc ? argv[i + 1] : NULL);
    const char* eq = spec ? strchr(spec, '=') : NULL;
    if (!eq || eq == spec || !eq[1] || e->num_given == kMaxGiven) {
      fprintf(stderr, "tj-run: --input wants NAME=FILE.npy, got '%s'\n",
              spec ? spec : "");
      return -1;
    }
    e->given_names[e->num_given] = strndup(spec, (size_t)(eq - spec));
    e->given_paths[e->num_given++] = eq + 1;
    return joined ? 1 : 2;
  } else {
    return 0;
  }
  return 1;
}

int main(int argc, char** argv) {
  const char* path = NULL;
  const char* func = NULL;
  bool scoreboard = false, grad = false, print = false;
  int32_t profile = 0;
  bool diagnose = false;
  tj_quantize_weights_options_t quantize = {0};
  tj_specialize_t specialize = TJ_SPECIALIZE_NEVER;
  tj_recompute_t recompute = TJ_RECOMPUTE_POINTWISE;
  char* names[kMaxSyms];
  int64_t values[kMaxSyms];
  int32_t num_syms = 0;
  exec_args_t exec = {
      .target = TJ_TARGET_X86, .reps = 10, .seed = 1, .edge_values = true};
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    int taken = parse_exec_option(argc, argv, i, &exec);
    if (taken < 0) return 1;
    if (taken > 0) {
      i += taken - 1;
      continue;
    }
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
    } else if (strcmp(a, "--diagnose") == 0) {
      diagnose = true;
    } else if (strncmp(a, "--quantize=", 11) == 0) {
      if (!parse_quantize(a + 11, &quantize)) {
        fprintf(stderr,
                "tj-run: --quantize wants int8, int4 or int4:GROUP (GROUP 32, "
                "64 or 128), got '%s'\n",
                a + 11);
        return 1;
      }
    } else if (strncmp(a, "--specialize=", 13) == 0) {
      static const char* const kPolicies[] = {"never", "after_n", "always"};
      bool known = false;
      for (int p = 0; p < 3; ++p) {
        if (strcmp(a + 13, kPolicies[p]) == 0) {
          specialize = (tj_specialize_t)p;
          known = true;
        }
      }
      if (!known) {
        fprintf(stderr, "tj-run: --specialize is never, after_n or always\n");
        return 1;
      }
    } else if (strcmp(a, "--profile") == 0 ||
               strncmp(a, "--profile=", 10) == 0) {
      profile = a[9] == '=' ? atoi(a + 10) : 20;
      if (profile < 1) {
        fprintf(stderr, "tj-run: --profile=RUNS wants RUNS >= 1\n");
        return 1;
      }
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
  bool exec_mode = exec.run || exec.verify || exec.ladder;
  exec.specialize = specialize;
  if ((!scoreboard && !grad && !profile && !diagnose && !exec_mode) ||
      (print && !grad) || !path ||
      (exec_mode && (scoreboard || grad || profile || diagnose))) {
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
        .profile = profile,
        .diagnose = diagnose,
        .grad_args = {print, scoreboard, recompute, num_syms, names, values},
        .exec = &exec,
        .quantize = quantize};
    tj_compile_options_initialize(&args.options);
    args.options.specialize = specialize;
    args.options.target = exec.target;  // --profile and --diagnose too
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
  for (int32_t i = 0; i < exec.num_given; ++i) free(exec.given_names[i]);
  free(text);
  if (rc == 0 && exec.verdict_failures) rc = 2;
  return rc;
}
