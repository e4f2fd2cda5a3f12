"""Child of test_reliability.py: toggling off and on from a finalizer leaves one drain thread.

Ends by printing "done"; a hang is caught by the test's timeout."""

import threading, cuda_reclaim, scenario
from cuda_reclaim import _auto
toggled = threading.Event()
toggler = []  # the drain thread that runs the toggles
class Toggles:
    def __del__(self):
        toggler.append(threading.current_thread())
        cuda_reclaim.set_auto_drain("off")
        cuda_reclaim.set_auto_drain("thread")
        toggled.set()
with scenario.auto_drain_off():  # the queue holds the only reference: the drain thread runs __del__
    cuda_reclaim.defer_release(Toggles())
assert toggled.wait(30)
def drain_threads():
    return [t for t in threading.enumerate() if t.name == "cuda-reclaim-drain"]
toggler[0].join(30)  # stopped by the toggle, it starts its successor as it leaves
assert not toggler[0].is_alive(), "the toggled drain thread never left"
assert len(drain_threads()) == 1, drain_threads()
released = threading.Event()
class Marker:
    def __del__(self): released.set()
cuda_reclaim.defer_release(Marker())
assert released.wait(30)
print("done", flush=True)
