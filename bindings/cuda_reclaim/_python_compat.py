"""The package's uses of CPython private names, kept here so that a change of their meaning fails one test
(tests/python/test_python_compat.py, run on every interpreter of the matrix), and the version-dependent
spelling of public ones.
"""

import ctypes as _ctypes
import gc as _gc
import sys as _sys
import threading as _threading


def register_threading_exit_hook(function):
    """Have ``function()`` called at exit after the main thread has finished and before Python joins the threads
    that are not daemons; hooks run last-registered first. Raises RuntimeError once threading is shutting down.

    ``threading._register_atexit`` is private: no public hook runs between the main thread's end and the join of
    the other threads (``atexit`` runs after it), and a thread that waits for CUDA there would hold the exit.
    """
    _threading._register_atexit(function)  # private: see above


def rlock_is_owned(lock):
    """True when the calling thread holds ``lock`` (a ``threading.RLock``). Any thread; never blocks.

    ``RLock._is_owned`` is private (threading.Condition's own test): a wrapper that records its owner would run
    Python code between the acquire and the with block, where a KeyboardInterrupt leaves the lock held for good.
    """
    return lock._is_owned()  # private: see above


def last_exception():
    """The exception that ended the main program (set as it was printed), or None. Any thread; never blocks.

    ``sys.last_exc`` on 3.12+, ``sys.last_value`` before (deprecated since 3.12)."""
    if _sys.version_info >= (3, 12):
        return getattr(_sys, "last_exc", None)
    return getattr(_sys, "last_value", None)


_type_modified = _ctypes.PYFUNCTYPE(None, _ctypes.py_object)(("PyType_Modified", _ctypes.pythonapi))


def write_type_namespace(cls, name, value, *, delete=False):
    """Sets ``cls.name = value`` (or deletes ``cls.name`` with ``delete``) on a class that refuses setattr (an
    extension type, e.g. a Cython ``cdef class``), then calls ``PyType_Modified`` so that the attribute caches
    of the class and its subclasses see the change. With the GIL; never blocks.

    No public API writes an immutable type's namespace: the dict behind the read-only ``cls.__dict__`` proxy is
    reached as that proxy's one dict referent (``gc.get_referents``), an implementation detail of CPython's
    mappingproxy, and written; ``PyType_Modified`` is public C API, called through ctypes.
    """
    (namespace,) = [referent for referent in _gc.get_referents(cls.__dict__) if isinstance(referent, dict)]
    if delete:
        namespace.pop(name, None)
    else:
        namespace[name] = value
    _type_modified(cls)
