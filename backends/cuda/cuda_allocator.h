// A caching device-memory allocator (the idea of PyTorch's
// CUDACachingAllocator, much smaller).
//
// cuMemAlloc and cuMemFree are slow (tens to hundreds of microseconds, and
// cuMemFree synchronizes the device), so freed blocks are kept and handed
// out again. Requests are rounded up to size classes (multiples of 512
// bytes, eight classes per power of two, so at most 12.5% is wasted) and a
// block is only reused for its own class: no splitting, so a cached block is
// always one whole driver allocation.
//
// Stream-ordered reuse: a block is freed "on" the stream of its last use.
// A later allocation on that same stream may reuse it at once, since the
// stream runs its work in order. An allocation on another stream prefers
// its own blocks; when it takes a block last used on stream S it first makes
// its stream wait for the work enqueued so far on S. If the driver runs out
// of memory, every cached block is released (after a synchronize) and the
// allocation retried once.
//
// The device side is reached through tj_cuda_memory_ops_t, so the caching
// logic is tested on machines without a GPU (tests/cuda/).
// Thread-safe.

#ifndef TJ_BACKENDS_CUDA_CUDA_ALLOCATOR_H_
#define TJ_BACKENDS_CUDA_CUDA_ALLOCATOR_H_

#include "backends/cuda/cuda_abi.h"
#include "lib/base.h"

// What the allocator needs from a device. Each returns NULL or a status;
// alloc returns OUT_OF_MEMORY when the device is full.
typedef struct tj_cuda_memory_ops_t {
  void* self;
  tj_status_t (*alloc)(void* self, size_t bytes, tj_cu_deviceptr_t* out_ptr);
  tj_status_t (*free)(void* self, tj_cu_deviceptr_t ptr);
  // Waits for all work on every stream of the device.
  tj_status_t (*synchronize)(void* self);
  // Makes |stream| wait (on the device, without blocking the host) for the
  // work enqueued so far on |prior|.
  tj_status_t (*stream_wait)(void* self, tj_cu_stream_t stream,
                             tj_cu_stream_t prior);
} tj_cuda_memory_ops_t;

typedef struct tj_cuda_allocator_stats_t {
  uint64_t bytes_requested;  // sum of the sizes asked for, blocks in use
  uint64_t bytes_in_use;     // class-rounded bytes of blocks in use
  uint64_t bytes_reserved;   // in use + cached: what the driver gave us
  uint64_t peak_bytes_in_use;
  uint64_t peak_bytes_reserved;
  uint64_t num_allocs;  // successful tj_cuda_allocator_alloc calls
  uint64_t num_frees;
  uint64_t num_cache_hits;           // allocations served from the cache
  uint64_t num_cross_stream_reuses;  // hits that needed a stream wait
  uint64_t num_driver_allocs;
  uint64_t num_driver_frees;
  uint64_t num_oom_releases;  // cache flushes forced by device OOM
} tj_cuda_allocator_stats_t;

typedef struct tj_cuda_allocator_t tj_cuda_allocator_t;

// The largest request: 2^46 bytes (64 TiB) keeps class arithmetic exact.
#define TJ_CUDA_ALLOCATOR_MAX_BYTES ((size_t)1 << 46)

// The size class of |bytes| (1 <= |bytes| <= TJ_CUDA_ALLOCATOR_MAX_BYTES):
// its index and rounded size. Exposed for tests.
uint32_t tj_cuda_size_class(size_t bytes, size_t* out_class_bytes);

// Creates an allocator over |ops| (copied; |ops->self| is borrowed and must
// outlive the allocator). Bookkeeping comes from |host|. On failure
// |*out_allocator| is NULL.
tj_status_t tj_cuda_allocator_create(tj_allocator_t host,
                                     const tj_cuda_memory_ops_t* ops,
                                     tj_cuda_allocator_t** out_allocator);

// Synchronizes, then returns every block, cached or still in use, to the
// device. NULL is a no-op. Failures of the device calls are ignored: there
// is no one left to report them to.
void tj_cuda_allocator_destroy(tj_cuda_allocator_t* allocator);

// A block of at least |bytes| (256-byte aligned) usable on |stream| in
// stream order. |bytes| == 0 gives a 512-byte block (a distinct, valid
// pointer). Too large a request is INVALID_ARGUMENT; a full device (even
// after releasing the cache) or host is OUT_OF_MEMORY. On failure
// |*out_ptr| is 0.
tj_status_t tj_cuda_allocator_alloc(tj_cuda_allocator_t* allocator,
                                    size_t bytes, tj_cu_stream_t stream,
                                    tj_cu_deviceptr_t* out_ptr);

// Returns |ptr| to the cache. Its last use must have been enqueued on
// |stream| (or the caller must have synchronized that use). A pointer this
// allocator did not hand out, or one freed twice, is INVALID_ARGUMENT and
// changes nothing.
tj_status_t tj_cuda_allocator_free(tj_cuda_allocator_t* allocator,
                                   tj_cu_deviceptr_t ptr,
                                   tj_cu_stream_t stream);

// Synchronizes the device and gives every cached (free) block back to the
// driver. Blocks in use are untouched.
tj_status_t tj_cuda_allocator_release_cached(tj_cuda_allocator_t* allocator);

void tj_cuda_allocator_stats(tj_cuda_allocator_t* allocator,
                             tj_cuda_allocator_stats_t* out_stats);

#endif  // TJ_BACKENDS_CUDA_CUDA_ALLOCATOR_H_
