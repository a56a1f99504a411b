// backends/cuda/cuda_backend.c: the CUDA target of the compile driver
// (tj_backend_cuda, backends/runtime/backend.h), a thin adapter over the CUDA
// program (cuda_executable.h): each program of an executable (the generic
// one, and one per specialized shape) is a tj_cuda_program_t with its own
// module, device arena and CUDA graphs, over the driver's run plan. Also
// tj_cuda_compile_ptx (the same compile with an offline program, stopping
// at PTX) and tj_executable_cuda_stats.

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backends/runtime/backend.h"
#include "backends/cuda/cuda_executable.h"
#include "backends/cuda/cuda_program.h"
#include "backends/cuda/cuda_runtime.h"
#include "jit/cache.h"
#include "jit/kernel_dump.h"
#include "jit/nvptx.h"
#include "lib/custom_op.h"
#include "lib/env.h"
#include "lib/quant.h"
#include "lib/window.h"

typedef struct program_t {
  tj_cuda_program_t* cuda;
  tj_lowered_kernel_t* kernels;  // borrowed by |cuda|; owned here
  uint32_t num_kernels;
} program_t;

typedef struct target_t {
  tj_backend_config_t config;  // its |arg| is not kept
  bool offline;
  tj_nvptx_arch_t offline_arch;
  bool offline_chunks;  // tj_cuda_offline_arg_t.chunks
  uint32_t offline_threads;
  bool log_cache, log_fusion;
  bool cache_opened;
  char cache_dir[1024];  // the disk cache; "" when disabled
  // The program the generic run plan's kernels are added to while it is
  // built (accept), finished by the generic compile.
  tj_cuda_program_t* pending;
  // Its emitter options and arch, for conv_epilogue_fits (every program
  // of the target has them).
  tj_nvptx_options_t nv_options;
  tj_nvptx_arch_t arch;
  // Runs of one executable are serialized (tj_executable_run), over all
  // its programs: a specialized shape's program is another program.
  pthread_mutex_t run_mutex;
} target_t;

static tj_status_t create_program(target_t* t, tj_cuda_program_t** out) {
  if (!t->offline)
    return tj_cuda_program_create(t->config.context, t->config.options, out);
  TJ_RETURN_IF_ERROR(tj_cuda_program_create_offline(
      t->config.context, t->config.options, t->offline_arch, out));
  if (t->offline_chunks)
    tj_cuda_program_set_offline_chunks(*out, t->offline_threads);
  return NULL;
}

static tj_status_t cuda_open(void* target, const tj_backend_config_t* config) {
  target_t* t = target;
  t->config = *config;
  t->config.arg = NULL;
  if (config->arg) {
    t->offline = true;
    const tj_cuda_offline_arg_t* arg = config->arg;
    t->offline_arch = arg->arch;
    t->offline_chunks = arg->chunks;
    t->offline_threads = arg->threads;
  }
  t->log_cache = (config->log & TJ_LOG_CACHE) != 0;
  t->log_fusion = (config->log & TJ_LOG_FUSION) != 0;
  // The device first, so that a machine without a GPU fails fast and
  // clearly.
  TJ_RETURN_IF_ERROR(create_program(t, &t->pending));
  t->nv_options = t->pending->nv_options;
  t->arch = t->pending->arch;
  if (pthread_mutex_init(&t->run_mutex, NULL) != 0) {
    tj_cuda_program_destroy(t->pending);
    t->pending = NULL;
    return tj_status_make(TJ_STATUS_BACKEND_FAILURE,
                          "tj_compile: pthread_mutex_init failed");
  }
  return NULL;
}

static void cuda_close(void* target) {
  target_t* t = target;
  tj_cuda_program_destroy(t->pending);
  pthread_mutex_destroy(&t->run_mutex);
}

