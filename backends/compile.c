// backends/compile.c: the compile driver. tj_compile and tj_executable_*
// for every target, over the backend interface (backends/runtime/backend.h).
//
// Compiling: copy the caller's graph (the executable must not reference
// it), open the target's backend (first, so that a target that cannot work
// here fails fast and clearly), run the middle end (the default pipeline
// or the caller's pass list; fuse and memplan always end it, since they
// are the backends' input), lower every fusion group once to kernel IR and
// build the run plan (backends/runtime/run_plan.c: a group the kernel templates
// or the backend cannot take runs on the reference semantics as a host step
// between the compiled kernels, a graph break), and let the backend compile
// the generic program. The reference target takes the graph as it is.
//
// Running: bind the symbols from the inputs (tj_ir_bind_symbols checks
// dtypes, ranks, dims and the shape guards), check the outputs and the
// memory of every tensor, pick the program for the shape and let the
// backend run it.
//
// Specialization, the same for every backend that lowers, is
// backends/specialize.c.

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_entry.h"
#include "backends/executable.h"
#include "backends/runtime/host_tensor.h"
#include "backends/reference/reference_eval.h"
#include "lib/custom_op.h"
#include "lib/env.h"

//===--- options ---===//

void tj_compile_options_initialize(tj_compile_options_t* options) {
  if (!options) return;
  memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  options->target = TJ_TARGET_X86;
  options->specialize = TJ_SPECIALIZE_NEVER;
  options->specialize_after = 16;
}

static tj_status_t check_options(const tj_compile_options_t* opts) {
  if (opts->target != TJ_TARGET_X86 && opts->target != TJ_TARGET_REFERENCE &&
      opts->target != TJ_TARGET_CUDA) {
    return tj_invalid("tj_compile: unknown target %d", (int)opts->target);
  }
  if ((unsigned)opts->specialize > TJ_SPECIALIZE_ALWAYS ||
      (opts->specialize == TJ_SPECIALIZE_AFTER_N &&
       opts->specialize_after < 1)) {
    return tj_invalid("tj_compile: bad specialization policy %d (after %d)",
                      (int)opts->specialize, (int)opts->specialize_after);
  }
  if ((unsigned)opts->autotune > TJ_AUTOTUNE_BACKGROUND) {
    return tj_invalid("tj_compile: unknown autotune setting %d",
                      (int)opts->autotune);
  }
  if (opts->x86.num_threads < 0) {
    return tj_invalid("tj_compile: x86.num_threads is %d",
                      (int)opts->x86.num_threads);
  }
  if (opts->x86.autotune_budget_ms < 0) {
    return tj_invalid("tj_compile: x86.autotune_budget_ms is %d",
                      (int)opts->x86.autotune_budget_ms);
  }
  if (opts->pipeline) TJ_RETURN_IF_ERROR(tj_pipeline_check(opts->pipeline));
  if (opts->bisect && *opts->bisect) {
    const char* pass;
    int64_t limit;
    TJ_RETURN_IF_ERROR(tj_bisect_parse(
        opts->bisect, "tj_compile_options_t.bisect", &pass, &limit));
  }
  return NULL;
}

static const tj_backend_t* backend_of(tj_target_t target) {
  switch (target) {
    case TJ_TARGET_REFERENCE:
      return &tj_backend_reference;
    case TJ_TARGET_CUDA:
      return &tj_backend_cuda;
    case TJ_TARGET_X86:
      break;
  }
  return &tj_backend_x86;
}

//===--- destruction ---===//

// Frees |exe|; with |release_context|, drops its context reference last.
static void free_executable(tj_executable_t* exe, bool release_context);

static void destroy(tj_executable_t* exe) {
  if (exe->memoized) {
    // The memo may keep the compiled core for an equal compile to come
    // (compile_memo.c): then it holds no context reference (the context's
    // teardown frees it), and nothing else is freed now.
    tj_context_t* context = exe->context;
    if (tj_compile_memo_retire(context, exe)) {
      tj_context_release(context);
      return;
    }
  }
  free_executable(exe, true);
}

void tj_executable_destroy_retired(tj_executable_t* core) {
  core->memoized = false;
  free_executable(core, false);
}

static void free_executable(tj_executable_t* exe, bool release_context) {
  tj_allocator_t al = exe->allocator;
  const tj_backend_t* b = exe->backend;
  spec_t* s = atomic_load(&exe->specs);
  while (s) {
    spec_t* next = s->next;
    if (b->release) b->release(exe->target, s->program);
    tj_free(al, s, sizeof(spec_t));
    s = next;
  }
  if (exe->core) {
    // The rest is the core's (compile_memo.c).
    if (exe->mutex_ready) pthread_mutex_destroy(&exe->mutex);
    tj_executable_t* core = exe->core;
    tj_context_t* context = exe->context;
    tj_free(al, exe, sizeof(*exe));
    tj_executable_release(core);
    tj_context_release(context);
    return;
  }
  if (exe->opened) {
    if (b->release) b->release(exe->target, exe->generic);
    if (b->close) b->close(exe->target);
  }
  if (exe->target) tj_free(al, exe->target, b->target_size);
  tj_run_plan_deinitialize(&exe->run_plan);
  if (exe->mutex_ready) pthread_mutex_destroy(&exe->mutex);
  tj_plan_deinitialize(&exe->plan);
  tj_context_t* context = exe->context;
  tj_free(al, exe, sizeof(*exe));
  // Last: the backends' JIT, pools and devices were the context's.
  if (release_context) tj_context_release(context);
}

