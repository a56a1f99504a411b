// kir/lower.c
//
// Lowers one fusion group to one kernel IR kernel (lower.h has the model).
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
// into the one reduced dim the ROW_REDUCE template has. Then it builds.
//
// Pad and concat are not affine: the output is cut into boxes (per root dim
// a list of segments) such that inside each box every pad and concat takes
// one branch, and each box is its own kernel whose root map starts at the
// box's corner. A box is cut where a pad's or concat's bounds fall,
// numerically for constant bounds and structurally for symbolic ones (a
// concat along B cuts the space at B). Reductions are cut only along rows,
// matmuls along their output (A and B are offset to the box).

#include "kir/lower.h"

#include <stdio.h>
#include <string.h>

#include "lib/dtype.h"

#define MAXV TJ_KIR_MAX_RANK  // dims of the virtual (refined) space
#define NONE32 UINT32_MAX
#define MAX_ATTEMPTS 16
#define MAX_SEGMENTS 8  // per root dim
#define MAX_BOXES 64    // kernels per group

// coords of a node = coef * space + off, per node dim. Entries are dims.
typedef struct imap_t {
  int32_t rank;
  int32_t unused_;
  int64_t coef[TJ_MAX_RANK][MAXV];
  int64_t off[TJ_MAX_RANK];
} imap_t;

typedef struct vbuf_t {
  uint32_t node;
  tj_kir_role_t role;
  int64_t strides[MAXV];  // dims, per virtual dim
  int64_t offset;         // dim, elements
} vbuf_t;

typedef struct memo_t {
  uint32_t node;
  uint32_t value;
  imap_t map;
} memo_t;

typedef struct lw_t {
  tj_graph_t* g;
  const tj_fusion_t* fu;
  const tj_group_t* grp;
  const tj_memplan_t* mp;
  const int64_t* sym;  // specialization values, or NULL
  tj_allocator_t al;
  tj_kir_kind_t kind;
  bool emit;
  tj_kir_t* k;
  bool* in_group;       // per node
  uint32_t* red_phase;  // per node: REDUCE phase index, or NONE32

  // Root dims, each factored into consecutive virtual dims.
  int32_t root_rank;
  int64_t root_dims[TJ_MAX_RANK];
  int32_t nfac[TJ_MAX_RANK];
  int64_t fac[TJ_MAX_RANK][MAXV];
  bool root_reduced[TJ_MAX_RANK];
  int32_t root_beg[TJ_MAX_RANK], root_end[TJ_MAX_RANK];
  // The virtual space.
  int32_t vrank;
  int64_t vdims[MAXV];
  bool vreduced[MAXV];
  bool vfixed[MAXV];  // GEMM m and n: never dropped or merged
  // Boxes (pointwise groups with pad or concat): root dim d is cut into
  // |nseg[d]| consecutive segments; each combination of segments (a box)
  // is one kernel in which every pad and concat takes one branch.
  int32_t nseg[TJ_MAX_RANK];
  int64_t seg_start[TJ_MAX_RANK][MAX_SEGMENTS];
  int64_t seg_size[TJ_MAX_RANK][MAX_SEGMENTS];
  int32_t cur_seg[TJ_MAX_RANK];
  int64_t full_dims[TJ_MAX_RANK];
  // A segmentation asked for by a pad or concat: segment cur_seg[d] of root
  // dim |segq_dim| becomes |segq_n| segments.
  bool want_segments;
  int32_t segq_dim, segq_n;
  int64_t segq_start[MAX_SEGMENTS], segq_size[MAX_SEGMENTS];
  // A refinement asked for by a reshape (applied before the next attempt).
  bool want_split;
  int32_t split_root, split_pos, split_n;
  int64_t split_dims[MAXV];
  // Facts of the first pass.
  vbuf_t bufs[TJ_KIR_MAX_BUFFERS];
  uint32_t num_bufs;
  bool index_used[MAXV];
  // The final space: final dim f covers virtual dims [fbeg, fend) (empty
  // for a size-1 dim standing for nothing).
  int32_t frank;
  int32_t fbeg[MAXV], fend[MAXV];
  int64_t fdims[MAXV];
  int32_t vfinal[MAXV];  // virtual -> final dim, -1 when dropped
  // Params of the kernel: symbolic dims.
  uint32_t num_params;
  int64_t params[TJ_KIR_MAX_PARAMS];
  // The phase being built.
  tj_kir_phase_kind_t phase;
  memo_t* memo;
  uint32_t num_memo, memo_cap;
  // Reduction facts.
  int64_t red_count;  // elements reduced per row (dim)
  // GEMM facts.
  uint32_t mm;
  int64_t gemm_k;
} lw_t;

static const tj_node_t* NODE(const lw_t* lw, uint32_t i) {
  return &lw->g->nodes[i];
}

static const char* op_name(tj_op_t op) { return tj_op_info(op)->name; }

//===--- dims ---===//

// |d| as seen by this lowering: evaluated when specializing.
static tj_status_t dnorm(lw_t* lw, int64_t d, int64_t* out) {
  if (lw->sym && d < 0) return tj_dim_eval(&lw->g->dims, d, lw->sym, out);
  *out = d;
  return NULL;
}

static tj_status_t ndim(lw_t* lw, uint32_t node, int32_t axis, int64_t* out) {
  return dnorm(lw, NODE(lw, node)->dims[axis], out);
}

static tj_status_t dmul(lw_t* lw, int64_t a, int64_t b, int64_t* out) {
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
    return tj_dim_mul(&lw->g->dims, a, b, out);
  }
  return NULL;
}

static tj_status_t dadd(lw_t* lw, int64_t a, int64_t b, int64_t* out) {
  if (a == 0) {
    *out = b;
  } else if (b == 0) {
    *out = a;
  } else if (a >= 0 && b >= 0) {
    if (tj_add_overflow_i64(a, b, out)) {
      return tj_unsupported("an index sum overflows int64");
    }
  } else {
    return tj_dim_add(&lw->g->dims, a, b, out);
  }
  return NULL;
}