static tj_status_t cuda_accept(void* target, const tj_lowered_kernel_t* kernels,
                               uint32_t count) {
  target_t* t = target;
  // qgemm (issue 17): an i8/u8 gemm runs on 8-bit wgmma
  // (jit/emit_nvptx_qgemm.c); where that cannot (not sm_90a, operands
  // neither k- nor n-contiguous) the emitter's UNSUPPORTED sends the group
  // to the host.
  return tj_cuda_program_add_kernels(t->pending, kernels, count);
}

// Issue 14: attention runs as one flash-attention kernel (the ATTENTION
// template) when its rank fits the kernel IR's space, the query heads are
// a constant multiple of the kv heads, the head dims of q/k and v are
// equal and q, k and v are f16 or bf16 with head dims of 64 or 128
// (tensor cores, jit/emit_nvptx_attention.c) or f32 with head dims up to
// 128 that are multiples of 4 (FFMA, jit/emit_nvptx_attention_f32.c: the
// 16-byte copies take 4 floats). Otherwise it decomposes into batched
// matmuls and a masked softmax. Its backward nodes (attention_lse,
// attention_dq, attention_dkv; fabwdcuda) stay whole on the f16/bf16 terms
// and with no mask operand (causal or none): the lse variant of the forward
// kernel and the two backward kernels of jit/emit_nvptx_attention_bwd.c;
// with a mask, or in f32, all three decompose together, so that decompose
// can still take p as the softmax of the scores the lse node would give.
//
// qfold (issue 17): a dequantize of constant weights read only as matmuls'
// B (f32 A; tj_quant_gemm_weight) stays whole, so that the GEMM reads the
// weight as its quantized bytes (jit/emit_nvptx_wqgemm.c) instead of a
// widened f32 copy every call.
static bool cuda_native_op(const tj_graph_t* g, uint32_t node) {
  const tj_node_t* n = &g->nodes[node];
  if (n->op == TJ_OP_DEQUANTIZE) return tj_quant_gemm_weight(g, node, true);
  // fp8 (issue 17): matmul_f8 of matrices stays whole for the 8-bit GEMM
  // template's fp8 wgmma (jit/emit_nvptx_qgemm.c); where it cannot run
  // (not sm_90a, strides) the emitter's UNSUPPORTED makes it a graph
  // break, as for matmul_i32.
  if (n->op == TJ_OP_MATMUL_F8) {
    return g->nodes[n->operands[0]].rank >= 2 &&
           g->nodes[n->operands[1]].rank >= 2;
  }
  // Issue 15: the dense convs x86's CONV template keeps run on the NVPTX
  // one (jit/emit_nvptx_conv.c), the same kernel IR (grouped convs, which
  // x86 keeps too, decompose here); depthwise convs and
  // max/avg pools of at most TJ_NVPTX_WINDOW_MAX_TAPS taps on its direct
  // window variant (cudabw, jit/emit_nvptx_window.c) instead of
  // decompose's pointwise kernel per pad box.
  if (n->op == TJ_OP_CONV) {
    return tj_window_conv_whole(g, node, false) ||
           tj_window_direct(g, node, TJ_NVPTX_WINDOW_MAX_TAPS);
  }
  if (n->op == TJ_OP_MAX_POOL || n->op == TJ_OP_AVG_POOL)
    return tj_window_direct(g, node, TJ_NVPTX_WINDOW_MAX_TAPS);
  const bool lse = n->op == TJ_OP_ATTENTION_LSE;
  const bool bwd = n->op == TJ_OP_ATTENTION_DQ || n->op == TJ_OP_ATTENTION_DKV;
  if (n->op != TJ_OP_ATTENTION && !lse && !bwd) return false;
  const tj_node_t* q = &g->nodes[n->operands[0]];
  if (q->rank < 3 || q->rank > 7) return false;
  const uint32_t mask = n->operands[lse ? 2 : 3];
  if ((lse || bwd) && mask != TJ_NODE_NONE) return false;
  const tj_node_t* k = &g->nodes[n->operands[1]];
  const tj_node_t* v = &g->nodes[n->operands[lse ? 1 : 2]];
  tj_dtype_t dt = q->dtype;
  // f32 has a forward kernel only.
  const bool f32 = dt == TJ_DTYPE_F32 && n->op == TJ_OP_ATTENTION;
  if ((dt != TJ_DTYPE_F16 && dt != TJ_DTYPE_BF16 && !f32) || k->dtype != dt ||
      v->dtype != dt || k->rank < 3 || v->rank < 3) {
    return false;
  }
  if (bwd && (g->nodes[n->operands[4]].dtype != dt ||
              g->nodes[n->operands[5]].dtype != TJ_DTYPE_F32 ||
              g->nodes[n->operands[6]].dtype != TJ_DTYPE_F32)) {
    return false;
  }
  int64_t d = q->dims[q->rank - 1], dv = v->dims[v->rank - 1];
  if (dv != d || k->dims[k->rank - 1] != d) return false;
  if (f32 ? d < 4 || d > 128 || d % 4 != 0 : d != 64 && d != 128) return false;
  int64_t h = q->dims[q->rank - 3], hkv = k->dims[k->rank - 3];
  return h == hkv || (h >= 0 && hkv > 0 && h % hkv == 0);
}

