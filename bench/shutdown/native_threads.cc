// bench/shutdown/native_threads.cc — see native_threads.h.

#include <Python.h>  // first (CPython's rule): strategies.h below needs it

#include "bench/shutdown/native_threads.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>

#include "bench/shutdown/strategies.h"

namespace reclaim_shutdown {
namespace {

SharedRecord* g_record = nullptr;
pid_t g_setup_pid = 0;
pthread_key_t g_slot_key;

std::vector<void*>* g_burst = nullptr;  // armed by arm_exit_burst(); fired once from exit(); never freed
int g_burst_threads = 0;

// How long the exit check waits for a thread that is inside a call to come back. Generous, because a
// loaded CI host preempts threads for long stretches; a strategy that returns at all returns in
// microseconds.
constexpr auto kExitGrace = std::chrono::milliseconds(2000);

// Runs at thread exit, including a pthread_exit() unwind that got past every frame: a thread that ends
// with a call begun and not returned was killed inside it.
void on_thread_exit(void* value) {
  auto* slot = static_cast<Slot*>(value);
  if (slot->entered.load(std::memory_order_relaxed) != slot->returned.load(std::memory_order_relaxed)) {
    g_record->killed.fetch_add(1, std::memory_order_relaxed);
  }
}

struct Work {
  std::vector<void*> items;
  std::size_t first;
  std::size_t step;
  int delay_us;
};

// The thread body. noexcept like a CUDA callback thread's frames: nothing may unwind through it.
void fire_items(const Work* work) noexcept {
  Slot* slot = claim_slot(g_record);
  if (slot != nullptr) pthread_setspecific(g_slot_key, slot);
  std::uint64_t random = 0x9E3779B97F4A7C15ull ^ reinterpret_cast<std::uintptr_t>(&random);
  for (std::size_t i = work->first; i < work->items.size(); i += work->step) {
    if (work->delay_us > 0) {
      random ^= random << 13;
      random ^= random >> 7;
      random ^= random << 17;
      // Jittered so that over many runs the calls land at every point of shutdown.
      std::this_thread::sleep_for(std::chrono::microseconds(random % (2 * work->delay_us + 1)));
    }
    if (slot != nullptr) slot->entered.fetch_add(1, std::memory_order_relaxed);
    release_one(work->items[i]);
    if (slot != nullptr) slot->returned.fetch_add(1, std::memory_order_relaxed);
  }
  if (slot != nullptr) slot->finished.store(1, std::memory_order_relaxed);
}

void fire_burst(const std::vector<void*>* items, std::size_t first, std::size_t step) noexcept {
  for (std::size_t i = first; i < items->size(); i += step) {
    g_record->burst_entered.fetch_add(1, std::memory_order_relaxed);
    release_one((*items)[i]);
    g_record->burst_returned.fetch_add(1, std::memory_order_relaxed);
  }
}

// Counts the threads of this process that sit inside one call through the whole grace period (they hang
// on a lock that nobody will release, or were killed without running their exit hook).
std::uint64_t count_stuck_threads() {
  std::uint64_t seen[kMaxSlots];
  bool inside[kMaxSlots];
  const std::uint32_t used = slots_used(*g_record);
  for (std::uint32_t i = 0; i < used; ++i) {
    const Slot& slot = g_record->slots[i];
    seen[i] = slot.entered.load(std::memory_order_relaxed);
    inside[i] = slot.pid.load(std::memory_order_relaxed) == g_setup_pid &&
                seen[i] != slot.returned.load(std::memory_order_relaxed);
  }
  const auto deadline = std::chrono::steady_clock::now() + kExitGrace;
  std::uint64_t stuck = 0;
  for (std::uint32_t i = 0; i < used; ++i) {
    if (!inside[i]) continue;
    const Slot& slot = g_record->slots[i];
    while (slot.returned.load(std::memory_order_relaxed) < seen[i] &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (slot.returned.load(std::memory_order_relaxed) < seen[i]) ++stuck;
  }
  return stuck;
}

// A C atexit handler: runs in exit(), after Py_Finalize returned (Py_RunMain finalizes before main()
// returns) and before the loader's fini pass, which writes cuda-reclaim's exit report.
void at_exit() {
  if (getpid() != g_setup_pid) return;  // a forked child inherits the handler, not the threads
  if (g_burst != nullptr) {
    std::vector<std::thread> workers;
    for (int t = 0; t < g_burst_threads; ++t) {
      workers.emplace_back(fire_burst, g_burst, static_cast<std::size_t>(t),
                           static_cast<std::size_t>(g_burst_threads));
    }
    for (auto& worker : workers) worker.join();
  }
  g_record->stuck.store(count_stuck_threads(), std::memory_order_relaxed);
  g_record->exit_checked.store(1, std::memory_order_relaxed);
}

}  // namespace

bool install_exit_checks(SharedRecord* record) noexcept {
  const int error = pthread_key_create(&g_slot_key, on_thread_exit);
  if (error != 0) {
    errno = error;
    return false;
  }
  g_record = record;
  g_setup_pid = getpid();
  return std::atexit(at_exit) == 0;
}

void start_native_threads(std::vector<void*> items, int threads, int delay_us) {
  for (int t = 0; t < threads; ++t) {
    // Owned by the detached thread for the life of the process (never freed: it may outlive exit()).
    auto* work = new Work{items, static_cast<std::size_t>(t), static_cast<std::size_t>(threads), delay_us};
    std::thread(fire_items, work).detach();
  }
}

void arm_exit_burst(std::vector<void*> items, int threads) {
  g_burst = new std::vector<void*>(std::move(items));
  g_burst_threads = threads;
}

}  // namespace reclaim_shutdown
