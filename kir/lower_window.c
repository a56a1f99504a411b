// kir/lower_window.c (dwbw, issue 15): a depthwise conv (one input channel
// a group, f32) or a max/avg pool left whole by decompose (the x86
// backend's native_op) on the CONV template's direct window variant
// (tj_kir_conv_t.window, jit/emit_window.c). The group is the node alone:
// x, w and the bias are memory, the output is written row-major over the
// space [N, O, out spatial..]. Only N may be symbolic.

#include <stdio.h>
#include <string.h>

#include "kir/lower_internal.h"
#include "lib/dtype.h"
#include "lib/shape.h"
#include "lib/window.h"

tj_status_t tj_lower_window_kernel(tj_lowering_t* lw, const char* name,
                                   tj_lowered_kernel_t* out) {
  const uint32_t yn = lw->grp->anchor;
  const tj_node_t* y = NODE(lw, yn);
  const bool conv = y->op == TJ_OP_CONV;
  const uint32_t xn = y->operands[0];
  const uint32_t wn = conv ? y->operands[1] : TJ_NODE_NONE;
  const uint32_t bn =
      conv && y->num_operands > 2 ? y->operands[2] : TJ_NODE_NONE;
  const tj_node_t* x = NODE(lw, xn);
  const tj_window_t win = tj_window_of(&y->attrs);
  const int32_t r = y->rank, ns = r - 2;
  bool ok = y->dtype == TJ_DTYPE_F32 && x->dtype == TJ_DTYPE_F32 && ns >= 1 &&
            ns <= TJ_WINDOW_MAX_SPATIAL && win.n == ns && x->rank == r &&
            win.kernel != NULL;
  if (ok && conv) {
    const tj_node_t* w = NODE(lw, wn);
    ok = w->dtype == TJ_DTYPE_F32 && w->rank == r && w->dims[1] == 1 &&
         x->dims[1] == win.groups &&
         (bn == TJ_NODE_NONE || NODE(lw, bn)->dtype == TJ_DTYPE_F32);
  }
  if (!ok) {
    return tj_unsupported(
        "%s %%%u (%s, groups %lld, rank %d): the window kernel takes f32 "
        "pools and depthwise convs (one input channel a group) over 1 to 3 "
        "spatial axes",
        tj_op_info(y->op)->name, yn, tj_dtype_name(y->dtype),
        (long long)win.groups, r);
  }
  tj_kir_conv_t cv;
  memset(&cv, 0, sizeof(cv));  // padding too: kernels compare by bytes
  cv.spatial = ns;
  cv.c = 1;
  if (conv) {
    cv.window = TJ_KIR_WINDOW_DEPTHWISE;
  } else if (y->op == TJ_OP_MAX_POOL) {
    cv.window = TJ_KIR_WINDOW_MAX;
  } else {
    cv.window = win.flags & TJ_WINDOW_COUNT_INCLUDE_PAD ? TJ_KIR_WINDOW_AVG_PAD
                                                        : TJ_KIR_WINDOW_AVG;
  }
  for (int32_t i = 0; i < 3; ++i) {
    cv.in[i] = cv.kernel[i] = cv.stride[i] = cv.dilation[i] = 1;
  }
  int64_t c, o;
  TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, xn, 1, &c));
  TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, yn, 1, &o));
  bool constant = tj_dim_is_const(c) && tj_dim_is_const(o);
  int64_t space[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, yn, 0, &space[0]));
  space[1] = o;
  for (int32_t i = 0; i < ns; ++i) {
    const int32_t j = 3 - ns + i;
    int64_t in, yd;
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, xn, 2 + i, &in));
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, yn, 2 + i, &yd));
    constant = constant && tj_dim_is_const(in) && tj_dim_is_const(yd);
    cv.in[j] = in;
    cv.kernel[j] = win.kernel[i];
    cv.stride[j] = win.strides ? win.strides[i] : 1;
    cv.dilation[j] = win.dilations ? win.dilations[i] : 1;
    cv.low[j] = win.low ? win.low[i] : 0;
    cv.high[j] = win.high ? win.high[i] : 0;
    space[2 + i] = yd;
  }
  if (!constant || c < 1 || o % c != 0) {
    return tj_unsupported(
        "%s %%%u: the window kernel needs constant channels and spatial "
        "sizes (only the batch may be symbolic), output channels a multiple "
        "of the input's",
        tj_op_info(y->op)->name, yn);
  }
  const uint32_t nodes[4] = {xn, wn, yn, bn};
  return tj_lower_conv_finish(lw, name, nodes, space, &cv, out);
}
