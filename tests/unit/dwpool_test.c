// Depthwise convs, pools and squeeze-excite blocks as MobileNetV3 has them
// (issue 15, task dwpool), at every x86 tier, generic and specialized,
// against the reference interpreter (tier_ops_check.h; f32 sums of at most
// a few hundred products: 1e-4 relative):
// - the edge columns of a padded window (the boxes of one element along
//   the innermost axis, which no buffer walks contiguously) run one element
//   at a time (emit_pointwise.c): depthwise at stride 1 and 2, dilation 2,
//   asymmetric pads, max/avg pools with ceil_mode and count_include_pad,
//   odd sizes, batch 0, 1 and 3; and, where the tier has gathers and
//   scatters, the dumped assembly of such a graph has none;
// - a 1x1 conv of a 1x1 image (squeeze-excite's FCs) is one GEMM of M = N
//   (decompose.c): the whole SE chain (global mean, FC + relu, FC +
//   sigmoid, the scale), a symbolic batch bound to 0, 1 and 3, and a
//   weight given as an input (its transpose a kernel, not folded).

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/tier_ops_check.h"

static int64_t g_batch = 1;
static tj_conv_attrs_t g_attrs;
static int g_kind = 0;  // 0 depthwise, 1 max_pool, 2 avg_pool
static int64_t g_c = 5, g_h = 9, g_w = 11;

static tj_conv_attrs_t window(int64_t k, int64_t stride, int64_t pad,
                              int64_t groups) {
  tj_conv_attrs_t a;
  memset(&a, 0, sizeof a);
  for (int d = 0; d < 2; ++d) {
    a.kernel[d] = k;
    a.strides[d] = stride;
    a.pads_begin[d] = a.pads_end[d] = pad;
  }
  a.groups = groups;
  return a;
}

static tj_graph_t* build_window(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "window");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 4,
                                (int64_t[]){g_batch, g_c, g_h, g_w}, "x");
  tj_value_t y;
  if (g_kind == 0) {
    tj_value_t w = tj_graph_input(
        g, TJ_DTYPE_F32, 4,
        (int64_t[]){g_c, 1, g_attrs.kernel[0], g_attrs.kernel[1]}, "w");
    tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){g_c}, "b");
    y = tj_graph_conv(g, x, w, b, &g_attrs);
  } else if (g_kind == 1) {
    y = tj_graph_max_pool(g, x, &g_attrs);
  } else {
    y = tj_graph_avg_pool(g, x, &g_attrs);
  }
  tj_graph_output(g, y, "y");
  return g;
}

