// lib/passes/memplan.c
//
// Memory planning over the fused schedule (lib/passes/memplan.h describes
// the result). Liveness is counted in group positions. Arena values are
// placed greedily in execution order (TFLite's GREEDY_IN_ORDER with XLA's
// best-fit preference, made symbolic):
//   1. in place: take the slot of an input the group reads for the last
//      time, when the sizes are provably equal, the element sizes agree and
//      the group reads that input only through elementwise ops of the same
//      shape (XLA's CanShareOperandBufferWithUser, Inductor's
//      decide_inplace_update); never inside reduction or matmul loops;
//   2. else the first free slot that already holds a value of provably the
//      same size, then one provably at least as large, then one provably
//      smaller (the slot grows), then any free slot (max of incomparable
//      sizes, still never more than two separate slots);
//   3. else a new slot.
// "Provably" compares sizes coeff * product of symbolic dims: p >= q for
// every symbol value, 0 included, when q's dims are a sub-multiset of p's,
// p's coeff is at least q's, and p's other dims are among q's (size_ge).
// Sharing a slot never costs more than two slots would, so rule 2 always
// prefers sharing.
//
// Requires: fusion groups (fuse).  Preserves: the graph and the groups.
// Invalidates: nothing.  Idempotent.

#include <stdio.h>
#include <string.h>

#include "lib/passes/memplan.h"

#include "lib/custom_op.h"

enum { kAlignment = 64 };

static void size_of_node(const tj_graph_t* g, uint32_t index,
                         tj_mem_size_t* out) {
  const tj_node_t* node = &g->nodes[index];
  memset(out, 0, sizeof(*out));
  int64_t coeff = (int64_t)tj_dtype_size(node->dtype);
  for (int32_t d = 0; d < node->rank; ++d) {
    int64_t dim = node->dims[d];
    if (tj_dim_is_const(dim)) {
      // Tensor sizes are capped far below overflow by inference.
      if (tj_mul_overflow_i64(coeff, dim, &coeff)) coeff = INT64_MAX;
    } else {
      uint32_t k = out->num_factors++;
      while (k > 0 && out->factors[k - 1] > dim) {
        out->factors[k] = out->factors[k - 1];
        --k;
      }
      out->factors[k] = dim;
    }
  }
  out->coeff = coeff;
}

static bool size_equal(const tj_mem_size_t* p, const tj_mem_size_t* q) {
  if (p->coeff != q->coeff || p->num_factors != q->num_factors) return false;
  for (uint32_t i = 0; i < p->num_factors; ++i) {
    if (p->factors[i] != q->factors[i]) return false;
  }
  return true;
}

static bool has_factor(const tj_mem_size_t* s, int64_t dim) {
  for (uint32_t i = 0; i < s->num_factors; ++i) {
    if (s->factors[i] == dim) return true;
  }
  return false;
}

// p >= q for every value of the symbols, 0 included (a batch of 0 is a
// valid run): q's factors are a sub-multiset of p's, p's coeff is at least
// q's, and each factor of p beyond q's is one of q's symbols too, so that
// when it is 0 so is q. (20*B >= 8 holds for B >= 1 only: at B = 0 a slot
// sized 20*B holds nothing.)
static bool size_ge(const tj_mem_size_t* p, const tj_mem_size_t* q) {
  if (q->coeff == 0) return true;
  if (p->coeff < q->coeff) return false;
  // Sub-multiset test over ascending lists; the factors of p it skips are
  // its extra ones.
  uint32_t i = 0;
  for (uint32_t j = 0; j < q->num_factors; ++j) {
    while (i < p->num_factors && p->factors[i] < q->factors[j]) {
      if (!has_factor(q, p->factors[i])) return false;
      ++i;
    }
    if (i == p->num_factors || p->factors[i] != q->factors[j]) return false;
    ++i;
  }
  for (; i < p->num_factors; ++i) {
    if (!has_factor(q, p->factors[i])) return false;
  }
  return true;
}

