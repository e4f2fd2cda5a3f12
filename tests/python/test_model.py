"""A model-based test of the public API on the fake driver (hypothesis stateful testing).

Rules hand references over, launch calls (stream-ordered ones too), await and cancel them, add and launch
host nodes, fire what the streams reached, drain (here and on another thread), trim, switch the automatic
drain, close (here, on another thread, from a call, a finalizer or a done-callback) and fork; finalizers and
done-callbacks call back into the API. The hand-back barrier's rules attach what CUDA keeps (graphs,
streams, host nodes) and hand it back in any order, take marks, and wait (wait_handed_back, flush,
Attachment.wait, NodeHandle.wait, asyncio's handed_back and flush, the pytest fixture's flush; with and
without since= and timeouts) from this thread, another thread, an executor's worker, a finalizer that a
drain runs, a done-callback and an asyncio task. After every step the worker (children/model_worker.py, one
forked process per example, since close() is for good) reports every promise it saw broken: both laws, every
counter but the gauges only grows, no call after close() returned or after its cancellation succeeded, every
future ends once the queue is closed, an ordered call ends before CUDA's thread goes past it,
launch_host_func_ordered and add_host_node_ordered are refused only while no drain would run them, close()
leaves no thread behind; a True wait finds every attachment it covers done(), a wait whose attachments are
all handed back returns True (a since= wait never waits for what came before its mark), no wait outlives
close(), and the process exits with waiters in any thread. Each rule declares the public names it calls
(@exercises); test_model_coverage.py checks them against the __all__ lists.

The bounded profile is derandomized and runs in the suite; CUDA_RECLAIM_MODEL_LONG=1 selects the long
one (random, many more examples; docs/design.md, "Long passes").
"""

import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile

import pytest

import fake_cuda

try:
    from hypothesis import HealthCheck, Phase, event, settings, strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
except ImportError as missing:  # a collection error, not a skip: the model is part of the suite
    raise ImportError(
        "test_model.py needs hypothesis: install tests/requirements.txt (third_party/pythons.sh's "
        "ensure_requirements does)"
    ) from missing

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "children", "model_worker.py")
CALL_DURING_FINALIZATION = 97  # the worker's exit status when a call began after its last answer
STEP_LIMIT = 60  # seconds one command may take in the worker before it counts as hung
LONG = os.environ.get("CUDA_RECLAIM_MODEL_LONG", "") not in ("", "0")
# Promises to set aside (comma-separated parts of their names), so that a long pass looks past a bug
# already known for others; the suite sets none aside.
SET_ASIDE = tuple(part.strip() for part in os.environ.get("CUDA_RECLAIM_MODEL_SET_ASIDE", "").split(",") if part.strip())
# As children/model_worker.py (which cannot be imported here: it loads the driver at import).
ACTIONS = ("none", "defer", "launch", "drain", "trim", "close", "thread", "off", "raise", "interrupt")
# A done-callback runs inside future.set_result(), which lets a BaseException through to its caller, and an
# await hands a call's KeyboardInterrupt to its task, which asyncio raises out of the loop: both as designed.
DONE_ACTIONS = tuple(action for action in ACTIONS if action != "interrupt")
AWAIT_ACTIONS = DONE_ACTIONS
MODES = ("thread", "off")
STREAMS = (0x5100, 0x5200)  # fake driver streams: any handle is one
# The hand-back barrier's waits (as children/model_worker.py): each entry point with each site it may be
# issued from. The blocking ones from this thread, another thread, an executor's worker, a finalizer that a
# drain runs and a done-callback; the asyncio ones from a task on this thread's loop, a loop on another
# thread and a loop in an executor's worker.
SYNC_WAITS = ("wait_handed_back", "flush", "attachment", "node", "reclaim_flush")
ASYNC_WAITS = ("asyncio_handed_back", "asyncio_flush")
SYNC_SITES = ("main", "thread", "executor", "finalizer", "callback")
ASYNC_SITES = ("task", "thread", "executor")
WAITS = tuple((entry, site) for entry in SYNC_WAITS for site in SYNC_SITES) + tuple(
    (entry, site) for entry in ASYNC_WAITS for site in ASYNC_SITES
)
SINCE = ("none", "latest", "oldest", "fresh")  # no mark, the latest or the oldest mark so far, a mark taken now
WAIT_TIMEOUTS = ("none", "zero", "short", "long")

