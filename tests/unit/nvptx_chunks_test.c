// A CUDA program's kernels as chunks (issue 14, cudacold): the kernels of
// the transformer blocks (attention, wgmma GEMMs, row and pointwise
// kernels) compiled for sm_90a with no GPU, once as the one module and
// once as chunks (jit/nvptx.h's tj_nvptx_module_compile_chunks) on one
// and on two threads. Checked: every kernel lies in exactly one chunk and
// its PTX function there is the one the whole module gives it, byte for
// byte but for its block labels' function index ($L__BB<f>_<n>: f is the
// function's place in its module); the chunks do not depend on the thread
// count; nvJitLink (backends/cuda/nvjitlink.h) makes each chunk an sm_90a cubin
// (a CUDA ELF image naming its kernels), reports a PTX it refuses with its log,
// and TJ_NVJITLINK=off leaves the chunks without cubins (a GPU's program
// then hands their PTX to the driver's JIT). The nvJitLink checks need
// libnvJitLink.so.13 (CUDA 13's toolkit or its wheel) and are skipped,
// saying so, without it.

#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_entry.h"
#include "backends/cuda/nvjitlink.h"
#include "jit/nvptx.h"
#include "jit/object_check.h"
#include "lib/env.h"
#include "tests/unit/blocks_graphs.h"
#include "tests/unit/test.h"

static tj_context_t* g_ctx;
static bool g_have_nvjitlink;

// The text of PTX function |entry| in |ptx|: from its ".entry" line to the
// closing brace at the start of a line; NULL when absent. |*len| its length.
static const char* entry_text(const char* ptx, const char* entry, size_t* len) {
  size_t n = strlen(entry);
  for (const char* p = strstr(ptx, ".entry "); p;
       p = strstr(p + 1, ".entry ")) {
    const char* name = p + 7;
    if (strncmp(name, entry, n) != 0 || (name[n] != '(' && name[n] != '\n'))
      continue;
    const char* end = strstr(name, "\n}\n");
    if (!end) return NULL;
    *len = (size_t)(end + 3 - p);
    return p;
  }
  return NULL;
}

// The .entry names of |ptx| into |names| (at most |cap|); their count.
static int entry_names(const char* ptx, char names[][256], int cap) {
  int n = 0;
  for (const char* p = ptx; p && (p = strstr(p, ".entry ")) && n < cap; ++p) {
    p += 7;
    size_t len = strcspn(p, "( \n");
    if (len >= 256) len = 255;
    memcpy(names[n], p, len);
    names[n++][len] = '\0';
  }
  return n;
}

// |text| (|len| bytes) with its block labels' function index dropped
// ($L__BB5_61 -> $L__BB_61): NVPTX numbers a function's blocks by the
// function's place in its module, which a chunk changes; nothing else may
// differ. malloc'd.
static char* without_function_index(const char* text, size_t len) {
  char* out = malloc(len + 1);
  if (!out) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < len;) {
    if (len - i > 6 && memcmp(text + i, "$L__BB", 6) == 0) {
      memcpy(out + o, "$L__BB", 6);
      o += 6;
      size_t j = i + 6;
      while (j < len && text[j] >= '0' && text[j] <= '9') ++j;
      i = j < len && text[j] == '_' ? j : i + 6;
      continue;
    }
    out[o++] = text[i++];
  }
  out[o] = '\0';
  return out;
}

// Whether |bytes| holds |s| (a symbol name in an ELF string table).
static bool holds(const void* bytes, size_t size, const char* s) {
  size_t n = strlen(s);
  const char* b = bytes;
  for (size_t i = 0; i + n <= size; ++i)
    if (memcmp(b + i, s, n) == 0) return true;
  return false;
}

static tj_graph_t* block(int kind, tj_dtype_t dt) {
  tj_graph_t* g = kind ? tj_test_llama_block(g_ctx, dt, 2, 512)
                       : tj_test_gpt_block(g_ctx, dt, 2, 512);
  if (g && tj_graph_finalize(g) != NULL) {
    tj_graph_destroy(g);
    return NULL;
  }
  return g;
}

