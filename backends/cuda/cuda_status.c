// The one file that interprets CUresult values (STYLE.md §3d).

#include "backends/cuda/cuda_driver.h"

tj_status_code_t tj_cuda_result_code(tj_cu_result_t result) {
  switch (result) {
    case TJ_CUDA_SUCCESS:
      return TJ_STATUS_OK;
    case TJ_CUDA_ERROR_OUT_OF_MEMORY:
      return TJ_STATUS_OUT_OF_MEMORY;
    // The request is fine; this machine or driver cannot serve it.
    case TJ_CUDA_ERROR_STUB_LIBRARY:
    case TJ_CUDA_ERROR_DEVICE_UNAVAILABLE:
    case TJ_CUDA_ERROR_NO_DEVICE:
    case TJ_CUDA_ERROR_INVALID_DEVICE:
    case TJ_CUDA_ERROR_NO_BINARY_FOR_GPU:
    case TJ_CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
    case TJ_CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case TJ_CUDA_ERROR_NOT_SUPPORTED:
    case TJ_CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case TJ_CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
      return TJ_STATUS_UNSUPPORTED;
    default:
      return TJ_STATUS_BACKEND_FAILURE;
  }
}

// Names of the results cuda_abi.h knows, for when the driver cannot name
// them itself (the toolkit's stub library answers every call, including
// cuGetErrorName, with CUDA_ERROR_STUB_LIBRARY).
static const char* known_name(tj_cu_result_t result) {
  switch (result) {
#define NAME(x) \
  case TJ_##x:  \
    return #x;
    NAME(CUDA_ERROR_INVALID_VALUE)
    NAME(CUDA_ERROR_OUT_OF_MEMORY)
    NAME(CUDA_ERROR_NOT_INITIALIZED)
    NAME(CUDA_ERROR_DEINITIALIZED)
    NAME(CUDA_ERROR_STUB_LIBRARY)
    NAME(CUDA_ERROR_DEVICE_UNAVAILABLE)
    NAME(CUDA_ERROR_NO_DEVICE)
    NAME(CUDA_ERROR_INVALID_DEVICE)
    NAME(CUDA_ERROR_INVALID_CONTEXT)
    NAME(CUDA_ERROR_INVALID_IMAGE)
    NAME(CUDA_ERROR_NO_BINARY_FOR_GPU)
    NAME(CUDA_ERROR_INVALID_PTX)
    NAME(CUDA_ERROR_JIT_COMPILER_NOT_FOUND)
    NAME(CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
    NAME(CUDA_ERROR_INVALID_HANDLE)
    NAME(CUDA_ERROR_NOT_FOUND)
    NAME(CUDA_ERROR_NOT_READY)
    NAME(CUDA_ERROR_ILLEGAL_ADDRESS)
    NAME(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
    NAME(CUDA_ERROR_NOT_SUPPORTED)
    NAME(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)
    NAME(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE)
    NAME(CUDA_ERROR_UNKNOWN)
#undef NAME
    default:
      return NULL;
  }
}

tj_status_t tj_cuda_result_status(const tj_cuda_symbols_t* symbols,
                                  tj_cu_result_t result, const char* call) {
  tj_status_code_t code = tj_cuda_result_code(result);
  if (code == TJ_STATUS_OK) return NULL;
  const char* name = NULL;
  const char* text = NULL;
  // The lookups themselves return CUDA_ERROR_INVALID_VALUE for a value the
  // driver does not know; the number is all we can print then.
  if (symbols && symbols->cuGetErrorName &&
      symbols->cuGetErrorName(result, &name) != TJ_CUDA_SUCCESS)
    name = NULL;
  if (symbols && symbols->cuGetErrorString &&
      symbols->cuGetErrorString(result, &text) != TJ_CUDA_SUCCESS)
    text = NULL;
  if (!name) name = known_name(result);
  if (name && text)
    return tj_status_make(code, "%s: %s (%s)", call, name, text);
  if (name) return tj_status_make(code, "%s: %s (%u)", call, name, result);
  return tj_status_make(code, "%s: CUresult %u", call, result);
}
