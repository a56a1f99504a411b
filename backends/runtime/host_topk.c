// backends/runtime/host_topk.c: see host_topk.h. argtopk's native host
// kernel: order-preserving keys, a heap of the k best or a radix sort of
// (key, index) per row, rows spread over the caller's parallel_for.

#include "backends/runtime/host_topk.h"

#include <string.h>

// A row is sorted with a heap when 16 k <= n, else radix-sorted; rows of at
// most kInsertionRow by insertion.
enum { kHeapRatio = 16, kInsertionRow = 32 };

// Below this many elements in all a run stays on the calling thread.
enum { kInlineElements = 1 << 15 };

// (key, index) where the pair does not fit one u64.
typedef struct wide_t {
  uint64_t key, at;
} wide_t;

typedef struct topk_t {
  tj_dtype_t dtype;
  const unsigned char* x;
  size_t size;       // bytes an element
  int64_t n, k;      // the row's length, the indices kept
  int64_t step;      // the axis' stride, in elements
  int64_t inner;     // the output's stride along the axis
  int32_t row_rank;  // dims other than the axis
  int64_t row_dims[TJ_MAX_RANK], row_strides[TJ_MAX_RANK];
  int32_t key_bits;  // 8, 16, 32 or 64
  bool largest, wide;
  int64_t* out;
  unsigned char* scratch;
  size_t slot_bytes;
} topk_t;

bool tj_host_topk_takes(tj_dtype_t dtype) {
  switch (dtype) {
    case TJ_DTYPE_F32:
    case TJ_DTYPE_F16:
    case TJ_DTYPE_BF16:
    case TJ_DTYPE_F64:
    case TJ_DTYPE_I8:
    case TJ_DTYPE_I16:
    case TJ_DTYPE_I32:
    case TJ_DTYPE_I64:
    case TJ_DTYPE_U8:
    case TJ_DTYPE_U16:
    case TJ_DTYPE_U32:
    case TJ_DTYPE_U64:
      return true;
    default:
      return false;
  }
}

static int32_t key_bits_of(tj_dtype_t dtype) {
  switch (dtype) {
    case TJ_DTYPE_I8:
    case TJ_DTYPE_U8:
      return 8;
    case TJ_DTYPE_F16:
    case TJ_DTYPE_BF16:
    case TJ_DTYPE_I16:
    case TJ_DTYPE_U16:
      return 16;
    case TJ_DTYPE_F64:
    case TJ_DTYPE_I64:
    case TJ_DTYPE_U64:
      return 64;
    default:
      return 32;
  }
}

//===--- keys ---===//

// A float's bits |b| (sign bit |sign|, +inf's magnitude |inf|) as an
// unsigned key in the float's order: NaN (any sign, any payload) the
// largest key, -0 and +0 one key. Branch-free, so that fixed-length loops
// of it vectorize.
static inline uint32_t float_key32(uint32_t b, uint32_t sign, uint32_t inf) {
  uint32_t mask = sign * 2u - 1u;
  uint32_t mag = b & (sign - 1u);
  // Negative: every bit flipped; positive: the sign bit set.
  uint32_t flip = ((0u - ((b & sign) != 0)) & mask) | sign;
  uint32_t u = b ^ flip;
  u = mag == 0 ? sign : u;
  return mag > inf ? mask : u;
}

static inline uint64_t float_key64(uint64_t b) {
  const uint64_t sign = 1ull << 63, inf = 0x7ff0000000000000ull;
  uint64_t mag = b & (sign - 1);
  if (mag > inf) return UINT64_MAX;
  if (mag == 0) return sign;
  return (b & sign) ? ~b : b | sign;
}

static inline uint8_t ld8(const unsigned char* p) { return *p; }
static inline uint16_t ld16(const unsigned char* p) {
  uint16_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}
static inline uint32_t ld32(const unsigned char* p) {
  uint32_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}
