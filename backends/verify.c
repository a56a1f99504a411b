// backends/verify.c: tj_verify (include/tensorjit/tj_verify.h), a driver
// layer file: it compiles, runs and observes executables through the
// compile driver's hooks (backends/compile.h).
//
// One check:
//  1. inputs: the caller's, or random ones with edge values;
//  2. the executable runs with an observer (tj_executable_run_observed)
//     that copies, after each step of the run plan, the values its fusion
//     group writes to memory: every value that crosses a group boundary;
//  3. the reference interpreter runs the executable's optimized graph with
//     those same values marked as extra outputs (a clone of the plan
//     graph), and the caller's graph for the outputs;
//  4. the values are compared in run order against per-dtype budgets; the
//     first one out of budget names the group and node;
//  5. on a mismatch, the caller's graph is compiled again with fusion off
//     (tj_compile_debug, fuse_max_nodes 1: every node its own kernel, the
//     same optimized graph before fusion, so the same node numbers) and
//     the guilty node compared there: drift or a wrong kernel.
// The report is a struct of values plus a text rendering.

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backends/executable.h"
#include "backends/reference/reference_eval.h"
#include "backends/runtime/host_tensor.h"
#include "backends/verify.h"
#include "lib/dtype.h"
#include "lib/passes/fusion.h"

//===--- options ---===//

void tj_verify_options_initialize(tj_verify_options_t* options) {
  if (!options) return;
  memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  static const struct {
    tj_dtype_t dtype;
    double tol;
  } kTol[] = {{TJ_DTYPE_F64, 1e-9},     {TJ_DTYPE_F32, 1e-4},
              {TJ_DTYPE_F16, 1e-2},     {TJ_DTYPE_BF16, 3e-2},
              {TJ_DTYPE_F8E4M3, 0.125}, {TJ_DTYPE_F8E5M2, 0.25}};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kTol); ++i) {
    options->rtol[kTol[i].dtype] = kTol[i].tol;
    options->atol[kTol[i].dtype] = kTol[i].tol;
  }
  options->drift_factor = 100.0;
  options->seed = 1;
  options->edge_values = true;
  options->unfused = true;
}

const char* tj_verify_verdict_name(tj_verify_verdict_t verdict) {
  switch (verdict) {
    case TJ_VERIFY_CLEAN:
      return "clean";
    case TJ_VERIFY_DRIFT:
      return "drift";
    case TJ_VERIFY_WRONG_FUSED_KERNEL:
      return "wrong fused kernel";
    case TJ_VERIFY_WRONG_KERNEL:
      return "wrong kernel";
    case TJ_VERIFY_WRONG_PASSES:
      return "wrong passes";
    case TJ_VERIFY_MISMATCH:
      return "mismatch";
  }
  return "?";
}

//===--- run tensors ---===//

void tj_verify_tensors_deinitialize(tj_verify_tensors_t* t) {
  if (!t) return;
  tj_allocator_t al = t->allocator;
  size_t n = (size_t)(t->count > 0 ? t->count : 0);
  for (size_t i = 0; t->data && t->bytes && i < n; ++i) {
    tj_free(al, t->data[i], t->bytes[i] ? t->bytes[i] : 1);
  }
  tj_free(al, t->tensors, n * sizeof(tj_tensor_t));
  tj_free(al, t->shapes, n * TJ_MAX_RANK * sizeof(int64_t));
  tj_free(al, t->data, n * sizeof(void*));
  tj_free(al, t->bytes, n * sizeof(size_t));
  memset(t, 0, sizeof(*t));
  t->allocator = al;
}

// |count| descriptors with no data yet.
static tj_status_t tensors_reserve(tj_allocator_t al, int32_t count,
                                   tj_verify_tensors_t* t) {
  memset(t, 0, sizeof(*t));
  t->allocator = al;
  if (count <= 0) return NULL;
  size_t n = (size_t)count;
  t->tensors = tj_calloc(al, n, sizeof(tj_tensor_t));
  t->shapes = tj_calloc(al, n * TJ_MAX_RANK, sizeof(int64_t));
  t->data = tj_calloc(al, n, sizeof(void*));
  t->bytes = tj_calloc(al, n, sizeof(size_t));
  t->count = count;
  if (!t->tensors || !t->shapes || !t->data || !t->bytes) {
    tj_verify_tensors_deinitialize(t);
    return tj_status_oom();
  }
  return NULL;
}

// Tensor |i| of |t|: |dtype| with the shape already in t->shapes, zeroed.
static tj_status_t tensor_fill(tj_verify_tensors_t* t, int32_t i,
                               tj_dtype_t dtype, int32_t rank) {
  int64_t* shape = t->shapes + (size_t)i * TJ_MAX_RANK;
  int64_t numel = 1;
  for (int32_t d = 0; d < rank; ++d) numel *= shape[d];
  size_t bytes = (size_t)numel * tj_dtype_size(dtype);
  t->data[i] = tj_calloc(t->allocator, 1, bytes ? bytes : 1);
  if (!t->data[i]) return tj_status_oom();
  t->bytes[i] = bytes;
  t->tensors[i] = tj_tensor_make(t->data[i], dtype, rank, shape);
  return NULL;
}

tj_status_t tj_verify_bind_names(const tj_graph_t* graph, int32_t num_symbols,
                                 const char* const* names,
                                 const int64_t* values, int64_t* out_sym) {
  for (int32_t i = 0; i < TJ_MAX_SYMBOLS; ++i) out_sym[i] = -1;
  if (num_symbols < 0 || (num_symbols > 0 && (!names || !values))) {
    return tj_invalid("tj_verify: %d symbols with NULL names or values",
                      (int)num_symbols);
  }
  for (int32_t i = 0; i < num_symbols; ++i) {
    uint32_t id;
    if (!names[i] || !tj_dim_find_symbol(&graph->dims, names[i], &id)) {
      return tj_invalid("graph @%s has no symbol %s", graph->name,
                        names[i] ? names[i] : "(null)");
    }
    if (values[i] < 0) {
      return tj_invalid("symbol %s = %lld: a size must be >= 0", names[i],
                        (long long)values[i]);
    }
    out_sym[id] = values[i];
  }
  return NULL;
}

typedef struct rng_t {
  uint64_t state;
} rng_t;

