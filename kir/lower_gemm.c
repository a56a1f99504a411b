// kir/lower_gemm.c: matmul groups on the GEMM template. The operands A and
// B are memory (or one transpose of it) read with their own strides over
// [batch.., m, k] and [batch.., k, n], offset to the box of the output;
// the rest of the group is the epilogue, evaluated on the accumulator.

#include <string.h>

#include "kir/lower_internal.h"
#include "lib/dtype.h"
#include "lib/quant.h"

// qfold (issue 17): B is a dequantize of constants in the group (the x86
// backend kept it whole: tj_kir_bq_t). Its q, scale and zero point become
// the B, BSCALE and BZERO buffers, read in place; lib/passes/quant_prepack.c
// gave them the layout this takes: q [K, N] (int4: [K, ceil(N / 2)]),
// scale and zero point [N] (per output channel) or [ceil(K / g), N].
static tj_status_t quantized_b(tj_lowering_t* lw, uint32_t dq,
                               const int64_t* start, int32_t nb) {
  const tj_node_t* n = NODE(lw, dq);
  const tj_node_t* q = NODE(lw, n->operands[0]);
  const tj_node_t* s = NODE(lw, n->operands[1]);
  const uint32_t zp = n->operands[2];
  const int64_t* ints = n->attrs.ints;
  int32_t int4 =
      n->attrs.num_ints > TJ_QUANT_INT4 ? (int32_t)ints[TJ_QUANT_INT4] : 0;
  int64_t block = n->attrs.num_ints > TJ_QUANT_BLOCK ? ints[TJ_QUANT_BLOCK] : 0;
  bool blocked = s->rank == 2 && block > 0 && n->attrs.axis == 0;
  bool per_n = s->rank == 1 && n->attrs.axis == 1;
  // The scale and the dequantized B are f32, or (CUDA) A's f16/bf16.
  bool fl = n->dtype == TJ_DTYPE_F32 || n->dtype == TJ_DTYPE_F16 ||
            n->dtype == TJ_DTYPE_BF16;
  if (n->rank != 2 || q->rank != 2 || (!blocked && !per_n) ||
      s->dtype != n->dtype || !fl) {
    return tj_unsupported(
        "matmul %%%u: dequantized B %%%u is not a [K, N] weight quantized per "
        "output channel or per group along K",
        lw->mm, dq);
  }
  for (int32_t i = 0; i < nb + 2; ++i) {
    if (start[i] != 0 && i != nb) {
      return tj_unsupported(
          "matmul %%%u: a box of the output past column 0 of a quantized B",
          lw->mm);
    }
  }
  int64_t sq[TJ_MAX_RANK], ss[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, n->operands[0], sq));
  TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, n->operands[1], ss));
  int64_t vb[MAXV] = {0}, vs[MAXV] = {0};
  vb[nb] = sq[0];
  vb[nb + 1] = 1;
  vs[nb] = blocked ? ss[0] : 0;
  vs[nb + 1] = 1;
  uint32_t idx;
  TJ_RETURN_IF_ERROR(
      tj_lower_add_buffer(lw, n->operands[0], TJ_KIR_GEMM_B, vb, 0, &idx));
  TJ_RETURN_IF_ERROR(
      tj_lower_add_buffer(lw, n->operands[1], TJ_KIR_GEMM_BSCALE, vs, 0, &idx));
  if (zp != TJ_NODE_NONE) {
    TJ_RETURN_IF_ERROR(
        tj_lower_add_buffer(lw, zp, TJ_KIR_GEMM_BZERO, vs, 0, &idx));
  }
  lw->bq.bits = int4 ? 4 : 8;
  lw->bq.int4_signed = int4 == 1;
  lw->bq.group = blocked ? block : 0;
  return NULL;
}

// Whether |node| is an i8 constant whose every value lies in [-64, 63]
// (issue 17): then a u8 x s8 pair sum of vpmaddubsw is at most 255 * 64 *
// 2 = 32640 in magnitude and its i16 saturation never happens, so the x86
// tiers without VNNI may multiply B four k at a time (tj_kir_t.b_int7).
// Weights quantized to 7 bits (ONNX Runtime's reduce_range, meant for
// exactly these CPUs) are such constants; a scan of the weight's bytes
// once per compile.
static bool int7_constant(const tj_lowering_t* lw, uint32_t node) {
  const tj_node_t* n = NODE(lw, node);
  if (n->op != TJ_OP_CONSTANT || n->dtype != TJ_DTYPE_I8 || !n->attrs.data) {
    return false;
  }
  int64_t count = 1;
  for (int32_t d = 0; d < n->rank; ++d) {
    if (n->dims[d] < 0) return false;
    count *= n->dims[d];
  }
  const int8_t* v = n->attrs.data;
  for (int64_t i = 0; i < count; ++i) {
    if (v[i] < -64 || v[i] > 63) return false;
  }
  return true;
}

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

