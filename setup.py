"""The extension cuda_reclaim._reclaim for setuptools (metadata and packages: pyproject.toml).

It is the module Bazel builds as //bindings:cuda_reclaim/_reclaim.so, from the same sources, headers,
defines and flags, found below (sources by a glob of the layer folders); //tests/packaging:build_drift_test
compares them with what Bazel compiles, so a file one build compiles and the other does not fails the tests.

Two headers come from outside the repository's own code (docs/packaging.md):

- moodycamel's concurrentqueue.h (not on PyPI), with its license, under third_party/concurrentqueue/: a copy
  of Debian's libconcurrentqueue-dev (the one Bazel compiles; //tests/packaging:build_drift_test checks that
  they are the same), so that `pip install .` from a checkout needs nothing but a C++ compiler.
- NVIDIA's cuda.h and cudaTypedefs.h, for driver types and entry-point typedefs only: the extension loads
  the driver at run time and links no CUDA library. They come from the nvidia-cuda-runtime wheel, a build
  requirement in pyproject.toml, so no CUDA toolkit is needed; an offline build (--no-build-isolation)
  without that wheel may point CUDA_PATH (or CUDA_HOME) at a toolkit instead.
"""

import glob
import importlib.util
import os
import shutil
import sys

from setuptools import Extension, setup

ROOT = os.path.dirname(os.path.abspath(__file__))

# --- The extension, as Bazel builds it ---------------------------------------------------------------
# Paths are relative to this directory. Sources and headers: every .cc and .h of the five layer folders
# (each BUILD file globs its folder the same way), less the header of a library the extension does not
# link; plus the installed C API headers of include/. //tests/packaging:build_drift_test compares them with
# Bazel's.
LAYERS = ("abi", "bindings", "cleanup", "graph", "handback")
C_API_HEADERS = ("include/cuda_reclaim/cuda_reclaim.h", "include/cuda_reclaim/reclaim_abi.h")
NOT_IN_EXTENSION = {"bindings/shared_queue.h"}  # //bindings:shared_queue, for other extensions


def layer_files(suffix):
    found = (
        os.path.relpath(path, ROOT) for layer in LAYERS for path in glob.glob(os.path.join(ROOT, layer, "*" + suffix))
    )
    return sorted(path for path in found if path not in NOT_IN_EXTENSION)


EXTENSION_SOURCES = layer_files(".cc")
EXTENSION_HEADERS = [*C_API_HEADERS, *layer_files(".h")]
# Bazel's include paths for them: the workspace root ("abi/reclaim.h") and //include's `includes`
# ("cuda_reclaim/cuda_reclaim.h").
INCLUDE_DIRS = [".", "include"]
# The `defines` and `local_defines` of those targets: none.
DEFINE_MACROS = []
# The C++ flags .bazelrc gives every compile (build --cxxopt=...).
CXX_FLAGS = ["-std=c++17"]
# The `copts` of those targets (library_copts.bzl says why).
LIBRARY_COMPILE_FLAGS = ["-Wall", "-Wextra", "-funroll-loops"]
# CUDA_RECLAIM_WERROR=1 (CI's builds) makes warnings errors, as .bazelrc's --config=strict; off by default,
# so that a user's compiler that warns where CI's does not still builds.
WERROR_FLAGS = ["-Werror"]
# The targets' `linkopts`: //cleanup:queue's -pthread, //graph's -ldl, the extension's version script (it
# exports PyInit__reclaim alone).
VERSION_SCRIPT = "bindings/exports.lds"
LINK_FLAGS = ["-pthread", "-ldl", "-Wl,--version-script=" + VERSION_SCRIPT]
# Only here: libstdc++ linked into the module, so that a wheel runs on any distribution whose glibc is
# new enough, whatever libstdc++ it has (the version script keeps its symbols local to the module); and no
# debug sections (Python's own flags compile with -g): a module of 160 KB instead of 540 KB.
PIP_ONLY_LINK_FLAGS = ["-static-libstdc++", "-Wl,--strip-debug"]

