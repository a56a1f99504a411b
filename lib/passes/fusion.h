// Fusion groups: the contract between the middle end (lib/passes/fuse.c
// makes them) and a backend (compiles each group to one kernel) and the
// memory planner (lib/passes/memplan.c places each group's outputs).
//
// A group is a set of nodes of the plan's graph computed by one kernel. It
// reads its |inputs| from memory (graph inputs, constants, outputs of
// earlier groups) and writes its |outputs| to memory; every other node of
// the group lives only in registers. A node may belong to several groups
// when fusion chose to recompute it instead of materializing it (cheap
// pointwise producers with users in several kernels); it is then an output
// of none of them. Groups are listed in a valid execution order.
//
// What a backend may assume, per kind (fuse.c's classify() enforces it and
// tj_fusion_verify re-checks it):
//
//   POINTWISE   Elementwise ops, casts, generators (full, iota) and
//               injective movement (broadcast_to, transpose, slice, pad,
//               concat, reshape). Iteration space: the shape of its
//               outputs, which all have that one shape. Any node is
//               evaluated at an output index by mapping the index back
//               through the movement ops.
//   REDUCTION   One or more reductions (sum, mean, max, min, prod) over the
//               same axes of the same input shape F, plus a prologue (nodes
//               feeding them, evaluated in F) and an epilogue. Every node
//               that depends on a reduction of the group is elementwise and
//               shaped F or the outer shape O (F with the reduced axes 1 or
//               dropped), so the kernel runs per outer index: the
//               reductions in dependence order (e.g. softmax: max, then the
//               sum of exp(x - max)), then the epilogue over the reduced
//               axes again. Outputs are shaped F or O.
//   MATMUL      One matmul (anchor) plus an epilogue: elementwise nodes that
//               depend on it, all shaped like its output (bias add, gelu
//               chain, residual add, cast), plus their non-dependent
//               operands (any pointwise chain, e.g. on the bias). The
//               matmul's operands are read from memory, directly or through
//               one transpose of a value in memory (a strided load, listed
//               in |nodes|). Outputs are shaped like the matmul output.
//               swiglu (issue 14): where the target said yes
//               (tj_pass_ctx_t.dual_gemm), two matmuls of the same A
//               and B matrices of one shape and dtype (both read from
//               memory, or both through the same transpose), the anchor
//               the first; the epilogue may read both (a dual GEMM).
//   OPAQUE      One node compiled alone (gather, argmax, a composite no
//               pass decomposed). Its operands are read from memory. A conv
//               (anchor) may carry an epilogue of elementwise nodes shaped
//               like its output, as a MATMUL group does (issue 15: x86's
//               CONV template stores through it).
//   VIEW        Only reshapes of a value in memory: no kernel; the output
//               aliases the input's storage (the memory plan says so).
//
// |nodes| are ascending node indices, which is a valid evaluation order.

#ifndef TJ_LIB_PASSES_FUSION_H_
#define TJ_LIB_PASSES_FUSION_H_

#include "lib/arena.h"
#include "lib/passes/pass.h"

#define TJ_GROUP_NONE UINT32_MAX

typedef enum tj_group_kind_e {
  TJ_GROUP_POINTWISE,
  TJ_GROUP_REDUCTION,
  TJ_GROUP_MATMUL,
  TJ_GROUP_OPAQUE,
  TJ_GROUP_VIEW,
} tj_group_kind_t;

// "pointwise", "reduction", "matmul", "opaque", "view".
const char* tj_group_kind_name(tj_group_kind_t kind);

typedef struct tj_group_t {
  tj_group_kind_t kind;
  // The node that defines the iteration space: the matmul, the first
  // reduction, the opaque node, or (pointwise, view) the last output.
  uint32_t anchor;
  uint32_t num_nodes;
  uint32_t* nodes;  // ascending
  uint32_t num_inputs;
  uint32_t* inputs;  // ascending; nodes outside the group it reads
  uint32_t num_outputs;
  uint32_t* outputs;  // ascending; nodes of the group it writes
} tj_group_t;

struct tj_fusion_t {
  tj_arena_t arena;    // every array below
  uint32_t num_nodes;  // of the graph the groups index
  uint32_t num_groups;
  tj_group_t* groups;  // in execution order
  // Per node: the group that writes it to memory, or TJ_GROUP_NONE (inputs,
  // constants, recomputed-only nodes, dead nodes).
  uint32_t* producer;
  // rope14 (issue 14): lowering cuts every concat into boxes, never one
  // select (tj_pass_ctx_t.concat_boxes; kir/lower_select.c).
  bool concat_boxes;
  // Region compile (issue 16, region12): NULL, or per group the earlier
  // group it was copied from, TJ_GROUP_NONE for the others. Only the region
  // stitching (lib/passes/region.c) sets it, for the groups of blocks 3..,
  // each made from block 2's group with its nodes copied from the same node
  // templates, every node and operand of the block moved by one distance
  // and block 2's weights replaced by the block's own of the same type: the
  // two groups are equal as lowering reads them (tj_lower_group_same holds,
  // region_compile_test checks it), so the run plan copies without
  // comparing them. A fusion fuse makes has none.
  uint32_t* copy_of;
};

void tj_fusion_destroy(tj_fusion_t* fusion);

// Checks the invariants above against |graph|: INTERNAL on a violation.
tj_status_t tj_fusion_verify(const tj_fusion_t* fusion,
                             const tj_graph_t* graph);

// Number of groups that launch a kernel (all but VIEW).
uint32_t tj_fusion_num_kernels(const tj_fusion_t* fusion);

// Grouped text form: the graph with each group printed as one fused node
// whose body holds its nodes (lib/passes/fusion_print.c). Owned string.
tj_status_t tj_fusion_print(const tj_fusion_t* fusion, const tj_graph_t* graph,
                            char** out_text);
// Graphviz: one cluster per group. Owned string.
tj_status_t tj_fusion_dot(const tj_fusion_t* fusion, const tj_graph_t* graph,
                          char** out_text);

#endif  // TJ_LIB_PASSES_FUSION_H_
