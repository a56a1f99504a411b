// lib/dd_ops.c: the built-in ops whose output dims depend on the data
// (issue 15): nonzero, compress, unique and non-max suppression; and range
// with run-time inputs (ops15b), whose length is a value symbol instead.
//
// Each needs exactly one step whose size only the data decides; that step
// is a custom node of an op every context has (tj_dd_builtin_find, looked
// up before the context's own registry, so no registration and no
// allocation), and takes the data-dependent-dims path of custom ops
// (tj_custom_dynamic_dim): memory planned at the upper bound, the host
// kernel reports the actual size, the later kernels run generic at it, no
// recompile. Everything else is written with core ops that fuse:
//   nonzero(x)         i64 [rank, NZ]: the host kernel (tj_nonzero).
//   compress(x, c)     gather(x, reshape(nonzero(c), [K]), axis).
//   unique(x)          the host kernel gives the first index of each
//                      distinct slice along the axis (tj_unique, sorted or
//                      in order of appearance); y = gather(x, first);
//                      rep[i] = min k with all_r(x[i, r] == x[k, r]),
//                      inverse[i] = sum_j j * (first[j] == rep[i]),
//                      counts[j] = sum_i (first[j] == rep[i]): compares
//                      and reductions over [A, A, R] and [A, U].
//   nms(boxes, ...)    the host kernel (tj_nms), [K, 3] triples.
// The host kernels use no memory beyond their output: an output planned at
// the bound is large enough to be their scratch (see each), so a run
// allocates nothing for them and the OOM sweep has nothing to find here.

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lib/custom_op.h"
#include "lib/dtype.h"
#include "tensorjit/tj_graph.h"

//===--- element helpers ---===//

// Whether element |i| of |t| is not zero: any bit set but a float's sign
// bit (-0.0 is zero, NaN is not), for every dtype alike.
static bool is_nonzero(const tj_tensor_t* t, int64_t i) {
  size_t size = tj_dtype_size(t->dtype);
  const unsigned char* p =
      (const unsigned char*)t->data + t->byte_offset + (size_t)i * size;
  bool fl = tj_dtype_is_float(t->dtype) || t->dtype == TJ_DTYPE_F8E4M3 ||
            t->dtype == TJ_DTYPE_F8E5M2;
  unsigned char any = 0;
  for (size_t b = 0; b < size; ++b) {
    // Little-endian: the sign bit is the top bit of the last byte.
    unsigned char m = fl && b + 1 == size ? 0x7f : 0xff;
    any |= p[b] & m;
  }
  return any != 0;
}

// NULL stays NULL: an empty tensor may have no data (offsetting NULL is
// undefined, and clang's UBSan stops on it).
static const void* data_of(const tj_tensor_t* t) {
  if (!t->data) return NULL;
  return (const unsigned char*)t->data + t->byte_offset;
}

// A total order of elements of one dtype: integers exactly (u64 unsigned),
// floats as numpy.unique sorts them (NaNs last and equal to each other).
static int compare_elem(tj_dtype_t dt, const void* d, int64_t a, int64_t b) {
  if (tj_dtype_is_int(dt) || dt == TJ_DTYPE_BOOL) {
    int64_t x = tj_load_i64(dt, d, a), y = tj_load_i64(dt, d, b);
    if (dt == TJ_DTYPE_U64) return (uint64_t)x < (uint64_t)y ? -1 : x != y;
    return x < y ? -1 : x > y;
  }
  double x = tj_load_f64(dt, d, a), y = tj_load_f64(dt, d, b);
  bool nx = isnan(x), ny = isnan(y);
  if (nx || ny) return nx == ny ? 0 : nx ? 1 : -1;
  return x < y ? -1 : x > y;
}

//===--- tj_nonzero: i64 [max(rank, 1), NZ], bound numel ---===//

static int64_t dd_symbol(tj_graph_t* g, const char* what,
                         const tj_custom_attrs_t* at, int64_t bound) {
  char name[64];
  snprintf(name, sizeof(name), "%s_%lld", what,
           (long long)(at->num_ints > 0 ? at->ints[0] : 0));
  return tj_custom_dynamic_dim(g, name, bound);
}

static int64_t numel_dim(tj_graph_t* g, const tj_custom_type_t* t) {
  int64_t n = 1;
  for (int32_t k = 0; k < t->rank; ++k) n = tj_graph_dim_mul(g, n, t->dims[k]);
  return n;
}

static tj_status_t nonzero_shape(void* user, tj_graph_t* g,
                                 const tj_custom_type_t* in, int32_t n,
                                 const tj_custom_attrs_t* at,
                                 tj_custom_type_t* out) {
  (void)user;
  (void)n;
  out->dtype = TJ_DTYPE_I64;
  out->rank = 2;
  out->dims[0] = in[0].rank > 0 ? in[0].rank : 1;
  out->dims[1] = dd_symbol(g, "nonzero", at, numel_dim(g, &in[0]));
  return NULL;
}

static tj_status_t nonzero_host(void* user, const tj_tensor_t* in, int32_t n,
                                const tj_custom_attrs_t* at,
                                const tj_tensor_t* out) {
  (void)user;
  (void)n;
  (void)at;
  const tj_tensor_t* x = &in[0];
  int64_t numel = 1;
  for (int32_t k = 0; k < x->rank; ++k) numel *= x->shape[k];
  int64_t count = 0;
  for (int64_t i = 0; i < numel; ++i) count += is_nonzero(x, i);
  // Row k of the [rows, count] result holds axis k's coordinates.
  int64_t* y = out->data;
  int32_t rows = x->rank > 0 ? x->rank : 1;
  int64_t j = 0;
  for (int64_t i = 0; i < numel; ++i) {
    if (!is_nonzero(x, i)) continue;
    int64_t rest = i;
    for (int32_t k = x->rank - 1; k >= 0; --k) {
      y[k * count + j] = rest % x->shape[k];
      rest /= x->shape[k];
    }
    if (x->rank == 0) y[j] = 0;
    ++j;
  }
  int64_t dims[2] = {rows, count};
  return tj_custom_set_output_shape(out, 2, dims);
}

