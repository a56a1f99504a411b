// NCCL through dlopen. See nccl.h.

#include "backends/cuda/nccl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tensorjit/tj_shard.h"

typedef struct ncclComm* nccl_comm_t;
typedef int (*get_version_fn)(int* version);
typedef const char* (*error_string_fn)(int result);
typedef int (*comm_init_all_fn)(nccl_comm_t* comms, int n, const int* devices);
typedef int (*comm_destroy_fn)(nccl_comm_t comm);
typedef int (*group_fn)(void);
typedef int (*all_reduce_fn)(const void* src, void* dst, size_t count,
                             int dtype, int op, nccl_comm_t comm,
                             tj_cu_stream_t stream);
typedef int (*all_gather_fn)(const void* src, void* dst, size_t count,
                             int dtype, nccl_comm_t comm,
                             tj_cu_stream_t stream);
typedef int (*reduce_scatter_fn)(const void* src, void* dst, size_t count,
                                 int dtype, int op, nccl_comm_t comm,
                                 tj_cu_stream_t stream);

enum { kSuccess = 0, kSum = 0 };

typedef struct nccl_lib_t {
  void* lib;
  char error[256];
  int version;
  get_version_fn get_version;
  error_string_fn error_string;
  comm_init_all_fn comm_init_all;
  comm_destroy_fn comm_destroy;
  group_fn group_start, group_end;
  all_reduce_fn all_reduce;
  all_gather_fn all_gather;
  reduce_scatter_fn reduce_scatter;
} nccl_lib_t;

static nccl_lib_t g_nccl;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load_once(void) {
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    strncpy(g_nccl.error, e ? e : "dlopen failed", sizeof(g_nccl.error) - 1);
    return;
  }
  struct {
    const char* name;
    void** slot;
  } syms[] = {
      {"ncclGetVersion", (void**)&g_nccl.get_version},
      {"ncclGetErrorString", (void**)&g_nccl.error_string},
      {"ncclCommInitAll", (void**)&g_nccl.comm_init_all},
      {"ncclCommDestroy", (void**)&g_nccl.comm_destroy},
      {"ncclGroupStart", (void**)&g_nccl.group_start},
      {"ncclGroupEnd", (void**)&g_nccl.group_end},
      {"ncclAllReduce", (void**)&g_nccl.all_reduce},
      {"ncclAllGather", (void**)&g_nccl.all_gather},
      {"ncclReduceScatter", (void**)&g_nccl.reduce_scatter},
  };
  for (size_t i = 0; i < TJ_ARRAY_SIZE(syms); ++i) {
    // POSIX allows converting dlsym's void* to a function pointer.
    *syms[i].slot = dlsym(lib, syms[i].name);
    if (!*syms[i].slot) {
      strncpy(g_nccl.error, syms[i].name, sizeof(g_nccl.error) - 1);
      memset(&g_nccl.get_version, 0,
             sizeof(g_nccl) - offsetof(nccl_lib_t, get_version));
      dlclose(lib);
      return;
    }
  }
  if (g_nccl.get_version(&g_nccl.version) != kSuccess) g_nccl.version = 0;
  g_nccl.lib = lib;
}

tj_status_t tj_nccl_load(void) {
  pthread_once(&g_once, load_once);
  if (g_nccl.lib) return NULL;
  if (g_nccl.get_version == NULL && strchr(g_nccl.error, ' ') == NULL &&
      strncmp(g_nccl.error, "nccl", 4) == 0) {
    return tj_unsupported("NCCL: libnccl.so.2 lacks symbol %s", g_nccl.error);
  }
  return tj_unsupported("NCCL unavailable: dlopen(\"libnccl.so.2\"): %s",
                        g_nccl.error);
}

int32_t tj_nccl_version(void) { return tj_nccl_load() ? 0 : g_nccl.version; }

bool tj_nccl_available(void) {
  tj_status_t s = tj_nccl_load();
  tj_status_free(s);
  return s == NULL;
}

static tj_status_t nccl_status(int result, const char* call) {
  if (result == kSuccess) return NULL;
  const char* text = g_nccl.error_string ? g_nccl.error_string(result) : "";
  return tj_status_make(TJ_STATUS_BACKEND_FAILURE, "%s: ncclResult %d (%s)",
                        call, result, text ? text : "");
}

static int nccl_dtype(tj_dtype_t dtype) {
  switch (dtype) {
    case TJ_DTYPE_I8:
      return 0;
    case TJ_DTYPE_U8:
      return 1;
    case TJ_DTYPE_I32:
      return 2;
    case TJ_DTYPE_U32:
      return 3;
    case TJ_DTYPE_U64:
      return 5;
    case TJ_DTYPE_I64:
      return 4;
    case TJ_DTYPE_F16:
      return 6;
    case TJ_DTYPE_F32:
      return 7;
    case TJ_DTYPE_F64:
      return 8;
    case TJ_DTYPE_BF16:
      return 9;
    default:
      return -1;
  }
}

struct tj_nccl_comms_t {
  tj_allocator_t allocator;
  int32_t n;
  nccl_comm_t* comms;
};

