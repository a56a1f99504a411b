// kir/lower_reduce.c: reduction groups on the ROW_REDUCE template. Each
// reduction of the group is a REDUCE phase over the row (the reduced dims
// merged into one, last; reduced axes that are not one strided axis are
// iterated as their product, each read computing its coordinates:
// red_split in lower_internal.h); a later read of a reduction is its row result
// (divided by the count for mean); outputs shaped like the reduction's
// input are stored by a MAP phase, the others (the reductions, per-row
// values) by a ROW phase.

#include <string.h>

#include "kir/lower_internal.h"
#include "lib/dtype.h"

static tj_kir_reduce_t reduce_of(tj_op_t op) {
  switch (op) {
    case TJ_OP_MAX:
      return TJ_KIR_REDUCE_MAX;
    case TJ_OP_MIN:
      return TJ_KIR_REDUCE_MIN;
    case TJ_OP_PROD:
      return TJ_KIR_REDUCE_PROD;
    case TJ_OP_ARGMAX:
    case TJ_OP_ARGMIN:  // of the order-reversed values (below)
      return TJ_KIR_REDUCE_ARGMAX;
    default:
      return TJ_KIR_REDUCE_SUM;
  }
}

bool tj_lower_is_reduction(tj_op_t op) {
  return tj_op_info(op)->kind == TJ_OP_KIND_REDUCTION;
}

// The row result of reduction |node| (a mean divides by the count).
tj_status_t tj_lower_row_value(tj_lowering_t* lw, uint32_t node,
                               uint32_t* out) {
  uint32_t phase = lw->red_phase[node];
  if (phase == NONE32) {
    return tj_internal("lower: %%%u is read before its reduction ran", node);
  }
  if (!lw->emit) {
    *out = 0;
    return NULL;
  }
  const tj_node_t* n = NODE(lw, node);
  uint32_t v = tj_kir_row(lw->k, phase);
  if (n->op != TJ_OP_MEAN) {
    *out = v;
    return NULL;
  }
  tj_dtype_t ct = n->dtype == TJ_DTYPE_F64 ? TJ_DTYPE_F64 : TJ_DTYPE_F32;
  if (ct != n->dtype) v = tj_kir_cast(lw->k, ct, v);
  uint32_t count;
  if (lw->red_count >= 0) {
    count = tj_kir_const_float(lw->k, ct, (double)lw->red_count);
  } else {
    TJ_RETURN_IF_ERROR(tj_lower_body_dim(lw, lw->red_count, &count));
    count = tj_kir_cast(lw->k, ct, count);
  }
  v = tj_kir_binary(lw->k, TJ_OP_DIV, v, count);
  if (ct != n->dtype) v = tj_kir_cast(lw->k, n->dtype, v);
  *out = v;
  return NULL;
}

//===--- scans (ops3, issue 15) ---===//

bool tj_lower_is_scan(tj_op_t op) {
  return op == TJ_OP_CUMSUM || op == TJ_OP_CUMPROD;
}

// The scan at the current point: ^0 (the combine of the elements before
// it in scan order) combined with the operand's value there, or ^0 alone
// when exclusive. The operand's value is what the phase yields.
tj_status_t tj_lower_scan_value(tj_lowering_t* lw, uint32_t node,
                                const tj_lower_map_t* map, uint32_t* out) {
  const tj_node_t* n = NODE(lw, node);
  if (lw->kind != TJ_KIR_ROW_REDUCE || lw->phase != TJ_KIR_PHASE_SCAN ||
      node != lw->grp->anchor) {
    return tj_unsupported("%s (node %%%u) outside its own scan kernel",
                          op_name(n->op), node);
  }
  uint32_t x;
  TJ_RETURN_IF_ERROR(tj_lower_value(lw, n->operands[0], map, &x));
  if (!lw->emit) {
    *out = 0;
    return NULL;
  }
  uint32_t prefix = tj_kir_row(lw->k, 0);
  lw->scan_yield = x;
  *out =
      n->attrs.ints[0]
          ? prefix
          : tj_kir_binary(lw->k, n->op == TJ_OP_CUMSUM ? TJ_OP_ADD : TJ_OP_MUL,
                          prefix, x);
  return NULL;
}

