// tests/cleanup/storage_set_test.cc — StorageSet alone: what it counts, the front's order, the readers'
// guard that keeps trim() out, and the fork reset.

#include "cleanup/storage_set.h"

#include "cleanup/queue_storage.h"
#include "gtest/gtest.h"

namespace {

using reclaim::FrontStorage;
using reclaim::QueueStorage;
using reclaim::StorageReader;
using reclaim::StorageSet;

void* fake(int n) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(n) * 16); }

TEST(StorageSet, StoredCountCountsEveryStorage) {
  StorageSet storages(1024);
  EXPECT_EQ(storages.stored_count(), 0u);
  ASSERT_TRUE(storages.current()->queue.enqueue(fake(1)));
  void* const requeued[2] = {fake(2), fake(3)};
  ASSERT_TRUE(storages.front()->put_first(requeued, 2));
  QueueStorage* previous = StorageSet::make_storage(1024);
  ASSERT_TRUE(previous->queue.enqueue(fake(4)));
  storages.set_previous(previous);  // freed by the set from now on
  EXPECT_EQ(storages.stored_count(), 4u);
}

TEST(StorageSet, FrontKeepsTheRestOfALaterDequeueAheadOfAnEarlierOne) {
  StorageSet storages(1024);
  FrontStorage* front = storages.front();
  void* const earlier[1] = {fake(9)};
  void* const rest[2] = {fake(1), fake(2)};
  ASSERT_TRUE(front->put_first(earlier, 1));
  ASSERT_TRUE(front->put_first(rest, 2));
  void* batch[4] = {};
  ASSERT_EQ(front->take(batch, 4), 3u);
  EXPECT_EQ(batch[0], fake(1));
  EXPECT_EQ(batch[1], fake(2));
  EXPECT_EQ(batch[2], fake(9));
  EXPECT_EQ(front->size.load(), 0u);
}

TEST(StorageSet, TrimStartsOnlyWithoutReaders) {
  StorageSet storages(1024);
  {
    const StorageReader reader(storages);
    EXPECT_FALSE(storages.begin_trim());
  }
  ASSERT_TRUE(storages.begin_trim());
  EXPECT_FALSE(storages.begin_trim());  // one trim at a time
  QueueStorage* fresh = StorageSet::make_storage(1024);
  QueueStorage* old = storages.replace_current(fresh);
  EXPECT_NE(old, fresh);
  EXPECT_EQ(storages.current(), fresh);
  EXPECT_EQ(storages.current_for_push(), fresh);
  StorageSet::free_storage(old);
  storages.end_trim();
  const StorageReader reader(storages);  // readers get in again
  EXPECT_FALSE(reader.forked());
}

TEST(StorageSet, ResetAfterForkDropsTheStoragesAndForgetsItsReaders) {
  StorageSet storages(1024);
  QueueStorage* parent_current = storages.current();
  FrontStorage* parent_front = storages.front();
  ASSERT_TRUE(parent_current->queue.enqueue(fake(1)));
  {
    const StorageReader reader(storages);  // the forking thread's own drain
    storages.reset_after_fork(1024);
    EXPECT_TRUE(reader.forked());
    EXPECT_NE(storages.current(), parent_current);
    EXPECT_NE(storages.front(), parent_front);
    EXPECT_EQ(storages.stored_count(), 0u);
    EXPECT_EQ(storages.forks(), 1u);
  }  // leaves without counting itself out: the reset already did
  EXPECT_TRUE(storages.begin_trim());
  storages.end_trim();
  // Dropped in a real child; freed here so that the leak checker sees only what it should.
  StorageSet::free_storage(parent_current);
  delete parent_front;
}

}  // namespace
