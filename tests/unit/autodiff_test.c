// Reverse-mode autodiff (lib/autodiff.c) and the forward/backward
// partitioner (lib/passes/partition.c).
//
// Every differentiable op's rule is checked against central finite
// differences computed in f64 on the reference interpreter: for a graph g
// and random tangents t, the joint graph's gradients must equal
// d/dx sum(t * g(x)) element by element (small random shapes, broadcasting,
// symbolic B run at two sizes from one joint graph). Then the documented
// conventions at kinks and ties, the partitioner (each knob level gives
// the joint graph's gradients; less saving as the level rises), the
// capstone sum(gelu(x @ w + b)) against gradients derived by hand in C
// through the reference and through one x86 executable for B = 1, 7, 256,
// and every allocation failure.

#include "tests/unit/test.h"

#include "lib/autodiff.h"
#include "lib/dtype.h"
#include "lib/ir.h"

//===--- a seeded generator ---===//

static uint64_t g_rng = 0x243f6a8885a308d3ull;

static double rnd(double lo, double hi) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return lo + (hi - lo) * (double)(g_rng >> 11) / 9007199254740992.0;
}

//===--- host tensors ---===//

typedef struct buf_t {
  tj_dtype_t dtype;
  int32_t rank;
  int64_t shape[TJ_MAX_RANK];
  int64_t numel;
  void* data;
} buf_t;

static void buf_alloc(buf_t* b, tj_dtype_t dtype, int32_t rank,
                      const int64_t* shape) {
  b->dtype = dtype;
  b->rank = rank;
  b->numel = 1;
  for (int32_t i = 0; i < rank; ++i) {
    b->shape[i] = shape[i];
    b->numel *= shape[i];
  }
  size_t bytes = (size_t)b->numel * tj_dtype_size(dtype);
  b->data = calloc(1, bytes ? bytes : 1);
}

static tj_tensor_t buf_tensor(buf_t* b) {
  return tj_tensor_make(b->data, b->dtype, b->rank, b->shape);
}

static double buf_get(const buf_t* b, int64_t i) {
  return tj_load_f64(b->dtype, b->data, i);
}

static void buf_set(buf_t* b, int64_t i, double v) {
  tj_store_f64(b->dtype, b->data, i, v);
}

static void bufs_free(buf_t* b, int n) {
  for (int i = 0; i < n; ++i) free(b[i].data);
}

// The concrete shape of input |i| of |g| with every symbol = |B|.
static int32_t input_shape(const tj_graph_t* g, int32_t i, int64_t B,
                           int64_t* shape) {
  int64_t values[TJ_MAX_SYMBOLS];
  for (int k = 0; k < TJ_MAX_SYMBOLS; ++k) values[k] = B;
  const tj_node_t* n = &g->nodes[g->inputs[i]];
  for (int32_t d = 0; d < n->rank; ++d) {
    tj_status_t st = tj_dim_eval(&g->dims, n->dims[d], values, &shape[d]);
    tj_status_free(st);
  }
  return n->rank;
}

// Runs |g| on the reference; |outs| (g's output count) are allocated here.
static tj_status_t run_ref(const tj_graph_t* g, buf_t* ins, int nin,
                           buf_t* outs) {
  tj_tensor_t t_in[32], t_out[32];
  for (int i = 0; i < nin; ++i) t_in[i] = buf_tensor(&ins[i]);
  int nout = tj_graph_num_outputs(g);
  for (int i = 0; i < nout; ++i) {
    int32_t rank;
    int64_t shape[TJ_MAX_RANK];
    TJ_RETURN_IF_ERROR(tj_graph_output_shape(g, t_in, nin, i, &rank, shape));
    if (!outs[i].data) {
      tj_value_t v = tj_graph_output_value(g, i);
      buf_alloc(&outs[i], tj_graph_value_dtype(g, v), rank, shape);
    }
    t_out[i] = buf_tensor(&outs[i]);
  }
  return tj_reference_run(g, t_in, nin, t_out, nout);
}

static tj_graph_t* parse(tj_context_t* ctx, const char* text) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_parse(ctx, text, strlen(text), "test.tj", &g));
  return g;
}

//===--- finite differences ---===//

typedef struct fd_case_t {
  const char* name;
  const char* text;  // one function; float values are f64
  double lo, hi;     // float inputs uniform in [lo, hi]
  double min_abs;    // ... resampled until |x| >= min_abs (kinks)
  int64_t ilo, ihi;  // integer inputs uniform in [ilo, ihi]
  int zero_every;    // every k-th element of float inputs set to 0 exactly
  double tol;        // 0: 1e-6 (relative to 1 + |gradient|)
  double h;          // 0: 1e-5
} fd_case_t;

static int g_fd_cases, g_fd_checked;

// L = sum over float outputs of tangent * y.
static double loss(const tj_graph_t* g, buf_t* ins, int nin, buf_t* outs,
                   const buf_t* tangents) {
  tj_status_t st = run_ref(g, ins, nin, outs);
  if (st) {
    fprintf(stderr, "forward run failed: %s\n", tj_status_message(st));
    tj_status_free(st);
    return NAN;
  }
  double sum = 0;
  int k = 0;
  for (int o = 0; o < tj_graph_num_outputs(g); ++o) {
    if (!tj_dtype_is_float(outs[o].dtype)) continue;
    for (int64_t i = 0; i < outs[o].numel; ++i) {
      sum += buf_get(&tangents[k], i) * buf_get(&outs[o], i);
    }
    ++k;
  }
  return sum;
}

static void check_fd_at(tj_context_t* ctx, const fd_case_t* c, int64_t B) {
  tj_graph_t* g = parse(ctx, c->text);
  if (!g) return;
  tj_graph_t* joint = NULL;
  CHECK_OK(tj_graph_grad(g, 0, NULL, 0, NULL, &joint));
  if (!joint) {
    fprintf(stderr, "case %s: no joint graph\n", c->name);
    tj_graph_destroy(g);
    return;
  }
  int nin = tj_graph_num_inputs(g), nout = tj_graph_num_outputs(g);
  buf_t ins[32], outs[32], jouts[48];
  memset(ins, 0, sizeof(ins));
  memset(outs, 0, sizeof(outs));
  memset(jouts, 0, sizeof(jouts));
  for (int i = 0; i < nin; ++i) {
    int64_t shape[TJ_MAX_RANK];
    int32_t rank = input_shape(g, i, B, shape);
    tj_dtype_t dt = tj_graph_value_dtype(g, tj_graph_input_value(g, i));
    buf_alloc(&ins[i], dt, rank, shape);
    for (int64_t k = 0; k < ins[i].numel; ++k) {
      double v;
      if (tj_dtype_is_float(dt)) {
        do {
          v = rnd(c->lo, c->hi);
        } while (fabs(v) < c->min_abs);
        if (c->zero_every && k % c->zero_every == 0) v = 0.0;
      } else {
        v = floor(rnd((double)c->ilo, (double)c->ihi + 1.0));
        if (v > (double)c->ihi) v = (double)c->ihi;
      }
      buf_set(&ins[i], k, v);
    }
  }
  // The forward once for the output shapes; tangents after the inputs.
  CHECK_OK(run_ref(g, ins, nin, outs));
  int ntan = 0;
  for (int o = 0; o < nout; ++o) {
    if (!tj_dtype_is_float(outs[o].dtype)) continue;
    buf_t* t = &ins[nin + ntan++];
    buf_alloc(t, outs[o].dtype, outs[o].rank, outs[o].shape);
    for (int64_t k = 0; k < t->numel; ++k) buf_set(t, k, rnd(-1, 1));
  }
  CHECK_EQ_INT(nin + ntan, tj_graph_num_inputs(joint));
  tj_status_t st = run_ref(joint, ins, nin + ntan, jouts);
  CHECK_OK(st);
  // The joint graph computes the forward unchanged.
  for (int o = 0; o < nout && !st; ++o) {
    for (int64_t k = 0; k < outs[o].numel; ++k) {
      CHECK(buf_get(&outs[o], k) == buf_get(&jouts[o], k) ||
            (isnan(buf_get(&outs[o], k)) && isnan(buf_get(&jouts[o], k))));
    }
  }
  const buf_t* tangents = &ins[nin];
  double h = c->h ? c->h : 1e-5, tol = c->tol ? c->tol : 1e-6;
  int grad_out = nout, bad = 0;
  for (int i = 0; i < nin && !st; ++i) {
    if (!tj_dtype_is_float(ins[i].dtype)) continue;
    const buf_t* grad = &jouts[grad_out++];
    CHECK_EQ_INT(ins[i].numel, grad->numel);
    for (int64_t k = 0; k < ins[i].numel && bad < 5; ++k) {
      double x = buf_get(&ins[i], k);
      buf_set(&ins[i], k, x + h);
      double lp = loss(g, ins, nin, outs, tangents);
      buf_set(&ins[i], k, x - h);
      double lm = loss(g, ins, nin, outs, tangents);
      buf_set(&ins[i], k, x);
      double fd = (lp - lm) / (2 * h), ad = buf_get(grad, k);
      ++g_fd_checked;
      if (!(fabs(fd - ad) <= tol * (1 + fabs(ad)))) {
        fprintf(stderr,
                "case %s (B=%lld): d/d input %d [%lld]: autodiff %.12g, "
                "finite difference %.12g\n",
                c->name, (long long)B, i, (long long)k, ad, fd);
        ++bad;
      }
    }
  }
  CHECK(bad == 0);
  bufs_free(ins, nin + ntan);
  bufs_free(outs, nout);
  bufs_free(jouts, tj_graph_num_outputs(joint));
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
}

