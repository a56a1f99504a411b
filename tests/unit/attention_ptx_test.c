// The CUDA attention kernel (issue 14, jit/emit_nvptx_attention.c) without
// a GPU: every variant (head dim 64/128 x bf16/f16 x causal or not, with
// no mask, a bool mask, an additive mask; grouped-query heads; symbolic B,
// T and S) compiled for sm_90a and sm_80 is one kernel with no graph break,
// its PTX holds the tensor-core path (mma.sync m16n8k16, ldmatrix with and
// without .trans, cp.async, ex2.approx), and ptxas -arch=sm_90a assembles
// it when the test is given ptxas's path (registers and spills printed).
// f32 (jit/emit_nvptx_attention_f32.c): head dims 64 and 128 with every
// mask, and 4, 20, 80, 100, one kernel of FFMA with no tensor-core or TF32
// instruction, assembled by ptxas likewise. The cases the templates do not
// take (f32 head dims past 128 or not multiples of 4, f16/bf16 head dim
// 80, dv != d) are decomposed: more than one kernel, still no graph break.
// The offline compile fails each allocation in turn: OUT_OF_MEMORY, nothing
// leaked; the offline compile of the fused backward too. The launch of a
// kernel-IR attention kernel: its grid for run-time sizes,
// nothing for empty ones, and UNSUPPORTED (naming the operand) for strides
// or base pointers that break the 16-byte copies; the emitter's refusals.
// Attention's backward (fabwdcuda): the joint graph of tj_graph_grad for
// the same variants without a mask compiles with attention_lse,
// attention_dq and attention_dkv each one kernel (the lse variant of the
// forward, jit/emit_nvptx_attention_bwd.c's two), so that no [.., Tq, Tk]
// value is materialized: a handful of kernels and no batched GEMM of the
// decomposed form; ptxas assembles each and prints registers and spills.
// With a mask the three decompose (more kernels, no graph break).
// The wgmma forward (jit/emit_nvptx_attention_wgmma.c, TJ_NVPTX_ATTENTION=
// wgmma): the same variants without a mask, GQA with symbolic sizes, and
// attention_lse in the backward's graph, each one kernel on sm_90a whose
// PTX holds wgmma m64n<keys>k16 with both operands in shared memory (S;
// tiles of 128 keys at d 64, 64 at d 128) and m64n<d>k16 with A from
// registers (P.V; not for lse), no mma.sync, and
// which ptxas assembles without a C75xx warning (a serialized or broken
// wgmma pipeline); with a mask or on sm_80 the mma.sync kernel instead;
// its launch (256 threads, 128 query rows a block). ptxas's C75xx
// warnings fail every variant.
// lsefwd: in the joint graph the forward kernel writes attention_lse too
// (fuse's join_attention_lse), on mma.sync, wgmma and sm_80: one kernel
// fewer than with TJ_ATTENTION_LSE=separate, exactly one kernel computing
// a log-sum-exp (lg2.approx), and that one also does P.V; ptxas assembles
// it. A forward graph whose outputs are y and an attention_lse is one
// kernel only when the lse takes the same q, k, mask, scale (the default
// resolved) and causal flag: another scale, causal flag, k or q keeps two.
// The joint graph split by tj_graph_partition with save_attention_lse:
// the forward is one kernel that also computes lse, the backward has no
// lse kernel; without the option the backward keeps it. The split and its
// offline compile fail each allocation in turn: OUT_OF_MEMORY, no leak.
// Numbers on the GPU: tests/cuda/cuda_attention_test.c and
// tests/cuda/cuda_attention_grad_test.c.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cuda/cuda_entry.h"
#include "jit/nvptx.h"
#include "tensorjit/tj_autodiff.h"
#include "tests/unit/test.h"

static const char* g_ptxas = "";
static tj_context_t* g_ctx;
// A context with TJ_NVPTX_ATTENTION=wgmma.
static tj_context_t* g_wgmma_ctx;
// And with TJ_NVPTX_ATTENTION=wgmma-wide, and unset.
static tj_context_t* g_wide_ctx;
static tj_context_t* g_default_ctx;
// fa3bwd: TJ_NVPTX_ATTENTION=wgmma-stepwise (the backward's waits in the
// step).
static tj_context_t* g_stepwise_ctx;
// fa3bwd2: TJ_NVPTX_ATTENTION=wgmma-pingpong (the backward's warpgroups
// ordered by a named barrier).
static tj_context_t* g_pingpong_ctx;
// lsefwd: g_ctx's and g_default_ctx's settings with TJ_ATTENTION_LSE=
// separate (attention_lse a kernel of its own).
static tj_context_t* g_sep_ctx;
static tj_context_t* g_sep_default_ctx;

typedef struct variant_t {
  tj_dtype_t dt;
  int64_t d, dv, h, hkv;
  bool causal;
  int mask;  // 0 none, 1 bool [T, S], 2 additive [B, 1, T, S]
  bool symbolic;
} variant_t;

// build's S at constant sizes: 77 (one key tile), or 300 while this is
// set (several, so that the loop over key tiles is not folded away).
static bool g_long_keys;

static tj_graph_t* build(const variant_t* v) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_ctx, "attn", &g));
  if (!g) return NULL;
  int64_t B = 2, T = 129, S = g_long_keys ? 300 : 77;
  if (v->symbolic) {
    B = tj_graph_symbol(g, "B");
    T = tj_graph_symbol(g, "T");
    S = tj_graph_symbol(g, "S");
  }
  tj_value_t q =
      tj_graph_input(g, v->dt, 4, (int64_t[]){B, v->h, T, v->d}, "q");
  tj_value_t k =
      tj_graph_input(g, v->dt, 4, (int64_t[]){B, v->hkv, S, v->d}, "k");
  tj_value_t vv =
      tj_graph_input(g, v->dt, 4, (int64_t[]){B, v->hkv, S, v->dv}, "v");
  tj_value_t m = tj_value_none();
  if (v->mask == 1)
    m = tj_graph_input(g, TJ_DTYPE_BOOL, 2, (int64_t[]){T, S}, "m");
  if (v->mask == 2)
    m = tj_graph_input(g, v->dt, 4, (int64_t[]){B, 1, T, S}, "m");
  tj_graph_output(g, tj_graph_attention(g, q, k, vv, m, 0, v->causal), "y");
  CHECK_OK(tj_graph_finalize(g));
  return g;
}

static void describe(const variant_t* v, char* buf, size_t n) {
  snprintf(buf, n, "%s d%lld dv%lld h%lld/%lld%s mask%d%s",
           tj_dtype_name(v->dt), (long long)v->d, (long long)v->dv,
           (long long)v->h, (long long)v->hkv, v->causal ? " causal" : "",
           v->mask, v->symbolic ? " symbolic" : "");
}

// Assembles |ptx| with ptxas -v; returns whether it succeeded without a
// C75xx warning (wgmma serialized or its pipeline broken) and prints its
// register, spill and warning lines.
// The most bytes of spill stores or loads of one kernel that assemble
// has seen (its callers reset it).
static int g_max_spill;

static bool assemble(const char* what, const char* ptx) {
  char path[] = "/tmp/tj_attn_ptx_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return false;
  FILE* f = fdopen(fd, "w");
  if (!f) return false;
  fputs(ptx, f);
  fclose(f);
  char cmd[1200];
  snprintf(cmd, sizeof(cmd), "'%s' -v -arch=sm_90a -o /dev/null '%s' 2>&1",
           g_ptxas, path);
  FILE* p = popen(cmd, "r");
  bool ok = false;
  if (p) {
    char line[512];
    bool c75 = false;
    while (fgets(line, sizeof(line), p)) {
      if (strstr(line, "registers") || strstr(line, "spill") ||
          strstr(line, "entry function") || strstr(line, "error") ||
          strstr(line, "warning"))
        printf("#   %s: %s", what, line);
      if (strstr(line, "C75")) c75 = true;
      // "    N bytes stack frame, N bytes spill stores, N bytes spill loads"
      int frame = 0, st = 0, ld = 0;
      if (sscanf(line, "%d bytes stack frame, %d bytes spill stores, %d",
                 &frame, &st, &ld) == 3) {
        if (st > g_max_spill) g_max_spill = st;
        if (ld > g_max_spill) g_max_spill = ld;
      }
    }
    ok = pclose(p) == 0 && !c75;
  }
  remove(path);
  return ok;
}

