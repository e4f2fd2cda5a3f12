"""The hand-back barrier's edges under load (fake driver): waits since a mark with many long-lived graphs
held in older epochs, a wait that returns True while the hand-back that ends it is still running, Attachment
waiters among many other hand-backs, and the C API's wait once the queue is closed."""

import fake_cuda

SHORT = 60  # seconds: a child that has not exited by then is hung


# Six graphs held for good, one epoch each (a mark between them), then a mark: what is attached after the
# mark is waited for alone, by wait_handed_back and flush, however many older epochs still hold a graph.
# The same with a hundred such epochs. No epoch shares a slot.
def test_a_wait_since_a_mark_never_waits_for_graphs_held_in_older_epochs():
    fake_cuda.run(
        """
for held_epochs in (6, 100):
    held = []
    for _ in range(held_epochs):
        graph = fake.fake_cuda_graph_create()
        cuda_reclaim.keep_alive(graph, P())
        held.append(graph)
        cuda_reclaim.hand_back_mark()        # the next graph counts in a new epoch
    mark = cuda_reclaim.hand_back_mark()
    later = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(later, P())
    assert cuda_reclaim.wait_handed_back(0, since=mark) is False, "the later graph is still held"
    fake.fake_cuda_graph_destroy(later)
    assert cuda_reclaim.wait_handed_back(5, since=mark) is True, (held_epochs, _reclaim._hand_back_stats())
    assert cuda_reclaim.flush(since=mark) == 1      # no limit: a wait for the older graphs would hang here
    assert cuda_reclaim.wait_handed_back(0) is False, "the older graphs are still held"
    stats = _reclaim._hand_back_stats()
    assert stats["shared_slots"] == 0, stats
    assert stats["held"] == held_epochs and stats["slots_in_use"] == held_epochs, stats
    for graph in held:
        fake.fake_cuda_graph_destroy(graph)
    assert cuda_reclaim.flush() == held_epochs
    assert _reclaim._hand_back_stats()["held"] == 0
print("ok")
""",
        timeout=SHORT,
    )


# Another thread hands an attachment back while the main thread waits for everything: whenever the wait
# returns True, the attachment it covered already says done() (its cell is set before its ticket ends).
def test_a_true_wait_finds_every_covered_attachment_done():
    fake_cuda.run(
        """
import queue
TRIES = 2000
graphs = queue.Queue()
def hand_back():
    while True:
        graph = graphs.get()
        if graph is None:
            return
        fake.fake_cuda_graph_destroy(graph)   # runs the destructor here, the GIL released (ctypes)
thread = threading.Thread(target=hand_back)
thread.start()
true_waits = not_done = 0
for attempt in range(TRIES):
    mark = cuda_reclaim.hand_back_mark()
    graph = fake.fake_cuda_graph_create()
    attachment = cuda_reclaim.keep_alive(graph, P())
    graphs.put(graph)
    returned = cuda_reclaim.wait_handed_back(30, since=mark if attempt % 2 else None)
    if returned:
        true_waits += 1
        if not attachment.done():
            not_done += 1
    if attempt % 100 == 99:
        cuda_reclaim.drain()
graphs.put(None)
thread.join()
cuda_reclaim.flush()
assert not_done == 0, f"{not_done} of {true_waits} waits returned True before the attachment was done"
assert true_waits == TRIES, true_waits
print("ok")
""",
        timeout=SHORT,
    )


# Four threads wait on four attachments that stay held while a thousand other attachments are handed back:
# each waiter sleeps on its own cell's futex bucket, so it is woken a handful of times at most (a bucket
# shared by chance), never once per hand-back.
def test_attachment_waiters_are_not_woken_by_other_attachments_hand_backs():
    fake_cuda.run(
        """
WAITERS = 4
OTHERS = 1000
kept = [fake.fake_cuda_graph_create() for _ in range(WAITERS)]
attachments = [cuda_reclaim.keep_alive(graph, P()) for graph in kept]
results = [None] * WAITERS
def wait(i):
    results[i] = attachments[i].wait(60)
threads = [threading.Thread(target=wait, args=(i,)) for i in range(WAITERS)]
for thread in threads:
    thread.start()
wait_until(lambda: _reclaim._hand_back_stats()["sleepers"] == WAITERS)
before = _reclaim._hand_back_stats()
for _ in range(OTHERS):
    graph = fake.fake_cuda_graph_create()
    other = cuda_reclaim.keep_alive(graph, P())
    fake.fake_cuda_graph_destroy(graph)
    assert other.done()
after = _reclaim._hand_back_stats()
assert all(result is None for result in results), results
woken = after["futex_wakes"] - before["futex_wakes"]
assert woken < 40, f"{woken} futex wakes for {OTHERS} hand-backs of attachments nobody waits for"
wakeups = after["cell_wakeups"] - before["cell_wakeups"]
assert wakeups < 40, f"the {WAITERS} waiters woke {wakeups} times in all during {OTHERS} other hand-backs"
for graph in kept:
    fake.fake_cuda_graph_destroy(graph)
for thread in threads:
    thread.join(60)
assert results == [True] * WAITERS, results
assert cuda_reclaim.flush() == WAITERS + OTHERS
print("ok")
""",
        timeout=SHORT,
    )


# The C API's wait_handed_back (through the capsule's table) returns 0 once the queue is closed, also
# when nothing is held, as the docs say and as the Python form returns False.
def test_the_c_api_wait_after_close_is_zero_with_nothing_held():
    fake_cuda.run(
        """
import ctypes
get = ctypes.pythonapi.PyCapsule_GetPointer
get.restype = ctypes.c_void_p
get.argtypes = [ctypes.py_object, ctypes.c_char_p]
table = get(_reclaim._C_API, b"cuda_reclaim._reclaim._C_API")
pointers = (ctypes.c_void_p * 12).from_address(table + 8)
wait = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_double)(pointers[11])
assert _reclaim._hand_back_stats()["held"] == 0
assert wait(0.0) == 1 and cuda_reclaim.wait_handed_back(0) is True, "open, nothing held"
cuda_reclaim.close()
assert _reclaim._hand_back_stats()["held"] == 0
assert cuda_reclaim.wait_handed_back(0) is False
assert wait(0.0) == 0, "closed: 0, though nothing is held"
assert wait(-1.0) == 0, "closed, no limit: 0 at once"
print("ok")
""",
        timeout=SHORT,
    )
