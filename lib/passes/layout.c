// lib/passes/layout.c
//
// Layout propagation (seed 001, stage 07; issue 15): transposes sunk
// through the ops between them until they meet their inverse, and
// cancelled. A graph in channels-last form (tj_conv_attrs_t.channels_last,
// or an ONNX file exported from an NHWC framework) carries every conv and
// pool as transpose -> op -> transpose, and the ops between two convs
// (bias, relu, a residual add, a squeeze-excite's global pool and scale, a
// softmax over the channels) in the other layout, so the transposes never
// meet and canonicalize's composition cannot cancel them: each is a copy
// kernel or a strided read. Here, for t = transpose(x, p):
//   e(t, transpose(y, p), s) -> transpose(e(x, y, s'), p)
//       elementwise e whose same-rank operands are all transposes of one
//       perm p (broadcast ones too: a softmax's max), s a small broadcast
//       operand (s' = s viewed in x's layout);
//   reduce(t, A) -> transpose(reduce(x, p[A]), p)          keepdims
//   reduce(t, A) -> transpose(reduce(x, p[A]), p')         p' = p less A,
//       renumbered: the identity for a global pool of NHWC read off NCHW,
//       when the transpose is gone altogether (a row reduction, over the
//       last axes, moves only where it stays one: keeps_rows);
//   pad(t, lo, hi) -> transpose(pad(x, lo', hi'), p), lo'[p[k]] = lo[k]
//       (slice's starts, stops and steps alike): so the pad and strided
//       slices a pool decomposes into move too;
//   concat(t, transpose(y, p), axis a) -> transpose(concat(x, y, p[a]), p)
//       (a small operand viewed as for e).
// A softmax, log_softmax or layer_norm arrives decomposed (max, sub, exp,
// sum, div over keepdims reductions), and moves as its parts. The moved
// transpose goes on sinking, and one that meets a transpose by its
// inverse vanishes with it. ONNX Runtime's transpose optimizer and XLA's
// layout assignment do this; so do we, only where it pays:
//   - a pending value (a transpose, or an op moved below one) is moved
//     through only when every user of it is an op that moves below it too
//     or a transpose that cancels it, and it is no output: nothing is
//     computed twice and the transpose is gone (a fixpoint drops moves
//     whose operands lose that);
//   - a move is kept only when its chain ends in a cancellation, in an op
//     that joins two moved operands into one (a residual add, a concat),
//     or in a value whose transpose moves only dims of size 1 (a keepdims
//     global pool: a reshape) or none (a global pool to [N, C]): a
//     backward sweep keeps the useful moves, so the graph never has more
//     transposes than before, and has at least one fewer for each chain.
// The small operands' views (a reshape to the rank, then a transpose of
// a tensor at most 1/16 of the op's size) and the reshapes a value whose
// transpose moves only 1s is made by are the only nodes added. The conv
// templates (x86 and CUDA) read NCHW only, so a conv keeps its transposes
// at its ends; the pass meets them from both sides.
//
// Requires: nothing (the default pipeline runs it after decompose's
// cleanup, when the elementwise ops and reductions are all visible).
// Preserves: inputs, outputs, symbols, guards, the order of the nodes it
// keeps. Invalidates: fusion groups, memory plan.  Idempotent.

#include <string.h>

#include "lib/passes/pass.h"

// How a node moves below the transposes of its operands.
typedef enum move_kind_t {
  MOVE_NONE,
  MOVE_ELEMENTWISE,  // same-rank operands transposed alike; small viewed
  MOVE_REDUCE,       // the axes remapped; keepdims or not
  MOVE_AXISWISE,     // pad, slice: per-axis attributes remapped
  MOVE_CONCAT,       // the axis remapped; operands as for elementwise
} move_kind_t;

