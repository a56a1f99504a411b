// The CUDA runtime on a real GPU: contexts shared with a host, memory,
// copies, module loading with the driver's error log. Skips (exit 77)
// without a driver or GPU.

#include "tests/cuda/cuda_test_util.h"

static tj_cuda_device_t* g_device;

// Adds 1 to each of n floats: hand-written, so this test needs no LLVM.
static const char kAddOnePtx[] =
    ".version 7.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    ".visible .entry add_one(.param .u64 p, .param .u32 n) {\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<6>;\n"
    "  .reg .f32 %f<3>;\n"
    "  .reg .b64 %rd<5>;\n"
    "  ld.param.u64 %rd1, [p];\n"
    "  ld.param.u32 %r1, [n];\n"
    "  mov.u32 %r2, %ctaid.x;\n"
    "  mov.u32 %r3, %ntid.x;\n"
    "  mov.u32 %r4, %tid.x;\n"
    "  mad.lo.s32 %r5, %r2, %r3, %r4;\n"
    "  setp.ge.u32 %p1, %r5, %r1;\n"
    "  @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mul.wide.u32 %rd3, %r5, 4;\n"
    "  add.s64 %rd4, %rd2, %rd3;\n"
    "  ld.global.f32 %f1, [%rd4];\n"
    "  add.f32 %f2, %f1, 0f3F800000;\n"
    "  st.global.f32 [%rd4], %f2;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

TEST(properties) {
  CHECK(g_device->sm_major >= 1);
  CHECK(g_device->num_sms > 0);
  CHECK(g_device->total_bytes > 0);
  CHECK(g_device->name[0] != '\0');
  CHECK(g_device->cu.driver_version >= 11000);
  const char* arch = tj_cuda_device_arch_name(g_device);
  printf("# arch %s\n", arch ? arch : "(none)");
}

TEST(copies_round_trip) {
  enum { kCount = 1 << 20 };
  size_t bytes = kCount * sizeof(float);
  float* host_in = NULL;
  float* host_out = NULL;
  CHECK_OK(tj_cuda_host_alloc(g_device, bytes, (void**)&host_in));
  CHECK_OK(tj_cuda_host_alloc(g_device, bytes, (void**)&host_out));
  if (!host_in || !host_out) return;
  for (int i = 0; i < kCount; ++i) host_in[i] = (float)i * 0.5f;
  tj_cu_deviceptr_t a = 0, b = 0;
  CHECK_OK(tj_cuda_device_alloc(g_device, bytes, &a));
  CHECK_OK(tj_cuda_device_alloc(g_device, bytes, &b));
  CHECK_OK(tj_cuda_copy_to_device(g_device, a, host_in, bytes));
  CHECK_OK(tj_cuda_copy_on_device(g_device, b, a, bytes));
  CHECK_OK(tj_cuda_fill_bytes(g_device, a, 0, bytes / 2));
  CHECK_OK(tj_cuda_copy_to_host(g_device, host_out, b, bytes));
  CHECK_OK(tj_cuda_device_synchronize(g_device));
  CHECK_EQ_INT(0, memcmp(host_in, host_out, bytes));
  CHECK_OK(tj_cuda_copy_to_host(g_device, host_out, a, bytes));
  CHECK_OK(tj_cuda_device_synchronize(g_device));
  CHECK(host_out[0] == 0.0f && host_out[kCount / 2 - 1] == 0.0f);
  CHECK(host_out[kCount / 2] == (float)(kCount / 2) * 0.5f);
  CHECK_OK(tj_cuda_device_free(g_device, a));
  CHECK_OK(tj_cuda_device_free(g_device, b));
  tj_cuda_host_free(g_device, host_in);
  tj_cuda_host_free(g_device, host_out);
}

TEST(allocator_on_the_device) {
  tj_cu_deviceptr_t p = 0, q = 0;
  CHECK_OK(tj_cuda_device_alloc(g_device, 3 << 20, &p));
  CHECK_OK(tj_cuda_device_free(g_device, p));
  CHECK_OK(tj_cuda_device_alloc(g_device, 3 << 20, &q));
  CHECK_EQ_INT(p, q);  // served from the cache on the same stream
  CHECK_OK(tj_cuda_device_free(g_device, q));
  tj_cuda_allocator_stats_t s;
  tj_cuda_allocator_stats(g_device->allocator, &s);
  CHECK(s.num_cache_hits >= 1);
  CHECK_OK(tj_cuda_allocator_release_cached(g_device->allocator));
  tj_cuda_allocator_stats(g_device->allocator, &s);
  CHECK_EQ_INT(0, s.bytes_reserved);
  // More than the device has is OUT_OF_MEMORY, not a crash.
  tj_cu_deviceptr_t huge = 1;
  CHECK_STATUS(
      TJ_STATUS_OUT_OF_MEMORY, "",
      tj_cuda_device_alloc(g_device, g_device->total_bytes * 2, &huge));
  CHECK_EQ_INT(0, huge);
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "did not allocate",
               tj_cuda_device_free(g_device, 0x1234000));
}

