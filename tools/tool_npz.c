// numpy's .npy and .npz files for the tools (tool_npz.h).

#include "tools/tool_npz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/base.h"
#include "tools/tool_io.h"

static const struct {
  const char* descr;
  tj_dtype_t dtype;
} kDescr[] = {
    {"<f4", TJ_DTYPE_F32},  {"<f8", TJ_DTYPE_F64}, {"<f2", TJ_DTYPE_F16},
    {"|i1", TJ_DTYPE_I8},   {"<i4", TJ_DTYPE_I32}, {"<i8", TJ_DTYPE_I64},
    {"|b1", TJ_DTYPE_BOOL}, {"|u1", TJ_DTYPE_U8},  {"<i2", TJ_DTYPE_I16},
    {"<u2", TJ_DTYPE_U16},  {"<u4", TJ_DTYPE_U32}, {"<u8", TJ_DTYPE_U64}};
enum { kNumDescr = sizeof(kDescr) / sizeof(kDescr[0]) };

static size_t dtype_bytes(tj_dtype_t dtype) {
  switch (dtype) {
    case TJ_DTYPE_F64:
    case TJ_DTYPE_I64:
      return 8;
    case TJ_DTYPE_F32:
    case TJ_DTYPE_I32:
      return 4;
    case TJ_DTYPE_F16:
    case TJ_DTYPE_BF16:
      return 2;
    default:
      return 1;
  }
}

//===--- .npy ---===//

tj_status_t tj_tool_npy_parse(const char* what, const unsigned char* buf,
                              size_t length, tj_tool_array_t* out) {
  memset(out->shape, 0, sizeof(out->shape));
  out->data = NULL;
  out->bytes = 0;
  size_t header_len = 0, start = 0;
  if (length < 10 || memcmp(buf, "\x93NUMPY", 6) != 0) {
    return tj_status_make(TJ_STATUS_INVALID_ARGUMENT, "%s: not a .npy file",
                          what);
  }
  if (buf[6] == 1) {
    header_len = (size_t)buf[8] | (size_t)buf[9] << 8;
    start = 10;
  } else if ((buf[6] == 2 || buf[6] == 3) && length >= 12) {
    header_len = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 |
                 (size_t)buf[11] << 24;
    start = 12;
  } else {
    return tj_status_make(TJ_STATUS_INVALID_ARGUMENT,
                          "%s: .npy version %d is not supported", what, buf[6]);
  }
  char header[4096];
  if (header_len > length - start || header_len >= sizeof(header)) {
    return tj_status_make(TJ_STATUS_INVALID_ARGUMENT, "%s: truncated header",
                          what);
  }
  memcpy(header, buf + start, header_len);
  header[header_len] = '\0';
  tj_dtype_t dtype = TJ_DTYPE_F32;
  const char* d = strstr(header, "'descr':");
  bool found = false;
  for (int i = 0; d && i < kNumDescr; ++i) {
    const char* v = d + 8;
    while (*v == ' ') ++v;
    if (v[0] == '\'' && strncmp(v + 1, kDescr[i].descr, 3) == 0 &&
        v[4] == '\'') {
      dtype = kDescr[i].dtype;
      found = true;
    }
  }
  const char* f = strstr(header, "'fortran_order':");
  const char* sh = strstr(header, "'shape':");
  if (!found) {
    return tj_status_make(TJ_STATUS_INVALID_ARGUMENT,
                          "%s: dtype not supported (want <f4 <f8 <f2 |i1 <i4 "
                          "<i8 |b1 |u1 <i2 <u2 <u4 <u8): %s",
                          what, header);
  }
  if (!f || strncmp(f + 16 + strspn(f + 16, " "), "True", 4) == 0) {
    return tj_status_make(TJ_STATUS_INVALID_ARGUMENT,
                          "%s: Fortran order is not supported", what);
  }
  if (!sh || !strchr(sh, '(')) {
    return tj_status_make(TJ_STATUS_INVALID_ARGUMENT, "%s: no shape", what);
  }
  const char* p = strchr(sh, '(') + 1;
  int32_t rank = 0;
  int64_t numel = 1;
  while (*p && *p != ')') {
    while (*p == ' ' || *p == ',') ++p;
    if (*p == ')') break;
    char* end = NULL;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 0 || v > (1ll << 40) || rank == TJ_MAX_RANK ||
        (v && numel > (1ll << 40) / v)) {
      return tj_status_make(TJ_STATUS_INVALID_ARGUMENT, "%s: bad shape in %s",
                            what, header);
    }
    out->shape[rank++] = v;
    numel *= v;
    p = end;
  }
  size_t bytes = (size_t)numel * dtype_bytes(dtype);
  size_t have = length - start - header_len;
  if (have != bytes) {
    return tj_status_make(TJ_STATUS_INVALID_ARGUMENT,
                          "%s: %zu data bytes for %lld elements of %s", what,
                          have, (long long)numel, tj_dtype_name(dtype));
  }
  out->data = malloc(bytes ? bytes : 1);
  if (!out->data) {
    return tj_status_make(TJ_STATUS_OUT_OF_MEMORY, "%s: out of memory", what);
  }
  if (bytes) memcpy(out->data, buf + start + header_len, bytes);
  out->bytes = bytes;
  out->tensor = tj_tensor_make(out->data, dtype, rank, out->shape);
  return NULL;
}

