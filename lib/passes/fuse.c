// lib/passes/fuse.c
//
// Groups the graph's nodes into kernels (lib/passes/fusion.h says what a
// group promises a backend). Three phases, after Inductor's "decide what to
// realize, then fuse kernels" and XLA's cost rules:
//
// 1. Materialize or inline, consumers first. Reductions, matmuls, opaque
//    ops, graph outputs and values read by a matmul or an opaque op are
//    materialized (written to memory). Any other node is inlined into the
//    kernels of the materialized values it feeds ("roots"): with one root it
//    is simply part of that kernel; with several it would be recomputed in
//    each, which the byte rule decides: recompute when
//      roots * bytes(operands) <= bytes(node) * (1 + roots)
//    (reading the operands again in every consumer kernel versus writing
//    the node once and reading it in every consumer), never for EXPENSIVE
//    ops (lib/ops.def: exp, log, tanh, erf, sigmoid, pow, div, sqrt, ...;
//    XLA's is_expensive) and never into more than kMaxRoots kernels. Duplicates
//    are sets, not trees, so recomputation cannot blow up exponentially.
//    A node that would grow a kernel past fuse_max_nodes is materialized,
//    so that every phase-2 kernel is a legal group.
// 2. Each materialized node becomes a kernel with the nodes inlined into it
//    (plus the generators full/iota it reads, which cost nothing).
// 3. Kernels merge, best first: a producer into its consumer (matmul
//    epilogues first, then by bytes no longer written and read), then
//    siblings reading the same buffer (by bytes shared, only above
//    kSiblingMinBytes). A merge happens only if the union is a legal group
//    (classify(): one matmul, or one conv left whole, with an elementwise
//    epilogue of its shape;
//    reductions over the same axes of one shape with elementwise epilogues;
//    pointwise groups of one output shape) and creates no cycle among the
//    groups. A value all of whose readers end up inside its group stops
//    being materialized. Up to kMaxRounds rounds, as Inductor. Before
//    them, where the target's attention kernel also writes the row
//    log-sum-exp (tj_pass_ctx_t.attention_lse_output; lsefwd), an
//    attention_lse joins the group of the attention whose scores it takes
//    (join_attention_lse): one kernel of two outputs, so that a training
//    step's backward never runs the forward's loop again for lse.
// TJ_LOG=fusion reports each multi-consumer decision and refused merge.
// TJ_DUMP_DIR gets <graph>.fused.dot.
//
// Requires: a finalized graph; decompose first, or composites stay opaque.
// Preserves: the graph.  Invalidates: the memory plan.  Idempotent (it
// recomputes the groups from the graph alone).

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/env.h"
#include "lib/passes/fusion.h"
#include "lib/window.h"

enum {
  kMaxRoots = 8,
  kMaxRounds = 10,
  kSiblingMinBytes = 1024,
};

typedef enum cls_e {
  C_EXTERNAL,     // input, constant: already in memory
  C_GENERATOR,    // full, iota: computed from the index alone
  C_ELEMENTWISE,  // unary, binary, ternary, cast
  C_INJECTIVE,    // movement that maps each output index to one input index
  C_REDUCTION,
  C_MATMUL,
  C_OPAQUE,
} cls_t;

typedef struct grp_t {
  bool alive;
  tj_group_kind_t kind;
  uint32_t anchor;
  uint32_t num_nodes;
  uint32_t* nodes;  // ascending, scratch arena
} grp_t;

typedef struct cand_t {
  uint32_t a, b;  // producer and consumer (or two siblings)
  bool sibling;
  bool epilogue;   // the producer is a matmul group
  int64_t score;   // bytes saved
  uint32_t order;  // tie-break: smaller node index first
} cand_t;

typedef struct fuse_t {
  tj_pass_ctx_t* ctx;
  const tj_graph_t* g;
  tj_arena_t scratch;
  tj_uses_t uses;
  uint32_t n;
  uint8_t* cls;
  bool* mat;     // written to memory by its home group
  bool* forced;  // must stay materialized whatever merges
  bool* wide;    // a pad whose taps would read too many buffers (wide_pads)
  uint32_t* home;
  int64_t* bytes;
  uint32_t* roots;  // n * kMaxRoots
  uint8_t* num_roots;
  // Per materialized node: an upper bound on the nodes of its phase-2
  // kernel (itself, the nodes inlined into it, the generators they read).
  uint32_t* size;
  // Groups containing each node: memb[i][0 .. num_memb[i]).
  uint32_t** memb;
  uint32_t* num_memb;
  uint32_t* cap_memb;
  grp_t* groups;
  uint32_t num_groups;
  uint32_t* forward;  // merged group -> survivor
  uint32_t* version;  // per group: bumped by every merge into it
  // Refused pairs (a, version a, b, version b), so that a pair is never
  // tried twice in the same state: open addressing, 0 = empty.
  uint64_t* refused;
  uint32_t refused_capacity, num_refused;
  // Per-node scratch for classify (stamped with |stamp|).
  uint32_t* in_set;
  uint32_t stamp;
  bool* dep;
  bool* mat_u;  // classify's view of materialization, by node
  // Per-group scratch for the cycle check.
  uint32_t* seen;
  uint32_t seen_stamp;
  uint32_t* stack;
} fuse_t;

//===--- facts about nodes ---===//

// The op's class from its pattern in lib/ops.def. Decompose runs first: a
// composite left over is opaque, but for a contraction of two operands,
// which the target kept for its GEMM template (matmul_f8 on CUDA, fp8
// issue 17); attention and the contractions with more operands (linear's
// bias, matmul_integer's zero points) stay opaque.
static cls_t classify_op(tj_op_t op) {
  const tj_op_info_t* info = tj_op_info(op);
  if (info->kind == TJ_OP_KIND_COMPOSITE &&
      (info->pattern != TJ_OP_PATTERN_CONTRACTION || info->arity != 2))
    return C_OPAQUE;
  switch (info->pattern) {
    case TJ_OP_PATTERN_EXTERNAL:
      return C_EXTERNAL;
    case TJ_OP_PATTERN_GENERATOR:
      return C_GENERATOR;
    case TJ_OP_PATTERN_ELEMENTWISE:
      return C_ELEMENTWISE;
    case TJ_OP_PATTERN_INJECTIVE:
      return C_INJECTIVE;
    case TJ_OP_PATTERN_REDUCE:
      return C_REDUCTION;
    case TJ_OP_PATTERN_CONTRACTION:
      return C_MATMUL;
    case TJ_OP_PATTERN_OPAQUE:
      break;
  }
  return C_OPAQUE;
}

static const tj_node_t* N(const fuse_t* f, uint32_t i) {
  return &f->g->nodes[i];
}

static bool same_shape(const tj_node_t* a, int32_t rank, const int64_t* dims) {
  if (a->rank != rank) return false;
  for (int32_t i = 0; i < rank; ++i) {
    if (a->dims[i] != dims[i]) return false;
  }
  return true;
}

// Whether movement |node| may read along two or more of the reduced axes
// |axes| with strides that do not merge: it is not at most 1 along all but
// one of them. A small operand's view in the prologue (a scale [C] made
// [1, C, 1, 1], read with stride 0 along the reduced H and W) spans none
// and merges; a value of another rank is taken to span them.
static bool spans_reduced_axes(const tj_node_t* node, const tj_attrs_t* axes) {
  int32_t wide = 0;
  for (uint32_t k = 0; k < axes->num_ints; ++k) {
    int64_t a = axes->ints[k];
    if (a >= node->rank || node->dims[a] != 1) ++wide;
  }
  return wide > 1;
}

static void log_fusion(const fuse_t* f, const char* format, ...)
    TJ_PRINTF_LIKE(2, 3);
static void log_fusion(const fuse_t* f, const char* format, ...) {
  if (!f->ctx->log_fusion) return;
  char message[512];
  va_list args;
  va_start(args, format);
  vsnprintf(message, sizeof(message), format, args);
  va_end(args);
  tj_context_diagnostic(f->ctx->context, TJ_SEVERITY_REMARK, "fusion: %s",
                        message);
}

static void* scratch(fuse_t* f, size_t bytes) {
  return tj_arena_alloc(&f->scratch, bytes ? bytes : 1);
}

//===--- phase 1: materialize or inline ---===//

// qfold: whether |v|, a dequantize, is matmul |u|'s B (only) and reads
// only constants.
static bool is_quantized_b(const fuse_t* f, uint32_t u, uint32_t v) {
  const tj_node_t* mm = N(f, u);
  if (mm->op != TJ_OP_MATMUL || mm->operands[0] == v || mm->operands[1] != v) {
    return false;
  }
  const tj_node_t* dq = N(f, v);
  for (uint32_t k = 0; k < dq->num_operands; ++k) {
    uint32_t o = dq->operands[k];
    if (o != TJ_NODE_NONE && N(f, o)->op != TJ_OP_CONSTANT) return false;
  }
  return true;
}

// Whether a value of class |c| is in memory where a kernel reads it.
static bool in_memory(cls_t c) {
  return c == C_EXTERNAL || c == C_MATMUL || c == C_REDUCTION || c == C_OPAQUE;
}

// Issue 14 (tj_pass_ctx_t.attention_views): whether attention |u| reads
// its q, k or v operand |v| through a view: a transpose that keeps the
// last (head) dim last, of a value in memory or of a reshape of one (the
// blocks' heads(), [b, t, h*d] -> [b, t, h, d] -> [b, h, t, d]). The view
// joins the attention's group, whose kernel reads the rows in place (the
// mask, read an element at a time, stays in memory). An elementwise value
// under the view (a linear's bias add) is written to memory for it
// (view_source), as the matmul's epilogue.
static bool attention_view(const fuse_t* f, uint32_t u, uint32_t v) {
  const tj_node_t* a = N(f, u);
  if (!f->ctx->attention_views || a->op != TJ_OP_ATTENTION ||
      a->num_operands < 3 || (a->num_operands > 3 && a->operands[3] == v))
    return false;
  if (v != a->operands[0] && v != a->operands[1] && v != a->operands[2])
    return false;
  const tj_node_t* t = N(f, v);
  if (t->op != TJ_OP_TRANSPOSE || t->rank < 3 ||
      t->attrs.num_ints != (uint32_t)t->rank ||
      t->attrs.ints[t->rank - 1] != t->rank - 1)
    return false;
  uint32_t src = t->operands[0];
  if (N(f, src)->op == TJ_OP_RESHAPE) src = N(f, src)->operands[0];
  return in_memory((cls_t)f->cls[src]) || f->cls[src] == C_ELEMENTWISE;
}

