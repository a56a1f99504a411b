// The one place that knows LLVM-C's error conventions (STYLE.md §3d):
// LLVMErrorRef, "LLVMBool true = failed + char** message", and NULL returns.
// Everything else in jit/ converts through these functions.

#ifndef TJ_JIT_LLVM_STATUS_H_
#define TJ_JIT_LLVM_STATUS_H_

#include <llvm-c/Error.h>
#include <llvm-c/Types.h>

#include "lib/base.h"

// Consumes |err|. Returns NULL iff |err| is LLVMErrorSuccess; otherwise a
// BACKEND_FAILURE status "<what>: <LLVM's message>".
tj_status_t tj_status_from_llvm_error(LLVMErrorRef err, const char* what);

// For the "LLVMBool failed + char** message" APIs. Takes ownership of
// |message| (disposes it with LLVMDisposeMessage) on every path; |message|
// may be NULL. Returns NULL iff !|failed|.
tj_status_t tj_status_from_llvm_message(LLVMBool failed, char* message,
                                        const char* what);

// For APIs that report failure only by returning NULL: |result| NULL gives
// BACKEND_FAILURE "<what> failed", else NULL.
tj_status_t tj_status_from_llvm_null(const void* result, const char* what);

#endif  // TJ_JIT_LLVM_STATUS_H_
