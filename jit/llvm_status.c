// LLVM-C error styles -> tj_status_t. See llvm_status.h.

#include "jit/llvm_status.h"

#include <errno.h>
#include <string.h>

#include <llvm-c/Core.h>

// LLVM reports a failed mmap or allocation of its own (the JIT's memory
// manager, a buffer) as an error whose text is strerror(ENOMEM): that is
// the caller's OUT_OF_MEMORY, not a backend failure.
static tj_status_code_t code_of(const char* message) {
  if (message && strstr(message, strerror(ENOMEM))) {
    return TJ_STATUS_OUT_OF_MEMORY;
  }
  return TJ_STATUS_BACKEND_FAILURE;
}

tj_status_t tj_status_from_llvm_error(LLVMErrorRef err, const char* what) {
  if (!err) return NULL;
  char* message = LLVMGetErrorMessage(err);  // consumes |err|
  tj_status_t s = tj_status_make(code_of(message), "%s: %s", what,
                                 message ? message : "(no message)");
  LLVMDisposeErrorMessage(message);
  return s;
}

tj_status_t tj_status_from_llvm_message(LLVMBool failed, char* message,
                                        const char* what) {
  tj_status_t s = NULL;
  // LLVMBool true means failure in these APIs.
  if (failed) {
    s = tj_status_make(code_of(message), "%s: %s", what,
                       message && *message ? message : "(no message)");
  }
  if (message) LLVMDisposeMessage(message);
  return s;
}

tj_status_t tj_status_from_llvm_null(const void* result, const char* what) {
  if (result) return NULL;
  return tj_status_make(TJ_STATUS_BACKEND_FAILURE, "%s failed", what);
}
