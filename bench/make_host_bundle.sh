#!/usr/bin/env bash
# Builds the benchmarks here (Bazel, -c opt) for one CPython and copies a self-contained bundle to DEST, so
# that the whole benchmark can run on another Linux x86-64 host that has that CPython but no Bazel (a
# quiet machine, or one with more cores for the producer-scaling rows): queue_bench and the shared
# Google Benchmark library it links, bench_python.py with its extension and the cuda_reclaim package,
# short_lived_threads.py, and run_host_bench.sh, which runs them there.
# Usage: bench/make_host_bundle.sh DEST [PYTHON]      (PYTHON: default the newest 3.12 found)
# Then, on the host:  bash DEST/run_host_bench.sh RESULTS
# and back here:      BENCH_RESULTS=RESULTS bash bench/run_benchmarks.sh
set -euo pipefail
dest="$1"
cd "$(dirname "$0")/.."
source third_party/pythons.sh
python="${2:-$(find_python 12)}"
if [[ -z "${python}" ]]; then
  echo "make_host_bundle.sh: no CPython 3.12 found; pass the interpreter as the second argument" >&2
  exit 1
fi
bazel build -c opt --repo_env=PYTHON_BIN_PATH="${python}" //bench:queue_bench //bench:python_bench
bin="$(bazel info -c opt --repo_env=PYTHON_BIN_PATH="${python}" bazel-bin 2>/dev/null)"
rm -rf "${dest}" && mkdir -p "${dest}/lib" "${dest}/python"
cp "${bin}/bench/queue_bench" bench/run_host_bench.sh "${dest}/"
# The shared libraries of queue_bench that are not part of every Linux system (Google Benchmark).
ldd "${bin}/bench/queue_bench" | awk '/benchmark/ {print $3}' | xargs -r -I{} cp -L {} "${dest}/lib/"
cp -rL "${bin}/bench/python_bench.runfiles/cuda_reclaim/bindings/cuda_reclaim" "${dest}/python/"
cp "${bin}/bench/_reclaim_bench.so" bench/bench_python.py bench/short_lived_threads.py "${dest}/python/"
"${python}" -c 'import sys; print("%d.%d" % sys.version_info[:2])' > "${dest}/python_version"
ls -la "${dest}" "${dest}/lib" "${dest}/python"
