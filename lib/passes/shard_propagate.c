// Sharding propagation (target-free): from the layouts of a graph's inputs
// over a device mesh to a per-device program (lib/passes/shard_plan.h).
//
// The graph is decomposed first (core ops only). Then, in topological
// order, each node picks its result layout from its operands' and the
// layout it wants of each operand:
//  - elementwise ops keep the splits of non-broadcast dims; add/sub of
//    partial sums, neg, and mul/div of a partial sum by a whole value stay
//    partial sums;
//  - matmul: rows split (x's M) and columns split (w's N, column-parallel)
//    carry over; a split contraction dim (row-parallel) gives a partial sum
//    over that axis, the other operand sliced to match;
//  - reductions keep the splits of the dims they keep; a sum over a split
//    dim becomes a partial sum; sums and means of partial sums stay partial;
//  - reshape keeps a split when the flat range of each block is the same
//    before and after (equal constant prefix products, divisible target
//    dim); transpose and broadcast_to move splits with their dims; a slice
//    keeps splits of dims it takes whole; concat of dims other than its axis;
//  - anything else takes its operands whole.
// Where an operand's layout is not the one wanted, collectives move it:
// a partial sum becomes whole by all-reduce, or by reduce-scatter when the
// use wants it split over the same axis (half the bytes of an all-reduce);
// a split dim wanted whole is all-gathered; a whole dim wanted split is
// sliced locally (no communication). Every device runs the same program:
// compute segments (graphs of the local shapes) separated by those steps.

#include <stdio.h>
#include <string.h>

#include "lib/passes/shard_plan.h"

typedef struct slot_aux_t {
  uint32_t seg_node;  // node in the open segment, or TJ_NODE_NONE
  bool made;          // computed in the open segment (not imported)
  uint32_t owner;     // the plan graph node whose value it holds
} slot_aux_t;

typedef struct alt_t {
  uint32_t node, slot;
} alt_t;

typedef struct prop_t {
  tj_pass_ctx_t* ctx;
  const tj_shard_request_t* req;
  tj_shard_plan_t* plan;
  const tj_graph_t* g;
  tj_allocator_t a;
  uint32_t* node_slot;
  uint32_t* last_use;   // per node: last user's index (num_nodes: output)
  uint32_t* num_users;  // per node: users (an output counts as one)
  uint32_t* one_user;   // per node: its last user
  slot_aux_t* aux;
  uint32_t aux_capacity;
  alt_t* alts;
  uint32_t num_alts, alt_capacity;
  bool open;
  tj_rewriter_t rw;
  uint32_t* seg_in;
  uint32_t num_seg_in, seg_in_capacity;
  int64_t hints[TJ_MAX_SYMBOLS];
} prop_t;

static tj_shard_layout_t layout_whole(void) {
  tj_shard_layout_t l;
  memset(l.split, -1, sizeof(l.split));
  l.partial = -1;
  return l;
}

static bool layout_equal(const tj_shard_layout_t* x, const tj_shard_layout_t* y,
                         int32_t rank) {
  if (x->partial != y->partial) return false;
  for (int32_t d = 0; d < rank; ++d) {
    if (x->split[d] != y->split[d]) return false;
  }
  return true;
}

//===--- sizes ---===//

static int64_t value_bytes(const prop_t* p, tj_dtype_t dtype, int32_t rank,
                           const int64_t* dims) {
  int64_t total = (int64_t)tj_dtype_size(dtype);
  for (int32_t d = 0; d < rank; ++d) {
    int64_t v = dims[d];
    if (!tj_dim_is_const(v)) {
      tj_status_t s = tj_dim_eval(&p->g->dims, v, p->hints, &v);
      if (s) {
        tj_status_free(s);
        return 0;
      }
    }
    if (tj_mul_overflow_i64(total, v, &total)) return INT64_MAX / 4;
  }
  return total;
}

static int64_t slot_bytes(const prop_t* p, uint32_t slot) {
  const tj_shard_slot_t* s = &p->plan->slots[slot];
  return value_bytes(p, s->dtype, s->rank, s->dims);
}

// The local dims of node |node| under |layout|.
static tj_status_t local_dims(const prop_t* p, uint32_t node,
                              const tj_shard_layout_t* layout, int64_t* out) {
  const tj_node_t* n = &p->g->nodes[node];
  for (int32_t d = 0; d < n->rank; ++d) {
    out[d] = n->dims[d];
    int32_t axis = layout->split[d];
    if (axis < 0) continue;
    int64_t size = p->plan->axis_sizes[axis];
    if (!tj_dim_is_const(out[d]) || out[d] % size) {
      return tj_internal("shard: node %%%u dim %d cannot be split over %s",
                         node, d, p->plan->axis_names[axis]);
    }
    out[d] /= size;
  }
  return NULL;
}

static bool divisible(const prop_t* p, int64_t dim, int32_t axis) {
  return tj_dim_is_const(dim) && dim % p->plan->axis_sizes[axis] == 0;
}

//===--- slots and steps ---===//

static tj_status_t new_slot(prop_t* p, uint32_t owner,
                            const tj_shard_layout_t* layout, uint32_t* out) {
  tj_shard_plan_t* plan = p->plan;
  TJ_RETURN_IF_ERROR(tj_array_reserve(p->a, (void**)&plan->slots,
                                      &plan->slot_capacity, plan->num_slots + 1,
                                      sizeof(tj_shard_slot_t)));
  if (p->aux_capacity < plan->slot_capacity) {
    slot_aux_t* aux =
        tj_realloc(p->a, p->aux, sizeof(slot_aux_t) * p->aux_capacity,
                   sizeof(slot_aux_t) * plan->slot_capacity);
    if (!aux) return tj_status_oom();
    p->aux = aux;
    p->aux_capacity = plan->slot_capacity;
  }
  const tj_node_t* n = &p->g->nodes[owner];
  tj_shard_slot_t* s = &plan->slots[plan->num_slots];
  memset(s, 0, sizeof(*s));
  s->dtype = n->dtype;
  s->rank = n->rank;
  s->layout = *layout;
  TJ_RETURN_IF_ERROR(local_dims(p, owner, layout, s->dims));
  p->aux[plan->num_slots].seg_node = TJ_NODE_NONE;
  p->aux[plan->num_slots].made = false;
  p->aux[plan->num_slots].owner = owner;
  *out = plan->num_slots++;
  return NULL;
}

