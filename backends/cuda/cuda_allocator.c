// The caching device allocator; see cuda_allocator.h for the policy.

#include "backends/cuda/cuda_allocator.h"

#include <pthread.h>
#include <string.h>

// Classes: 512..4096 in steps of 512 (indices 0..7), then eight classes
// per power of two up to TJ_CUDA_ALLOCATOR_MAX_BYTES.
#define kMinClassBytes 512u
#define kNumClasses (8u + (46u - 12u) * 8u)
#define kInitialBuckets 64u

typedef struct block_t {
  tj_cu_deviceptr_t ptr;
  size_t size;            // the class size: what the driver allocated
  size_t requested;       // what the current owner asked for
  tj_cu_stream_t stream;  // the stream of the last (or current) use
  uint32_t class_index;
  bool in_use;
  struct block_t* prev;  // bin list, while cached
  struct block_t* next;
  struct block_t* hash_next;  // every block is in the table, used or not
} block_t;

struct tj_cuda_allocator_t {
  tj_allocator_t host;
  tj_cuda_memory_ops_t ops;
  pthread_mutex_t mutex;
  block_t* bins[kNumClasses];  // cached blocks, most recently freed first
  block_t** buckets;           // ptr -> block
  uint32_t num_buckets;        // a power of two
  uint32_t num_blocks;
  tj_cuda_allocator_stats_t stats;
};

static int floor_log2(uint64_t x) { return 63 - __builtin_clzll(x); }

uint32_t tj_cuda_size_class(size_t bytes, size_t* out_class_bytes) {
  if (bytes <= 8 * (size_t)kMinClassBytes) {
    size_t n = bytes == 0 ? 1 : (bytes + kMinClassBytes - 1) / kMinClassBytes;
    *out_class_bytes = n * kMinClassBytes;
    return (uint32_t)(n - 1);
  }
  int e = floor_log2((uint64_t)bytes - 1);  // 2^e < bytes <= 2^(e+1)
  size_t step = (size_t)1 << (e - 3);
  size_t k = (bytes + step - 1) / step;  // 9..16
  *out_class_bytes = k * step;
  return (uint32_t)(8 + (e - 12) * 8 + (int)(k - 9));
}

//===--- the pointer table ---===//

static uint32_t bucket_of(const tj_cuda_allocator_t* a, tj_cu_deviceptr_t ptr) {
  // Blocks are at least 512-byte aligned: drop the always-zero bits, then
  // Fibonacci hashing spreads the rest.
  uint64_t h = (uint64_t)(ptr >> 9) * 0x9E3779B97F4A7C15ull;
  return (uint32_t)(h >> 32) & (a->num_buckets - 1);
}

static block_t* table_find(const tj_cuda_allocator_t* a,
                           tj_cu_deviceptr_t ptr) {
  for (block_t* b = a->buckets[bucket_of(a, ptr)]; b; b = b->hash_next)
    if (b->ptr == ptr) return b;
  return NULL;
}

// Makes room for one more block, so that inserting cannot fail later.
static tj_status_t table_reserve(tj_cuda_allocator_t* a) {
  if (a->num_blocks < a->num_buckets) return NULL;
  uint32_t new_count = a->num_buckets * 2;
  block_t** fresh = tj_calloc(a->host, new_count, sizeof(*fresh));
  if (!fresh) return tj_status_oom();
  block_t** old = a->buckets;
  uint32_t old_count = a->num_buckets;
  a->buckets = fresh;
  a->num_buckets = new_count;
  for (uint32_t i = 0; i < old_count; ++i) {
    for (block_t* b = old[i]; b;) {
      block_t* next = b->hash_next;
      uint32_t at = bucket_of(a, b->ptr);
      b->hash_next = fresh[at];
      fresh[at] = b;
      b = next;
    }
  }
  tj_free(a->host, old, old_count * sizeof(*old));
  return NULL;
}

static void table_insert(tj_cuda_allocator_t* a, block_t* b) {
  uint32_t at = bucket_of(a, b->ptr);
  b->hash_next = a->buckets[at];
  a->buckets[at] = b;
  ++a->num_blocks;
}

static void table_remove(tj_cuda_allocator_t* a, block_t* b) {
  block_t** link = &a->buckets[bucket_of(a, b->ptr)];
  while (*link != b) link = &(*link)->hash_next;
  *link = b->hash_next;
  --a->num_blocks;
}

