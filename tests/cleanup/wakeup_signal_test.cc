// tests/cleanup/wakeup_signal_test.cc — WakeupSignal alone: the edge (raise), the linger, the closed fd
// and the fork reset, as ReclaimQueue relies on them.

#include "cleanup/wakeup_signal.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "tests/cleanup/fd_readable.h"

namespace {

using reclaim::WakeupSignal;
using reclaim_test::readable;

TEST(WakeupSignal, StartsClearAndUnreadable) {
  WakeupSignal signal;
  EXPECT_FALSE(signal.is_set());
  EXPECT_FALSE(signal.seen_by_push());
  EXPECT_FALSE(readable(signal.fd()));
  EXPECT_EQ(signal.writes(), 0u);
}

TEST(WakeupSignal, RaiseWritesOncePerEdge) {
  WakeupSignal signal;
  signal.raise();
  signal.raise();  // the flag is already set: no second write
  EXPECT_TRUE(signal.is_set());
  EXPECT_TRUE(readable(signal.fd()));
  EXPECT_EQ(signal.writes(), 1u);
  signal.lower();
  EXPECT_FALSE(signal.is_set());
  EXPECT_FALSE(readable(signal.fd()));
  signal.raise();  // a new edge
  EXPECT_EQ(signal.writes(), 2u);
}

TEST(WakeupSignal, LingerKeepsTheFlagAndSkipsWrites) {
  WakeupSignal signal;
  signal.raise();
  signal.make_unreadable();
  EXPECT_TRUE(signal.is_set());
  EXPECT_FALSE(readable(signal.fd()));
  signal.raise();  // a push during the linger: no write
  EXPECT_FALSE(readable(signal.fd()));
  EXPECT_EQ(signal.writes(), 1u);
}

TEST(WakeupSignal, WaitReturnsForWorkForTheExtraFdAndForGoodOnceClosed) {
  WakeupSignal signal;
  EXPECT_FALSE(signal.wait(-1, 0));
  signal.raise();
  EXPECT_TRUE(signal.wait(-1, 0));
  signal.lower();
  EXPECT_FALSE(signal.wait(-1, 0));

  const int extra = ::eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(extra, 0);
  EXPECT_TRUE(signal.wait(extra, 0));
  ::close(extra);

  signal.mark_closed();
  EXPECT_TRUE(signal.wait(-1, 0));
  signal.lower();  // clearing the wake-up fd does not clear the closed one
  EXPECT_TRUE(signal.wait(-1, 0));
}

TEST(WakeupSignal, ResetAfterForkKeepsTheNumberAndClearsEverything) {
  WakeupSignal signal;
  const int fd = signal.fd();
  signal.raise();
  signal.mark_closed();
  signal.reset_after_fork();
  EXPECT_EQ(signal.fd(), fd);
  EXPECT_FALSE(signal.is_set());
  EXPECT_FALSE(readable(signal.fd()));
  EXPECT_FALSE(signal.wait(-1, 0));  // the closed fd is a fresh one too
  signal.raise();
  EXPECT_TRUE(readable(fd));
}

}  // namespace
