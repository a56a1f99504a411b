// Where the first compile of one CUDA GEMM spends its time, with no GPU
// (issue 17 / issue 13's cold-compile goal): the GEMMs of
// bench/cuda_fp8_torch.py and bench/cuda_wqgemm_torch.py compiled for
// sm_90a offline (tj_cuda_compile_ptx: the middle end, lowering and LLVM's
// NVPTX back end, the same as tj_compile up to the driver), then the PTX
// assembled by ptxas -arch=sm_90a, the stand-in for the driver's JIT
// (cuLinkAddData runs the same assembler). The module's kernels and the
// autotuner's candidates (variants_ptx: every candidate an offline program
// emits, tj_cuda_gemm_emit_candidates) are assembled one entry at a time
// (ptxas --entry), so each candidate's share shows.
//
//     build/bench/cuda_compile_cost [PTXAS] [--keep DIR] [--only NAME]
//
// Times are CPU ms (this process's, ptxas's), so a busy machine does not
// inflate them. PTXAS defaults to ptxas on PATH; "" skips the assembly. --only
// runs the one graph NAME (bf16_4096, bf16_M_4096, fp8_4096, int8_4096,
// wq_int4_4096, wq_int8_4096). Prints one line
// per graph and per entry; never a pass/fail.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "backends/cuda/cuda_entry.h"
#include "tensorjit/tj_executable.h"
#include "tensorjit/tj_graph.h"
#include "tensorjit/tj_quant.h"

// CPU time, not wall time: the figures should not depend on how busy the
// machine is (the compile runs on one thread offline).
static double cpu_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

// The CPU time (user + system) of the children waited for so far.
static double children_ms(void) {
  struct rusage u;
  getrusage(RUSAGE_CHILDREN, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
         (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-3;
}

static void die(tj_status_t s, const char* what) {
  if (!s) return;
  fprintf(stderr, "cuda_compile_cost: %s: %s\n", what, tj_status_message(s));
  exit(1);
}

// y = a @ w of bf16 (w an input [K, N], the layout our tensor-core GEMM
// reads; M symbolic when |m| < 0), or the quantized prefill GEMMs of
// cuda_fp8_torch.py: cast((a @ w^T) of f8/i8, f32) * sa[M, 1] * sw[N] as
// bf16, w an input [N, K].
static tj_graph_t* prefill(tj_context_t* ctx, tj_dtype_t dt, int64_t m,
                           int64_t n, int64_t k) {
  tj_graph_t* g = NULL;
  die(tj_graph_create(ctx, "prefill", &g), "graph");
  if (m < 0) m = tj_graph_symbol(g, "M");
  int64_t ad[2] = {m, k}, wd[2] = {n, k}, sad[2] = {m, 1}, swd[1] = {n};
  int64_t kn[2] = {k, n};
  int32_t perm[2] = {1, 0};
  tj_value_t a = tj_graph_input(g, dt, 2, ad, "a");
  tj_value_t y;
  if (dt == TJ_DTYPE_BF16) {
    y = tj_graph_matmul(g, a, tj_graph_input(g, dt, 2, kn, "w"));
  } else {
    tj_value_t w =
        tj_graph_transpose(g, tj_graph_input(g, dt, 2, wd, "w"), perm);
    y = dt == TJ_DTYPE_I8
            ? tj_graph_cast(g, tj_graph_matmul_i32(g, a, w), TJ_DTYPE_F32)
            : tj_graph_matmul_f8(g, a, w);
    y = tj_graph_mul(g, y, tj_graph_input(g, TJ_DTYPE_F32, 2, sad, "sa"));
    y = tj_graph_mul(g, y, tj_graph_input(g, TJ_DTYPE_F32, 1, swd, "sw"));
    y = tj_graph_cast(g, y, TJ_DTYPE_BF16);
  }
  tj_graph_output(g, y, "y");
  die(tj_graph_finalize(g), "finalize");
  return g;
}

// cuda_wqgemm_torch.py's decode GEMM: x f32 [M, K] (M symbolic) @ W [K, N]
// a constant, W quantized by tj_graph_quantize_weights (|format|, groups
// of 128).
static tj_graph_t* decode(tj_context_t* ctx, tj_weight_format_t format,
                          int64_t n, int64_t k, float* w) {
  tj_graph_t* g = NULL;
  die(tj_graph_create(ctx, "decode", &g), "graph");
  int64_t xd[2] = {tj_graph_symbol(g, "M"), k}, wd[2] = {k, n};
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, xd, "x");
  tj_value_t c = tj_graph_constant_borrowed(g, TJ_DTYPE_F32, 2, wd, w,
                                            (size_t)(k * n) * sizeof(float));
  tj_graph_output(g, tj_graph_matmul(g, x, c), "y");
  die(tj_graph_finalize(g), "finalize");
  tj_quantize_weights_options_t o;
  tj_quantize_weights_options_initialize(&o);
  o.format = format;
  tj_graph_t* q = NULL;
  double t0 = cpu_ms();
  die(tj_graph_quantize_weights(g, &o, &q, NULL), "quantize_weights");
  printf("  quantize_weights %.1f ms\n", cpu_ms() - t0);
  tj_graph_destroy(g);
  return q;
}

// The .entry names of |ptx|, in order, into |names| (at most |cap|).
static int entries(const char* ptx, char names[][256], int cap) {
  int n = 0;
  for (const char* p = ptx; (p = strstr(p, ".entry ")) && n < cap; ++p) {
    p += 7;
    size_t len = strcspn(p, "( \n");
    if (len >= 256) len = 255;
    memcpy(names[n], p, len);
    names[n++][len] = '\0';
  }
  return n;
}

// ptxas of |ptx| (all of it, or the one entry |entry|): its CPU ms, -1
// when it fails.
static double assemble(const char* ptxas, const char* path, const char* entry) {
  char cmd[2048];
  snprintf(cmd, sizeof(cmd), "'%s' -arch=sm_90a %s%s -o /dev/null '%s'", ptxas,
           entry ? "--entry " : "", entry ? entry : "", path);
  double t0 = children_ms();
  int rc = system(cmd);
  double ms = children_ms() - t0;
  return rc == 0 ? ms : -1;
}

static void report(const char* ptxas, const char* keep, const char* name,
                   const char* what, const char* ptx) {
  if (!ptx) return;
  char path[1200];
  snprintf(path, sizeof(path), "%s/%s_%s.ptx", keep ? keep : "/tmp", name,
           what);
  FILE* f = fopen(path, "w");
  if (!f) return;
  fputs(ptx, f);
  fclose(f);
  static char names[64][256];
  int n = entries(ptx, names, 64);
  printf("  %s: %zu KB of PTX, %d entries", what, strlen(ptx) / 1024, n);
  if (!ptxas[0]) {
    printf("\n");
  } else {
    printf(", ptxas all %.0f ms\n", assemble(ptxas, path, NULL));
    for (int i = 0; i < n; ++i)
      printf("    ptxas %-60s %8.0f ms\n", names[i],
             assemble(ptxas, path, names[i]));
  }
  if (!keep) remove(path);
}

static const char* g_only;

static bool wanted(const char* name) {
  return !g_only || strcmp(g_only, name) == 0;
}

static void run(tj_context_t* ctx, const char* ptxas, const char* keep,
                const char* name, tj_graph_t* g) {
  tj_cuda_offline_ptx_t ptx;
  double t0 = cpu_ms();
  die(tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, tj_allocator_system(),
                          &ptx),
      name);
  double ms = cpu_ms() - t0;
  printf(
      "%s: tj_cuda_compile_ptx %.1f ms (%u kernels, %u candidate "
      "kernels, %u host steps)\n",
      name, ms, ptx.num_kernels, ptx.num_variant_kernels, ptx.num_host_steps);
  report(ptxas, keep, name, "module", ptx.ptx);
  report(ptxas, keep, name, "candidates", ptx.variants_ptx);
  tj_cuda_offline_ptx_deinitialize(tj_allocator_system(), &ptx);
  tj_graph_destroy(g);
  (void)ctx;
}

