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
import concurrent.futures
import contextlib
import gc
import io
import logging
import os
import pickle
import select
import signal
import struct
import sys
import threading
import time
import traceback

# Set when a worker ends by exiting: (model, reply fd). The answer is written from an atexit hook
# registered before the package is imported (fake_cuda imports it too): hooks run last registered first,
# so this one runs after the package's own, which closes the queue.
_exiting = None
CALL_DURING_FINALIZATION = 97  # the exit status of a worker in which a call began after its last answer


# The exit's answer is written once: by the hook below, or by the watchdog (serve) when the exit hangs first.
_answer_lock = threading.Lock()


def _answer_at_exit():
    if _exiting is None:
        return
    model, reply_fd = _exiting
    model.exit_answered.set()
    model.close_returned = True
    model.end_checks("after the atexit hook closed the queue")
    model.check_laws()
    with _answer_lock:
        if model.answered:  # the watchdog answered: the exit took too long
            return
        write_message(reply_fd, {"result": "None", "violations": model.violations, "stats": model.last_stats})
        model.answered = True


def _watch_the_exit(model, reply_fd, started):
    """A daemon thread: if the exit has not reached the answer within EXIT_LIMIT seconds, report the threads it
    waits behind (their stacks) as a broken promise and end the process."""
    if model.exit_answered.wait(EXIT_LIMIT):
        return
    with _answer_lock:
        if model.answered:
            return
        stacks = []
        frames = sys._current_frames()
        for thread in threading.enumerate():
            if thread is threading.current_thread() or thread.ident not in frames:
                continue
            stack = "".join(traceback.format_stack(frames[thread.ident])[-4:])
            stacks.append(f"{thread.name} (daemon={thread.daemon}):\n{stack}")
        model.violations.append((
            "the process exits with waiters in any thread (threading's exit hook shuts the barrier first)",
            f"no exit {time.monotonic() - started:.0f} s after sys.exit(); its threads:\n" + "\n".join(stacks),
        ))
        write_message(reply_fd, {"result": "None", "violations": model.violations, "stats": model.last_stats})
        model.answered = True
    os._exit(0)


atexit.register(_answer_at_exit)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fake_cuda  # noqa: E402
import scenario  # noqa: E402

import cuda_reclaim  # noqa: E402
import cuda_reclaim.asyncio as reclaim_asyncio  # noqa: E402
import cuda_reclaim.metrics as reclaim_metrics  # noqa: E402
import prometheus_client  # noqa: E402

try:  # imported here, once, in the zygote: an import that a finalizer begins meets a half-made module
    import cuda_reclaim.pytest_plugin as reclaim_plugin  # noqa: E402
except ImportError as _plugin_error:  # reported by the rule that uses it, not by every example's death
    reclaim_plugin = None
    PLUGIN_IMPORT_ERROR = _plugin_error
from cuda_reclaim import _auto, _reclaim  # noqa: E402

fake = fake_cuda.load(os.environ["CUDA_RECLAIM_LIBCUDA"])

# The gauges of the counter table (cuda_reclaim.COUNTERS); every other key of stats() (a counter or a
# high-water mark) must never go down.
GAUGES = frozenset(key for key, counter in cuda_reclaim.COUNTERS.items() if counter.kind == "gauge")
STREAMS = (0x5100, 0x5200)
# What a finalizer, a done-callback or a call does when it runs: every public entry point that may be
# called back into from a drain, and an exception or an interrupt arriving mid-call.
ACTIONS = ("none", "defer", "launch", "drain", "trim", "close", "thread", "off", "raise", "interrupt")
FORK_CHILD_LIMIT = 20.0
# The hand-back barrier's limits: how long a wait whose attachments are all handed back (or whose queue is
# closed) may take to return, how long a wait in a finalizer or call that a drain runs is given (it only
# looks: it must return long before), and how long an exit may take with waiters in its threads. Each is
# far above what the promise needs, and below the test's STEP_LIMIT, so that a broken one is reported as such.
PROMPT_LIMIT = 10.0
LOOK_LIMIT = 20.0
EXIT_LIMIT = 30.0
# The barrier's entry points (docs/design.md, "The hand-back barrier"): the blocking ones, and the asyncio ones.
SYNC_WAITS = ("wait_handed_back", "flush", "attachment", "node", "reclaim_flush")
ASYNC_WAITS = ("asyncio_handed_back", "asyncio_flush")
FLUSHES = ("flush", "reclaim_flush", "asyncio_flush")
# How a fork child's asyncio wait on the loop made before the fork ends: cancelled, with a message that says so.
FORK_CANCELLED = "made before os.fork()"
# Where a wait is issued from: "finalizer" and "callback" run inside a drain (where a wait only looks).
BACKGROUND_SITES = ("thread", "executor", "task")
TIMEOUTS = {"none": None, "zero": 0, "short": 0.01, "long": 30.0}
# The threads of the model's own waiters: flush() drains, so calls may run there.
WAITER_THREADS = "model-wait"
TRUE_MEANS_DONE = "a True wait implies done() for every attachment it covers (made before it, after its mark)"
SINCE_PROMPT = "a since= wait never waits for an attachment made before its mark"
WAIT_PROMPT = "a wait returns True once everything it covers is handed back"
ATTACHMENT_PROMPT = "Attachment.wait() / NodeHandle.wait() return True once done()"
NO_WAIT_OUTLIVES_CLOSE = "no wait outlives close() (every pending wait returns once the queue is closed)"
LOOKS_ONLY = "in a finalizer or call that a drain runs, a wait does not block (it only looks)"


