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
#include <stdlib.h>
#include <string.h>

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

// The PTX of |op| at |dt| over rows of |n| elements (0: the symbol N) in
// a context made with TJ_NVPTX_ROWS set to |rows| (NULL: unset); free
// with free().
static char* row_ptx(row_op_t op, tj_dtype_t dt, int64_t n, const char* rows) {
  if (rows) setenv("TJ_NVPTX_ROWS", rows, 1);
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&o, &ctx));
  unsetenv("TJ_NVPTX_ROWS");
  if (!ctx) return NULL;
  char* text = NULL;
  tj_graph_t* g = row_case_build(ctx, op, dt, 0, n);
  CHECK(g != NULL);
  if (g) {
    CHECK_OK(tj_graph_finalize(g));
    tj_cuda_offline_ptx_t ptx;
    memset(&ptx, 0, sizeof(ptx));
    tj_allocator_t al = tj_allocator_system();
    CHECK_OK(tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx));
    CHECK_EQ_INT(1, (int)ptx.num_kernels);
    if (ptx.ptx) {
      size_t size = strlen(ptx.ptx) + 1;
      text = malloc(size);
      if (text) memcpy(text, ptx.ptx, size);
    }
    tj_cuda_offline_ptx_deinitialize(al, &ptx);
    tj_graph_destroy(g);
  }
  tj_context_destroy(ctx);
  return text;
}

// The staged path (rows32k): each op's one kernel copies its row into
// dynamic shared memory by 16-byte cp.async (in groups, awaited one by
// one), reads it there by 16-byte ld.shared and takes the path where the
// launch's dynamic shared memory holds the row; TJ_NVPTX_ROWS=streaming
// leaves it out (the streaming kernel of before), =staged-512 and
// =staged-1024 widen the kernel's blocks, and unset is one of =staged and
// =streaming (kRowsStagedByDefault in backends/cuda/cuda_program.c).
TEST(staged_path) {
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_F32, TJ_DTYPE_BF16};
  static const char* const kStaged[] = {"cp.async.cg.shared.global",
                                        "%dynamic_smem_size", "ld.shared.v4",
                                        "cp.async.wait_group"};
  for (int op = 0; op < ROW_OP_COUNT_; ++op) {
    for (size_t t = 0; t < sizeof(kTypes) / sizeof(kTypes[0]); ++t) {
      char what[96];
      snprintf(what, sizeof(what), "%s %s N", kRowOpNames[op],
               tj_dtype_name(kTypes[t]));
      char* unset = row_ptx((row_op_t)op, kTypes[t], 0, NULL);
      char* staged = row_ptx((row_op_t)op, kTypes[t], 0, "staged");
      char* streaming = row_ptx((row_op_t)op, kTypes[t], 0, "streaming");
      CHECK(unset && staged && streaming);
      for (size_t i = 0; i < sizeof(kStaged) / sizeof(kStaged[0]); ++i) {
        tj_test_check_has(what, staged, kStaged[i], true);
        tj_test_check_has(what, streaming, kStaged[i], false);
      }
      CHECK(unset && staged && streaming &&
            (strcmp(unset, staged) == 0 || strcmp(unset, streaming) == 0));
      tj_test_check_has(what, staged, ".maxntid 256, 1, 1", true);
      tj_test_check_has(what, staged, ".minnctapersm 4", true);
      tj_test_assemble_ptx(g_ptxas, what, staged);
      free(unset);
      free(staged);
      free(streaming);
      // Blocks of 512 or 1024 threads a staged row: the same 64 registers.
      static const struct {
        const char* setting;
        const char* threads;
        const char* blocks;
      } kWide[] = {{"staged-512", ".maxntid 512, 1, 1", ".minnctapersm 2"},
                   {"staged-1024", ".maxntid 1024, 1, 1", ".minnctapersm 1"}};
      for (size_t w = 0; w < sizeof(kWide) / sizeof(kWide[0]); ++w) {
        char* wide = row_ptx((row_op_t)op, kTypes[t], 0, kWide[w].setting);
        CHECK(wide != NULL);
        tj_test_check_has(what, wide, kStaged[0], true);
        tj_test_check_has(what, wide, kWide[w].threads, true);
        tj_test_check_has(what, wide, kWide[w].blocks, true);
        tj_test_assemble_ptx(g_ptxas, what, wide);
        free(wide);
      }
    }
  }
}

