// The transformer blocks of bench/transformer_blocks.py (issue 14) built
// through the public API, for the tests and benches that compile them
// (the builders of tests/unit/blocks_ptx_test.c): the GPT-style block
// (LayerNorm, Q/K/V linears with bias, causal attention, output
// projection, residual, GELU MLP) and the Llama-style block (RMSNorm,
// grouped-query heads, rotary embeddings, causal attention, SwiGLU MLP).
// |b| 0 is a symbolic B. Not finalized; NULL when the graph cannot be
// created.

#ifndef TJ_TESTS_UNIT_BLOCKS_GRAPHS_H_
#define TJ_TESTS_UNIT_BLOCKS_GRAPHS_H_

#include <stdint.h>

#include "tensorjit.h"

enum { TJ_GPT_D = 768, TJ_GPT_H = 12, TJ_GPT_FFN = 3072 };
enum {
  TJ_LLAMA_D = 2048,
  TJ_LLAMA_H = 16,
  TJ_LLAMA_HKV = 4,
  TJ_LLAMA_FFN = 5632
};

static inline tj_value_t blocks_input(tj_graph_t* g, tj_dtype_t dt,
                                      const char* name, int32_t rank,
                                      const int64_t* dims) {
  return tj_graph_input(g, dt, rank, dims, name);
}

// [b, t, n*dh] -> [b, n, t, dh]
static inline tj_value_t blocks_heads(tj_graph_t* g, tj_value_t v, int64_t b,
                                      int64_t t, int64_t n, int64_t dh) {
  tj_value_t r = tj_graph_reshape(g, v, 4, (int64_t[]){b, t, n, dh});
  return tj_graph_transpose(g, r, (int32_t[]){0, 2, 1, 3});
}

// [b, h, t, dh] -> [b, t, h*dh]
static inline tj_value_t blocks_merge(tj_graph_t* g, tj_value_t v, int64_t b,
                                      int64_t t, int64_t d) {
  tj_value_t r = tj_graph_transpose(g, v, (int32_t[]){0, 2, 1, 3});
  return tj_graph_reshape(g, r, 3, (int64_t[]){b, t, d});
}

static inline tj_graph_t* tj_test_gpt_block(tj_context_t* ctx, tj_dtype_t dt,
                                            int64_t b, int64_t t) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(ctx, "gpt_block", &g) != NULL) return NULL;
  if (b == 0) b = tj_graph_symbol(g, "B");
  const int64_t d = TJ_GPT_D, dh = TJ_GPT_D / TJ_GPT_H;
  tj_value_t x = blocks_input(g, dt, "x", 3, (int64_t[]){b, t, d});
  const int64_t vd[] = {d}, md[] = {d, d};
  tj_value_t ln1_w = blocks_input(g, dt, "ln1_w", 1, vd);
  tj_value_t ln1_b = blocks_input(g, dt, "ln1_b", 1, vd);
  tj_value_t wq = blocks_input(g, dt, "wq", 2, md),
             bq = blocks_input(g, dt, "bq", 1, vd);
  tj_value_t wk = blocks_input(g, dt, "wk", 2, md),
             bk = blocks_input(g, dt, "bk", 1, vd);
  tj_value_t wv = blocks_input(g, dt, "wv", 2, md),
             bv = blocks_input(g, dt, "bv", 1, vd);
  tj_value_t wo = blocks_input(g, dt, "wo", 2, md),
             bo = blocks_input(g, dt, "bo", 1, vd);
  tj_value_t ln2_w = blocks_input(g, dt, "ln2_w", 1, vd);
  tj_value_t ln2_b = blocks_input(g, dt, "ln2_b", 1, vd);
  tj_value_t w1 = blocks_input(g, dt, "w1", 2, (int64_t[]){d, TJ_GPT_FFN});
  tj_value_t b1 = blocks_input(g, dt, "b1", 1, (int64_t[]){TJ_GPT_FFN});
  tj_value_t w2 = blocks_input(g, dt, "w2", 2, (int64_t[]){TJ_GPT_FFN, d});
  tj_value_t b2 = blocks_input(g, dt, "b2", 1, vd);
  tj_value_t h = tj_graph_layer_norm(g, x, ln1_w, ln1_b, 1e-5);
  tj_value_t q =
      blocks_heads(g, tj_graph_linear(g, h, wq, bq), b, t, TJ_GPT_H, dh);
  tj_value_t k =
      blocks_heads(g, tj_graph_linear(g, h, wk, bk), b, t, TJ_GPT_H, dh);
  tj_value_t v =
      blocks_heads(g, tj_graph_linear(g, h, wv, bv), b, t, TJ_GPT_H, dh);
  tj_value_t a = blocks_merge(
      g, tj_graph_attention(g, q, k, v, tj_value_none(), 0.0, true), b, t, d);
  x = tj_graph_add(g, x, tj_graph_linear(g, a, wo, bo));
  h = tj_graph_layer_norm(g, x, ln2_w, ln2_b, 1e-5);
  tj_value_t m = tj_graph_linear(
      g, tj_graph_gelu(g, tj_graph_linear(g, h, w1, b1), false), w2, b2);
  tj_graph_output(g, tj_graph_add(g, x, m), "y");
  return g;
}

