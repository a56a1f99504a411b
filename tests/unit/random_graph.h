// The seeded random-graph generator of the middle end's differential test
// (passes_random_test.c), shared with the autodiff tests
// (autodiff_random_test.c): random ops, shapes, broadcasts, a symbolic
// batch dim B (symbol 0), composites and patterns the canonicalizer
// rewrites, built through tj_graph_append; plus random inputs, running on
// the reference interpreter and per-dtype tolerances. Header-only (static
// inline), for test files.

#ifndef TJ_TESTS_UNIT_RANDOM_GRAPH_H_
#define TJ_TESTS_UNIT_RANDOM_GRAPH_H_

#include <float.h>

#include "tests/unit/test.h"

#include "lib/dtype.h"
#include "lib/ir.h"
#include "lib/window.h"
#include "lib/passes/pass.h"

enum { kMaxVals = 512, kMaxRunInputs = 128, kMaxRunOutputs = 32 };

// What generate_ex builds. generate() is the middle end's mix: a few to a
// dozen ops of every dtype. generate_large() makes graphs of 100+ nodes for
// the differential tests against a backend: many values read several times
// (fusion's multi-consumer decisions, in-place buffers), f32 and f64 only
// (a backend keeps f32 inside a fused group where the reference rounds
// every op of a half-precision chain).
typedef struct gen_config_t {
  int min_ops, extra_ops;  // ops: min_ops + below(extra_ops)
  int any_value_in;        // pick any value, not a recent one, 1 in this
  int fanout_in;           // gen_fanout is 1 op in this (0: never)
  bool wide_floats_only;   // f32 and f64 only
  bool batched_input;      // a first input of shape [B, ..]
  int nn_in;  // up to this many gen_nn ops (conv, pools, attention) last
} gen_config_t;

//===--- a seeded generator ---===//

// Seeded (splitmix64), or, with |bytes|, the choices themselves read from
// a byte string, 8 bytes a draw and zeros past its end: a fuzzer then
// steers every choice of the generator (tests/fuzz/fuzz_builder.c).
typedef struct rng_t {
  uint64_t s;
  const uint8_t* bytes;
  size_t size, pos;
} rng_t;

static inline uint64_t next_u64(rng_t* r) {
  if (r->bytes) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) {
      v = v << 8 | (r->pos < r->size ? r->bytes[r->pos++] : 0u);
    }
    return v;
  }
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline uint32_t below(rng_t* r, uint32_t n) {
  return (uint32_t)(next_u64(r) % n);
}

static inline double uniform(rng_t* r, double lo, double hi) {
  return lo + (hi - lo) * (double)(next_u64(r) >> 11) / 9007199254740992.0;
}

//===--- graph generation through tj_graph_append ---===//

typedef struct gen_t {
  tj_graph_t* g;
  rng_t* r;
  const gen_config_t* config;
  int64_t B;
  uint32_t vals[kMaxVals];  // values usable as operands
  uint32_t num_vals;
  int num_inputs;
} gen_t;

static inline const tj_node_t* node(gen_t* s, uint32_t i) {
  return &s->g->nodes[i];
}

// Appends |desc|; a desc inference rejects is simply dropped.
static inline bool append(gen_t* s, const tj_node_desc_t* d, uint32_t* out) {
  uint32_t index;
  tj_status_t st = tj_graph_append(s->g, d, &index);
  if (st) {
    tj_status_free(st);
    return false;
  }
  if (s->num_vals < kMaxVals) s->vals[s->num_vals++] = index;
  if (out) *out = index;
  return true;
}

// Mostly one of the newest values, so that chains get deep and values get
// several users; sometimes any value.
static inline uint32_t pick(gen_t* s) {
  uint32_t n = s->num_vals;
  int any = s->config->any_value_in;
  if (any && n > 3 && below(s->r, (uint32_t)any) == 0) {
    return s->vals[below(s->r, n)];
  }
  if (n > 3 && below(s->r, 3)) return s->vals[n - 1 - below(s->r, 3)];
  return s->vals[below(s->r, n)];
}

// A value of float dtype, if any.
static inline uint32_t pick_float(gen_t* s) {
  for (int tries = 0; tries < 16; ++tries) {
    uint32_t v = pick(s);
    if (tj_dtype_is_float(node(s, v)->dtype)) return v;
  }
  return pick(s);
}

static inline int64_t random_dim(gen_t* s) {
  static const int64_t kDims[] = {1, 2, 3, 4, 5};
  uint32_t k = below(s->r, 7);
  return k >= 5 ? s->B : kDims[k];
}

static inline tj_dtype_t random_dtype(gen_t* s) {
  uint32_t k = below(s->r, 20);
  if (s->config->wide_floats_only) {
    return k < 17 ? TJ_DTYPE_F32 : TJ_DTYPE_F64;
  }
  if (k < 13) return TJ_DTYPE_F32;
  if (k < 15) return TJ_DTYPE_F64;
  if (k < 17) return TJ_DTYPE_BF16;
  if (k < 18) return TJ_DTYPE_F16;
  return TJ_DTYPE_I32;
}

static inline bool add_input(gen_t* s, tj_dtype_t dtype, int32_t rank,
                             const int64_t* dims, uint32_t* out) {
  char name[16];
  snprintf(name, sizeof(name), "in%d", s->num_inputs);
  tj_node_desc_t d;
  memset(&d, 0, sizeof(d));
  d.op = TJ_OP_INPUT;
  d.dtype = dtype;
  d.rank = rank;
  d.dims = dims;
  d.attrs.name = name;
  if (!append(s, &d, out)) return false;
  ++s->num_inputs;
  return true;
}

static inline bool add_random_input(gen_t* s) {
  int64_t dims[4];
  int32_t rank = (int32_t)below(s->r, 4);
  for (int32_t i = 0; i < rank; ++i) dims[i] = random_dim(s);
  return add_input(s, random_dtype(s), rank, dims, NULL);
}

// A shape that broadcasts against |v|'s: some dims set to 1, some leading
// dims dropped.
static inline bool add_broadcast_input(gen_t* s, uint32_t v, uint32_t* out) {
  const tj_node_t* n = node(s, v);
  int32_t drop = n->rank ? (int32_t)below(s->r, (uint32_t)n->rank + 1) : 0;
  int64_t dims[TJ_MAX_RANK];
  for (int32_t i = drop; i < n->rank; ++i) {
    dims[i - drop] = below(s->r, 2) ? 1 : n->dims[i];
  }
  return add_input(s, n->dtype, n->rank - drop, dims, out);
}

static inline bool add_scalar(gen_t* s, tj_dtype_t dtype, double value,
                              uint32_t* out) {
  unsigned char data[8] = {0};
  tj_store_f64(dtype, data, 0, value);
  tj_node_desc_t d;
  memset(&d, 0, sizeof(d));
  d.op = TJ_OP_CONSTANT;
  d.dtype = dtype;
  d.attrs.data = data;
  return append(s, &d, out);
}

static inline bool op1(gen_t* s, tj_op_t op, uint32_t a, uint32_t* out) {
  tj_node_desc_t d;
  memset(&d, 0, sizeof(d));
  d.op = op;
  d.num_operands = 1;
  d.operands = &a;
  return append(s, &d, out);
}

static inline bool op2(gen_t* s, tj_op_t op, uint32_t a, uint32_t b,
                       uint32_t* out) {
  uint32_t ops[2] = {a, b};
  tj_node_desc_t d;
  memset(&d, 0, sizeof(d));
  d.op = op;
  d.num_operands = 2;
  d.operands = ops;
  return append(s, &d, out);
}

