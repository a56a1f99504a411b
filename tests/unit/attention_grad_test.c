// attention's backward (issue 14, task fabwd): attention_lse, attention_dq
// and attention_dkv, which vjp_attention emits (lib/autodiff.c).
//
// - grads: each case's joint graph (y and dL/dq, dL/dk, dL/dv) is checked
//   to hold the three backward nodes, run in f64 on the reference against
//   central differences of L = sum(y * r) on the forward (1e-6 absolute +
//   relative: the forward's eval is independent of the backward's), then
//   compiled for x86 at every ISA tier the host has (the decomposition of
//   the backward nodes, with no graph break) in f32 against the f64 reference
//   (1e-4) and in bf16 on the host tier (2e-2 of the gradient's largest
//   magnitude: one rounding of the inputs, f32 inside). Cases: grouped-query
//   heads (G 1, 2, 4), causal with Tq < Tk and Tq > Tk, bool masks with a fully
//   masked row (its gradients 0), an additive mask that takes no gradient, odd
//   T, a non-default scale, batch dims broadcast (k and v shared by the batch:
//   dk and dv summed over it), and symbolic B and T at two bindings of one
//   executable.
// - lse: attention_lse against a loop written here, -inf on a masked row.
// - partition (lsefwd): the joint graphs of the constant-size cases split
//   by tj_graph_partition with save_attention_lse: the forward holds the
//   attention_lse and saves it, the backward holds none (without the
//   option it is the backward's, as before); forward then backward give
//   the joint graph's gradients on the reference (1e-12) and compiled for
//   x86 at every tier in f32 (1e-4 of the f64 joint graph).
// - errors: operands of the wrong dtype or shape, named with the op.
// - oom: the failing-allocator sweep over grad, compile and run.

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/dtype.h"
#include "lib/ir.h"
#include "tensorjit/tj_autodiff.h"
#include "tensorjit/tj_executable.h"
#include "tensorjit/tj_graph.h"
#include "tensorjit/tj_tensor.h"
#include "tests/unit/test.h"

enum { kMaxCtx = 3 };
static tj_context_t* g_ctx[kMaxCtx];
static const char* g_isa[kMaxCtx];
static int g_num_ctx;

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static double uniform(double lo, double hi) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * (double)(g_rng >> 11) / 9007199254740992.0;
}

// One case: q [B, H, Tq, D], k [Bk, Hkv, Tk, D], v [Bk, Hkv, Tk, Dv]; a
// mask [Tq, Tk] (0 none, 1 bool, 2 additive); symbolic B (q's batch) and T
// (Tq = Tk) when asked, bound at run time to b2/t2 for a second run.
typedef struct case_t {
  const char* name;
  int64_t b, bk, h, hkv, tq, tk, d, dv;
  int mask;
  bool causal, sym_b, sym_t;
  double scale;
  int64_t b2, t2;  // the second binding (symbolic cases)
} case_t;

static const case_t kCases[] = {
    {"plain", 2, 2, 2, 2, 5, 7, 8, 6, 0, false, false, false, 0, 0, 0},
    {"gqa2_causal_bool", 2, 2, 4, 2, 5, 7, 8, 6, 1, true, false, false, 0.7, 0,
     0},
    {"gqa4_causal_wide", 1, 1, 8, 2, 3, 11, 4, 5, 0, true, false, false, 0.3, 0,
     0},
    {"causal_tall_additive", 2, 2, 2, 1, 6, 4, 5, 3, 2, true, false, false, 0,
     0, 0},
    {"broadcast_batch", 3, 1, 2, 1, 4, 5, 4, 4, 1, false, false, false, 0, 0,
     0},
    {"symbolic_b_t", 2, 2, 4, 2, 9, 9, 8, 8, 1, true, true, true, 0, 3, 5},
};

static int64_t numel4(const int64_t* d, int r) {
  int64_t n = 1;
  for (int i = 0; i < r; ++i) n *= d[i];
  return n;
}

// The concrete dims of operand |i| (q, k, v, mask, dy) at binding (b, t).
static int rank_of_operand(int i) { return i == 3 ? 2 : 4; }
static void operand_dims(const case_t* c, int i, int64_t b, int64_t t,
                         int64_t* out) {
  const int64_t tq = c->sym_t ? t : c->tq, tk = c->sym_t ? t : c->tk;
  const int64_t bk = c->bk == c->b ? b : c->bk;
  switch (i) {
    case 0:
      memcpy(out, (int64_t[]){b, c->h, tq, c->d}, sizeof(int64_t) * 4);
      break;
    case 1:
      memcpy(out, (int64_t[]){bk, c->hkv, tk, c->d}, sizeof(int64_t) * 4);
      break;
    case 2:
      memcpy(out, (int64_t[]){bk, c->hkv, tk, c->dv}, sizeof(int64_t) * 4);
      break;
    case 3:
      memcpy(out, (int64_t[]){tq, tk}, sizeof(int64_t) * 2);
      break;
    default:
      memcpy(out, (int64_t[]){b, c->h, tq, c->dv}, sizeof(int64_t) * 4);
      break;
  }
}