// Issue 14: whether transpose |t| is an output view of an attention (the
// blocks' merge, [b, h, t, d] -> [b, t, h, d] before [b, t, h*d]): one that
// keeps the head dim last, of the attention's result. It is written to
// memory, and merges into the attention's group, whose kernel then writes
// its rows where the transpose puts them, no copy kernel after it.
static bool output_view(const fuse_t* f, uint32_t t) {
  const tj_node_t* n = N(f, t);
  if (!f->ctx->attention_views || n->op != TJ_OP_TRANSPOSE || n->rank < 3 ||
      n->attrs.num_ints != (uint32_t)n->rank ||
      n->attrs.ints[n->rank - 1] != n->rank - 1)
    return false;
  return N(f, n->operands[0])->op == TJ_OP_ATTENTION;
}

// Whether transpose |t| is an attention view for one of its readers.
static bool view_transpose(const fuse_t* f, uint32_t t) {
  if (N(f, t)->op != TJ_OP_TRANSPOSE) return false;
  for (uint32_t k = f->uses.offsets[t]; k < f->uses.offsets[t + 1]; ++k) {
    if (attention_view(f, f->uses.users[k], t)) return true;
  }
  return false;
}

// Whether elementwise |i| is the value under an attention view (read by
// a view transpose, or by a reshape that one reads): then it is written to
// memory, which the attention's kernel reads.
static bool view_source(const fuse_t* f, uint32_t i) {
  if (!f->ctx->attention_views || f->cls[i] != C_ELEMENTWISE) return false;
  for (uint32_t k = f->uses.offsets[i]; k < f->uses.offsets[i + 1]; ++k) {
    uint32_t u = f->uses.users[k];
    if (view_transpose(f, u)) return true;
    if (N(f, u)->op != TJ_OP_RESHAPE) continue;
    for (uint32_t j = f->uses.offsets[u]; j < f->uses.offsets[u + 1]; ++j) {
      if (view_transpose(f, f->uses.users[j])) return true;
    }
  }
  return false;
}

// Whether user |u| can read operand |v| other than from memory.
static bool fusing_use(const fuse_t* f, uint32_t u, uint32_t v) {
  switch (f->cls[u]) {
    case C_OPAQUE:
      return attention_view(f, u, v);
    case C_INJECTIVE:
      // A gather reads its table by index from memory; its indices are read
      // at the point like any operand.
      return !tj_op_has(N(f, u)->op, TJ_OPF_MEMORY_OPERANDS) ||
             N(f, u)->operands[0] != v;
    case C_MATMUL: {
      // qfold (issue 17): a dequantize left whole (the target reads
      // quantized weights: tj_pass_ctx_t.native_op) is B read as it is
      // dequantized, from its constants.
      if (N(f, v)->op == TJ_OP_DEQUANTIZE) return is_quantized_b(f, u, v);
      // A transpose of a buffer in memory is a strided load: of an input or
      // constant, or of a matmul, reduction or opaque result, which stays
      // in memory as this very read is from another kernel.
      if (N(f, v)->op != TJ_OP_TRANSPOSE) return false;
      return in_memory((cls_t)f->cls[N(f, v)->operands[0]]);
    }
    default:
      return true;
  }
}

static void add_root(uint32_t* set, uint32_t* count, uint32_t root,
                     bool* overflow) {
  for (uint32_t i = 0; i < *count; ++i) {
    if (set[i] == root) return;
  }
  if (*count == kMaxRoots) {
    *overflow = true;
    return;
  }
  set[(*count)++] = root;
}

// The generators (full, iota) |i| reads, which join every kernel it is in:
// an upper bound, as a generator may be shared or be materialized.
static uint32_t generators_read(const fuse_t* f, uint32_t i) {
  const tj_node_t* node = N(f, i);
  uint32_t count = 0;
  for (uint32_t k = 0; k < node->num_operands; ++k) {
    uint32_t o = node->operands[k];
    if (o == TJ_NODE_NONE || f->cls[o] != C_GENERATOR) continue;
    bool repeated = false;
    for (uint32_t j = 0; j < k; ++j) repeated |= node->operands[j] == o;
    count += !repeated;
  }
  return count;
}

// Consumers first: by the time node i is decided, every kernel it could be
// inlined into has its root, and f->size bounds each kernel's nodes so far.
// Whether pad or concat |i| extends an axis that reduction |r| reduces
// (an axis whose extent differs between |i| and one of its operands), or
// has another rank than |r|'s input: lowering cuts a kernel's space at a
// pad's or concat's bounds only along kept axes (kir/lower.c), so such a
// node inlined before the reduction would make the whole group run on the
// host (mobilenet_v3_small's squeeze-excitation means read a depthwise
// conv, whose taps read the padded input). Writing it to memory instead
// costs one buffer.
static bool pads_reduced_axis(const fuse_t* f, uint32_t i, uint32_t r) {
  const tj_node_t* node = N(f, i);
  if (node->op != TJ_OP_PAD && node->op != TJ_OP_CONCAT) return false;
  const tj_node_t* red = N(f, r);
  const tj_node_t* in = N(f, red->operands[0]);
  if (in->rank != node->rank) return true;
  for (uint32_t k = 0; k < red->attrs.num_ints; ++k) {
    int64_t d = red->attrs.ints[k];
    for (uint32_t q = 0; q < node->num_operands; ++q) {
      uint32_t o = node->operands[q];
      if (o != TJ_NODE_NONE && N(f, o)->dims[d] != node->dims[d]) return true;
    }
  }
  return false;
}

// Whether pad or concat |i| inlined into the kernel of reshape |r| (a
// value read by a matmul) would be cut where lowering cannot: |r| (one
// that changes the shape) refines the kernel's space dims into the pad's
// axes, and a strided read of the padded value (a stride-2 depthwise
// conv's taps) then needs a box cut inside a refined dim (kir/lower.c, "a
// pad or concat axis walks a refined space dim"): the group would run on
// the host.
static bool pads_reshape(const fuse_t* f, uint32_t i, uint32_t r) {
  const tj_node_t* node = N(f, i);
  if (node->op != TJ_OP_PAD && node->op != TJ_OP_CONCAT) return false;
  const tj_node_t* re = N(f, r);
  if (re->op != TJ_OP_RESHAPE) return false;
  return !same_shape(N(f, re->operands[0]), re->rank, re->dims);
}

// Whether |node| must be a kernel of its own: the driver's feedback from
// lowering (tj_pass_ctx_t.own_kernel). A generator stays one read wherever
// used.
static bool own_kernel(const fuse_t* f, uint32_t node) {
  return f->ctx->own_kernel && f->ctx->own_kernel[node] &&
         f->cls[node] != C_GENERATOR;
}

// Whether the nodes in the current stamp set hold one that must be a kernel
// of its own together with a node that reads it.
static bool joins_own_kernel(const fuse_t* f, const uint32_t* nodes,
                             uint32_t count) {
  if (!f->ctx->own_kernel) return false;
  const tj_uses_t* uses = &f->uses;
  for (uint32_t j = 0; j < count; ++j) {
    uint32_t v = nodes[j];
    if (!own_kernel(f, v)) continue;
    for (uint32_t k = uses->offsets[v]; k < uses->offsets[v + 1]; ++k) {
      if (f->in_set[uses->users[k]] == f->stamp) return true;
    }
  }
  return false;
}

static void decide(fuse_t* f) {
  const tj_uses_t* uses = &f->uses;
  for (uint32_t i = f->n; i-- > 0;) {
    cls_t c = (cls_t)f->cls[i];
    if (c == C_EXTERNAL) continue;
    bool output = uses->is_output[i];
    // Dead, unless a custom op that must run (dce kept it: not pure).
    if (!output && tj_uses_count(uses, i) == 0 &&
        tj_op_info(N(f, i)->op)->kind != TJ_OP_KIND_CUSTOM)
      continue;
    bool nonfusing = false;
    for (uint32_t k = uses->offsets[i]; k < uses->offsets[i + 1]; ++k) {
      if (!fusing_use(f, uses->users[k], i)) nonfusing = true;
    }
    f->forced[i] = output || nonfusing || view_source(f, i) ||
                   output_view(f, i) || own_kernel(f, i);
    bool mat = f->forced[i] || f->wide[i] || c == C_REDUCTION ||
               c == C_MATMUL || c == C_OPAQUE;
    if (!mat && c == C_GENERATOR) continue;  // read wherever used
    uint32_t set[kMaxRoots];
    uint32_t count = 0;
    bool overflow = false;
    if (!mat) {
      for (uint32_t k = uses->offsets[i]; k < uses->offsets[i + 1]; ++k) {
        uint32_t u = uses->users[k];
        if (f->mat[u]) {
          add_root(set, &count, u, &overflow);
        } else {
          for (uint32_t r = 0; r < f->num_roots[u]; ++r) {
            add_root(set, &count, f->roots[(size_t)u * kMaxRoots + r],
                     &overflow);
          }
        }
      }
      uint32_t full = TJ_NODE_NONE;
      for (uint32_t r = 0; !overflow && r < count; ++r) {
        if (f->size[set[r]] + 1 + generators_read(f, i) >
            f->ctx->fuse_max_nodes) {
          full = set[r];
        }
      }
      uint32_t reduced = TJ_NODE_NONE;
      for (uint32_t r = 0; !overflow && r < count; ++r) {
        if ((f->cls[set[r]] == C_REDUCTION &&
             pads_reduced_axis(f, i, set[r])) ||
            pads_reshape(f, i, set[r]))
          reduced = set[r];
      }
      if (overflow) {
        log_fusion(f, "%%%u (%s) feeds more than %d kernels: materialized", i,
                   tj_op_info(N(f, i)->op)->name, kMaxRoots);
        mat = true;
      } else if (reduced != TJ_NODE_NONE) {
        log_fusion(f,
                   "%%%u (%s) extends an axis that %%%u reduces or "
                   "reshapes: materialized",
                   i, tj_op_info(N(f, i)->op)->name, reduced);
        mat = true;
      } else if (full != TJ_NODE_NONE) {
        // Inlining it would make a kernel no merge could ever form: more
        // nodes than classify() allows.
        log_fusion(f,
                   "%%%u (%s) would make the kernel of %%%u larger than "
                   "fuse_max_nodes (%u): materialized",
                   i, tj_op_info(N(f, i)->op)->name, full,
                   f->ctx->fuse_max_nodes);
        mat = true;
      } else if (count > 1) {
        int64_t operand_bytes = 0;
        const tj_node_t* node = N(f, i);
        for (uint32_t k = 0; k < node->num_operands; ++k) {
          uint32_t o = node->operands[k];
          if (o == TJ_NODE_NONE || f->cls[o] == C_GENERATOR) continue;
          bool repeated = false;
          for (uint32_t j = 0; j < k; ++j) repeated |= node->operands[j] == o;
          if (!repeated) operand_bytes += f->bytes[o];
        }
        int64_t recompute = (int64_t)count * operand_bytes;
        int64_t materialize = f->bytes[i] * (int64_t)(1 + count);
        if (tj_op_has(node->op, TJ_OPF_EXPENSIVE)) {
          log_fusion(f,
                     "%%%u (%s) feeds %u kernels and is expensive: "
                     "materialized",
                     i, tj_op_info(node->op)->name, count);
          mat = true;
        } else if (recompute > materialize) {
          log_fusion(f,
                     "%%%u (%s) feeds %u kernels: recompute %lld bytes > "
                     "materialize %lld: materialized",
                     i, tj_op_info(node->op)->name, count, (long long)recompute,
                     (long long)materialize);
          mat = true;
        } else {
          log_fusion(f,
                     "%%%u (%s) feeds %u kernels: recompute %lld bytes <= "
                     "materialize %lld: recomputed in each",
                     i, tj_op_info(node->op)->name, count, (long long)recompute,
                     (long long)materialize);
        }
      }
    }
    if (mat) {
      f->mat[i] = true;
      f->roots[(size_t)i * kMaxRoots] = i;
      f->num_roots[i] = 1;
      f->size[i] = 1 + generators_read(f, i);
    } else {
      memcpy(&f->roots[(size_t)i * kMaxRoots], set, sizeof(uint32_t) * count);
      f->num_roots[i] = (uint8_t)count;
      for (uint32_t r = 0; r < count; ++r) {
        f->size[set[r]] += 1 + generators_read(f, i);
      }
    }
  }
}

