// The CUDA backend's skip and expectation lists for the conformance suite
// (tests/conformance/conformance.h), shared by the GPU run
// (cuda_conformance_test.c) and the PTX-only run without a GPU
// (cuda_ptx_conformance_test.c), which must agree on every kernel count.

#ifndef TJ_TESTS_CUDA_CUDA_CTS_EXPECTS_H_
#define TJ_TESTS_CUDA_CUDA_CTS_EXPECTS_H_

#include "lib/env.h"
#include "tests/conformance/conformance.h"

// What the CUDA backend cannot do yet. Each entry names the gap.
static const tj_cts_skip_t kSkips[] = {
    {NULL, NULL},
};

// Groups the GPU templates cannot express run on the host (a graph break
// each), with the reason. The first kF64LibmCases are the f64 functions x86
// takes from the C library: the GPU's kernels call libdevice's, so they
// break only where no libdevice is found (TJ_LIBDEVICE="").
enum { kF64LibmCases = 9 };
static const tj_cts_expect_t kExpectsAll[] = {
    {"tanh_f64", 0, 1, "no libdevice: f64 tanh on the host"},
    {"erf_f64", 0, 1, "no libdevice: f64 erf on the host"},
    {"erfc_f64", 0, 1, "no libdevice: f64 erfc on the host"},
    {"sin_f64", 0, 1, "no libdevice: f64 sin on the host"},
    {"cos_f64", 0, 1, "no libdevice: f64 cos on the host"},
    {"asin_f64", 0, 1, "no libdevice: f64 asin on the host"},
    {"acos_f64", 0, 1, "no libdevice: f64 acos on the host"},
    {"atan_f64", 0, 1, "no libdevice: f64 atan on the host"},
    {"pow_f64", -1, -1, "no libdevice: f64 pow's group on the host"},
    {NULL, 0, 0, NULL},
};

// The expectations for |ctx|'s compiles: with libdevice or without.
static inline const tj_cts_expect_t* cuda_cts_expects(const tj_context_t* ctx) {
  const char* libdevice = tj_setting(ctx, TJ_SETTING_LIBDEVICE);
  return kExpectsAll + (libdevice && libdevice[0] ? kF64LibmCases : 0);
}

#endif  // TJ_TESTS_CUDA_CUDA_CTS_EXPECTS_H_
