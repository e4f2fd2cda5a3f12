"""Overlap GPU work with Python post-processing in asyncio, with cuda_reclaim.asyncio.stream_reached.

Each batch is a kernel that fills a device buffer (and takes a while), a copy into pinned host memory, and
Python post-processing of the copy. Sequentially, the CPU waits for each batch's GPU work and the GPU waits
for each batch's post-processing. Here every batch's GPU work is enqueued at once on its own stream, and
one coroutine per batch awaits `stream_reached(stream)` and then post-processes on the loop: while Python
works on one batch, the GPU computes the next ones. No thread per wait and no polling: CUDA's thread only
hands a call to the reclaim queue, and the loop is woken through the queue (the automatic drain thread and
call_soon_threadsafe, or the loop's own reader with `--drain loop`).

    python examples/callbacks_asyncio.py [--batches 12] [--depth 3] [--drain thread|loop] [--uvloop]

Prints the time of both versions and checks that their results agree. Needs an NVIDIA GPU and cuda.core;
without them it says so and exits 0.
"""

import argparse
import asyncio
import ctypes
import sys
import time

KERNEL = r"""
// Busy-waits `cycles` clock cycles (the "heavy" part of the batch), then fills out[i].
extern "C" __global__ void produce(float* out, int n, int batch, unsigned long long cycles) {
  long long start = clock64();
  while (clock64() - start < (long long)cycles) {
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    out[i] = (float)((batch * 7919 + i) % 97) * 0.5f;
  }
}
"""


def no_gpu(reason):
    print(f"No GPU present ({reason}): this example overlaps GPU work with Python and has nothing to run "
          "here. Exiting.")
    sys.exit(0)


def postprocess(host, n):
    """The Python side of a batch: a pure-Python pass over the pinned copy (a sum and a histogram)."""
    values = (ctypes.c_float * n).from_address(int(host.handle))
    total = 0.0
    histogram = [0] * 8
    for value in values:
        total += value
        histogram[int(value) % 8] += 1
    return round(total, 3), tuple(histogram)


class Batches:
    def __init__(self, args):
        try:
            from cuda.core import Device, LaunchConfig, LegacyPinnedMemoryResource, Program, ProgramOptions, launch
        except ImportError as error:
            no_gpu(f"cuda.core is not installed: {error}")
        try:
            self.device = Device()
            self.device.set_current()
        except Exception as error:  # noqa: BLE001 - no driver, no device: no GPU
            no_gpu(repr(error))
        options = ProgramOptions(arch=f"sm_{self.device.arch}")
        self.kernel = Program(KERNEL, code_type="c++", options=options).compile("cubin").get_kernel("produce")
        self.launch, self.LaunchConfig = launch, LaunchConfig
        self.n = args.elements
        self.cycles = ctypes.c_ulonglong(int(self.device.properties.clock_rate * args.gpu_ms))  # kHz = cycles/ms
        pinned = LegacyPinnedMemoryResource()
        self.streams = [self.device.create_stream() for _ in range(args.depth)]
        self.device_buffers = [self.device.allocate(4 * self.n, stream=s) for s in self.streams]
        self.host_buffers = [pinned.allocate(4 * self.n) for _ in self.streams]
        for stream in self.streams:
            stream.sync()

    def enqueue(self, slot, batch):
        """The GPU part of a batch on stream `slot`: the kernel, then the copy to pinned memory."""
        stream = self.streams[slot]
        config = self.LaunchConfig(grid=64, block=256)
        self.launch(stream, config, self.kernel, self.device_buffers[slot], ctypes.c_int(self.n),
                    ctypes.c_int(batch), self.cycles)
        self.device_buffers[slot].copy_to(self.host_buffers[slot], stream=stream)
        return stream


def sequential(batches, count):
    results = []
    for batch in range(count):
        stream = batches.enqueue(0, batch)
        stream.sync()
        results.append(postprocess(batches.host_buffers[0], batches.n))
    return results


async def overlapped(batches, count):
    import cuda_reclaim.asyncio as reclaim_asyncio

    depth = len(batches.streams)
    free = asyncio.Queue()
    for slot in range(depth):
        free.put_nowait(slot)
    results = [None] * count

    async def one(batch, slot):
        stream = batches.enqueue(slot, batch)
        await reclaim_asyncio.stream_reached(stream)  # resumes once the copy is done; no thread, no polling
        results[batch] = postprocess(batches.host_buffers[slot], batches.n)
        free.put_nowait(slot)  # this stream and its buffers may take the next batch

    tasks = []
    for batch in range(count):
        slot = await free.get()  # at most `depth` batches in flight, one per stream
        tasks.append(asyncio.ensure_future(one(batch, slot)))
    await asyncio.gather(*tasks)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--depth", type=int, default=3, help="streams (batches in flight)")
    parser.add_argument("--elements", type=int, default=1 << 18, help="floats per batch")
    parser.add_argument("--gpu-ms", type=float, default=20.0, help="the kernel's busy time per batch")
    parser.add_argument("--drain", choices=("thread", "loop"), default="thread",
                        help="who runs the calls: the automatic drain thread, or the loop's own reader")
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop")
    args = parser.parse_args(argv)

    batches = Batches(args)
    import cuda_reclaim
    import cuda_reclaim.asyncio as reclaim_asyncio

    started = time.perf_counter()
    expected = sequential(batches, args.batches)
    sequential_seconds = time.perf_counter() - started

    cuda_reclaim.set_auto_drain("thread" if args.drain == "thread" else "off")
    if args.uvloop:
        import uvloop

        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    try:
        batches.device.set_current()
        if args.drain == "loop":
            reclaim_asyncio.install(loop)
        started = time.perf_counter()
        results = loop.run_until_complete(overlapped(batches, args.batches))
        overlapped_seconds = time.perf_counter() - started
    finally:
        loop.close()

    print(f"{args.batches} batches of {args.elements} floats, {args.gpu_ms} ms of GPU work each, "
          f"{args.depth} streams, calls run by the {args.drain}{' (uvloop)' if args.uvloop else ''}")
    print(f"sequential (sync, then post-process): {sequential_seconds * 1e3:8.1f} ms")
    print(f"overlapped (await stream_reached):    {overlapped_seconds * 1e3:8.1f} ms "
          f"({sequential_seconds / overlapped_seconds:.2f}x)")
    if results != expected:
        print("MISMATCH: the overlapped results differ from the sequential ones", file=sys.stderr)
        return 1
    print("results agree")
    stats = cuda_reclaim.stats()
    print(f"host calls: {stats['host_calls']}, run: {stats['calls_run']}, held by CUDA now: {stats['held_by_cuda']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
