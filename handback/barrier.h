// handback/barrier.h — know when CUDA has handed back what was attached, without polling: epochs
// of attachments (as RCU's readers are waited for), counted where the hand-back happens.
//
// An attachment (a payload given to CUDA that a CUDA thread will hand back later, in any order) takes a
// ticket with begin() before CUDA may run its hand-back, and gives it back with end() in the hand-back.
// Attachments are counted by epoch, in counts: the current epoch's count takes new tickets. A waiter
// switches to a new epoch (a free count) and waits until every count holding an epoch it covers is empty;
// attachments made after the switch count in the new epoch and never delay it. A waiter covers the epochs
// up to the one current when it came, from `since` on (0: all; a mark() for "attached after the mark").
//
// The count table grows on demand, so that an epoch shares a count with an older one only past a bound far
// above practical use: a switch that finds no free count takes a new one, up to max_counts (kMaxEpochCounts,
// 65,535, by default: that many epochs each still holding an attachment). Only switches grow it (mark(),
// request(): waiters, under the waiters' mutex), never begin()/end() on CUDA's thread; counts live in
// chunks that are never moved or freed before the barrier itself (the first inline, each further one twice
// the size of the one before it), so begin()/end() stay lock-free and allocation-free and a ticket stays a
// plain index. Past the bound (or when a chunk cannot be allocated) a new epoch shares the count of the
// epoch before the current one: a waiter covering that count then also waits for what shares it (correct,
// maybe later), counted in shared_counts.
//
// An occupied bitmap (two levels: a bit per count, a bit per word of it; inline, as are the other bitmaps,
// about 24 KiB in all for kMaxEpochCounts) names the counts that may hold a ticket: a switch sets a count's bit
// before it makes the count current, and a switch clears it (under the waiters' mutex) once the count is
// neither current nor counting. reached() visits the occupied counts alone, skipping every word of counts
// whose epochs all came before the span; the free-count search takes the lowest clear bit through a bitmap
// of full words; a switch clears the bits of the counts that end() reported emptied (an emptied bitmap that
// end() sets lock-free) and of the count it leaves. So a switch costs a constant plus the counts emptied
// since the last one, and reached() the occupied counts of the words it cannot skip, plus a word read per
// 4,096 counts of the table's high-water mark: after a burst of held epochs ends, both are back to the cost
// of a small table.
//
// The end() that empties a count other than the current one wakes the waiters: a futex wake when a thread
// sleeps, an eventfd write when an event loop listens; nothing when nobody waits.
//
// A done cell (a uint32_t in the attachment's own memory, 0 until handed back) lets one attachment be
// waited for alone: end() stores 1 into it before it ends the ticket, so that a wait that sees the ticket
// ended also sees the cell set. Cell sleepers sleep on one of kCellBuckets futex words, chosen by a hash of
// the cell's address, each with its own sleeper count: end() wakes a bucket only when someone sleeps on
// it, so a sleeper wakes for its own cell, for a cell whose address shares its bucket (about one hand-back
// in kCellBuckets, per distinct bucket slept on, when addresses spread as the hash intends) and for
// shut().
//
// One instance per process for what CUDA hands back (handback/process_barrier.h: made on first use, reset
// in a fork child by its own atfork handler, shut when the owner closes the queue); tests and benchmarks
// make their own. Linux only (futex, eventfd).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "cuda_reclaim/reclaim_abi.h"

namespace reclaim::handback {

// Seconds as a barrier timeout: negative or NaN is no limit, and anything past about 292 years is too.
// Never blocks.
std::int64_t timeout_to_ns(double seconds) noexcept;

// CLOCK_MONOTONIC in nanoseconds: the clock of every barrier deadline. Any thread; never blocks.
std::int64_t monotonic_ns() noexcept;

class HandBackBarrier {
 public:
  // Tickets are count indices 0 .. max_counts - 1 (at most kMaxEpochCounts - 1 = 65,534: a ticket plus one fits in
  // RECLAIM_HAND_BACK_TICKET_BITS, the width graph/ carries it in). kUncounted: an end() that counts
  // nothing (a pointer that never got a ticket).
  static constexpr int kMaxEpochCounts = (1 << RECLAIM_HAND_BACK_TICKET_BITS) - 1;
  static constexpr int kUncounted = -1;
  // Futex words of the cell sleepers: one per bucket of cell addresses.
  static constexpr int kCellBuckets = 1024;

  enum class WaitResult { kReached, kTimedOut, kShut, kInterrupted };

  // What a waiter waits for: every attachment of an epoch in [since, until].
  struct Span {
    std::uint64_t since;
    std::uint64_t until;
  };

