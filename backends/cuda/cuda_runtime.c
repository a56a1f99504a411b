// Device, context, stream, memory, modules and launches over the driver
// symbol table.

#include "backends/cuda/cuda_runtime.h"

#include <string.h>

// Room for the driver's JIT logs; longer logs are cut (the driver stops
// writing at the size it is given).
#define kJitLogBytes (16u * 1024u)

void tj_cuda_device_options_initialize(tj_cuda_device_options_t* options) {
  memset(options, 0, sizeof(*options));
}

tj_status_t tj_cuda_device_enter(tj_cuda_device_t* device) {
  return TJ_CU_STATUS(&device->cu, cuCtxPushCurrent, (device->context));
}

bool tj_cuda_device_try_enter(tj_cuda_device_t* device) {
  tj_status_t status = tj_cuda_device_enter(device);
  tj_status_free(status);
  return status == NULL;
}

void tj_cuda_device_leave(tj_cuda_device_t* device) {
  tj_cu_context_t popped;
  // Cannot fail when the matching push succeeded.
  (void)device->cu.cuCtxPopCurrent(&popped);
}

//===--- the allocator's view of the device ---===//

// Each op makes the device's context current itself: the allocator may be
// called (release_cached, destroy) from a thread where it is not.

static tj_status_t ops_alloc(void* self, size_t bytes,
                             tj_cu_deviceptr_t* out_ptr) {
  tj_cuda_device_t* d = self;
  TJ_RETURN_IF_ERROR(tj_cuda_device_enter(d));
  tj_status_t status = TJ_CU_STATUS(&d->cu, cuMemAlloc, (out_ptr, bytes));
  tj_cuda_device_leave(d);
  return status;
}

static tj_status_t ops_free(void* self, tj_cu_deviceptr_t ptr) {
  tj_cuda_device_t* d = self;
  TJ_RETURN_IF_ERROR(tj_cuda_device_enter(d));
  tj_status_t status = TJ_CU_STATUS(&d->cu, cuMemFree, (ptr));
  tj_cuda_device_leave(d);
  return status;
}

static tj_status_t ops_synchronize(void* self) {
  tj_cuda_device_t* d = self;
  TJ_RETURN_IF_ERROR(tj_cuda_device_enter(d));
  tj_status_t status = TJ_CU_STATUS(&d->cu, cuCtxSynchronize, ());
  tj_cuda_device_leave(d);
  return status;
}

static tj_status_t ops_stream_wait(void* self, tj_cu_stream_t stream,
                                   tj_cu_stream_t prior) {
  tj_cuda_device_t* d = self;
  TJ_RETURN_IF_ERROR(tj_cuda_device_enter(d));
  // One event serves every wait: cuStreamWaitEvent captures the event's
  // most recent record at the time of the call, so it may be re-recorded
  // right after.
  pthread_mutex_lock(&d->order_mutex);
  tj_status_t status =
      TJ_CU_STATUS(&d->cu, cuEventRecord, (d->order_event, prior));
  if (!status)
    status =
        TJ_CU_STATUS(&d->cu, cuStreamWaitEvent, (stream, d->order_event, 0));
  pthread_mutex_unlock(&d->order_mutex);
  tj_cuda_device_leave(d);
  return status;
}

//===--- device lifecycle ---===//

// Undoes whatever part of create succeeded. The context, if any, is not
// current on entry.
static void teardown(tj_cuda_device_t* d, bool have_mutex) {
  bool entered = d->context && tj_cuda_device_try_enter(d);
  if (entered && d->stream) (void)d->cu.cuStreamSynchronize(d->stream);
  // Its host memory goes even when the context cannot be entered (its ops
  // enter by themselves and their driver calls may fail).
  tj_cuda_allocator_destroy(d->allocator);
  if (entered) {
    if (d->order_event) (void)d->cu.cuEventDestroy(d->order_event);
    if (d->owns_stream && d->stream) (void)d->cu.cuStreamDestroy(d->stream);
    tj_cuda_device_leave(d);
  }
  if (d->owns_primary_context) (void)d->cu.cuDevicePrimaryCtxRelease(d->device);
  if (have_mutex) pthread_mutex_destroy(&d->order_mutex);
  tj_cuda_symbols_deinitialize(&d->cu);
  tj_free(d->host, d, sizeof(*d));
}

