// The CUDA runtime of libtensorjit: one device, its context and stream, a
// caching allocator, host<->device copies, modules and launches.
//
// Sharing with the host: an embedder that already runs CUDA (PyTorch, a
// game engine) passes its own context and stream; libtensorjit then
// enqueues everything on that stream, so its work is ordered with the
// host's without extra synchronization. By default it retains the device's
// primary context, which is the one the CUDA runtime (and so PyTorch) uses,
// and creates a non-blocking stream of its own.
//
// Every entry point pushes the device's context for the duration of the
// call and pops it before returning, so the calling thread's current
// context is unchanged. Thread-safe, except that one tj_cuda_device_t's
// stream orders work in the order the calls reach it.

#ifndef TJ_BACKENDS_CUDA_CUDA_RUNTIME_H_
#define TJ_BACKENDS_CUDA_CUDA_RUNTIME_H_

#include <pthread.h>

#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/cuda_driver.h"

//===--- tj_cuda_device_t ---===//

typedef struct tj_cuda_device_options_t {
  // Device index, used when no context is given.
  int32_t ordinal;
  // The context to run in. NULL: the calling thread's current context when
  // |use_current_context| is set, else |host_stream|'s context when a
  // stream is given, else the device's primary context (retained).
  tj_cu_context_t host_context;
  bool use_current_context;
  // The stream to enqueue on (borrowed; must outlive the device). NULL: a
  // new non-blocking stream owned by the device.
  tj_cu_stream_t host_stream;
  // The driver library; NULL for "libcuda.so.1".
  const char* driver_path;
} tj_cuda_device_options_t;

typedef struct tj_cuda_device_t {
  tj_allocator_t host;
  tj_cuda_symbols_t cu;
  tj_cu_device_t device;
  int32_t ordinal;
  tj_cu_context_t context;
  bool owns_primary_context;  // retained by us: release on destroy
  tj_cu_stream_t stream;
  bool owns_stream;
  tj_cu_event_t order_event;  // for cross-stream waits; under order_mutex
  pthread_mutex_t order_mutex;
  tj_cuda_allocator_t* allocator;
  // Properties.
  char name[128];
  int32_t sm_major, sm_minor;  // compute capability
  int32_t num_sms;
  int32_t max_shared_bytes_optin;  // per block, with the opt-in attribute
  size_t total_bytes;
} tj_cuda_device_t;

// Fills |options| with the defaults (ordinal 0, primary context, own
// stream, libcuda.so.1).
void tj_cuda_device_options_initialize(tj_cuda_device_options_t* options);

// Opens the driver and sets up the device per |options| (NULL for the
// defaults). UNSUPPORTED (see tj_cuda_symbols_initialize) on machines
// without a driver or GPU; INVALID_ARGUMENT for an ordinal that does not
// exist or options that contradict each other. On success |*out_device|
// is owned by the caller (tj_cuda_device_destroy); on failure it is NULL.
tj_status_t tj_cuda_device_create(tj_allocator_t host,
                                  const tj_cuda_device_options_t* options,
                                  tj_cuda_device_t** out_device);

// Waits for the device's stream, frees its memory, destroys what it
// created and releases what it retained. NULL is a no-op.
void tj_cuda_device_destroy(tj_cuda_device_t* device);

// The NVPTX CPU the device's kernels are compiled for: "sm_90a" for
// compute capability 9.0 (Hopper-only instructions), "sm_80" for 8.x and
// for anything newer (plain PTX that the driver JIT-compiles forward).
// NULL for devices older than sm_80. Static storage.
const char* tj_cuda_device_arch_name(const tj_cuda_device_t* device);

// Pushes/pops the device's context on the calling thread. Every function
// below does this itself; use it around direct driver calls.
tj_status_t tj_cuda_device_enter(tj_cuda_device_t* device);
void tj_cuda_device_leave(tj_cuda_device_t* device);
// For cleanup paths, which cannot report: enters and returns true, or
// returns false (the device is lost, say). Either way the caller frees
// its host memory; only the driver calls need the context.
bool tj_cuda_device_try_enter(tj_cuda_device_t* device);

// Waits for all work enqueued on the device's stream.
tj_status_t tj_cuda_device_synchronize(tj_cuda_device_t* device);

//===--- memory ---===//

// Device memory from the caching allocator, ordered on the device's stream
// (see cuda_allocator.h). On failure |*out_ptr| is 0.
tj_status_t tj_cuda_device_alloc(tj_cuda_device_t* device, size_t bytes,
                                 tj_cu_deviceptr_t* out_ptr);
// Returns |ptr| to the cache after the work enqueued so far. 0 is a no-op.
tj_status_t tj_cuda_device_free(tj_cuda_device_t* device,
                                tj_cu_deviceptr_t ptr);

// Page-locked host memory: copies from and to it are truly asynchronous
// (from pageable memory the driver copies through a staging buffer and
// returns only once |src| may be reused). On failure |*out_ptr| is NULL.
tj_status_t tj_cuda_host_alloc(tj_cuda_device_t* device, size_t bytes,
                               void** out_ptr);
void tj_cuda_host_free(tj_cuda_device_t* device, void* ptr);

// Copies enqueued on the device's stream. The host buffer must stay valid
// (and for DtoH unread) until the stream reaches the copy, e.g. after
// tj_cuda_device_synchronize.
tj_status_t tj_cuda_copy_to_device(tj_cuda_device_t* device,
                                   tj_cu_deviceptr_t dst, const void* src,
                                   size_t bytes);
