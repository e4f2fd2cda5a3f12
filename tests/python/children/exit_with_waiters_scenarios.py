"""Child of test_exit_with_waiters.py, run against the fake driver (fake_cuda.run_script): one scenario per run,
named by the first argument. The waiters wait for a graph that CUDA keeps for good (held()), and the program
ends while they wait."""

import os
import sys
import threading

from cuda_reclaim import _reclaim
from fake_driver_child import P, cuda_reclaim, fake, wait_until

import scenario


def held():
    """A graph that CUDA keeps for good, with one attachment, and a host node of another such graph: what
    every waiter waits for. Returns {name of the wait: a function that waits}."""
    graph = fake.fake_cuda_graph_create()
    attachment = cuda_reclaim.keep_alive(graph, P())
    node = cuda_reclaim.add_host_node(fake.fake_cuda_graph_create(), print)
    return {
        "Attachment.wait": attachment.wait,
        "NodeHandle.wait": node.wait,
        "wait_handed_back": cuda_reclaim.wait_handed_back,
        "flush": cuda_reclaim.flush,
    }


def an_executor_worker_waits(wait):
    """A worker of a ThreadPoolExecutor (concurrent.futures imported after the attachment, as a program that
    starts a pool late would) calls `wait` with no timeout; the main thread ends once it sleeps there."""
    waits = held()
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(1)
    started = threading.Event()

    def work():
        started.set()
        returned = waits[wait]()
        os.write(1, f"returned {returned!r}\n".encode())

    pool.submit(work)
    started.wait()
    wait_until(lambda: _reclaim._hand_back_stats()["sleepers"] >= 1)
    print("main ends", flush=True)


def a_plain_thread_waits(wait):
    """A thread that is not a daemon calls `wait` with no timeout; the main thread ends once it sleeps there."""
    waits = held()

    def work():
        returned = waits[wait]()
        os.write(1, f"returned {returned!r}\n".encode())

    threading.Thread(target=work).start()
    wait_until(lambda: _reclaim._hand_back_stats()["sleepers"] >= 1)


def attachments_and_waits_add_no_threading_exit_hooks():
    hooks = len(threading._threading_atexits)
    graph = fake.fake_cuda_graph_create()
    for _ in range(500):
        cuda_reclaim.keep_alive(graph, P()).wait(0)
        cuda_reclaim.keep_alive_until(0x5100, P())
        cuda_reclaim.wait_handed_back(0)
        cuda_reclaim.flush(0)
    assert len(threading._threading_atexits) == hooks, (hooks, len(threading._threading_atexits))
    print("ok")


def threads_waiting_at_once_raise_nothing():
    sys.setswitchinterval(1e-6)
    errors = []

    def waits():
        try:
            for _ in range(2000):
                threading._register_atexit(lambda: None)
                cuda_reclaim.wait_handed_back(0)
                cuda_reclaim.flush(0)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=waits) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    print("ok")


if __name__ == "__main__":
    scenario.run(
        an_executor_worker_waits,
        a_plain_thread_waits,
        attachments_and_waits_add_no_threading_exit_hooks,
        threads_waiting_at_once_raise_nothing,
    )
