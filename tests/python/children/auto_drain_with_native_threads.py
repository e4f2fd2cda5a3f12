"""Child of test_native_producers.py: the automatic drain starts on the C API import and releases what
native threads hand over while the main thread sits in C. Prints "ok"."""

import time
import weakref

import cuda_reclaim
from cuda_reclaim import _auto

assert not _auto.is_thread_running(), "no thread before anything is handed over"
import _native_producers  # noqa: E402 - cuda_reclaim_import(): a C API user, imported only now

assert _auto.is_thread_running(), "the C API import starts the auto drain"


class P:
    pass


objs = [P() for _ in range(1000)]
refs = [weakref.ref(o) for o in objs]
_native_producers.hand_over_detached(objs, 2, 100)
del objs
deadline = time.monotonic() + 30
while any(r() is not None for r in refs) and time.monotonic() < deadline:
    time.sleep(0.05)  # the main thread sits in C (sleep), never running bytecode long
assert all(r() is None for r in refs), "auto drain released everything"
s = cuda_reclaim.stats()
assert s["handed_over"] == s["released"] == 1000, s
print("ok")
