#!/usr/bin/env bash
# The one command behind docs/benchmarks.md: builds the benchmarks with Bazel (-c opt), runs the C++ and
# the Python benchmarks for one interpreter, and writes docs/benchmarks.md (+ docs/benchmarks.png when
# matplotlib is installed: pip install -r bench/requirements.txt). About 2-3 minutes.
#
#   bash bench/run_benchmarks.sh                           # default python3
#   PYTHON_BIN_PATH=/path/to/python3.13 bash bench/run_benchmarks.sh
#   BENCH_CAVEAT="..." bash bench/run_benchmarks.sh        # a line quoted in the report (e.g. the load)
#   BENCH_OUT=out/benchmarks.md bash bench/run_benchmarks.sh  # write elsewhere than docs/benchmarks.md
#   BENCH_KEEP_JSON=out/bench bash bench/run_benchmarks.sh    # also keep the raw JSON results there
#   BENCH_RESULTS=dir bash bench/run_benchmarks.sh   # render from a run made elsewhere: the results of
#       bench/run_host_bench.sh (a bundle from bench/make_host_bundle.sh, run on a quiet host or one with
#       16 cores or more); its scaling.json and short_lived_threads.md are kept next to the report
#       (docs/benchmarks-scaling.json, docs/benchmarks-short-lived-threads.md)
# The report also renders the committed results of runs made apart: the GPU sections'
# (docs/benchmarks-gpu*.json) and the drains' instruction counts (docs/benchmarks-instructions.json, from
# `bazel run -c opt //bench:count_instructions -- --json docs/benchmarks-instructions.json`, under valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON_BIN_PATH:-python3}"
python="$("${python}" -c 'import sys; print(sys.executable)')"  # the real interpreter, not a shim
python_name="$("${python}" -c 'import sys; print("python%d.%d" % sys.version_info[:2])')"  # cited in the report
out="${BENCH_OUT:-docs/benchmarks.md}"
plot="${out%.md}.png"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

if [[ -n "${BENCH_RESULTS:-}" ]]; then
  for file in cpp.json python.json; do
    [[ -f "${BENCH_RESULTS}/${file}" ]] || { echo "run_benchmarks.sh: ${BENCH_RESULTS}/${file} is missing" >&2; exit 1; }
  done
  mkdir -p "$(dirname "${out}")"
  if [[ -f "${BENCH_RESULTS}/scaling.json" ]]; then
    # Google Benchmark records the host's name and the binary's path: not part of the result.
    "${python}" - "${BENCH_RESULTS}/scaling.json" "${out%.md}-scaling.json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
for key in ("host_name", "executable"):
    data.get("context", {}).pop(key, None)
json.dump(data, open(sys.argv[2], "w"), indent=1)
PY
  fi
  [[ -f "${BENCH_RESULTS}/short_lived_threads.md" ]] &&
    cp "${BENCH_RESULTS}/short_lived_threads.md" "${out%.md}-short-lived-threads.md"
  "${python}" bench/make_report.py --python "${BENCH_RESULTS}/python.json" --cpp "${BENCH_RESULTS}/cpp.json" \
    --out "${out}" --plot "${plot}" --caveat "${BENCH_CAVEAT:-}" \
    --scaling "${out%.md}-scaling.json" --short-lived "${out%.md}-short-lived-threads.md" \
    --command "bash bench/run_host_bench.sh RESULTS (a bundle of bench/make_host_bundle.sh), then BENCH_RESULTS=RESULTS bash bench/run_benchmarks.sh"
  echo "wrote ${out}" >&2
  exit 0
fi

bazel build -c opt --repo_env=PYTHON_BIN_PATH="${python}" //bench:queue_bench //bench:python_bench
bin="$(bazel info -c opt --repo_env=PYTHON_BIN_PATH="${python}" bazel-bin 2>/dev/null)"

echo "== C++ (Google Benchmark)" >&2
"${bin}/bench/queue_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_out="${work}/cpp.json" --benchmark_out_format=json >&2
echo "== Python (${python})" >&2
"${bin}/bench/python_bench" --json "${work}/python.json"

mkdir -p "$(dirname "${out}")"
"${python}" bench/make_report.py --python "${work}/python.json" --cpp "${work}/cpp.json" \
  --out "${out}" --plot "${plot}" --caveat "${BENCH_CAVEAT:-}" \
  --command "PYTHON_BIN_PATH=${python_name} bash bench/run_benchmarks.sh"
if [[ -n "${BENCH_KEEP_JSON:-}" ]]; then  # keep the raw results, e.g. to re-render the report
  mkdir -p "${BENCH_KEEP_JSON}" && cp "${work}/cpp.json" "${work}/python.json" "${BENCH_KEEP_JSON}/"
fi
echo "wrote ${out}" >&2
