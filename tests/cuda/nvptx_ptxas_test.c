// Every NVPTX kernel template, for every supported arch, through LLVM and
// then NVIDIA's ptxas (the assembler the driver runs): PTX that ptxas
// rejects would only fail on a user's GPU. Also checks that the expected
// instructions appear (128-bit accesses, shuffles, mma.sync, ldmatrix,
// cp.async) and reports registers and spills per kernel.
//
// Usage: nvptx_ptxas_test PTXAS. Exits 77 (skipped) when PTXAS is empty or
// missing. Set TJ_DUMP_PTX=dir to keep the PTX files.

#include <time.h>
#include <unistd.h>

#include "backends/cuda/cuda_entry.h"
#include "jit/emit_nvptx.h"
#include "tests/cuda/nvptx_samples.h"
#include "tests/unit/test.h"

static const char* g_ptxas;
static char g_dir[256];

// The instructions sample |s| must contain.
static const char* const kExpected[SAMPLE_COUNT_][4] = {
    [SAMPLE_GELU_BIAS] = {"ld.global.v4.f32", "st.global.v4.f32"},
    [SAMPLE_BF16_MAP] = {"ld.global.v4.b32", "st.global.v4.b32"},
    [SAMPLE_TRANSPOSED] = {"ld.global.f32"},
    [SAMPLE_SOFTMAX] = {"shfl.sync.bfly.b32", "bar.sync", "ld.global.v4.f32"},
    [SAMPLE_LAYERNORM_BF16] = {"shfl.sync.bfly.b32", "sqrt.rn.f32"},
    [SAMPLE_ARGMAX] = {"shfl.sync.bfly.b32"},
    [SAMPLE_GEMM_F32] = {"cp.async.ca.shared.global", "fma.rn.f32"},
    [SAMPLE_GEMM_BF16] = {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                          "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                          "cp.async.cg.shared.global", "st.global.v4.b32"},
    [SAMPLE_GEMM_F16_BATCHED] =
        {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
         "ldmatrix.sync.aligned.m8n8.x4.shared.b16"},
    [SAMPLE_GEMM_BF16_BMM] =
        {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
         "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
         "cp.async.cg.shared.global"},
};

// The GEMM samples on the wgmma path (sm_90a), instead of the above.
static const char* const kExpectedWgmma[SAMPLE_COUNT_][4] = {
    [SAMPLE_GEMM_BF16] = {"wgmma.mma_async.sync.aligned.m64n", ".f32.bf16.bf16",
                          "fence.proxy.async.shared::cta",
                          "wgmma.wait_group.sync.aligned"},
    [SAMPLE_GEMM_F16_BATCHED] = {"wgmma.mma_async.sync.aligned.m64n",
                                 ".f32.f16.f16", "cp.async.cg.shared.global",
                                 "wgmma.commit_group.sync.aligned"},
    [SAMPLE_GEMM_BF16_BMM] = {"wgmma.mma_async.sync.aligned.m64n",
                              ".f32.bf16.bf16", "cp.async.cg.shared.global",
                              "wgmma.commit_group.sync.aligned"},
};

// ptxas's "performance loss" notes for wgmma code (serialized wgmmas, a
// function call or too few registers in the pipeline, an ignored
// setmaxnreg): informational in ptxas, failures here.
static const char* const kWgmmaWarnings[] = {"C7508", "C7510", "C7511",
                                             "C7515"};

// Bytes of spill stores ptxas's last -v report gave (summed over its
// functions).
static long g_spill_stores;

// Runs ptxas on |ptx|; returns its exit status (1 when the log has a
// kWgmmaWarnings note) and prints its -v report.
static int run_ptxas(const char* arch, const char* name, const char* ptx) {
  g_spill_stores = 0;
  char path[512], cmd[1200], log[512];
  snprintf(path, sizeof(path), "%s/%s.%s.ptx", g_dir, name, arch);
  snprintf(log, sizeof(log), "%s/%s.%s.log", g_dir, name, arch);
  FILE* f = fopen(path, "w");
  if (!f) return -1;
  fputs(ptx, f);
  fclose(f);
  snprintf(cmd, sizeof(cmd),
           "'%s' -arch=%s -v --warning-as-error -o /dev/null '%s' > '%s' 2>&1",
           g_ptxas, arch, path, log);
  int rc = system(cmd);
  f = fopen(log, "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof(line), f)) {
      if (strstr(line, "registers") || strstr(line, "spill") ||
          strstr(line, "rror") || strstr(line, "arning"))
        printf("#   %s", line);
      const char* sp = strstr(line, "bytes spill stores");
      if (sp) {
        // "..., N bytes spill stores, ...": the number before the phrase.
        const char* q = sp;
        while (q > line && q[-1] == ' ') --q;
        while (q > line && q[-1] >= '0' && q[-1] <= '9') --q;
        g_spill_stores += strtol(q, NULL, 10);
      }
      for (size_t i = 0; i < TJ_ARRAY_SIZE(kWgmmaWarnings); ++i) {
        if (strstr(line, kWgmmaWarnings[i])) {
          printf("#   %s", line);
          if (rc == 0) rc = 1;
        }
      }
    }
    fclose(f);
  }
  return rc;
}

// One wgmma schedule's options: the tile and the ring depth; a table's row
// adds its flags after it ({WGMMA(128, 256, 4), .gemm_persistent = true}).
#define WGMMA(m, n, stages)                                                   \
  .gemm_kernel = TJ_NVPTX_GEMM_WGMMA, .gemm_tile_m = (m), .gemm_tile_n = (n), \
  .gemm_stages = (stages)
// The same with the tiles filled by TMA (the warp-specialized schedule).
#define TMA(m, n, stages) WGMMA(m, n, stages), .gemm_tma = true

// The TMA schedules the autotuner may pick, and the ring depth bounds.
static const tj_nvptx_options_t kTma[] = {
    {TMA(128, 128, 5)},
    {TMA(128, 128, 5), .gemm_persistent = true},
    {TMA(128, 256, 4), .gemm_persistent = true, .approx_math = true},
    {TMA(128, 64, 8)},
    // The tuner's candidate 11.
    {TMA(128, 64, 8), .gemm_persistent = true, .approx_math = true},
    {TMA(128, 256, 3)},
    // Pingpong: 64-row tiles, one consumer warpgroup each.
    {TMA(64, 256, 4), .gemm_persistent = true},
    {TMA(64, 128, 6), .gemm_persistent = true, .approx_math = true},
    // Two 64-row blocks a consumer warpgroup (issue 13, hopper7): pingpong
    // on 128-row tiles (the tuner's candidate 15) and cooperative on
    // 256-row ones (16), with the other tile_n and a deeper ring.
    {TMA(128, 128, 4), .gemm_pingpong = true, .gemm_persistent = true},
    {TMA(128, 64, 6), .gemm_pingpong = true, .gemm_persistent = true,
     .approx_math = true},
    {TMA(128, 128, 5), .gemm_pingpong = true, .gemm_persistent = true},
    {TMA(256, 128, 3), .gemm_persistent = true},
    {TMA(256, 64, 4), .approx_math = true},
    {TMA(256, 128, 4), .gemm_persistent = true},
};

