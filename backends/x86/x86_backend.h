// The x86 backend's internal pieces between the lowering (lower.h) and the
// executable (executable.c): a kernel set (the kernels of one executable or
// one specialization, JIT-compiled as ONE LLVM module) and launching a
// kernel over its work units on the thread pool or the host's job system.

#ifndef TJ_BACKENDS_X86_X86_BACKEND_H_
#define TJ_BACKENDS_X86_X86_BACKEND_H_

#include "backends/x86/lower.h"
#include "backends/x86/thread_pool.h"
#include "jit/x86_jit.h"
#include "tensorjit/tj_executable.h"

//===--- kernel sets ---===//

// Where a kernel set's object code came from.
typedef enum tj_x86_source_e {
  TJ_X86_SOURCE_LLVM = 0,    // compiled now (a cache miss)
  TJ_X86_SOURCE_MEMORY = 1,  // the context's memory cache
  TJ_X86_SOURCE_DISK = 2,    // the disk cache
} tj_x86_source_t;

typedef struct tj_x86_kernel_set_t {
  uint32_t num_kernels;
  tj_x86_lowered_t* kernels;  // owned array
  tj_kir_fn_t* fns;           // entry points, valid while |module| lives
  tj_x86_module_t* module;
  size_t object_bytes;
  double compile_ms;  // getting the object (LLVM or a cache), load, link
  tj_x86_source_t source;
  char key[33];              // the cache key, hex
  const char* cache_note;    // why the disk cache missed, or NULL (static)
  tj_status_t store_status;  // a failed cache store (a warning), owned
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
                                    tj_x86_lowered_t* kernels,
                                    uint32_t num_kernels,
                                    tj_x86_kernel_set_t* out);

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

#endif  // TJ_BACKENDS_X86_X86_BACKEND_H_