static uint64_t rng_next(rng_t* r) {  // splitmix64
  uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint32_t rng_below(rng_t* r, uint32_t n) {
  return (uint32_t)(rng_next(r) % n);
}

static double rng_uniform(rng_t* r, double lo, double hi) {
  return lo + (hi - lo) * (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

// A special value of |dtype|: +0, -0, a denormal, a large magnitude, and
// with |nonfinite| NaN and the infinities.
static double edge_value(rng_t* r, tj_dtype_t dtype, bool nonfinite) {
  double denormal = dtype == TJ_DTYPE_F64   ? 1e-310
                    : dtype == TJ_DTYPE_F16 ? 3e-6
                                            : 1e-40;
  double large = dtype == TJ_DTYPE_F16 || dtype == TJ_DTYPE_BF16 ? 256.0 : 1e4;
  double sign = rng_below(r, 2) ? -1.0 : 1.0;
  switch (rng_below(r, nonfinite ? 6 : 4)) {
    case 0:
      return sign * 0.0;
    case 1:
      return sign * denormal;
    case 2:
    case 3:
      return sign * large * rng_uniform(r, 0.5, 1.0);
    case 4:
      return NAN;
    default:
      return sign * INFINITY;
  }
}

tj_status_t tj_verify_random_inputs(const tj_graph_t* graph, const int64_t* sym,
                                    uint64_t seed, bool edge_values,
                                    bool nonfinite, tj_verify_tensors_t* out) {
  const tj_graph_t* g = graph;
  TJ_RETURN_IF_ERROR(
      tensors_reserve(g->allocator, (int32_t)g->num_inputs, out));
  rng_t r = {seed * 0x2545f4914f6cdd1dull + 0x5eed};
  tj_status_t status = NULL;
  for (uint32_t i = 0; !status && i < g->num_inputs; ++i) {
    const tj_node_t* n = &g->nodes[g->inputs[i]];
    int64_t* shape = out->shapes + (size_t)i * TJ_MAX_RANK;
    for (int32_t d = 0; !status && d < n->rank; ++d) {
      status = tj_dim_eval(&g->dims, n->dims[d], sym, &shape[d]);
      if (status) {
        status = tj_status_annotate(
            status,
            "input \"%s\" dim %d (give the values of its symbols: tj-run "
            "--sym NAME=N, or tj_verify_options_t.symbol_names)",
            n->attrs.name, (int)d);
      }
    }
    if (!status) status = tensor_fill(out, (int32_t)i, n->dtype, n->rank);
    if (status) break;
    int64_t numel = tj_host_numel(n->rank, shape);
    for (int64_t k = 0; k < numel; ++k) {
      if (tj_dtype_is_float(n->dtype)) {
        double v = edge_values && rng_below(&r, 16) == 0
                       ? edge_value(&r, n->dtype, nonfinite)
                       : rng_uniform(&r, -2.0, 2.0);
        tj_store_f64(n->dtype, out->data[i], k, v);
      } else if (n->dtype == TJ_DTYPE_BOOL) {
        tj_store_i64(n->dtype, out->data[i], k, (int64_t)rng_below(&r, 2));
      } else {
        tj_store_i64(n->dtype, out->data[i], k, (int64_t)rng_below(&r, 9) - 4);
      }
    }
  }
  if (status) tj_verify_tensors_deinitialize(out);
  return status;
}

tj_status_t tj_verify_make_outputs(const tj_graph_t* graph,
                                   const tj_tensor_t* inputs,
                                   int32_t num_inputs,
                                   tj_verify_tensors_t* out) {
  const tj_graph_t* g = graph;
  TJ_RETURN_IF_ERROR(
      tensors_reserve(g->allocator, (int32_t)g->num_outputs, out));
  tj_status_t status = NULL;
  for (uint32_t i = 0; !status && i < g->num_outputs; ++i) {
    int32_t rank = 0;
    status = tj_graph_output_shape(g, inputs, num_inputs, (int32_t)i, &rank,
                                   out->shapes + (size_t)i * TJ_MAX_RANK);
    if (!status) {
      status = tensor_fill(out, (int32_t)i, g->nodes[g->outputs[i].node].dtype,
                           rank);
    }
  }
  if (status) tj_verify_tensors_deinitialize(out);
  return status;
}

// The inputs of one check and the reference interpreter's run of |g| on
// them (tj_verify's and the ladder's): |*inputs| as given, or, when NULL,
// random ones made in |random| from |vo|'s symbols, seed and special
// values; |want| gets |g|'s outputs.
static tj_status_t reference_on_inputs(const tj_graph_t* g,
                                       const tj_verify_options_t* vo,
                                       tj_verify_tensors_t* random,
                                       const tj_tensor_t** inputs,
                                       int32_t* num_inputs,
                                       tj_verify_tensors_t* want) {
  if (!*inputs) {
    int64_t sym[TJ_MAX_SYMBOLS];
    TJ_RETURN_IF_ERROR(tj_verify_bind_names(
        g, vo->num_symbols, vo->symbol_names, vo->symbol_values, sym));
    TJ_RETURN_IF_ERROR(tj_verify_random_inputs(
        g, sym, vo->seed, vo->edge_values, vo->nonfinite, random));
    *inputs = random->tensors;
    *num_inputs = random->count;
  }
  TJ_RETURN_IF_ERROR(tj_verify_make_outputs(g, *inputs, *num_inputs, want));
  return tj_reference_run(g, *inputs, *num_inputs, want->tensors, want->count);
}

// The conditions of |g|'s outputs on |inputs| (tj_verify_conditions), the
// scale of their budgets. A failure other than OUT_OF_MEMORY leaves |out|
// empty, the budgets relative to |want| alone, and says why in |note|.
static tj_status_t conditions(const tj_graph_t* g, const tj_tensor_t* inputs,
                              int32_t num_inputs, const tj_verify_options_t* vo,
                              tj_verify_tensors_t* out, char* note,
                              size_t note_size) {
  tj_status_t status =
      tj_verify_conditions(g, inputs, num_inputs, vo->rtol, out);
  if (!status || tj_status_code(status) == TJ_STATUS_OUT_OF_MEMORY) {
    return status;
  }
  snprintf(note, note_size,
           "the conditions of @%s could not be computed (%s): budgets "
           "relative to |want|",
           g->name, tj_status_message(status));
  tj_status_free(status);
  return NULL;
}

static const double* condition_of(const tj_verify_tensors_t* cond, uint32_t t) {
  return cond->count > 0 ? cond->data[t] : NULL;
}

//===--- the values between the groups ---===//

// A value that crosses a group boundary: written by step |step|.
typedef struct boundary_t {
  uint32_t step, group, node;
} boundary_t;

typedef struct observed_t {
  const boundary_t* boundaries;
  uint32_t num;
  uint32_t first_output;  // tensor index of boundary 0 in |capture|
  tj_verify_tensors_t* capture;
} observed_t;

static tj_status_t observe(void* user, uint32_t step,
                           unsigned char* const* loc) {
  observed_t* o = user;
  for (uint32_t i = 0; i < o->num; ++i) {
    const boundary_t* b = &o->boundaries[i];
    if (b->step != step) continue;
    uint32_t t = o->first_output + i;
    if (o->capture->bytes[t] && loc[b->node]) {
      memcpy(o->capture->data[t], loc[b->node], o->capture->bytes[t]);
    }
  }
  return NULL;
}

// The group outputs of every step that computes (not VIEW), in run order.
static tj_status_t list_boundaries(tj_allocator_t al, const tj_run_plan_t* rp,
                                   boundary_t** out, uint32_t* out_num) {
  *out = NULL;
  *out_num = 0;
  uint32_t n = 0;
  for (uint32_t s = 0; s < rp->num_steps; ++s) {
    if (rp->steps[s].kind == TJ_RUN_STEP_VIEW) continue;
    n += rp->fusion->groups[rp->steps[s].group].num_outputs;
  }
  if (n == 0) return NULL;
  boundary_t* b = tj_calloc(al, n, sizeof(boundary_t));
  if (!b) return tj_status_oom();
  uint32_t k = 0;
  for (uint32_t s = 0; s < rp->num_steps; ++s) {
    if (rp->steps[s].kind == TJ_RUN_STEP_VIEW) continue;
    const tj_group_t* grp = &rp->fusion->groups[rp->steps[s].group];
    for (uint32_t j = 0; j < grp->num_outputs; ++j) {
      b[k].step = s;
      b[k].group = rp->steps[s].group;
      b[k].node = grp->outputs[j];
      ++k;
    }
  }
  *out = b;
  *out_num = n;
  return NULL;
}

// A clone of the plan graph |pg| with every boundary value as an extra
// output (after the graph's own).
static tj_status_t clone_with_outputs(const tj_graph_t* pg, const boundary_t* b,
                                      uint32_t num, tj_graph_t** out) {
  tj_graph_t* clone = NULL;
  TJ_RETURN_IF_ERROR(tj_graph_clone(pg, &clone));
  clone->finalized = false;
  tj_status_t status = NULL;
  for (uint32_t i = 0; !status && i < num; ++i) {
    char name[48];
    snprintf(name, sizeof(name), "tj_verify_value_%u", i);
    status = tj_graph_append_output(clone, b[i].node, name);
  }
  if (!status) status = tj_graph_finalize(clone);
  if (status) {
    tj_graph_destroy(clone);
    return status;
  }
  *out = clone;
  return NULL;
}

//===--- comparing ---===//

typedef struct stats_t {
  int64_t mismatches, nan_mismatches, first_bad;
  double max_abs, max_rel, bad_got, bad_want, bad_condition;
} stats_t;

// |scale| is what rtol is relative to: the element's condition.
static bool element_ok(double got, double want, double rtol, double atol,
                       double scale) {
  if (isnan(got) || isnan(want)) return isnan(got) && isnan(want);
  if (isinf(got) || isinf(want)) {
    return got == want || (signbit(got) == signbit(want) &&
                           fabs(isinf(want) ? got : want) > 1e30);
  }
  return fabs(got - want) <= atol + rtol * scale;
}

// Element |k|'s scale: its condition (tj_verify_conditions; NULL: none
// computed), never below |want| (a condition that is NaN, from a NaN
// among its terms, says nothing).
static double element_scale(const double* cond, int64_t k, double want) {
  double scale = fabs(want);
  if (cond && cond[k] > scale) scale = cond[k];
  return scale;
}

// |cond|: the conditions of |want|'s elements (f64), or NULL.
static void compare(tj_dtype_t dtype, const void* got, const void* want,
                    const double* cond, int64_t numel, double rtol, double atol,
                    stats_t* st) {
  memset(st, 0, sizeof(*st));
  st->first_bad = -1;
  bool is_float = tj_dtype_is_float(dtype) || tj_dtype_is_f8(dtype);
  for (int64_t k = 0; k < numel; ++k) {
    double g, w;
    if (is_float) {
      g = tj_load_f64(dtype, got, k);
      w = tj_load_f64(dtype, want, k);
    } else {
      g = (double)tj_load_i64(dtype, got, k);
      w = (double)tj_load_i64(dtype, want, k);
    }
    if (isfinite(g) && isfinite(w)) {
      double abs_err = fabs(g - w);
      if (abs_err > st->max_abs) st->max_abs = abs_err;
      if (w != 0.0 && abs_err / fabs(w) > st->max_rel) {
        st->max_rel = abs_err / fabs(w);
      }
    }
    bool ok = is_float
                  ? element_ok(g, w, rtol, atol, element_scale(cond, k, w))
                  : tj_load_i64(dtype, got, k) == tj_load_i64(dtype, want, k);
    if (ok) continue;
    ++st->mismatches;
    if (isnan(g) != isnan(w)) ++st->nan_mismatches;
    if (st->first_bad < 0) {
      st->first_bad = k;
      st->bad_got = g;
      st->bad_want = w;
      st->bad_condition = is_float ? element_scale(cond, k, w) : 0.0;
    }
  }
}

static void copy_string(char* dst, size_t size, const char* src) {
  snprintf(dst, size, "%s", src ? src : "");
}

// Fills value |v| for node |node| of |g| from |st|.
static void fill_value(tj_verify_value_t* v, const tj_graph_t* g, uint32_t node,
                       int64_t numel, const stats_t* st, double rtol,
                       double atol) {
  const tj_node_t* n = &g->nodes[node];
  v->node = node;
  copy_string(v->op, sizeof(v->op), tj_op_info(n->op)->name);
  tj_ir_format_type(g, node, v->type, sizeof(v->type));
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    if (g->outputs[i].node == node) {
      copy_string(v->output_name, sizeof(v->output_name), g->outputs[i].name);
      break;
    }
  }
  v->numel = numel;
  v->mismatches = st->mismatches;
  v->nan_mismatches = st->nan_mismatches;
  v->max_abs_error = st->max_abs;
  v->max_rel_error = st->max_rel;
  v->first_bad_index = st->first_bad;
  v->first_bad_got = st->bad_got;
  v->first_bad_want = st->bad_want;
  v->first_bad_condition = st->bad_condition;
  v->rtol = rtol;
  v->atol = atol;
}

//===--- the text ---===//

void tj_verify_text_printf(tj_verify_text_t* t, const char* format, ...) {
  if (t->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, format);
    size_t room = t->cap - t->len;
    int n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? room : 0,
                      format, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < room) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap ? t->cap * 2 : 1024;
    while (cap - t->len <= (size_t)n) cap *= 2;
    char* p = tj_realloc(t->al, t->buf, t->cap, cap);
    if (!p) {
      t->oom = true;
      return;
    }
    t->buf = p;
    t->cap = cap;
  }
}