//===--- tj_unique: i64 [U], the first row of each distinct row of [A, R]
//---===//

typedef struct rows_t {
  tj_dtype_t dtype;
  const void* data;
  int64_t width;  // R
} rows_t;

// Rows |a| and |b| in lexicographic order (numpy.unique with an axis).
static int compare_rows(const rows_t* r, int64_t a, int64_t b) {
  for (int64_t k = 0; k < r->width; ++k) {
    int c = compare_elem(r->dtype, r->data, a * r->width + k, b * r->width + k);
    if (c) return c;
  }
  return 0;
}

// The order of the sort: rows (|r| non-NULL) then index, or index alone.
static bool before(const rows_t* r, int64_t a, int64_t b) {
  int c = r ? compare_rows(r, a, b) : 0;
  return c ? c < 0 : a < b;
}

static void sift_down(const rows_t* r, int64_t* v, int64_t root, int64_t n) {
  for (;;) {
    int64_t child = 2 * root + 1;
    if (child >= n) return;
    if (child + 1 < n && before(r, v[child], v[child + 1])) ++child;
    if (!before(r, v[root], v[child])) return;
    int64_t t = v[root];
    v[root] = v[child];
    v[child] = t;
    root = child;
  }
}

// Heapsort in place: the output buffer is the only memory there is, and
// the index tie-break makes the order total, so stability is not needed.
static void heap_sort(const rows_t* r, int64_t* v, int64_t n) {
  for (int64_t i = n / 2; i-- > 0;) sift_down(r, v, i, n);
  for (int64_t end = n; end-- > 1;) {
    int64_t t = v[0];
    v[0] = v[end];
    v[end] = t;
    sift_down(r, v, 0, end);
  }
}

static tj_status_t unique_shape(void* user, tj_graph_t* g,
                                const tj_custom_type_t* in, int32_t n,
                                const tj_custom_attrs_t* at,
                                tj_custom_type_t* out) {
  (void)user;
  (void)n;
  if (in[0].rank != 2)
    return tj_invalid("unique: the rows operand has rank %d, not 2",
                      (int)in[0].rank);
  out->dtype = TJ_DTYPE_I64;
  out->rank = 1;
  out->dims[0] = dd_symbol(g, "unique", at, in[0].dims[0]);
  return NULL;
}

static tj_status_t unique_host(void* user, const tj_tensor_t* in, int32_t n,
                               const tj_custom_attrs_t* at,
                               const tj_tensor_t* out) {
  (void)user;
  (void)n;
  const tj_tensor_t* x = &in[0];
  bool sorted = at->num_ints > 1 && at->ints[1] != 0;
  rows_t r = {x->dtype, data_of(x), x->shape[1]};
  int64_t rows = x->shape[0];
  int64_t* v = out->data;
  for (int64_t i = 0; i < rows; ++i) v[i] = i;
  heap_sort(&r, v, rows);
  // Equal rows are adjacent, lowest index first: keep that one.
  int64_t u = 0;
  for (int64_t i = 0; i < rows; ++i) {
    if (u > 0 && compare_rows(&r, v[u - 1], v[i]) == 0) continue;
    v[u++] = v[i];
  }
  if (!sorted) heap_sort(NULL, v, u);  // order of first appearance
  return tj_custom_set_output_shape(out, 1, &u);
}

//===--- tj_nms: i64 [K, 3] (batch, class, box), bound B * C * N ---===//

static tj_status_t nms_shape(void* user, tj_graph_t* g,
                             const tj_custom_type_t* in, int32_t n,
                             const tj_custom_attrs_t* at,
                             tj_custom_type_t* out) {
  (void)user;
  (void)n;
  const tj_custom_type_t *boxes = &in[0], *scores = &in[1];
  if (boxes->rank != 3 || scores->rank != 3)
    return tj_invalid(
        "non_max_suppression: boxes has rank %d and scores rank %d, both "
        "must be 3 ([batch, boxes, 4] and [batch, classes, boxes])",
        (int)boxes->rank, (int)scores->rank);
  if (!tj_dtype_is_float(boxes->dtype) || !tj_dtype_is_float(scores->dtype))
    return tj_invalid("non_max_suppression: boxes and scores must be floats");
  if (boxes->dims[2] != 4)
    return tj_invalid("non_max_suppression: boxes' last dim is not 4");
  if (boxes->dims[0] != scores->dims[0] || boxes->dims[1] != scores->dims[2])
    return tj_invalid(
        "non_max_suppression: boxes [batch, boxes, 4] and scores [batch, "
        "classes, boxes] disagree on batch or boxes");
  for (int32_t i = 2; i < 5; ++i) {
    int64_t one = 1;
    for (int32_t k = 0; k < in[i].rank; ++k) one = in[i].dims[k] == 1 ? one : 0;
    if (one != 1)
      return tj_invalid(
          "non_max_suppression: input %d (%s) must hold one element", (int)i,
          i == 2   ? "max_output_boxes_per_class"
          : i == 3 ? "iou_threshold"
                   : "score_threshold");
  }
  if (!tj_dtype_is_int(in[2].dtype) || !tj_dtype_is_float(in[3].dtype) ||
      !tj_dtype_is_float(in[4].dtype))
    return tj_invalid(
        "non_max_suppression: max_output_boxes_per_class must be an integer, "
        "the thresholds floats");
  int64_t bound = tj_graph_dim_mul(
      g, tj_graph_dim_mul(g, boxes->dims[0], scores->dims[1]), boxes->dims[1]);
  out->dtype = TJ_DTYPE_I64;
  out->rank = 2;
  out->dims[0] = dd_symbol(g, "nms", at, bound);
  out->dims[1] = 3;
  return NULL;
}

