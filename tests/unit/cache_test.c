// Unit tests of jit/cache.c: keys, the per-context memory cache and the
// disk cache's promise that a bad file is a miss, never a crash.

#include "tests/unit/test.h"

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
  CHECK_OK(tj_disk_cache_load(g_dir, key, tj_allocator_system(), &bytes, &size,
                              &hit, &why));
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
  CHECK_OK(tj_disk_cache_load(g_dir, k, tj_allocator_system(), &bytes, &size,
                              &hit, &why));
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
  CHECK_OK(tj_disk_cache_load(g_dir, k, tj_allocator_system(), &bytes, &size,
                              &hit, &why));
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
  CHECK_OK(tj_disk_cache_load("", k, tj_allocator_system(), &bytes, &size, &hit,
                              &why));
  CHECK(!hit);
  CHECK_OK(tj_disk_cache_store("", k, "x", 1));
  // A regular file where the directory should be: a status, not a crash.
  write_file("/tmp/tj-cache-test-file", "x", 1);
  CHECK_STATUS(TJ_STATUS_BACKEND_FAILURE, "cannot create directory",
               tj_disk_cache_store("/tmp/tj-cache-test-file/sub", k, "x", 1));
  unlink("/tmp/tj-cache-test-file");
  char dir[256];
  tj_disk_cache_dir("", dir, sizeof(dir));
  CHECK_STREQ("", dir);
  tj_disk_cache_dir("/somewhere", dir, sizeof(dir));
  CHECK_STREQ("/somewhere", dir);
  setenv("TJ_CACHE_DIR", "/from/env", 1);
  tj_disk_cache_dir(NULL, dir, sizeof(dir));
  CHECK_STREQ("/from/env", dir);
  unsetenv("TJ_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  tj_disk_cache_dir(NULL, dir, sizeof(dir));
  CHECK_STREQ("/xdg/tensorjit", dir);
}

int main(void) {
  RUN_TEST(keys_are_length_prefixed_and_stable);
  RUN_TEST(memory_cache_hit_miss_and_oom);
  RUN_TEST(disk_cache_round_trip_and_bad_files_are_misses);
  RUN_TEST(disk_cache_disabled_and_unwritable);
  TEST_MAIN_END();
}
