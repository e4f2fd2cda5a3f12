"""Child of test_reliability.py: exit does not hang when a non daemon thread waits for finalizers to free slots.

Ends by printing "done"; a hang is caught by the test's timeout."""

import threading, time, cuda_reclaim as cr
slots = threading.Semaphore(4)
class Buffer:
    def __del__(self): slots.release()
def worker():
    for i in range(200):
        slots.acquire(); cr.defer_release(Buffer()); time.sleep(0.001)
    print("done", flush=True)
threading.Thread(target=worker).start()
time.sleep(0.02)   # main returns while the worker still needs releases