// The joint graph (y, dL/dq, dL/dk, dL/dv) of |v|'s attention.
static tj_graph_t* build_grad(const variant_t* v) {
  tj_graph_t* g = build(v);
  if (!g) return NULL;
  tj_graph_t* joint = NULL;
  CHECK_OK(tj_graph_grad(g, 0, NULL, 3, (int32_t[]){0, 1, 2}, &joint));
  tj_graph_destroy(g);
  return joint;
}

// How many times |needle| occurs in |s|.
static int count(const char* s, const char* needle) {
  int n = 0;
  for (const char* p = strstr(s, needle); p; p = strstr(p + 1, needle)) ++n;
  return n;
}

// Kernels of the fused backward: forward, lse, delta's row sum (with y's
// and dy's casts), dq, dkv, and the slices of [dk | dv] (at most 8 in
// all); the decomposed form takes over 12.
enum { kMaxFusedGradKernels = 8 };

static void check_fused_grad(const variant_t* v, tj_nvptx_arch_t arch) {
  char what[160];
  describe(v, what, sizeof(what));
  strcat(what, " grad");
  tj_graph_t* g = build_grad(v);
  if (!g) return;
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  tj_allocator_t al = tj_allocator_system();
  CHECK_OK(tj_cuda_compile_ptx(g, NULL, arch, al, &ptx));
  printf("# %s: %u kernels\n", what, ptx.num_kernels);
  CHECK(ptx.num_kernels >= 4 && ptx.num_kernels <= kMaxFusedGradKernels);
  CHECK_EQ_INT(0, ptx.num_host_steps);
  CHECK(ptx.ptx != NULL);
  if (ptx.ptx) {
    // Every kernel with tensor cores is an attention kernel: the forward's
    // 2 mma groups, the backward's 4 (dq: S, dP, dQ; dkv: S, dP, dV, dK);
    // no batched GEMM module is left.
    CHECK(count(ptx.ptx, "mma.sync.aligned.m16n8k16.row.col.f32") >= 10);
    CHECK(strstr(ptx.ptx, "lg2.approx") != NULL);  // attention_lse
    CHECK(strstr(ptx.ptx, "cp.async.ca.shared.global") != NULL);  // dkv
    CHECK(strstr(ptx.ptx, "wgmma") == NULL);
    if (arch == TJ_NVPTX_SM_90A && g_ptxas[0]) {
      bool ok = assemble(what, ptx.ptx);
      if (!ok) fprintf(stderr, "%s: ptxas failed\n", what);
      CHECK(ok);
    }
  }
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
}

// How many kernels of |ptx| hold |a| in their body, and |b| too when not
// NULL.
static int entries_with(const char* ptx, const char* a, const char* b) {
  int n = 0;
  for (const char* p = strstr(ptx, ".entry "); p;) {
    const char* next = strstr(p + 1, ".entry ");
    size_t len = next ? (size_t)(next - p) : strlen(p);
    if (memmem(p, len, a, strlen(a)) && (!b || memmem(p, len, b, strlen(b))))
      ++n;
    p = next;
  }
  return n;
}

// lsefwd: |v|'s joint graph for |arch| built in |fused_ctx| and in
// |sep_ctx| (TJ_ATTENTION_LSE=separate); |pv| marks the P.V product of
// the forward's kernel (mma.sync's V read .trans, wgmma's A from
// registers), which attention_lse's kernel does not have.
static void check_lse_joins(const variant_t* v, tj_nvptx_arch_t arch,
                            tj_context_t* fused_ctx, tj_context_t* sep_ctx,
                            const char* pv) {
  char what[160];
  describe(v, what, sizeof(what));
  strcat(what, arch == TJ_NVPTX_SM_80 ? " lse-joined sm_80" : " lse-joined");
  tj_cuda_offline_ptx_t ptx[2];
  memset(ptx, 0, sizeof(ptx));
  tj_allocator_t al = tj_allocator_system();
  tj_context_t* saved = g_ctx;
  for (int sep = 0; sep < 2; ++sep) {
    g_ctx = sep ? sep_ctx : fused_ctx;
    tj_graph_t* g = build_grad(v);
    if (!g) continue;
    CHECK_OK(tj_cuda_compile_ptx(g, NULL, arch, al, &ptx[sep]));
    CHECK_EQ_INT(0, ptx[sep].num_host_steps);
    tj_graph_destroy(g);
  }
  g_ctx = saved;
  printf("# %s: %u kernels (%u with attention_lse separate)\n", what,
         ptx[0].num_kernels, ptx[1].num_kernels);
  CHECK_EQ_INT(ptx[1].num_kernels - 1, ptx[0].num_kernels);
  if (ptx[0].ptx && ptx[1].ptx) {
    CHECK_EQ_INT(1, entries_with(ptx[0].ptx, "lg2.approx", NULL));
    CHECK_EQ_INT(1, entries_with(ptx[0].ptx, "lg2.approx", pv));
    CHECK_EQ_INT(1, entries_with(ptx[1].ptx, "lg2.approx", NULL));
    CHECK_EQ_INT(0, entries_with(ptx[1].ptx, "lg2.approx", pv));
    if (arch == TJ_NVPTX_SM_90A && g_ptxas[0]) {
      bool ok = assemble(what, ptx[0].ptx);
      if (!ok) fprintf(stderr, "%s: ptxas failed or warned\n", what);
      CHECK(ok);
    }
  }
  tj_cuda_offline_ptx_deinitialize(al, &ptx[0]);
  tj_cuda_offline_ptx_deinitialize(al, &ptx[1]);
}

TEST(lse_joins_the_forward) {
  static const char* const kTrans = "ldmatrix.sync.aligned.m8n8.x4.trans";
  static const char* const kRegA = "}, {%r";
  g_long_keys = true;
  static const variant_t vs[] = {
      {TJ_DTYPE_BF16, 64, 64, 4, 4, true, 0, false},
      {TJ_DTYPE_F16, 128, 128, 4, 4, false, 0, false},
      {TJ_DTYPE_BF16, 128, 128, 8, 2, true, 0, true},
      {TJ_DTYPE_F16, 64, 64, 8, 1, false, 0, true},
  };
  // The sanitizer leg (tj_test_sanitizer_subset): each variant in one of
  // the two kernels, alternating; the plain leg takes both.
  const bool subset = tj_test_sanitizer_subset();
  for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); ++i) {
    if (!subset || i % 2 == 0)
      check_lse_joins(&vs[i], TJ_NVPTX_SM_90A, g_ctx, g_sep_ctx, kTrans);
    if (!subset || i % 2 == 1)
      check_lse_joins(&vs[i], TJ_NVPTX_SM_90A, g_default_ctx, g_sep_default_ctx,
                      kRegA);
  }
  check_lse_joins(&vs[2], TJ_NVPTX_SM_80, g_default_ctx, g_sep_default_ctx,
                  kTrans);
  g_long_keys = false;
}

