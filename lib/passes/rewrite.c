// tj_rewriter_t: the one graph -> graph builder of the middle end, plus the
// use lists the passes share. Every rewriting pass clones through here, so
// the rules "inputs keep order, names and types; outputs keep names; symbols
// are re-created in the same order; dims are translated between the two
// tables; every node goes through tj_graph_append" live in one place.

#include <string.h>

#include "lib/dtype.h"
#include "lib/passes/pass.h"

//===--- dims ---===//

tj_status_t tj_rewriter_dim(tj_rewriter_t* rw, int64_t src_dim,
                            int64_t* out_dim) {
  if (tj_dim_is_const(src_dim)) {
    *out_dim = src_dim;
    return NULL;
  }
  const tj_dim_expr_t* expr = tj_dim_expr(&rw->src->dims, src_dim);
  if (!expr)
    return tj_internal("rewrite: dim %lld is not in the table",
                       (long long)src_dim);
  uint64_t index = (uint64_t)(-2 - src_dim);
  if (index < rw->num_dim_cache && rw->dim_cache[index] != INT64_MIN) {
    *out_dim = rw->dim_cache[index];
    return NULL;
  }
  // Symbol ids agree between the tables (begin re-creates them in order), so
  // rebuilding the polynomial term by term gives the canonical encoding of
  // the same expression in the new table.
  tj_dimtab_t* tab = &rw->dst->dims;
  int64_t sum = 0;
  for (uint32_t t = 0; t < expr->num_terms; ++t) {
    const tj_dim_term_t* term = &expr->terms[t];
    if (term->coeff < 0) {
      return tj_internal("rewrite: negative coefficient in dim %lld",
                         (long long)src_dim);
    }
    int64_t product = term->coeff;
    for (uint8_t f = 0; f < term->num_factors; ++f) {
      const char* name = tj_dim_symbol_name(tab, term->factors[f]);
      int64_t sym;
      if (!name) return tj_internal("rewrite: unknown symbol in a dim");
      TJ_RETURN_IF_ERROR(tj_dim_symbol(tab, name, &sym));
      TJ_RETURN_IF_ERROR(tj_dim_mul(tab, product, sym, &product));
    }
    TJ_RETURN_IF_ERROR(tj_dim_add(tab, sum, product, &sum));
  }
  if (index < rw->num_dim_cache) rw->dim_cache[index] = sum;
  *out_dim = sum;
  return NULL;
}

tj_status_t tj_rewriter_dims(tj_rewriter_t* rw, int32_t rank,
                             const int64_t* src_dims, int64_t* out_dims) {
  for (int32_t i = 0; i < rank; ++i) {
    TJ_RETURN_IF_ERROR(tj_rewriter_dim(rw, src_dims[i], &out_dims[i]));
  }
  return NULL;
}

//===--- begin / finish ---===//

void tj_rewriter_abandon(tj_rewriter_t* rw) {
  if (rw->map)
    tj_free(rw->allocator, rw->map, sizeof(uint32_t) * rw->src->num_nodes);
  if (rw->dim_cache) {
    tj_free(rw->allocator, rw->dim_cache, sizeof(int64_t) * rw->num_dim_cache);
  }
  tj_graph_destroy(rw->dst);
  rw->map = NULL;
  rw->dim_cache = NULL;
  rw->num_dim_cache = 0;
  rw->dst = NULL;
}

static tj_status_t begin(tj_rewriter_t* rw, const tj_graph_t* src,
                         bool with_inputs) {
  memset(rw, 0, sizeof(*rw));
  rw->src = src;
  rw->allocator = src->allocator;
  if (src->num_nodes) {
    rw->map = tj_alloc(rw->allocator, sizeof(uint32_t) * src->num_nodes);
    if (!rw->map) return tj_status_oom();
    for (uint32_t i = 0; i < src->num_nodes; ++i) rw->map[i] = TJ_NODE_NONE;
  }
  if (src->dims.num_exprs) {
    rw->dim_cache =
        tj_alloc(rw->allocator, sizeof(int64_t) * src->dims.num_exprs);
    if (!rw->dim_cache) {
      tj_rewriter_abandon(rw);
      return tj_status_oom();
    }
    rw->num_dim_cache = src->dims.num_exprs;
    for (uint32_t i = 0; i < rw->num_dim_cache; ++i) {
      rw->dim_cache[i] = INT64_MIN;
    }
  }
  tj_status_t status = tj_graph_create(src->context, src->name, &rw->dst);
  for (uint32_t i = 0; !status && i < tj_dim_num_symbols(&src->dims); ++i) {
    int64_t dim;
    status =
        tj_dim_symbol(&rw->dst->dims, tj_dim_symbol_name(&src->dims, i), &dim);
  }
  for (uint32_t i = 0; !status && with_inputs && i < src->num_inputs; ++i) {
    const tj_node_t* node = &src->nodes[src->inputs[i]];
    int64_t dims[TJ_MAX_RANK];
    tj_node_desc_t desc;
    memset(&desc, 0, sizeof(desc));
    desc.op = TJ_OP_INPUT;
    desc.dtype = node->dtype;
    desc.rank = node->rank;
    desc.dims = dims;
    desc.attrs.name = node->attrs.name;
    status = tj_rewriter_dims(rw, node->rank, node->dims, dims);
    if (!status)
      status = tj_graph_append(rw->dst, &desc, &rw->map[src->inputs[i]]);
  }
  if (status) tj_rewriter_abandon(rw);
  return status;
}

