// tests/layering/queue_links_alone_test.cc — the core links alone: this binary depends on //cleanup:queue
// and nothing else of the library, and reaches every function its public headers declare, so a
// declaration whose definition lives in a layer above (or nowhere) fails the link here.

#include <cstdint>
#include <cstdlib>

#include "cleanup/process_queue.h"
#include "cleanup/queue_allocation.h"
#include "cleanup/reclaim_queue.h"
#include "cleanup/release_batch.h"
#include "gtest/gtest.h"

namespace {

void* fake(std::uintptr_t n) { return reinterpret_cast<void*>(n * 16); }

void release_all(reclaim::ReleaseBatch* batch, void* released) {
  for (; batch->next < batch->count; ++batch->next) ++*static_cast<std::size_t*>(released);
  reclaim::ReclaimQueue::settle(batch, batch->count);
}

std::size_t no_fields(char* buffer, std::size_t size) noexcept {
  if (size != 0) buffer[0] = '\0';
  return 0;
}

TEST(QueueLinksAlone, EveryDeclaredFunctionIsDefinedInTheCore) {
  reclaim::set_queue_allocator_for_testing([](std::size_t size) noexcept { return std::malloc(size); });
  reclaim::set_report_fields(no_fields);
  std::size_t capacity = 0;
  EXPECT_TRUE(reclaim::parse_reserved_capacity("1024", &capacity));
  EXPECT_EQ(capacity, 1024u);
  EXPECT_GT(reclaim::reserved_capacity_from_environment().capacity, 0u);
  EXPECT_GE(reclaim::process_queue().wakeup_fd(), 0);

  reclaim::ReclaimQueue queue;
  std::size_t released = 0;
  ASSERT_EQ(queue.push(fake(1)), reclaim::PushStatus::kQueued);
  EXPECT_TRUE(queue.maybe_pending());
  EXPECT_EQ(queue.pending(), 1u);
  EXPECT_TRUE(queue.wait_for_work(0));
  EXPECT_TRUE(queue.wait_for_work_or(-1, 0));
  EXPECT_EQ(queue.drain_and_linger(release_all, &released), 1u);
  queue.end_linger();
  ASSERT_EQ(queue.push(fake(2)), reclaim::PushStatus::kQueued);
  EXPECT_EQ(queue.drain(release_all, &released), 1u);
  EXPECT_FALSE(queue.trim_would_help());
  EXPECT_EQ(queue.trim(), reclaim::TrimStatus::kNotNeeded);
  EXPECT_EQ(queue.producer_use().lane_count, reclaim::QueueOptions().producer_lanes);
  const reclaim::CounterSnapshot counters = queue.snapshot();
  EXPECT_TRUE(counters.conserved());
  EXPECT_EQ(counters.as_c().released, 2u);
  char report[1024];
  EXPECT_GT(reclaim::format_report(counters, report, sizeof report), 0u);
  ASSERT_EQ(queue.push(fake(3)), reclaim::PushStatus::kQueued);
  EXPECT_EQ(queue.close(release_all, &released), 1u);
  queue.close_without_release();
  EXPECT_TRUE(queue.is_closed());
  EXPECT_EQ(released, 3u);
  queue.reset_after_fork_in_child();  // as in a fork child: open again, empty
  EXPECT_FALSE(queue.is_closed());
  reclaim::set_report_fields(nullptr);
  reclaim::set_queue_allocator_for_testing(nullptr);
}

}  // namespace
