// The disk kernel cache against bad and untrusted entries, end to end: a
// FIFO, a link or a directory where an entry should be, a corrupt object
// whose checksum was recomputed (so that only the structural checks or the
// link can catch it), an entry another user owns, a cache directory others
// may write. Each must give a miss (the kernels compiled again, the entry
// rewritten where the directory is ours) and right answers, never a hang,
// a crash or a failed compile. Runs as root here: the foreign owner is
// made with chown (skipped, with a message, where that is impossible).
// Every test runs under an alarm.

#include "tests/unit/test.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

enum { K = 48, N = 40, M = 3 };

typedef struct compiled_t {
  int64_t hits, misses;
  double worst;  // the largest error against the reference
  bool ok;
} compiled_t;

// In |ctx| (a fresh one when NULL): compiles x@w+b, then gelu, with the
// disk cache in |dir|, runs it at a small M (the deferred small-M GEMM
// path) and compares with the reference.
static compiled_t compile_and_run(tj_context_t* ctx, const char* dir,
                                  tj_test_diagnostics_t* d) {
  compiled_t r = {0, 0, 1e30, false};
  bool own = !ctx;
  if (own) {
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    tj_test_collect_into(&o, d);
    CHECK_OK(tj_context_create(&o, &ctx));
    if (!ctx) return r;
  }
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(ctx, "trust", &g));
  int64_t B = tj_graph_symbol(g, "B");
  tj_value_t x = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){B, K}, "x");
  tj_value_t w = tj_graph_input(g, TJ_DTYPE_F32, 2, (int64_t[]){K, N}, "w");
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, (int64_t[]){N}, "b");
  tj_graph_output(g, tj_graph_gelu(g, tj_graph_linear(g, x, w, b), true), "y");
  CHECK_OK(tj_graph_finalize(g));
  tj_compile_options_t co;
  tj_compile_options_initialize(&co);
  co.cache_dir = dir;
  co.x86.num_threads = 1;
  tj_executable_t* exe = NULL;
  CHECK_OK(tj_compile(g, &co, &exe));
  if (exe) {
    float xv[M * K], wv[K * N], bv[N], y[M * N], ref[M * N];
    for (int i = 0; i < M * K; ++i) xv[i] = (float)((i * 37) % 17) / 8 - 1;
    for (int i = 0; i < K * N; ++i) wv[i] = (float)((i * 11) % 13) / 26 - .25f;
    for (int i = 0; i < N; ++i) bv[i] = (float)i / N;
    tj_tensor_t in[3] = {tj_tensor_make(xv, TJ_DTYPE_F32, 2, (int64_t[]){M, K}),
                         tj_tensor_make(wv, TJ_DTYPE_F32, 2, (int64_t[]){K, N}),
                         tj_tensor_make(bv, TJ_DTYPE_F32, 1, (int64_t[]){N})};
    tj_tensor_t out = tj_tensor_make(y, TJ_DTYPE_F32, 2, (int64_t[]){M, N});
    tj_tensor_t ref_out =
        tj_tensor_make(ref, TJ_DTYPE_F32, 2, (int64_t[]){M, N});
    CHECK_OK(tj_executable_run(exe, in, 3, &out, 1));
    CHECK_OK(tj_reference_run(g, in, 3, &ref_out, 1));
    r.worst = 0;
    for (int i = 0; i < M * N; ++i) {
      double e = fabs((double)y[i] - ref[i]) / (1 + fabs(ref[i]));
      if (!(e <= r.worst)) r.worst = e;
    }
    tj_executable_stats_t st = {.struct_size = sizeof(st)};
    tj_executable_stats(exe, &st);
    r.hits = st.cache_hits;
    r.misses = st.cache_misses;
    r.ok = true;
  }
  tj_executable_release(exe);  // joins the deferred part's build
  tj_graph_destroy(g);
  if (own) tj_context_destroy(ctx);
  return r;
}

static char g_root[128];

// A fresh cache directory, filled by one compile: *|kernels| kernels.
static void populate(const char* name, char* dir, size_t size,
                     int64_t* kernels) {
  snprintf(g_root, sizeof(g_root), "/tmp/tj-cache-trust-%d", (int)getpid());
  snprintf(dir, size, "%s/%s", g_root, name);
  tj_test_diagnostics_t d;
  compiled_t r = compile_and_run(NULL, dir, &d);
  CHECK(r.ok && r.misses >= 1 && r.hits == 0);
  *kernels = r.misses;
  CHECK(r.worst < 1e-5);
  CHECK_EQ_INT(0, d.warnings);
}