// Picks the context per |options|; sets d->context and, for the primary
// context, d->device.
static tj_status_t choose_context(tj_cuda_device_t* d,
                                  const tj_cuda_device_options_t* options) {
  const tj_cuda_symbols_t* cu = &d->cu;
  if (options->host_context) {
    d->context = options->host_context;
    return NULL;
  }
  if (options->use_current_context) {
    TJ_CU_RETURN_IF_ERROR(cu, cuCtxGetCurrent, (&d->context));
    if (!d->context)
      return tj_invalid(
          "cuda device: use_current_context is set but no CUDA context is "
          "current on this thread");
    return NULL;
  }
  if (options->host_stream) {
    TJ_CU_RETURN_IF_ERROR(cu, cuStreamGetCtx,
                          (options->host_stream, &d->context));
    return NULL;
  }
  int count = 0;
  TJ_CU_RETURN_IF_ERROR(cu, cuDeviceGetCount, (&count));
  if (options->ordinal < 0 || options->ordinal >= count)
    return tj_invalid("cuda device: ordinal %d requested; %d device%s found",
                      (int)options->ordinal, count, count == 1 ? "" : "s");
  TJ_CU_RETURN_IF_ERROR(cu, cuDeviceGet, (&d->device, options->ordinal));
  TJ_CU_RETURN_IF_ERROR(cu, cuDevicePrimaryCtxRetain, (&d->context, d->device));
  d->owns_primary_context = true;
  return NULL;
}

static tj_status_t read_properties(tj_cuda_device_t* d) {
  const tj_cuda_symbols_t* cu = &d->cu;
  TJ_CU_RETURN_IF_ERROR(cu, cuCtxGetDevice, (&d->device));
  d->ordinal = d->device;  // CUdevice values are the ordinals
  TJ_CU_RETURN_IF_ERROR(cu, cuDeviceGetName,
                        (d->name, (int)sizeof(d->name), d->device));
  struct {
    tj_cu_device_attribute_t attribute;
    int32_t* value;
  } attributes[] = {
      {TJ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &d->sm_major},
      {TJ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &d->sm_minor},
      {TJ_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &d->num_sms},
      {TJ_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
       &d->max_shared_bytes_optin},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(attributes); ++i) {
    int value = 0;
    TJ_CU_RETURN_IF_ERROR(cu, cuDeviceGetAttribute,
                          (&value, attributes[i].attribute, d->device));
    *attributes[i].value = value;
  }
  TJ_CU_RETURN_IF_ERROR(cu, cuDeviceTotalMem, (&d->total_bytes, d->device));
  return NULL;
}

tj_status_t tj_cuda_device_create(tj_allocator_t host,
                                  const tj_cuda_device_options_t* options,
                                  tj_cuda_device_t** out_device) {
  *out_device = NULL;
  tj_cuda_device_options_t defaults;
  if (!options) {
    tj_cuda_device_options_initialize(&defaults);
    options = &defaults;
  }
  if (options->host_context && options->use_current_context)
    return tj_invalid(
        "cuda device: host_context and use_current_context both given");
  tj_cuda_device_t* d = tj_calloc(host, 1, sizeof(*d));
  if (!d) return tj_status_oom();
  d->host = host;
  tj_status_t status = tj_cuda_symbols_initialize(options->driver_path, &d->cu);
  if (status) {
    tj_free(host, d, sizeof(*d));
    return status;
  }
  if (pthread_mutex_init(&d->order_mutex, NULL) != 0) {
    teardown(d, false);
    return tj_internal("cuda device: pthread_mutex_init failed");
  }
  status = choose_context(d, options);
  if (!status) status = tj_cuda_device_enter(d);
  if (status) {
    d->context = NULL;  // nothing to clean up inside it
    teardown(d, true);
    return status;
  }
  status = read_properties(d);
  if (!status) {
    if (options->host_stream) {
      d->stream = options->host_stream;
    } else {
      status = TJ_CU_STATUS(&d->cu, cuStreamCreate,
                            (&d->stream, TJ_CU_STREAM_NON_BLOCKING));
      d->owns_stream = status == NULL;
    }
  }
  if (!status)
    status = TJ_CU_STATUS(&d->cu, cuEventCreate,
                          (&d->order_event, TJ_CU_EVENT_DISABLE_TIMING));
  if (!status) {
    tj_cuda_memory_ops_t ops = {
        .self = d,
        .alloc = ops_alloc,
        .free = ops_free,
        .synchronize = ops_synchronize,
        .stream_wait = ops_stream_wait,
    };
    status = tj_cuda_allocator_create(host, &ops, &d->allocator);
  }
  tj_cuda_device_leave(d);
  if (status) {
    teardown(d, true);
    return status;
  }
  *out_device = d;
  return NULL;
}

