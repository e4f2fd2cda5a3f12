"""The pip build (setup.py) compiles what Bazel compiles into //bindings:cuda_reclaim/_reclaim.so.

Bazel's side comes from a genquery of the extension's dependency closure (extension_targets.xml: every
target with its srcs, hdrs, includes, defines, copts and linkopts) and from .bazelrc; setup.py's side from
its module-level lists, read without running setup(). A source, header, define or flag added to one build
and not to the other fails here, with the list to change.
"""

import os
import re
import runpy
import xml.etree.ElementTree as ElementTree

import pytest

TARGETS_XML = "tests/packaging/extension_targets.xml"
EXTENSION = "//bindings:cuda_reclaim/_reclaim.so"

# Compiled into the extension by Bazel only under --config=tsan (its body is #if __SANITIZE_THREAD__).
SANITIZER_ONLY = {"third_party/concurrentqueue/tsan_suppressions.cc"}
# Other repositories the extension is built from, and how setup.py gets each of them.
EXTERNAL_REPOSITORIES = {
    "@concurrentqueue": "moodycamel's header: the copy in third_party/concurrentqueue (concurrentqueue_include_dir)",
    "@cuda_headers": "cuda.h from the nvidia-cuda-runtime wheel (cuda_include_dir)",
    "@python_headers": "Python.h of the building interpreter (setuptools)",
}
TOOLCHAIN_REPOSITORIES = {"@bazel_tools", "@local_config_cc"}


@pytest.fixture(scope="module")
def setup_py():
    return runpy.run_path("setup.py", run_name="build_drift_test")  # not "__main__": setup() is not run


class BazelTarget:
    def __init__(self, element):
        self.label = element.get("name")
        self.lists = {
            child.get("name"): [item.get("value") for item in child]
            for child in element
            if child.tag == "list"
        }

    @property
    def package(self):
        return self.label[2:].split(":", 1)[0]

    def values(self, attribute):
        return self.lists.get(attribute, [])


def label_path(label):
    """//abi:reclaim.h → abi/reclaim.h"""
    package, name = label[2:].split(":", 1)
    return f"{package}/{name}" if package else name


@pytest.fixture(scope="module")
def bazel():
    """The extension's closure: (our targets, the other repositories it reaches)."""
    root = ElementTree.parse(TARGETS_XML).getroot()
    labels = [element.get("name") for element in root if element.get("name")]
    assert EXTENSION in labels, f"{TARGETS_XML} does not hold {EXTENSION}"
    ours = [BazelTarget(element) for element in root if element.tag == "rule" and element.get("name").startswith("//")]
    repositories = {label.split("//", 1)[0] for label in labels if label.startswith("@")}
    return ours, repositories - TOOLCHAIN_REPOSITORIES


def files(targets, attributes, suffixes):
    return sorted(
        {
            label_path(label)
            for target in targets
            for attribute in attributes
            for label in target.values(attribute)
            if label.startswith("//") and label.endswith(suffixes)
        }
    )


def test_same_sources(bazel, setup_py):
    ours, _ = bazel
    bazel_sources = [path for path in files(ours, ["srcs"], (".c", ".cc", ".cpp")) if path not in SANITIZER_ONLY]
    assert sorted(setup_py["EXTENSION_SOURCES"]) == bazel_sources, (
        "setup.py's EXTENSION_SOURCES must list the sources Bazel compiles into the extension"
    )


def test_same_headers(bazel, setup_py):
    ours, _ = bazel
    assert sorted(setup_py["EXTENSION_HEADERS"]) == files(ours, ["srcs", "hdrs"], (".h", ".hpp")), (
        "setup.py's EXTENSION_HEADERS (shipped in the sdist) must list the headers of Bazel's targets"
    )


def test_same_include_paths(bazel, setup_py):
    ours, _ = bazel
    bazel_includes = {"."} | {
        os.path.normpath(os.path.join(target.package, include))
        for target in ours
        for include in target.values("includes")
    }
    assert set(setup_py["INCLUDE_DIRS"]) == bazel_includes


def test_same_defines_and_compile_flags(bazel, setup_py):
    ours, _ = bazel
    bazel_defines = sorted(d for target in ours for d in target.values("defines") + target.values("local_defines"))
    setup_defines = sorted(name if value is None else f"{name}={value}" for name, value in setup_py["DEFINE_MACROS"])
    assert setup_defines == bazel_defines, "setup.py's DEFINE_MACROS must match the targets' defines"
    compiled = [
        target for target in ours if set(files([target], ["srcs"], (".c", ".cc", ".cpp"))) - SANITIZER_ONLY
    ]
    assert compiled, "no target of the extension's closure compiles a source: has the query changed?"
    copts = {target.label: target.values("copts") for target in compiled}
    expected = setup_py["LIBRARY_COMPILE_FLAGS"]
    assert all(options == expected for options in copts.values()), (
        f"every target that compiles part of the extension uses setup.py's LIBRARY_COMPILE_FLAGS {expected}: {copts}"
    )


