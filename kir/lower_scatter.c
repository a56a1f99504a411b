// kir/lower_scatter.c: scatter_elements and scatter_nd (issue 15), a group
// of the node alone (lib/ops.def's OPAQUE and MEMORY_OPERANDS: every
// operand in memory, dense row-major). Two kernels, run in order:
//
//   1. <name>_copy, POINTWISE over the output's elements: y = data.
//   2. <name>, ROW_REDUCE with one SCAN phase: the space is [rows.., L],
//      where a row is a set of output elements no other row writes and L
//      walks the updates aimed at it, in row-major order of the updates:
//        scatter_elements: rows = the updates' coordinates off the axis,
//          L = the updates' axis (an update only moves along the axis);
//        scatter_nd: rows = the slice data.shape[k:], L = the index tuples
//          (indices.shape[:-1] flattened; every tuple writes every row).
//      Each point loads its index (or its k indices), wraps and clamps it
//      as gather does, and writes its update with TJ_KIR_STORE_AT (plain,
//      or combined with what is there). The SCAN phase is the walk: scalar,
//      one point after the other along L on x86 and a thread per row on
//      NVPTX, so duplicates resolve the same way on every target (the
//      last update wins; add/mul/max/min combine in order, a deterministic
//      float sum). Its yield (a constant 0) is unused: the walk carries no
//      running value.
//
// An indexed axis that is 0 by constant is a graph break (the reference
// reports updates aimed at it); a symbolic one is the kernel's run-time
// check (tj_lowered_kernel_t.nonempty_node), so no write leaves y.

#include <stdio.h>
#include <string.h>

#include "kir/lower_internal.h"

bool tj_lower_is_scatter(tj_op_t op) {
  return op == TJ_OP_SCATTER_ELEMENTS || op == TJ_OP_SCATTER_ND;
}

static tj_op_t combine_op(int64_t reduction) {
  switch (reduction) {
    case TJ_SCATTER_REDUCTION_ADD:
      return TJ_OP_ADD;
    case TJ_SCATTER_REDUCTION_MUL:
      return TJ_OP_MUL;
    case TJ_SCATTER_REDUCTION_MAX:
      return TJ_OP_MAXIMUM;
    case TJ_SCATTER_REDUCTION_MIN:
      return TJ_OP_MINIMUM;
    default:
      return TJ_OP_COUNT_;  // a plain store
  }
}

// Buffers of the kernel under construction: |nodes| with strides (dims)
// over the |rank|-dim space.
typedef struct scatter_bufs_t {
  uint32_t num;
  uint32_t nodes[4];
  tj_kir_role_t roles[4];
  int64_t strides[4][MAXV];
} scatter_bufs_t;

// Creates kernel |name| of |kind| over |space| (dims) with |bufs|, ready
// for its body (a ROW_REDUCE kernel gets its body's SCAN phase opened).
static tj_status_t begin_kernel(tj_lowering_t* lw, tj_kir_kind_t kind,
                                const char* name, int32_t rank,
                                const int64_t* space,
                                const scatter_bufs_t* bufs,
                                tj_lowered_kernel_t* out) {
  lw->num_params = 0;
  TJ_RETURN_IF_ERROR(tj_kir_create(lw->al, kind, name, &lw->k));
  tj_kir_ival_t dims[MAXV], strides[MAXV];
  for (int32_t f = 0; f < rank; ++f) {
    int64_t d;
    TJ_RETURN_IF_ERROR(tj_lower_dim(lw, space[f], &d));
    TJ_RETURN_IF_ERROR(tj_lower_ival(lw, d, &dims[f]));
  }
  tj_kir_set_space(lw->k, rank, dims);
  for (uint32_t b = 0; b < bufs->num; ++b) {
    for (int32_t f = 0; f < rank; ++f) {
      TJ_RETURN_IF_ERROR(tj_lower_ival(lw, bufs->strides[b][f], &strides[f]));
    }
    char bname[32];
    snprintf(bname, sizeof(bname), "%s%u_%u",
             bufs->roles[b] == TJ_KIR_OUTPUT ? "out" : "in", bufs->nodes[b], b);
    tj_kir_add_buffer(lw->k, bname, NODE(lw, bufs->nodes[b])->dtype,
                      bufs->roles[b], strides);
    out->buffer_nodes[b] = bufs->nodes[b];
    out->buffer_offset_dims[b] = 0;
  }
  out->num_buffers = bufs->num;
  out->nonempty_node = NONE32;
  if (kind == TJ_KIR_ROW_REDUCE)
    tj_kir_begin_scan(lw->k, TJ_KIR_REDUCE_SUM, TJ_DTYPE_I64, false);
  return lw->k->error ? tj_status_clone(lw->k->error) : NULL;
}

static tj_status_t end_kernel(tj_lowering_t* lw, tj_lowered_kernel_t* out) {
  tj_status_t status = tj_kir_finalize(lw->k);
  if (status) return tj_status_annotate(status, "lower: invalid kernel");
  out->num_params = lw->num_params;
  memcpy(out->param_dims, lw->params, sizeof(int64_t) * lw->num_params);
  out->kernel = lw->k;
  lw->k = NULL;
  return NULL;
}

