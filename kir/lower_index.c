// kir/lower_index.c: movement and layout for the lowering (lower_internal.h
// has the state). Dims as the lowering sees them (evaluated when
// specializing, new expressions in its scratch dim table), the index map of
// an operand through broadcast, transpose, slice and reshape (a reshape
// that merges dims asks for the space to be refined), the layout rule of
// kir/schedule.h (a value is dense row-major; composing a map with the
// row-major strides gives a buffer's strides and element offset), the
// buffers and params of the kernel, and the final iteration space (size-1
// dims dropped, neighbours merged where every buffer allows it).

#include <stdio.h>
#include <string.h>

#include "kir/lower_internal.h"

//===--- dims ---===//

// |d| as seen by this lowering: evaluated when specializing.
tj_status_t tj_lower_dim(tj_lowering_t* lw, int64_t d, int64_t* out) {
  if (lw->sym && d < 0) return tj_dim_eval(&lw->dims, d, lw->sym, out);
  *out = d;
  return NULL;
}

tj_status_t tj_lower_node_dim(tj_lowering_t* lw, uint32_t node, int32_t axis,
                              int64_t* out) {
  return tj_lower_dim(lw, NODE(lw, node)->dims[axis], out);
}

tj_status_t tj_lower_dim_mul(tj_lowering_t* lw, int64_t a, int64_t b,
                             int64_t* out) {
  if (a == 0 || b == 0) {
    *out = 0;
  } else if (a == 1) {
    *out = b;
  } else if (b == 1) {
    *out = a;
  } else if (a >= 0 && b >= 0) {
    if (tj_mul_overflow_i64(a, b, out)) {
      return tj_unsupported("an index product overflows int64");
    }
  } else {
    return tj_dim_mul(&lw->dims, a, b, out);
  }
  return NULL;
}

tj_status_t tj_lower_dim_add(tj_lowering_t* lw, int64_t a, int64_t b,
                             int64_t* out) {
  if (a == 0) {
    *out = b;
  } else if (b == 0) {
    *out = a;
  } else if (a >= 0 && b >= 0) {
    if (tj_add_overflow_i64(a, b, out)) {
      return tj_unsupported("an index sum overflows int64");
    }
  } else {
    return tj_dim_add(&lw->dims, a, b, out);
  }
  return NULL;
}

// Row-major strides of |node| (dims).
tj_status_t tj_lower_row_major(tj_lowering_t* lw, uint32_t node,
                               int64_t* strides) {
  const tj_node_t* n = NODE(lw, node);
  int64_t s = 1;
  for (int32_t d = n->rank; d-- > 0;) {
    strides[d] = s;
    int64_t size;
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, node, d, &size));
    TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, s, size, &s));
  }
  return NULL;
}

// dst[i] += scale * src[i] over the virtual dims.
static tj_status_t row_axpy(tj_lowering_t* lw, int64_t* dst, int64_t scale,
                            const int64_t* src) {
  for (int32_t i = 0; i < lw->vrank; ++i) {
    if (src[i] == 0) continue;
    int64_t t;
    TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, scale, src[i], &t));
    TJ_RETURN_IF_ERROR(tj_lower_dim_add(lw, dst[i], t, &dst[i]));
  }
  return NULL;
}

void tj_lower_map_clear(tj_lower_map_t* m, int32_t rank) {
  memset(m, 0, sizeof(*m));
  m->rank = rank;
}

//===--- params and buffers of the kernel ---===//

static uint32_t param_of(tj_lowering_t* lw, int64_t dim) {
  for (uint32_t p = 0; p < lw->num_params; ++p) {
    if (lw->params[p] == dim) return p;
  }
  if (lw->num_params == TJ_KIR_MAX_PARAMS) return NONE32;
  char name[32];
  int32_t sym = tj_dim_as_symbol(&lw->dims, dim);
  if (sym >= 0) {
    snprintf(name, sizeof(name), "%s",
             tj_dim_symbol_name(&lw->dims, (uint32_t)sym));
  } else {
    snprintf(name, sizeof(name), "e%u", lw->num_params);
  }
  uint32_t p = tj_kir_add_param(lw->k, name);
  if (p == TJ_KIR_NONE) return NONE32;
  lw->params[lw->num_params] = dim;
  return lw->num_params++;
}

