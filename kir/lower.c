// kir/lower.c: the driver of the lowering of one fusion group to kernel IR
// (lower.h has the model and the API): the root space of each template,
// the attempts and the box odometer, pad and concat (boxes), the in-place
// check, building the kernel, and what a lowered kernel owns. The other
// concerns have files of their own, sharing the state of lower_internal.h:
//   lower_index.c      dims, index maps through movement ops, the layout
//                      rule, buffers, params and the final space
//   lower_pointwise.c  the evaluation walk; the POINTWISE template
//   lower_reduce.c     the ROW_REDUCE template
//   lower_gemm.c       the GEMM template
//   lower_gather.c     indexed reads (gather)
// Layout and schedule decisions as data: kir/schedule.h.
//
// The group's nodes are evaluated at a point of an iteration space by
// walking from the stored outputs down to the loads, carrying an index map:
// the coordinates of the node being evaluated as an affine function of the
// space's coordinates (coefficients and offsets are dims, so a map through
// a reshape of a symbolic dim stays exact). Broadcasts zero a row,
// transposes permute rows, slices scale and shift them, reshapes that split
// a dim combine rows; a load composes the map with the node's row-major
// strides into per-space-dim strides and an element offset.
//
// The space starts as the "root" shape (the pointwise output, the
// reduction's input F with the reduced axes last, the matmul output). A
// reshape that merges dims needs its input's coordinates as div/mod of one
// space coordinate; when that coordinate is a plain space dim the space is
// refined (the dim split into the reshape's factors) and the lowering
// restarts, like the "view" logic of Inductor's loop bodies. Each attempt
// first runs without building anything (collecting buffers and index uses),
// then decides the final space: size-1 dims dropped and neighbours merged
// where every buffer's strides allow it (a contiguous [B, 4096] becomes one
// dim: fewer loops, one vector line), the reduced dims of a reduction merged
// into the one reduced dim the ROW_REDUCE template has (when no single
// stride reads them, that dim is their product and reads compute each
// reduced coordinate by division: an indexed load, no permute). Then it
// builds.
//
// Pad and concat are not affine: the output is cut into boxes (per root dim
// a list of segments) such that inside each box every pad and concat takes
// one branch, and each box is its own kernel whose root map starts at the
// box's corner. A box is cut where a pad's or concat's bounds fall,
// numerically for constant bounds and structurally for symbolic ones (a
// concat along B cuts the space at B). Reductions are cut only along rows,
// matmuls along their output (A and B are offset to the box). A concat
// whose inputs are pointwise functions of the same loads (rotary
// embeddings' rotate_half) is not cut: it is one select per element
// (kir/lower_select.c says when).

#include <stdio.h>
#include <string.h>

#include "kir/lower_internal.h"
#include "lib/dtype.h"
#include "lib/window.h"

//===--- pad and concat: one branch per box ---===//

// a - b for dims where the result is known: equal dims, b == 0, or
// constants.
static tj_status_t dsub(int64_t a, int64_t b, int64_t* out) {
  if (a == b) {
    *out = 0;
  } else if (b == 0) {
    *out = a;
  } else if (a >= 0 && b >= 0 && a >= b) {
    *out = a - b;
  } else {
    return tj_unsupported("a pad or concat offset is not a known dim");
  }
  return NULL;
}

// Asks for segment cur_seg[d] of root dim |d| to be replaced by |n|
// segments.
static tj_status_t request_segments(tj_lowering_t* lw, int32_t d, int32_t n,
                                    const int64_t* starts,
                                    const int64_t* sizes) {
  // Boxes partition the output: any dim of a pointwise kernel or of a
  // matmul's output, only the rows of a reduction.
  if (lw->kind == TJ_KIR_ROW_REDUCE && lw->root_reduced[d]) {
    return tj_unsupported("pad or concat along a reduced axis");
  }
  if (lw->nfac[d] > 1) {
    return tj_unsupported("pad or concat along a reshaped axis");
  }
  if (lw->nseg[d] - 1 + n > MAX_SEGMENTS) {
    return tj_unsupported("pad or concat needs more than %d segments",
                          MAX_SEGMENTS);
  }
  lw->want_segments = true;
  lw->segq_dim = d;
  lw->segq_n = n;
  memcpy(lw->segq_start, starts, sizeof(int64_t) * (size_t)n);
  memcpy(lw->segq_size, sizes, sizeof(int64_t) * (size_t)n);
  return tj_unsupported("segments");
}

