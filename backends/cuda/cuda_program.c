// backends/cuda/cuda_program.c
//
// The CUDA program (cuda_executable.h, cuda_program.h): create and
// destroy, adding kernels to the one NVPTX module, the module's cache key,
// its PTX (compiled by LLVM or taken from a cache) and cubin load, the
// constants' upload, the run state's allocation, finish, and offline
// programs (PTX only, for tj_cuda_compile_ptx).

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_program.h"
#include "backends/cuda/nvjitlink.h"
#include "jit/cache.h"
#include "lib/dtype.h"
#include "lib/env.h"
#include "lib/ir.h"

//===--- the context's device ---===//

// tj_context_extension's create callback takes no argument: the ordinal
// asked for travels in a thread-local (the callback runs on the calling
// thread).
static _Thread_local int32_t t_requested_ordinal;

static tj_status_t device_extension_create(tj_context_t* context,
                                           void** out_state) {
  tj_cuda_device_options_t o;
  tj_cuda_device_options_initialize(&o);
  o.ordinal = t_requested_ordinal;
  tj_cuda_device_t* d = NULL;
  TJ_RETURN_IF_ERROR(
      tj_cuda_device_create(tj_context_allocator(context), &o, &d));
  *out_state = d;
  return NULL;
}

static void device_extension_destroy(void* state) {
  tj_cuda_device_destroy(state);
}

static tj_status_t program_create(tj_context_t* context,
                                  const tj_compile_options_t* options,
                                  tj_cuda_device_t* device,
                                  tj_nvptx_arch_t arch,
                                  tj_cuda_program_t** out);

tj_status_t tj_cuda_program_create(tj_context_t* context,
                                   const tj_compile_options_t* options,
                                   tj_cuda_program_t** out) {
  *out = NULL;
  if (options->cuda.device < 0)
    return tj_invalid("tj_compile: cuda_device is %d",
                      (int)options->cuda.device);
  t_requested_ordinal = options->cuda.device;
  void* state = NULL;
  TJ_RETURN_IF_ERROR(tj_context_extension(
      context, TJ_CONTEXT_EXTENSION_CUDA_DEVICE, device_extension_create,
      device_extension_destroy, &state));
  tj_cuda_device_t* device = state;
  if (device->ordinal != options->cuda.device)
    return tj_unsupported(
        "tj_compile: this context drives CUDA device %d; device %d needs "
        "another context",
        (int)device->ordinal, (int)options->cuda.device);
  const char* arch_name = tj_cuda_device_arch_name(device);
  tj_nvptx_arch_t arch;
  if (!arch_name || !tj_nvptx_arch_from_name(arch_name, &arch))
    return tj_unsupported(
        "tj_compile: %s is sm_%d%d; the CUDA target needs sm_80 or newer",
        device->name, (int)device->sm_major, (int)device->sm_minor);
  return program_create(context, options, device, arch, out);
}

tj_status_t tj_cuda_program_create_offline(tj_context_t* context,
                                           const tj_compile_options_t* options,
                                           tj_nvptx_arch_t arch,
                                           tj_cuda_program_t** out) {
  *out = NULL;
  if ((unsigned)arch >= TJ_NVPTX_ARCH_COUNT_)
    return tj_invalid("tj_cuda_compile_ptx: unknown arch %d", (int)arch);
  return program_create(context, options, NULL, arch, out);
}

static _Atomic(bool) g_warned_attention;

// TJ_NVPTX_ATTENTION: "mma", "wgmma", "wgmma-wide", "wgmma-stepwise" or
// "wgmma-pingpong"
// force the attention kernels; unset or "" leave the default; anything
// else warns once and leaves it too.
static tj_nvptx_attention_kernel_t attention_kernel(tj_context_t* context) {
  const char* v = tj_setting(context, TJ_SETTING_NVPTX_ATTENTION);
  if (!v || !v[0]) return TJ_NVPTX_ATTENTION_AUTO;
  if (strcmp(v, "mma") == 0) return TJ_NVPTX_ATTENTION_MMA_SYNC;
  if (strcmp(v, "wgmma") == 0) return TJ_NVPTX_ATTENTION_WGMMA;
  if (strcmp(v, "wgmma-wide") == 0) return TJ_NVPTX_ATTENTION_WGMMA_WIDE;
  if (strcmp(v, "wgmma-stepwise") == 0)
    return TJ_NVPTX_ATTENTION_WGMMA_STEPWISE;
  if (strcmp(v, "wgmma-pingpong") == 0)
    return TJ_NVPTX_ATTENTION_WGMMA_PINGPONG;
  tj_warn_once(context, &g_warned_attention,
               "TJ_NVPTX_ATTENTION: \"%.32s\" is none of mma, wgmma, "
               "wgmma-wide, wgmma-stepwise and wgmma-pingpong and is ignored",
               v);
  return TJ_NVPTX_ATTENTION_AUTO;
}

static _Atomic(bool) g_warned_conv;

// TJ_NVPTX_CONV: "mma", "wgmma" or "wgmma64" force the TF32 conv's
// kernel, "wgmma-trunc" and "wgmma64-trunc" the wgmma ones with truncated
// operands (*truncate; for measuring what rounding costs), "wgmma-plain"
// and "wgmma64-plain" the wgmma ones reading constant weights as they are
// (*plain; for measuring what their preparation brings); unset or ""
// leave the default; anything else warns once and leaves it too.
static tj_nvptx_conv_kernel_t conv_kernel(tj_context_t* context, bool* truncate,
                                          bool* plain, int32_t* window_rows) {
  const char* v = tj_setting(context, TJ_SETTING_NVPTX_CONV);
  *truncate = false;
  *plain = false;
  *window_rows = 0;
  if (!v || !v[0]) return TJ_NVPTX_CONV_AUTO;
  // cudabw: the direct window kernel's rows a thread (the TF32 conv's
  // kernel left to its default).
  if (strcmp(v, "window-rows1") == 0 || strcmp(v, "window-rows2") == 0 ||
      strcmp(v, "window-rows4") == 0) {
    *window_rows = v[strlen(v) - 1] - '0';
    return TJ_NVPTX_CONV_AUTO;
  }
  if (strcmp(v, "mma") == 0) return TJ_NVPTX_CONV_MMA_SYNC;
  *truncate = strcmp(v, "wgmma-trunc") == 0 || strcmp(v, "wgmma64-trunc") == 0;
  *plain = strcmp(v, "wgmma-plain") == 0 || strcmp(v, "wgmma64-plain") == 0;
  if (strcmp(v, "wgmma") == 0 || strcmp(v, "wgmma-trunc") == 0 ||
      strcmp(v, "wgmma-plain") == 0)
    return TJ_NVPTX_CONV_WGMMA;
  if (strcmp(v, "wgmma64") == 0 || strcmp(v, "wgmma64-trunc") == 0 ||
      strcmp(v, "wgmma64-plain") == 0)
    return TJ_NVPTX_CONV_WGMMA_64;
  tj_warn_once(context, &g_warned_conv,
               "TJ_NVPTX_CONV: \"%.32s\" is none of mma, wgmma, wgmma64, "
               "wgmma-trunc, wgmma64-trunc, wgmma-plain, wgmma64-plain and "
               "window-rows1/2/4 and is ignored",
               v);
  return TJ_NVPTX_CONV_AUTO;
}

static _Atomic(bool) g_warned_lt_residual;

// TJ_CUBLASLT_RESIDUAL: "off" keeps a GEMM's residual out of cuBLASLt's
// C (the A/B of bench/transformer_blocks.py, issue 14); unset or "" leave
// the default; anything else warns once and leaves it too.
static bool lt_residual_off(tj_context_t* context) {
  const char* v = tj_setting(context, TJ_SETTING_CUBLASLT_RESIDUAL);
  if (!v || !v[0]) return false;
  if (strcmp(v, "off") == 0) return true;
  tj_warn_once(context, &g_warned_lt_residual,
               "TJ_CUBLASLT_RESIDUAL: \"%.32s\" is not off and is ignored", v);
  return false;
}

static _Atomic(bool) g_warned_rows;

// Whether the CUDA row kernels have the staged path by default (rows32k):
// false makes TJ_NVPTX_ROWS=staged the way to ask for it. Off until the
// staged kernels have run on a GPU (cuda_row_test asks for them itself,
// and softmax_rows.py compares both); the one line to flip then.
static const bool kRowsStagedByDefault = false;