  // `max_counts` (clamped to 2 .. kMaxEpochCounts) bounds the count table: past it, epochs share counts. Tests pass
  // a small one to reach the sharing; everything else keeps the default. Never allocates (the first chunk
  // is inline); never blocks.
  explicit HandBackBarrier(int max_counts = kMaxEpochCounts) noexcept;
  ~HandBackBarrier();  // frees the chunks; closes the listener eventfd, if one was made
  HandBackBarrier(const HandBackBarrier&) = delete;
  HandBackBarrier& operator=(const HandBackBarrier&) = delete;

  // --- attachments: any thread, CUDA's included, also during exit(); lock-free, never allocates --------

  // Counts one attachment in the current epoch; returns its ticket. Call before CUDA can run the
  // hand-back. Retries if a waiter switches epochs meanwhile; never blocks.
  int begin() noexcept;

  // The hand-back of `ticket` (or the undo of an attachment that CUDA never took). First stores 1 into
  // `done` (may be null) and wakes the sleepers of its bucket, if any; then ends the ticket, so that a
  // wait that sees the ticket ended also sees every cell of the attachments it covers set. After the
  // store, `done`'s memory is never touched again (its address only picks the bucket, computed before):
  // the caller must not touch it either if the store may let it be freed. A ticket that is not a count of
  // this barrier (-1, or out of range) ends nothing; a count already at zero stays there (a fork child's
  // parent ticket). When this end() empties a count other than the current one, it reports the count in the
  // emptied bitmap (one atomic or, two when its word was clear) and wakes the waiters: one futex wake, plus
  // one eventfd write when listeners are registered. Never blocks.
  void end(int ticket, std::atomic<std::uint32_t>* done) noexcept;

  // --- waiters: threads that may block (never CUDA's), usually with the GIL released --------------------

  // The current epoch, after switching to a new one: attachments whose begin() returns after this call
  // have this number or a higher one. Pass it as `since` to wait only for them. Takes the waiters' mutex
  // briefly (never held across a wait or a callback): the switch clears the occupied bits of the counts
  // emptied since the last one and takes the lowest free count, in time proportional to those counts, not to
  // the counts held.
  // Allocates a chunk of counts when the table must grow (a failed allocation shares a count instead).
  std::uint64_t mark() noexcept;

  // Switches to a new epoch and returns what to wait for: everything whose begin() returned before this
  // call, from epoch `since` on. Takes the waiters' mutex briefly; may allocate as mark() does.
  Span request(std::uint64_t since) noexcept;

  // Non-blocking: true once no count holds an attachment of an epoch in `span`. Reads the occupied counts of
  // the bitmap words whose newest epoch reaches span.since (no mutex). Any thread; never allocates.
  bool reached(const Span& span) const noexcept;

  // Blocks until `span` is reached (kReached), the barrier is shut (kShut), `timeout_ns` passed
  // (kTimedOut; negative: no limit) or a signal interrupted the sleep (kInterrupted: the caller checks its
  // signals and calls again with what is left of its time). Sleeps on a futex that the emptying end()
  // wakes: no polling. Never allocates.
  WaitResult wait(const Span& span, std::int64_t timeout_ns) noexcept;

  // As wait(), until `*done` is non-zero (a done cell given to end()). The caller keeps the cell's memory
  // alive until this returns. Sleeps on the futex word of the cell's bucket.
  WaitResult wait_cell(const std::atomic<std::uint32_t>& done, std::int64_t timeout_ns) noexcept;

  // Shuts the barrier: every waiter whose wait is not over returns kShut, now and later (a wait whose
  // span or done cell was already reached still returns kReached). Wakes every bucket that has a sleeper.
  // Any thread; never blocks.
  void shut() noexcept;
  bool is_shut() const noexcept { return shut_.load(std::memory_order_seq_cst); }

