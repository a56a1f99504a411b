// lib/passes/canonicalize.c
//
// Local algebraic simplification to one normal form. Each sweep rebuilds the
// graph in node order; a node is rebuilt from its already-simplified
// operands and offered to the rules of its op (kRules, one identity per
// rule, in a comment). A rule either rewrites the operands in place (normal
// forms: constants to the right of commutative ops, operands in node order,
// gt/ge as lt/le, explicit broadcasts that implicit broadcasting already
// implies dropped) or returns a replacement node. When no rule replaces a
// node whose operands are all constants, it is folded (lib/passes/fold.c,
// the reference semantics). Sweeps repeat until nothing fires (at most
// kMaxRounds, MLIR's cap: the rules only shrink or reorder, so they
// converge), then dce removes what the rewrites orphaned.
//
// Float care: only rewrites exact for every input including NaN, infinities
// and signed zeros are here. x * 0 -> 0 is wrong for NaN and inf; x + 0.0 ->
// x is wrong for x = -0.0 (gives +0.0), so only x + -0.0 and x - 0.0 go;
// x - x -> 0 is wrong for NaN and inf; no reassociation.
//
// Requires: nothing.  Preserves: inputs, outputs, symbols, guards, every
// node's type.  Invalidates: fusion groups, memory plan.  Idempotent (a
// second run finds nothing to fire; tests check it).

#include <math.h>
#include <string.h>

#include "lib/dtype.h"
#include "lib/passes/pass.h"

enum { kMaxRounds = 10, kMaxOperands = 16 };

typedef struct canon_t {
  tj_pass_ctx_t* ctx;
  tj_rewriter_t rw;
  uint32_t fired;
} canon_t;

// The node being rebuilt: its result type in the new graph's terms and its
// operands as new-graph nodes (rules may rewrite them).
typedef struct match_t {
  const tj_node_t* node;  // in the source graph
  tj_dtype_t dtype;
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
  uint32_t num_operands;
  uint32_t ops[kMaxOperands];
} match_t;

// Sets *out to a replacement (a node of the new graph with the match's
// type) or leaves it TJ_NODE_NONE.
typedef tj_status_t (*rule_fn)(canon_t* c, match_t* m, uint32_t* out);

//===--- looking at new-graph nodes ---===//

// Valid only until the next append (the node array may move).
static const tj_node_t* D(const canon_t* c, uint32_t index) {
  return &c->rw.dst->nodes[index];
}

static bool has_type(const canon_t* c, uint32_t index, const match_t* m) {
  const tj_node_t* n = D(c, index);
  if (n->dtype != m->dtype || n->rank != m->rank) return false;
  for (int32_t i = 0; i < n->rank; ++i) {
    if (n->dims[i] != m->dims[i]) return false;
  }
  return true;
}

static bool is_constant_like(const canon_t* c, uint32_t index) {
  tj_op_t op = D(c, index)->op;
  return op == TJ_OP_CONSTANT || op == TJ_OP_FULL;
}

// Whether node |index| holds one value everywhere (a full, or a constant
// whose elements are bitwise equal), and that value as stored in its dtype.
static bool splat(const canon_t* c, uint32_t index, double* out) {
  const tj_node_t* n = D(c, index);
  if (n->op == TJ_OP_FULL) {
    unsigned char bytes[8];
    tj_store_f64(n->dtype, bytes, 0, n->attrs.value);
    *out = tj_load_f64(n->dtype, bytes, 0);
    return true;
  }
  if (n->op != TJ_OP_CONSTANT || !n->attrs.data) return false;
  int64_t numel;
  if (!tj_node_static_numel(c->rw.dst, index, &numel) || numel == 0 ||
      numel > 4096) {
    return false;
  }
  if (tj_dtype_is_float(n->dtype)) {
    double first = tj_load_f64(n->dtype, n->attrs.data, 0);
    for (int64_t i = 1; i < numel; ++i) {
      double v = tj_load_f64(n->dtype, n->attrs.data, i);
      if (memcmp(&v, &first, sizeof(v)) != 0) return false;
    }
    *out = first;
    return true;
  }
  int64_t first = tj_load_i64(n->dtype, n->attrs.data, 0);
  for (int64_t i = 1; i < numel; ++i) {
    if (tj_load_i64(n->dtype, n->attrs.data, i) != first) return false;
  }
  // Only compared against 0, 1 and -1, which a double holds exactly.
  *out = (double)first;
  return true;
}

static bool splat_is(const canon_t* c, uint32_t index, double want) {
  double v;
  if (!splat(c, index, &v) || v != want) return false;
  // -0.0 == 0.0 as doubles; the zero rules ask for the sign separately.
  return true;
}