tj_status_t tj_tool_npy_read(const char* path, tj_tool_array_t* out) {
  size_t length = 0;
  char* text = tj_tool_read_file("tj-run", path, &length);
  if (!text) {
    return tj_status_make(TJ_STATUS_INVALID_ARGUMENT, "cannot read %s", path);
  }
  out->name[0] = '\0';
  tj_status_t status =
      tj_tool_npy_parse(path, (const unsigned char*)text, length, out);
  free(text);
  return status;
}

// The .npy image of |t| in a malloc'd buffer (|*out_length| bytes), or NULL
// out of memory.
static unsigned char* npy_image(const tj_tensor_t* t, const char* descr,
                                size_t* out_length) {
  char dict[512];
  int n = snprintf(dict, sizeof(dict),
                   "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int32_t d = 0; d < t->rank; ++d) {
    n += snprintf(dict + n, sizeof(dict) - (size_t)n, "%s%lld", d ? ", " : "",
                  (long long)t->shape[d]);
  }
  n += snprintf(dict + n, sizeof(dict) - (size_t)n, "%s), }",
                t->rank == 1 ? "," : "");
  // Spaces and a newline so that the data starts at a multiple of 64.
  size_t header = 10 + (size_t)n + 1;
  size_t padded = (header + 63) / 64 * 64;
  int64_t numel = 1;
  for (int32_t d = 0; d < t->rank; ++d) numel *= t->shape[d];
  size_t bytes = (size_t)numel * dtype_bytes(t->dtype);
  unsigned char* buf = malloc(padded + bytes);
  if (!buf) return NULL;
  size_t hlen = padded - 10;
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (unsigned char)(hlen & 0xff);
  buf[9] = (unsigned char)(hlen >> 8);
  memcpy(buf + 10, dict, (size_t)n);
  memset(buf + 10 + n, ' ', padded - 10 - (size_t)n - 1);
  buf[padded - 1] = '\n';
  if (bytes) memcpy(buf + padded, t->data, bytes);
  *out_length = padded + bytes;
  return buf;
}

//===--- .npz: a stored zip ---===//

static uint32_t crc32_of(const unsigned char* p, size_t n) {
  static uint32_t table[256];
  static bool ready = false;
  if (!ready) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    ready = true;
  }
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

static void put16(unsigned char* p, uint32_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char* p, uint32_t v) {
  put16(p, v & 0xffff);
  put16(p + 2, v >> 16);
}

