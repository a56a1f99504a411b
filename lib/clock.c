// tj_now_ms (lib/base.h).

#include <time.h>

#include "lib/base.h"

double tj_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