// The forward graph (|joint| NULL) or the joint graph of grad w.r.t. q, k
// and v: inputs q, k, v[, mask][, dy], outputs y[, gq, gk, gv].
static tj_graph_t* build(tj_context_t* ctx, const case_t* c, tj_dtype_t dt,
                         bool joint) {
  tj_graph_t* g = NULL;
  if (tj_graph_create(ctx, c->name, &g)) return NULL;
  const int64_t B = c->sym_b ? tj_graph_symbol(g, "B") : c->b;
  const int64_t Bk = c->bk == c->b ? B : c->bk;
  const int64_t T = c->sym_t ? tj_graph_symbol(g, "T") : 0;
  const int64_t tq = c->sym_t ? T : c->tq, tk = c->sym_t ? T : c->tk;
  tj_value_t q = tj_graph_input(g, dt, 4, (int64_t[]){B, c->h, tq, c->d}, "q");
  tj_value_t k =
      tj_graph_input(g, dt, 4, (int64_t[]){Bk, c->hkv, tk, c->d}, "k");
  tj_value_t v =
      tj_graph_input(g, dt, 4, (int64_t[]){Bk, c->hkv, tk, c->dv}, "v");
  tj_value_t m = tj_value_none();
  if (c->mask)
    m = tj_graph_input(g, c->mask == 1 ? TJ_DTYPE_BOOL : dt, 2,
                       (int64_t[]){tq, tk}, "m");
  tj_graph_output(g, tj_graph_attention(g, q, k, v, m, c->scale, c->causal),
                  "y");
  tj_status_t st = tj_graph_finalize(g);
  if (!st && joint) {
    tj_graph_t* j = NULL;
    st = tj_graph_grad(g, 0, NULL, 3, (int32_t[]){0, 1, 2}, &j);
    tj_graph_destroy(g);
    g = j;
  }
  CHECK_OK(st);
  return g;
}

// Runs |g| (on the reference when |exe| is NULL) at binding (b, t) on f64
// inputs converted to |dt|; its outputs y[, gq, gk, gv] as f64 into |out|.
static void run(const case_t* c, tj_graph_t* g, tj_executable_t* exe,
                tj_dtype_t dt, int64_t b, int64_t t, bool joint,
                double* const* in, double** out) {
  const int nin = 3 + (c->mask ? 1 : 0) + (joint ? 1 : 0);
  const int nout = joint ? 4 : 1;
  static const int kOut[4] = {4, 0, 1, 2};  // y, gq, gk, gv as operands
  int idx[5], n = 0;
  for (int i = 0; i < 5; ++i)
    if ((i != 3 || c->mask) && (i != 4 || joint)) idx[n++] = i;
  tj_tensor_t ins[5], outs[4];
  void* bufs[9];
  int64_t tdims[9][4];  // a tensor keeps a pointer to its dims
  for (int a = 0; a < nin; ++a) {
    const int i = idx[a];
    int64_t* dims = tdims[a];
    operand_dims(c, i, b, t, dims);
    const int r = rank_of_operand(i);
    const int64_t ne = numel4(dims, r);
    const tj_dtype_t et = i == 3 && c->mask == 1 ? TJ_DTYPE_BOOL : dt;
    bufs[a] = malloc((size_t)(ne ? ne : 1) * tj_dtype_size(et));
    for (int64_t e = 0; e < ne; ++e) tj_store_f64(et, bufs[a], e, in[i][e]);
    ins[a] = tj_tensor_make(bufs[a], et, r, dims);
  }
  for (int o = 0; o < nout; ++o) {
    int64_t* dims = tdims[nin + o];
    operand_dims(c, kOut[o], b, t, dims);
    const int64_t ne = numel4(dims, 4);
    bufs[nin + o] = calloc((size_t)ne, tj_dtype_size(dt));
    outs[o] = tj_tensor_make(bufs[nin + o], dt, 4, dims);
  }
  if (exe)
    CHECK_OK(tj_executable_run(exe, ins, nin, outs, nout));
  else
    CHECK_OK(tj_reference_run(g, ins, nin, outs, nout));
  for (int o = 0; o < nout; ++o) {
    const int64_t* dims = tdims[nin + o];
    for (int64_t e = 0; e < numel4(dims, 4); ++e)
      out[o][e] = tj_load_f64(dt, bufs[nin + o], e);
  }
  for (int a = 0; a < nin + nout; ++a) free(bufs[a]);
}

