// kir/lower_pointwise.c: the evaluation walk shared by every template and
// the POINTWISE template itself. A node's value at a point is computed from
// its operands' values at their mapped points (kir/lower_index.c), memoized
// per phase; values of nodes outside the group are loads of their storage,
// one-element constants become immediates, iota becomes index arithmetic.
// Outputs are stored after every value of the point is computed (in-place
// outputs must not be read after a store).

#include <string.h>

#include "kir/lower_internal.h"
#include "lib/dtype.h"

//===--- values ---===//

static bool numel_is_one(const tj_node_t* n) {
  for (int32_t d = 0; d < n->rank; ++d) {
    if (n->dims[d] != 1) return false;
  }
  return true;
}

uint32_t tj_lower_const(tj_lowering_t* lw, tj_dtype_t dtype, const void* data) {
  if (!lw->emit) return 0;
  if (tj_dtype_is_float(dtype)) {
    return tj_kir_const_float(lw->k, dtype, tj_load_f64(dtype, data, 0));
  }
  if (tj_dtype_is_f8(dtype)) {  // float8 constants are their bits
    return tj_kir_const_int(lw->k, dtype, *(const uint8_t*)data);
  }
  return tj_kir_const_int(lw->k, dtype, tj_load_i64(dtype, data, 0));
}

// Loads memory-resident |node| at |map|, the coordinates of |view| (|node|
// itself, or a reshape of it: a reshape keeps the row-major order, so the
// dense storage of |node| read with |view|'s row-major strides is |view|).
static tj_status_t load_leaf(tj_lowering_t* lw, uint32_t node, uint32_t view,
                             const tj_lower_map_t* map, uint32_t* out) {
  const tj_node_t* n = NODE(lw, node);
  // One-element constants (the 0.5 of gelu) become immediates.
  if (n->op == TJ_OP_CONSTANT && numel_is_one(n)) {
    *out = tj_lower_const(lw, n->dtype, n->attrs.data);
    return NULL;
  }
  if (lw->sel) return tj_lower_select_load(lw, node, view, map, out);
  int64_t strides[MAXV], offset;
  TJ_RETURN_IF_ERROR(tj_lower_compose(lw, view, map, strides, &offset));
  if (lw->phase == TJ_KIR_PHASE_ROW) {
    for (int32_t i = 0; i < lw->vrank; ++i) {
      if (lw->vreduced[i] && strides[i] != 0 && lw->vdims[i] != 1) {
        return tj_unsupported(
            "a per-row value reads %%%u along the reduced "
            "axes",
            node);
      }
    }
  }
  uint32_t b, split;
  TJ_RETURN_IF_ERROR(
      tj_lower_add_buffer(lw, node, TJ_KIR_INPUT, strides, offset, &b));
  TJ_RETURN_IF_ERROR(tj_lower_split_offset(lw, strides, &split));
  if (!lw->emit) {
    *out = 0;
  } else if (split != NONE32) {
    *out = tj_kir_load_at(lw->k, b, split);
  } else {
    *out = tj_kir_load(lw->k, b);
  }
  return NULL;
}

tj_status_t tj_lower_index_value(tj_lowering_t* lw, int32_t vdim,
                                 uint32_t* out) {
  lw->index_used[vdim] = true;
  if (!lw->emit) {
    *out = 0;
    return NULL;
  }
  int32_t f = lw->vfinal[vdim];
  if (f >= 0 && lw->red_split && f == lw->red_final) {
    return tj_lower_split_coord(lw, vdim, out);
  }
  *out = f < 0 ? tj_kir_const_int(lw->k, TJ_DTYPE_I64, 0)
               : tj_kir_index(lw->k, (uint32_t)f);
  return NULL;
}

static tj_status_t iota_value(tj_lowering_t* lw, uint32_t node,
                              const tj_lower_map_t* map, uint32_t* out) {
  const tj_node_t* n = NODE(lw, node);
  int32_t axis = (int32_t)n->attrs.axis;
  uint32_t acc;
  TJ_RETURN_IF_ERROR(tj_lower_body_dim(lw, map->off[axis], &acc));
  for (int32_t i = 0; i < lw->vrank; ++i) {
    int64_t c = map->coef[axis][i];
    if (c == 0 || lw->vdims[i] == 1) continue;
    uint32_t idx;
    TJ_RETURN_IF_ERROR(tj_lower_index_value(lw, i, &idx));
    if (c != 1) {
      uint32_t cv;
      TJ_RETURN_IF_ERROR(tj_lower_body_dim(lw, c, &cv));
      if (lw->emit) idx = tj_kir_binary(lw->k, TJ_OP_MUL, idx, cv);
    }
    if (lw->emit) acc = tj_kir_binary(lw->k, TJ_OP_ADD, acc, idx);
  }
  if (lw->emit && n->dtype != TJ_DTYPE_I64) {
    acc = tj_kir_cast(lw->k, n->dtype, acc);
  }
  *out = acc;
  return NULL;
}

