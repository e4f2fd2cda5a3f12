// cleanup/reclaim_c_api.cc — the C entry points of cleanup/reclaim.h, over reclaim::global_queue().

#include <unistd.h>

#include <cerrno>

#include "cleanup/reclaim.h"
#include "cleanup/reclaim_queue.h"

static_assert(sizeof(reclaim_stats) == sizeof(reclaim::CounterSnapshot),
              "reclaim_stats must mirror reclaim::CounterSnapshot field for field");

namespace {

// Adapts a C release function to ReleaseFn: the C pointer travels in `context`. Not noexcept, so a
// forced unwind (pthread_exit) from inside the C action passes through.
struct CRelease {
  reclaim_release_fn release;
  void* context;
};

void call_c_release(void* item, void* adapter) {
  auto* c = static_cast<CRelease*>(adapter);
  c->release(item, c->context);
}

}  // namespace

extern "C" {

int reclaim_push(void* item) { return static_cast<int>(reclaim::global_queue().push(item)); }

void reclaim_host_destructor(void* user_data) { (void)reclaim::global_queue().push(user_data); }

size_t reclaim_drain(reclaim_release_fn release, void* context, size_t max_items) {
  if (release == nullptr) return 0;
  CRelease adapter{release, context};
  return reclaim::global_queue().drain(call_c_release, &adapter, max_items);
}

size_t reclaim_close(reclaim_release_fn release, void* context) {
  if (release == nullptr) return reclaim::global_queue().close(nullptr, nullptr);
  CRelease adapter{release, context};
  return reclaim::global_queue().close(call_c_release, &adapter);
}

int reclaim_is_closed(void) { return reclaim::global_queue().is_closed() ? 1 : 0; }

size_t reclaim_pending(void) { return reclaim::global_queue().pending(); }

int reclaim_get_stats(reclaim_stats* out) {
  if (out == nullptr) return -1;
  const reclaim::CounterSnapshot c = reclaim::global_queue().snapshot();
  *out = reclaim_stats{c.enqueued,    c.released,   c.pending,     c.leaked_after_close, c.rejected,
                       c.abandoned_after_fork, c.drain_calls, c.max_pending, c.wakeups};
  return 0;
}

int reclaim_wakeup_fd(void) { return reclaim::global_queue().wakeup_fd(); }

int reclaim_wait(int timeout_ms) { return reclaim::global_queue().wait_for_work(timeout_ms) ? 1 : 0; }

void reclaim_notify(void) { reclaim::global_queue().notify(); }

int reclaim_write_report(int fd) {
  char line[512];
  const size_t length = reclaim::format_report(reclaim::global_queue().snapshot(), line, sizeof line);
  size_t done = 0;
  while (done < length) {
    const ssize_t wrote = ::write(fd, line + done, length - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return -1;
    done += static_cast<size_t>(wrote);
  }
  return 0;
}

}  // extern "C"