tj_status_t tj_rewriter_begin(tj_rewriter_t* rw, const tj_graph_t* src) {
  return begin(rw, src, true);
}

tj_status_t tj_rewriter_begin_bare(tj_rewriter_t* rw, const tj_graph_t* src) {
  return begin(rw, src, false);
}

static bool has_guard(const tj_graph_t* g, int64_t a, int64_t b) {
  for (uint32_t i = 0; i < g->num_guards; ++i) {
    const tj_guard_t* guard = &g->guards[i];
    if ((guard->a == a && guard->b == b) || (guard->a == b && guard->b == a)) {
      return true;
    }
  }
  return false;
}

tj_status_t tj_rewriter_finish(tj_rewriter_t* rw, tj_graph_t** out_graph) {
  return tj_rewriter_finish_outputs(rw, true, 0, NULL, NULL, out_graph);
}

tj_status_t tj_rewriter_finish_outputs(tj_rewriter_t* rw, bool keep_src_outputs,
                                       uint32_t num_extra,
                                       const uint32_t* extra_nodes,
                                       const char* const* extra_names,
                                       tj_graph_t** out_graph) {
  *out_graph = NULL;
  const tj_graph_t* src = rw->src;
  tj_status_t status = NULL;
  for (uint32_t i = 0; !status && keep_src_outputs && i < src->num_outputs;
       ++i) {
    uint32_t node = rw->map[src->outputs[i].node];
    if (node == TJ_NODE_NONE) {
      status = tj_internal("rewrite: output \"%s\" was not rebuilt",
                           src->outputs[i].name);
      break;
    }
    status = tj_graph_append_output(rw->dst, node, src->outputs[i].name);
  }
  for (uint32_t i = 0; !status && i < num_extra; ++i) {
    status = tj_graph_append_output(rw->dst, extra_nodes[i], extra_names[i]);
  }
  // A guard stays even when the node that needed it is gone: the rewritten
  // graph must reject exactly the inputs the original rejects.
  for (uint32_t i = 0; !status && i < src->num_guards; ++i) {
    const tj_guard_t* guard = &src->guards[i];
    int64_t a, b;
    status = tj_rewriter_dim(rw, guard->a, &a);
    if (!status) status = tj_rewriter_dim(rw, guard->b, &b);
    if (status || has_guard(rw->dst, a, b)) continue;
    uint32_t node =
        guard->node < src->num_nodes ? rw->map[guard->node] : TJ_NODE_NONE;
    // (The new graph's first input: the same node as before for a plain
    // rewrite, and one that exists for a bare one.)
    if (node == TJ_NODE_NONE)
      node = rw->dst->num_inputs ? rw->dst->inputs[0] : 0;
    status = tj_graph_add_guard(rw->dst, a, b, node);
  }
  if (!status) status = tj_graph_finalize(rw->dst);
  if (status) {
    tj_rewriter_abandon(rw);
    return status;
  }
  *out_graph = rw->dst;
  rw->dst = NULL;
  tj_rewriter_abandon(rw);
  return NULL;
}

//===--- nodes ---===//

tj_status_t tj_rewriter_append(tj_rewriter_t* rw, const tj_node_desc_t* desc,
                               uint32_t* out_node) {
  return tj_graph_append(rw->dst, desc, out_node);
}

