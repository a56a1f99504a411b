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

#include "backends/x86/x86_backend.h"

#include "jit/cache.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define INLINE_WORK (1 << 15)
#define INLINE_GEMM_WORK (1 << 18)
#define HOST_CHUNKS_PER_THREAD 4

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

void tj_x86_kernel_set_deinitialize(tj_allocator_t allocator,
                                    tj_x86_kernel_set_t* set) {
  tj_x86_module_destroy(set->module);
  if (set->kernels) {
    for (uint32_t i = 0; i < set->num_kernels; ++i) {
      tj_x86_lowered_deinitialize(&set->kernels[i]);
    }
    tj_free(allocator, set->kernels,
            sizeof(tj_x86_lowered_t) * set->num_kernels);
  }
  tj_free(allocator, set->fns,
          set->fns ? sizeof(tj_kir_fn_t) * set->num_kernels : 0);
  tj_status_free(set->store_status);
  memset(set, 0, sizeof(*set));
}

// The cache key: what the object code depends on besides LLVM's behaviour,
// which the target key pins (LLVM version, CPU, features).
static tj_status_t set_key(tj_x86_jit_t* jit, const tj_x86_lowered_t* kernels,
                           uint32_t num_kernels, tj_cache_key_t* out) {
  tj_cache_hasher_t h;
  tj_cache_hasher_initialize(&h);
  tj_cache_hasher_update_string(&h, "tensorjit x86 kernel set 1");
  tj_cache_hasher_update_string(&h, tj_version_string());
  tj_cache_hasher_update_string(&h, tj_x86_jit_target_key(jit));
  for (uint32_t i = 0; i < num_kernels; ++i) {
    const tj_kir_t* k = kernels[i].kernel;
    char* text;
    TJ_RETURN_IF_ERROR(tj_kir_print(k, &text));
    tj_cache_hasher_update_string(&h, text);
    tj_free_string(k->allocator, text);
  }
  *out = tj_cache_hasher_finalize(&h);
  return NULL;
}

// The object bytes for |out|'s kernels, from a cache or LLVM.
static tj_status_t get_object(tj_x86_jit_t* jit, tj_allocator_t allocator,
                              tj_context_t* context, const char* cache_dir,
                              tj_x86_kernel_set_t* out, void** out_bytes,
                              size_t* out_size) {
  tj_cache_key_t key;
  TJ_RETURN_IF_ERROR(set_key(jit, out->kernels, out->num_kernels, &key));
  tj_cache_key_format(key, out->key);
  bool hit = false;
  TJ_RETURN_IF_ERROR(tj_memory_cache_lookup(context, key, allocator, out_bytes,
                                            out_size, &hit));
  if (hit) {
    out->source = TJ_X86_SOURCE_MEMORY;
    return NULL;
  }
  bool disk = cache_dir && cache_dir[0];
  if (disk) {
    TJ_RETURN_IF_ERROR(tj_disk_cache_load(cache_dir, key, allocator, out_bytes,
                                          out_size, &hit, &out->cache_note));
  }
  if (hit) {
    out->source = TJ_X86_SOURCE_DISK;
  } else {
    const tj_kir_t** kirs =
        tj_alloc(allocator, sizeof(tj_kir_t*) * out->num_kernels);
    if (!kirs) return tj_status_oom();
    for (uint32_t i = 0; i < out->num_kernels; ++i) {
      kirs[i] = out->kernels[i].kernel;
    }
    tj_x86_object_t object;
    tj_status_t status =
        tj_x86_jit_compile(jit, kirs, out->num_kernels, &object);
    tj_free(allocator, kirs, sizeof(tj_kir_t*) * out->num_kernels);
    TJ_RETURN_IF_ERROR(status);
    *out_bytes = object.data;  // allocated from |allocator| by the JIT
    *out_size = object.size;
    out->source = TJ_X86_SOURCE_LLVM;
    if (disk) {
      out->store_status =
          tj_disk_cache_store(cache_dir, key, *out_bytes, *out_size);
    }
  }
  // Remember it in memory too; a full or failing cache is only a warning.
  tj_status_t status =
      tj_memory_cache_store(context, key, *out_bytes, *out_size);
  if (status && !out->store_status) {
    out->store_status = status;
  } else {
    tj_status_free(status);
  }
  return NULL;
}

tj_status_t tj_x86_kernel_set_build(tj_x86_jit_t* jit, tj_allocator_t allocator,
                                    tj_context_t* context,
                                    const char* cache_dir,
                                    tj_x86_lowered_t* kernels,
                                    uint32_t num_kernels,
                                    tj_x86_kernel_set_t* out) {
  memset(out, 0, sizeof(*out));
  out->kernels = kernels;
  out->num_kernels = num_kernels;
  if (num_kernels == 0) return NULL;
  double start = now_ms();
  void* bytes = NULL;
  size_t size = 0;
  out->fns = tj_calloc(allocator, num_kernels, sizeof(tj_kir_fn_t));
  tj_status_t status = out->fns ? NULL : tj_status_oom();
  if (!status) {
    status = get_object(jit, allocator, context, cache_dir, out, &bytes, &size);
  }
  if (!status) {
    out->object_bytes = size;
    status = tj_x86_jit_load(jit, bytes, size, &out->module);
  }
  tj_free(allocator, bytes, size);
  for (uint32_t i = 0; !status && i < num_kernels; ++i) {
    status = tj_x86_module_lookup(out->module, kernels[i].kernel->name,
                                  &out->fns[i]);
  }
  if (status) {
    tj_x86_kernel_set_deinitialize(allocator, out);
    return status;
  }
  out->compile_ms = now_ms() - start;
  return NULL;
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
  if (kernel->kind == TJ_KIR_GEMM) {
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
