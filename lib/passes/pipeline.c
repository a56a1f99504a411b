// The pass manager: the registry generated from passes.def, the pass
// context, tj_plan_t, running one pass with its checks, and the default
// pipeline as straight-line code (QBE's main.c).

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/env.h"
#include "lib/passes/memplan.h"

//===--- the registry ---===//

#define TJ_PASS(c_name, name, summary)                         \
  const tj_pass_info_t tj_pass_info_##c_name = {name, summary, \
                                                tj_pass_##c_name};
#include "lib/passes/passes.def"
#undef TJ_PASS

const tj_pass_info_t* const tj_pass_registry[] = {
#define TJ_PASS(c_name, name, summary) &tj_pass_info_##c_name,
#include "lib/passes/passes.def"
#undef TJ_PASS
};
const uint32_t tj_pass_registry_size =
    (uint32_t)TJ_ARRAY_SIZE(tj_pass_registry);

const tj_pass_info_t* tj_pass_find(const char* name, size_t length) {
  for (uint32_t i = 0; i < tj_pass_registry_size; ++i) {
    const char* n = tj_pass_registry[i]->name;
    if (strlen(n) == length && memcmp(n, name, length) == 0) {
      return tj_pass_registry[i];
    }
  }
  return NULL;
}

//===--- the context ---===//

static _Atomic(bool) g_warned_print_after;
static _Atomic(bool) g_warned_bisect;

// TJ_PRINT_AFTER names one pass or "all": a misspelled name would print
// nothing and leave the user wondering, so it is reported (once).
static void check_print_after(const tj_context_t* context, const char* name) {
  if (strcmp(name, "all") == 0 || tj_pass_find(name, strlen(name))) return;
  char names[512] = "";
  size_t used = 0;
  for (uint32_t i = 0; i < tj_pass_registry_size; ++i) {
    int n = snprintf(names + used, sizeof(names) - used, "%s, ",
                     tj_pass_registry[i]->name);
    if (n > 0 && used + (size_t)n < sizeof(names)) used += (size_t)n;
  }
  tj_warn_once(context, &g_warned_print_after,
               "%s: \"%.64s\" is not a pass and prints nothing; use one of "
               "%sall",
               tj_setting_source(context, TJ_SETTING_PRINT_AFTER), name, names);
}

void tj_pass_ctx_initialize(tj_pass_ctx_t* ctx, tj_context_t* context) {
  memset(ctx, 0, sizeof(*ctx));
  ctx->context = context;
  ctx->fold_max_bytes = 64 * 1024;
  ctx->fold_movement_max_bytes = 64 << 20;
  ctx->fuse_max_nodes = 128;
  ctx->decompose_upcast_half = true;
  ctx->match_attention = true;
  ctx->quant_matmul = true;
  ctx->region_template = true;
  ctx->layout = true;
  const char* print_after = tj_setting(context, TJ_SETTING_PRINT_AFTER);
  if (print_after && *print_after) {
    ctx->print_after = print_after;
    check_print_after(context, print_after);
  }
  uint32_t log = tj_log_flags(context);
  ctx->log_passes = (log & TJ_LOG_PASSES) != 0;
  ctx->log_fusion = (log & TJ_LOG_FUSION) != 0;
  const char* dump = tj_setting(context, TJ_SETTING_DUMP_DIR);
  if (dump && *dump) ctx->dump_dir = dump;
  ctx->bisect_limit = -1;
  const char* bisect = tj_setting(context, TJ_SETTING_BISECT);
  if (bisect && *bisect) {
    tj_status_t status =
        tj_bisect_parse(bisect, tj_setting_source(context, TJ_SETTING_BISECT),
                        &ctx->bisect_pass, &ctx->bisect_limit);
    if (status) {
      tj_warn_once(context, &g_warned_bisect, "%s; no budget applies",
                   tj_status_message(status));
      tj_status_free(status);
    }
  }
}

//===--- the TJ_BISECT budget ---===//