// The output size of a window along an axis (floor, or ceil with
// ceil_mode; a ceil window must start inside x or its low pad).
static int64_t out_size(int64_t in, int a) {
  const int64_t k = g_attrs.kernel[a],
                s = g_attrs.strides[a] ? g_attrs.strides[a] : 1;
  const int64_t dil = g_attrs.dilations[a] ? g_attrs.dilations[a] : 1;
  const int64_t span =
      in + g_attrs.pads_begin[a] + g_attrs.pads_end[a] - ((k - 1) * dil + 1);
  int64_t o = (g_attrs.ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (g_attrs.ceil_mode && (o - 1) * s >= in + g_attrs.pads_begin[a]) --o;
  return o;
}

static void check_window(const char* what, int kind, tj_conv_attrs_t a) {
  g_kind = kind;
  g_attrs = a;
  const int64_t batches[3] = {0, 1, 3};
  for (int i = 0; i < 3; ++i) {
    g_batch = batches[i];
    spec_t in[] = {
        {TJ_DTYPE_F32, 4, {g_batch, g_c, g_h, g_w}, -1, 1},
        {TJ_DTYPE_F32, 4, {g_c, 1, a.kernel[0], a.kernel[1]}, -0.5, 0.5},
        {TJ_DTYPE_F32, 1, {g_c}, -0.5, 0.5}};
    spec_t out[] = {{TJ_DTYPE_F32,
                     4,
                     {g_batch, g_c, out_size(g_h, 0), out_size(g_w, 1)},
                     0,
                     0}};
    char name[128];
    snprintf(name, sizeof name, "%s, batch %lld", what, (long long)g_batch);
    check_ops(name, build_window, kind == 0 ? 3 : 1, in, 1, out, 1e-4, NULL);
  }
}

TEST(depthwise_edges) {
  check_window("depthwise 3x3 pad 1", 0, window(3, 1, 1, 5));
  check_window("depthwise 3x3/2 pad 1", 0, window(3, 2, 1, 5));
  check_window("depthwise 5x5/2 pad 2", 0, window(5, 2, 2, 5));
  tj_conv_attrs_t a = window(3, 1, 0, 5);
  a.dilations[0] = a.dilations[1] = 2;
  a.pads_begin[0] = 2;
  a.pads_end[0] = 1;
  a.pads_begin[1] = 1;
  a.pads_end[1] = 3;
  check_window("depthwise 3x3 dilation 2, pads (2,1)x(1,3)", 0, a);
}

TEST(pool_edges) {
  tj_conv_attrs_t a = window(3, 2, 1, 0);
  check_window("max_pool 3x3/2 pad 1", 1, a);
  a.ceil_mode = true;
  check_window("max_pool 3x3/2 pad 1 ceil_mode", 1, a);
  a = window(3, 1, 1, 0);
  check_window("avg_pool 3x3 pad 1", 2, a);
  a.count_include_pad = true;
  check_window("avg_pool 3x3 pad 1 count_include_pad", 2, a);
  a = window(3, 2, 1, 0);
  a.pads_end[1] = 2;
  a.ceil_mode = true;
  check_window("avg_pool 3x3/2 pads (1,1)x(1,2) ceil_mode", 2, a);
}

// The concatenated text of every |ext| file in |dir|.
static char* dumped(const char* dir, const char* ext) {
  char* all = calloc(1, 1);
  size_t len = 0;
  DIR* d = opendir(dir);
  struct dirent* e;
  while (d && (e = readdir(d)) != NULL) {
    size_t nl = strlen(e->d_name), el = strlen(ext);
    if (nl < el || strcmp(e->d_name + nl - el, ext) != 0) continue;
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    FILE* f = fopen(path, "rb");
    if (!f) continue;
    char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), f)) > 0) {
      all = realloc(all, len + got + 1);
      memcpy(all + len, buf, got);
      len += got;
      all[len] = '\0';
    }
    fclose(f);
  }
  if (d) closedir(d);
  return all;
}

