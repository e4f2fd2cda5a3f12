#!/usr/bin/env bash
# Assembles CPython 3.MINOR from Debian unstable's binary packages into a private prefix, only when it is
# missing: Debian 12 (glibc 2.36) has no 3.14 or 3.15 package, and unstable's need a newer glibc.
#
#   bash third_party/install_python.sh 15       # → <prefix>/usr/bin/python3.15 (prints its path)
#   bash third_party/install_python.sh 14       # the same for 3.14 (install_python314.sh runs this)
#
# Prefix: <dir>/python3.MINOR, <dir> being $CUDA_RECLAIM_PYTHONS_DIR, default
# ${XDG_CACHE_HOME:-$HOME/.cache}/cuda-reclaim (python_prefix in third_party/pythons.sh, which finds the
# interpreter there).
#
# How, and why this way:
#   1. `apt-get update` + `apt-get download` with apt's own options pointing at a sources list, a state
#      directory, an empty dpkg status and a cache directory of this script's (under <prefix>.apt), so
#      the system's dpkg status, sources, pins and caches are neither used nor written (its apt.conf.d,
#      e.g. a proxy, still applies). Only the packages listed below are fetched; apt checks the suite's
#      signature against the Debian archive keyring.
#   2. `dpkg-deb -x` of each package into a staging copy of the prefix. Unstable's python3.MINOR needs a
#      newer glibc than the host's, so that suite's libc6 and every library the interpreter and its
#      stdlib extension modules load come along.
#   3. The interpreter is pointed at that loader and those libraries with patchelf (also from unstable,
#      run through the private loader since it needs the same glibc): PT_INTERP, and a DT_RPATH
#      (--force-rpath: unlike DT_RUNPATH it also applies to what the stdlib's extension modules load).
#      Nothing needs LD_LIBRARY_PATH, so programs the interpreter starts (compilers, shells) keep the
#      system's libraries.
#   4. Debian's pyconfig.h is a wrapper that includes <MULTIARCH/python3.MINOR/pyconfig.h>, which a Debian
#      system finds in /usr/include; a link <include>/MULTIARCH → ../MULTIARCH lets a build that only
#      has -I<sysconfig include> (setuptools, a Makefile) find it here too.
#   5. The stdlib is byte-compiled (Debian compiles at install time; read-only sandboxes would otherwise
#      recompile it in every process); the staging copy is renamed into place, so a prefix either
#      works or is absent. The EXTERNALLY-MANAGED marker is removed: no dpkg manages this prefix.
#   6. pip from PyPI's pip wheel (these packages have no usable ensurepip: 3.15's looks for wheels in
#      /usr/share/python-wheels, finds the host's old pip there and fails), then tests/requirements.txt
#      (third_party/pythons.sh ensure_requirements).
#
# Idempotent: a working prefix with pip and the requirements is left as it is (no network; delete the
# prefix to take a newer build from Debian). Needs no root. Network: the Debian mirror and PyPI only.
# Environment: CUDA_RECLAIM_PYTHONS_DIR, CUDA_RECLAIM_DEBIAN_MIRROR (default
# http://deb.debian.org/debian), CUDA_RECLAIM_DEBIAN_SUITE (default unstable),
# CUDA_RECLAIM_DEBIAN_KEYRING (default /usr/share/keyrings/debian-archive-keyring.gpg).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "${here}/pythons.sh"

log() { echo "install_python.sh: $*" >&2; }
die() { log "$*"; exit 1; }

minor="${1:-}"
[[ "${minor}" =~ ^1[45]$ ]] || die "usage: install_python.sh MINOR (14 or 15: the versions whose package set is listed here)"
version="3.${minor}"
prefix="$(python_prefix "${minor}")"
mirror="${CUDA_RECLAIM_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
suite="${CUDA_RECLAIM_DEBIAN_SUITE:-unstable}"
keyring="${CUDA_RECLAIM_DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}"

