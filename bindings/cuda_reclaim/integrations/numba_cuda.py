"""numba-cuda's stream callbacks through cuda-reclaim: ``Stream.add_callback`` and ``Stream.async_done``.

:func:`install` sets both methods on ``numba.cuda.cudadrv.driver.Stream`` (numba-cuda's own files are not
edited); :func:`uninstall` puts back numba-cuda's own; :func:`installed` is both as a context manager.

While installed:

- ``stream.add_callback(callback, arg=None)`` calls ``callback(stream, status, arg)`` once all work enqueued
  on the stream before it is done, and the stream's later work waits for the call to return (the ordered
  form, :func:`cuda_reclaim.launch_host_func_ordered`), as numba-cuda's own. An exception in the callback is
  turned into a warning ("Exception in stream callback: ..."), as numba-cuda does. What numba-cuda's own
  leaves to ``sys.unraisablehook`` goes there too: a KeyboardInterrupt or SystemExit (raised in the
  callback, or a Ctrl-C that lands in it while the main thread drains), which then neither stops the drain
  nor reaches the code that drains, and the warning itself where warnings are errors (``-W error``).
  Returns None.
- ``stream.async_done()`` returns an asyncio future of the running loop (a task) that gets the stream as
  its result once the stream reaches that point, on the loop's thread. The point is taken when
  ``async_done()`` is called. Something drains for it whatever the automatic drain's mode: as
  :func:`cuda_reclaim.asyncio.stream_reached`, the loop's own drain is installed while the automatic drain
  is not the thread. Cancelling the future cancels the wait (the host function then runs nothing).

What differs from numba-cuda's own:

- The callback runs in a cuda-reclaim drain (the automatic drain thread, an event loop's drain, or an
  explicit :func:`cuda_reclaim.drain`), never on CUDA's thread, which never takes the GIL. The drain needs
  the GIL to run the call that the stream waits for: a thread that waits for the stream must release the
  GIL while it waits (cuda.bindings, CuPy and ctypes release it around driver calls), as with cuda-reclaim's
  own ordered calls. The warning of an exception is issued on the drain's thread.
- Nothing the drain runs may wait for the device while the call is pending: a finalizer that frees device
  memory synchronously (a library's deferred deallocations flushed from a finalizer) waits for the stream,
  which waits for this call, and the process hangs (docs/callbacks.md, "From inside a drain").
- Something must drain ``add_callback``'s call: while the automatic drain is ``"off"`` and no event
  loop drains (:func:`cuda_reclaim.asyncio.install`), it raises RuntimeError naming
  ``Stream.add_callback`` (CUDA's thread would wait for good).
- ``status`` is always 0: the call is made by a host function (``cuLaunchHostFunc``), which CUDA does not run
  at all once the context has an error, instead of ``cuStreamAddCallback``, which passes the error. Then the
  callback is never called, and ``async_done()``'s future never completes.
- ``async_done()``'s future is completed without holding the stream's later work back (the unordered
  :func:`cuda_reclaim.launch_host_func`): it can only complete on its loop, after the stream has gone on.
  After :func:`cuda_reclaim.close` (and at exit) it ends cancelled, with a message that says so; in a fork
  child, on a loop made before the fork, as :func:`cuda_reclaim.asyncio.stream_reached`.
- Works with numba-cuda's ``cuda.bindings`` stream handles (numba-cuda 0.30's own methods read
  ``handle.value``, which those handles lack).
- After :func:`cuda_reclaim.close` (and at exit) a callback whose point the stream has not reached is never
  called (cuda-reclaim's rule for launched calls).
"""

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
        try:
            warnings.warn(f"Exception in stream callback: {error}")
        except BaseException as warning:  # noqa: BLE001 - a warning raised as an error: reported, as numba's own
            _support.report_unraisable(warning)
    except BaseException as error:  # noqa: BLE001 - KeyboardInterrupt, SystemExit: as numba's own, unraisable
        _support.report_unraisable(error)


@_PATCHES.replacement("add_callback")
def add_callback(self, callback, arg=None):
    """Call ``callback(stream, status, arg)`` (status 0) once the work enqueued before it is done; the stream's
    later work waits for the call. It runs in a cuda-reclaim drain, not on CUDA's thread. An Exception
    becomes a warning; a KeyboardInterrupt or SystemExit, and a warning raised as an error, go to
    ``sys.unraisablehook``."""
    _support.launch_ordered("Stream.add_callback", _handle(self), _call, self, callback, arg)


def _reached():
    return None


async def _until_reached(stream, loop, call):
    from cuda_reclaim import _asyncio_calls

    await _asyncio_calls._await_call(loop, call, "async_done")
    return stream


@_PATCHES.replacement("async_done")
def async_done(self):
    """An asyncio future (a task of the running loop) whose result is this stream once the work enqueued
    before this call is done; completed on the loop's thread, with the loop's drain installed while the
    automatic drain is not the thread. Cancelling it cancels the wait."""
    import asyncio

    from cuda_reclaim import _asyncio_drain, _graph

    loop = asyncio.get_running_loop()
    _asyncio_drain.check_loop("async_done", loop)
    call = _graph.launch("async_done", _handle(self), _reached, (), None)  # the stream's point: this call's
    try:
        task = loop.create_task(_until_reached(self, loop, call))
    except BaseException:
        call.cancel()
        raise
    # A task cancelled before it first runs never awaits the call: the call is cancelled with it.
    task.add_done_callback(lambda _: call.cancel())
    return task


def install():
    """Make numba-cuda's ``Stream.add_callback`` and ``Stream.async_done`` go through cuda-reclaim. Idempotent:
    True if this call installed them, False if they were installed already. ImportError when numba-cuda is
    missing."""
    stream = _stream_class("cuda_reclaim.integrations.numba_cuda.install()")
    return _PATCHES.install([(stream, "add_callback", add_callback), (stream, "async_done", async_done)])


def uninstall():
    """Put back numba-cuda's own methods (exactly what the class held before :func:`install`): True if this call did.
    False if nothing was installed, or while an :func:`installed` block is inside its ``with`` (the last block to
    leave puts them back)."""
    return _PATCHES.uninstall()


def is_installed():
    """Whether :func:`install` is in force."""
    return _PATCHES.is_installed()


def installed():
    """The integration in force for the ``with`` block (also in another thread's overlapping block); the last
    block to leave puts back the library's own methods, unless :func:`install` was called outside a block."""
    return _support.installed_block(_PATCHES, install)
