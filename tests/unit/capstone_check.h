// Running the capstone again and again and checking its answer: for the
// sweeps that compile it under failing allocators or a failing driver
// (x86_oom_test, cuda_fault_test).

#ifndef TJ_TESTS_UNIT_CAPSTONE_CHECK_H_
#define TJ_TESTS_UNIT_CAPSTONE_CHECK_H_

#include "lib/base.h"
#include "tests/unit/test.h"

// The capstone's data, for tests that compile it again and again: inputs
// for a batch of `b` rows and the answer computed once by a trusted compile.
typedef struct tj_test_capstone_t {
  int64_t b, k, n;
  const float *x, *w, *bias, *ref;
  float tolerance;  // relative and absolute
} tj_test_capstone_t;

// Runs `exe` (compiled from tj_test_build_capstone) `runs` times and
// compares y with c->ref. A wrong element is an INTERNAL status naming it.
static inline tj_status_t tj_test_run_capstone(tj_executable_t* exe,
                                               const tj_test_capstone_t* c,
                                               int runs) {
  int64_t xs[2] = {c->b, c->k}, ws[2] = {c->k, c->n}, bs[1] = {c->n};
  int64_t ys[2] = {c->b, c->n};
  size_t count = (size_t)(c->b * c->n);
  float* y = (float*)malloc(count * sizeof(float));
  if (!y) return tj_status_make(TJ_STATUS_OUT_OF_MEMORY, "test: y");
  tj_status_t s = NULL;
  for (int run = 0; run < runs && !s; ++run) {
    memset(y, 0, count * sizeof(float));
    tj_tensor_t in[3] = {tj_tensor_make((void*)c->x, TJ_DTYPE_F32, 2, xs),
                         tj_tensor_make((void*)c->w, TJ_DTYPE_F32, 2, ws),
                         tj_tensor_make((void*)c->bias, TJ_DTYPE_F32, 1, bs)};
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, ys);
    s = tj_executable_run(exe, in, 3, &out, 1);
    for (size_t i = 0; !s && i < count; ++i) {
      float tol = c->tolerance + c->tolerance * fabsf(c->ref[i]);
      if (!(fabsf(y[i] - c->ref[i]) <= tol)) {
        s = tj_status_make(TJ_STATUS_INTERNAL,
                           "wrong answer: y[%zu] = %g, the reference %g", i,
                           (double)y[i], (double)c->ref[i]);
      }
    }
  }
  free(y);
  return s;
}

#endif  // TJ_TESTS_UNIT_CAPSTONE_CHECK_H_
