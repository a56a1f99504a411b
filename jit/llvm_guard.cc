// The C++ side of jit/llvm_guard.h: the only C++ in the library, because
// only C++ can catch what LLVM throws.

#include "jit/llvm_guard.h"

#include <sys/mman.h>

#include <atomic>
#include <new>

#include <llvm/Support/ErrorHandling.h>

namespace {

// LLVM's allocators call this instead of aborting. It must not return;
// throwing makes their failure look like operator new's, which
// tj_llvm_guard catches.
[[noreturn]] void throw_bad_alloc(void*, const char*, bool) {
  throw std::bad_alloc();
}

// Installed once per process, on first use. The handler is LLVM's global
// one; a host that uses LLVM itself and installed its own keeps ours
// afterwards (LLVM offers no way to chain them).
struct handler_installer {
  handler_installer() {
    llvm::install_bad_alloc_error_handler(throw_bad_alloc);
  }
};

}  // namespace

static std::atomic<size_t> g_headroom{TJ_LLVM_HEADROOM_BYTES};

extern "C" void tj_llvm_set_headroom(size_t bytes) { g_headroom = bytes; }

extern "C" tj_status_t tj_llvm_headroom(void) {
  size_t bytes = g_headroom;
  // PROT_NONE and MAP_NORESERVE: address space only, nothing committed, so
  // the probe costs two system calls and no memory.
  if (bytes == 0) return nullptr;
  void* p = mmap(nullptr, bytes, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return tj_status_oom();
  munmap(p, bytes);
  return nullptr;
}

extern "C" tj_status_t tj_llvm_guard(tj_llvm_guarded_fn fn, void* arg,
                                     bool* out_interrupted) {
  *out_interrupted = false;
  try {
    static handler_installer installer;  // thread-safe, once
    return fn(arg);
  } catch (const std::bad_alloc&) {
    *out_interrupted = true;
    return tj_status_oom();
  } catch (...) {
    *out_interrupted = true;
    return tj_internal("LLVM threw an exception that was not bad_alloc");
  }
}
