// lib/passes/attention_match.c
//
// Rewrites written-out attention onto the attention op (issue 14), so that
// graphs from the Python builder or the ONNX importer reach its kernel:
//
//   y = matmul(p, v)
//   p = softmax(x, last axis), or cast(softmax(cast(x, f32)), v's dtype)
//   x = a chain, outermost first, of
//         mul / div by a scalar constant        (the scale)
//         add(x, mask)                          (an additive mask of q's
//                                                dtype, inside any scale)
//         where(c, x, -inf) / where(c, -inf, x) (a bool mask: c or not c)
//         where(le(iota axis -1, iota axis -2), x, -inf)  (causal; gt/ge are
//                                                lt/le after canonicalize)
//         cast to a wider float
//       down to matmul(q, kt), where q or kt may carry a scalar scale too
//   k = transpose(kt) of the last two axes (canonicalize cancels a
//       transpose of a transpose)
//
// It fires only when the op computes the same numbers: the scale is a
// positive finite constant, no additive mask sits under a scale, a
// where-mask fills with -inf (a finite fill such as finfo.min gives a row
// with every key masked the mean of v, the op gives 0), at most one mask
// besides causal, ranks >= 3 and equal, k's and v's heads equal and
// dividing q's, and the op's inferred type equals y's. Rows with every key
// masked by -inf are the one difference: NaN before, 0 after. The
// softmax's other users keep it (dce drops what nothing reads). Each
// refusal of a matmul reading a softmax is logged under TJ_LOG=fusion with
// the failing check. ctx->match_attention (on by default) turns it off in
// the default pipeline.
//
// Requires: nothing.  Preserves: inputs, outputs, symbols, guards.
// Invalidates: fusion groups, memory plan.  Idempotent (what it makes no
// longer reads a softmax).

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lib/dtype.h"
#include "lib/passes/pass.h"

typedef struct am_t {
  tj_pass_ctx_t* ctx;
  tj_rewriter_t rw;
  const tj_graph_t* g;  // the source graph
} am_t;

// What the walk found, in source-graph nodes.
typedef struct found_t {
  uint32_t q, kt, mask;  // mask: TJ_NODE_NONE when none
  bool negate;           // the mask is not(mask)
  bool additive;
  bool causal;
  bool scaled_outer;  // a scale seen above the current node
  double scale;
  char miss[160];
} found_t;

static bool missf(found_t* f, const char* format, ...) TJ_PRINTF_LIKE(2, 3);
static bool missf(found_t* f, const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(f->miss, sizeof(f->miss), format, args);
  va_end(args);
  return false;
}

static const tj_node_t* N(const am_t* a, uint32_t i) { return &a->g->nodes[i]; }

static const char* op_name(const am_t* a, uint32_t i) {
  return tj_op_info(N(a, i)->op)->name;
}

// A scalar constant: a constant or full of one element, or a reshape or
// broadcast of one (then every element is that value).
static bool scalar_of(const am_t* a, uint32_t i, double* out) {
  const tj_node_t* n = N(a, i);
  if (n->op == TJ_OP_RESHAPE || n->op == TJ_OP_BROADCAST_TO)
    return scalar_of(a, n->operands[0], out);
  if (n->op != TJ_OP_CONSTANT && n->op != TJ_OP_FULL) return false;
  if (!tj_dtype_is_float(n->dtype)) return false;
  if (n->op == TJ_OP_FULL) {
    *out = n->attrs.value;
    return true;
  }
  for (int32_t d = 0; d < n->rank; ++d)
    if (n->dims[d] != 1) return false;
  if (!n->attrs.data) return false;
  *out = tj_load_f64(n->dtype, n->attrs.data, 0);
  return true;
}

static bool same_dims(const tj_node_t* x, const tj_node_t* y) {
  if (x->rank != y->rank) return false;
  for (int32_t d = 0; d < x->rank; ++d)
    if (x->dims[d] != y->dims[d]) return false;
  return true;
}

