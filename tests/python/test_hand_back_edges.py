"""The hand-back barrier's edges, each once a bug (fake driver): exit ordering against non-daemon threads,
executors and a shut barrier; fork with the asyncio lock held and a parent's ticket ended in the child; a
finalizer that a drain runs; a late import; pickling; reference cycles; two uvloop loops; a stress of every
kind of waiter against concurrent attachments and hand-backs."""

import fake_cuda
from conftest import run_child

SHORT = 25  # seconds: a child that has not exited by then is hung


# The exit hook shuts the barrier (the queue is still open then): an asyncio wait in a non-daemon thread
# ends with False, and the exit goes on.
def test_an_asyncio_waiter_in_a_non_daemon_thread_does_not_hold_the_exit():
    result = fake_cuda.run(
        """
import asyncio, cuda_reclaim.asyncio
graph = fake.fake_cuda_graph_create()
cuda_reclaim.keep_alive(graph, P())   # never handed back
started = threading.Event()
async def main():
    started.set()
    return await cuda_reclaim.asyncio.handed_back()
class Worker(threading.Thread):   # not a daemon: Python joins it at exit
    def run(self):
        print("asyncio waiter returned", asyncio.run(main()), flush=True)
Worker().start()
started.wait()
time.sleep(0.2)
print("exiting", flush=True)
""",
        timeout=SHORT,
    )
    assert "asyncio waiter returned False" in result.stdout, result.stdout


# An await that starts after the barrier was shut (the queue still open) ends at once.
def test_an_asyncio_await_after_the_barrier_was_shut_ends_at_once():
    fake_cuda.run(
        """
import asyncio, cuda_reclaim.asyncio
graph = fake.fake_cuda_graph_create()
cuda_reclaim.keep_alive(graph, P())
_reclaim._hand_back_shut()          # what threading's exit hook does (cuda_reclaim/_hand_back.py)
assert cuda_reclaim.wait_handed_back() is False   # the thread form sees the shut
async def main():
    return await asyncio.wait_for(cuda_reclaim.asyncio.handed_back(), 3)
try:
    print("returned", asyncio.run(main()))
except asyncio.TimeoutError:
    raise SystemExit("asyncio.handed_back() ignored the barrier's shut and waited until the timeout")
""",
        timeout=SHORT,
    )


# threading runs its exit hooks last-registered first; concurrent.futures registers its join of the workers
# when first imported, after the package here: the barrier's hook must still run first.
def test_an_executor_worker_waiting_does_not_hold_the_exit():
    result = fake_cuda.run(
        """
print("concurrent.futures.thread imported before:", "concurrent.futures.thread" in sys.modules, flush=True)
from concurrent.futures import ThreadPoolExecutor  # the usual place: after the package was imported
graph = fake.fake_cuda_graph_create()
cuda_reclaim.keep_alive(graph, P())   # never handed back
executor = ThreadPoolExecutor(1)
future = executor.submit(cuda_reclaim.wait_handed_back)
wait_until(lambda: _reclaim._hand_back_stats()["sleepers"] >= 1)
future.add_done_callback(lambda f: print("executor waiter returned", f.result(), flush=True))
print("exiting", flush=True)
""",
        timeout=SHORT,
    )
    assert "executor waiter returned False" in result.stdout, result.stdout


# The child gets a fresh lock: another thread of the parent may have held it at the fork.
def test_a_fork_while_another_thread_holds_the_asyncio_lock_does_not_hang_the_child():
    fake_cuda.run(
        """
import os, cuda_reclaim.asyncio
from cuda_reclaim import _asyncio_barrier
held, release = threading.Event(), threading.Event()
def holder():
    with _asyncio_barrier._lock:   # as a loop thread inside _complete_waiters() would, for a moment
        held.set()
        release.wait()
threading.Thread(target=holder, daemon=True).start()
held.wait()
pid = os.fork()
if pid == 0:
    os._exit(0)                    # the child never gets here: the at-fork hook blocks first
release.set()
deadline = time.monotonic() + 5
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise SystemExit("the fork child hung in cuda_reclaim._asyncio_barrier._after_fork_in_child")
print("ok")
""",
        timeout=SHORT,
    )


