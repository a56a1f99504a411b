// The kernel cache (see cache.h): hashing, the per-context memory cache and
// the disk cache.

#include "jit/cache.h"

#include <elf.h>
#include <errno.h>
#include <link.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/env.h"
#include "lib/fs.h"

// xxHash as a header-only library: no link dependency, so the library loads
// on machines without libxxhash (the GPU machine among them).
#define XXH_INLINE_ALL
#include <xxhash.h>

//===--- keys ---===//

_Static_assert(sizeof(XXH3_state_t) <= sizeof(((tj_cache_hasher_t*)0)->state),
               "tj_cache_hasher_t too small for XXH3_state_t");

static XXH3_state_t* hasher_state(tj_cache_hasher_t* hasher) {
  // The struct is 8-aligned; XXH3_state_t wants 64. Align inside the buffer.
  uintptr_t p = (uintptr_t)hasher->state;
  return (XXH3_state_t*)((p + 63) & ~(uintptr_t)63);
}

// The build of the code that makes the objects: the GNU build-id of the
// loaded object holding this file (the shared library, or the executable
// that links the static one), which changes whenever any code of the
// library does. The version string alone would let a developer's new
// emitter be served objects an older build made (same version, different
// code); with the build-id a rebuild is a clean cache.
static uint8_t g_build_id[64];
static size_t g_build_id_size;
static pthread_once_t g_build_id_once = PTHREAD_ONCE_INIT;

static bool note_build_id(const uint8_t* p, size_t size) {
  // Elf64_Nhdr: namesz, descsz, type; name and desc padded to 4 bytes.
  for (size_t at = 0; at + 12 <= size;) {
    uint32_t namesz, descsz, type;
    memcpy(&namesz, p + at, 4);
    memcpy(&descsz, p + at + 4, 4);
    memcpy(&type, p + at + 8, 4);
    size_t name_at = at + 12, desc_at = name_at + ((namesz + 3u) & ~3u);
    size_t next = desc_at + ((descsz + 3u) & ~3u);
    if (next > size || next <= at) return false;
    if (type == NT_GNU_BUILD_ID && namesz == 4 &&
        memcmp(p + name_at, "GNU", 4) == 0 && descsz <= sizeof(g_build_id)) {
      memcpy(g_build_id, p + desc_at, descsz);
      g_build_id_size = descsz;
      return true;
    }
    at = next;
  }
  return false;
}

static int find_build_id(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  uintptr_t self = (uintptr_t)data;
  bool mine = false;
  for (int i = 0; i < info->dlpi_phnum && !mine; ++i) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    mine = ph->p_type == PT_LOAD && self >= lo && self - lo < ph->p_memsz;
  }
  if (!mine) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_NOTE &&
        note_build_id((const uint8_t*)(info->dlpi_addr + ph->p_vaddr),
                      ph->p_memsz)) {
      break;
    }
  }
  return 1;
}

static void read_build_id(void) {
  dl_iterate_phdr(find_build_id, (void*)(uintptr_t)&tj_cache_hasher_initialize);
}

const uint8_t* tj_cache_build_id(size_t* out_size) {
  pthread_once(&g_build_id_once, read_build_id);
  *out_size = g_build_id_size;
  return g_build_id;
}

void tj_cache_hasher_initialize(tj_cache_hasher_t* hasher) {
  XXH3_128bits_reset(hasher_state(hasher));
  // Every key starts with the build (none found: the version alone, which
  // the callers hash too).
  pthread_once(&g_build_id_once, read_build_id);
  tj_cache_hasher_update(hasher, g_build_id, g_build_id_size);
}

void tj_cache_hasher_update(tj_cache_hasher_t* hasher, const void* data,
                            size_t size) {
  uint64_t length = size;
  XXH3_128bits_update(hasher_state(hasher), &length, sizeof(length));
  if (size) XXH3_128bits_update(hasher_state(hasher), data, size);
}

void tj_cache_hasher_update_string(tj_cache_hasher_t* hasher, const char* s) {
  tj_cache_hasher_update(hasher, s, strlen(s));
}

