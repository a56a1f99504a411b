// cudabw (issue 15) on the GPU: depthwise convs and max/avg pools on the
// CUDA direct window kernel (jit/emit_nvptx_window.c), and the embedding
// gather, against the reference interpreter.
//
// windows: each case one kernel, no graph break, one executable with a
// symbolic batch run at N = 3, 1 and 0: depthwise 3x3 at stride 1 and 2,
// a depth multiplier of 2 (O = 2 C), dilation, asymmetric pads, 1D and
// 3D, with and without bias, each also with 2 and 4 output rows a thread
// (TJ_NVPTX_CONV=window-rows2/4; the default takes row blocks only on
// large outputs); max_pool 3x3/2 (resnet's stem pool), ceil_mode
// (windows past the end), dilation, 3D, and NaNs in x (a window holding
// one gives NaN, as the reference); avg_pool with and without
// count_include_pad, with ceil_mode (taps past the declared pads never
// count); output heights that are and are not multiples of the rows a
// thread takes; planes smaller and larger than a block. Pools must match
// the reference exactly (max: bit for bit) or nearly (avg: within 1e-6
// of |y| + 1, the f32 sum's order); depthwise within 1e-5 relative + 1e-6 x
// taps absolute (f32 sums of at most 64 products of inputs in [-1, 1]). A
// window of 81 taps (past TJ_NVPTX_WINDOW_MAX_TAPS) decomposes and must still
// match.
//
// gather: numpy.take(table, ids, 0) for embedding tables [V, D] f32 and
// bf16, D 768 (the vector path: one 16-byte load a thread step, the id
// read once a row), D 7, 12 and 6 (vector and scalar paths), ids i64 and
// i32 with a symbolic count T (run at 8, 1 and 0 and, for [B, T] ids, B 3)
// holding negative ids (counted from the end) and ids past either end
// (clamped): bit-exact. Tests named on the command line run alone. Skips
// (exit 77) without a driver or GPU.

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorjit/tj_executable.h"
#include "tensorjit/tj_graph.h"
#include "tensorjit/tj_tensor.h"
#include "jit/nvptx.h"
#include "lib/dtype.h"
#include "tests/cuda/cuda_test_util.h"

static tj_context_t* g_ctx;
// TJ_NVPTX_CONV=window-rows2 and window-rows4: the window kernel's row
// blocks, which the default takes only on large outputs.
static tj_context_t* g_rows_ctx[2];

typedef enum wop_e { W_DEPTHWISE, W_MAX, W_AVG } wop_t;

typedef struct wcase_t {
  const char* name;
  wop_t op;
  int32_t n;     // spatial axes
  int64_t c, o;  // channels in, out (o = c for pools)
  int64_t s[3];  // input spatial sizes
  bool bias;
  bool nans;  // x holds NaNs
  tj_conv_attrs_t a;
} wcase_t;

