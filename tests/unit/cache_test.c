// Unit tests of jit/cache.c: keys, the per-context memory cache and the
// disk cache's promise that a bad file is a miss, never a crash or a hang,
// and its trust rules (only this user's files in this user's directory).
// Every test runs under an alarm: a FIFO that blocks the loader must fail
// the test, not hang it.

#include "tests/unit/test.h"

#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jit/cache.h"

static tj_cache_key_t key_of(const char* a, const char* b) {
  tj_cache_hasher_t h;
  tj_cache_hasher_initialize(&h);
  tj_cache_hasher_update_string(&h, a);
  tj_cache_hasher_update_string(&h, b);
  return tj_cache_hasher_finalize(&h);
}

TEST(keys_are_length_prefixed_and_stable) {
  tj_cache_key_t k1 = key_of("ab", "c"), k2 = key_of("a", "bc");
  CHECK(k1.lo != k2.lo || k1.hi != k2.hi);
  tj_cache_key_t k3 = key_of("ab", "c");
  CHECK(k1.lo == k3.lo && k1.hi == k3.hi);
  char hex[33];
  tj_cache_key_format(k1, hex);
  CHECK_EQ_INT(32, strlen(hex));
}

// Every key starts with the build-id of the code that holds the library
// (here the test executable, which links it statically; gcc and clang
// give every link one): a rebuilt code generator never gets an older
// build's objects. The id read must be the one readelf -n shows, so it is
// compared with the note in /proc/self/exe.
TEST(keys_start_with_the_build_id) {
  size_t size = 0;
  const uint8_t* id = tj_cache_build_id(&size);
  CHECK(size >= 8 && size <= 64);
  FILE* f = fopen("/proc/self/exe", "rb");
  CHECK(f != NULL);
  bool found = false;
  if (f && size >= 8) {
    static uint8_t buf[1 << 20];
    size_t n;
    while (!found && (n = fread(buf, 1, sizeof(buf), f)) > 0) {
      for (size_t i = 0; i + size <= n && !found; ++i) {
        found = memcmp(buf + i, id, size) == 0 && i >= 16 &&
                memcmp(buf + i - 4, "GNU", 4) == 0;
      }
    }
  }
  if (f) fclose(f);
  CHECK(found);
}

TEST(memory_cache_hit_miss_and_oom) {
  for (long fail_at = 0;; ++fail_at) {
    tj_test_allocator_t t;
    tj_test_allocator_initialize(&t, fail_at);
    tj_context_options_t o;
    tj_context_options_initialize(&o);
    o.allocator = tj_test_allocator_get(&t);
    tj_context_t* ctx = NULL;
    tj_status_t st = tj_context_create(&o, &ctx);
    tj_cache_key_t k = key_of("kernel", "x86");
    void* bytes = NULL;
    size_t size = 0;
    bool hit = true;
    if (!st)
      st = tj_memory_cache_lookup(ctx, k, o.allocator, &bytes, &size, &hit);
    if (!st) CHECK(!hit);
    if (!st) st = tj_memory_cache_store(ctx, k, "object", 6);
    if (!st) st = tj_memory_cache_store(ctx, k, "object", 6);  // no duplicate
    if (!st)
      st = tj_memory_cache_lookup(ctx, k, o.allocator, &bytes, &size, &hit);
    if (!st) {
      CHECK(hit);
      CHECK_EQ_INT(6, size);
      CHECK(memcmp(bytes, "object", 6) == 0);
      tj_free(o.allocator, bytes, size);
    }
    tj_context_destroy(ctx);
    CHECK_EQ_INT(0, t.live_blocks);
    CHECK_EQ_INT(0, t.bad_frees);
    if (!st) break;
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(st));
    tj_status_free(st);
  }
}

static char g_dir[256];

static void write_file(const char* path, const void* data, size_t size) {
  FILE* f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  fwrite(data, 1, size, f);
  fclose(f);
}

static void expect_miss(tj_cache_key_t key, const char* reason) {
  void* bytes = NULL;
  size_t size = 0;
  bool hit = true;
  const char* why = NULL;
  CHECK_OK(tj_disk_cache_load(NULL, g_dir, key, tj_allocator_system(), &bytes,
                              &size, &hit, &why));
  CHECK(!hit);
  CHECK(bytes == NULL);
  CHECK_STREQ(reason, why);
}

