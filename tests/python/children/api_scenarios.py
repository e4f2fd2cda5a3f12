"""Child of test_api.py: one scenario per run, named by the first argument (close() is final for a
process, and the exit and subinterpreter behaviour needs a process of its own)."""

import scenario


def close_is_final_and_counts_later_pushes_as_leaked():
    import gc
    import weakref

    import cuda_reclaim

    class P:
        pass

    cuda_reclaim.set_auto_drain("off")
    kept = P()
    ref = weakref.ref(kept)
    cuda_reclaim.defer_release(kept)
    del kept
    assert cuda_reclaim.close() == 1 and ref() is None
    assert cuda_reclaim.is_closed()
    assert cuda_reclaim.close() == 0
    late = P()
    late_ref = weakref.ref(late)
    assert cuda_reclaim.defer_release(late) is False
    del late
    gc.collect()
    assert late_ref() is not None, "a push after close is leaked, never released"
    assert cuda_reclaim.drain() == 0
    s = cuda_reclaim.stats()
    assert s["leaked_after_close"] == 1 and s["released"] == 1 and s["pending"] == 0, s
    assert cuda_reclaim.conserved(s)
    print("ok")


def atexit_hook_drains_what_is_left():
    import atexit

    import cuda_reclaim

    cuda_reclaim.set_auto_drain("off")

    class Loud:
        def __del__(self):
            print("released at exit", flush=True)

    cuda_reclaim.defer_release(Loud())

    def later_hook():  # registered after import: runs before cuda_reclaim's hook
        assert not cuda_reclaim.is_closed()
        print("later hook ran first", flush=True)

    atexit.register(later_hook)


def import_in_a_subinterpreter():
    """Runs api_subinterpreter_import.py (beside this file) in a subinterpreter, which prints whether the import
    is refused there, and how."""
    import os

    import _testcapi

    import cuda_reclaim  # noqa: F401 - the main interpreter's copy is loaded first

    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "api_subinterpreter_import.py")) as f:
        _testcapi.run_in_subinterp(f.read())


if __name__ == "__main__":
    scenario.run(
        close_is_final_and_counts_later_pushes_as_leaked,
        atexit_hook_drains_what_is_left,
        import_in_a_subinterpreter,
    )
