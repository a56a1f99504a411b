// The ONNX importer's model walker: protobuf-c decoding through the
// context's allocator, the value table, tensors (raw, typed and external
// data), graph inputs with their symbols, initializers, the node walk with
// model-local functions expanded and known values folded, and outputs.
// The op converters are in onnx_ops.c.

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/shape.h"
#include "onnx/onnx_internal.h"
#include "onnx/onnx_tensor.h"

//===--- protobuf-c's allocator over the context's ---===//

// protobuf-c frees without a size; each block carries its size in front.
typedef struct {
  size_t size;
  size_t pad;  // keeps the payload 16-byte aligned
} pb_header_t;

// protobuf-c's allocator state: an unpack that fails after a failed
// allocation is OUT_OF_MEMORY, not a malformed message.
typedef struct {
  tj_allocator_t allocator;
  bool failed;
} pb_state_t;

static void* pb_alloc(void* user, size_t size) {
  pb_state_t* st = user;
  tj_allocator_t* a = &st->allocator;
  pb_header_t* h = NULL;
  if (size <= SIZE_MAX - sizeof(pb_header_t))
    h = tj_alloc(*a, sizeof(pb_header_t) + size);
  if (!h) {
    st->failed = true;
    return NULL;
  }
  h->size = sizeof(pb_header_t) + size;
  return h + 1;
}

static void pb_free(void* user, void* ptr) {
  if (!ptr) return;
  tj_allocator_t* a = &((pb_state_t*)user)->allocator;
  pb_header_t* h = (pb_header_t*)ptr - 1;
  tj_free(*a, h, h->size);
}

//===--- names and errors ---===//

static const char* node_name(const Onnx__NodeProto* node) {
  return node->name && node->name[0] ? node->name : "";
}

tj_status_t tj_onnx_node_error(const tj_onnx_importer_t* im,
                               const tj_onnx_node_t* node,
                               tj_status_code_t code, const char* format, ...) {
  va_list args;
  va_start(args, format);
  tj_status_t detail = tj_status_makev(code, format, args);
  va_end(args);
  return tj_status_annotate(detail, "onnx: node %d \"%s\" (%s, opset %lld)",
                            (int)node->index, node_name(node->proto),
                            node->proto->op_type ? node->proto->op_type : "",
                            (long long)im->opset);
}

//===--- dtypes ---===//

bool tj_onnx_dtype(int32_t elem_type, tj_dtype_t* out_dtype) {
  switch (elem_type) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
      *out_dtype = TJ_DTYPE_F32;
      return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
      *out_dtype = TJ_DTYPE_F16;
      return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
      *out_dtype = TJ_DTYPE_BF16;
      return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
      *out_dtype = TJ_DTYPE_F64;
      return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
      *out_dtype = TJ_DTYPE_I8;
      return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
      *out_dtype = TJ_DTYPE_I32;
      return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
      *out_dtype = TJ_DTYPE_I64;
      return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
      *out_dtype = TJ_DTYPE_BOOL;
      return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
      *out_dtype = TJ_DTYPE_U8;
      return true;
    // The float8 codes (onnx.proto 1.14+; the protobuf-c code we generate
    // may come from an older onnx.proto that does not name them).
    case 17:  // FLOAT8E4M3FN
      *out_dtype = TJ_DTYPE_F8E4M3;
      return true;
    case 19:  // FLOAT8E5M2
      *out_dtype = TJ_DTYPE_F8E5M2;
      return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
      *out_dtype = TJ_DTYPE_I16;
      return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16:
      *out_dtype = TJ_DTYPE_U16;
      return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32:
      *out_dtype = TJ_DTYPE_U32;
      return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64:
      *out_dtype = TJ_DTYPE_U64;
      return true;
    // The later narrow codes (onnx.proto 1.14 to 1.23), by number for the
    // same reason as float8 above.
    case 18:  // FLOAT8E4M3FNUZ
      *out_dtype = TJ_DTYPE_F8E4M3FNUZ;
      return true;
    case 20:  // FLOAT8E5M2FNUZ
      *out_dtype = TJ_DTYPE_F8E5M2FNUZ;
      return true;
    case 21:  // UINT4
      *out_dtype = TJ_DTYPE_U4;
      return true;
    case 22:  // INT4
      *out_dtype = TJ_DTYPE_I4;
      return true;
    case 23:  // FLOAT4E2M1
      *out_dtype = TJ_DTYPE_F4E2M1;
      return true;
    case 24:  // FLOAT8E8M0
      *out_dtype = TJ_DTYPE_F8E8M0;
      return true;
    case 25:  // UINT2
      *out_dtype = TJ_DTYPE_U2;
      return true;
    case 26:  // INT2
      *out_dtype = TJ_DTYPE_I2;
      return true;
    default:
      return false;
  }
}

// ONNX packs the 4- and 2-bit types in its data, the first element in the
// lowest bits of a byte; libtensorjit holds one per byte.
static int packed_bits(int32_t elem_type) {
  switch (elem_type) {
    case 21:  // UINT4
    case 22:  // INT4
    case 23:  // FLOAT4E2M1
      return 4;
    case 25:  // UINT2
    case 26:  // INT2
      return 2;
    default:
      return 0;
  }
}

// Unpacks |n| elements of |bits| each from |packed| into |out| (a byte
// each), sign-extending the signed integers.
static void unpack_elements(const uint8_t* packed, int64_t n, int bits,
                            tj_dtype_t dtype, uint8_t* out) {
  const int per_byte = 8 / bits;
  const unsigned mask = (1u << bits) - 1;
  const bool is_signed = dtype == TJ_DTYPE_I4 || dtype == TJ_DTYPE_I2;
  for (int64_t i = 0; i < n; ++i) {
    unsigned v = (packed[i / per_byte] >> (bits * (int)(i % per_byte))) & mask;
    if (is_signed && (v & (1u << (bits - 1)))) v |= ~mask;  // negative
    out[i] = (uint8_t)v;
  }
}

const char* tj_onnx_type_name(int32_t elem_type) {
  static const char* const kNames[] = {
      "undefined",      "float",      "uint8",
      "int8",           "uint16",     "int16",
      "int32",          "int64",      "string",
      "bool",           "float16",    "double",
      "uint32",         "uint64",     "complex64",
      "complex128",     "bfloat16",   "float8e4m3fn",
      "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz",
      "uint4",          "int4",       "float4e2m1",
      "float8e8m0",     "uint2",      "int2"};
  if (elem_type >= 0 && (size_t)elem_type < TJ_ARRAY_SIZE(kNames))
    return kNames[elem_type];
  return "unknown";
}

//===--- the value table ---===//

struct tj_onnx_undo_t {
  tj_onnx_val_t* slot;
  tj_onnx_val_t saved;
};
typedef struct tj_onnx_undo_t tj_onnx_undo_t;