void tj_cuda_device_destroy(tj_cuda_device_t* device) {
  if (device) teardown(device, true);
}

const char* tj_cuda_device_arch_name(const tj_cuda_device_t* device) {
  if (device->sm_major == 9 && device->sm_minor == 0) return "sm_90a";
  if (device->sm_major >= 8) return "sm_80";
  return NULL;
}

tj_status_t tj_cuda_device_synchronize(tj_cuda_device_t* device) {
  TJ_RETURN_IF_ERROR(tj_cuda_device_enter(device));
  tj_status_t status =
      TJ_CU_STATUS(&device->cu, cuStreamSynchronize, (device->stream));
  tj_cuda_device_leave(device);
  return status;
}

//===--- memory ---===//

tj_status_t tj_cuda_device_alloc(tj_cuda_device_t* device, size_t bytes,
                                 tj_cu_deviceptr_t* out_ptr) {
  // The allocator's device ops make the context current when they call
  // the driver; a cache hit needs no driver call at all.
  return tj_cuda_allocator_alloc(device->allocator, bytes, device->stream,
                                 out_ptr);
}

tj_status_t tj_cuda_device_free(tj_cuda_device_t* device,
                                tj_cu_deviceptr_t ptr) {
  if (!ptr) return NULL;
  // No driver call: the context need not be current.
  return tj_cuda_allocator_free(device->allocator, ptr, device->stream);
}

tj_status_t tj_cuda_host_alloc(tj_cuda_device_t* device, size_t bytes,
                               void** out_ptr) {
  *out_ptr = NULL;
  TJ_RETURN_IF_ERROR(tj_cuda_device_enter(device));
  tj_status_t status =
      TJ_CU_STATUS(&device->cu, cuMemAllocHost, (out_ptr, bytes));
  tj_cuda_device_leave(device);
  if (status) *out_ptr = NULL;
  return status;
}

void tj_cuda_host_free(tj_cuda_device_t* device, void* ptr) {
  if (!ptr || !tj_cuda_device_try_enter(device)) return;
  (void)device->cu.cuMemFreeHost(ptr);
  tj_cuda_device_leave(device);
}

tj_status_t tj_cuda_copy_to_device(tj_cuda_device_t* device,
                                   tj_cu_deviceptr_t dst, const void* src,
                                   size_t bytes) {
  if (bytes == 0) return NULL;
  TJ_RETURN_IF_ERROR(tj_cuda_device_enter(device));
  tj_status_t status = TJ_CU_STATUS(&device->cu, cuMemcpyHtoDAsync,
                                    (dst, src, bytes, device->stream));
  tj_cuda_device_leave(device);
  return status;
}

tj_status_t tj_cuda_copy_to_host(tj_cuda_device_t* device, void* dst,
                                 tj_cu_deviceptr_t src, size_t bytes) {
  if (bytes == 0) return NULL;
  TJ_RETURN_IF_ERROR(tj_cuda_device_enter(device));
  tj_status_t status = TJ_CU_STATUS(&device->cu, cuMemcpyDtoHAsync,
                                    (dst, src, bytes, device->stream));
  tj_cuda_device_leave(device);
  return status;
}

tj_status_t tj_cuda_copy_on_device(tj_cuda_device_t* device,
                                   tj_cu_deviceptr_t dst, tj_cu_deviceptr_t src,
                                   size_t bytes) {
  if (bytes == 0) return NULL;
  TJ_RETURN_IF_ERROR(tj_cuda_device_enter(device));
  tj_status_t status = TJ_CU_STATUS(&device->cu, cuMemcpyDtoDAsync,
                                    (dst, src, bytes, device->stream));
  tj_cuda_device_leave(device);
  return status;
}

tj_status_t tj_cuda_fill_bytes(tj_cuda_device_t* device, tj_cu_deviceptr_t dst,
                               uint8_t value, size_t bytes) {
  if (bytes == 0) return NULL;
  TJ_RETURN_IF_ERROR(tj_cuda_device_enter(device));
  tj_status_t status = TJ_CU_STATUS(&device->cu, cuMemsetD8Async,
                                    (dst, value, bytes, device->stream));
  tj_cuda_device_leave(device);
  return status;
}