// lsefwd: kernels of the forward graph whose outputs are y = attention(q,
// k, v, causal) at the default scale and attention_lse(|lq|, |lk|, none,
// |scale|, |causal|).
static uint32_t forward_with_lse_kernels(int lq, int lk, double scale,
                                         bool causal) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(g_default_ctx, "attn_lse", &g));
  if (!g) return 0;
  const tj_dtype_t dt = TJ_DTYPE_BF16;
  const int64_t shape[4] = {2, 4, 129, 64};
  tj_value_t in[5];
  static const char* const names[5] = {"q", "k", "v", "q2", "k2"};
  for (int i = 0; i < 5; ++i) in[i] = tj_graph_input(g, dt, 4, shape, names[i]);
  tj_graph_output(
      g, tj_graph_attention(g, in[0], in[1], in[2], tj_value_none(), 0, true),
      "y");
  tj_graph_output(
      g,
      tj_graph_attention_lse(g, in[lq], in[lk], tj_value_none(), scale, causal),
      "lse");
  CHECK_OK(tj_graph_finalize(g));
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  tj_allocator_t al = tj_allocator_system();
  CHECK_OK(tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx));
  CHECK_EQ_INT(0, ptx.num_host_steps);
  if (ptx.ptx && ptx.num_kernels == 1 && g_ptxas[0]) {
    bool ok = assemble("bf16 d64 causal y and lse", ptx.ptx);
    if (!ok) fprintf(stderr, "y and lse: ptxas failed or warned\n");
    CHECK(ok);
  }
  uint32_t n = ptx.num_kernels;
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
  return n;
}

// lsefwd: |v|'s joint graph split with or without save_attention_lse,
// each half compiled for sm_90a: (forward kernels, forward kernels
// computing a log-sum-exp), likewise for the backward.
static void split_kernels(const variant_t* v, bool save, int* out) {
  memset(out, 0, 4 * sizeof(int));
  tj_graph_t* joint = build_grad(v);
  if (!joint) return;
  tj_partition_options_t po;
  tj_partition_options_initialize(&po);
  po.save_attention_lse = save;
  tj_graph_t* halves[2] = {NULL, NULL};
  CHECK_OK(tj_graph_partition(joint, 3, 1, &po, &halves[0], &halves[1], NULL));
  tj_allocator_t al = tj_allocator_system();
  for (int i = 0; i < 2 && halves[0] && halves[1]; ++i) {
    tj_cuda_offline_ptx_t ptx;
    memset(&ptx, 0, sizeof(ptx));
    CHECK_OK(tj_cuda_compile_ptx(halves[i], NULL, TJ_NVPTX_SM_90A, al, &ptx));
    CHECK_EQ_INT(0, ptx.num_host_steps);
    out[2 * i] = (int)ptx.num_kernels;
    if (ptx.ptx) {
      out[2 * i + 1] = entries_with(ptx.ptx, "lg2.approx", NULL);
      if (save && i == 0 && g_ptxas[0]) {
        bool ok = assemble("split forward with lse", ptx.ptx);
        if (!ok) fprintf(stderr, "split forward: ptxas failed or warned\n");
        CHECK(ok);
      }
    }
    tj_cuda_offline_ptx_deinitialize(al, &ptx);
  }
  tj_graph_destroy(halves[0]);
  tj_graph_destroy(halves[1]);
  tj_graph_destroy(joint);
}

TEST(lse_saved_by_the_partition) {
  g_long_keys = true;
  static const variant_t vs[] = {
      {TJ_DTYPE_BF16, 128, 128, 4, 2, true, 0, false},
      {TJ_DTYPE_F16, 64, 64, 8, 2, false, 0, true},
  };
  for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); ++i) {
    int saved[4], recomputed[4];
    split_kernels(&vs[i], true, saved);
    split_kernels(&vs[i], false, recomputed);
    printf(
        "# split %zu: forward %d + backward %d kernels with lse saved, "
        "%d + %d without\n",
        i, saved[0], saved[2], recomputed[0], recomputed[2]);
    // The forward: one kernel either way, writing lse only when saved.
    CHECK_EQ_INT(1, saved[0]);
    CHECK_EQ_INT(1, saved[1]);
    CHECK_EQ_INT(1, recomputed[0]);
    CHECK_EQ_INT(0, recomputed[1]);
    // The backward: the lse kernel only when recomputed.
    CHECK_EQ_INT(recomputed[2] - 1, saved[2]);
    CHECK_EQ_INT(0, saved[3]);
    CHECK_EQ_INT(1, recomputed[3]);
  }
  g_long_keys = false;
}

TEST(lse_joins_only_the_same_scores) {
  // The same scores: 1/sqrt(64) given or resolved from 0 alike.
  CHECK_EQ_INT(1, forward_with_lse_kernels(0, 1, 0, true));
  CHECK_EQ_INT(1, forward_with_lse_kernels(0, 1, 0.125, true));
  // Another scale, causal flag, k or q: two kernels.
  CHECK_EQ_INT(2, forward_with_lse_kernels(0, 1, 0.1, true));
  CHECK_EQ_INT(2, forward_with_lse_kernels(0, 1, 0, false));
  CHECK_EQ_INT(2, forward_with_lse_kernels(0, 4, 0, true));
  CHECK_EQ_INT(2, forward_with_lse_kernels(3, 1, 0, true));
}

static void check_fused(const variant_t* v, tj_nvptx_arch_t arch) {
  char what[128];
  describe(v, what, sizeof(what));
  tj_graph_t* g = build(v);
  if (!g) return;
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  tj_allocator_t al = tj_allocator_system();
  CHECK_OK(tj_cuda_compile_ptx(g, NULL, arch, al, &ptx));
  if (ptx.num_kernels != 1)
    fprintf(stderr, "%s: %u kernels\n", what, ptx.num_kernels);
  CHECK_EQ_INT(1, ptx.num_kernels);
  CHECK_EQ_INT(0, ptx.num_host_steps);
  CHECK(ptx.ptx != NULL);
  if (ptx.ptx && v->dt == TJ_DTYPE_F32) {
    // Exact f32: FFMA from 16-byte shared loads, no tensor-core
    // instruction (no TF32).
    CHECK(strstr(ptx.ptx, "fma.rn.f32") != NULL);
    CHECK(strstr(ptx.ptx, "ld.shared.v4.f32") != NULL);
    CHECK(strstr(ptx.ptx, "mma") == NULL);
    CHECK(strstr(ptx.ptx, "tf32") == NULL);
    CHECK(strstr(ptx.ptx, "cp.async.cg.shared.global") != NULL);
    CHECK(strstr(ptx.ptx, "ex2.approx") != NULL);
  } else if (ptx.ptx) {
    CHECK(strstr(ptx.ptx, "mma.sync.aligned.m16n8k16.row.col.f32") != NULL);
    CHECK(strstr(ptx.ptx, v->dt == TJ_DTYPE_F16 ? ".f16.f16.f32"
                                                : ".bf16.bf16.f32") != NULL);
    CHECK(strstr(ptx.ptx, "ldmatrix.sync.aligned.m8n8.x4.trans") != NULL);
    CHECK(strstr(ptx.ptx, "ldmatrix.sync.aligned.m8n8.x4.shared") != NULL ||
          strstr(ptx.ptx, "ldmatrix.sync.aligned.m8n8.x4.b16") != NULL);
    CHECK(strstr(ptx.ptx, "cp.async.cg.shared.global") != NULL);
    CHECK(strstr(ptx.ptx, "ex2.approx") != NULL);
  }
  if (ptx.ptx && arch == TJ_NVPTX_SM_90A && g_ptxas[0]) {
    bool ok = assemble(what, ptx.ptx);
    if (!ok) fprintf(stderr, "%s: ptxas failed\n", what);
    CHECK(ok);
  }
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
}

