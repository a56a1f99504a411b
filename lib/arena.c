// Chunked bump allocation. Large requests get a chunk of their own so that
// a big copied constant does not waste the rest of a standard chunk.

#include <string.h>

#include "lib/arena.h"

#define TJ_ARENA_CHUNK_BYTES ((size_t)16 * 1024)
// The first chunk is small and each next one twice the last, up to
// TJ_ARENA_CHUNK_BYTES: a kernel's few names (kir/kernel_ir.c; a 24-layer
// stack makes 48 kernels a compile) cost a small allocation, not 16 KiB of
// fresh pages each, and a graph's arena still grows in 16 KiB steps.
#define TJ_ARENA_FIRST_CHUNK_BYTES ((size_t)512)
#define TJ_ARENA_ALIGN ((size_t)16)

struct tj_arena_chunk_t {
  tj_arena_chunk_t* next;
  size_t capacity;  // usable bytes after the header
  size_t bytes;     // total bytes allocated for this chunk
  // 16-byte aligned payload follows the header.
};

static size_t header_size(void) {
  return (sizeof(tj_arena_chunk_t) + TJ_ARENA_ALIGN - 1) &
         ~(TJ_ARENA_ALIGN - 1);
}

static unsigned char* chunk_data(tj_arena_chunk_t* c) {
  return (unsigned char*)c + header_size();
}

void tj_arena_initialize(tj_arena_t* arena, tj_allocator_t allocator) {
  memset(arena, 0, sizeof(*arena));
  arena->allocator = allocator;
}

void tj_arena_deinitialize(tj_arena_t* arena) {
  tj_arena_chunk_t* c = arena->head;
  while (c) {
    tj_arena_chunk_t* next = c->next;
    tj_free(arena->allocator, c, c->bytes);
    c = next;
  }
  arena->head = NULL;
  arena->used = 0;
  arena->total_bytes = 0;
}

void* tj_arena_alloc(tj_arena_t* arena, size_t size) {
  size_t rounded = (size + TJ_ARENA_ALIGN - 1) & ~(TJ_ARENA_ALIGN - 1);
  if (rounded < size) return NULL;
  if (rounded == 0) rounded = TJ_ARENA_ALIGN;
  tj_arena_chunk_t* head = arena->head;
  if (head && head->capacity - arena->used >= rounded) {
    void* p = chunk_data(head) + arena->used;
    arena->used += rounded;
    return p;
  }
  bool dedicated = rounded > TJ_ARENA_CHUNK_BYTES / 4;
  size_t next = TJ_ARENA_FIRST_CHUNK_BYTES;
  if (head) {
    next = head->capacity < TJ_ARENA_CHUNK_BYTES / 2 ? head->capacity * 2
                                                     : TJ_ARENA_CHUNK_BYTES;
  }
  size_t capacity = dedicated ? rounded : next < rounded ? rounded : next;
  size_t bytes = header_size() + capacity;
  if (bytes < capacity) return NULL;
  tj_arena_chunk_t* c = tj_alloc(arena->allocator, bytes);
  if (!c) return NULL;
  c->capacity = capacity;
  c->bytes = bytes;
  arena->total_bytes += bytes;
  if (dedicated && head) {
    // Keep bumping in the current chunk: link the dedicated one behind it.
    c->next = head->next;
    head->next = c;
    return chunk_data(c);
  }
  c->next = head;
  arena->head = c;
  arena->used = rounded;
  return chunk_data(c);
}

void* tj_arena_memdup(tj_arena_t* arena, const void* data, size_t size) {
  void* p = tj_arena_alloc(arena, size);
  if (p && size) memcpy(p, data, size);
  return p;
}

char* tj_arena_strdup(tj_arena_t* arena, const char* s) {
  return tj_arena_memdup(arena, s, strlen(s) + 1);
}