static const wcase_t kWindows[] = {
    {"dw_3x3_s1",
     W_DEPTHWISE,
     2,
     5,
     5,
     {9, 11},
     true,
     false,
     {.kernel = {3, 3}, .pads_begin = {1, 1}, .pads_end = {1, 1}}},
    {"dw_3x3_s1_tall",
     W_DEPTHWISE,
     2,
     3,
     3,
     {37, 45},
     false,
     false,
     {.kernel = {3, 3}, .pads_begin = {1, 1}, .pads_end = {1, 1}}},
    {"dw_3x3_s2",
     W_DEPTHWISE,
     2,
     7,
     7,
     {12, 13},
     false,
     false,
     {.kernel = {3, 3},
      .strides = {2, 2},
      .pads_begin = {1, 1},
      .pads_end = {1, 1}}},
    {"dw_5x5_mult2",
     W_DEPTHWISE,
     2,
     3,
     6,
     {10, 8},
     true,
     false,
     {.kernel = {5, 5}, .pads_begin = {2, 2}, .pads_end = {2, 2}}},
    {"dw_3x3_d2_asym",
     W_DEPTHWISE,
     2,
     4,
     4,
     {12, 9},
     true,
     false,
     {.kernel = {3, 3},
      .dilations = {2, 2},
      .pads_begin = {2, 1},
      .pads_end = {2, 3}}},
    {"dw_1d_k5",
     W_DEPTHWISE,
     1,
     6,
     6,
     {300},
     true,
     false,
     {.kernel = {5}, .pads_begin = {2}, .pads_end = {2}}},
    {"dw_3d",
     W_DEPTHWISE,
     3,
     2,
     2,
     {5, 6, 7},
     false,
     false,
     {.kernel = {3, 2, 3},
      .strides = {1, 2, 1},
      .pads_begin = {1, 0, 1},
      .pads_end = {1, 1, 0}}},
    {"max_3x3_s2_stem",
     W_MAX,
     2,
     4,
     4,
     {15, 17},
     false,
     false,
     {.kernel = {3, 3},
      .strides = {2, 2},
      .pads_begin = {1, 1},
      .pads_end = {1, 1}}},
    {"max_2x2_ceil",
     W_MAX,
     2,
     3,
     3,
     {7, 9},
     false,
     false,
     {.kernel = {2, 2}, .strides = {2, 2}, .ceil_mode = true}},
    {"max_3x3_d2_nan",
     W_MAX,
     2,
     3,
     3,
     {11, 10},
     false,
     true,
     {.kernel = {3, 3},
      .dilations = {2, 2},
      .pads_begin = {1, 2},
      .pads_end = {2, 1}}},
    {"max_3d",
     W_MAX,
     3,
     2,
     2,
     {6, 5, 7},
     false,
     false,
     {.kernel = {3, 2, 3},
      .strides = {2, 1, 2},
      .pads_begin = {1, 0, 1},
      .pads_end = {1, 1, 1}}},
    {"avg_3x3_s1",
     W_AVG,
     2,
     4,
     4,
     {14, 14},
     false,
     false,
     {.kernel = {3, 3}, .pads_begin = {1, 1}, .pads_end = {1, 1}}},
    {"avg_3x3_s2_incl_ceil",
     W_AVG,
     2,
     3,
     3,
     {12, 11},
     false,
     false,
     {.kernel = {3, 3},
      .strides = {2, 2},
      .pads_begin = {1, 1},
      .pads_end = {1, 1},
      .ceil_mode = true,
      .count_include_pad = true}},
    {"avg_1d_k4_ceil",
     W_AVG,
     1,
     5,
     5,
     {31},
     false,
     false,
     {.kernel = {4}, .strides = {3}, .pads_begin = {1}, .ceil_mode = true}},
    {"avg_7x7_global",
     W_AVG,
     2,
     9,
     9,
     {7, 7},
     false,
     false,
     {.kernel = {7, 7}}},
    // 81 taps: past the kernel's unrolling, decomposed.
    {"max_9x9_decomposed",
     W_MAX,
     2,
     2,
     2,
     {12, 12},
     false,
     false,
     {.kernel = {9, 9}, .pads_begin = {4, 4}, .pads_end = {4, 4}}},
};

// Uniform in [-1, 1), from cuda_test_util.h's generator.
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float uniform(void) { return (float)(tj_test_unit(&g_rng) * 2.0 - 1.0); }