// Issue 15: the tensor-core GEMMs read A and B 16 bytes at a time, so
// check_gemm_alignment (cuda_program.c) refuses a half matmul whose rows
// are not whole 16-byte vectors: a row-major A of K, or a row-major B of
// N (a transposed B, x @ w^T, is read along k: K), not a multiple of 8.
// Such a kernel ran on the host, on the reference interpreter (the ONNX
// node suites' bf16 and f16 attention, einsum and flexattention of K
// 3-6); decompose writes it as a reduction instead. Symbolic dims and
// other forms (a transposed A, a vector, a dequantized weight for the
// weight-only GEMM) stay the GEMM's, checked as before; f32 too, whose
// exact kernel takes any stride (TF32 is a run option), and the 8-bit
// GEMMs (matmul_i32, matmul_f8: left on the host).
static bool cuda_matmul_misaligned(const tj_graph_t* g, uint32_t node) {
  const tj_node_t* n = &g->nodes[node];
  if (n->op != TJ_OP_MATMUL ||
      (n->dtype != TJ_DTYPE_F16 && n->dtype != TJ_DTYPE_BF16)) {
    return false;
  }
  const tj_node_t* a = &g->nodes[n->operands[0]];
  const tj_node_t* b = &g->nodes[n->operands[1]];
  if (a->rank < 2 || b->rank < 2 || a->op == TJ_OP_TRANSPOSE ||
      a->op == TJ_OP_DEQUANTIZE || b->op == TJ_OP_DEQUANTIZE) {
    return false;
  }
  const int64_t k = a->dims[a->rank - 1], nn = b->dims[b->rank - 1];
  const bool b_kmajor = b->op == TJ_OP_TRANSPOSE &&
                        b->attrs.num_ints == (uint32_t)b->rank &&
                        b->attrs.ints[b->rank - 1] == b->rank - 2 &&
                        b->attrs.ints[b->rank - 2] == b->rank - 1;
  if (tj_dim_is_const(k) && k % 8 != 0) return true;
  return !b_kmajor && tj_dim_is_const(nn) && nn % 8 != 0;
}

