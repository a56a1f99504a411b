// Host collectives (backends/runtime/collective.h): every device's buffer
// is host memory of this process.

#include <string.h>

#include "backends/runtime/collective.h"
#include "lib/dtype.h"

static int32_t num_devices(const tj_collective_mesh_t* mesh) {
  int32_t n = 1;
  for (int32_t a = 0; a < mesh->num_axes; ++a) n *= mesh->sizes[a];
  return n;
}

int32_t tj_collective_group(const tj_collective_mesh_t* mesh, int32_t axis,
                            int32_t device, int32_t* members) {
  int32_t stride = 1;
  for (int32_t a = mesh->num_axes - 1; a > axis; --a) stride *= mesh->sizes[a];
  int32_t coord = (device / stride) % mesh->sizes[axis];
  int32_t base = device - coord * stride;
  for (int32_t j = 0; j < mesh->sizes[axis]; ++j) {
    members[j] = base + j * stride;
  }
  return coord;
}

// dst[begin, end) = sum over |n| members' src in member order.
static tj_status_t sum_into(tj_dtype_t dtype, int32_t n, void* const* srcs,
                            void* dst, int64_t begin, int64_t end) {
  switch (dtype) {
    case TJ_DTYPE_F32:
      for (int64_t i = begin; i < end; ++i) {
        float s = ((const float*)srcs[0])[i];
        for (int32_t j = 1; j < n; ++j) s += ((const float*)srcs[j])[i];
        ((float*)dst)[i] = s;
      }
      return NULL;
    case TJ_DTYPE_F64:
      for (int64_t i = begin; i < end; ++i) {
        double s = ((const double*)srcs[0])[i];
        for (int32_t j = 1; j < n; ++j) s += ((const double*)srcs[j])[i];
        ((double*)dst)[i] = s;
      }
      return NULL;
    case TJ_DTYPE_I64:
      for (int64_t i = begin; i < end; ++i) {
        uint64_t s = (uint64_t)((const int64_t*)srcs[0])[i];
        for (int32_t j = 1; j < n; ++j) {
          s += (uint64_t)((const int64_t*)srcs[j])[i];
        }
        ((int64_t*)dst)[i] = (int64_t)s;
      }
      return NULL;
    case TJ_DTYPE_I32:
      for (int64_t i = begin; i < end; ++i) {
        uint32_t s = (uint32_t)((const int32_t*)srcs[0])[i];
        for (int32_t j = 1; j < n; ++j) {
          s += (uint32_t)((const int32_t*)srcs[j])[i];
        }
        ((int32_t*)dst)[i] = (int32_t)s;
      }
      return NULL;
    case TJ_DTYPE_I8:
      for (int64_t i = begin; i < end; ++i) {
        uint8_t s = (uint8_t)((const int8_t*)srcs[0])[i];
        for (int32_t j = 1; j < n; ++j) {
          s = (uint8_t)(s + (uint8_t)((const int8_t*)srcs[j])[i]);
        }
        ((int8_t*)dst)[i] = (int8_t)s;
      }
      return NULL;
    case TJ_DTYPE_BOOL:
      return tj_unsupported("collective: sum of bool");
    case TJ_DTYPE_U8:
    case TJ_DTYPE_I16:
    case TJ_DTYPE_U16:
    case TJ_DTYPE_U32:
    case TJ_DTYPE_U64:
      // Wrapping sums in the dtype's width (u64 as its bits).
      for (int64_t i = begin; i < end; ++i) {
        uint64_t s = (uint64_t)tj_load_i64(dtype, srcs[0], i);
        for (int32_t j = 1; j < n; ++j) {
          s += (uint64_t)tj_load_i64(dtype, srcs[j], i);
        }
        tj_store_i64(dtype, dst, i, (int64_t)s);
      }
      return NULL;
    default:
      // f16 and bf16 (and dtypes added later): each partial sum rounded to
      // the dtype, as a device holding that dtype would.
      for (int64_t i = begin; i < end; ++i) {
        double s = tj_load_f64(dtype, srcs[0], i);
        for (int32_t j = 1; j < n; ++j) {
          s += tj_load_f64(dtype, srcs[j], i);
          tj_store_f64(dtype, dst, i, s);
          s = tj_load_f64(dtype, dst, i);
        }
        tj_store_f64(dtype, dst, i, s);
      }
      return NULL;
  }
}

