#!/usr/bin/env bash
# Smoke test: every benchmark still builds, runs and produces every row of docs/benchmarks.md, with tiny
# sizes (a few seconds). Asserts nothing about speed. Args: <python> <queue_bench> <python_bench>.
set -euo pipefail
python="$1" queue_bench="$2" python_bench="$3"
out="${TEST_TMPDIR:-$(mktemp -d)}"
"${queue_bench}" --quick --benchmark_out="${out}/cpp.json" --benchmark_out_format=json >/dev/null
"${python_bench}" --quick --json "${out}/python.json"
"${python}" bench/make_report.py --python "${out}/python.json" --cpp "${out}/cpp.json" --check
