// Helpers shared by the command-line tools (tools/, tests/tools/).

#ifndef TJ_TOOLS_TOOL_IO_H_
#define TJ_TOOLS_TOOL_IO_H_

#include <stdbool.h>
#include <stddef.h>

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

#endif  // TJ_TOOLS_TOOL_IO_H_