//===--- modules ---===//

// Trims trailing whitespace of a driver log in place.
static void trim_log(char* log) {
  size_t n = strlen(log);
  while (n > 0 && (log[n - 1] == '\n' || log[n - 1] == ' ')) log[--n] = '\0';
}

tj_status_t tj_cuda_module_load(tj_cuda_device_t* device, const char* ptx,
                                tj_cuda_module_t** out_module) {
  *out_module = NULL;
  tj_cuda_module_t* m = tj_calloc(device->host, 1, sizeof(*m));
  char* error_log = tj_calloc(device->host, 1, kJitLogBytes);
  char* info_log = tj_calloc(device->host, 1, kJitLogBytes);
  if (!m || !error_log || !info_log) {
    tj_free(device->host, m, sizeof(*m));
    tj_free(device->host, error_log, kJitLogBytes);
    tj_free(device->host, info_log, kJitLogBytes);
    return tj_status_oom();
  }
  tj_cu_jit_option_t keys[] = {
      TJ_CU_JIT_ERROR_LOG_BUFFER, TJ_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
      TJ_CU_JIT_INFO_LOG_BUFFER,  TJ_CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
      TJ_CU_JIT_LOG_VERBOSE,
  };
  // Sizes travel as pointer-sized integers in the value array.
  void* values[] = {
      error_log,
      (void*)(uintptr_t)kJitLogBytes,
      info_log,
      (void*)(uintptr_t)kJitLogBytes,
      (void*)(uintptr_t)1,
  };
  tj_status_t status = tj_cuda_device_enter(device);
  if (!status) {
    tj_cu_result_t result = device->cu.cuModuleLoadDataEx(
        &m->module, ptx, (unsigned)TJ_ARRAY_SIZE(keys), keys, values);
    tj_cuda_device_leave(device);
    error_log[kJitLogBytes - 1] = '\0';
    trim_log(error_log);
    status = tj_cuda_result_status(&device->cu, result, "cuModuleLoadDataEx");
    if (status && error_log[0]) {
      tj_status_t detailed =
          tj_status_make(tj_status_code(status), "%s; JIT log:\n%s",
                         tj_status_message(status), error_log);
      tj_status_free(status);
      status = detailed;
    }
  }
  tj_free(device->host, error_log, kJitLogBytes);
  if (status) {
    tj_free(device->host, info_log, kJitLogBytes);
    tj_free(device->host, m, sizeof(*m));
    return status;
  }
  info_log[kJitLogBytes - 1] = '\0';
  trim_log(info_log);
  m->device = device;
  m->info_log = info_log;
  m->info_log_size = kJitLogBytes;
  *out_module = m;
  return NULL;
}

// Appends the driver's JIT error log (if any) to |status|.
static tj_status_t with_jit_log(tj_status_t status, char* error_log) {
  error_log[kJitLogBytes - 1] = '\0';
  trim_log(error_log);
  if (!status || !error_log[0]) return status;
  tj_status_t detailed =
      tj_status_make(tj_status_code(status), "%s; JIT log:\n%s",
                     tj_status_message(status), error_log);
  tj_status_free(status);
  return detailed;
}

