// numpy's .npy and .npz files for the tools (tj-run --input/--inputs,
// tj-reduce's inputs file).
//
// .npy: the magic "\x93NUMPY", a version (1, 2 or 3), the header's length
// (2 bytes in version 1, 4 after), a Python dict literal ('descr',
// 'fortran_order', 'shape'), then the data in C order. The dtypes are
// <f4 <f8 <f2 |i1 <i4 <i8 |b1 |u1 (f32 f64 f16 i8 i32 i64 bool u8); the
// other tj dtypes (bf16, the float8s) have no numpy dtype.
//
// .npz: a zip archive of NAME.npy members, stored (not compressed: what
// np.savez writes, and what tj_tool_npz_write writes); zip64 records (as
// numpy writes them) are read. np.load reads what tj_tool_npz_write
// writes.

#ifndef TJ_TOOLS_TOOL_NPZ_H_
#define TJ_TOOLS_TOOL_NPZ_H_

#include <stddef.h>
#include <stdint.h>

#include "tensorjit.h"

// One array read from a .npy or .npz: its name (the member's name without
// ".npy"; "" for a .npy file), and a tensor whose data and shape it owns.
typedef struct tj_tool_array_t {
  char name[128];
  int64_t shape[TJ_MAX_RANK];
  void* data;  // malloc'd, |bytes| long (at least 1)
  size_t bytes;
  tj_tensor_t tensor;  // dense, over |data| and |shape|
} tj_tool_array_t;

// Reads the .npy image |buf| (|length| bytes; |what| names it in errors)
// into |*out| (the caller frees out->data). INVALID_ARGUMENT naming |what|
// for a malformed file, a dtype above's list lacks or Fortran order.
tj_status_t tj_tool_npy_parse(const char* what, const unsigned char* buf,
                              size_t length, tj_tool_array_t* out);

// Reads the .npy file |path|.
tj_status_t tj_tool_npy_read(const char* path, tj_tool_array_t* out);

// Reads every member of the .npz file |path|: |*out| (malloc'd, |*count|
// of them) for tj_tool_arrays_free. INVALID_ARGUMENT naming the file and
// the member for what cannot be read (a compressed member included).
tj_status_t tj_tool_npz_read(const char* path, tj_tool_array_t** out,
                             int32_t* count);

// Frees |count| arrays and the array of them.
void tj_tool_arrays_free(tj_tool_array_t* arrays, int32_t count);

// Writes dense CPU tensors |tensors| as the .npz file |path|, member i
// named |names|[i] + ".npy". UNSUPPORTED naming the tensor for a dtype
// numpy lacks; INVALID_ARGUMENT when |path| cannot be written.
tj_status_t tj_tool_npz_write(const char* path, const char* const* names,
                              const tj_tensor_t* tensors, int32_t count);

#endif  // TJ_TOOLS_TOOL_NPZ_H_
