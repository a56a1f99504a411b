// lib/passes/fold.c
//
// Constant folding: a node whose operands are all constants is evaluated at
// compile time and replaced by a constant holding its result. Evaluation
// goes through the context's evaluator hook (tj_pass_eval_fn), which the
// drivers set to the reference interpreter, so a folded value is bit for bit
// what running the graph would have produced: folding can never disagree
// with the oracle. Only small results are folded (ctx->fold_max_bytes;
// movement ops, which only rearrange constants, up to
// ctx->fold_movement_max_bytes), and never a result larger than its operands
// (XLA's "broadcasts dramatically increase the size of constants"): a broadcast
// of a constant stays a cheap, fusible broadcast.
//
// Requires: an evaluator in the context (without one the pass changes
// nothing).  Preserves: inputs, outputs, symbols, guards.  Invalidates:
// fusion groups, memory plan.  Idempotent (what could fold has folded; the
// trailing dce removes the constants that fed it).

#include <string.h>

#include "lib/passes/pass.h"

// Bytes of a node's result when its shape is static; false otherwise.
static bool static_bytes(const tj_graph_t* g, uint32_t index, int64_t* out) {
  int64_t numel;
  if (!tj_node_static_numel(g, index, &numel)) return false;
  return !tj_mul_overflow_i64(
      numel, (int64_t)tj_dtype_size(g->nodes[index].dtype), out);
}

tj_status_t tj_fold_node(tj_pass_ctx_t* ctx, tj_graph_t* dst,
                         const tj_node_desc_t* desc, uint32_t* out_node) {
  *out_node = TJ_NODE_NONE;
  if (!ctx->evaluate) return NULL;
  if (tj_op_info(desc->op)->kind == TJ_OP_KIND_LEAF) return NULL;
  // A custom op may have effects, or cost more than a constant is worth.
  if (tj_op_info(desc->op)->kind == TJ_OP_KIND_CUSTOM) return NULL;
  if (desc->num_operands > 16) return NULL;
  int64_t operand_bytes = 0;
  bool any_operand = false;
  for (uint32_t i = 0; i < desc->num_operands; ++i) {
    uint32_t o = desc->operands[i];
    if (o == TJ_NODE_NONE) continue;
    if (o >= dst->num_nodes || dst->nodes[o].op != TJ_OP_CONSTANT) return NULL;
    int64_t bytes;
    if (!static_bytes(dst, o, &bytes)) return NULL;
    operand_bytes += bytes;
    any_operand = true;
  }
  if (!any_operand) return NULL;
  // Shapes a node carries in its desc (cast, reshape, broadcast_to) must be
  // concrete too.
  for (int32_t i = 0; desc->dims && i < desc->rank; ++i) {
    if (!tj_dim_is_const(desc->dims[i])) return NULL;
  }

  // The node alone in a graph of constants (borrowing |dst|'s bytes: they
  // outlive the evaluation).
  tj_graph_t* mini = NULL;
  TJ_RETURN_IF_ERROR(tj_graph_create(dst->context, "fold", &mini));
  uint32_t ops[16];
  tj_status_t status = NULL;
  for (uint32_t i = 0; !status && i < desc->num_operands; ++i) {
    uint32_t o = desc->operands[i];
    if (o == TJ_NODE_NONE) {
      ops[i] = TJ_NODE_NONE;
      continue;
    }
    const tj_node_t* c = &dst->nodes[o];
    tj_node_desc_t cd;
    memset(&cd, 0, sizeof(cd));
    cd.op = TJ_OP_CONSTANT;
    cd.dtype = c->dtype;
    cd.rank = c->rank;
    cd.dims = c->dims;  // constant dims mean the same in every table
    cd.attrs.data = c->attrs.data;
    cd.attrs.borrowed = true;
    status = tj_graph_append(mini, &cd, &ops[i]);
  }
  tj_node_desc_t nd = *desc;
  nd.operands = ops;
  uint32_t node = 0;
  if (!status) status = tj_graph_append(mini, &nd, &node);
  if (status) {
    // The node itself is ill-formed over constants: not folding's business;
    // the caller appends it to |dst| and gets the same error there.
    tj_graph_destroy(mini);
    if (tj_status_code(status) == TJ_STATUS_OUT_OF_MEMORY) return status;
    tj_status_free(status);
    return NULL;
  }
  int64_t bytes;
  const int64_t limit =
      tj_op_info(desc->op)->kind == TJ_OP_KIND_MOVEMENT &&
              ctx->fold_movement_max_bytes > ctx->fold_max_bytes
          ? ctx->fold_movement_max_bytes
          : ctx->fold_max_bytes;
  if (!static_bytes(mini, node, &bytes) || bytes > limit ||
      (bytes > operand_bytes && bytes > 64)) {
    tj_graph_destroy(mini);
    return NULL;
  }
  status = tj_graph_append_output(mini, node, "y");
  if (!status) status = tj_graph_finalize(mini);
  void* buffer = NULL;
  size_t alloc_bytes = bytes > 0 ? (size_t)bytes : 1;
  if (!status) {
    buffer = tj_alloc(dst->allocator, alloc_bytes);
    if (!buffer) status = tj_status_oom();
  }
  if (!status) {
    void* outs[1] = {buffer};
    status = ctx->evaluate(ctx->evaluate_user_data, mini, outs);
    if (status && tj_status_code(status) == TJ_STATUS_INVALID_ARGUMENT) {
      tj_status_free(status);
      status = NULL;
      tj_free(dst->allocator, buffer, alloc_bytes);
      tj_graph_destroy(mini);
      return NULL;
    }
  }
  if (!status) {
    const tj_node_t* r = &mini->nodes[node];
    tj_node_desc_t cd;
    memset(&cd, 0, sizeof(cd));
    cd.op = TJ_OP_CONSTANT;
    cd.dtype = r->dtype;
    cd.rank = r->rank;
    cd.dims = r->dims;
    cd.attrs.data = buffer;
    status = tj_graph_append(dst, &cd, out_node);
  }
  tj_free(dst->allocator, buffer, alloc_bytes);
  tj_graph_destroy(mini);
  return status;
}

