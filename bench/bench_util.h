// Pieces every CPU benchmark here needs: a monotonic clock, the median and
// spread of a set of timings, a status check that prints, and OpenBLAS's
// cblas_sgemm signature (loaded with dlopen, so a missing OpenBLAS only
// drops its column).

#ifndef TJ_BENCH_BENCH_UTIL_H_
#define TJ_BENCH_BENCH_UTIL_H_

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tensorjit/tj_base.h"

enum { kRowMajor = 101, kNoTrans = 111 };
typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k,
                         float alpha, const float* a, int lda, const float* b,
                         int ldb, float beta, float* c, int ldc);
typedef void (*set_threads_fn)(int);

static inline double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static inline int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

typedef struct stat_t {
  double med, lo, hi;  // ms
} stat_t;

// The median, minimum and maximum of |n| timings (sorts |t|).
static inline stat_t stats_of(double* t, int n) {
  qsort(t, (size_t)n, sizeof(double), cmp_double);
  stat_t s = {n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]), t[0],
              t[n - 1]};
  return s;
}

// True for OK; otherwise prints "|what|: message", frees |s|, false.
static inline bool ok(tj_status_t s, const char* what) {
  if (!s) return true;
  fprintf(stderr, "%s: %s\n", what, tj_status_message(s));
  tj_status_free(s);
  return false;
}

#endif  // TJ_BENCH_BENCH_UTIL_H_
