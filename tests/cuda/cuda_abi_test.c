// backends/cuda/cuda_abi.h and cuda_symbols.def against the toolkit's
// cuda.h: every constant has cuda.h's value and every entry point's
// parameter list matches the prototype of the symbol we dlsym. Built only
// where cuda.h is found; the checks are all at compile time.

#include <stddef.h>
#include <cuda.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_driver.h"

#define SAME_TYPE(a, b) __builtin_types_compatible_p(a, b)

_Static_assert(SAME_TYPE(CUresult, tj_cu_result_t), "CUresult");
_Static_assert(SAME_TYPE(CUdevice, tj_cu_device_t), "CUdevice");
_Static_assert(SAME_TYPE(CUdeviceptr, tj_cu_deviceptr_t), "CUdeviceptr");
_Static_assert(SAME_TYPE(CUcontext, tj_cu_context_t), "CUcontext");
_Static_assert(SAME_TYPE(CUmodule, tj_cu_module_t), "CUmodule");
_Static_assert(SAME_TYPE(CUfunction, tj_cu_function_t), "CUfunction");
_Static_assert(SAME_TYPE(CUstream, tj_cu_stream_t), "CUstream");
_Static_assert(SAME_TYPE(CUevent, tj_cu_event_t), "CUevent");
_Static_assert(SAME_TYPE(CUdevice_attribute, tj_cu_device_attribute_t),
               "CUdevice_attribute");
_Static_assert(SAME_TYPE(CUfunction_attribute, tj_cu_function_attribute_t),
               "CUfunction_attribute");
_Static_assert(SAME_TYPE(CUjit_option, tj_cu_jit_option_t), "CUjit_option");
_Static_assert(SAME_TYPE(CUgraph, tj_cu_graph_t), "CUgraph");
_Static_assert(SAME_TYPE(CUgraphExec, tj_cu_graph_exec_t), "CUgraphExec");
_Static_assert(SAME_TYPE(CUstreamCaptureMode, tj_cu_capture_mode_t),
               "CUstreamCaptureMode");
_Static_assert(SAME_TYPE(CUlinkState, tj_cu_link_state_t), "CUlinkState");
_Static_assert(SAME_TYPE(CUjitInputType, tj_cu_jit_input_type_t),
               "CUjitInputType");