static inline bool with_attrs(gen_t* s, tj_op_t op, uint32_t n,
                              const uint32_t* ops, const tj_attrs_t* attrs,
                              tj_dtype_t dtype, int32_t rank,
                              const int64_t* dims, uint32_t* out) {
  tj_node_desc_t d;
  memset(&d, 0, sizeof(d));
  d.op = op;
  d.num_operands = n;
  d.operands = ops;
  d.dtype = dtype;
  d.rank = rank;
  d.dims = dims;
  if (attrs) d.attrs = *attrs;
  return append(s, &d, out);
}

static inline bool second_operand(gen_t* s, uint32_t a, uint32_t* b) {
  switch (below(s->r, 4)) {
    case 0:
      *b = pick(s);
      return true;
    case 1:
      return add_scalar(s, node(s, a)->dtype, uniform(s->r, -2, 2), b);
    case 2:
      return add_broadcast_input(s, a, b);
    default:
      *b = a;
      return true;
  }
}

static inline bool gen_unary(gen_t* s) {
  static const tj_op_t kOps[] = {
      TJ_OP_NEG,   TJ_OP_ABS,   TJ_OP_EXP,     TJ_OP_LOG,  TJ_OP_SQRT,
      TJ_OP_RSQRT, TJ_OP_TANH,  TJ_OP_SIGMOID, TJ_OP_ERF,  TJ_OP_SIN,
      TJ_OP_COS,   TJ_OP_RELU,  TJ_OP_FLOOR,   TJ_OP_CEIL, TJ_OP_ROUND,
      TJ_OP_SIGN,  TJ_OP_ISNAN, TJ_OP_ERFC};
  // One draw a statement: C leaves the order of a call's arguments open,
  // and gcc and clang differ, so a seed would make another graph under the
  // other compiler (this order is the one gcc took for the logged seeds).
  uint32_t x = pick(s);
  return op1(s, kOps[below(s->r, TJ_ARRAY_SIZE(kOps))], x, NULL);
}

static inline bool gen_binary(gen_t* s) {
  static const tj_op_t kOps[] = {
      TJ_OP_ADD,     TJ_OP_SUB, TJ_OP_MUL, TJ_OP_DIV, TJ_OP_MAXIMUM,
      TJ_OP_MINIMUM, TJ_OP_POW, TJ_OP_LT,  TJ_OP_GT,  TJ_OP_GE,
      TJ_OP_EQ,      TJ_OP_ADD, TJ_OP_MUL, TJ_OP_SUB};
  uint32_t a = pick(s), b;
  if (!second_operand(s, a, &b)) return false;
  if (below(s->r, 2)) {
    uint32_t t = a;
    a = b;
    b = t;
  }
  return op2(s, kOps[below(s->r, TJ_ARRAY_SIZE(kOps))], a, b, NULL);
}

static inline bool gen_where(gen_t* s) {
  uint32_t a = pick(s), b, c;
  if (!second_operand(s, a, &b)) return false;
  if (!op2(s, below(s->r, 2) ? TJ_OP_LT : TJ_OP_GE, a, b, &c)) return false;
  if (below(s->r, 3) == 0 && !op1(s, TJ_OP_NOT, c, &c)) return false;
  uint32_t ops[3] = {c, a, b};
  return with_attrs(s, TJ_OP_WHERE, 3, ops, NULL, TJ_DTYPE_F32, 0, NULL, NULL);
}

static inline bool gen_reduce(gen_t* s) {
  static const tj_op_t kOps[] = {TJ_OP_SUM, TJ_OP_MEAN, TJ_OP_MAX,
                                 TJ_OP_MIN, TJ_OP_PROD, TJ_OP_ARGMAX};
  uint32_t a = pick(s);
  const tj_node_t* n = node(s, a);
  if (n->rank == 0) return false;
  tj_op_t op = kOps[below(s->r, TJ_ARRAY_SIZE(kOps))];
  int64_t axes[TJ_MAX_RANK];
  uint32_t count = 0;
  for (int32_t i = 0; i < n->rank; ++i) {
    if (below(s->r, 2)) axes[count++] = i - (below(s->r, 2) ? n->rank : 0);
  }
  if (count == 0 || op == TJ_OP_ARGMAX) {
    axes[0] = below(s->r, (uint32_t)n->rank);
    count = 1;
  }
  tj_attrs_t attrs;
  memset(&attrs, 0, sizeof(attrs));
  attrs.ints = axes;
  attrs.num_ints = count;
  attrs.keepdims = below(s->r, 2);
  uint32_t r;
  if (!with_attrs(s, op, 1, &a, &attrs, TJ_DTYPE_F32, 0, NULL, &r)) {
    return false;
  }
  // Sometimes reshape a reduction back to its keepdims shape (a rule).
  if (!attrs.keepdims && op != TJ_OP_ARGMAX && below(s->r, 2)) {
    int64_t dims[TJ_MAX_RANK];
    const tj_node_t* in = node(s, a);
    for (int32_t i = 0; i < in->rank; ++i) dims[i] = in->dims[i];
    for (uint32_t k = 0; k < count; ++k) {
      dims[axes[k] < 0 ? axes[k] + in->rank : axes[k]] = 1;
    }
    return with_attrs(s, TJ_OP_RESHAPE, 1, &r, NULL, in->dtype, in->rank, dims,
                      NULL);
  }
  return true;
}

static inline bool gen_movement(gen_t* s) {
  uint32_t a = pick(s);
  const tj_node_t* n = node(s, a);
  tj_dtype_t dtype = n->dtype;
  int32_t rank = n->rank;
  int64_t dims[TJ_MAX_RANK];
  for (int32_t i = 0; i < rank; ++i) dims[i] = n->dims[i];
  tj_attrs_t attrs;
  memset(&attrs, 0, sizeof(attrs));
  int64_t ints[3 * TJ_MAX_RANK];
  attrs.ints = ints;
  switch (below(s->r, 7)) {
    case 0: {  // transpose, sometimes twice
      for (int32_t i = 0; i < rank; ++i) ints[i] = i;
      for (int32_t i = rank - 1; i > 0; --i) {
        int32_t j = (int32_t)below(s->r, (uint32_t)i + 1);
        int64_t t = ints[i];
        ints[i] = ints[j];
        ints[j] = t;
      }
      attrs.num_ints = (uint32_t)rank;
      uint32_t t;
      if (!with_attrs(s, TJ_OP_TRANSPOSE, 1, &a, &attrs, dtype, 0, NULL, &t)) {
        return false;
      }
      if (below(s->r, 2)) return true;
      return with_attrs(s, TJ_OP_TRANSPOSE, 1, &t, &attrs, dtype, 0, NULL,
                        NULL);
    }
    case 1: {  // reshape: flatten, or one inferred dim; sometimes twice
      int64_t flat = TJ_DIM_INFER;
      uint32_t t;
      if (!with_attrs(s, TJ_OP_RESHAPE, 1, &a, NULL, dtype, 1, &flat, &t)) {
        return false;
      }
      if (below(s->r, 2) || rank == 0) return true;
      return with_attrs(s, TJ_OP_RESHAPE, 1, &t, NULL, dtype, rank, dims, NULL);
    }
    case 2: {  // broadcast_to a leading dim and expanded 1s
      int64_t out[TJ_MAX_RANK];
      if (rank >= 4) return false;
      out[0] = random_dim(s);
      for (int32_t i = 0; i < rank; ++i) {
        out[i + 1] = dims[i] == 1 ? random_dim(s) : dims[i];
      }
      return with_attrs(s, TJ_OP_BROADCAST_TO, 1, &a, NULL, dtype, rank + 1,
                        out, NULL);
    }
    case 3: {  // slice constant dims
      for (int32_t i = 0; i < rank; ++i) {
        bool sym = !tj_dim_is_const(dims[i]);
        ints[i] = sym || dims[i] == 0 ? 0 : below(s->r, (uint32_t)dims[i]);
        ints[rank + i] = sym ? INT64_MAX : dims[i];
        ints[2 * rank + i] = sym ? 1 : 1 + below(s->r, 2);
      }
      attrs.num_ints = 3 * (uint32_t)rank;
      return with_attrs(s, TJ_OP_SLICE, 1, &a, &attrs, dtype, 0, NULL, NULL);
    }
    case 4: {  // pad
      for (int32_t i = 0; i < 2 * rank; ++i) ints[i] = below(s->r, 2);
      attrs.num_ints = 2 * (uint32_t)rank;
      attrs.value = uniform(s->r, -1, 1);
      return with_attrs(s, TJ_OP_PAD, 1, &a, &attrs, dtype, 0, NULL, NULL);
    }
    case 5: {  // concat with itself or a same-typed value
      uint32_t ops[2] = {a, below(s->r, 2) ? a : pick(s)};
      attrs.axis = rank ? below(s->r, (uint32_t)rank) : 0;
      return with_attrs(s, TJ_OP_CONCAT, 2, ops, &attrs, dtype, 0, NULL, NULL);
    }
    default: {  // cast, sometimes through a wider type and back
      static const tj_dtype_t kTo[] = {TJ_DTYPE_F32, TJ_DTYPE_F64,
                                       TJ_DTYPE_BF16, TJ_DTYPE_F16};
      tj_dtype_t to = kTo[below(s->r, 4)];
      if (s->config->wide_floats_only) to = kTo[to == TJ_DTYPE_F32];
      uint32_t t;
      if (!with_attrs(s, TJ_OP_CAST, 1, &a, NULL, to, 0, NULL, &t)) {
        return false;
      }
      if (below(s->r, 2)) return true;
      return with_attrs(s, TJ_OP_CAST, 1, &t, NULL, dtype, 0, NULL, NULL);
    }
  }
}

