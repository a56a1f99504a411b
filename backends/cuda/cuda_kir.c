// Kernel IR kernels on a CUDA device. See cuda_kir.h.

#include "backends/cuda/cuda_kir.h"

#include <string.h>
#include <time.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

tj_status_t tj_cuda_kir_compile(tj_cuda_device_t* device,
                                const tj_nvptx_target_t* target,
                                const tj_kir_t* kernel,
                                const tj_nvptx_options_t* options,
                                tj_cuda_kir_kernel_t** out, char** out_ptx) {
  *out = NULL;
  if (out_ptx) *out_ptx = NULL;
  tj_cuda_kir_kernel_t* k = tj_calloc(device->host, 1, sizeof(*k));
  if (!k) return tj_status_oom();
  k->device = device;
  k->kernel = kernel;
  double start = now_ms();
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef module = tj_nvptx_module_create(target, ctx, kernel->name);
  tj_status_t status = tj_nvptx_emit_kernel(
      module, tj_nvptx_target_arch(target), kernel, options, &k->info);
  char* ptx = NULL;
  if (status) {
    LLVMDisposeModule(module);
  } else {
    status = tj_nvptx_compile(target, module, device->host, &ptx);
  }
  LLVMContextDispose(ctx);
  k->compile_ms = now_ms() - start;
  if (!status) {
    start = now_ms();
    status = tj_cuda_module_load(device, ptx, &k->module);
    k->load_ms = now_ms() - start;
  }
  if (!status)
    status = tj_cuda_kernel_get(k->module, k->info.entry, k->info.shared_bytes,
                                &k->function);
  if (status || !out_ptx) {
    tj_free_string(device->host, ptx);
  } else {
    *out_ptx = ptx;
  }
  if (status) {
    tj_cuda_kir_destroy(k);
    return tj_status_annotate(status, "kernel @%s", kernel->name);
  }
  *out = k;
  return NULL;
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