static void text_value(tj_verify_text_t* t, const tj_verify_value_t* v) {
  if (v->against_caller) {
    tj_verify_text_printf(t, "output \"%s\" %s against the caller's graph",
                          v->output_name, v->type);
  } else {
    tj_verify_text_printf(t, "group %d (%s, step %d), node %%%u %s %s",
                          (int)v->group, v->group_kind, (int)v->step, v->node,
                          v->op, v->type);
    if (v->output_name[0])
      tj_verify_text_printf(t, " (output \"%s\")", v->output_name);
  }
}

static void render(tj_verify_text_t* t, const tj_verify_report_t* r,
                   const tj_graph_t* graph, const char* unfused_note,
                   const char* cond_note) {
  tj_verify_text_printf(
      t, "tj_verify @%s on %s: %u fusion groups, %u values compared",
      graph->name, r->target, r->num_groups, r->num_values);
  tj_verify_text_printf(t, r->boundaries
                               ? " (every group boundary and the outputs)\n"
                               : " (outputs only: the target cannot show the "
                                 "values between its kernels)\n");
  tj_verify_text_printf(t,
                        "budget per element: atol + rtol x condition (the sum "
                        "of the magnitudes of its terms)\n");
  if (cond_note[0]) tj_verify_text_printf(t, "%s\n", cond_note);
  tj_verify_text_printf(t, "verdict: %s\n", tj_verify_verdict_name(r->verdict));
  if (r->first_bad >= 0) {
    const tj_verify_value_t* v = &r->values[r->first_bad];
    tj_verify_text_printf(t, "first divergence: ");
    text_value(t, v);
    tj_verify_text_printf(
        t,
        "\n  %lld of %lld elements out of budget (atol %g + rtol %g x "
        "condition), %lld NaN-position mismatches, max abs error %.6g, max "
        "rel error %.6g\n  first bad element %lld: got %.9g, want %.9g, "
        "condition %.6g (budget %.6g)\n",
        (long long)v->mismatches, (long long)v->numel, v->atol, v->rtol,
        (long long)v->nan_mismatches, v->max_abs_error, v->max_rel_error,
        (long long)v->first_bad_index, v->first_bad_got, v->first_bad_want,
        v->first_bad_condition, v->atol + v->rtol * v->first_bad_condition);
  }
  if (unfused_note[0]) tj_verify_text_printf(t, "%s\n", unfused_note);
  tj_verify_text_printf(
      t,
      "totals: %lld elements out of budget, max abs error %.6g, "
      "max rel error %.6g\n",
      (long long)r->total_mismatches, r->max_abs_error, r->max_rel_error);
  tj_verify_text_printf(t, "%-5s %-6s %-10s %-7s %-16s %-24s %10s %12s %12s\n",
                        "step", "group", "kind", "node", "op", "type", "bad",
                        "max abs", "max rel");
  for (uint32_t i = 0; i < r->num_values; ++i) {
    const tj_verify_value_t* v = &r->values[i];
    char node[16];
    snprintf(node, sizeof(node), "%%%u", v->node);
    if (v->against_caller) {
      tj_verify_text_printf(t, "%-5s %-6s %-10s %-7s %-16s %-24s", "-", "-",
                            "output", node, v->output_name, v->type);
    } else {
      tj_verify_text_printf(t, "%-5d %-6d %-10s %-7s %-16s %-24s", (int)v->step,
                            (int)v->group, v->group_kind, node, v->op, v->type);
    }
    tj_verify_text_printf(t, " %10lld %12.4g %12.4g%s\n",
                          (long long)v->mismatches, v->max_abs_error,
                          v->max_rel_error,
                          (int32_t)i == r->first_bad ? "  <- first" : "");
  }
}

//===--- the unfused pipeline ---===//

typedef struct unfused_t {
  bool ran, comparable, within;
  stats_t vs_ref, vs_fused;
  char note[512];
} unfused_t;

// Compiles |graph| as |exe| was, with fusion off, runs it on |inputs| and
// compares node |node| (of the same optimized graph) with |want| (the
// reference) and |fused|. A failure other than OUT_OF_MEMORY is noted,
// not returned.
static tj_status_t check_unfused(tj_executable_t* exe, const tj_graph_t* graph,
                                 const tj_tensor_t* inputs, int32_t num_inputs,
                                 uint32_t node, const void* want,
                                 const double* cond, const void* fused,
                                 int64_t numel, size_t bytes, double rtol,
                                 double atol, unfused_t* u) {
  tj_allocator_t al = exe->allocator;
  tj_compile_debug_t debug = exe->debug;
  debug.lowered = NULL;  // a planted wrong kernel is the fused one's
  debug.evaluate = exe->evaluate;
  tj_compile_options_t opts = exe->options;
  opts.cache_dir = "";
  opts.unfused = true;
  tj_executable_t* unfused = NULL;
  tj_verify_tensors_t outs, capture;
  memset(&outs, 0, sizeof(outs));
  memset(&capture, 0, sizeof(capture));
  boundary_t b = {0, 0, node};
  bool found = false;
  // The least fusion the fuser can do (options.unfused).
  tj_status_t status = tj_compile_debug(graph, &opts, &debug, &unfused);
  if (!status) {
    const tj_run_plan_t* rp = tj_executable_run_plan(unfused);
    const tj_graph_t* pg = exe->run_plan.graph;
    if (rp->graph && rp->graph->num_nodes == pg->num_nodes &&
        rp->graph->nodes[node].op == pg->nodes[node].op) {
      for (uint32_t s = 0; !found && s < rp->num_steps; ++s) {
        if (rp->steps[s].kind == TJ_RUN_STEP_VIEW) continue;
        const tj_group_t* grp = &rp->fusion->groups[rp->steps[s].group];
        for (uint32_t j = 0; !found && j < grp->num_outputs; ++j) {
          if (grp->outputs[j] == node) {
            found = true;
            b.step = s;
            b.group = rp->steps[s].group;
          }
        }
      }
    }
    if (!found) {
      snprintf(u->note, sizeof(u->note),
               "unfused pipeline: node %%%u is not a value it writes to "
               "memory; not compared",
               node);
    }
  }
  if (!status && found) {
    status = tj_verify_make_outputs(graph, inputs, num_inputs, &outs);
  }
  if (!status && found) status = tensors_reserve(al, 1, &capture);
  if (!status && found) {
    capture.data[0] = tj_calloc(al, 1, bytes ? bytes : 1);
    capture.bytes[0] = bytes;
    if (!capture.data[0]) status = tj_status_oom();
  }
  if (!status && found) {
    observed_t o = {&b, 1, 0, &capture};
    status = tj_executable_run_observed(unfused, inputs, num_inputs,
                                        outs.tensors, outs.count, observe, &o);
  }
  if (!status && found) {
    tj_dtype_t dtype = exe->run_plan.graph->nodes[node].dtype;
    u->ran = true;
    u->comparable = true;
    compare(dtype, capture.data[0], want, cond, numel, rtol, atol, &u->vs_ref);
    compare(dtype, fused, capture.data[0], cond, numel, rtol, atol,
            &u->vs_fused);
    u->within = u->vs_ref.mismatches == 0;
  }
  if (status && tj_status_code(status) != TJ_STATUS_OUT_OF_MEMORY) {
    snprintf(u->note, sizeof(u->note), "unfused pipeline failed: %s",
             tj_status_message(status));
    tj_status_free(status);
    status = NULL;
  }
  tj_verify_tensors_deinitialize(&capture);
  tj_verify_tensors_deinitialize(&outs);
  tj_executable_release(unfused);
  return status;
}