// The segment of a node axis (|n| consecutive segments |starts|/|sizes|
// from 0, |total| long) that every point of the box falls in, through
// |map| row |a|. Asks for the box to be cut when the points straddle
// segments.
static tj_status_t pick_segment(tj_lowering_t* lw, const tj_lower_map_t* map,
                                int32_t a, int32_t n, const int64_t* starts,
                                const int64_t* sizes, int64_t total,
                                int32_t* out) {
  int64_t off = map->off[a];
  int32_t s = -1, nonzero = 0;
  for (int32_t i = 0; i < lw->vrank; ++i) {
    if (map->coef[a][i] != 0 && lw->vdims[i] != 1) {
      ++nonzero;
      s = i;
    }
  }
  if (nonzero > 1) {
    return tj_unsupported("a pad or concat axis mixes several space dims");
  }
  int64_t c = nonzero ? map->coef[a][s] : 0;
  int64_t extent = nonzero ? lw->vdims[s] : 1;  // points along the axis
  // Exactly one segment, by structure: the points start where it starts
  // and are as many as it holds.
  // (A constant coordinate at a symbolic bound is not decided here: the
  // segment before it may be empty at run time.)
  if (c == 1 || c == 0) {
    for (int32_t i = 0; i < n; ++i) {
      if (off == starts[i] &&
          ((c == 1 && extent == sizes[i]) || (c == 0 && sizes[i] > 0))) {
        *out = i;
        return NULL;
      }
    }
  }
  // The root dim the points walk along, unrefined.
  int32_t d = -1;
  for (int32_t r = 0; nonzero && r < lw->root_rank; ++r) {
    if (s >= lw->root_beg[r] && s < lw->root_end[r]) d = r;
  }
  bool all_const = off >= 0 && c >= 0 && extent >= 0;
  for (int32_t i = 0; i < n; ++i) all_const &= starts[i] >= 0 && sizes[i] >= 0;
  if (all_const) {
    int32_t i = 0;
    while (i < n && !(off < starts[i] + sizes[i])) ++i;
    if (i == n)
      return tj_internal("lower: a pad or concat index is out of range");
    int64_t last = off + c * (extent - 1);
    if (last < starts[i] + sizes[i]) {
      *out = i;
      return NULL;
    }
    if (d < 0 || lw->seg_size[d][lw->cur_seg[d]] != extent ||
        lw->seg_start[d][lw->cur_seg[d]] < 0) {
      return tj_unsupported("a pad or concat axis walks a refined space dim");
    }
    // Cut the box where the points enter the next segment.
    int64_t cut = (starts[i] + sizes[i] - off + c - 1) / c;
    int64_t base = lw->seg_start[d][lw->cur_seg[d]];
    int64_t ns[2] = {base, base + cut}, nz[2] = {cut, extent - cut};
    return request_segments(lw, d, 2, ns, nz);
  }
  // Symbolic: only a box covering the whole axis at its own coordinates
  // can be cut at the segments' bounds.
  if (c == 1 && d >= 0 && off == 0 && extent == total &&
      lw->seg_start[d][lw->cur_seg[d]] == 0) {
    return request_segments(lw, d, n, starts, sizes);
  }
  return tj_unsupported(
      "a pad or concat with symbolic bounds read through "
      "a slice");
}

tj_status_t tj_lower_concat_value(tj_lowering_t* lw, uint32_t node,
                                  const tj_lower_map_t* map, uint32_t* out) {
  bool taken;
  TJ_RETURN_IF_ERROR(tj_lower_concat_select(lw, node, map, out, &taken));
  if (taken) return NULL;  // one select (kir/lower_select.c)
  const tj_node_t* n = NODE(lw, node);
  int32_t a = (int32_t)n->attrs.axis;
  int32_t k = (int32_t)n->num_operands;
  if (k > MAX_SEGMENTS) {
    return tj_unsupported("concat of more than %d values", MAX_SEGMENTS);
  }
  int64_t starts[MAX_SEGMENTS], sizes[MAX_SEGMENTS], total = 0;
  for (int32_t i = 0; i < k; ++i) {
    starts[i] = total;
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, n->operands[i], a, &sizes[i]));
    TJ_RETURN_IF_ERROR(tj_lower_dim_add(lw, total, sizes[i], &total));
  }
  int32_t i;
  TJ_RETURN_IF_ERROR(pick_segment(lw, map, a, k, starts, sizes, total, &i));
  tj_lower_map_t sub = *map;
  TJ_RETURN_IF_ERROR(dsub(map->off[a], starts[i], &sub.off[a]));
  return tj_lower_value(lw, n->operands[i], &sub, out);
}

tj_status_t tj_lower_pad_value(tj_lowering_t* lw, uint32_t node,
                               const tj_lower_map_t* map, uint32_t* out) {
  const tj_node_t* n = NODE(lw, node);
  const int64_t* low = n->attrs.ints;
  // NULL for rank 0 (no NULL + 0).
  const int64_t* high = n->rank > 0 ? n->attrs.ints + n->rank : NULL;
  tj_lower_map_t sub = *map;
  for (int32_t a = 0; a < n->rank; ++a) {
    if (low[a] == 0 && high[a] == 0) continue;
    int64_t inner, total;
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, n->operands[0], a, &inner));
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, node, a, &total));
    int64_t starts[3] = {0, low[a], 0}, sizes[3] = {low[a], inner, high[a]};
    TJ_RETURN_IF_ERROR(tj_lower_dim_add(lw, low[a], inner, &starts[2]));
    int32_t i;
    TJ_RETURN_IF_ERROR(pick_segment(lw, map, a, 3, starts, sizes, total, &i));
    if (i != 1) {  // the padding: a constant
      if (!lw->emit) {
        *out = 0;
        return NULL;
      }
      unsigned char data[16] = {0};
      tj_store_f64(n->dtype, data, 0, n->attrs.value);
      *out = tj_lower_const(lw, n->dtype, data);
      return NULL;
    }
    TJ_RETURN_IF_ERROR(dsub(map->off[a], low[a], &sub.off[a]));
  }
  return tj_lower_value(lw, n->operands[0], &sub, out);
}