// swiglu (issue 14): the dual GEMM's second B (lw->mm2's, of the same A
// and a B of B's shape: fuse.c's dual pair) as the GEMM_B2 buffer, read
// as B is, from the same box. |refuse|: B is not a plain f16/bf16 matrix.
static tj_status_t second_b(tj_lowering_t* lw, bool refuse,
                            const int64_t* start, int32_t nb) {
  const tj_node_t* mm = NODE(lw, lw->mm);
  const tj_node_t* m2 = NODE(lw, lw->mm2);
  uint32_t bn = m2->operands[1];
  const tj_node_t* b = NODE(lw, bn);
  const tj_node_t* b1 = NODE(lw, mm->operands[1]);
  bool half = b->dtype == TJ_DTYPE_F16 || b->dtype == TJ_DTYPE_BF16;
  if (refuse || !half || m2->operands[0] != mm->operands[0] ||
      b->dtype != b1->dtype || b->rank != 2 || b1->rank != 2) {
    return tj_unsupported(
        "matmuls %%%u and %%%u: a dual gemm needs one A and two f16/bf16 "
        "[K, N] matrices B",
        lw->mm, lw->mm2);
  }
  int64_t sb[TJ_MAX_RANK] = {0};
  uint32_t bbase;
  TJ_RETURN_IF_ERROR(operand_view(lw, bn, &bbase, sb));
  int64_t vb[MAXV] = {0};
  vb[nb] = sb[0];
  vb[nb + 1] = sb[1];
  int64_t boff = 0, t;
  for (int32_t i = 0; i < nb + 2; ++i) {
    if (start[i] == 0 || i == nb) continue;  // batch and n: B
    TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, start[i], vb[i], &t));
    TJ_RETURN_IF_ERROR(tj_lower_dim_add(lw, boff, t, &boff));
  }
  uint32_t idx;
  return tj_lower_add_buffer(lw, bbase, TJ_KIR_GEMM_B2, vb, boff, &idx);
}

static tj_status_t gemm_operands(tj_lowering_t* lw) {
  const tj_node_t* mm = NODE(lw, lw->mm);
  uint32_t an = mm->operands[0], bn = mm->operands[1];
  const tj_node_t* a = NODE(lw, an);
  const tj_node_t* b = NODE(lw, bn);
  bool half = a->dtype == b->dtype &&
              (a->dtype == TJ_DTYPE_F16 || a->dtype == TJ_DTYPE_BF16);
  // qgemm (issue 17): matmul_i32's operands are i8/u8 (inference checked),
  // matmul_f8's float8 (fp8).
  bool int8 = mm->op == TJ_OP_MATMUL_I32;
  bool f8 = mm->op == TJ_OP_MATMUL_F8;
  bool bq = lw->in_group[bn] && b->op == TJ_OP_DEQUANTIZE;
  memset(&lw->bq, 0, sizeof(lw->bq));
  lw->b_int7 = false;
  // A quantized B's own types are checked by quantized_b.
  if ((a->dtype != TJ_DTYPE_F32 || (!bq && b->dtype != TJ_DTYPE_F32)) &&
      !half && !int8 && !f8) {
    return tj_unsupported(
        "matmul %%%u is %s; the gemm template takes f32, f16 or bf16 (i8/u8 "
        "through matmul_i32)",
        lw->mm, tj_dtype_name(a->dtype));
  }
  int64_t sa[TJ_MAX_RANK], sb[TJ_MAX_RANK] = {0};
  uint32_t abase, bbase = 0;
  TJ_RETURN_IF_ERROR(operand_view(lw, an, &abase, sa));
  if (!bq) TJ_RETURN_IF_ERROR(operand_view(lw, bn, &bbase, sb));
  int32_t nb = lw->vrank - 2;
  if (bq && NODE(lw, bn)->rank != 2) {
    return tj_unsupported("matmul %%%u: a quantized B of rank %d", lw->mm,
                          NODE(lw, bn)->rank);
  }
  int64_t va[MAXV] = {0}, vb[MAXV] = {0};
  int32_t ba = a->rank >= 2 ? a->rank - 2 : 0;
  int32_t bb = b->rank >= 2 ? b->rank - 2 : 0;
  for (int32_t i = 0; i < nb; ++i) {
    int32_t ja = i - (nb - ba), jb = i - (nb - bb);
    if (ja >= 0 && !(a->dims[ja] == 1 && lw->vdims[i] != 1)) va[i] = sa[ja];
    if (!bq && jb >= 0 && !(b->dims[jb] == 1 && lw->vdims[i] != 1))
      vb[i] = sb[jb];
  }
  va[nb] = a->rank >= 2 ? sa[a->rank - 2] : 0;  // m
  va[nb + 1] = sa[a->rank - 1];                 // k
  if (!bq) {
    vb[nb] = b->rank >= 2 ? sb[b->rank - 2] : sb[0];  // k
    vb[nb + 1] = b->rank >= 2 ? sb[b->rank - 1] : 0;  // n
  }
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
    if (i != nb && !bq) {  // batch and n: B
      TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, start[i], vb[i], &t));
      TJ_RETURN_IF_ERROR(tj_lower_dim_add(lw, boff, t, &boff));
    }
  }
  uint32_t idx;
  TJ_RETURN_IF_ERROR(
      tj_lower_add_buffer(lw, abase, TJ_KIR_GEMM_A, va, aoff, &idx));
  if (bq) {
    TJ_RETURN_IF_ERROR(quantized_b(lw, bn, start, nb));
  } else {
    TJ_RETURN_IF_ERROR(
        tj_lower_add_buffer(lw, bbase, TJ_KIR_GEMM_B, vb, boff, &idx));
    lw->b_int7 = int8 && int7_constant(lw, bbase);
  }
  if (lw->mm2 != NONE32)
    TJ_RETURN_IF_ERROR(second_b(lw, bq || int8 || f8, start, nb));
  return tj_lower_node_dim(lw, an, a->rank - 1, &lw->gemm_k);
}

tj_status_t tj_lower_body_gemm(tj_lowering_t* lw) {
  TJ_RETURN_IF_ERROR(gemm_operands(lw));
  tj_lower_map_t map;
  TJ_RETURN_IF_ERROR(tj_lower_root_map(lw, &map));
  tj_lower_begin_phase(lw, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM);
  return tj_lower_store_outputs(lw, &map);
}