// The TMA store epilogue (gemm_tma_store, issue 13, hopper8) on the
// pingpong and cooperative schedules, and whether the bf16 sample's
// kernel takes it: not where the output tile does not fit beside the ring
// (128x256 s4: 192 KiB of ring and 64 KiB of tile), which keeps today's
// epilogue; nor the batched samples (rank 3), whose PTX checks are the
// same as without the option.
static const struct {
  tj_nvptx_options_t o;
  bool stores;
} kTmaStore[] = {
    {{TMA(128, 128, 4), .gemm_pingpong = true, .gemm_persistent = true,
      .gemm_tma_store = true},
     true},
    {{TMA(128, 64, 6), .gemm_pingpong = true, .gemm_persistent = true,
      .gemm_tma_store = true, .approx_math = true},
     true},
    // The pairs' epilogues in order, not in lockstep (issue 13, cap2048).
    {{TMA(128, 128, 4), .gemm_pingpong = true, .gemm_persistent = true,
      .gemm_tma_store = true, .gemm_epilogue_in_order = true,
      .approx_math = true},
     true},
    {{TMA(128, 128, 5), .gemm_persistent = true, .gemm_tma_store = true}, true},
    {{TMA(64, 256, 4), .gemm_persistent = true, .gemm_tma_store = true}, true},
    {{TMA(256, 128, 3), .gemm_persistent = true, .gemm_tma_store = true}, true},
    {{TMA(128, 256, 4), .gemm_persistent = true, .gemm_tma_store = true},
     false},
};

// 2-block clusters with B multicast (gemm_cluster, issue 13, hopper8), on
// the bf16 sample (rank 2; batched GEMMs are refused: bad_options), with
// and without the TMA store.
static const tj_nvptx_options_t kTmaCluster[] = {
    {TMA(128, 256, 4), .gemm_persistent = true, .gemm_cluster = true},
    {TMA(128, 128, 4), .gemm_pingpong = true, .gemm_persistent = true,
     .gemm_cluster = true, .gemm_tma_store = true},
    {TMA(256, 128, 3), .gemm_persistent = true, .gemm_cluster = true,
     .gemm_tma_store = true, .approx_math = true},
    {TMA(128, 128, 5), .gemm_cluster = true, .approx_math = true},
};

// The TMA schedules of an f32 GEMM on TF32 tensor cores (allow_tf32): the
// tuner's candidates 7 to 10, and pingpong 64x128.
static const tj_nvptx_options_t kTf32[] = {
    {TMA(128, 128, 4), .gemm_tf32 = true, .gemm_persistent = true},
    {TMA(128, 256, 4), .gemm_tf32 = true, .gemm_persistent = true,
     .approx_math = true},
    {TMA(64, 256, 4), .gemm_tf32 = true, .gemm_persistent = true},
    {TMA(128, 256, 3), .gemm_tf32 = true},
    {TMA(64, 128, 6), .gemm_tf32 = true, .gemm_persistent = true},
};

// What the TMA schedule's PTX must contain (besides its loads: 2-D boxes
// of an operand without a batch, 3-D ones of a batched operand).
static const char* const kExpectedTma[] = {
    "mbarrier.arrive.expect_tx.shared::cta.b64",
    "mbarrier.try_wait.parity.shared::cta.b64",
    "setmaxnreg.inc.sync.aligned.u32 232",
    "setmaxnreg.dec.sync.aligned.u32 40",
    ".param .align 64 .b8",  // the tensor maps, by value
    "cvta.param.u64",        // ... read in place, not copied to .local
    "wgmma.mma_async.sync.aligned.m64n",
};

// Occurrences of |needle| in |text|.
static int count_of(const char* text, const char* needle) {
  int n = 0;
  for (const char* p = text; (p = strstr(p, needle)) != NULL; ++p) ++n;
  return n;
}

// Whether check_sample expects the TMA store in the PTX (-1: no check).
static int g_expect_store = 0;