def test_same_cxx_flags_as_bazelrc(setup_py):
    # Unconditional C/C++ flags only ("build --cxxopt=..."); "build:tsan ..." configs are Bazel's own.
    flags = []
    for line in open(".bazelrc"):
        words = line.split("#", 1)[0].split()
        if words and words[0] == "build":
            flags += [re.sub(r"^--c(xx)?opt=", "", word) for word in words[1:] if re.match(r"^--c(xx)?opt=", word)]
    assert flags, ".bazelrc gives no --cxxopt at all: has it moved?"
    assert setup_py["CXX_FLAGS"] == flags


def strict_per_file_copts():
    """.bazelrc's `build:strict --per_file_copt=FILTERS@OPTIONS`: [(filters, options)]."""
    found = []
    for line in open(".bazelrc"):
        words = line.split("#", 1)[0].split()
        if words and words[0] == "build:strict":
            for word in words[1:]:
                if word.startswith("--per_file_copt="):
                    filters, options = word.split("=", 1)[1].rsplit("@", 1)
                    found.append((filters.split(","), options.split(",")))
    return found


def strict_options(per_file, path):
    """The options --per_file_copt adds to the compile of `path` (Bazel's filters: regex, +regex, -regex)."""
    added = []
    for filters, options in per_file:
        included = any(re.search(f.lstrip("+"), path) for f in filters if not f.startswith("-"))
        excluded = any(re.search(f[1:], path) for f in filters if f.startswith("-"))
        if included and not excluded:
            added += options
    return added


def test_strict_config_is_setup_pys_werror(setup_py):
    # CI's two builds of the extension make the same warnings errors: Bazel's --config=strict and the pip
    # build's CUDA_RECLAIM_WERROR=1; and only ours (googletest's and benchmark's sources keep their warnings).
    per_file = strict_per_file_copts()
    assert per_file, ".bazelrc has no `build:strict --per_file_copt`: has it moved?"
    for source in setup_py["EXTENSION_SOURCES"]:
        assert strict_options(per_file, source) == setup_py["WERROR_FLAGS"], source
    for other in ("external/googletest/googletest/src/gtest.cc", "tests/cleanup/trim_test.cc"):
        assert strict_options(per_file, other) == [], other


def test_same_link_flags(bazel, setup_py):
    ours, _ = bazel
    bazel_linkopts = []
    for target in ours:
        inputs = [label_path(label) for label in target.values("additional_linker_inputs")]
        for option in target.values("linkopts"):
            for path in inputs:
                option = option.replace(f"$(location {os.path.basename(path)})", path)
            bazel_linkopts.append(option)
    assert sorted(setup_py["LINK_FLAGS"]) == sorted(bazel_linkopts)
    # The only differences allowed, each with its reason in setup.py.
    assert set(setup_py["PIP_ONLY_LINK_FLAGS"]) <= {"-static-libstdc++", "-Wl,--strip-debug"}


def test_other_repositories_are_the_known_ones(bazel):
    _, repositories = bazel
    assert repositories == set(EXTERNAL_REPOSITORIES), (
        "the extension now builds from other repositories; teach setup.py how to get each of them: "
        f"{sorted(repositories ^ set(EXTERNAL_REPOSITORIES))}"
    )


def test_bundled_moodycamel_headers_are_the_included_ones(setup_py):
    included = set()
    for path in setup_py["EXTENSION_SOURCES"] + setup_py["EXTENSION_HEADERS"]:
        included |= set(re.findall(r'#include\s+[<"]concurrentqueue/([^">]+)[">]', open(path).read()))
    assert included == {os.path.basename(setup_py["BUNDLED_CONCURRENTQUEUE_HEADER"])}


def test_the_bundled_moodycamel_header_is_the_one_bazel_compiles(setup_py):
    # Bazel's @concurrentqueue is the system's (WORKSPACE: CUDA_RECLAIM_CONCURRENTQUEUE_DIR, Debian's by default).
    system = os.path.join(os.environ.get("CUDA_RECLAIM_CONCURRENTQUEUE_DIR", "/usr/include/concurrentqueue"),
                          "concurrentqueue.h")
    with open(setup_py["BUNDLED_CONCURRENTQUEUE_HEADER"], "rb") as bundled, open(system, "rb") as compiled:
        assert bundled.read() == compiled.read(), (
            f"{setup_py['BUNDLED_CONCURRENTQUEUE_HEADER']} differs from {system}: copy it (and its license)"
        )


def test_every_listed_file_exists(setup_py):
    listed = setup_py["EXTENSION_SOURCES"] + setup_py["EXTENSION_HEADERS"] + [setup_py["VERSION_SCRIPT"]]
    assert [path for path in listed if not os.path.isfile(path)] == []
