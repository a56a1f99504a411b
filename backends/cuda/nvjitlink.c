// nvJitLink through dlopen. See nvjitlink.h.

#include "backends/cuda/nvjitlink.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

// nvJitLink.h's types, as the library's ABI has them.
typedef struct nvjitlink_handle* nvjitlink_handle_t;
enum { kSuccess = 0, kInputPtx = 2 };
typedef int (*create_fn)(nvjitlink_handle_t* handle, uint32_t num_options,
                         const char** options);
typedef int (*destroy_fn)(nvjitlink_handle_t* handle);
typedef int (*add_data_fn)(nvjitlink_handle_t handle, int type,
                           const void* data, size_t size, const char* name);
typedef int (*complete_fn)(nvjitlink_handle_t handle);
typedef int (*size_fn)(nvjitlink_handle_t handle, size_t* size);
typedef int (*bytes_fn)(nvjitlink_handle_t handle, void* out);
typedef int (*log_fn)(nvjitlink_handle_t handle, char* out);
typedef int (*version_fn)(unsigned int* major, unsigned int* minor);

struct tj_nvjitlink_t {
  tj_allocator_t al;
  void* lib;
  char version[48];
  create_fn create;
  destroy_fn destroy;
  add_data_fn add_data;
  complete_fn complete;
  size_fn cubin_size;
  bytes_fn cubin;
  size_fn error_log_size;
  log_fn error_log;
  version_fn get_version;
};

tj_status_t tj_nvjitlink_open(tj_allocator_t allocator, const char* setting,
                              tj_nvjitlink_t** out) {
  *out = NULL;
  if (setting && strcmp(setting, "off") == 0)
    return tj_unsupported("nvJitLink: off (TJ_NVJITLINK=off)");
  static const char* const kNames[] = {"libnvJitLink.so.13",
                                       "libnvJitLink.so.12"};
  void* lib = NULL;
  if (setting && setting[0]) {
    lib = dlopen(setting, RTLD_NOW | RTLD_LOCAL);
  } else {
    for (size_t i = 0; i < TJ_ARRAY_SIZE(kNames) && !lib; ++i)
      lib = dlopen(kNames[i], RTLD_NOW | RTLD_LOCAL);
  }
  if (!lib) {
    const char* e = dlerror();
    return tj_unsupported(
        "nvJitLink: %s not found (%s)",
        setting && setting[0] ? setting : "libnvJitLink.so.13/.12",
        e ? e : "dlopen failed");
  }
  tj_nvjitlink_t* l = tj_calloc(allocator, 1, sizeof(*l));
  if (!l) return tj_status_oom();  // the library stays loaded (below)
  l->al = allocator;
  l->lib = lib;
  struct {
    const char* name;
    void** slot;
  } syms[] = {
      {"nvJitLinkCreate", (void**)&l->create},
      {"nvJitLinkDestroy", (void**)&l->destroy},
      {"nvJitLinkAddData", (void**)&l->add_data},
      {"nvJitLinkComplete", (void**)&l->complete},
      {"nvJitLinkGetLinkedCubinSize", (void**)&l->cubin_size},
      {"nvJitLinkGetLinkedCubin", (void**)&l->cubin},
      {"nvJitLinkGetErrorLogSize", (void**)&l->error_log_size},
      {"nvJitLinkGetErrorLog", (void**)&l->error_log},
      {"nvJitLinkVersion", (void**)&l->get_version},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(syms); ++i) {
    // POSIX allows converting dlsym's void* to a function pointer.
    *syms[i].slot = dlsym(lib, syms[i].name);
    if (!*syms[i].slot) {
      tj_nvjitlink_close(l);
      return tj_unsupported("nvJitLink: symbol %s missing", syms[i].name);
    }
  }
  unsigned major = 0, minor = 0;
  if (l->get_version(&major, &minor) != kSuccess) major = minor = 0;
  snprintf(l->version, sizeof(l->version), "nvJitLink %u.%u", major, minor);
  *out = l;
  return NULL;
}

void tj_nvjitlink_close(tj_nvjitlink_t* lib) {
  if (!lib) return;
  // The library stays loaded (no dlclose): it carries its own libstdc++,
  // whose exception pool (72 KB) each load allocates and an unload leaks
  // (LeakSanitizer, nvptx_chunks_test); the next open finds it loaded.
  tj_free(lib->al, lib, sizeof(*lib));
}

const char* tj_nvjitlink_version(const tj_nvjitlink_t* lib) {
  return lib->version;
}

// The handle's error log, for a message; "" when there is none.
static void error_log(const tj_nvjitlink_t* l, nvjitlink_handle_t h, char* buf,
                      size_t cap) {
  buf[0] = '\0';
  size_t size = 0;
  if (l->error_log_size(h, &size) != kSuccess || size == 0) return;
  char* log = tj_alloc(l->al, size + 1);
  if (!log) return;
  if (l->error_log(h, log) == kSuccess) {
    log[size] = '\0';
    snprintf(buf, cap, "%s", log);
  }
  tj_free(l->al, log, size + 1);
}

tj_status_t tj_nvjitlink_assemble(const tj_nvjitlink_t* lib,
                                  tj_nvptx_arch_t arch, const char* ptx,
                                  tj_allocator_t allocator, void** out_cubin,
                                  size_t* out_size) {
  *out_cubin = NULL;
  *out_size = 0;
  char arch_option[32];
  snprintf(arch_option, sizeof(arch_option), "-arch=%s",
           tj_nvptx_arch_name(arch));
  const char* options[] = {arch_option};
  nvjitlink_handle_t h = NULL;
  int r = lib->create(&h, 1, options);
  if (r != kSuccess)
    return tj_status_make(TJ_STATUS_BACKEND_FAILURE,
                          "nvJitLink: nvJitLinkCreate(%s): error %d",
                          arch_option, r);
  const char* call = "nvJitLinkAddData";
  r = lib->add_data(h, kInputPtx, ptx, strlen(ptx) + 1, "tj_chunk.ptx");
  if (r == kSuccess) {
    call = "nvJitLinkComplete";
    r = lib->complete(h);
  }
  size_t size = 0;
  if (r == kSuccess) {
    call = "nvJitLinkGetLinkedCubinSize";
    r = lib->cubin_size(h, &size);
  }
  tj_status_t status = NULL;
  void* cubin = NULL;
  if (r == kSuccess && size == 0)
    status = tj_status_make(TJ_STATUS_BACKEND_FAILURE,
                            "nvJitLink: an empty cubin for %s",
                            tj_nvptx_arch_name(arch));
  if (r == kSuccess && !status) {
    cubin = tj_alloc(allocator, size);
    if (!cubin) status = tj_status_oom();
  }
  if (r == kSuccess && !status) {
    call = "nvJitLinkGetLinkedCubin";
    r = lib->cubin(h, cubin);
  }
  if (r != kSuccess) {
    char log[2048];
    error_log(lib, h, log, sizeof(log));
    status = tj_status_make(
        TJ_STATUS_BACKEND_FAILURE, "nvJitLink: %s for %s: error %d%s%s", call,
        tj_nvptx_arch_name(arch), r, log[0] ? ": " : "", log);
  }
  lib->destroy(&h);
  if (status) {
    if (cubin) tj_free(allocator, cubin, size);
    return status;
  }
  *out_cubin = cubin;
  *out_size = size;
  return NULL;
}
