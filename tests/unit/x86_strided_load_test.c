// Vector loads whose lanes are a small constant stride apart (2 to 4
// elements: the taps of stride-2 pools, depthwise convs and im2col) load
// the lanes' span and shuffle it (jit/emit_llvm.c's load_span) instead of
// gathering lane by lane. Checked at every x86 tier (host, AVX2, SSE2),
// generic and specialized, against the reference interpreter:
//   - strided slices of f32, f16, bf16, i8, u8 and i64 along odd lengths
//     (full vectors and masked tails), strides 2 to 5 (5 takes the gather);
//   - max, avg pools and depthwise convs of stride 3 and 4, odd sizes,
//     padding, dilation 2 on the other axis, a symbolic batch;
//   - no read past the last lane's element: the input ends at a page
//     followed by an inaccessible one, for a full vector and for a tail;
//   - loads that stay put along a line (an embedding lookup's index, a
//     broadcast column), hoisted out of the line's vector loop.

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tensorjit/tj_executable.h"
#include "tensorjit/tj_graph.h"
#include "tensorjit/tj_tensor.h"
#include "tests/unit/test.h"
#include "tests/unit/tier_ops_check.h"

static tj_dtype_t g_dtype;
static int64_t g_len, g_step, g_start;

// y = slice(a, [.., start::step]) + slice(a, [.., start + 1::step]): two
// strided loads in one pointwise kernel.
static tj_graph_t* build_slices(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "strided");
  tj_value_t a = tj_graph_input(g, g_dtype, 2, (int64_t[]){3, g_len}, "a");
  int64_t stop = g_len - 1;  // both slices stop before the last element
  tj_value_t s0 = tj_graph_slice(g, a, (int64_t[]){0, g_start},
                                 (int64_t[]){3, stop}, (int64_t[]){1, g_step});
  tj_value_t s1 =
      tj_graph_slice(g, a, (int64_t[]){0, g_start + 1},
                     (int64_t[]){3, stop + 1}, (int64_t[]){1, g_step});
  tj_graph_output(g, tj_graph_add(g, s0, s1), "y");
  return g;
}

static int64_t slice_count(int64_t start, int64_t stop, int64_t step) {
  return stop > start ? (stop - start + step - 1) / step : 0;
}

TEST(strided_slices_every_dtype_and_stride) {
  static const tj_dtype_t kDtypes[] = {TJ_DTYPE_F32,  TJ_DTYPE_F16,
                                       TJ_DTYPE_BF16, TJ_DTYPE_I8,
                                       TJ_DTYPE_U8,   TJ_DTYPE_I64};
  // Lengths: below one vector, one AVX-512 vector's span exactly
  // (16 lanes at stride 2: 31 elements + the second slice's one), and
  // tails after several vectors.
  static const int64_t kLens[] = {7, 33, 101};
  for (size_t d = 0; d < sizeof(kDtypes) / sizeof(kDtypes[0]); ++d) {
    for (size_t l = 0; l < sizeof(kLens) / sizeof(kLens[0]); ++l) {
      for (int64_t step = 2; step <= 5; ++step) {
        g_dtype = kDtypes[d];
        g_len = kLens[l];
        g_step = step;
        g_start = step == 3 ? 1 : 0;
        const bool is_float = tj_dtype_is_float(g_dtype);
        spec_t in = {
            g_dtype, 2, {3, g_len}, is_float ? -4 : -20, is_float ? 4 : 20};
        if (g_dtype == TJ_DTYPE_U8) in.lo = 0;
        spec_t out = {
            g_dtype, 2, {3, slice_count(g_start, g_len - 1, step)}, 0, 0};
        char what[64];
        snprintf(what, sizeof(what), "%s len %lld step %lld",
                 tj_dtype_name(g_dtype), (long long)g_len, (long long)step);
        // Half dtypes round the sum once (both paths read the same
        // values): within one half ulp of 8.
        check_ops(what, build_slices, 1, &in, 1, &out, is_float ? 1e-2 : 0,
                  NULL);
      }
    }
  }
}

typedef enum win_e { W_MAX, W_AVG, W_DEPTHWISE } win_t;
static win_t g_win;
static int64_t g_stride, g_kernel;

static tj_graph_t* build_window(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "window");
  int64_t xd[4] = {tj_graph_symbol(g, "B"), 5, 13, 29};
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 4, xd, "x");
  tj_conv_attrs_t a;
  memset(&a, 0, sizeof(a));
  a.kernel[0] = 3;
  a.kernel[1] = g_kernel;
  a.strides[0] = 2;
  a.strides[1] = g_stride;  // along the contiguous axis: the lanes'
  a.dilations[0] = 2;
  a.pads_begin[0] = 1;
  a.pads_end[0] = 2;
  a.pads_begin[1] = 1;
  a.pads_end[1] = 1;
  tj_value_t y;
  if (g_win == W_MAX) {
    y = tj_graph_max_pool(g, x, &a);
  } else if (g_win == W_AVG) {
    y = tj_graph_avg_pool(g, x, &a);
  } else {
    a.groups = 5;
    tj_value_t w =
        tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){5, 1, 3, g_kernel}, "w");
    tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){5}, "b");
    y = tj_graph_conv(g, x, w, b, &a);
  }
  tj_graph_output(g, y, "y");
  return g;
}

