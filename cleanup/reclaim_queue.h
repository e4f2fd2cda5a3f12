// cleanup/reclaim_queue.h — the reclaim queue: a process-lifetime, lock-free queue of opaque pointers.
//
// Native threads that Python does not own (above all CUDA's callback thread) hand pointers to an owner
// through this queue; the owner releases them later, in a context it knows to be safe. This layer knows
// nothing about what a pointer is: the owner supplies the release action at each drain (bindings/ passes
// Py_DECREF). No Python.h, no cuda.h.
//
// Accounting: the counters and the conservation law are defined once, in cleanup/reclaim_abi.h
// (RECLAIM_COUNTERS); CounterSnapshot below is derived from that list. `pending` is read from the queue
// itself, never derived from the other counters, so that a test of the law can fail.
//
// A push that races with close() ends in exactly one bucket. close() first sets the closed bit in the
// same atomic word whose fetch_add admits each push; a push admitted before the bit (its fetch_add
// precedes close's fetch_or) is waited for and then released by close()'s final drain; a push admitted
// after it only increments leaked_after_close. There is no third outcome, so the exit report can always
// say where every pointer went.
//
// Wake-up: an eventfd becomes readable on the empty→non-empty edge (one write per edge, coalesced), stays
// readable while work is pending, and is cleared by the drain that empties the queue. The one exception
// is a lingering drain (drain_and_linger): it promises to drain again soon, so until end_linger() or its
// next drain, new work does not make the fd readable. The descriptor number never changes for the life of
// the process (fork replaces the object behind it, not the number).
//
// Producers: pushes go through a fixed set of producer slots (QueueOptions::producer_slots), each a
// moodycamel explicit producer that one pushing thread holds for the length of one push. Memory and the
// cost of a drain are therefore bounded by the slot count, not by how many distinct threads ever pushed:
// programs that push from thousands of short-lived threads do not grow the queue. Only when every slot is
// held at once (more threads inside push() at the same instant than there are slots) does a push fall
// back to moodycamel's per-thread implicit producer.
//
// Memory ordering promised to users: everything a thread wrote before push(p) is visible to the thread
// that runs release(p) (the queue's enqueue/dequeue pair synchronizes).

#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "cleanup/reclaim_abi.h"

namespace reclaim {

// Release action supplied by the owner. Called once per pointer, on the thread that drains.
// It should not throw, but it may unwind: CPython ends a thread that re-takes the GIL during finalization
// with pthread_exit, whose forced unwind passes through here. drain() and close() let any unwind pass
// (a noexcept frame would turn it into std::terminate) after putting the rest of their batch back.
using ReleaseFn = void (*)(void* item, void* context);

enum class PushStatus : int {
  kQueued = RECLAIM_QUEUED,                      // stored; will be released by a drain or by close().
  kLeakedAfterClose = RECLAIM_LEAKED_AFTER_CLOSE,  // queue closed; counted in leaked_after_close; untouched.
  kRejected = RECLAIM_REJECTED,                  // storage could not grow (allocation failure); counted; leaked.
  kInvalidArgument = RECLAIM_INVALID_ARGUMENT,   // null pointer; nothing was handed over; nothing counted.
};

// Plain values, one per RECLAIM_COUNTERS entry, in that order (so it has the layout of reclaim_stats).
struct CounterSnapshot {
#define RECLAIM_SNAPSHOT_FIELD_(name, description) std::uint64_t name = 0;
  RECLAIM_COUNTERS(RECLAIM_SNAPSHOT_FIELD_)
#undef RECLAIM_SNAPSHOT_FIELD_

  // True when the conservation law holds for this snapshot. Exact for a closed queue, even while late
  // pushes keep arriving (snapshot() re-reads around pushes in flight); on an open queue a drain in
  // flight may still put a few items in no bucket for the length of its dequeue.
  bool conserved() const noexcept;