tj_cache_key_t tj_cache_hasher_finalize(tj_cache_hasher_t* hasher) {
  XXH128_hash_t h = XXH3_128bits_digest(hasher_state(hasher));
  tj_cache_key_t key = {h.low64, h.high64};
  return key;
}

void tj_cache_key_format(tj_cache_key_t key, char out[33]) {
  snprintf(out, 33, "%016llx%016llx", (unsigned long long)key.hi,
           (unsigned long long)key.lo);
}

static bool key_equal(tj_cache_key_t a, tj_cache_key_t b) {
  return a.lo == b.lo && a.hi == b.hi;
}

//===--- the memory cache ---===//

// Beyond this many bytes of object code the oldest entries are dropped.
#define TJ_MEMORY_CACHE_BUDGET ((size_t)256 << 20)

typedef struct entry_t {
  tj_cache_key_t key;
  void* bytes;
  size_t size;
} entry_t;

typedef struct memory_cache_t {
  tj_allocator_t allocator;
  pthread_mutex_t mutex;
  entry_t* entries;  // oldest first
  uint32_t num_entries, capacity;
  size_t total_bytes;
  // The disk cache warnings given in this context (hashes of the
  // directory and the kind of problem): each is given once.
  uint64_t warned[64];
  uint32_t num_warned;
} memory_cache_t;

static tj_status_t memory_cache_create(tj_context_t* context,
                                       void** out_state) {
  tj_allocator_t al = tj_context_allocator(context);
  memory_cache_t* cache = tj_calloc(al, 1, sizeof(*cache));
  if (!cache) return tj_status_oom();
  cache->allocator = al;
  if (pthread_mutex_init(&cache->mutex, NULL) != 0) {
    tj_free(al, cache, sizeof(*cache));
    return tj_internal("kernel cache: pthread_mutex_init failed");
  }
  *out_state = cache;
  return NULL;
}

static void memory_cache_destroy(void* state) {
  memory_cache_t* cache = state;
  for (uint32_t i = 0; i < cache->num_entries; ++i) {
    tj_free(cache->allocator, cache->entries[i].bytes, cache->entries[i].size);
  }
  tj_free(cache->allocator, cache->entries, sizeof(entry_t) * cache->capacity);
  pthread_mutex_destroy(&cache->mutex);
  tj_free(cache->allocator, cache, sizeof(*cache));
}

static tj_status_t memory_cache(tj_context_t* context, memory_cache_t** out) {
  return tj_context_extension(context, TJ_CONTEXT_EXTENSION_KERNEL_CACHE,
                              memory_cache_create, memory_cache_destroy,
                              (void**)out);
}

tj_status_t tj_memory_cache_lookup(tj_context_t* context, tj_cache_key_t key,
                                   tj_allocator_t allocator, void** out_bytes,
                                   size_t* out_size, bool* out_hit) {
  *out_bytes = NULL;
  *out_size = 0;
  *out_hit = false;
  memory_cache_t* cache;
  TJ_RETURN_IF_ERROR(memory_cache(context, &cache));
  tj_status_t status = NULL;
  pthread_mutex_lock(&cache->mutex);
  for (uint32_t i = 0; i < cache->num_entries; ++i) {
    const entry_t* e = &cache->entries[i];
    if (!key_equal(e->key, key)) continue;
    void* copy = tj_alloc(allocator, e->size);
    if (!copy) {
      status = tj_status_oom();
    } else {
      memcpy(copy, e->bytes, e->size);
      *out_bytes = copy;
      *out_size = e->size;
      *out_hit = true;
    }
    break;
  }
  pthread_mutex_unlock(&cache->mutex);
  return status;
}

static void evict_oldest(memory_cache_t* cache) {
  tj_free(cache->allocator, cache->entries[0].bytes, cache->entries[0].size);
  cache->total_bytes -= cache->entries[0].size;
  memmove(cache->entries, cache->entries + 1,
          sizeof(entry_t) * (cache->num_entries - 1));
  --cache->num_entries;
}