// After decide: the inlined pads whose readers (a pool's or conv's taps,
// each a strided slice) times the buffers the pad's inlined producers read
// exceed kMaxTapReads. Each tap reads every one of those buffers through
// its own view, and a kernel has TJ_KIR_MAX_BUFFERS (64) views: resnet18's
// max pool after the stem (9 taps of a sum of 8 partial matmul results)
// would run on the host. Such a pad is marked wide, to be written to
// memory when decide runs again. Returns whether any was marked.
enum { kMaxTapReads = 32 };
static bool wide_pads(fuse_t* f) {
  bool any = false;
  for (uint32_t i = 0; i < f->n; ++i) {
    const tj_node_t* node = N(f, i);
    if (node->op != TJ_OP_PAD || f->mat[i] || f->num_roots[i] == 0) continue;
    uint32_t readers = tj_uses_count(&f->uses, i);
    uint32_t buffers = 0, top = 0;
    ++f->stamp;
    f->stack[top++] = i;
    f->in_set[i] = f->stamp;
    while (top) {
      const tj_node_t* x = N(f, f->stack[--top]);
      for (uint32_t k = 0; k < x->num_operands; ++k) {
        uint32_t o = x->operands[k];
        if (o == TJ_NODE_NONE || f->in_set[o] == f->stamp) continue;
        f->in_set[o] = f->stamp;
        if (f->mat[o] || f->cls[o] == C_EXTERNAL) {
          ++buffers;
        } else if (f->cls[o] != C_GENERATOR) {
          f->stack[top++] = o;
        }
      }
    }
    if ((uint64_t)readers * buffers > kMaxTapReads) {
      log_fusion(f,
                 "%%%u (pad) has %u readers of %u buffers each: "
                 "materialized",
                 i, readers, buffers);
      f->wide[i] = true;
      any = true;
    }
  }
  return any;
}

//===--- group membership ---===//

static bool memb_add(fuse_t* f, uint32_t node, uint32_t group) {
  for (uint32_t i = 0; i < f->num_memb[node]; ++i) {
    if (f->memb[node][i] == group) return true;
  }
  if (f->num_memb[node] == f->cap_memb[node]) {
    uint32_t cap = f->cap_memb[node] ? 2 * f->cap_memb[node] : 2;
    uint32_t* grown = scratch(f, sizeof(uint32_t) * cap);
    if (!grown) return false;
    if (f->num_memb[node]) {
      memcpy(grown, f->memb[node], sizeof(uint32_t) * f->num_memb[node]);
    }
    f->memb[node] = grown;
    f->cap_memb[node] = cap;
  }
  f->memb[node][f->num_memb[node]++] = group;
  return true;
}

static void memb_remove(fuse_t* f, uint32_t node, uint32_t group) {
  for (uint32_t i = 0; i < f->num_memb[node]; ++i) {
    if (f->memb[node][i] == group) {
      f->memb[node][i] = f->memb[node][--f->num_memb[node]];
      return;
    }
  }
}

static bool group_has(const grp_t* g, uint32_t node) {
  uint32_t lo = 0, hi = g->num_nodes;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (g->nodes[mid] < node) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < g->num_nodes && g->nodes[lo] == node;
}

//===--- phase 2: one kernel per materialized node ---===//

static tj_status_t build_kernels(fuse_t* f) {
  uint32_t* kid = scratch(f, sizeof(uint32_t) * f->n);
  uint32_t* size = scratch(f, sizeof(uint32_t) * f->n);
  f->groups = scratch(f, sizeof(grp_t) * f->n);
  f->forward = scratch(f, sizeof(uint32_t) * f->n);
  f->version = scratch(f, sizeof(uint32_t) * f->n);
  if (!kid || !size || !f->groups || !f->forward || !f->version) {
    return tj_status_oom();
  }
  uint32_t ng = 0;
  for (uint32_t i = 0; i < f->n; ++i) {
    kid[i] = TJ_GROUP_NONE;
    if (f->mat[i]) {
      kid[i] = ng;
      size[ng++] = 1;
    }
  }
  // Inlined nodes count toward each of their roots' kernels; generators
  // toward the kernel of every node that reads them (an upper bound).
  for (uint32_t i = 0; i < f->n; ++i) {
    if (f->mat[i]) continue;
    for (uint32_t r = 0; r < f->num_roots[i]; ++r) {
      ++size[kid[f->roots[(size_t)i * kMaxRoots + r]]];
    }
  }
  uint32_t* extra = scratch(f, sizeof(uint32_t) * ng);
  if (!extra) return tj_status_oom();
  memset(extra, 0, sizeof(uint32_t) * ng);
  for (uint32_t i = 0; i < f->n; ++i) {
    if (!f->mat[i] && f->num_roots[i] == 0) continue;
    const tj_node_t* node = N(f, i);
    for (uint32_t k = 0; k < node->num_operands; ++k) {
      uint32_t o = node->operands[k];
      if (o != TJ_NODE_NONE && f->cls[o] == C_GENERATOR && !f->mat[o]) {
        if (f->mat[i]) {
          ++extra[kid[i]];
        } else {
          for (uint32_t r = 0; r < f->num_roots[i]; ++r) {
            ++extra[kid[f->roots[(size_t)i * kMaxRoots + r]]];
          }
        }
      }
    }
  }
  for (uint32_t k = 0; k < ng; ++k) {
    grp_t* g = &f->groups[k];
    memset(g, 0, sizeof(*g));
    g->alive = true;
    g->nodes = scratch(f, sizeof(uint32_t) * (size[k] + extra[k]));
    if (!g->nodes) return tj_status_oom();
    f->forward[k] = k;
    f->version[k] = 0;
  }
  f->num_groups = ng;
  // Ascending node order fills each kernel in evaluation order; its root
  // (the largest index) comes last.
  for (uint32_t i = 0; i < f->n; ++i) {
    if (f->mat[i]) {
      grp_t* g = &f->groups[kid[i]];
      g->nodes[g->num_nodes++] = i;
      f->home[i] = kid[i];
    } else {
      for (uint32_t r = 0; r < f->num_roots[i]; ++r) {
        grp_t* g = &f->groups[kid[f->roots[(size_t)i * kMaxRoots + r]]];
        g->nodes[g->num_nodes++] = i;
      }
    }
  }
  // Generators join every kernel that reads them; keep the lists sorted.
  for (uint32_t k = 0; k < ng; ++k) {
    grp_t* g = &f->groups[k];
    uint32_t count = g->num_nodes;
    for (uint32_t j = 0; j < count; ++j) {
      const tj_node_t* node = N(f, g->nodes[j]);
      for (uint32_t q = 0; q < node->num_operands; ++q) {
        uint32_t o = node->operands[q];
        if (o == TJ_NODE_NONE || f->cls[o] != C_GENERATOR || f->mat[o]) {
          continue;
        }
        bool present = false;
        for (uint32_t t = count; t < g->num_nodes; ++t) {
          present |= g->nodes[t] == o;
        }
        if (!present) g->nodes[g->num_nodes++] = o;
      }
    }
    // Insertion sort of the appended generators into place.
    for (uint32_t j = count; j < g->num_nodes; ++j) {
      uint32_t v = g->nodes[j];
      uint32_t t = j;
      while (t > 0 && g->nodes[t - 1] > v) {
        g->nodes[t] = g->nodes[t - 1];
        --t;
      }
      g->nodes[t] = v;
    }
    for (uint32_t j = 0; j < g->num_nodes; ++j) {
      if (!memb_add(f, g->nodes[j], k)) return tj_status_oom();
    }
  }
  return NULL;
}

//===--- classify: is a set of nodes one legal group? ---===//

typedef struct verdict_t {
  tj_group_kind_t kind;
  uint32_t anchor;
  const char* why;  // the reason it is not a group
} verdict_t;

