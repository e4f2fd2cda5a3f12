// tests/cleanup/queue_copy.h — what each test-only shared object libqueue_copy_*.so exposes: the
// addresses of its own copy of cleanup/'s C entry points, so that a test can load several copies of
// cleanup/ into one process (RTLD_LOCAL, hidden symbols, as Python loads extensions) and drive each.
#pragma once

#include <stddef.h>

#include "cleanup/reclaim.h"

extern "C" {

struct QueueCopy {
  int (*push)(void* item);
  void (*host_destructor)(void* user_data);
  size_t (*drain)(reclaim_release_fn release, void* context, size_t max_items);
  size_t (*close)(reclaim_release_fn release, void* context);
  size_t (*pending)(void);
  int (*get_stats)(reclaim_stats* out);
  int (*wakeup_fd)(void);
  const reclaim_queue_ops* (*ops_in_use)(void);
  int (*adopt)(const reclaim_queue_ops* ops);
};

// The only symbol a libqueue_copy_*.so exports (tests/cleanup/queue_copy.lds).
typedef const QueueCopy* (*QueueCopyFn)(void);

}  // extern "C"