typedef struct nms_t {
  tj_dtype_t dtype;   // of the boxes: f32 math rounds each step to float,
  const void* boxes;  // as ONNX's reference (numpy float32) does
  bool center;
} nms_t;

static double rnd(const nms_t* s, double x) {
  return s->dtype == TJ_DTYPE_F64 ? x : (double)(float)x;
}

// ONNX's suppress_by_iou for boxes |a| and |b| (element offsets).
static bool suppresses(const nms_t* s, int64_t a, int64_t b, double iou) {
  double p[4], q[4];
  for (int k = 0; k < 4; ++k) {
    p[k] = tj_load_f64(s->dtype, s->boxes, a + k);
    q[k] = tj_load_f64(s->dtype, s->boxes, b + k);
  }
  double x1lo, x1hi, x2lo, x2hi, y1lo, y1hi, y2lo, y2hi;
  if (!s->center) {
    x1lo = fmin(p[1], p[3]), x1hi = fmax(p[1], p[3]);
    x2lo = fmin(q[1], q[3]), x2hi = fmax(q[1], q[3]);
    y1lo = fmin(p[0], p[2]), y1hi = fmax(p[0], p[2]);
    y2lo = fmin(q[0], q[2]), y2hi = fmax(q[0], q[2]);
  } else {
    double pw = rnd(s, p[2] / 2), ph = rnd(s, p[3] / 2);
    double qw = rnd(s, q[2] / 2), qh = rnd(s, q[3] / 2);
    x1lo = rnd(s, p[0] - pw), x1hi = rnd(s, p[0] + pw);
    x2lo = rnd(s, q[0] - qw), x2hi = rnd(s, q[0] + qw);
    y1lo = rnd(s, p[1] - ph), y1hi = rnd(s, p[1] + ph);
    y2lo = rnd(s, q[1] - qh), y2hi = rnd(s, q[1] + qh);
  }
  double ixlo = fmax(x1lo, x2lo), ixhi = fmin(x1hi, x2hi);
  if (ixhi <= ixlo) return false;
  double iylo = fmax(y1lo, y2lo), iyhi = fmin(y1hi, y2hi);
  if (iyhi <= iylo) return false;
  double inter = rnd(s, rnd(s, ixhi - ixlo) * rnd(s, iyhi - iylo));
  if (inter <= 0) return false;
  double a1 = rnd(s, rnd(s, x1hi - x1lo) * rnd(s, y1hi - y1lo));
  double a2 = rnd(s, rnd(s, x2hi - x2lo) * rnd(s, y2hi - y2lo));
  double uni = rnd(s, rnd(s, a1 + a2) - inter);
  if (a1 <= 0 || a2 <= 0 || uni <= 0) return false;
  return rnd(s, inter / uni) > iou;
}

static tj_status_t nms_host(void* user, const tj_tensor_t* in, int32_t n,
                            const tj_custom_attrs_t* at,
                            const tj_tensor_t* out) {
  (void)user;
  (void)n;
  nms_t s = {in[0].dtype, data_of(&in[0]), at->num_ints > 1 && at->ints[1]};
  bool has_score = at->num_ints > 2 && at->ints[2] != 0;
  const tj_tensor_t* scores = &in[1];
  int64_t batches = in[0].shape[0], boxes = in[0].shape[1];
  int64_t classes = scores->shape[1];
  int64_t max_out = tj_load_i64(in[2].dtype, data_of(&in[2]), 0);
  double iou = tj_load_f64(in[3].dtype, data_of(&in[3]), 0);
  double thr = tj_load_f64(in[4].dtype, data_of(&in[4]), 0);
  if (max_out < 0) max_out = 0;
  int64_t* y = out->data;
  // The output (B*C*N rows of 3) is the only memory: a class's kept boxes
  // are its rows written so far, and its candidates sit in the last N
  // entries. Rows are written before the candidates only in the last
  // class, and the row for candidate i ends at most at entry i of them
  // (3 (B C - 1) N + 3 i + 2 < 3 B C N - N + i + 1 while i < N), which
  // holds candidate i itself, read before the row is written.
  int64_t* cand = y ? y + batches * classes * boxes * 3 - boxes : NULL;
  int64_t k = 0;
  const void* sc = data_of(scores);
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t c = 0; c < classes; ++c) {
      int64_t row = (b * classes + c) * boxes, m = 0, first = k;
      for (int64_t i = 0; i < boxes; ++i) {
        if (!has_score || tj_load_f64(scores->dtype, sc, row + i) > thr)
          cand[m++] = i;
      }
      // Highest score first, the lower index on ties (insertion sort:
      // the candidates of one class, stable).
      for (int64_t i = 1; i < m; ++i) {
        int64_t v = cand[i];
        double sv = tj_load_f64(scores->dtype, sc, row + v);
        int64_t j = i;
        while (j > 0 &&
               tj_load_f64(scores->dtype, sc, row + cand[j - 1]) < sv) {
          cand[j] = cand[j - 1];
          --j;
        }
        cand[j] = v;
      }
      for (int64_t i = 0; i < m && k - first < max_out; ++i) {
        int64_t v = cand[i];
        int64_t box = (b * boxes + v) * 4;
        bool ok = true;
        for (int64_t j = first; ok && j < k; ++j)
          ok = !suppresses(&s, box, (b * boxes + y[3 * j + 2]) * 4, iou);
        if (!ok) continue;
        y[3 * k] = b;
        y[3 * k + 1] = c;
        y[3 * k + 2] = v;
        ++k;
      }
    }
  }
  int64_t dims[2] = {k, 3};
  return tj_custom_set_output_shape(out, 2, dims);
}

