#include "tools/tool_io.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char* tj_tool_read_file(const char* tool, const char* path,
                        size_t* out_length) {
  FILE* f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "%s: cannot open '%s'\n", tool, path);
    return NULL;
  }
  size_t length = 0, capacity = 4096;
  char* data = malloc(capacity);
  while (data) {
    if (length == capacity) {
      char* grown = realloc(data, capacity * 2);
      if (!grown) {
        free(data);
        data = NULL;
        break;
      }
      data = grown;
      capacity *= 2;
    }
    size_t n = fread(data + length, 1, capacity - length, f);
    length += n;
    if (n == 0) break;
  }
  bool error = ferror(f);
  if (f != stdin) fclose(f);
  if (!data || error) {
    fprintf(stderr, "%s: cannot read '%s'\n", tool, path);
    free(data);
    return NULL;
  }
  *out_length = length;
  return data;
}