// An iota counting along the axis |from_end| places from the last of a
// rank-|rank| score tensor (right-aligned), of length |len| along it.
static bool is_iota(const am_t* a, uint32_t i, int32_t from_end, int64_t len) {
  const tj_node_t* n = N(a, i);
  if (n->op != TJ_OP_IOTA || n->rank < from_end + 1) return false;
  const int64_t axis = n->rank - 1 - from_end;
  return n->attrs.axis == axis && n->dims[axis] == len;
}

// le(col, row) or ge(row, col) on the scores' last two axes: key j kept
// when j <= i.
static bool is_causal(const am_t* a, uint32_t cond, const tj_node_t* scores) {
  const tj_node_t* c = N(a, cond);
  const int32_t r = scores->rank;
  if ((c->op != TJ_OP_LE && c->op != TJ_OP_GE) || r < 2) return false;
  const uint32_t col = c->operands[c->op == TJ_OP_LE ? 0 : 1];
  const uint32_t row = c->operands[c->op == TJ_OP_LE ? 1 : 0];
  return is_iota(a, col, 0, scores->dims[r - 1]) &&
         is_iota(a, row, 1, scores->dims[r - 2]);
}

// One scalar factor of a mul / div node whose other operand is returned.
static bool scale_factor(const am_t* a, uint32_t i, double* factor,
                         uint32_t* rest) {
  const tj_node_t* n = N(a, i);
  double c;
  if (n->op == TJ_OP_MUL) {
    for (int s = 0; s < 2; ++s) {
      if (scalar_of(a, n->operands[s], &c) &&
          same_dims(N(a, n->operands[1 - s]), n)) {
        *factor = c;
        *rest = n->operands[1 - s];
        return true;
      }
    }
  }
  if (n->op == TJ_OP_DIV && scalar_of(a, n->operands[1], &c) && c != 0 &&
      same_dims(N(a, n->operands[0]), n)) {
    *factor = 1.0 / c;
    *rest = n->operands[0];
    return true;
  }
  return false;
}

static bool walk(const am_t* a, uint32_t x, found_t* f) {
  const tj_node_t* n = N(a, x);
  double c;
  uint32_t rest;
  switch (n->op) {
    case TJ_OP_MATMUL: {
      uint32_t q = n->operands[0], kt = n->operands[1];
      while (scale_factor(a, q, &c, &rest)) f->scale *= c, q = rest;
      while (scale_factor(a, kt, &c, &rest)) f->scale *= c, kt = rest;
      f->q = q;
      f->kt = kt;
      return true;
    }
    case TJ_OP_MUL:
    case TJ_OP_DIV:
      if (!scale_factor(a, x, &c, &rest))
        return missf(f, "%%%u %s is not by a scalar constant", x,
                     op_name(a, x));
      f->scale *= c;
      f->scaled_outer = true;
      return walk(a, rest, f);
    case TJ_OP_CAST: {
      const tj_node_t* in = N(a, n->operands[0]);
      if (!tj_dtype_is_float(in->dtype) ||
          tj_dtype_size(in->dtype) > tj_dtype_size(n->dtype))
        return missf(f, "%%%u cast is not to a wider float", x);
      return walk(a, n->operands[0], f);
    }
    case TJ_OP_ADD: {
      if (f->mask != TJ_NODE_NONE)
        return missf(f, "%%%u add is a second mask", x);
      if (f->scaled_outer)
        return missf(f, "%%%u add (an additive mask) is under the scale", x);
      for (int s = 0; s < 2; ++s) {
        if (!same_dims(N(a, n->operands[s]), n)) continue;
        found_t saved = *f;
        f->mask = n->operands[1 - s];
        f->additive = true;
        if (walk(a, n->operands[s], f)) return true;
        *f = saved;
      }
      return missf(f, "%%%u add: neither side is a matmul chain", x);
    }
    case TJ_OP_WHERE: {
      uint32_t cond = n->operands[0], chain;
      bool negate;
      if (scalar_of(a, n->operands[2], &c) && c == -INFINITY) {
        chain = n->operands[1];
        negate = false;
      } else if (scalar_of(a, n->operands[1], &c) && c == -INFINITY) {
        chain = n->operands[2];
        negate = true;
      } else {
        return missf(f, "%%%u where does not fill with -inf", x);
      }
      if (!same_dims(N(a, chain), n))
        return missf(f, "%%%u where broadcasts the scores", x);
      if (!negate && !f->causal && is_causal(a, cond, n)) {
        f->causal = true;
      } else if (f->mask != TJ_NODE_NONE) {
        return missf(f, "%%%u where is a second mask", x);
      } else {
        f->mask = cond;
        f->negate = negate;
      }
      return walk(a, chain, f);
    }
    default:
      return missf(f, "%%%u is %s, not a scale, mask or matmul", x,
                   op_name(a, x));
  }
}

