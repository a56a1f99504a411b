// Region templates (issue 16): the graph stages of the default pipeline
// (cleanup, decompose, cleanup) once per distinct block instead of once per
// node.
//
// A graph built as a prefix, N >= 4 blocks that are equal node for node
// (ops, dtypes, dims, attributes, constants' bytes, operands at the same
// offsets; the weights are each block's own inputs) and chained by one
// value (block b reads block b-1's node at one offset where block 0 reads
// a prefix node), then a suffix that reads the last block's value, is
// processed as a probe: the prefix, blocks 0, 1, 2 and the suffix, with
// the three blocks' chained values as extra outputs. Block 0 comes out as
// it does in the whole graph (it reads the prefix), block 1 as a block
// after a block, block 2 as a block after such a one. When block 2 came
// out as block 1 did (node for node, block 1's value where block 1 read
// block 0's, the same shared nodes, its own inputs where block 1 had its
// own), the blocks after it would too: the whole processed graph is block
// 0's, block 1's and N - 2 copies of block 2's nodes with their own inputs
// and predecessors, then the suffix's. The copies are made field by field
// into one arena (no inference: every copy's types are block 2's), so the
// N-block stack costs the passes of three blocks and a copy. Anything else
// (no chain, a block read from further on, a probe whose blocks came out
// unequal, a pass that failed on the probe) leaves the plan as it was, and
// the caller runs the pipeline over the whole graph.
//
// Where checks on block 0's boundary values show that one block stands for
// the others ("one block for three" below), the graph stages run over the
// prefix, block 0 and the suffix alone, and the processed probe is
// expanded into the three-block one by copying; fuse and the checks above
// run over that.

#include <stdio.h>
#include <string.h>

#include "lib/dtype.h"
#include "lib/passes/fusion.h"
#include "lib/passes/pass.h"

enum {
  kMinBlocks = 4,    // fewer: the probe is the whole graph
  kProbeBlocks = 3,  // first, second, and one to check the second against
  kMaxCandidates = 32,
  kUnset = 0xff,
};

#define NONE32 UINT32_MAX
// More than one (a uint32_t, past int: no enumerator; clang -Wpedantic).
#define MANY32 (UINT32_MAX - 1)

//===--- equal nodes ---===//

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

// What a node is without its operands: the candidate periods come from it.
static uint64_t signature(const tj_node_t* n) {
  uint64_t h = mix((uint64_t)n->op, (uint64_t)n->dtype);
  h = mix(h, (uint64_t)n->rank);
  h = mix(h, n->num_operands);
  for (int32_t d = 0; d < n->rank; ++d) h = mix(h, (uint64_t)n->dims[d]);
  return h;
}

static size_t constant_bytes(const tj_graph_t* g, uint32_t node) {
  int64_t numel;
  if (!tj_node_static_numel(g, node, &numel)) return 0;
  return (size_t)numel * tj_dtype_size(g->nodes[node].dtype);
}

// Nodes |x| of |gx| and |y| of |gy| alike but for their operands and an
// input's name (weights are inputs named per block).
static bool same_node(const tj_graph_t* gx, uint32_t x, const tj_graph_t* gy,
                      uint32_t y) {
  const tj_node_t* a = &gx->nodes[x];
  const tj_node_t* b = &gy->nodes[y];
  if (a->op != b->op || a->dtype != b->dtype || a->rank != b->rank ||
      a->num_operands != b->num_operands) {
    return false;
  }
  for (int32_t d = 0; d < a->rank; ++d)
    if (a->dims[d] != b->dims[d]) return false;
  const tj_attrs_t* s = &a->attrs;
  const tj_attrs_t* t = &b->attrs;
  if (s->num_ints != t->num_ints || s->axis != t->axis ||
      s->keepdims != t->keepdims || s->approximate != t->approximate ||
      memcmp(&s->value, &t->value, sizeof(double)) != 0) {
    return false;
  }
  if (s->num_ints && memcmp(s->ints, t->ints, sizeof(int64_t) * s->num_ints))
    return false;
  if (a->op != TJ_OP_INPUT && (s->name || t->name) &&
      (!s->name || !t->name || strcmp(s->name, t->name) != 0)) {
    return false;
  }
  if (a->op == TJ_OP_CONSTANT) {
    if (!s->data || !t->data) return s->data == t->data;
    size_t bytes = constant_bytes(gx, x);
    if (bytes != constant_bytes(gy, y)) return false;
    if (bytes && memcmp(s->data, t->data, bytes) != 0) return false;
  }
  return true;
}

//===--- finding the blocks ---===//

typedef struct region_t {
  uint32_t start;    // block 0's first node
  uint32_t period;   // nodes per block
  uint32_t count;    // blocks
  uint32_t carried;  // the offset of the value a block hands the next
  uint32_t end;      // the suffix's first node: start + count * period
  // Inputs a block reads as its own (its weights): an input within the
  // block, or one before all blocks (a graph whose inputs come first, as
  // every compiled copy's do) that block b reads where block b - 1 reads
  // another. owner[q]: the block of input q (NONE32: shared or not a
  // block's); slot_of[q]: for one before the blocks, its place among its
  // block's (the same for the same weight of every block), slots[b *
  // num_slots + s] the input of block b in place s.
  uint32_t* owner;
  uint32_t* slot_of;
  uint32_t* slots;
  uint32_t num_slots;
  // The prefix node block 0 reads where block 1 reads block 0's value
  // (NONE32: none; MANY32: several, so one probed block cannot stand for
  // the others).
  uint32_t carry_in;
} region_t;

static uint32_t block_of(const region_t* r, uint32_t node) {
  if (node < r->start || node >= r->end) return NONE32;
  return (node - r->start) / r->period;
}

// Input |q| of some block as block |j|'s.
static uint32_t to_block(const region_t* r, uint32_t q, uint32_t j) {
  uint32_t b = r->owner[q];
  if (r->slot_of[q] != NONE32)
    return r->slots[j * r->num_slots + r->slot_of[q]];
  return q + (j - b) * r->period;  // within block b: block j's at its offset
}

static bool same_type(const tj_graph_t* g, uint32_t x, uint32_t y) {
  const tj_node_t* a = &g->nodes[x];
  const tj_node_t* b = &g->nodes[y];
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int32_t d = 0; d < a->rank; ++d)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

// Block b - 1's operand |u| and block b's |v| at the same place, both
// before the blocks: the same node (shared), block b's own weight where
// block b - 1 read its own, or (b = 1) block 0's chained value where block
// 0 read the prefix.
static bool match_outside(const tj_graph_t* g, region_t* r, uint32_t b,
                          uint32_t u, uint32_t v) {
  if (v == u) return r->owner[u] == NONE32;
  if (b == 1 && block_of(r, v) == 0) {
    uint32_t off = v - r->start;
    if (r->carried != NONE32 && r->carried != off) return false;
    r->carried = off;
    if (r->carry_in != u) r->carry_in = r->carry_in == NONE32 ? u : MANY32;
    return true;
  }
  if (v >= r->start || g->nodes[u].op != TJ_OP_INPUT ||
      g->nodes[v].op != TJ_OP_INPUT || !same_type(g, u, v)) {
    return false;
  }
  if (r->owner[u] == NONE32) {
    // a weight of block 0's seen first
    if (b != 1) return false;
    r->owner[u] = 0;
    r->slot_of[u] = r->num_slots++;
  }
  if (r->owner[u] != b - 1 || r->slot_of[u] == NONE32) return false;
  if (r->owner[v] == NONE32) {
    r->owner[v] = b;
    r->slot_of[v] = r->slot_of[u];
    return true;
  }
  return r->owner[v] == b && r->slot_of[v] == r->slot_of[u];
}

// Whether a read of |u| from after the blocks reads into one (a block's
// node or weight) other than through the last block's value |last|.
static bool reads_into(const region_t* r, uint32_t u, uint32_t last) {
  if (u == TJ_NODE_NONE || u == last) return false;
  return (u >= r->start && u < r->end) || r->owner[u] != NONE32;
}