// Inputs of a binding: uniform values; a bool mask ~80 % true with the
// first row all false (a fully masked row); an additive mask in [-1, 1]
// with one -inf.
static void fill_inputs(const case_t* c, int64_t b, int64_t t, double** in) {
  int64_t dims[4];
  for (int i = 0; i < 5; ++i) {
    operand_dims(c, i, b, t, dims);
    const int64_t ne = numel4(dims, rank_of_operand(i));
    in[i] = malloc((size_t)(ne ? ne : 1) * sizeof(double));
    for (int64_t e = 0; e < ne; ++e) {
      if (i == 3 && c->mask == 1)
        in[i][e] = e < dims[1] ? 0.0 : (uniform(0, 1) < 0.8 ? 1.0 : 0.0);
      else
        in[i][e] = uniform(-1, 1);
    }
    if (i == 3 && c->mask == 2) in[i][1] = -INFINITY;
  }
}

static int compare(const char* what, const char* isa, int o, const double* got,
                   const double* want, int64_t n, double atol, double rtol) {
  int wrong = 0;
  for (int64_t e = 0; e < n; ++e)
    if (!(fabs(got[e] - want[e]) <= atol + rtol * fabs(want[e])) && wrong++ < 3)
      fprintf(stderr, "%s %s: output %d [%lld] %.9g vs %.9g\n", what, isa, o,
              (long long)e, got[e], want[e]);
  return wrong;
}

static void grad_case(const case_t* c) {
  const int bindings = c->sym_b || c->sym_t ? 2 : 1;
  tj_graph_t* fwd = build(g_ctx[0], c, TJ_DTYPE_F64, false);
  tj_graph_t* joint = build(g_ctx[0], c, TJ_DTYPE_F64, true);
  CHECK(fwd != NULL && joint != NULL);
  if (!fwd || !joint) {
    tj_graph_destroy(fwd);
    tj_graph_destroy(joint);
    return;
  }
  // The fused form: the three backward nodes, no softmax written out.
  char* text = NULL;
  CHECK_OK(tj_graph_print(joint, &text));
  if (text) {
    CHECK_CONTAINS(text, "attention_lse");
    CHECK_CONTAINS(text, "attention_dq");
    CHECK_CONTAINS(text, "attention_dkv");
    CHECK(strstr(text, " exp(") == NULL && strstr(text, "= exp") == NULL);
    tj_context_free_string(g_ctx[0], text);
  }
  // Executables per tier (f32) and on the host tier (bf16), reused across
  // the bindings.
  tj_executable_t* exe[kMaxCtx] = {NULL};
  tj_executable_t* exe_bf16 = NULL;
  tj_graph_t* jg[kMaxCtx] = {NULL};
  tj_graph_t* jb = build(g_ctx[0], c, TJ_DTYPE_BF16, true);
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.verify_each = true;
  opts.cache_dir = "";
  for (int ci = 0; ci <= g_num_ctx; ++ci) {
    tj_executable_t** e = ci < g_num_ctx ? &exe[ci] : &exe_bf16;
    if (ci < g_num_ctx) jg[ci] = build(g_ctx[ci], c, TJ_DTYPE_F32, true);
    tj_graph_t* jj = ci < g_num_ctx ? jg[ci] : jb;
    if (jj) CHECK_OK(tj_compile(jj, &opts, e));
    if (!*e) continue;
    // Every piece compiles: no graph break on any tier.
    tj_executable_stats_t stats;
    memset(&stats, 0, sizeof(stats));
    tj_executable_stats(*e, &stats);
    if (stats.num_graph_breaks)
      fprintf(stderr, "%s: %d graph breaks (%s)\n", c->name,
              stats.num_graph_breaks, ci < g_num_ctx ? g_isa[ci] : "bf16");
    CHECK_EQ_INT(0, stats.num_graph_breaks);
  }
  for (int bi = 0; bi < bindings; ++bi) {
    const int64_t b = bi ? c->b2 : c->b, t = bi ? c->t2 : c->tq;
    double* in[5];
    double *want[4], *got[4], *probe[1];
    fill_inputs(c, b, t, in);
    int64_t dims[4], sizes[4];
    static const int kOut[4] = {4, 0, 1, 2};
    for (int o = 0; o < 4; ++o) {
      operand_dims(c, kOut[o], b, t, dims);
      sizes[o] = numel4(dims, 4);
      want[o] = malloc((size_t)sizes[o] * sizeof(double));
      got[o] = malloc((size_t)sizes[o] * sizeof(double));
    }
    probe[0] = malloc((size_t)sizes[0] * sizeof(double));
    run(c, joint, NULL, TJ_DTYPE_F64, b, t, true, in, want);
    // Central differences of L = sum(y * dy) through the forward.
    const double h = 1e-6;
    int bad = 0;
    for (int i = 0; i < 3; ++i) {
      operand_dims(c, i, b, t, dims);
      for (int64_t e = 0; e < numel4(dims, 4); ++e) {
        const double x0 = in[i][e];
        double l[2];
        for (int side = 0; side < 2; ++side) {
          in[i][e] = x0 + (side ? h : -h);
          run(c, fwd, NULL, TJ_DTYPE_F64, b, t, false, in, probe);
          l[side] = 0;
          for (int64_t j = 0; j < sizes[0]; ++j)
            l[side] += probe[0][j] * in[4][j];
        }
        in[i][e] = x0;
        const double fd = (l[1] - l[0]) / (2 * h), an = want[1 + i][e];
        if (!(fabs(fd - an) <= 1e-6 + 1e-6 * fabs(fd)) && bad++ < 4)
          fprintf(stderr, "%s: operand %d [%lld] analytic %.12g fd %.12g\n",
                  c->name, i, (long long)e, an, fd);
      }
    }
    CHECK_EQ_INT(0, bad);
    // A fully masked query row (bool mask, row 0) has zero dq.
    if (c->mask == 1 && !c->sym_t) {
      for (int64_t bh = 0; bh < b * c->h; ++bh)
        for (int64_t e = 0; e < c->d; ++e)
          CHECK(want[1][bh * c->tq * c->d + e] == 0.0);
    }
    for (int ci = 0; ci < g_num_ctx; ++ci) {
      if (!exe[ci]) continue;
      run(c, jg[ci], exe[ci], TJ_DTYPE_F32, b, t, true, in, got);
      for (int o = 0; o < 4; ++o)
        CHECK_EQ_INT(0, compare(c->name, g_isa[ci], o, got[o], want[o],
                                sizes[o], 1e-4, 1e-4));
    }
    if (exe_bf16) {
      run(c, jb, exe_bf16, TJ_DTYPE_BF16, b, t, true, in, got);
      for (int o = 0; o < 4; ++o) {
        double mx = 0;
        for (int64_t e = 0; e < sizes[o]; ++e) mx = fmax(mx, fabs(want[o][e]));
        CHECK_EQ_INT(0, compare(c->name, "bf16", o, got[o], want[o], sizes[o],
                                2e-2 * (mx > 1 ? mx : 1), 0));
      }
    }
    for (int i = 0; i < 5; ++i) free(in[i]);
    for (int o = 0; o < 4; ++o) {
      free(want[o]);
      free(got[o]);
    }
    free(probe[0]);
  }
  for (int ci = 0; ci < g_num_ctx; ++ci) {
    tj_executable_release(exe[ci]);
    tj_graph_destroy(jg[ci]);
  }
  tj_executable_release(exe_bf16);
  tj_graph_destroy(jb);
  tj_graph_destroy(fwd);
  tj_graph_destroy(joint);
}

