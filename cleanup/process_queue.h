// cleanup/process_queue.h — this copy's process-wide queue, before any binding; for abi/ only.
//
// process_queue.cc creates it; abi/reclaim_c_api.cc decides whether this copy's C entry points use it or an
// adopted table, and hands it out only to the owner (own_process_queue()). No other layer includes this
// header (//tests/layering:include_rules_test): that is what keeps one copy from pushing into a queue
// nobody drains.
#pragma once

#include "cleanup/reclaim_queue.h"

namespace reclaim {

// Created on first use (allocates; reads CUDA_RECLAIM_RESERVED_CAPACITY), never destroyed.
// Any thread; never touches Python; never blocks after the first call.
ReclaimQueue& process_queue() noexcept;

}  // namespace reclaim
