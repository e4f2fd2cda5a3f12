// cleanup/queue_allocation.h — the allocation function behind every reclaim queue's storage.
//
// The underlying moodycamel queue allocates blocks, per-thread producer records and their indices through
// this function. Production code never sets it. Tests set it to inject allocation failure (a push that
// cannot store its pointer must be counted as rejected, never crash) and to count allocations (to measure
// whether a push allocates). Memory it returns is released with std::free.

#pragma once

#include <cstddef>

namespace reclaim {

// Must behave like std::malloc: return suitably aligned memory, or nullptr on failure.
using AllocateFn = void* (*)(std::size_t size) noexcept;

// Installs `allocate` for every queue in the process; nullptr restores std::malloc. Takes effect for
// allocations that start after the call (a relaxed atomic pointer, loaded on each allocation).
// Any thread; never touches Python; never blocks.
void set_queue_allocator_for_testing(AllocateFn allocate) noexcept;

}  // namespace reclaim
