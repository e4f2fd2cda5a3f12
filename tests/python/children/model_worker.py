"""The process side of tests/python/test_model.py: runs the public API on the fake driver, one command at a
time, and reports every broken promise it sees.

`python children/model_worker.py CMD_FD REPLY_FD` is a zygote: it imports the package and loads the fake
driver once, then, for each ("fork",) it reads, forks a worker for one example and waits for it (the
worker owns both pipes meanwhile), then answers ("exited", status). close() is for good, so each example
needs a process of its own; a fork of a warm zygote costs milliseconds where a fresh interpreter costs a
tenth of a second. Messages are a 4-byte length and a pickle.

A worker answers each command with {"result", "violations", "stats"}: `violations` lists every promise
(docs/guide.md, docs/callbacks.md, docs/design.md, the docstrings) seen broken since the previous answer, each
naming the promise. The worker does the checking because only it sees the calls start, the futures and
the threads; the test only asserts that the list stays empty.
"""

import asyncio
import atexit
import gc
import logging
import os
import pickle
import select
import signal
import struct
import sys
import threading
import time

# Set when a worker ends by exiting: (model, reply fd). The answer is written from an atexit hook
# registered before the package is imported (fake_cuda imports it too): hooks run last registered first,
# so this one runs after the package's own, which closes the queue.
_exiting = None
CALL_DURING_FINALIZATION = 97  # the exit status of a worker in which a call began after its last answer


def _answer_at_exit():
    if _exiting is None:
        return
    model, reply_fd = _exiting
    model.close_returned = True
    model.end_checks("after the atexit hook closed the queue")
    model.check_laws()
    write_message(reply_fd, {"result": "None", "violations": model.violations, "stats": model.last_stats})
    model.answered = True


atexit.register(_answer_at_exit)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fake_cuda  # noqa: E402

import cuda_reclaim  # noqa: E402
import cuda_reclaim.asyncio as reclaim_asyncio  # noqa: E402
from cuda_reclaim import _auto, _reclaim  # noqa: E402

fake = fake_cuda.load(os.environ["CUDA_RECLAIM_LIBCUDA"])

# Documented gauges (stats(): "every counter only grows, except the gauges pending, in_drain, held_by_cuda
# and calls_outstanding"); every other key of stats() must never go down.
GAUGES = frozenset({"pending", "in_drain", "held_by_cuda", "calls_outstanding"})
STREAMS = (0x5100, 0x5200)
# What a finalizer, a done-callback or a call does when it runs: every public entry point that may be
# called back into from a drain, and an exception or an interrupt arriving mid-call.
ACTIONS = ("none", "defer", "launch", "drain", "trim", "close", "thread", "gc", "off", "raise", "interrupt")
FORK_CHILD_LIMIT = 20.0


class Deliberate(ValueError):
    """Raised on purpose by a call or a finalizer."""


class DeliberateInterrupt(KeyboardInterrupt):
    """An interrupt arriving mid-call, on purpose."""


def _quiet_about_deliberate(unraisable, default=sys.unraisablehook):
    # A finalizer's exception is unraisable by design; only the ones raised on purpose are left out.
    if not isinstance(unraisable.exc_value, (Deliberate, DeliberateInterrupt)):
        default(unraisable)


sys.unraisablehook = _quiet_about_deliberate
# Done-callbacks raise on purpose; concurrent.futures logs each one, and the log would bury the rest.
logging.getLogger("concurrent.futures").disabled = True


def read_message(fd):
    header = _read_exactly(fd, 4)
    if header is None:
        return None
    return pickle.loads(_read_exactly(fd, struct.unpack("!I", header)[0]))


