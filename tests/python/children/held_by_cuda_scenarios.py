"""Child of test_held_by_cuda.py: one scenario per run, named by the first argument, against the fake libcuda
(tests/graph/fake_libcuda.cc) that CUDA_RECLAIM_LIBCUDA names."""

import atexit

from fake_driver_child import P, cuda_reclaim, fake

import scenario


def hold():
    """held_by_cuda from stats(), after checking attached_to_cuda == handed_back_by_cuda + held_by_cuda."""
    s = cuda_reclaim.stats()
    assert s["attached_to_cuda"] == s["handed_back_by_cuda"] + s["held_by_cuda"], s
    return s["held_by_cuda"]


def every_kind_of_attachment_is_held_until_cuda_hands_it_back():
    assert hold() == 0
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P())
    assert hold() == 1
    stream = 0x7100
    fake.fake_cuda_stream_hold(stream, 1)
    cuda_reclaim.keep_alive_until(stream, P())
    future = cuda_reclaim.launch_host_func(stream, lambda: "ran")
    node_graph = fake.fake_cuda_graph_create()
    cuda_reclaim.add_host_node(node_graph, print)
    assert hold() == 4
    fake.fake_cuda_graph_destroy(graph)
    assert hold() == 3, "the user object's destructor handed it back"
    fake.fake_cuda_stream_hold(stream, 0)
    fake.fake_cuda_run_host_functions()
    assert hold() == 1, "both host functions ran"
    fake.fake_cuda_graph_destroy(node_graph)
    assert hold() == 0
    cuda_reclaim.drain()
    assert future.result(timeout=0) == "ran"
    s = cuda_reclaim.stats()
    assert s["attached_to_cuda"] == 4 and s["handed_back_by_cuda"] == 4, s
    print("ok")


def failed_attachments_are_never_counted_as_held():
    for attach in (lambda: cuda_reclaim.keep_alive(fake.fake_cuda_failing_graph(), P()),
                   lambda: cuda_reclaim.keep_alive_until(fake.fake_cuda_failing_stream(), P()),
                   lambda: cuda_reclaim.launch_host_func(fake.fake_cuda_failing_stream(), print),
                   lambda: cuda_reclaim.add_host_node(fake.fake_cuda_failing_graph(), print)):
        try:
            attach()
        except cuda_reclaim.DriverError:
            pass
        else:
            raise AssertionError("no DriverError")
        assert hold() == 0
    assert cuda_reclaim.stats()["attached_to_cuda"] == 0


def the_exit_report_counts_what_cuda_still_holds():
    stream = 0x7200
    fake.fake_cuda_stream_hold(stream, 1)          # the kernel: nothing behind it runs before exit
    cuda_reclaim.keep_alive_until(stream, P())
    cuda_reclaim.launch_host_func(stream, print, "never runs")
    graph = fake.fake_cuda_graph_create()
    cuda_reclaim.keep_alive(graph, P(), P())
    executable = fake.fake_cuda_graph_instantiate(graph)
    fake.fake_cuda_graph_destroy(graph)            # the exec still holds the user object
    for _ in range(3):
        cuda_reclaim.defer_release(P())
    print("exiting", flush=True)


def what_cuda_hands_back_after_close_is_counted_as_leaked_and_no_longer_held():
    stream = 0x7300
    def release_the_stream():
        fake.fake_cuda_stream_hold(stream, 0)
        assert fake.fake_cuda_stream_synchronize(stream, 30000) == 0
    atexit.unregister(cuda_reclaim._auto.close_at_exit)
    atexit.register(release_the_stream)            # runs after the close below
    atexit.register(cuda_reclaim._auto.close_at_exit)
    fake.fake_cuda_start_threads(2)
    fake.fake_cuda_stream_hold(stream, 1)
    cuda_reclaim.keep_alive_until(stream, P())
    future = cuda_reclaim.launch_host_func(stream, print, "never runs")
    print("exiting", flush=True)


def held_counts_stay_lawful_under_many_cuda_threads(mode):
    cuda_reclaim.set_auto_drain(mode)
    fake.fake_cuda_start_threads(4)
    streams = [0x7400 + i for i in range(4)]
    futures = []
    for i in range(4000):
        stream = streams[i % 4]
        if i % 3 == 0:
            cuda_reclaim.keep_alive_until(stream, P())
        else:
            futures.append(cuda_reclaim.launch_host_func(stream, int, i))
    for stream in streams:
        assert fake.fake_cuda_stream_synchronize(stream, 30000) == 0
    assert hold() == 0
    if mode == "off":
        while cuda_reclaim.pending():
            cuda_reclaim.drain()
    for i, future in enumerate(futures):
        future.result(timeout=30)
    s = cuda_reclaim.stats()
    assert s["attached_to_cuda"] == 4000 and s["calls_run"] == len(futures), s


if __name__ == "__main__":
    scenario.run(
        every_kind_of_attachment_is_held_until_cuda_hands_it_back,
        failed_attachments_are_never_counted_as_held,
        the_exit_report_counts_what_cuda_still_holds,
        what_cuda_hands_back_after_close_is_counted_as_leaked_and_no_longer_held,
        held_counts_stay_lawful_under_many_cuda_threads,
    )
