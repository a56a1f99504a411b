// backends/runtime/run_plan.c: see run_plan.h. Lowering every fusion group into
// the steps of a run, the subgraphs of graph breaks, and running one on
// the reference semantics.

#include "backends/runtime/run_plan.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "backends/runtime/host_tensor.h"
#include "lib/custom_op.h"
#include "lib/env.h"

static void host_step_deinitialize(tj_allocator_t al, tj_host_step_t* h) {
  tj_graph_destroy(h->graph);
  tj_free(al, h->extra, sizeof(uint32_t) * h->cap_extra);
  tj_free(al, h->outputs, sizeof(uint32_t) * h->cap_outputs);
  tj_free(al, h->in_place, sizeof(bool) * h->cap_outputs);
  memset(h, 0, sizeof(*h));
}

void tj_run_plan_deinitialize(tj_run_plan_t* rp) {
  tj_allocator_t al = rp->allocator;
  for (uint32_t i = 0; i < rp->num_steps; ++i) {
    host_step_deinitialize(al, &rp->steps[i].host);
  }
  tj_free(al, rp->steps, sizeof(tj_run_step_t) * rp->num_steps);
  if (rp->first_output) {
    tj_free(al, rp->first_output, sizeof(int32_t) * (rp->graph->num_nodes + 1));
  }
  rp->steps = NULL;
  rp->num_steps = 0;
  rp->first_output = NULL;
  rp->num_kernels = 0;
  rp->num_host_steps = 0;
  rp->num_host_calls = 0;
  rp->num_host_kernels = 0;
}

void tj_run_plan_free_kernels(tj_allocator_t al, tj_lowered_kernel_t* kernels,
                              uint32_t num) {
  if (!kernels) return;
  for (uint32_t i = 0; i < num; ++i)
    tj_lowered_kernel_deinitialize(&kernels[i]);
  tj_free(al, kernels, sizeof(tj_lowered_kernel_t) * num);
}

static bool has_input_name(const tj_graph_t* g, const char* name) {
  for (uint32_t i = 0; i < g->num_inputs; ++i) {
    if (strcmp(g->nodes[g->inputs[i]].attrs.name, name) == 0) return true;
  }
  return false;
}

// The subgraph of a host step: the plan graph's inputs (so the caller's
// tensors bind every symbol), the group's other inputs as inputs (constants
// as borrowed constants), the group's nodes and its outputs.
static tj_status_t build_host_step(const tj_run_plan_t* rp, uint32_t q,
                                   tj_host_step_t* h) {
  const tj_graph_t* g = rp->graph;
  const tj_group_t* grp = &rp->fusion->groups[q];
  tj_allocator_t al = rp->allocator;
  memset(h, 0, sizeof(*h));
  h->cap_extra = grp->num_inputs + 1;
  h->cap_outputs = grp->num_outputs + 1;
  h->extra = tj_alloc(al, sizeof(uint32_t) * h->cap_extra);
  h->outputs = tj_alloc(al, sizeof(uint32_t) * h->cap_outputs);
  h->in_place = tj_calloc(al, h->cap_outputs, sizeof(bool));
  if (!h->extra || !h->outputs || !h->in_place) {
    host_step_deinitialize(al, h);  // frees what was allocated
    return tj_status_oom();
  }
  tj_rewriter_t rw;
  tj_status_t status = tj_rewriter_begin(&rw, g);
  if (status) {
    host_step_deinitialize(al, h);
    return status;
  }
  for (uint32_t k = 0; !status && k < grp->num_inputs; ++k) {
    uint32_t in = grp->inputs[k];
    if (rw.map[in] != TJ_NODE_NONE) continue;  // a graph input
    const tj_node_t* node = &g->nodes[in];
    int64_t dims[TJ_MAX_RANK];
    status = tj_rewriter_dims(&rw, node->rank, node->dims, dims);
    if (status) break;
    tj_node_desc_t desc;
    memset(&desc, 0, sizeof(desc));
    desc.dtype = node->dtype;
    desc.rank = node->rank;
    desc.dims = dims;
    if (node->op == TJ_OP_CONSTANT) {
      // The plan graph keeps the bytes for the executable's lifetime.
      desc.op = TJ_OP_CONSTANT;
      desc.attrs = node->attrs;
      desc.attrs.borrowed = true;
      status = tj_rewriter_append(&rw, &desc, &rw.map[in]);
      continue;
    }
    char name[48];
    snprintf(name, sizeof(name), "tj_v%u", in);
    while (has_input_name(g, name) && strlen(name) + 1 < sizeof(name)) {
      strcat(name, "_");
    }
    desc.op = TJ_OP_INPUT;
    desc.attrs.name = name;
    status = tj_rewriter_append(&rw, &desc, &rw.map[in]);
    if (!status) h->extra[h->num_extra++] = in;
  }
  for (uint32_t j = 0; !status && j < grp->num_nodes; ++j) {
    status = tj_rewriter_clone(&rw, grp->nodes[j]);
  }
  const tj_memplan_t* mp = rp->memplan;
  for (uint32_t j = 0; !status && j < grp->num_outputs; ++j) {
    uint32_t o = grp->outputs[j];
    char name[32];
    snprintf(name, sizeof(name), "o%u", o);
    status = tj_graph_append_output(rw.dst, rw.map[o], name);
    h->outputs[h->num_outputs++] = o;
    uint32_t bi = mp->buffer_of[o];
    h->in_place[j] =
        bi != UINT32_MAX && mp->buffers[bi].in_place_of != TJ_NODE_NONE;
  }
  if (!status) status = tj_graph_finalize(rw.dst);
  if (!status) {
    h->graph = rw.dst;
    rw.dst = NULL;
  }
  tj_rewriter_abandon(&rw);
  if (status) host_step_deinitialize(al, h);
  return status;
}