tj_status_t tj_memory_cache_store(tj_context_t* context, tj_cache_key_t key,
                                  const void* bytes, size_t size) {
  if (size == 0 || size > TJ_MEMORY_CACHE_BUDGET) return NULL;
  memory_cache_t* cache;
  TJ_RETURN_IF_ERROR(memory_cache(context, &cache));
  void* copy = tj_alloc(cache->allocator, size);
  if (!copy) return tj_status_oom();
  memcpy(copy, bytes, size);
  tj_status_t status = NULL;
  pthread_mutex_lock(&cache->mutex);
  bool present = false;
  for (uint32_t i = 0; i < cache->num_entries && !present; ++i) {
    entry_t* e = &cache->entries[i];
    if (!key_equal(e->key, key)) continue;
    // Replaced: a caller that found the old bytes bad (a PTX that did not
    // link) stores what it made instead.
    present = true;
    void* old = e->bytes;
    size_t old_size = e->size;
    cache->total_bytes = cache->total_bytes - old_size + size;
    e->bytes = copy;
    e->size = size;
    copy = old;
    size = old_size;
  }
  if (!present) {
    status = tj_array_reserve(cache->allocator, (void**)&cache->entries,
                              &cache->capacity, cache->num_entries + 1,
                              sizeof(entry_t));
  }
  if (!present && !status) {
    while (cache->num_entries > 0 &&
           cache->total_bytes + size > TJ_MEMORY_CACHE_BUDGET) {
      evict_oldest(cache);
    }
    entry_t* e = &cache->entries[cache->num_entries++];
    e->key = key;
    e->bytes = copy;
    e->size = size;
    cache->total_bytes += size;
    copy = NULL;
  }
  pthread_mutex_unlock(&cache->mutex);
  tj_free(cache->allocator, copy, size);
  return status;
}

//===--- the disk cache ---===//

static const char kMagic[8] = {'T', 'J', 'O', 'B', 'J', 0, 0, 0};
enum { kFormatVersion = 1 };
// A file larger than this is not ours.
#define TJ_DISK_CACHE_MAX_PAYLOAD ((uint64_t)1 << 30)

typedef struct file_header_t {
  char magic[8];
  uint32_t format;
  uint32_t header_bytes;
  uint64_t key_lo, key_hi;
  uint64_t payload_bytes;
  uint64_t checksum;
} file_header_t;

void tj_disk_cache_dir(const tj_context_t* context, const char* cache_dir,
                       char* out, size_t size) {
  out[0] = '\0';
  if (!cache_dir) cache_dir = tj_setting(context, TJ_SETTING_CACHE_DIR);
  if (cache_dir && cache_dir[0]) snprintf(out, size, "%s", cache_dir);
}

static int file_path(const char* dir, tj_cache_key_t key, char* out,
                     size_t size) {
  char hex[33];
  tj_cache_key_format(key, hex);
  return snprintf(out, size, "%s/%s.tjo", dir, hex);
}

static bool read_all(int fd, void* data, size_t size) {
  unsigned char* p = data;
  while (size > 0) {
    ssize_t n = read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= (size_t)n;
  }
  return true;
}

static bool write_all(int fd, const void* data, size_t size) {
  const unsigned char* p = data;
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= (size_t)n;
  }
  return true;
}

// Warns through |context|'s diagnostics, once per context for each
// (|dir|, |kind|); nothing without a context.
static void warn_once(tj_context_t* context, const char* dir, const char* kind,
                      const char* format, ...) {
  memory_cache_t* cache = NULL;
  if (!context) return;
  tj_status_t status = memory_cache(context, &cache);
  if (status) {
    tj_status_free(status);
    return;
  }
  uint64_t id =
      XXH3_64bits_withSeed(dir, strlen(dir), XXH3_64bits(kind, strlen(kind)));
  bool seen = false;
  pthread_mutex_lock(&cache->mutex);
  for (uint32_t i = 0; i < cache->num_warned && !seen; ++i) {
    seen = cache->warned[i] == id;
  }
  if (!seen && cache->num_warned < sizeof(cache->warned) / sizeof(uint64_t)) {
    cache->warned[cache->num_warned++] = id;
  }
  pthread_mutex_unlock(&cache->mutex);
  if (seen) return;
  va_list args;
  va_start(args, format);
  tj_context_diagnosticv(context, TJ_SEVERITY_WARNING, format, args);
  va_end(args);
}

