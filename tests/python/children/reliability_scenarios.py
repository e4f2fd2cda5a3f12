"""Child of test_reliability.py: one scenario per run, named by the first argument. Each ends by printing
"done"; a hang is caught by the test's timeout."""

import scenario


def reload_then_exit():
    import importlib

    import cuda_reclaim

    importlib.reload(cuda_reclaim)
    cuda_reclaim.defer_release(object())
    print("done", flush=True)


def keyboard_interrupt_at_exit():
    import cuda_reclaim

    for _ in range(10):
        cuda_reclaim.defer_release(object())
    print("done", flush=True)
    raise KeyboardInterrupt


def max_pending_never_below_pending():
    import cuda_reclaim

    cuda_reclaim.set_auto_drain("off")
    for i in range(10):
        cuda_reclaim.defer_release(object())
        s = cuda_reclaim.stats()
        assert s["max_pending"] >= s["pending"] == i + 1, s
    print("done", flush=True)


def failed_keep_alive():
    import cuda_reclaim
    from cuda_reclaim import _auto

    try:
        cuda_reclaim.keep_alive_until(0, object())
    except (cuda_reclaim.DriverError, TypeError, ValueError) as error:
        print("refused:", type(error).__name__)
    assert not _auto.is_thread_running()
    print("done", flush=True)


if __name__ == "__main__":
    scenario.run(
        reload_then_exit,
        keyboard_interrupt_at_exit,
        max_pending_never_below_pending,
        failed_keep_alive,
    )
