// The cost of a custom op's host call (issue 16): what the library adds
// around the user's function, per call.
//
//   direct   the function through a volatile pointer (the floor)
//   libffi   tj_custom_op_invoke on a signature op: binding the signature's
//            arguments to the tensors and attributes, then the call (a
//            register call on x86-64, ffi_call elsewhere)
//   ffi_call a bare ffi_call of the function on a prepared cif, arguments
//            already bound: what the call cost through libffi alone
//   generic  tj_custom_op_invoke on a descriptor-callback op
//   chain    a compiled chain pointwise -> custom -> pointwise beside its
//            three parts: the two regions compiled alone and the function
//            called directly (the goal: the chain within 10% of their sum)
//
// Usage: custom_op_bench [--calls N] [--reps R] [--n ELEMENTS] [--cpu]
// Prints a median over R repetitions of N calls each (ns per call).
// --cpu: the calling thread's CPU time instead of wall time (every path is
// one thread's work: the chain's executables run on one thread), so that
// the other processes of a loaded machine do not inflate the figures.

#include <ffi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/custom_op.h"
#include "tensorjit.h"

static clockid_t g_clock = CLOCK_MONOTONIC;

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(g_clock, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return v[n / 2];
}

static void axpb(float* y, int64_t n, const float* x, int64_t m, float a,
                 float b) {
  for (int64_t i = 0; i < n && i < m; ++i) y[i] = x[i] * a + b;
}

static tj_status_t axpb_host(void* user, const tj_tensor_t* in, int32_t n,
                             const tj_custom_attrs_t* at,
                             const tj_tensor_t* out) {
  (void)user, (void)n;
  axpb(out->data, out->shape[0], in[0].data, in[0].shape[0],
       (float)at->floats[0], (float)at->floats[1]);
  return NULL;
}

static tj_status_t same_type(void* user, tj_graph_t* g,
                             const tj_custom_type_t* in, int32_t n,
                             const tj_custom_attrs_t* at,
                             tj_custom_type_t* out) {
  (void)user, (void)g, (void)n, (void)at;
  *out = in[0];
  return NULL;
}

static void die(tj_status_t s, const char* what) {
  if (!s) return;
  fprintf(stderr, "%s: %s\n", what, tj_status_message(s));
  exit(1);
}

static tj_executable_t* compile_chain(tj_context_t* ctx, int part) {
  tj_graph_t* g = NULL;
  die(tj_graph_create(ctx, "chain", &g), "graph");
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){B}, "x");
  tj_value_t y = x;
  // Part 2 (the second region alone) reads the custom op's result as |c|.
  if (part == 2) y = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){B}, "c");
  if (part != 2) y = tj_graph_tanh(g, tj_graph_mul(g, y, y));
  if (part == 0) {
    tj_custom_attrs_t at = {0, NULL, 2, (double[]){1.5, 0.25}};
    y = tj_graph_custom(g, "axpb", &y, 1, &at);
  }
  if (part != 1) y = tj_graph_sigmoid(g, tj_graph_add(g, y, x));
  tj_graph_output(g, y, "y");
  die(tj_graph_finalize(g), "finalize");
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.x86.num_threads = 1;  // the figures of one core, less noisy here
  tj_executable_t* exe = NULL;
  die(tj_compile(g, &opts, &exe), "compile");
  tj_graph_destroy(g);
  return exe;
}