// Issue 15: a conv whose launch would split k in more than two slices at
// its smallest batch (a symbolic batch taken as 1: one executable serves
// every batch), in the tiles its kernel takes, keeps its followers out: a
// kernel with an epilogue never splits (jit/emit_nvptx_conv.c), and the
// split is worth more than the fusion there (resnet18's 7x7 512-channel
// layers at batch 1: 4 blocks of 144 k-tiles unsplit). Two slices at most
// halve a short conv's time at that batch, while the fused followers save
// a kernel and a pass over the output at every batch (resnet18's first
// stage, 2 slices at batch 1: four add/relu kernels of 0.066 ms at batch
// 32 on the H200). Offline (no device) the SM count is an H100/H200's.
static bool cuda_conv_epilogue_fits(void* target, const tj_graph_t* g,
                                    uint32_t node) {
  enum { kOfflineSms = 132 };
  const target_t* t = target;
  const tj_node_t* y = &g->nodes[node];
  const tj_node_t* w = &g->nodes[y->operands[1]];
  if (y->rank < 3 || w->rank != y->rank) return true;
  int64_t pixels = tj_dim_is_const(y->dims[0]) ? y->dims[0] : 1;
  int64_t k = w->dims[1];
  for (int32_t d = 2; d < y->rank; ++d) {
    if (!tj_dim_is_const(y->dims[d]) || !tj_dim_is_const(w->dims[d]))
      return true;  // not the CONV template's (constant sizes only)
    pixels *= y->dims[d];
    k *= w->dims[d];
  }
  if (!tj_dim_is_const(y->dims[1]) || !tj_dim_is_const(w->dims[1])) return true;
  int32_t sms = t && t->pending && t->pending->device
                    ? t->pending->device->num_sms
                    : kOfflineSms;
  return tj_nvptx_conv_slices(t ? &t->nv_options : NULL,
                              t ? t->arch : TJ_NVPTX_SM_90A, pixels, y->dims[1],
                              k, sms) <= 2;
}

// swiglu (issue 14): the wgmma GEMMs (sm_90a) run two matmuls of one A as
// a dual GEMM (jit/emit_nvptx_wgmma.c): f16/bf16 operands, B [K, N] (or
// its transpose, [N, K] read K-major) of constant sizes whose rows are
// 16-byte multiples, as cp.async and TMA copy them. Elsewhere (mma.sync
// GPUs, f32 on TF32) each matmul keeps its kernel.
static bool cuda_dual_gemm(void* target, const tj_graph_t* g, uint32_t a,
                           uint32_t b) {
  const target_t* t = target;
  if (!t || !t->pending || t->pending->arch != TJ_NVPTX_SM_90A) return false;
  const tj_node_t* x = &g->nodes[a];
  const tj_node_t* y = &g->nodes[b];
  const tj_node_t* in = &g->nodes[x->operands[0]];
  if (in->dtype != TJ_DTYPE_F16 && in->dtype != TJ_DTYPE_BF16) return false;
  for (int i = 0; i < 2; ++i) {
    const tj_node_t* w = &g->nodes[(i ? y : x)->operands[1]];
    if (w->op == TJ_OP_TRANSPOSE) w = &g->nodes[w->operands[0]];
    if (w->dtype != in->dtype || w->rank != 2) return false;
    for (int32_t d = 0; d < 2; ++d) {
      if (!tj_dim_is_const(w->dims[d]) || w->dims[d] % 8 != 0) return false;
    }
  }
  return true;
}

static void cuda_release(void* target, void* program) {
  target_t* t = target;
  program_t* p = program;
  if (!p) return;
  tj_cuda_program_destroy(p->cuda);  // borrows the kernels
  tj_run_plan_free_kernels(t->config.allocator, p->kernels, p->num_kernels);
  tj_free(t->config.allocator, p, sizeof(*p));
}

// A specialization's program: its kernels added step by step. A kernel the
// GPU templates refuse makes the whole specialization UNSUPPORTED.
static tj_status_t add_all(tj_cuda_program_t* cuda, const tj_run_plan_t* rp,
                           const tj_lowered_kernel_t* kernels) {
  for (uint32_t q = 0; q < rp->num_steps; ++q) {
    const tj_run_step_t* st = &rp->steps[q];
    if (st->kind != TJ_RUN_STEP_KERNELS || st->num_kernels == 0) continue;
    TJ_RETURN_IF_ERROR(tj_cuda_program_add_kernels(
        cuda, &kernels[st->first_kernel], st->num_kernels));
  }
  return NULL;
}

