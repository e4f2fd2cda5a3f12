// graph/counters.cc — see counters.h.

#include "graph/counters.h"

#include <atomic>
#include <cinttypes>
#include <cstdio>

#include "abi/reclaim.h"
#include "cuda_reclaim/reclaim_abi.h"

namespace reclaim {
namespace graph {
namespace {

// One relaxed atomic per row of the table, written by attach calls (any thread) and trampolines (CUDA's
// threads), read by graph_counters() and the report hook. Zero-initialized static storage, never destroyed.
#define RECLAIM_GRAPH_COUNTER_ATOMIC(name, in_report, meaning) std::atomic<std::uint64_t> g_##name{0};
RECLAIM_GRAPH_COUNTERS(RECLAIM_GRAPH_COUNTER_ATOMIC)
#undef RECLAIM_GRAPH_COUNTER_ATOMIC

// Re-reads snapshot attempts allow themselves while attaches or trampolines are in flight.
constexpr int kSnapshotAttempts = 64;

}  // namespace

GraphCounters graph_counters() noexcept {
  // A trampoline updates two counters (handed back, then held) and an attach two more (held, then
  // attached): a reader between the two would see the law broken by one, though nothing is. Re-read until
  // the law holds; bounded, so it never blocks (under a storm of trampolines the last read stands). The
  // exit report is taken while CUDA's thread may still be running trampolines.
  GraphCounters counters;
  for (int attempt = 0; attempt < kSnapshotAttempts; ++attempt) {
#define RECLAIM_GRAPH_COUNTER_LOAD(name, in_report, meaning) \
  counters.name = g_##name.load(std::memory_order_seq_cst);
    RECLAIM_GRAPH_COUNTERS(RECLAIM_GRAPH_COUNTER_LOAD)
#undef RECLAIM_GRAPH_COUNTER_LOAD
    if (counters.attached_to_cuda == counters.handed_back_by_cuda + counters.held_by_cuda) break;
  }
  return counters;
}

int note_attach_begin() noexcept {
  g_held_by_cuda.fetch_add(1, std::memory_order_relaxed);
  return reclaim_hand_back_begin();
}

void note_attach_end(bool taken, int ticket) noexcept {
  if (taken) {
    g_attached_to_cuda.fetch_add(1, std::memory_order_relaxed);
  } else {
    g_held_by_cuda.fetch_sub(1, std::memory_order_relaxed);
    reclaim_hand_back_end(ticket, nullptr);
  }
}

void note_handed_back(int ticket, std::atomic<std::uint32_t>* done) noexcept {
  g_handed_back_by_cuda.fetch_add(1, std::memory_order_relaxed);
  g_held_by_cuda.fetch_sub(1, std::memory_order_relaxed);
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "a done cell is a plain word");
  reclaim_hand_back_end(ticket, reinterpret_cast<std::uint32_t*>(done));
}

namespace {
// The top RECLAIM_HAND_BACK_TICKET_BITS bits: 0 for no ticket, else the ticket plus one (a ticket is below
// 2^RECLAIM_HAND_BACK_TICKET_BITS - 1, so the sum fits).
static_assert(sizeof(void*) == 8, "a ticket rides in a 64-bit pointer's top bits");
constexpr int kTicketShift = 64 - RECLAIM_HAND_BACK_TICKET_BITS;
constexpr std::uintptr_t kTicketMask = ~std::uintptr_t{0} << kTicketShift;
// Tickets 0 .. kTickets - 1; kTickets itself and above are no ticket.
constexpr int kTickets = (1 << RECLAIM_HAND_BACK_TICKET_BITS) - 1;
static_assert(kTicketShift >= 48, "a user-space address stays below the ticket bits");
}  // namespace

bool taggable(const void* pointer) noexcept {
  return (reinterpret_cast<std::uintptr_t>(pointer) & kTicketMask) == 0;
}

void* tag(void* pointer, int ticket) noexcept {
  if (!taggable(pointer)) return nullptr;
  const std::uintptr_t bits = ticket >= 0 && ticket < kTickets
                                  ? (static_cast<std::uintptr_t>(ticket) + 1) << kTicketShift
                                  : 0;
  return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(pointer) | bits);
}

Untagged untag(void* tagged) noexcept {
  const std::uintptr_t value = reinterpret_cast<std::uintptr_t>(tagged);
  const int bits = static_cast<int>(value >> kTicketShift);
  return Untagged{reinterpret_cast<void*>(value & ~kTicketMask), bits - 1};
}

std::atomic<std::uint64_t> g_trampolines_entered{0};
std::atomic<std::uint64_t> g_trampolines_left{0};

void note_trampoline_enter() noexcept { g_trampolines_entered.fetch_add(1, std::memory_order_seq_cst); }
void note_trampoline_leave() noexcept { g_trampolines_left.fetch_add(1, std::memory_order_release); }
std::uint64_t trampolines_entered() noexcept { return g_trampolines_entered.load(std::memory_order_seq_cst); }
std::uint64_t trampolines_left() noexcept { return g_trampolines_left.load(std::memory_order_acquire); }

void note_host_call_push() noexcept { g_host_calls.fetch_add(1, std::memory_order_relaxed); }

void note_host_node_push() noexcept { g_host_node_calls.fetch_add(1, std::memory_order_relaxed); }

std::size_t format_report_fields(char* buffer, std::size_t size) noexcept {
  if (buffer == nullptr || size == 0) return 0;
  const GraphCounters counters = graph_counters();
  std::size_t used = 0;
  buffer[0] = '\0';
#define RECLAIM_GRAPH_COUNTER_FORMAT(name, in_report, meaning)                                           \
  if ((in_report) && used < size) {                                                                      \
    const int written = std::snprintf(buffer + used, size - used, " " #name "=%" PRIu64, counters.name); \
    if (written > 0) used += static_cast<std::size_t>(written);                                          \
  }
  RECLAIM_GRAPH_COUNTERS(RECLAIM_GRAPH_COUNTER_FORMAT)
#undef RECLAIM_GRAPH_COUNTER_FORMAT
  return used < size ? used : size - 1;
}

}  // namespace graph
}  // namespace reclaim