// Whether blocks 1 .. count - 1 each equal the block before, shifted by a
// period, with one chained value, and nothing else reads into a block.
// Fills |owner|, |slot_of| (allocated by the caller) and allocates |slots|.
static bool check_blocks(const tj_graph_t* g, region_t* r) {
  uint32_t p = r->period;
  r->end = r->start + r->count * p;
  r->carried = NONE32;
  r->carry_in = NONE32;
  r->num_slots = 0;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    r->owner[i] = NONE32;
    r->slot_of[i] = NONE32;
    if (g->nodes[i].op == TJ_OP_INPUT) r->owner[i] = block_of(r, i);
  }
  for (uint32_t b = 1; b < r->count; ++b) {
    uint32_t sx = r->start + (b - 1) * p;
    for (uint32_t i = 0; i < p; ++i) {
      uint32_t x = sx + i, y = x + p;
      if (!same_node(g, x, g, y)) return false;
      const tj_node_t* nx = &g->nodes[x];
      const tj_node_t* ny = &g->nodes[y];
      for (uint32_t k = 0; k < nx->num_operands; ++k) {
        uint32_t u = nx->operands[k], v = ny->operands[k];
        if (u == TJ_NODE_NONE || v == TJ_NODE_NONE) {
          if (u != v) return false;
        } else if (u >= r->start) {
          // block b - 1's own node or its chained read of block b - 2
          if (v != u + p) return false;
        } else if (!match_outside(g, r, b, u, v)) {
          return false;
        }
      }
    }
  }
  if (r->carried == NONE32) return false;
  // Nothing after the blocks reads into one but the last one's value, nor
  // a block's weight.
  uint32_t last = r->start + (r->count - 1) * p + r->carried;
  for (uint32_t i = r->end; i < g->num_nodes; ++i) {
    const tj_node_t* n = &g->nodes[i];
    for (uint32_t k = 0; k < n->num_operands; ++k)
      if (reads_into(r, n->operands[k], last)) return false;
  }
  for (uint32_t i = 0; i < g->num_outputs; ++i)
    if (reads_into(r, g->outputs[i].node, last)) return false;
  // A prefix node reading a block's weight (a weight read before the
  // blocks) would be copied with block 0 only.
  for (uint32_t i = 0; i < r->start; ++i) {
    const tj_node_t* n = &g->nodes[i];
    for (uint32_t k = 0; k < n->num_operands; ++k) {
      uint32_t u = n->operands[k];
      if (u != TJ_NODE_NONE && r->owner[u] != NONE32) return false;
    }
  }
  // Commutative operands are ordered by node (canonicalize's nf_commute),
  // and blocks 3.. are block 2's copies: a shared input standing among
  // the weights read before the blocks, after some blocks' and before
  // others', would order a weight and it one way in block 2 and the other
  // way in a later block.
  uint32_t lo = NONE32, hi = 0;
  for (uint32_t q = 0; q < r->start; ++q) {
    if (r->owner[q] == NONE32 || r->owner[q] < kProbeBlocks - 1) continue;
    if (lo == NONE32) lo = q;
    hi = q;
  }
  for (uint32_t q = lo + 1; lo != NONE32 && q < hi; ++q)
    if (g->nodes[q].op == TJ_OP_INPUT && r->owner[q] == NONE32) return false;
  if (r->num_slots) {
    r->slots =
        tj_alloc(g->allocator, sizeof(uint32_t) * r->count * r->num_slots);
    if (!r->slots) return false;
    for (uint32_t q = 0; q < r->start; ++q) {
      if (r->owner[q] != NONE32)
        r->slots[r->owner[q] * r->num_slots + r->slot_of[q]] = q;
    }
  }
  return true;
}

static void add_candidate(uint32_t* list, uint32_t* n, uint32_t p) {
  for (uint32_t i = 0; i < *n; ++i)
    if (list[i] == p) return;
  if (*n < kMaxCandidates) list[(*n)++] = p;
}

// The periods to try: distances from an output's node (or one of its
// operands, when a suffix follows the blocks) back to the nodes of its
// signature. Few: a block's last value is rarely repeated within it.
static uint32_t candidates(const tj_graph_t* g, const uint64_t* sig,
                           uint32_t* list) {
  uint32_t n = 0;
  uint32_t anchors[16], num_anchors = 0;
  for (uint32_t i = 0; i < g->num_outputs && num_anchors < 4; ++i)
    anchors[num_anchors++] = g->outputs[i].node;
  for (uint32_t a = 0; a < num_anchors && num_anchors < 16; ++a) {
    const tj_node_t* node = &g->nodes[anchors[a]];
    for (uint32_t k = 0; k < node->num_operands && num_anchors < 16; ++k) {
      if (node->operands[k] != TJ_NODE_NONE)
        anchors[num_anchors++] = node->operands[k];
    }
  }
  for (uint32_t a = 0; a < num_anchors; ++a) {
    uint32_t x = anchors[a];
    // Periods d with d * kMinBlocks <= x + 1: the nodes from x - d_max up.
    uint32_t d_max = (x + 1) / kMinBlocks;
    for (uint32_t d = 1; d <= d_max && d <= x; ++d) {
      if (sig[x - d] == sig[x]) add_candidate(list, &n, d);
    }
  }
  // Ascending: the smallest period that repeats is the block.
  for (uint32_t i = 1; i < n; ++i) {
    for (uint32_t j = i; j > 0 && list[j - 1] > list[j]; --j) {
      uint32_t t = list[j];
      list[j] = list[j - 1];
      list[j - 1] = t;
    }
  }
  return n;
}

static bool find_region(const tj_graph_t* g, const uint64_t* sig,
                        region_t* out) {
  uint32_t list[kMaxCandidates];
  uint32_t num = candidates(g, sig, list);
  uint32_t n = g->num_nodes;
  out->owner = tj_alloc(g->allocator, sizeof(uint32_t) * n);
  out->slot_of = tj_alloc(g->allocator, sizeof(uint32_t) * n);
  out->slots = NULL;
  if (!out->owner || !out->slot_of) return false;
  for (uint32_t c = 0; c < num; ++c) {
    uint32_t p = list[c];
    // The longest run of nodes equal (by signature) to the node a period on.
    uint32_t best_a = 0, best_len = 0;
    for (uint32_t i = 0; i + p < n;) {
      if (sig[i] != sig[i + p]) {
        ++i;
        continue;
      }
      uint32_t j = i;
      while (j + p < n && sig[j] == sig[j + p]) ++j;
      if (j - i > best_len) {
        best_len = j - i;
        best_a = i;
      }
      i = j;
    }
    // Where the blocks begin within the run: the first phase whose blocks
    // check (the others cut the chain into two reads).
    for (uint32_t phase = 0; phase < p; ++phase) {
      uint32_t start = best_a + phase;
      if (best_len + p < phase + kMinBlocks * p) break;
      out->start = start;
      out->period = p;
      out->count = (best_len + p - phase) / p;
      if (check_blocks(g, out)) return true;
    }
  }
  return false;
}

//===--- the probe ---===//

typedef struct probe_t {
  tj_plan_t plan;
  // Probe input k came from original node input_orig[k].
  uint32_t* input_orig;
  uint32_t num_inputs;
} probe_t;

// The probe's extra outputs: the blocks' values, then (a one-block probe)
// the prefix node block 0 reads in their place.
static const char* const kExportNames[kProbeBlocks + 1] = {
    "tj_region_value_0", "tj_region_value_1", "tj_region_value_2",
    "tj_region_carry"};

// The prefix, blocks 0 .. |blocks| - 1 and the suffix of |g| (the suffix
// reading the last of them's value), outputs: |g|'s, then the blocks'
// values and, for one block, the node it reads in place of a block's value.
static tj_status_t build_probe(const tj_graph_t* g, const region_t* r,
                               uint32_t blocks, probe_t* probe) {
  tj_allocator_t a = g->allocator;
  uint32_t probe_end = r->start + blocks * r->period;
  uint32_t last = r->start + (r->count - 1) * r->period + r->carried;
  uint32_t last_probe = r->start + (blocks - 1) * r->period + r->carried;
  uint32_t num_exports = blocks == 1 ? 2 : blocks;
  probe->input_orig = tj_alloc(a, sizeof(uint32_t) * (g->num_inputs + 1));
  if (!probe->input_orig) return tj_status_oom();
  tj_rewriter_t rw;
  TJ_RETURN_IF_ERROR(tj_rewriter_begin_bare(&rw, g));
  tj_status_t status = NULL;
  for (uint32_t i = 0; !status && i < g->num_nodes; ++i) {
    if (i >= probe_end && i < r->end) continue;
    const tj_node_t* node = &g->nodes[i];
    // later blocks' weights: copies of block 2's
    if (node->op == TJ_OP_INPUT && r->owner[i] != NONE32 &&
        r->owner[i] >= blocks) {
      continue;
    }
    if (node->op == TJ_OP_INPUT) {
      int64_t dims[TJ_MAX_RANK];
      tj_node_desc_t desc;
      memset(&desc, 0, sizeof(desc));
      desc.op = TJ_OP_INPUT;
      desc.dtype = node->dtype;
      desc.rank = node->rank;
      desc.dims = dims;
      desc.attrs.name = node->attrs.name;
      status = tj_rewriter_dims(&rw, node->rank, node->dims, dims);
      if (!status) status = tj_graph_append(rw.dst, &desc, &rw.map[i]);
      if (!status) probe->input_orig[probe->num_inputs++] = i;
    } else if (i < r->end) {
      status = tj_rewriter_clone(&rw, i);
    } else {
      uint32_t ops[16];
      if (node->num_operands > TJ_ARRAY_SIZE(ops)) {
        status = tj_unsupported("region: a suffix node of %u operands",
                                node->num_operands);
        break;
      }
      for (uint32_t k = 0; k < node->num_operands; ++k) {
        uint32_t u = node->operands[k];
        ops[k] = u == TJ_NODE_NONE ? TJ_NODE_NONE
                                   : rw.map[u == last ? last_probe : u];
      }
      status = tj_rewriter_copy(&rw, i, ops, &rw.map[i]);
    }
  }
  if (status) {
    tj_rewriter_abandon(&rw);
    return status;
  }
  uint32_t num_extra = g->num_outputs + num_exports;
  uint32_t* nodes = tj_alloc(a, sizeof(uint32_t) * num_extra);
  const char** names = tj_alloc(a, sizeof(char*) * num_extra);
  if (!nodes || !names) status = tj_status_oom();
  for (uint32_t i = 0; !status && i < g->num_outputs; ++i) {
    uint32_t u = g->outputs[i].node;
    nodes[i] = rw.map[u == last ? last_probe : u];
    names[i] = g->outputs[i].name;
    for (uint32_t e = 0; e <= kProbeBlocks; ++e) {
      if (strcmp(names[i], kExportNames[e]) == 0)
        status = tj_unsupported("region: output name %s", names[i]);
    }
  }
  for (uint32_t e = 0; !status && e < blocks; ++e) {
    nodes[g->num_outputs + e] = rw.map[r->start + e * r->period + r->carried];
    names[g->num_outputs + e] = kExportNames[e];
  }
  if (!status && blocks == 1) {
    nodes[g->num_outputs + 1] = rw.map[r->carry_in];
    names[g->num_outputs + 1] = kExportNames[kProbeBlocks];
  }
  tj_graph_t* graph = NULL;
  if (!status) {
    status =
        tj_rewriter_finish_outputs(&rw, false, num_extra, nodes, names, &graph);
  } else {
    tj_rewriter_abandon(&rw);
  }
  tj_free(a, nodes, sizeof(uint32_t) * num_extra);
  tj_free(a, (void*)names, sizeof(char*) * num_extra);
  if (!status) tj_plan_initialize(&probe->plan, graph);
  return status;
}