tj_status_t tj_cuda_link_ptx(tj_cuda_device_t* device, tj_allocator_t allocator,
                             const char* ptx, unsigned jit_target,
                             void** out_cubin, size_t* out_size) {
  *out_cubin = NULL;
  *out_size = 0;
  char* error_log = tj_calloc(device->host, 1, kJitLogBytes);
  if (!error_log) return tj_status_oom();
  // The linker keeps pointers to the log buffers until cuLinkDestroy.
  tj_cu_jit_option_t keys[] = {
      TJ_CU_JIT_ERROR_LOG_BUFFER,
      TJ_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
      TJ_CU_JIT_TARGET,
  };
  void* values[] = {error_log, (void*)(uintptr_t)kJitLogBytes,
                    (void*)(uintptr_t)jit_target};
  unsigned num_options = jit_target ? 3u : 2u;
  const tj_cuda_symbols_t* cu = &device->cu;
  tj_status_t status = tj_cuda_device_enter(device);
  if (status) {
    tj_free(device->host, error_log, kJitLogBytes);
    return status;
  }
  tj_cu_link_state_t link = NULL;
  status = TJ_CU_STATUS(cu, cuLinkCreate, (num_options, keys, values, &link));
  if (!status) {
    // The driver reads the PTX, NUL included, and never writes it.
    status = TJ_CU_STATUS(cu, cuLinkAddData,
                          (link, TJ_CU_JIT_INPUT_PTX, (void*)(uintptr_t)ptx,
                           strlen(ptx) + 1, "tensorjit", 0, NULL, NULL));
  }
  void* image = NULL;
  size_t size = 0;
  if (!status) status = TJ_CU_STATUS(cu, cuLinkComplete, (link, &image, &size));
  if (!status && (!image || size == 0))
    status = tj_internal("cuLinkComplete returned an empty image");
  void* copy = NULL;
  if (!status) {
    // The image belongs to |link|: copy it out before destroying that.
    copy = tj_alloc(allocator, size);
    if (copy) {
      memcpy(copy, image, size);
    } else {
      status = tj_status_oom();
    }
  }
  if (link) (void)cu->cuLinkDestroy(link);
  tj_cuda_device_leave(device);
  status = with_jit_log(status, error_log);
  tj_free(device->host, error_log, kJitLogBytes);
  if (status) return status;
  *out_cubin = copy;
  *out_size = size;
  return NULL;
}

// Little-endian reads at any alignment.
static uint64_t read_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

// [offset, offset + count * entry) lies inside [0, size).
static bool table_inside(uint64_t offset, uint64_t count, uint64_t entry,
                         size_t size) {
  if (count == 0) return true;
  if (offset > size || entry == 0) return false;
  return count <= ((uint64_t)size - offset) / entry;
}

bool tj_cuda_cubin_is_complete(const void* image, size_t size) {
  // ELF64 (the System V gABI): header 64 bytes, program headers 56, section
  // headers 64; EM_CUDA is 190.
  const unsigned char* p = image;
  if (!p || size < 64) return false;
  if (memcmp(p,
             "\x7f"
             "ELF",
             4) != 0 ||
      p[4] != 2 || p[5] != 1)
    return false;
  if (read_le(p + 18, 2) != 190) return false;
  uint64_t phoff = read_le(p + 32, 8), shoff = read_le(p + 40, 8);
  uint64_t ehsize = read_le(p + 52, 2), phentsize = read_le(p + 54, 2);
  uint64_t phnum = read_le(p + 56, 2), shentsize = read_le(p + 58, 2);
  uint64_t shnum = read_le(p + 60, 2);
  if (ehsize != 64 || (phnum && phentsize != 56) ||
      (shnum && shentsize != 64) || shnum == 0)
    return false;
  if (!table_inside(phoff, phnum, 56, size) ||
      !table_inside(shoff, shnum, 64, size))
    return false;
  for (uint64_t i = 0; i < shnum; ++i) {
    const unsigned char* sh = p + shoff + i * 64;
    uint64_t type = read_le(sh + 4, 4);
    if (type == 8) continue;  // SHT_NOBITS: no bytes in the file
    uint64_t offset = read_le(sh + 24, 8), bytes = read_le(sh + 32, 8);
    if (offset > size || bytes > size - offset) return false;
  }
  for (uint64_t i = 0; i < phnum; ++i) {
    const unsigned char* ph = p + phoff + i * 56;
    uint64_t offset = read_le(ph + 8, 8), filesz = read_le(ph + 32, 8);
    if (offset > size || filesz > size - offset) return false;
  }
  return true;
}

tj_status_t tj_cuda_module_load_cubin(tj_cuda_device_t* device,
                                      const void* image, size_t size,
                                      tj_cuda_module_t** out_module) {
  *out_module = NULL;
  if (!tj_cuda_cubin_is_complete(image, size))
    return tj_invalid(
        "cuda module: %zu bytes that are not a complete CUDA ELF image", size);
  tj_cuda_module_t* m = tj_calloc(device->host, 1, sizeof(*m));
  if (!m) return tj_status_oom();
  tj_status_t status = tj_cuda_device_enter(device);
  if (!status) {
    status = TJ_CU_STATUS(&device->cu, cuModuleLoadData, (&m->module, image));
    tj_cuda_device_leave(device);
  }
  if (status) {
    tj_free(device->host, m, sizeof(*m));
    return status;
  }
  m->device = device;
  *out_module = m;
  return NULL;
}

