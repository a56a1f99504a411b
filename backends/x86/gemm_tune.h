// The x86 GEMM autotuner: for every GEMM kernel of an executable's generic
// kernel set, per (M bucket = M rounded up to a power of two, N, K, batch)
// the first run times the candidates and later runs use the fastest.
//
// Candidates, in this order (all compute the same values to f32 rounding):
//   - the generated kernel as compiled (the default schedule),
//   - OpenBLAS cblas_sgemm (dlopen'ed, openblas.h) into scratch, then the
//     kernel's epilogue as a separate POINTWISE kernel reading that result.
//     Skipped, with the reason logged, when the library is absent, when the
//     executable's threads differ from OpenBLAS's (its own threads would
//     break num_threads), under a host parallel_for (the host's job system
//     runs our work; OpenBLAS would bring threads of its own) and for
//     operand strides BLAS cannot express,
//   - generated variants with other schedules (tile 8x32; nc 256; kc 512
//     unless K is known to be <= 512), compiled lazily as one module per
//     executable, through the kernel cache (memory and disk) like every
//     kernel set.
//
// Decisions go through jit/autotune.h: cached in the context's memory cache
// and on disk beside the kernels, keyed by the kernel's text, the sizes,
// the bucket, the CPU target key and the candidate names, so a second
// compile of the same graph (in this process or another) runs the winner
// without timing anything. Tuning times the candidates on the run's real
// inputs with scratch outputs (the run's outputs may alias its inputs),
// within a budget: each candidate gets a warm-up run and timed runs within
// its share of the budget; a candidate whose first run would not fit is
// skipped, so a tuning costs at most the budget plus one run of the
// generated kernel.
// Decisions, tables of times and skip reasons are logged under
// TJ_LOG=autotune.
// With |background| (TJ_AUTOTUNE_BACKGROUND) a run of an undecided bucket
// runs the generated kernel and queues a job on the context's worker
// (lib/background.h) holding a snapshot of the run's input operands; the
// job decides as above and publishes; destroying the tuner cancels its
// queued jobs and waits for its running one.

#ifndef TJ_BACKENDS_X86_GEMM_TUNE_H_
#define TJ_BACKENDS_X86_GEMM_TUNE_H_

#include "backends/x86/x86_backend.h"

typedef struct tj_x86_tuner_t tj_x86_tuner_t;

typedef struct tj_x86_tuner_config_t {
  tj_x86_jit_t* jit;
  tj_allocator_t allocator;
  tj_context_t* context;
  const char* cache_dir;  // "" or NULL: no disk cache (copied)
  // The generic kernels and where they run; borrowed for the tuner's life.
  const tj_x86_kernel_set_t* set;
  const tj_x86_runner_t* runner;
  int32_t budget_ms;       // > 0
  bool log;                // TJ_LOG=autotune
  // TJ_AUTOTUNE_BACKGROUND: a run of an undecided bucket runs the
  // generated kernel and queues the timing on the context's background
  // thread (lib/background.h) instead of timing it first.
  bool background;
  const char* graph_name;  // for logs (copied)
} tj_x86_tuner_config_t;

// Creates a tuner for the GEMM kernels of |config->set|. |*out| is NULL
// (and the status OK) when the set has no GEMM kernel.
tj_status_t tj_x86_tuner_create(const tj_x86_tuner_config_t* config,
                                tj_x86_tuner_t** out);
void tj_x86_tuner_destroy(tj_x86_tuner_t* tuner);

// Whether kernel |kernel| of the set runs through the tuner.
bool tj_x86_tuner_handles(const tj_x86_tuner_t* tuner, uint32_t kernel);

// Scratch bytes (one region, 64-byte aligned) that running |kernel| with
// |scalars| needs with the decided candidate; 0 when undecided or when the
// generated kernel's own launch scratch suffices.
int64_t tj_x86_tuner_scratch(const tj_x86_tuner_t* tuner, uint32_t kernel,
                             const int64_t* scalars);

// Runs |kernel| on |buffers| with |scalars|: the decided candidate, after
// deciding when this shape's bucket is new (which may compile the variants
// and time the candidates). |launch| is the generated kernel's launch;
// |scratch| holds |scratch_bytes| (64-byte aligned); a candidate that needs
// more (only right after a decision) gets temporary memory.
tj_status_t tj_x86_tuner_run(tj_x86_tuner_t* tuner, uint32_t kernel,
                             const tj_x86_launch_t* launch,
                             void* const* buffers, const int64_t* scalars,
                             void* scratch, int64_t scratch_bytes);

// Counters for tests and logs.
typedef struct tj_x86_tuner_stats_t {
  int64_t tunings;         // buckets decided by timing candidates
  int64_t cached;          // buckets decided from the memory or disk cache
  int64_t variant_builds;  // variant kernel sets built (LLVM or a cache)
  int64_t openblas_runs;   // runs served by the OpenBLAS candidate
  int64_t variant_runs;    // runs served by a generated variant
  // TJ_AUTOTUNE_BACKGROUND: tuning jobs queued, finished (decision
  // published) and failed (the generated kernel stays).
  int64_t jobs_queued, jobs_done, jobs_failed;
} tj_x86_tuner_stats_t;
void tj_x86_tuner_stats(const tj_x86_tuner_t* tuner, tj_x86_tuner_stats_t* out);

// The candidate names of |kernel| (in order; the first is the generated
// kernel) and whether each is available, for tests and logs. Returns the
// count (at most TJ_X86_TUNER_MAX_CANDIDATES).
#define TJ_X86_TUNER_MAX_CANDIDATES 6
int32_t tj_x86_tuner_candidates(const tj_x86_tuner_t* tuner, uint32_t kernel,
                                const char** names, bool* available);

// Tests: serve every run of the GEMM kernels that have an available
// candidate |name| (exact name) with it, and of the others with their
// generated kernel, without timing anything; NULL restores tuning.
// INVALID_ARGUMENT when no kernel has such a candidate.
tj_status_t tj_x86_tuner_force(tj_x86_tuner_t* tuner, const char* name);

// The tuner of an x86 executable (NULL when autotuning is off or it has no
// GEMM kernel). Implemented by the driver (backends/target_entry.c).
tj_x86_tuner_t* tj_x86_executable_tuner(const tj_executable_t* executable);
// The tuner of a program of tj_backend_x86 (NULL for NULL or none).
tj_x86_tuner_t* tj_x86_backend_tuner(const void* program);

#endif  // TJ_BACKENDS_X86_GEMM_TUNE_H_
