// kir/lower_gather.c: the indexed reads of the lowering (lower_internal.h
// has the state): gather, gather_elements, gather_nd. A gather's table is read
// from memory (lib/ops.def's MEMORY_OPERANDS: fusion materializes it) through
// the index map of every coordinate but the gathered one; that coordinate is
// the value of the indices at their own map, wrapped (negative counts from the
// end) and clamped into [0, n - 1] (lib/ops.def), times the table's stride
// along the axis: a TJ_KIR_LOAD_AT of the table's buffer. The indices may be
// computed in the same kernel (a cast, an add). An axis that may be empty
// at run time becomes the kernel's run-time check (kir/lower.h), so that no
// point reads outside the table.

#include <string.h>

#include "kir/lower_internal.h"

tj_status_t tj_lower_clamped_offset(tj_lowering_t* lw, uint32_t iv,
                                    tj_dtype_t idt, int64_t extent,
                                    int64_t stride, uint32_t* out) {
  uint32_t n, zero, one, s = 0;
  TJ_RETURN_IF_ERROR(tj_lower_body_dim(lw, extent, &n));
  if (stride != 1) TJ_RETURN_IF_ERROR(tj_lower_body_dim(lw, stride, &s));
  if (!lw->emit) {
    *out = 0;
    return NULL;
  }
  tj_kir_t* k = lw->k;
  uint32_t i = idt == TJ_DTYPE_I64 ? iv : tj_kir_cast(k, TJ_DTYPE_I64, iv);
  zero = tj_kir_const_int(k, TJ_DTYPE_I64, 0);
  one = tj_kir_const_int(k, TJ_DTYPE_I64, 1);
  uint32_t neg = tj_kir_binary(k, TJ_OP_LT, i, zero);
  uint32_t w = tj_kir_where(k, neg, tj_kir_binary(k, TJ_OP_ADD, i, n), i);
  uint32_t hi = tj_kir_binary(k, TJ_OP_SUB, n, one);
  uint32_t c = tj_kir_binary(k, TJ_OP_MAXIMUM,
                             tj_kir_binary(k, TJ_OP_MINIMUM, w, hi), zero);
  *out = stride == 1 ? c : tj_kir_binary(k, TJ_OP_MUL, c, s);
  return NULL;
}

// Records that the kernel reads |node|'s table along an axis of |extent|
// elements: a constant 0 cannot be read at all (the group is a graph
// break; the reference reports the error), a symbolic one is checked at
// run time.
static tj_status_t check_extent(tj_lowering_t* lw, uint32_t node,
                                int64_t extent) {
  if (extent > 0) return NULL;
  if (extent == 0) {
    return tj_unsupported("%s %%%u reads an empty axis",
                          op_name(NODE(lw, node)->op), node);
  }
  if (lw->gather_check != NONE32 && lw->gather_check != node &&
      lw->gather_extent != extent) {
    return tj_unsupported(
        "two gathers along axes of different symbolic sizes in one kernel");
  }
  lw->gather_check = node;
  lw->gather_extent = extent;
  return NULL;
}

// The table's buffer read through |amap| (the gathered coordinate 0) plus
// |offset| elements.
static tj_status_t load_table(tj_lowering_t* lw, uint32_t node,
                              const tj_lower_map_t* amap, uint32_t offset,
                              uint32_t* out) {
  uint32_t table = NODE(lw, node)->operands[0];
  if (lw->in_group[table]) {
    return tj_unsupported("%s %%%u reads its table %%%u from a fused producer",
                          op_name(NODE(lw, node)->op), node, table);
  }
  int64_t strides[MAXV], base;
  TJ_RETURN_IF_ERROR(tj_lower_compose(lw, table, amap, strides, &base));
  if (lw->phase == TJ_KIR_PHASE_ROW) {
    // The gathered row may be anywhere: a per-row value may not read it.
    return tj_unsupported("a per-row value reads %s %%%u",
                          op_name(NODE(lw, node)->op), node);
  }
  uint32_t b, split;
  TJ_RETURN_IF_ERROR(
      tj_lower_add_buffer(lw, table, TJ_KIR_INPUT, strides, base, &b));
  TJ_RETURN_IF_ERROR(tj_lower_split_offset(lw, strides, &split));
  if (lw->emit && split != NONE32) {
    offset = tj_kir_binary(lw->k, TJ_OP_ADD, offset, split);
  }
  *out = lw->emit ? tj_kir_load_at(lw->k, b, offset) : 0;
  return NULL;
}

