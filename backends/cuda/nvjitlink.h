// nvJitLink through dlopen: PTX -> cubin in process, without a GPU and
// without the driver, on any thread (each call has a handle of its own),
// so that the chunks of a CUDA program (jit/nvptx.h's
// tj_nvptx_module_compile_chunks) are assembled on the threads that made
// their PTX, where the driver's JIT (cuLinkAddData) would take one module
// on one thread. CUDA 13's toolkit and its pip wheels ship
// libnvJitLink.so.13. No CUDA header or library is needed to build.
//
// Which library: lib/env.h's TJ_SETTING_NVJITLINK ($TJ_NVJITLINK): unset
// or "" for libnvJitLink.so.13 then .12 from the loader's path, "off" for
// none (the programs then fall back to the driver's JIT, as without the
// library), anything else the library's path.

#ifndef TJ_BACKENDS_CUDA_NVJITLINK_H_
#define TJ_BACKENDS_CUDA_NVJITLINK_H_

#include "jit/nvptx.h"
#include "lib/base.h"

// The opened library. Thread-safe: tj_nvjitlink_assemble may run on
// several threads at once.
typedef struct tj_nvjitlink_t tj_nvjitlink_t;

// Opens the library |setting| names (above). UNSUPPORTED, saying why, when
// it is "off", absent or lacks a symbol. On success |*out| is owned by the
// caller (tj_nvjitlink_close); on failure it is NULL.
tj_status_t tj_nvjitlink_open(tj_allocator_t allocator, const char* setting,
                              tj_nvjitlink_t** out);
// NULL is a no-op. The library itself stays loaded for the process.
void tj_nvjitlink_close(tj_nvjitlink_t* lib);
// "nvJitLink 13.0". Static storage of |lib|.
const char* tj_nvjitlink_version(const tj_nvjitlink_t* lib);

// Assembles |ptx| (NUL-terminated) for |arch| ("-arch=sm_90a") into a
// cubin from |allocator|: |*out_cubin| of |*out_size| bytes, freed with
// tj_free(allocator, cubin, size). BACKEND_FAILURE carrying the library's
// error log when the PTX does not assemble; on failure |*out_cubin| is
// NULL.
tj_status_t tj_nvjitlink_assemble(const tj_nvjitlink_t* lib,
                                  tj_nvptx_arch_t arch, const char* ptx,
                                  tj_allocator_t allocator, void** out_cubin,
                                  size_t* out_size);

#endif  // TJ_BACKENDS_CUDA_NVJITLINK_H_
