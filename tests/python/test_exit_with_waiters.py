"""A thread that waits for CUDA never holds the exit: the barrier's exit hook, registered once per process at
import, closes the barrier before Python joins the threads that are not daemons (concurrent.futures' workers
among them), and the waits there return False."""

import pytest

import fake_cuda

# A graph that CUDA keeps for good, with one attachment: what every waiter below waits for.
HELD = """
graph = fake.fake_cuda_graph_create()
attachment = cuda_reclaim.keep_alive(graph, P())
node = cuda_reclaim.add_host_node(fake.fake_cuda_graph_create(), print)
"""

WAITS = {
    "Attachment.wait": "attachment.wait()",
    "NodeHandle.wait": "node.wait()",
    "wait_handed_back": "cuda_reclaim.wait_handed_back()",
    "flush": "cuda_reclaim.flush()",
}


@pytest.mark.parametrize("wait", sorted(WAITS))
def test_an_executor_worker_waiting_for_cuda_does_not_hold_the_exit(wait):
    # concurrent.futures is imported after the attachment, as a program that starts a pool late would.
    result = fake_cuda.run(
        HELD
        + f"""
import concurrent.futures, os
pool = concurrent.futures.ThreadPoolExecutor(1)
def work():
    started.set()
    returned = {WAITS[wait]}
    os.write(1, f"returned {{returned!r}}\\n".encode())
started = threading.Event()
pool.submit(work)
started.wait()
wait_until(lambda: _reclaim._hand_back_stats()["sleepers"] >= 1)
print("main ends", flush=True)
""",
        timeout=60,
    )
    assert "main ends" in result.stdout
    expected = "returned 0" if wait == "flush" else "returned False"
    assert expected in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("wait", sorted(WAITS))
def test_a_plain_thread_waiting_for_cuda_does_not_hold_the_exit(wait):
    result = fake_cuda.run(
        HELD
        + f"""
import os
def work():
    returned = {WAITS[wait]}
    os.write(1, f"returned {{returned!r}}\\n".encode())
threading.Thread(target=work).start()
wait_until(lambda: _reclaim._hand_back_stats()["sleepers"] >= 1)
""",
        timeout=60,
    )
    expected = "returned 0" if wait == "flush" else "returned False"
    assert expected in result.stdout, result.stdout + result.stderr


def test_attachments_and_waits_add_no_threading_exit_hooks():
    # Each keep_alive, keep_alive_until and wait leaves threading's exit hooks as the import left them.
    fake_cuda.run(
        """
hooks = len(threading._threading_atexits)
graph = fake.fake_cuda_graph_create()
for _ in range(500):
    cuda_reclaim.keep_alive(graph, P()).wait(0)
    cuda_reclaim.keep_alive_until(0x5100, P())
    cuda_reclaim.wait_handed_back(0)
    cuda_reclaim.flush(0)
assert len(threading._threading_atexits) == hooks, (hooks, len(threading._threading_atexits))
print("ok")
""",
        timeout=120,
    )


def test_threads_waiting_at_once_raise_nothing():
    # Threads switching as often as they can while two of them attach and wait at once, and other exit hooks
    # are registered meanwhile (as modules imported then would).
    fake_cuda.run(
        """
sys.setswitchinterval(1e-6)
graph = fake.fake_cuda_graph_create()
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
""",
        timeout=120,
    )
