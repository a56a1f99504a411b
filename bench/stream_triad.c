#include "bench/stream_triad.h"

#include <pthread.h>

typedef struct part_t {
  float* a;
  const float* b;
  const float* c;
  float s;
  int64_t begin, end;
} part_t;

static void* triad_part(void* arg) {
  part_t* p = arg;
  float* restrict a = p->a;
  const float* restrict b = p->b;
  const float* restrict c = p->c;
  for (int64_t i = p->begin; i < p->end; ++i) a[i] = b[i] + p->s * c[i];
  return NULL;
}

void stream_triad(float* a, const float* b, const float* c, float s, int64_t n,
                  int threads) {
  if (threads < 1) threads = 1;
  if (threads > 16) threads = 16;
  part_t parts[16];
  pthread_t ids[16];
  for (int t = 0; t < threads; ++t) {
    parts[t] = (part_t){a, b, c, s, n * t / threads, n * (t + 1) / threads};
  }
  for (int t = 1; t < threads; ++t) {
    if (pthread_create(&ids[t], NULL, triad_part, &parts[t]) != 0) {
      triad_part(&parts[t]);
      ids[t] = 0;
    }
  }
  triad_part(&parts[0]);
  for (int t = 1; t < threads; ++t) {
    if (ids[t]) pthread_join(ids[t], NULL);
  }
}