typedef struct layout_t {
  tj_pass_ctx_t* ctx;
  const tj_graph_t* g;
  tj_uses_t uses;
  // Per source node. pending: the node's value is transpose(base, perm),
  // base a node of the new graph (made in the emit sweep); for an
  // original transpose, base is its operand's; for a moved op, base is
  // the op over its operands' bases (and inperm the perm those share).
  bool* pending;
  bool* moved;   // an op moved below its operands' transposes
  bool* cancel;  // a transpose that undoes its pending operand
  bool* useful;  // pending, and on a chain that pays (keep_useful)
  int64_t (*perm)[TJ_MAX_RANK];
  int64_t (*inperm)[TJ_MAX_RANK];
  uint32_t* base;      // new-graph node (emit sweep)
  uint32_t* realized;  // new-graph value of a pending node; NONE until made
  uint32_t num_moved;
} layout_t;

static move_kind_t move_kind(const tj_node_t* n) {
  if (tj_op_is_elementwise(n->op)) {
    return n->rank >= 2 ? MOVE_ELEMENTWISE : MOVE_NONE;
  }
  const tj_op_info_t* info = tj_op_info(n->op);
  if (info->kind == TJ_OP_KIND_REDUCTION &&
      info->attr_kind == TJ_ATTR_KIND_AXES)
    return MOVE_REDUCE;
  if (n->rank < 1) return MOVE_NONE;
  if (n->op == TJ_OP_PAD || n->op == TJ_OP_SLICE) return MOVE_AXISWISE;
  if (n->op == TJ_OP_CONCAT) return MOVE_CONCAT;
  return MOVE_NONE;
}

// The rank of the operands whose transposes node |e| moves below.
static int32_t in_rank(const layout_t* l, uint32_t e) {
  const tj_node_t* n = &l->g->nodes[e];
  if (move_kind(n) == MOVE_REDUCE) return l->g->nodes[n->operands[0]].rank;
  return n->rank;
}

static bool same_perm(const int64_t* p, const int64_t* q, int32_t rank) {
  return memcmp(p, q, sizeof(int64_t) * (size_t)rank) == 0;
}

// Whether transposing by |p| and then by |q| gives back the operand.
static bool composes_to_identity(const int64_t* p, const int64_t* q,
                                 int32_t rank) {
  for (int32_t k = 0; k < rank; ++k)
    if (p[q[k]] != k) return false;
  return true;
}

// Whether user |u| of pending node |j| is a transpose that undoes it.
static bool undoes(const layout_t* l, uint32_t u, uint32_t j) {
  const tj_node_t* n = &l->g->nodes[u];
  return n->op == TJ_OP_TRANSPOSE && n->operands[0] == j &&
         (int32_t)n->attrs.num_ints == n->rank &&
         composes_to_identity(l->perm[j], n->attrs.ints, n->rank);
}

// Whether moved node |u| reads pending node |o| by its base.
static bool takes_moved(const layout_t* l, uint32_t u, uint32_t o) {
  return l->moved[u] && l->pending[o] && l->g->nodes[o].rank == in_rank(l, u) &&
         same_perm(l->perm[o], l->inperm[u], l->g->nodes[o].rank);
}

// Whether every user of pending node |o| but |e| is a transpose that undoes
// it or an op moved below it, and o is no graph output: the transpose o
// stands for is then made never. |optimistic| (the forward sweep): users
// after e are not yet decided, and taken as moving.
static bool users_ok(const layout_t* l, uint32_t o, uint32_t e,
                     bool optimistic) {
  if (l->uses.is_output[o]) return false;
  for (uint32_t k = l->uses.offsets[o]; k < l->uses.offsets[o + 1]; ++k) {
    uint32_t u = l->uses.users[k];
    if (u == e || undoes(l, u, o) || (optimistic && u > e)) continue;
    if (!takes_moved(l, u, o)) return false;
  }
  return true;
}

