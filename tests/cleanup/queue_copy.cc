// tests/cleanup/queue_copy.cc — body of the test-only shared objects libqueue_copy_*.so: each links its
// own static copy of cleanup/ and exports nothing but queue_copy(), like an extension module that links
// cleanup/ under Bazel.
#include "tests/cleanup/queue_copy.h"

#include "abi/reclaim.h"
#include "cleanup/reclaim_queue.h"
#include "tests/cleanup/release_recorder.h"

namespace {

using reclaim_test::each_item;

// This copy's owner state (set once by become_owner, before anything drains).
queue_copy_release_fn g_release = nullptr;
void* g_context = nullptr;

// The owner's release of one item; drains take each_item<release_one>.
void release_one(void* item, void*) { g_release(item, g_context); }

ptrdiff_t owner_drain(ptrdiff_t max_items) {
  reclaim::ReclaimQueue* queue = reclaim::own_process_queue();
  if (queue == nullptr || g_release == nullptr) return 0;
  return static_cast<ptrdiff_t>(
      queue->drain(each_item<release_one>, nullptr, max_items < 0 ? SIZE_MAX : static_cast<size_t>(max_items)));
}

int owner_announce() { return 0; }

const reclaim_owner kOwner = {owner_drain, owner_announce};

int become_owner(queue_copy_release_fn release, void* context) {
  g_release = release;
  g_context = context;
  return reclaim_own_process_queue(&kOwner);
}

size_t close_as_owner() {
  reclaim::ReclaimQueue* queue = reclaim::own_process_queue();
  return queue == nullptr ? 0 : queue->close(g_release != nullptr ? each_item<release_one> : nullptr, nullptr);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const QueueCopy* queue_copy(void) {
  static const QueueCopy kCopy = {
      reclaim_push,      reclaim_host_destructor, reclaim_drain, reclaim_pending,
      reclaim_get_stats, reclaim_wakeup_fd,       reclaim_api_in_use, reclaim_adopt,
      become_owner,      close_as_owner,
  };
  return &kCopy;
}
