// libFuzzer target: the disk-cache loader (jit/cache.c, then the object
// checks of jit/object_check.c and the JIT linker) on arbitrary entries.
//
// Setup compiles a tiny graph, y[4,8] = x + w on x86, once with a private
// cache directory (mkdtemp: 0700 under /tmp, which is sticky, so trusted)
// and keeps the entry files that compile wrote (named by key, jit/cache.h).
// Each input then replaces one of them, compiles the graph again in a new
// context (an empty memory cache, so the disk entry is looked up) and runs
// it: compile and run must give the reference answer (a bad entry is a
// miss, recompiled) or a clean status; never a crash, a hang or a leak.
//
// What the fuzz bytes may change. The threat model of tj_executable.h
// ("The kernel cache and its threat model") leaves out a well-formed
// object whose code was changed: it links and runs, and only the trust
// rules of the cache directory stop it. So the fuzzer must not be able to
// produce one, else every "crash" would be that. The first byte picks:
// - raw: the entry is the fuzz bytes themselves (any header, any length);
// - structure: the real entry, with edits confined to the cache header and
//   to the ELF structure that does not define code: the ELF header (but
//   e_shoff, e_shentsize, e_shnum, which place the section table), the
//   headers and contents of sections that are neither loaded (SHF_ALLOC)
//   nor relocations, symbol tables or their string tables; a section may
//   not become one of those. Then it may be truncated or extended, and the
//   cache header's size and checksum may be made right again, so the
//   edits reach the object checks and the linker rather than stopping at
//   the checksum. Code, data the code reads, relocations and symbols are
//   never touched: what is left to the fuzzer is exactly what
//   jit/object_check.c must catch (offsets, sizes, counts, types, the
//   machine, truncation);
// - a file type: the entry is a symbolic link, a directory, a FIFO, or a
//   file writable by the group (each must be a miss, the FIFO without
//   blocking).

#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensorjit/tj_base.h"
#include "tensorjit/tj_executable.h"
#include "tensorjit/tj_graph.h"
#include "tensorjit/tj_tensor.h"
// xxHash header-only, as jit/cache.c uses it.
#define XXH_INLINE_ALL
#include <xxhash.h>

enum {
  kCacheHeaderBytes = 48,  // jit/cache.c's file_header_t
  kMaxEntries = 8,
  kRows = 4,
  kCols = 8,
};

static const char kGraph[] =
    "func @f(%x: f32[4,8], %w: f32[4,8]) {\n"
    "  %2 = add %x, %w : f32[4,8]\n"
    "  return %2 as \"y\"\n"
    "}\n";

typedef struct entry_t {
  char path[512];
  unsigned char* bytes;
  size_t size;
  // Per byte of the file: may the structure mode change it?
  unsigned char* mutable_byte;
} entry_t;

static char g_dir[64];
static entry_t g_entries[kMaxEntries];
static int g_num_entries;
static float g_x[kRows * kCols], g_w[kRows * kCols], g_want[kRows * kCols];

static void fail(const char* what, tj_status_t status) {
  fprintf(stderr, "fuzz_cache: %s: %s\n", what,
          status ? tj_status_message(status) : "");
  abort();
}

// Removes whatever is at |path| (file, link, FIFO or directory).
static void remove_path(const char* path) {
  if (unlink(path) != 0) rmdir(path);
}

static void cleanup(void) {
  DIR* dir = opendir(g_dir);
  if (dir) {
    struct dirent* e;
    char path[1024];
    while ((e = readdir(dir))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      snprintf(path, sizeof(path), "%s/%s", g_dir, e->d_name);
      remove_path(path);
    }
    closedir(dir);
  }
  rmdir(g_dir);
  for (int i = 0; i < g_num_entries; ++i) {
    free(g_entries[i].bytes);
    free(g_entries[i].mutable_byte);
  }
}

// Compiles and runs the graph in a new context with the cache in g_dir.
// Returns true when it ran (and checks the answer), false on a status.
static bool compile_and_run(void) {
  tj_context_t* context = NULL;
  tj_status_t status = tj_context_create(NULL, &context);
  if (status) fail("context", status);
  tj_graph_t* graph = NULL;
  status = tj_graph_parse(context, kGraph, sizeof(kGraph) - 1, "fuzz", &graph);
  if (status) fail("parse", status);
  tj_compile_options_t options;
  tj_compile_options_initialize(&options);
  options.target = TJ_TARGET_X86;
  options.cache_dir = g_dir;
  options.x86.num_threads = 1;
  tj_executable_t* executable = NULL;
  status = tj_compile(graph, &options, &executable);
  tj_graph_destroy(graph);
  bool ran = false;
  if (!status) {
    float y[kRows * kCols];
    memset(y, 0, sizeof(y));
    const int64_t shape[2] = {kRows, kCols};
    tj_tensor_t inputs[2] = {tj_tensor_make(g_x, TJ_DTYPE_F32, 2, shape),
                             tj_tensor_make(g_w, TJ_DTYPE_F32, 2, shape)};
    tj_tensor_t output = tj_tensor_make(y, TJ_DTYPE_F32, 2, shape);
    status = tj_executable_run(executable, inputs, 2, &output, 1);
    if (!status) {
      if (memcmp(y, g_want, sizeof(y)) != 0) {
        fprintf(stderr, "fuzz_cache: a wrong answer from a cache entry\n");
        abort();
      }
      ran = true;
    }
  }
  tj_status_free(status);
  tj_executable_release(executable);
  tj_context_destroy(context);
  return ran;
}

