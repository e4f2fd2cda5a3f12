"""CuPy's stream callbacks through cuda-reclaim: ``add_callback`` and ``launch_host_func``.

:func:`install` sets both methods on ``cupy.cuda.stream._BaseStream``, the class of ``cupy.cuda.Stream`` and
``cupy.cuda.ExternalStream`` (CuPy's own files are not edited); :func:`uninstall` puts back CuPy's own;
:func:`installed` is both as a context manager.

While installed:

- ``stream.add_callback(callback, arg)`` calls ``callback(stream, error_status, arg)`` and
  ``stream.launch_host_func(callback, arg)`` calls ``callback(arg)``, once all work enqueued on the stream
  before it is done; the stream's later work waits for the call to return (the ordered form,
  :func:`cuda_reclaim.launch_host_func_ordered`), as with CuPy's own. An exception in the callback goes to
  ``sys.unraisablehook`` before the stream goes on, as CuPy's callbacks (Cython ``noexcept``) report it:
  every exception, a KeyboardInterrupt or SystemExit included (one raised in the callback, or a Ctrl-C that
  lands in it while the main thread drains), which then neither stops the drain nor reaches the code that
  drains. Both return None.

What differs from CuPy's own:

- The callback runs in a cuda-reclaim drain (the automatic drain thread, an event loop's drain, or an
  explicit :func:`cuda_reclaim.drain`), never on CUDA's thread, which never takes the GIL. The drain needs
  the GIL to run the call that the stream waits for: a thread that waits for the stream must release the
  GIL while it waits (cuda.bindings, CuPy and ctypes release it around driver calls), as with cuda-reclaim's
  own ordered calls.
- Nothing the drain runs may wait for the device while the call is pending: a finalizer that frees device
  memory synchronously (a library's deferred deallocations flushed from a finalizer) waits for the stream,
  which waits for this call, and the process hangs (docs/callbacks.md, "From inside a drain").
- Something must drain the call: while the automatic drain is ``"off"`` and no event loop drains
  (:func:`cuda_reclaim.asyncio.install`), both raise RuntimeError naming ``Stream.add_callback`` or
  ``Stream.launch_host_func`` (CUDA's thread would wait for good).
- ``add_callback``'s error status is always 0: the call is made by a host function (``cudaLaunchHostFunc``
  semantics), which CUDA does not run at all once the context has an error; then the callback is never
  called.
- ``launch_host_func`` on a stream that is capturing a graph is CuPy's own (the callback becomes a host node
  of the captured graph and runs on CUDA's thread at each launch): cuda-reclaim launches nothing on a
  capturing stream. CuPy's own is what ``_BaseStream`` held when :func:`install` first ran in the process
  (never a wrapper that leads back to the integration's).
- After :func:`cuda_reclaim.close` (and at exit) a callback whose point the stream has not reached is never
  called.
"""


from . import _support

__all__ = ["install", "uninstall", "is_installed", "installed"]

_PATCHES = _support.Patches()


def _base_stream(function):
    stream = _support.import_library("cupy.cuda.stream", function, "CuPy", "cupy-cuda12x")
    return stream._BaseStream


def _stream_callback(stream, callback, arg):
    callback(stream, 0, arg)


@_PATCHES.replacement("add_callback")
def add_callback(self, callback, arg):
    """Call ``callback(stream, 0, arg)`` once the work enqueued before it is done; the stream's later work
    waits for the call. It runs in a cuda-reclaim drain, not on CUDA's thread; an exception goes to
    ``sys.unraisablehook`` (a KeyboardInterrupt too: see the module's docstring)."""
    _support.launch_ordered("Stream.add_callback", self.ptr, _support.reporting(_stream_callback), self, callback, arg)


@_PATCHES.replacement("launch_host_func")
def launch_host_func(self, callback, arg):
    """Call ``callback(arg)`` once the work enqueued before it is done; the stream's later work waits for the
    call. It runs in a cuda-reclaim drain, not on CUDA's thread; an exception goes to
    ``sys.unraisablehook`` (a KeyboardInterrupt too: see the module's docstring). On a stream that is capturing
    a graph, CuPy's own launch_host_func (what the class held when :func:`install` first ran)."""
    if self.is_capturing():
        return _support.call_original(_PATCHES.own(type(self), "launch_host_func"), self, callback, arg)
    _support.launch_ordered("Stream.launch_host_func", self.ptr, _support.reporting(callback), arg)


def install():
    """Make CuPy's ``add_callback`` and ``launch_host_func`` go through cuda-reclaim. Idempotent: True if this
    call installed them, False if they were installed already. ImportError when CuPy is missing."""
    base = _base_stream("cuda_reclaim.integrations.cupy.install()")
    return _PATCHES.install([(base, "add_callback", add_callback), (base, "launch_host_func", launch_host_func)])


def uninstall():
    """Put back CuPy's own methods (exactly what the class held before :func:`install`): True if this call did. False
    if nothing was installed, or while an :func:`installed` block is inside its ``with`` (the last block to leave
    puts them back)."""
    return _PATCHES.uninstall()


def is_installed():
    """Whether :func:`install` is in force."""
    return _PATCHES.is_installed()


def installed():
    """The integration in force for the ``with`` block (also in another thread's overlapping block); the last
    block to leave puts back the library's own methods, unless :func:`install` was called outside a block."""
    return _support.installed_block(_PATCHES, install)
