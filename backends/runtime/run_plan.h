// The run plan: what the driver (backends/compile.c) hands every backend
// after the middle end. The plan graph with its fusion groups and memory
// plan, and one step per fusion group, in order:
//
//   VIEW     no work: the value aliases its input (memplan);
//   KERNELS  lowered kernels [first_kernel, +num_kernels) of the program;
//   HOST     a graph break: the group's subgraph run on the reference
//            semantics between the compiled kernels (tj_host_step_run);
//            or, when |host.call| is set, a host call: a custom op's group
//            (one node) calling its registered implementation directly,
//            with no interpreter (counted in num_host_calls, not as a
//            graph break); or, when |host.native| is set, a native host
//            kernel: an argtopk group (one node) no template lowers, run
//            by argtopk's C kernel (host_topk.h; counted in
//            num_host_kernels, not as a graph break; TJ_NATIVE_TOPK=off
//            makes it a graph break again). Backends run all three
//            through tj_host_step_run.
//
// Built once per executable by lowering every group (tj_lower_group); a
// specialization lowers the same KERNELS steps again for fixed symbol
// values (tj_run_plan_lower) into the same number of kernels, so that the
// steps serve every program of the executable.

#ifndef TJ_BACKENDS_RUNTIME_RUN_PLAN_H_
#define TJ_BACKENDS_RUNTIME_RUN_PLAN_H_

#include "backends/runtime/host_topk.h"
#include "kir/lower.h"
#include "lib/passes/pass.h"

typedef enum tj_run_step_kind_e {
  TJ_RUN_STEP_VIEW = 0,
  TJ_RUN_STEP_KERNELS = 1,
  TJ_RUN_STEP_HOST = 2,
} tj_run_step_kind_t;

// A graph break's subgraph.
typedef struct tj_host_step_t {
  // A host call: the custom op (lib/custom_op.h) and its plan node; |graph|
  // is then NULL, |extra| the operands computed by earlier steps (not
  // inputs nor constants) and |outputs| the node. NULL for a graph break.
  const struct tj_custom_op_t* call;
  // A native host kernel (argtopk): |call_node| is its plan node, |graph|
  // NULL, |extra| and |outputs| as for a host call.
  bool native;
  uint32_t call_node;
  tj_graph_t* graph;  // the plan graph's inputs, then |extra|, then the nodes
  uint32_t num_extra;
  uint32_t* extra;  // plan nodes read from memory as extra inputs
  uint32_t num_outputs;
  uint32_t* outputs;                // plan nodes written
  bool* in_place;                   // per output: shares storage with an input
  uint32_t cap_extra, cap_outputs;  // allocated lengths
} tj_host_step_t;

typedef struct tj_run_step_t {
  tj_run_step_kind_t kind;
  uint32_t group;
  uint32_t first_kernel, num_kernels;  // KERNELS
  tj_host_step_t host;                 // HOST
} tj_run_step_t;

typedef struct tj_run_plan_t {
  tj_context_t* context;
  tj_allocator_t allocator;
  tj_graph_t* graph;  // the plan graph (owned by the executable's plan)
  const tj_fusion_t* fusion;
  const tj_memplan_t* memplan;
  int32_t* first_output;  // per plan node: the first graph output it is, or -1
  tj_run_step_t* steps;   // one per fusion group
  uint32_t num_steps;
  uint32_t num_kernels;       // of every program
  uint32_t num_host_steps;    // graph breaks
  uint32_t num_host_calls;    // custom ops' host calls
  uint32_t num_host_kernels;  // native host kernels (argtopk)
  // Region compile: KERNELS groups lowered from the graph, and those that
  // took a copy of an equal group's kernels instead (kir/lower_reuse.c).
  uint32_t num_lowered_groups;
  uint32_t num_copied_groups;
} tj_run_plan_t;

// Called with the |count| freshly lowered kernels of fusion group |group|
// (borrowed) before anything takes them: may rewrite them (the driver's
// test hook, backends/compile.h) and says whether the target takes them;
// UNSUPPORTED makes the group a host step, another status fails the build.
// NULL: every group that lowers is taken as lowered.
typedef tj_status_t (*tj_run_plan_accept_fn)(void* user, uint32_t group,
                                             tj_lowered_kernel_t* kernels,
                                             uint32_t count);

// Builds |rp| for |plan| (after fuse and memplan): lowers every group
// once, generic (with |copy_equal|, a group equal to one lowered before
// takes a copy of its kernels: tj_lower_group_same; off when |accept| may
// rewrite kernels, which a copy would repeat); a group that does not lower, or
// that |accept| refuses, becomes a host step (logged under TJ_LOG=graph_breaks,
// and every kernel under TJ_LOG=fusion, per |log| flags). The kernels go to
// |*out_kernels| (an array of exactly rp->num_kernels, NULL when 0; free it
// with tj_run_plan_free_kernels). On failure |rp| holds nothing to free beyond
// tj_run_plan_deinitialize.
tj_status_t tj_run_plan_build(tj_run_plan_t* rp, tj_context_t* context,
                              tj_allocator_t allocator, tj_plan_t* plan,
                              uint32_t log, bool copy_equal,
                              tj_run_plan_accept_fn accept, void* accept_user,
                              tj_lowered_kernel_t** out_kernels);

// The kernels of every KERNELS step lowered again for symbol values |sym|
// (exact shapes: every size a constant), in the same order and number; a
// group equal to one lowered before copies its kernels, as above.
// UNSUPPORTED when a group lowers differently. |*out_kernels| as above.
tj_status_t tj_run_plan_lower(const tj_run_plan_t* rp, const int64_t* sym,
                              tj_lowered_kernel_t** out_kernels);

// Deinitializes and frees |num| kernels made by the calls above.
void tj_run_plan_free_kernels(tj_allocator_t allocator,
                              tj_lowered_kernel_t* kernels, uint32_t num);

// Frees everything |rp| owns (not the plan graph). Idempotent.
void tj_run_plan_deinitialize(tj_run_plan_t* rp);

// Runs host step |h| of a run plan over |graph| (the plan graph) on the
// reference semantics, on the host: |inputs| (CPU tensors, one per graph
// input) bind the symbols |sym|, |loc| gives the host storage of every
// plan node the step reads (extra) and writes (outputs), dense row-major.
// An output written in place of an input goes through a temporary (the
// interpreter may still read what it overwrites). Temporaries come from
// |allocator|. A host call runs the custom op's implementation instead,
// graph inputs read from |inputs| and constants from the plan graph; a
// native host kernel likewise, its rows spread by |parallel| (NULL: on
// the calling thread).
tj_status_t tj_host_step_run(const tj_graph_t* graph, tj_allocator_t allocator,
                             const tj_host_step_t* h, const int64_t* sym,
                             const tj_tensor_t* inputs,
                             unsigned char* const* loc,
                             const tj_host_parallel_t* parallel);

// tj_host_step_run for a target that runs data-dependent shapes (custom
// ops with tj_custom_dynamic_dim; tj_host_step_run refuses them): a host
// call whose op reported its actual output dims sets their symbols in
// |sym| for the steps after it.
tj_status_t tj_host_step_run_dynamic(const tj_graph_t* graph,
                                     tj_allocator_t allocator,
                                     const tj_host_step_t* h, int64_t* sym,
                                     const tj_tensor_t* inputs,
                                     unsigned char* const* loc,
                                     const tj_host_parallel_t* parallel);

#endif  // TJ_BACKENDS_RUNTIME_RUN_PLAN_H_
