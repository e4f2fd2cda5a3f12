#!/usr/bin/env bash
# Builds the documentation site (Sphinx with MyST; docs/_site/conf.py) into build/docs-site/html, warnings
# as errors and references nitpicky, offline, then checks it (site_test.py). Open
# build/docs-site/html/index.html. Run by tests/run_all.sh on one interpreter.
# Usage: bash tests/docs_site/build.sh [PYTHON]   (default: the newest CPython 3.13 or newer found)
#   BAZEL: the Bazel command (default `bazel`; startup options may follow, e.g. `bazel --output_base=DIR`).
# Needs what `bash tests/run_all.sh` installs; tests/requirements-docs.txt is pip-installed into PYTHON if
# anything it pins is missing.
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

# 1. Sphinx, MyST, sphobjinv: pip-installed when a pin is not met, as pythons.sh's ensure_requirements does.
requirements=tests/requirements-docs.txt
if ! "$python" - "$requirements" <<'PY' 2>/dev/null; then
import sys
from importlib import metadata
from packaging.requirements import Requirement
lines = [line.split("#", 1)[0].strip() for line in open(sys.argv[1])]
# A missing package raises, an unmet pin exits 1: either way, install.
for requirement in (Requirement(line) for line in lines if line):
    if not requirement.specifier.contains(metadata.version(requirement.name), prereleases=True):
        sys.exit(1)
PY
  echo "build.sh: installing $requirements into $python"
  "$python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --no-warn-script-location -r "$requirements"
fi

# 2. The package autodoc imports: Bazel's wheel for this interpreter, unpacked. `bazel test //...` has built
# it already in tests/run_all.sh (same flags: nothing is compiled again); a pip build from setup.py would
# compile the extension once more on every run.
bazel_flags=(--config=strict --repo_env=PYTHON_BIN_PATH="$python")
${BAZEL:-bazel} build --color=no --curses=no "${bazel_flags[@]}" //bindings:wheel
bin="$(${BAZEL:-bazel} info "${bazel_flags[@]}" bazel-bin 2>/dev/null)"
tag="$("$python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
wheel="$(ls "$bin"/bindings/cuda_reclaim-*-"$tag"-"$tag"-*.whl)"
rm -rf "$out"
mkdir -p "$out/package"
"$python" -m zipfile -e "$wheel" "$out/package"

# 3. The site, from a clean output directory (Sphinx repeats no warning of a page it does not read again).
PYTHONPATH="$PWD/$out/package" "$python" -m sphinx -b html -W --keep-going -n -q \
  -c docs/_site -d "$out/doctrees" . "$out/html"

# 4. Its checks.
PYTHONPATH="$PWD/$out/package" "$python" tests/docs_site/site_test.py "$out/html/objects.inv"
echo "build.sh: the site is $out/html/index.html"
