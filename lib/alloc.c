// Allocation through the injected tj_allocator_t (Lua's lua_Alloc shape).

#include <stdlib.h>
#include <string.h>

#include "lib/base.h"

static void* system_alloc(void* user_data, void* ptr, size_t old_size,
                          size_t new_size) {
  (void)user_data;
  (void)old_size;
  if (new_size == 0) {
    free(ptr);
    return NULL;
  }
  return realloc(ptr, new_size);
}

tj_allocator_t tj_allocator_system(void) {
  tj_allocator_t a = {system_alloc, NULL};
  return a;
}

void* tj_alloc(tj_allocator_t a, size_t size) {
  if (size == 0) return NULL;
  return a.fn(a.user_data, NULL, 0, size);
}

void* tj_calloc(tj_allocator_t a, size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) return NULL;
  void* p = tj_alloc(a, bytes);
  if (p) memset(p, 0, bytes);
  return p;
}

void* tj_realloc(tj_allocator_t a, void* ptr, size_t old_size,
                 size_t new_size) {
  if (new_size == 0) {
    tj_free(a, ptr, old_size);
    return NULL;
  }
  return a.fn(a.user_data, ptr, ptr ? old_size : 0, new_size);
}

void tj_free(tj_allocator_t a, void* ptr, size_t size) {
  if (ptr) a.fn(a.user_data, ptr, size, 0);
}

char* tj_strdup(tj_allocator_t a, const char* s) {
  size_t n = strlen(s) + 1;
  char* p = tj_alloc(a, n);
  if (p) memcpy(p, s, n);
  return p;
}

void tj_free_string(tj_allocator_t a, char* s) {
  if (s) tj_free(a, s, strlen(s) + 1);
}

tj_status_t tj_array_reserve(tj_allocator_t a, void** items, uint32_t* capacity,
                             uint32_t needed, size_t elem_size) {
  if (needed <= *capacity) return NULL;
  uint64_t new_capacity = *capacity ? (uint64_t)*capacity * 2 : 8;
  while (new_capacity < needed) new_capacity *= 2;
  if (new_capacity > UINT32_MAX) new_capacity = UINT32_MAX;
  if (new_capacity < needed) return tj_status_oom();
  size_t old_bytes = (size_t)*capacity * elem_size;
  size_t new_bytes;
  if (__builtin_mul_overflow((size_t)new_capacity, elem_size, &new_bytes))
    return tj_status_oom();
  void* grown = tj_realloc(a, *items, old_bytes, new_bytes);
  if (!grown) return tj_status_oom();
  *items = grown;
  *capacity = (uint32_t)new_capacity;
  return NULL;
}