static float* random_buffer(int64_t n) {
  float* p = malloc((size_t)(n ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) p[i] = uniform();
  return p;
}

static int64_t numel(int32_t r, const int64_t* d) {
  int64_t n = 1;
  for (int32_t i = 0; i < r; ++i) n *= d[i];
  return n;
}

static int64_t taps_of(const wcase_t* c) {
  int64_t t = 1;
  for (int32_t i = 0; i < c->n; ++i) t *= c->a.kernel[i];
  return t;
}

// y = op(x), the batch the symbol N; |xd| and |wd| get x's and w's dims
// (x's batch the symbol).
static tj_graph_t* build_window(tj_context_t* ctx, const wcase_t* c,
                                int64_t* xd, int64_t* wd) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "cuda_window", &g));
  if (!g) return NULL;
  const int32_t r = c->n + 2;
  xd[0] = tj_graph_symbol(g, "N");
  xd[1] = c->c;
  wd[0] = c->o;
  wd[1] = 1;
  for (int32_t i = 0; i < c->n; ++i) {
    xd[2 + i] = c->s[i];
    wd[2 + i] = c->a.kernel[i];
  }
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, r, xd, "x");
  tj_value_t y;
  if (c->op == W_DEPTHWISE) {
    tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, r, wd, "w");
    tj_value_t b = {0};
    if (c->bias) b = tj_graph_input(g, TJ_DTYPE_F32, 1, &c->o, "b");
    tj_conv_attrs_t a = c->a;
    a.groups = c->c;
    y = tj_graph_conv(g, x, w, b, &a);
  } else if (c->op == W_MAX) {
    y = tj_graph_max_pool(g, x, &c->a);
  } else {
    y = tj_graph_avg_pool(g, x, &c->a);
  }
  tj_graph_output(g, y, "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static tj_executable_t* compile_cuda(tj_graph_t* g) {
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.target = TJ_TARGET_CUDA;
  opts.cache_dir = "";
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &opts, &exe));
  return exe;
}

static void run_window(tj_context_t* ctx, const wcase_t* c) {
  const int32_t r = c->n + 2;
  int64_t xd[5], wd[5];
  tj_graph_t* g = build_window(ctx, c, xd, wd);
  tj_executable_t* exe = g ? compile_cuda(g) : NULL;
  if (!exe) {
    tj_graph_destroy(g);
    return;
  }
  const int64_t taps = taps_of(c);
  tj_executable_stats_t stats = {.struct_size = sizeof(stats)};
  tj_executable_stats(exe, &stats);
  CHECK_EQ_INT(0, stats.num_graph_breaks);
  if (taps <= TJ_NVPTX_WINDOW_MAX_TAPS && stats.num_kernels != 1)
    fprintf(stderr, "%s: %d kernels, want 1\n", c->name,
            (int)stats.num_kernels);
  if (taps <= TJ_NVPTX_WINDOW_MAX_TAPS) CHECK_EQ_INT(1, stats.num_kernels);
  static const int64_t kBatches[] = {3, 1, 0};
  for (size_t bi = 0; bi < TJ_ARRAY_SIZE(kBatches); ++bi) {
    const int64_t N = kBatches[bi];
    int64_t xs[5];
    memcpy(xs, xd, sizeof(xs));
    xs[0] = N;
    const int64_t nx = numel(r, xs), nw = numel(r, wd);
    float* x = random_buffer(nx);
    if (c->nans) {
      for (int64_t i = 0; i < nx; i += 37) x[i] = NAN;
    }
    float* w = random_buffer(nw);
    float* b = random_buffer(c->o);
    tj_tensor_t ins[3];
    int32_t nin = 0;
    ins[nin++] = tj_tensor_make(x, TJ_DTYPE_F32, r, xs);
    if (c->op == W_DEPTHWISE) {
      ins[nin++] = tj_tensor_make(w, TJ_DTYPE_F32, r, wd);
      if (c->bias) ins[nin++] = tj_tensor_make(b, TJ_DTYPE_F32, 1, &c->o);
    }
    // The output's shape from the reference's shaped run.
    tj_tensor_t want_t;
    memset(&want_t, 0, sizeof(want_t));
    int64_t ys[5];
    int32_t yr = 0;
    CHECK_OK(tj_executable_output_shape(exe, ins, nin, 0, &yr, ys));
    CHECK_EQ_INT(r, yr);
    const int64_t ny = numel(r, ys);
    float* want = calloc((size_t)(ny ? ny : 1), 4);
    float* got = malloc((size_t)(ny ? ny : 1) * 4);
    memset(got, 0xff, (size_t)(ny ? ny : 1) * 4);
    want_t = tj_tensor_make(want, TJ_DTYPE_F32, r, ys);
    CHECK_OK(tj_reference_run(g, ins, nin, &want_t, 1));
    tj_tensor_t out = tj_tensor_make(got, TJ_DTYPE_F32, r, ys);
    CHECK_OK(tj_executable_run(exe, ins, nin, &out, 1));
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < ny; ++i) {
      const double gv = got[i], wv = want[i];
      bool ok;
      if (c->op == W_MAX) {
        ok = memcmp(&got[i], &want[i], 4) == 0 || (isnan(gv) && isnan(wv));
      } else if (c->op == W_AVG) {
        ok = fabs(gv - wv) <= 1e-6 * (fabs(wv) + 1.0);
      } else {
        ok = fabs(gv - wv) <= 1e-5 * fabs(wv) + 1e-6 * (double)taps;
      }
      if (!ok) {
        if (first < 0) first = i;
        ++bad;
      }
    }
    if (bad) {
      fprintf(stderr, "%s N=%lld: %lld of %lld wrong, [%lld] %.9g vs %.9g\n",
              c->name, (long long)N, (long long)bad, (long long)ny,
              (long long)first, got[first], want[first]);
    }
    CHECK_EQ_INT(0, bad);
    free(x);
    free(w);
    free(b);
    free(want);
    free(got);
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

TEST(windows) {
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kWindows); ++i)
    run_window(g_ctx, &kWindows[i]);
}