static tj_status_t push_step(prop_t* p, const tj_shard_step_t* step) {
  tj_shard_plan_t* plan = p->plan;
  TJ_RETURN_IF_ERROR(tj_array_reserve(p->a, (void**)&plan->steps,
                                      &plan->step_capacity, plan->num_steps + 1,
                                      sizeof(tj_shard_step_t)));
  plan->steps[plan->num_steps++] = *step;
  return NULL;
}

//===--- segments ---===//

static tj_status_t seg_open(prop_t* p) {
  if (p->open) return NULL;
  TJ_RETURN_IF_ERROR(tj_rewriter_begin_bare(&p->rw, p->g));
  p->open = true;
  p->num_seg_in = 0;
  for (uint32_t i = 0; i < p->plan->num_slots; ++i) {
    p->aux[i].seg_node = TJ_NODE_NONE;
    p->aux[i].made = false;
  }
  return NULL;
}

// The open segment's node for |slot|, importing it as an input if needed.
static tj_status_t seg_get(prop_t* p, uint32_t slot, uint32_t* out) {
  if (p->aux[slot].seg_node != TJ_NODE_NONE) {
    *out = p->aux[slot].seg_node;
    return NULL;
  }
  const tj_shard_slot_t* s = &p->plan->slots[slot];
  int64_t dims[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(tj_rewriter_dims(&p->rw, s->rank, s->dims, dims));
  char name[24];
  snprintf(name, sizeof(name), "s%u", slot);
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_INPUT;
  desc.dtype = s->dtype;
  desc.rank = s->rank;
  desc.dims = dims;
  desc.attrs.name = name;
  TJ_RETURN_IF_ERROR(tj_array_reserve(p->a, (void**)&p->seg_in,
                                      &p->seg_in_capacity, p->num_seg_in + 1,
                                      sizeof(uint32_t)));
  TJ_RETURN_IF_ERROR(tj_rewriter_append(&p->rw, &desc, out));
  p->seg_in[p->num_seg_in++] = slot;
  p->aux[slot].seg_node = *out;
  return NULL;
}

// Whether the segment graph |g| may run in row chunks of dim 0; the symbol.
static int32_t chunk_symbol(const tj_graph_t* g) {
  int32_t sym = -1;
  int64_t sdim = 0;
  for (uint32_t i = 0; i < g->num_outputs && sym < 0; ++i) {
    const tj_node_t* n = &g->nodes[g->outputs[i].node];
    if (n->rank > 0) {
      sym = tj_dim_as_symbol(&g->dims, n->dims[0]);
      sdim = n->dims[0];
    }
  }
  if (sym < 0) return -1;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    const tj_node_t* n = &g->nodes[i];
    bool has = false;
    for (int32_t d = 0; d < n->rank; ++d) {
      if (!tj_dim_is_const(n->dims[d])) {
        if (d != 0 || n->dims[d] != sdim) return -1;
        has = true;
      }
    }
    bool operand_has = false;
    for (uint32_t k = 0; k < n->num_operands; ++k) {
      uint32_t o = n->operands[k];
      if (o == TJ_NODE_NONE) continue;
      const tj_node_t* on = &g->nodes[o];
      if (on->rank > 0 && on->dims[0] == sdim) {
        operand_has = true;
        if (!has) return -1;  // rows folded or moved
        bool same_rank = on->rank == n->rank;
        if (n->op == TJ_OP_MATMUL) {
          if (k == 1 && (n->rank < 3 || !same_rank)) return -1;
          if (k == 0 && n->rank > 2 && !same_rank) return -1;
        } else if (tj_op_info(n->op)->kind == TJ_OP_KIND_REDUCTION) {
          if (n->attrs.num_ints && n->attrs.ints[0] == 0) return -1;
        } else if (n->op == TJ_OP_TRANSPOSE) {
          if (n->attrs.ints[0] != 0) return -1;
        } else if (n->op == TJ_OP_RESHAPE) {
          // rows of constant trailing size stay rows
        } else if (n->op == TJ_OP_SLICE) {
          // rows stay rows where dim 0 is kept whole (start 0, step 1;
          // layer_norm's shift reads each row's first element)
          const int64_t* sl = n->attrs.ints;
          if (!same_rank || n->dims[0] != sdim || sl[0] != 0 ||
              sl[2 * n->rank] != 1)
            return -1;
        } else if (tj_op_is_elementwise(n->op) || n->op == TJ_OP_BROADCAST_TO) {
          if (!same_rank) return -1;
        } else {
          return -1;
        }
      }
    }
    if (has && !operand_has) {
      if (n->op == TJ_OP_IOTA && n->attrs.axis == 0) return -1;
      if (n->op != TJ_OP_INPUT && n->op != TJ_OP_FULL && n->op != TJ_OP_IOTA) {
        return -1;
      }
    }
  }
  return sym;
}

// Whether slot |slot|'s value is still needed at node index |cur|.
static bool needed(const prop_t* p, uint32_t slot, uint32_t cur) {
  return p->last_use[p->aux[slot].owner] >= cur;
}