// The entry whose payload contains |marker|: "tj_lazy_count" for the part
// compiled by tj_compile, "tj_cold_0" for the deferred part.
static bool find_entry(const char* dir, const char* marker, char* path,
                       size_t size) {
  DIR* d = opendir(dir);
  bool found = false;
  for (struct dirent* e; d && !found && (e = readdir(d));) {
    if (!strstr(e->d_name, ".tjo")) continue;
    snprintf(path, size, "%s/%s", dir, e->d_name);
    FILE* f = fopen(path, "rb");
    if (!f) continue;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    for (size_t i = 0; i + strlen(marker) <= n && !found; ++i) {
      found = memcmp(buf + i, marker, strlen(marker)) == 0;
    }
  }
  if (d) closedir(d);
  CHECK(found);
  return found;
}

static size_t read_file(const char* path, unsigned char* buf, size_t size) {
  FILE* f = fopen(path, "rb");
  size_t n = f ? fread(buf, 1, size, f) : 0;
  if (f) fclose(f);
  return n;
}

static void write_file(const char* path, const unsigned char* buf,
                       size_t size) {
  unlink(path);
  FILE* f = fopen(path, "wb");
  CHECK(f != NULL);
  if (f) {
    CHECK_EQ_INT(size, fwrite(buf, 1, size, f));
    fclose(f);
  }
}

// The header's checksum (cache.h: a 48-byte header, the checksum last),
// recomputed as anyone rewriting a file could.
static void fix_checksum(unsigned char* file, size_t size) {
  uint64_t sum = XXH3_64bits(file + 48, size - 48);
  memcpy(file + 40, &sum, sizeof(sum));
}

static void remove_root(void) {
  char command[256];
  snprintf(command, sizeof(command), "rm -rf '%s'", g_root);
  CHECK_EQ_INT(0, system(command));
}

// After a miss on a bad entry: the next process (a fresh context) loads
// every kernel from the rewritten entry.
static void expect_rewritten(const char* dir, int64_t kernels) {
  tj_test_diagnostics_t d;
  compiled_t r = compile_and_run(NULL, dir, &d);
  CHECK(r.ok);
  CHECK_EQ_INT(kernels, r.hits);
  CHECK_EQ_INT(0, r.misses);
  CHECK(r.worst < 1e-5);
  CHECK_EQ_INT(0, d.warnings);
}

TEST(fifo_link_and_directory_entries_are_misses) {
  alarm(120);  // the FIFO used to block tj_compile for ever
  char dir[256], path[512];
  int64_t kernels;
  populate("kinds", dir, sizeof(dir), &kernels);
  if (!find_entry(dir, "tj_lazy_count", path, sizeof(path))) return;
  static unsigned char file[1 << 20];
  size_t n = read_file(path, file, sizeof(file));
  char copy[600];
  snprintf(copy, sizeof(copy), "%s.copy", path);  // a valid entry elsewhere
  write_file(copy, file, n);

  unlink(path);
  CHECK(mkfifo(path, 0600) == 0);
  tj_test_diagnostics_t d;
  compiled_t r = compile_and_run(NULL, dir, &d);
  CHECK(r.ok && r.worst < 1e-5);
  CHECK_EQ_INT(0, r.hits);
  CHECK_EQ_INT(kernels, r.misses);
  expect_rewritten(dir, kernels);  // the FIFO replaced by the file

  unlink(path);
  CHECK(symlink(copy, path) == 0);  // valid bytes, through a link: no
  r = compile_and_run(NULL, dir, &d);
  CHECK(r.ok && r.worst < 1e-5);
  CHECK_EQ_INT(0, r.hits);
  CHECK_EQ_INT(kernels, r.misses);
  struct stat st;
  CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode));
  expect_rewritten(dir, kernels);

  unlink(path);
  CHECK(mkdir(path, 0700) == 0);
  r = compile_and_run(NULL, dir, &d);
  CHECK(r.ok && r.worst < 1e-5);
  CHECK_EQ_INT(0, r.hits);
  CHECK_EQ_INT(kernels, r.misses);
  rmdir(path);
  unlink(copy);
  alarm(0);
  remove_root();
}