  // The same values as the C struct of the ABI.
  reclaim_stats as_c() const noexcept;
};

// Largest reserved capacity accepted (pointers): 2^24, 128 MiB of slots. Larger requests are refused
// (parse_reserved_capacity) rather than letting the block arithmetic overflow.
constexpr std::size_t kMaxReservedCapacity = std::size_t{1} << 24;

struct QueueOptions {
  // Pointer slots reserved up front, so that pushes do not allocate until this many are pending.
  // Rounded up to whole blocks of the underlying queue. 1 to kMaxReservedCapacity.
  std::size_t reserved_capacity = 64 * 1024;
  // Producer slots (see the header comment): how many threads can be inside push() at once before a push
  // falls back to a per-thread producer. Each slot used costs one producer record (about 2 KiB) plus the
  // blocks it holds. At least 1.
  std::size_t producer_slots = 64;
};

// Parses a reserved capacity from text (CUDA_RECLAIM_RESERVED_CAPACITY): a decimal integer from 1 to
// kMaxReservedCapacity, nothing else. Returns true and sets *capacity, or returns false and leaves it.
// Any thread; never touches Python; never blocks.
bool parse_reserved_capacity(const char* text, std::size_t* capacity) noexcept;

// How a queue's producer slots are used (ReclaimQueue::producer_use()).
struct ProducerUse {
  std::size_t slot_count = 0;          // QueueOptions::producer_slots
  std::size_t slots_used = 0;          // slots whose producer exists (each holds its blocks for reuse)
  std::uint64_t overflow_pushes = 0;   // pushes that found every slot held and used a per-thread producer
};

class ReclaimQueue {
 public:
  // Creates an open queue and its eventfd. Allocates; not for the producer path.
  // Aborts the process (with a message on stderr) if no eventfd can be created.
  // Not thread-safe: publish the queue to other threads only after construction.
  explicit ReclaimQueue(const QueueOptions& options = QueueOptions()) noexcept;

  // Deliberately not destroyed in production (see own_process_queue()); tests may destroy an instance once no
  // thread can reach it. Closes its eventfd.
  ~ReclaimQueue();
  ReclaimQueue(const ReclaimQueue&) = delete;
  ReclaimQueue& operator=(const ReclaimQueue&) = delete;

  // Hands `item` over; the queue now owns it until a drain releases it (or it is counted as leaked or
  // rejected). Steals the pointer: the caller must not use it afterwards, whatever the status.
  // Cost: two atomic RMWs on shared counters and one on a producer slot, one queue enqueue (no allocation
  // while reserved capacity lasts, except the first use of a producer slot), one eventfd write on the
  // empty→non-empty edge.
  // Any thread; never touches Python; never blocks.
  PushStatus push(void* item) noexcept;

  // Releases up to `max_items` pending pointers by calling `release(item, context)` for each, on the
  // calling thread. Dequeues in bulk and calls `release` outside any internal lock; `release` may push
  // again or call drain() again (re-entrancy is safe). When nothing is pending it returns after one
  // atomic load. Clears the wake-up fd when it leaves the queue empty. Returns the number released.
  // If `release` unwinds, the item it was releasing counts as released, the rest of the batch goes back
  // to the queue (still pending, counted once), and the unwind continues to the caller.
  // Any thread (several may drain at once); never blocks. The owner decides which threads are safe for
  // `release` (for Python objects: a thread holding the GIL).
  std::size_t drain(ReleaseFn release, void* context, std::size_t max_items = SIZE_MAX);

  // Like drain(), but when it released something and left the queue empty, it keeps the wake-up signal
  // set while making the fd unreadable: pushes that arrive meanwhile skip the eventfd write. The caller
  // promises to drain again soon (a drain thread after a short sleep); that drain clears the signal as
  // usual when it finds nothing. Under steady traffic an owner that keeps up would otherwise empty the
  // queue after each push, making every push an empty→non-empty edge that pays one write(2) on the
  // producer's (CUDA's) thread; lingering turns that into at most one write per linger period.
  // Any thread (several may drain at once); never blocks.
  std::size_t drain_and_linger(ReleaseFn release, void* context, std::size_t max_items = SIZE_MAX);

  // Ends a linger without draining: makes the wake-up fd readable exactly when work is pending and clears
  // the signal otherwise. A lingering caller that will not drain again (a drain thread that is stopping)
  // must call it, or pushes would keep skipping the eventfd write with nobody left to drain.
  // Any thread; never touches Python; never blocks.
  void end_linger() noexcept;