void tj_executable_retain(tj_executable_t* executable) {
  if (executable) atomic_fetch_add(&executable->refs, 1);
}

void tj_executable_release(tj_executable_t* executable) {
  if (executable && atomic_fetch_sub(&executable->refs, 1) == 1) {
    destroy(executable);
  }
}

//===--- compiling ---===//

// TJ_ATTENTION_LSE: "separate" keeps attention_lse a kernel of its own,
// as before lsefwd (the A/B of bench/cuda_attention_grad_torch.py); unset
// or "" leave the default; anything else warns once and leaves it too.
static _Atomic(bool) g_warned_attention_lse;
static bool attention_lse_separate(tj_context_t* context) {
  const char* v = tj_setting(context, TJ_SETTING_ATTENTION_LSE);
  if (!v || !v[0]) return false;
  if (strcmp(v, "separate") == 0) return true;
  tj_warn_once(context, &g_warned_attention_lse,
               "TJ_ATTENTION_LSE: \"%.32s\" is not separate and is ignored", v);
  return false;
}

// The A/B switches read as "off" (environment only): unset or "" leave
// the default; anything else warns once and leaves it too.
//   TJ_DUAL_GEMM: keeps a dual GEMM's matmuls apart (swiglu, issue 14; the
//     A/B of bench/transformer_blocks.py).
//   TJ_ATTENTION_VIEWS: copies q, k and v into their own memory before
//     attention again (issue 14).
//   TJ_SPLIT_UNLOWERED: runs a group no template lowers on the host, as
//     before split_unlowered (issue 15).
//   TJ_CONCAT_SELECT: cuts every concat into boxes again (rope14, issue
//     14; the A/B of bench/transformer_blocks.py).
static _Atomic(bool) g_warned_off[TJ_SETTING_COUNT_];
static bool setting_off(tj_context_t* context, tj_setting_t setting) {
  const char* v = tj_setting(context, setting);
  if (!v || !v[0]) return false;
  if (strcmp(v, "off") == 0) return true;
  tj_warn_once(context, &g_warned_off[setting],
               "%s: \"%.32s\" is not off and is ignored",
               tj_setting_source(context, setting), v);
  return false;
}

// The middle end; with |own_kernel| (split_unlowered's rounds) only fuse
// and memplan again, over the graph the pipeline left, with those nodes
// kernels of their own.
static tj_status_t run_pipeline(tj_executable_t* exe,
                                const tj_compile_debug_t* debug,
                                const bool* own_kernel) {
  tj_pass_ctx_t ctx;
  tj_pass_ctx_initialize(&ctx, exe->context);
  ctx.own_kernel = own_kernel;
  ctx.verify_each = exe->options.verify_each;
  if (debug && debug->fuse_max_nodes) {
    ctx.fuse_max_nodes = debug->fuse_max_nodes;
  }
  ctx.evaluate = exe->evaluate;
  ctx.native_op = exe->backend->native_op;
  ctx.matmul_misaligned = exe->backend->matmul_misaligned;
  ctx.conv_epilogue = exe->backend->conv_epilogue;
  ctx.conv_epilogue_fits = exe->backend->conv_epilogue_fits;
  ctx.conv_epilogue_user = exe->target;
  ctx.attention_lse_output = exe->backend->attention_lse_output &&
                             !attention_lse_separate(exe->context);
  ctx.attention_views = exe->backend->attention_views &&
                        !setting_off(exe->context, TJ_SETTING_ATTENTION_VIEWS);
  ctx.concat_boxes = setting_off(exe->context, TJ_SETTING_CONCAT_SELECT);
  // TJ_LAYOUT=nchw: the pass runs, and the x86 backend carries no blocked
  // layout between convs (nchwc_assign, backends/x86/x86_program.c).
  const char* layout = tj_setting(exe->context, TJ_SETTING_LAYOUT);
  ctx.layout = (layout && strcmp(layout, "nchw") == 0) ||
               !setting_off(exe->context, TJ_SETTING_LAYOUT);
  if (!setting_off(exe->context, TJ_SETTING_DUAL_GEMM)) {
    ctx.dual_gemm = exe->backend->dual_gemm;
    ctx.dual_gemm_user = exe->target;
  }
  if (debug) {
    ctx.test_rule = debug->test_rule;
    ctx.test_rule_user = debug->test_rule_user;
    ctx.region_template = !debug->no_region_template;
    ctx.quant_matmul = !debug->no_quant_matmul;
  }
  if (exe->options.bisect) {  // checked by check_options; "" is no budget
    ctx.bisect_pass = NULL;
    ctx.bisect_limit = -1;
    if (*exe->options.bisect) {
      TJ_RETURN_IF_ERROR(tj_bisect_parse(exe->options.bisect,
                                         "tj_compile_options_t.bisect",
                                         &ctx.bisect_pass, &ctx.bisect_limit));
    }
  }
  if (own_kernel) {
    // fuse and memplan below
  } else if (exe->options.pipeline) {
    TJ_RETURN_IF_ERROR(
        tj_pipeline_run_list(&ctx, &exe->plan, exe->options.pipeline));
  } else {
    TJ_RETURN_IF_ERROR(tj_pipeline_default(&ctx, &exe->plan));
  }
  if (!own_kernel) {
    exe->region_blocks = ctx.region_blocks;
    exe->region_blocks_processed = ctx.region_blocks_processed;
  }
  // The backends consume fusion groups and a memory plan.
  if (!exe->plan.fusion) {
    TJ_RETURN_IF_ERROR(
        tj_pipeline_run_one(&ctx, &exe->plan, &tj_pass_info_fuse));
  }
  if (!exe->plan.memplan) {
    TJ_RETURN_IF_ERROR(
        tj_pipeline_run_one(&ctx, &exe->plan, &tj_pass_info_memplan));
  }
  return NULL;
}

