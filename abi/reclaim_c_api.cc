// abi/reclaim_c_api.cc — the C entry points of abi/reclaim.h: through this copy's own process
// queue's table, or an adopted one. The table's hand-back entry points are this copy's process barrier's
// (//handback).

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "cleanup/process_queue.h"
#include "abi/reclaim.h"
#include "cleanup/reclaim_queue.h"
#include "handback/process_barrier.h"

namespace {

reclaim::ReclaimQueue& own() noexcept { return reclaim::process_queue(); }

// --- this copy's own process queue, as a table -------------------------------------------------------

int own_push(void* item) { return static_cast<int>(own().push(item)); }

void own_host_destructor(void* user_data) { (void)own().push(user_data); }

int own_get_stats(reclaim_stats* out, size_t size) {
  if (out == nullptr) return -1;
  const reclaim_stats all = own().snapshot().as_c();
  std::memcpy(out, &all, size < sizeof all ? size : sizeof all);
  return 0;
}

int own_is_closed() { return own().is_closed() ? 1 : 0; }

size_t own_pending() { return own().pending(); }

int own_wakeup_fd() { return own().wakeup_fd(); }

int own_write_report(int fd) {
  char line[512];
  const size_t length = reclaim::format_report(own().snapshot(), line, sizeof line);
  size_t done = 0;
  while (done < length) {
    const ssize_t wrote = ::write(fd, line + done, length - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return -1;
    done += static_cast<size_t>(wrote);
  }
  return 0;
}

// The owner's hooks; null until reclaim_own_process_queue(). Written once (release), read with acquire.
std::atomic<const reclaim_owner*> g_owner{nullptr};

ptrdiff_t own_drain(ptrdiff_t max_items) {
  const reclaim_owner* owner = g_owner.load(std::memory_order_acquire);
  return owner != nullptr ? owner->drain(max_items) : 0;
}

int own_announce() {
  const reclaim_owner* owner = g_owner.load(std::memory_order_acquire);
  return owner != nullptr ? owner->announce() : 0;
}

// The hand-back barrier's entry points are //handback's (handback/process_barrier.h); the wait is 0 once the
// queue is closed too (before the call, whatever is held), as the Python form's False.
int own_wait_handed_back(double timeout_seconds) {
  if (own().is_closed()) return 0;
  return reclaim::handback::wait_handed_back(timeout_seconds);
}

int own_hand_back_begin() { return reclaim::handback::hand_back_begin(); }

void own_hand_back_end(int ticket, uint32_t* done) { reclaim::handback::hand_back_end(ticket, done); }

// Constant-initialized and never destroyed (invariant 2): another copy may call through it during exit().
const reclaim_api kOwnApi = {
    RECLAIM_ABI_VERSION, sizeof(reclaim_api), own_push,      own_host_destructor, own_drain,
    own_get_stats,       own_is_closed,       own_pending,   own_wakeup_fd,       own_write_report,
    own_announce,        own_hand_back_begin, own_hand_back_end, own_wait_handed_back,
};

// The table in use. Null until the first use (which binds kOwnApi) or reclaim_adopt(); written once,
// by a compare-exchange from null (acq_rel), never again. Readers load it with acquire. Zero-initialized
// static storage: no constructor, no destructor, valid from load to exit.
std::atomic<const reclaim_api*> g_api{nullptr};

// One acquire load on every call after the first.
const reclaim_api& api() noexcept {
  const reclaim_api* bound = g_api.load(std::memory_order_acquire);
  if (bound != nullptr) return *bound;
  const reclaim_api* expected = nullptr;
  if (g_api.compare_exchange_strong(expected, &kOwnApi, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
    return kOwnApi;
  }
  return *expected;  // a racing first use or adoption won
}

}  // namespace

namespace reclaim {

ReclaimQueue* own_process_queue() noexcept {
  if (&api() != &kOwnApi) return nullptr;  // adopted: the owner is another copy
  return &own();
}

}  // namespace reclaim

namespace {
// Whether every entry is there: a table with a hole would turn a later call into a jump to address 0,
// where a refusal can still be handled.
bool complete(const reclaim_api& table) {
  return table.push != nullptr && table.host_destructor != nullptr && table.drain != nullptr &&
         table.get_stats != nullptr && table.is_closed != nullptr && table.pending != nullptr &&
         table.wakeup_fd != nullptr && table.write_report != nullptr && table.announce != nullptr &&
         table.hand_back_begin != nullptr && table.hand_back_end != nullptr && table.wait_handed_back != nullptr;
}
}  // namespace

extern "C" {

int reclaim_push(void* item) { return api().push(item); }

void reclaim_host_destructor(void* user_data) { api().host_destructor(user_data); }

int reclaim_is_closed(void) { return api().is_closed(); }

size_t reclaim_pending(void) { return api().pending(); }

int reclaim_wakeup_fd(void) { return api().wakeup_fd(); }

int reclaim_write_report(int fd) { return api().write_report(fd); }

ptrdiff_t reclaim_drain(ptrdiff_t max_items) { return api().drain(max_items); }

int reclaim_announce(void) { return api().announce(); }

int reclaim_hand_back_begin(void) { return api().hand_back_begin(); }

void reclaim_hand_back_end(int ticket, uint32_t* done) { api().hand_back_end(ticket, done); }

int reclaim_wait_handed_back(double timeout_seconds) { return api().wait_handed_back(timeout_seconds); }

int reclaim_get_stats(reclaim_stats* out) {
  if (out == nullptr) return -1;
  // An older owner fills fewer fields; the rest read as 0.
  std::memset(out, 0, sizeof *out);
  return api().get_stats(out, sizeof *out);
}

const reclaim_api* reclaim_api_in_use(void) { return &api(); }

int reclaim_adopt(const reclaim_api* adopted) {
  if (adopted == nullptr || adopted->abi_version < RECLAIM_ABI_VERSION ||
      adopted->struct_size < sizeof(reclaim_api) || !complete(*adopted)) {
    return -1;
  }
  const reclaim_api* expected = nullptr;
  if (g_api.compare_exchange_strong(expected, adopted, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
    return 0;
  }
  return expected == adopted ? 0 : -1;
}

int reclaim_own_process_queue(const reclaim_owner* owner) {
  if (owner == nullptr || owner->drain == nullptr || owner->announce == nullptr) return -1;
  if (reclaim::own_process_queue() == nullptr) return -1;
  g_owner.store(owner, std::memory_order_release);
  return 0;
}

}  // extern "C"