// |v| compiled in the TJ_NVPTX_ATTENTION=wgmma context (or, |wide|,
// wgmma-wide's) for |arch|: one kernel, the wgmma forward where it
// applies (sm_90a, no mask), else the mma.sync one.
static void check_wgmma_as(const variant_t* v, tj_nvptx_arch_t arch,
                           bool wide) {
  char what[160];
  describe(v, what, sizeof(what));
  strcat(what, arch != TJ_NVPTX_SM_90A ? " wgmma-asked sm_80"
               : wide                  ? " wgmma-wide"
                                       : " wgmma");
  tj_context_t* saved = g_ctx;
  g_ctx = wide ? g_wide_ctx : g_wgmma_ctx;
  tj_graph_t* g = build(v);
  g_ctx = saved;
  if (!g) return;
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  tj_allocator_t al = tj_allocator_system();
  CHECK_OK(tj_cuda_compile_ptx(g, NULL, arch, al, &ptx));
  CHECK_EQ_INT(1, ptx.num_kernels);
  CHECK_EQ_INT(0, ptx.num_host_steps);
  CHECK(ptx.ptx != NULL);
  const bool wgmma = arch == TJ_NVPTX_SM_90A && v->mask == 0;
  if (ptx.ptx && wgmma) {
    const int bn = wide ? 128 : 64;  // keys a tile
    const char* t = v->dt == TJ_DTYPE_F16 ? ".f16.f16" : ".bf16.bf16";
    char want[96];
    snprintf(want, sizeof(want), "wgmma.mma_async.sync.aligned.m64n%dk16.f32%s",
             bn, t);
    CHECK(count(ptx.ptx, want) >= (int)v->d / 16);  // S = Q . K^T
    snprintf(want, sizeof(want), "wgmma.mma_async.sync.aligned.m64n%dk16.f32%s",
             (int)v->d, t);
    // P . V: bn / 16 k16 steps with A from registers.
    CHECK(count(ptx.ptx, want) >= bn / 16);
    CHECK(count(ptx.ptx, "}, {%r") >= bn / 16);
    CHECK(strstr(ptx.ptx, "wgmma.wait_group.sync.aligned 0") != NULL);
    CHECK(strstr(ptx.ptx, "fence.proxy.async.shared::cta") != NULL);
    CHECK(strstr(ptx.ptx, "cp.async.cg.shared.global") != NULL);
    CHECK(strstr(ptx.ptx, "ex2.approx") != NULL);
    CHECK(strstr(ptx.ptx, "mma.sync") == NULL);
    CHECK(strstr(ptx.ptx, "ldmatrix") == NULL);
  } else if (ptx.ptx) {
    CHECK(strstr(ptx.ptx, "wgmma") == NULL);
    CHECK(strstr(ptx.ptx, "mma.sync.aligned.m16n8k16.row.col.f32") != NULL);
  }
  if (ptx.ptx && arch == TJ_NVPTX_SM_90A && g_ptxas[0]) {
    bool ok = assemble(what, ptx.ptx);
    if (!ok) fprintf(stderr, "%s: ptxas failed or warned\n", what);
    CHECK(ok);
  }
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
}

static void check_wgmma(const variant_t* v, tj_nvptx_arch_t arch) {
  check_wgmma_as(v, arch, false);
}

TEST(wgmma_variants) {
  static const tj_dtype_t dts[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  static const int64_t ds[] = {64, 128};
  // Several key tiles, so that the loop is there to assemble.
  g_long_keys = true;
  for (int di = 0; di < 2; ++di)
    for (int ti = 0; ti < (int)tj_test_num_half_types(); ++ti)
      for (int causal = 0; causal < 2; ++causal) {
        variant_t v = {dts[ti], ds[di], ds[di], 4, 4, causal != 0, 0, false};
        check_wgmma(&v, TJ_NVPTX_SM_90A);
      }
  variant_t gqa = {TJ_DTYPE_BF16, 128, 128, 8, 2, true, 0, true};
  check_wgmma(&gqa, TJ_NVPTX_SM_90A);
  check_wgmma(&gqa, TJ_NVPTX_SM_80);  // no wgmma there: mma.sync
  variant_t mqa = {TJ_DTYPE_F16, 64, 64, 8, 1, false, 0, true};
  check_wgmma(&mqa, TJ_NVPTX_SM_90A);
  // A mask operand: the mma.sync kernel.
  variant_t masked = {TJ_DTYPE_BF16, 64, 64, 4, 2, true, 1, false};
  check_wgmma(&masked, TJ_NVPTX_SM_90A);
  g_long_keys = false;
  // wgmma-wide: 128-key tiles, one block an SM.
  g_long_keys = true;
  for (int di = 0; di < 2; ++di)
    for (int mode = 0; mode < 4; ++mode) {
      const bool causal = mode & 1, symbolic = mode >> 1;
      variant_t v = {causal ? TJ_DTYPE_BF16 : TJ_DTYPE_F16,
                     ds[di],
                     ds[di],
                     4,
                     2,
                     causal,
                     0,
                     symbolic};
      check_wgmma_as(&v, TJ_NVPTX_SM_90A, true);
    }
  g_long_keys = false;
}

TEST(default_is_wgmma) {
  // TJ_NVPTX_ATTENTION unset: the wgmma kernel on sm_90a without a mask,
  // mma.sync with one and on sm_80.
  tj_context_t* saved = g_wgmma_ctx;
  g_wgmma_ctx = g_default_ctx;
  variant_t v = {TJ_DTYPE_BF16, 128, 128, 8, 2, true, 0, true};
  check_wgmma(&v, TJ_NVPTX_SM_90A);
  check_wgmma(&v, TJ_NVPTX_SM_80);
  variant_t masked = {TJ_DTYPE_F16, 64, 64, 4, 2, false, 2, false};
  check_wgmma(&masked, TJ_NVPTX_SM_90A);
  g_wgmma_ctx = saved;
}

TEST(wgmma_lse_in_grad) {
  // The backward's attention_lse on the wgmma loop (S only, no V; with
  // TJ_ATTENTION_LSE=separate, else the forward writes it: lsefwd), the
  // forward, dq and dkv on wgmma too (fa3bwd: the default).
  static const int64_t ds[] = {64, 128};
  for (int di = 0; di < 2; ++di) {
    variant_t v = {TJ_DTYPE_BF16, ds[di], ds[di], 4, 2, true, 0, true};
    tj_context_t* saved = g_ctx;
    g_ctx = g_sep_default_ctx;
    tj_graph_t* g = build_grad(&v);
    g_ctx = saved;
    if (!g) continue;
    tj_cuda_offline_ptx_t ptx;
    memset(&ptx, 0, sizeof(ptx));
    tj_allocator_t al = tj_allocator_system();
    CHECK_OK(tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx));
    CHECK(ptx.num_kernels >= 4 && ptx.num_kernels <= kMaxFusedGradKernels);
    CHECK_EQ_INT(0, ptx.num_host_steps);
    if (ptx.ptx) {
      CHECK(strstr(ptx.ptx, "lg2.approx") != NULL);
      // Forward and lse: Q.K^T on wgmma, m64n64k16 d / 16 times each;
      // dq's S and dP, dkv's S^T and dP^T as many.
      CHECK(count(ptx.ptx, "aligned.m64n64k16") >= 6 * (int)(v.d / 16));
      CHECK(strstr(ptx.ptx, "mma.sync") == NULL);
      if (g_ptxas[0]) {
        char what[64];
        snprintf(what, sizeof(what), "bf16 d%lld wgmma grad", (long long)v.d);
        bool ok = assemble(what, ptx.ptx);
        if (!ok) fprintf(stderr, "%s: ptxas failed or warned\n", what);
        CHECK(ok);
      }
    }
    tj_cuda_offline_ptx_deinitialize(al, &ptx);
    tj_graph_destroy(g);
  }
}

// fa3bwd: |v|'s joint graph in context |ctx| (wgmma by default) for
// |arch|: on sm_90a attention_dkv and attention_dq on wgmma (S^T and dP^T,
// S and dP by m64n64k16 with both operands in shared memory; dV, dK and dQ
// by m64n<d>k16 with A from registers), no mma.sync left, assembled with
// no C75xx warning and at most kMaxGradSpillBytes spilled by any kernel;
// on sm_80 mma.sync throughout.
enum { kMaxGradSpillBytes = 64 };

