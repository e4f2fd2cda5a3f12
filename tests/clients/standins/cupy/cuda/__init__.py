"""Stand-in for cupy.cuda: ``Stream``, ``ExternalStream``."""

from cupy.cuda.stream import ExternalStream, Stream  # noqa: F401
