#!/usr/bin/env bash
# The README's demo command: installs what is missing (Debian packages), builds with Bazel for the
# default python3, and runs the shutdown comparison (docs/shutdown.md): native threads fire destructors
# through interpreter shutdown under five strategies — A/B/C (`with gil`, gated variants), D (coalesced
# Py_AddPendingCall, cuda.core's design) and R (cuda-reclaim) — and a strategy × outcome table is printed.
# About a minute; no GPU needed. Extra arguments go to examples/shutdown_demo.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bash third_party/install_deps.sh >/dev/null
echo "building (Bazel, offline)..."
bazel build --color=no --curses=no //examples:shutdown_demo //examples:reclaim_demo 2>&1 | tail -n 1
echo
exec ./bazel-bin/examples/shutdown_demo "$@"