static bool is_pos_zero(const canon_t* c, uint32_t index) {
  double v;
  return splat(c, index, &v) && v == 0.0 &&
         (!tj_dtype_is_float(D(c, index)->dtype) || !signbit(v));
}

static bool is_neg_zero(const canon_t* c, uint32_t index) {
  double v;
  const tj_node_t* n = D(c, index);
  if (!splat(c, index, &v) || v != 0.0) return false;
  return tj_dtype_is_float(n->dtype) ? signbit(v) : true;
}

//===--- building new-graph nodes ---===//

static tj_status_t emit(canon_t* c, tj_op_t op, uint32_t num_operands,
                        const uint32_t* operands, const tj_attrs_t* attrs,
                        tj_dtype_t dtype, int32_t rank, const int64_t* dims,
                        uint32_t* out) {
  return tj_rewriter_emit(&c->rw, op, num_operands, operands, attrs, dtype,
                          rank, dims, out);
}

static tj_status_t emit1(canon_t* c, tj_op_t op, uint32_t a, uint32_t* out) {
  return emit(c, op, 1, &a, NULL, TJ_DTYPE_F32, 0, NULL, out);
}

static tj_status_t emit2(canon_t* c, tj_op_t op, uint32_t a, uint32_t b,
                         uint32_t* out) {
  uint32_t ops[2] = {a, b};
  return emit(c, op, 2, ops, NULL, TJ_DTYPE_F32, 0, NULL, out);
}

// Replaces the match by operand |index| when the types agree.
static void use_if_same_type(const canon_t* c, const match_t* m, uint32_t index,
                             uint32_t* out) {
  if (has_type(c, index, m)) *out = index;
}

//===--- normal forms (rewrite operands, never replace) ---===//

// numpy broadcast of two shapes into |dims|; false when it needs a run-time
// guard (two different symbols) or fails.
static bool broadcast2(int32_t ra, const int64_t* a, int32_t rb,
                       const int64_t* b, int32_t* out_rank, int64_t* dims) {
  int32_t r = ra > rb ? ra : rb;
  for (int32_t i = 0; i < r; ++i) {
    int64_t x = i < r - ra ? 1 : a[i - (r - ra)];
    int64_t y = i < r - rb ? 1 : b[i - (r - rb)];
    if (x == y || y == 1) {
      dims[i] = x;
    } else if (x == 1) {
      dims[i] = y;
    } else {
      return false;
    }
  }
  *out_rank = r;
  return true;
}

// Whether swapping the two operands of |m| keeps its shape. Not when
// broadcasting them needs a run-time guard (B against 8*B): inference then
// takes the first operand's dim, and the swapped node would be shaped
// differently from the node it replaces (a reshape of it then fails).
static bool swap_keeps_shape(const canon_t* c, const match_t* m) {
  const tj_node_t* a = D(c, m->ops[0]);
  const tj_node_t* b = D(c, m->ops[1]);
  int32_t rank;
  int64_t dims[TJ_MAX_RANK];
  return broadcast2(a->rank, a->dims, b->rank, b->dims, &rank, dims);
}

// Commutative ops: constants to the right, otherwise operands in node
// order, so that a+b and b+a hash-cons to one node in cse. Exact: IEEE add
// and mul commute bit for bit, NaNs and signed zeros included; and, or, eq,
// ne trivially. (maximum/minimum do not: see kRules.)
static tj_status_t nf_commute(canon_t* c, match_t* m, uint32_t* out) {
  (void)out;
  uint32_t a = m->ops[0], b = m->ops[1];
  bool ca = is_constant_like(c, a), cb = is_constant_like(c, b);
  if (((ca && !cb) || (ca == cb && a > b)) && swap_keeps_shape(c, m)) {
    m->ops[0] = b;
    m->ops[1] = a;
    ++c->fired;
  }
  return NULL;
}

