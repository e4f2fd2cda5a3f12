"""Child of test_native_producers.py: the automatic drain starts on the C API import and releases what
native threads hand over while the main thread sits in C. Prints "ok"."""

import threading
import weakref

import cuda_reclaim
from cuda_reclaim import _auto

assert not _auto.is_thread_running(), "no thread before anything is handed over"
import _native_producers  # noqa: E402 - cuda_reclaim_import(): a C API user, imported only now

assert _auto.is_thread_running(), "the C API import starts the auto drain"


class P:
    pass


left = [1000]
counting = threading.Lock()
all_gone = threading.Event()


def gone(_):
    with counting:
        left[0] -= 1
        if left[0] == 0:
            all_gone.set()


objs = [P() for _ in range(1000)]
refs = [weakref.ref(o, gone) for o in objs]
_native_producers.hand_over_detached(objs, 2, 100)
del objs
all_gone.wait(30)  # the main thread sits in C (the Event's lock), never running bytecode long
assert all(r() is None for r in refs), "auto drain released everything"
s = cuda_reclaim.stats()
assert s["handed_over"] == s["released"] == 1000, s
print("ok")