tj_status_t tj_mem_size_eval(const tj_mem_size_t* size, const tj_graph_t* graph,
                             const int64_t* symbol_values, int64_t* out) {
  int64_t total = size->coeff;
  for (uint32_t i = 0; i < size->num_factors; ++i) {
    int64_t v;
    TJ_RETURN_IF_ERROR(
        tj_dim_eval(&graph->dims, size->factors[i], symbol_values, &v));
    if (tj_mul_overflow_i64(total, v, &total)) {
      return tj_invalid("memplan: a buffer size overflows int64");
    }
  }
  *out = total;
  return NULL;
}

int tj_mem_size_format(const tj_mem_size_t* size, const tj_graph_t* graph,
                       char* buf, size_t length) {
  int n = snprintf(buf, length, "%lld", (long long)size->coeff);
  for (uint32_t i = 0; i < size->num_factors && n >= 0; ++i) {
    char dim[64];
    tj_dim_format(&graph->dims, size->factors[i], dim, sizeof(dim));
    bool compound = strchr(dim, '+') != NULL;
    int m = snprintf(buf + ((size_t)n < length ? (size_t)n : length),
                     (size_t)n < length ? length - (size_t)n : 0,
                     compound ? "*(%s)" : "*%s", dim);
    if (m < 0) return m;
    n += m;
  }
  return n;
}

//===--- building the plan ---===//

typedef struct slot_state_t {
  uint32_t free_at;  // last position of the value placed last
  uint32_t num_sizes, capacity;
  tj_mem_size_t* sizes;
} slot_state_t;

typedef struct planner_t {
  const tj_graph_t* g;
  const tj_fusion_t* fu;
  tj_memplan_t* mp;
  tj_arena_t scratch;
  bool* is_output;  // per node: a graph output's
  slot_state_t* slots;
  uint32_t num_slots, slot_capacity;
  bool* taken;          // per buffer: its slot was taken in place already
  bool* depends_on_in;  // per node: reads_in_place's scratch
} planner_t;

static bool group_has(const tj_group_t* grp, uint32_t node) {
  uint32_t lo = 0, hi = grp->num_nodes;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (grp->nodes[mid] < node) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < grp->num_nodes && grp->nodes[lo] == node;
}

static bool same_shape(const tj_node_t* a, const tj_node_t* b) {
  if (a->rank != b->rank) return false;
  for (int32_t i = 0; i < a->rank; ++i) {
    if (a->dims[i] != b->dims[i]) return false;
  }
  return true;
}

// Whether group |grp| reads |in| only elementwise at the index it writes
// |out|, so |out| may overwrite |in| as it goes. Not only |in|'s readers
// but every node of the group that depends on it must be elementwise and
// of its shape: in transpose(neg(in)), neg reads |in| elementwise, but the
// transpose makes each point of the output read |in| at another index.
static bool reads_in_place(planner_t* p, const tj_group_t* grp, uint32_t in,
                           uint32_t out) {
  if (grp->kind == TJ_GROUP_OPAQUE && grp->num_nodes == 1) {
    // A custom op that declared it may write over its input 0.
    const tj_node_t* c = &p->g->nodes[grp->nodes[0]];
    const tj_custom_op_t* op = tj_custom_op_of(p->g, c);
    return op && (op->flags & TJ_CUSTOM_OP_IN_PLACE) && c->num_operands > 0 &&
           c->operands[0] == in && grp->nodes[0] == out &&
           same_shape(&p->g->nodes[in], c) &&
           tj_dtype_size(p->g->nodes[in].dtype) == tj_dtype_size(c->dtype);
  }
  if (grp->kind != TJ_GROUP_POINTWISE && grp->kind != TJ_GROUP_MATMUL) {
    return false;
  }
  const tj_node_t* a = &p->g->nodes[in];
  const tj_node_t* b = &p->g->nodes[out];
  if (!same_shape(a, b) || tj_dtype_size(a->dtype) != tj_dtype_size(b->dtype)) {
    return false;
  }
  // Ascending nodes are an evaluation order: operands are marked first.
  for (uint32_t j = 0; j < grp->num_nodes; ++j) {
    uint32_t u = grp->nodes[j];
    const tj_node_t* un = &p->g->nodes[u];
    bool depends = false;
    for (uint32_t k = 0; k < un->num_operands; ++k) {
      uint32_t o = un->operands[k];
      depends |= o == in || (o != TJ_NODE_NONE && group_has(grp, o) &&
                             p->depends_on_in[o]);
    }
    p->depends_on_in[u] = depends;
    if (depends && (!tj_op_is_elementwise(un->op) || !same_shape(un, a))) {
      return false;
    }
  }
  return true;
}

