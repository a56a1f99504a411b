// kir/lower_conv.c: a conv node left whole by decompose (a target with a
// native conv kernel, tj_pass_ctx_t.native_op: x86, groups == 1 or grouped
// with more than one input channel a group; CUDA, groups == 1) on the
// CONV template. The group is the node alone: x, w and the bias are
// memory, the output is written row-major over the space [N, O, out
// spatial..]. Only N may be symbolic: the window, C, O and the spatial
// sizes are constants of the kernel (jit/emit_conv.c specializes on them).
// A conv alone in its group is built here directly (its one MAP phase
// empty); a conv with an elementwise epilogue (relu, clip, a residual
// add: lib/passes/fuse.c) goes through the generic lowering with
// tj_lower_body_conv, its epilogue the MAP phase as a GEMM's is.

#include <stdio.h>
#include <string.h>

#include "kir/lower_internal.h"
#include "lib/dtype.h"
#include "lib/shape.h"
#include "lib/window.h"

// The window of conv |yn| and its output space [N, O, out spatial..].
static tj_status_t conv_window(tj_lowering_t* lw, uint32_t yn,
                               tj_kir_conv_t* out_cv, int64_t* space) {
  const tj_node_t* y = NODE(lw, yn);
  const uint32_t xn = y->operands[0], wn = y->operands[1];
  const tj_node_t* x = NODE(lw, xn);
  const tj_node_t* w = NODE(lw, wn);
  const tj_window_t win = tj_window_of(&y->attrs);
  const int32_t r = y->rank, ns = r - 2;
  if (y->dtype != TJ_DTYPE_F32 || x->dtype != TJ_DTYPE_F32 ||
      w->dtype != TJ_DTYPE_F32 || win.groups < 1 || win.groups > INT32_MAX ||
      ns < 1 || ns > TJ_WINDOW_MAX_SPATIAL || win.n != ns || x->rank != r ||
      w->rank != r) {
    return tj_unsupported(
        "conv %%%u (%s, groups %lld, rank %d): the conv template takes f32 "
        "with 1 to 3 spatial axes",
        yn, tj_dtype_name(y->dtype), (long long)win.groups, r);
  }
  tj_kir_conv_t cv;
  memset(&cv, 0, sizeof(cv));  // padding too: kernels compare by bytes
  cv.spatial = ns;
  for (int32_t i = 0; i < 3; ++i) {
    cv.in[i] = cv.kernel[i] = cv.stride[i] = cv.dilation[i] = 1;
  }
  int64_t c, o;
  TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, xn, 1, &c));
  TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, wn, 0, &o));
  bool constant = tj_dim_is_const(c) && tj_dim_is_const(o);
  TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, yn, 0, &space[0]));
  space[1] = o;
  for (int32_t i = 0; i < ns; ++i) {
    const int32_t j = 3 - ns + i;
    int64_t in, ker, yd;
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, xn, 2 + i, &in));
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, wn, 2 + i, &ker));
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, yn, 2 + i, &yd));
    constant = constant && tj_dim_is_const(in) && tj_dim_is_const(ker) &&
               tj_dim_is_const(yd);
    cv.in[j] = in;
    cv.kernel[j] = ker;
    cv.stride[j] = win.strides ? win.strides[i] : 1;
    cv.dilation[j] = win.dilations ? win.dilations[i] : 1;
    cv.low[j] = win.low ? win.low[i] : 0;
    space[2 + i] = yd;
  }
  if (!constant || c < 1) {
    return tj_unsupported(
        "conv %%%u: the conv template needs constant channels and spatial "
        "sizes (only the batch may be symbolic)",
        yn);
  }
  // Grouped (issue 15): group g's output channels read its c / G input
  // channels, the weight [O, c / G, taps..] rows as one group's.
  if (c % win.groups != 0 || o % win.groups != 0) {
    return tj_unsupported(
        "conv %%%u: %lld groups do not divide %lld input and %lld output "
        "channels",
        yn, (long long)win.groups, (long long)c, (long long)o);
  }
  cv.c = c / win.groups;
  cv.groups = (int32_t)win.groups;
  *out_cv = cv;
  return NULL;
}