TEST(grads) {
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i)
    grad_case(&kCases[i]);
}

// lsefwd: values by name (a graph's inputs and outputs), as f64.
enum { kMaxNamed = 16 };
typedef struct named_t {
  char name[64];
  double* data;
  int64_t n;
} named_t;
typedef struct env_t {
  named_t v[kMaxNamed];
  int n;
} env_t;

static named_t* env_find(env_t* env, const char* name) {
  for (int i = 0; i < env->n; ++i)
    if (strcmp(env->v[i].name, name) == 0) return &env->v[i];
  return NULL;
}

static void env_free(env_t* env) {
  for (int i = 0; i < env->n; ++i) free(env->v[i].data);
  env->n = 0;
}

// Runs |g| (constant sizes; on the reference when |exe| is NULL) on the
// values of |in| named as its inputs, each converted to the input's dtype
// (f64 to |dt| for the floats of |exe|'s graph); adds its outputs to |out|
// under their names.
static void run_named(tj_graph_t* g, tj_executable_t* exe, env_t* in,
                      env_t* out) {
  const int32_t nin = tj_graph_num_inputs(g), nout = tj_graph_num_outputs(g);
  tj_tensor_t ins[kMaxNamed], outs[kMaxNamed];
  void* bufs[2 * kMaxNamed];
  int64_t dims[2 * kMaxNamed][TJ_MAX_RANK];
  int64_t count[2 * kMaxNamed];
  CHECK(nin <= kMaxNamed && nout <= kMaxNamed && out->n + nout <= kMaxNamed);
  for (int32_t i = 0; i < nin + nout; ++i) {
    const tj_value_t val = i < nin ? tj_graph_input_value(g, i)
                                   : tj_graph_output_value(g, i - nin);
    const tj_dtype_t dt = tj_graph_value_dtype(g, val);
    const int32_t r = tj_graph_value_rank(g, val);
    tj_graph_value_dims(g, val, dims[i]);
    count[i] = numel4(dims[i], r);
    bufs[i] = calloc((size_t)(count[i] ? count[i] : 1), tj_dtype_size(dt));
    if (i < nin) {
      const named_t* src = env_find(in, tj_graph_input_name(g, i));
      CHECK(src != NULL && src->n == count[i]);
      for (int64_t e = 0; src && e < count[i]; ++e)
        tj_store_f64(dt, bufs[i], e, src->data[e]);
      ins[i] = tj_tensor_make(bufs[i], dt, r, dims[i]);
    } else {
      outs[i - nin] = tj_tensor_make(bufs[i], dt, r, dims[i]);
    }
  }
  if (exe)
    CHECK_OK(tj_executable_run(exe, ins, nin, outs, nout));
  else
    CHECK_OK(tj_reference_run(g, ins, nin, outs, nout));
  for (int32_t o = 0; o < nout; ++o) {
    named_t* dst = &out->v[out->n++];
    snprintf(dst->name, sizeof(dst->name), "%s", tj_graph_output_name(g, o));
    dst->n = count[nin + o];
    dst->data = malloc((size_t)(dst->n ? dst->n : 1) * sizeof(double));
    const tj_dtype_t dt = tj_graph_value_dtype(g, tj_graph_output_value(g, o));
    for (int64_t e = 0; e < dst->n; ++e)
      dst->data[e] = tj_load_f64(dt, bufs[nin + o], e);
  }
  for (int32_t i = 0; i < nin + nout; ++i) free(bufs[i]);
}

