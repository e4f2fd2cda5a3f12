// tests/cleanup/release_recorder.h — test helper: fake items with ids, a release action that counts how
// often each id was released, so tests can assert "released exactly once" / "never released", and
// each_item, which makes a batch release action of a one-item one.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "cleanup/release_batch.h"

namespace reclaim_test {

// Items are fake addresses (id + 1) * 16: never dereferenced by the queue, never null.
inline void* item_for(std::size_t id) { return reinterpret_cast<void*>((id + 1) * 16); }
inline std::size_t id_of(void* item) { return reinterpret_cast<std::uintptr_t>(item) / 16 - 1; }

class ReleaseRecorder {
 public:
  explicit ReleaseRecorder(std::size_t ids) : counts_(new std::atomic<int>[ids]), size_(ids) {
    for (std::size_t i = 0; i < ids; ++i) counts_[i].store(0);
  }
  // One item; `self` is the recorder. Drains take each_item<ReleaseRecorder::release>.
  static void release(void* item, void* self) noexcept {
    auto* recorder = static_cast<ReleaseRecorder*>(self);
    recorder->counts_[id_of(item)].fetch_add(1, std::memory_order_relaxed);
    recorder->total_.fetch_add(1, std::memory_order_relaxed);
  }
  int count(std::size_t id) const { return counts_[id].load(); }
  std::size_t total() const { return total_.load(); }
  std::size_t size() const { return size_; }

 private:
  std::unique_ptr<std::atomic<int>[]> counts_;
  std::size_t size_;
  std::atomic<std::size_t> total_{0};
};

// The batch release action that calls kRelease(item, context) for each item in order, advancing `next`
// before each call (ReleaseBatchFn's contract: an item whose release unwinds counts as released).
template <void (*kRelease)(void* item, void* context)>
void each_item(reclaim::ReleaseBatch* batch, void* context) {
  while (batch->next < batch->count) {
    void* const item = batch->items[batch->next++];
    kRelease(item, context);
  }
}

}  // namespace reclaim_test