// TJ_NVPTX_ROWS: "streaming" leaves the row kernels without the staged
// path (tj_nvptx_options_t.row_stage_off), "staged" gives it to them,
// "staged-256", "staged-512" and "staged-1024" with blocks of that many
// threads whatever the row's length (row_stage_threads); unset or "" the
// default (kRowsStagedByDefault); anything else warns once and leaves the
// default.
static bool row_stage_off(tj_context_t* context, int32_t* threads) {
  const char* v = tj_setting(context, TJ_SETTING_NVPTX_ROWS);
  *threads = 0;
  if (!v || !v[0]) return !kRowsStagedByDefault;
  if (strcmp(v, "streaming") == 0) return true;
  if (strcmp(v, "staged") == 0) return false;
  if (strcmp(v, "staged-256") == 0 || strcmp(v, "staged-512") == 0 ||
      strcmp(v, "staged-1024") == 0) {
    *threads = atoi(v + 7);
    return false;
  }
  tj_warn_once(context, &g_warned_rows,
               "TJ_NVPTX_ROWS: \"%.32s\" is none of streaming, staged, "
               "staged-256, staged-512 and staged-1024 and is ignored",
               v);
  return !kRowsStagedByDefault;
}

static _Atomic(bool) g_warned_compile_threads;

// TJ_CUDA_COMPILE_THREADS (lib/env.h): the threads the kernels' chunks
// compile on, 0 for the one module of every kernel. The one module stays
// the default until the CUDA suite has run the chunks on a GPU (they were
// built and checked offline in a session without one): "auto" asks for
// the chunks on the host's threads, a number for that many threads.
static uint32_t compile_threads(tj_context_t* context) {
  const char* v = tj_setting(context, TJ_SETTING_CUDA_COMPILE_THREADS);
  if (!v || !v[0] || strcmp(v, "module") == 0) return 0;
  if (strcmp(v, "auto") == 0) return tj_nvptx_host_threads();
  char* end = NULL;
  long n = strtol(v, &end, 10);
  if (!*end && n >= 1 && n <= 4096) return (uint32_t)n;
  tj_warn_once(context, &g_warned_compile_threads,
               "TJ_CUDA_COMPILE_THREADS: \"%.32s\" is not a thread count, "
               "auto or module and is ignored",
               v);
  return 0;
}

// The program of |device| (NULL: an offline program, see
// tj_cuda_program_create_offline) for |arch|.
static tj_status_t program_create(tj_context_t* context,
                                  const tj_compile_options_t* options,
                                  tj_cuda_device_t* device,
                                  tj_nvptx_arch_t arch,
                                  tj_cuda_program_t** out) {
  tj_allocator_t al = tj_context_allocator(context);
  tj_cuda_program_t* p = tj_calloc(al, 1, sizeof(*p));
  if (!p) return tj_status_oom();
  p->context = context;
  p->al = al;
  p->device = device;
  p->stream = options->cuda.stream ? (tj_cu_stream_t)options->cuda.stream
                                   : (device ? device->stream : NULL);
  p->host_stream = options->cuda.stream != NULL;
  p->graphs.enabled = !options->cuda.disable_graphs;
  p->arch = arch;
  p->nv_options.approx_math = !options->cuda.precise_math;
  p->nv_options.gemm_tf32 = options->cuda.allow_tf32;
  const char* libdevice = tj_setting(context, TJ_SETTING_LIBDEVICE);
  p->nv_options.libdevice = libdevice && libdevice[0];
  p->nv_options.attention_kernel = attention_kernel(context);
  p->nv_options.conv_kernel =
      conv_kernel(context, &p->nv_options.conv_truncate,
                  &p->nv_options.conv_plain_weight, &p->nv_options.window_rows);
  p->nv_options.row_stage_off =
      row_stage_off(context, &p->nv_options.row_stage_threads);
  const char* wq = tj_setting(context, TJ_SETTING_CUDA_WQGEMM);
  p->nv_options.wqgemm_fma = wq && strcmp(wq, "fma") == 0;
  p->nv_options.wqgemm_no_split = wq && strcmp(wq, "nosplit") == 0;
  // The weight-only GEMM (jit/nvptx.h): by default on the tile layout
  // where it takes tensor cores; =tiles: tensor cores on it at every M;
  // =mma, =nosplit, =fma: the [K, N] layout's kernels.
  bool tiles = wq && strcmp(wq, "tiles") == 0;
  p->nv_options.wqgemm_blocks256 = wq && strcmp(wq, "blocks256") == 0;
  // =cluster: the K splits joined inside a cluster (sm_90a); =pdl:
  // programmatic dependent launch; =cluster+pdl: both.
  p->nv_options.wqgemm_cluster = wq && strstr(wq, "cluster") != NULL;
  p->nv_options.wqgemm_programmatic = wq && strstr(wq, "pdl") != NULL;
  p->nv_options.wqgemm_ring = wq && strstr(wq, "ring") != NULL;
  if (wq && strncmp(wq, "split", 5) == 0) {
    int splits = atoi(wq + 5);
    p->nv_options.wqgemm_splits = splits >= 1 && splits <= 8 ? splits : 0;
  }
  p->nv_options.wqgemm_mma = tiles || (wq && strcmp(wq, "mma") == 0);
  p->nv_options.wqgemm_tiled =
      tiles || !(p->nv_options.wqgemm_fma || p->nv_options.wqgemm_no_split ||
                 p->nv_options.wqgemm_mma);
  p->stats.ptx_source = "LLVM";
  p->stats.cubin_source = "none";
  p->mod.threads = compile_threads(context);
  p->gemm.autotune = options->autotune != TJ_AUTOTUNE_OFF;
  p->gemm.background = options->autotune == TJ_AUTOTUNE_BACKGROUND;
  p->gemm.forced = -1;
  p->gemm.log_autotune = (tj_log_flags(context) & TJ_LOG_AUTOTUNE) != 0;
  const char* force = tj_setting(context, TJ_SETTING_CUDA_GEMM_CANDIDATE);
  if (force && force[0] >= '0' && force[0] <= '9') {
    char* end = NULL;
    long c = strtol(force, &end, 10);
    if (!*end && c < TJ_CUDA_GEMM_CANDIDATES) p->gemm.forced = (int32_t)c;
  }
  p->gemm.lt_residual_off = lt_residual_off(context);
  // The tuning key: a decision made with the residual in cuBLASLt's C is
  // not one without.
  snprintf(p->gemm.device_desc, sizeof(p->gemm.device_desc), "%s %s%s%s%s",
           device ? device->name : "offline", tj_nvptx_arch_name(arch),
           p->nv_options.approx_math ? " approx" : "",
           p->nv_options.gemm_tf32 ? " tf32" : "",
           p->gemm.lt_residual_off ? " lt-residual-off" : "");
  tj_status_t status = NULL;
  if (pthread_mutex_init(&p->mutex, NULL) != 0) {
    status = tj_internal("tj_compile: pthread_mutex_init failed");
  } else {
    p->mutex_ready = true;
  }
  if (!status) status = tj_nvptx_target_create(al, arch, &p->target);
  if (!status) status = tj_nvptx_target_set_libdevice(p->target, libdevice);
  if (!status)
    status = tj_nvptx_module_new(p->target, al, "tj_program", &p->mod.nvptx);
  if (status) {
    tj_cuda_program_destroy(p);
    return status;
  }
  *out = p;
  return NULL;
}

static void release_chunks(tj_cuda_program_t* p);

void tj_cuda_program_destroy(tj_cuda_program_t* p) {
  if (!p) return;
  tj_cuda_device_t* d = p->device;
  if (d && tj_cuda_device_try_enter(d)) {
    (void)d->cu.cuStreamSynchronize(p->stream);
    tj_cuda_graph_destroy_execs(p);
    tj_cuda_device_leave(d);
  }
  tj_cuda_gemm_release(p);
  tj_cuda_staging_release(p);
  for (int i = 0; i < TJ_CUDA_MAX_GRAPHS; ++i) {
    tj_free(p->al, p->graphs.entries[i].key,
            p->graphs.entries[i].key
                ? sizeof(int64_t) * (tj_cuda_graph_key_len(p) + 1)
                : 0);
  }
  if (d) {
    if (p->run.arena)
      (void)tj_cuda_allocator_free(d->allocator, p->run.arena, p->stream);
    if (p->plan.consts)
      (void)tj_cuda_allocator_free(d->allocator, p->plan.consts, p->stream);
    tj_cuda_host_free(d, p->run.pinned);
  }
  tj_cuda_module_destroy(p->mod.cumod);
  release_chunks(p);
  tj_cuda_custom_release(p);
  tj_free_string(p->al, p->mod.ptx);
  tj_free_string(p->al, p->mod.variants_ptx);
  tj_nvptx_module_destroy(p->mod.nvptx);
  tj_nvptx_target_destroy(p->target);
  tj_free(p->al, p->kernels, sizeof(tj_cuda_program_kernel_t) * p->cap_kernels);
  tj_free(p->al, p->plan.steps,
          sizeof(tj_cuda_step_t) * (p->plan.num_steps + 1));
  if (p->plan.graph) {
    tj_free(p->al, p->plan.first_output,
            p->plan.first_output
                ? sizeof(int32_t) * (p->plan.graph->num_nodes + 1)
                : 0);
    tj_free(p->al, p->plan.const_ptr,
            p->plan.const_ptr
                ? sizeof(uint64_t) * (p->plan.graph->num_nodes + 1)
                : 0);
    tj_free(p->al, p->plan.wq_tiled_ptr,
            p->plan.wq_tiled_ptr
                ? sizeof(uint64_t) * (p->plan.graph->num_nodes + 1)
                : 0);
  }
  tj_free(p->al, p->run.meta, p->run.meta_bytes);
  if (p->mutex_ready) pthread_mutex_destroy(&p->mutex);
  tj_free(p->al, p, sizeof(*p));
}

