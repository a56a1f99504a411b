// backends/diagnose.c: tj_diagnose (include/tensorjit/tj_verify.h), seed
// 003's diagnostic ladder answered with measurements: profiles at two
// batch sizes (tj_executable_profile), the scoreboard, the stats, and the
// graph compiled unfused for the compile amortization. A driver layer
// file; tj-run --diagnose prints its text, Python's tensorjit.diagnose
// returns it.

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backends/executable.h"
#include "backends/verify.h"
#include "lib/base.h"
#include "lib/ir.h"
#include "tensorjit.h"

//===--- measuring ---===//

// Profiles |exe| (compiled from |g|) |runs| times at symbol values |sym|
// (by symbol id) on random inputs without edge values.
static tj_status_t profile_at(const tj_graph_t* g, tj_executable_t* exe,
                              const int64_t* sym, int32_t runs,
                              tj_profile_report_t** out) {
  tj_allocator_t al = g->allocator;
  tj_verify_tensors_t in, outs;
  memset(&in, 0, sizeof(in));
  memset(&outs, 0, sizeof(outs));
  in.allocator = outs.allocator = al;
  tj_status_t status = tj_verify_random_inputs(g, sym, 1, false, false, &in);
  if (!status) {
    status = tj_verify_make_outputs(g, in.tensors, in.count, &outs);
  }
  if (!status) {
    status = tj_executable_profile(exe, in.tensors, in.count, outs.tensors,
                                   outs.count, runs, out);
  }
  tj_verify_tensors_deinitialize(&in);
  tj_verify_tensors_deinitialize(&outs);
  return status;
}

// Profiles |exe| at |sym| and, when |grown| is not NULL, at |grown|, in
// kRounds alternating rounds of about |runs| / kRounds runs each, keeping
// each size's fastest round: a burst of load on a shared host then slows
// one round, not one size, and cannot turn the two sizes' order (the
// launch-bound verdict) or eager against compiled (the amortization).
static tj_status_t profile_rounds(const tj_graph_t* g, tj_executable_t* exe,
                                  const int64_t* sym, const int64_t* grown,
                                  int32_t runs, tj_profile_report_t** out1,
                                  tj_profile_report_t** out2) {
  enum { kRounds = 3 };
  int32_t per = runs / kRounds > 0 ? runs / kRounds : 1;
  const int64_t* sizes[2] = {sym, grown};
  tj_profile_report_t** best[2] = {out1, out2};
  tj_status_t status = NULL;
  for (int32_t round = 0; round < kRounds && !status; ++round) {
    for (int s = 0; s < 2 && !status && sizes[s]; ++s) {
      tj_profile_report_t* r = NULL;
      status = profile_at(g, exe, sizes[s], per, &r);
      if (status) break;
      if (!*best[s] || r->run_ms < (*best[s])->run_ms) {
        tj_profile_report_destroy(*best[s]);
        *best[s] = r;
      } else {
        tj_profile_report_destroy(r);
      }
    }
  }
  if (status) {
    tj_profile_report_destroy(*out1);
    *out1 = NULL;
    if (out2) {
      tj_profile_report_destroy(*out2);
      *out2 = NULL;
    }
  }
  return status;
}

static void answer(tj_diagnose_answer_t* a, const char* question, bool yes,
                   const char* if_yes) {
  a->yes = yes;
  snprintf(a->question, sizeof(a->question), "%s", question);
  snprintf(a->advice, sizeof(a->advice), "%s",
           yes ? if_yes : "nothing to do here");
}