//===--- the template of the group ---===//

static tj_status_t body(tj_lowering_t* lw) {
  switch (lw->kind) {
    case TJ_KIR_POINTWISE:
      return tj_lower_body_pointwise(lw);
    case TJ_KIR_ROW_REDUCE:
      if (tj_lower_is_scan(NODE(lw, lw->grp->anchor)->op))
        return tj_lower_body_scan(lw);
      return tj_lower_body_reduce(lw);
    case TJ_KIR_GEMM:
      return tj_lower_body_gemm(lw);
    case TJ_KIR_CONV:
      return tj_lower_body_conv(lw);
    case TJ_KIR_ATTENTION:
      break;
  }
  return tj_internal("lower: bad template");
}

//===--- roots ---===//

static tj_status_t setup_root(tj_lowering_t* lw) {
  const tj_group_t* grp = lw->grp;
  memset(lw->root_reduced, 0, sizeof(lw->root_reduced));
  lw->mm2 = NONE32;
  switch (grp->kind) {
    case TJ_GROUP_POINTWISE: {
      lw->kind = TJ_KIR_POINTWISE;
      uint32_t a = grp->anchor;
      lw->root_rank = NODE(lw, a)->rank;
      for (int32_t d = 0; d < lw->root_rank; ++d) {
        TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, a, d, &lw->root_dims[d]));
      }
      return NULL;
    }
    case TJ_GROUP_REDUCTION:
    case TJ_GROUP_OPAQUE: {
      const tj_node_t* r = NODE(lw, grp->anchor);
      if (r->op == TJ_OP_CONV) {
        // A conv with an epilogue (issue 15): the CONV template over the
        // conv's output space.
        lw->kind = TJ_KIR_CONV;
        lw->mm = grp->anchor;
        lw->root_rank = r->rank;
        for (int32_t d = 0; d < lw->root_rank; ++d) {
          TJ_RETURN_IF_ERROR(
              tj_lower_node_dim(lw, grp->anchor, d, &lw->root_dims[d]));
        }
        return NULL;
      }
      bool argmax = r->op == TJ_OP_ARGMAX || r->op == TJ_OP_ARGMIN;
      // A scan (cumsum, cumprod) walks its one axis, last in the space.
      bool scan = tj_lower_is_scan(r->op);
      if (grp->kind == TJ_GROUP_OPAQUE && !argmax && !scan) {
        return tj_unsupported("%s has no kernel template", op_name(r->op));
      }
      lw->kind = TJ_KIR_ROW_REDUCE;
      uint32_t in = r->operands[0];
      lw->root_rank = NODE(lw, in)->rank;
      for (int32_t d = 0; d < lw->root_rank; ++d) {
        TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, in, d, &lw->root_dims[d]));
      }
      lw->red_count = 1;
      // argmax and argmin keep their one normalized axis in attrs.axis.
      uint32_t num_axes = argmax || scan ? 1 : r->attrs.num_ints;
      for (uint32_t k = 0; k < num_axes; ++k) {
        int64_t ax = argmax || scan ? r->attrs.axis : r->attrs.ints[k];
        lw->root_reduced[ax] = true;
        TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, lw->red_count,
                                            lw->root_dims[ax], &lw->red_count));
      }
      return NULL;
    }
    case TJ_GROUP_MATMUL: {
      lw->kind = TJ_KIR_GEMM;
      lw->mm = grp->anchor;
      const tj_node_t* mm = NODE(lw, lw->mm);
      // Other contractions are composites decompose left (a TJ_BISECT
      // budget): no template, a graph break.
      if (mm->op != TJ_OP_MATMUL && mm->op != TJ_OP_MATMUL_I32 &&
          mm->op != TJ_OP_MATMUL_F8) {
        return tj_unsupported("%s has no kernel template",
                              tj_op_info(mm->op)->name);
      }
      lw->root_rank = mm->rank;
      for (int32_t d = 0; d < lw->root_rank; ++d) {
        TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, lw->mm, d, &lw->root_dims[d]));
      }
      // swiglu (issue 14): a second matmul of the group (fuse.c's dual
      // pair: the same A, a B of B's shape) is the kernel's B2.
      for (uint32_t j = 0; j < grp->num_nodes; ++j) {
        uint32_t v = grp->nodes[j];
        if (v == lw->mm || NODE(lw, v)->op != TJ_OP_MATMUL) continue;
        if (mm->op != TJ_OP_MATMUL || lw->mm2 != NONE32)
          return tj_unsupported("matmul %%%u: more than two matmuls a kernel",
                                lw->mm);
        lw->mm2 = v;
      }
      return NULL;
    }
    case TJ_GROUP_VIEW:
      break;
  }
  return tj_internal("lower: a view group has no kernel");
}

