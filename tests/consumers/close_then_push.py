"""Child of test_consumers: every consumer hands objects over, cuda_reclaim's one atexit hook drains and
closes the queue for all of them, and pushes after that count as leaked (never queued in a second queue).

Run with CUDA_RECLAIM_REPORT=1; prints "handed over" once every consumer handed its objects over.
"""

import atexit


def push_after_close():
    """Registered before cuda_reclaim is imported, so it runs after its hook."""
    import _bazel_consumer
    import c_consumer
    import cuda_reclaim

    assert cuda_reclaim.is_closed()
    assert _bazel_consumer.hand_over([object()], 1) == 0, "leaked, not queued in a second queue"
    assert c_consumer.hand_over([object()], 1) == 0


atexit.register(push_after_close)

import cuda_reclaim  # noqa: E402, I001 - after the hook above, and before the consumers, on purpose
import _bazel_consumer  # noqa: E402
import c_consumer  # noqa: E402
import cython_consumer  # noqa: E402

cuda_reclaim.set_auto_drain("off")
for consumer in (_bazel_consumer, c_consumer, cython_consumer):
    assert consumer.hand_over([object() for _ in range(100)], 2) == 100
print("handed over", flush=True)
