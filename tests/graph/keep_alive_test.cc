// tests/graph/keep_alive_test.cc — payloads kept alive by (fake) graph user objects and stream host
// functions reach the global queue exactly once; every failure says who owns the payload, including a
// retain that fails after the user object exists, whether its destructor runs at once or later.

#include "graph/keep_alive.h"

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "abi/reclaim.h"
#include "cuda_reclaim/reclaim_abi.h"
#include "graph/counters.h"
#include "tests/graph/fake_driver.h"
#include "tests/graph/queue_and_counters.h"

namespace reclaim {
namespace graph {
namespace {

using reclaim_test::FakeCuda;
using reclaim_test::fake_libcuda_path;

class KeepAliveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    driver_ = load_driver(fake_libcuda_path().c_str());
    ASSERT_EQ(driver_.status, DriverStatus::kOk) << driver_.message;
    fake_.defer_destructors(false);
    drain();  // start empty
    before_ = source_counters();
    held_before_ = graph_counters();
  }
  void TearDown() override { fake_.defer_destructors(false); }

  // Payloads are plain ints here: which ones the queue handed back.
  std::vector<int*> drain() { return reclaim_test::drain_process_queue<int>(); }

  SourceCounters delta() const {
    const SourceCounters now = source_counters();
    SourceCounters d;
    d.graph_user_objects = now.graph_user_objects - before_.graph_user_objects;
    d.stream_host_functions = now.stream_host_functions - before_.stream_host_functions;
    d.withdrawn = now.withdrawn - before_.withdrawn;
    return d;
  }

  // attached_to_cuda, handed_back_by_cuda and held_by_cuda since SetUp, with the hold law checked.
  GraphCounters held_delta() const { return reclaim_test::graph_counters_since(held_before_); }

