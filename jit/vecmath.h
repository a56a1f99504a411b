// Vectorized transcendentals emitted inline into kernels: polynomial code on
// the kernel's vector type, no libm calls for f32 (f16 and bf16 compute in
// f32). Each function takes and returns a value of float or double
// type, scalar or vector.
//
// f32 accuracy against libm in double, maximum over ~1M inputs per function
// on AVX-512, AVX2 and SSE2 (tests/unit/vecmath_test.c prints the table;
// the bound is what the test enforces, the measured maximum in brackets):
//   exp      <= 1 ulp [0.99]  range reduction x - q*ln2 in two exact parts,
//                          degree-6 polynomial (Cephes expf), 2^q applied in
//                          two steps so subnormal results round once;
//                          > 88.72 -> inf, < -103.98 -> 0.
//   log      <= 1 ulp [0.76]  mantissa in [sqrt(1/2), sqrt(2)), degree-8
//                          polynomial (Cephes logf); subnormal inputs scaled.
//   tanh     <= 2 ulp [1.32]  odd polynomial below 0.625, else
//                          1 - 2 / (exp(2|x|) + 1).
//   sigmoid  <= 2.5 ulp [2.26]  e = exp(-|x|): 1/(1+e), or e/(1+e) for
//                          x < 0 (one division; exp's error dominates).
//   erf      <= 1.5 ulp [1.42]  Taylor series in x^2 (12 terms) as
//                          x + x*(...) for |x| < 1; 1 - t*exp(-x^2 + P(t)),
//                          t = 1/(1 + |x|/2) (Numerical Recipes erfcc, 1.2e-7
//                          relative in erfc) above; exactly +-1 beyond 4.
//   erfc     <= 7 ulp [6.53]  t*exp(-x^2 + P(t)) for |x| (erfcc above),
//                          2 - that for x < 0; x^2 split exactly and the
//                          exponent's rounding carried as a factor, so the
//                          tail keeps its relative accuracy down to 1e-38
//                          (erfc(10)); the f32 Horner sum of P, which
//                          cancels near 0, is what costs the 6 ulp.
//   sin, cos <= 2 ulp [1.54]  reduction by pi/2 in double: a 3-part pi/2
//                          below 2^20 (exact there), Payne-Hanek with 240
//                          bits of 2/pi above (exact for every finite f32,
//                          tested to 2^128; taken in a branch only when a
//                          lane needs it), then Cephes sinf/cosf polynomials
//                          on |r| <= pi/4.
//   asin,    <= 2 ulp [1.87, acos 1.24]  Cephes asinf: an odd polynomial
//   acos                   for |x| <= 1/2, else pi/2 - 2 asin(sqrt((1-|x|)/2));
//                          acos as pi/2 - asin, 2 asin(s) or pi - 2 asin(s);
//                          the constants added as an f32 head and tail.
//   atan     <= 2.5 ulp [2.15]  Cephes atanf: |x| reduced by
//                          pi/2 + atan(-1/x) or pi/4 + atan((x-1)/(x+1)) to
//                          [0, tan(pi/8)], then an odd polynomial.
//   pow      <= 1 ulp [0.50]  exp(y * log|x|) in double precision (the
//                          double exp/log below), with C99 pow's special
//                          cases.
// Special values follow C99: NaN in gives NaN out, exp(-inf) = 0,
// log(0) = -inf, log(x < 0) = NaN, tanh(+-inf) = +-1, erf(+-inf) = +-1,
// sin/cos(inf) = NaN.
//
// f64: exp and log are vectorized (fdlibm-style reduction, degree-13
// Taylor / Lg1..Lg7 polynomials; <= 1.5 ulp [exp 1.13 without FMA, 1.00
// with; log 0.72]); sigmoid uses that exp. tanh,
// erf, erfc, sin, cos, asin, acos, atan and pow call the C library per lane:
// f64 is the verification dtype, where accuracy matters more than speed.

#ifndef TJ_JIT_VECMATH_H_
#define TJ_JIT_VECMATH_H_

#include "jit/emit_llvm.h"

LLVMValueRef tj_vm_exp(tj_emit_t* em, LLVMValueRef x);
LLVMValueRef tj_vm_log(tj_emit_t* em, LLVMValueRef x);
LLVMValueRef tj_vm_tanh(tj_emit_t* em, LLVMValueRef x);
LLVMValueRef tj_vm_sigmoid(tj_emit_t* em, LLVMValueRef x);
LLVMValueRef tj_vm_erf(tj_emit_t* em, LLVMValueRef x);
LLVMValueRef tj_vm_erfc(tj_emit_t* em, LLVMValueRef x);
LLVMValueRef tj_vm_sin(tj_emit_t* em, LLVMValueRef x);
LLVMValueRef tj_vm_cos(tj_emit_t* em, LLVMValueRef x);
LLVMValueRef tj_vm_asin(tj_emit_t* em, LLVMValueRef x);
LLVMValueRef tj_vm_acos(tj_emit_t* em, LLVMValueRef x);
LLVMValueRef tj_vm_atan(tj_emit_t* em, LLVMValueRef x);
LLVMValueRef tj_vm_pow(tj_emit_t* em, LLVMValueRef x, LLVMValueRef y);

#endif  // TJ_JIT_VECMATH_H_
