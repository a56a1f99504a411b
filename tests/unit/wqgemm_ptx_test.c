// The weight-only quantized GEMM's PTX (issue 17, qfold,
// jit/emit_nvptx_wqmma.c), no GPU needed: each case of
// tests/unit/wqgemm_cuda_cases.h compiled for sm_90a and sm_80 runs on the
// GPU with no host step, as one kernel (the dequantize is the GEMM's B,
// not a kernel of its own) whose weights are widened by the magic-number
// trick (or.b32 with 0x4B000000 = 1258291200) rather than converted and
// multiplied on tensor cores (mma.sync); its PTX is assembled by ptxas
// -arch=sm_90a where it is installed, with no spills (its registers are
// printed). The int4 group of 16 decomposes: more than one kernel, none
// of them the trick. TJ_CUDA_WQGEMM=tiles: the same kernel reading the
// weight in the tile layout (tj_nvptx_wq_tile, checked here against its
// statement in jit/nvptx.h) with 16-byte loads, no spills, and at most
// 128 registers (two blocks an SM) for f16/bf16 A.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cuda/cuda_entry.h"
#include "jit/nvptx.h"
#include "tests/unit/ptx_check.h"
#include "tests/unit/wqgemm_cuda_cases.h"

static const char* g_ptxas = "";
static tj_context_t* g_ctx;
static tj_context_t* g_mma_ctx;      // TJ_CUDA_WQGEMM=mma
static tj_context_t* g_tiled_ctx;    // TJ_CUDA_WQGEMM=tiles
static tj_context_t* g_fma_ctx;      // TJ_CUDA_WQGEMM=fma
static tj_context_t* g_cluster_ctx;  // TJ_CUDA_WQGEMM=cluster+pdl+ring

// ptxas -v on the kernel: assembles, and its registers and spills are
// printed (one 256-thread block an SM takes up to 255 registers; a spill
// would put the weight words or accumulators through local memory, so
// none is allowed).
static void assemble_and_report(const char* what, const char* text,
                                int max_regs) {
  if (!g_ptxas[0]) return;
  char path[] = "/tmp/tj_wq_ptx_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  FILE* f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) return;
  fputs(text, f);
  fclose(f);
  char cmd[1200];
  snprintf(cmd, sizeof(cmd), "'%s' -arch=sm_90a -v -o /dev/null '%s' 2>&1",
           g_ptxas, path);
  FILE* p = popen(cmd, "r");
  CHECK(p != NULL);
  int regs = -1, spill_st = -1, spill_ld = -1;
  char line[512];
  while (p && fgets(line, sizeof(line), p)) {
    const char* at = strstr(line, "Used ");
    if (at) sscanf(at, "Used %d registers", &regs);
    at = strstr(line, "bytes spill stores");
    if (at)
      sscanf(strstr(line, "frame, ") + 7, "%d bytes spill stores, %d",
             &spill_st, &spill_ld);
  }
  int rc = p ? pclose(p) : -1;
  remove(path);
  printf("# %s: %d registers, %d bytes spill stores, %d bytes spill loads\n",
         what, regs, spill_st, spill_ld);
  if (rc != 0) fprintf(stderr, "  %s: ptxas failed\n", what);
  CHECK_EQ_INT(0, rc);
  CHECK(regs > 0 && regs <= max_regs);
  CHECK_EQ_INT(0, spill_st);
  CHECK_EQ_INT(0, spill_ld);
}

