// lib/passes/partition.c
//
// Splits a joint forward + backward graph (tj_graph_grad's) into a forward
// and a backward graph (tj_graph_partition in tj_autodiff.h), choosing which
// forward values the forward saves for the backward and which the backward
// computes again: torch's min_cut_rematerialization_partition, on bytes.
//
// After CSE and DCE of the joint graph, every node is one of:
//   backward-only   depends on a tangent input: computed in the backward;
//   forward         a forward output needs it: computed in the forward;
//   either          a tangent-independent value the backward needs
//                   (directly, or to recompute one it needs).
// The backward's needs are a cut in a flow network over the tangent-
// independent nodes v the gradients depend on, each split into v_in -> v_out
// with capacity weight(v) (what saving v costs):
//   source -> v_in   infinite for inputs (never recomputed) and for forward
//                    values whose op the recompute knob bans;
//   v_in -> sink     infinite, with no recomputation allowed, for the
//                    backward's own formulas: eager autograd runs them in
//                    the backward;
//   u_out -> v_in    infinite for each operand u of v (recomputing v needs
//                    u, saved or recomputed);
//   u_out -> sink    infinite for each tangent-independent operand u of a
//                    backward-only node, and for tangent-independent
//                    gradient outputs (the backward must have them).
// A minimum cut (Dinic's max flow, then what the source still reaches) is
// the cheapest set of saved values: v is saved when v_in is on the source
// side and v_out is not, recomputed in the backward when v_in is not.
// Constants are never saved (their copy in the backward is free).
//
// weight(v) = bytes(v), inputs included (they must stay alive for the
// backward), so the cut minimizes the bytes held between the halves. Ties
// go first to values the forward materializes anyway (an input, a forward
// output, a matmul/reduction/gather result, an operand of a matmul or
// gather: where Inductor doubles the weight of the others), then to values
// farther from the backward: so a matmul output is saved and the pointwise
// chain after it recomputed, fused into the backward's kernels. The
// weights are additive order terms below one byte, so the saved bytes
// never grow when the knob allows more recomputation.
//
// Requires: a finalized joint graph.  Produces: two new finalized graphs
// (tj_rewriter_begin_bare / tj_rewriter_finish_outputs), names as the header
// says; the joint graph is not changed.

#include <stdio.h>
#include <string.h>

#include "lib/arena.h"
#include "lib/passes/pass.h"

//===--- max flow (Dinic) ---===//

#define INF_CAP (INT64_MAX / 4)

typedef struct flow_t {
  tj_allocator_t al;
  uint32_t num_vertices;
  uint32_t num_edges, edge_capacity;
  uint32_t* to;
  int64_t* cap;  // residual capacity
  uint32_t* next;
  uint32_t* head;  // per vertex, UINT32_MAX = none
  int32_t* level;
  uint32_t* it;
  uint32_t* stack;  // vertices on the current path
  uint32_t* via;    // edge used to reach stack[i]
} flow_t;

static void flow_free(flow_t* f) {
  tj_allocator_t al = f->al;
  size_t nv = f->num_vertices, ne = f->edge_capacity;
  tj_free(al, f->to, f->to ? sizeof(uint32_t) * ne : 0);
  tj_free(al, f->cap, f->cap ? sizeof(int64_t) * ne : 0);
  tj_free(al, f->next, f->next ? sizeof(uint32_t) * ne : 0);
  tj_free(al, f->head, f->head ? sizeof(uint32_t) * nv : 0);
  tj_free(al, f->level, f->level ? sizeof(int32_t) * nv : 0);
  tj_free(al, f->it, f->it ? sizeof(uint32_t) * nv : 0);
  tj_free(al, f->stack, f->stack ? sizeof(uint32_t) * nv : 0);
  tj_free(al, f->via, f->via ? sizeof(uint32_t) * nv : 0);
  memset(f, 0, sizeof(*f));
}

static tj_status_t flow_init(flow_t* f, tj_allocator_t al, uint32_t nv,
                             uint32_t max_edges) {
  memset(f, 0, sizeof(*f));
  f->al = al;
  f->num_vertices = nv;
  f->edge_capacity = max_edges ? max_edges : 1;
  f->to = tj_alloc(al, sizeof(uint32_t) * f->edge_capacity);
  f->cap = tj_alloc(al, sizeof(int64_t) * f->edge_capacity);
  f->next = tj_alloc(al, sizeof(uint32_t) * f->edge_capacity);
  f->head = tj_alloc(al, sizeof(uint32_t) * nv);
  f->level = tj_alloc(al, sizeof(int32_t) * nv);
  f->it = tj_alloc(al, sizeof(uint32_t) * nv);
  f->stack = tj_alloc(al, sizeof(uint32_t) * nv);
  f->via = tj_alloc(al, sizeof(uint32_t) * nv);
  if (!f->to || !f->cap || !f->next || !f->head || !f->level || !f->it ||
      !f->stack || !f->via) {
    flow_free(f);
    return tj_status_oom();
  }
  for (uint32_t i = 0; i < nv; ++i) f->head[i] = UINT32_MAX;
  return NULL;
}

