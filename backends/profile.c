// backends/profile.c: tj_executable_profile, the per-kernel profile of an
// executable's runs, for every target. The driver runs the executable with
// a tj_run_timing_t (backends/runtime/run_timing.h) that the backend's
// run_timed fills (x86: a monotonic clock around each launch; CUDA: an
// event pair around each launch), measures each run's wall time around
// it, and turns the sums into the report: one entry per kernel, per graph
// break, the copies and the set-up, largest first, with the share of the
// run each takes.

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/executable.h"
#include "kir/kernel_ir.h"
#include "lib/env.h"

typedef struct sort_item_t {
  double ms;
  int32_t index;
} sort_item_t;

static int by_time(const void* a, const void* b) {
  const sort_item_t* x = a;
  const sort_item_t* y = b;
  if (x->ms != y->ms) return x->ms < y->ms ? 1 : -1;
  return x->index < y->index ? -1 : x->index > y->index;
}

// The ops of host step |h| ("gather,add"), at most |size| bytes.
static void host_ops(const tj_host_step_t* h, char* buf, size_t size) {
  size_t len = 0;
  buf[0] = '\0';
  if (h->native) {
    snprintf(buf, size, "argtopk (native host kernel)");
    return;
  }
  const tj_graph_t* g = h->graph;
  for (uint32_t i = 0; g && i < g->num_nodes && len + 1 < size; ++i) {
    tj_op_t op = g->nodes[i].op;
    if (op == TJ_OP_INPUT || op == TJ_OP_CONSTANT) continue;
    int n = snprintf(buf + len, size - len, "%s%s", len ? "," : "",
                     tj_op_infos[op].name);
    if (n < 0 || (size_t)n >= size - len) {
      buf[len] = '\0';
      break;
    }
    len += (size_t)n;
  }
}

static void fill_rates(tj_profile_entry_t* e, double run_ms) {
  e->share = run_ms > 0 ? e->ms / run_ms : 0;
  if (e->ms > 0) {
    e->gbytes_per_s = e->bytes / (e->ms * 1e6);
    e->gflops_per_s = e->flops / (e->ms * 1e6);
  }
}