TEST(disk_cache_round_trip_and_bad_files_are_misses) {
  snprintf(g_dir, sizeof(g_dir), "/tmp/tj-cache-test-%d/a/b", (int)getpid());
  tj_cache_key_t k = key_of("gemm", "znver5");
  expect_miss(k, "no file");
  unsigned char payload[1000];
  for (int i = 0; i < 1000; ++i) payload[i] = (unsigned char)(i * 7);
  CHECK_OK(tj_disk_cache_store(g_dir, k, payload, sizeof(payload)));
  struct stat st;
  CHECK(stat(g_dir, &st) == 0 && (st.st_mode & 0777) == 0700);

  void* bytes = NULL;
  size_t size = 0;
  bool hit = false;
  const char* why = NULL;
  CHECK_OK(tj_disk_cache_load(NULL, g_dir, k, tj_allocator_system(), &bytes,
                              &size, &hit, &why));
  CHECK(hit);
  CHECK_EQ_INT(sizeof(payload), size);
  CHECK(bytes && memcmp(bytes, payload, size) == 0);
  free(bytes);

  char path[512], hex[33];
  tj_cache_key_format(k, hex);
  snprintf(path, sizeof(path), "%s/%s.tjo", g_dir, hex);
  FILE* f = fopen(path, "rb");
  unsigned char file[2048];
  size_t n = f ? fread(file, 1, sizeof(file), f) : 0;
  if (f) fclose(f);
  CHECK_EQ_INT(48 + sizeof(payload), n);

  // One flipped payload bit: checksum.
  file[100] ^= 1;
  write_file(path, file, n);
  expect_miss(k, "checksum mismatch");
  file[100] ^= 1;
  // Truncated anywhere: a miss.
  write_file(path, file, 20);
  expect_miss(k, "truncated header");
  write_file(path, file, n - 1);
  expect_miss(k, "wrong size");
  // Another format, another magic: foreign.
  write_file(path, "#!/bin/sh\necho not an object file\n", 34);
  expect_miss(k, "truncated header");
  unsigned char foreign[2048];
  memcpy(foreign, file, n);
  foreign[0] = 'X';
  write_file(path, foreign, n);
  expect_miss(k, "foreign file");
  // The right file under another key's name.
  tj_cache_key_t other = key_of("gemm", "skylake");
  char other_path[512];
  tj_cache_key_format(other, hex);
  snprintf(other_path, sizeof(other_path), "%s/%s.tjo", g_dir, hex);
  write_file(other_path, file, n);
  expect_miss(other, "key mismatch");
  // A store rewrites the bad file.
  CHECK_OK(tj_disk_cache_store(g_dir, k, payload, sizeof(payload)));
  CHECK_OK(tj_disk_cache_load(NULL, g_dir, k, tj_allocator_system(), &bytes,
                              &size, &hit, &why));
  CHECK(hit);
  free(bytes);
  unlink(path);
  unlink(other_path);
}

TEST(disk_cache_disabled_and_unwritable) {
  tj_cache_key_t k = key_of("a", "b");
  void* bytes = NULL;
  size_t size = 0;
  bool hit = true;
  const char* why = NULL;
  CHECK_OK(tj_disk_cache_load(NULL, "", k, tj_allocator_system(), &bytes, &size,
                              &hit, &why));
  CHECK(!hit);
  CHECK_OK(tj_disk_cache_store("", k, "x", 1));
  // A regular file where the directory should be: a status, not a crash.
  write_file("/tmp/tj-cache-test-file", "x", 1);
  CHECK_STATUS(TJ_STATUS_BACKEND_FAILURE, "cannot create directory",
               tj_disk_cache_store("/tmp/tj-cache-test-file/sub", k, "x", 1));
  unlink("/tmp/tj-cache-test-file");
  char dir[256];
  tj_disk_cache_dir(NULL, "", dir, sizeof(dir));
  CHECK_STREQ("", dir);
  tj_disk_cache_dir(NULL, "/somewhere", dir, sizeof(dir));
  CHECK_STREQ("/somewhere", dir);
  tj_disk_cache_dir(NULL, NULL, dir, sizeof(dir));
  CHECK_STREQ("", dir);
  // NULL takes the context's default (settings_test.c covers how it comes
  // from the environment); the compile option beats it.
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  o.cache_dir = "/from/options";
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&o, &ctx));
  tj_disk_cache_dir(ctx, NULL, dir, sizeof(dir));
  CHECK_STREQ("/from/options", dir);
  tj_disk_cache_dir(ctx, "/somewhere", dir, sizeof(dir));
  CHECK_STREQ("/somewhere", dir);
  tj_disk_cache_dir(ctx, "", dir, sizeof(dir));
  CHECK_STREQ("", dir);
  tj_context_destroy(ctx);
}

static tj_context_t* collecting_context(tj_test_diagnostics_t* d) {
  tj_context_options_t o;
  tj_context_options_initialize(&o);
  tj_test_collect_into(&o, d);
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(&o, &ctx));
  return ctx;
}

static void expect_miss_in(tj_context_t* ctx, const char* dir,
                           tj_cache_key_t key, const char* reason) {
  void* bytes = NULL;
  size_t size = 0;
  bool hit = true;
  const char* why = NULL;
  CHECK_OK(tj_disk_cache_load(ctx, dir, key, tj_allocator_system(), &bytes,
                              &size, &hit, &why));
  CHECK(!hit);
  CHECK(bytes == NULL);
  CHECK_STREQ(reason, why);
}

