#!/usr/bin/env bash
# The release build from a clean tree, for one interpreter: bindings/build_wheels.sh makes the sdist and,
# from it, a wheel with PyPI's setuptools in pip's isolated environment (no Bazel), which auditwheel
# must tag manylinux; the wheel is then installed into a fresh venv and used there
# (tests/python/wheel_install_test.sh). Run by tests/run_all.sh (it needs PyPI, so it is not a Bazel test).
# Usage: bash tests/packaging/manylinux_wheel_test.sh PYTHON
set -euo pipefail
cd "$(dirname "$0")/../.."
python="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT

bash bindings/build_wheels.sh --out "${tmp}/dist" "${python}"
tag="$("${python}" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
ls "${tmp}"/dist/cuda_reclaim-*.tar.gz >/dev/null
wheel="$(ls "${tmp}"/dist/cuda_reclaim-*-"${tag}"-"${tag}"-manylinux_*_x86_64.whl)"
# The oldest glibc the wheel runs on (docs/packaging.md): 2.34, where libdl moved into libc.
needed="$(basename "${wheel}" | sed -E 's/.*-manylinux_([0-9]+)_([0-9]+)_x86_64\.whl$/\1.\2/')"
if [ "$(printf '%s\n%s\n' "${needed}" 2.34 | sort -V | tail -1)" != 2.34 ]; then
  echo "${wheel##*/} needs glibc ${needed}, newer than 2.34: auditwheel show says which symbols" >&2
  exit 1
fi
echo
echo "=== ${wheel##*/} in a fresh venv"
mkdir "${tmp}/install"
TEST_TMPDIR="${tmp}/install" bash tests/python/wheel_install_test.sh "${python}" "${wheel}"
