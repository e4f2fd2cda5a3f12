// bench/queue_bench.cc — Google Benchmark of the queue itself, no Python: reclaim::ReclaimQueue against
// the anchor structures of bench/anchors.h, on fake pointers with a no-op release.
//
//   BM_Push/<strategy>/threads:N   producer cost per hand-over, N threads pushing at once (real time per
//                                  push per thread; items_per_second is the total). N from --threads
//                                  (default 1,2,4; the scaling run on a many-core host uses 1,2,4,8,16).
//   BM_PushPart/<part>             the parts of a cuda-reclaim push measured alone, one thread: the atomic
//                                  exchange on a private cache line (the barrier every strategy pays once)
//                                  and a moodycamel explicit-producer enqueue (the storage).
//   BM_DrainPushedElsewhere/<s>    the same, all at once, of pointers one other thread pushed (as CUDA's
//                                  thread does): what moving them between cores adds.
//   BM_Drain/<strategy>/<batch>    owner cost per released pointer (no-op release), vs a plain loop over
//                                  an array (the limit); batch = the drain's max_items (0: all at once).
//                                  Strategy moodycamel_bulk is moodycamel's own bulk dequeue alone, in
//                                  batches of cuda-reclaim's size, then the release over each batch: the
//                                  floor of any drain that must finish a bulk dequeue before it releases.
//   BM_HeapBytes/<strategy>        heap bytes in use per pending pointer after a burst, and after draining
//                                  (mallinfo2, all arenas; includes malloc's own overhead).
// Speed is reported, never asserted. bench/run_benchmarks.sh runs this and turns it into docs/benchmarks.md.

#include <malloc.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#include "bench/anchors.h"
#include "benchmark/benchmark.h"
#include "cleanup/queue_storage.h"
#include "cleanup/reclaim_queue.h"
#include "concurrentqueue/concurrentqueue.h"