def _read_exactly(fd, size):
    chunks = []
    while size:
        chunk = os.read(fd, size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def write_message(fd, message):
    data = pickle.dumps(message)
    data = struct.pack("!I", len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def _in_gc_callback():
    # Whatever the package names its hook: a frame of any function in gc.callbacks is inside a collection.
    hooks = {getattr(hook, "__code__", None) for hook in gc.callbacks} - {None}
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code in hooks:
            return True
        frame = frame.f_back
    return False


class Model:
    """One example's process: the objects it made and what it saw."""

    def __init__(self):
        self.violations = []
        self.gate = threading.RLock()  # a cancel and a call's start never interleave
        self.started = set()  # call idents whose body began
        self.cancelled_first = {}  # ident -> how it was cancelled before its body began
        self.futures = {}  # ident -> concurrent future of launch_host_func
        self.tasks = {}  # ident -> asyncio task of run_when_reached
        self.order = {}  # ident -> (stream, launch number) for launches made by the commands themselves
        self.ran = []  # idents in the order their bodies began
        self.next_ident = 0
        self.launches = 0
        self.closes = 0  # close() calls begun in this process
        self.closing = 0  # close() calls in progress (one may run inside another's final drain)
        self.close_returned = False  # an outermost close() has returned: no call may begin any more
        self.last_stats = None
        self.graph = None
        self.execs = {}  # host-node count -> executable graph
        self.loop = asyncio.new_event_loop()
        self.answered = False  # the last answer was written (at exit)

    # --- bookkeeping ------------------------------------------------------------------------------------

    def broke(self, promise, detail):
        self.violations.append((promise, detail))

    def ident(self, prefix):
        self.next_ident += 1
        return f"{prefix}{self.next_ident}"

    def read_stats(self):
        counters = cuda_reclaim.stats()
        if self.last_stats is not None:
            for key, value in counters.items():
                if key not in GAUGES and value < self.last_stats.get(key, 0):
                    self.broke(
                        "every counter only grows, except pending (STATS_KEYS)",
                        f"{key} went down from {self.last_stats[key]} to {value}",
                    )
        self.last_stats = counters
        return counters

    def check_laws(self):
        counters = self.read_stats()
        if not cuda_reclaim.conserved(counters):
            buckets = {key: counters[key] for key in cuda_reclaim.CONSERVATION_BUCKETS}
            self.broke(
                "conservation: handed_over == sum of CONSERVATION_BUCKETS",
                f"handed_over={counters['handed_over']} {buckets}",
            )
        # The hold law holds at quiescence; a drain thread's finalizer may be attaching right now.
        deadline = time.monotonic() + 2.0
        while counters["attached_to_cuda"] != counters["handed_back_by_cuda"] + counters["held_by_cuda"]:
            if time.monotonic() > deadline:
                self.broke(
                    "attached_to_cuda == handed_back_by_cuda + held_by_cuda at quiescence",
                    " ".join(f"{key}={counters[key]}" for key in cuda_reclaim.HOLD_KEYS),
                )
                break
            time.sleep(0.005)
            counters = self.read_stats()
        if self.close_returned:
            self.check_everything_ended("after close() returned")

    def check_everything_ended(self, when):
        for ident, future in list(self.futures.items()):
            if not future.done():
                self.broke("every launch_host_func future ends once the queue is closed", f"{ident} pending {when}")

    # --- what runs inside drains ------------------------------------------------------------------------

    def act(self, action):
        """Call back into the public API from wherever this runs (a call, a finalizer, a done-callback)."""
        if action == "defer":
            cuda_reclaim.defer_release(Payload(self, "none"))
        elif action == "launch":
            self.launch(STREAMS[0], "none", "none", ordered=False)
        elif action == "drain":
            cuda_reclaim.drain()
        elif action == "trim":
            cuda_reclaim.trim()
        elif action == "close":
            self.close()
        elif action in ("thread", "gc", "off"):
            cuda_reclaim.set_auto_drain(action)
        elif action == "raise":
            raise Deliberate("a call or finalizer that raises")
        elif action == "interrupt":
            raise DeliberateInterrupt

    def body(self, ident, action):
        """A call's body: launch_host_func, run_when_reached and host nodes all run this."""
        if self.answered:  # nobody reads answers any more: the exit status tells
            os.write(2, f"{ident} began during interpreter finalization\n".encode())
            os._exit(CALL_DURING_FINALIZATION)
        with self.gate:
            self.started.add(ident)
            self.ran.append(ident)
            where = threading.current_thread()
            if ident in self.cancelled_first:
                self.broke(
                    "a call cancelled before it started never runs (docs/callbacks.md)",
                    f"{ident} ran after {self.cancelled_first[ident]} returned True",
                )
            if self.close_returned:
                self.broke("no call runs after close() returned (docs/callbacks.md)", f"{ident} ran")
            if not (where is threading.main_thread() or isinstance(where, _auto._DrainThread)
                    or where.name in ("model-drain", "model-close")):  # the threads that drain or close here
                self.broke("calls run only in drains, never on CUDA's thread", f"{ident} ran on {where.name}")
            if _in_gc_callback():
                self.broke(
                    "calls run only where docs/callbacks.md lists (drain thread, loop reader, drain(), close)",
                    f"{ident} ran inside the gc-mode drain",
                )
        self.act(action)
        return ident

    def close(self):
        self.closes += 1
        self.closing += 1
        try:
            cuda_reclaim.close()
        finally:
            self.closing -= 1
            if self.closing == 0:
                self.close_returned = True

    def launch(self, stream, action, done_action, ordered=True):
        ident = self.ident("call")
        future = cuda_reclaim.launch_host_func(stream, self.body, ident, action)
        self.futures[ident] = future
        if ordered:
            self.launches += 1
            self.order[ident] = (stream, self.launches)
        if done_action != "none":
            future.add_done_callback(lambda _future: self.act(done_action))
        return ident

    # --- commands -----------------------------------------------------------------------------------------

    def cmd_hand_over(self, count, action):
        for _ in range(count):
            cuda_reclaim.defer_release(Payload(self, action))

    def cmd_keep_alive_until(self, stream, count, action):
        for _ in range(count):
            cuda_reclaim.keep_alive_until(stream, Payload(self, action))

    def cmd_launch(self, stream, action, done_action):
        return self.launch(stream, action, done_action)

    def cmd_cancel_launch(self, index):
        # A pending one: cancelling what has ended tells nothing.
        pending = sorted(ident for ident, future in self.futures.items() if not future.done())
        if not pending:
            return None
        ident = pending[index % len(pending)]
        with self.gate:
            not_started = ident not in self.started
            if self.futures[ident].cancel() and not_started:
                self.cancelled_first[ident] = "future.cancel()"
                return True
        return False

    def cmd_await(self, stream, action):
        ident = self.ident("await")
        self.launches += 1
        self.order[ident] = (stream, self.launches)
        self.tasks[ident] = self.loop.create_task(reclaim_asyncio.run_when_reached(stream, self.body, ident, action))
        self.run_loop(0)  # the task starts and launches its call
        return ident

    def cmd_cancel_await(self, index):
        pending = sorted(ident for ident, task in self.tasks.items() if not task.done())
        if not pending:
            return None
        ident = pending[index % len(pending)]
        with self.gate:
            not_started = ident not in self.started
            if self.tasks[ident].cancel() and not_started and ident not in self.started:
                self.cancelled_first[ident] = "task.cancel() of an await run_when_reached()"
                return True
        return False

    def cmd_run_loop(self):
        self.run_loop(0.005)

    def run_loop(self, seconds):
        try:
            self.loop.run_until_complete(asyncio.sleep(seconds))
        except DeliberateInterrupt:
            pass  # an interrupted drain gave a call's KeyboardInterrupt to its await: asyncio raises it here

    def cmd_add_host_node(self, action):
        if self.graph is None:
            self.graph = fake.fake_cuda_graph_create()
        ident = self.ident("node")
        cuda_reclaim.add_host_node(self.graph, self.body, ident, action)
        return ident

    def cmd_launch_graph(self, stream):
        if self.graph is None:
            return None
        nodes = fake.fake_cuda_graph_host_node_count(self.graph)
        if nodes not in self.execs:
            self.execs[nodes] = fake.fake_cuda_graph_instantiate(self.graph)
        fake.fake_cuda_graph_launch(self.execs[nodes], stream)
        return nodes

    def cmd_fire(self):
        # CUDA's thread pushes while this thread reads the counters, as an application's monitor would.
        done = threading.Event()

        def fire():
            try:
                fake.fake_cuda_run_host_functions()
            finally:
                done.set()

        firing = threading.Thread(target=fire, name="model-fire")
        firing.start()
        while not done.is_set():
            self.read_stats()
        firing.join()

    def cmd_drain(self, budget):
        return cuda_reclaim.drain(budget)

    def cmd_drain_interrupted(self, delay):
        """drain() on this thread while a signal handler raises KeyboardInterrupt `delay` seconds in: it
        lands in whatever Python code the drain runs (a call, a finalizer, a done-callback). The interrupt
        may leave drain(); what the drain had taken must still end in one bucket, each call once."""
        armed = [True]

        def interrupt(signum, frame):
            # Only in the model's own code (a call, a finalizer, a done-callback of this file): a Ctrl-C that
            # lands inside concurrent.futures' or asyncio's own bookkeeping can leave their futures half
            # updated whatever the library does (docs/design.md, the callers' table). Elsewhere, try again soon.
            if not armed[0]:
                return
            if frame is None or frame.f_code.co_filename != __file__:
                signal.setitimer(signal.ITIMER_REAL, 0.0001)
                return
            armed[0] = False
            raise DeliberateInterrupt

        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, delay)  # inside: the timer may fire before drain() begins
            cuda_reclaim.drain()
        except DeliberateInterrupt:
            event_note = "left drain()"
        else:
            event_note = "drain() returned"
        finally:
            armed[0] = False  # a timer that fires from here on raises nothing
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        return event_note

    def cmd_drain_elsewhere(self, budget):
        drainer = threading.Thread(target=cuda_reclaim.drain, args=(budget,), name="model-drain")
        drainer.start()
        drainer.join(30)

    def cmd_trim(self):
        return cuda_reclaim.trim()

    def cmd_set_mode(self, mode):
        return cuda_reclaim.set_auto_drain(mode)

    def cmd_collect(self):
        gc.collect()

    def cmd_close(self, where):
        if where == "main":
            self.close()
        else:
            closer = threading.Thread(target=self.close, name="model-close")
            closer.start()
            closer.join(30)

    def cmd_fork(self):
        read_fd, write_fd = os.pipe()
        parents_calls = set(self.futures)
        reported = len(self.violations)
        closes = self.closes
        pid = os.fork()
        if pid == 0:  # the fork child: report what it finds, then leave without running exit hooks
            os.close(read_fd)
            os._exit(self.fork_child_checks(write_fd, parents_calls, reported, closes))
        os.close(write_fd)
        deadline = time.monotonic() + FORK_CHILD_LIMIT
        chunks = []
        while True:
            ready, _, _ = select.select([read_fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                self.broke("a fork child goes on on its own", f"hung for {FORK_CHILD_LIMIT} s")
                break
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
        problems = pickle.loads(b"".join(chunks)) if chunks else []
        for promise, detail in problems:
            self.broke(promise, "in the fork child: " + detail)
        if status != 0 and not any("hung" in detail for _, detail in self.violations):
            self.broke("a fork child goes on on its own", f"exit status {status}")

    def fork_child_checks(self, fd, parents_calls, reported, closes):
        problems = []
        try:
            # Cancelling the parent's calls here runs their done-callbacks, which may close this queue.
            closed_here = self.closes != closes
            if cuda_reclaim.is_closed() and not closed_here:
                problems.append(("a fork child starts with an open queue (docs/design.md)", "it is closed"))
            for ident in sorted(parents_calls):
                if not self.futures[ident].done():
                    problems.append(("a fork child cancels the parent's outstanding calls", f"{ident} is pending"))
            ran_before = len(self.ran)
            released = []
            cuda_reclaim.defer_release(Payload(self, "none", released))
            self.close_returned = False
            self.close()
            if not released and not closed_here:
                problems.append(("close() releases what was handed over before it", "not in the fork child"))
            for ident in self.ran[ran_before:]:
                if ident in parents_calls:
                    problems.append(("a fork child never runs the parent's calls", f"{ident} ran"))
            if not cuda_reclaim.conserved():
                problems.append(("conservation: handed_over == sum of CONSERVATION_BUCKETS", f"{cuda_reclaim.stats()}"))
            problems.extend(self.violations[reported:])
        except BaseException as error:  # noqa: BLE001 - reported to the parent, whatever it is
            problems.append(("a fork child goes on on its own", f"the child raised {error!r}"))
        os.write(fd, pickle.dumps(problems))
        return 0

    def cmd_finish(self, ending):
        assert ending == "close", "an exit ends in serve()"
        self.close()
        self.end_checks("after close()")

    def end_checks(self, when):
        self.check_everything_ended(when)
        if self.tasks:
            pending = [task for task in self.tasks.values() if not task.done()]
            deadline = time.monotonic() + 5
            while pending and time.monotonic() < deadline:
                try:
                    self.loop.run_until_complete(asyncio.wait(pending, timeout=5))
                except DeliberateInterrupt:
                    pass  # as in run_loop()
                pending = [task for task in pending if not task.done()]
            for ident, task in self.tasks.items():
                if not task.done():
                    self.broke("every await ends once the queue is closed", f"{ident} still pending 5 s {when}")
        counters = self.read_stats()
        if counters["calls_outstanding"]:
            self.broke("every call ends at close() (calls_outstanding == 0)", f"{counters['calls_outstanding']} left")
        deadline = time.monotonic() + 5
        while threading.active_count() > 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        extra = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
        if extra:
            self.broke("close() leaves no thread behind", f"still alive 5 s {when}: {extra}")
        seen = set()
        last_place = {}
        for ident in self.ran:
            if ident in seen and not ident.startswith("node"):
                self.broke("a call runs at most once", f"{ident} ran twice")
            seen.add(ident)
            if ident in self.order:
                stream, place = self.order[ident]
                if place < last_place.get(stream, 0):
                    self.broke("the calls of one stream run in stream order", f"{ident} ran after a later launch")
                last_place[stream] = max(place, last_place.get(stream, 0))
        self.loop.close()


class Payload:
    """A handed-over object whose finalizer (run by a drain) calls back into the API."""

    def __init__(self, model, action, released=None):
        self.model = model
        self.action = action
        self.released = released

    def __del__(self):
        if self.released is not None:
            self.released.append(True)
        self.model.act(self.action)


def serve(cmd_fd, reply_fd):
    """One example: answer commands until ("finish",) has been answered."""
    model = Model()
    while True:
        message = read_message(cmd_fd)
        if message is None:
            os._exit(1)
        name, args = message[0], message[1:]
        if message == ("finish", "exit"):
            global _exiting
            _exiting = (model, reply_fd)
            sys.exit(0)  # the package's atexit hook closes, then _answer_at_exit answers
        result = None
        try:
            result = getattr(model, "cmd_" + name)(*args)
        except (Deliberate, DeliberateInterrupt) as error:
            # What a call or finalizer raised on this thread reaches the caller only through a drain's
            # rules: a drain goes on, so an exception here means a drain let it escape.
            model.broke("a drain goes on when a call or finalizer raises", f"{name} raised {error!r}")
        except BaseException as error:  # noqa: BLE001 - every other failure is a broken promise too
            model.broke(f"{name}{args!r} runs in every state", f"raised {error!r}")
        model.check_laws()
        violations, model.violations = model.violations, []
        write_message(reply_fd, {"result": repr(result), "violations": violations, "stats": model.last_stats})
        if name == "finish":
            os._exit(0)


def main():
    cmd_fd, reply_fd = int(sys.argv[1]), int(sys.argv[2])
    cuda_reclaim.set_auto_drain("off")  # nothing used yet: each worker chooses for itself
    _reclaim._driver_info()  # the driver loaded once, here
    while True:
        message = read_message(cmd_fd)
        if message is None or message[0] == "quit":
            return
        pid = os.fork()
        if pid == 0:
            cuda_reclaim.set_auto_drain(message[1])
            serve(cmd_fd, reply_fd)
        _, status = os.waitpid(pid, 0)
        write_message(reply_fd, ("exited", status))


if __name__ == "__main__":
    main()
