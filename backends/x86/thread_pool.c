// The thread pool: one job at a time, published by bumping a generation
// counter after its fields are written; chunks claimed from an atomic
// counter; completion counted down by the workers. See thread_pool.h.

#include "backends/x86/thread_pool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

// Iterations a worker polls for the next job before sleeping: roughly
// 0.1-0.5 ms, longer than the gap between kernels of one run.
#define SPIN_ITERATIONS (1 << 14)
// Chunks per thread: enough to even out threads that run at different
// speeds, few enough that claiming costs nothing.
#define CHUNKS_PER_THREAD 4

typedef struct worker_t {
  tj_thread_pool_t* pool;
  int32_t id;
  pthread_t thread;
} worker_t;

struct tj_thread_pool_t {
  tj_allocator_t allocator;
  int32_t num_threads;
  int32_t num_started;  // workers actually running
  worker_t* workers;
  pthread_mutex_t run_mutex;  // held by the thread whose job is running
  // The job, valid for the current generation.
  tj_parallel_task_fn task;
  void* context;
  int64_t n, chunk;
  // Hot counters on their own cache lines: written by every thread. Padding,
  // not alignas: the allocator only promises malloc's alignment.
  char pad0[64];
  _Atomic int64_t next;
  char pad1[64];
  _Atomic int32_t pending;
  char pad2[64];
  _Atomic uint64_t generation;
  _Atomic int32_t sleepers;
  char pad3[64];
  _Atomic bool stop;
  pthread_mutex_t sleep_mutex;
  pthread_cond_t wake;
};

void tj_parallel_for(const tj_parallel_for_t* hook, int64_t n,
                     tj_parallel_task_fn task, void* context) {
  if (n <= 0) return;
  if (!hook || !hook->run) {
    task(context, 0, n, 0);
    return;
  }
  hook->run(hook->user_data, n, task, context);
}

static void run_chunks(tj_thread_pool_t* pool, int32_t id) {
  const int64_t n = pool->n, chunk = pool->chunk;
  for (;;) {
    int64_t begin =
        atomic_fetch_add_explicit(&pool->next, chunk, memory_order_relaxed);
    if (begin >= n) return;
    int64_t end = n - begin < chunk ? n : begin + chunk;
    pool->task(pool->context, begin, end, id);
  }
}

static void* worker_main(void* arg) {
  worker_t* w = arg;
  tj_thread_pool_t* pool = w->pool;
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen =
        atomic_load_explicit(&pool->generation, memory_order_acquire);
    for (int i = 0; gen == seen && i < SPIN_ITERATIONS; ++i) {
      CPU_RELAX();
      gen = atomic_load_explicit(&pool->generation, memory_order_acquire);
    }
    if (gen == seen) {
      pthread_mutex_lock(&pool->sleep_mutex);
      atomic_fetch_add(&pool->sleepers, 1);
      while ((gen = atomic_load(&pool->generation)) == seen) {
        pthread_cond_wait(&pool->wake, &pool->sleep_mutex);
      }
      atomic_fetch_sub(&pool->sleepers, 1);
      pthread_mutex_unlock(&pool->sleep_mutex);
    }
    seen = gen;
    if (atomic_load(&pool->stop)) return NULL;
    run_chunks(pool, w->id);
    atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_release);
  }
}

// Publishes a new generation and wakes sleeping workers. The sleepers
// count is read after the generation is bumped (both seq_cst): a worker
// that has not yet counted itself as a sleeper will see the new
// generation before it waits.
static void publish(tj_thread_pool_t* pool) {
  atomic_fetch_add(&pool->generation, 1);
  if (atomic_load(&pool->sleepers) > 0) {
    pthread_mutex_lock(&pool->sleep_mutex);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->sleep_mutex);
  }
}

static int32_t host_threads(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int32_t)n : 1;
}

