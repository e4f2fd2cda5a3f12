// tests/cleanup/fd_readable.h — test helper: is a file descriptor readable right now?
#pragma once

#include <poll.h>

namespace reclaim_test {

// Polls without waiting. Any thread.
inline bool readable(int fd) {
  struct pollfd waiter = {fd, POLLIN, 0};
  return ::poll(&waiter, 1, 0) == 1 && (waiter.revents & POLLIN) != 0;
}

}  // namespace reclaim_test