//===--- tj_range: [L] of start + i * delta, L read before the run ---===//

// The length is not data-dependent in the custom ops' sense (no host step
// sets it mid-run, no bound): it is a value symbol (tj_custom_value_dim),
// computed from the three scalars when the run binds its symbols
// (tj_dd_bind_values), so memory is planned at it and every kernel after
// runs at it like at a dim an input binds. The node's host kernel only
// writes the values.

static tj_status_t range_shape(void* user, tj_graph_t* g,
                               const tj_custom_type_t* in, int32_t n,
                               const tj_custom_attrs_t* at,
                               tj_custom_type_t* out) {
  (void)user;
  (void)n;
  char name[64];
  snprintf(name, sizeof(name), "range_%lld",
           (long long)(at->num_ints > 0 ? at->ints[0] : 0));
  out->dtype = in[0].dtype;
  out->rank = 1;
  out->dims[0] = tj_custom_value_dim(g, name);
  return NULL;
}

// Element 0 of a one-element tensor, as f64 and exactly as i64.
static double first_f64(const tj_tensor_t* t) {
  return tj_load_f64(t->dtype, data_of(t), 0);
}
static int64_t first_i64(const tj_tensor_t* t) {
  return tj_load_i64(t->dtype, data_of(t), 0);
}

// start + i * delta as the importer folds a constant Range: integers in
// wrapping int64 arithmetic, f32 (and f16, bf16, rounded from it) in f32
// steps, f64 in f64.
static tj_status_t range_host(void* user, const tj_tensor_t* in, int32_t n,
                              const tj_custom_attrs_t* at,
                              const tj_tensor_t* out) {
  (void)user;
  (void)n;
  const tj_dtype_t dt = out->dtype;
  const int64_t len = out->shape[0];
  if (at->num_ints > 1 && at->ints[1] == 1) {
    // A running sum (ONNX Loop's prev + delta), each step in the dtype.
    unsigned char prev[8];
    memcpy(prev, data_of(&in[0]), tj_dtype_size(dt));
    for (int64_t i = 0; i < len; ++i) {
      if (tj_dtype_is_int(dt)) {
        int64_t v = tj_load_i64(dt, prev, 0);
        tj_store_i64(dt, out->data, i, v);
        tj_store_i64(dt, prev, 0,
                     (int64_t)((uint64_t)v + (uint64_t)first_i64(&in[2])));
      } else {
        double v = tj_load_f64(dt, prev, 0);
        tj_store_f64(dt, out->data, i, v);
        tj_store_f64(dt, prev, 0, v + first_f64(&in[2]));
      }
    }
    return NULL;
  }
  if (tj_dtype_is_int(dt)) {
    const uint64_t start = (uint64_t)first_i64(&in[0]);
    const uint64_t delta = (uint64_t)first_i64(&in[2]);
    for (int64_t i = 0; i < len; ++i)
      tj_store_i64(dt, out->data, i, (int64_t)(start + (uint64_t)i * delta));
  } else if (dt == TJ_DTYPE_F64) {
    const double start = first_f64(&in[0]), delta = first_f64(&in[2]);
    for (int64_t i = 0; i < len; ++i)
      tj_store_f64(dt, out->data, i, start + (double)i * delta);
  } else {
    const float start = (float)first_f64(&in[0]);
    const float delta = (float)first_f64(&in[2]);
    for (int64_t i = 0; i < len; ++i)
      tj_store_f64(dt, out->data, i, (double)(start + (float)i * delta));
  }
  return NULL;
}

// ceil((limit - start) / delta), at least 0, of one range node's scalars
// (|v| as f64, |iv| exactly for integer dtypes); |what| names the node.
static tj_status_t range_length(tj_dtype_t dt, const double* v,
                                const int64_t* iv, uint32_t index,
                                int64_t* out) {
  *out = 0;
  if (tj_dtype_is_int(dt)) {
    const int64_t start = iv[0], limit = iv[1], delta = iv[2];
    if (delta == 0) return tj_invalid("range (node %%%u): delta is 0", index);
    // |limit - start| and |delta| in uint64: exact for any int64s.
    uint64_t span, step;
    if (delta > 0) {
      if (limit <= start) return NULL;
      span = (uint64_t)limit - (uint64_t)start;
      step = (uint64_t)delta;
    } else {
      if (limit >= start) return NULL;
      span = (uint64_t)start - (uint64_t)limit;
      step = (uint64_t)0 - (uint64_t)delta;
    }
    uint64_t len = span / step + (span % step != 0);
    if (len > (uint64_t)INT64_MAX / 2)
      return tj_invalid("range (node %%%u): %llu elements", index,
                        (unsigned long long)len);
    *out = (int64_t)len;
    return NULL;
  }
  if (v[2] == 0) return tj_invalid("range (node %%%u): delta is 0", index);
  const double len = ceil((v[1] - v[0]) / v[2]);
  if (isnan(len) && (isnan(v[0]) || isnan(v[1]) || isnan(v[2])))
    return tj_invalid("range (node %%%u): start, limit or delta is NaN", index);
  if (!(len > 0)) return NULL;
  // Beyond 2^48 elements no tensor fits (check_node_sizes says so).
  if (!(len < 0x1p50))
    return tj_invalid("range (node %%%u): %g elements", index, len);
  *out = (int64_t)len;
  return NULL;
}