// One group's lowered kernels while the run plan is built: the debug hook
// first, then the backend's accept. One path for every target: a backend
// that takes a group as it accepts it (CUDA emits it then) gets the kernels
// the hook rewrote, as one that takes them all at compile (x86) does.
typedef struct accept_t {
  const tj_compile_debug_t* debug;
  const tj_backend_t* backend;
  void* target;
} accept_t;

static tj_status_t accept_group(void* user, uint32_t group,
                                tj_lowered_kernel_t* kernels, uint32_t count) {
  const accept_t* a = user;
  if (a->debug && a->debug->lowered) {
    TJ_RETURN_IF_ERROR(
        a->debug->lowered(a->debug->user, group, kernels, count));
  }
  return a->backend->accept ? a->backend->accept(a->target, kernels, count)
                            : NULL;
}

// Marks in |own| (per plan-graph node) the nodes of every group of the run
// plan that runs on the host and holds two or more computed nodes (a
// generator is read wherever used, so it does not count); |*added| says
// how many were not marked before.
static void mark_unlowered(const tj_executable_t* exe, bool* own,
                           uint32_t* added, uint32_t log) {
  const tj_run_plan_t* rp = &exe->run_plan;
  const tj_graph_t* g = exe->plan.graph;
  *added = 0;
  for (uint32_t q = 0; q < rp->num_steps; ++q) {
    if (rp->steps[q].kind != TJ_RUN_STEP_HOST) continue;
    const tj_group_t* grp = &exe->plan.fusion->groups[rp->steps[q].group];
    uint32_t computed = 0, fresh = 0;
    for (uint32_t j = 0; j < grp->num_nodes; ++j) {
      const tj_node_t* n = &g->nodes[grp->nodes[j]];
      if (tj_op_info(n->op)->pattern == TJ_OP_PATTERN_GENERATOR) continue;
      ++computed;
      fresh += !own[grp->nodes[j]];
    }
    if (computed < 2 || fresh == 0) continue;
    for (uint32_t j = 0; j < grp->num_nodes; ++j) own[grp->nodes[j]] = true;
    *added += fresh;
    if (log & (TJ_LOG_GRAPH_BREAKS | TJ_LOG_FUSION)) {
      tj_context_diagnostic(exe->context, TJ_SEVERITY_REMARK,
                            "graph_breaks: @%s group %u (%s %%%u): split into "
                            "kernels of its %u nodes, so that only a node no "
                            "template takes alone runs on the host",
                            g->name, rp->steps[q].group,
                            tj_op_info(g->nodes[grp->anchor].op)->name,
                            grp->anchor, computed);
    }
  }
}

