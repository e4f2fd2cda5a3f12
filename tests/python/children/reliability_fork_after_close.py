"""Child of test_reliability.py: a fork child of a closed queue gets an open queue and an automatic drain.

Ends by printing "done"; a hang is caught by the test's timeout."""

import os, threading, cuda_reclaim
cuda_reclaim.close()
pid = os.fork()
if pid == 0:
    released = threading.Event()
    class Marker:
        def __del__(self): released.set()
    ok = not cuda_reclaim.is_closed() and cuda_reclaim.defer_release(Marker())
    ok = ok and released.wait(30)
    os._exit(0 if ok else 5)
_, status = os.waitpid(pid, 0)
assert os.WEXITSTATUS(status) == 0, status
assert cuda_reclaim.is_closed()
print("done", flush=True)
