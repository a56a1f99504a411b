// Helpers shared by the command-line tools (tools/, tests/tools/).

#ifndef TJ_TOOLS_TOOL_IO_H_
#define TJ_TOOLS_TOOL_IO_H_

#include <stdbool.h>
#include <stddef.h>

#include "tensorjit.h"

// Reads all of |path| ("-" is stdin) into a malloc'd buffer (not
// NUL-terminated; free it) and its length into |*out_length|. On failure
// prints "<tool>: cannot open/read '<path>'" to stderr and returns NULL.
char* tj_tool_read_file(const char* tool, const char* path, size_t* out_length);

// Calls |fn| on each piece of |text| between lines "// -----" (the .tj
// convention for several functions in one file), or on the whole text when
// |split| is false. Each piece is passed behind as many newlines as precede
// it in |text| (a NUL-terminated malloc'd copy, freed after the call), so
// that parse errors carry the line numbers of the whole file. Returns
// whether every call returned true; every piece is visited even after a
// failure. Prints "<tool>: out of memory" and returns false when a copy
// cannot be made.
typedef bool (*tj_tool_piece_fn)(const char* piece, size_t length, void* user);
bool tj_tool_for_each_piece(const char* tool, const char* text, size_t length,
                            bool split, tj_tool_piece_fn fn, void* user);

// True when |path| names an ONNX model (it ends in ".onnx").
bool tj_tool_is_onnx(const char* path);

// The graph in |text| (|length| bytes read from |path|): parsed as .tj, or
// imported as an ONNX model when |path| is one (tj_onnx_import, external
// data read beside |path|).
tj_status_t tj_tool_load_graph(tj_context_t* context, const char* text,
                               size_t length, const char* path,
                               tj_graph_t** out_graph);

#endif  // TJ_TOOLS_TOOL_IO_H_
