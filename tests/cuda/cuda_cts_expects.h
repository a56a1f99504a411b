// The CUDA backend's skip and expectation lists for the conformance suite
// (tests/conformance/conformance.h), shared by the GPU run
// (cuda_conformance_test.c) and the PTX-only run without a GPU
// (cuda_ptx_conformance_test.c), which must agree on every kernel count.

#ifndef TJ_TESTS_CUDA_CUDA_CTS_EXPECTS_H_
#define TJ_TESTS_CUDA_CUDA_CTS_EXPECTS_H_

#include "tests/conformance/conformance.h"

// What the CUDA backend cannot do yet. Each entry names the gap.
static const tj_cts_skip_t kSkips[] = {
    {NULL, NULL},
};

// Groups the GPU templates cannot express run on the host (a graph break
// each), with the reason.
static const tj_cts_expect_t kExpects[] = {
    {"tanh_f64", 0, 1, "no f64 tanh on the GPU yet (libm on x86): host step"},
    {"erf_f64", 0, 1, "no f64 erf on the GPU yet (libm on x86): host step"},
    {"erfc_f64", 0, 1, "no f64 erfc on the GPU yet (libm on x86): host step"},
    {"sin_f64", 0, 1, "no f64 sin on the GPU yet (libm on x86): host step"},
    {"cos_f64", 0, 1, "no f64 cos on the GPU yet (libm on x86): host step"},
    {"asin_f64", 0, 1, "no f64 asin on the GPU yet (libm on x86): host step"},
    {"acos_f64", 0, 1, "no f64 acos on the GPU yet (libm on x86): host step"},
    {"atan_f64", 0, 1, "no f64 atan on the GPU yet (libm on x86): host step"},
    {"pow_f64", -1, -1, "no f64 pow on the GPU yet: its group on the host"},
    {"matmul_bf16_misaligned", -1, 1,
     "K = 33: bf16 rows of 66 bytes break the tensor cores' 16-byte "
     "cp.async copies: the matmul runs on the host"},
    {NULL, 0, 0, NULL},
};

#endif  // TJ_TESTS_CUDA_CUDA_CTS_EXPECTS_H_
