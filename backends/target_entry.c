// backends/target_entry.c: the driver's entry points that name one target:
// tj_cuda_compile_ptx (the compile of a CUDA executable with an offline
// program, stopping at PTX), tj_executable_cuda_stats and
// tj_x86_executable_tuner. They sit in the driver, above the backends,
// because they reach an executable (the driver's) and one backend's
// program; the backends only expose accessors of their own programs.
// Also tj_context_register_op: a custom op's CUDA code given as LLVM IR
// goes through our NVPTX back end (jit/), which the registry's layer
// (backends/runtime) may not reach.

#include <stdio.h>
#include <string.h>

#include "backends/compile.h"
#include "backends/cuda/cuda_entry.h"
#include "backends/x86/gemm_tune.h"
#include "jit/nvptx.h"
#include "lib/custom_op.h"
#include "lib/env.h"

// The compile of a CUDA executable with an offline program: the PTX is
// copied out and the executable, never run, released.
static tj_status_t compile_offline(const tj_graph_t* graph,
                                   const tj_compile_options_t* options,
                                   const tj_cuda_offline_arg_t* arg,
                                   tj_allocator_t al,
                                   tj_cuda_offline_ptx_t* out) {
  memset(out, 0, sizeof(*out));
  tj_compile_options_t opts;
  if (options) {
    opts = *options;
  } else {
    tj_compile_options_initialize(&opts);
  }
  opts.target = TJ_TARGET_CUDA;
  tj_executable_t* exe = NULL;
  TJ_RETURN_IF_ERROR(
      tj_compile_with_backend(graph, &opts, &tj_backend_cuda, arg, NULL, &exe));
  void *target, *program;
  tj_executable_backend(exe, &target, &program);
  tj_cuda_offline_ptx_t r;
  memset(&r, 0, sizeof(r));
  r.num_kernels = tj_cuda_backend_num_kernels(program);
  r.num_host_steps = tj_executable_num_host_steps(exe);
  const char* ptx = tj_cuda_backend_ptx(program);
  const char* variants =
      tj_cuda_backend_variants_ptx(program, &r.num_variant_kernels);
  tj_status_t status = NULL;
  if (ptx && !(r.ptx = tj_strdup(al, ptx))) status = tj_status_oom();
  if (!status && variants && !(r.variants_ptx = tj_strdup(al, variants)))
    status = tj_status_oom();
  if (!status && arg->chunks) status = tj_cuda_backend_chunks(program, al, &r);
  tj_executable_release(exe);
  if (status) {
    tj_cuda_offline_ptx_deinitialize(al, &r);
    return status;
  }
  *out = r;
  return NULL;
}

tj_status_t tj_cuda_compile_ptx(const tj_graph_t* graph,
                                const tj_compile_options_t* options,
                                tj_nvptx_arch_t arch, tj_allocator_t al,
                                tj_cuda_offline_ptx_t* out) {
  tj_cuda_offline_arg_t arg = {arch, false, 0};
  return compile_offline(graph, options, &arg, al, out);
}

tj_status_t tj_cuda_compile_ptx_chunks(const tj_graph_t* graph,
                                       const tj_compile_options_t* options,
                                       tj_nvptx_arch_t arch, uint32_t threads,
                                       tj_allocator_t al,
                                       tj_cuda_offline_ptx_t* out) {
  tj_cuda_offline_arg_t arg = {arch, true, threads};
  return compile_offline(graph, options, &arg, al, out);
}

tj_status_t tj_executable_cuda_stats(const tj_executable_t* executable,
                                     tj_cuda_program_stats_t* out_stats) {
  void *target, *program;
  const tj_backend_t* b = tj_executable_backend(executable, &target, &program);
  if (b != &tj_backend_cuda) program = NULL;
  tj_cuda_backend_stats(program, out_stats);  // zeroes them without one
  if (!program) {
    return tj_invalid("tj_executable_cuda_stats: not a CUDA executable");
  }
  return NULL;
}

void tj_executable_cuda_memory(const tj_executable_t* executable,
                               tj_executable_stats_t* st) {
  void *target, *program;
  const tj_backend_t* b = tj_executable_backend(executable, &target, &program);
  if (b == &tj_backend_cuda && program) tj_cuda_backend_memory(program, st);
}

tj_x86_tuner_t* tj_x86_executable_tuner(const tj_executable_t* executable) {
  void *target, *program;
  const tj_backend_t* b = tj_executable_backend(executable, &target, &program);
  if (b != &tj_backend_x86) return NULL;
  return tj_x86_backend_tuner(program);
}

//===--- custom ops ---===//

// cuda_llvm_ir: compiled to PTX here, once, for sm_80 (the driver compiles
// that PTX for any newer GPU); the op is then registered as if the PTX had
// been given.
static tj_status_t register_llvm_ir(tj_context_t* context,
                                    const tj_custom_op_desc_t* desc,
                                    const char* ir) {
  tj_allocator_t al = tj_context_allocator(context);
  char what[160];
  snprintf(what, sizeof(what), "tj_context_register_op: op %s", desc->name);
  tj_nvptx_target_t* target = NULL;
  TJ_RETURN_IF_ERROR(tj_nvptx_target_create(al, TJ_NVPTX_SM_80, &target));
  char* ptx = NULL;
  // The op's IR may call libdevice's functions (__nv_expf, ...).
  tj_status_t status = tj_nvptx_target_set_libdevice(
      target, tj_setting(context, TJ_SETTING_LIBDEVICE));
  if (!status)
    status =
        tj_nvptx_compile_ir_text(target, ir, desc->cuda_entry, what, al, &ptx);
  tj_nvptx_target_destroy(target);
  if (status) return status;
  tj_custom_op_desc_t d = *desc;  // its struct_size covers cuda_llvm_ir
  d.cuda_ptx = ptx;
  d.cuda_llvm_ir = NULL;
  status = tj_custom_op_register(context, &d);  // copies the PTX
  tj_free_string(al, ptx);
  return status;
}

tj_status_t tj_context_register_op(tj_context_t* context,
                                   const tj_custom_op_desc_t* desc) {
  if (!context) return tj_invalid("tj_context_register_op: context is NULL");
  TJ_RETURN_IF_ERROR(tj_custom_op_check_desc(desc));
  const char* ir = tj_custom_op_desc_llvm_ir(desc);
  if (ir) return register_llvm_ir(context, desc, ir);
  return tj_custom_op_register(context, desc);
}
