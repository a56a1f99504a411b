// The cubin cache. See cuda_cubin.h.

#include "backends/cuda/cuda_cubin.h"

#include "jit/object_check.h"

#include <elf.h>
#include <stdio.h>
#include <string.h>

static void warn(const tj_cuda_cubin_load_t* load, const char* format,
                 const char* what) {
  if (load->context)
    tj_context_diagnostic(load->context, TJ_SEVERITY_WARNING, format, what);
}

// What ptxas's output depends on beyond the PTX: the GPU's compute
// capability and the driver (whose ptxas made it, and which must load it),
// and the assembler when it is not the driver's.
static tj_cache_key_t cubin_key(const tj_cuda_device_t* device,
                                const tj_cuda_cubin_load_t* load) {
  tj_cache_key_t ptx_key = load->ptx_key;
  tj_cache_hasher_t h;
  tj_cache_hasher_initialize(&h);
  tj_cache_hasher_update_string(&h, "tensorjit cuda cubin 1");
  tj_cache_hasher_update(&h, &ptx_key, sizeof(ptx_key));
  char buf[96];
  snprintf(buf, sizeof(buf), "sm %d.%d driver %d", (int)device->sm_major,
           (int)device->sm_minor, device->cu.driver_version);
  tj_cache_hasher_update_string(&h, buf);
  if (load->assembler) tj_cache_hasher_update_string(&h, load->assembler);
  return tj_cache_hasher_finalize(&h);
}

// The cubin under |key| from the memory cache, then the disk cache; a hit
// that loads sets |*out_module|. A refused image is reported and missed.
static tj_status_t load_cached(tj_cuda_device_t* device,
                               const tj_cuda_cubin_load_t* load,
                               tj_cache_key_t key,
                               tj_cuda_module_t** out_module,
                               tj_cuda_cubin_result_t* r) {
  tj_allocator_t al = device->host;
  void* bytes = NULL;
  size_t size = 0;
  bool hit = false;
  r->source = "memory cache";
  if (load->context) {
    TJ_RETURN_IF_ERROR(
        tj_memory_cache_lookup(load->context, key, al, &bytes, &size, &hit));
  }
  if (!hit) {
    const char* why = NULL;
    r->source = "disk cache";
    TJ_RETURN_IF_ERROR(tj_disk_cache_load(load->context, load->cache_dir, key,
                                          al, &bytes, &size, &hit, &why));
  }
  if (!hit) return NULL;
  // What the driver's loader is given from disk must at least be a
  // well-formed CUDA ELF image (object_check.h); if not, a miss.
  static const tj_object_expect_t kCubin = {EM_CUDA, 0, NULL, 0};
  const char* invalid = strcmp(r->source, "disk cache") == 0
                            ? tj_object_check(bytes, size, &kCubin)
                            : NULL;
  if (invalid) {
    tj_free(al, bytes, size);
    if (load->context) {
      tj_context_diagnostic(load->context, TJ_SEVERITY_WARNING,
                            "cache: cuda cubin from the disk cache is not a "
                            "valid image (%s); compiling the PTX again",
                            invalid);
    }
    return NULL;
  }
  double start = tj_now_ms();
  tj_status_t s = tj_cuda_module_load_cubin(device, bytes, size, out_module);
  r->load_ms = tj_now_ms() - start;
  if (!s && load->context && strcmp(r->source, "disk cache") == 0) {
    // A full memory cache only costs a later disk read.
    tj_status_free(tj_memory_cache_store(load->context, key, bytes, size));
  }
  tj_free(al, bytes, size);
  if (tj_status_code(s) == TJ_STATUS_OUT_OF_MEMORY) return s;
  if (s) {
    if (load->context) {
      tj_context_diagnostic(load->context, TJ_SEVERITY_WARNING,
                            "cache: cuda cubin from the %s refused (%s); "
                            "compiling the PTX again",
                            r->source, tj_status_message(s));
    }
    tj_status_free(s);
    return NULL;
  }
  r->hit = true;
  r->bytes = size;
  return NULL;
}

