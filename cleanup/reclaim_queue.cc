// cleanup/reclaim_queue.cc — see reclaim_queue.h for the contract of every function.

#include "cleanup/reclaim_queue.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "cleanup/queue_allocation.h"
#include "concurrentqueue/concurrentqueue.h"

namespace reclaim {
namespace {

// Loaded on every storage allocation; written only by tests.
std::atomic<AllocateFn> g_allocate{nullptr};

struct QueueTraits : moodycamel::ConcurrentQueueDefaultTraits {
  // Larger blocks than the default (32): fewer block hand-offs per pointer, and with the larger initial
  // index a producer thread can hold 256 * 256 pointers before its block index must grow (allocate).
  static const std::size_t BLOCK_SIZE = 256;
  static const std::size_t EXPLICIT_INITIAL_INDEX_SIZE = 256;
  static const std::size_t IMPLICIT_INITIAL_INDEX_SIZE = 256;

  static void* malloc(std::size_t size) {
    AllocateFn allocate = g_allocate.load(std::memory_order_relaxed);
    return allocate != nullptr ? allocate(size) : std::malloc(size);
  }
  static void free(void* pointer) { std::free(pointer); }
};

using PointerQueue = moodycamel::ConcurrentQueue<void*, QueueTraits>;

// Pointers taken off the queue per bulk dequeue; a drain's stack holds one batch.
constexpr std::size_t kDrainBatch = 128;

// Re-reads snapshot() allows itself while pushes are in flight.
constexpr int kSnapshotAttempts = 64;

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

// Where a thread starts looking for a free producer slot: a hash of its pthread handle, so that a thread
// keeps finding the same slot (its producer stays warm) and concurrent threads spread out. No
// thread-local storage: a thread's first TLS access in a dlopen'ed library may allocate.
std::size_t preferred_slot(std::size_t slot_count) noexcept {
  std::uint64_t h = static_cast<std::uint64_t>(::pthread_self());
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return static_cast<std::size_t>(h % slot_count);
}

}  // namespace

void set_queue_allocator_for_testing(AllocateFn allocate) noexcept {
  g_allocate.store(allocate, std::memory_order_relaxed);
}

// One producer slot: a moodycamel explicit producer that at most one thread uses at a time.
struct alignas(64) ProducerSlot {
  // Taken with exchange(acquire) by a pushing thread, given back with store(release) after its enqueue:
  // the next holder sees the producer exactly as the last one left it (explicit producers are
  // single-threaded).
  std::atomic<bool> held{false};
  // Written only by the thread holding `held`: the token is created on the slot's first use.
  bool has_token = false;
  // Set (relaxed) once the slot's producer exists; read by producer_use() for diagnostics.
  std::atomic<bool> used{false};
  alignas(moodycamel::ProducerToken) unsigned char token_bytes[sizeof(moodycamel::ProducerToken)];

  moodycamel::ProducerToken& token() noexcept {
    return *std::launder(reinterpret_cast<moodycamel::ProducerToken*>(token_bytes));
  }
};

struct ReclaimQueue::Storage {
  Storage(std::size_t reserved_capacity, ProducerSlot* slot_array, std::size_t count)
      : queue(reserved_capacity), slots(slot_array), slot_count(count) {}
  // Tokens go before the queue that owns their producers (tests destroy queues; production never does).
  ~Storage() {
    for (std::size_t i = 0; i < slot_count; ++i) {
      if (slots[i].has_token) slots[i].token().~ProducerToken();
      slots[i].~ProducerSlot();
    }
    std::free(slots);
  }

  // Stores `item` through a free producer slot; false when storage could not grow (allocation failure).
  bool enqueue(void* item) noexcept {
    const std::size_t start = preferred_slot(slot_count);
    for (std::size_t probe = 0; probe < slot_count; ++probe) {
      ProducerSlot& slot = slots[(start + probe) % slot_count];
      if (slot.held.load(std::memory_order_relaxed) || slot.held.exchange(true, std::memory_order_acquire)) {
        continue;
      }
      bool stored = false;
      if (!slot.has_token) {
        auto* token = new (slot.token_bytes) moodycamel::ProducerToken(queue);
        if (token->valid()) {
          slot.has_token = true;
          slot.used.store(true, std::memory_order_relaxed);
        } else {
          token->~ProducerToken();  // out of memory: this push is rejected; a later one tries again
        }
      }
      if (slot.has_token) stored = queue.enqueue(slot.token(), item);
      slot.held.store(false, std::memory_order_release);
      return stored;
    }
    // Every slot is held at this instant: this thread's own implicit producer (created once per such
    // thread). Never waits for a slot: a holder may be preempted, and push() must not block.
    overflow_pushes.fetch_add(1, std::memory_order_relaxed);
    return queue.enqueue(item);
  }

