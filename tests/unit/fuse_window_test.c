// The fusion rules that keep real CNNs' window ops off the host (issue 15,
// goal 4: resnet18 and mobilenet_v3_small had graph breaks, groups the
// lowering refused and that ran on the reference interpreter). Each graph
// is the small form of a block of those models; check_ops compiles it at
// every x86 tier, generic and specialized, asserts no graph break and
// compares with the reference interpreter (f32 sums of at most a few
// hundred products: 1e-4 relative).
// - squeeze_excitation: a 1x1 conv, a depthwise conv, its global mean and
//   the product of the two (fuse.c: a pad along a reduced axis is not
//   inlined before the reduction; a reduction over several axes storing
//   its input takes no movement into its prologue). This small block
//   compiled without graph breaks before those rules too (mobilenet's
//   breaks need the whole graph's merges: onnx_models_test checks them);
//   it guards the rules' results, not their trigger;
// - strided_depthwise_to_matmul: a stride-2 depthwise conv read by a 1x1
//   conv, through a reshape (fuse.c: no pad under a shape-changing
//   reshape);
// - stem_max_pool: a 7x7 stride-2 conv and the 3x3 stride-2 max pool after
//   it (fuse.c wide_pads: a pad whose taps would read more than 32 buffers
//   is written to memory).

#include "tests/unit/tier_ops_check.h"

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

static tj_graph_t* build_se(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "se");
  tj_value_t x =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){2, 16, 14, 14}, "x");
  tj_value_t w =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){16, 1, 5, 5}, "w");
  tj_value_t e =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){16, 16, 1, 1}, "e");
  tj_value_t h =
      tj_graph_relu(g, tj_graph_conv(g, x, e, tj_value_none(), NULL));
  tj_conv_attrs_t a = window(5, 2, 2, 16);
  tj_value_t y = tj_graph_relu(g, tj_graph_conv(g, h, w, tj_value_none(), &a));
  tj_value_t s = tj_graph_mean(g, y, 2, (int32_t[]){2, 3}, true);
  tj_graph_output(g, tj_graph_mul(g, y, s), "out");
  return g;
}

static tj_graph_t* build_strided(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "strided");
  tj_value_t x =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){2, 16, 14, 14}, "x");
  tj_value_t w =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){16, 1, 3, 3}, "w");
  tj_value_t p =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){8, 16, 1, 1}, "p");
  tj_conv_attrs_t a = window(3, 2, 1, 16);
  tj_value_t y = tj_graph_relu(g, tj_graph_conv(g, x, w, tj_value_none(), &a));
  tj_graph_output(g, tj_graph_conv(g, y, p, tj_value_none(), NULL), "out");
  return g;
}

static tj_graph_t* build_stem(tj_context_t* ctx) {
  tj_graph_t* g = new_graph(ctx, "stem");
  tj_value_t x =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){1, 3, 32, 32}, "x");
  tj_value_t w =
      tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){16, 3, 7, 7}, "w");
  tj_conv_attrs_t a = window(7, 2, 3, 1);
  tj_value_t y = tj_graph_relu(g, tj_graph_conv(g, x, w, tj_value_none(), &a));
  tj_conv_attrs_t pool = window(3, 2, 1, 0);
  tj_graph_output(g, tj_graph_max_pool(g, y, &pool), "out");
  return g;
}

TEST(squeeze_excitation) {
  spec_t in[] = {{TJ_DTYPE_F32, 4, {2, 16, 14, 14}, -1, 1},
                 {TJ_DTYPE_F32, 4, {16, 1, 5, 5}, -0.3, 0.3},
                 {TJ_DTYPE_F32, 4, {16, 16, 1, 1}, -0.3, 0.3}};
  spec_t out[] = {{TJ_DTYPE_F32, 4, {2, 16, 7, 7}, 0, 0}};
  check_ops("squeeze_excitation", build_se, 3, in, 1, out, 1e-4, NULL);
}

TEST(strided_depthwise_to_matmul) {
  spec_t in[] = {{TJ_DTYPE_F32, 4, {2, 16, 14, 14}, -1, 1},
                 {TJ_DTYPE_F32, 4, {16, 1, 3, 3}, -0.5, 0.5},
                 {TJ_DTYPE_F32, 4, {8, 16, 1, 1}, -0.5, 0.5}};
  spec_t out[] = {{TJ_DTYPE_F32, 4, {2, 8, 7, 7}, 0, 0}};
  check_ops("strided_depthwise_to_matmul", build_strided, 3, in, 1, out, 1e-4,
            NULL);
}

TEST(stem_max_pool) {
  spec_t in[] = {{TJ_DTYPE_F32, 4, {1, 3, 32, 32}, -1, 1},
                 {TJ_DTYPE_F32, 4, {16, 3, 7, 7}, -0.2, 0.2}};
  spec_t out[] = {{TJ_DTYPE_F32, 4, {1, 16, 8, 8}, 0, 0}};
  check_ops("stem_max_pool", build_stem, 2, in, 1, out, 1e-4, NULL);
}

int main(void) {
  for (int t = 0; t < kTiers; ++t) {
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.x86_isa = kIsa[t];
    CHECK_OK(tj_context_create(&o, &g_ctx[t]));
  }
  RUN_TEST(squeeze_excitation);
  RUN_TEST(strided_depthwise_to_matmul);
  RUN_TEST(stem_max_pool);
  for (int t = 0; t < kTiers; ++t) tj_context_destroy(g_ctx[t]);
  close_jits();
  TEST_MAIN_END();
}
