// The backend conformance suite: see conformance.h.

#include "tests/conformance/conformance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/dtype.h"
#include "lib/ir.h"

int tj_cts_checks, tj_cts_failures;

static int g_cases, g_runs, g_skipped;

// Compile-only mode (tj_cts_compile_all), or NULL.
static tj_cts_compile_fn g_compile_fn;
static void* g_compile_self;

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static void fail(const char* fmt, const char* a, const char* b) {
  ++tj_cts_failures;
  fprintf(stderr, fmt, a, b);
}

// The status must be NULL; prints it (and frees it) otherwise.
static bool ok_status(tj_status_t s, const char* what, const char* name) {
  ++tj_cts_checks;
  if (!s) return true;
  ++tj_cts_failures;
  fprintf(stderr, "%s: %s: %s\n", name, what, tj_status_message(s));
  tj_status_free(s);
  return false;
}

//===--- random data ---===//

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

void tj_cts_seed(uint64_t seed) { g_rng = seed ? seed : 0x9E3779B97F4A7C15ull; }

uint64_t tj_cts_rng_next(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

static double rng_uniform(double lo, double hi) {
  return lo +
         (hi - lo) * (double)(tj_cts_rng_next() >> 11) / 9007199254740992.0;
}

void tj_cts_fill(tj_dtype_t d, void* p, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; ++i) {
    if (d == TJ_DTYPE_BOOL) {
      tj_store_i64(d, p, i, (int64_t)(tj_cts_rng_next() & 1));
    } else if (tj_dtype_is_float(d)) {
      tj_store_f64(d, p, i, rng_uniform(lo, hi));
    } else {
      tj_store_i64(d, p, i, (int64_t)floor(rng_uniform(lo, hi)));
    }
  }
}

int64_t tj_cts_numel(int32_t rank, const int64_t* dims) {
  int64_t n = 1;
  for (int32_t d = 0; d < rank; ++d) n *= dims[d];
  return n;
}

tj_cts_tol_t tj_cts_tol_for(tj_dtype_t d, double f32_rtol) {
  switch (d) {
    case TJ_DTYPE_F16:
      return (tj_cts_tol_t){2e-3, 1e-3};
    case TJ_DTYPE_BF16:
      return (tj_cts_tol_t){1.6e-2, 1e-2};
    case TJ_DTYPE_F64:
      return (tj_cts_tol_t){1e-13, 1e-14};
    default:
      return (tj_cts_tol_t){f32_rtol, f32_rtol};
  }
}

// Composites: 4 ulp of a half dtype (see conformance.h).
static tj_cts_tol_t composite_tol(tj_dtype_t d, double f32_rtol) {
  if (d == TJ_DTYPE_F16) return (tj_cts_tol_t){4e-3, 4e-3};
  if (d == TJ_DTYPE_BF16) return (tj_cts_tol_t){3.2e-2, 3.2e-2};
  if (d == TJ_DTYPE_F64) return (tj_cts_tol_t){1e-12, 1e-12};
  return (tj_cts_tol_t){f32_rtol, f32_rtol};
}

bool tj_cts_compare(const char* what, tj_dtype_t d, const void* got,
                    const void* want, int64_t n, tj_cts_tol_t tol) {
  int misses = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool same;
    if (tj_dtype_is_float(d)) {
      double g = tj_load_f64(d, got, i), w = tj_load_f64(d, want, i);
      if (isnan(w) || isnan(g) || isinf(w) || isinf(g)) {
        same = (isnan(w) && isnan(g)) || g == w;
      } else {
        same = fabs(g - w) <= tol.atol + tol.rtol * fabs(w);
      }
      if (!same && misses++ < 3)
        fprintf(stderr, "  %s[%lld] = %.9g, want %.9g\n", what, (long long)i, g,
                w);
    } else {
      int64_t g = tj_load_i64(d, got, i), w = tj_load_i64(d, want, i);
      same = g == w;
      if (!same && misses++ < 3)
        fprintf(stderr, "  %s[%lld] = %lld, want %lld\n", what, (long long)i,
                (long long)g, (long long)w);
    }
  }
  if (misses > 3) fprintf(stderr, "  %s: %d misses\n", what, misses);
  return misses == 0;
}

//===--- strided layouts ---===//

// A layout of a [rank] tensor inside a raw allocation: element (i..) at
// element offset base + sum i_d * strides[d].
typedef struct layout_t {
  int64_t strides[TJ_MAX_RANK];
  int64_t base;
  int64_t raw_elems;      // the allocation, slack included
  int32_t broadcast_dim;  // stride 0 along it (inputs only), or -1
} layout_t;

// kind 0: reversed innermost dim and padded rows; 1: column-major at an
// offset of 3 elements; 2 (inputs): the first dim of size > 1 broadcast
// (stride 0), the rest padded row-major.
static void make_layout(int kind, int32_t rank, const int64_t* n, layout_t* l) {
  memset(l, 0, sizeof(*l));
  l->broadcast_dim = -1;
  if (kind == 2) {
    for (int32_t d = 0; d < rank && l->broadcast_dim < 0; ++d) {
      if (n[d] > 1) l->broadcast_dim = d;
    }
    if (l->broadcast_dim < 0) kind = 0;
  }
  int64_t span = 0;  // largest offset from base
  if (kind == 1) {
    int64_t s = 1;
    for (int32_t d = 0; d < rank; ++d) {
      l->strides[d] = s;
      s *= n[d] > 1 ? n[d] : 1;
    }
    l->base = 3;
  } else {
    int64_t s = 1;
    for (int32_t d = rank; d-- > 0;) {
      if (d == l->broadcast_dim) {
        l->strides[d] = 0;
        continue;
      }
      l->strides[d] = s;
      s = s * (n[d] > 1 ? n[d] : 1) + 1;
    }
    if (kind == 0 && rank > 0) {
      l->strides[rank - 1] = -1;
      l->base = n[rank - 1] > 1 ? n[rank - 1] - 1 : 0;
    } else {
      l->base = 1;
    }
  }
  for (int32_t d = 0; d < rank; ++d) {
    if (n[d] > 1 && l->strides[d] > 0) span += (n[d] - 1) * l->strides[d];
  }
  l->raw_elems = l->base + span + 3;
}

// Visits every element: |fn|(dense index, raw element offset).
static void for_each_element(int32_t rank, const int64_t* n, const layout_t* l,
                             void (*fn)(void*, int64_t, int64_t), void* ctx) {
  int64_t total = tj_cts_numel(rank, n);
  int64_t idx[TJ_MAX_RANK] = {0};
  for (int64_t i = 0; i < total; ++i) {
    int64_t off = l->base;
    for (int32_t d = 0; d < rank; ++d) off += idx[d] * l->strides[d];
    fn(ctx, i, off);
    for (int32_t d = rank; d-- > 0;) {
      if (++idx[d] < n[d]) break;
      idx[d] = 0;
    }
  }
}

typedef struct copy_ctx_t {
  unsigned char* raw;
  unsigned char* dense;
  size_t es;
  bool to_raw;
  unsigned char* touched;  // per raw byte, or NULL
} copy_ctx_t;

static void copy_element(void* p, int64_t i, int64_t off) {
  copy_ctx_t* c = p;
  unsigned char* r = c->raw + (size_t)off * c->es;
  unsigned char* d = c->dense + (size_t)i * c->es;
  if (c->to_raw) {
    memcpy(r, d, c->es);
  } else {
    memcpy(d, r, c->es);
  }
  if (c->touched) memset(c->touched + (size_t)off * c->es, 1, c->es);
}

// Makes dense |data| constant along |dim| (its value at index 0), as a
// stride-0 input presents it.
static void replicate_along(unsigned char* data, size_t es, int32_t rank,
                            const int64_t* n, int32_t dim) {
  int64_t total = tj_cts_numel(rank, n);
  int64_t inner = 1;
  for (int32_t d = dim + 1; d < rank; ++d) inner *= n[d];
  for (int64_t i = 0; i < total; ++i) {
    int64_t k = (i / inner) % n[dim];
    if (k != 0) {
      memcpy(data + (size_t)i * es, data + (size_t)(i - k * inner) * es, es);
    }
  }
}

//===--- cases ---===//

void tj_cts_begin(const tj_cts_backend_t* be, tj_cts_case_t* c,
                  const char* name) {
  memset(c, 0, sizeof(*c));
  c->name = name;
  ok_status(tj_graph_create(be->context, name, &c->g), "graph_create", name);
  c->B = tj_graph_symbol(c->g, "B");
  c->tol = (tj_cts_tol_t){1e-6, 1e-6};
}

tj_value_t tj_cts_input(tj_cts_case_t* c, tj_dtype_t dtype, int32_t rank,
                        const int64_t* dims, double lo, double hi) {
  char name[16];
  snprintf(name, sizeof(name), "in%d", c->num_inputs);
  if (c->num_inputs < TJ_CTS_MAX_IO) {
    c->lo[c->num_inputs] = lo;
    c->hi[c->num_inputs] = hi;
  }
  ++c->num_inputs;
  return tj_graph_input(c->g, dtype, rank, dims, name);
}

void tj_cts_output(tj_cts_case_t* c, tj_value_t v) {
  char name[16];
  snprintf(name, sizeof(name), "out%d", tj_graph_num_outputs(c->g));
  tj_graph_output(c->g, v, name);
}

static const char* const kIoNames[] = {"host", "host_strided", "device",
                                       "device_strided"};

// One tensor of a run: its dense host copy and how the backend gets it.
typedef struct io_t {
  void* dense;         // dense values (inputs: what the reference reads)
  void* want;          // outputs: the reference's
  unsigned char* raw;  // strided host allocation, or NULL
  layout_t layout;
  uint64_t dev;  // device allocation, or 0
  size_t dev_bytes;
  int64_t shape[TJ_MAX_RANK];
  tj_tensor_t t;  // what the backend is given
} io_t;

static bool device_alloc(const tj_cts_device_t* dv, size_t bytes,
                         uint64_t* out) {
  return dv->alloc(dv->self, bytes ? bytes : 1, out);
}

// Prepares |io| (dense values filled) as |mode| wants: |slot| picks the
// strided layout kind, |input| allows a broadcast one.
static bool stage(const tj_cts_backend_t* be, io_t* io, tj_dtype_t d,
                  int32_t rank, tj_cts_io_t mode, int slot, bool input) {
  size_t es = tj_dtype_size(d);
  int64_t n = tj_cts_numel(rank, io->shape);
  size_t bytes = (size_t)n * es;
  io->t = tj_tensor_make(io->dense, d, rank, io->shape);
  bool strided =
      mode == TJ_CTS_IO_HOST_STRIDED || mode == TJ_CTS_IO_DEVICE_STRIDED;
  const void* src = io->dense;
  size_t src_bytes = bytes;
  if (strided) {
    make_layout(input ? slot % 3 : slot % 2, rank, io->shape, &io->layout);
    if (input && io->layout.broadcast_dim >= 0 && n > 0)
      replicate_along(io->dense, es, rank, io->shape, io->layout.broadcast_dim);
    size_t raw_bytes = (size_t)io->layout.raw_elems * es;
    io->raw = malloc(raw_bytes);
    memset(io->raw, 0xAB, raw_bytes);
    if (input) {
      copy_ctx_t cc = {io->raw, io->dense, es, true, NULL};
      for_each_element(rank, io->shape, &io->layout, copy_element, &cc);
    }
    io->t.data = io->raw;
    io->t.strides = io->layout.strides;
    io->t.byte_offset = (uint64_t)io->layout.base * es;
    src = io->raw;
    src_bytes = raw_bytes;
  } else if (!input) {
    memset(io->dense, 0xAB, bytes);
  }
  if (mode == TJ_CTS_IO_DEVICE || mode == TJ_CTS_IO_DEVICE_STRIDED) {
    const tj_cts_device_t* dv = be->device;
    io->dev_bytes = src_bytes;
    if (!device_alloc(dv, src_bytes, &io->dev)) return false;
    if (src_bytes && !dv->upload(dv->self, io->dev, src, src_bytes))
      return false;
    io->t.data = (void*)(uintptr_t)io->dev;
    io->t.device_type = dv->device_type;
    io->t.device_id = dv->device_id;
  }
  return true;
}