static tj_status_t slot_add(planner_t* p, uint32_t s,
                            const tj_mem_size_t* size) {
  slot_state_t* slot = &p->slots[s];
  for (uint32_t i = 0; i < slot->num_sizes; ++i) {
    if (size_ge(&slot->sizes[i], size)) return NULL;  // already covered
  }
  // Drop the sizes the new one dominates.
  uint32_t kept = 0;
  for (uint32_t i = 0; i < slot->num_sizes; ++i) {
    if (!size_ge(size, &slot->sizes[i])) slot->sizes[kept++] = slot->sizes[i];
  }
  slot->num_sizes = kept;
  if (slot->num_sizes == slot->capacity) {
    uint32_t cap = slot->capacity ? slot->capacity * 2 : 2;
    tj_mem_size_t* grown = tj_arena_alloc(&p->scratch, sizeof(*grown) * cap);
    if (!grown) return tj_status_oom();
    if (slot->num_sizes) {
      memcpy(grown, slot->sizes, sizeof(*grown) * slot->num_sizes);
    }
    slot->sizes = grown;
    slot->capacity = cap;
  }
  slot->sizes[slot->num_sizes++] = *size;
  return NULL;
}

// 0: holds an equal size; 1: holds a larger one; 2: b is larger than all
// it holds; 3: incomparable.
static int fit_rank(const slot_state_t* slot, const tj_mem_size_t* size) {
  int best = 3;
  bool dominates_all = true;
  for (uint32_t i = 0; i < slot->num_sizes; ++i) {
    if (size_equal(&slot->sizes[i], size)) return 0;
    if (size_ge(&slot->sizes[i], size)) best = 1;
    if (!size_ge(size, &slot->sizes[i])) dominates_all = false;
  }
  if (best == 1) return 1;
  return dominates_all ? 2 : 3;
}

static tj_status_t place(planner_t* p, uint32_t bi) {
  tj_memplan_t* mp = p->mp;
  tj_buffer_t* b = &mp->buffers[bi];
  const tj_group_t* grp = &p->fu->groups[b->first];
  // 1. In place.
  for (uint32_t k = 0; k < grp->num_inputs; ++k) {
    uint32_t in = grp->inputs[k];
    uint32_t ai = mp->buffer_of[in];
    if (ai == UINT32_MAX) continue;
    tj_buffer_t* a = &mp->buffers[ai];
    if (a->kind != TJ_BUFFER_ARENA || a->last != b->first || p->taken[ai] ||
        !size_equal(&a->size, &b->size) ||
        !reads_in_place(p, grp, in, b->node)) {
      continue;
    }
    p->taken[ai] = true;
    b->slot = a->slot;
    b->in_place_of = in;
    p->slots[a->slot].free_at = b->last;
    ++mp->num_in_place;
    return NULL;
  }
  // 2. Best-fitting free slot.
  uint32_t best = UINT32_MAX;
  int best_rank = 4;
  for (uint32_t s = 0; s < p->num_slots; ++s) {
    if (p->slots[s].free_at >= b->first) continue;
    int rank = fit_rank(&p->slots[s], &b->size);
    if (rank < best_rank) {
      best_rank = rank;
      best = s;
    }
  }
  // 3. A new slot.
  if (best == UINT32_MAX) {
    if (p->num_slots == p->slot_capacity) {
      uint32_t cap = p->slot_capacity ? p->slot_capacity * 2 : 8;
      slot_state_t* grown = tj_arena_alloc(&p->scratch, sizeof(*grown) * cap);
      if (!grown) return tj_status_oom();
      if (p->num_slots) memcpy(grown, p->slots, sizeof(*grown) * p->num_slots);
      p->slots = grown;
      p->slot_capacity = cap;
    }
    best = p->num_slots++;
    memset(&p->slots[best], 0, sizeof(slot_state_t));
  }
  b->slot = best;
  p->slots[best].free_at = b->last;
  return slot_add(p, best, &b->size);
}

