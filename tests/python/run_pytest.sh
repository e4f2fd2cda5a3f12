#!/usr/bin/env bash
# Runs the pytest suite from Bazel's runfiles tree with the configured interpreter ($1).
set -euo pipefail
python="$1"
shift
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONPATH="${PWD}/bindings:${PWD}/tests/python"
export PYTHONDONTWRITEBYTECODE=1
exec "${python}" -m pytest -p no:cacheprovider -q -ra tests/python "$@"