// Patterns the canonicalizer has rules for.
static inline bool gen_identity(gen_t* s) {
  uint32_t a = pick(s), c, t;
  tj_dtype_t dt = node(s, a)->dtype;
  switch (below(s->r, 11)) {
    case 9:  // not an identity for x = -0.0 (must stay)
      return add_scalar(s, dt, 0.0, &c) && op2(s, TJ_OP_ADD, a, c, NULL);
    case 10:  // not an identity for NaN and inf (must stay)
      return add_scalar(s, dt, 0.0, &c) && op2(s, TJ_OP_MUL, a, c, NULL);
    case 0:
      return add_scalar(s, dt, 1.0, &c) && op2(s, TJ_OP_MUL, c, a, NULL);
    case 1:
      return add_scalar(s, dt, -0.0, &c) && op2(s, TJ_OP_ADD, a, c, NULL);
    case 2:
      return add_scalar(s, dt, 0.0, &c) && op2(s, TJ_OP_SUB, a, c, NULL);
    case 3:
      return op1(s, TJ_OP_NEG, a, &t) && op1(s, TJ_OP_NEG, t, NULL);
    case 4:
      return add_scalar(s, dt, -1.0, &c) && op2(s, TJ_OP_MUL, a, c, NULL);
    case 5:
      return add_scalar(s, dt, 1.0, &c) && op2(s, TJ_OP_DIV, a, c, NULL);
    case 6:
      return op2(s, TJ_OP_MAXIMUM, a, a, NULL);
    case 7:
      return op1(s, TJ_OP_NEG, a, &t) && op2(s, TJ_OP_ADD, a, t, NULL);
    default: {  // broadcast of a scalar constant to a value's shape
      const tj_node_t* n = node(s, a);
      int64_t dims[TJ_MAX_RANK];
      for (int32_t i = 0; i < n->rank; ++i) dims[i] = n->dims[i];
      int32_t rank = n->rank;
      return add_scalar(s, dt, uniform(s->r, -2, 2), &c) &&
             with_attrs(s, TJ_OP_BROADCAST_TO, 1, &c, NULL, dt, rank, dims,
                        &t) &&
             op2(s, TJ_OP_ADD, a, t, NULL);
    }
  }
}

static inline bool gen_matmul(gen_t* s, bool linear) {
  uint32_t a = pick_float(s);
  const tj_node_t* n = node(s, a);
  if (n->rank == 0 || !tj_dim_is_const(n->dims[n->rank - 1])) return false;
  int64_t wd[2] = {n->dims[n->rank - 1], 1 + below(s->r, 4)};
  tj_dtype_t dt = n->dtype;
  uint32_t w, b = TJ_NODE_NONE;
  if (!add_input(s, dt, 2, wd, &w)) return false;
  if (!linear) return op2(s, TJ_OP_MATMUL, a, w, NULL);
  if (below(s->r, 3) && !add_input(s, dt, 1, &wd[1], &b)) return false;
  uint32_t ops[3] = {a, w, b};
  return with_attrs(s, TJ_OP_LINEAR, 3, ops, NULL, dt, 0, NULL, NULL);
}

// One value read by a matmul and by the pointwise op whose result another
// matmul reads: a = exp(x), b = a op y, a @ w, b @ w. a and b become two
// outputs of one pointwise kernel, which may write one of them in place
// of y (memplan) while computing the other from y.
static inline bool gen_fanout(gen_t* s) {
  static const tj_op_t kOps[] = {TJ_OP_ADD, TJ_OP_SUB, TJ_OP_MUL,
                                 TJ_OP_MAXIMUM};
  uint32_t x = pick_float(s);
  const tj_node_t* n = node(s, x);
  if (n->rank == 0 || !tj_dim_is_const(n->dims[n->rank - 1])) return false;
  int64_t wd[2] = {n->dims[n->rank - 1], 1 + below(s->r, 4)};
  tj_dtype_t dt = n->dtype;
  uint32_t a, b, w, y = TJ_NODE_NONE;
  if (!op1(s, below(s->r, 2) ? TJ_OP_EXP : TJ_OP_TANH, x, &a)) return false;
  if (below(s->r, 2)) {
    // y of a's shape from a gather (opaque: its own kernel), so that it
    // is in memory and the kernel of a and b reads it last. Rows -4..4
    // of 5 (make_inputs' integers) are all in range.
    // (Appending nodes may move the node array: read |x| before.)
    n = node(s, x);
    int32_t rank = n->rank;
    const int64_t* dims = n->dims;  // in the graph's arena: stays put
    int64_t td[2] = {5, dims[rank - 1]};
    uint32_t ops[2];
    if (!add_input(s, dt, 2, td, &ops[0]) ||
        !add_input(s, TJ_DTYPE_I64, rank - 1, dims, &ops[1])) {
      return false;
    }
    tj_attrs_t attrs;
    memset(&attrs, 0, sizeof(attrs));
    if (!with_attrs(s, TJ_OP_GATHER, 2, ops, &attrs, dt, 0, NULL, &y)) {
      return false;
    }
  }
  uint32_t other =
      y == TJ_NODE_NONE ? pick(s) : y;  // drawn first (gcc's order)
  if (!op2(s, kOps[below(s->r, TJ_ARRAY_SIZE(kOps))], a, other, &b)) {
    return false;
  }
  if (!add_input(s, dt, 2, wd, &w) || !op2(s, TJ_OP_MATMUL, a, w, NULL)) {
    return false;
  }
  return op2(s, TJ_OP_MATMUL, b, w, NULL);
}