static tj_status_t compute(tj_lowering_t* lw, uint32_t node,
                           const tj_lower_map_t* map, uint32_t* out) {
  const tj_node_t* n = NODE(lw, node);
  tj_kir_t* k = lw->k;
  tj_lower_map_t sub;
  uint32_t a, b, c;
  switch (n->op) {
    case TJ_OP_FULL: {
      if (!lw->emit) {
        *out = 0;
        return NULL;
      }
      unsigned char data[16] = {0};
      tj_store_f64(n->dtype, data, 0, n->attrs.value);
      *out = tj_lower_const(lw, n->dtype, data);
      return NULL;
    }
    case TJ_OP_IOTA:
      return iota_value(lw, node, map, out);
    case TJ_OP_CUMSUM:
    case TJ_OP_CUMPROD:
      return tj_lower_scan_value(lw, node, map, out);
    case TJ_OP_TRANSPOSE:
      TJ_RETURN_IF_ERROR(tj_lower_transpose_map(lw, node, map, &sub));
      return tj_lower_value(lw, n->operands[0], &sub, out);
    case TJ_OP_SLICE:
      TJ_RETURN_IF_ERROR(tj_lower_slice_map(lw, node, map, &sub));
      return tj_lower_value(lw, n->operands[0], &sub, out);
    case TJ_OP_BROADCAST_TO:
      TJ_RETURN_IF_ERROR(
          tj_lower_broadcast_map(lw, node, n->operands[0], map, &sub));
      return tj_lower_value(lw, n->operands[0], &sub, out);
    case TJ_OP_RESHAPE: {
      // Reshapes of a value in memory are views of its storage.
      uint32_t root = n->operands[0];
      while (lw->in_group[root] && NODE(lw, root)->op == TJ_OP_RESHAPE) {
        root = NODE(lw, root)->operands[0];
      }
      if (!lw->in_group[root]) return load_leaf(lw, root, node, map, out);
      TJ_RETURN_IF_ERROR(tj_lower_reshape_map(lw, node, map, &sub));
      return tj_lower_value(lw, n->operands[0], &sub, out);
    }
    case TJ_OP_CONCAT:
      return tj_lower_concat_value(lw, node, map, out);
    case TJ_OP_PAD:
      return tj_lower_pad_value(lw, node, map, out);
    case TJ_OP_GATHER:
      return tj_lower_gather_value(lw, node, map, out);
    case TJ_OP_GATHER_ELEMENTS:
      return tj_lower_gather_elements_value(lw, node, map, out);
    case TJ_OP_GATHER_ND:
      return tj_lower_gather_nd_value(lw, node, map, out);
    case TJ_OP_MATMUL_F8:   // fp8 (issue 17): the acc is f32, as the node
    case TJ_OP_MATMUL_I32:  // qgemm (issue 17): the acc is i32, as the node
      if (lw->kind != TJ_KIR_GEMM || node != lw->mm) break;
      *out = lw->emit ? tj_kir_acc(k) : 0;
      return NULL;
    case TJ_OP_CONV:  // issue 15: the CONV template's epilogue
      if (lw->kind != TJ_KIR_CONV || node != lw->mm) break;
      *out = lw->emit ? tj_kir_acc(k) : 0;
      return NULL;
    case TJ_OP_MATMUL:
      if (lw->kind != TJ_KIR_GEMM || (node != lw->mm && node != lw->mm2)) break;
      *out = !lw->emit ? 0 : node == lw->mm ? tj_kir_acc(k) : tj_kir_acc2(k);
      // The accumulator is f32; a half matmul's value is rounded to its
      // dtype (the reference's semantics) before the epilogue uses it.
      if (lw->emit && n->dtype != TJ_DTYPE_F32) {
        *out = tj_kir_cast(k, n->dtype, *out);
      }
      return NULL;
    case TJ_OP_WHERE:
      TJ_RETURN_IF_ERROR(
          tj_lower_broadcast_map(lw, node, n->operands[0], map, &sub));
      TJ_RETURN_IF_ERROR(tj_lower_value(lw, n->operands[0], &sub, &a));
      TJ_RETURN_IF_ERROR(
          tj_lower_broadcast_map(lw, node, n->operands[1], map, &sub));
      TJ_RETURN_IF_ERROR(tj_lower_value(lw, n->operands[1], &sub, &b));
      TJ_RETURN_IF_ERROR(
          tj_lower_broadcast_map(lw, node, n->operands[2], map, &sub));
      TJ_RETURN_IF_ERROR(tj_lower_value(lw, n->operands[2], &sub, &c));
      *out = lw->emit ? tj_kir_where(k, a, b, c) : 0;
      return NULL;
    default:
      break;
  }
  if (tj_lower_is_reduction(n->op) && lw->kind == TJ_KIR_ROW_REDUCE) {
    return tj_lower_row_value(lw, node, out);
  }
  tj_op_kind_t kind = tj_op_info(n->op)->kind;
  if (kind == TJ_OP_KIND_UNARY) {
    TJ_RETURN_IF_ERROR(
        tj_lower_broadcast_map(lw, node, n->operands[0], map, &sub));
    TJ_RETURN_IF_ERROR(tj_lower_value(lw, n->operands[0], &sub, &a));
    if (!lw->emit) {
      *out = 0;
    } else if (n->op == TJ_OP_CAST) {
      *out = tj_kir_cast(k, n->dtype, a);
    } else if (n->op == TJ_OP_BITCAST) {
      *out = tj_kir_bitcast(k, n->dtype, a);
    } else {
      *out = tj_kir_unary(k, n->op, a);
    }
    return NULL;
  }
  if (kind == TJ_OP_KIND_BINARY) {
    TJ_RETURN_IF_ERROR(
        tj_lower_broadcast_map(lw, node, n->operands[0], map, &sub));
    TJ_RETURN_IF_ERROR(tj_lower_value(lw, n->operands[0], &sub, &a));
    TJ_RETURN_IF_ERROR(
        tj_lower_broadcast_map(lw, node, n->operands[1], map, &sub));
    TJ_RETURN_IF_ERROR(tj_lower_value(lw, n->operands[1], &sub, &b));
    *out = lw->emit ? tj_kir_binary(k, n->op, a, b) : 0;
    return NULL;
  }
  return tj_unsupported("%s (%%%u) inside a fused kernel", op_name(n->op),
                        node);
}

