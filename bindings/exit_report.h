// bindings/exit_report.h — the one-line counter report written at process exit (CUDA_RECLAIM_REPORT).

#pragma once

#include <Python.h>

namespace reclaim::bindings {

// Reads CUDA_RECLAIM_REPORT: "1", "true", "yes", "on" (any case) ask for the report; unset, "", "0",
// "false", "no", "off" do not. Anything else: returns -1 with ImportError set (a typo never silently turns
// the report off). Registers the writer that runs at the end of Py_Finalize (once per process).
// Requires an attached thread state (GIL); module init only.
int configure_exit_report();

// This exit skips the C exit handlers (an unhandled KeyboardInterrupt makes CPython end by SIGINT right
// after finalizing): write the report at the end of Py_Finalize instead. One report per process either way.
// Any thread; never touches Python; never blocks.
void write_exit_report_at_finalize_instead() noexcept;

}  // namespace reclaim::bindings
