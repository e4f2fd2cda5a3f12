#!/usr/bin/env bash
# Builds the consumers the way third-party projects do, against the wheel installed offline into a fresh
# venv, then runs test_consumers.py there:
#   (a) c_consumer.cc      one g++ call: -I<cuda_reclaim.get_include()> -I<sysconfig include>
#   (b) cython_consumer    setup.py build_ext (setuptools + cythonize, .pxd found on sys.path)
#   (c) _bazel_consumer.so built by Bazel (links //abi), passed in as $3
# The venv sees the interpreter's own site-packages (--system-site-packages) for setuptools, Cython and
# pytest, installed up front from tests/requirements.txt: nothing is downloaded here.
set -euo pipefail
python="$1"
wheel="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
bazel_consumer="$(cd "$(dirname "$3")" && pwd)/$(basename "$3")"
exit_report="$4"  # bench/exit_report.py: the exit report's parser
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

venv="${TEST_TMPDIR}/venv"
build="${TEST_TMPDIR}/build"
"${python}" -m venv --without-pip --system-site-packages "${venv}"
vpython="${venv}/bin/python"
"${vpython}" -m pip install --no-index --no-deps --quiet --disable-pip-version-check "${wheel}"
mkdir -p "${build}"
cp "${here}/c_consumer.cc" "${here}/cython_consumer.pyx" "${here}/setup.py" "${here}/test_consumers.py" \
  "${here}/close_then_push.py" "${exit_report}" "${build}/"
cp "${bazel_consumer}" "${build}/_bazel_consumer.so"
cd "${build}"

# (a) as a Makefile would do it.
include="$("${vpython}" -c 'import cuda_reclaim; print(cuda_reclaim.get_include())')"
pyinclude="$("${vpython}" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
suffix="$("${vpython}" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
g++ -std=c++17 -O2 -Wall -Werror -fPIC -shared -pthread -I"${include}" -I"${pyinclude}" \
  c_consumer.cc -o "c_consumer${suffix}"

# (b) as a setuptools project would do it.
"${vpython}" setup.py --quiet build_ext --inplace --build-temp "${build}/tmp" >"${build}/cython.log" 2>&1 ||
  { cat "${build}/cython.log"; exit 1; }

export PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="${build}"
exec "${vpython}" -m pytest -p no:cacheprovider -q -ra test_consumers.py
