// The native host kernel of argtopk (issue 15, lastbreak): the indices of
// each row's k best elements, in C on the host, for a row of any length
// and every dtype argtopk takes, with the reference's order (largest or
// smallest first, NaN the largest, ties by lower index: numpy's stable
// argsort). The run plan (run_plan.c) runs an argtopk group that no kernel
// template lowers (rows past decompose's native forms, rows of symbolic
// length) on it, between the compiled kernels, in place of the reference
// interpreter; TJ_NATIVE_TOPK=off keeps the reference.
//
// Each element becomes an unsigned key whose order is the wanted order
// (floats: the sign flip of their bits, -0 as +0, every NaN one key; the
// signed integers: their sign bit flipped; largest: the key complemented),
// so that a row is sorted by (key, index) ascending. k small against n
// (16 k <= n): a max-heap of the k best, one compare of a key with the
// heap's worst per element, then the heap sorted (torch's and ORT's CPU
// topk take a heap or a partial sort likewise). Otherwise an LSD radix sort
// of (key, index), 8-bit digits of the key only (stable, so the index
// order of ties stays), skipping digits every key shares; rows of at most
// 32 an insertion sort. Keys of up to 32 bits with rows below 2^32 pack
// (key, index) into one u64; f64, the 64-bit integers and longer rows take
// a pair of u64.

#ifndef TJ_BACKENDS_RUNTIME_HOST_TOPK_H_
#define TJ_BACKENDS_RUNTIME_HOST_TOPK_H_

#include "lib/ir.h"

// Runs |task| over [0, n) on |slot|s: ranges that partition [0, n), each
// run once, possibly concurrently, each with a slot id below max_slots
// that no concurrently running range has (per-slot scratch). x86 fills it
// from its thread pool or the host's parallel_for; NULL runs inline.
typedef void (*tj_host_task_fn)(void* context, int64_t begin, int64_t end,
                                int32_t slot);
typedef struct tj_host_parallel_t {
  void (*run)(void* user_data, int64_t n, tj_host_task_fn task, void* context);
  int32_t max_slots;  // >= 1
  void* user_data;
} tj_host_parallel_t;

// argtopk of |x| (|dtype|, |rank| dims |dims|, element strides |strides|,
// NULL: dense row-major) along |axis|: the first |k| indices of each row
// (k <= dims[axis]) into |out|, dense row-major i64 of x's dims with
// dims[axis] = k. Scratch comes from |allocator| (OUT_OF_MEMORY when it
// fails); |parallel| spreads the rows (NULL: inline). INVALID_ARGUMENT
// for a dtype argtopk does not take.
tj_status_t tj_host_topk_run(tj_allocator_t allocator,
                             const tj_host_parallel_t* parallel,
                             tj_dtype_t dtype, int32_t rank,
                             const int64_t* dims, const void* x,
                             const int64_t* strides, int32_t axis, int64_t k,
                             bool largest, int64_t* out);

// Whether tj_host_topk_run takes |dtype| (the numeric dtypes argtopk
// takes: floats f32, f16, bf16, f64 and the 8- to 64-bit integers).
bool tj_host_topk_takes(tj_dtype_t dtype);

#endif  // TJ_BACKENDS_RUNTIME_HOST_TOPK_H_