static void probe_deinitialize(const tj_graph_t* g, probe_t* probe) {
  tj_plan_deinitialize(&probe->plan);
  tj_free(g->allocator, probe->input_orig,
          sizeof(uint32_t) * (g->num_inputs + 1));
}

//===--- reading the processed probe ---===//

// The processed probe's nodes by part: 0 its inputs, 1 block 0 (and the
// prefix and every node block 0 shares with the others, such as a constant
// CSE merged), 2 block 1, 3 block 2, 4 the suffix: the first of block 0's,
// 1's, 2's values and the outputs that needs the node.
typedef struct parts_t {
  uint8_t* part;
  uint32_t* rel;  // position within its part
  uint32_t size[5];
  uint32_t* list[5];  // the part's nodes in order
  uint32_t value[kProbeBlocks];
} parts_t;

static tj_status_t label(const tj_graph_t* p, uint32_t num_outputs,
                         parts_t* parts, bool* out_ok) {
  tj_allocator_t a = p->allocator;
  uint32_t n = p->num_nodes;
  *out_ok = false;
  parts->part = tj_alloc(a, n);
  parts->rel = tj_alloc(a, sizeof(uint32_t) * n);
  uint8_t* need = tj_alloc(a, n);
  uint32_t* all = tj_alloc(a, sizeof(uint32_t) * n);
  if (!parts->part || !parts->rel || !need || !all) {
    tj_free(a, need, n);
    tj_free(a, all, sizeof(uint32_t) * n);
    return tj_status_oom();
  }
  memset(parts->part, kUnset, n);
  for (uint32_t i = 0; i < p->num_inputs; ++i) parts->part[p->inputs[i]] = 0;
  for (uint8_t l = 1; l <= 4; ++l) {
    memset(need, 0, n);
    if (l < 4) {
      need[parts->value[l - 1]] = 1;
    } else {
      for (uint32_t i = 0; i < num_outputs; ++i) need[p->outputs[i].node] = 1;
    }
    for (uint32_t i = n; i-- > 0;) {
      if (!need[i] || parts->part[i] != kUnset) continue;
      parts->part[i] = l;
      const tj_node_t* node = &p->nodes[i];
      for (uint32_t k = 0; k < node->num_operands; ++k) {
        if (node->operands[k] != TJ_NODE_NONE) need[node->operands[k]] = 1;
      }
    }
  }
  tj_free(a, need, n);
  bool ok = true;
  uint32_t fill = 0;
  for (uint8_t l = 0; l <= 4; ++l) {
    parts->list[l] = all + fill;
    parts->size[l] = 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (parts->part[i] == kUnset) ok = false;  // needed by nothing
      if (parts->part[i] != l) continue;
      parts->rel[i] = parts->size[l]++;
      all[fill++] = i;
    }
  }
  *out_ok = ok;
  return NULL;
}

static void parts_deinitialize(const tj_graph_t* p, parts_t* parts) {
  tj_allocator_t a = p->allocator;
  uint32_t n = p->num_nodes;
  tj_free(a, parts->part, n);
  tj_free(a, parts->rel, sizeof(uint32_t) * n);
  if (parts->list[0]) tj_free(a, parts->list[0], sizeof(uint32_t) * n);
}

// The original node of probe input node |node|.
static uint32_t input_orig(const tj_graph_t* p, const probe_t* probe,
                           uint32_t node) {
  for (uint32_t k = 0; k < p->num_inputs; ++k)
    if (p->inputs[k] == node) return probe->input_orig[k];
  return NONE32;
}

// The probe input node of the original's input |q| (|input_orig|: the
// probe's inputs' original nodes), NONE32 if the probe has none.
static uint32_t probe_input(const tj_graph_t* p, const uint32_t* input_orig,
                            uint32_t q) {
  for (uint32_t i = 0; i < p->num_inputs; ++i)
    if (input_orig[i] == q) return p->inputs[i];
  return NONE32;
}

// Whether block 2 came out as block 1 did: node for node, with block 1's
// value where block 1 read block 0's, the same shared nodes and inputs, and
// its own inputs where block 1 read its own; and whether the suffix reads
// only block 2, shared nodes, inputs and itself.
static bool periodic(const tj_graph_t* p, const probe_t* probe,
                     const region_t* r, const parts_t* parts) {
  if (parts->size[2] != parts->size[3]) return false;
  if (parts->part[parts->value[1]] != 2 || parts->part[parts->value[2]] != 3 ||
      parts->rel[parts->value[1]] != parts->rel[parts->value[2]]) {
    return false;
  }
  for (uint32_t j = 0; j < parts->size[2]; ++j) {
    uint32_t x = parts->list[2][j], y = parts->list[3][j];
    if (!same_node(p, x, p, y)) return false;
    const tj_node_t* nx = &p->nodes[x];
    const tj_node_t* ny = &p->nodes[y];
    for (uint32_t k = 0; k < nx->num_operands; ++k) {
      uint32_t u = nx->operands[k], v = ny->operands[k];
      if (u == TJ_NODE_NONE || v == TJ_NODE_NONE) {
        if (u != v) return false;
        continue;
      }
      uint8_t pu = parts->part[u], pv = parts->part[v];
      if (pu == 2 && pv == 3) {
        if (parts->rel[u] != parts->rel[v]) return false;
      } else if (pu == 1 && pv == 2) {
        if (u != parts->value[0] || v != parts->value[1]) return false;
      } else if (pu == 1 && pv == 1) {
        if (u != v) return false;
      } else if (pu == 0 && pv == 0) {
        uint32_t ou = input_orig(p, probe, u), ov = input_orig(p, probe, v);
        if (ou == NONE32 || ov == NONE32) return false;
        uint32_t bu = r->owner[ou], bv = r->owner[ov];
        if (bu == NONE32 && bv == NONE32) {
          if (ou != ov) return false;
        } else if (bu != 1 || bv != 2 || to_block(r, ou, 2) != ov) {
          return false;
        }
      } else {
        return false;
      }
    }
  }
  for (uint32_t i = 0; i < p->num_outputs; ++i)
    if (parts->part[p->outputs[i].node] == 2) return false;
  for (uint32_t j = 0; j < parts->size[4]; ++j) {
    const tj_node_t* n = &p->nodes[parts->list[4][j]];
    for (uint32_t k = 0; k < n->num_operands; ++k) {
      uint32_t u = n->operands[k];
      if (u != TJ_NODE_NONE && parts->part[u] == 2) return false;
    }
  }
  return true;
}

