// backends/verify.h: tj_verify's internals (backends/verify.c) that the
// tools and tests use: run tensors made for a graph (random inputs with
// edge values, outputs of the right shapes), and the test hook that plants
// a wrong kernel.

#ifndef TJ_BACKENDS_VERIFY_H_
#define TJ_BACKENDS_VERIFY_H_

#include "backends/compile.h"
#include "tensorjit/tj_verify.h"

// Dense CPU tensors that own their memory (from |allocator|).
typedef struct tj_verify_tensors_t {
  tj_allocator_t allocator;
  int32_t count;
  tj_tensor_t* tensors;  // |count| descriptors
  int64_t* shapes;       // TJ_MAX_RANK per tensor
  void** data;
  size_t* bytes;
} tj_verify_tensors_t;

// Frees what |t| owns; zeroes it. Idempotent.
void tj_verify_tensors_deinitialize(tj_verify_tensors_t* t);

// Symbol values (by symbol id of |graph|, -1 unbound, TJ_MAX_SYMBOLS
// entries) from names: INVALID_ARGUMENT for a name that is not a symbol of
// |graph| or a negative value.
tj_status_t tj_verify_bind_names(const tj_graph_t* graph, int32_t num_symbols,
                                 const char* const* names,
                                 const int64_t* values, int64_t* out_sym);

// Random inputs of |graph| for symbol values |sym| (as tj_verify makes
// them, tj_verify_options_t says how). INVALID_ARGUMENT naming the input
// and the symbol when an input's dim needs an unbound symbol.
tj_status_t tj_verify_random_inputs(const tj_graph_t* graph, const int64_t* sym,
                                    uint64_t seed, bool edge_values,
                                    bool nonfinite, tj_verify_tensors_t* out);

// Zeroed outputs of |graph| for these inputs (tj_graph_output_shape).
tj_status_t tj_verify_make_outputs(const tj_graph_t* graph,
                                   const tj_tensor_t* inputs,
                                   int32_t num_inputs,
                                   tj_verify_tensors_t* out);

// The condition of every output of finalized |graph| on |inputs|: one f64
// tensor per output, of its shape, holding per element the sum of the
// magnitudes of the terms it is made of, carried through every op (a
// running error analysis on the reference interpreter; the rules are in
// backends/verify_condition.c). tj_verify's budget for an element is
// atol + rtol * max(condition, |want|). |rtol| (per dtype) is how far an
// operand may move within its budget. Integer and bool outputs get
// meaningless values (they are compared exactly).
tj_status_t tj_verify_conditions(const tj_graph_t* graph,
                                 const tj_tensor_t* inputs, int32_t num_inputs,
                                 const double* rtol, tj_verify_tensors_t* out);

// The test hook: a wrong kernel planted in an executable. Compiles |graph|
// like tj_compile, then, in the first kernel of fusion group |group| (the
// group's position in the run plan, not a VIEW or host step) changes the
// first elementwise op |from| into |to| (e.g. add into sub) before the
// backend accepts it. INVALID_ARGUMENT when that group has no such op, or
// when the backend then refuses the group (it runs on the host). With
// group TJ_VERIFY_PLANT_EVERY_GROUP (below) every |from| of every kernel
// becomes |to|, and no op to change is no error. Test-only: nothing in the
// library calls it.
tj_status_t tj_verify_test_compile_planted(const tj_graph_t* graph,
                                           const tj_compile_options_t* options,
                                           uint32_t group, tj_op_t from,
                                           tj_op_t to,
                                           tj_executable_t** out_executable);

// The ladder's test hook: tj_verify_ladder with random inputs, every
// compiled rung compiled by tj_compile_debug with |debug| (a planted wrong
// rewrite through debug->test_rule, which the decomposed rung's replays
// use too; a wrong kernel through debug->lowered, tj_verify_test_plant).
tj_status_t tj_verify_test_ladder(const tj_graph_t* graph,
                                  const tj_compile_options_t* options,
                                  const tj_compile_debug_t* debug,
                                  const tj_verify_options_t* verify_options,
                                  tj_ladder_report_t** out_report);

// The planted wrong kernel as a tj_compile_debug_t.lowered hook (|user| a
// tj_verify_plant_t): in the first kernel of group |group| the first op
// |from| becomes |to|; with group TJ_VERIFY_PLANT_EVERY_GROUP every |from|
// of every kernel does (a wrong kernel for one op, whatever the fusion).
#define TJ_VERIFY_PLANT_EVERY_GROUP UINT32_MAX
typedef struct tj_verify_plant_t {
  uint32_t group;
  tj_op_t from, to;
  bool planted;
} tj_verify_plant_t;
tj_status_t tj_verify_test_plant(void* user, uint32_t group,
                                 tj_lowered_kernel_t* kernels, uint32_t count);

// tj_diagnose's answer to "Am I fragmenting?" in |r| (and its
// arena_bytes, live_peak_bytes and device_* fields): the planned arena
// against its live peak, and, when |st| has device memory (CUDA), the
// caching allocator's reserved - allocated.
void tj_diagnose_fragmentation(tj_diagnose_report_t* r, int64_t arena_bytes,
                               int64_t live_peak_bytes,
                               const tj_executable_stats_t* st);

// A growable text in |al|'s memory, for reports: printf appends; after
// an allocation failure |oom| is set and further appends do nothing.
typedef struct tj_verify_text_t {
  tj_allocator_t al;
  char* buf;
  size_t len, cap;
  bool oom;
} tj_verify_text_t;

void tj_verify_text_printf(tj_verify_text_t* t, const char* format, ...)
    TJ_PRINTF_LIKE(2, 3);

#endif  // TJ_BACKENDS_VERIFY_H_
