// graph/counters.h — what CUDA still holds, and the pushes of host calls and host nodes, as one table.
//
// Every counter here is a process-lifetime atomic in graph/counters.cc (trivially destructible: nothing
// runs on them at exit, when CUDA may still fire trampolines). The table is the one place that names
// them: the snapshot struct, the Python dict of cuda_reclaim.stats() and the exit report's fields are all
// expanded from it.
//
// The hold law, exact whenever no attach call and no trampoline is in flight:
//
//     attached_to_cuda == handed_back_by_cuda + held_by_cuda
//
// held_by_cuda is a gauge of its own (raised before each attach's driver call, lowered by a failed
// attach or by the trampoline that hands the payload back), so the law can fail; the other two only grow.
// What is still held at exit is what CUDA never gave back: an executable graph never destroyed, a host
// function behind work that was still running, a host node's graph still alive.

#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace reclaim {
namespace graph {

// X(name, in_exit_report, meaning)
#define RECLAIM_GRAPH_COUNTERS(X)                                                                         \
  X(attached_to_cuda, true,                                                                               \
    "payloads CUDA took: keep_alive user objects, keep_alive_until host functions, launch_host_func "     \
    "calls, add_host_node functions")                                                                     \
  X(handed_back_by_cuda, true,                                                                            \
    "payloads CUDA gave back: trampolines that handed them to the queue (queued, leaked after close or "   \
    "rejected), host-node payloads whose user object is gone")                                            \
  X(held_by_cuda, true, "attached and not yet handed back (a gauge)")                                     \
  X(host_calls, false, "pushes by launch_host_func host functions (one per call)")                        \
  X(host_node_calls, false, "pushes by host-node firings (one per firing of a node in a launched graph)")

struct GraphCounters {
#define RECLAIM_GRAPH_COUNTER_FIELD(name, in_report, meaning) std::uint64_t name = 0;
  RECLAIM_GRAPH_COUNTERS(RECLAIM_GRAPH_COUNTER_FIELD)
#undef RECLAIM_GRAPH_COUNTER_FIELD
};

// A copy of every counter of the table, re-read (a bounded number of times) until the hold law holds, so
// that a snapshot taken while trampolines run (the exit report) does not catch one between its two
// updates; exact at quiescence.
// Any thread; never touches Python; never blocks.
GraphCounters graph_counters() noexcept;

// --- updates, for graph/'s own attach functions and trampolines -------------------------------------------

// Before an attach's driver call: the payload counts as held from here on, so that a trampoline that runs
// before the call returns never makes the gauge negative; returns its hand-back ticket (the process's
// hand-back barrier, reclaim_hand_back_begin: an epoch count's index, or -1 when not counted), which travels with the
// pointer CUDA gets (tag()).
// Any thread; never touches Python; never blocks.
int note_attach_begin() noexcept;

// After the driver call: `taken` (kAttached or kInFlight) counts the payload as attached; otherwise it is
// back with the caller and no longer held, and its ticket ends here.
// Any thread; never touches Python; never blocks.
void note_attach_end(bool taken, int ticket) noexcept;

// A trampoline handed its payload back (whatever the queue did with it): counts it, then ends its ticket
// and stores 1 into `done` if not null (reclaim_hand_back_end). Call it after the push, so that a waiter
// that sees the hand-back finds the payload queued.
// Any thread; never touches Python; never blocks.
void note_handed_back(int ticket, std::atomic<std::uint32_t>* done = nullptr) noexcept;

// The pointer CUDA gets for `pointer`, with its ticket in the pointer's top 16 bits
// (RECLAIM_HAND_BACK_TICKET_BITS of cuda_reclaim/reclaim_abi.h: the ticket plus one;
// 0: none, as for a pointer that did not come through tag(), e.g. a test firing a trampoline by hand), and
// back. User-space pointers on Linux x86-64 and aarch64 are below 2^48, so those bits are free; a pointer
// with any of them set (a tagged pointer, as from aarch64's memory tagging, or an address above 2^48) is
// not taggable(): tag() refuses it (returns null), and graph/'s attach functions refuse it first, with
// the error "a payload with its top 16 bits set". A ticket outside 0 .. 2^16 - 2 travels as none.
// Any thread; never blocks; never allocates.
void* tag(void* pointer, int ticket) noexcept;
struct Untagged {
  void* pointer;
  int ticket;  // -1: none
};
Untagged untag(void* tagged) noexcept;
bool taggable(const void* pointer) noexcept;  // its top 16 bits are clear

// A trampoline's push and its count by source are in flight between these two (push_payload): entered
// seq_cst before the push, left (release) after the count. A reader that reads `left` first and
// `entered` last, and finds them equal, saw no such push half-counted in between.
// Any thread; never touches Python; never blocks.
void note_trampoline_enter() noexcept;
void note_trampoline_leave() noexcept;
std::uint64_t trampolines_entered() noexcept;  // seq_cst load
std::uint64_t trampolines_left() noexcept;     // acquire load

// One push by a host-call trampoline / a host-node firing (accepted by the queue).
// Any thread; never touches Python; never blocks.
void note_host_call_push() noexcept;
void note_host_node_push() noexcept;

// --- the exit report ---------------------------------------------------------------------------------------

// Writes the exit report's fields of the table (" attached_to_cuda=N handed_back_by_cuda=N
// held_by_cuda=N") into `buffer`; returns the length written. The queue's owner makes it the queue's report
// hook (reclaim::set_report_fields) when it takes the queue, so that the exit report says what CUDA holds.
// Any thread; never touches Python; never blocks; never allocates.
std::size_t format_report_fields(char* buffer, std::size_t size) noexcept;

}  // namespace graph
}  // namespace reclaim
