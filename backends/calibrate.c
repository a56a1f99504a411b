// tj_calibrate (include/tensorjit/tj_quant.h, issue 17): static activation
// quantization. The activations the graph's matmuls read as A are made
// extra outputs of a probe copy of the graph, the samples run through it
// on the reference interpreter (so the values are the oracle's, whatever
// target compiles the result), and each activation gets quantize ->
// dequantize with a scale (and zero point) from the values seen: min-max,
// percentiles, or entropy (ONNX Runtime's calibrators; the percentile is a
// rank in the sorted values, the entropy threshold a scan over a fixed
// histogram, so the choices are deterministic). Above lib/ because it runs
// the reference.

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/dtype.h"
#include "lib/passes/pass.h"
#include "lib/quant.h"
#include "tensorjit/tj_quant.h"

TJ_API void tj_calibrate_options_initialize(tj_calibrate_options_t* options) {
  memset(options, 0, sizeof(*options));
  options->method = TJ_CALIBRATE_MINMAX;
  options->percentile = 99.99;
  options->dtype = TJ_DTYPE_U8;
}

// One activation: its node and what the samples showed.
typedef struct act_t {
  uint32_t node;
  double lo, hi;   // min-max
  double* values;  // percentile, entropy: every value seen
  size_t count, capacity;
  // TJ_CALIBRATE_SMOOTH: the channels (the last dim, K) when every matmul
  // reading this activation has a float constant B [K, N]; 0 otherwise.
  // Per channel: min, max and max |x| seen, then the smoothing factor s.
  int64_t channels;
  double* ch;  // [4 * channels]: lo, hi, amax, s
} act_t;

typedef struct calib_t {
  const tj_graph_t* graph;
  const tj_calibrate_options_t* o;
  tj_allocator_t al;
  act_t* acts;
  uint32_t num_acts;
} calib_t;

// Whether node |a| is an activation a matmul reads as A.
static bool is_activation(const tj_graph_t* g, uint32_t a) {
  const tj_node_t* n = &g->nodes[a];
  return n->dtype == TJ_DTYPE_F32 && n->op != TJ_OP_CONSTANT &&
         n->op != TJ_OP_DEQUANTIZE;
}

// Whether matmul |m|'s B is a float constant [K, N] whose rows a smoothing
// factor can scale (SmoothQuant).
static bool smoothable_b(const tj_graph_t* g, const tj_node_t* m) {
  const tj_node_t* a = &g->nodes[m->operands[0]];
  const tj_node_t* b = &g->nodes[m->operands[1]];
  return b->op == TJ_OP_CONSTANT && b->dtype == TJ_DTYPE_F32 && b->rank == 2 &&
         a->rank >= 1 && a->dims[a->rank - 1] == b->dims[0] && b->dims[0] > 0 &&
         m->operands[0] != m->operands[1];
}

static tj_status_t find_activations(calib_t* c) {
  const tj_graph_t* g = c->graph;
  c->acts = tj_calloc(c->al, g->num_nodes, sizeof(act_t));
  if (!c->acts) return tj_status_oom();
  const bool smooth = (c->o->flags & TJ_CALIBRATE_SMOOTH) != 0;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    const tj_node_t* n = &g->nodes[i];
    if (n->op != TJ_OP_MATMUL || !is_activation(g, n->operands[0])) continue;
    act_t* a = NULL;
    for (uint32_t j = 0; j < c->num_acts && !a; ++j) {
      if (c->acts[j].node == n->operands[0]) a = &c->acts[j];
    }
    if (!a) {
      a = &c->acts[c->num_acts++];
      a->node = n->operands[0];
      a->lo = INFINITY;
      a->hi = -INFINITY;
      a->channels = smooth ? -1 : 0;  // -1: no matmul seen refuses yet
    }
    if (a->channels < 0 && !smoothable_b(g, n)) a->channels = 0;
  }
  for (uint32_t j = 0; j < c->num_acts; ++j) {
    act_t* a = &c->acts[j];
    if (a->channels == 0) continue;
    const tj_node_t* an = &g->nodes[a->node];
    a->channels = an->dims[an->rank - 1];
    a->ch = tj_alloc(c->al, sizeof(double) * 4 * (size_t)a->channels);
    if (!a->ch) return tj_status_oom();
    for (int64_t k = 0; k < a->channels; ++k) {
      a->ch[4 * k] = INFINITY;
      a->ch[4 * k + 1] = -INFINITY;
      a->ch[4 * k + 2] = 0.0;
      a->ch[4 * k + 3] = 1.0;
    }
  }
  return NULL;
}