void tj_memplan_destroy(tj_memplan_t* plan) {
  if (!plan) return;
  tj_allocator_t al = plan->arena.allocator;
  tj_arena_deinitialize(&plan->arena);
  tj_free(al, plan, sizeof(*plan));
}

static tj_status_t build(planner_t* p) {
  const tj_graph_t* g = p->g;
  const tj_fusion_t* fu = p->fu;
  tj_memplan_t* mp = p->mp;
  uint32_t n = g->num_nodes;
  mp->buffer_of = tj_arena_alloc(&mp->arena, sizeof(uint32_t) * (n ? n : 1));
  if (!mp->buffer_of) return tj_status_oom();
  // Every value a group reads or writes, and every graph output.
  uint32_t count = 0;
  for (uint32_t i = 0; i < n; ++i) mp->buffer_of[i] = UINT32_MAX;
  for (uint32_t q = 0; q < fu->num_groups; ++q) {
    const tj_group_t* grp = &fu->groups[q];
    for (uint32_t k = 0; k < grp->num_inputs; ++k) {
      mp->buffer_of[grp->inputs[k]] = 0;
    }
    for (uint32_t k = 0; k < grp->num_outputs; ++k) {
      mp->buffer_of[grp->outputs[k]] = 0;
    }
  }
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    mp->buffer_of[g->outputs[i].node] = 0;
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (mp->buffer_of[i] != UINT32_MAX) mp->buffer_of[i] = count++;
  }
  mp->num_buffers = count;
  mp->buffers =
      tj_arena_alloc(&mp->arena, sizeof(tj_buffer_t) * (count ? count : 1));
  p->taken = tj_arena_alloc(&p->scratch, sizeof(bool) * (count ? count : 1));
  p->depends_on_in = tj_arena_alloc(&p->scratch, sizeof(bool) * (n ? n : 1));
  if (!mp->buffers || !p->taken || !p->depends_on_in) return tj_status_oom();
  memset(p->taken, 0, sizeof(bool) * (count ? count : 1));
  // (Only which nodes are outputs: tj_uses_initialize's user lists cost
  // two walks over every operand and four allocations.)
  p->is_output = tj_arena_alloc(&p->scratch, sizeof(bool) * (n ? n : 1));
  if (!p->is_output) return tj_status_oom();
  memset(p->is_output, 0, sizeof(bool) * (n ? n : 1));
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    if (g->outputs[i].node < n) p->is_output[g->outputs[i].node] = true;
  }
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t bi = mp->buffer_of[i];
    if (bi == UINT32_MAX) continue;
    tj_buffer_t* b = &mp->buffers[bi];
    memset(b, 0, sizeof(*b));
    b->node = i;
    b->slot = UINT32_MAX;
    b->alias_of = TJ_NODE_NONE;
    b->in_place_of = TJ_NODE_NONE;
    tj_op_t op = g->nodes[i].op;
    uint32_t producer = fu->producer[i];
    if (op == TJ_OP_INPUT || op == TJ_OP_CONSTANT) {
      b->kind = TJ_BUFFER_EXTERNAL;
    } else if (p->is_output[i]) {
      b->kind = TJ_BUFFER_OUTPUT;
    } else if (producer != TJ_GROUP_NONE &&
               fu->groups[producer].kind == TJ_GROUP_VIEW) {
      b->kind = TJ_BUFFER_ALIAS;
    } else {
      b->kind = TJ_BUFFER_ARENA;
    }
    if (b->kind != TJ_BUFFER_EXTERNAL && producer == TJ_GROUP_NONE) {
      return tj_internal("memplan: %%%u is read but no group writes it", i);
    }
    b->first = producer == TJ_GROUP_NONE ? 0 : producer;
    b->last = b->first;
    size_of_node(g, i, &b->size);
  }
  for (uint32_t q = 0; q < fu->num_groups; ++q) {
    const tj_group_t* grp = &fu->groups[q];
    for (uint32_t k = 0; k < grp->num_inputs; ++k) {
      tj_buffer_t* b = &mp->buffers[mp->buffer_of[grp->inputs[k]]];
      if (q > b->last) b->last = q;
    }
  }
  // Views share their root's storage, which must then live as long as the
  // view is read. Groups are in execution order, so a view's root is
  // resolved before the view.
  for (uint32_t q = 0; q < fu->num_groups; ++q) {
    const tj_group_t* grp = &fu->groups[q];
    if (grp->kind != TJ_GROUP_VIEW) continue;
    for (uint32_t k = 0; k < grp->num_outputs; ++k) {
      tj_buffer_t* v = &mp->buffers[mp->buffer_of[grp->outputs[k]]];
      if (grp->num_inputs != 1) {
        return tj_internal("memplan: view group %u reads %u values", q,
                           grp->num_inputs);
      }
      uint32_t root = grp->inputs[0];
      const tj_buffer_t* r = &mp->buffers[mp->buffer_of[root]];
      if (r->kind == TJ_BUFFER_ALIAS) root = r->alias_of;
      v->alias_of = root;
      tj_buffer_t* rb = &mp->buffers[mp->buffer_of[root]];
      if (v->last > rb->last) rb->last = v->last;
    }
  }
  // Place in execution order (the greedy needs every earlier value placed),
  // node order within a group.
  uint32_t* order =
      tj_arena_alloc(&p->scratch, sizeof(uint32_t) * (count ? count : 1));
  if (!order) return tj_status_oom();
  uint32_t num_arena = 0;
  for (uint32_t bi = 0; bi < count; ++bi) {
    if (mp->buffers[bi].kind != TJ_BUFFER_ARENA) continue;
    uint32_t t = num_arena++;
    while (t > 0 && mp->buffers[order[t - 1]].first > mp->buffers[bi].first) {
      order[t] = order[t - 1];
      --t;
    }
    order[t] = bi;
  }
  for (uint32_t k = 0; k < num_arena; ++k) {
    TJ_RETURN_IF_ERROR(place(p, order[k]));
  }
  mp->num_slots = p->num_slots;
  mp->slots = tj_arena_alloc(
      &mp->arena, sizeof(tj_slot_t) * (p->num_slots ? p->num_slots : 1));
  if (!mp->slots) return tj_status_oom();
  for (uint32_t s = 0; s < p->num_slots; ++s) {
    mp->slots[s].num_sizes = p->slots[s].num_sizes;
    mp->slots[s].sizes =
        tj_arena_memdup(&mp->arena, p->slots[s].sizes,
                        sizeof(tj_mem_size_t) * p->slots[s].num_sizes);
    if (!mp->slots[s].sizes) return tj_status_oom();
  }
  return NULL;
}

