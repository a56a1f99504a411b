// libtensorjit: reverse-mode automatic differentiation of a graph, and
// splitting the result into a forward and a backward graph.
// Include <tensorjit.h> rather than this file directly.
//
// A training step of seed 001's block, loss = sum(gelu(x @ w + b)):
//
//   tj_graph_t* joint = NULL;     // inputs x, w, b, grad_loss
//   tj_graph_t* fwd = NULL;       // outputs loss + what the backward saves
//   tj_graph_t* bwd = NULL;       // outputs grad_x, grad_w, grad_b
//   tj_status_t st = tj_graph_grad(g, 0, NULL, 0, NULL, &joint);
//   if (!st) st = tj_graph_partition(joint, 3, 1, NULL, &fwd, &bwd, NULL);
//
// Then compile both halves once (symbolic B serves every batch): run the
// forward on x, w, b; run the backward on the inputs its names ask for
// (each is a forward input, a forward output or a tangent such as
// grad_loss, fed 1 for a scalar loss).

#ifndef TENSORJIT_TJ_AUTODIFF_H_
#define TENSORJIT_TJ_AUTODIFF_H_

#include "tensorjit/tj_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

//===----------------------------------------------------------------------===//
// Reverse mode
//===----------------------------------------------------------------------===//

// Differentiates finalized |graph| and returns the joint forward + backward
// graph in |*out_joint| (new, finalized, owned by the caller; NULL on
// failure).
//
// |output_indices| (|num_outputs| entries; 0 means every float output)
// picks the outputs y to differentiate; |wrt_input_indices| (|num_wrt|;
// 0 means every float input) the inputs x to differentiate with respect
// to. Both must name float values, each at most once.
//
// The joint graph has the same symbols, and:
//   inputs   |graph|'s inputs in order, then one tangent per differentiated
//            output y, named "grad_<y>", of y's dtype and shape: the
//            incoming gradient dL/dy (feed 1 for a scalar loss L = y);
//   outputs  |graph|'s outputs in order, then one gradient per x, named
//            "grad_<x>", of x's dtype and shape: sum over the
//            differentiated y of (dy/dx)^T grad_y.
// Symbolic dims carry through, so one joint graph serves every batch size.
// An x no differentiated output depends on gets zeros.
//
// Gradients follow torch's conventions where a choice exists: max/min
// reductions split the gradient evenly among tied maxima; maximum/minimum
// give each operand half on ties; relu, abs and sign have derivative 0 at 0;
// floor, ceil, round, sign have derivative 0; comparisons, argmax, isnan
// and values of integer or bool dtype carry no gradient; the index
// operands of gather, gather_elements and gather_nd carry none (a's
// gradient is the scatter-add of g at the clamped indices); scatter_elements
// and scatter_nd (issue 15) give updates g gathered at the written
// positions and data g (add) or g with zeros where written (none), none to
// the indices, and refuse mul, max and min by name. Composites (gelu, silu,
// softmax, log_softmax, layer_norm, rms_norm, linear) have their own rules,
// written in core ops.
//
// INVALID_ARGUMENT names a non-float or repeated selection, or a "grad_"
// name that collides with an existing input or output name.
TJ_API tj_status_t tj_graph_grad(const tj_graph_t* graph, int32_t num_outputs,
                                 const int32_t* output_indices, int32_t num_wrt,
                                 const int32_t* wrt_input_indices,
                                 tj_graph_t** out_joint);

//===----------------------------------------------------------------------===//
// Partitioning: forward and backward graphs
//===----------------------------------------------------------------------===//

