#!/usr/bin/env bash
# The type stubs (bindings/cuda_reclaim/*.pyi, py.typed): mypy --strict on a user's script that uses every
# public name, then mypy.stubtest of the stubs against the package and the built extension module.
# After changing the module's functions, rerun it alone:
#   bazel test //tests/packaging:typing_test --repo_env=PYTHON_BIN_PATH=<python>
set -euo pipefail
python="$1"
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONDONTWRITEBYTECODE=1
# The package as Bazel lays it out: sources, stubs, py.typed and the built _reclaim.so.
export MYPYPATH="${PWD}/bindings" PYTHONPATH="${PWD}/bindings"
cache="${TEST_TMPDIR}/mypy_cache"

echo "--- mypy --strict tests/packaging/typed_usage.py"
"${python}" -m mypy --strict --cache-dir "${cache}" tests/packaging/typed_usage.py

echo "--- mypy.stubtest cuda_reclaim"
# The package and its submodules: _reclaim (the extension), asyncio, and the private .py ones.
"${python}" -m mypy.stubtest cuda_reclaim

echo "--- the stubs of C functions against their docstrings' signatures (stubtest cannot see them)"
"${python}" -m pytest -p no:cacheprovider -q tests/packaging/c_signatures_test.py
