// LLVM's NVPTX back end, in process: target machines for the GPUs
// libtensorjit supports and module -> PTX text. No nvcc, no NVRTC: the PTX
// is loaded by the CUDA driver (backends/cuda/cuda_runtime.h), which
// compiles it for the exact GPU.
//
// Only known (CPU, PTX version) pairs are offered. NVPTX reports an
// instruction it cannot select with report_fatal_error, which would abort
// the host process (LLVM-NOTES.md): every kernel template is compiled for
// every tj_nvptx_arch_t and checked with ptxas in CI (tests/cuda/), so that
// such a failure cannot reach users.

#ifndef TJ_JIT_NVPTX_H_
#define TJ_JIT_NVPTX_H_

#include <llvm-c/Core.h>

#include "lib/base.h"

typedef enum tj_nvptx_arch_e {
  // Ampere (A100, RTX 30xx) and anything newer, through the driver's PTX
  // JIT: mma.sync, ldmatrix, cp.async. PTX ISA 7.8.
  TJ_NVPTX_SM_80 = 0,
  // Hopper (H100, H200) with its arch-specific features (wgmma, TMA,
  // setmaxnreg). PTX ISA 8.0. PTX for sm_90a runs on sm_90 parts only.
  TJ_NVPTX_SM_90A = 1,
  TJ_NVPTX_ARCH_COUNT_ = 2,
} tj_nvptx_arch_t;

// "sm_80", "sm_90a". Static storage.
const char* tj_nvptx_arch_name(tj_nvptx_arch_t arch);
// The arch called |name| ("sm_80", "sm_90a"); false if unknown.
bool tj_nvptx_arch_from_name(const char* name, tj_nvptx_arch_t* out_arch);

// A target machine for one arch. Thread-compatible: use one per thread (or
// guard it); creating one costs a fraction of a millisecond.
typedef struct tj_nvptx_target_t tj_nvptx_target_t;

// A target machine for |arch|, its bookkeeping from |allocator|. On success
// |*out_target| is owned by the caller (tj_nvptx_target_destroy); on failure
// it is NULL. Initializes LLVM's NVPTX target once per process.
tj_status_t tj_nvptx_target_create(tj_allocator_t allocator,
                                   tj_nvptx_arch_t arch,
                                   tj_nvptx_target_t** out_target);
// NULL is a no-op.
void tj_nvptx_target_destroy(tj_nvptx_target_t* target);
tj_nvptx_arch_t tj_nvptx_target_arch(const tj_nvptx_target_t* target);

// An empty module in |context| with the target's triple and data layout.
// Owned by the caller (LLVMDisposeModule, or pass it to tj_nvptx_compile).
LLVMModuleRef tj_nvptx_module_create(const tj_nvptx_target_t* target,
                                     LLVMContextRef context, const char* name);

// Verifies |module|, optimizes it (default<O3>) and emits PTX: a
// NUL-terminated string from |allocator| in |*out_ptx| (free with
// tj_free_string), NULL on failure. Takes ownership of |module|, even on
// failure. A module that fails verification is INTERNAL (an emitter bug).
tj_status_t tj_nvptx_compile(const tj_nvptx_target_t* target,
                             LLVMModuleRef module, tj_allocator_t allocator,
                             char** out_ptx);

#endif  // TJ_JIT_NVPTX_H_