// The virtual space from the root factorization (GEMM adds the m or n of
// size 1 a vector operand lacks).
static void setup_virtual(tj_lowering_t* lw) {
  int32_t order[TJ_MAX_RANK], n = 0;
  for (int32_t d = 0; d < lw->root_rank; ++d) {
    if (!lw->root_reduced[d]) order[n++] = d;
  }
  for (int32_t d = 0; d < lw->root_rank; ++d) {
    if (lw->root_reduced[d]) order[n++] = d;
  }
  if (lw->kind != TJ_KIR_GEMM) {
    tj_lower_build_virtual(lw, order);
    // CONV: the template indexes every space dim [N, O, spatial..].
    for (int32_t i = 0; lw->kind == TJ_KIR_CONV && i < lw->vrank; ++i)
      lw->vfixed[i] = true;
    return;
  }
  const tj_node_t* mm = NODE(lw, lw->mm);
  bool has_m = NODE(lw, mm->operands[0])->rank >= 2;
  bool has_n = NODE(lw, mm->operands[1])->rank >= 2;
  int32_t nb = lw->root_rank - has_m - has_n;
  lw->vrank = 0;
  memset(lw->vreduced, 0, sizeof(lw->vreduced));
  memset(lw->vfixed, 0, sizeof(lw->vfixed));
  for (int32_t d = 0; d < nb; ++d) {
    lw->root_beg[d] = lw->vrank;
    lw->vdims[lw->vrank++] = lw->root_dims[d];
    lw->root_end[d] = lw->vrank;
  }
  int32_t d = nb;
  lw->vfixed[lw->vrank] = true;
  if (has_m) {
    lw->root_beg[d] = lw->vrank;
    lw->root_end[d] = lw->vrank + 1;
    lw->vdims[lw->vrank++] = lw->root_dims[d++];
  } else {
    lw->vdims[lw->vrank++] = 1;
  }
  lw->vfixed[lw->vrank] = true;
  if (has_n) {
    lw->root_beg[d] = lw->vrank;
    lw->root_end[d] = lw->vrank + 1;
    lw->vdims[lw->vrank++] = lw->root_dims[d];
  } else {
    lw->vdims[lw->vrank++] = 1;
  }
}

//===--- checks ---===//

// A value written in place of an input must be read at the index it is
// written, or a vector of the output would clobber input elements other
// points still read.
static tj_status_t check_in_place(tj_lowering_t* lw) {
  if (!lw->mp) return NULL;
  for (uint32_t o = 0; o < lw->num_bufs; ++o) {
    const tj_lower_buffer_t* out = &lw->bufs[o];
    if (out->role != TJ_KIR_OUTPUT) continue;
    uint32_t bi = lw->mp->buffer_of[out->node];
    if (bi == UINT32_MAX) continue;
    uint32_t in = lw->mp->buffers[bi].in_place_of;
    if (in == TJ_NODE_NONE) continue;
    for (uint32_t b = 0; b < lw->num_bufs; ++b) {
      const tj_lower_buffer_t* v = &lw->bufs[b];
      if (v->node != in) continue;
      if (v->offset != out->offset ||
          memcmp(v->strides, out->strides,
                 sizeof(int64_t) * (size_t)lw->vrank) != 0) {
        return tj_internal(
            "lower: %%%u is written in place of %%%u but "
            "the kernel reads %%%u at another index",
            out->node, in, in);
      }
    }
  }
  return NULL;
}

// The inputs read at the index every output is written (|lw->aligned|):
// those an output may overwrite as check_in_place asks, whatever the
// memory plan chose (a copy for another plan checks against them).
static uint64_t aligned_inputs(const tj_lowering_t* lw) {
  uint64_t mask = 0;
  bool any_output = false;
  for (uint32_t b = 0; b < lw->num_bufs; ++b) {
    if (lw->bufs[b].role != TJ_KIR_OUTPUT) mask |= 1ull << b;
  }
  for (uint32_t o = 0; o < lw->num_bufs; ++o) {
    const tj_lower_buffer_t* out = &lw->bufs[o];
    if (out->role != TJ_KIR_OUTPUT) continue;
    any_output = true;
    for (uint32_t b = 0; b < lw->num_bufs; ++b) {
      const tj_lower_buffer_t* v = &lw->bufs[b];
      if (v->offset != out->offset ||
          memcmp(v->strides, out->strides,
                 sizeof(int64_t) * (size_t)lw->vrank) != 0) {
        mask &= ~(1ull << b);
      }
    }
  }
  return any_output ? mask : 0;
}

//===--- driver ---===//

// |dim| of |src| rebuilt in |dst| (whose symbols are |src|'s, in order):
// the sum of its terms, each a coefficient times its symbols.
static tj_status_t import_dim(tj_dimtab_t* dst, const tj_dimtab_t* src,
                              int64_t dim, int64_t* out) {
  const tj_dim_expr_t* e = tj_dim_expr(src, dim);
  if (!e) {
    *out = dim;
    return NULL;
  }
  int64_t sum = 0;
  for (uint32_t t = 0; t < e->num_terms; ++t) {
    const tj_dim_term_t* term = &e->terms[t];
    int64_t product = term->coeff;
    for (uint32_t f = 0; f < term->num_factors; ++f) {
      int64_t symbol;
      TJ_RETURN_IF_ERROR(tj_dim_symbol(
          dst, tj_dim_symbol_name(src, term->factors[f]), &symbol));
      TJ_RETURN_IF_ERROR(tj_dim_mul(dst, product, symbol, &product));
    }
    TJ_RETURN_IF_ERROR(tj_dim_add(dst, sum, product, &sum));
  }
  *out = sum;
  return NULL;
}

