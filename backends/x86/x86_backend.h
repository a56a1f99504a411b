// The x86 backend's internal pieces between the lowering (lower.h) and the
// x86 program (x86_program.c): a kernel set (the kernels of one executable or
// one specialization, JIT-compiled as ONE LLVM module) and launching a
// kernel over its work units on the thread pool or the host's job system.

#ifndef TJ_BACKENDS_X86_X86_BACKEND_H_
#define TJ_BACKENDS_X86_X86_BACKEND_H_

#include "kir/lower.h"
#include "backends/runtime/host_topk.h"
#include "backends/x86/thread_pool.h"
#include "jit/x86_jit.h"
#include "tensorjit/tj_executable.h"

//===--- the context's x86 runtime ---===//

// What the x86 executables of one context share, created on the first x86
// compile and destroyed with the context: ONE JIT (host ISA), so a host
// that compiles many graphs has one LLJIT and one set of TargetMachines,
// not one per executable; and thread pools, one per thread count asked
// for (the host's CPU count unless tj_compile_options_t.x86.num_threads says
// otherwise, so normally exactly one), each created on first need.
// Executables borrow both; the context outlives them. Thread-safe.
typedef struct tj_x86_runtime_t tj_x86_runtime_t;

// The runtime of |context|, created (with its JIT) on the first call. On
// failure |*out_runtime| is NULL and a later call tries again.
tj_status_t tj_x86_runtime_get(tj_context_t* context,
                               tj_x86_runtime_t** out_runtime);

// The JIT. Borrowed; valid until the context is destroyed.
tj_x86_jit_t* tj_x86_runtime_jit(const tj_x86_runtime_t* runtime);

// The pool of |num_threads| threads (>= 2), created on the first call for
// that count. Borrowed; valid until the context is destroyed. Several
// executables may run on it at once: a run that finds it busy runs its
// kernel on the calling thread (thread_pool.h).
tj_status_t tj_x86_runtime_pool(tj_x86_runtime_t* runtime, int32_t num_threads,
                                tj_thread_pool_t** out_pool);

// For tests: |context|'s JIT (NULL if it cannot be created) and its number
// of pools; both create the runtime if needed.
tj_x86_jit_t* tj_x86_context_jit(tj_context_t* context);
int32_t tj_x86_context_num_pools(tj_context_t* context);

//===--- kernel sets ---===//

// Where a kernel set's object code came from.
typedef enum tj_x86_source_e {
  TJ_X86_SOURCE_LLVM = 0,    // compiled now (a cache miss)
  TJ_X86_SOURCE_MEMORY = 1,  // the context's memory cache
  TJ_X86_SOURCE_DISK = 2,    // the disk cache
} tj_x86_source_t;

// The cold part of a kernel set (x86_jit.h), built on first use.
typedef struct tj_x86_lazy_t tj_x86_lazy_t;

typedef struct tj_x86_kernel_set_t {
  uint32_t num_kernels;
  tj_lowered_kernel_t* kernels;  // owned array
  tj_kir_fn_t* fns;              // entry points, valid while |module| lives
  tj_x86_module_t* module;
  size_t object_bytes;
  double compile_ms;  // getting the object (LLVM or a cache), load, link
  tj_x86_source_t source;
  char key[33];              // the cache key, hex
  const char* cache_note;    // why the disk cache missed, or NULL (static)
  tj_status_t store_status;  // a failed cache store (a warning), owned
  tj_x86_lazy_t* lazy;       // NULL: nothing deferred
  int32_t num_deferred;      // functions in the cold part
  // Region compile: kernels identical up to their own and their buffers'
  // names (the same block repeated, e.g. N layers with different weights)
  // share one compiled function. |unique| holds shallow copies of the
  // distinct ones (owned array; NULL when every kernel is distinct), the
  // object is built from them, and |unique_of| maps each kernel to its
  // entry.
  tj_lowered_kernel_t* unique;
  uint32_t* unique_of;
  uint32_t num_unique;
} tj_x86_kernel_set_t;

// Makes the object of |num_kernels| lowered kernels: from |context|'s
// memory cache, else from the disk cache in |cache_dir| ("" or NULL: none),
// else compiled with |jit| as one module and stored in both. Then loads it
// and looks every kernel up. The key hashes every kernel's text, the JIT's
// target key and the library version. Takes ownership of |kernels| (an
// array allocated from |allocator|) on every path. On failure |out| is
// zeroed.
tj_status_t tj_x86_kernel_set_build(tj_x86_jit_t* jit, tj_allocator_t allocator,
                                    tj_context_t* context,
                                    const char* cache_dir,
                                    tj_lowered_kernel_t* kernels,
                                    uint32_t num_kernels,
                                    tj_x86_kernel_set_t* out);

