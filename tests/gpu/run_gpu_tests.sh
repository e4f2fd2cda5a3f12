#!/usr/bin/env bash
# Runs the GPU tests (pytest marker `gpu`: test_gpu_graph.py, test_gpu_callbacks.py, test_gpu_hand_back.py),
# the GPU benchmarks and the peers' own callback tests (clients/run_clients.py) on a machine with an NVIDIA
# GPU, from a bundle made by make_bundle.sh: the wheel is installed
# offline (--no-index --no-deps) into a private --target folder, so the machine's own Python, cuda.core,
# cuda.bindings, CuPy, PyTorch, uvloop and pytest are used and nothing else is touched.
#
# Results go to RESULTS (default: $OUT when set, else results/ next to this script):
#   gpu_tests.xml, gpu_tests.json     every test with its outcome and time (JUnit XML, and a JSON summary)
#   gpu_callbacks_bench.json, .txt    bench/gpu_callbacks_bench.py: launch_host_func against CuPy's
#   gpu_graph_bench.json, .txt        bench/gpu_graph_bench.py: graph create/retain/destroy
#   clients/clients.json, .txt        clients/run_clients.py: numba-cuda's, CuPy's and cuda.core's own tests,
#                                     upstream and with cuda_reclaim.integrations (main thread idle and busy)
#   summary.json                      versions, the exit status of each step
# Exit status: 0 when the tests passed, both benchmarks ran and every peer's run ended.
# STEPS picks the steps, in this order (default all): tests, callbacks_bench, graph_bench, clients.
# Usage: [STEPS="clients callbacks_bench"] bash run_gpu_tests.sh [extra pytest args]
#        (PYTHON=... to pick the interpreter)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
results="${RESULTS:-${OUT:-${here}/results}}"
mkdir -p "${results}"
site="$(mktemp -d)/site"
"${python}" --version
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"
"${python}" - <<'PY'
import importlib
for name in ("cuda.core", "cuda.bindings", "cupy", "torch", "uvloop", "pytest"):
    try:
        module = importlib.import_module(name)
        print(f"{name} {getattr(module, '__version__', '?')}")
    except Exception as error:  # noqa: BLE001 - report whatever is missing or broken
        print(f"{name}: not usable ({error!r})")
PY
"${python}" -m pip install --quiet --no-index --no-deps --no-compile --target "${site}" "${here}"/cuda_reclaim-*.whl || exit 1
export PYTHONPATH="${site}:${here}/tests"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
cd "${here}/tests"
"${python}" -c "import cuda_reclaim, sys; from cuda_reclaim import _reclaim; print('cuda_reclaim from', cuda_reclaim.__file__); print('driver:', _reclaim._driver_info())"

steps=" ${STEPS:-tests callbacks_bench graph_bench clients} "
wanted() { [[ "${steps}" == *" $1 "* ]]; }
# -1: the step did not run (not in STEPS).
tests_rc=-1 callbacks_bench_rc=-1 graph_bench_rc=-1 clients_rc=-1

if wanted tests; then
  echo "=== GPU tests"
  "${python}" -m pytest -p no:cacheprovider -m gpu -v -rs -s --durations=10 \
    --junitxml="${results}/gpu_tests.xml" test_gpu_graph.py test_gpu_callbacks.py test_gpu_hand_back.py "$@"
  tests_rc=$?
fi

if wanted callbacks_bench; then
  echo "=== bench/gpu_callbacks_bench.py"
  "${python}" "${here}/bench/gpu_callbacks_bench.py" --json "${results}/gpu_callbacks_bench.json" \
    2>&1 | tee "${results}/gpu_callbacks_bench.txt"
  callbacks_bench_rc=${PIPESTATUS[0]}
fi

if wanted graph_bench; then
  echo "=== bench/gpu_graph_bench.py"
  "${python}" "${here}/bench/gpu_graph_bench.py" --json "${results}/gpu_graph_bench.json" \
    2>&1 | tee "${results}/gpu_graph_bench.txt"
  graph_bench_rc=${PIPESTATUS[0]}
fi

if wanted clients; then
  echo "=== clients/run_clients.py: the peers' own callback tests"
  "${python}" "${here}/clients/run_clients.py" --results "${results}/clients"
  clients_rc=$?
fi

"${python}" - "${results}" "${tests_rc}" "${callbacks_bench_rc}" "${graph_bench_rc}" "${clients_rc}" <<'PY'
import json, os, platform, sys
import xml.etree.ElementTree as ElementTree

results, tests_rc, callbacks_rc, graph_rc, clients_rc = sys.argv[1], *map(int, sys.argv[2:])
tests = []
junit = os.path.join(results, "gpu_tests.xml")
if os.path.exists(junit):
    for case in ElementTree.parse(junit).iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (found.get("message") or "")[:500]
        tests.append({"name": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                      "seconds": float(case.get("time") or 0), "message": message})
counts = {o: sum(t["outcome"] == o for t in tests) for o in ("passed", "failed", "error", "skipped")}
with open(os.path.join(results, "gpu_tests.json"), "w") as f:
    json.dump({"counts": counts, "tests": tests}, f, indent=1)
summary = {"python": platform.python_version(), "tests": counts, "tests_rc": tests_rc,
           "gpu_callbacks_bench_rc": callbacks_rc, "gpu_graph_bench_rc": graph_rc, "clients_rc": clients_rc}
with open(os.path.join(results, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
print("summary:", json.dumps(summary))
PY
for rc in "${tests_rc}" "${callbacks_bench_rc}" "${graph_bench_rc}" "${clients_rc}"; do
  if ((rc > 0)); then exit 1; fi
done
