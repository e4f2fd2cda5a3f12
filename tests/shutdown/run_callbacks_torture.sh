#!/usr/bin/env bash
# Runs the callbacks torture from Bazel's runfiles tree (test or `bazel run`) with the configured
# interpreter ($1); the other arguments go to callbacks_torture.py.
set -euo pipefail
python="$1"
shift
root="${TEST_SRCDIR:-${RUNFILES_DIR:-$0.runfiles}}/${TEST_WORKSPACE:-__main__}"
export PYTHONPATH="${root}/bindings:${root}/tests/shutdown"
export PYTHONDONTWRITEBYTECODE=1
exec "${python}" "${root}/tests/shutdown/callbacks_torture.py" --fake-libcuda "${root}/tests/graph/fake_libcuda.so" "$@"
