"""The version of cuda-reclaim, written here and nowhere else.

Read by the package (``cuda_reclaim.__version__``), by setuptools (``[tool.setuptools.dynamic]`` in
pyproject.toml) and by Bazel (``bindings/version_configure.bzl`` parses this file for the wheel's name
and metadata). Keep it a single ``__version__ = "X.Y.Z"`` line: the Bazel rule reads it as text.
"""

__version__ = "0.1.0"