// Nodes of |g| with op |op|.
static int count_op(const tj_graph_t* g, tj_op_t op) {
  int n = 0;
  for (uint32_t i = 0; i < g->num_nodes; ++i) n += g->nodes[i].op == op;
  return n;
}

// |c|'s joint graph in |dt| built in |ctx|, split with or without
// save_attention_lse.
static void split(tj_context_t* ctx, const case_t* c, tj_dtype_t dt, bool save,
                  tj_graph_t** fwd, tj_graph_t** bwd) {
  *fwd = *bwd = NULL;
  tj_graph_t* joint = build(ctx, c, dt, true);
  if (!joint) return;
  tj_partition_options_t po;
  tj_partition_options_initialize(&po);
  CHECK(!po.save_attention_lse);  // off by default
  po.save_attention_lse = save;
  CHECK_OK(
      tj_graph_partition(joint, 3 + (c->mask ? 1 : 0), 1, &po, fwd, bwd, NULL));
  tj_graph_destroy(joint);
}

static void partition_case(const case_t* c) {
  tj_graph_t* joint = build(g_ctx[0], c, TJ_DTYPE_F64, true);
  if (!joint) return;
  // The joint graph's inputs and its outputs on the reference.
  env_t in = {0}, want = {0};
  for (int32_t i = 0; i < tj_graph_num_inputs(joint); ++i) {
    const tj_value_t val = tj_graph_input_value(joint, i);
    int64_t dims[TJ_MAX_RANK];
    tj_graph_value_dims(joint, val, dims);
    named_t* x = &in.v[in.n++];
    snprintf(x->name, sizeof(x->name), "%s", tj_graph_input_name(joint, i));
    x->n = numel4(dims, tj_graph_value_rank(joint, val));
    x->data = malloc((size_t)x->n * sizeof(double));
    const bool bool_mask = tj_graph_value_dtype(joint, val) == TJ_DTYPE_BOOL;
    for (int64_t e = 0; e < x->n; ++e)
      x->data[e] = bool_mask ? (e < dims[1] ? 0.0 : uniform(0, 1) < 0.8)
                             : uniform(-1, 1);
  }
  run_named(joint, NULL, &in, &want);
  for (int save = 0; save < 2; ++save) {
    tj_graph_t *fwd, *bwd;
    split(g_ctx[0], c, TJ_DTYPE_F64, save != 0, &fwd, &bwd);
    if (!fwd || !bwd) {
      tj_graph_destroy(fwd);
      tj_graph_destroy(bwd);
      continue;
    }
    // Where attention_lse is computed.
    CHECK_EQ_INT(save ? 1 : 0, count_op(fwd, TJ_OP_ATTENTION_LSE));
    CHECK_EQ_INT(save ? 0 : 1, count_op(bwd, TJ_OP_ATTENTION_LSE));
    CHECK_EQ_INT(1, count_op(fwd, TJ_OP_ATTENTION));
    CHECK_EQ_INT(0, count_op(bwd, TJ_OP_ATTENTION));
    if (save) CHECK_EQ_INT(2, tj_graph_num_outputs(fwd));  // y, its lse
    // Forward, then backward on the reference: the joint graph's numbers.
    env_t got = {0};
    run_named(fwd, NULL, &in, &got);
    for (int i = 0; i < in.n && got.n < kMaxNamed; ++i) {
      if (env_find(&got, in.v[i].name)) continue;
      named_t* x = &got.v[got.n++];
      *x = in.v[i];
      x->data = malloc((size_t)x->n * sizeof(double));
      memcpy(x->data, in.v[i].data, (size_t)x->n * sizeof(double));
    }
    run_named(bwd, NULL, &got, &got);
    for (int32_t o = 0; o < tj_graph_num_outputs(bwd); ++o) {
      const char* name = tj_graph_output_name(bwd, o);
      named_t *a = env_find(&got, name), *w = env_find(&want, name);
      CHECK(a != NULL && w != NULL && a->n == w->n);
      if (a && w)
        CHECK_EQ_INT(0, compare(c->name, save ? "split, lse saved" : "split", o,
                                a->data, w->data, w->n, 1e-12, 1e-12));
    }
    env_free(&got);
    tj_graph_destroy(fwd);
    tj_graph_destroy(bwd);
  }
  // The split with the lse saved, compiled for x86 at every tier in f32.
  for (int ci = 0; ci < g_num_ctx; ++ci) {
    tj_graph_t *fwd, *bwd;
    split(g_ctx[ci], c, TJ_DTYPE_F32, true, &fwd, &bwd);
    tj_compile_options_t opts;
    tj_compile_options_initialize(&opts);
    opts.verify_each = true;
    opts.cache_dir = "";
    tj_executable_t *ef = NULL, *eb = NULL;
    if (fwd) CHECK_OK(tj_compile(fwd, &opts, &ef));
    if (bwd) CHECK_OK(tj_compile(bwd, &opts, &eb));
    if (ef && eb) {
      env_t got = {0};
      run_named(fwd, ef, &in, &got);
      for (int i = 0; i < in.n && got.n < kMaxNamed; ++i) {
        if (env_find(&got, in.v[i].name)) continue;
        named_t* x = &got.v[got.n++];
        *x = in.v[i];
        x->data = malloc((size_t)x->n * sizeof(double));
        memcpy(x->data, in.v[i].data, (size_t)x->n * sizeof(double));
      }
      run_named(bwd, eb, &got, &got);
      for (int32_t o = 0; o < tj_graph_num_outputs(bwd); ++o) {
        const char* name = tj_graph_output_name(bwd, o);
        named_t *a = env_find(&got, name), *w = env_find(&want, name);
        CHECK(a != NULL && w != NULL && a->n == w->n);
        if (a && w)
          CHECK_EQ_INT(0, compare(c->name, g_isa[ci], o, a->data, w->data, w->n,
                                  1e-4, 1e-4));
      }
      env_free(&got);
    }
    tj_executable_release(ef);
    tj_executable_release(eb);
    tj_graph_destroy(fwd);
    tj_graph_destroy(bwd);
  }
  env_free(&in);
  env_free(&want);
  tj_graph_destroy(joint);
}