tj_status_t tj_lower_ival(tj_lowering_t* lw, int64_t dim, tj_kir_ival_t* out) {
  if (dim >= 0) {
    *out = tj_kir_constant(dim);
    return NULL;
  }
  uint32_t p = param_of(lw, dim);
  if (p == NONE32) {
    return lw->k->error ? tj_status_clone(lw->k->error)
                        : tj_unsupported("more than %d scalar params",
                                         TJ_KIR_MAX_PARAMS);
  }
  *out = tj_kir_runtime(p);
  return NULL;
}

// An i64 value of |dim| in the body.
tj_status_t tj_lower_body_dim(tj_lowering_t* lw, int64_t dim, uint32_t* out) {
  if (!lw->emit) {
    *out = 0;
    return NULL;
  }
  if (dim >= 0) {
    *out = tj_kir_const_int(lw->k, TJ_DTYPE_I64, dim);
    return NULL;
  }
  tj_kir_ival_t v;
  TJ_RETURN_IF_ERROR(tj_lower_ival(lw, dim, &v));
  *out = tj_kir_param(lw->k, (uint32_t)v.param);
  return NULL;
}

tj_status_t tj_lower_add_buffer(tj_lowering_t* lw, uint32_t node,
                                tj_kir_role_t role, const int64_t* strides,
                                int64_t offset, uint32_t* out) {
  for (uint32_t b = 0; b < lw->num_bufs; ++b) {
    const tj_lower_buffer_t* v = &lw->bufs[b];
    if (v->node == node && v->role == role && v->offset == offset &&
        memcmp(v->strides, strides, sizeof(int64_t) * (size_t)lw->vrank) == 0) {
      *out = b;
      return NULL;
    }
  }
  if (lw->emit) return tj_internal("lower: a buffer appeared in pass 2");
  if (lw->num_bufs == TJ_KIR_MAX_BUFFERS) {
    return tj_unsupported("more than %d buffers", TJ_KIR_MAX_BUFFERS);
  }
  tj_lower_buffer_t* v = &lw->bufs[lw->num_bufs];
  memset(v, 0, sizeof(*v));
  v->node = node;
  v->role = role;
  v->offset = offset;
  memcpy(v->strides, strides, sizeof(int64_t) * (size_t)lw->vrank);
  *out = lw->num_bufs++;
  return NULL;
}

// The strides over the virtual space and the offset of |node|'s row-major
// storage read through |map|.
tj_status_t tj_lower_compose(tj_lowering_t* lw, uint32_t node,
                             const tj_lower_map_t* map, int64_t* strides,
                             int64_t* offset) {
  int64_t ms[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(tj_lower_row_major(lw, node, ms));
  for (int32_t i = 0; i < MAXV; ++i) strides[i] = 0;
  *offset = 0;
  for (int32_t j = 0; j < map->rank; ++j) {
    TJ_RETURN_IF_ERROR(row_axpy(lw, strides, ms[j], map->coef[j]));
    int64_t t;
    TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, ms[j], map->off[j], &t));
    TJ_RETURN_IF_ERROR(tj_lower_dim_add(lw, *offset, t, offset));
  }
  return NULL;
}

//===--- index maps through movement ops ---===//

