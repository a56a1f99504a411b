// backends/x86/thread_pool.c: every unit runs exactly once, thread ids are
// in range and never shared by concurrent tasks, busy and nested calls run
// inline, concurrent callers, a host-supplied hook, no allocation per call,
// and teardown with sleeping workers.

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "backends/x86/thread_pool.h"
#include "tests/unit/test.h"

typedef struct count_ctx_t {
  _Atomic int* hits;
  int32_t max_threads;
  _Atomic int busy[64];  // per thread id: tasks currently running
  _Atomic int bad;
  _Atomic int calls;
} count_ctx_t;

static void count_task(void* context, int64_t begin, int64_t end,
                       int32_t thread) {
  count_ctx_t* c = context;
  atomic_fetch_add(&c->calls, 1);
  if (thread < 0 || thread >= c->max_threads || begin >= end) {
    atomic_fetch_add(&c->bad, 1);
    return;
  }
  if (atomic_fetch_add(&c->busy[thread], 1) != 0) atomic_fetch_add(&c->bad, 1);
  for (int64_t i = begin; i < end; ++i) atomic_fetch_add(&c->hits[i], 1);
  atomic_fetch_sub(&c->busy[thread], 1);
}

static void check_cover(tj_thread_pool_t* pool, int64_t n) {
  count_ctx_t c;
  memset(&c, 0, sizeof(c));
  c.hits = calloc((size_t)(n ? n : 1), sizeof(int));
  c.max_threads = tj_thread_pool_size(pool);
  tj_thread_pool_parallel_for(pool, n, count_task, &c);
  int wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += c.hits[i] != 1;
  CHECK_EQ_INT(0, wrong);
  CHECK_EQ_INT(0, c.bad);
  if (n == 0) CHECK_EQ_INT(0, c.calls);
  free(c.hits);
}

TEST(covers_every_unit_once) {
  static const int32_t sizes[] = {1, 2, 3, 8};
  static const int64_t ns[] = {0, 1, 2, 7, 64, 1000, 100003};
  for (size_t s = 0; s < TJ_ARRAY_SIZE(sizes); ++s) {
    tj_thread_pool_t* pool;
    CHECK_OK(tj_thread_pool_create(tj_allocator_system(), sizes[s], &pool));
    CHECK_EQ_INT(sizes[s], tj_thread_pool_size(pool));
    for (size_t i = 0; i < TJ_ARRAY_SIZE(ns); ++i) check_cover(pool, ns[i]);
    tj_thread_pool_destroy(pool);
  }
  tj_thread_pool_t* pool;
  CHECK_OK(tj_thread_pool_create(tj_allocator_system(), 0, &pool));
  CHECK(tj_thread_pool_size(pool) >= 1);
  check_cover(pool, 12345);
  tj_thread_pool_destroy(pool);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "thread pool",
               tj_thread_pool_create(tj_allocator_system(), -1, &pool));
}

// A task that itself calls parallel_for on the same pool: the inner call
// finds the pool busy and runs inline instead of deadlocking.
typedef struct nested_ctx_t {
  tj_thread_pool_t* pool;
  _Atomic int64_t inner_units;
} nested_ctx_t;

static void inner_task(void* context, int64_t begin, int64_t end,
                       int32_t thread) {
  nested_ctx_t* c = context;
  (void)thread;
  atomic_fetch_add(&c->inner_units, end - begin);
}

static void outer_task(void* context, int64_t begin, int64_t end,
                       int32_t thread) {
  nested_ctx_t* c = context;
  (void)thread;
  for (int64_t i = begin; i < end; ++i) {
    tj_thread_pool_parallel_for(c->pool, 10, inner_task, c);
  }
}

TEST(nested_calls_run_inline) {
  nested_ctx_t c;
  CHECK_OK(tj_thread_pool_create(tj_allocator_system(), 3, &c.pool));
  atomic_store(&c.inner_units, 0);
  tj_thread_pool_parallel_for(c.pool, 50, outer_task, &c);
  CHECK_EQ_INT(500, atomic_load(&c.inner_units));
  tj_thread_pool_destroy(c.pool);
}

typedef struct caller_t {
  tj_thread_pool_t* pool;
  bool ok;
} caller_t;

static void* caller_main(void* arg) {
  caller_t* c = arg;
  c->ok = true;
  for (int round = 0; round < 200; ++round) {
    int64_t n = 1 + round * 7;
    count_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.hits = calloc((size_t)n, sizeof(int));
    ctx.max_threads = tj_thread_pool_size(c->pool);
    tj_thread_pool_parallel_for(c->pool, n, count_task, &ctx);
    for (int64_t i = 0; i < n; ++i) c->ok &= ctx.hits[i] == 1;
    c->ok &= ctx.bad == 0;
    free(ctx.hits);
  }
  return NULL;
}