static tj_status_t seg_close(prop_t* p, uint32_t cur) {
  if (!p->open) return NULL;
  p->open = false;
  uint32_t n = 0;
  for (uint32_t i = 0; i < p->plan->num_slots; ++i) {
    if (p->aux[i].made && needed(p, i, cur)) ++n;
  }
  if (n == 0) {
    tj_rewriter_abandon(&p->rw);
    return NULL;
  }
  tj_shard_step_t step;
  memset(&step, 0, sizeof(step));
  step.kind = TJ_SHARD_STEP_COMPUTE;
  step.chunk_symbol = -1;
  step.num_out = n;
  step.num_in = p->num_seg_in;
  uint32_t* nodes = tj_alloc(p->a, sizeof(uint32_t) * n);
  char* names = tj_alloc(p->a, (size_t)24 * n);
  const char** name_ptrs = tj_alloc(p->a, sizeof(char*) * n);
  step.out_slots = tj_alloc(p->a, sizeof(uint32_t) * n);
  step.in_slots =
      step.num_in ? tj_alloc(p->a, sizeof(uint32_t) * step.num_in) : NULL;
  tj_status_t status = NULL;
  if (!nodes || !names || !name_ptrs || !step.out_slots ||
      (step.num_in && !step.in_slots)) {
    status = tj_status_oom();
  }
  if (!status) {
    uint32_t k = 0;
    for (uint32_t i = 0; i < p->plan->num_slots; ++i) {
      if (!p->aux[i].made || !needed(p, i, cur)) continue;
      nodes[k] = p->aux[i].seg_node;
      snprintf(names + 24 * k, 24, "s%u", i);
      name_ptrs[k] = names + 24 * k;
      step.out_slots[k++] = i;
    }
    if (step.num_in) {
      memcpy(step.in_slots, p->seg_in, sizeof(uint32_t) * step.num_in);
    }
    status = tj_rewriter_finish_outputs(
        &p->rw, false, n, nodes, (const char* const*)name_ptrs, &step.graph);
  } else {
    tj_rewriter_abandon(&p->rw);
  }
  if (!status) {
    step.chunk_symbol = chunk_symbol(step.graph);
    status = push_step(p, &step);
  }
  if (status) {
    tj_graph_destroy(step.graph);
    if (step.out_slots) tj_free(p->a, step.out_slots, sizeof(uint32_t) * n);
    if (step.in_slots) {
      tj_free(p->a, step.in_slots, sizeof(uint32_t) * step.num_in);
    }
  }
  if (nodes) tj_free(p->a, nodes, sizeof(uint32_t) * n);
  if (names) tj_free(p->a, names, (size_t)24 * n);
  if (name_ptrs) tj_free(p->a, (void*)name_ptrs, sizeof(char*) * n);
  return status;
}

//===--- moving a value between layouts ---===//

static tj_status_t apply_step(prop_t* p, tj_shard_step_kind_t kind,
                              uint32_t* slot, int32_t axis, int32_t dim,
                              uint32_t cur) {
  TJ_RETURN_IF_ERROR(seg_close(p, cur));
  uint32_t src = *slot;
  tj_shard_layout_t l = p->plan->slots[src].layout;
  int32_t rank = p->plan->slots[src].rank;
  int64_t n = p->plan->axis_sizes[axis];
  int64_t bytes = slot_bytes(p, src);
  switch (kind) {
    case TJ_SHARD_STEP_ALL_REDUCE:
      l.partial = -1;
      p->plan->comm_bytes += 2 * (n - 1) * (bytes / n);
      break;
    case TJ_SHARD_STEP_REDUCE_SCATTER:
      l.partial = -1;
      l.split[dim] = (int8_t)axis;
      p->plan->comm_bytes += (n - 1) * (bytes / n);
      break;
    case TJ_SHARD_STEP_ALL_GATHER:
      l.split[dim] = -1;
      p->plan->comm_bytes += (n - 1) * bytes;
      break;
    case TJ_SHARD_STEP_SLICE:
      l.split[dim] = (int8_t)axis;
      break;
    case TJ_SHARD_STEP_COMPUTE:
      return tj_internal("shard: compute is not a move");
  }
  (void)rank;
  uint32_t dst;
  TJ_RETURN_IF_ERROR(new_slot(p, p->aux[src].owner, &l, &dst));
  p->plan->value_bytes += slot_bytes(p, dst);
  tj_shard_step_t step;
  memset(&step, 0, sizeof(step));
  step.kind = kind;
  step.chunk_symbol = -1;
  step.src = src;
  step.dst = dst;
  step.axis = axis;
  step.dim = dim;
  TJ_RETURN_IF_ERROR(push_step(p, &step));
  *slot = dst;
  return NULL;
}

