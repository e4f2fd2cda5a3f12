// One queue per process across copies of cleanup/: several shared objects, each with its own static
// copy of cleanup/ and hidden symbols, loaded RTLD_LOCAL into one process. A copy that adopts another's
// table (reclaim_adopt) pushes into, counts in and drains (through the owner's drain) from the owner's
// queue; a copy that was used first keeps its own and refuses to switch; an adopter cannot own.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cleanup/queue_copy.h"
#include "tests/cleanup/release_recorder.h"
#include "tools/cpp/runfiles/runfiles.h"

namespace {

using reclaim_test::item_for;
using reclaim_test::ReleaseRecorder;

extern "C" void c_release(void* item, void* recorder) { ReleaseRecorder::release(item, recorder); }

// Loads tests/cleanup/libqueue_copy_<name>.so from the runfiles; never unloaded (the owner's table must
// outlive every adopter).
const QueueCopy& load_copy(const char* name) {
  using bazel::tools::cpp::runfiles::Runfiles;
  std::string error;
  const std::unique_ptr<Runfiles> runfiles(Runfiles::CreateForTest(&error));
  if (runfiles == nullptr) {
    ADD_FAILURE() << "no runfiles: " << error;
    std::abort();
  }
  const std::string path =
      runfiles->Rlocation(std::string("cuda_reclaim/tests/cleanup/libqueue_copy_") + name + ".so");
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    ADD_FAILURE() << "dlopen " << path << ": " << ::dlerror();
    std::abort();
  }
  auto fn = reinterpret_cast<QueueCopyFn>(::dlsym(handle, "queue_copy"));
  if (fn == nullptr) std::abort();
  return *fn();
}

reclaim_stats stats_of(const QueueCopy& copy) {
  reclaim_stats s;
  EXPECT_EQ(copy.get_stats(&s), 0);
  return s;
}

void expect_same_counters(const reclaim_stats& a, const reclaim_stats& b) {
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0)
      << "handed_over " << a.handed_over << "/" << b.handed_over << " released " << a.released << "/"
      << b.released << " pending " << a.pending << "/" << b.pending;
}

TEST(SharedQueue, SeparateCopiesStartWithSeparateQueues) {
  const QueueCopy& one = load_copy("d");
  const QueueCopy& other = load_copy("e");
  ASSERT_NE(&one, &other) << "two files, two copies";
  ASSERT_EQ(one.push(item_for(0)), RECLAIM_QUEUED);
  EXPECT_EQ(one.pending(), 1u);
  EXPECT_EQ(other.pending(), 0u) << "without adoption each copy has its own queue";
  EXPECT_NE(one.wakeup_fd(), other.wakeup_fd());
  EXPECT_NE(one.api_in_use(), other.api_in_use());
  ReleaseRecorder recorder(1);
  EXPECT_EQ(one.drain(-1), 0) << "no owner yet: the table's drain releases nothing";
  ASSERT_EQ(one.become_owner(c_release, &recorder), 0);
  EXPECT_EQ(one.drain(-1), 1);
}