// A one-node group's step with no subgraph (a host call, a native host
// kernel): node |v|'s computed operands as |extra|, |v| the output.
static tj_status_t build_node_step(const tj_run_plan_t* rp, uint32_t v,
                                   tj_host_step_t* h) {
  const tj_graph_t* g = rp->graph;
  const tj_node_t* node = &g->nodes[v];
  tj_allocator_t al = rp->allocator;
  h->call_node = v;
  h->cap_extra = node->num_operands + 1;
  h->cap_outputs = 2;
  h->extra = tj_alloc(al, sizeof(uint32_t) * h->cap_extra);
  h->outputs = tj_alloc(al, sizeof(uint32_t) * h->cap_outputs);
  h->in_place = tj_calloc(al, h->cap_outputs, sizeof(bool));
  if (!h->extra || !h->outputs || !h->in_place) {
    host_step_deinitialize(al, h);
    return tj_status_oom();
  }
  for (uint32_t k = 0; k < node->num_operands; ++k) {
    uint32_t o = node->operands[k];
    tj_op_t op = g->nodes[o].op;
    bool seen = false;
    for (uint32_t e = 0; e < h->num_extra; ++e) seen |= h->extra[e] == o;
    if (!seen && op != TJ_OP_INPUT && op != TJ_OP_CONSTANT)
      h->extra[h->num_extra++] = o;
  }
  h->outputs[h->num_outputs++] = v;
  uint32_t bi = rp->memplan->buffer_of[v];
  h->in_place[0] =
      bi != UINT32_MAX && rp->memplan->buffers[bi].in_place_of != TJ_NODE_NONE;
  return NULL;
}

// A custom op's group: a host call of its implementation (no subgraph).
static tj_status_t build_call_step(const tj_run_plan_t* rp, uint32_t q,
                                   tj_host_step_t* h) {
  const tj_group_t* grp = &rp->fusion->groups[q];
  uint32_t v = grp->anchor;
  memset(h, 0, sizeof(*h));
  h->call = tj_custom_op_of(rp->graph, &rp->graph->nodes[v]);
  if (!h->call || grp->num_nodes != 1)
    return tj_internal(
        "custom (node %%%u): %s", v,
        h->call ? "not alone in its fusion group" : "the op is not registered");
  return build_node_step(rp, v, h);
}

// TJ_NATIVE_TOPK: "off" leaves argtopk on the reference interpreter;
// unset or "" leave the native kernel; anything else warns once and
// leaves it too (as the driver's other A/B switches, backends/compile.c).
static _Atomic(bool) g_warned_native_topk;
static bool native_topk_on(tj_context_t* context) {
  const char* v = tj_setting(context, TJ_SETTING_NATIVE_TOPK);
  if (!v || !v[0]) return true;
  if (strcmp(v, "off") == 0) return false;
  tj_warn_once(context, &g_warned_native_topk,
               "%s: \"%.32s\" is not off and is ignored",
               tj_setting_source(context, TJ_SETTING_NATIVE_TOPK), v);
  return true;
}

// Whether group |q|, which no template lowers, is an argtopk alone that
// the native host kernel runs.
static bool native_topk_group(const tj_run_plan_t* rp, uint32_t q) {
  const tj_graph_t* g = rp->graph;
  const tj_group_t* grp = &rp->fusion->groups[q];
  const tj_node_t* node = &g->nodes[grp->anchor];
  return grp->num_nodes == 1 && node->op == TJ_OP_ARGTOPK &&
         tj_host_topk_takes(g->nodes[node->operands[0]].dtype);
}