typedef enum space_e { SPACE_OTHER, SPACE_KEEP, SPACE_FLAT } space_t;

// Where |node|'s shape sits in a reduction group of input shape |F| whose
// outer shape is |keep| (reduced axes 1) or |flat| (reduced axes dropped).
static space_t space_of(const tj_node_t* node, int32_t rank, const int64_t* F,
                        const int64_t* keep, int32_t flat_rank,
                        const int64_t* flat) {
  if (same_shape(node, rank, F) || same_shape(node, rank, keep)) {
    return SPACE_KEEP;
  }
  if (same_shape(node, flat_rank, flat)) return SPACE_FLAT;
  return SPACE_OTHER;
}

// classify's view of wide_pads: whether pad |i| of the set stamped in
// f->in_set has readers in the set that, times the buffers its producers in
// the set read, exceed kMaxTapReads (a merge would undo wide_pads).
static bool wide_in_set(fuse_t* f, uint32_t i) {
  if (N(f, i)->op != TJ_OP_PAD) return false;
  uint32_t readers = 0;
  for (uint32_t k = f->uses.offsets[i]; k < f->uses.offsets[i + 1]; ++k) {
    readers += f->in_set[f->uses.users[k]] == f->stamp;
  }
  uint32_t buffers = 0, top = 0;
  ++f->seen_stamp;
  f->stack[top++] = i;
  f->seen[i] = f->seen_stamp;
  while (top) {
    const tj_node_t* x = N(f, f->stack[--top]);
    for (uint32_t k = 0; k < x->num_operands; ++k) {
      uint32_t o = x->operands[k];
      if (o == TJ_NODE_NONE || f->seen[o] == f->seen_stamp) continue;
      f->seen[o] = f->seen_stamp;
      if (f->in_set[o] != f->stamp || f->cls[o] == C_EXTERNAL) {
        ++buffers;
      } else if (f->cls[o] != C_GENERATOR) {
        f->stack[top++] = o;
      }
    }
  }
  return (uint64_t)readers * buffers > kMaxTapReads;
}

// A conv the target kept whole (the CONV template of x86 or CUDA, issue
// 15) with an elementwise epilogue of its shape (bias-free followers:
// relu, clip, a residual add, their casts), which the template evaluates
// as it stores each finished block (kir/lower_conv.c): resnet's conv ->
// add -> relu is one kernel. Any other opaque op, or a conv with anything
// else, fuses with nothing. x, w and the bias are read from memory, never
// computed in the kernel.
static bool conv_epilogue(fuse_t* f, const uint32_t* nodes, uint32_t count,
                          uint32_t num_opaque, uint32_t num_anchors,
                          verdict_t* v) {
  v->why = "an opaque op fuses with nothing";
  uint32_t conv = TJ_NODE_NONE;
  for (uint32_t j = 0; j < count; ++j) {
    if (f->cls[nodes[j]] == C_OPAQUE) conv = nodes[j];
  }
  if (num_opaque != 1 || num_anchors || N(f, conv)->op != TJ_OP_CONV) {
    return false;
  }
  if (!f->ctx->conv_epilogue) {
    v->why = "the target's conv kernel takes no epilogue";
    return false;
  }
  const tj_node_t* cv = N(f, conv);
  // Dense and grouped convs only: a depthwise conv kept whole runs on the
  // CONV template's direct window variant (kir/lower_window.c), which has
  // no epilogue.
  if (tj_window_depthwise(f->g, conv)) {
    v->why = "a depthwise conv takes no epilogue";
    return false;
  }
  if (f->ctx->conv_epilogue_fits &&
      !f->ctx->conv_epilogue_fits(f->ctx->conv_epilogue_user, f->g, conv)) {
    v->why = "the target runs this conv better without an epilogue";
    return false;
  }
  for (uint32_t k = 0; k < cv->num_operands; ++k) {
    uint32_t o = cv->operands[k];
    if (o != TJ_NODE_NONE && f->in_set[o] == f->stamp) {
      v->why = "a conv operand computed in the same kernel";
      return false;
    }
  }
  for (uint32_t j = 0; j < count; ++j) {
    uint32_t i = nodes[j];
    cls_t c = (cls_t)f->cls[i];
    if (i == conv || c == C_GENERATOR) continue;
    if (c != C_ELEMENTWISE) {
      v->why = "a conv epilogue that is not elementwise";
      return false;
    }
    if (!same_shape(N(f, i), cv->rank, cv->dims)) {
      v->why = "a conv epilogue not shaped like the conv";
      return false;
    }
  }
  v->why = NULL;
  v->kind = TJ_GROUP_OPAQUE;
  v->anchor = conv;
  return true;
}

// lsefwd: whether |lse| is attention_lse of attention |att|'s own scores
// (tj_attention_lse_of) in the dtype the attention kernel's f32 rows give.
static bool lse_of_attention(const fuse_t* f, uint32_t att, uint32_t lse) {
  return tj_attention_lse_of(f->g, att, lse) &&
         N(f, lse)->dtype ==
             tj_attention_lse_dtype(N(f, N(f, att)->operands[0])->dtype);
}

// swiglu (issue 14): whether matmuls |a| < |b| of the set stamped into
// f->in_set may be one dual GEMM: plain matmuls of the same A whose B are
// of one shape and dtype and read alike (both from memory, or both
// through a transpose of the same permutation), the same output, and the
// target's yes (tj_pass_ctx_t.dual_gemm). The epilogue's rules are the
// single matmul's, both results being shaped alike.
static bool dual_pair(const fuse_t* f, uint32_t a, uint32_t b) {
  if (!f->ctx->dual_gemm || a == b) return false;
  const tj_node_t* x = N(f, a);
  const tj_node_t* y = N(f, b);
  if (x->op != TJ_OP_MATMUL || y->op != TJ_OP_MATMUL ||
      x->operands[0] != y->operands[0] || x->dtype != y->dtype ||
      !same_shape(y, x->rank, x->dims))
    return false;
  const tj_node_t* bx = N(f, x->operands[1]);
  const tj_node_t* by = N(f, y->operands[1]);
  if (bx->dtype != by->dtype || !same_shape(by, bx->rank, bx->dims))
    return false;
  bool tx = f->in_set[x->operands[1]] == f->stamp;
  bool ty = f->in_set[y->operands[1]] == f->stamp;
  if (tx != ty) return false;
  if (tx && (bx->op != TJ_OP_TRANSPOSE || by->op != TJ_OP_TRANSPOSE ||
             bx->attrs.num_ints != by->attrs.num_ints ||
             memcmp(bx->attrs.ints, by->attrs.ints,
                    sizeof(int64_t) * bx->attrs.num_ints) != 0))
    return false;
  return f->ctx->dual_gemm(f->ctx->dual_gemm_user, f->g, a, b);
}

// Issue 14: whether |nodes| is an attention and views of its q, k and v
// that attention_view accepts (transposes it reads, and the reshapes of a
// value in memory that they read; none written to memory), and at most one
// output view (output_view) through which alone the attention's result is
// written (*|anchor|: the attention).
static bool attention_with_views(fuse_t* f, const uint32_t* nodes,
                                 uint32_t count, uint32_t* anchor) {
  uint32_t att = TJ_NODE_NONE, out_views = 0;
  for (uint32_t j = 0; j < count; ++j) {
    if (N(f, nodes[j])->op == TJ_OP_ATTENTION) att = nodes[j];
  }
  if (count < 2 || att == TJ_NODE_NONE) return false;
  for (uint32_t j = 0; j < count; ++j) {
    uint32_t i = nodes[j];
    const tj_node_t* n = N(f, i);
    if (i == att) continue;
    if (n->op == TJ_OP_TRANSPOSE && n->operands[0] == att) {
      // The result written through the view only.
      if (!output_view(f, i) || f->mat_u[att] || ++out_views > 1) return false;
      continue;
    }
    if (f->mat_u[i]) return false;
    if (n->op == TJ_OP_TRANSPOSE) {
      if (!attention_view(f, att, i)) return false;
      uint32_t src = n->operands[0];
      if (f->in_set[src] == f->stamp && N(f, src)->op != TJ_OP_RESHAPE)
        return false;
    } else if (n->op == TJ_OP_RESHAPE) {
      // Read by a transpose of the set alone, its operand in memory.
      if (f->in_set[n->operands[0]] == f->stamp) return false;
      for (uint32_t k = f->uses.offsets[i]; k < f->uses.offsets[i + 1]; ++k) {
        uint32_t r = f->uses.users[k];
        if (f->in_set[r] == f->stamp && N(f, r)->op != TJ_OP_TRANSPOSE)
          return false;
      }
    } else {
      return false;
    }
  }
  *anchor = att;
  return true;
}