static bool same_dims(const tj_node_t* a, const tj_node_t* b) {
  if (a->rank != b->rank) return false;
  for (int32_t k = 0; k < a->rank; ++k)
    if (a->dims[k] != b->dims[k]) return false;
  return true;
}

// Whether operand |o| of |e| is a small one: of a rank no larger, not of
// e's shape, at most 1/16 of e's bytes.
static bool small_operand(const layout_t* l, uint32_t o, uint32_t e) {
  const tj_node_t* on = &l->g->nodes[o];
  const tj_node_t* en = &l->g->nodes[e];
  if (on->rank > en->rank || same_dims(on, en)) return false;
  return tj_pass_node_bytes(l->ctx, l->g, o) <=
         tj_pass_node_bytes(l->ctx, l->g, e) / 16;
}

// A transpose t of |o| before |e| that |p| undoes (transpose(t, p) is o):
// |o| in the layout |e| moves to, already in the graph (a channels-last
// block's input, which its first conv reads transposed and its residual
// add reads as it is). TJ_NODE_NONE if none.
static uint32_t twin_of(const layout_t* l, uint32_t o, uint32_t e,
                        const int64_t* p) {
  for (uint32_t k = l->uses.offsets[o]; k < l->uses.offsets[o + 1]; ++k) {
    uint32_t t = l->uses.users[k];
    const tj_node_t* tn = &l->g->nodes[t];
    if (t < e && tn->op == TJ_OP_TRANSPOSE &&
        (int32_t)tn->attrs.num_ints == tn->rank &&
        composes_to_identity(tn->attrs.ints, p, tn->rank))
      return t;
  }
  return TJ_NODE_NONE;
}

typedef enum operand_kind_t {
  OPERAND_MOVED,  // pending with e's perm, users_ok: its base
  OPERAND_TWIN,   // e's rank, a transpose of it in the graph (twin_of)
  OPERAND_SMALL,  // a small operand, viewed (small_view)
  OPERAND_STUCK,  // none of these: e does not move
} operand_kind_t;

// How operand |o| of |e| goes along when e moves below transposes by perm
// |p| (NULL: only whether it is OPERAND_MOVED, of any perm).
static operand_kind_t operand_kind(const layout_t* l, uint32_t o, uint32_t e,
                                   const int64_t* p, bool optimistic) {
  const tj_node_t* on = &l->g->nodes[o];
  const int32_t r = in_rank(l, e);
  if (on->rank == r && l->pending[o] && users_ok(l, o, e, optimistic)) {
    if (!p || same_perm(l->perm[o], p, r)) return OPERAND_MOVED;
    return OPERAND_STUCK;
  }
  const move_kind_t mk = move_kind(&l->g->nodes[e]);
  if (!p || mk == MOVE_REDUCE || mk == MOVE_AXISWISE) return OPERAND_STUCK;
  if (on->rank == r && !l->pending[o] && twin_of(l, o, e, p) != TJ_NODE_NONE)
    return OPERAND_TWIN;
  return small_operand(l, o, e) ? OPERAND_SMALL : OPERAND_STUCK;
}

// The perm of reduce |e|'s result when it moves below its operand's
// transpose by |p|: p for keepdims; else p without the reduced axes, each
// renumbered to its place among the axes the moved reduction keeps.
static void reduce_perm(const tj_node_t* n, int32_t r, const int64_t* p,
                        int64_t* out) {
  bool in_a[TJ_MAX_RANK] = {false}, in_moved[TJ_MAX_RANK] = {false};
  for (uint32_t k = 0; k < n->attrs.num_ints; ++k) {
    in_a[n->attrs.ints[k]] = true;
    in_moved[p[n->attrs.ints[k]]] = true;
  }
  if (n->attrs.keepdims) {
    memcpy(out, p, sizeof(int64_t) * (size_t)r);
    return;
  }
  int64_t place[TJ_MAX_RANK];
  for (int32_t q = 0, kept = 0; q < r; ++q) {
    place[q] = kept;
    kept += !in_moved[q];
  }
  for (int32_t k = 0, j = 0; k < r; ++k)
    if (!in_a[k]) out[j++] = place[p[k]];
}