// SmoothQuant (TJ_CALIBRATE_SMOOTH): the factor s_k of each channel of
// activation |a| from the samples' max |x_k| and the weights' max |W[k,
// :]| over every matmul reading |a| (alpha 0.5: the square root of their
// ratio; 1 where either is 0), then the statistics the scale is picked
// from made those of x / s.
static void smooth_factors(const calib_t* c, act_t* a) {
  const tj_graph_t* g = c->graph;
  const int64_t K = a->channels;
  for (int64_t k = 0; k < K; ++k) {
    double wmax = 0.0;
    for (uint32_t i = 0; i < g->num_nodes; ++i) {
      const tj_node_t* m = &g->nodes[i];
      if (m->op != TJ_OP_MATMUL || m->operands[0] != a->node) continue;
      const tj_node_t* b = &g->nodes[m->operands[1]];
      const float* w = b->attrs.data;
      for (int64_t n = 0; n < b->dims[1]; ++n) {
        wmax = fmax(wmax, fabs((double)w[k * b->dims[1] + n]));
      }
    }
    double x = a->ch[4 * k + 2];
    double s = x > 0.0 && wmax > 0.0 ? sqrt(x / wmax) : 1.0;
    // In f32, as the graph holds it, so that x * (1 / s) and s * W are
    // the values the statistics describe.
    a->ch[4 * k + 3] = isfinite(s) && (float)s > 0.0f ? (float)s : 1.0;
  }
  a->lo = INFINITY;
  a->hi = -INFINITY;
  for (int64_t k = 0; k < K; ++k) {
    double s = a->ch[4 * k + 3];
    if (a->ch[4 * k] <= a->ch[4 * k + 1]) {
      a->lo = fmin(a->lo, a->ch[4 * k] / s);
      a->hi = fmax(a->hi, a->ch[4 * k + 1] / s);
    }
  }
  // Values are recorded row-major: value i is of channel i % K (NaNs
  // kept for that, dropped here).
  size_t kept = 0;
  for (size_t i = 0; i < a->count; ++i) {
    double v = a->values[i] / a->ch[4 * (int64_t)(i % (size_t)K) + 3];
    if (!isnan(v)) a->values[kept++] = v;
  }
  a->count = kept;
}

// The new-graph constant [K] (|inverse|: 1 / s, else s) of activation |a|'s
// factors.
static tj_status_t factor_constant(const calib_t* c, tj_rewriter_t* rw,
                                   const act_t* a, uint32_t* out) {
  float* f = tj_alloc(c->al, sizeof(float) * (size_t)a->channels);
  if (!f) return tj_status_oom();
  for (int64_t k = 0; k < a->channels; ++k) {
    f[k] = (float)(1.0 / a->ch[4 * k + 3]);
  }
  tj_node_desc_t d;
  memset(&d, 0, sizeof(d));
  d.op = TJ_OP_CONSTANT;
  d.dtype = TJ_DTYPE_F32;
  d.rank = 1;
  d.dims = &a->channels;
  d.attrs.data = f;
  tj_status_t s = tj_rewriter_append(rw, &d, out);
  tj_free(c->al, f, sizeof(float) * (size_t)a->channels);
  return s;
}

