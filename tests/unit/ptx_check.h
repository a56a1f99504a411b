// A graph's kernels through the NVPTX emitter for sm_90a (no GPU needed):
// every node in a kernel (no host steps), and the PTX assembled by ptxas
// when the test was given its path. Shared by the dtype and op tests that
// check their PTX offline.

#ifndef TJ_TESTS_UNIT_PTX_CHECK_H_
#define TJ_TESTS_UNIT_PTX_CHECK_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cuda/cuda_entry.h"
#include "jit/nvptx.h"
#include "tests/unit/test.h"

// |text| assembled by ptxas for sm_90a; |ptxas| "" skips it. |what| names
// the module in a failure.
static inline void tj_test_assemble_ptx(const char* ptxas, const char* what,
                                        const char* text) {
  if (!ptxas[0] || !text) return;
  char path[] = "/tmp/tj_test_ptx_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  FILE* f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) return;
  fputs(text, f);
  fclose(f);
  char cmd[1200];
  snprintf(cmd, sizeof(cmd), "'%s' -arch=sm_90a -o /dev/null '%s' 2>&1", ptxas,
           path);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "  %s: ptxas failed\n", what);
  CHECK_EQ_INT(0, rc);
  remove(path);
}

// Assembles |ptx| for sm_90a with |ptxas| -v --warning-as-error ("": 0,
// nothing run); returns its exit status (1 where the log has one of
// ptxas's notes that wgmma code lost its pipelining or registers) and sets
// |*spills| to the spill stores it reports. Shared by ktrans_ptx_test and
// swiglu_ptx_test.
static inline int tj_test_ptxas_wgmma(const char* ptxas, const char* what,
                                      const char* ptx, long* spills) {
  static const char* const kWgmmaNotes[] = {"C7508", "C7510", "C7511", "C7515"};
  *spills = 0;
  if (!ptxas[0]) return 0;
  char path[] = "/tmp/tj_test_ptx_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  FILE* f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) return -1;
  fputs(ptx, f);
  fclose(f);
  char log[64], cmd[1200];
  snprintf(log, sizeof(log), "%s.log", path);
  snprintf(cmd, sizeof(cmd),
           "'%s' -arch=sm_90a -v --warning-as-error -o /dev/null '%s' > '%s' "
           "2>&1",
           ptxas, path, log);
  int rc = system(cmd);
  f = fopen(log, "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof(line), f)) {
      if (strstr(line, "rror") || strstr(line, "arning")) {
        printf("#   %s: %s", what, line);
      }
      const char* sp = strstr(line, "bytes spill stores");
      if (sp) {
        const char* q = sp;
        while (q > line && q[-1] == ' ') --q;
        while (q > line && q[-1] >= '0' && q[-1] <= '9') --q;
        *spills += strtol(q, NULL, 10);
      }
      for (size_t i = 0; i < TJ_ARRAY_SIZE(kWgmmaNotes); ++i) {
        if (strstr(line, kWgmmaNotes[i])) {
          printf("#   %s: %s", what, line);
          if (rc == 0) rc = 1;
        }
      }
    }
    fclose(f);
  }
  remove(log);
  remove(path);
  return rc;
}

// Finalizes and destroys |g|. |ptxas| "" skips the assembly; |what| names
// the graph in a failure.
static inline void tj_test_check_ptx(const char* ptxas, const char* what,
                                     tj_graph_t* g) {
  CHECK_OK(tj_graph_finalize(g));
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof(ptx));
  tj_allocator_t al = tj_allocator_system();
  CHECK_OK(tj_cuda_compile_ptx(g, NULL, TJ_NVPTX_SM_90A, al, &ptx));
  CHECK(ptx.num_kernels >= 1);
  CHECK_EQ_INT(0, ptx.num_host_steps);
  tj_test_assemble_ptx(ptxas, what, ptx.ptx);
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  tj_graph_destroy(g);
}

// Whether |ptx| has |needle| as |want| says; names |what| (not the PTX)
// when not.
static inline void tj_test_check_has(const char* what, const char* ptx,
                                     const char* needle, bool want) {
  bool found = ptx && strstr(ptx, needle) != NULL;
  if (found != want)
    fprintf(stderr, "  %s: %s \"%s\" in the PTX\n", what,
            want ? "no" : "unexpected", needle);
  CHECK(found == want);
}

// |k| emitted with |o| for |arch| into a module called |module|, as PTX
// (free with tj_free_string); NULL where the emitter refuses, |*out_status|
// then saying why. Shared by the GEMM schedule tests (ktrans, swiglu).
static inline char* tj_test_emit_ptx(const tj_kir_t* k,
                                     const tj_nvptx_options_t* o,
                                     tj_nvptx_arch_t arch, const char* module,
                                     tj_nvptx_kernel_t* info,
                                     tj_status_t* out_status) {
  tj_allocator_t al = tj_allocator_system();
  tj_nvptx_target_t* target = NULL;
  *out_status = tj_nvptx_target_create(al, arch, &target);
  if (*out_status) return NULL;
  tj_nvptx_module_t* mod = NULL;
  char* ptx = NULL;
  *out_status = tj_nvptx_module_new(target, al, module, &mod);
  if (!*out_status) *out_status = tj_nvptx_module_add_kernel(mod, k, o, info);
  if (!*out_status) {
    *out_status = tj_nvptx_module_compile(mod, al, &ptx);
  } else {
    tj_nvptx_module_destroy(mod);
  }
  tj_nvptx_target_destroy(target);
  return ptx;
}

// A GEMM schedule's name for failure messages: main loop, tile, k-tile,
// stages and the options set.
static inline void tj_test_describe_schedule(const tj_nvptx_options_t* o,
                                             char* buf, size_t size) {
  snprintf(buf, size, "%s%s %dx%d bk%d s%d%s%s%s%s%s%s",
           o->gemm_kernel == TJ_NVPTX_GEMM_MMA_SYNC ? "mma.sync" : "wgmma",
           o->gemm_tma ? " tma" : "", (int)o->gemm_tile_m, (int)o->gemm_tile_n,
           (int)o->gemm_tile_k, (int)o->gemm_stages,
           o->gemm_pingpong ? " pingpong" : "",
           o->gemm_persistent ? " persistent" : "",
           o->gemm_wgmma_drain ? " drain" : "",
           o->gemm_cluster ? " cluster" : "", o->gemm_tf32 ? " tf32" : "",
           o->gemm_tma_store ? " store" : "");
}

#endif  // TJ_TESTS_UNIT_PTX_CHECK_H_