void tj_cuda_module_destroy(tj_cuda_module_t* module) {
  if (!module) return;
  tj_cuda_device_t* device = module->device;
  if (tj_cuda_device_try_enter(device)) {
    (void)device->cu.cuModuleUnload(module->module);
    tj_cuda_device_leave(device);
  }
  tj_free(device->host, module->info_log, module->info_log_size);
  tj_free(device->host, module, sizeof(*module));
}

tj_status_t tj_cuda_kernel_get(tj_cuda_module_t* module, const char* name,
                               int32_t dynamic_shared_bytes,
                               tj_cuda_kernel_t* out_kernel) {
  memset(out_kernel, 0, sizeof(*out_kernel));
  tj_cuda_device_t* device = module->device;
  const tj_cuda_symbols_t* cu = &device->cu;
  if (dynamic_shared_bytes > device->max_shared_bytes_optin)
    return tj_invalid(
        "cuda kernel %s: %d bytes of shared memory requested; %s allows %d",
        name, (int)dynamic_shared_bytes, device->name,
        (int)device->max_shared_bytes_optin);
  TJ_RETURN_IF_ERROR(tj_cuda_device_enter(device));
  tj_cuda_kernel_t k = {.module = module};
  tj_status_t status = TJ_CU_STATUS(cu, cuModuleGetFunction,
                                    (&k.function, module->module, name));
  struct {
    tj_cu_function_attribute_t attribute;
    int32_t* value;
  } attributes[] = {
      {TJ_CU_FUNC_ATTRIBUTE_NUM_REGS, &k.num_regs},
      {TJ_CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, &k.local_bytes},
      {TJ_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &k.static_shared_bytes},
      {TJ_CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &k.max_threads},
  };
  for (size_t i = 0; !status && i < TJ_ARRAY_SIZE(attributes); ++i) {
    int value = 0;
    status = TJ_CU_STATUS(cu, cuFuncGetAttribute,
                          (&value, attributes[i].attribute, k.function));
    *attributes[i].value = value;
  }
  // Above 48 KiB a kernel must opt in to dynamic shared memory.
  if (!status && dynamic_shared_bytes > 48 * 1024)
    status = TJ_CU_STATUS(
        cu, cuFuncSetAttribute,
        (k.function, TJ_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
         dynamic_shared_bytes));
  tj_cuda_device_leave(device);
  if (status) return tj_status_annotate(status, "cuda kernel %s", name);
  *out_kernel = k;
  return NULL;
}

tj_status_t tj_cuda_kernel_launch(const tj_cuda_kernel_t* kernel,
                                  const tj_cuda_launch_t* launch, void** args) {
  tj_cuda_device_t* device = kernel->module->device;
  TJ_RETURN_IF_ERROR(tj_cuda_device_enter(device));
  tj_status_t status = tj_cuda_launch_on(
      &device->cu, kernel->function, launch->grid, launch->block,
      launch->shared_bytes, launch->cluster, false, device->stream, args);
  tj_cuda_device_leave(device);
  return status;
}

tj_status_t tj_cuda_launch_on(const tj_cuda_symbols_t* cu,
                              tj_cu_function_t function, const uint32_t grid[3],
                              const uint32_t block[3], uint32_t shared_bytes,
                              uint32_t cluster, bool programmatic,
                              tj_cu_stream_t stream, void** args) {
  if (cluster <= 1 && !programmatic)
    return TJ_CU_STATUS(cu, cuLaunchKernel,
                        (function, grid[0], grid[1], grid[2], block[0],
                         block[1], block[2], shared_bytes, stream, args, NULL));
  tj_cu_launch_attribute_t attr[2];
  memset(attr, 0, sizeof(attr));
  unsigned int n = 0;
  if (cluster > 1) {
    attr[n].id = TJ_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr[n].cluster_dim[0] = cluster;
    attr[n].cluster_dim[1] = attr[n].cluster_dim[2] = 1;
    ++n;
  }
  if (programmatic) {
    attr[n].id = TJ_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr[n].cluster_dim[0] = 1;
    ++n;
  }
  tj_cu_launch_layout_t config = {
      .grid = {grid[0], grid[1], grid[2]},
      .block = {block[0], block[1], block[2]},
      .shared_bytes = shared_bytes,
      .stream = stream,
      .attrs = attr,
      .num_attrs = n,
  };
  return TJ_CU_STATUS(cu, cuLaunchKernelEx,
                      ((const tj_cu_launch_config_t*)(const void*)&config,
                       function, args, NULL));
}
