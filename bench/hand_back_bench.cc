// bench/hand_back_bench.cc — what reclaim::handback::HandBackBarrier costs CUDA's thread, and how soon a waiter
// learns that everything was handed back. No Python, no GPU: the calling thread stands in for CUDA's.
//
//   BM_HandBack/<what>/<waiter>   one thread, cost per hand-back:
//     what:   pair       begin() + end(), an attachment and its hand-back
//             pair_cell  the same with a done cell given to end() (a host node's)
//             end        end() alone (the tickets are taken outside the timed part, in batches)
//     waiter: none       no wait in progress, nobody waits
//             asleep     one waiter thread asleep in wait() on the span of an older epoch (one ticket of
//                        that epoch's count stays held; the measured ones count in the current epoch's count,
//                        whose emptying wakes nobody)
//   BM_ManyEpochs/<what>          a waiter's cost beside kManyEpochs epochs (a graph each, attached in its
//                                 own epoch), per call:
//     held/mark              mark() while every one of them still holds its ticket
//     held/wait_since_mark   since = mark(), then wait(request(since), 0): reached, nothing came after it
//     held/build             building the kManyEpochs held epochs (begin() + request(0) each), per epoch
//     released/wait          wait(request(0), 0) after all of them were held at once and then ended
//   BM_FormerCounters/<what>      the baseline: the graph counters before the barrier, relaxed fetch_add /
//                                 fetch_sub on separate atomics (pair: held +1 at attach, then handed back
//                                 +1 and held -1; end: the last two).
//
// Then a table of wake latency, p50 / p99 in µs, printed after the benchmarks:
//   barrier      a waiter thread sleeps in wait(request(0)); another thread reads the clock and calls end()
//                on the last ticket of the old epoch; the waiter reads the clock when wait() returned.
//   futex        the floor: a bare futex wait on one word, woken by FUTEX_WAKE after the word was set.
//   poll 1 ms    the anchor: a waiter checks an atomic flag and sleeps 1 ms between checks; the other
//                thread sets the flag at a random moment and reads the clock.
// Flags: --rounds=N (latency rounds per row, default 2000), --quick (20 rounds and a 1 ms minimum time per
// benchmark, for a smoke run); the rest goes to Google Benchmark. Speed is reported, never asserted.

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "handback/barrier.h"

