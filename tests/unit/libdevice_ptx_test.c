// The f64 functions x86 takes from the C library (tanh, erf, erfc, sin,
// cos, asin, acos, atan, pow) on the GPU: the kernels call NVIDIA's
// libdevice, which the NVPTX compile links (jit/nvptx.c), so a group of
// them is a kernel, not a graph break onto the host. Compiled for CUDA
// without a GPU; the PTX assembled with ptxas -arch=sm_90a when the test
// is given its path. Where this host has no libdevice (TJ_LIBDEVICE
// unset and no toolkit) the linked half is skipped with a note; the rest
// runs everywhere:
//   - TJ_LIBDEVICE="" goes without: each such group is a graph break;
//   - a TJ_LIBDEVICE that cannot be read fails the compile, naming it;
//   - an f32 kernel of the same ops links nothing.
// The numbers on the GPU are cuda_conformance_test's (f64 within 1e-13 of
// the reference).

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "lib/env.h"
#include "tests/unit/ptx_check.h"

static const char* g_ptxas = "";

// Every f64 libm op of x (and pow(x, y)) as an output, and one chain
// through a cheap op between them so that fusion makes one kernel.
static tj_graph_t* libm_graph(tj_context_t* ctx, tj_dtype_t dt) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "libm", &g));
  int64_t b = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, dt, 2, (int64_t[]){b, 33}, "x");
  tj_value_t y = tj_graph_input(g, dt, 2, (int64_t[]){b, 33}, "y");
  tj_value_t (*const unary[])(tj_graph_t*, tj_value_t) = {
      tj_graph_tanh, tj_graph_erf,  tj_graph_erfc, tj_graph_sin,
      tj_graph_cos,  tj_graph_asin, tj_graph_acos, tj_graph_atan};
  tj_value_t sum = tj_graph_pow(g, tj_graph_abs(g, x), y);
  for (size_t i = 0; i < TJ_ARRAY_SIZE(unary); ++i)
    sum = tj_graph_add(g, sum, unary[i](g, x));
  tj_graph_output(g, sum, "sum");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

// libm_graph(|ctx|, |dt|) compiled for sm_90a into |*ptx| (release it
// with tj_cuda_offline_ptx_deinitialize when the status is OK).
static tj_status_t compile_libm(tj_context_t* ctx, tj_dtype_t dt,
                                tj_cuda_offline_ptx_t* ptx) {
  tj_graph_t* g = libm_graph(ctx, dt);
  memset(ptx, 0, sizeof(*ptx));
  tj_status_t status =
      tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, tj_allocator_system(), ptx);
  tj_graph_destroy(g);
  return status;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// A context whose TJ_LIBDEVICE is |value| (NULL: unset, found in the
// toolkit).
static tj_context_t* context_with(const char* value) {
  if (value) {
    setenv("TJ_LIBDEVICE", value, 1);
  } else {
    unsetenv("TJ_LIBDEVICE");
  }
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  unsetenv("TJ_LIBDEVICE");
  return ctx;
}

TEST(f64_libm_ops_link_libdevice) {
  tj_context_t* ctx = context_with(NULL);
  const char* libdevice = tj_setting(ctx, TJ_SETTING_LIBDEVICE);
  if (!libdevice || !libdevice[0]) {
    printf("# no libdevice on this host (no CUDA toolkit): not linked\n");
    tj_context_destroy(ctx);
    return;
  }
  printf("# libdevice: %s\n", libdevice);
  tj_cuda_offline_ptx_t ptx;
  double t0 = now_ms();
  CHECK_OK(compile_libm(ctx, TJ_DTYPE_F64, &ptx));
  printf("# compiled in %.1f ms, libdevice linked\n", now_ms() - t0);
  CHECK_EQ_INT(1, ptx.num_kernels);
  CHECK_EQ_INT(0, ptx.num_host_steps);
  // Every call resolved inside the module: nothing for the driver's linker.
  tj_test_check_has("f64 libm", ptx.ptx, ".extern", false);
  tj_test_check_has("f64 libm", ptx.ptx, "__nvvm_reflect", false);
  tj_test_assemble_ptx(g_ptxas, "f64 libm", ptx.ptx);
  tj_cuda_offline_ptx_deinitialize(tj_allocator_system(), &ptx);
  tj_context_destroy(ctx);
}

TEST(without_libdevice_each_group_breaks) {
  tj_context_t* ctx = context_with("");
  CHECK_STREQ("", tj_setting(ctx, TJ_SETTING_LIBDEVICE));
  tj_cuda_offline_ptx_t ptx;
  CHECK_OK(compile_libm(ctx, TJ_DTYPE_F64, &ptx));
  CHECK(ptx.num_host_steps >= 1);
  tj_test_check_has("no libdevice", ptx.ptx, "__nv_", false);
  tj_cuda_offline_ptx_deinitialize(tj_allocator_system(), &ptx);
  tj_context_destroy(ctx);
}

TEST(an_unreadable_libdevice_is_named) {
  tj_context_t* ctx = context_with("/nonexistent/libdevice.10.bc");
  tj_cuda_offline_ptx_t ptx;
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "/nonexistent/libdevice.10.bc",
               compile_libm(ctx, TJ_DTYPE_F64, &ptx));
  CHECK(ptx.ptx == NULL);
  tj_context_destroy(ctx);
}

TEST(f32_links_nothing) {
  // The same ops in f32 are our own polynomials (jit/vecmath.h), and a
  // libdevice that cannot be read is never opened.
  tj_context_t* ctx = context_with("/nonexistent/libdevice.10.bc");
  tj_cuda_offline_ptx_t ptx;
  CHECK_OK(compile_libm(ctx, TJ_DTYPE_F32, &ptx));
  CHECK_EQ_INT(1, ptx.num_kernels);
  CHECK_EQ_INT(0, ptx.num_host_steps);
  tj_test_check_has("f32 libm", ptx.ptx, "__nv_", false);
  tj_test_assemble_ptx(g_ptxas, "f32 libm", ptx.ptx);
  tj_cuda_offline_ptx_deinitialize(tj_allocator_system(), &ptx);
  tj_context_destroy(ctx);
}

int main(int argc, char** argv) {
  g_ptxas = argc > 1 ? argv[1] : "";
  RUN_TEST(f64_libm_ops_link_libdevice);
  RUN_TEST(without_libdevice_each_group_breaks);
  RUN_TEST(an_unreadable_libdevice_is_named);
  RUN_TEST(f32_links_nothing);
  TEST_MAIN_END();
}
