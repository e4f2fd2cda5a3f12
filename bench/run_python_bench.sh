#!/usr/bin/env bash
# Runs bench/bench_python.py from Bazel's runfiles with the configured interpreter ($1), as
# tests/python/run_pytest.sh does for pytest: bindings/ (the cuda_reclaim package with its freshly built
# extension) and bench/ (the _reclaim_bench extension) on PYTHONPATH. Other arguments go to the script.
set -euo pipefail
python="$1"
shift
if [[ -n "${TEST_SRCDIR:-}" ]]; then
  root="${TEST_SRCDIR}/${TEST_WORKSPACE}"
else
  root="${RUNFILES_DIR:-$0.runfiles}/cuda_reclaim"
fi
export PYTHONPATH="${root}/bindings:${root}/bench"
export PYTHONDONTWRITEBYTECODE=1
exec "${python}" "${root}/bench/bench_python.py" "$@"