# A payload attached in the parent carries its ticket; if its hand-back runs in the child (the fake driver
# lets it), the child's emptied epoch counts stay at zero instead of wrapping.
def test_a_parents_ticket_ended_in_a_fork_child_leaves_its_barrier_counting():
    fake_cuda.run(
        """
import os
graph = fake.fake_cuda_graph_create()
cuda_reclaim.keep_alive(graph, P())
pid = os.fork()
if pid == 0:
    fake.fake_cuda_graph_destroy(graph)   # the parent's attachment handed back here
    s = _reclaim._hand_back_stats()
    print("child stats after the parent's hand-back:", s, flush=True)
    other = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(other, P())
    waiter_ok = cuda_reclaim.wait_handed_back(2)
    print("child wait_handed_back with one of its own held:", waiter_ok, flush=True)
    fake.fake_cuda_graph_destroy(other)
    after = cuda_reclaim.wait_handed_back(2)
    print("child wait_handed_back after its own hand-back:", after, flush=True)
    ok = s["held"] == 0 and waiter_ok is False and after is True
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, "the child's barrier is broken"
print("ok")
""",
        timeout=SHORT,
    )


# What a finalizer waits for may be queued behind it in the same drain: inside a drain, waits only look.
def test_a_finalizer_that_a_drain_runs_never_waits_for_itself():
    fake_cuda.run(
        """
g1, g2 = fake.fake_cuda_graph_create(), fake.fake_cuda_graph_create()
results = []
class Flushes:
    def __del__(self):
        # Inside the drain: what it waits for (g2) is destroyed by an item queued behind it, so it must not
        # block; it says the wait is not over.
        results.append((cuda_reclaim.wait_handed_back(None), cuda_reclaim.flush(None)))
class GraphWrapper:          # e.g. a cuda.core Graph whose release is deferred to a drain
    def __del__(self):
        fake.fake_cuda_graph_destroy(g2)
cuda_reclaim.keep_alive(g1, Flushes())
attachment = cuda_reclaim.keep_alive(g2, P())
fake.fake_cuda_graph_destroy(g1)                 # queued first: the Attachment holding Flushes
cuda_reclaim.defer_release(GraphWrapper())       # queued behind it
cuda_reclaim.drain()
assert results == [(False, 0)], results  # the wait looked; the outer drain had taken the wrapper already
assert attachment.done() and cuda_reclaim.wait_handed_back(5) is True
print("ok")
""",
        timeout=SHORT,
    )


# threading refuses new exit hooks once it is shutting down: the import still works (the barrier is shut).
def test_the_first_import_during_threading_shutdown_works():
    result = run_child(
        """
import threading, time
def late():
    time.sleep(0.5)  # the main thread has returned: threading._shutdown is joining us
    try:
        import cuda_reclaim
        print("import ok", flush=True)
    except BaseException as error:
        print("import failed:", repr(error), flush=True)
threading.Thread(target=late).start()
""",
        timeout=SHORT,
    )
    assert "import ok" in result.stdout, result.stdout + result.stderr


def test_a_node_handle_pickles_and_copies_as_its_int():
    fake_cuda.run(
        """
import pickle, copy
graph = fake.fake_cuda_graph_create()
node = cuda_reclaim.add_host_node(graph, print)
again = pickle.loads(pickle.dumps(node))
assert again == node and type(again) is cuda_reclaim.NodeHandle
assert copy.copy(node) == node and copy.deepcopy(node) == node
print("ok")
""",
        timeout=SHORT,
    )


