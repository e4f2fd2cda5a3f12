// cleanup/reclaim_queue.h — the reclaim queue: a process-lifetime, lock-free queue of opaque pointers.
//
// Native threads that Python does not own (above all CUDA's callback thread) hand pointers to an owner
// through this queue; the owner releases them later, in a context it knows to be safe. This layer knows
// nothing about what a pointer is: the owner supplies the release action at each drain (bindings/ passes
// Py_DECREF). No Python.h, no cuda.h.
//
// Accounting: the counters and the conservation law are defined once, in cuda_reclaim/reclaim_abi.h
// (RECLAIM_COUNTERS); CounterSnapshot below is derived from that list. `pending` is read from the queue
// itself, never derived from the other counters, so that a test of the law can fail.
//
// A push that races with close() ends in exactly one bucket: it is either counted as a leak or in the
// queue before the final drain (producer_admission.h says how), so the exit report can always say where
// every pointer went.
//
// Parts, one type each: ProducerAdmission (lanes, closed bit), StorageSet (storages and the readers'
// guard against trim), WakeupSignal (the eventfds), QueueCounters (the owner-side counters).
//
// Wake-up: an eventfd becomes readable on the empty→non-empty edge (one write per edge, coalesced), stays
// readable while work is pending, and is cleared by the drain that empties the queue. The one exception
// is a lingering drain (drain_and_linger): it promises to drain again soon, so until end_linger() or its
// next drain, new work does not make the fd readable. The descriptor number never changes for the life of
// the process (fork replaces the object behind it, not the number).
//
// Producers: pushes go through a fixed set of producer lanes (QueueOptions::producer_lanes), each a
// moodycamel explicit producer that one pushing thread holds for the length of one push. Memory and the
// cost of a drain are therefore bounded by the lane count, not by how many distinct threads ever pushed:
// programs that push from thousands of short-lived threads do not grow the queue. Only when every lane is
// taken at once (more threads inside push() at the same instant than there are lanes) does a push fall
// back to moodycamel's per-thread implicit producer.
//
// Memory: the storage reserves QueueOptions::reserved_capacity pointers up front; a burst beyond it adds
// blocks, which the storage keeps for reuse until trim() replaces it with a fresh one (the drain thread
// of bindings/ does so about a second after a burst).
//
// Memory ordering promised to users: everything a thread wrote before push(p) is visible to the thread
// that runs release(p) (the queue's enqueue/dequeue pair synchronizes).

#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "cleanup/producer_admission.h"
#include "cleanup/queue_counters.h"
#include "cuda_reclaim/reclaim_abi.h"
#include "cleanup/release_batch.h"
#include "cleanup/storage_set.h"
#include "cleanup/wakeup_signal.h"

namespace reclaim {

// What trim() did.
enum class TrimStatus : int {
  kTrimmed = 0,   // the storage was replaced by a fresh one of the reserved capacity; the old one is freed
  kNotNeeded,     // the storage never grew beyond its reserved capacity since the last trim (or the queue
                  // is closed): nothing to free
  kBusy,          // a drain, close or counter read is in flight (possibly the caller's own: trim() from a
                  // release action), another trim is running, or memory ran out while moving (what was not
                  // moved stays in the previous storage, read by drains and counts): try again later
};

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

  // True when the conservation law (reclaim_abi.h, with when it is exact) holds for this snapshot.
  // snapshot() re-reads (a bounded number of times, yielding) until it holds, so it fails only when a
  // push, drain or trim in flight stalls through every re-read (a preempted thread).
  bool conserved() const noexcept;

  // The same values as the C struct of the ABI.
  reclaim_stats as_c() const noexcept;
};

// Pointers taken per bulk dequeue (moodycamel's try_dequeue_bulk into a plain array): a batch release
// action gets at most this many per call. A drain's stack holds one batch.
constexpr std::size_t kDrainBatch = 512;  // 4 KiB of stack per drain, nested drains included

// Largest reserved capacity accepted (pointers): 2^24, 128 MiB of them. Larger requests are refused
// (parse_reserved_capacity) rather than letting the block arithmetic overflow.
constexpr std::size_t kMaxReservedCapacity = std::size_t{1} << 24;

struct QueueOptions {
  // Pointers reserved up front, so that pushes do not allocate until this many are pending.
  // Rounded up to whole blocks of the underlying queue. 1 to kMaxReservedCapacity.
  std::size_t reserved_capacity = 64 * 1024;
  // Producer lanes (see the header comment): how many threads can be inside push() at once before a push
  // falls back to a per-thread producer. Each lane used costs one producer record (about 2 KiB) plus the
  // blocks it holds. At least 1; rounded up to a power of two.
  std::size_t producer_lanes = 64;
};

