// tests/graph/host_calls_test.cc — stream host calls take their places in stream order and push their
// payload once, whichever (fake) CUDA thread runs them; graph host nodes push one entry per firing and keep
// their payload by a native count until the last call ran and the user object is gone; what CUDA holds is
// counted throughout (attached == handed back + held).

#include "graph/host_calls.h"

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "graph/counters.h"
#include "tests/graph/fake_driver.h"
#include "tests/graph/queue_and_counters.h"

namespace reclaim {
namespace graph {
namespace {

using reclaim_test::FakeCuda;
using reclaim_test::fake_libcuda_path;

class HostCallsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    driver_ = load_driver(fake_libcuda_path().c_str());
    ASSERT_EQ(driver_.status, DriverStatus::kOk) << driver_.message;
    drain();
    before_ = graph_counters();
  }

  // Runs everything queued on `stream` (held until now, so that persistent CUDA threads that an earlier
  // test started did not run it yet) and waits until it is done.
  void complete(CUstream stream) {
    fake_.hold(stream, false);
    fake_.run_host_functions();
    ASSERT_EQ(fake_.synchronize(stream, 30000), 0);
  }

  std::vector<void*> drain() { return reclaim_test::drain_process_queue<void>(); }

  // Counters since SetUp, with the hold law checked on the totals.
  GraphCounters delta() const { return reclaim_test::graph_counters_since(before_); }