//===--- the passes ---===//

// The default pipeline's passes before fusion, in order.
static const tj_pass_info_t* const kPasses[] = {
    &tj_pass_info_canonicalize, &tj_pass_info_cse,          &tj_pass_info_dce,
    &tj_pass_info_decompose,    &tj_pass_info_canonicalize, &tj_pass_info_cse,
    &tj_pass_info_dce};

// What a replay of the passes needs: the caller's graph, the hooks the
// executable was compiled with, inputs and the reference outputs.
typedef struct replay_t {
  const tj_graph_t* graph;
  tj_pass_eval_fn evaluate;
  const tj_compile_debug_t* debug;  // test_rule; may be NULL
  const tj_tensor_t* inputs;
  int32_t num_inputs;
  const tj_verify_tensors_t* want;
  const tj_verify_tensors_t* cond;  // |want|'s conditions; count 0: none
  const tj_verify_options_t* opts;
} replay_t;

// Replays kPasses[0..last] on a copy of the caller's graph with the
// TJ_BISECT budget |bisect_pass| / |limit| (-1: none), runs the result on
// the reference interpreter and compares its outputs with |want|: *out_bad
// when one leaves the budget (|out_st| gets the worst output's numbers when
// not NULL). *out_rewrites and |last_rewrite| (160 bytes, may be NULL) are
// the pass context's count and last allowed rewrite.
static tj_status_t replay(const replay_t* rp, size_t last,
                          const char* bisect_pass, int64_t limit, bool* out_bad,
                          stats_t* out_st, int64_t* out_rewrites,
                          char* last_rewrite) {
  *out_bad = false;
  tj_graph_t* clone = NULL;
  TJ_RETURN_IF_ERROR(tj_graph_clone(rp->graph, &clone));
  tj_plan_t plan;
  tj_plan_initialize(&plan, clone);
  tj_pass_ctx_t ctx;
  tj_pass_ctx_initialize(&ctx, tj_graph_context(rp->graph));
  ctx.evaluate = rp->evaluate;
  ctx.bisect_pass = bisect_pass;
  ctx.bisect_limit = limit;
  if (rp->debug) {
    ctx.test_rule = rp->debug->test_rule;
    ctx.test_rule_user = rp->debug->test_rule_user;
  }
  tj_status_t status = NULL;
  for (size_t i = 0; !status && i <= last; ++i) {
    status = tj_pipeline_run_one(&ctx, &plan, kPasses[i]);
  }
  tj_verify_tensors_t got;
  memset(&got, 0, sizeof(got));
  if (!status) {
    status =
        tj_verify_make_outputs(plan.graph, rp->inputs, rp->num_inputs, &got);
  }
  if (!status) {
    status = tj_reference_run(plan.graph, rp->inputs, rp->num_inputs,
                              got.tensors, got.count);
  }
  if (out_st) {
    memset(out_st, 0, sizeof(*out_st));
    out_st->first_bad = -1;
  }
  for (int32_t o = 0; !status && o < got.count; ++o) {
    tj_dtype_t dtype = got.tensors[o].dtype;
    stats_t st;
    compare(dtype, got.data[o], rp->want->data[o],
            rp->cond->count ? rp->cond->data[o] : NULL,
            tj_host_numel(got.tensors[o].rank, got.tensors[o].shape),
            rp->opts->rtol[dtype], rp->opts->atol[dtype], &st);
    *out_bad |= st.mismatches > 0;
    if (out_st) {
      out_st->mismatches += st.mismatches;
      if (st.max_abs > out_st->max_abs) out_st->max_abs = st.max_abs;
      if (st.max_rel > out_st->max_rel) out_st->max_rel = st.max_rel;
    }
  }
  tj_verify_tensors_deinitialize(&got);
  if (out_rewrites) *out_rewrites = ctx.rewrites;
  if (last_rewrite) copy_string(last_rewrite, 160, ctx.last_rewrite);
  tj_plan_deinitialize(&plan);
  return status;
}

// Replays the default pipeline before fusion one pass at a time and names
// the first pass after which the reference run's outputs leave the budget
// against the caller's graph (-1: none).
static tj_status_t blame_pass_index(const replay_t* rp, int32_t* out_index) {
  *out_index = -1;
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kPasses); ++i) {
    bool bad = false;
    TJ_RETURN_IF_ERROR(replay(rp, i, NULL, -1, &bad, NULL, NULL, NULL));
    if (bad) {
      *out_index = (int32_t)i;
      return NULL;
    }
  }
  return NULL;
}

// TJ_BISECT over the blamed pass (kPasses[index], counted over all its runs
// up to that position): the least N for which the replay with "PASS:N"
// leaves the budget, by bisection between 0 rewrites (clean) and all of
// them. *out_total: all of them; *out_first: N (-1 when 0 rewrites are
// already wrong, or all of them are not); |node| (160 bytes): the Nth
// rewrite's pass and node.
static tj_status_t bisect_rewrites(const replay_t* rp, size_t index,
                                   int64_t* out_total, int64_t* out_first,
                                   char* node) {
  const char* pass = kPasses[index]->name;
  *out_first = -1;
  node[0] = '\0';
  bool bad = false;
  TJ_RETURN_IF_ERROR(replay(rp, index, pass, -1, &bad, NULL, out_total, NULL));
  if (!bad) return NULL;
  TJ_RETURN_IF_ERROR(replay(rp, index, pass, 0, &bad, NULL, NULL, NULL));
  if (bad) return NULL;
  int64_t lo = 0, hi = *out_total;  // clean at lo, wrong at hi
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    TJ_RETURN_IF_ERROR(replay(rp, index, pass, mid, &bad, NULL, NULL, NULL));
    if (bad) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  int64_t counted = 0;
  TJ_RETURN_IF_ERROR(replay(rp, index, pass, hi, &bad, NULL, &counted, node));
  *out_first = hi;
  return NULL;
}

static tj_status_t blame_pass(tj_executable_t* exe, const tj_graph_t* graph,
                              const tj_tensor_t* inputs, int32_t num_inputs,
                              const tj_verify_tensors_t* want,
                              const tj_verify_tensors_t* cond,
                              const tj_verify_options_t* opts,
                              tj_verify_report_t* r) {
  replay_t rp = {graph,      exe->evaluate, &exe->debug, inputs,
                 num_inputs, want,          cond,        opts};
  int32_t index = -1;
  TJ_RETURN_IF_ERROR(blame_pass_index(&rp, &index));
  if (index >= 0) {
    copy_string(r->blamed_pass, sizeof(r->blamed_pass), kPasses[index]->name);
    r->blamed_pass_index = index;
  }
  return NULL;
}

//===--- tj_verify ---===//

void tj_verify_report_destroy(tj_verify_report_t* report) {
  if (!report) return;
  tj_allocator_t al = report->allocator_;
  tj_free(al, (void*)report->text, report->text_bytes_);
  tj_free(al, report->values, report->num_values * sizeof(tj_verify_value_t));
  tj_free(al, report, sizeof(*report));
}