// v [b, n, t, dh]: v * cos + concat(-v[.., dh/2:], v[.., :dh/2]) * sin
static inline tj_value_t blocks_rope(tj_graph_t* g, tj_value_t v,
                                     tj_value_t cos, tj_value_t sin, int64_t n,
                                     int64_t t, int64_t dh) {
  tj_value_t lo = tj_graph_slice(g, v, (int64_t[]){0, 0, 0, 0},
                                 (int64_t[]){INT64_MAX, n, t, dh / 2}, NULL);
  tj_value_t hi = tj_graph_slice(g, v, (int64_t[]){0, 0, 0, dh / 2},
                                 (int64_t[]){INT64_MAX, n, t, dh}, NULL);
  tj_value_t rot =
      tj_graph_concat(g, 2, (tj_value_t[]){tj_graph_neg(g, hi), lo}, 3);
  return tj_graph_add(g, tj_graph_mul(g, v, cos), tj_graph_mul(g, rot, sin));
}

static inline tj_graph_t* tj_test_llama_block(tj_context_t* ctx, tj_dtype_t dt,
                                              int64_t b, int64_t t) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(ctx, "llama_block", &g) != NULL) return NULL;
  if (b == 0) b = tj_graph_symbol(g, "B");
  const int64_t d = TJ_LLAMA_D, dh = TJ_LLAMA_D / TJ_LLAMA_H,
                kvd = TJ_LLAMA_HKV * dh;
  tj_value_t x = blocks_input(g, dt, "x", 3, (int64_t[]){b, t, d});
  const int64_t vd[] = {d};
  tj_value_t rms1_w = blocks_input(g, dt, "rms1_w", 1, vd);
  tj_value_t wq = blocks_input(g, dt, "wq", 2, (int64_t[]){d, d});
  tj_value_t wk = blocks_input(g, dt, "wk", 2, (int64_t[]){d, kvd});
  tj_value_t wv = blocks_input(g, dt, "wv", 2, (int64_t[]){d, kvd});
  tj_value_t wo = blocks_input(g, dt, "wo", 2, (int64_t[]){d, d});
  tj_value_t rms2_w = blocks_input(g, dt, "rms2_w", 1, vd);
  tj_value_t wg = blocks_input(g, dt, "wg", 2, (int64_t[]){d, TJ_LLAMA_FFN});
  tj_value_t wu = blocks_input(g, dt, "wu", 2, (int64_t[]){d, TJ_LLAMA_FFN});
  tj_value_t wd = blocks_input(g, dt, "wd", 2, (int64_t[]){TJ_LLAMA_FFN, d});
  tj_value_t cos = blocks_input(g, dt, "cos", 2, (int64_t[]){t, dh});
  tj_value_t sin = blocks_input(g, dt, "sin", 2, (int64_t[]){t, dh});
  tj_value_t h = tj_graph_rms_norm(g, x, rms1_w, 1e-6);
  tj_value_t q = blocks_rope(
      g, blocks_heads(g, tj_graph_matmul(g, h, wq), b, t, TJ_LLAMA_H, dh), cos,
      sin, TJ_LLAMA_H, t, dh);
  tj_value_t k = blocks_rope(
      g, blocks_heads(g, tj_graph_matmul(g, h, wk), b, t, TJ_LLAMA_HKV, dh),
      cos, sin, TJ_LLAMA_HKV, t, dh);
  tj_value_t v =
      blocks_heads(g, tj_graph_matmul(g, h, wv), b, t, TJ_LLAMA_HKV, dh);
  tj_value_t a = blocks_merge(
      g, tj_graph_attention(g, q, k, v, tj_value_none(), 0.0, true), b, t, d);
  x = tj_graph_add(g, x, tj_graph_matmul(g, a, wo));
  h = tj_graph_rms_norm(g, x, rms2_w, 1e-6);
  tj_value_t m = tj_graph_matmul(
      g,
      tj_graph_mul(g, tj_graph_silu(g, tj_graph_matmul(g, h, wg)),
                   tj_graph_matmul(g, h, wu)),
      wd);
  tj_graph_output(g, tj_graph_add(g, x, m), "y");
  return g;
}

#endif  // TJ_TESTS_UNIT_BLOCKS_GRAPHS_H_
