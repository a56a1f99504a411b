// lib/window.c: questions about window ops that more than one backend asks.

#include "lib/window.h"

#include "lib/shape.h"

bool tj_window_depthwise(const tj_graph_t* g, uint32_t node) {
  const tj_node_t* n = &g->nodes[node];
  if (n->op != TJ_OP_CONV) return false;
  const tj_window_t win = tj_window_of(&n->attrs);
  return win.groups > 1 && g->nodes[n->operands[0]].dims[1] == win.groups;
}

bool tj_window_conv_whole(const tj_graph_t* g, uint32_t node, bool grouped) {
  const tj_node_t* n = &g->nodes[node];
  if (n->op != TJ_OP_CONV) return false;
  const tj_node_t* x = &g->nodes[n->operands[0]];
  const tj_node_t* w = &g->nodes[n->operands[1]];
  const tj_window_t win = tj_window_of(&n->attrs);
  const bool groups_ok =
      win.groups == 1 ||
      (grouped && win.groups > 1 && win.groups <= INT32_MAX &&
       tj_dim_is_const(x->dims[1]) && x->dims[1] % win.groups == 0 &&
       x->dims[1] / win.groups > 1 && tj_dim_is_const(w->dims[0]) &&
       w->dims[0] % win.groups == 0);
  if (n->dtype != TJ_DTYPE_F32 || x->dtype != TJ_DTYPE_F32 ||
      w->dtype != TJ_DTYPE_F32 || !groups_ok || n->rank < 3 || n->rank > 5 ||
      win.n != n->rank - 2 || x->rank != n->rank || w->rank != n->rank) {
    return false;
  }
  if (n->num_operands > 2 && n->operands[2] != TJ_NODE_NONE &&
      g->nodes[n->operands[2]].dtype != TJ_DTYPE_F32) {
    return false;
  }
  for (int32_t d = 1; d < n->rank; ++d) {
    if (!tj_dim_is_const(x->dims[d]) || !tj_dim_is_const(w->dims[d]) ||
        !tj_dim_is_const(n->dims[d]) || x->dims[d] > INT32_MAX / 2) {
      return false;
    }
  }
  // A 1x1 kernel with one output position (squeeze-excite's FCs after
  // its global pool) decomposes to one GEMM of M = N (lib/passes/decompose.c):
  // the template would multiply a pixel block of one pixel per image, a
  // tile with 1 of its 64 columns used (MobileNetV3's 144 -> 576 at batch
  // 32: 1.5 ms).
  int64_t taps = 1, plane = 1;
  for (int32_t d = 2; d < n->rank; ++d) {
    taps *= w->dims[d];
    plane *= n->dims[d];
  }
  if (taps == 1 && plane == 1) return false;
  return tj_dim_is_const(w->dims[0]) && x->dims[1] >= 1;
}

bool tj_window_direct(const tj_graph_t* g, uint32_t node, int64_t max_taps) {
  const tj_node_t* n = &g->nodes[node];
  if (n->op != TJ_OP_CONV && n->op != TJ_OP_MAX_POOL && n->op != TJ_OP_AVG_POOL)
    return false;
  const tj_node_t* x = &g->nodes[n->operands[0]];
  const tj_window_t win = tj_window_of(&n->attrs);
  if (n->dtype != TJ_DTYPE_F32 || x->dtype != TJ_DTYPE_F32 || n->rank < 3 ||
      n->rank > 5 || win.n != n->rank - 2 || x->rank != n->rank ||
      win.kernel == NULL) {
    return false;
  }
  if (n->op == TJ_OP_CONV) {
    const tj_node_t* w = &g->nodes[n->operands[1]];
    if (win.groups < 2 || x->dims[1] != win.groups ||
        w->dtype != TJ_DTYPE_F32 || w->rank != n->rank || w->dims[1] != 1)
      return false;
    if (n->num_operands > 2 && n->operands[2] != TJ_NODE_NONE &&
        g->nodes[n->operands[2]].dtype != TJ_DTYPE_F32)
      return false;
  }
  for (int32_t d = 1; d < n->rank; ++d) {
    // Lane coordinates are i32.
    if (!tj_dim_is_const(x->dims[d]) || !tj_dim_is_const(n->dims[d]) ||
        x->dims[d] > INT32_MAX / 4 || n->dims[d] > INT32_MAX / 4)
      return false;
  }
  int64_t taps = 1;
  for (int32_t i = 0; i < win.n; ++i) {
    if (win.kernel[i] > 1024 || win.strides[i] > 1024 ||
        win.dilations[i] > 1024 || win.low[i] > 1024 || win.high[i] > 1024)
      return false;
    taps *= win.kernel[i];
  }
  if (max_taps > 0 && taps > max_taps) return false;
  return x->dims[1] >= 1 && n->dims[1] % x->dims[1] == 0;
}
