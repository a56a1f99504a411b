// backends/cuda/cuda_staging.c
//
// Tensors at the edge of a CUDA program's run (cuda_program.h): the
// device checks of the caller's tensors, their sizes and layouts, the host
// copies between strided layouts (CPU tensors are packed into and unpacked
// from the pinned buffer), and the copy kernels that gather a strided CUDA
// tensor into dense staging in the arena and scatter it back.

#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_program.h"
#include "lib/dtype.h"

//===--- tensors ---===//

int64_t tj_cuda_tensor_bytes(const tj_tensor_t* t) {
  return tj_host_numel(t->rank, t->shape) * (int64_t)tj_dtype_size(t->dtype);
}

tj_status_t tj_cuda_check_device_tensor(const tj_cuda_program_t* p,
                                        const tj_tensor_t* t, const char* what,
                                        const char* name) {
  if (t->device_type == TJ_DEVICE_CPU) return NULL;
  if (t->device_type != TJ_DEVICE_CUDA)
    return tj_invalid("%s \"%s\": device type %d is neither CPU nor CUDA", what,
                      name, (int)t->device_type);
  if (t->device_id != p->device->ordinal)
    return tj_invalid(
        "%s \"%s\" is on CUDA device %d; the executable runs on "
        "device %d",
        what, name, (int)t->device_id, (int)p->device->ordinal);
  // Strided CUDA inputs may repeat elements (zero strides broadcast);
  // outputs may not, nor overlap each other or an input: the caller,
  // tj_executable_run, checked that with tj_ir_check_run_memory.
  return NULL;
}

//===--- strided CUDA tensors ---===//

// The copy kernel for |dtype|, |rank| and direction, built on first use.
static tj_status_t copy_kernel(tj_cuda_program_t* p, tj_dtype_t dtype,
                               int32_t rank, bool scatter,
                               tj_cuda_copy_kernel_t** out) {
  for (uint32_t i = 0; i < p->staging.num_copies; ++i) {
    tj_cuda_copy_kernel_t* c = &p->staging.copies[i];
    if (c->dtype == dtype && c->rank == rank && c->scatter == scatter) {
      *out = c;
      return NULL;
    }
  }
  if (p->staging.num_copies == TJ_CUDA_MAX_COPY_KERNELS)
    return tj_internal("cuda program: more than %d strided copy kernels",
                       TJ_CUDA_MAX_COPY_KERNELS);
  char name[64];
  snprintf(name, sizeof(name), "tj_%s_%s_r%d", scatter ? "scatter" : "gather",
           tj_dtype_name(dtype), (int)rank);
  tj_kir_t* k = NULL;
  TJ_RETURN_IF_ERROR(tj_kir_create(p->al, TJ_KIR_POINTWISE, name, &k));
  // Params: sizes [0, r), the tensor's strides [r, 2r), the staging's
  // strides of dims [0, r - 1) at [2r, 3r - 1); its innermost stride is 1,
  // which lets the dense side use vector accesses.
  tj_kir_ival_t dims[TJ_KIR_MAX_RANK], strided[TJ_KIR_MAX_RANK],
      dense[TJ_KIR_MAX_RANK];
  char pname[16];
  for (int32_t d = 0; d < rank; ++d) {
    snprintf(pname, sizeof(pname), "n%d", (int)d);
    dims[d] = tj_kir_runtime(tj_kir_add_param(k, pname));
  }
  for (int32_t d = 0; d < rank; ++d) {
    snprintf(pname, sizeof(pname), "s%d", (int)d);
    strided[d] = tj_kir_runtime(tj_kir_add_param(k, pname));
  }
  for (int32_t d = 0; d + 1 < rank; ++d) {
    snprintf(pname, sizeof(pname), "t%d", (int)d);
    dense[d] = tj_kir_runtime(tj_kir_add_param(k, pname));
  }
  dense[rank - 1] = tj_kir_constant(1);
  tj_kir_set_space(k, rank, dims);
  uint32_t src = tj_kir_add_buffer(k, "src", dtype, TJ_KIR_INPUT,
                                   scatter ? dense : strided);
  uint32_t dst = tj_kir_add_buffer(k, "dst", dtype, TJ_KIR_OUTPUT,
                                   scatter ? strided : dense);
  tj_kir_store(k, dst, tj_kir_load(k, src));
  tj_status_t status = tj_kir_finalize(k);
  tj_cuda_kir_kernel_t* fn = NULL;
  if (!status) {
    tj_nvptx_options_t o = tj_cuda_program_math_options(p);
    status = tj_cuda_program_compile_kernel(p, k, &o, &fn);
  }
  if (status) {
    tj_kir_destroy(k);
    return status;
  }
  tj_cuda_copy_kernel_t* c = &p->staging.copies[p->staging.num_copies++];
  *c = (tj_cuda_copy_kernel_t){dtype, rank, scatter, k, fn};
  *out = c;
  return NULL;
}

// Enqueues the copy between CUDA tensor |t| (any strides, byte_offset) and
// the dense array at |dense|: a gather into it, or (|scatter|) a scatter
// out of it.
tj_status_t tj_cuda_strided_copy(tj_cuda_program_t* p, const tj_tensor_t* t,
                                 uint64_t dense, bool scatter) {
  if (tj_host_numel(t->rank, t->shape) == 0) return NULL;
  // Dims of size 1 have no effect on addresses: drop them.
  int64_t n[TJ_MAX_RANK], s[TJ_MAX_RANK];
  int32_t r = 0;
  for (int32_t d = 0; d < t->rank; ++d) {
    if (t->shape[d] == 1) continue;
    n[r] = t->shape[d];
    s[r++] = t->strides[d];
  }
  if (r == 0) {
    n[r] = 1;
    s[r++] = 1;
  }
  tj_cuda_copy_kernel_t* c = NULL;
  TJ_RETURN_IF_ERROR(copy_kernel(p, t->dtype, r, scatter, &c));
  int64_t scalars[3 * TJ_MAX_RANK];
  int64_t dense_stride = 1;
  for (int32_t d = r; d-- > 0;) {
    scalars[d] = n[d];
    scalars[r + d] = s[d];
    if (d + 1 < r) scalars[2 * r + d] = dense_stride;
    dense_stride *= n[d];
  }
  uint64_t argv[2 + 3 * TJ_MAX_RANK];
  void* argp[2 + 3 * TJ_MAX_RANK];
  uint64_t tensor = (uint64_t)(uintptr_t)tj_host_tensor_data(t);
  argv[0] = scatter ? dense : tensor;
  argv[1] = scatter ? tensor : dense;
  uint32_t np = c->kir->num_params;
  memcpy(&argv[2], scalars, sizeof(int64_t) * np);
  for (uint32_t i = 0; i < 2 + np; ++i) argp[i] = &argv[i];
  tj_nvptx_launch_t l;
  TJ_RETURN_IF_ERROR(tj_nvptx_launch_config(c->kir, &c->fn->info, scalars,
                                            p->device->num_sms, &l));
  TJ_RETURN_IF_ERROR(tj_cuda_program_launch_function(
      p, c->fn->function.function, &l, argp, c->fn->info.entry));
  ++p->stats.strided_copies;
  return NULL;
}

void tj_cuda_staging_release(tj_cuda_program_t* p) {
  for (uint32_t i = 0; i < p->staging.num_copies; ++i) {
    tj_cuda_kir_destroy(p->staging.copies[i].fn);
    tj_kir_destroy(p->staging.copies[i].kir);
  }
}