static inline bool gen_composite(gen_t* s) {
  uint32_t a = pick_float(s);
  const tj_node_t* n = node(s, a);
  tj_attrs_t attrs;
  memset(&attrs, 0, sizeof(attrs));
  switch (below(s->r, 6)) {
    case 0:
      attrs.approximate = below(s->r, 2);
      return with_attrs(s, TJ_OP_GELU, 1, &a, &attrs, TJ_DTYPE_F32, 0, NULL,
                        NULL);
    case 1:
      return op1(s, TJ_OP_SILU, a, NULL);
    case 2:
    case 3:
      attrs.axis = n->rank ? below(s->r, (uint32_t)n->rank) : 0;
      return with_attrs(s, below(s->r, 2) ? TJ_OP_SOFTMAX : TJ_OP_LOG_SOFTMAX,
                        1, &a, &attrs, TJ_DTYPE_F32, 0, NULL, NULL);
    default: {
      uint32_t ops[3] = {a, TJ_NODE_NONE, TJ_NODE_NONE};
      int64_t last = n->rank ? n->dims[n->rank - 1] : 1;
      tj_dtype_t dt = n->dtype;
      if (below(s->r, 2) && !add_input(s, dt, 1, &last, &ops[1])) return false;
      if (below(s->r, 2) && !add_input(s, dt, 1, &last, &ops[2])) return false;
      attrs.value = 1e-5;
      bool layer = below(s->r, 2);
      return with_attrs(s, layer ? TJ_OP_LAYER_NORM : TJ_OP_RMS_NORM,
                        layer ? 3 : 2, ops, &attrs, TJ_DTYPE_F32, 0, NULL,
                        NULL);
    }
  }
}

static inline bool gen_full(gen_t* s) {
  uint32_t a = pick(s);
  const tj_node_t* n = node(s, a);
  int64_t dims[TJ_MAX_RANK];
  for (int32_t i = 0; i < n->rank; ++i) dims[i] = n->dims[i];
  tj_attrs_t attrs;
  memset(&attrs, 0, sizeof(attrs));
  attrs.value = uniform(s->r, -2, 2);
  uint32_t f;
  int32_t rank = n->rank;
  tj_dtype_t dt = n->dtype;
  return with_attrs(s, TJ_OP_FULL, 0, NULL, &attrs, dt, rank, dims, &f) &&
         op2(s, TJ_OP_MUL, a, f, NULL);
}

// An input made finite: tanh of it, its NaNs 0. Where a product with a
// zero that stands for a masked key or a padded tap would turn an
// infinite or NaN operand into NaN, the API leaves the result unspecified
// (a kernel that skips the key or tap gives the reference's value, one
// that multiplies it gives NaN), so those operands are kept finite.
// With |positive|, exp of that (NaNs 1), in (1/e, e).
static inline bool add_finite_input(gen_t* s, tj_dtype_t dt, int32_t rank,
                                    const int64_t* dims, bool positive,
                                    uint32_t* out) {
  uint32_t raw, same, bounded, other;
  if (!add_input(s, dt, rank, dims, &raw) ||
      !op2(s, TJ_OP_EQ, raw, raw, &same) ||
      !op1(s, TJ_OP_TANH, raw, &bounded) ||
      (positive && !op1(s, TJ_OP_EXP, bounded, &bounded)) ||
      !add_scalar(s, dt, positive ? 1.0 : 0.0, &other))
    return false;
  const uint32_t ops[3] = {same, bounded, other};
  return with_attrs(s, TJ_OP_WHERE, 3, ops, NULL, dt, 0, NULL, out);
}

// The model ops with kernels of their own (issue 14's attention, issue
// 15's conv and pools) on fresh inputs of a float dtype drawn from the
// graph's values; their results then feed the ops that follow like any
// other value. Shapes: [N, C, H, W] with N the batch B or a constant, C 1
// to 6, H and W 1 to 9; windows of 1 to 3 with strides, dilations and
// pads of 0 to 2 (inference drops a window that leaves no output), groups
// 1, 2 or depthwise; attention's q [N, H, Tq, D], k and v [N, Hkv, Tk, D
// or Dv] with Tq and Tk B or constants, grouped heads, no mask, a bool or
// an additive one, causal or not.
static inline bool gen_nn(gen_t* s, uint32_t* out) {
  const tj_dtype_t dt = node(s, pick_float(s))->dtype;
  if (!tj_dtype_is_float(dt)) return false;
  const int64_t n = below(s->r, 2) ? s->B : 1 + below(s->r, 3);
  tj_attrs_t attrs;
  memset(&attrs, 0, sizeof(attrs));
  const uint32_t kind = below(s->r, 4);
  if (kind == 3) {  // attention
    const int64_t hkv = 1 + below(s->r, 2), h = hkv * (1 + below(s->r, 2));
    const int64_t tq = below(s->r, 3) ? 1 + below(s->r, 9) : s->B;
    const int64_t tk = below(s->r, 3) ? 1 + below(s->r, 9) : s->B;
    static const int64_t kHeadDims[] = {1, 4, 8, 16};
    const int64_t d = kHeadDims[below(s->r, 4)];
    const int64_t dv = below(s->r, 2) ? d : kHeadDims[below(s->r, 4)];
    const int64_t qd[4] = {n, h, tq, d}, kd[4] = {n, hkv, tk, d},
                  vd[4] = {n, hkv, tk, dv}, md[2] = {tq, tk};
    uint32_t ops[4] = {TJ_NODE_NONE, TJ_NODE_NONE, TJ_NODE_NONE, TJ_NODE_NONE};
    // v finite: tj_graph_attention leaves an infinite or NaN v at a key of
    // zero weight unspecified.
    if (!add_input(s, dt, 4, qd, &ops[0]) ||
        !add_input(s, dt, 4, kd, &ops[1]) ||
        !add_finite_input(s, dt, 4, vd, false, &ops[2]))
      return false;
    const uint32_t mask = below(s->r, 4);  // 0, 1: none; 2: bool; 3: added
    if (mask >= 2 &&
        !add_input(s, mask == 2 ? TJ_DTYPE_BOOL : dt, 2, md, &ops[3]))
      return false;
    int64_t causal = below(s->r, 2);
    attrs.value = below(s->r, 2) ? 0.0 : uniform(s->r, 0.1, 1.0);
    attrs.ints = &causal;
    attrs.num_ints = 1;
    return with_attrs(s, TJ_OP_ATTENTION, 4, ops, &attrs, dt, 0, NULL, out);
  }
  const int64_t c = 1 + below(s->r, 6);
  const int64_t xd[4] = {n, c, 1 + below(s->r, 9), 1 + below(s->r, 9)};
  uint32_t ops[3] = {TJ_NODE_NONE, TJ_NODE_NONE, TJ_NODE_NONE};
  if (!add_input(s, dt, 4, xd, &ops[0])) return false;
  // lib/window.h's ints: groups, flags, then kernel, strides, dilations,
  // pads begin, pads end and output padding, one entry per spatial axis.
  int64_t ints[2 + 6 * 2];
  memset(ints, 0, sizeof(ints));
  for (int32_t i = 0; i < 2; ++i) {
    ints[2 + i] = 1 + below(s->r, 3);         // kernel
    ints[4 + i] = 1 + below(s->r, 2);         // stride
    ints[6 + i] = 1 + (below(s->r, 4) == 0);  // dilation
    ints[8 + i] = below(s->r, 3);             // pad begin
    ints[10 + i] = below(s->r, 3);            // pad end
  }
  attrs.ints = ints;
  attrs.num_ints = 2 + 6 * 2;
  if (kind == 0) {  // conv
    const uint32_t g = below(s->r, 3);
    const int64_t groups = g == 0 ? 1 : g == 1 ? c : (c % 2 ? 1 : 2);
    const int64_t o = groups * (1 + below(s->r, 3));
    const int64_t wd[4] = {o, c / groups, ints[2], ints[3]};
    ints[0] = groups;
    // w finite: tj_graph_conv leaves an infinite or NaN weight at a tap
    // that reads padding unspecified. And positive, so that a window of
    // padding sums +0 products only: the random tests compare zero signs,
    // and a kernel that multiplies the padding must then agree with one
    // that skips it.
    if (!add_finite_input(s, dt, 4, wd, true, &ops[1])) return false;
    if (below(s->r, 2) && !add_input(s, dt, 1, &o, &ops[2])) return false;
    return with_attrs(s, TJ_OP_CONV, 3, ops, &attrs, dt, 0, NULL, out);
  }
  // Pools: no dilation; a pad at most half the window (torch's rule).
  for (int32_t i = 0; i < 2; ++i) {
    ints[6 + i] = 1;
    ints[8 + i] = ints[8 + i] > ints[2 + i] / 2 ? ints[2 + i] / 2 : ints[8 + i];
    ints[10 + i] = ints[8 + i];
  }
  ints[1] = below(s->r, 2) ? TJ_WINDOW_CEIL_MODE : 0;
  if (kind == 2 && below(s->r, 2)) ints[1] |= TJ_WINDOW_COUNT_INCLUDE_PAD;
  return with_attrs(s, kind == 1 ? TJ_OP_MAX_POOL : TJ_OP_AVG_POOL, 1, ops,
                    &attrs, dt, 0, NULL, out);
}