// A slot holding node |node|'s value laid out as |want|, moving it (and
// remembering the move) if needed.
static tj_status_t ensure(prop_t* p, uint32_t node,
                          const tj_shard_layout_t* want, uint32_t cur,
                          uint32_t* out) {
  uint32_t slot = p->node_slot[node];
  int32_t rank = p->g->nodes[node].rank;
  if (layout_equal(&p->plan->slots[slot].layout, want, rank)) {
    *out = slot;
    return NULL;
  }
  for (uint32_t i = 0; i < p->num_alts; ++i) {
    if (p->alts[i].node == node &&
        layout_equal(&p->plan->slots[p->alts[i].slot].layout, want, rank)) {
      *out = p->alts[i].slot;
      return NULL;
    }
  }
  tj_shard_layout_t have = p->plan->slots[slot].layout;
  if (want->partial >= 0 && want->partial != have.partial) {
    return tj_internal("shard: node %%%u cannot become a partial sum", node);
  }
  if (have.partial >= 0 && want->partial != have.partial) {
    int32_t axis = have.partial;
    int32_t scatter = -1;
    for (int32_t d = 0; d < rank && scatter < 0; ++d) {
      if (want->split[d] == axis && have.split[d] < 0) scatter = d;
    }
    // reduce-scatter sends (n-1)/n of the buffer, all-reduce twice that.
    TJ_RETURN_IF_ERROR(apply_step(
        p,
        scatter >= 0 ? TJ_SHARD_STEP_REDUCE_SCATTER : TJ_SHARD_STEP_ALL_REDUCE,
        &slot, axis, scatter, cur));
    have = p->plan->slots[slot].layout;
  }
  for (int32_t d = 0; d < rank; ++d) {
    if (have.split[d] >= 0 && want->split[d] != have.split[d]) {
      TJ_RETURN_IF_ERROR(apply_step(p, TJ_SHARD_STEP_ALL_GATHER, &slot,
                                    have.split[d], d, cur));
      have = p->plan->slots[slot].layout;
    }
  }
  for (int32_t d = 0; d < rank; ++d) {
    if (want->split[d] >= 0 && have.split[d] != want->split[d]) {
      TJ_RETURN_IF_ERROR(
          apply_step(p, TJ_SHARD_STEP_SLICE, &slot, want->split[d], d, cur));
      have = p->plan->slots[slot].layout;
    }
  }
  TJ_RETURN_IF_ERROR(tj_array_reserve(p->a, (void**)&p->alts, &p->alt_capacity,
                                      p->num_alts + 1, sizeof(alt_t)));
  p->alts[p->num_alts].node = node;
  p->alts[p->num_alts++].slot = slot;
  *out = slot;
  return NULL;
}

//===--- the rules ---===//

static const tj_shard_layout_t* have_of(const prop_t* p, uint32_t node) {
  return &p->plan->slots[p->node_slot[node]].layout;
}

// Where a partial sum over |axis| must become whole before elementwise node
// |node|: the dim to reduce-scatter along instead of all-reducing, when the
// chain of single-user elementwise ops of the same shape from |node| ends
// in an output that wants that dim split over |axis| (half the bytes, and
// the ops between run on shards); -1 otherwise.
static int32_t scatter_dim(const prop_t* p, uint32_t node, int32_t axis) {
  const tj_graph_t* g = p->g;
  const tj_node_t* n = &g->nodes[node];
  for (uint32_t cur = node;;) {
    for (uint32_t i = 0; i < g->num_outputs; ++i) {
      if (g->outputs[i].node != cur) continue;
      const tj_shard_layout_t* want = &p->req->output_layouts[i];
      for (int32_t d = 0; d < n->rank; ++d) {
        if (want->split[d] == axis && divisible(p, n->dims[d], axis)) return d;
      }
      return -1;
    }
    if (p->num_users[cur] != 1) return -1;
    const tj_node_t* u = &g->nodes[p->one_user[cur]];
    if (!tj_op_is_elementwise(u->op) || u->rank != n->rank) return -1;
    for (int32_t d = 0; d < n->rank; ++d) {
      if (u->dims[d] != n->dims[d]) return -1;
    }
    cur = p->one_user[cur];
  }
}

// Elementwise: splits of non-broadcast dims; linear ops keep partial sums.
static void rule_elementwise(const prop_t* p, const tj_node_t* n,
                             tj_shard_layout_t* want, tj_shard_layout_t* res) {
  bool used[TJ_SHARD_MAX_AXES] = {false, false};
  int32_t partial = -1;
  uint32_t num_partial = 0;
  for (uint32_t k = 0; k < n->num_operands; ++k) {
    int8_t pa = have_of(p, n->operands[k])->partial;
    if (pa >= 0) {
      ++num_partial;
      partial = pa;
    }
  }
  if (num_partial) {
    bool ok = false;
    if (n->op == TJ_OP_ADD || n->op == TJ_OP_SUB) {
      ok = num_partial == 2 && have_of(p, n->operands[0])->partial ==
                                   have_of(p, n->operands[1])->partial;
    } else if (n->op == TJ_OP_NEG) {
      ok = true;
    } else if (n->op == TJ_OP_MUL) {
      ok = num_partial == 1;
    } else if (n->op == TJ_OP_DIV) {
      ok = num_partial == 1 && have_of(p, n->operands[0])->partial >= 0;
    }
    if (!ok) {
      // Reduced here: scattered when the result is wanted split.
      int32_t d = scatter_dim(p, (uint32_t)(n - p->g->nodes), partial);
      if (d >= 0) {
        res->split[d] = (int8_t)partial;
        used[partial] = true;
      }
      partial = -1;
    }
  }
  res->partial = (int8_t)partial;
  if (partial >= 0) used[partial] = true;
  for (int32_t d = 0; d < n->rank; ++d) {
    if (res->split[d] >= 0) continue;
    for (uint32_t k = 0; k < n->num_operands && res->split[d] < 0; ++k) {
      const tj_node_t* o = &p->g->nodes[n->operands[k]];
      int32_t od = d - (n->rank - o->rank);
      if (od < 0 || o->dims[od] != n->dims[d]) continue;
      int8_t axis = have_of(p, n->operands[k])->split[od];
      if (axis >= 0 && !used[axis]) {
        res->split[d] = axis;
        used[axis] = true;
      }
    }
  }
  for (uint32_t k = 0; k < n->num_operands; ++k) {
    const tj_node_t* o = &p->g->nodes[n->operands[k]];
    want[k] = layout_whole();
    for (int32_t od = 0; od < o->rank; ++od) {
      int32_t d = od + (n->rank - o->rank);
      if (o->dims[od] == n->dims[d]) want[k].split[od] = res->split[d];
    }
    if (partial >= 0 && have_of(p, n->operands[k])->partial == partial) {
      want[k].partial = (int8_t)partial;
    }
  }
}