// An edge and its residual twin (edge ^ 1).
static tj_status_t flow_edge(flow_t* f, uint32_t u, uint32_t v, int64_t cap) {
  if (f->num_edges + 2 > f->edge_capacity)
    return tj_internal("partition: flow network has more edges than counted");
  uint32_t e = f->num_edges;
  f->to[e] = v;
  f->cap[e] = cap;
  f->next[e] = f->head[u];
  f->head[u] = e;
  f->to[e + 1] = u;
  f->cap[e + 1] = 0;
  f->next[e + 1] = f->head[v];
  f->head[v] = e + 1;
  f->num_edges += 2;
  return NULL;
}

// Levels by BFS over residual edges (|stack| as the queue); whether
// |sink| is reachable.
static bool flow_bfs(flow_t* f, uint32_t source, uint32_t sink) {
  for (uint32_t i = 0; i < f->num_vertices; ++i) f->level[i] = -1;
  uint32_t qh = 0, qt = 0;
  f->level[source] = 0;
  f->stack[qt++] = source;
  while (qh < qt) {
    uint32_t u = f->stack[qh++];
    for (uint32_t e = f->head[u]; e != UINT32_MAX; e = f->next[e]) {
      if (f->cap[e] > 0 && f->level[f->to[e]] < 0) {
        f->level[f->to[e]] = f->level[u] + 1;
        f->stack[qt++] = f->to[e];
      }
    }
  }
  return f->level[sink] >= 0;
}

// One blocking flow by iterative DFS along level edges.
static int64_t flow_block(flow_t* f, uint32_t source, uint32_t sink) {
  int64_t total = 0;
  for (uint32_t i = 0; i < f->num_vertices; ++i) f->it[i] = f->head[i];
  uint32_t depth = 0;
  f->stack[0] = source;
  for (;;) {
    uint32_t u = f->stack[depth];
    if (u == sink) {
      int64_t push = INF_CAP;
      for (uint32_t i = 1; i <= depth; ++i) {
        if (f->cap[f->via[i]] < push) push = f->cap[f->via[i]];
      }
      uint32_t cut = depth;
      for (uint32_t i = depth; i >= 1; --i) {
        f->cap[f->via[i]] -= push;
        f->cap[f->via[i] ^ 1] += push;
        if (f->cap[f->via[i]] == 0) cut = i;
      }
      total += push;
      depth = cut - 1;  // resume below the first saturated edge
      continue;
    }
    uint32_t e = f->it[u];
    while (e != UINT32_MAX &&
           !(f->cap[e] > 0 && f->level[f->to[e]] == f->level[u] + 1)) {
      e = f->next[e];
    }
    f->it[u] = e;
    if (e == UINT32_MAX) {
      f->level[u] = -1;  // dead end
      if (depth == 0) break;
      --depth;
      f->it[f->stack[depth]] = f->next[f->it[f->stack[depth]]];
      continue;
    }
    ++depth;
    f->stack[depth] = f->to[e];
    f->via[depth] = e;
  }
  return total;
}

// After the max flow: which vertices the source reaches in the residual
// graph (into |level| >= 0).
static void flow_source_side(flow_t* f, uint32_t source) {
  flow_bfs(f, source, source);
}

//===--- the partitioner ---===//

typedef struct part_t {
  tj_pass_ctx_t ctx;  // symbol hints for byte sizes
  const tj_graph_t* g;
  tj_allocator_t al;
  uint32_t n;
  uint32_t num_primals, num_fw_outputs;
  tj_recompute_t level;
  bool save_lse;  // tj_partition_options_t.save_attention_lse
  // Per node:
  bool* dep;    // depends on a tangent
  bool* fw;     // needed by a forward output
  bool* bw;     // needed by a gradient output
  bool* saved;  // the forward saves it for the backward
  bool* in_bw;  // the backward computes it (tangent-dependent or again)
  bool* in_fw;  // the forward computes it
  bool* is_tangent;
  uint32_t* dist;  // edges to the nearest backward-only user
  tj_uses_t uses;
} part_t;

// With save_lse: whether |v| is an attention_lse of the scores of an
// attention a forward output needs (tj_attention_lse_of), which the
// forward then computes and saves (lsefwd).
static bool lse_of_forward_attention(const part_t* p, uint32_t v) {
  const tj_node_t* node = &p->g->nodes[v];
  if (!p->save_lse || node->op != TJ_OP_ATTENTION_LSE) return false;
  const uint32_t q = node->operands[0];
  for (uint32_t k = p->uses.offsets[q]; k < p->uses.offsets[q + 1]; ++k) {
    const uint32_t a = p->uses.users[k];
    if (p->fw[a] && tj_attention_lse_of(p->g, a, v)) return true;
  }
  return false;
}

static bool is_constant_leaf(tj_op_t op) {
  return op == TJ_OP_CONSTANT || op == TJ_OP_FULL || op == TJ_OP_IOTA;
}

