"""Child of test_api_conventions.py: drain(timeout=None) waits for a hand-over made 0.2 s later by a timer, then,
with nothing queued, returns 0 when a timer calls close(). Prints "released N", "after close N", "done"."""

import threading

import cuda_reclaim

cuda_reclaim.set_auto_drain("off")


class Payload:
    pass


later = threading.Timer(0.2, lambda: cuda_reclaim.defer_release(Payload()))
later.start()
print("released", cuda_reclaim.drain(timeout=None))
later.join()
closer = threading.Timer(0.2, cuda_reclaim.close)
closer.start()
print("after close", cuda_reclaim.drain(timeout=None))
closer.join()
print("done")