static void check_fd(tj_context_t* ctx, const fd_case_t* c) {
  ++g_fd_cases;
  check_fd_at(ctx, c, 1);
  // A symbolic graph: the same joint graph (rebuilt the same way) at a
  // second size.
  if (strstr(c->text, "func @") && strchr(c->text, '[') &&
      strstr(c->text, "[B")) {
    check_fd_at(ctx, c, 3);
  }
}

#define R(lo_, hi_) .lo = (lo_), .hi = (hi_)

static const fd_case_t kUnary[] = {
    {"neg",
     "func @f(%x: f64[2,3]) {\n  %1 = neg %x : f64[2,3]\n"
     "  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    {"abs",
     "func @f(%x: f64[5]) {\n  %1 = abs %x : f64[5]\n"
     "  return %1 as \"y\"\n}\n",
     R(-2, 2), 0.1},
    {"exp",
     "func @f(%x: f64[4]) {\n  %1 = exp %x : f64[4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    {"log",
     "func @f(%x: f64[4]) {\n  %1 = log %x : f64[4]\n"
     "  return %1 as \"y\"\n}\n",
     R(0.5, 3)},
    {"sqrt",
     "func @f(%x: f64[4]) {\n  %1 = sqrt %x : f64[4]\n"
     "  return %1 as \"y\"\n}\n",
     R(0.5, 3)},
    {"rsqrt",
     "func @f(%x: f64[4]) {\n  %1 = rsqrt %x : f64[4]\n"
     "  return %1 as \"y\"\n}\n",
     R(0.5, 3)},
    {"tanh",
     "func @f(%x: f64[4]) {\n  %1 = tanh %x : f64[4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    {"sigmoid",
     "func @f(%x: f64[4]) {\n  %1 = sigmoid %x : f64[4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-3, 3)},
    {"erf",
     "func @f(%x: f64[4]) {\n  %1 = erf %x : f64[4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    {"erfc",
     "func @f(%x: f64[4]) {\n  %1 = erfc %x : f64[4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    {"sin",
     "func @f(%x: f64[4]) {\n  %1 = sin %x : f64[4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-3, 3)},
    {"cos",
     "func @f(%x: f64[4]) {\n  %1 = cos %x : f64[4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-3, 3)},
    {"asin",
     "func @f(%x: f64[4]) {\n  %1 = asin %x : f64[4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-0.9, 0.9)},
    {"acos",
     "func @f(%x: f64[4]) {\n  %1 = acos %x : f64[4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-0.9, 0.9)},
    {"atan",
     "func @f(%x: f64[4]) {\n  %1 = atan %x : f64[4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-3, 3)},
    {"relu",
     "func @f(%x: f64[6]) {\n  %1 = relu %x : f64[6]\n"
     "  return %1 as \"y\"\n}\n",
     R(-2, 2), 0.1},
    // Through f32 and back: the rule casts the gradient back.
    {"cast",
     "func @f(%x: f64[4]) {\n  %1 = cast %x : f32[4]\n"
     "  %2 = mul %1, %1 : f32[4]\n  %3 = cast %2 : f64[4]\n"
     "  return %3 as \"y\"\n}\n",
     R(-2, 2), 0, 0, 0, 0, 2e-3, 1e-2},
    // floor etc. pass no gradient; the other path does.
    {"floor_plus_x",
     "func @f(%x: f64[4]) {\n  %1 = floor %x : f64[4]\n"
     "  %2 = ceil %x : f64[4]\n  %3 = round %x : f64[4]\n"
     "  %4 = sign %x : f64[4]\n  %5 = add %1, %2 : f64[4]\n"
     "  %6 = add %3, %4 : f64[4]\n  %7 = add %5, %6 : f64[4]\n"
     "  %8 = add %7, %x : f64[4]\n  return %8 as \"y\"\n}\n",
     R(0.1, 0.4)},
};

static const fd_case_t kBinary[] = {
    {"add_broadcast",
     "func @f(%a: f64[2,3], %b: f64[3]) {\n"
     "  %2 = add %a, %b : f64[2,3]\n  return %2 as \"y\"\n}\n",
     R(-2, 2)},
    {"sub_broadcast",
     "func @f(%a: f64[2,1,3], %b: f64[4,1]) {\n"
     "  %2 = sub %a, %b : f64[2,4,3]\n"
     "  return %2 as \"y\"\n}\n",
     R(-2, 2)},
    {"mul_broadcast_scalar",
     "func @f(%a: f64[3,2], %b: f64[]) {\n"
     "  %2 = mul %a, %b : f64[3,2]\n"
     "  %3 = mul %2, %a : f64[3,2]\n"
     "  return %3 as \"y\"\n}\n",
     R(-2, 2)},
    {"div",
     "func @f(%a: f64[2,3], %b: f64[2,1]) {\n"
     "  %2 = div %a, %b : f64[2,3]\n  return %2 as \"y\"\n}\n",
     R(0.5, 2)},
    {"pow",
     "func @f(%a: f64[2,3], %b: f64[3]) {\n"
     "  %2 = pow %a, %b : f64[2,3]\n  return %2 as \"y\"\n}\n",
     R(0.5, 2)},
    {"maximum",
     "func @f(%a: f64[2,3], %b: f64[3]) {\n"
     "  %2 = maximum %a, %b : f64[2,3]\n  return %2 as \"y\"\n}\n",
     R(-2, 2)},
    {"minimum",
     "func @f(%a: f64[2,3], %b: f64[2,3]) {\n"
     "  %2 = minimum %a, %b : f64[2,3]\n  return %2 as \"y\"\n}\n",
     R(-2, 2)},
    // Between the jumps of the quotient: 10.5 a / b stays in (10.3, 10.7).
    {"mod",
     "func @f(%a: f64[2,3], %b: f64[3]) {\n"
     "  %2 = constant [10.5] : f64[]\n"
     "  %3 = mul %a, %2 : f64[2,3]\n"
     "  %4 = mod %3, %b : f64[2,3]\n  return %4 as \"y\"\n}\n",
     R(1.1, 1.12)},
    {"fmod",
     "func @f(%a: f64[2,3], %b: f64[2,1]) {\n"
     "  %2 = constant [-10.5] : f64[]\n"
     "  %3 = mul %a, %2 : f64[2,3]\n"
     "  %4 = fmod %3, %b : f64[2,3]\n  return %4 as \"y\"\n}\n",
     R(1.1, 1.12)},
    {"where",
     "func @f(%a: f64[2,3], %b: f64[3]) {\n"
     "  %2 = gt %a, %b : bool[2,3]\n"
     "  %3 = mul %a, %a : f64[2,3]\n"
     "  %4 = where %2, %3, %b : f64[2,3]\n"
     "  return %4 as \"y\"\n}\n",
     R(-2, 2)},
    {"fan_out",
     "func @f(%x: f64[3]) {\n  %1 = exp %x : f64[3]\n"
     "  %2 = mul %1, %x : f64[3]\n  %3 = add %2, %1 : f64[3]\n"
     "  %4 = sin %x : f64[3]\n"
     "  return %3 as \"y\", %4 as \"z\"\n}\n",
     R(-1, 1)},
};

static const fd_case_t kReduce[] = {
    {"sum",
     "func @f(%x: f64[2,3,4]) {\n"
     "  %1 = sum %x {axes=[0,2]} : f64[3]\n  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    {"sum_keepdims",
     "func @f(%x: f64[2,3,4]) {\n"
     "  %1 = sum %x {axes=[1] keepdims} : f64[2,1,4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    {"sum_all",
     "func @f(%x: f64[2,3]) {\n"
     "  %1 = sum %x {axes=[0,1]} : f64[]\n  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    {"mean",
     "func @f(%x: f64[3,4]) {\n"
     "  %1 = mean %x {axes=[1]} : f64[3]\n  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    {"mean_symbolic",
     "func @f[B](%x: f64[B,4]) {\n"
     "  %1 = mean %x {axes=[0] keepdims} : f64[1,4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    {"max",
     "func @f(%x: f64[3,4]) {\n"
     "  %1 = max %x {axes=[1]} : f64[3]\n  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    {"min_keepdims",
     "func @f(%x: f64[3,4]) {\n"
     "  %1 = min %x {axes=[0] keepdims} : f64[1,4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    {"prod",
     "func @f(%x: f64[3,4]) {\n"
     "  %1 = prod %x {axes=[1]} : f64[3]\n  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    // One zero per row of 4 (first rows), then rows with two zeros.
    {"prod_zeros",
     "func @f(%x: f64[4,3]) {\n"
     "  %1 = prod %x {axes=[1]} : f64[4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-2, 2), 0, 0, 0, 2},
    {"argmax_no_grad",
     "func @f(%x: f64[3,4]) {\n"
     "  %1 = argmax %x {axes=[1]} : i64[3]\n"
     "  %2 = exp %x : f64[3,4]\n"
     "  return %1 as \"i\", %2 as \"y\"\n}\n",
     R(-2, 2)},
};

static const fd_case_t kMatmul[] = {
    {"matmul",
     "func @f(%a: f64[2,3], %b: f64[3,4]) {\n"
     "  %2 = matmul %a, %b : f64[2,4]\n  return %2 as \"y\"\n}\n",
     R(-1, 1)},
    {"matmul_batched_weight",
     "func @f(%a: f64[2,2,3], %b: f64[3,4]) {\n"
     "  %2 = matmul %a, %b : f64[2,2,4]\n"
     "  return %2 as \"y\"\n}\n",
     R(-1, 1)},
    {"matmul_broadcast_batch",
     "func @f(%a: f64[2,1,2,3], %b: f64[3,3,2]) {\n"
     "  %2 = matmul %a, %b : f64[2,3,2,2]\n  return %2 as \"y\"\n}\n",
     R(-1, 1)},
    {"matmul_batched_lhs_2d",
     "func @f(%a: f64[2,3], %b: f64[4,3,2]) {\n"
     "  %2 = matmul %a, %b : f64[4,2,2]\n"
     "  return %2 as \"y\"\n}\n",
     R(-1, 1)},
    {"matmul_vec_mat",
     "func @f(%a: f64[3], %b: f64[2,3,4]) {\n"
     "  %2 = matmul %a, %b : f64[2,4]\n"
     "  return %2 as \"y\"\n}\n",
     R(-1, 1)},
    {"matmul_mat_vec",
     "func @f(%a: f64[2,2,3], %b: f64[3]) {\n"
     "  %2 = matmul %a, %b : f64[2,2]\n"
     "  return %2 as \"y\"\n}\n",
     R(-1, 1)},
    {"matmul_dot",
     "func @f(%a: f64[3], %b: f64[3]) {\n"
     "  %2 = matmul %a, %b : f64[]\n  return %2 as \"y\"\n}\n",
     R(-1, 1)},
    {"matmul_symbolic",
     "func @f[B](%a: f64[B,3], %b: f64[3,2]) {\n"
     "  %2 = matmul %a, %b : f64[B,2]\n"
     "  return %2 as \"y\"\n}\n",
     R(-1, 1)},
    {"matmul_self",
     "func @f(%a: f64[3,3]) {\n"
     "  %1 = matmul %a, %a : f64[3,3]\n"
     "  return %1 as \"y\"\n}\n",
     R(-1, 1)},
};

static const fd_case_t kMovement[] = {
    {"reshape",
     "func @f(%x: f64[2,3,2]) {\n  %1 = reshape %x : f64[3,4]\n"
     "  %2 = mul %1, %1 : f64[3,4]\n  return %2 as \"y\"\n}\n",
     R(-1, 1)},
    {"transpose",
     "func @f(%x: f64[2,3,4]) {\n"
     "  %1 = transpose %x {perm=[2,0,1]} : f64[4,2,3]\n"
     "  %2 = sin %1 : f64[4,2,3]\n  return %2 as \"y\"\n}\n",
     R(-1, 1)},
    {"broadcast_to",
     "func @f(%x: f64[3,1]) {\n"
     "  %1 = broadcast_to %x : f64[2,3,4]\n"
     "  %2 = mul %1, %1 : f64[2,3,4]\n"
     "  return %2 as \"y\"\n}\n",
     R(-1, 1)},
    {"slice_steps",
     "func @f(%x: f64[7,5]) {\n"
     "  %1 = slice %x {starts=[1,0] stops=[6,5] steps=[2,3]} : "
     "f64[3,2]\n  %2 = exp %1 : f64[3,2]\n"
     "  return %2 as \"y\"\n}\n",
     R(-1, 1)},
    {"slice_tail",
     "func @f(%x: f64[8]) {\n"
     "  %1 = slice %x {starts=[-5] stops=[end] steps=[3]} : "
     "f64[2]\n  %2 = mul %1, %1 : f64[2]\n"
     "  return %2 as \"y\"\n}\n",
     R(-1, 1)},
    {"slice_symbolic",
     "func @f[B](%x: f64[B,6]) {\n"
     "  %1 = slice %x {starts=[0,1] stops=[end,5] "
     "steps=[1,2]} : f64[B,2]\n"
     "  %2 = mul %1, %1 : f64[B,2]\n"
     "  return %2 as \"y\"\n}\n",
     R(-1, 1)},
    {"concat",
     "func @f(%a: f64[2,1], %b: f64[2,3], %c: f64[2,2]) {\n"
     "  %3 = concat %a, %b, %c, %a {axis=1} : f64[2,7]\n"
     "  %4 = mul %3, %3 : f64[2,7]\n  return %4 as \"y\"\n}\n",
     R(-1, 1)},
    {"concat_symbolic_axis",
     "func @f[B](%a: f64[B,2], %b: f64[3,2]) {\n"
     "  %2 = concat %a, %b, %a {axis=0} : f64[B*2+3,2]\n"
     "  %3 = mul %2, %2 : f64[B*2+3,2]\n"
     "  return %3 as \"y\"\n}\n",
     R(-1, 1)},
    {"pad",
     "func @f(%x: f64[2,3]) {\n"
     "  %1 = pad %x {low=[1,0] high=[2,3] value=0.5} : f64[5,6]\n"
     "  %2 = mul %1, %1 : f64[5,6]\n  return %2 as \"y\"\n}\n",
     R(-1, 1)},
    {"pad_symbolic_axis",
     "func @f[B](%x: f64[B,3]) {\n"
     "  %1 = pad %x {low=[2,1] high=[1,0] value=1} : "
     "f64[B+3,4]\n  %2 = mul %1, %1 : f64[B+3,4]\n"
     "  return %2 as \"y\"\n}\n",
     R(-1, 1)},
    {"gather",
     "func @f(%x: f64[5,3], %i: i64[4]) {\n"
     "  %2 = gather %x, %i {axis=0} : f64[4,3]\n"
     "  %3 = mul %2, %2 : f64[4,3]\n  return %3 as \"y\"\n}\n",
     R(-1, 1), 0, -5, 4},
    // Out-of-range indices are clamped by the forward; the gradient goes
    // where the forward read.
    {"gather_out_of_range",
     "func @f(%x: f64[5,3], %i: i64[6]) {\n"
     "  %2 = gather %x, %i {axis=0} : f64[6,3]\n"
     "  %3 = mul %2, %2 : f64[6,3]\n  return %3 as \"y\"\n}\n",
     R(-1, 1), 0, -12, 11},
    {"gather_axis1_2d_idx",
     "func @f(%x: f64[2,4,3], %i: i32[2,3]) {\n"
     "  %2 = gather %x, %i {axis=1} : f64[2,2,3,3]\n"
     "  %3 = exp %2 : f64[2,2,3,3]\n"
     "  return %3 as \"y\"\n}\n",
     R(-1, 1), 0, -4, 3},
    {"gather_symbolic",
     "func @f[B](%x: f64[B,3], %i: i64[2]) {\n"
     "  %2 = gather %x, %i {axis=0} : f64[2,3]\n"
     "  return %2 as \"y\"\n}\n",
     R(-1, 1), 0, 0,
     0},  // ops3 (issue 15): scans, every flag; cumprod's rule divides by x, so
    // its inputs stay away from 0.
    {"cumsum",
     "func @f(%x: f64[3,5]) {\n"
     "  %1 = cumsum %x {axis=1} : f64[3,5]\n"
     "  %2 = mul %1, %1 : f64[3,5]\n  return %2 as \"y\"\n}\n",
     R(-1, 1)},
    {"cumsum_exclusive_reverse_symbolic",
     "func @f[B](%x: f64[B,4]) {\n"
     "  %1 = cumsum %x {axis=0 exclusive reverse} : f64[B,4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-1, 1)},
    {"cumprod",
     "func @f(%x: f64[2,4,3]) {\n"
     "  %1 = cumprod %x {axis=-2} : f64[2,4,3]\n  return %1 as \"y\"\n}\n",
     R(-2, 2), 0.3},
    {"cumprod_exclusive_reverse",
     "func @f(%x: f64[6]) {\n"
     "  %1 = cumprod %x {axis=0 exclusive reverse} : f64[6]\n"
     "  return %1 as \"y\"\n}\n",
     R(-2, 2), 0.3},
    // scatter (issue 15): none (one update per row, so no update is
    // overwritten) and add (duplicates sum), indices in [-5, 4] (wrapped,
    // clamped).
    {"scatter_elements_none",
     "func @f(%x: f64[3,5], %i: i64[3,1], %u: f64[3,1]) {\n"
     "  %3 = scatter_elements %x, %i, %u {axis=1} : f64[3,5]\n"
     "  %4 = mul %3, %3 : f64[3,5]\n  return %4 as \"y\"\n}\n",
     R(-1, 1), 0, -5, 4},
    {"scatter_elements_add_symbolic",
     "func @f[B](%x: f64[B,4], %i: i64[B,6], %u: f64[B,6]) {\n"
     "  %3 = scatter_elements %x, %i, %u {axis=-1 reduction=\"add\"} : "
     "f64[B,4]\n"
     "  %4 = mul %3, %3 : f64[B,4]\n  return %4 as \"y\"\n}\n",
     R(-1, 1), 0, -5, 4},
    {"scatter_nd_none",
     "func @f(%x: f64[4,3], %i: i64[1,1], %u: f64[1,3]) {\n"
     "  %3 = scatter_nd %x, %i, %u : f64[4,3]\n"
     "  %4 = mul %3, %3 : f64[4,3]\n  return %4 as \"y\"\n}\n",
     R(-1, 1), 0, -5, 4},
    {"scatter_nd_add",
     "func @f(%x: f64[5,3], %i: i64[4,1], %u: f64[4,3]) {\n"
     "  %3 = scatter_nd %x, %i, %u {reduction=\"add\"} : f64[5,3]\n"
     "  %4 = mul %3, %3 : f64[5,3]\n  return %4 as \"y\"\n}\n",
     R(-1, 1), 0, -5, 4},
};

static const fd_case_t kComposite[] = {
    {"gelu",
     "func @f(%x: f64[2,3]) {\n  %1 = gelu %x : f64[2,3]\n"
     "  return %1 as \"y\"\n}\n",
     R(-3, 3)},
    {"gelu_tanh",
     "func @f(%x: f64[2,3]) {\n"
     "  %1 = gelu %x {approximate} : f64[2,3]\n"
     "  return %1 as \"y\"\n}\n",
     R(-3, 3)},
    {"silu",
     "func @f(%x: f64[2,3]) {\n  %1 = silu %x : f64[2,3]\n"
     "  return %1 as \"y\"\n}\n",
     R(-3, 3)},
    {"softmax",
     "func @f(%x: f64[3,4]) {\n"
     "  %1 = softmax %x {axis=1} : f64[3,4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    {"softmax_axis0",
     "func @f[B](%x: f64[B,4]) {\n"
     "  %1 = softmax %x {axis=0} : f64[B,4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    {"log_softmax",
     "func @f(%x: f64[3,4]) {\n"
     "  %1 = log_softmax %x {axis=1} : f64[3,4]\n"
     "  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    {"layer_norm",
     "func @f[B](%x: f64[B,5], %g: f64[5], %b: f64[5]) {\n"
     "  %3 = layer_norm %x, %g, %b {eps=1e-05} : f64[B,5]\n"
     "  return %3 as \"y\"\n}\n",
     R(-2, 2)},
    {"layer_norm_plain",
     "func @f(%x: f64[2,3,4]) {\n"
     "  %1 = layer_norm %x, none, none {eps=0.001} : "
     "f64[2,3,4]\n  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    {"rms_norm",
     "func @f(%x: f64[3,5], %g: f64[5]) {\n"
     "  %2 = rms_norm %x, %g {eps=1e-05} : f64[3,5]\n"
     "  return %2 as \"y\"\n}\n",
     R(-2, 2)},
    {"rms_norm_plain",
     "func @f(%x: f64[3,5]) {\n"
     "  %1 = rms_norm %x, none {eps=0.01} : f64[3,5]\n"
     "  return %1 as \"y\"\n}\n",
     R(-2, 2)},
    {"linear",
     "func @f[B](%x: f64[B,2,3], %w: f64[3,4], %b: f64[4]) {\n"
     "  %3 = linear %x, %w, %b : f64[B,2,4]\n"
     "  return %3 as \"y\"\n}\n",
     R(-1, 1)},
    {"linear_no_bias",
     "func @f(%x: f64[3], %w: f64[3,4]) {\n"
     "  %2 = linear %x, %w, none : f64[4]\n"
     "  return %2 as \"y\"\n}\n",
     R(-1, 1)},
};

TEST(every_op_has_a_rule_or_a_reason) {
  int differentiable = 0;
  for (int op = 0; op < TJ_OP_COUNT_; ++op) {
    const char* rule = tj_autodiff_rule((tj_op_t)op);
    CHECK(rule != NULL && rule[0] != '\0');
    differentiable += tj_autodiff_op_differentiable((tj_op_t)op);
  }
  CHECK(tj_autodiff_op_differentiable(TJ_OP_MATMUL));
  CHECK(tj_autodiff_op_differentiable(TJ_OP_GATHER));
  CHECK(tj_autodiff_op_differentiable(TJ_OP_LAYER_NORM));
  CHECK(!tj_autodiff_op_differentiable(TJ_OP_ARGMAX));
  CHECK(!tj_autodiff_op_differentiable(TJ_OP_FLOOR));
  CHECK(!tj_autodiff_op_differentiable(TJ_OP_LT));
  printf("# %d of %d ops are differentiable\n", differentiable,
         (int)TJ_OP_COUNT_);
}

static void run_cases(const fd_case_t* cases, size_t n) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  for (size_t i = 0; i < n; ++i) check_fd(ctx, &cases[i]);
  tj_context_destroy(ctx);
}

TEST(unary_gradients_match_finite_differences) {
  run_cases(kUnary, TJ_ARRAY_SIZE(kUnary));
}
TEST(binary_gradients_match_finite_differences) {
  run_cases(kBinary, TJ_ARRAY_SIZE(kBinary));
}
TEST(reduction_gradients_match_finite_differences) {
  run_cases(kReduce, TJ_ARRAY_SIZE(kReduce));
}
TEST(matmul_gradients_match_finite_differences) {
  run_cases(kMatmul, TJ_ARRAY_SIZE(kMatmul));
}
TEST(movement_gradients_match_finite_differences) {
  run_cases(kMovement, TJ_ARRAY_SIZE(kMovement));
}
TEST(composite_gradients_match_finite_differences) {
  run_cases(kComposite, TJ_ARRAY_SIZE(kComposite));
}

//===--- conventions at kinks and ties ---===//

// Runs the joint graph of |text| on |x| (one f64 input, one output, the
// tangent all ones) and returns the gradient in |grad|.
static void grad_of(tj_context_t* ctx, const char* text, const double* x,
                    int64_t n, double* grad) {
  tj_graph_t* g = parse(ctx, text);
  tj_graph_t* joint = NULL;
  if (g) CHECK_OK(tj_graph_grad(g, 0, NULL, 0, NULL, &joint));
  if (!joint) {
    tj_graph_destroy(g);
    return;
  }
  buf_t ins[2], outs[2];
  memset(ins, 0, sizeof(ins));
  memset(outs, 0, sizeof(outs));
  int64_t shape[TJ_MAX_RANK];
  int32_t rank = input_shape(g, 0, 1, shape);
  buf_alloc(&ins[0], TJ_DTYPE_F64, rank, shape);
  for (int64_t i = 0; i < n; ++i) buf_set(&ins[0], i, x[i]);
  tj_value_t y = tj_graph_output_value(g, 0);
  int64_t ydims[TJ_MAX_RANK];
  tj_graph_value_dims(g, y, ydims);
  buf_alloc(&ins[1], TJ_DTYPE_F64, tj_graph_value_rank(g, y), ydims);
  for (int64_t i = 0; i < ins[1].numel; ++i) buf_set(&ins[1], i, 1.0);
  CHECK_OK(run_ref(joint, ins, 2, outs));
  for (int64_t i = 0; i < n && outs[1].data; ++i)
    grad[i] = buf_get(&outs[1], i);
  bufs_free(ins, 2);
  bufs_free(outs, 2);
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
}

TEST(kinks_and_ties_follow_torch) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  double grad[6] = {0};
  // max over a row with a three-way tie: 1/3 each.
  const double tied[6] = {1, 3, 3, 3, 0, 2};
  grad_of(ctx,
          "func @f(%x: f64[6]) {\n  %1 = max %x {axes=[0]} : f64[]\n"
          "  return %1 as \"y\"\n}\n",
          tied, 6, grad);
  CHECK(grad[0] == 0 && grad[4] == 0 && grad[5] == 0);
  CHECK(fabs(grad[1] - 1.0 / 3) < 1e-15 && fabs(grad[3] - 1.0 / 3) < 1e-15);
  // maximum(x, 0.5) at a tie: half; relu and abs at 0: 0; sign: 0.
  const double at[3] = {0.5, 0.0, -0.0};
  grad_of(ctx,
          "func @f(%x: f64[3]) {\n  %1 = full {value=0.5} : f64[]\n"
          "  %2 = maximum %x, %1 : f64[3]\n  return %2 as \"y\"\n}\n",
          at, 3, grad);
  CHECK(grad[0] == 0.5 && grad[1] == 0.0);
  grad_of(ctx,
          "func @f(%x: f64[3]) {\n  %1 = relu %x : f64[3]\n"
          "  %2 = abs %x : f64[3]\n  %3 = sign %x : f64[3]\n"
          "  %4 = add %1, %2 : f64[3]\n  %5 = add %4, %3 : f64[3]\n"
          "  return %5 as \"y\"\n}\n",
          at, 3, grad);
  CHECK(grad[0] == 2.0 && grad[1] == 0.0 && grad[2] == 0.0);
  // prod with two zeros in the reduction: every gradient 0; one zero: the
  // product of the others at the zero.
  const double zeros[6] = {0, 2, 0, 0, 3, 5};
  grad_of(ctx,
          "func @f(%x: f64[2,3]) {\n  %1 = prod %x {axes=[1]} : f64[2]\n"
          "  return %1 as \"y\"\n}\n",
          zeros, 6, grad);
  CHECK(grad[0] == 0 && grad[1] == 0 && grad[2] == 0);
  CHECK(grad[3] == 15 && grad[4] == 0 && grad[5] == 0);
  // Nothing flows through a comparison: d/dx where(x > 0, 1, 2) = 0; an
  // input the output does not depend on gets zeros.
  const double some[2] = {-1, 1};
  grad_of(ctx,
          "func @f(%x: f64[2]) {\n  %1 = full {value=0} : f64[]\n"
          "  %2 = gt %x, %1 : bool[2]\n  %3 = full {value=1} : f64[2]\n"
          "  %4 = full {value=2} : f64[2]\n"
          "  %5 = where %2, %3, %4 : f64[2]\n  return %5 as \"y\"\n}\n",
          some, 2, grad);
  CHECK(grad[0] == 0 && grad[1] == 0);
  tj_context_destroy(ctx);
}

TEST(bad_requests_are_invalid_arguments) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  tj_graph_t* g = parse(ctx,
                        "func @f(%x: f64[2], %i: i64[2]) {\n"
                        "  %2 = exp %x : f64[2]\n  %3 = neg %i : i64[2]\n"
                        "  return %2 as \"y\", %3 as \"k\"\n}\n");
  tj_graph_t* joint = NULL;
  const int32_t int_input[1] = {1}, twice[2] = {0, 0}, out_of_range[1] = {7};
  const int32_t int_output[1] = {1};
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "only float values",
               tj_graph_grad(g, 0, NULL, 1, int_input, &joint));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "selected twice",
               tj_graph_grad(g, 0, NULL, 2, twice, &joint));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "out of range",
               tj_graph_grad(g, 0, NULL, 1, out_of_range, &joint));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "\"k\"",
               tj_graph_grad(g, 1, int_output, 0, NULL, &joint));
  CHECK(joint == NULL);
  // Selecting explicitly: only y, only x; the integer output is kept.
  const int32_t y_only[1] = {0}, x_only[1] = {0};
  CHECK_OK(tj_graph_grad(g, 1, y_only, 1, x_only, &joint));
  CHECK_EQ_INT(3, tj_graph_num_inputs(joint));
  CHECK_EQ_INT(3, tj_graph_num_outputs(joint));
  CHECK_STREQ("grad_y", tj_graph_input_name(joint, 2));
  CHECK_STREQ("grad_x", tj_graph_output_name(joint, 2));
  tj_graph_destroy(joint);
  joint = NULL;
  tj_graph_destroy(g);
  // A "grad_" name that is taken.
  g = parse(ctx,
            "func @f(%x: f64[2], %grad_y: f64[2]) {\n"
            "  %2 = mul %x, %grad_y : f64[2]\n  return %2 as \"y\"\n}\n");
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "already",
               tj_graph_grad(g, 0, NULL, 0, NULL, &joint));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "forward outputs",
               tj_graph_partition(g, 1, 1, NULL, &joint, &joint, NULL));
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

//===--- the partitioner ---===//

static const char* const kPartitionGraphs[] = {
    // The capstone, composite and core spellings.
    "func @cap[B](%x: f64[B,8], %w: f64[8,6], %b: f64[6]) {\n"
    "  %3 = linear %x, %w, %b : f64[B,6]\n"
    "  %4 = gelu %3 {approximate} : f64[B,6]\n"
    "  %5 = sum %4 {axes=[0,1]} : f64[]\n  return %5 as \"loss\"\n}\n",
    "func @cap_core[B](%x: f64[B,8], %w: f64[8,6], %b: f64[6]) {\n"
    "  %3 = matmul %x, %w : f64[B,6]\n  %4 = add %3, %b : f64[B,6]\n"
    "  %5 = gelu %4 {approximate} : f64[B,6]\n"
    "  return %5 as \"y\"\n}\n",
    // A pointwise chain (eager saves each link) feeding a second layer.
    "func @mlp[B](%x: f64[B,4], %w1: f64[4,5], %w2: f64[5,3]) {\n"
    "  %3 = matmul %x, %w1 : f64[B,5]\n  %4 = tanh %3 : f64[B,5]\n"
    "  %5 = exp %4 : f64[B,5]\n  %6 = mul %5, %4 : f64[B,5]\n"
    "  %7 = matmul %6, %w2 : f64[B,3]\n  %8 = sigmoid %7 : f64[B,3]\n"
    "  return %8 as \"y\", %4 as \"h\"\n}\n",
    // Norms and softmax: statistics and reductions.
    "func @block[B](%x: f64[B,6], %g: f64[6], %w: f64[6,6]) {\n"
    "  %3 = layer_norm %x, %g, none {eps=1e-05} : f64[B,6]\n"
    "  %4 = matmul %3, %w : f64[B,6]\n"
    "  %5 = softmax %4 {axis=1} : f64[B,6]\n"
    "  %6 = rms_norm %5, %g {eps=1e-05} : f64[B,6]\n"
    "  %7 = mul %6, %x : f64[B,6]\n  return %7 as \"y\"\n}\n",
    // Inputs the gradient does not depend on, a symbolic pad.
    "func @misc[B](%x: f64[B,3], %i: i64[2], %t: f64[5,3]) {\n"
    "  %3 = gather %t, %i {axis=0} : f64[2,3]\n"
    "  %4 = pad %x {low=[1,0] high=[0,0] value=0} : f64[B+1,3]\n"
    "  %5 = sum %4 {axes=[0]} : f64[3]\n  %6 = mul %5, %5 : f64[3]\n"
    "  %7 = sum %3 {axes=[0]} : f64[3]\n  %8 = add %6, %7 : f64[3]\n"
    "  return %8 as \"y\"\n}\n",
};

// Feeds backward input |i| by name from the forward's inputs and outputs
// and the joint graph's tangents.
static buf_t* wire(const tj_graph_t* fwd, const tj_graph_t* bwd, int i,
                   buf_t* fwd_ins, buf_t* fwd_outs, buf_t* tangents,
                   const tj_graph_t* joint, int num_primals) {
  const char* name = tj_graph_input_name(bwd, i);
  for (int k = 0; k < tj_graph_num_inputs(fwd); ++k) {
    if (strcmp(name, tj_graph_input_name(fwd, k)) == 0) return &fwd_ins[k];
  }
  for (int k = 0; k < tj_graph_num_outputs(fwd); ++k) {
    if (strcmp(name, tj_graph_output_name(fwd, k)) == 0) return &fwd_outs[k];
  }
  for (int k = num_primals; k < tj_graph_num_inputs(joint); ++k) {
    if (strcmp(name, tj_graph_input_name(joint, k)) == 0)
      return &tangents[k - num_primals];
  }
  return NULL;
}

static int64_t g_saved_bytes[4];

// The forward and backward at |level| reproduce the joint graph's outputs.
static void check_partition(tj_context_t* ctx, const char* text,
                            tj_recompute_t level, int64_t B) {
  tj_graph_t* g = parse(ctx, text);
  tj_graph_t* joint = NULL;
  if (g) CHECK_OK(tj_graph_grad(g, 0, NULL, 0, NULL, &joint));
  if (!joint) {
    tj_graph_destroy(g);
    return;
  }
  int np = tj_graph_num_inputs(g), nf = tj_graph_num_outputs(g);
  tj_partition_options_t options;
  tj_partition_options_initialize(&options);
  options.recompute = level;
  const char* names[1] = {"B"};
  options.num_symbols = 1;
  options.symbol_names = names;
  options.symbol_values = &B;
  tj_graph_t* fwd = NULL;
  tj_graph_t* bwd = NULL;
  tj_partition_stats_t st;
  CHECK_OK(tj_graph_partition(joint, np, nf, &options, &fwd, &bwd, &st));
  if (!fwd || !bwd) {
    tj_graph_destroy(joint);
    tj_graph_destroy(g);
    return;
  }
  if (B == 5) g_saved_bytes[level] = st.saved_bytes + st.saved_input_bytes;
  int nj = tj_graph_num_inputs(joint);
  buf_t ins[16], jouts[16], fouts[16], bouts[16];
  memset(ins, 0, sizeof(ins));
  memset(jouts, 0, sizeof(jouts));
  memset(fouts, 0, sizeof(fouts));
  memset(bouts, 0, sizeof(bouts));
  for (int i = 0; i < nj; ++i) {
    int64_t shape[TJ_MAX_RANK];
    int32_t rank = input_shape(joint, i, B, shape);
    tj_dtype_t dt = tj_graph_value_dtype(joint, tj_graph_input_value(joint, i));
    buf_alloc(&ins[i], dt, rank, shape);
    for (int64_t k = 0; k < ins[i].numel; ++k) {
      buf_set(&ins[i], k,
              tj_dtype_is_float(dt) ? rnd(-1, 1) : floor(rnd(0, 4.99)));
    }
  }
  CHECK_OK(run_ref(joint, ins, nj, jouts));
  CHECK_OK(run_ref(fwd, ins, np, fouts));
  int nb = tj_graph_num_inputs(bwd);
  buf_t bins[16];
  bool wired = true;
  for (int i = 0; i < nb; ++i) {
    buf_t* src = wire(fwd, bwd, i, ins, fouts, &ins[np], joint, np);
    if (!src) {
      fprintf(stderr, "backward input \"%s\" has no source\n",
              tj_graph_input_name(bwd, i));
      wired = false;
      break;
    }
    bins[i] = *src;
  }
  CHECK(wired);
  if (wired) CHECK_OK(run_ref(bwd, bins, nb, bouts));
  // Forward outputs, then gradients: bit-identical (the same ops in f64,
  // recomputed the same way).
  for (int o = 0; o < nf; ++o) {
    for (int64_t k = 0; k < jouts[o].numel && fouts[o].data; ++k) {
      CHECK(buf_get(&jouts[o], k) == buf_get(&fouts[o], k));
    }
  }
  int ng = tj_graph_num_outputs(joint) - nf;
  CHECK_EQ_INT(ng, tj_graph_num_outputs(bwd));
  for (int o = 0; o < ng && wired; ++o) {
    CHECK_STREQ(tj_graph_output_name(joint, nf + o),
                tj_graph_output_name(bwd, o));
    for (int64_t k = 0; k < jouts[nf + o].numel && bouts[o].data; ++k) {
      double want = buf_get(&jouts[nf + o], k), got = buf_get(&bouts[o], k);
      if (!(fabs(want - got) <= 1e-12 * (1 + fabs(want)))) {
        fprintf(stderr, "@%s level %d: %s[%lld] joint %.17g, backward %.17g\n",
                tj_graph_output_name(joint, nf + o), (int)level,
                tj_graph_output_name(bwd, o), (long long)k, want, got);
        CHECK(false);
        break;
      }
    }
  }
  bufs_free(ins, nj);
  bufs_free(jouts, tj_graph_num_outputs(joint));
  bufs_free(fouts, tj_graph_num_outputs(fwd));
  bufs_free(bouts, tj_graph_num_outputs(bwd));
  tj_graph_destroy(fwd);
  tj_graph_destroy(bwd);
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
}

TEST(partitions_reproduce_the_joint_graph_at_every_level) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kPartitionGraphs); ++i) {
    memset(g_saved_bytes, 0, sizeof(g_saved_bytes));
    for (int level = 0; level < 4; ++level) {
      check_partition(ctx, kPartitionGraphs[i], (tj_recompute_t)level, 5);
      check_partition(ctx, kPartitionGraphs[i], (tj_recompute_t)level, 1);
    }
    // More recompute never holds more bytes between the halves (the cut's
    // constraints only relax).
    for (int level = 1; level < 4; ++level) {
      if (g_saved_bytes[level] > g_saved_bytes[level - 1]) {
        fprintf(stderr, "graph %zu: level %d holds %lld bytes, level %d %lld\n",
                i, level, (long long)g_saved_bytes[level], level - 1,
                (long long)g_saved_bytes[level - 1]);
        CHECK(false);
      }
    }
  }
  tj_context_destroy(ctx);
}

