"""The hand-back barrier's exit hook: close it before Python joins the threads that are not daemons, so that a
thread waiting for CUDA (wait_handed_back, flush, Attachment.wait) cannot hold the exit.

threading runs its exit hooks (``threading._register_atexit``) last-registered first, before it joins those
threads; another hook may join threads itself (concurrent.futures joins its workers there). So this one is
kept the last registered: every wait entry point calls :func:`keep_exit_hook_first` (one list look when it
already is).
"""

import threading as _threading

from . import _reclaim


def _close_at_threading_exit():
    _reclaim._hand_back_close()


def keep_exit_hook_first():
    """Make the barrier's exit hook the next one threading runs; close the barrier at once if threading is
    already shutting down (no hook can be registered then). Any thread; never blocks."""
    if getattr(_threading, "_SHUTTING_DOWN", False):
        # threading is running its hooks (maybe iterating the list now): leave the list alone.
        _reclaim._hand_back_close()
        return
    hooks = getattr(_threading, "_threading_atexits", None)
    if hooks is not None and hooks and getattr(hooks[-1], "func", None) is _close_at_threading_exit:
        return
    if hooks is not None:
        for hook in [hook for hook in hooks if getattr(hook, "func", None) is _close_at_threading_exit]:
            hooks.remove(hook)
    try:
        _threading._register_atexit(_close_at_threading_exit)
    except RuntimeError:  # "can't register atexit after shutdown": this is the exit
        _reclaim._hand_back_close()