// Whether block 1's node |u| and block 2's |v| stand in the same place: a
// node of each at the same position, block 0's and block 1's values, the
// same shared node, or inputs as periodic() says.
static bool corresponds(const tj_graph_t* p, const probe_t* probe,
                        const region_t* r, const parts_t* parts, uint32_t u,
                        uint32_t v) {
  uint8_t pu = parts->part[u], pv = parts->part[v];
  if (pu == 2 && pv == 3) return parts->rel[u] == parts->rel[v];
  if (pu == 1 && pv == 2) return u == parts->value[0] && v == parts->value[1];
  if (pu == 1 && pv == 1) return u == v;
  if (pu != 0 || pv != 0) return false;
  uint32_t ou = input_orig(p, probe, u), ov = input_orig(p, probe, v);
  if (ou == NONE32 || ov == NONE32) return false;
  uint32_t bu = r->owner[ou], bv = r->owner[ov];
  if (bu == NONE32 && bv == NONE32) return ou == ov;
  return bu == 1 && bv == 2 && to_block(r, ou, 2) == ov;
}

// The part a group belongs to (that of its anchor), or kUnset when its
// nodes are not all of that part or shared (block 0's part): a group across
// two blocks, which copies could not reproduce.
static uint8_t group_part(const parts_t* parts, const tj_group_t* grp) {
  uint8_t part = parts->part[grp->anchor];
  for (uint32_t i = 0; i < grp->num_nodes; ++i) {
    uint8_t q = parts->part[grp->nodes[i]];
    if (q != part && q != 1) return kUnset;
  }
  return part;
}

static bool same_list(const tj_graph_t* p, const probe_t* probe,
                      const region_t* r, const parts_t* parts, uint32_t n,
                      const uint32_t* a, const uint32_t* b) {
  for (uint32_t i = 0; i < n; ++i)
    if (!corresponds(p, probe, r, parts, a[i], b[i])) return false;
  return true;
}

// Whether the probe's fusion groups are in part order, none across two
// blocks, and block 2's groups are block 1's in the same places (so that
// the copies of block 2 take copies of its groups).
static bool groups_periodic(const tj_graph_t* p, const tj_fusion_t* fusion,
                            const probe_t* probe, const region_t* r,
                            const parts_t* parts, uint32_t* out_first) {
  uint8_t last = 1;
  uint32_t count[5] = {0, 0, 0, 0, 0};
  for (uint32_t k = 0; k < fusion->num_groups; ++k) {
    uint8_t part = group_part(parts, &fusion->groups[k]);
    if (part == kUnset || part == 0 || part < last) return false;
    last = part;
    ++count[part];
  }
  out_first[1] = 0;
  for (uint32_t q = 2; q <= 4; ++q)
    out_first[q] = out_first[q - 1] + count[q - 1];
  if (count[2] != count[3] || count[2] == 0) return false;
  for (uint32_t k = 0; k < count[2]; ++k) {
    const tj_group_t* a = &fusion->groups[out_first[2] + k];
    const tj_group_t* b = &fusion->groups[out_first[3] + k];
    if (a->kind != b->kind || a->num_nodes != b->num_nodes ||
        a->num_inputs != b->num_inputs || a->num_outputs != b->num_outputs ||
        !corresponds(p, probe, r, parts, a->anchor, b->anchor) ||
        !same_list(p, probe, r, parts, a->num_nodes, a->nodes, b->nodes) ||
        !same_list(p, probe, r, parts, a->num_inputs, a->inputs, b->inputs) ||
        !same_list(p, probe, r, parts, a->num_outputs, a->outputs,
                   b->outputs)) {
      return false;
    }
  }
  return true;
}

//===--- the whole graph from the probe ---===//

// Node |t| of |p| with its dims, ints, name and owned data in |s|'s arena
// and no operands in |*dst|: a template every copy of the node shares.
static tj_status_t payload(tj_graph_t* s, const tj_graph_t* p, uint32_t t,
                           tj_node_t* dst) {
  const tj_node_t* src = &p->nodes[t];
  tj_arena_t* arena = &s->arena;
  *dst = *src;
  dst->operands = NULL;
  if (src->rank > 0) {
    dst->dims =
        tj_arena_memdup(arena, src->dims, sizeof(int64_t) * (size_t)src->rank);
    if (!dst->dims) return tj_status_oom();
  }
  if (src->attrs.num_ints) {
    dst->attrs.ints = tj_arena_memdup(arena, src->attrs.ints,
                                      sizeof(int64_t) * src->attrs.num_ints);
    if (!dst->attrs.ints) return tj_status_oom();
  }
  if (src->attrs.name) {
    dst->attrs.name = tj_arena_strdup(arena, src->attrs.name);
    if (!dst->attrs.name) return tj_status_oom();
  }
  if (src->op == TJ_OP_CONSTANT && src->attrs.data && !src->attrs.borrowed) {
    size_t bytes = constant_bytes(p, t);
    dst->attrs.data = bytes ? tj_arena_memdup(arena, src->attrs.data, bytes)
                            : tj_arena_alloc(arena, 0);
    if (!dst->attrs.data) return tj_status_oom();
  }
  return NULL;
}

typedef struct stitch_t {
  const tj_graph_t* g;  // the original
  const tj_graph_t* p;  // the processed probe
  const probe_t* probe;
  const region_t* r;
  const parts_t* parts;
  tj_graph_t* s;       // the result
  tj_node_t* tmpl;     // p's nodes with their payloads in s's arena
  uint32_t* input_of;  // original input node -> s node
  uint32_t* base;      // instance -> s node of its part's first node
  uint32_t* probe_to_s;
  // The probe's fusion groups (NULL: fuse runs over the whole graph) and
  // where each part's begin.
  const tj_fusion_t* pf;
  const uint32_t* first;
} stitch_t;

// The s node that operand |u| (a probe node) of a node of instance |j|
// (0 .. count - 1; count: the suffix) reads.
static uint32_t map_operand(const stitch_t* st, uint32_t j, uint32_t u) {
  const parts_t* parts = st->parts;
  const region_t* r = st->r;
  uint32_t last = r->count - 1;
  switch (parts->part[u]) {
    case 0: {
      uint32_t q = input_orig(st->p, st->probe, u);
      uint32_t to = j > last ? last : j;
      if (r->owner[q] == kProbeBlocks - 1 && to >= kProbeBlocks - 1)
        q = to_block(r, q, to);
      return st->input_of[q];
    }
    case 1:
      return st->probe_to_s[u];
    case 2:
      if (j <= 1) return st->probe_to_s[u];
      // block 1's value, read by a copy of block 2: the copy before's
      return st->base[j - 1] + parts->rel[parts->value[1]];
    case 3:
      return st->base[j > last ? last : j] + parts->rel[u];
    default:
      return st->probe_to_s[u];
  }
}

static tj_status_t emit(stitch_t* st, uint32_t j, uint32_t t) {
  tj_graph_t* s = st->s;
  tj_node_t node = st->tmpl[t];
  const tj_node_t* src = &st->p->nodes[t];
  if (src->num_operands) {
    uint32_t* ops =
        tj_arena_alloc(&s->arena, sizeof(uint32_t) * src->num_operands);
    if (!ops) return tj_status_oom();
    for (uint32_t k = 0; k < src->num_operands; ++k) {
      uint32_t u = src->operands[k];
      ops[k] = u == TJ_NODE_NONE ? TJ_NODE_NONE : map_operand(st, j, u);
    }
    node.operands = ops;
  }
  s->nodes[s->num_nodes++] = node;
  return NULL;
}

// Node |o| of s, read by block 2's copy in s, as block |j|'s copy reads
// it (j >= 3): block 2's own node or block 1's value, moved by j - 2
// blocks; block 2's weight, block j's; anything else (inputs, the prefix,
// shared nodes), itself. What map_operand gives for the probe node that
// |o| copies, without the probe.
static uint32_t copy_operand(const stitch_t* st, uint32_t j, uint32_t o) {
  if (o == TJ_NODE_NONE) return o;
  if (o >= st->base[1]) return o + (j - 2) * st->parts->size[3];
  // s's inputs are its first nodes, in the original's order
  if (o < st->s->num_inputs) {
    uint32_t q = st->g->inputs[o];
    if (st->r->owner[q] == kProbeBlocks - 1)
      return st->input_of[to_block(st->r, q, j)];
  }
  return o;
}

// Block |j|'s copy (j >= 3) from block 2's, already in s: the same
// templates, each operand moved by copy_operand; the block's operands in
// one allocation.
static tj_status_t copy_block(stitch_t* st, uint32_t j) {
  tj_graph_t* s = st->s;
  uint32_t n = st->parts->size[3];
  const tj_node_t* from = &s->nodes[st->base[2]];
  size_t num_ops = 0;
  for (uint32_t i = 0; i < n; ++i) num_ops += from[i].num_operands;
  uint32_t* ops =
      num_ops ? tj_arena_alloc(&s->arena, sizeof(uint32_t) * num_ops) : NULL;
  if (num_ops && !ops) return tj_status_oom();
  for (uint32_t i = 0; i < n; ++i) {
    tj_node_t node = from[i];
    if (node.num_operands) {
      for (uint32_t k = 0; k < node.num_operands; ++k)
        ops[k] = copy_operand(st, j, from[i].operands[k]);
      node.operands = ops;
      ops += node.num_operands;
    }
    s->nodes[s->num_nodes++] = node;
  }
  return NULL;
}