// Brings output |io| back into io->dense; false when bytes outside its
// elements were written.
static bool unstage(const tj_cts_backend_t* be, io_t* io, tj_dtype_t d,
                    int32_t rank, tj_cts_io_t mode, const char* what) {
  size_t es = tj_dtype_size(d);
  int64_t n = tj_cts_numel(rank, io->shape);
  bool strided = io->raw != NULL;
  if (io->dev) {
    void* dst = strided ? (void*)io->raw : io->dense;
    if (io->dev_bytes &&
        !be->device->download(be->device->self, dst, io->dev, io->dev_bytes))
      return false;
  }
  (void)mode;
  if (!strided) return true;
  size_t raw_bytes = (size_t)io->layout.raw_elems * es;
  unsigned char* touched = calloc(raw_bytes ? raw_bytes : 1, 1);
  copy_ctx_t cc = {io->raw, io->dense, es, false, touched};
  for_each_element(rank, io->shape, &io->layout, copy_element, &cc);
  bool clean = true;
  for (size_t i = 0; i < raw_bytes && clean; ++i) {
    if (!touched[i] && io->raw[i] != 0xAB) {
      fprintf(stderr, "  %s: byte %zu outside the output's elements written\n",
              what, i);
      clean = false;
    }
  }
  free(touched);
  (void)n;
  return clean;
}

static void release(const tj_cts_backend_t* be, io_t* io) {
  if (io->dev) be->device->free(be->device->self, io->dev);
  free(io->dense);
  free(io->want);
  free(io->raw);
  memset(io, 0, sizeof(*io));
}

bool tj_cts_run_case(const tj_cts_backend_t* be, tj_cts_case_t* c,
                     const tj_compile_options_t* opts, const int64_t* bs,
                     int nb, tj_cts_io_t mode, tj_cts_report_t* report) {
  tj_status_t s = tj_graph_finalize(c->g);
  if (s) {
    fprintf(stderr, "%s: finalize: %s\n", c->name, tj_status_message(s));
    tj_status_free(s);
    return false;
  }
  tj_executable_t* exe = NULL;
  s = tj_compile(c->g, opts, &exe);
  if (s) {
    fprintf(stderr, "%s: compile: %s\n", c->name, tj_status_message(s));
    tj_status_free(s);
    return false;
  }
  bool ok = true;
  int ni = tj_graph_num_inputs(c->g), no = tj_graph_num_outputs(c->g);
  if (ni > TJ_CTS_MAX_IO || no > TJ_CTS_MAX_IO) {
    fprintf(stderr, "%s: more than %d inputs or outputs\n", c->name,
            TJ_CTS_MAX_IO);
    ok = false;
  }
  for (int k = 0; k < nb && ok; ++k) {
    int64_t B = bs[k];
    io_t in[TJ_CTS_MAX_IO], out[TJ_CTS_MAX_IO];
    memset(in, 0, sizeof(in));
    memset(out, 0, sizeof(out));
    tj_tensor_t tin[TJ_CTS_MAX_IO], tref[TJ_CTS_MAX_IO], tout[TJ_CTS_MAX_IO],
        twant[TJ_CTS_MAX_IO];
    for (int i = 0; i < ni && ok; ++i) {
      tj_value_t v = tj_graph_input_value(c->g, i);
      tj_dtype_t d = tj_graph_value_dtype(c->g, v);
      int32_t rank = tj_graph_value_rank(c->g, v);
      tj_graph_value_dims(c->g, v, in[i].shape);
      for (int32_t a = 0; a < rank; ++a) {
        if (in[i].shape[a] == c->B) in[i].shape[a] = B;
      }
      int64_t n = tj_cts_numel(rank, in[i].shape);
      in[i].dense = malloc((size_t)(n ? n : 1) * tj_dtype_size(d));
      tj_cts_fill(d, in[i].dense, n, c->lo[i], c->hi[i]);
      ok = stage(be, &in[i], d, rank, mode, i, true);
      tref[i] = tj_tensor_make(in[i].dense, d, rank, in[i].shape);
      tin[i] = in[i].t;
    }
    bool rejected = false;
    for (int o = 0; o < no && ok; ++o) {
      int32_t rank;
      int64_t* shape = out[o].shape;
      s = tj_executable_output_shape(exe, tref, ni, o, &rank, shape);
      if (s) {
        // Inputs the graph's guards reject: the graph rejects them too,
        // and there is nothing to run.
        tj_status_t s2 = tj_graph_output_shape(c->g, tref, ni, o, &rank, shape);
        if (!s2 || tj_status_code(s2) != tj_status_code(s)) {
          fprintf(stderr, "%s: output_shape: %s\n", c->name,
                  tj_status_message(s));
          ok = false;
        }
        tj_status_free(s);
        tj_status_free(s2);
        rejected = true;
        break;
      }
      tj_dtype_t d = tj_graph_value_dtype(c->g, tj_graph_output_value(c->g, o));
      size_t bytes = (size_t)tj_cts_numel(rank, shape) * tj_dtype_size(d);
      out[o].dense = malloc(bytes ? bytes : 1);
      out[o].want = malloc(bytes ? bytes : 1);
      ok = stage(be, &out[o], d, rank, mode, o, false);
      tout[o] = out[o].t;
      twant[o] = tj_tensor_make(out[o].want, d, rank, shape);
    }
    bool both_failed = rejected;
    if (ok && !rejected) {
      // Both succeed, or both reject the inputs the same way (argmax of an
      // empty axis).
      tj_status_t s1 = tj_executable_run(exe, tin, ni, tout, no);
      tj_status_t s2 = tj_reference_run(c->g, tref, ni, twant, no);
      ++g_runs;
      if (s1 || s2) {
        both_failed = s1 && s2 && tj_status_code(s1) == tj_status_code(s2);
        if (!both_failed) {
          fprintf(stderr, "%s B=%lld (%s): run: %s / reference: %s\n", c->name,
                  (long long)B, kIoNames[mode],
                  s1 ? tj_status_message(s1) : "ok",
                  s2 ? tj_status_message(s2) : "ok");
          ok = false;
        }
      }
      tj_status_free(s1);
      tj_status_free(s2);
    }
    for (int o = 0; o < no && ok && !both_failed; ++o) {
      char what[128];
      snprintf(what, sizeof(what), "%s B=%lld (%s) out%d", c->name,
               (long long)B, kIoNames[mode], o);
      tj_dtype_t d = tout[o].dtype;
      int32_t rank = tout[o].rank;
      ok = unstage(be, &out[o], d, rank, mode, what);
      if (ok)
        ok = tj_cts_compare(what, d, out[o].dense, out[o].want,
                            tj_cts_numel(rank, out[o].shape), c->tol);
    }
    for (int i = 0; i < TJ_CTS_MAX_IO; ++i) {
      release(be, &in[i]);
      release(be, &out[i]);
    }
  }
  tj_executable_stats_t st = {.struct_size = sizeof(st)};
  tj_executable_stats(exe, &st);
  if (opts->specialize == TJ_SPECIALIZE_NEVER && st.recompiles != 0) {
    fprintf(stderr, "%s: %lld recompiles\n", c->name, (long long)st.recompiles);
    ok = false;
  }
  if (report) {
    report->kernels = st.num_kernels;
    report->breaks = st.num_graph_breaks;
  }
  tj_executable_release(exe);
  return ok;
}

static bool matches(const char* pattern, const char* name) {
  size_t n = strlen(pattern);
  if (n > 0 && pattern[n - 1] == '*') return strncmp(pattern, name, n - 1) == 0;
  return strcmp(pattern, name) == 0;
}

static const tj_cts_skip_t* find_skip(const tj_cts_backend_t* be,
                                      const char* name) {
  for (const tj_cts_skip_t* s = be->skips; s && s->pattern; ++s) {
    if (matches(s->pattern, name)) return s;
  }
  return NULL;
}

static const int64_t kBatches[] = {0, 1, 7, 33, 257};

void tj_cts_finish(const tj_cts_backend_t* be, tj_cts_case_t* c, int kernels,
                   int breaks) {
  ++g_cases;
  const tj_cts_skip_t* skip = find_skip(be, c->name);
  if (skip) {
    printf("# skip %s %s: %s\n", be->name, c->name, skip->reason);
    ++g_skipped;
    tj_graph_destroy(c->g);
    c->g = NULL;
    return;
  }
  for (const tj_cts_expect_t* e = be->expects; e && e->pattern; ++e) {
    if (matches(e->pattern, c->name)) {
      kernels = e->kernels;
      breaks = e->breaks;
      break;
    }
  }
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.target = be->target;
  opts.verify_each = true;
  opts.cuda.allow_tf32 = c->allow_tf32;
  tj_cts_io_t modes[4] = {TJ_CTS_IO_HOST};
  int num_modes = 1;
  if (c->layouts && !g_compile_fn) {
    modes[num_modes++] = TJ_CTS_IO_HOST_STRIDED;
    if (be->device) {
      modes[num_modes++] = TJ_CTS_IO_DEVICE;
      modes[num_modes++] = TJ_CTS_IO_DEVICE_STRIDED;
    }
  }
  for (int m = 0; m < num_modes; ++m) {
    char moded[160];
    snprintf(moded, sizeof(moded), "%s@%s", c->name, kIoNames[modes[m]]);
    if (m > 0 && (skip = find_skip(be, moded)) != NULL) {
      printf("# skip %s %s: %s\n", be->name, moded, skip->reason);
      ++g_skipped;
      continue;
    }
    tj_cts_report_t r = {0, 0};
    // Each mode compiles the graph anew: finalize is idempotent.
    bool ok;
    if (g_compile_fn) {
      ok = ok_status(tj_graph_finalize(c->g), "finalize", c->name) &&
           g_compile_fn(g_compile_self, c, &opts, &r);
    } else {
      ok = tj_cts_run_case(be, c, &opts, kBatches, (int)ARRAY_SIZE(kBatches),
                           modes[m], &r);
    }
    ++tj_cts_checks;
    if (!ok)
      fail("FAILED case %s%s\n", c->name, m ? moded + strlen(c->name) : "");
    if (kernels >= 0 && r.kernels != kernels) {
      ++tj_cts_failures;
      fprintf(stderr, "case %s: %d kernels, expected %d\n", c->name, r.kernels,
              kernels);
    }
    // Host steps where the case does not state its count: listed, so that
    // every gap of a backend is visible in its log.
    if (m == 0 && breaks < 0 && r.breaks > 0)
      printf("# %s %s: %d graph break%s (runs on the host)\n", be->name,
             c->name, r.breaks, r.breaks == 1 ? "" : "s");
    if (breaks >= 0 && r.breaks != breaks) {
      ++tj_cts_failures;
      fprintf(stderr, "case %s: %d graph breaks, expected %d\n", c->name,
              r.breaks, breaks);
    }
  }
  tj_graph_destroy(c->g);
  c->g = NULL;
}

//===--- shorthands for the groups ---===//

static const tj_cts_backend_t* g_be;

typedef tj_cts_case_t case_t;
typedef tj_cts_tol_t tol_t;