static inline uint64_t ld64(const unsigned char* p) {
  uint64_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

// The key of the element at |p| of a dtype of up to 32 bits.
static inline uint32_t key32_at(tj_dtype_t dtype, const unsigned char* p) {
  switch (dtype) {
    case TJ_DTYPE_F32:
      return float_key32(ld32(p), 0x80000000u, 0x7f800000u);
    case TJ_DTYPE_F16:
      return float_key32(ld16(p), 0x8000u, 0x7c00u);
    case TJ_DTYPE_BF16:
      return float_key32(ld16(p), 0x8000u, 0x7f80u);
    case TJ_DTYPE_I8:
      return (uint32_t)(ld8(p) ^ 0x80u);
    case TJ_DTYPE_U8:
      return ld8(p);
    case TJ_DTYPE_I16:
      return (uint32_t)(ld16(p) ^ 0x8000u);
    case TJ_DTYPE_U16:
      return ld16(p);
    case TJ_DTYPE_I32:
      return ld32(p) ^ 0x80000000u;
    default:  // u32
      return ld32(p);
  }
}

// keys[j] of the row at |row| (up to 32 bits), complemented within the
// key's width when the largest come first. One loop per dtype, so that
// the switch is out of it.
static void load_keys32(const topk_t* t, const unsigned char* row,
                        uint32_t* keys) {
  const int64_t n = t->n;
  const ptrdiff_t s = (ptrdiff_t)(t->step * (int64_t)t->size);
  const uint32_t width =
      t->key_bits == 32 ? UINT32_MAX : (1u << t->key_bits) - 1u;
  const uint32_t flip = t->largest ? width : 0;
#define TJ_TOPK_LOOP(dtype)                                   \
  for (int64_t j = 0; j < n; ++j) {                           \
    keys[j] = key32_at(dtype, row + (ptrdiff_t)j * s) ^ flip; \
  }                                                           \
  break
  switch (t->dtype) {
    case TJ_DTYPE_F32:
      TJ_TOPK_LOOP(TJ_DTYPE_F32);
    case TJ_DTYPE_F16:
      TJ_TOPK_LOOP(TJ_DTYPE_F16);
    case TJ_DTYPE_BF16:
      TJ_TOPK_LOOP(TJ_DTYPE_BF16);
    case TJ_DTYPE_I8:
      TJ_TOPK_LOOP(TJ_DTYPE_I8);
    case TJ_DTYPE_U8:
      TJ_TOPK_LOOP(TJ_DTYPE_U8);
    case TJ_DTYPE_I16:
      TJ_TOPK_LOOP(TJ_DTYPE_I16);
    case TJ_DTYPE_U16:
      TJ_TOPK_LOOP(TJ_DTYPE_U16);
    case TJ_DTYPE_I32:
      TJ_TOPK_LOOP(TJ_DTYPE_I32);
    default:
      TJ_TOPK_LOOP(TJ_DTYPE_U32);
  }
#undef TJ_TOPK_LOOP
}

// The same into 64-bit keys: the 64-bit dtypes, and the others on rows too
// long for an index in 32 bits.
static void load_keys64(const topk_t* t, const unsigned char* row,
                        uint64_t* keys) {
  const int64_t n = t->n;
  const ptrdiff_t s = (ptrdiff_t)(t->step * (int64_t)t->size);
  const uint64_t flip = !t->largest         ? 0
                        : t->key_bits == 64 ? UINT64_MAX
                                            : (1ull << t->key_bits) - 1;
  for (int64_t j = 0; j < n; ++j) {
    const unsigned char* p = row + (ptrdiff_t)j * s;
    uint64_t key;
    switch (t->dtype) {
      case TJ_DTYPE_F64:
        key = float_key64(ld64(p));
        break;
      case TJ_DTYPE_I64:
        key = ld64(p) ^ (1ull << 63);
        break;
      case TJ_DTYPE_U64:
        key = ld64(p);
        break;
      default:
        key = key32_at(t->dtype, p);
        break;
    }
    keys[j] = key ^ flip;
  }
}

//===--- (key, index) in one u64: keys of up to 32 bits ---===//

static void sift_down64(uint64_t* h, int64_t count, int64_t i) {
  uint64_t v = h[i];
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= count) break;
    if (c + 1 < count && h[c + 1] > h[c]) ++c;
    if (h[c] <= v) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = v;
}

// Keys are looked at kBlock at a time: a block whose smallest key is no
// better than the heap's worst (most of them, once the heap holds good
// ones) costs its keys and a min, loops of a fixed length that vectorize.
enum { kBlock = 16 };

