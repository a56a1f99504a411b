// Region compile (issue 16): the fusion groups of a repeated block (N
// layers with different weights) lower to the same kernels up to names, so
// a group equal to one already lowered takes a copy of that group's kernels
// with its own names and nodes instead of being lowered again.
//
// The copies borrow the kernel IR's instructions and dim table of the
// kernels they copy (tj_kir_borrow): only their names and buffers' nodes
// are their own.
//
// Two groups are equal when everything lowering reads of them is: the
// group's kind, its nodes position by position (op, dtype, dims, attributes,
// a constant's bytes; each operand the same position among the group's
// nodes or among its inputs), which of its nodes it writes, the inputs'
// dtypes and dims and, for a constant input, its bytes (a one-element
// constant becomes an immediate). Which input the memory plan lets each
// output overwrite is not compared: lowering reads it only to check that
// the input is read at the output's index, and the copy makes that check
// on its source's kernels (index_aligned), so that block 1 (its value
// written in place of block 0's) copies block 0 (which may not overwrite
// the graph's input). Dims are compared by id: the
// groups are of one graph, whose dim table interns every expression, so
// equal ids are equal sizes for every value of the symbols. Weights are
// graph inputs or constants the kernels read through buffers; their
// identity (the node) is remapped, their bytes matter only for one-element
// constants, which lowering inlines.

#include <stdio.h>
#include <string.h>

#include "kir/lower_internal.h"
#include "lib/passes/pass.h"

enum { kMaxInputs = 256 };  // more: the group is never shared

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

// Position of |node| in the ascending |list|, or NONE32.
static uint32_t position(const uint32_t* list, uint32_t n, uint32_t node) {
  uint32_t lo = 0, hi = n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (list[mid] < node) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < n && list[lo] == node ? lo : NONE32;
}

// An operand of a node of |grp| as lowering sees it: a position among the
// group's nodes (even), among its inputs (odd), or NONE32 (absent, or
// neither: such a group is never shared).
static uint32_t operand_slot(const tj_group_t* grp, uint32_t operand) {
  if (operand == TJ_NODE_NONE) return NONE32 - 1;
  uint32_t p = position(grp->nodes, grp->num_nodes, operand);
  if (p != NONE32) return 2 * p;
  p = position(grp->inputs, grp->num_inputs, operand);
  return p != NONE32 ? 2 * p + 1 : NONE32;
}

// Bytes of constant |node|'s data, or 0 when it has none or a symbolic
// shape.
static size_t constant_bytes(const tj_graph_t* g, uint32_t node) {
  const tj_node_t* n = &g->nodes[node];
  int64_t numel;
  if (n->op != TJ_OP_CONSTANT || !n->attrs.data ||
      !tj_node_static_numel(g, node, &numel)) {
    return 0;
  }
  return (size_t)numel * tj_dtype_size(n->dtype);
}

// The node whose storage the memory plan lets |node| overwrite, or
// TJ_NODE_NONE.
static uint32_t in_place_input(const tj_memplan_t* mp, uint32_t node) {
  if (!mp) return TJ_NODE_NONE;
  uint32_t bi = mp->buffer_of[node];
  if (bi == UINT32_MAX) return TJ_NODE_NONE;
  return mp->buffers[bi].in_place_of;
}

static uint64_t hash_type(uint64_t h, const tj_node_t* n) {
  h = mix(h, (uint64_t)n->op);
  h = mix(h, (uint64_t)n->dtype);
  h = mix(h, (uint64_t)n->rank);
  for (int32_t d = 0; d < n->rank; ++d) h = mix(h, (uint64_t)n->dims[d]);
  return h;
}

