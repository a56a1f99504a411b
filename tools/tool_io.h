// Helpers shared by the command-line tools (tools/, tests/tools/).

#ifndef TJ_TOOLS_TOOL_IO_H_
#define TJ_TOOLS_TOOL_IO_H_

#include <stddef.h>

// Reads all of |path| ("-" is stdin) into a malloc'd buffer (not
// NUL-terminated; free it) and its length into |*out_length|. On failure
// prints "<tool>: cannot open/read '<path>'" to stderr and returns NULL.
char* tj_tool_read_file(const char* tool, const char* path, size_t* out_length);

#endif  // TJ_TOOLS_TOOL_IO_H_