// The chunks of |g| against its one module: each kernel in one chunk,
// with the same PTX function; with nvJitLink, a cubin per chunk.
static void check_chunks(const char* what, tj_graph_t* g,
                         const tj_compile_options_t* o, bool want_cubins) {
  tj_allocator_t al = tj_allocator_system();
  tj_cuda_offline_ptx_t one, two, single;
  CHECK_OK(tj_cuda_compile_ptx(g, o, TJ_NVPTX_SM_90A, al, &single));
  CHECK_OK(tj_cuda_compile_ptx_chunks(g, o, TJ_NVPTX_SM_90A, 1, al, &one));
  CHECK_OK(tj_cuda_compile_ptx_chunks(g, o, TJ_NVPTX_SM_90A, 2, al, &two));
  printf(
      "# %s: %u kernels, %u chunks, %u threads %.0f ms, 1 thread %.0f ms; "
      "%s\n",
      what, two.num_kernels, two.num_chunks, two.chunk_threads,
      two.chunks_wall_ms, one.chunks_wall_ms, two.assembler);
  CHECK(single.ptx != NULL);
  CHECK(one.ptx == NULL && two.ptx == NULL);
  CHECK_EQ_INT(single.num_kernels, two.num_kernels);
  CHECK_EQ_INT(0, two.num_host_steps);
  // A block's kernels do not fit one chunk's budget.
  CHECK(two.num_chunks > 1);
  CHECK_EQ_INT(one.num_chunks, two.num_chunks);
  CHECK_EQ_INT(2, two.chunk_threads);
  CHECK_EQ_INT(1, one.chunk_threads);
  for (uint32_t c = 0; c < two.num_chunks && one.chunk_ptx && two.chunk_ptx;
       ++c) {
    CHECK(two.chunk_ptx[c] != NULL);
    // The chunks do not depend on the thread count.
    CHECK(one.chunk_ptx[c] && two.chunk_ptx[c] &&
          strcmp(one.chunk_ptx[c], two.chunk_ptx[c]) == 0);
  }
  // TJ_TEST_KEEP=DIR keeps the PTX there, to compare by hand.
  const char* keep = getenv("TJ_TEST_KEEP");
  for (uint32_t c = 0; keep && c <= two.num_chunks; ++c) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%.32s_%s%u.ptx", keep, what,
             c ? "chunk" : "module", c ? c - 1 : 0);
    FILE* f = fopen(path, "w");
    const char* text = c ? two.chunk_ptx[c - 1] : single.ptx;
    if (f && text) fputs(text, f);
    if (f) fclose(f);
  }
  static char names[128][256];
  int n = single.ptx ? entry_names(single.ptx, names, 128) : 0;
  CHECK_EQ_INT(single.num_kernels, n);
  bool wgmma = false, attention = false, pointwise = false;
  for (int i = 0; i < n; ++i) {
    size_t len1 = 0;
    const char* f1 = entry_text(single.ptx, names[i], &len1);
    CHECK(f1 != NULL);
    int found = 0;
    for (uint32_t c = 0; c < two.num_chunks && two.chunk_ptx; ++c) {
      size_t len2 = 0;
      const char* f2 = two.chunk_ptx[c]
                           ? entry_text(two.chunk_ptx[c], names[i], &len2)
                           : NULL;
      if (!f2) continue;
      ++found;
      char* a = f1 ? without_function_index(f1, len1) : NULL;
      char* b = without_function_index(f2, len2);
      bool same = a && b && strcmp(a, b) == 0;
      free(a);
      free(b);
      if (!same)
        fprintf(stderr, "  %s: %s differs in chunk %u\n", what, names[i], c);
      CHECK(same);
      if (two.chunk_cubin && two.chunk_cubin[c])
        CHECK(holds(two.chunk_cubin[c], two.chunk_cubin_bytes[c], names[i]));
    }
    CHECK_EQ_INT(1, found);
    if (f1) {
      char* body = strndup(f1, len1);
      bool tensor = body && strstr(body, "wgmma.mma_async") != NULL;
      wgmma |= tensor && strstr(names[i], "matmul") != NULL;
      // The attention node is an opaque group of its own (kir/lower.c).
      attention |= tensor && strstr(names[i], "opaque") != NULL;
      pointwise |= body && !strstr(body, "mma");
      free(body);
    }
  }
  CHECK(wgmma && attention && pointwise);
  static const tj_object_expect_t kCubin = {EM_CUDA, 0, NULL, 0};
  for (uint32_t c = 0; c < two.num_chunks && two.chunk_cubin; ++c) {
    if (!want_cubins) {
      CHECK(two.chunk_cubin[c] == NULL);
      continue;
    }
    CHECK(two.chunk_cubin[c] != NULL);
    if (!two.chunk_cubin[c]) continue;
    const char* bad =
        tj_object_check(two.chunk_cubin[c], two.chunk_cubin_bytes[c], &kCubin);
    if (bad) fprintf(stderr, "  %s: chunk %u: %s\n", what, c, bad);
    CHECK(bad == NULL);
  }
  tj_cuda_offline_ptx_deinitialize(al, &single);
  tj_cuda_offline_ptx_deinitialize(al, &one);
  tj_cuda_offline_ptx_deinitialize(al, &two);
}