static void log_miss(const am_t* a, uint32_t y, const char* why) {
  if (!a->ctx->log_fusion) return;
  tj_context_diagnostic(a->ctx->context, TJ_SEVERITY_REMARK,
                        "fusion: attention_match: matmul %%%u reads a softmax "
                        "but is not attention: %s",
                        y, why);
}

// The checks the walk leaves to the end; false with f->miss set.
static bool check(const am_t* a, uint32_t y, uint32_t v, found_t* f) {
  const tj_node_t* q = N(a, f->q);
  const tj_node_t* kt = N(a, f->kt);
  const tj_node_t* vn = N(a, v);
  const tj_node_t* yn = N(a, y);
  const int32_t r = yn->rank;
  if (r < 3 || q->rank != r || kt->rank != r || vn->rank != r)
    return missf(f, "ranks %d, %d, %d must be equal and >= 3", (int)q->rank,
                 (int)kt->rank, (int)vn->rank);
  if (q->dtype != yn->dtype || kt->dtype != yn->dtype)
    return missf(f, "q, k and v dtypes differ");
  const int64_t hq = q->dims[r - 3], hk = kt->dims[r - 3], hv = vn->dims[r - 3];
  if (!tj_dim_is_const(hq) || !tj_dim_is_const(hk) || hk != hv || hk == 0 ||
      hq % hk != 0)
    return missf(f, "heads q %lld, k %lld, v %lld do not group", (long long)hq,
                 (long long)hk, (long long)hv);
  if (!tj_dim_is_const(q->dims[r - 1]) || !tj_dim_is_const(vn->dims[r - 1]))
    return missf(f, "symbolic head dims");
  if (!(f->scale > 0) || !isfinite(f->scale))
    return missf(f, "scale %g is not positive and finite", f->scale);
  if (f->mask != TJ_NODE_NONE) {
    tj_dtype_t md = N(a, f->mask)->dtype;
    if (f->additive ? md != q->dtype : md != TJ_DTYPE_BOOL)
      return missf(f, "the mask's dtype %s", tj_dtype_name(md));
  }
  return true;
}

