// backends/runtime/reference_backend.c: the reference target of the
// compile driver (tj_backend_reference, backends/runtime/backend.h), for
// checking: the simplest implementation of the interface, beside it
// because the interpreter (backends/reference) sits below the interface
// (the run plan's graph breaks use it). The program is the caller's graph as it
// was given (copied by the driver, no pass pipeline), run by the interpreter on
// every call, which checks the arguments itself. Nothing is lowered, so nothing
// specializes.

#include "backends/reference/reference_eval.h"
#include "backends/runtime/backend.h"

static tj_status_t reference_compile(void* target, tj_lowered_program_t* lp,
                                     void** out_program) {
  *out_program = lp->plan->graph;  // borrowed: the executable owns it
  return NULL;
}

static tj_status_t reference_run(void* target, void* program,
                                 const int64_t* sym, const tj_tensor_t* inputs,
                                 int32_t num_inputs, const tj_tensor_t* outputs,
                                 int32_t num_outputs) {
  // The driver checked the outputs (tj_custom_check_outputs); under
  // tj_executable_run_shaped their shape arrays are its own.
  return tj_reference_run_own_shapes(program, inputs, num_inputs, outputs,
                                     num_outputs);
}

const tj_backend_t tj_backend_reference = {
    .name = "reference",
    .lowers = false,
    .device_tensors = false,
    .target_size = 0,  // no state
    .open = NULL,
    .accept = NULL,
    .compile = reference_compile,
    .run = reference_run,
    .prepare = NULL,
    .release = NULL,  // the program is the executable's graph
    .close = NULL,
};