  PointerQueue queue;
  ProducerSlot* const slots;
  const std::size_t slot_count;
  std::atomic<std::uint64_t> overflow_pushes{0};  // relaxed; pushes that found every slot held
};

ReclaimQueue::Storage* ReclaimQueue::make_storage(const QueueOptions& options) noexcept {
  // Construction allocates the block pool through QueueTraits::malloc (std::malloc in production); a
  // queue that cannot reserve at start-up is not worth running with.
  const std::size_t slot_count = options.producer_slots == 0 ? 1 : options.producer_slots;
  // Slots are cache-line aligned (alignas(64)): plain malloc only promises 16 bytes.
  void* slot_memory = nullptr;
  if (::posix_memalign(&slot_memory, alignof(ProducerSlot), sizeof(ProducerSlot) * slot_count) != 0) {
    slot_memory = nullptr;
  }
  void* memory = std::malloc(sizeof(Storage));
  if (memory == nullptr || slot_memory == nullptr) die("cannot allocate the reclaim queue");
  auto* slots = static_cast<ProducerSlot*>(slot_memory);
  for (std::size_t i = 0; i < slot_count; ++i) new (&slots[i]) ProducerSlot();
  return new (memory) Storage(options.reserved_capacity, slots, slot_count);
}

ReclaimQueue::ReclaimQueue(const QueueOptions& options) noexcept
    : storage_(make_storage(options)),
      options_(options),
      wakeup_fd_(make_eventfd()),
      closed_fd_(make_eventfd()) {}

ReclaimQueue::~ReclaimQueue() {
  storage_->~Storage();
  std::free(storage_);
  ::close(wakeup_fd_);
  ::close(closed_fd_);
}

PushStatus ReclaimQueue::push(void* item) noexcept {
  if (item == nullptr) return PushStatus::kInvalidArgument;

  const std::uint64_t admission = push_admissions_.fetch_add(1, std::memory_order_seq_cst);
  if ((admission & kClosedBit) != 0) {
    // Counted by the admission itself (see leaked_in()), and not as a completion: close() waits for the
    // pushes admitted before it, and a late push finishing first must not stand in for one of them.
    return PushStatus::kLeakedAfterClose;
  }
  PushStatus status;
  if (storage_->enqueue(item)) {
    status = PushStatus::kQueued;
  } else {
    rejected_.fetch_add(1, std::memory_order_relaxed);
    status = PushStatus::kRejected;
  }
  // Release: close() acquires this count and must then see the item in the queue.
  push_completions_.fetch_add(1, std::memory_order_release);

  if (status == PushStatus::kQueued) signal_edge();
  return status;
}

void ReclaimQueue::signal_edge() noexcept {
  // Pairs with the fence in clear_signal_if_empty(): either we see signaled_ == false (and write), or
  // the drain that cleared it sees our item and signals again.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (signaled_.load(std::memory_order_relaxed)) return;  // common case: already readable, no RMW.
  if (signaled_.exchange(true, std::memory_order_acq_rel)) return;
  const std::uint64_t one = 1;
  // An eventfd write of 1 cannot block unless the counter is near 2^64; EINTR cannot happen (non-blocking).
  if (::write(wakeup_fd_, &one, sizeof one) == sizeof one) {
    wakeups_.fetch_add(1, std::memory_order_relaxed);
  }
}

void ReclaimQueue::notify() noexcept {
  signaled_.store(true, std::memory_order_seq_cst);
  const std::uint64_t one = 1;
  if (::write(wakeup_fd_, &one, sizeof one) == sizeof one) {
    wakeups_.fetch_add(1, std::memory_order_relaxed);
  }
}

void ReclaimQueue::clear_signal_if_empty() noexcept {
  if (storage_->queue.size_approx() != 0) return;  // still pending: stay readable.
  clear_signal();
}

void ReclaimQueue::clear_signal() noexcept {
  std::uint64_t count;
  (void)::read(wakeup_fd_, &count, sizeof count);  // EAGAIN when already clear: fine.
  signaled_.store(false, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // A push that saw signaled_ == true just before we cleared it did not write; re-arm for it.
  if (storage_->queue.size_approx() != 0) signal_edge();
}

void ReclaimQueue::end_linger() noexcept { clear_signal(); }

void ReclaimQueue::note_pending(std::uint64_t seen) const noexcept {
  std::uint64_t highest = max_pending_.load(std::memory_order_relaxed);
  while (seen > highest &&
         !max_pending_.compare_exchange_weak(highest, seen, std::memory_order_relaxed)) {
  }
}

void ReclaimQueue::linger_if_empty() noexcept {
  if (storage_->queue.size_approx() != 0) return;  // still pending: stay readable.
  // The fd stops being readable (an event loop watching it goes quiet), but signaled_ stays true, so
  // pushes skip the write until the lingering caller's next drain clears it as usual.
  std::uint64_t count;
  (void)::read(wakeup_fd_, &count, sizeof count);
}

std::size_t ReclaimQueue::release_all(ReleaseFn release, void* context, std::size_t max_items,
                                      bool linger) {
  note_pending(storage_->queue.size_approx());
  void* batch[kDrainBatch];
  std::size_t total = 0;
  while (total < max_items) {
    const std::size_t want = max_items - total < kDrainBatch ? max_items - total : kDrainBatch;
    const std::size_t got = storage_->queue.try_dequeue_bulk(batch, want);
    if (got == 0) break;
    // Counted before the release calls, so a nested drain or a snapshot never sees these pointers in
    // neither bucket for longer than the dequeue itself.
    released_.fetch_add(got, std::memory_order_relaxed);
    total += got;
    std::size_t done = 0;
    try {
      for (; done < got; ++done) release(batch[done], context);
    } catch (...) {
      // The item being released counts as released (its owner's action ran); the rest are still ours.
      const std::size_t rest = got - done - 1;
      if (rest != 0 && storage_->queue.enqueue_bulk(batch + done + 1, rest)) {
        released_.fetch_sub(rest, std::memory_order_relaxed);
        signal_edge();
      }
      throw;
    }
  }
  if (linger && total != 0) {
    linger_if_empty();
  } else {
    clear_signal_if_empty();
  }
  return total;
}

std::size_t ReclaimQueue::drain(ReleaseFn release, void* context, std::size_t max_items) {
  // The one atomic load of an empty drain: nothing was signalled since the last clear.
  if (!signaled_.load(std::memory_order_acquire)) return 0;
  drain_calls_.fetch_add(1, std::memory_order_relaxed);
  return release_all(release, context, max_items, /*linger=*/false);
}

std::size_t ReclaimQueue::drain_and_linger(ReleaseFn release, void* context, std::size_t max_items) {
  if (!signaled_.load(std::memory_order_acquire)) return 0;
  drain_calls_.fetch_add(1, std::memory_order_relaxed);
  return release_all(release, context, max_items, /*linger=*/true);
}

std::size_t ReclaimQueue::close(ReleaseFn release, void* context) {
  // Sets the closed bit and publishes the admission count at that moment in one step (admitted_at_close_
  // is stored before the CAS that releases it), so whoever sees the bit can derive the leaks from it.
  // Closers take turns: otherwise a racing closer that lost the CAS could store its stale count into
  // admitted_at_close_ after the winner's CAS. Owner side only; pushes never wait on this flag. A later
  // closer that finds the bit set reads the first closer's count (published by the flag's release).
  while (closing_.test_and_set(std::memory_order_acquire)) sched_yield();
  std::uint64_t current = push_admissions_.load(std::memory_order_acquire);
  while ((current & kClosedBit) == 0) {
    admitted_at_close_.store(current, std::memory_order_relaxed);
    if (push_admissions_.compare_exchange_weak(current, current | kClosedBit, std::memory_order_seq_cst,
                                               std::memory_order_acquire)) {
      break;
    }
  }
  // Only pushes admitted while open complete (late ones are leaks), so wait for exactly those.
  const std::uint64_t admitted = admitted_at_close_.load(std::memory_order_relaxed);
  closing_.clear(std::memory_order_release);
  // Wakes every waiter, now and later (never read): a drain(timeout) blocked on an open queue returns.
  const std::uint64_t one = 1;
  (void)!::write(closed_fd_, &one, sizeof one);
  // Pushes admitted before the closed bit never block, so this wait is a few instructions unless their
  // thread was preempted mid-push.
  while (push_completions_.load(std::memory_order_acquire) < admitted) sched_yield();
  return release != nullptr ? release_all(release, context, SIZE_MAX, /*linger=*/false) : 0;
}

std::uint64_t ReclaimQueue::leaked_in(std::uint64_t admissions) const noexcept {
  std::uint64_t leaked = leaked_before_reopen_.load(std::memory_order_relaxed);
  if ((admissions & kClosedBit) != 0) {
    // Every admission after the close is a leak. The caller's load that saw the closed bit synchronizes
    // with the close's CAS, so admitted_at_close_ is the value stored before it.
    leaked += (admissions & ~kClosedBit) - admitted_at_close_.load(std::memory_order_relaxed);
  }
  return leaked;
}

bool ReclaimQueue::maybe_pending() const noexcept { return signaled_.load(std::memory_order_acquire); }

bool ReclaimQueue::is_closed() const noexcept {
  return (push_admissions_.load(std::memory_order_acquire) & kClosedBit) != 0;
}

std::size_t ReclaimQueue::pending() const noexcept { return storage_->queue.size_approx(); }

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

ProducerUse ReclaimQueue::producer_use() const noexcept {
  ProducerUse use;
  use.slot_count = storage_->slot_count;
  for (std::size_t i = 0; i < storage_->slot_count; ++i) {
    // has_token is written by slot holders; read here for diagnostics only, through the slot's flag.
    ProducerSlot& slot = storage_->slots[i];
    if (slot.used.load(std::memory_order_relaxed)) ++use.slots_used;
  }
  use.overflow_pushes = storage_->overflow_pushes.load(std::memory_order_relaxed);
  return use;
}

CounterSnapshot ReclaimQueue::snapshot() const noexcept {
  // Leaks after close are derived from the same admissions load as `enqueued` (leaked_in), so a closed
  // queue conserves exactly in every snapshot, however many late pushes are arriving: the exit report
  // is taken while CUDA's thread may still be pushing. On an open queue a push is counted at admission
  // and lands in the queue a moment later: re-read until no push was in flight across the reads.
  // Bounded, so it never blocks: under a push storm the last attempt stands.
  CounterSnapshot counters;
  for (int attempt = 0; attempt < kSnapshotAttempts; ++attempt) {
    const std::uint64_t admissions = push_admissions_.load(std::memory_order_seq_cst);
    const std::uint64_t admitted = admissions & ~kClosedBit;
    // Acquire: the bucket updates of every completed push are visible to the reads below.
    const std::uint64_t completed = push_completions_.load(std::memory_order_acquire);
    counters.rejected = rejected_.load(std::memory_order_relaxed);
    counters.enqueued = admitted - counters.rejected;
    counters.released = released_.load(std::memory_order_relaxed);
    counters.pending = storage_->queue.size_approx();
    note_pending(counters.pending);
    counters.leaked_after_close = leaked_in(admissions);
    counters.abandoned_after_fork = abandoned_after_fork_.load(std::memory_order_relaxed);
    // Orders the reads above before the re-check: a push admitted after it is in none of them.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const std::uint64_t admitted_after = push_admissions_.load(std::memory_order_seq_cst) & ~kClosedBit;
    // Closed: every push admitted before the close has completed once close() returned, and later ones
    // are counted by the admission word alone, so this read is exact as it is.
    const bool settled = (admissions & kClosedBit) != 0 || completed == admitted;
    if (settled && admitted_after == admitted) break;
  }
  counters.drain_calls = drain_calls_.load(std::memory_order_relaxed);
  counters.max_pending = max_pending_.load(std::memory_order_relaxed);
  counters.wakeups = wakeups_.load(std::memory_order_relaxed);
  return counters;
}

void ReclaimQueue::reset_after_fork_in_child() noexcept {
  // Only the forking thread exists now. Pushes that other parent threads had admitted may have stopped
  // anywhere inside the old storage, so it is left as it is (never freed, never read), and everything
  // accepted and not yet released or leaked becomes abandoned: derived from the counters rather than the
  // old queue, so a push cut off between admission and enqueue is accounted for too.
  const std::uint64_t admissions = push_admissions_.load(std::memory_order_relaxed);
  const std::uint64_t admitted = admissions & ~kClosedBit;
  const std::uint64_t accepted = admitted - rejected_.load(std::memory_order_relaxed);
  const std::uint64_t leaked = leaked_in(admissions);
  const std::uint64_t gone = released_.load(std::memory_order_relaxed) + leaked;
  abandoned_after_fork_.store(accepted - gone, std::memory_order_relaxed);
  leaked_before_reopen_.store(leaked, std::memory_order_relaxed);  // reopening ends the derivation
  push_admissions_.store(admitted, std::memory_order_relaxed);  // open again
  push_completions_.store(admitted, std::memory_order_relaxed);  // cut-off pushes count as done
  closing_.clear(std::memory_order_relaxed);  // a parent thread may have been closing at the fork
  storage_ = make_storage(options_);

  // Same descriptor numbers (an event loop in the child may have registered the wake-up fd), new eventfds
  // behind them: the child's queue is open and empty whatever the parent's state.
  replace_eventfd(wakeup_fd_);
  replace_eventfd(closed_fd_);
  signaled_.store(false, std::memory_order_relaxed);
}

namespace {

ReclaimQueue* create_global_queue() noexcept {
  QueueOptions options;
  if (const char* text = std::getenv("CUDA_RECLAIM_RESERVED_CAPACITY")) {
    // The Python module refuses a bad value with an ImportError before it gets here; a C++ program that
    // links cleanup/ alone gets this note and the default.
    if (!parse_reserved_capacity(text, &options.reserved_capacity)) {
      std::fprintf(stderr,
                   "cuda-reclaim: ignoring CUDA_RECLAIM_RESERVED_CAPACITY=%s (expected an integer from 1 "
                   "to %zu); using %zu\n",
                   text, kMaxReservedCapacity, options.reserved_capacity);
    }
  }
  // Never deleted: pushes from CUDA's thread during exit() must find it alive.
  auto* queue = new (std::nothrow) ReclaimQueue(options);
  if (queue == nullptr) die("cannot allocate the global reclaim queue");
  pthread_atfork(nullptr, nullptr, [] { global_queue().reset_after_fork_in_child(); });
  return queue;
}

}  // namespace

bool parse_reserved_capacity(const char* text, std::size_t* capacity) noexcept {
  if (text == nullptr || capacity == nullptr || *text == '\0') return false;
  std::size_t value = 0;
  for (const char* digit = text; *digit != '\0'; ++digit) {
    if (*digit < '0' || *digit > '9') return false;
    value = value * 10 + static_cast<std::size_t>(*digit - '0');
    if (value > kMaxReservedCapacity) return false;  // checked per digit: no overflow on long inputs
  }
  if (value == 0) return false;
  *capacity = value;
  return true;
}

ReclaimQueue& global_queue() noexcept {
  static ReclaimQueue* const queue = create_global_queue();
  return *queue;
}

namespace {

// The report hook (set_report_fields): a plain function pointer in zero-initialized static storage, valid
// from load to exit (the report is written from the loader's fini pass).
std::atomic<ReportFieldsFn> g_report_fields{nullptr};

}  // namespace

void set_report_fields(ReportFieldsFn fields) noexcept {
  g_report_fields.store(fields, std::memory_order_release);
}

std::size_t format_report(const CounterSnapshot& c, char* buffer, std::size_t size) noexcept {
  if (buffer == nullptr || size == 0) return 0;
  char extra[256] = "";
  if (ReportFieldsFn fields = g_report_fields.load(std::memory_order_acquire)) {
    const std::size_t length = fields(extra, sizeof extra);
    extra[length < sizeof extra ? length : sizeof extra - 1] = '\0';
  }
  int written = std::snprintf(
      buffer, size,
      "cuda-reclaim: enqueued=%" PRIu64 " released=%" PRIu64 " pending=%" PRIu64
      " leaked_after_close=%" PRIu64 " abandoned_after_fork=%" PRIu64 " rejected=%" PRIu64
      " drain_calls=%" PRIu64 " max_pending=%" PRIu64 " wakeups=%" PRIu64 "%s conserved=%s\n",
      c.enqueued, c.released, c.pending, c.leaked_after_close, c.abandoned_after_fork, c.rejected,
      c.drain_calls, c.max_pending, c.wakeups, extra, c.conserved() ? "yes" : "no");
  if (written < 0) return 0;
  return static_cast<std::size_t>(written) < size ? static_cast<std::size_t>(written) : size - 1;
}

}  // namespace reclaim
