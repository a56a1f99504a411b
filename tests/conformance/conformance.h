// The backend conformance suite (STYLE.md §11, IREE's CTS): ONE test body
// per op and feature, compiled into one test program per backend
// (tests/unit/x86_conformance_test.c, tests/cuda/cuda_conformance_test.c).
// Every case is a small graph with a symbolic batch B, compiled once and
// run at several B from that one executable (no recompiles), compared with
// tj_reference_run within a stated tolerance:
//
//   |got - want| <= atol + rtol * |want|; NaN matches NaN, inf the same
//   inf; ints and bools exactly.
//   f32  simple ops 1e-6 rel (one f32 rounding away from the reference's
//        double-then-round), transcendentals 4e-6 rel (a few ulp,
//        jit/vecmath.h, jit/nvptx_math.h), reductions and matmuls 1e-5 to
//        2e-5 rel plus an absolute term (f32 accumulation vs f64),
//        composites 2e-5 to 5e-5;
//   f16  2e-3 / 1e-3 and bf16 1.6e-2 / 1e-2 (2 ulp) for one op; composites
//        4 ulp (4e-3, 3.2e-2): the reference rounds every op of their
//        decomposition to the dtype, kernels keep f32 inside a fused group
//        (kir/kernel_ir.h); f64 1e-13 rel.
//
// A backend names what it cannot do yet in a skip list, and the cases
// whose kernel or graph-break counts differ from the portable expectation
// (a group that runs on the host instead) in an expectation list, each
// entry with its reason. Backends with device memory also run the cases
// marked for layouts with device tensors, and every backend runs them with
// strided tensors (reversed, padded, transposed, zero-stride broadcast
// inputs; an offset into the allocation), checking too that no byte outside
// an output's elements is written.

#ifndef TJ_TESTS_CONFORMANCE_CONFORMANCE_H_
#define TJ_TESTS_CONFORMANCE_CONFORMANCE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorjit.h"

#define TJ_CTS_MAX_IO 8

typedef struct tj_cts_tol_t {
  double rtol, atol;
} tj_cts_tol_t;

// A case the backend skips, and why. |pattern| is a case name; a trailing
// '*' matches any suffix ("tanh_f64*").
typedef struct tj_cts_skip_t {
  const char* pattern;
  const char* reason;
} tj_cts_skip_t;

// Kernel and graph-break counts the backend has instead of the case's own
// expectation (-1: not checked), and why.
typedef struct tj_cts_expect_t {
  const char* pattern;
  int kernels, breaks;
  const char* reason;
} tj_cts_expect_t;

// Device memory of a backend (NULL hooks: CPU tensors only). Each hook
// returns false after printing why.
typedef struct tj_cts_device_t {
  void* self;
  tj_device_type_t device_type;
  int32_t device_id;
  bool (*alloc)(void* self, size_t bytes, uint64_t* out_ptr);
  void (*free)(void* self, uint64_t ptr);
  bool (*upload)(void* self, uint64_t dst, const void* src, size_t bytes);
  bool (*download)(void* self, void* dst, uint64_t src, size_t bytes);
} tj_cts_device_t;

typedef struct tj_cts_backend_t {
  const char* name;
  tj_target_t target;
  tj_context_t* context;
  const tj_cts_skip_t* skips;      // {NULL, NULL}-terminated, or NULL
  const tj_cts_expect_t* expects;  // {NULL, ...}-terminated, or NULL
  const tj_cts_device_t* device;   // NULL: no device tensors
} tj_cts_backend_t;

// How a run passes its tensors.
typedef enum tj_cts_io_e {
  TJ_CTS_IO_HOST = 0,            // dense CPU tensors
  TJ_CTS_IO_HOST_STRIDED = 1,    // strided CPU tensors
  TJ_CTS_IO_DEVICE = 2,          // dense device tensors
  TJ_CTS_IO_DEVICE_STRIDED = 3,  // strided device tensors
} tj_cts_io_t;

