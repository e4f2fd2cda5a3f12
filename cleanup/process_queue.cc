// cleanup/process_queue.cc — the process-wide queue of this copy of cleanup/ (created once, never
// destroyed), its configuration, and the counters' derived forms (the C struct, the report line).

#include "cleanup/process_queue.h"

#include <pthread.h>

#include <atomic>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "cleanup/reclaim_queue.h"

namespace reclaim {

namespace {

ReclaimQueue* create_global_queue() noexcept {
  QueueOptions options;
  if (const char* text = std::getenv("CUDA_RECLAIM_RESERVED_CAPACITY")) {
    // The Python module refuses a bad value with an ImportError before it gets here; a C++ program that
    // links cleanup/ alone gets this note and the default.
    if (!parse_reserved_capacity(text, &options.reserved_capacity)) {
      std::fprintf(stderr,
                   "cuda-reclaim: ignoring CUDA_RECLAIM_RESERVED_CAPACITY=%s (expected an integer from 1 "
                   "to %zu); using %zu\n",
                   text, kMaxReservedCapacity, options.reserved_capacity);
    }
  }
  // Never deleted: pushes from CUDA's thread during exit() must find it alive.
  auto* queue = new (std::nothrow) ReclaimQueue(options);
  if (queue == nullptr) {
    std::fprintf(stderr, "cuda-reclaim: fatal: cannot allocate the process reclaim queue\n");
    std::abort();
  }
  pthread_atfork(nullptr, nullptr, [] { process_queue_of_this_copy().reset_after_fork_in_child(); });
  return queue;
}

}  // namespace

bool parse_reserved_capacity(const char* text, std::size_t* capacity) noexcept {
  if (text == nullptr || capacity == nullptr || *text == '\0') return false;
  std::size_t value = 0;
  for (const char* digit = text; *digit != '\0'; ++digit) {
    if (*digit < '0' || *digit > '9') return false;
    value = value * 10 + static_cast<std::size_t>(*digit - '0');
    if (value > kMaxReservedCapacity) return false;  // checked per digit: no overflow on long inputs
  }
  if (value == 0) return false;
  *capacity = value;
  return true;
}

ReclaimQueue& process_queue_of_this_copy() noexcept {
  static ReclaimQueue* const queue = create_global_queue();
  return *queue;
}

bool CounterSnapshot::conserved() const noexcept {
  const reclaim_stats c = as_c();
  return reclaim_stats_conserved(&c) != 0;
}

reclaim_stats CounterSnapshot::as_c() const noexcept {
  reclaim_stats c;
#define RECLAIM_COPY_FIELD_(name, description) c.name = name;
  RECLAIM_COUNTERS(RECLAIM_COPY_FIELD_)
#undef RECLAIM_COPY_FIELD_
  return c;
}

// CounterSnapshot and reclaim_stats come from one list; this pins that they also share a layout.
#define RECLAIM_SAME_OFFSET_(name, description)                                                  \
  static_assert(offsetof(CounterSnapshot, name) == offsetof(reclaim_stats, name),               \
                "CounterSnapshot and reclaim_stats differ at " #name);
RECLAIM_COUNTERS(RECLAIM_SAME_OFFSET_)
#undef RECLAIM_SAME_OFFSET_
static_assert(sizeof(CounterSnapshot) == sizeof(reclaim_stats), "CounterSnapshot mirrors reclaim_stats");

namespace {

// The report hook (set_report_fields): a plain function pointer in zero-initialized static storage, valid
// from load to exit (the report is written from the loader's fini pass).
std::atomic<ReportFieldsFn> g_report_fields{nullptr};

}  // namespace

void set_report_fields(ReportFieldsFn fields) noexcept {
  g_report_fields.store(fields, std::memory_order_release);
}

std::size_t format_report(const CounterSnapshot& c, char* buffer, std::size_t size) noexcept {
  if (buffer == nullptr || size == 0) return 0;
  char extra[256] = "";
  if (ReportFieldsFn fields = g_report_fields.load(std::memory_order_acquire)) {
    const std::size_t length = fields(extra, sizeof extra);
    extra[length < sizeof extra ? length : sizeof extra - 1] = '\0';
  }
  std::size_t used = 0;
  // Appends with snprintf's truncation; `used` stops growing once the buffer is full.
  auto append = [&](const char* format, auto... values) {
    if (used + 1 >= size) return;
    const int written = std::snprintf(buffer + used, size - used, format, values...);
    if (written > 0) used += static_cast<std::size_t>(written) < size - used ? written : size - used - 1;
  };
  append("cuda-reclaim:");
#define RECLAIM_REPORT_FIELD_(name, description) append(" %s=%" PRIu64, #name, c.name);
  RECLAIM_COUNTERS(RECLAIM_REPORT_FIELD_)
#undef RECLAIM_REPORT_FIELD_
  append("%s", extra);
  append(" conserved=%s\n", c.conserved() ? "yes" : "no");
  return used;
}

}  // namespace reclaim