tj_status_t tj_rewriter_copy(tj_rewriter_t* rw, uint32_t src_node,
                             const uint32_t* operands, uint32_t* out_node) {
  const tj_node_t* node = &rw->src->nodes[src_node];
  uint32_t mapped[16];
  uint32_t* ops = mapped;
  if (node->num_operands > TJ_ARRAY_SIZE(mapped)) {
    ops = tj_alloc(rw->allocator, sizeof(uint32_t) * node->num_operands);
    if (!ops) return tj_status_oom();
  }
  tj_status_t status = NULL;
  for (uint32_t i = 0; i < node->num_operands; ++i) {
    uint32_t operand = node->operands[i];
    if (operands) {
      ops[i] = operands[i];
    } else if (operand == TJ_NODE_NONE) {
      ops[i] = TJ_NODE_NONE;
    } else {
      ops[i] = rw->map[operand];
      if (ops[i] == TJ_NODE_NONE) {
        status = tj_internal("rewrite: operand %%%u of node %%%u not rebuilt",
                             operand, src_node);
        break;
      }
    }
  }
  int64_t dims[TJ_MAX_RANK];
  if (!status) status = tj_rewriter_dims(rw, node->rank, node->dims, dims);
  if (!status) {
    tj_node_desc_t desc;
    memset(&desc, 0, sizeof(desc));
    desc.op = node->op;
    desc.num_operands = node->num_operands;
    desc.operands = ops;
    desc.dtype = node->dtype;
    desc.rank = node->rank;
    desc.dims = dims;
    desc.attrs = node->attrs;
    status = tj_graph_append(rw->dst, &desc, out_node);
  }
  if (ops != mapped) {
    tj_free(rw->allocator, ops, sizeof(uint32_t) * node->num_operands);
  }
  return status;
}

tj_status_t tj_rewriter_clone(tj_rewriter_t* rw, uint32_t src_node) {
  uint32_t out;
  TJ_RETURN_IF_ERROR(tj_rewriter_copy(rw, src_node, NULL, &out));
  rw->map[src_node] = out;
  return NULL;
}

tj_status_t tj_rewriter_emit(tj_rewriter_t* rw, tj_op_t op,
                             uint32_t num_operands, const uint32_t* operands,
                             const tj_attrs_t* attrs, tj_dtype_t dtype,
                             int32_t rank, const int64_t* dims,
                             uint32_t* out_node) {
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = op;
  desc.num_operands = num_operands;
  desc.operands = operands;
  desc.dtype = dtype;
  desc.rank = rank;
  desc.dims = dims;
  if (attrs) desc.attrs = *attrs;
  return tj_rewriter_append(rw, &desc, out_node);
}

tj_status_t tj_rewriter_op(tj_rewriter_t* rw, tj_op_t op, uint32_t num_operands,
                           const uint32_t* operands, uint32_t* out_node) {
  return tj_rewriter_emit(rw, op, num_operands, operands, NULL, TJ_DTYPE_F32, 0,
                          NULL, out_node);
}

tj_status_t tj_rewriter_scalar(tj_rewriter_t* rw, tj_dtype_t dtype,
                               double value, uint32_t* out_node) {
  unsigned char data[16];
  memset(data, 0, sizeof(data));
  tj_store_f64(dtype, data, 0, value);
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_CONSTANT;
  desc.dtype = dtype;
  desc.rank = 0;
  desc.attrs.data = data;
  return tj_graph_append(rw->dst, &desc, out_node);
}

//===--- uses ---===//

tj_status_t tj_uses_initialize(tj_uses_t* uses, const tj_graph_t* graph) {
  memset(uses, 0, sizeof(*uses));
  uses->allocator = graph->allocator;
  uint32_t n = graph->num_nodes;
  uses->num_nodes = n;
  uses->offsets = tj_calloc(uses->allocator, (size_t)n + 1, sizeof(uint32_t));
  uses->is_output = tj_calloc(uses->allocator, n ? n : 1, sizeof(bool));
  if (!uses->offsets || !uses->is_output) {
    tj_uses_deinitialize(uses);
    return tj_status_oom();
  }
  uint32_t total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const tj_node_t* node = &graph->nodes[i];
    for (uint32_t k = 0; k < node->num_operands; ++k) {
      if (node->operands[k] != TJ_NODE_NONE) {
        ++uses->offsets[node->operands[k] + 1];
        ++total;
      }
    }
  }
  for (uint32_t i = 0; i < n; ++i) uses->offsets[i + 1] += uses->offsets[i];
  uses->users =
      tj_alloc(uses->allocator, sizeof(uint32_t) * (total ? total : 1));
  uint32_t* fill = tj_alloc(uses->allocator, sizeof(uint32_t) * (n ? n : 1));
  if (!uses->users || !fill) {
    tj_free(uses->allocator, fill, sizeof(uint32_t) * (n ? n : 1));
    tj_uses_deinitialize(uses);
    return tj_status_oom();
  }
  for (uint32_t i = 0; i < n; ++i) fill[i] = uses->offsets[i];
  // Users are appended in node order, so each list is ascending.
  for (uint32_t i = 0; i < n; ++i) {
    const tj_node_t* node = &graph->nodes[i];
    for (uint32_t k = 0; k < node->num_operands; ++k) {
      uint32_t operand = node->operands[k];
      if (operand != TJ_NODE_NONE) uses->users[fill[operand]++] = i;
    }
  }
  tj_free(uses->allocator, fill, sizeof(uint32_t) * (n ? n : 1));
  for (uint32_t i = 0; i < graph->num_outputs; ++i) {
    if (graph->outputs[i].node < n)
      uses->is_output[graph->outputs[i].node] = true;
  }
  return NULL;
}