// op(.., broadcast_to(y), ..) -> op(.., y, ..) when numpy broadcasting of
// the operands already yields the result shape: the explicit broadcast is
// implied, and dropping it leaves the smaller tensor for fusion to read.
static tj_status_t nf_drop_broadcast(canon_t* c, match_t* m, uint32_t* out) {
  (void)out;
  for (uint32_t k = 0; k < m->num_operands; ++k) {
    const tj_node_t* b = D(c, m->ops[k]);
    if (b->op != TJ_OP_BROADCAST_TO) continue;
    uint32_t inner = b->operands[0];
    int32_t rank = 0;
    int64_t dims[TJ_MAX_RANK];
    bool ok = true;
    for (uint32_t j = 0; ok && j < m->num_operands; ++j) {
      const tj_node_t* o = D(c, j == k ? inner : m->ops[j]);
      if (j == 0) {
        rank = o->rank;
        for (int32_t d = 0; d < o->rank; ++d) dims[d] = o->dims[d];
      } else {
        int64_t prev[TJ_MAX_RANK];
        memcpy(prev, dims, sizeof(prev));
        ok = broadcast2(rank, prev, o->rank, o->dims, &rank, dims);
      }
    }
    if (!ok || rank != m->rank) continue;
    bool same = true;
    for (int32_t d = 0; d < rank; ++d) same &= dims[d] == m->dims[d];
    if (!same) continue;
    m->ops[k] = inner;
    ++c->fired;
  }
  return NULL;
}

// gt(a, b) -> lt(b, a); ge(a, b) -> le(b, a): one spelling per comparison
// (both false for NaN either way).
static tj_status_t nf_flip_compare(canon_t* c, match_t* m, uint32_t* out) {
  if (!swap_keeps_shape(c, m)) return NULL;
  tj_op_t op = m->node->op == TJ_OP_GT ? TJ_OP_LT : TJ_OP_LE;
  return emit2(c, op, m->ops[1], m->ops[0], out);
}

//===--- replacement rules ---===//

// x + -0.0 -> x (floats); x + 0 -> x (ints). Not x + 0.0: -0.0 + 0.0 = +0.0.
static tj_status_t add_zero(canon_t* c, match_t* m, uint32_t* out) {
  if (is_neg_zero(c, m->ops[1])) use_if_same_type(c, m, m->ops[0], out);
  return NULL;
}

// x + neg(y) -> x - y; neg(y) + x -> x - y (IEEE: a + (-b) == a - b).
static tj_status_t add_neg(canon_t* c, match_t* m, uint32_t* out) {
  for (int k = 1; k >= 0; --k) {
    const tj_node_t* n = D(c, m->ops[k]);
    if (n->op == TJ_OP_NEG) {
      return emit2(c, TJ_OP_SUB, m->ops[1 - k], n->operands[0], out);
    }
  }
  return NULL;
}

// x - 0.0 -> x (-0.0 - 0.0 = -0.0 keeps the sign); x - 0 -> x (ints).
static tj_status_t sub_zero(canon_t* c, match_t* m, uint32_t* out) {
  if (is_pos_zero(c, m->ops[1])) use_if_same_type(c, m, m->ops[0], out);
  return NULL;
}

// -0.0 - x -> neg(x) (floats; 0.0 - x would give +0.0 for x = 0.0);
// 0 - x -> neg(x) (ints, wrapping alike).
static tj_status_t zero_sub(canon_t* c, match_t* m, uint32_t* out) {
  if (is_neg_zero(c, m->ops[0]) && has_type(c, m->ops[1], m)) {
    return emit1(c, TJ_OP_NEG, m->ops[1], out);
  }
  return NULL;
}

// x - neg(y) -> x + y.
static tj_status_t sub_neg(canon_t* c, match_t* m, uint32_t* out) {
  const tj_node_t* n = D(c, m->ops[1]);
  if (n->op != TJ_OP_NEG) return NULL;
  return emit2(c, TJ_OP_ADD, m->ops[0], n->operands[0], out);
}

// x * 1 -> x (NaN * 1 is NaN, inf * 1 is inf, -0.0 * 1 is -0.0).
static tj_status_t mul_one(canon_t* c, match_t* m, uint32_t* out) {
  if (splat_is(c, m->ops[1], 1.0)) use_if_same_type(c, m, m->ops[0], out);
  return NULL;
}

// x * -1 -> neg(x) (exact in IEEE; wraps alike for ints).
static tj_status_t mul_minus_one(canon_t* c, match_t* m, uint32_t* out) {
  if (D(c, m->ops[0])->dtype == TJ_DTYPE_BOOL) return NULL;
  if (splat_is(c, m->ops[1], -1.0) && has_type(c, m->ops[0], m)) {
    return emit1(c, TJ_OP_NEG, m->ops[0], out);
  }
  return NULL;
}

// neg(x) * neg(y) -> x * y (signs cancel exactly).
static tj_status_t mul_neg_neg(canon_t* c, match_t* m, uint32_t* out) {
  const tj_node_t* a = D(c, m->ops[0]);
  const tj_node_t* b = D(c, m->ops[1]);
  if (a->op != TJ_OP_NEG || b->op != TJ_OP_NEG) return NULL;
  return emit2(c, TJ_OP_MUL, a->operands[0], b->operands[0], out);
}