// Builds the run plan, with lowering's feedback to fusion (issue 15): a
// group that no kernel template lowers (a reduction whose per-row value
// reads a gather, a reshape that merges dims of a strided read, ...) would
// run on the host on the reference semantics, a double-precision
// interpreter. Its nodes are made kernels of their own instead
// (tj_pass_ctx_t.own_kernel), fuse and memplan run again and the run plan
// is built again, so that only a node that no template takes even alone
// stays a graph break. A round that splits nothing new ends it, as does
// TJ_SPLIT_UNLOWERED=off. Graphs whose groups all lower pay nothing.
static tj_status_t build_run_plan(tj_executable_t* exe,
                                  const tj_compile_debug_t* debug,
                                  const tj_backend_config_t* config,
                                  tj_lowered_kernel_t** out_kernels) {
  const tj_backend_t* b = exe->backend;
  accept_t accept = {debug, b, exe->target};
  bool hooked = b->accept || (debug && debug->lowered);
  bool* own = NULL;
  uint32_t own_nodes = 0;
  tj_status_t status = NULL;
  for (;;) {
    status =
        tj_run_plan_build(&exe->run_plan, exe->context, exe->allocator,
                          &exe->plan, config->log, !(debug && debug->lowered),
                          hooked ? accept_group : NULL, &accept, out_kernels);
    if (status || exe->run_plan.num_host_steps == 0 ||
        setting_off(exe->context, TJ_SETTING_SPLIT_UNLOWERED)) {
      break;
    }
    if (!own) {
      own_nodes = exe->plan.graph->num_nodes;
      own = tj_calloc(exe->allocator, own_nodes ? own_nodes : 1, sizeof(bool));
      if (!own) {
        status = tj_status_oom();
        break;
      }
    }
    uint32_t added = 0;
    mark_unlowered(exe, own, &added, config->log);
    if (!added) break;
    // Again from fuse: this round's kernels, run plan, fusion and memory
    // plan go, and so does what the target took of them as it accepted
    // them (CUDA emits as it accepts).
    tj_run_plan_free_kernels(exe->allocator, *out_kernels,
                             exe->run_plan.num_kernels);
    *out_kernels = NULL;
    tj_run_plan_deinitialize(&exe->run_plan);
    tj_plan_set_fusion(&exe->plan, NULL);
    if (b->accept) {
      if (b->close) b->close(exe->target);
      exe->opened = false;
      memset(exe->target, 0, b->target_size);
      status = b->open(exe->target, config);
      if (status) break;
      exe->opened = true;
    }
    status = run_pipeline(exe, debug, own);
    if (status) break;
  }
  if (own) tj_free(exe->allocator, own, (own_nodes ? own_nodes : 1));
  if (status) {  // a round built kernels before a later step failed
    tj_run_plan_free_kernels(exe->allocator, *out_kernels,
                             exe->run_plan.num_kernels);
    *out_kernels = NULL;
  }
  return status;
}

static tj_status_t compile(tj_executable_t* exe, const void* arg,
                           const tj_compile_debug_t* debug) {
  const tj_backend_t* b = exe->backend;
  tj_backend_config_t config = {exe->context, exe->allocator, &exe->options,
                                tj_log_flags(exe->context), arg};
  if (b->target_size) {
    exe->target = tj_calloc(exe->allocator, 1, b->target_size);
    if (!exe->target) return tj_status_oom();
  }
  if (b->open) TJ_RETURN_IF_ERROR(b->open(exe->target, &config));
  exe->opened = true;
  tj_lowered_program_t program;
  memset(&program, 0, sizeof(program));
  program.plan = &exe->run_plan;
  program.label = "generic kernels";
  if (b->lowers) {
    double start = tj_now_ms();
    TJ_RETURN_IF_ERROR(run_pipeline(exe, debug, NULL));
    exe->passes_ms = tj_now_ms() - start;
    exe->graph = exe->plan.graph;
    exe->num_symbols = tj_dim_num_symbols(&exe->graph->dims);
    start = tj_now_ms();
    TJ_RETURN_IF_ERROR(build_run_plan(exe, debug, &config, &program.kernels));
    exe->lowering_ms = tj_now_ms() - start;
  } else {
    exe->run_plan.context = exe->context;
    exe->run_plan.allocator = exe->allocator;
    exe->run_plan.graph = exe->plan.graph;
  }
  TJ_RETURN_IF_ERROR(b->compile(exe->target, &program, &exe->generic));
  tj_executable_count_cache(exe, &program);
  exe->num_shared_kernels = (int32_t)program.kernels_shared;
  exe->llvm_ms = program.llvm_ms;
  exe->ptxas_ms = program.ptxas_ms;
  exe->tuning_ms = program.tuning_ms;
  exe->cache_load_ms = program.cache_load_ms;
  return NULL;
}

