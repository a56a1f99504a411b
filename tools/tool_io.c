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

// Whether the line at |s| (|n| bytes, no newline) is a split marker.
static bool is_split_line(const char* s, size_t n) {
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) --n;
  return n == 8 && memcmp(s, "// -----", 8) == 0;
}

bool tj_tool_for_each_piece(const char* tool, const char* text, size_t length,
                            bool split, tj_tool_piece_fn fn, void* user) {
  bool ok = true;
  size_t start = 0, line_start = 0, newlines = 0, lines_before = 0;
  for (size_t i = 0; i <= length; ++i) {
    if (i < length && text[i] != '\n') continue;
    bool at_split = split && is_split_line(text + line_start, i - line_start);
    if (at_split || i == length) {
      size_t end = at_split ? line_start : length;
      size_t piece = end - start;
      char* buf = malloc(lines_before + piece + 1);
      if (!buf) {
        fprintf(stderr, "%s: out of memory\n", tool);
        return false;
      }
      memset(buf, '\n', lines_before);
      memcpy(buf + lines_before, text + start, piece);
      buf[lines_before + piece] = '\0';
      ok &= fn(buf, lines_before + piece, user);
      free(buf);
      start = i < length ? i + 1 : length;
      lines_before = newlines + 1;
    }
    ++newlines;
    line_start = i + 1;
  }
  return ok;
}

bool tj_tool_is_onnx(const char* path) {
  size_t n = path ? strlen(path) : 0;
  return n > 5 && strcmp(path + n - 5, ".onnx") == 0;
}

tj_status_t tj_tool_load_graph(tj_context_t* context, const char* text,
                               size_t length, const char* path,
                               tj_graph_t** out_graph) {
  if (!tj_tool_is_onnx(path))
    return tj_graph_parse(context, text, length, path, out_graph);
  char dir[4096];
  const char* slash = strrchr(path, '/');
  size_t n = slash ? (size_t)(slash - path) : 0;
  if (n >= sizeof dir) n = sizeof dir - 1;
  memcpy(dir, path, n);
  dir[n] = 0;
  if (!slash) strcpy(dir, ".");
  if (slash == path) strcpy(dir, "/");
  tj_onnx_import_options_t options;
  tj_onnx_import_options_initialize(&options);
  options.base_dir = dir;
  return tj_onnx_import(context, text, length, &options, out_graph);
}
