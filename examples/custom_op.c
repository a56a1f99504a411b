// The README's custom-op example (section "Custom ops"), whole: a plain C
// function registered through a signature string, kept in a compiled graph
// between two fused regions, run at three batch sizes from one executable
// and checked against the reference interpreter and a plain C loop.
// Prints one row per batch and the executable's counts; exits non-zero on
// any error or mismatch. Keep the lines between "README begin" and
// "README end" as the README has them.
//
//   custom_op

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorjit.h"

// README begin (the function and the shape rule)
static void axpb(float* y, int64_t n, const float* x, int64_t m, float a,
                 float b) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a + b;
}
static tj_status_t same_type(void* user, tj_graph_t* g,
                             const tj_custom_type_t* in, int32_t n,
                             const tj_custom_attrs_t* attrs,
                             tj_custom_type_t* out) {
  *out = in[0];  // symbolic dims (a batch B) flow through
  return NULL;
}
// README end

static int fail(tj_status_t s, const char* what) {
  fprintf(stderr, "custom_op: %s: %s\n", what, tj_status_message(s));
  tj_status_free(s);
  return 1;
}

int main(void) {
  tj_context_t* ctx = NULL;
  tj_status_t st = tj_context_create(NULL, &ctx);
  if (st) return fail(st, "context");
  tj_graph_t* g = NULL;
  st = tj_graph_create(ctx, "readme", &g);
  if (st) return fail(st, "graph");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){B}, "x");
  // README begin (registration and use)
  tj_custom_op_desc_t d = {.struct_size = sizeof(d)};
  d.name = "axpb";
  d.version = 1;
  d.num_inputs = 1;
  d.shape = same_type;
  d.function = (void (*)(void))axpb;
  d.signature = "void(f32*, i64, const f32*, i64, f32, f32)";
  d.flags = TJ_CUSTOM_OP_PURE;
  tj_context_register_op(ctx, &d);
  // in a graph of ctx, x 1-D ([B]: the signature passes one dim per
  // tensor): y = exp(x) * 2 + 1, then tanh, compiled around it
  tj_custom_attrs_t at = {0, NULL, 2, (double[]){2.0, 1.0}};
  tj_value_t e = tj_graph_exp(g, x);
  tj_value_t y = tj_graph_tanh(g, tj_graph_custom(g, "axpb", &e, 1, &at));
  // README end
  tj_graph_output(g, y, "y");
  st = tj_graph_finalize(g);
  if (st) return fail(st, "finalize");
  tj_executable_t* exe = NULL;
  st = tj_compile(g, NULL, &exe);
  if (st) return fail(st, "compile");
  int bad = 0;
  static const int64_t kBatches[] = {1, 5, 1000};
  for (size_t bi = 0; bi < sizeof(kBatches) / sizeof(kBatches[0]); ++bi) {
    int64_t b = kBatches[bi], shape[1] = {b};
    size_t count = (size_t)b;
    float* xs = malloc(count * sizeof(float));
    float* ys = malloc(count * sizeof(float));
    float* rs = malloc(count * sizeof(float));
    if (!xs || !ys || !rs) return 1;
    for (size_t i = 0; i < count; ++i) xs[i] = (float)sin((double)i) - 0.5f;
    tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 1, shape);
    tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 1, shape);
    tj_tensor_t ref = tj_tensor_make(rs, TJ_DTYPE_F32, 1, shape);
    st = tj_executable_run(exe, &in, 1, &out, 1);
    if (!st) st = tj_reference_run(g, &in, 1, &ref, 1);
    if (st) return fail(st, "run");
    double worst_ref = 0, worst_c = 0;
    for (size_t i = 0; i < count; ++i) {
      double c = tanh(exp((double)xs[i]) * 2.0 + 1.0);
      worst_ref = fmax(worst_ref, fabs((double)ys[i] - (double)rs[i]));
      worst_c = fmax(worst_c, fabs((double)ys[i] - c));
    }
    bool ok = worst_ref <= 1e-5 && worst_c <= 1e-5;
    bad += !ok;
    printf(
        "B=%-3lld y[0]=%.6f y[last]=%.6f  max |compiled - reference| %.1e, "
        "|compiled - C| %.1e  %s\n",
        (long long)b, (double)ys[0], (double)ys[count - 1], worst_ref, worst_c,
        ok ? "ok" : "MISMATCH");
    free(xs);
    free(ys);
    free(rs);
  }
  tj_executable_stats_t s = {.struct_size = sizeof(s)};
  tj_executable_stats(exe, &s);
  printf("%d kernels, %d host call, %d graph breaks\n", s.num_kernels,
         s.num_host_calls, s.num_graph_breaks);
  if (s.num_host_calls != 1 || s.num_graph_breaks != 0 || s.num_kernels != 2)
    bad = 1;
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return bad ? 1 : 0;
}