// An executable sharing |core| (a reference, taken over): a memo hit.
// Nothing is compiled or loaded; the kernels it reuses count as hits of
// the memory cache.
static tj_status_t share_core(tj_executable_t* core,
                              const tj_compile_options_t* opts, double start,
                              tj_executable_t** out_executable) {
  tj_executable_t* exe = tj_alloc(core->allocator, sizeof(*exe));
  if (exe) memset(exe, 0, sizeof(*exe));
  if (!exe || pthread_mutex_init(&exe->mutex, NULL) != 0) {
    tj_free(core->allocator, exe, exe ? sizeof(*exe) : 0);
    tj_executable_release(core);
    return exe ? tj_status_make(TJ_STATUS_BACKEND_FAILURE,
                                "tj_compile: pthread_mutex_init failed")
               : tj_status_oom();
  }
  exe->mutex_ready = true;
  atomic_init(&exe->refs, 1);
  tj_context_retain(core->context);
  exe->context = core->context;
  exe->allocator = core->allocator;
  exe->options = *opts;
  exe->options.pipeline = NULL;
  exe->options.cache_dir = NULL;
  exe->options.bisect = NULL;
  exe->backend = core->backend;
  exe->evaluate = core->evaluate;
  exe->log_recompiles = core->log_recompiles;
  exe->core = core;
  exe->plan = core->plan;
  exe->graph = core->graph;
  exe->num_symbols = core->num_symbols;
  exe->target = core->target;
  exe->generic = core->generic;
  exe->run_plan = core->run_plan;
  exe->num_shared_kernels = core->num_shared_kernels;
  atomic_init(&exe->cache_hits, atomic_load(&core->cache_hits) +
                                    atomic_load(&core->cache_misses));
  exe->compile_ms = tj_now_ms() - start;
  *out_executable = exe;
  return NULL;
}

static tj_status_t compile_executable(const tj_graph_t* graph,
                                      const tj_compile_options_t* options,
                                      const tj_backend_t* backend,
                                      const void* arg,
                                      const tj_compile_debug_t* debug,
                                      tj_executable_t** out_executable) {
  if (!out_executable) return tj_invalid("tj_compile: out_executable is NULL");
  *out_executable = NULL;
  if (!graph) return tj_invalid("tj_compile: graph is NULL");
  if (!graph->finalized) {
    return tj_invalid("tj_compile: graph @%s is not finalized", graph->name);
  }
  tj_compile_options_t opts;
  if (options) {
    if (options->struct_size != sizeof(opts)) {
      return tj_invalid(
          "tj_compile: options.struct_size is %zu, not %zu (fill the "
          "options with tj_compile_options_initialize first)",
          options->struct_size, sizeof(opts));
    }
    opts = *options;
  } else {
    tj_compile_options_initialize(&opts);
  }
  TJ_RETURN_IF_ERROR(check_options(&opts));
  if (!backend) backend = backend_of(opts.target);
  double start = tj_now_ms();
  tj_context_t* context = tj_graph_context(graph);
  tj_cache_key_t key;
  bool memo =
      !arg && !debug && tj_compile_memo_key(graph, &opts, backend, &key);
  if (memo) {
    tj_executable_t* core = NULL;
    TJ_RETURN_IF_ERROR(tj_compile_memo_find(context, key, &core));
    if (core) return share_core(core, &opts, start, out_executable);
  }
  tj_allocator_t al = tj_context_allocator(context);
  tj_executable_t* exe = tj_alloc(al, sizeof(*exe));
  if (!exe) return tj_status_oom();
  memset(exe, 0, sizeof(*exe));
  atomic_init(&exe->refs, 1);
  tj_context_retain(context);  // released by destroy()
  exe->context = context;
  exe->allocator = al;
  exe->options = opts;
  exe->backend = backend;
  exe->evaluate =
      debug && debug->evaluate ? debug->evaluate : tj_pass_reference_evaluator;
  if (debug) {
    exe->debug = *debug;
    exe->debug.fuse_max_nodes = 0;
  }
  exe->log_recompiles = (tj_log_flags(context) & TJ_LOG_RECOMPILES) != 0;
  tj_graph_t* copy = NULL;
  // A copy the plan can own and rewrite (constants copied, borrowed ones
  // still borrowed).
  tj_status_t status = tj_graph_clone(graph, &copy);
  tj_plan_initialize(&exe->plan, copy);
  exe->graph = copy;
  if (!status) {
    if (pthread_mutex_init(&exe->mutex, NULL) != 0) {
      status = tj_status_make(TJ_STATUS_BACKEND_FAILURE,
                              "tj_compile: pthread_mutex_init failed");
    } else {
      exe->mutex_ready = true;
    }
  }
  if (!status) status = compile(exe, arg, debug);
  // Strings the options pointed at are the caller's: do not keep them.
  exe->options.pipeline = NULL;
  exe->options.cache_dir = NULL;
  exe->options.bisect = NULL;
  if (status) {
    destroy(exe);
    return status;
  }
  exe->compile_ms = tj_now_ms() - start;
  // From here on, compiles of an equal graph share |exe| while it lives.
  if (memo) status = tj_compile_memo_store(context, key, exe);
  if (status) {
    destroy(exe);
    return status;
  }
  *out_executable = exe;
  return NULL;
}

// options.unfused: fusion off (fuse_max_nodes 1), or, when a node cannot
// be a kernel alone (a GEMM reading a transpose, an op reading a
// generator), the smallest limit up to kMaxUnfusedLimit the fuser accepts.
enum { kMaxUnfusedLimit = 4 };

