"""One child of the callbacks torture (callbacks_torture.py): Python callbacks from (fake) CUDA threads
while the interpreter ends one way or another.

    python callbacks_child.py SCENARIO SEED

Needs cuda_reclaim on sys.path and CUDA_RECLAIM_LIBCUDA naming the fake driver (tests/graph/fake_libcuda.cc),
whose persistent "CUDA threads" keep running streams of short kernels, host calls (launch_host_func),
keep_alive_until host functions and host-node firings through the end of the script, Py_Finalize and
exit(). Writes to stderr:

    LATE-CALLBACK ...    a callback ran after close() had returned (must never happen)
    AFTER-CLOSE k=v ...  the counters right after the final close (from an atexit hook that runs after it)

and cuda-reclaim's own exit report (CUDA_RECLAIM_REPORT=1).
"""

import atexit
import ctypes
import os
import random
import signal
import sys
import threading

# Started under `nohup ... &` or by a runner that ignores SIGINT, this process would inherit that: its
# ending must be the scenario's, not the caller's shell's, so back to Python's defaults.
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGQUIT, signal.SIG_DFL)

SCENARIOS = {
    # name: expected exit status (negative: killed by that signal)
    "exit": 0,  # the script ends while the CUDA threads keep firing
    "close_midway": 0,  # cuda_reclaim.close() while traffic continues; later launches are refused
    "exception": 1,  # an unhandled exception ends the script
    "keyboard_interrupt": -2,  # CPython re-raises SIGINT after finalizing
    "sys_exit_in_callback": 0,  # callbacks raise SystemExit (into their futures), the script then ends
    "launching_threads": 0,  # non-daemon threads still launching while the interpreter shuts down
    "fork": 0,  # a child is forked mid-traffic and exits on its own (two exit reports)
}

closed = threading.Event()  # set once close() has returned: no callback may run from then on


def write(text):
    os.write(2, (text + "\n").encode())


def after_close():
    # Registered before cuda_reclaim is imported (start()), so atexit runs it after cuda_reclaim's own
    # hook (the final drain and close).
    closed.set()
    s = cuda_reclaim.stats()
    keys = ("calls_run", "calls_cancelled", "calls_outstanding", "held_by_cuda", "attached_to_cuda",
            "handed_back_by_cuda")
    write("AFTER-CLOSE " + " ".join(f"{k}={s[k]}" for k in keys))


cuda_reclaim = None  # imported by start(), after after_close is registered


def load_fake():
    fake = ctypes.CDLL(os.environ["CUDA_RECLAIM_LIBCUDA"])
    for name, restype, argtypes in (
        ("fake_cuda_graph_create", ctypes.c_void_p, []),
        ("fake_cuda_graph_instantiate", ctypes.c_void_p, [ctypes.c_void_p]),
        ("fake_cuda_graph_launch", None, [ctypes.c_void_p, ctypes.c_void_p]),
        ("fake_cuda_start_threads", None, [ctypes.c_int]),
        ("fake_cuda_stream_sleep", None, [ctypes.c_void_p, ctypes.c_uint]),
    ):
        function = getattr(fake, name)
        function.restype, function.argtypes = restype, argtypes
    return fake


class Payload:
    pass


def callback(i):
    if closed.is_set():
        write(f"LATE-CALLBACK {i}")
    return i


def raises_system_exit(i):
    callback(i)
    raise SystemExit(i)


def enqueue(fake, rng, streams, graph_exec, count, fn):
    """Puts `count` rounds of work on the streams: a short kernel, a host call, a keep_alive_until, and
    now and then a launch of the graph with the host node. Launches refused after a close are fine."""
    futures = []
    for i in range(count):
        stream = streams[i % len(streams)]
        fake.fake_cuda_stream_sleep(stream, rng.randrange(50, 400))
        futures.append(cuda_reclaim.launch_host_func(stream, fn, i))
        cuda_reclaim.keep_alive_until(stream, Payload())
        if i % 7 == 0:
            fake.fake_cuda_graph_launch(graph_exec, stream)
    return futures


def main(scenario, seed):
    rng = random.Random(seed)
    if rng.random() < 0.3:
        cuda_reclaim.set_auto_drain("off")  # then only explicit drains and the final one release
    fake = load_fake()
    fake.fake_cuda_start_threads(rng.choice((1, 2, 3)))
    streams = [0xC000 + i for i in range(3)]
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.add_host_node(graph, callback, -1)
    graph_exec = fake.fake_cuda_graph_instantiate(graph)

    fn = raises_system_exit if scenario == "sys_exit_in_callback" else callback
    futures = enqueue(fake, rng, streams, graph_exec, 300, fn)
    for future in futures[:20]:
        if cuda_reclaim.get_auto_drain() == "off":
            cuda_reclaim.drain(timeout=0.01)
        try:
            future.result(timeout=30) if cuda_reclaim.get_auto_drain() == "thread" else None
        except SystemExit:
            pass
    # Enough work queued that the CUDA threads are still firing when the script ends.
    enqueue(fake, rng, streams, graph_exec, rng.randrange(200, 800), fn)

    if scenario == "close_midway":
        cuda_reclaim.close()
        closed.set()
        late = enqueue(fake, rng, streams, graph_exec, 100, fn)
        assert all(future.cancelled() for future in late), "a launch after close must be refused"
    elif scenario == "exception":
        raise RuntimeError("the script fails while CUDA keeps firing")
    elif scenario == "keyboard_interrupt":
        raise KeyboardInterrupt
    elif scenario == "launching_threads":
        def launcher(index):
            local = random.Random(seed + index)
            enqueue(fake, local, streams, graph_exec, 400, fn)
        for index in range(2):
            threading.Thread(target=launcher, args=(index,)).start()
    elif scenario == "fork":
        pid = os.fork()
        if pid == 0:
            # The parent's calls are cancelled here; the child launches a few of its own (no CUDA thread
            # survives a fork, so they stay held) and exits normally, writing its own report.
            enqueue(fake, rng, streams, graph_exec, 10, fn)
            return
        os.waitpid(pid, 0)


def start():
    """Registers after_close, then imports cuda_reclaim (whose atexit hook therefore runs first)."""
    global cuda_reclaim
    atexit.register(after_close)
    import cuda_reclaim as module

    cuda_reclaim = module


if __name__ == "__main__":
    start()
    main(sys.argv[1], int(sys.argv[2]))