// Which forward values the backward may compute again instead of having
// them saved by the forward: the knob that trades activation memory for
// recomputation. Graph inputs are never recomputed (the backward reads them
// again); constants are always.
typedef enum tj_recompute_e {
  // Save every forward value the backward reads, and run every backward
  // formula in the backward (eager autograd).
  TJ_RECOMPUTE_NONE = 0,
  // Recompute elementwise ops, casts, movement and pointwise composites
  // (gelu, silu) when that saves bytes; save matmul, reduction and gather
  // outputs. The default.
  TJ_RECOMPUTE_POINTWISE = 1,
  // Also reductions and the composites built on them (softmax, norms).
  TJ_RECOMPUTE_REDUCTIONS = 2,
  // Also matmuls and gathers: the fewest saved bytes, the most recompute
  // (at the extreme, activation checkpointing of the whole graph).
  TJ_RECOMPUTE_ALL = 3,
} tj_recompute_t;

typedef struct tj_partition_options_t {
  tj_recompute_t recompute;
  // Sizes used to weigh symbolic tensors in bytes: symbol
  // |symbol_names|[i] is taken as |symbol_values|[i] (>= 1); unnamed
  // symbols count as 1024. The arrays are borrowed for the call.
  int32_t num_symbols;
  const char* const* symbol_names;
  const int64_t* symbol_values;
  // The forward computes each attention_lse of a forward attention's own
  // scores (the same q, k, mask, scale and causal flag: the VJP's) and
  // saves it, rather than the backward recomputing it: for a target whose
  // attention kernel writes lse beside y (CUDA, f16/bf16 at head dims 64
  // and 128 without a mask), where it then costs the forward nothing and
  // spares the backward a pass over q k^T. Elsewhere the forward would pay
  // that pass (x86 and the decomposed forms even share the backward's
  // scores with it), so false by default.
  bool save_attention_lse;
} tj_partition_options_t;

// Fills |options| with the defaults (TJ_RECOMPUTE_POINTWISE, no symbols,
// save_attention_lse false).
TJ_API void tj_partition_options_initialize(tj_partition_options_t* options);

// What the cut decided, in bytes at the symbol sizes of the options.
typedef struct tj_partition_stats_t {
  // Forward values other than inputs that the backward reads: the
  // activations kept alive between the two halves (the forward's extra
  // outputs, plus forward outputs the backward also reads).
  int64_t saved_bytes;
  int32_t num_saved;
  // Of those, the bytes that were forward outputs anyway.
  int64_t saved_output_bytes;
  // Forward inputs the backward reads again.
  int64_t saved_input_bytes;
  int32_t num_saved_inputs;
  // Forward nodes (constants not counted) the backward computes again.
  int32_t num_recomputed;
} tj_partition_stats_t;

// Splits |joint| (finalized; e.g. from tj_graph_grad) into a forward and a
// backward graph, both new, finalized and owned by the caller. Its first
// |num_primal_inputs| inputs are the forward's inputs and the rest are
// tangents; its first |num_forward_outputs| outputs are the forward's and
// the rest are gradients. The joint graph is first cleaned up (CSE, DCE);
// then a minimum cut on bytes chooses which forward values to save, the
// rest of what the backward needs being recomputed from them (after
// torch's min-cut rematerialization partitioner), as |options| allow (NULL
// for the defaults).
//
//   forward   inputs: the primal inputs. Outputs: the forward outputs (same
//             names), then each saved value that is neither an input nor
//             a forward output, named "saved_<k>".
//   backward  inputs: the saved values, in the joint graph's node order,
//             each named after where the caller gets it (the forward input
//             or forward output of that name), then the tangents (same
//             names). Outputs: the gradients (same names).
//
// |out_stats| may be NULL. On failure both graphs are NULL and the stats
// zeroed. INVALID_ARGUMENT when the counts do not fit |joint| or a forward
// output depends on a tangent.
TJ_API tj_status_t tj_graph_partition(const tj_graph_t* joint,
                                      int32_t num_primal_inputs,
                                      int32_t num_forward_outputs,
                                      const tj_partition_options_t* options,
                                      tj_graph_t** out_forward,
                                      tj_graph_t** out_backward,
                                      tj_partition_stats_t* out_stats);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TENSORJIT_TJ_AUTODIFF_H_