tj_status_t tj_lower_body_scan(tj_lowering_t* lw) {
  tj_lower_map_t fmap;
  TJ_RETURN_IF_ERROR(tj_lower_root_map(lw, &fmap));
  const tj_node_t* n = NODE(lw, lw->grp->anchor);
  if (lw->grp->num_outputs != 1 || lw->grp->outputs[0] != lw->grp->anchor) {
    return tj_internal("lower: a scan group writes only its scan");
  }
  lw->phase = TJ_KIR_PHASE_SCAN;
  lw->num_memo = 0;
  lw->scan_yield = NONE32;
  if (lw->emit) {
    tj_kir_begin_scan(
        lw->k, n->op == TJ_OP_CUMSUM ? TJ_KIR_REDUCE_SUM : TJ_KIR_REDUCE_PROD,
        n->dtype, n->attrs.ints[1] != 0);
  }
  TJ_RETURN_IF_ERROR(tj_lower_store_outputs(lw, &fmap));
  if (lw->emit) tj_kir_yield(lw->k, lw->scan_yield);
  return NULL;
}

static bool same_dims(tj_lowering_t* lw, uint32_t node, int32_t rank,
                      const int64_t* dims) {
  const tj_node_t* n = NODE(lw, node);
  if (n->rank != rank) return false;
  for (int32_t d = 0; d < rank; ++d) {
    int64_t v;
    if (tj_lower_dim(lw, n->dims[d], &v) || v != dims[d]) return false;
  }
  return true;
}

tj_status_t tj_lower_body_reduce(tj_lowering_t* lw) {
  tj_lower_map_t fmap, keep, flat;
  TJ_RETURN_IF_ERROR(tj_lower_root_map(lw, &fmap));
  keep = fmap;
  tj_lower_map_clear(&flat, 0);
  for (int32_t d = 0; d < lw->root_rank; ++d) {
    if (lw->root_reduced[d]) {
      memset(keep.coef[d], 0, sizeof(keep.coef[d]));
    } else {
      memcpy(flat.coef[flat.rank], fmap.coef[d], sizeof(fmap.coef[d]));
      flat.off[flat.rank++] = fmap.off[d];
    }
  }
  const tj_group_t* grp = lw->grp;
  uint32_t phase = 0;
  for (uint32_t j = 0; j < grp->num_nodes; ++j) {
    uint32_t r = grp->nodes[j];
    const tj_node_t* n = NODE(lw, r);
    if (!tj_lower_is_reduction(n->op)) continue;
    tj_lower_begin_phase(lw, TJ_KIR_PHASE_REDUCE, reduce_of(n->op));
    uint32_t v;
    TJ_RETURN_IF_ERROR(tj_lower_value(lw, n->operands[0], &fmap, &v));
    if (lw->emit && n->op == TJ_OP_ARGMIN) {
      // The first min of x is the first max of an order-reversing map of
      // x that keeps NaN a NaN: -x for floats, ~x = -x - 1 for integers
      // (no overflow at the lowest value). Every target's ARGMAX serves.
      v = tj_kir_unary(lw->k,
                       tj_dtype_is_float(NODE(lw, n->operands[0])->dtype)
                           ? TJ_OP_NEG
                           : TJ_OP_BITWISE_NOT,
                       v);
    }
    if (lw->emit) tj_kir_yield(lw->k, v);
    lw->red_phase[r] = phase++;
  }
  bool any_full = false, any_row = false;
  for (uint32_t j = 0; j < grp->num_outputs; ++j) {
    bool full = same_dims(lw, grp->outputs[j], lw->root_rank, lw->full_dims);
    any_full |= full;
    any_row |= !full;
  }
  if (any_full) {
    tj_lower_begin_phase(lw, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM);
    for (uint32_t j = 0; j < grp->num_outputs; ++j) {
      uint32_t o = grp->outputs[j];
      if (!same_dims(lw, o, lw->root_rank, lw->full_dims)) continue;
      TJ_RETURN_IF_ERROR(tj_lower_store(lw, o, &fmap));
    }
  }
  if (any_row) {
    tj_lower_begin_phase(lw, TJ_KIR_PHASE_ROW, TJ_KIR_REDUCE_SUM);
    for (uint32_t j = 0; j < grp->num_outputs; ++j) {
      uint32_t o = grp->outputs[j];
      if (same_dims(lw, o, lw->root_rank, lw->full_dims)) continue;
      const tj_node_t* n = NODE(lw, o);
      const tj_lower_map_t* map = n->rank == keep.rank   ? &keep
                                  : n->rank == flat.rank ? &flat
                                                         : NULL;
      if (!map) {
        return tj_unsupported(
            "output %%%u is shaped like neither the "
            "reduction's input nor its result",
            o);
      }
      TJ_RETURN_IF_ERROR(tj_lower_store(lw, o, map));
    }
  }
  return NULL;
}
