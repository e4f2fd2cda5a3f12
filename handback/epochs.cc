// handback/epochs.cc — the hand-back barrier's epochs and their count table (see barrier.h):
// the chunks, the occupied bitmap and its pruning, epoch switches, marks, requests and reached().

#include "handback/barrier.h"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <new>

namespace reclaim::handback {
namespace {
constexpr std::uint64_t bit_of(int index) noexcept { return std::uint64_t{1} << (index & 63); }
// The group words that cover counts [0, used): 4,096 counts each.
constexpr int groups_below(int used) noexcept { return (used + 4095) >> 12; }
int lowest(std::uint64_t bits) noexcept { return __builtin_ctzll(bits); }

// Chunk k starts at count kFirst * (2^k - 1): for an index past the first chunk, k is the bit width of
// index / kFirst + 1, less one.
template <int kFirstBits>
int chunk_of(int index) noexcept {
  const unsigned scaled = (static_cast<unsigned>(index) >> kFirstBits) + 1;
  return 31 - __builtin_clz(scaled);
}
template <int kFirstBits>
int chunk_start(int chunk) noexcept {
  return ((1 << chunk) - 1) << kFirstBits;
}
}  // namespace

HandBackBarrier::EpochCount& HandBackBarrier::count_at(int index) const noexcept {
  if (index < kFirstChunk) return const_cast<EpochCount&>(first_chunk_[index]);
  const int chunk = chunk_of<kFirstChunkBits>(index);
  // Published (release) before the index was first made current or counted in counts_used_, whose loads
  // (seq_cst, acquire) came before this one.
  EpochCount* const counters = chunks_[chunk].load(std::memory_order_acquire);
  return counters[index - chunk_start<kFirstChunkBits>(chunk)];
}

bool HandBackBarrier::ensure_chunk_locked(int index) noexcept {
  if (index < kFirstChunk) return true;
  const int chunk = chunk_of<kFirstChunkBits>(index);
  if (chunks_[chunk].load(std::memory_order_relaxed) != nullptr) return true;
  const int start = chunk_start<kFirstChunkBits>(chunk);
  const int size = std::min(kFirstChunk << chunk, max_counts_ - start);
  EpochCount* const counters = new (std::nothrow) EpochCount[static_cast<std::size_t>(size)];
  if (counters == nullptr) return false;
  chunks_[chunk].store(counters, std::memory_order_release);
  return true;
}


void HandBackBarrier::report_emptied(int index) noexcept {
  const int word = index >> 6;
  // The word before its group bit: a switch that takes the group bit takes the word after it. A bit set
  // into a word that was not clear finds the group bit set, or taken by a switch that has yet to take the
  // word (both are read-modify-writes of one word, in one order).
  if (emptied_.words[word].fetch_or(bit_of(index), std::memory_order_seq_cst) == 0) {
    emptied_.groups[word >> 6].fetch_or(bit_of(word), std::memory_order_seq_cst);
  }
}

void HandBackBarrier::occupy_locked(int index, std::uint64_t epoch) noexcept {
  const int word = index >> 6;
  // Epochs only grow: each store raises the bound. Both come before the bit, and all before current_.
  word_newest_[word].store(epoch, std::memory_order_seq_cst);
  group_newest_[word >> 6].store(epoch, std::memory_order_seq_cst);
  const std::uint64_t before = occupied_.words[word].fetch_or(bit_of(index), std::memory_order_seq_cst);
  if (before == 0) occupied_.groups[word >> 6].fetch_or(bit_of(word), std::memory_order_seq_cst);
  if ((before | bit_of(index)) == ~std::uint64_t{0}) full_[word >> 6] |= bit_of(word);
}

void HandBackBarrier::vacate_locked(int index) noexcept {
  const int word = index >> 6;
  const std::uint64_t before = occupied_.words[word].fetch_and(~bit_of(index), std::memory_order_seq_cst);
  if ((before & bit_of(index)) == 0) return;  // vacated already
  full_[word >> 6] &= ~bit_of(word);
  if (before == bit_of(index)) occupied_.groups[word >> 6].fetch_and(~bit_of(word), std::memory_order_seq_cst);
}

// Why a vacated count holds no ticket that a waiter must see. A ticket of count S is one whose begin() read
// current_ naming S before and after its count (same value: no switch in between), so S was current at
// that count. A switch vacates S, the mutex held, only when S is not current and its count reads 0:
//  - every ticket counted while S was current before: its count and its second load of current_ precede,
//    in the seq_cst order, the store that made another count current, which precedes the vacating count
//    load; so that load sees the ticket, unless it ended: the count reads 0 only when all of them ended;
//  - a later ticket of S needs S current again, that is a switch (under the same mutex) that sets S's bit
//    before it stores current_: the bit is set again before the ticket is counted;
//  - what else reaches S's count is a begin() that read an old current_, counts, finds current_ changed
//    and undoes: a transient count that no waiter needs (that begin() returns a ticket of a later epoch,
//    newer than any span requested before it returned). Its undo reports S again when not current.
// So a waiter's reached() (after its request) finds the bit of every count holding a ticket it covers: the
// bit was set before that ticket's count and stays set until the ticket ends.
void HandBackBarrier::prune_locked(int current) noexcept {
  const int groups = groups_below(counts_used_.load(std::memory_order_relaxed));
  for (int group = 0; group < groups; ++group) {
    if (emptied_.groups[group].load(std::memory_order_relaxed) == 0) continue;
    for (std::uint64_t words = emptied_.groups[group].exchange(0, std::memory_order_seq_cst); words != 0;
         words &= words - 1) {
      const int word = group * 64 + lowest(words);
      for (std::uint64_t bits = emptied_.words[word].exchange(0, std::memory_order_seq_cst); bits != 0;
           bits &= bits - 1) {
        const int index = word * 64 + lowest(bits);
        if (index != current && count_at(index).tickets.load(std::memory_order_seq_cst) == 0) vacate_locked(index);
      }
    }
  }
}

void HandBackBarrier::switch_epoch_locked() noexcept {
  const std::uint64_t now = current_.load(std::memory_order_seq_cst);
  const int current = static_cast<int>(now & kCountMask);
  const std::uint64_t next = epoch_.load(std::memory_order_relaxed) + 1;
  const int used = counts_used_.load(std::memory_order_relaxed);
  prune_locked(current);
  // The lowest clear bit (never the current count's): a count ever used that holds nothing, else `used`, so
  // that the table grows only when every count holds an epoch. The last word is never full (count kMaxEpochCounts
  // is never occupied), so some group has a word that is not full.
  int chosen = kMaxEpochCounts;
  for (int group = 0; group < kWordGroups; ++group) {
    if (full_[group] == ~std::uint64_t{0}) continue;
    const int word = group * 64 + lowest(~full_[group]);
    chosen = word * 64 + lowest(~occupied_.words[word].load(std::memory_order_relaxed));
    break;
  }
  if (chosen < used || (chosen < max_counts_ && ensure_chunk_locked(chosen))) {
    count_at(chosen).oldest.store(next, std::memory_order_relaxed);
  } else {
    // Every count holds an epoch and the table cannot grow: share the youngest count other than the current
    // one, the one current before it (its oldest epoch stays).
    chosen = previous_ != current ? previous_ : current;
    shared_counts_.fetch_add(1, std::memory_order_relaxed);
  }
  count_at(chosen).newest.store(next, std::memory_order_relaxed);
  occupy_locked(chosen, next);
  if (chosen == used) counts_used_.store(used + 1, std::memory_order_release);
  epoch_.store(next, std::memory_order_seq_cst);
  current_.store((next << kCountBits) | static_cast<std::uint64_t>(chosen), std::memory_order_seq_cst);
  if (chosen == current) return;
  previous_ = current;
  // The count left: vacated now if it counts nothing. Its count is read after the store above, so it holds
  // every ticket of the count (see prune_locked); an end() that empties it later finds it not current and
  // reports it.
  if (count_at(current).tickets.load(std::memory_order_seq_cst) == 0) vacate_locked(current);
}

std::uint64_t HandBackBarrier::mark() noexcept {
  std::lock_guard<std::mutex> lock(waiters_mutex_);
  switch_epoch_locked();
  return epoch();
}

HandBackBarrier::Span HandBackBarrier::request(std::uint64_t since) noexcept {
  std::lock_guard<std::mutex> lock(waiters_mutex_);
  const std::uint64_t until = epoch();
  switch_epoch_locked();
  return Span{since, until};
}

bool HandBackBarrier::reached(const Span& span) const noexcept {
  // Without the mutex. A bit set after its load is a count made current after this call began, so of an
  // epoch newer than any requested span; a bit cleared before its load was a count that counted nothing
  // and was not current (see prune_locked); a word whose newest epoch is older than span.since holds no
  // count of the span. A group bit stays set while its word has a bit set.
  const int groups = groups_below(counts_used_.load(std::memory_order_acquire));
  std::uint64_t words_read = 0;
  std::uint64_t counts_read = 0;
  bool result = true;
  for (int group = 0; group < groups && result; ++group) {
    ++words_read;
    std::uint64_t words = occupied_.groups[group].load(std::memory_order_seq_cst);
    if (words == 0 || group_newest_[group].load(std::memory_order_seq_cst) < span.since) continue;
    for (; words != 0 && result; words &= words - 1) {
      const int word = group * 64 + lowest(words);
      if (word_newest_[word].load(std::memory_order_seq_cst) < span.since) continue;
      ++words_read;
      for (std::uint64_t bits = occupied_.words[word].load(std::memory_order_seq_cst); bits != 0;
           bits &= bits - 1) {
        ++counts_read;
        // The bit's acquire ordered the chunk's publication, which came before the bit was set.
        const EpochCount& counter = count_at(word * 64 + lowest(bits));
        if (counter.tickets.load(std::memory_order_seq_cst) == 0) continue;
        // The count's acquire ordered the epochs written before the switch that made the count current.
        if (counter.oldest.load(std::memory_order_relaxed) <= span.until &&
            counter.newest.load(std::memory_order_relaxed) >= span.since) {
          result = false;
          break;
        }
      }
    }
  }
  reached_words_.fetch_add(words_read, std::memory_order_relaxed);
  reached_counts_.fetch_add(counts_read, std::memory_order_relaxed);
  return result;
}

}  // namespace reclaim::handback
