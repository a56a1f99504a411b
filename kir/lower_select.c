// kir/lower_select.c: a concat whose inputs are pointwise functions of the
// same loads, lowered as one per-element select instead of boxes (rope14,
// issue 14).
//
// The box path (kir/lower.c) cuts the output where the concat's inputs
// meet, one kernel a box. Rotary embeddings build rotate_half(v) as
// concat([-hi, lo]) of two slices of v, so both boxes read the whole of v
// (v * cos beside them) and the four kernels of q's and k's ropes read v
// twice as often as one kernel would. Here the inputs are walked at the
// concat's coordinate j left unshifted, and every load they make is
// recorded with its offset per input; when each input makes the same loads
// (same node, same strides over the space: slices of the same tensors
// along the axis) the group stays one kernel:
//   - one LOAD_AT per load, its offset a where over j's input i of
//     (offset_i - offset_b) - start_i * s, s the load's stride along the
//     virtual dim that walks the axis: input i's element at j - start_i,
//     read from input b's buffer (b: the least offset where all are
//     constants, so that it is the buffer v * cos reads, as aligned);
//   - every input's value from those loads, and a where over j picking
//     input i's where start_i <= j < start_i + size_i.
// Sizes may be symbolic (the offsets are i64 values of the body); any axis
// and any number of inputs (up to MAX_SEGMENTS). The emitters load a
// vector at once where every lane has the same offset (emit_llvm.c,
// load_at_piecewise), so an axis cut at multiples of the vector width reads
// as plain vector loads.
//
// The boxes stay where the select would be wrong or slower:
//   - an input that reads a load another does not (concat([x, y]) of two
//     tensors: a box reads each once, the select would read both at every
//     element), or the same load at two offsets;
//   - an input with anything but elementwise ops, where, casts, slices,
//     transposes, broadcasts and views of memory (a pad, a nested concat, a
//     gather, iota: their maps assume the shifted coordinate);
//   - a box that already lies inside one input (no cut to save);
//   - an axis walked by several space dims or at a stride;
//   - templates other than POINTWISE (a reduction's rows, a GEMM epilogue),
//     more than MAX_SELECT_LOADS loads, and TJ_CONCAT_SELECT=off
//     (tj_fusion_t.concat_boxes), which keeps the boxes everywhere.

#include <string.h>

#include "kir/lower_internal.h"

// Whether |node|'s value inside a select's input is a pointwise function
// of loads at the input's coordinate.
static bool input_ok(const tj_lowering_t* lw, uint32_t node, int32_t depth) {
  if (!lw->in_group[node]) return true;
  if (depth > 64) return false;
  const tj_node_t* n = NODE(lw, node);
  switch (n->op) {
    case TJ_OP_SLICE:
    case TJ_OP_TRANSPOSE:
    case TJ_OP_BROADCAST_TO:
    case TJ_OP_WHERE:
    case TJ_OP_FULL:
      break;
    case TJ_OP_RESHAPE: {  // a view of memory only
      uint32_t root = n->operands[0];
      while (lw->in_group[root] && NODE(lw, root)->op == TJ_OP_RESHAPE) {
        root = NODE(lw, root)->operands[0];
      }
      return !lw->in_group[root];
    }
    default: {
      tj_op_kind_t kind = tj_op_info(n->op)->kind;
      if (kind != TJ_OP_KIND_UNARY && kind != TJ_OP_KIND_BINARY) return false;
      break;
    }
  }
  for (uint32_t i = 0; i < n->num_operands; ++i) {
    if (!input_ok(lw, n->operands[i], depth + 1)) return false;
  }
  return true;
}

// Whether the points of the box, |extent| of them from |off| at stride 1,
// lie inside one input: the box path then takes it with no cut.
static bool inside_one_input(int64_t off, int64_t extent, int32_t k,
                             const int64_t* starts, const int64_t* sizes) {
  for (int32_t i = 0; i < k; ++i) {
    if (off == starts[i] && extent == sizes[i]) return true;
    if (off >= 0 && extent >= 0 && starts[i] >= 0 && sizes[i] >= 0 &&
        off >= starts[i] && off + extent <= starts[i] + sizes[i])
      return true;
  }
  return false;
}