static void check_wgmma_grad(const variant_t* v, tj_nvptx_arch_t arch,
                             tj_context_t* ctx) {
  char what[160];
  describe(v, what, sizeof(what));
  strcat(what, arch == TJ_NVPTX_SM_90A ? " wgmma grad" : " wgmma grad sm_80");
  if (ctx == g_wide_ctx) strcat(what, " wide");
  if (ctx == g_stepwise_ctx) strcat(what, " stepwise");
  if (ctx == g_pingpong_ctx) strcat(what, " pingpong");
  tj_context_t* saved = g_ctx;
  g_ctx = ctx;
  tj_graph_t* g = build_grad(v);
  g_ctx = saved;
  if (!g) return;
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  tj_allocator_t al = tj_allocator_system();
  CHECK_OK(tj_cuda_compile_ptx(g, NULL, arch, al, &ptx));
  CHECK(ptx.num_kernels >= 4 && ptx.num_kernels <= kMaxFusedGradKernels);
  CHECK_EQ_INT(0, ptx.num_host_steps);
  CHECK(ptx.ptx != NULL);
  if (ptx.ptx && arch == TJ_NVPTX_SM_90A) {
    const char* t = v->dt == TJ_DTYPE_F16 ? ".f16.f16" : ".bf16.bf16";
    char want[96];
    snprintf(want, sizeof(want), "wgmma.mma_async.sync.aligned.m64n64k16.f32%s",
             t);
    // The forward's S, dkv's S^T and dP^T, dq's S and dP: d / 16 each, of
    // 64 keys or queries (wgmma-wide: the forward's and at d 64 dq's of
    // 128).
    char wide[96];
    snprintf(wide, sizeof(wide),
             "wgmma.mma_async.sync.aligned.m64n128k16.f32%s", t);
    CHECK(count(ptx.ptx, want) +
              (ctx == g_wide_ctx ? count(ptx.ptx, wide) : 0) >=
          5 * (int)(v->d / 16));
    snprintf(want, sizeof(want), "wgmma.mma_async.sync.aligned.m64n%dk16.f32%s",
             (int)v->d, t);
    // The forward's P . V, dkv's dV and dK, dq's dQ: 4 k16 steps each, A
    // from registers.
    CHECK(count(ptx.ptx, want) >= 16);
    CHECK(count(ptx.ptx, "}, {%r") >= 16);
    CHECK(strstr(ptx.ptx, "wgmma.wait_group.sync.aligned 1") != NULL);
    CHECK(strstr(ptx.ptx, "mma.sync") == NULL);
    CHECK(strstr(ptx.ptx, "ldmatrix") == NULL);
    // dkv copies lse and delta a step ahead.
    CHECK(strstr(ptx.ptx, "cp.async.ca.shared.global") != NULL);
    if (g_ptxas[0]) {
      g_max_spill = 0;
      bool ok = assemble(what, ptx.ptx);
      if (!ok) fprintf(stderr, "%s: ptxas failed or warned\n", what);
      CHECK(ok);
      if (g_max_spill > kMaxGradSpillBytes)
        fprintf(stderr, "%s: %d bytes spilled\n", what, g_max_spill);
      CHECK(g_max_spill <= kMaxGradSpillBytes);
    }
  } else if (ptx.ptx) {
    CHECK(strstr(ptx.ptx, "wgmma") == NULL);
  }
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
}

TEST(wgmma_grad_variants) {
  // TJ_NVPTX_ATTENTION unset (the default), wgmma-wide, wgmma-stepwise
  // and wgmma-pingpong.
  static const tj_dtype_t dts[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  static const int64_t ds[] = {64, 128};
  // The sanitizer leg (tj_test_sanitizer_subset): the default schedule at
  // every head dim and causality, the other three each at two of the four,
  // one a head dim, alternating (|half|); the plain leg takes them all.
  const bool subset = tj_test_sanitizer_subset();
  for (int di = 0; di < 2; ++di)
    for (int ti = 0; ti < (int)tj_test_num_half_types(); ++ti)
      for (int causal = 0; causal < 2; ++causal) {
        variant_t v = {dts[ti], ds[di], ds[di], 4, 4, causal != 0, 0, false};
        const bool half = !subset || (di + causal) % 2 == 0;
        check_wgmma_grad(&v, TJ_NVPTX_SM_90A, g_default_ctx);
        if (ti == 0 && half) check_wgmma_grad(&v, TJ_NVPTX_SM_90A, g_wide_ctx);
        // f16's (bf16's in the sanitizer leg, which runs it alone).
        if (ti == (int)tj_test_num_half_types() - 1 && (!subset || !half))
          check_wgmma_grad(&v, TJ_NVPTX_SM_90A, g_stepwise_ctx);
        if (half) check_wgmma_grad(&v, TJ_NVPTX_SM_90A, g_pingpong_ctx);
      }
  // Grouped-query heads with symbolic sizes; sm_80 keeps mma.sync.
  variant_t gqa = {TJ_DTYPE_BF16, 128, 128, 8, 2, true, 0, true};
  check_wgmma_grad(&gqa, TJ_NVPTX_SM_90A, g_default_ctx);
  check_wgmma_grad(&gqa, TJ_NVPTX_SM_90A, g_wide_ctx);
  check_wgmma_grad(&gqa, TJ_NVPTX_SM_80, g_default_ctx);
  variant_t mqa = {TJ_DTYPE_F16, 64, 64, 8, 1, false, 0, true};
  check_wgmma_grad(&mqa, TJ_NVPTX_SM_90A, g_default_ctx);
  check_wgmma_grad(&mqa, TJ_NVPTX_SM_90A, g_wide_ctx);
}

TEST(fused_variants) {
  static const tj_dtype_t dts[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  static const int64_t ds[] = {64, 128};
  for (int di = 0; di < 2; ++di)
    for (int ti = 0; ti < (int)tj_test_num_half_types(); ++ti)
      for (int causal = 0; causal < 2; ++causal)
        for (int mask = 0; mask < 3; ++mask) {
          variant_t v = {dts[ti], ds[di],      ds[di], 4,
                         4,       causal != 0, mask,   false};
          check_fused(&v, TJ_NVPTX_SM_90A);
        }
}

TEST(fused_gqa_symbolic_sm80) {
  // Grouped-query heads (K and V with stride 0 along the group), symbolic
  // sizes read at run time, and the sm_80 target (the same instructions).
  variant_t gqa = {TJ_DTYPE_BF16, 128, 128, 8, 2, true, 0, true};
  check_fused(&gqa, TJ_NVPTX_SM_90A);
  check_fused(&gqa, TJ_NVPTX_SM_80);
  variant_t mqa = {TJ_DTYPE_F16, 64, 64, 8, 1, false, 1, true};
  check_fused(&mqa, TJ_NVPTX_SM_90A);
  check_fused(&mqa, TJ_NVPTX_SM_80);
}

TEST(fused_f32) {
  // f32 on FFMA: head dims 64 and 128 with every mask and causal, and the
  // odd ones (d / 4 odd or not a multiple of 8: padded rows, partial chunk
  // slots, partial tile copies), GQA, symbolic sizes, sm_80.
  static const int64_t ds[] = {64, 128};
  for (int di = 0; di < 2; ++di)
    for (int causal = 0; causal < 2; ++causal)
      for (int mask = 0; mask < 3; ++mask) {
        variant_t v = {TJ_DTYPE_F32, ds[di], ds[di], 4, 4,
                       causal != 0,  mask,   false};
        check_fused(&v, TJ_NVPTX_SM_90A);
      }
  static const variant_t odd[] = {
      {TJ_DTYPE_F32, 4, 4, 2, 2, true, 1, false},
      {TJ_DTYPE_F32, 20, 20, 4, 2, false, 2, false},
      {TJ_DTYPE_F32, 80, 80, 8, 2, true, 0, true},
      {TJ_DTYPE_F32, 100, 100, 4, 1, false, 1, true},
  };
  for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); ++i)
    check_fused(&odd[i], TJ_NVPTX_SM_90A);
  check_fused(&odd[2], TJ_NVPTX_SM_80);
}

