// backends/x86/x86_backend.c
//
// Kernel sets and launches for the x86 executable (x86_backend.h).
//
// All kernels of one executable go into ONE LLVM module: one O3 pipeline and
// one codegen run instead of one per kernel, one object to load and (later)
// to cache. A launch splits the kernel's work units over threads: the pool
// hands chunks out itself and names the thread that runs each, which
// indexes per-thread scratch; the host's parallel_for knows no thread ids,
// so the units are cut into a fixed number of chunks and each chunk gets
// its own scratch slot. Small work runs inline: waking threads costs more
// than it saves below ~32K elements (PyTorch's GRAIN_SIZE) or a ~2^18
// multiply-add GEMM (OpenBLAS's single-thread bound).
//
// The JIT and the pool belong to the context (tj_x86_runtime_t, one
// context extension slot), not to an executable: a host that compiles 50
// graphs gets one LLJIT and one pool, not 50 of each. Executables only
// borrow them, and a kernel set unloads its code when destroyed.
//
// An executable's kernel set is compiled in two parts (x86_jit.h): the hot
// part now, the cold part (the GEMM template's small-M path: its loop with
// its copy of the epilogue, and its microkernels) by the first run that
// calls into it, from the memory cache, the disk cache or LLVM, under the
// same key scheme.
// That run's thread compiles while the others wait on the part's mutex;
// a failure is kept for the run to return (tj_x86_kernel_set_take_error).
//
// An executable that runs on the pool (no host parallel_for) starts that
// build right after tj_compile on a thread of the kernel set's own
// (tj_x86_kernel_set_build_cold_in_background): the first small-M run,
// ~60 ms of LLVM otherwise, then finds it done (a game loop's first frame
// does not hitch), or waits on the same mutex for the build under way; the
// part is built once either way. A plain pthread rather than a pool
// worker: a pool worker busy in LLVM for 60 ms would stall the parallel
// loops of every executable of the context. The thread is joined before
// the set is freed (a build it has not begun is skipped then). With a
// host parallel_for no thread is started: tj_executable_prepare
// (tj_x86_kernel_set_build_cold) builds the part at the host's load time,
// or the first run that needs it does.

#include "backends/x86/x86_backend.h"

#include "jit/cache.h"
#include "jit/object_check.h"
#include "lib/env.h"

#include <elf.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INLINE_WORK (1 << 15)
#define INLINE_GEMM_WORK (1 << 18)
#define HOST_CHUNKS_PER_THREAD 4
// "tj_kernel_" + a kernel name (at most 200 bytes, kernel_ir.h) + NUL.
#define KERNEL_SYMBOL_BYTES 224

//===--- the context's x86 runtime ---===//

typedef struct pool_entry_t {
  struct pool_entry_t* next;
  tj_thread_pool_t* pool;
} pool_entry_t;

struct tj_x86_runtime_t {
  tj_allocator_t allocator;
  tj_x86_jit_t* jit;
  pthread_mutex_t mutex;  // |pools|
  pool_entry_t* pools;
  int32_t num_pools;
};

static void runtime_destroy(void* state) {
  tj_x86_runtime_t* rt = state;
  for (pool_entry_t* e = rt->pools; e;) {
    pool_entry_t* next = e->next;
    tj_thread_pool_destroy(e->pool);
    tj_free(rt->allocator, e, sizeof(*e));
    e = next;
  }
  tj_x86_jit_destroy(rt->jit);
  pthread_mutex_destroy(&rt->mutex);
  tj_free(rt->allocator, rt, sizeof(*rt));
}

// The context's x86 ISA setting (TJ_X86_ISA or tj_context_options_t.x86_isa:
// amx|avx512|x86-64-v4|avx2|x86-64-v3|sse2) makes every executable of the
// context generate code for that level instead of the host's best; a level the
// host lacks is UNSUPPORTED (the override can only go down). It is how the
// test suites run each lower tier on a bigger CPU, and how a user rules the
// AVX-512 code out when a bug is suspected there.
static tj_status_t jit_options_from_settings(const tj_context_t* context,
                                             tj_x86_jit_options_t* options) {
  const char* isa = tj_setting(context, TJ_SETTING_X86_ISA);
  if (!isa || !*isa) return NULL;
  if (!tj_x86_isa_from_name(isa, &options->isa)) {
    return tj_invalid(
        "%s=\"%.64s\" is not an x86 level: use host, amx, avx512, x86-64-v4, "
        "avx2, x86-64-v3 or sse2",
        tj_setting_source(context, TJ_SETTING_X86_ISA), isa);
  }
  return NULL;
}

static tj_status_t runtime_create(tj_context_t* context, void** out_state) {
  *out_state = NULL;
  tj_allocator_t al = tj_context_allocator(context);
  tj_x86_runtime_t* rt = tj_calloc(al, 1, sizeof(*rt));
  if (!rt) return tj_status_oom();
  rt->allocator = al;
  if (pthread_mutex_init(&rt->mutex, NULL) != 0) {
    tj_free(al, rt, sizeof(*rt));
    return tj_internal("x86 runtime: pthread_mutex_init failed");
  }
  tj_x86_jit_options_t jit_options = {.isa = TJ_X86_ISA_HOST};
  tj_status_t status = jit_options_from_settings(context, &jit_options);
  if (!status) {
    status = tj_x86_jit_create(al, &jit_options, &rt->jit);
    if (status && jit_options.isa != TJ_X86_ISA_HOST) {
      status = tj_status_annotate(
          status, "%s=%s", tj_setting_source(context, TJ_SETTING_X86_ISA),
          tj_x86_isa_name(jit_options.isa));
    }
  }
  if (status) {
    runtime_destroy(rt);
    return status;
  }
  *out_state = rt;
  return NULL;
}