uint64_t tj_lower_group_hash(const tj_graph_t* graph, const tj_fusion_t* fusion,
                             uint32_t group) {
  const tj_group_t* grp = &fusion->groups[group];
  uint64_t h = mix(0, (uint64_t)grp->kind);
  h = mix(h, grp->num_nodes);
  h = mix(h, grp->num_inputs);
  h = mix(h, grp->num_outputs);
  h = mix(h, position(grp->nodes, grp->num_nodes, grp->anchor));
  for (uint32_t j = 0; j < grp->num_nodes; ++j) {
    const tj_node_t* n = &graph->nodes[grp->nodes[j]];
    h = hash_type(h, n);
    for (uint32_t i = 0; i < n->num_operands; ++i) {
      // An input by its type, not its place among the inputs (ordered by
      // node: block 0's carried value is a graph input before its weights,
      // a later block's stands after them).
      uint32_t slot = operand_slot(grp, n->operands[i]);
      if (slot == NONE32 || slot % 2 == 0) {
        h = mix(h, slot);
        continue;
      }
      const tj_node_t* in = &graph->nodes[n->operands[i]];
      h = mix(h, 1);
      h = mix(h, (uint64_t)in->dtype);
      h = mix(h, (uint64_t)in->rank);
      for (int32_t d = 0; d < in->rank; ++d) h = mix(h, (uint64_t)in->dims[d]);
      h = mix(h, in->op == TJ_OP_CONSTANT);
    }
    for (uint32_t i = 0; i < n->attrs.num_ints; ++i) {
      h = mix(h, (uint64_t)n->attrs.ints[i]);
    }
    h = mix(h, (uint64_t)n->attrs.axis);
  }
  for (uint32_t k = 0; k < grp->num_outputs; ++k) {
    h = mix(h, position(grp->nodes, grp->num_nodes, grp->outputs[k]));
  }
  return h;
}

static bool same_type(const tj_node_t* a, const tj_node_t* b) {
  if (a->op != b->op || a->dtype != b->dtype || a->rank != b->rank) {
    return false;
  }
  for (int32_t d = 0; d < a->rank; ++d) {
    if (a->dims[d] != b->dims[d]) return false;
  }
  return true;
}

// Every attribute but the input name (weights are inputs named per layer;
// lowering never reads the name).
static bool same_attrs(const tj_graph_t* g, uint32_t x, uint32_t y) {
  const tj_attrs_t* s = &g->nodes[x].attrs;
  const tj_attrs_t* t = &g->nodes[y].attrs;
  if (s->num_ints != t->num_ints || s->axis != t->axis ||
      s->keepdims != t->keepdims || s->approximate != t->approximate ||
      memcmp(&s->value, &t->value, sizeof(double)) != 0) {
    return false;
  }
  if (s->num_ints &&
      memcmp(s->ints, t->ints, sizeof(int64_t) * s->num_ints) != 0) {
    return false;
  }
  return true;
}

// Constants |x| and |y| (either may not be one) hold the same bytes.
static bool same_constant(const tj_graph_t* g, uint32_t x, uint32_t y) {
  bool cx = g->nodes[x].op == TJ_OP_CONSTANT;
  bool cy = g->nodes[y].op == TJ_OP_CONSTANT;
  if (cx != cy) return false;
  if (!cx) return true;
  size_t bytes = constant_bytes(g, x);
  if (bytes == 0 || bytes != constant_bytes(g, y)) return false;
  return memcmp(g->nodes[x].attrs.data, g->nodes[y].attrs.data, bytes) == 0;
}

