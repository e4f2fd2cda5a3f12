"""Integrations: other libraries' stream and graph callback APIs, re-pointed at cuda-reclaim.

numba-cuda, CuPy and cuda.core run a Python callback with the GIL on CUDA's own thread. Each module here
(:mod:`~cuda_reclaim.integrations.numba_cuda`, :mod:`~cuda_reclaim.integrations.cupy`,
:mod:`~cuda_reclaim.integrations.cuda_core`) has ``install()``, ``uninstall()`` and the context manager
``installed()``: while installed, that library's callback methods hand the call to cuda-reclaim, which runs it in
a drain, never on CUDA's thread. The library's files are not edited: install() sets attributes of its classes
at run time, and uninstall() puts back exactly what was there. Importing this package imports none of those
libraries; install() imports its own (an ImportError names the package when it is missing). Each module's
docstring says what differs from the library's own behaviour. docs/clients.md compares the libraries' own
tests with and without the integrations.
"""

from . import cuda_core, cupy, numba_cuda

__all__ = ["cuda_core", "cupy", "numba_cuda"]