static void begin(case_t* c, const char* name) { tj_cts_begin(g_be, c, name); }
static tj_value_t input(case_t* c, tj_dtype_t d, int32_t rank,
                        const int64_t* dims, double lo, double hi) {
  return tj_cts_input(c, d, rank, dims, lo, hi);
}
static void output(case_t* c, tj_value_t v) { tj_cts_output(c, v); }
static void finish(case_t* c, int kernels, int breaks) {
  tj_cts_finish(g_be, c, kernels, breaks);
}

typedef tj_value_t (*unary_fn)(tj_graph_t*, tj_value_t);
typedef tj_value_t (*binary_fn)(tj_graph_t*, tj_value_t, tj_value_t);
typedef tj_value_t (*reduce_fn)(tj_graph_t*, tj_value_t, int32_t,
                                const int32_t*, bool);

//===--- elementwise ---===//

typedef struct unary_case_t {
  const char* name;
  unary_fn fn;
  double lo, hi;
  double rtol;  // f32; 0: exact
  bool ints;    // also on i32 / i64 / i8
} unary_case_t;

static const unary_case_t kUnary[] = {
    {"neg", tj_graph_neg, -10, 10, 0, true},
    {"abs", tj_graph_abs, -10, 10, 0, true},
    {"exp", tj_graph_exp, -20, 20, 4e-6, false},
    {"log", tj_graph_log, 1e-3, 100, 4e-6, false},
    {"sqrt", tj_graph_sqrt, 0, 100, 1e-6, false},
    {"rsqrt", tj_graph_rsqrt, 1e-3, 100, 2e-6, false},
    {"tanh", tj_graph_tanh, -6, 6, 4e-6, false},
    {"sigmoid", tj_graph_sigmoid, -20, 20, 4e-6, false},
    {"erf", tj_graph_erf, -4, 4, 4e-6, false},
    {"erfc", tj_graph_erfc, -4, 9, 4e-6, false},
    {"sin", tj_graph_sin, -10, 10, 4e-6, false},
    {"cos", tj_graph_cos, -10, 10, 4e-6, false},
    {"asin", tj_graph_asin, -0.99, 0.99, 4e-6, false},
    {"acos", tj_graph_acos, -0.99, 0.99, 4e-6, false},
    {"atan", tj_graph_atan, -20, 20, 4e-6, false},
    {"relu", tj_graph_relu, -10, 10, 0, true},
    {"floor", tj_graph_floor, -10, 10, 0, false},
    {"ceil", tj_graph_ceil, -10, 10, 0, false},
    {"round", tj_graph_round, -10, 10, 0, false},
    {"sign", tj_graph_sign, -10, 10, 0, true},
};

static void group_unary_ops(void) {
  static const tj_dtype_t kFloat[] = {TJ_DTYPE_F32, TJ_DTYPE_F64, TJ_DTYPE_F16,
                                      TJ_DTYPE_BF16};
  static const tj_dtype_t kInt[] = {TJ_DTYPE_I32, TJ_DTYPE_I64, TJ_DTYPE_I8};
  for (size_t i = 0; i < ARRAY_SIZE(kUnary); ++i) {
    const unary_case_t* u = &kUnary[i];
    for (size_t t = 0; t < ARRAY_SIZE(kFloat) + ARRAY_SIZE(kInt); ++t) {
      bool is_int = t >= ARRAY_SIZE(kFloat);
      if (is_int && !u->ints) continue;
      tj_dtype_t d = is_int ? kInt[t - ARRAY_SIZE(kFloat)] : kFloat[t];
      char name[64];
      snprintf(name, sizeof(name), "%s_%s", u->name, tj_dtype_name(d));
      case_t c;
      begin(&c, name);
      tj_value_t x = input(&c, d, 2, (int64_t[]){c.B, 33}, u->lo, u->hi);
      output(&c, u->fn(c.g, x));
      // Transcendentals of f16/bf16 values: a few ulp of the dtype.
      c.tol = tj_cts_tol_for(d, u->rtol > 0 ? u->rtol : 1e-7);
      if (d == TJ_DTYPE_F64 && u->rtol > 0) c.tol = (tol_t){1e-13, 1e-300};
      if (u->rtol == 0) c.tol.atol = 0;
      finish(&c, 1, 0);
    }
  }
}

static void group_logical_and_predicates(void) {
  case_t c;
  begin(&c, "isnan_not_and_or");
  tj_value_t x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 17}, -1, 1);
  tj_value_t y = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){17}, -1, 1);
  tj_value_t q = tj_graph_sqrt(c.g, x);  // NaN for x < 0
  tj_value_t n = tj_graph_isnan(c.g, q);
  tj_value_t l = tj_graph_lt(c.g, x, y);
  output(&c, tj_graph_logical_and(c.g, n, tj_graph_logical_not(c.g, l)));
  output(&c, tj_graph_logical_or(c.g, n, l));
  finish(&c, 1, 0);
}

typedef struct binary_case_t {
  const char* name;
  binary_fn fn;
  double lo, hi;
  bool ints;
} binary_case_t;

// Whether the op named |name| takes integers only (lib/ops.def's INT).
static bool ints_only(const char* name) {
  for (int op = 0; op < TJ_OP_COUNT_; ++op) {
    if (strcmp(tj_op_info((tj_op_t)op)->name, name) == 0) {
      return tj_op_info((tj_op_t)op)->dtypes == TJ_OP_DTYPES_INT;
    }
  }
  return false;
}

static const binary_case_t kBinary[] = {
    {"add", tj_graph_add, -10, 10, true},
    {"sub", tj_graph_sub, -10, 10, true},
    {"mul", tj_graph_mul, -10, 10, true},
    {"div", tj_graph_div, -10, 10, true},
    {"pow", tj_graph_pow, 0.5, 3, false},
    {"maximum", tj_graph_maximum, -10, 10, true},
    {"minimum", tj_graph_minimum, -10, 10, true},
    {"eq", tj_graph_eq, -3, 3, true},
    {"ne", tj_graph_ne, -3, 3, true},
    {"lt", tj_graph_lt, -3, 3, true},
    {"le", tj_graph_le, -3, 3, true},
    {"gt", tj_graph_gt, -3, 3, true},
    {"ge", tj_graph_ge, -3, 3, true},
    // opsmisc: divisors and shift counts around 0 and the widths.
    {"mod", tj_graph_mod, -10, 10, true},
    {"fmod", tj_graph_fmod, -10, 10, true},
    {"bitwise_and", tj_graph_bitwise_and, -100, 100, true},
    {"bitwise_or", tj_graph_bitwise_or, -100, 100, true},
    {"bitwise_xor", tj_graph_bitwise_xor, -100, 100, true},
    {"shift_left", tj_graph_shift_left, -3, 70, true},
    {"shift_right", tj_graph_shift_right, -3, 70, true},
};

static void group_binary_ops_broadcast(void) {
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_F32,  TJ_DTYPE_F64, TJ_DTYPE_F16,
                                      TJ_DTYPE_BF16, TJ_DTYPE_I32, TJ_DTYPE_I64,
                                      TJ_DTYPE_I8};
  for (size_t i = 0; i < ARRAY_SIZE(kBinary); ++i) {
    const binary_case_t* b = &kBinary[i];
    for (size_t t = 0; t < ARRAY_SIZE(kTypes); ++t) {
      tj_dtype_t d = kTypes[t];
      if (!tj_dtype_is_float(d) && !b->ints) continue;
      if (tj_dtype_is_float(d) && ints_only(b->name)) continue;
      char name[64];
      snprintf(name, sizeof(name), "%s_%s", b->name, tj_dtype_name(d));
      case_t c;
      begin(&c, name);
      // [B,7,33] op [33], and [B,1,33] op [7,1]: both broadcast forms.
      tj_value_t x = input(&c, d, 3, (int64_t[]){c.B, 7, 33}, b->lo, b->hi);
      tj_value_t y = input(&c, d, 1, (int64_t[]){33}, b->lo, b->hi);
      tj_value_t z = input(&c, d, 3, (int64_t[]){c.B, 1, 33}, b->lo, b->hi);
      tj_value_t w = input(&c, d, 2, (int64_t[]){7, 1}, b->lo, b->hi);
      output(&c, b->fn(c.g, x, y));
      output(&c, b->fn(c.g, z, w));
      bool is_pow = b->fn == tj_graph_pow;
      c.tol = tj_cts_tol_for(d, d == TJ_DTYPE_F32 && is_pow ? 4e-6 : 1e-7);
      if (is_pow && d == TJ_DTYPE_F64) c.tol.rtol = 1e-13;
      // add of every dtype also runs with strided and device tensors.
      c.layouts = b->fn == tj_graph_add;
      finish(&c, -1, 0);
    }
  }
}

static const tj_dtype_t kAllTypes[] = {
    TJ_DTYPE_F32, TJ_DTYPE_F16, TJ_DTYPE_BF16, TJ_DTYPE_F64,
    TJ_DTYPE_I8,  TJ_DTYPE_I32, TJ_DTYPE_I64,  TJ_DTYPE_BOOL};

static void group_where_and_casts(void) {
  case_t c;
  begin(&c, "where");
  tj_value_t p = input(&c, TJ_DTYPE_BOOL, 2, (int64_t[]){c.B, 9}, 0, 1);
  tj_value_t a = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 9}, -5, 5);
  tj_value_t b = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){9}, -5, 5);
  output(&c, tj_graph_where(c.g, p, a, b));
  output(&c, tj_graph_logical_not(c.g, tj_graph_isnan(c.g, a)));
  finish(&c, 1, 0);

  for (size_t i = 0; i < ARRAY_SIZE(kAllTypes); ++i) {
    for (size_t j = 0; j < ARRAY_SIZE(kAllTypes); ++j) {
      tj_dtype_t from = kAllTypes[i], to = kAllTypes[j];
      if (from == to) continue;
      char name[64];
      snprintf(name, sizeof(name), "cast_%s_%s", tj_dtype_name(from),
               tj_dtype_name(to));
      begin(&c, name);
      // Within i8 range so every conversion is defined and exact enough.
      tj_value_t x = input(&c, from, 2, (int64_t[]){c.B, 7}, -100, 100);
      output(&c, tj_graph_cast(c.g, x, to));
      // f64 -> f16/bf16 rounds through f32 in kernels (kernel_ir.h).
      c.tol = tj_cts_tol_for(to, 1e-7);
      finish(&c, 1, 0);
    }
  }
}

//===--- reductions ---===//

