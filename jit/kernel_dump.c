// jit/kernel_dump.c: the per-kernel dumps of the dump directory
// (kernel_dump.h).

#include "jit/kernel_dump.h"

#include <stdio.h>
#include <string.h>

#include "lib/env.h"

void tj_kernel_tune_text(const tj_kir_t* k, const char* target, int32_t lanes,
                         const char* note, char* buf, size_t size) {
  size_t len = 0;
#define PUT(...)                                                             \
  do {                                                                       \
    int n_ = snprintf(buf + len, size - len, __VA_ARGS__);                   \
    if (n_ > 0) len = len + (size_t)n_ < size ? len + (size_t)n_ : size - 1; \
  } while (0)
  buf[0] = '\0';
  if (lanes <= 0) {  // a GPU: the NVPTX templates decide at launch
    PUT("kernel %s: %s, %s\n", k->name, tj_kir_kind_name(k->kind), target);
    if (note && *note) PUT("%s\n", note);
    return;
  }
  PUT("kernel %s: %s, %s, %d f32 lanes\n", k->name, tj_kir_kind_name(k->kind),
      target, (int)lanes);
  if (k->kind == TJ_KIR_GEMM) {
    tj_kir_gemm_schedule_t s;
    tj_kir_gemm_resolve(k, lanes, &s);
    PUT("gemm schedule: tile %dx%d mc %d nc %d kc %d (asked: tile %dx%d mc "
        "%d nc %d kc %d; 0 = auto)\n",
        (int)s.tile_m, (int)s.tile_n, (int)s.mc, (int)s.nc, (int)s.kc,
        (int)k->schedule.tile_m, (int)k->schedule.tile_n, (int)k->schedule.mc,
        (int)k->schedule.nc, (int)k->schedule.kc);
    PUT("gemm A: %s\n", tj_kir_gemm_packs_a(k)
                            ? "packed, units n block fastest"
                            : "read in place, units m block fastest");
  }
  if (k->kind == TJ_KIR_CONV && k->conv.window == TJ_KIR_WINDOW_GEMM) {
    tj_kir_conv_schedule_t s;
    tj_kir_conv_resolve(k, lanes, &s);
    PUT("conv schedule: %s, tile %dx%d oc %d nc %d kc %d (asked: oc %d nc "
        "%d below batch %d; 0 = auto, every batch)\n",
        s.ocvec     ? "ocvec"
        : s.shifted ? "shifted"
        : tj_kir_conv_reads_x_in_place(k)
            ? "direct"
            : (s.join ? "packed, joined" : "packed"),
        (int)s.mr, (int)s.nr, (int)s.oc, (int)s.nc, (int)s.kc,
        (int)k->schedule.mc, (int)k->schedule.nc, (int)k->schedule.kc);
  }
  if (k->num_params == 0) {
    tj_kir_launch_t launch;
    tj_status_t status = tj_kir_launch_info(k, lanes, NULL, &launch);
    if (!status) {
      PUT("launch: %lld units, %lld scratch bytes per call\n",
          (long long)launch.units, (long long)launch.scratch_bytes);
    }
    tj_status_free(status);
  } else {
    PUT("launch: units from the %u scalar params at run time\n", k->num_params);
  }
  if (note && *note) PUT("%s\n", note);
#undef PUT
}

// |name| = <graph>.<kernel><ext>.
static void file_name(char* out, size_t size, const char* graph,
                      const tj_kir_t* k, const char* ext) {
  snprintf(out, size, "%.200s.%.200s%s", graph, k->name, ext);
}

static void warn(const tj_context_t* context, const char* what,
                 const tj_kir_t* k, tj_status_t status) {
  tj_context_diagnostic(context, TJ_SEVERITY_WARNING,
                        "%s: no %s dump of kernel %s: %s",
                        tj_setting_source(context, TJ_SETTING_DUMP_DIR), what,
                        k->name, tj_status_message(status));
  tj_status_free(status);
}

void tj_dump_kernel_ir(const tj_context_t* context, const char* dir,
                       const char* graph_name, const tj_kir_t* kernel) {
  char name[512];
  char* text = NULL;
  tj_status_t status = tj_kir_print(kernel, &text);
  if (status) {
    warn(context, "kernel IR", kernel, status);
    return;
  }
  file_name(name, sizeof(name), graph_name ? graph_name : "main", kernel,
            ".kir");
  tj_dump_write(context, dir, name, text);
  tj_free_string(kernel->allocator, text);
}

void tj_x86_dump_kernels(tj_x86_jit_t* jit, tj_allocator_t allocator,
                         const tj_context_t* context, const char* dir,
                         const char* graph_name, const tj_kir_t* const* kernels,
                         uint32_t num_kernels, const char* note) {
  const char* graph = graph_name ? graph_name : "main";
  char target[64];
  snprintf(target, sizeof(target), "x86 %s",
           tj_x86_isa_name(tj_x86_jit_isa(jit)));
  int32_t lanes = tj_x86_jit_lanes(jit);
  for (uint32_t i = 0; i < num_kernels; ++i) {
    const tj_kir_t* k = kernels[i];
    char name[512];
    char* text = NULL;
    tj_status_t status;
    tj_dump_kernel_ir(context, dir, graph, k);
    static const char* const kExt[3] = {".ll", ".opt.ll", ".s"};
    static const char* const kWhat[3] = {"LLVM IR", "optimized LLVM IR",
                                         "assembly"};
    for (int j = 0; j < 3; ++j) {
      text = NULL;
      status = j < 2 ? tj_x86_jit_emit_ir(jit, &k, 1, j == 1, &text)
                     : tj_x86_jit_emit_asm(jit, &k, 1, &text);
      if (status) {
        warn(context, kWhat[j], k, status);
        continue;
      }
      file_name(name, sizeof(name), graph, k, kExt[j]);
      tj_dump_write(context, dir, name, text);
      tj_free_string(allocator, text);
    }
    char tune[2048];
    tj_kernel_tune_text(k, target, lanes, note, tune, sizeof(tune));
    file_name(name, sizeof(name), graph, k, ".tune.txt");
    tj_dump_write(context, dir, name, tune);
  }
}

void tj_dump_program_name(char* out, size_t size, const char* graph,
                          const char* shape) {
  snprintf(out, size, "%.120s%s%.120s", graph ? graph : "main",
           shape ? "." : "", shape ? shape : "");
  for (char* c = out; *c; ++c) {
    if (*c == ',' || *c == '/' || *c == ' ') *c = '_';
  }
}