// The keys of the kBlock elements at |p| (complemented by |flip|).
static inline void block_keys32(const topk_t* t, const unsigned char* p,
                                uint32_t flip, uint32_t* blk) {
  if (t->dtype == TJ_DTYPE_F32 && t->step == 1) {
    for (int32_t i = 0; i < kBlock; ++i)
      blk[i] = float_key32(ld32(p + 4 * i), 0x80000000u, 0x7f800000u) ^ flip;
    return;
  }
  const ptrdiff_t s = (ptrdiff_t)(t->step * (int64_t)t->size);
  for (int32_t i = 0; i < kBlock; ++i)
    blk[i] = key32_at(t->dtype, p + i * s) ^ flip;
}

// The k smallest of (key_j, j) of the row at |row|, ascending, into |h|
// (k entries), with no array of keys: the keys are made block by block.
static void heap_select64(const topk_t* t, const unsigned char* row,
                          uint64_t* h) {
  const int64_t n = t->n, k = t->k;
  const ptrdiff_t s = (ptrdiff_t)(t->step * (int64_t)t->size);
  const uint32_t flip = !t->largest         ? 0
                        : t->key_bits == 32 ? UINT32_MAX
                                            : (1u << t->key_bits) - 1u;
  for (int64_t j = 0; j < k; ++j) {
    uint32_t key = key32_at(t->dtype, row + (ptrdiff_t)j * s) ^ flip;
    h[j] = (uint64_t)key << 32 | (uint64_t)j;
  }
  for (int64_t i = k / 2; i-- > 0;) sift_down64(h, k, i);
  // A later element ties the worst kept at a higher index: only a smaller
  // key gets in.
  uint32_t worst = (uint32_t)(h[0] >> 32);
  int64_t j = k;
  uint32_t blk[kBlock];
  for (; j + kBlock <= n; j += kBlock) {
    block_keys32(t, row + (ptrdiff_t)j * s, flip, blk);
    uint32_t lo = blk[0];
    for (int32_t i = 1; i < kBlock; ++i) lo = blk[i] < lo ? blk[i] : lo;
    if (lo >= worst) continue;
    for (int32_t i = 0; i < kBlock; ++i) {
      if (blk[i] >= worst) continue;
      h[0] = (uint64_t)blk[i] << 32 | (uint64_t)(j + i);
      sift_down64(h, k, 0);
      worst = (uint32_t)(h[0] >> 32);
    }
  }
  for (; j < n; ++j) {
    uint32_t key = key32_at(t->dtype, row + (ptrdiff_t)j * s) ^ flip;
    if (key >= worst) continue;
    h[0] = (uint64_t)key << 32 | (uint64_t)j;
    sift_down64(h, k, 0);
    worst = (uint32_t)(h[0] >> 32);
  }
  for (int64_t end = k; end-- > 1;) {
    uint64_t top = h[0];
    h[0] = h[end];
    h[end] = top;
    sift_down64(h, end, 0);
  }
}

static void insertion64(uint64_t* a, int64_t n) {
  for (int64_t i = 1; i < n; ++i) {
    uint64_t v = a[i];
    int64_t j = i;
    for (; j > 0 && a[j - 1] > v; --j) a[j] = a[j - 1];
    a[j] = v;
  }
}

// Turns digit counts |h| into the digit's first slots (an exclusive
// prefix sum); true when one digit value holds all |n| keys, so that a
// pass over this digit would leave the order as it is.
static bool digit_starts(int64_t h[256], int64_t n) {
  bool trivial = false;
  int64_t sum = 0;
  for (int32_t v = 0; v < 256; ++v) {
    trivial |= h[v] == n;
    int64_t c = h[v];
    h[v] = sum;
    sum += c;
  }
  return trivial;
}

// (keys[j], j) sorted ascending, through |a| and |b| (n entries each):
// returns the one holding the result.
static uint64_t* radix_sort64(const uint32_t* keys, int64_t n, int32_t bits,
                              uint64_t* a, uint64_t* b) {
  const int32_t digits = bits / 8;
  int64_t hist[4][256];
  memset(hist, 0, sizeof(hist));
  for (int64_t j = 0; j < n; ++j) {
    uint32_t key = keys[j];
    a[j] = (uint64_t)key << 32 | (uint64_t)j;
    for (int32_t d = 0; d < digits; ++d) ++hist[d][(key >> (8 * d)) & 255];
  }
  if (n <= kInsertionRow) {
    insertion64(a, n);
    return a;
  }
  for (int32_t d = 0; d < digits; ++d) {
    int64_t* h = hist[d];
    const bool trivial = digit_starts(h, n);
    if (trivial) continue;  // every key shares this digit
    const int32_t shift = 32 + 8 * d;
    for (int64_t j = 0; j < n; ++j) {
      uint64_t e = a[j];
      b[h[(e >> shift) & 255]++] = e;
    }
    uint64_t* tmp = a;
    a = b;
    b = tmp;
  }
  return a;
}

