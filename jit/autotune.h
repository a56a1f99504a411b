// The autotuner: for one kernel at one shape bucket on one device, time
// every candidate implementation and keep the fastest; the decision is
// cached in the context's memory cache and on disk beside the kernels
// (jit/cache.h), so a later process pays nothing for it.
//
// Target-independent: the caller names the candidates (generated tile
// configurations, a vendor library) and measures them; this file owns the
// key, the timing protocol (median of a few samples after a warm-up) and
// the cache record. Keys hash (the kernel's canonical text, the device,
// the bucket, the candidate names, the library version), so adding a
// candidate or changing a kernel re-tunes instead of reusing a stale pick.

#ifndef TJ_JIT_AUTOTUNE_H_
#define TJ_JIT_AUTOTUNE_H_

#include "jit/cache.h"

#define TJ_AUTOTUNE_MAX_CANDIDATES 24

// Times candidate |candidate| once (|*out_ms|, lower is better; the caller
// runs it |repeats| times between two events and divides). UNSUPPORTED
// means "this candidate cannot serve this shape": it is skipped.
typedef tj_status_t (*tj_autotune_measure_fn)(void* context, int32_t candidate,
                                              int32_t repeats, double* out_ms);

typedef struct tj_autotune_problem_t {
  const char* kernel_text;  // canonical text of the kernel (tj_kir_print)
  const char* device;       // e.g. "NVIDIA H200 sm_90a"
  int64_t bucket;           // shape bucket, e.g. M rounded up to 2^k
  int32_t num_candidates;   // <= TJ_AUTOTUNE_MAX_CANDIDATES
  const char* const* candidate_names;
} tj_autotune_problem_t;

typedef struct tj_autotune_result_t {
  int32_t best;                           // index of the fastest
  double ms[TJ_AUTOTUNE_MAX_CANDIDATES];  // median; <0: skipped
  bool from_cache;                        // memory or disk decision
  double tune_ms;                         // wall time spent measuring
} tj_autotune_result_t;

// The decision for |problem|: from |context|'s memory cache, else from the
// disk cache in |cache_dir| ("" or NULL: none), else measured with
// |measure| (each candidate: one warm-up call, then 5 samples) and stored
// in both. INVALID_ARGUMENT when every candidate is UNSUPPORTED; other
// measuring failures are returned as they are.
tj_status_t tj_autotune(tj_context_t* context, const char* cache_dir,
                        const tj_autotune_problem_t* problem,
                        tj_autotune_measure_fn measure, void* measure_context,
                        tj_autotune_result_t* out_result);

// The cached decision for |problem| alone, from the memory cache, else the
// disk cache: |*out_hit| false when neither has one (nothing is measured).
// For a caller that would otherwise start costly work before it times
// (CUDA's background compiles of the candidates).
tj_status_t tj_autotune_lookup(tj_context_t* context, const char* cache_dir,
                               const tj_autotune_problem_t* problem,
                               tj_autotune_result_t* out_result, bool* out_hit);

#endif  // TJ_JIT_AUTOTUNE_H_
