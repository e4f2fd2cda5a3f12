// cleanup/reclaim_queue.cc — the queue itself: construction, push, the wake-up signal, drain and close.
// trim() is in queue_trim.cc, the counters and the fork reset in queue_counters.cc; see reclaim_queue.h
// for the contract of every function.

#include "cleanup/reclaim_queue.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "cleanup/process_queue.h"
#include "cleanup/queue_allocation.h"
#include "cleanup/queue_drain.h"

namespace reclaim {

[[noreturn]] void die(const char* what) noexcept {
  std::fprintf(stderr, "cuda-reclaim: fatal: %s (errno %d)\n", what, errno);
  std::abort();
}

int make_eventfd() noexcept {
  int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) die("eventfd() failed");
  return fd;
}

// Puts a fresh eventfd behind the descriptor number `fd` (fork child: the inherited object is shared with
// the parent and must not wake either side for the other; an event loop may have registered the number).
void replace_eventfd(int fd) noexcept {
  const int fresh = make_eventfd();
  if (::dup3(fresh, fd, O_CLOEXEC) < 0) die("dup3() of an eventfd failed after fork");
  ::close(fresh);
}

std::atomic<AllocateFn> g_allocate{nullptr};

void set_queue_allocator_for_testing(AllocateFn allocate) noexcept {
  g_allocate.store(allocate, std::memory_order_relaxed);
}