// tj_x86_kernel_set_build, but compiles (or loads) only the hot part of
// the module now (x86_jit.h): the cold part is built, from the caches or
// LLVM, by the first call of a kernel that needs it, on that thread, and
// logged under TJ_LOG=cache (|log|) for graph |name|. A run must check
// tj_x86_kernel_set_take_error after its launches.
tj_status_t tj_x86_kernel_set_build_lazy(
    tj_x86_jit_t* jit, tj_allocator_t allocator, tj_context_t* context,
    const char* cache_dir, tj_lowered_kernel_t* kernels, uint32_t num_kernels,
    const char* name, bool log, tj_x86_kernel_set_t* out);

// Starts building |set|'s cold part (if it has one) now, on a thread of
// the set's own, from the caches or LLVM: a launch that needs it later
// finds it loaded, one that needs it meanwhile waits for that build (the
// part is built once). A failure is kept for the first launch that needs
// the part (tj_x86_kernel_set_take_error); a thread that cannot be created
// leaves today's build on first use. tj_x86_kernel_set_deinitialize waits
// for the thread (a build not yet begun is skipped; one under way is
// waited for). Call once, before any launch shares |set| with other
// threads.
void tj_x86_kernel_set_build_cold_in_background(tj_x86_kernel_set_t* set);

// Builds |set|'s cold part now on the calling thread, from the caches or
// LLVM, unless it is loaded already; waits for a background build under
// way instead of building twice. A failure is returned (and a failed
// background build tried again). Thread-safe; launches may run meanwhile.
tj_status_t tj_x86_kernel_set_build_cold(const tj_x86_kernel_set_t* set);

// Whether |set|'s cold part is loaded (true when it has none).
bool tj_x86_kernel_set_cold_ready(const tj_x86_kernel_set_t* set);

// A failure to build |set|'s cold part during a launch (its kernels then
// skipped the deferred calls, so that launch's outputs are wrong), or
// NULL. Taken: the next call returns NULL unless it failed again; a later
// launch tries to build the part again.
tj_status_t tj_x86_kernel_set_take_error(const tj_x86_kernel_set_t* set);

// Unloads and frees everything. Idempotent.
void tj_x86_kernel_set_deinitialize(tj_allocator_t allocator,
                                    tj_x86_kernel_set_t* set);

//===--- launching ---===//

// Where kernels run: the pool, the host's parallel_for, or inline.
typedef struct tj_x86_runner_t {
  tj_thread_pool_t* pool;  // borrowed; NULL: no pool
  tj_parallel_for_fn host_parallel_for;
  void* host_user_data;
  int32_t threads;  // CPUs the work may spread over (>= 1)
  int32_t lanes;    // f32 lanes of the compiled code
} tj_x86_runner_t;

typedef struct tj_x86_launch_t {
  int64_t units;       // work units of the kernel for these scalars
  int64_t slot_bytes;  // scratch per concurrent call, 64-byte multiple
  int32_t slots;       // concurrent calls (scratch slots)
  int64_t chunks;      // host parallel_for: chunks of units; else 0
  bool parallel;       // false: run inline on the calling thread
} tj_x86_launch_t;

// How |kernel| runs with |scalars|: units, and the scratch it needs
// (slots * slot_bytes, 64-byte aligned). INVALID_ARGUMENT for sizes the
// kernel cannot take.
tj_status_t tj_x86_launch_prepare(const tj_x86_runner_t* runner,
                                  const tj_kir_t* kernel,
                                  const int64_t* scalars,
                                  tj_x86_launch_t* out_launch);

// Runs |fn| over all units of |launch|; |scratch| holds slots * slot_bytes
// bytes, 64-byte aligned (NULL when that is 0). Returns when done.
void tj_x86_launch_run(const tj_x86_runner_t* runner,
                       const tj_x86_launch_t* launch, tj_kir_fn_t fn,
                       void* const* buffers, const int64_t* scalars,
                       void* scratch);

// |runner| as a host kernel's parallel_for (backends/runtime/host_topk.h):
// the pool's threads (a slot per thread), the host's parallel_for in
// chunks (a slot per chunk), or none (|run| NULL: inline) with one
// thread. Borrows |runner|.
tj_host_parallel_t tj_x86_runner_parallel(const tj_x86_runner_t* runner);

#endif  // TJ_BACKENDS_X86_X86_BACKEND_H_