//===--- kernels ---===//

// Tensor-core operands are read 16 bytes at a time: strides and offsets
// that are known now must be multiples of 8 halves (4 f32 for TF32;
// symbolic ones are checked per run by the launch configuration).
static tj_status_t check_gemm_alignment(const tj_lowered_kernel_t* low,
                                        const tj_nvptx_kernel_t* info) {
  const tj_kir_t* k = low->kernel;
  if (k->kind != TJ_KIR_GEMM || !info->tensor_cores) return NULL;
  for (uint32_t b = 0; b < k->num_buffers; ++b) {
    const tj_kir_buffer_t* buf = &k->buffers[b];
    if (buf->role != TJ_KIR_GEMM_A && buf->role != TJ_KIR_GEMM_B &&
        buf->role != TJ_KIR_GEMM_B2)
      continue;
    int64_t per = 16 / (int64_t)tj_dtype_size(buf->dtype);
    // 8-bit operands (issue 17) and a K-major B (x @ w^T) are contiguous
    // along k or n: every other dim is checked, a k-major B's n included.
    bool any = tj_kir_gemm_is_int8(k) || tj_kir_gemm_is_f8(k) ||
               (buf->role != TJ_KIR_GEMM_A && tj_kir_gemm_b_kmajor(k));
    for (int32_t d = 0; d + (any ? 0 : 1) < k->rank; ++d) {
      tj_kir_ival_t s = buf->strides[d];
      if (any && tj_kir_ival_is_const(s, 1)) continue;
      if (s.param < 0 && s.value % per != 0)
        return tj_unsupported(
            "kernel @%s: tensor-core operand %%%s has stride %lld in dim %d, "
            "not a multiple of %lld elements (16 bytes)",
            k->name, buf->name, (long long)s.value, (int)d, (long long)per);
    }
    if (low->buffer_offset_dims[b] >= 0 &&
        low->buffer_offset_dims[b] % per != 0)
      return tj_unsupported(
          "kernel @%s: tensor-core operand %%%s starts %lld elements into its "
          "value, not a multiple of %lld",
          k->name, buf->name, (long long)low->buffer_offset_dims[b],
          (long long)per);
  }
  return NULL;
}

tj_status_t tj_cuda_program_add_kernels(tj_cuda_program_t* p,
                                        const tj_lowered_kernel_t* kernels,
                                        uint32_t count) {
  if (!p->mod.nvptx) return tj_internal("cuda program: add after finish");
  if (p->num_kernels + count > p->cap_kernels) {
    uint32_t cap = p->cap_kernels ? p->cap_kernels * 2 : 16;
    while (cap < p->num_kernels + count) cap *= 2;
    tj_cuda_program_kernel_t* more = tj_realloc(
        p->al, p->kernels, sizeof(tj_cuda_program_kernel_t) * p->cap_kernels,
        sizeof(tj_cuda_program_kernel_t) * cap);
    if (!more) return tj_status_oom();
    p->kernels = more;
    p->cap_kernels = cap;
  }
  tj_status_t status = NULL;
  uint32_t done = 0;
  for (; done < count && !status; ++done) {
    tj_cuda_program_kernel_t* k = &p->kernels[p->num_kernels + done];
    memset(k, 0, sizeof(*k));
    status = tj_nvptx_module_add_kernel(p->mod.nvptx, kernels[done].kernel,
                                        &p->nv_options, &k->info);
    if (!status) status = check_gemm_alignment(&kernels[done], &k->info);
    if (tj_status_code(status) == TJ_STATUS_INVALID_ARGUMENT) {
      // Lowered kernels are valid kernel IR: what the emitter still
      // rejects is a limit of the GPU templates, so the group runs on
      // the host rather than failing the compile.
      tj_status_t u = tj_unsupported("%s", tj_status_message(status));
      tj_status_free(status);
      status = u;
    }
    if (status) break;
  }
  if (status) {
    // The failing kernel's function is gone already (or stays for an
    // alignment refusal); drop the group's others too.
    for (uint32_t i = 0; i <= done && i < count; ++i) {
      tj_nvptx_module_remove_kernel(p->mod.nvptx,
                                    p->kernels[p->num_kernels + i].info.entry);
    }
    return status;
  }
  p->num_kernels += count;
  return NULL;
}

// The cache key of the module (|chunk| TJ_NVPTX_NO_CHUNK) or of one chunk
// (its kernels): everything the PTX depends on.
static tj_status_t kernels_key(tj_cuda_program_t* p, uint32_t chunk,
                               tj_cache_key_t* out) {
  tj_cache_hasher_t h;
  tj_cache_hasher_initialize(&h);
  // 3: sm_90a GEMMs default to the wgmma template (other tiles, threads
  // and shared memory than a cached mma.sync kernel's launch).
  tj_cache_hasher_update_string(&h, "tensorjit cuda module 3");
  tj_cache_hasher_update_string(&h, tj_version_string());
  tj_cache_hasher_update_string(&h, tj_nvptx_arch_name(p->arch));
  unsigned major, minor, patch;
  tj_nvptx_llvm_version(&major, &minor, &patch);
  char buf[256];
  snprintf(buf, sizeof(buf),
           "llvm %u.%u.%u approx %d tf32 %d attention %d conv %d trunc %d "
           "plain %d wqfma %d wqmma %d wqsplit %d wqtiled %d wqsplits %d "
           "wqb256 %d wqcl %d wqpdl %d wqring %d wrows %d",
           major, minor, patch, (int)p->nv_options.approx_math,
           (int)p->nv_options.gemm_tf32, (int)p->nv_options.attention_kernel,
           (int)p->nv_options.conv_kernel, (int)p->nv_options.conv_truncate,
           (int)p->nv_options.conv_plain_weight, (int)p->nv_options.wqgemm_fma,
           (int)p->nv_options.wqgemm_mma, (int)!p->nv_options.wqgemm_no_split,
           (int)p->nv_options.wqgemm_tiled, (int)p->nv_options.wqgemm_splits,
           (int)p->nv_options.wqgemm_blocks256,
           (int)p->nv_options.wqgemm_cluster,
           (int)p->nv_options.wqgemm_programmatic,
           (int)p->nv_options.wqgemm_ring, (int)p->nv_options.window_rows);
  tj_cache_hasher_update_string(&h, buf);
  // rows32k: the row kernels with or without the staged path.
  char rows[48];
  snprintf(rows, sizeof(rows), "rows %s %d",
           p->nv_options.row_stage_off ? "streaming" : "staged",
           (int)p->nv_options.row_stage_threads);
  tj_cache_hasher_update_string(&h, rows);
  for (uint32_t i = 0; i < p->num_kernels; ++i) {
    if (chunk != TJ_NVPTX_NO_CHUNK && p->mod.chunk_of[i] != chunk) continue;
    const tj_kir_t* k = p->kernels[i].low->kernel;
    char* text;
    TJ_RETURN_IF_ERROR(tj_kir_print(k, &text));
    tj_cache_hasher_update_string(&h, text);
    tj_free_string(k->allocator, text);
    // The kernel IR does not say whether a conv's weight is a constant:
    // the same text reads a prepared weight or the graph's
    // (conv_plain_weights).
    tj_cache_hasher_update_string(
        &h, p->kernels[i].info.conv_prepared ? "conv prepared" : "");
  }
  // A chunk's PTX is that of a module of its kernels alone.
  if (chunk != TJ_NVPTX_NO_CHUNK) tj_cache_hasher_update_string(&h, "chunk");
  *out = tj_cache_hasher_finalize(&h);
  return NULL;
}