# --- moodycamel's concurrentqueue.h ------------------------------------------------------------------
BUNDLED_CONCURRENTQUEUE = "third_party/concurrentqueue"  # in the repository and the sdist
BUNDLED_CONCURRENTQUEUE_HEADER = BUNDLED_CONCURRENTQUEUE + "/include/concurrentqueue/concurrentqueue.h"
BUNDLED_CONCURRENTQUEUE_LICENSE = BUNDLED_CONCURRENTQUEUE + "/LICENSE"  # pyproject.toml: license-files


def fail(message):
    sys.exit(f"cuda-reclaim setup.py: error: {message}")


def note(message):
    print(f"cuda-reclaim setup.py: {message}", file=sys.stderr)


def concurrentqueue_include_dir():
    """The include directory of the bundled header; fails when the tree lacks it or its license."""
    for path in (BUNDLED_CONCURRENTQUEUE_HEADER, BUNDLED_CONCURRENTQUEUE_LICENSE):
        if not os.path.isfile(os.path.join(ROOT, path)):
            fail(f"{path} is missing: this source tree was not made from the repository or its sdist")
    return BUNDLED_CONCURRENTQUEUE + "/include"


# The installed C API (include/cuda_reclaim/) ships inside the package, as Bazel's //bindings:c_api_in_package
# copies it: staged at a path .gitignore keeps out of git, and only ever copied from include/.
PACKAGE_INCLUDE = "bindings/cuda_reclaim/include/cuda_reclaim"


def stage_c_api_headers():
    os.makedirs(os.path.join(ROOT, PACKAGE_INCLUDE), exist_ok=True)
    for header in C_API_HEADERS:
        shutil.copyfile(os.path.join(ROOT, header), os.path.join(ROOT, PACKAGE_INCLUDE, os.path.basename(header)))


def cuda_include_dir():
    """The directory holding cuda.h and cudaTypedefs.h: the nvidia-cuda-runtime wheel's, or $CUDA_PATH's."""
    candidates = []
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec is not None else []:
        candidates += sorted(glob.glob(os.path.join(base, "cu[0-9]*", "include")), reverse=True)
        candidates.append(os.path.join(base, "cuda_runtime", "include"))  # the CUDA 12 wheel's layout
    for variable in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(variable):
            candidates.append(os.path.join(os.environ[variable], "include"))
    for include in candidates:
        if all(os.path.isfile(os.path.join(include, name)) for name in ("cuda.h", "cudaTypedefs.h")):
            note(f"cuda.h: {include}")
            return include
    fail(
        "cuda.h and cudaTypedefs.h were not found. They come from the nvidia-cuda-runtime wheel, which pip "
        "installs for the build unless --no-build-isolation is given; then install it first "
        "(`pip install 'nvidia-cuda-runtime>=13,<14'`), or set CUDA_PATH to a CUDA toolkit."
    )


def werror_flags():
    werror = os.environ.get("CUDA_RECLAIM_WERROR", "")
    if werror not in ("", "0", "1"):
        fail(f"CUDA_RECLAIM_WERROR is {werror!r}: 1 makes warnings errors, 0 or unset does not")
    if werror == "1":
        note("CUDA_RECLAIM_WERROR=1: warnings are errors")
    return WERROR_FLAGS if werror == "1" else []


def extension():
    return Extension(
        "cuda_reclaim._reclaim",
        sources=EXTENSION_SOURCES,
        depends=EXTENSION_HEADERS + [VERSION_SCRIPT, BUNDLED_CONCURRENTQUEUE_HEADER],
        include_dirs=INCLUDE_DIRS + [concurrentqueue_include_dir(), cuda_include_dir()],
        define_macros=DEFINE_MACROS,
        extra_compile_args=CXX_FLAGS + LIBRARY_COMPILE_FLAGS + werror_flags(),
        extra_link_args=LINK_FLAGS + PIP_ONLY_LINK_FLAGS,
        language="c++",  # link with the C++ driver: -static-libstdc++ needs it
    )


if __name__ == "__main__":
    os.chdir(ROOT)  # the paths above are relative to this directory
    stage_c_api_headers()  # before setup() collects the package's data files
    setup(ext_modules=[extension()])
