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
//     build/bench/cuda_compile_cost --blocks [--threads N] [--reps R]
//
// --blocks (issue 14, cudacold): the GPT and Llama blocks of
// bench/transformer_blocks.py (bf16, B 16, T 512: B.T 8192; autotuning off,
// the program's own kernels) compiled for sm_90a three ways, R times each
// in turn: the one module (LLVM, then the whole PTX assembled by nvJitLink
// on one thread, the stand-in for the driver's JIT of one module), and
// the chunks (TJ_CUDA_COMPILE_THREADS's) on 1 and on N threads (default
// 2), LLVM and nvJitLink on each chunk's thread. Wall and process CPU ms
// of the whole tj_cuda_compile_ptx call (front end included) and of the
// back end alone; per chunk its ms at 1 thread, and what a host of 16
// cores would take: the front end plus the chunks' critical path (the
// chunks spread costliest first over 16 threads, each at its 1-thread ms).
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
#include "backends/cuda/nvjitlink.h"
#include "tests/unit/blocks_graphs.h"
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

static double wall_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

// The median of |v| (sorted in place) and its spread (max - min).
static double median(double* v, int n, double* spread) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  *spread = v[n - 1] - v[0];
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The makespan of |ms| (|n| chunks) spread costliest first over |threads|
// threads, each taking the next chunk when it is free (the compile's
// order).
static double critical_path(const double* ms, uint32_t n, int threads) {
  double sorted[256], busy[64] = {0};
  if (n > 256) n = 256;
  if (threads > 64) threads = 64;
  memcpy(sorted, ms, sizeof(double) * n);
  qsort(sorted, n, sizeof(double), cmp_double);
  for (uint32_t i = n; i-- > 0;) {
    int t = 0;
    for (int j = 1; j < threads; ++j)
      if (busy[j] < busy[t]) t = j;
    busy[t] += sorted[i];
  }
  double end = 0;
  for (int j = 0; j < threads; ++j)
    if (busy[j] > end) end = busy[j];
  return end;
}

enum { kMaxReps = 16 };