// The amortization answer: the unfused baseline, profiled as |r1| was.
static tj_status_t amortization(const tj_graph_t* g, tj_executable_t* exe,
                                const tj_profile_report_t* r1,
                                const int64_t* sym, int32_t runs,
                                const tj_compile_options_t* options,
                                tj_diagnose_report_t* r) {
  tj_diagnose_answer_t* a = &r->answers[TJ_DIAGNOSE_COMPILING_PAYS];
  tj_compile_options_t uo = *options;
  uo.unfused = true;
  uo.autotune = TJ_AUTOTUNE_OFF;
  uo.specialize = TJ_SPECIALIZE_NEVER;
  tj_executable_t* eager = NULL;
  tj_profile_report_t* ru = NULL;
  tj_status_t status = tj_compile(g, &uo, &eager);
  if (!status) status = profile_rounds(g, eager, sym, NULL, runs, &ru, NULL);
  r->break_even_runs = -1;
  if (status) {
    if (tj_status_code(status) == TJ_STATUS_OUT_OF_MEMORY) {
      tj_executable_release(eager);
      return status;
    }
    answer(a, "Does compiling pay?", false, "");
    snprintf(a->measured, sizeof(a->measured), "no unfused baseline: %.900s",
             tj_status_message(status));
    tj_status_free(status);
    tj_executable_release(eager);
    return NULL;
  }
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  tj_executable_stats_t ue = {.struct_size = sizeof(ue)};
  tj_executable_stats(eager, &ue);
  double saving = ru->run_ms - r1->run_ms;
  double compiles = 1.0 + (double)st.recompiles;
  double cost = st.compile_ms * compiles;
  r->unfused_run_ms = ru->run_ms;
  char runs_text[64];
  if (saving > 0) {
    r->break_even_runs = (int64_t)ceil(cost / saving);
    snprintf(runs_text, sizeof(runs_text), "break-even after %lld runs",
             (long long)r->break_even_runs);
  } else {
    snprintf(runs_text, sizeof(runs_text), "never breaks even");
  }
  snprintf(a->measured, sizeof(a->measured),
           "(t_eager - t_compiled) x N > t_compile x N_compiles: eager "
           "(unfused, %d kernels) %.3f ms, compiled (%d kernels) %.3f ms, "
           "saving %.3f ms a run; compile %.1f ms x %.0f compiles (cache "
           "%lld hits / %lld misses); %s",
           (int)ue.num_kernels, ru->run_ms, (int)st.num_kernels, r1->run_ms,
           saving, st.compile_ms, compiles, (long long)st.cache_hits,
           (long long)st.cache_misses, runs_text);
  answer(a, "Does compiling pay?", saving > 0,
         "compile where a workload runs past the break-even");
  if (saving <= 0) {
    snprintf(a->advice, sizeof(a->advice),
             "leave it eager (unfused): compiling does not pay here");
  }
  tj_profile_report_destroy(ru);
  tj_executable_release(eager);
  return NULL;
}

