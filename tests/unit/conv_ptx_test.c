// The conv decomposition's kernels (issue 15, convx86) through the NVPTX
// emitter for sm_90a, no GPU needed: the padded x made once, the
// channels-first im2col and its GEMMs (chunked for many channels, one
// GEMM over the joined chunks for few: the RGB stem), depthwise, strided
// pools (integer max pools too), conv_transpose and an embedding lookup:
// every node in a kernel and the PTX assembled by ptxas (its path is the
// first argument; "" skips the assembly). Since cudaconv the f32 groups == 1
// convs here are one kernel of the CUDA CONV template
// (tests/unit/conv_cuda_ptx_test.c has its variants), the grouped and depthwise
// ones still decompose.

#include <string.h>

#include "tensorjit/tj_graph.h"
#include "tests/unit/ptx_check.h"
#include "tests/unit/test.h"

static const char* g_ptxas = "";
static tj_context_t* g_ctx;

static tj_graph_t* new_graph(const char* name) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, name, &g));
  return g;
}

// x [B, c, s, s] conv'd with a constant w [o, c / groups, k, k] (+ bias).
static void check_conv(const char* what, int64_t c, int64_t o, int64_t s,
                       int64_t k, int64_t stride, int64_t pad, int64_t groups) {
  tj_graph_t* g = new_graph("conv");
  int64_t xd[4] = {tj_graph_symbol(g, "B"), c, s, s};
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 4, xd, "x");
  int64_t wd[4] = {o, c / groups, k, k}, n = o * (c / groups) * k * k;
  float* wv = calloc((size_t)n, sizeof(float));
  float* bv = calloc((size_t)o, sizeof(float));
  CHECK(wv && bv);
  if (!wv || !bv) return;
  for (int64_t i = 0; i < n; ++i) wv[i] = (float)(i % 5) - 2;
  tj_value_t w =
      tj_graph_constant(g, TJ_DTYPE_F32, 4, wd, wv, (size_t)n * sizeof(float));
  tj_value_t b = tj_graph_constant(g, TJ_DTYPE_F32, 1, (int64_t[]){o}, bv,
                                   (size_t)o * sizeof(float));
  free(wv);
  free(bv);
  tj_conv_attrs_t a;
  memset(&a, 0, sizeof(a));
  for (int i = 0; i < 2; ++i) {
    a.strides[i] = stride;
    a.pads_begin[i] = a.pads_end[i] = pad;
  }
  a.groups = groups;
  tj_value_t y = tj_graph_relu(g, tj_graph_conv(g, x, w, b, &a));
  tj_graph_output(g, y, "y");
  tj_test_check_ptx(g_ptxas, what, g);
}

TEST(conv_paths_assemble) {
  check_conv("3x3 chunked", 40, 16, 9, 3, 1, 1, 1);
  check_conv("7x7/2 joined", 3, 8, 17, 7, 2, 3, 1);
  check_conv("3x3/2 grouped", 8, 8, 9, 3, 2, 1, 2);
  check_conv("1x1/2", 16, 32, 8, 1, 2, 0, 1);
  check_conv("depthwise 3x3/2", 12, 12, 11, 3, 2, 1, 12);
}

TEST(pools_transpose_and_lookup_assemble) {
  tj_graph_t* g = new_graph("pools");
  int64_t xd[4] = {tj_graph_symbol(g, "B"), 6, 13, 15};
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 4, xd, "x");
  tj_conv_attrs_t a;
  memset(&a, 0, sizeof(a));
  for (int i = 0; i < 2; ++i) {
    a.kernel[i] = 3;
    a.strides[i] = 2;
    a.pads_begin[i] = a.pads_end[i] = 1;
  }
  tj_graph_output(g, tj_graph_max_pool(g, x, &a), "m");
  tj_graph_output(g, tj_graph_avg_pool(g, x, &a), "a");
  tj_test_check_ptx(g_ptxas, "pools", g);

  // ops15b: integer max pools take the decomposition (the direct window
  // kernel is f32), padded with the dtype's lowest value: u8 (ONNX's
  // test_maxpool_2d_uint8, 5x5 pads 2), i8, i32, i64 and u64 (unsigned
  // compares) at 3x3/2.
  static const tj_dtype_t kInts[] = {TJ_DTYPE_U8, TJ_DTYPE_I8, TJ_DTYPE_I32,
                                     TJ_DTYPE_I64, TJ_DTYPE_U64};
  for (size_t i = 0; i < sizeof(kInts) / sizeof(kInts[0]); ++i) {
    g = new_graph("int_pool");
    tj_conv_attrs_t ia = a;
    if (i == 0) {
      memset(&ia, 0, sizeof(ia));
      for (int k = 0; k < 2; ++k) {
        ia.kernel[k] = 5;
        ia.pads_begin[k] = ia.pads_end[k] = 2;
      }
    }
    int64_t id[4] = {tj_graph_symbol(g, "B"), 3, 5, 7};
    tj_value_t xi = tj_graph_input(g, kInts[i], 4, id, "x");
    tj_graph_output(g, tj_graph_max_pool(g, xi, &ia), "m");
    tj_test_check_ptx(g_ptxas, "int max_pool", g);
  }

  g = new_graph("conv_transpose");
  tj_value_t t =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){2, 4, 5, 5}, "x");
  tj_value_t w =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){4, 3, 3, 3}, "w");
  memset(&a, 0, sizeof(a));
  a.strides[0] = a.strides[1] = 2;
  a.pads_begin[0] = a.pads_begin[1] = 1;
  tj_graph_output(g, tj_graph_conv_transpose(g, t, w, tj_value_none(), &a),
                  "y");
  tj_test_check_ptx(g_ptxas, "conv_transpose", g);

  g = new_graph("lookup");
  tj_value_t table =
      tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){100, 48}, "table");
  tj_value_t ids = tj_graph_input(g, TJ_DTYPE_I64, 1, (int64_t[]){9}, "ids");
  tj_graph_output(g, tj_graph_gather(g, table, ids, 0), "y");
  tj_test_check_ptx(g_ptxas, "lookup", g);
}

int main(int argc, char** argv) {
  if (argc > 1) g_ptxas = argv[1];
  CHECK_OK(tj_test_context_create(&g_ctx));
  RUN_TEST(conv_paths_assemble);
  RUN_TEST(pools_transpose_and_lookup_assemble);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