# The interpreter and its headers, then what it and its stdlib extension modules load (ssl, sqlite3,
# ctypes, decimal, lzma, bz2, zstd, curses, readline, uuid, dbm), then patchelf.
PACKAGES=(
  "python${version}" "python${version}-minimal" "python${version}-dev"
  "libpython${version}" "libpython${version}-minimal" "libpython${version}-stdlib" "libpython${version}-dev"
  libc6 libgcc-s1 libstdc++6 libexpat1 zlib1g libffi8 libssl3t64 libbz2-1.0 liblzma5 libzstd1
  libsqlite3-0 libuuid1 libncursesw6 libtinfo6 libreadline8t64
  patchelf
)
# 3.14 links the system's libmpdec (decimal), libcrypt and Berkeley DB (dbm); 3.15 needs none of them.
if [[ "${minor}" == 14 ]]; then PACKAGES+=(libmpdec4 libcrypt1 libdb5.3t64); fi
# Stdlib extension modules that must load (the rest are reported if they cannot).
REQUIRED_MODULES=(ssl sqlite3 ctypes decimal lzma bz2 zlib hashlib pyexpat uuid readline asyncio venv)

python="${prefix}/usr/bin/python${version}"

interpreter_works() {
  # In a subshell whose stderr is discarded: a broken interpreter's crash is not worth a message here.
  ("${python}" -c 'import ssl, sqlite3, ctypes, sys; sys.exit(sys.version_info[:2] != (3, '"${minor}"'))') 2>/dev/null
}