// "<prefix>g<q>_<group kind>" in |buf| (64 bytes: prefixes are "" and "s",
// kind names short). No printf: a copied group names two kernels a copy.
static void kernel_name(const tj_run_plan_t* rp, const char* prefix, uint32_t q,
                        char buf[64]) {
  const char* kind = tj_group_kind_name(rp->fusion->groups[q].kind);
  char digits[10];
  int nd = 0;
  do {
    digits[nd++] = (char)('0' + q % 10);
    q /= 10;
  } while (q);
  size_t np = strlen(prefix), nk = strlen(kind);
  if (np + 1 + (size_t)nd + 1 + nk >= 64) nk = 64 - 1 - np - 1 - (size_t)nd - 1;
  char* w = buf;
  memcpy(w, prefix, np);
  w += np;
  *w++ = 'g';
  while (nd) *w++ = digits[--nd];
  *w++ = '_';
  memcpy(w, kind, nk);
  w[nk] = '\0';
}

static void log_space(const tj_kir_t* k, char* buf, size_t size) {
  size_t n = 0;
  buf[0] = '\0';
  for (int32_t d = 0; d < k->rank && n < size; ++d) {
    tj_kir_ival_t v = k->dims[d];
    int m = v.param < 0 ? snprintf(buf + n, size - n, "%s%lld", d ? "," : "[",
                                   (long long)v.value)
                        : snprintf(buf + n, size - n, "%s$%s", d ? "," : "[",
                                   k->param_names[v.param]);
    if (m < 0) return;
    n += (size_t)m;
  }
  if (n < size) snprintf(buf + n, size - n, "]");
}

static void log_kernels(const tj_run_plan_t* rp, uint32_t q,
                        const tj_lowered_kernel_t* kernels, uint32_t made) {
  const tj_group_t* grp = &rp->fusion->groups[q];
  const tj_node_t* anchor = &rp->graph->nodes[grp->anchor];
  for (uint32_t i = 0; i < made; ++i) {
    char space[160];
    const tj_kir_t* k = kernels[i].kernel;
    log_space(k, space, sizeof(space));
    tj_context_diagnostic(
        rp->context, TJ_SEVERITY_REMARK,
        "fusion: @%s group %u (%s, %u nodes, anchor %s %%%u) -> kernel "
        "%s: %s %s, %u buffers, %u params",
        rp->graph->name, q, tj_group_kind_name(grp->kind), grp->num_nodes,
        tj_op_info(anchor->op)->name, grp->anchor, k->name,
        tj_kir_kind_name(k->kind), space, k->num_buffers, k->num_params);
  }
}

// |*kernels| (of |*cap| entries) with room for |need| entries.
static tj_status_t reserve_kernels(tj_allocator_t al,
                                   tj_lowered_kernel_t** kernels, uint32_t* cap,
                                   uint32_t need) {
  if (need <= *cap) return NULL;
  uint32_t grown = *cap ? *cap * 2 : 2 * TJ_LOWER_MAX_GROUP_KERNELS;
  while (grown < need) grown *= 2;
  tj_lowered_kernel_t* more =
      tj_realloc(al, *kernels, sizeof(tj_lowered_kernel_t) * *cap,
                 sizeof(tj_lowered_kernel_t) * grown);
  if (!more) return tj_status_oom();
  *kernels = more;
  *cap = grown;
  return NULL;
}

// Region compile: the groups lowered so far by their tj_lower_group_hash,
// open addressing; a group equal to one of them copies its kernels.
typedef struct lowered_index_t {
  uint64_t* hashes;
  uint32_t* groups;  // UINT32_MAX: empty
  uint32_t size;     // a power of two, at least twice the groups
} lowered_index_t;

static tj_status_t index_initialize(lowered_index_t* ix, tj_allocator_t al,
                                    uint32_t num_groups) {
  ix->size = 16;
  while (ix->size < 2 * num_groups) ix->size *= 2;
  ix->hashes = tj_alloc(al, sizeof(uint64_t) * ix->size);
  ix->groups = tj_alloc(al, sizeof(uint32_t) * ix->size);
  if (!ix->hashes || !ix->groups) return tj_status_oom();
  memset(ix->groups, 0xff, sizeof(uint32_t) * ix->size);
  return NULL;
}

static void index_deinitialize(lowered_index_t* ix, tj_allocator_t al) {
  tj_free(al, ix->hashes, ix->hashes ? sizeof(uint64_t) * ix->size : 0);
  tj_free(al, ix->groups, ix->groups ? sizeof(uint32_t) * ix->size : 0);
}

