// Structural checks of an object file read back from the disk cache, made
// before it reaches a linker (LLVM's JITLink, the CUDA driver).
//
// The cache's checksum (cache.h) only catches accidents: a torn write, a
// flipped bit. Whoever rewrites a file can recompute it. These checks
// catch what a corrupt but consistent file would otherwise feed the
// linker: an ELF header, section table, symbol table or relocation that
// points outside the file or its section, a wrong machine, a missing entry
// point. They are not a verifier: an object that is well formed but whose
// code was changed still links and runs. Only the trust rules of the disk
// cache (who may write it: tj_executable.h, "The kernel cache and its
// threat model") protect against that.

#ifndef TJ_JIT_OBJECT_CHECK_H_
#define TJ_JIT_OBJECT_CHECK_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tj_object_expect_t {
  uint16_t machine;  // e_machine: EM_X86_64, EM_CUDA
  uint16_t type;     // e_type: ET_REL, ET_EXEC; 0: either
  // Symbols the object must define (global or weak, in one of its
  // sections), e.g. the entry points the caller looks up next.
  const char* const* symbols;
  size_t num_symbols;
} tj_object_expect_t;

// NULL when |data| (|size| bytes) is a well-formed little-endian ELF64
// object as |expect| describes; else why not (static text).
const char* tj_object_check(const void* data, size_t size,
                            const tj_object_expect_t* expect);

#endif  // TJ_JIT_OBJECT_CHECK_H_