static tj_status_t stitch(stitch_t* st) {
  const tj_graph_t* g = st->g;
  const tj_graph_t* p = st->p;
  const region_t* r = st->r;
  const parts_t* parts = st->parts;
  tj_graph_t* s = st->s;
  tj_allocator_t a = s->allocator;
  for (uint32_t t = 0; t < p->num_nodes; ++t) {
    if (parts->part[t] != 0)
      TJ_RETURN_IF_ERROR(payload(st->s, p, t, &st->tmpl[t]));
  }
  uint64_t total = (uint64_t)g->num_inputs + parts->size[1] + parts->size[2] +
                   (uint64_t)(r->count - 2) * parts->size[3] + parts->size[4];
  if (total >= UINT32_MAX - 2) return tj_unsupported("region: too many nodes");
  TJ_RETURN_IF_ERROR(tj_array_reserve(a, (void**)&s->nodes, &s->node_capacity,
                                      (uint32_t)total, sizeof(tj_node_t)));
  TJ_RETURN_IF_ERROR(tj_array_reserve(a, (void**)&s->inputs, &s->input_capacity,
                                      g->num_inputs, sizeof(uint32_t)));
  // The inputs, in the original's order; a copy's take their types from
  // block 2's (equal by the check) and their names from the original.
  for (uint32_t k = 0, pk = 0; k < g->num_inputs; ++k) {
    uint32_t q = g->inputs[k];
    uint32_t pnode = NONE32;
    if (r->owner[q] != NONE32 && r->owner[q] >= kProbeBlocks) {
      // block b's input: block 2's in the same place
      pnode = probe_input(p, st->probe->input_orig,
                          to_block(r, q, kProbeBlocks - 1));
      if (pnode == NONE32) return tj_internal("region: input not in probe");
    } else {
      pnode = p->inputs[pk++];
      st->probe_to_s[pnode] = s->num_nodes;
    }
    tj_node_t node = p->nodes[pnode];
    node.dims = NULL;
    if (node.rank > 0) {
      node.dims = tj_arena_memdup(&s->arena, p->nodes[pnode].dims,
                                  sizeof(int64_t) * (size_t)node.rank);
      if (!node.dims) return tj_status_oom();
    }
    node.attrs.name = tj_arena_strdup(&s->arena, g->nodes[q].attrs.name);
    if (!node.attrs.name) return tj_status_oom();
    st->input_of[q] = s->num_nodes;
    s->inputs[s->num_inputs++] = s->num_nodes;
    s->nodes[s->num_nodes++] = node;
  }
  // Block 0 with the prefix, block 1, then block 2 once per block after.
  for (uint32_t i = 0; i < parts->size[1]; ++i) {
    st->probe_to_s[parts->list[1][i]] = s->num_nodes;
    TJ_RETURN_IF_ERROR(emit(st, 0, parts->list[1][i]));
  }
  st->base[0] = NONE32;
  st->base[1] = s->num_nodes;
  for (uint32_t i = 0; i < parts->size[2]; ++i) {
    st->probe_to_s[parts->list[2][i]] = s->num_nodes;
    TJ_RETURN_IF_ERROR(emit(st, 1, parts->list[2][i]));
  }
  st->base[2] = s->num_nodes;
  for (uint32_t i = 0; i < parts->size[3]; ++i) {
    st->probe_to_s[parts->list[3][i]] = s->num_nodes;
    TJ_RETURN_IF_ERROR(emit(st, 2, parts->list[3][i]));
  }
  for (uint32_t j = 3; j < r->count; ++j) {
    st->base[j] = s->num_nodes;
    TJ_RETURN_IF_ERROR(copy_block(st, j));
  }
  for (uint32_t i = 0; i < parts->size[4]; ++i) {
    st->probe_to_s[parts->list[4][i]] = s->num_nodes;
    TJ_RETURN_IF_ERROR(emit(st, r->count, parts->list[4][i]));
  }
  // The original's outputs (the probe's first ones), the last block's
  // value for block 2's.
  for (uint32_t i = 0; i < p->num_outputs; ++i) {
    uint32_t u = p->outputs[i].node;
    uint32_t node = parts->part[u] == 3 ? st->base[r->count - 1] + parts->rel[u]
                                        : map_operand(st, r->count, u);
    TJ_RETURN_IF_ERROR(tj_graph_append_output(s, node, p->outputs[i].name));
  }
  for (uint32_t i = 0; i < p->num_guards; ++i) {
    const tj_guard_t* guard = &p->guards[i];
    uint32_t node =
        guard->node < p->num_nodes ? st->probe_to_s[guard->node] : NONE32;
    if (node == NONE32) node = s->num_inputs ? s->inputs[0] : 0;
    TJ_RETURN_IF_ERROR(tj_graph_add_guard(s, guard->a, guard->b, node));
  }
  s->finalized = true;
  return NULL;
}

// Group |src| of the probe as instance |j|'s, appended to |f|.
static tj_status_t map_list(const stitch_t* st, tj_fusion_t* f, uint32_t j,
                            uint32_t n, const uint32_t* src, uint32_t** out) {
  uint32_t* list = tj_arena_alloc(&f->arena, sizeof(uint32_t) * (n ? n : 1));
  if (!list) return tj_status_oom();
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t v = map_operand(st, j, src[i]);
    // ascending, as fusion.h wants (a shared node may map below a copy's)
    uint32_t k = i;
    for (; k > 0 && list[k - 1] > v; --k) list[k] = list[k - 1];
    list[k] = v;
  }
  *out = list;
  return NULL;
}

static tj_status_t copy_group(const stitch_t* st, tj_fusion_t* f, uint32_t j,
                              const tj_group_t* src) {
  tj_group_t* grp = &f->groups[f->num_groups++];
  grp->kind = src->kind;
  grp->anchor = map_operand(st, j, src->anchor);
  grp->num_nodes = src->num_nodes;
  grp->num_inputs = src->num_inputs;
  grp->num_outputs = src->num_outputs;
  TJ_RETURN_IF_ERROR(
      map_list(st, f, j, src->num_nodes, src->nodes, &grp->nodes));
  TJ_RETURN_IF_ERROR(
      map_list(st, f, j, src->num_inputs, src->inputs, &grp->inputs));
  TJ_RETURN_IF_ERROR(
      map_list(st, f, j, src->num_outputs, src->outputs, &grp->outputs));
  for (uint32_t i = 0; i < grp->num_outputs; ++i)
    f->producer[grp->outputs[i]] = f->num_groups - 1;
  return NULL;
}

// List |src| of block 2's group in s as block |j|'s (copy_operand),
// ascending, appended to |f|.
static tj_status_t copy_list(const stitch_t* st, tj_fusion_t* f, uint32_t j,
                             uint32_t n, const uint32_t* src, uint32_t** out) {
  uint32_t* list = tj_arena_alloc(&f->arena, sizeof(uint32_t) * (n ? n : 1));
  if (!list) return tj_status_oom();
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t v = copy_operand(st, j, src[i]);
    // a block's weights may stand in another order among the inputs
    uint32_t k = i;
    for (; k > 0 && list[k - 1] > v; --k) list[k] = list[k - 1];
    list[k] = v;
  }
  *out = list;
  return NULL;
}

// Block 2's group |q| of |f| as block |j|'s (j >= 3), appended to |f|.
static tj_status_t copy_block_group(const stitch_t* st, tj_fusion_t* f,
                                    uint32_t j, uint32_t q) {
  tj_group_t* grp = &f->groups[f->num_groups++];
  const tj_group_t* src = &f->groups[q];
  *grp = *src;
  grp->anchor = copy_operand(st, j, src->anchor);
  TJ_RETURN_IF_ERROR(
      copy_list(st, f, j, src->num_nodes, src->nodes, &grp->nodes));
  TJ_RETURN_IF_ERROR(
      copy_list(st, f, j, src->num_inputs, src->inputs, &grp->inputs));
  TJ_RETURN_IF_ERROR(
      copy_list(st, f, j, src->num_outputs, src->outputs, &grp->outputs));
  for (uint32_t i = 0; i < grp->num_outputs; ++i)
    f->producer[grp->outputs[i]] = f->num_groups - 1;
  f->copy_of[f->num_groups - 1] = q;
  return NULL;
}

