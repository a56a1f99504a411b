// Kernel IR -> NVPTX LLVM IR: the last lowering step of the CUDA backend.
//
// The kernel IR (jit/kernel_ir.h) and its body semantics are shared with the
// x86 JIT: bodies are emitted by tj_emit_body (jit/emit_llvm.c) with the
// same op lowering and transcendentals (jit/vecmath.h), at a point that one
// GPU thread owns. Only the templates differ:
//   POINTWISE   a 2-D grid-stride loop: blocks and threads in y walk the
//               outer dims (rows), in x the innermost dim, so symbolic sizes
//               need no recompilation. Each thread handles 16 bytes of the
//               widest buffer per step (128-bit ld/st.v4) when the innermost
//               size and every contiguous buffer allow it at run time, else
//               one element.
//   ROW_REDUCE  one row per group of ntid.x threads (ntid.y rows per block),
//               the same vector/scalar choice along the row; each REDUCE
//               phase combines per-thread partials with warp shuffles, then
//               across the row's warps through shared memory; MAP and ROW
//               phases follow while the row is hot in L1/L2.
//   GEMM        f16/bf16 operands: tensor cores (mma.sync m16n8k16, f32
//               accumulators), ldmatrix from an XOR-swizzled shared-memory
//               tile ring filled by cp.async (multi-stage pipeline), then the
//               epilogue phase on every accumulator (bias, gelu, residual,
//               cast) before the store. f32 operands: CUDA-core FMA tiles.
//               See emit_nvptx_gemm.c.
//
// A compiled kernel is a __global__ function "tj_kernel_<name>" whose
// parameters are the buffers' device pointers in declaration order, then
// the scalar params as int64 values; tj_nvptx_launch_config gives its grid.

#ifndef TJ_JIT_EMIT_NVPTX_H_
#define TJ_JIT_EMIT_NVPTX_H_

#include "jit/emit_llvm.h"
#include "jit/nvptx.h"

// How a lowered kernel is launched; filled by tj_nvptx_emit_kernel.
typedef struct tj_nvptx_kernel_t {
  char entry[224];  // the PTX entry name: "tj_kernel_" + <= 200 bytes
  tj_kir_kind_t kind;
  uint32_t num_buffers, num_params;
  int32_t vector_lanes;       // elements per thread step on the vector path
  int32_t threads;            // threads per block
  int32_t shared_bytes;       // dynamic shared memory per block
  int32_t min_blocks_per_sm;  // .minnctapersm, 0 for none
  // ROW_REDUCE: vectors of the row each thread holds in registers on the
  // resident path (the launch sizes blocks so a row needs no more), 0 when
  // the kernel has no such path.
  int32_t row_slots;
  // POINTWISE: vectors a thread takes per loop step (1 on the scalar path;
  // the vector path's grid is that many times narrower).
  int32_t items_per_thread;
  // GEMM.
  bool tensor_cores;  // mma.sync path (f16/bf16 operands)
  int32_t tile_m, tile_n, tile_k, stages;
  int32_t group_m;  // blocks of one M group share B columns in L2
} tj_nvptx_kernel_t;

// Choices the autotuner may vary; zeros mean the defaults.
typedef struct tj_nvptx_options_t {
  int32_t gemm_tile_k;  // tensor-core k-tile: 32 (default) or 64
  int32_t gemm_stages;  // cp.async ring depth, 2..8 (default 4)
  // exp, tanh, sigmoid and erf of f32/f16/bf16 values from the GPU's
  // approximate instructions (ex2.approx, rcp.approx) instead of the
  // portable polynomials: ~4x fewer instructions, a few ulp in f32
  // (jit/nvptx_math.h states the bounds).
  bool approx_math;
} tj_nvptx_options_t;

