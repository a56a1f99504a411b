// Small filesystem helpers shared by the layers that write files (the disk
// kernel cache in jit/, TJ_DUMP_DIR's dumps in lib/).

#ifndef TJ_LIB_FS_H_
#define TJ_LIB_FS_H_

#include <sys/types.h>

// mkdir -p |path|: creates it and each missing parent with |mode| (an
// existing directory is left as it is). 0 when |path| is a directory
// afterwards, else an errno (ENOTDIR when it is something else,
// ENAMETOOLONG past 4095 bytes).
int tj_make_directories(const char* path, mode_t mode);

#endif  // TJ_LIB_FS_H_
