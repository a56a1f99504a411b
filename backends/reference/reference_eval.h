// The constant evaluator that the drivers and tools install in
// tj_pass_ctx_t.evaluate (lib/passes/pass.h): constant folding runs its
// mini-graphs on the reference interpreter, so folding can never disagree
// with it. lib/ only knows the tj_pass_eval_fn hook; this is the one place
// that points the hook at tj_reference_run (tests/check_layering.py keeps
// lib/ from reaching backends/ by include or by symbol).

#ifndef TJ_BACKENDS_REFERENCE_REFERENCE_EVAL_H_
#define TJ_BACKENDS_REFERENCE_REFERENCE_EVAL_H_

#include "lib/passes/pass.h"

// A tj_pass_eval_fn: runs |graph| (no inputs) with tj_reference_run and
// writes its outputs densely into |outputs|. |user_data| is unused.
tj_status_t tj_pass_reference_evaluator(void* user_data,
                                        const tj_graph_t* graph,
                                        void* const* outputs);

// tj_reference_run for a caller whose outputs' shape arrays are its own
// and already checked (the reference target under tj_executable_run_shaped):
// data-dependent dims are written into them.
tj_status_t tj_reference_run_own_shapes(const tj_graph_t* graph,
                                        const tj_tensor_t* inputs,
                                        int32_t num_inputs,
                                        const tj_tensor_t* outputs,
                                        int32_t num_outputs);

#endif  // TJ_BACKENDS_REFERENCE_REFERENCE_EVAL_H_
