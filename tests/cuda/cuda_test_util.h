// Shared by the tests that need a GPU: open the device or skip.

#ifndef TJ_TESTS_CUDA_CUDA_TEST_UTIL_H_
#define TJ_TESTS_CUDA_CUDA_TEST_UTIL_H_

#include "backends/cuda/cuda_runtime.h"
#include "tests/unit/test.h"

// meson treats this exit code as "skipped".
#define TJ_TEST_EXIT_SKIP 77

// TJ_TEST_ONLY=a,b runs only the tests named a and b (a GPU call's time is
// short); unset or empty, every test.
static inline bool tj_test_selected(const char* name) {
  const char* only = getenv("TJ_TEST_ONLY");
  if (!only || !only[0]) return true;
  size_t len = strlen(name);
  for (const char* p = only; (p = strstr(p, name)) != NULL; p += len) {
    bool starts = p == only || p[-1] == ',';
    if (starts && (p[len] == ',' || p[len] == '\0')) return true;
  }
  return false;
}

#undef RUN_TEST
#define RUN_TEST(name)                                                        \
  do {                                                                        \
    if (!tj_test_selected(#name)) break;                                      \
    int before_ = g_test_failures;                                            \
    g_test_current = #name;                                                   \
    test_##name();                                                            \
    printf("%s - %s\n", g_test_failures == before_ ? "ok" : "not ok", #name); \
  } while (0)

// The default device, or exits with TJ_TEST_EXIT_SKIP (printing why) when
// the machine has no usable driver or GPU. Any other failure fails.
static inline tj_cuda_device_t* tj_test_open_device_or_skip(void) {
  tj_cuda_device_t* device = NULL;
  tj_status_t status =
      tj_cuda_device_create(tj_allocator_system(), NULL, &device);
  if (tj_status_code(status) == TJ_STATUS_UNSUPPORTED) {
    printf("# skipped: %s\n", tj_status_message(status));
    tj_status_free(status);
    exit(TJ_TEST_EXIT_SKIP);
  }
  if (status) {
    fprintf(stderr, "cuda device: %s: %s\n",
            tj_status_code_name(tj_status_code(status)),
            tj_status_message(status));
    tj_status_free(status);
    exit(1);
  }
  printf("# device %d: %s, sm_%d%d, %d SMs, %zu MiB, driver %d\n",
         device->ordinal, device->name, device->sm_major, device->sm_minor,
         device->num_sms, device->total_bytes >> 20, device->cu.driver_version);
  return device;
}

// Whether tj_compile for the CUDA target says UNSUPPORTED (no driver or
// GPU: the test skips, and this prints why) for a one-op graph of |ctx|,
// compiled with |options| (NULL: the defaults, target CUDA). Any other
// failure fails the test.
static inline bool tj_test_cuda_unsupported(
    tj_context_t* ctx, const tj_compile_options_t* options) {
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "probe", &g));
  if (!g) return false;
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){4}, "x");
  tj_graph_output(g, tj_graph_exp(g, x), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = TJ_TARGET_CUDA;
  tj_executable_t* exe = NULL;
  tj_status_t s = tj_compile(g, options ? options : &o, &exe);
  tj_graph_destroy(g);
  if (tj_status_code(s) == TJ_STATUS_UNSUPPORTED) {
    printf("# skipped: tj_compile(TJ_TARGET_CUDA): %s\n", tj_status_message(s));
    tj_status_free(s);
    return true;
  }
  CHECK_OK(s);
  tj_executable_release(exe);
  return false;
}

#endif  // TJ_TESTS_CUDA_CUDA_TEST_UTIL_H_