// Appends the op for |f| (the matmul |y|'s replacement); *out stays
// TJ_NODE_NONE when inference refuses it or its type is not y's.
static tj_status_t emit(am_t* a, uint32_t y, uint32_t v, const found_t* f,
                        uint32_t* out) {
  *out = TJ_NODE_NONE;
  const tj_node_t* yn = N(a, y);
  const int32_t r = yn->rank;
  const uint32_t* map = a->rw.map;
  uint32_t kt = map[f->kt], k, mask = TJ_NODE_NONE;
  int64_t perm[TJ_MAX_RANK];
  for (int32_t i = 0; i < r; ++i) perm[i] = i;
  perm[r - 2] = r - 1;
  perm[r - 1] = r - 2;
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_TRANSPOSE;
  desc.num_operands = 1;
  desc.operands = &kt;
  desc.attrs.ints = perm;
  desc.attrs.num_ints = (uint32_t)r;
  TJ_RETURN_IF_ERROR(tj_rewriter_append(&a->rw, &desc, &k));
  if (f->mask != TJ_NODE_NONE) {
    mask = map[f->mask];
    if (f->negate) {
      memset(&desc, 0, sizeof(desc));
      desc.op = TJ_OP_NOT;
      desc.num_operands = 1;
      desc.operands = &mask;
      TJ_RETURN_IF_ERROR(tj_rewriter_append(&a->rw, &desc, &mask));
    }
  }
  uint32_t ops[4] = {map[f->q], k, map[v], mask};
  int64_t causal = f->causal ? 1 : 0;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_ATTENTION;
  desc.num_operands = 4;
  desc.operands = ops;
  desc.attrs.value = f->scale;
  desc.attrs.ints = &causal;
  desc.attrs.num_ints = 1;
  uint32_t att;
  tj_status_t st = tj_rewriter_append(&a->rw, &desc, &att);
  if (st) {
    if (tj_status_code(st) == TJ_STATUS_OUT_OF_MEMORY) return st;
    log_miss(a, y, tj_status_message(st));
    tj_status_free(st);
    return NULL;
  }
  int64_t want[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(tj_rewriter_dims(&a->rw, r, yn->dims, want));
  const tj_node_t* an = &a->rw.dst->nodes[att];
  bool same = an->rank == r && an->dtype == yn->dtype;
  for (int32_t i = 0; same && i < r; ++i) same = an->dims[i] == want[i];
  if (!same) {
    log_miss(a, y, "the op's shape differs from the matmul's");
    return NULL;
  }
  *out = att;
  return NULL;
}

// Node |y|: the op's node when it is attention, else TJ_NODE_NONE.
static tj_status_t match(am_t* a, uint32_t y, uint32_t* out) {
  *out = TJ_NODE_NONE;
  const tj_node_t* yn = N(a, y);
  if (yn->op != TJ_OP_MATMUL) return NULL;
  uint32_t p = yn->operands[0], v = yn->operands[1];
  if (N(a, p)->op == TJ_OP_CAST) p = N(a, p)->operands[0];
  const tj_node_t* sm = N(a, p);
  if (sm->op != TJ_OP_SOFTMAX) return NULL;
  found_t f;
  memset(&f, 0, sizeof(f));
  f.mask = TJ_NODE_NONE;
  f.scale = 1.0;
  if (sm->rank < 1 || sm->attrs.axis != sm->rank - 1) {
    log_miss(a, y, "the softmax is not over the last axis");
    return NULL;
  }
  if (!walk(a, sm->operands[0], &f) || !check(a, y, v, &f)) {
    log_miss(a, y, f.miss);
    return NULL;
  }
  return emit(a, y, v, &f, out);
}

tj_status_t tj_pass_attention_match(tj_pass_ctx_t* ctx, tj_plan_t* plan) {
  const tj_graph_t* g = plan->graph;
  bool any = false;
  for (uint32_t i = 0; i < g->num_nodes && !any; ++i)
    any = g->nodes[i].op == TJ_OP_SOFTMAX;
  if (!any) return NULL;
  am_t a;
  a.ctx = ctx;
  a.g = g;
  TJ_RETURN_IF_ERROR(tj_rewriter_begin(&a.rw, g));
  tj_status_t status = NULL;
  uint32_t matched = 0;
  for (uint32_t i = 0; !status && i < g->num_nodes; ++i) {
    if (g->nodes[i].op == TJ_OP_INPUT) continue;
    uint32_t att;
    status = match(&a, i, &att);
    if (status) break;
    if (att != TJ_NODE_NONE) {
      a.rw.map[i] = att;
      ++matched;
    } else {
      status = tj_rewriter_clone(&a.rw, i);
    }
  }
  if (status) {
    tj_rewriter_abandon(&a.rw);
    return status;
  }
  if (!matched) {
    tj_rewriter_abandon(&a.rw);
    return NULL;
  }
  tj_graph_t* out = NULL;
  TJ_RETURN_IF_ERROR(tj_rewriter_finish(&a.rw, &out));
  tj_plan_set_graph(plan, out);
  return NULL;
}