// The CONV kernel over |space| with the window |cv| (both the dense conv's
// and the window variant's): x, w, out and the bias, each row-major, as
// its buffers in that order; a node of TJ_NODE_NONE (a pool's weight, a
// missing bias) has no buffer. Fills |out| (its kernel, params, buffers;
// not its dim table).
tj_status_t tj_lower_conv_finish(tj_lowering_t* lw, const char* name,
                                 const uint32_t nodes[4], const int64_t* space,
                                 const tj_kir_conv_t* cv,
                                 tj_lowered_kernel_t* out) {
  const int32_t r = NODE(lw, nodes[2])->rank;
  int64_t strides[3][TJ_MAX_RANK];
  for (int32_t bi = 0; bi < 3; ++bi) {
    if (nodes[bi] != TJ_NODE_NONE)
      TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, nodes[bi], strides[bi]));
  }
  lw->num_params = 0;
  TJ_RETURN_IF_ERROR(tj_kir_create(lw->al, TJ_KIR_CONV, name, &lw->k));
  tj_kir_ival_t dims[TJ_KIR_MAX_RANK], st[4][TJ_KIR_MAX_RANK];
  for (int32_t f = 0; f < r; ++f) {
    TJ_RETURN_IF_ERROR(tj_lower_ival(lw, space[f], &dims[f]));
    for (int32_t bi = 0; bi < 3; ++bi) {
      st[bi][f] = tj_kir_constant(0);
      if (nodes[bi] != TJ_NODE_NONE)
        TJ_RETURN_IF_ERROR(tj_lower_ival(lw, strides[bi][f], &st[bi][f]));
    }
    st[3][f] = tj_kir_constant(f == 1 ? 1 : 0);  // the bias: one per channel
  }
  tj_kir_set_space(lw->k, r, dims);
  static const tj_kir_role_t roles[4] = {TJ_KIR_CONV_X, TJ_KIR_CONV_W,
                                         TJ_KIR_OUTPUT, TJ_KIR_CONV_BIAS};
  static const char* const names[4] = {"x", "w", "out", "b"};
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
  tj_kir_set_conv(lw->k, cv);
  TJ_RETURN_IF_ERROR(tj_kir_finalize(lw->k));
  out->num_params = lw->num_params;
  memcpy(out->param_dims, lw->params, sizeof(int64_t) * lw->num_params);
  out->nonempty_node = NONE32;
  out->kernel = lw->k;
  lw->k = NULL;
  return NULL;
}

tj_status_t tj_lower_conv_kernel(tj_lowering_t* lw, const char* name,
                                 tj_lowered_kernel_t* out) {
  const uint32_t yn = lw->grp->anchor;
  const tj_node_t* y = NODE(lw, yn);
  const uint32_t xn = y->operands[0], wn = y->operands[1];
  const uint32_t bn = y->num_operands > 2 ? y->operands[2] : TJ_NODE_NONE;
  tj_kir_conv_t cv;
  int64_t space[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(conv_window(lw, yn, &cv, space));
  const uint32_t nodes[4] = {xn, wn, yn, bn};
  return tj_lower_conv_finish(lw, name, nodes, space, &cv, out);
}

// A conv with an epilogue (lib/passes/fusion.h, OPAQUE): the generic
// lowering (kir/lower.c) over the conv's output space, one virtual dim per
// space dim (none merged or dropped: the template indexes them), with x, w
// and the bias added here and the epilogue as the MAP phase, the conv's
// value its accumulator (TJ_KIR_ACC, the bias added).
tj_status_t tj_lower_body_conv(tj_lowering_t* lw) {
  const uint32_t yn = lw->mm;
  const tj_node_t* y = NODE(lw, yn);
  const int32_t r = y->rank;
  tj_kir_conv_t cv;
  int64_t space[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(conv_window(lw, yn, &cv, space));
  if (lw->vrank != r) {
    return tj_unsupported("conv %%%u: an epilogue that refines its space", yn);
  }
  int64_t st[TJ_MAX_RANK];
  const tj_kir_role_t roles[3] = {TJ_KIR_CONV_X, TJ_KIR_CONV_W,
                                  TJ_KIR_CONV_BIAS};
  for (uint32_t i = 0; i < 3 && i < y->num_operands; ++i) {
    const uint32_t o = y->operands[i];
    if (o == TJ_NODE_NONE) continue;
    if (i < 2) {
      TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, o, st));
    } else {
      for (int32_t f = 0; f < r; ++f) st[f] = f == 1 ? 1 : 0;
    }
    uint32_t idx;
    TJ_RETURN_IF_ERROR(tj_lower_add_buffer(lw, o, roles[i], st, 0, &idx));
  }
  if (lw->emit) tj_kir_set_conv(lw->k, &cv);
  tj_lower_map_t map;
  TJ_RETURN_IF_ERROR(tj_lower_root_map(lw, &map));
  tj_lower_begin_phase(lw, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM);
  return tj_lower_store_outputs(lw, &map);
}