  Driver driver_;
  FakeCuda fake_;
  SourceCounters before_;
  GraphCounters held_before_;
  int payload_ = 7;
  int other_ = 8;
};

TEST_F(KeepAliveTest, GraphUserObjectPushesOnceWhenTheGraphIsDestroyed) {
  CUgraph graph = fake_.graph_create();
  const AttachResult result = retain_on_graph(driver_.api, graph, &payload_);
  EXPECT_EQ(result.outcome, AttachOutcome::kAttached);
  EXPECT_EQ(result.error, CUDA_SUCCESS);
  EXPECT_EQ(result.call, nullptr);
  EXPECT_TRUE(drain().empty()) << "alive while the graph is";
  EXPECT_EQ(held_delta().held_by_cuda, 1u);
  EXPECT_EQ(held_delta().attached_to_cuda, 1u);
  fake_.graph_destroy(graph);
  EXPECT_EQ(held_delta().held_by_cuda, 0u);
  EXPECT_EQ(held_delta().handed_back_by_cuda, 1u);
  EXPECT_EQ(drain(), std::vector<int*>{&payload_});
  EXPECT_EQ(delta().graph_user_objects, 1u);
  EXPECT_EQ(delta().stream_host_functions, 0u);
  EXPECT_EQ(source_counters().last_destructor_thread, static_cast<std::uintptr_t>(pthread_self()))
      << "the fake ran it inside the destroy call, on this thread";
}

TEST_F(KeepAliveTest, DestructorOnAnotherThreadPushesOnce) {
  fake_.defer_destructors(true);
  CUgraph graph = fake_.graph_create();
  ASSERT_EQ(retain_on_graph(driver_.api, graph, &payload_).outcome, AttachOutcome::kAttached);
  fake_.graph_destroy(graph);
  EXPECT_TRUE(drain().empty()) << "the destructor has not run yet";
  EXPECT_EQ(fake_.run_deferred(), 1);
  EXPECT_EQ(drain(), std::vector<int*>{&payload_});
  EXPECT_EQ(delta().graph_user_objects, 1u);
  const std::uintptr_t ran_on = source_counters().last_destructor_thread;
  EXPECT_NE(ran_on, 0u);
  EXPECT_NE(ran_on, static_cast<std::uintptr_t>(pthread_self()));
}

TEST_F(KeepAliveTest, FailedRetainWithImmediateDestructorReturnsThePayloadUnpushed) {
  const AttachResult result = retain_on_graph(driver_.api, fake_.failing_graph(), &payload_);
  EXPECT_EQ(result.outcome, AttachOutcome::kReturned);
  EXPECT_EQ(result.error, CUDA_ERROR_INVALID_VALUE);
  EXPECT_STREQ(result.call, "cuGraphRetainUserObject");
  EXPECT_TRUE(drain().empty()) << "the destructor ran but must not push a payload the caller gets back";
  EXPECT_EQ(delta().withdrawn, 1u);
  EXPECT_EQ(delta().graph_user_objects, 0u);
  const GraphCounters held = held_delta();
  EXPECT_EQ(held.attached_to_cuda, 0u) << "returned: never CUDA's";
  EXPECT_EQ(held.held_by_cuda, 0u);
  EXPECT_EQ(held.handed_back_by_cuda, 0u);
}

TEST_F(KeepAliveTest, FailedRetainWithLaterDestructorLeavesThePayloadInFlight) {
  fake_.defer_destructors(true);
  const AttachResult result = retain_on_graph(driver_.api, fake_.failing_graph(), &payload_);
  EXPECT_EQ(result.outcome, AttachOutcome::kInFlight) << "CUDA still holds it: the caller must not touch it";
  EXPECT_EQ(result.error, CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(held_delta().held_by_cuda, 1u) << "in flight: still CUDA's";
  EXPECT_EQ(fake_.run_deferred(), 1);
  EXPECT_EQ(held_delta().held_by_cuda, 0u);
  EXPECT_EQ(held_delta().handed_back_by_cuda, 1u);
  EXPECT_EQ(drain(), std::vector<int*>{&payload_}) << "pushed exactly once, by the destructor";
  EXPECT_EQ(delta().withdrawn, 0u);
  EXPECT_EQ(delta().graph_user_objects, 1u);
}

TEST_F(KeepAliveTest, WithdrawalDoesNotCatchAnotherGraphsPayload) {
  // One payload attached to a graph, another withdrawn: destroying the graph still pushes the first.
  CUgraph graph = fake_.graph_create();
  ASSERT_EQ(retain_on_graph(driver_.api, graph, &other_).outcome, AttachOutcome::kAttached);
  EXPECT_EQ(retain_on_graph(driver_.api, fake_.failing_graph(), &payload_).outcome, AttachOutcome::kReturned);
  fake_.graph_destroy(graph);
  EXPECT_EQ(drain(), std::vector<int*>{&other_});
}

TEST_F(KeepAliveTest, NullPayloadIsRefusedBeforeAnyDriverCall) {
  CUgraph graph = fake_.graph_create();
  const AttachResult result = retain_on_graph(driver_.api, graph, nullptr);
  EXPECT_EQ(result.outcome, AttachOutcome::kReturned);
  EXPECT_EQ(result.error, CUDA_ERROR_INVALID_VALUE);
  fake_.graph_destroy(graph);
  EXPECT_EQ(retain_until_stream(driver_.api, nullptr, nullptr).outcome, AttachOutcome::kReturned);
}

TEST_F(KeepAliveTest, CapturingStreamRetainsOnTheGraphBeingCaptured) {
  CUgraph graph = fake_.graph_create();
  CUstream stream = fake_.capturing_stream(graph);
  EXPECT_EQ(retain_on_capture(driver_.api, stream, &payload_).outcome, AttachOutcome::kAttached);
  EXPECT_TRUE(drain().empty());
  fake_.graph_destroy(graph);
  EXPECT_EQ(drain(), std::vector<int*>{&payload_});
}

TEST_F(KeepAliveTest, StreamThatIsNotCapturingHasNoGraphToRetainOn) {
  const AttachResult result = retain_on_capture(driver_.api, nullptr, &payload_);
  EXPECT_EQ(result.outcome, AttachOutcome::kReturned);
  EXPECT_EQ(result.error, CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_NE(std::string(result.call).find("not capturing"), std::string::npos);
  const AttachResult failing = retain_on_capture(driver_.api, fake_.failing_stream(), &payload_);
  EXPECT_EQ(failing.outcome, AttachOutcome::kReturned);
  EXPECT_EQ(failing.error, CUDA_ERROR_INVALID_HANDLE);
  EXPECT_TRUE(drain().empty());
}

TEST_F(KeepAliveTest, HostFunctionPushesWhenTheStreamReachesIt) {
  const AttachResult result = retain_until_stream(driver_.api, nullptr, &payload_);
  EXPECT_EQ(result.outcome, AttachOutcome::kAttached);
  EXPECT_TRUE(drain().empty()) << "alive until the stream gets there";
  EXPECT_EQ(held_delta().held_by_cuda, 1u);
  EXPECT_EQ(fake_.run_host_functions(), 1);
  EXPECT_EQ(held_delta().held_by_cuda, 0u);
  EXPECT_EQ(held_delta().handed_back_by_cuda, 1u);
  EXPECT_EQ(drain(), std::vector<int*>{&payload_});
  EXPECT_EQ(delta().stream_host_functions, 1u);
  EXPECT_EQ(delta().graph_user_objects, 0u);
}

TEST_F(KeepAliveTest, FailedHostFunctionLaunchReturnsThePayload) {
  const AttachResult result = retain_until_stream(driver_.api, fake_.failing_stream(), &payload_);
  EXPECT_EQ(result.outcome, AttachOutcome::kReturned);
  EXPECT_EQ(result.error, CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake_.run_host_functions(), 0);
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(held_delta().attached_to_cuda, 0u);
  EXPECT_EQ(held_delta().held_by_cuda, 0u);
}

TEST_F(KeepAliveTest, CapturingStreamIsRefusedForHostFunctionsThatWouldRunAtEveryLaunch) {
  CUgraph graph = fake_.graph_create();
  const AttachResult result = retain_until_stream(driver_.api, fake_.capturing_stream(graph), &payload_);
  EXPECT_EQ(result.outcome, AttachOutcome::kReturned);
  EXPECT_EQ(result.error, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(fake_.run_host_functions(), 0);
  fake_.graph_destroy(graph);
  EXPECT_TRUE(drain().empty());
}

TEST_F(KeepAliveTest, ConcurrentWithdrawalsAndDestructorsAccountForEveryPayloadOnce) {
  // Threads that fail retains (their destructors run inside the release) race with threads destroying
  // graphs that hold the same payloads: each handed-over pointer is pushed or returned, never both.
  constexpr int kThreads = 4;
  constexpr int kRounds = 2000;
  std::vector<std::int64_t> payloads(kRounds);
  std::atomic<int> returned{0};
  std::atomic<int> attached{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        if (t % 2 == 0) {
          const AttachResult r = retain_on_graph(driver_.api, fake_.failing_graph(), &payloads[i]);
          if (r.outcome == AttachOutcome::kReturned) returned.fetch_add(1);
        } else {
          CUgraph graph = fake_.graph_create();
          if (retain_on_graph(driver_.api, graph, &payloads[i]).outcome == AttachOutcome::kAttached) {
            attached.fetch_add(1);
          }
          fake_.graph_destroy(graph);
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const std::size_t pushed = drain().size();
  EXPECT_EQ(attached.load(), kThreads / 2 * kRounds);
  EXPECT_EQ(static_cast<int>(pushed) + returned.load(), kThreads * kRounds);
  EXPECT_EQ(delta().graph_user_objects, pushed);
  EXPECT_EQ(delta().withdrawn, static_cast<std::uint64_t>(returned.load()));
  const GraphCounters held = held_delta();
  EXPECT_EQ(held.held_by_cuda, 0u);
  EXPECT_EQ(held.attached_to_cuda, pushed) << "every pushed payload was attached, every returned one was not";
  EXPECT_EQ(held.handed_back_by_cuda, pushed);
}

TEST_F(KeepAliveTest, RegisteredReportHookAddsWhatCudaStillHoldsBeforeTheLawsVerdict) {
  CUgraph graph = fake_.graph_create();
  ASSERT_EQ(retain_on_graph(driver_.api, graph, &payload_).outcome, AttachOutcome::kAttached);
  char line[512];
  // Nothing is registered by merely linking graph/: the queue's owner registers the hook explicitly.
  set_report_fields(nullptr);
  const std::string bare(line, format_report(own_process_queue()->snapshot(), line, sizeof line));
  EXPECT_EQ(bare.find("attached_to_cuda="), std::string::npos) << bare;
  set_report_fields(format_report_fields);  // what the queue's owner does when it takes the queue
  const std::string report(line, format_report(own_process_queue()->snapshot(), line, sizeof line));
  const GraphCounters now = graph_counters();
  const std::string fields = " attached_to_cuda=" + std::to_string(now.attached_to_cuda) +
                             " handed_back_by_cuda=" + std::to_string(now.handed_back_by_cuda) +
                             " held_by_cuda=" + std::to_string(now.held_by_cuda) + " conserved=";
  EXPECT_NE(report.find(fields), std::string::npos) << report;
  EXPECT_GE(now.held_by_cuda, 1u);
  fake_.graph_destroy(graph);
  drain();
}

// The hand-back ticket rides in a pointer's top RECLAIM_HAND_BACK_TICKET_BITS (16) bits: any ticket goes
// there and back, a pointer needs no alignment, and "none" travels as none.
TEST(HandBackTag, EveryTicketOfTheTableTravelsInThePointersTopBits) {
  constexpr int kTickets = (1 << RECLAIM_HAND_BACK_TICKET_BITS) - 1;  // tickets 0 .. kTickets - 1
  alignas(8) char bytes[16];
  for (int offset = 0; offset < 8; ++offset) {
    void* const pointer = bytes + offset;
    for (const int ticket : {0, 6, 7, 8, 63, 64, 100, 1000, kTickets - 1}) {
      ASSERT_TRUE(taggable(pointer));
      const Untagged back = untag(tag(pointer, ticket));
      EXPECT_EQ(back.pointer, pointer);
      EXPECT_EQ(back.ticket, ticket);
    }
    for (const int none : {-1, kTickets}) {
      EXPECT_EQ(tag(pointer, none), pointer);
      EXPECT_EQ(untag(pointer).ticket, -1);
    }
  }
  void* const high = reinterpret_cast<void*>(std::uintptr_t{1} << 48 | 0x1000);
  EXPECT_FALSE(taggable(high));
  EXPECT_EQ(tag(high, 3), nullptr);
}

// A payload with any of its top 16 bits set is refused before anything is attached, with an error that
// names it.
TEST_F(KeepAliveTest, APayloadWithItsTopBitsSetIsRefused) {
  void* const high =
      reinterpret_cast<void*>(std::uintptr_t{0x8000} << 48 | reinterpret_cast<std::uintptr_t>(&payload_));
  CUgraph graph = fake_.graph_create();
  AttachResult result = retain_on_graph(driver_.api, graph, high);
  EXPECT_EQ(result.outcome, AttachOutcome::kReturned);
  EXPECT_EQ(result.error, CUDA_ERROR_INVALID_VALUE);
  EXPECT_STREQ(result.call, "a payload with its top 16 bits set (they carry the hand-back ticket)");
  result = retain_until_stream(driver_.api, nullptr, high);
  EXPECT_EQ(result.outcome, AttachOutcome::kReturned);
  EXPECT_STREQ(result.call, "a payload with its top 16 bits set (they carry the hand-back ticket)");
  EXPECT_EQ(held_delta().held_by_cuda, 0u);
  EXPECT_EQ(held_delta().attached_to_cuda, 0u);
  fake_.graph_destroy(graph);
  EXPECT_TRUE(drain().empty());
}

// A hundred graphs attached one epoch apart (each wait switches to a new epoch), each still held: their
// tickets are a hundred records, carried through CUDA to the destructors. Destroyed in any order, each ends
// its own epoch's ticket: the C entry's wait sees something held until the last one is destroyed.
TEST_F(KeepAliveTest, HundredsOfEpochsHeldAtOnceEachEndTheirOwnTicket) {
  constexpr int kGraphs = 100;
  ASSERT_EQ(reclaim_wait_handed_back(0.0), 1) << "nothing held before this test";
  std::vector<int> payloads(kGraphs);
  std::vector<CUgraph> graphs;
  for (int i = 0; i < kGraphs; ++i) {
    graphs.push_back(fake_.graph_create());
    ASSERT_EQ(retain_on_graph(driver_.api, graphs.back(), &payloads[static_cast<std::size_t>(i)]).outcome,
              AttachOutcome::kAttached);
    EXPECT_EQ(reclaim_wait_handed_back(0.0), 0) << i;  // held; the next one counts in a new epoch
  }
  std::vector<int> order;
  for (int i = kGraphs - 1; i >= 0; i -= 2) order.push_back(i);  // every other one, from the last
  for (int i = kGraphs - 2; i >= 0; i -= 2) order.push_back(i);
  for (std::size_t k = 0; k < order.size(); ++k) {
    fake_.graph_destroy(graphs[static_cast<std::size_t>(order[k])]);
    const int expected = k + 1 == order.size() ? 1 : 0;
    EXPECT_EQ(reclaim_wait_handed_back(0.0), expected) << "after graph " << order[k];
  }
  EXPECT_EQ(drain().size(), static_cast<std::size_t>(kGraphs));
  EXPECT_EQ(held_delta().held_by_cuda, 0u);
}

}  // namespace
}  // namespace graph
}  // namespace reclaim