tj_status_t tj_lower_select_load(tj_lowering_t* lw, uint32_t node,
                                 uint32_t view, const tj_lower_map_t* map,
                                 uint32_t* out) {
  tj_lower_select_t* sel = lw->sel;
  *out = 0;
  int64_t strides[MAXV], offset;
  TJ_RETURN_IF_ERROR(tj_lower_compose(lw, view, map, strides, &offset));
  tj_lower_select_load_t* e = NULL;
  for (uint32_t l = 0; l < sel->num_loads && !e; ++l) {
    tj_lower_select_load_t* c = &sel->loads[l];
    if (c->node == node &&
        memcmp(c->strides, strides, sizeof(int64_t) * (size_t)lw->vrank) == 0)
      e = c;
  }
  uint32_t bit = 1u << sel->branch;
  if (sel->collect) {
    if (!e) {
      if (sel->branch != 0 || sel->num_loads == MAX_SELECT_LOADS) {
        sel->ok = false;  // a load input 0 does not make
        return NULL;
      }
      e = &sel->loads[sel->num_loads++];
      memset(e, 0, sizeof(*e));
      e->node = node;
      e->value = NONE32;
      memcpy(e->strides, strides, sizeof(strides));
    }
    if (e->present & bit) {
      if (e->offset[sel->branch] != offset) sel->ok = false;
    } else {
      e->present |= bit;
      e->offset[sel->branch] = offset;
    }
    return NULL;
  }
  if (!e) return tj_internal("lower: a select's load was not collected");
  if (!lw->emit) return NULL;
  if (e->value == NONE32) {
    // Per input: (offset_i - offset_base) - start_i * s.
    int64_t s = e->strides[sel->sdim];
    uint32_t pick = NONE32;
    for (int32_t i = sel->k; i-- > 0;) {
      int64_t shift, o = e->offset[i], o0 = e->offset[e->base];
      TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, sel->starts[i], s, &shift));
      uint32_t v;
      if (o >= 0 && o0 >= 0 && shift >= 0) {
        v = tj_kir_const_int(lw->k, TJ_DTYPE_I64, o - o0 - shift);
      } else {
        uint32_t vo, vo0, vs;
        TJ_RETURN_IF_ERROR(tj_lower_body_dim(lw, o, &vo));
        TJ_RETURN_IF_ERROR(tj_lower_body_dim(lw, o0, &vo0));
        TJ_RETURN_IF_ERROR(tj_lower_body_dim(lw, shift, &vs));
        v = tj_kir_binary(lw->k, TJ_OP_SUB,
                          tj_kir_binary(lw->k, TJ_OP_SUB, vo, vo0), vs);
      }
      pick = pick == NONE32 ? v : tj_kir_where(lw->k, sel->cond[i], v, pick);
    }
    e->value = tj_kir_load_at(lw->k, e->buffer, pick);
  }
  *out = e->value;
  return NULL;
}

