// The caching allocator's policy, on a fake device: runs on every machine.

#include "backends/cuda/cuda_allocator.h"

#include <pthread.h>

#include "tests/unit/test.h"

//===--- a fake device: address counter, capacity, call log ---===//

#define kMaxLive 4096

typedef struct fake_device_t {
  tj_cu_deviceptr_t next;
  size_t capacity;     // bytes the device holds
  size_t outstanding;  // bytes allocated and not freed
  tj_cu_deviceptr_t live[kMaxLive];
  size_t live_size[kMaxLive];
  int num_live;
  int allocs, frees, bad_frees, syncs, waits;
  tj_cu_stream_t last_wait_stream, last_wait_prior;
} fake_device_t;

static tj_status_t fake_alloc(void* self, size_t bytes,
                              tj_cu_deviceptr_t* out_ptr) {
  fake_device_t* f = self;
  if (f->outstanding + bytes > f->capacity || f->num_live == kMaxLive)
    return tj_status_oom();
  *out_ptr = f->next;
  f->next += (bytes + 4095) / 4096 * 4096;
  f->live[f->num_live] = *out_ptr;
  f->live_size[f->num_live++] = bytes;
  f->outstanding += bytes;
  ++f->allocs;
  return NULL;
}

static tj_status_t fake_free(void* self, tj_cu_deviceptr_t ptr) {
  fake_device_t* f = self;
  for (int i = 0; i < f->num_live; ++i) {
    if (f->live[i] == ptr) {
      f->outstanding -= f->live_size[i];
      f->live[i] = f->live[f->num_live - 1];
      f->live_size[i] = f->live_size[--f->num_live];
      ++f->frees;
      return NULL;
    }
  }
  ++f->bad_frees;
  return tj_status_make(TJ_STATUS_BACKEND_FAILURE, "fake: bad free");
}

static tj_status_t fake_synchronize(void* self) {
  ++((fake_device_t*)self)->syncs;
  return NULL;
}

static tj_status_t fake_stream_wait(void* self, tj_cu_stream_t stream,
                                    tj_cu_stream_t prior) {
  fake_device_t* f = self;
  ++f->waits;
  f->last_wait_stream = stream;
  f->last_wait_prior = prior;
  return NULL;
}

static void fake_initialize(fake_device_t* f, size_t capacity) {
  memset(f, 0, sizeof(*f));
  f->next = 0x7f0000000000ull;
  f->capacity = capacity;
}

static tj_cuda_memory_ops_t fake_ops(fake_device_t* f) {
  tj_cuda_memory_ops_t ops = {f, fake_alloc, fake_free, fake_synchronize,
                              fake_stream_wait};
  return ops;
}

// Streams are opaque handles: any distinct values will do.
#define S1 ((tj_cu_stream_t)(uintptr_t)0x1000)
#define S2 ((tj_cu_stream_t)(uintptr_t)0x2000)

static tj_cuda_allocator_t* make(fake_device_t* f, size_t capacity) {
  fake_initialize(f, capacity);
  tj_cuda_memory_ops_t ops = fake_ops(f);
  tj_cuda_allocator_t* a = NULL;
  CHECK_OK(tj_cuda_allocator_create(tj_allocator_system(), &ops, &a));
  return a;
}

//===--- tests ---===//