// |fma|: the CUDA-core kernel (TJ_CUDA_WQGEMM=fma); else under
// TJ_CUDA_WQGEMM=mma (g_mma_ctx), the tensor-core one, or with |tiled|
// under TJ_CUDA_WQGEMM=tiles, the same on the tile layout.
static void check_case(const wq_case_t* c, tj_nvptx_arch_t arch, bool fma,
                       bool tiled) {
  wq_data_t d;
  wq_make(c, &d);
  tj_graph_t* g = wq_build(fma     ? g_fma_ctx
                           : tiled ? g_tiled_ctx
                                   : g_mma_ctx,
                           c, &d);
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
  // 0x4B000000 (2^23 as f32) or, for int4 under f32 A on tensor cores,
  // 0x43004300 (two bf16 128s); tiled int4: that for bf16 operands (f32
  // or bf16 A) or 0x64006400 (two f16 1024s) for f16 A.
  bool int4_pairs =
      !fma && c->bits == 4 &&
      (c->adt == TJ_DTYPE_F32 || (tiled && c->adt == TJ_DTYPE_BF16));
  bool magic =
      ptx.ptx && (strstr(ptx.ptx, "1258291200") != NULL ||
                  (int4_pairs && strstr(ptx.ptx, "1124090624") != NULL) ||
                  (tiled && c->bits == 4 && c->adt == TJ_DTYPE_F16 &&
                   strstr(ptx.ptx, "1677747200") != NULL));
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
  // The product on tensor cores (emit_nvptx_wqmma.c): whole steps of 8
  // mma.sync m16n8k16 (one 16 x 64 block of the weight), three a tile for
  // f32 A (its hi, mid and lo bf16 terms), and no more than the paths of a
  // chunk of 8 (int4) or 4 (int8) steps (two for f32 A: M <= 8 and the
  // rest) and a step (the clamped path). No f32 FMA loop over the weight:
  // only the f32 A's per-group scaling (32 FMAs a fold).
  if (!c->decomposed && ptx.ptx && !fma) {
    int mmas = 0, fmas = 0;
    for (const char* p = ptx.ptx; (p = strstr(p, "mma.sync.aligned.m16n8k16"));
         ++p)
      ++mmas;
    for (const char* p = ptx.ptx; (p = strstr(p, "fma.rn.f32")); ++p) ++fmas;
    int per_step = 8 * (c->adt == TJ_DTYPE_F32 ? 3 : 1);
    int steps = c->bits == 4 ? 8 : 4;
    int paths = c->adt == TJ_DTYPE_F32 ? 2 : 1;
    if (mmas < per_step || mmas % per_step ||
        mmas > per_step * (paths * steps + 1))
      fprintf(stderr, "  %s: %d mma.sync in the PTX\n", c->name, mmas);
    CHECK(mmas >= per_step && mmas % per_step == 0);
    CHECK(mmas <= per_step * (paths * steps + 1));
    if (fmas > 32 * (paths * steps + 2) + 128)
      fprintf(stderr, "  %s: %d FMAs in the PTX\n", c->name, fmas);
    CHECK(fmas <= 32 * (paths * steps + 2) + 128);
    // K split across blocks (grid y) joined by the last block to arrive.
    CHECK(strstr(ptx.ptx, "nctaid.y") != NULL);
    CHECK(strstr(ptx.ptx, "atom.global.add") != NULL);
    CHECK(strstr(ptx.ptx, "membar.gl") != NULL);
    // Tiled: the lane's unit of a step in one 16-byte load.
    bool v4 = strstr(ptx.ptx, "ld.global.v4.u32") != NULL ||
              strstr(ptx.ptx, "ld.global.v4.b32") != NULL ||
              strstr(ptx.ptx, "ld.global.nc.v4.u32") != NULL;
    if (tiled && !v4) fprintf(stderr, "  %s: no 16-byte load\n", c->name);
    if (tiled) CHECK(v4);
    // Tiled, f16/bf16 A: blocks of 128 threads, four an SM (so at most
    // 128 registers); f32 A and the [K, N] layout: 256.
    bool small = tiled && c->adt != TJ_DTYPE_F32;
    CHECK(strstr(ptx.ptx,
                 small ? ".maxntid 128, 1, 1" : ".maxntid 256, 1, 1") != NULL);
    if (small) CHECK(strstr(ptx.ptx, ".minnctapersm 4") != NULL);
  }
  // The CUDA-core kernel: each row tier's unrolled block holds at most 32
  // k-row x tile-row products (8 FMAs each) on the aligned path and one k
  // row on the byte path (emit_nvptx_wqgemm.c's rows_unrolled), so at most
  // 5 x 256 + 8 x 31 = 1528 FMAs; 2048 leaves room for an epilogue's
  // polynomial (gelu). No mma.
  if (!c->decomposed && ptx.ptx && fma) {
    int fmas = 0;
    for (const char* p = ptx.ptx; (p = strstr(p, "fma.rn.f32")); ++p) ++fmas;
    if (fmas > 2048 || fmas < 8 * 31)
      fprintf(stderr, "  %s (fma): %d FMAs in the PTX\n", c->name, fmas);
    CHECK(fmas <= 2048);
    CHECK(fmas >= 8 * 31);
    CHECK(strstr(ptx.ptx, "mma.sync") == NULL);
  }
  if (ptx.ptx && arch == TJ_NVPTX_SM_90A && !c->decomposed && !fma)
    assemble_and_report(c->name, ptx.ptx,
                        tiled && c->adt != TJ_DTYPE_F32 ? 128 : 255);
  else if (ptx.ptx && arch == TJ_NVPTX_SM_90A)
    tj_test_assemble_ptx(g_ptxas, c->name, ptx.ptx);
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
  wq_free(&d);
}

