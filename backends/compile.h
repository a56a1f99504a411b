// The compile driver's internal entry points (backends/compile.c), for the
// driver-layer files that name one target (backends/target_entry.c). The
// backends never include this: they sit below the driver.

#ifndef TJ_BACKENDS_COMPILE_H_
#define TJ_BACKENDS_COMPILE_H_

#include "backends/runtime/backend.h"

// tj_compile with |backend| opened with |arg| (tj_backend_config_t.arg).
tj_status_t tj_compile_with_backend(const tj_graph_t* graph,
                                    const tj_compile_options_t* options,
                                    const tj_backend_t* backend,
                                    const void* arg,
                                    tj_executable_t** out_executable);

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

#endif  // TJ_BACKENDS_COMPILE_H_
