// cleanup/reclaim_c_api.cc — the C entry points of cleanup/reclaim.h: over reclaim::global_queue(), or
// forwarded to another copy's queue after reclaim_adopt().

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

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

// --- this copy's own queue, as a table ---------------------------------------------------------------

int own_push(void* item) { return static_cast<int>(reclaim::global_queue().push(item)); }

void own_host_destructor(void* user_data) { (void)reclaim::global_queue().push(user_data); }

size_t own_drain(reclaim_release_fn release, void* context, size_t max_items) {
  if (release == nullptr) return 0;
  CRelease adapter{release, context};
  return reclaim::global_queue().drain(call_c_release, &adapter, max_items);
}

size_t own_close(reclaim_release_fn release, void* context) {
  if (release == nullptr) return reclaim::global_queue().close(nullptr, nullptr);
  CRelease adapter{release, context};
  return reclaim::global_queue().close(call_c_release, &adapter);
}

int own_is_closed() { return reclaim::global_queue().is_closed() ? 1 : 0; }

size_t own_pending() { return reclaim::global_queue().pending(); }

int own_get_stats(reclaim_stats* out, size_t size) {
  if (out == nullptr) return -1;
  const reclaim::CounterSnapshot c = reclaim::global_queue().snapshot();
  const reclaim_stats all{c.enqueued,    c.released,   c.pending,     c.leaked_after_close, c.rejected,
                          c.abandoned_after_fork, c.drain_calls, c.max_pending, c.wakeups};
  std::memcpy(out, &all, size < sizeof all ? size : sizeof all);
  return 0;
}

int own_wakeup_fd() { return reclaim::global_queue().wakeup_fd(); }

int own_wait(int timeout_ms) { return reclaim::global_queue().wait_for_work(timeout_ms) ? 1 : 0; }

void own_notify() { reclaim::global_queue().notify(); }

int own_write_report(int fd) {
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

// Constant-initialized and never destroyed (invariant 2): another copy may call through it during exit().
const reclaim_queue_ops kOwnOps = {
    RECLAIM_QUEUE_OPS_VERSION, sizeof(reclaim_queue_ops),
    own_push,                  own_host_destructor,
    own_drain,                 own_close,
    own_is_closed,             own_pending,
    own_get_stats,             own_wakeup_fd,
    own_wait,                  own_notify,
    own_write_report,
};

// The table in use. Null until the first use (which binds kOwnOps) or reclaim_adopt(); written once,
// by a compare-exchange from null (acq_rel), never again. Readers load it with acquire. Zero-initialized
// static storage: no constructor, no destructor, valid from load to exit.
std::atomic<const reclaim_queue_ops*> g_ops{nullptr};

// One acquire load on every call after the first.
const reclaim_queue_ops& ops() noexcept {
  const reclaim_queue_ops* bound = g_ops.load(std::memory_order_acquire);
  if (bound != nullptr) return *bound;
  const reclaim_queue_ops* expected = nullptr;
  if (g_ops.compare_exchange_strong(expected, &kOwnOps, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
    return kOwnOps;
  }
  return *expected;  // a racing first use or adoption won
}

}  // namespace

extern "C" {

int reclaim_push(void* item) { return ops().push(item); }

void reclaim_host_destructor(void* user_data) { ops().host_destructor(user_data); }

size_t reclaim_drain(reclaim_release_fn release, void* context, size_t max_items) {
  return ops().drain(release, context, max_items);
}

size_t reclaim_close(reclaim_release_fn release, void* context) { return ops().close(release, context); }

int reclaim_is_closed(void) { return ops().is_closed(); }

size_t reclaim_pending(void) { return ops().pending(); }

int reclaim_get_stats(reclaim_stats* out) {
  if (out == nullptr) return -1;
  // An older owner fills fewer fields; the rest read as 0.
  std::memset(out, 0, sizeof *out);
  return ops().get_stats(out, sizeof *out);
}

int reclaim_wakeup_fd(void) { return ops().wakeup_fd(); }

int reclaim_wait(int timeout_ms) { return ops().wait(timeout_ms); }

void reclaim_notify(void) { ops().notify(); }

int reclaim_write_report(int fd) { return ops().write_report(fd); }

const reclaim_queue_ops* reclaim_queue_ops_in_use(void) { return &ops(); }

int reclaim_adopt(const reclaim_queue_ops* adopted) {
  if (adopted == nullptr || adopted->version < 1 || adopted->size < sizeof(reclaim_queue_ops)) return -1;
  const reclaim_queue_ops* expected = nullptr;
  if (g_ops.compare_exchange_strong(expected, adopted, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
    return 0;
  }
  return expected == adopted ? 0 : -1;
}

}  // extern "C"