tj_status_t tj_cuda_cubin_load(tj_cuda_device_t* device,
                               const tj_cuda_cubin_load_t* load,
                               tj_cuda_module_t** out_module,
                               tj_cuda_cubin_result_t* out_result) {
  *out_module = NULL;
  tj_cuda_cubin_result_t* r = out_result;
  memset(r, 0, sizeof(*r));
  tj_allocator_t al = device->host;
  const char* ptx = NULL;
  bool disk = load->cache_dir && load->cache_dir[0];
  if (!disk) {
    r->source = "none (no disk cache: PTX loaded)";
    TJ_RETURN_IF_ERROR(load->make_ptx(load->make_ptx_ctx, &ptx));
    double start = tj_now_ms();
    tj_status_t s = tj_cuda_module_load(device, ptx, out_module);
    r->load_ms = tj_now_ms() - start;
    return s;
  }
  tj_cache_key_t key = cubin_key(device, load);
  TJ_RETURN_IF_ERROR(load_cached(device, load, key, out_module, r));
  if (r->hit) return NULL;
  TJ_RETURN_IF_ERROR(load->make_ptx(load->make_ptx_ctx, &ptx));
  void* bytes = NULL;
  size_t size = 0;
  double start = tj_now_ms();
  tj_status_t link = tj_cuda_link_ptx(device, al, ptx, 0, &bytes, &size);
  if (link && tj_status_code(link) != TJ_STATUS_OUT_OF_MEMORY &&
      load->arch == TJ_NVPTX_SM_90A) {
    // sm_90a PTX needs the arch-specific target where the context's
    // (compute_90) does not imply it.
    tj_status_free(link);
    link = tj_cuda_link_ptx(device, al, ptx, TJ_CU_TARGET_COMPUTE_90A, &bytes,
                            &size);
  }
  r->link_ms = tj_now_ms() - start;
  if (link && tj_status_code(link) != TJ_STATUS_OUT_OF_MEMORY) {
    // The module still loads from its PTX; only the cubin is not cached.
    warn(load, "cache: no cuda cubin: %s; loading the PTX",
         tj_status_message(link));
    tj_status_free(link);
    r->source = "none (the driver's linker failed: PTX loaded)";
    start = tj_now_ms();
    tj_status_t s = tj_cuda_module_load(device, ptx, out_module);
    r->load_ms = tj_now_ms() - start;
    return s;
  }
  TJ_RETURN_IF_ERROR(link);
  r->source = "driver linker";
  r->bytes = size;
  start = tj_now_ms();
  tj_status_t status =
      tj_cuda_module_load_cubin(device, bytes, size, out_module);
  r->load_ms = tj_now_ms() - start;
  if (!status) {
    tj_status_t s = tj_disk_cache_store(load->cache_dir, key, bytes, size);
    tj_disk_cache_warn_store(load->context, load->cache_dir, s);
    tj_status_free(s);
    if (load->context)
      tj_status_free(tj_memory_cache_store(load->context, key, bytes, size));
  }
  tj_free(al, bytes, size);
  return status;
}

tj_status_t tj_cuda_cubin_lookup(tj_cuda_device_t* device,
                                 const tj_cuda_cubin_load_t* load,
                                 tj_cuda_module_t** out_module,
                                 tj_cuda_cubin_result_t* out_result) {
  *out_module = NULL;
  memset(out_result, 0, sizeof(*out_result));
  tj_cuda_cubin_load_t l = *load;
  if (!l.cache_dir) l.cache_dir = "";  // the memory cache only
  return load_cached(device, &l, cubin_key(device, &l), out_module, out_result);
}

void tj_cuda_cubin_store(tj_cuda_device_t* device,
                         const tj_cuda_cubin_load_t* load, const void* cubin,
                         size_t size) {
  tj_cache_key_t key = cubin_key(device, load);
  if (load->cache_dir && load->cache_dir[0]) {
    tj_status_t s = tj_disk_cache_store(load->cache_dir, key, cubin, size);
    tj_disk_cache_warn_store(load->context, load->cache_dir, s);
    tj_status_free(s);
  }
  if (load->context)
    tj_status_free(tj_memory_cache_store(load->context, key, cubin, size));
}