static void remove_dir(const char* dir) {
  DIR* d = opendir(dir);
  struct dirent* e;
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    remove(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

// A padded stride-1 depthwise conv at the host's tier and at AVX2 (both
// have vgatherdps; AVX-512 has vscatterdps): its edge column boxes, where
// every buffer's stride along the line is a row, were gathers and
// scatters; now none of its kernels has either. Since dwbw the conv is one
// x86 window kernel (no boxes at all) whose pads are masked row loads.
TEST(edge_columns_have_no_gathers) {
  g_kind = 0;
  g_attrs = window(3, 1, 1, 5);
  g_batch = 2;
  for (int t = 0; t < 2; ++t) {
    char dir[] = "/tmp/tj_dwpool_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    tj_context_options_t co;
    tj_context_options_initialize(&co);
    co.x86_isa = kIsa[t];
    co.dump_dir = dir;
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_context_create(&co, &ctx));
    tj_graph_t* g = build_window(ctx);
    CHECK_OK(tj_graph_finalize(g));
    tj_compile_options_t o = tj_test_x86_options(1);
    o.specialize = TJ_SPECIALIZE_ALWAYS;
    tj_executable_t* exe = NULL;
    CHECK_OK(tj_compile(g, &o, &exe));
    tj_executable_stats_t stats = {.struct_size = sizeof(stats)};
    tj_executable_stats(exe, &stats);
    CHECK_EQ_INT(1, stats.num_kernels);  // the window kernel, no boxes
    char* s = dumped(dir, ".s");
    CHECK(strlen(s) > 0);
    CHECK(strstr(s, "vgatherdps") == NULL);
    CHECK(strstr(s, "vgatherqps") == NULL);
    CHECK(strstr(s, "vscatterdps") == NULL);
    CHECK(strstr(s, "vscatterqps") == NULL);
    free(s);
    tj_executable_release(exe);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
    remove_dir(dir);
  }
}

static bool g_weight_input = false;

// MobileNetV3's squeeze-excite: s = sigmoid(fc2(relu(fc1(mean(x))))), y =
// x * s, the FCs as 1x1 convs with bias on [B, C, 1, 1]; B symbolic.
static tj_graph_t* build_se(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "se");
  const int64_t b = tj_graph_symbol(g, "B");
  tj_value_t x =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){b, 24, 7, 5}, "x");
  tj_value_t w1, w2;
  static float w1v[8 * 24], w2v[24 * 8];
  for (int i = 0; i < 8 * 24; ++i) {
    w1v[i] = (float)((i * 37 % 19) - 9) / 30.0f;
    w2v[i] = (float)((i * 23 % 17) - 8) / 25.0f;
  }
  if (g_weight_input) {
    w1 = tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){8, 24, 1, 1}, "w1");
  } else {
    w1 = tj_graph_constant(g, TJ_DTYPE_F32, 4, (int64_t[]){8, 24, 1, 1}, w1v,
                           sizeof w1v);
  }
  w2 = tj_graph_constant(g, TJ_DTYPE_F32, 4, (int64_t[]){24, 8, 1, 1}, w2v,
                         sizeof w2v);
  static const float b1v[8] = {0.1f, -0.2f, 0.3f, 0, 0.05f, -0.1f, 0.2f, 0};
  static float b2v[24];
  for (int i = 0; i < 24; ++i) b2v[i] = (float)(i % 5) / 10.0f - 0.2f;
  tj_value_t b1 =
      tj_graph_constant(g, TJ_DTYPE_F32, 1, (int64_t[]){8}, b1v, sizeof b1v);
  tj_value_t b2 =
      tj_graph_constant(g, TJ_DTYPE_F32, 1, (int64_t[]){24}, b2v, sizeof b2v);
  tj_value_t m = tj_graph_mean(g, x, 2, (int32_t[]){2, 3}, true);
  tj_value_t h = tj_graph_relu(g, tj_graph_conv(g, m, w1, b1, NULL));
  tj_value_t s = tj_graph_sigmoid(g, tj_graph_conv(g, h, w2, b2, NULL));
  tj_graph_output(g, tj_graph_mul(g, x, s), "y");
  tj_graph_output(g, s, "s");
  return g;
}

TEST(squeeze_excite_fc) {
  for (int wi = 0; wi < 2; ++wi) {
    g_weight_input = wi == 1;
    const int64_t batches[3] = {0, 1, 3};
    for (int i = 0; i < 3; ++i) {
      const int64_t n = batches[i];
      spec_t in[] = {{TJ_DTYPE_F32, 4, {n, 24, 7, 5}, -2, 2},
                     {TJ_DTYPE_F32, 4, {8, 24, 1, 1}, -0.3, 0.3}};
      spec_t out[] = {{TJ_DTYPE_F32, 4, {n, 24, 7, 5}, 0, 0},
                      {TJ_DTYPE_F32, 4, {n, 24, 1, 1}, 0, 0}};
      char name[96];
      snprintf(name, sizeof name, "squeeze-excite, batch %lld, w1 %s",
               (long long)n, g_weight_input ? "an input" : "a constant");
      check_ops(name, build_se, g_weight_input ? 2 : 1, in, 2, out, 1e-4, NULL);
    }
  }
}

int main(void) {
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(depthwise_edges);
  RUN_TEST(pool_edges);
  RUN_TEST(edge_columns_have_no_gathers);
  RUN_TEST(squeeze_excite_fc);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  close_jits();
  TEST_MAIN_END();
}