//===--- (key, index) as two u64 ---===//

static inline bool wide_less(const wide_t* x, const wide_t* y) {
  return x->key < y->key || (x->key == y->key && x->at < y->at);
}

static void sift_down_wide(wide_t* h, int64_t count, int64_t i) {
  wide_t v = h[i];
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= count) break;
    if (c + 1 < count && wide_less(&h[c], &h[c + 1])) ++c;
    if (!wide_less(&v, &h[c])) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = v;
}

static void heap_select_wide(const uint64_t* keys, int64_t n, int64_t k,
                             wide_t* h) {
  for (int64_t j = 0; j < k; ++j) h[j] = (wide_t){keys[j], (uint64_t)j};
  for (int64_t i = k / 2; i-- > 0;) sift_down_wide(h, k, i);
  for (int64_t j = k; j < n; ++j) {
    if (keys[j] >= h[0].key) continue;
    h[0] = (wide_t){keys[j], (uint64_t)j};
    sift_down_wide(h, k, 0);
  }
  for (int64_t end = k; end-- > 1;) {
    wide_t top = h[0];
    h[0] = h[end];
    h[end] = top;
    sift_down_wide(h, end, 0);
  }
}

static wide_t* radix_sort_wide(const uint64_t* keys, int64_t n, int32_t bits,
                               wide_t* a, wide_t* b) {
  const int32_t digits = bits / 8;
  int64_t hist[8][256];
  memset(hist, 0, sizeof(hist));
  for (int64_t j = 0; j < n; ++j) {
    uint64_t key = keys[j];
    a[j] = (wide_t){key, (uint64_t)j};
    for (int32_t d = 0; d < digits; ++d) ++hist[d][(key >> (8 * d)) & 255];
  }
  if (n <= kInsertionRow) {
    for (int64_t i = 1; i < n; ++i) {
      wide_t v = a[i];
      int64_t j = i;
      for (; j > 0 && wide_less(&v, &a[j - 1]); --j) a[j] = a[j - 1];
      a[j] = v;
    }
    return a;
  }
  for (int32_t d = 0; d < digits; ++d) {
    int64_t* h = hist[d];
    const bool trivial = digit_starts(h, n);
    if (trivial) continue;
    const int32_t shift = 8 * d;
    for (int64_t j = 0; j < n; ++j) {
      wide_t e = a[j];
      b[h[(e.key >> shift) & 255]++] = e;
    }
    wide_t* tmp = a;
    a = b;
    b = tmp;
  }
  return a;
}

//===--- rows ---===//

static bool by_heap(const topk_t* t) {
  return t->k * kHeapRatio <= t->n && t->n > kInsertionRow;
}

// Scratch bytes a row needs: its keys, then the heap or the sort's two
// buffers.
static size_t slot_bytes_of(const topk_t* t) {
  size_t n = (size_t)t->n, k = (size_t)t->k;
  size_t key = t->wide ? sizeof(uint64_t) : sizeof(uint32_t);
  size_t pair = t->wide ? sizeof(wide_t) : sizeof(uint64_t);
  // The narrow heap makes its keys as it goes; the pairs start 64-byte
  // aligned after the keys.
  size_t keys = by_heap(t) && !t->wide ? 0 : (n * key + 63) / 64 * 64;
  size_t bytes = keys + (by_heap(t) ? k : 2 * n) * pair;
  return (bytes + 63) / 64 * 64;
}