static void check_sample(tj_nvptx_target_t* target, sample_t s,
                         const tj_nvptx_options_t* options) {
  tj_nvptx_arch_t arch = tj_nvptx_target_arch(target);
  const char* arch_name = tj_nvptx_arch_name(arch);
  tj_kir_t* k = NULL;
  CHECK_OK(sample_build(tj_allocator_system(), s, &k));
  if (!k) return;
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef module = tj_nvptx_module_create(target, ctx, kSampleNames[s]);
  tj_nvptx_kernel_t info;
  tj_status_t status = tj_nvptx_emit_kernel(module, arch, k, options, &info);
  CHECK_OK(tj_status_clone(status));
  char* ptx = NULL;
  if (!status) {
    CHECK_OK(tj_nvptx_compile(target, module, tj_allocator_system(), &ptx));
  } else {
    tj_status_free(status);
    LLVMDisposeModule(module);
  }
  if (ptx) {
    CHECK_CONTAINS(ptx, ".entry tj_kernel_");
    const char* const* expected = info.wgmma ? kExpectedWgmma[s] : kExpected[s];
    // (TMA-filled operands need no fence.proxy.async: kExpectedTma.)
    for (int i = 0; i < 4 && expected[i] && !info.tma; ++i)
      CHECK_CONTAINS(ptx, expected[i]);
    if (info.tma) {
      for (size_t i = 0; i < TJ_ARRAY_SIZE(kExpectedTma); ++i)
        CHECK_CONTAINS(ptx, kExpectedTma[i]);
      // A, then B: the batched sample's x has a batch and its w none
      // (2-D boxes), the bmm sample's q and k both have one.
      static const char kLoad2d[] =
          "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
          "complete_tx::bytes";
      static const char kLoad3d[] =
          "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::"
          "complete_tx::bytes";
      bool a3 = s == SAMPLE_GEMM_F16_BATCHED || s == SAMPLE_GEMM_BF16_BMM;
      bool b3 = s == SAMPLE_GEMM_BF16_BMM;
      CHECK_EQ_INT(a3 || b3, strstr(ptx, kLoad3d) != NULL);
      CHECK_EQ_INT(!a3 || !b3, strstr(ptx, kLoad2d) != NULL);
      CHECK(strstr(ptx, "cp.async.cg") == NULL);
      CHECK(strstr(ptx, ".local") == NULL);
      CHECK_EQ_INT(384, info.threads);
      if (s == SAMPLE_GEMM_F32) {
        // wgmma .tf32 with A from registers (ld.shared fragments), k8.
        CHECK_CONTAINS(ptx, "k8.f32.tf32.tf32");
        CHECK_CONTAINS(ptx, "ld.shared.u32");
        CHECK_EQ_INT(32, info.tile_k);
      }
    }
    // The TMA store: a 2-D box a 128-byte panel of the tile, committed as
    // a bulk group and waited for before the buffer is reused; the staged
    // epilogue stays for outputs TMA cannot address.
    static const char kStore[] =
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group";
    bool stores = strstr(ptx, kStore) != NULL;
    CHECK_EQ_INT(stores, strstr(ptx, "cp.async.bulk.commit_group") != NULL);
    CHECK_EQ_INT(stores,
                 strstr(ptx, "cp.async.bulk.wait_group.read 0") != NULL);
    if (g_expect_store >= 0) CHECK_EQ_INT(g_expect_store, stores);
    // Clusters: B panels multicast into both blocks, stages released in
    // both (a remote arrive), the blocks synced at start and end.
    bool cluster = options && options->gemm_cluster;
    CHECK_EQ_INT(cluster, info.cluster == 2);
    CHECK_EQ_INT(cluster, strstr(ptx, ".multicast::cluster") != NULL);
    CHECK_EQ_INT(cluster, strstr(ptx, "mapa.shared::cluster.u32") != NULL);
    CHECK_EQ_INT(cluster ? 2 : 0, count_of(ptx, "barrier.cluster.arrive"));
    // The bf16 output is rounded by the hardware (cvt.rn.bf16.f32, sm_80
    // and later), not by integer arithmetic: seven instructions a value
    // that were most of the TMA GEMMs' epilogue (ncu, issue 13, hopper5).
    if (s == SAMPLE_GEMM_BF16) CHECK_CONTAINS(ptx, "cvt.rn.bf16.f32");
    // The wgmma kernels' staged C is still read 16 bytes at a time with its
    // chunks swizzled (tj_nvptx_wgmma_c_col; wgmma_c_layout_test counts the
    // banks).
    if (info.wgmma) CHECK_CONTAINS(ptx, "ld.shared.v4.f32");
    char name[96];
    if (!options) {
      snprintf(name, sizeof(name), "%s", kSampleNames[s]);
    } else if (info.tma) {
      snprintf(name, sizeof(name), "%s_tma%s%s%dx%ds%d%s%s%s%s%s",
               kSampleNames[s], options->gemm_tf32 ? "_tf32_" : "",
               options->gemm_pingpong ? "_pingpong_" : "", (int)info.tile_m,
               (int)info.tile_n, (int)info.stages,
               options->gemm_persistent ? "_persistent" : "",
               options->approx_math ? "_approx" : "",
               options->gemm_tma_store ? "_store" : "",
               options->gemm_cluster ? "_cluster" : "",
               options->gemm_epilogue_in_order ? "_in_order" : "");
    } else if (info.wgmma) {
      snprintf(name, sizeof(name), "%s_wgmma%dx%ds%d%s%s", kSampleNames[s],
               (int)info.tile_m, (int)info.tile_n, (int)info.stages,
               options->gemm_wgmma_drain  ? "_drain"
               : options->gemm_persistent ? "_persistent"
                                          : "",
               options->approx_math ? "_approx" : "");
    } else {
      snprintf(name, sizeof(name), "%s%s_bk%d_s%d%s%s", kSampleNames[s],
               info.tile_m == 256 ? "_256x128" : "", (int)info.tile_k,
               (int)info.stages, options->approx_math ? "_approx" : "",
               options->gemm_f32_scalar_copies  ? "_4byte"
               : options->gemm_f32_a_transposed ? "_at"
                                                : "");
    }
    printf("# %s %s: %zu bytes of PTX\n", name, arch_name, strlen(ptx));
    CHECK_EQ_INT(0, run_ptxas(arch_name, name, ptx));
    // The cooperative TMA kernels keep their accumulators in registers
    // (a spill there cost the 128x256 ones ~1.3x on the H200), the 256-row
    // ones with two row blocks a warpgroup included. Pingpong 64x256 and
    // 128x128 (128 accumulators a thread either way) spill 24 bytes today,
    // 128x128 s5 40 (not yet fixed); with the TMA store's pairs in
    // lockstep (cap2048) 128x128 s4 spills 68 on this sample's epilogue
    // and none on the capstone's (nvptx_ptxas_test's capstone_gelu_erf).
    if (info.tma && info.tile_m >= 128 && !options->gemm_pingpong)
      CHECK_EQ_INT(0, (int)g_spill_stores);
    // The f32 256x128 CUDA-core tile (issue 13, sgemm): each k-tile is
    // unrolled, 128 fmas a k in each of its two copy paths (16-byte and
    // 4-byte; one where the operands are not contiguous), fed by 16-byte
    // shared loads; at k-tiles of 8 and 4 stages its 128 accumulators a
    // thread and fragments stay in registers (242-255). bk 16 spills 12-36
    // bytes row-major, 24-80 transposed (the tuner's candidate 18, bk16 s3
    // transposed, 40 on the H200 and still the fastest form there), bk 8
    // s3 16 on sm_80 (none on sm_90a): not yet fixed.
    if (s == SAMPLE_GEMM_F32 && !info.tensor_cores && info.tile_m == 256) {
      if (info.tile_k == 8 && info.stages == 4) {
        CHECK_EQ_INT(0, (int)g_spill_stores);
        CHECK(strstr(ptx, ".local") == NULL);
      }
      CHECK_EQ_INT(1, info.min_blocks_per_sm);
      int paths = options->gemm_f32_scalar_copies ? 1 : 2;
      CHECK_EQ_INT(paths * 128 * info.tile_k, count_of(ptx, "fma.rn.f32"));
      CHECK_CONTAINS(ptx, "ld.shared.v4.f32");
      CHECK_EQ_INT(paths == 2,
                   strstr(ptx, "cp.async.cg.shared.global") != NULL);
    }
    // The consumers' k-tile: 4 k16 steps of one wgmma, or of one a row
    // block where a warpgroup has two (pingpong 128-row tiles,
    // cooperative 256-row ones).
    if (info.tma && s != SAMPLE_GEMM_F32) {
      bool two = options->gemm_pingpong || info.tile_m == 256;
      CHECK_EQ_INT(two ? 8 : 4, count_of(ptx, "wgmma.mma_async"));
    }
    tj_free_string(tj_allocator_system(), ptx);
  }
  LLVMContextDispose(ctx);
  tj_kir_destroy(k);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

// Instructions of |ptx|: lines ending in ';' that are not directives.
static int count_instructions(const char* ptx) {
  int n = 0;
  for (const char* line = ptx; line && *line;) {
    const char* end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    const char* p = line;
    while (p < line + len && (*p == ' ' || *p == '\t')) ++p;
    if (p < line + len && *p != '.' && *p != '/' && len > 0 &&
        line[len - 1] == ';')
      ++n;
    line = end ? end + 1 : NULL;
  }
  return n;
}

// IEEE f32 division or reciprocal: ptxas expands each into a Newton step
// and a subroutine call for the edge cases.
static bool has_float_division(const char* ptx) {
  return strstr(ptx, "div.rn.f32") || strstr(ptx, "div.full.f32") ||
         strstr(ptx, "rcp.rn.f32");
}

// gelu (erf) is x * erfc(-x / sqrt 2) * 0.5 (lib/passes/decompose.c). With
// the GPU's approximate math (the default) erfc is jit/nvptx_math.c's: no
// IEEE division and no call. On its own, f32 y = erfc(x): one ex2.approx
// and two rcp.approx an element (38 PTX instructions from the load to the
// store, where the precise path's took 75).
TEST(erfc_approx_instructions) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "erfc", &g));
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){1}, "x");
  tj_graph_output(g, tj_graph_erfc(g, x), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_allocator_t al = tj_allocator_system();
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  CHECK_OK(tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx));
  if (ptx.ptx) {
    printf("# erfc f32, one element: %d PTX instructions\n",
           count_instructions(ptx.ptx));
    CHECK_EQ_INT(1, count_of(ptx.ptx, "ex2.approx"));
    CHECK_EQ_INT(2, count_of(ptx.ptx, "rcp.approx"));
    CHECK(!has_float_division(ptx.ptx));
    CHECK_EQ_INT(0, run_ptxas("sm_90a", "erfc_f32", ptx.ptx));
  }
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// gelu (erf) on the GPU's approximate math: of f16 and bf16 values (whose
// result is rounded to 16 bits) nvptx_math.c's 16-bit form, one rcp.approx
// and one ex2.approx an element; of f32 values erfc's form, two rcp.approx
// an ex2.approx (the 16-bit form's 1.5e-5 would be ~250 f32 ulp).
TEST(gelu_forms) {
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_F32, TJ_DTYPE_F16,
                                      TJ_DTYPE_BF16};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kTypes); ++i) {
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_test_context_create(&ctx));
    tj_graph_t* g = NULL;
    CHECK_OK(tj_graph_create(ctx, "gelu", &g));
    tj_value_t x = tj_graph_input(g, kTypes[i], 1, (int64_t[]){1}, "x");
    tj_graph_output(g, tj_graph_gelu(g, x, false), "y");
    CHECK_OK(tj_graph_finalize(g));
    tj_allocator_t al = tj_allocator_system();
    tj_cuda_offline_ptx_t ptx;
    memset(&ptx, 0, sizeof(ptx));
    CHECK_OK(tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx));
    if (ptx.ptx) {
      bool f32 = kTypes[i] == TJ_DTYPE_F32;
      printf("# gelu %s, one element: %d PTX instructions\n",
             tj_dtype_name(kTypes[i]), count_instructions(ptx.ptx));
      CHECK_EQ_INT(1, count_of(ptx.ptx, "ex2.approx"));
      CHECK_EQ_INT(f32 ? 2 : 1, count_of(ptx.ptx, "rcp.approx"));
      CHECK(!has_float_division(ptx.ptx));
      char name[32];
      snprintf(name, sizeof(name), "gelu_%s", tj_dtype_name(kTypes[i]));
      CHECK_EQ_INT(0, run_ptxas("sm_90a", name, ptx.ptx));
    }
    tj_cuda_offline_ptx_deinitialize(al, &ptx);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
  }
}

