// tj_graph_quantize_weights (include/tensorjit/tj_quant.h, issue 17): the
// constant weights of a graph's matmuls into int8 per output channel or
// int4 per group along K, as dequantize(q, scale) in the graph. The scales
// are symmetric (max |w| over 127 or 7: no zero point, so a GEMM never
// needs the activations' row sums) and q is rounded as quantize rounds it
// (tj_quant_to_int: half to even, saturating), so quantizing the
// dequantized weight again gives q back.

#include <math.h>
#include <string.h>

#include "lib/dtype.h"
#include "lib/passes/pass.h"
#include "lib/quant.h"
#include "tensorjit/tj_quant.h"

TJ_API void tj_quantize_weights_options_initialize(
    tj_quantize_weights_options_t* options) {
  memset(options, 0, sizeof(*options));
  options->format = TJ_WEIGHT_INT8_PER_CHANNEL;
  options->group_size = 128;
  options->min_elements = 1024;
}

// |v| rounded to |dtype| (the scale's: f32, or bf16 for bf16 weights).
static double in_dtype(tj_dtype_t dtype, double v) {
  uint8_t tmp[8];
  tj_store_f64(dtype, tmp, 0, v);
  return tj_load_f64(dtype, tmp, 0);
}

// Whether matmul |m|'s B (or linear |m|'s w: x @ w + b, as Linear layers
// and the GPT block write them) is a weight to quantize.
static bool is_weight(const tj_graph_t* g, const tj_node_t* m,
                      const tj_quantize_weights_options_t* o) {
  if (!(m->op == TJ_OP_MATMUL && m->num_operands == 2) &&
      !(m->op == TJ_OP_LINEAR &&
        (m->num_operands == 2 || m->num_operands == 3)))
    return false;
  const tj_node_t* w = &g->nodes[m->operands[1]];
  if (w->op != TJ_OP_CONSTANT || w->rank != 2 ||
      (w->dtype != TJ_DTYPE_F32 && w->dtype != TJ_DTYPE_BF16) ||
      m->operands[0] == m->operands[1]) {
    return false;
  }
  int64_t numel;
  return tj_node_static_numel(g, m->operands[1], &numel) &&
         numel >= o->min_elements && w->dims[0] > 0 && w->dims[1] > 0;
}

static tj_status_t append_constant(tj_rewriter_t* rw, tj_dtype_t dtype,
                                   int32_t rank, const int64_t* dims,
                                   const void* data, uint32_t* out) {
  tj_node_desc_t cd;
  memset(&cd, 0, sizeof(cd));
  cd.op = TJ_OP_CONSTANT;
  cd.dtype = dtype;
  cd.rank = rank;
  cd.dims = dims;
  cd.attrs.data = data;
  return tj_rewriter_append(rw, &cd, out);
}

// dequantize(q, scale) of constant |w| [K, N] in the new graph.
static tj_status_t quantize_weight(tj_rewriter_t* rw, const tj_node_t* w,
                                   const tj_quantize_weights_options_t* o,
                                   uint32_t* out) {
  const int64_t K = w->dims[0], N = w->dims[1];
  const bool int4 = o->format == TJ_WEIGHT_INT4_PER_GROUP;
  const int64_t group = int4 ? o->group_size : K;
  const int64_t groups = (K + group - 1) / group;
  const int64_t qcols = int4 ? (N + 1) / 2 : N;
  const double qmax = int4 ? 7.0 : 127.0;
  const tj_dtype_t sdt = w->dtype;  // f32, or bf16 for a bf16 graph
  const size_t qbytes = (size_t)(K * qcols);
  const size_t sbytes = (size_t)(groups * N) * tj_dtype_size(sdt);
  tj_allocator_t al = rw->src->allocator;
  uint8_t* q = tj_calloc(al, qbytes, 1);
  uint8_t* s = tj_alloc(al, sbytes);
  tj_status_t status = NULL;
  if (!q || !s) status = tj_status_oom();
  for (int64_t gi = 0; !status && gi < groups; ++gi) {
    const int64_t k0 = gi * group, k1 = k0 + group < K ? k0 + group : K;
    for (int64_t n = 0; n < N; ++n) {
      double amax = 0.0;
      for (int64_t k = k0; k < k1; ++k) {
        double v = fabs(tj_load_f64(w->dtype, w->attrs.data, k * N + n));
        if (v > amax) amax = v;  // NaN never wins
      }
      // An all-zero (or non-finite) channel gets scale 1: q is then 0 for
      // zeros, as any scale would give.
      double sc = in_dtype(sdt, amax / qmax);
      if (!(sc > 0.0) || !isfinite(sc)) sc = 1.0;
      tj_store_f64(sdt, s, gi * N + n, sc);
      for (int64_t k = k0; k < k1; ++k) {
        double v = tj_load_f64(w->dtype, w->attrs.data, k * N + n);
        int64_t qv = tj_quant_to_int(tj_quant_divide(sdt, v, sc), 0,
                                     int4 ? -8 : -128, int4 ? 7 : 127);
        if (int4) {
          uint8_t nib = (uint8_t)(qv & 15);
          q[k * qcols + n / 2] |= (uint8_t)(n & 1 ? nib << 4 : nib);
        } else {
          q[k * N + n] = (uint8_t)(int8_t)qv;
        }
      }
    }
  }
  uint32_t qn = TJ_NODE_NONE, sn = TJ_NODE_NONE;
  int64_t qdims[2] = {K, qcols}, sdims[2] = {groups, N};
  if (!status) {
    status =
        append_constant(rw, int4 ? TJ_DTYPE_U8 : TJ_DTYPE_I8, 2, qdims, q, &qn);
  }
  if (!status) {
    status = append_constant(rw, sdt, int4 ? 2 : 1, int4 ? sdims : &sdims[1], s,
                             &sn);
  }
  tj_free(al, q, qbytes ? qbytes : 1);
  tj_free(al, s, sbytes ? sbytes : 1);
  if (status) return status;
  int64_t ints[TJ_QUANT_NUM_INTS] = {0};
  ints[TJ_QUANT_BLOCK] = int4 ? group : 0;
  ints[TJ_QUANT_SATURATE] = 1;
  ints[TJ_QUANT_INT4] = int4 ? 1 : 0;  // signed
  ints[TJ_QUANT_ODD] = int4 ? (N & 1) : 0;
  uint32_t ops[3] = {qn, sn, TJ_NODE_NONE};
  int64_t dims[2] = {K, N};
  tj_node_desc_t dd;
  memset(&dd, 0, sizeof(dd));
  dd.op = TJ_OP_DEQUANTIZE;
  dd.num_operands = 3;
  dd.operands = ops;
  dd.dtype = sdt;
  dd.rank = 2;
  dd.dims = dims;
  dd.attrs.ints = ints;
  dd.attrs.num_ints = TJ_QUANT_NUM_INTS;
  dd.attrs.axis = int4 ? 0 : 1;
  return tj_rewriter_append(rw, &dd, out);
}

