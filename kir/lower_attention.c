// kir/lower_attention.c: an attention node left whole by decompose (a
// target with a native attention kernel, tj_pass_ctx_t.native_op) on the
// ATTENTION template. The group is the node alone: q, k, v and the mask
// are memory, read with their row-major strides over the space [batch..,
// Hkv, G, Tq, Tk] (query head h = hkv * G + g; batch dims broadcast with
// stride 0); the output is written the same way. Attention's backward
// nodes (attention_lse, attention_dq, attention_dkv; fabwdcuda) lower the
// same way onto the same space, the kernel IR naming the op
// (tj_kir_attention_t.op): lse and delta [.., H, Tq] and dL/dy [.., H, Tq,
// Dv] are read over it as q is, and attention_dkv's [.., Hkv, Tk, D + Dv]
// is written with stride 0 along G and Tq, the dims it sums over. A group
// of an attention and the attention_lse of its own scores (fuse's
// attention_with_lse, lsefwd) is one forward kernel writing both: y, then
// lse as attention_lse's output would be written (with_lse). Where the
// target reads through views (tj_pass_ctx_t.attention_views; issue 14), a
// forward's group also holds the transposes (and the reshapes under them)
// through which it reads q, k or v: such an operand is read from the value
// in memory under them, with their strides (view_strides); and it may hold
// the transpose that alone reads its result (fuse.c's output_view, the
// blocks' merge): y is then written where that transpose puts each row.

#include <stdio.h>
#include <string.h>

#include "kir/lower_internal.h"
#include "lib/dtype.h"

// Strides of |node| (row-major |st|; its last |tail| dims are not batch
// dims) over the space's batch dims, aligned right with the output's |nb|
// batch dims: 0 where it broadcasts.
static void batch_strides(tj_lowering_t* lw, uint32_t node, const int64_t* st,
                          int32_t tail, int32_t nb, int64_t* out) {
  const tj_node_t* n = NODE(lw, node);
  const tj_node_t* y = NODE(lw, lw->grp->anchor);
  int32_t xb = n->rank - tail;  // the node's batch dims
  for (int32_t i = 0; i < nb; ++i) {
    int32_t j = i - (nb - xb);
    out[i] = j >= 0 && !(n->dims[j] == 1 && y->dims[i] != 1) ? st[j] : 0;
  }
}

// Strides over [batch.., Hkv, G, Tq, Tk] of |node|, a [batch.., H, Tq, ..]
// value whose H dim is |hdim| (row-major strides |st|): stride 0 along Tk.
static tj_status_t head_strides(tj_lowering_t* lw, uint32_t node,
                                const int64_t* st, int32_t hdim, int32_t nb,
                                int64_t group, int64_t* out) {
  batch_strides(lw, node, st, NODE(lw, node)->rank - hdim, nb, out);
  TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, group, st[hdim], &out[nb]));
  out[nb + 1] = st[hdim];
  out[nb + 2] = st[hdim + 1];
  out[nb + 3] = 0;
  return NULL;
}

// |node|'s storage seen through the in-group transposes and reshapes over
// a value in memory (fuse.c's attention views): the node in memory
// (*|base|) and its strides over |node|'s coordinates; out of the group,
// |node| itself, row-major. The head dim stays contiguous (fuse checked).
static tj_status_t view_strides(tj_lowering_t* lw, uint32_t node,
                                uint32_t* base, int64_t* strides) {
  const tj_node_t* n = NODE(lw, node);
  if (!lw->in_group[node]) {
    *base = node;
    return tj_lower_row_major(lw, node, strides);
  }
  if (n->op == TJ_OP_RESHAPE && !lw->in_group[n->operands[0]]) {
    // A reshape of a row-major value: its own row-major strides over the
    // same storage.
    *base = n->operands[0];
    return tj_lower_row_major(lw, node, strides);
  }
  if (n->op != TJ_OP_TRANSPOSE) {
    return tj_unsupported("attention operand %%%u is computed in the kernel",
                          node);
  }
  int64_t ms[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(view_strides(lw, n->operands[0], base, ms));
  for (int32_t k = 0; k < n->rank; ++k) strides[k] = ms[n->attrs.ints[k]];
  if (strides[n->rank - 1] != 1) {
    return tj_unsupported("attention operand %%%u: head dim not contiguous",
                          node);
  }
  return NULL;
}

// The strides over attention |yn|'s coordinates at which it writes its
// result: row-major, or through the group's transpose of it (an output
// view, *|out| that transpose) into that transpose's row-major storage.
static tj_status_t output_strides(tj_lowering_t* lw, uint32_t yn, uint32_t* out,
                                  int64_t* strides) {
  *out = yn;
  for (uint32_t i = 0; i < lw->grp->num_nodes; ++i) {
    const uint32_t t = lw->grp->nodes[i];
    const tj_node_t* n = NODE(lw, t);
    if (t == yn || n->op != TJ_OP_TRANSPOSE || n->operands[0] != yn) continue;
    int64_t rm[TJ_MAX_RANK];
    TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, t, rm));
    // Dim k of the transpose is dim perm[k] of y.
    for (int32_t k = 0; k < n->rank; ++k) strides[n->attrs.ints[k]] = rm[k];
    if (strides[n->rank - 1] != 1) {
      return tj_unsupported("attention %%%u: head dim not contiguous", yn);
    }
    *out = t;
    return NULL;
  }
  return tj_lower_row_major(lw, yn, strides);
}

