// handback/barrier.h — know when CUDA has handed back what was attached, without polling: epochs
// of attachments (as in RCU's grace periods), counted where the hand-back happens.
//
// An attachment (a payload given to CUDA that a CUDA thread will hand back later, in any order) takes a
// ticket with begin() before CUDA may run its hand-back, and gives it back with end() in the hand-back.
// Attachments are counted by epoch, in slots: the current epoch's slot takes new tickets. A waiter
// switches to a new epoch (a free slot) and waits until every slot holding an epoch it covers is empty;
// attachments made after the switch count in the new epoch and never delay it. A waiter covers the epochs
// up to the one current when it came, from `since` on (0: all; a mark() for "attached after the mark").
//
// The slot table grows on demand, so that an epoch shares a slot with an older one only past a bound far
// above practical use: a switch that finds no free slot takes a new one, up to max_slots (kMaxSlots,
// 65,535, by default: that many epochs each still holding an attachment). Only switches grow it (mark(),
// request(): waiters, under the waiters' mutex), never begin()/end() on CUDA's thread; slots live in
// chunks that are never moved or freed before the barrier itself (the first inline, each further one twice
// the size of the one before it), so begin()/end() stay lock-free and allocation-free and a ticket stays a
// plain index. Past the bound (or when a chunk cannot be allocated) a new epoch shares the slot of the
// epoch before the current one: a waiter covering that slot then also waits for what shares it (correct,
// maybe later), counted in shared_slots.
//
// An occupied bitmap (two levels: a bit per slot, a bit per word of it; inline, as are the other bitmaps,
// about 24 KiB in all for kMaxSlots) names the slots that may hold a ticket: a switch sets a slot's bit
// before it makes the slot current, and a switch clears it (under the waiters' mutex) once the slot is
// neither current nor counting. reached() visits the occupied slots alone, skipping every word of slots
// whose epochs all came before the span; the free-slot search takes the lowest clear bit through a bitmap
// of full words; a switch clears the bits of the slots that end() reported emptied (an emptied bitmap that
// end() sets lock-free) and of the slot it leaves. So a switch costs a constant plus the slots emptied
// since the last one, and reached() the occupied slots of the words it cannot skip, plus a word read per
// 4,096 slots of the table's high-water mark: after a burst of held epochs ends, both are back to the cost
// of a small table.
//
// The end() that empties a slot other than the current one wakes the waiters: a futex wake when a thread
// sleeps, an eventfd write when an event loop listens; nothing when nobody waits.
//
// A done cell (a uint32_t in the attachment's own memory, 0 until handed back) lets one attachment be
// waited for alone: end() stores 1 into it before it ends the ticket, so that a wait that sees the ticket
// ended also sees the cell set. Cell sleepers sleep on one of kCellBuckets futex words, chosen by a hash of
// the cell's address, each with its own sleeper count: end() wakes a bucket only when someone sleeps on
// it, so a sleeper wakes for its own cell, for a cell whose address shares its bucket (about one hand-back
// in kCellBuckets, per distinct bucket slept on, when addresses spread as the hash intends) and for
// close().
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
  // Tickets are slot indices 0 .. max_slots - 1 (at most kMaxSlots - 1 = 65,534: a ticket plus one fits in
  // RECLAIM_HAND_BACK_TICKET_BITS, the width graph/ carries it in). kUncounted: an end() that counts
  // nothing (a pointer that never got a ticket).
  static constexpr int kMaxSlots = (1 << RECLAIM_HAND_BACK_TICKET_BITS) - 1;
  static constexpr int kUncounted = -1;
  // Futex words of the cell sleepers: one per bucket of cell addresses.
  static constexpr int kCellBuckets = 1024;

  enum class WaitResult { kReached, kTimedOut, kClosed, kInterrupted };

  // What a waiter waits for: every attachment of an epoch in [since, until].
  struct Span {
    std::uint64_t since;
    std::uint64_t until;
  };

  // `max_slots` (clamped to 2 .. kMaxSlots) bounds the slot table: past it, epochs share slots. Tests pass
  // a small one to reach the sharing; everything else keeps the default. Never allocates (the first chunk
  // is inline); never blocks.
  explicit HandBackBarrier(int max_slots = kMaxSlots) noexcept;
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
  // the caller must not touch it either if the store may let it be freed. A ticket that is not a slot of
  // this barrier (-1, or out of range) ends nothing; a slot already at zero stays there (a fork child's
  // parent ticket). When this end() empties a slot other than the current one, it reports the slot in the
  // emptied bitmap (one atomic or, two when its word was clear) and wakes the waiters: one futex wake, plus
  // one eventfd write when listeners are registered. Never blocks.
  void end(int ticket, std::atomic<std::uint32_t>* done) noexcept;

  // --- waiters: threads that may block (never CUDA's), usually with the GIL released --------------------

  // The current epoch, after switching to a new one: attachments whose begin() returns after this call
  // have this number or a higher one. Pass it as `since` to wait only for them. Takes the waiters' mutex
  // briefly (never held across a wait or a callback): the switch clears the occupied bits of the slots
  // emptied since the last one and takes the lowest free slot, in time proportional to those slots, not to
  // the slots held.
  // Allocates a chunk of slots when the table must grow (a failed allocation shares a slot instead).
  std::uint64_t mark() noexcept;

  // Switches to a new epoch and returns what to wait for: everything whose begin() returned before this
  // call, from epoch `since` on. Takes the waiters' mutex briefly; may allocate as mark() does.
  Span request(std::uint64_t since) noexcept;

  // Non-blocking: true once no slot holds an attachment of an epoch in `span`. Reads the occupied slots of
  // the bitmap words whose newest epoch reaches span.since (no mutex). Any thread; never allocates.
  bool reached(const Span& span) const noexcept;

  // Blocks until `span` is reached (kReached), the barrier is closed (kClosed), `timeout_ns` passed
  // (kTimedOut; negative: no limit) or a signal interrupted the sleep (kInterrupted: the caller checks its
  // signals and calls again with what is left of its time). Sleeps on a futex that the emptying end()
  // wakes: no polling. Never allocates.
  WaitResult wait(const Span& span, std::int64_t timeout_ns) noexcept;

  // As wait(), until `*done` is non-zero (a done cell given to end()). The caller keeps the cell's memory
  // alive until this returns. Sleeps on the futex word of the cell's bucket.
  WaitResult wait_cell(const std::atomic<std::uint32_t>& done, std::int64_t timeout_ns) noexcept;

  // Closes the barrier: every waiter whose wait is not over returns kClosed, now and later (a wait whose
  // span or done cell was already reached still returns kReached). Wakes every bucket that has a sleeper.
  // Any thread; never blocks.
  void close() noexcept;
  bool is_closed() const noexcept { return closed_.load(std::memory_order_seq_cst); }

  // The epoch that new attachments count in. Any thread; never blocks.
  std::uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_seq_cst); }

  // --- event loops: Python threads ---------------------------------------------------------------------

  // An eventfd that end() writes when it empties a slot while listeners are registered (made on first
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
    std::uint64_t held;             // tickets not yet ended, in the occupied slots
    int slots_in_use;               // slots holding a ticket, the current one included
    int slots_used;                 // the slot table's high-water mark: slots ever used (never shrinks)
    int slots_occupied;             // slots whose occupied bit is set: the current one and those that
                                    // held a ticket at the last switch (or emptied since)
    std::uint64_t shared_slots;     // epochs that had to share a slot (past max_slots, or no memory)
    std::uint32_t sleepers;         // threads inside wait() or wait_cell() now
    std::uint64_t futex_wakes;      // futex wake calls made by end() and close()
    std::uint64_t listener_writes;  // eventfd writes made by end() and close()
    // Returns of a wait() / wait_cell() sleeper from its futex wait other than a timeout or a signal: the
    // word was woken or bumped (for a cell sleeper: its own cell, another cell of its bucket, or close()).
    std::uint64_t grace_wakeups;
    std::uint64_t cell_wakeups;
    // What reached() has read, over every call: occupied-bitmap words (both levels) and slots.
    std::uint64_t reached_words;
    std::uint64_t reached_slots;
  };
  // Any thread; never blocks; never allocates.
  Stats stats() const noexcept;

  // How many fork resets this barrier's process has been through: an attachment made under another
  // number belongs to an ancestor process and is never handed back here. Any thread; never blocks.
  std::uint64_t forks() const noexcept { return forks_.load(std::memory_order_relaxed); }

  // Fork child, single-threaded: no tickets (the parent's attachments are never handed back here), open;
  // epochs go on from the parent's; the slot table keeps its size, with slot 0 current and the only one
  // occupied; the listener eventfd is replaced behind the same number. Never allocates.
  void reset_after_fork() noexcept;

 private:
  // A slot: tickets not yet ended, and the oldest / newest epoch counted in it (written under the mutex
  // before the switch that makes the slot current; the oldest only when the slot was free).
  struct alignas(32) Slot {
    std::atomic<std::uint64_t> count{0};
    std::atomic<std::uint64_t> oldest{0};
    std::atomic<std::uint64_t> newest{0};
  };
  // Chunk k holds slots [kFirstChunk * (2^k - 1), kFirstChunk * (2^(k+1) - 1)): chunk 0 is inline, the
  // others are allocated by a switch that needs them. kChunks of them cover kMaxSlots.
  static constexpr int kFirstChunkBits = 6;
  static constexpr int kFirstChunk = 1 << kFirstChunkBits;
  static constexpr int kChunks = 11;
  static_assert((kFirstChunk << kChunks) - kFirstChunk >= kMaxSlots, "the chunks cover every slot");
  // current_ holds (epoch << kSlotBits) | slot; the epoch's low bits only, enough to tell one switch from
  // another (2^48 switches between two loads of one begin() never happen).
  static constexpr int kSlotBits = 16;
  static constexpr std::uint64_t kSlotMask = (std::uint64_t{1} << kSlotBits) - 1;
  static_assert(kMaxSlots <= static_cast<int>(kSlotMask), "a slot index fits in current_");

  struct CellBucket {
    std::atomic<std::uint32_t> generation{0};  // the futex word: bumped only when someone sleeps
    std::atomic<std::uint32_t> sleepers{0};    // threads about to sleep, or asleep, on this bucket
  };
  static std::size_t bucket_of(const void* cell) noexcept;

  // The bitmaps: a bit per slot in kWords words, and a bit per word in kWordGroups group words (bit
  // w % 64 of group w / 64 stands for word w).
  static constexpr int kWords = (kMaxSlots + 63) / 64;
  static constexpr int kWordGroups = (kWords + 63) / 64;
  struct Bitmap {
    std::atomic<std::uint64_t> words[kWords] = {};
    std::atomic<std::uint64_t> groups[kWordGroups] = {};
  };

  // The slot of index `index` (< slots_used_, or the index a switch is making current). Never blocks.
  Slot& slot_at(int index) const noexcept;
  // The waiters' mutex held: makes sure the chunk of `index` exists; false if it cannot be allocated.
  bool ensure_chunk_locked(int index) noexcept;
  void switch_epoch_locked() noexcept;  // the waiters' mutex held
  // The waiters' mutex held: sets / clears `index`'s occupied bit, with its word's group bit and full bit.
  void occupy_locked(int index, std::uint64_t epoch) noexcept;
  void vacate_locked(int index) noexcept;
  // The waiters' mutex held: clears the occupied bits of the emptied slots that are not current and count
  // nothing; consumes the emptied bitmap.
  void prune_locked(int current) noexcept;
  // end()'s report of a slot it emptied while another one was current. Lock-free; never allocates.
  void report_emptied(int index) noexcept;
  // One ticket of `slot` ended (or, `undo`, a begin() that lost a race took its count back); wakes the
  // waiters if that emptied the slot, unless the slot was the current one holding only the current epoch.
  void release(int slot, bool undo) noexcept;
  void wake_sleepers(std::atomic<std::uint32_t>* generation) noexcept;
  void write_listener_fd() noexcept;
  WaitResult sleep(std::atomic<std::uint32_t>* generation, std::atomic<std::uint32_t>* sleepers,
                   std::atomic<std::uint64_t>* wakeups, const std::atomic<std::uint32_t>* done,
                   const Span& span, std::int64_t timeout_ns) noexcept;

  // (epoch << kSlotBits) | slot: the current epoch's low bits and the slot that counts it. Stored by a
  // switch (seq_cst, the mutex held, after epoch_ and the slot's epochs); begin() reads it before and after
  // counting into the slot.
  alignas(64) std::atomic<std::uint64_t> current_{0};
  std::atomic<std::uint64_t> epoch_{0};  // the current epoch, whole; stored by a switch before current_
  // The slot table's high-water mark: slots [0, slots_used_) have been current at least once; raised
  // (release) by a switch, after the slot's chunk is published and before current_ names the slot. Bounds
  // the group words that reached() reads, and the slots end() counts down.
  std::atomic<int> slots_used_{1};
  int max_slots_;
  Slot first_chunk_[kFirstChunk];
  // Chunks 1 .. kChunks - 1 (null until needed): published with release under the mutex, freed only by
  // the destructor.
  std::atomic<Slot*> chunks_[kChunks] = {};
  // Occupied slots. A slot's bit is set (seq_cst, the mutex held) before the switch that makes it
  // current stores current_, and cleared only under the mutex while the slot is not current and its count
  // reads 0; a word's group bit is set while the word is non-zero (set after the word's first bit, cleared
  // after its last). reached() reads both levels without the mutex.
  Bitmap occupied_;
  // Slots that end() emptied while another slot was current: set lock-free by end() (the word, then the
  // group bit when the word was clear), taken (exchanged with 0) by the next switch. A hint only: a slot is
  // vacated on what the switch reads of it, never on the report.
  Bitmap emptied_;
  // The newest epoch made current in any slot of a word / of a group of words: raised (seq_cst, the mutex
  // held) before the switch stores current_, never lowered, so an upper bound of every slot's newest there.
  std::atomic<std::uint64_t> word_newest_[kWords] = {};
  std::atomic<std::uint64_t> group_newest_[kWordGroups] = {};
  // The mutex held: bit w % 64 of full_[w / 64] is set while occupied word w has every bit set.
  std::uint64_t full_[kWordGroups] = {};
  // The mutex held: the slot that was current before the current one (its newest epoch is the current
  // epoch less one, the youngest of the slots not current): the slot a switch shares past the bound.
  int previous_ = 0;
  mutable std::atomic<std::uint64_t> reached_words_{0};
  mutable std::atomic<std::uint64_t> reached_slots_{0};
  std::atomic<bool> closed_{false};
  // The wait() sleepers' futex word (bumped only when someone sleeps) and their number; the cells'.
  std::atomic<std::uint32_t> grace_generation_{0};
  std::atomic<std::uint32_t> grace_sleepers_{0};
  CellBucket cell_buckets_[kCellBuckets];
  std::atomic<std::uint32_t> cell_sleepers_{0};  // all buckets' sleepers together (diagnostics)
  std::atomic<std::uint32_t> listeners_{0};
  std::atomic<int> listener_fd_{-1};
  std::atomic<std::uint64_t> futex_wakes_{0};
  std::atomic<std::uint64_t> listener_writes_{0};
  std::atomic<std::uint64_t> grace_wakeups_{0};
  std::atomic<std::uint64_t> cell_wakeups_{0};
  std::atomic<std::uint64_t> shared_slots_{0};
  std::atomic<std::uint64_t> forks_{0};
  std::mutex waiters_mutex_;  // serializes epoch switches, the table's growth and the fd's creation
};

}  // namespace reclaim::handback
