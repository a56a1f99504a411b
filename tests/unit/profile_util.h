// What the profile tests share (tests/unit/profile_test.c on x86,
// tests/cuda/cuda_profile_test.c on CUDA): a graph with two GEMMs, a
// softmax, a layer_norm and a host step, its inputs, and the check of
// its outputs against the reference interpreter.

#ifndef TJ_TESTS_UNIT_PROFILE_UTIL_H_
#define TJ_TESTS_UNIT_PROFILE_UTIL_H_

#include "lib/base.h"
#include "tests/unit/test.h"

enum { kB = 48, kD = 192, kN = 6, kL = 300 };

// y = softmax(gelu(x @ w1 + b) @ w2, 1); z = layer_norm(y + x); and the
// argsort of rows of kL i32 (no kernel template past 256: argtopk's native
// host kernel, a host step) beside them.
static tj_graph_t* build(tj_context_t* context, const float* w1,
                         const float* w2) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(context, "prof", &g)) return NULL;
  int64_t B = tj_graph_symbol(g, "B");
  int64_t xd[2] = {B, kD}, wd[2] = {kD, kD}, bd[1] = {kD}, nd[2] = {kN, kL};
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, xd, "x");
  tj_value_t n = tj_graph_input(g, TJ_DTYPE_I32, 2, nd, "n");
  size_t wbytes = sizeof(float) * kD * kD;
  tj_value_t a = tj_graph_constant(g, TJ_DTYPE_F32, 2, wd, w1, wbytes);
  tj_value_t c = tj_graph_constant(g, TJ_DTYPE_F32, 2, wd, w2, wbytes);
  tj_value_t b = tj_graph_full(g, TJ_DTYPE_F32, 1, bd, 0.25);
  tj_value_t h = tj_graph_gelu(g, tj_graph_linear(g, x, a, b), true);
  tj_value_t y = tj_graph_softmax(g, tj_graph_matmul(g, h, c), 1);
  tj_value_t none = {0};
  tj_value_t z =
      tj_graph_layer_norm(g, tj_graph_add(g, y, x), none, none, 1e-5);
  tj_graph_output(g, z, "z");
  tj_graph_output(g, tj_graph_argsort(g, n, 1, false), "nn");
  if (tj_graph_finalize(g)) {
    tj_graph_destroy(g);
    return NULL;
  }
  return g;
}

typedef struct fixture_t {
  float w1[kD * kD], w2[kD * kD];
  float x[kB * kD];
  int32_t n[kN * kL];
  float z[kB * kD], z_ref[kB * kD];
  int64_t nn[kN * kL], nn_ref[kN * kL];
  tj_tensor_t inputs[2], outputs[2], ref_outputs[2];
} fixture_t;

static void fixture_init(fixture_t* f) {
  uint32_t s = 12345;
  for (int i = 0; i < kD * kD; ++i) {
    s = s * 1664525u + 1013904223u;
    f->w1[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.2f;
    s = s * 1664525u + 1013904223u;
    f->w2[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.2f;
  }
  for (int i = 0; i < kB * kD; ++i) {
    s = s * 1664525u + 1013904223u;
    f->x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
  }
  for (int i = 0; i < kN * kL; ++i) f->n[i] = (i * 37) % 101 - 50;
  static const int64_t xs[2] = {kB, kD}, ns[2] = {kN, kL};
  f->inputs[0] = tj_tensor_make(f->x, TJ_DTYPE_F32, 2, xs);
  f->inputs[1] = tj_tensor_make(f->n, TJ_DTYPE_I32, 2, ns);
  f->outputs[0] = tj_tensor_make(f->z, TJ_DTYPE_F32, 2, xs);
  f->outputs[1] = tj_tensor_make(f->nn, TJ_DTYPE_I64, 2, ns);
  f->ref_outputs[0] = tj_tensor_make(f->z_ref, TJ_DTYPE_F32, 2, xs);
  f->ref_outputs[1] = tj_tensor_make(f->nn_ref, TJ_DTYPE_I64, 2, ns);
}

// The outputs against the reference interpreter: layer_norm's output is
// O(1); x86 f32 kernels agree to ~1e-5 (|tol| 1e-4 relative and absolute).
static void check_against_reference(const tj_graph_t* g, fixture_t* f,
                                    double tol) {
  CHECK_OK(tj_reference_run(g, f->inputs, 2, f->ref_outputs, 2));
  int bad = 0;
  for (int i = 0; i < kB * kD; ++i) {
    double d = fabs((double)f->z[i] - f->z_ref[i]);
    if (!(d <= tol + tol * fabs((double)f->z_ref[i]))) ++bad;
  }
  CHECK_EQ_INT(0, bad);
  CHECK(memcmp(f->nn, f->nn_ref, sizeof(f->nn)) == 0);
}

static const tj_profile_entry_t* find(const tj_profile_report_t* r,
                                      tj_profile_kind_t kind,
                                      const char* detail) {
  for (int32_t i = 0; i < r->num_entries; ++i) {
    if (r->entries[i].kind == kind &&
        (!detail || strcmp(r->entries[i].detail, detail) == 0)) {
      return &r->entries[i];
    }
  }
  return NULL;
}

#endif  // TJ_TESTS_UNIT_PROFILE_UTIL_H_