// One block, |reps| rounds of: the one module + nvJitLink of its PTX, the
// chunks at 1 thread, the chunks at |threads| threads.
static void block_costs(tj_context_t* ctx, const char* name, int kind,
                        int threads, int reps) {
  tj_graph_t* g = kind ? tj_test_llama_block(ctx, TJ_DTYPE_BF16, 16, 512)
                       : tj_test_gpt_block(ctx, TJ_DTYPE_BF16, 16, 512);
  if (!g) die(tj_status_oom(), name);
  die(tj_graph_finalize(g), name);
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.autotune = TJ_AUTOTUNE_OFF;
  tj_nvjitlink_t* lib = NULL;
  tj_status_t s = tj_nvjitlink_open(tj_allocator_system(), NULL, &lib);
  if (s) printf("  (no nvJitLink: %s)\n", tj_status_message(s));
  tj_status_free(s);
  // [way][rep]: way 0 the module (LLVM), 1 its nvJitLink, 2 chunks at 1
  // thread, 3 at |threads|; wall and CPU of the whole call; back end wall.
  double wall[4][kMaxReps], cpu[4][kMaxReps], back[4][kMaxReps];
  double chunk_ms[256] = {0}, chunk_cpu[256] = {0};
  uint32_t num_chunks = 0, num_kernels = 0;
  size_t module_bytes = 0, chunk_bytes = 0;
  for (int r = 0; r < reps; ++r) {
    tj_cuda_offline_ptx_t px;
    double w0 = wall_ms(), c0 = cpu_ms();
    die(tj_cuda_compile_ptx(g, &o, TJ_NVPTX_SM_90A, tj_allocator_system(), &px),
        name);
    wall[0][r] = wall_ms() - w0;
    cpu[0][r] = cpu_ms() - c0;
    back[0][r] = 0;  // not split out: the one module's LLVM is in wall
    num_kernels = px.num_kernels;
    module_bytes = px.ptx ? strlen(px.ptx) : 0;
    wall[1][r] = cpu[1][r] = back[1][r] = 0;
    if (lib && px.ptx) {
      void* cubin = NULL;
      size_t size = 0;
      w0 = wall_ms();
      c0 = cpu_ms();
      die(tj_nvjitlink_assemble(lib, TJ_NVPTX_SM_90A, px.ptx,
                                tj_allocator_system(), &cubin, &size),
          "nvJitLink of the module");
      wall[1][r] = back[1][r] = wall_ms() - w0;
      cpu[1][r] = cpu_ms() - c0;
      tj_free(tj_allocator_system(), cubin, size);
    }
    tj_cuda_offline_ptx_deinitialize(tj_allocator_system(), &px);
    for (int way = 2; way < 4; ++way) {
      int t = way == 2 ? 1 : threads;
      w0 = wall_ms();
      c0 = cpu_ms();
      die(tj_cuda_compile_ptx_chunks(g, &o, TJ_NVPTX_SM_90A, (uint32_t)t,
                                     tj_allocator_system(), &px),
          name);
      wall[way][r] = wall_ms() - w0;
      cpu[way][r] = cpu_ms() - c0;
      back[way][r] = px.chunks_wall_ms;
      num_chunks = px.num_chunks;
      if (way == 2) {
        chunk_bytes = 0;
        for (uint32_t c = 0; c < px.num_chunks && c < 256; ++c) {
          // The smallest of the rounds: the least disturbed by the load.
          if (r == 0 || px.chunk_ms[c] < chunk_ms[c])
            chunk_ms[c] = px.chunk_ms[c];
          if (r == 0 || px.chunk_cpu_ms[c] < chunk_cpu[c])
            chunk_cpu[c] = px.chunk_cpu_ms[c];
          chunk_bytes += px.chunk_ptx[c] ? strlen(px.chunk_ptx[c]) : 0;
        }
        if (r == 0) {
          for (uint32_t c = 0; c < px.num_chunks; ++c) {
            int k = 0;
            for (uint32_t i = 0; i < px.num_kernels; ++i)
              k += px.chunk_of[i] == c;
            printf(
                "    chunk %2u: %d kernels, %6zu bytes of PTX, %7.1f ms "
                "(nvJitLink %6.1f), cpu %7.1f ms%s\n",
                c, k, px.chunk_ptx[c] ? strlen(px.chunk_ptx[c]) : 0,
                px.chunk_ms[c], px.chunk_asm_ms[c], px.chunk_cpu_ms[c],
                px.chunk_cubin[c] ? "" : " no cubin");
          }
        }
      }
      tj_cuda_offline_ptx_deinitialize(tj_allocator_system(), &px);
    }
  }
  static const char* const kWays[4] = {
      "one module, LLVM (whole call)", "one module, nvJitLink (1 thread)",
      "chunks, 1 thread (whole call)", "chunks, N threads (whole call)"};
  printf(
      "%s: %u kernels, %u chunks; %zu bytes of PTX as one module, %zu as "
      "chunks; %d rounds, medians (max - min)\n",
      name, num_kernels, num_chunks, module_bytes, chunk_bytes, reps);
  double med_wall[4], med_cpu[4], med_back[4], sp;
  for (int way = 0; way < 4; ++way) {
    double sw, sc;
    med_wall[way] = median(wall[way], reps, &sw);
    med_cpu[way] = median(cpu[way], reps, &sc);
    med_back[way] = median(back[way], reps, &sp);
    printf("  %-34s wall %8.1f ms (%6.1f)  cpu %8.1f ms (%6.1f)", kWays[way],
           med_wall[way], sw, med_cpu[way], sc);
    if (way >= 2) printf("  back end wall %7.1f ms", med_back[way]);
    printf("\n");
  }
  // On a loaded VM wall times stretch: the estimate is in CPU ms. The
  // serial part (passes, lowering, emission, the bitcode, the threads'
  // set-up) is the 1-thread call's CPU less its chunks'; the chunks then
  // run costliest first on 16 threads, each at its own CPU ms (the least
  // of the rounds).
  double sum = critical_path(chunk_cpu, num_chunks, 1);
  double serial = med_cpu[2] - sum;
  printf(
      "  threads N = %d; chunks' CPU: sum %.1f ms, costliest %.1f ms; "
      "serial CPU %.1f ms\n",
      threads, sum, critical_path(chunk_cpu, num_chunks, 64), serial);
  printf(
      "  16 cores by the critical path: %.1f + %.1f = %.1f ms CPU; the one "
      "module + nvJitLink, serial: %.1f ms CPU\n",
      serial, critical_path(chunk_cpu, num_chunks, 16),
      serial + critical_path(chunk_cpu, num_chunks, 16),
      med_cpu[0] + med_cpu[1]);
  (void)chunk_ms;
  tj_nvjitlink_close(lib);
  tj_graph_destroy(g);
}

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
  bool blocks = false;
  int threads = 2, reps = 3;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--blocks") == 0) {
      blocks = true;
    } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = atoi(argv[++i]);
      if (reps < 1) reps = 1;
      if (reps > kMaxReps) reps = kMaxReps;
    } else if (strcmp(argv[i], "--keep") == 0 && i + 1 < argc) {
      keep = argv[++i];
    } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      g_only = argv[++i];
    } else {
      ptxas = argv[i];
    }
  }
  tj_context_t* ctx = NULL;
  die(tj_context_create(NULL, &ctx), "context");
  if (blocks) {
    if (wanted("gpt")) block_costs(ctx, "gpt bf16 B16 T512", 0, threads, reps);
    if (wanted("llama"))
      block_costs(ctx, "llama bf16 B16 T512", 1, threads, reps);
    tj_context_destroy(ctx);
    return 0;
  }
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
