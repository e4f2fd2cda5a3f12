#!/usr/bin/env bash
# The release build from a clean tree, for one interpreter: bindings/build_wheels.sh makes the sdist and,
# from it, a wheel compiled by zig against glibc 2.28 in pip's isolated environment (no Bazel, no
# container), which auditwheel must accept as manylinux_2_28 or older. Then the wheel is installed into
# fresh venvs: used there (tests/python/wheel_install_test.sh), and the pytest suite of tests/python runs
# against it, since the shipped module comes from another compiler and C++ runtime than the Bazel builds
# (the suite's test extensions are built by Bazel for the same interpreter). Last, the README's install line,
# example and command, as a user runs them (tests/packaging/readme_test.py: pip's isolated build from a copy
# of the checkout, in a fresh venv).
# Run by tests/run_all.sh (it needs PyPI, so it is not a Bazel test).
# Usage: bash tests/packaging/manylinux_wheel_test.sh PYTHON
set -euo pipefail
cd "$(dirname "$0")/../.."
root="${PWD}"
python="$(command -v "$1")"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
# The oldest glibc the wheels target (docs/packaging.md): RHEL 8 and its rebuilds, as cuda-core.
floor=2.28
older_or_same() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -1)" == "$2" ]; }

# Bounded: the first build also compiles zig's libc++ (minutes); a stuck download must not hang CI.
# Warnings are errors, as in CI's Bazel builds (.bazelrc's --config=strict).
CUDA_RECLAIM_WERROR=1 timeout --kill-after=30 1800 bash bindings/build_wheels.sh --out "${tmp}/dist" --glibc "${floor}" "${python}"
tag="$("${python}" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
ls "${tmp}"/dist/cuda_reclaim-*.tar.gz >/dev/null
wheel="$(ls "${tmp}"/dist/cuda_reclaim-*-"${tag}"-"${tag}"-manylinux_*_x86_64.whl)"
needed="$(basename "${wheel}" | sed -E 's/.*-manylinux_([0-9]+)_([0-9]+)_x86_64\.whl$/\1.\2/')"
if ! older_or_same "${needed}" "${floor}"; then
  echo "${wheel##*/} needs glibc ${needed}, newer than ${floor}: auditwheel show says which symbols" >&2
  exit 1
fi

echo
echo "=== ${wheel##*/}: what auditwheel and the module's dynamic section say"
tools="${root}/build/wheel-tools/bin"
"${tools}/auditwheel" show "${wheel}" | tee "${tmp}/show.txt"
# auditwheel's verdict on the repaired wheel, then the symbol versions themselves (readelf of binutils).
consistent="$(tr '\n' ' ' <"${tmp}/show.txt" | sed -nE 's/.*consistent with the following platform tag: *"manylinux_([0-9]+)_([0-9]+)_x86_64".*/\1.\2/p')"
[[ -n "${consistent}" ]] || { echo "auditwheel show named no manylinux tag" >&2; exit 1; }
older_or_same "${consistent}" "${floor}" || { echo "auditwheel: manylinux_${consistent}, newer than ${floor}" >&2; exit 1; }
mkdir "${tmp}/unpacked"
"${python}" -m zipfile -e "${wheel}" "${tmp}/unpacked"
module="$(ls "${tmp}"/unpacked/cuda_reclaim/_reclaim.*.so)"
newest="$(readelf -W --dyn-syms "${module}" | grep -oE '@GLIBC_[0-9.]+' | sed 's/@GLIBC_//' | sort -V | tail -1)"
echo "newest glibc symbol version: GLIBC_${newest}"
older_or_same "${newest}" "${floor}" || { echo "a symbol needs GLIBC_${newest}, newer than ${floor}" >&2; exit 1; }
# The C++ runtime is inside the module (zig's libc++, static): only glibc's libraries may be needed.
unexpected="$(readelf -d "${module}" | sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p' |
  grep -vE '^(libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|ld-linux-x86-64\.so\.2)$' || true)"
[[ -z "${unexpected}" ]] || { echo "the module needs more than glibc: ${unexpected}" >&2; exit 1; }

echo
echo "=== ${wheel##*/} in a fresh venv"
mkdir "${tmp}/install"
TEST_TMPDIR="${tmp}/install" bash tests/python/wheel_install_test.sh "${python}" "${wheel}"

echo
echo "=== pytest tests/python against ${wheel##*/}"
# The suite's test extensions and helpers, for this interpreter; the package itself from the wheel.
# --config=strict as tests/run_all.sh's runs: their cached objects, not a rebuild without -Werror.
bazel build --color=no --curses=no --config=strict --repo_env=PYTHON_BIN_PATH="${python}" //tests/python:pytest
runfiles="$(readlink -f bazel-bin)/tests/python/pytest.runfiles/cuda_reclaim"
venv="${tmp}/suite-venv"
# --system-site-packages: pytest and the suite's other packages come from the interpreter
# (tests/requirements.txt); pip without an index installs the wheel alone.
"${python}" -m venv --system-site-packages --without-pip "${venv}"
"${python}" -m pip --python "${venv}/bin/python" install --no-index --no-deps --quiet \
  --disable-pip-version-check "${wheel}"
export PYTHONPATH="${runfiles}/tests/python:${runfiles}/bench"
export PYTHONDONTWRITEBYTECODE=1
(cd "${tmp}" && "${venv}/bin/python" - "${module##*/}" <<'PY'
import sys
import cuda_reclaim
from cuda_reclaim import _reclaim
for module in (cuda_reclaim, _reclaim):
    assert module.__file__.startswith(sys.prefix + "/"), f"{module.__name__} from {module.__file__}, not the venv"
assert _reclaim.__file__.endswith("/" + sys.argv[1]), _reclaim.__file__
print(f"installed: {_reclaim.__file__}")
PY
)
cd "${runfiles}"
# The same bound as Bazel's timeout for the suite (size "large").
timeout --kill-after=30 900 "${venv}/bin/python" -m pytest -p no:cacheprovider -q -ra tests/python

echo
echo "=== the README's install line, example and command, in a fresh venv (tests/packaging/readme_test.py)"
cd "${root}"
unset PYTHONPATH
"${python}" tests/packaging/readme_test.py "${python}" "${runfiles}/tests/graph/fake_libcuda.so"