// The report of |tm| over |runs| runs of |exe| that took |run_ms| each.
static tj_status_t make_report(const tj_executable_t* exe,
                               const tj_run_timing_t* tm, int32_t runs,
                               double run_ms, tj_profile_report_t** out) {
  const tj_run_plan_t* rp = &exe->run_plan;
  uint32_t num_host = tm->num_host_steps;
  bool whole = tm->whole_ms > 0 || !exe->backend->lowers;
  uint32_t n = tm->num_kernels + num_host + (whole ? 1 : 0) + 2;
  size_t bytes = sizeof(tj_profile_report_t) +
                 sizeof(tj_profile_entry_t) * 2 * n + sizeof(sort_item_t) * n;
  unsigned char* block = tj_calloc(exe->allocator, 1, bytes);
  if (!block) return tj_status_oom();
  tj_profile_report_t* r = (tj_profile_report_t*)block;
  // Entries in plan order, then the same sorted (the report's), then the
  // sort's keys.
  tj_profile_entry_t* tmp = (tj_profile_entry_t*)(r + 1);
  tj_profile_entry_t* all = tmp + n;
  sort_item_t* order = (sort_item_t*)(all + n);
  r->allocator = exe->allocator;
  r->bytes = bytes;
  snprintf(r->graph, sizeof(r->graph), "%s",
           exe->graph->name ? exe->graph->name : "main");
  r->target = exe->backend->name;
  r->runs = runs;
  r->run_ms = run_ms;
  r->cuda_graphs_disabled = tm->graphs_disabled;
  double per = 1.0 / runs;
  uint32_t e = 0;
  for (uint32_t k = 0; k < tm->num_kernels; ++k, ++e) {
    const tj_run_kernel_timing_t* kt = &tm->kernels[k];
    tj_profile_entry_t* x = &tmp[e];
    x->kind = TJ_PROFILE_KERNEL;
    snprintf(x->name, sizeof(x->name), "%s", kt->name ? kt->name : "?");
    snprintf(x->detail, sizeof(x->detail), "%s", tj_kir_kind_name(kt->kind));
    x->ms = kt->ms * per;
    x->launches = (double)kt->launches * per;
    x->bytes = kt->bytes * per;
    x->flops = kt->flops * per;
    r->kernel_ms += x->ms;
  }
  for (uint32_t s = 0, h = 0; s < rp->num_steps && h < num_host; ++s) {
    const tj_run_step_t* st = &rp->steps[s];
    if (st->kind != TJ_RUN_STEP_HOST) continue;
    tj_profile_entry_t* x = &tmp[e++];
    x->kind = TJ_PROFILE_HOST;
    snprintf(x->name, sizeof(x->name), "host.g%u", st->group);
    host_ops(&st->host, x->detail, sizeof(x->detail));
    x->ms = tm->host_ms[h++] * per;
    r->host_ms += x->ms;
  }
  if (whole) {
    tj_profile_entry_t* x = &tmp[e++];
    x->kind = TJ_PROFILE_HOST;
    snprintf(x->name, sizeof(x->name), "%s", exe->backend->name);
    snprintf(x->detail, sizeof(x->detail), "the whole graph");
    x->ms = tm->whole_ms * per;
    r->host_ms += x->ms;
  }
  tj_profile_entry_t* copies = &tmp[e++];
  copies->kind = TJ_PROFILE_COPY;
  snprintf(copies->name, sizeof(copies->name), "copies");
  copies->ms = tm->copy_ms * per;
  r->copy_ms = copies->ms;
  tj_profile_entry_t* setup = &tmp[e++];
  setup->kind = TJ_PROFILE_SETUP;
  snprintf(setup->name, sizeof(setup->name), "setup");
  setup->ms = tm->setup_ms * per;
  r->setup_ms = setup->ms;
  r->accounted_ms = r->kernel_ms + r->host_ms + r->copy_ms + r->setup_ms;
  r->num_kernels = (int32_t)tm->num_kernels;
  r->num_entries = (int32_t)e;
  // Largest first.
  for (uint32_t i = 0; i < e; ++i) {
    fill_rates(&tmp[i], run_ms);
    order[i].ms = tmp[i].ms;
    order[i].index = (int32_t)i;
  }
  qsort(order, e, sizeof(*order), by_time);
  for (uint32_t i = 0; i < e; ++i) all[i] = tmp[order[i].index];
  r->entries = all;
  *out = r;
  return NULL;
}

tj_status_t tj_executable_profile(tj_executable_t* executable,
                                  const tj_tensor_t* inputs, int32_t num_inputs,
                                  const tj_tensor_t* outputs,
                                  int32_t num_outputs, int32_t runs,
                                  tj_profile_report_t** out_report) {
  if (!out_report) {
    return tj_invalid("tj_executable_profile: out_report is NULL");
  }
  *out_report = NULL;
  tj_executable_t* exe = executable;
  if (!exe) return tj_invalid("tj_executable_profile: executable is NULL");
  if (runs < 1) {
    return tj_invalid("tj_executable_profile: runs is %d (at least 1)",
                      (int)runs);
  }
  // The warm-up: deferred code, specializations, tuning, arena growth;
  // then wait for whatever the library builds in the background (the
  // deferred code's thread), which would otherwise share the cores with
  // the timed runs (a transformer block's first profile took 8x its
  // second).
  TJ_RETURN_IF_ERROR(
      tj_executable_run(exe, inputs, num_inputs, outputs, num_outputs));
  TJ_RETURN_IF_ERROR(tj_executable_prepare(exe, inputs, num_inputs));
  const tj_run_plan_t* rp = &exe->run_plan;
  tj_run_timing_t tm;
  memset(&tm, 0, sizeof(tm));
  tm.num_kernels = rp->num_kernels;
  // Every HOST step: graph breaks, host calls and native host kernels.
  tm.num_host_steps =
      rp->num_host_steps + rp->num_host_calls + rp->num_host_kernels;
  size_t kbytes = sizeof(tj_run_kernel_timing_t) * (tm.num_kernels + 1);
  size_t sbytes = sizeof(double) * (tm.num_host_steps + 1);
  tm.kernels = tj_calloc(exe->allocator, 1, kbytes);
  tm.host_ms = tj_calloc(exe->allocator, 1, sbytes);
  tj_status_t status = tm.kernels && tm.host_ms ? NULL : tj_status_oom();
  double total = 0;
  for (int32_t r = 0; r < runs && !status; ++r) {
    double start = tj_now_ms();
    status = tj_executable_run_timed(exe, inputs, num_inputs, outputs,
                                     num_outputs, &tm);
    total += tj_now_ms() - start;
  }
  tj_profile_report_t* report = NULL;
  if (!status) status = make_report(exe, &tm, runs, total / runs, &report);
  tj_free(exe->allocator, tm.kernels, kbytes);
  tj_free(exe->allocator, tm.host_ms, sbytes);
  if (status) return status;
  if (tj_log_flags(exe->context) & TJ_LOG_PROFILE) {
    char text[8192];
    tj_profile_report_format(report, 10, text, sizeof(text));
    tj_context_diagnostic(exe->context, TJ_SEVERITY_REMARK, "profile: %s",
                          text);
  }
  *out_report = report;
  return NULL;
}

