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
  memset(set, 0, sizeof(*set));
}

tj_status_t tj_x86_kernel_set_build(tj_x86_jit_t* jit, tj_allocator_t allocator,
                                    tj_x86_lowered_t* kernels,
                                    uint32_t num_kernels,
                                    tj_x86_kernel_set_t* out) {
  memset(out, 0, sizeof(*out));
  out->kernels = kernels;
  out->num_kernels = num_kernels;
  if (num_kernels == 0) return NULL;
  double start = now_ms();
  tj_status_t status = NULL;
  const tj_kir_t** kirs = tj_alloc(allocator, sizeof(tj_kir_t*) * num_kernels);
  out->fns = tj_calloc(allocator, num_kernels, sizeof(tj_kir_fn_t));
  if (!kirs || !out->fns) status = tj_status_oom();
  tj_x86_object_t object;
  memset(&object, 0, sizeof(object));
  if (!status) {
    for (uint32_t i = 0; i < num_kernels; ++i) kirs[i] = kernels[i].kernel;
    status = tj_x86_jit_compile(jit, kirs, num_kernels, &object);
  }
  if (!status) {
    out->object_bytes = object.size;
    status = tj_x86_jit_load(jit, object.data, object.size, &out->module);
  }
  tj_x86_object_deinitialize(&object);
  for (uint32_t i = 0; !status && i < num_kernels; ++i) {
    status = tj_x86_module_lookup(out->module, kernels[i].kernel->name,
                                  &out->fns[i]);
  }
  tj_free(allocator, kirs, kirs ? sizeof(tj_kir_t*) * num_kernels : 0);
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
  TJ_RETURN_IF_ERROR(
      tj_kir_launch_info(kernel, runner->lanes, scalars, &info));
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