int main(int argc, char** argv) {
  long calls = 1000000;
  int reps = 7;
  int64_t n = 1;
  int kept = 1;  // --cpu taken out; the rest are pairs
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--cpu") == 0)
      g_clock = CLOCK_THREAD_CPUTIME_ID;
    else
      argv[kept++] = argv[i];
  }
  argc = kept;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--calls") == 0) calls = atol(argv[i + 1]);
    if (strcmp(argv[i], "--reps") == 0) reps = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--n") == 0) n = atoll(argv[i + 1]);
  }
  if (reps < 1 || reps > 64 || calls < 1 || n < 1) return 2;
  tj_context_t* ctx = NULL;
  die(tj_context_create(NULL, &ctx), "context");
  tj_custom_op_desc_t d;
  memset(&d, 0, sizeof(d));
  d.struct_size = sizeof(d);
  d.name = "axpb";
  d.version = 1;
  d.num_inputs = 1;
  d.shape = same_type;
  d.function = (void (*)(void))axpb;
  d.signature = "void(f32*, i64, const f32*, i64, f32, f32)";
  d.flags = TJ_CUSTOM_OP_PURE;
  die(tj_context_register_op(ctx, &d), "register");
  d.name = "axpb_host";
  d.function = NULL;
  d.signature = NULL;
  d.host = axpb_host;
  die(tj_context_register_op(ctx, &d), "register");
  const tj_custom_op_t* ffi_op = tj_custom_op_find(ctx, "axpb", 4, 1);
  const tj_custom_op_t* host_op = tj_custom_op_find(ctx, "axpb_host", 9, 1);

  float* x = calloc((size_t)n, sizeof(float));
  float* y = calloc((size_t)n, sizeof(float));
  if (!x || !y) return 1;
  int64_t shape[1] = {n};
  tj_tensor_t in = tj_tensor_make(x, TJ_DTYPE_F32, 1, shape);
  tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 1, shape);
  tj_custom_attrs_t at = {0, NULL, 2, (double[]){1.5, 0.25}};
  void (*volatile direct)(float*, int64_t, const float*, int64_t, float,
                          float) = axpb;

  ffi_cif cif;
  ffi_type* types[6] = {&ffi_type_pointer, &ffi_type_sint64, &ffi_type_pointer,
                        &ffi_type_sint64,  &ffi_type_float,  &ffi_type_float};
  if (ffi_prep_cif(&cif, FFI_DEFAULT_ABI, 6, &ffi_type_void, types) != FFI_OK)
    return 1;
  float a = 1.5f, b = 0.25f;
  void* values[6] = {&y, &n, &x, &n, &a, &b};
  double t_direct[64], t_ffi[64], t_host[64], t_bare[64];
  for (int r = 0; r < reps; ++r) {
    double t0 = now_ns();
    for (long i = 0; i < calls; ++i) direct(y, n, x, n, 1.5f, 0.25f);
    double t1 = now_ns();
    for (long i = 0; i < calls; ++i) {
      tj_status_t s = tj_custom_op_invoke(ffi_op, &in, 1, &at, &out);
      if (s) die(s, "invoke");
    }
    double t2 = now_ns();
    for (long i = 0; i < calls; ++i) {
      tj_status_t s = tj_custom_op_invoke(host_op, &in, 1, &at, &out);
      if (s) die(s, "invoke");
    }
    double t3 = now_ns();
    for (long i = 0; i < calls; ++i)
      ffi_call(&cif, (void (*)(void))axpb, NULL, values);
    double t4 = now_ns();
    t_bare[r] = (t4 - t3) / (double)calls;
    t_direct[r] = (t1 - t0) / (double)calls;
    t_ffi[r] = (t2 - t1) / (double)calls;
    t_host[r] = (t3 - t2) / (double)calls;
  }
  double md = median(t_direct, reps), mf = median(t_ffi, reps),
         mh = median(t_host, reps), mb = median(t_bare, reps);
  printf("host call of a %lld-element axpb, ns per call (median of %d x %ld)\n",
         (long long)n, reps, calls);
  printf("  direct   %8.1f\n", md);
  printf("  libffi   %8.1f   overhead %6.1f (%s)\n", mf, mf - md,
         tj_custom_call_is_direct(ffi_op) ? "register call, no ffi_call"
                                          : "ffi_call");
  printf("  generic  %8.1f   overhead %6.1f\n", mh, mh - md);
  printf("  ffi_call %8.1f   overhead %6.1f (bare, bound arguments)\n", mb,
         mb - md);

  // The chain against its parts, per run (x86, generic kernels).
  int64_t big = 1 << 16;
  float* xs = calloc((size_t)big, sizeof(float));
  float* ys = calloc((size_t)big, sizeof(float));
  float* zs = calloc((size_t)big, sizeof(float));
  if (!xs || !ys || !zs) return 1;
  for (int64_t i = 0; i < big; ++i) xs[i] = (float)(i % 17) * 0.1f - 0.8f;
  tj_executable_t* exe[3] = {compile_chain(ctx, 0), compile_chain(ctx, 1),
                             compile_chain(ctx, 2)};
  tj_tensor_t bx = tj_tensor_make(xs, TJ_DTYPE_F32, 1, &big);
  tj_tensor_t by = tj_tensor_make(ys, TJ_DTYPE_F32, 1, &big);
  tj_tensor_t bz = tj_tensor_make(zs, TJ_DTYPE_F32, 1, &big);
  long runs = 500;
  tj_tensor_t two[2] = {bx, bz};
  double t_chain[64], t_first[64], t_op[64], t_second[64];
  for (int r = 0; r < reps; ++r) {
    double t0 = now_ns();
    for (long i = 0; i < runs; ++i)
      die(tj_executable_run(exe[0], &bx, 1, &by, 1), "run");
    double t1 = now_ns();
    for (long i = 0; i < runs; ++i)
      die(tj_executable_run(exe[1], &bx, 1, &by, 1), "run");
    double t2 = now_ns();
    for (long i = 0; i < runs; ++i) direct(zs, big, ys, big, 1.5f, 0.25f);
    double t3 = now_ns();
    for (long i = 0; i < runs; ++i)
      die(tj_executable_run(exe[2], two, 2, &by, 1), "run");
    double t4 = now_ns();
    t_chain[r] = (t1 - t0) / (double)runs / 1e3;
    t_first[r] = (t2 - t1) / (double)runs / 1e3;
    t_op[r] = (t3 - t2) / (double)runs / 1e3;
    t_second[r] = (t4 - t3) / (double)runs / 1e3;
  }
  double mc = median(t_chain, reps), m1 = median(t_first, reps),
         mo = median(t_op, reps), m2 = median(t_second, reps);
  printf(
      "chain tanh(x*x) -> axpb -> sigmoid(. + x), %lld f32, 1 thread, us per "
      "run (median of %d x %ld)\n",
      (long long)big, reps, runs);
  printf("  region 1 compiled alone           %8.2f\n", m1);
  printf("  the op called directly            %8.2f\n", mo);
  printf("  region 2 compiled alone           %8.2f\n", m2);
  printf("  sum of the three                  %8.2f\n", m1 + mo + m2);
  printf(
      "  compiled chain with the host call %8.2f   ratio %.3f (goal <= 1.10)\n",
      mc, mc / (m1 + mo + m2));
  for (int i = 0; i < 3; ++i) tj_executable_release(exe[i]);
  free(xs);
  free(ys);
  free(zs);
  free(x);
  free(y);
  tj_context_destroy(ctx);
  return 0;
}
