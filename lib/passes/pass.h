// The middle end's internal interface: the pass context, the plan the passes
// transform, the pass registry (passes.def) and the pipeline, and the one
// helper every rewriting pass builds its output graph with.
//
// Passes are graph -> new graph rewrites. A rewriting pass reads
// |plan->graph|, builds a fresh graph through tj_rewriter_t (which appends
// every node through tj_graph_append, so each output node is re-inferred and
// normalized exactly as the public builder would make it) and swaps it in
// with tj_plan_set_graph, which drops the now stale fusion groups and memory
// plan. Analyses that a backend consumes (fuse: lib/passes/fusion.h, memplan:
// lib/passes/memplan.h) are attached to the plan instead of changing the
// graph.
//
// Nothing here includes an LLVM, CUDA or libffi header (tests/unit checks).

#ifndef TJ_LIB_PASSES_PASS_H_
#define TJ_LIB_PASSES_PASS_H_

#include "lib/ir.h"

typedef struct tj_fusion_t tj_fusion_t;      // lib/passes/fusion.h
typedef struct tj_memplan_t tj_memplan_t;    // lib/passes/memplan.h
typedef struct tj_rewriter_t tj_rewriter_t;  // below

//===--- the constant evaluator hook ---===//

// Runs finalized |graph|, which has no inputs (only constants and ops on
// them), and writes each output densely, row-major, into |outputs|[i]
// (sized by the caller from the output's type). Constant folding calls it so
// that folding can never disagree with the reference interpreter. lib/ does
// not depend on backends/ (tests/check_layering.py), so whoever runs a
// pipeline installs the evaluator: the compile driver, tj_graph_scoreboard
// (backends/scoreboard.c), tj-opt and the tests install
// tj_pass_reference_evaluator (backends/reference/reference_eval.h).
typedef tj_status_t (*tj_pass_eval_fn)(void* user_data, const tj_graph_t* graph,
                                       void* const* outputs);

//===--- tj_pass_ctx_t ---===//

