#!/usr/bin/env bash
# Builds the wheel for one Python here (Bazel) and copies a self-contained GPU-test bundle to DEST:
# the wheel, run_gpu_tests.sh and the pytest files it needs. Checks the extension's glibc symbol versions
# against the target machine's glibc (default 2.39).
# Usage: tests/gpu/make_bundle.sh DEST [PYTHON] [TARGET_GLIBC]
#   PYTHON: an interpreter of the target machine's CPython minor version (default: python3 on PATH);
#           `source third_party/pythons.sh; find_python 12` prints an installed 3.12, for example.
set -euo pipefail
dest="$1"
python="$(command -v "${2:-python3}")" || { echo "make_bundle.sh: no interpreter ${2:-python3}" >&2; exit 1; }
target_glibc="${3:-2.39}"
cd "$(dirname "$0")/../.."
bazel build //bindings:wheel --repo_env=PYTHON_BIN_PATH="${python}"
version="$("${python}" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')"
wheel="$(ls bazel-bin/bindings/cuda_reclaim-*-cp"${version}"-*.whl)"
rm -rf "${dest}" && mkdir -p "${dest}/tests/children"
cp "${wheel}" tests/gpu/run_gpu_tests.sh "${dest}/"
cp tests/python/conftest.py tests/python/test_gpu_graph.py tests/python/kernels.cu bench/exit_report.py \
  "${dest}/tests/"
cp tests/python/children/exit_with_running_kernel.py "${dest}/tests/children/"
unpacked="$(mktemp -d)"
(cd "${unpacked}" && "${python}" -m zipfile -e "$(cd - >/dev/null && pwd)/${wheel}" .)
newest="$(objdump -T "${unpacked}"/cuda_reclaim/_reclaim*.so | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
rm -rf "${unpacked}"
echo "newest glibc symbol version needed: ${newest} (target ${target_glibc})"
if [ "$(printf '%s\n%s\n' "${newest#GLIBC_}" "${target_glibc}" | sort -V | tail -1)" != "${target_glibc}" ]; then
  echo "the extension needs ${newest}, newer than the target's glibc ${target_glibc}" >&2
  exit 1
fi
ls -la "${dest}" "${dest}/tests"