tj_status_t tj_bisect_parse(const char* spec, const char* source,
                            const char** out_pass, int64_t* out_limit) {
  *out_pass = NULL;
  *out_limit = -1;
  const char* colon = strchr(spec, ':');
  const char* number = colon ? colon + 1 : spec;
  if (colon) {
    *out_pass = NULL;
    const tj_pass_info_t* pass = tj_pass_find(spec, (size_t)(colon - spec));
    if (!pass) {
      return tj_invalid("%s: \"%.64s\" names no pass (the form is N or PASS:N)",
                        source, spec);
    }
    *out_pass = pass->name;
  }
  char* end = NULL;
  errno = 0;
  long long n = strtoll(number, &end, 10);
  if (!*number || *end || errno || n < 0 || *number == '-' || *number == '+' ||
      *number == ' ') {
    *out_pass = NULL;
    return tj_invalid(
        "%s: \"%.64s\" is not a rewrite count (the form is N or PASS:N, N >= "
        "0)",
        source, spec);
  }
  *out_limit = (int64_t)n;
  return NULL;
}

bool tj_pass_rewrite(tj_pass_ctx_t* ctx, const tj_graph_t* src, uint32_t node) {
  if (ctx->bisect_pass &&
      (!ctx->pass_name || strcmp(ctx->bisect_pass, ctx->pass_name) != 0)) {
    return true;
  }
  if (ctx->bisect_limit >= 0 && ctx->rewrites >= ctx->bisect_limit) {
    ++ctx->rewrites_skipped;
    return false;
  }
  ++ctx->rewrites;
  // Only a budget's last rewrite is read (tj_verify's bisection names it):
  // formatting each rewrite of every compile was a tenth of the passes'
  // time on a 24-layer stack (region compile, issue 16).
  if (ctx->bisect_limit < 0) return true;
  char type[96] = "";
  tj_ir_format_type(src, node, type, sizeof(type));
  snprintf(ctx->last_rewrite, sizeof(ctx->last_rewrite), "%s: %%%u = %s %s",
           ctx->pass_name ? ctx->pass_name : "?", node,
           tj_op_info(src->nodes[node].op)->name, type);
  return true;
}

//===--- tj_plan_t ---===//

void tj_plan_initialize(tj_plan_t* plan, tj_graph_t* graph) {
  memset(plan, 0, sizeof(*plan));
  plan->context = graph ? tj_graph_context(graph) : NULL;
  plan->graph = graph;
}

void tj_plan_deinitialize(tj_plan_t* plan) {
  tj_memplan_destroy(plan->memplan);
  tj_fusion_destroy(plan->fusion);
  tj_graph_destroy(plan->graph);
  memset(plan, 0, sizeof(*plan));
}

void tj_plan_set_graph(tj_plan_t* plan, tj_graph_t* graph) {
  tj_memplan_destroy(plan->memplan);
  tj_fusion_destroy(plan->fusion);
  tj_graph_destroy(plan->graph);
  plan->memplan = NULL;
  plan->fusion = NULL;
  plan->graph = graph;
}

void tj_plan_set_fusion(tj_plan_t* plan, tj_fusion_t* fusion) {
  tj_memplan_destroy(plan->memplan);
  tj_fusion_destroy(plan->fusion);
  plan->memplan = NULL;
  plan->fusion = fusion;
}

void tj_plan_set_memplan(tj_plan_t* plan, tj_memplan_t* memplan) {
  tj_memplan_destroy(plan->memplan);
  plan->memplan = memplan;
}

//===--- running passes ---===//

static tj_status_t verify_plan(const tj_plan_t* plan) {
  TJ_RETURN_IF_ERROR(tj_ir_verify(plan->graph));
  if (plan->fusion) {
    TJ_RETURN_IF_ERROR(tj_fusion_verify(plan->fusion, plan->graph));
  }
  if (plan->memplan) {
    TJ_RETURN_IF_ERROR(
        tj_memplan_verify(plan->memplan, plan->graph, plan->fusion));
  }
  return NULL;
}