tj_status_t tj_x86_runtime_get(tj_context_t* context,
                               tj_x86_runtime_t** out_runtime) {
  void* state = NULL;
  tj_status_t status =
      tj_context_extension(context, TJ_CONTEXT_EXTENSION_X86_RUNTIME,
                           runtime_create, runtime_destroy, &state);
  *out_runtime = status ? NULL : state;
  return status;
}

tj_x86_jit_t* tj_x86_runtime_jit(const tj_x86_runtime_t* runtime) {
  return runtime->jit;
}

tj_status_t tj_x86_runtime_pool(tj_x86_runtime_t* runtime, int32_t num_threads,
                                tj_thread_pool_t** out_pool) {
  *out_pool = NULL;
  tj_status_t status = NULL;
  // As the pool will size itself, so that the lookup below finds it again.
  if (num_threads > TJ_THREAD_POOL_MAX_THREADS) {
    num_threads = TJ_THREAD_POOL_MAX_THREADS;
  }
  pthread_mutex_lock(&runtime->mutex);
  pool_entry_t* e = runtime->pools;
  while (e && tj_thread_pool_size(e->pool) != num_threads) e = e->next;
  if (!e) {
    e = tj_calloc(runtime->allocator, 1, sizeof(*e));
    status =
        e ? tj_thread_pool_create(runtime->allocator, num_threads, &e->pool)
          : tj_status_oom();
    if (status) {
      if (e) tj_free(runtime->allocator, e, sizeof(*e));
      e = NULL;
    } else {
      e->next = runtime->pools;
      runtime->pools = e;
      ++runtime->num_pools;
    }
  }
  if (e) *out_pool = e->pool;
  pthread_mutex_unlock(&runtime->mutex);
  return status;
}

tj_x86_jit_t* tj_x86_context_jit(tj_context_t* context) {
  tj_x86_runtime_t* rt;
  tj_status_t status = tj_x86_runtime_get(context, &rt);
  tj_status_free(status);
  return rt ? rt->jit : NULL;
}

int32_t tj_x86_context_num_pools(tj_context_t* context) {
  tj_x86_runtime_t* rt;
  tj_status_t status = tj_x86_runtime_get(context, &rt);
  tj_status_free(status);
  if (!rt) return 0;
  pthread_mutex_lock(&rt->mutex);
  int32_t n = rt->num_pools;
  pthread_mutex_unlock(&rt->mutex);
  return n;
}

//===--- kernel sets ---===//

//===--- the cold part of a kernel set ---===//

struct tj_x86_lazy_t {
  tj_x86_jit_t* jit;
  tj_allocator_t allocator;
  tj_context_t* context;
  char cache_dir[1024];
  char name[128];
  bool log;
  const tj_lowered_kernel_t* kernels;  // the set's
  uint32_t num_kernels;
  tj_cache_key_t key;  // of the cold part
  int32_t count;
  void** slots[TJ_X86_MAX_COLD];  // @tj_lazy_fp_<i> in the hot part
  pthread_mutex_t mutex;          // building; the fields below
  tj_x86_module_t* module;        // the cold part, once loaded
  tj_status_t error;              // a failed build not yet reported
  // A failed background build, handed to |error| by the first call that
  // needs the part: a run that never takes the small-M path is not told.
  tj_status_t background_error;
  atomic_bool failed;
  // Set by the set's owner before it joins the thread: a build not yet
  // begun is skipped (one under way cannot be interrupted; it is waited
  // for).
  atomic_bool cancel;
  pthread_t thread;  // the background build, if |has_thread|
  bool has_thread;   // touched by the set's owner only (start, join)
};

// Waits for the background build, if one was started: it uses the hot
// part's slots, the kernels' IR and the JIT.
static void lazy_join(tj_x86_lazy_t* z) {
  if (z && z->has_thread) {
    atomic_store(&z->cancel, true);
    pthread_join(z->thread, NULL);
    z->has_thread = false;
  }
}

static void lazy_destroy(tj_x86_lazy_t* z) {
  if (!z) return;
  lazy_join(z);
  tj_x86_module_destroy(z->module);
  tj_status_free(z->error);
  tj_status_free(z->background_error);
  pthread_mutex_destroy(&z->mutex);
  tj_free(z->allocator, z, sizeof(*z));
}

static void free_unique(tj_allocator_t allocator, tj_x86_kernel_set_t* set) {
  tj_free(allocator, set->unique,
          set->unique ? sizeof(tj_lowered_kernel_t) * set->num_kernels : 0);
  tj_free(allocator, set->unique_of,
          set->unique_of ? sizeof(uint32_t) * set->num_kernels : 0);
  set->unique = NULL;
  set->unique_of = NULL;
  set->num_unique = 0;
}