// Kernel 1: y = data over the output's elements, one flat dim.
static tj_status_t copy_kernel(tj_lowering_t* lw, uint32_t yn, const char* name,
                               tj_lowered_kernel_t* out) {
  const tj_node_t* y = NODE(lw, yn);
  int64_t numel = 1;
  for (int32_t d = 0; d < y->rank; ++d) {
    int64_t size;
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, yn, d, &size));
    TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, numel, size, &numel));
  }
  scatter_bufs_t bufs = {
      2, {y->operands[0], yn}, {TJ_KIR_INPUT, TJ_KIR_OUTPUT}, {{1}, {1}}};
  TJ_RETURN_IF_ERROR(
      begin_kernel(lw, TJ_KIR_POINTWISE, name, 1, &numel, &bufs, out));
  tj_kir_store(lw->k, 1, tj_kir_load(lw->k, 0));
  return end_kernel(lw, out);
}

// Kernel 2: the walk. Buffers: 0 indices, 1 updates, 2 the output.
static tj_status_t walk_kernel(tj_lowering_t* lw, uint32_t yn, const char* name,
                               tj_lowered_kernel_t* out) {
  const tj_node_t* y = NODE(lw, yn);
  const uint32_t xn = y->operands[1], un = y->operands[2];
  const tj_node_t* ix = NODE(lw, xn);
  const bool nd = y->op == TJ_OP_SCATTER_ND;
  const int32_t r = y->rank;
  int64_t sx[TJ_MAX_RANK], su[TJ_MAX_RANK], sy[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, xn, sx));
  TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, un, su));
  TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, yn, sy));
  scatter_bufs_t bufs;
  memset(&bufs, 0, sizeof(bufs));
  bufs.num = 3;
  bufs.nodes[0] = xn;
  bufs.nodes[1] = un;
  bufs.nodes[2] = yn;
  bufs.roles[2] = TJ_KIR_OUTPUT;
  int64_t space[MAXV];
  int32_t rank = 0;
  // The indexed axes of y: [axis] or [0, k); their extents must not be 0.
  int32_t first, k;
  if (!nd) {
    first = (int32_t)y->attrs.axis;
    k = 1;
    for (int32_t d = 0; d < r; ++d) {
      if (d == first) continue;
      TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, un, d, &space[rank]));
      bufs.strides[0][rank] = sx[d];
      bufs.strides[1][rank] = su[d];
      bufs.strides[2][rank] = sy[d];
      ++rank;
    }
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, un, first, &space[rank]));
    bufs.strides[0][rank] = sx[first];
    bufs.strides[1][rank] = su[first];
    ++rank;
  } else {
    first = 0;
    k = (int32_t)ix->dims[ix->rank - 1];
    for (int32_t d = k; d < r; ++d) {
      TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, yn, d, &space[rank]));
      bufs.strides[1][rank] = su[ix->rank - 1 + d - k];
      bufs.strides[2][rank] = sy[d];
      ++rank;
    }
    int64_t tuples = 1, slice = k < r ? sy[k - 1] : 1;
    for (int32_t d = 0; d + 1 < ix->rank; ++d) {
      int64_t size;
      TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, xn, d, &size));
      TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, tuples, size, &tuples));
    }
    space[rank] = tuples;
    bufs.strides[0][rank] = k;
    bufs.strides[1][rank] = slice;
    ++rank;
  }
  int64_t extent = 1;
  for (int32_t j = 0; j < k; ++j) {
    int64_t size;
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, yn, first + j, &size));
    TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, extent, size, &extent));
  }
  if (extent == 0) {
    return tj_unsupported("%s %%%u writes into an empty axis", op_name(y->op),
                          yn);
  }
  TJ_RETURN_IF_ERROR(
      begin_kernel(lw, TJ_KIR_ROW_REDUCE, name, rank, space, &bufs, out));
  tj_kir_t* kk = lw->k;
  lw->emit = true;
  uint32_t offset = TJ_KIR_NONE;
  for (int32_t j = 0; j < k; ++j) {
    uint32_t iv =
        nd ? tj_kir_load_at(kk, 0, tj_kir_const_int(kk, TJ_DTYPE_I64, j))
           : tj_kir_load(kk, 0);
    int64_t size;
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, yn, first + j, &size));
    uint32_t o;
    TJ_RETURN_IF_ERROR(
        tj_lower_clamped_offset(lw, iv, ix->dtype, size, sy[first + j], &o));
    offset = j == 0 ? o : tj_kir_binary(kk, TJ_OP_ADD, offset, o);
  }
  tj_kir_store_at(kk, 2, offset, tj_kir_load(kk, 1),
                  combine_op(y->attrs.ints[0]));
  tj_kir_yield(kk, tj_kir_const_int(kk, TJ_DTYPE_I64, 0));
  TJ_RETURN_IF_ERROR(end_kernel(lw, out));
  if (extent < 0) {
    out->nonempty_node = yn;
    out->nonempty_extent = extent;
  }
  return NULL;
}

tj_status_t tj_lower_scatter_kernels(tj_lowering_t* lw, const char* name,
                                     tj_lowered_kernel_t* out, uint32_t max_out,
                                     uint32_t* out_count) {
  *out_count = 0;
  if (max_out < 2) return tj_unsupported("a scatter needs two kernels");
  const uint32_t yn = lw->grp->anchor;
  char copy_name[96];
  snprintf(copy_name, sizeof(copy_name), "%s_copy", name);
  TJ_RETURN_IF_ERROR(copy_kernel(lw, yn, copy_name, &out[0]));
  *out_count = 1;
  TJ_RETURN_IF_ERROR(walk_kernel(lw, yn, name, &out[1]));
  *out_count = 2;
  return NULL;
}
