// The compile driver's internal entry points (backends/compile.c), for the
// driver-layer files that name one target (backends/target_entry.c). The
// backends never include this: they sit below the driver.

#ifndef TJ_BACKENDS_COMPILE_H_
#define TJ_BACKENDS_COMPILE_H_

#include "backends/runtime/backend.h"

// The backend of |executable|; its target and generic program in
// |*out_target| and |*out_program|. NULL executable: NULL.
const tj_backend_t* tj_executable_backend(const tj_executable_t* executable,
                                          void** out_target,
                                          void** out_program);

// Graph breaks of |executable| (run plan host steps).
uint32_t tj_executable_num_host_steps(const tj_executable_t* executable);

// tj_executable_run adding each step's time to |timing| (NULL: a plain
// run), for tj_executable_profile (backends/profile.c).
tj_status_t tj_executable_run_timed(
    tj_executable_t* executable, const tj_tensor_t* inputs, int32_t num_inputs,
    const tj_tensor_t* outputs, int32_t num_outputs, tj_run_timing_t* timing);

//===--- tj_verify's hooks (backends/verify.c) ---===//

// What a debug compile changes (tj_compile_debug): every field 0 or NULL
// changes nothing.
typedef struct tj_compile_debug_t {
  // The fuser's largest group (tj_pass_ctx_t.fuse_max_nodes); 1: no fusion
  // (every node its own kernel, generators aside). 0: the default.
  uint32_t fuse_max_nodes;
  // Called with each fusion group's |count| freshly lowered kernels of the
  // generic program while the run plan is built, before the backend
  // accepts them (CUDA emits a group when it accepts it), so that on every
  // target the backend takes what the hook left. May rewrite them (the
  // test hook that plants a wrong kernel, backends/verify.h). UNSUPPORTED
  // makes the group a host step (as the backend's refusal does); another
  // status fails the compile.
  tj_status_t (*lowered)(void* user, uint32_t group,
                         tj_lowered_kernel_t* kernels, uint32_t count);
  void* user;
  // The constant evaluator of the passes (folding) instead of the
  // reference interpreter's; kept by the executable (tj_executable_evaluator)
  // so that tj_verify replays the passes with it. The test hook that plants
  // a wrong pass result (backends/verify.h).
  tj_pass_eval_fn evaluate;
  // The test hook that plants a wrong rewrite (tj_pass_ctx_t.test_rule),
  // kept by the executable like |evaluate| for tj_verify's replays.
  tj_status_t (*test_rule)(void* user, tj_rewriter_t* rw, uint32_t src_node,
                           const uint32_t* operands, uint32_t* out);
  void* test_rule_user;
  // The default pipeline over every node even of a repeated-block graph
  // (tj_pass_ctx_t.region_template off): what region templates must equal.
  bool no_region_template;
  // The default pipeline without quant_matmul (tj_pass_ctx_t.quant_matmul
  // off): the float matmul of dequantized operands, what the fold must equal.
  bool no_quant_matmul;
} tj_compile_debug_t;

// tj_compile with |debug| (NULL: as tj_compile).
tj_status_t tj_compile_debug(const tj_graph_t* graph,
                             const tj_compile_options_t* options,
                             const tj_compile_debug_t* debug,
                             tj_executable_t** out_executable);

// tj_compile_debug with |backend| opened with |arg|
// (tj_backend_config_t.arg; the offline CUDA program,
// backends/cuda/cuda_entry.h).
tj_status_t tj_compile_with_backend(const tj_graph_t* graph,
                                    const tj_compile_options_t* options,
                                    const tj_backend_t* backend,
                                    const void* arg,
                                    const tj_compile_debug_t* debug,
                                    tj_executable_t** out_executable);

// tj_executable_run, calling |observe| after every step of the run plan
// (tj_step_observer_fn). UNSUPPORTED for a target that cannot (CUDA) or
// that has no steps (the reference target).
tj_status_t tj_executable_run_observed(tj_executable_t* executable,
                                       const tj_tensor_t* inputs,
                                       int32_t num_inputs,
                                       const tj_tensor_t* outputs,
                                       int32_t num_outputs,
                                       tj_step_observer_fn observe, void* user);

// The passes' constant evaluator |executable| was compiled with.
tj_pass_eval_fn tj_executable_evaluator(const tj_executable_t* executable);

// The run plan of |executable| (its graph, groups and steps); borrowed.
const tj_run_plan_t* tj_executable_run_plan(const tj_executable_t* executable);

#endif  // TJ_BACKENDS_COMPILE_H_