// Every answer but the amortization, from the two profiles, the
// scoreboard and the stats.
static void answer_all(tj_diagnose_report_t* r, const tj_graph_t* g,
                       const tj_profile_report_t* r1,
                       const tj_profile_report_t* r2, const char* grown_name,
                       int64_t grown_value, const tj_scoreboard_t* sb,
                       const tj_executable_stats_t* st) {
  (void)g;
  tj_diagnose_answer_t* a = r->answers;
  // 1. Launch bound: host time (set-up, copies, graph breaks) above kernel
  // time, or a run time that does not move with the batch while the
  // kernels are short enough for launches to matter (under kShortKernelUs
  // each on average). Kernels of milliseconds whose time stays flat are
  // noise or a symbol that does not size the work, not launch overhead.
  enum { kShortKernelUs = 50 };
  double host = r1->setup_ms + r1->copy_ms + r1->host_ms;
  double ratio = r2 ? r2->run_ms / (r1->run_ms > 0 ? r1->run_ms : 1e-9) : 0;
  bool short_kernels =
      r1->kernel_ms <
      1e-3 * kShortKernelUs * (double)(st->num_kernels ? st->num_kernels : 1);
  r->run_ms = r1->run_ms;
  r->grown_run_ms = r2 ? r2->run_ms : 0;
  r->host_ms = host;
  r->kernel_ms = r1->kernel_ms;
  answer(&a[TJ_DIAGNOSE_LAUNCH_BOUND], "Am I launch bound?",
         host > r1->kernel_ms || (r2 && ratio < 1.2 && short_kernels),
         "compile, then CUDA Graphs (one launch a run)");
  snprintf(a[TJ_DIAGNOSE_LAUNCH_BOUND].measured,
           sizeof(a[TJ_DIAGNOSE_LAUNCH_BOUND].measured),
           "%.3f ms a run; %s%.3f ms at %s=%lld (x%.2f); host %.3f ms vs "
           "kernels %.3f ms",
           r1->run_ms, r2 ? "" : "(no symbol to grow) ", r2 ? r2->run_ms : 0.0,
           grown_name, (long long)grown_value, ratio, host, r1->kernel_ms);
  // 2. Fusible traffic: kernels and bytes, eager against compiled.
  const tj_scoreboard_row_t* eager = &sb->rows[TJ_STAGE_EAGER];
  const tj_scoreboard_row_t* fused = &sb->rows[TJ_STAGE_MEMPLAN];
  double em = (double)(eager->bytes_read + eager->bytes_written) / 1e6;
  double fm = (double)(fused->bytes_read + fused->bytes_written) / 1e6;
  r->eager_kernels = eager->kernels;
  r->kernels = st->num_kernels;
  answer(&a[TJ_DIAGNOSE_FUSIBLE_TRAFFIC], "Is there fusible traffic?",
         eager->kernels > st->num_kernels || em > 1.1 * fm,
         "torch.compile's fusion: done here by tj_compile");
  snprintf(a[TJ_DIAGNOSE_FUSIBLE_TRAFFIC].measured,
           sizeof(a[TJ_DIAGNOSE_FUSIBLE_TRAFFIC].measured),
           "eager %lld kernels, %.2f MB moved; compiled %d kernels, %.2f MB",
           (long long)eager->kernels, em, (int)st->num_kernels, fm);
  // 3. Recompiles over the two shapes.
  r->recompiles = st->recompiles;
  answer(&a[TJ_DIAGNOSE_RECOMPILING], "Am I recompiling?", st->recompiles > 0,
         "bucket shapes (bucket_pow2), keep dims symbolic");
  snprintf(a[TJ_DIAGNOSE_RECOMPILING].measured,
           sizeof(a[TJ_DIAGNOSE_RECOMPILING].measured),
           "%lld recompiles over 2 shapes (TJ_LOG=recompiles)",
           (long long)st->recompiles);
  // 4. Graph breaks (a native host kernel, argtopk's, is not one).
  char ops[256] = "";
  for (int32_t i = 0; i < r1->num_entries; ++i) {
    const tj_profile_entry_t* e = &r1->entries[i];
    if (e->kind != TJ_PROFILE_HOST) continue;
    if (strstr(e->detail, "(native host kernel)")) continue;
    size_t len = strlen(ops);
    snprintf(ops + len, sizeof(ops) - len, "%s%.60s (%.60s)", len ? ", " : "",
             e->name, e->detail);
  }
  r->graph_breaks = st->num_graph_breaks;
  answer(&a[TJ_DIAGNOSE_GRAPH_BREAKS], "Am I breaking graphs?",
         st->num_graph_breaks > 0, "restructure or accept");
  snprintf(a[TJ_DIAGNOSE_GRAPH_BREAKS].measured,
           sizeof(a[TJ_DIAGNOSE_GRAPH_BREAKS].measured),
           "%d graph breaks%s%s (TJ_LOG=graph_breaks)",
           (int)st->num_graph_breaks, ops[0] ? ": " : "", ops);
  if (st->num_host_kernels > 0) {
    size_t len = strlen(a[TJ_DIAGNOSE_GRAPH_BREAKS].measured);
    snprintf(a[TJ_DIAGNOSE_GRAPH_BREAKS].measured + len,
             sizeof(a[TJ_DIAGNOSE_GRAPH_BREAKS].measured) - len,
             "; %d native host kernels (argtopk), not graph breaks",
             (int)st->num_host_kernels);
  }
  // 5. One op dominating: a non-GEMM kernel with 10% of the run or more.
  const tj_profile_entry_t* top = NULL;
  for (int32_t i = 0; i < r1->num_entries && !top; ++i) {
    const tj_profile_entry_t* e = &r1->entries[i];
    if (e->kind == TJ_PROFILE_KERNEL && strcmp(e->detail, "gemm") != 0) top = e;
  }
  answer(&a[TJ_DIAGNOSE_ONE_OP_DOMINATING], "Is one op dominating?",
         top && top->share >= 0.10, "hand-write it (the profile's top entry)");
  snprintf(a[TJ_DIAGNOSE_ONE_OP_DOMINATING].measured,
           sizeof(a[TJ_DIAGNOSE_ONE_OP_DOMINATING].measured),
           "top kernel %.100s (%.20s) %.1f%%; top non-GEMM %.100s %.1f%%",
           r1->num_entries ? r1->entries[0].name : "-",
           r1->num_entries ? r1->entries[0].detail : "-",
           r1->num_entries ? 100 * r1->entries[0].share : 0.0,
           top ? top->name : "none", top ? 100 * top->share : 0.0);
  // 6. Collectives: none on one device.
  answer(&a[TJ_DIAGNOSE_COLLECTIVE], "Is a collective dominating?", false, "");
  snprintf(a[TJ_DIAGNOSE_COLLECTIVE].measured,
           sizeof(a[TJ_DIAGNOSE_COLLECTIVE].measured),
           "one device, no collectives");
  // 7. Fragmentation.
  tj_diagnose_fragmentation(r, sb->arena_bytes, sb->live_peak_bytes, st);
}