void tj_uses_deinitialize(tj_uses_t* uses) {
  uint32_t n = uses->num_nodes;
  if (uses->offsets) {
    uint32_t total = uses->offsets[n];
    if (uses->users)
      tj_free(uses->allocator, uses->users,
              sizeof(uint32_t) * (total ? total : 1));
    tj_free(uses->allocator, uses->offsets, sizeof(uint32_t) * ((size_t)n + 1));
  }
  if (uses->is_output) tj_free(uses->allocator, uses->is_output, n ? n : 1);
  memset(uses, 0, sizeof(*uses));
}

bool tj_node_static_numel(const tj_graph_t* graph, uint32_t index,
                          int64_t* out_numel) {
  const tj_node_t* node = &graph->nodes[index];
  int64_t numel = 1;
  for (int32_t i = 0; i < node->rank; ++i) {
    if (!tj_dim_is_const(node->dims[i]) ||
        tj_mul_overflow_i64(numel, node->dims[i], &numel)) {
      return false;
    }
  }
  *out_numel = numel;
  return true;
}

int64_t tj_pass_node_bytes(const tj_pass_ctx_t* ctx, const tj_graph_t* graph,
                           uint32_t index) {
  const int64_t kCap = INT64_MAX / 4;
  const tj_node_t* node = &graph->nodes[index];
  // The symbols' values, filled at the first symbolic dim: fuse asks this
  // of every node, and filling all TJ_MAX_SYMBOLS slots was most of the
  // call (a 15% of fuse over a three-block region probe).
  int64_t values[TJ_MAX_SYMBOLS];
  bool filled = false;
  int64_t total = (int64_t)tj_dtype_size(node->dtype);
  for (int32_t d = 0; d < node->rank; ++d) {
    int64_t v = node->dims[d];
    if (!tj_dim_is_const(v)) {
      if (!filled) {
        uint32_t num_symbols = tj_dim_num_symbols(&graph->dims);
        if (num_symbols > TJ_MAX_SYMBOLS) num_symbols = TJ_MAX_SYMBOLS;
        for (uint32_t i = 0; i < num_symbols; ++i) {
          int64_t hint = ctx ? ctx->symbol_hints[i] : 0;
          values[i] = hint > 0 ? hint : TJ_PASS_DEFAULT_SYMBOL_HINT;
        }
        memset(values + num_symbols, 0,
               sizeof(int64_t) * (TJ_MAX_SYMBOLS - num_symbols));
        filled = true;
      }
      tj_status_t status = tj_dim_eval(&graph->dims, v, values, &v);
      if (status) {
        tj_status_free(status);
        return kCap;
      }
    }
    if (tj_mul_overflow_i64(total, v, &total) || total > kCap) return kCap;
  }
  return total;
}

// tj_graph_clone through the builder: every node inferred again.
static tj_status_t clone_rebuilt(const tj_graph_t* src,
                                 tj_graph_t** out_graph) {
  *out_graph = NULL;
  tj_rewriter_t rw;
  TJ_RETURN_IF_ERROR(tj_rewriter_begin(&rw, src));
  for (uint32_t i = 0; i < src->num_nodes; ++i) {
    if (src->nodes[i].op == TJ_OP_INPUT) continue;
    tj_status_t status = tj_rewriter_clone(&rw, i);
    if (status) {
      tj_rewriter_abandon(&rw);
      return status;
    }
  }
  return tj_rewriter_finish(&rw, out_graph);
}