# `obj.attachment = keep_alive(graph, obj)` is a cycle: collected once CUDA let go and a drain released it.
def test_a_cycle_through_an_attachment_is_collected_once_cuda_let_go():
    fake_cuda.run(
        """
import gc
graph = fake.fake_cuda_graph_create()
class Buffer: pass
buffer = Buffer()
buffer.attachment = cuda_reclaim.keep_alive(graph, buffer)  # "keep me alive until CUDA is done; let me wait"
dead = weakref.ref(buffer)
del buffer
fake.fake_cuda_graph_destroy(graph)
assert cuda_reclaim.flush(5) == 1
gc.collect(); gc.collect()
assert dead() is None, "the Buffer <-> Attachment cycle was not collected"
print("ok")
""",
        timeout=SHORT,
    )


# Two uvloop loops in two threads, both waiting: the one eventfd wakes both.
def test_two_uvloop_loops_both_resume():
    fake_cuda.run(
        """
import asyncio, cuda_reclaim.asyncio
try:
    import uvloop
except ImportError:
    print("no uvloop"); raise SystemExit(0)
graph = fake.fake_cuda_graph_create()
cuda_reclaim.keep_alive(graph, P())
results, ready = [], threading.Barrier(3)
def run_loop():
    async def main():
        task = asyncio.ensure_future(cuda_reclaim.asyncio.handed_back())
        await asyncio.sleep(0.05)
        ready.wait()
        results.append(await asyncio.wait_for(task, 10))
    uvloop.run(main())
threads = [threading.Thread(target=run_loop) for _ in range(2)]
for t in threads: t.start()
ready.wait()
time.sleep(0.1)
fake.fake_cuda_graph_destroy(graph)
for t in threads: t.join(20)
assert results == [True, True], results
print("ok")
""",
        timeout=SHORT,
    )


# Waiters of every kind against concurrent attachments and hand-backs: none is lost.
def test_every_kind_of_waiter_against_concurrent_hand_backs_loses_no_wake_up():
    fake_cuda.run(
        """
import asyncio, random, cuda_reclaim.asyncio
stop = threading.Event()
errors = []
def churn(seed):
    rng = random.Random(seed)
    while not stop.is_set():
        graphs = [fake.fake_cuda_graph_create() for _ in range(rng.randint(1, 4))]
        attachments = [cuda_reclaim.keep_alive(g, P()) for g in graphs]
        rng.shuffle(graphs)
        for g in graphs:
            fake.fake_cuda_graph_destroy(g)
        for a in attachments:
            if not a.done():
                errors.append("attachment not done after its graph was destroyed")
def waiter():
    n = 0
    while not stop.is_set():
        if cuda_reclaim.wait_handed_back(10) is not True:
            errors.append("wait_handed_back timed out: lost wake-up")
        n += 1
def cell_waiter():
    while not stop.is_set():
        g = fake.fake_cuda_graph_create()
        a = cuda_reclaim.keep_alive(g, P())
        t = threading.Thread(target=fake.fake_cuda_graph_destroy, args=(g,))
        t.start()
        if a.wait(10) is not True:
            errors.append("Attachment.wait timed out: lost wake-up")
        t.join()
def loop_waiter():
    async def main():
        while not stop.is_set():
            if await asyncio.wait_for(cuda_reclaim.asyncio.handed_back(), 10) is not True:
                errors.append("asyncio.handed_back returned False")
    asyncio.run(main())
def drainer():
    while not stop.is_set():
        cuda_reclaim.drain()
        time.sleep(0.001)
threads = [threading.Thread(target=f, args=a) for f, a in
           [(churn, (1,)), (churn, (2,)), (waiter, ()), (waiter, ()), (cell_waiter, ()), (loop_waiter, ()),
            (drainer, ())]]
for t in threads: t.start()
time.sleep(3)
stop.set()
for t in threads: t.join(30)
assert not any(t.is_alive() for t in threads), "a thread is stuck"
assert not errors, errors[:5]
s = _reclaim._hand_back_stats()
assert s["held"] == 0, s
print("ok", s)
""",
        timeout=90,
    )