static void rule_matmul(const prop_t* p, const tj_node_t* n,
                        tj_shard_layout_t* want, tj_shard_layout_t* res) {
  const tj_node_t* a = &p->g->nodes[n->operands[0]];
  const tj_node_t* b = &p->g->nodes[n->operands[1]];
  const tj_shard_layout_t* la = have_of(p, n->operands[0]);
  const tj_shard_layout_t* lb = have_of(p, n->operands[1]);
  int32_t r = n->rank, ra = a->rank, rb = b->rank;
  bool used[TJ_SHARD_MAX_AXES] = {false, false};
  want[0] = layout_whole();
  want[1] = layout_whole();
  int8_t k = la->split[ra - 1] >= 0 ? la->split[ra - 1] : lb->split[rb - 2];
  if (k >= 0) {
    // Row-parallel: a partial sum over k, both sides split along K.
    res->partial = k;
    used[k] = true;
    want[0].split[ra - 1] = k;
    want[1].split[rb - 2] = k;
  }
  int8_t m = la->split[ra - 2];
  if (m >= 0 && !used[m]) {
    res->split[r - 2] = m;
    used[m] = true;
    want[0].split[ra - 2] = m;
  }
  int8_t nn = lb->split[rb - 1];
  if (nn >= 0 && !used[nn]) {
    res->split[r - 1] = nn;
    used[nn] = true;
    want[1].split[rb - 1] = nn;
  }
  for (int32_t d = 0; d < r - 2; ++d) {
    for (int32_t side = 0; side < 2 && res->split[d] < 0; ++side) {
      const tj_node_t* o = side ? b : a;
      const tj_shard_layout_t* lo = side ? lb : la;
      int32_t od = d - (r - o->rank);
      if (od < 0 || o->dims[od] != n->dims[d]) continue;
      if (lo->split[od] >= 0 && !used[lo->split[od]]) {
        res->split[d] = lo->split[od];
        used[lo->split[od]] = true;
      }
    }
    for (int32_t side = 0; side < 2; ++side) {
      const tj_node_t* o = side ? b : a;
      int32_t od = d - (r - o->rank);
      if (od >= 0 && o->dims[od] == n->dims[d]) {
        want[side].split[od] = res->split[d];
      }
    }
  }
}

static void rule_reduce(const prop_t* p, const tj_node_t* n,
                        tj_shard_layout_t* want, tj_shard_layout_t* res) {
  const tj_node_t* x = &p->g->nodes[n->operands[0]];
  const tj_shard_layout_t* lx = have_of(p, n->operands[0]);
  bool reduced[TJ_MAX_RANK] = {false};
  for (uint32_t i = 0; i < n->attrs.num_ints; ++i) {
    reduced[n->attrs.ints[i]] = true;
  }
  bool linear = n->op == TJ_OP_SUM || n->op == TJ_OP_MEAN;
  want[0] = layout_whole();
  if (linear && lx->partial >= 0) {
    res->partial = lx->partial;
    want[0].partial = lx->partial;
  }
  int32_t e = 0;
  for (int32_t d = 0; d < x->rank; ++d) {
    if (reduced[d]) {
      if (n->op == TJ_OP_SUM && lx->split[d] >= 0 && res->partial < 0) {
        res->partial = lx->split[d];
        want[0].split[d] = lx->split[d];
      }
      if (n->attrs.keepdims) ++e;
      continue;
    }
    want[0].split[d] = lx->split[d];
    res->split[e++] = lx->split[d];
  }
}

// Equal constant products of dims [0, d) and [0, e)?
static bool same_prefix(const tj_node_t* in, int32_t d, const tj_node_t* out,
                        int32_t e) {
  if (d == e) {
    bool same = true;
    for (int32_t i = 0; i < d; ++i) same = same && in->dims[i] == out->dims[i];
    if (same) return true;
  }
  int64_t pi = 1, po = 1;
  for (int32_t i = 0; i < d; ++i) {
    if (!tj_dim_is_const(in->dims[i])) return false;
    pi *= in->dims[i];
  }
  for (int32_t i = 0; i < e; ++i) {
    if (!tj_dim_is_const(out->dims[i])) return false;
    po *= out->dims[i];
  }
  return pi == po && pi > 0;
}

static void rule_movement(const prop_t* p, const tj_node_t* n,
                          tj_shard_layout_t* want, tj_shard_layout_t* res) {
  const tj_node_t* x = &p->g->nodes[n->operands[0]];
  const tj_shard_layout_t* lx = have_of(p, n->operands[0]);
  want[0] = *lx;
  res->partial = lx->partial;
  switch (n->op) {
    case TJ_OP_RESHAPE:
      for (int32_t d = 0; d < x->rank; ++d) {
        if (lx->split[d] < 0) continue;
        int32_t found = -1;
        for (int32_t e = 0; e < n->rank && found < 0; ++e) {
          if (n->dims[e] != 1 && same_prefix(x, d, n, e) &&
              divisible(p, n->dims[e], lx->split[d])) {
            found = e;
          }
        }
        if (found >= 0) {
          res->split[found] = lx->split[d];
        } else {
          want[0].split[d] = -1;
        }
      }
      break;
    case TJ_OP_TRANSPOSE:
      for (int32_t j = 0; j < n->rank; ++j) {
        res->split[j] = lx->split[n->attrs.ints[j]];
      }
      break;
    case TJ_OP_BROADCAST_TO:
      for (int32_t d = 0; d < x->rank; ++d) {
        int32_t e = d + n->rank - x->rank;
        if (x->dims[d] == n->dims[e]) {
          res->split[e] = lx->split[d];
        } else {
          want[0].split[d] = -1;
        }
      }
      break;
    default:  // SLICE
      for (int32_t d = 0; d < x->rank; ++d) {
        const int64_t* ints = n->attrs.ints;
        bool whole = ints[d] == 0 && ints[x->rank + d] == x->dims[d] &&
                     ints[2 * x->rank + d] == 1;
        if (whole) {
          res->split[d] = lx->split[d];
        } else {
          want[0].split[d] = -1;
        }
      }
      break;
  }
}