// Rows of a constant length have the staged path only where a launch
// would take it (row_stage_plan): 4096 elements are held in registers,
// f32 32768 staged, except the masked softmax's two staged inputs (256
// KiB), which bf16 keeps (128 KiB).
TEST(staged_path_constant_lengths) {
  static const struct {
    row_op_t op;
    tj_dtype_t dt;
    int64_t n;
    bool staged;
  } kCases[] = {
      {ROW_SOFTMAX, TJ_DTYPE_F32, 4096, false},
      {ROW_LAYER_NORM, TJ_DTYPE_BF16, 4096, false},
      {ROW_SOFTMAX, TJ_DTYPE_F32, 32768, true},
      {ROW_LAYER_NORM, TJ_DTYPE_F32, 32768, true},
      {ROW_MASKED_SOFTMAX, TJ_DTYPE_F32, 32768, false},
      {ROW_MASKED_SOFTMAX, TJ_DTYPE_BF16, 32768, true},
      {ROW_RMS_NORM, TJ_DTYPE_F32, 65536, false},
      {ROW_RMS_NORM, TJ_DTYPE_BF16, 65536, true},
  };
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i) {
    char what[96];
    snprintf(what, sizeof(what), "%s %s N=%lld", kRowOpNames[kCases[i].op],
             tj_dtype_name(kCases[i].dt), (long long)kCases[i].n);
    char* ptx = row_ptx(kCases[i].op, kCases[i].dt, kCases[i].n, "staged");
    CHECK(ptx != NULL);
    tj_test_check_has(what, ptx, "cp.async.cg.shared.global", kCases[i].staged);
    free(ptx);
  }
  // Unless the setting names them, a staged row's block has threads by
  // its staged bytes (row_stage_block): 256 to 32 KiB, 512 to 64 KiB,
  // 1024 past it; a symbolic length 256 (staged_path above).
  static const struct {
    row_op_t op;
    tj_dtype_t dt;
    int64_t n;
    const char* rows;
    const char* threads;
  } kWidths[] = {
      {ROW_SOFTMAX, TJ_DTYPE_F32, 8192, "staged", ".maxntid 256, 1, 1"},
      {ROW_SOFTMAX, TJ_DTYPE_BF16, 16384, "staged", ".maxntid 256, 1, 1"},
      {ROW_LAYER_NORM, TJ_DTYPE_F32, 16384, "staged", ".maxntid 512, 1, 1"},
      {ROW_RMS_NORM, TJ_DTYPE_BF16, 32768, "staged", ".maxntid 512, 1, 1"},
      {ROW_SOFTMAX, TJ_DTYPE_F32, 32768, "staged", ".maxntid 1024, 1, 1"},
      {ROW_MASKED_SOFTMAX, TJ_DTYPE_BF16, 32768, "staged",
       ".maxntid 1024, 1, 1"},
      {ROW_SOFTMAX, TJ_DTYPE_F32, 32768, "staged-256", ".maxntid 256, 1, 1"},
      {ROW_SOFTMAX, TJ_DTYPE_F32, 8192, "staged-1024", ".maxntid 1024, 1, 1"},
  };
  for (size_t i = 0; i < sizeof(kWidths) / sizeof(kWidths[0]); ++i) {
    char what[96];
    snprintf(what, sizeof(what), "%s %s N=%lld %s", kRowOpNames[kWidths[i].op],
             tj_dtype_name(kWidths[i].dt), (long long)kWidths[i].n,
             kWidths[i].rows);
    char* ptx =
        row_ptx(kWidths[i].op, kWidths[i].dt, kWidths[i].n, kWidths[i].rows);
    CHECK(ptx != NULL);
    tj_test_check_has(what, ptx, "cp.async.cg.shared.global", true);
    tj_test_check_has(what, ptx, kWidths[i].threads, true);
    tj_test_assemble_ptx(g_ptxas, what, ptx);
    free(ptx);
  }
}