  Driver driver_;
  FakeCuda fake_;
  GraphCounters before_;
};

// A payload that is its own record, as bindings/ embeds one in its Python objects.
struct Call {
  HostCallRecord record;
  int index = 0;
};

CUstream stream_handle(std::uintptr_t value) { return reinterpret_cast<CUstream>(value); }

TEST_F(HostCallsTest, HostCallPushesItsPayloadOnceWithItsPlaceInTheStream) {
  CallOrder order;
  std::vector<Call> calls(3);
  const CUstream stream = stream_handle(0x5100);
  fake_.hold(stream, true);
  for (int i = 0; i < 3; ++i) {
    calls[i].record.payload = &calls[i];
    calls[i].record.order = &order;
    ASSERT_EQ(launch_host_func(driver_.api, stream, &calls[i].record).outcome, AttachOutcome::kAttached);
  }
  EXPECT_TRUE(drain().empty()) << "nothing until the stream gets there";
  EXPECT_EQ(delta().held_by_cuda, 3u);
  complete(stream);
  const std::vector<void*> pushed = drain();
  ASSERT_EQ(pushed.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(calls[i].record.place, static_cast<std::uint64_t>(i));
  EXPECT_EQ(order.fired.load(), 3u);
  EXPECT_EQ(order.rejected.load(), 0u);
  const GraphCounters d = delta();
  EXPECT_EQ(d.host_calls, 3u);
  EXPECT_EQ(d.attached_to_cuda, 3u);
  EXPECT_EQ(d.handed_back_by_cuda, 3u);
  EXPECT_EQ(d.held_by_cuda, 0u);
}

TEST_F(HostCallsTest, PlacesFollowStreamOrderWhenSeveralCudaThreadsRunOneStream) {
  // Four persistent CUDA threads take turns on two streams: consecutive calls of one stream often run on
  // different threads (and so push through different producer records), yet each call's place is its
  // launch position on its stream.
  fake_.start_threads(4);
  constexpr int kCalls = 2000;
  CallOrder orders[2];
  std::vector<Call> calls(2 * kCalls);
  const CUstream streams[2] = {stream_handle(0x5200), stream_handle(0x5201)};
  for (int i = 0; i < 2 * kCalls; ++i) {
    Call& call = calls[i];
    call.index = i / 2;
    call.record.payload = &call;
    call.record.order = &orders[i % 2];
    ASSERT_EQ(launch_host_func(driver_.api, streams[i % 2], &call.record).outcome, AttachOutcome::kAttached);
  }
  for (const CUstream stream : streams) ASSERT_EQ(fake_.synchronize(stream, 30000), 0);
  EXPECT_EQ(drain().size(), static_cast<std::size_t>(2 * kCalls));
  for (const Call& call : calls) ASSERT_EQ(call.record.place, static_cast<std::uint64_t>(call.index));
  EXPECT_EQ(delta().host_calls, static_cast<std::uint64_t>(2 * kCalls));
  EXPECT_EQ(delta().held_by_cuda, 0u);
}

TEST_F(HostCallsTest, HostCallIsRefusedOnACapturingStreamAndOnFailureNothingIsHeld) {
  CallOrder order;
  Call call;
  call.record.payload = &call;
  call.record.order = &order;
  CUgraph graph = fake_.graph_create();
  const AttachResult capturing = launch_host_func(driver_.api, fake_.capturing_stream(graph), &call.record);
  EXPECT_EQ(capturing.outcome, AttachOutcome::kReturned);
  EXPECT_EQ(capturing.error, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_NE(std::string(capturing.call).find("add a host node"), std::string::npos) << capturing.call;
  const AttachResult failing = launch_host_func(driver_.api, fake_.failing_stream(), &call.record);
  EXPECT_EQ(failing.outcome, AttachOutcome::kReturned);
  EXPECT_EQ(failing.error, CUDA_ERROR_INVALID_HANDLE);
  Call incomplete;
  EXPECT_EQ(launch_host_func(driver_.api, nullptr, &incomplete.record).outcome, AttachOutcome::kReturned);
  fake_.graph_destroy(graph);
  EXPECT_EQ(fake_.run_host_functions(), 0);
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(delta().attached_to_cuda, 0u);
  EXPECT_EQ(delta().held_by_cuda, 0u);
}

struct Node {
  HostNodeRecord record;
};

TEST_F(HostCallsTest, HostNodePushesOncePerFiringAndOnceMoreWhenTheGraphGoesLast) {
  Node node;
  node.record.payload = &node;
  CUgraph graph = fake_.graph_create();
  const HostNodeResult added = add_host_node(driver_.api, graph, nullptr, 0, &node.record);
  ASSERT_EQ(added.attach.outcome, AttachOutcome::kAttached);
  ASSERT_NE(added.node, nullptr);
  EXPECT_EQ(fake_.host_node_count(graph), 1);
  EXPECT_EQ(delta().held_by_cuda, 1u);

  void* exec = fake_.instantiate(graph);
  const CUstream stream = stream_handle(0x5300);
  fake_.hold(stream, true);
  for (int launch = 0; launch < 3; ++launch) fake_.launch(exec, stream);
  EXPECT_TRUE(drain().empty());
  complete(stream);
  std::vector<void*> entries = drain();
  ASSERT_EQ(entries, (std::vector<void*>{&node, &node, &node})) << "the same payload, once per firing";
  EXPECT_EQ(node.record.native_refs.load(), 4u) << "the user object's and one per firing";
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(host_node_entry_is_final(&node.record));
    EXPECT_FALSE(host_node_entry_done(&node.record)) << "the graph still holds it";
  }
  EXPECT_EQ(delta().host_node_calls, 3u);

  fake_.exec_destroy(exec);
  EXPECT_TRUE(drain().empty()) << "the graph still holds the user object";
  fake_.graph_destroy(graph);
  EXPECT_EQ(drain(), std::vector<void*>{&node}) << "the user object went last: one final entry";
  EXPECT_TRUE(host_node_entry_is_final(&node.record));
  EXPECT_TRUE(host_node_entry_done(&node.record)) << "the final entry: the owner releases the payload";
  EXPECT_EQ(node.record.native_refs.load(), 0u) << "the final entry drops no native reference";
  const GraphCounters d = delta();
  EXPECT_EQ(d.attached_to_cuda, 1u);
  EXPECT_EQ(d.handed_back_by_cuda, 1u);
  EXPECT_EQ(d.held_by_cuda, 0u);
}

TEST_F(HostCallsTest, HostNodeWhoseGraphGoesFirstIsReleasedByTheLastCall) {
  Node node;
  node.record.payload = &node;
  CUgraph graph = fake_.graph_create();
  ASSERT_EQ(add_host_node(driver_.api, graph, nullptr, 0, &node.record).attach.outcome, AttachOutcome::kAttached);
  void* exec = fake_.instantiate(graph);
  const CUstream stream = stream_handle(0x5400);
  fake_.hold(stream, true);
  fake_.launch(exec, stream);
  fake_.launch(exec, stream);
  fake_.exec_destroy(exec);  // launches still queued: the exec's reference waits for them
  fake_.graph_destroy(graph);
  EXPECT_EQ(delta().held_by_cuda, 1u) << "the exec still holds it until its launches complete";
  complete(stream);
  EXPECT_EQ(delta().held_by_cuda, 0u) << "the last launch completed: the user object is gone";
  const std::vector<void*> entries = drain();
  ASSERT_EQ(entries.size(), 2u) << "two calls, no final entry: the calls still hold the payload";
  EXPECT_FALSE(host_node_entry_is_final(&node.record));
  EXPECT_FALSE(host_node_entry_done(&node.record));
  EXPECT_TRUE(host_node_entry_done(&node.record)) << "the last call releases it";
  EXPECT_EQ(node.record.native_refs.load(), 0u);
}

TEST_F(HostCallsTest, HostNodeDependenciesOrderTheFirings) {
  Node first, second;
  first.record.payload = &first;
  second.record.payload = &second;
  CUgraph graph = fake_.graph_create();
  const HostNodeResult a = add_host_node(driver_.api, graph, nullptr, 0, &first.record);
  ASSERT_NE(a.node, nullptr);
  const HostNodeResult b = add_host_node(driver_.api, graph, &a.node, 1, &second.record);
  ASSERT_NE(b.node, nullptr);
  void* exec = fake_.instantiate(graph);
  const CUstream stream = stream_handle(0x5500);
  fake_.hold(stream, true);
  fake_.launch(exec, stream);
  complete(stream);
  EXPECT_EQ(drain(), (std::vector<void*>{&first, &second}));
  fake_.exec_destroy(exec);
  fake_.graph_destroy(graph);
  EXPECT_TRUE(drain().empty()) << "the calls not yet done hold both payloads: no final entry";
  for (Node* node : {&first, &second}) EXPECT_TRUE(host_node_entry_done(&node->record));
}

TEST_F(HostCallsTest, HostNodeThatCannotBeAddedLeavesThePayloadWithTheGraph) {
  Node node;
  node.record.payload = &node;
  CUgraph graph = fake_.graph_create();
  CUgraph other = fake_.graph_create();
  Node elsewhere;
  elsewhere.record.payload = &elsewhere;
  const HostNodeResult foreign = add_host_node(driver_.api, other, nullptr, 0, &elsewhere.record);
  ASSERT_NE(foreign.node, nullptr);
  // A dependency from another graph: the node is refused after the payload was attached.
  const HostNodeResult added = add_host_node(driver_.api, graph, &foreign.node, 1, &node.record);
  EXPECT_EQ(added.attach.outcome, AttachOutcome::kAttached);
  EXPECT_EQ(added.node, nullptr);
  EXPECT_EQ(added.node_error, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake_.host_node_count(graph), 0);
  fake_.graph_destroy(graph);
  fake_.graph_destroy(other);
  const std::vector<void*> entries = drain();
  EXPECT_EQ(entries.size(), 2u) << "both payloads come back as final entries";
  EXPECT_TRUE(host_node_entry_is_final(&node.record));
  EXPECT_TRUE(host_node_entry_is_final(&elsewhere.record));
  EXPECT_EQ(delta().held_by_cuda, 0u);
}

TEST_F(HostCallsTest, HostNodeOnAGraphThatRefusesTheUserObjectIsNotAdded) {
  Node node;
  node.record.payload = &node;
  const HostNodeResult added = add_host_node(driver_.api, fake_.failing_graph(), nullptr, 0, &node.record);
  EXPECT_EQ(added.attach.outcome, AttachOutcome::kReturned) << "the destructor ran in the release: withdrawn";
  EXPECT_EQ(added.node, nullptr);
  EXPECT_EQ(node.record.native_refs.load(), 1u) << "a withdrawn destructor leaves the record alone";
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(delta().attached_to_cuda, 0u);
  EXPECT_EQ(delta().held_by_cuda, 0u);
}

}  // namespace
}  // namespace graph
}  // namespace reclaim