// x / 1 -> x; x / -1 -> neg(x) (ints: INT_MIN / -1 wraps like neg).
static tj_status_t div_one(canon_t* c, match_t* m, uint32_t* out) {
  if (splat_is(c, m->ops[1], 1.0)) {
    use_if_same_type(c, m, m->ops[0], out);
  } else if (splat_is(c, m->ops[1], -1.0) && has_type(c, m->ops[0], m)) {
    return emit1(c, TJ_OP_NEG, m->ops[0], out);
  }
  return NULL;
}

// pow(x, 1) -> x (C pow(x, 1) is x for every x, NaN included).
static tj_status_t pow_one(canon_t* c, match_t* m, uint32_t* out) {
  if (splat_is(c, m->ops[1], 1.0)) use_if_same_type(c, m, m->ops[0], out);
  return NULL;
}

// op(x, x) -> x for max, min, and, or (idempotent ops; NaN stays NaN).
static tj_status_t idempotent_pair(canon_t* c, match_t* m, uint32_t* out) {
  if (m->ops[0] == m->ops[1]) use_if_same_type(c, m, m->ops[0], out);
  return NULL;
}

// neg(neg(x)) -> x; not(not(x)) -> x.
static tj_status_t involution(canon_t* c, match_t* m, uint32_t* out) {
  const tj_node_t* n = D(c, m->ops[0]);
  if (n->op == m->node->op) use_if_same_type(c, m, n->operands[0], out);
  return NULL;
}

// abs(abs(x)) -> abs(x); relu(relu(x)) -> relu(x); sign(sign(x)) -> sign(x).
static tj_status_t idempotent_unary(canon_t* c, match_t* m, uint32_t* out) {
  if (D(c, m->ops[0])->op == m->node->op)
    use_if_same_type(c, m, m->ops[0], out);
  return NULL;
}

// abs(neg(x)) -> abs(x) (ints: abs(neg(INT_MIN)) = abs(INT_MIN) alike).
static tj_status_t abs_neg(canon_t* c, match_t* m, uint32_t* out) {
  const tj_node_t* n = D(c, m->ops[0]);
  if (n->op != TJ_OP_NEG) return NULL;
  return emit1(c, TJ_OP_ABS, n->operands[0], out);
}

// relu(abs(x)) -> abs(x) (abs is >= 0 or NaN, which relu keeps).
static tj_status_t relu_abs(canon_t* c, match_t* m, uint32_t* out) {
  if (D(c, m->ops[0])->op == TJ_OP_ABS) use_if_same_type(c, m, m->ops[0], out);
  return NULL;
}

// Whether every value of dtype |from| converts to |to| exactly and both
// convert on the same path of the reference (float through double, the
// rest through int64), so cast(cast(x, to), y) == cast(x, y).
static bool exact_widening(tj_dtype_t from, tj_dtype_t to) {
  if (from == to) return true;
  switch (from) {
    case TJ_DTYPE_F16:
    case TJ_DTYPE_BF16:
      return to == TJ_DTYPE_F32 || to == TJ_DTYPE_F64;
    case TJ_DTYPE_F32:
      return to == TJ_DTYPE_F64;
    case TJ_DTYPE_BOOL:
      return tj_dtype_is_int(to);
    case TJ_DTYPE_U8:
      return to == TJ_DTYPE_I16 || to == TJ_DTYPE_U16 || to == TJ_DTYPE_I32 ||
             to == TJ_DTYPE_U32 || to == TJ_DTYPE_I64 || to == TJ_DTYPE_U64;
    case TJ_DTYPE_U16:
      return to == TJ_DTYPE_I32 || to == TJ_DTYPE_U32 || to == TJ_DTYPE_I64 ||
             to == TJ_DTYPE_U64;
    case TJ_DTYPE_U32:
      return to == TJ_DTYPE_I64 || to == TJ_DTYPE_U64;
    case TJ_DTYPE_I16:
      return to == TJ_DTYPE_I32 || to == TJ_DTYPE_I64;
    case TJ_DTYPE_F8E4M3:
    case TJ_DTYPE_F8E5M2:
    case TJ_DTYPE_F8E4M3FNUZ:
    case TJ_DTYPE_F8E5M2FNUZ:
    case TJ_DTYPE_F4E2M1:
      return tj_dtype_is_float(to);  // every float8 is an f16 and a bf16
    case TJ_DTYPE_F8E8M0:            // 2^-127 to 2^127: not an f16
      return to == TJ_DTYPE_F32 || to == TJ_DTYPE_F64 || to == TJ_DTYPE_BF16;
    case TJ_DTYPE_I8:
      return to == TJ_DTYPE_I16 || to == TJ_DTYPE_I32 || to == TJ_DTYPE_I64;
    case TJ_DTYPE_I32:
      return to == TJ_DTYPE_I64;
    default:
      return false;
  }
}