// Moves the symbolic dims of |out| (params, buffer offsets, the argmax
// extent) from the lowering's scratch table into a small table |out| owns,
// which starts with all of the graph's symbols so that ids agree.
static tj_status_t own_dims(tj_lowering_t* lw, tj_lowered_kernel_t* out) {
  bool symbolic = out->num_params > 0 ||
                  (out->nonempty_node != NONE32 && out->nonempty_extent < 0);
  for (uint32_t b = 0; b < out->num_buffers; ++b) {
    symbolic |= out->buffer_offset_dims[b] < 0;
  }
  if (!symbolic) return NULL;
  out->dims = tj_alloc(lw->al, sizeof(tj_dimtab_t));
  if (!out->dims) return tj_status_oom();
  tj_dimtab_initialize(out->dims, lw->al);
  for (uint32_t i = 0; i < tj_dim_num_symbols(&lw->dims); ++i) {
    int64_t unused;
    TJ_RETURN_IF_ERROR(
        tj_dim_symbol(out->dims, tj_dim_symbol_name(&lw->dims, i), &unused));
  }
  for (uint32_t p = 0; p < out->num_params; ++p) {
    TJ_RETURN_IF_ERROR(import_dim(out->dims, &lw->dims, out->param_dims[p],
                                  &out->param_dims[p]));
  }
  for (uint32_t b = 0; b < out->num_buffers; ++b) {
    TJ_RETURN_IF_ERROR(import_dim(out->dims, &lw->dims,
                                  out->buffer_offset_dims[b],
                                  &out->buffer_offset_dims[b]));
  }
  if (out->nonempty_node != NONE32) {
    TJ_RETURN_IF_ERROR(import_dim(out->dims, &lw->dims, out->nonempty_extent,
                                  &out->nonempty_extent));
  }
  return NULL;
}

static tj_status_t build_kernel(tj_lowering_t* lw, const char* name,
                                tj_lowered_kernel_t* out) {
  lw->num_params = 0;
  TJ_RETURN_IF_ERROR(tj_kir_create(lw->al, lw->kind, name, &lw->k));
  tj_kir_ival_t dims[MAXV];
  for (int32_t f = 0; f < lw->frank; ++f) {
    TJ_RETURN_IF_ERROR(tj_lower_ival(lw, lw->fdims[f], &dims[f]));
  }
  tj_kir_ival_t strides[TJ_KIR_MAX_BUFFERS][MAXV];
  for (uint32_t b = 0; b < lw->num_bufs; ++b) {
    for (int32_t f = 0; f < lw->frank; ++f) {
      TJ_RETURN_IF_ERROR(tj_lower_ival(
          lw, tj_lower_final_stride(lw, &lw->bufs[b], f), &strides[b][f]));
    }
  }
  tj_kir_ival_t kdim = tj_kir_constant(0);
  if (lw->kind == TJ_KIR_GEMM)
    TJ_RETURN_IF_ERROR(tj_lower_ival(lw, lw->gemm_k, &kdim));
  tj_kir_set_space(lw->k, lw->frank, dims);
  for (uint32_t b = 0; b < lw->num_bufs; ++b) {
    const tj_lower_buffer_t* v = &lw->bufs[b];
    char bname[32];
    snprintf(bname, sizeof(bname), "%s%u_%u",
             v->role == TJ_KIR_OUTPUT ? "out" : "in", v->node, b);
    tj_kir_add_buffer(lw->k, bname, NODE(lw, v->node)->dtype, v->role,
                      strides[b]);
    out->buffer_nodes[b] = v->node;
    out->buffer_offset_dims[b] = v->offset;
  }
  out->num_buffers = lw->num_bufs;
  out->index_aligned = lw->aligned;
  if (lw->kind == TJ_KIR_GEMM) {
    tj_kir_set_gemm(lw->k, kdim, NULL);
    lw->k->allow_half_gemm = true;  // every GEMM template takes them
    lw->k->allow_int8_gemm = true;  // x86 and CUDA (sm_90a); float8: CUDA
    lw->k->bq = lw->bq;             // qfold: x86's quantized weights
    lw->k->b_int7 = lw->b_int7;
  }
  if (lw->k->error) return tj_status_clone(lw->k->error);
  lw->emit = true;
  for (uint32_t i = 0; i < lw->g->num_nodes; ++i) lw->red_phase[i] = NONE32;
  TJ_RETURN_IF_ERROR(body(lw));
  tj_status_t status = tj_kir_finalize(lw->k);
  if (status) {
    if (tj_status_code(status) == TJ_STATUS_UNSUPPORTED) return status;
    return tj_status_annotate(status, "lower: invalid kernel");
  }
  out->num_params = lw->num_params;
  memcpy(out->param_dims, lw->params, sizeof(int64_t) * lw->num_params);
  out->nonempty_node = NONE32;
  const tj_node_t* anchor = NODE(lw, lw->grp->anchor);
  if (anchor->op == TJ_OP_ARGMAX || anchor->op == TJ_OP_ARGMIN) {
    out->nonempty_node = lw->grp->anchor;
    out->nonempty_extent = lw->red_count;
  } else if (lw->gather_check != NONE32) {
    out->nonempty_node = lw->gather_check;
    out->nonempty_extent = lw->gather_extent;
  }
  out->kernel = lw->k;
  lw->k = NULL;
  status = own_dims(lw, out);
  if (status)  //===--- the lowered kernel at run time ---===//

    tj_lowered_kernel_deinitialize(out);
  return status;
}

