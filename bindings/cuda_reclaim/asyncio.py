"""Drain the reclaim queue from an asyncio event loop, and await points in CUDA streams.

``install(loop)`` registers the wake-up fd with ``loop.add_reader``: the loop wakes only when work arrives (no
polling) and drains in bounded batches between its other callbacks; works with uvloop. Loops without ``add_reader``
(e.g. the Windows proactor) get a periodic timer instead.

``await handed_back()`` resumes once CUDA has handed back what was attached before it (``flush()`` also
drains). ``await stream_reached(stream)`` resumes once the stream has passed this point; ``await
run_when_reached(stream, fn, *args)`` returns ``fn(*args)``, run in a drain once it gets there. Both ride on
:func:`cuda_reclaim.launch_host_func`: CUDA's thread only pushes, a drain completes a
``concurrent.futures.Future``, and the loop learns of it through ``call_soon_threadsafe`` (from the drain
thread) or at once (from its own reader's drain). No polling, no thread per wait. Cancelling the await cancels
the call if it has not run (it then never runs); its references go when CUDA hands the call back, or at close.

Fork: asyncio does not support using a parent's event loop in a fork child, and neither does this module. In
the child, for a loop made before the fork (one this module used before it, or that ran on the forking thread):

- its :class:`DrainHandle` is cancelled, and the loop is left as it is (its kernel poller and self-pipe are the
  parent's too): the child's queue is drained by the automatic drain thread, an explicit drain, or a loop made
  in the child;
- an await of this module pending at the fork ends with ``asyncio.CancelledError``, whose message says that
  the loop was made before the fork, where the loop runs again at all;
- :func:`install`, :func:`handed_back`, :func:`flush`, :func:`stream_reached` and :func:`run_when_reached` on
  it raise RuntimeError naming the function.

A loop made in the child (``asyncio.run()``, ``asyncio.new_event_loop()``) drains and waits as in a new process.
"""

from ._asyncio_barrier import flush, handed_back
from ._asyncio_calls import run_when_reached, stream_reached
from ._asyncio_drain import DrainHandle, install

__all__ = ["DrainHandle", "flush", "handed_back", "install", "run_when_reached", "stream_reached"]

for _name in __all__:  # documented as this module's own: the private modules are its parts
    globals()[_name].__module__ = __name__
del _name