static bool is_range(const tj_node_t* n) {
  return n->op == TJ_OP_CUSTOM && n->attrs.name &&
         strcmp(n->attrs.name, "tj_range") == 0;
}

// The scalar expressions a range's operands may be, evaluated on the host
// when a run binds its symbols: graph inputs and constants through casts,
// reshapes and scalar arithmetic (ONNX's expanded Range computes its trip
// count so). Each value is kept as its dtype's bytes and each op rounds to
// its dtype as the reference interpreter does (floats in f64 then stored,
// integers in wrapping int64, a cast from a float through f64).
enum { kScalarDepth = 32 };

typedef struct scalar_t {
  tj_dtype_t dtype;
  unsigned char bits[8];
} scalar_t;

static bool numel_one(const tj_node_t* n) {
  for (int32_t k = 0; k < n->rank; ++k)
    if (n->dims[k] != 1) return false;
  return true;
}

static bool scalar_op(tj_op_t op) {
  switch (op) {
    case TJ_OP_INPUT:
    case TJ_OP_CONSTANT:
    case TJ_OP_FULL:
    case TJ_OP_CAST:
    case TJ_OP_RESHAPE:
    case TJ_OP_BROADCAST_TO:
    case TJ_OP_NEG:
    case TJ_OP_ABS:
    case TJ_OP_CEIL:
    case TJ_OP_FLOOR:
    case TJ_OP_RELU:
    case TJ_OP_ADD:
    case TJ_OP_SUB:
    case TJ_OP_MUL:
    case TJ_OP_DIV:
    case TJ_OP_MAXIMUM:
    case TJ_OP_MINIMUM:
      return true;
    default:
      return false;
  }
}

// The first node of the expression rooted at |id| that is not a scalar of
// scalar_op's ops (so the length cannot be computed before the run), or
// TJ_NODE_NONE.
static uint32_t scalar_expr_blocker(const tj_graph_t* g, uint32_t id,
                                    int depth) {
  const tj_node_t* n = &g->nodes[id];
  if (depth > kScalarDepth || !numel_one(n) || !scalar_op(n->op) ||
      tj_dtype_is_narrow(n->dtype))
    return id;
  for (uint32_t k = 0; k < n->num_operands; ++k) {
    uint32_t bad = scalar_expr_blocker(g, n->operands[k], depth + 1);
    if (bad != TJ_NODE_NONE) return bad;
  }
  return TJ_NODE_NONE;
}

static double sf64(const scalar_t* v) {
  return tj_load_f64(v->dtype, v->bits, 0);
}
static int64_t si64(const scalar_t* v) {
  return tj_load_i64(v->dtype, v->bits, 0);
}

static double binary_f64(tj_op_t op, double a, double b) {
  switch (op) {
    case TJ_OP_ADD:
      return a + b;
    case TJ_OP_SUB:
      return a - b;
    case TJ_OP_MUL:
      return a * b;
    case TJ_OP_DIV:
      return a / b;
    case TJ_OP_MAXIMUM:
      return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
    default:  // minimum
      return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
  }
}

static int64_t binary_i64(tj_op_t op, tj_dtype_t dt, int64_t a, int64_t b) {
  const uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
  const bool u64 = dt == TJ_DTYPE_U64;
  switch (op) {
    case TJ_OP_ADD:
      return (int64_t)(ua + ub);
    case TJ_OP_SUB:
      return (int64_t)(ua - ub);
    case TJ_OP_MUL:
      return (int64_t)(ua * ub);
    case TJ_OP_DIV:  // truncating; x / 0 = 0
      if (b == 0) return 0;
      if (u64) return (int64_t)(ua / ub);
      if (a == INT64_MIN && b == -1) return a;
      return a / b;
    case TJ_OP_MAXIMUM:
      return (u64 ? ua > ub : a > b) ? a : b;
    default:  // minimum
      return (u64 ? ua < ub : a < b) ? a : b;
  }
}