// Parses a reserved capacity from text (CUDA_RECLAIM_RESERVED_CAPACITY): a decimal integer from 1 to
// kMaxReservedCapacity, nothing else. Returns true and sets *capacity, or returns false and leaves it.
// Any thread; never touches Python; never blocks.
bool parse_reserved_capacity(const char* text, std::size_t* capacity) noexcept;

// The environment variable that sets the process queue's reserved capacity.
constexpr char kReservedCapacityVariable[] = "CUDA_RECLAIM_RESERVED_CAPACITY";

// The reserved capacity the environment asks for (kReservedCapacityVariable, read at the call): the
// parsed value, or QueueOptions' default when the variable is unset or invalid; `invalid_text` is the
// variable's text when it is set and invalid (the environment owns it), else null. The process queue
// uses this; an owner that refuses a bad value (bindings: ImportError) calls it first.
// Any thread; never touches Python; never blocks.
struct ReservedCapacitySetting {
  std::size_t capacity;
  const char* invalid_text;
};
ReservedCapacitySetting reserved_capacity_from_environment() noexcept;

struct ProducerLane;  // producer_lane.h

class ReclaimQueue {
 public:
  // Creates an open queue and its eventfd. Allocates; not for the producer path.
  // Aborts the process (with a message on stderr) if no eventfd can be created.
  // Not thread-safe: publish the queue to other threads only after construction.
  explicit ReclaimQueue(const QueueOptions& options = QueueOptions()) noexcept;

  // Deliberately not destroyed in production (see abi/reclaim.h's own_process_queue()); tests may destroy
  // an instance once no thread can reach it. Closes its eventfd.
  ~ReclaimQueue();
  ReclaimQueue(const ReclaimQueue&) = delete;
  ReclaimQueue& operator=(const ReclaimQueue&) = delete;

  // Hands `item` over; the queue now owns it until a drain releases it (or it is counted as leaked or
  // rejected). Steals the pointer: the caller must not use it afterwards, whatever the status.
  // Cost: one atomic exchange on a producer lane's own cache line (the push's only read-modify-write and
  // only barrier), a few plain loads and stores on that line, one queue enqueue (no allocation while
  // reserved capacity lasts, except the first use of a producer lane), one eventfd write on the
  // empty→non-empty edge. No shared counter is written: the counters are summed by their readers.
  // Any thread; never touches Python; never blocks.
  PushStatus push(void* item) noexcept;

  // Releases up to `max_items` pending pointers on the calling thread: takes them off the queue in bulk
  // dequeues of up to kDrainBatch and hands each dequeue to `release(batch, context)` in one call
  // (ReleaseBatchFn says what the action must do), outside any internal lock; `release` may push again or
  // drain again (re-entrancy is safe). When nothing is pending it returns after one atomic load. Clears the
  // wake-up fd when it leaves the queue empty. Returns the number released. If `release` unwinds, the item
  // it was releasing counts as released, the rest of the dequeue goes back to the front of the queue (still
  // pending, counted once), and the unwind continues to the caller.
  // Any thread (several may drain at once); never blocks, except for the moment a trim() on another
  // thread replaces the storage. The owner decides which threads are safe for `release` (for Python
  // objects: a thread holding the GIL).
  std::size_t drain(ReleaseBatchFn release, void* context, std::size_t max_items = SIZE_MAX);

  // Like drain(), but when it released something and left the queue empty, it keeps the wake-up signal
  // set while making the fd unreadable: pushes that arrive meanwhile skip the eventfd write. The caller
  // promises to drain again soon (a drain thread after a short sleep); that drain clears the signal as
  // usual when it finds nothing. Under steady traffic an owner that keeps up would otherwise empty the
  // queue after each push, making every push an empty→non-empty edge that pays one write(2) on the
  // producer's (CUDA's) thread; lingering turns that into at most one write per linger period.
  // Any thread (several may drain at once); never blocks.
  std::size_t drain_and_linger(ReleaseBatchFn release, void* context, std::size_t max_items = SIZE_MAX);

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
  std::size_t close(ReleaseBatchFn release, void* context);
  // close() that releases nothing: what is queued stays pending and is reported as such.
  void close_without_release() noexcept;