// Whether the |axes| of a value of |dims| are its last ones (dims of size
// 1 aside): a row reduction, which reads contiguous rows.
static bool trailing(const int64_t* dims, int32_t rank, const bool* axes) {
  int32_t k = 0;
  while (k < rank && !axes[k]) ++k;
  for (; k < rank; ++k)
    if (!axes[k] && dims[k] != 1) return false;
  return true;
}

// Whether reduce |n| over a transpose by |p| stays a row reduction when it
// moves: one over the last axes of its operand must be one over the last
// axes of the transpose's operand too. A global pool of NCHW read off NHWC
// would become a reduction over the middle axes, which the x86 kernels
// read in the same strides as the transpose, and the NCHW form's pools
// of one row share a kernel (bench/RESULTS.md, layout2: 1.3-2x slower
// moved); the other way round it moves.
static bool keeps_rows(const layout_t* l, const tj_node_t* n,
                       const int64_t* p) {
  const tj_node_t* t = &l->g->nodes[n->operands[0]];
  const int32_t r = t->rank;
  bool in_a[TJ_MAX_RANK] = {false}, in_moved[TJ_MAX_RANK] = {false};
  int64_t dims[TJ_MAX_RANK];
  for (uint32_t k = 0; k < n->attrs.num_ints; ++k) {
    in_a[n->attrs.ints[k]] = true;
    in_moved[p[n->attrs.ints[k]]] = true;
  }
  for (int32_t k = 0; k < r; ++k) dims[p[k]] = t->dims[k];
  return !trailing(t->dims, r, in_a) || trailing(dims, r, in_moved);
}

// Whether |e| moves below its operands' transposes by perm |p|: its
// operands' kinds under p, at least one OPERAND_MOVED and none
// OPERAND_STUCK (a reduction, pad or slice: its operand OPERAND_MOVED).
// Sets e's inperm and perm.
static bool movable_by(layout_t* l, uint32_t e, const int64_t* p,
                       bool optimistic) {
  const tj_node_t* n = &l->g->nodes[e];
  bool any = false;
  for (uint32_t k = 0; k < n->num_operands; ++k) {
    uint32_t o = n->operands[k];
    if (o == TJ_NODE_NONE) return false;
    operand_kind_t kind = operand_kind(l, o, e, p, optimistic);
    if (kind == OPERAND_STUCK) return false;
    any |= kind == OPERAND_MOVED;
  }
  if (!any) return false;
  if (move_kind(n) == MOVE_REDUCE && !keeps_rows(l, n, p)) return false;
  const int32_t r = in_rank(l, e);
  int64_t q[TJ_MAX_RANK];
  memcpy(q, p, sizeof(int64_t) * (size_t)r);
  memcpy(l->inperm[e], q, sizeof(int64_t) * (size_t)r);
  if (move_kind(n) == MOVE_REDUCE) {
    reduce_perm(n, r, q, l->perm[e]);
  } else {
    memcpy(l->perm[e], q, sizeof(int64_t) * (size_t)r);
  }
  return true;
}

// Whether |e| moves (the forward sweep): the perm of its first
// OPERAND_MOVED operand, which the others follow.
static bool movable(layout_t* l, uint32_t e) {
  const tj_node_t* n = &l->g->nodes[e];
  if (move_kind(n) == MOVE_NONE) return false;
  for (uint32_t k = 0; k < n->num_operands; ++k) {
    uint32_t o = n->operands[k];
    if (o == TJ_NODE_NONE) return false;
    if (operand_kind(l, o, e, NULL, true) == OPERAND_MOVED)
      return movable_by(l, e, l->perm[o], true);
  }
  return false;
}

