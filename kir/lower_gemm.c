// kir/lower_gemm.c: matmul groups on the GEMM template. The operands A and
// B are memory (or one transpose of it) read with their own strides over
// [batch.., m, k] and [batch.., k, n], offset to the box of the output;
// the rest of the group is the epilogue, evaluated on the accumulator.

#include "kir/lower_internal.h"
#include "lib/dtype.h"

// |node|'s storage seen through at most one in-group transpose: the node in
// memory and the strides over |node|'s coordinates.
static tj_status_t operand_view(tj_lowering_t* lw, uint32_t node,
                                uint32_t* out_base, int64_t* strides) {
  if (!lw->in_group[node]) {
    *out_base = node;
    return tj_lower_row_major(lw, node, strides);
  }
  const tj_node_t* n = NODE(lw, node);
  if (n->op != TJ_OP_TRANSPOSE || lw->in_group[n->operands[0]]) {
    return tj_unsupported("matmul operand %%%u is computed in the kernel",
                          node);
  }
  int64_t ms[TJ_MAX_RANK];
  *out_base = n->operands[0];
  TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, *out_base, ms));
  for (int32_t k = 0; k < n->rank; ++k) strides[k] = ms[n->attrs.ints[k]];
  return NULL;
}

static tj_status_t gemm_operands(tj_lowering_t* lw) {
  const tj_node_t* mm = NODE(lw, lw->mm);
  uint32_t an = mm->operands[0], bn = mm->operands[1];
  const tj_node_t* a = NODE(lw, an);
  const tj_node_t* b = NODE(lw, bn);
  bool half = a->dtype == b->dtype &&
              (a->dtype == TJ_DTYPE_F16 || a->dtype == TJ_DTYPE_BF16);
  // qgemm (issue 17): matmul_i32's operands are i8/u8 (inference checked).
  bool int8 = mm->op == TJ_OP_MATMUL_I32;
  if ((a->dtype != TJ_DTYPE_F32 || b->dtype != TJ_DTYPE_F32) && !half &&
      !int8) {
    return tj_unsupported(
        "matmul %%%u is %s; the gemm template takes f32, f16 or bf16 (i8/u8 "
        "through matmul_i32)",
        lw->mm, tj_dtype_name(a->dtype));
  }
  int64_t sa[TJ_MAX_RANK], sb[TJ_MAX_RANK];
  uint32_t abase, bbase;
  TJ_RETURN_IF_ERROR(operand_view(lw, an, &abase, sa));
  TJ_RETURN_IF_ERROR(operand_view(lw, bn, &bbase, sb));
  int32_t nb = lw->vrank - 2;
  int64_t va[MAXV] = {0}, vb[MAXV] = {0};
  int32_t ba = a->rank >= 2 ? a->rank - 2 : 0;
  int32_t bb = b->rank >= 2 ? b->rank - 2 : 0;
  for (int32_t i = 0; i < nb; ++i) {
    int32_t ja = i - (nb - ba), jb = i - (nb - bb);
    if (ja >= 0 && !(a->dims[ja] == 1 && lw->vdims[i] != 1)) va[i] = sa[ja];
    if (jb >= 0 && !(b->dims[jb] == 1 && lw->vdims[i] != 1)) vb[i] = sb[jb];
  }
  va[nb] = a->rank >= 2 ? sa[a->rank - 2] : 0;      // m
  va[nb + 1] = sa[a->rank - 1];                     // k
  vb[nb] = b->rank >= 2 ? sb[b->rank - 2] : sb[0];  // k
  vb[nb + 1] = b->rank >= 2 ? sb[b->rank - 1] : 0;  // n
  // A box of the output (pad or concat in the epilogue) starts at some
  // (batch.., m0, n0): A from row m0, B from column n0.
  int64_t start[MAXV] = {0};
  for (int32_t d = 0; d < lw->root_rank; ++d) {
    if (lw->root_end[d] > lw->root_beg[d]) {
      start[lw->root_beg[d]] = lw->seg_start[d][lw->cur_seg[d]];
    }
  }
  int64_t aoff = 0, boff = 0, t;
  for (int32_t i = 0; i < nb + 2; ++i) {
    if (start[i] == 0) continue;
    if (i < nb + 1) {  // batch and m: A
      TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, start[i], va[i], &t));
      TJ_RETURN_IF_ERROR(tj_lower_dim_add(lw, aoff, t, &aoff));
    }
    if (i != nb) {  // batch and n: B
      TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, start[i], vb[i], &t));
      TJ_RETURN_IF_ERROR(tj_lower_dim_add(lw, boff, t, &boff));
    }
  }
  uint32_t idx;
  TJ_RETURN_IF_ERROR(
      tj_lower_add_buffer(lw, abase, TJ_KIR_GEMM_A, va, aoff, &idx));
  TJ_RETURN_IF_ERROR(
      tj_lower_add_buffer(lw, bbase, TJ_KIR_GEMM_B, vb, boff, &idx));
  return tj_lower_node_dim(lw, an, a->rank - 1, &lw->gemm_k);
}

tj_status_t tj_lower_body_gemm(tj_lowering_t* lw) {
  TJ_RETURN_IF_ERROR(gemm_operands(lw));
  tj_lower_map_t map;
  TJ_RETURN_IF_ERROR(tj_lower_root_map(lw, &map));
  tj_lower_begin_phase(lw, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM);
  return tj_lower_store_outputs(lw, &map);
}
