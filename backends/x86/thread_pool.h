// A small persistent thread pool with a parallel_for, and the hook type a
// host engine fills to run kernels on its own job system instead.
//
// Work is a range [0, n) of independent units (see tj_kir_launch_info);
// it is cut into chunks handed out from an atomic counter, so threads that
// run slower (a shared VM, another process) simply take fewer chunks.

#ifndef TJ_BACKENDS_X86_THREAD_POOL_H_
#define TJ_BACKENDS_X86_THREAD_POOL_H_

#include "lib/base.h"

// Runs units [begin, end) on thread |thread|: an id in [0, max_threads)
// that no other concurrently running task of the same parallel_for call
// has, so per-thread scratch can be indexed by it.
typedef void (*tj_parallel_task_fn)(void* context, int64_t begin, int64_t end,
                                    int32_t thread);

// A parallel_for supplied by the host (game engines have job systems) or
// by tj_thread_pool_hook. |run| must call |task| over ranges that
// partition [0, n), each exactly once, possibly concurrently, with thread
// ids as above, and return when all have finished.
typedef struct tj_parallel_for_t {
  void (*run)(void* user_data, int64_t n, tj_parallel_task_fn task,
              void* context);
  int32_t max_threads;  // thread ids are < max_threads (>= 1)
  void* user_data;
} tj_parallel_for_t;

// Runs |task| over [0, n) through |hook|; inline on the calling thread
// (thread id 0) when |hook| is NULL or has no |run|.
void tj_parallel_for(const tj_parallel_for_t* hook, int64_t n,
                     tj_parallel_task_fn task, void* context);

//===--- tj_thread_pool_t ---===//

// Persistent workers; the calling thread takes part as thread 0. Workers
// spin briefly after a job (back-to-back kernels of one run start without
// a wake-up) and then sleep on a condition variable. Thread-safe: a call
// that finds the pool busy (another thread's job, or a nested call from a
// task) runs its whole range inline as thread 0, never blocking.
typedef struct tj_thread_pool_t tj_thread_pool_t;

// Pools are capped at this many threads.
#define TJ_THREAD_POOL_MAX_THREADS 1024

// Creates a pool of |num_threads| threads including the caller (0: the
// number of CPUs this process may run on). On success |*out_pool| is owned
// by the caller (tj_thread_pool_destroy); on failure it is NULL
// (OUT_OF_MEMORY, or BACKEND_FAILURE when a thread cannot be started).
tj_status_t tj_thread_pool_create(tj_allocator_t allocator, int32_t num_threads,
                                  tj_thread_pool_t** out_pool);

// Stops and joins the workers. No parallel_for may be running. NULL is a
// no-op.
void tj_thread_pool_destroy(tj_thread_pool_t* pool);

// Threads including the caller.
int32_t tj_thread_pool_size(const tj_thread_pool_t* pool);

// Runs |task| over [0, n) on the pool; returns when every unit is done.
// Allocates nothing.
void tj_thread_pool_parallel_for(tj_thread_pool_t* pool, int64_t n,
                                 tj_parallel_task_fn task, void* context);

// A hook that runs on |pool| (borrowed: valid while |pool| lives).
tj_parallel_for_t tj_thread_pool_hook(tj_thread_pool_t* pool);

#endif  // TJ_BACKENDS_X86_THREAD_POOL_H_