// Region compile: finds the kernels of |set| identical up to names
// (tj_kir_same_code: field by field, nothing printed; a copied kernel
// whose code_of is a kernel of the set lowered before it costs pointer
// compares only) and fills
// |unique|, |unique_of| and |num_unique| (left NULL when every kernel is
// distinct).
static tj_status_t find_unique(tj_allocator_t allocator,
                               tj_x86_kernel_set_t* set) {
  uint32_t n = set->num_kernels;
  if (n < 2) return NULL;
  uint32_t* of = tj_alloc(allocator, sizeof(uint32_t) * n);
  uint32_t* rep = tj_alloc(allocator, sizeof(uint32_t) * n);
  uint32_t* lowered = tj_alloc(allocator, sizeof(uint32_t) * n);
  tj_status_t status = of && rep && lowered ? NULL : tj_status_oom();
  uint32_t num = 0, num_lowered = 0;
  for (uint32_t i = 0; !status && i < n; ++i) {
    const tj_kir_t* k = set->kernels[i].kernel;
    // A copy whose lowered kernel is a distinct one of the set shares its
    // code by construction (kir/lower_reuse.c): no compare.
    const tj_kir_t* code = set->kernels[i].code_of;
    uint32_t j = 0;
    while (code && j < num_lowered && set->kernels[lowered[j]].kernel != code)
      ++j;
    if (code && j < num_lowered) {
      of[i] = of[lowered[j]];
      continue;
    }
    uint32_t u = 0;
    while (u < num && !tj_kir_same_code(set->kernels[rep[u]].kernel, k)) ++u;
    if (u == num) rep[num++] = i;
    of[i] = u;
    if (!code) lowered[num_lowered++] = i;
  }
  if (!status && num < n) {
    set->unique = tj_alloc(allocator, sizeof(tj_lowered_kernel_t) * n);
    if (!set->unique) {
      status = tj_status_oom();
    } else {
      for (uint32_t u = 0; u < num; ++u) set->unique[u] = set->kernels[rep[u]];
      set->unique_of = of;
      set->num_unique = num;
      of = NULL;
    }
  }
  tj_free(allocator, of, of ? sizeof(uint32_t) * n : 0);
  tj_free(allocator, rep, rep ? sizeof(uint32_t) * n : 0);
  tj_free(allocator, lowered, lowered ? sizeof(uint32_t) * n : 0);
  return status;
}

void tj_x86_kernel_set_deinitialize(tj_allocator_t allocator,
                                    tj_x86_kernel_set_t* set) {
  lazy_join(set->lazy);
  // The hot part first: its trampolines point into the cold part.
  tj_x86_module_destroy(set->module);
  lazy_destroy(set->lazy);
  if (set->kernels) {
    for (uint32_t i = 0; i < set->num_kernels; ++i) {
      tj_lowered_kernel_deinitialize(&set->kernels[i]);
    }
    tj_free(allocator, set->kernels,
            sizeof(tj_lowered_kernel_t) * set->num_kernels);
  }
  tj_free(allocator, set->fns,
          set->fns ? sizeof(tj_kir_fn_t) * set->num_kernels : 0);
  free_unique(allocator, set);
  tj_status_free(set->store_status);
  memset(set, 0, sizeof(*set));
}

static void hash_put(void* user, const void* data, size_t size) {
  tj_cache_hasher_update(user, data, size);
}

// The cache key: what the object code depends on besides LLVM's behaviour,
// which the target key pins (LLVM version, CPU, features).
static tj_status_t set_key(tj_x86_jit_t* jit,
                           const tj_lowered_kernel_t* kernels,
                           uint32_t num_kernels, tj_x86_part_t part,
                           tj_cache_key_t* out) {
  tj_cache_hasher_t h;
  tj_cache_hasher_initialize(&h);
  // The generation of the code generator: bump it whenever jit/emit_*.c
  // emits different code for the same kernel text, or a disk cache written
  // by an older build would keep serving the old code (the library
  // version alone changes only at releases). 2: column reductions, hot
  // and cold parts; 3: the small-M GEMM path a deferred function of its
  // own; 4: buffer names out of the key; 5: the kernels' fields hashed
  // (tj_kir_code_bytes) instead of their text; 6: the conv window in
  // those fields (5 keyed convs that differ only in their pads alike).
  tj_cache_hasher_update_string(&h, "tensorjit x86 kernel set 6");
  tj_cache_hasher_update_string(&h, tj_version_string());
  tj_cache_hasher_update_string(&h, tj_x86_jit_target_key(jit));
  static const char* const kParts[] = {"whole", "hot part", "cold part"};
  tj_cache_hasher_update_string(&h, kParts[part]);
  for (uint32_t i = 0; i < num_kernels; ++i) {
    const tj_kir_t* k = kernels[i].kernel;
    // The kernel's code field by field (tj_kir_code_bytes), not its text:
    // the same bytes exactly when tj_kir_same_code holds, without printing
    // it. Buffer names are not in them: they are named after plan nodes,
    // whose numbers move with the rest of the graph (a stack of 24 layers
    // numbers its first layer's nodes differently from a stack of 1), and
    // the code does not depend on them. The kernel's name is: it names
    // the object's entry point.
    tj_cache_hasher_update_string(&h, k->name);
    tj_kir_code_bytes(k, hash_put, &h);
  }
  *out = tj_cache_hasher_finalize(&h);
  return NULL;
}

// Where an object came from, for logs.
typedef struct fetched_t {
  tj_x86_source_t source;
  const char* cache_note;    // why the disk cache missed, or NULL (static)
  tj_status_t store_status;  // a failed cache store (a warning), owned
} fetched_t;

