// backends/verify_condition.c: the scale of tj_verify's budgets
// (tj_verify_conditions in backends/verify.h), a driver layer file.
//
// A compiled kernel may sum in another order than the reference, so its
// value of a contraction or a reduction differs from the reference's by up
// to a few roundings of the terms' magnitudes, not of the result's: after
// cancellation (a K = 1024 dot product of edge values whose sum is near 0)
// the error is legitimate and far beyond rtol * |result|. So an element's
// budget is atol + rtol * c, c its condition: the sum of the magnitudes of
// the terms it is made of, carried forward through every op in f64 by a
// running error analysis (the rounding error of a value computed op by op
// is at most a few units of the last place of c):
//
//   leaves, ops without a rule   c = |y|
//   matmul, linear, conv         the same op on the operands' c
//   (contractions)               (>= sum_k |a_k| |b_k|)
//   sum, mean, max, cumsum,      the same op on c (min: max of c; prod,
//   avg/max pool                 cumprod: c = |y|)
//   movement (reshape, slice,    the same op on c (pad: |pad value| in the
//   gather, concat, scatter)     padding; scatter with mul/max/min: |y|)
//   cast between floats          |y| + c_a
//   any other elementwise op f   |y| + sum over float operands a of
//                                max |f(.., a +- eta c_a, ..) - f(..)| / eta
//                                with eta = rtol of a's dtype: what f makes
//                                of an operand anywhere within its budget
//                                (|f'(a)| c_a for a smooth f; a jump of
//                                floor or sign within reach counts whole)
//
// The graph is decomposed first (the decompose pass alone), so softmax,
// layer_norm and attention are carried through their max, sum, mean, exp
// and division instead of falling back to |y|. The conditions are the
// outputs of one more graph run on the reference interpreter: a copy of
// every node (the values the rules read) and, for every float node, its
// condition in f64.

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backends/verify.h"
#include "lib/dtype.h"
#include "lib/passes/pass.h"

typedef struct cond_t {
  tj_rewriter_t rw;
  const tj_graph_t* src;  // the decomposed graph
  uint32_t* cond;         // src node -> its condition (f64) or TJ_NODE_NONE
  const double* rtol;     // per dtype
} cond_t;

static bool floatish(tj_dtype_t dtype) {
  return tj_dtype_is_float(dtype) || tj_dtype_is_f8(dtype);
}

static tj_status_t op1(cond_t* c, tj_op_t op, uint32_t a, uint32_t* out) {
  return tj_rewriter_op(&c->rw, op, 1, &a, out);
}

static tj_status_t op2(cond_t* c, tj_op_t op, uint32_t a, uint32_t b,
                       uint32_t* out) {
  uint32_t ops[2] = {a, b};
  return tj_rewriter_op(&c->rw, op, 2, ops, out);
}

// |node| (of the new graph) as f64.
static tj_status_t to_f64(cond_t* c, uint32_t node, uint32_t* out) {
  if (c->rw.dst->nodes[node].dtype == TJ_DTYPE_F64) {
    *out = node;
    return NULL;
  }
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_CAST;
  desc.num_operands = 1;
  desc.operands = &node;
  desc.dtype = TJ_DTYPE_F64;
  return tj_rewriter_append(&c->rw, &desc, out);
}

// |y| of source node |i|, in f64.
static tj_status_t magnitude(cond_t* c, uint32_t i, uint32_t* out) {
  uint32_t y;
  TJ_RETURN_IF_ERROR(to_f64(c, c->rw.map[i], &y));
  return op1(c, TJ_OP_ABS, y, out);
}