static bool read_file(const char* path, unsigned char** out, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return false;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *out = malloc(n > 0 ? (size_t)n : 1);
  bool ok = *out && n > 0 && fread(*out, 1, (size_t)n, f) == (size_t)n;
  fclose(f);
  *size = ok ? (size_t)n : 0;
  return ok;
}

// Is section |s| one that defines code or what code reads: loaded,
// relocations, a symbol table?
static bool defines_code(const Elf64_Shdr* s) {
  return (s->sh_flags & (SHF_ALLOC | SHF_EXECINSTR)) || s->sh_type == SHT_REL ||
         s->sh_type == SHT_RELA || s->sh_type == SHT_SYMTAB ||
         s->sh_type == SHT_DYNSYM || s->sh_type == SHT_GROUP ||
         s->sh_type == SHT_SYMTAB_SHNDX || s->sh_type == SHT_INIT_ARRAY ||
         s->sh_type == SHT_FINI_ARRAY || s->sh_type == SHT_PREINIT_ARRAY;
}

static void protect(entry_t* e, uint64_t begin, uint64_t size) {
  for (uint64_t i = 0; i < size; ++i) {
    uint64_t at = kCacheHeaderBytes + begin + i;
    if (at < e->size) e->mutable_byte[at] = 0;
  }
}

// Marks which bytes of entry |e| (a cache header and an ELF64 object, as
// the compile wrote it) the structure mode may change.
static void mark_mutable(entry_t* e) {
  e->mutable_byte = malloc(e->size);
  if (!e->mutable_byte) abort();
  memset(e->mutable_byte, 1, e->size);
  const unsigned char* elf = e->bytes + kCacheHeaderBytes;
  size_t elf_size = e->size - kCacheHeaderBytes;
  Elf64_Ehdr h;
  if (e->size < kCacheHeaderBytes + sizeof(h)) abort();
  memcpy(&h, elf, sizeof(h));
  protect(e, offsetof(Elf64_Ehdr, e_shoff), sizeof(h.e_shoff));
  protect(e, offsetof(Elf64_Ehdr, e_shentsize), sizeof(h.e_shentsize));
  protect(e, offsetof(Elf64_Ehdr, e_shnum), sizeof(h.e_shnum));
  if (h.e_shentsize != sizeof(Elf64_Shdr) ||
      h.e_shoff + (uint64_t)h.e_shnum * sizeof(Elf64_Shdr) > elf_size) {
    abort();  // the compile wrote an object this harness does not know
  }
  for (int i = 0; i < h.e_shnum; ++i) {
    Elf64_Shdr s;
    memcpy(&s, elf + h.e_shoff + i * sizeof(s), sizeof(s));
    bool code = defines_code(&s);
    if (s.sh_type == SHT_SYMTAB && s.sh_link < h.e_shnum) {
      // Its string table: the names that bind symbols.
      Elf64_Shdr strtab;
      memcpy(&strtab, elf + h.e_shoff + s.sh_link * sizeof(s), sizeof(s));
      protect(e, h.e_shoff + s.sh_link * sizeof(s), sizeof(s));
      if (strtab.sh_type != SHT_NOBITS)
        protect(e, strtab.sh_offset, strtab.sh_size);
    }
    if (!code) continue;
    protect(e, h.e_shoff + i * sizeof(s), sizeof(s));
    if (s.sh_type != SHT_NOBITS) protect(e, s.sh_offset, s.sh_size);
  }
}

// After structure edits: no section that did not define code may now
// (its header bytes were editable).
static bool still_no_new_code(const entry_t* e, const unsigned char* file,
                              size_t size) {
  Elf64_Ehdr h;
  memcpy(&h, e->bytes + kCacheHeaderBytes, sizeof(h));
  for (int i = 0; i < h.e_shnum; ++i) {
    size_t at = kCacheHeaderBytes + h.e_shoff + i * sizeof(Elf64_Shdr);
    if (at + sizeof(Elf64_Shdr) > size) break;
    if (!e->mutable_byte[at]) continue;  // a protected header: unchanged
    Elf64_Shdr s;
    memcpy(&s, file + at, sizeof(s));
    if (defines_code(&s)) return false;
  }
  return true;
}