bool tj_lower_group_same(const tj_graph_t* graph, const tj_fusion_t* fusion,
                         uint32_t a, uint32_t b) {
  const tj_group_t* p = &fusion->groups[a];
  const tj_group_t* q = &fusion->groups[b];
  if (p->kind != q->kind || p->num_nodes != q->num_nodes ||
      p->num_inputs != q->num_inputs || p->num_outputs != q->num_outputs ||
      position(p->nodes, p->num_nodes, p->anchor) !=
          position(q->nodes, q->num_nodes, q->anchor)) {
    return false;
  }
  // A repeated block's copy: q's nodes are p's moved by one distance
  // (region.c stitches them so). Then an operand that is p's node at a
  // position and moved by that distance is q's node at that position, one
  // search instead of two.
  // perm[k]: the input of q that stands for p's input k.
  uint32_t perm[kMaxInputs];
  bool taken[kMaxInputs];
  if (p->num_inputs > kMaxInputs) return false;
  for (uint32_t k = 0; k < p->num_inputs; ++k) {
    perm[k] = NONE32;
    taken[k] = false;
  }
  uint32_t delta = p->num_nodes ? q->nodes[0] - p->nodes[0] : 0;
  bool moved = true;
  for (uint32_t j = 0; moved && j < p->num_nodes; ++j)
    moved = q->nodes[j] - p->nodes[j] == delta;
  for (uint32_t j = 0; j < p->num_nodes; ++j) {
    uint32_t x = p->nodes[j], y = q->nodes[j];
    const tj_node_t* n = &graph->nodes[x];
    const tj_node_t* m = &graph->nodes[y];
    if (!same_type(n, m) || n->num_operands != m->num_operands ||
        !same_attrs(graph, x, y) || !same_constant(graph, x, y)) {
      return false;
    }
    // An opaque or custom node is never lowered from a copy.
    if (n->op == TJ_OP_CUSTOM) return false;
    for (uint32_t i = 0; i < n->num_operands; ++i) {
      uint32_t u = n->operands[i], v = m->operands[i];
      uint32_t s = operand_slot(p, u);
      if (s == NONE32) return false;
      if (moved && s % 2 == 0 && u != TJ_NODE_NONE && v == u + delta) continue;
      uint32_t t = operand_slot(q, v);
      if (s % 2 == 0 || t == NONE32 || t % 2 == 0) {
        if (s != t) return false;
        continue;
      }
      // Inputs: one of q's for each of p's, the same wherever read.
      uint32_t from = s / 2, to = t / 2;
      if (perm[from] == NONE32 && !taken[to]) {
        perm[from] = to;
        taken[to] = true;
      } else if (perm[from] != to) {
        return false;
      }
    }
  }
  for (uint32_t k = 0; k < p->num_inputs; ++k) {
    // (An input no node reads keeps its place.)
    if (perm[k] == NONE32) {
      if (taken[k]) return false;
      perm[k] = k;
      taken[k] = true;
    }
  }
  for (uint32_t k = 0; k < p->num_inputs; ++k) {
    uint32_t x = p->inputs[k], y = q->inputs[perm[k]];
    const tj_node_t* n = &graph->nodes[x];
    const tj_node_t* m = &graph->nodes[y];
    if (n->dtype != m->dtype || n->rank != m->rank ||
        !same_constant(graph, x, y)) {
      return false;
    }
    for (int32_t d = 0; d < n->rank; ++d) {
      if (n->dims[d] != m->dims[d]) return false;
    }
    if (n->op == TJ_OP_CONSTANT && !same_attrs(graph, x, y)) return false;
  }
  for (uint32_t k = 0; k < p->num_outputs; ++k) {
    if (position(p->nodes, p->num_nodes, p->outputs[k]) !=
        position(q->nodes, q->num_nodes, q->outputs[k])) {
      return false;
    }
  }
  return true;
}

// |node| of group |p| as the node at the same place in the equal group |q|
// (tj_lower_group_same), or NONE32: an input by where a node of the group
// reads it (the same input of q wherever p's is read).
static uint32_t map_node(const tj_graph_t* g, const tj_group_t* p,
                         const tj_group_t* q, uint32_t node) {
  if (node == TJ_NODE_NONE) return NONE32;
  uint32_t s = position(p->nodes, p->num_nodes, node);
  if (s != NONE32) return q->nodes[s];
  for (uint32_t j = 0; j < p->num_nodes; ++j) {
    const tj_node_t* n = &g->nodes[p->nodes[j]];
    for (uint32_t i = 0; i < n->num_operands; ++i) {
      if (n->operands[i] == node) return g->nodes[q->nodes[j]].operands[i];
    }
  }
  return NONE32;
}