// The run plan's steps as the CUDA program takes them.
static tj_status_t finish(target_t* t, program_t* p, const tj_run_plan_t* rp) {
  tj_allocator_t al = t->config.allocator;
  uint32_t ns = 0;
  tj_cuda_step_t* steps = tj_calloc(al, rp->num_steps + 1, sizeof(*steps));
  if (!steps) return tj_status_oom();
  for (uint32_t q = 0; q < rp->num_steps; ++q) {
    const tj_run_step_t* st = &rp->steps[q];
    if (st->kind == TJ_RUN_STEP_KERNELS && st->num_kernels > 0) {
      steps[ns].kind = TJ_CUDA_STEP_KERNELS;
      steps[ns].first_kernel = st->first_kernel;
      steps[ns].num_kernels = st->num_kernels;
    } else if (st->kind == TJ_RUN_STEP_HOST) {
      // A custom op with a CUDA implementation runs on the device (an op
      // with data-dependent dims stays a host call, which refuses them).
      steps[ns].kind = st->host.call && st->host.call->cuda_ptx &&
                               !tj_custom_graph_is_dynamic(rp->graph)
                           ? TJ_CUDA_STEP_CUSTOM
                           : TJ_CUDA_STEP_HOST;
      steps[ns].host = &st->host;
    } else {
      continue;
    }
    steps[ns].plan_step = q;
    steps[ns].outputs = rp->fusion->groups[st->group].outputs;
    steps[ns].num_outputs = rp->fusion->groups[st->group].num_outputs;
    ++ns;
  }
  tj_status_t status =
      tj_cuda_program_finish(p->cuda, rp->graph, rp->memplan, p->kernels,
                             p->num_kernels, steps, ns, t->cache_dir);
  tj_free(al, steps, sizeof(*steps) * (rp->num_steps + 1));
  return status;
}

// The dump directory's files of the generic program (jit/kernel_dump.h):
// per kernel its kernel IR, the PTX module and the tuning line. Never fails.
static void dump_kernels(target_t* t, const program_t* p,
                         const tj_run_plan_t* rp,
                         const tj_cuda_program_stats_t* st, const char* shape) {
  tj_context_t* context = t->config.context;
  const char* dir = tj_setting(context, TJ_SETTING_DUMP_DIR);
  if (!dir || !*dir) return;
  char graph[256];
  tj_dump_program_name(graph, sizeof(graph), rp->graph->name, shape);
  const char* ptx = tj_cuda_program_ptx(p->cuda);
  char note[512];
  snprintf(note, sizeof(note),
           "program: %s%.64s kernels for %.64s (%.64s); GEMM autotune %s; "
           "last GEMM choice %.64s",
           shape ? "specialized to " : "generic", shape ? shape : "", st->arch,
           st->device_name,
           t->config.options->autotune == TJ_AUTOTUNE_OFF ? "off" : "on",
           st->gemm_choice[0] ? st->gemm_choice : "none yet");
  for (uint32_t i = 0; i < p->num_kernels; ++i) {
    const tj_kir_t* k = p->kernels[i].kernel;
    char name[512], tune[1024];
    tj_dump_kernel_ir(context, dir, graph, k);
    tj_kernel_tune_text(k, st->arch, 0, note, tune, sizeof(tune));
    snprintf(name, sizeof(name), "%.200s.%.200s.tune.txt", graph, k->name);
    tj_dump_write(context, dir, name, tune);
    ptx = tj_cuda_program_kernel_ptx(p->cuda, i);
    if (!ptx) continue;
    size_t len = strlen(ptx) + 512;
    char* text = tj_alloc(t->config.allocator, len);
    if (!text) continue;  // a dump never fails the compile
    snprintf(text, len,
             "// @%s: the PTX module (or chunk) of this kernel, .entry "
             "tj_kernel_%s\n%s",
             graph, k->name, ptx);
    snprintf(name, sizeof(name), "%.200s.%.200s.ptx", graph, k->name);
    tj_dump_write(context, dir, name, text);
    tj_free(t->config.allocator, text, len);
  }
}