static tj_status_t check_args(tj_executable_t* exe, const tj_graph_t* graph,
                              const tj_tensor_t* inputs, int32_t num_inputs,
                              const tj_verify_options_t* options) {
  if (!exe) return tj_invalid("tj_verify: executable is NULL");
  if (!graph) return tj_invalid("tj_verify: graph is NULL");
  if (!graph->finalized) {
    return tj_invalid("tj_verify: graph @%s is not finalized", graph->name);
  }
  if (options && options->struct_size != sizeof(*options)) {
    return tj_invalid(
        "tj_verify: options.struct_size is %zu, not %zu (fill the options "
        "with tj_verify_options_initialize first)",
        options->struct_size, sizeof(*options));
  }
  const tj_graph_t* pg = exe->run_plan.graph;
  if (pg->num_inputs != graph->num_inputs ||
      pg->num_outputs != graph->num_outputs) {
    return tj_invalid(
        "tj_verify: graph @%s (%u inputs, %u outputs) is not the graph the "
        "executable was compiled from (@%s: %u inputs, %u outputs)",
        graph->name, graph->num_inputs, graph->num_outputs, pg->name,
        pg->num_inputs, pg->num_outputs);
  }
  if (num_inputs < 0 || (num_inputs > 0 && !inputs) ||
      (inputs && (uint32_t)num_inputs != graph->num_inputs)) {
    return tj_invalid("tj_verify: graph @%s takes %u inputs, got %d",
                      graph->name, graph->num_inputs, (int)num_inputs);
  }
  if (options) {
    for (int d = 0; d < TJ_DTYPE_COUNT_; ++d) {
      if (!(options->rtol[d] >= 0) || !(options->atol[d] >= 0)) {
        return tj_invalid("tj_verify: the %s budget is rtol %g, atol %g",
                          tj_dtype_name((tj_dtype_t)d), options->rtol[d],
                          options->atol[d]);
      }
    }
  }
  return NULL;
}

// Everything one tj_verify call holds.
typedef struct verify_t {
  tj_executable_t* exe;
  const tj_graph_t* graph;
  tj_verify_options_t opts;
  tj_allocator_t al;
  tj_verify_tensors_t random_inputs;
  const tj_tensor_t* inputs;
  int32_t num_inputs;
  boundary_t* boundaries;
  uint32_t num_boundaries;
  tj_graph_t* clone;              // plan graph + boundary outputs
  tj_verify_tensors_t want_plan;  // reference of |clone|
  tj_verify_tensors_t got_plan;   // captured values (same shapes)
  tj_verify_tensors_t want_out;   // reference of the caller's graph
  tj_verify_tensors_t got_out;    // the executable's outputs
  // The conditions of |want_plan| and |want_out| (count 0: none; then
  // |cond_note| says why).
  tj_verify_tensors_t cond_plan, cond_out;
  char cond_note[256];
  // The reference run of the caller's graph and its conditions: |want_out|
  // and |cond_out|, or the ladder's, made once for every rung.
  const tj_verify_tensors_t* want_o;
  const tj_verify_tensors_t* cond_o;
  tj_verify_report_t* report;
  unfused_t unfused;
} verify_t;

static void verify_deinitialize(verify_t* v) {
  tj_verify_tensors_deinitialize(&v->random_inputs);
  tj_verify_tensors_deinitialize(&v->want_plan);
  tj_verify_tensors_deinitialize(&v->got_plan);
  tj_verify_tensors_deinitialize(&v->want_out);
  tj_verify_tensors_deinitialize(&v->got_out);
  tj_verify_tensors_deinitialize(&v->cond_plan);
  tj_verify_tensors_deinitialize(&v->cond_out);
  tj_graph_destroy(v->clone);
  tj_free(v->al, v->boundaries, v->num_boundaries * sizeof(boundary_t));
  tj_verify_report_destroy(v->report);
}

// Steps 1-3: inputs, the observed run, the reference runs.
static tj_status_t run_all(verify_t* v) {
  tj_executable_t* exe = v->exe;
  const tj_graph_t* g = v->graph;
  if (!v->want_o) {
    TJ_RETURN_IF_ERROR(reference_on_inputs(g, &v->opts, &v->random_inputs,
                                           &v->inputs, &v->num_inputs,
                                           &v->want_out));
    TJ_RETURN_IF_ERROR(conditions(g, v->inputs, v->num_inputs, &v->opts,
                                  &v->cond_out, v->cond_note,
                                  sizeof(v->cond_note)));
    v->want_o = &v->want_out;
    v->cond_o = &v->cond_out;
  }
  TJ_RETURN_IF_ERROR(
      tj_verify_make_outputs(g, v->inputs, v->num_inputs, &v->got_out));
  const tj_backend_t* b = exe->backend;
  bool boundaries = b->lowers && b->run_observed;
  v->report->boundaries = boundaries;
  if (!boundaries) {
    return tj_executable_run(exe, v->inputs, v->num_inputs, v->got_out.tensors,
                             v->got_out.count);
  }
  const tj_run_plan_t* rp = &exe->run_plan;
  TJ_RETURN_IF_ERROR(
      list_boundaries(v->al, rp, &v->boundaries, &v->num_boundaries));
  TJ_RETURN_IF_ERROR(clone_with_outputs(rp->graph, v->boundaries,
                                        v->num_boundaries, &v->clone));
  TJ_RETURN_IF_ERROR(tj_verify_make_outputs(v->clone, v->inputs, v->num_inputs,
                                            &v->want_plan));
  TJ_RETURN_IF_ERROR(
      tj_verify_make_outputs(v->clone, v->inputs, v->num_inputs, &v->got_plan));
  TJ_RETURN_IF_ERROR(tj_reference_run(v->clone, v->inputs, v->num_inputs,
                                      v->want_plan.tensors,
                                      v->want_plan.count));
  TJ_RETURN_IF_ERROR(conditions(v->clone, v->inputs, v->num_inputs, &v->opts,
                                &v->cond_plan, v->cond_note,
                                sizeof(v->cond_note)));
  observed_t o = {v->boundaries, v->num_boundaries, rp->graph->num_outputs,
                  &v->got_plan};
  return tj_executable_run_observed(exe, v->inputs, v->num_inputs,
                                    v->got_out.tensors, v->got_out.count,
                                    observe, &o);
}

// Step 4: the values, in run order, then the outputs.
static tj_status_t compare_all(verify_t* v) {
  tj_verify_report_t* r = v->report;
  const tj_graph_t* g = v->graph;
  uint32_t n = v->num_boundaries + g->num_outputs;
  r->values = tj_calloc(v->al, n ? n : 1, sizeof(tj_verify_value_t));
  if (!r->values) return tj_status_oom();
  r->num_values = n;
  r->first_bad = -1;
  const tj_run_plan_t* rp = &v->exe->run_plan;
  const tj_graph_t* pg = rp->graph;
  for (uint32_t i = 0; i < n; ++i) {
    tj_verify_value_t* val = &r->values[i];
    bool boundary = i < v->num_boundaries;
    const tj_graph_t* vg = boundary ? pg : g;
    uint32_t t = boundary ? pg->num_outputs + i : i - v->num_boundaries;
    uint32_t node = boundary ? v->boundaries[i].node : g->outputs[t].node;
    const tj_verify_tensors_t* got = boundary ? &v->got_plan : &v->got_out;
    const tj_verify_tensors_t* want = boundary ? &v->want_plan : v->want_o;
    const double* cond = condition_of(boundary ? &v->cond_plan : v->cond_o, t);
    tj_dtype_t dtype = vg->nodes[node].dtype;
    double rtol = v->opts.rtol[dtype], atol = v->opts.atol[dtype];
    int64_t numel = tj_host_numel(got->tensors[t].rank, got->tensors[t].shape);
    stats_t st;
    compare(dtype, got->data[t], want->data[t], cond, numel, rtol, atol, &st);
    fill_value(val, vg, node, numel, &st, rtol, atol);
    if (boundary) {
      const boundary_t* b = &v->boundaries[i];
      val->step = (int32_t)b->step;
      val->group = (int32_t)b->group;
      copy_string(val->group_kind, sizeof(val->group_kind),
                  rp->steps[b->step].kind == TJ_RUN_STEP_HOST
                      ? "host"
                      : tj_group_kind_name(rp->fusion->groups[b->group].kind));
    } else {
      val->step = -1;
      val->group = -1;
      val->against_caller = true;
      copy_string(val->output_name, sizeof(val->output_name),
                  g->outputs[t].name);
    }
    r->total_mismatches += st.mismatches;
    if (st.max_abs > r->max_abs_error) r->max_abs_error = st.max_abs;
    if (st.max_rel > r->max_rel_error) r->max_rel_error = st.max_rel;
    if (st.mismatches && r->first_bad < 0) r->first_bad = (int32_t)i;
  }
  return NULL;
}

