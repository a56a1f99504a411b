// The kernel cache: compiled object code keyed by everything it depends on,
// kept in memory per context and on disk across processes.
//
// Key: a 128-bit XXH3 hash of (the canonical text of the kernels, the
// target key naming triple, CPU, features and LLVM version, the library
// version), built with tj_cache_hasher_*. The disk cache is a directory
// (0700 when we create it) of files named by the key, each
//   "TJOBJ\0\0\0" | u32 format | u32 header bytes | key (16) |
//   u64 payload bytes | u64 XXH3-64 of the payload | payload
// written to a temporary name and renamed, so readers never see a partial
// file. A missing, truncated, corrupt or foreign file is a miss (and is
// rewritten by the next store), never an error: a cache must not be able to
// break a compile.

#ifndef TJ_JIT_CACHE_H_
#define TJ_JIT_CACHE_H_

#include "lib/base.h"

typedef struct tj_cache_key_t {
  uint64_t lo, hi;
} tj_cache_key_t;

// Incremental key construction. Parts are length-prefixed so that ("ab",
// "c") and ("a", "bc") differ.
typedef struct tj_cache_hasher_t {
  uint64_t state[96];  // room for XXH3_state_t, which must be 64-aligned
} tj_cache_hasher_t;

void tj_cache_hasher_initialize(tj_cache_hasher_t* hasher);
void tj_cache_hasher_update(tj_cache_hasher_t* hasher, const void* data,
                            size_t size);
void tj_cache_hasher_update_string(tj_cache_hasher_t* hasher, const char* s);
tj_cache_key_t tj_cache_hasher_finalize(tj_cache_hasher_t* hasher);

// 32 lowercase hex digits and a NUL.
void tj_cache_key_format(tj_cache_key_t key, char out[33]);

//===--- the per-context memory cache ---===//

// Returns in |*out_hit| whether |key| is cached in |context|'s memory cache;
// if so, |*out_bytes| is a copy (allocated from |allocator|, owned by the
// caller) of |*out_size| bytes.
tj_status_t tj_memory_cache_lookup(tj_context_t* context, tj_cache_key_t key,
                                   tj_allocator_t allocator, void** out_bytes,
                                   size_t* out_size, bool* out_hit);
// Stores a copy of |bytes| under |key| (evicting the oldest entries beyond
// the cache's byte budget).
tj_status_t tj_memory_cache_store(tj_context_t* context, tj_cache_key_t key,
                                  const void* bytes, size_t size);

//===--- the disk cache ---===//

// The directory the disk cache uses for option |cache_dir| (see
// tj_compile_options_t.cache_dir): |cache_dir|, else $TJ_CACHE_DIR, else
// $XDG_CACHE_HOME/tensorjit, else $HOME/.cache/tensorjit. Writes "" when the
// disk cache is disabled (|cache_dir| is "", or no directory can be named).
void tj_disk_cache_dir(const char* cache_dir, char* out, size_t size);

// Looks |key| up under |dir|. A valid file gives *out_hit = true and its
// payload (allocated from |allocator|, owned by the caller); anything else
// is a miss with a reason in |*out_reason| (static text, for TJ_LOG=cache).
tj_status_t tj_disk_cache_load(const char* dir, tj_cache_key_t key,
                               tj_allocator_t allocator, void** out_bytes,
                               size_t* out_size, bool* out_hit,
                               const char** out_reason);

// Writes |bytes| under |key| in |dir| (creating it 0700 if needed) through
// a temporary file and a rename. Failures return a status the caller
// reports as a warning; the compile itself has succeeded.
tj_status_t tj_disk_cache_store(const char* dir, tj_cache_key_t key,
                                const void* bytes, size_t size);

#endif  // TJ_JIT_CACHE_H_