// Two threads share one pool: whichever finds it busy runs inline.
TEST(concurrent_callers) {
  tj_thread_pool_t* pool;
  CHECK_OK(tj_thread_pool_create(tj_allocator_system(), 2, &pool));
  pthread_t t[2];
  caller_t callers[2] = {{pool, false}, {pool, false}};
  for (int i = 0; i < 2; ++i)
    pthread_create(&t[i], NULL, caller_main, &callers[i]);
  for (int i = 0; i < 2; ++i) {
    pthread_join(t[i], NULL);
    CHECK(callers[i].ok);
  }
  tj_thread_pool_destroy(pool);
}

// A host engine's parallel_for: here, split [0, n) in two halves run on
// two fresh threads with ids 0 and 1.
typedef struct host_job_t {
  tj_parallel_task_fn task;
  void* context;
  int64_t begin, end;
  int32_t id;
} host_job_t;

static void* host_worker(void* arg) {
  host_job_t* j = arg;
  if (j->begin < j->end) j->task(j->context, j->begin, j->end, j->id);
  return NULL;
}

static int g_host_calls;

static void host_parallel_for(void* user_data, int64_t n,
                              tj_parallel_task_fn task, void* context) {
  (void)user_data;
  ++g_host_calls;
  host_job_t jobs[2] = {{task, context, 0, n / 2, 0},
                        {task, context, n / 2, n, 1}};
  pthread_t t[2];
  for (int i = 0; i < 2; ++i)
    pthread_create(&t[i], NULL, host_worker, &jobs[i]);
  for (int i = 0; i < 2; ++i) pthread_join(t[i], NULL);
}

TEST(host_hook) {
  tj_parallel_for_t hook = {host_parallel_for, 2, NULL};
  count_ctx_t c;
  memset(&c, 0, sizeof(c));
  c.hits = calloc(777, sizeof(int));
  c.max_threads = 2;
  tj_parallel_for(&hook, 777, count_task, &c);
  int wrong = 0;
  for (int i = 0; i < 777; ++i) wrong += c.hits[i] != 1;
  CHECK_EQ_INT(0, wrong);
  CHECK_EQ_INT(0, c.bad);
  CHECK_EQ_INT(1, g_host_calls);
  // NULL hook: inline.
  memset(c.hits, 0, 777 * sizeof(int));
  c.max_threads = 1;
  tj_parallel_for(NULL, 777, count_task, &c);
  CHECK_EQ_INT(1, c.hits[776]);
  CHECK_EQ_INT(3, c.calls);  // two halves, then one inline call
  // A pool through its hook.
  tj_thread_pool_t* pool;
  CHECK_OK(tj_thread_pool_create(tj_allocator_system(), 3, &pool));
  tj_parallel_for_t ph = tj_thread_pool_hook(pool);
  CHECK_EQ_INT(3, ph.max_threads);
  memset(c.hits, 0, 777 * sizeof(int));
  c.max_threads = 3;
  tj_parallel_for(&ph, 777, count_task, &c);
  wrong = 0;
  for (int i = 0; i < 777; ++i) wrong += c.hits[i] != 1;
  CHECK_EQ_INT(0, wrong);
  tj_thread_pool_destroy(pool);
  free(c.hits);
}

static void noop_task(void* context, int64_t begin, int64_t end,
                      int32_t thread) {
  (void)thread;
  atomic_fetch_add((_Atomic int64_t*)context, end - begin);
}

// Steady state: many back-to-back calls, none of which allocates; then the
// workers fall asleep and are woken again; then teardown while asleep.
TEST(steady_state_and_sleep) {
  tj_test_allocator_t t;
  tj_test_allocator_initialize(&t, -1);
  tj_thread_pool_t* pool;
  CHECK_OK(tj_thread_pool_create(tj_test_allocator_get(&t), 2, &pool));
  long before = t.allocations;
  _Atomic int64_t total = 0;
  for (int i = 0; i < 2000; ++i) {
    tj_thread_pool_parallel_for(pool, 64, noop_task, &total);
  }
  CHECK_EQ_INT(2000 * 64, atomic_load(&total));
  CHECK_EQ_INT(before, t.allocations);
  usleep(20000);  // past the spin window: workers sleep
  tj_thread_pool_parallel_for(pool, 1000, noop_task, &total);
  CHECK_EQ_INT(2000 * 64 + 1000, atomic_load(&total));
  usleep(20000);
  tj_thread_pool_destroy(pool);
  CHECK_EQ_INT(0, t.live_blocks);
}

int main(void) {
  RUN_TEST(covers_every_unit_once);
  RUN_TEST(nested_calls_run_inline);
  RUN_TEST(concurrent_callers);
  RUN_TEST(host_hook);
  RUN_TEST(steady_state_and_sleep);
  TEST_MAIN_END();
}