static void group_reductions(void) {
  static const struct {
    const char* name;
    reduce_fn fn;
    double lo, hi;
  } kOps[] = {
      {"sum", tj_graph_sum, -1, 1},      {"mean", tj_graph_mean, -1, 1},
      {"max", tj_graph_max, -9, 9},      {"min", tj_graph_min, -9, 9},
      {"prod", tj_graph_prod, 0.9, 1.1},
  };
  static const struct {
    const char* name;
    int32_t num_axes;
    int32_t axes[3];
  } kAxes[] = {
      {"last", 1, {-1}}, {"first", 1, {0}},     {"mid", 1, {1}},
      {"all", 0, {0}},   {"outer2", 2, {0, 2}}, {"inner2", 2, {1, 2}},
  };
  for (size_t o = 0; o < ARRAY_SIZE(kOps); ++o) {
    for (size_t a = 0; a < ARRAY_SIZE(kAxes); ++a) {
      for (int keep = 0; keep < 2; ++keep) {
        char name[64];
        snprintf(name, sizeof(name), "%s_%s_%s", kOps[o].name, kAxes[a].name,
                 keep ? "keep" : "drop");
        case_t c;
        begin(&c, name);
        tj_value_t x = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 7, 33},
                             kOps[o].lo, kOps[o].hi);
        output(&c,
               kOps[o].fn(c.g, x, kAxes[a].num_axes, kAxes[a].axes, keep != 0));
        // f32 accumulation over up to 257*7*33 elements vs f64.
        c.tol = (tol_t){2e-5, 2e-5};
        // Axes 0 and 2 of a dense [B,7,33] are not one strided axis: the
        // kernel iterates their product and reads by computed offsets.
        finish(&c, -1, 0);
      }
    }
  }
  // Integer and f64 sums, argmax (with ties: first wins).
  case_t c;
  begin(&c, "sum_i32_max_i64");
  tj_value_t xi = input(&c, TJ_DTYPE_I32, 2, (int64_t[]){c.B, 257}, -50, 50);
  output(&c, tj_graph_sum(c.g, xi, 1, (int32_t[]){1}, false));
  tj_value_t xl = input(&c, TJ_DTYPE_I64, 2, (int64_t[]){c.B, 7}, -50, 50);
  output(&c, tj_graph_max(c.g, xl, 1, (int32_t[]){0}, true));
  finish(&c, 2, 0);
  begin(&c, "sum_f64");
  tj_value_t xd = input(&c, TJ_DTYPE_F64, 2, (int64_t[]){c.B, 33}, -1, 1);
  output(&c, tj_graph_sum(c.g, xd, 1, (int32_t[]){1}, false));
  c.tol = (tol_t){1e-12, 1e-12};
  finish(&c, 1, 0);
  // The three in one graph.
  begin(&c, "sum_i32_max_i64_f64");
  xi = input(&c, TJ_DTYPE_I32, 2, (int64_t[]){c.B, 257}, -50, 50);
  output(&c, tj_graph_sum(c.g, xi, 1, (int32_t[]){1}, false));
  xl = input(&c, TJ_DTYPE_I64, 2, (int64_t[]){c.B, 7}, -50, 50);
  output(&c, tj_graph_max(c.g, xl, 1, (int32_t[]){0}, true));
  xd = input(&c, TJ_DTYPE_F64, 2, (int64_t[]){c.B, 33}, -1, 1);
  output(&c, tj_graph_sum(c.g, xd, 1, (int32_t[]){1}, false));
  c.tol = (tol_t){1e-12, 1e-12};
  finish(&c, -1, 0);
  // Axes of fixed size 0: the identity (NaN for mean), never the output
  // buffer's old bytes; bool max/min: false/true.
  begin(&c, "empty_axes");
  tj_value_t xe = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 0, 5}, -1, 1);
  for (size_t o = 0; o < ARRAY_SIZE(kOps); ++o) {
    output(&c, kOps[o].fn(c.g, xe, 1, (int32_t[]){1}, false));
  }
  output(&c, tj_graph_sum(c.g, xe, 2, (int32_t[]){1, 2}, true));
  tj_value_t xb = input(&c, TJ_DTYPE_BOOL, 2, (int64_t[]){c.B, 0}, 0, 2);
  output(&c, tj_graph_max(c.g, xb, 1, (int32_t[]){1}, false));
  output(&c, tj_graph_min(c.g, xb, 1, (int32_t[]){1}, false));
  finish(&c, -1, 0);
  begin(&c, "argmax");
  tj_value_t xa = input(&c, TJ_DTYPE_I32, 3, (int64_t[]){c.B, 7, 33}, 0, 4);
  output(&c, tj_graph_argmax(c.g, xa, -1, false));
  output(&c, tj_graph_argmax(c.g, xa, 0, true));  // B = 0: an error in both
  finish(&c, 2, 0);
}

//===--- composites ---===//

static void group_softmax_layer_norm(void) {
  case_t c;
  begin(&c, "softmax");
  tj_value_t x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 257}, -8, 8);
  output(&c, tj_graph_softmax(c.g, x, -1));
  c.tol = (tol_t){2e-5, 1e-7};
  finish(&c, 1, 0);

  begin(&c, "softmax_1000");
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 1000}, -8, 8);
  output(&c, tj_graph_softmax(c.g, x, -1));
  c.tol = (tol_t){2e-5, 1e-7};
  finish(&c, 1, 0);

  begin(&c, "softmax_axis0");
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 33}, -8, 8);
  output(&c, tj_graph_softmax(c.g, x, 0));
  c.tol = (tol_t){2e-5, 1e-7};
  finish(&c, 1, 0);

  begin(&c, "log_softmax");
  x = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 3, 33}, -8, 8);
  output(&c, tj_graph_log_softmax(c.g, x, 2));
  c.tol = (tol_t){2e-5, 2e-5};
  finish(&c, -1, 0);

  begin(&c, "log_softmax_axis0");
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 33}, -8, 8);
  output(&c, tj_graph_log_softmax(c.g, x, 0));
  c.tol = (tol_t){2e-5, 2e-5};
  finish(&c, -1, 0);

  begin(&c, "layer_norm");
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 1023}, -3, 3);
  tj_value_t gamma = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){1023}, 0.5, 2);
  tj_value_t beta = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){1023}, -1, 1);
  output(&c, tj_graph_layer_norm(c.g, x, gamma, beta, 1e-5));
  c.tol = (tol_t){5e-5, 5e-5};
  finish(&c, 1, 0);

  static const int64_t kLn[] = {33, 4096};
  for (size_t i = 0; i < ARRAY_SIZE(kLn); ++i) {
    char name[64];
    snprintf(name, sizeof(name), "layer_norm_bf16_%lld", (long long)kLn[i]);
    begin(&c, name);
    x = input(&c, TJ_DTYPE_BF16, 2, (int64_t[]){c.B, kLn[i]}, -3, 3);
    output(&c,
           tj_graph_layer_norm(c.g, x, (tj_value_t){0}, (tj_value_t){0}, 1e-5));
    c.tol = tj_cts_tol_for(TJ_DTYPE_BF16, 0);
    finish(&c, -1, 0);
  }

  begin(&c, "rms_norm_silu");
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 64}, -3, 3);
  gamma = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){64}, 0.5, 2);
  output(&c, tj_graph_silu(c.g, tj_graph_rms_norm(c.g, x, gamma, 1e-6)));
  c.tol = (tol_t){2e-5, 2e-5};
  finish(&c, -1, 0);

  begin(&c, "gelu_erf_tanh_f16");
  x = input(&c, TJ_DTYPE_F16, 2, (int64_t[]){c.B, 33}, -4, 4);
  output(&c, tj_graph_gelu(c.g, x, false));
  output(&c, tj_graph_gelu(c.g, x, true));
  c.tol = (tol_t){4e-3, 2e-3};
  finish(&c, 1, 0);
}

//===--- matmul ---===//

static void group_matmuls(void) {
  case_t c;
  begin(&c, "matmul_bias_relu");
  tj_value_t x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 33}, -1, 1);
  tj_value_t w = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){33, 17}, -1, 1);
  tj_value_t b = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){17}, -1, 1);
  output(&c, tj_graph_relu(c.g, tj_graph_linear(c.g, x, w, b)));
  c.tol = (tol_t){1e-5, 1e-5};
  finish(&c, 1, 0);

  begin(&c, "matmul_batched_transposed");
  x = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 7, 33}, -1, 1);
  w = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){65, 33}, -1, 1);  // used as w^T
  tj_value_t r = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 7, 65}, -1, 1);
  tj_value_t wt = tj_graph_transpose(c.g, w, (int32_t[]){1, 0});
  output(&c, tj_graph_add(c.g, tj_graph_matmul(c.g, x, wt), r));
  c.tol = (tol_t){1e-5, 1e-5};
  finish(&c, 1, 0);

  begin(&c, "matmul_vectors");
  tj_value_t v = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){33}, -1, 1);
  tj_value_t m = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 33}, -1, 1);
  output(&c, tj_graph_matmul(c.g, m, v));  // [B]
  output(&c, tj_graph_matmul(c.g, v, v));  // []
  c.tol = (tol_t){1e-5, 1e-5};
  finish(&c, 2, 0);

  begin(&c, "matmul_vector_matrix");
  v = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){33}, -1, 1);
  tj_value_t m2 = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){33, c.B}, -1, 1);
  output(&c, tj_graph_matmul(c.g, v, m2));  // [B]
  c.tol = (tol_t){1e-5, 1e-5};
  finish(&c, 1, 0);

  // Batch broadcasting: [B,1,7,9] @ [3,9,5].
  begin(&c, "matmul_batch_broadcast");
  x = input(&c, TJ_DTYPE_F32, 4, (int64_t[]){c.B, 1, 7, 9}, -1, 1);
  w = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){3, 9, 5}, -1, 1);
  output(&c, tj_graph_matmul(c.g, x, w));
  c.tol = (tol_t){1e-5, 1e-5};
  finish(&c, 1, 0);

  // f64 matmul has no gemm template: decompose makes it the sum over k of
  // a broadcast product, a reduction kernel (issue 15), not a host step.
  begin(&c, "matmul_f64_reduction");
  x = input(&c, TJ_DTYPE_F64, 2, (int64_t[]){c.B, 5}, -1, 1);
  w = input(&c, TJ_DTYPE_F64, 2, (int64_t[]){5, 3}, -1, 1);
  output(&c, tj_graph_exp(c.g, tj_graph_matmul(c.g, x, w)));
  c.tol = (tol_t){1e-13, 1e-13};
  finish(&c, -1, 0);

  // K = 33: rows of 66 bytes break the tensor cores' 16-byte copies; the
  // CUDA target writes it as decompose's f32 reduction (no graph break).
  begin(&c, "matmul_bf16_misaligned");
  x = input(&c, TJ_DTYPE_BF16, 2, (int64_t[]){c.B, 33}, -1, 1);
  w = input(&c, TJ_DTYPE_BF16, 2, (int64_t[]){33, 16}, -1, 1);
  output(&c, tj_graph_exp(c.g, tj_graph_matmul(c.g, x, w)));
  c.tol = tj_cts_tol_for(TJ_DTYPE_BF16, 0);
  finish(&c, -1, -1);
}

