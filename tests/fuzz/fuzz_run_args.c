// libFuzzer target: the run API's tensor descriptors. Two executables of
// one small graph, y[N,4] = x[N,4] + w[N,4] with a symbolic N (x86 and the
// reference interpreter), are compiled once; each input then builds the
// descriptors of x, w and y from the fuzz bytes: rank (negative and beyond
// TJ_MAX_RANK included), dims and strides (from a table of values near the
// int64 limits, or raw), byte_offset (near 2^64 too), the data pointer
// (the tensor's buffer, NULL, the other buffer, an odd address), dtype
// and device (valid or not), and how many inputs and outputs are passed.
//
// tj_executable_run must return OK or INVALID_ARGUMENT, never crash (ASan
// and UBSan watch every access), and never write outside the output
// buffer: guard bytes around it are checked after each run. A descriptor
// whose elements all lie inside a buffer, or whose address arithmetic
// overflows (which the library must refuse), is run; one that is well
// formed but points past this harness's buffers is skipped: the library
// cannot know how large the caller's memory is.

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorjit/tj_base.h"
#include "tensorjit/tj_executable.h"
#include "tensorjit/tj_graph.h"
#include "tensorjit/tj_tensor.h"

enum {
  kBufferBytes = 4096,
  kGuardBytes = 256,
  kGuard = 0xA5,
  kMaxRank = TJ_MAX_RANK + 4,
};

static tj_context_t* g_context;
static tj_executable_t* g_executables[2];  // x86, reference
static unsigned char* g_input;   // kBufferBytes, malloc'd: ASan bounds
static unsigned char* g_output;  // kGuardBytes | kBufferBytes | kGuardBytes

static const char kGraph[] =
    "func @f[N](%x: f32[N,4], %w: f32[N,4]) {\n"
    "  %2 = add %x, %w : f32[N,4]\n"
    "  return %2 as \"y\"\n"
    "}\n";

static void fail(const char* what, tj_status_t status) {
  fprintf(stderr, "fuzz_run_args: %s: %s\n", what,
          status ? tj_status_message(status) : "");
  abort();
}

static void setup(void) {
  tj_status_t status = tj_context_create(NULL, &g_context);
  if (status) fail("context", status);
  tj_graph_t* graph = NULL;
  status =
      tj_graph_parse(g_context, kGraph, sizeof(kGraph) - 1, "fuzz", &graph);
  if (status) fail("parse", status);
  const tj_target_t targets[2] = {TJ_TARGET_X86, TJ_TARGET_REFERENCE};
  for (int i = 0; i < 2; ++i) {
    tj_compile_options_t options;
    tj_compile_options_initialize(&options);
    options.target = targets[i];
    options.cache_dir = "";
    options.x86.num_threads = 1;
    status = tj_compile(graph, &options, &g_executables[i]);
    if (status) fail("compile", status);
  }
  tj_graph_destroy(graph);
  g_input = malloc(kBufferBytes);
  g_output = malloc(kBufferBytes + 2 * kGuardBytes);
  if (!g_input || !g_output) abort();
  for (int i = 0; i < kBufferBytes; ++i) g_input[i] = (unsigned char)i;
}

// The fuzz bytes, read front to back; zeros once they run out.
typedef struct reader_t {
  const uint8_t* data;
  size_t size;
} reader_t;

static uint8_t next_byte(reader_t* r) {
  if (r->size == 0) return 0;
  --r->size;
  return *r->data++;
}

static uint64_t next_u64(reader_t* r) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= (uint64_t)next_byte(r) << (8 * i);
  return v;
}

static const int64_t kValues[] = {
    0,
    1,
    2,
    3,
    4,
    5,
    7,
    8,
    16,
    63,
    -1,
    -4,
    INT64_MAX,
    INT64_MIN,
    INT64_MAX / 2,
    INT64_MAX / 4 + 1,
    (int64_t)1 << 32,
    ((int64_t)1 << 61) + 1,
    ((int64_t)1 << 62),
    INT64_MAX / 16,
    -(INT64_MAX / 8),
    (int64_t)INT32_MAX + 1,
};
enum { kNumValues = sizeof(kValues) / sizeof(kValues[0]) };

