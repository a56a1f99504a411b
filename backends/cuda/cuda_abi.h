// The subset of the CUDA Driver API's types and constants that libtensorjit
// uses, spelled with a tj_ prefix.
//
// Why not the toolkit's cuda.h: the library must build on machines without a
// CUDA toolkit (CI, CPU-only packagers) and still run on a GPU machine whose
// driver it finds at run time. A build that only had the CUDA backend where
// cuda.h happened to be installed would make the GPU path depend on how the
// library was built, and the no-toolkit configuration would be the untested
// one. The Driver API's ABI is stable (NVIDIA keeps old entry points and
// values forever and adds _v2 names for changed signatures), so these few
// declarations are safe to carry. tests/cuda/cuda_abi_test.c checks every
// value and every function pointer type below against cuda.h wherever a
// toolkit is installed, so a typo cannot survive CI.
//
// The handle types use cuda.h's own struct tags, so a CUstream or CUcontext
// from the host (PyTorch, a game engine) converts without a cast.

#ifndef TJ_BACKENDS_CUDA_CUDA_ABI_H_
#define TJ_BACKENDS_CUDA_CUDA_ABI_H_

#include <stddef.h>
#include <stdint.h>

// cuda.h's enums have no negative values, so the C compiler gives them the
// type unsigned int; these typedefs keep our function pointer types
// compatible with the real prototypes.
typedef unsigned int tj_cu_result_t;                // CUresult
typedef int tj_cu_device_t;                         // CUdevice
typedef unsigned long long tj_cu_deviceptr_t;       // CUdeviceptr (64-bit)
typedef struct CUctx_st* tj_cu_context_t;           // CUcontext
typedef struct CUmod_st* tj_cu_module_t;            // CUmodule
typedef struct CUfunc_st* tj_cu_function_t;         // CUfunction
typedef struct CUstream_st* tj_cu_stream_t;         // CUstream
typedef struct CUevent_st* tj_cu_event_t;           // CUevent
typedef unsigned int tj_cu_device_attribute_t;      // CUdevice_attribute
typedef unsigned int tj_cu_function_attribute_t;    // CUfunction_attribute
typedef unsigned int tj_cu_jit_option_t;            // CUjit_option
typedef struct CUgraph_st* tj_cu_graph_t;           // CUgraph
typedef struct CUgraphExec_st* tj_cu_graph_exec_t;  // CUgraphExec
typedef unsigned int tj_cu_capture_mode_t;          // CUstreamCaptureMode
// CUgraphExecUpdateResultInfo: left incomplete, as CUtensorMap below;
// callers pass storage of TJ_CU_GRAPH_UPDATE_INFO_BYTES (the ABI test
// checks the size), whose fields we never read.
typedef struct CUgraphExecUpdateResultInfo_st tj_cu_graph_update_info_t;
#define TJ_CU_GRAPH_UPDATE_INFO_BYTES 24
typedef struct CUlinkState_st* tj_cu_link_state_t;  // CUlinkState
typedef unsigned int tj_cu_jit_input_type_t;        // CUjitInputType
// CUtensorMap: 128 opaque bytes, 64-byte aligned. Left incomplete here (so
// that it never clashes with cuda.h's definition); callers keep the bytes
// in storage of their own (tj_cuda_tensor_maps_t).
typedef struct CUtensorMap_st tj_cu_tensor_map_t;
typedef unsigned int tj_cu_tensor_map_data_type_t;     // CUtensorMapDataType
typedef unsigned int tj_cu_tensor_map_interleave_t;    // CUtensorMapInterleave
typedef unsigned int tj_cu_tensor_map_swizzle_t;       // CUtensorMapSwizzle
typedef unsigned int tj_cu_tensor_map_l2_promotion_t;  // ..L2promotion
typedef unsigned int tj_cu_tensor_map_oob_fill_t;  // CUtensorMapFloatOOBfill
// cuLaunchKernelEx's CUlaunchConfig, declared as cuda.h names it (so that
// the symbol table's prototype is cuda.h's) and filled through
// tj_cu_launch_layout_t, its layout, which tests/cuda/cuda_abi_test.c
// checks against cuda.h's.
typedef struct CUlaunchConfig_st tj_cu_launch_config_t;
// CUlaunchAttribute: an id, then a 64-byte union at offset 8 (only its
// clusterDim, 3 unsigned ints, is used, and its first int as
// programmaticStreamSerializationAllowed).
typedef struct tj_cu_launch_attribute_t {
  unsigned int id;
  unsigned int id_pad;
  _Alignas(8) unsigned int cluster_dim[3];
  char pad[52];
} tj_cu_launch_attribute_t;
typedef struct tj_cu_launch_layout_t {
  unsigned int grid[3];
  unsigned int block[3];
  unsigned int shared_bytes;
  tj_cu_stream_t stream;
  tj_cu_launch_attribute_t* attrs;
  unsigned int num_attrs;
} tj_cu_launch_layout_t;

