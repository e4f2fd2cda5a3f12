#!/usr/bin/env bash
# Runs the GPU tests (pytest marker `gpu`) on a machine with an NVIDIA GPU, from a bundle made by
# make_bundle.sh: the wheel is installed offline (--no-index --no-deps) into a private --target folder, so
# the machine's own Python, cuda.core, cuda.bindings and pytest are used and nothing else is touched.
# Usage: bash run_gpu_tests.sh [extra pytest args]     (PYTHON=... to pick the interpreter)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
site="$(mktemp -d)/site"
"${python}" --version
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"
"${python}" -c "import cuda.core, cuda.bindings; print('cuda.core', cuda.core.__version__, '/ cuda.bindings', cuda.bindings.__version__)"
"${python}" -m pip install --quiet --no-index --no-deps --no-compile --target "${site}" "${here}"/cuda_reclaim-*.whl || exit 1
export PYTHONPATH="${site}:${here}/tests"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
cd "${here}/tests"
"${python}" -c "import cuda_reclaim, sys; from cuda_reclaim import _reclaim; print('cuda_reclaim from', cuda_reclaim.__file__); print('driver:', _reclaim._driver_info())"
exec "${python}" -m pytest -p no:cacheprovider -m gpu -v -rs -s --durations=5 test_gpu_graph.py "$@"
