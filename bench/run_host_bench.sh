#!/usr/bin/env bash
# Runs the benchmark from a bundle made by bench/make_host_bundle.sh and writes its raw results to RESULTS
# (default: $OUT when set, else results/ next to this script): cpp.json (queue_bench), scaling.json
# (queue_bench's push with 1, 2, 4, 8 and 16 producers), python.json (bench_python.py) and
# short_lived_threads.md. Render the report from them with BENCH_RESULTS=RESULTS bash bench/run_benchmarks.sh.
# Uses the host's python3 of the version the bundle was built for (PYTHON=... to pick another path).
# BENCH_QUICK=1: tiny sizes, to check the bundle (the numbers mean nothing).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
results="${1:-${OUT:-${here}/results}}"
mkdir -p "${results}"
version="$(cat "${here}/python_version")"
python="${PYTHON:-$(command -v "python${version}" || command -v python3)}"
"${python}" -c "import sys; assert '%d.%d' % sys.version_info[:2] == '${version}', sys.version" || {
  echo "run_host_bench.sh: the bundle was built for Python ${version}; set PYTHON" >&2
  exit 1
}
quick=() short_lived=()
if [[ -n "${BENCH_QUICK:-}" ]]; then quick=(--quick); short_lived=(--threads 2000); fi
export LD_LIBRARY_PATH="${here}/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
export PYTHONPATH="${here}/python" PYTHONDONTWRITEBYTECODE=1
echo "load average before: $(cat /proc/loadavg)"
# The Python benchmark first: the load average it states is then the machine's own, not the trailing
# average of the 16-thread scaling run.
echo "== Python ($("${python}" -V 2>&1))" >&2
"${python}" "${here}/python/bench_python.py" "${quick[@]}" --json "${results}/python.json"
echo "== C++ (Google Benchmark)" >&2
"${here}/queue_bench" "${quick[@]}" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_out="${results}/cpp.json" --benchmark_out_format=json >&2
echo "== C++ producer scaling" >&2
"${here}/queue_bench" "${quick[@]}" --threads=1,2,4,8,16 --benchmark_filter='BM_Push/' --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_out="${results}/scaling.json" \
  --benchmark_out_format=json >&2
echo "== short-lived threads" >&2
"${python}" "${here}/python/short_lived_threads.py" "${short_lived[@]}" > "${results}/short_lived_threads.md"
echo "load average after: $(cat /proc/loadavg)"
