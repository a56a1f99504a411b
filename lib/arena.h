// A bump allocator of chunks from a tj_allocator_t: the graph's node
// payloads (dims, attributes, names, copied constants) live here and die
// together.

#ifndef TJ_LIB_ARENA_H_
#define TJ_LIB_ARENA_H_

#include "lib/base.h"

typedef struct tj_arena_chunk_t tj_arena_chunk_t;

typedef struct tj_arena_t {
  tj_allocator_t allocator;
  tj_arena_chunk_t* head;  // newest chunk first
  size_t used;             // bytes used in |head|
  size_t total_bytes;      // bytes allocated from |allocator|
} tj_arena_t;

void tj_arena_initialize(tj_arena_t* arena, tj_allocator_t allocator);
// Frees every chunk.
void tj_arena_deinitialize(tj_arena_t* arena);
// |size| bytes aligned to 16, or NULL when the allocator fails. size 0 gives
// a valid unique pointer.
void* tj_arena_alloc(tj_arena_t* arena, size_t size);
// Copies |size| bytes / a NUL-terminated string into the arena.
void* tj_arena_memdup(tj_arena_t* arena, const void* data, size_t size);
char* tj_arena_strdup(tj_arena_t* arena, const char* s);

#endif  // TJ_LIB_ARENA_H_