static tj_status_t cuda_compile(void* target, tj_lowered_program_t* lp,
                                void** out_program) {
  target_t* t = target;
  *out_program = NULL;
  const tj_run_plan_t* rp = lp->plan;
  bool generic = lp->sym == NULL;
  program_t* p = tj_alloc(t->config.allocator, sizeof(*p));
  if (!p) {
    tj_run_plan_free_kernels(t->config.allocator, lp->kernels, rp->num_kernels);
    lp->kernels = NULL;
    return tj_status_oom();
  }
  memset(p, 0, sizeof(*p));
  p->kernels = lp->kernels;
  p->num_kernels = rp->num_kernels;
  lp->kernels = NULL;
  if (!t->cache_opened) {
    tj_disk_cache_open(t->config.context, t->config.options->cache_dir,
                       t->cache_dir, sizeof(t->cache_dir));
    t->cache_opened = true;
  }
  tj_status_t status = NULL;
  if (generic && t->pending) {
    p->cuda = t->pending;
    t->pending = NULL;
  } else {
    status = create_program(t, &p->cuda);
    if (!status) status = add_all(p->cuda, rp, p->kernels);
  }
  if (!status) status = finish(t, p, rp);
  if (status) {
    cuda_release(t, p);
    return status;
  }
  uint32_t nk = p->num_kernels;
  tj_cuda_program_stats_t st;
  tj_cuda_program_stats(p->cuda, &st);
  if (st.from_cache) {
    lp->cache_hits = nk;
  } else {
    lp->cache_misses = nk;
  }
  lp->llvm_ms = st.compile_ms;
  lp->ptxas_ms = st.link_ms;
  lp->tuning_ms = st.tuning_ms;
  lp->cache_load_ms = st.load_ms;
  dump_kernels(t, p, rp, &st, generic ? NULL : lp->label);
  const char* name = rp->graph->name;
  if (t->log_cache && nk) {
    tj_context_diagnostic(
        t->config.context, TJ_SEVERITY_REMARK,
        "cache: @%s%s%s: %u CUDA kernels for %s (%s): PTX (%zu bytes) from %s "
        "in %.2f ms, loaded in %.2f ms",
        name, generic ? "" : " ", generic ? "" : lp->label, nk, st.device_name,
        st.arch, st.ptx_bytes, st.ptx_source, st.compile_ms, st.load_ms);
  }
  if (generic && t->log_fusion) {
    tj_context_diagnostic(t->config.context, TJ_SEVERITY_REMARK,
                          "fusion: @%s: %u groups -> %u CUDA kernels, %u "
                          "graph breaks",
                          name, rp->fusion->num_groups, nk, rp->num_host_steps);
  }
  *out_program = p;
  return NULL;
}

static tj_status_t cuda_run_timed(void* target, void* program,
                                  const int64_t* sym, const tj_tensor_t* inputs,
                                  int32_t num_inputs,
                                  const tj_tensor_t* outputs,
                                  int32_t num_outputs,
                                  tj_run_timing_t* timing) {
  (void)num_inputs;
  (void)num_outputs;
  target_t* t = target;
  if (t->offline) {
    return tj_invalid("an executable compiled for PTX only does not run");
  }
  pthread_mutex_lock(&t->run_mutex);
  tj_status_t status = tj_cuda_program_run_timed(((program_t*)program)->cuda,
                                                 sym, inputs, outputs, timing);
  pthread_mutex_unlock(&t->run_mutex);
  return status;
}

static tj_status_t cuda_run(void* target, void* program, const int64_t* sym,
                            const tj_tensor_t* inputs, int32_t num_inputs,
                            const tj_tensor_t* outputs, int32_t num_outputs) {
  return cuda_run_timed(target, program, sym, inputs, num_inputs, outputs,
                        num_outputs, NULL);
}