// The pointwise chain after a matmul is recomputed rather than saved: the
// mlp saves tanh's input-side matmul outputs, not the chain.
TEST(min_cut_saves_matmul_outputs_and_recomputes_pointwise) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  tj_graph_t* g = parse(ctx, kPartitionGraphs[2]);
  tj_graph_t* joint = NULL;
  if (g) CHECK_OK(tj_graph_grad(g, 0, NULL, 0, NULL, &joint));
  tj_partition_options_t options;
  tj_partition_options_initialize(&options);
  const char* names[1] = {"B"};
  const int64_t values[1] = {64};
  options.num_symbols = 1;
  options.symbol_names = names;
  options.symbol_values = values;
  tj_graph_t* fwd = NULL;
  tj_graph_t* bwd = NULL;
  tj_partition_stats_t st, eager;
  if (joint)
    CHECK_OK(tj_graph_partition(joint, 3, 2, &options, &fwd, &bwd, &st));
  tj_graph_destroy(fwd);
  tj_graph_destroy(bwd);
  options.recompute = TJ_RECOMPUTE_NONE;
  if (joint)
    CHECK_OK(tj_graph_partition(joint, 3, 2, &options, &fwd, &bwd, &eager));
  // Min cut: the two matmul outputs, [64,5] and [64,3] f64; h is an output
  // anyway and may be read too.
  printf("# mlp: min cut saves %lld bytes (%d values), eager %lld (%d)\n",
         (long long)st.saved_bytes, st.num_saved, (long long)eager.saved_bytes,
         eager.num_saved);
  CHECK(st.saved_bytes - st.saved_output_bytes <= 64 * (5 + 3) * 8);
  CHECK(st.saved_bytes < eager.saved_bytes);
  CHECK(st.num_recomputed > 0);
  tj_graph_destroy(fwd);
  tj_graph_destroy(bwd);
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// Full recomputation: the capstone's backward needs x and w anyway, so at
// TJ_RECOMPUTE_ALL it recomputes the matmul and saves no activation; the
// default saves exactly the matmul output.
TEST(recompute_knob_trades_saved_bytes_for_recomputation) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  tj_graph_t* g = parse(ctx, kPartitionGraphs[1]);
  tj_graph_t* joint = NULL;
  if (g) CHECK_OK(tj_graph_grad(g, 0, NULL, 0, NULL, &joint));
  tj_partition_options_t options;
  tj_partition_options_initialize(&options);
  const char* names[1] = {"B"};
  const int64_t values[1] = {100};
  options.num_symbols = 1;
  options.symbol_names = names;
  options.symbol_values = values;
  int64_t saved[4] = {0}, recomputed[4] = {0};
  for (int level = 0; joint && level < 4; ++level) {
    options.recompute = (tj_recompute_t)level;
    tj_graph_t* fwd = NULL;
    tj_graph_t* bwd = NULL;
    tj_partition_stats_t st;
    CHECK_OK(tj_graph_partition(joint, 3, 1, &options, &fwd, &bwd, &st));
    saved[level] = st.saved_bytes;
    recomputed[level] = st.num_recomputed;
    tj_graph_destroy(fwd);
    tj_graph_destroy(bwd);
  }
  printf(
      "# capstone saved bytes by level: %lld %lld %lld %lld; recomputed "
      "%lld %lld %lld %lld\n",
      (long long)saved[0], (long long)saved[1], (long long)saved[2],
      (long long)saved[3], (long long)recomputed[0], (long long)recomputed[1],
      (long long)recomputed[2], (long long)recomputed[3]);
  CHECK_EQ_INT(100 * 6 * 8, saved[TJ_RECOMPUTE_POINTWISE]);
  CHECK_EQ_INT(0, saved[TJ_RECOMPUTE_ALL]);
  CHECK(recomputed[TJ_RECOMPUTE_ALL] > recomputed[TJ_RECOMPUTE_POINTWISE]);
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