// Row-major strides of |node| (dims).
static tj_status_t row_major(lw_t* lw, uint32_t node, int64_t* strides) {
  const tj_node_t* n = NODE(lw, node);
  int64_t s = 1;
  for (int32_t d = n->rank; d-- > 0;) {
    strides[d] = s;
    int64_t size;
    TJ_RETURN_IF_ERROR(ndim(lw, node, d, &size));
    TJ_RETURN_IF_ERROR(dmul(lw, s, size, &s));
  }
  return NULL;
}

// dst[i] += scale * src[i] over the virtual dims.
static tj_status_t row_axpy(lw_t* lw, int64_t* dst, int64_t scale,
                            const int64_t* src) {
  for (int32_t i = 0; i < lw->vrank; ++i) {
    if (src[i] == 0) continue;
    int64_t t;
    TJ_RETURN_IF_ERROR(dmul(lw, scale, src[i], &t));
    TJ_RETURN_IF_ERROR(dadd(lw, dst[i], t, &dst[i]));
  }
  return NULL;
}

static void map_clear(imap_t* m, int32_t rank) {
  memset(m, 0, sizeof(*m));
  m->rank = rank;
}

//===--- the kernel IR, or nothing in the first pass ---===//

static uint32_t param_of(lw_t* lw, int64_t dim) {
  for (uint32_t p = 0; p < lw->num_params; ++p) {
    if (lw->params[p] == dim) return p;
  }
  if (lw->num_params == TJ_KIR_MAX_PARAMS) return NONE32;
  char name[32];
  int32_t sym = tj_dim_as_symbol(&lw->g->dims, dim);
  if (sym >= 0) {
    snprintf(name, sizeof(name), "%s",
             tj_dim_symbol_name(&lw->g->dims, (uint32_t)sym));
  } else {
    snprintf(name, sizeof(name), "e%u", lw->num_params);
  }
  uint32_t p = tj_kir_add_param(lw->k, name);
  if (p == TJ_KIR_NONE) return NONE32;
  lw->params[lw->num_params] = dim;
  return lw->num_params++;
}