// |nodes| ascending; f->mat_u says which are written to memory. The set is
// stamped into f->in_set by the caller.
static bool classify(fuse_t* f, const uint32_t* nodes, uint32_t count,
                     verdict_t* v) {
  memset(v, 0, sizeof(*v));
  if (count > f->ctx->fuse_max_nodes) {
    v->why = "more nodes than fuse_max_nodes";
    return false;
  }
  uint32_t matmul = TJ_NODE_NONE, first_red = TJ_NODE_NONE;
  uint32_t num_matmul = 0, num_red = 0, num_opaque = 0, num_real = 0;
  for (uint32_t j = 0; j < count; ++j) {
    uint32_t i = nodes[j];
    switch ((cls_t)f->cls[i]) {
      case C_MATMUL:
        ++num_matmul;
        matmul = i;
        break;
      case C_REDUCTION:
        if (first_red == TJ_NODE_NONE) first_red = i;
        ++num_red;
        break;
      case C_OPAQUE:
        ++num_opaque;
        break;
      default:
        break;
    }
    if (f->cls[i] != C_GENERATOR) ++num_real;
  }
  if (num_opaque == 2 && count == 2 && f->ctx->attention_lse_output &&
      (lse_of_attention(f, nodes[0], nodes[1]) ||
       lse_of_attention(f, nodes[1], nodes[0]))) {
    // lsefwd: the attention's kernel writes its attention_lse too.
    v->kind = TJ_GROUP_OPAQUE;
    v->anchor = N(f, nodes[0])->op == TJ_OP_ATTENTION ? nodes[0] : nodes[1];
    return true;
  }
  if (num_opaque == 1 && attention_with_views(f, nodes, count, &v->anchor)) {
    v->kind = TJ_GROUP_OPAQUE;
    return true;
  }
  if (num_opaque) {
    if (num_real != 1 || count != 1) {
      return conv_epilogue(f, nodes, count, num_opaque, num_matmul + num_red,
                           v);
    }
    v->kind = TJ_GROUP_OPAQUE;
    v->anchor = nodes[0];
    return true;
  }
  uint32_t first_matmul = matmul;
  if (num_matmul == 2 && !num_red) {
    for (uint32_t j = 0; j < count; ++j) {
      if (f->cls[nodes[j]] == C_MATMUL) {
        first_matmul = nodes[j];
        break;
      }
    }
    if (!dual_pair(f, first_matmul, matmul)) {
      v->why = f->ctx->dual_gemm
                   ? "two matmuls in one kernel that are no dual gemm"
                   : "two matmuls in one kernel";
      return false;
    }
  } else if (num_matmul > 1) {
    v->why = "two matmuls in one kernel";
    return false;
  }
  if (num_matmul && num_red) {
    v->why = "a matmul and a reduction in one kernel";
    return false;
  }
  // The reduction group's spaces.
  int32_t rank = 0, flat_rank = 0;
  int64_t F[TJ_MAX_RANK], keep[TJ_MAX_RANK], flat[TJ_MAX_RANK];
  const tj_attrs_t* axes = NULL;
  if (num_red) {
    const tj_node_t* in = N(f, N(f, first_red)->operands[0]);
    axes = &N(f, first_red)->attrs;
    rank = in->rank;
    for (int32_t d = 0; d < rank; ++d) F[d] = keep[d] = in->dims[d];
    bool reduced[TJ_MAX_RANK] = {false};
    for (uint32_t k = 0; k < axes->num_ints; ++k) {
      reduced[axes->ints[k]] = true;
      keep[axes->ints[k]] = 1;
    }
    for (int32_t d = 0; d < rank; ++d) {
      if (!reduced[d]) flat[flat_rank++] = F[d];
    }
  }
  const tj_node_t* mm = matmul != TJ_NODE_NONE ? N(f, matmul) : NULL;
  int32_t out_rank = -1;
  const int64_t* out_dims = NULL;
  uint32_t last_output = TJ_NODE_NONE;
  for (uint32_t j = 0; j < count; ++j) {
    uint32_t i = nodes[j];
    const tj_node_t* node = N(f, i);
    cls_t c = (cls_t)f->cls[i];
    bool anchor = c == C_MATMUL || c == C_REDUCTION;
    bool dep = anchor;
    for (uint32_t k = 0; k < node->num_operands; ++k) {
      uint32_t o = node->operands[k];
      if (o != TJ_NODE_NONE && f->in_set[o] == f->stamp && f->dep[o]) {
        dep = true;
      }
    }
    f->dep[i] = dep;
    if (num_red && !dep && pads_reduced_axis(f, i, first_red)) {
      v->why = "a pad or concat along a reduced axis before the reduction";
      return false;
    }
    if (c == C_REDUCTION && i != first_red) {
      const tj_node_t* in = N(f, node->operands[0]);
      bool same = same_shape(in, rank, F) &&
                  node->attrs.num_ints == axes->num_ints &&
                  (axes->num_ints == 0 ||
                   memcmp(node->attrs.ints, axes->ints,
                          sizeof(int64_t) * axes->num_ints) == 0);
      if (!same) {
        v->why = "reductions over different shapes or axes";
        return false;
      }
    }
    if (dep && !anchor) {
      if (c != C_ELEMENTWISE) {
        v->why = "a non-elementwise op after the matmul or reduction";
        return false;
      }
      if (mm && !same_shape(node, mm->rank, mm->dims)) {
        v->why = "the epilogue changes the matmul's output shape";
        return false;
      }
    }
    if (num_red && (dep || c == C_REDUCTION)) {
      // The node and its dependent operands must index the same outer
      // point: all in F/keep space, or all in flat space.
      space_t s = space_of(node, rank, F, keep, flat_rank, flat);
      if (s == SPACE_OTHER) {
        v->why =
            "a value after the reduction has neither its input nor its "
            "output shape";
        return false;
      }
      for (uint32_t k = 0; k < node->num_operands && !anchor; ++k) {
        uint32_t o = node->operands[k];
        if (o == TJ_NODE_NONE || f->in_set[o] != f->stamp || !f->dep[o]) {
          continue;
        }
        if (space_of(N(f, o), rank, F, keep, flat_rank, flat) != s) {
          v->why = "a reduction result broadcast along another axis";
          return false;
        }
      }
    }
    if (c == C_MATMUL) {
      for (uint32_t k = 0; k < node->num_operands; ++k) {
        uint32_t o = node->operands[k];
        if (f->in_set[o] != f->stamp) continue;
        if (N(f, o)->op == TJ_OP_DEQUANTIZE && is_quantized_b(f, i, o)) {
          continue;  // reads constants only (qfold)
        }
        if (N(f, o)->op != TJ_OP_TRANSPOSE ||
            f->in_set[N(f, o)->operands[0]] == f->stamp) {
          v->why = "a matmul operand computed in the same kernel";
          return false;
        }
      }
    }
    if (f->mat_u[i]) {
      last_output = i;
      if (mm) {
        if (!same_shape(node, mm->rank, mm->dims)) {
          v->why = "an output not shaped like the matmul";
          return false;
        }
      } else if (num_red) {
        if (space_of(node, rank, F, keep, flat_rank, flat) == SPACE_OTHER) {
          v->why =
              "an output shaped like neither the reduction's input nor "
              "its output";
          return false;
        }
      } else if (out_rank < 0) {
        out_rank = node->rank;
        out_dims = node->dims;
      } else if (!same_shape(node, out_rank, out_dims)) {
        v->why = "pointwise outputs of different shapes";
        return false;
      }
    }
  }
  if (last_output == TJ_NODE_NONE) {
    v->why = "no output";
    return false;
  }
  // A reduction over several axes that also stores a value shaped like its
  // input: lowering iterates the reduced axes as one of their product when
  // its reads cannot merge them into one strided axis (a slice's or a
  // transpose's view), and then cannot store such a value (kir/
  // lower_index.c, "not one strided axis"); mobilenet_v3_small's
  // squeeze-excitation mean with the depthwise conv it averages.
  if (num_red && axes->num_ints > 1) {
    bool stores_input = false, moves = false;
    for (uint32_t j = 0; j < count; ++j) {
      const tj_node_t* node = N(f, nodes[j]);
      if (f->mat_u[nodes[j]] && f->cls[nodes[j]] != C_REDUCTION &&
          same_shape(node, rank, F))
        stores_input = true;
      if (f->cls[nodes[j]] == C_INJECTIVE && spans_reduced_axes(node, axes))
        moves = true;
    }
    if (stores_input && moves) {
      v->why =
          "a reduction over several axes storing its input with a movement "
          "in its prologue";
      return false;
    }
  }
  for (uint32_t j = 0; j < count; ++j) {
    if (wide_in_set(f, nodes[j])) {
      v->why = "a pad whose taps would read more than 32 buffers";
      return false;
    }
  }
  for (uint32_t j = 0; !num_red && j < count; ++j) {
    for (uint32_t k = 0; f->mat_u[nodes[j]] && k < count; ++k) {
      if (pads_reshape(f, nodes[k], nodes[j])) {
        v->why = "a pad or concat under a reshape";
        return false;
      }
    }
  }
  if (mm) {
    v->kind = TJ_GROUP_MATMUL;
    v->anchor = first_matmul;
  } else if (num_red) {
    v->kind = TJ_GROUP_REDUCTION;
    v->anchor = first_red;
  } else {
    v->kind = TJ_GROUP_POINTWISE;
    v->anchor = last_output;
  }
  return true;
}

//===--- phase 3: merging ---===//

static uint32_t find(const fuse_t* f, uint32_t g) {
  while (f->forward[g] != g) g = f->forward[g];
  return g;
}

// Whether materialized node |v| of a group formed from groups |a| and |b|
// must stay in memory: some group other than those reads it.
static bool still_read(const fuse_t* f, uint32_t v, uint32_t a, uint32_t b) {
  if (f->forced[v]) return true;
  const tj_uses_t* uses = &f->uses;
  for (uint32_t k = uses->offsets[v]; k < uses->offsets[v + 1]; ++k) {
    uint32_t u = uses->users[k];
    for (uint32_t m = 0; m < f->num_memb[u]; ++m) {
      uint32_t h = f->memb[u][m];
      if (h != a && h != b) return true;
    }
  }
  return false;
}

// Pushes onto |f->stack| the groups that read an output of group |x|.
static uint32_t push_successors(fuse_t* f, uint32_t x, uint32_t top) {
  const grp_t* g = &f->groups[x];
  for (uint32_t j = 0; j < g->num_nodes; ++j) {
    uint32_t v = g->nodes[j];
    if (!f->mat[v] || f->home[v] != x) continue;
    for (uint32_t k = f->uses.offsets[v]; k < f->uses.offsets[v + 1]; ++k) {
      uint32_t u = f->uses.users[k];
      for (uint32_t m = 0; m < f->num_memb[u]; ++m) {
        uint32_t h = f->memb[u][m];
        if (h == x || f->seen[h] == f->seen_stamp) continue;
        f->seen[h] = f->seen_stamp;
        f->stack[top++] = h;
      }
    }
  }
  return top;
}

// Whether group |to| is reachable from group |from| through another group.
static bool indirect_path(fuse_t* f, uint32_t from, uint32_t to) {
  ++f->seen_stamp;
  f->seen[from] = f->seen_stamp;
  f->seen[to] = f->seen_stamp;  // the direct edge is not a cycle
  uint32_t top = push_successors(f, from, 0);
  while (top) {
    uint32_t x = f->stack[--top];
    // Reaching |to| again from x means from -> x -> ... -> to.
    const grp_t* g = &f->groups[x];
    for (uint32_t j = 0; j < g->num_nodes; ++j) {
      uint32_t v = g->nodes[j];
      if (!f->mat[v] || f->home[v] != x) continue;
      for (uint32_t k = f->uses.offsets[v]; k < f->uses.offsets[v + 1]; ++k) {
        uint32_t u = f->uses.users[k];
        for (uint32_t m = 0; m < f->num_memb[u]; ++m) {
          if (f->memb[u][m] == to) return true;
        }
      }
    }
    top = push_successors(f, x, top);
  }
  return false;
}

