// examples/reclaim_demo.cc — the reclaim queue end to end, in C++ alone.
//
// Native threads (standing in for CUDA's callback thread) hand "objects" to the process-wide queue
// through the CUhostFn-compatible reclaim_host_destructor(); the owner (this program, which holds the
// queue through reclaim::own_process_queue()) drains them on its own thread
// while they run; then it closes the queue, and pushes that arrive later are counted as leaked and
// never touched. The counters are printed at each step, and the conservation law is checked at the end.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "abi/reclaim.h"
#include "cleanup/reclaim_queue.h"

namespace {

// A stand-in for a Python object: the release action "frees" it by marking it.
struct Payload {
  std::atomic<int> releases{0};
};

// The release action: one call per bulk dequeue, `next` advanced before each release (ReleaseBatchFn).
void release_payloads(reclaim::ReleaseBatch* batch, void* released_count) {
  while (batch->next < batch->count) {
    static_cast<Payload*>(batch->items[batch->next++])->releases.fetch_add(1);
    static_cast<std::atomic<long>*>(released_count)->fetch_add(1);
  }
}

void print_counters(const char* when) {
  reclaim_stats s;
  reclaim_get_stats(&s);
  std::printf("%-28s handed_over=%-7llu released=%-7llu pending=%-6llu leaked_after_close=%-4llu "
              "eventfd_writes=%llu\n",
              when, (unsigned long long)s.handed_over, (unsigned long long)s.released,
              (unsigned long long)s.pending, (unsigned long long)s.leaked_after_close,
              (unsigned long long)s.eventfd_writes);
}

}  // namespace

int main() {
  constexpr int kProducers = 4;
  constexpr int kPerProducer = 50000;
  constexpr int kLate = 10;
  std::vector<Payload> payloads(kProducers * kPerProducer + kLate);
  std::atomic<long> released{0};
  std::atomic<bool> producing{true};

  // The owner's handle on the process queue, made before any producer can run.
  reclaim::ReclaimQueue& queue = *reclaim::own_process_queue();
  print_counters("start");

  // The owner: sleeps on the wake-up fd, drains in bounded batches while producers run.
  std::thread owner([&] {
    while (producing.load() || reclaim_pending() != 0) {
      if (queue.wait_for_work(10)) queue.drain(release_payloads, &released, 4096);
    }
  });

  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (int i = 0; i < kPerProducer; ++i) reclaim_host_destructor(&payloads[p * kPerProducer + i]);
    });
  }
  for (auto& t : producers) t.join();
  print_counters("producers done");
  producing = false;
  owner.join();
  print_counters("owner drained");

  queue.close(release_payloads, &released);
  print_counters("closed");

  // Late destructors, as CUDA may fire them during exit(): counted, never dereferenced.
  std::thread late([&] {
    for (int i = 0; i < kLate; ++i) reclaim_host_destructor(&payloads[kProducers * kPerProducer + i]);
  });
  late.join();
  print_counters("after late pushes");

  int wrong = 0;
  for (int i = 0; i < kProducers * kPerProducer; ++i) wrong += payloads[i].releases.load() != 1;
  for (int i = 0; i < kLate; ++i) wrong += payloads[kProducers * kPerProducer + i].releases.load() != 0;
  std::printf("\nreleased: %ld of %d handed over before close (each exactly once: %s); "
              "late pushes touched: %s\n",
              released.load(), kProducers * kPerProducer, wrong == 0 ? "yes" : "NO",
              wrong == 0 ? "none" : "SOME");
  std::fflush(stdout);
  reclaim_write_report(1);  // the exit-report line, written with write(2)
  reclaim_stats s;
  reclaim_get_stats(&s);
  return wrong == 0 && reclaim_stats_conserved(&s) ? 0 : 1;
}
