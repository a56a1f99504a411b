// An out-of-tree C program built against an installed libtensorjit, with
// only what pkg-config says:
//
//   cc hello.c $(pkg-config --cflags --libs tensorjit) -o hello
//
// y = relu(x * 2 - 1) over a symbolic length N, compiled for x86 and run
// for two lengths; checked against the formula and the reference
// interpreter. Prints "hello: ok" and exits 0 when everything matches.

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <tensorjit.h>

static int fail(const char* what, tj_status_t status) {
  fprintf(stderr, "hello: %s: %s: %s\n", what,
          tj_status_code_name(tj_status_code(status)),
          tj_status_message(status));
  tj_status_free(status);
  return 1;
}

int main(void) {
  if (tj_version_number() != TJ_VERSION_NUMBER) {
    fprintf(stderr, "hello: header %d but library %u\n", TJ_VERSION_NUMBER,
            (unsigned)tj_version_number());
    return 1;
  }
  tj_context_t* ctx = NULL;
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  tj_status_t st = tj_context_create(NULL, &ctx);
  if (st) return fail("tj_context_create", st);
  st = tj_graph_create(ctx, "hello", &g);
  if (st) return fail("tj_graph_create", st);
  int64_t n = tj_graph_symbol(g, "N");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, &n, "x");
  tj_value_t y = tj_graph_relu(
      g,
      tj_graph_sub(g, tj_graph_mul(g, x, tj_graph_scalar(g, TJ_DTYPE_F32, 2.0)),
                   tj_graph_scalar(g, TJ_DTYPE_F32, 1.0)));
  tj_graph_output(g, y, "y");
  st = tj_graph_finalize(g);
  if (st) return fail("tj_graph_finalize", st);
  st = tj_compile(g, NULL, &exe);
  if (st) return fail("tj_compile", st);
  int bad = 0;
  for (int64_t len = 3; len <= 1000; len += 997) {
    float xs[1000], ys[1000], refs[1000];
    for (int64_t i = 0; i < len; ++i) xs[i] = (float)i * 0.01f - 1.5f;
    tj_tensor_t in = tj_tensor_make(xs, TJ_DTYPE_F32, 1, &len);
    tj_tensor_t out = tj_tensor_make(ys, TJ_DTYPE_F32, 1, &len);
    tj_tensor_t ref = tj_tensor_make(refs, TJ_DTYPE_F32, 1, &len);
    st = tj_executable_run(exe, &in, 1, &out, 1);
    if (st) return fail("tj_executable_run", st);
    st = tj_reference_run(g, &in, 1, &ref, 1);
    if (st) return fail("tj_reference_run", st);
    for (int64_t i = 0; i < len; ++i) {
      float want = fmaxf(xs[i] * 2.0f - 1.0f, 0.0f);
      if (fabsf(ys[i] - want) > 1e-6f || ys[i] != refs[i]) ++bad;
    }
  }
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  printf("hello: libtensorjit %s from C: %s\n", tj_version_string(),
         bad ? "MISMATCH" : "ok");
  return bad ? 1 : 0;
}