// bf16 and f16 operands (tensor cores on the GPU), K a multiple of 8.
static void group_half_matmuls(void) {
  case_t c;
  tj_value_t x, w, b, r;
  static const tj_dtype_t kHalf[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  for (size_t i = 0; i < ARRAY_SIZE(kHalf); ++i) {
    tj_dtype_t d = kHalf[i];
    char name[64];
    snprintf(name, sizeof(name), "matmul_%s_bias_gelu", tj_dtype_name(d));
    begin(&c, name);
    x = input(&c, d, 2, (int64_t[]){c.B, 200}, -1, 1);
    w = input(&c, d, 2, (int64_t[]){200, 136}, -0.2, 0.2);
    b = input(&c, d, 1, (int64_t[]){136}, -1, 1);
    output(&c, tj_graph_gelu(c.g, tj_graph_linear(c.g, x, w, b), true));
    // The reference rounds 1 + tanh(..) to the dtype: as for gelu alone.
    c.tol = d == TJ_DTYPE_F16 ? (tol_t){4e-3, 2e-3} : tj_cts_tol_for(d, 0);
    finish(&c, 1, 0);

    snprintf(name, sizeof(name), "matmul_%s_batched_residual",
             tj_dtype_name(d));
    begin(&c, name);
    x = input(&c, d, 3, (int64_t[]){2, c.B, 64}, -1, 1);
    w = input(&c, d, 2, (int64_t[]){64, 72}, -0.5, 0.5);
    r = input(&c, d, 3, (int64_t[]){2, c.B, 72}, -1, 1);
    output(&c, tj_graph_add(c.g, tj_graph_matmul(c.g, x, w), r));
    c.tol = tj_cts_tol_for(d, 0);
    finish(&c, 1, 0);
  }
}

// Batched GEMMs, both operands batched (not one GEMM of B M rows, as
// half_matmuls' [2, B, 64] @ [64, 72] is): attention's scores q @ k^T (a
// K-major B) and context p @ v, two batch dims (heads), and the batch
// symbolic, which makes batch 0 and odd batches; on the GPU the TMA
// schedules address each operand through a rank-3 tensor map whose
// outermost dim is the batch (tests/cuda forces every candidate). K 200
// leaves a partial k-tile, N 72 and 136 partial tiles.
static void group_batched_matmuls(void) {
  case_t c;
  static const tj_dtype_t kHalf[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  for (size_t i = 0; i < ARRAY_SIZE(kHalf); ++i) {
    tj_dtype_t d = kHalf[i];
    char name[64];
    snprintf(name, sizeof(name), "bmm_%s_scores_scaled", tj_dtype_name(d));
    begin(&c, name);
    tj_value_t q = input(&c, d, 3, (int64_t[]){3, c.B, 64}, -1, 1);
    tj_value_t k = input(&c, d, 3, (int64_t[]){3, 72, 64}, -1, 1);
    tj_value_t kt = tj_graph_transpose(c.g, k, (int32_t[]){0, 2, 1});
    tj_value_t scale = tj_graph_scalar(c.g, d, 0.125);
    output(&c, tj_graph_mul(c.g, tj_graph_matmul(c.g, q, kt), scale));
    c.tol = tj_cts_tol_for(d, 0);
    finish(&c, 1, 0);

    snprintf(name, sizeof(name), "bmm_%s_context_residual", tj_dtype_name(d));
    begin(&c, name);
    tj_value_t p = input(&c, d, 3, (int64_t[]){c.B, 40, 136}, 0, 0.1);
    tj_value_t v = input(&c, d, 3, (int64_t[]){c.B, 136, 64}, -1, 1);
    tj_value_t r = input(&c, d, 3, (int64_t[]){c.B, 40, 64}, -1, 1);
    output(&c, tj_graph_add(c.g, tj_graph_matmul(c.g, p, v), r));
    c.tol = tj_cts_tol_for(d, 0);
    finish(&c, 1, 0);

    snprintf(name, sizeof(name), "bmm_%s_heads_bias_gelu", tj_dtype_name(d));
    begin(&c, name);
    tj_value_t x = input(&c, d, 4, (int64_t[]){2, 3, c.B, 200}, -1, 1);
    tj_value_t w = input(&c, d, 4, (int64_t[]){2, 3, 200, 136}, -0.2, 0.2);
    tj_value_t b = input(&c, d, 1, (int64_t[]){136}, -1, 1);
    output(&c,
           tj_graph_gelu(c.g, tj_graph_add(c.g, tj_graph_matmul(c.g, x, w), b),
                         true));
    c.tol = d == TJ_DTYPE_F16 ? (tol_t){4e-3, 2e-3} : tj_cts_tol_for(d, 0);
    finish(&c, 1, 0);
  }
}

// f32 matmuls that may run on TF32 tensor cores (allow_tf32; sm_90a's
// autotuner times its wgmma .tf32 kernels and cuBLASLt's TF32 mode; other
// targets stay exact). TF32 truncates each operand to a 10-bit mantissa:
// each product is off by less than 2^-9 of |a_k b_k|, so the sum by less
// than 2^-9 sum_k |a_k b_k| (here at most 200 x 1 x 0.25 / 512 = 0.1, about
// 2e-3 for these random signs), plus f32 accumulation. The budget, atol
// and rtol 1e-2, is that; a wrong fragment or swizzle is off by O(1).
// K 200 and N 136 leave partial k-tiles and B panels; N 45 has rows TMA
// cannot load (the exact kernel then serves).
static void group_tf32_matmuls(void) {
  case_t c;
  begin(&c, "matmul_tf32_bias_gelu");
  c.allow_tf32 = true;
  tj_value_t x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 200}, -1, 1);
  tj_value_t w = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){200, 136}, -0.25, 0.25);
  tj_value_t b = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){136}, -1, 1);
  output(&c, tj_graph_gelu(c.g, tj_graph_linear(c.g, x, w, b), true));
  c.tol = (tol_t){1e-2, 1e-2};
  finish(&c, 1, 0);

  // Both operands batched: the TMA schedules on rank-3 tensor maps.
  begin(&c, "matmul_tf32_batched");
  c.allow_tf32 = true;
  x = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){3, c.B, 200}, -1, 1);
  w = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){3, 200, 136}, -0.25, 0.25);
  output(&c, tj_graph_matmul(c.g, x, w));
  c.tol = (tol_t){1e-2, 1e-2};
  finish(&c, 1, 0);

  begin(&c, "matmul_tf32_odd_n");
  c.allow_tf32 = true;
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 64}, -1, 1);
  w = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){64, 45}, -1, 1);
  output(&c, tj_graph_matmul(c.g, x, w));
  c.tol = (tol_t){1e-2, 1e-2};
  finish(&c, 1, 0);
}

// GEMMs of small M x N and long constant K, the shapes split-K serves on
// the GPU (issue 13: K in 2 or 4 slices summed in slice order, then the
// epilogue once; tests/cuda forces those candidates). K 512 and 1024
// are whole k-tiles in every slice; N 136 leaves a partial tile. f32
// stays exact: the slices' sums add f32 partials of 128 to 512 terms, an
// error of the order of the unsplit loop's (|w| <= 0.1 keeps sums near 1).
static void group_splitk_matmuls(void) {
  case_t c;
  begin(&c, "matmul_splitk_bf16_bias_gelu");
  tj_value_t x = input(&c, TJ_DTYPE_BF16, 2, (int64_t[]){c.B, 512}, -1, 1);
  tj_value_t w = input(&c, TJ_DTYPE_BF16, 2, (int64_t[]){512, 136}, -0.1, 0.1);
  tj_value_t b = input(&c, TJ_DTYPE_BF16, 1, (int64_t[]){136}, -1, 1);
  output(&c, tj_graph_gelu(c.g, tj_graph_linear(c.g, x, w, b), true));
  c.tol = tj_cts_tol_for(TJ_DTYPE_BF16, 0);
  finish(&c, 1, 0);

  begin(&c, "matmul_splitk_f32_bias_residual");
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 1024}, -1, 1);
  w = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){1024, 72}, -0.1, 0.1);
  b = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){72}, -1, 1);
  tj_value_t r = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 72}, -1, 1);
  output(&c, tj_graph_add(c.g, tj_graph_linear(c.g, x, w, b), r));
  c.tol = (tol_t){1e-4, 1e-4};
  finish(&c, 1, 0);
}

//===--- movement and leaves ---===//

static void group_movement(void) {
  case_t c;
  begin(&c, "transpose_slice_broadcast");
  c.layouts = true;
  tj_value_t x = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 7, 33}, -1, 1);
  tj_value_t t = tj_graph_transpose(c.g, x, (int32_t[]){2, 0, 1});  // 33,B,7
  tj_value_t s = tj_graph_slice(c.g, t, (int64_t[]){1, 0, 1},
                                (int64_t[]){30, INT64_MAX, 7},
                                (int64_t[]){3, 1, 2});  // 10,B,3
  tj_value_t y = input(&c, TJ_DTYPE_F32, 1, (int64_t[]){3}, -1, 1);
  output(&c, tj_graph_mul(c.g, tj_graph_exp(c.g, s), y));
  output(&c, tj_graph_broadcast_to(c.g, y, 3, (int64_t[]){2, c.B, 3}));
  c.tol = (tol_t){4e-6, 1e-7};
  finish(&c, -1, 0);

  // Reshapes that split and merge dims, symbolic ones included.
  begin(&c, "reshape_split_merge");
  c.layouts = true;
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 12}, -1, 1);
  tj_value_t r =
      tj_graph_reshape(c.g, tj_graph_neg(c.g, x), 3, (int64_t[]){c.B, 3, 4});
  tj_value_t q = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){3, 4}, -1, 1);
  output(&c, tj_graph_add(c.g, r, q));
  tj_value_t x3 = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 3, 4}, -1, 1);
  tj_value_t merged =
      tj_graph_reshape(c.g, tj_graph_relu(c.g, x3), 2,
                       (int64_t[]){tj_graph_dim_mul(c.g, c.B, 3), 4});
  output(&c, tj_graph_sigmoid(c.g, merged));
  c.tol = (tol_t){4e-6, 1e-7};
  finish(&c, -1, 0);

  begin(&c, "reshape_of_transpose");
  x = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 4, 6}, -1, 1);
  t = tj_graph_transpose(c.g, tj_graph_abs(c.g, x), (int32_t[]){0, 2, 1});
  output(&c, tj_graph_reshape(c.g, t, 2, (int64_t[]){c.B, 24}));
  finish(&c, -1, -1);

  // Pad and concat: one kernel per box of the output in which each takes
  // one branch (here [B,5|3] and [B,2|5|1]: 2 + 3 boxes, one group).
  begin(&c, "concat_pad");
  c.layouts = true;
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 5}, -1, 1);
  y = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 3}, -1, 1);
  tj_value_t cat = tj_graph_concat(c.g, 2, (tj_value_t[]){x, y}, 1);
  output(&c, tj_graph_exp(c.g, cat));
  output(&c, tj_graph_pad(c.g, tj_graph_neg(c.g, x), (int64_t[]){0, 2},
                          (int64_t[]){0, 1}, 7.0));
  c.tol = (tol_t){4e-6, 1e-7};
  finish(&c, -1, 0);

  begin(&c, "reshape_concat_pad");
  c.layouts = true;
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 12}, -1, 1);
  r = tj_graph_reshape(c.g, tj_graph_neg(c.g, x), 3, (int64_t[]){c.B, 3, 4});
  q = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){3, 4}, -1, 1);
  output(&c, tj_graph_add(c.g, r, q));
  tj_value_t a = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 5}, -1, 1);
  tj_value_t b = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 3}, -1, 1);
  cat = tj_graph_concat(c.g, 2, (tj_value_t[]){a, b}, 1);
  output(&c, tj_graph_exp(c.g, cat));
  output(&c, tj_graph_pad(c.g, tj_graph_neg(c.g, a), (int64_t[]){0, 2},
                          (int64_t[]){0, 1}, 7.0));
  c.tol = (tol_t){4e-6, 1e-7};
  finish(&c, -1, 0);

  // Along the symbolic axis, three pieces, one a constant; then sliced
  // with a step (the boxes are cut where the slice crosses a bound).
  begin(&c, "concat_symbolic_slice");
  x = input(&c, TJ_DTYPE_I32, 2, (int64_t[]){c.B, 4}, -9, 9);
  y = input(&c, TJ_DTYPE_I32, 2, (int64_t[]){3, 4}, -9, 9);
  static const int32_t kRow[4] = {100, 200, 300, 400};
  tj_value_t row = tj_graph_constant(c.g, TJ_DTYPE_I32, 2, (int64_t[]){1, 4},
                                     kRow, sizeof(kRow));
  cat = tj_graph_concat(c.g, 3, (tj_value_t[]){x, y, row}, 0);
  output(&c, tj_graph_mul(c.g, cat, cat));
  tj_value_t two = input(&c, TJ_DTYPE_I32, 2, (int64_t[]){7, 4}, -9, 9);
  tj_value_t cat2 = tj_graph_concat(c.g, 2, (tj_value_t[]){two, y}, 0);
  output(&c,
         tj_graph_slice(c.g, cat2, (int64_t[]){1, 1},
                        (int64_t[]){INT64_MAX, INT64_MAX}, (int64_t[]){2, 2}));
  finish(&c, -1, 0);

  begin(&c, "pad_2d_symbolic");
  x = input(&c, TJ_DTYPE_F16, 3, (int64_t[]){2, c.B, 6}, -4, 4);
  output(&c, tj_graph_sigmoid(c.g, tj_graph_pad(c.g, x, (int64_t[]){0, 1, 2},
                                                (int64_t[]){1, 2, 0}, -1.5)));
  c.tol = tj_cts_tol_for(TJ_DTYPE_F16, 0);
  finish(&c, -1, 0);

  // gather is a kernel fused with its consumer, indices negative and out
  // of range included (wrapped, then clamped); in the second its table is
  // another kernel's output.
  begin(&c, "gather");
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){9, 5}, -1, 1);
  tj_value_t idx = input(&c, TJ_DTYPE_I64, 1, (int64_t[]){c.B}, -12, 12);
  output(&c, tj_graph_exp(c.g, tj_graph_gather(c.g, x, idx, 0)));
  c.tol = (tol_t){4e-6, 1e-7};
  finish(&c, 1, 0);

  // ops (issue 15): gather_elements and gather_nd fused with a consumer
  // and with the computation of their indices.
  begin(&c, "gather_elements_fused");
  x = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){c.B, 6, 5}, -1, 1);
  idx = input(&c, TJ_DTYPE_I64, 3, (int64_t[]){c.B, 4, 5}, -8, 8);
  output(&c, tj_graph_exp(c.g, tj_graph_gather_elements(c.g, x, idx, 1)));
  c.tol = (tol_t){4e-6, 1e-7};
  finish(&c, 1, 0);

  begin(&c, "gather_nd_fused");
  x = input(&c, TJ_DTYPE_F32, 3, (int64_t[]){7, 6, 5}, -1, 1);
  idx = input(&c, TJ_DTYPE_I64, 2, (int64_t[]){c.B, 2}, -9, 9);
  output(&c, tj_graph_exp(
                 c.g, tj_graph_gather_nd(c.g, x, tj_graph_neg(c.g, idx), 0)));
  c.tol = (tol_t){4e-6, 1e-7};
  finish(&c, 1, 0);

  begin(&c, "gather_between_kernels");
  c.layouts = true;
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){9, 5}, -1, 1);
  idx = input(&c, TJ_DTYPE_I64, 1, (int64_t[]){c.B}, 0, 9);
  output(&c,
         tj_graph_exp(c.g, tj_graph_gather(c.g, tj_graph_neg(c.g, x), idx, 0)));
  c.tol = (tol_t){4e-6, 1e-7};
  finish(&c, -1, 0);

  begin(&c, "leaves");
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 5}, -1, 1);
  static const float kData[5] = {1, -2, 3.5f, 0.25f, 8};
  tj_value_t k = tj_graph_constant(c.g, TJ_DTYPE_F32, 1, (int64_t[]){5}, kData,
                                   sizeof(kData));
  tj_value_t io = tj_graph_iota(c.g, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 5}, 0);
  tj_value_t fl = tj_graph_full(c.g, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 5}, 0.1);
  output(&c,
         tj_graph_add(c.g, tj_graph_mul(c.g, x, k), tj_graph_add(c.g, io, fl)));
  output(&c, tj_graph_iota(c.g, TJ_DTYPE_I32, 2, (int64_t[]){3, c.B}, 1));
  finish(&c, -1, 0);

  // Outputs that are inputs, constants or the same value twice.
  begin(&c, "output_aliases");
  c.layouts = true;
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 5}, -1, 1);
  y = tj_graph_exp(c.g, x);
  output(&c, x);
  output(&c, y);
  output(&c, y);
  output(&c, tj_graph_reshape(c.g, y, 2, (int64_t[]){5, c.B}));
  c.tol = (tol_t){4e-6, 1e-7};
  finish(&c, -1, 0);

  begin(&c, "leaves_aliases");
  c.layouts = true;
  x = input(&c, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 5}, -1, 1);
  k = tj_graph_constant(c.g, TJ_DTYPE_F32, 1, (int64_t[]){5}, kData,
                        sizeof(kData));
  io = tj_graph_iota(c.g, TJ_DTYPE_F32, 2, (int64_t[]){c.B, 5}, 0);
  y = tj_graph_add(c.g, tj_graph_mul(c.g, x, k), io);
  output(&c, x);
  output(&c, y);
  output(&c, y);
  output(&c, tj_graph_reshape(c.g, y, 2, (int64_t[]){5, c.B}));
  output(&c, tj_graph_iota(c.g, TJ_DTYPE_I32, 2, (int64_t[]){3, c.B}, 1));
  c.tol = (tol_t){1e-6, 1e-7};
  finish(&c, -1, 0);
}