// The capstone y = gelu(x @ w + b) (bf16, exact gelu, symbolic B): the
// program's kernel and every GEMM candidate's (the TMA schedules among
// them) with no division or call in the epilogue, assembled by ptxas with
// no wgmma performance warning (a call near the wgmma pipeline serializes
// it, C7510). The gelu is nvptx_math.c's 16-bit form (its value is rounded
// to bf16): one rcp.approx a ex2.approx, where erfc's took two, and the
// bf16 results packed two a cvt.rn.bf16x2.f32. Prints ptxas's time per
// module: the autotuner's cold start pays it once per candidate.
TEST(capstone_gelu_erf) {
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "capstone", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){B, 1024}, "x");
  tj_value_t w =
      tj_graph_input(g, TJ_DTYPE_BF16, 2, (int64_t[]){1024, 4096}, "w");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_BF16, 1, (int64_t[]){4096}, "b");
  tj_graph_output(
      g, tj_graph_gelu(g, tj_graph_add(g, tj_graph_matmul(g, x, w), b), false),
      "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_allocator_t al = tj_allocator_system();
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  CHECK_OK(tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx));
  CHECK_EQ_INT(1, ptx.num_kernels);
  CHECK(ptx.variants_ptx != NULL);
  const char* modules[2] = {ptx.ptx, ptx.variants_ptx};
  const char* names[2] = {"capstone", "capstone_candidates"};
  for (int i = 0; i < 2; ++i) {
    if (!modules[i]) continue;
    CHECK(!has_float_division(modules[i]));
    CHECK(strstr(modules[i], "call") == NULL);
    int ex2 = count_of(modules[i], "ex2.approx");
    CHECK(ex2 > 0);
    CHECK_EQ_INT(ex2, count_of(modules[i], "rcp.approx"));
    CHECK(count_of(modules[i], "cvt.rn.bf16x2.f32") > 0);
    double t0 = now_ms();
    CHECK_EQ_INT(0, run_ptxas("sm_90a", names[i], modules[i]));
    printf("# %s: %d kernels, %zu bytes of PTX, ptxas %.0f ms\n", names[i],
           count_of(modules[i], ".entry "), strlen(modules[i]), now_ms() - t0);
  }
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
}

// Split-K (issue 13) of the f32 transformer's [B, 3072] @ [3072, 768] +
// bias, exact (no allow_tf32): the GEMM's only candidates are the partial
// GEMM and the reduction of 2, 4 and 8 slices (6 kernels: <entry>_c12,
// _c12r, .., _c14r), assembled by ptxas for sm_90a; the bf16 form's
// candidates keep them beside the tensor-core schedules.
TEST(split_k_candidates) {
  static const tj_dtype_t kTypes[] = {TJ_DTYPE_F32, TJ_DTYPE_BF16};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kTypes); ++i) {
    tj_dtype_t dt = kTypes[i];
    tj_context_t* ctx = NULL;
    CHECK_OK(tj_test_context_create(&ctx));
    tj_graph_t* g = NULL;
    CHECK_OK(tj_graph_create(ctx, "splitk", &g));
    int64_t B = tj_graph_symbol(g, "B");
    tj_value_t x = tj_graph_input(g, dt, 2, (int64_t[]){B, 3072}, "x");
    tj_value_t w = tj_graph_input(g, dt, 2, (int64_t[]){3072, 768}, "w");
    tj_value_t b = tj_graph_input(g, dt, 1, (int64_t[]){768}, "b");
    tj_graph_output(g, tj_graph_linear(g, x, w, b), "y");
    CHECK_OK(tj_graph_finalize(g));
    tj_allocator_t al = tj_allocator_system();
    tj_cuda_offline_ptx_t ptx;
    memset(&ptx, 0, sizeof(ptx));
    CHECK_OK(tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx));
    CHECK_EQ_INT(1, ptx.num_kernels);
    CHECK(ptx.variants_ptx != NULL);
    if (ptx.variants_ptx) {
      const char* v = ptx.variants_ptx;
      // Exact f32 (no allow_tf32): split-K's six, cuBLASLt's epilogue and
      // the 256x128 CUDA-core tile (the other dtypes have no _c18).
      if (dt == TJ_DTYPE_F32) {
        CHECK_EQ_INT(8, count_of(v, ".entry "));
        CHECK_EQ_INT(1, count_of(v, "_c4("));
      }
      CHECK_EQ_INT(dt == TJ_DTYPE_F32, count_of(v, "_c18("));
      CHECK(count_of(v, "_c12(") == 1 && count_of(v, "_c12r(") == 1);
      CHECK(count_of(v, "_c13(") == 1 && count_of(v, "_c13r(") == 1);
      CHECK(count_of(v, "_c14(") == 1 && count_of(v, "_c14r(") == 1);
      CHECK(strstr(v, "call") == NULL);
      CHECK_EQ_INT(0, run_ptxas("sm_90a", "splitk", v));
    }
    tj_cuda_offline_ptx_deinitialize(al, &ptx);
    tj_graph_destroy(g);
    tj_context_destroy(ctx);
  }
}