tj_status_t tj_pass_memplan(tj_pass_ctx_t* ctx, tj_plan_t* plan) {
  (void)ctx;
  if (!plan->fusion) {
    return tj_invalid("memplan: requires fusion groups; run fuse first");
  }
  const tj_graph_t* g = plan->graph;
  tj_memplan_t* mp = tj_alloc(g->allocator, sizeof(*mp));
  if (!mp) return tj_status_oom();
  memset(mp, 0, sizeof(*mp));
  tj_arena_initialize(&mp->arena, g->allocator);
  mp->alignment = kAlignment;
  planner_t p;
  memset(&p, 0, sizeof(p));
  p.g = g;
  p.fu = plan->fusion;
  p.mp = mp;
  tj_arena_initialize(&p.scratch, g->allocator);
  tj_status_t status = build(&p);
  tj_arena_deinitialize(&p.scratch);
  if (status) {
    tj_memplan_destroy(mp);
    return status;
  }
  tj_plan_set_memplan(plan, mp);
  return NULL;
}

//===--- reading the plan ---===//

tj_status_t tj_memplan_evaluate(const tj_memplan_t* plan,
                                const tj_graph_t* graph,
                                const int64_t* symbol_values,
                                int64_t* out_offsets,
                                int64_t* out_arena_bytes) {
  int64_t offset = 0;
  const int64_t align = plan->alignment;
  for (uint32_t s = 0; s < plan->num_slots; ++s) {
    int64_t size = 0;
    for (uint32_t i = 0; i < plan->slots[s].num_sizes; ++i) {
      int64_t v;
      TJ_RETURN_IF_ERROR(
          tj_mem_size_eval(&plan->slots[s].sizes[i], graph, symbol_values, &v));
      if (v > size) size = v;
    }
    if (size > INT64_MAX - align) {
      return tj_invalid("memplan: the arena size overflows int64");
    }
    size = (size + align - 1) / align * align;
    if (out_offsets) out_offsets[s] = offset;
    if (tj_add_overflow_i64(offset, size, &offset)) {
      return tj_invalid("memplan: the arena size overflows int64");
    }
  }
  *out_arena_bytes = offset;
  return NULL;
}

