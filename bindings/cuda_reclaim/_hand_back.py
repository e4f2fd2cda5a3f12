"""The hand-back barrier's exit hook: it shuts the barrier once the main thread has finished, before Python
joins the threads that are not daemons, so that a thread waiting for CUDA (wait_handed_back, flush,
Attachment.wait, NodeHandle.wait, an event loop's handed_back) returns False instead of holding the exit.

threading runs its exit hooks last-registered first. concurrent.futures' thread pool registers one, when its
module is first imported, that joins the pool's workers: that module is imported here first, so that this hook,
registered once per process at the package's import, runs before it. The package imports this module before
any other, so that the pool's fork hooks (its lock, taken before a fork, made anew in the child) also come
before the package's: a done-callback that forks from the package's after-fork hook finds that lock free.
"""

from . import _python_compat
from . import _reclaim

try:
    import concurrent.futures.thread  # noqa: F401 - its exit hook joins the pool's workers: registered before ours
except RuntimeError:  # imported while threading shuts down: it cannot register its hook, nor start a worker
    pass


def _shut_at_threading_exit():
    _reclaim._hand_back_shut()


def _install():
    # Once per process, however often the package is imported or reloaded: the flag lives on the extension
    # module, which is never re-initialised; a fork child inherits the registration.
    if getattr(_reclaim, "_threading_exit_hook_installed", False):
        return
    try:
        _python_compat.register_threading_exit_hook(_shut_at_threading_exit)
    except RuntimeError:  # imported while threading shuts down: the exit is under way
        _reclaim._hand_back_shut()
    _reclaim._threading_exit_hook_installed = True


_install()