// A graph of choices drawn from |r|, named |name|; NULL when none could be
// built.
static inline tj_graph_t* generate_with(tj_context_t* ctx, rng_t* rng,
                                        const char* name,
                                        const gen_config_t* config) {
  rng_t r = *rng;
  gen_t s;
  memset(&s, 0, sizeof(s));
  s.r = &r;
  s.config = config;
  char out_name[32];
  if (tj_graph_create(ctx, name, &s.g)) return NULL;
  tj_status_t st = tj_dim_symbol(&s.g->dims, "B", &s.B);
  if (st) {
    tj_status_free(st);
    tj_graph_destroy(s.g);
    return NULL;
  }
  if (config->batched_input) {  // binds B, which broadcast_to may use
    // One draw a statement (see gen_unary), in the order gcc took.
    int64_t d1 = random_dim(&s);
    int64_t d2 = random_dim(&s);
    int64_t dims[3] = {s.B, d1, d2};
    int32_t rank = 1 + (int32_t)below(&r, 3);
    add_input(&s, random_dtype(&s), rank, dims, NULL);
  }
  int inputs = 1 + (int)below(&r, 3);
  for (int i = 0; i < inputs; ++i) add_random_input(&s);
  if (s.num_vals == 0) add_random_input(&s);
  int ops = config->min_ops + (int)below(&r, (uint32_t)config->extra_ops);
  int max_tries = 4 * ops > 200 ? 4 * ops : 200;
  for (int i = 0, tries = 0; i < ops && tries < max_tries && s.num_vals;
       ++tries) {
    bool ok;
    if (config->fanout_in && below(&r, (uint32_t)config->fanout_in) == 0) {
      i += gen_fanout(&s);
      continue;
    }
    switch (below(&r, 16)) {
      case 0:
      case 1:
        ok = gen_unary(&s);
        break;
      case 2:
      case 3:
      case 4:
        ok = gen_binary(&s);
        break;
      case 5:
        ok = gen_where(&s);
        break;
      case 6:
      case 7:
        ok = gen_reduce(&s);
        break;
      case 8:
      case 9:
        ok = gen_movement(&s);
        break;
      case 10:
      case 11:
        ok = gen_identity(&s);
        break;
      case 12:
        ok = gen_matmul(&s, below(&r, 2));
        break;
      case 13:
      case 14:
        ok = gen_composite(&s);
        break;
      default:
        ok = gen_full(&s);
        break;
    }
    i += ok;
  }
  // The last value and up to two others are outputs; or, half the time,
  // every value nothing reads (so that little is dead and fusion sees every
  // multi-use pattern the graph has).
  uint32_t last = s.g->num_nodes - 1;
  st = tj_graph_append_output(s.g, last, "out0");
  if (!st && below(&r, 2)) {
    for (uint32_t i = 0; !st && i < last && s.g->num_outputs < 6; ++i) {
      tj_op_t op = s.g->nodes[i].op;
      if (op == TJ_OP_INPUT || op == TJ_OP_CONSTANT) continue;
      bool read = false;
      for (uint32_t j = i + 1; j < s.g->num_nodes && !read; ++j) {
        const tj_node_t* n = &s.g->nodes[j];
        for (uint32_t k = 0; k < n->num_operands; ++k) {
          read |= n->operands[k] == i;
        }
      }
      if (read) continue;
      snprintf(out_name, sizeof(out_name), "out%u", s.g->num_outputs);
      st = tj_graph_append_output(s.g, i, out_name);
    }
  }
  uint32_t extra = below(&r, 3);
  for (uint32_t k = 0; !st && k < extra && s.num_vals > 1; ++k) {
    uint32_t other = s.vals[below(&r, s.num_vals)];
    bool used = false;
    for (uint32_t j = 0; j < s.g->num_outputs; ++j) {
      used |= s.g->outputs[j].node == other;
    }
    if (used) continue;
    snprintf(out_name, sizeof(out_name), "out%u", s.g->num_outputs);
    st = tj_graph_append_output(s.g, other, out_name);
  }
  // The model ops come last, from a stream of their own, each with a
  // pointwise follower (an epilogue to fuse) and as an extra output: the
  // graph before them, and so every earlier seed's graph, is unchanged.
  if (config->nn_in) {
    rng_t nr = {rng->s ^ 0x6e6e6f70735eedull, NULL, 0, 0};
    s.r = &nr;
    static const tj_op_t kFollowers[] = {TJ_OP_RELU, TJ_OP_TANH, TJ_OP_SIGMOID,
                                         TJ_OP_NEG};
    const uint32_t count = below(&nr, (uint32_t)config->nn_in + 1);
    for (uint32_t k = 0; !st && k < count && s.num_vals; ++k) {
      uint32_t y;
      if (!gen_nn(&s, &y)) continue;
      if (below(&nr, 2))
        op1(&s, kFollowers[below(&nr, TJ_ARRAY_SIZE(kFollowers))], y, &y);
      snprintf(out_name, sizeof(out_name), "out%u", s.g->num_outputs);
      st = tj_graph_append_output(s.g, y, out_name);
    }
  }
  if (!st) st = tj_graph_finalize(s.g);
  if (st) {
    tj_status_free(st);
    tj_graph_destroy(s.g);
    return NULL;
  }
  return s.g;
}

static inline tj_graph_t* generate_ex(tj_context_t* ctx, uint64_t seed,
                                      const gen_config_t* config) {
  rng_t r = {seed * 0x2545f4914f6cdd1dull + 1, NULL, 0, 0};
  char name[32];
  snprintf(name, sizeof(name), "seed%llu", (unsigned long long)seed);
  return generate_with(ctx, &r, name, config);
}

static inline tj_graph_t* generate(tj_context_t* ctx, uint64_t seed) {
  static const gen_config_t kSmall = {3, 10, 0, 0, false, false, 0};
  return generate_ex(ctx, seed, &kSmall);
}

