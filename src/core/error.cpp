#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace lr {

void assert_failed(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "lowrank: internal error: assertion '%s' failed at %s:%d\n", expr, file,
               line);
  std::abort();
}

}  // namespace lr
