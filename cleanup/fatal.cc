// cleanup/fatal.cc — die(): see fatal.h.

#include "cleanup/fatal.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace reclaim {

[[noreturn]] void die(const char* what) noexcept {
  std::fprintf(stderr, "cuda-reclaim: fatal: %s (errno %d)\n", what, errno);
  std::abort();
}

}  // namespace reclaim