// Tries to merge groups |a| and |b| (both alive). Returns true if merged.
static tj_status_t try_merge(fuse_t* f, uint32_t a, uint32_t b, bool* merged) {
  *merged = false;
  grp_t* ga = &f->groups[a];
  grp_t* gb = &f->groups[b];
  uint32_t cap = ga->num_nodes + gb->num_nodes;
  uint32_t* u = scratch(f, sizeof(uint32_t) * cap);
  if (!u) return tj_status_oom();
  uint32_t count = 0, x = 0, y = 0;
  while (x < ga->num_nodes || y < gb->num_nodes) {
    uint32_t next;
    if (y >= gb->num_nodes ||
        (x < ga->num_nodes && ga->nodes[x] < gb->nodes[y])) {
      next = ga->nodes[x++];
    } else if (x >= ga->num_nodes || gb->nodes[y] < ga->nodes[x]) {
      next = gb->nodes[y++];
    } else {
      next = ga->nodes[x++];
      ++y;
    }
    u[count++] = next;
  }
  ++f->stamp;
  for (uint32_t j = 0; j < count; ++j) {
    f->in_set[u[j]] = f->stamp;
    f->mat_u[u[j]] = f->mat[u[j]] && still_read(f, u[j], a, b);
  }
  if (joins_own_kernel(f, u, count)) {
    log_fusion(f,
               "not merging kernels of %%%u and %%%u: a node lowering "
               "refused fused is a kernel of its own",
               ga->nodes[ga->num_nodes - 1], gb->nodes[gb->num_nodes - 1]);
    return NULL;
  }
  verdict_t v;
  if (!classify(f, u, count, &v)) {
    log_fusion(f, "not merging kernels of %%%u and %%%u: %s",
               ga->nodes[ga->num_nodes - 1], gb->nodes[gb->num_nodes - 1],
               v.why);
    return NULL;
  }
  if (indirect_path(f, a, b) || indirect_path(f, b, a)) {
    log_fusion(f,
               "not merging kernels of %%%u and %%%u: another kernel "
               "runs between them",
               ga->nodes[ga->num_nodes - 1], gb->nodes[gb->num_nodes - 1]);
    return NULL;
  }
  for (uint32_t j = 0; j < gb->num_nodes; ++j) {
    uint32_t node = gb->nodes[j];
    memb_remove(f, node, b);
    if (!memb_add(f, node, a)) return tj_status_oom();
  }
  for (uint32_t j = 0; j < count; ++j) {
    if (f->mat[u[j]]) {
      f->mat[u[j]] = f->mat_u[u[j]];
      f->home[u[j]] = f->mat_u[u[j]] ? a : TJ_GROUP_NONE;
    }
  }
  ga->nodes = u;
  ga->num_nodes = count;
  ga->kind = v.kind;
  ga->anchor = v.anchor;
  gb->alive = false;
  f->forward[b] = a;
  *merged = true;
  return NULL;
}

static int cand_cmp(const void* pa, const void* pb) {
  const cand_t* a = pa;
  const cand_t* b = pb;
  if (a->sibling != b->sibling) return a->sibling ? 1 : -1;
  if (a->epilogue != b->epilogue) return a->epilogue ? -1 : 1;
  if (a->score != b->score) return a->score > b->score ? -1 : 1;
  if (a->order != b->order) return a->order < b->order ? -1 : 1;
  if (a->a != b->a) return a->a < b->a ? -1 : 1;
  return a->b < b->b ? -1 : (a->b > b->b ? 1 : 0);
}

// Orders candidates by their unordered pair of groups.
static int pair_cmp(const void* pa, const void* pb) {
  const cand_t* a = pa;
  const cand_t* b = pb;
  uint32_t a0 = a->a < a->b ? a->a : a->b, a1 = a->a < a->b ? a->b : a->a;
  uint32_t b0 = b->a < b->b ? b->a : b->b, b1 = b->a < b->b ? b->b : b->a;
  if (a0 != b0) return a0 < b0 ? -1 : 1;
  if (a1 != b1) return a1 < b1 ? -1 : 1;
  return (int)a->sibling - (int)b->sibling;
}

// Whether |x| sorts after |y| (by pair_cmp, or by cand_cmp).
static bool cand_after(const cand_t* x, const cand_t* y, bool by_pair) {
  return (by_pair ? pair_cmp(x, y) : cand_cmp(x, y)) > 0;
}

// A stable merge sort of |c| (|n| of them; |tmp| as many): qsort's order
// where qsort is glibc's merge sort, and the same order wherever it is
// not (stability decides which of two equal pairs' orientations the
// dedup below keeps), without a call through a pointer per compare (the
// sorts were an eighth of fuse over a region probe).
static void sort_cands(cand_t* c, cand_t* tmp, uint32_t n, bool by_pair) {
  enum { kRun = 8 };
  for (uint32_t lo = 0; lo < n; lo += kRun) {
    uint32_t hi = n - lo < kRun ? n : lo + kRun;
    for (uint32_t i = lo + 1; i < hi; ++i) {
      cand_t x = c[i];
      uint32_t j = i;
      for (; j > lo && cand_after(&c[j - 1], &x, by_pair); --j) c[j] = c[j - 1];
      c[j] = x;
    }
  }
  for (uint32_t width = kRun; width < n; width *= 2) {
    for (uint32_t lo = 0; lo + width < n; lo += 2 * width) {
      uint32_t mid = lo + width;
      uint32_t hi = n - mid < width ? n : mid + width;
      uint32_t i = lo, j = mid, k = 0;
      while (i < mid && j < hi)
        tmp[k++] = cand_after(&c[i], &c[j], by_pair) ? c[j++] : c[i++];
      while (i < mid) tmp[k++] = c[i++];
      // c[j..hi) is in place already
      memcpy(&c[lo], tmp, sizeof(cand_t) * k);
    }
  }
}

static bool same_pair(const cand_t* x, const cand_t* y) {
  return (x->a == y->a && x->b == y->b) || (x->a == y->b && x->b == y->a);
}

// Candidate pairs of the current groups.
static tj_status_t collect(fuse_t* f, cand_t** out, uint32_t* out_count) {
  uint32_t cap = 64, count = 0;
  cand_t* cands = scratch(f, sizeof(cand_t) * cap);
  if (!cands) return tj_status_oom();
#define PUSH(...)                                           \
  do {                                                      \
    if (count == cap) {                                     \
      cand_t* grown = scratch(f, sizeof(cand_t) * cap * 2); \
      if (!grown) return tj_status_oom();                   \
      memcpy(grown, cands, sizeof(cand_t) * cap);           \
      cands = grown;                                        \
      cap *= 2;                                             \
    }                                                       \
    cands[count++] = (cand_t){__VA_ARGS__};                 \
  } while (0)
  for (uint32_t c = 0; c < f->num_groups; ++c) {
    const grp_t* g = &f->groups[c];
    if (!g->alive) continue;
    for (uint32_t j = 0; j < g->num_nodes; ++j) {
      const tj_node_t* node = N(f, g->nodes[j]);
      for (uint32_t k = 0; k < node->num_operands; ++k) {
        uint32_t o = node->operands[k];
        if (o == TJ_NODE_NONE || group_has(g, o)) continue;
        if (f->mat[o] && f->home[o] != TJ_GROUP_NONE) {
          uint32_t p = f->home[o];
          PUSH(.a = p, .b = c, .sibling = false,
               .epilogue = f->groups[p].kind == TJ_GROUP_MATMUL ||
                           (f->groups[p].kind == TJ_GROUP_OPAQUE &&
                            N(f, f->groups[p].anchor)->op == TJ_OP_CONV),
               .score = f->bytes[o], .order = g->nodes[0]);
        }
      }
    }
  }
  // Siblings: consecutive readers of one buffer.
  for (uint32_t o = 0; o < f->n; ++o) {
    if (f->cls[o] != C_EXTERNAL && !f->mat[o]) continue;
    if (f->bytes[o] < kSiblingMinBytes) continue;
    uint32_t prev = TJ_GROUP_NONE;
    for (uint32_t k = f->uses.offsets[o]; k < f->uses.offsets[o + 1]; ++k) {
      uint32_t u = f->uses.users[k];
      for (uint32_t m = 0; m < f->num_memb[u]; ++m) {
        uint32_t h = f->memb[u][m];
        if (h == f->home[o] && f->mat[o]) continue;
        if (prev != TJ_GROUP_NONE && prev != h) {
          PUSH(.a = prev, .b = h, .sibling = true, .epilogue = false,
               .score = f->bytes[o], .order = o);
        }
        prev = h;
      }
    }
  }
#undef PUSH
  // One candidate per pair of groups, its scores summed (a pair sharing
  // several buffers saves them all); producer-consumer wins over sibling.
  cand_t* tmp = scratch(f, sizeof(cand_t) * count);
  if (!tmp) return tj_status_oom();
  sort_cands(cands, tmp, count, true);
  uint32_t unique = 0;
  for (uint32_t i = 0; i < count; ++i) {
    if (unique && same_pair(&cands[unique - 1], &cands[i])) {
      cand_t* u = &cands[unique - 1];
      u->score += cands[i].score;
      u->epilogue |= cands[i].epilogue;
      if (cands[i].order < u->order) u->order = cands[i].order;
    } else {
      cands[unique++] = cands[i];
    }
  }
  count = unique;
  sort_cands(cands, tmp, count, false);
  *out = cands;
  *out_count = count;
  return NULL;
}

// A key for the unordered pair of groups in their current versions.
static uint64_t pair_key(const fuse_t* f, uint32_t a, uint32_t b) {
  if (a > b) {
    uint32_t t = a;
    a = b;
    b = t;
  }
  uint64_t h = ((uint64_t)a << 32 | b) * 0x9e3779b97f4a7c15ull;
  h ^= ((uint64_t)f->version[a] << 32 | f->version[b]) * 0xc2b2ae3d27d4eb4full;
  return h ? h : 1;
}