// cast(x : T) to T -> x; cast(cast(x : S) to W) to T -> cast(x) to T when
// S -> W is exact (the inner cast changes no value), which is x itself when
// T == S.
static tj_status_t cast_cast(canon_t* c, match_t* m, uint32_t* out) {
  const tj_node_t* inner = D(c, m->ops[0]);
  if (inner->dtype == m->dtype) {
    use_if_same_type(c, m, m->ops[0], out);
    return NULL;
  }
  if (inner->op != TJ_OP_CAST) return NULL;
  uint32_t x = inner->operands[0];
  tj_dtype_t s = D(c, x)->dtype;
  if (!exact_widening(s, inner->dtype)) return NULL;
  if (s == m->dtype) {
    use_if_same_type(c, m, x, out);
    return NULL;
  }
  return emit(c, TJ_OP_CAST, 1, &x, NULL, m->dtype, 0, NULL, out);
}

// transpose(x, identity) -> x; transpose(transpose(x, p), q) ->
// transpose(x, r) with r[k] = p[q[k]] (or x when r is the identity).
static tj_status_t transpose_transpose(canon_t* c, match_t* m, uint32_t* out) {
  const tj_node_t* inner = D(c, m->ops[0]);
  const tj_attrs_t* q = &m->node->attrs;
  int64_t r[TJ_MAX_RANK];
  uint32_t x = m->ops[0];
  uint32_t n = q->num_ints;
  if (n > TJ_MAX_RANK) return NULL;
  if (inner->op == TJ_OP_TRANSPOSE && inner->attrs.num_ints == n) {
    for (uint32_t k = 0; k < n; ++k) r[k] = inner->attrs.ints[q->ints[k]];
    x = inner->operands[0];
  } else {
    for (uint32_t k = 0; k < n; ++k) r[k] = q->ints[k];
  }
  bool identity = true;
  for (uint32_t k = 0; k < n; ++k) identity &= r[k] == (int64_t)k;
  if (identity) {
    use_if_same_type(c, m, x, out);
    return NULL;
  }
  if (x == m->ops[0]) return NULL;  // a lone non-identity transpose stays
  tj_attrs_t attrs;
  memset(&attrs, 0, sizeof(attrs));
  attrs.ints = r;
  attrs.num_ints = n;
  return emit(c, TJ_OP_TRANSPOSE, 1, &x, &attrs, m->dtype, 0, NULL, out);
}

static bool is_reduction(tj_op_t op) {
  return tj_op_info(op)->kind == TJ_OP_KIND_REDUCTION;
}

// reshape(x) to x's shape -> x; reshape(reshape(x)) -> reshape(x);
// reshape(reduce(x, axes)) to the keepdims shape -> reduce(x, axes,
// keepdims) (keeps the reduction's epilogue elementwise, so it fuses).
static tj_status_t reshape_rules(canon_t* c, match_t* m, uint32_t* out) {
  uint32_t x = m->ops[0];
  const tj_node_t* inner = D(c, x);
  if (has_type(c, x, m)) {
    *out = x;
    return NULL;
  }
  if (inner->op == TJ_OP_RESHAPE) {
    uint32_t y = inner->operands[0];
    if (has_type(c, y, m)) {
      *out = y;
      return NULL;
    }
    return emit(c, TJ_OP_RESHAPE, 1, &y, NULL, m->dtype, m->rank, m->dims, out);
  }
  if (is_reduction(inner->op) && !inner->attrs.keepdims &&
      inner->op != TJ_OP_ARGMAX && inner->op != TJ_OP_ARGMIN) {
    uint32_t y = inner->operands[0];
    const tj_node_t* yn = D(c, y);
    if (yn->rank != m->rank) return NULL;
    int64_t kept[TJ_MAX_RANK];
    for (int32_t d = 0; d < yn->rank; ++d) kept[d] = yn->dims[d];
    for (uint32_t k = 0; k < inner->attrs.num_ints; ++k) {
      kept[inner->attrs.ints[k]] = 1;
    }
    for (int32_t d = 0; d < m->rank; ++d) {
      if (kept[d] != m->dims[d]) return NULL;
    }
    tj_attrs_t attrs = inner->attrs;
    attrs.keepdims = true;
    return emit(c, inner->op, 1, &y, &attrs, m->dtype, 0, NULL, out);
  }
  return NULL;
}