// The map of operand |opnd| of elementwise or broadcast_to |node| (numpy
// broadcasting: right-aligned, size-1 operand dims repeat).
tj_status_t tj_lower_broadcast_map(tj_lowering_t* lw, uint32_t node,
                                   uint32_t opnd, const tj_lower_map_t* map,
                                   tj_lower_map_t* res) {
  const tj_node_t* n = NODE(lw, node);
  const tj_node_t* o = NODE(lw, opnd);
  tj_lower_map_clear(res, o->rank);
  for (int32_t j = 0; j < o->rank; ++j) {
    int32_t jj = n->rank - o->rank + j;
    if (o->dims[j] == 1 && n->dims[jj] != 1) continue;  // repeated
    memcpy(res->coef[j], map->coef[jj], sizeof(res->coef[j]));
    res->off[j] = map->off[jj];
  }
  return NULL;
}

tj_status_t tj_lower_transpose_map(tj_lowering_t* lw, uint32_t node,
                                   const tj_lower_map_t* map,
                                   tj_lower_map_t* res) {
  const tj_node_t* n = NODE(lw, node);
  tj_lower_map_clear(res, n->rank);
  for (int32_t k = 0; k < n->rank; ++k) {
    int64_t p = n->attrs.ints[k];
    memcpy(res->coef[p], map->coef[k], sizeof(res->coef[p]));
    res->off[p] = map->off[k];
  }
  return NULL;
}

tj_status_t tj_lower_slice_map(tj_lowering_t* lw, uint32_t node,
                               const tj_lower_map_t* map, tj_lower_map_t* res) {
  const tj_node_t* n = NODE(lw, node);
  const int64_t* starts = n->attrs.ints;
  // NULL for rank 0 (no NULL + 0).
  const int64_t* steps = n->rank > 0 ? n->attrs.ints + 2 * n->rank : NULL;
  tj_lower_map_clear(res, n->rank);
  for (int32_t d = 0; d < n->rank; ++d) {
    TJ_RETURN_IF_ERROR(row_axpy(lw, res->coef[d], steps[d], map->coef[d]));
    int64_t t;
    TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, steps[d], map->off[d], &t));
    TJ_RETURN_IF_ERROR(tj_lower_dim_add(lw, starts[d], t, &res->off[d]));
  }
  return NULL;
}

// Asks for virtual dim |s| to be split into |n| factors.
static tj_status_t request_split(tj_lowering_t* lw, int32_t s, int32_t n,
                                 const int64_t* factors) {
  if (lw->kind == TJ_KIR_GEMM) {
    return tj_unsupported("a reshape in a matmul epilogue merges dims");
  }
  for (int32_t d = 0; d < lw->root_rank; ++d) {
    if (s < lw->root_beg[d] || s >= lw->root_end[d]) continue;
    if (lw->vrank - 1 + n > MAXV) break;
    if (lw->nseg[d] > 1) {
      return tj_unsupported(
          "a reshape merges dims of a padded or "
          "concatenated axis");
    }
    lw->want_split = true;
    lw->split_root = d;
    lw->split_pos = s - lw->root_beg[d];
    lw->split_n = n;
    memcpy(lw->split_dims, factors, sizeof(int64_t) * (size_t)n);
    return tj_unsupported("split");
  }
  return tj_unsupported("a reshape merges dims beyond the space's rank");
}

