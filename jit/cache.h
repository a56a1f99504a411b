// The kernel cache: compiled object code keyed by everything it depends on,
// kept in memory per context and on disk across processes.
//
// Key: a 128-bit XXH3 hash of (the library's build-id, the canonical text
// of the kernels, the target key naming triple, CPU, features and LLVM
// version, the library version), built with tj_cache_hasher_* (the
// build-id goes in first, by tj_cache_hasher_initialize: a rebuilt library
// never runs objects an older build's code generator made). The disk cache is a
// directory (0700 when we create it) of files named by the key, each
//   "TJOBJ\0\0\0" | u32 format | u32 header bytes | key (16) |
//   u64 payload bytes | u64 XXH3-64 of the payload | payload
// written (0600) to a temporary name and renamed, so readers never see a
// partial file. A missing, truncated, corrupt or foreign file is a miss (and
// is rewritten by the next store), never an error: a cache must not be able
// to break a compile.
//
// The disk cache holds native code that the process runs: it is trusted
// only when no one but this user can write it (tj_disk_cache_open, and
// the threat model in include/tensorjit/tj_executable.h). A file is opened
// without following links or blocking (a FIFO is a miss, not a hang), and
// must be a regular file of this user that no one else may write. The
// checksum catches accidents only; what an object must look like before it
// is linked is checked by its user (jit/object_check.h), and an object that
// does not link is a miss too.

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

// The build-id every key starts with (|*out_size| 0 when the object holding
// the library has none: then the version strings alone tell builds apart).
const uint8_t* tj_cache_build_id(size_t* out_size);

// 32 lowercase hex digits and a NUL.
void tj_cache_key_format(tj_cache_key_t key, char out[33]);

//===--- the per-context memory cache ---===//

// Returns in |*out_hit| whether |key| is cached in |context|'s memory cache;
// if so, |*out_bytes| is a copy (allocated from |allocator|, owned by the
// caller) of |*out_size| bytes.
tj_status_t tj_memory_cache_lookup(tj_context_t* context, tj_cache_key_t key,
                                   tj_allocator_t allocator, void** out_bytes,
                                   size_t* out_size, bool* out_hit);
// Stores a copy of |bytes| under |key|, replacing what was there (evicting
// the oldest entries beyond the cache's byte budget).
tj_status_t tj_memory_cache_store(tj_context_t* context, tj_cache_key_t key,
                                  const void* bytes, size_t size);

//===--- the disk cache ---===//

// The directory the disk cache uses for option |cache_dir| (see
// tj_compile_options_t.cache_dir): |cache_dir|, else |context|'s default
// (its cache_dir setting: $TJ_CACHE_DIR, else $XDG_CACHE_HOME/tensorjit,
// else $HOME/.cache/tensorjit, read when the context was created). Writes
// "" when the disk cache is disabled (the directory is "", or none could
// be named, or |cache_dir| and |context| are both NULL).
void tj_disk_cache_dir(const tj_context_t* context, const char* cache_dir,
                       char* out, size_t size);

// tj_disk_cache_dir, then the trust check: the directory is created
// (0700, with any missing parents) and must belong to this user and be
// writable by no one else, and so must each directory above it (its real
// path), except that those may belong to root, and one writable by others
// is accepted if it has the sticky bit (/tmp). Otherwise |out| is "" (the
// memory cache only) and |context| is warned, once per directory and
// rule broken.
// A directory that cannot be created is left to tj_disk_cache_store to
// report.
void tj_disk_cache_open(tj_context_t* context, const char* cache_dir, char* out,
                        size_t size);

// Looks |key| up under |dir|. A valid file gives *out_hit = true and its
// payload (allocated from |allocator|, owned by the caller); anything else
// is a miss with a reason in |*out_reason| (static text, for TJ_LOG=cache).
// A file that another user owns or may write is a miss too, with a warning
// to |context| (NULL: none), once per context, directory and rule.
tj_status_t tj_disk_cache_load(tj_context_t* context, const char* dir,
                               tj_cache_key_t key, tj_allocator_t allocator,
                               void** out_bytes, size_t* out_size,
                               bool* out_hit, const char** out_reason);

// Writes |bytes| under |key| in |dir| (creating it 0700 if needed) through
// a temporary file and a rename. Failures return a status the caller
// reports as a warning; the compile itself has succeeded.
tj_status_t tj_disk_cache_store(const char* dir, tj_cache_key_t key,
                                const void* bytes, size_t size);

// Reports a failed tj_disk_cache_store (|status|, borrowed) as a warning
// through |context|, once per context and directory: a full disk or a
// directory we may not write costs the disk cache, never the compile,
// which goes on with the memory cache. NULL |status|: nothing.
void tj_disk_cache_warn_store(tj_context_t* context, const char* dir,
                              tj_status_t status);

#endif  // TJ_JIT_CACHE_H_
