// Row kernels over long rows (issue 14) without a GPU: softmax, attention's
// masked and scaled softmax, log_softmax, layer_norm and rms_norm, f32 and
// bf16, over rows of a symbolic length and of 4096, 8191 and 32768
// elements (the resident path, the scalar path of odd lengths, and the
// streaming path, whose softmax takes its maximum and sum in one pass:
// emit_online_pair in jit/emit_nvptx.c), and over short rows of a warp
// each: every graph is one kernel with no graph break, its PTX assembled by
// ptxas -arch=sm_90a when the test is given ptxas's path. Numbers on the
// GPU: tests/cuda/cuda_row_test.c; on x86 the same graphs run in
// tests/python/test_row_reduce.py.

#include <stdio.h>

#include "tests/unit/ptx_check.h"
#include "tests/unit/row_cases.h"

static const char* g_ptxas = "";
static tj_context_t* g_ctx;

TEST(every_op_dtype_and_length) {
  static const int64_t kLengths[] = {0, 4096, 8191, 32768, 512, 509};
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_F32, TJ_DTYPE_BF16};
  for (int op = 0; op < ROW_OP_COUNT_; ++op) {
    for (size_t t = 0; t < sizeof(kTypes) / sizeof(kTypes[0]); ++t) {
      for (size_t l = 0; l < sizeof(kLengths) / sizeof(kLengths[0]); ++l) {
        char what[96];
        snprintf(what, sizeof(what), "%s %s N=%lld", kRowOpNames[op],
                 tj_dtype_name(kTypes[t]), (long long)kLengths[l]);
        // Short rows: constant row counts (a warp a row); long ones: R.
        int64_t n = kLengths[l], rows = n > 0 && n < 1024 ? 96 : 0;
        tj_graph_t* g = row_case_build(g_ctx, (row_op_t)op, kTypes[t], rows, n);
        CHECK(g != NULL);
        if (g) tj_test_check_ptx(g_ptxas, what, g);
      }
    }
  }
}

int main(int argc, char** argv) {
  if (argc > 1) g_ptxas = argv[1];
  if (!g_ptxas[0]) printf("# ptxas not given: PTX not assembled\n");
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  CHECK_OK(tj_context_create(&o, &g_ctx));
  RUN_TEST(every_op_dtype_and_length);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
