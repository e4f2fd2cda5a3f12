#!/usr/bin/env bash
# Smoke test: every benchmark still builds, runs and produces every row of docs/benchmarks.md, with tiny
# sizes (a few seconds; the instruction count, under valgrind where it is installed, about a minute).
# Asserts nothing about speed. Args: <python> <queue_bench> <python_bench> <count_instructions>
# <hand_back_bench>.
set -euo pipefail
python="$1" queue_bench="$2" python_bench="$3" count_instructions="$4" hand_back_bench="$5"
out="${TEST_TMPDIR:-$(mktemp -d)}"
"${queue_bench}" --quick --benchmark_out="${out}/cpp.json" --benchmark_out_format=json >/dev/null
"${hand_back_bench}" --quick >/dev/null
"${python_bench}" --quick --json "${out}/python.json"
"${count_instructions}" --n 2000 --json "${out}/instructions.json"
"${python}" bench/make_report.py --python "${out}/python.json" --cpp "${out}/cpp.json" \
  --instructions "${out}/instructions.json" --check
