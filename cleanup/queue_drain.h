// cleanup/queue_drain.h — the drain loop, as a template: ReclaimQueue::release_all (reclaim_queue.cc) and
// ReclaimQueue::drain_quietly (for an owner whose quiet release must be compiled into the loop, see
// reclaim_queue.h). Include it only where drain_quietly is called, or in cleanup/ itself: it brings in
// the queue's storage (moodycamel). The constants below were tuned by measurement: see docs/benchmarks.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>

#include "cleanup/queue_dequeue.h"
#include "cleanup/queue_storage.h"
#include "cleanup/reclaim_queue.h"
#include "cleanup/storage_set.h"

namespace reclaim {

// How far behind the copy a quiet release looks at a pointer, in pointers: the pointee's line, asked for
// as the pointer was copied, has had this many copies' time to arrive. A batch shorter than this is looked
// at after the copy.
constexpr std::size_t kQuietDistance = 160;
static_assert(kQuietDistance < kDrainBatch, "the quiet release looks back within one batch");

// The output iterator of a quiet bulk dequeue: stores each pointer into the batch and prefetches its
// pointee; offers the pointer kQuietDistance places back to `quiet`, and keeps it (compacted to the front
// of the batch) only when `quiet` declines it. It advances in its assignment, so both of moodycamel's
// copy loops (`*it++ = x` and `*it = x; ++it`) see one step per pointer. Integers rather than pointers
// for the batch, as in BatchWriter: they stay in registers.
template <class QuietRelease>
struct QuietBatchWriter {
  std::uintptr_t batch_address;
  std::size_t index;
  std::size_t left;
  std::uintptr_t next_source;
  QuietRelease quiet;

  QuietBatchWriter& operator*() noexcept { return *this; }
  // `item` is moodycamel's own lane of the pointer, as in BatchWriter.
  QuietBatchWriter& operator=(void*&& item) noexcept {
    void** const batch = reinterpret_cast<void**>(batch_address);
    __builtin_prefetch(item, 1);
    next_source = reinterpret_cast<std::uintptr_t>(&item + 1);
    batch[index] = item;
    if (index >= kQuietDistance) offer(batch, batch[index - kQuietDistance]);
    ++index;
    return *this;
  }
  QuietBatchWriter& operator++() noexcept { return *this; }
  QuietBatchWriter& operator++(int) noexcept { return *this; }

