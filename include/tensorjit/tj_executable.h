// libtensorjit: compiling a finalized graph and running the result.
// Include <tensorjit.h> rather than this file directly.

#ifndef TENSORJIT_TJ_EXECUTABLE_H_
#define TENSORJIT_TJ_EXECUTABLE_H_

#include "tensorjit/tj_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

//===----------------------------------------------------------------------===//
// Threads: the host's job system
//===----------------------------------------------------------------------===//

// One unit of parallel work: run tasks [begin, end) of a parallel loop.
typedef void (*tj_task_fn)(void* task_context, int64_t begin, int64_t end);

// A host-supplied parallel loop (a game engine's job system): run
// |task|(|task_context|, b, e) over disjoint ranges covering [0, |count|),
// possibly concurrently, and return when all are done. |grain| is a
// suggested minimum range length.
typedef void (*tj_parallel_for_fn)(void* user_data, int64_t count,
                                   int64_t grain, tj_task_fn task,
                                   void* task_context);

//===----------------------------------------------------------------------===//
// tj_compile_options_t
//===----------------------------------------------------------------------===//

typedef enum tj_target_e {
  TJ_TARGET_X86 = 0,        // LLVM's x86 back end through ORC (the default)
  TJ_TARGET_REFERENCE = 1,  // the reference interpreter (for checking)
  TJ_TARGET_CUDA = 2,       // NVPTX through the CUDA driver
} tj_target_t;

// When to compile exact-shape kernels beside the generic ones.
typedef enum tj_specialize_e {
  TJ_SPECIALIZE_NEVER = 0,     // one generic kernel set serves every shape
  TJ_SPECIALIZE_AFTER_N = 1,   // after |specialize_after| runs of a shape
  TJ_SPECIALIZE_ALWAYS = 2,    // on the first run of each shape
} tj_specialize_t;

typedef struct tj_compile_options_t {
  tj_target_t target;
  // Worker threads for x86 kernels; 0 means one per online CPU. With
  // |parallel_for| it only sizes the work: a kernel is cut into about 4
  // chunks per thread.
  int32_t num_threads;
  // When set, kernels run their parallel loops through the host's job system
  // instead of libtensorjit's own threads. It may be called from several
  // threads at once when several runs of one executable are in flight.
  tj_parallel_for_fn parallel_for;
  void* parallel_for_user_data;
  tj_specialize_t specialize;
  int32_t specialize_after;  // >= 1; the default is 16
  // Round symbolic sizes up to powers of two for specialized kernels.
  // Not implemented yet: specializations use exact shapes, and asking for
  // it logs a warning.
  bool bucket_pow2;
  // Kernel cache directory. NULL: $TJ_CACHE_DIR, else
  // $XDG_CACHE_HOME/tensorjit, else ~/.cache/tensorjit. "" disables the disk
  // cache.
  const char* cache_dir;
  // Comma-separated pass list replacing the default pipeline; NULL = default.
  const char* pipeline;
  // Verify the IR after every pass (on in tests; costs compile time).
  bool verify_each;
} tj_compile_options_t;

// Fills |options| with the defaults.
TJ_API void tj_compile_options_initialize(tj_compile_options_t* options);

//===----------------------------------------------------------------------===//
// tj_executable_t
//===----------------------------------------------------------------------===//

// A compiled graph: its kernels, memory plan and shape guards. Ref-counted;
// it does not reference the graph it came from (except borrowed constants,
// see tj_graph_constant_borrowed). Thread-safe: several threads may run one
// executable at once.
typedef struct tj_executable_t tj_executable_t;

// Compiles finalized |graph| with |options| (NULL for the defaults; copied).
// On success |*out_executable| holds one reference owned by the caller
// (tj_executable_release); on failure it is NULL.
TJ_API tj_status_t tj_compile(const tj_graph_t* graph,
                              const tj_compile_options_t* options,
                              tj_executable_t** out_executable);

TJ_API void tj_executable_retain(tj_executable_t* executable);
// Drops a reference; the last one frees it. NULL is a no-op.
TJ_API void tj_executable_release(tj_executable_t* executable);

// The concrete shape of output |output_index| for these inputs (as
// tj_graph_output_shape).
TJ_API tj_status_t tj_executable_output_shape(const tj_executable_t* executable,
                                              const tj_tensor_t* inputs,
                                              int32_t num_inputs,
                                              int32_t output_index,
                                              int32_t* out_rank,
                                              int64_t* out_dims);

// Runs |executable|: inputs and outputs in declaration order, outputs
// preallocated by the caller with the shapes tj_executable_output_shape
// gives. Shape guards are checked first; a shape no kernel serves is
// compiled on demand (and logged under TJ_LOG=recompiles). No host heap
// allocation happens on the steady-state path (groups that run on the
// reference interpreter, see num_graph_breaks, allocate as it does).
// Inputs and outputs are CPU tensors and may be strided (they are staged
// through contiguous memory then); an output must not overlap an input.
// Several threads may run one executable at once.
TJ_API tj_status_t tj_executable_run(tj_executable_t* executable,
                                     const tj_tensor_t* inputs,
                                     int32_t num_inputs,
                                     const tj_tensor_t* outputs,
                                     int32_t num_outputs);

// What compiling and running has cost so far.
typedef struct tj_executable_stats_t {
  // Kernels in the generic kernel set: one per fusion group, except that a
  // pointwise group with pad or concat is one kernel per box of its output.
  int32_t num_kernels;
  // Host calls between compiled regions: fusion groups no kernel template
  // expresses (gather, a non-f32 matmul, a reduction over axes that are not
  // one strided axis), run on the reference interpreter.
  int32_t num_graph_breaks;
  double compile_ms;           // wall time of tj_compile
  int64_t cache_hits;          // kernels loaded from the memory or disk cache
  int64_t cache_misses;        // kernels compiled by LLVM
  int64_t recompiles;          // specializations compiled after tj_compile
  int64_t runs;
} tj_executable_stats_t;

TJ_API void tj_executable_stats(const tj_executable_t* executable,
                                tj_executable_stats_t* out_stats);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TENSORJIT_TJ_EXECUTABLE_H_