// Why the object |bytes| read from the disk cache may not be linked as
// |part| of |kernels| (|num_cold| deferred functions for the cold part), or
// NULL: the structural checks of object_check.h, with the entry points the
// caller looks up next.
static tj_status_t check_object(tj_allocator_t allocator, const void* bytes,
                                size_t size, const tj_lowered_kernel_t* kernels,
                                uint32_t num_kernels, tj_x86_part_t part,
                                int32_t num_cold, const char** out_why) {
  size_t n = part == TJ_X86_PART_COLD  ? (size_t)num_cold
             : part == TJ_X86_PART_HOT ? (size_t)num_kernels + 1
                                       : (size_t)num_kernels;
  size_t bytes_needed = n * (sizeof(char*) + KERNEL_SYMBOL_BYTES);
  char* block = tj_alloc(allocator, bytes_needed ? bytes_needed : 1);
  if (!block) return tj_status_oom();
  const char** symbols = (const char**)(void*)block;
  char* names = block + n * sizeof(char*);
  for (size_t i = 0; i < n; ++i) {
    char* name = names + i * KERNEL_SYMBOL_BYTES;
    if (part == TJ_X86_PART_COLD) {
      snprintf(name, KERNEL_SYMBOL_BYTES, "tj_cold_%d", (int)i);
    } else if (i < num_kernels) {
      snprintf(name, KERNEL_SYMBOL_BYTES, "tj_kernel_%s",
               kernels[i].kernel->name);
    } else {
      snprintf(name, KERNEL_SYMBOL_BYTES, "tj_lazy_count");
    }
    symbols[i] = name;
  }
  tj_object_expect_t expect = {EM_X86_64, ET_REL, symbols, n};
  *out_why = tj_object_check(bytes, size, &expect);
  tj_free(allocator, block, bytes_needed ? bytes_needed : 1);
  return NULL;
}

// The object of |part| of |kernels| under |key|: from |context|'s memory
// cache, else (when |use_disk|) from the disk cache in |cache_dir| ("" or
// NULL: none) if it passes check_object, else compiled by |jit| and written
// to the disk cache. The caller stores it in the memory cache once it
// links. The bytes are allocated from |allocator|.
static tj_status_t fetch_object(
    tj_x86_jit_t* jit, tj_allocator_t allocator, tj_context_t* context,
    const char* cache_dir, bool use_disk, const tj_lowered_kernel_t* kernels,
    uint32_t num_kernels, tj_x86_part_t part, int32_t num_cold,
    tj_cache_key_t key, void** out_bytes, size_t* out_size, fetched_t* out) {
  memset(out, 0, sizeof(*out));
  bool hit = false;
  TJ_RETURN_IF_ERROR(tj_memory_cache_lookup(context, key, allocator, out_bytes,
                                            out_size, &hit));
  if (hit) {
    out->source = TJ_X86_SOURCE_MEMORY;
    return NULL;
  }
  bool disk = cache_dir && cache_dir[0];
  if (disk && use_disk) {
    TJ_RETURN_IF_ERROR(tj_disk_cache_load(context, cache_dir, key, allocator,
                                          out_bytes, out_size, &hit,
                                          &out->cache_note));
  }
  if (hit) {
    const char* why = NULL;
    tj_status_t status = check_object(allocator, *out_bytes, *out_size, kernels,
                                      num_kernels, part, num_cold, &why);
    if (status || why) {
      tj_free(allocator, *out_bytes, *out_size);
      *out_bytes = NULL;
      *out_size = 0;
      hit = false;
    }
    TJ_RETURN_IF_ERROR(status);
    if (why) {
      out->cache_note = why;
      char hex[33];
      tj_cache_key_format(key, hex);
      tj_context_diagnostic(context, TJ_SEVERITY_WARNING,
                            "cache: %s/%s.tjo is not a valid object (%s); "
                            "compiling it again",
                            cache_dir, hex, why);
    }
  }
  if (hit) {
    out->source = TJ_X86_SOURCE_DISK;
    return NULL;
  }
  const tj_kir_t** kirs = tj_alloc(allocator, sizeof(tj_kir_t*) * num_kernels);
  if (!kirs) return tj_status_oom();
  for (uint32_t i = 0; i < num_kernels; ++i) kirs[i] = kernels[i].kernel;
  tj_x86_object_t object;
  int32_t compiled_cold;
  tj_status_t status = tj_x86_jit_compile_part(jit, kirs, num_kernels, part,
                                               &object, &compiled_cold);
  tj_free(allocator, kirs, sizeof(tj_kir_t*) * num_kernels);
  TJ_RETURN_IF_ERROR(status);
  *out_bytes = object.data;  // allocated from |allocator| by the JIT
  *out_size = object.size;
  out->source = TJ_X86_SOURCE_LLVM;
  if (disk) {
    // Replaces a bad entry, whatever was there (the rename does not follow
    // a link or open a FIFO).
    out->store_status =
        tj_disk_cache_store(cache_dir, key, *out_bytes, *out_size);
  }
  return NULL;
}

// After an object linked: remember it in memory too; a full or failing
// cache is only a warning.
static void remember(tj_context_t* context, tj_cache_key_t key,
                     const void* bytes, size_t size, fetched_t* f) {
  if (f->source == TJ_X86_SOURCE_MEMORY) return;
  tj_status_t status = tj_memory_cache_store(context, key, bytes, size);
  if (status && !f->store_status) {
    f->store_status = status;
  } else {
    tj_status_free(status);
  }
}

// Whether a failure to load the object that |f| describes is the disk
// cache's: a miss, to be compiled again.
static bool disk_object_failed(tj_status_t status, const fetched_t* f) {
  return status && f->source == TJ_X86_SOURCE_DISK &&
         tj_status_code(status) != TJ_STATUS_OUT_OF_MEMORY;
}

static void warn_disk_object_failed(tj_context_t* context,
                                    const char* cache_dir, const char* key,
                                    tj_status_t status) {
  tj_context_diagnostic(context, TJ_SEVERITY_WARNING,
                        "cache: %s/%s.tjo did not link (%s); compiling it "
                        "again",
                        cache_dir, key, tj_status_message(status));
}