typedef struct tj_pass_ctx_t {
  tj_context_t* context;
  // Run tj_ir_verify (and the fusion / memory plan checks once those exist)
  // after every pass. On in tests; cheap next to the passes themselves.
  bool verify_each;
  // Print the IR to stderr after the pass of this pipeline name ("all" for
  // every pass); TJ_PRINT_AFTER. NULL: never.
  const char* print_after;
  // TJ_LOG=passes: per pass time and node counts on the diagnostic channel.
  bool log_passes;
  // TJ_LOG=fusion: every fusion refusal with its reason.
  bool log_fusion;
  // TJ_DUMP_DIR: where `fuse` writes <graph>.fused.dot. NULL: nowhere.
  const char* dump_dir;
  // Constant folding; NULL evaluate disables folding (fold then changes
  // nothing and says so under TJ_LOG=passes).
  tj_pass_eval_fn evaluate;
  void* evaluate_user_data;
  // Folding never creates a constant larger than this (XLA refuses to fold
  // what would bloat the graph; ours is deliberately small).
  int64_t fold_max_bytes;
  // A movement op (transpose, slice, reshape, concat: lib/ops.def's kind
  // MOVEMENT) of constants whose result is no larger than its operands
  // folds up to this size instead: it only rearranges bytes the graph
  // holds already, and unfolded it runs on every call (a conv's weight
  // regrouped for its GEMM: 9.4 MB for ResNet-50's 3x3 512 layer).
  int64_t fold_movement_max_bytes;
  // decompose: compute f16/bf16 composites in f32 (cast in, cast out). On
  // by default; the scoreboard's op-by-op model turns it off, since an eager
  // framework upcasts inside each op's kernel rather than with cast kernels.
  bool decompose_upcast_half;
  // attention_match in the default pipeline (issue 14): written-out
  // softmax attention onto the attention op. On by default.
  bool match_attention;
  // quant_matmul in the default pipeline (issue 17): matmuls of two
  // dequantized 8-bit operands onto the 8-bit GEMM. On by default.
  bool quant_matmul;
  // decompose: whether the target runs composite |node| of |graph| as a
  // kernel of its own (issue 14: attention on x86), which then stays
  // whole; the target's answer (tj_backend_t.native_op). NULL: every
  // composite decomposes.
  bool (*native_op)(const tj_graph_t* graph, uint32_t node);
  // decompose: whether the target's GEMM template would refuse matmul
  // |node| of |graph| for its operands' layout (CUDA: tensor-core operands
  // not 16 bytes aligned), which then becomes the sum over k of a broadcast
  // product in f32, a reduction kernel where the refused GEMM ran on the
  // host (tj_backend_t.matmul_misaligned).
  // NULL: none.
  bool (*matmul_misaligned)(const tj_graph_t* graph, uint32_t node);
  // fuse: whether a conv the target keeps whole takes its elementwise
  // followers as an epilogue in its kernel (tj_backend_t.conv_epilogue;
  // issue 15: x86's and CUDA's CONV templates). Off by default.
  bool conv_epilogue;
  // With conv_epilogue: whether conv |node| of |graph| takes an epilogue
  // where the target would run it best without one (CUDA: a conv whose
  // launch splits k at its smallest batch; tj_backend_t's
  // conv_epilogue_fits, |user| its target). NULL: every conv takes one.
  bool (*conv_epilogue_fits)(void* user, const tj_graph_t* graph,
                             uint32_t node);
  void* conv_epilogue_user;
  // fuse: whether the target's attention kernel also writes the row
  // log-sum-exp of its scores (tj_backend_t.attention_lse_output; lsefwd:
  // CUDA's), so that an attention_lse of the same q, k, mask, scale and
  // causal flag joins the attention's group, one kernel of two outputs.
  // Off by default; TJ_ATTENTION_LSE=separate turns it off.
  bool attention_lse_output;
  // fuse (issue 14): whether the target's attention kernel reads q, k and
  // v with any strides but a contiguous head dim
  // (tj_backend_t.attention_views): a transpose that keeps the last dim
  // last, of a value in memory or of a reshape of one, then joins the
  // attention's group and is read in place, where it was a copy kernel of
  // its own (the blocks' heads(): x @ w viewed as [b, t, h, d], then as [b,
  // h, t, d]); so does such a transpose of the attention's result (the
  // merge before the output projection), written in place by the kernel.
  // Off by default; TJ_ATTENTION_VIEWS=off turns it off.
  bool attention_views;
  // fuse (swiglu, issue 14): whether the target computes matmuls |a| and
  // |b| of |graph|, which read the same A and B matrices of one shape and
  // dtype, as one dual GEMM whose epilogue reads both (silu(x @ wg) *
  // (x @ wu): A read once, neither product written); fuse then lets them
  // share a MATMUL group (fusion.h). tj_backend_t.dual_gemm, |user| the
  // opened target; NULL (the default, and TJ_DUAL_GEMM=off): never.
  bool (*dual_gemm)(void* user, const tj_graph_t* graph, uint32_t a,
                    uint32_t b);
  void* dual_gemm_user;
  // fuse (rope14, issue 14): the fusion's groups are lowered with every
  // concat cut into boxes, one kernel a box, as before concats whose
  // inputs are pointwise functions of the same loads became one select
  // (tj_fusion_t.concat_boxes, kir/lower_select.c). Off by default;
  // TJ_CONCAT_SELECT=off turns it on, for A/B comparisons.
  bool concat_boxes;
  // layout (issue 15) in the default pipeline: transposes sunk through
  // elementwise ops to their inverses. On by default; TJ_LAYOUT=off turns
  // it off, for A/B comparisons.
  bool layout;
  // Fusion: the most nodes in one group (Inductor's max_fusion_size).
  uint32_t fuse_max_nodes;
  // fuse: nodes that must be kernels of their own, by plan-graph node (NULL:
  // none). The driver sets it when no template lowered the group they were
  // fused into (backends/compile.c, split_unlowered): each is materialized
  // and no merge joins it with a node that reads it, so that its readers
  // read it from memory.
  const bool* own_kernel;
  // Byte estimates (fusion's recompute-vs-materialize rule) evaluate
  // symbolic sizes at these values, by symbol id; 0 means "unknown", taken
  // as TJ_PASS_DEFAULT_SYMBOL_HINT. The scoreboard sets the caller's values.
  int64_t symbol_hints[TJ_MAX_SYMBOLS];
  // TJ_BISECT (tj_compile_options_t.bisect, "N" or "PASS:N"): a budget of
  // rewrites. With |bisect_limit| >= 0 the rewriting passes (canonicalize's
  // rules and folds, cse's merges, decompose's expansions, fold) ask
  // tj_pass_rewrite before each rewrite, and all but the first
  // |bisect_limit| are skipped, as if no rule matched. Only the pass named
  // |bisect_pass| (a registry name, static) counts and is limited when it
  // is non-NULL; every rewriting pass otherwise. -1: no budget, but the
  // rewrites are still counted.
  const char* bisect_pass;
  int64_t bisect_limit;
  // Counted by tj_pass_rewrite over the whole pipeline: rewrites allowed and
  // skipped (of the budgeted passes), and, under a budget (|bisect_limit|
  // >= 0), the last one allowed, as "canonicalize: %12 = relu f32[8,4]"
  // (its node in that pass's input).
  int64_t rewrites;
  int64_t rewrites_skipped;
  char last_rewrite[160];
  // The pass running (set by tj_pipeline_run_one): what tj_pass_rewrite
  // matches |bisect_pass| against.
  const char* pass_name;
  // Test-only: one more canonicalize rule, offered every node before the
  // built-in ones (the planted wrong rewrite of tj_verify's ladder tests,
  // backends/verify.h). It gets the source node and its operands mapped
  // into the new graph, and sets *out to a replacement of the node's type
  // or leaves it TJ_NODE_NONE. NULL in the library.
  tj_status_t (*test_rule)(void* user, tj_rewriter_t* rw, uint32_t src_node,
                           const uint32_t* operands, uint32_t* out);
  void* test_rule_user;
  // Region templates (lib/passes/region.c, issue 16): the default
  // pipeline's graph stages over one or three blocks of a repeated-block
  // graph, copied for the others. On by default; tests turn it off to compare.
  bool region_template;
  // Set by the default pipeline: the blocks of the last region templated
  // (0: none) and how many of them the passes ran over.
  uint32_t region_blocks;
  uint32_t region_blocks_processed;
} tj_pass_ctx_t;