static void unmove(layout_t* l, uint32_t i) {
  l->moved[i] = l->pending[i] = false;
}

// A transpose |i| cancels its operand when that is pending by the perm
// it undoes; else it is pending itself (by its own perm, kept in perm[i]
// while it cancels). Returns whether that changed.
static bool transpose_state(layout_t* l, uint32_t i) {
  const tj_node_t* n = &l->g->nodes[i];
  const uint32_t j = n->operands[0];
  const bool cancel = l->pending[j] && undoes(l, i, j);
  const bool pending = !cancel && (int32_t)n->attrs.num_ints == n->rank;
  const bool changed = cancel != l->cancel[i] || pending != l->pending[i];
  l->cancel[i] = cancel;
  l->pending[i] = pending;
  return changed;
}

// Drops the moves whose operands no longer qualify (a user of one did not
// move after all, or a transpose no longer cancels), until none does.
static void prune(layout_t* l) {
  const tj_graph_t* g = l->g;
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t i = 0; i < g->num_nodes; ++i) {
      if (g->nodes[i].op == TJ_OP_TRANSPOSE) {
        changed |= transpose_state(l, i);
      } else if (l->moved[i] && !movable_by(l, i, l->inperm[i], false)) {
        unmove(l, i);
        changed = true;
      }
    }
  }
}

// The forward sweep, optimistic about users not yet seen: which nodes are
// pending or moved.
static void analyze(layout_t* l) {
  const tj_graph_t* g = l->g;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    const tj_node_t* n = &g->nodes[i];
    if (n->op == TJ_OP_TRANSPOSE) {
      for (int32_t k = 0; k < n->rank && k < (int32_t)n->attrs.num_ints; ++k)
        l->perm[i][k] = n->attrs.ints[k];
      transpose_state(l, i);
    } else if (movable(l, i)) {
      l->pending[i] = l->moved[i] = true;
    }
  }
}

// Whether pending node |j|'s value is made from its base without moving
// data: the transpose moves only dims of size 1 (a reshape), or none.
static bool free_view(const layout_t* l, uint32_t j) {
  const tj_node_t* n = &l->g->nodes[j];
  int64_t last = -1;
  for (int32_t k = 0; k < n->rank; ++k) {
    if (n->dims[k] == 1) continue;
    if (l->perm[j][k] < last) return false;
    last = l->perm[j][k];
  }
  return true;
}

// The backward sweep: a pending node is useful when a user cancels it or
// is a useful move that takes it by its base, and a move is useful too
// when it joins two moved operands into one (a residual add whose both
// sides were transposed) or when its value is a free view of its base. A
// move's operands are then useful, and a useless move is not made (its
// users saw it as useless: usefulness flows from users to operands only).
// Returns whether a move was dropped.
static bool keep_useful(layout_t* l) {
  const tj_graph_t* g = l->g;
  memset(l->useful, 0, sizeof(bool) * g->num_nodes);
  for (uint32_t i = g->num_nodes; i-- > 0;) {
    if (!l->pending[i]) continue;
    if (l->moved[i]) {
      uint32_t joined = 0;
      const tj_node_t* n = &g->nodes[i];
      for (uint32_t k = 0; k < n->num_operands; ++k)
        joined += takes_moved(l, i, n->operands[k]);
      if (joined >= 2 || free_view(l, i)) l->useful[i] = true;
    }
    for (uint32_t k = l->uses.offsets[i]; k < l->uses.offsets[i + 1]; ++k) {
      uint32_t u = l->uses.users[k];
      if (l->cancel[u] || (l->useful[u] && takes_moved(l, u, i)))
        l->useful[i] = true;
    }
  }
  bool dropped = false;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    if (l->moved[i] && !l->useful[i]) {
      unmove(l, i);
      dropped = true;
    }
  }
  return dropped;
}

