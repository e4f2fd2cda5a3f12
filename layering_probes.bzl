"""layering_probes(): the targets //tests/layering asks Bazel to build, expecting each to be refused."""

load("@rules_cc//cc:defs.bzl", "cc_library")

def layering_probes(dependencies):
    """One `layering_probe_<name>` per (name, dependency) of `dependencies`: a library of this package that
    depends on what the package must not reach. Never built (tags manual); visible to //tests/layering only,
    whose test passes when Bazel refuses the dependency."""
    for name, dependency in dependencies:
        cc_library(
            name = "layering_probe_" + name,
            tags = ["manual"],
            visibility = ["//tests/layering:__pkg__"],
            deps = [dependency],
        )
