"""Child of test_reliability.py: exit does not hang when a non daemon thread waits for finalizers to free slots.

Ends by printing "done"; a hang is caught by the test's timeout."""

import threading, time, cuda_reclaim as cr
slots = threading.Semaphore(4)
handing_over = threading.Event()
class Buffer:
    def __del__(self): slots.release()
def worker():
    for i in range(200):
        slots.acquire(); cr.defer_release(Buffer()); handing_over.set()
        time.sleep(0.001)  # a paced producer: it still needs releases when the main program ends
    print("done", flush=True)
threading.Thread(target=worker).start()
handing_over.wait(30)  # main returns while the worker still needs releases
