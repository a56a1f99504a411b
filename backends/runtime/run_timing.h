// Per-step timing of runs, for tj_executable_profile (backends/profile.c):
// what a backend's run_timed (backend.h) adds up while it runs a program,
// and the traffic and arithmetic of one launch of a lowered kernel.

#ifndef TJ_BACKENDS_RUNTIME_RUN_TIMING_H_
#define TJ_BACKENDS_RUNTIME_RUN_TIMING_H_

#include "kir/lower.h"

// One kernel of the program that ran, summed over the timed runs.
typedef struct tj_run_kernel_timing_t {
  const char* name;  // the kernel IR name, borrowed from the program
  tj_kir_kind_t kind;
  double ms;         // launch to completion (x86: across the parallel region)
  int64_t launches;  // launches that did work
  double bytes;      // tj_kernel_traffic per launch, summed
  double flops;
} tj_run_kernel_timing_t;

// Everything one profile accumulates. The driver allocates the arrays
// (|num_kernels| of the run plan, |num_host_steps| of its HOST steps)
// zeroed; the backend adds to them.
typedef struct tj_run_timing_t {
  uint32_t num_kernels;
  tj_run_kernel_timing_t* kernels;
  uint32_t num_host_steps;
  double* host_ms;  // per HOST step of the run plan, in plan order (graph
                    // breaks, with their device copies on CUDA)
  double copy_ms;   // staging of inputs and outputs, host <-> device copies
  double setup_ms;  // memory plan, kernel params, frames, argument tables
  double whole_ms;  // a backend without run_timed: its whole runs
  bool graphs_disabled;  // CUDA: the profiled runs launched kernel by kernel
} tj_run_timing_t;

// Bytes one launch of |low| moves (each buffer's elements counted once:
// the product of the space dims along which its stride is not 0, times its
// element size; GEMM operands over [batch.., M, K] and [batch.., K, N]) and
// the arithmetic it does (GEMM: 2*M*N*K per batch plus the epilogue; other
// templates: one op per instruction of kind OP per point, plus one combine
// per reduced element), for the scalar params |scalars|.
void tj_kernel_traffic(const tj_kir_t* kernel, const int64_t* scalars,
                       double* out_bytes, double* out_flops);

#endif  // TJ_BACKENDS_RUNTIME_RUN_TIMING_H_
