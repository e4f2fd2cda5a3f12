// bench/anchors.h — the anchor strategies that cuda-reclaim is measured against, over opaque pointers.
//
// Written from the published descriptions of each design (docs/benchmarks.md); no code copied. Each is
// reduced to what a producer thread and a draining owner do, so that the same structure serves the pure
// C++ benchmarks (bench/queue_bench.cc, items are fake pointers), the Python benchmarks and the shutdown
// comparison (through bench/python_anchors.h, items are PyObject* released with Py_DECREF under the GIL).
//
//   MutexVectorPool  PyO3's reference pool: a mutex-guarded vector; the owner swaps it out and releases
//                    the batch outside the lock (PyO3 does this on the next GIL acquisition).
//   MutexDequePool   jaxlib's PythonRefManager: a mutex-guarded deque, swapped out on API entry.
//   CoalescedStack   cuda.core's deferred cleanup: an intrusive lock-free (CAS) stack of nodes that were
//                    allocated in advance (when the reference was registered), plus a "drain scheduled"
//                    flag so that only the first push after a drain asks the owner to run (cuda.core asks
//                    with one Py_AddPendingCall: PendingCallStack in bench/python_anchors.h).

#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <mutex>
#include <vector>

namespace reclaim_bench {

// Releases `items` one by one with `release(item)`; returns how many.
template <class Container, class Release>
std::size_t release_each(const Container& items, Release&& release) {
  for (void* item : items) release(item);
  return items.size();
}

// PyO3's pattern. push: any thread; takes a mutex that the owner also takes (never held across Python).
// drain: the owner (for Python objects: a thread holding the GIL). Not a cuda-reclaim API.
class MutexVectorPool {
 public:
  void push(void* item) {
    std::lock_guard<std::mutex> lock(mutex_);
    items_.push_back(item);
  }

  template <class Release>
  std::size_t drain(Release&& release) {
    std::vector<void*> taken;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (items_.empty()) return 0;
      taken.swap(items_);
    }
    return release_each(taken, release);
  }

 private:
  std::mutex mutex_;
  std::vector<void*> items_;
};

// jaxlib's pattern; same contract as MutexVectorPool. jaxlib keeps an atomic count so that API entry can
// skip the lock while the deque is small; the count is kept here too, as part of the producer's cost.
class MutexDequePool {
 public:
  void push(void* item) {
    std::lock_guard<std::mutex> lock(mutex_);
    items_.push_back(item);
    // Written under the mutex by producers and the owner; read without it (relaxed) by a quick check.
    count_.fetch_add(1, std::memory_order_relaxed);
  }

  template <class Release>
  std::size_t drain(Release&& release) {
    if (count_.load(std::memory_order_relaxed) == 0) return 0;
    std::deque<void*> taken;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      taken.swap(items_);
      count_.store(0, std::memory_order_relaxed);
    }
    return release_each(taken, release);
  }

 private:
  std::mutex mutex_;
  std::deque<void*> items_;
  std::atomic<std::size_t> count_{0};
};

// One registered reference; allocated before the producer runs (cuda.core allocates it with the object).
struct StackNode {
  void* item = nullptr;
  StackNode* next = nullptr;
};

// cuda.core's pattern. push: any thread; lock-free. take_all/mark_drained: the owner.
class CoalescedStack {
 public:
  // Pushes `node` (which now belongs to the stack until take_all). Returns true when the caller must
  // schedule a drain: the first push since the owner's last mark_drained(). seq_cst on the head and the
  // flag, paired with mark_drained(): a push that sees the flag still set is taken by the coming drain.
  bool push(StackNode* node) noexcept {
    StackNode* old = head_.load(std::memory_order_relaxed);
    do {
      node->next = old;
    } while (!head_.compare_exchange_weak(old, node, std::memory_order_seq_cst, std::memory_order_relaxed));
    if (scheduled_.load(std::memory_order_seq_cst)) return false;  // common case: no RMW
    return !scheduled_.exchange(true, std::memory_order_seq_cst);
  }

  // Undoes a push's claim when scheduling failed, so that the next push tries again.
  void unschedule() noexcept { scheduled_.store(false, std::memory_order_seq_cst); }

  // The owner's drain: clears the flag first, then detaches the whole list (newest first).
  StackNode* take_all() noexcept {
    scheduled_.store(false, std::memory_order_seq_cst);
    return head_.exchange(nullptr, std::memory_order_seq_cst);
  }

  // Releases every node of `list` (from take_all) with `release(item)`; nodes stay owned by the caller.
  template <class Release>
  static std::size_t release_list(StackNode* list, Release&& release) {
    std::size_t count = 0;
    while (list != nullptr) {
      StackNode* next = list->next;  // read before release: the node's owner may reuse it afterwards
      release(list->item);
      list = next;
      ++count;
    }
    return count;
  }

 private:
  // Written by producers (CAS, seq_cst) and the owner (exchange, seq_cst).
  alignas(64) std::atomic<StackNode*> head_{nullptr};
  // Set by the first producer after a drain (exchange), cleared by the owner (store); seq_cst both sides.
  alignas(64) std::atomic<bool> scheduled_{false};
};

}  // namespace reclaim_bench