// The kernel IR's op for an attention node.
static tj_kir_attention_op_t attention_op(tj_op_t op) {
  switch (op) {
    case TJ_OP_ATTENTION_LSE:
      return TJ_KIR_ATTENTION_LSE;
    case TJ_OP_ATTENTION_DQ:
      return TJ_KIR_ATTENTION_DQ;
    case TJ_OP_ATTENTION_DKV:
      return TJ_KIR_ATTENTION_DKV;
    default:
      return TJ_KIR_ATTENTION_FORWARD;
  }
}

enum { kMaxAttnBuffers = 8 };

tj_status_t tj_lower_attention_kernel(tj_lowering_t* lw, const char* name,
                                      tj_lowered_kernel_t* out) {
  const uint32_t yn = lw->grp->anchor;
  const tj_node_t* y = NODE(lw, yn);
  const tj_kir_attention_op_t aop = attention_op(y->op);
  // The forward's group may hold its attention_lse too (lsefwd).
  uint32_t lsen = TJ_NODE_NONE;
  for (uint32_t i = 0; i < lw->grp->num_nodes; ++i) {
    const uint32_t n = lw->grp->nodes[i];
    if (n == yn || NODE(lw, n)->op != TJ_OP_ATTENTION_LSE) continue;
    if (aop != TJ_KIR_ATTENTION_FORWARD || lsen != TJ_NODE_NONE) {
      return tj_internal(
          "attention %%%u: a group holds an attention and at most its "
          "attention_lse",
          yn);
    }
    lsen = n;
  }
  const bool lse_op = aop == TJ_KIR_ATTENTION_LSE;
  const bool bwd = aop == TJ_KIR_ATTENTION_DQ || aop == TJ_KIR_ATTENTION_DKV;
  // Operands: attention (q, k, v, mask), attention_lse (q, k, mask), the
  // other two (q, k, v, mask, dy, lse, delta).
  const uint32_t qn = y->operands[0], kn = y->operands[1];
  const uint32_t vn = lse_op ? TJ_NODE_NONE : y->operands[2];
  const uint32_t mi = lse_op ? 2 : 3;
  const uint32_t mn = y->num_operands > mi ? y->operands[mi] : TJ_NODE_NONE;
  const tj_node_t* q = NODE(lw, qn);
  const tj_node_t* kk = NODE(lw, kn);
  const tj_node_t* v = vn != TJ_NODE_NONE ? NODE(lw, vn) : kk;
  const tj_dtype_t dt = q->dtype;
  if ((dt != TJ_DTYPE_F32 && dt != TJ_DTYPE_F16 && dt != TJ_DTYPE_BF16) ||
      kk->dtype != dt || v->dtype != dt) {
    return tj_unsupported(
        "attention %%%u is %s; the attention template takes "
        "f32, f16 or bf16",
        yn, tj_dtype_name(dt));
  }
  const int32_t r = q->rank, nb = r - 3, rank = nb + 4;
  if (r < 3 || y->rank != (lse_op ? r - 1 : r) || kk->rank < 3 || v->rank < 3 ||
      rank > TJ_KIR_MAX_RANK) {
    return tj_unsupported("attention %%%u of rank %d", yn, r);
  }
  // G = H / Hkv: constants, or the same dim (G = 1).
  const int64_t h = q->dims[r - 3], hkv = kk->dims[kk->rank - 3];
  int64_t group;
  if (h == hkv) {
    group = 1;
  } else if (h >= 0 && hkv > 0 && h % hkv == 0) {
    group = h / hkv;
  } else {
    return tj_unsupported("attention %%%u: the head ratio is not a constant",
                          yn);
  }
  // Buffers in order: q, k, v (not for lse), out, mask (if any), then the
  // backward's dy, lse, delta.
  uint32_t nodes[kMaxAttnBuffers];
  tj_kir_role_t roles[kMaxAttnBuffers];
  const char* names[kMaxAttnBuffers];
  uint32_t nbuf = 0;
#define ADD_BUF(n_, role_, name_) \
  (nodes[nbuf] = (n_), roles[nbuf] = (role_), names[nbuf] = (name_), nbuf++)
  ADD_BUF(qn, TJ_KIR_ATTN_Q, "q");
  ADD_BUF(kn, TJ_KIR_ATTN_K, "k");
  if (!lse_op) ADD_BUF(vn, TJ_KIR_ATTN_V, "v");
  ADD_BUF(yn, TJ_KIR_OUTPUT, "out");
  if (lsen != TJ_NODE_NONE) ADD_BUF(lsen, TJ_KIR_OUTPUT, "lse");
  if (mn != TJ_NODE_NONE) ADD_BUF(mn, TJ_KIR_ATTN_MASK, "mask");
  if (bwd) {
    ADD_BUF(y->operands[4], TJ_KIR_ATTN_DO, "dy");
    ADD_BUF(y->operands[5], TJ_KIR_ATTN_LSE, "lse");
    ADD_BUF(y->operands[6], TJ_KIR_ATTN_DELTA, "delta");
  }
#undef ADD_BUF
  // Strides (dims) per buffer over [batch.., Hkv, G, Tq, Tk].
  int64_t st[kMaxAttnBuffers][MAXV];
  memset(st, 0, sizeof(st));
  int64_t space[MAXV];
  for (int32_t i = 0; i < nb; ++i) space[i] = y->dims[i];
  space[nb] = hkv;
  space[nb + 1] = group;
  space[nb + 2] = q->dims[r - 2];
  space[nb + 3] = kk->dims[kk->rank - 2];
  uint32_t bases[kMaxAttnBuffers];
  for (uint32_t bi = 0; bi < nbuf; ++bi) {
    const tj_node_t* n = NODE(lw, nodes[bi]);
    int64_t rm[TJ_MAX_RANK];
    bases[bi] = nodes[bi];
    if (roles[bi] == TJ_KIR_ATTN_Q || roles[bi] == TJ_KIR_ATTN_K ||
        roles[bi] == TJ_KIR_ATTN_V) {
      TJ_RETURN_IF_ERROR(view_strides(lw, nodes[bi], &bases[bi], rm));
    } else if (nodes[bi] == yn && roles[bi] == TJ_KIR_OUTPUT) {
      TJ_RETURN_IF_ERROR(output_strides(lw, yn, &bases[bi], rm));
    } else {
      TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, nodes[bi], rm));
    }
    int64_t* o = st[bi];
    switch (roles[bi]) {
      case TJ_KIR_ATTN_K:
      case TJ_KIR_ATTN_V:
        batch_strides(lw, nodes[bi], rm, 3, nb, o);
        o[nb] = rm[n->rank - 3];
        o[nb + 3] = rm[n->rank - 2];
        break;
      case TJ_KIR_ATTN_MASK: {
        // The mask broadcasts to [batch.., H, Tq, Tk], aligned right.
        int64_t full[MAXV];  // the mask's stride per [batch.., H, Tq, Tk]
        for (int32_t i = 0; i < r; ++i) {
          int32_t j = i - (r - n->rank);
          int64_t ext = i < nb        ? y->dims[i]
                        : i == nb     ? h
                        : i == nb + 1 ? space[nb + 2]
                                      : space[nb + 3];
          full[i] = j >= 0 && !(n->dims[j] == 1 && ext != 1) ? rm[j] : 0;
        }
        for (int32_t i = 0; i < nb; ++i) o[i] = full[i];
        TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, group, full[nb], &o[nb]));
        o[nb + 1] = full[nb];
        o[nb + 2] = full[nb + 1];
        o[nb + 3] = full[nb + 2];
        break;
      }
      case TJ_KIR_ATTN_LSE:
      case TJ_KIR_ATTN_DELTA:
        // [batch.., H, Tq].
        TJ_RETURN_IF_ERROR(
            head_strides(lw, nodes[bi], rm, n->rank - 2, nb, group, o));
        break;
      case TJ_KIR_OUTPUT:
        if (aop == TJ_KIR_ATTENTION_DKV) {
          // [batch.., Hkv, Tk, D + Dv]: one row per key, summed over G, Tq.
          batch_strides(lw, nodes[bi], rm, 3, nb, o);
          o[nb] = rm[n->rank - 3];
          o[nb + 3] = rm[n->rank - 2];
        } else {
          // y and dq [batch.., H, Tq, ..] as q; lse [batch.., H, Tq].
          const bool row = n->op == TJ_OP_ATTENTION_LSE;
          TJ_RETURN_IF_ERROR(head_strides(lw, nodes[bi], rm,
                                          row ? n->rank - 2 : n->rank - 3, nb,
                                          group, o));
        }
        break;
      default:  // q, dy: [batch.., H, Tq, ..]
        TJ_RETURN_IF_ERROR(
            head_strides(lw, nodes[bi], rm, n->rank - 3, nb, group, o));
        break;
    }
  }
  // Specializing: every size a constant (strides already are).
  for (int32_t f = 0; f < rank; ++f)
    TJ_RETURN_IF_ERROR(tj_lower_dim(lw, space[f], &space[f]));
  int64_t dq, dv;
  TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, qn, r - 1, &dq));
  if (lse_op) {
    dv = dq;  // no v: the template's d = dv holds
  } else {
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, vn, v->rank - 1, &dv));
  }
  lw->num_params = 0;
  TJ_RETURN_IF_ERROR(tj_kir_create(lw->al, TJ_KIR_ATTENTION, name, &lw->k));
  tj_kir_ival_t dims[MAXV], strides[kMaxAttnBuffers][MAXV];
  for (int32_t f = 0; f < rank; ++f) {
    TJ_RETURN_IF_ERROR(tj_lower_ival(lw, space[f], &dims[f]));
  }
  for (uint32_t bi = 0; bi < nbuf; ++bi) {
    for (int32_t f = 0; f < rank; ++f) {
      TJ_RETURN_IF_ERROR(tj_lower_ival(lw, st[bi][f], &strides[bi][f]));
    }
  }
  tj_kir_attention_t attn;
  memset(&attn, 0, sizeof(attn));
  TJ_RETURN_IF_ERROR(tj_lower_ival(lw, dq, &attn.d));
  TJ_RETURN_IF_ERROR(tj_lower_ival(lw, dv, &attn.dv));
  attn.scale = y->attrs.value;
  attn.causal = y->attrs.num_ints && y->attrs.ints[0];
  attn.op = aop;
  attn.with_lse = lsen != TJ_NODE_NONE;
  tj_kir_set_space(lw->k, rank, dims);
  for (uint32_t bi = 0; bi < nbuf; ++bi) {
    char bname[32];
    snprintf(bname, sizeof(bname), "%s%u_%u", names[bi], bases[bi], bi);
    tj_kir_add_buffer(lw->k, bname, NODE(lw, nodes[bi])->dtype, roles[bi],
                      strides[bi]);
    out->buffer_nodes[bi] = bases[bi];
    out->buffer_offset_dims[bi] = 0;
  }
  out->num_buffers = nbuf;
  tj_kir_set_attention(lw->k, &attn);
  TJ_RETURN_IF_ERROR(tj_kir_finalize(lw->k));
  out->num_params = lw->num_params;
  memcpy(out->param_dims, lw->params, sizeof(int64_t) * lw->num_params);
  out->nonempty_node = NONE32;
  out->kernel = lw->k;
  lw->k = NULL;
  return NULL;
}