// Source node |i| as op |op| (its attributes) over new-graph |operands|.
static tj_status_t copy_op(cond_t* c, uint32_t i, tj_op_t op,
                           const uint32_t* operands, uint32_t* out) {
  const tj_node_t* n = &c->src->nodes[i];
  int64_t dims[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(tj_rewriter_dims(&c->rw, n->rank, n->dims, dims));
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = op;
  desc.num_operands = n->num_operands;
  desc.operands = operands;
  desc.dtype = n->dtype;
  desc.rank = n->rank;
  desc.dims = dims;
  desc.attrs = n->attrs;
  return tj_rewriter_append(&c->rw, &desc, out);
}

enum { kMaxOperands = 16 };

// The same op on the operands' conditions (index operands as they are).
static tj_status_t same_op(cond_t* c, uint32_t i, tj_op_t op, uint32_t* out) {
  const tj_node_t* n = &c->src->nodes[i];
  if (n->num_operands > kMaxOperands) return NULL;  // no rule
  uint32_t ops[kMaxOperands];
  for (uint32_t k = 0; k < n->num_operands; ++k) {
    uint32_t o = n->operands[k];
    ops[k] = o == TJ_NODE_NONE            ? TJ_NODE_NONE
             : c->cond[o] != TJ_NODE_NONE ? c->cond[o]
                                          : c->rw.map[o];
  }
  return copy_op(c, i, op, ops, out);
}

// |y| + the sum over float operands of what the op makes of that operand
// anywhere within its budget, per unit of budget.
static tj_status_t perturbed(cond_t* c, uint32_t i, uint32_t* out) {
  const tj_node_t* n = &c->src->nodes[i];
  if (n->num_operands > kMaxOperands) return NULL;  // no rule
  uint32_t base[kMaxOperands], ops[kMaxOperands];
  for (uint32_t k = 0; k < n->num_operands; ++k) {
    uint32_t o = n->operands[k];
    base[k] = c->rw.map[o];
    if (c->cond[o] != TJ_NODE_NONE) {
      TJ_RETURN_IF_ERROR(to_f64(c, base[k], &base[k]));
    }
  }
  uint32_t sum, y;
  TJ_RETURN_IF_ERROR(magnitude(c, i, &sum));
  TJ_RETURN_IF_ERROR(copy_op(c, i, n->op, base, &y));
  for (uint32_t k = 0; k < n->num_operands; ++k) {
    uint32_t o = n->operands[k];
    if (c->cond[o] == TJ_NODE_NONE) continue;
    double eta = fmax(c->rtol[c->src->nodes[o].dtype], 0x1p-30);
    uint32_t eta_node, inv_node, delta, moved[2], worst, sens;
    TJ_RETURN_IF_ERROR(
        tj_rewriter_scalar(&c->rw, TJ_DTYPE_F64, eta, &eta_node));
    TJ_RETURN_IF_ERROR(
        tj_rewriter_scalar(&c->rw, TJ_DTYPE_F64, 1.0 / eta, &inv_node));
    TJ_RETURN_IF_ERROR(op2(c, TJ_OP_MUL, c->cond[o], eta_node, &delta));
    for (int s = 0; s < 2; ++s) {
      uint32_t shifted;
      TJ_RETURN_IF_ERROR(
          op2(c, s ? TJ_OP_SUB : TJ_OP_ADD, base[k], delta, &shifted));
      memcpy(ops, base, sizeof(uint32_t) * n->num_operands);
      ops[k] = shifted;
      uint32_t f, d;
      TJ_RETURN_IF_ERROR(copy_op(c, i, n->op, ops, &f));
      TJ_RETURN_IF_ERROR(op2(c, TJ_OP_SUB, f, y, &d));
      TJ_RETURN_IF_ERROR(op1(c, TJ_OP_ABS, d, &moved[s]));
    }
    TJ_RETURN_IF_ERROR(op2(c, TJ_OP_MAXIMUM, moved[0], moved[1], &worst));
    TJ_RETURN_IF_ERROR(op2(c, TJ_OP_MUL, worst, inv_node, &sens));
    TJ_RETURN_IF_ERROR(op2(c, TJ_OP_ADD, sum, sens, &sum));
  }
  *out = sum;
  return NULL;
}

// The rule for float node |i| (see the table above); *out stays
// TJ_NODE_NONE when it has none, and the caller falls back to |y|.
static tj_status_t rule(cond_t* c, uint32_t i, uint32_t* out) {
  const tj_node_t* n = &c->src->nodes[i];
  *out = TJ_NODE_NONE;
  switch (n->op) {
    case TJ_OP_INPUT:
    case TJ_OP_CONSTANT:
    case TJ_OP_FULL:
    case TJ_OP_IOTA:
    case TJ_OP_PROD:
    case TJ_OP_CUMPROD:
    case TJ_OP_LP_POOL:
      return NULL;
    case TJ_OP_CAST: {
      uint32_t a = n->operands[0], y;
      if (c->cond[a] == TJ_NODE_NONE) return NULL;
      TJ_RETURN_IF_ERROR(magnitude(c, i, &y));
      return op2(c, TJ_OP_ADD, y, c->cond[a], out);
    }
    case TJ_OP_MATMUL:
    case TJ_OP_LINEAR:
    case TJ_OP_CONV:
    case TJ_OP_CONV_TRANSPOSE:
    case TJ_OP_SUM:
    case TJ_OP_MEAN:
    case TJ_OP_MAX:
    case TJ_OP_CUMSUM:
    case TJ_OP_AVG_POOL:
    case TJ_OP_MAX_POOL:
    case TJ_OP_RESHAPE:
    case TJ_OP_TRANSPOSE:
    case TJ_OP_BROADCAST_TO:
    case TJ_OP_SLICE:
    case TJ_OP_CONCAT:
    case TJ_OP_GATHER:
    case TJ_OP_GATHER_ELEMENTS:
    case TJ_OP_GATHER_ND:
      return same_op(c, i, n->op, out);
    case TJ_OP_MIN:  // the error of a min is at most the largest one's
      return same_op(c, i, TJ_OP_MAX, out);
    case TJ_OP_PAD: {
      uint32_t padded;
      TJ_RETURN_IF_ERROR(same_op(c, i, n->op, &padded));
      return op1(c, TJ_OP_ABS, padded, out);
    }
    case TJ_OP_SCATTER_ELEMENTS:
    case TJ_OP_SCATTER_ND:
      if (n->attrs.num_ints > 0 &&
          n->attrs.ints[0] != TJ_SCATTER_REDUCTION_NONE &&
          n->attrs.ints[0] != TJ_SCATTER_REDUCTION_ADD) {
        return NULL;
      }
      return same_op(c, i, n->op, out);
    default:
      break;
  }
  if (tj_op_info(n->op)->pattern == TJ_OP_PATTERN_ELEMENTWISE) {
    return perturbed(c, i, out);
  }
  return NULL;
}

// Builds the conditions' graph of |d| (decomposed, finalized): the copy of
// every node and, for every float node, its condition; its outputs are the
// conditions of |d|'s outputs.
static tj_status_t build(const tj_graph_t* d, const double* rtol,
                         tj_graph_t** out) {
  tj_allocator_t al = d->allocator;
  cond_t c;
  memset(&c, 0, sizeof(c));
  c.src = d;
  c.rtol = rtol;
  TJ_RETURN_IF_ERROR(tj_rewriter_begin(&c.rw, d));
  size_t n = d->num_nodes ? d->num_nodes : 1;
  size_t no = d->num_outputs ? d->num_outputs : 1;
  c.cond = tj_alloc(al, n * sizeof(uint32_t));
  uint32_t* nodes = tj_alloc(al, no * sizeof(uint32_t));
  char* names = tj_alloc(al, no * 32);
  const char** name_ptrs = tj_alloc(al, no * sizeof(char*));
  tj_status_t status = NULL;
  if (!c.cond || !nodes || !names || !name_ptrs) status = tj_status_oom();
  for (uint32_t i = 0; !status && i < d->num_nodes; ++i) {
    c.cond[i] = TJ_NODE_NONE;
    const tj_node_t* node = &d->nodes[i];
    if (node->op != TJ_OP_INPUT) status = tj_rewriter_clone(&c.rw, i);
    if (status || !floatish(node->dtype)) continue;
    status = rule(&c, i, &c.cond[i]);
    if (status && tj_status_code(status) != TJ_STATUS_OUT_OF_MEMORY) {
      // The rule's ops refuse these dtypes or shapes.
      tj_status_free(status);
      status = NULL;
      c.cond[i] = TJ_NODE_NONE;
    }
    if (!status && c.cond[i] == TJ_NODE_NONE) {
      status = magnitude(&c, i, &c.cond[i]);  // no rule: the plain |y|
    }
  }
  for (uint32_t o = 0; !status && o < d->num_outputs; ++o) {
    uint32_t node = d->outputs[o].node;
    nodes[o] = c.cond[node];
    // An integer or bool output is compared exactly; any f64 will do.
    if (nodes[o] == TJ_NODE_NONE) {
      status = to_f64(&c, c.rw.map[node], &nodes[o]);
    }
    snprintf(names + (size_t)o * 32, 32, "tj_condition_%u", o);
    name_ptrs[o] = names + (size_t)o * 32;
  }
  if (!status) {
    status = tj_rewriter_finish_outputs(&c.rw, false, d->num_outputs, nodes,
                                        name_ptrs, out);
  } else {
    tj_rewriter_abandon(&c.rw);
  }
  tj_free(al, c.cond, n * sizeof(uint32_t));
  tj_free(al, nodes, no * sizeof(uint32_t));
  tj_free(al, names, no * 32);
  tj_free(al, name_ptrs, no * sizeof(char*));
  return status;
}

tj_status_t tj_verify_conditions(const tj_graph_t* graph,
                                 const tj_tensor_t* inputs, int32_t num_inputs,
                                 const double* rtol, tj_verify_tensors_t* out) {
  memset(out, 0, sizeof(*out));
  out->allocator = graph->allocator;
  tj_graph_t* clone = NULL;
  TJ_RETURN_IF_ERROR(tj_graph_clone(graph, &clone));
  tj_plan_t plan;
  tj_plan_initialize(&plan, clone);
  tj_pass_ctx_t ctx;
  tj_pass_ctx_initialize(&ctx, tj_graph_context(graph));
  // The context's TJ_BISECT budget is for the compiler's passes: every
  // composite decomposes here, whatever it says.
  ctx.bisect_pass = NULL;
  ctx.bisect_limit = -1;
  ctx.print_after = NULL;
  ctx.log_passes = false;
  tj_status_t status =
      tj_pipeline_run_one(&ctx, &plan, &tj_pass_info_decompose);
  tj_graph_t* conditions = NULL;
  if (!status) status = build(plan.graph, rtol, &conditions);
  tj_plan_deinitialize(&plan);
  if (!status) {
    status = tj_verify_make_outputs(conditions, inputs, num_inputs, out);
  }
  if (!status) {
    status = tj_reference_run(conditions, inputs, num_inputs, out->tensors,
                              out->count);
  }
  tj_graph_destroy(conditions);
  if (status) tj_verify_tensors_deinitialize(out);
  return status;
}