// The probe's groups over the whole graph: block 0's, block 1's, block
// 2's once per copy (from the first copy's, as the nodes), the suffix's.
static tj_status_t stitch_fusion(const stitch_t* st, tj_fusion_t** out) {
  const tj_fusion_t* pf = st->pf;
  const uint32_t* first = st->first;
  uint32_t count = st->r->count;
  uint32_t per_block = first[4] - first[3];
  uint64_t total = (uint64_t)pf->num_groups + (count - 3) * per_block;
  tj_allocator_t a = st->s->allocator;
  tj_fusion_t* f = tj_alloc(a, sizeof(*f));
  if (!f) return tj_status_oom();
  memset(f, 0, sizeof(*f));
  f->concat_boxes = pf->concat_boxes;
  tj_arena_initialize(&f->arena, a);
  uint32_t n = st->s->num_nodes;
  f->num_nodes = n;
  f->groups = tj_arena_alloc(&f->arena, sizeof(tj_group_t) * (total + 1));
  f->producer = tj_arena_alloc(&f->arena, sizeof(uint32_t) * (n ? n : 1));
  f->copy_of = tj_arena_alloc(&f->arena, sizeof(uint32_t) * (total + 1));
  tj_status_t status =
      f->groups && f->producer && f->copy_of ? NULL : tj_status_oom();
  for (uint32_t i = 0; !status && i < n; ++i) f->producer[i] = TJ_GROUP_NONE;
  for (uint64_t k = 0; !status && k <= total; ++k)
    f->copy_of[k] = TJ_GROUP_NONE;
  for (uint32_t k = 0; !status && k < first[3]; ++k)
    status = copy_group(st, f, k < first[2] ? 0 : 1, &pf->groups[k]);
  uint32_t block2 = f->num_groups;  // block 2's groups in |f|
  for (uint32_t k = first[3]; !status && k < first[4]; ++k)
    status = copy_group(st, f, 2, &pf->groups[k]);
  for (uint32_t j = 3; j < count; ++j) {
    for (uint32_t k = 0; !status && k < per_block; ++k)
      status = copy_block_group(st, f, j, block2 + k);
  }
  for (uint32_t k = first[4]; !status && k < pf->num_groups; ++k)
    status = copy_group(st, f, count, &pf->groups[k]);
  if (status) {
    tj_fusion_destroy(f);
    return status;
  }
  *out = f;
  return NULL;
}

static tj_status_t build_whole(const tj_graph_t* g, const probe_t* probe,
                               const region_t* r, const parts_t* parts,
                               const uint32_t* first, tj_graph_t** out_graph,
                               tj_fusion_t** out_fusion) {
  const tj_graph_t* p = probe->plan.graph;
  tj_allocator_t a = g->allocator;
  stitch_t st = {.g = g,
                 .p = p,
                 .probe = probe,
                 .r = r,
                 .parts = parts,
                 .pf = first ? probe->plan.fusion : NULL,
                 .first = first};
  tj_status_t status = tj_graph_create(g->context, g->name, &st.s);
  if (status) return status;
  tj_dimtab_deinitialize(&st.s->dims);
  status = tj_dimtab_copy(&st.s->dims, &p->dims, a);
  st.tmpl = tj_calloc(a, p->num_nodes, sizeof(tj_node_t));
  st.input_of = tj_alloc(a, sizeof(uint32_t) * g->num_nodes);
  st.base = tj_alloc(a, sizeof(uint32_t) * (r->count + 1));
  st.probe_to_s = tj_alloc(a, sizeof(uint32_t) * p->num_nodes);
  if (!status && (!st.tmpl || !st.input_of || !st.base || !st.probe_to_s))
    status = tj_status_oom();
  if (!status) status = stitch(&st);
  if (!status && st.pf) status = stitch_fusion(&st, out_fusion);
  tj_free(a, st.tmpl, sizeof(tj_node_t) * p->num_nodes);
  tj_free(a, st.input_of, sizeof(uint32_t) * g->num_nodes);
  tj_free(a, st.base, sizeof(uint32_t) * (r->count + 1));
  tj_free(a, st.probe_to_s, sizeof(uint32_t) * p->num_nodes);
  if (status) {
    tj_graph_destroy(st.s);
    return status;
  }
  *out_graph = st.s;
  return NULL;
}

//===--- one block for three ---===//

// Three probed blocks guard against two things: block 0 reads a prefix
// node where every later block reads a block's value, and the suffix reads
// the last block's value where a block's is read by the next block. A
// probe of one block (the prefix, block 0, the suffix) stands for them
// when the graph stages cannot tell those boundary values apart, which
// these checks establish on the one block's input (the carried value c,
// the prefix node block 0 reads where block 1 reads block 0's value v):
//
// - Before the passes, on the graph: c is one node, no node of block 1
//   reads it (it is not also shared), no prefix node after it depends on
//   it (so what depends on c after the passes is block 0's), and none of
//   the prefix, block 0 and the suffix is an op whose pass pattern-matches
//   across nodes (attention_match's softmax chains, the quantized
//   matmul's dequantizes, attention pairing, custom ops).
// - After them, on the processed probe: c' and v' have one type and are
//   both plain: an input, add, sub, mul or div, ops no canonicalize rule,
//   fold or decompose looks through (they look through constants, full,
//   broadcast_to, neg, not, abs, cast, transpose, reshape, reductions and
//   a unary op of the reader's own kind); cse merges by operand identity,
//   so the nodes that depend on c' or block 0's weights (the variant ones)
//   merge with nothing of another block, and those that depend on neither
//   are what cse makes every block share. The one order-sensitive rule,
//   nf_commute (operands in node order, constants last), orders every
//   commutative variant node's operands as it would in a later block,
//   where c' stands at v' (after every shared node and input, before the
//   block's own nodes); and nothing but the suffix reads a variant node,
//   and it only v'.
//
// Then block j's nodes are block 0's variant ones with c' read as block j
// - 1's value and block j's weights for block 0's. The probe is expanded
// so: the processed prefix and block 0, two copies, the suffix reading
// the second; fuse runs over that, and the three-block checks (blocks 1
// and 2 alike node for node and group for group) stand as before, so a
// fusion group across two blocks still sends the whole graph through fuse.

static bool plain_boundary(const tj_node_t* n) {
  switch (n->op) {
    case TJ_OP_INPUT:
    case TJ_OP_ADD:
    case TJ_OP_SUB:
    case TJ_OP_MUL:
    case TJ_OP_DIV:
      return true;
    default:
      return false;
  }
}

// Ops with canonicalize's nf_commute rule.
static bool commutative(tj_op_t op) {
  return op == TJ_OP_ADD || op == TJ_OP_MUL || op == TJ_OP_AND ||
         op == TJ_OP_OR || op == TJ_OP_EQ || op == TJ_OP_NE;
}

// Ops whose passes match patterns across several nodes.
static bool matched_across(tj_op_t op) {
  switch (op) {
    case TJ_OP_SOFTMAX:
    case TJ_OP_LOG_SOFTMAX:
    case TJ_OP_ATTENTION:
    case TJ_OP_ATTENTION_LSE:
    case TJ_OP_ATTENTION_DQ:
    case TJ_OP_ATTENTION_DKV:
    case TJ_OP_QUANTIZE:
    case TJ_OP_DEQUANTIZE:
    case TJ_OP_CUSTOM:
      return true;
    default:
      return false;
  }
}

// Whether a node of |first| .. |end| - 1 reads |u|.
static bool reads(const tj_graph_t* g, uint32_t first, uint32_t end,
                  uint32_t u) {
  for (uint32_t i = first; i < end; ++i) {
    const tj_node_t* n = &g->nodes[i];
    for (uint32_t k = 0; k < n->num_operands; ++k)
      if (n->operands[k] == u) return true;
  }
  return false;
}

// The checks before the passes (see above).
static bool one_block_eligible(const tj_graph_t* g, const region_t* r) {
  uint32_t c = r->carry_in;
  if (c == NONE32 || c == MANY32 || c >= r->start) return false;
  if (reads(g, r->start + r->period, r->start + 2 * r->period, c)) return false;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    if (i == r->start + r->period) {
      i = r->end - 1;  // blocks 1.. are block 0's
      continue;
    }
    if (matched_across(g->nodes[i].op)) return false;
  }
  // A prefix node that depends on c reads it or another such node: none
  // reads it.
  return !reads(g, c + 1, r->start, c);
}

enum {
  kNeed = 1,     // needed by block 0's value
  kDep = 2,      // depends on c' or block 0's weights
  kVariant = 4,  // kNeed and kDep, not an input: copied per block
  kOwn = 8,      // an input of block 0's (its weight)
};

// An operand's place in a later block's order: inputs, shared nodes, the
// carried value, the block's own nodes.
static int later_class(const tj_graph_t* p, const uint8_t* flag, uint32_t c,
                       uint32_t u) {
  if (u == c) return 2;
  if (flag[u] & kVariant) return 3;
  return p->nodes[u].op == TJ_OP_INPUT ? 0 : 1;
}

static bool constant_like(const tj_graph_t* p, uint32_t u) {
  return p->nodes[u].op == TJ_OP_CONSTANT || p->nodes[u].op == TJ_OP_FULL;
}