static void rule_concat(const prop_t* p, const tj_node_t* n,
                        tj_shard_layout_t* want, tj_shard_layout_t* res) {
  const tj_shard_layout_t* l0 = have_of(p, n->operands[0]);
  for (int32_t d = 0; d < n->rank; ++d) {
    if (d != n->attrs.axis) res->split[d] = l0->split[d];
  }
  for (uint32_t k = 0; k < n->num_operands; ++k) {
    want[k] = *res;
    want[k].partial = -1;
  }
}

//===--- one node ---===//

static tj_status_t place_node(prop_t* p, uint32_t i) {
  const tj_node_t* n = &p->g->nodes[i];
  tj_shard_layout_t res = layout_whole();
  tj_shard_layout_t want_small[4];
  tj_shard_layout_t* want = want_small;
  uint32_t num = n->num_operands;
  if (num > TJ_ARRAY_SIZE(want_small)) {
    want = tj_alloc(p->a, sizeof(tj_shard_layout_t) * num);
    if (!want) return tj_status_oom();
  }
  uint32_t slots_small[4];
  uint32_t* slots = slots_small;
  tj_status_t status = NULL;
  if (num > TJ_ARRAY_SIZE(slots_small)) {
    slots = tj_alloc(p->a, sizeof(uint32_t) * num);
    if (!slots) status = tj_status_oom();
  }
  bool any_none = false;
  for (uint32_t k = 0; k < num; ++k) {
    if (n->operands[k] == TJ_NODE_NONE) any_none = true;
  }
  tj_op_kind_t kind = tj_op_info(n->op)->kind;
  if (status || num == 0) {
  } else if (any_none) {
    for (uint32_t k = 0; k < num; ++k) want[k] = layout_whole();
  } else if (tj_op_is_elementwise(n->op)) {
    rule_elementwise(p, n, want, &res);
  } else if (n->op == TJ_OP_MATMUL && p->g->nodes[n->operands[0]].rank >= 2 &&
             p->g->nodes[n->operands[1]].rank >= 2) {
    rule_matmul(p, n, want, &res);
  } else if (kind == TJ_OP_KIND_REDUCTION) {
    rule_reduce(p, n, want, &res);
  } else if (n->op == TJ_OP_RESHAPE || n->op == TJ_OP_TRANSPOSE ||
             n->op == TJ_OP_BROADCAST_TO || n->op == TJ_OP_SLICE) {
    rule_movement(p, n, want, &res);
  } else if (n->op == TJ_OP_CONCAT) {
    rule_concat(p, n, want, &res);
  } else {
    for (uint32_t k = 0; k < num; ++k) want[k] = layout_whole();
  }
  // Operands first (moves may close the open segment), then the node.
  for (uint32_t k = 0; !status && k < num; ++k) {
    slots[k] = TJ_NODE_NONE;
    if (n->operands[k] == TJ_NODE_NONE) continue;
    status = ensure(p, n->operands[k], &want[k], i, &slots[k]);
  }
  if (!status) status = seg_open(p);
  uint32_t ops_small[4];
  uint32_t* ops = ops_small;
  if (!status && num > TJ_ARRAY_SIZE(ops_small)) {
    ops = tj_alloc(p->a, sizeof(uint32_t) * num);
    if (!ops) status = tj_status_oom();
  }
  for (uint32_t k = 0; !status && k < num; ++k) {
    ops[k] = TJ_NODE_NONE;
    if (slots[k] != TJ_NODE_NONE) status = seg_get(p, slots[k], &ops[k]);
  }
  uint32_t slot = 0;
  if (!status) status = new_slot(p, i, &res, &slot);
  if (!status) {
    int64_t gdims[TJ_MAX_RANK], dims[TJ_MAX_RANK];
    int64_t ints_small[3 * TJ_MAX_RANK];
    status = local_dims(p, i, &res, gdims);
    if (!status) status = tj_rewriter_dims(&p->rw, n->rank, gdims, dims);
    tj_node_desc_t desc;
    memset(&desc, 0, sizeof(desc));
    desc.op = n->op;
    desc.num_operands = num;
    desc.operands = ops;
    desc.dtype = n->dtype;
    desc.rank = n->rank;
    desc.dims = dims;
    desc.attrs = n->attrs;
    if (!status && n->op == TJ_OP_SLICE) {
      memcpy(ints_small, n->attrs.ints, sizeof(int64_t) * n->attrs.num_ints);
      for (int32_t d = 0; d < n->rank; ++d) {
        if (res.split[d] >= 0) ints_small[n->rank + d] = dims[d];
      }
      desc.attrs.ints = ints_small;
    }
    uint32_t node = TJ_NODE_NONE;
    if (!status) status = tj_rewriter_append(&p->rw, &desc, &node);
    if (!status) {
      const tj_node_t* made = &p->rw.dst->nodes[node];
      for (int32_t d = 0; d < n->rank && !status; ++d) {
        if (made->dims[d] != dims[d]) {
          status = tj_internal(
              "shard: node %%%u (%s): local dim %d disagrees with inference", i,
              tj_op_info(n->op)->name, d);
        }
      }
    }
    if (!status) {
      p->aux[slot].seg_node = node;
      p->aux[slot].made = true;
      p->node_slot[i] = slot;
      p->plan->value_bytes += slot_bytes(p, slot);
    }
  }
  if (ops != ops_small) tj_free(p->a, ops, sizeof(uint32_t) * num);
  if (slots != slots_small && slots) {
    tj_free(p->a, slots, sizeof(uint32_t) * num);
  }
  if (want != want_small) tj_free(p->a, want, sizeof(tj_shard_layout_t) * num);
  if (status) {
    status = tj_status_annotate(status, "shard: node %%%u (%s)", i,
                                tj_op_info(n->op)->name);
  }
  return status;
}