// The knob level at which |op| may be recomputed, from its pattern in
// lib/ops.def (a composite's is that of what it decomposes to).
static tj_recompute_t recompute_class(tj_op_t op) {
  // A custom op (its effects, its cost) is never recomputed: above ALL.
  if (tj_op_info(op)->kind == TJ_OP_KIND_CUSTOM)
    return (tj_recompute_t)(TJ_RECOMPUTE_ALL + 1);
  switch (tj_op_info(op)->pattern) {
    case TJ_OP_PATTERN_CONTRACTION:
    case TJ_OP_PATTERN_OPAQUE:
      return TJ_RECOMPUTE_ALL;
    case TJ_OP_PATTERN_REDUCE:
      return TJ_RECOMPUTE_REDUCTIONS;
    default:
      return TJ_RECOMPUTE_POINTWISE;
  }
}

// Whether the forward writes |op|'s result to memory in any case: all but
// pointwise work.
static bool materializes(tj_op_t op) {
  return recompute_class(op) != TJ_RECOMPUTE_POINTWISE;
}

// Whether the forward writes |v| to memory whatever we decide.
static bool materialized_anyway(const part_t* p, uint32_t v) {
  const tj_node_t* node = &p->g->nodes[v];
  if (node->op == TJ_OP_INPUT || materializes(node->op)) return true;
  for (uint32_t i = 0; i < p->num_fw_outputs; ++i) {
    if (p->g->outputs[i].node == v) return true;
  }
  for (uint32_t k = p->uses.offsets[v]; k < p->uses.offsets[v + 1]; ++k) {
    tj_op_t user = p->g->nodes[p->uses.users[k]].op;
    if (p->fw[p->uses.users[k]] && tj_op_has(user, TJ_OPF_MEMORY_OPERANDS))
      return true;
  }
  return false;
}

static int64_t save_cost(const part_t* p, uint32_t v) {
  const int64_t kMaxBytes = (int64_t)1 << 36;
  int64_t bytes = tj_pass_node_bytes(&p->ctx, p->g, v);
  if (bytes > kMaxBytes) bytes = kMaxBytes;
  int64_t dist = p->dist[v] > 255 ? 255 : (int64_t)p->dist[v];
  // Bytes first (+1: an empty tensor is not free to save, so nothing is
  // saved that recomputing serves as well). Ties go to a value the forward
  // writes anyway, then to the one farthest from the backward: recomputing
  // a pointwise chain after a matmul costs little once fused, saving the
  // matmul's output costs no extra write.
  int64_t tie = (materialized_anyway(p, v) ? 0 : 256) + (255 - dist);
  return (bytes + 1) * 65536 + tie;
}

static tj_status_t classify(part_t* p) {
  const tj_graph_t* g = p->g;
  for (uint32_t i = p->num_primals; i < g->num_inputs; ++i) {
    p->is_tangent[g->inputs[i]] = true;
  }
  for (uint32_t i = 0; i < p->n; ++i) {
    const tj_node_t* node = &g->nodes[i];
    p->dep[i] = p->is_tangent[i];
    for (uint32_t k = 0; k < node->num_operands && !p->dep[i]; ++k) {
      uint32_t o = node->operands[k];
      p->dep[i] = o != TJ_NODE_NONE && p->dep[o];
    }
  }
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    uint32_t v = g->outputs[i].node;
    if (i < p->num_fw_outputs) {
      if (p->dep[v]) {
        return tj_invalid(
            "tj_graph_partition: forward output \"%s\" of "
            "@%s depends on a tangent input",
            g->outputs[i].name, g->name);
      }
      p->fw[v] = true;
    } else {
      p->bw[v] = true;
    }
  }
  for (uint32_t i = p->n; i-- > 0;) {
    const tj_node_t* node = &g->nodes[i];
    for (uint32_t k = 0; k < node->num_operands; ++k) {
      uint32_t o = node->operands[k];
      if (o == TJ_NODE_NONE) continue;
      p->fw[o] |= p->fw[i];
      p->bw[o] |= p->bw[i];
    }
  }
  // Distance (in uses) from each node to the nearest backward-only node.
  for (uint32_t i = 0; i < p->n; ++i) p->dist[i] = p->dep[i] ? 0 : UINT32_MAX;
  for (uint32_t i = p->n; i-- > 0;) {
    for (uint32_t k = p->uses.offsets[i]; k < p->uses.offsets[i + 1]; ++k) {
      uint32_t d = p->dist[p->uses.users[k]];
      if (d != UINT32_MAX && d + 1 < p->dist[i]) p->dist[i] = d + 1;
    }
  }
  return NULL;
}