TEST(module_load_and_launch) {
  tj_cuda_module_t* module = NULL;
  CHECK_OK(tj_cuda_module_load(g_device, kAddOnePtx, &module));
  if (!module) return;
  tj_cuda_kernel_t kernel;
  CHECK_OK(tj_cuda_kernel_get(module, "add_one", 0, &kernel));
  CHECK(kernel.num_regs > 0);
  CHECK_EQ_INT(0, kernel.local_bytes);
  CHECK_STATUS(TJ_STATUS_BACKEND_FAILURE, "CUDA_ERROR_NOT_FOUND",
               tj_cuda_kernel_get(module, "no_such_kernel", 0, &kernel));
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "shared memory",
               tj_cuda_kernel_get(module, "add_one", 1 << 30, &kernel));
  CHECK_OK(tj_cuda_kernel_get(module, "add_one", 0, &kernel));
  enum { kCount = 1000 };
  float host[kCount];
  for (int i = 0; i < kCount; ++i) host[i] = (float)i;
  tj_cu_deviceptr_t p = 0;
  CHECK_OK(tj_cuda_device_alloc(g_device, sizeof(host), &p));
  CHECK_OK(tj_cuda_copy_to_device(g_device, p, host, sizeof(host)));
  unsigned n = kCount;
  void* args[] = {&p, &n};
  tj_cuda_launch_t launch = {{(kCount + 127) / 128, 1, 1}, {128, 1, 1}, 0, 0};
  CHECK_OK(tj_cuda_kernel_launch(&kernel, &launch, args));
  CHECK_OK(tj_cuda_copy_to_host(g_device, host, p, sizeof(host)));
  CHECK_OK(tj_cuda_device_synchronize(g_device));
  int wrong = 0;
  for (int i = 0; i < kCount; ++i) wrong += host[i] != (float)i + 1.0f;
  CHECK_EQ_INT(0, wrong);
  CHECK_OK(tj_cuda_device_free(g_device, p));
  tj_cuda_module_destroy(module);
}

TEST(module_errors_carry_the_jit_log) {
  tj_cuda_module_t* module = (tj_cuda_module_t*)1;
  // An undefined register: ptxas names it in the log.
  const char* bad =
      ".version 7.0\n.target sm_80\n.address_size 64\n"
      ".visible .entry broken() {\n  add.f32 %f1, %f2, 1.0;\n  ret;\n}\n";
  tj_status_t status = tj_cuda_module_load(g_device, bad, &module);
  CHECK(module == NULL);
  CHECK_EQ_INT(TJ_STATUS_BACKEND_FAILURE, tj_status_code(status));
  CHECK_CONTAINS(tj_status_message(status), "cuModuleLoadDataEx");
  CHECK_CONTAINS(tj_status_message(status), "JIT log");
  printf("# %s\n", tj_status_message(status));
  tj_status_free(status);
}

