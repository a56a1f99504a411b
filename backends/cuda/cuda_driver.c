// Opening the CUDA driver with dlopen and filling tj_cuda_symbols_t.

#include "backends/cuda/cuda_driver.h"

#include <dlfcn.h>
#include <string.h>

// dlsym's void* cannot be converted to a function pointer in ISO C; POSIX
// guarantees the representations agree, so copy the bytes.
static bool resolve(void* library, const char* exported_name, void* slot,
                    size_t slot_size) {
  void* address = dlsym(library, exported_name);
  if (!address) return false;
  _Static_assert(sizeof(address) == sizeof(void (*)(void)),
                 "function and object pointers differ in size");
  memcpy(slot, &address, slot_size);
  return true;
}

tj_status_t tj_cuda_symbols_initialize(const char* library_path,
                                       tj_cuda_symbols_t* out_symbols) {
  memset(out_symbols, 0, sizeof(*out_symbols));
  const char* path = library_path ? library_path : TJ_CUDA_DRIVER_LIBRARY;
  // RTLD_LOCAL: the driver's symbols must not satisfy other libraries'
  // lookups (a host may load its own CUDA stack).
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* why = dlerror();
    return tj_unsupported(
        "CUDA backend unavailable: no CUDA driver: dlopen(\"%s\") failed: %s",
        path, why ? why : "unknown error");
  }
  tj_cuda_symbols_t symbols;
  memset(&symbols, 0, sizeof(symbols));
  symbols.library = library;
#define TJ_CU_SYM(name, exported_name, params)                              \
  if (!resolve(library, #exported_name, &symbols.name,                      \
               sizeof(symbols.name))) {                                     \
    dlclose(library);                                                       \
    return tj_unsupported(                                                  \
        "CUDA backend unavailable: the driver \"%s\" is too old: it lacks " \
        "%s",                                                               \
        path, #exported_name);                                              \
  }
#include "backends/cuda/cuda_symbols.def"
#undef TJ_CU_SYM

  tj_cu_result_t result = symbols.cuInit(0);
  if (result != TJ_CUDA_SUCCESS) {
    tj_status_t status = tj_cuda_result_status(&symbols, result, "cuInit");
    dlclose(library);
    return tj_status_annotate(status, "CUDA backend unavailable (%s)", path);
  }
  result = symbols.cuDriverGetVersion(&symbols.driver_version);
  if (result != TJ_CUDA_SUCCESS) {
    tj_status_t status =
        tj_cuda_result_status(&symbols, result, "cuDriverGetVersion");
    dlclose(library);
    return status;
  }
  *out_symbols = symbols;
  return NULL;
}

void tj_cuda_symbols_deinitialize(tj_cuda_symbols_t* symbols) {
  if (symbols->library) dlclose(symbols->library);
  memset(symbols, 0, sizeof(*symbols));
}