static tj_status_t module_key(tj_cuda_program_t* p, tj_cache_key_t* out) {
  return kernels_key(p, TJ_NVPTX_NO_CHUNK, out);
}

// The PTX of the module by LLVM, which consumes it.
static tj_status_t compile_module(tj_cuda_program_t* p) {
  double start = tj_now_ms();
  tj_nvptx_module_t* m = p->mod.nvptx;
  p->mod.nvptx = NULL;
  TJ_RETURN_IF_ERROR(tj_nvptx_module_compile(m, p->al, &p->mod.ptx));
  p->stats.compile_ms = tj_now_ms() - start;
  return NULL;
}

// The PTX of the module under |key|, from a cache or LLVM (which consumes
// the module).
static tj_status_t get_ptx(tj_cuda_program_t* p, const char* cache_dir,
                           tj_cache_key_t key) {
  void* bytes = NULL;
  size_t size = 0;
  bool hit = false;
  if (!p->mod.ptx_cache_bad) {
    TJ_RETURN_IF_ERROR(
        tj_memory_cache_lookup(p->context, key, p->al, &bytes, &size, &hit));
  }
  if (hit) p->stats.ptx_source = "memory cache";
  bool disk = cache_dir && cache_dir[0];
  const char* note = NULL;
  if (!hit && disk && !p->mod.ptx_cache_bad) {
    TJ_RETURN_IF_ERROR(tj_disk_cache_load(p->context, cache_dir, key, p->al,
                                          &bytes, &size, &hit, &note));
    if (hit) p->stats.ptx_source = "disk cache";
  }
  // A cached payload is the PTX with its NUL; anything else is foreign.
  if (hit && (size == 0 || ((char*)bytes)[size - 1] != '\0' ||
              strlen(bytes) + 1 != size)) {
    tj_free(p->al, bytes, size);
    hit = false;
    p->stats.ptx_source = "LLVM";
  }
  if (hit) {
    // tj_free_string frees strlen + 1 bytes: exactly this allocation. The
    // module is kept until the PTX has linked (load_module): a cached PTX
    // the driver refuses is a miss, and LLVM compiles the module then.
    p->mod.ptx = bytes;
  } else {
    TJ_RETURN_IF_ERROR(compile_module(p));
    size = strlen(p->mod.ptx) + 1;
    if (disk) {
      tj_status_t s = tj_disk_cache_store(cache_dir, key, p->mod.ptx, size);
      tj_disk_cache_warn_store(p->context, cache_dir, s);
      tj_status_free(s);
    }
  }
  p->stats.ptx_bytes = strlen(p->mod.ptx);
  tj_status_t s = tj_memory_cache_store(p->context, key, p->mod.ptx,
                                        p->stats.ptx_bytes + 1);
  tj_status_free(s);  // a full memory cache only costs a later compile
  (void)note;
  return NULL;
}

void tj_cuda_program_count_kernel(tj_cuda_program_t* p,
                                  const tj_cuda_kir_kernel_t* k) {
  if (!p->cache_dir[0]) return;
  if (k->cubin_hit) {
    ++p->stats.kernel_cubin_hits;
  } else {
    ++p->stats.kernel_cubin_misses;
  }
}

tj_status_t tj_cuda_program_compile_kernel(tj_cuda_program_t* p,
                                           const tj_kir_t* k,
                                           const tj_nvptx_options_t* o,
                                           tj_cuda_kir_kernel_t** out) {
  TJ_RETURN_IF_ERROR(tj_cuda_kir_compile_cached(p->device, p->target, k, o,
                                                p->context, p->cache_dir, out));
  tj_cuda_program_count_kernel(p, *out);
  return NULL;
}

// get_ptx for tj_cuda_cubin_load: called only on a cubin miss.
typedef struct program_ptx_t {
  tj_cuda_program_t* p;
  const char* cache_dir;
  tj_cache_key_t key;
} program_ptx_t;

static tj_status_t program_ptx(void* ctx, const char** out_ptx) {
  program_ptx_t* c = ctx;
  TJ_RETURN_IF_ERROR(get_ptx(c->p, c->cache_dir, c->key));
  *out_ptx = c->p->mod.ptx;
  return NULL;
}

// Loads the module through the cubin cache (cuda_cubin.h): a warm start
// runs neither LLVM nor ptxas.
static tj_status_t load_module(tj_cuda_program_t* p, const char* cache_dir) {
  tj_cache_key_t key;
  TJ_RETURN_IF_ERROR(module_key(p, &key));
  program_ptx_t c = {p, cache_dir, key};
  tj_cuda_cubin_load_t load;
  memset(&load, 0, sizeof(load));
  load.context = p->context;
  load.cache_dir = cache_dir;
  load.ptx_key = key;
  load.arch = p->arch;
  load.make_ptx = program_ptx;
  load.make_ptx_ctx = &c;
  tj_cuda_cubin_result_t r;
  tj_status_t status = tj_cuda_cubin_load(p->device, &load, &p->mod.cumod, &r);
  if (status && tj_status_code(status) != TJ_STATUS_OUT_OF_MEMORY &&
      p->mod.nvptx && p->mod.ptx && strcmp(p->stats.ptx_source, "LLVM") != 0) {
    // The PTX came from a cache (its checksum right, its text not: a
    // corrupt or foreign entry) and did not link: a miss. LLVM makes it
    // again and the entry is rewritten.
    char hex[33];
    tj_cache_key_format(key, hex);
    tj_context_diagnostic(p->context, TJ_SEVERITY_WARNING,
                          "cache: the PTX of key %s from the %s did not link "
                          "(%s); compiling it again",
                          hex, p->stats.ptx_source, tj_status_message(status));
    tj_status_free(status);
    tj_free_string(p->al, p->mod.ptx);
    p->mod.ptx = NULL;
    p->mod.ptx_cache_bad = true;
    p->stats.ptx_source = "LLVM";
    status = tj_cuda_cubin_load(p->device, &load, &p->mod.cumod, &r);
  }
  // A cubin hit or a cached PTX: the module was not compiled.
  tj_nvptx_module_destroy(p->mod.nvptx);
  p->mod.nvptx = NULL;
  p->stats.cubin_source = r.source;
  p->stats.cubin_bytes = r.bytes;
  p->stats.link_ms = r.link_ms;
  p->stats.load_ms = r.load_ms;
  if (r.hit) {
    ++p->stats.cubin_hits;
    p->stats.ptx_source = strcmp(r.source, "disk cache") == 0
                              ? "none (cubin from the disk cache)"
                              : "none (cubin from the memory cache)";
  } else if (cache_dir && cache_dir[0]) {
    ++p->stats.cubin_misses;
  }
  return status;
}

// |bits| of a conv weight that a kernel reads prepared
// (tj_nvptx_kernel_t.conv_prepared, tj_nvptx_conv_prepare_weight).
#define kConvPrepared 32

// Whether buffer |b| of kernel |ki| is a conv weight that the kernel may
// read prepared: a whole f32 constant [O, C, taps...] of the graph.
static bool conv_weight_constant(const tj_cuda_program_t* p, uint32_t ki,
                                 uint32_t b) {
  const tj_lowered_kernel_t* low = p->kernels[ki].low;
  const tj_node_t* n = &p->plan.graph->nodes[low->buffer_nodes[b]];
  return n->op == TJ_OP_CONSTANT && n->dtype == TJ_DTYPE_F32 && n->rank >= 3 &&
         n->rank == low->kernel->rank && low->buffer_offset_dims[b] == 0;
}

// A conv kernel emitted to read its weight prepared whose weight is not a
// constant (an input, a value computed in the graph): emitted again
// reading it as it is (tj_nvptx_options_t.conv_plain_weight), before the
// module compiles. The emitter cannot tell (the kernel IR names no
// constants) and the graph is known only now.
static tj_status_t conv_plain_weights(tj_cuda_program_t* p) {
  for (uint32_t ki = 0; ki < p->num_kernels; ++ki) {
    tj_nvptx_kernel_t* info = &p->kernels[ki].info;
    if (!info->conv_prepared) continue;
    const tj_kir_t* k = p->kernels[ki].low->kernel;
    bool constant = false;
    for (uint32_t b = 0; b < k->num_buffers; ++b) {
      if (k->buffers[b].role == TJ_KIR_CONV_W)
        constant = conv_weight_constant(p, ki, b);
    }
    if (constant) continue;
    tj_nvptx_options_t o = p->nv_options;
    o.conv_plain_weight = true;
    tj_nvptx_module_remove_kernel(p->mod.nvptx, info->entry);
    TJ_RETURN_IF_ERROR(tj_nvptx_module_add_kernel(p->mod.nvptx, k, &o, info));
  }
  return NULL;
}