TEST(fused_grad_variants) {
  static const tj_dtype_t dts[] = {TJ_DTYPE_BF16, TJ_DTYPE_F16};
  static const int64_t ds[] = {64, 128};
  for (int di = 0; di < 2; ++di)
    for (int ti = 0; ti < (int)tj_test_num_half_types(); ++ti)
      for (int causal = 0; causal < 2; ++causal) {
        variant_t v = {dts[ti], ds[di], ds[di], 4, 4, causal != 0, 0, false};
        check_fused_grad(&v, TJ_NVPTX_SM_90A);
      }
  // Grouped-query heads with symbolic B, T and S, on sm_90a and sm_80.
  variant_t gqa = {TJ_DTYPE_BF16, 128, 128, 8, 2, true, 0, true};
  check_fused_grad(&gqa, TJ_NVPTX_SM_90A);
  check_fused_grad(&gqa, TJ_NVPTX_SM_80);
  variant_t mqa = {TJ_DTYPE_F16, 64, 64, 8, 1, false, 0, true};
  check_fused_grad(&mqa, TJ_NVPTX_SM_90A);
}

TEST(grad_with_mask_decomposed) {
  // A bool mask: the backward's three nodes decompose (the scores
  // materialized), still no graph break.
  variant_t v = {TJ_DTYPE_BF16, 64, 64, 4, 2, false, 1, false};
  tj_graph_t* g = build_grad(&v);
  if (!g) return;
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  tj_allocator_t al = tj_allocator_system();
  CHECK_OK(tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx));
  CHECK(ptx.num_kernels > kMaxFusedGradKernels);
  CHECK_EQ_INT(0, ptx.num_host_steps);
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
}

TEST(decomposed_outside_the_template) {
  // f32 with a head dim past 128 or not a multiple of 4, f16/bf16 with a
  // head dim of 80, dv != d: batched matmuls and a masked softmax.
  static const variant_t vs[] = {
      {TJ_DTYPE_F32, 160, 160, 4, 4, true, 0, false},
      {TJ_DTYPE_F32, 6, 6, 4, 4, false, 1, false},
      {TJ_DTYPE_F32, 64, 32, 4, 2, false, 0, false},
      {TJ_DTYPE_BF16, 80, 80, 4, 4, false, 0, false},
      {TJ_DTYPE_F16, 64, 128, 4, 2, false, 1, false},
  };
  for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); ++i) {
    tj_graph_t* g = build(&vs[i]);
    if (!g) continue;
    tj_cuda_offline_ptx_t ptx;
    memset(&ptx, 0, sizeof(ptx));
    tj_allocator_t al = tj_allocator_system();
    CHECK_OK(tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx));
    CHECK(ptx.num_kernels > 1);
    CHECK_EQ_INT(0, ptx.num_host_steps);
    tj_cuda_offline_ptx_deinitialize(al, &ptx);
    tj_graph_destroy(g);
  }
}

// The offline CUDA compile of a fused attention (bf16, GQA, a bool mask,
// symbolic T) with allocation |al|: context, graph, passes, lowering,
// emission and PTX all from it.
static tj_status_t ptx_compile(tj_allocator_t al) {
  tj_context_options_t co = tj_test_context_options();
  co.allocator = al;
  co.log = "";
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  s = tj_graph_create(ctx, "attn_oom", &g);
  if (!s) {
    int64_t T = tj_graph_symbol(g, "T");
    tj_dtype_t dt = TJ_DTYPE_BF16;
    tj_value_t q = tj_graph_input(g, dt, 4, (int64_t[]){1, 4, T, 64}, "q");
    tj_value_t k = tj_graph_input(g, dt, 4, (int64_t[]){1, 2, 9, 64}, "k");
    tj_value_t v = tj_graph_input(g, dt, 4, (int64_t[]){1, 2, 9, 64}, "v");
    tj_value_t m = tj_graph_input(g, TJ_DTYPE_BOOL, 2, (int64_t[]){T, 9}, "m");
    tj_graph_output(g, tj_graph_attention(g, q, k, v, m, 0, true), "y");
    s = tj_graph_finalize(g);
  }
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  if (!s) s = tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx);
  if (!s && ptx.num_kernels != 1)
    s = tj_status_make(TJ_STATUS_INTERNAL, "attn_oom: %u kernels",
                       ptx.num_kernels);
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(oom_sweep) {
  CHECK_OK(ptx_compile(tj_allocator_system()));
  CHECK(tj_test_oom_sweep("cuda attention ptx", ptx_compile) > 0);
}