// The flow network and the cut: fills |saved| and |in_bw|.
static tj_status_t cut(part_t* p) {
  const tj_graph_t* g = p->g;
  uint32_t n = p->n;
  const uint32_t source = 0, sink = 1;
  uint32_t max_edges = 2 * g->num_outputs;
  for (uint32_t i = 0; i < n; ++i) {
    max_edges += 2 * (g->nodes[i].num_operands + 4);
  }
  flow_t f;
  TJ_RETURN_IF_ERROR(flow_init(&f, p->al, 2 * n + 2, max_edges + 2));
#define VIN(v) (2 + 2 * (v))
#define VOUT(v) (3 + 2 * (v))
  tj_status_t status = NULL;
  for (uint32_t v = 0; !status && v < n; ++v) {
    const tj_node_t* node = &g->nodes[v];
    if (!p->bw[v]) continue;
    if (p->dep[v]) {
      // A backward-only node: what it reads from the tangent-independent
      // side must reach the backward.
      for (uint32_t k = 0; !status && k < node->num_operands; ++k) {
        uint32_t o = node->operands[k];
        if (o != TJ_NODE_NONE && !p->dep[o])
          status = flow_edge(&f, VOUT(o), sink, INF_CAP);
      }
      continue;
    }
    bool leaf = is_constant_leaf(node->op);
    bool input = node->op == TJ_OP_INPUT;
    // Without recomputation (eager autograd), the backward's own formulas
    // run in the backward and read the forward values they need: a node
    // no forward output needs stays on the backward side.
    bool force_bw =
        p->level == TJ_RECOMPUTE_NONE && !p->fw[v] && !input && !leaf;
    // The knob bans recomputing forward values; the backward's own
    // formulas (no forward output needs them) are not recomputation and may
    // run on either side.
    bool banned = input ||
                  (p->fw[v] && !leaf && recompute_class(node->op) > p->level) ||
                  lse_of_forward_attention(p, v);
    status = flow_edge(&f, VIN(v), VOUT(v), leaf ? INF_CAP : save_cost(p, v));
    if (!status && banned) status = flow_edge(&f, source, VIN(v), INF_CAP);
    if (!status && force_bw) status = flow_edge(&f, VIN(v), sink, INF_CAP);
    for (uint32_t k = 0; !status && k < node->num_operands; ++k) {
      uint32_t o = node->operands[k];
      if (o != TJ_NODE_NONE) status = flow_edge(&f, VOUT(o), VIN(v), INF_CAP);
    }
  }
  // Gradient outputs that no tangent reaches (zeros) are still the
  // backward's to produce.
  for (uint32_t i = p->num_fw_outputs; !status && i < g->num_outputs; ++i) {
    uint32_t v = g->outputs[i].node;
    if (!p->dep[v]) status = flow_edge(&f, VOUT(v), sink, INF_CAP);
  }
  if (!status) {
    while (flow_bfs(&f, source, sink)) {
      if (flow_block(&f, source, sink) == 0) break;
    }
    flow_source_side(&f, source);
    if (f.level[sink] >= 0) {
      status = tj_internal("partition: the flow is not maximal");
    }
  }
  if (!status) {
    for (uint32_t v = 0; v < n; ++v) {
      if (!p->bw[v] || p->dep[v]) continue;
      p->saved[v] = f.level[VIN(v)] >= 0 && f.level[VOUT(v)] < 0;
    }
  }
#undef VIN
#undef VOUT
  flow_free(&f);
  return status;
}

// What the backward computes: the gradient outputs and, transitively, the
// operands of what it computes, stopping at saved values. By the cut, every
// such value is tangent-dependent or recomputable from saved ones (its
// v_out is on the sink side, so v_in is too unless v is saved).
static void close_backward(part_t* p) {
  const tj_graph_t* g = p->g;
  bool* need = p->in_bw;
  for (uint32_t i = p->num_fw_outputs; i < g->num_outputs; ++i) {
    need[g->outputs[i].node] = true;
  }
  for (uint32_t v = p->n; v-- > 0;) {
    if (!need[v]) continue;
    if (p->saved[v]) {
      need[v] = false;
      continue;
    }
    const tj_node_t* node = &g->nodes[v];
    for (uint32_t k = 0; k < node->num_operands; ++k) {
      if (node->operands[k] != TJ_NODE_NONE) need[node->operands[k]] = true;
    }
  }
}

// Symbols |dim| mentions, into |used|.
static void mark_symbols(const tj_graph_t* g, int64_t dim, bool* used) {
  const tj_dim_expr_t* e = tj_dim_expr(&g->dims, dim);
  if (!e) return;
  for (uint32_t t = 0; t < e->num_terms; ++t) {
    for (uint8_t f = 0; f < e->terms[t].num_factors; ++f) {
      used[e->terms[t].factors[f]] = true;
    }
  }
}

