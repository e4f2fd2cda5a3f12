#!/usr/bin/env bash
# The README's demo command: installs what is missing, builds with Bazel, runs the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash third_party/install_deps.sh >/dev/null
bazel build --color=no --curses=no //examples:reclaim_demo 2>&1 | tail -n 1
echo
./bazel-bin/examples/reclaim_demo