TEST(every_sample_every_arch) {
  for (int a = 0; a < TJ_NVPTX_ARCH_COUNT_; ++a) {
    tj_nvptx_target_t* target = NULL;
    CHECK_OK(tj_nvptx_target_create(tj_allocator_system(), (tj_nvptx_arch_t)a,
                                    &target));
    if (!target) continue;
    // Every sample again with the GPU's approximate math
    // (jit/nvptx_math.h): ex2.approx and rcp.approx must assemble.
    static const tj_nvptx_options_t approx = {.approx_math = true};
    for (int s = 0; s < SAMPLE_COUNT_; ++s) {
      check_sample(target, (sample_t)s, NULL);
      check_sample(target, (sample_t)s, &approx);
    }
    // The CUDA-core f32 loop with k-tiles of 16 (and 3 stages), and with
    // its 4-byte copies alone (no 16-byte path).
    static const tj_nvptx_options_t f32_bk16[] = {
        {.gemm_tile_k = 16},
        {.gemm_tile_k = 16, .gemm_stages = 3},
        {.gemm_f32_scalar_copies = true},
        // The 256x128 tile, A row-major or transposed.
        {.gemm_tile_m = 256},
        {.gemm_tile_m = 256, .gemm_stages = 3},
        {.gemm_tile_m = 256, .gemm_tile_k = 16},
        {.gemm_tile_m = 256, .gemm_tile_k = 16, .gemm_stages = 3},
        {.gemm_tile_m = 256, .gemm_f32_scalar_copies = true},
        {.gemm_tile_m = 256, .gemm_f32_a_transposed = true},
        {.gemm_tile_m = 256, .gemm_tile_k = 16, .gemm_f32_a_transposed = true},
        // The tuner's exact f32 candidate 18.
        {.gemm_tile_m = 256,
         .gemm_tile_k = 16,
         .gemm_stages = 3,
         .gemm_f32_a_transposed = true}};
    for (size_t v = 0; v < TJ_ARRAY_SIZE(f32_bk16); ++v)
      check_sample(target, SAMPLE_GEMM_F32, &f32_bk16[v]);
    // The other tensor-core schedules the autotuner may pick.
    static const tj_nvptx_options_t variants[] = {
        {.gemm_tile_k = 32,
         .gemm_stages = 3,
         .gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC},
        {.gemm_tile_k = 64,
         .gemm_stages = 3,
         .gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC},
        {.gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC}};
    for (size_t v = 0; v < TJ_ARRAY_SIZE(variants); ++v) {
      check_sample(target, SAMPLE_GEMM_BF16, &variants[v]);
      check_sample(target, SAMPLE_GEMM_F16_BATCHED, &variants[v]);
    }
    // sm_90a: every wgmma tile shape and ring depth bound.
    static const tj_nvptx_options_t wgmma[] = {
        {WGMMA(128, 256, 4)},
        {WGMMA(128, 128, 3)},
        {WGMMA(64, 128, 4)},
        {WGMMA(64, 256, 4), .approx_math = true},
        {WGMMA(64, 64, 8)},
        {WGMMA(128, 64, 3)},
        {WGMMA(128, 64, 4)},  // the tuner's candidate 17
        {WGMMA(128, 128, 3), .gemm_wgmma_drain = true},
        {WGMMA(128, 256, 4), .gemm_wgmma_drain = true},
        {WGMMA(128, 256, 4), .gemm_persistent = true},
        {WGMMA(128, 128, 6), .gemm_persistent = true, .approx_math = true},
    };
    for (size_t v = 0; a == TJ_NVPTX_SM_90A && v < TJ_ARRAY_SIZE(wgmma); ++v) {
      check_sample(target, SAMPLE_GEMM_BF16, &wgmma[v]);
      check_sample(target, SAMPLE_GEMM_F16_BATCHED, &wgmma[v]);
      check_sample(target, SAMPLE_GEMM_BF16_BMM, &wgmma[v]);
    }
    // sm_90a: the TMA, warp-specialized schedules; on the batched GEMMs
    // through rank-3 tensor maps, the batch folded into the tile index.
    for (size_t v = 0; a == TJ_NVPTX_SM_90A && v < TJ_ARRAY_SIZE(kTma); ++v) {
      check_sample(target, SAMPLE_GEMM_BF16, &kTma[v]);
      check_sample(target, SAMPLE_GEMM_F16_BATCHED, &kTma[v]);
      check_sample(target, SAMPLE_GEMM_BF16_BMM, &kTma[v]);
    }
    for (size_t v = 0; a == TJ_NVPTX_SM_90A && v < TJ_ARRAY_SIZE(kTmaStore);
         ++v) {
      g_expect_store = kTmaStore[v].stores;
      check_sample(target, SAMPLE_GEMM_BF16, &kTmaStore[v].o);
      g_expect_store = 0;
      check_sample(target, SAMPLE_GEMM_F16_BATCHED, &kTmaStore[v].o);
    }
    g_expect_store = -1;
    for (size_t v = 0; a == TJ_NVPTX_SM_90A && v < TJ_ARRAY_SIZE(kTmaCluster);
         ++v)
      check_sample(target, SAMPLE_GEMM_BF16, &kTmaCluster[v]);
    g_expect_store = 0;
    // sm_90a, allow_tf32: the f32 GEMM on wgmma .tf32.
    for (size_t v = 0; a == TJ_NVPTX_SM_90A && v < TJ_ARRAY_SIZE(kTf32); ++v)
      check_sample(target, SAMPLE_GEMM_F32, &kTf32[v]);
    tj_nvptx_target_destroy(target);
  }
}

TEST(arch_names) {
  tj_nvptx_arch_t arch;
  CHECK(tj_nvptx_arch_from_name("sm_90a", &arch) && arch == TJ_NVPTX_SM_90A);
  CHECK(tj_nvptx_arch_from_name("sm_80", &arch) && arch == TJ_NVPTX_SM_80);
  CHECK(!tj_nvptx_arch_from_name("sm_100a", &arch));
  CHECK_STREQ("sm_90a", tj_nvptx_arch_name(TJ_NVPTX_SM_90A));
  tj_nvptx_target_t* target = (tj_nvptx_target_t*)1;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "unknown arch",
               tj_nvptx_target_create(tj_allocator_system(), (tj_nvptx_arch_t)7,
                                      &target));
  CHECK(target == NULL);
}

