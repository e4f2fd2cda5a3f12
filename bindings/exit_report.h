// bindings/exit_report.h — the one-line counter report written at process exit (CUDA_RECLAIM_REPORT).

#pragma once

#include <Python.h>

namespace reclaim::bindings {

// The values of CUDA_RECLAIM_REPORT that are understood, in words (for error messages and reports).
extern const char kExitReportAccepted[];

// CUDA_RECLAIM_REPORT's text when it is set and not understood (owned by the environment: copy it at
// once), else null. "1", "true", "yes", "on" (any case) ask for the report; unset, "", "0", "false", "no",
// "off" do not; the caller refuses anything else (a typo never silently turns the report off) or reports it.
// Any thread; never touches Python; never blocks or allocates.
const char* exit_report_setting_not_understood() noexcept;

// Applies CUDA_RECLAIM_REPORT (a value not understood leaves the report off) and registers the writer
// that runs at the end of Py_Finalize (once per process).
// Requires an attached thread state (GIL); module init only; never blocks.
void configure_exit_report();

// This exit skips the C exit handlers (an unhandled KeyboardInterrupt makes CPython end by SIGINT right
// after finalizing): write the report at the end of Py_Finalize instead. One report per process either way.
// Any thread; never touches Python; never blocks.
void write_exit_report_at_finalize_instead() noexcept;

}  // namespace reclaim::bindings