static tj_status_t eval_scalar(const tj_graph_t* g, uint32_t id,
                               const tj_tensor_t* inputs, uint32_t range,
                               scalar_t* out) {
  const tj_node_t* n = &g->nodes[id];
  memset(out, 0, sizeof(*out));
  out->dtype = n->dtype;
  const size_t es = tj_dtype_size(n->dtype);
  scalar_t a, b;
  switch (n->op) {
    case TJ_OP_CONSTANT:
      memcpy(out->bits, n->attrs.data, es);
      return NULL;
    case TJ_OP_FULL:
      tj_store_f64(n->dtype, out->bits, 0, n->attrs.value);
      return NULL;
    case TJ_OP_INPUT: {
      uint32_t j = 0;
      while (j < g->num_inputs && g->inputs[j] != id) ++j;
      if (j == g->num_inputs)
        return tj_internal("range (node %%%u): node %%%u is no input", range,
                           id);
      const tj_tensor_t* t = &inputs[j];
      if (t->device_type != TJ_DEVICE_CPU)
        return tj_status_make(
            TJ_STATUS_UNSUPPORTED,
            "range (node %%%u): its length is read from input \"%s\" on the "
            "host before the run; give it as a CPU tensor",
            range, n->attrs.name);
      memcpy(out->bits, data_of(t), es);
      return NULL;
    }
    default:
      break;
  }
  if (!scalar_op(n->op) || n->num_operands < 1)
    return tj_internal("range (node %%%u): node %%%u (%s) is no scalar op",
                       range, id, tj_op_info(n->op)->name);
  TJ_RETURN_IF_ERROR(eval_scalar(g, n->operands[0], inputs, range, &a));
  const bool fl = tj_dtype_is_float(n->dtype);
  if (n->num_operands >= 2) {
    TJ_RETURN_IF_ERROR(eval_scalar(g, n->operands[1], inputs, range, &b));
    if (fl)
      tj_store_f64(n->dtype, out->bits, 0,
                   binary_f64(n->op, sf64(&a), sf64(&b)));
    else
      tj_store_i64(n->dtype, out->bits, 0,
                   binary_i64(n->op, n->dtype, si64(&a), si64(&b)));
    return NULL;
  }
  switch (n->op) {
    case TJ_OP_RESHAPE:
    case TJ_OP_BROADCAST_TO:
      *out = a;
      return NULL;
    case TJ_OP_CAST:
      // As the reference: from a float (or u64 to a float) through f64.
      if (tj_dtype_is_float(a.dtype) ||
          (a.dtype == TJ_DTYPE_U64 && tj_dtype_is_float(n->dtype)))
        tj_store_f64(n->dtype, out->bits, 0, sf64(&a));
      else
        tj_store_i64(n->dtype, out->bits, 0, si64(&a));
      return NULL;
    default:
      break;
  }
  if (fl) {
    double x = sf64(&a), r;
    switch (n->op) {
      case TJ_OP_NEG:
        r = -x;
        break;
      case TJ_OP_ABS:
        r = fabs(x);
        break;
      case TJ_OP_CEIL:
        r = ceil(x);
        break;
      case TJ_OP_FLOOR:
        r = floor(x);
        break;
      default:  // relu: NaN stays NaN
        r = x < 0 ? 0.0 : x;
        break;
    }
    tj_store_f64(n->dtype, out->bits, 0, r);
    return NULL;
  }
  int64_t x = si64(&a), r = x;
  switch (n->op) {
    case TJ_OP_NEG:
      r = (int64_t)((uint64_t)0 - (uint64_t)x);
      break;
    case TJ_OP_ABS:
      r = x < 0 && !tj_dtype_is_unsigned(n->dtype) ? (int64_t)(0 - (uint64_t)x)
                                                   : x;
      break;
    case TJ_OP_RELU:
      r = x < 0 && !tj_dtype_is_unsigned(n->dtype) ? 0 : x;
      break;
    default:  // ceil, floor: integers are whole
      break;
  }
  tj_store_i64(n->dtype, out->bits, 0, r);
  return NULL;
}

tj_status_t tj_dd_bind_values(const tj_graph_t* graph,
                              const tj_tensor_t* inputs, bool read,
                              int64_t* sym) {
  const tj_dimtab_t* tab = &graph->dims;
  if (!tab->value_symbols) return NULL;
  for (uint32_t i = 0; i < graph->num_nodes; ++i) {
    const tj_node_t* n = &graph->nodes[i];
    if (!is_range(n) || n->rank != 1 || n->num_operands != 3) continue;
    int32_t s = tj_dim_as_symbol(tab, n->dims[0]);
    if (s < 0 || !(tab->value_symbols >> s & 1u)) continue;
    if (!read) {
      sym[s] = 0;
      continue;
    }
    scalar_t v[3];
    for (uint32_t k = 0; k < 3; ++k)
      TJ_RETURN_IF_ERROR(eval_scalar(graph, n->operands[k], inputs, i, &v[k]));
    int64_t len;
    // attrs.ints is [3, id, mode, 0] (tj_custom_attrs_of's layout).
    if (n->attrs.num_ints > 2 && n->attrs.ints[0] >= 2 &&
        n->attrs.ints[2] == 1) {
      // A count (ONNX Loop's trip count), at least 0.
      int64_t count =
          tj_dtype_is_float(v[1].dtype) ? (int64_t)sf64(&v[1]) : si64(&v[1]);
      len = count > 0 ? count : 0;
      if (len > (int64_t)1 << 50)
        return tj_invalid("range (node %%%u): %lld elements", i,
                          (long long)len);
    } else {
      const double fv[3] = {sf64(&v[0]), sf64(&v[1]), sf64(&v[2])};
      const int64_t iv[3] = {si64(&v[0]), si64(&v[1]), si64(&v[2])};
      TJ_RETURN_IF_ERROR(range_length(n->dtype, fv, iv, i, &len));
    }
    sym[s] = len;
  }
  return NULL;
}

//===--- the built-in table ---===//

#define BUILTIN(nm, inputs, sh, ho)                                \
  {                                                                \
      .name = (char*)(nm),                                         \
      .version = 1,                                                \
      .num_inputs = (inputs),                                      \
      .flags = TJ_CUSTOM_OP_PURE | TJ_CUSTOM_OP_CONTIGUOUS_INPUTS, \
      .shape = (sh),                                               \
      .host = (ho),                                                \
  }

static const tj_custom_op_t kBuiltins[] = {
    BUILTIN("tj_nonzero", 1, nonzero_shape, nonzero_host),
    BUILTIN("tj_unique", 1, unique_shape, unique_host),
    BUILTIN("tj_nms", 5, nms_shape, nms_host),
    BUILTIN("tj_range", 3, range_shape, range_host),
};

const tj_custom_op_t* tj_dd_builtin_find(const char* name, size_t length,
                                         int32_t version) {
  for (size_t i = 0; i < sizeof(kBuiltins) / sizeof(kBuiltins[0]); ++i) {
    const tj_custom_op_t* op = &kBuiltins[i];
    if (strlen(op->name) == length && memcmp(op->name, name, length) == 0 &&
        (version == 0 || version == op->version))
      return op;
  }
  return NULL;
}

//===--- builders ---===//