// Makes the cold part of |z| (from the disk cache when |use_disk|) and
// publishes its functions. Under |z->mutex|.
static tj_status_t build_cold_once(tj_x86_lazy_t* z, bool use_disk,
                                   size_t* out_size, fetched_t* f) {
  void* bytes = NULL;
  size_t size = 0;
  TJ_RETURN_IF_ERROR(fetch_object(
      z->jit, z->allocator, z->context, z->cache_dir, use_disk, z->kernels,
      z->num_kernels, TJ_X86_PART_COLD, z->count, z->key, &bytes, &size, f));
  tj_x86_module_t* module = NULL;
  tj_status_t status = tj_x86_jit_load(z->jit, bytes, size, &module);
  void* fns[TJ_X86_MAX_COLD];
  char names[TJ_X86_MAX_COLD][24];
  const char* symbols[TJ_X86_MAX_COLD];
  for (int32_t i = 0; i < z->count; ++i) {
    snprintf(names[i], sizeof(names[i]), "tj_cold_%d", (int)i);
    symbols[i] = names[i];
  }
  if (!status) {
    status =
        tj_x86_module_lookup_symbols(module, symbols, (size_t)z->count, fns);
  }
  if (!status) remember(z->context, z->key, bytes, size, f);
  tj_free(z->allocator, bytes, size);
  if (status) {
    tj_x86_module_destroy(module);
    tj_status_free(f->store_status);
    f->store_status = NULL;
    return status;
  }
  z->module = module;
  for (int32_t i = 0; i < z->count; ++i) {
    __atomic_store_n(z->slots[i], fns[i], __ATOMIC_RELEASE);
  }
  *out_size = size;
  return NULL;
}

// Makes the cold part of |z| and publishes its functions. Under |z->mutex|.
// |how|: where (for the log line).
static tj_status_t build_cold(tj_x86_lazy_t* z, const char* how) {
  double start = tj_now_ms();
  size_t size = 0;
  fetched_t f;
  tj_status_t status = build_cold_once(z, true, &size, &f);
  if (disk_object_failed(status, &f)) {
    char key[33];
    tj_cache_key_format(z->key, key);
    warn_disk_object_failed(z->context, z->cache_dir, key, status);
    tj_status_free(status);
    status = build_cold_once(z, false, &size, &f);
  }
  TJ_RETURN_IF_ERROR(status);
  if (z->log) {
    static const char* const kFrom[] = {"compiled by LLVM",
                                        "loaded from the memory cache",
                                        "loaded from the disk cache"};
    char key[33];
    tj_cache_key_format(z->key, key);
    tj_context_diagnostic(
        z->context, TJ_SEVERITY_REMARK,
        "cache: @%s: %d deferred functions (small-M GEMM paths) %s %s (key "
        "%s, %zu bytes of object code) in %.2f ms%s%s",
        z->name, (int)z->count, kFrom[f.source], how, key, size,
        tj_now_ms() - start, f.cache_note ? "; disk: " : "",
        f.cache_note ? f.cache_note : "");
  }
  tj_disk_cache_warn_store(z->context, z->cache_dir, f.store_status);
  tj_status_free(f.store_status);
  return NULL;
}

// @tj_lazy_resolve: called by a trampoline of the hot part, on whatever
// thread runs the kernel, while its function pointer is null.
static void* lazy_resolve(void* ctx, int64_t index) {
  tj_x86_lazy_t* z = ctx;
  if (index < 0 || index >= z->count) return NULL;
  pthread_mutex_lock(&z->mutex);
  void* fp = __atomic_load_n(z->slots[index], __ATOMIC_ACQUIRE);
  if (!fp && z->background_error) {
    // The background build failed: this launch reports that (the caller's
    // tj_x86_kernel_set_take_error) rather than paying for a second try;
    // a later call tries again.
    if (!z->error) {
      z->error = z->background_error;
    } else {
      tj_status_free(z->background_error);
    }
    z->background_error = NULL;
    atomic_store(&z->failed, true);
  } else if (!fp) {
    tj_status_t status = build_cold(z, "on first use");
    if (status) {
      if (!z->error) {
        z->error = status;
      } else {
        tj_status_free(status);
      }
      atomic_store(&z->failed, true);
    }
    fp = __atomic_load_n(z->slots[index], __ATOMIC_ACQUIRE);
  }
  pthread_mutex_unlock(&z->mutex);
  return fp;
}

static void* background_main(void* arg) {
  tj_x86_lazy_t* z = arg;
  pthread_mutex_lock(&z->mutex);
  // A run (or tj_x86_kernel_set_build_cold) may have needed the part first
  // and built it (build_cold publishes every slot at once); the set may be
  // going away.
  if (!__atomic_load_n(z->slots[0], __ATOMIC_ACQUIRE) &&
      !atomic_load(&z->cancel)) {
    z->background_error = build_cold(z, "in the background");
  }
  pthread_mutex_unlock(&z->mutex);
  return NULL;
}

void tj_x86_kernel_set_build_cold_in_background(tj_x86_kernel_set_t* set) {
  tj_x86_lazy_t* z = set->lazy;
  if (!z || z->has_thread) return;
  // Default attributes: joinable, and the default stack, on which the
  // pool's workers build the part too when a run needs it first.
  z->has_thread = pthread_create(&z->thread, NULL, background_main, z) == 0;
}

