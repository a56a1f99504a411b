// kir/lower_attention.c: an attention node left whole by decompose (a
// target with a native attention kernel, tj_pass_ctx_t.native_op) on the
// ATTENTION template. The group is the node alone: q, k, v and the mask
// are memory, read with their row-major strides over the space [batch..,
// Hkv, G, Tq, Tk] (query head h = hkv * G + g; batch dims broadcast with
// stride 0); the output is written the same way.

#include <stdio.h>
#include <string.h>

#include "kir/lower_internal.h"
#include "lib/dtype.h"

// Strides of |node| (rank |rank|, row-major |st|) over the space's batch
// dims, aligned right with the output's |nb| batch dims: 0 where it
// broadcasts.
static void batch_strides(tj_lowering_t* lw, uint32_t node, const int64_t* st,
                          int32_t nb, int64_t* out) {
  const tj_node_t* n = NODE(lw, node);
  const tj_node_t* y = NODE(lw, lw->grp->anchor);
  int32_t xb = n->rank - 3;  // the node's batch dims
  for (int32_t i = 0; i < nb; ++i) {
    int32_t j = i - (nb - xb);
    out[i] = j >= 0 && !(n->dims[j] == 1 && y->dims[i] != 1) ? st[j] : 0;
  }
}

tj_status_t tj_lower_attention_kernel(tj_lowering_t* lw, const char* name,
                                      tj_lowered_kernel_t* out) {
  const uint32_t yn = lw->grp->anchor;
  const tj_node_t* y = NODE(lw, yn);
  const uint32_t qn = y->operands[0], kn = y->operands[1], vn = y->operands[2];
  const uint32_t mn = y->num_operands > 3 ? y->operands[3] : TJ_NODE_NONE;
  const tj_node_t* q = NODE(lw, qn);
  const tj_node_t* kk = NODE(lw, kn);
  const tj_node_t* v = NODE(lw, vn);
  const tj_dtype_t dt = q->dtype;
  if ((dt != TJ_DTYPE_F32 && dt != TJ_DTYPE_F16 && dt != TJ_DTYPE_BF16) ||
      kk->dtype != dt || v->dtype != dt) {
    return tj_unsupported(
        "attention %%%u is %s; the attention template takes "
        "f32, f16 or bf16",
        yn, tj_dtype_name(dt));
  }
  const int32_t r = y->rank, nb = r - 3, rank = nb + 4;
  if (r < 3 || q->rank != r || kk->rank < 3 || v->rank < 3 ||
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
  int64_t sq[TJ_MAX_RANK], sk[TJ_MAX_RANK], sv[TJ_MAX_RANK], so[TJ_MAX_RANK],
      sm[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, qn, sq));
  TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, kn, sk));
  TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, vn, sv));
  TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, yn, so));
  // Strides (dims) per buffer over [batch.., Hkv, G, Tq, Tk].
  int64_t st[5][MAXV];
  memset(st, 0, sizeof(st));
  batch_strides(lw, qn, sq, nb, st[0]);
  TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, group, sq[r - 3], &st[0][nb]));
  st[0][nb + 1] = sq[r - 3];
  st[0][nb + 2] = sq[r - 2];
  batch_strides(lw, kn, sk, nb, st[1]);
  st[1][nb] = sk[kk->rank - 3];
  st[1][nb + 3] = sk[kk->rank - 2];
  batch_strides(lw, vn, sv, nb, st[2]);
  st[2][nb] = sv[v->rank - 3];
  st[2][nb + 3] = sv[v->rank - 2];
  batch_strides(lw, yn, so, nb, st[3]);
  TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, group, so[r - 3], &st[3][nb]));
  st[3][nb + 1] = so[r - 3];
  st[3][nb + 2] = so[r - 2];
  int64_t space[MAXV];
  for (int32_t i = 0; i < nb; ++i) space[i] = y->dims[i];
  space[nb] = hkv;
  space[nb + 1] = group;
  space[nb + 2] = y->dims[r - 2];
  space[nb + 3] = kk->dims[kk->rank - 2];
  if (mn != TJ_NODE_NONE) {
    // The mask broadcasts to [batch.., H, Tq, Tk], aligned right.
    const tj_node_t* m = NODE(lw, mn);
    TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, mn, sm));
    int64_t full[MAXV];  // the mask's stride per [batch.., H, Tq, Tk] dim
    for (int32_t i = 0; i < r; ++i) {
      int32_t j = i - (r - m->rank);
      int64_t ext = i < nb        ? y->dims[i]
                    : i == nb     ? h
                    : i == nb + 1 ? space[nb + 2]
                                  : space[nb + 3];
      full[i] = j >= 0 && !(m->dims[j] == 1 && ext != 1) ? sm[j] : 0;
    }
    for (int32_t i = 0; i < nb; ++i) st[4][i] = full[i];
    TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, group, full[nb], &st[4][nb]));
    st[4][nb + 1] = full[nb];
    st[4][nb + 2] = full[nb + 1];
    st[4][nb + 3] = full[nb + 2];
  }
  // Specializing: every size a constant (strides already are).
  for (int32_t f = 0; f < rank; ++f)
    TJ_RETURN_IF_ERROR(tj_lower_dim(lw, space[f], &space[f]));
  int64_t dq, dv;
  TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, qn, r - 1, &dq));
  TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, vn, v->rank - 1, &dv));
  lw->num_params = 0;
  TJ_RETURN_IF_ERROR(tj_kir_create(lw->al, TJ_KIR_ATTENTION, name, &lw->k));
  tj_kir_ival_t dims[MAXV], strides[5][MAXV];
  for (int32_t f = 0; f < rank; ++f) {
    TJ_RETURN_IF_ERROR(tj_lower_ival(lw, space[f], &dims[f]));
  }
  const uint32_t nbuf = mn != TJ_NODE_NONE ? 5 : 4;
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
  tj_kir_set_space(lw->k, rank, dims);
  static const tj_kir_role_t roles[5] = {TJ_KIR_ATTN_Q, TJ_KIR_ATTN_K,
                                         TJ_KIR_ATTN_V, TJ_KIR_OUTPUT,
                                         TJ_KIR_ATTN_MASK};
  static const char* const names[5] = {"q", "k", "v", "out", "mask"};
  const uint32_t nodes[5] = {qn, kn, vn, yn, mn};
  for (uint32_t bi = 0; bi < nbuf; ++bi) {
    char bname[32];
    snprintf(bname, sizeof(bname), "%s%u_%u", names[bi], nodes[bi], bi);
    tj_kir_add_buffer(lw->k, bname, NODE(lw, nodes[bi])->dtype, roles[bi],
                      strides[bi]);
    out->buffer_nodes[bi] = nodes[bi];
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
