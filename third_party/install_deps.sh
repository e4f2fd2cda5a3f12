#!/usr/bin/env bash
# Installs (only if missing) every Debian package the cuda-reclaim Bazel build
# needs. Idempotent: does nothing (no apt-get update) when all are present.
# Target: Debian 12 "bookworm" (Bazel 4.2.3 from bazel-bootstrap, GCC 12).
# Runs as root, or via sudo when not root.
#
# Not installed here: the CUDA toolkit headers (NVIDIA, /usr/local/cuda or
# $CUDA_PATH; see third_party/cuda/cuda_configure.bzl) and any extra Python
# interpreters (pyenv etc.; select one with --repo_env=PYTHON_BIN_PATH=...).
set -euo pipefail

PACKAGES=(
  bazel-bootstrap          # /usr/bin/bazel 4.2.3 (+ /etc/bazel/bazelrc)
  bazel-rules-java         # /usr/share/bazel/rules/java -> @rules_java
  g++                      # C/C++ toolchain auto-configured by Bazel
  libasan8                 # GCC 12 AddressSanitizer/LeakSanitizer runtime (--config=asan)
  libubsan1                # GCC 12 UBSan runtime (--config=ubsan)
  libtsan2                 # GCC 12 ThreadSanitizer runtime (--config=tsan)
  libconcurrentqueue-dev   # /usr/include/concurrentqueue -> @concurrentqueue
  googletest               # /usr/src/googletest sources -> @googletest (built from source)
  libgtest-dev             # GoogleTest headers/libs (Debian packaging companion)
  libbenchmark-dev         # /usr/include/benchmark + libbenchmark{.so,_main.a} -> @benchmark
  python3                  # default interpreter for @python_headers
  python3-dev              # Python.h for the default python3 -> @python_headers
  valgrind                 # callgrind for bench/count_instructions.py (run by //bench:bench_smoke_test)
)

is_installed() {
  dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed'
}

missing=()
for p in "${PACKAGES[@]}"; do
  is_installed "$p" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install_deps.sh: installing: ${missing[*]}"
  if [[ ${EUID:-$(id -u)} -eq 0 ]]; then
    SUDO=()
  elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install_deps.sh: must run as root (or have sudo available)." >&2
    exit 1
  fi
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "install_deps.sh: all ${#PACKAGES[@]} Debian packages already installed."
fi

# Sanity checks (warnings only).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo 'int main() { return 0; }' >"$tmp/t.cc"
for s in address undefined thread; do
  if ! g++ -fsanitize="$s" "$tmp/t.cc" -o "$tmp/t" 2>/dev/null || ! "$tmp/t"; then
    echo "install_deps.sh: WARNING: g++ -fsanitize=$s does not work here." >&2
  fi
done
cuda_include="${CUDA_PATH:-/usr/local/cuda}/include/cuda.h"
if [[ ! -f "$cuda_include" ]]; then
  echo "install_deps.sh: NOTE: $cuda_include not found; targets using" \
       "@cuda_headers will fail to build (set CUDA_PATH / --repo_env=CUDA_PATH)." >&2
fi