// Every symbol the backward's nodes and guards mention must be bound by a
// plain dim of one of its inputs (the run-time binding rule): save a
// primal input that binds it when nothing else does.
static void bind_backward_symbols(part_t* p) {
  const tj_graph_t* g = p->g;
  bool used[TJ_MAX_SYMBOLS] = {false}, bound[TJ_MAX_SYMBOLS] = {false};
  for (uint32_t v = 0; v < p->n; ++v) {
    if (!p->in_bw[v] && !p->saved[v]) continue;
    const tj_node_t* node = &g->nodes[v];
    for (int32_t d = 0; d < node->rank; ++d) {
      mark_symbols(g, node->dims[d], used);
      bool input = p->saved[v] || p->is_tangent[v];
      int32_t sym = tj_dim_as_symbol(&g->dims, node->dims[d]);
      if (input && sym >= 0) bound[sym] = true;
    }
  }
  for (uint32_t i = 0; i < g->num_guards; ++i) {
    mark_symbols(g, g->guards[i].a, used);
    mark_symbols(g, g->guards[i].b, used);
  }
  for (uint32_t s = 0; s < TJ_MAX_SYMBOLS; ++s) {
    if (!used[s] || bound[s]) continue;
    for (uint32_t i = 0; i < p->num_primals && !bound[s]; ++i) {
      const tj_node_t* in = &g->nodes[g->inputs[i]];
      for (int32_t d = 0; d < in->rank; ++d) {
        if (tj_dim_as_symbol(&g->dims, in->dims[d]) != (int32_t)s) continue;
        p->saved[g->inputs[i]] = true;
        for (int32_t e = 0; e < in->rank; ++e) {
          int32_t other = tj_dim_as_symbol(&g->dims, in->dims[e]);
          if (other >= 0) bound[other] = true;
        }
        break;
      }
    }
  }
}

static bool name_in(const char* name, const char* const* names, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    if (names[i] && strcmp(names[i], name) == 0) return true;
  }
  return false;
}

// Names: per saved node, the name the backward input gets; and the
// forward's extra outputs.
typedef struct naming_t {
  const char** bw_names;  // per backward input (saved, then tangents)
  uint32_t num_bw_inputs;
  uint32_t* saved_nodes;  // joint nodes, in order
  uint32_t num_saved;
  char** owned;  // "saved_<k>" strings
  uint32_t num_owned;
  uint32_t* fw_extra;  // saved nodes the forward outputs as saved_<k>
  const char** fw_extra_names;
  uint32_t num_fw_extra;
} naming_t;

static void naming_free(tj_allocator_t al, naming_t* nm, uint32_t n) {
  for (uint32_t i = 0; i < nm->num_owned; ++i) tj_free_string(al, nm->owned[i]);
  tj_free(al, nm->bw_names, nm->bw_names ? sizeof(char*) * (n + 1) : 0);
  tj_free(al, nm->saved_nodes,
          nm->saved_nodes ? sizeof(uint32_t) * (n + 1) : 0);
  tj_free(al, nm->owned, nm->owned ? sizeof(char*) * (n + 1) : 0);
  tj_free(al, nm->fw_extra, nm->fw_extra ? sizeof(uint32_t) * (n + 1) : 0);
  tj_free(al, nm->fw_extra_names,
          nm->fw_extra_names ? sizeof(char*) * (n + 1) : 0);
  memset(nm, 0, sizeof(*nm));
}

static tj_status_t name_saved(part_t* p, naming_t* nm) {
  const tj_graph_t* g = p->g;
  uint32_t cap = p->n + 1;
  memset(nm, 0, sizeof(*nm));
  nm->bw_names = tj_calloc(p->al, cap, sizeof(char*));
  nm->saved_nodes = tj_alloc(p->al, sizeof(uint32_t) * cap);
  nm->owned = tj_calloc(p->al, cap, sizeof(char*));
  nm->fw_extra = tj_alloc(p->al, sizeof(uint32_t) * cap);
  nm->fw_extra_names = tj_calloc(p->al, cap, sizeof(char*));
  if (!nm->bw_names || !nm->saved_nodes || !nm->owned || !nm->fw_extra ||
      !nm->fw_extra_names) {
    return tj_status_oom();
  }
  // Names already spoken for: the primal inputs, the forward outputs and
  // the tangents (all appear on one side or the other).
  uint32_t num_taken = 0;
  const char** taken =
      tj_calloc(p->al, g->num_inputs + g->num_outputs + cap, sizeof(char*));
  if (!taken) return tj_status_oom();
  for (uint32_t i = 0; i < g->num_inputs; ++i) {
    taken[num_taken++] = g->nodes[g->inputs[i]].attrs.name;
  }
  for (uint32_t i = 0; i < p->num_fw_outputs; ++i) {
    taken[num_taken++] = g->outputs[i].name;
  }
  tj_status_t status = NULL;
  uint32_t counter = 0;
  for (uint32_t v = 0; !status && v < p->n; ++v) {
    if (!p->saved[v]) continue;
    const char* name = NULL;
    if (g->nodes[v].op == TJ_OP_INPUT) {
      name = g->nodes[v].attrs.name;
    } else {
      for (uint32_t i = 0; i < p->num_fw_outputs && !name; ++i) {
        if (g->outputs[i].node != v) continue;
        // A forward output shares its name with no backward input so far
        // (an input of the same name would be ambiguous to wire).
        if (!name_in(g->outputs[i].name, nm->bw_names, nm->num_bw_inputs) &&
            !name_in(g->outputs[i].name, (const char* const*)taken,
                     g->num_inputs)) {
          name = g->outputs[i].name;
        }
      }
    }
    if (!name) {
      char buf[32];
      do {
        snprintf(buf, sizeof(buf), "saved_%u", counter++);
      } while (name_in(buf, (const char* const*)taken, num_taken));
      char* copy = tj_strdup(p->al, buf);
      if (!copy) {
        status = tj_status_oom();
        break;
      }
      nm->owned[nm->num_owned++] = copy;
      taken[num_taken++] = copy;
      name = copy;
      nm->fw_extra[nm->num_fw_extra] = v;
      nm->fw_extra_names[nm->num_fw_extra++] = copy;
    }
    nm->saved_nodes[nm->num_saved++] = v;
    nm->bw_names[nm->num_bw_inputs++] = name;
  }
  tj_free(p->al, taken, sizeof(char*) * (g->num_inputs + g->num_outputs + cap));
  return status;
}