namespace {

std::size_t round_up_to_power_of_two(std::size_t n) noexcept {
  std::size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Raises `mark` to `seen` unless it is already higher. Any thread.
void raise_high_water(std::atomic<std::uint64_t>& mark, std::uint64_t seen) noexcept {
  std::uint64_t highest = mark.load(std::memory_order_relaxed);
  while (seen > highest && !mark.compare_exchange_weak(highest, seen, std::memory_order_relaxed)) {
  }
}

// The take of a plain drain: every pointer taken goes to the release action.
template <bool kPrefetch>
struct TakeAll {
  TakenBatch operator()(PointerQueue& from, void** batch, std::size_t want) const noexcept {
    return dequeue_batch<kPrefetch>(from, batch, want);
  }
};

// Adapts a one-pointer release action to the batch form.
struct EachItem {
  ReleaseFn release;
  void* context;
};

void release_each(ReleaseBatch* batch, void* context) {
  const EachItem* each = static_cast<const EachItem*>(context);
  while (batch->next < batch->count) {
    void* item = batch->items[batch->next++];
    each->release(item, each->context);
  }
}

}  // namespace

ReclaimQueue::Storage* ReclaimQueue::make_storage(std::size_t reserved_capacity) noexcept {
  // Construction allocates the block pool through QueueTraits::malloc (std::malloc in production); a
  // queue that cannot reserve at start-up is not worth running with.
  void* memory = std::malloc(sizeof(Storage));
  if (memory == nullptr) die("cannot allocate the reclaim queue");
  return new (memory) Storage(reserved_capacity);
}

ReclaimQueue::ReclaimQueue(const QueueOptions& options) noexcept
    : storage_(make_storage(options.reserved_capacity)),
      options_(options),
      slots_(nullptr),
      slot_mask_(round_up_to_power_of_two(options.producer_slots == 0 ? 1 : options.producer_slots) - 1),
      wakeup_fd_(make_eventfd()),
      closed_fd_(make_eventfd()) {
  front_.store(make_front(), std::memory_order_relaxed);
  // Slots are cache-line aligned (alignas(64)): plain malloc only promises 16 bytes.
  void* slot_memory = nullptr;
  if (::posix_memalign(&slot_memory, alignof(ProducerSlot), sizeof(ProducerSlot) * (slot_mask_ + 1)) != 0) {
    die("cannot allocate the reclaim queue's producer slots");
  }
  slots_ = static_cast<ProducerSlot*>(slot_memory);
  for (std::size_t i = 0; i <= slot_mask_; ++i) new (&slots_[i]) ProducerSlot();
}

ReclaimQueue::~ReclaimQueue() {
  Storage* storage = storage_.load(std::memory_order_relaxed);
  // Tokens go before the queue that owns their producers.
  for (std::size_t i = 0; i <= slot_mask_; ++i) {
    slots_[i].unbind_from(storage);
    slots_[i].~ProducerSlot();
  }
  std::free(slots_);
  storage->~Storage();
  std::free(storage);
  Storage* retired = retired_.load(std::memory_order_relaxed);  // a trim that ran out of memory
  if (retired != nullptr) free_storage(retired);
  delete front_.load(std::memory_order_relaxed);
  ::close(wakeup_fd_);
  ::close(closed_fd_);
}

// Inlined into push(): the steady-state path is one function.
__attribute__((always_inline)) inline PushStatus ReclaimQueue::push_through_slot(ProducerSlot& slot, void* item) noexcept {
  // Everything below is ordered after the slot exchange (seq_cst). A close() or trim() that stored before
  // it is seen here; one that stores after it finds the slot held and waits for it to be given back.
  if ((push_admissions_.load(std::memory_order_seq_cst) & kClosedBit) != 0) {
    bump(slot.leaked);
    slot.held.store(0, std::memory_order_release);
    return PushStatus::kLeakedAfterClose;
  }
  // Read before the enqueue: a drain that clears the signal after this load finds the slot held or the
  // item (it reads `held` and then the queue after its store), and re-arms the signal itself.
  const bool already_signaled = signaled_.load(std::memory_order_seq_cst);
  Storage* storage = storage_.load(std::memory_order_seq_cst);
  // Counted before the enqueue (like an admission): a drain can never release an item not yet counted.
  bump(slot.admitted);
  const bool stored = slot.bind_to(storage) && storage->queue.enqueue(slot.token(), item);
  if (!stored) rejected_.fetch_add(1, std::memory_order_relaxed);
  // Release: whoever sees the slot free (close, trim, a clearing drain) also sees the item and counters.
  slot.held.store(0, std::memory_order_release);
  if (!stored) return PushStatus::kRejected;
  if (!already_signaled) raise_signal();
  return PushStatus::kQueued;
}

__attribute__((flatten)) PushStatus ReclaimQueue::push(void* item) noexcept {
  if (item == nullptr) return PushStatus::kInvalidArgument;
  const std::size_t start = preferred_slot(slot_mask_);
  for (std::size_t probe = 0; probe <= slot_mask_; ++probe) {
    ProducerSlot& slot = slots_[(start + probe) & slot_mask_];
    // No load before the exchange: the preferred slot is almost always free, and a load of the line the
    // previous push just stored to only adds a stall before the exchange that must come anyway.
    if (slot.held.exchange(1, std::memory_order_seq_cst) != 0) continue;
    return push_through_slot(slot, item);
  }
  // Every slot is held at this instant. Never waits for a slot: a holder may be preempted, and push()
  // must not block.
  return push_overflow(item);
}

__attribute__((noinline)) PushStatus ReclaimQueue::push_overflow(void* item) noexcept {
  overflow_pushes_.fetch_add(1, std::memory_order_relaxed);
  // The admission plays the part of the slot exchange: close() and trim() wait for the admitted ones.
  const std::uint64_t admission = push_admissions_.fetch_add(1, std::memory_order_seq_cst);
  if ((admission & kClosedBit) != 0) {
    // Counted by the admission itself (overflow_leaked_in()), and not as a completion: close() waits for
    // the pushes admitted before it, and a late push finishing first must not stand in for one of them.
    return PushStatus::kLeakedAfterClose;
  }
  const bool already_signaled = signaled_.load(std::memory_order_seq_cst);
  // This thread's own implicit producer (created once per such thread).
  const bool stored = storage_.load(std::memory_order_seq_cst)->queue.enqueue(item);
  if (!stored) rejected_.fetch_add(1, std::memory_order_relaxed);
  push_completions_.fetch_add(1, std::memory_order_release);
  if (!stored) return PushStatus::kRejected;
  if (!already_signaled) raise_signal();
  return PushStatus::kQueued;
}

__attribute__((noinline)) void ReclaimQueue::raise_signal() noexcept {
  if (signaled_.exchange(true, std::memory_order_acq_rel)) return;  // another push won the edge
  const std::uint64_t one = 1;
  // An eventfd write of 1 cannot block unless the counter is near 2^64; EINTR cannot happen (non-blocking).
  if (::write(wakeup_fd_, &one, sizeof one) == sizeof one) {
    eventfd_writes_.fetch_add(1, std::memory_order_relaxed);
  }
}

void ReclaimQueue::notify() noexcept {
  signaled_.store(true, std::memory_order_seq_cst);
  const std::uint64_t one = 1;
  if (::write(wakeup_fd_, &one, sizeof one) == sizeof one) {
    eventfd_writes_.fetch_add(1, std::memory_order_relaxed);
  }
}

bool ReclaimQueue::push_may_be_in_flight() const noexcept {
  // A slot's `held` covers a push from before its signal check to after its enqueue.
  for (std::size_t i = 0; i <= slot_mask_; ++i) {
    // seq_cst: this load and the push's signal load (after its seq_cst exchange) must not both read old
    // values after the clearing store (store-buffering: both sides need the single total order).
    if (slots_[i].held.load(std::memory_order_seq_cst) != 0) return true;
  }
  const std::uint64_t admissions = push_admissions_.load(std::memory_order_seq_cst);
  if ((admissions & kClosedBit) != 0) return false;  // closed: no drain needs a wake-up any more
  return push_completions_.load(std::memory_order_acquire) != admissions;
}

std::size_t ReclaimQueue::stored_count() const noexcept {
  std::size_t count = storage_.load(std::memory_order_seq_cst)->queue.size_approx();
  const Storage* retired = retired_.load(std::memory_order_relaxed);
  if (retired != nullptr) count += retired->queue.size_approx();
  return count + front_.load(std::memory_order_relaxed)->size.load(std::memory_order_relaxed);
}

void ReclaimQueue::settle_taken(std::size_t count, std::uint64_t generation, bool released) noexcept {
  if (count == 0) return;
  if (fork_generation_.load(std::memory_order_relaxed) != generation) {
    // The reset counted them as abandoned and set in_drain to 0: out of that bucket, and taken_ keeps
    // in_drain at 0 (released_ or returned_ grows by as much). Out of abandoned first: never in two.
    abandoned_after_fork_.fetch_sub(count, std::memory_order_relaxed);
    taken_.fetch_add(count, std::memory_order_relaxed);
  }
  (released ? released_ : returned_).fetch_add(count, std::memory_order_release);
}

FrontStorage* ReclaimQueue::make_front() noexcept {
  try {
    return new FrontStorage();
  } catch (...) {  // std::bad_alloc: a queue that cannot start is not worth running, as in make_storage
    die("cannot allocate the reclaim queue");
  }
}

void ReclaimQueue::put_back(void* const* items, std::size_t count, bool first) noexcept {
  if (count == 0) return;
  if (front_.load(std::memory_order_relaxed)->put(items, count, first)) {
    raise_signal();
  } else {
    // Out of memory at that very moment: stored nowhere, so counted as a push that could not be stored
    // is, in `rejected` (leaked), never as released.
    rejected_.fetch_add(count, std::memory_order_relaxed);
  }
}

void ReclaimQueue::settle(ReleaseBatch* batch, std::size_t upto) noexcept {
  ReclaimQueue* const queue = batch->queue;
  if (queue == nullptr || upto <= batch->settled) return;
  const std::size_t released = upto - batch->settled - batch->given_back;
  queue->settle_taken(released, batch->generation, /*released=*/true);  // one step out of in_drain
  batch->settled = upto;
  batch->given_back = 0;
  batch->released += released;
}

void ReclaimQueue::give_back(ReleaseBatch* batch, void* item) noexcept {
  ReclaimQueue* const queue = batch->queue;
  if (queue == nullptr) return;
  // Out of in_drain first: until the item is stored, a snapshot finds it in no bucket, never in two.
  queue->settle_taken(1, batch->generation, /*released=*/false);
  ++batch->given_back;
  void* const items[1] = {item};
  queue->put_back(items, 1, /*first=*/false);
}

void ReclaimQueue::clear_signal_if_empty() noexcept {
  if (stored_count() != 0) return;  // still pending: stay readable.
  clear_signal();
}

// Reads a non-blocking eventfd's count, leaving it unreadable. Its result is of no use to the callers (an
// fd that was already unreadable fails with EAGAIN, which is fine), but glibc marks read() as a result
// not to ignore, and a cast to void does not silence GCC about that.
namespace {
void empty_eventfd(int fd) noexcept {
  std::uint64_t count;
  const ssize_t got = ::read(fd, &count, sizeof count);
  static_cast<void>(got);
}
}  // namespace

void ReclaimQueue::clear_signal() noexcept {
  empty_eventfd(wakeup_fd_);  // EAGAIN when already clear: fine.
  signaled_.store(false, std::memory_order_seq_cst);
  // A push that read signaled_ == true before the store above skipped its write: it still holds its slot
  // (seen here) or its item is in the queue (seen below, after the acquire of its slot's release). Either
  // way, re-arm for it.
  if (push_may_be_in_flight() || stored_count() != 0) raise_signal();
}

void ReclaimQueue::end_linger() noexcept {
  const StorageReader reader(*this);
  clear_signal();
}

void ReclaimQueue::note_pending(std::uint64_t seen) const noexcept {
  raise_high_water(max_pending_, seen);
  raise_high_water(pending_since_trim_, seen);
}

void ReclaimQueue::linger_if_empty() noexcept {
  if (stored_count() != 0) return;  // still pending: stay readable.
  // The fd stops being readable (an event loop watching it goes quiet), but signaled_ stays true, so
  // pushes skip the write until the lingering caller's next drain clears it as usual.
  empty_eventfd(wakeup_fd_);
}

std::size_t ReclaimQueue::release_all(const StorageReader& reader, ReleaseBatchFn release, void* context,
                                      std::size_t max_items, bool linger, Pointees pointees) {
  if (pointees == Pointees::kPrefetch) {
    return release_all_taking(reader, release, context, max_items, linger, TakeAll<true>{});
  }
  return release_all_taking(reader, release, context, max_items, linger, TakeAll<false>{});
}

std::size_t ReclaimQueue::drain(ReleaseBatchFn release, void* context, std::size_t max_items,
                                Pointees pointees) {
  // The one atomic load of an empty drain: nothing was signalled since the last clear.
  if (!signaled_.load(std::memory_order_acquire)) return 0;
  const StorageReader reader(*this);
  return release_all(reader, release, context, max_items, /*linger=*/false, pointees);
}

std::size_t ReclaimQueue::drain_and_linger(ReleaseBatchFn release, void* context, std::size_t max_items,
                                           Pointees pointees) {
  if (!signaled_.load(std::memory_order_acquire)) return 0;
  const StorageReader reader(*this);
  return release_all(reader, release, context, max_items, /*linger=*/true, pointees);
}

std::size_t ReclaimQueue::drain(ReleaseFn release, void* context, std::size_t max_items) {
  EachItem each{release, context};
  return drain(release_each, &each, max_items);
}

std::size_t ReclaimQueue::drain_and_linger(ReleaseFn release, void* context, std::size_t max_items) {
  EachItem each{release, context};
  return drain_and_linger(release_each, &each, max_items);
}

void ReclaimQueue::wait_for_pushes_in_flight() noexcept {
  // Pushes never block, so each wait is a few instructions unless the pushing thread was preempted.
  for (std::size_t i = 0; i <= slot_mask_; ++i) {
    // seq_cst, against the push's closed-bit load after its exchange (see push_may_be_in_flight()).
    while (slots_[i].held.load(std::memory_order_seq_cst) != 0) sched_yield();
  }
  wait_for_slotless_pushes_in_flight();
}

void ReclaimQueue::wait_for_slotless_pushes_in_flight() const noexcept {
  // A slot-less push counts a completion only when it was admitted while open, so completions never pass
  // the admissions that can complete: all of them while the queue is open, those before the close once it
  // is closed (a later one only counts a leak and never touches the storage). Completions read *before*
  // the admissions and equal to them mean that at the first read every slot-less push admitted until then
  // had completed; one admitted later loaded the storage after the caller's own seq_cst store (close's
  // CAS, trim's exchange). Waiting instead for the completions to reach the admissions read once would
  // let a push admitted later, which completes first, stand in for an earlier one still in the storage.
  for (;;) {
    const std::uint64_t completed = push_completions_.load(std::memory_order_acquire);
    const std::uint64_t admissions = push_admissions_.load(std::memory_order_seq_cst);
    // The load that saw the closed bit synchronizes with close()'s CAS, which published admitted_at_close_.
    const std::uint64_t can_complete =
        (admissions & kClosedBit) != 0 ? admitted_at_close_.load(std::memory_order_relaxed) : admissions;
    if (completed >= can_complete) return;
    sched_yield();
  }
}

std::size_t ReclaimQueue::close(ReleaseBatchFn release, void* context, Pointees pointees) {
  // Sets the closed bit and publishes the slot-less admission count at that moment in one step
  // (admitted_at_close_ is stored before the CAS that releases it). Closers take turns: otherwise a
  // racing closer that lost the CAS could store its stale count into admitted_at_close_ after the
  // winner's CAS. Owner side only; pushes never wait on this flag.
  while (closing_.test_and_set(std::memory_order_acquire)) sched_yield();
  std::uint64_t current = push_admissions_.load(std::memory_order_acquire);
  while ((current & kClosedBit) == 0) {
    admitted_at_close_.store(current, std::memory_order_relaxed);
    if (push_admissions_.compare_exchange_weak(current, current | kClosedBit, std::memory_order_seq_cst,
                                               std::memory_order_acquire)) {
      break;
    }
  }
  closing_.clear(std::memory_order_release);
  // Wakes every waiter, now and later (never read): a drain(timeout) blocked on an open queue returns.
  const std::uint64_t one = 1;
  (void)!::write(closed_fd_, &one, sizeof one);
  // A push that took its slot before the bit was set may still be enqueueing; one that took it after
  // sees the bit (its slot exchange and our CAS are both seq_cst) and only counts a leak. Wait for the
  // first kind: after that, every push admitted while open is in the queue.
  wait_for_pushes_in_flight();
  if (release == nullptr) return 0;
  const StorageReader reader(*this);
  return release_all(reader, release, context, SIZE_MAX, /*linger=*/false, pointees);
}

std::size_t ReclaimQueue::close(ReleaseFn release, void* context) {
  if (release == nullptr) return close(ReleaseBatchFn{nullptr}, nullptr);
  EachItem each{release, context};
  return close(release_each, &each);
}

void ReclaimQueue::close_without_release() noexcept { (void)close(ReleaseBatchFn{nullptr}, nullptr); }

bool ReclaimQueue::maybe_pending() const noexcept { return signaled_.load(std::memory_order_acquire); }

bool ReclaimQueue::is_closed() const noexcept {
  return (push_admissions_.load(std::memory_order_acquire) & kClosedBit) != 0;
}

std::size_t ReclaimQueue::pending() const noexcept {
  const StorageReader reader(*this);
  return stored_count();
}

int ReclaimQueue::wakeup_fd() const noexcept { return wakeup_fd_; }

bool ReclaimQueue::wait_for_work(int timeout_ms) noexcept { return wait_for_work_or(-1, timeout_ms); }

bool ReclaimQueue::wait_for_work_or(int extra_fd, int timeout_ms) noexcept {
  // poll(2) ignores entries with a negative fd.
  struct pollfd waiters[3] = {{wakeup_fd_, POLLIN, 0}, {closed_fd_, POLLIN, 0}, {extra_fd, POLLIN, 0}};
  if (::poll(waiters, 3, timeout_ms) <= 0) return false;
  for (const pollfd& waiter : waiters) {
    if ((waiter.revents & POLLIN) != 0) return true;
  }
  return false;
}

}  // namespace reclaim