// Why a cache file with status |st| may not be loaded, or NULL: it must be
// a regular file of this user that no one else may write.
static const char* file_untrusted(const struct stat* st) {
  if (!S_ISREG(st->st_mode)) return "not a regular file";
  if (st->st_uid != geteuid()) return "owned by another user";
  if (st->st_mode & (S_IWGRP | S_IWOTH)) return "writable by group or others";
  return NULL;
}

tj_status_t tj_disk_cache_load(tj_context_t* context, const char* dir,
                               tj_cache_key_t key, tj_allocator_t allocator,
                               void** out_bytes, size_t* out_size,
                               bool* out_hit, const char** out_reason) {
  *out_bytes = NULL;
  *out_size = 0;
  *out_hit = false;
  *out_reason = "disabled";
  if (!dir[0]) return NULL;
  char path[4096];
  if (file_path(dir, key, path, sizeof(path)) >= (int)sizeof(path)) {
    *out_reason = "path too long";
    return NULL;
  }
  // Not following a symbolic link, and not blocking on a FIFO or a device
  // (opening one for reading waits for a writer): whatever is there is
  // looked at through the descriptor, so it cannot change in between.
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *out_reason = errno == ENOENT  ? "no file"
                  : errno == ELOOP ? "a symbolic link"
                                   : "cannot open";
    return NULL;
  }
  file_header_t h;
  struct stat st;
  tj_status_t status = NULL;
  void* payload = NULL;
  const char* untrusted = NULL;
  if (fstat(fd, &st) != 0) {
    *out_reason = "cannot stat";
  } else if ((untrusted = file_untrusted(&st))) {
    *out_reason = untrusted;
    if (S_ISREG(st.st_mode)) {
      warn_once(context, dir, untrusted,
                "cache: not loading %s: %s (uid %u, mode %04o; this process "
                "runs as uid %u): a cache file may hold only code that this "
                "user wrote; a miss",
                path, untrusted, (unsigned)st.st_uid,
                (unsigned)(st.st_mode & 07777), (unsigned)geteuid());
    }
  } else if (!read_all(fd, &h, sizeof(h))) {
    *out_reason = "truncated header";
  } else if (memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 ||
             h.format != kFormatVersion || h.header_bytes != sizeof(h)) {
    *out_reason = "foreign file";
  } else if (h.key_lo != key.lo || h.key_hi != key.hi) {
    *out_reason = "key mismatch";
  } else if (h.payload_bytes == 0 ||
             h.payload_bytes > TJ_DISK_CACHE_MAX_PAYLOAD ||
             (uint64_t)st.st_size != sizeof(h) + h.payload_bytes) {
    *out_reason = "wrong size";
  } else if (!(payload = tj_alloc(allocator, (size_t)h.payload_bytes))) {
    status = tj_status_oom();
  } else if (!read_all(fd, payload, (size_t)h.payload_bytes)) {
    *out_reason = "truncated payload";
  } else if (XXH3_64bits(payload, (size_t)h.payload_bytes) != h.checksum) {
    *out_reason = "checksum mismatch";
  } else {
    *out_bytes = payload;
    *out_size = (size_t)h.payload_bytes;
    *out_hit = true;
    *out_reason = "hit";
    payload = NULL;
  }
  if (payload) tj_free(allocator, payload, (size_t)h.payload_bytes);
  close(fd);
  return status;
}

