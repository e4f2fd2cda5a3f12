"""What the integrations share: the record of the class attributes one integration sets (install/uninstall)
and of the library's own methods, the import of the library with an ImportError that names the package, and
the report of a callback's exception to ``sys.unraisablehook``."""

import contextlib
import importlib
import threading

from .. import _python_compat

_ABSENT = object()  # the class had no attribute of that name in its own __dict__ (it inherited one, or none)


def import_library(module, function, package, pip_name):
    """``module`` imported, for the public `function` (named in the error); an ImportError that names the
    package and how to install it when it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"{function}: {package} is not installed (pip install {pip_name}): {error}", name=module
        ) from error


def _set(cls, name, value):
    """``cls.name = value``, or ``del cls.name`` for _ABSENT. A class compiled as an extension type (a Cython
    ``cdef class``) refuses setattr: then its namespace is written through _python_compat."""
    try:
        if value is _ABSENT:
            delattr(cls, name)
        else:
            setattr(cls, name, value)
        return
    except TypeError:
        pass  # an immutable type: below
    _python_compat.write_type_namespace(cls, name, value, delete=value is _ABSENT)


@contextlib.contextmanager
def installed_block(install, uninstall):
    """An integration's ``installed()``: ``install()`` for the ``with`` block; on leaving, ``uninstall()`` if
    this block installed it (an install that was in force before the block stays)."""
    mine = install()
    try:
        yield
    finally:
        if mine:
            uninstall()


def call_original(original, instance, *args, **kwargs):
    """The attribute `original` (as found on the class before install()) called as a method of `instance`."""
    return original.__get__(instance, type(instance))(*args, **kwargs)


class Patches:
    """The attributes that one integration sets on its library's classes, what each class held before, and
    the library's own methods. install() and uninstall() are idempotent and safe from any thread (a lock
    orders them).

    The library's own method of a (class, name) is what the class held when install() first set it in this
    process: never one of the integration's replacements, nor a wrapper that someone set over one (and that
    uninstall() left in place), which would lead back to the integration. The replacements reach it through
    :meth:`own`."""

    def __init__(self):
        self._lock = threading.Lock()
        self._saved = None  # [(cls, name, what cls.__dict__ held or _ABSENT, the replacement)] while installed
        self._own = {}  # (cls, name) -> what cls.__dict__ held at the first install (or _ABSENT)

    def is_installed(self):
        return self._saved is not None

    def install(self, targets):
        """Set each (cls, name, replacement) of `targets`; False (and nothing set) if already installed. A
        failure part way puts back what was set before it and raises. What each class holds is read under the
        lock that orders install() and uninstall()."""
        with self._lock:
            if self._saved is not None:
                return False
            saved = []
            try:
                for cls, name, replacement in targets:
                    held = cls.__dict__.get(name, _ABSENT)
                    self._own.setdefault((cls, name), held)
                    _set(cls, name, replacement)
                    saved.append((cls, name, held, replacement))
            except BaseException:
                self._restore(saved)
                raise
            self._saved = saved
            return True

    def own(self, instance_type, name):
        """The library's own attribute `name` for an instance of `instance_type`: that of the first class of its
        MRO that install() patched (what it held then), or inherited from past it. AttributeError if there is
        none. Any thread; takes no lock (the record of a class never changes once made)."""
        mro = instance_type.__mro__
        for index, cls in enumerate(mro):
            if (cls, name) not in self._own:
                continue
            held = self._own[cls, name]
            if held is not _ABSENT:
                return held
            for base in mro[index + 1:]:
                if name in base.__dict__:
                    return base.__dict__[name]
            break
        raise AttributeError(f"{instance_type.__name__} has no own attribute {name!r} recorded by install()")

    def uninstall(self):
        """Put back what each class held; False if not installed. An attribute that someone else replaced
        after install() is left as they set it."""
        with self._lock:
            if self._saved is None:
                return False
            saved, self._saved = self._saved, None
            self._restore(saved)
            return True

    @staticmethod
    def _restore(saved):
        for cls, name, own, replacement in reversed(saved):
            if cls.__dict__.get(name, _ABSENT) is replacement:
                _set(cls, name, own)


def launch_ordered(function, stream, fn, *args):
    """``cuda_reclaim.launch_host_func_ordered(stream, fn, *args)`` for the library's method `function`
    (``"Stream.add_callback"``), which its errors (RuntimeError when no drain would run the call) and the
    warning of a launch after close name. Returns the future."""
    from cuda_reclaim import _graph, _ordered_calls, _reclaim

    handle = _graph.stream_handle(stream, function)
    _ordered_calls.check_a_drain_runs(function)
    future = _graph.launch(function, handle, fn, args, None, ordered=True)
    if future.cancelled() and _reclaim.is_closed():
        _graph.warn_after_close(function, "the call never runs: its future is cancelled")
    return future


class _Unraisable:
    """Raises its exception from __del__: CPython hands it to ``sys.unraisablehook`` (with the arguments type
    only CPython can make), exactly as for an exception a callback on CUDA's thread raises."""

    __slots__ = ("error",)

    def __del__(self):
        error, self.error = self.error, None
        raise error


def report_unraisable(error):
    """Hand `error` to ``sys.unraisablehook``, in the calling thread."""
    carrier = _Unraisable()
    carrier.error = error
    del carrier


def reporting(fn):
    """A call of ``fn(*args, **kwargs)`` that returns its result, and whose exception (any BaseException:
    KeyboardInterrupt and SystemExit too, and a warning raised as an error) goes to ``sys.unraisablehook``
    instead of to its caller (the drain's future, whose result is then None), reported before the call
    returns: a stream-ordered call has reported it before the stream goes on."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BaseException as error:  # noqa: BLE001 - every exception of a callback is reported (as CUDA's libraries)
            report_unraisable(error)

    call.__wrapped__ = fn
    return call