// Corrupt objects whose checksum was recomputed: one the structural checks
// refuse (a relocation outside its section), one they pass that does not
// link (a lookup of the deferred functions' slots fails), and one in the
// deferred part. Each is a miss, compiled again, rewritten, and the
// answers are right; the compile never fails.
TEST(corrupt_objects_with_a_valid_checksum_are_misses) {
  alarm(120);
  char dir[256], path[512], cold[512];
  int64_t kernels;
  populate("corrupt", dir, sizeof(dir), &kernels);
  if (!find_entry(dir, "tj_lazy_count", path, sizeof(path))) return;
  if (!find_entry(dir, "tj_cold_0", cold, sizeof(cold))) return;
  static unsigned char file[1 << 20], bad[1 << 20];
  size_t n = read_file(path, file, sizeof(file));
  CHECK(n > 48 + 64);

  // The ELF header's section table offset beyond the end of the file.
  memcpy(bad, file, n);
  uint64_t far = (uint64_t)n * 2;
  memcpy(bad + 48 + 0x28, &far, sizeof(far));  // e_shoff
  fix_checksum(bad, n);
  write_file(path, bad, n);
  tj_test_diagnostics_t d;
  compiled_t r = compile_and_run(NULL, dir, &d);
  CHECK(r.ok && r.worst < 1e-5);
  CHECK_EQ_INT(0, r.hits);
  CHECK_EQ_INT(kernels, r.misses);
  CHECK_CONTAINS(d.text,
                 "is not a valid object (ELF: section table outside "
                 "the file); compiling it again");
  expect_rewritten(dir, kernels);

  // Every relocation's offset past its section: the first is refused.
  memcpy(bad, file, n);
  bool changed = false;
  uint64_t shoff;
  uint16_t shnum;
  memcpy(&shoff, bad + 48 + 0x28, 8);
  memcpy(&shnum, bad + 48 + 0x3c, 2);
  for (uint16_t i = 0; i < shnum; ++i) {
    unsigned char* sh = bad + 48 + shoff + (uint64_t)i * 64;
    uint32_t type;
    uint64_t offset, size;
    memcpy(&type, sh + 4, 4);
    memcpy(&offset, sh + 24, 8);
    memcpy(&size, sh + 32, 8);
    if (type != 4 /* SHT_RELA */) continue;
    for (uint64_t k = 0; k < size / 24; ++k) {
      uint64_t r_offset = (uint64_t)1 << 40;
      memcpy(bad + 48 + offset + k * 24, &r_offset, 8);
      changed = true;
    }
  }
  CHECK(changed);
  fix_checksum(bad, n);
  write_file(path, bad, n);
  r = compile_and_run(NULL, dir, &d);
  CHECK(r.ok && r.worst < 1e-5);
  CHECK_EQ_INT(0, r.hits);
  CHECK_EQ_INT(kernels, r.misses);
  CHECK_CONTAINS(d.text, "ELF: relocation outside its section");
  expect_rewritten(dir, kernels);

  // A slot of a deferred function renamed: well formed, but the set's
  // lookups fail after the link. A miss too, not a failed compile (and,
  // as before, not an entry that fails every later compile).
  memcpy(bad, file, n);
  changed = false;
  for (size_t i = 48; i + 12 <= n && !changed; ++i) {
    if (memcmp(bad + i, "tj_lazy_fp_0", 12) == 0 && bad[i + 12] == 0) {
      bad[i + 11] = 'X';
      changed = true;
    }
  }
  CHECK(changed);
  fix_checksum(bad, n);
  write_file(path, bad, n);
  r = compile_and_run(NULL, dir, &d);
  CHECK(r.ok && r.worst < 1e-5);
  CHECK_EQ_INT(0, r.hits);
  CHECK_EQ_INT(kernels, r.misses);
  CHECK_CONTAINS(d.text, ".tjo did not link (");
  CHECK_CONTAINS(d.text, "tj_lazy_fp_0");
  expect_rewritten(dir, kernels);

  // The deferred part, which a run builds: its entry point missing.
  size_t nc = read_file(cold, bad, sizeof(bad));
  changed = false;
  for (size_t i = 48; i + 10 <= nc && !changed; ++i) {
    if (memcmp(bad + i, "tj_cold_0", 10) == 0) {
      bad[i + 8] = 'Z';
      changed = true;
    }
  }
  CHECK(changed);
  fix_checksum(bad, nc);
  write_file(cold, bad, nc);
  r = compile_and_run(NULL, dir, &d);
  CHECK(r.ok && r.worst < 1e-5);
  CHECK_EQ_INT(kernels, r.hits);  // the part tj_compile builds is fine
  CHECK_CONTAINS(d.text,
                 "is not a valid object (ELF: an entry point is "
                 "missing)");
  unsigned char* again = file;  // reused: the rewritten cold part
  size_t na = read_file(cold, again, sizeof(file));
  CHECK(na > 48);
  bool fixed = false;
  for (size_t i = 48; i + 10 <= na && !fixed; ++i) {
    fixed = memcmp(again + i, "tj_cold_0", 10) == 0;
  }
  CHECK(fixed);
  expect_rewritten(dir, kernels);
  alarm(0);
  remove_root();
}

