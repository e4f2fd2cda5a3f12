// tests/cleanup/queue_copy.cc — body of the test-only shared objects libqueue_copy_*.so: each links its
// own static copy of cleanup/ and exports nothing but queue_copy(), like an extension module that links
// cleanup/ under Bazel.
#include "tests/cleanup/queue_copy.h"

extern "C" __attribute__((visibility("default"))) const QueueCopy* queue_copy(void) {
  static const QueueCopy kCopy = {
      reclaim_push,      reclaim_host_destructor, reclaim_drain,
      reclaim_close,     reclaim_pending,         reclaim_get_stats,
      reclaim_wakeup_fd, reclaim_queue_ops_in_use, reclaim_adopt,
  };
  return &kCopy;
}