tj_status_t tj_x86_kernel_set_build_cold(const tj_x86_kernel_set_t* set) {
  tj_x86_lazy_t* z = set->lazy;
  if (!z) return NULL;
  // A background build under way holds the mutex: this waits for it.
  pthread_mutex_lock(&z->mutex);
  tj_status_t status = NULL;
  if (!__atomic_load_n(z->slots[0], __ATOMIC_ACQUIRE)) {
    // A failed background build is tried again here, where the caller
    // hears of a failure.
    tj_status_free(z->background_error);
    z->background_error = NULL;
    status = build_cold(z, "by tj_executable_prepare");
  }
  pthread_mutex_unlock(&z->mutex);
  return tj_status_annotate(status, "@%s: building the deferred GEMM paths",
                            z->name);
}

bool tj_x86_kernel_set_cold_ready(const tj_x86_kernel_set_t* set) {
  tj_x86_lazy_t* z = set->lazy;
  return !z || __atomic_load_n(z->slots[0], __ATOMIC_ACQUIRE) != NULL;
}

tj_status_t tj_x86_kernel_set_take_error(const tj_x86_kernel_set_t* set) {
  tj_x86_lazy_t* z = set->lazy;
  if (!z || !atomic_load_explicit(&z->failed, memory_order_acquire)) {
    return NULL;
  }
  pthread_mutex_lock(&z->mutex);
  tj_status_t status = z->error;
  z->error = NULL;
  atomic_store(&z->failed, false);
  pthread_mutex_unlock(&z->mutex);
  if (!status) return NULL;  // another run took it
  tj_status_t wrapped = tj_status_make(
      tj_status_code(status), "@%s: building the deferred GEMM paths: %s",
      z->name, tj_status_message(status));
  tj_status_free(status);
  return wrapped;
}

// After the hot part of |out| is loaded: its deferred functions, if any,
// get their resolver.
static tj_status_t attach_lazy(tj_x86_jit_t* jit, tj_allocator_t allocator,
                               tj_context_t* context, const char* cache_dir,
                               const char* name, bool log,
                               const void* count_ptr,
                               tj_x86_kernel_set_t* out) {
  int64_t count;
  memcpy(&count, count_ptr, sizeof(count));
  if (count == 0) return NULL;
  if (count < 0 || count > TJ_X86_MAX_COLD) {
    return tj_internal("x86 kernel set: %lld deferred functions",
                       (long long)count);
  }
  tj_x86_lazy_t* z = tj_calloc(allocator, 1, sizeof(*z));
  if (!z) return tj_status_oom();
  if (pthread_mutex_init(&z->mutex, NULL) != 0) {
    tj_free(allocator, z, sizeof(*z));
    return tj_internal("x86 kernel set: pthread_mutex_init failed");
  }
  atomic_init(&z->failed, false);
  atomic_init(&z->cancel, false);
  z->jit = jit;
  z->allocator = allocator;
  z->context = context;
  snprintf(z->cache_dir, sizeof(z->cache_dir), "%s",
           cache_dir ? cache_dir : "");
  snprintf(z->name, sizeof(z->name), "%s", name ? name : "?");
  z->log = log;
  // The cold part holds the deferred functions of the kernels compiled.
  z->kernels = out->unique ? out->unique : out->kernels;
  z->num_kernels = out->unique ? out->num_unique : out->num_kernels;
  z->count = (int32_t)count;
  out->lazy = z;  // freed with |out| from here on
  out->num_deferred = z->count;
  TJ_RETURN_IF_ERROR(
      set_key(jit, z->kernels, z->num_kernels, TJ_X86_PART_COLD, &z->key));
  // One lookup for the slots, the context and the resolver.
  char names[TJ_X86_MAX_COLD][24];
  const char* symbols[TJ_X86_MAX_COLD + 2];
  void* addresses[TJ_X86_MAX_COLD + 2];
  for (int32_t i = 0; i < z->count; ++i) {
    snprintf(names[i], sizeof(names[i]), "tj_lazy_fp_%d", (int)i);
    symbols[i] = names[i];
  }
  symbols[z->count] = "tj_lazy_ctx";
  symbols[z->count + 1] = "tj_lazy_resolve";
  TJ_RETURN_IF_ERROR(tj_x86_module_lookup_symbols(
      out->module, symbols, (size_t)z->count + 2, addresses));
  for (int32_t i = 0; i < z->count; ++i) z->slots[i] = addresses[i];
  void* ctx_slot = addresses[z->count];
  void* resolve_slot = addresses[z->count + 1];
  // Before any kernel of the set runs (their pointers are published later
  // by the caller): plain stores.
  void* (*resolve)(void*, int64_t) = lazy_resolve;
  memcpy(resolve_slot, &resolve, sizeof(resolve));
  memcpy(ctx_slot, &z, sizeof(z));
  return NULL;
}

// Undoes a failed build_set_once, keeping the kernels for another try.
static void unload_set(tj_allocator_t allocator, tj_x86_kernel_set_t* set) {
  lazy_join(set->lazy);
  tj_x86_module_destroy(set->module);
  lazy_destroy(set->lazy);
  tj_free(allocator, set->fns,
          set->fns ? sizeof(tj_kir_fn_t) * set->num_kernels : 0);
  free_unique(allocator, set);
  tj_status_free(set->store_status);
  tj_lowered_kernel_t* kernels = set->kernels;
  uint32_t num_kernels = set->num_kernels;
  memset(set, 0, sizeof(*set));
  set->kernels = kernels;
  set->num_kernels = num_kernels;
}