//===--- bins ---===//

static void bin_push(tj_cuda_allocator_t* a, block_t* b) {
  block_t** head = &a->bins[b->class_index];
  b->prev = NULL;
  b->next = *head;
  if (*head) (*head)->prev = b;
  *head = b;
}

static void bin_remove(tj_cuda_allocator_t* a, block_t* b) {
  if (b->prev)
    b->prev->next = b->next;
  else
    a->bins[b->class_index] = b->next;
  if (b->next) b->next->prev = b->prev;
  b->prev = b->next = NULL;
}

//===--- lifecycle ---===//

tj_status_t tj_cuda_allocator_create(tj_allocator_t host,
                                     const tj_cuda_memory_ops_t* ops,
                                     tj_cuda_allocator_t** out_allocator) {
  *out_allocator = NULL;
  tj_cuda_allocator_t* a = tj_calloc(host, 1, sizeof(*a));
  if (!a) return tj_status_oom();
  a->host = host;
  a->ops = *ops;
  a->num_buckets = kInitialBuckets;
  a->buckets = tj_calloc(host, a->num_buckets, sizeof(*a->buckets));
  if (!a->buckets) {
    tj_free(host, a, sizeof(*a));
    return tj_status_oom();
  }
  if (pthread_mutex_init(&a->mutex, NULL) != 0) {
    tj_free(host, a->buckets, a->num_buckets * sizeof(*a->buckets));
    tj_free(host, a, sizeof(*a));
    return tj_internal("cuda allocator: pthread_mutex_init failed");
  }
  *out_allocator = a;
  return NULL;
}

// Gives |b| back to the driver and forgets it. |b| must not be in a bin.
static tj_status_t drop_block(tj_cuda_allocator_t* a, block_t* b) {
  tj_status_t status = a->ops.free(a->ops.self, b->ptr);
  table_remove(a, b);
  a->stats.bytes_reserved -= b->size;
  ++a->stats.num_driver_frees;
  tj_free(a->host, b, sizeof(*b));
  return status;
}

void tj_cuda_allocator_destroy(tj_cuda_allocator_t* a) {
  if (!a) return;
  tj_status_free(a->ops.synchronize(a->ops.self));
  for (uint32_t i = 0; i < a->num_buckets; ++i) {
    while (a->buckets[i]) {
      block_t* b = a->buckets[i];
      if (!b->in_use) bin_remove(a, b);
      tj_status_free(drop_block(a, b));
    }
  }
  pthread_mutex_destroy(&a->mutex);
  tj_free(a->host, a->buckets, a->num_buckets * sizeof(*a->buckets));
  tj_free(a->host, a, sizeof(*a));
}

// Frees every cached block. Caller holds the mutex.
static tj_status_t release_cached_locked(tj_cuda_allocator_t* a) {
  bool any = false;
  for (uint32_t c = 0; c < kNumClasses && !any; ++c) any = a->bins[c] != NULL;
  if (!any) return NULL;
  // A cached block may still be read or written by work enqueued before
  // its free; the driver must not recycle it under that work.
  TJ_RETURN_IF_ERROR(a->ops.synchronize(a->ops.self));
  tj_status_t first = NULL;
  for (uint32_t c = 0; c < kNumClasses; ++c) {
    while (a->bins[c]) {
      block_t* b = a->bins[c];
      bin_remove(a, b);
      first = tj_status_join(first, drop_block(a, b));
    }
  }
  return first;
}

tj_status_t tj_cuda_allocator_release_cached(tj_cuda_allocator_t* a) {
  pthread_mutex_lock(&a->mutex);
  tj_status_t status = release_cached_locked(a);
  pthread_mutex_unlock(&a->mutex);
  return status;
}

//===--- alloc / free ---===//

// A cached block of class |c| for |stream|: one last used on |stream| if
// any, else the most recently freed one, ordered after its last use.
static tj_status_t take_cached(tj_cuda_allocator_t* a, uint32_t c,
                               tj_cu_stream_t stream, block_t** out_block) {
  *out_block = NULL;
  block_t* any = a->bins[c];
  for (block_t* b = any; b; b = b->next) {
    if (b->stream == stream) {
      bin_remove(a, b);
      *out_block = b;
      return NULL;
    }
  }
  if (!any) return NULL;
  TJ_RETURN_IF_ERROR(a->ops.stream_wait(a->ops.self, stream, any->stream));
  ++a->stats.num_cross_stream_reuses;
  bin_remove(a, any);
  *out_block = any;
  return NULL;
}