namespace {

using reclaim::handback::HandBackBarrier;
using Clock = std::chrono::steady_clock;

int g_rounds = 2000;

long thread_id() { return syscall(SYS_gettid); }

// True when thread `tid` of this process is blocked in a futex wait (its /proc syscall line starts with
// the futex syscall's number while it is blocked). Off the timed path only.
bool blocked_in_futex(long tid) {
  std::ifstream file("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long number = -1;
  return (file >> number) && number == SYS_futex;
}

// A thread asleep in barrier.wait() on a span held open by one ticket, for the life of the object.
class SleepingWaiter {
 public:
  explicit SleepingWaiter(HandBackBarrier& barrier) : barrier_(barrier), held_(barrier.begin()) {
    const HandBackBarrier::Span span = barrier.request(0);
    thread_ = std::thread([this, span] {
      tid_.store(thread_id());
      (void)barrier_.wait(span, -1);
    });
    while (tid_.load() == 0) std::this_thread::yield();
    while (!blocked_in_futex(tid_.load())) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ~SleepingWaiter() {
    barrier_.end(held_, nullptr);  // empties the old count: the waiter returns
    thread_.join();
  }

 private:
  HandBackBarrier& barrier_;
  const int held_;
  std::atomic<long> tid_{0};
  std::thread thread_;
};

enum class Waiter { kNone, kAsleep };
enum class What { kPair, kPairCell, kEnd };

void BM_HandBack(benchmark::State& state, What what, Waiter waiter_kind) {
  HandBackBarrier barrier;
  std::unique_ptr<SleepingWaiter> waiter;
  if (waiter_kind == Waiter::kAsleep) waiter.reset(new SleepingWaiter(barrier));
  std::atomic<std::uint32_t> done{0};
  if (what == What::kEnd) {
    constexpr int kBatch = 4096;
    std::vector<int> tickets(kBatch);
    while (state.KeepRunningBatch(kBatch)) {
      state.PauseTiming();
      for (int& ticket : tickets) ticket = barrier.begin();
      state.ResumeTiming();
      for (const int ticket : tickets) barrier.end(ticket, nullptr);
    }
  } else {
    std::atomic<std::uint32_t>* cell = what == What::kPairCell ? &done : nullptr;
    for (auto _ : state) {
      const int ticket = barrier.begin();
      benchmark::DoNotOptimize(ticket);
      barrier.end(ticket, cell);
    }
  }
  const HandBackBarrier::Stats stats = barrier.stats();
  state.counters["futex_wakes"] = static_cast<double>(stats.futex_wakes);
  waiter.reset();
}

// Epochs that each hold one ticket, as graphs attached one per epoch and kept.
constexpr int kManyEpochs = 10000;

std::vector<int> hold_epochs(HandBackBarrier& barrier, int epochs) {
  std::vector<int> tickets;
  tickets.reserve(static_cast<std::size_t>(epochs));
  for (int i = 0; i < epochs; ++i) {
    tickets.push_back(barrier.begin());
    (void)barrier.request(0);
  }
  return tickets;
}

enum class Many { kMark, kWaitSinceMark, kBuild, kReleasedWait };

void BM_ManyEpochs(benchmark::State& state, Many what) {
  if (what == Many::kBuild) {
    for (auto _ : state) {
      HandBackBarrier barrier;
      const std::vector<int> tickets = hold_epochs(barrier, kManyEpochs);
      state.PauseTiming();
      for (const int ticket : tickets) barrier.end(ticket, nullptr);
      state.ResumeTiming();
    }
    state.SetItemsProcessed(state.iterations() * kManyEpochs);
    return;
  }
  HandBackBarrier barrier;
  const std::vector<int> tickets = hold_epochs(barrier, kManyEpochs);
  if (what == Many::kReleasedWait) {
    for (const int ticket : tickets) barrier.end(ticket, nullptr);
  }
  bool all_reached = true;
  for (auto _ : state) {
    if (what == Many::kMark) {
      benchmark::DoNotOptimize(barrier.mark());
    } else {
      const std::uint64_t since = what == Many::kWaitSinceMark ? barrier.mark() : 0;
      all_reached &= barrier.wait(barrier.request(since), 0) == HandBackBarrier::WaitResult::kReached;
    }
  }
  if (!all_reached) state.SkipWithError("a wait that should be reached was not");
  if (what != Many::kReleasedWait) {
    for (const int ticket : tickets) barrier.end(ticket, nullptr);
  }
}

// The graph counters' hand-back before the barrier: two relaxed read-modify-writes on separate lines.
struct FormerCounters {
  alignas(64) std::atomic<std::uint64_t> held{0};
  alignas(64) std::atomic<std::uint64_t> handed_back{0};
};

void BM_FormerCounters(benchmark::State& state, What what) {
  FormerCounters counters;
  for (auto _ : state) {
    if (what == What::kPair) counters.held.fetch_add(1, std::memory_order_relaxed);
    counters.handed_back.fetch_add(1, std::memory_order_relaxed);
    counters.held.fetch_sub(1, std::memory_order_relaxed);
  }
  benchmark::DoNotOptimize(counters.held.load(std::memory_order_relaxed));
}

void register_all() {
  const std::pair<const char*, What> whats[] = {
      {"pair", What::kPair}, {"pair_cell", What::kPairCell}, {"end", What::kEnd}};
  const std::pair<const char*, Waiter> waiters[] = {{"none", Waiter::kNone}, {"asleep", Waiter::kAsleep}};
  for (const auto& what : whats) {
    for (const auto& waiter : waiters) {
      const std::string name = std::string("BM_HandBack/") + what.first + "/" + waiter.first;
      benchmark::RegisterBenchmark(name.c_str(), BM_HandBack, what.second, waiter.second);
    }
  }
  const std::pair<const char*, Many> manys[] = {{"held/mark", Many::kMark},
                                                {"held/wait_since_mark", Many::kWaitSinceMark},
                                                {"held/build", Many::kBuild},
                                                {"released/wait", Many::kReleasedWait}};
  for (const auto& many : manys) {
    const std::string name = std::string("BM_ManyEpochs/") + many.first;
    benchmark::RegisterBenchmark(name.c_str(), BM_ManyEpochs, many.second);
  }
  benchmark::RegisterBenchmark("BM_FormerCounters/pair", BM_FormerCounters, What::kPair);
  benchmark::RegisterBenchmark("BM_FormerCounters/end", BM_FormerCounters, What::kEnd);
}

// --- wake latency -------------------------------------------------------------------------------------

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct Percentiles {
  double p50, p99, max;
};

Percentiles percentiles(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const auto at = [&](double q) {
    return samples[std::min(samples.size() - 1, static_cast<std::size_t>(q * samples.size()))];
  };
  return {at(0.50), at(0.99), samples.back()};
}

// The ender (this thread) and the waiter meet once per round; the waiter reports when it returned.
std::vector<double> barrier_latency(int rounds) {
  HandBackBarrier barrier;
  std::atomic<std::uint64_t> target{0};      // the round's span's until + 1, published per round; 0: none yet
  std::atomic<long> woke_ns{-1};             // the waiter's clock at return, per round
  std::atomic<bool> stop{false};
  std::atomic<long> tid{0};
  std::thread waiter([&] {
    tid.store(thread_id());
    std::uint64_t seen = 0;
    for (;;) {
      std::uint64_t t;
      while ((t = target.load()) == seen && !stop.load()) std::this_thread::yield();
      if (stop.load()) return;
      seen = t;
      (void)barrier.wait(HandBackBarrier::Span{0, t - 1}, -1);
      woke_ns.store(static_cast<long>(Clock::now().time_since_epoch().count()));
    }
  });
  while (tid.load() == 0) std::this_thread::yield();
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(rounds));
  for (int round = 0; round < rounds; ++round) {
    const int ticket = barrier.begin();
    woke_ns.store(-1);
    target.store(barrier.request(0).until + 1);
    while (!blocked_in_futex(tid.load())) std::this_thread::sleep_for(std::chrono::microseconds(50));
    const Clock::time_point ended = Clock::now();
    barrier.end(ticket, nullptr);
    long woke;
    while ((woke = woke_ns.load()) < 0) std::this_thread::yield();
    samples.push_back(micros(Clock::time_point(Clock::duration(woke)) - ended));
  }
  stop.store(true);
  waiter.join();
  return samples;
}

// The floor: a bare futex wait / wake of one word, in the same rounds as barrier_latency.
std::vector<double> futex_latency(int rounds) {
  std::atomic<std::uint32_t> word{0};
  std::atomic<int> round_started{-1};
  std::atomic<long> woke_ns{-1};
  std::atomic<long> tid{0};
  std::thread waiter([&] {
    tid.store(thread_id());
    for (int round = 0; round < rounds; ++round) {
      while (word.load() != 0) std::this_thread::yield();  // the last round's reset
      round_started.store(round);
      while (word.load() == 0) {
        (void)syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, 0, nullptr,
                      nullptr, 0);
      }
      woke_ns.store(static_cast<long>(Clock::now().time_since_epoch().count()));
    }
  });
  while (tid.load() == 0) std::this_thread::yield();
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(rounds));
  for (int round = 0; round < rounds; ++round) {
    while (round_started.load() != round) std::this_thread::yield();
    while (!blocked_in_futex(tid.load())) std::this_thread::sleep_for(std::chrono::microseconds(50));
    woke_ns.store(-1);
    const Clock::time_point woken = Clock::now();
    word.store(1);
    (void)syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr,
                  0);
    long woke;
    while ((woke = woke_ns.load()) < 0) std::this_thread::yield();
    samples.push_back(micros(Clock::time_point(Clock::duration(woke)) - woken));
    word.store(0);
  }
  waiter.join();
  return samples;
}

