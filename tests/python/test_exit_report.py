"""The exit report: one line on stderr written by C code after Python is gone, with every counter,
including references that native threads handed over after the final drain; and its parser
(bench/exit_report.py), which the tests and the shutdown comparison share."""

import pytest

import exit_report
import fake_cuda
from conftest import run_child_script


def test_exit_report_counts_late_native_pushes_as_leaked_and_conserves():
    pytest.importorskip("_native_producers")
    result = run_child_script("late_native_pushes.py", env={"CUDA_RECLAIM_REPORT": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "late push seen"
    report = exit_report.last_report(result.stderr)
    assert report["conserved"] == "yes"
    assert exit_report.conserved(report)
    assert report["released"] >= 100
    assert report["pending"] == 0
    assert report["leaked_after_close"] >= 1, "late pushes after the final drain are counted"


def test_exit_report_is_silent_unless_asked():
    result = run_child_script("exit_report_hands_over_one.py")
    assert result.returncode == 0, result.stderr
    assert "cuda-reclaim:" not in result.stderr


def report_line(conserved="yes", **values):
    """A report line with every counter field of the table (0 unless given in `values`), then `conserved`."""
    counters = dict.fromkeys(exit_report.fields(), 0) | values
    return "cuda-reclaim: " + " ".join(f"{key}={value}" for key, value in counters.items()) + f" conserved={conserved}"


def test_report_function_gives_the_same_line_now():
    from cuda_reclaim import _reclaim

    fields = exit_report.parse_line(_reclaim.report().strip())
    assert fields["conserved"] == ("yes" if exit_report.conserved(fields) else "no")


def test_the_law_the_parser_checks_is_the_one_the_c_header_defines():
    import cuda_reclaim

    # Derived by the extension from reclaim_stats_conserved (cuda_reclaim/reclaim_abi.h); pinned here.
    assert cuda_reclaim._reclaim._CONSERVATION_BUCKETS == (
        "released",
        "pending",
        "leaked_after_close",
        "abandoned_after_fork",
        "in_drain",
    )
    one_leak = dict.fromkeys(cuda_reclaim.COUNTERS, 0) | {"handed_over": 1, "leaked_after_close": 1}
    one_rejected = dict.fromkeys(cuda_reclaim.COUNTERS, 0) | {"handed_over": 1, "rejected": 1}
    assert exit_report.conserved(one_leak) and cuda_reclaim.conserved(one_leak)
    assert not exit_report.conserved(one_rejected) and not cuda_reclaim.conserved(one_rejected)


def test_parser_finds_every_report_among_other_lines():
    text = (
        "Traceback? no: ordinary output\n"
        "cuda-reclaim: ignoring CUDA_RECLAIM_RESERVED_CAPACITY=x\n"
        + report_line(handed_over=3, released=1, leaked_after_close=2) + "\n"
        + report_line("no", handed_over=1) + "\n"
    )
    reports = exit_report.find_reports(text)
    assert [r["handed_over"] for r in reports] == [3, 1]
    # A daemon thread may leave a partial line just before the report's single write(2).
    interleaved = "Exception ignored in: " + text.splitlines()[2] + "\n"
    assert exit_report.find_reports(interleaved) == reports[:1]
    assert exit_report.last_report(text)["conserved"] == "no"
    assert [exit_report.conserved(r) for r in reports] == [True, False]


@pytest.mark.parametrize(
    "line, problem",
    [
        (report_line(handed_over="x"), "counter handed_over is not a number"),
        (report_line().replace(" abandoned_after_fork=0", ""), "lacks abandoned_after_fork:"),
        (report_line().replace(" conserved=yes", ""), "lacks conserved:"),
        ("cuda-reclaim: handed_over=1 handed_over=1", "malformed field"),
        ("cuda-reclaim: fatal: eventfd (errno 24)", "not an exit report"),
    ],
)
def test_parser_rejects_a_malformed_line_naming_it(line, problem):
    with pytest.raises(ValueError, match=problem):
        exit_report.parse_line(line)


def test_parser_says_when_there_is_no_report():
    with pytest.raises(ValueError, match="no exit report in"):
        exit_report.last_report("nothing here\n")


def test_the_exit_report_counts_what_a_stuck_drain_took_as_in_drain_not_released():
    result = fake_cuda.run_script("exit_with_a_stuck_drain.py", timeout=60, CUDA_RECLAIM_REPORT="1")
    reports = exit_report.find_reports(result.stderr)
    assert len(reports) == 1, result.stderr
    report = reports[0]
    assert report["conserved"] == "yes", report
    # The long call itself, the call behind it and the keep_alive_until payload: taken, never finished.
    assert report["in_drain"] == 3 and report["released"] == 0 and report["pending"] == 0, report
