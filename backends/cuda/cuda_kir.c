// Kernel IR kernels on a CUDA device. See cuda_kir.h.

#include "backends/cuda/cuda_kir.h"

#include <stdio.h>
#include <string.h>

// Makes the PTX of an emitted module on a cubin-cache miss (LLVM's NVPTX
// back end consumes the module).
typedef struct kir_ptx_t {
  tj_nvptx_module_t* module;
  tj_allocator_t allocator;
  char* ptx;
  double ms;
} kir_ptx_t;

static tj_status_t make_ptx(void* ctx, const char** out_ptx) {
  kir_ptx_t* c = ctx;
  double start = tj_now_ms();
  tj_nvptx_module_t* module = c->module;
  c->module = NULL;
  tj_status_t s = tj_nvptx_module_compile(module, c->allocator, &c->ptx);
  c->ms += tj_now_ms() - start;
  *out_ptx = c->ptx;
  return s;
}

// The cache key of a kernel's PTX: the module's LLVM IR (everything the
// emitter decided, whatever options led there), the arch, LLVM's version
// (its NVPTX back end makes the PTX) and ours.
static tj_status_t ptx_key(const tj_nvptx_target_t* target,
                           const tj_nvptx_module_t* module,
                           tj_allocator_t allocator, tj_cache_key_t* out) {
  char* ir = NULL;
  TJ_RETURN_IF_ERROR(tj_nvptx_module_print(module, allocator, &ir));
  tj_cache_hasher_t h;
  tj_cache_hasher_initialize(&h);
  tj_cache_hasher_update_string(&h, "tensorjit cuda kernel 1");
  tj_cache_hasher_update_string(&h, tj_version_string());
  tj_cache_hasher_update_string(
      &h, tj_nvptx_arch_name(tj_nvptx_target_arch(target)));
  unsigned major, minor, patch;
  tj_nvptx_llvm_version(&major, &minor, &patch);
  char buf[48];
  snprintf(buf, sizeof(buf), "llvm %u.%u.%u", major, minor, patch);
  tj_cache_hasher_update_string(&h, buf);
  tj_cache_hasher_update_string(&h, ir);
  tj_free_string(allocator, ir);
  *out = tj_cache_hasher_finalize(&h);
  return NULL;
}

static tj_status_t compile(tj_cuda_device_t* device,
                           const tj_nvptx_target_t* target,
                           const tj_kir_t* kernel,
                           const tj_nvptx_options_t* options,
                           tj_context_t* context, const char* cache_dir,
                           tj_cuda_kir_kernel_t** out, char** out_ptx) {
  *out = NULL;
  if (out_ptx) *out_ptx = NULL;
  tj_cuda_kir_kernel_t* k = tj_calloc(device->host, 1, sizeof(*k));
  if (!k) return tj_status_oom();
  k->device = device;
  k->kernel = kernel;
  double start = tj_now_ms();
  kir_ptx_t c = {NULL, device->host, NULL, 0};
  tj_status_t status =
      tj_nvptx_module_new(target, device->host, kernel->name, &c.module);
  if (!status)
    status = tj_nvptx_module_add_kernel(c.module, kernel, options, &k->info);
  tj_cuda_cubin_load_t load;
  memset(&load, 0, sizeof(load));
  load.context = context;
  load.cache_dir = out_ptx ? NULL : cache_dir;  // the PTX is wanted
  load.arch = tj_nvptx_target_arch(target);
  load.make_ptx = make_ptx;
  load.make_ptx_ctx = &c;
  if (!status && load.cache_dir && load.cache_dir[0])
    status = ptx_key(target, c.module, device->host, &load.ptx_key);
  double emit_ms = tj_now_ms() - start;
  tj_cuda_cubin_result_t r;
  if (!status) status = tj_cuda_cubin_load(device, &load, &k->module, &r);
  tj_nvptx_module_destroy(c.module);  // a cubin hit: never compiled
  k->compile_ms = emit_ms + c.ms;
  if (!status) {
    k->load_ms = r.load_ms + r.link_ms;
    k->cubin_hit = r.hit;
    status = tj_cuda_kernel_get(k->module, k->info.entry, k->info.shared_bytes,
                                &k->function);
  }
  if (status || !out_ptx) {
    tj_free_string(device->host, c.ptx);
  } else {
    *out_ptx = c.ptx;
  }
  if (status) {
    tj_cuda_kir_destroy(k);
    return tj_status_annotate(status, "kernel @%s", kernel->name);
  }
  *out = k;
  return NULL;
}

tj_status_t tj_cuda_kir_compile(tj_cuda_device_t* device,
                                const tj_nvptx_target_t* target,
                                const tj_kir_t* kernel,
                                const tj_nvptx_options_t* options,
                                tj_cuda_kir_kernel_t** out, char** out_ptx) {
  return compile(device, target, kernel, options, NULL, NULL, out, out_ptx);
}

tj_status_t tj_cuda_kir_compile_cached(
    tj_cuda_device_t* device, const tj_nvptx_target_t* target,
    const tj_kir_t* kernel, const tj_nvptx_options_t* options,
    tj_context_t* context, const char* cache_dir, tj_cuda_kir_kernel_t** out) {
  return compile(device, target, kernel, options, context, cache_dir, out,
                 NULL);
}

void tj_cuda_kir_destroy(tj_cuda_kir_kernel_t* kernel) {
  if (!kernel) return;
  tj_cuda_module_destroy(kernel->module);
  tj_free(kernel->device->host, kernel, sizeof(*kernel));
}

tj_status_t tj_cuda_kir_launch(const tj_cuda_kir_kernel_t* kernel,
                               const tj_cu_deviceptr_t* buffers,
                               const int64_t* scalars) {
  const tj_kir_t* k = kernel->kernel;
  tj_nvptx_launch_t launch;
  TJ_RETURN_IF_ERROR(tj_nvptx_launch_config(k, &kernel->info, scalars,
                                            kernel->device->num_sms, &launch));
  if (launch.empty) return NULL;
  uint64_t addresses[TJ_KIR_MAX_BUFFERS];
  for (uint32_t i = 0; i < k->num_buffers; ++i) addresses[i] = buffers[i];
  TJ_RETURN_IF_ERROR(tj_nvptx_gemm_check_pointers(k, &kernel->info, addresses));
  // cuLaunchKernel takes a pointer to each parameter's value.
  void* args[TJ_KIR_MAX_BUFFERS + TJ_KIR_MAX_PARAMS];
  for (uint32_t i = 0; i < k->num_buffers; ++i) args[i] = (void*)&buffers[i];
  for (uint32_t i = 0; i < k->num_params; ++i)
    args[k->num_buffers + i] = (void*)&scalars[i];
  tj_cuda_launch_t l;
  memcpy(l.grid, launch.grid, sizeof(l.grid));
  memcpy(l.block, launch.block, sizeof(l.block));
  l.shared_bytes = launch.shared_bytes;
  return tj_cuda_kernel_launch(&kernel->function, &l, args);
}
