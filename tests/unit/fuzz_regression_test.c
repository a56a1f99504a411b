// Regression tests for what the fuzz targets of tests/fuzz found, one test
// per finding, each named after its target; the reduced input is spelled
// out in the test.

#include <stdint.h>

#include "tests/unit/random_graph.h"

static tj_context_t* g_ctx;

// fuzz_run_args: a zero-element tensor (dims [0, 4]) with a byte_offset
// of 2^63 or more. The x86 target formed data + byte_offset with the
// offset as an int64, a pointer moved backwards past its base (UB,
// UBSan's pointer-overflow); and as its extent was skipped (no element),
// an offset that wraps the address space was accepted, which the
// reference target then formed. Now the offset is added unsigned, and one
// that wraps is INVALID_ARGUMENT on every CPU target, elements or not, for
// inputs and outputs alike; a sane offset or NULL data still runs.
TEST(run_args_zero_elements_wrapping_offset) {
  static const char kText[] =
      "func @f[N](%x: f32[N,4], %w: f32[N,4]) {\n"
      "  %2 = add %x, %w : f32[N,4]\n"
      "  return %2 as \"y\"\n"
      "}\n";
  const tj_target_t targets[2] = {TJ_TARGET_X86, TJ_TARGET_REFERENCE};
  for (int t = 0; t < 2; ++t) {
    tj_graph_t* g = NULL;
    CHECK_OK(tj_graph_parse(g_ctx, kText, sizeof(kText) - 1, "t", &g));
    tj_compile_options_t o;
    tj_compile_options_initialize(&o);
    o.target = targets[t];
    o.cache_dir = "";
    tj_executable_t* e = NULL;
    CHECK_OK(tj_compile(g, &o, &e));
    float x[4] = {0}, w[4] = {0}, y[4] = {0};
    const int64_t shape[2] = {0, 4};
    for (int which = 0; which < 3; ++which) {
      tj_tensor_t in[2] = {tj_tensor_make(x, TJ_DTYPE_F32, 2, shape),
                           tj_tensor_make(w, TJ_DTYPE_F32, 2, shape)};
      tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, shape);
      tj_tensor_t* bad = which < 2 ? &in[which] : &out;
      // An offset of 2^63 or more that does not wrap: x86 took it as a
      // negative int64 (the fuzzer's was 0xfd2c2dff002d0000).
      bad->byte_offset = ((uint64_t)1 << 63) + 0x2d0000;
      CHECK_OK(tj_executable_run(e, in, 2, &out, 1));
      // One that wraps: refused, elements or not.
      bad->byte_offset = UINT64_MAX - (uint64_t)(uintptr_t)bad->data + 1;
      CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "leaves the address space",
                   tj_executable_run(e, in, 2, &out, 1));
      bad->byte_offset = 16;
      CHECK_OK(tj_executable_run(e, in, 2, &out, 1));
      bad->data = NULL;
      bad->byte_offset = UINT64_MAX;
      CHECK_OK(tj_executable_run(e, in, 2, &out, 1));
    }
    tj_executable_release(e);
    tj_graph_destroy(g);
  }
}

// fuzz_builder (2026-12-03, long mode): rms_norm over a row holding
// -4.25e37 (make_inputs' huge magnitudes) is -0 on x86, whose f32 sum of
// squares overflows to inf, and -0.535 in the reference, which sums in
// f64. The kernel computes what an f32 rms_norm computes (torch's too);
// the target now classifies such a mismatch as x86_random_graph_test
// does: it goes away with the huge values replaced (only_overflow), so it
// is an overflow of the narrow type, not a failure. The input was 219
// bytes: B = 219 % 4 + 1, seed 219.
TEST(builder_rms_norm_overflow_is_classified) {
  static const char kText[] =
      "func @fuzz[B](%in0: f32[B,4], %in1: f32[], %in2: f32[B,B], "
      "%in3: f32[B], %in4: f32[B]) {\n"
      "  %5 = pow %in2, %in3 : f32[B,B]\n"
      "  %6 = rms_norm %in2, %in4 {eps=1.0000000000000001e-05} : f32[B,B]\n"
      "  return %6 as \"out0\"\n"
      "}\n";
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_parse(g_ctx, kText, sizeof(kText) - 1, "t", &g));
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.cache_dir = "";
  o.x86.num_threads = 1;
  inputs_t in;
  CHECK(make_inputs(g, 4, 219, false, &in));
  CHECK(in.huge);
  run_t want, got;
  CHECK_OK(run_graph(g, &in, &want));
  CHECK_OK(run_compiled(g, &in, &o, &got));
  CHECK(!outputs_agree(g, &want, &got, NULL, 0));
  CHECK(only_overflow(g, &in, NULL, &o, 4, 219));
  run_free(&want);
  run_free(&got);
  inputs_free(&in);
  tj_graph_destroy(g);
}

int main(void) {
  if (tj_context_create(NULL, &g_ctx)) return 1;
  RUN_TEST(run_args_zero_elements_wrapping_offset);
  RUN_TEST(builder_rms_norm_overflow_is_classified);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