tj_status_t tj_lower_concat_select(tj_lowering_t* lw, uint32_t node,
                                   const tj_lower_map_t* map, uint32_t* out,
                                   bool* out_taken) {
  *out_taken = false;
  const tj_node_t* n = NODE(lw, node);
  int32_t a = (int32_t)n->attrs.axis;
  int32_t k = (int32_t)n->num_operands;
  if (lw->fu->concat_boxes || lw->kind != TJ_KIR_POINTWISE || lw->sel ||
      k < 2 || k > MAX_SEGMENTS)
    return NULL;
  // The one virtual dim that walks the axis, at stride 1, and only it.
  int32_t s = -1;
  for (int32_t i = 0; i < lw->vrank; ++i) {
    if (map->coef[a][i] == 0 || lw->vdims[i] == 1) continue;
    if (s >= 0) return NULL;
    s = i;
  }
  if (s < 0 || map->coef[a][s] != 1) return NULL;
  for (int32_t r = 0; r < map->rank; ++r) {
    if (r != a && map->coef[r][s] != 0) return NULL;
  }
  tj_lower_select_t sel;
  memset(&sel, 0, sizeof(sel));
  sel.k = k;
  sel.sdim = s;
  int64_t sizes[MAX_SEGMENTS], total = 0;
  for (int32_t i = 0; i < k; ++i) {
    sel.starts[i] = total;
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, n->operands[i], a, &sizes[i]));
    TJ_RETURN_IF_ERROR(tj_lower_dim_add(lw, total, sizes[i], &total));
  }
  if (inside_one_input(map->off[a], lw->vdims[s], k, sel.starts, sizes))
    return NULL;
  for (int32_t i = 0; i < k; ++i) {
    if (!input_ok(lw, n->operands[i], 0)) return NULL;
  }

  // Collect the inputs' loads (no IR, no buffers, no requests kept).
  bool emit = lw->emit, want_split = lw->want_split,
       want_segments = lw->want_segments;
  sel.collect = true;
  sel.ok = true;
  lw->emit = false;
  lw->sel = &sel;
  tj_status_t status = NULL;
  for (int32_t i = 0; i < k && sel.ok && !status; ++i) {
    uint32_t v;
    sel.branch = i;
    status = tj_lower_value(lw, n->operands[i], map, &v);
  }
  lw->sel = NULL;
  lw->emit = emit;
  lw->want_split = want_split;
  lw->want_segments = want_segments;
  if (status) {
    if (tj_status_code(status) != TJ_STATUS_UNSUPPORTED) return status;
    tj_status_free(status);
    return NULL;
  }
  uint32_t all = (1u << k) - 1;
  for (uint32_t l = 0; l < sel.num_loads && sel.ok; ++l) {
    sel.ok = sel.loads[l].present == all;
  }
  if (!sel.ok) return NULL;
  *out_taken = true;

  // The loads' buffers, the coordinate and the conditions, the inputs'
  // values, the select.
  for (uint32_t l = 0; l < sel.num_loads; ++l) {
    tj_lower_select_load_t* e = &sel.loads[l];
    bool constant = true;
    for (int32_t i = 0; i < k; ++i) {
      constant &= e->offset[i] >= 0;
      if (constant && e->offset[i] < e->offset[e->base]) e->base = i;
    }
    if (!constant) e->base = 0;
    TJ_RETURN_IF_ERROR(tj_lower_add_buffer(
        lw, e->node, TJ_KIR_INPUT, e->strides, e->offset[e->base], &e->buffer));
  }
  uint32_t j, off = 0;
  TJ_RETURN_IF_ERROR(tj_lower_index_value(lw, s, &j));
  if (map->off[a] != 0) {
    TJ_RETURN_IF_ERROR(tj_lower_body_dim(lw, map->off[a], &off));
    if (lw->emit) j = tj_kir_binary(lw->k, TJ_OP_ADD, j, off);
  }
  for (int32_t i = 0; i + 1 < k; ++i) {
    uint32_t end;
    TJ_RETURN_IF_ERROR(tj_lower_body_dim(lw, sel.starts[i + 1], &end));
    if (lw->emit) sel.cond[i] = tj_kir_binary(lw->k, TJ_OP_LT, j, end);
  }
  sel.collect = false;
  lw->sel = &sel;
  uint32_t values[MAX_SEGMENTS];
  for (int32_t i = 0; i < k && !status; ++i) {
    sel.branch = i;
    status = tj_lower_value(lw, n->operands[i], map, &values[i]);
  }
  lw->sel = NULL;
  TJ_RETURN_IF_ERROR(status);
  if (!lw->emit) {
    *out = 0;
    return NULL;
  }
  uint32_t v = values[k - 1];
  for (int32_t i = k - 1; i-- > 0;) {
    v = tj_kir_where(lw->k, sel.cond[i], values[i], v);
  }
  *out = v;
  return NULL;
}