void tj_diagnose_fragmentation(tj_diagnose_report_t* r, int64_t arena_bytes,
                               int64_t live_peak_bytes,
                               const tj_executable_stats_t* st) {
  tj_diagnose_answer_t* a = &r->answers[TJ_DIAGNOSE_FRAGMENTING];
  // The arena the memory plan makes against what is live at its peak.
  double arena = (double)arena_bytes, live = (double)live_peak_bytes;
  double waste = arena > 0 ? (arena - live) / arena : 0;
  r->arena_bytes = arena_bytes;
  r->live_peak_bytes = live_peak_bytes;
  // On CUDA, the caching allocator: blocks it holds that nothing uses
  // (reserved - allocated), e.g. an arena outgrown by a larger shape,
  // which a block of another size class never reuses.
  double reserved = (double)st->device_reserved_bytes;
  double cached = reserved - (double)st->device_allocated_bytes;
  double unused = reserved > 0 ? cached / reserved : 0;
  r->device_reserved_bytes = st->device_reserved_bytes;
  r->device_allocated_bytes = st->device_allocated_bytes;
  answer(a, "Am I fragmenting?", waste > 0.25 || unused > 0.25,
         "bucket shapes; plan the arena per bucket");
  int n = snprintf(a->measured, sizeof(a->measured),
                   "arena %.2f MB, live at the peak %.2f MB (%.0f%% above it)",
                   arena / 1e6, live / 1e6, 100 * waste);
  if (reserved > 0 && n > 0 && (size_t)n < sizeof(a->measured)) {
    snprintf(a->measured + n, sizeof(a->measured) - (size_t)n,
             "; caching allocator: reserved %.2f MB, allocated %.2f MB, "
             "reserved - allocated %.2f MB (%.0f%% of it unused); peaks "
             "%.2f / %.2f MB",
             reserved / 1e6, (double)st->device_allocated_bytes / 1e6,
             cached / 1e6, 100 * unused,
             (double)st->device_peak_reserved_bytes / 1e6,
             (double)st->device_peak_allocated_bytes / 1e6);
  }
}

static void render(tj_verify_text_t* t, const tj_diagnose_report_t* r,
                   const tj_executable_stats_t* st, int32_t num_symbols,
                   const char* const* names, const int64_t* values) {
  tj_verify_text_printf(t, "diagnose");
  for (int32_t i = 0; i < num_symbols; ++i) {
    tj_verify_text_printf(t, " %s=%lld", names[i], (long long)values[i]);
  }
  tj_verify_text_printf(t, " (%s, %d runs a measurement)\n", r->target,
                        (int)r->runs);
  tj_verify_text_printf(
      t,
      "compile %.1f ms: passes %.1f, lowering %.1f, LLVM %.1f, ptxas "
      "%.1f, tuning %.1f, cache load %.1f; %d kernels, %d graph breaks\n",
      st->compile_ms, st->passes_ms, st->lowering_ms, st->llvm_ms, st->ptxas_ms,
      st->tuning_ms, st->cache_load_ms, (int)st->num_kernels,
      (int)st->num_graph_breaks);
  for (int q = 0; q < TJ_DIAGNOSE_QUESTION_COUNT_; ++q) {
    const tj_diagnose_answer_t* a = &r->answers[q];
    tj_verify_text_printf(t, "%-28s %-4s %s\n  -> %s\n", a->question,
                          a->yes ? "YES" : "no", a->measured, a->advice);
  }
}

