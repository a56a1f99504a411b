// The CUDA target's entry points that the driver layer reaches
// (backends/target_entry.c), with no CUDA type in sight: the driver may
// name the CUDA backend, but only backends/cuda sees the driver API's
// types (tests/check_layering.py). A program here is a program of
// tj_backend_cuda (backends/cuda/cuda_backend.c), passed as void*.

#ifndef TJ_BACKENDS_CUDA_CUDA_ENTRY_H_
#define TJ_BACKENDS_CUDA_CUDA_ENTRY_H_

#include "jit/nvptx.h"
#include "lib/base.h"
#include "tensorjit/tj_executable.h"

// Defined in backends/cuda/cuda_executable.h; opaque here.
typedef struct tj_cuda_program_stats_t tj_cuda_program_stats_t;

// The PTX a GPU of |arch| would load for |graph| compiled with |options|
// (its target is taken as TJ_TARGET_CUDA), made without a device: the same
// middle end, lowering, emission and graph breaks as tj_compile, then
// LLVM's NVPTX back end. Implemented by the driver (backends/target_entry.c)
// over tj_backend_cuda opened with a tj_cuda_offline_arg_t.
typedef struct tj_cuda_offline_ptx_t {
  char* ptx;             // the program's module; NULL without kernels
  char* variants_ptx;    // see tj_cuda_program_variants_ptx; may be NULL
  uint32_t num_kernels;  // in |ptx|
  uint32_t num_variant_kernels;  // in |variants_ptx|
  uint32_t num_host_steps;       // graph breaks
  // tj_cuda_compile_ptx_chunks only (else 0 and NULL, |ptx| is one
  // module): the kernels as the chunks a GPU's program compiles
  // (TJ_CUDA_COMPILE_THREADS, jit/nvptx.h's tj_nvptx_plan_chunks), with
  // |ptx| NULL. Per chunk: its PTX, nvJitLink's cubin (NULL, 0 bytes,
  // without the library: |assembler| says why) and the wall ms on its
  // thread (LLVM and nvJitLink; |chunk_asm_ms| nvJitLink's part).
  uint32_t num_chunks;
  uint32_t chunk_threads;
  double chunks_wall_ms;  // every chunk, on |chunk_threads| threads
  char** chunk_ptx;
  void** chunk_cubin;
  size_t* chunk_cubin_bytes;
  double* chunk_ms;
  double* chunk_asm_ms;
  double* chunk_cpu_ms;  // its thread's CPU ms (a loaded host's figure)
  uint32_t* chunk_of;    // per kernel, |num_kernels|
  char assembler[160];
} tj_cuda_offline_ptx_t;

// Fills |out| (its strings owned by the caller; release them with
// tj_cuda_offline_ptx_deinitialize and the same |al|). On failure |*out|
// holds nothing.
tj_status_t tj_cuda_compile_ptx(const tj_graph_t* graph,
                                const tj_compile_options_t* options,
                                tj_nvptx_arch_t arch, tj_allocator_t al,
                                tj_cuda_offline_ptx_t* out);
void tj_cuda_offline_ptx_deinitialize(tj_allocator_t al,
                                      tj_cuda_offline_ptx_t* ptx);

// tj_cuda_compile_ptx with the program's kernels compiled as chunks on
// |threads| threads (0: TJ_CUDA_COMPILE_THREADS's count) and assembled by
// nvJitLink (TJ_NVJITLINK) where it is found: the chunk fields of |out|.
tj_status_t tj_cuda_compile_ptx_chunks(const tj_graph_t* graph,
                                       const tj_compile_options_t* options,
                                       tj_nvptx_arch_t arch, uint32_t threads,
                                       tj_allocator_t al,
                                       tj_cuda_offline_ptx_t* out);

// The CUDA stats of the generic program of an executable compiled for
// TJ_TARGET_CUDA (implemented by the driver, backends/target_entry.c).
// INVALID_ARGUMENT for other executables.
tj_status_t tj_executable_cuda_stats(const tj_executable_t* executable,
                                     tj_cuda_program_stats_t* out_stats);

// Fills the device memory fields of |st| (tj_executable_stats_t's
// device_*) from the stats of a CUDA executable's generic program; leaves
// them alone for other executables (implemented by the driver,
// backends/target_entry.c).
void tj_executable_cuda_memory(const tj_executable_t* executable,
                               tj_executable_stats_t* st);

// tj_backend_config_t.arg that opens tj_backend_cuda offline: PTX for
// |arch| is made, no device is touched, nothing runs.
typedef struct tj_cuda_offline_arg_t {
  tj_nvptx_arch_t arch;
  bool chunks;       // compile chunks (tj_cuda_compile_ptx_chunks)
  uint32_t threads;  // their threads; 0: TJ_CUDA_COMPILE_THREADS's
} tj_cuda_offline_arg_t;

// Accessors of a program of tj_backend_cuda (backends/cuda/cuda_backend.c),
// for the driver's entry points above: its kernels, its PTX and variants'
// PTX (borrowed; NULL when none, see tj_cuda_program_ptx), and its stats.
uint32_t tj_cuda_backend_num_kernels(const void* program);
const char* tj_cuda_backend_ptx(const void* program);
const char* tj_cuda_backend_variants_ptx(const void* program,
                                         uint32_t* out_num_kernels);
void tj_cuda_backend_stats(const void* program,
                           tj_cuda_program_stats_t* out_stats);
// The device memory fields of |st| (tj_executable_stats_t's device_*).
void tj_cuda_backend_memory(const void* program, tj_executable_stats_t* st);
// Copies an offline program's chunks into |out|'s chunk fields, from |al|.
tj_status_t tj_cuda_backend_chunks(const void* program, tj_allocator_t al,
                                   tj_cuda_offline_ptx_t* out);

#endif  // TJ_BACKENDS_CUDA_CUDA_ENTRY_H_