// Whether case |i| is compiled for |arch| by the test of the tensor-core
// kernel (|tiled| false) or of its tile layout: both archs, but in the
// sanitizer leg (tj_test_sanitizer_subset) one, alternating down the cases
// and the other one in the other test. Both archs take the same emitter
// path (our C code, which the sanitizers watch) with LLVM's work apart:
// every case is still compiled for each kernel, each kernel for both archs
// and each case for both; the plain leg compiles every pair.
static bool on_arch(int i, tj_nvptx_arch_t arch, bool tiled) {
  if (!tj_test_sanitizer_subset()) return true;
  return ((i + (int)tiled) % 2 == 0) == (arch == TJ_NVPTX_SM_90A);
}

TEST(every_case_on_sm_90a_and_sm_80) {
  for (int i = 0; i < kWqNumCases; ++i) {
    if (on_arch(i, TJ_NVPTX_SM_90A, false))
      check_case(&kWqCases[i], TJ_NVPTX_SM_90A, false, false);
    if (on_arch(i, TJ_NVPTX_SM_80, false))
      check_case(&kWqCases[i], TJ_NVPTX_SM_80, false, false);
  }
}

TEST(every_case_on_the_tile_layout) {
  for (int i = 0; i < kWqNumCases; ++i) {
    if (on_arch(i, TJ_NVPTX_SM_90A, true))
      check_case(&kWqCases[i], TJ_NVPTX_SM_90A, false, true);
    if (on_arch(i, TJ_NVPTX_SM_80, true))
      check_case(&kWqCases[i], TJ_NVPTX_SM_80, false, true);
  }
}

// tj_nvptx_wq_tile against the layout's statement (jit/nvptx.h), unit by
// unit: every lane's 16 bytes hold exactly its B fragments' elements, the
// padding zero bits, and tj_nvptx_wq_tiled_at reads each element back.
static void check_tile_layout(int bits, int64_t K, int64_t N) {
  int64_t row = bits == 4 ? (N + 1) / 2 : N;
  uint8_t* src = malloc((size_t)(K * row));
  for (int64_t i = 0; i < K * row; ++i) src[i] = (uint8_t)(wq_rnd() & 255);
  // An odd N's last byte holds one column: its high nibble is not a value.
  if (bits == 4 && (N & 1))
    for (int64_t k = 0; k < K; ++k) src[k * row + row - 1] &= 15;
  int64_t bytes = tj_nvptx_wq_tiled_bytes(bits, K, N);
  int64_t kp = (K + 127) / 128 * 128, np = (N + 63) / 64 * 64;
  CHECK_EQ_INT(kp * np * bits / 8, bytes);
  uint8_t* dst = malloc((size_t)bytes);
  memset(dst, 0xEE, (size_t)bytes);
  tj_nvptx_wq_tile(bits, K, N, src, dst);
  int bad = 0;
  int64_t block = bits == 4 ? 512 : 1024;
  for (int64_t nt = 0; nt < np / 64; ++nt) {
    for (int64_t ks = 0; ks < kp / 16; ++ks) {
      const uint8_t* blk = dst + (nt * (kp / 16) + ks) * block;
      for (int lane = 0; lane < 32; ++lane) {
        int g = lane / 4, t = lane % 4;
        for (int h = 0; h < (bits == 4 ? 1 : 2); ++h) {
          const uint8_t* unit = blk + 512 * h + 16 * lane;
          for (int w = 0; w < 4; ++w) {
            uint32_t word = (uint32_t)unit[4 * w] |
                            (uint32_t)unit[4 * w + 1] << 8 |
                            (uint32_t)unit[4 * w + 2] << 16 |
                            (uint32_t)unit[4 * w + 3] << 24;
            for (int i = 0; i < (bits == 4 ? 8 : 4); ++i) {
              int r = bits == 4 ? 2 * ((i & 3) & 1) + (i >> 2) : i;
              int j = bits == 4 ? 2 * w + ((i & 3) >> 1) : 4 * h + w;
              int64_t k = 16 * ks + 4 * t + r, n = 64 * nt + 8 * g + j;
              uint32_t got =
                  bits == 4 ? (word >> (4 * i)) & 15 : (word >> (8 * i)) & 255;
              uint32_t want = 0;
              if (k < K && n < N)
                want = bits == 4 ? (src[k * row + n / 2] >> (4 * (n & 1))) & 15
                                 : src[k * row + n];
              if (got != want && bad++ < 5)
                fprintf(stderr,
                        "  tile %d-bit %lldx%lld: (%lld, %lld) %u, want %u\n",
                        bits, (long long)K, (long long)N, (long long)k,
                        (long long)n, got, want);
              if (k < K && n < N &&
                  tj_nvptx_wq_tiled_at(bits, K, N, dst, k, n) != want &&
                  bad++ < 5)
                fprintf(stderr, "  tiled_at (%lld, %lld)\n", (long long)k,
                        (long long)n);
            }
          }
        }
      }
    }
  }
  CHECK_EQ_INT(0, bad);
  free(src);
  free(dst);
}

