// libtensorjit: checking a compiled executable against the reference
// interpreter, value by value. Include <tensorjit.h> rather than this file
// directly.

#ifndef TENSORJIT_TJ_VERIFY_H_
#define TENSORJIT_TJ_VERIFY_H_

#include "tensorjit/tj_executable.h"

#ifdef __cplusplus
extern "C" {
#endif

//===----------------------------------------------------------------------===//
// tj_verify
//===----------------------------------------------------------------------===//

// What tj_verify concluded.
typedef enum tj_verify_verdict_e {
  // Every compared value is within its dtype's budget.
  TJ_VERIFY_CLEAN = 0,
  // A value leaves the budget, but the unfused pipeline (every node its own
  // kernel) computes the same node with errors of the same kind, within the
  // budget of the fused values and at most |drift_factor| times the budget
  // away from the reference: summation order (reassociation), not a bug.
  TJ_VERIFY_DRIFT = 1,
  // A value leaves the budget and the unfused pipeline agrees with the
  // reference at that node: the fused kernel of that group is wrong.
  TJ_VERIFY_WRONG_FUSED_KERNEL = 2,
  // A value leaves the budget and the unfused pipeline is wrong there too,
  // beyond drift: the op's own kernel is wrong.
  TJ_VERIFY_WRONG_KERNEL = 3,
  // Every group boundary agrees with the reference run of the executable's
  // optimized graph, but an output leaves the budget against the reference
  // run of the caller's graph: a pass (canonicalize, fold, decompose)
  // changed the values.
  TJ_VERIFY_WRONG_PASSES = 4,
  // A value leaves the budget; the unfused pipeline was not consulted
  // (options.unfused false) or could not be compared.
  TJ_VERIFY_MISMATCH = 5,
} tj_verify_verdict_t;

// "clean", "drift", "wrong fused kernel", "wrong kernel", "wrong passes",
// "mismatch"; "?" for other values. Static storage.
TJ_API const char* tj_verify_verdict_name(tj_verify_verdict_t verdict);

typedef struct tj_verify_options_t {
  // sizeof(tj_verify_options_t) as the caller was compiled, set by
  // tj_verify_options_initialize; tj_verify rejects another size.
  size_t struct_size;
  // The budget per dtype (indexed by tj_dtype_t): an element is out of it
  // when |got - want| > atol + rtol * c, c its condition: the sum of the
  // magnitudes of the terms the element is made of, never less than
  // |want|. A kernel may add in another order than the reference, so a
  // contraction's or a reduction's error scales with its terms, not with
  // its result: after cancellation (a dot product of large terms whose sum
  // is near 0) |want| is far below them. c is computed by the reference
  // interpreter in f64 alongside the values, carried through every op: a
  // matmul's is the matmul of its operands' (>= sum_k |a_k| |b_k|), a
  // sum's the sum of its operand's, a movement moves it, an elementwise
  // op's is |y| plus what the op makes of each operand moved anywhere
  // within that operand's budget (|f'(a)| c_a for a smooth f), leaves and
  // ops without a rule have |y| (backends/verify_condition.c lists the
  // rules). Composites (softmax, layer_norm, attention) are decomposed
  // for it, so their inner reductions count. Defaults: f64 1e-9 / 1e-9,
  // f32 1e-4 / 1e-4, f16 1e-2 / 1e-2, bf16 3e-2 / 3e-2, f8e4m3 0.125 /
  // 0.125 and f8e5m2 0.25 / 0.25 (one rounding step), integers and bool
  // 0 / 0 (exact). NaN matches only NaN (a NaN on one side only is a
  // NaN-position mismatch); an infinity matches itself, or a finite value
  // of the same sign beyond 1e30 (overflow one op earlier or later).
  double rtol[TJ_DTYPE_COUNT_];
  double atol[TJ_DTYPE_COUNT_];
  // How far (in budgets) from the reference a value may be and still be
  // called drift when the unfused pipeline agrees with it. Default 100.
  double drift_factor;
  // Random inputs, when tj_verify is given none: the symbols' values by
  // name (every symbol an input's shape uses), a seed, and which special
  // values are mixed in (1 element in 16): with |edge_values| (default
  // true) +0, -0, denormals and large magnitudes (1e4 in f32 and f64, 256
  // in f16 and bf16), with |nonfinite| (default false) also NaN, +inf and
  // -inf. Other float elements are uniform in [-2, 2], integers in
  // [-4, 4], bools 0 or 1.
  int32_t num_symbols;
  const char* const* symbol_names;
  const int64_t* symbol_values;
  uint64_t seed;  // default 1
  bool edge_values;
  bool nonfinite;
  // On a mismatch, compile the same graph again with fusion off (same
  // target and options) and compare the guilty node there: drift or a
  // wrong kernel (the verdict). Default true.
  bool unfused;
} tj_verify_options_t;

// Fills |options| with the defaults above and sets |struct_size|.
TJ_API void tj_verify_options_initialize(tj_verify_options_t* options);

// One compared value: a node whose value crosses a fusion-group boundary
// (a group's output, written to memory), or an output of the graph.
typedef struct tj_verify_value_t {
  // Nodes of the executable's optimized graph (numbered as tj-opt prints
  // it); |group| and |step| are its fusion group and that group's position
  // in the run. For the outputs compared against the caller's graph
  // (|against_caller| true) |node| is the caller's node and |group| and
  // |step| are -1.
  int32_t step;
  int32_t group;
  char group_kind[16];  // "pointwise", "reduction", "matmul", "opaque", ""
  uint32_t node;
  char op[24];           // the node's op
  char type[96];         // e.g. "f32[8,64]"
  char output_name[64];  // the graph output it is, or ""
  bool against_caller;
  int64_t numel;
  int64_t mismatches;      // elements out of budget (NaN positions included)
  int64_t nan_mismatches;  // elements NaN on one side only
  double max_abs_error;    // over elements finite on both sides
  double max_rel_error;    // |got - want| / |want|, over want != 0
  // The first element out of budget (-1 when none) and its two values.
  int64_t first_bad_index;
  double first_bad_got, first_bad_want;
  double rtol, atol;  // the budget it was held to
  // The first bad element's condition, the scale of its budget (see
  // tj_verify_options_t.rtol); 0 when none.
  double first_bad_condition;
} tj_verify_value_t;

// What tj_verify found. Owned by the caller; destroy with
// tj_verify_report_destroy.
typedef struct tj_verify_report_t {
  tj_verify_verdict_t verdict;
  char target[16];  // "x86", "reference", "cuda"
  // Whether the values between the groups were compared (x86, and CUDA,
  // whose checked run launches step by step, copying each group's outputs
  // back); false: the target cannot show them (the reference target) and
  // only the outputs were.
  bool boundaries;
  uint32_t num_groups;  // of the executable (VIEW groups included)
  // Every compared value: the group boundaries in run order, then the
  // outputs against the caller's graph.
  uint32_t num_values;
  tj_verify_value_t* values;
  // The first value out of budget (index into |values|), or -1: the first
  // diverging group and node.
  int32_t first_bad;
  // Totals over |values|.
  int64_t total_mismatches;
  double max_abs_error, max_rel_error;
  // The unfused pipeline at the first bad value's node, when it ran.
  bool unfused_ran;
  bool unfused_within_budget;  // the unfused value against the reference
  double unfused_max_abs_error, unfused_max_rel_error;
  int64_t unfused_mismatches;
  int64_t fused_unfused_mismatches;  // fused against unfused, same budget
  // With TJ_VERIFY_WRONG_PASSES: the pass to blame. The default pipeline's
  // passes before fusion (canonicalize, cse, dce, decompose, canonicalize,
  // cse, dce) are replayed one at a time on |graph| with the executable's
  // constant evaluator, each result run on the reference interpreter; the
  // first after which an output leaves the budget is named here with its
  // position (0-6). "" and -1 otherwise.
  char blamed_pass[16];
  int32_t blamed_pass_index;
  // The whole report as text (what tj-run --verify prints); borrowed from
  // the report.
  const char* text;
  // Private: how the report was allocated.
  tj_allocator_t allocator_;
  size_t text_bytes_;
} tj_verify_report_t;

// Runs |executable| and the reference interpreter on the same inputs and
// compares them value by value: every value that crosses a fusion-group
// boundary of the executable (against the reference interpreter's run of
// the executable's optimized graph, every op rounded to its dtype, computed
// in double) and every output (also against the reference run of |graph|).
// The report names the first value out of its dtype's budget in run order
// (its group, node, op and type) with its error statistics, and, with
// options.unfused, tells reassociation drift from a wrong kernel by
// compiling |graph| again without fusion (one node a kernel, or the
// smallest fusion limit the fuser accepts; see tj_verify_verdict_t).
//
// |graph| is the finalized graph |executable| was compiled from. |inputs|
// (CPU tensors, as tj_executable_run takes them) may be NULL with
// |num_inputs| 0: random ones are made (options' symbols, seed and special
// values). |options| NULL: the defaults. The run counts in the
// executable's stats. A mismatch is not an error: the status is for what
// kept tj_verify from comparing (bad arguments, OUT_OF_MEMORY, a run that
// failed, a symbol an input needs and the options do not give:
// INVALID_ARGUMENT naming it). On success |*out_report| is owned by the
// caller (tj_verify_report_destroy); on failure it is NULL. Thread-safe
// as tj_executable_run is.
TJ_API tj_status_t tj_verify(tj_executable_t* executable,
                             const tj_graph_t* graph, const tj_tensor_t* inputs,
                             int32_t num_inputs,
                             const tj_verify_options_t* options,
                             tj_verify_report_t** out_report);

// Frees |report|. NULL is a no-op.
TJ_API void tj_verify_report_destroy(tj_verify_report_t* report);

//===----------------------------------------------------------------------===//
// tj_verify_ladder: the diagnostic ladder as one ordered report
//===----------------------------------------------------------------------===//

// The rungs, in the order they are climbed: each adds one part of the
// compiler to the one before, so the first rung whose outputs leave the
// budget names the part to blame.
typedef enum tj_ladder_level_e {
  // The default pipeline's passes before fusion (canonicalize, cse, dce,
  // decompose, canonicalize, cse, dce), run on the reference interpreter:
  // the optimized graph's own semantics. Blame: a pass.
  TJ_LADDER_DECOMPOSED = 0,
  // Compiled with options.unfused (one op a kernel), autotuning off, the
  // generic program. Blame: one op's kernel (lowering or code generation).
  TJ_LADDER_UNFUSED = 1,
  // Compiled with fusion, autotuning off, the generic program. Blame:
  // fusion (a fused kernel).
  TJ_LADDER_FUSED = 2,
  // The caller's options as given (autotuning included), the generic
  // program. Blame: autotuning (a GEMM candidate) or another option.
  TJ_LADDER_FULL = 3,
  // The caller's options with specialize ALWAYS: the shape's own program
  // (every size a constant). Skipped for a graph without symbols. Blame:
  // specialization.
  TJ_LADDER_SPECIALIZED = 4,
  TJ_LADDER_LEVEL_COUNT_ = 5,
} tj_ladder_level_t;

// "decomposed", "unfused", "fused", "full", "specialized"; "?" otherwise.
TJ_API const char* tj_ladder_level_name(tj_ladder_level_t level);

// One rung: its outputs against the reference run of the caller's graph.
typedef struct tj_ladder_rung_t {
  tj_ladder_level_t level;
  // false: skipped or failed to compile or run (|note| says why); the
  // ladder goes on with the next rung.
  bool ran;
  // An output leaves its dtype's budget (tj_verify_options_t).
  bool diverges;
  int64_t mismatches;  // output elements out of budget
  double max_abs_error, max_rel_error;
  double compile_ms;  // 0 for the decomposed rung
  // For a compiled rung that diverges: tj_verify's first diverging value
  // there (group, node, op, type; the values between the groups on x86 and
  // CUDA), or "". For the decomposed rung: "".
  char first_value[192];
  char note[256];
} tj_ladder_rung_t;

// What tj_verify_ladder found. Owned by the caller; destroy with
// tj_ladder_report_destroy.
typedef struct tj_ladder_report_t {
  tj_ladder_rung_t rungs[TJ_LADDER_LEVEL_COUNT_];
  // The first rung that ran and diverges, or -1: every rung agrees.
  int32_t first_diverging;
  // The part of the compiler that rung adds: "passes", "kernel" (one op's
  // lowering or code generation), "fusion", "options" (autotuning),
  // "specialization"; "" when none diverges.
  char blame[24];
  // With blame "passes": the first pass after which the outputs leave the
  // budget when the passes are replayed one at a time, and its position in
  // the list above (0-6); "" and -1 otherwise.
  char blamed_pass[16];
  int32_t blamed_pass_index;
  // Then TJ_BISECT over that pass: its rewrites up to that position
  // (|pass_rewrites|), and the least N such that TJ_BISECT=PASS:N already
  // diverges while PASS:N-1 does not (|bad_rewrite|, -1 when bisection
  // could not isolate one: zero rewrites already diverge), with the Nth
  // rewrite's pass and node in that pass's input graph
  // ("canonicalize: %12 = relu f32[8,4]").
  int64_t pass_rewrites;
  int64_t bad_rewrite;
  char bad_rewrite_node[160];
  // The whole report as text (what tj-run --ladder prints); borrowed.
  const char* text;
  // Private: how the report was allocated.
  tj_allocator_t allocator_;
  size_t text_bytes_;
} tj_ladder_report_t;

// Climbs the ladder for finalized |graph| with |options| (NULL: the
// defaults; the target, autotuning and specialization policy are the
// caller's on the full rung, the target on every compiled one): every rung
// runs on the same inputs (|inputs|, or random ones made as tj_verify
// makes them from |verify_options|' symbols and seed) and is compared with
// the reference interpreter's run of |graph| within |verify_options|'
// budgets (NULL: the defaults). It reports every rung, the first that
// diverges and the part to blame; for the passes, the pass and, by
// bisecting the TJ_BISECT budget, the first bad rewrite and its node.
// |options|' rewrite budget (tj_compile_options_t.bisect; NULL: the
// context's TJ_BISECT) applies to every rung, the decomposed rung's replay
// of the passes included, so that a budget that stops before the first bad
// rewrite climbs clean; a malformed one is INVALID_ARGUMENT. A
// divergence is not an error: the status is for what kept the ladder from
// being climbed (bad arguments, OUT_OF_MEMORY, inputs it cannot make, the
// reference failing); a rung that cannot compile is noted and skipped.
// On success |*out_report| is owned by the caller
// (tj_ladder_report_destroy); on failure it is NULL.
TJ_API tj_status_t tj_verify_ladder(const tj_graph_t* graph,
                                    const tj_compile_options_t* options,
                                    const tj_tensor_t* inputs,
                                    int32_t num_inputs,
                                    const tj_verify_options_t* verify_options,
                                    tj_ladder_report_t** out_report);

// Frees |report|. NULL is a no-op.
TJ_API void tj_ladder_report_destroy(tj_ladder_report_t* report);

//===----------------------------------------------------------------------===//
// tj_diagnose: seed 003's diagnostic ladder, measured
//===----------------------------------------------------------------------===//

// The questions, in the order they are asked.
typedef enum tj_diagnose_question_e {
  // The run at the given symbol values and with the first symbol doubled
  // (does the time move with the batch?), host time (set-up, copies, graph
  // breaks) against kernel time. YES: the time barely grows (under 1.2x)
  // or the host's share beats the kernels'.
  TJ_DIAGNOSE_LAUNCH_BOUND = 0,
  // Kernels and bytes moved, eager (one op a kernel, the scoreboard)
  // against compiled. YES: fusion saves kernels or over 10% of the bytes.
  TJ_DIAGNOSE_FUSIBLE_TRAFFIC = 1,
  // The recompiles over the two shapes (tj_executable_stats_t.recompiles).
  TJ_DIAGNOSE_RECOMPILING = 2,
  // The graph breaks, with the host steps' names and ops from the profile.
  TJ_DIAGNOSE_GRAPH_BREAKS = 3,
  // The profile's top kernel, and the top non-GEMM kernel. YES: a non-GEMM
  // kernel has 10% of the run or more.
  TJ_DIAGNOSE_ONE_OP_DOMINATING = 4,
  // Collectives: never on one device.
  TJ_DIAGNOSE_COLLECTIVE = 5,
  // The arena the memory plan makes against what is live at its peak,
  // and on CUDA the caching allocator's reserved - allocated after the
  // runs (tj_executable_stats_t.device_*). YES: more than 25% of the arena
  // is above the live peak, or more than 25% of what the allocator
  // reserved is unused.
  TJ_DIAGNOSE_FRAGMENTING = 6,
  // Compile amortization: (t_eager - t_compiled) x N_runs > t_compile x
  // N_compiles, t_eager the same graph compiled unfused (options.unfused,
  // no autotuning), with the break-even number of runs. YES: it saves time
  // a run.
  TJ_DIAGNOSE_COMPILING_PAYS = 7,
  TJ_DIAGNOSE_QUESTION_COUNT_ = 8,
} tj_diagnose_question_t;

typedef struct tj_diagnose_answer_t {
  bool yes;
  char question[32];    // "Am I launch bound?"
  char measured[1024];  // the measurements behind the verdict
  char advice[96];      // the seed's table's answer to a YES, or "nothing
                        // to do here"
} tj_diagnose_answer_t;

// What tj_diagnose measured. Owned by the caller; destroy with
// tj_diagnose_report_destroy.
typedef struct tj_diagnose_report_t {
  tj_diagnose_answer_t answers[TJ_DIAGNOSE_QUESTION_COUNT_];
  char target[16];  // "x86", "cuda"
  int32_t runs;     // a measurement
  // The run (per run, ms) at the symbol values, and with the first symbol
  // doubled (0 when the graph has none); its host and kernel time.
  double run_ms, grown_run_ms, host_ms, kernel_ms;
  int64_t eager_kernels;  // the scoreboard's eager stage
  int32_t kernels, graph_breaks;
  int64_t recompiles;
  int64_t arena_bytes, live_peak_bytes;
  // CUDA: the caching allocator's reserved and allocated bytes after the
  // runs (0 on other targets).
  int64_t device_reserved_bytes, device_allocated_bytes;
  // Compile amortization: tj_executable_stats_t.compile_ms, the unfused
  // baseline's run (0 when it could not be built: the answer says why),
  // and the break-even number of runs (-1: never, or no baseline).
  double compile_ms, unfused_run_ms;
  int64_t break_even_runs;
  // The whole report as text (what tj-run --diagnose prints); borrowed.
  const char* text;
  // Private: how the report was allocated.
  tj_allocator_t allocator_;
  size_t text_bytes_;
} tj_diagnose_report_t;

// Compiles finalized |graph| with |options| (NULL: the defaults) and
// answers each question above with measurements: |runs| profiled runs
// (tj_executable_profile, 1 to 100000) at the symbol values |names| =
// |values| (every symbol of |graph|), and again with the first symbol
// doubled, on random inputs (tj_verify's, no edge values); the
// scoreboard; the stats; and the graph compiled unfused for the
// amortization. Errors: INVALID_ARGUMENT for bad arguments or a symbol
// missing (naming it), the compile's and the runs' errors, OUT_OF_MEMORY;
// a baseline that cannot be built is said in its answer, not an error. On
// success |*out_report| is owned by the caller
// (tj_diagnose_report_destroy); on failure it is NULL.
TJ_API tj_status_t tj_diagnose(const tj_graph_t* graph,
                               const tj_compile_options_t* options,
                               int32_t num_symbols, const char* const* names,
                               const int64_t* values, int32_t runs,
                               tj_diagnose_report_t** out_report);

// Frees |report|. NULL is a no-op.
TJ_API void tj_diagnose_report_destroy(tj_diagnose_report_t* report);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TENSORJIT_TJ_VERIFY_H_