// The same for the fused backward (fabwdcuda): the joint graph of a causal
// grouped-query attention with symbolic T, its lse, dq and dkv kernels.
static tj_status_t grad_ptx_compile(tj_allocator_t al) {
  tj_context_options_t co = tj_test_context_options();
  co.allocator = al;
  co.log = "";
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  tj_graph_t* joint = NULL;
  s = tj_graph_create(ctx, "attn_grad_oom", &g);
  if (!s) {
    int64_t T = tj_graph_symbol(g, "T");
    tj_dtype_t dt = TJ_DTYPE_F16;
    tj_value_t q = tj_graph_input(g, dt, 4, (int64_t[]){1, 4, T, 64}, "q");
    tj_value_t k = tj_graph_input(g, dt, 4, (int64_t[]){1, 2, T, 64}, "k");
    tj_value_t v = tj_graph_input(g, dt, 4, (int64_t[]){1, 2, T, 64}, "v");
    tj_graph_output(g, tj_graph_attention(g, q, k, v, tj_value_none(), 0, true),
                    "y");
    s = tj_graph_finalize(g);
  }
  if (!s) s = tj_graph_grad(g, 0, NULL, 3, (int32_t[]){0, 1, 2}, &joint);
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  if (!s) s = tj_cuda_compile_ptx(joint, NULL, TJ_NVPTX_SM_90A, al, &ptx);
  if (!s && ptx.num_kernels > kMaxFusedGradKernels)
    s = tj_status_make(TJ_STATUS_INTERNAL, "attn_grad_oom: %u kernels",
                       ptx.num_kernels);
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(grad_oom_sweep) {
  CHECK_OK(grad_ptx_compile(tj_allocator_system()));
  CHECK(tj_test_oom_sweep("cuda attention grad ptx", grad_ptx_compile) > 0);
}

// lsefwd: the same joint graph split with save_attention_lse, both halves
// compiled offline: the forward one kernel writing y and lse.
static tj_status_t split_ptx_compile(tj_allocator_t al) {
  tj_context_options_t co = tj_test_context_options();
  co.allocator = al;
  co.log = "";
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
  if (s) return s;
  tj_graph_t *g = NULL, *joint = NULL, *fwd = NULL, *bwd = NULL;
  s = tj_graph_create(ctx, "attn_split_oom", &g);
  if (!s) {
    int64_t T = tj_graph_symbol(g, "T");
    tj_dtype_t dt = TJ_DTYPE_BF16;
    tj_value_t q = tj_graph_input(g, dt, 4, (int64_t[]){1, 4, T, 64}, "q");
    tj_value_t k = tj_graph_input(g, dt, 4, (int64_t[]){1, 2, T, 64}, "k");
    tj_value_t v = tj_graph_input(g, dt, 4, (int64_t[]){1, 2, T, 64}, "v");
    tj_graph_output(g, tj_graph_attention(g, q, k, v, tj_value_none(), 0, true),
                    "y");
    s = tj_graph_finalize(g);
  }
  if (!s) s = tj_graph_grad(g, 0, NULL, 3, (int32_t[]){0, 1, 2}, &joint);
  tj_partition_options_t po;
  tj_partition_options_initialize(&po);
  po.save_attention_lse = true;
  if (!s) s = tj_graph_partition(joint, 3, 1, &po, &fwd, &bwd, NULL);
  tj_cuda_offline_ptx_t ptx[2];
  memset(ptx, 0, sizeof(ptx));
  if (!s) s = tj_cuda_compile_ptx(fwd, NULL, TJ_NVPTX_SM_90A, al, &ptx[0]);
  if (!s) s = tj_cuda_compile_ptx(bwd, NULL, TJ_NVPTX_SM_90A, al, &ptx[1]);
  if (!s && (ptx[0].num_kernels != 1 || !ptx[0].ptx ||
             entries_with(ptx[0].ptx, "lg2.approx", NULL) != 1))
    s = tj_status_make(TJ_STATUS_INTERNAL,
                       "attn_split_oom: %u forward kernels, lse not written",
                       ptx[0].num_kernels);
  tj_cuda_offline_ptx_deinitialize(al, &ptx[0]);
  tj_cuda_offline_ptx_deinitialize(al, &ptx[1]);
  tj_graph_destroy(fwd);
  tj_graph_destroy(bwd);
  tj_graph_destroy(joint);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

TEST(split_oom_sweep) {
  CHECK_OK(split_ptx_compile(tj_allocator_system()));
  CHECK(tj_test_oom_sweep("cuda attention split ptx", split_ptx_compile) > 0);
}

// An ATTENTION kernel as lowering makes it: space [B, Hkv=2, G=2, T, S]
// with B, T and S params 0, 1, 2, q's row stride param 3 (a view whose
// row pitch is only known at run time) and the output's outer strides
// params 4, 5, 6.
static tj_kir_t* make_kernel(const char* name, tj_dtype_t dt, int64_t d) {
  tj_kir_t* k = NULL;
  CHECK_OK(tj_kir_create(tj_allocator_system(), TJ_KIR_ATTENTION, name, &k));
  if (!k) return NULL;
  uint32_t pb = tj_kir_add_param(k, "B"), pt = tj_kir_add_param(k, "T"),
           ps = tj_kir_add_param(k, "S"), pq = tj_kir_add_param(k, "qrow"),
           p0 = tj_kir_add_param(k, "ob"), p1 = tj_kir_add_param(k, "oh"),
           p2 = tj_kir_add_param(k, "og");
  tj_kir_ival_t dims[5] = {tj_kir_runtime(pb), tj_kir_constant(2),
                           tj_kir_constant(2), tj_kir_runtime(pt),
                           tj_kir_runtime(ps)};
  tj_kir_set_space(k, 5, dims);
  tj_kir_ival_t z = tj_kir_constant(0), dd = tj_kir_constant(d);
  // Inputs' outer strides are left 0 (a broadcast): what the launch checks
  // are the strides of rows and of the output.
  tj_kir_ival_t sq[5] = {z, z, z, tj_kir_runtime(pq), z};
  tj_kir_ival_t skv[5] = {z, z, z, z, dd};
  tj_kir_ival_t so[5] = {tj_kir_runtime(p0), tj_kir_runtime(p1),
                         tj_kir_runtime(p2), dd, z};
  tj_kir_add_buffer(k, "q", dt, TJ_KIR_ATTN_Q, sq);
  tj_kir_add_buffer(k, "k", dt, TJ_KIR_ATTN_K, skv);
  tj_kir_add_buffer(k, "v", dt, TJ_KIR_ATTN_V, skv);
  tj_kir_add_buffer(k, "out", dt, TJ_KIR_OUTPUT, so);
  tj_kir_attention_t a = {.d = dd, .dv = dd, .scale = 0.125, .causal = true};
  tj_kir_set_attention(k, &a);
  CHECK_OK(tj_kir_finalize(k));
  return k;
}

static void expect(tj_status_t s, tj_status_code_t code, const char* needle) {
  CHECK_EQ_INT(code, tj_status_code(s));
  if (s && !strstr(tj_status_message(s), needle))
    fprintf(stderr, "message: %s (want '%s')\n", tj_status_message(s), needle);
  CHECK(s && strstr(tj_status_message(s), needle) != NULL);
  tj_status_free(s);
}

TEST(launch_and_refusals) {
  tj_allocator_t al = tj_allocator_system();
  tj_nvptx_target_t* target = NULL;
  CHECK_OK(tj_nvptx_target_create(al, TJ_NVPTX_SM_90A, &target));
  tj_nvptx_module_t* mod = NULL;
  CHECK_OK(tj_nvptx_module_new(target, al, "attn", &mod));
  tj_kir_t* k = make_kernel("attn", TJ_DTYPE_BF16, 128);
  tj_nvptx_kernel_t info;
  // The mma.sync kernel (the default is the wgmma one, below).
  tj_nvptx_options_t mo;
  memset(&mo, 0, sizeof(mo));
  mo.attention_kernel = TJ_NVPTX_ATTENTION_MMA_SYNC;
  if (k && mod) {
    CHECK_OK(tj_nvptx_module_add_kernel(mod, k, &mo, &info));
    CHECK_EQ_INT(128, info.threads);
    // Q, two K tiles and V: 4 x 64 rows x 256 bytes.
    CHECK_EQ_INT(4 * 64 * 256, info.shared_bytes);
    // B 3, T 130 (3 query tiles), S 77, q rows 128 apart: one block per
    // query tile and head, 128 threads.
    int64_t sc[7] = {3, 130, 77, 128, 4 * 130 * 128, 2 * 130 * 128, 130 * 128};
    tj_nvptx_launch_t l;
    CHECK_OK(tj_nvptx_launch_config(k, &info, sc, 132, &l));
    CHECK_EQ_INT(3 * 2 * 2 * 3, l.grid[0]);
    CHECK_EQ_INT(128, l.block[0]);
    CHECK_EQ_INT(info.shared_bytes, l.shared_bytes);
    CHECK(!l.empty);
    // T 0 or B 0: nothing to launch.
    int64_t none[7] = {3, 0, 77, 128, 0, 0, 0};
    CHECK_OK(tj_nvptx_launch_config(k, &info, none, 132, &l));
    CHECK(l.empty);
    // A q row pitch that is not a whole number of 16-byte chunks.
    int64_t odd[7] = {3, 130, 77, 132, 4 * 130 * 128, 2 * 130 * 128, 130 * 128};
    expect(tj_nvptx_launch_config(k, &info, odd, 132, &l),
           TJ_STATUS_UNSUPPORTED, "stride 132 in dim 3");
    // A negative size.
    int64_t neg[7] = {3, -1, 77, 128, 0, 0, 0};
    expect(tj_nvptx_launch_config(k, &info, neg, 132, &l),
           TJ_STATUS_INVALID_ARGUMENT, "dim 3 is -1");
    // Base pointers: 16-byte aligned or UNSUPPORTED, naming the operand.
    uint64_t ok[4] = {0x1000, 0x2000, 0x3000, 0x4000};
    CHECK_OK(tj_nvptx_gemm_check_pointers(k, &info, ok));
    uint64_t bad[4] = {0x1000, 0x2008, 0x3000, 0x4000};
    expect(tj_nvptx_gemm_check_pointers(k, &info, bad), TJ_STATUS_UNSUPPORTED,
           "attention operand %k");
  }
  tj_kir_destroy(k);
  // f32: Q, K, V tiles of 64 rows of 17 16-byte chunks (16 padded to odd)
  // and P [64][68]; q's rows a whole number of 4 floats.
  tj_kir_t* f32 = make_kernel("attn_f32", TJ_DTYPE_F32, 64);
  if (f32 && mod) {
    CHECK_OK(tj_nvptx_module_add_kernel(mod, f32, NULL, &info));
    CHECK_EQ_INT(128, info.threads);
    CHECK_EQ_INT(3 * 64 * 17 * 16 + 64 * 68 * 4, info.shared_bytes);
    int64_t sc[7] = {3, 130, 77, 68, 4 * 130 * 64, 2 * 130 * 64, 130 * 64};
    tj_nvptx_launch_t l;
    CHECK_OK(tj_nvptx_launch_config(f32, &info, sc, 132, &l));
    CHECK_EQ_INT(3 * 2 * 2 * 3, l.grid[0]);
    CHECK_EQ_INT(info.shared_bytes, l.shared_bytes);
    int64_t odd[7] = {3, 130, 77, 66, 4 * 130 * 64, 2 * 130 * 64, 130 * 64};
    expect(tj_nvptx_launch_config(f32, &info, odd, 132, &l),
           TJ_STATUS_UNSUPPORTED, "stride 66 in dim 3, not a multiple of 4");
  }
  tj_kir_destroy(f32);
  // d 128: 32-key K and V tiles (33 chunks a row) and P [64][36], 75 KiB,
  // so that two blocks share an SM.
  tj_kir_t* f32_128 = make_kernel("attn_f32_d128", TJ_DTYPE_F32, 128);
  if (f32_128 && mod) {
    CHECK_OK(tj_nvptx_module_add_kernel(mod, f32_128, NULL, &info));
    CHECK_EQ_INT((64 + 2 * 32) * 33 * 16 + 64 * 36 * 4, info.shared_bytes);
  }
  tj_kir_destroy(f32_128);
  // What the templates do not take: UNSUPPORTED, naming the kernel.
  tj_kir_t* f32_wide = make_kernel("attn_f32_d132", TJ_DTYPE_F32, 132);
  if (f32_wide && mod)
    expect(tj_nvptx_module_add_kernel(mod, f32_wide, NULL, &info),
           TJ_STATUS_UNSUPPORTED, "up to 128, multiples of 4 (d 132, dv 132)");
  tj_kir_destroy(f32_wide);
  tj_kir_t* f32_d6 = make_kernel("attn_f32_d6", TJ_DTYPE_F32, 6);
  if (f32_d6 && mod)
    expect(tj_nvptx_module_add_kernel(mod, f32_d6, NULL, &info),
           TJ_STATUS_UNSUPPORTED, "multiples of 4 (d 6, dv 6)");
  tj_kir_destroy(f32_d6);
  tj_kir_t* d80 = make_kernel("attn_d80", TJ_DTYPE_F16, 80);
  if (d80 && mod)
    expect(tj_nvptx_module_add_kernel(mod, d80, NULL, &info),
           TJ_STATUS_UNSUPPORTED, "head dims 64 and 128 (d 80, dv 80)");
  tj_kir_destroy(d80);
  // The wgmma forward: 256 threads, Q (128 rows) and two K and two V
  // tiles of 64 keys (d 128), plus the 1024-byte alignment slack; 128
  // query rows a block.
  tj_nvptx_options_t wo;
  memset(&wo, 0, sizeof(wo));
  wo.attention_kernel = TJ_NVPTX_ATTENTION_WGMMA;
  tj_kir_t* wk = make_kernel("attn_wgmma", TJ_DTYPE_BF16, 128);
  if (wk && mod) {
    // No options: the default, the same kernel.
    CHECK_OK(tj_nvptx_module_add_kernel(mod, wk, NULL, &info));
    CHECK_EQ_INT(256, info.threads);
    tj_nvptx_module_remove_kernel(mod, info.entry);
    CHECK_OK(tj_nvptx_module_add_kernel(mod, wk, &wo, &info));
    CHECK_EQ_INT(256, info.threads);
    CHECK_EQ_INT(128 * 256 + 4 * 64 * 256 + 1024, info.shared_bytes);
    int64_t sc[7] = {3, 130, 77, 128, 4 * 130 * 128, 2 * 130 * 128, 130 * 128};
    tj_nvptx_launch_t l;
    CHECK_OK(tj_nvptx_launch_config(wk, &info, sc, 132, &l));
    CHECK_EQ_INT(3 * 2 * 2 * 2, l.grid[0]);
    CHECK_EQ_INT(256, l.block[0]);
    CHECK_EQ_INT(info.shared_bytes, l.shared_bytes);
    int64_t one[7] = {1, 1, 77, 128, 4 * 128, 2 * 128, 128};
    CHECK_OK(tj_nvptx_launch_config(wk, &info, one, 132, &l));
    CHECK_EQ_INT(4, l.grid[0]);
  }
  tj_kir_destroy(wk);
  tj_nvptx_module_destroy(mod);
  tj_nvptx_target_destroy(target);
}

int main(int argc, char** argv) {
  if (argc > 1) g_ptxas = argv[1];
  if (!g_ptxas[0]) printf("# ptxas not given: PTX checked as text only\n");
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  // Settings are read when a context is created. g_ctx: the mma.sync
  // kernel; the default (wgmma where it applies) in default_is_wgmma.
  setenv("TJ_NVPTX_ATTENTION", "mma", 1);
  CHECK_OK(tj_context_create(&o, &g_ctx));
  unsetenv("TJ_NVPTX_ATTENTION");
  CHECK_OK(tj_context_create(&o, &g_default_ctx));
  setenv("TJ_NVPTX_ATTENTION", "wgmma", 1);
  CHECK_OK(tj_context_create(&o, &g_wgmma_ctx));
  setenv("TJ_NVPTX_ATTENTION", "wgmma-wide", 1);
  CHECK_OK(tj_context_create(&o, &g_wide_ctx));
  setenv("TJ_NVPTX_ATTENTION", "wgmma-stepwise", 1);
  CHECK_OK(tj_context_create(&o, &g_stepwise_ctx));
  setenv("TJ_NVPTX_ATTENTION", "wgmma-pingpong", 1);
  CHECK_OK(tj_context_create(&o, &g_pingpong_ctx));
  unsetenv("TJ_NVPTX_ATTENTION");
  setenv("TJ_ATTENTION_LSE", "separate", 1);
  CHECK_OK(tj_context_create(&o, &g_sep_default_ctx));
  setenv("TJ_NVPTX_ATTENTION", "mma", 1);
  CHECK_OK(tj_context_create(&o, &g_sep_ctx));
  unsetenv("TJ_ATTENTION_LSE");
  unsetenv("TJ_NVPTX_ATTENTION");
  RUN_TEST(default_is_wgmma);
  RUN_TEST(wgmma_variants);
  RUN_TEST(wgmma_lse_in_grad);
  RUN_TEST(wgmma_grad_variants);
  RUN_TEST(lse_joins_the_forward);
  RUN_TEST(lse_joins_only_the_same_scores);
  RUN_TEST(lse_saved_by_the_partition);
  RUN_TEST(fused_variants);
  RUN_TEST(fused_gqa_symbolic_sm80);
  RUN_TEST(fused_f32);
  RUN_TEST(fused_grad_variants);
  RUN_TEST(grad_with_mask_decomposed);
  RUN_TEST(decomposed_outside_the_template);
  RUN_TEST(oom_sweep);
  RUN_TEST(grad_oom_sweep);
  RUN_TEST(split_oom_sweep);
  RUN_TEST(launch_and_refusals);
  tj_context_destroy(g_sep_ctx);
  tj_context_destroy(g_sep_default_ctx);
  tj_context_destroy(g_default_ctx);
  tj_context_destroy(g_wide_ctx);
  tj_context_destroy(g_stepwise_ctx);
  tj_context_destroy(g_pingpong_ctx);
  tj_context_destroy(g_wgmma_ctx);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