TEST(bad_options) {
  tj_kir_t* k = NULL;
  CHECK_OK(sample_build(tj_allocator_system(), SAMPLE_GEMM_BF16, &k));
  tj_nvptx_target_t* target = NULL;
  CHECK_OK(
      tj_nvptx_target_create(tj_allocator_system(), TJ_NVPTX_SM_80, &target));
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef module = tj_nvptx_module_create(target, ctx, "m");
  tj_nvptx_kernel_t info;
  tj_nvptx_options_t bk = {.gemm_tile_k = 48}, stages = {.gemm_stages = 9};
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "gemm_tile_k 48",
               tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_80, k, &bk, &info));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "gemm_stages 9",
               tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_80, k, &stages, &info));
  // wgmma: sm_90a only, f16/bf16 only, its own tile and ring bounds.
  tj_nvptx_options_t wg = {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA};
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "sm_90a",
               tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_80, k, &wg, &info));
  tj_nvptx_options_t wg_n = {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
                             .gemm_tile_n = 96};
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "gemm_tile_n 96",
               tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, &wg_n, &info));
  tj_nvptx_options_t wg_s = {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
                             .gemm_stages = 2};
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "gemm_stages 2",
               tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, &wg_s, &info));
  tj_nvptx_options_t wg_big = {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
                               .gemm_tile_m = 128,
                               .gemm_tile_n = 256,
                               .gemm_stages = 5};
  CHECK_STATUS(
      TJ_STATUS_INVALID_ARGUMENT, "227 KiB",
      tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, &wg_big, &info));
  // TMA: on sm_90a, no gemm_wgmma_drain (batched GEMMs too).
  tj_nvptx_options_t tma = {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
                            .gemm_tma = true};
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "sm_90a",
               tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_80, k, &tma, &info));
  tj_nvptx_options_t tma_drain = {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
                                  .gemm_tma = true,
                                  .gemm_wgmma_drain = true};
  CHECK_STATUS(
      TJ_STATUS_UNSUPPORTED, "no gemm_wgmma_drain",
      tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, &tma_drain, &info));
  tj_nvptx_options_t tma_big = {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
                                .gemm_tma = true,
                                .gemm_tile_n = 256,
                                .gemm_stages = 5};
  CHECK_STATUS(
      TJ_STATUS_INVALID_ARGUMENT, "227 KiB",
      tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, &tma_big, &info));
  // Two row blocks a warpgroup: TMA only, at most 128 columns (the
  // accumulators of two m64n128 blocks fill the 128 a thread has).
  tj_nvptx_options_t pp = {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
                           .gemm_pingpong = true};
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "gemm_pingpong takes gemm_tma",
               tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, &pp, &info));
  tj_nvptx_options_t pp_wide = {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
                                .gemm_tma = true,
                                .gemm_pingpong = true,
                                .gemm_tile_n = 256};
  CHECK_STATUS(
      TJ_STATUS_UNSUPPORTED, "here 128x256",
      tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, &pp_wide, &info));
  tj_nvptx_options_t m256 = {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
                             .gemm_tile_m = 256};
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "gemm_tile_m 256 takes gemm_tma",
               tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, &m256, &info));
  tj_nvptx_options_t m256_wide = {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
                                  .gemm_tma = true,
                                  .gemm_tile_m = 256,
                                  .gemm_tile_n = 256};
  CHECK_STATUS(
      TJ_STATUS_UNSUPPORTED, "here 256x256",
      tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, &m256_wide, &info));
  tj_nvptx_options_t m512 = {
      .gemm_kernel = TJ_NVPTX_GEMM_WGMMA, .gemm_tma = true, .gemm_tile_m = 512};
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "gemm_tile_m 512",
               tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, &m512, &info));
  // Clusters: TMA, 128 or 256 columns (two B panels or more), rank 2.
  tj_nvptx_options_t cl_cp = {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
                              .gemm_cluster = true};
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "gemm_cluster takes gemm_tma",
               tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, &cl_cp, &info));
  tj_nvptx_options_t cl_narrow = {TMA(128, 64, 6), .gemm_cluster = true};
  CHECK_STATUS(
      TJ_STATUS_UNSUPPORTED, "rank 2, 128x64",
      tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, &cl_narrow, &info));
  tj_nvptx_options_t cl_wide = {TMA(128, 128, 4), .gemm_cluster = true};
  tj_kir_t* bmm = NULL;
  CHECK_OK(sample_build(tj_allocator_system(), SAMPLE_GEMM_BF16_BMM, &bmm));
  CHECK_STATUS(
      TJ_STATUS_UNSUPPORTED, "here rank 3",
      tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, bmm, &cl_wide, &info));
  tj_kir_destroy(bmm);
  tj_nvptx_options_t mma_pp = {.gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC,
                               .gemm_pingpong = true};
  CHECK_STATUS(
      TJ_STATUS_INVALID_ARGUMENT, "gemm_pingpong are wgmma options",
      tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, &mma_pp, &info));
  tj_nvptx_options_t tma_drain_batched = {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
                                          .gemm_tma = true,
                                          .gemm_wgmma_drain = true};
  tj_kir_t* batched = NULL;
  CHECK_OK(sample_build(tj_allocator_system(), SAMPLE_GEMM_BF16_BMM, &batched));
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "no gemm_wgmma_drain",
               tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, batched,
                                    &tma_drain_batched, &info));
  tj_kir_destroy(batched);
  tj_nvptx_options_t mma_tma = {.gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC,
                                .gemm_tma = true};
  CHECK_STATUS(
      TJ_STATUS_INVALID_ARGUMENT,
      "gemm_tma and gemm_pingpong are wgmma options",
      tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, &mma_tma, &info));
  tj_nvptx_options_t mma_tile = {.gemm_kernel = TJ_NVPTX_GEMM_MMA_SYNC,
                                 .gemm_tile_n = 256};
  CHECK_STATUS(
      TJ_STATUS_INVALID_ARGUMENT, "wgmma options",
      tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, &mma_tile, &info));
  // f32: the TMA schedules only with allow_tf32 (gemm_tf32), on sm_90a,
  // not the 128x64 cooperative tile; no cp.async wgmma kernel.
  tj_kir_t* f32 = NULL;
  CHECK_OK(sample_build(tj_allocator_system(), SAMPLE_GEMM_F32, &f32));
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "allow_tf32",
               tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, f32, &tma, &info));
  tj_nvptx_options_t tf32 = {
      .gemm_kernel = TJ_NVPTX_GEMM_WGMMA, .gemm_tma = true, .gemm_tf32 = true};
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "sm_90a",
               tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_80, f32, &tf32, &info));
  tj_nvptx_options_t tf32_narrow = tf32;
  tf32_narrow.gemm_tile_n = 64;
  CHECK_STATUS(
      TJ_STATUS_UNSUPPORTED, "tile_n 128 or 256 (here 128x64)",
      tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, f32, &tf32_narrow, &info));
  tj_nvptx_options_t tf32_cp = {.gemm_kernel = TJ_NVPTX_GEMM_WGMMA,
                                .gemm_tf32 = true};
  CHECK_STATUS(
      TJ_STATUS_UNSUPPORTED, "f16/bf16 operands",
      tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, f32, &tf32_cp, &info));
  // No tf32 form of the two-row-block tiles (the tf32 kernel's tiles are
  // C^T's).
  tj_nvptx_options_t tf32_pp = tf32;
  tf32_pp.gemm_pingpong = true;
  CHECK_STATUS(
      TJ_STATUS_UNSUPPORTED, "gemm_pingpong takes gemm_tma, 128x64 or 128x128",
      tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, f32, &tf32_pp, &info));
  // The exact f32 loop's tiles: 128x128 and 256x128, no other.
  tj_nvptx_options_t f32_512 = {.gemm_tile_m = 512};
  CHECK_STATUS(
      TJ_STATUS_INVALID_ARGUMENT, "takes 128x128 or 256x128",
      tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, f32, &f32_512, &info));
  tj_nvptx_options_t f32_wide_n = {.gemm_tile_m = 256, .gemm_tile_n = 256};
  CHECK_STATUS(
      TJ_STATUS_INVALID_ARGUMENT, "gemm_tile_n 256",
      tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_80, f32, &f32_wide_n, &info));
  tj_nvptx_options_t tf32_256 = tf32;
  tf32_256.gemm_tile_m = 256;
  CHECK_STATUS(
      TJ_STATUS_UNSUPPORTED, "f16/bf16 operands (here 256x128, f32)",
      tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, f32, &tf32_256, &info));
  tj_kir_destroy(f32);
  CHECK(LLVMGetFirstFunction(module) == NULL);
  LLVMDisposeModule(module);
  LLVMContextDispose(ctx);
  tj_nvptx_target_destroy(target);
  tj_kir_destroy(k);
}