TEST(sharing_the_host_context_and_stream) {
  // As PyTorch would: hand us a stream; we run in its context, on it.
  tj_cuda_device_options_t options;
  tj_cuda_device_options_initialize(&options);
  options.host_stream = g_device->stream;
  tj_cuda_device_t* shared = NULL;
  CHECK_OK(tj_cuda_device_create(tj_allocator_system(), &options, &shared));
  if (shared) {
    CHECK(shared->context == g_device->context);
    CHECK(shared->stream == g_device->stream);
    CHECK(!shared->owns_stream && !shared->owns_primary_context);
    tj_cu_deviceptr_t p = 0;
    CHECK_OK(tj_cuda_device_alloc(shared, 4096, &p));
    CHECK_OK(tj_cuda_fill_bytes(shared, p, 7, 4096));
    CHECK_OK(tj_cuda_device_synchronize(shared));
    CHECK_OK(tj_cuda_device_free(shared, p));
    tj_cuda_device_destroy(shared);
  }
  // The calling thread's current context, left current afterwards.
  CHECK_OK(tj_cuda_device_enter(g_device));
  tj_cuda_device_options_initialize(&options);
  options.use_current_context = true;
  tj_cuda_device_t* current = NULL;
  CHECK_OK(tj_cuda_device_create(tj_allocator_system(), &options, &current));
  tj_cu_context_t still = NULL;
  g_device->cu.cuCtxGetCurrent(&still);
  CHECK(still == g_device->context);
  tj_cuda_device_leave(g_device);
  if (current) {
    CHECK(current->context == g_device->context);
    CHECK(current->owns_stream);
    tj_cuda_device_destroy(current);
  }
  // Without a current context, use_current_context is an error.
  g_device->cu.cuCtxGetCurrent(&still);
  if (!still) {
    CHECK_STATUS(
        TJ_STATUS_INVALID_ARGUMENT, "no CUDA context is current",
        tj_cuda_device_create(tj_allocator_system(), &options, &current));
  }
  tj_cuda_device_options_initialize(&options);
  options.ordinal = 1000;
  CHECK_STATUS(
      TJ_STATUS_INVALID_ARGUMENT, "ordinal 1000",
      tj_cuda_device_create(tj_allocator_system(), &options, &current));
  CHECK(current == NULL);
}

TEST(host_oom_sweep) {
  for (long fail_at = 0;; ++fail_at) {
    tj_test_allocator_t t;
    tj_test_allocator_initialize(&t, fail_at);
    tj_cuda_device_t* d = NULL;
    tj_status_t status =
        tj_cuda_device_create(tj_test_allocator_get(&t), NULL, &d);
    tj_cuda_module_t* m = NULL;
    tj_cu_deviceptr_t p = 0;
    if (!status) status = tj_cuda_device_alloc(d, 1000, &p);
    if (!status) status = tj_cuda_module_load(d, kAddOnePtx, &m);
    tj_cuda_module_destroy(m);
    if (p) tj_status_free(tj_cuda_device_free(d, p));
    tj_cuda_device_destroy(d);
    CHECK_EQ_INT(0, t.live_blocks);
    if (!status) break;
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(status));
    tj_status_free(status);
    if (fail_at > 100) break;
  }
}

int main(void) {
  g_device = tj_test_open_device_or_skip();
  RUN_TEST(properties);
  RUN_TEST(copies_round_trip);
  RUN_TEST(allocator_on_the_device);
  RUN_TEST(module_load_and_launch);
  RUN_TEST(module_errors_carry_the_jit_log);
  RUN_TEST(sharing_the_host_context_and_stream);
  RUN_TEST(host_oom_sweep);
  tj_cuda_device_destroy(g_device);
  TEST_MAIN_END();
}