tj_status_t tj_pipeline_run_one(tj_pass_ctx_t* ctx, tj_plan_t* plan,
                                const tj_pass_info_t* pass) {
  uint32_t before = plan->graph->num_nodes;
  double start = ctx->log_passes ? tj_now_ms() : 0.0;
  const char* outer = ctx->pass_name;  // canonicalize runs dce itself
  ctx->pass_name = pass->name;
  tj_status_t status = pass->run(ctx, plan);
  ctx->pass_name = outer;
  if (status) return tj_status_annotate(status, "pass %s", pass->name);
  if (ctx->verify_each) {
    status = verify_plan(plan);
    if (status) {
      return tj_status_annotate(status, "verification after pass %s",
                                pass->name);
    }
  }
  if (ctx->log_passes) {
    double ms = tj_now_ms() - start;
    if (plan->fusion) {
      tj_context_diagnostic(ctx->context, TJ_SEVERITY_REMARK,
                            "pass %s: %.3f ms, %u -> %u nodes, %u groups",
                            pass->name, ms, before, plan->graph->num_nodes,
                            plan->fusion->num_groups);
    } else {
      tj_context_diagnostic(ctx->context, TJ_SEVERITY_REMARK,
                            "pass %s: %.3f ms, %u -> %u nodes", pass->name, ms,
                            before, plan->graph->num_nodes);
    }
  }
  if (ctx->print_after && (strcmp(ctx->print_after, pass->name) == 0 ||
                           strcmp(ctx->print_after, "all") == 0)) {
    // A debugging aid like LLVM's -print-after: stderr, never stdout.
    char* text = NULL;
    TJ_RETURN_IF_ERROR(tj_plan_print(plan, &text));
    fprintf(stderr, "// ----- IR after %s -----\n%s", pass->name, text);
    tj_context_free_string(plan->context, text);
  }
  return NULL;
}

