"""numba-cuda's stream callbacks through cuda-reclaim: ``Stream.add_callback`` and ``Stream.async_done``.

:func:`install` sets both methods on ``numba.cuda.cudadrv.driver.Stream`` (numba-cuda's own files are not
edited); :func:`uninstall` puts back numba-cuda's own; :func:`installed` is both as a context manager.

While installed:

- ``stream.add_callback(callback, arg=None)`` calls ``callback(stream, status, arg)`` once all work enqueued
  on the stream before it is done, and the stream's later work waits for the call to return (the ordered
  form, :func:`cuda_reclaim.launch_host_func_ordered`), as numba-cuda's own. An exception in the callback is
  turned into a warning ("Exception in stream callback: ..."), as numba-cuda does. Returns None.
- ``stream.async_done()`` returns an asyncio future of the running loop that gets the stream as its result
  once the stream reaches that point; it is completed on the loop's own thread
  (``loop.call_soon_threadsafe``). A future that was cancelled (or otherwise completed) by then is left
  alone; a loop closed by then gets nothing.

What differs from numba-cuda's own:

- The callback runs in a cuda-reclaim drain (the automatic drain thread, an event loop's drain, or an
  explicit :func:`cuda_reclaim.drain`), never on CUDA's thread: CUDA's thread waits without the GIL, so a
  thread that holds the GIL while waiting on the CUDA driver cannot deadlock with it. The warning of an
  exception is issued on the drain's thread.
- ``status`` is always 0: the call is made by a host function (``cuLaunchHostFunc``), which CUDA does not run
  at all once the context has an error, instead of ``cuStreamAddCallback``, which passes the error. Then the
  callback is never called, and ``async_done()``'s future never completes.
- ``async_done()``'s future is completed without holding the stream's later work back (the unordered
  :func:`cuda_reclaim.launch_host_func`): it can only complete on its loop, after the stream has gone on.
- Works with numba-cuda's ``cuda.bindings`` stream handles (numba-cuda 0.30's own methods read
  ``handle.value``, which those handles lack).
- After :func:`cuda_reclaim.close` (and at exit) a callback whose point the stream has not reached is never
  called (cuda-reclaim's rule for launched calls).
"""

import contextlib
import warnings

from . import _support

__all__ = ["install", "uninstall", "is_installed", "installed"]

_PATCHES = _support.Patches()


def _stream_class(function):
    driver = _support.import_library(
        "numba.cuda.cudadrv.driver", function, "numba-cuda", "numba-cuda[cu12]"
    )
    return driver.Stream


def _handle(stream):
    """The CUstream int of a numba-cuda Stream (its default stream's handle is 0 or None)."""
    handle = stream.handle
    if handle is None:
        return 0
    try:
        return int(handle)
    except TypeError:  # a ctypes c_void_p handle: its value is None for the null stream
        return handle.value or 0


def _call(stream, callback, arg):
    try:
        callback(stream, 0, arg)
    except Exception as error:  # noqa: BLE001 - numba-cuda's own rule: any exception becomes a warning
        warnings.warn(f"Exception in stream callback: {error}")


def add_callback(self, callback, arg=None):
    """Call ``callback(stream, status, arg)`` (status 0) once the work enqueued before it is done; the stream's
    later work waits for the call. It runs in a cuda-reclaim drain, not on CUDA's thread."""
    import cuda_reclaim

    cuda_reclaim.launch_host_func_ordered(_handle(self), _call, self, callback, arg)


def _resolve(future, stream):
    if not future.done():
        future.set_result(stream)


def _resolve_on(loop, future, stream):
    try:
        loop.call_soon_threadsafe(_resolve, future, stream)
    except RuntimeError:  # the loop is closed: nobody awaits the future any more
        pass


def async_done(self):
    """An asyncio future (of the running loop) whose result is this stream once the work enqueued before it
    is done; completed on the loop's thread."""
    import asyncio

    import cuda_reclaim

    loop = asyncio.get_running_loop()
    future = loop.create_future()
    cuda_reclaim.launch_host_func(_handle(self), _resolve_on, loop, future, self)
    return future


def install():
    """Make numba-cuda's ``Stream.add_callback`` and ``Stream.async_done`` go through cuda-reclaim. Idempotent:
    True if this call installed them, False if they were installed already. ImportError when numba-cuda is
    missing."""
    stream = _stream_class("cuda_reclaim.integrations.numba_cuda.install()")
    return _PATCHES.install([(stream, "add_callback", add_callback), (stream, "async_done", async_done)])


def uninstall():
    """Put back numba-cuda's own methods (exactly what the class held before :func:`install`). Idempotent:
    False if nothing was installed."""
    return _PATCHES.uninstall()


def is_installed():
    """Whether :func:`install` is in force."""
    return _PATCHES.is_installed()


@contextlib.contextmanager
def installed():
    """:func:`install` for the ``with`` block; on leaving, :func:`uninstall` if this block installed it."""
    mine = install()
    try:
        yield
    finally:
        if mine:
            uninstall()