static bool refused_before(const fuse_t* f, uint64_t key) {
  if (!f->refused_capacity) return false;
  for (uint32_t i = (uint32_t)key & (f->refused_capacity - 1);;
       i = (i + 1) & (f->refused_capacity - 1)) {
    if (f->refused[i] == key) return true;
    if (f->refused[i] == 0) return false;
  }
}

static tj_status_t remember_refusal(fuse_t* f, uint64_t key) {
  if (2 * (f->num_refused + 1) > f->refused_capacity) {
    uint32_t cap = f->refused_capacity ? 2 * f->refused_capacity : 64;
    uint64_t* table = scratch(f, sizeof(uint64_t) * cap);
    if (!table) return tj_status_oom();
    memset(table, 0, sizeof(uint64_t) * cap);
    for (uint32_t i = 0; i < f->refused_capacity; ++i) {
      uint64_t k = f->refused[i];
      if (!k) continue;
      uint32_t j = (uint32_t)k & (cap - 1);
      while (table[j]) j = (j + 1) & (cap - 1);
      table[j] = k;
    }
    f->refused = table;
    f->refused_capacity = cap;
  }
  uint32_t j = (uint32_t)key & (f->refused_capacity - 1);
  while (f->refused[j] && f->refused[j] != key) {
    j = (j + 1) & (f->refused_capacity - 1);
  }
  if (!f->refused[j]) {
    f->refused[j] = key;
    ++f->num_refused;
  }
  return NULL;
}

// lsefwd: each attention_lse kernel into the kernel of an attention of the
// same scores (lse_of_attention), found among the readers of its q; where
// one is read by the other (the lse feeding the attention's inputs) the
// cycle check refuses. First, so that no other merge takes either.
static tj_status_t join_attention_lse(fuse_t* f) {
  if (!f->ctx->attention_lse_output) return NULL;
  for (uint32_t l = 0; l < f->n; ++l) {
    if (N(f, l)->op != TJ_OP_ATTENTION_LSE || !f->mat[l]) continue;
    const uint32_t q = N(f, l)->operands[0];
    for (uint32_t k = f->uses.offsets[q]; k < f->uses.offsets[q + 1]; ++k) {
      const uint32_t a = f->uses.users[k];
      if (!f->mat[a] || !lse_of_attention(f, a, l)) continue;
      const uint32_t ga = find(f, f->home[a]), gl = find(f, f->home[l]);
      if (ga == gl || f->groups[ga].num_nodes != 1 ||
          f->groups[gl].num_nodes != 1)
        continue;
      bool merged;
      TJ_RETURN_IF_ERROR(try_merge(f, ga, gl, &merged));
      if (merged) {
        ++f->version[ga];
        log_fusion(f, "attention %%%u writes attention_lse %%%u too", a, l);
        break;
      }
    }
  }
  return NULL;
}

static tj_status_t merge_groups(fuse_t* f) {
  for (int round = 0; round < kMaxRounds; ++round) {
    cand_t* cands = NULL;
    uint32_t count = 0;
    TJ_RETURN_IF_ERROR(collect(f, &cands, &count));
    bool any = false;
    for (uint32_t i = 0; i < count; ++i) {
      uint32_t a = find(f, cands[i].a), b = find(f, cands[i].b);
      if (a == b) continue;
      uint64_t key = pair_key(f, a, b);
      if (refused_before(f, key)) continue;
      bool merged;
      TJ_RETURN_IF_ERROR(try_merge(f, a, b, &merged));
      if (merged) {
        ++f->version[a];
      } else {
        TJ_RETURN_IF_ERROR(remember_refusal(f, key));
      }
      any |= merged;
    }
    if (!any) break;
  }
  return NULL;
}

//===--- results ---===//

static void kind_of_final(fuse_t* f, grp_t* g) {
  if (g->kind == TJ_GROUP_POINTWISE) {
    bool all_reshape = true, output = false;
    for (uint32_t j = 0; j < g->num_nodes; ++j) {
      all_reshape &= N(f, g->nodes[j])->op == TJ_OP_RESHAPE;
      output |= f->uses.is_output[g->nodes[j]];
    }
    // A graph output must land in the caller's buffer: that is a copy.
    if (all_reshape && !output) g->kind = TJ_GROUP_VIEW;
  }
}

static tj_status_t emit_fusion(fuse_t* f, tj_fusion_t** out) {
  tj_allocator_t al = f->g->allocator;
  tj_fusion_t* fu = tj_alloc(al, sizeof(*fu));
  if (!fu) return tj_status_oom();
  memset(fu, 0, sizeof(*fu));
  fu->concat_boxes = f->ctx->concat_boxes;
  tj_arena_initialize(&fu->arena, al);
  uint32_t alive = 0;
  for (uint32_t k = 0; k < f->num_groups; ++k) alive += f->groups[k].alive;
  fu->num_nodes = f->n;
  fu->groups =
      tj_arena_alloc(&fu->arena, sizeof(tj_group_t) * (alive ? alive : 1));
  fu->producer =
      tj_arena_alloc(&fu->arena, sizeof(uint32_t) * (f->n ? f->n : 1));
  uint32_t* indeg = scratch(f, sizeof(uint32_t) * f->num_groups);
  uint32_t* order = scratch(f, sizeof(uint32_t) * f->num_groups);
  uint32_t* first = scratch(f, sizeof(uint32_t) * f->num_groups);
  if (!fu->groups || !fu->producer || !indeg || !order || !first) {
    tj_fusion_destroy(fu);
    return tj_status_oom();
  }
  // Kahn's algorithm over groups, smallest first node first: the original
  // order wherever the dependences allow it.
  for (uint32_t k = 0; k < f->num_groups; ++k) {
    indeg[k] = 0;
    first[k] = f->groups[k].alive ? f->groups[k].nodes[0] : UINT32_MAX;
  }
  for (uint32_t k = 0; k < f->num_groups; ++k) {
    const grp_t* g = &f->groups[k];
    if (!g->alive) continue;
    ++f->seen_stamp;
    for (uint32_t j = 0; j < g->num_nodes; ++j) {
      const tj_node_t* node = N(f, g->nodes[j]);
      for (uint32_t q = 0; q < node->num_operands; ++q) {
        uint32_t o = node->operands[q];
        if (o == TJ_NODE_NONE || group_has(g, o) || !f->mat[o]) continue;
        uint32_t p = f->home[o];
        if (p != TJ_GROUP_NONE && f->seen[p] != f->seen_stamp) {
          f->seen[p] = f->seen_stamp;
          ++indeg[k];
        }
      }
    }
  }
  uint32_t done = 0;
  for (; done < alive; ++done) {
    uint32_t best = TJ_GROUP_NONE;
    for (uint32_t k = 0; k < f->num_groups; ++k) {
      if (f->groups[k].alive && indeg[k] == 0 &&
          (best == TJ_GROUP_NONE || first[k] < first[best])) {
        best = k;
      }
    }
    if (best == TJ_GROUP_NONE) break;
    order[done] = best;
    indeg[best] = UINT32_MAX;  // taken
    const grp_t* g = &f->groups[best];
    ++f->seen_stamp;
    for (uint32_t j = 0; j < g->num_nodes; ++j) {
      uint32_t v = g->nodes[j];
      if (!f->mat[v]) continue;
      for (uint32_t k = f->uses.offsets[v]; k < f->uses.offsets[v + 1]; ++k) {
        uint32_t u = f->uses.users[k];
        for (uint32_t m = 0; m < f->num_memb[u]; ++m) {
          uint32_t h = f->memb[u][m];
          if (h == best || f->seen[h] == f->seen_stamp) continue;
          f->seen[h] = f->seen_stamp;
          if (indeg[h] != UINT32_MAX) --indeg[h];
        }
      }
    }
  }
  if (done != alive) {
    tj_fusion_destroy(fu);
    return tj_internal("fuse: the kernel graph has a cycle");
  }
  for (uint32_t i = 0; i < f->n; ++i) fu->producer[i] = TJ_GROUP_NONE;
  uint32_t* pos = first;  // reuse: group -> position
  for (uint32_t p = 0; p < alive; ++p) pos[order[p]] = p;
  for (uint32_t p = 0; p < alive; ++p) {
    grp_t* g = &f->groups[order[p]];
    kind_of_final(f, g);
    tj_group_t* out_g = &fu->groups[p];
    out_g->kind = g->kind;
    out_g->anchor = g->anchor;
    out_g->num_nodes = g->num_nodes;
    out_g->nodes =
        tj_arena_memdup(&fu->arena, g->nodes, sizeof(uint32_t) * g->num_nodes);
    uint32_t* ins = scratch(f, sizeof(uint32_t) * (f->n ? f->n : 1));
    uint32_t* outs = scratch(f, sizeof(uint32_t) * g->num_nodes);
    if (!out_g->nodes || !ins || !outs) {
      tj_fusion_destroy(fu);
      return tj_status_oom();
    }
    uint32_t ni = 0, no = 0;
    ++f->stamp;
    for (uint32_t j = 0; j < g->num_nodes; ++j) {
      uint32_t v = g->nodes[j];
      if (f->mat[v]) {
        outs[no++] = v;
        fu->producer[v] = p;
      }
      const tj_node_t* node = N(f, v);
      for (uint32_t q = 0; q < node->num_operands; ++q) {
        uint32_t o = node->operands[q];
        if (o == TJ_NODE_NONE || group_has(g, o) || f->in_set[o] == f->stamp) {
          continue;
        }
        f->in_set[o] = f->stamp;
        ins[ni++] = o;
      }
    }
    // Ascending inputs.
    for (uint32_t j = 1; j < ni; ++j) {
      uint32_t x = ins[j], t = j;
      while (t > 0 && ins[t - 1] > x) {
        ins[t] = ins[t - 1];
        --t;
      }
      ins[t] = x;
    }
    out_g->num_inputs = ni;
    out_g->inputs = tj_arena_memdup(&fu->arena, ins, sizeof(uint32_t) * ni);
    out_g->num_outputs = no;
    out_g->outputs = tj_arena_memdup(&fu->arena, outs, sizeof(uint32_t) * no);
    if ((ni && !out_g->inputs) || (no && !out_g->outputs)) {
      tj_fusion_destroy(fu);
      return tj_status_oom();
    }
  }
  fu->num_groups = alive;
  *out = fu;
  return NULL;
}