//===--- the capstone: sum(gelu(x @ w + b)), tanh form ---===//

enum { kK = 32, kN = 48 };

// dx, dw, db by hand, in double: h = x w + b; with
// u = k (h + c h^3), gelu'(h) = 0.5 (1 + tanh u)
//   + 0.5 h (1 - tanh^2 u) k (1 + 3 c h^2);
// g = gelu'(h); dx = g w^T, dw = x^T g, db = sum over rows of g.
static void capstone_by_hand(int64_t B, const float* x, const float* w,
                             const float* b, double* dx, double* dw, double* db,
                             double* loss) {
  const double k = sqrt(2.0 / M_PI), c = 0.044715;
  double* g = calloc((size_t)(B * kN), sizeof(double));
  *loss = 0;
  for (int64_t r = 0; r < B; ++r) {
    for (int n = 0; n < kN; ++n) {
      double h = b[n];
      for (int i = 0; i < kK; ++i) h += (double)x[r * kK + i] * w[i * kN + n];
      double u = k * (h + c * h * h * h), t = tanh(u);
      *loss += 0.5 * h * (1 + t);
      g[r * kN + n] =
          0.5 * (1 + t) + 0.5 * h * (1 - t * t) * k * (1 + 3 * c * h * h);
    }
  }
  for (int64_t r = 0; r < B; ++r) {
    for (int i = 0; i < kK; ++i) {
      double s = 0;
      for (int n = 0; n < kN; ++n) s += g[r * kN + n] * w[i * kN + n];
      dx[r * kK + i] = s;
    }
  }
  for (int i = 0; i < kK; ++i) {
    for (int n = 0; n < kN; ++n) {
      double s = 0;
      for (int64_t r = 0; r < B; ++r)
        s += (double)x[r * kK + i] * g[r * kN + n];
      dw[i * kN + n] = s;
    }
  }
  for (int n = 0; n < kN; ++n) {
    double s = 0;
    for (int64_t r = 0; r < B; ++r) s += g[r * kN + n];
    db[n] = s;
  }
  free(g);
}