static void expect_hit_in(const char* dir, tj_cache_key_t key) {
  void* bytes = NULL;
  size_t size = 0;
  bool hit = false;
  const char* why = NULL;
  CHECK_OK(tj_disk_cache_load(NULL, dir, key, tj_allocator_system(), &bytes,
                              &size, &hit, &why));
  CHECK(hit);
  free(bytes);
}

static void entry_path(const char* dir, tj_cache_key_t key, char* out,
                       size_t size) {
  char hex[33];
  tj_cache_key_format(key, hex);
  snprintf(out, size, "%s/%s.tjo", dir, hex);
}

// A FIFO, a symbolic link (even to a valid entry) or a directory where a
// file should be: a miss, at once; a store then replaces the FIFO and the
// link (not what the link points to).
TEST(disk_cache_non_regular_files_are_misses) {
  alarm(60);  // a blocking open of the FIFO fails the test here
  char dir[256], path[512], good[512];
  snprintf(dir, sizeof(dir), "/tmp/tj-cache-test-%d/kinds", (int)getpid());
  tj_cache_key_t k = key_of("kinds", "x86"), other = key_of("other", "x86");
  CHECK_OK(tj_disk_cache_store(dir, other, "payload", 7));
  entry_path(dir, k, path, sizeof(path));
  entry_path(dir, other, good, sizeof(good));

  CHECK(mkfifo(path, 0600) == 0);
  expect_miss_in(NULL, dir, k, "not a regular file");
  CHECK_OK(tj_disk_cache_store(dir, k, "payload", 7));
  expect_hit_in(dir, k);

  unlink(path);
  CHECK(symlink(good, path) == 0);  // a valid file, but through a link
  expect_miss_in(NULL, dir, k, "a symbolic link");
  unlink(path);
  CHECK(symlink("/dev/zero", path) == 0);
  expect_miss_in(NULL, dir, k, "a symbolic link");
  CHECK_OK(tj_disk_cache_store(dir, k, "payload", 7));
  struct stat st;
  CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode));
  CHECK(stat("/dev/zero", &st) == 0 && S_ISCHR(st.st_mode));
  expect_hit_in(dir, k);

  unlink(path);
  CHECK(mkdir(path, 0700) == 0);
  expect_miss_in(NULL, dir, k, "not a regular file");
  rmdir(path);
  alarm(0);
  snprintf(dir, sizeof(dir), "/tmp/tj-cache-test-%d", (int)getpid());
  tj_test_remove_tree(dir);
}

// chown to another user; false (with a message) where that is impossible.
static bool give_away(const char* path) {
  if (chown(path, 65534, 65534) == 0) return true;
  printf("# skipped: chown %s: %s (needs root)\n", path, strerror(errno));
  return false;
}

// A file another user owns or may write is a miss with one warning per
// context and directory; the store that follows makes it ours again.
TEST(disk_cache_foreign_files_are_misses_with_a_warning) {
  alarm(60);
  char dir[256], path[512];
  snprintf(dir, sizeof(dir), "/tmp/tj-cache-test-%d/foreign", (int)getpid());
  tj_cache_key_t k = key_of("foreign", "x86"), k2 = key_of("foreign2", "x86");
  CHECK_OK(tj_disk_cache_store(dir, k, "payload", 7));
  CHECK_OK(tj_disk_cache_store(dir, k2, "payload", 7));
  entry_path(dir, k, path, sizeof(path));
  tj_test_diagnostics_t d;
  tj_context_t* ctx = collecting_context(&d);

  CHECK(chmod(path, 0666) == 0);
  expect_miss_in(ctx, dir, k, "writable by group or others");
  CHECK_EQ_INT(1, d.warnings);
  CHECK_CONTAINS(d.text, "cache: not loading");
  CHECK_CONTAINS(d.text, "writable by group or others (uid ");
  CHECK_CONTAINS(d.text, "mode 0666");
  expect_miss_in(ctx, dir, k, "writable by group or others");
  CHECK_EQ_INT(1, d.warnings);  // once
  CHECK(chmod(path, 0600) == 0);
  expect_hit_in(dir, k);

  char path2[512];
  entry_path(dir, k2, path2, sizeof(path2));
  if (give_away(path) && give_away(path2)) {
    expect_miss_in(ctx, dir, k, "owned by another user");
    CHECK_EQ_INT(2, d.warnings);
    CHECK_CONTAINS(d.text, "owned by another user (uid 65534");
    expect_miss_in(ctx, dir, k2, "owned by another user");
    CHECK_EQ_INT(2, d.warnings);  // once per directory
    CHECK_OK(tj_disk_cache_store(dir, k, "payload", 7));
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_uid == geteuid());
    CHECK_EQ_INT(0600, st.st_mode & 0777);
    expect_hit_in(dir, k);
  }
  tj_context_destroy(ctx);
  alarm(0);
  snprintf(dir, sizeof(dir), "/tmp/tj-cache-test-%d", (int)getpid());
  tj_test_remove_tree(dir);
}