static tj_status_t append_input(tj_rewriter_t* rw, uint32_t src_node,
                                const char* name) {
  const tj_node_t* node = &rw->src->nodes[src_node];
  int64_t dims[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(tj_rewriter_dims(rw, node->rank, node->dims, dims));
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_INPUT;
  desc.dtype = node->dtype;
  desc.rank = node->rank;
  desc.dims = dims;
  desc.attrs.name = name;
  return tj_rewriter_append(rw, &desc, &rw->map[src_node]);
}

// Begins a half named "<joint>_<suffix>", so that its kernels and
// diagnostics say which half they belong to.
static tj_status_t begin_half(tj_rewriter_t* rw, const tj_graph_t* g,
                              const char* suffix) {
  TJ_RETURN_IF_ERROR(tj_rewriter_begin_bare(rw, g));
  char name[256];
  snprintf(name, sizeof(name), "%s_%s", g->name, suffix);
  rw->dst->name = tj_arena_strdup(&rw->dst->arena, name);
  if (rw->dst->name) return NULL;
  tj_rewriter_abandon(rw);
  return tj_status_oom();
}

static tj_status_t build_forward(part_t* p, const naming_t* nm,
                                 tj_graph_t** out) {
  const tj_graph_t* g = p->g;
  tj_rewriter_t rw;
  TJ_RETURN_IF_ERROR(begin_half(&rw, g, "forward"));
  tj_status_t status = NULL;
  for (uint32_t i = 0; !status && i < p->num_primals; ++i) {
    uint32_t v = g->inputs[i];
    status = append_input(&rw, v, g->nodes[v].attrs.name);
  }
  for (uint32_t v = 0; !status && v < p->n; ++v) {
    if (p->in_fw[v] && g->nodes[v].op != TJ_OP_INPUT)
      status = tj_rewriter_clone(&rw, v);
  }
  uint32_t count = p->num_fw_outputs + nm->num_fw_extra;
  uint32_t* nodes = tj_alloc(p->al, sizeof(uint32_t) * (count + 1));
  const char** names = tj_alloc(p->al, sizeof(char*) * (count + 1));
  if (!status && (!nodes || !names)) status = tj_status_oom();
  for (uint32_t i = 0; !status && i < count; ++i) {
    bool extra = i >= p->num_fw_outputs;
    uint32_t v =
        extra ? nm->fw_extra[i - p->num_fw_outputs] : g->outputs[i].node;
    nodes[i] = rw.map[v];
    names[i] =
        extra ? nm->fw_extra_names[i - p->num_fw_outputs] : g->outputs[i].name;
    if (nodes[i] == TJ_NODE_NONE)
      status = tj_internal("partition: forward output %%%u not built", v);
  }
  if (!status) {
    status = tj_rewriter_finish_outputs(&rw, false, count, nodes,
                                        (const char* const*)names, out);
  } else {
    tj_rewriter_abandon(&rw);
  }
  tj_free(p->al, nodes, nodes ? sizeof(uint32_t) * (count + 1) : 0);
  tj_free(p->al, names, names ? sizeof(char*) * (count + 1) : 0);
  return status;
}

static tj_status_t build_backward(part_t* p, const naming_t* nm,
                                  tj_graph_t** out) {
  const tj_graph_t* g = p->g;
  tj_rewriter_t rw;
  TJ_RETURN_IF_ERROR(begin_half(&rw, g, "backward"));
  tj_status_t status = NULL;
  for (uint32_t i = 0; !status && i < nm->num_saved; ++i) {
    status = append_input(&rw, nm->saved_nodes[i], nm->bw_names[i]);
  }
  for (uint32_t i = p->num_primals; !status && i < g->num_inputs; ++i) {
    uint32_t v = g->inputs[i];
    status = append_input(&rw, v, g->nodes[v].attrs.name);
  }
  for (uint32_t v = 0; !status && v < p->n; ++v) {
    if (!p->in_bw[v] || p->saved[v] || p->is_tangent[v]) continue;
    const tj_node_t* node = &g->nodes[v];
    if (node->op == TJ_OP_INPUT) {
      status =
          tj_internal("partition: the backward needs input %%%u unsaved", v);
      break;
    }
    for (uint32_t k = 0; k < node->num_operands; ++k) {
      uint32_t o = node->operands[k];
      if (o != TJ_NODE_NONE && rw.map[o] == TJ_NODE_NONE) {
        status = tj_internal(
            "partition: backward node %%%u reads %%%u, neither saved nor "
            "recomputed",
            v, o);
      }
    }
    if (!status) status = tj_rewriter_clone(&rw, v);
  }
  uint32_t count = g->num_outputs - p->num_fw_outputs;
  uint32_t* nodes = tj_alloc(p->al, sizeof(uint32_t) * (count + 1));
  const char** names = tj_alloc(p->al, sizeof(char*) * (count + 1));
  if (!status && (!nodes || !names)) status = tj_status_oom();
  for (uint32_t i = 0; !status && i < count; ++i) {
    const tj_output_t* o = &g->outputs[p->num_fw_outputs + i];
    nodes[i] = rw.map[o->node];
    names[i] = o->name;
    if (nodes[i] == TJ_NODE_NONE)
      status = tj_internal("partition: gradient \"%s\" not built", o->name);
  }
  if (!status) {
    status = tj_rewriter_finish_outputs(&rw, false, count, nodes,
                                        (const char* const*)names, out);
  } else {
    tj_rewriter_abandon(&rw);
  }
  tj_free(p->al, nodes, nodes ? sizeof(uint32_t) * (count + 1) : 0);
  tj_free(p->al, names, names ? sizeof(char*) * (count + 1) : 0);
  return status;
}

static void stats_of(const part_t* p, tj_partition_stats_t* s) {
  const tj_graph_t* g = p->g;
  memset(s, 0, sizeof(*s));
  for (uint32_t v = 0; v < p->n; ++v) {
    int64_t bytes = tj_pass_node_bytes(&p->ctx, g, v);
    if (p->saved[v]) {
      if (g->nodes[v].op == TJ_OP_INPUT) {
        s->saved_input_bytes += bytes;
        ++s->num_saved_inputs;
      } else {
        s->saved_bytes += bytes;
        ++s->num_saved;
        bool output = false;
        for (uint32_t i = 0; i < p->num_fw_outputs && !output; ++i) {
          output = g->outputs[i].node == v;
        }
        if (output) s->saved_output_bytes += bytes;
      }
    } else if (p->in_bw[v] && p->fw[v] && !is_constant_leaf(g->nodes[v].op)) {
      ++s->num_recomputed;
    }
  }
}

static tj_status_t bind_options(part_t* p, const tj_partition_options_t* o) {
  p->level = o->recompute;
  p->save_lse = o->save_attention_lse;
  if ((int)p->level < TJ_RECOMPUTE_NONE || p->level > TJ_RECOMPUTE_ALL)
    return tj_invalid(
        "tj_graph_partition: recompute level %d is not one of "
        "tj_recompute_t",
        (int)p->level);
  if (o->num_symbols < 0 ||
      (o->num_symbols > 0 && (!o->symbol_names || !o->symbol_values)))
    return tj_invalid("tj_graph_partition: bad symbol arrays");
  for (int32_t i = 0; i < o->num_symbols; ++i) {
    uint32_t id;
    if (!o->symbol_names[i] ||
        !tj_dim_find_symbol(&p->g->dims, o->symbol_names[i], &id))
      return tj_invalid("tj_graph_partition: graph @%s has no symbol '%s'",
                        p->g->name,
                        o->symbol_names[i] ? o->symbol_names[i] : "(null)");
    if (o->symbol_values[i] < 1)
      return tj_invalid(
          "tj_graph_partition: symbol %s = %lld; symbols "
          "are >= 1",
          o->symbol_names[i], (long long)o->symbol_values[i]);
    p->ctx.symbol_hints[id] = o->symbol_values[i];
  }
  return NULL;
}

static void part_free(part_t* p) {
  size_t n = p->n ? p->n : 1;
  bool** flags[] = {&p->dep,   &p->fw,    &p->bw,        &p->saved,
                    &p->in_bw, &p->in_fw, &p->is_tangent};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(flags); ++i) {
    tj_free(p->al, *flags[i], *flags[i] ? n : 0);
    *flags[i] = NULL;
  }
  tj_free(p->al, p->dist, p->dist ? sizeof(uint32_t) * n : 0);
  p->dist = NULL;
  tj_uses_deinitialize(&p->uses);
}

