"""Child of test_auto_drain.py: one scenario per run, named by the first argument.

Each scenario imports cuda_reclaim itself: one of them registers an atexit hook before the import."""

import scenario


def no_thread_until_something_is_handed_over():
    import threading

    import cuda_reclaim

    cuda_reclaim.drain()
    cuda_reclaim.stats()
    cuda_reclaim.pending()
    names = [t.name for t in threading.enumerate()]
    assert names == ["MainThread"], names
    cuda_reclaim.defer_release(object())
    names = [t.name for t in threading.enumerate()]
    assert "cuda-reclaim-drain" in names, names
    print("ok")


def drain_thread_runs_through_later_atexit_hooks():
    # atexit hooks run last-registered first: this one, registered before the import, runs after
    # cuda_reclaim's hook; the one registered after the import runs before it.
    import atexit

    atexit.register(lambda: print("after close:", _auto.is_thread_running(), cuda_reclaim.is_closed(), flush=True))
    import cuda_reclaim
    from cuda_reclaim import _auto

    cuda_reclaim.defer_release(object())
    assert _auto.is_thread_running()
    atexit.register(lambda: print("before close:", _auto.is_thread_running(), cuda_reclaim.is_closed(), flush=True))


def finalizer_on_the_drain_thread_switches_the_auto_drain_off():
    import threading

    import cuda_reclaim
    from cuda_reclaim import _auto

    done = threading.Event()

    class SwitchesOff:
        def __del__(self):
            cuda_reclaim.set_auto_drain("off")  # runs on the drain thread itself
            done.set()

    with scenario.auto_drain_off():  # the queue holds the only reference: the drain thread runs __del__
        cuda_reclaim.defer_release(SwitchesOff())
    assert done.wait(30), "the drain thread released the object"
    for thread in [t for t in threading.enumerate() if t.name == "cuda-reclaim-drain"]:
        thread.join(30)
    assert not _auto.is_thread_running()
    assert cuda_reclaim.get_auto_drain() == "off"
    print("ok")


def drain_thread_lingers_under_steady_traffic():
    import _native_producers
    import cuda_reclaim
    from cuda_reclaim import _reclaim

    cuda_reclaim.defer_release(object())  # starts the drain thread
    scenario.wait_until(lambda: cuda_reclaim.pending() == 0, "the drain thread drained the first")
    before = cuda_reclaim.stats()
    _native_producers.hand_over([object() for _ in range(4000)], 1, 50)
    scenario.wait_until(lambda: cuda_reclaim.stats()["released"] - before["released"] == 4000, "4000 released")

    # The linger ends at the first drain that finds nothing: from then on a push writes the fd again.
    def push_is_an_edge():
        writes = cuda_reclaim.stats()["eventfd_writes"]
        cuda_reclaim.defer_release(object())
        edge = cuda_reclaim.stats()["eventfd_writes"] == writes + 1
        scenario.wait_until(lambda: cuda_reclaim.pending() == 0, "the drain thread drained the push")
        return edge

    scenario.wait_until(push_is_an_edge, "a push writes the fd again")
    scenario.wait_until(lambda: not _reclaim.wait(0), "wait(0) finds no work")
    print("ok")


def a_signal_ends_a_native_thread_join_without_a_limit():
    # With a 30 s switch interval the main thread gives the GIL up only inside join(): the target runs only
    # once the main thread waits there. It sends SIGINT and stays alive, so only the signal can end the join.
    import os
    import signal
    import sys
    import threading

    from cuda_reclaim import _reclaim

    sys.setswitchinterval(30.0)
    finish = threading.Event()

    def target():
        os.kill(os.getpid(), signal.SIGINT)
        finish.wait(60)

    thread = _reclaim._NativeThread(target)
    try:
        thread.join()
        print("joined")
    except KeyboardInterrupt:
        print("KeyboardInterrupt, thread alive:", thread.is_alive())
    finish.set()
    print("joined after the signal:", thread.join(30))


if __name__ == "__main__":
    scenario.run(
        a_signal_ends_a_native_thread_join_without_a_limit,
        no_thread_until_something_is_handed_over,
        drain_thread_runs_through_later_atexit_hooks,
        finalizer_on_the_drain_thread_switches_the_auto_drain_off,
        drain_thread_lingers_under_steady_traffic,
    )