//===--- every op of lib/ops.def x every dtype it takes ---===//

// Values an op's operands of dtype |d| take: |flo|..|fhi| for floats,
// small integers (so no integer result overflows i8) otherwise.
static void ranges(tj_dtype_t d, double flo, double fhi, double ilo, double ihi,
                   double* lo, double* hi) {
  if (tj_dtype_is_float(d)) {
    *lo = flo;
    *hi = fhi;
  } else if (d == TJ_DTYPE_BOOL) {
    *lo = 0;
    *hi = 2;
  } else {
    *lo = ilo;
    *hi = ihi;
  }
}

static const unary_case_t* find_unary(const char* name) {
  for (size_t i = 0; i < ARRAY_SIZE(kUnary); ++i) {
    if (strcmp(kUnary[i].name, name) == 0) return &kUnary[i];
  }
  return NULL;
}

// Builds the graph of |op| on dtype |d| into |c|; the builder rejects
// dtypes the op does not take (the graph is then in error). False when the
// suite has no graph for |op| (an op added to lib/ops.def without a case).
// The custom op of the op matrix: a host copy of any dtype (y = x),
// registered once per context.
static tj_status_t cts_same_type(void* user, tj_graph_t* g,
                                 const tj_custom_type_t* in, int32_t n,
                                 const tj_custom_attrs_t* attrs,
                                 tj_custom_type_t* out) {
  (void)user, (void)g, (void)n, (void)attrs;
  *out = in[0];
  return NULL;
}

static tj_status_t cts_copy(void* user, const tj_tensor_t* in, int32_t n,
                            const tj_custom_attrs_t* attrs,
                            const tj_tensor_t* out) {
  (void)user, (void)n, (void)attrs;
  int64_t numel = 1;
  for (int32_t d = 0; d < out->rank; ++d) numel *= out->shape[d];
  if (numel)
    memcpy(out->data, in[0].data, (size_t)numel * tj_dtype_size(out->dtype));
  return NULL;
}

static void register_cts_copy(tj_context_t* ctx) {
  tj_custom_op_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.struct_size = sizeof(desc);
  desc.name = "cts_copy";
  desc.version = 1;
  desc.num_inputs = 1;
  desc.shape = cts_same_type;
  desc.host = cts_copy;
  desc.flags = TJ_CUSTOM_OP_PURE | TJ_CUSTOM_OP_CONTIGUOUS_INPUTS;
  // A second registration in one context is refused: already there.
  tj_status_free(tj_context_register_op(ctx, &desc));
}