static tj_status_t partition(part_t* p, tj_graph_t** out_forward,
                             tj_graph_t** out_backward,
                             tj_partition_stats_t* stats) {
  const tj_graph_t* g = p->g;
  size_t n = p->n ? p->n : 1;
  bool** flags[] = {&p->dep,   &p->fw,    &p->bw,        &p->saved,
                    &p->in_bw, &p->in_fw, &p->is_tangent};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(flags); ++i) {
    *flags[i] = tj_calloc(p->al, n, sizeof(bool));
    if (!*flags[i]) return tj_status_oom();
  }
  p->dist = tj_alloc(p->al, sizeof(uint32_t) * n);
  if (!p->dist) return tj_status_oom();
  TJ_RETURN_IF_ERROR(tj_uses_initialize(&p->uses, g));
  TJ_RETURN_IF_ERROR(classify(p));
  TJ_RETURN_IF_ERROR(cut(p));
  close_backward(p);
  bind_backward_symbols(p);
  // The forward: what its outputs need and what it saves, with their
  // operands.
  for (uint32_t v = 0; v < p->n; ++v) p->in_fw[v] = p->fw[v] || p->saved[v];
  for (uint32_t v = p->n; v-- > 0;) {
    if (!p->in_fw[v]) continue;
    const tj_node_t* node = &g->nodes[v];
    for (uint32_t k = 0; k < node->num_operands; ++k) {
      if (node->operands[k] != TJ_NODE_NONE) p->in_fw[node->operands[k]] = true;
    }
  }
  naming_t nm;
  tj_status_t status = name_saved(p, &nm);
  tj_graph_t* fwd = NULL;
  tj_graph_t* bwd = NULL;
  if (!status) status = build_forward(p, &nm, &fwd);
  if (!status) status = build_backward(p, &nm, &bwd);
  naming_free(p->al, &nm, p->n);
  if (status) {
    tj_graph_destroy(fwd);
    tj_graph_destroy(bwd);
    return status;
  }
  if (stats) stats_of(p, stats);
  *out_forward = fwd;
  *out_backward = bwd;
  return NULL;
}

