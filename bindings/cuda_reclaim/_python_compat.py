"""The package's one use of a CPython private name, kept here so that a change of its meaning fails one test
(tests/python/test_python_compat.py, run on every interpreter of the matrix).
"""

import threading as _threading


def register_threading_exit_hook(function):
    """Have ``function()`` called at exit after the main thread has finished and before Python joins the threads
    that are not daemons; hooks run last-registered first. Raises RuntimeError once threading is shutting down.

    ``threading._register_atexit`` is private: no public hook runs between the main thread's end and the join of
    the other threads (``atexit`` runs after it), and a thread that waits for CUDA there would hold the exit.
    """
    _threading._register_atexit(function)  # private: see above