// Whether the pass running in |ctx| may perform one more rewrite, of node
// |node| of |src| (the pass's input graph), under the TJ_BISECT budget;
// counts it either way and, under a budget, records the allowed one in
// ctx->last_rewrite.
bool tj_pass_rewrite(tj_pass_ctx_t* ctx, const tj_graph_t* src, uint32_t node);

// Parses a TJ_BISECT value, "N" or "PASS:N" (N >= 0, PASS a registered
// pass): *out_pass is the registry's name (static) or NULL, *out_limit N.
// INVALID_ARGUMENT naming |source| (the variable or option) otherwise.
tj_status_t tj_bisect_parse(const char* spec, const char* source,
                            const char** out_pass, int64_t* out_limit);

#define TJ_PASS_DEFAULT_SYMBOL_HINT 1024

// Bytes of node |index|'s result with symbols at |ctx|'s hints (saturating
// at INT64_MAX / 4 instead of overflowing).
int64_t tj_pass_node_bytes(const tj_pass_ctx_t* ctx, const tj_graph_t* graph,
                           uint32_t index);

// Fills |ctx| with the defaults for |context| and then applies its
// settings (lib/env.h): print-after, log (passes, fusion) and dump dir.
// verify_each starts false; evaluate starts NULL (the driver installs
// one). The strings are borrowed from the context.
void tj_pass_ctx_initialize(tj_pass_ctx_t* ctx, tj_context_t* context);

//===--- tj_plan_t ---===//