TEST(size_classes) {
  struct {
    size_t bytes, class_bytes;
  } cases[] = {
      {0, 512},
      {1, 512},
      {512, 512},
      {513, 1024},
      {4096, 4096},
      {4097, 4608},
      {8192, 8192},
      {8193, 9216},
      {1 << 20, 1 << 20},
      {(1 << 20) + 1, (1 << 20) + (1 << 17)},
      {TJ_CUDA_ALLOCATOR_MAX_BYTES, TJ_CUDA_ALLOCATOR_MAX_BYTES},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(cases); ++i) {
    size_t got;
    tj_cuda_size_class(cases[i].bytes, &got);
    CHECK_EQ_INT(cases[i].class_bytes, got);
  }
  // Over the whole range: classes grow with the index, cover the request,
  // waste at most 1/8 above 4 KiB, and are multiples of 512.
  size_t prev_bytes = 0;
  uint32_t prev_index = 0;
  int bad = 0;
  for (size_t bytes = 1; bytes <= TJ_CUDA_ALLOCATOR_MAX_BYTES;
       bytes += bytes / 7 + 1) {
    size_t c;
    uint32_t index = tj_cuda_size_class(bytes, &c);
    if (c < bytes || c % 512 != 0) ++bad;
    if (bytes > 4096 && (c - bytes) * 8 > bytes) ++bad;
    if (index < prev_index ||
        (index == prev_index && c != prev_bytes && prev_bytes != 0))
      ++bad;
    if (index > prev_index && c <= prev_bytes) ++bad;
    if (index >= 8 + 34 * 8) ++bad;
    prev_index = index;
    prev_bytes = c;
  }
  CHECK_EQ_INT(0, bad);
  size_t top;
  CHECK_EQ_INT(8 + 34 * 8 - 1,
               tj_cuda_size_class(TJ_CUDA_ALLOCATOR_MAX_BYTES, &top));
}

TEST(same_stream_reuse) {
  fake_device_t f;
  tj_cuda_allocator_t* a = make(&f, 1 << 30);
  tj_cu_deviceptr_t p = 0, q = 0, r = 0;
  CHECK_OK(tj_cuda_allocator_alloc(a, 1000, S1, &p));
  CHECK(p != 0 && p % 512 == 0);
  CHECK_OK(tj_cuda_allocator_free(a, p, S1));
  // 1000 and 900 share the 1024 class.
  CHECK_OK(tj_cuda_allocator_alloc(a, 900, S1, &q));
  CHECK_EQ_INT(p, q);
  CHECK_EQ_INT(0, f.waits);
  // Another class gets a new block.
  CHECK_OK(tj_cuda_allocator_alloc(a, 5000, S1, &r));
  CHECK(r != q);
  tj_cuda_allocator_stats_t s;
  tj_cuda_allocator_stats(a, &s);
  CHECK_EQ_INT(3, s.num_allocs);
  CHECK_EQ_INT(1, s.num_frees);
  CHECK_EQ_INT(1, s.num_cache_hits);
  CHECK_EQ_INT(2, s.num_driver_allocs);
  CHECK_EQ_INT(1024 + 5120, s.bytes_in_use);
  CHECK_EQ_INT(900 + 5000, s.bytes_requested);
  CHECK_EQ_INT(1024 + 5120, s.bytes_reserved);
  CHECK_EQ_INT(1024 + 5120, s.peak_bytes_in_use);
  tj_cuda_allocator_destroy(a);
  CHECK_EQ_INT(0, f.outstanding);
  CHECK_EQ_INT(0, f.bad_frees);
}

TEST(cross_stream_reuse_waits) {
  fake_device_t f;
  tj_cuda_allocator_t* a = make(&f, 1 << 30);
  tj_cu_deviceptr_t p1 = 0, p2 = 0, q = 0;
  CHECK_OK(tj_cuda_allocator_alloc(a, 4096, S1, &p1));
  CHECK_OK(tj_cuda_allocator_alloc(a, 4096, S2, &p2));
  CHECK_OK(tj_cuda_allocator_free(a, p1, S1));
  CHECK_OK(tj_cuda_allocator_free(a, p2, S2));
  // p2 (S2's) was freed last and heads the bin, yet S1 gets its own p1.
  CHECK_OK(tj_cuda_allocator_alloc(a, 4096, S1, &q));
  CHECK_EQ_INT(p1, q);
  CHECK_EQ_INT(0, f.waits);
  // Now only S2's block is cached: S1 may take it after waiting on S2.
  tj_cu_deviceptr_t r = 0;
  CHECK_OK(tj_cuda_allocator_alloc(a, 4096, S1, &r));
  CHECK_EQ_INT(p2, r);
  CHECK_EQ_INT(1, f.waits);
  CHECK(f.last_wait_stream == S1 && f.last_wait_prior == S2);
  tj_cuda_allocator_stats_t s;
  tj_cuda_allocator_stats(a, &s);
  CHECK_EQ_INT(1, s.num_cross_stream_reuses);
  CHECK_EQ_INT(2, s.num_driver_allocs);
  tj_cuda_allocator_destroy(a);
  CHECK_EQ_INT(0, f.outstanding);
}