typedef struct tj_cts_case_t {
  const char* name;
  tj_graph_t* g;
  int64_t B;  // the symbol
  double lo[TJ_CTS_MAX_IO], hi[TJ_CTS_MAX_IO];
  int num_inputs;
  tj_cts_tol_t tol;
  bool layouts;     // also run with device and strided tensors
  bool allow_tf32;  // tj_cuda_compile_options_t.allow_tf32
} tj_cts_case_t;

typedef struct tj_cts_report_t {
  int kernels, breaks;
} tj_cts_report_t;

// Checks and failures counted by the suite; the test program adds them to
// its own.
extern int tj_cts_checks, tj_cts_failures;

// Runs every group of the suite on |backend|, printing "ok - <group>" or
// "not ok - <group>" per group. Returns the number of failures.
int tj_cts_run_all(const tj_cts_backend_t* backend);
// The compile-only mode (CI without the backend's device): |fn| is given
// each case's finalized graph and the options the suite would compile it
// with, compiles it its own way (to PTX, say) and checks what it made;
// nothing runs. It returns false after printing why, else fills
// |out_report|, whose counts the suite checks against the case's (or the
// backend's) expectation as for a run.
typedef bool (*tj_cts_compile_fn)(void* self, const tj_cts_case_t* c,
                                  const tj_compile_options_t* options,
                                  tj_cts_report_t* out_report);
// tj_cts_run_all in compile-only mode: every case of every group (and
// only its host mode: the other layouts change nothing at compile time)
// goes to |fn| instead of tj_compile and runs.
int tj_cts_compile_all(const tj_cts_backend_t* backend, tj_cts_compile_fn fn,
                       void* self);
// Runs one group ("unary_ops", "half_matmuls", ...). False for an unknown
// name.
bool tj_cts_run_group(const tj_cts_backend_t* backend, const char* group);

//===--- the pieces, for backend-specific tests ---===//

void tj_cts_seed(uint64_t seed);
uint64_t tj_cts_rng_next(void);
void tj_cts_fill(tj_dtype_t dtype, void* data, int64_t n, double lo, double hi);
int64_t tj_cts_numel(int32_t rank, const int64_t* dims);
tj_cts_tol_t tj_cts_tol_for(tj_dtype_t dtype, double f32_rtol);
// Compares |n| elements; prints the first misses under |what|.
bool tj_cts_compare(const char* what, tj_dtype_t dtype, const void* got,
                    const void* want, int64_t n, tj_cts_tol_t tol);

// Starts case |name| (a graph in |backend|'s context with symbol B).
void tj_cts_begin(const tj_cts_backend_t* backend, tj_cts_case_t* c,
                  const char* name);
// An input "in<k>" whose random values lie in [lo, hi).
tj_value_t tj_cts_input(tj_cts_case_t* c, tj_dtype_t dtype, int32_t rank,
                        const int64_t* dims, double lo, double hi);
void tj_cts_output(tj_cts_case_t* c, tj_value_t value);
// Finalizes and compiles |c| with |options| and runs it at each of the
// |num_batches| values of B with tensors passed as |io|; compares every
// output with the reference. Fills |report| (may be NULL).
bool tj_cts_run_case(const tj_cts_backend_t* backend, tj_cts_case_t* c,
                     const tj_compile_options_t* options,
                     const int64_t* batches, int num_batches, tj_cts_io_t io,
                     tj_cts_report_t* report);
// Runs |c| as the suite does (skip list, every I/O mode the backend has,
// B = 0, 1, 7, 33, 257), checks |kernels| and |breaks| (or the backend's
// expectation) when >= 0, counts the result and destroys the graph.
void tj_cts_finish(const tj_cts_backend_t* backend, tj_cts_case_t* c,
                   int kernels, int breaks);

#endif  // TJ_TESTS_CONFORMANCE_CONFORMANCE_H_