// What the pipeline transforms and a backend consumes: a graph, plus its
// fusion groups and memory plan once `fuse` and `memplan` have run. Owns all
// three.
typedef struct tj_plan_t {
  tj_context_t* context;
  tj_graph_t* graph;
  tj_fusion_t* fusion;    // NULL until fuse runs; indexes |graph|'s nodes
  tj_memplan_t* memplan;  // NULL until memplan runs; indexes |fusion|
} tj_plan_t;

// Takes ownership of finalized |graph|.
void tj_plan_initialize(tj_plan_t* plan, tj_graph_t* graph);
// Destroys what |plan| owns and clears it.
void tj_plan_deinitialize(tj_plan_t* plan);
// Replaces the graph by |graph| (ownership taken), destroying the old one
// and the fusion groups and memory plan that referred to it.
void tj_plan_set_graph(tj_plan_t* plan, tj_graph_t* graph);
// Replaces the fusion groups (ownership taken), dropping the memory plan.
void tj_plan_set_fusion(tj_plan_t* plan, tj_fusion_t* fusion);
void tj_plan_set_memplan(tj_plan_t* plan, tj_memplan_t* memplan);

//===--- the registry ---===//

typedef tj_status_t (*tj_pass_fn)(tj_pass_ctx_t* ctx, tj_plan_t* plan);

typedef struct tj_pass_info_t {
  const char* name;  // pipeline spelling, as in --passes=
  const char* summary;
  tj_pass_fn run;
} tj_pass_info_t;

#define TJ_PASS(c_name, name, summary)                               \
  tj_status_t tj_pass_##c_name(tj_pass_ctx_t* ctx, tj_plan_t* plan); \
  extern const tj_pass_info_t tj_pass_info_##c_name;
#include "lib/passes/passes.def"
#undef TJ_PASS

// Every registered pass, in passes.def order.
extern const tj_pass_info_t* const tj_pass_registry[];
extern const uint32_t tj_pass_registry_size;

// The pass spelled |name| (|length| bytes); NULL if none.
const tj_pass_info_t* tj_pass_find(const char* name, size_t length);

//===--- the pipeline ---===//

// Runs one pass; then, per |ctx|, verifies, logs and prints. A pass error
// comes back annotated with the pass name.
tj_status_t tj_pipeline_run_one(tj_pass_ctx_t* ctx, tj_plan_t* plan,
                                const tj_pass_info_t* pass);

// The default pipeline (straight-line code in pipeline.c): cleanup,
// decomposition, cleanup again, fusion, memory planning.
tj_status_t tj_pipeline_default(tj_pass_ctx_t* ctx, tj_plan_t* plan);

// The prefix of the default pipeline up to and including the stage
// |stage_pass| (its last pass name: "canonicalize", "decompose", "fuse",
// "memplan"). Used by the scoreboard to measure each stage.
tj_status_t tj_pipeline_default_until(tj_pass_ctx_t* ctx, tj_plan_t* plan,
                                      const char* stage_pass);

// Region templates (lib/passes/region.c): when |plan|'s graph is a prefix,
// N >= 4 equal blocks chained by one value and a suffix, runs the default
// pipeline up to its "decompose" stage over a probe of the prefix, the
// first block and the suffix where checks on the first block's boundary
// values show it stands for the others (then expanded to three blocks),
// else the first three blocks, and when the third block came out as
// the second did, replaces the graph by the processed probe with the
// blocks after it copied from the third: the graph the whole pipeline's
// stages would give, made without running them over every block.
// *|out_blocks| is N, or 0 when the graph is not such a stack or the probe
// did not come out periodic (the plan is then untouched);
// ctx->region_blocks_processed says over how many blocks (1 or 3) the
// stages ran. Fails only as
// the pipeline would not: never; what the probe meets is left for the
// whole graph's pipeline to report.
tj_status_t tj_region_template(tj_pass_ctx_t* ctx, tj_plan_t* plan,
                               uint32_t* out_blocks);