void tj_profile_report_destroy(tj_profile_report_t* report) {
  if (report) tj_free(report->allocator, report, report->bytes);
}

// Appends to |buf| like snprintf at |*len|, counting what did not fit.
static void put(char* buf, size_t size, size_t* len, const char* format, ...)
    TJ_PRINTF_LIKE(4, 5);

static void put(char* buf, size_t size, size_t* len, const char* format, ...) {
  va_list args;
  va_start(args, format);
  char* at = *len < size ? buf + *len : NULL;
  int n = vsnprintf(at, at ? size - *len : 0, format, args);
  va_end(args);
  if (n > 0) *len += (size_t)n;
}

static void human_rate(double per_s, const char* unit, char* out, size_t size) {
  if (per_s <= 0) {
    snprintf(out, size, "-");
  } else if (per_s >= 1000) {
    snprintf(out, size, "%.1f T%s", per_s / 1000, unit);
  } else if (per_s >= 1) {
    snprintf(out, size, "%.1f G%s", per_s, unit);
  } else {
    snprintf(out, size, "%.1f M%s", per_s * 1000, unit);
  }
}

size_t tj_profile_report_format(const tj_profile_report_t* report,
                                int32_t top_n, char* buffer, size_t size) {
  if (!report) {
    if (buffer && size) buffer[0] = '\0';
    return 0;
  }
  if (!buffer) size = 0;
  const tj_profile_report_t* r = report;
  size_t len = 0;
  put(buffer, size, &len,
      "@%s on %s: %.3f ms a run (mean of %d%s); kernels %.3f ms, host %.3f "
      "ms, copies %.3f ms, setup %.3f ms; the entries account for %.1f%%\n",
      r->graph, r->target, r->run_ms, (int)r->runs,
      r->cuda_graphs_disabled ? ", CUDA graphs off" : "", r->kernel_ms,
      r->host_ms, r->copy_ms, r->setup_ms,
      r->run_ms > 0 ? 100.0 * r->accounted_ms / r->run_ms : 0.0);
  put(buffer, size, &len, "  %6s  %10s  %-32s %-12s %10s %12s %12s\n", "share",
      "ms", "name", "kind", "bytes", "bandwidth", "compute");
  int32_t n = top_n > 0 && top_n < r->num_entries ? top_n : r->num_entries;
  for (int32_t i = 0; i < n; ++i) {
    const tj_profile_entry_t* e = &r->entries[i];
    char bw[32], fl[32], by[32];
    human_rate(e->gbytes_per_s, "B/s", bw, sizeof(bw));
    human_rate(e->gflops_per_s, "FLOP/s", fl, sizeof(fl));
    if (e->bytes > 0) {
      snprintf(by, sizeof(by), "%.3g", e->bytes);
    } else {
      snprintf(by, sizeof(by), "-");
    }
    static const char* const kKinds[] = {"", "host", "copy", "setup"};
    const char* kind =
        e->kind == TJ_PROFILE_KERNEL ? e->detail : kKinds[e->kind & 3];
    put(buffer, size, &len,
        "  %5.1f%%  %10.4f  %-32s %-12s %10s %12s %12s%s%s\n", 100.0 * e->share,
        e->ms, e->name, kind, by, bw, fl,
        e->kind == TJ_PROFILE_HOST && e->detail[0] ? "  " : "",
        e->kind == TJ_PROFILE_HOST ? e->detail : "");
  }
  if (n < r->num_entries) {
    put(buffer, size, &len, "  (%d more entries)\n", (int)(r->num_entries - n));
  }
  return len;
}