class Deliberate(ValueError):
    """Raised on purpose by a call or a finalizer."""


class DeliberateInterrupt(KeyboardInterrupt):
    """An interrupt arriving mid-call, on purpose."""


# True while the main thread records a wait it issues (perform()): the drain's interrupt waits until it is done.
IN_WAIT_BOOKKEEPING = [False]


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


class Model:
    """One example's process: the objects it made and what it saw."""

    def __init__(self):
        self.violations = []
        self.gate = threading.RLock()  # a cancel and a call's start never interleave
        self.started = set()  # call idents whose body began
        self.cancelled_first = {}  # ident -> how it was cancelled before its body began
        self.futures = {}  # ident -> concurrent future of launch_host_func
        self.stream_ordered = set()  # idents of the calls of launch_host_func_ordered
        self.ordered_nodes = 0  # nodes add_host_node_ordered added (their firings wait for a drain)
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
        self.exit_answered = threading.Event()  # set once the exit hooks ran (the watchdog stands down)
        # The hand-back barrier. Every attach (of any rule, on any thread) appends to `begun` before it
        # attaches and to `ended` once it returned; the ones whose Attachment is not kept here (the other rules'
        # keep_alive_until, launches, awaits, host nodes) to `foreign` too. A wait may expect True only where
        # it can tell that everything it covers is kept here and done(). Lists: append and len are atomic.
        self.begun, self.ended, self.foreign = [], [], []
        self.kept = []  # Kept: the attachments of the `attach` rule, in the order made
        self.marks = []  # Mark: hand_back_mark() as the `mark` rule took them, in order
        self.waits = []  # Wait: issued and not yet checked
        self.executor = None  # the waits' ThreadPoolExecutor, made on first use
        self.next_stream = 0x6100  # a stream of its own for each kept keep_alive_until
        self.queue_fd = None  # fileno(), as first seen
        self.drain_handle = None  # asyncio.install() on the model's loop

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
                        "every counter only grows, except the gauges (COUNTERS)",
                        f"{key} went down from {self.last_stats[key]} to {value}",
                    )
        self.last_stats = counters
        return counters

    def check_laws(self):
        counters = self.read_stats()
        if not cuda_reclaim.conserved(counters):
            buckets = {key: counters[key] for key in _reclaim._CONSERVATION_BUCKETS}
            self.broke(
                "conservation: handed_over == sum of the conservation buckets",
                f"handed_over={counters['handed_over']} {buckets}",
            )
        # The hold law holds at quiescence; a drain thread's finalizer may be attaching right now.
        first = True  # the first poll looks at the counters read above, each later one reads them again

        def the_hold_law_holds():
            nonlocal counters, first
            if not first:
                counters = self.read_stats()
            first = False
            return counters["attached_to_cuda"] == counters["handed_back_by_cuda"] + counters["held_by_cuda"]

        if not scenario.holds_within(the_hold_law_holds, timeout=2.0):
            self.broke(
                "attached_to_cuda == handed_back_by_cuda + held_by_cuda at quiescence",
                " ".join(f"{key}={counters[key]}" for key, counter in cuda_reclaim.COUNTERS.items()
                         if counter.source == "cuda"),
            )
        if self.close_returned:
            self.check_everything_ended("after close() returned")
        else:
            self.check_waits()

    def check_everything_ended(self, when):
        for ident, future in list(self.futures.items()):
            if not future.done():
                self.broke("every launch_host_func future ends once the queue is closed", f"{ident} pending {when}")
        self.check_waits()

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
        elif action in ("thread", "off"):
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
                    or where.name in ("model-drain", "model-close")  # the threads that drain or close here
                    or where.name.startswith(WAITER_THREADS)):  # flush() drains there
                self.broke("calls run only in drains, never on CUDA's thread", f"{ident} ran on {where.name}")
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

    def launch(self, stream, action, done_action, ordered=True, stream_ordered=False):
        """launch_host_func (launch_host_func_ordered with `stream_ordered`); `ordered`: the model checks
        the call's place in its stream's order."""
        ident = self.ident("call")
        launch = cuda_reclaim.launch_host_func_ordered if stream_ordered else cuda_reclaim.launch_host_func
        with self.attaching():
            future = launch(stream, self.body, ident, action)
        self.futures[ident] = future
        if stream_ordered:
            self.stream_ordered.add(ident)
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
            with self.attaching():
                cuda_reclaim.keep_alive_until(stream, Payload(self, action))

    def cmd_launch(self, stream, action, done_action):
        return self.launch(stream, action, done_action)

    def cmd_launch_ordered(self, stream, action, done_action):
        """launch_host_func_ordered: refused (RuntimeError naming it) only while the automatic drain is "off",
        and never while it is "thread" (a call on the drain thread may switch it meanwhile: only
        a mode seen both before and after counts)."""
        before = cuda_reclaim.get_auto_drain()
        try:
            return self.launch(stream, action, done_action, stream_ordered=True)
        except RuntimeError as error:
            after = cuda_reclaim.get_auto_drain()
            if not str(error).startswith("launch_host_func_ordered(): the automatic drain is"):
                self.broke("launch_host_func_ordered's refusal names it and the mode", str(error))
            if before == after == "thread" or after != "off":
                self.broke("launch_host_func_ordered is refused only while no drain would run it", f"{after}")
            return "refused"

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
        with self.attaching():
            awaited = reclaim_asyncio.run_when_reached(stream, self.body, ident, action)
            self.tasks[ident] = self.loop.create_task(awaited)
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
        with self.attaching():
            node = cuda_reclaim.add_host_node(self.graph, self.body, ident, action)
        if not isinstance(node, cuda_reclaim.NodeHandle) or node.done():
            self.broke("add_host_node() returns a NodeHandle, held while its graph is", f"{node!r}")
        return ident

    def cmd_add_host_node_ordered(self, action):
        """add_host_node_ordered: refused (RuntimeError naming it) only while no drain would run its firings,
        as launch_host_func_ordered; its firings wait for a drain (run_cuda drains while one may wait)."""
        if self.graph is None:
            self.graph = fake.fake_cuda_graph_create()
        ident = self.ident("node")
        before = cuda_reclaim.get_auto_drain()
        try:
            with self.attaching():
                node = cuda_reclaim.add_host_node_ordered(self.graph, self.body, ident, action)
        except RuntimeError as error:
            after = cuda_reclaim.get_auto_drain()
            if not str(error).startswith("add_host_node_ordered(): the automatic drain is"):
                self.broke("add_host_node_ordered's refusal names it and the mode", str(error))
            if before == after == "thread" or after != "off":
                self.broke("add_host_node_ordered is refused only while no drain would run it", f"{after}")
            return "refused"
        self.ordered_nodes += 1
        if not isinstance(node, cuda_reclaim.NodeHandle) or node.done():
            self.broke("add_host_node_ordered() returns a NodeHandle, held while its graph is", f"{node!r}")
        return ident

    def cmd_launch_graph(self, stream):
        if self.graph is None:
            return None
        nodes = fake.fake_cuda_graph_host_node_count(self.graph)
        with self.attaching():  # the firings are the node's calls: counted as attachments, to be safe
            if nodes not in self.execs:
                self.execs[nodes] = fake.fake_cuda_graph_instantiate(self.graph)
            fake.fake_cuda_graph_launch(self.execs[nodes], stream)
        return nodes

    def cmd_fire(self):
        # CUDA's thread pushes while this thread reads the counters, as an application's monitor would.
        waiting = self.ordered_not_done()
        self.run_cuda()
        for ident in waiting:
            if not self.futures[ident].done():
                self.broke(
                    "an ordered call ran or was cancelled before CUDA's thread went past it "
                    "(launch_host_func_ordered)",
                    f"{ident} pending after the streams ran",
                )

    def ordered_not_done(self):
        return [ident for ident in self.stream_ordered if not self.futures[ident].done()]

    def run_cuda(self):
        """Every runnable host function of the fake, on a thread of its own (joined) while this one reads the
        counters; and drains here once anything ordered was made: its host function waits for a drain (also
        when its future was cancelled: a drain must reach the call), and the automatic one may be off by now
        (a call may switch it), which leaves it to an explicit drain."""
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
            if self.ordered_nodes or self.stream_ordered:
                cuda_reclaim.drain()
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
            # Nor inside the model's own bookkeeping of a wait issued from the drain (perform(): what it records
            # of the wait is the model's, not the library's).
            if frame is None or frame.f_code.co_filename != __file__ or IN_WAIT_BOOKKEEPING[0]:
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

    # --- the hand-back barrier ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def attaching(self, foreign=True):
        self.begun.append(None)
        if foreign:
            self.foreign.append(None)
        try:
            yield
        finally:
            self.ended.append(None)

    def take_mark(self, record=True):
        """hand_back_mark(), with what was attached before it: clean when no attach was in flight around it."""
        begun, ended, foreign, kept = len(self.begun), len(self.ended), len(self.foreign), len(self.kept)
        value = cuda_reclaim.hand_back_mark()
        mark = Mark(value, kept, foreign, begun == ended == len(self.begun))
        if record:
            if self.marks and value < self.marks[-1].value:
                self.broke("marks only grow (hand_back_mark)", f"{value} after {self.marks[-1].value}")
            self.marks.append(mark)
        return mark

    def cmd_mark(self):
        return self.take_mark().value

    def cmd_attach(self, kind, epochs):
        """`epochs` attachments of `kind`, a mark between each: as many epochs holding something."""
        for index in range(epochs):
            if index:
                self.take_mark()
            with self.attaching(foreign=False):
                graph = stream = None
                if kind == "graph":
                    graph = fake.fake_cuda_graph_create()
                    handle = cuda_reclaim.keep_alive(graph, object(), object())
                elif kind == "stream":
                    stream = self.next_stream
                    self.next_stream += 0x100
                    fake.fake_cuda_stream_hold(stream, 1)
                    handle = cuda_reclaim.keep_alive_until(stream, object())
                else:
                    graph = fake.fake_cuda_graph_create()
                    handle = cuda_reclaim.add_host_node(graph, print, "a node that is never launched")
                self.kept.append(Kept(kind, handle, graph, stream))
            expected = cuda_reclaim.NodeHandle if kind == "node" else cuda_reclaim.Attachment
            if not isinstance(handle, expected) or handle.done():
                self.broke("an attachment is held (done() False) until CUDA hands it back", f"{kind}: {handle!r}")
        return len(self.kept)

    def cmd_hand_back(self, index, where):
        """CUDA hands one kept attachment back: on this thread (a graph destroyed here) or on another (a
        deferred destructor, a stream's host function)."""
        held = [kept for kept in self.kept if not kept.handed_back]
        if not held:
            return None
        kept = held[index % len(held)]
        kept.handed_back = True
        if kept.kind == "stream":
            fake.fake_cuda_stream_hold(kept.stream, 0)
            self.run_cuda()  # on a thread of the fake's, joined
        elif where == "cuda thread":
            fake.fake_cuda_defer_destructors(1)
            fake.fake_cuda_graph_destroy(kept.graph)
            fake.fake_cuda_defer_destructors(0)
            fake.fake_cuda_run_deferred()  # on a thread of the fake's, joined
        else:
            fake.fake_cuda_graph_destroy(kept.graph)
        if not kept.handle.done():
            self.broke("done() is True once CUDA has handed the attachment back", f"{kept.kind} {kept.handle!r}")
        return f"{kept.kind} {where}"

    def resolve_mark(self, since, record):
        if since == "latest" and self.marks:
            return self.marks[-1]
        if since == "oldest" and self.marks:
            return self.marks[0]
        if since == "fresh":
            return self.take_mark(record)
        return NO_MARK

    def cmd_wait(self, entry, site, since, timeout, index):
        """Issue one wait of the barrier from `site`; a background one is checked at the end of each step."""
        one = None
        if entry in ("attachment", "node"):
            kinds = ("node",) if entry == "node" else ("graph", "stream")
            candidates = [kept for kept in self.kept if kept.kind in kinds]
            if not candidates:
                return "nothing to wait for"
            one = candidates[index % len(candidates)]
        wait = Wait(entry, site, since, TIMEOUTS[timeout], one)
        if site not in ("finalizer", "callback"):
            wait.mark = NO_MARK if entry in ("attachment", "node", "reclaim_flush") else self.resolve_mark(since, True)
        self.waits.append(wait)
        sleepers = _reclaim._hand_back_stats()["sleepers"]
        if site == "main":
            self.perform(wait)
        elif site == "finalizer":
            cuda_reclaim.defer_release(WaitingPayload(self, wait))
        elif site == "callback":
            stream = STREAMS[index % len(STREAMS)]
            ident = self.launch(stream, "none", "none")
            self.futures[ident].add_done_callback(lambda _future: self.perform(wait))
        elif site == "task":
            wait.task = self.loop.create_task(self.perform_async(wait))
            for _ in range(10):  # the task starts and makes its request
                if wait.entered.is_set() or wait.finished.is_set():
                    break
                self.run_loop(0)
        else:
            target = self.perform if entry in SYNC_WAITS else (lambda: asyncio.run(self.perform_async(wait)))
            if site == "thread":
                name = f"{WAITER_THREADS}-{'thread' if entry in SYNC_WAITS else 'loop'}"
                threading.Thread(target=target, args=(wait,) if entry in SYNC_WAITS else (), name=name).start()
            else:
                if self.executor is None:
                    self.executor = concurrent.futures.ThreadPoolExecutor(
                        4, thread_name_prefix=f"{WAITER_THREADS}-pool"
                    )
                self.executor.submit(target, *((wait,) if entry in SYNC_WAITS else ()))
            self.await_entry(wait, sleepers)
        return f"{entry} from {site}"

    def await_entry(self, wait, sleepers):
        """Until a background wait has made its request (so that later attachments are not covered by it):
        it sleeps, it returned, or (asyncio) it says so. Uncertain past the limit: no prompt check then."""

        def requested():
            if wait.finished.is_set():
                return True
            asleep = wait.entry in ASYNC_WAITS or _reclaim._hand_back_stats()["sleepers"] > sleepers
            if wait.entered.is_set() and asleep:
                if len(self.begun) != wait.begun:
                    wait.uncertain = True  # something was attached between its look and its request
                return True
            return False

        if not scenario.holds_within(requested, timeout=PROMPT_LIMIT):
            wait.uncertain = True

    def look(self, wait):
        """Right before a wait's call, on its thread: what it covers, and whether it must return True."""
        mark = wait.mark
        if mark is None:  # a finalizer's or a callback's: resolved where it runs
            in_drain = _reclaim._releasing_on_this_thread()
            fresh_ok = threading.current_thread() is threading.main_thread()
            if wait.entry in ("attachment", "node", "reclaim_flush"):
                mark = NO_MARK
            else:
                mark = self.resolve_mark(wait.since if wait.since != "fresh" or fresh_ok else "latest", False)
            wait.mark = mark
            if wait.timeout is None:
                wait.timeout = LOOK_LIMIT
            if not in_drain:  # a callback run by a cancel or a close: a short wait, on a thread that answers
                wait.timeout = min(wait.timeout, 0.01)
            wait.in_drain = in_drain
        wait.begun = len(self.begun)
        ended, foreign = len(self.ended), len(self.foreign)
        wait.covered = [wait.one] if wait.one is not None else self.kept[mark.tracked:]
        wait.clean = wait.one is not None or (mark.clean and wait.begun == ended and foreign == mark.foreign)
        wait.shut_before = _reclaim._hand_back_is_shut()
        wait.prompt = wait.clean and all(kept.handle.done() for kept in wait.covered) and (
            wait.one is not None or not wait.shut_before
        )
        if wait.site == "main" and (wait.timeout is None or wait.timeout > TIMEOUTS["short"]):
            # No wait for ever on the thread that answers: a long one only where it must return at once.
            wait.timeout = PROMPT_LIMIT if wait.prompt else TIMEOUTS["short"]

    def call(self, wait):
        since, timeout = wait.mark.value, wait.timeout
        if wait.entry == "wait_handed_back":
            if since is None:
                return cuda_reclaim.wait_handed_back(timeout)
            return cuda_reclaim.wait_handed_back(timeout, since=since)
        if wait.entry == "flush":
            return cuda_reclaim.flush(timeout=timeout, since=since)
        if wait.entry in ("attachment", "node"):
            return wait.one.handle.wait(timeout)
        # What the pytest plugin's `reclaim` fixture gives a test.
        if reclaim_plugin is None:
            raise PLUGIN_IMPORT_ERROR
        fixture = reclaim_plugin.Reclaim(cuda_reclaim.stats())
        released = fixture.flush(timeout)
        if any(value < 0 for key, value in fixture.delta().items() if key in ("released", "handed_over")):
            self.broke("Reclaim.delta() counts from its baseline", f"{fixture.delta()} {fixture.baseline}")
        return released

    def perform(self, wait):
        """Issue the wait on this thread and check what it returned."""
        on_main = threading.current_thread() is threading.main_thread()
        if on_main:
            IN_WAIT_BOOKKEEPING[0] = True
        try:
            self._perform(wait)
        finally:
            if on_main:
                IN_WAIT_BOOKKEEPING[0] = False

    def _perform(self, wait):
        wait.started.set()
        self.look(wait)
        start = time.monotonic()
        try:
            wait.entered.set()
            result = self.call(wait)
        except (Deliberate, DeliberateInterrupt) as error:
            wait.problems.append(("a drain goes on when a call or finalizer raises", f"{wait} raised {error!r}"))
        except BaseException as error:  # noqa: BLE001 - a broken promise, whatever it is
            wait.problems.append((f"{wait.entry} from {wait.site} runs in every state", f"raised {error!r}"))
        else:
            self.check_result(wait, result, time.monotonic() - start)
        finally:
            wait.finished.set()

    async def perform_async(self, wait):
        wait.started.set()
        self.look(wait)
        start = time.monotonic()
        try:
            coroutine = (reclaim_asyncio.handed_back if wait.entry == "asyncio_handed_back" else reclaim_asyncio.flush)
            inner = asyncio.ensure_future(coroutine() if wait.mark.value is None else coroutine(since=wait.mark.value))
            await asyncio.sleep(0)  # the inner task's first step makes its request
            wait.entered.set()
            try:
                result = await (inner if wait.timeout is None else asyncio.wait_for(inner, wait.timeout))
            except asyncio.TimeoutError:
                result = "timed out"
            except asyncio.CancelledError as error:
                if FORK_CANCELLED not in str(error):
                    raise
                wait.result = FORK_CANCELLED  # in a fork child, on the loop made before the fork
                return
        except (Deliberate, DeliberateInterrupt) as error:
            wait.problems.append(("a drain goes on when a call or finalizer raises", f"{wait} raised {error!r}"))
        except BaseException as error:  # noqa: BLE001
            wait.problems.append((f"{wait.entry} from {wait.site} runs in every state", f"raised {error!r}"))
        else:
            self.check_result(wait, result, time.monotonic() - start)
        finally:
            wait.finished.set()

    def check_result(self, wait, result, elapsed):
        wait.result = result
        concurrent_attach = len(self.begun) != wait.begun
        shut = _reclaim._hand_back_is_shut()
        reached = result is True or (
            wait.entry in FLUSHES and isinstance(result, int) and wait.timeout is None and not shut
        )
        if reached:
            late = [kept for kept in wait.covered if not kept.handle.done()]
            if late:
                wait.problems.append((TRUE_MEANS_DONE, f"{wait} returned {result!r}; not done(): {late}"))
        if wait.prompt and not concurrent_attach and wait.entry not in FLUSHES and result is not True:
            if wait.one is not None or not shut:
                wait.problems.append((wait.promise(), f"{wait} returned {result!r} with all it covers done()"))
        if wait.in_drain and wait.timeout >= LOOK_LIMIT and elapsed >= LOOK_LIMIT:
            wait.problems.append((LOOKS_ONLY, f"{wait} waited {elapsed:.1f} s"))

    def finish_wait(self, wait, seconds):
        """Until `wait` has returned, at most `seconds`; a task on the model's loop needs the loop run."""
        if wait.task is not None:
            deadline = time.monotonic() + seconds
            while not wait.finished.is_set() and time.monotonic() < deadline:
                try:
                    self.loop.run_until_complete(asyncio.wait([wait.task], timeout=deadline - time.monotonic()))
                except DeliberateInterrupt:
                    pass  # as in run_loop()
            return wait.finished.is_set()
        return wait.finished.wait(seconds)

    def check_waits(self):
        """After every step: report what the finished waits saw; a pending wait whose attachments are all
        handed back must return True, and once the queue is closed every pending wait must return."""
        shut = _reclaim._hand_back_is_shut() or self.close_returned
        for wait in list(self.waits):
            if not wait.finished.is_set() and wait.started.is_set() and wait.site in BACKGROUND_SITES:
                if shut:
                    if not self.finish_wait(wait, PROMPT_LIMIT):
                        self.broke(NO_WAIT_OUTLIVES_CLOSE, f"{wait} still waits {PROMPT_LIMIT:.0f} s after the close")
                elif not wait.uncertain and wait.clean and all(kept.handle.done() for kept in wait.covered):
                    if not self.finish_wait(wait, PROMPT_LIMIT):
                        detail = f"{wait} still waits {PROMPT_LIMIT:.0f} s after all it covers is done()"
                        self.broke(wait.promise(), detail)
                    elif wait.entry not in FLUSHES and wait.result is not True and not _reclaim._hand_back_is_shut():
                        self.broke(wait.promise(), f"{wait} returned {wait.result!r} once all it covers was done()")
            if wait.finished.is_set():
                self.violations.extend(wait.problems)
                self.waits.remove(wait)

    def cmd_inspect(self):
        """The queue's small getters, each against what the model knows."""
        fd = cuda_reclaim.fileno()
        if self.queue_fd is None:
            self.queue_fd = fd
        if fd != self.queue_fd or fd < 0:
            self.broke("fileno() is one fd for the queue's life", f"{fd} after {self.queue_fd}")
        if cuda_reclaim.pending() < 0:
            self.broke("pending() counts what is queued", f"{cuda_reclaim.pending()}")
        if self.close_returned and not cuda_reclaim.is_closed():
            self.broke("is_closed() is True once close() returned", "False")
        if cuda_reclaim.is_closed() and not self.closes:
            self.broke("is_closed() is True only after a close()", "no close() began")
        mode = cuda_reclaim.get_auto_drain()
        if mode not in ("thread", "off", "closed") or (mode == "closed") != (self.closes > 0):
            self.broke("get_auto_drain() is the mode that runs, 'closed' once close() began", f"{mode!r}")
        header = os.path.join(cuda_reclaim.get_include(), "cuda_reclaim", "cuda_reclaim.h")
        if not os.path.isabs(header):
            self.broke("get_include() is a directory's absolute path", header)
        try:
            cuda_reclaim.NodeHandle(0x1234).wait(0)
        except ValueError:
            pass
        else:
            self.broke("NodeHandle.wait() of a handle made from an int raises ValueError", "it returned")
        return fd

    def cmd_show_config(self):
        """show_config(): the report, written to the file given, in any state; it returns None."""
        report = io.StringIO()
        result = cuda_reclaim.show_config(report)
        if result is not None or not report.getvalue():
            detail = f"{result!r}, {len(report.getvalue())} chars"
            self.broke("show_config() writes its report and returns None", detail)
        return len(report.getvalue().splitlines())

    def cmd_scrape(self):
        """cuda_reclaim.metrics: register in a registry of its own and scrape; one scrape is one stats() reading,
        so the conservation law holds among the values it exports (counters and gauges alike)."""
        registry = prometheus_client.CollectorRegistry()
        collector = reclaim_metrics.register(registry)
        if not isinstance(collector, reclaim_metrics.ReclaimCollector):
            self.broke("metrics.register() returns its ReclaimCollector", repr(collector))
        counters = {}
        for family in registry.collect():
            for sample in family.samples:
                if not sample.name.startswith("cuda_reclaim_") or sample.name.endswith("_created"):
                    continue
                key = sample.name[len("cuda_reclaim_"):]
                key = key[: -len("_total")] if key.endswith("_total") else key
                counters[key] = counters.get(key, 0) + int(sample.value)  # a labelled family sums to its key
        missing = [key for key in ("handed_over", *_reclaim._CONSERVATION_BUCKETS) if key not in counters]
        if missing:
            self.broke("metrics export every key of stats()", f"{missing} missing")
        elif not cuda_reclaim.conserved(counters):
            self.broke("one scrape is one stats() snapshot (the conservation law holds in it)", f"{counters}")
        return counters.get("handed_over")

    def cmd_install(self, max_items, cancel):
        """asyncio.install() on the model's loop (its reader drains when run_loop runs it), or cancel it."""
        if cancel:
            if self.drain_handle is not None:
                self.drain_handle.cancel()
                if not self.drain_handle.cancelled:
                    self.broke("DrainHandle.cancel() cancels", "cancelled is False")
                self.drain_handle = None
            return "cancelled"
        handle = reclaim_asyncio.install(self.loop, max_items=max_items)
        if not isinstance(handle, reclaim_asyncio.DrainHandle):
            self.broke("asyncio.install() returns a DrainHandle", repr(handle))
        self.drain_handle = handle
        return handle.mode

    def cmd_stream_reached(self, stream):
        ident = self.ident("reached")
        with self.attaching():
            self.tasks[ident] = self.loop.create_task(reclaim_asyncio.stream_reached(stream))
            self.run_loop(0)  # the task starts and launches its host function
        return ident

    def cmd_fork(self):
        read_fd, write_fd = os.pipe()
        parents_calls = set(self.futures)
        reported = len(self.violations)
        closes = self.closes
        begun = len(self.begun)
        pid = os.fork()
        if pid == 0:  # the fork child: report what it finds, then leave without running exit hooks
            os.close(read_fd)
            os._exit(self.fork_child_checks(write_fd, parents_calls, reported, closes, begun))
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

    def fork_child_checks(self, fd, parents_calls, reported, closes, begun):
        problems = []
        try:
            # Cancelling the parent's calls here runs their done-callbacks, which may close this queue.
            closed_here = self.closes != closes
            if cuda_reclaim.is_closed() and not closed_here:
                problems.append(("a fork child starts with an open queue (docs/design.md)", "it is closed"))
            for ident in sorted(parents_calls):
                if not self.futures[ident].done():
                    problems.append(("a fork child cancels the parent's outstanding calls", f"{ident} is pending"))
            if not closed_here:
                problems.extend(self.fork_child_barrier_checks(begun))
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
                problems.append(("conservation: handed_over == sum of the conservation buckets", f"{cuda_reclaim.stats()}"))
            problems.extend(self.violations[reported:])
        except BaseException as error:  # noqa: BLE001 - reported to the parent, whatever it is
            problems.append(("a fork child goes on on its own", f"the child raised {error!r}"))
        os.write(fd, pickle.dumps(problems))
        return 0

    def fork_child_barrier_checks(self, begun):
        """The barrier in a fork child: the parent's attachments are never handed back here, so a wait does
        not wait for them, and the parent's asyncio waits on the loop made before the fork end cancelled."""
        problems = []
        if len(self.begun) == begun:  # the child attached nothing (a done-callback may have)
            if cuda_reclaim.wait_handed_back(PROMPT_LIMIT) is not True:
                problems.append(("a fork child does not wait for the parent's attachments", "wait_handed_back() False"))
        held = [kept for kept in self.kept if not kept.handle.done()]
        if held and held[0].handle.wait(PROMPT_LIMIT) is not False:
            problems.append(("a parent's attachment's wait() is False in a fork child", f"{held[0]!r}"))
        # The child's own attachment, awaited on a loop made in the child (the loop made before the fork is the
        # parent's): its hand-back wakes that loop.
        graph = fake.fake_cuda_graph_create()
        mark = self.take_mark(record=False)  # what a done-callback attached here before is not waited for
        with self.attaching(foreign=False):
            attachment = cuda_reclaim.keep_alive(graph, object())
        own = asyncio.new_event_loop()
        try:
            task = own.create_task(reclaim_asyncio.handed_back(since=mark.value))
            own.run_until_complete(asyncio.sleep(0))  # the task registers its wait
            fake.fake_cuda_graph_destroy(graph)
            deadline = time.monotonic() + PROMPT_LIMIT
            while not task.done() and time.monotonic() < deadline:
                try:
                    own.run_until_complete(asyncio.wait([task], timeout=deadline - time.monotonic()))
                except DeliberateInterrupt:
                    pass  # as in run_loop()
        finally:
            own.close()
        if not attachment.done() or not task.done() or task.cancelled() or task.exception() or not task.result():
            detail = "pending" if not task.done() else repr(task.cancelled() or task.exception() or task.result())
            problems.append(("a fork child's asyncio wait wakes when the child's own attachment is handed back",
                             f"handed_back() on a loop made in the child: {detail} {PROMPT_LIMIT:.0f} s on"))
        # The parent's waits on the loop made before the fork end cancelled here, once that loop runs.
        waits = [wait for wait in self.waits if wait.task is not None and wait.started.is_set()]
        for wait in waits:
            if not self.finish_wait(wait, PROMPT_LIMIT):
                problems.append(("a fork child ends the asyncio waits of the loop made before the fork",
                                 f"{wait} still waits {PROMPT_LIMIT:.0f} s after the fork"))
            elif wait.result != FORK_CANCELLED and wait.entered.is_set():
                problems.append(("a fork child ends the asyncio waits of the loop made before the fork",
                                 f"{wait} returned {wait.result!r}"))
        return problems

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
        if self.executor is not None:
            self.executor.shutdown(wait=False)  # its workers leave once their waits returned

        def others():
            return [t.name for t in threading.enumerate()
                    if t is not threading.main_thread() and t.name != "model-exit-watchdog"]

        scenario.holds_within(lambda: not others(), timeout=5)
        extra = others()
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