// tj_graph_scoreboard (include/tensorjit/tj_optimize.h) with constant
// folding through |evaluate| (NULL: no folding); the public function, in
// backends/scoreboard.c, passes the reference evaluator. |native_op| (NULL:
// none) is tj_pass_ctx_t.native_op for the pipeline it measures.
tj_status_t tj_scoreboard_measure(
    const tj_graph_t* graph, int32_t num_symbols,
    const char* const* symbol_names, const int64_t* symbol_values,
    tj_pass_eval_fn evaluate, void* evaluate_user_data,
    bool (*native_op)(const tj_graph_t*, uint32_t), tj_scoreboard_t* out);

// Checks a comma-separated pass list ("default" names the default
// pipeline); INVALID_ARGUMENT naming the first unknown or empty name.
tj_status_t tj_pipeline_check(const char* spec);
// Runs a checked pass list.
tj_status_t tj_pipeline_run_list(tj_pass_ctx_t* ctx, tj_plan_t* plan,
                                 const char* spec);

// Prints |plan| to an owned string (tj_context_free_string): the graph as
// tj_graph_print does, or, once fusion groups exist, the grouped form with
// each fused region inline (lib/passes/fusion_print.c).
tj_status_t tj_plan_print(const tj_plan_t* plan, char** out_text);

//===--- tj_rewriter_t: the graph -> graph builder every pass uses ---===//

// Builds a new graph from |src|: same name, the same symbols created in the
// same order (so symbol ids agree), the same inputs in the same order with
// the same names and types, then whatever nodes the pass appends, and at
// finish the outputs of |src| (names kept) mapped through |map| and its
// guards translated.
struct tj_rewriter_t {
  const tj_graph_t* src;
  tj_graph_t* dst;
  tj_allocator_t allocator;
  uint32_t* map;       // src node -> dst node; TJ_NODE_NONE until mapped
  int64_t* dim_cache;  // src expression index -> dst dim; INT64_MIN unknown
  uint32_t num_dim_cache;
};

// Starts a rewrite of finalized |src|. The inputs are mapped already.
tj_status_t tj_rewriter_begin(tj_rewriter_t* rw, const tj_graph_t* src);
// Frees everything, including the unfinished graph. Safe after a failed
// begin and after finish.
void tj_rewriter_abandon(tj_rewriter_t* rw);
// Appends the output nodes, the guards, finalizes (which verifies) and
// hands the graph over; |rw| is abandoned either way.
tj_status_t tj_rewriter_finish(tj_rewriter_t* rw, tj_graph_t** out_graph);

// For rewrites that change the signature (autodiff adds inputs and outputs,
// the partitioner cuts one graph into two): begin without creating |src|'s
// inputs (the caller appends INPUT nodes, in the order it wants, and maps
// what it needs); finish with |src|'s outputs only if |keep_src_outputs|,
// then |num_extra| more: new-graph nodes |extra_nodes| named
// |extra_names| (copied). Guards are translated as by tj_rewriter_finish.
tj_status_t tj_rewriter_begin_bare(tj_rewriter_t* rw, const tj_graph_t* src);
tj_status_t tj_rewriter_finish_outputs(tj_rewriter_t* rw, bool keep_src_outputs,
                                       uint32_t num_extra,
                                       const uint32_t* extra_nodes,
                                       const char* const* extra_names,
                                       tj_graph_t** out_graph);

// |src_dim| (a dim of |src|) as a dim of the new graph.
tj_status_t tj_rewriter_dim(tj_rewriter_t* rw, int64_t src_dim,
                            int64_t* out_dim);
tj_status_t tj_rewriter_dims(tj_rewriter_t* rw, int32_t rank,
                             const int64_t* src_dims, int64_t* out_dims);

// Appends |desc| (already in terms of the new graph's nodes and dims).
tj_status_t tj_rewriter_append(tj_rewriter_t* rw, const tj_node_desc_t* desc,
                               uint32_t* out_node);
