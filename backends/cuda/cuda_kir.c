// Kernel IR kernels on a CUDA device. See cuda_kir.h.

#include "backends/cuda/cuda_kir.h"

#include <stdio.h>
#include <string.h>

// Makes the PTX of an emitted module on a cubin-cache miss (LLVM's NVPTX
// back end consumes the module).
typedef struct kir_ptx_t {
  tj_nvptx_module_t* module;
  tj_allocator_t allocator;
  char* ptx;
  double ms;
} kir_ptx_t;

static tj_status_t make_ptx(void* ctx, const char** out_ptx) {
  kir_ptx_t* c = ctx;
  double start = tj_now_ms();
  tj_nvptx_module_t* module = c->module;
  c->module = NULL;
  tj_status_t s = tj_nvptx_module_compile(module, c->allocator, &c->ptx);
  c->ms += tj_now_ms() - start;
  *out_ptx = c->ptx;
  return s;
}

// The cache key of a kernel's PTX: the module's LLVM IR (everything the
// emitter decided, whatever options led there), the arch, LLVM's version
// (its NVPTX back end makes the PTX) and ours.
static tj_status_t ptx_key(const tj_nvptx_target_t* target,
                           const tj_nvptx_module_t* module,
                           tj_allocator_t allocator, tj_cache_key_t* out) {
  char* ir = NULL;
  TJ_RETURN_IF_ERROR(tj_nvptx_module_print(module, allocator, &ir));
  tj_cache_hasher_t h;
  tj_cache_hasher_initialize(&h);
  tj_cache_hasher_update_string(&h, "tensorjit cuda kernel 1");
  tj_cache_hasher_update_string(&h, tj_version_string());
  tj_cache_hasher_update_string(
      &h, tj_nvptx_arch_name(tj_nvptx_target_arch(target)));
  unsigned major, minor, patch;
  tj_nvptx_llvm_version(&major, &minor, &patch);
  char buf[48];
  snprintf(buf, sizeof(buf), "llvm %u.%u.%u", major, minor, patch);
  tj_cache_hasher_update_string(&h, buf);
  tj_cache_hasher_update_string(&h, ir);
  tj_free_string(allocator, ir);
  *out = tj_cache_hasher_finalize(&h);
  return NULL;
}

static tj_status_t compile(tj_cuda_device_t* device,
                           const tj_nvptx_target_t* target,
                           const tj_kir_t* kernel,
                           const tj_nvptx_options_t* options,
                           tj_context_t* context, const char* cache_dir,
                           tj_cuda_kir_kernel_t** out, char** out_ptx) {
  *out = NULL;
  if (out_ptx) *out_ptx = NULL;
  tj_cuda_kir_kernel_t* k = tj_calloc(device->host, 1, sizeof(*k));
  if (!k) return tj_status_oom();
  k->device = device;
  k->kernel = kernel;
  double start = tj_now_ms();
  kir_ptx_t c = {NULL, device->host, NULL, 0};
  tj_status_t status =
      tj_nvptx_module_new(target, device->host, kernel->name, &c.module);
  if (!status)
    status = tj_nvptx_module_add_kernel(c.module, kernel, options, &k->info);
  tj_cuda_cubin_load_t load;
  memset(&load, 0, sizeof(load));
  load.context = context;
  load.cache_dir = out_ptx ? NULL : cache_dir;  // the PTX is wanted
  load.arch = tj_nvptx_target_arch(target);
  load.make_ptx = make_ptx;
  load.make_ptx_ctx = &c;
  if (!status && load.cache_dir && load.cache_dir[0])
    status = ptx_key(target, c.module, device->host, &load.ptx_key);
  double emit_ms = tj_now_ms() - start;
  tj_cuda_cubin_result_t r;
  if (!status) status = tj_cuda_cubin_load(device, &load, &k->module, &r);
  tj_nvptx_module_destroy(c.module);  // a cubin hit: never compiled
  k->compile_ms = emit_ms + c.ms;
  if (!status) {
    k->load_ms = r.load_ms + r.link_ms;
    k->cubin_hit = r.hit;
    status = tj_cuda_kernel_get(k->module, k->info.entry, k->info.shared_bytes,
                                &k->function);
  }
  if (status || !out_ptx) {
    tj_free_string(device->host, c.ptx);
  } else {
    *out_ptx = c.ptx;
  }
  if (status) {
    tj_cuda_kir_destroy(k);
    return tj_status_annotate(status, "kernel @%s", kernel->name);
  }
  *out = k;
  return NULL;
}