// The earlier KERNELS group equal to |q| (hash |h|), or UINT32_MAX.
static uint32_t index_find(const lowered_index_t* ix, const tj_run_plan_t* rp,
                           uint32_t q, uint64_t h) {
  for (uint32_t slot = (uint32_t)h & (ix->size - 1);;
       slot = (slot + 1) & (ix->size - 1)) {
    uint32_t p = ix->groups[slot];
    if (p == UINT32_MAX) return UINT32_MAX;
    if (ix->hashes[slot] == h &&
        tj_lower_group_same(rp->graph, rp->fusion, p, q)) {
      return p;
    }
  }
}

static void index_add(lowered_index_t* ix, uint32_t q, uint64_t h) {
  uint32_t slot = (uint32_t)h & (ix->size - 1);
  while (ix->groups[slot] != UINT32_MAX) slot = (slot + 1) & (ix->size - 1);
  ix->groups[slot] = q;
  ix->hashes[slot] = h;
}

// Region compile: the group |dist| groups before |q| when its kernels are
// in place and it equals |q|, else UINT32_MAX. A repeated block's groups
// copy the group one block back at a distance that stays the same along
// the stack: tried first, it costs one tj_lower_group_same, where the
// index costs a tj_lower_group_hash of |q| as well (a 24-layer stack
// copies 44 groups a compile), and nothing where the region stitching made
// both from one group (tj_fusion_t.copy_of: equal by construction; 42 of
// the 44). A copy of a copy has the source's code.
static uint32_t guess_equal(const tj_run_plan_t* rp, uint32_t q,
                            uint32_t dist) {
  if (dist == 0 || dist > q) return UINT32_MAX;
  uint32_t p = q - dist;
  if (rp->steps[p].kind != TJ_RUN_STEP_KERNELS) return UINT32_MAX;
  const uint32_t* of = rp->fusion->copy_of;
  if (of && of[q] != TJ_GROUP_NONE && (of[q] == p || of[p] == of[q])) return p;
  return tj_lower_group_same(rp->graph, rp->fusion, p, q) ? p : UINT32_MAX;
}

// Group |q|'s kernels copied from those of the equal group |p| (lowered
// or copied before) to |out|, |*out_count| of them; UNSUPPORTED when they
// do not copy (q is lowered then).
static tj_status_t copy_group(const tj_run_plan_t* rp, const char* prefix,
                              const tj_lowered_kernel_t* kernels, uint32_t p,
                              uint32_t q, tj_lowered_kernel_t* out,
                              uint32_t* out_count) {
  const tj_run_step_t* from = &rp->steps[p];
  char from_name[64], to_name[64];
  kernel_name(rp, prefix, p, from_name);
  kernel_name(rp, prefix, q, to_name);
  *out_count = 0;
  TJ_RETURN_IF_ERROR(tj_lower_group_copy(
      rp->graph, rp->fusion, rp->memplan, p, q, from_name, to_name,
      &kernels[from->first_kernel], from->num_kernels, out));
  *out_count = from->num_kernels;
  return NULL;
}