static tj_status_t alloc_locked(tj_cuda_allocator_t* a, size_t bytes,
                                tj_cu_stream_t stream, block_t** out_block) {
  size_t class_bytes;
  uint32_t c = tj_cuda_size_class(bytes, &class_bytes);
  block_t* b;
  TJ_RETURN_IF_ERROR(take_cached(a, c, stream, &b));
  if (b) {
    ++a->stats.num_cache_hits;
    *out_block = b;
    return NULL;
  }
  // Everything that can fail on the host happens before the driver call,
  // so a failure leaves no device memory behind.
  TJ_RETURN_IF_ERROR(table_reserve(a));
  b = tj_calloc(a->host, 1, sizeof(*b));
  if (!b) return tj_status_oom();
  tj_cu_deviceptr_t ptr = 0;
  tj_status_t status = a->ops.alloc(a->ops.self, class_bytes, &ptr);
  if (tj_status_code(status) == TJ_STATUS_OUT_OF_MEMORY) {
    tj_status_free(status);
    ++a->stats.num_oom_releases;
    status = release_cached_locked(a);
    if (!status) status = a->ops.alloc(a->ops.self, class_bytes, &ptr);
  }
  if (status) {
    tj_free(a->host, b, sizeof(*b));
    return status;
  }
  b->ptr = ptr;
  b->size = class_bytes;
  b->class_index = c;
  table_insert(a, b);
  ++a->stats.num_driver_allocs;
  a->stats.bytes_reserved += class_bytes;
  if (a->stats.bytes_reserved > a->stats.peak_bytes_reserved)
    a->stats.peak_bytes_reserved = a->stats.bytes_reserved;
  *out_block = b;
  return NULL;
}

tj_status_t tj_cuda_allocator_alloc(tj_cuda_allocator_t* a, size_t bytes,
                                    tj_cu_stream_t stream,
                                    tj_cu_deviceptr_t* out_ptr) {
  *out_ptr = 0;
  if (bytes > TJ_CUDA_ALLOCATOR_MAX_BYTES)
    return tj_invalid(
        "cuda allocator: %zu bytes requested; the limit is 2^46 bytes", bytes);
  pthread_mutex_lock(&a->mutex);
  block_t* b = NULL;
  tj_status_t status = alloc_locked(a, bytes, stream, &b);
  if (!status) {
    b->in_use = true;
    b->stream = stream;
    b->requested = bytes;
    ++a->stats.num_allocs;
    a->stats.bytes_in_use += b->size;
    a->stats.bytes_requested += bytes;
    if (a->stats.bytes_in_use > a->stats.peak_bytes_in_use)
      a->stats.peak_bytes_in_use = a->stats.bytes_in_use;
    *out_ptr = b->ptr;
  }
  pthread_mutex_unlock(&a->mutex);
  return status;
}

tj_status_t tj_cuda_allocator_free(tj_cuda_allocator_t* a,
                                   tj_cu_deviceptr_t ptr,
                                   tj_cu_stream_t stream) {
  pthread_mutex_lock(&a->mutex);
  block_t* b = table_find(a, ptr);
  tj_status_t status = NULL;
  if (!b) {
    status = tj_invalid(
        "cuda allocator: free of 0x%llx, which this allocator did not "
        "allocate",
        ptr);
  } else if (!b->in_use) {
    status = tj_invalid("cuda allocator: 0x%llx freed twice", ptr);
  } else {
    b->in_use = false;
    b->stream = stream;
    a->stats.bytes_in_use -= b->size;
    a->stats.bytes_requested -= b->requested;
    b->requested = 0;
    ++a->stats.num_frees;
    bin_push(a, b);
  }
  pthread_mutex_unlock(&a->mutex);
  return status;
}

void tj_cuda_allocator_stats(tj_cuda_allocator_t* a,
                             tj_cuda_allocator_stats_t* out_stats) {
  pthread_mutex_lock(&a->mutex);
  *out_stats = a->stats;
  pthread_mutex_unlock(&a->mutex);
}