// The checks after the passes over the one-block probe |p| (carried value
// |c|, block 0's value |v|); fills |flag|.
static bool one_block_holds(const tj_graph_t* p, const probe_t* probe,
                            const region_t* r, uint32_t num_outputs, uint32_t c,
                            uint32_t v, uint8_t* flag) {
  if (c == v || !same_type(p, c, v) || !plain_boundary(&p->nodes[c]) ||
      !plain_boundary(&p->nodes[v])) {
    return false;
  }
  uint32_t n = p->num_nodes;
  memset(flag, 0, n);
  for (uint32_t k = 0; k < p->num_inputs; ++k) {
    uint32_t q = probe->input_orig[k];
    if (r->owner[q] == 0) flag[p->inputs[k]] = kDep | kOwn;
  }
  flag[c] |= kDep;
  flag[v] |= kNeed;
  for (uint32_t i = 0; i < n; ++i) {
    const tj_node_t* node = &p->nodes[i];
    for (uint32_t k = 0; k < node->num_operands; ++k) {
      uint32_t u = node->operands[k];
      if (u != TJ_NODE_NONE && (flag[u] & kDep)) flag[i] |= kDep;
    }
  }
  for (uint32_t i = v + 1; i-- > 0;) {
    if (!(flag[i] & kNeed)) continue;
    const tj_node_t* node = &p->nodes[i];
    if ((flag[i] & kDep) && i != c && node->op != TJ_OP_INPUT)
      flag[i] |= kVariant;
    for (uint32_t k = 0; k < node->num_operands; ++k) {
      uint32_t u = node->operands[k];
      if (u != TJ_NODE_NONE) flag[u] |= kNeed;
    }
  }
  if (!(flag[v] & kVariant)) return false;
  for (uint32_t i = 0; i < n; ++i) {
    const tj_node_t* node = &p->nodes[i];
    bool variant = (flag[i] & kVariant) != 0;
    for (uint32_t k = 0; k < node->num_operands; ++k) {
      uint32_t u = node->operands[k];
      // only the suffix reads into the block, and only its value
      if (u != TJ_NODE_NONE && !variant && (flag[u] & kVariant) && u != v)
        return false;
    }
    if (!variant || !commutative(node->op) || node->num_operands != 2) continue;
    uint32_t a = node->operands[0], b = node->operands[1];
    if (a == b || constant_like(p, a) || constant_like(p, b)) continue;
    int ca = later_class(p, flag, c, a), cb = later_class(p, flag, c, b);
    if (ca == cb) {
      // two inputs: a block's own against another's order may differ
      if (ca == 0 && ((flag[a] | flag[b]) & kOwn)) return false;
    } else if ((ca < cb) != (a < b)) {
      return false;
    }
  }
  for (uint32_t i = 0; i < num_outputs; ++i) {
    uint32_t u = p->outputs[i].node;
    if ((flag[u] & kVariant) && u != v) return false;
  }
  return true;
}

typedef struct expand_t {
  const tj_graph_t* p;  // the processed one-block probe
  const uint8_t* flag;
  uint32_t c, v;
  tj_graph_t* s;    // the expanded probe
  tj_node_t* tmpl;  // p's nodes with their payloads in s's arena
  // p node -> s node: map for block 0's, the prefix's and the suffix's,
  // copy[j - 1] for block j's (variant nodes and block 0's inputs).
  uint32_t* map;
  uint32_t* copy[kProbeBlocks - 1];
} expand_t;

// Operand |u| of a node of p as block |j|'s (0: block 0, the prefix and
// the suffix).
static uint32_t expand_operand(const expand_t* e, uint32_t j, uint32_t u) {
  if (j == 0) return e->map[u];
  if (u == e->c) return j == 1 ? e->map[e->v] : e->copy[j - 2][e->v];
  if (e->flag[u] & (kVariant | kOwn)) return e->copy[j - 1][u];
  return e->map[u];
}

static tj_status_t expand_emit(expand_t* e, uint32_t j, uint32_t t,
                               uint32_t* out) {
  tj_graph_t* s = e->s;
  const tj_node_t* src = &e->p->nodes[t];
  tj_node_t node = e->tmpl[t];
  if (src->num_operands) {
    uint32_t* ops =
        tj_arena_alloc(&s->arena, sizeof(uint32_t) * src->num_operands);
    if (!ops) return tj_status_oom();
    for (uint32_t k = 0; k < src->num_operands; ++k) {
      uint32_t u = src->operands[k];
      if (u == TJ_NODE_NONE) {
        ops[k] = TJ_NODE_NONE;
      } else if (j == 0 && u == e->v && t > e->v) {
        ops[k] = e->copy[kProbeBlocks - 2][e->v];  // the suffix: the last's
      } else {
        ops[k] = expand_operand(e, j, u);
      }
    }
    node.operands = ops;
  }
  *out = s->num_nodes;
  s->nodes[s->num_nodes++] = node;
  return NULL;
}

// The three-block probe's processed form from the one-block probe |p1|:
// the graph, and its inputs' original nodes in |p3|.
static tj_status_t expand(expand_t* e, const tj_graph_t* g, const region_t* r,
                          const probe_t* p1, probe_t* p3) {
  const tj_graph_t* p = e->p;
  tj_graph_t* s = e->s;
  tj_allocator_t a = s->allocator;
  uint32_t num_variant = 0;
  for (uint32_t t = 0; t < p->num_nodes; ++t) {
    if (e->flag[t] & kVariant) ++num_variant;
    TJ_RETURN_IF_ERROR(payload(s, p, t, &e->tmpl[t]));
  }
  uint64_t total = (uint64_t)p->num_nodes +
                   (uint64_t)(kProbeBlocks - 1) * (num_variant + p->num_inputs);
  if (total >= UINT32_MAX - 2) return tj_unsupported("region: too many nodes");
  TJ_RETURN_IF_ERROR(tj_array_reserve(a, (void**)&s->nodes, &s->node_capacity,
                                      (uint32_t)total, sizeof(tj_node_t)));
  TJ_RETURN_IF_ERROR(tj_array_reserve(a, (void**)&s->inputs, &s->input_capacity,
                                      g->num_inputs, sizeof(uint32_t)));
  // The inputs in the original's order, blocks 1 and 2's as block 0's.
  for (uint32_t k = 0, pk = 0; k < g->num_inputs; ++k) {
    uint32_t q = g->inputs[k];
    uint32_t b = r->owner[q];
    if (b != NONE32 && b >= kProbeBlocks) continue;
    uint32_t t = NONE32;
    if (b != NONE32 && b > 0) {
      t = probe_input(p, p1->input_orig, to_block(r, q, 0));
      if (t == NONE32) return tj_internal("region: input not in probe");
    } else {
      if (pk >= p->num_inputs) return tj_internal("region: probe inputs");
      t = p->inputs[pk++];
    }
    tj_node_t node = e->tmpl[t];
    if (b != NONE32 && b > 0) {
      node.attrs.name = tj_arena_strdup(&s->arena, g->nodes[q].attrs.name);
      if (!node.attrs.name) return tj_status_oom();
      e->copy[b - 1][t] = s->num_nodes;
    } else {
      e->map[t] = s->num_nodes;
    }
    p3->input_orig[p3->num_inputs++] = q;
    s->inputs[s->num_inputs++] = s->num_nodes;
    s->nodes[s->num_nodes++] = node;
  }
  // The prefix and block 0 (the suffix's nodes before block 0's value in
  // their places), block 1, block 2, the rest of the suffix.
  for (uint32_t t = 0; t <= e->v; ++t) {
    if (p->nodes[t].op != TJ_OP_INPUT)
      TJ_RETURN_IF_ERROR(expand_emit(e, 0, t, &e->map[t]));
  }
  for (uint32_t j = 1; j < kProbeBlocks; ++j) {
    for (uint32_t t = 0; t <= e->v; ++t) {
      if (e->flag[t] & kVariant)
        TJ_RETURN_IF_ERROR(expand_emit(e, j, t, &e->copy[j - 1][t]));
    }
  }
  for (uint32_t t = e->v + 1; t < p->num_nodes; ++t) {
    if (p->nodes[t].op != TJ_OP_INPUT)
      TJ_RETURN_IF_ERROR(expand_emit(e, 0, t, &e->map[t]));
  }
  uint32_t last = e->copy[kProbeBlocks - 2][e->v];
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    uint32_t u = p->outputs[i].node;
    TJ_RETURN_IF_ERROR(tj_graph_append_output(s, u == e->v ? last : e->map[u],
                                              p->outputs[i].name));
  }
  TJ_RETURN_IF_ERROR(tj_graph_append_output(s, e->map[e->v], kExportNames[0]));
  for (uint32_t j = 1; j < kProbeBlocks; ++j) {
    TJ_RETURN_IF_ERROR(
        tj_graph_append_output(s, e->copy[j - 1][e->v], kExportNames[j]));
  }
  for (uint32_t i = 0; i < p->num_guards; ++i) {
    const tj_guard_t* guard = &p->guards[i];
    uint32_t node = guard->node < p->num_nodes ? e->map[guard->node] : NONE32;
    if (node == NONE32) node = s->num_inputs ? s->inputs[0] : 0;
    TJ_RETURN_IF_ERROR(tj_graph_add_guard(s, guard->a, guard->b, node));
  }
  s->finalized = true;
  return NULL;
}