// Advances the box odometer; false after the last box.
static bool next_box(tj_lowering_t* lw) {
  for (int32_t d = lw->root_rank; d-- > 0;) {
    if (++lw->cur_seg[d] < lw->nseg[d]) return true;
    lw->cur_seg[d] = 0;
  }
  return false;
}

static void free_outputs(tj_lowered_kernel_t* outs, uint32_t* count) {
  for (uint32_t i = 0; i < *count; ++i)
    tj_lowered_kernel_deinitialize(&outs[i]);
  *count = 0;
}

static void apply_segments(tj_lowering_t* lw) {
  int32_t d = lw->segq_dim, c = lw->cur_seg[d], n = lw->segq_n;
  int32_t tail = lw->nseg[d] - c - 1;
  memmove(&lw->seg_start[d][c + n], &lw->seg_start[d][c + 1],
          sizeof(int64_t) * (size_t)tail);
  memmove(&lw->seg_size[d][c + n], &lw->seg_size[d][c + 1],
          sizeof(int64_t) * (size_t)tail);
  memcpy(&lw->seg_start[d][c], lw->segq_start, sizeof(int64_t) * (size_t)n);
  memcpy(&lw->seg_size[d][c], lw->segq_size, sizeof(int64_t) * (size_t)n);
  lw->nseg[d] += n - 1;
}

static void apply_split(tj_lowering_t* lw) {
  int32_t d = lw->split_root, p = lw->split_pos, n = lw->split_n;
  int32_t tail = lw->nfac[d] - p - 1;
  memmove(&lw->fac[d][p + n], &lw->fac[d][p + 1],
          sizeof(int64_t) * (size_t)tail);
  memcpy(&lw->fac[d][p], lw->split_dims, sizeof(int64_t) * (size_t)n);
  lw->nfac[d] += n - 1;
}

// One box: the first pass, then (no request) the space and the kernel.
static tj_status_t lower_box(tj_lowering_t* lw, const char* name,
                             tj_lowered_kernel_t* out) {
  for (int32_t d = 0; d < lw->root_rank; ++d) {
    lw->root_dims[d] = lw->seg_size[d][lw->cur_seg[d]];
    if (lw->nseg[d] > 1) lw->fac[d][0] = lw->root_dims[d];
  }
  setup_virtual(lw);
  if (lw->vrank > MAXV) return tj_unsupported("the space has too many dims");
  lw->emit = false;
  lw->num_bufs = 0;
  lw->gather_check = NONE32;
  memset(lw->index_used, 0, sizeof(lw->index_used));
  for (uint32_t i = 0; i < lw->g->num_nodes; ++i) lw->red_phase[i] = NONE32;
  TJ_RETURN_IF_ERROR(body(lw));
  TJ_RETURN_IF_ERROR(check_in_place(lw));
  lw->aligned = aligned_inputs(lw);
  TJ_RETURN_IF_ERROR(tj_lower_decide_space(lw));
  return build_kernel(lw, name, out);
}