TEST(block_chunks_equal_the_module_kernel_by_kernel) {
  for (int kind = 0; kind < 2; ++kind) {
    tj_graph_t* g = block(kind, TJ_DTYPE_BF16);
    CHECK(g != NULL);
    if (!g) continue;
    tj_compile_options_t o;
    tj_compile_options_initialize(&o);
    o.autotune = TJ_AUTOTUNE_OFF;  // the program's own kernels
    check_chunks(kind ? "llama bf16" : "gpt bf16", g, &o, g_have_nvjitlink);
    tj_graph_destroy(g);
  }
}

// TJ_NVJITLINK=off: a context that hides the library compiles the same
// chunks and assembles none (a GPU's program loads their PTX through the
// driver's JIT instead).
TEST(nvjitlink_off_leaves_the_chunks_to_the_driver) {
  setenv("TJ_NVJITLINK", "off", 1);
  tj_context_t* ctx = NULL;
  CHECK_OK(tj_context_create(NULL, &ctx));
  unsetenv("TJ_NVJITLINK");
  if (!ctx) return;
  tj_context_t* saved = g_ctx;
  g_ctx = ctx;
  tj_graph_t* g = block(0, TJ_DTYPE_BF16);
  CHECK(g != NULL);
  if (g) {
    tj_compile_options_t o;
    tj_compile_options_initialize(&o);
    o.autotune = TJ_AUTOTUNE_OFF;
    tj_cuda_offline_ptx_t r;
    CHECK_OK(tj_cuda_compile_ptx_chunks(g, &o, TJ_NVPTX_SM_90A, 2,
                                        tj_allocator_system(), &r));
    CHECK_CONTAINS(r.assembler, "TJ_NVJITLINK=off");
    CHECK(r.num_chunks > 1);
    for (uint32_t c = 0; c < r.num_chunks && r.chunk_cubin; ++c) {
      CHECK(r.chunk_cubin[c] == NULL);
      CHECK(r.chunk_ptx && r.chunk_ptx[c] != NULL);
    }
    tj_cuda_offline_ptx_deinitialize(tj_allocator_system(), &r);
    tj_graph_destroy(g);
  }
  g_ctx = saved;
  tj_context_destroy(ctx);
}

