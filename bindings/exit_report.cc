// bindings/exit_report.cc — see exit_report.h. The report line's format is the one of
// reclaim::format_report (cleanup/reclaim_queue.h), documented in docs/design.md.

#include <Python.h>

#include "bindings/exit_report.h"

#include <strings.h>

#include <atomic>
#include <cstdlib>
#include <initializer_list>

#include "bindings/drain.h"
#include "abi/reclaim.h"

namespace reclaim::bindings {
namespace {

// Set once at import from CUDA_RECLAIM_REPORT; read at process exit.
std::atomic<bool> g_requested{false};
// Exchanged by whichever exit path writes the report first: one report per process.
std::atomic<bool> g_written{false};
// Set by write_exit_report_at_finalize_instead().
std::atomic<bool> g_at_finalize{false};

void write_once() {
  if (g_requested.load() && !g_written.exchange(true)) (void)reclaim_write_report(2);
}

// Normally the report is written from the loader's fini pass (after atexit handlers and after
// Py_Finalize; libcuda is loaded after this module, so after CUDA's own teardown has fired its
// destructors): so the line includes leaks after finalization. Only the C side is touched here.
__attribute__((destructor)) void write_at_process_exit() { write_once(); }

// The last step of Py_Finalize (Py_AtExit). The atexit hook closed the queue long before, unless it did
// not get to (a Ctrl-C while it waited for the drain thread, or a first import from inside another atexit
// hook, whose own hook then never runs): closed here without releasing (no Python any more), so that
// CUDA's later hand-overs count as leaked rather than pending. Then writes the report, only on exits that
// skip the fini pass.
void write_at_finalize() {
  close_without_release_if_open();
  if (g_at_finalize.load()) write_once();
}

// 1 on, 0 off, -1 not understood.
int parse_setting(const char* text) noexcept {
  for (const char* word : {"1", "true", "yes", "on"}) {
    if (strcasecmp(text, word) == 0) return 1;
  }
  for (const char* word : {"", "0", "false", "no", "off"}) {
    if (strcasecmp(text, word) == 0) return 0;
  }
  return -1;
}

}  // namespace

const char kExitReportAccepted[] =
    "1, true, yes or on (write the exit report); unset, empty, 0, false, no or off (do not)";

const char* exit_report_setting_not_understood() noexcept {
  const char* text = std::getenv("CUDA_RECLAIM_REPORT");
  return text != nullptr && parse_setting(text) < 0 ? text : nullptr;
}

void configure_exit_report() {
  const char* text = std::getenv("CUDA_RECLAIM_REPORT");
  g_requested.store(text != nullptr && parse_setting(text) == 1);
  static bool registered = false;  // module init runs with the GIL: no race
  if (!registered) registered = Py_AtExit(write_at_finalize) == 0;
}

void write_exit_report_at_finalize_instead() noexcept { g_at_finalize.store(true); }

}  // namespace reclaim::bindings