tj_status_t tj_cuda_kir_compile(tj_cuda_device_t* device,
                                const tj_nvptx_target_t* target,
                                const tj_kir_t* kernel,
                                const tj_nvptx_options_t* options,
                                tj_cuda_kir_kernel_t** out, char** out_ptx) {
  return compile(device, target, kernel, options, NULL, NULL, out, out_ptx);
}

tj_status_t tj_cuda_kir_compile_cached(
    tj_cuda_device_t* device, const tj_nvptx_target_t* target,
    const tj_kir_t* kernel, const tj_nvptx_options_t* options,
    tj_context_t* context, const char* cache_dir, tj_cuda_kir_kernel_t** out) {
  return compile(device, target, kernel, options, context, cache_dir, out,
                 NULL);
}

void tj_cuda_kir_destroy(tj_cuda_kir_kernel_t* kernel) {
  if (!kernel) return;
  tj_cuda_module_destroy(kernel->module);
  tj_free(kernel->device->host, kernel, sizeof(*kernel));
}

tj_status_t tj_cuda_kir_launch(const tj_cuda_kir_kernel_t* kernel,
                               const tj_cu_deviceptr_t* buffers,
                               const int64_t* scalars) {
  const tj_kir_t* k = kernel->kernel;
  tj_nvptx_launch_t launch;
  TJ_RETURN_IF_ERROR(tj_nvptx_launch_config(k, &kernel->info, scalars,
                                            kernel->device->num_sms, &launch));
  if (launch.empty) return NULL;
  uint64_t addresses[TJ_KIR_MAX_BUFFERS];
  for (uint32_t i = 0; i < k->num_buffers; ++i) addresses[i] = buffers[i];
  TJ_RETURN_IF_ERROR(tj_nvptx_gemm_check_pointers(k, &kernel->info, addresses));
  // cuLaunchKernel takes a pointer to each parameter's value.
  void* args[TJ_KIR_MAX_BUFFERS + TJ_KIR_MAX_PARAMS + 5];
  for (uint32_t i = 0; i < k->num_buffers; ++i) args[i] = (void*)&buffers[i];
  for (uint32_t i = 0; i < k->num_params; ++i)
    args[k->num_buffers + i] = (void*)&scalars[i];
  tj_cuda_tensor_maps_t maps;
  if (kernel->info.tma) {
    TJ_RETURN_IF_ERROR(tj_cuda_gemm_tensor_maps(
        kernel->device, k, &kernel->info, addresses, scalars, &maps));
    tj_cuda_tensor_map_args(&kernel->info, &maps,
                            args + k->num_buffers + k->num_params);
  }
  // A conv split along k adds into its output (tj_nvptx_launch_t).
  TJ_RETURN_IF_ERROR(tj_cuda_fill_bytes(
      kernel->device, buffers[launch.zero_buffer], 0, launch.zero_bytes));
  tj_cuda_launch_t l;
  memcpy(l.grid, launch.grid, sizeof(l.grid));
  memcpy(l.block, launch.block, sizeof(l.block));
  l.shared_bytes = launch.shared_bytes;
  l.cluster = launch.cluster;
  return tj_cuda_kernel_launch(&kernel->function, &l, args);
}

//===--- tensor maps ---===//

uint32_t tj_cuda_tensor_map_args(const tj_nvptx_kernel_t* info,
                                 tj_cuda_tensor_maps_t* maps, void** out_args) {
  uint32_t n = 0;
  out_args[n++] = maps->a;
  out_args[n++] = maps->b;
  if (info->dual) out_args[n++] = maps->b2;
  if (!info->tma_store) return n;
  out_args[n++] = maps->c;
  out_args[n++] = &maps->c_ok;
  return n;
}

// A batched operand's batch dims as one: |*out_count| entries
// |*out_pitch| elements apart. They must run into each other (stride d =
// stride d + 1 x dim d + 1, as a dense [B, H, T, D] tensor's do; dims of 1
// aside); false otherwise (a broadcast along one of them, a permuted
// batch), which the cp.async kernels serve.
static bool one_batch_dim(const tj_kir_t* k, const tj_kir_buffer_t* buf,
                          const int64_t* scalars, int64_t* out_count,
                          int64_t* out_pitch) {
  int64_t count = 1, pitch = 0, next = -1;  // next: the stride dim d must have
  for (int32_t d = k->rank - 3; d >= 0; --d) {
    int64_t dim = tj_kir_ival_eval(k->dims[d], scalars);
    int64_t stride = tj_kir_ival_eval(buf->strides[d], scalars);
    count *= dim;
    if (dim == 1) continue;
    if (next >= 0 && stride != next) return false;
    if (next < 0) pitch = stride;
    next = stride * dim;
  }
  *out_count = count;
  *out_pitch = pitch;
  return pitch > 0 || count <= 1;
}