TEST(partition) {
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i)
    if (!kCases[i].sym_b && !kCases[i].sym_t) partition_case(&kCases[i]);
}

// attention_lse on its own: [B, H, Tq] against a loop, causal with a bool
// mask whose first row is all false (-inf there), f32 compiled at every
// tier (1e-5) and f64 on the reference (1e-12).
TEST(lse) {
  enum { B = 2, H = 4, HKV = 2, TQ = 5, TK = 6, D = 7 };
  static double q[B * H * TQ * D], k[B * HKV * TK * D], want[B * H * TQ];
  static unsigned char m[TQ * TK];
  for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); ++i) q[i] = uniform(-2, 2);
  for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); ++i) k[i] = uniform(-2, 2);
  for (int i = 0; i < TQ * TK; ++i) m[i] = i >= TK && uniform(0, 1) < 0.8;
  const double scale = 0.4;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < TQ; ++i) {
        double s[TK], mx = -INFINITY, sum = 0;
        for (int j = 0; j < TK; ++j) {
          s[j] = -INFINITY;
          if (j > i || !m[i * TK + j]) continue;
          double dot = 0;
          for (int e = 0; e < D; ++e)
            dot += q[((b * H + h) * TQ + i) * D + e] *
                   k[((b * HKV + h / 2) * TK + j) * D + e];
          s[j] = scale * dot;
          mx = fmax(mx, s[j]);
        }
        for (int j = 0; j < TK; ++j)
          if (s[j] > -INFINITY) sum += exp(s[j] - mx);
        want[(b * H + h) * TQ + i] =
            mx == -INFINITY ? -INFINITY : mx + log(sum);
      }
  for (int pass = -1; pass < g_num_ctx; ++pass) {
    const tj_dtype_t dt = pass < 0 ? TJ_DTYPE_F64 : TJ_DTYPE_F32;
    tj_graph_t* g = NULL;
    CHECK_OK(tj_graph_create(g_ctx[pass < 0 ? 0 : pass], "lse", &g));
    if (!g) continue;
    tj_value_t vq = tj_graph_input(g, dt, 4, (int64_t[]){B, H, TQ, D}, "q");
    tj_value_t vk = tj_graph_input(g, dt, 4, (int64_t[]){B, HKV, TK, D}, "k");
    tj_value_t vm =
        tj_graph_input(g, TJ_DTYPE_BOOL, 2, (int64_t[]){TQ, TK}, "m");
    tj_graph_output(g, tj_graph_attention_lse(g, vq, vk, vm, scale, true),
                    "lse");
    CHECK_OK(tj_graph_finalize(g));
    tj_executable_t* exe = NULL;
    if (pass >= 0) {
      tj_compile_options_t opts;
      tj_compile_options_initialize(&opts);
      opts.cache_dir = "";
      CHECK_OK(tj_compile(g, &opts, &exe));
    }
    static unsigned char bq[sizeof(q)], bk[sizeof(k)], bo[sizeof(want)];
    for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); ++i)
      tj_store_f64(dt, bq, (int64_t)i, q[i]);
    for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); ++i)
      tj_store_f64(dt, bk, (int64_t)i, k[i]);
    tj_tensor_t ins[3] = {
        tj_tensor_make(bq, dt, 4, (int64_t[]){B, H, TQ, D}),
        tj_tensor_make(bk, dt, 4, (int64_t[]){B, HKV, TK, D}),
        tj_tensor_make(m, TJ_DTYPE_BOOL, 2, (int64_t[]){TQ, TK})};
    tj_tensor_t out = tj_tensor_make(bo, dt, 3, (int64_t[]){B, H, TQ});
    if (exe)
      CHECK_OK(tj_executable_run(exe, ins, 3, &out, 1));
    else if (pass < 0)
      CHECK_OK(tj_reference_run(g, ins, 3, &out, 1));
    const double tol = pass < 0 ? 1e-12 : 1e-5;
    int wrong = 0;
    for (int i = 0; i < B * H * TQ; ++i) {
      const double got = tj_load_f64(dt, bo, i);
      const bool ok = isinf(want[i])
                          ? got == want[i]
                          : fabs(got - want[i]) <= tol + tol * fabs(want[i]);
      if (!ok && wrong++ < 3)
        fprintf(stderr, "lse %s [%d] %.9g vs %.9g\n",
                pass < 0 ? "reference" : g_isa[pass], i, got, want[i]);
    }
    CHECK_EQ_INT(0, wrong);
    tj_executable_release(exe);
    tj_graph_destroy(g);
  }
}

