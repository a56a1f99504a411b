// lib/passes/layout.c
//
// Layout propagation (seed 001, stage 07; issue 15): transposes sunk
// through elementwise ops until they meet their inverse, and cancelled.
// A graph in channels-last form (tj_conv_attrs_t.channels_last, or an
// ONNX file exported from an NHWC framework) carries every conv as
// transpose -> conv -> transpose, and the ops between two convs (bias,
// relu, a residual add) in the other layout, so the transposes never meet
// and canonicalize's composition cannot cancel them: each is a copy
// kernel or a strided read. Here
//   e(transpose(x, p), transpose(y, p), s) -> transpose(e(x, y, s'), p)
// for elementwise e whose full-size operands are all transposes of one
// perm p, and s a small broadcast operand (s' = s viewed in x's layout);
// the moved transpose goes on sinking, and one that meets a transpose by
// p's inverse vanishes with it. ONNX Runtime's transpose optimizer and
// XLA's layout assignment do this; so do we, only where it pays:
//   - a transpose (or a sunk value) is moved only when every user of it
//     but its cancelling transposes is the one elementwise op it moves
//     through, so nothing is computed twice and no transpose copied;
//   - a move is made only when its chain ends in a cancellation or in an
//     op that joins two transposed operands into one (a residual add: a
//     backward sweep keeps the useful moves), so the graph never has more
//     transposes than before, and has at least one fewer for each chain.
// The small operands' views (a reshape to the rank, then a transpose of
// a tensor at most 1/16 of the op's size) are the only nodes added.
//
// Requires: nothing (the default pipeline runs it after decompose's
// cleanup, when the elementwise ops are all visible).  Preserves: inputs,
// outputs, symbols, guards, the order of the nodes it keeps.
// Invalidates: fusion groups, memory plan.  Idempotent.

#include <string.h>

#include "lib/passes/pass.h"

typedef struct layout_t {
  tj_pass_ctx_t* ctx;
  const tj_graph_t* g;
  tj_uses_t uses;
  // Per source node. pending: the node's value is transpose(base, perm),
  // base a node of the new graph (made in the emit sweep); for an
  // original transpose, base is its operand's; for a moved elementwise
  // op, base is the op over its operands' bases.
  bool* pending;
  bool* moved;   // an elementwise op moved below its operands' transposes
  bool* cancel;  // a transpose that undoes its pending operand
  bool* useful;  // pending, and on a chain that ends in a cancel
  int64_t (*perm)[TJ_MAX_RANK];
  uint32_t* base;      // new-graph node (emit sweep)
  uint32_t* realized;  // new-graph transpose(base, perm); NONE until made
  uint32_t num_moved;
} layout_t;

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

// Whether every user of pending node |j| but the transposes that undo it
// is |e| (a graph output counts as a user of its own).
static bool only_user(const layout_t* l, uint32_t j, uint32_t e) {
  if (l->uses.is_output[j]) return false;
  for (uint32_t k = l->uses.offsets[j]; k < l->uses.offsets[j + 1]; ++k) {
    uint32_t u = l->uses.users[k];
    if (u != e && !undoes(l, u, j)) return false;
  }
  return true;
}

static bool same_dims(const tj_node_t* a, const tj_node_t* b) {
  if (a->rank != b->rank) return false;
  for (int32_t k = 0; k < a->rank; ++k)
    if (a->dims[k] != b->dims[k]) return false;
  return true;
}

// Whether operand |o| of elementwise |e| is a small broadcast one: of a
// rank no larger, not of e's shape, at most 1/16 of e's bytes.
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
  OPERAND_MOVED,  // pending, e's shape, no other user: its base
  OPERAND_TWIN,   // e's shape, a transpose of it in the graph (twin_of)
  OPERAND_SMALL,  // a small broadcast operand, viewed (small_view)
  OPERAND_STUCK,  // none of these: e does not move
} operand_kind_t;

// How operand |o| of elementwise |e| goes along when e moves to the layout
// of perm |p| (NULL: only whether it is OPERAND_MOVED).
static operand_kind_t operand_kind(const layout_t* l, uint32_t o, uint32_t e,
                                   const int64_t* p) {
  const tj_node_t* en = &l->g->nodes[e];
  const bool full = same_dims(&l->g->nodes[o], en);
  if (full && l->pending[o] && only_user(l, o, e)) {
    if (!p || memcmp(l->perm[o], p, sizeof(int64_t) * (size_t)en->rank) == 0)
      return OPERAND_MOVED;
    return OPERAND_STUCK;
  }
  if (!p) return OPERAND_STUCK;
  if (full && !l->pending[o] && twin_of(l, o, e, p) != TJ_NODE_NONE)
    return OPERAND_TWIN;
  return small_operand(l, o, e) ? OPERAND_SMALL : OPERAND_STUCK;
}

// Whether elementwise |e| moves below its operands' transposes: at least
// one operand is OPERAND_MOVED, whose perm the others follow, and none is
// OPERAND_STUCK.
static bool movable(layout_t* l, uint32_t e) {
  const tj_node_t* n = &l->g->nodes[e];
  if (!tj_op_is_elementwise(n->op) || n->rank < 2) return false;
  const int64_t* p = NULL;
  for (uint32_t k = 0; k < n->num_operands && !p; ++k) {
    uint32_t o = n->operands[k];
    if (o == TJ_NODE_NONE) return false;
    if (operand_kind(l, o, e, NULL) == OPERAND_MOVED) p = l->perm[o];
  }
  if (!p) return false;
  for (uint32_t k = 0; k < n->num_operands; ++k) {
    if (n->operands[k] == TJ_NODE_NONE ||
        operand_kind(l, n->operands[k], e, p) == OPERAND_STUCK)
      return false;
  }
  memcpy(l->perm[e], p, sizeof(l->perm[e]));
  return true;
}