// Appends kernel |kernel| to |module| (an NVPTX module for |arch|, see
// tj_nvptx_module_create) and describes its launch in |*out_kernel|.
// |kernel| should be finalized; the emitter re-checks what it relies on and
// returns INVALID_ARGUMENT for what it cannot lower, and UNSUPPORTED for
// valid kernels the GPU path does not do yet (f64 tanh, erf, sin, cos and
// pow, which the x86 path takes from libm; a GEMM operand that is neither
// f32, f16 nor bf16; mixed operand dtypes).
// |options| may be NULL (defaults); an out-of-range option is
// INVALID_ARGUMENT.
tj_status_t tj_nvptx_emit_kernel(LLVMModuleRef module, tj_nvptx_arch_t arch,
                                 const tj_kir_t* kernel,
                                 const tj_nvptx_options_t* options,
                                 tj_nvptx_kernel_t* out_kernel);

typedef struct tj_nvptx_launch_t {
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;
  bool empty;  // no work at these sizes: skip the launch
} tj_nvptx_launch_t;

// The launch of |info| (from |kernel|) for |scalars| on a GPU with
// |num_sms| multiprocessors. INVALID_ARGUMENT for negative sizes; for a
// tensor-core GEMM, UNSUPPORTED when a runtime stride of A or B breaks the
// 16-byte alignment cp.async needs (tj_nvptx_gemm_check_pointers checks the
// pointers).
tj_status_t tj_nvptx_launch_config(const tj_kir_t* kernel,
                                   const tj_nvptx_kernel_t* info,
                                   const int64_t* scalars, int32_t num_sms,
                                   tj_nvptx_launch_t* out_launch);

// Tensor-core GEMMs read A and B with 16-byte cp.async: their base
// addresses (|buffers|, device pointers in declaration order) must be
// 16-byte aligned. UNSUPPORTED otherwise.
tj_status_t tj_nvptx_gemm_check_pointers(const tj_kir_t* kernel,
                                         const tj_nvptx_kernel_t* info,
                                         const uint64_t* buffers);

//===--- shared by the template files ---===//

typedef struct tj_nvptx_emit_t {
  tj_emit_t em;  // tj_emit_body's state: kernel, builder, bases, scalars
  tj_nvptx_arch_t arch;
  tj_nvptx_options_t options;
  LLVMTypeRef t_ptr_shared;  // ptr addrspace(3)
  LLVMTypeRef t_ptr_global;  // ptr addrspace(1)
  tj_nvptx_kernel_t* info;
} tj_nvptx_emit_t;

// A special register (e.g. "tid.x") as i32.
LLVMValueRef tj_nvptx_sreg(tj_nvptx_emit_t* nv, const char* name);
// The same, zero-extended to i64.
LLVMValueRef tj_nvptx_sreg64(tj_nvptx_emit_t* nv, const char* name);
// bar.sync 0.
void tj_nvptx_barrier(tj_nvptx_emit_t* nv);
// A module-level shared-memory array of |bytes| bytes, 16-byte aligned.
LLVMValueRef tj_nvptx_shared_array(tj_nvptx_emit_t* nv, const char* name,
                                   uint32_t bytes);
// The dynamic shared memory of the kernel (extern .shared).
LLVMValueRef tj_nvptx_dynamic_shared(tj_nvptx_emit_t* nv);
// Calls intrinsic |name| (not overloaded).
LLVMValueRef tj_nvptx_call(tj_nvptx_emit_t* nv, const char* name,
                           LLVMValueRef* args, unsigned num_args);
// Raises the alignment of the loads and stores of |point|'s unit-stride
// buffers emitted into |fn| so far to |lanes| elements (callers have
// checked it at run time): LLVM then selects 128-bit ld/st.v4.
void tj_nvptx_align_accesses(tj_nvptx_emit_t* nv, const tj_emit_point_t* point,
                             int32_t lanes);

// The GEMM template (emit_nvptx_gemm.c). Called with the kernel function
// open in the entry block.
tj_status_t tj_nvptx_emit_gemm(tj_nvptx_emit_t* nv);
tj_status_t tj_nvptx_gemm_launch(const tj_kir_t* kernel,
                                 const tj_nvptx_kernel_t* info,
                                 const int64_t* scalars, int32_t num_sms,
                                 tj_nvptx_launch_t* out_launch);

#endif  // TJ_JIT_EMIT_NVPTX_H_
