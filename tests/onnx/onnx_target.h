// The target an ONNX test compiles for (onnx_node_test, onnx_models_test:
// --target x86|cuda|cuda-compile), the GPU check of the cuda mode and the
// offline compile of the cuda-compile mode (no GPU needed: PTX for sm_90a
// through tj_cuda_compile_ptx, assembled by ptxas where it is found).

#ifndef TJ_TESTS_ONNX_ONNX_TARGET_H_
#define TJ_TESTS_ONNX_ONNX_TARGET_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/cuda/cuda_entry.h"
#include "backends/cuda/cuda_runtime.h"
#include "lib/base.h"

typedef enum tj_test_target_e {
  TJ_TEST_TARGET_X86,
  TJ_TEST_TARGET_CUDA,
  TJ_TEST_TARGET_CUDA_COMPILE,  // offline: PTX and ptxas, nothing runs
} tj_test_target_t;

// |name| ("x86", "cuda", "cuda-compile") into |*out|; false for others.
static inline bool tj_test_target_parse(const char* name,
                                        tj_test_target_t* out) {
  if (strcmp(name, "x86") == 0) {
    *out = TJ_TEST_TARGET_X86;
  } else if (strcmp(name, "cuda") == 0) {
    *out = TJ_TEST_TARGET_CUDA;
  } else if (strcmp(name, "cuda-compile") == 0) {
    *out = TJ_TEST_TARGET_CUDA_COMPILE;
  } else {
    return false;
  }
  return true;
}

// The compile options of a test on |target|: no disk cache; x86 on
// |threads| threads; CUDA (both modes) with exact f32 matmuls and convs.
static inline void tj_test_target_options(tj_test_target_t target,
                                          int32_t threads,
                                          tj_compile_options_t* o) {
  tj_compile_options_initialize(o);
  o->cache_dir = "";
  if (target == TJ_TEST_TARGET_X86) {
    o->target = TJ_TARGET_X86;
    o->x86.num_threads = threads;
  } else {
    o->target = TJ_TARGET_CUDA;
    o->cuda.allow_tf32 = false;  // exact f32 matmuls and convs
  }
}

// --target cuda: exits 77 (meson's skip), saying why, where the driver is
// missing or finds no GPU; exits 1 on any other failure to open it.
static inline void tj_test_require_gpu_or_skip(void) {
  tj_cuda_device_t* device = NULL;
  tj_status_t s = tj_cuda_device_create(tj_allocator_system(), NULL, &device);
  if (tj_status_code(s) == TJ_STATUS_UNSUPPORTED) {
    printf("SKIP: --target cuda needs a GPU: %s\n", tj_status_message(s));
    tj_status_free(s);
    exit(77);
  }
  if (s) {
    fprintf(stderr, "cuda device: %s: %s\n",
            tj_status_code_name(tj_status_code(s)), tj_status_message(s));
    tj_status_free(s);
    exit(1);
  }
  const char* arch = tj_cuda_device_arch_name(device);
  printf("# device %d: %s, %s\n", device->ordinal, device->name,
         arch ? arch : "older than sm_80");
  tj_cuda_device_destroy(device);
}

// cuda-compile's assembler: |given| (NULL: none given), else ptxas on
// PATH, else CUDA's; "" where none is found (the PTX is not assembled).
static inline const char* tj_test_find_ptxas(const char* given) {
  if (given) return given;
  if (system("command -v ptxas > /dev/null 2>&1") == 0) return "ptxas";
  if (access("/usr/local/cuda/bin/ptxas", X_OK) == 0)
    return "/usr/local/cuda/bin/ptxas";
  return "";
}

// Assembles |ptx| (|what| names the module) with |ptxas| -arch=sm_90a;
// BACKEND_FAILURE with the first line ptxas printed when it refuses. NULL
// |ptx| or "" |ptxas|: nothing to do.
static inline tj_status_t tj_test_assemble(const char* ptxas, const char* what,
                                           const char* ptx) {
  if (!ptxas[0] || !ptx) return NULL;
  char path[] = "/tmp/tj_onnx_ptx_XXXXXX", log[] = "/tmp/tj_onnx_log_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return tj_invalid("cannot make a temporary file");
  FILE* f = fdopen(fd, "w");
  if (!f) {
    close(fd);
    remove(path);
    return tj_invalid("cannot write a temporary file");
  }
  fputs(ptx, f);
  fclose(f);
  int lfd = mkstemp(log);
  if (lfd >= 0) close(lfd);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s' -arch=sm_90a -o /dev/null '%s' > '%s' 2>&1",
           ptxas, path, lfd >= 0 ? log : "/dev/null");
  int rc = system(cmd);
  remove(path);
  char line[512] = "";
  f = lfd >= 0 ? fopen(log, "r") : NULL;
  if (f) {
    if (!fgets(line, sizeof line, f)) line[0] = 0;
    fclose(f);
  }
  if (lfd >= 0) remove(log);
  if (rc == 0) return NULL;
  line[strcspn(line, "\n")] = 0;
  return tj_status_make(TJ_STATUS_BACKEND_FAILURE,
                        "ptxas -arch=sm_90a refused the %s (exit %d): %s", what,
                        WIFEXITED(rc) ? WEXITSTATUS(rc) : rc, line);
}

// cuda-compile: |graph|'s PTX for sm_90a as tj_compile with |options| would
// load it on an H100 or H200, the program's module and the GEMM
// candidates' assembled by |ptxas| ("" skips that). |*out_host_steps|: its
// graph breaks (groups that would run on the host).
static inline tj_status_t tj_test_compile_offline(
    const tj_graph_t* graph, const tj_compile_options_t* options,
    const char* ptxas, uint32_t* out_host_steps) {
  tj_allocator_t al = tj_allocator_system();
  tj_cuda_offline_ptx_t ptx;
  memset(&ptx, 0, sizeof ptx);
  *out_host_steps = 0;
  TJ_RETURN_IF_ERROR(
      tj_cuda_compile_ptx(graph, options, TJ_NVPTX_SM_90A, al, &ptx));
  tj_status_t s = tj_test_assemble(ptxas, "program's module", ptx.ptx);
  if (!s)
    s = tj_test_assemble(ptxas, "GEMM candidates' module", ptx.variants_ptx);
  *out_host_steps = ptx.num_host_steps;
  tj_cuda_offline_ptx_deinitialize(al, &ptx);
  return s;
}

#endif  // TJ_TESTS_ONNX_ONNX_TARGET_H_