// A dim or stride: mostly small, else from the table, else raw.
static int64_t next_value(reader_t* r) {
  uint8_t b = next_byte(r);
  if (b < 128) return b % 9;
  if (b < 248) return kValues[b % kNumValues];
  return (int64_t)next_u64(r);
}

static const uint64_t kOffsets[] = {
    0,
    4,
    1,
    3,
    16,
    4092,
    4096,
    8192,
    UINT64_MAX,
    UINT64_MAX - 3,
    UINT64_MAX - 4095,
    (uint64_t)1 << 63,
    (uint64_t)INT64_MAX,
};
enum { kNumOffsets = sizeof(kOffsets) / sizeof(kOffsets[0]) };

typedef struct descriptor_t {
  tj_tensor_t tensor;
  int64_t shape[kMaxRank];
  int64_t strides[kMaxRank];
  const unsigned char* buffer;  // the buffer |data| points into, or NULL
} descriptor_t;

static void next_descriptor(reader_t* r, descriptor_t* d, unsigned char* own,
                            unsigned char* other) {
  memset(d, 0, sizeof(*d));
  uint8_t b = next_byte(r);
  // rank: mostly 2, else -2..kMaxRank
  int32_t rank = b < 160 ? 2 : (int32_t)(b % (kMaxRank + 3)) - 2;
  for (int i = 0; i < kMaxRank; ++i) d->shape[i] = 4;
  d->shape[0] = next_value(r);
  if (rank > 1) d->shape[1] = (next_byte(r) < 200) ? 4 : next_value(r);
  for (int i = 2; i < kMaxRank && i < rank; ++i) d->shape[i] = next_value(r);
  uint8_t flags = next_byte(r);
  bool strided = flags & 1;
  if (strided) {
    for (int i = 0; i < kMaxRank && i < rank; ++i) {
      d->strides[i] = next_value(r);
    }
  }
  switch ((flags >> 1) & 7) {
    case 0:
    case 1:
    case 2:
      d->tensor.data = own;
      d->buffer = own;
      break;
    case 3:
      d->tensor.data = NULL;
      break;
    case 4:
      d->tensor.data = other;
      d->buffer = other;
      break;
    case 5:
      d->tensor.data = own + 1;  // misaligned
      d->buffer = own;
      break;
    default:
      d->tensor.data = own + 64;
      d->buffer = own;
      break;
  }
  uint8_t o = next_byte(r);
  d->tensor.byte_offset = o < 128   ? 0
                          : o < 250 ? kOffsets[o % kNumOffsets]
                                    : next_u64(r);
  uint8_t t = next_byte(r);
  d->tensor.dtype = t < 200 ? TJ_DTYPE_F32 : (tj_dtype_t)((int8_t)t % 12);
  uint8_t dev = next_byte(r);
  d->tensor.device_type =
      dev < 220 ? TJ_DEVICE_CPU : (tj_device_type_t)(dev % 5);
  d->tensor.device_id = dev < 240 ? 0 : (int32_t)(int8_t)next_byte(r);
  d->tensor.rank = rank;
  d->tensor.shape = d->shape;
  d->tensor.strides = strided ? d->strides : NULL;
}

typedef enum { kInside, kOverflows, kOutside } extent_t;