class Kept:
    """One attachment of the `attach` rule: its Attachment (or NodeHandle) and how CUDA hands it back."""

    def __init__(self, kind, handle, graph, stream):
        self.kind, self.handle, self.graph, self.stream = kind, handle, graph, stream
        self.handed_back = False  # the model told the fake to hand it back

    def __repr__(self):
        return repr(self.handle)


class Mark:
    """A hand_back_mark(): its value, how many kept and foreign attachments came before it, and whether no
    attach was in flight around it (else no wait from it may be expected to return True)."""

    def __init__(self, value, tracked, foreign, clean):
        self.value, self.tracked, self.foreign, self.clean = value, tracked, foreign, clean


NO_MARK = Mark(None, 0, 0, True)  # since=None: everything, from the start


class Wait:
    """One wait of the barrier: where it was issued, what it covers (set right before its call) and what it saw."""

    def __init__(self, entry, site, since, timeout, one):
        self.entry, self.site, self.since, self.timeout, self.one = entry, site, since, timeout, one
        self.mark = None  # resolved where it is issued, or (finalizer, callback) where it runs
        self.covered, self.clean, self.prompt, self.begun = [], False, False, 0
        self.shut_before = self.in_drain = self.uncertain = False
        self.task = None
        self.result = None
        self.problems = []  # (promise, detail), moved to the model's violations by the main thread
        self.started, self.entered, self.finished = threading.Event(), threading.Event(), threading.Event()

    def promise(self):
        if self.one is not None:
            return ATTACHMENT_PROMPT
        return SINCE_PROMPT if self.mark is not None and self.mark.value is not None else WAIT_PROMPT

    def __repr__(self):
        since = None if self.mark is None else self.mark.value
        return f"<{self.entry} from {self.site}, since={since}, timeout={self.timeout}, covers {len(self.covered)}>"


class WaitingPayload:
    """A handed-over object whose finalizer (run by a drain) waits for the barrier."""

    def __init__(self, model, wait):
        self.model, self.wait = model, wait

    def __del__(self):
        self.model.perform(self.wait)


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
            watchdog = threading.Thread(
                target=_watch_the_exit,
                args=(model, reply_fd, time.monotonic()),
                name="model-exit-watchdog",
                daemon=True,
            )
            watchdog.start()
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