// Matmul |m|'s constant B [K, N] with row k times activation |a|'s s_k, in
// the new graph.
static tj_status_t smoothed_weight(const calib_t* c, tj_rewriter_t* rw,
                                   const act_t* a, const tj_node_t* m,
                                   uint32_t* out) {
  const tj_node_t* b = &c->graph->nodes[m->operands[1]];
  const int64_t K = b->dims[0], N = b->dims[1];
  const float* w = b->attrs.data;
  float* f = tj_alloc(c->al, sizeof(float) * (size_t)(K * N));
  if (!f) return tj_status_oom();
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t n = 0; n < N; ++n) {
      f[k * N + n] = (float)((double)w[k * N + n] * a->ch[4 * k + 3]);
    }
  }
  tj_node_desc_t d;
  memset(&d, 0, sizeof(d));
  d.op = TJ_OP_CONSTANT;
  d.dtype = TJ_DTYPE_F32;
  d.rank = 2;
  d.dims = b->dims;
  d.attrs.data = f;
  tj_status_t s = tj_rewriter_append(rw, &d, out);
  tj_free(c->al, f, sizeof(float) * (size_t)(K * N));
  return s;
}

static tj_status_t record(calib_t* c, act_t* a, const float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (isnan(v[i])) continue;
    if (v[i] < a->lo) a->lo = v[i];
    if (v[i] > a->hi) a->hi = v[i];
  }
  for (int64_t i = 0; a->channels > 0 && i < n; ++i) {
    double* ch = &a->ch[4 * (i % a->channels)];
    if (isnan(v[i])) continue;
    ch[0] = fmin(ch[0], v[i]);
    ch[1] = fmax(ch[1], v[i]);
    ch[2] = fmax(ch[2], fabs((double)v[i]));
  }
  if (c->o->method == TJ_CALIBRATE_MINMAX) return NULL;
  if (a->count + (size_t)n > a->capacity) {
    size_t cap = a->capacity ? a->capacity : 1024;
    while (cap < a->count + (size_t)n) cap *= 2;
    double* grown = tj_realloc(c->al, a->values, a->capacity * sizeof(double),
                               cap * sizeof(double));
    if (!grown) return tj_status_oom();
    a->values = grown;
    a->capacity = cap;
  }
  for (int64_t i = 0; i < n; ++i) {
    // Smoothing divides value i by its channel's factor: i % K must hold,
    // so NaNs are then kept here and dropped in smooth_factors.
    if (!isnan(v[i]) || a->channels > 0) a->values[a->count++] = v[i];
  }
  return NULL;
}