  // The epoch that new attachments count in. Any thread; never blocks.
  std::uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_seq_cst); }

  // --- event loops: Python threads ---------------------------------------------------------------------

  // An eventfd that end() writes when it empties a count while listeners are registered (made on first
  // call, non-blocking, close-on-exec; the number is stable for the life of the barrier, also across fork).
  // -1 if it cannot be made. Takes the waiters' mutex.
  int listener_fd() noexcept;
  // Registers / unregisters one listener (an event loop with a waiter). Register before checking
  // reached(), so that an end() in between writes the fd. Never blocks.
  void add_listener() noexcept { listeners_.fetch_add(1, std::memory_order_seq_cst); }
  void remove_listener() noexcept { listeners_.fetch_sub(1, std::memory_order_seq_cst); }
  // Empties the eventfd (a listener's read). Never blocks.
  void consume_listener_fd() noexcept;

  // --- diagnostics --------------------------------------------------------------------------------------

  struct Stats {
    std::uint64_t epoch;            // the current epoch
    std::uint64_t held;             // tickets not yet ended, in the occupied counts
    int counts_in_use;               // counts holding a ticket, the current one included
    int counts_used;                 // the count table's high-water mark: counts ever used (never shrinks)
    int counts_occupied;             // counts whose occupied bit is set: the current one and those that
                                    // held a ticket at the last switch (or emptied since)
    std::uint64_t shared_counts;     // epochs that had to share a count (past max_counts, or no memory)
    std::uint32_t sleepers;         // threads inside wait() or wait_cell() now
    std::uint64_t futex_wakes;      // futex wake calls made by end() and shut()
    std::uint64_t listener_writes;  // eventfd writes made by end() and shut()
    // Returns of a wait() / wait_cell() sleeper from its futex wait other than a timeout or a signal: the
    // word was woken or bumped (for a cell sleeper: its own cell, another cell of its bucket, or shut()).
    std::uint64_t epoch_wakeups;
    std::uint64_t cell_wakeups;
    // What reached() has read, over every call: occupied-bitmap words (both levels) and counts.
    std::uint64_t reached_words;
    std::uint64_t reached_counts;
  };
  // Any thread; never blocks; never allocates.
  Stats stats() const noexcept;

  // How many fork resets this barrier's process has been through: an attachment made under another
  // number belongs to an ancestor process and is never handed back here. Any thread; never blocks.
  std::uint64_t forks() const noexcept { return forks_.load(std::memory_order_relaxed); }

  // Fork child, single-threaded: no tickets (the parent's attachments are never handed back here), open;
  // epochs go on from the parent's; the count table keeps its size, with count 0 current and the only one
  // occupied; the listener eventfd is replaced behind the same number. Never allocates.
  void reset_after_fork() noexcept;

 private:
  // A count: tickets not yet ended, and the oldest / newest epoch counted in it (written under the mutex
  // before the switch that makes the count current; the oldest only when the count was free).
  struct alignas(32) EpochCount {
    std::atomic<std::uint64_t> tickets{0};
    std::atomic<std::uint64_t> oldest{0};
    std::atomic<std::uint64_t> newest{0};
  };
  // Chunk k holds counts [kFirstChunk * (2^k - 1), kFirstChunk * (2^(k+1) - 1)): chunk 0 is inline, the
  // others are allocated by a switch that needs them. kChunks of them cover kMaxEpochCounts.
  static constexpr int kFirstChunkBits = 6;
  static constexpr int kFirstChunk = 1 << kFirstChunkBits;
  static constexpr int kChunks = 11;
  static_assert((kFirstChunk << kChunks) - kFirstChunk >= kMaxEpochCounts, "the chunks cover every epoch count");
  // current_ holds (epoch << kCountBits) | count; the epoch's low bits only, enough to tell one switch from
  // another (2^48 switches between two loads of one begin() never happen).
  static constexpr int kCountBits = 16;
  static constexpr std::uint64_t kCountMask = (std::uint64_t{1} << kCountBits) - 1;
  static_assert(kMaxEpochCounts <= static_cast<int>(kCountMask), "an epoch count's index fits in current_");

  struct CellBucket {
    std::atomic<std::uint32_t> wake_word{0};  // the futex word: bumped only when someone sleeps
    std::atomic<std::uint32_t> sleepers{0};    // threads about to sleep, or asleep, on this bucket
  };
  static std::size_t bucket_of(const void* cell) noexcept;

  // The bitmaps: a bit per count in kWords words, and a bit per word in kWordGroups group words (bit
  // w % 64 of group w / 64 stands for word w).
  static constexpr int kWords = (kMaxEpochCounts + 63) / 64;
  static constexpr int kWordGroups = (kWords + 63) / 64;
  struct Bitmap {
    std::atomic<std::uint64_t> words[kWords] = {};
    std::atomic<std::uint64_t> groups[kWordGroups] = {};
  };

  // The count of index `index` (< counts_used_, or the index a switch is making current). Never blocks.
  EpochCount& count_at(int index) const noexcept;
  // The waiters' mutex held: makes sure the chunk of `index` exists; false if it cannot be allocated.
  bool ensure_chunk_locked(int index) noexcept;
  void switch_epoch_locked() noexcept;  // the waiters' mutex held
  // The waiters' mutex held: sets / clears `index`'s occupied bit, with its word's group bit and full bit.
  void occupy_locked(int index, std::uint64_t epoch) noexcept;
  void vacate_locked(int index) noexcept;
  // The waiters' mutex held: clears the occupied bits of the emptied counts that are not current and count
  // nothing; consumes the emptied bitmap.
  void prune_locked(int current) noexcept;
  // end()'s report of a count it emptied while another one was current. Lock-free; never allocates.
  void report_emptied(int index) noexcept;
  // One ticket of `count` ended (or, `undo`, a begin() that lost a race took its count back); wakes the
  // waiters if that emptied the count, unless the count was the current one holding only the current epoch.
  void end_count(int index, bool undo) noexcept;
  void wake_sleepers(std::atomic<std::uint32_t>* wake_word) noexcept;
  void write_listener_fd() noexcept;
  WaitResult sleep(std::atomic<std::uint32_t>* wake_word, std::atomic<std::uint32_t>* sleepers,
                   std::atomic<std::uint64_t>* wakeups, const std::atomic<std::uint32_t>* done,
                   const Span& span, std::int64_t timeout_ns) noexcept;

  // (epoch << kCountBits) | count: the current epoch's low bits and the count that counts it. Stored by a
  // switch (seq_cst, the mutex held, after epoch_ and the count's epochs); begin() reads it before and after
  // counting into the count.
  alignas(64) std::atomic<std::uint64_t> current_{0};
  std::atomic<std::uint64_t> epoch_{0};  // the current epoch, whole; stored by a switch before current_
  // The count table's high-water mark: counts [0, counts_used_) have been current at least once; raised
  // (release) by a switch, after the count's chunk is published and before current_ names it. Bounds
  // the group words that reached() reads, and the counts end() counts down.
  std::atomic<int> counts_used_{1};
  int max_counts_;
  EpochCount first_chunk_[kFirstChunk];
  // Chunks 1 .. kChunks - 1 (null until needed): published with release under the mutex, freed only by
  // the destructor.
  std::atomic<EpochCount*> chunks_[kChunks] = {};
  // Occupied counts. A count's bit is set (seq_cst, the mutex held) before the switch that makes it
  // current stores current_, and cleared only under the mutex while the count is not current and its count
  // reads 0; a word's group bit is set while the word is non-zero (set after the word's first bit, cleared
  // after its last). reached() reads both levels without the mutex.
  Bitmap occupied_;
  // Counts that end() emptied while another count was current: set lock-free by end() (the word, then the
  // group bit when the word was clear), taken (exchanged with 0) by the next switch. A hint only: a count is
  // vacated on what the switch reads of it, never on the report.
  Bitmap emptied_;
  // The newest epoch made current in any count of a word / of a group of words: raised (seq_cst, the mutex
  // held) before the switch stores current_, never lowered, so an upper bound of every count's newest there.
  std::atomic<std::uint64_t> word_newest_[kWords] = {};
  std::atomic<std::uint64_t> group_newest_[kWordGroups] = {};
  // The mutex held: bit w % 64 of full_[w / 64] is set while occupied word w has every bit set.
  std::uint64_t full_[kWordGroups] = {};
  // The mutex held: the count that was current before the current one (its newest epoch is the current
  // epoch less one, the youngest of the counts not current): the count a switch shares past the bound.
  int previous_ = 0;
  mutable std::atomic<std::uint64_t> reached_words_{0};
  mutable std::atomic<std::uint64_t> reached_counts_{0};
  std::atomic<bool> shut_{false};
  // The wait() sleepers' futex word (bumped only when someone sleeps) and their number; the cells'.
  std::atomic<std::uint32_t> epoch_wake_word_{0};
  std::atomic<std::uint32_t> epoch_sleepers_{0};
  CellBucket cell_buckets_[kCellBuckets];
  std::atomic<std::uint32_t> cell_sleepers_{0};  // all buckets' sleepers together (diagnostics)
  std::atomic<std::uint32_t> listeners_{0};
  std::atomic<int> listener_fd_{-1};
  std::atomic<std::uint64_t> futex_wakes_{0};
  std::atomic<std::uint64_t> listener_writes_{0};
  std::atomic<std::uint64_t> epoch_wakeups_{0};
  std::atomic<std::uint64_t> cell_wakeups_{0};
  std::atomic<std::uint64_t> shared_counts_{0};
  std::atomic<std::uint64_t> forks_{0};
  std::mutex waiters_mutex_;  // serializes epoch switches, the table's growth and the fd's creation
};

}  // namespace reclaim::handback