TEST(unsupported_kernels_are_refused) {
  // f64 tanh comes from libm on x86; there is none on the GPU.
  tj_kir_t* k = NULL;
  CHECK_OK(
      tj_kir_create(tj_allocator_system(), TJ_KIR_POINTWISE, "tanh64", &k));
  tj_kir_ival_t dims[1] = {tj_kir_constant(64)};
  tj_kir_set_space(k, 1, dims);
  tj_kir_ival_t s[1] = {tj_kir_constant(1)};
  uint32_t x = tj_kir_add_buffer(k, "x", TJ_DTYPE_F64, TJ_KIR_INPUT, s);
  uint32_t y = tj_kir_add_buffer(k, "y", TJ_DTYPE_F64, TJ_KIR_OUTPUT, s);
  tj_kir_store(k, y, tj_kir_unary(k, TJ_OP_TANH, tj_kir_load(k, x)));
  CHECK_OK(tj_kir_finalize(k));
  tj_nvptx_target_t* target = NULL;
  CHECK_OK(
      tj_nvptx_target_create(tj_allocator_system(), TJ_NVPTX_SM_80, &target));
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef module = tj_nvptx_module_create(target, ctx, "m");
  tj_nvptx_kernel_t info;
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "f64 tanh",
               tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_80, k, NULL, &info));
  tj_kir_destroy(k);
  // A bf16 gemm whose B is contiguous along neither n nor k (a K-major B,
  // x @ w^T, runs: tests/unit/ktrans_ptx_test.c).
  k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_GEMM, "gemm_nt", &k));
  tj_kir_ival_t d2[2] = {tj_kir_constant(64), tj_kir_constant(64)};
  tj_kir_set_space(k, 2, d2);
  tj_kir_gemm_schedule_t sched;
  memset(&sched, 0, sizeof(sched));
  tj_kir_set_gemm(k, tj_kir_constant(64), &sched);
  tj_kir_ival_t sa[2] = {tj_kir_constant(64), tj_kir_constant(1)};
  tj_kir_ival_t sb[2] = {tj_kir_constant(2), tj_kir_constant(128)};
  tj_kir_add_buffer(k, "a", TJ_DTYPE_BF16, TJ_KIR_GEMM_A, sa);
  tj_kir_add_buffer(k, "b", TJ_DTYPE_BF16, TJ_KIR_GEMM_B, sb);
  uint32_t o = tj_kir_add_buffer(k, "y", TJ_DTYPE_F32, TJ_KIR_OUTPUT, sa);
  tj_kir_store(k, o, tj_kir_acc(k));
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "contiguous",
               tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_80, k, NULL, &info));
  tj_kir_destroy(k);
  // Nothing half-emitted stays in the module.
  CHECK(LLVMGetFirstFunction(module) == NULL ||
        LLVMGetNamedFunction(module, "tj_kernel_gemm_nt") == NULL);
  LLVMDisposeModule(module);
  LLVMContextDispose(ctx);
  tj_nvptx_target_destroy(target);
}

