"""Stand-in for cupy: ``cupy.cuda``."""

from cupy import cuda  # noqa: F401
