// cudabw (issue 15) without a GPU: depthwise convs and max/avg pools of
// MobileNet's and ResNet's shapes (stride 1 and 2, 3x3 and 5x5, 1D and
// 3D, a depth multiplier) are each one kernel on CUDA (the direct window
// kernel, jit/emit_nvptx_window.c; no pad boxes, no graph break), with a
// symbolic and a constant batch; a window of more taps than the kernel
// unrolls still compiles (decomposed); every case also with 2 and 4 output
// rows a thread (TJ_NVPTX_CONV=window-rows2/4), its registers printed and
// no spills allowed. The embedding gather [V, 768]
// of f32 and bf16 rows reads each row by 16-byte loads (ld.global.v4: the row's
// offset is the clamped id times 768, a multiple of the lanes;
// jit/emit_llvm.c's known_pow2_factor), and a row of 7 by scalar loads
// only. Every module is assembled by ptxas -arch=sm_90a when the test is
// given its path. Numbers on the GPU: tests/cuda/cuda_window_test.c.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/ptx_check.h"

static const char* g_ptxas = "";
static tj_context_t* g_ctx;
// TJ_NVPTX_CONV=window-rows2 / window-rows4: the kernel's row blocks forced.
static tj_context_t* g_rows_ctx[2];

typedef struct wcase_t {
  const char* name;
  int32_t op;  // 0 depthwise, 1 max, 2 avg
  int32_t n;
  int64_t c, o, s[3];
  bool batch_symbolic;
  tj_conv_attrs_t a;
  uint32_t kernels;  // 0: any (decomposed)
} wcase_t;

static const wcase_t kCases[] = {
    {"dw_3x3_s1_144_56",
     0,
     2,
     144,
     144,
     {56, 56},
     true,
     {.kernel = {3, 3}, .pads_begin = {1, 1}, .pads_end = {1, 1}},
     1},
    {"dw_3x3_s2_96_112",
     0,
     2,
     96,
     96,
     {112, 112},
     false,
     {.kernel = {3, 3},
      .strides = {2, 2},
      .pads_begin = {1, 1},
      .pads_end = {1, 1}},
     1},
    {"dw_5x5_s2_mult2",
     0,
     2,
     24,
     48,
     {28, 28},
     true,
     {.kernel = {5, 5},
      .strides = {2, 2},
      .pads_begin = {2, 2},
      .pads_end = {2, 2}},
     1},
    {"dw_1d",
     0,
     1,
     8,
     8,
     {100},
     true,
     {.kernel = {3}, .pads_begin = {1}, .pads_end = {1}},
     1},
    {"max_3x3_s2_64_112",
     1,
     2,
     64,
     64,
     {112, 112},
     true,
     {.kernel = {3, 3},
      .strides = {2, 2},
      .pads_begin = {1, 1},
      .pads_end = {1, 1}},
     1},
    {"max_3d",
     1,
     3,
     4,
     4,
     {6, 8, 8},
     true,
     {.kernel = {2, 3, 3}, .strides = {2, 2, 2}, .ceil_mode = true},
     1},
    {"avg_3x3_256_28",
     2,
     2,
     256,
     256,
     {28, 28},
     true,
     {.kernel = {3, 3}, .pads_begin = {1, 1}, .pads_end = {1, 1}},
     1},
    {"avg_incl_pad_ceil",
     2,
     2,
     16,
     16,
     {15, 15},
     false,
     {.kernel = {3, 3},
      .strides = {2, 2},
      .pads_begin = {1, 1},
      .pads_end = {1, 1},
      .ceil_mode = true,
      .count_include_pad = true},
     1},
    {"max_9x9_decomposed",
     1,
     2,
     4,
     4,
     {20, 20},
     true,
     {.kernel = {9, 9}, .pads_begin = {4, 4}, .pads_end = {4, 4}},
     0},
};

static tj_graph_t* build_window(tj_context_t* ctx, const wcase_t* c) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, c->name, &g));
  if (!g) return NULL;
  const int32_t r = c->n + 2;
  int64_t xd[5], wd[5];
  xd[0] = c->batch_symbolic ? tj_graph_symbol(g, "N") : 2;
  xd[1] = c->c;
  wd[0] = c->o;
  wd[1] = 1;
  for (int32_t i = 0; i < c->n; ++i) {
    xd[2 + i] = c->s[i];
    wd[2 + i] = c->a.kernel[i];
  }
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, r, xd, "x");
  tj_value_t y;
  if (c->op == 0) {
    tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, r, wd, "w");
    tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, &c->o, "b");
    tj_conv_attrs_t a = c->a;
    a.groups = c->c;
    y = tj_graph_conv(g, x, w, b, &a);
  } else if (c->op == 1) {
    y = tj_graph_max_pool(g, x, &c->a);
  } else {
    y = tj_graph_avg_pool(g, x, &c->a);
  }
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