tj_status_t tj_collective_all_reduce(const tj_collective_mesh_t* mesh,
                                     int32_t axis, tj_dtype_t dtype,
                                     void* const* src, void* const* dst,
                                     int64_t begin, int64_t end) {
  int32_t n = mesh->sizes[axis];
  int32_t members[64];
  void* srcs[64];
  int32_t total = num_devices(mesh);
  for (int32_t d = 0; d < total; ++d) {
    int32_t coord = tj_collective_group(mesh, axis, d, members);
    if (coord != 0) continue;  // each group once, by its first member
    for (int32_t j = 0; j < n; ++j) srcs[j] = src[members[j]];
    // The first member's dst receives the sum, the others a copy of it
    // (src may be dst: sum first, then copy).
    TJ_RETURN_IF_ERROR(sum_into(dtype, n, srcs, dst[members[0]], begin, end));
    size_t es = tj_dtype_size(dtype);
    for (int32_t j = 1; j < n; ++j) {
      memcpy((char*)dst[members[j]] + begin * (int64_t)es,
             (const char*)dst[members[0]] + begin * (int64_t)es,
             (size_t)(end - begin) * es);
    }
  }
  return NULL;
}

static void block_geometry(int32_t rank, const int64_t* dims, int32_t dim,
                           int64_t* outer, int64_t* inner) {
  *outer = 1;
  *inner = 1;
  for (int32_t d = 0; d < dim; ++d) *outer *= dims[d];
  for (int32_t d = dim; d < rank; ++d) *inner *= dims[d];
}

tj_status_t tj_collective_all_gather(const tj_collective_mesh_t* mesh,
                                     int32_t axis, int32_t dim,
                                     tj_dtype_t dtype, int32_t rank,
                                     const int64_t* src_dims, void* const* src,
                                     void* const* dst) {
  int32_t n = mesh->sizes[axis];
  int64_t outer, inner;
  block_geometry(rank, src_dims, dim, &outer, &inner);
  size_t bytes = (size_t)inner * tj_dtype_size(dtype);
  int32_t members[64];
  for (int32_t d = 0; d < num_devices(mesh); ++d) {
    tj_collective_group(mesh, axis, d, members);
    for (int32_t j = 0; j < n; ++j) {
      const char* s = src[members[j]];
      char* t = (char*)dst[d] + (size_t)j * bytes;
      for (int64_t o = 0; o < outer; ++o) {
        memcpy(t + (size_t)o * n * bytes, s + (size_t)o * bytes, bytes);
      }
    }
  }
  return NULL;
}

tj_status_t tj_collective_reduce_scatter(const tj_collective_mesh_t* mesh,
                                         int32_t axis, int32_t dim,
                                         tj_dtype_t dtype, int32_t rank,
                                         const int64_t* src_dims,
                                         void* const* src, void* const* dst) {
  int32_t n = mesh->sizes[axis];
  int64_t outer, inner;
  block_geometry(rank, src_dims, dim, &outer, &inner);
  int64_t block = inner / n;  // elements of one block per outer index
  size_t es = tj_dtype_size(dtype);
  int32_t members[64];
  void* srcs[64];
  for (int32_t d = 0; d < num_devices(mesh); ++d) {
    int32_t c = tj_collective_group(mesh, axis, d, members);
    for (int64_t o = 0; o < outer; ++o) {
      for (int32_t j = 0; j < n; ++j) {
        srcs[j] = (char*)src[members[j]] + (size_t)(o * inner + c * block) * es;
      }
      TJ_RETURN_IF_ERROR(sum_into(
          dtype, n, srcs, (char*)dst[d] + (size_t)(o * block) * es, 0, block));
    }
  }
  return NULL;
}

tj_status_t tj_collective_slice(const tj_collective_mesh_t* mesh, int32_t axis,
                                int32_t dim, tj_dtype_t dtype, int32_t rank,
                                const int64_t* src_dims, void* const* src,
                                void* const* dst) {
  int32_t n = mesh->sizes[axis];
  int64_t outer, inner;
  block_geometry(rank, src_dims, dim, &outer, &inner);
  size_t block = (size_t)(inner / n) * tj_dtype_size(dtype);
  size_t row = (size_t)inner * tj_dtype_size(dtype);
  int32_t members[64];
  for (int32_t d = 0; d < num_devices(mesh); ++d) {
    int32_t c = tj_collective_group(mesh, axis, d, members);
    for (int64_t o = 0; o < outer; ++o) {
      memcpy((char*)dst[d] + (size_t)o * block,
             (const char*)src[d] + (size_t)o * row + (size_t)c * block, block);
    }
  }
  return NULL;
}