static uint32_t hash_name(const char* s) {
  uint32_t h = 2166136261u;
  for (; *s; ++s) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

// The index entry of |name| (its value's position + 1), or 0.
static uint32_t find_slot(tj_onnx_importer_t* im, const char* name) {
  if (!name || !im->index_capacity) return 0;
  uint32_t mask = im->index_capacity - 1;
  for (uint32_t i = hash_name(name) & mask;; i = (i + 1) & mask) {
    uint32_t slot = im->index[i];
    if (!slot) return 0;
    if (strcmp(im->vals[slot - 1]->name, name) == 0) return slot;
  }
}

tj_onnx_val_t* tj_onnx_lookup(tj_onnx_importer_t* im, const char* name) {
  uint32_t slot = find_slot(im, name);
  return slot ? im->vals[slot - 1] : NULL;
}

static tj_status_t grow_index(tj_onnx_importer_t* im) {
  uint32_t capacity = im->index_capacity ? im->index_capacity * 2 : 64;
  uint32_t* index = tj_calloc(im->allocator, capacity, sizeof(uint32_t));
  if (!index) return tj_status_oom();
  for (uint32_t v = 0; v < im->num_vals; ++v) {
    uint32_t i = hash_name(im->vals[v]->name) & (capacity - 1);
    while (index[i]) i = (i + 1) & (capacity - 1);
    index[i] = v + 1;
  }
  tj_free(im->allocator, im->index, im->index_capacity * sizeof(uint32_t));
  im->index = index;
  im->index_capacity = capacity;
  return NULL;
}

tj_status_t tj_onnx_define(tj_onnx_importer_t* im, const char* name,
                           const tj_onnx_val_t* val) {
  uint32_t old_slot = find_slot(im, name);
  if (old_slot) {
    tj_onnx_val_t* old = im->vals[old_slot - 1];
    if (im->scope_depth && old_slot <= im->scope_base) {
      // An outer value redefined in a subgraph: saved for the scope's pop.
      TJ_RETURN_IF_ERROR(tj_array_reserve(im->allocator, (void**)&im->undo,
                                          &im->undo_capacity, im->num_undo + 1,
                                          sizeof(tj_onnx_undo_t)));
      im->undo[im->num_undo].slot = old;
      im->undo[im->num_undo++].saved = *old;
    }
    *old = *val;
    old->name = name;
    return NULL;
  }
  if (im->num_vals >= UINT32_MAX / 4)
    return tj_invalid("onnx: too many values");
  if ((im->num_vals + 1) * 2 > im->index_capacity)
    TJ_RETURN_IF_ERROR(grow_index(im));
  TJ_RETURN_IF_ERROR(tj_array_reserve(im->allocator, (void**)&im->vals,
                                      &im->val_capacity, im->num_vals + 1,
                                      sizeof(tj_onnx_val_t*)));
  tj_onnx_val_t* slot = tj_arena_alloc(&im->arena, sizeof *slot);
  if (!slot) return tj_status_oom();
  *slot = *val;
  slot->name = name;
  im->vals[im->num_vals] = slot;
  uint32_t mask = im->index_capacity - 1;
  uint32_t i = hash_name(name) & mask;
  while (im->index[i]) i = (i + 1) & mask;
  im->index[i] = ++im->num_vals;
  return NULL;
}

void tj_onnx_scope_push(tj_onnx_importer_t* im, tj_onnx_scope_t* out_scope) {
  out_scope->num_vals = im->num_vals;
  out_scope->num_undo = im->num_undo;
  out_scope->base = im->scope_base;
  im->scope_base = im->num_vals;
  im->scope_depth++;
}

void tj_onnx_scope_pop(tj_onnx_importer_t* im, const tj_onnx_scope_t* scope) {
  // Removing the newest entries first from a linear-probing table leaves
  // it exactly as it was before they were inserted (a growth rehashed them
  // in insertion order, which is the same table).
  uint32_t mask = im->index_capacity - 1;
  while (im->num_vals > scope->num_vals) {
    uint32_t slot = im->num_vals--;
    uint32_t i = hash_name(im->vals[slot - 1]->name) & mask;
    while (im->index[i] != slot) i = (i + 1) & mask;
    im->index[i] = 0;
  }
  while (im->num_undo > scope->num_undo) {
    tj_onnx_undo_t* u = &im->undo[--im->num_undo];
    *u->slot = u->saved;
  }
  im->scope_base = scope->base;
  im->scope_depth--;
}

static int64_t numel_of(int32_t rank, const int64_t* dims) {
  int64_t n = 1;
  for (int32_t i = 0; i < rank; ++i) {
    if (dims[i] < 0 || tj_mul_overflow_i64(n, dims[i], &n)) return -1;
  }
  return n;
}

tj_value_t tj_onnx_value(tj_onnx_importer_t* im, tj_onnx_val_t* val) {
  if (!val) return tj_value_none();
  if (im->graph == im->main_graph && !tj_value_is_none(val->value))
    return val->value;
  if (!val->data || (val->symbolic && im->graph == im->main_graph))
    return val->value;
  int64_t n = numel_of(val->rank, val->dims);
  size_t bytes = (size_t)n * tj_dtype_size(val->dtype);
  tj_value_t v = tj_graph_constant(im->graph, val->dtype, val->rank, val->dims,
                                   n ? val->data : NULL, bytes);
  if (im->graph == im->main_graph) val->value = v;
  return v;
}

//===--- tensors ---===//

// Copies |n| typed-field elements into |out| of |dtype|.
static tj_status_t typed_field(const Onnx__TensorProto* t, tj_dtype_t dtype,
                               int64_t n, void* out, const char* what) {
  size_t have = 0;
  switch (t->data_type) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
      have = t->n_float_data;
      if ((int64_t)have == n && n)
        memcpy(out, t->float_data, (size_t)n * sizeof(float));
      break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
      have = t->n_double_data;
      if ((int64_t)have == n && n)
        memcpy(out, t->double_data, (size_t)n * sizeof(double));
      break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
      have = t->n_int64_data;
      if ((int64_t)have == n && n)
        memcpy(out, t->int64_data, (size_t)n * sizeof(int64_t));
      break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
    case 17:  // FLOAT8E4M3FN: the bits, one per int32_data entry
    case 18:  // FLOAT8E4M3FNUZ
    case 19:  // FLOAT8E5M2
    case 20:  // FLOAT8E5M2FNUZ
    case 24:  // FLOAT8E8M0
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16:
      have = t->n_int32_data;
      if ((int64_t)have == n) {
        for (int64_t i = 0; i < n; ++i) {
          int32_t v = t->int32_data[i];
          if (dtype == TJ_DTYPE_I32)
            ((int32_t*)out)[i] = v;
          else if (dtype == TJ_DTYPE_I8)
            ((int8_t*)out)[i] = (int8_t)v;
          else if (dtype == TJ_DTYPE_BOOL)
            ((uint8_t*)out)[i] = v != 0;
          else if (dtype == TJ_DTYPE_I16 || dtype == TJ_DTYPE_U16)
            ((uint16_t*)out)[i] = (uint16_t)v;  // the low 16 bits
          else
            ((uint8_t*)out)[i] = (uint8_t)v;
        }
      }
      break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64:
      have = t->n_uint64_data;
      if ((int64_t)have == n) {
        for (int64_t i = 0; i < n; ++i) {
          if (dtype == TJ_DTYPE_U32)
            ((uint32_t*)out)[i] = (uint32_t)t->uint64_data[i];
          else
            ((uint64_t*)out)[i] = t->uint64_data[i];
        }
      }
      break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
      // The 16 bits of each element in the low half of an int32_data entry.
      have = t->n_int32_data;
      if ((int64_t)have == n) {
        for (int64_t i = 0; i < n; ++i)
          ((uint16_t*)out)[i] = (uint16_t)t->int32_data[i];
      }
      break;
    default:
      break;
  }
  if ((int64_t)have != n)
    return tj_invalid("onnx: tensor %s: %zu elements stored for %lld", what,
                      have, (long long)n);
  return NULL;
}

