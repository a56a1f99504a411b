// Fast transcendentals for NVPTX kernels: the GPU's special-function unit
// (ex2.approx, rcp.approx) with exact range reductions around it, for the
// f32 math of f32, f16 and bf16 values. A fused GEMM epilogue runs on CUDA
// cores beside tensor cores that produce an output element every ~2K FLOP;
// the portable polynomials of jit/vecmath.h cost ~80 FP32 instructions per
// gelu and made the epilogue, not the tensor cores, the bottleneck.
//
// Accuracy, f32, against libm in double: the bound tests/cuda/
// cuda_exec_test.c enforces on the GPU over 2M points per function, and
// the maximum measured on an H200 in brackets (the precise polynomials:
// 1.00, 1.27, 2.17, 1.22, 5.50):
//   exp      <= 3 ulp [2.51]  2^t with t = x*log2(e) carried in two floats
//                       (fma), ex2.approx(t_hi) * (1 + t_lo*ln2);
//                       results below 2^-126 flush to 0 (ftz).
//   tanh     <= 3 ulp [1.65]  odd polynomial (Cephes) below 0.625, else
//                       1 - 2*rcp(exp(2|x|) + 1).
//   sigmoid  <= 5 ulp [4.33]  e = exp(-|x|): rcp(1 + e), or e*rcp(1 + e).
//   erf      <= 3 ulp [1.15]  N. Juffa's erff: x + x*P(x^2) below 0.9277,
//                       else 1 - exp(Q(|x|)) (0.96 ulp with a correct exp).
//   erfc     <= 7 ulp [3.39]  exp(-a^2) (1 + P(q)) / (1 + 2a) for a = |x|,
//                       q = (a-2)/(a+2) (the form of Juffa's erfcf; our
//                       own minimax P); 2 - that for x < 0. Relative in
//                       the tail, where gelu (erf) reads it. 38 PTX
//                       instructions; the precise path's 75 (an IEEE
//                       reciprocal, a polynomial exp, two-sums) took the
//                       erf capstone from 0.045 to 0.062 ms on the H200
//                       (in one run: 0.046 with this, 0.067 precise).
// NaN gives NaN, +-inf the limits. The transcendentals tanh.approx.f32
// (2^-11 relative) and lg2.approx are not used: 1 + tanh(x) in gelu's
// negative tail would lose the low bits a bf16 result still shows.
// Versus torch's assert_close tolerances these are far inside bf16 (rtol
// 1.6e-2) and f16 (1e-3); f32 results may differ from libm's by the ulps
// above (torch's f32 rtol 1.3e-6 is ~11 ulp).

#ifndef TJ_JIT_NVPTX_MATH_H_
#define TJ_JIT_NVPTX_MATH_H_

#include "jit/emit_llvm.h"

// A tj_emit_unary_hook_fn: exp, tanh, sigmoid, erf and erfc; NULL for other
// ops.
LLVMValueRef tj_nvptx_approx_unary(struct tj_emit_t* em, tj_op_t op,
                                   LLVMValueRef x);

// A tj_emit_gelu_hook_fn (tj_emit_target_t.gelu_half): gelu (erf) of a
// value rounded to f16 or bf16, x Phi(x) with Phi from one rcp.approx and
// one ex2.approx (16 PTX instructions), within 1.5e-5 (2^-16) of the exact
// value relative, before that rounding (nvptx_math.c); NULL for other
// dtypes (f32 keeps erfc's path, 7 ulp).
LLVMValueRef tj_nvptx_gelu_erf(struct tj_emit_t* em, tj_dtype_t dtype,
                               LLVMValueRef x);

#endif  // TJ_JIT_NVPTX_MATH_H_
