#!/usr/bin/env bash
# Runs the finalizer stress test from Bazel's runfiles tree with the configured interpreter ($1); the
# other arguments go to finalizer_stress.py (--runs, --jobs, --first-seed, --timeout).
set -euo pipefail
python="$1"
shift
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONPATH="${PWD}/bindings:${PWD}/tests/python"
export PYTHONDONTWRITEBYTECODE=1
exec "${python}" tests/stress/finalizer_stress.py "$@"