// Step 5: the verdict.
static tj_status_t judge(verify_t* v) {
  tj_verify_report_t* r = v->report;
  if (r->first_bad < 0) {
    r->verdict = TJ_VERIFY_CLEAN;
    return NULL;
  }
  const tj_verify_value_t* bad = &r->values[r->first_bad];
  if (bad->against_caller) {
    // Every boundary agreed with the optimized graph's reference.
    r->verdict = r->boundaries ? TJ_VERIFY_WRONG_PASSES : TJ_VERIFY_MISMATCH;
    if (!r->boundaries) return NULL;
    tj_status_t status = blame_pass(v->exe, v->graph, v->inputs, v->num_inputs,
                                    v->want_o, v->cond_o, &v->opts, r);
    if (status && tj_status_code(status) == TJ_STATUS_OUT_OF_MEMORY) {
      return status;
    }
    if (status) {
      snprintf(v->unfused.note, sizeof(v->unfused.note),
               "replaying the passes failed: %s", tj_status_message(status));
      tj_status_free(status);
    } else if (r->blamed_pass_index >= 0) {
      snprintf(v->unfused.note, sizeof(v->unfused.note),
               "the passes: the outputs leave the budget after pass %d of "
               "the default pipeline, %s (canonicalize, cse, dce, decompose, "
               "canonicalize, cse, dce replayed on the reference)",
               (int)r->blamed_pass_index, r->blamed_pass);
    } else {
      snprintf(v->unfused.note, sizeof(v->unfused.note),
               "the passes: no pass of the default pipeline before fusion "
               "changes the outputs when replayed alone");
    }
    return NULL;
  }
  r->verdict = TJ_VERIFY_MISMATCH;
  if (!v->opts.unfused) return NULL;
  uint32_t t = v->exe->run_plan.graph->num_outputs + (uint32_t)r->first_bad;
  unfused_t* u = &v->unfused;
  const double* cond = condition_of(&v->cond_plan, t);
  TJ_RETURN_IF_ERROR(
      check_unfused(v->exe, v->graph, v->inputs, v->num_inputs, bad->node,
                    v->want_plan.data[t], cond, v->got_plan.data[t], bad->numel,
                    v->got_plan.bytes[t], bad->rtol, bad->atol, u));
  if (!u->ran) return NULL;
  r->unfused_ran = true;
  r->unfused_within_budget = u->within;
  r->unfused_max_abs_error = u->vs_ref.max_abs;
  r->unfused_max_rel_error = u->vs_ref.max_rel;
  r->unfused_mismatches = u->vs_ref.mismatches;
  r->fused_unfused_mismatches = u->vs_fused.mismatches;
  const char* why;
  if (u->within) {
    r->verdict = TJ_VERIFY_WRONG_FUSED_KERNEL;
    why =
        "the unfused pipeline agrees with the reference there: the fused "
        "kernel of this group is wrong";
  } else {
    // Drift: both pipelines leave the reference alike and not by much.
    bool alike = u->vs_fused.mismatches == 0 && bad->nan_mismatches == 0;
    double f = v->opts.drift_factor;
    stats_t loose;
    compare(v->exe->run_plan.graph->nodes[bad->node].dtype, v->got_plan.data[t],
            v->want_plan.data[t], cond, bad->numel, bad->rtol * f,
            bad->atol * f, &loose);
    if (alike && loose.mismatches == 0) {
      r->verdict = TJ_VERIFY_DRIFT;
      why =
          "the unfused pipeline leaves the reference alike and within the "
          "drift factor: summation order, not a bug";
    } else {
      r->verdict = TJ_VERIFY_WRONG_KERNEL;
      why =
          "the unfused pipeline is wrong there too: the op's own kernel is "
          "wrong";
    }
  }
  snprintf(u->note, sizeof(u->note),
           "unfused pipeline at %%%u: %lld elements out of budget, max abs "
           "error %.6g, max rel error %.6g; against the fused values %lld "
           "out of budget: %s",
           bad->node, (long long)u->vs_ref.mismatches, u->vs_ref.max_abs,
           u->vs_ref.max_rel, (long long)u->vs_fused.mismatches, why);
  return NULL;
}

// tj_verify; |want| and |cond| (both or neither), when given, are the
// reference run of |graph| on |inputs| and its conditions.
static tj_status_t verify_with(tj_executable_t* executable,
                               const tj_graph_t* graph,
                               const tj_tensor_t* inputs, int32_t num_inputs,
                               const tj_verify_options_t* options,
                               const tj_verify_tensors_t* want,
                               const tj_verify_tensors_t* cond,
                               tj_verify_report_t** out_report) {
  if (!out_report) return tj_invalid("tj_verify: out_report is NULL");
  *out_report = NULL;
  TJ_RETURN_IF_ERROR(
      check_args(executable, graph, inputs, num_inputs, options));
  verify_t v;
  memset(&v, 0, sizeof(v));
  v.exe = executable;
  v.graph = graph;
  v.al = executable->allocator;
  v.random_inputs.allocator = v.al;
  if (options) {
    v.opts = *options;
  } else {
    tj_verify_options_initialize(&v.opts);
  }
  v.inputs = inputs;
  v.num_inputs = num_inputs;
  v.want_o = want;
  v.cond_o = cond;
  v.report = tj_calloc(v.al, 1, sizeof(tj_verify_report_t));
  if (!v.report) return tj_status_oom();
  v.report->allocator_ = v.al;
  v.report->blamed_pass_index = -1;
  copy_string(v.report->target, sizeof(v.report->target),
              executable->backend->name);
  v.report->num_groups =
      executable->run_plan.fusion ? executable->run_plan.fusion->num_groups : 0;
  tj_status_t status = run_all(&v);
  if (!status) status = compare_all(&v);
  if (!status) status = judge(&v);
  if (!status) {
    tj_verify_text_t t = {v.al, NULL, 0, 0, false};
    render(&t, v.report, graph, v.unfused.note, v.cond_note);
    if (t.oom) {
      tj_free(v.al, t.buf, t.cap);
      status = tj_status_oom();
    } else {
      v.report->text = t.buf;
      v.report->text_bytes_ = t.cap;
    }
  }
  if (status) {
    verify_deinitialize(&v);
    return status;
  }
  *out_report = v.report;
  v.report = NULL;
  verify_deinitialize(&v);
  return NULL;
}

tj_status_t tj_verify(tj_executable_t* executable, const tj_graph_t* graph,
                      const tj_tensor_t* inputs, int32_t num_inputs,
                      const tj_verify_options_t* options,
                      tj_verify_report_t** out_report) {
  return verify_with(executable, graph, inputs, num_inputs, options, NULL, NULL,
                     out_report);
}

//===--- the ladder ---===//

const char* tj_ladder_level_name(tj_ladder_level_t level) {
  switch (level) {
    case TJ_LADDER_DECOMPOSED:
      return "decomposed";
    case TJ_LADDER_UNFUSED:
      return "unfused";
    case TJ_LADDER_FUSED:
      return "fused";
    case TJ_LADDER_FULL:
      return "full";
    case TJ_LADDER_SPECIALIZED:
      return "specialized";
    case TJ_LADDER_LEVEL_COUNT_:
      break;
  }
  return "?";
}

void tj_ladder_report_destroy(tj_ladder_report_t* report) {
  if (!report) return;
  tj_allocator_t al = report->allocator_;
  tj_free(al, (void*)report->text, report->text_bytes_);
  tj_free(al, report, sizeof(*report));
}

// Everything one tj_verify_ladder call holds.
typedef struct ladder_t {
  const tj_graph_t* graph;
  tj_compile_options_t copts;
  const tj_compile_debug_t* debug;  // the test hooks; NULL
  tj_verify_options_t vopts;
  tj_allocator_t al;
  tj_verify_tensors_t random_inputs;
  const tj_tensor_t* inputs;
  int32_t num_inputs;
  tj_verify_tensors_t want;  // the reference run of |graph|
  tj_verify_tensors_t cond;  // |want|'s conditions (count 0: none)
  char cond_note[256];
  // The caller's TJ_BISECT budget (options.bisect, NULL: the context's):
  // the compiled rungs compile with it, the decomposed rung replays with
  // it. |bisect_limit| -1: none.
  const char* bisect_pass;
  int64_t bisect_limit;
  tj_ladder_report_t* r;
} ladder_t;

static const char* const kBlame[TJ_LADDER_LEVEL_COUNT_] = {
    "passes", "kernel", "fusion", "options", "specialization"};

static const char* const kBlameText[TJ_LADDER_LEVEL_COUNT_] = {
    "a pass before fusion changes the values",
    "one op's kernel is wrong (its lowering or code generation)",
    "fusion: a fused kernel is wrong",
    "the caller's options (autotuning: a GEMM candidate)",
    "specialization: the shape's own program is wrong"};