// The new-graph node holding source node |j|'s value as it is: a useful
// pending node's transpose(base, perm) (a reshape where that moves only
// 1s; base itself for the identity), made once where something reads it
// (an original transpose whose every reader moved or cancelled is made
// never).
static tj_status_t value_of(layout_t* l, tj_rewriter_t* rw, uint32_t j,
                            uint32_t* out) {
  if (!(l->pending[j] && l->useful[j])) {
    *out = rw->map[j];
    return NULL;
  }
  if (l->realized[j] == TJ_NODE_NONE) {
    const tj_node_t* n = &l->g->nodes[j];
    bool identity = true;
    for (int32_t k = 0; k < n->rank; ++k) identity &= l->perm[j][k] == k;
    if (identity) {
      l->realized[j] = l->base[j];
    } else if (free_view(l, j)) {
      int64_t dims[TJ_MAX_RANK];
      TJ_RETURN_IF_ERROR(tj_rewriter_dims(rw, n->rank, n->dims, dims));
      TJ_RETURN_IF_ERROR(tj_rewriter_emit(rw, TJ_OP_RESHAPE, 1, &l->base[j],
                                          NULL, n->dtype, n->rank, dims,
                                          &l->realized[j]));
    } else {
      tj_attrs_t attrs;
      memset(&attrs, 0, sizeof(attrs));
      attrs.ints = l->perm[j];
      attrs.num_ints = (uint32_t)n->rank;
      TJ_RETURN_IF_ERROR(tj_rewriter_emit(rw, TJ_OP_TRANSPOSE, 1, &l->base[j],
                                          &attrs, n->dtype, 0, NULL,
                                          &l->realized[j]));
    }
  }
  *out = l->realized[j];
  return NULL;
}

// Small operand |o| of moved op |e| (perm p) in e's base layout: o viewed
// at e's rank with leading 1s, transposed by p's inverse; a reshape alone
// where that moves only dims of size 1 (a bias [C] to [1, C, 1, 1]).
static tj_status_t small_view(layout_t* l, tj_rewriter_t* rw, uint32_t o,
                              uint32_t e, uint32_t* out) {
  const tj_node_t* on = &l->g->nodes[o];
  const int32_t r = l->g->nodes[e].rank, lead = r - on->rank;
  uint32_t v;
  TJ_RETURN_IF_ERROR(value_of(l, rw, o, &v));
  int64_t inverse[TJ_MAX_RANK], src[TJ_MAX_RANK], dims[TJ_MAX_RANK];
  for (int32_t k = 0; k < r; ++k) inverse[l->inperm[e][k]] = k;
  int32_t last = -1;
  bool in_order = true;
  for (int32_t k = 0; k < r; ++k) {
    int32_t from = (int32_t)inverse[k] - lead;
    src[k] = from < 0 ? 1 : on->dims[from];
    if (src[k] == 1) continue;
    in_order &= from > last;
    last = from;
  }
  if (in_order) {
    TJ_RETURN_IF_ERROR(tj_rewriter_dims(rw, r, src, dims));
    return tj_rewriter_emit(rw, TJ_OP_RESHAPE, 1, &v, NULL, on->dtype, r, dims,
                            out);
  }
  if (lead > 0) {
    for (int32_t k = 0; k < r; ++k) src[k] = k < lead ? 1 : on->dims[k - lead];
    TJ_RETURN_IF_ERROR(tj_rewriter_dims(rw, r, src, dims));
    TJ_RETURN_IF_ERROR(tj_rewriter_emit(rw, TJ_OP_RESHAPE, 1, &v, NULL,
                                        on->dtype, r, dims, &v));
  }
  tj_attrs_t attrs;
  memset(&attrs, 0, sizeof(attrs));
  attrs.ints = inverse;
  attrs.num_ints = (uint32_t)r;
  return tj_rewriter_emit(rw, TJ_OP_TRANSPOSE, 1, &v, &attrs, on->dtype, 0,
                          NULL, out);
}