tj_status_t tj_lower_value(tj_lowering_t* lw, uint32_t node,
                           const tj_lower_map_t* map, uint32_t* out) {
  if (lw->sel) {  // a select's inputs: no memo (lower_select.c)
    if (lw->in_group[node]) return compute(lw, node, map, out);
    return load_leaf(lw, node, node, map, out);
  }
  for (uint32_t i = 0; i < lw->num_memo; ++i) {
    const tj_lower_memo_t* m = &lw->memo[i];
    if (m->node == node && memcmp(&m->map, map, sizeof(*map)) == 0) {
      *out = m->value;
      return NULL;
    }
  }
  uint32_t v;
  if (lw->in_group[node]) {
    TJ_RETURN_IF_ERROR(compute(lw, node, map, &v));
  } else {
    TJ_RETURN_IF_ERROR(load_leaf(lw, node, node, map, &v));
  }
  if (lw->emit && lw->k->error) return tj_status_clone(lw->k->error);
  if (lw->num_memo == lw->memo_cap) {
    uint32_t cap = lw->memo_cap ? lw->memo_cap * 2 : 16;
    tj_lower_memo_t* grown =
        tj_realloc(lw->al, lw->memo, sizeof(tj_lower_memo_t) * lw->memo_cap,
                   sizeof(tj_lower_memo_t) * cap);
    if (!grown) return tj_status_oom();
    lw->memo = grown;
    lw->memo_cap = cap;
  }
  tj_lower_memo_t* m = &lw->memo[lw->num_memo++];
  m->node = node;
  m->value = v;
  m->map = *map;
  *out = v;
  return NULL;
}

tj_status_t tj_lower_store(tj_lowering_t* lw, uint32_t node,
                           const tj_lower_map_t* map) {
  uint32_t v;
  TJ_RETURN_IF_ERROR(tj_lower_value(lw, node, map, &v));
  int64_t strides[MAXV], offset;
  TJ_RETURN_IF_ERROR(tj_lower_compose(lw, node, map, strides, &offset));
  uint32_t b;
  TJ_RETURN_IF_ERROR(
      tj_lower_add_buffer(lw, node, TJ_KIR_OUTPUT, strides, offset, &b));
  if (lw->emit) tj_kir_store(lw->k, b, v);
  return NULL;
}

// Stores every output of the group at |map|: all values first, then the
// stores. An output may take an input's memory in place (memplan.c), so at
// a point no load may follow a store: storing the first output before
// computing the second would make the second read what the first wrote.
tj_status_t tj_lower_store_outputs(tj_lowering_t* lw,
                                   const tj_lower_map_t* map) {
  for (uint32_t j = 0; j < lw->grp->num_outputs; ++j) {
    uint32_t v;
    TJ_RETURN_IF_ERROR(tj_lower_value(lw, lw->grp->outputs[j], map, &v));
  }
  for (uint32_t j = 0; j < lw->grp->num_outputs; ++j) {
    TJ_RETURN_IF_ERROR(tj_lower_store(lw, lw->grp->outputs[j], map));
  }
  return NULL;
}

//===--- phases and the POINTWISE template ---===//

void tj_lower_begin_phase(tj_lowering_t* lw, tj_kir_phase_kind_t kind,
                          tj_kir_reduce_t reduce) {
  lw->phase = kind;
  lw->num_memo = 0;
  if (lw->emit && lw->kind == TJ_KIR_ROW_REDUCE) {
    tj_kir_begin_phase(lw->k, kind, reduce);
  }
}

tj_status_t tj_lower_body_pointwise(tj_lowering_t* lw) {
  tj_lower_map_t map;
  TJ_RETURN_IF_ERROR(tj_lower_root_map(lw, &map));
  tj_lower_begin_phase(lw, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM);
  return tj_lower_store_outputs(lw, &map);
}