tj_status_t tj_run_plan_build(tj_run_plan_t* rp, tj_context_t* context,
                              tj_allocator_t al, tj_plan_t* plan, uint32_t log,
                              bool copy_equal, tj_run_plan_accept_fn accept,
                              void* accept_user,
                              tj_lowered_kernel_t** out_kernels) {
  *out_kernels = NULL;
  memset(rp, 0, sizeof(*rp));
  rp->context = context;
  rp->allocator = al;
  rp->graph = plan->graph;
  rp->fusion = plan->fusion;
  rp->memplan = plan->memplan;
  const tj_graph_t* g = rp->graph;
  const tj_fusion_t* fu = rp->fusion;
  rp->first_output = tj_alloc(al, sizeof(int32_t) * (g->num_nodes + 1));
  if (!rp->first_output) return tj_status_oom();
  for (uint32_t i = 0; i < g->num_nodes; ++i) rp->first_output[i] = -1;
  for (uint32_t i = g->num_outputs; i-- > 0;) {
    rp->first_output[g->outputs[i].node] = (int32_t)i;
  }
  rp->steps = tj_calloc(al, fu->num_groups + 1, sizeof(tj_run_step_t));
  if (!rp->steps) return tj_status_oom();
  rp->num_steps = fu->num_groups + 1;  // freed with this size
  bool log_fusion = (log & TJ_LOG_FUSION) != 0;
  bool log_breaks = (log & TJ_LOG_GRAPH_BREAKS) != 0;
  bool native_topk = native_topk_on(context);
  uint32_t cap = 0, nk = 0;
  tj_lowered_kernel_t* kernels = NULL;
  lowered_index_t index;
  memset(&index, 0, sizeof(index));
  tj_status_t status =
      copy_equal ? index_initialize(&index, al, fu->num_groups) : NULL;
  uint32_t dist = 0;  // of the last copy from its source
  for (uint32_t q = 0; !status && q < fu->num_groups; ++q) {
    const tj_group_t* grp = &fu->groups[q];
    tj_run_step_t* s = &rp->steps[q];
    s->group = q;
    const tj_node_t* anchor = &g->nodes[grp->anchor];
    if (grp->kind == TJ_GROUP_VIEW) {
      s->kind = TJ_RUN_STEP_VIEW;
      continue;
    }
    if (anchor->op == TJ_OP_CUSTOM) {
      // Kept in the graph: a host call between the compiled kernels.
      s->kind = TJ_RUN_STEP_HOST;
      ++rp->num_host_calls;
      status = build_call_step(rp, q, &s->host);
      if (!status && (log_breaks || log_fusion)) {
        tj_context_diagnostic(context, TJ_SEVERITY_REMARK,
                              "graph_breaks: @%s group %u (custom %s@%d "
                              "%%%u) is a host call of the op's "
                              "implementation, not a graph break",
                              g->name, q, s->host.call->name,
                              (int)s->host.call->version, grp->anchor);
      }
      continue;
    }
    status =
        reserve_kernels(al, &kernels, &cap, nk + TJ_LOWER_MAX_GROUP_KERNELS);
    if (status) break;
    char name[64];
    kernel_name(rp, "", q, name);
    uint32_t made = 0;
    uint64_t hash = 0;
    bool hashed = false;
    uint32_t equal = UINT32_MAX;
    if (copy_equal) {
      equal = guess_equal(rp, q, dist);
      if (equal == UINT32_MAX) {
        hash = tj_lower_group_hash(g, fu, q);
        hashed = true;
        equal = index_find(&index, rp, q, hash);
      }
    }
    if (equal != UINT32_MAX) {
      status = copy_group(rp, "", kernels, equal, q, &kernels[nk], &made);
      if (tj_status_code(status) == TJ_STATUS_UNSUPPORTED) {
        tj_status_free(status);
        status = NULL;
        equal = UINT32_MAX;
      } else if (!status) {
        ++rp->num_copied_groups;
        dist = q - equal;
        if (log_fusion) {
          tj_context_diagnostic(context, TJ_SEVERITY_REMARK,
                                "fusion: @%s group %u: the kernels of the "
                                "equal group %u, copied (region compile)",
                                g->name, q, equal);
        }
      }
    }
    if (!status && equal == UINT32_MAX) {
      status = tj_lower_group(plan->graph, fu, rp->memplan, q, NULL, al, name,
                              &kernels[nk], TJ_LOWER_MAX_GROUP_KERNELS, &made);
      if (!status) ++rp->num_lowered_groups;
    }
    if (!status && accept) {
      // The backend may still refuse a kernel (the CUDA templates: f64
      // transcendentals, misaligned tensor-core operands): the group then
      // runs on the host.
      status = accept(accept_user, q, &kernels[nk], made);
      if (status) {
        for (uint32_t i = 0; i < made; ++i) {
          tj_lowered_kernel_deinitialize(&kernels[nk + i]);
        }
      }
    }
    if (!status) {
      s->kind = TJ_RUN_STEP_KERNELS;
      s->first_kernel = nk;
      s->num_kernels = made;
      if (copy_equal && equal == UINT32_MAX) {
        if (!hashed) hash = tj_lower_group_hash(g, fu, q);
        index_add(&index, q, hash);
      }
      if (log_fusion) log_kernels(rp, q, &kernels[nk], made);
      nk += made;
      continue;
    }
    if (tj_status_code(status) != TJ_STATUS_UNSUPPORTED) break;
    if (native_topk && native_topk_group(rp, q)) {
      // Not a graph break: argtopk's own C kernel between the kernels.
      if (log_breaks || log_fusion) {
        const tj_node_t* x = &g->nodes[anchor->operands[0]];
        int64_t n = x->dims[anchor->attrs.axis];
        char len[24] = "symbolic length";
        if (tj_dim_is_const(n))
          snprintf(len, sizeof(len), "%lld", (long long)n);
        tj_context_diagnostic(
            context, TJ_SEVERITY_REMARK,
            "graph_breaks: @%s group %u (argtopk %%%u, %s rows of %s, k "
            "%lld) runs as a native host kernel, not on the reference "
            "interpreter: %s",
            g->name, q, grp->anchor, tj_dtype_name(x->dtype), len,
            (long long)anchor->attrs.ints[0], tj_status_message(status));
      }
      tj_status_free(status);
      s->kind = TJ_RUN_STEP_HOST;
      ++rp->num_host_kernels;
      memset(&s->host, 0, sizeof(s->host));
      s->host.native = true;
      status = build_node_step(rp, grp->anchor, &s->host);
      continue;
    }
    if (log_breaks || log_fusion) {
      tj_context_diagnostic(context, TJ_SEVERITY_REMARK,
                            "graph_breaks: @%s group %u (%s %%%u) runs on "
                            "the host (reference interpreter): %s",
                            g->name, q, tj_op_info(anchor->op)->name,
                            grp->anchor, tj_status_message(status));
    }
    tj_status_free(status);
    s->kind = TJ_RUN_STEP_HOST;
    ++rp->num_host_steps;
    status = build_host_step(rp, q, &s->host);
  }
  index_deinitialize(&index, al);
  // The programs own arrays of exactly |nk| entries: the array shrunk in
  // place where the allocator can (a kernel is ~1 KiB: a 24-layer stack's
  // 48 were a 50 KiB copy a compile).
  tj_lowered_kernel_t* exact = NULL;
  if (!status && nk) {
    exact = tj_realloc(al, kernels, sizeof(tj_lowered_kernel_t) * cap,
                       sizeof(tj_lowered_kernel_t) * nk);
    if (!exact) status = tj_status_oom();
  }
  if (status) {
    for (uint32_t i = 0; i < nk; ++i) {
      tj_lowered_kernel_deinitialize(&kernels[i]);
    }
    tj_free(al, kernels, sizeof(tj_lowered_kernel_t) * cap);
    return status;
  }
  if (!nk) tj_free(al, kernels, sizeof(tj_lowered_kernel_t) * cap);
  rp->num_kernels = nk;
  *out_kernels = exact;
  return NULL;
}