// A compiled rung: compiled for its level, checked by tj_verify (outputs
// against the caller's graph, and on x86 and CUDA every group boundary).
static tj_status_t ladder_compiled(ladder_t* L, tj_ladder_rung_t* rung) {
  tj_compile_options_t o = L->copts;
  o.bucket_pow2 = false;
  o.specialize = TJ_SPECIALIZE_NEVER;
  o.unfused = false;
  switch (rung->level) {
    case TJ_LADDER_UNFUSED:
      o.unfused = true;
      o.autotune = TJ_AUTOTUNE_OFF;
      break;
    case TJ_LADDER_FUSED:
      o.autotune = TJ_AUTOTUNE_OFF;
      break;
    case TJ_LADDER_SPECIALIZED:
      if (tj_dim_num_symbols(&L->graph->dims) == 0) {
        copy_string(rung->note, sizeof(rung->note),
                    "skipped: the graph has no symbols to specialize on");
        return NULL;
      }
      o.specialize = TJ_SPECIALIZE_ALWAYS;
      break;
    default:
      break;
  }
  tj_executable_t* exe = NULL;
  double start = tj_now_ms();
  tj_status_t status = L->debug ? tj_compile_debug(L->graph, &o, L->debug, &exe)
                                : tj_compile(L->graph, &o, &exe);
  rung->compile_ms = tj_now_ms() - start;
  tj_verify_report_t* rep = NULL;
  if (!status) {
    tj_verify_options_t vo = L->vopts;
    vo.unfused = false;
    status = verify_with(exe, L->graph, L->inputs, L->num_inputs, &vo, &L->want,
                         &L->cond, &rep);
    if (status && tj_status_code(status) != TJ_STATUS_OUT_OF_MEMORY) {
      status = tj_status_annotate(status, "running it");
    }
  } else if (tj_status_code(status) != TJ_STATUS_OUT_OF_MEMORY) {
    status = tj_status_annotate(status, "compiling it");
  }
  tj_executable_release(exe);
  if (status) {
    if (tj_status_code(status) == TJ_STATUS_OUT_OF_MEMORY) return status;
    snprintf(rung->note, sizeof(rung->note), "not climbed: %s",
             tj_status_message(status));
    tj_status_free(status);
    return NULL;
  }
  rung->ran = true;
  for (uint32_t i = 0; i < rep->num_values; ++i) {
    const tj_verify_value_t* v = &rep->values[i];
    if (!v->against_caller) continue;
    rung->mismatches += v->mismatches;
    if (v->max_abs_error > rung->max_abs_error) {
      rung->max_abs_error = v->max_abs_error;
    }
    if (v->max_rel_error > rung->max_rel_error) {
      rung->max_rel_error = v->max_rel_error;
    }
  }
  rung->diverges = rung->mismatches > 0;
  if (rung->diverges && rep->first_bad >= 0) {
    const tj_verify_value_t* v = &rep->values[rep->first_bad];
    if (v->against_caller) {
      snprintf(rung->first_value, sizeof(rung->first_value),
               "output \"%.48s\" %.80s (no group boundary diverges first)",
               v->output_name, v->type);
    } else {
      snprintf(rung->first_value, sizeof(rung->first_value),
               "group %d (%s, step %d), node %%%u %s %.60s: %lld of %lld out "
               "of budget",
               (int)v->group, v->group_kind, (int)v->step, v->node, v->op,
               v->type, (long long)v->mismatches, (long long)v->numel);
    }
  }
  tj_verify_report_destroy(rep);
  return NULL;
}

static tj_status_t ladder_climb(ladder_t* L) {
  tj_ladder_report_t* r = L->r;
  const tj_graph_t* g = L->graph;
  TJ_RETURN_IF_ERROR(reference_on_inputs(g, &L->vopts, &L->random_inputs,
                                         &L->inputs, &L->num_inputs, &L->want));
  TJ_RETURN_IF_ERROR(conditions(g, L->inputs, L->num_inputs, &L->vopts,
                                &L->cond, L->cond_note, sizeof(L->cond_note)));
  replay_t rp = {g,
                 L->debug && L->debug->evaluate ? L->debug->evaluate
                                                : tj_pass_reference_evaluator,
                 L->debug,
                 L->inputs,
                 L->num_inputs,
                 &L->want,
                 &L->cond,
                 &L->vopts};
  for (int l = 0; l < TJ_LADDER_LEVEL_COUNT_; ++l) {
    r->rungs[l].level = (tj_ladder_level_t)l;
  }
  // The decomposed rung: the passes on the reference interpreter.
  tj_ladder_rung_t* d = &r->rungs[TJ_LADDER_DECOMPOSED];
  stats_t st;
  bool bad = false;
  tj_status_t status = replay(&rp, TJ_ARRAY_SIZE(kPasses) - 1, L->bisect_pass,
                              L->bisect_limit, &bad, &st, NULL, NULL);
  if (status && tj_status_code(status) == TJ_STATUS_OUT_OF_MEMORY) {
    return status;
  }
  if (status) {
    snprintf(d->note, sizeof(d->note), "not climbed: the passes failed: %s",
             tj_status_message(status));
    tj_status_free(status);
  } else {
    d->ran = true;
    d->diverges = bad;
    d->mismatches = st.mismatches;
    d->max_abs_error = st.max_abs;
    d->max_rel_error = st.max_rel;
  }
  for (int l = TJ_LADDER_UNFUSED; l < TJ_LADDER_LEVEL_COUNT_; ++l) {
    TJ_RETURN_IF_ERROR(ladder_compiled(L, &r->rungs[l]));
  }
  r->first_diverging = -1;
  for (int l = 0; l < TJ_LADDER_LEVEL_COUNT_ && r->first_diverging < 0; ++l) {
    if (r->rungs[l].ran && r->rungs[l].diverges) r->first_diverging = l;
  }
  if (r->first_diverging < 0) return NULL;
  copy_string(r->blame, sizeof(r->blame), kBlame[r->first_diverging]);
  if (r->first_diverging != TJ_LADDER_DECOMPOSED) return NULL;
  int32_t index = -1;
  TJ_RETURN_IF_ERROR(blame_pass_index(&rp, &index));
  if (index < 0) return NULL;
  copy_string(r->blamed_pass, sizeof(r->blamed_pass), kPasses[index]->name);
  r->blamed_pass_index = index;
  return bisect_rewrites(&rp, (size_t)index, &r->pass_rewrites, &r->bad_rewrite,
                         r->bad_rewrite_node);
}

static void render_ladder(tj_verify_text_t* t, const ladder_t* L) {
  const tj_ladder_report_t* r = L->r;
  const tj_verify_options_t* o = &L->vopts;
  const char* target = L->copts.target == TJ_TARGET_CUDA        ? "cuda"
                       : L->copts.target == TJ_TARGET_REFERENCE ? "reference"
                                                                : "x86";
  tj_verify_text_printf(
      t,
      "tj_verify_ladder @%s on %s: every rung on the same inputs "
      "against the reference (budget atol + rtol x condition, the sum of the "
      "magnitudes of the terms: f32 rtol %g atol %g, f64 rtol %g atol %g)\n",
      L->graph->name, target, o->rtol[TJ_DTYPE_F32], o->atol[TJ_DTYPE_F32],
      o->rtol[TJ_DTYPE_F64], o->atol[TJ_DTYPE_F64]);
  if (L->cond_note[0]) tj_verify_text_printf(t, "%s\n", L->cond_note);
  if (L->bisect_limit >= 0) {
    tj_verify_text_printf(
        t, "every rung under the rewrite budget TJ_BISECT=%s%s%lld\n",
        L->bisect_pass ? L->bisect_pass : "", L->bisect_pass ? ":" : "",
        (long long)L->bisect_limit);
  }
  tj_verify_text_printf(t, "%-4s %-12s %-9s %10s %12s %12s %11s\n", "rung",
                        "level", "verdict", "bad", "max abs", "max rel",
                        "compile ms");
  for (int l = 0; l < TJ_LADDER_LEVEL_COUNT_; ++l) {
    const tj_ladder_rung_t* g = &r->rungs[l];
    const char* verdict = !g->ran ? "-" : g->diverges ? "DIVERGES" : "clean";
    tj_verify_text_printf(t, "%-4d %-12s %-9s", l,
                          tj_ladder_level_name(g->level), verdict);
    if (g->ran) {
      tj_verify_text_printf(t, " %10lld %12.4g %12.4g %11.1f",
                            (long long)g->mismatches, g->max_abs_error,
                            g->max_rel_error, g->compile_ms);
    }
    tj_verify_text_printf(t, "%s\n",
                          l == r->first_diverging ? "  <- first" : "");
    if (g->note[0]) tj_verify_text_printf(t, "       %s\n", g->note);
    if (g->first_value[0]) {
      tj_verify_text_printf(t, "       first diverging value: %s\n",
                            g->first_value);
    }
  }
  if (r->first_diverging < 0) {
    tj_verify_text_printf(t, "verdict: every rung agrees with the reference\n");
    return;
  }
  tj_verify_text_printf(
      t, "verdict: first diverging rung %d (%s): blame %s: %s\n",
      (int)r->first_diverging,
      tj_ladder_level_name((tj_ladder_level_t)r->first_diverging), r->blame,
      kBlameText[r->first_diverging]);
  if (r->first_diverging != TJ_LADDER_DECOMPOSED) return;
  if (r->blamed_pass_index < 0) {
    tj_verify_text_printf(
        t,
        "blamed pass: none alone (no pass replayed one at a time "
        "changes the outputs)\n");
    return;
  }
  tj_verify_text_printf(
      t,
      "blamed pass: %s (position %d of canonicalize, cse, dce, "
      "decompose, canonicalize, cse, dce)\n",
      r->blamed_pass, (int)r->blamed_pass_index);
  if (r->bad_rewrite < 0) {
    tj_verify_text_printf(
        t,
        "bisect: %lld rewrites of %s; no single rewrite isolated "
        "(zero rewrites already diverge)\n",
        (long long)r->pass_rewrites, r->blamed_pass);
    return;
  }
  tj_verify_text_printf(
      t,
      "bisect: %lld rewrites of %s; the first bad one is rewrite %lld, "
      "%s\n  (TJ_BISECT=%s:%lld diverges, TJ_BISECT=%s:%lld does "
      "not)\n",
      (long long)r->pass_rewrites, r->blamed_pass, (long long)r->bad_rewrite,
      r->bad_rewrite_node, r->blamed_pass, (long long)r->bad_rewrite,
      r->blamed_pass, (long long)(r->bad_rewrite - 1));
}