tj_status_t tj_nccl_comms_create(tj_allocator_t allocator, int32_t n,
                                 const int32_t* devices,
                                 tj_nccl_comms_t** out_comms) {
  *out_comms = NULL;
  if (n < 1) return tj_invalid("NCCL: a communicator of %d devices", n);
  TJ_RETURN_IF_ERROR(tj_nccl_load());
  // NVLink multicast stays off (the device machines' rule, and
  // cuMulticastCreate is never called); a host's own setting wins.
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  tj_nccl_comms_t* c = tj_calloc(allocator, 1, sizeof(*c));
  if (!c) return tj_status_oom();
  c->allocator = allocator;
  c->comms = tj_calloc(allocator, (size_t)n, sizeof(nccl_comm_t));
  int* devs = tj_alloc(allocator, sizeof(int) * (size_t)n);
  if (!c->comms || !devs) {
    if (devs) tj_free(allocator, devs, sizeof(int) * (size_t)n);
    if (c->comms) tj_free(allocator, c->comms, sizeof(nccl_comm_t) * (size_t)n);
    tj_free(allocator, c, sizeof(*c));
    return tj_status_oom();
  }
  for (int32_t i = 0; i < n; ++i) devs[i] = devices[i];
  tj_status_t s =
      nccl_status(g_nccl.comm_init_all(c->comms, n, devs), "ncclCommInitAll");
  tj_free(allocator, devs, sizeof(int) * (size_t)n);
  if (s) {
    tj_free(allocator, c->comms, sizeof(nccl_comm_t) * (size_t)n);
    tj_free(allocator, c, sizeof(*c));
    return s;
  }
  c->n = n;
  *out_comms = c;
  return NULL;
}

void tj_nccl_comms_destroy(tj_nccl_comms_t* c) {
  if (!c) return;
  for (int32_t i = 0; i < c->n; ++i) {
    if (c->comms[i]) g_nccl.comm_destroy(c->comms[i]);
  }
  tj_free(c->allocator, c->comms, sizeof(nccl_comm_t) * (size_t)c->n);
  tj_free(c->allocator, c, sizeof(*c));
}

int32_t tj_nccl_comms_size(const tj_nccl_comms_t* c) { return c ? c->n : 0; }

tj_status_t tj_nccl_group_start(void) {
  TJ_RETURN_IF_ERROR(tj_nccl_load());
  return nccl_status(g_nccl.group_start(), "ncclGroupStart");
}

tj_status_t tj_nccl_group_end(void) {
  TJ_RETURN_IF_ERROR(tj_nccl_load());
  return nccl_status(g_nccl.group_end(), "ncclGroupEnd");
}

static tj_status_t check_call(const tj_nccl_comms_t* c, int32_t rank,
                              tj_dtype_t dtype, const char* call, int* out) {
  if (!c || rank < 0 || rank >= c->n) {
    return tj_invalid("%s: rank %d of a communicator of %d", call, rank,
                      c ? c->n : 0);
  }
  *out = nccl_dtype(dtype);
  if (*out < 0) {
    return tj_unsupported("%s: dtype %s", call, tj_dtype_name(dtype));
  }
  return NULL;
}

tj_status_t tj_nccl_all_reduce(const tj_nccl_comms_t* c, int32_t rank,
                               tj_cu_deviceptr_t src, tj_cu_deviceptr_t dst,
                               size_t count, tj_dtype_t dtype,
                               tj_cu_stream_t stream) {
  int t;
  TJ_RETURN_IF_ERROR(check_call(c, rank, dtype, "ncclAllReduce", &t));
  return nccl_status(
      g_nccl.all_reduce((const void*)(uintptr_t)src, (void*)(uintptr_t)dst,
                        count, t, kSum, c->comms[rank], stream),
      "ncclAllReduce");
}

tj_status_t tj_nccl_all_gather(const tj_nccl_comms_t* c, int32_t rank,
                               tj_cu_deviceptr_t src, tj_cu_deviceptr_t dst,
                               size_t send_count, tj_dtype_t dtype,
                               tj_cu_stream_t stream) {
  int t;
  TJ_RETURN_IF_ERROR(check_call(c, rank, dtype, "ncclAllGather", &t));
  return nccl_status(
      g_nccl.all_gather((const void*)(uintptr_t)src, (void*)(uintptr_t)dst,
                        send_count, t, c->comms[rank], stream),
      "ncclAllGather");
}

tj_status_t tj_nccl_reduce_scatter(const tj_nccl_comms_t* c, int32_t rank,
                                   tj_cu_deviceptr_t src, tj_cu_deviceptr_t dst,
                                   size_t recv_count, tj_dtype_t dtype,
                                   tj_cu_stream_t stream) {
  int t;
  TJ_RETURN_IF_ERROR(check_call(c, rank, dtype, "ncclReduceScatter", &t));
  return nccl_status(
      g_nccl.reduce_scatter((const void*)(uintptr_t)src, (void*)(uintptr_t)dst,
                            recv_count, t, kSum, c->comms[rank], stream),
      "ncclReduceScatter");
}
