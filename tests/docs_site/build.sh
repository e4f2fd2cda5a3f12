#!/usr/bin/env bash
# Builds the documentation site (Sphinx with MyST; docs/_site/conf.py) into build/docs-site/html, warnings
# as errors and references nitpicky, then checks it (site_test.py). Open build/docs-site/html/index.html.
# Run by tests/run_all.sh on one interpreter. No Bazel: what autodoc imports is the package installed with
# `pip install .` into a venv of its own (build/docs-site-venv, kept between runs), with
# tests/requirements-docs.txt; both are installed only when something changed (the package: any file the
# pip build reads; the requirements: a pin not met), so a run with nothing new takes seconds.
# Usage: bash tests/docs_site/build.sh [PYTHON]   (default: the newest CPython 3.13 or newer found)
# Needs PyPI the first time (the requirements, and pip's isolated build: setuptools and nvidia-cuda-runtime),
# a C++17 compiler and moodycamel's concurrentqueue.h from the system (README's install).
set -euo pipefail
cd "$(dirname "$0")/../.."
source third_party/pythons.sh
python="${1:-}"
if [[ -z "$python" ]]; then
  for minor in 15 14 13; do
    python="$(find_python "$minor")"
    [[ -n "$python" ]] && break
  done
fi
[[ -n "$python" ]] || { echo "build.sh: no CPython 3.13 or newer found (Sphinx 9.2 needs one)" >&2; exit 1; }
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 13))' ||
  { echo "build.sh: $python is older than 3.13, which Sphinx 9.2 needs" >&2; exit 1; }
out=build/docs-site
venv=build/docs-site-venv

# 1. The venv, made by the interpreter's venv module (again if it is another interpreter's, or has no pip). An
# interpreter without ensurepip (Debian keeps it apart) makes it without pip and installs pip into it with its own.
version() { "$1" -c 'import sys; print(sys.version)'; }
if [[ ! -x "$venv/bin/python" ]] || [[ "$(version "$venv/bin/python")" != "$(version "$python")" ]] ||
  ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  rm -rf "$venv"
  if "$python" -c 'import ensurepip' >/dev/null 2>&1; then
    "$python" -m venv "$venv"
  else
    "$python" -m venv --without-pip "$venv"
    "$python" -m pip --python "$venv/bin/python" install --quiet --disable-pip-version-check pip
  fi
fi
vpython="$PWD/$venv/bin/python"

# 2. Sphinx, MyST, sphobjinv, and what the package's modules import: pip-installed when a pin is not met.
requirements=tests/requirements-docs.txt
if ! "$vpython" - "$requirements" <<'PY' 2>/dev/null; then
import sys
from importlib import metadata
from packaging.requirements import Requirement
lines = [line.split("#", 1)[0].strip() for line in open(sys.argv[1])]
# A missing package raises, an unmet pin exits 1: either way, install.
for requirement in (Requirement(line) for line in lines if line):
    if not requirement.specifier.contains(metadata.version(requirement.name), prereleases=True):
        sys.exit(1)
PY
  echo "build.sh: installing $requirements into $venv"
  "$vpython" -m pip install --quiet --disable-pip-version-check --no-warn-script-location -r "$requirements"
fi

# 3. The package, as the README installs it: `pip install .`, again only when a file it is built from changed
# (a digest of every file git would list under the paths the pip build reads).
digest="$("$vpython" - <<'PY'
import hashlib, os, subprocess
paths = ["setup.py", "pyproject.toml", "README.md", "LICENSE", "bindings", "cleanup", "graph", "include"]
listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *paths],
                        check=True, capture_output=True).stdout.decode().split("\0")
digest = hashlib.sha256()
for path in sorted(p for p in listed if p and os.path.isfile(p)):
    digest.update(path.encode() + b"\0")
    with open(path, "rb") as f:
        digest.update(hashlib.sha256(f.read()).digest())
print(digest.hexdigest())
PY
)"
if [[ "$(cat "$venv/cuda-reclaim.digest" 2>/dev/null)" != "$digest" ]]; then
  echo "build.sh: pip install . into $venv"
  rm -f "$venv/cuda-reclaim.digest"
  "$vpython" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps . ||
    { echo "build.sh: pip install . failed" >&2; exit 1; }
  echo "$digest" >"$venv/cuda-reclaim.digest"
fi

# 4. The site, from a clean output directory (Sphinx repeats no warning of a page it does not read again).
rm -rf "$out"
"$vpython" -m sphinx -b html -W --keep-going -n -q -c docs/_site -d "$out/doctrees" . "$out/html"

# 5. Its checks, against the installed package.
"$vpython" tests/docs_site/site_test.py "$out/html"
echo "build.sh: the site is $out/html/index.html"
