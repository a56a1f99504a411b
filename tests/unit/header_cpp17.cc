// Compiles include/tensorjit.h as C++17 and calls into the C library.
#include "tensorjit.h"

#include <cstdio>

int main() {
  tj_context_t* ctx = nullptr;
  tj_status_t st = tj_context_create(nullptr, &ctx);
  if (st != nullptr) return 1;
  tj_value_t none = tj_value_none();
  bool ok = tj_value_is_none(none) && tj_version_number() == TJ_VERSION_NUMBER;
  tj_context_destroy(ctx);
  std::printf("C++17: libtensorjit %s\n", tj_version_string());
  return ok ? 0 : 1;
}
