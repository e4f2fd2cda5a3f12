"""Child of test_reliability.py: Ctrl-C arrives while the atexit hook waits for the drain thread (a
finalizer on it takes a while). The hook's final drain and close must still happen: what was queued is
released, and native threads that keep pushing through the end count as leaked, not pending.

Prints "done" at the end of the main program; the test reads the exit report."""

import os
import signal
import threading

import _native_producers
import cuda_reclaim
import scenario


def main_thread_waits_in_the_exit_hook():
    # the exit hook's wait, not set_auto_drain()'s
    return {"close_at_exit", "_join_stopping_threads"} <= scenario.frame_names(main_ident)


class Slow:
    def __del__(self):  # on the drain thread: press Ctrl-C once the exit hook waits for this very thread
        entered.set()
        scenario.holds_within(main_thread_waits_in_the_exit_hook)
        signal.pthread_kill(main_ident, signal.SIGINT)  # to the waiting thread: its wait ends by EINTR
        # the KeyboardInterrupt reaches the main thread inside the wait, which it leaves
        scenario.holds_within(lambda: not main_thread_waits_in_the_exit_hook())


class MustRun:
    def __del__(self):
        os.write(1, b"queued before exit: released\n")


main_ident = threading.main_thread().ident
entered = threading.Event()
exiting = False
with scenario.auto_drain_off():  # the queue holds the only reference: the drain thread runs __del__
    cuda_reclaim.defer_release(Slow())  # the drain thread takes it now and stays in it until the Ctrl-C
assert entered.wait(30), "the drain thread never took it"
cuda_reclaim.defer_release(MustRun())  # queued behind it
# Two native threads push one object a millisecond each, for ten seconds: through the very end of the process,
# however long the exit takes; what they push after the hook's close is leaked, what they never push is not
# handed over.
_native_producers.hand_over_detached([object() for _ in range(20000)], 2, 1000)
print("done", flush=True)
