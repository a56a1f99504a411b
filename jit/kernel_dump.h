// The per-kernel dumps of the dump directory (the context's dump_dir
// setting, TJ_DUMP_DIR): for each kernel of a compiled program, files
// named <graph>.<kernel>.<ext> so that a user finds the kernel a profile
// (tj_executable_profile) or TJ_LOG=fusion named:
//   .kir      the kernel IR, as tj-opt --emit=kir prints it
//   .ll       the LLVM IR the emitters made, before optimization
//   .opt.ll   the LLVM IR after the O3 pipeline
//   .s        x86 assembly (x86 kernels)
//   .ptx      CUDA kernels: the program's PTX module (every kernel of the
//             graph is one module; this kernel is its .entry
//             tj_kernel_<kernel>), as ptxas takes it
//   .tune.txt the tuning decisions: ISA tier and lanes, the resolved GEMM
//             schedule, A packing, the program's own notes (autotune,
//             threads)
// A dump never fails a compile: what cannot be made or written is a
// warning on the context's channel (tj_dump_write's, once per process).

#ifndef TJ_JIT_KERNEL_DUMP_H_
#define TJ_JIT_KERNEL_DUMP_H_

#include "jit/x86_jit.h"

// Writes the dumps of the |num_kernels| kernels |kernels| of graph
// |graph_name| compiled by |jit| (whose allocator is |allocator|) to
// |dir|. |note| (may be NULL) ends every .tune.txt.
void tj_x86_dump_kernels(tj_x86_jit_t* jit, tj_allocator_t allocator,
                         const tj_context_t* context, const char* dir,
                         const char* graph_name, const tj_kir_t* const* kernels,
                         uint32_t num_kernels, const char* note);

// The .tune.txt text of |kernel| for a target of |f32_lanes| lanes named
// |target| ("x86 avx2"; a GPU, "sm_90a", with |f32_lanes| 0: no CPU
// schedule), with |note| (may be NULL) at the end, into |buf| (|size|
// bytes, truncated to fit).
void tj_kernel_tune_text(const tj_kir_t* kernel, const char* target,
                         int32_t f32_lanes, const char* note, char* buf,
                         size_t size);

// Writes <graph>.<kernel>.kir (tj-opt --emit=kir's text) to |dir|.
void tj_dump_kernel_ir(const tj_context_t* context, const char* dir,
                       const char* graph_name, const tj_kir_t* kernel);

// The dump name of a program of graph |graph|: the graph's name for the
// generic program (|shape| NULL), "<graph>.<shape>" for one specialized to
// |shape| ("B=7,S=128" becomes "B=7_S=128"), so that its kernels' files
// are <graph>.B=7_S=128.<kernel>.<ext>.
void tj_dump_program_name(char* out, size_t size, const char* graph,
                          const char* shape);

#endif  // TJ_JIT_KERNEL_DUMP_H_