// Whether the value |v| survives a round trip through the FULL attribute
// (a double) into dtype |dtype| unchanged.
static bool full_can_hold(tj_dtype_t dtype, const void* data) {
  if (tj_dtype_is_float(dtype) || tj_dtype_is_f8(dtype)) return true;
  int64_t i = tj_load_i64(dtype, data, 0);
  if (dtype == TJ_DTYPE_U64 && i < 0) return false;  // >= 2^63: its bits
  return (int64_t)(double)i == i && fabs((double)i) < 9007199254740992.0;
}

// broadcast_to(x) to x's shape -> x; broadcast_to(broadcast_to(x)) ->
// broadcast_to(x); broadcast_to(full v) and broadcast_to(splat constant v)
// -> full v of the new shape (a generator: no memory read at all).
static tj_status_t broadcast_rules(canon_t* c, match_t* m, uint32_t* out) {
  uint32_t x = m->ops[0];
  const tj_node_t* inner = D(c, x);
  if (has_type(c, x, m)) {
    *out = x;
    return NULL;
  }
  double v;
  if (splat(c, x, &v) && (inner->op == TJ_OP_FULL ||
                          full_can_hold(inner->dtype, inner->attrs.data))) {
    tj_attrs_t attrs;
    memset(&attrs, 0, sizeof(attrs));
    attrs.value = v;
    return emit(c, TJ_OP_FULL, 0, NULL, &attrs, m->dtype, m->rank, m->dims,
                out);
  }
  if (inner->op == TJ_OP_BROADCAST_TO) {
    uint32_t y = inner->operands[0];
    return emit(c, TJ_OP_BROADCAST_TO, 1, &y, NULL, m->dtype, m->rank, m->dims,
                out);
  }
  return NULL;
}

// where(c, x, x) -> x; where(true, a, b) -> a; where(false, a, b) -> b;
// where(not(c), a, b) -> where(c, b, a).
static tj_status_t where_rules(canon_t* c, match_t* m, uint32_t* out) {
  if (m->ops[1] == m->ops[2]) {
    use_if_same_type(c, m, m->ops[1], out);
    if (*out != TJ_NODE_NONE) return NULL;
  }
  double v;
  if (splat(c, m->ops[0], &v)) {
    use_if_same_type(c, m, v != 0.0 ? m->ops[1] : m->ops[2], out);
    if (*out != TJ_NODE_NONE) return NULL;
  }
  const tj_node_t* cond = D(c, m->ops[0]);
  if (cond->op == TJ_OP_NOT) {
    uint32_t ops[3] = {cond->operands[0], m->ops[2], m->ops[1]};
    return emit(c, TJ_OP_WHERE, 3, ops, NULL, m->dtype, 0, NULL, out);
  }
  return NULL;
}

// Reducing only axes of size 1 changes no value for max, min and prod (and
// sum of ints); float sum and mean would turn -0.0 into +0.0, so they stay.
// With keepdims the result is x; without, a reshape of x.
static tj_status_t reduce_unit_axes(canon_t* c, match_t* m, uint32_t* out) {
  tj_op_t op = m->node->op;
  uint32_t x = m->ops[0];
  const tj_node_t* xn = D(c, x);
  bool exact = op == TJ_OP_MAX || op == TJ_OP_MIN || op == TJ_OP_PROD ||
               (op == TJ_OP_SUM && !tj_dtype_is_float(xn->dtype));
  if (!exact || xn->dtype != m->dtype) return NULL;
  const tj_attrs_t* a = &m->node->attrs;
  if (a->num_ints == 0) return NULL;
  for (uint32_t k = 0; k < a->num_ints; ++k) {
    if (xn->dims[a->ints[k]] != 1) return NULL;
  }
  if (has_type(c, x, m)) {
    *out = x;
    return NULL;
  }
  return emit(c, TJ_OP_RESHAPE, 1, &x, NULL, m->dtype, m->rank, m->dims, out);
}

typedef struct rule_t {
  tj_op_t op;
  rule_fn fn;
} rule_t;