TEST(windows_row_blocks) {
  for (size_t j = 0; j < TJ_ARRAY_SIZE(g_rows_ctx); ++j) {
    for (size_t i = 0; i < TJ_ARRAY_SIZE(kWindows); ++i)
      run_window(g_rows_ctx[j], &kWindows[i]);
  }
}

//===--- gather ---===//

typedef struct gcase_t {
  const char* name;
  tj_dtype_t table, ids;
  int64_t v, d;
  bool batch;  // ids [B, T] (B 3), else [T]
} gcase_t;

static const gcase_t kGathers[] = {
    {"f32_768", TJ_DTYPE_F32, TJ_DTYPE_I64, 50, 768, false},
    {"bf16_768", TJ_DTYPE_BF16, TJ_DTYPE_I64, 37, 768, false},
    {"f32_768_i32_bt", TJ_DTYPE_F32, TJ_DTYPE_I32, 29, 768, true},
    {"bf16_768_i32_bt", TJ_DTYPE_BF16, TJ_DTYPE_I32, 64, 768, true},
    {"f32_12", TJ_DTYPE_F32, TJ_DTYPE_I64, 9, 12, false},
    {"f32_7", TJ_DTYPE_F32, TJ_DTYPE_I64, 11, 7, false},
    {"bf16_6", TJ_DTYPE_BF16, TJ_DTYPE_I64, 5, 6, false},
};