static tj_status_t lower(tj_lowering_t* lw, const char* name,
                         tj_lowered_kernel_t* outs, uint32_t max_out,
                         uint32_t* count) {
  *count = 0;
  const tj_op_t grp_op = NODE(lw, lw->grp->anchor)->op;
  if (lw->grp->kind == TJ_GROUP_OPAQUE &&
      (grp_op == TJ_OP_ATTENTION || grp_op == TJ_OP_ATTENTION_LSE ||
       grp_op == TJ_OP_ATTENTION_DQ || grp_op == TJ_OP_ATTENTION_DKV)) {
    // An attention node left whole (issue 14), or one of its backward
    // nodes (fabwdcuda): the ATTENTION template.
    tj_status_t status = tj_lower_attention_kernel(lw, name, &outs[0]);
    if (!status) status = own_dims(lw, &outs[0]);
    if (status) {
      tj_lowered_kernel_deinitialize(&outs[0]);
      return status;
    }
    *count = 1;
    return NULL;
  }
  const tj_op_t anchor_op = NODE(lw, lw->grp->anchor)->op;
  if (lw->grp->kind == TJ_GROUP_OPAQUE && lw->grp->num_nodes == 1 &&
      (anchor_op == TJ_OP_CONV || anchor_op == TJ_OP_MAX_POOL ||
       anchor_op == TJ_OP_AVG_POOL)) {
    // A conv node left whole (issue 15): the CONV template, dense or
    // grouped; a depthwise conv (one input channel a group) or a pool
    // (dwbw): its direct window variant. A dense or grouped conv with an
    // epilogue takes the generic path below (tj_lower_body_conv).
    tj_status_t status =
        anchor_op == TJ_OP_CONV && !tj_window_depthwise(lw->g, lw->grp->anchor)
            ? tj_lower_conv_kernel(lw, name, &outs[0])
            : tj_lower_window_kernel(lw, name, &outs[0]);
    if (!status) status = own_dims(lw, &outs[0]);
    if (status) {
      tj_lowered_kernel_deinitialize(&outs[0]);
      return status;
    }
    *count = 1;
    return NULL;
  }
  if (lw->grp->kind == TJ_GROUP_OPAQUE &&
      tj_lower_is_scatter(NODE(lw, lw->grp->anchor)->op)) {
    // scatter (issue 15): a copy, then the walk of the updates.
    tj_status_t status =
        tj_lower_scatter_kernels(lw, name, outs, max_out, count);
    for (uint32_t i = 0; !status && i < *count; ++i)
      status = own_dims(lw, &outs[i]);
    if (status) free_outputs(outs, count);
    return status;
  }
  TJ_RETURN_IF_ERROR(setup_root(lw));
  for (int32_t d = 0; d < lw->root_rank; ++d) {
    lw->full_dims[d] = lw->root_dims[d];
    lw->nfac[d] = 1;
    lw->fac[d][0] = lw->root_dims[d];
    lw->nseg[d] = 1;
    lw->seg_start[d][0] = 0;
    lw->seg_size[d][0] = lw->root_dims[d];
  }
  for (int attempt = 0; attempt < MAX_ATTEMPTS; ++attempt) {
    free_outputs(outs, count);
    memset(lw->cur_seg, 0, sizeof(lw->cur_seg));
    bool restart = false;
    do {
      // A box with no points needs no kernel; a reduced dim of size 0
      // does not empty it: its rows still store the identity (but a
      // scanned one does: a scan's output has the scanned axis).
      bool empty = false,
           scan = tj_lower_is_scan(NODE(lw, lw->grp->anchor)->op);
      for (int32_t d = 0; d < lw->root_rank; ++d) {
        empty |= (!lw->root_reduced[d] || scan) &&
                 lw->seg_size[d][lw->cur_seg[d]] == 0;
      }
      if (empty) continue;
      if (*count == max_out || *count == MAX_BOXES) {
        // free_outputs zeroes *count: name the limit before it does.
        uint32_t limit = *count;
        free_outputs(outs, count);
        return tj_unsupported("pad or concat needs more than %u kernels",
                              limit);
      }
      char box_name[96];
      snprintf(box_name, sizeof(box_name), "%s_b%u", name, *count);
      lw->want_split = lw->want_segments = false;
      tj_status_t status = lower_box(lw, box_name, &outs[*count]);
      if (status && (lw->want_split || lw->want_segments)) {
        tj_status_free(status);
        if (lw->want_split) apply_split(lw);
        if (lw->want_segments) apply_segments(lw);
        restart = true;
        break;
      }
      if (status) {
        free_outputs(outs, count);
        return status;
      }
      ++*count;
    } while (next_box(lw));
    if (restart) continue;
    // One box keeps the plain name.
    if (*count == 1) {
      tj_kir_t* k = outs[0].kernel;
      const char* plain = tj_arena_strdup(&k->arena, name);
      if (!plain) {
        free_outputs(outs, count);
        return tj_status_oom();
      }
      k->name = plain;
    }
    return NULL;
  }
  free_outputs(outs, count);
  return tj_unsupported("the iteration space needs more than %d refinements",
                        MAX_ATTEMPTS);
}

tj_status_t tj_lower_group(const tj_graph_t* graph, const tj_fusion_t* fusion,
                           const tj_memplan_t* memplan, uint32_t group,
                           const int64_t* symbol_values,
                           tj_allocator_t allocator, const char* name,
                           tj_lowered_kernel_t* out, uint32_t max_out,
                           uint32_t* out_count) {
  *out_count = 0;
  memset(out, 0, sizeof(*out) * max_out);
  if (group >= fusion->num_groups) {
    return tj_internal("lower: group %u of %u", group, fusion->num_groups);
  }
  tj_lowering_t* lw = tj_alloc(allocator, sizeof(tj_lowering_t));
  if (!lw) return tj_status_oom();
  memset(lw, 0, sizeof(*lw));
  lw->g = graph;
  lw->fu = fusion;
  lw->grp = &fusion->groups[group];
  lw->mp = memplan;
  lw->sym = symbol_values;
  lw->al = allocator;
  uint32_t n = graph->num_nodes ? graph->num_nodes : 1;
  lw->in_group = tj_calloc(allocator, n, sizeof(bool));
  lw->red_phase = tj_alloc(allocator, sizeof(uint32_t) * n);
  tj_status_t status = tj_dimtab_copy(&lw->dims, &graph->dims, allocator);
  if (!status && (!lw->in_group || !lw->red_phase)) {
    status = tj_status_oom();
  } else if (!status) {
    for (uint32_t j = 0; j < lw->grp->num_nodes; ++j) {
      lw->in_group[lw->grp->nodes[j]] = true;
    }
    status = lower(lw, name, out, max_out, out_count);
  }
  tj_kir_destroy(lw->k);
  tj_dimtab_deinitialize(&lw->dims);
  tj_free(allocator, lw->memo, sizeof(tj_lower_memo_t) * lw->memo_cap);
  tj_free(allocator, lw->in_group, lw->in_group ? sizeof(bool) * n : 0);
  tj_free(allocator, lw->red_phase, lw->red_phase ? sizeof(uint32_t) * n : 0);
  tj_free(allocator, lw, sizeof(tj_lowering_t));
  if (status) {
    free_outputs(out, out_count);
    const tj_node_t* anchor = &graph->nodes[fusion->groups[group].anchor];
    if (tj_status_code(status) == TJ_STATUS_OUT_OF_MEMORY) return status;
    return tj_status_annotate(status, "group %u (%s, anchor %s %%%u)", group,
                              tj_group_kind_name(fusion->groups[group].kind),
                              op_name(anchor->op),
                              fusion->groups[group].anchor);
  }
  return NULL;
}

