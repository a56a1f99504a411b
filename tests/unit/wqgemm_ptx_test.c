// The weight-only quantized GEMM's PTX (issue 17, qfold,
// jit/emit_nvptx_wqgemm.c), no GPU needed: each case of
// tests/unit/wqgemm_cuda_cases.h compiled for sm_90a and sm_80 runs on the
// GPU with no host step, as one kernel (the dequantize is the GEMM's B,
// not a kernel of its own) whose weights are widened by the magic-number
// trick (or.b32 with 0x4B000000 = 1258291200) rather than converted; its
// PTX is assembled by ptxas -arch=sm_90a where it is installed. The group
// of 16 decomposes: more than one kernel, none of them the trick.

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backends/cuda/cuda_entry.h"
#include "tests/unit/ptx_check.h"
#include "tests/unit/wqgemm_cuda_cases.h"

static const char* g_ptxas = "";
static tj_context_t* g_ctx;

static void check_case(const wq_case_t* c, tj_nvptx_arch_t arch) {
  wq_data_t d;
  wq_make(c, &d);
  tj_graph_t* g = wq_build(g_ctx, c, &d);
  CHECK(g != NULL);
  if (!g) {
    wq_free(&d);
    return;
  }
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  tj_allocator_t al = tj_allocator_system();
  CHECK_OK(tj_cuda_compile_ptx(g, NULL, arch, al, &ptx));
  if (ptx.num_host_steps != 0)
    fprintf(stderr, "  %s: %u host steps\n", c->name, ptx.num_host_steps);
  CHECK_EQ_INT(0, ptx.num_host_steps);
  bool magic = ptx.ptx && strstr(ptx.ptx, "1258291200") != NULL;
  if (c->decomposed) {
    CHECK(ptx.num_kernels > 1);
    CHECK(!magic);
  } else {
    if (ptx.num_kernels != 1)
      fprintf(stderr, "  %s: %u kernels\n", c->name, ptx.num_kernels);
    CHECK_EQ_INT(1, ptx.num_kernels);
    if (!magic) fprintf(stderr, "  %s: no magic-number dequantize\n", c->name);
    CHECK(magic);
  }
  // Compile cost: each row tier's unrolled block holds at most 32 k-row x
  // tile-row products (8 FMAs each) on the aligned path and one k row on
  // the byte path, so the main loop has at most 5 x 256 + 8 x 31 = 1528
  // FMAs (emit_nvptx_wqgemm.c's rows_unrolled); 2048 leaves room for an
  // epilogue's polynomial (gelu). A whole 32-row chunk unrolled at every
  // tier was 15,872 for int4: 36,000 lines of PTX, ~3 s of LLVM and ~6.6 s
  // of ptxas (CPU) for one GEMM.
  if (!c->decomposed && ptx.ptx) {
    int fmas = 0;
    for (const char* p = ptx.ptx; (p = strstr(p, "fma.rn.f32")); ++p) ++fmas;
    if (fmas > 2048 || fmas < 8 * 31)
      fprintf(stderr, "  %s: %d FMAs in the PTX\n", c->name, fmas);
    CHECK(fmas <= 2048);
    CHECK(fmas >= 8 * 31);
  }
  if (ptx.ptx && arch == TJ_NVPTX_SM_90A)
    tj_test_assemble_ptx(g_ptxas, c->name, ptx.ptx);
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
  wq_free(&d);
}

TEST(every_case_on_sm_90a_and_sm_80) {
  for (int i = 0; i < kWqNumCases; ++i) {
    check_case(&kWqCases[i], TJ_NVPTX_SM_90A);
    check_case(&kWqCases[i], TJ_NVPTX_SM_80);
  }
}

int main(int argc, char** argv) {
  if (argc > 1) g_ptxas = argv[1];
  if (tj_test_context_create(&g_ctx) != NULL) return 1;
  RUN_TEST(every_case_on_sm_90a_and_sm_80);
  tj_context_destroy(g_ctx);
  printf("# PTX assembled by ptxas: %s\n", g_ptxas[0] ? g_ptxas : "skipped");
  TEST_MAIN_END();
}