// 100 to 250 nodes: 60 to 140 ops (each one to three nodes, plus the
// inputs and constants they make), a third of the operands any earlier
// value.
static inline tj_graph_t* generate_large(tj_context_t* ctx, uint64_t seed) {
  static const gen_config_t kLarge = {60, 80, 3, 8, true, true, 4};
  return generate_ex(ctx, seed, &kLarge);
}

//===--- running and comparing ---===//

typedef struct run_t {
  int32_t num_outputs;
  void* data[kMaxRunOutputs];
  size_t bytes[kMaxRunOutputs];
  int64_t shape[kMaxRunOutputs][TJ_MAX_RANK];
  int32_t rank[kMaxRunOutputs];
  tj_dtype_t dtype[kMaxRunOutputs];
} run_t;

static inline void run_free(run_t* r) {
  for (int32_t i = 0; i < r->num_outputs; ++i) free(r->data[i]);
  memset(r, 0, sizeof(*r));
}

typedef struct inputs_t {
  int32_t count;
  tj_tensor_t t[kMaxRunInputs];
  int64_t shape[kMaxRunInputs][TJ_MAX_RANK];
  void* data[kMaxRunInputs];
  bool huge;  // some value is a huge magnitude of its type
} inputs_t;

static inline void inputs_free(inputs_t* in) {
  for (int32_t i = 0; i < in->count; ++i) free(in->data[i]);
  memset(in, 0, sizeof(*in));
}

// Relative noise a few units in the last place of |dtype|: about what the
// rounding of one rewritten intermediate changes.
static inline double noise_of(tj_dtype_t dtype) {
  switch (dtype) {
    case TJ_DTYPE_F64:
      return 1e-14;
    case TJ_DTYPE_F32:
      return 1e-6;
    case TJ_DTYPE_F16:
      return 4e-3;
    case TJ_DTYPE_BF16:
      return 2e-2;
    default:
      return 0.0;
  }
}

// A subnormal of |dtype| (a quarter of its smallest normal), and a
// magnitude a quarter of its largest finite value.
static inline double subnormal_of(tj_dtype_t dtype) {
  switch (dtype) {
    case TJ_DTYPE_F64:
      return 0x1p-1024;
    case TJ_DTYPE_F16:
      return 0x1p-16;
    default:  // f32 and bf16 share the exponent range
      return 0x1p-128;
  }
}

static inline double huge_of(tj_dtype_t dtype) {
  switch (dtype) {
    case TJ_DTYPE_F64:
      return 0x1p1021;
    case TJ_DTYPE_F16:
      return 0x1p13;
    default:
      return 0x1p125;
  }
}

// Random inputs for |g| at batch |B|; with |perturb|, the same values with
// relative noise (noise_of) added; with |specials|, a few signed zeros,
// infinities and NaNs among the float values.
static inline bool make_inputs_mode(const tj_graph_t* g, int64_t B,
                                    uint64_t seed, bool perturb, bool specials,
                                    bool tame, uint64_t noise_salt,
                                    inputs_t* in) {
  rng_t r = {seed ^ 0x5eedull, NULL, 0, 0};
  rng_t noise = {seed ^ 0xa11ceull ^ (noise_salt * 0x9e3779b97f4a7c15ull), NULL,
                 0, 0};
  memset(in, 0, sizeof(*in));
  int64_t values[TJ_MAX_SYMBOLS] = {0};
  values[0] = B;
  if (g->num_inputs > kMaxRunInputs) return false;
  for (uint32_t i = 0; i < g->num_inputs; ++i) {
    const tj_node_t* n = &g->nodes[g->inputs[i]];
    int64_t numel = 1;
    for (int32_t d = 0; d < n->rank; ++d) {
      int64_t v;
      tj_status_t st = tj_dim_eval(&g->dims, n->dims[d], values, &v);
      if (st) {
        tj_status_free(st);
        return false;
      }
      in->shape[i][d] = v;
      numel *= v;
    }
    size_t bytes = (size_t)numel * tj_dtype_size(n->dtype);
    in->data[i] = malloc(bytes ? bytes : 1);
    in->count = (int32_t)i + 1;
    for (int64_t k = 0; k < numel; ++k) {
      if (tj_dtype_is_float(n->dtype)) {
        // Mostly ordinary values; a few signed zeros, infinities and NaNs,
        // which the float-care rules of canonicalize must respect, and
        // subnormals and huge magnitudes of the input's own type (kernels
        // may flush the former; the latter overflow in a product).
        static const double kSpecial[] = {0.0, -0.0, INFINITY, -INFINITY,
                                          NAN, 1.0,  -1.0};
        double v;
        if (below(&r, 32) == 0 && specials) {
          uint64_t pick = below(&r, TJ_ARRAY_SIZE(kSpecial) + 2);
          double sign = below(&r, 2) ? -1.0 : 1.0;
          if (pick < TJ_ARRAY_SIZE(kSpecial)) {
            v = kSpecial[pick];
          } else if (pick == TJ_ARRAY_SIZE(kSpecial)) {
            v = sign * subnormal_of(n->dtype);
          } else if (tame) {  // the same stream, an ordinary value
            v = sign * 1.5;
          } else {
            v = sign * huge_of(n->dtype);
            in->huge = true;
          }
        } else {
          v = uniform(&r, -2, 2);
        }
        if (perturb) v *= 1.0 + noise_of(n->dtype) * uniform(&noise, -1, 1);
        tj_store_f64(n->dtype, in->data[i], k, v);
      } else {
        tj_store_i64(n->dtype, in->data[i], k, (int64_t)below(&r, 9) - 4);
      }
    }
    in->t[i] = tj_tensor_make(in->data[i], n->dtype, n->rank, in->shape[i]);
  }
  return true;
}

static inline bool make_inputs_ex(const tj_graph_t* g, int64_t B, uint64_t seed,
                                  bool perturb, bool specials, inputs_t* in) {
  return make_inputs_mode(g, B, seed, perturb, specials, false, 0, in);
}

static inline bool make_inputs(const tj_graph_t* g, int64_t B, uint64_t seed,
                               bool perturb, inputs_t* in) {
  return make_inputs_ex(g, B, seed, perturb, true, in);
}

// The same inputs as make_inputs, with every huge magnitude replaced by an
// ordinary value: a mismatch that goes away with them is an overflow of
// the narrow type that the f64 reference did not have (issue 19 item 2
// classifies those apart from failures).
static inline bool make_inputs_tame(const tj_graph_t* g, int64_t B,
                                    uint64_t seed, inputs_t* in) {
  return make_inputs_mode(g, B, seed, false, true, true, 0, in);
}

static inline tj_status_t run_graph(const tj_graph_t* g, const inputs_t* in,
                                    run_t* out) {
  memset(out, 0, sizeof(*out));
  tj_tensor_t tensors[kMaxRunOutputs];
  out->num_outputs = (int32_t)g->num_outputs;
  for (int32_t i = 0; i < out->num_outputs; ++i) {
    TJ_RETURN_IF_ERROR(tj_graph_output_shape(g, in->t, in->count, i,
                                             &out->rank[i], out->shape[i]));
    int64_t numel = 1;
    for (int32_t d = 0; d < out->rank[i]; ++d) numel *= out->shape[i][d];
    out->dtype[i] = g->nodes[g->outputs[i].node].dtype;
    out->bytes[i] = (size_t)numel * tj_dtype_size(out->dtype[i]);
    out->data[i] = calloc(1, out->bytes[i] ? out->bytes[i] : 1);
    tensors[i] = tj_tensor_make(out->data[i], out->dtype[i], out->rank[i],
                                out->shape[i]);
  }
  return tj_reference_run(g, in->t, in->count, tensors, out->num_outputs);
}