tj_status_t tj_cuda_copy_to_host(tj_cuda_device_t* device, void* dst,
                                 tj_cu_deviceptr_t src, size_t bytes);
tj_status_t tj_cuda_copy_on_device(tj_cuda_device_t* device,
                                   tj_cu_deviceptr_t dst, tj_cu_deviceptr_t src,
                                   size_t bytes);
tj_status_t tj_cuda_fill_bytes(tj_cuda_device_t* device, tj_cu_deviceptr_t dst,
                               uint8_t value, size_t bytes);

//===--- modules and launches ---===//

// A loaded PTX module. Owned by the caller (tj_cuda_module_destroy).
typedef struct tj_cuda_module_t {
  tj_cuda_device_t* device;  // borrowed
  tj_cu_module_t module;
  // The driver's JIT info log (ptxas -v style: registers, spills), owned.
  char* info_log;
  size_t info_log_size;  // allocation size of |info_log|
} tj_cuda_module_t;

// Loads NUL-terminated |ptx| (the driver compiles it for the device). A
// rejection is BACKEND_FAILURE (UNSUPPORTED for a PTX version the driver
// is too old for) whose message holds the driver's JIT error log. On
// success |*out_module| is owned by the caller; on failure it is NULL.
tj_status_t tj_cuda_module_load(tj_cuda_device_t* device, const char* ptx,
                                tj_cuda_module_t** out_module);
void tj_cuda_module_destroy(tj_cuda_module_t* module);

// Compiles NUL-terminated |ptx| to a cubin for |device| with the driver's
// linker (cuLinkCreate/cuLinkAddData/cuLinkComplete: the driver's ptxas,
// in process, no toolkit needed). A rejection is reported as by
// tj_cuda_module_load, with the linker's error log in the message. On
// success |*out_cubin| holds |*out_size| bytes allocated from |allocator|
// (owned by the caller: tj_free(allocator, cubin, size)); on failure it is
// NULL. The cubin is what cuModuleLoadData takes: cache it to skip ptxas.
// |jit_target| is a CUjit_target (TJ_CU_TARGET_*), or 0 for the target of
// the device's context.
tj_status_t tj_cuda_link_ptx(tj_cuda_device_t* device, tj_allocator_t allocator,
                             const char* ptx, unsigned jit_target,
                             void** out_cubin, size_t* out_size);

// Whether |size| bytes at |image| are a complete 64-bit little-endian CUDA
// ELF image: header, program and section tables, and every section and
// segment inside the |size| bytes. cuModuleLoadData takes no size, so an
// image from a cache must pass this before the driver parses it.
bool tj_cuda_cubin_is_complete(const void* image, size_t size);

// Loads the cubin at |image| (|size| bytes; not retained) without ptxas.
// INVALID_ARGUMENT, without calling the driver, for bytes that are not a
// complete CUDA ELF image (tj_cuda_cubin_is_complete); the driver's own
// rejection (a cubin for another GPU, a corrupt one) is BACKEND_FAILURE or
// UNSUPPORTED as for tj_cuda_module_load. On success |*out_module| is owned
// by the caller (its info log is empty); on failure it is NULL.
tj_status_t tj_cuda_module_load_cubin(tj_cuda_device_t* device,
                                      const void* image, size_t size,
                                      tj_cuda_module_t** out_module);

// A kernel of |module| and its resource use.
typedef struct tj_cuda_kernel_t {
  tj_cuda_module_t* module;  // borrowed
  tj_cu_function_t function;
  int32_t num_regs;
  int32_t local_bytes;  // spills: should be 0
  int32_t static_shared_bytes;
  int32_t max_threads;
} tj_cuda_kernel_t;

// Looks up entry |name| and, when |dynamic_shared_bytes| exceeds the
// default 48 KiB, opts the kernel in to that much dynamic shared memory.
tj_status_t tj_cuda_kernel_get(tj_cuda_module_t* module, const char* name,
                               int32_t dynamic_shared_bytes,
                               tj_cuda_kernel_t* out_kernel);

typedef struct tj_cuda_launch_t {
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;  // dynamic shared memory
  uint32_t cluster;       // blocks a cluster along x; 0 or 1: no clusters
} tj_cuda_launch_t;

// cuLaunchKernel of |function| on |stream|, or cuLaunchKernelEx with
// |cluster| > 1 (clusters of that many blocks along x) or |programmatic|
// (programmatic stream serialization: the kernel may start before the
// one before it in the stream ends, and waits for it by
// griddepcontrol.wait before it reads what that one wrote).
tj_status_t tj_cuda_launch_on(const tj_cuda_symbols_t* cu,
                              tj_cu_function_t function, const uint32_t grid[3],
                              const uint32_t block[3], uint32_t shared_bytes,
                              uint32_t cluster, bool programmatic,
                              tj_cu_stream_t stream, void** args);

// Enqueues |kernel| on the device's stream; |args| holds a pointer to each
// parameter's value, as cuLaunchKernel takes them.
tj_status_t tj_cuda_kernel_launch(const tj_cuda_kernel_t* kernel,
                                  const tj_cuda_launch_t* launch, void** args);

#endif  // TJ_BACKENDS_CUDA_CUDA_RUNTIME_H_
