#!/usr/bin/env bash
# Builds the manylinux wheel for one Python here (bindings/build_wheels.sh: pip and setuptools, the wheel a
# package index would get, not Bazel's development wheel) and copies a self-contained GPU-test bundle to
# DEST: that wheel, run_gpu_tests.sh, the pytest files it needs and the GPU benchmarks it runs after them
# (bench/gpu_callbacks_bench.py, bench/gpu_graph_bench.py), and examples/callbacks_asyncio.py, which a GPU
# test runs. Also the runner of the peers' own callback tests (tests/clients/, under clients/) with what it
# runs that the GPU machine has no index to fetch: CuPy's two test files and its LICENSE, unmodified, from
# CuPy's source distribution (pip download), a filecheck wheel (numba-cuda's test support imports it), and,
# when CUDA_CORE_TESTS names a folder holding cuda.core's test_host_callback_contracts.py (and its LICENSE),
# that file. Checks that the wheel's manylinux tag allows the target machine's glibc (default 2.39, Ubuntu
# 24.04).
# Usage: [CUDA_CORE_TESTS=DIR] tests/gpu/make_bundle.sh DEST [PYTHON] [TARGET_GLIBC]
#        (PYTHON: default the newest 3.12 found)
set -euo pipefail
dest="$1"
cd "$(dirname "$0")/../.."
source third_party/pythons.sh
python="${2:-$(find_python 12)}"
target_glibc="${3:-2.39}"
if [[ -z "${python}" ]]; then
  echo "make_bundle.sh: no CPython 3.12 found; pass the interpreter as the second argument" >&2
  exit 1
fi
wheels="$(mktemp -d)"
trap 'rm -rf "${wheels}"' EXIT
bash bindings/build_wheels.sh --out "${wheels}" "${python}"
tag="$("${python}" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
wheel="$(ls "${wheels}"/cuda_reclaim-*-"${tag}"-"${tag}"-manylinux_*_x86_64.whl)"
rm -rf "${dest}" && mkdir -p "${dest}/tests/children" "${dest}/bench" "${dest}/examples"
cp "${wheel}" tests/gpu/run_gpu_tests.sh "${dest}/"
cp tests/python/conftest.py tests/python/test_gpu_graph.py tests/python/test_gpu_callbacks.py \
  tests/python/test_gpu_hand_back.py \
  tests/python/gpu_support.py tests/python/kernels.cu bench/exit_report.py "${dest}/tests/"
cp tests/python/children/exit_with_running_kernel.py "${dest}/tests/children/"
cp tests/python/children/scenario.py "${dest}/tests/children/"
cp bench/gpu_callbacks_bench.py bench/gpu_graph_bench.py "${dest}/bench/"
cp examples/callbacks_asyncio.py "${dest}/examples/"

# The peers' own tests (tests/clients/run_clients.py says how they run).
cupy_version=14.2.0
clients="${dest}/clients"
mkdir -p "${clients}/peers/cupy" "${clients}/wheels"
cp tests/clients/run_clients.py tests/clients/conftest_cuda_core.py tests/clients/make_table.py "${clients}/"
"${python}" -m pip download --quiet --no-deps --only-binary :all: --dest "${clients}/wheels" filecheck
"${python}" -m pip download --quiet --no-deps --no-binary :all: --no-build-isolation --dest "${wheels}" \
  "cupy==${cupy_version}"
"${python}" - "${wheels}/cupy-${cupy_version}.tar.gz" "${clients}/peers/cupy" "${cupy_version}" <<'PY'
import os, sys, tarfile
sdist, out, version = sys.argv[1:]
root = f"cupy-{version}/"
wanted = {"tests/cupy_tests/cuda_tests/test_stream.py", "tests/cupy_tests/cuda_tests/test_graph.py", "LICENSE"}
with tarfile.open(sdist) as archive:
    for name in wanted:
        with archive.extractfile(root + name) as source, open(os.path.join(out, os.path.basename(name)), "wb") as f:
            f.write(source.read())
with open(os.path.join(out, "README.md"), "w") as f:
    f.write(f"test_stream.py and test_graph.py: CuPy's tests/cupy_tests/cuda_tests/, unmodified, from the source\n"
            f"distribution of CuPy {version} (tag v{version}), under CuPy's MIT license (LICENSE).\n")
PY
if [[ -n "${CUDA_CORE_TESTS:-}" ]]; then
  mkdir -p "${clients}/peers/cuda_core"
  cp "${CUDA_CORE_TESTS}"/test_host_callback_contracts.py "${clients}/peers/cuda_core/"
  cp "${CUDA_CORE_TESTS}"/LICENSE* "${CUDA_CORE_TESTS}"/README* "${clients}/peers/cuda_core/" 2>/dev/null || true
fi
"${python}" "${clients}/run_clients.py" --list --peers cupy,cuda.core
# manylinux_2_34_x86_64 → 2.34: the oldest glibc the wheel runs on.
needed="$(basename "${wheel}" | sed -E 's/.*-manylinux_([0-9]+)_([0-9]+)_x86_64\.whl$/\1.\2/')"
echo "the wheel needs glibc ${needed} or newer (target ${target_glibc})"
if [ "$(printf '%s\n%s\n' "${needed}" "${target_glibc}" | sort -V | tail -1)" != "${target_glibc}" ]; then
  echo "the wheel needs glibc ${needed}, newer than the target's glibc ${target_glibc}" >&2
  exit 1
fi
ls -la "${dest}" "${dest}/tests" "${dest}/bench" "${dest}/examples" "${clients}" "${clients}"/peers/*