// The weights that kernels read relaid: the quantized ones of tiled
// kernels (tj_nvptx_kernel_t.wq_tiled) and the conv weights read prepared
// (conv_prepared): |bits| per node, 4 or 8 for a quantized weight, 1 for
// its scale and zero point (rows padded to 64 columns), kConvPrepared,
// 0 for the rest; |plain| whether a node's bytes are needed as they are
// too (another kernel reads them, or a host or custom step might, or they
// are an output).
static tj_status_t wq_tiled_nodes(tj_cuda_program_t* p, uint8_t* bits,
                                  bool* plain) {
  const tj_graph_t* g = p->plan.graph;
  bool others = p->plan.has_host_steps;
  for (uint32_t s = 0; s < p->plan.num_steps; ++s)
    others |= p->plan.steps[s].kind != TJ_CUDA_STEP_KERNELS;
  for (uint32_t i = 0; i < g->num_nodes; ++i)
    plain[i] = others || p->plan.first_output[i] >= 0;
  for (uint32_t ki = 0; ki < p->num_kernels; ++ki) {
    const tj_lowered_kernel_t* low = p->kernels[ki].low;
    const tj_kir_t* k = low->kernel;
    for (uint32_t b = 0; b < low->num_buffers; ++b) {
      uint32_t node = low->buffer_nodes[b];
      tj_kir_role_t role = k->buffers[b].role;
      if (p->kernels[ki].info.conv_prepared && role == TJ_KIR_CONV_W) {
        if (!conv_weight_constant(p, ki, b) ||
            (bits[node] && bits[node] != kConvPrepared))
          return tj_internal(
              "kernel @%s: a prepared conv weight %%%u that is not a whole "
              "f32 constant",
              k->name, node);
        bits[node] = kConvPrepared;
        continue;
      }
      bool tiled = p->kernels[ki].info.wq_tiled &&
                   (role == TJ_KIR_GEMM_B || role == TJ_KIR_GEMM_BSCALE ||
                    role == TJ_KIR_GEMM_BZERO);
      if (!tiled) {
        plain[node] = true;
        continue;
      }
      const tj_node_t* n = &g->nodes[node];
      uint8_t want = role == TJ_KIR_GEMM_B ? (uint8_t)k->bq.bits : 1;
      if (n->op != TJ_OP_CONSTANT || n->rank < 1 || n->rank > 2 ||
          (role == TJ_KIR_GEMM_B && n->rank != 2) ||
          (bits[node] && bits[node] != want))
        return tj_internal(
            "kernel @%s: a tiled weight %%%u that is not a "
            "constant of one use",
            k->name, node);
      bits[node] = want;
    }
  }
  return NULL;
}

static tj_status_t upload_constants(tj_cuda_program_t* p) {
  const tj_graph_t* g = p->plan.graph;
  const tj_memplan_t* mp = p->plan.mp;
  p->plan.const_ptr = tj_calloc(p->al, g->num_nodes + 1, sizeof(uint64_t));
  p->plan.wq_tiled_ptr = tj_calloc(p->al, g->num_nodes + 1, sizeof(uint64_t));
  uint8_t* bits = tj_calloc(p->al, g->num_nodes + 1, 1);
  bool* plain = tj_calloc(p->al, g->num_nodes + 1, sizeof(bool));
  void** packed = tj_calloc(p->al, g->num_nodes + 1, sizeof(void*));
  int64_t* packed_bytes = tj_calloc(p->al, g->num_nodes + 1, sizeof(int64_t));
  tj_status_t status = NULL;
  if (!p->plan.const_ptr || !p->plan.wq_tiled_ptr || !bits || !plain ||
      !packed || !packed_bytes)
    status = tj_status_oom();
  if (!status) status = wq_tiled_nodes(p, bits, plain);
  int64_t total = 0;
  for (uint32_t b = 0; b < mp->num_buffers && !status; ++b) {
    const tj_buffer_t* buf = &mp->buffers[b];
    const tj_node_t* n = &g->nodes[buf->node];
    if (buf->kind != TJ_BUFFER_EXTERNAL || n->op != TJ_OP_CONSTANT) continue;
    int64_t bytes =
        tj_host_numel(n->rank, n->dims) * (int64_t)tj_dtype_size(n->dtype);
    if (bits[buf->node] && !packed[buf->node]) {
      // The weight relaid once here; int4 rows of ceil(N / 2) bytes hold
      // N rounded up to even columns, the same tiles (N pads to 64).
      // A scale or zero point: rows of N padded to 64 columns (zeros).
      int32_t w = bits[buf->node];
      int64_t rows = n->rank == 2 ? n->dims[0] : 1;
      int64_t cols = n->dims[n->rank - 1];
      int64_t es = (int64_t)tj_dtype_size(n->dtype);
      int64_t taps = 1;
      for (int32_t d = 2; d < n->rank; ++d) taps *= n->dims[d];
      int64_t tb =
          w == kConvPrepared
              ? tj_nvptx_conv_weight_bytes(n->dims[0], n->dims[1], taps)
          : w == 1 ? rows * ((cols + 63) / 64 * 64) * es
                   : tj_nvptx_wq_tiled_bytes(w, rows, w == 4 ? 2 * cols : cols);
      packed[buf->node] = tj_calloc(p->al, (size_t)(tb ? tb : 1), 1);
      if (!packed[buf->node]) {
        status = tj_status_oom();
        break;
      }
      packed_bytes[buf->node] = tb ? tb : 1;
      uint8_t* to = packed[buf->node];
      const uint8_t* from = n->attrs.data;
      if (w == kConvPrepared) {
        // Rounded to TF32, rows padded to the k-tile, tap-major where the
        // kernel gathers so.
        tj_nvptx_conv_prepare_weight(n->dims[0], n->dims[1], taps, n->rank - 2,
                                     from, (float*)to);
      } else if (w != 1) {
        tj_nvptx_wq_tile(w, rows, w == 4 ? 2 * cols : cols, from, to);
      } else {
        for (int64_t r = 0; r < rows; ++r)
          memcpy(to + r * (tb / rows), from + r * cols * es,
                 (size_t)(cols * es));
      }
      tb = packed_bytes[buf->node];
      total += tj_cuda_align_up(tb, TJ_CUDA_STAGE_ALIGN);
    }
    if (plain[buf->node])
      total += tj_cuda_align_up(bytes ? bytes : 1, TJ_CUDA_STAGE_ALIGN);
  }
  tj_cuda_device_t* d = p->device;
  bool entered = false;
  if (!status && total > 0) {
    status = tj_cuda_allocator_alloc(d->allocator, (size_t)total, p->stream,
                                     &p->plan.consts);
    if (!status) status = tj_cuda_device_enter(d);
    entered = !status;
  }
  int64_t offset = 0;
  for (uint32_t b = 0; b < mp->num_buffers && !status && total > 0; ++b) {
    const tj_buffer_t* buf = &mp->buffers[b];
    const tj_node_t* n = &g->nodes[buf->node];
    if (buf->kind != TJ_BUFFER_EXTERNAL || n->op != TJ_OP_CONSTANT) continue;
    int64_t bytes =
        tj_host_numel(n->rank, n->dims) * (int64_t)tj_dtype_size(n->dtype);
    if (packed[buf->node] && !p->plan.wq_tiled_ptr[buf->node]) {
      p->plan.wq_tiled_ptr[buf->node] = p->plan.consts + (uint64_t)offset;
      status =
          TJ_CU_STATUS(&d->cu, cuMemcpyHtoDAsync,
                       (p->plan.consts + (uint64_t)offset, packed[buf->node],
                        (size_t)packed_bytes[buf->node], p->stream));
      offset += tj_cuda_align_up(packed_bytes[buf->node], TJ_CUDA_STAGE_ALIGN);
    }
    if (!plain[buf->node] || status) continue;
    p->plan.const_ptr[buf->node] = p->plan.consts + (uint64_t)offset;
    if (bytes > 0) {
      status = TJ_CU_STATUS(&d->cu, cuMemcpyHtoDAsync,
                            (p->plan.consts + (uint64_t)offset, n->attrs.data,
                             (size_t)bytes, p->stream));
    }
    offset += tj_cuda_align_up(bytes ? bytes : 1, TJ_CUDA_STAGE_ALIGN);
  }
  // Pageable sources: the copies are done when they return, but wait for
  // the stream anyway so the constants are there before any run (and the
  // relaid copies may be freed).
  if (entered) {
    if (!status)
      status = TJ_CU_STATUS(&d->cu, cuStreamSynchronize, (p->stream));
    tj_cuda_device_leave(d);
  }
  for (uint32_t i = 0; packed && packed_bytes && i < g->num_nodes; ++i)
    if (packed[i]) tj_free(p->al, packed[i], (size_t)packed_bytes[i]);
  tj_free(p->al, bits, g->num_nodes + 1);
  tj_free(p->al, plain, sizeof(bool) * (g->num_nodes + 1));
  tj_free(p->al, packed, sizeof(void*) * (g->num_nodes + 1));
  tj_free(p->al, packed_bytes, sizeof(int64_t) * (g->num_nodes + 1));
  return status;
}