// The custom node of built-in |op|, its symbol numbered after the node.
static tj_value_t dd_node(tj_graph_t* g, const char* op, const tj_value_t* in,
                          int32_t n, int64_t a, int64_t b) {
  int64_t ints[3] = {(int64_t)g->num_nodes, a, b};
  tj_custom_attrs_t at = {3, ints, 0, NULL};
  return tj_graph_custom(g, op, in, n, &at);
}

static bool live(const tj_graph_t* g) { return g && !g->error; }

#define FAIL(g, ...) tj_graph_record_error((g), tj_invalid(__VA_ARGS__))

tj_value_t tj_graph_nonzero(tj_graph_t* graph, tj_value_t x) {
  if (!live(graph)) return tj_value_none();
  return dd_node(graph, "tj_nonzero", &x, 1, 0, 0);
}

static tj_value_t flat(tj_graph_t* g, tj_value_t x) {
  int64_t infer = TJ_DIM_INFER;
  return tj_graph_reshape(g, x, 1, &infer);
}

tj_value_t tj_graph_compress(tj_graph_t* graph, tj_value_t x,
                             tj_value_t condition, bool has_axis,
                             int32_t axis) {
  if (!live(graph)) return tj_value_none();
  tj_graph_t* g = graph;
  int32_t rank = tj_graph_value_rank(g, x);
  if (tj_graph_value_rank(g, condition) != 1) {
    FAIL(g, "compress: the condition has rank %d, not 1",
         (int)tj_graph_value_rank(g, condition));
    return tj_value_none();
  }
  if (has_axis && (axis < -rank || axis >= rank)) {
    FAIL(g, "compress: axis %d is outside [-%d, %d)", (int)axis, (int)rank,
         (int)rank);
    return tj_value_none();
  }
  if (!has_axis) {
    x = flat(g, x);
    axis = 0;
  } else if (axis < 0) {
    axis += rank;
  }
  int64_t xd[TJ_MAX_RANK], cd[1];
  tj_graph_value_dims(g, x, xd);
  tj_graph_value_dims(g, condition, cd);
  // A condition longer than the axis selects only within it (ONNX); a
  // shorter one leaves the rest out.
  if (cd[0] >= 0 && xd[axis] >= 0 && cd[0] > xd[axis]) {
    int64_t start = 0, stop = xd[axis];
    condition = tj_graph_slice(g, condition, &start, &stop, NULL);
  } else if (cd[0] != xd[axis] && (cd[0] < 0 || xd[axis] < 0)) {
    FAIL(g,
         "compress: the condition's length and the axis are not "
         "comparable (symbolic); give them equal");
    return tj_value_none();
  }
  tj_value_t idx = tj_graph_nonzero(g, condition);
  return tj_graph_gather(g, x, flat(g, idx), axis);
}

tj_value_t tj_graph_unique(tj_graph_t* graph, tj_value_t x, bool has_axis,
                           int32_t axis, bool sorted, tj_value_t* out_indices,
                           tj_value_t* out_inverse, tj_value_t* out_counts) {
  if (out_indices) *out_indices = tj_value_none();
  if (out_inverse) *out_inverse = tj_value_none();
  if (out_counts) *out_counts = tj_value_none();
  if (!live(graph)) return tj_value_none();
  tj_graph_t* g = graph;
  int32_t rank = tj_graph_value_rank(g, x);
  if (has_axis && (axis < -rank || axis >= rank)) {
    FAIL(g, "unique: axis %d is outside [-%d, %d)", (int)axis, (int)rank,
         (int)rank);
    return tj_value_none();
  }
  // The slices along the axis as the rows of [A, R].
  tj_value_t src = x;
  if (!has_axis) {
    src = flat(g, x);
    axis = 0;
  } else if (axis < 0) {
    axis += rank;
  }
  int32_t perm[TJ_MAX_RANK], r = tj_graph_value_rank(g, src);
  perm[0] = axis;
  for (int32_t k = 0, j = 1; k < r; ++k)
    if (k != axis) perm[j++] = k;
  int64_t sd[TJ_MAX_RANK];
  tj_graph_value_dims(g, src, sd);
  int64_t width = 1;
  for (int32_t k = 0; k < r; ++k)
    if (k != axis) width = tj_graph_dim_mul(g, width, sd[k]);
  int64_t shape2[2] = {sd[axis], width};
  tj_value_t rows = tj_graph_reshape(
      g, r > 1 ? tj_graph_transpose(g, src, perm) : src, 2, shape2);
  tj_value_t first = dd_node(g, "tj_unique", &rows, 1, sorted ? 1 : 0, 0);
  if (!live(g)) return tj_value_none();
  tj_value_t y = tj_graph_gather(g, src, first, axis);
  if (out_indices) *out_indices = first;
  if (!out_inverse && !out_counts) return y;
  // same[i, k] = all_r (row i == row k), NaN equal to NaN as in the host
  // kernel; rep[i] = the lowest k with same[i, k] (row i's first
  // occurrence), and inverse[i] = the j with first[j] == rep[i]. Rows are
  // compared with rows, never with a gather of them: a reduction whose
  // prologue reads a gathered row is a graph break.
  int64_t a = shape2[0], u;
  tj_graph_value_dims(g, first, &u);
  int64_t a3[3] = {a, 1, width}, b3[3] = {1, a, width};
  tj_value_t ra = tj_graph_reshape(g, rows, 3, a3);
  tj_value_t rb = tj_graph_reshape(g, rows, 3, b3);
  tj_value_t eq = tj_graph_eq(g, ra, rb);
  tj_dtype_t dt = tj_graph_value_dtype(g, x);
  if (tj_dtype_is_float(dt))
    eq = tj_graph_logical_or(
        g, eq,
        tj_graph_logical_and(g, tj_graph_isnan(g, ra), tj_graph_isnan(g, rb)));
  int32_t last = 2, one = 1, zero = 0;
  tj_value_t same = tj_graph_min(g, eq, 1, &last, false);  // [A, A]
  int64_t aa[2] = {a, a}, a1[2] = {a, 1}, u1[2] = {1, u}, au[2] = {a, u};
  tj_value_t k = tj_graph_iota(g, TJ_DTYPE_I64, 2, aa, 1);
  tj_value_t none = tj_graph_scalar(g, TJ_DTYPE_I64, (double)INT32_MAX);
  tj_value_t rep = tj_graph_reshape(
      g, tj_graph_min(g, tj_graph_where(g, same, k, none), 1, &one, false), 2,
      a1);
  tj_value_t hit = tj_graph_eq(g, rep, tj_graph_reshape(g, first, 2, u1));
  tj_value_t j = tj_graph_iota(g, TJ_DTYPE_I64, 2, au, 1);
  tj_value_t inverse = tj_graph_sum(
      g, tj_graph_where(g, hit, j, tj_graph_scalar(g, TJ_DTYPE_I64, 0)), 1,
      &one, false);
  if (out_inverse) *out_inverse = inverse;
  if (out_counts) {
    // counts[j] = the rows whose first occurrence is first[j].
    *out_counts =
        tj_graph_sum(g, tj_graph_cast(g, hit, TJ_DTYPE_I64), 1, &zero, false);
  }
  return y;
}

