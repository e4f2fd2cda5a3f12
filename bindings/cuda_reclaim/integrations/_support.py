"""What the integrations share: the record of the class attributes one integration sets (install/uninstall)
and of the library's own methods, the import of the library with an ImportError that names the package, and
the report of a callback's exception to ``sys.unraisablehook``."""

import contextlib
import functools
import importlib
import os
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
def installed_block(patches, install):
    """An integration's ``installed()``: the integration is in force inside the ``with`` block. It is put back
    when the last block that is inside its ``with`` leaves, unless :meth:`Patches.install` was called outside a
    block (an explicit install stays until ``uninstall()``)."""
    patches.enter_block(install)
    try:
        yield
    finally:
        patches.leave_block()


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
        self._lock = threading.RLock()  # re-entrant: a block the gc ends inside install() leaves on this thread
        self._saved = None  # [(cls, name, what cls.__dict__ held or _ABSENT, the replacement)] while installed
        self._own = {}  # (cls, name) -> what cls.__dict__ held at the first install (or _ABSENT)
        self._explicit = False  # install() was called outside an installed() block, and no uninstall() since
        self._blocks = 0  # installed() blocks inside their with
        self._local = threading.local()  # .in_block: this thread's install() is a block's; .depth: its blocks
        os.register_at_fork(after_in_child=self._after_fork_in_child)

    def _after_fork_in_child(self):
        # The child has only the forking thread: a fresh lock (another thread may have held it at the fork),
        # and only that thread's blocks count.
        self._lock = threading.RLock()
        self._blocks = getattr(self._local, "depth", 0)

    def is_installed(self):
        return self._saved is not None

    def replacement(self, name):
        """A decorator for the integration's replacement of the library's method `name`: while the integration
        is not installed, a call that still reaches it (through a wrapper that someone set over it, which
        uninstall() leaves in place) goes to the library's own method instead."""

        def decorate(function):
            @functools.wraps(function)
            def method(instance, *args, **kwargs):
                if self._saved is None:
                    return call_original(self.own(type(instance), name), instance, *args, **kwargs)
                return function(instance, *args, **kwargs)

            return method

        return decorate

    def install(self, targets):
        """Set each (cls, name, replacement) of `targets`; False (and nothing set) if already installed. A
        failure part way puts back what was set before it and raises. What each class holds is read under the
        lock that orders install() and uninstall(). Outside an installed() block, the install stays until
        uninstall(), also past the blocks."""
        with self._lock:
            explicit = not getattr(self._local, "in_block", False)
            if self._saved is not None:
                self._explicit = self._explicit or explicit
                return False
            saved = []
            try:
                for cls, name, replacement in targets:
                    held = cls.__dict__.get(name, _ABSENT)
                    if held is replacement:  # left by a wrapper's owner who put back what they found
                        held = self._own.get((cls, name), _ABSENT)
                    self._own.setdefault((cls, name), held)
                    _set(cls, name, replacement)
                    saved.append((cls, name, held, replacement))
            except BaseException:
                self._restore(saved)
                raise
            self._saved = saved
            self._explicit = explicit
            return True

    def enter_block(self, install):
        """An installed() block begins: counted, then `install()` (the integration's, which calls
        :meth:`install`) as the block's. Raises what install() raises (the block is then not counted)."""
        with self._lock:
            self._blocks += 1
        self._local.depth = getattr(self._local, "depth", 0) + 1
        self._local.in_block = True
        try:
            install()
        except BaseException:
            self.leave_block()
            raise
        finally:
            self._local.in_block = False

    def leave_block(self):
        """An installed() block ends: the last one to leave puts back what each class held, unless an
        explicit install() is in force."""
        self._local.depth = max(getattr(self._local, "depth", 0) - 1, 0)
        with self._lock:
            self._blocks -= 1
            if self._blocks == 0 and not self._explicit and self._saved is not None:
                saved, self._saved = self._saved, None
                self._restore(saved)

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
        """Put back what each class held: True if this call did. False if not installed, or while an
        installed() block is inside its with (the last one to leave puts it back). An attribute that someone
        else replaced after install() is left as they set it."""
        with self._lock:
            self._explicit = False
            if self._saved is None or self._blocks:
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