// One map of |rows| x |cols| elements of |buf|'s dtype, rows |pitch|
// elements apart, boxes of 128 bytes of columns (64 halves, 32 f32 for
// TF32) x |box_rows|: 2-D, or with |batch| > 0 3-D, |batch| such
// matrices |batch_pitch| elements apart, boxes one matrix deep.
static tj_status_t encode_map(const tj_cuda_symbols_t* cu, const tj_kir_t* k,
                              const tj_kir_buffer_t* buf, uint64_t address,
                              int64_t rows, int64_t cols, int64_t pitch,
                              int64_t batch, int64_t batch_pitch,
                              uint32_t box_rows, uint64_t* out) {
  int64_t elem = (int64_t)tj_dtype_size(buf->dtype);
  int64_t pitch_bytes = pitch * elem;
  // One entry: any pitch past its matrix does (the box never moves).
  if (batch == 1) batch_pitch = pitch * rows;
  int64_t batch_bytes = batch_pitch * elem;
  if (address % 16 != 0 || pitch_bytes % 16 != 0 || pitch_bytes <= 0 ||
      pitch_bytes >= ((int64_t)1 << 40) || rows > ((int64_t)1 << 32) ||
      cols > ((int64_t)1 << 32) || pitch < cols ||
      (batch > 0 &&
       (batch_bytes % 16 != 0 || batch_bytes <= 0 ||
        batch_bytes >= ((int64_t)1 << 40) || batch > ((int64_t)1 << 32))))
    return tj_unsupported(
        "kernel @%s: TMA cannot address gemm operand %%%s: %lld x %lld "
        "elements, rows %lld bytes apart, %lld matrices %lld bytes apart, "
        "at 0x%llx (it needs a 16-byte aligned base, pitches of 16-byte "
        "multiples below 2^40 and sizes up to 2^32)",
        k->name, buf->name, (long long)rows, (long long)cols,
        (long long)pitch_bytes, (long long)batch, (long long)batch_bytes,
        (unsigned long long)address);
  uint64_t dims[3] = {(uint64_t)cols, (uint64_t)rows, (uint64_t)batch};
  uint64_t strides[2] = {(uint64_t)pitch_bytes, (uint64_t)batch_bytes};
  uint32_t box[3] = {(uint32_t)(128 / elem), box_rows, 1};
  uint32_t element_strides[3] = {1, 1, 1};
  tj_cu_tensor_map_data_type_t dt =
      buf->dtype == TJ_DTYPE_F16   ? TJ_CU_TENSOR_MAP_DATA_TYPE_FLOAT16
      : buf->dtype == TJ_DTYPE_F32 ? TJ_CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : TJ_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return tj_status_annotate(
      TJ_CU_STATUS(
          cu, cuTensorMapEncodeTiled,
          ((tj_cu_tensor_map_t*)out, dt, batch > 0 ? 3 : 2,
           (void*)(uintptr_t)address, dims, strides, box, element_strides,
           TJ_CU_TENSOR_MAP_INTERLEAVE_NONE, TJ_CU_TENSOR_MAP_SWIZZLE_128B,
           TJ_CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
           TJ_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)),
      "kernel @%s: the tensor map of gemm operand %%%s (%lld x %lld)", k->name,
      buf->name, (long long)rows, (long long)cols);
}