// Per op, in order: normal forms first (they only reorder operands), then
// replacements; the first replacement wins.
static const rule_t kRules[] = {
    {TJ_OP_ADD, nf_commute},         // a + b == b + a
    {TJ_OP_ADD, nf_drop_broadcast},  // x + bcast(y) == x + y if implied
    {TJ_OP_ADD, add_zero},           // x + -0.0 -> x
    {TJ_OP_ADD, add_neg},            // x + neg(y) -> x - y
    {TJ_OP_SUB, nf_drop_broadcast},  // implied broadcast_to dropped
    {TJ_OP_SUB, sub_zero},           // x - 0.0 -> x
    {TJ_OP_SUB, zero_sub},           // -0.0 - x -> neg(x)
    {TJ_OP_SUB, sub_neg},            // x - neg(y) -> x + y
    {TJ_OP_MUL, nf_commute},         // a * b == b * a
    {TJ_OP_MUL, nf_drop_broadcast},  // implied broadcast_to dropped
    {TJ_OP_MUL, mul_one},            // x * 1 -> x
    {TJ_OP_MUL, mul_minus_one},      // x * -1 -> neg(x)
    {TJ_OP_MUL, mul_neg_neg},        // neg(x) * neg(y) -> x * y
    {TJ_OP_DIV, nf_drop_broadcast},  // implied broadcast_to dropped
    {TJ_OP_DIV, div_one},            // x / 1 -> x; x / -1 -> neg(x)
    {TJ_OP_POW, nf_drop_broadcast},  // implied broadcast_to dropped
    {TJ_OP_POW, pow_one},            // pow(x, 1) -> x
    // Not commuted: maximum(-0.0, +0.0) is +0.0 but maximum(+0.0, -0.0)
    // is -0.0 (ties return b), so max/min keep their operand order.
    {TJ_OP_MAXIMUM, nf_drop_broadcast},      // implied broadcast_to dropped
    {TJ_OP_MAXIMUM, idempotent_pair},        // max(x, x) -> x
    {TJ_OP_MINIMUM, nf_drop_broadcast},      // implied broadcast_to dropped
    {TJ_OP_MINIMUM, idempotent_pair},        // min(x, x) -> x
    {TJ_OP_AND, nf_commute},                 // a && b == b && a
    {TJ_OP_AND, idempotent_pair},            // x && x -> x
    {TJ_OP_OR, nf_commute},                  // a || b == b || a
    {TJ_OP_OR, idempotent_pair},             // x || x -> x
    {TJ_OP_EQ, nf_commute},                  // a == b is b == a
    {TJ_OP_EQ, nf_drop_broadcast},           // implied broadcast_to dropped
    {TJ_OP_NE, nf_commute},                  // a != b is b != a
    {TJ_OP_NE, nf_drop_broadcast},           // implied broadcast_to dropped
    {TJ_OP_LT, nf_drop_broadcast},           // implied broadcast_to dropped
    {TJ_OP_LE, nf_drop_broadcast},           // implied broadcast_to dropped
    {TJ_OP_GT, nf_flip_compare},             // a > b -> b < a
    {TJ_OP_GE, nf_flip_compare},             // a >= b -> b <= a
    {TJ_OP_WHERE, nf_drop_broadcast},        // implied broadcast_to dropped
    {TJ_OP_WHERE, where_rules},              // where(c, x, x) -> x, ...
    {TJ_OP_NEG, involution},                 // neg(neg(x)) -> x
    {TJ_OP_NOT, involution},                 // not(not(x)) -> x
    {TJ_OP_ABS, idempotent_unary},           // abs(abs(x)) -> abs(x)
    {TJ_OP_ABS, abs_neg},                    // abs(neg(x)) -> abs(x)
    {TJ_OP_RELU, idempotent_unary},          // relu(relu(x)) -> relu(x)
    {TJ_OP_RELU, relu_abs},                  // relu(abs(x)) -> abs(x)
    {TJ_OP_SIGN, idempotent_unary},          // sign(sign(x)) -> sign(x)
    {TJ_OP_CAST, cast_cast},                 // cast to own dtype, exact chains
    {TJ_OP_TRANSPOSE, transpose_transpose},  // transpose composition
    {TJ_OP_RESHAPE, reshape_rules},          // reshape chains, keepdims reduce
    {TJ_OP_BROADCAST_TO, broadcast_rules},   // bcast chains, splat -> full
    {TJ_OP_MAX, reduce_unit_axes},           // max over size-1 axes -> x
    {TJ_OP_MIN, reduce_unit_axes},           // min over size-1 axes -> x
    {TJ_OP_PROD, reduce_unit_axes},          // prod over size-1 axes -> x
    {TJ_OP_SUM, reduce_unit_axes},           // int sum over size-1 axes -> x
};

//===--- the sweep ---===//

