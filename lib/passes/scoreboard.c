// tj_graph_scoreboard (include/tensorjit/tj_optimize.h): runs the default
// pipeline on copies of a graph, one per stage, and measures each stage the
// same way a backend would pay for it: kernel launches, bytes each kernel
// reads and writes, memory held at the peak.
//
// Unfused stages count one kernel per core op (a composite counts as the
// kernels of its decomposition, measured by decomposing a copy in the
// graph's own dtypes: an eager f16/bf16 op upcasts inside its kernel, with
// no cast kernels around it), reading
// each distinct operand once and writing its result; reshapes are views.
// Fused stages count one kernel per group (lib/passes/fusion.h), reading its
// inputs and writing its outputs. Peak memory is inputs + constants +
// outputs + intermediates, the intermediates each separately allocated
// until memory planning and sharing the planned arena after it.
//
// Quantized weights (issue 17): the caller's |native_op| keeps the
// dequantize of weights that a GEMM reads quantized whole, so the fused
// stages read their stored bytes (weight_bytes_read).
//
// Folding needs a constant evaluator, which lib/ does not have (it must not
// reach backends/): the public entry point, backends/scoreboard.c, passes
// the reference interpreter's to tj_scoreboard_measure.

#include <string.h>

#include "lib/passes/memplan.h"

const char* tj_stage_name(tj_stage_t stage) {
  switch (stage) {
    case TJ_STAGE_EAGER:
      return "eager";
    case TJ_STAGE_CANONICALIZE:
      return "canonicalize";
    case TJ_STAGE_DECOMPOSE:
      return "decompose";
    case TJ_STAGE_FUSE:
      return "fuse";
    case TJ_STAGE_MEMPLAN:
      return "memplan";
    case TJ_STAGE_COUNT_:
      break;
  }
  return "?";
}

typedef struct board_t {
  tj_pass_ctx_t ctx;
  const tj_graph_t* graph;
  int64_t symbol_values[TJ_MAX_SYMBOLS];
} board_t;

static int64_t bytes_of(const board_t* b, const tj_graph_t* g, uint32_t i) {
  return tj_pass_node_bytes(&b->ctx, g, i);
}

static bool is_leaf_storage(tj_op_t op) {
  return op == TJ_OP_INPUT || op == TJ_OP_CONSTANT;
}

// The node whose storage |i| is (through reshape views).
static uint32_t storage_root(const tj_graph_t* g, uint32_t i) {
  while (g->nodes[i].op == TJ_OP_RESHAPE) i = g->nodes[i].operands[0];
  return i;
}

// Kernels, bytes and naive peak of a graph without composites, run op by
// op with every intermediate materialized.
static void measure_core(const board_t* b, const tj_graph_t* g,
                         tj_scoreboard_row_t* row) {
  int64_t resident = 0;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    const tj_node_t* node = &g->nodes[i];
    if (is_leaf_storage(node->op)) {
      resident += bytes_of(b, g, i);
      continue;
    }
    if (node->op == TJ_OP_RESHAPE) continue;  // a view
    ++row->kernels;
    int64_t w = bytes_of(b, g, i);
    row->bytes_written += w;
    resident += w;
    for (uint32_t k = 0; k < node->num_operands; ++k) {
      uint32_t o = node->operands[k];
      if (o == TJ_NODE_NONE) continue;
      uint32_t root = storage_root(g, o);
      bool seen = false;
      for (uint32_t j = 0; j < k && !seen; ++j) {
        uint32_t p = node->operands[j];
        seen = p != TJ_NODE_NONE && storage_root(g, p) == root;
      }
      if (!seen) {
        row->bytes_read += bytes_of(b, g, root);
        if (g->nodes[root].op == TJ_OP_CONSTANT) {
          row->weight_bytes_read += bytes_of(b, g, root);
        }
      }
    }
  }
  row->peak_bytes = resident;
}

// Graph breaks and percent compiled of an unfused stage: composites are what
// no backend compiles.
static void measure_coverage(const tj_graph_t* g, tj_scoreboard_row_t* row) {
  int64_t nonleaf = 0, composite = 0;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    tj_op_kind_t kind = tj_op_info(g->nodes[i].op)->kind;
    if (kind == TJ_OP_KIND_LEAF) continue;
    ++nonleaf;
    composite += kind == TJ_OP_KIND_COMPOSITE;
    row->host_calls += kind == TJ_OP_KIND_CUSTOM;
  }
  row->graph_breaks = composite;
  row->percent_compiled =
      nonleaf ? 100.0 * (double)(nonleaf - composite) / (double)nonleaf : 100.0;
}