tj_status_t tj_run_plan_lower(const tj_run_plan_t* rp, const int64_t* sym,
                              tj_lowered_kernel_t** out_kernels) {
  tj_allocator_t al = rp->allocator;
  uint32_t nk = rp->num_kernels;
  *out_kernels = NULL;
  if (nk == 0) return NULL;
  tj_lowered_kernel_t* kernels = tj_calloc(al, nk, sizeof(tj_lowered_kernel_t));
  if (!kernels) return tj_status_oom();
  // Region compile as in tj_run_plan_build: a group equal to one lowered
  // before copies its kernels (equal groups are equal for every value of
  // the symbols, these included).
  lowered_index_t index;
  memset(&index, 0, sizeof(index));
  tj_status_t status = index_initialize(&index, al, rp->num_steps);
  uint32_t made = 0;
  uint32_t dist = 0;  // of the last copy from its source
  // Groups whose kernels |kernels| holds (lowered or copied here).
  bool* done = status ? NULL : tj_calloc(al, rp->num_steps, sizeof(bool));
  if (!status && !done) status = tj_status_oom();
  for (uint32_t q = 0; !status && q < rp->num_steps; ++q) {
    const tj_run_step_t* st = &rp->steps[q];
    if (st->kind != TJ_RUN_STEP_KERNELS || st->num_kernels == 0) continue;
    char name[64];
    kernel_name(rp, "s", q, name);
    uint64_t hash = 0;
    bool hashed = false;
    uint32_t equal = guess_equal(rp, q, dist);
    if (equal != UINT32_MAX && !done[equal]) equal = UINT32_MAX;
    if (equal == UINT32_MAX) {
      hash = tj_lower_group_hash(rp->graph, rp->fusion, q);
      hashed = true;
      equal = index_find(&index, rp, q, hash);
    }
    uint32_t got = 0;
    if (equal != UINT32_MAX &&
        rp->steps[equal].num_kernels == st->num_kernels) {
      status = copy_group(rp, "s", kernels, equal, q,
                          &kernels[st->first_kernel], &got);
      made = st->first_kernel + got;
      if (!status) {
        done[q] = true;
        dist = q - equal;
        continue;
      }
      if (tj_status_code(status) != TJ_STATUS_UNSUPPORTED) break;
      tj_status_free(status);
      status = NULL;
    }
    // Room for the generic count only: a specialization must cut the
    // group into the same boxes, kernel for kernel.
    status =
        tj_lower_group(rp->graph, rp->fusion, rp->memplan, q, sym, al, name,
                       &kernels[st->first_kernel], st->num_kernels, &got);
    made = st->first_kernel + got;
    if (!status && got == st->num_kernels) {
      if (!hashed) {
        hash = tj_lower_group_hash(rp->graph, rp->fusion, q);
      }
      index_add(&index, q, hash);
      done[q] = true;
    }
    if (!status && got != st->num_kernels) {
      status = tj_unsupported("group %u lowers to %u kernels, not %u", q, got,
                              st->num_kernels);
    }
  }
  index_deinitialize(&index, al);
  tj_free(al, done, done ? sizeof(bool) * rp->num_steps : 0);
  if (status) {
    for (uint32_t k = 0; k < made; ++k) {
      tj_lowered_kernel_deinitialize(&kernels[k]);
    }
    tj_free(al, kernels, sizeof(tj_lowered_kernel_t) * nk);
    return status;
  }
  *out_kernels = kernels;
  return NULL;
}

