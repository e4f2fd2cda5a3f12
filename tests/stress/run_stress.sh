#!/usr/bin/env bash
# Runs the finalizer stress test from Bazel's runfiles tree with the configured interpreter ($1); the
# other arguments go to finalizer_stress.py (--runs, --jobs, --first-seed, --timeout).
set -euo pipefail
python="$1"
shift
# Under `bazel test` TEST_SRCDIR is set; under `bazel run` (the long pass) RUNFILES_DIR is.
cd "${TEST_SRCDIR:-${RUNFILES_DIR:-$0.runfiles}}/${TEST_WORKSPACE:-cuda_reclaim}"
export PYTHONPATH="${PWD}/bindings:${PWD}/tests/python"
export PYTHONDONTWRITEBYTECODE=1
exec "${python}" tests/stress/finalizer_stress.py "$@"
