// The C entry points over this copy's process queue: host destructor from native threads, the owner's
// drain through the table, stats, close, leaks after close, and the one-line report.
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "abi/reclaim.h"
#include "cleanup/reclaim_queue.h"
#include "gtest/gtest.h"
#include "tests/cleanup/release_recorder.h"

namespace {

using reclaim_test::each_item;
using reclaim_test::item_for;
using reclaim_test::ReleaseRecorder;

// The test is the owner: its drain releases into this recorder.
ReleaseRecorder* g_recorder = nullptr;
ptrdiff_t owner_drain(ptrdiff_t max_items) {
  return static_cast<ptrdiff_t>(reclaim::own_process_queue()->drain(
      each_item<ReleaseRecorder::release>, g_recorder, max_items < 0 ? SIZE_MAX : static_cast<std::size_t>(max_items)));
}
int announces = 0;
int owner_announce() { return ++announces, 0; }
const reclaim_owner kOwner = {owner_drain, owner_announce};

std::string report_line() {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  EXPECT_EQ(reclaim_write_report(fds[1]), 0);
  ::close(fds[1]);
  char buffer[1024];
  const ssize_t length = ::read(fds[0], buffer, sizeof buffer);
  ::close(fds[0]);
  return std::string(buffer, length > 0 ? static_cast<std::size_t>(length) : 0);
}

// A table with a hole is refused before this copy binds to anything (so it runs first): a call through it
// would jump to address 0. Stand-ins that are never called fill the rest.
int stand_in_push(void*) { return RECLAIM_QUEUED; }
void stand_in_host_destructor(void*) {}
ptrdiff_t stand_in_drain(ptrdiff_t) { return 0; }
int stand_in_get_stats(reclaim_stats*, size_t) { return 0; }
int stand_in_int() { return 0; }
size_t stand_in_pending() { return 0; }
int stand_in_write_report(int) { return 0; }
void stand_in_hand_back_end(int, uint32_t*) {}
int stand_in_wait(double) { return 0; }

TEST(ReclaimCApi, AdoptRefusesATableWithANullEntry) {
  const reclaim_api whole = {RECLAIM_ABI_VERSION, sizeof(reclaim_api), stand_in_push, stand_in_host_destructor,
                             stand_in_drain, stand_in_get_stats, stand_in_int,
                             stand_in_pending, stand_in_int, stand_in_write_report, stand_in_int,
                             stand_in_int, stand_in_hand_back_end, stand_in_wait};
  const std::vector<void (*)(reclaim_api&)> holes = {
      [](reclaim_api& t) { t.push = nullptr; },      [](reclaim_api& t) { t.host_destructor = nullptr; },
      [](reclaim_api& t) { t.drain = nullptr; },     [](reclaim_api& t) { t.get_stats = nullptr; },
      [](reclaim_api& t) { t.is_closed = nullptr; }, [](reclaim_api& t) { t.pending = nullptr; },
      [](reclaim_api& t) { t.wakeup_fd = nullptr; }, [](reclaim_api& t) { t.write_report = nullptr; },
      [](reclaim_api& t) { t.announce = nullptr; },
      [](reclaim_api& t) { t.hand_back_begin = nullptr; }, [](reclaim_api& t) { t.hand_back_end = nullptr; },
      [](reclaim_api& t) { t.wait_handed_back = nullptr; },
  };
  for (std::size_t hole = 0; hole < holes.size(); ++hole) {
    reclaim_api table = whole;
    holes[hole](table);
    EXPECT_EQ(reclaim_adopt(&table), -1) << "entry " << hole;
  }
  // Nothing was adopted: the next test can still make this copy the owner of its own queue.
}

// One test walks the global queue's whole life, since close() is final for the process.
TEST(ReclaimCApi, HostDestructorFromNativeThreadsThroughCloseAndLeaks) {
  ReleaseRecorder recorder(4 * 1000 + 10);
  g_recorder = &recorder;
  EXPECT_EQ(reclaim_drain(-1), 0) << "no owner yet: nothing is released";
  EXPECT_EQ(reclaim_announce(), 0);
  EXPECT_EQ(reclaim_own_process_queue(nullptr), -1);
  ASSERT_EQ(reclaim_own_process_queue(&kOwner), 0);
  EXPECT_EQ(reclaim_announce(), 0);
  EXPECT_EQ(announces, 1) << "announce reaches the owner";
  EXPECT_EQ(reclaim_adopt(reclaim_api_in_use()), 0) << "adopting the table in use is a no-op";
  reclaim::ReclaimQueue& queue = *reclaim::own_process_queue();
  EXPECT_EQ(reclaim_is_closed(), 0);
  EXPECT_GE(reclaim_wakeup_fd(), 0);
  EXPECT_EQ(reclaim_push(nullptr), RECLAIM_INVALID_ARGUMENT);
  reclaim_host_destructor(nullptr);  // must be harmless

  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (std::size_t i = 0; i < 1000; ++i) reclaim_host_destructor(item_for(t * 1000 + i));
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(reclaim_pending(), 4000u);
  EXPECT_TRUE(queue.wait_for_work(0));
  EXPECT_EQ(reclaim_drain(1000), 1000);
  EXPECT_EQ(reclaim_drain(-1), 3000);
  EXPECT_FALSE(queue.wait_for_work(0));

  EXPECT_EQ(reclaim_push(item_for(4000)), RECLAIM_QUEUED);
  EXPECT_EQ(queue.close(each_item<ReleaseRecorder::release>, &recorder), 1u);
  EXPECT_EQ(reclaim_is_closed(), 1);
  EXPECT_EQ(reclaim_push(item_for(4001)), RECLAIM_LEAKED_AFTER_CLOSE);
  reclaim_host_destructor(item_for(4002));
  for (std::size_t id = 0; id <= 4000; ++id) ASSERT_EQ(recorder.count(id), 1) << id;
  EXPECT_EQ(recorder.count(4001) + recorder.count(4002), 0);

  reclaim_stats stats;
  EXPECT_EQ(reclaim_get_stats(nullptr), -1);
  ASSERT_EQ(reclaim_get_stats(&stats), 0);
  EXPECT_EQ(stats.handed_over, 4003u);
  EXPECT_EQ(stats.released, 4001u);
  EXPECT_EQ(stats.leaked_after_close, 2u);
  EXPECT_EQ(stats.pending, 0u);
  EXPECT_TRUE(reclaim_stats_conserved(&stats));
  EXPECT_EQ(report_line(),
            "cuda-reclaim: handed_over=4003 released=4001 pending=0 leaked_after_close=2 rejected=0 "
            "abandoned_after_fork=0 nonempty_drains=" + std::to_string(stats.nonempty_drains) +
            " max_pending=4000 eventfd_writes=" + std::to_string(stats.eventfd_writes) +
                " in_drain=0 trims=0 conserved=yes\n");
}

TEST(ReclaimCApi, WriteReportToABadFdFails) { EXPECT_EQ(reclaim_write_report(-1), -1); }

}  // namespace