// As run_graph, but compiled with |options| (tj_compile) and run by the
// executable.
static inline tj_status_t run_compiled(const tj_graph_t* g, const inputs_t* in,
                                       const tj_compile_options_t* options,
                                       run_t* out) {
  memset(out, 0, sizeof(*out));
  tj_tensor_t tensors[kMaxRunOutputs];
  out->num_outputs = (int32_t)g->num_outputs;
  for (int32_t i = 0; i < out->num_outputs; ++i) {
    TJ_RETURN_IF_ERROR(tj_graph_output_shape(g, in->t, in->count, i,
                                             &out->rank[i], out->shape[i]));
    int64_t numel = 1;
    for (int32_t d = 0; d < out->rank[i]; ++d) numel *= out->shape[i][d];
    out->dtype[i] = g->nodes[g->outputs[i].node].dtype;
    out->bytes[i] = (size_t)numel * tj_dtype_size(out->dtype[i]);
    out->data[i] = calloc(1, out->bytes[i] ? out->bytes[i] : 1);
    tensors[i] = tj_tensor_make(out->data[i], out->dtype[i], out->rank[i],
                                out->shape[i]);
  }
  tj_executable_t* exe = NULL;
  TJ_RETURN_IF_ERROR(tj_compile(g, options, &exe));
  tj_status_t st =
      tj_executable_run(exe, in->t, in->count, tensors, out->num_outputs);
  tj_executable_release(exe);
  return st;
}

// |a| (reference of the input graph) and |b| agree within |dtype|'s
// tolerance; NaN matches NaN, infinities match themselves.
static inline bool close_enough(tj_dtype_t dtype, double want, double got) {
  if (isnan(want) || isnan(got)) return isnan(want) && isnan(got);
  if (isinf(want) || isinf(got)) {
    // Overflow may happen at a slightly different point of a rewritten
    // chain; a huge finite value against an infinity of the same sign is
    // the same answer.
    return want == got || (signbit(want) == signbit(got) &&
                           fabs(isinf(want) ? got : want) > 1e30);
  }
  // Signed zeros are part of the semantics the rewrites must keep (x + 0.0
  // is not x for x = -0.0).
  if (want == 0.0 && got == 0.0) return signbit(want) == signbit(got);
  double rtol, atol;
  switch (dtype) {
    case TJ_DTYPE_F64:
      rtol = 1e-9;
      atol = 1e-9;
      break;
    case TJ_DTYPE_F32:
      rtol = 1e-4;
      atol = 1e-4;
      break;
    case TJ_DTYPE_F16:
      rtol = 1e-2;
      atol = 1e-2;
      break;
    case TJ_DTYPE_BF16:
      rtol = 4e-2;
      atol = 4e-2;
      break;
    default:
      return want == got;
  }
  return fabs(want - got) <= atol + rtol * fabs(want);
}

// The tolerance follows the least precise float type the graph computes
// in: an f32 result cast to f64 carries f32 rounding.
static inline tj_dtype_t working_dtype(const tj_graph_t* g, tj_dtype_t out) {
  if (!tj_dtype_is_float(out)) return out;
  static const tj_dtype_t kByPrecision[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16,
                                            TJ_DTYPE_F32, TJ_DTYPE_F64};
  for (size_t k = 0; k < TJ_ARRAY_SIZE(kByPrecision); ++k) {
    for (uint32_t i = 0; i < g->num_nodes; ++i) {
      if (g->nodes[i].dtype == kByPrecision[k]) return kByPrecision[k];
    }
  }
  return out;
}

// Whether every output of |a| and |b| agrees within tolerance; else writes
// the first difference into |what| (if not NULL).
static inline bool outputs_agree(const tj_graph_t* g, const run_t* a,
                                 const run_t* b, char* what, size_t size) {
  for (int32_t o = 0; o < a->num_outputs; ++o) {
    tj_dtype_t working = working_dtype(g, a->dtype[o]);
    int64_t n = (int64_t)(a->bytes[o] / tj_dtype_size(a->dtype[o]));
    for (int64_t k = 0; k < n; ++k) {
      double w = tj_load_f64(a->dtype[o], a->data[o], k);
      double v = tj_load_f64(b->dtype[o], b->data[o], k);
      if (!close_enough(working, w, v)) {
        if (what) {
          snprintf(what, size,
                   "output %d element %lld: reference %.9g, "
                   "optimized %.9g",
                   o, (long long)k, w, v);
        }
        return false;
      }
    }
  }
  return true;
}

// Whether |g|'s outputs on |noisy| inputs agree with |clean|, its outputs
// on the same inputs without noise: a graph that amplifies a few ulps of noise
// beyond the tolerance is ill-conditioned at these inputs.
static inline bool stable(const tj_graph_t* g, const inputs_t* noisy,
                          const run_t* clean) {
  run_t r;
  tj_status_t st = run_graph(g, noisy, &r);
  bool ok = !st && outputs_agree(g, clean, &r, NULL, 0);
  tj_status_free(st);
  run_free(&r);
  return ok;
}

// Finishes |rw| when |st| is OK, else abandons it: the rewritten graph, or
// NULL (|st| or the finish's failure freed).
static inline tj_graph_t* finish_or_null(tj_rewriter_t* rw, tj_status_t st) {
  tj_graph_t* out = NULL;
  if (!st) {
    st = tj_rewriter_finish(rw, &out);
  } else {
    tj_rewriter_abandon(rw);
  }
  bool failed = st != NULL;
  tj_status_free(st);
  return failed ? NULL : out;
}

// Whether a float FULL or CONSTANT node holds a value that is not an
// integer (an integer one may be an exponent or a count, where noise would
// change what the graph means rather than how well it is conditioned).
static inline bool fractional_constant(const tj_node_t* n) {
  if (!tj_dtype_is_float(n->dtype)) return false;
  if (n->op == TJ_OP_FULL) {
    return isfinite(n->attrs.value) && n->attrs.value != floor(n->attrs.value);
  }
  if (n->op != TJ_OP_CONSTANT) return false;
  int64_t count = 1;
  for (int32_t k = 0; k < n->rank; ++k) count *= n->dims[k];
  for (int64_t k = 0; k < count; ++k) {
    double v = tj_load_f64(n->dtype, n->attrs.data, k);
    if (isfinite(v) && v != floor(v)) return true;
  }
  return false;
}

// |g| with each fractional float constant (fractional_constant) scaled by
// 1 + a few ulps of its type (noise_of) drawn from |salt|: the graph's
// leaves that make_inputs' noise does not reach. NULL when the rewrite
// fails.
static inline tj_graph_t* noisy_constants(const tj_graph_t* g, uint64_t salt) {
  rng_t noise = {0xc0457ull ^ (salt * 0x9e3779b97f4a7c15ull), NULL, 0, 0};
  tj_rewriter_t rw;
  if (tj_rewriter_begin(&rw, g)) return NULL;
  tj_status_t st = NULL;
  for (uint32_t i = 0; !st && i < g->num_nodes; ++i) {
    const tj_node_t* n = &g->nodes[i];
    if (n->op == TJ_OP_INPUT) continue;
    st = tj_rewriter_clone(&rw, i);
    if (st || !fractional_constant(n)) continue;
    uint32_t factor, ops[2];
    st = tj_rewriter_scalar(&rw, n->dtype,
                            1.0 + noise_of(n->dtype) * uniform(&noise, -1, 1),
                            &factor);
    ops[0] = rw.map[i];
    ops[1] = factor;
    if (!st) st = tj_rewriter_op(&rw, TJ_OP_MUL, 2, ops, &rw.map[i]);
  }
  return finish_or_null(&rw, st);
}