tj_status_t tj_memplan_live_peak(const tj_memplan_t* plan,
                                 const tj_graph_t* graph,
                                 const tj_fusion_t* fusion,
                                 const int64_t* symbol_values,
                                 int64_t* out_bytes) {
  int64_t peak = 0;
  for (uint32_t q = 0; q < fusion->num_groups; ++q) {
    int64_t live = 0;
    for (uint32_t bi = 0; bi < plan->num_buffers; ++bi) {
      const tj_buffer_t* b = &plan->buffers[bi];
      if (b->kind != TJ_BUFFER_ARENA || b->first > q || b->last < q) continue;
      // An input overwritten in place at q shares its bytes with the output.
      bool shared = false;
      for (uint32_t ci = 0; ci < plan->num_buffers && !shared; ++ci) {
        const tj_buffer_t* c = &plan->buffers[ci];
        shared = c->in_place_of == b->node && c->first == q;
      }
      if (shared) continue;
      int64_t v;
      TJ_RETURN_IF_ERROR(tj_mem_size_eval(&b->size, graph, symbol_values, &v));
      live += v;
    }
    if (live > peak) peak = live;
  }
  *out_bytes = peak;
  return NULL;
}

tj_status_t tj_memplan_verify(const tj_memplan_t* plan, const tj_graph_t* graph,
                              const tj_fusion_t* fusion) {
  (void)graph;
  for (uint32_t i = 0; i < plan->num_buffers; ++i) {
    const tj_buffer_t* a = &plan->buffers[i];
    if (a->kind != TJ_BUFFER_ARENA) continue;
    if (a->slot >= plan->num_slots) {
      return tj_internal("memplan: %%%u has no slot", a->node);
    }
    if (a->first >= fusion->num_groups || a->last < a->first) {
      return tj_internal("memplan: %%%u has a bad lifetime", a->node);
    }
    const tj_slot_t* slot = &plan->slots[a->slot];
    bool held = false;
    for (uint32_t k = 0; k < slot->num_sizes && !held; ++k) {
      held = size_ge(&slot->sizes[k], &a->size);
    }
    if (!held) {
      return tj_internal("memplan: slot %u is smaller than %%%u", a->slot,
                         a->node);
    }
    for (uint32_t j = i + 1; j < plan->num_buffers; ++j) {
      const tj_buffer_t* b = &plan->buffers[j];
      if (b->kind != TJ_BUFFER_ARENA || b->slot != a->slot) continue;
      bool disjoint = a->last < b->first || b->last < a->first;
      bool in_place = (b->in_place_of == a->node && b->first == a->last) ||
                      (a->in_place_of == b->node && a->first == b->last);
      if (!disjoint && !in_place) {
        return tj_internal(
            "memplan: %%%u and %%%u share slot %u while both "
            "live",
            a->node, b->node, a->slot);
      }
    }
  }
  return NULL;
}