static void setup(void) {
  snprintf(g_dir, sizeof(g_dir), "/tmp/tj_fuzz_cache.XXXXXX");
  if (!mkdtemp(g_dir)) abort();
  atexit(cleanup);
  for (int i = 0; i < kRows * kCols; ++i) {
    g_x[i] = (float)(i % 7) - 3.5f;
    g_w[i] = (float)(i % 5) * 0.25f;
    g_want[i] = g_x[i] + g_w[i];
  }
  if (!compile_and_run()) fail("the first compile", NULL);
  DIR* dir = opendir(g_dir);
  if (!dir) abort();
  struct dirent* d;
  while ((d = readdir(dir)) && g_num_entries < kMaxEntries) {
    size_t n = strlen(d->d_name);
    if (n < 4 || strcmp(d->d_name + n - 4, ".tjo") != 0) continue;
    entry_t* e = &g_entries[g_num_entries];
    snprintf(e->path, sizeof(e->path), "%s/%s", g_dir, d->d_name);
    if (!read_file(e->path, &e->bytes, &e->size)) abort();
    ++g_num_entries;
    mark_mutable(e);
  }
  closedir(dir);
  if (g_num_entries == 0) fail("the compile wrote no cache entry", NULL);
}

static bool write_file(const char* path, const void* data, size_t size,
                       mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = size == 0 || write(fd, data, size) == (ssize_t)size;
  if (fchmod(fd, mode) != 0) ok = false;
  close(fd);
  return ok;
}

// The structure mode: the real entry with the edits the fuzz bytes name.
// Returns the new file (malloc'd) in |*out|, or false to skip the input.
static bool structure(const entry_t* e, const uint8_t* data, size_t size,
                      unsigned char** out, size_t* out_size) {
  if (size < 3) return false;
  uint8_t flags = data[0];
  // The length: as is, truncated, or extended with zeros.
  size_t length = e->size;
  uint16_t cut = (uint16_t)(data[1] | data[2] << 8);
  if (flags & 1) length = cut % (e->size + 1);
  if (flags & 2) length = e->size + cut % 4096;
  data += 3;
  size -= 3;
  unsigned char* file = calloc(length ? length : 1, 1);
  if (!file) abort();
  memcpy(file, e->bytes, length < e->size ? length : e->size);
  // Edits: (offset u16 or u32, value) triples.
  bool wide = flags & 4;
  size_t step = wide ? 5 : 3;
  for (; size >= step; data += step, size -= step) {
    size_t at = wide ? (size_t)(data[0] | data[1] << 8 | data[2] << 16 |
                                (uint32_t)data[3] << 24)
                     : (size_t)(data[0] | data[1] << 8);
    uint8_t value = data[step - 1];
    if (at >= length) continue;
    if (at < e->size && !e->mutable_byte[at]) continue;
    file[at] = value;
  }
  if (!still_no_new_code(e, file, length)) {
    free(file);
    return false;
  }
  // The cache header's payload size and checksum made right again, so the
  // edits reach the ELF checks.
  if ((flags & 8) && length > kCacheHeaderBytes) {
    uint64_t payload = length - kCacheHeaderBytes;
    uint64_t checksum =
        XXH3_64bits(file + kCacheHeaderBytes, length - kCacheHeaderBytes);
    memcpy(file + 32, &payload, 8);
    memcpy(file + 40, &checksum, 8);
  }
  *out = file;
  *out_size = length;
  return true;
}

// libFuzzer's entry point.
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!g_num_entries) setup();
  if (size < 2) return 0;
  const entry_t* e = &g_entries[data[1] % g_num_entries];
  uint8_t mode = data[0] % 8;
  data += 2;
  size -= 2;
  remove_path(e->path);
  bool wrote = true;
  if (mode < 2) {  // raw
    wrote = write_file(e->path, data, size, 0600);
  } else if (mode < 6) {  // structure
    unsigned char* file = NULL;
    size_t length = 0;
    if (!structure(e, data, size, &file, &length)) return 0;
    wrote = write_file(e->path, file, length, 0600);
    free(file);
  } else {  // a file type
    uint8_t kind = size ? data[0] % 4 : 0;
    char target[600];
    snprintf(target, sizeof(target), "%s.target", e->path);
    switch (kind) {
      case 0:  // a link to a valid entry
        wrote = write_file(target, e->bytes, e->size, 0600) &&
                symlink(target, e->path) == 0;
        break;
      case 1:
        wrote = mkdir(e->path, 0700) == 0;
        break;
      case 2:
        wrote = mkfifo(e->path, 0600) == 0;
        break;
      default:  // a valid entry the group may write
        wrote = write_file(e->path, e->bytes, e->size, 0620);
        break;
    }
    if (!wrote) abort();
    compile_and_run();
    remove_path(target);
    remove_path(e->path);
    return 0;
  }
  if (!wrote) abort();
  compile_and_run();
  return 0;
}