// Moved node |i|'s attributes in its base layout: axes, per-axis lists
// and the concat axis through its inperm p (a transpose's axis k is its
// operand's axis p[k]). |ints| holds the remapped lists.
static void moved_attrs(const layout_t* l, uint32_t i, int64_t* ints,
                        tj_attrs_t* out) {
  const tj_node_t* n = &l->g->nodes[i];
  const int64_t* p = l->inperm[i];
  *out = n->attrs;
  switch (move_kind(n)) {
    case MOVE_REDUCE: {
      bool in_moved[TJ_MAX_RANK] = {false};
      for (uint32_t k = 0; k < n->attrs.num_ints; ++k)
        in_moved[p[n->attrs.ints[k]]] = true;
      uint32_t m = 0;
      for (int32_t q = 0; q < in_rank(l, i); ++q)
        if (in_moved[q]) ints[m++] = q;
      out->ints = ints;
      break;
    }
    case MOVE_AXISWISE: {
      const int32_t r = n->rank;
      const uint32_t lists = n->attrs.num_ints / (uint32_t)r;
      for (uint32_t s = 0; s < lists; ++s) {
        for (int32_t k = 0; k < r; ++k)
          ints[s * (uint32_t)r + (uint32_t)p[k]] =
              n->attrs.ints[s * (uint32_t)r + (uint32_t)k];
      }
      out->ints = ints;
      break;
    }
    case MOVE_CONCAT:
      out->axis = p[n->attrs.axis];
      break;
    case MOVE_ELEMENTWISE:
    case MOVE_NONE:
      break;
  }
}

static tj_status_t emit_moved(layout_t* l, tj_rewriter_t* rw, uint32_t i,
                              uint32_t* ops) {
  const tj_node_t* n = &l->g->nodes[i];
  for (uint32_t k = 0; k < n->num_operands; ++k) {
    uint32_t o = n->operands[k];
    switch (operand_kind(l, o, i, l->inperm[i], false)) {
      case OPERAND_MOVED:
        ops[k] = l->base[o];
        break;
      case OPERAND_TWIN:
        TJ_RETURN_IF_ERROR(
            value_of(l, rw, twin_of(l, o, i, l->inperm[i]), &ops[k]));
        break;
      case OPERAND_SMALL:
        TJ_RETURN_IF_ERROR(small_view(l, rw, o, i, &ops[k]));
        break;
      case OPERAND_STUCK:
        return tj_internal("layout: operand %%%u of moved %%%u", o, i);
    }
  }
  int64_t ints[3 * TJ_MAX_RANK];
  tj_attrs_t attrs;
  moved_attrs(l, i, ints, &attrs);
  return tj_rewriter_emit(rw, n->op, n->num_operands, ops, &attrs, n->dtype, 0,
                          NULL, &l->base[i]);
}

static tj_status_t emit_node(layout_t* l, tj_rewriter_t* rw, uint32_t i) {
  const tj_node_t* n = &l->g->nodes[i];
  if (n->op == TJ_OP_INPUT) return NULL;
  if (l->cancel[i]) {
    rw->map[i] = l->base[n->operands[0]];
    return NULL;
  }
  // A useful original transpose: its operand is its base, and it is made
  // only where something reads it as it is (value_of).
  if (n->op == TJ_OP_TRANSPOSE && l->pending[i] && l->useful[i])
    return value_of(l, rw, n->operands[0], &l->base[i]);
  uint32_t ops[16];
  uint32_t* p = ops;
  if (n->num_operands > TJ_ARRAY_SIZE(ops)) {
    p = tj_alloc(rw->allocator, sizeof(uint32_t) * n->num_operands);
    if (!p) return tj_status_oom();
  }
  tj_status_t status = NULL;
  if (l->moved[i]) {
    status = emit_moved(l, rw, i, p);
  } else {
    for (uint32_t k = 0; k < n->num_operands && !status; ++k) {
      p[k] = TJ_NODE_NONE;
      if (n->operands[k] != TJ_NODE_NONE)
        status = value_of(l, rw, n->operands[k], &p[k]);
    }
    if (!status) status = tj_rewriter_copy(rw, i, p, &rw->map[i]);
  }
  if (p != ops) tj_free(rw->allocator, p, sizeof(uint32_t) * n->num_operands);
  return status;
}

