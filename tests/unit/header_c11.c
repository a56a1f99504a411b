// Compiles include/tensorjit.h alone as strict C11 and links against the
// shared library: the public surface needs nothing else.
#include "tensorjit.h"

#include <stdio.h>

int main(void) {
  tj_context_t* ctx = NULL;
  tj_status_t st = tj_context_create(NULL, &ctx);
  if (st) return 1;
  int ok = tj_version_number() == TJ_VERSION_NUMBER;
  tj_context_destroy(ctx);
  printf("libtensorjit %s\n", tj_version_string());
  return ok ? 0 : 1;
}
