// cleanup/queue_report.cc — the one-line counter report (format_report) and the hook through which a
// layer above adds its own fields (set_report_fields).

#include <atomic>
#include <cinttypes>
#include <cstdarg>
#include <cstddef>
#include <cstdio>

#include "cleanup/reclaim_queue.h"

namespace reclaim {

namespace {

// The report hook (set_report_fields): a plain function pointer in zero-initialized static storage, valid
// from load to exit (the report is written from the loader's fini pass).
std::atomic<ReportFieldsFn> g_report_fields{nullptr};

// Appends with snprintf's truncation; `used` stops growing once the buffer is full.
struct ReportWriter {
  char* buffer;
  std::size_t size;
  std::size_t used;

  // printf's attribute: every call's format is checked against its arguments, so vsnprintf's is safe.
  __attribute__((format(printf, 2, 3))) void operator()(const char* format, ...) noexcept {
    if (used + 1 >= size) return;
    va_list values;
    va_start(values, format);
    const int written = std::vsnprintf(buffer + used, size - used, format, values);
    va_end(values);
    if (written > 0) used += static_cast<std::size_t>(written) < size - used ? written : size - used - 1;
  }
};

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
  ReportWriter append{buffer, size, 0};
  append("cuda-reclaim:");
#define RECLAIM_REPORT_FIELD_(name, description) append(" %s=%" PRIu64, #name, c.name);
  RECLAIM_COUNTERS(RECLAIM_REPORT_FIELD_)
#undef RECLAIM_REPORT_FIELD_
  append("%s", extra);
  append(" conserved=%s\n", c.conserved() ? "yes" : "no");
  return append.used;
}

}  // namespace reclaim
