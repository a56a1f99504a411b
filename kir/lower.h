// Fusion group -> kernel IR (kir/lower.c): the bridge from the middle
// end's groups (lib/passes/fusion.h) to the kernel templates
// (kir/kernel_ir.h), the same for every target that compiles kernel IR
// (x86 and CUDA).
//
// Every value a kernel reads or writes lives in memory densely, row-major,
// in the shape of its node (graph inputs are staged there when the caller's
// tensor is strided). A kernel buffer is such a node plus an element offset
// (a slice start); its per-dim strides are what the index mapping through
// broadcasts, transposes, slices and reshapes makes of the row-major
// strides. Sizes, strides and offsets that depend on the graph's symbols are
// dims of the graph's dim table, evaluated per run into the kernel's scalar
// params: one kernel serves every value of the symbols.

#ifndef TJ_KIR_LOWER_H_
#define TJ_KIR_LOWER_H_

#include "kir/kernel_ir.h"
#include "lib/passes/fusion.h"
#include "lib/passes/memplan.h"

typedef struct tj_lowered_kernel_t {
  tj_kir_t* kernel;  // finalized; owned
  // Scalar param i of the kernel is the value of dim |params|[i] of the
  // graph (a symbolic dim; constant dims never become params).
  uint32_t num_params;
  int64_t params[TJ_KIR_MAX_PARAMS];
  // Buffer i of the kernel is the storage of node |buffer_nodes|[i] advanced
  // by |buffer_offsets|[i] elements (a dim: constant or symbolic).
  uint32_t num_buffers;
  uint32_t buffer_nodes[TJ_KIR_MAX_BUFFERS];
  int64_t buffer_offsets[TJ_KIR_MAX_BUFFERS];
  // A run-time precondition: dim |nonempty_dim| must not be 0 (argmax of an
  // empty axis is an error, as in the reference). UINT32_MAX: none.
  uint32_t nonempty_node;
  int64_t nonempty_dim;
} tj_lowered_kernel_t;

// Lowers group |group| of |fusion| (over |graph|) to kernels named |name|
// (a C identifier): one kernel, except for pointwise groups with pad or
// concat, which become one kernel per box of the output in which each pad
// and concat takes one branch (named |name|_b<i>). At most |max_out|
// kernels go to |out|; |*out_count| says how many (0 when every box is
// empty). POINTWISE, REDUCTION, MATMUL and the OPAQUE argmax lower; VIEW
// groups have no kernel.
//
// With |symbol_values| NULL the kernel is generic: every symbolic size is a
// param, and the expressions its strides and offsets need are added to
// |graph|'s dim table (so the caller must own |graph| and not run it on
// other threads meanwhile). With |symbol_values| (by symbol id) the kernel
// is specialized to them: every size is a constant, there are no params,
// and |graph| is only read.
//
// |memplan| (may be NULL) lets the lowering check that a value written in
// place of an input is read at the index it is written.
//
// Returns UNSUPPORTED with the reason when the group has no kernel IR form
// (pad or concat inside a kernel, a reshape the iteration space cannot
// follow, a matmul of f64 or integers, gather, ...): the caller then runs the
// group another way. OUT_OF_MEMORY and INTERNAL are real failures. Nothing is
// left in |out| on failure.
tj_status_t tj_lower_group(tj_graph_t* graph, const tj_fusion_t* fusion,
                           const tj_memplan_t* memplan, uint32_t group,
                           const int64_t* symbol_values,
                           tj_allocator_t allocator, const char* name,
                           tj_lowered_kernel_t* out, uint32_t max_out,
                           uint32_t* out_count);

// The most kernels one group lowers to.
#define TJ_LOWER_MAX_GROUP_KERNELS 64

// Destroys the kernel and clears |lowered|. Idempotent.
void tj_lowered_kernel_deinitialize(tj_lowered_kernel_t* lowered);

#endif  // TJ_KIR_LOWER_H_
