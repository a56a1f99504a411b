// LLVM's allocation failures, made survivable.
//
// LLVM is C++ built without exception cleanups. When an allocation fails
// inside it, operator new throws std::bad_alloc and LLVM's own allocators
// (safe_malloc, report_bad_alloc_error) abort the process. A library that
// runs inside someone else's process must return OUT_OF_MEMORY instead.
// Two defences:
//  1. tj_llvm_headroom: before a compile enters LLVM, check that the
//     address space left (under an RLIMIT_AS, say) can hold it, by
//     reserving and releasing that much without committing it. Most
//     out-of-memory cases end here, before LLVM holds any state.
//  2. tj_llvm_guard: run the LLVM part of a compile under a C++ catch
//     (jit/llvm_guard.cc), with LLVM's bad-alloc handler set to throw
//     std::bad_alloc instead of aborting, so an allocation failure deep in
//     LLVM unwinds to us and becomes OUT_OF_MEMORY.
// What cannot be recovered: the LLVM objects of the interrupted compile
// (its context, module, target machine and the passes' state on the
// unwound stack) are leaked, because LLVM's frames have no cleanups and
// its data may be half-updated; they are never touched again. Other
// compiles are unaffected and the library stays usable. A failure in a
// function LLVM declares noexcept, or the kernel's OOM killer (a cgroup
// limit rather than an address-space one), still ends the process.

#ifndef TJ_JIT_LLVM_GUARD_H_
#define TJ_JIT_LLVM_GUARD_H_

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "lib/base.h"  // C declarations, C linkage from llvm_guard.cc too

// The address space one LLVM compile of a typical kernel set may need
// beyond what the process has mapped: code generation peaks at a few
// tens of MB for our modules; the guard below catches the rest.
#define TJ_LLVM_HEADROOM_BYTES ((size_t)16 << 20)

// NULL when the headroom (TJ_LLVM_HEADROOM_BYTES unless set below) can
// still be mapped; else OUT_OF_MEMORY. Nothing stays mapped.
tj_status_t tj_llvm_headroom(void);

// Sets the headroom for the whole process; 0 turns the check off, so that
// tests reach the guard. For tests only.
void tj_llvm_set_headroom(size_t bytes);

typedef tj_status_t (*tj_llvm_guarded_fn)(void* arg);

// Returns fn(arg). If an allocation fails inside it (std::bad_alloc, or
// LLVM's bad-alloc handler), returns OUT_OF_MEMORY and sets
// *out_interrupted: fn did not finish, and the LLVM objects it held must be
// abandoned (never used or disposed). Any other C++ exception is
// INTERNAL, also interrupted. |fn| may only hold C resources that the
// caller can free from |arg| (record them there before calling LLVM).
tj_status_t tj_llvm_guard(tj_llvm_guarded_fn fn, void* arg,
                          bool* out_interrupted);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TJ_JIT_LLVM_GUARD_H_