static tj_status_t ladder_run(const tj_graph_t* graph,
                              const tj_compile_options_t* options,
                              const tj_compile_debug_t* debug,
                              const tj_tensor_t* inputs, int32_t num_inputs,
                              const tj_verify_options_t* verify_options,
                              tj_ladder_report_t** out_report) {
  if (!out_report) return tj_invalid("tj_verify_ladder: out_report is NULL");
  *out_report = NULL;
  if (!graph) return tj_invalid("tj_verify_ladder: graph is NULL");
  if (!graph->finalized) {
    return tj_invalid("tj_verify_ladder: graph @%s is not finalized",
                      graph->name);
  }
  if (options && options->struct_size != sizeof(*options)) {
    return tj_invalid(
        "tj_verify_ladder: options.struct_size is %zu, not %zu (fill the "
        "options with tj_compile_options_initialize first)",
        options->struct_size, sizeof(*options));
  }
  if (verify_options &&
      verify_options->struct_size != sizeof(*verify_options)) {
    return tj_invalid(
        "tj_verify_ladder: verify_options.struct_size is %zu, not %zu (fill "
        "the options with tj_verify_options_initialize first)",
        verify_options->struct_size, sizeof(*verify_options));
  }
  if (num_inputs < 0 || (num_inputs > 0 && !inputs) ||
      (inputs && (uint32_t)num_inputs != graph->num_inputs)) {
    return tj_invalid("tj_verify_ladder: graph @%s takes %u inputs, got %d",
                      graph->name, graph->num_inputs, (int)num_inputs);
  }
  ladder_t L;
  memset(&L, 0, sizeof(L));
  L.graph = graph;
  L.debug = debug;
  L.al = graph->allocator;
  L.random_inputs.allocator = L.al;
  L.want.allocator = L.al;
  L.cond.allocator = L.al;
  if (options) {
    L.copts = *options;
  } else {
    tj_compile_options_initialize(&L.copts);
  }
  if (verify_options) {
    L.vopts = *verify_options;
  } else {
    tj_verify_options_initialize(&L.vopts);
  }
  L.inputs = inputs;
  L.num_inputs = num_inputs;
  L.bisect_limit = -1;
  if (!L.copts.bisect) {
    tj_pass_ctx_t ctx;  // the context's TJ_BISECT, as the compiles read it
    tj_pass_ctx_initialize(&ctx, tj_graph_context(graph));
    L.bisect_pass = ctx.bisect_pass;
    L.bisect_limit = ctx.bisect_limit;
  } else if (*L.copts.bisect) {
    TJ_RETURN_IF_ERROR(tj_bisect_parse(L.copts.bisect,
                                       "tj_verify_ladder: options.bisect",
                                       &L.bisect_pass, &L.bisect_limit));
  }
  L.r = tj_calloc(L.al, 1, sizeof(tj_ladder_report_t));
  if (!L.r) return tj_status_oom();
  L.r->allocator_ = L.al;
  L.r->blamed_pass_index = -1;
  L.r->bad_rewrite = -1;
  L.r->first_diverging = -1;
  tj_status_t status = ladder_climb(&L);
  if (!status) {
    tj_verify_text_t t = {L.al, NULL, 0, 0, false};
    render_ladder(&t, &L);
    if (t.oom) {
      tj_free(L.al, t.buf, t.cap);
      status = tj_status_oom();
    } else {
      L.r->text = t.buf;
      L.r->text_bytes_ = t.cap;
    }
  }
  tj_verify_tensors_deinitialize(&L.random_inputs);
  tj_verify_tensors_deinitialize(&L.want);
  tj_verify_tensors_deinitialize(&L.cond);
  if (status) {
    tj_ladder_report_destroy(L.r);
    return status;
  }
  *out_report = L.r;
  return NULL;
}

tj_status_t tj_verify_ladder(const tj_graph_t* graph,
                             const tj_compile_options_t* options,
                             const tj_tensor_t* inputs, int32_t num_inputs,
                             const tj_verify_options_t* verify_options,
                             tj_ladder_report_t** out_report) {
  return ladder_run(graph, options, NULL, inputs, num_inputs, verify_options,
                    out_report);
}

tj_status_t tj_verify_test_ladder(const tj_graph_t* graph,
                                  const tj_compile_options_t* options,
                                  const tj_compile_debug_t* debug,
                                  const tj_verify_options_t* verify_options,
                                  tj_ladder_report_t** out_report) {
  return ladder_run(graph, options, debug, NULL, 0, verify_options, out_report);
}

//===--- the test hook ---===//

tj_status_t tj_verify_test_plant(void* user, uint32_t group,
                                 tj_lowered_kernel_t* kernels, uint32_t count) {
  tj_verify_plant_t* p = user;
  bool every = p->group == TJ_VERIFY_PLANT_EVERY_GROUP;
  if (!every && (group != p->group || p->planted)) return NULL;
  uint32_t n = every ? count : (count ? 1u : 0u);  // one group: its first
  for (uint32_t kk = 0; kk < n; ++kk) {
    tj_kir_t* k = kernels[kk].kernel;
    for (uint32_t ph = 0; ph < k->num_phases; ++ph) {
      tj_kir_phase_t* phase = &k->phases[ph];
      for (uint32_t i = 0; i < phase->num_insts; ++i) {
        tj_kir_inst_t* inst = &phase->insts[i];
        if (inst->kind == TJ_KIR_OP && inst->op == p->from) {
          inst->op = p->to;
          p->planted = true;
          if (!every) return NULL;
        }
      }
    }
  }
  return NULL;
}

tj_status_t tj_verify_test_compile_planted(const tj_graph_t* graph,
                                           const tj_compile_options_t* options,
                                           uint32_t group, tj_op_t from,
                                           tj_op_t to,
                                           tj_executable_t** out_executable) {
  tj_verify_plant_t p = {group, from, to, false};
  tj_compile_debug_t debug;
  memset(&debug, 0, sizeof(debug));
  debug.lowered = tj_verify_test_plant;
  debug.user = &p;
  TJ_RETURN_IF_ERROR(tj_compile_debug(graph, options, &debug, out_executable));
  if (group == TJ_VERIFY_PLANT_EVERY_GROUP) return NULL;
  // The hook sees the group's kernels before the backend accepts them; a
  // group the backend then refuses runs on the host, without the defect.
  const tj_run_plan_t* rp = &(*out_executable)->run_plan;
  bool kernels = group < rp->num_steps &&
                 rp->steps[group].kind == TJ_RUN_STEP_KERNELS &&
                 rp->steps[group].num_kernels > 0;
  if (p.planted && kernels) return NULL;
  tj_executable_release(*out_executable);
  *out_executable = NULL;
  return tj_invalid("plant: group %u has no kernel with a %s", group,
                    tj_op_info(from)->name);
}