TEST(strided_windows_against_the_reference) {
  for (int win = W_MAX; win <= W_DEPTHWISE; ++win) {
    for (int64_t stride = 2; stride <= 4; ++stride) {
      for (int64_t batch = 1; batch <= 3; batch += 2) {
        g_win = (win_t)win;
        g_stride = stride;
        g_kernel = stride == 4 ? 4 : 3;
        spec_t in[3] = {{TJ_DTYPE_F32, 4, {batch, 5, 13, 29}, -2, 2},
                        {TJ_DTYPE_F32, 4, {5, 1, 3, g_kernel}, -1, 1},
                        {TJ_DTYPE_F32, 1, {5}, -1, 1}};
        // out = (S + pads - dilation (K - 1) - 1) / stride + 1
        int64_t oh = (13 + 3 - 2 * 2 - 1) / 2 + 1;
        int64_t ow = (29 + 2 - (g_kernel - 1) - 1) / stride + 1;
        spec_t out = {TJ_DTYPE_F32, 4, {batch, 5, oh, ow}, 0, 0};
        char what[64];
        snprintf(what, sizeof(what), "%s stride %lld batch %lld",
                 win == W_MAX   ? "max_pool"
                 : win == W_AVG ? "avg_pool"
                                : "depthwise",
                 (long long)stride, (long long)batch);
        check_ops(what, build_window, win == W_DEPTHWISE ? 3 : 1, in, 1, &out,
                  1e-5, NULL);
      }
    }
  }
}

// y = x[0:n:2] * 2 with x's last element the last byte before a page that
// may not be read: a span load reading past the last lane would fault.
TEST(span_loads_stay_inside_the_tensor) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char* map = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(map != MAP_FAILED);
  if (map == MAP_FAILED) return;
  CHECK_EQ_INT(0, mprotect(map + page, page, PROT_NONE));
  // 31: one full AVX-512 vector (16 lanes, span 31); 33: 16 lanes and a
  // tail of 1; 15 and 17 the same for AVX2's 8 lanes.
  static const int64_t kLens[] = {31, 33, 15, 17, 7};
  for (size_t l = 0; l < sizeof(kLens) / sizeof(kLens[0]); ++l) {
    const int64_t n = kLens[l], m = (n + 1) / 2;
    float* x = (float*)(map + page) - n;
    for (int64_t i = 0; i < n; ++i) x[i] = (float)i;
    for (int t = 0; t < kTiers; ++t) {
      tj_graph_t* g = new_graph(g_ctx[t], "edge");
      tj_value_t a = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){n}, "x");
      tj_value_t s =
          tj_graph_slice(g, a, (int64_t[]){0}, (int64_t[]){n}, (int64_t[]){2});
      tj_graph_output(g, tj_graph_add(g, s, s), "y");
      CHECK_OK(tj_graph_finalize(g));
      tj_compile_options_t o;
      tj_compile_options_initialize(&o);
      o.target = TJ_TARGET_X86;
      o.cache_dir = "";
      o.x86.num_threads = 1;
      tj_executable_t* exe = NULL;
      CHECK_OK(tj_compile(g, &o, &exe));
      float y[32];
      int64_t xd[1] = {n}, yd[1] = {m};
      tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 1, xd);
      tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 1, yd);
      if (exe) {
        CHECK_OK(tj_executable_run(exe, &in, 1, &out, 1));
        for (int64_t i = 0; i < m; ++i) CHECK(y[i] == (float)(4 * i));
      }
      tj_executable_release(exe);
      tj_graph_destroy(g);
    }
  }
  munmap(map, 2 * page);
}

// Loads that stay put along a line (stride 0 along the vector dim) are
// hoisted out of the line's vector loop (jit/emit_pointwise.c): an
// embedding lookup's index (wrapped and clamped: negative and out-of-range
// ids), a broadcast column, rows of widths below, at and past a vector
// with tails, every tier, against the reference.
static int64_t g_width;

static tj_graph_t* build_lookup(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "lookup");
  tj_value_t t =
      tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){37, g_width}, "table");
  tj_value_t ids = tj_graph_input(g, TJ_DTYPE_I64, 1, (int64_t[]){11}, "ids");
  tj_value_t col =
      tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){11, 1}, "col");
  tj_value_t rows = tj_graph_gather(g, t, ids, 0);
  tj_graph_output(g, tj_graph_mul(g, tj_graph_add(g, rows, col), col), "y");
  return g;
}

TEST(line_invariant_loads_hoisted) {
  static const int64_t kWidths[] = {1, 7, 16, 33, 100};
  for (size_t w = 0; w < sizeof(kWidths) / sizeof(kWidths[0]); ++w) {
    g_width = kWidths[w];
    spec_t in[3] = {{TJ_DTYPE_F32, 2, {37, g_width}, -3, 3},
                    {TJ_DTYPE_I64, 1, {11}, -45, 45},
                    {TJ_DTYPE_F32, 2, {11, 1}, -2, 2}};
    spec_t out = {TJ_DTYPE_F32, 2, {11, g_width}, 0, 0};
    char what[48];
    snprintf(what, sizeof(what), "lookup width %lld", (long long)g_width);
    check_ops(what, build_lookup, 3, in, 1, &out, 1e-6, NULL);
  }
}

int main(void) {
  open_jits();
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(strided_slices_every_dtype_and_stride);
  RUN_TEST(strided_windows_against_the_reference);
  RUN_TEST(span_loads_stay_inside_the_tensor);
  RUN_TEST(line_invariant_loads_hoisted);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  close_jits();
  TEST_MAIN_END();
}
