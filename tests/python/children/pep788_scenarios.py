"""Child of test_pep788.py: one scenario per run, named by the first argument. Each prints one line,
`result <dict>`, that the test reads with ast.literal_eval; the counts it carries are the process's own."""

import scenario


def native_thread_enters():
    # A native thread started while the interpreter runs enters the interpreter and calls its target.
    from cuda_reclaim import _reclaim

    ran = []
    thread = _reclaim._NativeThread(lambda: ran.append(True))
    assert thread.join(30)
    print("result", {"ran": bool(ran), **_reclaim._DrainWorker._entry_stats()}, flush=True)


def native_thread_started_in_an_atexit_hook():
    # Started from an atexit hook (where threading refuses new threads): the interpreter is not finalizing
    # yet, so the thread enters and its target runs; the hook joins it.
    import atexit

    from cuda_reclaim import _reclaim

    def hook():
        ran = []
        thread = _reclaim._NativeThread(lambda: ran.append(True))
        assert thread.join(30)
        print("result", {"ran": bool(ran), **_reclaim._DrainWorker._entry_stats()}, flush=True)

    atexit.register(hook)


class _StartsANativeThreadWhenFinalized:
    # Kept by __main__'s globals, so finalized during module teardown, once the interpreter is finalizing.
    # Everything it needs is bound now: module globals may be gone by then.
    def __init__(self, os, sys, _reclaim):
        self.os, self.sys, self._reclaim = os, sys, _reclaim

    def __del__(self):
        ran = []
        finalizing = self.sys.is_finalizing()
        try:
            thread = self._reclaim._NativeThread(lambda: ran.append(True))
        except Exception as error:  # noqa: BLE001 - reported to the test, which decides
            started, joined = repr(error), False
        else:
            # Before 3.15 what the thread does depends on the version (3.10-3.13 end it inside its entry;
            # 3.14.10 lets it enter and run): bounded, whatever it does.
            started, joined = True, thread.join(2)
        result = {"finalizing": finalizing, "started": started, "joined": joined, "ran": bool(ran)}
        result.update(self._reclaim._DrainWorker._entry_stats())
        self.os.write(1, f"result {result!r}\n".encode())


def native_thread_started_while_finalizing():
    import os
    import sys

    from cuda_reclaim import _reclaim

    globals()["keeper"] = _StartsANativeThreadWhenFinalized(os, sys, _reclaim)


class _WakesAWorkerWhenFinalized:
    def __init__(self, os, sys, time, cuda_reclaim, _reclaim):
        self.os, self.sys, self.time, self.cuda_reclaim, self._reclaim = os, sys, time, cuda_reclaim, _reclaim

    def __del__(self):
        finalizing = self.sys.is_finalizing()
        before = self._reclaim._DrainWorker._entry_stats()
        self.cuda_reclaim.defer_release(object())  # wakes the worker, which must not enter now
        deadline = self.time.monotonic() + 5
        after = before
        while after["refused_entries"] == before["refused_entries"] and self.time.monotonic() < deadline:
            self.time.sleep(0.01)
            after = self._reclaim._DrainWorker._entry_stats()
        result = {"finalizing": finalizing, "before": before, "after": after}
        self.os.write(1, f"result {result!r}\n".encode())


def drain_thread_woken_while_finalizing():
    # A drain loop that nobody stops (its own thread, not the automatic drain's; the atexit hook that
    # would close the queue is taken away), woken once the interpreter is finalizing.
    import atexit
    import os
    import sys
    import threading
    import time

    import cuda_reclaim
    from cuda_reclaim import _auto, _reclaim

    cuda_reclaim.set_auto_drain("off")
    atexit.unregister(_auto.close_at_exit)
    worker = _reclaim._DrainWorker()
    threading.Thread(target=worker.run, daemon=True).start()
    released = threading.Event()

    class Payload:
        def __del__(self):
            released.set()

    cuda_reclaim.defer_release(Payload())
    assert released.wait(30), "the worker released the payload"
    globals()["keeper"] = _WakesAWorkerWhenFinalized(os, sys, time, cuda_reclaim, _reclaim)


def exit_while_a_finalizer_on_the_drain_thread_waits_for_the_main_thread():
    # The main thread holds a lock through the exit that a finalizer on the drain thread waits for: the
    # atexit hook gives up on the thread after its join limit, and nothing else may wait for it (a guard
    # held across the drain would keep Py_FinalizeEx waiting for ever).
    import threading

    import cuda_reclaim

    held = threading.Lock()
    held.acquire()
    waiting = threading.Event()

    class WaitsForTheMainThread:
        def __del__(self):
            waiting.set()
            held.acquire()

    # The queue's reference must be the last one, or the finalizer could run on this thread (which holds
    # the lock) when it drops its own: hand it over with the drain thread off, drop ours, then start it.
    previous = cuda_reclaim.set_auto_drain("off")
    waits = WaitsForTheMainThread()
    cuda_reclaim.defer_release(waits)
    del waits
    cuda_reclaim.set_auto_drain(previous)
    assert previous == "thread"
    assert waiting.wait(30), "the drain thread runs the finalizer"
    print("result", {"exiting": True}, flush=True)


if __name__ == "__main__":
    scenario.run(
        native_thread_enters,
        native_thread_started_in_an_atexit_hook,
        native_thread_started_while_finalizing,
        drain_thread_woken_while_finalizing,
        exit_while_a_finalizer_on_the_drain_thread_waits_for_the_main_thread,
    )