void tj_diagnose_report_destroy(tj_diagnose_report_t* report) {
  if (!report) return;
  tj_allocator_t al = report->allocator_;
  tj_free(al, (void*)report->text, report->text_bytes_);
  tj_free(al, report, sizeof(*report));
}

tj_status_t tj_diagnose(const tj_graph_t* graph,
                        const tj_compile_options_t* options,
                        int32_t num_symbols, const char* const* names,
                        const int64_t* values, int32_t runs,
                        tj_diagnose_report_t** out_report) {
  if (!out_report) return tj_invalid("tj_diagnose: out_report is NULL");
  *out_report = NULL;
  if (!graph) return tj_invalid("tj_diagnose: graph is NULL");
  if (!graph->finalized) {
    return tj_invalid("tj_diagnose: graph @%s is not finalized", graph->name);
  }
  if (runs < 1 || runs > 100000) {
    return tj_invalid("tj_diagnose: runs is %d, not 1 to 100000", (int)runs);
  }
  if (num_symbols < 0 || num_symbols > TJ_MAX_SYMBOLS ||
      (num_symbols > 0 && (!names || !values))) {
    return tj_invalid("tj_diagnose: %d symbols without names or values",
                      (int)num_symbols);
  }
  tj_compile_options_t o;
  if (options) {
    if (options->struct_size != sizeof(*options)) {
      return tj_invalid(
          "tj_diagnose: options.struct_size is %zu, not %zu (fill the "
          "options with tj_compile_options_initialize first)",
          options->struct_size, sizeof(*options));
    }
    o = *options;
  } else {
    tj_compile_options_initialize(&o);
  }
  int64_t sym[TJ_MAX_SYMBOLS], grown[TJ_MAX_SYMBOLS];
  TJ_RETURN_IF_ERROR(
      tj_verify_bind_names(graph, num_symbols, names, values, sym));
  // The first symbol named, doubled.
  int64_t grown_values[TJ_MAX_SYMBOLS];
  for (int32_t i = 0; i < num_symbols; ++i) grown_values[i] = values[i];
  if (num_symbols > 0) grown_values[0] *= 2;
  TJ_RETURN_IF_ERROR(
      tj_verify_bind_names(graph, num_symbols, names, grown_values, grown));
  tj_allocator_t al = graph->allocator;
  tj_diagnose_report_t* r = tj_calloc(al, 1, sizeof(*r));
  if (!r) return tj_status_oom();
  r->allocator_ = al;
  r->runs = runs;
  tj_executable_t* exe = NULL;
  tj_profile_report_t *r1 = NULL, *r2 = NULL;
  tj_status_t status = tj_compile(graph, &o, &exe);
  if (!status) {
    snprintf(r->target, sizeof(r->target), "%s", exe->backend->name);
    status = profile_rounds(graph, exe, sym, num_symbols > 0 ? grown : NULL,
                            runs, &r1, &r2);
  }
  tj_scoreboard_t sb;
  if (!status) {
    status = tj_graph_scoreboard(graph, num_symbols, names, values, &sb);
  }
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  if (!status) {
    // The stats after both shapes' runs (their recompiles).
    tj_executable_stats(exe, &st);
    r->compile_ms = st.compile_ms;
    answer_all(r, graph, r1, r2, num_symbols ? names[0] : "-",
               num_symbols ? grown_values[0] : 0, &sb, &st);
    status = amortization(graph, exe, r1, sym, runs, &o, r);
  }
  if (!status) {
    tj_verify_text_t t = {al, NULL, 0, 0, false};
    render(&t, r, &st, num_symbols, names, values);
    if (t.oom) {
      tj_free(al, t.buf, t.cap);
      status = tj_status_oom();
    } else {
      r->text = t.buf;
      r->text_bytes_ = t.cap;
    }
  }
  tj_profile_report_destroy(r1);
  tj_profile_report_destroy(r2);
  tj_executable_release(exe);
  if (status) {
    tj_diagnose_report_destroy(r);
    return status;
  }
  *out_report = r;
  return NULL;
}
