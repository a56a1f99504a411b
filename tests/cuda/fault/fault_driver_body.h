// The body of the generated fault_driver.c (after its symbol table).

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool fault_resolve(void* library, const char* name, void* slot, size_t size) {
  void* address = dlsym(library, name);
  if (!address) return false;
  memcpy(slot, &address, size);
  return true;
}

static atomic_long g_calls;    // eligible calls so far
static atomic_long g_fail_at;  // the call number that fails; -1: none
static atomic_int g_result;    // what it returns; 0: fault_error
static _Atomic(const char*) g_last = "";
static atomic_int g_last_result;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_loaded;

// The real driver: $TJ_FAULT_REAL_DRIVER, else the usual places (never
// this library itself, which has the same name).
static void load_real(void) {
  atomic_store(&g_fail_at, -1);
  const char* candidates[] = {
      getenv("TJ_FAULT_REAL_DRIVER"),  "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
      "/usr/lib64/libcuda.so.1",       "/usr/local/nvidia/lib64/libcuda.so.1",
      "/usr/lib/wsl/lib/libcuda.so.1",
  };
  for (size_t i = 0; i < sizeof(candidates) / sizeof(*candidates); ++i) {
    if (!candidates[i] || !*candidates[i]) continue;
    void* library = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
    if (!library) continue;
    if (dlsym(library, "tj_fault_arm")) {  // ourselves
      dlclose(library);
      continue;
    }
    if (resolve_all(library)) {
      g_loaded = true;
      return;
    }
    dlclose(library);
  }
}

static bool eligible(const char* name) {
  static const char* const kCleanup[] = {"Destroy", "Free",       "Unload",
                                         "Release", "PopCurrent", "GetError"};
  for (size_t i = 0; i < sizeof(kCleanup) / sizeof(*kCleanup); ++i) {
    if (strstr(name, kCleanup[i])) return false;
  }
  return true;
}

// The error a failing |name| returns by default: what that call fails
// with in life.
static tj_cu_result_t fault_error(const char* name) {
  if (strstr(name, "MemAlloc")) return TJ_CUDA_ERROR_OUT_OF_MEMORY;
  if (strstr(name, "Launch")) return 719;  // CUDA_ERROR_LAUNCH_FAILED
  if (strstr(name, "Synchronize") || strstr(name, "Memcpy")) {
    return TJ_CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  return TJ_CUDA_ERROR_DEVICE_UNAVAILABLE;  // as if the device were lost
}

// Whether call |index| fails now, with |*out|. Without the real driver
// every call fails as "no device".
static bool fault_take(int index, tj_cu_result_t* out) {
  pthread_once(&g_once, load_real);
  if (!g_loaded) {
    *out = TJ_CUDA_ERROR_NO_DEVICE;
    return true;
  }
  const char* name = kNames[index];
  if (!eligible(name)) return false;
  long n = atomic_fetch_add(&g_calls, 1);
  long fail_at = atomic_load(&g_fail_at);
  if (fail_at < 0 || n != fail_at) return false;
  int result = atomic_load(&g_result);
  *out = result ? (tj_cu_result_t)result : fault_error(name);
  atomic_store(&g_last, name);
  atomic_store(&g_last_result, (int)*out);
  return true;
}

void tj_fault_arm(long nth, int result) {
  pthread_once(&g_once, load_real);
  atomic_store(&g_result, result);
  atomic_store(&g_fail_at, atomic_load(&g_calls) + nth);
}

void tj_fault_disarm(void) { atomic_store(&g_fail_at, -1); }
long tj_fault_calls(void) { return atomic_load(&g_calls); }
const char* tj_fault_last(void) { return atomic_load(&g_last); }
int tj_fault_last_result(void) { return atomic_load(&g_last_result); }