TEST(bad_frees_change_nothing) {
  fake_device_t f;
  tj_cuda_allocator_t* a = make(&f, 1 << 30);
  tj_cu_deviceptr_t p = 0;
  CHECK_OK(tj_cuda_allocator_alloc(a, 100, S1, &p));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "did not allocate",
               tj_cuda_allocator_free(a, p + 512, S1));
  CHECK_OK(tj_cuda_allocator_free(a, p, S1));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "freed twice",
               tj_cuda_allocator_free(a, p, S1));
  tj_cuda_allocator_stats_t s;
  tj_cuda_allocator_stats(a, &s);
  CHECK_EQ_INT(1, s.num_frees);
  CHECK_EQ_INT(0, s.bytes_in_use);
  CHECK_EQ_INT(512, s.bytes_reserved);
  tj_cu_deviceptr_t big = 1;
  CHECK_STATUS(
      TJ_STATUS_INVALID_ARGUMENT, "limit",
      tj_cuda_allocator_alloc(a, TJ_CUDA_ALLOCATOR_MAX_BYTES + 1, S1, &big));
  CHECK_EQ_INT(0, big);
  tj_cuda_allocator_destroy(a);
  CHECK_EQ_INT(0, f.outstanding);
}

TEST(device_oom_releases_cache_and_retries) {
  fake_device_t f;
  tj_cuda_allocator_t* a = make(&f, 1 << 20);
  tj_cu_deviceptr_t p = 0, q = 0, r = 0;
  CHECK_OK(tj_cuda_allocator_alloc(a, 600 * 1024, S1, &p));
  CHECK_OK(tj_cuda_allocator_free(a, p, S1));
  // A different class does not fit beside the cached block: the cache is
  // flushed (after a synchronize) and the allocation retried.
  CHECK_OK(tj_cuda_allocator_alloc(a, 700 * 1024, S1, &q));
  CHECK(q != 0);
  CHECK_EQ_INT(1, f.syncs);
  tj_cuda_allocator_stats_t s;
  tj_cuda_allocator_stats(a, &s);
  CHECK_EQ_INT(1, s.num_oom_releases);
  CHECK_EQ_INT(1, s.num_driver_frees);
  CHECK_EQ_INT(s.bytes_in_use, s.bytes_reserved);
  // A request that cannot fit even with an empty cache is OUT_OF_MEMORY
  // and leaves no trace.
  r = 1;
  CHECK_STATUS(TJ_STATUS_OUT_OF_MEMORY, "",
               tj_cuda_allocator_alloc(a, 700 * 1024, S1, &r));
  CHECK_EQ_INT(0, r);
  tj_cuda_allocator_stats_t after;
  tj_cuda_allocator_stats(a, &after);
  CHECK_EQ_INT(s.bytes_reserved, after.bytes_reserved);
  CHECK_EQ_INT(s.num_allocs, after.num_allocs);
  tj_cuda_allocator_destroy(a);
  CHECK_EQ_INT(0, f.outstanding);
}

TEST(release_cached_on_demand) {
  fake_device_t f;
  tj_cuda_allocator_t* a = make(&f, 1 << 30);
  tj_cu_deviceptr_t ptrs[10];
  for (int i = 0; i < 10; ++i)
    CHECK_OK(tj_cuda_allocator_alloc(a, (size_t)(i + 1) * 10000, S1, &ptrs[i]));
  for (int i = 0; i < 10; i += 2)
    CHECK_OK(tj_cuda_allocator_free(a, ptrs[i], S1));
  tj_cuda_allocator_stats_t s;
  tj_cuda_allocator_stats(a, &s);
  CHECK(s.bytes_reserved > s.bytes_in_use);
  CHECK_OK(tj_cuda_allocator_release_cached(a));
  tj_cuda_allocator_stats(a, &s);
  CHECK_EQ_INT(s.bytes_in_use, s.bytes_reserved);
  CHECK_EQ_INT(5, f.num_live);
  CHECK_EQ_INT(1, f.syncs);
  // Nothing cached: no synchronize.
  CHECK_OK(tj_cuda_allocator_release_cached(a));
  CHECK_EQ_INT(1, f.syncs);
  // Destroy returns the blocks still in use.
  tj_cuda_allocator_destroy(a);
  CHECK_EQ_INT(0, f.num_live);
  CHECK_EQ_INT(0, f.bad_frees);
}