namespace {

using reclaim_bench::CoalescedStack;
using reclaim_bench::MutexDequePool;
using reclaim_bench::MutexVectorPool;
using reclaim_bench::StackNode;

// Sizes of a run; --quick (the smoke test) makes them tiny. Set in main() before any benchmark runs.
std::int64_t g_pushes_per_thread = 1 << 18;  // ms per thread: long enough for the threads to overlap
std::size_t g_drain_items = 1 << 20;
std::int64_t g_heap_items = 1000000;
std::vector<int> g_thread_counts = {1, 2, 4};
int g_max_threads = 4;

void* fake_item(std::size_t i) { return reinterpret_cast<void*>((i + 1) * 16); }

// The release action of every strategy: counts, so that the loop cannot be optimised away. Every
// strategy, and the plain loop, calls it through a function pointer (as bindings/ calls its Py_DECREF
// action), so that no drain gets an inlined release the others cannot have.
std::size_t g_released = 0;
void count_release(void*, void*) { ++g_released; }
void (*volatile g_release)(void*, void*) = count_release;
auto count_release_item = [](void* item) { g_release(item, nullptr); };

// One strategy = what a producer calls per hand-over and what the owner calls to release everything.
// Each holds its structure for the life of the process (benchmarks reuse it between runs).
// cuda-reclaim's drain hands the release action a batch at a time (as bindings/ does); the batch action
// here makes the same per-item call as every other strategy.
void count_release_batch(reclaim::ReleaseBatch* batch, void*) {
  // As bindings/ loops: the index in a register, `next` only written (for an unwind).
  void* const* const items = batch->items;
  const std::size_t count = batch->count;
  for (std::size_t index = batch->next; index < count; ++index) {
    batch->next = index + 1;
    g_release(items[index], nullptr);
  }
}

// Every strategy gets its memory for the whole run up front: the stack its nodes, the mutex pools their
// first growth (below), the queue a reserved capacity for every pointer a run can hold (twice over: a
// run's threads need not land on the producer lanes of the previous run, and a lane keeps its blocks).
// So the timed pushes measure the steady state, never the first touch of fresh memory.
reclaim::QueueOptions burst_reserve() {
  reclaim::QueueOptions options;
  options.reserved_capacity =
      std::min<std::size_t>(reclaim::kMaxReservedCapacity,
                            2 * static_cast<std::size_t>(g_max_threads) * static_cast<std::size_t>(g_pushes_per_thread));
  return options;
}

struct ReclaimStrategy {
  reclaim::ReclaimQueue queue{burst_reserve()};
  void push(int, std::size_t i) { queue.push(fake_item(i)); }
  std::size_t drain(std::size_t max_items) { return queue.drain(count_release_batch, nullptr, max_items); }
};

struct VectorStrategy {
  MutexVectorPool pool;
  void push(int, std::size_t i) { pool.push(fake_item(i)); }
  std::size_t drain(std::size_t) { return pool.drain(count_release_item); }
};

struct DequeStrategy {
  MutexDequePool pool;
  void push(int, std::size_t i) { pool.push(fake_item(i)); }
  std::size_t drain(std::size_t) { return pool.drain(count_release_item); }
};

// Nodes are preallocated per thread (cuda.core allocates one with each registered object), sized for the
// largest run; a run's nodes are all taken by the owner's drain before the next run reuses them.
struct StackStrategy {
  CoalescedStack stack;
  std::vector<StackNode> nodes = std::vector<StackNode>(
      std::max<std::size_t>(static_cast<std::size_t>(g_max_threads) * static_cast<std::size_t>(g_pushes_per_thread),
                            g_drain_items));
  void push(int thread, std::size_t i) {
    StackNode* node = &nodes[static_cast<std::size_t>(thread) * static_cast<std::size_t>(g_pushes_per_thread) + i];
    node->item = fake_item(i);
    (void)stack.push(node);  // a real producer would schedule the owner here when this returns true
  }
  std::size_t drain(std::size_t) { return CoalescedStack::release_list(stack.take_all(), count_release_item); }
};

// moodycamel alone, as cuda-reclaim's storage uses it (its traits, an explicit producer), with no lane,
// count or signal around it: the drain takes batches of cuda-reclaim's size into an array on the stack,
// then calls the release for each pointer of the batch.
struct MoodycamelBulkStrategy {
  reclaim::PointerQueue queue{g_drain_items};
  moodycamel::ProducerToken token{queue};
  void push(int, std::size_t i) { queue.enqueue(token, fake_item(i)); }
  std::size_t drain(std::size_t max_items) {
    void* batch[reclaim::kDrainBatch];
    std::size_t total = 0;
    while (total < max_items) {
      const std::size_t want = std::min(max_items - total, reclaim::kDrainBatch);
      const std::size_t taken = queue.try_dequeue_bulk(batch, want);
      if (taken == 0) break;
      for (std::size_t index = 0; index < taken; ++index) count_release_item(batch[index]);
      total += taken;
    }
    return total;
  }
};

template <class Strategy>
Strategy& instance() {
  static Strategy* const strategy = new Strategy();  // never destroyed: threads of later runs reuse it
  return *strategy;
}

// One untimed run per strategy before the timed ones, with the most threads: the mutex pools grow to the
// run's size, the queue's producer lanes get their producers and blocks.
template <class Strategy>
void warm_up() {
  Strategy& strategy = instance<Strategy>();
  std::vector<std::thread> threads;
  for (int t = 0; t < g_max_threads; ++t) {
    threads.emplace_back([&strategy, t] {
      for (std::int64_t i = 0; i < g_pushes_per_thread; ++i) strategy.push(t, static_cast<std::size_t>(i));
    });
  }
  for (auto& thread : threads) thread.join();
  while (strategy.drain(SIZE_MAX) != 0) {
  }
}

// A hand-over as CUDA makes it: a call through a function pointer (CUDA calls a host destructor or a
// host function that way), to a function that is not inlined into the caller. Every strategy's push goes
// through the same kind of call, so no anchor gets inlined into the benchmark loop when cuda-reclaim,
// a library call, cannot be.
template <class Strategy>
__attribute__((noinline)) void push_entry(Strategy* strategy, int thread, std::size_t i) {
  strategy->push(thread, i);
}

// Producer cost: every thread pushes g_pushes_per_thread items; thread 0 drains after the stop barrier.
template <class Strategy>
void BM_Push(benchmark::State& state) {
  Strategy& strategy = instance<Strategy>();
  void (*volatile entry)(Strategy*, int, std::size_t) = push_entry<Strategy>;
  void (*const push)(Strategy*, int, std::size_t) = entry;  // loaded once; called through the pointer
  const int thread = state.thread_index();
  std::size_t i = 0;
  for (auto _ : state) push(&strategy, thread, i++);
  if (thread == 0) {
    // The loop's end is a barrier for all threads of the run: everything pushed is in the structure now.
    while (strategy.drain(SIZE_MAX) != 0) {
    }
  }
  state.SetItemsProcessed(state.iterations());
}

// Drain throughput: g_drain_items pushed (not timed), then released in batches of state.range(0) (0: all).
template <class Strategy>
void BM_Drain(benchmark::State& state) {
  Strategy& strategy = instance<Strategy>();
  const std::size_t batch = state.range(0) == 0 ? SIZE_MAX : static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    state.PauseTiming();
    for (std::size_t i = 0; i < g_drain_items; ++i) strategy.push(0, i);
    state.ResumeTiming();
    std::size_t released = 0;
    while (released < g_drain_items) released += strategy.drain(batch);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(g_drain_items));
}