// The forward sweep: which nodes are pending, moved or cancelling.
static void analyze(layout_t* l) {
  const tj_graph_t* g = l->g;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    const tj_node_t* n = &g->nodes[i];
    if (n->op == TJ_OP_TRANSPOSE) {
      uint32_t j = n->operands[0];
      if (l->pending[j] && undoes(l, i, j)) {
        l->cancel[i] = true;
        continue;
      }
      l->pending[i] = (int32_t)n->attrs.num_ints == n->rank;
      for (int32_t k = 0; k < n->rank && l->pending[i]; ++k)
        l->perm[i][k] = n->attrs.ints[k];
    } else if (movable(l, i)) {
      l->pending[i] = l->moved[i] = true;
    }
  }
}

// The backward sweep: a pending node is useful when a user cancels it or
// is a useful move that takes it as OPERAND_MOVED, and a move is useful
// too when it joins two such operands into one transposed value (a
// residual add whose both sides were transposed). A move's operands are
// then useful, and a useless move is not made (its users saw it as
// useless: usefulness flows from users to operands only).
static void keep_useful(layout_t* l) {
  const tj_graph_t* g = l->g;
  for (uint32_t i = g->num_nodes; i-- > 0;) {
    if (!l->pending[i]) continue;
    if (l->moved[i]) {
      uint32_t joined = 0;
      const tj_node_t* n = &g->nodes[i];
      for (uint32_t k = 0; k < n->num_operands; ++k)
        joined +=
            operand_kind(l, n->operands[k], i, l->perm[i]) == OPERAND_MOVED;
      if (joined >= 2) l->useful[i] = true;
    }
    for (uint32_t k = l->uses.offsets[i]; k < l->uses.offsets[i + 1]; ++k) {
      uint32_t u = l->uses.users[k];
      if (l->cancel[u] || (l->moved[u] && l->useful[u] &&
                           operand_kind(l, i, u, l->perm[u]) == OPERAND_MOVED))
        l->useful[i] = true;
    }
  }
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    if (l->moved[i] && !l->useful[i]) l->moved[i] = false;
    if (l->moved[i]) ++l->num_moved;
  }
}

// The new-graph node holding source node |j|'s value as it is: a useful
// pending node's transpose(base, perm), made once where something reads
// it (an original transpose whose every reader moved or cancelled is
// made never).
static tj_status_t value_of(layout_t* l, tj_rewriter_t* rw, uint32_t j,
                            uint32_t* out) {
  if (!(l->pending[j] && l->useful[j])) {
    *out = rw->map[j];
    return NULL;
  }
  if (l->realized[j] == TJ_NODE_NONE) {
    tj_attrs_t attrs;
    memset(&attrs, 0, sizeof(attrs));
    attrs.ints = l->perm[j];
    attrs.num_ints = (uint32_t)l->g->nodes[j].rank;
    TJ_RETURN_IF_ERROR(tj_rewriter_emit(rw, TJ_OP_TRANSPOSE, 1, &l->base[j],
                                        &attrs, l->g->nodes[j].dtype, 0, NULL,
                                        &l->realized[j]));
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
  for (int32_t k = 0; k < r; ++k) inverse[l->perm[e][k]] = k;
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
  if (l->moved[i]) {
    uint32_t ops[8];
    if (n->num_operands > TJ_ARRAY_SIZE(ops))
      return tj_internal("layout: %u operands", n->num_operands);
    for (uint32_t k = 0; k < n->num_operands; ++k) {
      uint32_t o = n->operands[k];
      switch (operand_kind(l, o, i, l->perm[i])) {
        case OPERAND_MOVED:
          ops[k] = l->base[o];
          break;
        case OPERAND_TWIN:
          TJ_RETURN_IF_ERROR(
              value_of(l, rw, twin_of(l, o, i, l->perm[i]), &ops[k]));
          break;
        case OPERAND_SMALL:
          TJ_RETURN_IF_ERROR(small_view(l, rw, o, i, &ops[k]));
          break;
        case OPERAND_STUCK:
          return tj_internal("layout: operand %%%u of moved %%%u", o, i);
      }
    }
    return tj_rewriter_emit(rw, n->op, n->num_operands, ops, &n->attrs,
                            n->dtype, 0, NULL, &l->base[i]);
  }
  uint32_t ops[16];
  uint32_t* p = ops;
  if (n->num_operands > TJ_ARRAY_SIZE(ops)) {
    p = tj_alloc(rw->allocator, sizeof(uint32_t) * n->num_operands);
    if (!p) return tj_status_oom();
  }
  tj_status_t status = NULL;
  for (uint32_t k = 0; k < n->num_operands && !status; ++k) {
    p[k] = TJ_NODE_NONE;
    if (n->operands[k] != TJ_NODE_NONE)
      status = value_of(l, rw, n->operands[k], &p[k]);
  }
  if (!status) status = tj_rewriter_copy(rw, i, p, &rw->map[i]);
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
  l.base = tj_alloc(a, n * sizeof(uint32_t));
  l.realized = tj_alloc(a, n * sizeof(uint32_t));
  tj_status_t status = NULL;
  if (!l.pending || !l.moved || !l.cancel || !l.useful || !l.perm || !l.base ||
      !l.realized) {
    status = tj_status_oom();
  } else {
    for (uint32_t i = 0; i < n; ++i) l.base[i] = l.realized[i] = TJ_NODE_NONE;
    analyze(&l);
    keep_useful(&l);
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
  tj_free(a, l.base, l.base ? n * sizeof(uint32_t) : 0);
  tj_free(a, l.realized, l.realized ? n * sizeof(uint32_t) : 0);
  tj_uses_deinitialize(&l.uses);
  return status;
}