assemble() {
  local staging="${prefix}.partial" aptdir="${prefix}.apt" multiarch loader libdir
  for tool in apt-get dpkg-deb; do
    command -v "$tool" >/dev/null || die "needs $tool (a Debian or Ubuntu host)"
  done
  [[ -r "$keyring" ]] || die "no Debian archive keyring at $keyring (package debian-archive-keyring)"
  local arch
  arch="$(dpkg --print-architecture)"

  log "downloading CPython ${version} from Debian ${suite} (${mirror}) for ${arch}"
  mkdir -p "${aptdir}"/{etc/sources.list.d,etc/preferences.d,state/lists/partial,cache/archives/partial,debs}
  echo "deb [arch=${arch} signed-by=${keyring}] ${mirror} ${suite} main" >"${aptdir}/etc/sources.list"
  : >"${aptdir}/state/status"
  local -a apt_options=(
    -o "Dir::Etc::sourcelist=${aptdir}/etc/sources.list"
    -o "Dir::Etc::sourceparts=${aptdir}/etc/sources.list.d"
    -o "Dir::Etc::preferences=${aptdir}/etc/preferences"
    -o "Dir::Etc::preferencesparts=${aptdir}/etc/preferences.d"
    -o "Dir::State=${aptdir}/state"
    -o "Dir::State::status=${aptdir}/state/status"
    -o "Dir::Cache=${aptdir}/cache"
    -o "APT::Architecture=${arch}"
    -o "APT::Architectures::=${arch}"
    -o "Acquire::Languages=none"
  )
  # As root, apt downloads as the _apt user, which cannot write a cache under $HOME.
  [[ ${EUID:-$(id -u)} -eq 0 ]] && apt_options+=(-o "APT::Sandbox::User=root")
  apt-get "${apt_options[@]}" -q update >"${aptdir}/update.log" 2>&1 ||
    { cat "${aptdir}/update.log" >&2; die "apt-get update of ${suite} failed"; }
  rm -f "${aptdir}"/debs/*.deb
  (cd "${aptdir}/debs" && apt-get "${apt_options[@]}" -q download "${PACKAGES[@]}") \
    >"${aptdir}/download.log" 2>&1 ||
    { cat "${aptdir}/download.log" >&2; die "apt-get download failed"; }

  rm -rf "${staging}"
  mkdir -p "${staging}"
  local deb
  for deb in "${aptdir}"/debs/*.deb; do dpkg-deb -x "$deb" "${staging}"; done

  libdir="$(dirname "$(ls "${staging}"/usr/lib/*/libc.so.6)")"
  multiarch="$(basename "${libdir}")"
  loader="$(basename "$(ls "${libdir}"/ld-linux*.so.*)")"
  [[ -x "${staging}/usr/bin/python${version}" && -e "${libdir}/${loader}" ]] ||
    die "unexpected package layout under ${staging}"

  # Paths as they will be once the staging copy is renamed to ${prefix}. Two calls, the RPATH first:
  # patchelf 0.18 given both at once (or the interpreter first) leaves this non-PIE executable
  # segfaulting at start; the check after the rename catches any other such breakage.
  local -a patchelf=("${libdir}/${loader}" --library-path "${libdir}" "${staging}/usr/bin/patchelf")
  "${patchelf[@]}" --force-rpath --set-rpath "${prefix}/usr/lib/${multiarch}" "${staging}/usr/bin/python${version}"
  "${patchelf[@]}" --set-interpreter "${prefix}/usr/lib/${multiarch}/${loader}" "${staging}/usr/bin/python${version}"

  local include="${staging}/usr/include/python${version}"
  if [[ -d "${staging}/usr/include/${multiarch}/python${version}" && ! -e "${include}/${multiarch}" ]]; then
    ln -s "../${multiarch}" "${include}/${multiarch}"
  fi
  rm -f "${staging}/usr/lib/python${version}/EXTERNALLY-MANAGED"

  rm -rf "${prefix}"
  mv "${staging}" "${prefix}"
  interpreter_works || die "${python} does not run"
  # Best effort: a module that does not compile still runs from source.
  "${python}" -m compileall -q -j 0 "${prefix}/usr/lib/python${version}" >/dev/null || true

  local failed=() module
  for module in "${REQUIRED_MODULES[@]}"; do
    "${python}" -c "import ${module}" 2>/dev/null || failed+=("$module")
  done
  ((${#failed[@]} == 0)) || die "stdlib modules that do not import: ${failed[*]}"
  rm -rf "${aptdir}"  # 30 MB of package lists and .debs
  log "assembled $("${python}" -V) in ${prefix}"
}

bootstrap_pip() {
  local wheeldir
  wheeldir="$(mktemp -d)"
  log "installing pip from PyPI's pip wheel"
  "${python}" - "${wheeldir}" <<'PY'
import hashlib, json, os, sys, urllib.parse, urllib.request
# The newest release's wheel, as PyPI's JSON API lists it (a mirror may give its URL relative to the
# API's), checked against its sha256.
api = "https://pypi.org/pypi/pip/json"
with urllib.request.urlopen(api, timeout=60) as response:
    release = json.load(response)
wheel = next(u for u in release["urls"]
             if u["packagetype"] == "bdist_wheel" and u["filename"].endswith("-py3-none-any.whl"))
with urllib.request.urlopen(urllib.parse.urljoin(api, wheel["url"]), timeout=120) as response:
    data = response.read()
if hashlib.sha256(data).hexdigest() != wheel["digests"]["sha256"]:
    sys.exit("pip wheel: sha256 mismatch")
with open(os.path.join(sys.argv[1], wheel["filename"]), "wb") as out:
    out.write(data)
PY
  local wheel
  wheel="$(ls "${wheeldir}"/pip-*.whl)"
  # A wheel is importable as it is: its own pip installs it (what ensurepip does with its bundled one).
  "${python}" "${wheel}/pip" install --quiet --no-index --disable-pip-version-check \
    --root-user-action=ignore --no-warn-script-location "${wheel}"
  rm -rf "${wheeldir}"
}

# One installer at a time per prefix (two test runs started together).
mkdir -p "$(dirname "${prefix}")"
if command -v flock >/dev/null; then
  exec 9>"${prefix}.lock"
  flock 9
fi

interpreter_works || assemble
"${python}" -m pip --version >/dev/null 2>&1 || bootstrap_pip
ensure_requirements "${python}"
echo "${python}"
