"""The exit report: the line cuda-reclaim writes to stderr at process exit when CUDA_RECLAIM_REPORT=1,

    cuda-reclaim: handed_over=5 released=3 pending=0 leaked_after_close=2 ... conserved=yes

parsed in one place for the shutdown comparison (bench/shutdown/torture.py) and the tests. Counter values
are ints; `conserved` stays the report's own word ("yes" or "no"), so that a test can check what the C
code wrote apart from what `conserved()` computes from the numbers.

Its fields are the counter table's rows of source queue and cuda (cuda_reclaim.COUNTERS, defined once in the C
ABI header cuda_reclaim/reclaim_abi.h), in the table's order, then `conserved`; a line that lacks one of them
is not a well-formed report. cuda_reclaim checks the conservation law (cuda_reclaim.conserved). cuda_reclaim is
imported when a report is first parsed, so a harness whose children never load it (and so never write a
report) does not need it.
"""

PREFIX = "cuda-reclaim: handed_over="  # other "cuda-reclaim: ..." lines (fatal errors, warnings) are not reports


def _cuda_reclaim():
    import cuda_reclaim

    return cuda_reclaim


def fields():
    """The counter fields of a report, in its order: the rows of source queue and cuda of the counter table."""
    table = _cuda_reclaim().COUNTERS
    return [key for key, counter in table.items() if counter.source in ("queue", "cuda")]


def parse_line(line):
    """One report line as a dict; ValueError naming the line when it is not a well-formed report."""
    if not line.startswith(PREFIX):
        raise ValueError(f"not an exit report line: {line!r}")
    report = {}
    for field in line[len("cuda-reclaim: "):].split():
        key, sep, value = field.partition("=")
        if not sep or not key or key in report:
            raise ValueError(f"malformed field {field!r} in exit report line: {line!r}")
        if key == "conserved":
            report[key] = value
        elif value.isdigit():
            report[key] = int(value)
        else:
            raise ValueError(f"counter {key} is not a number in exit report line: {line!r}")
    required = (*fields(), "conserved")
    missing = [key for key in required if key not in report]
    if missing:
        raise ValueError(f"exit report line lacks {', '.join(missing)}: {line!r}")
    return report


def find_reports(text):
    """Every exit report in `text` (e.g. a child's stderr), in order, as dicts; other lines are ignored."""
    # The report is one write(2), but another thread may have left a partial line on stderr just before
    # it (an "Exception ignored in: " of a daemon thread at exit): take the report from where it starts.
    return [parse_line(line[line.index(PREFIX):]) for line in text.splitlines() if PREFIX in line]


def last_report(text):
    """The last exit report in `text`; ValueError quoting `text` when there is none."""
    reports = find_reports(text)
    if not reports:
        raise ValueError(f"no exit report in:\n{text}")
    return reports[-1]


def conserved(counters):
    """The conservation law on a report or a stats() dict (cuda_reclaim.conserved)."""
    return _cuda_reclaim().conserved(counters)