static bool build_op(case_t* c, tj_op_t op, tj_dtype_t d) {
  tj_graph_t* g = c->g;
  int64_t B = c->B;
  double lo, hi;
  bool is_float = tj_dtype_is_float(d);
  double one = d == TJ_DTYPE_BOOL ? 1 : is_float ? 0.1 : 3;
  c->tol = tj_cts_tol_for(d, 1e-6);
  if (!is_float) c->tol = (tol_t){0, 0};
  tj_op_kind_t kind = tj_op_info(op)->kind;
  switch (op) {
    case TJ_OP_INPUT: {
      ranges(d, -5, 5, -50, 50, &lo, &hi);
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 5}, lo, hi);
      output(c, x);
      return true;
    }
    case TJ_OP_CONSTANT: {
      unsigned char data[5 * 8];
      static const double kVals[5] = {1, -2, 3.5, 0, 8};
      for (int i = 0; i < 5; ++i) {
        if (d == TJ_DTYPE_BOOL) {
          tj_store_i64(d, data, i, i % 2);
        } else if (is_float) {
          tj_store_f64(d, data, i, kVals[i]);
        } else {
          tj_store_i64(d, data, i, (int64_t)kVals[i]);
        }
      }
      ranges(d, -5, 5, -3, 3, &lo, &hi);
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 5}, lo, hi);
      tj_value_t k = tj_graph_constant(g, d, 1, (int64_t[]){5}, data,
                                       5 * tj_dtype_size(d));
      output(c, k);
      output(c, tj_graph_eq(g, x, k));
      return true;
    }
    case TJ_OP_FULL: {
      ranges(d, -1, 1, -3, 3, &lo, &hi);
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 5}, lo, hi);
      tj_value_t f = tj_graph_full(g, d, 2, (int64_t[]){B, 5}, one);
      output(c, f);
      output(c, tj_graph_ne(g, x, f));
      return true;
    }
    case TJ_OP_IOTA:
      output(c, tj_graph_iota(g, d, 2, (int64_t[]){B, 4}, 1));
      output(c, tj_graph_iota(g, d, 2, (int64_t[]){3, B}, 0));
      return true;
    case TJ_OP_CAST: {
      ranges(d, -100, 100, -100, 100, &lo, &hi);
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 7}, lo, hi);
      for (size_t j = 0; j < ARRAY_SIZE(kAllTypes); ++j) {
        if (kAllTypes[j] != d) output(c, tj_graph_cast(g, x, kAllTypes[j]));
      }
      // Half and f64 targets: tj_cts_tol_for of each; take the loosest.
      c->tol = tj_cts_tol_for(TJ_DTYPE_BF16, 0);
      return true;
    }
    case TJ_OP_WHERE: {
      ranges(d, -5, 5, -50, 50, &lo, &hi);
      tj_value_t p = input(c, TJ_DTYPE_BOOL, 2, (int64_t[]){B, 9}, 0, 2);
      tj_value_t a = input(c, d, 2, (int64_t[]){B, 9}, lo, hi);
      tj_value_t b = input(c, d, 1, (int64_t[]){9}, lo, hi);
      output(c, tj_graph_where(g, p, a, b));
      return true;
    }
    case TJ_OP_MATMUL: {
      ranges(d, -1, 1, -3, 4, &lo, &hi);
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 5}, lo, hi);
      tj_value_t w = input(c, d, 2, (int64_t[]){5, 3}, lo, hi);
      output(c, tj_graph_matmul(g, x, w));
      if (is_float) c->tol = tj_cts_tol_for(d, 1e-5);
      return true;
    }
    case TJ_OP_RESHAPE: {
      ranges(d, -5, 5, -50, 50, &lo, &hi);
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 12}, lo, hi);
      output(c, tj_graph_reshape(g, x, 3, (int64_t[]){B, 3, 4}));
      return true;
    }
    case TJ_OP_TRANSPOSE: {
      ranges(d, -5, 5, -50, 50, &lo, &hi);
      tj_value_t x = input(c, d, 3, (int64_t[]){B, 3, 4}, lo, hi);
      output(c, tj_graph_transpose(g, x, (int32_t[]){2, 0, 1}));
      return true;
    }
    case TJ_OP_BROADCAST_TO: {
      ranges(d, -5, 5, -50, 50, &lo, &hi);
      tj_value_t x = input(c, d, 1, (int64_t[]){3}, lo, hi);
      output(c, tj_graph_broadcast_to(g, x, 3, (int64_t[]){2, B, 3}));
      return true;
    }
    case TJ_OP_SLICE: {
      ranges(d, -5, 5, -50, 50, &lo, &hi);
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 9}, lo, hi);
      output(c, tj_graph_slice(g, x, (int64_t[]){0, 1},
                               (int64_t[]){INT64_MAX, 8}, (int64_t[]){1, 2}));
      return true;
    }
    case TJ_OP_CONCAT: {
      ranges(d, -5, 5, -50, 50, &lo, &hi);
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 3}, lo, hi);
      tj_value_t y = input(c, d, 2, (int64_t[]){B, 2}, lo, hi);
      output(c, tj_graph_concat(g, 2, (tj_value_t[]){x, y}, 1));
      return true;
    }
    case TJ_OP_PAD: {
      ranges(d, -5, 5, -50, 50, &lo, &hi);
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 4}, lo, hi);
      output(c, tj_graph_pad(g, x, (int64_t[]){0, 1}, (int64_t[]){1, 0}, 1));
      return true;
    }
    case TJ_OP_GATHER: {
      ranges(d, -5, 5, -50, 50, &lo, &hi);
      tj_value_t x = input(c, d, 2, (int64_t[]){9, 5}, lo, hi);
      tj_value_t idx = input(c, TJ_DTYPE_I64, 1, (int64_t[]){B}, 0, 9);
      output(c, tj_graph_gather(g, x, idx, 0));
      return true;
    }
    // ops (issue 15): the indexed reads of ONNX, indices out of range.
    case TJ_OP_GATHER_ELEMENTS: {
      ranges(d, -5, 5, -50, 50, &lo, &hi);
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 5}, lo, hi);
      tj_value_t idx = input(c, TJ_DTYPE_I64, 2, (int64_t[]){B, 7}, -7, 7);
      output(c, tj_graph_gather_elements(g, x, idx, 1));
      return true;
    }
    case TJ_OP_GATHER_ND: {
      ranges(d, -5, 5, -50, 50, &lo, &hi);
      tj_value_t x = input(c, d, 3, (int64_t[]){B, 4, 5}, lo, hi);
      tj_value_t idx = input(c, TJ_DTYPE_I32, 3, (int64_t[]){B, 3, 1}, -5, 5);
      output(c, tj_graph_gather_nd(g, x, idx, 1));
      return true;
    }
    // scatter (issue 15): indices out of range and duplicated; add (max
    // for scatter_nd), bool replaced.
    case TJ_OP_SCATTER_ELEMENTS: {
      ranges(d, -5, 5, -50, 50, &lo, &hi);
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 5}, lo, hi);
      tj_value_t idx = input(c, TJ_DTYPE_I64, 2, (int64_t[]){B, 7}, -7, 7);
      tj_value_t u = input(c, d, 2, (int64_t[]){B, 7}, lo, hi);
      output(c, tj_graph_scatter_elements(g, x, idx, u, 1,
                                          d == TJ_DTYPE_BOOL
                                              ? TJ_SCATTER_REDUCTION_NONE
                                              : TJ_SCATTER_REDUCTION_ADD));
      return true;
    }
    case TJ_OP_SCATTER_ND: {
      ranges(d, -5, 5, -50, 50, &lo, &hi);
      tj_value_t x = input(c, d, 2, (int64_t[]){6, B}, lo, hi);
      tj_value_t idx = input(c, TJ_DTYPE_I32, 2, (int64_t[]){3, 1}, -6, 6);
      tj_value_t u = input(c, d, 2, (int64_t[]){3, B}, lo, hi);
      output(c, tj_graph_scatter_nd(g, x, idx, u,
                                    d == TJ_DTYPE_BOOL
                                        ? TJ_SCATTER_REDUCTION_NONE
                                        : TJ_SCATTER_REDUCTION_MAX));
      return true;
    }
    // ops3 (issue 15): scans along a middle axis (exclusive, reversed).
    case TJ_OP_CUMSUM:
    case TJ_OP_CUMPROD: {
      bool prod = op == TJ_OP_CUMPROD;
      ranges(d, prod ? 0.5 : -5, prod ? 1.5 : 5, prod ? -3 : -50, prod ? 3 : 50,
             &lo, &hi);
      tj_value_t x = input(c, d, 3, (int64_t[]){B, 6, 4}, lo, hi);
      output(c, prod ? tj_graph_cumprod(g, x, 1, false, true)
                     : tj_graph_cumsum(g, x, -2, true, false));
      return true;
    }
    // topk (issue 15): the indices of the 3 largest along a middle axis;
    // random inputs have no ties, so every target must agree exactly.
    case TJ_OP_ARGTOPK: {
      ranges(d, -5, 5, -50, 50, &lo, &hi);
      tj_value_t x = input(c, d, 3, (int64_t[]){B, 7, 4}, lo, hi);
      output(c, tj_graph_argtopk(g, x, 3, 1, true));
      return true;
    }
    case TJ_OP_CUSTOM: {
      register_cts_copy(tj_graph_context(g));
      ranges(d, -5, 5, -50, 50, &lo, &hi);
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 5}, lo, hi);
      tj_value_t y = tj_graph_custom(g, "cts_copy", &x, 1, NULL);
      output(c, tj_graph_add(g, y, y));
      return true;
    }
    case TJ_OP_GELU: {
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 33}, -4, 4);
      output(c, tj_graph_gelu(g, x, false));
      output(c, tj_graph_gelu(g, x, true));
      c->tol = composite_tol(d, 2e-5);
      return true;
    }
    case TJ_OP_SILU: {
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 33}, -6, 6);
      output(c, tj_graph_silu(g, x));
      c->tol = composite_tol(d, 2e-5);
      return true;
    }
    case TJ_OP_SOFTMAX:
    case TJ_OP_LOG_SOFTMAX: {
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 33}, -6, 6);
      output(c, op == TJ_OP_SOFTMAX ? tj_graph_softmax(g, x, -1)
                                    : tj_graph_log_softmax(g, x, -1));
      c->tol = composite_tol(d, 2e-5);
      return true;
    }
    case TJ_OP_LAYER_NORM: {
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 40}, -3, 3);
      tj_value_t gm = input(c, d, 1, (int64_t[]){40}, 0.5, 2);
      tj_value_t bt = input(c, d, 1, (int64_t[]){40}, -1, 1);
      output(c, tj_graph_layer_norm(g, x, gm, bt, 1e-5));
      c->tol = composite_tol(d, 5e-5);
      return true;
    }
    case TJ_OP_RMS_NORM: {
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 40}, -3, 3);
      tj_value_t gm = input(c, d, 1, (int64_t[]){40}, 0.5, 2);
      output(c, tj_graph_rms_norm(g, x, gm, 1e-6));
      c->tol = composite_tol(d, 5e-5);
      return true;
    }
    case TJ_OP_ONE_HOT: {
      // Indices around and beyond [-depth, depth): wrapped, or all off.
      tj_value_t ix = input(c, TJ_DTYPE_I64, 2, (int64_t[]){B, 3}, -9, 9);
      tj_value_t v = input(c, d, 1, (int64_t[]){2}, -5, 5);
      output(c, tj_graph_one_hot(g, ix, v, 7, 1));
      output(c, tj_graph_one_hot(g, ix, v, B, -1));
      c->tol = (tol_t){0, 0};
      return true;
    }
    // qgemm (issue 17): i8/u8 over their whole range, exact (other dtypes
    // are not taken: inference refuses them).
    case TJ_OP_MATMUL_I32:
    case TJ_OP_MATMUL_INTEGER: {
      double ilo = d == TJ_DTYPE_U8 ? 0 : -128, ihi = ilo + 255;
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 21}, ilo, ihi);
      tj_value_t w = input(c, d, 2, (int64_t[]){21, 19}, ilo, ihi);
      if (op == TJ_OP_MATMUL_I32) {
        output(c, tj_graph_matmul_i32(g, x, w));
      } else {
        tj_value_t za = input(c, d, 2, (int64_t[]){B, 1}, ilo, ihi);
        tj_value_t zb = input(c, d, 1, (int64_t[]){19}, ilo, ihi);
        output(c, tj_graph_matmul_integer(g, x, w, za, zb));
      }
      c->tol = (tol_t){0, 0};
      return true;
    }
    // fp8 (issue 17): e4m3 x e5m2 into f32, taken once (as the f32 case);
    // every other dtype is an operand inference refuses.
    case TJ_OP_MATMUL_F8: {
      tj_dtype_t da = d == TJ_DTYPE_F32 ? TJ_DTYPE_F8E4M3 : d;
      tj_dtype_t db = d == TJ_DTYPE_F32 ? TJ_DTYPE_F8E5M2 : d;
      tj_value_t x = input(c, da, 2, (int64_t[]){B, 21}, -8, 8);
      tj_value_t w = input(c, db, 2, (int64_t[]){21, 19}, -8, 8);
      output(c, tj_graph_matmul_f8(g, x, w));
      c->tol = composite_tol(TJ_DTYPE_F32, 1e-5);
      return true;
    }
    case TJ_OP_LINEAR: {
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 8}, -1, 1);
      tj_value_t w = input(c, d, 2, (int64_t[]){8, 5}, -1, 1);
      tj_value_t b = input(c, d, 1, (int64_t[]){5}, -1, 1);
      output(c, tj_graph_linear(g, x, w, b));
      c->tol = composite_tol(d, 1e-5);
      return true;
    }
    // attn (issue 14): grouped-query heads, a bool mask, causal, Tq != Tk
    // (tests/unit/attention_test.c has the shapes in depth).
    case TJ_OP_ATTENTION: {
      tj_value_t q = input(c, d, 4, (int64_t[]){B, 4, 5, 8}, -1, 1);
      tj_value_t k = input(c, d, 4, (int64_t[]){B, 2, 7, 8}, -1, 1);
      tj_value_t v = input(c, d, 4, (int64_t[]){B, 2, 7, 6}, -1, 1);
      tj_value_t m = input(c, d, 2, (int64_t[]){5, 7}, -1, 1);
      output(c, tj_graph_attention(g, q, k, v, tj_value_none(), 0.0, false));
      output(c, tj_graph_attention(g, q, k, v, m, 0.5, true));
      c->tol = composite_tol(d, 1e-5);
      return true;
    }
    // fabwd (issue 14): attention's backward on the same shapes; lse and
    // delta are inputs of the compute dtype (tests/unit/attention_grad_test.c
    // checks them against finite differences).
    case TJ_OP_ATTENTION_LSE:
    case TJ_OP_ATTENTION_DQ:
    case TJ_OP_ATTENTION_DKV: {
      const tj_dtype_t rd =
          d == TJ_DTYPE_F16 || d == TJ_DTYPE_BF16 ? TJ_DTYPE_F32 : d;
      tj_value_t q = input(c, d, 4, (int64_t[]){B, 4, 5, 8}, -1, 1);
      tj_value_t k = input(c, d, 4, (int64_t[]){B, 2, 7, 8}, -1, 1);
      tj_value_t m = input(c, d, 2, (int64_t[]){5, 7}, -1, 1);
      if (op == TJ_OP_ATTENTION_LSE) {
        output(c, tj_graph_attention_lse(g, q, k, tj_value_none(), 0, false));
        output(c, tj_graph_attention_lse(g, q, k, m, 0.5, true));
      } else {
        tj_value_t v = input(c, d, 4, (int64_t[]){B, 2, 7, 6}, -1, 1);
        tj_value_t gy = input(c, d, 4, (int64_t[]){B, 4, 5, 6}, -1, 1);
        tj_value_t lse = input(c, rd, 3, (int64_t[]){B, 4, 5}, 1, 2);
        tj_value_t delta = input(c, rd, 3, (int64_t[]){B, 4, 5}, -1, 1);
        tj_value_t (*fn)(tj_graph_t*, tj_value_t, tj_value_t, tj_value_t,
                         tj_value_t, tj_value_t, tj_value_t, tj_value_t, double,
                         bool) = op == TJ_OP_ATTENTION_DQ
                                     ? tj_graph_attention_dq
                                     : tj_graph_attention_dkv;
        output(c, fn(g, q, k, v, tj_value_none(), gy, lse, delta, 0, false));
        output(c, fn(g, q, k, v, m, gy, lse, delta, 0.5, true));
      }
      c->tol = composite_tol(d, 1e-5);
      return true;
    }
    // quant2 (issue 17): x of dtype d to i8 per axis with zero points and
    // back, and blocked int4 (tests/unit/quant_ops_test.c has the rest).
    case TJ_OP_QUANTIZE:
    case TJ_OP_DEQUANTIZE: {
      tj_value_t x = input(c, d, 2, (int64_t[]){B, 8}, -3, 3);
      tj_value_t s = input(c, d, 1, (int64_t[]){8}, 0.02, 0.05);
      tj_value_t z = input(c, TJ_DTYPE_I8, 1, (int64_t[]){8}, -4, 4);
      tj_quant_attrs_t a = {.dtype = TJ_DTYPE_I8, .axis = 1};
      tj_value_t q = tj_graph_quantize(g, x, s, z, &a);
      output(c, q);
      output(c, tj_graph_dequantize(g, q, s, z, &a));
      tj_value_t sb = input(c, d, 2, (int64_t[]){B, 2}, 0.2, 0.5);
      tj_quant_attrs_t b = {.dtype = TJ_DTYPE_U8,
                            .axis = 1,
                            .block_size = 4,
                            .int4 = TJ_INT4_SIGNED};
      tj_value_t q4 = tj_graph_quantize(g, x, sb, tj_value_none(), &b);
      output(c, q4);
      output(c, tj_graph_dequantize(g, q4, sb, tj_value_none(), &b));
      c->tol = (tol_t){0, 0};
      return true;
    }
    // convpool: conv, conv_transpose and the pools (tests/unit/conv_test.c
    // has the shapes and attributes in depth).
    case TJ_OP_CONV:
    case TJ_OP_CONV_TRANSPOSE: {
      tj_conv_attrs_t a = {.strides = {2, 1},
                           .pads_begin = {1, 0},
                           .pads_end = {0, 1},
                           .groups = 2};
      tj_value_t x = input(c, d, 4, (int64_t[]){B, 4, 7, 6}, -1, 1);
      tj_value_t b = input(c, d, 1, (int64_t[]){6}, -1, 1);
      if (op == TJ_OP_CONV) {
        tj_value_t w = input(c, d, 4, (int64_t[]){6, 2, 3, 2}, -1, 1);
        output(c, tj_graph_conv(g, x, w, b, &a));
      } else {
        tj_value_t w = input(c, d, 4, (int64_t[]){4, 3, 3, 2}, -1, 1);
        output(c, tj_graph_conv_transpose(g, x, w, b, &a));
      }
      c->tol = composite_tol(d, 1e-5);
      return true;
    }
    case TJ_OP_MAX_POOL:
    case TJ_OP_AVG_POOL:
    case TJ_OP_LP_POOL: {
      tj_conv_attrs_t a = {.kernel = {3, 2},
                           .strides = {2, 2},
                           .pads_begin = {1, 0},
                           .pads_end = {1, 1},
                           .ceil_mode = true};
      tj_value_t x = input(c, d, 4, (int64_t[]){B, 3, 7, 6}, 0.1, 2);
      output(c, op == TJ_OP_MAX_POOL   ? tj_graph_max_pool(g, x, &a)
                : op == TJ_OP_AVG_POOL ? tj_graph_avg_pool(g, x, &a)
                                       : tj_graph_lp_pool(g, x, &a));
      c->tol = composite_tol(d, 2e-5);
      return true;
    }
    default:
      break;
  }
  if (kind == TJ_OP_KIND_UNARY) {
    const unary_case_t* u = find_unary(tj_op_info(op)->name);
    double flo = u ? u->lo : -10, fhi = u ? u->hi : 10;
    ranges(d, flo, fhi, -10, 10, &lo, &hi);
    tj_value_t x = input(c, d, 2, (int64_t[]){B, 33}, lo, hi);
    switch (op) {
      case TJ_OP_NOT:
        output(c, tj_graph_logical_not(g, x));
        break;
      case TJ_OP_ISNAN:
        output(c, tj_graph_isnan(g, tj_graph_log(g, x)));  // NaN below 0
        break;
      case TJ_OP_BITWISE_NOT:
        output(c, tj_graph_bitwise_not(g, x));
        break;
      case TJ_OP_BITCAST: {
        // To an integer of the same size (the other-signed twin of an
        // integer), compared exactly.
        const size_t sz = tj_dtype_size(d);
        const tj_dtype_t to =
            sz == 1   ? (d == TJ_DTYPE_U8 ? TJ_DTYPE_I8 : TJ_DTYPE_U8)
            : sz == 2 ? (d == TJ_DTYPE_I16 ? TJ_DTYPE_U16 : TJ_DTYPE_I16)
            : sz == 4 ? (d == TJ_DTYPE_I32 ? TJ_DTYPE_U32 : TJ_DTYPE_I32)
                      : (d == TJ_DTYPE_I64 ? TJ_DTYPE_U64 : TJ_DTYPE_I64);
        output(c, tj_graph_bitcast(g, x, to));
        c->tol = (tol_t){0, 0};
        break;
      }
      default:
        if (!u) return false;
        output(c, u->fn(g, x));
        if (u->rtol > 0) {
          c->tol = tj_cts_tol_for(d, u->rtol);
          if (d == TJ_DTYPE_F64) c->tol = (tol_t){1e-13, 1e-300};
        } else {
          c->tol.atol = 0;
        }
        break;
    }
    return true;
  }
  if (kind == TJ_OP_KIND_BINARY) {
    binary_fn fn = NULL;
    for (size_t i = 0; i < ARRAY_SIZE(kBinary) && !fn; ++i) {
      if (strcmp(kBinary[i].name, tj_op_info(op)->name) == 0)
        fn = kBinary[i].fn;
    }
    if (op == TJ_OP_AND) fn = tj_graph_logical_and;
    if (op == TJ_OP_OR) fn = tj_graph_logical_or;
    if (!fn) return false;
    if (op == TJ_OP_POW) {
      ranges(d, 0.5, 3, 0, 3, &lo, &hi);
    } else {
      ranges(d, -10, 10, -10, 10, &lo, &hi);
    }
    tj_value_t x = input(c, d, 2, (int64_t[]){B, 9}, lo, hi);
    tj_value_t y = input(c, d, 1, (int64_t[]){9}, lo, hi);
    output(c, fn(g, x, y));
    if (op == TJ_OP_POW) {
      c->tol = tj_cts_tol_for(d, 4e-6);
      if (d == TJ_DTYPE_F64) c->tol.rtol = 1e-13;
    }
    return true;
  }
  if (kind == TJ_OP_KIND_REDUCTION) {
    // Integer sums stay within [-27, 27] and products within [-1, 1].
    if (op == TJ_OP_PROD) {
      ranges(d, 0.9, 1.1, -1, 2, &lo, &hi);
    } else {
      ranges(d, -1, 1, -3, 4, &lo, &hi);
    }
    tj_value_t x = input(c, d, 3, (int64_t[]){B, 7, 9}, lo, hi);
    if (op == TJ_OP_ARGMAX) {
      output(c, tj_graph_argmax(g, x, 2, false));
      output(c, tj_graph_argmax(g, x, 1, true));
      return true;
    }
    if (op == TJ_OP_ARGMIN) {
      output(c, tj_graph_argmin(g, x, 2, false));
      output(c, tj_graph_argmin(g, x, 1, true));
      return true;
    }
    reduce_fn fn = op == TJ_OP_SUM    ? tj_graph_sum
                   : op == TJ_OP_MEAN ? tj_graph_mean
                   : op == TJ_OP_MAX  ? tj_graph_max
                   : op == TJ_OP_MIN  ? tj_graph_min
                                      : tj_graph_prod;
    output(c, fn(g, x, 1, (int32_t[]){1}, false));
    output(c, fn(g, x, 1, (int32_t[]){2}, true));
    if (is_float) c->tol = composite_tol(d, 2e-5);
    return true;
  }
  return false;
}