TJ_API void tj_partition_options_initialize(tj_partition_options_t* options) {
  if (!options) return;
  memset(options, 0, sizeof(*options));
  options->recompute = TJ_RECOMPUTE_POINTWISE;
}

TJ_API tj_status_t tj_graph_partition(const tj_graph_t* joint,
                                      int32_t num_primal_inputs,
                                      int32_t num_forward_outputs,
                                      const tj_partition_options_t* options,
                                      tj_graph_t** out_forward,
                                      tj_graph_t** out_backward,
                                      tj_partition_stats_t* out_stats) {
  if (out_forward) *out_forward = NULL;
  if (out_backward) *out_backward = NULL;
  if (out_stats) memset(out_stats, 0, sizeof(*out_stats));
  if (!joint || !out_forward || !out_backward)
    return tj_invalid(
        "tj_graph_partition: joint, out_forward and "
        "out_backward must not be NULL");
  if (!joint->finalized)
    return tj_invalid("tj_graph_partition: graph @%s is not finalized",
                      joint->name);
  if (num_primal_inputs < 0 ||
      (uint32_t)num_primal_inputs > joint->num_inputs ||
      num_forward_outputs < 1 ||
      (uint32_t)num_forward_outputs >= joint->num_outputs) {
    return tj_invalid(
        "tj_graph_partition: graph @%s has %u inputs and %u "
        "outputs; %d primal inputs and %d forward outputs do "
        "not leave both halves an output",
        joint->name, joint->num_inputs, joint->num_outputs,
        (int)num_primal_inputs, (int)num_forward_outputs);
  }
  tj_partition_options_t defaults;
  tj_partition_options_initialize(&defaults);
  if (!options) options = &defaults;

  part_t* p = tj_alloc(joint->allocator, sizeof(part_t));
  if (!p) return tj_status_oom();
  memset(p, 0, sizeof(*p));
  tj_pass_ctx_initialize(&p->ctx, joint->context);
  p->al = joint->allocator;
  p->g = joint;
  p->num_primals = (uint32_t)num_primal_inputs;
  p->num_fw_outputs = (uint32_t)num_forward_outputs;
  tj_status_t status = bind_options(p, options);
  // CSE lets the backward share the forward's values (and its own
  // duplicates); DCE drops what no output needs. Both keep the signature.
  tj_plan_t plan;
  tj_graph_t* copy = NULL;
  memset(&plan, 0, sizeof(plan));
  if (!status) status = tj_graph_clone(joint, &copy);
  if (!status) {
    tj_plan_initialize(&plan, copy);
    status = tj_pipeline_run_one(&p->ctx, &plan, &tj_pass_info_cse);
    if (!status)
      status = tj_pipeline_run_one(&p->ctx, &plan, &tj_pass_info_dce);
  }
  if (!status) {
    p->g = plan.graph;
    p->n = plan.graph->num_nodes;
    status = partition(p, out_forward, out_backward, out_stats);
  }
  part_free(p);
  tj_plan_deinitialize(&plan);
  tj_free(joint->allocator, p, sizeof(part_t));
  if (status && out_stats) memset(out_stats, 0, sizeof(*out_stats));
  return status;
}