static tj_status_t compile_maybe_unfused(const tj_graph_t* graph,
                                         const tj_compile_options_t* options,
                                         const tj_backend_t* backend,
                                         const void* arg,
                                         const tj_compile_debug_t* debug,
                                         tj_executable_t** out_executable) {
  bool unfused = options && options->struct_size == sizeof(*options) &&
                 options->unfused && !(debug && debug->fuse_max_nodes);
  if (!unfused) {
    return compile_executable(graph, options, backend, arg, debug,
                              out_executable);
  }
  tj_compile_debug_t d;
  memset(&d, 0, sizeof(d));
  if (debug) d = *debug;
  tj_status_t status = NULL;
  for (uint32_t limit = 1; limit <= kMaxUnfusedLimit; ++limit) {
    tj_status_free(status);
    d.fuse_max_nodes = limit;
    status =
        compile_executable(graph, options, backend, arg, &d, out_executable);
    if (!status || tj_status_code(status) == TJ_STATUS_OUT_OF_MEMORY ||
        !strstr(tj_status_message(status), "fuse_max_nodes")) {
      break;
    }
  }
  return status;
}

tj_status_t tj_compile_with_backend(const tj_graph_t* graph,
                                    const tj_compile_options_t* options,
                                    const tj_backend_t* backend,
                                    const void* arg,
                                    const tj_compile_debug_t* debug,
                                    tj_executable_t** out_executable) {
  return compile_maybe_unfused(graph, options, backend, arg, debug,
                               out_executable);
}

tj_status_t tj_compile(const tj_graph_t* graph,
                       const tj_compile_options_t* options,
                       tj_executable_t** out_executable) {
  return compile_maybe_unfused(graph, options, NULL, NULL, NULL,
                               out_executable);
}

tj_status_t tj_compile_debug(const tj_graph_t* graph,
                             const tj_compile_options_t* options,
                             const tj_compile_debug_t* debug,
                             tj_executable_t** out_executable) {
  return compile_maybe_unfused(graph, options, NULL, NULL, debug,
                               out_executable);
}

tj_pass_eval_fn tj_executable_evaluator(const tj_executable_t* executable) {
  return executable ? executable->evaluate : tj_pass_reference_evaluator;
}

const tj_run_plan_t* tj_executable_run_plan(const tj_executable_t* executable) {
  return executable ? &executable->run_plan : NULL;
}

const tj_backend_t* tj_executable_backend(const tj_executable_t* executable,
                                          void** out_target,
                                          void** out_program) {
  *out_target = executable ? executable->target : NULL;
  *out_program = executable ? executable->generic : NULL;
  return executable ? executable->backend : NULL;
}

uint32_t tj_executable_num_host_steps(const tj_executable_t* executable) {
  return executable ? executable->run_plan.num_host_steps : 0;
}

//===--- running ---===//

// tj_executable_run; with |timing|, through the backend's run_timed (each
// step's time added to it); with |observe|, through its run_observed.
static tj_status_t run(tj_executable_t* exe, const tj_tensor_t* inputs,
                       int32_t num_inputs, const tj_tensor_t* outputs,
                       int32_t num_outputs, tj_run_timing_t* timing,
                       tj_step_observer_fn observe, void* user, bool shaped) {
  double start = tj_now_ms();
  if (!exe) return tj_invalid("tj_executable_run: executable is NULL");
  const tj_graph_t* g = exe->graph;
  const tj_backend_t* b = exe->backend;
  if (num_outputs < 0 || (uint32_t)num_outputs != g->num_outputs) {
    return tj_invalid("graph @%s makes %u outputs, got %d", g->name,
                      g->num_outputs, (int)num_outputs);
  }
  if (num_outputs > 0 && !outputs) return tj_invalid("outputs is NULL");
  TJ_RETURN_IF_ERROR(tj_custom_check_outputs(g, outputs, shaped));
  int64_t sym[TJ_MAX_SYMBOLS];
  void* program = exe->generic;
  if (b->lowers) {
    TJ_RETURN_IF_ERROR(tj_ir_bind_symbols(g, inputs, num_inputs, sym));
    // Device tensors are checked by the backends that take them.
    for (int32_t i = 0; !b->device_tensors && i < num_inputs; ++i) {
      if (inputs[i].device_type != TJ_DEVICE_CPU) {
        return tj_invalid("input \"%s\" is not a CPU tensor",
                          g->nodes[g->inputs[i]].attrs.name);
      }
    }
    TJ_RETURN_IF_ERROR(
        tj_host_check_outputs(g, outputs, sym, b->device_tensors));
    TJ_RETURN_IF_ERROR(tj_ir_check_run_memory(g, inputs, outputs));
    if (tj_executable_specializes(exe)) {
      if (exe->options.bucket_pow2) {
        tj_executable_note_bucket(exe, sym);
      } else {
        TJ_RETURN_IF_ERROR(tj_executable_choose_program(exe, sym, &program));
      }
    }
  }
  tj_status_t status;
  if (observe) {
    status = b->run_observed(exe->target, program, sym, inputs, num_inputs,
                             outputs, num_outputs, observe, user);
  } else if (timing && b->run_timed) {
    timing->setup_ms += tj_now_ms() - start;
    status = b->run_timed(exe->target, program, b->lowers ? sym : NULL, inputs,
                          num_inputs, outputs, num_outputs, timing);
  } else if (timing) {
    double now = tj_now_ms();
    timing->setup_ms += now - start;
    status = b->run(exe->target, program, b->lowers ? sym : NULL, inputs,
                    num_inputs, outputs, num_outputs);
    timing->whole_ms += tj_now_ms() - now;
  } else {
    status = b->run(exe->target, program, b->lowers ? sym : NULL, inputs,
                    num_inputs, outputs, num_outputs);
  }
  if (!status) {
    atomic_fetch_add(&exe->runs, 1);
    double ms = tj_now_ms() - start, seen = atomic_load(&exe->run_ms);
    while (!atomic_compare_exchange_weak(&exe->run_ms, &seen, seen + ms)) {
    }
  }
  return status;
}

