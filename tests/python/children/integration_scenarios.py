"""Child of test_integrations.py: one scenario per run, named by the first argument. The libraries are the
stand-ins of integration_standins.py (registered under their names), the driver the fake libcuda
(tests/graph/fake_libcuda.cc) that CUDA_RECLAIM_LIBCUDA names, with CUDA threads that run each stream's work
as CUDA does; import_errors runs with the libraries' modules blocked instead."""

import asyncio
import ctypes
import os
import sys
import threading
import warnings

import cuda_reclaim

import integration_standins as standins
import scenario

WAIT = 30.0  # seconds: a bound on waits that end as soon as their condition holds


def with_the_fake_driver(cuda_threads=1):
    """The fake driver (fake_cuda.py, one directory up) with `cuda_threads` CUDA threads, the automatic
    drain thread on, and the stand-ins registered."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import fake_cuda

    fake = fake_cuda.load()
    cuda_reclaim.set_auto_drain("thread")
    fake.fake_cuda_start_threads(cuda_threads)
    standins.register()
    return fake


def synchronize(fake, stream):
    assert fake.fake_cuda_stream_synchronize(stream, int(WAIT * 1000)) == 0, "the stream did not finish"


def install_uninstall_and_the_context_manager_restore_the_originals():
    standins.register()
    from cuda_reclaim.integrations import cuda_core, cupy, numba_cuda

    cases = [
        (numba_cuda, [(standins.NumbaStream, "add_callback"), (standins.NumbaStream, "async_done")]),
        (cupy, [(standins.CupyBaseStream, "add_callback"), (standins.CupyBaseStream, "launch_host_func")]),
        (
            cuda_core,
            [(standins.GraphDefinition, "callback"), (standins.GraphNode, "callback")],
        ),
    ]
    inherited = [(standins.CupyExternalStream, "add_callback"), (standins.MemsetNode, "callback")]
    for module, targets in cases:
        before = {target: target[0].__dict__[target[1]] for target in targets}
        assert not module.is_installed()
        assert module.install() is True
        assert module.install() is False, "a second install() changes nothing"
        assert module.is_installed()
        for (cls, name), own in before.items():
            assert cls.__dict__[name] is not own, (cls, name)
        assert module.uninstall() is True
        assert module.uninstall() is False, "a second uninstall() changes nothing"
        for (cls, name), own in before.items():
            assert cls.__dict__[name] is own, (cls, name)
        with module.installed():
            assert module.is_installed()
            with module.installed():  # nested: the inner block did not install it, so it leaves it installed
                pass
            assert module.is_installed()
            for (cls, name), own in before.items():
                assert cls.__dict__[name] is not own, (cls, name)
        assert not module.is_installed()
        for (cls, name), own in before.items():
            assert cls.__dict__[name] is own, (cls, name)
    for cls, name in inherited:
        assert name not in cls.__dict__, "the subclass inherits the method; nothing was left on it"
    print("restored")


def an_attribute_replaced_by_someone_else_is_left_as_they_set_it():
    standins.register()
    from cuda_reclaim.integrations import cupy

    def theirs(self, callback, arg):
        pass

    own = standins.CupyBaseStream.__dict__["add_callback"]
    cupy.install()
    standins.CupyBaseStream.add_callback = theirs
    cupy.uninstall()
    assert standins.CupyBaseStream.__dict__["add_callback"] is theirs
    assert standins.CupyBaseStream.__dict__["launch_host_func"] is not own
    assert standins.CupyBaseStream.launch_host_func.__module__ == "integration_standins", "the other one is restored"


def an_immutable_type_is_patched_and_restored():
    # array.array is an extension type that refuses setattr (as a Cython cdef class of cuda.core does).
    import array

    from cuda_reclaim.integrations import _support

    try:
        array.array.tolist = len
        raise AssertionError("array.array accepted setattr: this scenario needs an immutable type")
    except TypeError:
        pass
    own = array.array.__dict__["tolist"]

    def tolist(self):
        return "patched"

    patches = _support.Patches()
    assert patches.install([(array.array, "tolist", tolist), (array.array, "reclaim_probe", tolist)])
    a = array.array("b", [1, 2])
    assert a.tolist() == "patched" and a.reclaim_probe() == "patched"
    assert patches.uninstall()
    assert array.array.__dict__["tolist"] is own and a.tolist() == [1, 2]
    assert not hasattr(a, "reclaim_probe")



def overlapping_installed_blocks_keep_the_integration_until_the_last_leaves():
    # Two threads' installed() blocks overlap: the integration stays in force until the last one leaves; an
    # uninstall() while a block is inside changes nothing (False); an install() inside a block stays after it.
    standins.register()
    from cuda_reclaim.integrations import numba_cuda

    own = standins.NumbaStream.__dict__["add_callback"]
    a_inside, b_inside, a_left, b_may_leave = (threading.Event() for _ in range(4))
    seen = {}

    def block_a():
        with numba_cuda.installed():
            a_inside.set()
            assert b_inside.wait(WAIT)
        a_left.set()

    def block_b():
        assert a_inside.wait(WAIT)
        with numba_cuda.installed():
            b_inside.set()
            assert a_left.wait(WAIT)
            seen["after a left"] = numba_cuda.is_installed()
            seen["uninstall inside b"] = numba_cuda.uninstall()
            seen["still installed"] = numba_cuda.is_installed()
            assert b_may_leave.wait(WAIT)

    threads = [threading.Thread(target=block_a), threading.Thread(target=block_b)]
    for thread in threads:
        thread.start()
    assert a_left.wait(WAIT)
    b_may_leave.set()
    for thread in threads:
        thread.join(WAIT)
    assert seen == {"after a left": True, "uninstall inside b": False, "still installed": True}, seen
    assert not numba_cuda.is_installed() and standins.NumbaStream.__dict__["add_callback"] is own
    with numba_cuda.installed():
        assert numba_cuda.install() is False  # already in force: now an explicit install, which stays
    assert numba_cuda.is_installed(), "an install() inside a block stays after it"
    assert numba_cuda.uninstall() is True and standins.NumbaStream.__dict__["add_callback"] is own


def a_wrapper_left_by_uninstall_leads_to_the_librarys_own_method():
    # Another library wraps the integration's method; uninstall() leaves the wrapper (it is theirs), and a call
    # through it reaches CuPy's own method, not cuda-reclaim. Once they put back what they found (the
    # integration's method), a later install() and uninstall() restore CuPy's own method exactly.
    standins.register()
    from cuda_reclaim.integrations import cupy

    base = standins.CupyBaseStream
    own = base.__dict__["add_callback"]
    cupy.install()
    found = base.__dict__["add_callback"]

    def their_wrapper(self, callback, arg):
        return found(self, callback, arg)

    base.add_callback = their_wrapper
    assert cupy.uninstall() is True
    base(0x9240).add_callback(print, "after uninstall")
    assert standins.OWN_CALLS == [("cupy add_callback", print, "after uninstall")], standins.OWN_CALLS
    base.add_callback = found  # they put back what they found
    assert cupy.install() is True and cupy.uninstall() is True
    assert base.__dict__["add_callback"] is own, "CuPy's own method, not the integration's"



def a_block_that_the_gc_ends_inside_another_install_leaves_cleanly():
    # A generator that yields inside installed() and is dropped unfinished in a reference cycle: the gc closes
    # it whenever a collection runs, also inside another block's install() on this thread (the lock is
    # re-entrant). Nothing hangs, and at the end nothing is installed and no block is counted.
    import gc

    standins.register()
    from cuda_reclaim.integrations import cupy

    def batches():
        with cupy.installed():
            yield 1
            yield 2

    class Holder:
        def __init__(self):
            self.me = self
            self.batches = batches()
            next(self.batches)

    gc.set_threshold(50)
    for _ in range(2000):
        Holder()
        with cupy.installed():
            pass
    gc.collect()
    assert not cupy.is_installed() and cupy._PATCHES._blocks == 0, cupy._PATCHES._blocks
    print("clean")


def a_fork_child_counts_only_the_forking_threads_blocks_and_takes_the_lock_afresh():
    # At the fork another thread is inside an installed() block and holds the integration's lock: in the
    # child, that thread does not exist; the child installs and uninstalls as if it never had.
    standins.register()
    from cuda_reclaim.integrations import cupy

    own = standins.CupyBaseStream.__dict__["add_callback"]
    inside, leave = threading.Event(), threading.Event()

    def block_elsewhere():
        with cupy.installed():
            with cupy._PATCHES._lock:
                inside.set()
                leave.wait(WAIT)

    thread = threading.Thread(target=block_elsewhere)
    thread.start()
    assert inside.wait(WAIT)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            assert cupy.is_installed()
            assert cupy.uninstall() is True, "no block of the child holds it"
            assert standins.CupyBaseStream.__dict__["add_callback"] is own
            with cupy.installed():
                assert cupy.is_installed()
            assert standins.CupyBaseStream.__dict__["add_callback"] is own
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    leave.set()
    thread.join(WAIT)
    assert os.waitstatus_to_exitcode(status) == 0, status
    assert not cupy.is_installed() and standins.CupyBaseStream.__dict__["add_callback"] is own
    print("child clean")


def numba_add_callback_passes_stream_status_and_arg_in_stream_order():
    fake = with_the_fake_driver()
    from cuda_reclaim.integrations import numba_cuda

    calls = []
    main = threading.get_ident()
    with numba_cuda.installed():
        stream = standins.NumbaStream(0x9100)
        fake.fake_cuda_stream_hold(stream.handle, 1)
        arg = object()
        for i in range(5):
            stream.add_callback(lambda s, status, a, i=i: calls.append((i, s, status, a, threading.get_ident())))
        stream.add_callback(lambda s, status, a: calls.append(("default", s, status, a, threading.get_ident())))
        stream.add_callback(lambda s, status, a: calls.append(("arg", s, status, a, threading.get_ident())), arg)
        assert calls == [], "nothing runs before the stream gets there"
        fake.fake_cuda_stream_hold(stream.handle, 0)
        synchronize(fake, stream.handle)
        # The ordered form: the stream finishes only after each call has returned.
        assert [c[0] for c in calls] == [0, 1, 2, 3, 4, "default", "arg"], calls
        assert all(c[1] is stream and c[2] == 0 for c in calls), calls
        assert calls[5][3] is None and calls[6][3] is arg
        assert all(c[4] != main for c in calls), "ran in the drain thread"
    assert standins.OWN_CALLS == [], standins.OWN_CALLS


def numba_add_callback_turns_an_exception_into_a_warning():
    fake = with_the_fake_driver()
    from cuda_reclaim.integrations import numba_cuda

    def raises(stream, status, arg):
        raise ValueError(f"boom {arg}")

    with numba_cuda.installed(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stream = standins.NumbaStream(0x9110)
        stream.add_callback(raises, 7)
        synchronize(fake, stream.handle)
    assert [str(w.message) for w in caught] == ["Exception in stream callback: boom 7"], caught


def numba_async_done_completes_on_the_loop_and_leaves_a_cancelled_future_alone():
    fake = with_the_fake_driver(cuda_threads=2)
    from cuda_reclaim.integrations import numba_cuda

    async def main():
        loop = asyncio.get_running_loop()
        completed_on = []
        streams = [standins.NumbaStream(0x9120 + i) for i in range(3)]
        fake.fake_cuda_stream_hold(streams[0].handle, 1)
        held = [streams[0].async_done() for _ in range(3)]
        others = [stream.async_done() for stream in streams[1:]]
        for future in held + others:
            assert isinstance(future, asyncio.Future) and future.get_loop() is loop
            future.add_done_callback(lambda f: completed_on.append(threading.get_ident()))
        assert await asyncio.wait_for(asyncio.gather(*others), WAIT) == streams[1:]
        assert not any(f.done() for f in held), "the held stream has not got there"
        held[0].cancel()
        fake.fake_cuda_stream_hold(streams[0].handle, 0)
        assert await asyncio.wait_for(asyncio.gather(*held[1:]), WAIT) == [streams[0]] * 2
        assert held[0].cancelled()
        assert completed_on and set(completed_on) == {threading.get_ident()}, "completed on the loop's thread"

    with numba_cuda.installed():
        asyncio.run(main())
    assert standins.OWN_CALLS == []


def ordered_callbacks_are_refused_with_the_librarys_method_named_when_no_drain_would_run_them():
    with_the_fake_driver()
    from cuda_reclaim.integrations import cupy, numba_cuda

    cuda_reclaim.set_auto_drain("off")
    with numba_cuda.installed(), cupy.installed():
        numba_stream, cupy_stream = standins.NumbaStream(0x9180), standins.CupyBaseStream(0x9270)
        for name, launch in (
            ("Stream.add_callback", lambda: numba_stream.add_callback(print)),
            ("Stream.add_callback", lambda: cupy_stream.add_callback(print, None)),
            ("Stream.launch_host_func", lambda: cupy_stream.launch_host_func(print, None)),
        ):
            try:
                launch()
                raise AssertionError(f"{name}() launched an ordered call with no drain to run it")
            except RuntimeError as error:
                assert str(error).startswith(f'{name}(): the automatic drain is "off"'), error
    assert cuda_reclaim.stats()["host_calls"] == 0


def cupy_callbacks_pass_their_arguments_in_stream_order():
    fake = with_the_fake_driver()
    from cuda_reclaim.integrations import cupy

    calls = []
    with cupy.installed():
        stream = standins.CupyBaseStream(0x9200)
        external = standins.CupyExternalStream(0x9200)
        fake.fake_cuda_stream_hold(stream.ptr, 1)
        stream.add_callback(lambda s, status, arg: calls.append(("add_callback", s, status, arg)), "a")
        stream.launch_host_func(lambda arg: calls.append(("launch_host_func", arg)), "b")
        external.add_callback(lambda s, status, arg: calls.append(("external", s, status, arg)), "c")
        external.launch_host_func(calls.append, "d")
        assert calls == []
        fake.fake_cuda_stream_hold(stream.ptr, 0)
        synchronize(fake, stream.ptr)
        assert calls == [
            ("add_callback", stream, 0, "a"),
            ("launch_host_func", "b"),
            ("external", external, 0, "c"),
            "d",
        ], calls
    assert standins.OWN_CALLS == []


def cupy_exceptions_reach_the_unraisablehook_before_the_stream_goes_on():
    fake = with_the_fake_driver()
    from cuda_reclaim.integrations import cupy

    records = []
    sys.unraisablehook = records.append

    def raises(arg):
        raise RuntimeError(f"callback raised {arg}")

    with cupy.installed():
        stream = standins.CupyBaseStream(0x9210)
        stream.launch_host_func(raises, 1)
        stream.add_callback(lambda s, status, arg: raises(arg), 2)
        synchronize(fake, stream.ptr)
    assert [r.exc_type for r in records] == [RuntimeError, RuntimeError], records
    assert [str(r.exc_value) for r in records] == ["callback raised 1", "callback raised 2"]


def cupy_launch_host_func_on_a_capturing_stream_is_cupys_own():
    with_the_fake_driver()
    from cuda_reclaim.integrations import cupy

    def callback(arg):
        pass

    with cupy.installed():
        stream = standins.CupyBaseStream(0x9220)
        stream.capturing = True
        stream.launch_host_func(callback, "x")
    assert standins.OWN_CALLS == [("cupy launch_host_func", callback, "x")], standins.OWN_CALLS


def recording_the_nodes_added():
    """cuda_reclaim's add_node (what the integration adds its nodes with), recording each node in its graph's
    list of standins.NODES (the driver's node list of cuda.core's GraphDefinition.nodes(), which the fake
    driver does not keep)."""
    from cuda_reclaim import _graph

    add_node = _graph.add_node

    def recording(function, graph, *args, **kwargs):
        node = add_node(function, graph, *args, **kwargs)
        standins.NODES.setdefault(int(graph.handle), []).append(int(node))
        return node

    _graph.add_node = recording


def cuda_core_python_callables_become_host_nodes_that_run_in_a_drain_at_every_launch():
    fake = with_the_fake_driver()
    from cuda_reclaim.integrations import cuda_core

    recording_the_nodes_added()
    ran = []
    entered, release = threading.Event(), threading.Event()

    def first():
        ran.append(("first", threading.get_ident()))
        entered.set()
        assert release.wait(WAIT)

    graph = fake.fake_cuda_graph_create()
    with cuda_core.installed():
        definition = standins.GraphDefinition(graph)
        first_node = definition.callback(first)
        second_node = first_node.callback(lambda: ran.append(("second", threading.get_ident())))
        theirs = cuda_core.HOST_FN(lambda data: None)
        definition.callback(theirs, user_data=1234)  # a ctypes callback goes to cuda.core as it is
        lam = lambda: None  # noqa: E731
        first_node.callback(lam, user_data=5)  # cuda.core's own ValueError for this: unchanged
    assert isinstance(first_node, standins.GraphNode) and isinstance(second_node, standins.GraphNode)
    assert [first_node.handle, second_node.handle] == standins.NODES[graph], "cuda.core's objects for the nodes"
    assert first_node.graph is definition and second_node.graph is definition
    assert fake.fake_cuda_graph_host_node_count(graph) == 2
    assert standins.OWN_CALLS == [("GraphDefinition.callback", theirs, 1234), ("GraphNode.callback", lam, 5)]
    executable = fake.fake_cuda_graph_instantiate(graph)
    stream = 0x9300
    fake.fake_cuda_graph_launch(executable, stream)
    fake.fake_cuda_graph_launch(executable, stream)
    assert entered.wait(WAIT)
    # Stream order: the graph waits at the node until its call has returned.
    held = fake.fake_cuda_stream_synchronize(stream, 0)
    release.set()
    synchronize(fake, stream)
    assert held == 1, "the stream went on while the node's call ran"
    assert [name for name, _ in ran] == ["first", "second", "first", "second"], "in the graph's order, all run"
    assert threading.get_ident() not in {thread for _, thread in ran}, "ran in the drain thread"
    fake.fake_cuda_graph_exec_destroy(executable)
    fake.fake_cuda_graph_destroy(graph)


def cuda_core_callback_needs_a_drain():
    fake = with_the_fake_driver()
    from cuda_reclaim.integrations import cuda_core

    cuda_reclaim.set_auto_drain("off")
    graph = fake.fake_cuda_graph_create()
    with cuda_core.installed():
        definition = standins.GraphDefinition(graph)
        for name, add in (
            ("GraphDefinition.callback", definition.callback),
            ("GraphNode.callback", standins.GraphNode(definition, None).callback),
        ):
            try:
                add(print)
                raise AssertionError(f"{name}() added an ordered node with no drain to run it")
            except RuntimeError as error:
                assert str(error).startswith(f'{name}(): the automatic drain is "off"'), error
    assert fake.fake_cuda_graph_host_node_count(graph) == 0
    fake.fake_cuda_graph_destroy(graph)


def cuda_core_callback_exceptions_reach_the_unraisablehook():
    fake = with_the_fake_driver()
    from cuda_reclaim.integrations import cuda_core

    recording_the_nodes_added()
    records, reported = [], threading.Event()

    def hook(record):
        records.append(record)
        reported.set()

    sys.unraisablehook = hook

    def throws():
        raise RuntimeError("callback raised")

    graph = fake.fake_cuda_graph_create()
    with cuda_core.installed():
        standins.GraphDefinition(graph).callback(throws)
    executable = fake.fake_cuda_graph_instantiate(graph)
    fake.fake_cuda_graph_launch(executable, 0x9310)
    assert reported.wait(WAIT)
    assert [r.exc_type for r in records] == [RuntimeError], records
    assert "callback raised" in str(records[0].exc_value)


def cuda_core_host_call_runs_once_in_a_drain_before_cudas_thread_goes_on():
    with_the_fake_driver()
    from cuda_reclaim.integrations import cuda_core

    ran = []
    records = []
    sys.unraisablehook = records.append

    def add(a, *, b):
        ran.append(threading.get_ident())
        return a + b

    def throws():
        raise RuntimeError("host call raised")

    calls = [cuda_core.host_call(0x9320, add, 1, b=2), cuda_core.host_call(0x9320, throws)]
    for pointer, user_data, future in calls:
        assert isinstance(pointer, cuda_core.HOST_FN) and pointer.restype is None
        assert tuple(pointer.argtypes) == (ctypes.c_void_p,) and isinstance(user_data, int) and user_data
        assert not future.done()
        # CUDA's thread calls the pointer with the user data: here a thread of ours does, as CUDA would.
        cuda = threading.Thread(target=pointer, args=(user_data,))
        cuda.start()
        cuda.join(WAIT)
        assert not cuda.is_alive()
        assert future.done(), "ordered: the call had run when CUDA's thread went on"
    assert calls[0][2].result(timeout=0) == 3 and len(ran) == 1 and ran[0] != threading.get_ident()
    assert calls[1][2].result(timeout=0) is None
    assert [str(r.exc_value) for r in records] == ["host call raised"], records


def cuda_core_withdraw_cancels_a_host_call_cuda_never_got():
    with_the_fake_driver()
    from cuda_reclaim.integrations import cuda_core

    pointer, user_data, future = cuda_core.host_call(0x9330, print, "never")
    cuda_core.withdraw(user_data)
    assert future.cancelled()
    try:
        cuda_core.withdraw(user_data)
        raise AssertionError("a second withdraw() was accepted")
    except ValueError as error:
        print(error)


def cuda_core_host_call_needs_a_drain_and_gives_nothing_after_close():
    with_the_fake_driver()
    from cuda_reclaim.integrations import cuda_core

    cuda_reclaim.set_auto_drain("off")
    try:
        cuda_core.host_call(0x9340, print)
        raise AssertionError("an ordered host_call() was prepared with no drain to run it")
    except RuntimeError as error:
        assert str(error).startswith('host_call(): the automatic drain is "off"'), error
    cuda_reclaim.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pointer, user_data, future = cuda_core.host_call(0x9340, print)
    assert not pointer and user_data == 0 and future.cancelled()
    assert [str(w.message).split(":")[0] for w in caught] == ["host_call() after cuda_reclaim.close()"], caught


def cupy_capture_fallback_is_cupys_own_after_a_wrapper_and_a_reinstall():
    with_the_fake_driver()
    from cuda_reclaim.integrations import cupy

    base = standins.CupyBaseStream
    own = base.__dict__["launch_host_func"]
    cupy.install()
    installed = base.launch_host_func

    def their_wrapper(self, callback, arg):  # another library's wrapper, over the integration's method
        return installed(self, callback, arg)

    base.launch_host_func = their_wrapper
    cupy.uninstall()  # leaves their wrapper, as documented
    assert base.__dict__["launch_host_func"] is their_wrapper
    cupy.install()
    stream = base(0x9230)
    stream.capturing = True
    stream.launch_host_func(print, "captured")  # CuPy's own, not their wrapper (which leads back here)
    assert standins.OWN_CALLS == [("cupy launch_host_func", print, "captured")], standins.OWN_CALLS
    cupy.uninstall()
    assert base.__dict__["launch_host_func"] is their_wrapper
    base.launch_host_func = own


def cupy_install_that_races_an_uninstall_records_cupys_own():
    with_the_fake_driver()
    from cuda_reclaim.integrations import cupy

    window = threading.Event()
    others = []

    def uninstall_elsewhere():
        window.clear()
        other = threading.Thread(target=cupy.uninstall)
        others.append(other)
        other.start()
        # Without a lock around install()'s reads the uninstall finishes here; with one it waits for it.
        other.join(0 if cupy._PATCHES._lock.locked() else WAIT)

    class Meta(type):
        # Another thread's uninstall() just after install() reads the class (its method or its __dict__).
        def __getattribute__(cls, name):
            value = type.__getattribute__(cls, name)
            if name in ("launch_host_func", "__dict__") and window.is_set():
                uninstall_elsewhere()
            return value

    class Base(standins.CupyBaseStream, metaclass=Meta):
        pass

    sys.modules["cupy.cuda.stream"]._BaseStream = Base
    assert cupy.install() is True
    window.set()
    cupy.install()  # installed already (False), or installed again after the other thread's uninstall
    for other in others:
        other.join(WAIT)
        assert not other.is_alive()
    window.clear()
    cupy.install()
    stream = Base(0x9240)
    stream.capturing = True
    stream.launch_host_func(print, "captured")
    assert standins.OWN_CALLS == [("cupy launch_host_func", print, "captured")], standins.OWN_CALLS


def racing_installs_and_uninstalls_keep_the_librarys_own():
    with_the_fake_driver()
    from cuda_reclaim.integrations import cuda_core, cupy

    sys.setswitchinterval(1e-6)
    own = standins.CupyBaseStream.__dict__["launch_host_func"]
    definition_own = standins.GraphDefinition.__dict__["callback"]

    def hammer():
        for _ in range(5000):
            cupy.install()
            cuda_core.install()
            cupy.uninstall()
            cuda_core.uninstall()

    threads = [threading.Thread(target=hammer) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 4)
        assert not thread.is_alive()
    assert standins.CupyBaseStream.__dict__["launch_host_func"] is own
    assert standins.GraphDefinition.__dict__["callback"] is definition_own
    with cupy.installed(), cuda_core.installed():
        stream = standins.CupyExternalStream(0x9260)
        stream.capturing = True
        stream.launch_host_func(print, "captured")
        pointer = cuda_core.HOST_FN(lambda data: None)
        standins.GraphDefinition(0).callback(pointer, user_data=1)
    assert standins.OWN_CALLS == [
        ("cupy launch_host_func", print, "captured"),
        ("GraphDefinition.callback", pointer, 1),
    ], standins.OWN_CALLS


def numba_async_done_completes_with_the_automatic_drain_off():
    fake = with_the_fake_driver()
    from cuda_reclaim.integrations import numba_cuda

    async def main():
        stream = standins.NumbaStream(0x9130)
        assert await asyncio.wait_for(stream.async_done(), WAIT) is stream
        # A switch away from the drain thread while a future waits: the loop's drain takes over.
        cuda_reclaim.set_auto_drain("thread")
        fake.fake_cuda_stream_hold(stream.handle, 1)
        pending = stream.async_done()
        await asyncio.sleep(0)  # one turn of the loop: the task's first step, scheduled before it, begins the wait
        cuda_reclaim.set_auto_drain("off")
        fake.fake_cuda_stream_hold(stream.handle, 0)
        assert await asyncio.wait_for(pending, WAIT) is stream

    cuda_reclaim.set_auto_drain("off")
    with numba_cuda.installed():
        asyncio.run(main())
    assert standins.OWN_CALLS == []


def numba_async_done_cancelled_before_the_stream_gets_there_runs_nothing():
    fake = with_the_fake_driver()
    from cuda_reclaim.integrations import numba_cuda

    async def main():
        stream = standins.NumbaStream(0x9140)
        fake.fake_cuda_stream_hold(stream.handle, 1)
        before = cuda_reclaim.stats()
        cancelled = stream.async_done()
        cancelled.cancel()  # before the task's first step: it never begins to wait
        try:
            await cancelled
            raise AssertionError("a cancelled async_done() future completed")
        except asyncio.CancelledError:
            pass
        cuda_reclaim.set_auto_drain("off")  # the drain below takes the call: none takes it before (no race)
        fake.fake_cuda_stream_hold(stream.handle, 0)
        synchronize(fake, stream.handle)
        assert cuda_reclaim.wait_handed_back(WAIT)
        cuda_reclaim.drain()  # the cancelled call is taken here, counted and never run
        after = cuda_reclaim.stats()
        assert after["calls_cancelled"] == before["calls_cancelled"] + 1, (before, after)
        assert after["calls_run"] == before["calls_run"], (before, after)

    with numba_cuda.installed():
        asyncio.run(main())


def numba_async_done_ends_cancelled_at_close_and_after_it():
    fake = with_the_fake_driver()
    from cuda_reclaim.integrations import numba_cuda

    # Before 3.11 a task's CancelledError drops the message of the future it awaited (CPython's rule).
    message = ("async_done(): cuda_reclaim is closed: the call never runs",) if sys.version_info >= (3, 11) else ()

    async def cancelled_with(future):
        try:
            await asyncio.wait_for(future, WAIT)
        except asyncio.CancelledError as error:
            return error.args
        raise AssertionError("async_done() completed after close")

    async def main():
        stream = standins.NumbaStream(0x9170)
        fake.fake_cuda_stream_hold(stream.handle, 1)
        pending = stream.async_done()
        await asyncio.sleep(0)  # one turn of the loop: the task's first step, scheduled before it, begins the wait
        cuda_reclaim.close()
        assert await cancelled_with(pending) == message
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)  # a launch after close says so, once
            assert await cancelled_with(stream.async_done()) == message
        fake.fake_cuda_stream_hold(stream.handle, 0)

    with numba_cuda.installed():
        asyncio.run(main())


def numba_add_callback_reports_what_numba_leaves_unraisable():
    fake = with_the_fake_driver()
    from cuda_reclaim.integrations import numba_cuda

    records = []
    sys.unraisablehook = records.append

    def raises(stream, status, arg):
        raise arg

    with numba_cuda.installed(), warnings.catch_warnings():
        warnings.simplefilter("error")  # the warning of an exception is raised as an error
        stream = standins.NumbaStream(0x9150)
        stream.add_callback(raises, ValueError("callback failed"))
        stream.add_callback(raises, SystemExit(3))
        stream.add_callback(raises, KeyboardInterrupt("in the callback"))
        synchronize(fake, stream.handle)
    assert [r.exc_type for r in records] == [UserWarning, SystemExit, KeyboardInterrupt], records
    assert str(records[0].exc_value) == "Exception in stream callback: callback failed"


def ctrl_c_in_a_callback_that_the_main_threads_drain_runs_reaches_the_unraisablehook():
    import signal

    fake = with_the_fake_driver()
    from cuda_reclaim.integrations import numba_cuda

    records = []
    sys.unraisablehook = records.append
    ran = []

    def callback(stream, status, arg):
        ran.append(threading.get_ident())
        signal.raise_signal(signal.SIGINT)  # Ctrl-C, while the callback runs on the main thread
        ran.append("not reached")

    numba_cuda.install()
    stream = standins.NumbaStream(0x9160)
    fake.fake_cuda_stream_hold(stream.handle, 1)
    stream.add_callback(callback)
    cuda_reclaim.set_auto_drain("off")  # the program drains explicitly from here on
    fake.fake_cuda_stream_hold(stream.handle, 0)
    assert cuda_reclaim.wait_handed_back(WAIT)
    assert cuda_reclaim.drain() == 1
    assert ran == [threading.get_ident()], ran
    assert [r.exc_type for r in records] == [KeyboardInterrupt], records
    synchronize(fake, stream.handle)


def cupy_base_exceptions_reach_the_unraisablehook_before_the_stream_goes_on():
    fake = with_the_fake_driver()
    from cuda_reclaim.integrations import cupy

    records = []
    sys.unraisablehook = records.append

    def raises(arg):
        raise arg

    with cupy.installed():
        stream = standins.CupyBaseStream(0x9250)
        stream.launch_host_func(raises, SystemExit(3))
        stream.add_callback(lambda s, status, arg: raises(arg), KeyboardInterrupt("in the callback"))
        synchronize(fake, stream.ptr)
        assert [r.exc_type for r in records] == [SystemExit, KeyboardInterrupt], records


def cuda_core_host_call_keeps_fns_keywords_and_reports_a_base_exception():
    with_the_fake_driver()
    from cuda_reclaim.integrations import cuda_core

    records = []
    sys.unraisablehook = records.append

    def fn(x, ordered="fn's default"):
        return (x, ordered)

    def interrupted():
        raise KeyboardInterrupt("in fn")

    calls = [cuda_core.host_call(0x9350, fn, 1, ordered=False), cuda_core.host_call(0x9350, interrupted)]
    for pointer, user_data, future in calls:
        cuda = threading.Thread(target=pointer, args=(user_data,))  # CUDA's thread, as CUDA would call it
        cuda.start()
        cuda.join(WAIT)
        assert not cuda.is_alive()
        assert future.done(), "ordered: the call had run when CUDA's thread went on"
    assert calls[0][2].result(timeout=0) == (1, False), "fn got its own keyword"
    assert calls[1][2].result(timeout=0) is None
    assert [r.exc_type for r in records] == [KeyboardInterrupt], records


def the_real_cuda_core_classes_are_patched_and_restored():
    try:
        import cuda.core.graph as graph
    except ImportError as error:
        print(f"cuda.core is not installed: {error}")
        return
    from cuda_reclaim.integrations import cuda_core

    classes = (graph.GraphDefinition, graph.GraphNode)
    own = {cls: cls.__dict__["callback"] for cls in classes}
    host_node_callback = graph.HostCallbackNode.__dict__["callback"]  # its property: the node's callable
    with cuda_core.installed():
        for cls in classes:
            assert cls.__dict__["callback"] is not own[cls] and callable(cls.__dict__["callback"]), cls
        assert graph.MemsetNode.callback is graph.GraphNode.__dict__["callback"], "every node kind inherits it"
        assert graph.HostCallbackNode.__dict__["callback"] is host_node_callback
    for cls in classes:
        assert cls.__dict__["callback"] is own[cls], cls
    assert graph.MemsetNode.callback is own[graph.GraphNode]
    print("restored")


def import_errors():
    for name in ("numba", "numba.cuda", "numba.cuda.cudadrv", "numba.cuda.cudadrv.driver", "cupy",
                 "cupy.cuda", "cupy.cuda.stream", "cuda.core", "cuda.core.graph"):
        sys.modules[name] = None  # an import of it raises ImportError
    import cuda_reclaim.integrations.cuda_core
    import cuda_reclaim.integrations.cupy
    import cuda_reclaim.integrations.numba_cuda

    for module in ("numba_cuda", "cupy", "cuda_core"):
        try:
            getattr(cuda_reclaim.integrations, module).install()
            raise AssertionError(f"{module}.install() did not raise")
        except ImportError as error:
            print(str(error).split(": ", 2)[:2])


def nothing_heavy_at_import():
    import cuda_reclaim.integrations.cuda_core
    import cuda_reclaim.integrations.cupy
    import cuda_reclaim.integrations.numba_cuda  # noqa: F401

    loaded = {name.split(".")[0] for name in sys.modules} | set(sys.modules)
    print(sorted(loaded & {"numba", "cupy", "cuda.core", "cuda.bindings", "numpy", "asyncio"}))


if __name__ == "__main__":
    scenario.run(
        a_block_that_the_gc_ends_inside_another_install_leaves_cleanly,
        a_fork_child_counts_only_the_forking_threads_blocks_and_takes_the_lock_afresh,
        overlapping_installed_blocks_keep_the_integration_until_the_last_leaves,
        a_wrapper_left_by_uninstall_leads_to_the_librarys_own_method,
        install_uninstall_and_the_context_manager_restore_the_originals,
        an_attribute_replaced_by_someone_else_is_left_as_they_set_it,
        an_immutable_type_is_patched_and_restored,
        numba_add_callback_passes_stream_status_and_arg_in_stream_order,
        numba_add_callback_turns_an_exception_into_a_warning,
        numba_async_done_completes_on_the_loop_and_leaves_a_cancelled_future_alone,
        ordered_callbacks_are_refused_with_the_librarys_method_named_when_no_drain_would_run_them,
        cupy_callbacks_pass_their_arguments_in_stream_order,
        cupy_exceptions_reach_the_unraisablehook_before_the_stream_goes_on,
        cupy_launch_host_func_on_a_capturing_stream_is_cupys_own,
        cuda_core_python_callables_become_host_nodes_that_run_in_a_drain_at_every_launch,
        cuda_core_callback_exceptions_reach_the_unraisablehook,
        cuda_core_callback_needs_a_drain,
        cuda_core_host_call_runs_once_in_a_drain_before_cudas_thread_goes_on,
        cuda_core_withdraw_cancels_a_host_call_cuda_never_got,
        cuda_core_host_call_needs_a_drain_and_gives_nothing_after_close,
        cupy_capture_fallback_is_cupys_own_after_a_wrapper_and_a_reinstall,
        cupy_install_that_races_an_uninstall_records_cupys_own,
        racing_installs_and_uninstalls_keep_the_librarys_own,
        numba_async_done_completes_with_the_automatic_drain_off,
        numba_async_done_cancelled_before_the_stream_gets_there_runs_nothing,
        numba_async_done_ends_cancelled_at_close_and_after_it,
        numba_add_callback_reports_what_numba_leaves_unraisable,
        ctrl_c_in_a_callback_that_the_main_threads_drain_runs_reaches_the_unraisablehook,
        cupy_base_exceptions_reach_the_unraisablehook_before_the_stream_goes_on,
        cuda_core_host_call_keeps_fns_keywords_and_reports_a_base_exception,
        the_real_cuda_core_classes_are_patched_and_restored,
        import_errors,
        nothing_heavy_at_import,
    )