tj_status_t tj_lower_gather_value(tj_lowering_t* lw, uint32_t node,
                                  const tj_lower_map_t* map, uint32_t* out) {
  const tj_node_t* n = NODE(lw, node);
  uint32_t table = n->operands[0], indices = n->operands[1];
  const tj_node_t* a = NODE(lw, table);
  const tj_node_t* ix = NODE(lw, indices);
  int32_t axis = (int32_t)n->attrs.axis, ir = ix->rank;
  // y = a.shape[:axis] + indices.shape + a.shape[axis+1:].
  tj_lower_map_t amap, imap;
  tj_lower_map_clear(&amap, a->rank);
  tj_lower_map_clear(&imap, ir);
  for (int32_t d = 0; d < a->rank; ++d) {
    if (d == axis) continue;
    int32_t yd = d < axis ? d : d - 1 + ir;
    memcpy(amap.coef[d], map->coef[yd], sizeof(amap.coef[d]));
    amap.off[d] = map->off[yd];
  }
  for (int32_t t = 0; t < ir; ++t) {
    memcpy(imap.coef[t], map->coef[axis + t], sizeof(imap.coef[t]));
    imap.off[t] = map->off[axis + t];
  }
  int64_t extent, ms[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, table, axis, &extent));
  TJ_RETURN_IF_ERROR(check_extent(lw, node, extent));
  TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, table, ms));
  uint32_t iv, offset;
  TJ_RETURN_IF_ERROR(tj_lower_value(lw, indices, &imap, &iv));
  TJ_RETURN_IF_ERROR(
      tj_lower_clamped_offset(lw, iv, ix->dtype, extent, ms[axis], &offset));
  return load_table(lw, node, &amap, offset, out);
}

// ops (issue 15): gather_elements: the table read through |map| with the
// gathered coordinate replaced by the indices' value at |map| itself (y
// has the indices' shape).
tj_status_t tj_lower_gather_elements_value(tj_lowering_t* lw, uint32_t node,
                                           const tj_lower_map_t* map,
                                           uint32_t* out) {
  const tj_node_t* n = NODE(lw, node);
  uint32_t table = n->operands[0], indices = n->operands[1];
  int32_t axis = (int32_t)n->attrs.axis;
  tj_lower_map_t amap = *map;
  memset(amap.coef[axis], 0, sizeof(amap.coef[axis]));
  amap.off[axis] = 0;
  int64_t extent, ms[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, table, axis, &extent));
  TJ_RETURN_IF_ERROR(check_extent(lw, node, extent));
  TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, table, ms));
  uint32_t iv, offset;
  TJ_RETURN_IF_ERROR(tj_lower_value(lw, indices, map, &iv));
  TJ_RETURN_IF_ERROR(tj_lower_clamped_offset(lw, iv, NODE(lw, indices)->dtype,
                                             extent, ms[axis], &offset));
  return load_table(lw, node, &amap, offset, out);
}

// ops (issue 15): gather_nd with b batch dims and k indexed axes: y's
// first q - 1 coordinates pick the row of indices (its first b the batch
// coordinates of the table), the rest are the table's trailing ones; the
// offset sums the k clamped indices times the table's strides.
tj_status_t tj_lower_gather_nd_value(tj_lowering_t* lw, uint32_t node,
                                     const tj_lower_map_t* map, uint32_t* out) {
  const tj_node_t* n = NODE(lw, node);
  uint32_t table = n->operands[0], indices = n->operands[1];
  const tj_node_t* a = NODE(lw, table);
  const tj_node_t* ix = NODE(lw, indices);
  int32_t b = (int32_t)n->attrs.axis, q = ix->rank;
  int32_t k = (int32_t)ix->dims[q - 1];
  tj_lower_map_t amap, imap;
  tj_lower_map_clear(&amap, a->rank);
  for (int32_t d = 0; d < a->rank; ++d) {
    if (d >= b && d < b + k) continue;
    int32_t yd = d < b ? d : q - 1 + d - b - k;
    memcpy(amap.coef[d], map->coef[yd], sizeof(amap.coef[d]));
    amap.off[d] = map->off[yd];
  }
  tj_lower_map_clear(&imap, q);
  for (int32_t t = 0; t < q - 1; ++t) {
    memcpy(imap.coef[t], map->coef[t], sizeof(imap.coef[t]));
    imap.off[t] = map->off[t];
  }
  int64_t ms[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, table, ms));
  uint32_t offset = 0;
  for (int32_t j = 0; j < k; ++j) {
    int64_t extent;
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, table, b + j, &extent));
    TJ_RETURN_IF_ERROR(check_extent(lw, node, extent));
    imap.off[q - 1] = j;
    uint32_t iv, o;
    TJ_RETURN_IF_ERROR(tj_lower_value(lw, indices, &imap, &iv));
    TJ_RETURN_IF_ERROR(
        tj_lower_clamped_offset(lw, iv, ix->dtype, extent, ms[b + j], &o));
    if (lw->emit) offset = j ? tj_kir_binary(lw->k, TJ_OP_ADD, offset, o) : o;
  }
  return load_table(lw, node, &amap, offset, out);
}
