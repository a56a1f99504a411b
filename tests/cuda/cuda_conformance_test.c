// The conformance suite (tests/conformance/conformance.h) on the CUDA
// backend: every op of lib/ops.def on every dtype it takes, and the shared
// op cases, compiled with target = TJ_TARGET_CUDA and run against the
// reference interpreter at B = 0, 1, 7, 33, 257 from one executable, with
// CPU tensors, and for the cases marked for layouts also with strided CPU
// tensors, dense CUDA tensors and strided CUDA tensors (gathered and
// scattered on the device). Skipped (exit 77, with the reason) where no
// driver or GPU is found.

#include "backends/cuda/cuda_executable.h"
#include "tests/conformance/conformance.h"
#include "tests/cuda/cuda_cts_expects.h"
#include "tests/cuda/cuda_test_util.h"

static tj_cuda_device_t* g_dev;  // the test's own handle, for device memory

static bool dev_alloc(void* self, size_t bytes, uint64_t* out) {
  (void)self;
  tj_cu_deviceptr_t p = 0;
  tj_status_t s = tj_cuda_device_alloc(g_dev, bytes, &p);
  *out = p;
  if (!s) return true;
  fprintf(stderr, "device alloc: %s\n", tj_status_message(s));
  tj_status_free(s);
  return false;
}

static void dev_free(void* self, uint64_t p) {
  (void)self;
  tj_status_free(tj_cuda_device_free(g_dev, p));
}

static bool dev_upload(void* self, uint64_t dst, const void* src,
                       size_t bytes) {
  (void)self;
  tj_status_t s = tj_cuda_copy_to_device(g_dev, dst, src, bytes);
  if (!s) s = tj_cuda_device_synchronize(g_dev);
  if (!s) return true;
  fprintf(stderr, "upload: %s\n", tj_status_message(s));
  tj_status_free(s);
  return false;
}

static bool dev_download(void* self, void* dst, uint64_t src, size_t bytes) {
  (void)self;
  tj_status_t s = tj_cuda_copy_to_host(g_dev, dst, src, bytes);
  if (!s) s = tj_cuda_device_synchronize(g_dev);
  if (!s) return true;
  fprintf(stderr, "download: %s\n", tj_status_message(s));
  tj_status_free(s);
  return false;
}

int main(void) {
  g_test_current = "cuda_conformance";
  // No disk cache: counts of compiled kernels must not depend on earlier
  // runs.
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_test_context_create(&ctx));
  // Skips (exit 77) without a driver or GPU; tj_compile must then say
  // UNSUPPORTED too.
  if (tj_test_cuda_unsupported(ctx, NULL)) {
    tj_context_destroy(ctx);
    return TJ_TEST_EXIT_SKIP;
  }
  g_dev = tj_test_open_device_or_skip();
  tj_cts_device_t dev = {NULL,     TJ_DEVICE_CUDA, g_dev->ordinal, dev_alloc,
                         dev_free, dev_upload,     dev_download};
  tj_cts_backend_t be = {"cuda", TJ_TARGET_CUDA,        ctx,
                         kSkips, cuda_cts_expects(ctx), &dev};
  tj_cts_run_all(&be);
  g_test_checks += tj_cts_checks;
  g_test_failures += tj_cts_failures;
  tj_cuda_device_destroy(g_dev);
  tj_context_destroy(ctx);
  TEST_MAIN_END();
}