// Enough blocks to grow the pointer table several times.
static tj_status_t churn(tj_allocator_t host, fake_device_t* f) {
  tj_cuda_memory_ops_t ops = fake_ops(f);
  tj_cuda_allocator_t* a = NULL;
  TJ_RETURN_IF_ERROR(tj_cuda_allocator_create(host, &ops, &a));
  tj_cu_deviceptr_t ptrs[300];
  tj_status_t status = NULL;
  int n = 0;
  for (; n < 300 && !status; ++n)
    status =
        tj_cuda_allocator_alloc(a, (size_t)(n % 7 + 1) * 3000, S1, &ptrs[n]);
  if (status) --n;
  for (int i = 0; i < n && !status; i += 3)
    status = tj_cuda_allocator_free(a, ptrs[i], S1);
  tj_cuda_allocator_destroy(a);
  return status;
}

TEST(host_oom_sweep) {
  for (long fail_at = 0;; ++fail_at) {
    tj_test_allocator_t t;
    tj_test_allocator_initialize(&t, fail_at);
    fake_device_t f;
    fake_initialize(&f, (size_t)1 << 30);
    tj_status_t status = churn(tj_test_allocator_get(&t), &f);
    CHECK_EQ_INT(0, t.live_blocks);
    CHECK_EQ_INT(0, t.bad_frees);
    CHECK_EQ_INT(0, f.outstanding);
    if (!status) break;
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(status));
    tj_status_free(status);
    if (fail_at > 10000) {
      CHECK(!"sweep did not terminate");
      break;
    }
  }
}

typedef struct worker_t {
  tj_cuda_allocator_t* a;
  tj_cu_stream_t stream;
  int failures;
} worker_t;

static void* work(void* arg) {
  worker_t* w = arg;
  tj_cu_deviceptr_t ptrs[8] = {0};
  for (int round = 0; round < 2000; ++round) {
    int slot = round % 8;
    if (ptrs[slot]) {
      tj_status_t s = tj_cuda_allocator_free(w->a, ptrs[slot], w->stream);
      if (s) ++w->failures;
      tj_status_free(s);
    }
    tj_status_t s = tj_cuda_allocator_alloc(
        w->a, (size_t)(round % 5 + 1) * 1000, w->stream, &ptrs[slot]);
    if (s) ++w->failures;
    tj_status_free(s);
  }
  for (int i = 0; i < 8; ++i) {
    tj_status_t s = tj_cuda_allocator_free(w->a, ptrs[i], w->stream);
    if (s) ++w->failures;
    tj_status_free(s);
  }
  return NULL;
}

TEST(threads) {
  fake_device_t f;
  tj_cuda_allocator_t* a = make(&f, (size_t)1 << 30);
  worker_t w[2] = {{a, S1, 0}, {a, S2, 0}};
  pthread_t t[2];
  for (int i = 0; i < 2; ++i) pthread_create(&t[i], NULL, work, &w[i]);
  for (int i = 0; i < 2; ++i) pthread_join(t[i], NULL);
  CHECK_EQ_INT(0, w[0].failures + w[1].failures);
  tj_cuda_allocator_stats_t s;
  tj_cuda_allocator_stats(a, &s);
  CHECK_EQ_INT(0, s.bytes_in_use);
  CHECK_EQ_INT(s.num_allocs, s.num_frees);
  tj_cuda_allocator_destroy(a);
  CHECK_EQ_INT(0, f.outstanding);
}

int main(void) {
  RUN_TEST(size_classes);
  RUN_TEST(same_stream_reuse);
  RUN_TEST(cross_stream_reuse_waits);
  RUN_TEST(bad_frees_change_nothing);
  RUN_TEST(device_oom_releases_cache_and_retries);
  RUN_TEST(release_cached_on_demand);
  RUN_TEST(host_oom_sweep);
  RUN_TEST(threads);
  TEST_MAIN_END();
}
