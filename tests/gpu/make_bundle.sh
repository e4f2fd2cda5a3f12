#!/usr/bin/env bash
# Builds the wheel for one Python here (Bazel) and copies a self-contained GPU-test bundle to DEST:
# the wheel, run_gpu_tests.sh and the pytest files it needs. Checks the extension's glibc symbol versions
# against the target machine's glibc (default 2.39, Ubuntu 24.04).
# Usage: tests/gpu/make_bundle.sh DEST [PYTHON_BIN_PATH] [TARGET_GLIBC]
set -euo pipefail
dest="$1"
python="${2:-/root/.pyenv/versions/3.12.1/bin/python3}"
target_glibc="${3:-2.39}"
cd "$(dirname "$0")/../.."
bazel build //bindings:wheel --repo_env=PYTHON_BIN_PATH="${python}"
version="$("${python}" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')"
wheel="$(ls bazel-bin/bindings/cuda_reclaim-*-cp${version}-*.whl)"
rm -rf "${dest}" && mkdir -p "${dest}/tests"
cp "${wheel}" tests/gpu/run_gpu_tests.sh "${dest}/"
cp tests/python/conftest.py tests/python/test_gpu_graph.py "${dest}/tests/"
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
