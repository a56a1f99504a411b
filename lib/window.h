// The WINDOW attributes of conv, conv_transpose and the pools, as stored in
// a node's tj_attrs_t (TJ_ATTR_KIND_WINDOW):
//   ints = [groups, flags, kernel[n], strides[n], dilations[n], low[n],
//           high[n], output_padding[n]]  (num_ints = 2 + 6 n)
//   value = p (lp_pool; 0 otherwise)
// n is the number of spatial axes (rank(x) - 2, 1 to 3). Inference
// normalizes them: strides, dilations and groups >= 1, kernel taken from the
// weight for conv and conv_transpose, pads >= 0, output_padding 0 but for
// conv_transpose. A raw descriptor may also hold only [groups, flags] (every
// list default, conv only).

#ifndef TJ_LIB_WINDOW_H_
#define TJ_LIB_WINDOW_H_

#include "lib/ir.h"

enum {
  TJ_WINDOW_CEIL_MODE = 1u << 0,          // pools: ceil in the output size
  TJ_WINDOW_COUNT_INCLUDE_PAD = 1u << 1,  // avg_pool: pads count
  TJ_WINDOW_MAX_SPATIAL = 3,
};

typedef struct tj_window_t {
  int32_t n;  // spatial axes
  int64_t groups;
  uint32_t flags;
  const int64_t *kernel, *strides, *dilations, *low, *high, *output_padding;
  double p;
} tj_window_t;

// The view of a normalized node's attributes.
static inline tj_window_t tj_window_of(const tj_attrs_t* a) {
  tj_window_t w;
  w.n = a->num_ints >= 2 ? (int32_t)((a->num_ints - 2) / 6) : 0;
  w.groups = a->num_ints ? a->ints[0] : 1;
  w.flags = a->num_ints > 1 ? (uint32_t)a->ints[1] : 0;
  const int64_t* lists = a->num_ints > 2 ? a->ints + 2 : NULL;
  w.kernel = lists;
  w.strides = lists ? lists + w.n : NULL;
  w.dilations = lists ? lists + 2 * w.n : NULL;
  w.low = lists ? lists + 3 * w.n : NULL;
  w.high = lists ? lists + 4 * w.n : NULL;
  w.output_padding = lists ? lists + 5 * w.n : NULL;
  w.p = a->value;
  return w;
}

// Whether conv node |node| of |g| is one the CONV kernel template takes
// whole (issue 15; kir/lower_conv.c, emitted by jit/emit_conv.c on x86 and
// jit/emit_nvptx_conv.c on CUDA): f32, groups 1, 1 to 3 spatial axes,
// every size but the batch a constant; with |grouped| (x86's template,
// grouped: a GEMM a group) also more groups than 1 where a group has more
// than one input channel. Others (depthwise, grouped without |grouped|,
// f16/bf16, symbolic spatial sizes, and a 1x1 kernel with one output
// position, which is one GEMM of M = N) decompose. False for any other op.
// Both backends' native_op hooks ask it, so they keep the same dense
// convs; CUDA decomposes the grouped ones.
bool tj_window_conv_whole(const tj_graph_t* g, uint32_t node, bool grouped);

// Whether conv node |node| of |g| is depthwise: more groups than 1, one
// input channel a group (the window template's, not the CONV template's).
bool tj_window_depthwise(const tj_graph_t* g, uint32_t node);

// Whether node |node| of |g| is one the CONV template's direct window
// variant takes whole (dwbw, issue 15; kir/lower_window.c, emitted by
// jit/emit_window.c on x86 and jit/emit_nvptx_window.c on CUDA): a
// depthwise conv (groups = C, one input channel a group) or a max/avg
// pool, f32, 1 to 3 spatial axes, every size but the batch a constant,
// and with |max_taps| > 0 at most that many taps a window (CUDA unrolls
// them). Others (lp_pool, f16/bf16, symbolic spatial sizes) decompose.
bool tj_window_direct(const tj_graph_t* g, uint32_t node, int64_t max_taps);

#endif  // TJ_LIB_WINDOW_H_
