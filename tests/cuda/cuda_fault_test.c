// CUDA driver errors at every call site (issue 19, item 3): each driver call
// of a compile and a run of the capstone fails in turn, through the fault
// driver (tests/cuda/fault: a libcuda.so.1 that forwards to the real one,
// found first through LD_LIBRARY_PATH). Every failure must give a status,
// never a crash, a hang or a wrong answer; free every host allocation and
// the device memory; and leave the library working: the next compile and
// run, with no fault, succeeds with the reference's answer.
//
// The error each call returns is the one it fails with in life:
// out of memory for allocations, a launch failure for launches, an illegal
// address for synchronizations and copies, an unavailable (lost) device
// for the rest. Calls that clean up are not failed (fault_driver.h).

#include <dlfcn.h>
#include <unistd.h>

#include "tests/cuda/cuda_test_util.h"
#include "tests/unit/capstone_check.h"

enum { kB = 6, kK = 32, kN = 48, kMaxPoints = 400 };

static float g_x[kB * kK], g_w[kK * kN], g_b[kN], g_ref[kB * kN];
static const tj_test_capstone_t g_capstone = {kB,  kK,  kN,    g_x,
                                              g_w, g_b, g_ref, 1e-3f};
static char g_dir[64];

typedef struct fault_api_t {
  void (*arm)(long nth, int result);
  void (*disarm)(void);
  long (*calls)(void);
  const char* (*last)(void);
  int (*last_result)(void);
} fault_api_t;
static fault_api_t g_fault;

static bool find_fault_driver(void) {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) return false;
  void* arm = dlsym(library, "tj_fault_arm");
  void* disarm = dlsym(library, "tj_fault_disarm");
  void* calls = dlsym(library, "tj_fault_calls");
  void* last = dlsym(library, "tj_fault_last");
  void* last_result = dlsym(library, "tj_fault_last_result");
  if (!arm || !disarm || !calls || !last || !last_result) return false;
  memcpy(&g_fault.arm, &arm, sizeof(arm));
  memcpy(&g_fault.disarm, &disarm, sizeof(disarm));
  memcpy(&g_fault.calls, &calls, sizeof(calls));
  memcpy(&g_fault.last, &last, sizeof(last));
  memcpy(&g_fault.last_result, &last_result, sizeof(last_result));
  return true;  // stays open: the library's dlopen shares it
}

static const int64_t kXShape[] = {kB, kK}, kWShape[] = {kK, kN},
                     kBShape[] = {kN};

static void inputs(tj_tensor_t in[3]) {
  in[0] = tj_tensor_make(g_x, TJ_DTYPE_F32, 2, kXShape);
  in[1] = tj_tensor_make(g_w, TJ_DTYPE_F32, 2, kWShape);
  in[2] = tj_tensor_make(g_b, TJ_DTYPE_F32, 1, kBShape);
}

// A context of its own (so that everything it made is freed with it),
// the capstone compiled for CUDA (our kernels only: cuBLASLt is not the
// driver) and run twice (the second replays the CUDA graph).
static tj_status_t compile_and_run(tj_allocator_t allocator) {
  tj_context_options_t co = tj_test_context_options();
  co.allocator = allocator;
  tj_context_t* ctx = NULL;
  tj_status_t s = tj_context_create(&co, &ctx);
  if (s) return s;
  tj_graph_t* g = NULL;
  tj_executable_t* exe = NULL;
  s = tj_test_build_capstone(ctx, kK, kN, &g);
  tj_compile_options_t opts;
  tj_compile_options_initialize(&opts);
  opts.target = TJ_TARGET_CUDA;
  opts.autotune = TJ_AUTOTUNE_OFF;
  opts.cache_dir = g_dir;  // PTX and cubins on disk: each point is quick
  if (!s) s = tj_compile(g, &opts, &exe);
  if (!s) s = tj_test_run_capstone(exe, &g_capstone, 2);
  tj_executable_release(exe);
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  return s;
}

static size_t device_free_bytes(tj_cuda_device_t* device) {
  size_t free_bytes = 0, total = 0;
  CHECK_OK(tj_cuda_device_enter(device));
  CHECK_EQ_INT(0, device->cu.cuMemGetInfo(&free_bytes, &total));
  tj_cuda_device_leave(device);
  return free_bytes;
}