static tj_graph_t* capstone(tj_context_t* ctx) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "capstone", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, kK}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){kK, kN}, "w");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){kN}, "b");
  tj_value_t y = tj_graph_gelu(g, tj_graph_linear(g, x, w, b), true);
  tj_graph_output(g, tj_graph_sum(g, y, 0, NULL, false), "loss");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

// Worst |got - want| / (1 + |want|) over |n| values.
static double worst(const float* got, const double* want, int64_t n) {
  double e = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = fabs((double)got[i] - want[i]) / (1 + fabs(want[i]));
    if (!(d <= e)) e = d;
  }
  return e;
}

typedef struct step_t {
  float *x, *w, *b, one, loss;
  float *dx, *dw, *db;
  double *hx, *hw, *hb, hloss;
} step_t;

static void step_init(step_t* s, int64_t B) {
  s->x = malloc(sizeof(float) * (size_t)(B * kK));
  s->w = malloc(sizeof(float) * kK * kN);
  s->b = malloc(sizeof(float) * kN);
  s->dx = calloc((size_t)(B * kK), sizeof(float));
  s->dw = calloc(kK * kN, sizeof(float));
  s->db = calloc(kN, sizeof(float));
  s->hx = malloc(sizeof(double) * (size_t)(B * kK));
  s->hw = malloc(sizeof(double) * kK * kN);
  s->hb = malloc(sizeof(double) * kN);
  for (int64_t i = 0; i < B * kK; ++i) s->x[i] = (float)rnd(-1, 1);
  for (int i = 0; i < kK * kN; ++i) s->w[i] = (float)rnd(-0.3, 0.3);
  for (int i = 0; i < kN; ++i) s->b[i] = (float)rnd(-0.5, 0.5);
  s->one = 1.0f;
  capstone_by_hand(B, s->x, s->w, s->b, s->hx, s->hw, s->hb, &s->hloss);
}