static void run_row(const topk_t* t, int64_t r, unsigned char* scratch) {
  // Where row r starts in x, and its first output.
  int64_t off = 0, rem = r;
  for (int32_t d = t->row_rank; d-- > 0;) {
    int64_t c = rem % t->row_dims[d];
    rem /= t->row_dims[d];
    off += c * t->row_strides[d];
  }
  const unsigned char* row = t->x + (ptrdiff_t)(off * (int64_t)t->size);
  int64_t* out = t->out + (r / t->inner) * t->k * t->inner + r % t->inner;
  const int64_t n = t->n, k = t->k, inner = t->inner;
  if (!t->wide) {
    uint64_t* sorted = (uint64_t*)scratch;
    if (by_heap(t)) {
      heap_select64(t, row, sorted);
    } else {
      uint32_t* keys = (uint32_t*)scratch;
      uint64_t* pairs =
          (uint64_t*)(scratch + ((size_t)n * sizeof(uint32_t) + 63) / 64 * 64);
      load_keys32(t, row, keys);
      sorted = radix_sort64(keys, n, t->key_bits, pairs, pairs + n);
    }
    for (int64_t p = 0; p < k; ++p)
      out[p * inner] = (int64_t)(sorted[p] & UINT32_MAX);
    return;
  }
  uint64_t* keys = (uint64_t*)scratch;
  wide_t* pairs =
      (wide_t*)(scratch + ((size_t)n * sizeof(uint64_t) + 63) / 64 * 64);
  load_keys64(t, row, keys);
  wide_t* sorted = pairs;
  if (by_heap(t)) {
    heap_select_wide(keys, n, k, pairs);
  } else {
    sorted = radix_sort_wide(keys, n, t->key_bits, pairs, pairs + n);
  }
  for (int64_t p = 0; p < k; ++p) out[p * inner] = (int64_t)sorted[p].at;
}

static void rows_task(void* context, int64_t begin, int64_t end, int32_t slot) {
  const topk_t* t = context;
  unsigned char* scratch = t->scratch + (size_t)slot * t->slot_bytes;
  for (int64_t r = begin; r < end; ++r) run_row(t, r, scratch);
}

tj_status_t tj_host_topk_run(tj_allocator_t allocator,
                             const tj_host_parallel_t* parallel,
                             tj_dtype_t dtype, int32_t rank,
                             const int64_t* dims, const void* x,
                             const int64_t* strides, int32_t axis, int64_t k,
                             bool largest, int64_t* out) {
  if (!tj_host_topk_takes(dtype))
    return tj_invalid("argtopk's host kernel: dtype %s is not one it takes",
                      tj_dtype_name(dtype));
  if (rank < 1 || rank > TJ_MAX_RANK || axis < 0 || axis >= rank || k < 0 ||
      k > dims[axis])
    return tj_internal("argtopk's host kernel: axis %d of rank %d, k %lld",
                       (int)axis, (int)rank, (long long)k);
  topk_t t;
  memset(&t, 0, sizeof(t));
  t.dtype = dtype;
  t.x = x;
  t.size = tj_dtype_size(dtype);
  t.n = dims[axis];
  t.k = k;
  t.largest = largest;
  t.out = out;
  t.key_bits = key_bits_of(dtype);
  t.wide = t.key_bits == 64 || (uint64_t)t.n > UINT32_MAX;
  int64_t dense[TJ_MAX_RANK], rows = 1;
  int64_t step = 1;
  for (int32_t d = rank; d-- > 0;) {
    dense[d] = step;
    step *= dims[d];
  }
  t.inner = 1;
  for (int32_t d = 0; d < rank; ++d) {
    int64_t s = strides ? strides[d] : dense[d];
    if (d == axis) {
      t.step = s;
      continue;
    }
    t.row_dims[t.row_rank] = dims[d];
    t.row_strides[t.row_rank++] = s;
    rows *= dims[d];
    if (d > axis) t.inner *= dims[d];
  }
  if (rows == 0 || k == 0) return NULL;
  t.slot_bytes = slot_bytes_of(&t);
  bool spread = parallel && parallel->run && parallel->max_slots > 1 &&
                rows > 1 && rows * t.n >= kInlineElements;
  int32_t slots = spread ? parallel->max_slots : 1;
  size_t bytes = (size_t)slots * t.slot_bytes;
  t.scratch = tj_alloc(allocator, bytes);
  if (!t.scratch) return tj_status_oom();
  if (spread) {
    parallel->run(parallel->user_data, rows, rows_task, &t);
  } else {
    rows_task(&t, 0, rows, 0);
  }
  tj_free(allocator, t.scratch, bytes);
  return NULL;
}
