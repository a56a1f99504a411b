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
// dims: expressions over the graph's symbols, evaluated per run into the
// kernel's scalar params (tj_lowered_kernel_scalars), so one kernel serves
// every value of the symbols. Those expressions live in a small dim table
// that the lowered kernel owns: lowering only reads the graph.

#ifndef TJ_KIR_LOWER_H_
#define TJ_KIR_LOWER_H_

#include "kir/kernel_ir.h"
#include "lib/passes/fusion.h"
#include "lib/passes/memplan.h"

typedef struct tj_lowered_kernel_t {
  tj_kir_t* kernel;  // finalized; owned
  // The dims below are constants (>= 0) or expressions (<= -2) of |dims|, a
  // dim table of the kernel's own whose symbol i is the graph's symbol i
  // (lib/shape.h). Owned; NULL when every one of them is a constant. Read
  // them through the functions below, never through the graph's table.
  tj_dimtab_t* dims;
  // Scalar param i of the kernel is the value of |param_dims|[i] (a
  // symbolic dim; constant dims never become params).
  uint32_t num_params;
  int64_t param_dims[TJ_KIR_MAX_PARAMS];
  // Buffer i of the kernel is the storage of node |buffer_nodes|[i] advanced
  // by |buffer_offset_dims|[i] elements.
  uint32_t num_buffers;
  uint32_t buffer_nodes[TJ_KIR_MAX_BUFFERS];
  int64_t buffer_offset_dims[TJ_KIR_MAX_BUFFERS];
  // A run-time precondition: |nonempty_extent| (a dim) must not be 0 (argmax
  // of an empty axis is an error, as in the reference; so is a gather from
  // an empty axis when the gather's result has elements). |nonempty_node|
  // is the argmax or gather; UINT32_MAX: no precondition.
  uint32_t nonempty_node;
  int64_t nonempty_extent;
  // Region compile (kir/lower_reuse.c): a copy of an equal group's kernel
  // borrows that kernel's instructions (tj_kir_borrow) and |dims|, so the
  // kernel it copies (in the same array, freed with it) must outlive it;
  // false for a kernel lowered. |code_of| is the kernel IR of the kernel
  // lowered whose code this one's is (tj_kir_same_code holds; a copy of a
  // copy names the first), NULL when lowered: a kernel set finds its
  // distinct kernels by it without comparing.
  bool borrowed;
  const tj_kir_t* code_of;
  // Bit b: buffer b is an input read at the offset and strides every output
  // buffer is written at, so that the memory plan may write an output in
  // place of its node (lowering's in-place check holds). 0 where the kernel
  // was not lowered by boxes (no input known to be so). A copy for a group
  // whose outputs overwrite other inputs than its source's (block 0 reads
  // a graph input, block 1 block 0's value) is made only where this allows
  // it (tj_lower_group_copy).
  uint64_t index_aligned;
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
// param, and the expressions of the graph's symbols that its params and
// buffer offsets stand for go to the lowered kernel's own dim table. With
// |symbol_values| (by symbol id) the kernel is specialized to them: every
// size is a constant and there are no params. Either way |graph| is only
// read, so several threads may lower groups of one graph at once.
//
// |memplan| (may be NULL) lets the lowering check that a value written in
// place of an input is read at the index it is written.
//
// Returns UNSUPPORTED with the reason when the group has no kernel IR form
// (pad or concat inside a kernel, a reshape the iteration space cannot
// follow, a matmul of f64 or integers, ...): the caller then runs the
// group another way. OUT_OF_MEMORY and INTERNAL are real failures. Nothing is
// left in |out| on failure.
tj_status_t tj_lower_group(const tj_graph_t* graph, const tj_fusion_t* fusion,
                           const tj_memplan_t* memplan, uint32_t group,
                           const int64_t* symbol_values,
                           tj_allocator_t allocator, const char* name,
                           tj_lowered_kernel_t* out, uint32_t max_out,
                           uint32_t* out_count);

// Region compile (kir/lower_reuse.c). A hash of what lowering reads of
// group |group|: equal groups hash equal. The memory plan's in-place
// choices are not in it: lowering's code does not depend on them (only
// its check does, which tj_lower_group_copy makes for a copy).
uint64_t tj_lower_group_hash(const tj_graph_t* graph, const tj_fusion_t* fusion,
                             uint32_t group);
// Whether groups |a| and |b| lower to the same kernels up to their names
// and nodes (a block repeated with other weights), but for the in-place
// check: which input each output overwrites may differ
// (tj_lower_group_copy checks it).
bool tj_lower_group_same(const tj_graph_t* graph, const tj_fusion_t* fusion,
                         uint32_t a, uint32_t b);
// The |count| kernels group |from| lowered to (|kernels|, named
// |from_name|...) as group |to|'s, equal to it by tj_lower_group_same: the
// same code named |to_name|..., buffers on |to|'s nodes, to |out|. The
// copies borrow |kernels|' instructions and dim tables (borrowed, code_of
// above): |kernels| must outlive them. UNSUPPORTED when a kernel does not
// copy (then lower |to| itself), among them an output of |to| that
// |memplan| (may be NULL) writes in place of an input which |from|'s
// output did not overwrite and which the kernel does not read at the
// output's index (index_aligned); on failure |out| holds nothing.
tj_status_t tj_lower_group_copy(const tj_graph_t* graph,
                                const tj_fusion_t* fusion,
                                const tj_memplan_t* memplan, uint32_t from,
                                uint32_t to, const char* from_name,
                                const char* to_name,
                                const tj_lowered_kernel_t* kernels,
                                uint32_t count, tj_lowered_kernel_t* out);

// The most kernels one group lowers to.
#define TJ_LOWER_MAX_GROUP_KERNELS 64

// Destroys the kernel and the dim table and clears |lowered|. Idempotent;
// a zeroed tj_lowered_kernel_t is valid (nothing to free).
void tj_lowered_kernel_deinitialize(tj_lowered_kernel_t* lowered);

// The run-time values of |lowered|'s scalar params (|num_params| of them go
// to |out_scalars|) when symbol i of |graph| (the graph lowered) has value
// |symbol_values|[i], and the check of its precondition: INVALID_ARGUMENT
// naming the argmax and its input's shape when its axis is empty, or naming
// an unbound symbol or an overflow. Every runtime calls this before a launch.
tj_status_t tj_lowered_kernel_scalars(const tj_lowered_kernel_t* lowered,
                                      const tj_graph_t* graph,
                                      const int64_t* symbol_values,
                                      int64_t* out_scalars);

// The element offset of buffer |buffer| of |lowered| under |symbol_values|.
tj_status_t tj_lowered_kernel_buffer_offset(const tj_lowered_kernel_t* lowered,
                                            uint32_t buffer,
                                            const int64_t* symbol_values,
                                            int64_t* out_elements);

// Writes dim |dim| of |lowered| as text ("4096", "B*S") like tj_dim_format.
int tj_lowered_kernel_format_dim(const tj_lowered_kernel_t* lowered,
                                 int64_t dim, char* buf, size_t size);

#endif  // TJ_KIR_LOWER_H_