// One try of build_set, from the disk cache when |use_disk|. On failure
// |out| keeps only its kernels and |*out_source| says where the object
// came from.
static tj_status_t build_set_once(tj_x86_jit_t* jit, tj_allocator_t allocator,
                                  tj_context_t* context, const char* cache_dir,
                                  bool use_disk, tj_x86_part_t part,
                                  const char* name, bool log,
                                  tj_x86_kernel_set_t* out,
                                  tj_x86_source_t* out_source) {
  void* bytes = NULL;
  size_t size = 0;
  fetched_t f;
  memset(&f, 0, sizeof(f));
  out->fns = tj_calloc(allocator, out->num_kernels, sizeof(tj_kir_fn_t));
  tj_status_t status = out->fns ? NULL : tj_status_oom();
  if (!status) status = find_unique(allocator, out);
  // The object holds the distinct kernels; fns[i] is unique_of[i]'s.
  tj_lowered_kernel_t* kernels = out->unique ? out->unique : out->kernels;
  uint32_t num_kernels = out->unique ? out->num_unique : out->num_kernels;
  tj_cache_key_t key = {0, 0};
  if (!status) status = set_key(jit, kernels, num_kernels, part, &key);
  if (!status) {
    tj_cache_key_format(key, out->key);
    status = fetch_object(jit, allocator, context, cache_dir, use_disk, kernels,
                          num_kernels, part, 0, key, &bytes, &size, &f);
    out->source = f.source;
    out->cache_note = f.cache_note;
  }
  if (!status) {
    out->object_bytes = size;
    status = tj_x86_jit_load(jit, bytes, size, &out->module);
  }
  // The entry points (and a hot part's @tj_lazy_count), a few ORC lookups
  // rather than one per symbol: a warm start is mostly lookups.
  for (uint32_t first = 0; !status && first < num_kernels;) {
    enum { CHUNK = 64 };
    char names[CHUNK][KERNEL_SYMBOL_BYTES];
    const char* symbols[CHUNK + 1];
    void* addresses[CHUNK + 1];
    uint32_t n = num_kernels - first < CHUNK ? num_kernels - first : CHUNK;
    for (uint32_t i = 0; i < n; ++i) {
      snprintf(names[i], sizeof(names[i]), "tj_kernel_%s",
               kernels[first + i].kernel->name);
      symbols[i] = names[i];
    }
    bool count = part == TJ_X86_PART_HOT && first == 0;
    if (count) symbols[n] = "tj_lazy_count";
    status = tj_x86_module_lookup_symbols(out->module, symbols, n + count,
                                          addresses);
    for (uint32_t i = 0; !status && i < n; ++i) {
      // Object code addresses become function pointers here.
      memcpy(&out->fns[first + i], &addresses[i], sizeof(tj_kir_fn_t));
    }
    if (!status && count) {
      status = attach_lazy(jit, allocator, context, cache_dir, name, log,
                           addresses[n], out);
    }
    first += n;
  }
  // Kernels sharing code (fns was filled by distinct index), last first.
  for (uint32_t i = out->num_kernels; !status && out->unique && i-- > 0;) {
    out->fns[i] = out->fns[out->unique_of[i]];
  }
  if (!status) remember(context, key, bytes, size, &f);
  out->store_status = f.store_status;
  tj_free(allocator, bytes, size);
  *out_source = f.source;
  if (status) unload_set(allocator, out);
  return status;
}

static tj_status_t build_set(tj_x86_jit_t* jit, tj_allocator_t allocator,
                             tj_context_t* context, const char* cache_dir,
                             tj_lowered_kernel_t* kernels, uint32_t num_kernels,
                             tj_x86_part_t part, const char* name, bool log,
                             tj_x86_kernel_set_t* out) {
  memset(out, 0, sizeof(*out));
  out->kernels = kernels;
  out->num_kernels = num_kernels;
  if (num_kernels == 0) return NULL;
  double start = tj_now_ms();
  tj_x86_source_t source;
  tj_status_t status = build_set_once(jit, allocator, context, cache_dir, true,
                                      part, name, log, out, &source);
  fetched_t f = {source, NULL, NULL};
  if (disk_object_failed(status, &f)) {
    // A disk object that passed the checks but does not link (or lacks
    // what the set needs): a miss, compiled again and rewritten.
    warn_disk_object_failed(context, cache_dir, out->key, status);
    tj_status_free(status);
    status = build_set_once(jit, allocator, context, cache_dir, false, part,
                            name, log, out, &source);
  }
  if (status) {
    tj_x86_kernel_set_deinitialize(allocator, out);
    return status;
  }
  out->compile_ms = tj_now_ms() - start;
  return NULL;
}

tj_status_t tj_x86_kernel_set_build(tj_x86_jit_t* jit, tj_allocator_t allocator,
                                    tj_context_t* context,
                                    const char* cache_dir,
                                    tj_lowered_kernel_t* kernels,
                                    uint32_t num_kernels,
                                    tj_x86_kernel_set_t* out) {
  return build_set(jit, allocator, context, cache_dir, kernels, num_kernels,
                   TJ_X86_PART_ALL, NULL, false, out);
}

tj_status_t tj_x86_kernel_set_build_lazy(
    tj_x86_jit_t* jit, tj_allocator_t allocator, tj_context_t* context,
    const char* cache_dir, tj_lowered_kernel_t* kernels, uint32_t num_kernels,
    const char* name, bool log, tj_x86_kernel_set_t* out) {
  return build_set(jit, allocator, context, cache_dir, kernels, num_kernels,
                   TJ_X86_PART_HOT, name, log, out);
}

//===--- launching ---===//

static int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  return tj_mul_overflow_i64(a, b, &r) ? INT64_MAX : r;
}