//===--- the pass ---===//

void tj_shard_plan_deinitialize(tj_shard_plan_t* plan) {
  if (!plan->allocator.fn && !plan->graph && !plan->steps) return;
  tj_allocator_t a = plan->allocator;
  for (uint32_t i = 0; i < plan->num_steps; ++i) {
    tj_shard_step_t* s = &plan->steps[i];
    tj_graph_destroy(s->graph);
    if (s->in_slots) tj_free(a, s->in_slots, sizeof(uint32_t) * s->num_in);
    if (s->out_slots) tj_free(a, s->out_slots, sizeof(uint32_t) * s->num_out);
  }
  if (plan->steps) {
    tj_free(a, plan->steps, sizeof(tj_shard_step_t) * plan->step_capacity);
  }
  if (plan->slots) {
    tj_free(a, plan->slots, sizeof(tj_shard_slot_t) * plan->slot_capacity);
  }
  if (plan->graph) {
    if (plan->input_slots) {
      tj_free(a, plan->input_slots, sizeof(uint32_t) * plan->graph->num_inputs);
    }
    if (plan->output_slots) {
      tj_free(a, plan->output_slots,
              sizeof(uint32_t) * plan->graph->num_outputs);
    }
  }
  for (int32_t i = 0; i < TJ_SHARD_MAX_AXES; ++i) {
    tj_free_string(a, (char*)plan->axis_names[i]);
  }
  tj_graph_destroy(plan->graph);
  memset(plan, 0, sizeof(*plan));
}

static tj_status_t propagate(prop_t* p) {
  const tj_graph_t* g = p->g;
  tj_shard_plan_t* plan = p->plan;
  uint32_t nn = g->num_nodes;
  p->node_slot = tj_alloc(p->a, sizeof(uint32_t) * (nn ? nn : 1));
  p->last_use = tj_calloc(p->a, nn ? nn : 1, sizeof(uint32_t));
  p->num_users = tj_calloc(p->a, nn ? nn : 1, sizeof(uint32_t));
  p->one_user = tj_calloc(p->a, nn ? nn : 1, sizeof(uint32_t));
  plan->input_slots =
      tj_alloc(p->a, sizeof(uint32_t) * (g->num_inputs ? g->num_inputs : 1));
  plan->output_slots = tj_alloc(p->a, sizeof(uint32_t) * g->num_outputs);
  if (!p->node_slot || !p->last_use || !p->num_users || !p->one_user ||
      !plan->input_slots || !plan->output_slots) {
    return tj_status_oom();
  }
  for (uint32_t i = 0; i < nn; ++i) {
    p->node_slot[i] = TJ_NODE_NONE;
    for (uint32_t k = 0; k < g->nodes[i].num_operands; ++k) {
      uint32_t o = g->nodes[i].operands[k];
      if (o == TJ_NODE_NONE) continue;
      p->last_use[o] = i;
      p->one_user[o] = i;
      ++p->num_users[o];
    }
  }
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    p->last_use[g->outputs[i].node] = nn;
    ++p->num_users[g->outputs[i].node];
  }
  for (uint32_t i = 0; i < g->num_inputs; ++i) {
    uint32_t node = g->inputs[i];
    TJ_RETURN_IF_ERROR(
        new_slot(p, node, &p->req->input_layouts[i], &plan->input_slots[i]));
    p->node_slot[node] = plan->input_slots[i];
    const tj_node_t* n = &g->nodes[node];
    int64_t b = slot_bytes(p, plan->input_slots[i]);
    plan->input_bytes += b;
    plan->value_bytes += b;
    plan->input_bytes_unsharded += value_bytes(p, n->dtype, n->rank, n->dims);
  }
  for (uint32_t i = 0; i < nn; ++i) {
    if (g->nodes[i].op == TJ_OP_INPUT) continue;
    TJ_RETURN_IF_ERROR(place_node(p, i));
  }
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    tj_status_t s = ensure(p, g->outputs[i].node, &p->req->output_layouts[i],
                           nn, &plan->output_slots[i]);
    if (s) {
      return tj_status_annotate(s, "shard: output \"%s\"", g->outputs[i].name);
    }
  }
  return seg_close(p, nn);
}