// A host call (see build_call_step): the custom op on dense buffers, a
// strided caller input copied dense first when the op needs it.
static tj_status_t run_call(const tj_graph_t* g, tj_allocator_t al,
                            const tj_host_step_t* h, int64_t* sym,
                            const tj_tensor_t* inputs,
                            unsigned char* const* loc) {
  const tj_node_t* node = &g->nodes[h->call_node];
  uint32_t n = node->num_operands;
  tj_tensor_t ins[64];
  int64_t shapes[65][TJ_MAX_RANK];
  void* temps[64];
  size_t temp_bytes[64];
  bool contiguous = (h->call->flags & TJ_CUSTOM_OP_CONTIGUOUS_INPUTS) != 0;
  tj_status_t status = NULL;
  uint32_t made = 0;
  for (uint32_t k = 0; !status && k < n; ++k, ++made) {
    uint32_t o = node->operands[k];
    const tj_node_t* on = &g->nodes[o];
    temps[k] = NULL;
    temp_bytes[k] = 0;
    if (on->op == TJ_OP_INPUT) {
      uint32_t i = 0;
      while (g->inputs[i] != o) ++i;
      ins[k] = inputs[i];
      if (!contiguous || tj_host_tensor_dense(&ins[k])) continue;
      size_t size = tj_dtype_size(on->dtype);
      temp_bytes[k] = (size_t)tj_host_numel(on->rank, ins[k].shape) * size;
      temps[k] = tj_alloc(al, temp_bytes[k] ? temp_bytes[k] : 1);
      if (!temps[k]) {
        status = tj_status_oom();
        break;
      }
      tj_host_copy_strided(temps[k], NULL, tj_host_tensor_data(&ins[k]),
                           ins[k].strides, on->rank, ins[k].shape, size);
      ins[k] = tj_tensor_make(temps[k], on->dtype, on->rank, ins[k].shape);
      continue;
    }
    status = tj_ir_concrete_dims(g, o, sym, shapes[k]);
    void* data = on->op == TJ_OP_CONSTANT ? (void*)on->attrs.data : loc[o];
    ins[k] = tj_tensor_make(data, on->dtype, on->rank, shapes[k]);
  }
  if (!status) status = tj_ir_concrete_dims(g, h->call_node, sym, shapes[64]);
  if (!status) {
    double floats[TJ_CUSTOM_MAX_ATTRS];
    tj_custom_attrs_t attrs;
    tj_custom_attrs_of(&node->attrs, &attrs, floats);
    // The op may report a smaller shape (data-dependent dims) in |actual|.
    int64_t actual[TJ_MAX_RANK];
    memcpy(actual, shapes[64], sizeof(actual));
    tj_tensor_t out =
        tj_tensor_make(loc[h->call_node], node->dtype, node->rank, actual);
    status = tj_custom_op_invoke(h->call, ins, (int32_t)n, &attrs, &out);
    if (!status)
      status = tj_custom_bind_result(g, h->call_node, shapes[64], actual, sym);
  }
  for (uint32_t k = 0; k < made; ++k) {
    if (temps[k]) tj_free(al, temps[k], temp_bytes[k] ? temp_bytes[k] : 1);
  }
  return status;
}

// A native host kernel (see build_node_step): argtopk's C kernel on its
// operand where it is (a caller's input with its strides, a constant, a
// value in memory) into the node's storage (through a temporary when it
// is planned over the operand).
static tj_status_t run_native(const tj_graph_t* g, tj_allocator_t al,
                              const tj_host_step_t* h, const int64_t* sym,
                              const tj_tensor_t* inputs,
                              unsigned char* const* loc,
                              const tj_host_parallel_t* parallel) {
  const tj_node_t* node = &g->nodes[h->call_node];
  uint32_t o = node->operands[0];
  const tj_node_t* on = &g->nodes[o];
  int64_t xdims[TJ_MAX_RANK], ydims[TJ_MAX_RANK];
  const int64_t* dims = xdims;
  const int64_t* strides = NULL;
  const void* x = NULL;
  if (on->op == TJ_OP_INPUT) {
    uint32_t i = 0;
    while (g->inputs[i] != o) ++i;
    dims = inputs[i].shape;
    strides = inputs[i].strides;
    x = tj_host_tensor_data(&inputs[i]);
  } else {
    TJ_RETURN_IF_ERROR(tj_ir_concrete_dims(g, o, sym, xdims));
    x = on->op == TJ_OP_CONSTANT ? on->attrs.data : loc[o];
  }
  TJ_RETURN_IF_ERROR(tj_ir_concrete_dims(g, h->call_node, sym, ydims));
  const int32_t axis = (int32_t)node->attrs.axis;
  size_t bytes = (size_t)tj_host_numel(node->rank, ydims) * sizeof(int64_t);
  int64_t* y = (int64_t*)loc[h->call_node];
  int64_t* temp = NULL;
  if (h->in_place[0] && bytes) {
    temp = tj_alloc(al, bytes);
    if (!temp) return tj_status_oom();
    y = temp;
  }
  tj_status_t status =
      tj_host_topk_run(al, parallel, on->dtype, on->rank, dims, x, strides,
                       axis, ydims[axis], node->attrs.ints[1] != 0, y);
  if (temp) {
    if (!status) memcpy(loc[h->call_node], temp, bytes);
    tj_free(al, temp, bytes);
  }
  return status;
}