tj_status_t tj_x86_launch_prepare(const tj_x86_runner_t* runner,
                                  const tj_kir_t* kernel,
                                  const int64_t* scalars,
                                  tj_x86_launch_t* out) {
  memset(out, 0, sizeof(*out));
  tj_kir_launch_t info;
  TJ_RETURN_IF_ERROR(tj_kir_launch_info(kernel, runner->lanes, scalars, &info));
  out->units = info.units;
  out->slot_bytes = (info.scratch_bytes + 63) / 64 * 64;
  int64_t work = 1;
  for (int32_t d = 0; d < kernel->rank; ++d) {
    work = sat_mul(work, tj_kir_ival_eval(kernel->dims[d], scalars));
  }
  int64_t threshold = INLINE_WORK;
  if (kernel->kind == TJ_KIR_GEMM || kernel->kind == TJ_KIR_CONV) {
    work = sat_mul(work, tj_kir_ival_eval(kernel->gemm_k, scalars));
    threshold = INLINE_GEMM_WORK;
  }
  bool can_spread =
      runner->threads > 1 && (runner->pool || runner->host_parallel_for);
  out->parallel = can_spread && info.units > 1 && work >= threshold;
  if (!out->parallel) {
    out->slots = 1;
  } else if (runner->host_parallel_for) {
    int64_t chunks = (int64_t)runner->threads * HOST_CHUNKS_PER_THREAD;
    out->chunks = chunks < info.units ? chunks : info.units;
    out->slots = (int32_t)out->chunks;
  } else {
    out->slots = tj_thread_pool_size(runner->pool);
  }
  if (out->slot_bytes == 0) out->slots = out->slots ? out->slots : 1;
  return NULL;
}

typedef struct launch_ctx_t {
  tj_kir_fn_t fn;
  void* const* buffers;
  const int64_t* scalars;
  unsigned char* scratch;
  int64_t slot_bytes;
  int64_t units, chunks;
} launch_ctx_t;

static void* slot(const launch_ctx_t* c, int64_t index) {
  return c->scratch ? c->scratch + index * c->slot_bytes : NULL;
}

static void pool_task(void* context, int64_t begin, int64_t end,
                      int32_t thread) {
  const launch_ctx_t* c = context;
  c->fn(c->buffers, c->scalars, slot(c, thread), begin, end);
}

// floor(units * i / chunks) without overflow: units = q * chunks + r.
static int64_t chunk_start(const launch_ctx_t* c, int64_t i) {
  int64_t q = c->units / c->chunks, r = c->units % c->chunks;
  return q * i + r * i / c->chunks;
}

// Host chunks: chunk i covers units [units*i/chunks, units*(i+1)/chunks).
static void host_task(void* context, int64_t begin, int64_t end) {
  const launch_ctx_t* c = context;
  for (int64_t i = begin; i < end; ++i) {
    int64_t lo = chunk_start(c, i), hi = chunk_start(c, i + 1);
    if (lo < hi) c->fn(c->buffers, c->scalars, slot(c, i), lo, hi);
  }
}

void tj_x86_launch_run(const tj_x86_runner_t* runner,
                       const tj_x86_launch_t* launch, tj_kir_fn_t fn,
                       void* const* buffers, const int64_t* scalars,
                       void* scratch) {
  if (launch->units <= 0) return;
  launch_ctx_t c = {fn,
                    buffers,
                    scalars,
                    launch->slot_bytes ? scratch : NULL,
                    launch->slot_bytes,
                    launch->units,
                    launch->chunks};
  if (!launch->parallel) {
    fn(buffers, scalars, c.scratch, 0, launch->units);
  } else if (runner->host_parallel_for) {
    runner->host_parallel_for(runner->host_user_data, launch->chunks, 1,
                              host_task, &c);
  } else {
    tj_thread_pool_parallel_for(runner->pool, launch->units, pool_task, &c);
  }
}

// A host kernel's task over the host's parallel_for: chunk i covers
// [n*i/chunks, n*(i+1)/chunks) on slot i.
typedef struct host_chunks_t {
  tj_host_task_fn task;
  void* context;
  int64_t n, chunks;
} host_chunks_t;

static void host_chunk_task(void* context, int64_t begin, int64_t end) {
  const host_chunks_t* c = context;
  int64_t q = c->n / c->chunks, r = c->n % c->chunks;
  for (int64_t i = begin; i < end; ++i) {
    int64_t lo = q * i + r * i / c->chunks;
    int64_t hi = q * (i + 1) + r * (i + 1) / c->chunks;
    if (lo < hi) c->task(c->context, lo, hi, (int32_t)i);
  }
}

static void host_parallel_run(void* user_data, int64_t n, tj_host_task_fn task,
                              void* context) {
  const tj_x86_runner_t* runner = user_data;
  int64_t chunks = (int64_t)runner->threads * HOST_CHUNKS_PER_THREAD;
  host_chunks_t c = {task, context, n, chunks < n ? chunks : n};
  if (c.chunks > 0) {
    runner->host_parallel_for(runner->host_user_data, c.chunks, 1,
                              host_chunk_task, &c);
  }
}

tj_host_parallel_t tj_x86_runner_parallel(const tj_x86_runner_t* runner) {
  tj_host_parallel_t p = {NULL, 1, NULL};
  if (runner->threads <= 1) return p;
  if (runner->host_parallel_for) {
    p.run = host_parallel_run;
    p.max_slots = runner->threads * HOST_CHUNKS_PER_THREAD;
    p.user_data = (void*)runner;
  } else if (runner->pool) {
    tj_parallel_for_t hook = tj_thread_pool_hook(runner->pool);
    p.run = hook.run;
    p.max_slots = hook.max_threads;
    p.user_data = hook.user_data;
  }
  return p;
}