// The map of the operand of reshape |node|: dims are paired into groups of
// equal products (size-1 dims aside). A group whose operand side is one dim
// is a split: that coordinate is the group's linear index, an affine sum. A
// group whose operand side has several dims needs div/mod of the linear
// index: possible when the index is already a sum of plain space dims of
// the right sizes, else the space is refined.
tj_status_t tj_lower_reshape_map(tj_lowering_t* lw, uint32_t node,
                                 const tj_lower_map_t* map,
                                 tj_lower_map_t* res) {
  const tj_node_t* z = NODE(lw, node);
  uint32_t yn = z->operands[0];
  const tj_node_t* y = NODE(lw, yn);
  tj_lower_map_clear(res, y->rank);
  int64_t zd[TJ_MAX_RANK], yd[TJ_MAX_RANK];
  int32_t zi[TJ_MAX_RANK], yi[TJ_MAX_RANK], nz = 0, ny = 0;
  for (int32_t d = 0; d < z->rank; ++d) {
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, node, d, &zd[d]));
    if (zd[d] != 1) zi[nz++] = d;
  }
  for (int32_t d = 0; d < y->rank; ++d) {
    TJ_RETURN_IF_ERROR(tj_lower_node_dim(lw, yn, d, &yd[d]));
    if (yd[d] != 1) yi[ny++] = d;
  }
  int32_t a = 0, c = 0;
  while (a < nz || c < ny) {
    if (a >= nz || c >= ny) {
      return tj_unsupported("reshape %%%u: the dims do not pair up", node);
    }
    int32_t a0 = a, c0 = c;
    int64_t pz = zd[zi[a++]], py = yd[yi[c++]];
    while (pz != py) {
      int64_t q;
      bool y_divides = false, z_divides = false;
      if (pz >= 0 && py >= 0) {
        y_divides = pz > py;
        z_divides = py > pz;
      } else {
        TJ_RETURN_IF_ERROR(tj_dim_div_exact(&lw->dims, pz, py, &q, &y_divides));
        if (!y_divides) {
          TJ_RETURN_IF_ERROR(
              tj_dim_div_exact(&lw->dims, py, pz, &q, &z_divides));
        }
      }
      // Neither product divides the other ([5,B] vs [B,5]): grow a side
      // anyway; the group then covers both and may still pair up.
      if (!y_divides && !z_divides) {
        y_divides = c < ny && (pz < 0 || a >= nz);
        z_divides = !y_divides;
      }
      if (y_divides && c < ny) {
        TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, py, yd[yi[c++]], &py));
      } else if (z_divides && a < nz) {
        TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, pz, zd[zi[a++]], &pz));
      } else {
        return tj_unsupported("reshape %%%u: the dims do not pair up", node);
      }
    }
    // L = linear index over the group's z dims.
    int64_t lrow[MAXV] = {0};
    int64_t loff = 0, suffix = 1;
    for (int32_t t = a; t-- > a0;) {
      int32_t d = zi[t];
      TJ_RETURN_IF_ERROR(row_axpy(lw, lrow, suffix, map->coef[d]));
      int64_t s;
      TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, suffix, map->off[d], &s));
      TJ_RETURN_IF_ERROR(tj_lower_dim_add(lw, loff, s, &loff));
      TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, suffix, zd[d], &suffix));
    }
    if (c - c0 == 1) {
      memcpy(res->coef[yi[c0]], lrow, sizeof(lrow));
      res->off[yi[c0]] = loff;
      continue;
    }
    // Unravel L over y dims yi[c0..c): L must be sum_t e_{s_t} * suffix_t
    // with virtual dim s_t of size yd[t].
    bool matched = loff == 0;
    bool used[MAXV] = {false};
    int64_t ysuf = 1;
    int32_t s_of[TJ_MAX_RANK];
    for (int32_t t = c; matched && t-- > c0;) {
      int32_t found = -1;
      for (int32_t s = 0; s < lw->vrank; ++s) {
        if (!used[s] && lrow[s] == ysuf && lw->vdims[s] == yd[yi[t]]) {
          found = s;
          break;
        }
      }
      if (found < 0) {
        matched = false;
        break;
      }
      used[found] = true;
      s_of[t] = found;
      TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, ysuf, yd[yi[t]], &ysuf));
    }
    for (int32_t s = 0; matched && s < lw->vrank; ++s) {
      if (!used[s] && lrow[s] != 0 && lw->vdims[s] != 1) matched = false;
    }
    if (matched) {
      for (int32_t t = c0; t < c; ++t) res->coef[yi[t]][s_of[t]] = 1;
      continue;
    }
    // L is one plain space dim of the group's size: split that dim.
    int32_t single = -1, nonzero = 0;
    for (int32_t s = 0; s < lw->vrank; ++s) {
      if (lrow[s] != 0 && lw->vdims[s] != 1) {
        ++nonzero;
        single = s;
      }
    }
    if (nonzero == 1 && loff == 0 && lrow[single] == 1 &&
        lw->vdims[single] == pz) {
      int64_t factors[TJ_MAX_RANK];
      for (int32_t t = c0; t < c; ++t) factors[t - c0] = yd[yi[t]];
      return request_split(lw, single, c - c0, factors);
    }
    return tj_unsupported(
        "reshape %%%u merges dims of a value read through "
        "a strided or offset index",
        node);
  }
  return NULL;
}

