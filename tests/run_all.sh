#!/usr/bin/env bash
# Runs every test of cuda-reclaim on a fresh machine of this kind, installing what is missing:
#   1. Debian packages (third_party/install_deps.sh) and, per interpreter, tests/requirements.txt;
#   2. `bazel test --config=strict //...` (warnings in our code are errors) once for every CPython
#      among 3.10–3.15 found (fails if one is missing, unless CUDA_RECLAIM_ALLOW_MISSING_PYTHONS=1),
#      which covers the C++ tests, the pytest suite, the wheel and everything else registered with
#      Bazel; a missing 3.14 or 3.15 is first assembled from Debian's packages by
#      third_party/install_python.sh;
#   3. the C++ tests of cleanup/, handback/ and graph/ again under --config=tsan, asan and ubsan (with strict
#      too);
#   4. the sdist and the zig-built manylinux wheel, and the documentation site (tests/docs_site/build.sh),
#      each on one interpreter.
# Ends with one line "Tests: N passed, N failed" (Bazel test targets, all runs added up).
set -uo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
source third_party/pythons.sh

bash third_party/install_deps.sh || exit 1

pythons=()
missing=()
for minor in 10 11 12 13 14 15; do
  python="$(find_or_install_python "$minor")"
  if [[ -n "$python" ]]; then pythons+=("$python"); else missing+=("3.$minor"); fi
done
if ((${#missing[@]})); then
  echo "run_all.sh: no CPython with headers found for: ${missing[*]} (pyenv or python3.X on PATH)" >&2
  [[ "${CUDA_RECLAIM_ALLOW_MISSING_PYTHONS:-0}" == 1 ]] || exit 1
fi
for python in "${pythons[@]}"; do ensure_requirements "$python" || exit 1; done

log="$(mktemp)"
failures="$(mktemp)"  # each failed target's name and log tail, printed again at the end where CI shows it
trap 'rm -f "$log" "$failures"' EXIT
passed=0
failed=0
status=0
run_bazel_tests() {
  local title="$1"
  shift
  echo
  echo "=== $title"
  bazel test --color=no --curses=no "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local p f failing target dir test_log
  p=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
  failing=$(grep -oE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE)' "$log" | cut -d' ' -f1)
  f=$(grep -c . <<<"$failing")
  passed=$((passed + p))
  failed=$((failed + f))
  for target in $failing; do
    dir="${target#//}"
    dir="${dir/://}"
    {
      echo "--- $target ($title)"
      # bazel-testlogs points at this run's configuration; a sharded or repeated test has several logs.
      find -L "bazel-testlogs/$dir" -name test.log 2>/dev/null | sort | while read -r test_log; do
        echo "$test_log:"
        tail -n 60 "$test_log"
      done
    } >>"$failures"
  done
  if ((rc != 0)); then
    status=1
    ((f == 0)) && failed=$((failed + 1))  # a build failure counts as one failed run
  fi
}

for python in "${pythons[@]}"; do
  run_bazel_tests "bazel test --config=strict //... with $("$python" -V 2>&1) ($python)" \
    --config=strict --repo_env=PYTHON_BIN_PATH="$python" //...
done
for config in tsan asan ubsan; do
  run_bazel_tests "cleanup/, handback/ and graph/ tests under --config=$config --config=strict" \
    --config="$config" --config=strict //tests/cleanup/... //tests/handback/... //tests/graph/...
done

# Packaging: the sdist and a manylinux_2_28 wheel built as a release builds them (pip and PyPI's
# setuptools, compiled by zig, no Bazel), checked by auditwheel, installed into fresh venvs and tested
# with the pytest suite; one interpreter keeps it to about a minute (one more the first time, while zig
# builds its libc++): the newest, the last one `bazel test //...` ran with, so the suite's test
# extensions it needs are already built. Counted as one test below. (The sdist's pytest run, built with
# the system's compiler, is in //tests/packaging on every interpreter.)
if ((${#pythons[@]})); then
  packaging_python="${pythons[-1]}"
  echo
  echo "=== sdist and zig-built manylinux wheel: tests/packaging/manylinux_wheel_test.sh ($packaging_python)"
  if bash tests/packaging/manylinux_wheel_test.sh "$packaging_python"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    status=1
  fi
fi

# The documentation site: Sphinx with MyST, warnings as errors, nitpicky, offline, then its checks
# (tests/docs_site/build.sh). On the newest interpreter of 3.13 or later (Sphinx 9.2 needs one), which also
# gets tests/requirements-docs.txt; `bazel test //...` has built its wheel already, so this takes seconds
# (plus the pip install the first time). Counted as one test below.
docs_python=""
for python in "${pythons[@]}"; do
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 13))' && docs_python="$python"
done
echo
echo "=== documentation site: tests/docs_site/build.sh (${docs_python:-no CPython 3.13 or newer found})"
docs_start=$SECONDS
if [[ -n "$docs_python" ]] && bash tests/docs_site/build.sh "$docs_python"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  status=1
fi
echo "documentation site: $((SECONDS - docs_start)) s"

if [[ -s "$failures" ]]; then
  echo
  echo "=== failed test targets, with the end of each log"
  cat "$failures"
fi
echo
echo "Pythons: ${pythons[*]}"
echo "Tests: $passed passed, $failed failed"
exit "$status"