static tj_status_t alloc_run_state(tj_cuda_program_t* p) {
  const tj_graph_t* g = p->plan.graph;
  uint32_t slots = p->plan.mp->num_slots;
  uint32_t nk = p->num_kernels;
  p->run.num_args = 0;
  for (uint32_t i = 0; i < nk; ++i) {
    p->kernels[i].arg_offset = p->run.num_args;
    const tj_kir_t* k = p->kernels[i].low->kernel;
    p->run.num_args += k->num_buffers + k->num_params;
  }
  size_t klen = tj_cuda_graph_key_len(p) + 1;
  size_t bytes = sizeof(int64_t) * (slots + 1) +
                 sizeof(uint64_t) * (g->num_nodes + 1) +
                 sizeof(int64_t) * 2 * (g->num_inputs + g->num_outputs + 1) +
                 sizeof(int64_t) * TJ_KIR_MAX_PARAMS * (nk + 1) +
                 sizeof(uint64_t) * (p->run.num_args + 1) +
                 sizeof(void*) * (p->run.num_args + 1) +
                 sizeof(tj_nvptx_launch_t) * (nk + 1) + sizeof(int64_t) * klen;
  unsigned char* m = tj_calloc(p->al, 1, bytes);
  if (!m) return tj_status_oom();
  p->run.meta = m;
  p->run.meta_bytes = bytes;
  // Every array is 8-byte aligned: all elements are 8 bytes, except the
  // launches (4-byte fields), placed last but one.
  p->run.slot_offsets = (int64_t*)m;
  m += sizeof(int64_t) * (slots + 1);
  p->run.loc = (uint64_t*)m;
  m += sizeof(uint64_t) * (g->num_nodes + 1);
  p->run.in_stage = (int64_t*)m;
  p->run.in_pin = p->run.in_stage + g->num_inputs + 1;
  m += sizeof(int64_t) * 2 * (g->num_inputs + 1);
  p->run.out_stage = (int64_t*)m;
  p->run.out_pin = p->run.out_stage + g->num_outputs + 1;
  m += sizeof(int64_t) * 2 * (g->num_outputs + 1);
  p->run.scalars = (int64_t*)m;
  m += sizeof(int64_t) * TJ_KIR_MAX_PARAMS * (nk + 1);
  p->run.argv = (uint64_t*)m;
  m += sizeof(uint64_t) * (p->run.num_args + 1);
  p->run.argp = (void**)m;
  m += sizeof(void*) * (p->run.num_args + 1);
  p->run.key = (int64_t*)m;
  m += sizeof(int64_t) * klen;
  p->run.launches = (tj_nvptx_launch_t*)m;
  for (uint32_t i = 0; i < p->run.num_args; ++i)
    p->run.argp[i] = &p->run.argv[i];
  for (int i = 0; i < TJ_CUDA_MAX_GRAPHS; ++i) {
    p->graphs.entries[i].key = tj_calloc(p->al, klen, sizeof(int64_t));
    if (!p->graphs.entries[i].key) return tj_status_oom();
  }
  return NULL;
}

//===--- chunks ---===//

static void release_chunks(tj_cuda_program_t* p) {
  uint32_t n = p->mod.num_chunks;
  for (uint32_t c = 0; c < n; ++c) {
    if (p->mod.cumods) tj_cuda_module_destroy(p->mod.cumods[c]);
    if (p->mod.chunk_ptx) tj_free_string(p->al, p->mod.chunk_ptx[c]);
    if (p->mod.chunk_cubin && p->mod.chunk_cubin[c])
      tj_free(p->al, p->mod.chunk_cubin[c], p->mod.chunk_cubin_bytes[c]);
    if (p->mod.chunk_asm_status) tj_status_free(p->mod.chunk_asm_status[c]);
  }
  if (p->mod.chunk_of)
    tj_free(p->al, p->mod.chunk_of, sizeof(uint32_t) * (p->num_kernels + 1));
  if (p->mod.cumods)
    tj_free(p->al, p->mod.cumods, sizeof(tj_cuda_module_t*) * (n + 1));
  if (p->mod.chunk_ptx)
    tj_free(p->al, p->mod.chunk_ptx, sizeof(char*) * (n + 1));
  if (p->mod.chunk_cubin)
    tj_free(p->al, p->mod.chunk_cubin, sizeof(void*) * (n + 1));
  if (p->mod.chunk_cubin_bytes)
    tj_free(p->al, p->mod.chunk_cubin_bytes, sizeof(size_t) * (n + 1));
  if (p->mod.chunk_asm_status)
    tj_free(p->al, p->mod.chunk_asm_status, sizeof(tj_status_t) * (n + 1));
  if (p->mod.chunk_ms)
    tj_free(p->al, p->mod.chunk_ms, sizeof(double) * (n + 1));
  if (p->mod.chunk_asm_ms)
    tj_free(p->al, p->mod.chunk_asm_ms, sizeof(double) * (n + 1));
  if (p->mod.chunk_cpu_ms)
    tj_free(p->al, p->mod.chunk_cpu_ms, sizeof(double) * (n + 1));
  tj_nvjitlink_close(p->mod.nvjitlink);
  p->mod.nvjitlink = NULL;
  p->mod.num_chunks = 0;
  p->mod.chunk_of = NULL;
  p->mod.cumods = NULL;
  p->mod.chunk_ptx = NULL;
  p->mod.chunk_cubin = NULL;
  p->mod.chunk_cubin_bytes = NULL;
  p->mod.chunk_asm_status = NULL;
  p->mod.chunk_ms = p->mod.chunk_asm_ms = p->mod.chunk_cpu_ms = NULL;
}

// Cuts the module's kernels into chunks by their cost
// (tj_nvptx_plan_chunks) and sets up the per-chunk arrays.
static tj_status_t plan_chunks(tj_cuda_program_t* p) {
  uint32_t nk = p->num_kernels;
  uint64_t* cost = tj_calloc(p->al, nk + 1, sizeof(uint64_t));
  p->mod.chunk_of = tj_calloc(p->al, nk + 1, sizeof(uint32_t));
  if (!cost || !p->mod.chunk_of) {
    if (cost) tj_free(p->al, cost, sizeof(uint64_t) * (nk + 1));
    return tj_status_oom();
  }
  for (uint32_t i = 0; i < nk; ++i)
    cost[i] =
        tj_nvptx_module_kernel_cost(p->mod.nvptx, p->kernels[i].info.entry);
  uint32_t n =
      tj_nvptx_plan_chunks(cost, nk, TJ_NVPTX_CHUNK_BUDGET, p->mod.chunk_of);
  tj_free(p->al, cost, sizeof(uint64_t) * (nk + 1));
  p->mod.num_chunks = n;
  p->mod.cumods = tj_calloc(p->al, n + 1, sizeof(tj_cuda_module_t*));
  p->mod.chunk_ptx = tj_calloc(p->al, n + 1, sizeof(char*));
  p->mod.chunk_cubin = tj_calloc(p->al, n + 1, sizeof(void*));
  p->mod.chunk_cubin_bytes = tj_calloc(p->al, n + 1, sizeof(size_t));
  p->mod.chunk_asm_status = tj_calloc(p->al, n + 1, sizeof(tj_status_t));
  p->mod.chunk_ms = tj_calloc(p->al, n + 1, sizeof(double));
  p->mod.chunk_asm_ms = tj_calloc(p->al, n + 1, sizeof(double));
  p->mod.chunk_cpu_ms = tj_calloc(p->al, n + 1, sizeof(double));
  if (!p->mod.cumods || !p->mod.chunk_ptx || !p->mod.chunk_cubin ||
      !p->mod.chunk_cubin_bytes || !p->mod.chunk_asm_status ||
      !p->mod.chunk_ms || !p->mod.chunk_asm_ms || !p->mod.chunk_cpu_ms)
    return tj_status_oom();
  p->stats.chunks = n;
  return NULL;
}