// Whether |g|'s outputs move beyond the tolerance from |clean| (its
// outputs on make_inputs(seed)) under any of a few more draws of a few
// ulps of input noise, or of that noise with the graph's fractional
// constants perturbed as well (noisy_constants: cos(prod(full(1.85))) over
// 48 elements, seed 1035384, is cos of 6e12, whose f32 product's rounding
// decides the result; no input reaches it). stable() tries one draw; a value
// that is rounding noise by construction (the sum of a layer_norm row, exactly
// 0 in real arithmetic) flips a sign or a comparison after it under about half
// of the draws, so a mismatch is checked against more of them before it counts
// (seed 66151: sign(sum(layer_norm(x))) was -1 in the reference and +1 in the
// decomposition).
static inline bool unstable_under_noise(const tj_graph_t* g, int64_t B,
                                        uint64_t seed, const run_t* clean) {
  enum { kDraws = 4 };
  for (uint64_t salt = 1; salt <= kDraws; ++salt) {
    inputs_t noisy;
    bool made = make_inputs_mode(g, B, seed, true, true, false, salt, &noisy);
    bool moved = made && !stable(g, &noisy, clean);
    if (made && !moved) {
      tj_graph_t* g2 = noisy_constants(g, salt);
      moved = g2 && !stable(g2, &noisy, clean);
      tj_graph_destroy(g2);
    }
    inputs_free(&noisy);
    if (moved) return true;
  }
  return false;
}

static inline bool is_narrow_float(tj_dtype_t dtype) {
  return tj_dtype_is_float(dtype) && dtype != TJ_DTYPE_F64;
}

// Appends cast(|node|) to |dtype|, of new-graph shape |rank|, |dims|.
static inline tj_status_t widen_cast(tj_rewriter_t* rw, uint32_t node,
                                     tj_dtype_t dtype, int32_t rank,
                                     const int64_t* dims, uint32_t* out) {
  tj_node_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.op = TJ_OP_CAST;
  desc.num_operands = 1;
  desc.operands = &node;
  desc.dtype = dtype;
  desc.rank = rank;
  desc.dims = dims;
  return tj_graph_append(rw->dst, &desc, out);
}

// |g| with every f32, f16 and bf16 value computed and kept in f64: inputs
// and constants are cast to f64 where they enter, typed leaves (full,
// iota) are made f64, and a cast to a narrow float keeps its rounding (the
// cast, then a cast back to f64); outputs are f64. NULL when some node
// refuses f64 operands (or holds a custom op, whose implementation takes
// its declared dtypes). The optimizer's rewrites are exact in real
// arithmetic, so |g| and its optimized form agree widened even where f32
// intermediates overflow or cancel differently (layer_norm's decomposed
// variance of values near 1e20 is inf in f32, not in the reference's
// one-node layer_norm).
static inline tj_graph_t* widened(const tj_graph_t* g) {
  tj_rewriter_t rw;
  if (tj_rewriter_begin(&rw, g)) return NULL;
  tj_status_t st = NULL;
  for (uint32_t i = 0; !st && i < g->num_nodes; ++i) {
    const tj_node_t* n = &g->nodes[i];
    int64_t dims[TJ_MAX_RANK];
    st = tj_rewriter_dims(&rw, n->rank, n->dims, dims);
    if (st) break;
    bool narrow = is_narrow_float(n->dtype);
    if (n->op == TJ_OP_CUSTOM) {
      st = tj_unsupported("custom op");
    } else if (n->op == TJ_OP_INPUT) {
      if (narrow) {
        st =
            widen_cast(&rw, rw.map[i], TJ_DTYPE_F64, n->rank, dims, &rw.map[i]);
      }
    } else if (n->op == TJ_OP_CONSTANT || (n->op == TJ_OP_CAST && narrow)) {
      uint32_t copy;
      st = tj_rewriter_copy(&rw, i, NULL, &copy);
      if (!st && narrow) {
        st = widen_cast(&rw, copy, TJ_DTYPE_F64, n->rank, dims, &copy);
      }
      if (!st) rw.map[i] = copy;
    } else {
      uint32_t ops[16];
      if (n->num_operands > TJ_ARRAY_SIZE(ops)) {
        st = tj_unsupported("too many operands");
        break;
      }
      for (uint32_t k = 0; k < n->num_operands; ++k) {
        ops[k] = n->operands[k] == TJ_NODE_NONE ? TJ_NODE_NONE
                                                : rw.map[n->operands[k]];
      }
      tj_node_desc_t desc;
      memset(&desc, 0, sizeof(desc));
      desc.op = n->op;
      desc.num_operands = n->num_operands;
      desc.operands = ops;
      desc.dtype = narrow ? TJ_DTYPE_F64 : n->dtype;
      desc.rank = n->rank;
      desc.dims = dims;
      desc.attrs = n->attrs;
      st = tj_graph_append(rw.dst, &desc, &rw.map[i]);
    }
  }
  return finish_or_null(&rw, st);
}

// Whether |g| and |optimized| agree on |in| when both compute in f64
// (widened): then a mismatch in their own types is the narrow type's
// overflow or rounding, not a wrong rewrite.
static inline bool agree_widened(const tj_graph_t* g, const inputs_t* in,
                                 const tj_graph_t* optimized) {
  tj_graph_t* wide_g = widened(g);
  tj_graph_t* wide_opt = wide_g ? widened(optimized) : NULL;
  bool agree = false;
  if (wide_opt) {
    run_t want, got;
    memset(&got, 0, sizeof(got));
    tj_status_t st = run_graph(wide_g, in, &want);
    if (!st) st = run_graph(wide_opt, in, &got);
    // The tolerance of |g|'s own working type: the widened graphs still
    // reassociate, in f64.
    agree = !st && outputs_agree(g, &want, &got, NULL, 0);
    tj_status_free(st);
    run_free(&want);
    run_free(&got);
  }
  tj_graph_destroy(wide_opt);
  tj_graph_destroy(wide_g);
  return agree;
}

// Whether a mismatch of |g| at these inputs is only an overflow (or a
// rounding) of the narrow type that the f64 reference did not have:
//   - |optimized| given (the passes alone): the two agree widened to f64;
//   - or |in| holds huge magnitudes, and with them replaced by ordinary
//     values (make_inputs_tame) the reference of |g| agrees with
//     |optimized| run by the reference, or, when |optimized| is NULL, with
//     |g| compiled by |options|.
static inline bool only_overflow(const tj_graph_t* g, const inputs_t* in,
                                 const tj_graph_t* optimized,
                                 const tj_compile_options_t* options, int64_t B,
                                 uint64_t seed) {
  if (optimized && agree_widened(g, in, optimized)) return true;
  if (!in->huge) return false;
  inputs_t tame;
  run_t want, got;
  memset(&want, 0, sizeof(want));
  memset(&got, 0, sizeof(got));
  bool agree = false;
  if (make_inputs_tame(g, B, seed, &tame)) {
    tj_status_t st = run_graph(g, &tame, &want);
    if (!st) {
      st = optimized ? run_graph(optimized, &tame, &got)
                     : run_compiled(g, &tame, options, &got);
    }
    agree = !st && outputs_agree(g, &want, &got, NULL, 0);
    tj_status_free(st);
  }
  run_free(&want);
  run_free(&got);
  inputs_free(&tame);
  return agree;
}

#endif  // TJ_TESTS_UNIT_RANDOM_GRAPH_H_