tj_status_t tj_thread_pool_create(tj_allocator_t allocator, int32_t num_threads,
                                  tj_thread_pool_t** out_pool) {
  *out_pool = NULL;
  if (num_threads < 0) {
    return tj_invalid("thread pool: %d threads", num_threads);
  }
  if (num_threads == 0) num_threads = host_threads();
  if (num_threads > TJ_THREAD_POOL_MAX_THREADS) {
    num_threads = TJ_THREAD_POOL_MAX_THREADS;
  }
  tj_thread_pool_t* pool = tj_calloc(allocator, 1, sizeof(*pool));
  if (!pool) return tj_status_oom();
  pool->allocator = allocator;
  pool->num_threads = num_threads;
  pthread_mutex_init(&pool->run_mutex, NULL);
  pthread_mutex_init(&pool->sleep_mutex, NULL);
  pthread_cond_init(&pool->wake, NULL);
  if (num_threads > 1) {
    pool->workers =
        tj_calloc(allocator, (size_t)num_threads - 1, sizeof(worker_t));
    if (!pool->workers) {
      tj_thread_pool_destroy(pool);
      return tj_status_oom();
    }
    for (int32_t i = 0; i < num_threads - 1; ++i) {
      worker_t* w = &pool->workers[i];
      w->pool = pool;
      w->id = i + 1;
      int err = pthread_create(&w->thread, NULL, worker_main, w);
      if (err != 0) {
        tj_thread_pool_destroy(pool);
        // EAGAIN: no memory for the stack (an address-space limit) or the
        // process's thread limit: both are resources the caller may free.
        return tj_status_make(
            err == EAGAIN || err == ENOMEM ? TJ_STATUS_OUT_OF_MEMORY
                                           : TJ_STATUS_BACKEND_FAILURE,
            "thread pool: could not start thread %d of %d: %s", i + 1,
            num_threads, strerror(err));
      }
      pool->num_started = i + 1;
    }
  }
  *out_pool = pool;
  return NULL;
}

void tj_thread_pool_destroy(tj_thread_pool_t* pool) {
  if (!pool) return;
  if (pool->num_started > 0) {
    atomic_store(&pool->stop, true);
    publish(pool);
    for (int32_t i = 0; i < pool->num_started; ++i) {
      pthread_join(pool->workers[i].thread, NULL);
    }
  }
  if (pool->workers) {
    tj_free(pool->allocator, pool->workers,
            ((size_t)pool->num_threads - 1) * sizeof(worker_t));
  }
  pthread_cond_destroy(&pool->wake);
  pthread_mutex_destroy(&pool->sleep_mutex);
  pthread_mutex_destroy(&pool->run_mutex);
  tj_free(pool->allocator, pool, sizeof(*pool));
}

int32_t tj_thread_pool_size(const tj_thread_pool_t* pool) {
  return pool->num_threads;
}

void tj_thread_pool_parallel_for(tj_thread_pool_t* pool, int64_t n,
                                 tj_parallel_task_fn task, void* context) {
  if (n <= 0) return;
  if (pool->num_started == 0 || n == 1 ||
      pthread_mutex_trylock(&pool->run_mutex) != 0) {
    task(context, 0, n, 0);
    return;
  }
  int64_t pieces = (int64_t)pool->num_threads * CHUNKS_PER_THREAD;
  pool->task = task;
  pool->context = context;
  pool->n = n;
  pool->chunk = n < pieces ? 1 : (n + pieces - 1) / pieces;
  atomic_store_explicit(&pool->next, 0, memory_order_relaxed);
  atomic_store_explicit(&pool->pending, pool->num_started,
                        memory_order_relaxed);
  publish(pool);
  run_chunks(pool, 0);
  // Workers finish their last chunk within microseconds, unless the OS has
  // descheduled one (more runnable threads than cores): then stop burning
  // the time slice it needs.
  for (int spins = 0;
       atomic_load_explicit(&pool->pending, memory_order_acquire) > 0;
       ++spins) {
    if (spins < SPIN_ITERATIONS) {
      CPU_RELAX();
    } else {
      sched_yield();
    }
  }
  pthread_mutex_unlock(&pool->run_mutex);
}

static void pool_run(void* user_data, int64_t n, tj_parallel_task_fn task,
                     void* context) {
  tj_thread_pool_parallel_for(user_data, n, task, context);
}

tj_parallel_for_t tj_thread_pool_hook(tj_thread_pool_t* pool) {
  tj_parallel_for_t hook = {pool_run, pool->num_threads, pool};
  return hook;
}