//===--- spaces ---===//

void tj_lower_build_virtual(tj_lowering_t* lw, const int32_t* order) {
  lw->vrank = 0;
  memset(lw->vreduced, 0, sizeof(lw->vreduced));
  memset(lw->vfixed, 0, sizeof(lw->vfixed));
  for (int32_t t = 0; t < lw->root_rank; ++t) {
    int32_t d = order[t];
    lw->root_beg[d] = lw->vrank;
    for (int32_t f = 0; f < lw->nfac[d]; ++f) {
      lw->vreduced[lw->vrank] = lw->root_reduced[d];
      lw->vdims[lw->vrank++] = lw->fac[d][f];
    }
    lw->root_end[d] = lw->vrank;
  }
}

// The map of a root-shaped node.
tj_status_t tj_lower_root_map(tj_lowering_t* lw, tj_lower_map_t* map) {
  tj_lower_map_clear(map, lw->root_rank);
  for (int32_t d = 0; d < lw->root_rank; ++d) {
    map->off[d] = lw->seg_start[d][lw->cur_seg[d]];  // the box's corner
    int64_t suffix = 1;
    for (int32_t i = lw->root_end[d]; i-- > lw->root_beg[d];) {
      if (lw->vdims[i] != 1) map->coef[d][i] = suffix;
      TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, suffix, lw->vdims[i], &suffix));
    }
  }
  return NULL;
}

static bool mergeable(tj_lowering_t* lw, int32_t i, int32_t j, int64_t* tmp,
                      tj_status_t* status) {
  if (lw->index_used[i] || lw->index_used[j]) return false;
  for (uint32_t b = 0; b < lw->num_bufs; ++b) {
    const tj_lower_buffer_t* v = &lw->bufs[b];
    *status = tj_lower_dim_mul(lw, lw->vdims[j], v->strides[j], tmp);
    if (*status) return false;
    if (v->strides[i] != *tmp) return false;
  }
  return true;
}

// GEMM (linear3d, issues 13 and 14): whether batch dim |i| folds into the
// dim |j| after it, which is m or a batch dim already folded into m, so
// that x[B, T, d] @ w[d, n] is one [B*T, d] @ [d, n] GEMM rather than a
// batched one broadcasting w. Only a rank-2 GEMM takes every main loop:
// cuBLASLt, the TMA schedules and split-K (backends/cuda) and, on x86, m
// blocks that run across the batch. It folds when no buffer tells the two
// apart: B (and a quantized B's scale and zero point), whose slot of m
// holds its k stride, is the same matrix for every batch entry (stride 0
// along |i|); A and the epilogue's buffers read |i| and |j| as one strided
// dim (stride(i) = size(j) * stride(j), 0 and 0 for a broadcast bias); and
// no index of either is read (an iota in the epilogue). A symbolic batch
// makes m a product of symbols, a param like any other: one kernel serves
// every B.
static bool gemm_joins_m(tj_lowering_t* lw, int32_t i, int32_t j,
                         tj_status_t* status) {
  if (lw->index_used[i] || lw->index_used[j]) return false;
  for (uint32_t b = 0; b < lw->num_bufs; ++b) {
    const tj_lower_buffer_t* v = &lw->bufs[b];
    if (v->role == TJ_KIR_GEMM_B || v->role == TJ_KIR_GEMM_B2 ||
        v->role == TJ_KIR_GEMM_BSCALE || v->role == TJ_KIR_GEMM_BZERO) {
      if (v->strides[i] != 0) return false;
      continue;
    }
    int64_t tmp;
    *status = tj_lower_dim_mul(lw, lw->vdims[j], v->strides[j], &tmp);
    if (*status) return false;
    if (v->strides[i] != tmp) return false;
  }
  return true;
}