// Opens nvJitLink (TJ_NVJITLINK); without it the chunks' PTX goes to the
// driver's JIT, and why is kept for the log.
static void open_nvjitlink(tj_cuda_program_t* p) {
  tj_status_t s = tj_nvjitlink_open(
      p->al, tj_setting(p->context, TJ_SETTING_NVJITLINK), &p->mod.nvjitlink);
  if (s) {
    snprintf(p->mod.nvjitlink_why, sizeof(p->mod.nvjitlink_why), "%s",
             tj_status_message(s));
    tj_status_free(s);
  }
}

// tj_nvptx_chunk_fn: chunk |c|'s PTX to a cubin by nvJitLink, on the
// thread that compiled it. A refusal is kept for the driver's JIT to meet
// (load_chunks), not a failure; running out of memory is.
static tj_status_t assemble_chunk(void* ctx, uint32_t c, const char* ptx) {
  tj_cuda_program_t* p = ctx;
  if (!p->mod.nvjitlink) return NULL;
  double start = tj_now_ms();
  tj_status_t s = tj_nvjitlink_assemble(p->mod.nvjitlink, p->arch, ptx, p->al,
                                        &p->mod.chunk_cubin[c],
                                        &p->mod.chunk_cubin_bytes[c]);
  p->mod.chunk_asm_ms[c] = tj_now_ms() - start;
  if (tj_status_code(s) == TJ_STATUS_OUT_OF_MEMORY) return s;
  p->mod.chunk_asm_status[c] = s;
  return NULL;
}

// Compiles the chunks that |todo| names (per kernel: its chunk, or
// TJ_NVPTX_NO_CHUNK for a chunk a cache served) on the program's threads;
// consumes the module.
static tj_status_t compile_chunks(tj_cuda_program_t* p, const uint32_t* todo) {
  uint32_t nk = p->num_kernels;
  const char** entries = tj_calloc(p->al, nk + 1, sizeof(char*));
  if (!entries) return tj_status_oom();
  for (uint32_t i = 0; i < nk; ++i) entries[i] = p->kernels[i].info.entry;
  uint32_t threads = p->mod.threads ? p->mod.threads : 1;
  tj_nvptx_chunks_t ch = {
      .num_entries = nk,
      .entries = entries,
      .chunk_of = todo,
      .num_chunks = p->mod.num_chunks,
      .threads = threads,
      .then = assemble_chunk,
      .then_ctx = p,
  };
  double start = tj_now_ms();
  tj_nvptx_module_t* m = p->mod.nvptx;
  p->mod.nvptx = NULL;
  tj_status_t status = tj_nvptx_module_compile_chunks(
      m, &ch, p->al, p->mod.chunk_ptx, p->mod.chunk_ms, p->mod.chunk_cpu_ms);
  p->stats.compile_ms = tj_now_ms() - start;
  p->stats.compile_threads = threads;
  tj_free(p->al, entries, sizeof(char*) * (nk + 1));
  for (uint32_t c = 0; c < p->mod.num_chunks && !status; ++c) {
    if (!p->mod.chunk_ptx[c]) continue;
    ++p->stats.chunks_compiled;
    p->stats.ptx_bytes += strlen(p->mod.chunk_ptx[c]);
    p->stats.link_ms += p->mod.chunk_asm_ms[c];
  }
  return status;
}

// make_ptx of a chunk for tj_cuda_cubin_load (the driver's JIT).
typedef struct chunk_ptx_t {
  const char* ptx;
} chunk_ptx_t;

static tj_status_t chunk_ptx(void* ctx, const char** out_ptx) {
  *out_ptx = ((chunk_ptx_t*)ctx)->ptx;
  return NULL;
}

// Chunk |c|, compiled, loaded: nvJitLink's cubin (then kept in the
// caches), else its PTX through the driver's JIT and the cubin cache as
// the one module's (tj_cuda_cubin_load).
static tj_status_t load_compiled_chunk(tj_cuda_program_t* p, uint32_t c,
                                       tj_cuda_cubin_load_t* load,
                                       const char** out_source) {
  tj_status_t refused = p->mod.chunk_asm_status[c];
  if (p->mod.chunk_cubin[c]) {
    double start = tj_now_ms();
    tj_status_t s = tj_cuda_module_load_cubin(p->device, p->mod.chunk_cubin[c],
                                              p->mod.chunk_cubin_bytes[c],
                                              &p->mod.cumods[c]);
    p->stats.load_ms += tj_now_ms() - start;
    if (!s) {
      tj_cuda_cubin_store(p->device, load, p->mod.chunk_cubin[c],
                          p->mod.chunk_cubin_bytes[c]);
      p->stats.cubin_bytes += p->mod.chunk_cubin_bytes[c];
      *out_source = "nvJitLink";
      return NULL;
    }
    if (tj_status_code(s) == TJ_STATUS_OUT_OF_MEMORY) return s;
    refused = s;  // a driver older than the library, say
    p->mod.chunk_asm_status[c] = s;
  }
  if (refused) {
    tj_context_diagnostic(p->context, TJ_SEVERITY_WARNING,
                          "cuda: chunk %u of %u: %s; the driver's JIT "
                          "assembles it",
                          c, p->mod.num_chunks, tj_status_message(refused));
  }
  chunk_ptx_t cp = {p->mod.chunk_ptx[c]};
  tj_cuda_cubin_load_t l = *load;
  l.assembler = NULL;
  l.make_ptx = chunk_ptx;
  l.make_ptx_ctx = &cp;
  tj_cuda_cubin_result_t r;
  TJ_RETURN_IF_ERROR(tj_cuda_cubin_load(p->device, &l, &p->mod.cumods[c], &r));
  p->stats.link_ms += r.link_ms;
  p->stats.load_ms += r.load_ms;
  p->stats.cubin_bytes += r.bytes;
  *out_source = r.source;
  return NULL;
}

// Loads the kernels as chunks (issue 14): each chunk's cubin from the
// caches (memory, then disk), the others compiled at once on the
// program's threads, LLVM then nvJitLink on each, and loaded one CUmodule
// a chunk; then every kernel's function from its chunk.
static tj_status_t load_chunks(tj_cuda_program_t* p, const char* cache_dir) {
  TJ_RETURN_IF_ERROR(plan_chunks(p));
  open_nvjitlink(p);
  uint32_t n = p->mod.num_chunks, nk = p->num_kernels;
  tj_cache_key_t* keys = tj_calloc(p->al, n + 1, sizeof(tj_cache_key_t));
  uint32_t* todo = tj_calloc(p->al, nk + 1, sizeof(uint32_t));
  tj_status_t status = keys && todo ? NULL : tj_status_oom();
  tj_cuda_cubin_load_t load;
  memset(&load, 0, sizeof(load));
  load.context = p->context;
  load.cache_dir = cache_dir ? cache_dir : "";
  load.arch = p->arch;
  load.assembler =
      p->mod.nvjitlink ? tj_nvjitlink_version(p->mod.nvjitlink) : NULL;
  uint32_t hits = 0, misses = 0;
  const char* hit_source = NULL;
  for (uint32_t c = 0; c < n && !status; ++c) {
    status = kernels_key(p, c, &keys[c]);
    if (status) break;
    load.ptx_key = keys[c];
    tj_cuda_cubin_result_t r;
    status = tj_cuda_cubin_lookup(p->device, &load, &p->mod.cumods[c], &r);
    if (!status && !r.hit && load.assembler) {
      // A cubin the driver's JIT made for this chunk before.
      tj_cuda_cubin_load_t d = load;
      d.assembler = NULL;
      status = tj_cuda_cubin_lookup(p->device, &d, &p->mod.cumods[c], &r);
    }
    if (status) break;
    p->stats.load_ms += r.load_ms;
    if (r.hit) {
      ++hits;
      hit_source = r.source;
      p->stats.cubin_bytes += r.bytes;
    }
  }
  for (uint32_t i = 0; i < nk && !status; ++i) {
    uint32_t c = p->mod.chunk_of[i];
    todo[i] = p->mod.cumods[c] ? TJ_NVPTX_NO_CHUNK : c;
  }
  if (!status && hits < n) {
    status = compile_chunks(p, todo);
  } else {
    tj_nvptx_module_destroy(p->mod.nvptx);
    p->mod.nvptx = NULL;
  }
  const char* made = NULL;
  for (uint32_t c = 0; c < n && !status; ++c) {
    if (p->mod.cumods[c]) continue;
    load.ptx_key = keys[c];
    status = load_compiled_chunk(p, c, &load, &made);
    ++misses;
  }
  if (keys) tj_free(p->al, keys, sizeof(tj_cache_key_t) * (n + 1));
  if (todo) tj_free(p->al, todo, sizeof(uint32_t) * (nk + 1));
  TJ_RETURN_IF_ERROR(status);
  p->stats.cubin_hits += hits;
  if (cache_dir && cache_dir[0]) p->stats.cubin_misses += misses;
  // The sources of the last chunk of each kind: a cold compile says how
  // its chunks were assembled, a warm one which cache served them.
  p->stats.cubin_source = made ? made : hit_source ? hit_source : "none";
  p->stats.ptx_source = misses ? "LLVM"
                        : hit_source && strcmp(hit_source, "disk cache") == 0
                            ? "none (cubin from the disk cache)"
                            : "none (cubin from the memory cache)";
  if (misses && (tj_log_flags(p->context) & TJ_LOG_CACHE))
    tj_context_diagnostic(
        p->context, TJ_SEVERITY_REMARK,
        "cuda: %u kernels in %u chunks, %u compiled on %u threads in %.1f ms "
        "(%s), %u from the cubin caches",
        nk, n, misses, p->stats.compile_threads, p->stats.compile_ms,
        p->mod.nvjitlink ? tj_nvjitlink_version(p->mod.nvjitlink)
                         : p->mod.nvjitlink_why,
        hits);
  double start = tj_now_ms();
  for (uint32_t i = 0; i < nk; ++i) {
    tj_cuda_program_kernel_t* k = &p->kernels[i];
    TJ_RETURN_IF_ERROR(tj_cuda_kernel_get(p->mod.cumods[p->mod.chunk_of[i]],
                                          k->info.entry, k->info.shared_bytes,
                                          &k->fn));
  }
  p->stats.load_ms += tj_now_ms() - start;
  return NULL;
}