// The same drain of pointers another thread pushed (as CUDA's thread does): the pointers, and for the
// anchors their buffers or nodes, were last written on another core and must move to the draining one.
template <class Strategy>
void BM_DrainPushedElsewhere(benchmark::State& state) {
  Strategy& strategy = instance<Strategy>();
  for (auto _ : state) {
    state.PauseTiming();
    std::thread producer([&strategy] {
      for (std::size_t i = 0; i < g_drain_items; ++i) strategy.push(0, i);  // nobody else pushes now
    });
    producer.join();
    state.ResumeTiming();
    std::size_t released = 0;
    while (released < g_drain_items) released += strategy.drain(SIZE_MAX);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(g_drain_items));
}

// The physical limit of a drain: the same release action over a plain array.
void BM_Drain_PlainLoop(benchmark::State& state) {
  std::vector<void*> items(g_drain_items);
  for (std::size_t i = 0; i < g_drain_items; ++i) items[i] = fake_item(i);
  for (auto _ : state) {
    for (void* item : items) count_release_item(item);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(g_drain_items));
}

std::size_t heap_in_use() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;  // arenas' allocated chunks + mmapped chunks
}

// Heap per pending pointer. A fresh structure per iteration (so a queue's fixed reserve counts too); the
// stack's nodes (one per reference, allocated before the push) count as pending memory. They are one
// array here, the anchor's best case: allocated one by one, malloc's overhead doubles them to 32 bytes.
template <class Strategy>
void BM_HeapBytes(benchmark::State& state) {
  const std::size_t items = static_cast<std::size_t>(state.range(0));
  double burst = 0, after = 0, after_trim = 0;
  for (auto _ : state) {
    const std::size_t before = heap_in_use();
    auto strategy = std::make_unique<Strategy>();
    std::unique_ptr<StackNode[]> nodes;
    if constexpr (std::is_same<Strategy, CoalescedStack>::value) nodes.reset(new StackNode[items]);
    for (std::size_t i = 0; i < items; ++i) {
      if constexpr (std::is_same<Strategy, CoalescedStack>::value) {
        nodes[i].item = fake_item(i);
        strategy->push(&nodes[i]);
      } else {
        strategy->push(fake_item(i));
      }
    }
    const std::size_t pending = heap_in_use();
    if constexpr (std::is_same<Strategy, reclaim::ReclaimQueue>::value) {
      while (strategy->drain(count_release_batch, nullptr, SIZE_MAX) != 0) {
      }
    } else if constexpr (std::is_same<Strategy, CoalescedStack>::value) {
      CoalescedStack::release_list(strategy->take_all(), count_release_item);
      nodes.reset();  // drained nodes are freed with their references
    } else {
      strategy->drain(count_release_item);
    }
    const std::size_t drained = heap_in_use();
    std::size_t trimmed = drained;  // the anchors free their buffers as they drain
    if constexpr (std::is_same<Strategy, reclaim::ReclaimQueue>::value) {
      (void)strategy->trim();
      trimmed = heap_in_use();
    }
    burst = static_cast<double>(pending - before) / static_cast<double>(items);
    after = static_cast<double>(drained - before) / static_cast<double>(items);
    after_trim = static_cast<double>(trimmed - before) / static_cast<double>(items);
  }
  state.counters["bytes_per_pending"] = burst;
  state.counters["bytes_per_item_after_drain"] = after;
  state.counters["bytes_per_item_after_trim"] = after_trim;
}