// chown to another user; false (with a message) where that is impossible.
static bool give_away(const char* path) {
  if (chown(path, 65534, 65534) == 0) return true;
  printf("# skipped: chown %s: %s (needs root)\n", path, strerror(errno));
  return false;
}

// Entries another user owns: misses with a warning, recompiled, and
// rewritten as ours.
TEST(foreign_entries_are_not_loaded) {
  alarm(120);
  char dir[256], path[512];
  int64_t kernels;
  populate("foreign", dir, sizeof(dir), &kernels);
  if (!find_entry(dir, "tj_lazy_count", path, sizeof(path))) return;
  if (!give_away(path)) {
    remove_root();
    return;
  }
  tj_test_diagnostics_t d;
  compiled_t r = compile_and_run(NULL, dir, &d);
  CHECK(r.ok && r.worst < 1e-5);
  CHECK_EQ_INT(0, r.hits);
  CHECK_EQ_INT(kernels, r.misses);
  CHECK_EQ_INT(1, d.warnings);
  CHECK_CONTAINS(d.text, "cache: not loading ");
  CHECK_CONTAINS(d.text, ": owned by another user (uid 65534");
  struct stat st;
  CHECK(stat(path, &st) == 0 && st.st_uid == geteuid());
  CHECK_EQ_INT(0600, st.st_mode & 0777);
  expect_rewritten(dir, kernels);
  alarm(0);
  remove_root();
}

// A cache directory that others may write (the repro: 0777, the files
// another user's): not used at all, one warning, the memory cache still
// works, and nothing is written there.
TEST(world_writable_directory_is_not_used) {
  alarm(120);
  char dir[256], path[512];
  int64_t kernels;
  populate("shared", dir, sizeof(dir), &kernels);
  if (!find_entry(dir, "tj_lazy_count", path, sizeof(path))) return;
  CHECK(chmod(dir, 0777) == 0);
  CHECK(chmod(path, 0666) == 0);
  give_away(path);
  struct stat before, after;
  CHECK(stat(path, &before) == 0);

  tj_test_diagnostics_t d;
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  tj_test_collect_into(&o, &d);
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&o, &ctx));
  compiled_t r = compile_and_run(ctx, dir, &d);
  CHECK(r.ok && r.worst < 1e-5);
  CHECK_EQ_INT(0, r.hits);
  CHECK_EQ_INT(kernels, r.misses);
  CHECK_EQ_INT(1, d.warnings);
  CHECK_CONTAINS(d.text, "cache: not using the disk cache in ");
  CHECK_CONTAINS(d.text, "the directory is writable by group or others");
  CHECK_CONTAINS(d.text, "only the memory cache is used");
  // Again in the same context: from the memory cache, no second warning.
  r = compile_and_run(ctx, dir, &d);
  CHECK(r.ok && r.worst < 1e-5);
  CHECK_EQ_INT(kernels, r.hits);
  CHECK_EQ_INT(0, r.misses);
  CHECK_EQ_INT(1, d.warnings);
  tj_context_destroy(ctx);
  // The planted entry is untouched: nothing was written there.
  CHECK(stat(path, &after) == 0);
  CHECK_EQ_INT(before.st_uid, after.st_uid);
  CHECK_EQ_INT(before.st_ino, after.st_ino);
  CHECK_EQ_INT(before.st_mtime, after.st_mtime);
  // Made private again, the directory is used (the planted file is
  // still not ours or still writable by others: a miss, then rewritten).
  CHECK(chmod(dir, 0700) == 0);
  r = compile_and_run(NULL, dir, &d);
  CHECK(r.ok && r.worst < 1e-5);
  CHECK_EQ_INT(kernels, r.misses);
  expect_rewritten(dir, kernels);
  alarm(0);
  remove_root();
}

static void on_alarm(int signal_number) {
  static const char kMessage[] =
      "timed out (a cache entry blocked the loader)\n";
  (void)signal_number;
  if (write(2, kMessage, sizeof(kMessage) - 1) < 0) _exit(2);
  _exit(2);
}

// argv[1], if given: run only the tests whose name contains it.
#define RUN_MATCHING(name) \
  if (argc < 2 || strstr(#name, argv[1])) RUN_TEST(name)

int main(int argc, char** argv) {
  signal(SIGALRM, on_alarm);
  setvbuf(stdout, NULL, _IOLBF, 0);
  RUN_MATCHING(fifo_link_and_directory_entries_are_misses);
  RUN_MATCHING(corrupt_objects_with_a_valid_checksum_are_misses);
  RUN_MATCHING(foreign_entries_are_not_loaded);
  RUN_MATCHING(world_writable_directory_is_not_used);
  TEST_MAIN_END();
}
