// Shared by the tests that need a GPU: open the device or skip.

#ifndef TJ_TESTS_CUDA_CUDA_TEST_UTIL_H_
#define TJ_TESTS_CUDA_CUDA_TEST_UTIL_H_

#include "backends/cuda/cuda_runtime.h"
#include "tests/unit/test.h"

// meson treats this exit code as "skipped".
#define TJ_TEST_EXIT_SKIP 77

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

#endif  // TJ_TESTS_CUDA_CUDA_TEST_UTIL_H_