static tj_status_t clone_plan(const tj_graph_t* g, tj_plan_t* plan) {
  tj_graph_t* copy = NULL;
  TJ_RETURN_IF_ERROR(tj_graph_clone(g, &copy));
  tj_plan_initialize(plan, copy);
  return NULL;
}

// Measures |g| (maybe with composites) as if run op by op. |eager|: count
// the nodes of the expansion (what the interpreter steps through) and
// nothing as compiled.
static tj_status_t measure_unfused(board_t* b, const tj_graph_t* g, bool eager,
                                   tj_scoreboard_row_t* row) {
  row->nodes = (int64_t)g->num_nodes - (int64_t)g->num_inputs;
  measure_coverage(g, row);
  tj_plan_t plan;
  TJ_RETURN_IF_ERROR(clone_plan(g, &plan));
  // Op by op, each kernel computes in whatever precision it likes and
  // rounds its result: no cast kernels around half-precision composites.
  b->ctx.decompose_upcast_half = false;
  tj_status_t status =
      tj_pipeline_run_one(&b->ctx, &plan, &tj_pass_info_decompose);
  b->ctx.decompose_upcast_half = true;
  if (!status) measure_core(b, plan.graph, row);
  if (!status && eager) {
    row->nodes = (int64_t)plan.graph->num_nodes - plan.graph->num_inputs;
    row->graph_breaks = 0;
    row->percent_compiled = 0.0;
  }
  tj_plan_deinitialize(&plan);
  return status;
}

static void measure_fused(const board_t* b, const tj_plan_t* plan,
                          tj_scoreboard_row_t* row, int64_t arena) {
  const tj_graph_t* g = plan->graph;
  const tj_fusion_t* fu = plan->fusion;
  row->nodes = (int64_t)g->num_nodes - (int64_t)g->num_inputs;
  int64_t resident = 0, intermediates = 0;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    if (is_leaf_storage(g->nodes[i].op)) resident += bytes_of(b, g, i);
  }
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    uint32_t v = g->outputs[i].node;
    if (!is_leaf_storage(g->nodes[v].op)) resident += bytes_of(b, g, v);
  }
  int64_t nonleaf = 0, compiled = 0;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    tj_op_kind_t kind = tj_op_info(g->nodes[i].op)->kind;
    if (kind == TJ_OP_KIND_LEAF) continue;
    ++nonleaf;
    compiled += kind != TJ_OP_KIND_COMPOSITE;
  }
  for (uint32_t p = 0; p < fu->num_groups; ++p) {
    const tj_group_t* grp = &fu->groups[p];
    if (grp->kind == TJ_GROUP_VIEW) continue;
    // A custom op's group is a host call, not a kernel launch; so is an
    // argtopk that decompose left whole (no template takes it: argtopk's
    // native host kernel, backends/runtime/host_topk.h).
    tj_op_t op = g->nodes[grp->anchor].op;
    bool call =
        grp->kind == TJ_GROUP_OPAQUE &&
        (tj_op_info(op)->kind == TJ_OP_KIND_CUSTOM || op == TJ_OP_ARGTOPK);
    row->kernels += !call;
    row->host_calls += call;
    for (uint32_t k = 0; k < grp->num_inputs; ++k) {
      row->bytes_read += bytes_of(b, g, grp->inputs[k]);
      if (g->nodes[grp->inputs[k]].op == TJ_OP_CONSTANT) {
        row->weight_bytes_read += bytes_of(b, g, grp->inputs[k]);
      }
    }
    for (uint32_t k = 0; k < grp->num_outputs; ++k) {
      int64_t w = bytes_of(b, g, grp->outputs[k]);
      row->bytes_written += w;
      bool output = false;
      for (uint32_t j = 0; j < g->num_outputs && !output; ++j) {
        output = g->outputs[j].node == grp->outputs[k];
      }
      if (!output) intermediates += w;
    }
    if (grp->kind == TJ_GROUP_OPAQUE &&
        tj_op_info(g->nodes[grp->anchor].op)->kind == TJ_OP_KIND_COMPOSITE) {
      ++row->graph_breaks;
    }
  }
  row->peak_bytes = resident + (arena >= 0 ? arena : intermediates);
  row->percent_compiled =
      nonleaf ? 100.0 * (double)compiled / (double)nonleaf : 100.0;
}