// Where |d|'s elements lie, in 128-bit arithmetic: inside its buffer (or
// none at all), at an address the library must refuse (int64 overflow,
// a NULL or wrapping pointer), or well formed but outside this harness's
// buffers (not run).
static extent_t classify(const descriptor_t* d) {
  const tj_tensor_t* t = &d->tensor;
  if (t->rank < 0 || t->rank > TJ_MAX_RANK) return kOverflows;
  __int128 elements = 1, lo = 0, hi = 0, stride = 1;
  for (int i = t->rank - 1; i >= 0; --i) {
    int64_t n = t->shape[i];
    if (n < 0) return kOverflows;
    elements *= n;
    if (elements > INT64_MAX) elements = (__int128)INT64_MAX + 1;
    __int128 s = t->strides ? t->strides[i] : stride;
    __int128 span = (__int128)(n > 0 ? n - 1 : 0) * s;
    // Clamped at 2^100: far past int64 already, and 8 spans of up to
    // 2^126 would overflow __int128.
    const __int128 far = (__int128)1 << 100;
    if (span < -far) span = -far;
    if (span > far) span = far;
    if (span < 0) {
      lo += span;
      if (lo < -far) lo = -far;
    } else {
      hi += span;
      if (hi > far) hi = far;
    }
    if (!t->strides) {
      stride *= n;
      if (stride > INT64_MAX) stride = (__int128)INT64_MAX + 1;
    }
  }
  if (elements == 0) return kInside;
  int dtype_bytes = t->dtype >= 0 && t->dtype < TJ_DTYPE_COUNT_
                        ? (int)tj_dtype_size(t->dtype)
                        : 16;
  if (dtype_bytes < 4) dtype_bytes = 4;
  if (!t->data) return kOverflows;
  if (elements > INT64_MAX || lo < INT64_MIN || hi > INT64_MAX)
    return kOverflows;
  __int128 base = (__int128)(uintptr_t)t->data + t->byte_offset;
  __int128 first = base + lo * dtype_bytes;
  __int128 last = base + (hi + 1) * dtype_bytes;
  if (first < 0 || last > (__int128)UINTPTR_MAX || base > (__int128)UINTPTR_MAX)
    return kOverflows;
  __int128 begin = (__int128)(uintptr_t)d->buffer;
  if (first >= begin && last <= begin + kBufferBytes) return kInside;
  return kOutside;
}

// libFuzzer's entry point.
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!g_context) setup();
  reader_t r = {data, size};
  uint8_t head = next_byte(&r);
  tj_executable_t* executable = g_executables[head & 1];
  unsigned char* out = g_output + kGuardBytes;
  descriptor_t d[3];
  next_descriptor(&r, &d[0], g_input, out);
  next_descriptor(&r, &d[1], g_input, out);
  next_descriptor(&r, &d[2], out, g_input);
  for (int i = 0; i < 3; ++i) {
    if (classify(&d[i]) == kOutside) return 0;
  }
  int32_t num_inputs = 2, num_outputs = 1;
  if (head & 2) num_inputs = (int32_t)((head >> 2) & 3) - 1;    // -1..2
  if (head & 16) num_outputs = (int32_t)((head >> 5) & 3) - 1;  // -1..2
  tj_tensor_t inputs[2] = {d[0].tensor, d[1].tensor};
  tj_tensor_t outputs[2] = {d[2].tensor, d[2].tensor};
  memset(g_output, kGuard, kBufferBytes + 2 * kGuardBytes);
  tj_status_t status =
      tj_executable_run(executable, num_inputs > 0 ? inputs : NULL, num_inputs,
                        num_outputs > 0 ? outputs : NULL, num_outputs);
  if (status && tj_status_code(status) != TJ_STATUS_INVALID_ARGUMENT) {
    fail("run returned neither OK nor INVALID_ARGUMENT", status);
  }
  bool refused = status != NULL;
  tj_status_free(status);
  for (int i = 0; i < kGuardBytes; ++i) {
    if (g_output[i] != kGuard ||
        g_output[kGuardBytes + kBufferBytes + i] != kGuard) {
      fprintf(stderr, "fuzz_run_args: a guard byte was written (%s)\n",
              refused ? "refused" : "ok");
      abort();
    }
  }
  return 0;
}