// Appends |op| over |num_operands| new-graph nodes, with |attrs| (NULL:
// none) and the result type |dtype|, |rank|, |dims| (new-graph dims) that
// ops whose type is not inferred from their operands need.
tj_status_t tj_rewriter_emit(tj_rewriter_t* rw, tj_op_t op,
                             uint32_t num_operands, const uint32_t* operands,
                             const tj_attrs_t* attrs, tj_dtype_t dtype,
                             int32_t rank, const int64_t* dims,
                             uint32_t* out_node);
// Appends |op| over |num_operands| new-graph nodes, with no attributes.
tj_status_t tj_rewriter_op(tj_rewriter_t* rw, tj_op_t op, uint32_t num_operands,
                           const uint32_t* operands, uint32_t* out_node);
// Appends a copy of |src|'s node |src_node| whose operands are |operands|
// (new-graph nodes; NULL means "each operand through |map|", which must be
// mapped). Does not touch |map|.
tj_status_t tj_rewriter_copy(tj_rewriter_t* rw, uint32_t src_node,
                             const uint32_t* operands, uint32_t* out_node);
// tj_rewriter_copy through |map|, then map[src_node] = the copy.
tj_status_t tj_rewriter_clone(tj_rewriter_t* rw, uint32_t src_node);

// Small constants in the new graph: a rank-0 constant of |dtype| holding
// |value| converted to |dtype|.
tj_status_t tj_rewriter_scalar(tj_rewriter_t* rw, tj_dtype_t dtype,
                               double value, uint32_t* out_node);

//===--- constant folding (lib/passes/fold.c) ---===//

// Evaluates |desc|, a node about to be appended to |dst| whose operands are
// all CONSTANT nodes of |dst|, through ctx->evaluate, and appends the result
// as a CONSTANT: *out_node is that constant. *out_node is TJ_NODE_NONE when
// folding declines: no evaluator, a leaf op, a symbolic shape, a result over
// ctx->fold_max_bytes (ctx->fold_movement_max_bytes for a movement op) or
// larger than its operands (broadcast-like bloat), or
// an evaluation that failed with INVALID_ARGUMENT (e.g. a gather index out of
// range: that stays a run-time error of the graph). Other failures return.
tj_status_t tj_fold_node(tj_pass_ctx_t* ctx, tj_graph_t* dst,
                         const tj_node_desc_t* desc, uint32_t* out_node);

// A copy of finalized |src| (same nodes, inputs, outputs, symbols,
// guards), finalized, owned by the caller.
tj_status_t tj_graph_clone(const tj_graph_t* src, tj_graph_t** out_graph);

//===--- small shared facts about nodes ---===//

// Users of every node of |graph|: users of node i are
// users[offsets[i] .. offsets[i+1]), ascending, a user appearing once per
// operand slot that reads i. Owned by |allocator|; free with
// tj_uses_deinitialize.
typedef struct tj_uses_t {
  tj_allocator_t allocator;
  uint32_t num_nodes;
  uint32_t* offsets;  // num_nodes + 1
  uint32_t* users;
  bool* is_output;  // the node is a graph output
} tj_uses_t;
tj_status_t tj_uses_initialize(tj_uses_t* uses, const tj_graph_t* graph);
void tj_uses_deinitialize(tj_uses_t* uses);
static inline uint32_t tj_uses_count(const tj_uses_t* uses, uint32_t node) {
  return uses->offsets[node + 1] - uses->offsets[node];
}

// Whether node |index|'s result has only constant dims; |*out_numel| is its
// element count then.
bool tj_node_static_numel(const tj_graph_t* graph, uint32_t index,
                          int64_t* out_numel);

// Elementwise ops (unary, binary, ternary incl. cast): y[i] depends only on
// the operands' elements at i (after broadcasting).
static inline bool tj_op_is_elementwise(tj_op_t op) {
  tj_op_kind_t k = tj_op_info(op)->kind;
  return k == TJ_OP_KIND_UNARY || k == TJ_OP_KIND_BINARY ||
         k == TJ_OP_KIND_TERNARY;
}

#endif  // TJ_LIB_PASSES_PASS_H_