// The parts of a push, alone. An exchange on a line no other thread touches (as a push's lane), then a
// store giving it back: the one full barrier of a push, which the CAS stack's compare-exchange is too.
void BM_PushPart_Exchange(benchmark::State& state) {
  struct alignas(64) Flag {
    std::atomic<std::uint32_t> taken{0};  // as a producer lane's
  };
  static Flag flag;
  for (auto _ : state) {
    if (flag.taken.exchange(1, std::memory_order_seq_cst) == 0) flag.taken.store(0, std::memory_order_release);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}

// A moodycamel explicit-producer enqueue with the thread's own token, nothing else: the storage.
void BM_PushPart_Enqueue(benchmark::State& state) {
  static moodycamel::ConcurrentQueue<void*>* const queue =
      new moodycamel::ConcurrentQueue<void*>(2 * static_cast<std::size_t>(g_pushes_per_thread));
  moodycamel::ProducerToken token(*queue);
  std::size_t i = 0;
  for (auto _ : state) queue->enqueue(token, fake_item(i++));
  void* sink[256];
  while (queue->try_dequeue_bulk(sink, 256) != 0) {
  }
  state.SetItemsProcessed(state.iterations());
}

void register_all() {
  const std::int64_t drain_iterations = 8;
  auto push = [](const char* name, auto* function) {
    auto* bench = benchmark::RegisterBenchmark(name, function)->Iterations(g_pushes_per_thread)->UseRealTime();
    for (int threads : g_thread_counts) bench->Threads(threads);
  };
  push("BM_Push/cuda_reclaim", BM_Push<ReclaimStrategy>);
  push("BM_Push/mutex_vector", BM_Push<VectorStrategy>);
  push("BM_Push/mutex_deque", BM_Push<DequeStrategy>);
  push("BM_Push/cas_stack", BM_Push<StackStrategy>);
  benchmark::RegisterBenchmark("BM_PushPart/exchange", BM_PushPart_Exchange)->Iterations(g_pushes_per_thread);
  benchmark::RegisterBenchmark("BM_PushPart/moodycamel_enqueue", BM_PushPart_Enqueue)->Iterations(g_pushes_per_thread);

  benchmark::RegisterBenchmark("BM_Drain/plain_loop/0", BM_Drain_PlainLoop)->Iterations(drain_iterations);
  benchmark::RegisterBenchmark("BM_Drain/cuda_reclaim", BM_Drain<ReclaimStrategy>)
      ->Arg(64)
      ->Arg(4096)
      ->Arg(0)
      ->Iterations(drain_iterations);
  benchmark::RegisterBenchmark("BM_Drain/moodycamel_bulk", BM_Drain<MoodycamelBulkStrategy>)
      ->Arg(0)
      ->Iterations(drain_iterations);
  benchmark::RegisterBenchmark("BM_Drain/mutex_vector", BM_Drain<VectorStrategy>)->Arg(0)->Iterations(drain_iterations);
  benchmark::RegisterBenchmark("BM_Drain/mutex_deque", BM_Drain<DequeStrategy>)->Arg(0)->Iterations(drain_iterations);
  benchmark::RegisterBenchmark("BM_Drain/cas_stack", BM_Drain<StackStrategy>)->Arg(0)->Iterations(drain_iterations);
  benchmark::RegisterBenchmark("BM_DrainPushedElsewhere/cuda_reclaim", BM_DrainPushedElsewhere<ReclaimStrategy>)
      ->Iterations(drain_iterations);
  benchmark::RegisterBenchmark("BM_DrainPushedElsewhere/moodycamel_bulk", BM_DrainPushedElsewhere<MoodycamelBulkStrategy>)
      ->Iterations(drain_iterations);
  benchmark::RegisterBenchmark("BM_DrainPushedElsewhere/mutex_vector", BM_DrainPushedElsewhere<VectorStrategy>)
      ->Iterations(drain_iterations);
  benchmark::RegisterBenchmark("BM_DrainPushedElsewhere/mutex_deque", BM_DrainPushedElsewhere<DequeStrategy>)
      ->Iterations(drain_iterations);
  benchmark::RegisterBenchmark("BM_DrainPushedElsewhere/cas_stack", BM_DrainPushedElsewhere<StackStrategy>)
      ->Iterations(drain_iterations);

  benchmark::RegisterBenchmark("BM_HeapBytes/cuda_reclaim", BM_HeapBytes<reclaim::ReclaimQueue>)
      ->Arg(g_heap_items)
      ->Iterations(1);
  benchmark::RegisterBenchmark("BM_HeapBytes/mutex_vector", BM_HeapBytes<MutexVectorPool>)->Arg(g_heap_items)->Iterations(1);
  benchmark::RegisterBenchmark("BM_HeapBytes/mutex_deque", BM_HeapBytes<MutexDequePool>)->Arg(g_heap_items)->Iterations(1);
  benchmark::RegisterBenchmark("BM_HeapBytes/cas_stack", BM_HeapBytes<CoalescedStack>)->Arg(g_heap_items)->Iterations(1);
}

}  // namespace

// Google Benchmark's flags, plus --quick: tiny sizes, so that the smoke test runs every row in moments.
int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      g_pushes_per_thread = 1 << 12;
      g_drain_items = 1 << 14;
      g_heap_items = 10000;
    } else if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      g_thread_counts.clear();
      for (const char* p = argv[i] + 10; *p != '\0';) {
        char* end = nullptr;
        const long n = std::strtol(p, &end, 10);
        if (end == p || n < 1 || n > 256) {
          std::fprintf(stderr, "--threads: a comma-separated list of thread counts, 1 to 256\n");
          return 2;
        }
        g_thread_counts.push_back(static_cast<int>(n));
        p = *end == ',' ? end + 1 : end;
      }
      if (g_thread_counts.empty()) g_thread_counts.push_back(1);
    } else {
      args.push_back(argv[i]);
    }
  }
  int count = static_cast<int>(args.size());
  g_max_threads = *std::max_element(g_thread_counts.begin(), g_thread_counts.end());
  register_all();
  warm_up<ReclaimStrategy>();
  warm_up<VectorStrategy>();
  warm_up<DequeStrategy>();
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
