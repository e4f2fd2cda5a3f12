"""Child of test_exit_report.py: imports the package and hands one object over, then exits (the exit report,
when asked for, follows on stderr)."""

import cuda_reclaim

cuda_reclaim.defer_release(object())
