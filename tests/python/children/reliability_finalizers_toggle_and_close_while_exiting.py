"""Child of test_reliability.py: finalizer on the drain thread toggles keeps alive and closes while exiting.

Ends by printing "done"; a hang is caught by the test's timeout."""

import cuda_reclaim
class Busy:
    def __init__(self, i): self.i = i
    def __del__(self):
        cuda_reclaim.defer_release(object())
        if self.i % 97 == 0:
            cuda_reclaim.set_auto_drain("off"); cuda_reclaim.set_auto_drain("thread")
        if self.i == 4000:
            cuda_reclaim.close()
for i in range(5000):
    cuda_reclaim.defer_release(Busy(i))
print("done", flush=True)