static tj_status_t add_final(tj_lowering_t* lw, int32_t beg, int32_t end) {
  int32_t f = lw->frank++;
  lw->fbeg[f] = beg;
  lw->fend[f] = end;
  int64_t size = 1;
  for (int32_t i = beg; i < end; ++i) {
    lw->vfinal[i] = f;
    TJ_RETURN_IF_ERROR(tj_lower_dim_mul(lw, size, lw->vdims[i], &size));
  }
  lw->fdims[f] = size;
  return NULL;
}

// Groups the kept virtual dims in [beg, end) (kept[] lists them) into final
// dims, merging neighbours where allowed; |must| makes a failure to merge
// all of them an error.
static tj_status_t merge_run(tj_lowering_t* lw, const int32_t* kept,
                             int32_t count, bool allow, bool must) {
  int32_t start = 0;
  for (int32_t t = 1; t <= count; ++t) {
    bool merge = false;
    if (t < count && allow) {
      tj_status_t status = NULL;
      int64_t tmp;
      merge = mergeable(lw, kept[t - 1], kept[t], &tmp, &status);
      if (status) return status;
      if (!merge && must) {
        return tj_unsupported(
            "the reduced axes cannot be read as one "
            "strided axis");
      }
    }
    if (merge) continue;
    // kept[start..t) are consecutive kept dims; dropped size-1 dims between
    // them are covered too (their index is always 0).
    TJ_RETURN_IF_ERROR(add_final(lw, kept[start], kept[t - 1] + 1));
    start = t;
  }
  return NULL;
}

tj_status_t tj_lower_decide_space(tj_lowering_t* lw) {
  lw->frank = 0;
  lw->red_split = false;
  for (int32_t i = 0; i < MAXV; ++i) lw->vfinal[i] = -1;
  int32_t outer[MAXV], red[MAXV], no = 0, nr = 0;
  for (int32_t i = 0; i < lw->vrank; ++i) {
    if (lw->vdims[i] == 1 && !lw->vfixed[i]) continue;
    if (lw->vreduced[i]) {
      red[nr++] = i;
    } else {
      outer[no++] = i;
    }
  }
  if (lw->kind == TJ_KIR_GEMM) {
    // outer ends with m and n (fixed, so kept). The batch dims that fold
    // into m (gemm_joins_m) go into m's final dim; the others stay apart.
    int32_t m = no - 2, first = m;
    while (first > 0) {
      tj_status_t status = NULL;
      bool joins = gemm_joins_m(lw, outer[first - 1], outer[first], &status);
      if (status) return status;
      if (!joins) break;
      --first;
    }
    for (int32_t t = 0; t < first; ++t) {
      TJ_RETURN_IF_ERROR(add_final(lw, outer[t], outer[t] + 1));
    }
    TJ_RETURN_IF_ERROR(add_final(lw, outer[first], outer[m] + 1));
    return add_final(lw, outer[no - 1], outer[no - 1] + 1);
  }
  if (lw->kind == TJ_KIR_CONV) {  // every dim its own (setup_virtual)
    for (int32_t t = 0; t < no; ++t) {
      TJ_RETURN_IF_ERROR(add_final(lw, outer[t], outer[t] + 1));
    }
    return NULL;
  }
  TJ_RETURN_IF_ERROR(merge_run(lw, outer, no, true, false));
  if (lw->kind == TJ_KIR_ROW_REDUCE) {
    if (nr == 0) {
      int32_t f = lw->frank++;
      lw->fbeg[f] = lw->fend[f] = 0;
      lw->fdims[f] = 1;
      return NULL;
    }
    int32_t frank = lw->frank;
    tj_status_t status = merge_run(lw, red, nr, true, true);
    if (!status) return NULL;
    if (tj_status_code(status) != TJ_STATUS_UNSUPPORTED) return status;
    tj_status_free(status);
    // Not one strided axis: iterate the reduced dims as one of their
    // product, each read computing its coordinates (red_split).
    for (uint32_t b = 0; b < lw->num_bufs; ++b) {
      const tj_lower_buffer_t* v = &lw->bufs[b];
      if (v->role != TJ_KIR_OUTPUT) continue;
      for (int32_t t = 0; t < nr; ++t) {
        if (v->strides[red[t]] != 0) {
          return tj_unsupported(
              "%%%u is stored shaped like the input of a reduction over "
              "axes that are not one strided axis",
              v->node);
        }
      }
    }
    lw->frank = frank;
    TJ_RETURN_IF_ERROR(add_final(lw, red[0], red[nr - 1] + 1));
    lw->red_split = true;
    lw->red_final = lw->frank - 1;
    lw->red_nv = nr;
    memcpy(lw->red_v, red, sizeof(int32_t) * (size_t)nr);
  } else if (lw->frank == 0) {
    int32_t f = lw->frank++;
    lw->fbeg[f] = lw->fend[f] = 0;
    lw->fdims[f] = 1;
  }
  return NULL;
}