// The launch's choice (tj_nvptx_row_staged) for a kernel of 256 threads
// holding 4 vectors a thread in registers, one staged buffer of |size|
// bytes an element, and sm_90a's 224 KiB for it.
static uint32_t staged_bytes(int32_t size, int64_t length) {
  tj_nvptx_kernel_t info;
  memset(&info, 0, sizeof(info));
  info.kind = TJ_KIR_ROW_REDUCE;
  info.threads = 256;
  info.vector_lanes = 16 / size;
  info.row_slots = 16 / info.vector_lanes;
  info.row_stage_bytes = size;
  info.row_stage_buffers = 1;
  info.shared_bytes = 224 * 1024;
  uint32_t bytes = 7;
  bool staged = tj_nvptx_row_staged(&info, length, &bytes);
  CHECK(staged == (bytes > 0));
  return bytes;
}

TEST(staged_launch_choice) {
  // f32: resident to 4096, staged from 4100 (a multiple of the 4 lanes)
  // while 4 L + 16 <= 224 KiB, i.e. to 57340.
  CHECK_EQ_INT(0, (int)staged_bytes(4, 4096));
  CHECK_EQ_INT(4100 * 4 + 16, (int)staged_bytes(4, 4100));
  CHECK_EQ_INT(0, (int)staged_bytes(4, 4101));  // the scalar path
  CHECK_EQ_INT(32768 * 4 + 16, (int)staged_bytes(4, 32768));
  CHECK_EQ_INT(57340 * 4 + 16, (int)staged_bytes(4, 57340));
  CHECK_EQ_INT(0, (int)staged_bytes(4, 57344));
  CHECK_EQ_INT(0, (int)staged_bytes(4, 0));
  CHECK_EQ_INT(0, (int)staged_bytes(4, (int64_t)1 << 40));
  // bf16: 8 lanes, 2 slots; staged from 4104 to 114680.
  CHECK_EQ_INT(0, (int)staged_bytes(2, 4096));
  CHECK_EQ_INT(4104 * 2 + 16, (int)staged_bytes(2, 4104));
  CHECK_EQ_INT(114680 * 2 + 16, (int)staged_bytes(2, 114680));
  CHECK_EQ_INT(0, (int)staged_bytes(2, 114688));
  // No staged buffer, or another template: never.
  tj_nvptx_kernel_t info;
  memset(&info, 0, sizeof(info));
  info.kind = TJ_KIR_ROW_REDUCE;
  info.threads = 256;
  info.vector_lanes = 4;
  info.row_slots = 4;
  info.shared_bytes = 224 * 1024;
  uint32_t bytes = 7;
  CHECK(!tj_nvptx_row_staged(&info, 8192, &bytes));
  CHECK_EQ_INT(0, (int)bytes);
  info.row_stage_bytes = 4;
  info.row_stage_buffers = 1;
  info.kind = TJ_KIR_POINTWISE;
  CHECK(!tj_nvptx_row_staged(&info, 8192, &bytes));
}

int main(int argc, char** argv) {
  if (argc > 1) g_ptxas = argv[1];
  if (!g_ptxas[0]) printf("# ptxas not given: PTX not assembled\n");
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  CHECK_OK(tj_context_create(&o, &g_ctx));
  RUN_TEST(every_op_dtype_and_length);
  RUN_TEST(staged_path);
  RUN_TEST(staged_path_constant_lengths);
  RUN_TEST(staged_launch_choice);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