  // `left` never passes the pointer being offered, so the batch is compacted in place.
  void offer(void** batch, void* item) noexcept {
    if (!quiet(item)) batch[left++] = item;
  }
};

// Takes up to `want` pointers off `queue` into `batch`, releasing quietly what `quiet` accepts (see
// QuietBatchWriter). Flattened for the same reason as dequeue_batch.
template <class QuietRelease>
__attribute__((flatten)) inline TakenBatch dequeue_quietly(PointerQueue& queue, void** batch,
                                                           std::size_t want, const QuietRelease& quiet) noexcept {
  QuietBatchWriter<QuietRelease> writer{reinterpret_cast<std::uintptr_t>(batch), 0, 0, 0, quiet};
  const std::size_t taken = queue.template try_dequeue_bulk<QuietBatchWriter<QuietRelease>&>(writer, want);
  // The last kQuietDistance pointers (or all of a short batch) were copied but not yet offered.
  for (std::size_t k = taken > kQuietDistance ? taken - kQuietDistance : 0; k < taken; ++k) {
    writer.offer(batch, batch[k]);
  }
  return TakenBatch{taken, writer.left, writer.next_source};
}

// How often a drain that found quiet offers useless looks again whether they would pay, in batches, and
// how many pointers it looks at (`quiet.would_release`, which changes nothing). Offers read every pointee
// during the copy, which only slows the copy when nothing leaves quietly (objects that die); so once a
// batch releases less than half quietly, later batches are taken plainly, and a look at kQuietPeeks
// pointers of one batch in kQuietSampleEvery decides when to offer again (cheaper than offering a batch).
constexpr std::uint32_t kQuietSampleEvery = 16;
constexpr std::size_t kQuietPeeks = 8;

// The looks are a prime number of pointers apart, so that a regular mix with a shorter period cannot line
// up with them: the largest prime here that keeps every look inside the batch without wrapping (61 for a
// full batch), 1 for a batch shorter than 15. A mix that does line up only slows that drain, never a count.
constexpr std::size_t kQuietPeekStrides[] = {61, 59, 53, 47, 43, 41, 37, 31, 29, 23, 19, 17, 13, 11, 7, 5, 3, 2};

inline std::size_t quiet_peek_stride(std::size_t taken) noexcept {
  for (const std::size_t stride : kQuietPeekStrides) {
    if (stride * (kQuietPeeks - 1) < taken) return stride;
  }
  return 1;
}

// Whether at least half of kQuietPeeks pointers spread over batch[0, taken) (all of a shorter batch) would
// leave quietly. Out of line: it runs once in kQuietSampleEvery batches.
template <class QuietRelease>
__attribute__((noinline)) bool mostly_quiet(void* const* batch, std::size_t taken,
                                            const QuietRelease& quiet) noexcept {
  const std::size_t looks = taken < kQuietPeeks ? taken : kQuietPeeks;
  const std::size_t stride = quiet_peek_stride(taken);
  std::size_t quiet_ones = 0;
  for (std::size_t look = 0; look < looks; ++look) {
    quiet_ones += quiet.would_release(batch[look * stride]) ? 1 : 0;
  }
  return quiet_ones * 2 >= looks;
}

// The release action gets a batch in chunks of kReleaseChunk pointers. Before each chunk the drain asks
// the CPU for the storage lines of the next kLookahead * kReleaseChunk pointers after
// TakenBatch::next_source: the lines the next dequeues will copy, which another core wrote, arrive while
// the action works instead of one after another during the copy.
constexpr std::size_t kReleaseChunk = 128;
constexpr std::size_t kLookahead = 2;
constexpr std::size_t kPointersPerLine = 64 / sizeof(void*);

// Asks the CPU for the `count` cache lines from `address` on, to read. A prefetch never faults: a hint
// that points past the storage's memory costs nothing but the instruction.
inline void fetch_lines(std::uintptr_t address, std::size_t count) noexcept {
  // Unrolled: a chunk asks for 32 lines, and the loop's own add, compare and branch per line would
  // otherwise be a large part of the drain loop's instructions.
#pragma GCC unroll 8
  for (std::size_t line = 0; line < count; ++line) {
    __builtin_prefetch(reinterpret_cast<const void*>(address + line * 64), 0, 3);
  }
}

// In a fork child where `reader` outlived the reset (StorageReader::forked()): a fresh reader of the
// child's storage, since the old one no longer counts; otherwise none (`reader` covers the caller).
inline std::optional<StorageReader> reader_in_fork_child(const StorageSet& storages,
                                                         const StorageReader& reader) {
  if (!reader.forked()) return std::nullopt;
  return std::optional<StorageReader>(std::in_place, storages);
}

template <class Take>
std::size_t ReclaimQueue::release_all_taking(const StorageReader& reader, ReleaseBatchFn release, void* context,
                                             std::size_t max_items, bool linger, const Take& take) {
  // The caller's reader: neither storage changes until it leaves. What drains requeued (front_) is taken
  // first, as much of it as was there when this drain began (what this drain requeues itself waits for
  // the next one); then the previous storage a failed trim() left; then the current one.
  // Unless a release forks and the child goes on: the child's reset drops the storages (their pointers
  // are counted as abandoned_after_fork, never to be read again) and no longer counts the caller as a
  // reader (reader.forked()). There the drain finishes the batch in hand (settled out of
  // abandoned_after_fork, see settle_taken) and stops.
  FrontStorage* const front = storages_.front();
  std::size_t front_left = front->size.load(std::memory_order_relaxed);
  QueueStorage* const previous = storages_.previous();
  PointerQueue& current = storages_.current()->queue;
  counters_.note_pending(storages_.stored_count());
  void* batch[kDrainBatch];
  std::size_t taken_total = 0;
  std::size_t released_total = 0;
  bool halted = false;
  while (taken_total < max_items && !halted) {
    const std::size_t want = max_items - taken_total < kDrainBatch ? max_items - taken_total : kDrainBatch;
    TakenBatch got{0, 0, 0};
    if (front_left != 0) {
      const std::size_t taken = front->take(batch, want < front_left ? want : front_left);
      got = TakenBatch{taken, taken, 0};
      front_left = taken == 0 ? 0 : front_left - taken;
    }
    if (got.taken == 0 && previous != nullptr) got = take(previous->queue, batch, want);
    if (got.taken == 0) got = take(current, batch, want);
    if (got.taken == 0) break;
    // Counted before the release calls (all as taken, the quiet ones as released too: in_drain is the
    // difference), so a nested drain or a snapshot never sees these pointers in no bucket for longer than
    // the dequeue itself.
    const std::size_t quiet = got.taken - got.left;
    counters_.count_taken(got.taken);
    if (quiet != 0) counters_.count_released(quiet);
    if (taken_total == 0) counters_.count_nonempty_drain();
    taken_total += got.taken;
    released_total += quiet;
    if (got.left == 0) continue;
    // Only after a full dequeue: more is probably queued, and those lines are written. After a short one
    // the queue is (nearly) empty, and fetching the lines the producer writes next would only take
    // them away from its core.
    std::uintptr_t ahead = got.taken == want ? got.next_source : 0;
    ReleaseBatch items{batch, 0, 0, got.left};
    items.queue = this;
    items.forks = reader.forks;
    try {
      while (items.count < got.left) {
        const std::size_t chunk = got.left - items.count < kReleaseChunk ? got.left - items.count : kReleaseChunk;
        items.count += chunk;
        if (ahead != 0) {
          fetch_lines(ahead, kLookahead * chunk / kPointersPerLine);
          ahead += kLookahead * chunk * sizeof(void*);
        }
        release(&items, context);
        if (items.halt) break;
        settle(&items, items.count);
      }
    } catch (...) {
      // The item being released counts as released (its owner's action ran); the rest are still ours: back
      // to the front, into the child's own after a fork (the front is read again).
      settle(&items, items.next < got.left ? items.next : got.left);
      const std::size_t rest = items.next < got.left ? got.left - items.next : 0;
      // Uncounted first: in between, a snapshot finds them in no bucket (like a dequeue in flight), never
      // in two.
      settle_taken(rest, items.forks, /*released=*/false);
      requeue_items(batch + items.next, rest, /*first=*/true);
      throw;
    }
    if (items.halt) {
      // The action asked to halt before items[next]: that one and the rest of the dequeue go back first.
      settle(&items, items.next);
      const std::size_t rest = got.left - items.next;
      settle_taken(rest, items.forks, /*released=*/false);
      requeue_items(batch + items.next, rest, /*first=*/true);
      halted = true;
    }
    released_total += items.released;
    if (reader.forked()) break;
  }
  const std::optional<StorageReader> child_reader = reader_in_fork_child(storages_, reader);  // settling reads it
  if (linger && released_total != 0 && !halted) {
    linger_if_empty();
  } else {
    clear_signal_if_empty();
  }
  return released_total;
}

template <class QuietRelease>
std::size_t ReclaimQueue::drain_quietly(ReleaseBatchFn release, void* context, std::size_t max_items,
                                        bool linger, const QuietRelease& quiet) {
  // The one atomic load of an empty drain, as in drain().
  if (!signal_.is_set()) return 0;
  const StorageReader reader(storages_);
  // Batches taken plainly since the last quiet one (0: offer quietly). Shared by every drain_quietly of
  // this queue as a hint (racing drains may overwrite each other's: it only picks a speed).
  std::uint32_t plain_run = plain_batches_in_a_row_.load(std::memory_order_relaxed);
  const std::size_t released = release_all_taking(
      reader, release, context, max_items, linger,
      [&quiet, &plain_run](PointerQueue& from, void** batch, std::size_t want) {
        if (plain_run == 0) {
          const TakenBatch got = dequeue_quietly(from, batch, want, quiet);
          if (got.taken != 0) plain_run = (got.taken - got.left) * 2 >= got.taken ? 0 : 1;
          return got;
        }
        const TakenBatch got = dequeue_batch<false>(from, batch, want);  // the action fetches pointees
        if (got.taken == 0) return got;  // an empty look (at a previous storage) is not a batch
        if (plain_run < kQuietSampleEvery) {
          ++plain_run;
        } else {
          plain_run = mostly_quiet(batch, got.taken, quiet) ? 0 : 1;
        }
        return got;
      });
  plain_batches_in_a_row_.store(plain_run, std::memory_order_relaxed);
  return released;
}

}  // namespace reclaim