// A missing library is UNSUPPORTED, naming it; a PTX nvJitLink refuses is
// BACKEND_FAILURE carrying its log (ptxas's lines about the instruction).
TEST(nvjitlink_errors_carry_the_log) {
  tj_nvjitlink_t* lib = NULL;
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "/nonexistent/libnvJitLink.so",
               tj_nvjitlink_open(tj_allocator_system(),
                                 "/nonexistent/libnvJitLink.so", &lib));
  CHECK(lib == NULL);
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "off",
               tj_nvjitlink_open(tj_allocator_system(), "off", &lib));
  if (!g_have_nvjitlink) return;
  CHECK_OK(tj_nvjitlink_open(tj_allocator_system(), NULL, &lib));
  if (!lib) return;
  CHECK_CONTAINS(tj_nvjitlink_version(lib), "nvJitLink ");
  static const char kBad[] =
      ".version 8.0\n.target sm_90a\n.address_size 64\n"
      ".visible .entry bad()\n{\n  tj.not.an.instruction;\n  ret;\n}\n";
  void* cubin = NULL;
  size_t size = 0;
  tj_status_t s = tj_nvjitlink_assemble(lib, TJ_NVPTX_SM_90A, kBad,
                                        tj_allocator_system(), &cubin, &size);
  CHECK_EQ_INT(TJ_STATUS_BACKEND_FAILURE, tj_status_code(s));
  printf("# %s\n", tj_status_message(s));
  // ptxas's own lines, from the handle's error log.
  CHECK_CONTAINS(tj_status_message(s), "ptxas");
  CHECK_CONTAINS(tj_status_message(s), "known instruction: 'tj'");
  CHECK(cubin == NULL && size == 0);
  tj_status_free(s);
  // A good one, to tell a broken library from a refused PTX.
  static const char kGood[] =
      ".version 8.0\n.target sm_90a\n.address_size 64\n"
      ".visible .entry good()\n{\n  ret;\n}\n";
  CHECK_OK(tj_nvjitlink_assemble(lib, TJ_NVPTX_SM_90A, kGood,
                                 tj_allocator_system(), &cubin, &size));
  CHECK(cubin != NULL && size > 0 && holds(cubin, size, "good"));
  if (cubin) tj_free(tj_allocator_system(), cubin, size);
  tj_nvjitlink_close(lib);
}

// tj_nvptx_plan_chunks: a heavy kernel alone, light ones packed in order
// up to the budget.
TEST(plan_chunks_by_cost) {
  const uint64_t costs[] = {100, 5000, 300, 300, 3600, 50, 9000, 10};
  uint32_t of[8];
  uint32_t n = tj_nvptx_plan_chunks(costs, 8, 4000, of);
  // 100 -> 0; 5000 alone -> 1; 300, 300, 3600 (sum 4300 >= 4000 closes
  // it after 3600 joins) -> 0; 50 -> 2; 9000 -> 3; 10 -> 2.
  CHECK_EQ_INT(4, n);
  const uint32_t want[] = {0, 1, 0, 0, 0, 2, 3, 2};
  for (int i = 0; i < 8; ++i) CHECK_EQ_INT(want[i], of[i]);
}

int main(void) {
  CHECK_OK(tj_context_create(NULL, &g_ctx));
  tj_nvjitlink_t* lib = NULL;
  tj_status_t s =
      tj_nvjitlink_open(tj_allocator_system(), getenv("TJ_NVJITLINK"), &lib);
  g_have_nvjitlink = s == NULL;
  if (s)
    printf("# no nvJitLink, its checks skipped: %s\n", tj_status_message(s));
  tj_status_free(s);
  tj_nvjitlink_close(lib);
  RUN_TEST(plan_chunks_by_cost);
  RUN_TEST(nvjitlink_errors_carry_the_log);
  RUN_TEST(block_chunks_equal_the_module_kernel_by_kernel);
  RUN_TEST(nvjitlink_off_leaves_the_chunks_to_the_driver);
  tj_context_destroy(g_ctx);
  TEST_MAIN_END();
}