// Node |i| of |src| into |dst|'s arena: its payloads copied, an owned
// constant's bytes too (a borrowed one stays the caller's, as the builder
// keeps it).
static bool copy_node(tj_graph_t* dst, const tj_graph_t* src, uint32_t i) {
  const tj_node_t* from = &src->nodes[i];
  tj_node_t* to = &dst->nodes[i];
  tj_arena_t* arena = &dst->arena;
  *to = *from;
  if (from->num_operands) {
    to->operands = tj_arena_memdup(arena, from->operands,
                                   sizeof(uint32_t) * from->num_operands);
    if (!to->operands) return false;
  }
  if (from->rank > 0) {
    to->dims = tj_arena_memdup(arena, from->dims,
                               sizeof(int64_t) * (size_t)from->rank);
    if (!to->dims) return false;
  }
  if (from->attrs.num_ints) {
    to->attrs.ints = tj_arena_memdup(arena, from->attrs.ints,
                                     sizeof(int64_t) * from->attrs.num_ints);
    if (!to->attrs.ints) return false;
  }
  if (from->attrs.name) {
    to->attrs.name = tj_arena_strdup(arena, from->attrs.name);
    if (!to->attrs.name) return false;
  }
  if (from->op == TJ_OP_CONSTANT && !from->attrs.borrowed) {
    int64_t numel = 0;
    if (!tj_node_static_numel(src, i, &numel)) return false;
    size_t bytes = (size_t)numel * tj_dtype_size(from->dtype);
    to->attrs.data = bytes ? tj_arena_memdup(arena, from->attrs.data, bytes)
                           : tj_arena_alloc(arena, 0);
    if (!to->attrs.data) return false;
  }
  return true;
}

// A finalized graph was inferred and verified node by node when it was
// built, and a copy of it is the same graph: its nodes, dim table, inputs,
// outputs and guards are copied field by field, none inferred or verified
// again (the compile of a 24-layer stack copies its caller's graph first;
// through the builder that cost some 40 us, as much as lowering every
// layer). A graph not finalized is rebuilt.
tj_status_t tj_graph_clone(const tj_graph_t* src, tj_graph_t** out_graph) {
  *out_graph = NULL;
  if (!src->finalized || src->error) return clone_rebuilt(src, out_graph);
  tj_graph_t* g = NULL;
  TJ_RETURN_IF_ERROR(tj_graph_create(src->context, src->name, &g));
  tj_allocator_t al = g->allocator;
  tj_status_t status = tj_dimtab_copy(&g->dims, &src->dims, al);
  if (!status && src->num_nodes) {
    g->nodes = tj_alloc(al, sizeof(tj_node_t) * src->num_nodes);
    if (g->nodes) {
      g->node_capacity = src->num_nodes;
    } else {
      status = tj_status_oom();
    }
  }
  for (uint32_t i = 0; !status && i < src->num_nodes; ++i) {
    if (!copy_node(g, src, i)) status = tj_status_oom();
    g->num_nodes = i + 1;  // the arena holds what it points to
  }
  if (!status && src->num_inputs) {
    g->inputs = tj_alloc(al, sizeof(uint32_t) * src->num_inputs);
    if (!g->inputs) {
      status = tj_status_oom();
    } else {
      g->input_capacity = g->num_inputs = src->num_inputs;
      memcpy(g->inputs, src->inputs, sizeof(uint32_t) * src->num_inputs);
    }
  }
  if (!status && src->num_outputs) {
    g->outputs = tj_alloc(al, sizeof(tj_output_t) * src->num_outputs);
    if (!g->outputs) status = tj_status_oom();
    if (!status) g->output_capacity = src->num_outputs;
    for (uint32_t o = 0; !status && o < src->num_outputs; ++o) {
      g->outputs[o].node = src->outputs[o].node;
      g->outputs[o].name = tj_arena_strdup(&g->arena, src->outputs[o].name);
      if (!g->outputs[o].name) status = tj_status_oom();
      g->num_outputs = o + 1;
    }
  }
  if (!status && src->num_guards) {
    g->guards = tj_alloc(al, sizeof(tj_guard_t) * src->num_guards);
    if (!g->guards) {
      status = tj_status_oom();
    } else {
      g->guard_capacity = g->num_guards = src->num_guards;
      memcpy(g->guards, src->guards, sizeof(tj_guard_t) * src->num_guards);
    }
  }
  if (status) {
    tj_graph_destroy(g);
    return status;
  }
  g->finalized = true;
  *out_graph = g;
  return NULL;
}