// Reads |length| bytes at |offset| of external file |location| under the
// base directory into |out|.
static tj_status_t read_external(tj_onnx_importer_t* im, const char* location,
                                 int64_t offset, size_t length, void* out,
                                 const char* what) {
  if (!im->base_dir)
    return tj_invalid(
        "onnx: tensor %s: external data \"%s\" but no base directory (use "
        "tj_onnx_import_file or set options.base_dir)",
        what, location);
  if (!location[0] || location[0] == '/' || strstr(location, ".."))
    return tj_invalid(
        "onnx: tensor %s: external data location \"%s\" is not a relative "
        "path inside the base directory",
        what, location);
  char joined[PATH_MAX];
  int len = snprintf(joined, sizeof joined, "%s/%s", im->base_dir, location);
  if (len < 0 || (size_t)len >= sizeof joined)
    return tj_invalid("onnx: tensor %s: external data path too long", what);
  char real_base[PATH_MAX], real_file[PATH_MAX];
  if (!realpath(im->base_dir, real_base))
    return tj_invalid("onnx: base directory \"%s\": %s", im->base_dir,
                      strerror(errno));
  if (!realpath(joined, real_file))
    return tj_invalid("onnx: tensor %s: external data \"%s\": %s", what, joined,
                      strerror(errno));
  size_t blen = strlen(real_base);
  if (strncmp(real_file, real_base, blen) != 0 ||
      (real_file[blen] != '/' && strcmp(real_base, "/") != 0))
    return tj_invalid(
        "onnx: tensor %s: external data \"%s\" resolves outside the base "
        "directory \"%s\"",
        what, location, real_base);
  int fd = open(real_file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    return tj_invalid("onnx: tensor %s: cannot open \"%s\": %s", what,
                      real_file, strerror(errno));
  struct stat st;
  tj_status_t status = NULL;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    status = tj_invalid("onnx: tensor %s: \"%s\" is not a regular file", what,
                        real_file);
  } else if (offset < 0 || offset > st.st_size ||
             (uint64_t)(st.st_size - offset) < length) {
    status = tj_invalid(
        "onnx: tensor %s: \"%s\" has %lld bytes; %zu wanted at offset %lld",
        what, real_file, (long long)st.st_size, length, (long long)offset);
  } else {
    size_t done = 0;
    while (done < length) {
      ssize_t got = pread(fd, (char*)out + done, length - done,
                          (off_t)(offset + (int64_t)done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        status = tj_invalid("onnx: tensor %s: reading \"%s\" failed", what,
                            real_file);
        break;
      }
      done += (size_t)got;
    }
  }
  close(fd);
  return status;
}

static tj_status_t external_data(tj_onnx_importer_t* im,
                                 const Onnx__TensorProto* t, size_t bytes,
                                 void* out, const char* what) {
  const char* location = NULL;
  int64_t offset = 0, length = -1;
  for (size_t i = 0; i < t->n_external_data; ++i) {
    const Onnx__StringStringEntryProto* e = t->external_data[i];
    if (!e->key || !e->value) continue;
    char* end = NULL;
    if (strcmp(e->key, "location") == 0) {
      location = e->value;
    } else if (strcmp(e->key, "offset") == 0) {
      errno = 0;
      offset = strtoll(e->value, &end, 10);
      if (errno || *end || offset < 0)
        return tj_invalid("onnx: tensor %s: bad external offset \"%s\"", what,
                          e->value);
    } else if (strcmp(e->key, "length") == 0) {
      errno = 0;
      length = strtoll(e->value, &end, 10);
      if (errno || *end || length < 0)
        return tj_invalid("onnx: tensor %s: bad external length \"%s\"", what,
                          e->value);
    }
  }
  if (!location)
    return tj_invalid("onnx: tensor %s: external data without a location",
                      what);
  if (length >= 0 && (uint64_t)length != bytes)
    return tj_invalid(
        "onnx: tensor %s: external length %lld is not its byte size %zu", what,
        (long long)length, bytes);
  return read_external(im, location, offset, bytes, out, what);
}

// A tensor of a packed type (packed_bits): its ceil(n * bits / 8) bytes
// from raw_data, an external file or int32_data (a byte per entry),
// unpacked to one element per byte.
static tj_status_t packed_value(tj_onnx_importer_t* im,
                                const Onnx__TensorProto* t, const char* what,
                                int64_t n, int bits, tj_onnx_val_t* out) {
  const size_t stored = (size_t)((n * bits + 7) / 8);
  const uint8_t* packed = NULL;
  uint8_t* buf = NULL;
  if (t->has_data_location &&
      t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
    buf = tj_arena_alloc(&im->arena, stored);
    if (!buf) return tj_status_oom();
    TJ_RETURN_IF_ERROR(external_data(im, t, stored, buf, what));
    packed = buf;
  } else if (t->has_raw_data) {
    if (t->raw_data.len != stored)
      return tj_invalid("onnx: tensor %s: raw_data has %zu bytes, not %zu",
                        what, t->raw_data.len, stored);
    packed = t->raw_data.data;
  } else {
    size_t have = t->n_float_data + t->n_double_data + t->n_int64_data +
                  t->n_int32_data + t->n_uint64_data;
    if (have != stored || t->n_int32_data != stored)
      return tj_invalid(
          "onnx: tensor %s: %zu packed bytes stored for %lld elements of %d "
          "bits",
          what, have, (long long)n, bits);
    buf = tj_arena_alloc(&im->arena, stored);
    if (!buf) return tj_status_oom();
    for (size_t i = 0; i < stored; ++i) buf[i] = (uint8_t)t->int32_data[i];
    packed = buf;
  }
  uint8_t* data = tj_arena_alloc(&im->arena, (size_t)n);
  if (!data) return tj_status_oom();
  unpack_elements(packed, n, bits, out->dtype, data);
  out->data = data;
  return NULL;
}

tj_status_t tj_onnx_tensor_value(tj_onnx_importer_t* im,
                                 const Onnx__TensorProto* t, const char* what,
                                 tj_onnx_val_t* out) {
  memset(out, 0, sizeof *out);
  if (!tj_onnx_dtype(t->data_type, &out->dtype))
    return tj_unsupported("onnx: tensor %s: dtype %s is not supported", what,
                          tj_onnx_type_name(t->data_type));
  if (t->n_dims > TJ_MAX_RANK)
    return tj_unsupported("onnx: tensor %s: rank %zu is above %d", what,
                          t->n_dims, TJ_MAX_RANK);
  out->rank = (int32_t)t->n_dims;
  for (size_t i = 0; i < t->n_dims; ++i) out->dims[i] = t->dims[i];
  int64_t n = numel_of(out->rank, out->dims);
  size_t esize = tj_dtype_size(out->dtype);
  if (n < 0 || (uint64_t)n > ((uint64_t)1 << 48) / esize)
    return tj_invalid("onnx: tensor %s: bad dims", what);
  size_t bytes = (size_t)n * esize;
  if (t->segment)
    return tj_unsupported("onnx: tensor %s: segmented tensors", what);
  const int bits = packed_bits(t->data_type);
  if (bits) return packed_value(im, t, what, n, bits, out);
  if (t->has_data_location &&
      t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
    void* buf = tj_arena_alloc(&im->arena, bytes);
    if (!buf) return tj_status_oom();
    TJ_RETURN_IF_ERROR(external_data(im, t, bytes, buf, what));
    out->data = buf;
    return NULL;
  }
  if (t->has_raw_data) {
    if (t->raw_data.len != bytes)
      return tj_invalid("onnx: tensor %s: raw_data has %zu bytes, not %zu",
                        what, t->raw_data.len, bytes);
    if (out->dtype == TJ_DTYPE_BOOL) {
      uint8_t* buf = tj_arena_alloc(&im->arena, bytes);
      if (!buf) return tj_status_oom();
      for (size_t i = 0; i < bytes; ++i) buf[i] = t->raw_data.data[i] != 0;
      out->data = buf;
    } else if (bytes == 0) {
      out->data = tj_arena_alloc(&im->arena, 0);  // known, and empty
      if (!out->data) return tj_status_oom();
    } else if (((uintptr_t)t->raw_data.data & 15) == 0) {
      out->data = t->raw_data.data;  // borrowed from the message
    } else {
      out->data = tj_arena_memdup(&im->arena, t->raw_data.data, bytes);
      if (!out->data) return tj_status_oom();
    }
    return NULL;
  }
  // The typed field's length first: |n| may be a lie.
  size_t stored = t->n_float_data + t->n_double_data + t->n_int64_data +
                  t->n_int32_data + t->n_uint64_data;
  if (stored != (size_t)n)
    return tj_invalid("onnx: tensor %s: %zu elements stored for %lld", what,
                      stored, (long long)n);
  void* buf = tj_arena_alloc(&im->arena, bytes);
  if (!buf) return tj_status_oom();
  TJ_RETURN_IF_ERROR(typed_field(t, out->dtype, n, buf, what));
  out->data = buf;
  return NULL;
}

//===--- graph inputs and names ---===//

// |name| made a C identifier, unique among |used| (arena strings).
static char* identifier(tj_onnx_importer_t* im, const char* name,
                        const char* fallback, char** used, int32_t num_used) {
  if (!name || !name[0]) name = fallback;
  size_t len = strlen(name);
  char* s = tj_arena_alloc(&im->arena, len + 16);
  if (!s) return NULL;
  size_t o = 0;
  if (!((name[0] >= 'a' && name[0] <= 'z') ||
        (name[0] >= 'A' && name[0] <= 'Z') || name[0] == '_'))
    s[o++] = '_';
  for (size_t i = 0; i < len; ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_';
    s[o++] = ok ? c : '_';
  }
  s[o] = 0;
  for (int32_t suffix = 2;; ++suffix) {
    bool clash = false;
    for (int32_t i = 0; i < num_used && !clash; ++i)
      clash = strcmp(used[i], s) == 0;
    if (!clash) return s;
    snprintf(s + o, 16, "_%d", (int)suffix);
  }
}

static tj_status_t tensor_type(const Onnx__ValueInfoProto* info,
                               const char* what,
                               const Onnx__TypeProto__Tensor** out) {
  const Onnx__TypeProto* type = info->type;
  if (!type)
    return tj_invalid("onnx: %s \"%s\" has no type", what,
                      info->name ? info->name : "");
  if (type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ||
      !type->tensor_type)
    return tj_unsupported(
        "onnx: %s \"%s\" is not a tensor (sequence, map, optional and sparse "
        "values are not supported)",
        what, info->name ? info->name : "");
  *out = type->tensor_type;
  return NULL;
}

static tj_status_t add_input(tj_onnx_importer_t* im,
                             const Onnx__ValueInfoProto* info, char** used,
                             int32_t num_used) {
  const Onnx__TypeProto__Tensor* tt = NULL;
  TJ_RETURN_IF_ERROR(tensor_type(info, "input", &tt));
  tj_onnx_val_t val;
  memset(&val, 0, sizeof val);
  if (!tt->has_elem_type || !tj_onnx_dtype(tt->elem_type, &val.dtype))
    return tj_unsupported(
        "onnx: input \"%s\": dtype %s is not supported", info->name,
        tj_onnx_type_name(tt->has_elem_type ? tt->elem_type : 0));
  if (!tt->shape)
    return tj_unsupported("onnx: input \"%s\" has no shape (rank unknown)",
                          info->name);
  if (tt->shape->n_dim > TJ_MAX_RANK)
    return tj_unsupported("onnx: input \"%s\": rank %zu is above %d",
                          info->name, tt->shape->n_dim, TJ_MAX_RANK);
  char* name = identifier(im, info->name, "input", used, num_used);
  if (!name) return tj_status_oom();
  used[num_used] = name;
  val.rank = (int32_t)tt->shape->n_dim;
  for (int32_t d = 0; d < val.rank; ++d) {
    const Onnx__TensorShapeProto__Dimension* dim = tt->shape->dim[d];
    if (dim->value_case ==
        ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (dim->dim_value < 0)
        return tj_invalid("onnx: input \"%s\": dim %d is %lld", info->name,
                          (int)d, (long long)dim->dim_value);
      val.dims[d] = dim->dim_value;
      continue;
    }
    const char* param = NULL;
    char fallback[64];
    if (dim->value_case ==
            ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
        dim->dim_param && dim->dim_param[0]) {
      param = dim->dim_param;
    } else {
      snprintf(fallback, sizeof fallback, "%.40s_%d", name, (int)d);
      param = fallback;
    }
    bool fixed = false;
    for (int32_t o = 0; o < im->num_overrides; ++o) {
      const tj_onnx_symbol_override_t* ov = &im->overrides[o];
      if (ov->name && strcmp(ov->name, param) == 0) {
        if (ov->value < 0)
          return tj_invalid("onnx: symbol override %s = %lld is negative",
                            ov->name, (long long)ov->value);
        val.dims[d] = ov->value;
        fixed = true;
        break;
      }
    }
    if (fixed) continue;
    char* sym = identifier(im, param, "dim", NULL, 0);
    if (!sym) return tj_status_oom();
    val.dims[d] = tj_graph_symbol(im->graph, sym);
  }
  val.value = tj_graph_input(im->graph, val.dtype, val.rank, val.dims, name);
  if (tj_value_is_none(val.value))
    return tj_status_annotate(tj_graph_status(im->graph), "onnx: input \"%s\"",
                              info->name);
  return tj_onnx_define(im, info->name, &val);
}

// The caller's value for graph input |info| (options.input_values), made a
// constant of the arena: defines |info|->name, so the input loop takes it
// as an initializer. |*given| is false when the caller gave none.
static tj_status_t add_input_value(tj_onnx_importer_t* im,
                                   const Onnx__ValueInfoProto* info,
                                   bool* given) {
  *given = false;
  const tj_onnx_input_value_t* iv = NULL;
  for (int32_t k = 0; k < im->num_input_values && !iv; ++k) {
    if (im->input_values[k].name &&
        strcmp(im->input_values[k].name, info->name) == 0)
      iv = &im->input_values[k];
  }
  if (!iv) return NULL;
  *given = true;
  const Onnx__TypeProto__Tensor* tt = NULL;
  TJ_RETURN_IF_ERROR(tensor_type(info, "input", &tt));
  const tj_tensor_t* t = &iv->value;
  tj_onnx_val_t val;
  memset(&val, 0, sizeof val);
  if (!tt->has_elem_type || !tj_onnx_dtype(tt->elem_type, &val.dtype))
    return tj_unsupported(
        "onnx: input \"%s\": dtype %s is not supported", info->name,
        tj_onnx_type_name(tt->has_elem_type ? tt->elem_type : 0));
  if (t->device_type != TJ_DEVICE_CPU || t->strides || t->byte_offset)
    return tj_invalid(
        "onnx: input value \"%s\" must be a dense CPU tensor (no strides, "
        "no byte_offset)",
        info->name);
  if (t->dtype != val.dtype)
    return tj_invalid("onnx: input value \"%s\" is %s; the input is %s",
                      info->name, tj_dtype_name(t->dtype),
                      tj_dtype_name(val.dtype));
  if (t->rank < 0 || t->rank > TJ_MAX_RANK || (t->rank && !t->shape) ||
      (tt->shape && (size_t)t->rank != tt->shape->n_dim))
    return tj_invalid("onnx: input value \"%s\" has rank %d; the input %s",
                      info->name, (int)t->rank,
                      tt->shape ? "has another" : "has no shape");
  val.rank = t->rank;
  for (int32_t d = 0; d < val.rank; ++d) {
    const Onnx__TensorShapeProto__Dimension* dim = tt->shape->dim[d];
    if (t->shape[d] < 0 ||
        (dim->value_case ==
             ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
         dim->dim_value != t->shape[d]))
      return tj_invalid("onnx: input value \"%s\": dim %d is %lld", info->name,
                        (int)d, (long long)t->shape[d]);
    val.dims[d] = t->shape[d];
  }
  int64_t n = numel_of(val.rank, val.dims);
  size_t esize = tj_dtype_size(val.dtype);
  if (n < 0 || (uint64_t)n > ((uint64_t)1 << 48) / esize)
    return tj_invalid("onnx: input value \"%s\": bad dims", info->name);
  if (n && !t->data)
    return tj_invalid("onnx: input value \"%s\": data is NULL", info->name);
  size_t bytes = (size_t)n * esize;
  val.data = bytes ? tj_arena_memdup(&im->arena, t->data, bytes)
                   : tj_arena_alloc(&im->arena, 0);
  if (!val.data) return tj_status_oom();
  return tj_onnx_define(im, info->name, &val);
}

//===--- the node walk ---===//

static bool is_default_domain(const char* domain) {
  return !domain || !domain[0] || strcmp(domain, "ai.onnx") == 0;
}

static const Onnx__FunctionProto* find_function(tj_onnx_importer_t* im,
                                                const Onnx__NodeProto* node) {
  for (size_t i = 0; i < im->model->n_functions; ++i) {
    const Onnx__FunctionProto* f = im->model->functions[i];
    if (!f->name || !node->op_type || strcmp(f->name, node->op_type) != 0)
      continue;
    const char* fd = f->domain ? f->domain : "";
    const char* nd = node->domain ? node->domain : "";
    if (strcmp(fd, nd) == 0) return f;
  }
  return NULL;
}

static int64_t scope_opset(Onnx__OperatorSetIdProto* const* imports, size_t n,
                           int64_t fallback) {
  for (size_t i = 0; i < n; ++i) {
    if (is_default_domain(imports[i]->domain))
      return imports[i]->has_version ? imports[i]->version : 1;
  }
  return fallback;
}

// A name of the function body's scope made unique in the caller's.
static const char* scoped(tj_onnx_importer_t* im, uint32_t call,
                          const Onnx__FunctionProto* f, const char* name,
                          const Onnx__NodeProto* caller) {
  if (!name[0]) return name;
  for (size_t i = 0; i < f->n_input; ++i) {
    if (strcmp(f->input[i], name) == 0)
      return i < caller->n_input ? caller->input[i] : "";
  }
  for (size_t i = 0; i < f->n_output; ++i) {
    if (strcmp(f->output[i], name) == 0)
      return i < caller->n_output ? caller->output[i] : "";
  }
  size_t len = strlen(name) + 32;
  char* s = tj_arena_alloc(&im->arena, len);
  if (s) snprintf(s, len, "%s#f%u", name, (unsigned)call);
  return s;
}

static tj_status_t expand_function(tj_onnx_importer_t* im,
                                   const Onnx__FunctionProto* f,
                                   const tj_onnx_node_t* call) {
  const Onnx__NodeProto* caller = call->proto;
  if (im->function_depth >= 16)
    return tj_onnx_node_error(im, call, TJ_STATUS_INVALID_ARGUMENT,
                              "functions nest deeper than 16 (recursion?)");
  if (caller->n_input > f->n_input || caller->n_output > f->n_output)
    return tj_onnx_node_error(
        im, call, TJ_STATUS_INVALID_ARGUMENT,
        "%zu inputs and %zu outputs for function %s of %zu and %zu",
        caller->n_input, caller->n_output, f->name, f->n_input, f->n_output);
  uint32_t id = ++im->function_counter;
  Onnx__NodeProto** body =
      tj_arena_alloc(&im->arena, (f->n_node + 1) * sizeof(*body));
  if (!body) return tj_status_oom();
  for (size_t k = 0; k < f->n_node; ++k) {
    const Onnx__NodeProto* src = f->node[k];
    Onnx__NodeProto* dst = tj_arena_memdup(&im->arena, src, sizeof *src);
    char** ins = tj_arena_alloc(&im->arena, (src->n_input + 1) * sizeof(char*));
    char** outs =
        tj_arena_alloc(&im->arena, (src->n_output + 1) * sizeof(char*));
    Onnx__AttributeProto** attrs = tj_arena_alloc(
        &im->arena, (src->n_attribute + 1) * sizeof(Onnx__AttributeProto*));
    if (!dst || !ins || !outs || !attrs) return tj_status_oom();
    for (size_t i = 0; i < src->n_input; ++i) {
      ins[i] = (char*)scoped(im, id, f, src->input[i], caller);
      if (!ins[i]) return tj_status_oom();
    }
    for (size_t i = 0; i < src->n_output; ++i) {
      outs[i] = (char*)scoped(im, id, f, src->output[i], caller);
      if (!outs[i]) return tj_status_oom();
    }
    // Attribute references take the caller's attribute, or drop out.
    size_t na = 0;
    for (size_t i = 0; i < src->n_attribute; ++i) {
      Onnx__AttributeProto* a = src->attribute[i];
      if (a->ref_attr_name && a->ref_attr_name[0]) {
        Onnx__AttributeProto* found = NULL;
        for (size_t j = 0; j < caller->n_attribute; ++j) {
          if (caller->attribute[j]->name &&
              strcmp(caller->attribute[j]->name, a->ref_attr_name) == 0)
            found = caller->attribute[j];
        }
        if (!found) continue;
        Onnx__AttributeProto* copy =
            tj_arena_memdup(&im->arena, found, sizeof *found);
        if (!copy) return tj_status_oom();
        copy->name = a->name;
        attrs[na++] = copy;
      } else {
        attrs[na++] = a;
      }
    }
    dst->input = ins;
    dst->output = outs;
    dst->attribute = attrs;
    dst->n_attribute = na;
    body[k] = dst;
  }
  int64_t saved = im->opset;
  im->opset = scope_opset(f->opset_import, f->n_opset_import, im->opset);
  im->function_depth++;
  int32_t counter = 0;
  tj_status_t status = tj_onnx_walk_nodes(im, body, f->n_node, &counter);
  im->function_depth--;
  im->opset = saved;
  if (status)
    status = tj_status_annotate(status, "in function %s called by node %d",
                                f->name, (int)call->index);
  return status;
}

// Whether known value |v| holds a symbolic dim: an int64 entry below -1.
// A move of a shape vector with symbolic dims keeps them only where it
// keeps such an entry: the head dim that nn.MultiheadAttention slices off
// q's shape [B * heads, T, 64] (then Cast to float for its scale), or the
// height Gather takes from swin_t's [B, 56, 56, 96] (then Mod for its
// padding), is a plain constant, which every op takes.
static bool has_symbolic_entry(const tj_onnx_val_t* v) {
  if (v->dtype != TJ_DTYPE_I64) return false;
  const int64_t n = numel_of(v->rank, v->dims);
  const int64_t* data = v->data;
  for (int64_t k = 0; k < n; ++k) {
    if (data[k] <= -2) return true;
  }
  return false;
}

// Folds |node| (every input known) on the reference interpreter: converts
// it in a scratch graph and runs it. *|out_folded| false when an output is
// too large to keep as a known value (then it is converted normally).
static tj_status_t fold_node(tj_onnx_importer_t* im, tj_onnx_node_t* node,
                             bool* out_folded) {
  *out_folded = false;
  const Onnx__NodeProto* p = node->proto;
  tj_graph_t* scratch = NULL;
  TJ_RETURN_IF_ERROR(tj_graph_create(im->context, "fold", &scratch));
  im->graph = scratch;
  tj_status_t status = tj_onnx_convert_node(im, node);
  im->graph = im->main_graph;
  bool symbolic = false;
  for (int32_t i = 0; i < node->num_inputs; ++i)
    symbolic |= node->inputs[i] && node->inputs[i]->symbolic;
  tj_onnx_val_t* outs[16] = {0};
  int32_t num_outs = 0;
  bool all_known = true, small = true;
  for (size_t k = 0; !status && k < p->n_output && k < 16; ++k) {
    tj_onnx_val_t* v =
        p->output[k][0] ? tj_onnx_lookup(im, p->output[k]) : NULL;
    if (!v) continue;
    outs[num_outs++] = v;
    if (v->data) continue;
    all_known = false;
    if (numel_of(v->rank, v->dims) > TJ_ONNX_FOLD_LIMIT ||
        tj_value_is_none(v->value))
      small = false;
    if (small) {
      // A name per output: a node may have several (TopK's values and
      // indices), and a graph's output names are unique.
      char name[16];
      snprintf(name, sizeof name, "y%d", (int)k);
      tj_graph_output(scratch, v->value, name);
    }
  }
  if (!status && all_known) {
    *out_folded = true;
  } else if (!status && small) {
    status = tj_graph_finalize(scratch);
    tj_tensor_t tensors[16];
    // The shapes to run with: a data-dependent dim (NonZero, Unique) at
    // its bound, which the run replaces with the actual size.
    int64_t shapes[16][TJ_MAX_RANK];
    int32_t n = 0;
    for (int32_t k = 0; !status && k < num_outs; ++k) {
      tj_onnx_val_t* v = outs[k];
      if (v->data) continue;
      int32_t rank = 0;
      status = tj_graph_output_shape(scratch, NULL, 0, n, &rank, shapes[n]);
      if (status) break;
      int64_t numel = numel_of(rank, shapes[n]);
      if (numel < 0 || numel > TJ_ONNX_FOLD_LIMIT) {
        status = tj_onnx_node_error(im, node, TJ_STATUS_UNSUPPORTED,
                                    "folding an output of %lld elements",
                                    (long long)numel);
        break;
      }
      size_t bytes = (size_t)numel * tj_dtype_size(v->dtype);
      void* buf = tj_arena_alloc(&im->arena, bytes);
      if (!buf) {
        status = tj_status_oom();
        break;
      }
      tensors[n] = tj_tensor_make(buf, v->dtype, rank, shapes[n]);
      ++n;
    }
    int64_t actual[16 * TJ_MAX_RANK];
    if (!status)
      status = tj_reference_run_shaped(scratch, NULL, 0, tensors, n, actual);
    if (!status) {
      n = 0;
      for (int32_t k = 0; k < num_outs; ++k) {
        tj_onnx_val_t* v = outs[k];
        if (v->data) continue;
        memcpy(v->dims, actual + (size_t)n * TJ_MAX_RANK,
               sizeof(int64_t) * (size_t)v->rank);
        v->data = tensors[n++].data;
        v->value = tj_value_none();
        v->symbolic = symbolic && has_symbolic_entry(v);
      }
      *out_folded = true;
    }
    if (status)
      status =
          tj_status_annotate(status, "onnx: folding node %d", (int)node->index);
  }
  tj_graph_destroy(scratch);
  if (!*out_folded && !status) {
    // Too large: forget the scratch graph's values.
    for (int32_t k = 0; k < num_outs; ++k) {
      if (!outs[k]->data) outs[k]->value = tj_value_none();
    }
  }
  return status;
}

// Ops that only move int64 elements: they may run on shape vectors with
// symbolic dims in them.
static bool moves_only(const char* op) {
  static const char* const kOps[] = {
      "Gather",  "Concat",  "Unsqueeze", "Squeeze", "Slice",    "Identity",
      "Reshape", "Flatten", "Cast",      "Expand",  "Transpose"};
  for (size_t i = 0; i < TJ_ARRAY_SIZE(kOps); ++i)
    if (strcmp(op, kOps[i]) == 0) return true;
  return false;
}

tj_status_t tj_onnx_walk_nodes(tj_onnx_importer_t* im,
                               Onnx__NodeProto* const* nodes, size_t n,
                               int32_t* counter) {
  for (size_t k = 0; k < n; ++k) {
    const Onnx__NodeProto* p = nodes[k];
    tj_onnx_node_t node;
    memset(&node, 0, sizeof node);
    node.proto = p;
    node.index = (*counter)++;
    if (!p->op_type)
      return tj_onnx_node_error(im, &node, TJ_STATUS_INVALID_ARGUMENT,
                                "no op_type");
    if (p->n_input > TJ_ARRAY_SIZE(node.inputs) || p->n_output > 16)
      return tj_onnx_node_error(im, &node, TJ_STATUS_UNSUPPORTED,
                                "%zu inputs and %zu outputs", p->n_input,
                                p->n_output);
    node.num_inputs = (int32_t)p->n_input;
    // |param_symbolic|: a symbolic dim among a move's parameters (Slice's
    // bounds, Reshape's shape), which gives the output symbolic dims of its
    // own: converted, never folded.
    bool all_known = p->n_input > 0, symbolic = false, param_symbolic = false;
    const bool all_data = strcmp(p->op_type, "Concat") == 0;
    for (size_t i = 0; i < p->n_input; ++i) {
      if (!p->input[i][0]) continue;  // an absent optional input
      node.inputs[i] = tj_onnx_lookup(im, p->input[i]);
      if (!node.inputs[i])
        return tj_onnx_node_error(im, &node, TJ_STATUS_INVALID_ARGUMENT,
                                  "input %zu \"%s\" is not defined before it",
                                  i, p->input[i]);
      all_known &= node.inputs[i]->data != NULL;
      symbolic |= node.inputs[i]->symbolic;
      param_symbolic |= i > 0 && !all_data && node.inputs[i]->symbolic;
    }
    if (p->n_output == 0)
      return tj_onnx_node_error(im, &node, TJ_STATUS_INVALID_ARGUMENT,
                                "no outputs");
    for (size_t i = 0; i < p->n_output; ++i) {
      if (!p->output[i])
        return tj_onnx_node_error(im, &node, TJ_STATUS_INVALID_ARGUMENT,
                                  "output %zu has no name", i);
    }
    if (tj_onnx_is_training(p->domain)) {
      TJ_RETURN_IF_ERROR(tj_onnx_convert_training(im, &node));
      continue;
    }
    // A model may import only other domains (a training step imports only
    // ai.onnx.preview.training): then a node of the default domain has no
    // opset to be read in.
    if (is_default_domain(p->domain) && im->opset == 0 && !find_function(im, p))
      return tj_onnx_node_error(
          im, &node, TJ_STATUS_INVALID_ARGUMENT,
          "the model imports no opset of the default domain");
    // quant2 (issue 17): com.microsoft's MatMulNBits has a converter.
    if (!is_default_domain(p->domain) &&
        !(strcmp(p->domain, "com.microsoft") == 0 &&
          strcmp(p->op_type, "MatMulNBits") == 0)) {
      const Onnx__FunctionProto* f = find_function(im, p);
      if (!f)
        return tj_onnx_node_error(im, &node, TJ_STATUS_UNSUPPORTED,
                                  "domain \"%s\" is not supported", p->domain);
      TJ_RETURN_IF_ERROR(expand_function(im, f, &node));
      continue;
    }
    if (!tj_onnx_op_known(p->op_type)) {
      const Onnx__FunctionProto* f = find_function(im, p);
      if (f) {
        TJ_RETURN_IF_ERROR(expand_function(im, f, &node));
        continue;
      }
    }
    bool folded = false;
    if (all_known &&
        (!symbolic || (moves_only(p->op_type) && !param_symbolic)) &&
        !tj_onnx_is_control(p->op_type) && !tj_onnx_is_sequence_op(p->op_type))
      TJ_RETURN_IF_ERROR(fold_node(im, &node, &folded));
    if (!folded) TJ_RETURN_IF_ERROR(tj_onnx_convert_node(im, &node));
  }
  return NULL;
}

//===--- the entry points ---===//

void tj_onnx_import_options_initialize(tj_onnx_import_options_t* options) {
  if (!options) return;
  memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
}

// The caller's |options| (NULL: the defaults) into |*out|: the whole struct,
// or the first release's shorter one with the later fields at their
// defaults.
static tj_status_t read_options(const char* fn,
                                const tj_onnx_import_options_t* options,
                                tj_onnx_import_options_t* out) {
  tj_onnx_import_options_initialize(out);
  if (!options) return NULL;
  // The first release's struct ended after num_symbol_overrides; its
  // sizeof, padding included, is where input_values starts.
  const size_t first_release = offsetof(tj_onnx_import_options_t, input_values);
  if (options->struct_size == sizeof *options) {
    *out = *options;
  } else if (options->struct_size == first_release) {
    memcpy(out, options, first_release);
  } else {
    return tj_invalid("%s: options.struct_size %zu is not %zu", fn,
                      options->struct_size, sizeof *options);
  }
  out->struct_size = sizeof *out;
  return NULL;
}

static tj_status_t import_model(tj_onnx_importer_t* im,
                                const Onnx__ModelProto* model) {
  const Onnx__GraphProto* g = model->graph;
  if (!g) return tj_invalid("onnx: the model has no graph");
  // No opset of the default domain: im->opset 0, and a node of that domain
  // is an error (tj_onnx_walk_nodes).
  im->opset = scope_opset(model->opset_import, model->n_opset_import, 0);
  if (im->opset == 0 && model->n_opset_import == 0)
    return tj_invalid("onnx: the model imports no opset of the default domain");
  if (im->opset != 0 &&
      (im->opset < TJ_ONNX_OLDEST_OPSET || im->opset > TJ_ONNX_MAX_OPSET))
    return tj_unsupported("onnx: opset %lld; the importer maps opsets %d to %d",
                          (long long)im->opset, TJ_ONNX_MIN_OPSET,
                          TJ_ONNX_MAX_OPSET);
  // Initializers first: a graph input that is one is a constant.
  for (size_t i = 0; i < g->n_initializer; ++i) {
    const Onnx__TensorProto* t = g->initializer[i];
    if (!t->name || !t->name[0])
      return tj_invalid("onnx: initializer %zu has no name", i);
    tj_onnx_val_t val;
    TJ_RETURN_IF_ERROR(tj_onnx_tensor_value(im, t, t->name, &val));
    TJ_RETURN_IF_ERROR(tj_onnx_define(im, t->name, &val));
  }
  if (g->n_sparse_initializer)
    return tj_unsupported("onnx: sparse initializers are not supported");
  char** used = tj_arena_alloc(&im->arena,
                               (g->n_input + g->n_output + 1) * sizeof(char*));
  if (!used) return tj_status_oom();
  int32_t num_used = 0;
  for (size_t i = 0; i < g->n_input; ++i) {
    const Onnx__ValueInfoProto* info = g->input[i];
    if (!info->name || !info->name[0])
      return tj_invalid("onnx: graph input %zu has no name", i);
    if (tj_onnx_lookup(im, info->name)) continue;  // an initializer
    bool given = false;
    TJ_RETURN_IF_ERROR(add_input_value(im, info, &given));
    if (given) continue;
    TJ_RETURN_IF_ERROR(add_input(im, info, used, num_used));
    num_used++;
  }
  // Every input value names a graph input that took it.
  for (int32_t k = 0; k < im->num_input_values; ++k) {
    const char* want = im->input_values[k].name;
    bool found = false;
    for (size_t i = 0; want && i < g->n_input && !found; ++i) {
      found = g->input[i]->name && strcmp(g->input[i]->name, want) == 0;
    }
    bool initializer = false;
    for (size_t i = 0; want && i < g->n_initializer && !initializer; ++i) {
      initializer = strcmp(g->initializer[i]->name, want) == 0;
    }
    for (int32_t j = 0; j < k && found; ++j) {
      found = !im->input_values[j].name ||
              strcmp(im->input_values[j].name, want) != 0;
    }
    if (!found || initializer)
      return tj_invalid(
          "onnx: input_values[%d] \"%s\" %s", (int)k, want ? want : "(null)",
          initializer ? "is an initializer"
          : !want     ? "has no name"
                      : "names no graph input, or one named before it");
  }
  int32_t counter = 0;
  TJ_RETURN_IF_ERROR(tj_onnx_walk_nodes(im, g->node, g->n_node, &counter));
  if (g->n_output == 0) return tj_invalid("onnx: the graph has no output");
  // A sequence output is one graph output per element, NAME_0, NAME_1, ...
  size_t num_names = 0;
  for (size_t i = 0; i < g->n_output; ++i) {
    tj_onnx_val_t* v =
        g->output[i]->name ? tj_onnx_lookup(im, g->output[i]->name) : NULL;
    num_names += v && v->is_sequence ? (size_t)v->seq_length : 1;
  }
  used = tj_arena_alloc(&im->arena, (num_names + 1) * sizeof(char*));
  if (!used) return tj_status_oom();
  num_used = 0;
  for (size_t i = 0; i < g->n_output; ++i) {
    const Onnx__ValueInfoProto* info = g->output[i];
    tj_onnx_val_t* v = info->name ? tj_onnx_lookup(im, info->name) : NULL;
    if (!v)
      return tj_invalid("onnx: graph output \"%s\" is not defined",
                        info->name ? info->name : "");
    if (v->symbolic)
      return tj_unsupported(
          "onnx: graph output \"%s\" is a shape with symbolic dims",
          info->name);
    if (v->none)
      return tj_unsupported(
          "onnx: graph output \"%s\" is an empty optional (a graph output "
          "is a tensor)",
          info->name);
    if (v->is_sequence) {
      for (int32_t k = 0; k < v->seq_length; ++k) {
        size_t len = strlen(info->name) + 16;
        char* elem = tj_arena_alloc(&im->arena, len);
        if (!elem) return tj_status_oom();
        snprintf(elem, len, "%s_%d", info->name, (int)k);
        char* name = identifier(im, elem, "output", used, num_used);
        if (!name) return tj_status_oom();
        used[num_used++] = name;
        tj_graph_output(im->graph, tj_onnx_value(im, v->seq[k]), name);
      }
      continue;
    }
    char* name = identifier(im, info->name, "output", used, num_used);
    if (!name) return tj_status_oom();
    used[num_used++] = name;
    tj_value_t value = tj_onnx_value(im, v);
    tj_graph_output(im->graph, value, name);
  }
  return tj_status_annotate(tj_graph_finalize(im->graph), "onnx");
}

tj_status_t tj_onnx_import(tj_context_t* context, const void* bytes,
                           size_t size, const tj_onnx_import_options_t* options,
                           tj_graph_t** out_graph) {
  if (!out_graph) return tj_invalid("tj_onnx_import: out_graph is NULL");
  *out_graph = NULL;
  if (!context) return tj_invalid("tj_onnx_import: context is NULL");
  if (!bytes && size) return tj_invalid("tj_onnx_import: bytes is NULL");
  tj_onnx_import_options_t local;
  TJ_RETURN_IF_ERROR(read_options("tj_onnx_import", options, &local));
  options = &local;
  if (options->num_symbol_overrides < 0)
    return tj_invalid("tj_onnx_import: num_symbol_overrides is negative");
  if (options->num_symbol_overrides && !options->symbol_overrides)
    return tj_invalid("tj_onnx_import: symbol_overrides is NULL");
  if (options->num_input_values < 0)
    return tj_invalid("tj_onnx_import: num_input_values is negative");
  if (options->num_input_values && !options->input_values)
    return tj_invalid("tj_onnx_import: input_values is NULL");
  tj_onnx_importer_t im;
  memset(&im, 0, sizeof im);
  im.context = context;
  im.allocator = tj_context_allocator(context);
  im.base_dir = options->base_dir;
  im.overrides = options->symbol_overrides;
  im.num_overrides = options->num_symbol_overrides;
  im.input_values = options->input_values;
  im.num_input_values = options->num_input_values;
  pb_state_t pbs = {im.allocator, false};
  ProtobufCAllocator pba = {pb_alloc, pb_free, &pbs};
  Onnx__ModelProto* model =
      onnx__model_proto__unpack(&pba, size, (const uint8_t*)bytes);
  if (!model && pbs.failed) return tj_status_oom();
  if (!model)
    return tj_invalid("onnx: the %zu bytes are not a ModelProto", size);
  im.model = model;
  tj_arena_initialize(&im.arena, im.allocator);
  const char* name = model->graph && model->graph->name && model->graph->name[0]
                         ? model->graph->name
                         : "main";
  tj_status_t status = NULL;
  char* gname = identifier(&im, name, "main", NULL, 0);
  if (!gname) status = tj_status_oom();
  if (!status) status = tj_graph_create(context, gname, &im.main_graph);
  im.graph = im.main_graph;
  if (!status) status = import_model(&im, model);
  tj_free(im.allocator, im.vals, im.val_capacity * sizeof(tj_onnx_val_t*));
  tj_free(im.allocator, im.index, im.index_capacity * sizeof(uint32_t));
  tj_free(im.allocator, im.undo, im.undo_capacity * sizeof(tj_onnx_undo_t));
  tj_arena_deinitialize(&im.arena);
  onnx__model_proto__free_unpacked(model, &pba);
  if (status) {
    tj_graph_destroy(im.main_graph);
    return status;
  }
  *out_graph = im.main_graph;
  return NULL;
}

tj_status_t tj_onnx_import_file(tj_context_t* context, const char* path,
                                const tj_onnx_import_options_t* options,
                                tj_graph_t** out_graph) {
  if (!out_graph) return tj_invalid("tj_onnx_import_file: out_graph is NULL");
  *out_graph = NULL;
  if (!context) return tj_invalid("tj_onnx_import_file: context is NULL");
  if (!path) return tj_invalid("tj_onnx_import_file: path is NULL");
  tj_onnx_import_options_t local;
  TJ_RETURN_IF_ERROR(read_options("tj_onnx_import_file", options, &local));
  tj_allocator_t a = tj_context_allocator(context);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return tj_invalid("onnx: cannot open \"%s\": %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0) {
    close(fd);
    return tj_invalid("onnx: \"%s\" is not a regular file", path);
  }
  size_t size = (size_t)st.st_size;
  uint8_t* bytes = tj_alloc(a, size ? size : 1);
  if (!bytes) {
    close(fd);
    return tj_status_oom();
  }
  size_t done = 0;
  while (done < size) {
    ssize_t got = read(fd, bytes + done, size - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += (size_t)got;
  }
  close(fd);
  if (done != size) {
    tj_free(a, bytes, size ? size : 1);
    return tj_invalid("onnx: reading \"%s\" failed", path);
  }
  char* dir = NULL;
  size_t dir_size = 0;
  if (!local.base_dir) {
    const char* slash = strrchr(path, '/');
    dir_size = slash ? (size_t)(slash - path) + 2 : 2;
    dir = tj_alloc(a, dir_size);
    if (!dir) {
      tj_free(a, bytes, size ? size : 1);
      return tj_status_oom();
    }
    if (slash) {
      memcpy(dir, path, (size_t)(slash - path));
      dir[slash - path] = 0;
      if (slash == path) strcpy(dir, "/");
    } else {
      strcpy(dir, ".");
    }
    local.base_dir = dir;
  }
  tj_status_t status = tj_onnx_import(context, bytes, size, &local, out_graph);
  tj_free(a, dir, dir_size);
  tj_free(a, bytes, size ? size : 1);
  if (status) status = tj_status_annotate(status, "%s", path);
  return status;
}

tj_status_t tj_onnx_tensor_parse(tj_context_t* context, const void* bytes,
                                 size_t size, tj_dtype_t* out_dtype,
                                 int32_t* out_rank, int64_t* out_dims,
                                 void** out_data, size_t* out_bytes) {
  *out_data = NULL;
  *out_bytes = 0;
  tj_onnx_importer_t im;
  memset(&im, 0, sizeof im);
  im.context = context;
  im.allocator = tj_context_allocator(context);
  pb_state_t pbs = {im.allocator, false};
  ProtobufCAllocator pba = {pb_alloc, pb_free, &pbs};
  Onnx__TensorProto* t =
      onnx__tensor_proto__unpack(&pba, size, (const uint8_t*)bytes);
  if (!t && pbs.failed) return tj_status_oom();
  if (!t) return tj_invalid("onnx: the %zu bytes are not a TensorProto", size);
  tj_arena_initialize(&im.arena, im.allocator);
  tj_onnx_val_t val;
  tj_status_t status =
      tj_onnx_tensor_value(&im, t, t->name ? t->name : "", &val);
  if (!status) {
    size_t n = (size_t)numel_of(val.rank, val.dims) * tj_dtype_size(val.dtype);
    void* copy = n ? tj_alloc(im.allocator, n) : NULL;
    if (n && !copy) {
      status = tj_status_oom();
    } else {
      if (n) memcpy(copy, val.data, n);
      *out_dtype = val.dtype;
      *out_rank = val.rank;
      memcpy(out_dims, val.dims, sizeof(int64_t) * (size_t)val.rank);
      *out_data = copy;
      *out_bytes = n;
    }
  }
  tj_arena_deinitialize(&im.arena);
  onnx__tensor_proto__free_unpacked(t, &pba);
  return status;
}

tj_status_t tj_onnx_tensor_name(tj_context_t* context, const void* bytes,
                                size_t size, char* name, size_t name_size) {
  if (!name || !name_size) return tj_invalid("onnx: no room for the name");
  name[0] = 0;
  pb_state_t pbs = {tj_context_allocator(context), false};
  ProtobufCAllocator pba = {pb_alloc, pb_free, &pbs};
  Onnx__TensorProto* t =
      onnx__tensor_proto__unpack(&pba, size, (const uint8_t*)bytes);
  if (!t && pbs.failed) return tj_status_oom();
  if (!t) return tj_invalid("onnx: the %zu bytes are not a TensorProto", size);
  snprintf(name, name_size, "%s", t->name ? t->name : "");
  onnx__tensor_proto__free_unpacked(t, &pba);
  return NULL;
}
