// libFuzzer target: the builder API driven by fuzz bytes. Every choice of
// tests/unit/random_graph.h's generator (ops, operands, dtypes, shapes
// over the symbolic batch B, broadcasts, reductions, movement, matmuls,
// composites, attributes, outputs) is read from the input bytes, and the
// graph is built through tj_graph_append and finalized. A graph that
// builds is compiled for x86 (verifying the IR after every pass) and run,
// beside the reference interpreter, on seeded random inputs at a small
// batch; the two must agree within random_graph.h's per-dtype tolerances
// (close_enough: NaN where NaN, infinities equal), unless the graph is
// ill-conditioned (its reference outputs move under a few ulps of input
// noise, as in x86_random_graph_test.c) or the mismatch is an overflow of
// the narrow type (only_overflow).
//
// Fails on: a crash, a leak, a compile or run error (the builder accepted
// the graph, so the compiler must take it), a mismatch. Graphs stay small
// (a few to a dozen ops, f32 and f64) so that each input costs one short
// LLVM compile.

#include "tests/unit/random_graph.h"

static tj_context_t* g_context;

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static void fail(const tj_graph_t* g, const char* what, tj_status_t st) {
  fprintf(stderr, "fuzz_builder: %s%s%s\n", what, st ? ": " : "",
          st ? tj_status_message(st) : "");
  char* text = NULL;
  if (!tj_graph_print(g, &text)) fprintf(stderr, "%s", text);
  abort();  // the fuzzer's crash signal, with the graph printed
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!g_context && tj_context_create(NULL, &g_context)) return 0;
  static const gen_config_t kConfig = {1, 12, 3, 8, true, true, 0};
  rng_t r = {0, data, size, 0};
  tj_graph_t* g = generate_with(g_context, &r, "fuzz", &kConfig);
  if (!g) return 0;
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.verify_each = true;
  opts.cache_dir = "";
  opts.x86.num_threads = 1;
  tj_executable_t* exe = NULL;
  tj_status_t st = tj_compile(g, &opts, &exe);
  if (st) fail(g, "x86 compile failed", st);
  // The deferred small-M GEMM code builds on a library thread after
  // tj_compile; wait for it here, so that libFuzzer's leak check after
  // this input never scans a build still in flight (the long mode of
  // 2026-12-03 reported the build's kernel array, freed a few lines after
  // it was allocated, as a leak; the input alone does not reproduce it).
  st = tj_executable_prepare(exe, NULL, 0);
  if (st) fail(g, "x86 prepare failed", st);
  int64_t B = size % 4 + 1;
  inputs_t in, noisy;
  run_t want, got;
  memset(&want, 0, sizeof(want));
  memset(&got, 0, sizeof(got));
  bool have_inputs = make_inputs(g, B, size, false, &in);
  st = have_inputs ? run_graph(g, &in, &want) : NULL;
  if (st) {  // a guard fails at this B, or argmax over an empty axis
    tj_status_free(st);
    have_inputs = false;
  }
  if (have_inputs) {
    bool conditioned =
        make_inputs(g, B, size, true, &noisy) && stable(g, &noisy, &want);
    inputs_free(&noisy);
    st = run_compiled(g, &in, &opts, &got);
    if (st) fail(g, "x86 run failed", st);
    char what[512] = "";
    // As x86_random_graph_test classifies them: a mismatch that moves
    // under input noise is ill-conditioned, and one that goes away when
    // the huge magnitudes among the inputs are replaced by ordinary values
    // is an overflow of the narrow type (the reference computes in f64),
    // as rms_norm's f32 sum of squares of a 4e37 is inf on every target.
    uint64_t seed = size;
    if (conditioned && !outputs_agree(g, &want, &got, what, sizeof(what)) &&
        !unstable_under_noise(g, B, seed, &want) &&
        !only_overflow(g, &in, NULL, &opts, B, seed)) {
      fail(g, what, NULL);
    }
  }
  run_free(&want);
  run_free(&got);
  inputs_free(&in);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  return 0;
}
