"""The exit report: one line on stderr written by C code after Python is gone, with every counter,
including references that native threads handed over after the final drain."""

import pytest

from conftest import parse_report, run_child

pytest.importorskip("_native_producers")


def test_exit_report_counts_late_native_pushes_as_leaked_and_conserves():
    result = run_child(
        """
        import atexit, time
        atexit.register(time.sleep, 0.3)  # registered first, so it runs after cuda_reclaim's final drain
        import cuda_reclaim, _native_producers
        class P: pass
        for _ in range(100):
            cuda_reclaim.defer_release(P())
        # 20 native pushes spaced 50 ms apart: some land after the final drain (during the sleep above,
        # then during finalization), the rest never happen because the process is gone.
        _native_producers.hand_over_detached([P() for _ in range(20)], 1, 50000)
        """,
        env={"CUDA_RECLAIM_REPORT": "1"},
    )
    assert result.returncode == 0, result.stderr
    report = parse_report(result.stderr)
    assert report["conserved"] == "yes"
    assert report["enqueued"] == report["released"] + report["pending"] + report[
        "leaked_after_close"
    ] + report["abandoned_after_fork"]
    assert report["released"] >= 100
    assert report["pending"] == 0
    assert report["leaked_after_close"] >= 1, "late pushes after the final drain are counted"


def test_exit_report_is_silent_unless_asked():
    result = run_child("import cuda_reclaim; cuda_reclaim.defer_release(object())")
    assert result.returncode == 0, result.stderr
    assert "cuda-reclaim:" not in result.stderr


def test_report_function_gives_the_same_line_now():
    import cuda_reclaim
    from cuda_reclaim import _reclaim

    line = _reclaim.report()
    fields = parse_report(line)
    assert set(cuda_reclaim.STATS_KEYS) <= set(fields)