static void group_op_dtype_matrix(void) {
  int built = 0, not_taken = 0;
  for (int op = 0; op < TJ_OP_COUNT_; ++op) {
    int dtypes = 0;
    for (size_t t = 0; t < ARRAY_SIZE(kAllTypes); ++t) {
      tj_dtype_t d = kAllTypes[t];
      char name[64];
      snprintf(name, sizeof(name), "op_%s_%s", tj_op_info((tj_op_t)op)->name,
               tj_dtype_name(d));
      case_t c;
      begin(&c, name);
      if (!build_op(&c, (tj_op_t)op, d)) {
        tj_graph_destroy(c.g);
        break;  // reported below: no dtype built
      }
      tj_status_t s = tj_graph_status(c.g);
      if (s) {
        // The op does not take |d| (its type rule says why).
        tj_status_free(s);
        tj_graph_destroy(c.g);
        ++not_taken;
        continue;
      }
      // Movement ops and add also run with strided and device tensors.
      tj_op_kind_t kind = tj_op_info((tj_op_t)op)->kind;
      c.layouts =
          kind == TJ_OP_KIND_MOVEMENT || op == TJ_OP_CAST || op == TJ_OP_WHERE;
      finish(&c, -1, -1);
      ++dtypes;
      ++built;
    }
    ++tj_cts_checks;
    if (dtypes == 0)
      fail("op %s%s: no conformance case builds for any dtype\n",
           tj_op_info((tj_op_t)op)->name, "");
  }
  printf("# %s: op x dtype matrix: %d cases, %d op/dtype pairs not taken\n",
         g_be->name, built, not_taken);
}

//===--- the suite ---===//

typedef struct group_t {
  const char* name;
  void (*fn)(void);
} group_t;

static const group_t kGroups[] = {
    {"unary_ops", group_unary_ops},
    {"logical_and_predicates", group_logical_and_predicates},
    {"binary_ops_broadcast", group_binary_ops_broadcast},
    {"where_and_casts", group_where_and_casts},
    {"reductions", group_reductions},
    {"softmax_layer_norm", group_softmax_layer_norm},
    {"matmuls", group_matmuls},
    {"half_matmuls", group_half_matmuls},
    {"batched_matmuls", group_batched_matmuls},
    {"tf32_matmuls", group_tf32_matmuls},
    {"splitk_matmuls", group_splitk_matmuls},
    {"movement", group_movement},
    {"op_dtype_matrix", group_op_dtype_matrix},
};

static void run_group(const tj_cts_backend_t* be, const group_t* gr) {
  g_be = be;
  int before = tj_cts_failures;
  gr->fn();
  printf("%s - %s %s\n", tj_cts_failures == before ? "ok" : "not ok", be->name,
         gr->name);
  fflush(stdout);
}

bool tj_cts_run_group(const tj_cts_backend_t* be, const char* name) {
  for (size_t i = 0; i < ARRAY_SIZE(kGroups); ++i) {
    if (strcmp(kGroups[i].name, name) == 0) {
      run_group(be, &kGroups[i]);
      return true;
    }
  }
  return false;
}

int tj_cts_run_all(const tj_cts_backend_t* be) {
  int before = tj_cts_failures;
  g_cases = g_runs = g_skipped = 0;
  const char* only = getenv("TJ_CTS_GROUP");  // one group, when debugging
  for (size_t i = 0; i < ARRAY_SIZE(kGroups); ++i) {
    if (only && only[0] && strcmp(only, kGroups[i].name) != 0) continue;
    run_group(be, &kGroups[i]);
  }
  printf(
      "# %s conformance: %d cases (%d skipped), %d runs against the "
      "reference\n",
      be->name, g_cases, g_skipped, g_runs);
  return tj_cts_failures - before;
}

int tj_cts_compile_all(const tj_cts_backend_t* be, tj_cts_compile_fn fn,
                       void* self) {
  g_compile_fn = fn;
  g_compile_self = self;
  int failures = tj_cts_run_all(be);
  g_compile_fn = NULL;
  g_compile_self = NULL;
  return failures;
}