static void expect_error(tj_graph_t* g, const char* op, const char* needle) {
  tj_status_t st = tj_graph_finalize(g);
  CHECK(st != NULL);
  if (!st) return;
  CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, tj_status_code(st));
  CHECK_CONTAINS(tj_status_message(st), op);
  CHECK_CONTAINS(tj_status_message(st), needle);
  tj_status_free(st);
}

// Shapes and dtypes: dq [B, H, Tq, D], [dk | dv] [B, Hkv, Tk, D + Dv],
// lse [B, H, Tq] f32 for bf16; bad g, lse and delta named.
TEST(inference_and_errors) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx[0], "infer", &g));
  int64_t B = tj_graph_symbol(g, "B"), T = tj_graph_symbol(g, "T");
  const tj_dtype_t bf = TJ_DTYPE_BF16, f = TJ_DTYPE_F32;
  tj_value_t q = tj_graph_input(g, bf, 4, (int64_t[]){B, 8, T, 64}, "q");
  tj_value_t k = tj_graph_input(g, bf, 4, (int64_t[]){B, 2, T, 64}, "k");
  tj_value_t v = tj_graph_input(g, bf, 4, (int64_t[]){B, 2, T, 32}, "v");
  tj_value_t dy = tj_graph_input(g, bf, 4, (int64_t[]){B, 8, T, 32}, "dy");
  tj_value_t lse = tj_graph_attention_lse(g, q, k, tj_value_none(), 0, true);
  tj_value_t dl = tj_graph_input(g, f, 3, (int64_t[]){B, 8, T}, "delta");
  tj_value_t dq =
      tj_graph_attention_dq(g, q, k, v, tj_value_none(), dy, lse, dl, 0, true);
  tj_value_t dkv =
      tj_graph_attention_dkv(g, q, k, v, tj_value_none(), dy, lse, dl, 0, true);
  tj_graph_output(g, lse, "lse");
  tj_graph_output(g, dq, "dq");
  tj_graph_output(g, dkv, "dkv");
  CHECK_OK(tj_graph_finalize(g));
  const int64_t want[3][4] = {{B, 8, T, 0}, {B, 8, T, 64}, {B, 2, T, 96}};
  const tj_value_t vals[3] = {lse, dq, dkv};
  const tj_dtype_t dts[3] = {f, bf, bf};
  for (int i = 0; i < 3; ++i) {
    const int r = i == 0 ? 3 : 4;
    CHECK_EQ_INT(r, tj_graph_value_rank(g, vals[i]));
    CHECK_EQ_INT(dts[i], tj_graph_value_dtype(g, vals[i]));
    int64_t dims[TJ_MAX_RANK];
    tj_graph_value_dims(g, vals[i], dims);
    for (int a = 0; a < r; ++a) CHECK(dims[a] == want[i][a]);
  }
  tj_graph_destroy(g);
  // Errors: lse of q's dtype, g of the wrong head dim, delta of the wrong
  // rank, a bool g.
  for (int bad = 0; bad < 4; ++bad) {
    CHECK_OK(tj_graph_create(g_ctx[0], "bad", &g));
    q = tj_graph_input(g, bf, 4, (int64_t[]){2, 4, 5, 8}, "q");
    k = tj_graph_input(g, bf, 4, (int64_t[]){2, 2, 6, 8}, "k");
    v = tj_graph_input(g, bf, 4, (int64_t[]){2, 2, 6, 3}, "v");
    dy = tj_graph_input(g, bad == 3 ? TJ_DTYPE_BOOL : bf, 4,
                        (int64_t[]){2, 4, 5, bad == 1 ? 4 : 3}, "dy");
    lse = tj_graph_input(g, bad == 0 ? bf : f, 3, (int64_t[]){2, 4, 5}, "l");
    dl = bad == 2 ? tj_graph_input(g, f, 2, (int64_t[]){2, 4}, "d")
                  : tj_graph_input(g, f, 3, (int64_t[]){2, 4, 5}, "d");
    tj_graph_output(g,
                    tj_graph_attention_dkv(g, q, k, v, tj_value_none(), dy, lse,
                                           dl, 0, false),
                    "dkv");
    static const char* const kNeedle[4] = {"lse must be f32", "g's dim 3 is 4",
                                           "delta must have rank 3",
                                           "g must be bf16"};
    expect_error(g, "attention_dkv", kNeedle[bad]);
    tj_graph_destroy(g);
  }
}

