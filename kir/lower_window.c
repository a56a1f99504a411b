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
  int64_t sx[TJ_MAX_RANK], sw[TJ_MAX_RANK], so[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, xn, sx));
  if (conv) TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, wn, sw));
  TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, yn, so));
  lw->num_params = 0;
  TJ_RETURN_IF_ERROR(tj_kir_create(lw->al, TJ_KIR_CONV, name, &lw->k));
  tj_kir_ival_t dims[TJ_KIR_MAX_RANK], st[4][TJ_KIR_MAX_RANK];
  for (int32_t f = 0; f < r; ++f) {
    TJ_RETURN_IF_ERROR(tj_lower_ival(lw, space[f], &dims[f]));
    TJ_RETURN_IF_ERROR(tj_lower_ival(lw, sx[f], &st[0][f]));
    st[1][f] = tj_kir_constant(0);
    if (conv) TJ_RETURN_IF_ERROR(tj_lower_ival(lw, sw[f], &st[1][f]));
    TJ_RETURN_IF_ERROR(tj_lower_ival(lw, so[f], &st[2][f]));
    st[3][f] = tj_kir_constant(f == 1 ? 1 : 0);
  }
  tj_kir_set_space(lw->k, r, dims);
  static const tj_kir_role_t roles[4] = {TJ_KIR_CONV_X, TJ_KIR_CONV_W,
                                         TJ_KIR_OUTPUT, TJ_KIR_CONV_BIAS};
  static const char* const names[4] = {"x", "w", "out", "b"};
  const uint32_t nodes[4] = {xn, wn, yn, bn};
  uint32_t nbuf = 0;
  for (uint32_t bi = 0; bi < 4; ++bi) {
    if (nodes[bi] == TJ_NODE_NONE) continue;
    char bname[32];
    snprintf(bname, sizeof(bname), "%s%u_%u", names[bi], nodes[bi], bi);
    tj_kir_add_buffer(lw->k, bname, NODE(lw, nodes[bi])->dtype, roles[bi],
                      st[bi]);
    out->buffer_nodes[nbuf] = nodes[bi];
    out->buffer_offset_dims[nbuf] = 0;
    ++nbuf;
  }
  out->num_buffers = nbuf;
  tj_kir_set_conv(lw->k, &cv);
  TJ_RETURN_IF_ERROR(tj_kir_finalize(lw->k));
  out->num_params = lw->num_params;
  memcpy(out->param_dims, lw->params, sizeof(int64_t) * lw->num_params);
  out->nonempty_node = NONE32;
  out->kernel = lw->k;
  lw->k = NULL;
  return NULL;
}
