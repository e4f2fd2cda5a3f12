// bindings/drain.cc — see drain.h.

#include "bindings/drain.h"

#include <atomic>

#include "abi/reclaim.h"
#include "bindings/host_calls.h"
#include "bindings/python_compat.h"
#include "bindings/release_loop.h"
#include "cleanup/reclaim_queue.h"
#include "graph/counters.h"
#include "handback/process_barrier.h"

namespace reclaim::bindings {
namespace {

// Releases (drains and closes) in progress on this thread: a finalizer or call they run sees it above 0.
thread_local int t_releasing = 0;

struct Releasing {
  Releasing() noexcept { ++t_releasing; }
  ~Releasing() { --t_releasing; }
  Releasing(const Releasing&) = delete;
  Releasing& operator=(const Releasing&) = delete;
};

// The release action, one batch at a time (bindings/release_loop.h): a plain reference is Py_DECREF'd in
// the loop; a host call or host-node call runs here (host_calls.h). A finalizer's exception goes to
// sys.unraisablehook (CPython does that itself for __del__; the loop catches what a C-level dealloc leaves
// set) and never stops the drain. Requires the GIL.
void release_references(reclaim::ReleaseBatch* batch, void*) {
  release_batch(batch, host_item_type(), release_queued_item);
}

// The automatic drain thread's: as release_references, and before each item it looks at its worker's
// stop flag (`context`): once stopped, the drain requeues the rest at the front of the queue and returns.
void release_references_until_stopped(reclaim::ReleaseBatch* batch, void* context) {
  release_batch(batch, host_item_type(), release_queued_item, static_cast<const std::atomic<bool>*>(context));
}

// The caller's exception, kept aside while finalizers run (a drain may be called from a finalizer that
// runs with an exception set) and restored afterwards. Deliberately not RAII: CPython ends a daemon
// thread that takes the GIL during finalization with a forced unwind (pthread_exit), which must not run
// Python code (PyErr_Restore) on its way out, without the GIL.
using python_compat::restore_exception;
using python_compat::save_exception;
using python_compat::SavedException;

// Set once by bind_queue() at module init (the GIL serializes it); never changes afterwards.
reclaim::ReclaimQueue* g_queue = nullptr;

// Set (with the GIL) by close_safely() once its final drain has run: the calls are stopped, no call runs, also a
// host-node firing that an interrupted drain took before the close. Cleared in a fork child.
bool g_calls_stopped = false;
}  // namespace

bool bind_queue() noexcept {
  g_queue = reclaim::own_process_queue();
  if (g_queue == nullptr) return false;
  reclaim::set_report_fields(reclaim::graph::format_report_fields);  // the exit report says what CUDA holds
  return true;
}

reclaim::ReclaimQueue& queue() noexcept { return *g_queue; }

bool interpreter_finalizing() noexcept { return python_compat::is_finalizing(); }

Py_ssize_t drain_safely(std::size_t max_items, bool linger, const std::atomic<bool>* stop) {
  if (!queue().maybe_pending() || interpreter_finalizing()) return 0;
  const Releasing releasing;
  const SavedException saved = save_exception();
  reclaim::ReleaseBatchFn action = release_references;
  void* context = nullptr;
  if (stop != nullptr) {
    action = release_references_until_stopped;
    context = const_cast<std::atomic<bool>*>(stop);
  }
  const std::size_t released = linger ? queue().drain_and_linger(action, context, max_items)
                                      : queue().drain(action, context, max_items);
  restore_exception(saved);
  return static_cast<Py_ssize_t>(released);
}

bool calls_stopped() noexcept { return g_calls_stopped; }

bool releasing_on_this_thread() noexcept { return t_releasing > 0; }

void reopen_calls_after_fork() noexcept { g_calls_stopped = false; }

void close_without_release_if_open() noexcept {
  // The barrier first, as close() does: a waiter asleep in it (a C API user's thread, one that the exit's
  // earlier hooks did not reach) returns "not handed back" instead of sleeping through the exit.
  reclaim::handback::shut_process_barrier();
  if (g_queue != nullptr && !g_queue->is_closed()) g_queue->close_without_release();
  open_every_gate();  // CUDA's thread must not wait for a drain that never comes
}

Py_ssize_t close_safely() {
  if (interpreter_finalizing()) {
    // Too late to release anything safely: close so later pushes count as leaked; queued ones stay
    // pending and are reported.
    reclaim::handback::shut_process_barrier();  // as close_without_release_if_open
    queue().close_without_release();
    open_every_gate();  // nothing runs any more: CUDA's thread must not wait for it
    return 0;
  }
  const Releasing releasing;
  const SavedException saved = save_exception();
  const std::size_t released = queue().close(release_references, nullptr);
  // What was queued before the close has run; the calls CUDA has not handed back never will run now, nor
  // will a host-node firing that a drain this close interrupted had already taken.
  g_calls_stopped = true;
  cancel_outstanding_calls();
  restore_exception(saved);
  return static_cast<Py_ssize_t>(released);
}

}  // namespace reclaim::bindings