tj_status_t tj_shard_propagate(tj_pass_ctx_t* ctx, const tj_graph_t* graph,
                               const tj_shard_request_t* request,
                               tj_shard_plan_t* plan) {
  memset(plan, 0, sizeof(*plan));
  tj_allocator_t a = tj_context_allocator(graph->context);
  plan->allocator = a;
  plan->num_axes = request->num_axes;
  tj_status_t status = NULL;
  for (int32_t i = 0; i < request->num_axes; ++i) {
    plan->axis_sizes[i] = request->axis_sizes[i];
    plan->axis_names[i] = tj_strdup(a, request->axis_names[i]);
    if (!plan->axis_names[i]) status = tj_status_oom();
  }
  tj_graph_t* copy = NULL;
  if (!status) status = tj_graph_clone(graph, &copy);
  if (!status) {
    tj_plan_t pp;
    tj_plan_initialize(&pp, copy);
    status = tj_pipeline_run_list(ctx, &pp, "decompose,dce");
    plan->graph = pp.graph;
    pp.graph = NULL;
    tj_plan_deinitialize(&pp);
  }
  if (status) {
    tj_shard_plan_deinitialize(plan);
    return status;
  }
  prop_t p;
  memset(&p, 0, sizeof(p));
  p.ctx = ctx;
  p.req = request;
  p.plan = plan;
  p.g = plan->graph;
  p.a = a;
  for (uint32_t i = 0; i < TJ_MAX_SYMBOLS; ++i) {
    p.hints[i] = request->symbol_hints[i] > 0 ? request->symbol_hints[i]
                                              : TJ_PASS_DEFAULT_SYMBOL_HINT;
  }
  // dce keeps the inputs; the caller's inputs and outputs stay in order.
  if (p.g->num_inputs != graph->num_inputs ||
      p.g->num_outputs != graph->num_outputs) {
    status = tj_internal("shard: decompose changed the signature");
  }
  if (!status) status = propagate(&p);
  if (p.open) tj_rewriter_abandon(&p.rw);
  uint32_t nn = p.g->num_nodes ? p.g->num_nodes : 1;
  if (p.node_slot) tj_free(a, p.node_slot, sizeof(uint32_t) * nn);
  if (p.last_use) tj_free(a, p.last_use, sizeof(uint32_t) * nn);
  if (p.num_users) tj_free(a, p.num_users, sizeof(uint32_t) * nn);
  if (p.one_user) tj_free(a, p.one_user, sizeof(uint32_t) * nn);
  if (p.aux) tj_free(a, p.aux, sizeof(slot_aux_t) * p.aux_capacity);
  if (p.alts) tj_free(a, p.alts, sizeof(alt_t) * p.alt_capacity);
  if (p.seg_in) tj_free(a, p.seg_in, sizeof(uint32_t) * p.seg_in_capacity);
  if (status) tj_shard_plan_deinitialize(plan);
  return status;
}

//===--- printing ---===//

static const char* step_name(tj_shard_step_kind_t kind) {
  switch (kind) {
    case TJ_SHARD_STEP_COMPUTE:
      return "compute";
    case TJ_SHARD_STEP_ALL_REDUCE:
      return "all_reduce";
    case TJ_SHARD_STEP_ALL_GATHER:
      return "all_gather";
    case TJ_SHARD_STEP_REDUCE_SCATTER:
      return "reduce_scatter";
    case TJ_SHARD_STEP_SLICE:
      return "slice";
  }
  return "?";
}

typedef struct text_t {
  tj_allocator_t a;
  char* buf;
  size_t len, cap;
  bool oom;
} text_t;

static void text_add(text_t* t, const char* s) {
  size_t n = strlen(s);
  if (t->oom) return;
  if (t->len + n + 1 > t->cap) {
    size_t cap = t->cap ? t->cap : 256;
    while (cap < t->len + n + 1) cap *= 2;
    char* b = tj_realloc(t->a, t->buf, t->cap, cap);
    if (!b) {
      t->oom = true;
      return;
    }
    t->buf = b;
    t->cap = cap;
  }
  memcpy(t->buf + t->len, s, n + 1);
  t->len += n;
}

tj_status_t tj_shard_plan_print(const tj_shard_plan_t* plan, char** out_text) {
  *out_text = NULL;
  text_t t = {plan->allocator, NULL, 0, 0, false};
  char line[160];
  text_add(&t, "// inputs:");
  for (uint32_t i = 0; i < plan->graph->num_inputs; ++i) {
    snprintf(line, sizeof(line), " %s=%%s%u",
             plan->graph->nodes[plan->graph->inputs[i]].attrs.name,
             plan->input_slots[i]);
    text_add(&t, line);
  }
  text_add(&t, "\n");
  for (uint32_t i = 0; i < plan->num_steps && !t.oom; ++i) {
    const tj_shard_step_t* s = &plan->steps[i];
    if (s->kind != TJ_SHARD_STEP_COMPUTE) {
      if (s->kind == TJ_SHARD_STEP_ALL_REDUCE) {
        snprintf(line, sizeof(line), "%s %%s%u -> %%s%u over %s\n",
                 step_name(s->kind), s->src, s->dst, plan->axis_names[s->axis]);
      } else {
        snprintf(line, sizeof(line), "%s %%s%u -> %%s%u over %s dim=%d\n",
                 step_name(s->kind), s->src, s->dst, plan->axis_names[s->axis],
                 s->dim);
      }
      text_add(&t, line);
      continue;
    }
    snprintf(line, sizeof(line), "// segment %u%s\n", i,
             s->chunk_symbol >= 0 ? " (row chunks)" : "");
    text_add(&t, line);
    char* g = NULL;
    tj_status_t status = tj_graph_print(s->graph, &g);
    if (status) {
      if (t.buf) tj_free(t.a, t.buf, t.cap);
      return status;
    }
    text_add(&t, g);
    tj_context_free_string(s->graph->context, g);
  }
  text_add(&t, "// outputs:");
  for (uint32_t i = 0; i < plan->graph->num_outputs; ++i) {
    snprintf(line, sizeof(line), " %s=%%s%u", plan->graph->outputs[i].name,
             plan->output_slots[i]);
    text_add(&t, line);
  }
  text_add(&t, "\n");
  if (t.oom) {
    if (t.buf) tj_free(t.a, t.buf, t.cap);
    return tj_status_oom();
  }
  // Owned by the allocator: hand back an exactly sized copy for
  // tj_free_string.
  char* out = tj_strdup(t.a, t.buf);
  tj_free(t.a, t.buf, t.cap);
  if (!out) return tj_status_oom();
  *out_text = out;
  return NULL;
}