static tj_status_t ival(lw_t* lw, int64_t dim, tj_kir_ival_t* out) {
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
static tj_status_t body_dim(lw_t* lw, int64_t dim, uint32_t* out) {
  if (!lw->emit) {
    *out = 0;
    return NULL;
  }
  if (dim >= 0) {
    *out = tj_kir_const_int(lw->k, TJ_DTYPE_I64, dim);
    return NULL;
  }
  tj_kir_ival_t v;
  TJ_RETURN_IF_ERROR(ival(lw, dim, &v));
  *out = tj_kir_param(lw->k, (uint32_t)v.param);
  return NULL;
}

//===--- buffers ---===//

static tj_status_t add_buf(lw_t* lw, uint32_t node, tj_kir_role_t role,
                           const int64_t* strides, int64_t offset,
                           uint32_t* out) {
  for (uint32_t b = 0; b < lw->num_bufs; ++b) {
    const vbuf_t* v = &lw->bufs[b];
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
  vbuf_t* v = &lw->bufs[lw->num_bufs];
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
static tj_status_t compose(lw_t* lw, uint32_t node, const imap_t* map,
                           int64_t* strides, int64_t* offset) {
  int64_t ms[TJ_MAX_RANK];
  TJ_RETURN_IF_ERROR(row_major(lw, node, ms));
  for (int32_t i = 0; i < MAXV; ++i) strides[i] = 0;
  *offset = 0;
  for (int32_t j = 0; j < map->rank; ++j) {
    TJ_RETURN_IF_ERROR(row_axpy(lw, strides, ms[j], map->coef[j]));
    int64_t t;
    TJ_RETURN_IF_ERROR(dmul(lw, ms[j], map->off[j], &t));
    TJ_RETURN_IF_ERROR(dadd(lw, *offset, t, offset));
  }
  return NULL;
}

//===--- values ---===//

static tj_status_t value(lw_t* lw, uint32_t node, const imap_t* map,
                         uint32_t* out);

static bool numel_is_one(const tj_node_t* n) {
  for (int32_t d = 0; d < n->rank; ++d) {
    if (n->dims[d] != 1) return false;
  }
  return true;
}

static uint32_t const_of(lw_t* lw, tj_dtype_t dtype, const void* data) {
  if (!lw->emit) return 0;
  if (tj_dtype_is_float(dtype)) {
    return tj_kir_const_float(lw->k, dtype, tj_load_f64(dtype, data, 0));
  }
  return tj_kir_const_int(lw->k, dtype, tj_load_i64(dtype, data, 0));
}

// Loads memory-resident |node| at |map|, the coordinates of |view| (|node|
// itself, or a reshape of it: a reshape keeps the row-major order, so the
// dense storage of |node| read with |view|'s row-major strides is |view|).
static tj_status_t load_leaf(lw_t* lw, uint32_t node, uint32_t view,
                             const imap_t* map, uint32_t* out) {
  const tj_node_t* n = NODE(lw, node);
  // One-element constants (the 0.5 of gelu) become immediates.
  if (n->op == TJ_OP_CONSTANT && numel_is_one(n)) {
    *out = const_of(lw, n->dtype, n->attrs.data);
    return NULL;
  }
  int64_t strides[MAXV], offset;
  TJ_RETURN_IF_ERROR(compose(lw, view, map, strides, &offset));
  if (lw->phase == TJ_KIR_PHASE_ROW) {
    for (int32_t i = 0; i < lw->vrank; ++i) {
      if (lw->vreduced[i] && strides[i] != 0 && lw->vdims[i] != 1) {
        return tj_unsupported(
            "a per-row value reads %%%u along the reduced "
            "axes",
            node);
      }
    }
  }
  uint32_t b;
  TJ_RETURN_IF_ERROR(add_buf(lw, node, TJ_KIR_INPUT, strides, offset, &b));
  *out = lw->emit ? tj_kir_load(lw->k, b) : 0;
  return NULL;
}

static tj_status_t index_value(lw_t* lw, int32_t vdim, uint32_t* out) {
  lw->index_used[vdim] = true;
  if (!lw->emit) {
    *out = 0;
    return NULL;
  }
  int32_t f = lw->vfinal[vdim];
  *out = f < 0 ? tj_kir_const_int(lw->k, TJ_DTYPE_I64, 0)
               : tj_kir_index(lw->k, (uint32_t)f);
  return NULL;
}

static tj_status_t iota_value(lw_t* lw, uint32_t node, const imap_t* map,
                              uint32_t* out) {
  const tj_node_t* n = NODE(lw, node);
  int32_t axis = (int32_t)n->attrs.axis;
  uint32_t acc;
  TJ_RETURN_IF_ERROR(body_dim(lw, map->off[axis], &acc));
  for (int32_t i = 0; i < lw->vrank; ++i) {
    int64_t c = map->coef[axis][i];
    if (c == 0 || lw->vdims[i] == 1) continue;
    uint32_t idx;
    TJ_RETURN_IF_ERROR(index_value(lw, i, &idx));
    if (c != 1) {
      uint32_t cv;
      TJ_RETURN_IF_ERROR(body_dim(lw, c, &cv));
      if (lw->emit) idx = tj_kir_binary(lw->k, TJ_OP_MUL, idx, cv);
    }
    if (lw->emit) acc = tj_kir_binary(lw->k, TJ_OP_ADD, acc, idx);
  }
  if (lw->emit && n->dtype != TJ_DTYPE_I64) {
    acc = tj_kir_cast(lw->k, n->dtype, acc);
  }
  *out = acc;
  return NULL;
}

// The map of operand |opnd| of elementwise or broadcast_to |node| (numpy
// broadcasting: right-aligned, size-1 operand dims repeat).
static tj_status_t broadcast_map(lw_t* lw, uint32_t node, uint32_t opnd,
                                 const imap_t* map, imap_t* res) {
  const tj_node_t* n = NODE(lw, node);
  const tj_node_t* o = NODE(lw, opnd);
  map_clear(res, o->rank);
  for (int32_t j = 0; j < o->rank; ++j) {
    int32_t jj = n->rank - o->rank + j;
    if (o->dims[j] == 1 && n->dims[jj] != 1) continue;  // repeated
    memcpy(res->coef[j], map->coef[jj], sizeof(res->coef[j]));
    res->off[j] = map->off[jj];
  }
  return NULL;
}

static tj_status_t transpose_map(lw_t* lw, uint32_t node, const imap_t* map,
                                 imap_t* res) {
  const tj_node_t* n = NODE(lw, node);
  map_clear(res, n->rank);
  for (int32_t k = 0; k < n->rank; ++k) {
    int64_t p = n->attrs.ints[k];
    memcpy(res->coef[p], map->coef[k], sizeof(res->coef[p]));
    res->off[p] = map->off[k];
  }
  return NULL;
}

static tj_status_t slice_map(lw_t* lw, uint32_t node, const imap_t* map,
                             imap_t* res) {
  const tj_node_t* n = NODE(lw, node);
  const int64_t* starts = n->attrs.ints;
  // NULL for rank 0 (no NULL + 0).
  const int64_t* steps = n->rank > 0 ? n->attrs.ints + 2 * n->rank : NULL;
  map_clear(res, n->rank);
  for (int32_t d = 0; d < n->rank; ++d) {
    TJ_RETURN_IF_ERROR(row_axpy(lw, res->coef[d], steps[d], map->coef[d]));
    int64_t t;
    TJ_RETURN_IF_ERROR(dmul(lw, steps[d], map->off[d], &t));
    TJ_RETURN_IF_ERROR(dadd(lw, starts[d], t, &res->off[d]));
  }
  return NULL;
}

// Asks for virtual dim |s| to be split into |n| factors.
static tj_status_t request_split(lw_t* lw, int32_t s, int32_t n,
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
static tj_status_t reshape_map(lw_t* lw, uint32_t node, const imap_t* map,
                               imap_t* res) {
  const tj_node_t* z = NODE(lw, node);
  uint32_t yn = z->operands[0];
  const tj_node_t* y = NODE(lw, yn);
  map_clear(res, y->rank);
  int64_t zd[TJ_MAX_RANK], yd[TJ_MAX_RANK];
  int32_t zi[TJ_MAX_RANK], yi[TJ_MAX_RANK], nz = 0, ny = 0;
  for (int32_t d = 0; d < z->rank; ++d) {
    TJ_RETURN_IF_ERROR(ndim(lw, node, d, &zd[d]));
    if (zd[d] != 1) zi[nz++] = d;
  }
  for (int32_t d = 0; d < y->rank; ++d) {
    TJ_RETURN_IF_ERROR(ndim(lw, yn, d, &yd[d]));
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
        TJ_RETURN_IF_ERROR(
            tj_dim_div_exact(&lw->g->dims, pz, py, &q, &y_divides));
        if (!y_divides) {
          TJ_RETURN_IF_ERROR(
              tj_dim_div_exact(&lw->g->dims, py, pz, &q, &z_divides));
        }
      }
      // Neither product divides the other ([5,B] vs [B,5]): grow a side
      // anyway; the group then covers both and may still pair up.
      if (!y_divides && !z_divides) {
        y_divides = c < ny && (pz < 0 || a >= nz);
        z_divides = !y_divides;
      }
      if (y_divides && c < ny) {
        TJ_RETURN_IF_ERROR(dmul(lw, py, yd[yi[c++]], &py));
      } else if (z_divides && a < nz) {
        TJ_RETURN_IF_ERROR(dmul(lw, pz, zd[zi[a++]], &pz));
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
      TJ_RETURN_IF_ERROR(dmul(lw, suffix, map->off[d], &s));
      TJ_RETURN_IF_ERROR(dadd(lw, loff, s, &loff));
      TJ_RETURN_IF_ERROR(dmul(lw, suffix, zd[d], &suffix));
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
      TJ_RETURN_IF_ERROR(dmul(lw, ysuf, yd[yi[t]], &ysuf));
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
static tj_status_t request_segments(lw_t* lw, int32_t d, int32_t n,
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
static tj_status_t pick_segment(lw_t* lw, const imap_t* map, int32_t a,
                                int32_t n, const int64_t* starts,
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

static tj_status_t concat_value(lw_t* lw, uint32_t node, const imap_t* map,
                                uint32_t* out) {
  const tj_node_t* n = NODE(lw, node);
  int32_t a = (int32_t)n->attrs.axis;
  int32_t k = (int32_t)n->num_operands;
  if (k > MAX_SEGMENTS) {
    return tj_unsupported("concat of more than %d values", MAX_SEGMENTS);
  }
  int64_t starts[MAX_SEGMENTS], sizes[MAX_SEGMENTS], total = 0;
  for (int32_t i = 0; i < k; ++i) {
    starts[i] = total;
    TJ_RETURN_IF_ERROR(ndim(lw, n->operands[i], a, &sizes[i]));
    TJ_RETURN_IF_ERROR(dadd(lw, total, sizes[i], &total));
  }
  int32_t i;
  TJ_RETURN_IF_ERROR(pick_segment(lw, map, a, k, starts, sizes, total, &i));
  imap_t sub = *map;
  TJ_RETURN_IF_ERROR(dsub(map->off[a], starts[i], &sub.off[a]));
  return value(lw, n->operands[i], &sub, out);
}

static tj_status_t pad_value(lw_t* lw, uint32_t node, const imap_t* map,
                             uint32_t* out) {
  const tj_node_t* n = NODE(lw, node);
  const int64_t* low = n->attrs.ints;
  // NULL for rank 0 (no NULL + 0).
  const int64_t* high = n->rank > 0 ? n->attrs.ints + n->rank : NULL;
  imap_t sub = *map;
  for (int32_t a = 0; a < n->rank; ++a) {
    if (low[a] == 0 && high[a] == 0) continue;
    int64_t inner, total;
    TJ_RETURN_IF_ERROR(ndim(lw, n->operands[0], a, &inner));
    TJ_RETURN_IF_ERROR(ndim(lw, node, a, &total));
    int64_t starts[3] = {0, low[a], 0}, sizes[3] = {low[a], inner, high[a]};
    TJ_RETURN_IF_ERROR(dadd(lw, low[a], inner, &starts[2]));
    int32_t i;
    TJ_RETURN_IF_ERROR(pick_segment(lw, map, a, 3, starts, sizes, total, &i));
    if (i != 1) {  // the padding: a constant
      if (!lw->emit) {
        *out = 0;
        return NULL;
      }
      unsigned char data[16] = {0};
      tj_store_f64(n->dtype, data, 0, n->attrs.value);
      *out = const_of(lw, n->dtype, data);
      return NULL;
    }
    TJ_RETURN_IF_ERROR(dsub(map->off[a], low[a], &sub.off[a]));
  }
  return value(lw, n->operands[0], &sub, out);
}

static tj_kir_reduce_t reduce_of(tj_op_t op) {
  switch (op) {
    case TJ_OP_MAX:
      return TJ_KIR_REDUCE_MAX;
    case TJ_OP_MIN:
      return TJ_KIR_REDUCE_MIN;
    case TJ_OP_PROD:
      return TJ_KIR_REDUCE_PROD;
    case TJ_OP_ARGMAX:
      return TJ_KIR_REDUCE_ARGMAX;
    default:
      return TJ_KIR_REDUCE_SUM;
  }
}

static bool is_reduction(tj_op_t op) {
  return tj_op_info(op)->kind == TJ_OP_KIND_REDUCTION;
}

// The row result of reduction |node| (a mean divides by the count).
static tj_status_t row_value(lw_t* lw, uint32_t node, uint32_t* out) {
  uint32_t phase = lw->red_phase[node];
  if (phase == NONE32) {
    return tj_internal("lower: %%%u is read before its reduction ran", node);
  }
  if (!lw->emit) {
    *out = 0;
    return NULL;
  }
  const tj_node_t* n = NODE(lw, node);
  uint32_t v = tj_kir_row(lw->k, phase);
  if (n->op != TJ_OP_MEAN) {
    *out = v;
    return NULL;
  }
  tj_dtype_t ct = n->dtype == TJ_DTYPE_F64 ? TJ_DTYPE_F64 : TJ_DTYPE_F32;
  if (ct != n->dtype) v = tj_kir_cast(lw->k, ct, v);
  uint32_t count;
  if (lw->red_count >= 0) {
    count = tj_kir_const_float(lw->k, ct, (double)lw->red_count);
  } else {
    TJ_RETURN_IF_ERROR(body_dim(lw, lw->red_count, &count));
    count = tj_kir_cast(lw->k, ct, count);
  }
  v = tj_kir_binary(lw->k, TJ_OP_DIV, v, count);
  if (ct != n->dtype) v = tj_kir_cast(lw->k, n->dtype, v);
  *out = v;
  return NULL;
}

static tj_status_t compute(lw_t* lw, uint32_t node, const imap_t* map,
                           uint32_t* out) {
  const tj_node_t* n = NODE(lw, node);
  tj_kir_t* k = lw->k;
  imap_t sub;
  uint32_t a, b, c;
  switch (n->op) {
    case TJ_OP_FULL: {
      if (!lw->emit) {
        *out = 0;
        return NULL;
      }
      unsigned char data[16] = {0};
      tj_store_f64(n->dtype, data, 0, n->attrs.value);
      *out = const_of(lw, n->dtype, data);
      return NULL;
    }
    case TJ_OP_IOTA:
      return iota_value(lw, node, map, out);
    case TJ_OP_TRANSPOSE:
      TJ_RETURN_IF_ERROR(transpose_map(lw, node, map, &sub));
      return value(lw, n->operands[0], &sub, out);
    case TJ_OP_SLICE:
      TJ_RETURN_IF_ERROR(slice_map(lw, node, map, &sub));
      return value(lw, n->operands[0], &sub, out);
    case TJ_OP_BROADCAST_TO:
      TJ_RETURN_IF_ERROR(broadcast_map(lw, node, n->operands[0], map, &sub));
      return value(lw, n->operands[0], &sub, out);
    case TJ_OP_RESHAPE: {
      // Reshapes of a value in memory are views of its storage.
      uint32_t root = n->operands[0];
      while (lw->in_group[root] && NODE(lw, root)->op == TJ_OP_RESHAPE) {
        root = NODE(lw, root)->operands[0];
      }
      if (!lw->in_group[root]) return load_leaf(lw, root, node, map, out);
      TJ_RETURN_IF_ERROR(reshape_map(lw, node, map, &sub));
      return value(lw, n->operands[0], &sub, out);
    }
    case TJ_OP_CONCAT:
      return concat_value(lw, node, map, out);
    case TJ_OP_PAD:
      return pad_value(lw, node, map, out);
    case TJ_OP_MATMUL:
      if (lw->kind != TJ_KIR_GEMM || node != lw->mm) break;
      *out = lw->emit ? tj_kir_acc(k) : 0;
      // The accumulator is f32; a half matmul's value is rounded to its
      // dtype (the reference's semantics) before the epilogue uses it.
      if (lw->emit && n->dtype != TJ_DTYPE_F32) {
        *out = tj_kir_cast(k, n->dtype, *out);
      }
      return NULL;
    case TJ_OP_WHERE:
      TJ_RETURN_IF_ERROR(broadcast_map(lw, node, n->operands[0], map, &sub));
      TJ_RETURN_IF_ERROR(value(lw, n->operands[0], &sub, &a));
      TJ_RETURN_IF_ERROR(broadcast_map(lw, node, n->operands[1], map, &sub));
      TJ_RETURN_IF_ERROR(value(lw, n->operands[1], &sub, &b));
      TJ_RETURN_IF_ERROR(broadcast_map(lw, node, n->operands[2], map, &sub));
      TJ_RETURN_IF_ERROR(value(lw, n->operands[2], &sub, &c));
      *out = lw->emit ? tj_kir_where(k, a, b, c) : 0;
      return NULL;
    default:
      break;
  }
  if (is_reduction(n->op) && lw->kind == TJ_KIR_ROW_REDUCE) {
    return row_value(lw, node, out);
  }
  tj_op_kind_t kind = tj_op_info(n->op)->kind;
  if (kind == TJ_OP_KIND_UNARY) {
    TJ_RETURN_IF_ERROR(broadcast_map(lw, node, n->operands[0], map, &sub));
    TJ_RETURN_IF_ERROR(value(lw, n->operands[0], &sub, &a));
    if (!lw->emit) {
      *out = 0;
    } else if (n->op == TJ_OP_CAST) {
      *out = tj_kir_cast(k, n->dtype, a);
    } else {
      *out = tj_kir_unary(k, n->op, a);
    }
    return NULL;
  }
  if (kind == TJ_OP_KIND_BINARY) {
    TJ_RETURN_IF_ERROR(broadcast_map(lw, node, n->operands[0], map, &sub));
    TJ_RETURN_IF_ERROR(value(lw, n->operands[0], &sub, &a));
    TJ_RETURN_IF_ERROR(broadcast_map(lw, node, n->operands[1], map, &sub));
    TJ_RETURN_IF_ERROR(value(lw, n->operands[1], &sub, &b));
    *out = lw->emit ? tj_kir_binary(k, n->op, a, b) : 0;
    return NULL;
  }
  return tj_unsupported("%s (%%%u) inside a fused kernel", op_name(n->op),
                        node);
}

static tj_status_t value(lw_t* lw, uint32_t node, const imap_t* map,
                         uint32_t* out) {
  for (uint32_t i = 0; i < lw->num_memo; ++i) {
    const memo_t* m = &lw->memo[i];
    if (m->node == node && memcmp(&m->map, map, sizeof(*map)) == 0) {
      *out = m->value;
      return NULL;
    }
  }
  uint32_t v;
  if (lw->in_group[node]) {
    TJ_RETURN_IF_ERROR(compute(lw, node, map, &v));
  } else {
    TJ_RETURN_IF_ERROR(load_leaf(lw, node, node, map, &v));
  }
  if (lw->emit && lw->k->error) return tj_status_clone(lw->k->error);
  if (lw->num_memo == lw->memo_cap) {
    uint32_t cap = lw->memo_cap ? lw->memo_cap * 2 : 16;
    memo_t* grown = tj_realloc(lw->al, lw->memo, sizeof(memo_t) * lw->memo_cap,
                               sizeof(memo_t) * cap);
    if (!grown) return tj_status_oom();
    lw->memo = grown;
    lw->memo_cap = cap;
  }
  memo_t* m = &lw->memo[lw->num_memo++];
  m->node = node;
  m->value = v;
  m->map = *map;
  *out = v;
  return NULL;
}

static tj_status_t store(lw_t* lw, uint32_t node, const imap_t* map) {
  uint32_t v;
  TJ_RETURN_IF_ERROR(value(lw, node, map, &v));
  int64_t strides[MAXV], offset;
  TJ_RETURN_IF_ERROR(compose(lw, node, map, strides, &offset));
  uint32_t b;
  TJ_RETURN_IF_ERROR(add_buf(lw, node, TJ_KIR_OUTPUT, strides, offset, &b));
  if (lw->emit) tj_kir_store(lw->k, b, v);
  return NULL;
}

// Stores every output of the group at |map|: all values first, then the
// stores. An output may take an input's memory in place (memplan.c), so at
// a point no load may follow a store: storing the first output before
// computing the second would make the second read what the first wrote.
static tj_status_t store_outputs(lw_t* lw, const imap_t* map) {
  for (uint32_t j = 0; j < lw->grp->num_outputs; ++j) {
    uint32_t v;
    TJ_RETURN_IF_ERROR(value(lw, lw->grp->outputs[j], map, &v));
  }
  for (uint32_t j = 0; j < lw->grp->num_outputs; ++j) {
    TJ_RETURN_IF_ERROR(store(lw, lw->grp->outputs[j], map));
  }
  return NULL;
}

//===--- spaces ---===//

static void build_virtual(lw_t* lw, const int32_t* order) {
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
static tj_status_t root_map(lw_t* lw, imap_t* map) {
  map_clear(map, lw->root_rank);
  for (int32_t d = 0; d < lw->root_rank; ++d) {
    map->off[d] = lw->seg_start[d][lw->cur_seg[d]];  // the box's corner
    int64_t suffix = 1;
    for (int32_t i = lw->root_end[d]; i-- > lw->root_beg[d];) {
      if (lw->vdims[i] != 1) map->coef[d][i] = suffix;
      TJ_RETURN_IF_ERROR(dmul(lw, suffix, lw->vdims[i], &suffix));
    }
  }
  return NULL;
}

static bool mergeable(lw_t* lw, int32_t i, int32_t j, int64_t* tmp,
                      tj_status_t* status) {
  if (lw->index_used[i] || lw->index_used[j]) return false;
  for (uint32_t b = 0; b < lw->num_bufs; ++b) {
    const vbuf_t* v = &lw->bufs[b];
    *status = dmul(lw, lw->vdims[j], v->strides[j], tmp);
    if (*status) return false;
    if (v->strides[i] != *tmp) return false;
  }
  return true;
}

static tj_status_t add_final(lw_t* lw, int32_t beg, int32_t end) {
  int32_t f = lw->frank++;
  lw->fbeg[f] = beg;
  lw->fend[f] = end;
  int64_t size = 1;
  for (int32_t i = beg; i < end; ++i) {
    lw->vfinal[i] = f;
    TJ_RETURN_IF_ERROR(dmul(lw, size, lw->vdims[i], &size));
  }
  lw->fdims[f] = size;
  return NULL;
}

// Groups the kept virtual dims in [beg, end) (kept[] lists them) into final
// dims, merging neighbours where allowed; |must| makes a failure to merge
// all of them an error.
static tj_status_t merge_run(lw_t* lw, const int32_t* kept, int32_t count,
                             bool allow, bool must) {
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

static tj_status_t decide_space(lw_t* lw) {
  lw->frank = 0;
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
    for (int32_t t = 0; t < no; ++t) {
      TJ_RETURN_IF_ERROR(add_final(lw, outer[t], outer[t] + 1));
    }
    return NULL;
  }
  TJ_RETURN_IF_ERROR(merge_run(lw, outer, no, true, false));
  if (lw->kind == TJ_KIR_ROW_REDUCE) {
    if (nr > 1) {
      for (int32_t t = 0; t < nr; ++t) {
        if (lw->index_used[red[t]]) {
          return tj_unsupported("iota along one of several reduced axes");
        }
      }
    }
    if (nr == 0) {
      int32_t f = lw->frank++;
      lw->fbeg[f] = lw->fend[f] = 0;
      lw->fdims[f] = 1;
    } else {
      TJ_RETURN_IF_ERROR(merge_run(lw, red, nr, true, true));
    }
  } else if (lw->frank == 0) {
    int32_t f = lw->frank++;
    lw->fbeg[f] = lw->fend[f] = 0;
    lw->fdims[f] = 1;
  }
  return NULL;
}

static int64_t final_stride(const lw_t* lw, const vbuf_t* v, int32_t f) {
  if (lw->fend[f] == lw->fbeg[f]) return 0;
  return v->strides[lw->fend[f] - 1];
}

//===--- the templates ---===//

static void begin_phase(lw_t* lw, tj_kir_phase_kind_t kind,
                        tj_kir_reduce_t reduce) {
  lw->phase = kind;
  lw->num_memo = 0;
  if (lw->emit && lw->kind == TJ_KIR_ROW_REDUCE) {
    tj_kir_begin_phase(lw->k, kind, reduce);
  }
}

static bool same_dims(lw_t* lw, uint32_t node, int32_t rank,
                      const int64_t* dims) {
  const tj_node_t* n = NODE(lw, node);
  if (n->rank != rank) return false;
  for (int32_t d = 0; d < rank; ++d) {
    int64_t v;
    if (dnorm(lw, n->dims[d], &v) || v != dims[d]) return false;
  }
  return true;
}

static tj_status_t body_pointwise(lw_t* lw) {
  imap_t map;
  TJ_RETURN_IF_ERROR(root_map(lw, &map));
  begin_phase(lw, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM);
  return store_outputs(lw, &map);
}

static tj_status_t body_reduce(lw_t* lw) {
  imap_t fmap, keep, flat;
  TJ_RETURN_IF_ERROR(root_map(lw, &fmap));
  keep = fmap;
  map_clear(&flat, 0);
  for (int32_t d = 0; d < lw->root_rank; ++d) {
    if (lw->root_reduced[d]) {
      memset(keep.coef[d], 0, sizeof(keep.coef[d]));
    } else {
      memcpy(flat.coef[flat.rank], fmap.coef[d], sizeof(fmap.coef[d]));
      flat.off[flat.rank++] = fmap.off[d];
    }
  }
  const tj_group_t* grp = lw->grp;
  uint32_t phase = 0;
  for (uint32_t j = 0; j < grp->num_nodes; ++j) {
    uint32_t r = grp->nodes[j];
    const tj_node_t* n = NODE(lw, r);
    if (!is_reduction(n->op)) continue;
    begin_phase(lw, TJ_KIR_PHASE_REDUCE, reduce_of(n->op));
    uint32_t v;
    TJ_RETURN_IF_ERROR(value(lw, n->operands[0], &fmap, &v));
    if (lw->emit) tj_kir_yield(lw->k, v);
    lw->red_phase[r] = phase++;
  }
  bool any_full = false, any_row = false;
  for (uint32_t j = 0; j < grp->num_outputs; ++j) {
    bool full = same_dims(lw, grp->outputs[j], lw->root_rank, lw->full_dims);
    any_full |= full;
    any_row |= !full;
  }
  if (any_full) {
    begin_phase(lw, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM);
    for (uint32_t j = 0; j < grp->num_outputs; ++j) {
      uint32_t o = grp->outputs[j];
      if (!same_dims(lw, o, lw->root_rank, lw->full_dims)) continue;
      TJ_RETURN_IF_ERROR(store(lw, o, &fmap));
    }
  }
  if (any_row) {
    begin_phase(lw, TJ_KIR_PHASE_ROW, TJ_KIR_REDUCE_SUM);
    for (uint32_t j = 0; j < grp->num_outputs; ++j) {
      uint32_t o = grp->outputs[j];
      if (same_dims(lw, o, lw->root_rank, lw->full_dims)) continue;
      const tj_node_t* n = NODE(lw, o);
      const imap_t* map = n->rank == keep.rank   ? &keep
                          : n->rank == flat.rank ? &flat
                                                 : NULL;
      if (!map) {
        return tj_unsupported(
            "output %%%u is shaped like neither the "
            "reduction's input nor its result",
            o);
      }
      TJ_RETURN_IF_ERROR(store(lw, o, map));
    }
  }
  return NULL;
}

// |node|'s storage seen through at most one in-group transpose: the node in
// memory and the strides over |node|'s coordinates.
static tj_status_t operand_view(lw_t* lw, uint32_t node, uint32_t* out_base,
                                int64_t* strides) {
  if (!lw->in_group[node]) {
    *out_base = node;
    return row_major(lw, node, strides);
  }
  const tj_node_t* n = NODE(lw, node);
  if (n->op != TJ_OP_TRANSPOSE || lw->in_group[n->operands[0]]) {
    return tj_unsupported("matmul operand %%%u is computed in the kernel",
                          node);
  }
  int64_t ms[TJ_MAX_RANK];
  *out_base = n->operands[0];
  TJ_RETURN_IF_ERROR(row_major(lw, *out_base, ms));
  for (int32_t k = 0; k < n->rank; ++k) strides[k] = ms[n->attrs.ints[k]];
  return NULL;
}

static tj_status_t gemm_operands(lw_t* lw) {
  const tj_node_t* mm = NODE(lw, lw->mm);
  uint32_t an = mm->operands[0], bn = mm->operands[1];
  const tj_node_t* a = NODE(lw, an);
  const tj_node_t* b = NODE(lw, bn);
  bool half = a->dtype == b->dtype &&
              (a->dtype == TJ_DTYPE_F16 || a->dtype == TJ_DTYPE_BF16);
  if ((a->dtype != TJ_DTYPE_F32 || b->dtype != TJ_DTYPE_F32) && !half) {
    return tj_unsupported(
        "matmul %%%u is %s; the gemm template takes f32, f16 or bf16", lw->mm,
        tj_dtype_name(a->dtype));
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
      TJ_RETURN_IF_ERROR(dmul(lw, start[i], va[i], &t));
      TJ_RETURN_IF_ERROR(dadd(lw, aoff, t, &aoff));
    }
    if (i != nb) {  // batch and n: B
      TJ_RETURN_IF_ERROR(dmul(lw, start[i], vb[i], &t));
      TJ_RETURN_IF_ERROR(dadd(lw, boff, t, &boff));
    }
  }
  uint32_t idx;
  TJ_RETURN_IF_ERROR(add_buf(lw, abase, TJ_KIR_GEMM_A, va, aoff, &idx));
  TJ_RETURN_IF_ERROR(add_buf(lw, bbase, TJ_KIR_GEMM_B, vb, boff, &idx));
  return ndim(lw, an, a->rank - 1, &lw->gemm_k);
}

static tj_status_t body_gemm(lw_t* lw) {
  TJ_RETURN_IF_ERROR(gemm_operands(lw));
  imap_t map;
  TJ_RETURN_IF_ERROR(root_map(lw, &map));
  begin_phase(lw, TJ_KIR_PHASE_MAP, TJ_KIR_REDUCE_SUM);
  return store_outputs(lw, &map);
}

static tj_status_t body(lw_t* lw) {
  switch (lw->kind) {
    case TJ_KIR_POINTWISE:
      return body_pointwise(lw);
    case TJ_KIR_ROW_REDUCE:
      return body_reduce(lw);
    case TJ_KIR_GEMM:
      return body_gemm(lw);
  }
  return tj_internal("lower: bad template");
}

//===--- roots ---===//

static tj_status_t setup_root(lw_t* lw) {
  const tj_group_t* grp = lw->grp;
  memset(lw->root_reduced, 0, sizeof(lw->root_reduced));
  switch (grp->kind) {
    case TJ_GROUP_POINTWISE: {
      lw->kind = TJ_KIR_POINTWISE;
      uint32_t a = grp->anchor;
      lw->root_rank = NODE(lw, a)->rank;
      for (int32_t d = 0; d < lw->root_rank; ++d) {
        TJ_RETURN_IF_ERROR(ndim(lw, a, d, &lw->root_dims[d]));
      }
      return NULL;
    }
    case TJ_GROUP_REDUCTION:
    case TJ_GROUP_OPAQUE: {
      const tj_node_t* r = NODE(lw, grp->anchor);
      if (grp->kind == TJ_GROUP_OPAQUE && r->op != TJ_OP_ARGMAX) {
        return tj_unsupported("%s has no kernel template", op_name(r->op));
      }
      lw->kind = TJ_KIR_ROW_REDUCE;
      uint32_t in = r->operands[0];
      lw->root_rank = NODE(lw, in)->rank;
      for (int32_t d = 0; d < lw->root_rank; ++d) {
        TJ_RETURN_IF_ERROR(ndim(lw, in, d, &lw->root_dims[d]));
      }
      lw->red_count = 1;
      // argmax keeps its one normalized axis in attrs.axis.
      bool argmax = r->op == TJ_OP_ARGMAX;
      uint32_t num_axes = argmax ? 1 : r->attrs.num_ints;
      for (uint32_t k = 0; k < num_axes; ++k) {
        int64_t ax = argmax ? r->attrs.axis : r->attrs.ints[k];
        lw->root_reduced[ax] = true;
        TJ_RETURN_IF_ERROR(
            dmul(lw, lw->red_count, lw->root_dims[ax], &lw->red_count));
      }
      return NULL;
    }
    case TJ_GROUP_MATMUL: {
      lw->kind = TJ_KIR_GEMM;
      lw->mm = grp->anchor;
      const tj_node_t* mm = NODE(lw, lw->mm);
      if (mm->op != TJ_OP_MATMUL) return tj_internal("lower: bad gemm anchor");
      lw->root_rank = mm->rank;
      for (int32_t d = 0; d < lw->root_rank; ++d) {
        TJ_RETURN_IF_ERROR(ndim(lw, lw->mm, d, &lw->root_dims[d]));
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
static void setup_virtual(lw_t* lw) {
  int32_t order[TJ_MAX_RANK], n = 0;
  for (int32_t d = 0; d < lw->root_rank; ++d) {
    if (!lw->root_reduced[d]) order[n++] = d;
  }
  for (int32_t d = 0; d < lw->root_rank; ++d) {
    if (lw->root_reduced[d]) order[n++] = d;
  }
  if (lw->kind != TJ_KIR_GEMM) {
    build_virtual(lw, order);
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
static tj_status_t check_in_place(lw_t* lw) {
  if (!lw->mp) return NULL;
  for (uint32_t o = 0; o < lw->num_bufs; ++o) {
    const vbuf_t* out = &lw->bufs[o];
    if (out->role != TJ_KIR_OUTPUT) continue;
    uint32_t bi = lw->mp->buffer_of[out->node];
    if (bi == UINT32_MAX) continue;
    uint32_t in = lw->mp->buffers[bi].in_place_of;
    if (in == TJ_NODE_NONE) continue;
    for (uint32_t b = 0; b < lw->num_bufs; ++b) {
      const vbuf_t* v = &lw->bufs[b];
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

//===--- driver ---===//

static tj_status_t build_kernel(lw_t* lw, const char* name,
                                tj_lowered_kernel_t* out) {
  lw->num_params = 0;
  TJ_RETURN_IF_ERROR(tj_kir_create(lw->al, lw->kind, name, &lw->k));
  tj_kir_ival_t dims[MAXV];
  for (int32_t f = 0; f < lw->frank; ++f) {
    TJ_RETURN_IF_ERROR(ival(lw, lw->fdims[f], &dims[f]));
  }
  tj_kir_ival_t strides[TJ_KIR_MAX_BUFFERS][MAXV];
  for (uint32_t b = 0; b < lw->num_bufs; ++b) {
    for (int32_t f = 0; f < lw->frank; ++f) {
      TJ_RETURN_IF_ERROR(
          ival(lw, final_stride(lw, &lw->bufs[b], f), &strides[b][f]));
    }
  }
  tj_kir_ival_t kdim = tj_kir_constant(0);
  if (lw->kind == TJ_KIR_GEMM) TJ_RETURN_IF_ERROR(ival(lw, lw->gemm_k, &kdim));
  tj_kir_set_space(lw->k, lw->frank, dims);
  for (uint32_t b = 0; b < lw->num_bufs; ++b) {
    const vbuf_t* v = &lw->bufs[b];
    char bname[32];
    snprintf(bname, sizeof(bname), "%s%u_%u",
             v->role == TJ_KIR_OUTPUT ? "out" : "in", v->node, b);
    tj_kir_add_buffer(lw->k, bname, NODE(lw, v->node)->dtype, v->role,
                      strides[b]);
    out->buffer_nodes[b] = v->node;
    out->buffer_offsets[b] = v->offset;
  }
  out->num_buffers = lw->num_bufs;
  if (lw->kind == TJ_KIR_GEMM) {
    tj_kir_set_gemm(lw->k, kdim, NULL);
    lw->k->allow_half_gemm = true;  // every GEMM template takes them
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
  memcpy(out->params, lw->params, sizeof(int64_t) * lw->num_params);
  out->nonempty_node = NONE32;
  const tj_node_t* anchor = NODE(lw, lw->grp->anchor);
  if (anchor->op == TJ_OP_ARGMAX) {
    out->nonempty_node = lw->grp->anchor;
    out->nonempty_dim = lw->red_count;
  }
  out->kernel = lw->k;
  lw->k = NULL;
  return NULL;
}

// Advances the box odometer; false after the last box.
static bool next_box(lw_t* lw) {
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

static void apply_segments(lw_t* lw) {
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

static void apply_split(lw_t* lw) {
  int32_t d = lw->split_root, p = lw->split_pos, n = lw->split_n;
  int32_t tail = lw->nfac[d] - p - 1;
  memmove(&lw->fac[d][p + n], &lw->fac[d][p + 1],
          sizeof(int64_t) * (size_t)tail);
  memcpy(&lw->fac[d][p], lw->split_dims, sizeof(int64_t) * (size_t)n);
  lw->nfac[d] += n - 1;
}

// One box: the first pass, then (no request) the space and the kernel.
static tj_status_t lower_box(lw_t* lw, const char* name,
                             tj_lowered_kernel_t* out) {
  for (int32_t d = 0; d < lw->root_rank; ++d) {
    lw->root_dims[d] = lw->seg_size[d][lw->cur_seg[d]];
    if (lw->nseg[d] > 1) lw->fac[d][0] = lw->root_dims[d];
  }
  setup_virtual(lw);
  if (lw->vrank > MAXV) return tj_unsupported("the space has too many dims");
  lw->emit = false;
  lw->num_bufs = 0;
  memset(lw->index_used, 0, sizeof(lw->index_used));
  for (uint32_t i = 0; i < lw->g->num_nodes; ++i) lw->red_phase[i] = NONE32;
  TJ_RETURN_IF_ERROR(body(lw));
  TJ_RETURN_IF_ERROR(check_in_place(lw));
  TJ_RETURN_IF_ERROR(decide_space(lw));
  return build_kernel(lw, name, out);
}

static tj_status_t lower(lw_t* lw, const char* name, tj_lowered_kernel_t* outs,
                         uint32_t max_out, uint32_t* count) {
  *count = 0;
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
      // does not empty it: its rows still store the identity.
      bool empty = false;
      for (int32_t d = 0; d < lw->root_rank; ++d) {
        empty |= !lw->root_reduced[d] && lw->seg_size[d][lw->cur_seg[d]] == 0;
      }
      if (empty) continue;
      if (*count == max_out || *count == MAX_BOXES) {
        free_outputs(outs, count);
        return tj_unsupported("pad or concat needs more than %u kernels",
                              *count);
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

tj_status_t tj_lower_group(tj_graph_t* graph, const tj_fusion_t* fusion,
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
  lw_t* lw = tj_alloc(allocator, sizeof(lw_t));
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
  tj_status_t status = NULL;
  if (!lw->in_group || !lw->red_phase) {
    status = tj_status_oom();
  } else {
    for (uint32_t j = 0; j < lw->grp->num_nodes; ++j) {
      lw->in_group[lw->grp->nodes[j]] = true;
    }
    status = lower(lw, name, out, max_out, out_count);
  }
  tj_kir_destroy(lw->k);
  tj_free(allocator, lw->memo, sizeof(memo_t) * lw->memo_cap);
  tj_free(allocator, lw->in_group, lw->in_group ? sizeof(bool) * n : 0);
  tj_free(allocator, lw->red_phase, lw->red_phase ? sizeof(uint32_t) * n : 0);
  tj_free(allocator, lw, sizeof(lw_t));
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
  memset(lowered, 0, sizeof(*lowered));
}
