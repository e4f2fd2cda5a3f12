"""Child of test_hand_back_waits_end.py: the first import of the package happens in a non-daemon thread while
threading shuts down (the main thread has returned and threading._shutdown joins the thread). threading refuses
new exit hooks then; the import still works (the barrier is shut). Prints "import ok" or why it failed."""

import threading


def late():
    # The main thread returns once threading._shutdown has begun: it sets the flag that refuses new exit hooks
    # first, then runs the exit hooks and marks the main thread done, then joins this thread.
    threading.main_thread().join()
    assert threading._SHUTTING_DOWN, "threading._shutdown did not begin before the main thread was done"
    try:
        import cuda_reclaim  # noqa: F401 - the import under test

        print("import ok", flush=True)
    except BaseException as error:
        print("import failed:", repr(error), flush=True)


threading.Thread(target=late).start()
