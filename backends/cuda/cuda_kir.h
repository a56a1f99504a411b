// Kernel IR kernels on a CUDA device: lower and compile to PTX (an NVPTX
// module of jit/nvptx.h), load, and launch with the grid the template needs for
// the run's sizes. The seed of the CUDA executable: a compiled graph holds
// one of these per fused group.

#ifndef TJ_BACKENDS_CUDA_CUDA_KIR_H_
#define TJ_BACKENDS_CUDA_CUDA_KIR_H_

#include "backends/cuda/cuda_cubin.h"
#include "backends/cuda/cuda_runtime.h"
#include "jit/nvptx.h"

typedef struct tj_cuda_kir_kernel_t {
  tj_cuda_device_t* device;  // borrowed
  const tj_kir_t* kernel;    // borrowed: must outlive this object
  tj_nvptx_kernel_t info;
  tj_cuda_module_t* module;
  tj_cuda_kernel_t function;
  double compile_ms;  // lowering + LLVM + PTX, without the driver's load
  double load_ms;     // the driver's linker (ptxas) and module load
  bool cubin_hit;     // loaded from the cubin cache: no LLVM, no ptxas
} tj_cuda_kir_kernel_t;

// Compiles |kernel| for |device| with |target| (whose arch must suit the
// device: tj_cuda_device_arch_name) and loads it. |kernel| is borrowed and
// must outlive the result. On success |*out| is owned by the caller
// (tj_cuda_kir_destroy); on failure it is NULL. When |out_ptx| is not NULL
// it receives the PTX (free with tj_free_string(device->host, ...)).
// |options| may be NULL for the defaults.
tj_status_t tj_cuda_kir_compile(tj_cuda_device_t* device,
                                const tj_nvptx_target_t* target,
                                const tj_kir_t* kernel,
                                const tj_nvptx_options_t* options,
                                tj_cuda_kir_kernel_t** out, char** out_ptx);

// As tj_cuda_kir_compile, but through the cubin cache (cuda_cubin.h):
// |context|'s memory cache (|context| may be NULL) and the disk cache under
// |cache_dir| ("" or NULL: none, the PTX is loaded). A hit still lowers the
// kernel (for its launch contract) but runs neither LLVM's back end nor
// ptxas.
tj_status_t tj_cuda_kir_compile_cached(
    tj_cuda_device_t* device, const tj_nvptx_target_t* target,
    const tj_kir_t* kernel, const tj_nvptx_options_t* options,
    tj_context_t* context, const char* cache_dir, tj_cuda_kir_kernel_t** out);

// NULL is a no-op.
void tj_cuda_kir_destroy(tj_cuda_kir_kernel_t* kernel);

// Enqueues |kernel| on its device's stream: |buffers| holds a device
// pointer per buffer (declaration order), |scalars| the params. Sizes that
// leave no work launch nothing.
tj_status_t tj_cuda_kir_launch(const tj_cuda_kir_kernel_t* kernel,
                               const tj_cu_deviceptr_t* buffers,
                               const int64_t* scalars);

// The tensor maps a TMA GEMM kernel (tj_nvptx_kernel_t.tma) takes by
// value after its scalars: CUtensorMaps of A and B, 64-byte aligned; with
// tj_nvptx_kernel_t.tma_store, the output's and |c_ok| after them.
typedef struct tj_cuda_tensor_maps_t {
  _Alignas(64) uint64_t a[16];
  _Alignas(64) uint64_t b[16];
  _Alignas(64) uint64_t c[16];
  _Alignas(64) uint64_t b2[16];  // a dual GEMM's B2 (swiglu, issue 14)
  int32_t c_ok;  // 1: |c| is encoded; 0: the kernel stores without it
} tj_cuda_tensor_maps_t;

// The kernel-parameter slots (cuLaunchKernel's pointers to values) of
// |maps| for a kernel of |info|, from slot 0 of |out_args|: A, B, a dual
// GEMM's B2, then with tma_store the output and its flag. Returns how
// many.
uint32_t tj_cuda_tensor_map_args(const tj_nvptx_kernel_t* info,
                                 tj_cuda_tensor_maps_t* maps, void** out_args);

// Encodes the tensor maps of TMA GEMM |kernel| (|info|) on |device| (the
// driver wants its context current; this makes it so) for a run with
// device pointers |buffers| (declaration order) and |scalars|: A [M, K] as
// boxes of 64 k x tile_m rows, B [K, N] as boxes of 64 n x 64 k, both with
// the 128-byte swizzle and zero fill past the edges. A batched operand
// (tj_nvptx_gemm_operand_batched) is mapped as [entries, rows, cols], its
// batch dims as one, boxes one entry deep. With K = 0 or no entries the
// maps are zeros (the kernel reads neither). With tma_store, the
// output [M, N] as boxes of 128 bytes of n by tile_m rows, 128-byte
// swizzle, where TMA can address it (else |c_ok| is 0 and the kernel
// stores it from its threads). UNSUPPORTED, naming the
// kernel and the operand, for what TMA cannot address (a base not 16-byte
// aligned, a row or matrix pitch not a multiple of 16 bytes, under a row
// or past 2^40, a size past 2^32, batch dims that are not one dim of
// evenly spaced matrices); INVALID_ARGUMENT for a kernel that is not a
// TMA gemm; a driver refusal is its status, annotated the same way.
tj_status_t tj_cuda_gemm_tensor_maps(tj_cuda_device_t* device,
                                     const tj_kir_t* kernel,
                                     const tj_nvptx_kernel_t* info,
                                     const uint64_t* buffers,
                                     const int64_t* scalars,
                                     tj_cuda_tensor_maps_t* out_maps);

#endif  // TJ_BACKENDS_CUDA_CUDA_KIR_H_
