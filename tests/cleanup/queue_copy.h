// tests/cleanup/queue_copy.h — what each test-only shared object libqueue_copy_*.so exposes: the
// addresses of its own copy of the C entry points (abi/), so that a test can load several copies of
// cleanup/ into one process (RTLD_LOCAL, hidden symbols, as Python loads extensions) and drive each.
#pragma once

#include <stddef.h>

#include "abi/reclaim.h"

extern "C" {

// What a test's owner does with each item: record it (tests/cleanup/release_recorder.h).
typedef void (*queue_copy_release_fn)(void* item, void* context);

struct QueueCopy {
  int (*push)(void* item);
  void (*host_destructor)(void* user_data);
  ptrdiff_t (*drain)(ptrdiff_t max_items);  // the table's drain: the owner's, wherever it is
  size_t (*pending)(void);
  int (*get_stats)(reclaim_stats* out);
  int (*wakeup_fd)(void);
  const reclaim_api* (*api_in_use)(void);
  int (*adopt)(const reclaim_api* api);
  // Makes this copy the owner of its own process queue, releasing with `release(item, context)`;
  // reclaim_own_process_queue()'s result.
  int (*become_owner)(queue_copy_release_fn release, void* context);
  // The owner's close (after become_owner): closes and releases what was queued. Returns the count.
  size_t (*close_as_owner)(void);
};

// The only symbol a libqueue_copy_*.so exports (tests/cleanup/queue_copy.lds).
typedef const QueueCopy* (*QueueCopyFn)(void);

}  // extern "C"