TEST(the_tile_layout_holds_each_lanes_fragments) {
  check_tile_layout(4, 250, 77);
  check_tile_layout(4, 4100, 130);
  check_tile_layout(4, 128, 64);
  check_tile_layout(8, 333, 101);
  check_tile_layout(8, 129, 40);
  check_tile_layout(8, 64, 64);
}

// Whether |c|'s graph at M |m| (0: symbolic) compiles, by default, to
// tensor cores (|*mma|) on the tile layout (|*tiled|: 16-byte weight
// loads, which the [K, N] layout's kernels never make).
static void default_kernel(const wq_case_t* c, int64_t m, bool* mma,
                           bool* tiled) {
  wq_data_t d;
  wq_make(c, &d);
  tj_graph_t* g = m ? wq_build_m(g_ctx, c, &d, m) : wq_build(g_ctx, c, &d);
  CHECK(g != NULL);
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  tj_allocator_t al = tj_allocator_system();
  if (g) CHECK_OK(tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx));
  CHECK(ptx.ptx != NULL);
  *mma = ptx.ptx && strstr(ptx.ptx, "mma.sync") != NULL;
  *tiled = ptx.ptx && (strstr(ptx.ptx, "ld.global.v4.u32") != NULL ||
                       strstr(ptx.ptx, "ld.global.v4.b32") != NULL);
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  if (g) tj_graph_destroy(g);
  wq_free(&d);
}

// By default f16/bf16 A runs on tensor cores on the tile layout at every
// M, symbolic too; f32 A there where M is a constant of 4 (int4) or 8
// (int8) or more, else (a symbolic M, decode) on CUDA cores.
TEST(the_default_kernel_by_dtype_and_m) {
  const wq_case_t* f32 = &kWqCases[0];   // int4_g32_zp_odd
  const wq_case_t* bf16 = &kWqCases[8];  // int4_g128_bf16
  const wq_case_t* i8 = &kWqCases[4];    // int8_channel
  CHECK(f32->adt == TJ_DTYPE_F32 && bf16->adt == TJ_DTYPE_BF16);
  CHECK(i8->adt == TJ_DTYPE_F32 && i8->bits == 8);
  bool mma, tiled;
  const int64_t ms[] = {8, 4, 2, 0};
  for (int i = 0; i < 4; ++i) {
    default_kernel(f32, ms[i], &mma, &tiled);
    CHECK_EQ_INT(ms[i] >= 4, mma);
    CHECK_EQ_INT(ms[i] >= 4, tiled);
    default_kernel(bf16, ms[i], &mma, &tiled);
    CHECK(mma && tiled);
    default_kernel(i8, ms[i], &mma, &tiled);
    CHECK_EQ_INT(ms[i] >= 8, mma);
    CHECK_EQ_INT(ms[i] >= 8, tiled);
  }
}

