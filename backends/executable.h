// backends/executable.h: the executable (struct tj_executable_t), private to
// the driver: compile.c makes, runs and frees it; specialize.c picks and
// compiles the program of a shape.

#ifndef TJ_BACKENDS_EXECUTABLE_H_
#define TJ_BACKENDS_EXECUTABLE_H_

#include <pthread.h>
#include <stdatomic.h>

#include "backends/compile.h"
#include "jit/cache.h"

#define TJ_MAX_SPECIALIZATIONS 16
#define TJ_SHAPE_COUNTERS 32

typedef struct spec_t {
  struct spec_t* next;
  int64_t key[TJ_MAX_SYMBOLS];
  void* program;  // NULL: specializing was refused, the generic one serves
} spec_t;

typedef struct shape_count_t {
  int64_t key[TJ_MAX_SYMBOLS];
  int64_t count;
  bool used;
} shape_count_t;

struct tj_executable_t {
  atomic_int refs;
  tj_context_t* context;
  tj_allocator_t allocator;
  tj_compile_options_t options;
  tj_plan_t plan;
  const tj_graph_t* graph;  // plan.graph
  uint32_t num_symbols;
  bool log_recompiles;
  tj_pass_eval_fn evaluate;  // the passes' (tj_compile_debug may change it)
  tj_compile_debug_t debug;  // the hooks it was compiled with (no fusion limit)
  const tj_backend_t* backend;
  void* target;   // the backend's state
  bool opened;    // |target| is open (NULL when the backend has no state)
  void* generic;  // the generic program
  tj_run_plan_t run_plan;
  // Specializations: an append-only list read without locks.
  _Atomic(spec_t*) specs;
  uint32_t num_specs;
  shape_count_t counts[TJ_SHAPE_COUNTERS];
  pthread_mutex_t mutex;  // compiling specializations, counting shapes
  bool mutex_ready;
  // Stats.
  double compile_ms;
  double passes_ms, lowering_ms, llvm_ms, ptxas_ms, tuning_ms, cache_load_ms;
  // tj_pass_ctx_t.region_blocks and region_blocks_processed of the default
  // pipeline's run (region templates, lib/passes/region.c).
  uint32_t region_blocks, region_blocks_processed;
  _Atomic(double) run_ms;
  atomic_llong cache_hits, cache_misses, recompiles, runs;
  int32_t num_shared_kernels;  // the generic program's (region compile)
  // Region compile (compile_memo.c): an executable made by a memo hit
  // borrows |plan|, |graph|, |target|, |generic| and |run_plan| from
  // |core| (retained) and frees none of them. |memoized|: this one is in
  // its context's memo, to be found by equal compiles while it lives.
  struct tj_executable_t* core;
  bool memoized;
};

// "B=7,S=128" for the values |key| of |g|'s symbols.
void tj_executable_format_key(const tj_graph_t* g, const int64_t* key,
                              char* buf, size_t size);

// Adds a compiled program's kernel-cache hits and misses to the stats.
void tj_executable_count_cache(tj_executable_t* exe,
                               const tj_lowered_program_t* program);

//===--- backends/compile_memo.c ---===//

// The structural key of compiling |graph| with |opts| on |backend| into
// |*out_key|; false when such a compile is not memoized (compile_memo.c
// says which).
bool tj_compile_memo_key(const tj_graph_t* graph,
                         const tj_compile_options_t* opts,
                         const tj_backend_t* backend, tj_cache_key_t* out_key);
// The executable stored under |key| in |context|'s memo (live, or
// retired and revived), retained, or NULL.
tj_status_t tj_compile_memo_find(tj_context_t* context, tj_cache_key_t key,
                                 tj_executable_t** out_core);
// Stores |core| (not retained: the memo holds it until its last
// reference goes, which calls tj_compile_memo_retire) under |key|, unless |key|
// is there already (another thread's compile). Sets core->memoized when stored.
tj_status_t tj_compile_memo_store(tj_context_t* context, tj_cache_key_t key,
                                  tj_executable_t* core);
// Called once the last reference to memoized |core| is gone: true when
// the memo keeps it (retired, found again by an equal compile; the caller
// then drops |core|'s context reference and frees nothing), false when it
// was removed from the memo and is to be freed.
bool tj_compile_memo_retire(tj_context_t* context, tj_executable_t* core);
// Frees a core the memo retired (it holds no context reference).
void tj_executable_destroy_retired(tj_executable_t* core);

//===--- backends/specialize.c ---===//

// Whether runs of |exe| may take a specialization (a backend that lowers,
// a policy other than NEVER, and symbols to specialize on).
bool tj_executable_specializes(const tj_executable_t* exe);

// The program for the symbol values |sym| under the policy (ALWAYS or
// AFTER_N): a shape's own program, compiled here when the policy says so;
// the generic one meanwhile, and for a shape the backend refuses to
// specialize (remembered, not retried).
tj_status_t tj_executable_choose_program(tj_executable_t* exe,
                                         const int64_t* sym,
                                         void** out_program);

// bucket_pow2: logs the first run of each power-of-two bucket
// (TJ_LOG=recompiles); the generic program serves every bucket.
void tj_executable_note_bucket(tj_executable_t* exe, const int64_t* sym);

#endif  // TJ_BACKENDS_EXECUTABLE_H_