static void run_gather(const gcase_t* c) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, "cuda_gather", &g));
  if (!g) return;
  const int64_t T = tj_graph_symbol(g, "T");
  int64_t td[2] = {c->v, c->d};
  int64_t id[2] = {3, T};
  const int32_t ir = c->batch ? 2 : 1;
  if (!c->batch) id[0] = T;
  tj_value_t table = tj_graph_input(g, c->table, 2, td, "table");
  tj_value_t ids = tj_graph_input(g, c->ids, ir, id, "ids");
  tj_graph_output(g, tj_graph_gather(g, table, ids, 0), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_executable_t* exe = compile_cuda(g);
  if (!exe) {
    tj_graph_destroy(g);
    return;
  }
  tj_executable_stats_t stats = {.struct_size = sizeof(stats)};
  tj_executable_stats(exe, &stats);
  CHECK_EQ_INT(0, stats.num_graph_breaks);
  CHECK_EQ_INT(1, stats.num_kernels);
  const size_t es = tj_dtype_size(c->table);
  unsigned char* tab = malloc((size_t)(c->v * c->d) * es);
  for (int64_t i = 0; i < c->v * c->d; ++i) {
    float f = uniform();
    if (c->table == TJ_DTYPE_F32) {
      memcpy(tab + i * 4, &f, 4);
    } else {
      uint16_t h = tj_f32_to_bf16(f);
      memcpy(tab + i * 2, &h, 2);
    }
  }
  static const int64_t kTokens[] = {8, 1, 0};
  for (size_t ti = 0; ti < TJ_ARRAY_SIZE(kTokens); ++ti) {
    const int64_t t = kTokens[ti];
    int64_t is[2] = {c->batch ? 3 : t, t};
    const int64_t n = c->batch ? 3 * t : t;
    // In range, negative (from the end), and past either end (clamped).
    const int64_t pick[8] = {0,    c->v - 1,  -1,      -c->v,
                             c->v, -c->v - 1, 1000000, 2};
    int64_t* i64 = malloc((size_t)(n ? n : 1) * 8);
    int32_t* i32 = malloc((size_t)(n ? n : 1) * 4);
    for (int64_t i = 0; i < n; ++i) {
      i64[i] = pick[(i * 5 + i / 8) % 8];
      i32[i] = (int32_t)i64[i];
    }
    tj_tensor_t in[2];
    in[0] = tj_tensor_make(tab, c->table, 2, td);
    in[1] = tj_tensor_make(c->ids == TJ_DTYPE_I64 ? (void*)i64 : (void*)i32,
                           c->ids, ir, is);
    int64_t ys[3] = {is[0], is[1], c->d};
    if (!c->batch) {
      ys[0] = t;
      ys[1] = c->d;
    }
    const size_t bytes = (size_t)(n * c->d) * es;
    unsigned char* want = calloc(bytes ? bytes : 1, 1);
    unsigned char* got = malloc(bytes ? bytes : 1);
    memset(got, 0xff, bytes ? bytes : 1);
    tj_tensor_t w = tj_tensor_make(want, c->table, ir + 1, ys);
    CHECK_OK(tj_reference_run(g, in, 2, &w, 1));
    tj_tensor_t o = tj_tensor_make(got, c->table, ir + 1, ys);
    CHECK_OK(tj_executable_run(exe, in, 2, &o, 1));
    if (memcmp(got, want, bytes) != 0)
      fprintf(stderr, "gather %s T=%lld: differs from the reference\n", c->name,
              (long long)t);
    CHECK(memcmp(got, want, bytes) == 0);
    free(i64);
    free(i32);
    free(want);
    free(got);
  }
  free(tab);
  tj_executable_release(exe);
  tj_graph_destroy(g);
}

TEST(gathers) {
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kGathers); ++i) run_gather(&kGathers[i]);
}

static int g_argc;
static char** g_argv;
static bool selected(const char* name) {
  for (int i = 1; i < g_argc; ++i)
    if (strcmp(g_argv[i], name) == 0) return true;
  return g_argc < 2;
}

#define RUN_SELECTED(name)               \
  do {                                   \
    if (selected(#name)) RUN_TEST(name); \
  } while (0)

int main(int argc, char** argv) {
  g_argc = argc;
  g_argv = argv;
  tj_cuda_device_t* device = tj_test_open_device_or_skip();
  tj_cuda_device_destroy(device);
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
  RUN_SELECTED(windows);
  RUN_SELECTED(windows_row_blocks);
  RUN_SELECTED(gathers);
  tj_context_destroy(g_rows_ctx[1]);
  tj_context_destroy(g_rows_ctx[0]);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
