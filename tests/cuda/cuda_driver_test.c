// Opening the driver and converting CUresult values: runs on every machine.
// Usage: cuda_driver_test [STUB_LIBCUDA]; the toolkit's stub libcuda.so,
// when given and present, must be reported as UNSUPPORTED.

#include "backends/cuda/cuda_driver.h"

#include <unistd.h>

#include "tests/unit/test.h"

static const char* g_stub_path;

TEST(missing_library_is_unsupported) {
  tj_cuda_symbols_t symbols;
  memset(&symbols, 0xab, sizeof(symbols));
  CHECK_STATUS(
      TJ_STATUS_UNSUPPORTED,
      "no CUDA driver: dlopen(\"libtj-no-such-driver.so.1\")",
      tj_cuda_symbols_initialize("libtj-no-such-driver.so.1", &symbols));
  CHECK(symbols.library == NULL && symbols.cuInit == NULL);
  // Deinitializing a zeroed table is a no-op.
  tj_cuda_symbols_deinitialize(&symbols);
}

TEST(library_without_symbols_is_unsupported) {
  // libm is a real library but no driver: the first symbol is missing.
  tj_cuda_symbols_t symbols;
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "too old: it lacks cuInit",
               tj_cuda_symbols_initialize("libm.so.6", &symbols));
  CHECK(symbols.library == NULL);
}

TEST(stub_library_is_unsupported) {
  if (!g_stub_path || access(g_stub_path, R_OK) != 0) {
    printf("# skipped: no stub libcuda.so given\n");
    return;
  }
  // The toolkit's stub exports every symbol, and cuInit says it is a stub.
  tj_cuda_symbols_t symbols;
  CHECK_STATUS(TJ_STATUS_UNSUPPORTED, "CUDA_ERROR_STUB_LIBRARY",
               tj_cuda_symbols_initialize(g_stub_path, &symbols));
  CHECK(symbols.library == NULL);
}

static tj_cu_result_t fake_name(tj_cu_result_t error, const char** name) {
  switch (error) {
    case TJ_CUDA_ERROR_NOT_FOUND:
      *name = "CUDA_ERROR_NOT_FOUND";
      return 0;
    case TJ_CUDA_ERROR_NO_DEVICE:
      *name = "CUDA_ERROR_NO_DEVICE";
      return 0;
    case TJ_CUDA_ERROR_INVALID_PTX:
      *name = "CUDA_ERROR_INVALID_PTX";
      return 0;
    default:
      *name = NULL;
      return TJ_CUDA_ERROR_INVALID_VALUE;
  }
}

static tj_cu_result_t fake_string(tj_cu_result_t error, const char** text) {
  if (error == TJ_CUDA_ERROR_NOT_FOUND) {
    *text = "named symbol not found";
    return 0;
  }
  *text = NULL;
  return TJ_CUDA_ERROR_INVALID_VALUE;
}

TEST(result_to_status) {
  tj_cuda_symbols_t symbols;
  memset(&symbols, 0, sizeof(symbols));
  symbols.cuGetErrorName = fake_name;
  symbols.cuGetErrorString = fake_string;
  CHECK(tj_cuda_result_status(&symbols, TJ_CUDA_SUCCESS, "cuInit") == NULL);
  CHECK_STATUS(TJ_STATUS_BACKEND_FAILURE,
               "cuModuleGetFunction: CUDA_ERROR_NOT_FOUND (named symbol not "
               "found)",
               tj_cuda_result_status(&symbols, TJ_CUDA_ERROR_NOT_FOUND,
                                     "cuModuleGetFunction"));
  CHECK_STATUS(
      TJ_STATUS_UNSUPPORTED, "cuInit: CUDA_ERROR_NO_DEVICE",
      tj_cuda_result_status(&symbols, TJ_CUDA_ERROR_NO_DEVICE, "cuInit"));
  CHECK_STATUS(TJ_STATUS_BACKEND_FAILURE, "cuLaunchKernel: CUresult 12345",
               tj_cuda_result_status(&symbols, 12345, "cuLaunchKernel"));
  // Without a driver to ask, known results are still named.
  CHECK_STATUS(TJ_STATUS_BACKEND_FAILURE, "cuX: CUDA_ERROR_INVALID_PTX (218)",
               tj_cuda_result_status(NULL, TJ_CUDA_ERROR_INVALID_PTX, "cuX"));
  CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY,
               tj_cuda_result_code(TJ_CUDA_ERROR_OUT_OF_MEMORY));
  CHECK_EQ_INT(TJ_STATUS_UNSUPPORTED,
               tj_cuda_result_code(TJ_CUDA_ERROR_UNSUPPORTED_PTX_VERSION));
  CHECK_EQ_INT(TJ_STATUS_BACKEND_FAILURE,
               tj_cuda_result_code(TJ_CUDA_ERROR_ILLEGAL_ADDRESS));
  // The macro form names the call.
  const char* ignored;
  tj_status_t status =
      TJ_CU_STATUS(&symbols, cuGetErrorName, (TJ_CUDA_ERROR_UNKNOWN, &ignored));
  CHECK_CONTAINS(tj_status_message(status),
                 "cuGetErrorName: CUDA_ERROR_INVALID_VALUE (1)");
  tj_status_free(status);
}

static tj_status_t uses_return_macro(const tj_cuda_symbols_t* symbols,
                                     int* reached) {
  const char* name;
  TJ_CU_RETURN_IF_ERROR(symbols, cuGetErrorName,
                        (TJ_CUDA_ERROR_NOT_FOUND, &name));
  *reached = 1;
  TJ_CU_RETURN_IF_ERROR(symbols, cuGetErrorString,
                        (TJ_CUDA_ERROR_NO_DEVICE, &name));
  *reached = 2;
  return NULL;
}

TEST(return_if_error) {
  tj_cuda_symbols_t symbols;
  memset(&symbols, 0, sizeof(symbols));
  symbols.cuGetErrorName = fake_name;
  symbols.cuGetErrorString = fake_string;
  int reached = 0;
  CHECK_STATUS(TJ_STATUS_BACKEND_FAILURE, "cuGetErrorString",
               uses_return_macro(&symbols, &reached));
  CHECK_EQ_INT(1, reached);
}

int main(int argc, char** argv) {
  g_stub_path = argc > 1 && argv[1][0] ? argv[1] : NULL;
  RUN_TEST(missing_library_is_unsupported);
  RUN_TEST(library_without_symbols_is_unsupported);
  RUN_TEST(stub_library_is_unsupported);
  RUN_TEST(result_to_status);
  RUN_TEST(return_if_error);
  TEST_MAIN_END();
}