// TJ_CUDA_WQGEMM=cluster+pdl+ring, f16/bf16 A (the tile layout's kernel
// at every M): the weight's chunks by 16-byte cp.async into each warp's
// ring of shared memory; on sm_90a the K splits of a tile are the blocks
// of a cluster,
// joined through distributed shared memory between cluster barriers, with
// no global workspace, fence or atomic (and within 128 registers, no
// spills), and the kernel lets the next one start early and waits for the
// one before (griddepcontrol); sm_80, which has neither, keeps the
// workspace join.
static void check_cluster_case(const wq_case_t* c, tj_nvptx_arch_t arch) {
  wq_data_t d;
  wq_make(c, &d);
  tj_graph_t* g = wq_build(g_cluster_ctx, c, &d);
  CHECK(g != NULL);
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  tj_allocator_t al = tj_allocator_system();
  if (g) CHECK_OK(tj_cuda_compile_ptx(g, NULL, arch, al, &ptx));
  const char* t = ptx.ptx ? ptx.ptx : "";
  CHECK_EQ_INT(1, ptx.num_kernels);
  CHECK(strstr(t, "mma.sync") != NULL);
  bool sm90 = arch == TJ_NVPTX_SM_90A;
  bool dsmem = strstr(t, "mapa.shared::cluster") != NULL &&
               strstr(t, "ld.shared::cluster.f32") != NULL &&
               strstr(t, "barrier.cluster.arrive") != NULL &&
               strstr(t, "%cluster_nctarank") != NULL;
  bool workspace = strstr(t, "atom.global.add") != NULL &&
                   strstr(t, "membar.gl") != NULL &&
                   strstr(t, "nctaid.y") != NULL;
  if (dsmem != sm90 || workspace == sm90)
    fprintf(stderr, "  %s (cluster, %s): dsmem %d, workspace %d\n", c->name,
            tj_nvptx_arch_name(arch), (int)dsmem, (int)workspace);
  CHECK_EQ_INT(sm90, dsmem);
  CHECK_EQ_INT(!sm90, workspace);
  CHECK_EQ_INT(sm90, strstr(t, "griddepcontrol.wait") != NULL &&
                         strstr(t, "griddepcontrol.launch_dependents") != NULL);
  // The ring feeds the vector path, which needs x's rows aligned to 4
  // elements (else it folds away: K 161).
  if (c->K % 4 == 0) {
    CHECK(strstr(t, "cp.async.cg.shared.global") != NULL);
    CHECK(strstr(t, "cp.async.wait_group") != NULL);
  }
  if (sm90 && ptx.ptx) {
    char what[96];
    snprintf(what, sizeof(what), "%s (cluster)", c->name);
    assemble_and_report(what, ptx.ptx, 128);
  }
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  if (g) tj_graph_destroy(g);
  wq_free(&d);
}

TEST(the_cluster_join_on_sm_90a) {
  for (int i = 0; i < kWqNumCases; ++i) {
    const wq_case_t* c = &kWqCases[i];
    if (c->decomposed || c->adt == TJ_DTYPE_F32) continue;
    check_cluster_case(c, TJ_NVPTX_SM_90A);
    check_cluster_case(c, TJ_NVPTX_SM_80);
  }
}

TEST(every_case_on_the_cuda_core_kernel) {
  for (int i = 0; i < kWqNumCases; ++i)
    check_case(&kWqCases[i], TJ_NVPTX_SM_90A, true, false);
}

int main(int argc, char** argv) {
  if (argc > 1) g_ptxas = argv[1];
  if (tj_test_context_create(&g_ctx) != NULL) return 1;
  // The context reads its settings once, when it is created.
  setenv("TJ_CUDA_WQGEMM", "mma", 1);
  tj_status_t st = tj_test_context_create(&g_mma_ctx);
  setenv("TJ_CUDA_WQGEMM", "tiles", 1);
  if (!st) st = tj_test_context_create(&g_tiled_ctx);
  setenv("TJ_CUDA_WQGEMM", "fma", 1);
  if (!st) st = tj_test_context_create(&g_fma_ctx);
  setenv("TJ_CUDA_WQGEMM", "cluster+pdl+ring", 1);
  if (!st) st = tj_test_context_create(&g_cluster_ctx);
  unsetenv("TJ_CUDA_WQGEMM");
  if (st != NULL) return 1;
  RUN_TEST(the_tile_layout_holds_each_lanes_fragments);
  RUN_TEST(every_case_on_sm_90a_and_sm_80);
  RUN_TEST(every_case_on_the_tile_layout);
  RUN_TEST(every_case_on_the_cuda_core_kernel);
  RUN_TEST(the_default_kernel_by_dtype_and_m);
  RUN_TEST(the_cluster_join_on_sm_90a);
  tj_context_destroy(g_cluster_ctx);
  tj_context_destroy(g_fma_ctx);
  tj_context_destroy(g_tiled_ctx);
  tj_context_destroy(g_mma_ctx);
  tj_context_destroy(g_ctx);
  printf("# PTX assembled by ptxas: %s\n", g_ptxas[0] ? g_ptxas : "skipped");
  TEST_MAIN_END();
}
