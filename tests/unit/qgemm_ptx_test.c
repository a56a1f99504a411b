// The 8-bit GEMM's PTX (issue 17, jit/emit_nvptx_qgemm.c), no GPU needed:
// each case of tests/unit/qgemm_cuda_cases.h compiled for sm_90a runs
// on the GPU (no host step; one kernel: the dequant epilogue fused) with
// the operands' wgmma .s32.{s8,u8}.{s8,u8} instruction (.s8.s8 and dp4a
// sums for mixed signs; fp8: .f32.{e4m3,e5m2}.{e4m3,e5m2}), and its PTX is
// assembled by ptxas -arch=sm_90a where it is installed; the case the
// template refuses (K = 100) runs on the host instead, as do all of them on
// sm_80 (no wgmma).

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backends/cuda/cuda_entry.h"
#include "tests/unit/ptx_check.h"
#include "tests/unit/qgemm_cuda_cases.h"

static const char* g_ptxas = "";
static tj_context_t* g_ctx;

static const char* type_name(tj_dtype_t dt) {
  return dt == TJ_DTYPE_U8       ? "u8"
         : dt == TJ_DTYPE_F8E4M3 ? "e4m3"
         : dt == TJ_DTYPE_F8E5M2 ? "e5m2"
                                 : "s8";
}

static void check_case(const qcuda_case_t* c, tj_nvptx_arch_t arch,
                       const char* want) {
  tj_graph_t* g = qcuda_build(g_ctx, c);
  if (!g) return;
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  tj_allocator_t al = tj_allocator_system();
  CHECK_OK(tj_cuda_compile_ptx(g, NULL, arch, al, &ptx));
  bool gpu = arch == TJ_NVPTX_SM_90A && !c->host;
  if (gpu) {
    if (ptx.num_host_steps != 0 || !ptx.ptx)
      fprintf(stderr, "  %s: %u host steps\n", c->name, ptx.num_host_steps);
    CHECK_EQ_INT(0, ptx.num_host_steps);
    // matmul_integer's zero-point corrections are reductions of their
    // own, as is the static QDQ's quantize; otherwise the dequantization
    // is the GEMM's epilogue.
    if (!c->zero_points) CHECK_EQ_INT(c->qdq ? 2 : 1, ptx.num_kernels);
    // Mixed signs run as s8 x s8 with the other operand's sums (dp4a);
    // float8 wgmma takes e4m3 and e5m2 in any pair, into f32.
    bool f8 = qcuda_is_f8(c->adt);
    bool mixed = c->adt != c->bdt && !f8;
    char inst[96];
    snprintf(inst, sizeof(inst), "%s.%s.%s.%s", want, f8 ? "f32" : "s32",
             mixed ? "s8" : type_name(c->adt),
             mixed ? "s8" : type_name(c->bdt));
    bool found = ptx.ptx && strstr(ptx.ptx, inst) != NULL;
    if (!found) fprintf(stderr, "  %s: no %s in the PTX\n", c->name, inst);
    CHECK(found);
    bool sums = ptx.ptx && strstr(ptx.ptx, "dp4a.s32.s32") != NULL;
    CHECK_EQ_INT(mixed, sums);
    // One schedule: no autotuning candidates (each would be compiled, and
    // timed, at the first run of a shape).
    if (ptx.num_variant_kernels != 0)
      fprintf(stderr, "  %s: %u candidate kernels\n", c->name,
              ptx.num_variant_kernels);
    CHECK_EQ_INT(0, ptx.num_variant_kernels);
    if (ptx.ptx) tj_test_assemble_ptx(g_ptxas, c->name, ptx.ptx);
  } else {
    CHECK(ptx.num_host_steps >= 1);
    bool found = ptx.ptx && strstr(ptx.ptx, "wgmma.mma_async") != NULL;
    CHECK(!found);
  }
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
}

TEST(every_case_on_sm_90a_and_sm_80) {
  for (int i = 0; i < kQcudaNumCases; ++i) {
    check_case(&kQcudaCases[i], TJ_NVPTX_SM_90A,
               "wgmma.mma_async.sync.aligned.m64n128k32");
    check_case(&kQcudaCases[i], TJ_NVPTX_SM_80, "");
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
