// Loading a CUDA module through the cubin cache: a PTX text is made a cubin
// once by the driver's linker (ptxas, in process), and the cubin is kept in
// the context's memory cache and the disk cache, keyed by the PTX's key,
// the GPU's compute capability and the driver version; a later load, in
// this process or a fresh one, runs neither LLVM nor ptxas. Used for the
// program module of an executable and for every separately compiled
// kernel (GEMM variants the autotuner picks, epilogue and strided-copy
// kernels), so that a warm process's first run compiles nothing.

#ifndef TJ_BACKENDS_CUDA_CUDA_CUBIN_H_
#define TJ_BACKENDS_CUDA_CUDA_CUBIN_H_

#include "backends/cuda/cuda_runtime.h"
#include "jit/cache.h"
#include "jit/nvptx.h"

// Makes the PTX text on a cache miss (NUL-terminated, owned by the
// callback's context and valid until the load returns).
typedef tj_status_t (*tj_cuda_ptx_fn)(void* ctx, const char** out_ptx);

typedef struct tj_cuda_cubin_load_t {
  tj_context_t* context;   // memory cache and diagnostics; may be NULL
  const char* cache_dir;   // the disk cache's directory; "" or NULL: none
  tj_cache_key_t ptx_key;  // everything the PTX depends on
  tj_nvptx_arch_t arch;    // the PTX's target
  tj_cuda_ptx_fn make_ptx;
  void* make_ptx_ctx;
  // What assembles the PTX when not the driver ("nvJitLink 13.0",
  // nvjitlink.h), for the cubin's key; NULL: the driver's linker.
  const char* assembler;
} tj_cuda_cubin_load_t;

typedef struct tj_cuda_cubin_result_t {
  // "memory cache", "disk cache", "driver linker", or "none (...)" when the
  // module was loaded from its PTX (no disk cache, or the linker failed).
  const char* source;
  bool hit;        // from a cache: no LLVM, no ptxas
  size_t bytes;    // the cubin's size, 0 without one
  double link_ms;  // the driver's linker on a miss
  double load_ms;  // cuModuleLoadData(Ex)
} tj_cuda_cubin_result_t;

// Loads the module described by |load|. A cached image the driver (or
// tj_cuda_cubin_is_complete) refuses is a miss: the cubin is made again
// and the entry rewritten. Without a disk cache directory the PTX is
// loaded as is (a cubin would have nowhere to live across processes; the
// driver keeps its own cache of ptxas's work). On success |*out_module| is
// owned by the caller.
tj_status_t tj_cuda_cubin_load(tj_cuda_device_t* device,
                               const tj_cuda_cubin_load_t* load,
                               tj_cuda_module_t** out_module,
                               tj_cuda_cubin_result_t* out_result);

// The cubin of |load|'s key (its assembler's) from the memory cache, then
// the disk cache (when |load| has a directory), loaded into
// |*out_module| (owned by the caller) with |out_result| saying where it
// came from; no hit leaves |*out_module| NULL and |out_result->hit| false,
// a refused image among them (with a warning). make_ptx is not called.
tj_status_t tj_cuda_cubin_lookup(tj_cuda_device_t* device,
                                 const tj_cuda_cubin_load_t* load,
                                 tj_cuda_module_t** out_module,
                                 tj_cuda_cubin_result_t* out_result);

// Keeps |cubin| (|size| bytes, made by |load|'s assembler) under |load|'s
// key in the memory cache and, with a directory, the disk cache. A full
// cache or a failed store only costs a later compile: never fails.
void tj_cuda_cubin_store(tj_cuda_device_t* device,
                         const tj_cuda_cubin_load_t* load, const void* cubin,
                         size_t size);

#endif  // TJ_BACKENDS_CUDA_CUDA_CUBIN_H_
