"""Child of test_hand_back_wait_covers_exactly_what_it_waits_for.py: one scenario per run, named by the first
argument, against the fake libcuda (tests/graph/fake_libcuda.cc) that CUDA_RECLAIM_LIBCUDA names."""

import queue
import threading

from cuda_reclaim import _reclaim
from fake_driver_child import P, cuda_reclaim, fake, wait_until

import scenario


def a_wait_since_a_mark_never_waits_for_graphs_held_in_older_epochs():
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
        assert stats["shared_counts"] == 0, stats
        assert stats["held"] == held_epochs and stats["counts_in_use"] == held_epochs, stats
        for graph in held:
            fake.fake_cuda_graph_destroy(graph)
        assert cuda_reclaim.flush() == held_epochs
        assert _reclaim._hand_back_stats()["held"] == 0
    print("ok")


def a_true_wait_finds_every_covered_attachment_done():
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


def attachment_waiters_are_not_woken_by_other_attachments_hand_backs():
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


if __name__ == "__main__":
    scenario.run(
        a_wait_since_a_mark_never_waits_for_graphs_held_in_older_epochs,
        a_true_wait_finds_every_covered_attachment_done,
        attachment_waiters_are_not_woken_by_other_attachments_hand_backs,
    )