// Runs sample |s| through |probe| (the graph's outputs, then one per
// activation) and records the activations.
static tj_status_t run_sample(calib_t* c, const tj_graph_t* probe,
                              const tj_tensor_t* inputs, int32_t s) {
  const int32_t n_in = (int32_t)probe->num_inputs;
  const uint32_t n_out = probe->num_outputs;
  int64_t sym[TJ_MAX_SYMBOLS];
  tj_status_t status = tj_ir_bind_symbols(probe, inputs, n_in, sym);
  tj_tensor_t* outs = NULL;
  void** data = NULL;
  size_t* sizes = NULL;
  int64_t(*dims)[TJ_MAX_RANK] = NULL;
  if (!status) {
    outs = tj_calloc(c->al, n_out, sizeof(tj_tensor_t));
    data = tj_calloc(c->al, n_out, sizeof(void*));
    sizes = tj_calloc(c->al, n_out, sizeof(size_t));
    dims = tj_calloc(c->al, n_out, sizeof(*dims));
    if (!outs || !data || !sizes || !dims) status = tj_status_oom();
  }
  for (uint32_t k = 0; !status && k < n_out; ++k) {
    uint32_t node = probe->outputs[k].node;
    const tj_node_t* nd = &probe->nodes[node];
    status = tj_ir_concrete_dims(probe, node, sym, dims[k]);
    int64_t numel = 1;
    for (int32_t d = 0; !status && d < nd->rank; ++d) numel *= dims[k][d];
    if (status) break;
    sizes[k] = (size_t)(numel ? numel : 1) * tj_dtype_size(nd->dtype);
    data[k] = tj_alloc(c->al, sizes[k]);
    if (!data[k]) {
      status = tj_status_oom();
      break;
    }
    outs[k] = tj_tensor_make(data[k], nd->dtype, nd->rank, dims[k]);
  }
  if (!status) {
    status = tj_reference_run(probe, inputs, n_in, outs, (int32_t)n_out);
  }
  if (status && tj_status_code(status) == TJ_STATUS_INVALID_ARGUMENT) {
    tj_status_t named =
        tj_invalid("tj_calibrate: sample %d: %s", s, tj_status_message(status));
    tj_status_free(status);
    status = named;
  }
  uint32_t first = n_out - c->num_acts;
  for (uint32_t j = 0; !status && j < c->num_acts; ++j) {
    const tj_node_t* nd = &probe->nodes[probe->outputs[first + j].node];
    int64_t numel = 1;
    for (int32_t d = 0; d < nd->rank; ++d) numel *= dims[first + j][d];
    status = record(c, &c->acts[j], data[first + j], numel);
  }
  for (uint32_t k = 0; data && k < n_out; ++k) {
    if (data[k]) tj_free(c->al, data[k], sizes[k]);
  }
  if (outs) tj_free(c->al, outs, n_out * sizeof(tj_tensor_t));
  if (data) tj_free(c->al, data, n_out * sizeof(void*));
  if (sizes) tj_free(c->al, sizes, n_out * sizeof(size_t));
  if (dims) tj_free(c->al, dims, n_out * sizeof(*dims));
  return status;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

// The value of rank floor(q * (n - 1)) in sorted |v|.
static double quantile(const double* v, size_t n, double q) {
  if (n == 0) return 0.0;
  size_t i = (size_t)floor(q * (double)(n - 1));
  return v[i < n ? i : n - 1];
}

// ONNX Runtime's (and TensorRT's) smoothing before the divergence: |eps|
// to each empty bin, taken in equal parts from the others, so that the
// divergence is finite. False when every bin is empty.
static bool smooth(double* p, int32_t n) {
  const double eps = 1e-4;
  int32_t zeros = 0;
  for (int32_t i = 0; i < n; ++i) zeros += p[i] == 0.0;
  if (zeros == n) return false;
  const double take = eps * zeros / (n - zeros);
  for (int32_t i = 0; i < n; ++i) p[i] += p[i] == 0.0 ? eps : -take;
  return true;
}

enum { kEntropyBins = 2048, kEntropyLevels = 128 };

// The entropy (KL) calibration threshold of |v| (TensorRT's method, as
// ONNX Runtime's entropy calibrator): the histogram of |x| over [0, max
// |x|] in 2048 bins; for each candidate i (128 .. 2048 bins kept) the
// reference P is the first i bins with everything above folded into bin
// i - 1, Q those i bins (without the fold) merged into 128 levels and
// spread back evenly over the bins that P has nonzero; the threshold is
// the upper edge of the i with the least KL(P || Q). Clips the outliers
// whose range would cost the bulk of the values its resolution.
static double entropy_threshold(const double* v, size_t n, double* hist,
                                double* p, double* q) {
  double amax = 0.0;
  for (size_t i = 0; i < n; ++i) amax = fmax(amax, fabs(v[i]));
  if (!(amax > 0.0)) return 0.0;
  const double width = amax / kEntropyBins;
  memset(hist, 0, sizeof(double) * kEntropyBins);
  for (size_t i = 0; i < n; ++i) {
    int64_t b = (int64_t)(fabs(v[i]) / width);
    hist[b < kEntropyBins ? b : kEntropyBins - 1] += 1.0;
  }
  double best = INFINITY;
  int32_t best_i = kEntropyBins;
  for (int32_t i = kEntropyLevels; i <= kEntropyBins; ++i) {
    double above = 0.0;
    for (int32_t b = i; b < kEntropyBins; ++b) above += hist[b];
    memcpy(p, hist, sizeof(double) * (size_t)i);
    p[i - 1] += above;
    const int32_t merged = i / kEntropyLevels;
    for (int32_t j = 0; j < kEntropyLevels; ++j) {
      int32_t b0 = j * merged;
      int32_t b1 = j == kEntropyLevels - 1 ? i : b0 + merged;
      double sum = 0.0;
      int32_t nonzero = 0;
      for (int32_t b = b0; b < b1; ++b) {
        sum += hist[b];
        nonzero += p[b] != 0.0;
      }
      for (int32_t b = b0; b < b1; ++b) {
        q[b] = p[b] != 0.0 ? sum / nonzero : 0.0;
      }
    }
    double ps = 0.0, qs = 0.0;
    for (int32_t b = 0; b < i; ++b) {
      ps += p[b];
      qs += q[b];
    }
    if (!(ps > 0.0) || !(qs > 0.0)) continue;
    for (int32_t b = 0; b < i; ++b) {
      p[b] /= ps;
      q[b] /= qs;
    }
    if (!smooth(p, i) || !smooth(q, i)) continue;
    double kl = 0.0;
    for (int32_t b = 0; b < i; ++b) {
      if (p[b] > 0.0 && q[b] > 0.0) kl += p[b] * log(p[b] / q[b]);
    }
    if (kl < best) {
      best = kl;
      best_i = i;
    }
  }
  return best_i * width;
}

// The scale and zero point of |a|.
static tj_status_t pick(const calib_t* c, act_t* a, float* out_scale,
                        int64_t* out_zp) {
  const bool sym = c->o->dtype == TJ_DTYPE_I8;
  double lo = a->lo, hi = a->hi;
  if (!(lo <= hi)) lo = hi = 0.0;  // no value seen
  if (c->o->method == TJ_CALIBRATE_PERCENTILE && a->count) {
    const double p = c->o->percentile / 100.0;
    if (sym) {
      for (size_t i = 0; i < a->count; ++i) a->values[i] = fabs(a->values[i]);
    }
    qsort(a->values, a->count, sizeof(double), cmp_double);
    hi = quantile(a->values, a->count, p);
    lo = sym ? -hi : quantile(a->values, a->count, 1.0 - p);
  }
  if (c->o->method == TJ_CALIBRATE_ENTROPY && a->count) {
    double* work = tj_alloc(c->al, sizeof(double) * 3 * kEntropyBins);
    if (!work) return tj_status_oom();
    double t = entropy_threshold(a->values, a->count, work, work + kEntropyBins,
                                 work + 2 * kEntropyBins);
    tj_free(c->al, work, sizeof(double) * 3 * kEntropyBins);
    // Symmetric: [-t, t]; u8: the range seen, clipped to it.
    hi = sym ? t : fmin(hi, t);
    lo = sym ? -t : fmax(lo, -t);
  }
  // The range holds 0 so that 0 is exact (padding, relu's zeros).
  if (lo > 0) lo = 0;
  if (hi < 0) hi = 0;
  double scale;
  if (sym) {
    double amax = fmax(fabs(lo), fabs(hi));
    scale = amax / 127.0;
  } else {
    scale = (hi - lo) / 255.0;
  }
  float s = (float)scale;
  if (!(s > 0.0f) || !isfinite(s)) s = 1.0f;
  *out_scale = s;
  *out_zp =
      sym ? 0
          : tj_quant_to_int(tj_quant_divide(TJ_DTYPE_F32, -lo, s), 0, 0, 255);
  return NULL;
}

// quantize -> dequantize of activation |j| in the new graph.
static tj_status_t insert_qdq(const calib_t* c, tj_rewriter_t* rw, uint32_t j,
                              uint32_t* out) {
  act_t* a = &c->acts[j];
  float s = 1.0f;
  int64_t zp = 0;
  TJ_RETURN_IF_ERROR(pick(c, a, &s, &zp));
  const bool sym = c->o->dtype == TJ_DTYPE_I8;
  uint32_t sn, zn = TJ_NODE_NONE, qn;
  uint32_t x = rw->map[a->node];
  if (a->channels > 0) {  // SmoothQuant: x * (1 / s) is what is quantized
    uint32_t ops2[2] = {x, TJ_NODE_NONE};
    TJ_RETURN_IF_ERROR(factor_constant(c, rw, a, &ops2[1]));
    TJ_RETURN_IF_ERROR(tj_rewriter_op(rw, TJ_OP_MUL, 2, ops2, &x));
  }
  TJ_RETURN_IF_ERROR(tj_rewriter_scalar(rw, TJ_DTYPE_F32, s, &sn));
  if (!sym) {
    TJ_RETURN_IF_ERROR(tj_rewriter_scalar(rw, TJ_DTYPE_U8, (double)zp, &zn));
  }
  const tj_node_t* an = &c->graph->nodes[a->node];
  int64_t dims[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(tj_rewriter_dims(rw, an->rank, an->dims, dims));
  int64_t ints[TJ_QUANT_NUM_INTS] = {0, 1, 0, 0};
  uint32_t ops[3] = {x, sn, zn};
  tj_node_desc_t d;
  memset(&d, 0, sizeof(d));
  d.op = TJ_OP_QUANTIZE;
  d.num_operands = 3;
  d.operands = ops;
  d.dtype = c->o->dtype;
  d.rank = an->rank;
  d.dims = dims;
  d.attrs.ints = ints;
  d.attrs.num_ints = TJ_QUANT_NUM_INTS;
  TJ_RETURN_IF_ERROR(tj_rewriter_append(rw, &d, &qn));
  ops[0] = qn;
  d.op = TJ_OP_DEQUANTIZE;
  d.dtype = TJ_DTYPE_F32;
  return tj_rewriter_append(rw, &d, out);
}

static tj_status_t calibrate(calib_t* c, int32_t num_samples,
                             const tj_tensor_t* samples, tj_graph_t** out,
                             int32_t* out_count) {
  const tj_graph_t* g = c->graph;
  TJ_RETURN_IF_ERROR(find_activations(c));
  if (c->num_acts == 0) {
    tj_rewriter_t rw;
    TJ_RETURN_IF_ERROR(tj_rewriter_begin(&rw, g));
    tj_status_t s = NULL;
    for (uint32_t i = 0; !s && i < g->num_nodes; ++i) {
      if (g->nodes[i].op != TJ_OP_INPUT) s = tj_rewriter_clone(&rw, i);
    }
    if (s) {
      tj_rewriter_abandon(&rw);
      return s;
    }
    return tj_rewriter_finish(&rw, out);
  }
  // The probe: the graph with the activations as extra outputs.
  tj_graph_t* probe = NULL;
  {
    tj_rewriter_t rw;
    TJ_RETURN_IF_ERROR(tj_rewriter_begin(&rw, g));
    tj_status_t s = NULL;
    for (uint32_t i = 0; !s && i < g->num_nodes; ++i) {
      if (g->nodes[i].op != TJ_OP_INPUT) s = tj_rewriter_clone(&rw, i);
    }
    uint32_t* nodes = NULL;
    const char** names = NULL;
    char* text = NULL;
    if (!s) {
      nodes = tj_calloc(c->al, c->num_acts, sizeof(uint32_t));
      names = tj_calloc(c->al, c->num_acts, sizeof(char*));
      text = tj_calloc(c->al, c->num_acts, 32);
      if (!nodes || !names || !text) s = tj_status_oom();
    }
    for (uint32_t j = 0; !s && j < c->num_acts; ++j) {
      nodes[j] = rw.map[c->acts[j].node];
      snprintf(text + 32 * j, 32, "tj_calibrate_%u", j);
      names[j] = text + 32 * j;
    }
    if (s) {
      tj_rewriter_abandon(&rw);
    } else {
      s = tj_rewriter_finish_outputs(&rw, true, c->num_acts, nodes, names,
                                     &probe);
    }
    if (nodes) tj_free(c->al, nodes, c->num_acts * sizeof(uint32_t));
    if (names) tj_free(c->al, names, c->num_acts * sizeof(char*));
    if (text) tj_free(c->al, text, c->num_acts * 32);
    TJ_RETURN_IF_ERROR(s);
  }
  tj_status_t status = NULL;
  for (int32_t i = 0; !status && i < num_samples; ++i) {
    status = run_sample(c, probe, samples + (size_t)i * g->num_inputs, i);
  }
  tj_graph_destroy(probe);
  TJ_RETURN_IF_ERROR(status);
  for (uint32_t j = 0; j < c->num_acts; ++j) {
    if (c->acts[j].channels > 0) smooth_factors(c, &c->acts[j]);
  }
  // The graph with QDQ on each activation, before its matmuls.
  tj_rewriter_t rw;
  TJ_RETURN_IF_ERROR(tj_rewriter_begin(&rw, g));
  uint32_t* qdq = tj_alloc(c->al, c->num_acts * sizeof(uint32_t));
  if (!qdq) status = tj_status_oom();
  for (uint32_t j = 0; qdq && j < c->num_acts; ++j) qdq[j] = TJ_NODE_NONE;
  for (uint32_t i = 0; !status && i < g->num_nodes; ++i) {
    const tj_node_t* n = &g->nodes[i];
    if (n->op == TJ_OP_INPUT) continue;
    uint32_t j = c->num_acts;
    if (n->op == TJ_OP_MATMUL) {
      for (j = 0; j < c->num_acts && c->acts[j].node != n->operands[0]; ++j) {
      }
    }
    if (j == c->num_acts) {
      status = tj_rewriter_clone(&rw, i);
      continue;
    }
    if (qdq[j] == TJ_NODE_NONE) status = insert_qdq(c, &rw, j, &qdq[j]);
    uint32_t ops[2] = {qdq[j], rw.map[n->operands[1]]};
    if (!status && c->acts[j].channels > 0)
      status = smoothed_weight(c, &rw, &c->acts[j], n, &ops[1]);
    if (!status) status = tj_rewriter_copy(&rw, i, ops, &rw.map[i]);
  }
  if (qdq) tj_free(c->al, qdq, c->num_acts * sizeof(uint32_t));
  if (status) {
    tj_rewriter_abandon(&rw);
    return status;
  }
  TJ_RETURN_IF_ERROR(tj_rewriter_finish(&rw, out));
  *out_count = (int32_t)c->num_acts;
  return NULL;
}

TJ_API tj_status_t tj_calibrate(const tj_graph_t* graph,
                                const tj_calibrate_options_t* options,
                                int32_t num_samples, const tj_tensor_t* samples,
                                tj_graph_t** out_graph,
                                int32_t* out_num_calibrated) {
  if (out_graph) *out_graph = NULL;
  if (out_num_calibrated) *out_num_calibrated = 0;
  if (!graph || !options || !out_graph) {
    return tj_invalid("tj_calibrate: NULL argument");
  }
  if (!graph->finalized) {
    return tj_invalid("tj_calibrate: graph @%s is not finalized", graph->name);
  }
  const tj_calibrate_options_t* o = options;
  if ((o->method != TJ_CALIBRATE_MINMAX &&
       o->method != TJ_CALIBRATE_PERCENTILE &&
       o->method != TJ_CALIBRATE_ENTROPY) ||
      (o->dtype != TJ_DTYPE_U8 && o->dtype != TJ_DTYPE_I8) ||
      (o->flags & ~(uint32_t)TJ_CALIBRATE_SMOOTH) != 0 ||
      (o->method == TJ_CALIBRATE_PERCENTILE &&
       !(o->percentile > 50.0 && o->percentile <= 100.0))) {
    return tj_invalid(
        "tj_calibrate: method %u, percentile %g, dtype %s, flags %u: the "
        "methods are min-max, percentile (in (50, 100]) and entropy, the "
        "dtypes u8 and i8; flags TJ_CALIBRATE_SMOOTH or 0",
        (unsigned)o->method, o->percentile, tj_dtype_name(o->dtype),
        (unsigned)o->flags);
  }
  if (num_samples < 1 || (!samples && graph->num_inputs > 0)) {
    return tj_invalid("tj_calibrate: %d samples; at least one is needed",
                      num_samples);
  }
  calib_t c;
  memset(&c, 0, sizeof(c));
  c.graph = graph;
  c.o = o;
  c.al = graph->allocator;
  int32_t count = 0;
  tj_status_t status = calibrate(&c, num_samples, samples, out_graph, &count);
  for (uint32_t j = 0; c.acts && j < c.num_acts; ++j) {
    if (c.acts[j].values) {
      tj_free(c.al, c.acts[j].values, c.acts[j].capacity * sizeof(double));
    }
    if (c.acts[j].ch) {
      tj_free(c.al, c.acts[j].ch,
              sizeof(double) * 4 * (size_t)c.acts[j].channels);
    }
  }
  if (c.acts) tj_free(c.al, c.acts, graph->num_nodes * sizeof(act_t));
  if (!status && out_num_calibrated) *out_num_calibrated = count;
  return status;
}
