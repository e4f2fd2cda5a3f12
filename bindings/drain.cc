// bindings/drain.cc — see drain.h.

#include "bindings/drain.h"

#include "bindings/host_calls.h"
#include "bindings/python_compat.h"
#include "cleanup/queue_drain.h"

namespace reclaim_bindings {
namespace {

// The release action, one batch at a time. Requires the GIL. A plain reference is Py_DECREF'd; a host
// call or host-node call runs here (host_calls.h). A finalizer's exception goes to sys.unraisablehook
// (CPython does that itself for __del__; this catches what a C-level dealloc leaves set) and never stops
// the drain. One tight loop per batch: the thread state is fetched once, and plain references (all but
// host calls) are Py_DECREF'd here without a call. Each object's line is asked for kFetchAhead items
// before its release, so that the fetch overlaps with the releases in between (the drain hands over
// batches without prefetched pointees when the references are mostly the last ones:
// cleanup/queue_drain.h). The fetch looks across the end of a call into the items the same dequeue hands
// over next (batch->available): stopping at the call's end would leave the first kFetchAhead objects of
// every call unfetched, and the queue hands its dequeues over in chunks.
//
// The error indicator is read once per batch, after the loop, and before each host call. A deallocator
// must work with an exception set (CPython's own unwinding releases a frame's references with the
// exception current, and a debug build checks that a deallocator leaves the indicator as it found it),
// so a plain release needs no clean indicator; one that leaves an exception set is a bug that the report
// after the loop still catches (the last such exception of the batch, as CPython's own loops would keep
// it). A host call runs the user's function, which must start clean. Read after every release, the
// indicator cost the release action over an array of dying objects about 5% on one machine; on a 16-core
// Xeon the difference stayed within the run-to-run noise.
constexpr std::size_t kFetchAhead = 8;
void report_leftover_exception(const PyThreadState* thread) {
  if (python_compat::exception_set(thread)) PyErr_WriteUnraisable(nullptr);
}
void release_references(reclaim::ReleaseBatch* batch, void*) {
  const PyThreadState* const thread = PyThreadState_Get();
  const HostItemTypes host = host_item_types();
  void* const* const items = batch->items;
  const std::size_t count = batch->count;
  const std::size_t available = batch->available;
  // The index lives in a register; batch->next is only written (for an unwind), never read back.
  for (std::size_t index = batch->next; index < count; ++index) {
    if (index + kFetchAhead < available) __builtin_prefetch(items[index + kFetchAhead], 1);
    PyObject* const item = static_cast<PyObject*>(items[index]);
    if (host.includes(Py_TYPE(item))) {
      // Reported while batch->next still points at the call: sys.unraisablehook runs Python code, and
      // should it unwind, the call is put back rather than lost.
      report_leftover_exception(thread);
      batch->next = index + 1;
      release_queued_item(item);
    } else {
      batch->next = index + 1;
      Py_DECREF(item);
    }
  }
  report_leftover_exception(thread);
}

// Queued items are Python objects the release action touches at once: the drain prefetches them.
constexpr reclaim::Pointees kObjects = reclaim::Pointees::kPrefetch;

// The quiet release of a drain (ReclaimQueue::drain_quietly): a reference whose count is above one.
// Py_DECREF then only decrements the count (no deallocation, no finalizer: no code runs at all, so nothing
// can see that the drain has not counted it yet), and the drain does it while it copies the batch, when
// the object's line has just arrived. Host calls are left to release_references (they run a call), and so
// is every reference that may be the last. Requires the GIL, which is what keeps the count from reaching
// one meanwhile; in a free-threaded build other threads change counts without it, so nothing is released
// quietly there.
struct QuietDecref {
  HostItemTypes host;
  bool operator()(void* pointer) const noexcept {
#ifdef Py_GIL_DISABLED
    (void)pointer;
    return false;
#else
    PyObject* const item = static_cast<PyObject*>(pointer);
    if (host.includes(Py_TYPE(item)) || Py_REFCNT(item) <= 1) return false;
    Py_DECREF(item);  // an immortal object's count is above one here too, and Py_DECREF leaves it alone
    return true;
#endif
  }
};

// The caller's exception, kept aside while finalizers run (a drain may be called from a finalizer that
// runs with an exception set) and put back afterwards. Deliberately not RAII: CPython ends a daemon
// thread that takes the GIL during finalization with a forced unwind (pthread_exit), which must not run
// Python code (PyErr_Restore) on its way out, without the GIL.
using python_compat::restore_exception;
using python_compat::save_exception;
using python_compat::SavedException;

// Set once by bind_queue() at module init (the GIL serializes it); never changes afterwards.
reclaim::ReclaimQueue* g_queue = nullptr;
}  // namespace

bool bind_queue() noexcept {
  g_queue = reclaim::own_process_queue();
  return g_queue != nullptr;
}

reclaim::ReclaimQueue& queue() noexcept { return *g_queue; }

bool interpreter_finalizing() noexcept { return python_compat::is_finalizing(); }

Py_ssize_t drain_safely(std::size_t max_items, bool linger) {
  if (!queue().maybe_pending() || interpreter_finalizing()) return 0;
  const SavedException saved = save_exception();
  const QuietDecref quiet{host_item_types()};
  const std::size_t released = queue().drain_quietly(release_references, nullptr, max_items, linger, quiet);
  restore_exception(saved);
  return static_cast<Py_ssize_t>(released);
}

Py_ssize_t close_safely() {
  if (interpreter_finalizing()) {
    // Too late to release anything safely: close so later pushes count as leaked; queued ones stay
    // pending and are reported.
    queue().close_without_release();
    return 0;
  }
  const SavedException saved = save_exception();
  const std::size_t released = queue().close(release_references, nullptr, kObjects);
  // What was queued before the close has run; the calls CUDA has not handed back never will run now.
  cancel_outstanding_calls();
  restore_exception(saved);
  return static_cast<Py_ssize_t>(released);
}

}  // namespace reclaim_bindings
