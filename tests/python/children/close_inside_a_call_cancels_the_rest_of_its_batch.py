"""A call that closes the queue, with a host-node firing behind it in the same batch: the firing never runs
(it is cancelled and counted), and nothing is left in the drain."""

from fake_driver_child import cuda_reclaim, fake

calls = []


def closing():
    calls.append("closing")
    cuda_reclaim.close()
    calls.append("closed")


graph = fake.fake_cuda_graph_create()
cuda_reclaim.add_host_node(graph, calls.append, "node")
exe = fake.fake_cuda_graph_instantiate(graph)
future = cuda_reclaim.launch_host_func(0x5100, closing)
assert fake.fake_cuda_run_host_functions() == 1
fake.fake_cuda_graph_launch(exe, 0x5200)
assert fake.fake_cuda_run_host_functions() == 1
assert cuda_reclaim.stats()["pending"] == 2
cuda_reclaim.drain()  # one batch: the call (which closes), then the firing
assert calls == ["closing", "closed"], f"a host-node call ran after close() returned: {calls}"
s = cuda_reclaim.stats()
assert s["calls_run"] == 1 and s["calls_cancelled"] == 1 and s["in_drain"] == 0, s
assert cuda_reclaim.conserved(s), s
print("done")
