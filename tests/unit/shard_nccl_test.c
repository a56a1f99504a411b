// The NCCL backend (backends/cuda/nccl.h) on one GPU: a communicator of
// size 1 made by ncclCommInitAll, and each collective on device buffers
// (the identity at size 1, so every result is checked exactly), grouped;
// errors (a rank out of range, a dtype NCCL lacks) as statuses. Exits 77
// (skipped) with the reason where there is no driver, GPU or libnccl.so.2.

#include "backends/cuda/cuda_driver.h"
#include "backends/cuda/nccl.h"
#include "tests/unit/test.h"

static tj_cuda_symbols_t cu;

static bool cu_ok(tj_cu_result_t r, const char* call) {
  tj_status_t s = tj_cuda_result_status(&cu, r, call);
  if (!s) return true;
  CHECK_OK(s);
  return false;
}

TEST(communicator_of_one) {
  tj_cu_device_t dev;
  tj_cu_context_t cctx;
  if (!cu_ok(cu.cuDeviceGet(&dev, 0), "cuDeviceGet")) return;
  if (!cu_ok(cu.cuDevicePrimaryCtxRetain(&cctx, dev), "PrimaryCtxRetain")) {
    return;
  }
  cu_ok(cu.cuCtxPushCurrent(cctx), "cuCtxPushCurrent");
  tj_cu_stream_t stream = NULL;
  cu_ok(cu.cuStreamCreate(&stream, 1), "cuStreamCreate");
  enum { N = 4096 };
  static float host[N], back[N];
  for (int i = 0; i < N; ++i) host[i] = (float)i * 0.5f - 7.0f;
  tj_cu_deviceptr_t src = 0, dst = 0;
  cu_ok(cu.cuMemAlloc(&src, sizeof(host)), "cuMemAlloc");
  cu_ok(cu.cuMemAlloc(&dst, sizeof(host)), "cuMemAlloc");
  cu_ok(cu.cuMemcpyHtoDAsync(src, host, sizeof(host), stream), "HtoD");
  tj_nccl_comms_t* comms = NULL;
  CHECK_OK(
      tj_nccl_comms_create(tj_allocator_system(), 1, (int32_t[]){0}, &comms));
  CHECK_EQ_INT(1, tj_nccl_comms_size(comms));
  printf("# NCCL %d\n", tj_nccl_version());
  if (comms) {
    for (int kind = 0; kind < 3; ++kind) {
      cu_ok(cu.cuMemsetD8Async(dst, 0, sizeof(host), stream), "memset");
      CHECK_OK(tj_nccl_group_start());
      if (kind == 0) {
        CHECK_OK(
            tj_nccl_all_reduce(comms, 0, src, dst, N, TJ_DTYPE_F32, stream));
      } else if (kind == 1) {
        CHECK_OK(
            tj_nccl_all_gather(comms, 0, src, dst, N, TJ_DTYPE_F32, stream));
      } else {
        CHECK_OK(tj_nccl_reduce_scatter(comms, 0, src, dst, N, TJ_DTYPE_F32,
                                        stream));
      }
      CHECK_OK(tj_nccl_group_end());
      cu_ok(cu.cuMemcpyDtoHAsync(back, dst, sizeof(back), stream), "DtoH");
      cu_ok(cu.cuStreamSynchronize(stream), "sync");
      CHECK(memcmp(host, back, sizeof(host)) == 0);
    }
    CHECK_STATUS(
        TJ_STATUS_INVALID_ARGUMENT, "rank 1 of a communicator of 1",
        tj_nccl_all_reduce(comms, 1, src, dst, N, TJ_DTYPE_F32, stream));
    CHECK_STATUS(
        TJ_STATUS_UNSUPPORTED, "dtype bool",
        tj_nccl_all_reduce(comms, 0, src, dst, N, TJ_DTYPE_BOOL, stream));
  }
  tj_nccl_comms_destroy(comms);
  cu.cuMemFree(src);
  cu.cuMemFree(dst);
  cu.cuStreamDestroy(stream);
  tj_cu_context_t popped;
  cu.cuCtxPopCurrent(&popped);
  cu.cuDevicePrimaryCtxRelease(dev);
}

int main(void) {
  tj_status_t s = tj_cuda_symbols_initialize(NULL, &cu);
  if (s) {
    printf("# skipped: %s\n", tj_status_message(s));
    tj_status_free(s);
    return 77;
  }
  s = tj_nccl_load();
  if (s) {
    printf("# skipped: %s\n", tj_status_message(s));
    tj_status_free(s);
    tj_cuda_symbols_deinitialize(&cu);
    return 77;
  }
  RUN_TEST(communicator_of_one);
  tj_cuda_symbols_deinitialize(&cu);
  TEST_MAIN_END();
}