static tj_status_t cuda_run_observed(
    void* target, void* program, const int64_t* sym, const tj_tensor_t* inputs,
    int32_t num_inputs, const tj_tensor_t* outputs, int32_t num_outputs,
    tj_step_observer_fn observe, void* user) {
  (void)num_inputs;
  (void)num_outputs;
  target_t* t = target;
  if (t->offline) {
    return tj_invalid("an executable compiled for PTX only does not run");
  }
  pthread_mutex_lock(&t->run_mutex);
  tj_status_t status = tj_cuda_program_run_observed(
      ((program_t*)program)->cuda, sym, inputs, outputs, observe, user);
  pthread_mutex_unlock(&t->run_mutex);
  return status;
}

const tj_backend_t tj_backend_cuda = {
    .name = "cuda",
    .target_size = sizeof(target_t),
    .lowers = true,
    .device_tensors = true,
    .native_op = cuda_native_op,
    .matmul_misaligned = cuda_matmul_misaligned,
    // Issue 15: the NVPTX CONV template runs a dense conv's elementwise
    // followers at its store (jit/emit_nvptx_conv.c's epilogue_map).
    .conv_epilogue = true,
    .conv_epilogue_fits = cuda_conv_epilogue_fits,
    // lsefwd: the f16/bf16 forward kernels (mma.sync and wgmma) write the
    // row lse beside y; attention_lse stays whole only on their terms.
    .attention_lse_output = true,
    // Issue 14: q, k and v read through the blocks' head views (every
    // CUDA attention kernel takes its strides from the kernel IR).
    .attention_views = true,
    .dual_gemm = cuda_dual_gemm,
    .open = cuda_open,
    .accept = cuda_accept,
    .compile = cuda_compile,
    .run = cuda_run,
    .run_observed = cuda_run_observed,
    .prepare = NULL,  // everything is compiled and loaded by compile
    .release = cuda_release,
    .close = cuda_close,
    .run_timed = cuda_run_timed,
};

//===--- offline PTX ---===//

void tj_cuda_offline_ptx_deinitialize(tj_allocator_t al,
                                      tj_cuda_offline_ptx_t* ptx) {
  tj_free_string(al, ptx->ptx);
  tj_free_string(al, ptx->variants_ptx);
  uint32_t n = ptx->num_chunks;
  for (uint32_t c = 0; c < n; ++c) {
    if (ptx->chunk_ptx) tj_free_string(al, ptx->chunk_ptx[c]);
    if (ptx->chunk_cubin && ptx->chunk_cubin[c])
      tj_free(al, ptx->chunk_cubin[c], ptx->chunk_cubin_bytes[c]);
  }
  if (ptx->chunk_ptx) tj_free(al, ptx->chunk_ptx, sizeof(char*) * (n + 1));
  if (ptx->chunk_cubin) tj_free(al, ptx->chunk_cubin, sizeof(void*) * (n + 1));
  if (ptx->chunk_cubin_bytes)
    tj_free(al, ptx->chunk_cubin_bytes, sizeof(size_t) * (n + 1));
  if (ptx->chunk_ms) tj_free(al, ptx->chunk_ms, sizeof(double) * (n + 1));
  if (ptx->chunk_asm_ms)
    tj_free(al, ptx->chunk_asm_ms, sizeof(double) * (n + 1));
  if (ptx->chunk_cpu_ms)
    tj_free(al, ptx->chunk_cpu_ms, sizeof(double) * (n + 1));
  if (ptx->chunk_of)
    tj_free(al, ptx->chunk_of, sizeof(uint32_t) * (ptx->num_kernels + 1));
  memset(ptx, 0, sizeof(*ptx));
}

const char* tj_cuda_backend_ptx(const void* program) {
  return program ? tj_cuda_program_ptx(((const program_t*)program)->cuda)
                 : NULL;
}