if LONG:
    PROFILE = settings(
        max_examples=int(os.environ.get("CUDA_RECLAIM_MODEL_EXAMPLES", "2000")),
        stateful_step_count=40,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
else:
    # No shrinking here: a failure in the suite names the broken promise and its example's commands at
    # once; the long profile shrinks it to a minimal example.
    PROFILE = settings(
        max_examples=100,
        stateful_step_count=40,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )


class Zygote:
    """children/model_worker.py: forks one worker per example and relays its answers."""

    def __init__(self, log):
        self.cmd_r, self.cmd_w = os.pipe()
        self.reply_r, self.reply_w = os.pipe()
        self.log = log
        env = dict(os.environ, CUDA_RECLAIM_LIBCUDA=fake_cuda.PATH, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        env.pop("CUDA_RECLAIM_REPORT", None)
        self.process = subprocess.Popen(
            [sys.executable, WORKER, str(self.cmd_r), str(self.reply_w)],
            pass_fds=(self.cmd_r, self.reply_w),
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,  # one kill reaches the zygote, its worker and the worker's fork child
        )
        os.close(self.cmd_r)
        os.close(self.reply_w)
        self.history = []
        self.log_start = 0  # where the current example's output begins
        self.dead = None  # why the zygote was killed, once it was

    def send(self, *message, answered=True):
        if self.dead is not None:  # a hung worker was killed: every later example fails the same way
            pytest.fail(self.dead)
        data = pickle.dumps(message)
        os.write(self.cmd_w, struct.pack("!I", len(data)) + data)
        self.history.append(message)
        return self.receive(message) if answered else None

    def receive(self, message):
        header = self._read(4, message)
        return pickle.loads(self._read(struct.unpack("!I", header)[0], message))

    def _read(self, size, message):
        chunks = []
        while size:
            ready, _, _ = select.select([self.reply_r], [], [], STEP_LIMIT)
            if not ready:
                self.dead = f"the model's worker hung: no answer to {message!r} within {STEP_LIMIT} s\n{self.tail()}"
                self.kill()
                pytest.fail(self.dead)
            chunk = os.read(self.reply_r, size)
            if not chunk:
                self.dead = f"the model's worker died during {message!r}\n{self.tail()}"
                self.kill()
                pytest.fail(self.dead)
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def tail(self):
        self.log.flush()
        self.log.seek(self.log_start)
        text = self.log.read().decode(errors="replace")
        steps = "\n".join(repr(step) for step in self.history)
        return f"the example's commands:\n{steps}\nworker output (tail):\n{text[-3000:]}"

    def kill(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(10)

    def quit(self):
        try:
            if self.dead is None:
                self.send("quit", answered=False)
                self.process.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            self.kill()
            os.close(self.cmd_w)
            os.close(self.reply_r)


def exercises(*names):
    """Declares the public names a rule calls (test_model_coverage.py compares their union with the __all__
    lists): `name` for cuda_reclaim's, `module.name` for a public submodule's."""

    def declare(function):
        function.exercises = names
        return function

    return declare


_BROKEN_TYPES = {}


def broken_promise(promise):
    """An AssertionError subclass of its own for each promise: hypothesis tells failures apart by type, so
    one run reports each broken promise separately instead of the first one found."""
    if promise not in _BROKEN_TYPES:
        name = "Broken_" + "".join(c if c.isalnum() else "_" for c in promise)[:60]
        _BROKEN_TYPES[promise] = type(name, (AssertionError,), {})
    return _BROKEN_TYPES[promise]


class PublicApiModel(RuleBasedStateMachine):
    """Each example: one worker process; each rule: one command; each step ends with the promises checked."""

    zygote = None  # set by the model_zygote fixture
    fired = None  # rule name -> times fired, over the whole run
    failed = False  # a promise was broken (the rule coverage is not checked then)

    def __init__(self):
        super().__init__()
        self.answer = None
        self.started = False
        self.steps = 0
        self.broken = []  # (step, rule, promise, detail), in the order seen

    def step(self, rule_name, *command):
        event(f"rule {rule_name}")
        self.fired[rule_name] = self.fired.get(rule_name, 0) + 1
        self.steps += 1
        self.answer = self.zygote.send(*command)
        for promise, detail in self.answer["violations"]:
            if any(part in promise for part in SET_ASIDE):
                event(f"set aside: {promise}")
                continue
            self.broken.append((self.steps, rule_name, promise, detail))
        return self.answer

    @exercises("set_auto_drain")
    @initialize(mode=st.sampled_from(MODES), ending=st.sampled_from(("close", "exit")))
    def fork_a_worker(self, mode, ending):
        """A fresh worker, with the automatic drain in `mode`; it ends by close() or by exiting (the
        atexit hook closes, and finalization follows)."""
        event(f"initial mode {mode}")
        event(f"ends by {ending}")
        self.ending = ending
        self.zygote.log.flush()
        self.zygote.log_start = os.fstat(self.zygote.log.fileno()).st_size
        self.zygote.history = []
        self.zygote.send("fork", mode, answered=False)  # the worker answers only when it ends
        self.started = True

    @exercises("defer_release")
    @rule(count=st.integers(1, 3), action=st.sampled_from(ACTIONS))
    def hand_over(self, count, action):
        self.step("hand_over", "hand_over", count, action)

    @exercises("keep_alive_until")
    @rule(stream=st.sampled_from(STREAMS), count=st.integers(1, 40), action=st.sampled_from(ACTIONS))
    def keep_alive_until(self, stream, count, action):
        self.step("keep_alive_until", "keep_alive_until", stream, count, action)

    @exercises("launch_host_func")
    @rule(stream=st.sampled_from(STREAMS), action=st.sampled_from(ACTIONS), done=st.sampled_from(DONE_ACTIONS))
    def launch(self, stream, action, done):
        self.step("launch", "launch", stream, action, done)

    @exercises("launch_host_func_ordered")
    @rule(stream=st.sampled_from(STREAMS), action=st.sampled_from(ACTIONS), done=st.sampled_from(DONE_ACTIONS))
    def launch_ordered(self, stream, action, done):
        self.step("launch_ordered", "launch_ordered", stream, action, done)

    @rule(index=st.integers(0, 7))
    def cancel_launch(self, index):
        self.step("cancel_launch", "cancel_launch", index)

    @exercises("asyncio.run_when_reached")
    @rule(stream=st.sampled_from(STREAMS), action=st.sampled_from(AWAIT_ACTIONS))
    def await_run_when_reached(self, stream, action):
        self.step("await_run_when_reached", "await", stream, action)

    @rule(index=st.integers(0, 7))
    def cancel_await(self, index):
        self.step("cancel_await", "cancel_await", index)

    @rule()
    def run_loop(self):
        self.step("run_loop", "run_loop")

    @exercises("add_host_node", "NodeHandle")
    @rule(action=st.sampled_from(ACTIONS))
    def add_host_node(self, action):
        self.step("add_host_node", "add_host_node", action)

    @exercises("add_host_node_ordered")
    @rule(action=st.sampled_from(ACTIONS))
    def add_host_node_ordered(self, action):
        self.step("add_host_node_ordered", "add_host_node_ordered", action)

    @rule(stream=st.sampled_from(STREAMS))
    def launch_graph(self, stream):
        self.step("launch_graph", "launch_graph", stream)

    @rule()
    def fire(self):
        self.step("fire", "fire")

    @exercises("drain")
    @rule(budget=st.sampled_from((None, 1, 2, 8)))
    def drain(self, budget):
        self.step("drain", "drain", budget)

    @rule(delay=st.sampled_from((0.0001, 0.0005, 0.002)))
    def drain_interrupted(self, delay):
        answer = self.step("drain_interrupted", "drain_interrupted", delay)
        event(f"interrupted drain: {answer['result']}")

    @rule(budget=st.sampled_from((None, 1, 2)))
    def drain_on_another_thread(self, budget):
        self.step("drain_on_another_thread", "drain_elsewhere", budget)

    @exercises("trim")
    @rule()
    def trim(self):
        self.step("trim", "trim")

    @exercises("set_auto_drain")
    @rule(mode=st.sampled_from(MODES))
    def set_auto_drain(self, mode):
        self.step("set_auto_drain", "set_mode", mode)

    @rule()
    def collect_garbage(self):
        self.step("collect_garbage", "collect")

    @exercises("close")
    @rule(where=st.sampled_from(("main", "other thread")))
    def close(self, where):
        self.step("close", "close", where)

    @rule()
    def fork(self):
        self.step("fork", "fork")

    @exercises("keep_alive", "keep_alive_until", "add_host_node", "Attachment", "NodeHandle")
    @rule(kind=st.sampled_from(("graph", "stream", "node")), epochs=st.sampled_from((1, 1, 2, 8)))
    def attach(self, kind, epochs):
        """Attachments the model keeps (keep_alive, keep_alive_until, add_host_node), CUDA holding each until
        `hand_back`; `epochs` of them with a mark between each (as many epochs holding something)."""
        self.step("attach", "attach", kind, epochs)

    @rule(index=st.integers(0, 15), where=st.sampled_from(("here", "cuda thread")))
    def hand_back(self, index, where):
        """CUDA hands one kept attachment back, in any order."""
        self.step("hand_back", "hand_back", index, where)

    @exercises("hand_back_mark")
    @rule()
    def mark(self):
        self.step("mark", "mark")

    @exercises(
        "wait_handed_back", "flush", "Attachment", "NodeHandle", "asyncio.handed_back", "asyncio.flush",
        "pytest_plugin.Reclaim",
    )
    @rule(
        where=st.sampled_from(WAITS),
        since=st.sampled_from(SINCE),
        timeout=st.sampled_from(WAIT_TIMEOUTS),
        index=st.integers(0, 15),
    )
    def wait(self, where, since, timeout, index):
        """One wait of the hand-back barrier, from where it is issued; a True one finds all it covers done(),
        one whose attachments are all back returns True, and every one returns once the queue is closed."""
        entry, site = where
        event(f"wait: {entry} from {site}")
        self.step("wait", "wait", entry, site, since, timeout, index)

    @exercises("fileno", "pending", "is_closed", "get_auto_drain", "get_include", "NodeHandle")
    @rule()
    def inspect(self):
        self.step("inspect", "inspect")

    @exercises("show_config")
    @rule()
    def show_config(self):
        self.step("show_config", "show_config")

    @exercises("metrics.register", "metrics.ReclaimCollector")
    @rule()
    def scrape_metrics(self):
        self.step("scrape_metrics", "scrape")

    @exercises("asyncio.install", "asyncio.DrainHandle")
    @rule(max_items=st.sampled_from((None, 1, 4096)), cancel=st.booleans())
    def install_loop_drain(self, max_items, cancel):
        self.step("install_loop_drain", "install", max_items, cancel)

    @exercises("asyncio.stream_reached")
    @rule(stream=st.sampled_from(STREAMS))
    def await_stream_reached(self, stream):
        self.step("await_stream_reached", "stream_reached", stream)

    @exercises("stats", "conserved")
    @invariant()
    def promises_kept(self):
        # The worker checked every promise after this step; the example goes on to its end and fails in
        # teardown, so that a failure that depends on timing does not change how many steps are drawn.
        if self.answer is not None and self.answer["violations"]:
            event("a promise was broken")

    def teardown(self):
        if not self.started:
            return
        self.step("finish", "finish", self.ending)
        status = self.zygote.receive(("finish", self.ending))
        if status == ("exited", CALL_DURING_FINALIZATION << 8):
            self.broken.append((self.steps, "finish", "no call runs after close() returned (docs/callbacks.md)",
                                "a call began during interpreter finalization"))
        if self.broken:
            PublicApiModel.failed = True
            _, _, promise, _ = self.broken[0]
            lines = "\n".join(f"  after step {step} ({rule}): {promise}: {detail}" for step, rule, promise, detail in self.broken)
            raise broken_promise(promise)(f"promise broken: {promise}\n{lines}\n{self.zygote.tail()}")
        assert status == ("exited", 0), f"the worker ended with {status}\n{self.zygote.tail()}"


@pytest.fixture(scope="module", autouse=True)
def model_zygote():
    """One zygote for the module's examples; afterwards, every rule must have fired at least once."""
    if not os.path.exists(fake_cuda.PATH):
        pytest.skip(f"fake driver not built: {fake_cuda.PATH}")
    with tempfile.TemporaryFile() as log:
        zygote = Zygote(log)
        PublicApiModel.zygote = zygote
        PublicApiModel.fired = {}
        PublicApiModel.failed = False
        try:
            yield zygote
        finally:
            zygote.quit()
    if PublicApiModel.failed:
        return
    rules = [name for name, value in vars(PublicApiModel).items() if hasattr(value, "hypothesis_stateful_rule")]
    assert rules, "no rules found: the check below would pass vacuously"
    never = sorted(set(rules) - set(PublicApiModel.fired))
    assert not never, f"rules that never fired (the profile is too small to cover the API): {never}"


class TestPublicApiKeepsItsPromisesInEveryState(PublicApiModel.TestCase):
    settings = PROFILE