static tj_status_t bind(board_t* b, int32_t num_symbols,
                        const char* const* names, const int64_t* values) {
  const tj_graph_t* g = b->graph;
  if (num_symbols < 0 || (num_symbols > 0 && (!names || !values))) {
    return tj_invalid("tj_graph_scoreboard: bad symbol arrays");
  }
  for (int32_t i = 0; i < num_symbols; ++i) {
    uint32_t id;
    if (!names[i] || !tj_dim_find_symbol(&g->dims, names[i], &id)) {
      return tj_invalid("tj_graph_scoreboard: graph @%s has no symbol '%s'",
                        g->name, names[i] ? names[i] : "(null)");
    }
    if (values[i] < 1) {
      return tj_invalid(
          "tj_graph_scoreboard: symbol %s = %lld; symbols are "
          ">= 1",
          names[i], (long long)values[i]);
    }
    b->symbol_values[id] = values[i];
  }
  for (uint32_t id = 0; id < tj_dim_num_symbols(&g->dims); ++id) {
    if (b->symbol_values[id] == 0) {
      return tj_invalid(
          "tj_graph_scoreboard: no value for symbol %s of "
          "graph @%s",
          tj_dim_symbol_name(&g->dims, id), g->name);
    }
    b->ctx.symbol_hints[id] = b->symbol_values[id];
  }
  return NULL;
}

static tj_status_t score(board_t* b, tj_scoreboard_t* out) {
  const tj_graph_t* g = b->graph;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    if (is_leaf_storage(g->nodes[i].op)) out->input_bytes += bytes_of(b, g, i);
  }
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    out->activation_bytes += bytes_of(b, g, g->outputs[i].node);
  }
  for (int s = 0; s < TJ_STAGE_COUNT_; ++s) out->rows[s].stage = (tj_stage_t)s;

  // Eager: the graph as given, composites expanded, nothing cleaned up.
  TJ_RETURN_IF_ERROR(measure_unfused(b, g, true, &out->rows[TJ_STAGE_EAGER]));
  tj_plan_t plan;
  tj_status_t status = NULL;
  static const char* const kStages[] = {"canonicalize", "decompose", "fuse",
                                        "memplan"};
  for (int s = 0; s < 4; ++s) {
    tj_scoreboard_row_t* row = &out->rows[TJ_STAGE_CANONICALIZE + s];
    TJ_RETURN_IF_ERROR(clone_plan(g, &plan));
    status = tj_pipeline_default_until(&b->ctx, &plan, kStages[s]);
    if (!status && !plan.fusion) {
      status = measure_unfused(b, plan.graph, false, row);
    }
    if (!status && plan.fusion) {
      int64_t arena = -1;
      if (plan.memplan) {
        status = tj_memplan_evaluate(plan.memplan, plan.graph, b->symbol_values,
                                     NULL, &arena);
        if (!status) out->arena_bytes = arena;
        if (!status) {
          status =
              tj_memplan_live_peak(plan.memplan, plan.graph, plan.fusion,
                                   b->symbol_values, &out->live_peak_bytes);
        }
      }
      if (!status) measure_fused(b, &plan, row, arena);
    }
    tj_plan_deinitialize(&plan);
    TJ_RETURN_IF_ERROR(status);
  }
  return NULL;
}

tj_status_t tj_scoreboard_measure(
    const tj_graph_t* graph, int32_t num_symbols,
    const char* const* symbol_names, const int64_t* symbol_values,
    tj_pass_eval_fn evaluate, void* evaluate_user_data,
    bool (*native_op)(const tj_graph_t*, uint32_t), tj_scoreboard_t* out) {
  if (!out) return tj_invalid("tj_graph_scoreboard: out is NULL");
  memset(out, 0, sizeof(*out));
  if (!graph) return tj_invalid("tj_graph_scoreboard: graph is NULL");
  if (!graph->finalized) {
    return tj_invalid("tj_graph_scoreboard: graph @%s is not finalized",
                      graph->name);
  }
  board_t* b = tj_alloc(graph->allocator, sizeof(*b));
  if (!b) return tj_status_oom();
  memset(b, 0, sizeof(*b));
  tj_pass_ctx_initialize(&b->ctx, graph->context);
  b->ctx.evaluate = evaluate;
  b->ctx.evaluate_user_data = evaluate_user_data;
  b->ctx.native_op = native_op;
  b->graph = graph;
  tj_status_t status = bind(b, num_symbols, symbol_names, symbol_values);
  if (!status) status = score(b, out);
  tj_free(graph->allocator, b, sizeof(*b));
  if (status) memset(out, 0, sizeof(*out));
  return status;
}