TJ_API tj_status_t tj_graph_quantize_weights(
    const tj_graph_t* graph, const tj_quantize_weights_options_t* options,
    tj_graph_t** out_graph, int32_t* out_num_quantized) {
  if (out_graph) *out_graph = NULL;
  if (out_num_quantized) *out_num_quantized = 0;
  if (!graph || !options || !out_graph) {
    return tj_invalid("tj_graph_quantize_weights: NULL argument");
  }
  if (!graph->finalized) {
    return tj_invalid("tj_graph_quantize_weights: graph @%s is not finalized",
                      graph->name);
  }
  const tj_quantize_weights_options_t* o = options;
  if ((o->format != TJ_WEIGHT_INT8_PER_CHANNEL &&
       o->format != TJ_WEIGHT_INT4_PER_GROUP) ||
      o->flags != 0 || o->min_elements < 0 ||
      (o->format == TJ_WEIGHT_INT4_PER_GROUP && o->group_size != 32 &&
       o->group_size != 64 && o->group_size != 128)) {
    return tj_invalid(
        "tj_graph_quantize_weights: format %u, group size %lld, flags %u: "
        "the formats are int8 per channel and int4 per group of 32, 64 or "
        "128; flags must be 0",
        (unsigned)o->format, (long long)o->group_size, (unsigned)o->flags);
  }
  const tj_graph_t* g = graph;
  tj_rewriter_t rw;
  TJ_RETURN_IF_ERROR(tj_rewriter_begin(&rw, g));
  // A weight shared by several matmuls is quantized once; its float copy
  // is dropped when nothing else reads it (state 1: only weight uses
  // seen; 2: another use).
  uint32_t* done = tj_alloc(g->allocator, sizeof(uint32_t) * g->num_nodes);
  uint8_t* use = tj_calloc(g->allocator, g->num_nodes, 1);
  tj_status_t status = done && use ? NULL : tj_status_oom();
  for (uint32_t i = 0; !status && i < g->num_nodes; ++i) {
    done[i] = TJ_NODE_NONE;
    const tj_node_t* node = &g->nodes[i];
    bool weight = is_weight(g, node, o);
    for (uint32_t k = 0; k < node->num_operands; ++k) {
      uint32_t v = node->operands[k];
      if (v == TJ_NODE_NONE) continue;
      use[v] = weight && k == 1 && use[v] != 2 ? 1 : 2;
    }
  }
  for (uint32_t i = 0; !status && i < g->num_outputs; ++i) {
    use[g->outputs[i].node] = 2;
  }
  int32_t count = 0;
  for (uint32_t i = 0; !status && i < g->num_nodes; ++i) {
    const tj_node_t* node = &g->nodes[i];
    if (node->op == TJ_OP_INPUT) continue;
    if (use[i] == 1) continue;  // read only as a weight: replaced
    if (!is_weight(g, node, o)) {
      status = tj_rewriter_clone(&rw, i);
      continue;
    }
    uint32_t wi = node->operands[1];
    if (done[wi] == TJ_NODE_NONE) {
      status = quantize_weight(&rw, &g->nodes[wi], o, &done[wi]);
      count += !status;
    }
    uint32_t ops[3] = {rw.map[node->operands[0]], done[wi], TJ_NODE_NONE};
    if (node->num_operands == 3 && node->operands[2] != TJ_NODE_NONE)
      ops[2] = rw.map[node->operands[2]];
    if (!status) status = tj_rewriter_copy(&rw, i, ops, &rw.map[i]);
  }
  if (done) tj_free(g->allocator, done, sizeof(uint32_t) * g->num_nodes);
  if (use) tj_free(g->allocator, use, g->num_nodes);
  if (status) {
    tj_rewriter_abandon(&rw);
    return status;
  }
  TJ_RETURN_IF_ERROR(tj_rewriter_finish(&rw, out_graph));
  if (out_num_quantized) *out_num_quantized = count;
  return NULL;
}
