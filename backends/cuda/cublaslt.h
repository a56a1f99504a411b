// cuBLASLt, opened at run time (dlopen("libcublasLt.so.13"), then .12):
// the vendor GEMM, with its fused bias and bias+GELU epilogues, as a
// candidate beside the generated kernels (and as the baseline of
// bench/cuda_capstone.c). No CUDA header or library is needed to build.
//
// Shapes are row-major, as the rest of libtensorjit:
//   Y[M,N] = epilogue(X[M,K] @ W[K,N] (+ bias[N]))
// cuBLASLt is column-major, so this is computed as Y^T = W^T X^T: A = W
// (N x K, ld N), B = X (K x M, ld K), D = Y (N x M, ld N); the bias is then
// per row of D, which is what CUBLASLT_EPILOGUE_BIAS adds.
//
// cuBLASLt's GELU is the tanh approximation (gelu(x, approximate=true)).

#ifndef TJ_BACKENDS_CUDA_CUBLASLT_H_
#define TJ_BACKENDS_CUDA_CUBLASLT_H_

#include "backends/cuda/cuda_abi.h"
#include "lib/base.h"

typedef struct tj_cublaslt_t tj_cublaslt_t;

// Opens the library and creates a handle. UNSUPPORTED when it is not
// installed (or lacks a symbol). On failure |*out| is NULL.
tj_status_t tj_cublaslt_open(tj_allocator_t allocator, tj_cublaslt_t** out);
// NULL is a no-op.
void tj_cublaslt_close(tj_cublaslt_t* lt);
// "cuBLASLt 130100" style version text. Static storage of the handle.
const char* tj_cublaslt_version(const tj_cublaslt_t* lt);

typedef enum tj_cublaslt_epilogue_e {
  TJ_CUBLASLT_EPILOGUE_NONE = 0,
  TJ_CUBLASLT_EPILOGUE_BIAS = 1,
  TJ_CUBLASLT_EPILOGUE_BIAS_GELU = 2,  // tanh-approximated GELU
} tj_cublaslt_epilogue_t;

// A planned GEMM: descriptors and the algorithm cuBLASLt's heuristic
// picked for one shape.
typedef struct tj_cublaslt_gemm_t tj_cublaslt_gemm_t;

// Plans Y[M,N] = epilogue(X[M,K] @ W[K,N] + bias) for |dtype| (bf16, f16:
// f32 accumulation; f32: exact f32, no TF32) with |workspace_bytes| of
// workspace allowed. UNSUPPORTED when cuBLASLt offers no algorithm.
tj_status_t tj_cublaslt_gemm_plan(tj_cublaslt_t* lt, tj_dtype_t dtype,
                                  int64_t m, int64_t n, int64_t k,
                                  tj_cublaslt_epilogue_t epilogue,
                                  size_t workspace_bytes,
                                  tj_cublaslt_gemm_t** out);
// The same; with |allow_tf32|, f32 GEMMs run in cuBLAS's TF32 mode
// (CUBLAS_COMPUTE_32F_FAST_TF32: operands rounded to TF32's 10-bit
// mantissa, f32 accumulation).
tj_status_t tj_cublaslt_gemm_plan_tf32(tj_cublaslt_t* lt, tj_dtype_t dtype,
                                       bool allow_tf32, int64_t m, int64_t n,
                                       int64_t k,
                                       tj_cublaslt_epilogue_t epilogue,
                                       size_t workspace_bytes,
                                       tj_cublaslt_gemm_t** out);
// The same; with |w_transposed|, W is given as the [N, K] matrix it is
// the transpose of (row-major, rows K apart: x @ w^T, PyTorch's Linear).
tj_status_t tj_cublaslt_gemm_plan_ex(tj_cublaslt_t* lt, tj_dtype_t dtype,
                                     bool allow_tf32, bool w_transposed,
                                     int64_t m, int64_t n, int64_t k,
                                     tj_cublaslt_epilogue_t epilogue,
                                     size_t workspace_bytes,
                                     tj_cublaslt_gemm_t** out);
void tj_cublaslt_gemm_destroy(tj_cublaslt_gemm_t* gemm);

// Enqueues the GEMM on |stream| (device pointers; |bias| ignored without
// a bias epilogue; |workspace| of the planned size, may be 0 if that is
// 0). The caller's CUDA context must be current.
tj_status_t tj_cublaslt_gemm_run(const tj_cublaslt_gemm_t* gemm,
                                 tj_cu_deviceptr_t x, tj_cu_deviceptr_t w,
                                 tj_cu_deviceptr_t bias, tj_cu_deviceptr_t y,
                                 tj_cu_deviceptr_t workspace,
                                 tj_cu_stream_t stream);

// The same, with C: Y = X @ W (+ bias) + C, cuBLASLt's beta 1 (issue 14:
// a residual added in the GEMM), for plans of the NONE and BIAS epilogues
// (cuBLASLt adds C before its epilogue: a GELU would take it in). |c| is an [M,
// N] matrix of the plan's dtype laid out as Y (dense, rows N apart, 256-byte
// aligned); it may be |y| itself (in place) but must not overlap it otherwise.
// The sum is formed in f32 and rounded once, where a matmul then an add round
// the product and the sum apart. |c| 0: beta 0, tj_cublaslt_gemm_run.
tj_status_t tj_cublaslt_gemm_run_c(const tj_cublaslt_gemm_t* gemm,
                                   tj_cu_deviceptr_t x, tj_cu_deviceptr_t w,
                                   tj_cu_deviceptr_t bias, tj_cu_deviceptr_t c,
                                   tj_cu_deviceptr_t y,
                                   tj_cu_deviceptr_t workspace,
                                   tj_cu_stream_t stream);

#endif  // TJ_BACKENDS_CUDA_CUBLASLT_H_