// CUresult values that libtensorjit treats specially (every other value is
// reported through cuGetErrorName/cuGetErrorString).
enum {
  TJ_CUDA_SUCCESS = 0,
  TJ_CUDA_ERROR_INVALID_VALUE = 1,
  TJ_CUDA_ERROR_OUT_OF_MEMORY = 2,
  TJ_CUDA_ERROR_NOT_INITIALIZED = 3,
  TJ_CUDA_ERROR_DEINITIALIZED = 4,
  TJ_CUDA_ERROR_STUB_LIBRARY = 34,
  TJ_CUDA_ERROR_DEVICE_UNAVAILABLE = 46,
  TJ_CUDA_ERROR_NO_DEVICE = 100,
  TJ_CUDA_ERROR_INVALID_DEVICE = 101,
  TJ_CUDA_ERROR_INVALID_CONTEXT = 201,
  TJ_CUDA_ERROR_INVALID_IMAGE = 200,
  TJ_CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  TJ_CUDA_ERROR_INVALID_PTX = 218,
  TJ_CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221,
  TJ_CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  TJ_CUDA_ERROR_INVALID_HANDLE = 400,
  TJ_CUDA_ERROR_NOT_FOUND = 500,
  TJ_CUDA_ERROR_NOT_READY = 600,
  TJ_CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  TJ_CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  TJ_CUDA_ERROR_NOT_SUPPORTED = 801,
  TJ_CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
  TJ_CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804,
  TJ_CUDA_ERROR_UNKNOWN = 999,
};

// CUdevice_attribute values.
enum {
  TJ_CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  TJ_CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
  TJ_CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
  TJ_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  TJ_CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
  TJ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  TJ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  TJ_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};

// CUfunction_attribute values.
enum {
  TJ_CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
  TJ_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
  TJ_CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
  TJ_CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
  TJ_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

// CUjit_option values (cuModuleLoadDataEx).
enum {
  TJ_CU_JIT_WALL_TIME = 2,
  TJ_CU_JIT_INFO_LOG_BUFFER = 3,
  TJ_CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
  TJ_CU_JIT_ERROR_LOG_BUFFER = 5,
  TJ_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
  TJ_CU_JIT_OPTIMIZATION_LEVEL = 7,
  TJ_CU_JIT_TARGET = 9,
  TJ_CU_JIT_LOG_VERBOSE = 12,
};

// CUjitInputType values (cuLinkAddData).
enum {
  TJ_CU_JIT_INPUT_PTX = 1,
};

// CUjit_target values (TJ_CU_JIT_TARGET): sm_90a's arch-specific target.
enum {
  TJ_CU_TARGET_COMPUTE_90 = 90,
  TJ_CU_TARGET_COMPUTE_90A = 0x10000 + 90,
};

// CUstreamCaptureMode values.
enum {
  TJ_CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
  TJ_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
  TJ_CU_STREAM_CAPTURE_MODE_RELAXED = 2,
};

// Stream and event creation flags.
enum {
  TJ_CU_STREAM_DEFAULT = 0x0,
  TJ_CU_STREAM_NON_BLOCKING = 0x1,
  TJ_CU_EVENT_DEFAULT = 0x0,
  TJ_CU_EVENT_DISABLE_TIMING = 0x2,
};

enum {
  TJ_CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6,
  TJ_CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
  TJ_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9,
  TJ_CU_TENSOR_MAP_INTERLEAVE_NONE = 0,
  TJ_CU_TENSOR_MAP_SWIZZLE_128B = 3,
  TJ_CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3,
  TJ_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0,
  TJ_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
  // Its value, an int (programmaticStreamSerializationAllowed), is the
  // union's first 4 bytes: tj_cu_launch_attribute_t.cluster_dim[0].
  TJ_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,
};

#endif  // TJ_BACKENDS_CUDA_CUDA_ABI_H_