int64_t tj_lower_final_stride(const tj_lowering_t* lw,
                              const tj_lower_buffer_t* v, int32_t f) {
  if (lw->fend[f] == lw->fbeg[f]) return 0;
  if (lw->red_split && f == lw->red_final) return 0;  // read by offset
  return v->strides[lw->fend[f] - 1];
}

tj_status_t tj_lower_split_coord(tj_lowering_t* lw, int32_t vdim,
                                 uint32_t* out) {
  int32_t t = 0;
  while (t < lw->red_nv && lw->red_v[t] != vdim) ++t;
  if (!lw->red_split || t == lw->red_nv) {
    return tj_internal("lower: virtual dim %d is not a split reduced dim",
                       vdim);
  }
  // Row-major over red_v: coordinate t is (l / suffix) mod size, by
  // repeated division from the innermost dim (the i64 division of
  // non-negative values; a size 0 dim leaves no point to compute).
  uint32_t rem = tj_kir_index(lw->k, (uint32_t)lw->red_final);
  for (int32_t u = lw->red_nv - 1; u > t; --u) {
    uint32_t size;
    TJ_RETURN_IF_ERROR(tj_lower_body_dim(lw, lw->vdims[lw->red_v[u]], &size));
    rem = tj_kir_binary(lw->k, TJ_OP_DIV, rem, size);
  }
  if (t > 0) {
    uint32_t size;
    TJ_RETURN_IF_ERROR(tj_lower_body_dim(lw, lw->vdims[vdim], &size));
    uint32_t q = tj_kir_binary(lw->k, TJ_OP_DIV, rem, size);
    rem = tj_kir_binary(lw->k, TJ_OP_SUB, rem,
                        tj_kir_binary(lw->k, TJ_OP_MUL, q, size));
  }
  *out = rem;
  return NULL;
}

tj_status_t tj_lower_split_offset(tj_lowering_t* lw, const int64_t* strides,
                                  uint32_t* out) {
  *out = NONE32;
  if (!lw->emit || !lw->red_split) return NULL;
  for (int32_t t = 0; t < lw->red_nv; ++t) {
    int64_t s = strides[lw->red_v[t]];
    if (s == 0) continue;
    uint32_t c, sv;
    TJ_RETURN_IF_ERROR(tj_lower_split_coord(lw, lw->red_v[t], &c));
    if (s != 1) {
      TJ_RETURN_IF_ERROR(tj_lower_body_dim(lw, s, &sv));
      c = tj_kir_binary(lw->k, TJ_OP_MUL, c, sv);
    }
    *out = *out == NONE32 ? c : tj_kir_binary(lw->k, TJ_OP_ADD, *out, c);
  }
  return NULL;
}