tj_status_t tj_executable_run(tj_executable_t* executable,
                              const tj_tensor_t* inputs, int32_t num_inputs,
                              const tj_tensor_t* outputs, int32_t num_outputs) {
  return run(executable, inputs, num_inputs, outputs, num_outputs, NULL, NULL,
             NULL, false);
}

tj_status_t tj_executable_run_timed(
    tj_executable_t* executable, const tj_tensor_t* inputs, int32_t num_inputs,
    const tj_tensor_t* outputs, int32_t num_outputs, tj_run_timing_t* timing) {
  return run(executable, inputs, num_inputs, outputs, num_outputs, timing, NULL,
             NULL, false);
}

tj_status_t tj_executable_run_observed(
    tj_executable_t* executable, const tj_tensor_t* inputs, int32_t num_inputs,
    const tj_tensor_t* outputs, int32_t num_outputs,
    tj_step_observer_fn observe, void* user) {
  if (executable && observe &&
      (!executable->backend->lowers || !executable->backend->run_observed)) {
    return tj_status_make(TJ_STATUS_UNSUPPORTED,
                          "the %s target cannot show the values between its "
                          "kernels",
                          executable->backend->name);
  }
  return run(executable, inputs, num_inputs, outputs, num_outputs, NULL,
             observe, user, false);
}

tj_status_t tj_executable_run_shaped(tj_executable_t* executable,
                                     const tj_tensor_t* inputs,
                                     int32_t num_inputs,
                                     const tj_tensor_t* outputs,
                                     int32_t num_outputs, int64_t* out_shapes) {
  if (!executable) return tj_invalid("tj_executable_run: executable is NULL");
  if (num_outputs < 0 ||
      (uint32_t)num_outputs != executable->graph->num_outputs)
    return tj_invalid("graph @%s makes %u outputs, got %d",
                      executable->graph->name, executable->graph->num_outputs,
                      (int)num_outputs);
  if (num_outputs > 0 && (!outputs || !out_shapes))
    return tj_invalid(
        "tj_executable_run_shaped: outputs or out_shapes is NULL");
  // The outputs with shape arrays of the library's own (|out_shapes|),
  // where the backends write the actual dims of data-dependent ones.
  enum { kOnStack = 16 };
  tj_tensor_t stack[kOnStack];
  tj_tensor_t* own = stack;
  size_t bytes = sizeof(tj_tensor_t) * (size_t)num_outputs;
  if (num_outputs > kOnStack) {
    own = tj_alloc(executable->allocator, bytes);
    if (!own) return tj_status_oom();
  }
  tj_status_t status = NULL;
  for (int32_t i = 0; !status && i < num_outputs; ++i) {
    own[i] = outputs[i];
    if (outputs[i].rank < 0 || outputs[i].rank > TJ_MAX_RANK ||
        (outputs[i].rank > 0 && !outputs[i].shape)) {
      status =
          tj_invalid("output %d: rank %d with %s shape", (int)i,
                     (int)outputs[i].rank, outputs[i].shape ? "a" : "a NULL");
      break;
    }
    int64_t* shape = out_shapes + (size_t)i * TJ_MAX_RANK;
    for (int32_t k = 0; k < outputs[i].rank; ++k)
      shape[k] = outputs[i].shape[k];
    own[i].shape = shape;
  }
  if (!status)
    status = run(executable, inputs, num_inputs, own, num_outputs, NULL, NULL,
                 NULL, true);
  if (own != stack) tj_free(executable->allocator, own, bytes);
  return status;
}

//===--- warming up ---===//