// Writes |v| in decimal at |out| (room for 10 digits); returns the end.
static char* put_u32(char* out, uint32_t v) {
  char digits[10];
  int n = 0;
  do {
    digits[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n) *out++ = digits[--n];
  return out;
}

// |name| ("<role><node>_<index>", as every lowering names buffers) with
// node |to| for |from| into |out|; false when it is not of that form. No
// printf: a 24-layer stack renames some 300 buffers per compile.
static bool rename_buffer(const char* name, uint32_t from, uint32_t to,
                          char* out, size_t size) {
  size_t role = 0;
  while (name[role] && !(name[role] >= '0' && name[role] <= '9')) ++role;
  const char* d = name + role;
  uint64_t node = 0;
  size_t n = 0;
  while (d[n] >= '0' && d[n] <= '9' && n < 10)
    node = node * 10 + (uint64_t)(d[n++] - '0');
  // The digits as put_u32 writes them: no leading zero.
  if (n == 0 || d[n] != '_' || node != from || (d[0] == '0' && n > 1)) {
    return false;
  }
  size_t rest = strlen(d + n);
  if (role + 10 + rest + 1 > size) return false;
  memcpy(out, name, role);
  char* end = put_u32(out + role, to);
  memcpy(end, d + n, rest + 1);
  return true;
}

// Lowering's in-place check (kir/lower.c, check_in_place) for the copy
// |dst| (buffers on group |q|'s nodes) of kernel |src| (group |p|'s, whose
// code is |k|): each output that the memory plan writes in place of an
// input overwrites the input its source's output did (lowering checked
// that), or every buffer of that input is read at the outputs' index.
static bool in_place_holds(const tj_graph_t* g, const tj_memplan_t* mp,
                           const tj_group_t* p, const tj_group_t* q,
                           const tj_kir_t* k, const tj_lowered_kernel_t* src,
                           const tj_lowered_kernel_t* dst) {
  for (uint32_t b = 0; b < src->num_buffers; ++b) {
    if (k->buffers[b].role != TJ_KIR_OUTPUT) continue;
    uint32_t in = in_place_input(mp, dst->buffer_nodes[b]);
    if (in == TJ_NODE_NONE) continue;
    uint32_t was = in_place_input(mp, src->buffer_nodes[b]);
    if (was != TJ_NODE_NONE && map_node(g, p, q, was) == in) continue;
    for (uint32_t c = 0; c < src->num_buffers; ++c) {
      if (dst->buffer_nodes[c] == in && !(src->index_aligned >> c & 1))
        return false;
    }
  }
  return true;
}

tj_status_t tj_lower_group_copy(const tj_graph_t* graph,
                                const tj_fusion_t* fusion,
                                const tj_memplan_t* memplan, uint32_t from,
                                uint32_t to, const char* from_name,
                                const char* to_name,
                                const tj_lowered_kernel_t* kernels,
                                uint32_t count, tj_lowered_kernel_t* out) {
  const tj_group_t* p = &fusion->groups[from];
  const tj_group_t* q = &fusion->groups[to];
  memset(out, 0, sizeof(*out) * count);
  size_t base = strlen(from_name);
  tj_status_t status = NULL;
  uint32_t made = 0;  // kernels of |out| that may hold something
  while (!status && made < count) {
    const tj_lowered_kernel_t* src = &kernels[made];
    tj_lowered_kernel_t* dst = &out[made++];
    const tj_kir_t* k = src->kernel;
    // Box kernels are named <group's name>_b<i>.
    if (strncmp(k->name, from_name, base) != 0) {
      status =
          tj_unsupported("kernel @%s is not named after its group", k->name);
      break;
    }
    char name[256];
    size_t to_base = strlen(to_name), tail = strlen(k->name + base);
    if (to_base + tail >= sizeof(name)) {
      status =
          tj_unsupported("kernel @%s: its copy's name is too long", k->name);
      break;
    }
    memcpy(name, to_name, to_base);
    memcpy(name + to_base, k->name + base, tail + 1);
    *dst = *src;
    dst->kernel = NULL;
    dst->dims = NULL;
    char names[TJ_KIR_MAX_BUFFERS][48];
    const char* name_of[TJ_KIR_MAX_BUFFERS];
    for (uint32_t b = 0; !status && b < src->num_buffers; ++b) {
      dst->buffer_nodes[b] = map_node(graph, p, q, src->buffer_nodes[b]);
      if (dst->buffer_nodes[b] == NONE32 ||
          !rename_buffer(k->buffers[b].name, src->buffer_nodes[b],
                         dst->buffer_nodes[b], names[b], sizeof(names[b]))) {
        status =
            tj_unsupported("buffer %u of kernel @%s is not copied", b, k->name);
      }
      name_of[b] = names[b];
    }
    if (!status && !in_place_holds(graph, memplan, p, q, k, src, dst)) {
      status = tj_unsupported(
          "kernel @%s: an output in place of an input read at another index",
          k->name);
    }
    if (!status && src->nonempty_node != NONE32) {
      dst->nonempty_node = map_node(graph, p, q, src->nonempty_node);
      if (dst->nonempty_node == NONE32) {
        status = tj_unsupported("kernel @%s: its precondition's node", k->name);
      }
    }
    // The same code and dims as |src|: borrowed, only the names are the
    // copy's (a 24-layer stack copies 44 groups a compile; a dim table of
    // its own cost five allocations a kernel).
    if (!status) status = tj_kir_borrow(k, name, name_of, &dst->kernel);
    if (!status) {
      dst->dims = src->dims;
      dst->borrowed = true;
      dst->code_of = src->code_of ? src->code_of : k;
    }
  }
  if (status) {
    for (uint32_t i = 0; i < made; ++i) tj_lowered_kernel_deinitialize(&out[i]);
  }
  return status;
}