static uint32_t get16(const unsigned char* p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t get32(const unsigned char* p) {
  return get16(p) | get16(p + 2) << 16;
}

static uint64_t get64(const unsigned char* p) {
  return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

tj_status_t tj_tool_npz_write(const char* path, const char* const* names,
                              const tj_tensor_t* tensors, int32_t count) {
  for (int32_t i = 0; i < count; ++i) {
    bool known = false;
    for (int k = 0; k < kNumDescr; ++k)
      known |= kDescr[k].dtype == tensors[i].dtype;
    if (!known) {
      return tj_status_make(TJ_STATUS_UNSUPPORTED,
                            "%s: \"%s\" is %s, which numpy has no dtype for",
                            path, names[i], tj_dtype_name(tensors[i].dtype));
    }
  }
  FILE* f = fopen(path, "wb");
  if (!f) {
    return tj_status_make(TJ_STATUS_INVALID_ARGUMENT, "cannot write '%s'",
                          path);
  }
  // The central directory, built while the members are written.
  size_t cd_cap = 64, cd_len = 0;
  unsigned char* cd = malloc(cd_cap);
  bool ok = cd != NULL;
  uint64_t offset = 0;
  for (int32_t i = 0; ok && i < count; ++i) {
    const char* descr = NULL;
    for (int k = 0; k < kNumDescr; ++k) {
      if (kDescr[k].dtype == tensors[i].dtype) descr = kDescr[k].descr;
    }
    size_t len = 0;
    unsigned char* image = npy_image(&tensors[i], descr, &len);
    char member[160];
    int nlen = snprintf(member, sizeof(member), "%.150s.npy", names[i]);
    if (!image || len > 0xFFFFFFF0u || offset > 0xFFFFFFF0u) {
      free(image);
      ok = false;
      break;
    }
    uint32_t crc = crc32_of(image, len);
    unsigned char local[30];
    memset(local, 0, sizeof(local));
    put32(local, 0x04034b50u);
    put16(local + 4, 20);     // version needed
    put16(local + 12, 0x21);  // 1980-01-01
    put32(local + 14, crc);
    put32(local + 18, (uint32_t)len);
    put32(local + 22, (uint32_t)len);
    put16(local + 26, (uint32_t)nlen);
    ok = fwrite(local, 1, 30, f) == 30 &&
         fwrite(member, 1, (size_t)nlen, f) == (size_t)nlen &&
         fwrite(image, 1, len, f) == len;
    free(image);
    size_t need = cd_len + 46 + (size_t)nlen;
    if (ok && need > cd_cap) {
      while (cd_cap < need) cd_cap *= 2;
      unsigned char* grown = realloc(cd, cd_cap);
      if (!grown) {
        ok = false;
        break;
      }
      cd = grown;
    }
    if (!ok) break;
    unsigned char* c = cd + cd_len;
    memset(c, 0, 46);
    put32(c, 0x02014b50u);
    put16(c + 4, 20);  // version made by
    put16(c + 6, 20);  // version needed
    put16(c + 14, 0x21);
    put32(c + 16, crc);
    put32(c + 20, (uint32_t)len);
    put32(c + 24, (uint32_t)len);
    put16(c + 28, (uint32_t)nlen);
    put32(c + 42, (uint32_t)offset);
    memcpy(c + 46, member, (size_t)nlen);
    cd_len = need;
    offset += 30 + (uint64_t)nlen + len;
  }
  if (ok) {
    unsigned char end[22];
    memset(end, 0, sizeof(end));
    put32(end, 0x06054b50u);
    put16(end + 8, (uint32_t)count);
    put16(end + 10, (uint32_t)count);
    put32(end + 12, (uint32_t)cd_len);
    put32(end + 16, (uint32_t)offset);
    ok = count < 0xffff && fwrite(cd, 1, cd_len, f) == cd_len &&
         fwrite(end, 1, 22, f) == 22;
  }
  free(cd);
  if (fclose(f) != 0) ok = false;
  if (!ok) {
    remove(path);
    return tj_status_make(TJ_STATUS_INVALID_ARGUMENT, "cannot write '%s'",
                          path);
  }
  return NULL;
}

void tj_tool_arrays_free(tj_tool_array_t* arrays, int32_t count) {
  for (int32_t i = 0; arrays && i < count; ++i) free(arrays[i].data);
  free(arrays);
}

// The members of the zip image |z| (|n| bytes), read through its central
// directory (zip64 included).
static tj_status_t npz_members(const char* path, const unsigned char* z,
                               size_t n, tj_tool_array_t** out,
                               int32_t* count) {
  size_t eocd = SIZE_MAX;
  for (size_t i = n >= 22 ? n - 22 : 0; n >= 22; --i) {
    if (get32(z + i) == 0x06054b50u) {
      eocd = i;
      break;
    }
    if (i == 0 || n - i > 22 + 65535) break;
  }
  if (eocd == SIZE_MAX) {
    return tj_status_make(TJ_STATUS_INVALID_ARGUMENT,
                          "%s: not a .npz (zip) file", path);
  }
  uint64_t entries = get16(z + eocd + 10);
  uint64_t cd_off = get32(z + eocd + 16);
  if ((entries == 0xffff || cd_off == 0xFFFFFFFFu) && eocd >= 20 &&
      get32(z + eocd - 20) == 0x07064b50u) {
    uint64_t z64 = get64(z + eocd - 20 + 8);
    if (z64 > n || n - z64 < 56 || get32(z + z64) != 0x06064b50u) {
      return tj_status_make(TJ_STATUS_INVALID_ARGUMENT,
                            "%s: bad zip64 end of central directory", path);
    }
    entries = get64(z + z64 + 32);
    cd_off = get64(z + z64 + 48);
  }
  if (entries > 4096) {
    return tj_status_make(TJ_STATUS_INVALID_ARGUMENT, "%s: %llu members", path,
                          (unsigned long long)entries);
  }
  tj_tool_array_t* arrays = calloc(entries ? entries : 1, sizeof(*arrays));
  if (!arrays) {
    return tj_status_make(TJ_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
  }
  tj_status_t status = NULL;
  uint64_t p = cd_off;
  int32_t got = 0;
  for (uint64_t e = 0; e < entries && !status; ++e) {
    if (p > n || n - p < 46 || get32(z + p) != 0x02014b50u) {
      status = tj_status_make(TJ_STATUS_INVALID_ARGUMENT,
                              "%s: bad central directory", path);
      break;
    }
    uint32_t method = get16(z + p + 10);
    uint64_t csize = get32(z + p + 20), usize = get32(z + p + 24);
    uint32_t nlen = get16(z + p + 28), xlen = get16(z + p + 30);
    uint32_t clen = get16(z + p + 32);
    uint64_t local = get32(z + p + 42);
    if (n - p - 46 < (uint64_t)nlen + xlen + clen) {
      status = tj_status_make(TJ_STATUS_INVALID_ARGUMENT,
                              "%s: bad central directory", path);
      break;
    }
    const char* name = (const char*)z + p + 46;
    // The zip64 extra field: the sizes and the offset that overflowed.
    const unsigned char* x = z + p + 46 + nlen;
    for (uint32_t k = 0; k + 4 <= xlen;) {
      uint32_t id = get16(x + k), len = get16(x + k + 2);
      if (k + 4 + len > xlen) break;
      if (id == 1) {
        uint32_t q = k + 4;
        if (usize == 0xFFFFFFFFu && q + 8 <= k + 4 + len) {
          usize = get64(x + q);
          q += 8;
        }
        if (csize == 0xFFFFFFFFu && q + 8 <= k + 4 + len) {
          csize = get64(x + q);
          q += 8;
        }
        if (local == 0xFFFFFFFFu && q + 8 <= k + 4 + len) local = get64(x + q);
      }
      k += 4 + len;
    }
    tj_tool_array_t* a = &arrays[got];
    size_t stem =
        nlen >= 4 && memcmp(name + nlen - 4, ".npy", 4) == 0 ? nlen - 4 : nlen;
    snprintf(a->name, sizeof(a->name), "%.*s", (int)stem, name);
    if (method != 0 || csize != usize) {
      status = tj_status_make(TJ_STATUS_INVALID_ARGUMENT,
                              "%s: member '%s' is compressed (write it with "
                              "np.savez, not np.savez_compressed)",
                              path, a->name);
      break;
    }
    if (local > n || n - local < 30 || get32(z + local) != 0x04034b50u) {
      status =
          tj_status_make(TJ_STATUS_INVALID_ARGUMENT,
                         "%s: member '%s': bad local header", path, a->name);
      break;
    }
    uint64_t data = local + 30 + get16(z + local + 26) + get16(z + local + 28);
    if (data > n || n - data < usize) {
      status = tj_status_make(TJ_STATUS_INVALID_ARGUMENT,
                              "%s: member '%s' is truncated", path, a->name);
      break;
    }
    char what[300];
    snprintf(what, sizeof(what), "%s: member '%s'", path, a->name);
    status = tj_tool_npy_parse(what, z + data, (size_t)usize, a);
    if (!status) ++got;
    p += 46 + (uint64_t)nlen + xlen + clen;
  }
  if (status) {
    tj_tool_arrays_free(arrays, got);
    return status;
  }
  *out = arrays;
  *count = got;
  return NULL;
}

tj_status_t tj_tool_npz_read(const char* path, tj_tool_array_t** out,
                             int32_t* count) {
  *out = NULL;
  *count = 0;
  size_t length = 0;
  char* text = tj_tool_read_file("tj-run", path, &length);
  if (!text) {
    return tj_status_make(TJ_STATUS_INVALID_ARGUMENT, "cannot read %s", path);
  }
  tj_status_t status =
      npz_members(path, (const unsigned char*)text, length, out, count);
  free(text);
  return status;
}