// Why the directory |dir| (which exists) may not hold the disk cache, or
// NULL; |detail| gets the path and the owner or mode at fault. As ssh does
// for ~/.ssh: the directory must belong to this user and be writable by no
// one else, and so must each directory above it (its real path, links
// resolved), except that root may own those, and one that others may write
// is accepted if it has the sticky bit (/tmp): there no one else can
// rename or remove the entry below it that leads to ours.
static const char* dir_untrusted(const char* dir, char* detail,
                                 size_t detail_size) {
  char real[PATH_MAX];
  struct stat st;
  if (!realpath(dir, real) || stat(real, &st) != 0) {
    snprintf(detail, detail_size, "%s", dir);
    return "cannot resolve its path";
  }
  uid_t me = geteuid();
  snprintf(detail, detail_size,
           "%s (uid %u, mode %04o; this process runs as "
           "uid %u)",
           real, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
           (unsigned)me);
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  if (st.st_uid != me) return "the directory belongs to another user";
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return "the directory is writable by group or others";
  for (char* slash = strrchr(real, '/'); slash; slash = strrchr(real, '/')) {
    slash[slash == real ? 1 : 0] = '\0';  // the parent; "/" stays "/"
    if (stat(real, &st) != 0) return "cannot stat a parent directory";
    snprintf(detail, detail_size,
             "parent %s (uid %u, mode %04o; this "
             "process runs as uid %u)",
             real, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
             (unsigned)me);
    if (st.st_uid != me && st.st_uid != 0)
      return "a parent directory belongs to another user";
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
      return "a parent directory is writable by group or others";
    if (slash == real) break;
  }
  return NULL;
}

void tj_disk_cache_warn_store(tj_context_t* context, const char* dir,
                              tj_status_t status) {
  if (!status) return;
  warn_once(context, dir, "store",
            "cache: cannot write the disk cache in %s (%s); compiled code is "
            "kept in the memory cache only (further failures in this "
            "directory are not reported)",
            dir, tj_status_message(status));
}

void tj_disk_cache_open(tj_context_t* context, const char* cache_dir, char* out,
                        size_t size) {
  tj_disk_cache_dir(context, cache_dir, out, size);
  // A directory that cannot be made is left to the first store to report
  // (a miss, then a warning); one that exists must be trusted.
  if (!out[0] || tj_make_directories(out, 0700) != 0) return;
  char detail[PATH_MAX + 128];
  const char* why = dir_untrusted(out, detail, sizeof(detail));
  if (!why) return;
  warn_once(context, out, why,
            "cache: not using the disk cache in %s: %s: %s; only the memory "
            "cache is used (the directory, the directories above it and its "
            "files must belong to this user and be writable by no one else: "
            "see tj_executable.h)",
            out, why, detail);
  out[0] = '\0';
}

tj_status_t tj_disk_cache_store(const char* dir, tj_cache_key_t key,
                                const void* bytes, size_t size) {
  if (!dir[0] || size == 0) return NULL;
  if (tj_make_directories(dir, 0700) != 0) {
    return tj_status_make(TJ_STATUS_BACKEND_FAILURE,
                          "cache: cannot create directory %s: %s", dir,
                          strerror(errno));
  }
  char path[4096], temp[4096 + 64];
  if (file_path(dir, key, path, sizeof(path)) >= (int)sizeof(path)) {
    return tj_invalid("cache: directory name too long: %s", dir);
  }
  static _Atomic unsigned long counter;
  snprintf(temp, sizeof(temp), "%s.tmp.%ld.%lu", path, (long)getpid(),
           (unsigned long)++counter);
  int fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return tj_status_make(TJ_STATUS_BACKEND_FAILURE,
                          "cache: cannot create %s: %s", temp, strerror(errno));
  }
  file_header_t h;
  memset(&h, 0, sizeof(h));
  memcpy(h.magic, kMagic, sizeof(kMagic));
  h.format = kFormatVersion;
  h.header_bytes = sizeof(h);
  h.key_lo = key.lo;
  h.key_hi = key.hi;
  h.payload_bytes = size;
  h.checksum = XXH3_64bits(bytes, size);
  bool ok = write_all(fd, &h, sizeof(h)) && write_all(fd, bytes, size);
  int saved_errno = errno;
  if (close(fd) != 0) ok = false;
  if (ok && rename(temp, path) == 0) return NULL;
  if (ok) saved_errno = errno;
  unlink(temp);
  return tj_status_make(TJ_STATUS_BACKEND_FAILURE, "cache: cannot write %s: %s",
                        path, strerror(saved_errno));
}