tj_status_t tj_cuda_gemm_tensor_maps(tj_cuda_device_t* device,
                                     const tj_kir_t* k,
                                     const tj_nvptx_kernel_t* info,
                                     const uint64_t* buffers,
                                     const int64_t* scalars,
                                     tj_cuda_tensor_maps_t* out) {
  memset(out, 0, sizeof(*out));
  if (k->kind != TJ_KIR_GEMM || !info->tma || k->rank < 2)
    return tj_invalid("kernel @%s: not a TMA gemm", k->name);
  int32_t r = k->rank;
  int64_t m = tj_kir_ival_eval(k->dims[r - 2], scalars);
  int64_t n = tj_kir_ival_eval(k->dims[r - 1], scalars);
  int64_t kk = tj_kir_ival_eval(k->gemm_k, scalars);
  int64_t entries = 1;
  for (int32_t d = 0; d < r - 2; ++d)
    entries *= tj_kir_ival_eval(k->dims[d], scalars);
  // No tile runs.
  if (m <= 0 || n <= 0 || entries <= 0) return NULL;
  const tj_cuda_symbols_t* cu = &device->cu;
  if (info->tma_store && r == 2) {
    // The kernel's one stored buffer (emit_nvptx_gemm.c's
    // tma_store_output); where TMA cannot address it, or the epilogue
    // stores more than one, the kernel stores without the map.
    uint32_t store = 0, stores = 0;
    const tj_kir_phase_t* ph = &k->phases[0];
    for (uint32_t i = 0; i < ph->num_insts; ++i) {
      if (ph->insts[i].kind == TJ_KIR_STORE) {
        store = ph->insts[i].ref;
        ++stores;
      }
    }
    if (stores == 1) {
      const tj_kir_buffer_t* buf = &k->buffers[store];
      int64_t pitch = tj_kir_ival_eval(buf->strides[0], scalars);
      TJ_RETURN_IF_ERROR(tj_cuda_device_enter(device));
      tj_status_t s = encode_map(cu, k, buf, buffers[store], m, n, pitch, 0, 0,
                                 (uint32_t)info->tile_m, out->c);
      tj_cuda_device_leave(device);
      if (s && tj_status_code(s) != TJ_STATUS_UNSUPPORTED) return s;
      out->c_ok = s == NULL;
      tj_status_free(s);
    }
  }
  // No load is issued.
  if (kk <= 0) return NULL;
  // A K-major B (x @ w^T) is mapped as the [N, K] matrix it is, boxes of
  // 128 bytes of k by as many rows of n (emit_nvptx_wgmma.c's producer).
  bool kmajor = tj_kir_gemm_b_kmajor(k);
  TJ_RETURN_IF_ERROR(tj_cuda_device_enter(device));
  tj_status_t status = NULL;
  for (uint32_t i = 0; i < k->num_buffers && !status; ++i) {
    const tj_kir_buffer_t* buf = &k->buffers[i];
    bool is_a = buf->role == TJ_KIR_GEMM_A;
    if (!is_a && buf->role != TJ_KIR_GEMM_B && buf->role != TJ_KIR_GEMM_B2)
      continue;
    // A dual GEMM's B2 (swiglu, issue 14) is mapped as B is.
    uint64_t* map_b = buf->role == TJ_KIR_GEMM_B2 ? out->b2 : out->b;
    // The contiguous dim, and the other one of the matrix.
    int inner = (!is_a && kmajor ? r - 2 : r - 1), outer = 2 * r - 3 - inner;
    int64_t pitch = tj_kir_ival_eval(buf->strides[outer], scalars);
    // A batched operand's map is rank 3 (the kernel loads 3-D boxes:
    // tj_nvptx_gemm_operand_batched); 0 entries: rank 2.
    int64_t batch = 0, batch_pitch = 0;
    bool batched = tj_nvptx_gemm_operand_batched(k, i);
    if (!tj_kir_ival_is_const(buf->strides[inner], 1)) {
      status =
          tj_unsupported("kernel @%s: TMA gemm operand %%%s is not contiguous",
                         k->name, buf->name);
    } else if (batched &&
               !one_batch_dim(k, buf, scalars, &batch, &batch_pitch)) {
      status = tj_unsupported(
          "kernel @%s: the batch dims of TMA gemm operand %%%s are not one "
          "dim of evenly spaced matrices",
          k->name, buf->name);
    } else if (is_a) {
      status = encode_map(cu, k, buf, buffers[i], m, kk, pitch, batch,
                          batch_pitch, (uint32_t)info->tile_m, out->a);
    } else if (kmajor) {
      status =
          encode_map(cu, k, buf, buffers[i], n, kk, pitch, batch, batch_pitch,
                     (uint32_t)(128 / tj_dtype_size(buf->dtype)), map_b);
    } else {
      // B: boxes of 128 bytes of n by as many k rows (64 halves, 32 f32).
      status =
          encode_map(cu, k, buf, buffers[i], kk, n, pitch, batch, batch_pitch,
                     (uint32_t)(128 / tj_dtype_size(buf->dtype)), map_b);
    }
  }
  tj_cuda_device_leave(device);
  return status;
}