TEST(SharedQueue, AdoptingCopiesPushCountAndDrainInTheOwnersQueue) {
  const QueueCopy& owner = load_copy("a");
  const QueueCopy& adopter = load_copy("b");
  const QueueCopy& second = load_copy("c");
  const reclaim_api* table = owner.api_in_use();
  ASSERT_EQ(adopter.adopt(table), 0);
  ASSERT_EQ(adopter.adopt(table), 0) << "adopting the same table again is a no-op";
  // The second adopter takes the table the first one publishes: the owner's, never a forwarder.
  EXPECT_EQ(adopter.api_in_use(), table);
  ASSERT_EQ(second.adopt(adopter.api_in_use()), 0);
  EXPECT_EQ(second.api_in_use(), table);
  EXPECT_EQ(adopter.become_owner(c_release, nullptr), -1) << "an adopter owns nothing";
  EXPECT_EQ(adopter.wakeup_fd(), owner.wakeup_fd()) << "one wake-up fd";

  constexpr std::size_t kPerThread = 1000;
  ReleaseRecorder recorder(4 * kPerThread + 2);
  ASSERT_EQ(owner.become_owner(c_release, &recorder), 0);
  std::vector<std::thread> producers;
  for (std::size_t t = 0; t < 4; ++t) {
    const QueueCopy& via = t % 2 == 0 ? adopter : second;
    producers.emplace_back([&via, t] {
      for (std::size_t i = 0; i < kPerThread; ++i) via.host_destructor(item_for(t * kPerThread + i));
    });
  }
  for (auto& producer : producers) producer.join();

  EXPECT_EQ(owner.pending(), 4 * kPerThread) << "every adopter push is in the owner's queue";
  const reclaim_stats seen_by_owner = stats_of(owner);
  EXPECT_EQ(seen_by_owner.handed_over, 4 * kPerThread);
  expect_same_counters(seen_by_owner, stats_of(adopter));
  expect_same_counters(seen_by_owner, stats_of(second));

  // Drains through any copy run the owner's drain on the one queue, each item exactly once.
  EXPECT_EQ(adopter.drain(static_cast<ptrdiff_t>(kPerThread)), static_cast<ptrdiff_t>(kPerThread));
  EXPECT_EQ(owner.drain(-1), static_cast<ptrdiff_t>(3 * kPerThread));
  EXPECT_EQ(second.pending(), 0u);

  // One close for everyone: after the owner closes, an adopter's push is counted as leaked there.
  ASSERT_EQ(second.push(item_for(4 * kPerThread)), RECLAIM_QUEUED);
  EXPECT_EQ(owner.close_as_owner(), 1u);
  EXPECT_EQ(adopter.push(item_for(4 * kPerThread + 1)), RECLAIM_LEAKED_AFTER_CLOSE);
  for (std::size_t id = 0; id <= 4 * kPerThread; ++id) ASSERT_EQ(recorder.count(id), 1) << id;
  EXPECT_EQ(recorder.count(4 * kPerThread + 1), 0);

  const reclaim_stats end = stats_of(second);
  EXPECT_EQ(end.handed_over, 4 * kPerThread + 2);
  EXPECT_EQ(end.released, 4 * kPerThread + 1);
  EXPECT_EQ(end.leaked_after_close, 1u);
  EXPECT_TRUE(reclaim_stats_conserved(&end));
  expect_same_counters(end, stats_of(owner));
}

TEST(SharedQueue, AdoptionIsRefusedAfterFirstUseAndForUnfitTables) {
  const QueueCopy& used = load_copy("f");
  const QueueCopy& fresh = load_copy("g");
  const QueueCopy& owner = load_copy("h");
  ASSERT_EQ(used.pending(), 0u);  // first use binds its own queue
  EXPECT_EQ(used.adopt(owner.api_in_use()), -1) << "its own queue is already in use";
  ASSERT_EQ(used.push(item_for(0)), RECLAIM_QUEUED);
  EXPECT_EQ(owner.pending(), 0u) << "a refused adoption changes nothing";

  reclaim_api older = *owner.api_in_use();
  older.struct_size = sizeof(reclaim_api) - sizeof(void*);  // a table missing our last entry
  EXPECT_EQ(fresh.adopt(nullptr), -1);
  EXPECT_EQ(fresh.adopt(&older), -1);
  older = *owner.api_in_use();
  older.abi_version = RECLAIM_ABI_VERSION - 1;
  EXPECT_EQ(fresh.adopt(&older), -1);
  // None of the refusals bound anything: the fresh copy can still adopt.
  ASSERT_EQ(fresh.adopt(owner.api_in_use()), 0);
  ASSERT_EQ(fresh.push(item_for(1)), RECLAIM_QUEUED);
  EXPECT_EQ(owner.pending(), 1u);
  EXPECT_EQ(fresh.adopt(used.api_in_use()), -1) << "bound to one owner for good";

  ReleaseRecorder recorder(2);
  ASSERT_EQ(used.become_owner(c_release, &recorder), 0);
  ASSERT_EQ(owner.become_owner(c_release, &recorder), 0);
  EXPECT_EQ(used.drain(-1), 1);
  EXPECT_EQ(fresh.drain(-1), 1) << "the adopter's drain is its owner's";
  EXPECT_EQ(recorder.count(0) + recorder.count(1), 2);
}

}  // namespace
