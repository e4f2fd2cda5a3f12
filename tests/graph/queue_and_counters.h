// tests/graph/queue_and_counters.h — what the graph/ tests read back: the payloads the process queue hands
// out, and graph/'s counters since a point, with the hold law checked.

#pragma once

#include <vector>

#include <gtest/gtest.h>

#include "abi/reclaim.h"
#include "cleanup/reclaim_queue.h"
#include "graph/counters.h"

namespace reclaim_test {

// Drains the process queue and returns what it held, in order, as `Item*`. Test thread only: the queue's
// release action runs here.
template <typename Item>
std::vector<Item*> drain_process_queue() {
  std::vector<Item*> items;
  reclaim::own_process_queue()->drain(
      [](reclaim::ReleaseBatch* batch, void* context) {
        for (; batch->next < batch->count; ++batch->next) {
          static_cast<std::vector<Item*>*>(context)->push_back(static_cast<Item*>(batch->items[batch->next]));
        }
      },
      &items);
  return items;
}

// Every graph/ counter minus its value in `before` (held_by_cuda, a gauge, as a difference modulo 2^64),
// after checking the hold law (attached == handed back + held) on the totals (a non-fatal failure).
// Any thread, while no attach and no trampoline is in flight.
inline reclaim::graph::GraphCounters graph_counters_since(const reclaim::graph::GraphCounters& before) {
  const reclaim::graph::GraphCounters now = reclaim::graph::graph_counters();
  EXPECT_EQ(now.attached_to_cuda, now.handed_back_by_cuda + now.held_by_cuda) << "the hold law";
  reclaim::graph::GraphCounters since;
#define RECLAIM_GRAPH_COUNTER_SINCE_(name, in_report, meaning) since.name = now.name - before.name;
  RECLAIM_GRAPH_COUNTERS(RECLAIM_GRAPH_COUNTER_SINCE_)
#undef RECLAIM_GRAPH_COUNTER_SINCE_
  return since;
}

}  // namespace reclaim_test