static void step_free(step_t* s) {
  free(s->x);
  free(s->w);
  free(s->b);
  free(s->dx);
  free(s->dw);
  free(s->db);
  free(s->hx);
  free(s->hw);
  free(s->hb);
}

static void step_check(const step_t* s, int64_t B, const char* how,
                       double tol) {
  double ex = worst(s->dx, s->hx, B * kK), ew = worst(s->dw, s->hw, kK * kN),
         eb = worst(s->db, s->hb, kN);
  double el = fabs(s->loss - s->hloss) / (1 + fabs(s->hloss));
  printf(
      "# capstone %s B=%lld: worst relative error dx %.2g dw %.2g db %.2g "
      "loss %.2g\n",
      how, (long long)B, ex, ew, eb, el);
  CHECK(ex < tol && ew < tol && eb < tol && el < tol);
}

TEST(capstone_gradients_match_the_hand_derivation_on_the_reference) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  tj_graph_t* g = capstone(ctx);
  tj_graph_t* joint = NULL;
  CHECK_OK(tj_graph_grad(g, 0, NULL, 0, NULL, &joint));
  static const int64_t kBatches[] = {1, 7, 256};
  for (size_t i = 0; joint && i < TJ_ARRAY_SIZE(kBatches); ++i) {
    int64_t B = kBatches[i];
    step_t s;
    step_init(&s, B);
    int64_t xs[2] = {B, kK}, ws[2] = {kK, kN}, bs[1] = {kN};
    tj_tensor_t in[4] = {tj_tensor_make(s.x, TJ_DTYPE_F32, 2, xs),
                         tj_tensor_make(s.w, TJ_DTYPE_F32, 2, ws),
                         tj_tensor_make(s.b, TJ_DTYPE_F32, 1, bs),
                         tj_tensor_make(&s.one, TJ_DTYPE_F32, 0, NULL)};
    tj_tensor_t out[4] = {tj_tensor_make(&s.loss, TJ_DTYPE_F32, 0, NULL),
                          tj_tensor_make(s.dx, TJ_DTYPE_F32, 2, xs),
                          tj_tensor_make(s.dw, TJ_DTYPE_F32, 2, ws),
                          tj_tensor_make(s.db, TJ_DTYPE_F32, 1, bs)};
    CHECK_OK(tj_reference_run(joint, in, 4, out, 4));
    step_check(&s, B, "reference (joint)", 1e-4);
    step_free(&s);
  }
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// The training step as a host runs it: forward and backward compiled once
// each for x86 with symbolic B, one executable each serving every B.
TEST(capstone_training_step_compiles_once_for_every_batch) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  tj_graph_t* g = capstone(ctx);
  tj_graph_t* joint = NULL;
  tj_graph_t* fwd = NULL;
  tj_graph_t* bwd = NULL;
  tj_partition_stats_t st;
  CHECK_OK(tj_graph_grad(g, 0, NULL, 0, NULL, &joint));
  tj_partition_options_t options;
  tj_partition_options_initialize(&options);
  const char* names[1] = {"B"};
  const int64_t hint[1] = {256};
  options.num_symbols = 1;
  options.symbol_names = names;
  options.symbol_values = hint;
  if (joint)
    CHECK_OK(tj_graph_partition(joint, 3, 1, &options, &fwd, &bwd, &st));
  if (!fwd || !bwd) {
    tj_graph_destroy(joint);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
    return;
  }
  // The partitioner saves no more than the matmul output, [B, N] f32.
  CHECK(st.saved_bytes <= 256 * kN * 4);
  CHECK_EQ_INT(2, st.num_saved_inputs);  // x and w, read again
  // Backward inputs: x, w, the saved activation, grad_loss.
  CHECK_EQ_INT(4, tj_graph_num_inputs(bwd));
  CHECK_EQ_INT(2, tj_graph_num_outputs(fwd));
  tj_compile_options_t copt;
  tj_compile_options_initialize(&copt);
  copt.cache_dir = "";
  copt.verify_each = true;
  copt.x86.num_threads = 2;
  tj_executable_t* fexe = NULL;
  tj_executable_t* bexe = NULL;
  CHECK_OK(tj_compile(fwd, &copt, &fexe));
  CHECK_OK(tj_compile(bwd, &copt, &bexe));
  static const int64_t kBatches[] = {1, 7, 256};
  for (size_t i = 0; fexe && bexe && i < TJ_ARRAY_SIZE(kBatches); ++i) {
    int64_t B = kBatches[i];
    step_t s;
    step_init(&s, B);
    int64_t xs[2] = {B, kK}, ws[2] = {kK, kN}, bs[1] = {kN}, hs[2] = {B, kN};
    float* saved = calloc((size_t)(B * kN), sizeof(float));
    tj_tensor_t fin[3] = {tj_tensor_make(s.x, TJ_DTYPE_F32, 2, xs),
                          tj_tensor_make(s.w, TJ_DTYPE_F32, 2, ws),
                          tj_tensor_make(s.b, TJ_DTYPE_F32, 1, bs)};
    tj_tensor_t fout[2] = {tj_tensor_make(&s.loss, TJ_DTYPE_F32, 0, NULL),
                           tj_tensor_make(saved, TJ_DTYPE_F32, 2, hs)};
    CHECK_OK(tj_executable_run(fexe, fin, 3, fout, 2));
    tj_tensor_t bin[4] = {fin[0], fin[1], fout[1],
                          tj_tensor_make(&s.one, TJ_DTYPE_F32, 0, NULL)};
    tj_tensor_t bout[3] = {tj_tensor_make(s.dx, TJ_DTYPE_F32, 2, xs),
                           tj_tensor_make(s.dw, TJ_DTYPE_F32, 2, ws),
                           tj_tensor_make(s.db, TJ_DTYPE_F32, 1, bs)};
    CHECK_OK(tj_executable_run(bexe, bin, 4, bout, 3));
    step_check(&s, B, "x86 (forward + backward)", 1e-4);
    free(saved);
    step_free(&s);
  }
  tj_executable_stats_t fs = {.struct_size = sizeof(fs)},
                        bs = {.struct_size = sizeof(bs)};
  if (fexe && bexe) {
    tj_executable_stats(fexe, &fs);
    tj_executable_stats(bexe, &bs);
    printf(
        "# capstone x86: forward %d kernels, %d graph breaks; backward %d "
        "kernels, %d graph breaks; recompiles %lld + %lld\n",
        fs.num_kernels, fs.num_graph_breaks, bs.num_kernels,
        bs.num_graph_breaks, (long long)fs.recompiles,
        (long long)bs.recompiles);
    CHECK_EQ_INT(0, fs.recompiles + bs.recompiles);
    CHECK_EQ_INT(0, fs.num_graph_breaks + bs.num_graph_breaks);
  }
  tj_executable_release(fexe);
  tj_executable_release(bexe);
  tj_graph_destroy(fwd);
  tj_graph_destroy(bwd);
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