// The failing-allocator sweep: grad of a causal grouped-query attention
// with a bool mask, compiled for x86 and run; every failure is
// OUT_OF_MEMORY and nothing leaks.
static tj_status_t grad_compile_run(tj_allocator_t allocator) {
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_test_sweep_context_create(allocator, &ctx);
  if (s) return s;
  tj_graph_t *g = NULL, *joint = NULL;
  tj_executable_t* exe = NULL;
  s = tj_graph_create(ctx, "grad_oom", &g);
  if (!s) {
    tj_value_t q =
        tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){1, 2, 3, 4}, "q");
    tj_value_t k =
        tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){1, 1, 3, 4}, "k");
    tj_value_t v =
        tj_graph_input(g, TJ_DTYPE_F32, 4, (int64_t[]){1, 1, 3, 4}, "v");
    tj_value_t m = tj_graph_input(g, TJ_DTYPE_BOOL, 2, (int64_t[]){3, 3}, "m");
    tj_graph_output(g, tj_graph_attention(g, q, k, v, m, 0, true), "y");
    s = tj_graph_finalize(g);
  }
  if (!s) s = tj_graph_grad(g, 0, NULL, 3, (int32_t[]){0, 1, 2}, &joint);
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.x86.num_threads = 1;
  if (!s) s = tj_compile(joint, &opts, &exe);
  if (!s) {
    static float q[24], kv[12], y[24], dq[24], dk[12], dv[12];
    static unsigned char m[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    for (int i = 0; i < 24; ++i) q[i] = (float)(i % 5) * 0.1f;
    for (int i = 0; i < 12; ++i) kv[i] = (float)(i % 3) * 0.2f;
    tj_tensor_t ins[5] = {
        tj_tensor_make(q, TJ_DTYPE_F32, 4, (int64_t[]){1, 2, 3, 4}),
        tj_tensor_make(kv, TJ_DTYPE_F32, 4, (int64_t[]){1, 1, 3, 4}),
        tj_tensor_make(kv, TJ_DTYPE_F32, 4, (int64_t[]){1, 1, 3, 4}),
        tj_tensor_make(m, TJ_DTYPE_BOOL, 2, (int64_t[]){3, 3}),
        tj_tensor_make(q, TJ_DTYPE_F32, 4, (int64_t[]){1, 2, 3, 4})};
    tj_tensor_t outs[4] = {
        tj_tensor_make(y, TJ_DTYPE_F32, 4, (int64_t[]){1, 2, 3, 4}),
        tj_tensor_make(dq, TJ_DTYPE_F32, 4, (int64_t[]){1, 2, 3, 4}),
        tj_tensor_make(dk, TJ_DTYPE_F32, 4, (int64_t[]){1, 1, 3, 4}),
        tj_tensor_make(dv, TJ_DTYPE_F32, 4, (int64_t[]){1, 1, 3, 4})};
    s = tj_executable_run(exe, ins, 5, outs, 4);
  }
  tj_executable_release(exe);
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(oom_sweep) { tj_test_oom_sweep("attention grad", grad_compile_run); }

int main(void) {
  g_num_ctx = tj_test_tier_contexts(g_ctx, g_isa);
  RUN_TEST(inference_and_errors);
  RUN_TEST(lse);
  RUN_TEST(grads);
  RUN_TEST(partition);
  RUN_TEST(oom_sweep);
  for (int i = 0; i < g_num_ctx; ++i) tj_context_destroy(g_ctx[i]);
  TEST_MAIN_END();
}