  // Closes the queue: later pushes only count as leaked_after_close. Waits for pushes admitted before
  // the close to finish (they never block, so this is short), then releases everything still queued with
  // `release` (if `release` is null, those pointers stay pending and are reported as such).
  // Idempotent: a second call releases whatever a racing push left, and returns.
  // Returns the number released by this call. An unwinding `release` is handled as in drain().
  // Any thread; never touches Python; may yield the CPU while admitted pushes finish.
  std::size_t close(ReleaseFn release, void* context);

  // Any thread; never touches Python; never blocks.
  bool is_closed() const noexcept;

  // False when nothing was signalled since the last emptying drain: the one load an empty drain() costs,
  // for callers that want to skip work of their own (argument parsing) before draining.
  // Any thread; never touches Python; never blocks.
  bool maybe_pending() const noexcept;

  // Approximate number of queued pointers (exact at quiescence).
  // Any thread; never touches Python; never blocks.
  std::size_t pending() const noexcept;

  // A consistent-at-quiescence copy of every counter; see CounterSnapshot. The pending count it reads also
  // raises max_pending, so max_pending >= pending in every snapshot.
  // Any thread; never touches Python; never blocks.
  CounterSnapshot snapshot() const noexcept;

  // Producer slots in use and overflow pushes (see the header comment); for tests and diagnostics.
  // Any thread; never touches Python; never blocks.
  ProducerUse producer_use() const noexcept;

  // The eventfd: readable while work is pending. Owned by the queue; never close it. The number is stable
  // for the life of the queue, across fork.
  // Any thread; never touches Python; never blocks.
  int wakeup_fd() const noexcept;

  // Waits until the wake-up fd is readable, the queue is closed, or `timeout_ms` passes (negative: no
  // limit). Returns true if work is (probably) pending or the queue is closed: close() wakes every waiter,
  // present and future (it makes a second, internal eventfd readable for good). An interrupted wait
  // (EINTR) returns false, so a caller can check signals.
  // Any thread; blocks up to `timeout_ms`; never touches Python (release the GIL before calling).
  bool wait_for_work(int timeout_ms) noexcept;

  // Like wait_for_work(), but also returns (true) when `extra_fd` becomes readable: lets a drain thread
  // wait for work and for its own stop signal in one poll(2).
  // Any thread; blocks up to `timeout_ms`; never touches Python.
  bool wait_for_work_or(int extra_fd, int timeout_ms) noexcept;

  // Makes the wake-up fd readable even when nothing is pending, so that a waiter returns (used to stop a
  // drain thread). The next drain finds nothing and clears it. Counted in `eventfd_writes`.
  // Any thread; never touches Python; never blocks.
  void notify() noexcept;

  // Call in the child right after fork(), while it is single-threaded: the child gets a fresh, open,
  // empty queue (same fd number, new eventfd behind it), whether or not the parent had closed its own;
  // whatever the parent had queued or was pushing is counted as abandoned_after_fork and never touched.
  // Counters keep their history. Allocates.
  // Not thread-safe (fork child only).
  void reset_after_fork_in_child() noexcept;

 private:
  struct Storage;  // the moodycamel queue; replaced (never freed) after fork.

  void signal_edge() noexcept;
  void clear_signal_if_empty() noexcept;
  void clear_signal() noexcept;
  void linger_if_empty() noexcept;
  void note_pending(std::uint64_t seen) const noexcept;
  // leaked_after_close for the value `admissions` of push_admissions_ (see admitted_at_close_).
  std::uint64_t leaked_in(std::uint64_t admissions) const noexcept;
  std::size_t release_all(ReleaseFn release, void* context, std::size_t max_items, bool linger);
  static Storage* make_storage(const QueueOptions& options) noexcept;

  // Written only by construction and by reset_after_fork_in_child (single-threaded); read by all.
  Storage* storage_;
  QueueOptions options_;
  int wakeup_fd_;
  int closed_fd_;  // readable for good once close() has set the closed bit; wakes every waiter.

  static constexpr std::uint64_t kClosedBit = std::uint64_t{1} << 63;