std::vector<double> polling_latency(int rounds) {
  std::atomic<int> flag{0};
  std::atomic<long> woke_ns{-1};
  std::atomic<bool> stop{false};
  std::atomic<int> round_started{-1};
  std::thread waiter([&] {
    for (int round = 0;; ++round) {
      while (flag.load() != 0 && !stop.load()) std::this_thread::yield();  // the last round's reset
      if (stop.load()) return;
      round_started.store(round);
      while (flag.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      woke_ns.store(static_cast<long>(Clock::now().time_since_epoch().count()));
    }
  });
  std::minstd_rand random(7);
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(rounds));
  for (int round = 0; round < rounds; ++round) {
    while (round_started.load() != round) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::microseconds(random() % 2000));  // any phase of the poll
    woke_ns.store(-1);
    const Clock::time_point set = Clock::now();
    flag.store(1);
    long woke;
    while ((woke = woke_ns.load()) < 0) std::this_thread::yield();
    samples.push_back(micros(Clock::time_point(Clock::duration(woke)) - set));
    flag.store(0);
  }
  stop.store(true);
  waiter.join();
  return samples;
}

void print_latency_table(int rounds) {
  const Percentiles barrier = percentiles(barrier_latency(rounds));
  const Percentiles futex = percentiles(futex_latency(rounds));
  const Percentiles polling = percentiles(polling_latency(rounds));
  std::printf("\nWake latency, hand-back -> waiter returned (%d rounds each)\n\n", rounds);
  std::printf("| waiter | p50 | p99 | max |\n|---|---|---|---|\n");
  std::printf("| barrier: wait(request(0)), woken by end() | %.1f µs | %.1f µs | %.1f µs |\n", barrier.p50,
              barrier.p99, barrier.max);
  std::printf("| floor: a bare futex wait, woken by FUTEX_WAKE | %.1f µs | %.1f µs | %.1f µs |\n", futex.p50,
              futex.p99, futex.max);
  std::printf("| anchor: poll an atomic every 1 ms | %.1f µs | %.1f µs | %.1f µs |\n", polling.p50, polling.p99,
              polling.max);
}

}  // namespace

int main(int argc, char** argv) {
  // --quick: also a tiny minimum time. The default sizes the run by timed CPU time only, and the tickets
  // end() needs are taken with the timer paused, so on a loaded machine the wall time grows many-fold.
  static char quick_min_time[] = "--benchmark_min_time=0.001";
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      g_rounds = 20;
      args.push_back(quick_min_time);
    } else if (std::strncmp(argv[i], "--rounds=", 9) == 0) {
      g_rounds = std::max(1, std::atoi(argv[i] + 9));
    } else {
      args.push_back(argv[i]);
    }
  }
  int count = static_cast<int>(args.size());
  register_all();
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::fflush(stdout);
  print_latency_table(g_rounds);
  return 0;
}
