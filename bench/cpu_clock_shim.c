// A measurement shim for per-kernel profiles on a shared, loaded machine
// (bench/mobilenet_cpu.py --profile): preloaded, it answers
// clock_gettime(CLOCK_MONOTONIC) with the calling thread's CPU clock, so
// that tj_executable_profile at num_threads=1 (every kernel on the caller's
// thread) times CPU, not the moments the VM took the core away. Not linked
// into anything; build and use:
//   cc -O2 -shared -fPIC -o /tmp/cpu_clock_shim.so bench/cpu_clock_shim.c -ldl
//   LD_PRELOAD=/tmp/cpu_clock_shim.so python3 bench/mobilenet_cpu.py --profile
// Everything else in the process that reads the monotonic clock reads CPU
// time too (wall-clock timeouts, compile times): only for measuring.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>

int clock_gettime(clockid_t id, struct timespec* ts) {
  static int (*real)(clockid_t, struct timespec*);
  if (!real) {
    *(void**)&real = dlsym(RTLD_NEXT, "clock_gettime");
  }
  if (id == CLOCK_MONOTONIC) id = CLOCK_THREAD_CPUTIME_ID;
  return real(id, ts);
}