tj_status_t tj_executable_prepare(tj_executable_t* executable,
                                  const tj_tensor_t* inputs,
                                  int32_t num_inputs) {
  tj_executable_t* exe = executable;
  if (!exe) return tj_invalid("tj_executable_prepare: executable is NULL");
  const tj_graph_t* g = exe->graph;
  const tj_backend_t* b = exe->backend;
  bool shape = inputs || num_inputs != 0;
  int64_t sym[TJ_MAX_SYMBOLS];
  if (shape) {
    if (num_inputs < 0 || (uint32_t)num_inputs != g->num_inputs) {
      return tj_invalid(
          "tj_executable_prepare: graph @%s takes %u inputs, "
          "got %d",
          g->name, g->num_inputs, (int)num_inputs);
    }
    if (!inputs) return tj_invalid("tj_executable_prepare: inputs is NULL");
    // Only dtypes and shapes are read: NULL data stands for "not yet".
    static const unsigned char kNoData[1];
    size_t bytes = sizeof(tj_tensor_t) * (size_t)(num_inputs ? num_inputs : 1);
    tj_tensor_t* bound = tj_alloc(exe->allocator, bytes);
    if (!bound) return tj_status_oom();
    for (int32_t i = 0; i < num_inputs; ++i) {
      bound[i] = inputs[i];
      if (!bound[i].data) {
        bound[i].data = (void*)kNoData;
        bound[i].byte_offset = 0;
      }
    }
    tj_status_t status = tj_ir_bind_shapes(g, bound, num_inputs, sym);
    tj_free(exe->allocator, bound, bytes);
    TJ_RETURN_IF_ERROR(status);
  }
  // The generic program's deferred code (x86: waits for the background
  // build or builds it here; with a host parallel_for nothing else does
  // before the first run).
  if (b->prepare) TJ_RETURN_IF_ERROR(b->prepare(exe->target, exe->generic));
  // The exact-shape program the first run of this shape would compile.
  if (shape && tj_executable_specializes(exe) &&
      exe->options.specialize == TJ_SPECIALIZE_ALWAYS &&
      !exe->options.bucket_pow2) {
    void* program = exe->generic;
    TJ_RETURN_IF_ERROR(tj_executable_choose_program(exe, sym, &program));
    if (program != exe->generic && b->prepare) {
      TJ_RETURN_IF_ERROR(b->prepare(exe->target, program));
    }
  }
  return NULL;
}

tj_status_t tj_executable_output_shape(const tj_executable_t* executable,
                                       const tj_tensor_t* inputs,
                                       int32_t num_inputs, int32_t output_index,
                                       int32_t* out_rank, int64_t* out_dims) {
  if (!executable) {
    return tj_invalid("tj_executable_output_shape: executable is NULL");
  }
  return tj_graph_output_shape(executable->graph, inputs, num_inputs,
                               output_index, out_rank, out_dims);
}

void tj_executable_stats(const tj_executable_t* executable,
                         tj_executable_stats_t* out_stats) {
  if (!out_stats) return;
  // 0: a zero-initialized struct of this header (`= {0}`, C++'s `{}`).
  size_t size = out_stats->struct_size ? out_stats->struct_size
                                       : sizeof(tj_executable_stats_t);
  tj_executable_stats_t st;
  memset(&st, 0, sizeof(st));
  st.struct_size = size;
  if (executable) {
    tj_executable_t* exe = (tj_executable_t*)executable;
    st.num_kernels = (int32_t)exe->run_plan.num_kernels;
    st.num_graph_breaks = (int32_t)exe->run_plan.num_host_steps;
    st.compile_ms = exe->compile_ms;
    st.cache_hits = atomic_load(&exe->cache_hits);
    st.cache_misses = atomic_load(&exe->cache_misses);
    st.recompiles = atomic_load(&exe->recompiles);
    st.runs = atomic_load(&exe->runs);
    st.num_host_calls = (int32_t)exe->run_plan.num_host_calls;
    st.passes_ms = exe->passes_ms;
    st.lowering_ms = exe->lowering_ms;
    st.llvm_ms = exe->llvm_ms;
    st.ptxas_ms = exe->ptxas_ms;
    st.tuning_ms = exe->tuning_ms;
    st.cache_load_ms = exe->cache_load_ms;
    st.run_ms = atomic_load(&exe->run_ms);
    st.num_shared_kernels = exe->num_shared_kernels;
    st.num_lowered_groups = (int32_t)exe->run_plan.num_lowered_groups;
    st.num_copied_groups = (int32_t)exe->run_plan.num_copied_groups;
    st.num_region_blocks = (int32_t)exe->region_blocks;
    st.num_region_blocks_processed = (int32_t)exe->region_blocks_processed;
    st.num_host_kernels = (int32_t)exe->run_plan.num_host_kernels;
    tj_executable_cuda_memory(executable, &st);
  }
  // The caller's struct may be an older, shorter one: only what it holds.
  memcpy(out_stats, &st, size < sizeof(st) ? size : sizeof(st));
}
