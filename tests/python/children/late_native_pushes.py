"""Child of test_exit_report: native threads keep handing references over after cuda_reclaim's final
drain, through finalization and exit(); the exit report (CUDA_RECLAIM_REPORT=1) must count them.

Prints "late push seen" once a push after the final drain was counted, before Python finalizes.
"""

import atexit
import time


def wait_for_a_late_push():
    """Registered before cuda_reclaim is imported, so it runs after its final drain and close."""
    import cuda_reclaim

    deadline = time.monotonic() + 30
    while cuda_reclaim.stats()["leaked_after_close"] < 1:
        if time.monotonic() > deadline:
            raise SystemExit("no native push arrived after the final drain within 30 s")
        time.sleep(0.005)  # the pace of a poll with a deadline, on the package's counters
    print("late push seen", flush=True)


atexit.register(wait_for_a_late_push)

import cuda_reclaim  # noqa: E402 - after the hook above, on purpose
import _native_producers  # noqa: E402


class Payload:
    pass


for _ in range(100):
    cuda_reclaim.defer_release(Payload())
# 20 native pushes spaced 50 ms apart: some land after the final drain (while the hook above waits, then
# during finalization), the rest never happen because the process is gone.
_native_producers.hand_over_detached([Payload() for _ in range(20)], 1, 50000)
