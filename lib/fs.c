// Filesystem helpers (lib/fs.h).

#include "lib/fs.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

int tj_make_directories(const char* path, mode_t mode) {
  char buf[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof(buf)) return ENAMETOOLONG;
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; ++i) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char saved = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, mode) != 0 && errno != EEXIST) return errno;
    buf[i] = saved;
  }
  struct stat st;
  if (stat(path, &st) != 0) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}