static tj_status_t rebuild_node(canon_t* c, uint32_t index) {
  const tj_graph_t* src = c->rw.src;
  const tj_node_t* node = &src->nodes[index];
  if (node->num_operands > kMaxOperands)
    return tj_rewriter_clone(&c->rw, index);
  match_t m;
  memset(&m, 0, sizeof(m));
  m.node = node;
  m.dtype = node->dtype;
  m.rank = node->rank;
  m.num_operands = node->num_operands;
  TJ_RETURN_IF_ERROR(tj_rewriter_dims(&c->rw, node->rank, node->dims, m.dims));
  bool all_constant = node->num_operands > 0;
  for (uint32_t k = 0; k < node->num_operands; ++k) {
    uint32_t o = node->operands[k];
    m.ops[k] = o == TJ_NODE_NONE ? TJ_NODE_NONE : c->rw.map[o];
    if (o != TJ_NODE_NONE && D(c, m.ops[k])->op != TJ_OP_CONSTANT) {
      all_constant = false;
    }
  }
  uint32_t out = TJ_NODE_NONE;
  bool has_none = false;
  for (uint32_t k = 0; k < m.num_operands; ++k) {
    has_none |= m.ops[k] == TJ_NODE_NONE;
  }
  if (c->ctx->test_rule && !has_none) {
    TJ_RETURN_IF_ERROR(
        c->ctx->test_rule(c->ctx->test_rule_user, &c->rw, index, m.ops, &out));
    if (out != TJ_NODE_NONE &&
        (!has_type(c, out, &m) || !tj_pass_rewrite(c->ctx, src, index))) {
      out = TJ_NODE_NONE;
    }
  }
  for (size_t r = 0; r < TJ_ARRAY_SIZE(kRules) && out == TJ_NODE_NONE; ++r) {
    if (kRules[r].op != node->op) continue;
    if (has_none) break;
    uint32_t saved[kMaxOperands];
    memcpy(saved, m.ops, sizeof(saved));
    uint32_t fired = c->fired;
    TJ_RETURN_IF_ERROR(kRules[r].fn(c, &m, &out));
    // A replacement must have the node's type. Inference can shape a
    // rewritten node differently where dims are equal only by a run-time
    // guard (neg(y) + x -> x - y with y: [8*B], x: [B] is shaped [B]):
    // then the node stays (what was emitted is dead, for dce).
    if (out != TJ_NODE_NONE && !has_type(c, out, &m)) out = TJ_NODE_NONE;
    // Under a TJ_BISECT budget a rewrite past it is undone: the operands
    // as they were, no replacement (what was emitted is dead, for dce).
    bool changed = out != TJ_NODE_NONE || c->fired != fired ||
                   memcmp(saved, m.ops, sizeof(saved)) != 0;
    if (changed && !tj_pass_rewrite(c->ctx, src, index)) {
      memcpy(m.ops, saved, sizeof(saved));
      c->fired = fired;
      out = TJ_NODE_NONE;
    }
  }
  if (out != TJ_NODE_NONE) {
    ++c->fired;
    c->rw.map[index] = out;
    return NULL;
  }
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = node->op;
  desc.num_operands = node->num_operands;
  desc.operands = m.ops;
  desc.dtype = node->dtype;
  desc.rank = node->rank;
  desc.dims = m.dims;
  desc.attrs = node->attrs;
  if (all_constant) {
    TJ_RETURN_IF_ERROR(tj_fold_node(c->ctx, c->rw.dst, &desc, &out));
    if (out != TJ_NODE_NONE && tj_pass_rewrite(c->ctx, src, index)) {
      ++c->fired;
      c->rw.map[index] = out;
      return NULL;
    }
  }
  return tj_rewriter_append(&c->rw, &desc, &c->rw.map[index]);
}

tj_status_t tj_pass_canonicalize(tj_pass_ctx_t* ctx, tj_plan_t* plan) {
  bool changed = false;
  for (int round = 0; round < kMaxRounds; ++round) {
    canon_t c;
    memset(&c, 0, sizeof(c));
    c.ctx = ctx;
    const tj_graph_t* g = plan->graph;
    TJ_RETURN_IF_ERROR(tj_rewriter_begin(&c.rw, g));
    tj_status_t status = NULL;
    for (uint32_t i = 0; !status && i < g->num_nodes; ++i) {
      if (g->nodes[i].op != TJ_OP_INPUT) status = rebuild_node(&c, i);
    }
    if (status || c.fired == 0) {
      tj_rewriter_abandon(&c.rw);
      if (status) return status;
      break;
    }
    tj_graph_t* out = NULL;
    TJ_RETURN_IF_ERROR(tj_rewriter_finish(&c.rw, &out));
    tj_plan_set_graph(plan, out);
    changed = true;
  }
  return changed ? tj_pass_dce(ctx, plan) : NULL;
}
