#!/usr/bin/env bash
# Installs the wheel built for this interpreter into a fresh venv with no index (offline), then imports
# it there and runs a round trip; the extension must be the wheel's, not the source tree's.
set -euo pipefail
python="$1"
wheel="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
venv="${TEST_TMPDIR}/venv"
"${python}" -m venv --without-pip "${venv}"
"${python}" -m pip --python "${venv}/bin/python" install --no-index --no-deps --quiet "${wheel}" 2>/dev/null ||
  { "${python}" -m venv "${venv}" && "${venv}/bin/python" -m pip install --no-index --no-deps --quiet "${wheel}"; }
cd "${TEST_TMPDIR}"
"${venv}/bin/python" - <<'PY'
import os, sys, weakref
import cuda_reclaim
from cuda_reclaim import _reclaim
assert sys.prefix != sys.base_prefix, "running inside the venv"
assert _reclaim.__file__.startswith(sys.prefix), _reclaim.__file__
assert os.path.isfile(os.path.join(cuda_reclaim.get_include(), "cuda_reclaim", "cuda_reclaim.h"))
cuda_reclaim.set_auto_drain("off")
class P: pass
p = P(); r = weakref.ref(p)
cuda_reclaim.defer_release(p); del p
assert cuda_reclaim.drain() == 1 and r() is None
s = cuda_reclaim.stats()
assert s["handed_over"] == s["released"] == 1, s
# The pytest plugin's entry point (pytest itself is not in this venv: the suite's runs load it).
from importlib import metadata
plugins = [(p.name, p.value) for p in metadata.distribution("cuda-reclaim").entry_points if p.group == "pytest11"]
assert sorted(plugins) == [("cuda_reclaim", "_cuda_reclaim_pytest"),
                           ("cuda_reclaim_marker", "_cuda_reclaim_pytest:marker_plugin")], plugins
print("wheel ok:", os.path.basename(_reclaim.__file__))
PY