//===--- allocation failures ---===//

static tj_status_t grad_and_partition(tj_context_t* ctx, const char* text) {
  tj_graph_t* g = NULL;
  tj_graph_t* joint = NULL;
  tj_graph_t* fwd = NULL;
  tj_graph_t* bwd = NULL;
  tj_status_t st = tj_graph_parse(ctx, text, strlen(text), "oom.tj", &g);
  if (!st) st = tj_graph_grad(g, 0, NULL, 0, NULL, &joint);
  if (!st) {
    st = tj_graph_partition(joint, tj_graph_num_inputs(g),
                            tj_graph_num_outputs(g), NULL, &fwd, &bwd, NULL);
  }
  CHECK(!st || (!fwd && !bwd));
  tj_graph_destroy(fwd);
  tj_graph_destroy(bwd);
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
  return st;
}

TEST(every_allocation_failure_is_reported_and_nothing_leaks) {
  // The parse is outside the sweep's interest but inside its range: every
  // failure anywhere must come back as OUT_OF_MEMORY without a leak.
  const char* text = kPartitionGraphs[3];
  long succeeded_at = -1;
  for (long n = 0; n < 200000 && succeeded_at < 0; ++n) {
    tj_test_allocator_t t;
    tj_test_allocator_initialize(&t, n);
    tj_context_options_t options;
    tj_context_options_initialize(&options);
    options.allocator = tj_test_allocator_get(&t);
    tj_context_t* ctx = NULL;
    tj_status_t st = tj_context_create(&options, &ctx);
    if (!st) st = grad_and_partition(ctx, text);
    if (!st) {
      succeeded_at = n;
    } else if (tj_status_code(st) != TJ_STATUS_OUT_OF_MEMORY) {
      fprintf(stderr, "failing allocation %ld gave %s: %s\n", n,
              tj_status_code_name(tj_status_code(st)), tj_status_message(st));
      CHECK(false);
      tj_status_free(st);
      tj_context_destroy(ctx);
      break;
    }
    tj_status_free(st);
    tj_context_destroy(ctx);
    if (t.live_blocks != 0 || t.bad_frees != 0) {
      fprintf(stderr,
              "failing allocation %ld leaked %ld blocks (%d bad frees)\n", n,
              t.live_blocks, t.bad_frees);
      CHECK(false);
      break;
    }
  }
  printf("# grad + partition succeeded once %ld allocations could\n",
         succeeded_at);
  CHECK(succeeded_at > 0);
}

int main(void) {
  RUN_TEST(every_op_has_a_rule_or_a_reason);
  RUN_TEST(unary_gradients_match_finite_differences);
  RUN_TEST(binary_gradients_match_finite_differences);
  RUN_TEST(reduction_gradients_match_finite_differences);
  RUN_TEST(matmul_gradients_match_finite_differences);
  RUN_TEST(movement_gradients_match_finite_differences);
  RUN_TEST(composite_gradients_match_finite_differences);
  RUN_TEST(kinks_and_ties_follow_torch);
  RUN_TEST(bad_requests_are_invalid_arguments);
  RUN_TEST(partitions_reproduce_the_joint_graph_at_every_level);
  RUN_TEST(min_cut_saves_matmul_outputs_and_recomputes_pointwise);
  RUN_TEST(recompute_knob_trades_saved_bytes_for_recomputation);
  RUN_TEST(capstone_gradients_match_the_hand_derivation_on_the_reference);
  RUN_TEST(capstone_training_step_compiles_once_for_every_batch);
  RUN_TEST(every_allocation_failure_is_reported_and_nothing_leaks);
  printf("# %d finite-difference cases, %d gradient elements checked\n",
         g_fd_cases, g_fd_checked);
  TEST_MAIN_END();
}
