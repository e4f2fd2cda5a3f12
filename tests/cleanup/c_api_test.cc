// The C entry points over the global queue: host destructor from native threads, drain with a C release
// action, stats, close, leaks after close, and the one-line report.
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "cleanup/reclaim.h"
#include "gtest/gtest.h"
#include "tests/cleanup/release_recorder.h"

namespace {

using reclaim_test::item_for;
using reclaim_test::ReleaseRecorder;

extern "C" void c_release(void* item, void* recorder) { ReleaseRecorder::release(item, recorder); }

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

// One test walks the global queue's whole life, since close() is final for the process.
TEST(ReclaimCApi, HostDestructorFromNativeThreadsThroughCloseAndLeaks) {
  ReleaseRecorder recorder(4 * 1000 + 10);
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
  EXPECT_EQ(reclaim_wait(0), 1);
  EXPECT_EQ(reclaim_drain(nullptr, nullptr, SIZE_MAX), 0u) << "a NULL release action releases nothing";
  EXPECT_EQ(reclaim_drain(c_release, &recorder, 1000), 1000u);
  EXPECT_EQ(reclaim_drain(c_release, &recorder, SIZE_MAX), 3000u);
  EXPECT_EQ(reclaim_wait(0), 0);

  EXPECT_EQ(reclaim_push(item_for(4000)), RECLAIM_QUEUED);
  EXPECT_EQ(reclaim_close(c_release, &recorder), 1u);
  EXPECT_EQ(reclaim_is_closed(), 1);
  EXPECT_EQ(reclaim_push(item_for(4001)), RECLAIM_LEAKED_AFTER_CLOSE);
  reclaim_host_destructor(item_for(4002));
  for (std::size_t id = 0; id <= 4000; ++id) ASSERT_EQ(recorder.count(id), 1) << id;
  EXPECT_EQ(recorder.count(4001) + recorder.count(4002), 0);

  reclaim_stats stats;
  EXPECT_EQ(reclaim_get_stats(nullptr), -1);
  ASSERT_EQ(reclaim_get_stats(&stats), 0);
  EXPECT_EQ(stats.enqueued, 4003u);
  EXPECT_EQ(stats.released, 4001u);
  EXPECT_EQ(stats.leaked_after_close, 2u);
  EXPECT_EQ(stats.pending, 0u);
  EXPECT_EQ(stats.enqueued, stats.released + stats.pending + stats.leaked_after_close +
                                stats.abandoned_after_fork);
  EXPECT_EQ(report_line(),
            "cuda-reclaim: enqueued=4003 released=4001 pending=0 leaked_after_close=2 "
            "abandoned_after_fork=0 rejected=0 drain_calls=" + std::to_string(stats.drain_calls) +
            " max_pending=4000 wakeups=" + std::to_string(stats.wakeups) + " conserved=yes\n");
}

TEST(ReclaimCApi, WriteReportToABadFdFails) { EXPECT_EQ(reclaim_write_report(-1), -1); }

}  // namespace