void tj_lowered_kernel_deinitialize(tj_lowered_kernel_t* lowered) {
  tj_kir_destroy(lowered->kernel);
  if (lowered->dims && !lowered->borrowed) {
    tj_allocator_t allocator = lowered->dims->allocator;
    tj_dimtab_deinitialize(lowered->dims);
    tj_free(allocator, lowered->dims, sizeof(tj_dimtab_t));
  }
  memset(lowered, 0, sizeof(*lowered));
}

// |dim| of |lowered| under |symbol_values|.
static tj_status_t eval_dim(const tj_lowered_kernel_t* lowered, int64_t dim,
                            const int64_t* symbol_values, int64_t* out) {
  if (dim >= 0 || !lowered->dims) {
    if (dim < 0) return tj_internal("lower: a symbolic dim without a table");
    *out = dim;
    return NULL;
  }
  return tj_dim_eval(lowered->dims, dim, symbol_values, out);
}

tj_status_t tj_lowered_kernel_scalars(const tj_lowered_kernel_t* lowered,
                                      const tj_graph_t* graph,
                                      const int64_t* symbol_values,
                                      int64_t* out_scalars) {
  for (uint32_t p = 0; p < lowered->num_params; ++p) {
    TJ_RETURN_IF_ERROR(eval_dim(lowered, lowered->param_dims[p], symbol_values,
                                &out_scalars[p]));
  }
  if (lowered->nonempty_node == NONE32) return NULL;
  int64_t extent;
  TJ_RETURN_IF_ERROR(
      eval_dim(lowered, lowered->nonempty_extent, symbol_values, &extent));
  if (extent != 0) return NULL;
  const tj_node_t* node = &graph->nodes[lowered->nonempty_node];
  const tj_node_t* in = &graph->nodes[node->operands[0]];
  int64_t dims[TJ_MAX_RANK];
  if (node->op != TJ_OP_ARGMAX && node->op != TJ_OP_ARGMIN) {
    // A gather with no result element reads nothing; a scatter with no
    // update writes nothing.
    bool scatter = tj_lower_is_scatter(node->op);
    uint32_t of = scatter ? node->operands[2] : lowered->nonempty_node;
    TJ_RETURN_IF_ERROR(tj_ir_concrete_dims(graph, of, symbol_values, dims));
    for (int32_t d = 0; d < graph->nodes[of].rank; ++d) {
      if (dims[d] == 0) return NULL;
    }
  }
  TJ_RETURN_IF_ERROR(
      tj_ir_concrete_dims(graph, node->operands[0], symbol_values, dims));
  char shape[160];
  tj_shape_format(&graph->dims, in->rank, dims, shape, sizeof(shape));
  int64_t axis = node->attrs.axis;
  if (node->op == TJ_OP_GATHER_ND ||
      node->op == TJ_OP_SCATTER_ND) {  // the first empty indexed axis
    while (axis + 1 < in->rank && dims[axis] != 0) ++axis;
  }
  return tj_invalid("%s (node %%%u): axis %lld of %s%s is empty",
                    op_name(node->op), lowered->nonempty_node, (long long)axis,
                    tj_dtype_name(in->dtype), shape);
}

tj_status_t tj_lowered_kernel_buffer_offset(const tj_lowered_kernel_t* lowered,
                                            uint32_t buffer,
                                            const int64_t* symbol_values,
                                            int64_t* out_elements) {
  if (buffer >= lowered->num_buffers) {
    return tj_internal("lower: buffer %u of %u", buffer, lowered->num_buffers);
  }
  return eval_dim(lowered, lowered->buffer_offset_dims[buffer], symbol_values,
                  out_elements);
}

int tj_lowered_kernel_format_dim(const tj_lowered_kernel_t* lowered,
                                 int64_t dim, char* buf, size_t size) {
  if (dim >= 0 || !lowered->dims) {
    return snprintf(buf, size, "%lld", (long long)dim);
  }
  return tj_dim_format(lowered->dims, dim, buf, size);
}
