#!/usr/bin/env bash
# Sourced by tests/run_all.sh and examples/run_demo.sh: finds CPython interpreters and installs the
# Python-side test requirements (tests/requirements.txt) into them from PyPI, only when missing.

# python_prefix MINOR → the private prefix where `third_party/install_python.sh MINOR` puts CPython
# 3.MINOR (Debian's packages unpacked; the interpreter is <prefix>/usr/bin/python3.MINOR): one folder per
# version under $CUDA_RECLAIM_PYTHONS_DIR. Only 3.14 and 3.15 are installed there.
python_prefix() {
  echo "${CUDA_RECLAIM_PYTHONS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cuda-reclaim}/python3.$1"
}

# PRIVATE_PYTHON_MINORS: the versions find_or_install_python may assemble with install_python.sh.
PRIVATE_PYTHON_MINORS=(14 15)

# find_or_install_python MINOR → find_python, then, for a version Debian 12 lacks, the interpreter
# install_python.sh assembles (its messages go to stderr); prints nothing if neither gives one.
find_or_install_python() {
  local minor="$1" python
  python="$(find_python "$minor")"
  if [[ -z "$python" && " ${PRIVATE_PYTHON_MINORS[*]} " == *" $minor "* ]] &&
    bash "$(dirname "${BASH_SOURCE[0]}")/install_python.sh" "$minor" >&2; then
    python="$(find_python "$minor")"
  fi
  echo "$python"
}

# find_python MINOR → prints the newest interpreter for 3.MINOR with C headers, or nothing.
# Looks in pyenv's versions, then on PATH (python3.MINOR), then in python_prefix MINOR.
find_python() {
  local minor="$1" candidate root
  local -a candidates=()
  root="${PYENV_ROOT:-$HOME/.pyenv}"
  if command -v pyenv >/dev/null 2>&1; then root="$(pyenv root)"; fi
  if [[ -d "$root/versions" ]]; then
    while IFS= read -r candidate; do candidates+=("$candidate"); done < <(
      ls -d "$root"/versions/3."$minor".*/bin/python3."$minor" 2>/dev/null | sort -t. -k3 -n -r)
  fi
  candidate="$(command -v "python3.$minor" 2>/dev/null || true)"
  [[ -n "$candidate" ]] && candidates+=("$(readlink -f "$candidate")")
  candidates+=("$(python_prefix "$minor")/usr/bin/python3.$minor")
  for candidate in "${candidates[@]}"; do
    if [[ -x "$candidate" ]] && "$candidate" -c \
      'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
      2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  return 0
}

# ensure_requirements PYTHON → pip-installs tests/requirements.txt into PYTHON if anything is missing or
# outside the versions it asks for.
ensure_requirements() {
  local python="$1" requirements
  requirements="$(dirname "${BASH_SOURCE[0]}")/../tests/requirements.txt"
  if ! "$python" - "$requirements" <<'PY' 2>/dev/null; then
import sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:
    Requirement = None
missing = []
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    name = Requirement(line).name if Requirement else line.split(";")[0].split("=")[0].split(">")[0].split("<")[0].strip()
    marker_ok = True
    if Requirement and Requirement(line).marker is not None:
        marker_ok = Requirement(line).marker.evaluate()
    if not marker_ok:
        continue
    try:
        installed = metadata.version(name)
    except metadata.PackageNotFoundError:
        missing.append(name)
        continue
    if Requirement and not Requirement(line).specifier.contains(installed, prereleases=True):
        missing.append(f"{name} (have {installed})")
sys.exit(1 if missing else 0)
PY
    echo "pythons.sh: installing tests/requirements.txt into $python"
    "$python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
      -r "$requirements" 2>/dev/null ||
      "$python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
  fi
}
