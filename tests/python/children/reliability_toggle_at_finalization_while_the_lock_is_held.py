"""Child of test_reliability.py: a finalizer that toggles the automatic drain while the interpreter
finalizes, after a daemon thread took cuda_reclaim's state lock and then never ran again (CPython ends or
parks every other thread that wants the GIL back once finalization began). The toggle must not wait for
that lock. Prints "toggled" from the finalizer; a hang is caught by the test's timeout."""

import atexit
import os
import threading

go = threading.Event()
holding = threading.Event()
# Registered before cuda_reclaim is imported, so it runs after cuda_reclaim's own atexit hook (which
# takes the lock itself): the daemon thread takes the lock only once that hook is done.
atexit.register(lambda: (go.set(), holding.wait()))

import cuda_reclaim  # noqa: E402
from cuda_reclaim import _auto  # noqa: E402


def hold_the_lock_for_ever():
    go.wait()
    with _auto._lock.held():
        holding.set()
        threading.Event().wait()  # never returns; at finalization this thread never runs again


class TogglesAtFinalization:
    # Bound now: module globals may already be gone when this runs.
    def __del__(self, toggle=cuda_reclaim.set_auto_drain, write=os.write):
        toggle("off")
        write(1, b"toggled\n")


threading.Thread(target=hold_the_lock_for_ever, daemon=True).start()
cuda_reclaim.defer_release(object())
# Kept by builtins, which the interpreter clears last: the finalizer runs during finalization.
import builtins  # noqa: E402

builtins.toggles_at_finalization = TogglesAtFinalization()
print("done", flush=True)