// An offline program stops at PTX: the module's, and one more module with
// every kernel each GEMM candidate compiles apart on a GPU
// (tj_cuda_gemm_emit_candidates), each function renamed
// <entry>_c<candidate> so they share a module. With autotuning off and no
// candidate forced (TJ_CUDA_GEMM_CANDIDATE) a GPU run compiles none of
// them (tj_cuda_gemm_choose keeps candidate 0), so neither does this: the
// tests that check a program's own module, not its candidates, ask for
// that and skip their emission.
static tj_status_t finish_offline(tj_cuda_program_t* p) {
  if (p->num_kernels == 0) {
    tj_nvptx_module_destroy(p->mod.nvptx);
    p->mod.nvptx = NULL;
    return NULL;
  }
  if (p->mod.offline_chunks) {
    TJ_RETURN_IF_ERROR(plan_chunks(p));
    open_nvjitlink(p);
    TJ_RETURN_IF_ERROR(compile_chunks(p, p->mod.chunk_of));
  } else {
    TJ_RETURN_IF_ERROR(compile_module(p));
    p->stats.ptx_bytes = strlen(p->mod.ptx);
  }
  TJ_RETURN_IF_ERROR(tj_cuda_gemm_setup(p));
  if (!p->gemm.tunes || (!p->gemm.autotune && p->gemm.forced < 0)) return NULL;
  TJ_RETURN_IF_ERROR(
      tj_nvptx_module_new(p->target, p->al, "tj_variants", &p->mod.nvptx));
  tj_status_t status = tj_cuda_gemm_emit_candidates(p, p->mod.nvptx);
  if (!status && p->mod.num_variant_kernels > 0) {
    tj_nvptx_module_t* m = p->mod.nvptx;
    p->mod.nvptx = NULL;
    status = tj_nvptx_module_compile(m, p->al, &p->mod.variants_ptx);
  }
  tj_nvptx_module_destroy(p->mod.nvptx);
  p->mod.nvptx = NULL;
  return status;
}

tj_status_t tj_cuda_program_finish(
    tj_cuda_program_t* p, const tj_graph_t* graph, const tj_memplan_t* memplan,
    const tj_lowered_kernel_t* kernels, uint32_t num_kernels,
    const tj_cuda_step_t* steps, uint32_t num_steps, const char* cache_dir) {
  if (num_kernels != p->num_kernels)
    return tj_internal("cuda program: %u kernels added, %u finished",
                       p->num_kernels, num_kernels);
  for (uint32_t i = 0; i < num_kernels; ++i) p->kernels[i].low = &kernels[i];
  if (!p->device) return finish_offline(p);
  p->plan.graph = graph;
  p->plan.mp = memplan;
  p->plan.num_symbols = tj_dim_num_symbols(&graph->dims);
  p->plan.steps = tj_calloc(p->al, num_steps + 1, sizeof(tj_cuda_step_t));
  if (!p->plan.steps) return tj_status_oom();
  p->plan.num_steps = num_steps;
  if (num_steps)
    memcpy(p->plan.steps, steps, sizeof(tj_cuda_step_t) * num_steps);
  snprintf(p->cache_dir, sizeof(p->cache_dir), "%s",
           cache_dir ? cache_dir : "");
  for (uint32_t s = 0; s < num_steps; ++s) {
    p->plan.has_host_steps |= steps[s].kind == TJ_CUDA_STEP_HOST;
  }
  p->plan.first_output =
      tj_alloc(p->al, sizeof(int32_t) * (graph->num_nodes + 1));
  if (!p->plan.first_output) return tj_status_oom();
  for (uint32_t i = 0; i < graph->num_nodes; ++i) p->plan.first_output[i] = -1;
  for (uint32_t i = graph->num_outputs; i-- > 0;) {
    p->plan.first_output[graph->outputs[i].node] = (int32_t)i;
  }
  TJ_RETURN_IF_ERROR(tj_cuda_custom_setup(p));
  TJ_RETURN_IF_ERROR(alloc_run_state(p));
  TJ_RETURN_IF_ERROR(tj_cuda_custom_load(p));
  if (num_kernels > 0) {
    TJ_RETURN_IF_ERROR(conv_plain_weights(p));
    if (p->mod.threads) {
      TJ_RETURN_IF_ERROR(load_chunks(p, cache_dir));
    } else {
      TJ_RETURN_IF_ERROR(load_module(p, cache_dir));
      double start = tj_now_ms();
      for (uint32_t i = 0; i < num_kernels; ++i) {
        tj_cuda_program_kernel_t* k = &p->kernels[i];
        TJ_RETURN_IF_ERROR(tj_cuda_kernel_get(p->mod.cumod, k->info.entry,
                                              k->info.shared_bytes, &k->fn));
      }
      p->stats.load_ms += tj_now_ms() - start;
    }
    TJ_RETURN_IF_ERROR(tj_cuda_gemm_setup(p));
  } else {
    tj_nvptx_module_destroy(p->mod.nvptx);
    p->mod.nvptx = NULL;
  }
  return upload_constants(p);
}

const char* tj_cuda_program_ptx(const tj_cuda_program_t* program) {
  return program->mod.ptx;
}

const char* tj_cuda_program_kernel_ptx(const tj_cuda_program_t* program,
                                       uint32_t index) {
  if (program->mod.chunk_of && program->mod.chunk_ptx &&
      index < program->num_kernels)
    return program->mod.chunk_ptx[program->mod.chunk_of[index]];
  return program->mod.ptx;
}

void tj_cuda_program_set_offline_chunks(tj_cuda_program_t* program,
                                        uint32_t threads) {
  program->mod.offline_chunks = true;
  if (threads) program->mod.threads = threads;
  if (!program->mod.threads) program->mod.threads = 1;
}

void tj_cuda_program_chunks(const tj_cuda_program_t* p,
                            tj_cuda_program_chunks_t* out) {
  memset(out, 0, sizeof(*out));
  out->num_chunks = p->mod.num_chunks;
  out->threads = p->stats.compile_threads;
  out->wall_ms = p->stats.compile_ms;
  out->ptx = p->mod.chunk_ptx;
  out->cubin = p->mod.chunk_cubin;
  out->cubin_bytes = p->mod.chunk_cubin_bytes;
  out->chunk_of = p->mod.chunk_of;
  out->ms = p->mod.chunk_ms;
  out->asm_ms = p->mod.chunk_asm_ms;
  out->cpu_ms = p->mod.chunk_cpu_ms;
  out->assembler = p->mod.nvjitlink ? tj_nvjitlink_version(p->mod.nvjitlink)
                                    : p->mod.nvjitlink_why;
}

const char* tj_cuda_program_variants_ptx(const tj_cuda_program_t* program,
                                         uint32_t* out_num_kernels) {
  *out_num_kernels = program->mod.num_variant_kernels;
  return program->mod.variants_ptx;
}
