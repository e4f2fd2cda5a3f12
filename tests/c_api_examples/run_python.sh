#!/usr/bin/env bash
# Runs the configured interpreter ($1) with the remaining arguments from Bazel's runfiles tree.
set -euo pipefail
python="$1"
shift
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONDONTWRITEBYTECODE=1
exec "${python}" "$@"
