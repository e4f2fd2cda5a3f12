"""Child of test_reliability.py: fork with the auto drain off leaves the parent queue alone.

Ends by printing "done"; a hang is caught by the test's timeout."""

import os, cuda_reclaim
cuda_reclaim.set_auto_drain("off")
for _ in range(5):
    cuda_reclaim.defer_release(object())
pid = os.fork()
if pid == 0:
    s = cuda_reclaim.stats()
    os._exit(0 if s["pending"] == 0 and s["abandoned_after_fork"] == 5 else 4)
_, status = os.waitpid(pid, 0)
assert os.WEXITSTATUS(status) == 0, status
assert cuda_reclaim.pending() == 5, "off means only the drains you call: fork drained nothing"
assert cuda_reclaim.drain() == 5
print("done", flush=True)