int main(int argc, char** argv) {
  const char* ptxas = "ptxas";
  const char* keep = NULL;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--keep") == 0 && i + 1 < argc) {
      keep = argv[++i];
    } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      g_only = argv[++i];
    } else {
      ptxas = argv[i];
    }
  }
  tj_context_t* ctx = NULL;
  die(tj_context_create(NULL, &ctx), "context");
  int64_t s = 4096;
  if (wanted("bf16_4096"))
    run(ctx, ptxas, keep, "bf16_4096", prefill(ctx, TJ_DTYPE_BF16, s, s, s));
  if (wanted("bf16_M_4096"))
    run(ctx, ptxas, keep, "bf16_M_4096", prefill(ctx, TJ_DTYPE_BF16, -1, s, s));
  if (wanted("fp8_4096"))
    run(ctx, ptxas, keep, "fp8_4096", prefill(ctx, TJ_DTYPE_F8E4M3, s, s, s));
  if (wanted("int8_4096"))
    run(ctx, ptxas, keep, "int8_4096", prefill(ctx, TJ_DTYPE_I8, s, s, s));
  float* w = malloc((size_t)(s * s) * sizeof(float));
  if (!w) return 1;
  uint32_t x = 1;
  for (int64_t i = 0; i < s * s; ++i) {
    x = x * 1664525u + 1013904223u;
    w[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.1f;
  }
  if (wanted("wq_int4_4096"))
    run(ctx, ptxas, keep, "wq_int4_4096",
        decode(ctx, TJ_WEIGHT_INT4_PER_GROUP, s, s, w));
  if (wanted("wq_int8_4096"))
    run(ctx, ptxas, keep, "wq_int8_4096",
        decode(ctx, TJ_WEIGHT_INT8_PER_CHANNEL, s, s, w));
  free(w);
  tj_context_destroy(ctx);
  return 0;
}
