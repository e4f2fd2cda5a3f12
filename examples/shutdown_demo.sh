#!/usr/bin/env bash
# Runs examples/shutdown_demo.py with the configured interpreter from this target's runfiles tree, so
# both `bazel run //examples:shutdown_demo` and `bazel-bin/examples/shutdown_demo` work.
set -euo pipefail
if [[ -d "$0.runfiles" ]]; then runfiles="$0.runfiles"; else runfiles="${RUNFILES_DIR:?no runfiles}"; fi
root="${runfiles}/cuda_reclaim"
export PYTHONPATH="${root}/bindings:${root}/tests/shutdown"
export PYTHONDONTWRITEBYTECODE=1
exec "${runfiles}/python_headers/python_bin" "${root}/examples/shutdown_demo.py" "$@"