// After the graph stages over the one-block probe |p1|: when the checks
// hold, |*out| is the three-block probe as those stages would have left
// it (*|out_ok|); otherwise |*out| is untouched.
static tj_status_t one_block_expand(const tj_graph_t* g, const region_t* r,
                                    const probe_t* p1, probe_t* out,
                                    bool* out_ok) {
  *out_ok = false;
  const tj_graph_t* p = p1->plan.graph;
  tj_allocator_t a = g->allocator;
  uint32_t n = p->num_nodes;
  uint32_t c = p->outputs[g->num_outputs + 1].node;
  uint32_t v = p->outputs[g->num_outputs].node;
  uint8_t* flag = tj_alloc(a, n ? n : 1);
  if (!flag) return tj_status_oom();
  if (!one_block_holds(p, p1, r, g->num_outputs, c, v, flag)) {
    tj_free(a, flag, n ? n : 1);
    return NULL;
  }
  expand_t e = {.p = p, .flag = flag, .c = c, .v = v};
  probe_t p3;
  memset(&p3, 0, sizeof(p3));
  tj_status_t status = tj_graph_create(g->context, p->name, &e.s);
  if (!status) {
    tj_dimtab_deinitialize(&e.s->dims);
    status = tj_dimtab_copy(&e.s->dims, &p->dims, a);
  }
  e.tmpl = tj_calloc(a, n ? n : 1, sizeof(tj_node_t));
  e.map = tj_alloc(a, sizeof(uint32_t) * (n ? n : 1));
  for (uint32_t j = 0; j < kProbeBlocks - 1; ++j)
    e.copy[j] = tj_alloc(a, sizeof(uint32_t) * (n ? n : 1));
  p3.input_orig = tj_alloc(a, sizeof(uint32_t) * (g->num_inputs + 1));
  if (!status &&
      (!e.tmpl || !e.map || !e.copy[0] || !e.copy[1] || !p3.input_orig)) {
    status = tj_status_oom();
  }
  if (!status) status = expand(&e, g, r, p1, &p3);
  tj_free(a, flag, n ? n : 1);
  tj_free(a, e.tmpl, sizeof(tj_node_t) * (n ? n : 1));
  tj_free(a, e.map, sizeof(uint32_t) * (n ? n : 1));
  for (uint32_t j = 0; j < kProbeBlocks - 1; ++j)
    tj_free(a, e.copy[j], sizeof(uint32_t) * (n ? n : 1));
  if (status) {
    tj_graph_destroy(e.s);
    tj_free(a, p3.input_orig, sizeof(uint32_t) * (g->num_inputs + 1));
    return status;
  }
  tj_plan_initialize(&p3.plan, e.s);
  *out = p3;
  *out_ok = true;
  return NULL;
}

//===--- the entry point ---===//

static tj_status_t apply_region(tj_pass_ctx_t* ctx, tj_plan_t* plan,
                                region_t* rr, uint32_t* out_blocks);

static tj_status_t try_template(tj_pass_ctx_t* ctx, tj_plan_t* plan,
                                const uint64_t* sig, uint32_t* out_blocks) {
  const tj_graph_t* g = plan->graph;
  region_t r;
  memset(&r, 0, sizeof(r));
  tj_status_t status = NULL;
  // (apply_region may replace and free |g|.)
  tj_allocator_t a = g->allocator;
  uint32_t n = g->num_nodes;
  if (find_region(g, sig, &r)) status = apply_region(ctx, plan, &r, out_blocks);
  tj_free(a, r.owner, sizeof(uint32_t) * n);
  tj_free(a, r.slot_of, sizeof(uint32_t) * n);
  tj_free(a, r.slots, sizeof(uint32_t) * (r.slots ? r.count * r.num_slots : 0));
  return status;
}

static tj_status_t apply_region(tj_pass_ctx_t* ctx, tj_plan_t* plan,
                                region_t* rr, uint32_t* out_blocks) {
  const tj_graph_t* g = plan->graph;
  region_t r = *rr;
  probe_t probe;
  memset(&probe, 0, sizeof(probe));
  tj_status_t status = NULL;
  uint32_t processed = kProbeBlocks;
  if (one_block_eligible(g, &r)) {
    status = build_probe(g, &r, 1, &probe);
    if (!status)
      status = tj_pipeline_default_until(ctx, &probe.plan, "decompose");
    probe_t three;
    memset(&three, 0, sizeof(three));
    bool ok = false;
    if (!status) status = one_block_expand(g, &r, &probe, &three, &ok);
    probe_deinitialize(g, &probe);
    memset(&probe, 0, sizeof(probe));
    tj_status_free(status);  // the three blocks' passes then
    status = NULL;
    if (ok) {
      probe = three;
      processed = 1;
    }
  }
  if (processed == kProbeBlocks) {
    status = build_probe(g, &r, kProbeBlocks, &probe);
    if (!status)
      status = tj_pipeline_default_until(ctx, &probe.plan, "decompose");
  }
  parts_t parts;
  memset(&parts, 0, sizeof(parts));
  if (!status) {
    // The blocks' values were outputs so that the graph stages keep them
    // apart; fuse sees the probe as the whole graph is: read by the next
    // block, not written out.
    tj_graph_t* p = probe.plan.graph;
    for (uint32_t e = 0; e < kProbeBlocks; ++e)
      parts.value[e] = p->outputs[g->num_outputs + e].node;
    p->num_outputs = g->num_outputs;
  }
  // Fusion too, unless its log or dump should show every group as made.
  bool fuse = !ctx->log_fusion && !(ctx->dump_dir && *ctx->dump_dir);
  if (!status && fuse)
    status = tj_pipeline_run_one(ctx, &probe.plan, &tj_pass_info_fuse);
  bool ok = false;
  if (!status) status = label(probe.plan.graph, g->num_outputs, &parts, &ok);
  tj_graph_t* whole = NULL;
  tj_fusion_t* fusion = NULL;
  uint32_t first[5] = {0, 0, 0, 0, 0};
  if (!status && ok && periodic(probe.plan.graph, &probe, &r, &parts)) {
    fuse = fuse && groups_periodic(probe.plan.graph, probe.plan.fusion, &probe,
                                   &r, &parts, first);
    status = build_whole(g, &probe, &r, &parts, fuse ? first : NULL, &whole,
                         &fusion);
  }
  if (whole && ctx->verify_each) {
    status = tj_ir_verify(whole);
    if (!status && fusion) status = tj_fusion_verify(fusion, whole);
    if (status) {
      tj_fusion_destroy(fusion);
      tj_graph_destroy(whole);
      fusion = NULL;
      whole = NULL;
    }
  }
  if (whole && ctx->log_passes) {
    tj_context_diagnostic(
        ctx->context, TJ_SEVERITY_REMARK,
        "region: %u blocks of %u nodes (prefix %u, suffix %u): passes over "
        "%u, %u copied, %u -> %u nodes, %s",
        r.count, r.period, r.start, g->num_nodes - r.end, processed,
        r.count - processed, g->num_nodes, whole->num_nodes,
        fusion ? "fusion groups copied too" : "fuse runs over the whole");
  }
  if (probe.plan.graph) parts_deinitialize(probe.plan.graph, &parts);
  probe_deinitialize(g, &probe);
  if (status) {
    // The whole graph's pipeline reports (with its own node numbers)
    // whatever the probe's met.
    tj_status_free(status);
    return NULL;
  }
  if (!whole) return NULL;
  tj_plan_set_graph(plan, whole);
  if (fusion) tj_plan_set_fusion(plan, fusion);
  *out_blocks = r.count;
  ctx->region_blocks_processed = processed;
  return NULL;
}

tj_status_t tj_region_template(tj_pass_ctx_t* ctx, tj_plan_t* plan,
                               uint32_t* out_blocks) {
  *out_blocks = 0;
  const tj_graph_t* g = plan->graph;
  if (g->num_nodes < kMinBlocks * 2 || g->num_outputs == 0) return NULL;
  // (try_template may replace and free |g|.)
  tj_allocator_t a = g->allocator;
  uint32_t n = g->num_nodes;
  uint64_t* sig = tj_alloc(a, sizeof(uint64_t) * n);
  if (!sig) return NULL;  // the whole pipeline then
  for (uint32_t i = 0; i < n; ++i) sig[i] = signature(&g->nodes[i]);
  tj_status_t status = try_template(ctx, plan, sig, out_blocks);
  tj_free(a, sig, sizeof(uint64_t) * n);
  return status;
}