  // Frees the memory a burst left behind: when pending pointers once exceeded the reserved capacity
  // since the last trim, replaces the storage with a fresh one of the reserved capacity, moves what is
  // pending into it (nothing is released, nothing is lost, the counters do not change), and frees the old
  // storage (and returns freed heap to the system where the allocator supports it). Pushes continue
  // meanwhile, into the new storage; drains, closes and counter reads on other threads wait for it (it
  // runs no callback, so it cannot wait for itself). Allocates.
  // Any thread; never touches Python; may yield the CPU while a producer lane's holder finishes its push.
  TrimStatus trim() noexcept;

  // True when a trim() would free memory: the queue is open and pending once exceeded the reserved
  // capacity since the last trim (or a trim ran out of memory half-way). Any thread; never touches
  // Python; never blocks, except for the moment a trim() on another thread replaces the storage.
  bool trim_would_help() const noexcept;

  // Any thread; never touches Python; never blocks.
  bool is_closed() const noexcept;

  // For a release action during its call: counts batch->items[batch->settled ... upto) as released,
  // before the drain would at the call's end. Call it before anything that may take
  // long (a Python call), so that counters and the exit report do not show finished items as in_drain.
  // The releasing thread; never touches Python; never blocks.
  static void settle(ReleaseBatch* batch, std::size_t upto) noexcept;

  // The reserved capacity in pointers (QueueOptions::reserved_capacity). Any thread; never blocks.
  std::size_t reserved_capacity() const noexcept { return options_.reserved_capacity; }

  // False when nothing was signalled since the last emptying drain: the one load an empty drain() costs,
  // for callers that want to skip work of their own (argument parsing) before draining.
  // Any thread; never touches Python; never blocks.
  bool maybe_pending() const noexcept;

  // Approximate number of queued pointers (exact at quiescence).
  // Any thread; never touches Python; never blocks, except for the moment a trim() on another thread
  // replaces the storage.
  std::size_t pending() const noexcept;

  // A consistent-at-quiescence copy of every counter; see CounterSnapshot. The pending count it reads also
  // raises max_pending, so max_pending >= pending in every snapshot.
  // Any thread; never touches Python; never blocks, except for the moment a trim() on another thread
  // replaces the storage.
  CounterSnapshot snapshot() const noexcept;

  // Producer lanes in use and overflow pushes (see the header comment); for tests and diagnostics.
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


  // Call in the child right after fork(), while it is single-threaded: the child gets a fresh, open,
  // empty queue (same fd number, new eventfd behind it), whether or not the parent had closed its own;
  // whatever the parent had queued or was pushing is counted as abandoned_after_fork and never touched.
  // Counters keep their history. Allocates.
  // Not thread-safe (fork child only).
  void reset_after_fork_in_child() noexcept;

 private:
  PushStatus push_through_lane(ProducerLane& lane, void* item) noexcept;
  PushStatus push_overflow(void* item) noexcept;
  // Empties the wake-up fd and clears the signal, then re-raises it if a push may have read the old
  // value (its lane is taken) or work is stored: the owner's half of the Dekker handshake.
  void clear_signal() noexcept;
  void clear_signal_if_empty() noexcept;
  void linger_if_empty() noexcept;
  // Takes `count` items that a drain made after `forks` fork resets had taken out of in_drain, as
  // released (`released` true) or returned unreleased; out of abandoned_after_fork after a fork reset.
  void settle_taken(std::size_t count, std::uint64_t forks, bool released) noexcept;
  // Requeues the rest of a dequeue at the front, ahead of what is there (pending again; counted as rejected
  // if it cannot be stored), and raises the signal. The caller has uncounted them. Owner threads; may
  // allocate.
  void requeue_items(void* const* items, std::size_t count) noexcept;
  // Counts batch->items[0 ... reached) as released and requeues the rest of the dequeue at the front, not
  // released (requeue_items). The draining thread; may allocate.
  void settle_and_requeue_rest(ReleaseBatch* batch, std::size_t reached) noexcept;
  // `reader`: the caller's, held for the whole call (no storage changes meanwhile).
  std::size_t release_all(const StorageReader& reader, ReleaseBatchFn release, void* context,
                          std::size_t max_items, bool linger);

  // Written only by construction; read by all.
  const QueueOptions options_;
  ProducerAdmission admission_;  // lanes, the closed bit, lane-less admissions
  StorageSet storages_;          // where the pointers are, and the readers' guard against trim()
  WakeupSignal signal_;          // the eventfds and the flag behind them
  QueueCounters counters_;       // the owner-side counters (the push counters are in the lanes)
};

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
// to be called once, by the layer that owns the counters (bindings/, at module init); a later call
// replaces the hook. The pointer is stored with release and loaded with acquire; never destroyed.
// Any thread; never touches Python; never blocks.
void set_report_fields(ReportFieldsFn fields) noexcept;

}  // namespace reclaim