TEST(launch_configs) {
  tj_kir_t* k = NULL;
  tj_nvptx_kernel_t info;
  tj_nvptx_launch_t launch;
  tj_nvptx_target_t* target = NULL;
  CHECK_OK(
      tj_nvptx_target_create(tj_allocator_system(), TJ_NVPTX_SM_90A, &target));
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef module = tj_nvptx_module_create(target, ctx, "m");
  // Pointwise: [B, N] with 16-byte steps of 4 f32.
  CHECK_OK(sample_build(tj_allocator_system(), SAMPLE_GELU_BIAS, &k));
  CHECK_OK(tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, NULL, &info));
  CHECK_EQ_INT(4, info.vector_lanes);
  int64_t wide[2] = {3, 4096};
  CHECK_OK(tj_nvptx_launch_config(k, &info, wide, 132, &launch));
  CHECK_EQ_INT(256, launch.block[0] * launch.block[1]);
  // 1024 steps a row, 2 a thread: 2 blocks of 256 threads.
  CHECK_EQ_INT(2, info.items_per_thread);
  CHECK_EQ_INT(256, launch.block[0]);
  CHECK_EQ_INT(2, launch.grid[0]);
  CHECK_EQ_INT(3, launch.grid[1]);
  int64_t narrow[2] = {1000, 6};  // 2 steps a row: a thread per row
  CHECK_OK(tj_nvptx_launch_config(k, &info, narrow, 132, &launch));
  CHECK_EQ_INT(1, launch.block[0]);
  CHECK_EQ_INT(256, launch.block[1]);
  CHECK_EQ_INT(4, launch.grid[1]);
  int64_t none[2] = {0, 6};
  CHECK_OK(tj_nvptx_launch_config(k, &info, none, 132, &launch));
  CHECK(launch.empty);
  int64_t negative[2] = {-1, 6};
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "dim 0 is -1",
               tj_nvptx_launch_config(k, &info, negative, 132, &launch));
  tj_kir_destroy(k);
  // Row reduce: rows of up to 4 f32x4 vectors take one thread, so 256
  // rows share a block; 64 elements take 4 threads, 8 rows to a warp.
  CHECK_OK(sample_build(tj_allocator_system(), SAMPLE_SOFTMAX, &k));
  CHECK_OK(tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, NULL, &info));
  int64_t small_rows[2] = {100000, 10};
  CHECK_OK(tj_nvptx_launch_config(k, &info, small_rows, 132, &launch));
  CHECK_EQ_INT(1, launch.block[0]);
  CHECK_EQ_INT(256, launch.block[1]);
  CHECK_EQ_INT(391, launch.grid[0]);
  int64_t head_rows[2] = {1 << 20, 64};
  CHECK_OK(tj_nvptx_launch_config(k, &info, head_rows, 132, &launch));
  CHECK_EQ_INT(4, launch.block[0]);
  CHECK_EQ_INT(64, launch.block[1]);
  CHECK_EQ_INT(132 * 32, launch.grid[0]);
  // Rows held in registers, 4 vectors of f32x4 a thread: as many threads
  // per row as that takes, so 1024-element rows share a block 4 ways.
  CHECK_EQ_INT(4, info.row_slots);
  int64_t resident_rows[2] = {1000, 1024};
  CHECK_OK(tj_nvptx_launch_config(k, &info, resident_rows, 132, &launch));
  CHECK_EQ_INT(64, launch.block[0]);
  CHECK_EQ_INT(4, launch.block[1]);
  CHECK_EQ_INT(250, launch.grid[0]);
  int64_t widest_resident[2] = {1000, 4096};
  CHECK_OK(tj_nvptx_launch_config(k, &info, widest_resident, 132, &launch));
  CHECK_EQ_INT(256, launch.block[0]);
  CHECK_EQ_INT(1, launch.block[1]);
  int64_t streamed[2] = {10, 16384};  // past the registers: streams
  CHECK_OK(tj_nvptx_launch_config(k, &info, streamed, 132, &launch));
  CHECK_EQ_INT(256, launch.block[0]);
  CHECK_EQ_INT(10, launch.grid[0]);
  tj_kir_destroy(k);
  // GEMM: 128x128 tiles, 16-byte operand rows for the tensor cores.
  CHECK_OK(sample_build(tj_allocator_system(), SAMPLE_GEMM_BF16, &k));
  CHECK_OK(tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, NULL, &info));
  CHECK(info.tensor_cores);
  int64_t mnk[3] = {1000, 304, 64};
  CHECK_OK(tj_nvptx_launch_config(k, &info, mnk, 132, &launch));
  CHECK_EQ_INT(8 * 3, launch.grid[0]);
  CHECK_EQ_INT(256, launch.block[0]);
  CHECK(launch.shared_bytes > 48 * 1024);
  int64_t odd_k[3] = {64, 64, 60};  // A rows of 60 bf16: not 16-byte aligned
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "multiples of 8",
               tj_nvptx_launch_config(k, &info, odd_k, 132, &launch));
  uint64_t ptrs[4] = {0x1000, 0x2008, 0x3000, 0x4000};
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "16-byte aligned",
               tj_nvptx_gemm_check_pointers(k, &info, ptrs));
  ptrs[1] = 0x2010;
  CHECK_OK(tj_nvptx_gemm_check_pointers(k, &info, ptrs));
  // 2-block clusters (gemm_cluster): pairs of 128-row tiles, a cluster
  // each (1000 rows: 4 pairs, the last one's second tile past M), or at
  // most 66 clusters on 132 SMs when persistent.
  LLVMModuleRef mc = tj_nvptx_module_create(target, ctx, "mc");
  tj_nvptx_options_t cl = {TMA(128, 128, 4), .gemm_cluster = true};
  CHECK_OK(tj_nvptx_emit_kernel(mc, TJ_NVPTX_SM_90A, k, &cl, &info));
  CHECK_EQ_INT(2, info.cluster);
  CHECK_OK(tj_nvptx_launch_config(k, &info, mnk, 132, &launch));
  CHECK_EQ_INT(2 * 4 * 3, launch.grid[0]);
  CHECK_EQ_INT(2, launch.cluster);
  LLVMDisposeModule(mc);
  mc = tj_nvptx_module_create(target, ctx, "mc");
  cl.gemm_persistent = true;
  CHECK_OK(tj_nvptx_emit_kernel(mc, TJ_NVPTX_SM_90A, k, &cl, &info));
  int64_t big[3] = {8192, 3072, 768};
  CHECK_OK(tj_nvptx_launch_config(k, &info, big, 132, &launch));
  CHECK_EQ_INT(132, launch.grid[0]);
  CHECK_EQ_INT(2, launch.cluster);
  CHECK_OK(tj_nvptx_launch_config(k, &info, big, 131, &launch));
  CHECK_EQ_INT(130, launch.grid[0]);
  LLVMDisposeModule(mc);
  tj_kir_destroy(k);
  // Batched, attention's scores [192, 512, 64] @ [192, 64, 512]: the
  // cp.async kernels take a batch entry per grid z; the TMA schedules fold
  // the 192 x 16 tiles into one index, so the persistent grid is one
  // block an SM over all of them.
  CHECK_OK(sample_build(tj_allocator_system(), SAMPLE_GEMM_BF16_BMM, &k));
  int64_t scores[7] = {192, 512, 512, 64, 512 * 64, 512 * 64, 512 * 512};
  CHECK_OK(tj_nvptx_emit_kernel(module, TJ_NVPTX_SM_90A, k, NULL, &info));
  CHECK_OK(tj_nvptx_launch_config(k, &info, scores, 132, &launch));
  CHECK_EQ_INT(16, launch.grid[0]);
  CHECK_EQ_INT(192, launch.grid[2]);
  // (A module a kernel: both would be named after the kernel.)
  LLVMModuleRef m2 = tj_nvptx_module_create(target, ctx, "m2");
  tj_nvptx_options_t tma_p = {TMA(128, 128, 4), .gemm_persistent = true};
  CHECK_OK(tj_nvptx_emit_kernel(m2, TJ_NVPTX_SM_90A, k, &tma_p, &info));
  CHECK(info.tma);
  CHECK_OK(tj_nvptx_launch_config(k, &info, scores, 132, &launch));
  CHECK_EQ_INT(132, launch.grid[0]);
  CHECK_EQ_INT(1, launch.grid[2]);
  LLVMDisposeModule(m2);
  LLVMModuleRef m3 = tj_nvptx_module_create(target, ctx, "m3");
  tj_nvptx_options_t tma_grid = {TMA(128, 256, 3)};
  CHECK_OK(tj_nvptx_emit_kernel(m3, TJ_NVPTX_SM_90A, k, &tma_grid, &info));
  CHECK(info.tma);
  CHECK_OK(tj_nvptx_launch_config(k, &info, scores, 132, &launch));
  CHECK_EQ_INT(192 * 8, launch.grid[0]);
  CHECK_EQ_INT(1, launch.grid[2]);
  int64_t no_batch[7] = {0, 512, 512, 64, 512 * 64, 512 * 64, 512 * 512};
  CHECK_OK(tj_nvptx_launch_config(k, &info, no_batch, 132, &launch));
  CHECK(launch.empty);
  LLVMDisposeModule(m3);
  tj_kir_destroy(k);
  LLVMDisposeModule(module);
  LLVMContextDispose(ctx);
  tj_nvptx_target_destroy(target);
}

int main(int argc, char** argv) {
  g_ptxas = argc > 1 ? argv[1] : "";
  RUN_TEST(arch_names);
  RUN_TEST(unsupported_kernels_are_refused);
  RUN_TEST(bad_options);
  RUN_TEST(launch_configs);
  if (!g_ptxas[0] || access(g_ptxas, X_OK) != 0) {
    printf("# ptxas not found: PTX not assembled\n");
    if (g_test_failures) TEST_MAIN_END();
    return 77;
  }
  const char* dump = getenv("TJ_DUMP_PTX");
  if (dump && dump[0]) {
    snprintf(g_dir, sizeof(g_dir), "%s", dump);
  } else {
    snprintf(g_dir, sizeof(g_dir), "/tmp/tj-ptxas-XXXXXX");
    if (!mkdtemp(g_dir)) {
      perror("mkdtemp");
      return 1;
    }
  }
  RUN_TEST(every_sample_every_arch);
  RUN_TEST(erfc_approx_instructions);
  RUN_TEST(gelu_forms);
  RUN_TEST(capstone_gelu_erf);
  RUN_TEST(split_k_candidates);
  if (!dump || !dump[0]) {
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  }
  TEST_MAIN_END();
}