// Each TJ_X is cuda.h's X.
#define SAME_VALUE(name) \
  _Static_assert((long long)TJ_##name == (long long)name, #name)
SAME_VALUE(CUDA_SUCCESS);
SAME_VALUE(CUDA_ERROR_INVALID_VALUE);
SAME_VALUE(CUDA_ERROR_OUT_OF_MEMORY);
SAME_VALUE(CUDA_ERROR_NOT_INITIALIZED);
SAME_VALUE(CUDA_ERROR_DEINITIALIZED);
SAME_VALUE(CUDA_ERROR_STUB_LIBRARY);
SAME_VALUE(CUDA_ERROR_DEVICE_UNAVAILABLE);
SAME_VALUE(CUDA_ERROR_NO_DEVICE);
SAME_VALUE(CUDA_ERROR_INVALID_DEVICE);
SAME_VALUE(CUDA_ERROR_INVALID_CONTEXT);
SAME_VALUE(CUDA_ERROR_INVALID_IMAGE);
SAME_VALUE(CUDA_ERROR_NO_BINARY_FOR_GPU);
SAME_VALUE(CUDA_ERROR_INVALID_PTX);
SAME_VALUE(CUDA_ERROR_JIT_COMPILER_NOT_FOUND);
SAME_VALUE(CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
SAME_VALUE(CUDA_ERROR_INVALID_HANDLE);
SAME_VALUE(CUDA_ERROR_NOT_FOUND);
SAME_VALUE(CUDA_ERROR_NOT_READY);
SAME_VALUE(CUDA_ERROR_ILLEGAL_ADDRESS);
SAME_VALUE(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
SAME_VALUE(CUDA_ERROR_NOT_SUPPORTED);
SAME_VALUE(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH);
SAME_VALUE(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE);
SAME_VALUE(CUDA_ERROR_UNKNOWN);
SAME_VALUE(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
SAME_VALUE(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
SAME_VALUE(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
SAME_VALUE(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
SAME_VALUE(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
SAME_VALUE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
SAME_VALUE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
SAME_VALUE(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
SAME_VALUE(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
SAME_VALUE(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
SAME_VALUE(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
SAME_VALUE(CU_FUNC_ATTRIBUTE_NUM_REGS);
SAME_VALUE(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
SAME_VALUE(CU_JIT_WALL_TIME);
SAME_VALUE(CU_JIT_INFO_LOG_BUFFER);
SAME_VALUE(CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES);
SAME_VALUE(CU_JIT_ERROR_LOG_BUFFER);
SAME_VALUE(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES);
SAME_VALUE(CU_JIT_OPTIMIZATION_LEVEL);
SAME_VALUE(CU_JIT_LOG_VERBOSE);
SAME_VALUE(CU_JIT_TARGET);
SAME_VALUE(CU_TARGET_COMPUTE_90);
SAME_VALUE(CU_TARGET_COMPUTE_90A);
SAME_VALUE(CU_JIT_INPUT_PTX);
SAME_VALUE(CU_STREAM_DEFAULT);
SAME_VALUE(CU_STREAM_NON_BLOCKING);
SAME_VALUE(CU_EVENT_DEFAULT);
SAME_VALUE(CU_EVENT_DISABLE_TIMING);
SAME_VALUE(CU_STREAM_CAPTURE_MODE_GLOBAL);
SAME_VALUE(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
SAME_VALUE(CU_STREAM_CAPTURE_MODE_RELAXED);
SAME_VALUE(CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
SAME_VALUE(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
SAME_VALUE(CU_TENSOR_MAP_INTERLEAVE_NONE);
SAME_VALUE(CU_TENSOR_MAP_SWIZZLE_128B);
SAME_VALUE(CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
SAME_VALUE(CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
_Static_assert(SAME_TYPE(CUtensorMap*, tj_cu_tensor_map_t*), "CUtensorMap");
_Static_assert(SAME_TYPE(CUgraphExecUpdateResultInfo*,
                         tj_cu_graph_update_info_t*),
               "CUgraphExecUpdateResultInfo");
_Static_assert(sizeof(CUgraphExecUpdateResultInfo) ==
                   TJ_CU_GRAPH_UPDATE_INFO_BYTES,
               "TJ_CU_GRAPH_UPDATE_INFO_BYTES");
SAME_VALUE(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
_Static_assert(SAME_TYPE(CUlaunchConfig*, tj_cu_launch_config_t*),
               "CUlaunchConfig");
// tj_cu_launch_layout_t and tj_cu_launch_attribute_t are cuda.h's layouts.
#define SAME_OFFSET(a, fa, b, fb) \
  _Static_assert(offsetof(a, fa) == offsetof(b, fb), #a "." #fa)
_Static_assert(sizeof(CUlaunchConfig) == sizeof(tj_cu_launch_layout_t),
               "CUlaunchConfig's size");
SAME_OFFSET(CUlaunchConfig, gridDimX, tj_cu_launch_layout_t, grid);
SAME_OFFSET(CUlaunchConfig, blockDimX, tj_cu_launch_layout_t, block);
SAME_OFFSET(CUlaunchConfig, sharedMemBytes, tj_cu_launch_layout_t,
            shared_bytes);
SAME_OFFSET(CUlaunchConfig, hStream, tj_cu_launch_layout_t, stream);
SAME_OFFSET(CUlaunchConfig, attrs, tj_cu_launch_layout_t, attrs);
SAME_OFFSET(CUlaunchConfig, numAttrs, tj_cu_launch_layout_t, num_attrs);
_Static_assert(sizeof(CUlaunchAttribute) == sizeof(tj_cu_launch_attribute_t),
               "CUlaunchAttribute's size");
_Static_assert(_Alignof(CUlaunchAttribute) ==
                   _Alignof(tj_cu_launch_attribute_t),
               "CUlaunchAttribute's alignment");
SAME_OFFSET(CUlaunchAttribute, id, tj_cu_launch_attribute_t, id);
SAME_OFFSET(CUlaunchAttribute, value.clusterDim.x, tj_cu_launch_attribute_t,
            cluster_dim);

// The symbol we dlsym has exactly the parameter list in the table. cuda.h
// maps some names to versioned ones with macros; &exported_name below is
// the real exported symbol's prototype either way.
#define TJ_CU_SYM(name, exported_name, params)                         \
  _Static_assert(                                                      \
      SAME_TYPE(__typeof__(&exported_name), tj_cu_result_t(*) params), \
      #exported_name " does not match cuda_symbols.def");
#include "backends/cuda/cuda_symbols.def"
#undef TJ_CU_SYM

// The prototypes above cannot tell cuMemAlloc from cuMemAlloc_v2 (cuda.h
// declares only the one its macro selects), so compare the exported name
// with what cuda.h's macro for |name| expands to.
#define STR(x) #x
#define EXPANDED(x) STR(x)

typedef struct entry_t {
  const char* name;
  const char* exported;
  const char* expanded;
} entry_t;

static const entry_t kEntries[] = {
#define TJ_CU_SYM(name, exported_name, params) \
  {#name, #exported_name, EXPANDED(name)},
#include "backends/cuda/cuda_symbols.def"
#undef TJ_CU_SYM
};

// Deliberate differences, each with its reason.
static const char* const kOlderOnPurpose[] = {
    // _v2 (CUDA 12.8) only changed error reporting; the unversioned symbol
    // has the same signature and exists in every driver we support.
    "cuEventElapsedTime",
};

int main(void) {
  int failures = 0;
  for (size_t i = 0; i < sizeof(kEntries) / sizeof(kEntries[0]); ++i) {
    const entry_t* e = &kEntries[i];
    if (strcmp(e->exported, e->expanded) == 0) continue;
    bool excused = false;
    for (size_t j = 0; j < sizeof(kOlderOnPurpose) / sizeof(char*); ++j)
      excused |= strcmp(kOlderOnPurpose[j], e->name) == 0;
    if (excused) continue;
    fprintf(stderr, "%s: cuda_symbols.def loads %s but cuda.h calls %s\n",
            e->name, e->exported, e->expanded);
    ++failures;
  }
  printf("%s - cuda_abi against cuda.h %d (%zu entry points)\n",
         failures ? "not ok" : "ok", CUDA_VERSION,
         sizeof(kEntries) / sizeof(kEntries[0]));
  return failures ? 1 : 0;
}