  // Producer-side words, each on its own cache line so producers and the owner do not share lines.
  // push_admissions_: bit 63 = closed (set by close() with fetch_or, seq_cst); low bits count pushes
  // admitted (fetch_add by push(), seq_cst, so each push is ordered before or after the close).
  alignas(64) std::atomic<std::uint64_t> push_admissions_{0};
  // push_completions_: fetch_add(release) by push() when a push admitted while open is done (stored or
  // rejected; a leak after close is not counted); close() loads it with acquire to wait for exactly the
  // pushes admitted before it, then sees their items.
  alignas(64) std::atomic<std::uint64_t> push_completions_{0};
  // signaled_: true while the eventfd has been written and not yet cleared. Set by exchange on the
  // empty→non-empty edge (producer) and by notify(); cleared by the draining owner. seq_cst fences on
  // both sides make "producer sees false" or "drain sees the item" hold (Dekker pattern).
  alignas(64) std::atomic<bool> signaled_{false};
  // admitted_at_close_: the admission count when close() set the closed bit; stored (relaxed) by
  // close() just before the CAS that sets the bit, read by whoever has seen the bit. Pushes admitted
  // after it are the leaks after close (leaked_in()), with no counter of their own to race with.
  alignas(64) std::atomic<std::uint64_t> admitted_at_close_{0};
  // closing_: held (test_and_set acquire / clear release) by close() while it sets the closed bit, so
  // concurrent closers cannot interleave their admitted_at_close_ stores. Never touched by push().
  // Cleared by the fork reset: a closer of the parent may have held it at the moment of fork.
  std::atomic_flag closing_ = ATOMIC_FLAG_INIT;
  // leaked_before_reopen_: leaks after earlier closes; written only by the fork reset (single-threaded).
  std::atomic<std::uint64_t> leaked_before_reopen_{0};
  // Rare-path counters: written with relaxed fetch_add by whoever hits the path.
  std::atomic<std::uint64_t> rejected_{0};
  std::atomic<std::uint64_t> eventfd_writes_{0};
  // Owner-side counters: relaxed; written by drains/close (any owner thread) and by the fork reset.
  alignas(64) std::atomic<std::uint64_t> released_{0};
  std::atomic<std::uint64_t> nonempty_drains_{0};
  mutable std::atomic<std::uint64_t> max_pending_{0};  // raised by drains, close and snapshot()
  std::atomic<std::uint64_t> abandoned_after_fork_{0};
};

// The process-wide queue of this copy of cleanup/, for the code that owns it (drains and closes it):
// binds this copy's reclaim_* functions to it (from then on nothing can be adopted, see cleanup/reclaim.h)
// and returns it; nullptr when this copy already adopted another copy's queue, whose owner is elsewhere.
// Created on first use and never destroyed (no static destructor runs on it), so a push during exit()
// or after Py_Finalize is safe; its fork handler (pthread_atfork, child side) calls
// reset_after_fork_in_child(). Capacity: CUDA_RECLAIM_RESERVED_CAPACITY at first use (see
// parse_reserved_capacity), else QueueOptions' default. Call it once from a known context (module init)
// before producers can run: the first call allocates.
// Any thread; never touches Python; never blocks after the first call.
ReclaimQueue* own_process_queue() noexcept;

// Formats the one-line report of `counters` into `buffer`: "cuda-reclaim:", then every counter as
// key=value in RECLAIM_COUNTERS order, then the fields of the report hook below if one is set, then
// conserved=yes|no, then a newline. Returns the length written (without the NUL), truncated to fit.
// Never allocates.
// Any thread; never touches Python; never blocks.
std::size_t format_report(const CounterSnapshot& counters, char* buffer, std::size_t size) noexcept;

// Extra fields of the report, from a layer above this one (graph/ adds what CUDA still holds): writes
// " key=value" pairs into `buffer` (at most `size` - 1 characters and a NUL) and returns their length.
// It must follow format_report's rules: any thread, no Python, no blocking, no allocation.
using ReportFieldsFn = std::size_t (*)(char* buffer, std::size_t size) noexcept;

// Sets the report hook of this copy of cleanup/ (null: none); the fields come before "conserved=". Meant
// to be called once, at load time, by the layer that owns the counters (a static constructor); a later
// call replaces the hook. The pointer is stored with release and loaded with acquire; never destroyed.
// Any thread; never touches Python; never blocks.
void set_report_fields(ReportFieldsFn fields) noexcept;

}  // namespace reclaim