// The number of lines of |ptx| that hold both |a| and |b|.
static int count_lines(const char* ptx, const char* a, const char* b) {
  int n = 0;
  for (const char* p = ptx; p && *p;) {
    const char* e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    char line[512];
    if (len >= sizeof(line)) len = sizeof(line) - 1;
    memcpy(line, p, len);
    line[len] = 0;
    if (strstr(line, a) && strstr(line, b)) ++n;
    p = e ? e + 1 : NULL;
  }
  return n;
}

TEST(windows) {
  tj_allocator_t al = tj_allocator_system();
  for (size_t i = 0; i < 3 * TJ_ARRAY_SIZE(kCases); ++i) {
    const wcase_t* c = &kCases[i % TJ_ARRAY_SIZE(kCases)];
    const size_t v = i / TJ_ARRAY_SIZE(kCases);
    tj_graph_t* g = build_window(v ? g_rows_ctx[v - 1] : g_ctx, c);
    if (!g) continue;
    tj_cuda_offline_ptx_t ptx;
    memset(&ptx, 0, sizeof(ptx));
    CHECK_OK(tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx));
    CHECK_EQ_INT(0, ptx.num_host_steps);
    if (c->kernels) {
      if (ptx.num_kernels != c->kernels)
        fprintf(stderr, "  %s: %u kernels\n", c->name, ptx.num_kernels);
      CHECK_EQ_INT(c->kernels, ptx.num_kernels);
    } else {
      CHECK(ptx.num_kernels >= 1);
    }
    // The window kernel keeps its taps and rows in registers: no spills.
    char what[96];
    snprintf(what, sizeof(what), "%s rows %s", c->name,
             v == 0   ? "auto"
             : v == 1 ? "2"
                      : "4");
    long spills = tj_test_ptxas_spills(g_ptxas, what, ptx.ptx);
    if (c->kernels) CHECK_EQ_INT(0, spills);
    tj_cuda_offline_ptx_deinitialize(al, &ptx);
    tj_graph_destroy(g);
  }
}

// y = table[ids] with ids [T] (i64, T symbolic).
static tj_graph_t* build_gather(tj_dtype_t dt, int64_t v, int64_t d) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, "gather", &g));
  if (!g) return NULL;
  int64_t td[2] = {v, d};
  int64_t id[1] = {tj_graph_symbol(g, "T")};
  tj_value_t table = tj_graph_input(g, dt, 2, td, "table");
  tj_value_t ids = tj_graph_input(g, TJ_DTYPE_I64, 1, id, "ids");
  tj_graph_output(g, tj_graph_gather(g, table, ids, 0), "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

TEST(gather_rows) {
  tj_allocator_t al = tj_allocator_system();
  static const struct {
    tj_dtype_t dt;
    int64_t d;
    bool vector_loads;
  } kRows[] = {{TJ_DTYPE_F32, 768, true},
               {TJ_DTYPE_BF16, 768, true},
               {TJ_DTYPE_F32, 7, false}};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kRows); ++i) {
    char what[64];
    snprintf(what, sizeof(what), "gather %s [50000, %lld]",
             tj_dtype_name(kRows[i].dt), (long long)kRows[i].d);
    tj_graph_t* g = build_gather(kRows[i].dt, 50000, kRows[i].d);
    if (!g) continue;
    tj_cuda_offline_ptx_t ptx;
    memset(&ptx, 0, sizeof(ptx));
    CHECK_OK(tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx));
    CHECK_EQ_INT(1, ptx.num_kernels);
    CHECK_EQ_INT(0, ptx.num_host_steps);
    // Loads of 16 bytes from the table: the vector path's two items a
    // step, each one ld.global.v4 (f32: 4 floats; bf16: 8 halves).
    int v4 = count_lines(ptx.ptx, "ld.global", ".v4.");
    if ((v4 >= 2) != kRows[i].vector_loads)
      fprintf(stderr, "  %s: %d ld.global.v4 in the PTX\n", what, v4);
    CHECK((v4 >= 2) == kRows[i].vector_loads);
    tj_test_assemble_ptx(g_ptxas, what, ptx.ptx);
    tj_cuda_offline_ptx_deinitialize(al, &ptx);
    tj_graph_destroy(g);
  }
}

int main(int argc, char** argv) {
  if (argc > 1) g_ptxas = argv[1];
  if (!g_ptxas[0]) printf("# ptxas not given: PTX not assembled\n");
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  // Settings are read when a context is created.
  unsetenv("TJ_NVPTX_CONV");
  CHECK_OK(tj_context_create(&o, &g_ctx));
  setenv("TJ_NVPTX_CONV", "window-rows2", 1);
  CHECK_OK(tj_context_create(&o, &g_rows_ctx[0]));
  setenv("TJ_NVPTX_CONV", "window-rows4", 1);
  CHECK_OK(tj_context_create(&o, &g_rows_ctx[1]));
  unsetenv("TJ_NVPTX_CONV");
  RUN_TEST(windows);
  RUN_TEST(gather_rows);
  tj_context_destroy(g_rows_ctx[1]);
  tj_context_destroy(g_rows_ctx[0]);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
