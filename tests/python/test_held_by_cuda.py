"""What CUDA still holds: attached_to_cuda == handed_back_by_cuda + held_by_cuda, live in stats() and in
the exit report, for every way of handing an object to CUDA (against the fake libcuda: programs of
children/held_by_cuda_scenarios.py, run with fake_cuda.run_script)."""

import pytest

import cuda_reclaim
import fake_cuda
from exit_report import last_report

SCENARIOS = "held_by_cuda_scenarios.py"


def test_stats_name_the_hold_counters():
    s = cuda_reclaim.stats()
    assert {key for key, counter in cuda_reclaim.COUNTERS.items() if counter.source == "cuda"} <= set(s)
    assert s["attached_to_cuda"] == s["handed_back_by_cuda"] + s["held_by_cuda"]


def test_every_kind_of_attachment_is_held_until_cuda_hands_it_back():
    fake_cuda.run_script(SCENARIOS, "every_kind_of_attachment_is_held_until_cuda_hands_it_back")


def test_failed_attachments_are_never_counted_as_held():
    fake_cuda.run_script(SCENARIOS, "failed_attachments_are_never_counted_as_held")


def test_the_exit_report_counts_what_cuda_still_holds():
    # As a new user would: exit while a "kernel" still runs at the head of a stream with host functions
    # queued behind it, and with an executable graph never destroyed.
    result = fake_cuda.run_script(SCENARIOS, "the_exit_report_counts_what_cuda_still_holds", CUDA_RECLAIM_REPORT="1")
    report = last_report(result.stderr)
    assert report["conserved"] == "yes", result.stderr
    assert report["held_by_cuda"] == 3, result.stderr
    assert report["attached_to_cuda"] == 3 and report["handed_back_by_cuda"] == 0, result.stderr
    assert report["released"] == 3 and report["pending"] == 0, result.stderr
    assert "never runs" not in result.stdout


def test_what_cuda_hands_back_after_close_is_counted_as_leaked_and_no_longer_held():
    # The stream reaches its host functions only after cuda_reclaim's final drain (an atexit hook that
    # is registered first, so it runs last, releases it; a CUDA thread then runs them during exit).
    result = fake_cuda.run_script(
        SCENARIOS, "what_cuda_hands_back_after_close_is_counted_as_leaked_and_no_longer_held", CUDA_RECLAIM_REPORT="1"
    )
    report = last_report(result.stderr)
    assert report["conserved"] == "yes", result.stderr
    assert report["held_by_cuda"] == 0 and report["handed_back_by_cuda"] == 2, result.stderr
    assert report["leaked_after_close"] == 2, result.stderr
    assert "never runs" not in result.stdout


def test_report_fields_come_before_the_verdict_in_a_fixed_order():
    from cuda_reclaim import _reclaim

    line = _reclaim.report().strip()
    keys = [item.split("=", 1)[0] for item in line.split()[1:]]
    table = cuda_reclaim.COUNTERS
    assert keys == [key for key in table if table[key].source in ("queue", "cuda")] + ["conserved"], line
    report = last_report(line)
    assert report["attached_to_cuda"] == report["handed_back_by_cuda"] + report["held_by_cuda"]


@pytest.mark.parametrize("mode", ["thread", "off"])
def test_held_counts_stay_lawful_under_many_cuda_threads(mode):
    fake_cuda.run_script(SCENARIOS, "held_counts_stay_lawful_under_many_cuda_threads", mode)