// tj_disk_cache_open: creates the directory 0700; refuses one that others
// may write or that is not ours (and one under a parent that others may
// write without the sticky bit), with one warning naming the rule.
TEST(disk_cache_open_trusts_only_our_directories) {
  alarm(60);
  char root[256], dir[320], out[1024];
  snprintf(root, sizeof(root), "/tmp/tj-cache-test-%d", (int)getpid());
  snprintf(dir, sizeof(dir), "%s/open/a/b", root);
  tj_test_diagnostics_t d;
  tj_context_t* ctx = collecting_context(&d);

  tj_disk_cache_open(ctx, dir, out, sizeof(out));
  CHECK_STREQ(dir, out);  // /tmp is sticky: a parent others may write
  struct stat st;
  CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
  CHECK_EQ_INT(0700, st.st_mode & 0777);
  CHECK_EQ_INT(0, d.warnings);
  tj_disk_cache_open(ctx, "", out, sizeof(out));
  CHECK_STREQ("", out);
  CHECK_EQ_INT(0, d.warnings);

  CHECK(chmod(dir, 0777) == 0);
  tj_disk_cache_open(ctx, dir, out, sizeof(out));
  CHECK_STREQ("", out);
  CHECK_EQ_INT(1, d.warnings);
  CHECK_CONTAINS(d.text, "cache: not using the disk cache in");
  CHECK_CONTAINS(d.text, "the directory is writable by group or others");
  CHECK_CONTAINS(d.text, "mode 0777");
  CHECK_CONTAINS(d.text, "only the memory cache is used");
  tj_disk_cache_open(ctx, dir, out, sizeof(out));
  CHECK_STREQ("", out);
  CHECK_EQ_INT(1, d.warnings);   // once per context and directory
  CHECK(chmod(dir, 0770) == 0);  // group-writable: no better
  tj_test_diagnostics_t d2;
  tj_context_t* ctx2 = collecting_context(&d2);
  tj_disk_cache_open(ctx2, dir, out, sizeof(out));
  CHECK_STREQ("", out);
  CHECK_EQ_INT(1, d2.warnings);  // another context is told too
  CHECK(chmod(dir, 0700) == 0);

  if (give_away(dir)) {
    memset(&d2, 0, sizeof(d2));
    tj_disk_cache_open(ctx2, dir, out, sizeof(out));
    CHECK_STREQ("", out);
    CHECK_CONTAINS(d2.text, "the directory belongs to another user");
    CHECK(chown(dir, geteuid(), getegid()) == 0);
  }

  // A parent that others may write, without the sticky bit: anyone could
  // swap our directory for theirs.
  char parent[320];
  snprintf(parent, sizeof(parent), "%s/open/a", root);
  CHECK(chmod(parent, 0777) == 0);
  memset(&d2, 0, sizeof(d2));
  tj_disk_cache_open(ctx2, dir, out, sizeof(out));
  CHECK_STREQ("", out);
  CHECK_CONTAINS(d2.text, "a parent directory is writable by group or others");
  CHECK_CONTAINS(d2.text, "/open/a (uid");
  CHECK(chmod(parent, 0777 | S_ISVTX) == 0);  // sticky, as /tmp: trusted
  tj_disk_cache_open(ctx2, dir, out, sizeof(out));
  CHECK_STREQ(dir, out);
  CHECK(chmod(parent, 0700) == 0);

  // The cache directory through a link is judged by its real path.
  char link[320];
  snprintf(link, sizeof(link), "%s/link", root);
  CHECK(symlink(dir, link) == 0);
  tj_disk_cache_open(ctx2, link, out, sizeof(out));
  CHECK_STREQ(link, out);

  tj_context_destroy(ctx);
  tj_context_destroy(ctx2);
  alarm(0);
  tj_test_remove_tree(root);
}

int main(void) {
  RUN_TEST(keys_are_length_prefixed_and_stable);
  RUN_TEST(keys_start_with_the_build_id);
  RUN_TEST(memory_cache_hit_miss_and_oom);
  RUN_TEST(disk_cache_round_trip_and_bad_files_are_misses);
  RUN_TEST(disk_cache_disabled_and_unwritable);
  RUN_TEST(disk_cache_non_regular_files_are_misses);
  RUN_TEST(disk_cache_foreign_files_are_misses_with_a_warning);
  RUN_TEST(disk_cache_open_trusts_only_our_directories);
  TEST_MAIN_END();
}