// TJ_DUMP_DIR: the groups as Graphviz. A dump never fails the compile:
// tj_dump_write warns instead, and so does a failure to render it.
static void dump_dot(tj_pass_ctx_t* ctx, const tj_fusion_t* fusion,
                     const tj_graph_t* g) {
  char* text = NULL;
  tj_status_t status = tj_fusion_dot(fusion, g, &text);
  if (status) {
    // Name where the directory came from: TJ_DUMP_DIR or the option.
    const char* setting = tj_setting(g->context, TJ_SETTING_DUMP_DIR);
    const char* source =
        setting && strcmp(setting, ctx->dump_dir) == 0
            ? tj_setting_source(g->context, TJ_SETTING_DUMP_DIR)
            : "the pass context's dump_dir";
    tj_context_diagnostic(g->context, TJ_SEVERITY_WARNING,
                          "%s: no fusion dump: %s", source,
                          tj_status_message(status));
    tj_status_free(status);
    return;
  }
  char name[300];
  snprintf(name, sizeof(name), "%.280s.fused.dot", g->name ? g->name : "main");
  tj_dump_write(g->context, ctx->dump_dir, name, text);
  tj_context_free_string(g->context, text);
}

tj_status_t tj_pass_fuse(tj_pass_ctx_t* ctx, tj_plan_t* plan) {
  const tj_graph_t* g = plan->graph;
  fuse_t f;
  memset(&f, 0, sizeof(f));
  f.ctx = ctx;
  f.g = g;
  f.n = g->num_nodes;
  tj_arena_initialize(&f.scratch, g->allocator);
  tj_status_t status = tj_uses_initialize(&f.uses, g);
  if (status) {
    tj_arena_deinitialize(&f.scratch);
    return status;
  }
  size_t n = f.n ? f.n : 1;
  f.cls = scratch(&f, n);
  f.mat = scratch(&f, n * sizeof(bool));
  f.forced = scratch(&f, n * sizeof(bool));
  f.wide = scratch(&f, n * sizeof(bool));
  f.home = scratch(&f, n * sizeof(uint32_t));
  f.bytes = scratch(&f, n * sizeof(int64_t));
  f.roots = scratch(&f, n * kMaxRoots * sizeof(uint32_t));
  f.num_roots = scratch(&f, n);
  f.size = scratch(&f, n * sizeof(uint32_t));
  f.memb = scratch(&f, n * sizeof(uint32_t*));
  f.num_memb = scratch(&f, n * sizeof(uint32_t));
  f.cap_memb = scratch(&f, n * sizeof(uint32_t));
  f.in_set = scratch(&f, n * sizeof(uint32_t));
  f.dep = scratch(&f, n * sizeof(bool));
  f.mat_u = scratch(&f, n * sizeof(bool));
  f.seen = scratch(&f, n * sizeof(uint32_t));
  f.stack = scratch(&f, n * sizeof(uint32_t));  // each group pushed once
  if (!f.cls || !f.mat || !f.forced || !f.wide || !f.home || !f.bytes ||
      !f.roots || !f.num_roots || !f.size || !f.memb || !f.num_memb ||
      !f.cap_memb || !f.in_set || !f.dep || !f.mat_u || !f.seen || !f.stack) {
    status = tj_status_oom();
  }
  if (!status) {
    memset(f.mat, 0, n * sizeof(bool));
    memset(f.forced, 0, n * sizeof(bool));
    memset(f.wide, 0, n * sizeof(bool));
    memset(f.num_roots, 0, n);
    memset(f.size, 0, n * sizeof(uint32_t));
    memset(f.memb, 0, n * sizeof(uint32_t*));
    memset(f.num_memb, 0, n * sizeof(uint32_t));
    memset(f.cap_memb, 0, n * sizeof(uint32_t));
    memset(f.in_set, 0, n * sizeof(uint32_t));
    memset(f.seen, 0, n * sizeof(uint32_t));
    for (uint32_t i = 0; i < f.n; ++i) {
      f.cls[i] = (uint8_t)classify_op(g->nodes[i].op);
      // qfold (issue 17): a dequantize decompose left whole (the target
      // reads the quantized weight in its GEMM) is a movement of its
      // constants into the matmul's B (fusing_use).
      if (g->nodes[i].op == TJ_OP_DEQUANTIZE && !f.uses.is_output[i]) {
        bool all_b = f.uses.offsets[i + 1] > f.uses.offsets[i];
        for (uint32_t k = f.uses.offsets[i]; k < f.uses.offsets[i + 1]; ++k) {
          all_b = all_b && is_quantized_b(&f, f.uses.users[k], i);
        }
        if (all_b) f.cls[i] = C_INJECTIVE;
      }
      f.home[i] = TJ_GROUP_NONE;
      f.bytes[i] = tj_pass_node_bytes(ctx, g, i);
    }
    decide(&f);
    if (wide_pads(&f)) {
      memset(f.mat, 0, n * sizeof(bool));
      memset(f.num_roots, 0, n);
      memset(f.size, 0, n * sizeof(uint32_t));
      decide(&f);
    }
    status = build_kernels(&f);
  }
  // Each phase-2 kernel must already be legal on its own.
  for (uint32_t k = 0; !status && k < f.num_groups; ++k) {
    grp_t* grp = &f.groups[k];
    ++f.stamp;
    for (uint32_t j = 0; j < grp->num_nodes; ++j) {
      f.in_set[grp->nodes[j]] = f.stamp;
      f.mat_u[grp->nodes[j]] = f.mat[grp->nodes[j]];
    }
    verdict_t v;
    if (!classify(&f, grp->nodes, grp->num_nodes, &v)) {
      status = tj_internal("fuse: the kernel of %%%u is not a legal group: %s",
                           grp->nodes[grp->num_nodes - 1], v.why);
      break;
    }
    grp->kind = v.kind;
    grp->anchor = v.anchor;
  }
  if (!status) status = join_attention_lse(&f);
  if (!status) status = merge_groups(&f);
  tj_fusion_t* fusion = NULL;
  if (!status) status = emit_fusion(&f, &fusion);
  tj_uses_deinitialize(&f.uses);
  tj_arena_deinitialize(&f.scratch);
  if (status) return status;
  tj_plan_set_fusion(plan, fusion);
  if (ctx->dump_dir && *ctx->dump_dir) dump_dot(ctx, fusion, plan->graph);
  return NULL;
}

//===--- the rest of fusion.h ---===//

const char* tj_group_kind_name(tj_group_kind_t kind) {
  switch (kind) {
    case TJ_GROUP_POINTWISE:
      return "pointwise";
    case TJ_GROUP_REDUCTION:
      return "reduction";
    case TJ_GROUP_MATMUL:
      return "matmul";
    case TJ_GROUP_OPAQUE:
      return "opaque";
    case TJ_GROUP_VIEW:
      return "view";
  }
  return "?";
}

void tj_fusion_destroy(tj_fusion_t* fusion) {
  if (!fusion) return;
  tj_allocator_t al = fusion->arena.allocator;
  tj_arena_deinitialize(&fusion->arena);
  tj_free(al, fusion, sizeof(*fusion));
}

uint32_t tj_fusion_num_kernels(const tj_fusion_t* fusion) {
  uint32_t count = 0;
  for (uint32_t k = 0; k < fusion->num_groups; ++k) {
    count += fusion->groups[k].kind != TJ_GROUP_VIEW;
  }
  return count;
}

static bool sorted_has(const uint32_t* v, uint32_t count, uint32_t x) {
  for (uint32_t i = 0; i < count; ++i) {
    if (v[i] == x) return true;
  }
  return false;
}

tj_status_t tj_fusion_verify(const tj_fusion_t* fu, const tj_graph_t* g) {
  if (fu->num_nodes != g->num_nodes) {
    return tj_internal("fusion: groups index %u nodes, the graph has %u",
                       fu->num_nodes, g->num_nodes);
  }
  for (uint32_t p = 0; p < fu->num_groups; ++p) {
    const tj_group_t* grp = &fu->groups[p];
    if (!grp->num_nodes || !grp->num_outputs) {
      return tj_internal("fusion: group %u is empty or writes nothing", p);
    }
    for (uint32_t j = 0; j < grp->num_nodes; ++j) {
      uint32_t v = grp->nodes[j];
      if (v >= g->num_nodes || (j && grp->nodes[j - 1] >= v)) {
        return tj_internal("fusion: group %u's nodes are not ascending", p);
      }
      tj_op_t op = g->nodes[v].op;
      if (op == TJ_OP_INPUT || op == TJ_OP_CONSTANT) {
        return tj_internal("fusion: group %u computes input/constant %%%u", p,
                           v);
      }
      const tj_node_t* node = &g->nodes[v];
      for (uint32_t q = 0; q < node->num_operands; ++q) {
        uint32_t o = node->operands[q];
        if (o == TJ_NODE_NONE || sorted_has(grp->nodes, grp->num_nodes, o)) {
          continue;
        }
        if (!sorted_has(grp->inputs, grp->num_inputs, o)) {
          return tj_internal(
              "fusion: group %u reads %%%u but does not list "
              "it as an input",
              p, o);
        }
        tj_op_t oop = g->nodes[o].op;
        bool external = oop == TJ_OP_INPUT || oop == TJ_OP_CONSTANT;
        if (!external &&
            (fu->producer[o] == TJ_GROUP_NONE || fu->producer[o] >= p)) {
          return tj_internal(
              "fusion: group %u reads %%%u before any group "
              "writes it",
              p, o);
        }
      }
    }
    for (uint32_t j = 0; j < grp->num_outputs; ++j) {
      uint32_t v = grp->outputs[j];
      if (!sorted_has(grp->nodes, grp->num_nodes, v) || fu->producer[v] != p) {
        return tj_internal("fusion: group %u's output %%%u is not its own", p,
                           v);
      }
    }
  }
  for (uint32_t i = 0; i < g->num_outputs; ++i) {
    uint32_t v = g->outputs[i].node;
    tj_op_t op = g->nodes[v].op;
    if (op != TJ_OP_INPUT && op != TJ_OP_CONSTANT &&
        fu->producer[v] == TJ_GROUP_NONE) {
      return tj_internal("fusion: output \"%s\" (%%%u) is written by no group",
                         g->outputs[i].name, v);
    }
  }
  return NULL;
}