const char* tj_cuda_backend_variants_ptx(const void* program,
                                         uint32_t* out_num_kernels) {
  *out_num_kernels = 0;
  if (!program) return NULL;
  return tj_cuda_program_variants_ptx(((const program_t*)program)->cuda,
                                      out_num_kernels);
}

void tj_cuda_backend_stats(const void* program,
                           tj_cuda_program_stats_t* out_stats) {
  memset(out_stats, 0, sizeof(*out_stats));
  if (program) {
    tj_cuda_program_stats(((const program_t*)program)->cuda, out_stats);
  }
}

void tj_cuda_backend_memory(const void* program, tj_executable_stats_t* st) {
  tj_cuda_program_stats_t cs;
  tj_cuda_backend_stats(program, &cs);
  st->device_reserved_bytes = (int64_t)cs.allocator.bytes_reserved;
  st->device_allocated_bytes = (int64_t)cs.allocator.bytes_in_use;
  st->device_peak_reserved_bytes = (int64_t)cs.allocator.peak_bytes_reserved;
  st->device_peak_allocated_bytes = (int64_t)cs.allocator.peak_bytes_in_use;
  st->device_arena_bytes = cs.arena_bytes;
}

uint32_t tj_cuda_backend_num_kernels(const void* program) {
  return program ? ((const program_t*)program)->num_kernels : 0;
}

tj_status_t tj_cuda_backend_chunks(const void* program, tj_allocator_t al,
                                   tj_cuda_offline_ptx_t* out) {
  if (!program) return NULL;
  const program_t* pr = program;
  tj_cuda_program_chunks_t ch;
  tj_cuda_program_chunks(pr->cuda, &ch);
  uint32_t n = ch.num_chunks, nk = pr->num_kernels;
  snprintf(out->assembler, sizeof(out->assembler), "%s",
           ch.assembler ? ch.assembler : "");
  out->chunk_threads = ch.threads;
  out->chunks_wall_ms = ch.wall_ms;
  if (n == 0) return NULL;
  // Counted from here: deinitialize frees what is there.
  out->num_chunks = n;
  out->chunk_ptx = tj_calloc(al, n + 1, sizeof(char*));
  out->chunk_cubin = tj_calloc(al, n + 1, sizeof(void*));
  out->chunk_cubin_bytes = tj_calloc(al, n + 1, sizeof(size_t));
  out->chunk_ms = tj_calloc(al, n + 1, sizeof(double));
  out->chunk_asm_ms = tj_calloc(al, n + 1, sizeof(double));
  out->chunk_cpu_ms = tj_calloc(al, n + 1, sizeof(double));
  out->chunk_of = tj_calloc(al, nk + 1, sizeof(uint32_t));
  if (!out->chunk_ptx || !out->chunk_cubin || !out->chunk_cubin_bytes ||
      !out->chunk_ms || !out->chunk_asm_ms || !out->chunk_cpu_ms ||
      !out->chunk_of)
    return tj_status_oom();
  memcpy(out->chunk_of, ch.chunk_of, sizeof(uint32_t) * nk);
  for (uint32_t c = 0; c < n; ++c) {
    out->chunk_ms[c] = ch.ms[c];
    out->chunk_asm_ms[c] = ch.asm_ms[c];
    out->chunk_cpu_ms[c] = ch.cpu_ms[c];
    if (ch.ptx[c] && !(out->chunk_ptx[c] = tj_strdup(al, ch.ptx[c])))
      return tj_status_oom();
    if (ch.cubin[c]) {
      if (!(out->chunk_cubin[c] = tj_alloc(al, ch.cubin_bytes[c])))
        return tj_status_oom();
      memcpy(out->chunk_cubin[c], ch.cubin[c], ch.cubin_bytes[c]);
      out->chunk_cubin_bytes[c] = ch.cubin_bytes[c];
    }
  }
  return NULL;
}
