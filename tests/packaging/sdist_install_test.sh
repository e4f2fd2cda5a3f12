#!/usr/bin/env bash
# From source the way a user installs it, without Bazel: builds the sdist from the sources (setup.py,
# pyproject.toml; moodycamel's header and license from third_party/concurrentqueue), checks what it carries,
# pip-installs it into a fresh venv with no `bazel` on PATH, and runs the pytest suite of tests/python
# against the installed package (not the source tree).
# Offline: --no-build-isolation, so the build requirements (setuptools, nvidia-cuda-runtime) come from the
# interpreter (tests/requirements.txt), seen through --system-site-packages with pytest and the suite's
# other packages; pip checks that they satisfy pyproject.toml. bindings/build_wheels.sh makes the same
# build in pip's isolated environment from PyPI (tests/packaging/manylinux_wheel_test.sh).
set -euo pipefail
python="$1"
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
runfiles="${PWD}"
tmp="${TEST_TMPDIR}"
export PYTHONDONTWRITEBYTECODE=1

# PATH without bazel: each PATH folder that holds one is replaced by a folder of links to all else it holds.
clean_path=()
IFS=: read -ra path_dirs <<<"${PATH}"
for dir in "${path_dirs[@]}"; do
  if [[ -e "${dir}/bazel" ]]; then
    shadow="${tmp}/path/${#clean_path[@]}"
    mkdir -p "${shadow}"
    for entry in "${dir}"/*; do
      [[ "$(basename "${entry}")" == bazel* ]] || ln -s "${entry}" "${shadow}/"
    done
    dir="${shadow}"
  fi
  clean_path+=("${dir}")
done
PATH="$(IFS=:; echo "${clean_path[*]}")"
export PATH
if command -v bazel >/dev/null; then
  echo "bazel is still on PATH: $(command -v bazel)" >&2
  exit 1
fi
# Nor a CUDA toolkit: cuda.h must come from the nvidia-cuda-runtime wheel.
unset CUDA_PATH CUDA_HOME

echo "--- python -m build --sdist"
mkdir "${tmp}/src"
cp -rL LICENSE README.md pyproject.toml setup.py abi bindings cleanup graph handback include "${tmp}/src/"
mkdir -p "${tmp}/src/third_party"
cp -rL third_party/concurrentqueue "${tmp}/src/third_party/"
"${python}" -m build --sdist --no-isolation --outdir "${tmp}/dist" "${tmp}/src" >"${tmp}/sdist.log" 2>&1 ||
  { cat "${tmp}/sdist.log"; exit 1; }
sdist="$(ls "${tmp}"/dist/cuda_reclaim-*.tar.gz)"
echo "${sdist##*/}"
"${python}" - "${sdist}" <<'PY'
import sys, tarfile
with tarfile.open(sys.argv[1]) as sdist:
    names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
required = {
    "PKG-INFO", "pyproject.toml", "setup.py", "README.md", "LICENSE",
    "third_party/concurrentqueue/include/concurrentqueue/concurrentqueue.h",
    "third_party/concurrentqueue/LICENSE",
    "bindings/exports.lds", "bindings/reclaim_module.cc", "cleanup/reclaim_queue.cc", "graph/driver.cc",
    "handback/barrier.cc", "abi/reclaim_c_api.cc", "abi/reclaim.h",
    "bindings/cuda_reclaim/__init__.py", "bindings/cuda_reclaim/__init__.pyi", "bindings/cuda_reclaim/py.typed",
    "bindings/cuda_reclaim/c_api.pxd", "bindings/cuda_reclaim/include/cuda_reclaim/cuda_reclaim.h",
    "bindings/cuda_reclaim/integrations/__init__.py", "bindings/cuda_reclaim/integrations/cuda_core.py",
    "include/cuda_reclaim/cuda_reclaim.h", "include/cuda_reclaim/reclaim_abi.h",
}
missing = sorted(required - names)
bazel_files = sorted(n for n in names if n.endswith(("BUILD.bazel", ".bzl")) or n == "WORKSPACE")
assert not missing, f"the sdist lacks {missing}"
assert not bazel_files, f"the sdist carries Bazel files: {bazel_files}"
print(f"sdist ok: {len(names)} entries, moodycamel's header and license bundled")
PY

echo "--- pip install into a fresh venv (no bazel on PATH, no index)"
venv="${tmp}/venv"
# Without pip: a venv's own pip would bring (before 3.12) a setuptools older than the interpreter's. The
# interpreter's pip installs into it (--python) and runs the build with the venv's interpreter.
"${python}" -m venv --system-site-packages --without-pip "${venv}"
"${python}" -m pip --python "${venv}/bin/python" install --no-index --no-deps --no-cache-dir \
  --no-build-isolation --check-build-dependencies --disable-pip-version-check --verbose "${sdist}" \
  >"${tmp}/install.log" 2>&1 || { cat "${tmp}/install.log"; exit 1; }
grep "cuda-reclaim setup.py" "${tmp}/install.log" | sort -u || true

# The suite's own helpers (conftest, the test extension _native_producers) from tests/python; the package
# from the venv. Children started by the tests inherit that sys.path.
export PYTHONPATH="${runfiles}/tests/python:${runfiles}/bench"
cd "${tmp}"
"${venv}/bin/python" - <<'PY'
import importlib.metadata, sys
import cuda_reclaim
from cuda_reclaim import _reclaim
for module in (cuda_reclaim, _reclaim):
    assert module.__file__.startswith(sys.prefix + "/"), f"{module.__name__} from {module.__file__}, not the venv"
assert cuda_reclaim.__version__ == importlib.metadata.version("cuda-reclaim")
print(f"installed: cuda-reclaim {cuda_reclaim.__version__}, {_reclaim.__file__}")
PY

echo "--- pytest tests/python against the installed package"
cd "${runfiles}"
exec "${venv}/bin/python" -m pytest -p no:cacheprovider -q -ra tests/python
