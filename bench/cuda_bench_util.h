// What the CUDA benchmarks (bench/cuda_*.c) share: failing loudly, timing
// work on the device's stream with CUDA events, and device data. Header
// only: each benchmark is one executable.

#ifndef TJ_BENCH_CUDA_BENCH_UTIL_H_
#define TJ_BENCH_CUDA_BENCH_UTIL_H_

#include <stdio.h>
#include <stdlib.h>

#include "backends/cuda/cuda_runtime.h"
#include "lib/dtype.h"

// Exits with the status's message when |s| is an error.
static inline void bench_die(tj_status_t s, const char* what) {
  if (!s) return;
  fprintf(stderr, "%s: %s: %s\n", what, tj_status_code_name(tj_status_code(s)),
          tj_status_message(s));
  exit(1);
}

typedef void (*bench_work_fn)(void* ctx);

// Mean GPU time, in ms, of |iters| calls of |fn| enqueued on |dev|'s
// stream, after |warmup| calls. With |entered| the calls run with the
// device entered (launches through backends/cuda need it); without, they
// run outside it (tj_executable_run enters by itself).
static inline double bench_mean_ms(tj_cuda_device_t* dev, bench_work_fn fn,
                                   void* ctx, int warmup, int iters,
                                   bool entered) {
  const tj_cuda_symbols_t* cu = &dev->cu;
  if (!entered)
    for (int i = 0; i < warmup; ++i) fn(ctx);
  bench_die(tj_cuda_device_enter(dev), "enter");
  tj_cu_event_t start, stop;
  bench_die(TJ_CU_STATUS(cu, cuEventCreate, (&start, 0)), "event");
  bench_die(TJ_CU_STATUS(cu, cuEventCreate, (&stop, 0)), "event");
  if (entered)
    for (int i = 0; i < warmup; ++i) fn(ctx);
  bench_die(TJ_CU_STATUS(cu, cuEventRecord, (start, dev->stream)), "record");
  if (!entered) tj_cuda_device_leave(dev);
  for (int i = 0; i < iters; ++i) fn(ctx);
  if (!entered) bench_die(tj_cuda_device_enter(dev), "enter");
  bench_die(TJ_CU_STATUS(cu, cuEventRecord, (stop, dev->stream)), "record");
  bench_die(TJ_CU_STATUS(cu, cuEventSynchronize, (stop)), "sync");
  float ms = 0;
  bench_die(TJ_CU_STATUS(cu, cuEventElapsedTime, (&ms, start, stop)),
            "elapsed");
  cu->cuEventDestroy(start);
  cu->cuEventDestroy(stop);
  tj_cuda_device_leave(dev);
  return ms / iters;
}

// |n| values of |dtype| uniform in [lo, hi) (xorshift from |seed|), on
// the device.
static inline tj_cu_deviceptr_t bench_dev_random(tj_cuda_device_t* dev,
                                                 tj_dtype_t dtype, int64_t n,
                                                 double lo, double hi,
                                                 uint64_t seed) {
  size_t bytes = (size_t)n * tj_dtype_size(dtype);
  void* h = malloc(bytes ? bytes : 1);
  if (!h) fprintf(stderr, "out of host memory\n"), exit(1);
  uint64_t s = seed ? seed : 88172645463325252ull;
  for (int64_t i = 0; i < n; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    double u = (double)(s >> 11) / 9007199254740992.0;
    tj_store_f64(dtype, h, i, lo + (hi - lo) * u);
  }
  tj_cu_deviceptr_t p;
  bench_die(tj_cuda_device_alloc(dev, bytes, &p), "alloc");
  bench_die(tj_cuda_copy_to_device(dev, p, h, bytes), "copy");
  bench_die(tj_cuda_device_synchronize(dev), "sync");
  free(h);
  return p;
}

// A dense tensor of |dev| at |p|.
static inline tj_tensor_t bench_dev_tensor(const tj_cuda_device_t* dev,
                                           tj_cu_deviceptr_t p,
                                           tj_dtype_t dtype, int32_t rank,
                                           const int64_t* shape) {
  tj_tensor_t t = tj_tensor_make((void*)(uintptr_t)p, dtype, rank, shape);
  t.device_type = TJ_DEVICE_CUDA;
  t.device_id = dev->ordinal;
  return t;
}

#endif  // TJ_BENCH_CUDA_BENCH_UTIL_H_
