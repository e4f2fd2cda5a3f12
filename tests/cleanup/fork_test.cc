// Fork: the child starts with a fresh, open, empty queue on the same fd number and counts what the
// parent had queued as abandoned; the parent is unaffected. The global queue does this by itself through
// its pthread_atfork handler; other instances call reset_after_fork_in_child().
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <string>

#include "abi/reclaim.h"
#include "cleanup/reclaim_queue.h"
#include "gtest/gtest.h"
#include "tests/cleanup/fd_readable.h"
#include "tests/cleanup/release_recorder.h"

namespace {

using reclaim::PushStatus;
using reclaim::ReclaimQueue;
using reclaim_test::each_item;
using reclaim_test::item_for;
using reclaim_test::readable;
using reclaim_test::ReleaseRecorder;

// The child's end of the pipe that failed CHILD_CHECKs are written to; -1 outside a forked child.
int g_child_report_fd = -1;

void report_failed_check(int line, const char* condition) {
  char text[512];
  const int length = std::snprintf(text, sizeof text, "%s:%d: CHILD_CHECK(%s) failed\n", __FILE__, line,
                                   condition);
  if (length > 0) (void)!::write(g_child_report_fd, text, std::min<std::size_t>(length, sizeof text - 1));
}

// GoogleTest assertions cannot report from a forked child: a check there that fails writes its line and
// condition to the parent through a pipe, and the child stops.
#define CHILD_CHECK(condition)                   \
  do {                                           \
    if (!(condition)) {                          \
      report_failed_check(__LINE__, #condition); \
      return 1;                                  \
    }                                            \
  } while (0)

// Runs `child` (which returns 0 when every CHILD_CHECK held) in a forked child. Returns what went wrong
// there, one line per failed check; empty when nothing did.
template <typename Child>
std::string failures_in_child(Child child) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return "pipe() failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipe_fds[0]);
    g_child_report_fd = pipe_fds[1];
    ::_exit(child());
  }
  ::close(pipe_fds[1]);
  std::string failures;
  char buffer[256];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) != 0;) {
    if (n > 0) failures.append(buffer, static_cast<std::size_t>(n));
    if (n < 0 && errno != EINTR) break;
  }
  ::close(pipe_fds[0]);
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return failures + "fork() or waitpid() failed";
  if (!WIFEXITED(status) || (WEXITSTATUS(status) != 0 && failures.empty())) {
    failures += "the child ended with wait status " + std::to_string(status) + " and no failed check";
  }
  return failures;
}

TEST(ForkReset, ChildCountsParentItemsAsAbandonedAndStartsFresh) {
  ReclaimQueue queue;
  ReleaseRecorder recorder(20);
  for (std::size_t i = 0; i < 10; ++i) queue.push(item_for(i));
  const int fd_before = queue.wakeup_fd();

  const std::string failures = failures_in_child([&] {
    queue.reset_after_fork_in_child();
    auto counters = queue.snapshot();
    CHILD_CHECK(counters.abandoned_after_fork == 10);
    CHILD_CHECK(counters.pending == 0);
    CHILD_CHECK(counters.conserved());
    CHILD_CHECK(!queue.is_closed());
    CHILD_CHECK(queue.wakeup_fd() == fd_before);
    CHILD_CHECK(!readable(queue.wakeup_fd()));
    CHILD_CHECK(queue.push(item_for(10)) == PushStatus::kQueued);
    CHILD_CHECK(readable(queue.wakeup_fd()));
    CHILD_CHECK(queue.drain(each_item<ReleaseRecorder::release>, &recorder) == 1);
    CHILD_CHECK(recorder.count(10) == 1 && recorder.total() == 1);  // parent items never touched
    counters = queue.snapshot();
    CHILD_CHECK(counters.handed_over == 11 && counters.released == 1 && counters.conserved());
    return 0;
  });
  EXPECT_EQ(failures, "");

  // Parent: unaffected by the child's reset, its pushes or its drain.
  EXPECT_EQ(queue.pending(), 10u);
  EXPECT_TRUE(readable(queue.wakeup_fd()));
  EXPECT_EQ(queue.drain(each_item<ReleaseRecorder::release>, &recorder), 10u);
  for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(recorder.count(i), 1);
  EXPECT_EQ(queue.snapshot().abandoned_after_fork, 0u);
  EXPECT_TRUE(queue.snapshot().conserved());
}

TEST(ForkReset, ChildOfAClosedQueueIsOpen) {
  ReclaimQueue queue;
  queue.close_without_release();
  queue.push(item_for(0));  // leaked after close
  const std::string failures = failures_in_child([&] {
    queue.reset_after_fork_in_child();
    CHILD_CHECK(!queue.is_closed());
    CHILD_CHECK(queue.push(item_for(1)) == PushStatus::kQueued);
    const auto counters = queue.snapshot();
    CHILD_CHECK(counters.leaked_after_close == 1 && counters.abandoned_after_fork == 0);
    CHILD_CHECK(counters.conserved());
    return 0;
  });
  EXPECT_EQ(failures, "");
  EXPECT_TRUE(queue.is_closed());
}

TEST(ForkReset, GlobalQueueResetsItselfInTheChildAndKeepsParentWakeupsApart) {
  // Parent: some pending work, wake-up fd readable.
  for (std::size_t i = 0; i < 5; ++i) ASSERT_EQ(reclaim_push(item_for(i)), RECLAIM_QUEUED);
  const int fd = reclaim_wakeup_fd();
  ReleaseRecorder recorder(64);

  const std::string failures = failures_in_child([&] {
    // No explicit reset: the pthread_atfork handler has done it.
    reclaim_stats stats;
    CHILD_CHECK(reclaim_get_stats(&stats) == 0);
    CHILD_CHECK(stats.abandoned_after_fork == 5 && stats.pending == 0);
    CHILD_CHECK(reclaim_wakeup_fd() == fd && !readable(fd));
    for (std::size_t i = 0; i < 3; ++i) CHILD_CHECK(reclaim_push(item_for(10 + i)) == RECLAIM_QUEUED);
    CHILD_CHECK(readable(fd));
    // Leave the child's queue non-empty and its fd readable: the parent must not see it.
    return 0;
  });
  EXPECT_EQ(failures, "");

  EXPECT_EQ(reclaim_pending(), 5u);
  EXPECT_EQ(reclaim::own_process_queue()->drain(each_item<ReleaseRecorder::release>, &recorder), 5u);
  EXPECT_FALSE(readable(fd)) << "the child's pushes must not make the parent's fd readable";
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(recorder.count(i), 1);
  EXPECT_EQ(recorder.total(), 5u);
  reclaim_stats stats;
  ASSERT_EQ(reclaim_get_stats(&stats), 0);
  EXPECT_EQ(stats.abandoned_after_fork, 0u);
}

}  // namespace