// Warm: the disk cache holds the cubins, so the compile loads them. Cold:
// the cache is emptied before each point, so the compile links PTX into a
// cubin through the driver (cuLink*) too.
static void sweep(tj_cuda_device_t* device, bool cold) {
  printf("# %s disk cache\n", cold ? "cold" : "warm");
  // A clean compile and run fills the disk cache and counts the calls.
  tj_test_allocator_t alloc;
  tj_test_allocator_initialize(&alloc, -1);
  CHECK_OK(compile_and_run(tj_test_allocator_get(&alloc)));
  size_t baseline = device_free_bytes(device);
  if (cold) tj_test_empty_dir(g_dir);
  long before = g_fault.calls();
  CHECK_OK(compile_and_run(tj_test_allocator_get(&alloc)));
  long total = g_fault.calls() - before;
  CHECK_EQ_INT(0, alloc.live_blocks);
  printf("# %ld driver calls in a compile and two runs\n", total);
  long step = total / kMaxPoints + 1, points = 0, failed = 0;
  long drift_max = 0;
  for (long n = 0; n < total; n += step, ++points) {
    if (cold) tj_test_empty_dir(g_dir);
    tj_test_allocator_initialize(&alloc, -1);
    g_fault.arm(n, 0);
    tj_status_t s = compile_and_run(tj_test_allocator_get(&alloc));
    g_fault.disarm();
    const char* call = g_fault.last();
    if (s) {
      ++failed;
      tj_status_code_t code = tj_status_code(s);
      tj_status_code_t expected = tj_cuda_result_code(g_fault.last_result());
      if (code != expected) {
        fprintf(stderr, "call %ld (%s, CUresult %d): %s, expected %s: %s\n", n,
                call, g_fault.last_result(), tj_status_code_name(code),
                tj_status_code_name(expected), tj_status_message(s));
      }
      CHECK(code == expected);
      tj_status_free(s);
    }
    if (alloc.live_blocks != 0) {
      fprintf(stderr, "call %ld (%s): %ld host blocks leaked\n", n, call,
              alloc.live_blocks);
    }
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
    long drift = (long)baseline - (long)device_free_bytes(device);
    if (drift > drift_max) drift_max = drift;
    if (drift > (4l << 20)) {
      fprintf(stderr, "call %ld (%s): %ld bytes of device memory not freed\n",
              n, call, drift);
    }
    CHECK(drift <= (4l << 20));
    // The library still works.
    if (s) {
      if (cold) tj_test_empty_dir(g_dir);
      CHECK_OK(compile_and_run(tj_test_allocator_get(&alloc)));
    }
  }
  printf(
      "# %ld points (every %ld-th call): %ld failed with a status, %ld "
      "recovered; device memory drift at most %ld bytes\n",
      points, step, failed, points - failed, drift_max);
  CHECK(failed > 0);
}

TEST(every_driver_call_fails_in_turn) {
  tj_cuda_device_t* device = tj_test_open_device_or_skip();
  sweep(device, false);
  sweep(device, true);
  tj_cuda_device_destroy(device);
}

int main(void) {
  if (!find_fault_driver()) {
    printf(
        "# skipped: libcuda.so.1 is not the fault driver (run through "
        "meson, which puts it first on LD_LIBRARY_PATH)\n");
    return TJ_TEST_EXIT_SKIP;
  }
  snprintf(g_dir, sizeof(g_dir), "/tmp/tj_cuda_fault_XXXXXX");
  if (!mkdtemp(g_dir)) return 1;
  for (int i = 0; i < kB * kK; ++i) g_x[i] = (float)((i * 37) % 19 - 9) / 8;
  for (int i = 0; i < kK * kN; ++i) g_w[i] = (float)((i * 11) % 23 - 11) / 32;
  for (int i = 0; i < kN; ++i) g_b[i] = (float)(i % 7 - 3) / 4;
  tj_context_t* ctx = NULL;
  tj_graph_t* g = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  CHECK_OK(tj_test_build_capstone(ctx, kK, kN, &g));
  tj_tensor_t in[3];
  inputs(in);
  tj_tensor_t out = tj_tensor_make(g_ref, TJ_DTYPE_F32, 2, (int64_t[]){kB, kN});
  CHECK_OK(tj_reference_run(g, in, 3, &out, 1));
  tj_graph_destroy(g);
  tj_context_destroy(ctx);
  RUN_TEST(every_driver_call_fails_in_turn);
  tj_test_remove_tree(g_dir);
  TEST_MAIN_END();
}