static tj_status_t rewrite(layout_t* l, tj_graph_t** out) {
  tj_rewriter_t rw;
  TJ_RETURN_IF_ERROR(tj_rewriter_begin(&rw, l->g));
  tj_status_t status = NULL;
  for (uint32_t i = 0; !status && i < l->g->num_nodes; ++i)
    status = emit_node(l, &rw, i);
  // Outputs read their node's value as it is.
  for (uint32_t k = 0; !status && k < l->g->num_outputs; ++k) {
    uint32_t o = l->g->outputs[k].node;
    if (rw.map[o] == TJ_NODE_NONE) status = value_of(l, &rw, o, &rw.map[o]);
  }
  if (status) {
    tj_rewriter_abandon(&rw);
    return status;
  }
  return tj_rewriter_finish(&rw, out);
}

tj_status_t tj_pass_layout(tj_pass_ctx_t* ctx, tj_plan_t* plan) {
  layout_t l;
  memset(&l, 0, sizeof(l));
  l.ctx = ctx;
  l.g = plan->graph;
  const uint32_t n = l.g->num_nodes ? l.g->num_nodes : 1;
  tj_allocator_t a = l.g->allocator;
  TJ_RETURN_IF_ERROR(tj_uses_initialize(&l.uses, l.g));
  l.pending = tj_calloc(a, n, sizeof(bool));
  l.moved = tj_calloc(a, n, sizeof(bool));
  l.cancel = tj_calloc(a, n, sizeof(bool));
  l.useful = tj_calloc(a, n, sizeof(bool));
  l.perm = tj_calloc(a, n, sizeof(*l.perm));
  l.inperm = tj_calloc(a, n, sizeof(*l.inperm));
  l.base = tj_alloc(a, n * sizeof(uint32_t));
  l.realized = tj_alloc(a, n * sizeof(uint32_t));
  tj_status_t status = NULL;
  if (!l.pending || !l.moved || !l.cancel || !l.useful || !l.perm ||
      !l.inperm || !l.base || !l.realized) {
    status = tj_status_oom();
  } else {
    for (uint32_t i = 0; i < n; ++i) l.base[i] = l.realized[i] = TJ_NODE_NONE;
    analyze(&l);
    do {
      prune(&l);
    } while (keep_useful(&l));
    for (uint32_t i = 0; i < l.g->num_nodes; ++i) l.num_moved += l.moved[i];
    if (l.num_moved > 0 && tj_pass_rewrite(ctx, l.g, 0)) {
      tj_graph_t* out = NULL;
      status = rewrite(&l, &out);
      if (!status) tj_plan_set_graph(plan, out);
    }
  }
  tj_free(a, l.pending, l.pending ? n * sizeof(bool) : 0);
  tj_free(a, l.moved, l.moved ? n * sizeof(bool) : 0);
  tj_free(a, l.cancel, l.cancel ? n * sizeof(bool) : 0);
  tj_free(a, l.useful, l.useful ? n * sizeof(bool) : 0);
  tj_free(a, l.perm, l.perm ? n * sizeof(*l.perm) : 0);
  tj_free(a, l.inperm, l.inperm ? n * sizeof(*l.inperm) : 0);
  tj_free(a, l.base, l.base ? n * sizeof(uint32_t) : 0);
  tj_free(a, l.realized, l.realized ? n * sizeof(uint32_t) : 0);
  tj_uses_deinitialize(&l.uses);
  return status;
}