tj_status_t tj_host_step_run(const tj_graph_t* g, tj_allocator_t al,
                             const tj_host_step_t* h, const int64_t* sym,
                             const tj_tensor_t* inputs,
                             unsigned char* const* loc,
                             const tj_host_parallel_t* parallel) {
  if (h->native) return run_native(g, al, h, sym, inputs, loc, parallel);
  if (h->call) {
    int64_t local[TJ_MAX_SYMBOLS];
    memcpy(local, sym, sizeof(local));
    TJ_RETURN_IF_ERROR(run_call(g, al, h, local, inputs, loc));
    if (memcmp(local, sym, sizeof(local)) != 0)
      return tj_status_make(
          TJ_STATUS_UNSUPPORTED,
          "custom op %s (node %%%u) reported a data-dependent output shape, "
          "which this target cannot run (x86 and the reference can)",
          h->call->name, h->call_node);
    return NULL;
  }
  uint32_t nin = g->num_inputs + h->num_extra, nout = h->num_outputs;
  size_t per = sizeof(tj_tensor_t) + sizeof(int64_t) * TJ_MAX_RANK;
  size_t bytes = per * (nin + nout) + sizeof(void*) * (nout + 1);
  unsigned char* block = tj_alloc(al, bytes);
  if (!block) return tj_status_oom();
  tj_tensor_t* ins = (tj_tensor_t*)block;
  tj_tensor_t* outs = ins + nin;
  int64_t* shapes = (int64_t*)(outs + nout);
  void** temps = (void**)(shapes + (size_t)TJ_MAX_RANK * (nin + nout));
  memset(temps, 0, sizeof(void*) * (nout + 1));
  tj_status_t status = NULL;
  for (uint32_t i = 0; i < g->num_inputs; ++i) ins[i] = inputs[i];
  for (uint32_t j = 0; !status && j < nin + nout; ++j) {
    if (j < g->num_inputs) continue;
    bool is_out = j >= nin;
    uint32_t node = is_out ? h->outputs[j - nin] : h->extra[j - g->num_inputs];
    const tj_node_t* n = &g->nodes[node];
    int64_t* shape = shapes + (size_t)TJ_MAX_RANK * j;
    status = tj_ir_concrete_dims(g, node, sym, shape);
    if (status) break;
    void* data = loc[node];
    if (is_out && h->in_place[j - nin]) {
      // The interpreter may still read the input it overwrites.
      size_t sz =
          (size_t)tj_host_numel(n->rank, shape) * tj_dtype_size(n->dtype);
      temps[j - nin] = tj_alloc(al, sz ? sz : 1);
      if (!temps[j - nin]) {
        status = tj_status_oom();
        break;
      }
      data = temps[j - nin];
    }
    tj_tensor_t t = tj_tensor_make(data, n->dtype, n->rank, shape);
    if (is_out) {
      outs[j - nin] = t;
    } else {
      ins[j] = t;
    }
  }
  if (!status) {
    status = tj_reference_run(h->graph, ins, (int32_t)nin, outs, (int32_t)nout);
  }
  for (uint32_t j = 0; j < nout; ++j) {
    if (!temps[j]) continue;
    const tj_node_t* n = &g->nodes[h->outputs[j]];
    size_t sz =
        (size_t)tj_host_numel(n->rank, outs[j].shape) * tj_dtype_size(n->dtype);
    if (!status && sz) memcpy(loc[h->outputs[j]], temps[j], sz);
    tj_free(al, temps[j], sz ? sz : 1);
  }
  tj_free(al, block, bytes);
  return status;
}

tj_status_t tj_host_step_run_dynamic(const tj_graph_t* g, tj_allocator_t al,
                                     const tj_host_step_t* h, int64_t* sym,
                                     const tj_tensor_t* inputs,
                                     unsigned char* const* loc,
                                     const tj_host_parallel_t* parallel) {
  if (h->call) return run_call(g, al, h, sym, inputs, loc);
  return tj_host_step_run(g, al, h, sym, inputs, loc, parallel);
}