tj_status_t tj_pass_fold(tj_pass_ctx_t* ctx, tj_plan_t* plan) {
  if (!ctx->evaluate) {
    if (ctx->log_passes) {
      tj_context_diagnostic(ctx->context, TJ_SEVERITY_REMARK,
                            "fold: no evaluator installed; nothing folded");
    }
    return NULL;
  }
  const tj_graph_t* g = plan->graph;
  tj_rewriter_t rw;
  TJ_RETURN_IF_ERROR(tj_rewriter_begin(&rw, g));
  tj_status_t status = NULL;
  uint32_t folded = 0;
  for (uint32_t i = 0; !status && i < g->num_nodes; ++i) {
    const tj_node_t* node = &g->nodes[i];
    if (node->op == TJ_OP_INPUT) continue;
    uint32_t ops[16];
    bool all_constant = node->num_operands > 0 && node->num_operands <= 16;
    for (uint32_t k = 0; all_constant && k < node->num_operands; ++k) {
      uint32_t o = node->operands[k];
      ops[k] = o == TJ_NODE_NONE ? TJ_NODE_NONE : rw.map[o];
      if (o != TJ_NODE_NONE && rw.dst->nodes[ops[k]].op != TJ_OP_CONSTANT) {
        all_constant = false;
      }
    }
    if (all_constant) {
      int64_t dims[TJ_MAX_RANK];
      tj_node_desc_t desc;
      memset(&desc, 0, sizeof(desc));
      desc.op = node->op;
      desc.num_operands = node->num_operands;
      desc.operands = ops;
      desc.dtype = node->dtype;
      desc.rank = node->rank;
      desc.dims = dims;
      desc.attrs = node->attrs;
      uint32_t out = TJ_NODE_NONE;
      status = tj_rewriter_dims(&rw, node->rank, node->dims, dims);
      if (!status) status = tj_fold_node(ctx, rw.dst, &desc, &out);
      if (!status && out != TJ_NODE_NONE && tj_pass_rewrite(ctx, g, i)) {
        rw.map[i] = out;
        ++folded;
        continue;
      }
    }
    if (!status) status = tj_rewriter_clone(&rw, i);
  }
  if (status || !folded) {
    tj_rewriter_abandon(&rw);
    return status;
  }
  tj_graph_t* out = NULL;
  TJ_RETURN_IF_ERROR(tj_rewriter_finish(&rw, &out));
  tj_plan_set_graph(plan, out);
  return tj_pass_dce(ctx, plan);
}
