// lib/passes/cse.c
//
// Common subexpression elimination by hash-consing: nodes are visited in
// order, each keyed by (op, dtype, shape, representative operands,
// attributes, constant bytes); a node whose key was seen before is replaced
// by the earlier node. Because operands are replaced by their
// representatives first, whole equal subtrees collapse in one sweep. Every
// op is pure, so any two equal keys compute the same value. Inputs are never
// merged (they are distinct by name). Equal constants merge by content.
//
// Commutative operands are not reordered here; canonicalize puts them in one
// normal form first, which is why the default pipeline runs it before cse.
//
// Requires: nothing.  Preserves: order of the kept nodes, inputs, outputs,
// symbols, guards.  Invalidates: fusion groups, memory plan.  Idempotent.

#include <string.h>

#include "lib/custom_op.h"
#include "lib/passes/pass.h"

typedef struct cse_t {
  const tj_graph_t* graph;
  uint32_t* rep;        // node -> representative node (itself if kept)
  uint32_t* table;      // open addressing over node indices; UINT32_MAX empty
  uint32_t table_size;  // power of two
} cse_t;

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

static uint64_t mix_bytes(uint64_t h, const void* data, size_t size) {
  const unsigned char* p = data;
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t mix_double(uint64_t h, double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof(bits));
  return mix(h, bits);
}

// Bytes of a constant's data; false for a symbolic shape (never merged).
static bool constant_bytes(const tj_graph_t* g, uint32_t index, size_t* out) {
  int64_t numel;
  if (!tj_node_static_numel(g, index, &numel)) return false;
  *out = (size_t)numel * tj_dtype_size(g->nodes[index].dtype);
  return true;
}

static uint64_t node_hash(const cse_t* c, uint32_t index) {
  const tj_node_t* n = &c->graph->nodes[index];
  uint64_t h = mix(0, (uint64_t)n->op);
  h = mix(h, (uint64_t)n->dtype);
  h = mix(h, (uint64_t)n->rank);
  for (int32_t i = 0; i < n->rank; ++i) h = mix(h, (uint64_t)n->dims[i]);
  for (uint32_t i = 0; i < n->num_operands; ++i) {
    uint32_t o = n->operands[i];
    h = mix(h, o == TJ_NODE_NONE ? UINT64_MAX : c->rep[o]);
  }
  const tj_attrs_t* a = &n->attrs;
  for (uint32_t i = 0; i < a->num_ints; ++i) h = mix(h, (uint64_t)a->ints[i]);
  h = mix(h, (uint64_t)a->axis);
  h = mix(h, (uint64_t)a->keepdims * 2 + (uint64_t)a->approximate);
  h = mix_double(h, a->value);
  size_t bytes;
  if (n->op == TJ_OP_CONSTANT && constant_bytes(c->graph, index, &bytes) &&
      a->data) {
    h = mix_bytes(h, a->data, bytes);
  }
  return h;
}

// Whether nodes |x| and |y| compute the same value.
static bool node_equal(const cse_t* c, uint32_t x, uint32_t y) {
  const tj_node_t* a = &c->graph->nodes[x];
  const tj_node_t* b = &c->graph->nodes[y];
  if (a->op != b->op || a->dtype != b->dtype || a->rank != b->rank ||
      a->num_operands != b->num_operands) {
    return false;
  }
  if (a->op == TJ_OP_INPUT) return false;
  if (a->op == TJ_OP_CUSTOM && (!tj_custom_node_is_pure(c->graph, a) ||
                                strcmp(a->attrs.name, b->attrs.name) != 0)) {
    return false;  // an impure one runs once per node
  }
  for (int32_t i = 0; i < a->rank; ++i) {
    if (a->dims[i] != b->dims[i]) return false;
  }
  for (uint32_t i = 0; i < a->num_operands; ++i) {
    uint32_t p = a->operands[i], q = b->operands[i];
    if ((p == TJ_NODE_NONE) != (q == TJ_NODE_NONE)) return false;
    if (p != TJ_NODE_NONE && c->rep[p] != c->rep[q]) return false;
  }
  const tj_attrs_t* s = &a->attrs;
  const tj_attrs_t* t = &b->attrs;
  if (s->num_ints != t->num_ints || s->axis != t->axis ||
      s->keepdims != t->keepdims || s->approximate != t->approximate ||
      memcmp(&s->value, &t->value, sizeof(double)) != 0) {
    return false;
  }
  if (s->num_ints &&
      memcmp(s->ints, t->ints, sizeof(int64_t) * s->num_ints) != 0) {
    return false;
  }
  if (a->op == TJ_OP_CONSTANT) {
    size_t bytes;
    if (!constant_bytes(c->graph, x, &bytes)) return false;
    if (bytes && (!s->data || !t->data || memcmp(s->data, t->data, bytes))) {
      return false;
    }
  }
  return true;
}

tj_status_t tj_pass_cse(tj_pass_ctx_t* ctx, tj_plan_t* plan) {
  const tj_graph_t* g = plan->graph;
  tj_allocator_t al = g->allocator;
  uint32_t n = g->num_nodes;
  cse_t c;
  memset(&c, 0, sizeof(c));
  c.graph = g;
  c.table_size = 16;
  while (c.table_size < 2 * n) c.table_size *= 2;
  c.rep = tj_alloc(al, sizeof(uint32_t) * (n ? n : 1));
  c.table = tj_alloc(al, sizeof(uint32_t) * c.table_size);
  if (!c.rep || !c.table) {
    tj_free(al, c.rep, sizeof(uint32_t) * (n ? n : 1));
    tj_free(al, c.table, sizeof(uint32_t) * c.table_size);
    return tj_status_oom();
  }
  memset(c.table, 0xff, sizeof(uint32_t) * c.table_size);
  uint32_t merged = 0;
  for (uint32_t i = 0; i < n; ++i) {
    c.rep[i] = i;
    if (g->nodes[i].op == TJ_OP_INPUT) continue;
    uint32_t slot = (uint32_t)node_hash(&c, i) & (c.table_size - 1);
    for (;;) {
      uint32_t other = c.table[slot];
      if (other == UINT32_MAX) {
        c.table[slot] = i;
        break;
      }
      if (node_equal(&c, other, i)) {
        if (tj_pass_rewrite(ctx, g, i)) {  // else i stays, unmerged
          c.rep[i] = other;
          ++merged;
        }
        break;
      }
      slot = (slot + 1) & (c.table_size - 1);
    }
  }
  tj_free(al, c.table, sizeof(uint32_t) * c.table_size);
  tj_status_t status = NULL;
  if (merged) {
    tj_rewriter_t rw;
    status = tj_rewriter_begin(&rw, g);
    for (uint32_t i = 0; !status && i < n; ++i) {
      if (g->nodes[i].op == TJ_OP_INPUT) continue;
      if (c.rep[i] == i) {
        status = tj_rewriter_clone(&rw, i);
      } else {
        rw.map[i] = rw.map[c.rep[i]];
      }
    }
    tj_graph_t* out = NULL;
    if (!status) {
      status = tj_rewriter_finish(&rw, &out);
    } else {
      tj_rewriter_abandon(&rw);
    }
    if (!status) tj_plan_set_graph(plan, out);
  }
  tj_free(al, c.rep, sizeof(uint32_t) * (n ? n : 1));
  return status;
}
