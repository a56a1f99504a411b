// libtensorjit: what the optimizer does to a graph, stage by stage.
//
// The scoreboard of seed 001: for each stage of the default pipeline, how
// many kernels the graph would launch, how many bytes they would move to and
// from memory, and how much memory it would hold at its peak, for concrete
// values of the graph's symbols. Include <tensorjit.h> rather than this file
// directly.

#ifndef TENSORJIT_TJ_OPTIMIZE_H_
#define TENSORJIT_TJ_OPTIMIZE_H_

#include "tensorjit/tj_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

//===----------------------------------------------------------------------===//
// Stages
//===----------------------------------------------------------------------===//

typedef enum tj_stage_e {
  // The graph as the reference interpreter runs it, op by op: composites
  // expanded into core ops (so gelu counts as the ops it is made of), one
  // kernel per core op, every intermediate written to memory and kept.
  TJ_STAGE_EAGER = 0,
  // After canonicalization, constant folding, CSE and DCE. Composites still
  // count as the kernels of their expansion; each is a graph break, since
  // no backend compiles it before decomposition.
  TJ_STAGE_CANONICALIZE = 1,
  // After decomposing composites into core ops (and cleaning up again).
  TJ_STAGE_DECOMPOSE = 2,
  // After fusion: one kernel per fusion group; only group outputs are
  // written to memory.
  TJ_STAGE_FUSE = 3,
  // After memory planning: intermediates share one arena.
  TJ_STAGE_MEMPLAN = 4,
  TJ_STAGE_COUNT_ = 5,
} tj_stage_t;

// "eager", "canonicalize", "decompose", "fuse", "memplan"; "?" otherwise.
// Static storage.
TJ_API const char* tj_stage_name(tj_stage_t stage);

//===----------------------------------------------------------------------===//
// tj_scoreboard_t
//===----------------------------------------------------------------------===//

// One stage's numbers. Byte counts assume each kernel reads each buffer it
// needs once (a broadcast operand counts its own size) and writes each value
// it materializes once; reshapes of values in memory are free views.
typedef struct tj_scoreboard_row_t {
  tj_stage_t stage;
  // Nodes of the stage's graph, inputs not counted.
  int64_t nodes;
  // Kernel launches (views launch none).
  int64_t kernels;
  int64_t bytes_read;
  int64_t bytes_written;
  // Bytes held at the peak: inputs and constants, outputs, and
  // intermediates. Before memory planning every intermediate has its own
  // allocation for the whole run; after it, they share the planned arena.
  int64_t peak_bytes;
  // Ops no backend compiles at this stage (composites before
  // decomposition): each splits the compiled regions around a host call.
  int64_t graph_breaks;
  // Percentage of non-leaf nodes inside compiled kernels (0 for eager,
  // which interprets).
  double percent_compiled;
  // Custom ops kept in the graph (tj_custom_op.h): host calls of their
  // implementations between compiled regions, not graph breaks; from the
  // fused stages on, also each argtopk no kernel template takes (argtopk's
  // native host kernel).
  int64_t host_calls;
  // Of bytes_read, the bytes read from the graph's constants (the
  // weights); the rest of bytes_read and bytes_written is activations.
  // Quantized weights that the x86 GEMM reads as they are stored (issue
  // 17) count their stored bytes. Available since: 0.1.
  int64_t weight_bytes_read;
} tj_scoreboard_row_t;

typedef struct tj_scoreboard_t {
  tj_scoreboard_row_t rows[TJ_STAGE_COUNT_];  // indexed by tj_stage_t
  // The unit of "x activation": bytes of the graph's outputs.
  int64_t activation_bytes;
  // Bytes of the graph's inputs and constants.
  int64_t input_bytes;
  // The planned arena, and the most intermediate bytes live at once (a
  // lower bound for any plan).
  int64_t arena_bytes;
  int64_t live_peak_bytes;
} tj_scoreboard_t;

// Runs the default pipeline on a copy of finalized |graph| (which is not
// changed) and fills |*out| with every stage's numbers for the symbol
// values |symbol_values|[i] of the symbols named |symbol_names|[i]
// (|num_symbols| of each; every symbol of the graph must be given, each
// value >= 1). INVALID_ARGUMENT names an unknown, missing or non-positive
// symbol; on failure |*out| is zeroed. Uses the context's allocator;
// thread-safe for a finalized graph.
TJ_API tj_status_t tj_graph_scoreboard(const tj_graph_t* graph,
                                       int32_t num_symbols,
                                       const char* const* symbol_names,
                                       const int64_t* symbol_values,
                                       tj_scoreboard_t* out);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TENSORJIT_TJ_OPTIMIZE_H_