// The dtypes ONNX's Range takes, and the 8-bit ints.
static bool range_dtype(tj_dtype_t dt) {
  return tj_dtype_is_float(dt) || dt == TJ_DTYPE_I8 || dt == TJ_DTYPE_I16 ||
         dt == TJ_DTYPE_I32 || dt == TJ_DTYPE_I64;
}

// A range node: |mode| 0 (start, limit, delta), 1 (start, count, delta).
static tj_value_t range_node(tj_graph_t* g, const char* what, tj_value_t start,
                             tj_value_t second, tj_value_t delta, int mode) {
  if (!live(g)) return tj_value_none();
  const char* const names[3] = {"start", mode ? "count" : "limit", "delta"};
  const tj_value_t in[3] = {start, second, delta};
  tj_dtype_t dt = TJ_DTYPE_F32;
  for (int k = 0; k < 3; ++k) {
    if (in[k].id == 0 || in[k].id > g->num_nodes) {
      FAIL(g, "%s: %s is not a value of graph @%s", what, names[k], g->name);
      return tj_value_none();
    }
    const tj_node_t* n = &g->nodes[in[k].id - 1];
    if (n->rank > 1 || (n->rank == 1 && n->dims[0] != 1)) {
      FAIL(g, "%s: %s has %d dims, not a scalar", what, names[k], (int)n->rank);
      return tj_value_none();
    }
    if (k == 0) dt = n->dtype;
    if (k == 1 && mode == 1) {
      if (n->dtype != TJ_DTYPE_I64 && n->dtype != TJ_DTYPE_I32) {
        FAIL(g, "%s: count is %s, not i64 or i32", what,
             tj_dtype_name(n->dtype));
        return tj_value_none();
      }
    } else if (n->dtype != dt) {
      FAIL(g, "%s: %s is %s but start is %s", what, names[k],
           tj_dtype_name(n->dtype), tj_dtype_name(dt));
      return tj_value_none();
    }
    uint32_t bad = scalar_expr_blocker(g, in[k].id - 1, 0);
    if (bad != TJ_NODE_NONE) {
      tj_graph_record_error(
          g, tj_status_make(
                 TJ_STATUS_UNSUPPORTED,
                 "%s: %s must be a constant or a scalar computed from "
                 "graph inputs and constants (casts, reshapes, scalar "
                 "arithmetic), since the length is computed before the "
                 "run; it depends on node %%%u (%s%s)",
                 what, names[k], bad, tj_op_info(g->nodes[bad].op)->name,
                 numel_one(&g->nodes[bad]) ? "" : ", not a scalar"));
      return tj_value_none();
    }
  }
  if (!range_dtype(dt)) {
    FAIL(g, "%s: needs a float or signed integer dtype, got %s", what,
         tj_dtype_name(dt));
    return tj_value_none();
  }
  return dd_node(g, "tj_range", in, 3, mode, 0);
}

tj_value_t tj_graph_range(tj_graph_t* graph, tj_value_t start, tj_value_t limit,
                          tj_value_t delta) {
  return range_node(graph, "range", start, limit, delta, 0);
}

tj_value_t tj_graph_range_count(tj_graph_t* graph, tj_value_t start,
                                tj_value_t count, tj_value_t delta) {
  return range_node(graph, "range_count", start, count, delta, 1);
}

tj_value_t tj_graph_non_max_suppression(tj_graph_t* graph, tj_value_t boxes,
                                        tj_value_t scores,
                                        tj_value_t max_output_boxes_per_class,
                                        tj_value_t iou_threshold,
                                        tj_value_t score_threshold,
                                        bool center_point_box) {
  if (!live(graph)) return tj_value_none();
  tj_graph_t* g = graph;
  bool has_score = !tj_value_is_none(score_threshold);
  tj_value_t in[5] = {
      boxes, scores,
      tj_value_is_none(max_output_boxes_per_class)
          ? tj_graph_scalar(g, TJ_DTYPE_I64, 0)
          : max_output_boxes_per_class,
      tj_value_is_none(iou_threshold) ? tj_graph_scalar(g, TJ_DTYPE_F32, 0)
                                      : iou_threshold,
      has_score ? score_threshold : tj_graph_scalar(g, TJ_DTYPE_F32, 0)};
  return dd_node(g, "tj_nms", in, 5, center_point_box ? 1 : 0,
                 has_score ? 1 : 0);
}