// Runs one pass; verifies, logs and prints per the context.
#define TJ_RUN_PASS(ctx, plan, name) \
  TJ_RETURN_IF_ERROR(tj_pipeline_run_one((ctx), (plan), &tj_pass_info_##name))

// Stages end where the scoreboard measures them.
#define TJ_STAGE_END(stage, name) \
  if (stage && strcmp(stage, name) == 0) return NULL

static bool has_op(const tj_graph_t* graph, tj_op_t op) {
  for (uint32_t i = 0; i < graph->num_nodes; ++i)
    if (graph->nodes[i].op == op) return true;
  return false;
}

static bool has_softmax(const tj_graph_t* graph) {
  for (uint32_t i = 0; i < graph->num_nodes; ++i)
    if (graph->nodes[i].op == TJ_OP_SOFTMAX) return true;
  return false;
}

// canonicalize, cse, dce, again while cse merged something, a few rounds at
// most. cse can break canonicalize's normal form: merging a later node into
// an equal earlier one changes an operand's index, and commutative operands
// are ordered by index (mul(full, c2) with c2 merged into an earlier c1
// wants swapping). The normal form is a fixpoint of the three, so a second
// canonicalize of the pipeline's result finds nothing to do.
static tj_status_t cleanup(tj_pass_ctx_t* ctx, tj_plan_t* plan) {
  enum { kMaxRounds = 4 };
  for (int round = 0; round < kMaxRounds; ++round) {
    TJ_RUN_PASS(ctx, plan, canonicalize);
    const tj_graph_t* before_cse = plan->graph;
    TJ_RUN_PASS(ctx, plan, cse);
    bool merged = plan->graph != before_cse;
    TJ_RUN_PASS(ctx, plan, dce);
    if (!merged) break;
  }
  return NULL;
}

// Whether the graph stages may run over a probe of a repeated-block graph
// (lib/passes/region.c): not when a rewrite budget, a printout after each
// pass or a planted rule asks for every node to go through every pass.
static bool region_allowed(const tj_pass_ctx_t* ctx) {
  return ctx->region_template && ctx->bisect_limit < 0 && !ctx->bisect_pass &&
         !ctx->print_after && !ctx->test_rule;
}

tj_status_t tj_pipeline_default_until(tj_pass_ctx_t* ctx, tj_plan_t* plan,
                                      const char* stage) {
  ctx->region_blocks = 0;
  ctx->region_blocks_processed = 0;
  if (!stage && region_allowed(ctx)) {
    uint32_t blocks = 0;
    TJ_RETURN_IF_ERROR(tj_region_template(ctx, plan, &blocks));
    if (blocks) {
      ctx->region_blocks = blocks;
      if (!plan->fusion) TJ_RUN_PASS(ctx, plan, fuse);
      TJ_RUN_PASS(ctx, plan, memplan);
      return NULL;
    }
  }
  // Cleanup first, so that decomposition and fusion see one normal form.
  TJ_RETURN_IF_ERROR(cleanup(ctx, plan));
  TJ_STAGE_END(stage, "canonicalize");
  // Quantized weights in the layout the GEMMs read them in (issue 17);
  // only graphs with a dequantize can have them.
  if (has_op(plan->graph, TJ_OP_DEQUANTIZE))
    TJ_RUN_PASS(ctx, plan, quant_prepack);
  // Matmuls of two dequantizes onto the 8-bit GEMM (issue 17), after the
  // relayout so that transposed weights are [K, N] dequantizes.
  if (ctx->quant_matmul && has_op(plan->graph, TJ_OP_DEQUANTIZE))
    TJ_RUN_PASS(ctx, plan, quant_matmul);
  // Written-out attention onto the op (before decompose expands it again
  // where there is no fused kernel); only graphs with a softmax can match.
  if (ctx->match_attention && has_softmax(plan->graph))
    TJ_RUN_PASS(ctx, plan, attention_match);
  // Composites into core ops, then clean up what the expansion exposes
  // (constants it folds, shared subexpressions).
  TJ_RUN_PASS(ctx, plan, decompose);
  TJ_RETURN_IF_ERROR(cleanup(ctx, plan));
  // Transposes sunk through the elementwise ops to their inverses (a
  // channels-last graph's convs); only graphs with a transpose can have
  // them, and only a graph that changed needs the cleanup again.
  if (ctx->layout && has_op(plan->graph, TJ_OP_TRANSPOSE)) {
    const tj_graph_t* before = plan->graph;
    TJ_RUN_PASS(ctx, plan, layout);
    if (plan->graph != before) TJ_RETURN_IF_ERROR(cleanup(ctx, plan));
  }
  TJ_STAGE_END(stage, "decompose");
  TJ_RUN_PASS(ctx, plan, fuse);
  TJ_STAGE_END(stage, "fuse");
  TJ_RUN_PASS(ctx, plan, memplan);
  return NULL;
}

tj_status_t tj_pipeline_default(tj_pass_ctx_t* ctx, tj_plan_t* plan) {
  return tj_pipeline_default_until(ctx, plan, NULL);
}

tj_status_t tj_pipeline_check(const char* spec) {
  if (!spec || !*spec) return tj_invalid("empty pass pipeline");
  for (const char* s = spec;;) {
    const char* end = strchr(s, ',');
    size_t n = end ? (size_t)(end - s) : strlen(s);
    if (n == 0) return tj_invalid("empty pass name in '%s'", spec);
    if (!(n == 7 && memcmp(s, "default", 7) == 0) && !tj_pass_find(s, n)) {
      return tj_invalid("unknown pass '%.*s' in '%s'", (int)n, s, spec);
    }
    if (!end) return NULL;
    s = end + 1;
  }
}

tj_status_t tj_pipeline_run_list(tj_pass_ctx_t* ctx, tj_plan_t* plan,
                                 const char* spec) {
  TJ_RETURN_IF_ERROR(tj_pipeline_check(spec));
  for (const char* s = spec;;) {
    const char* end = strchr(s, ',');
    size_t n = end ? (size_t)(end - s) : strlen(s);
    if (n == 7 && memcmp(s, "default", 7) == 0) {
      TJ_RETURN_IF_ERROR(tj_pipeline_default(ctx, plan));
    } else {
      TJ_RETURN_IF_ERROR(tj_pipeline_run_one(ctx, plan, tj_pass_find(s, n)));
    }
    if (!end) return NULL;
    s = end + 1;
  }
}
