// STREAM's triad a[i] = b[i] + s * c[i], compiled with -O3 -march=native:
// the memory-bandwidth yardstick for our fused pointwise kernels.
#ifndef TJ_BENCH_STREAM_TRIAD_H_
#define TJ_BENCH_STREAM_TRIAD_H_

#include <stdint.h>

// Runs the triad over |n| elements split across |threads| pthreads.
void stream_triad(float* a, const float* b, const float* c, float s, int64_t n,
                  int threads);

#endif  // TJ_BENCH_STREAM_TRIAD_H_
