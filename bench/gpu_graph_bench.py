"""bench/gpu_graph_bench.py — what cuda-reclaim adds to a CUDA graph's create / retain / destroy cycle.

Needs a GPU, cuda-bindings 13 (``cuda.bindings.driver``) and cuda-reclaim installed (the
wheel: ``bazel build //bindings:wheel`` then ``pip install bazel-bin/bindings/cuda_reclaim-*.whl``).
Where any of that is missing it prints ``SKIP: <why>`` and exits 0.

One cycle = cuGraphCreate, attach one user object (or none), cuGraphDestroy. Variants, interleaved
round-robin so that every ratio is measured side by side in the same run:

  no_user_object      cuGraphCreate + cuGraphDestroy only (the floor)
  raw_empty_dtor      cuUserObjectCreate(NULL, free) + cuGraphRetainUserObject(MOVE): a C destructor that
                      does nothing (libc ``free(NULL)``), what a project pays without any Python object
  reclaim_capsule     cuUserObjectCreate(obj, <host_destructor from the capsule>) + retain(MOVE): the
                      path any extension takes through cuda_reclaim/cuda_reclaim.h (obj's reference is
                      handed to the reclaim queue on CUDA's thread, released later by the auto drain)
  reclaim_keep_alive  cuda_reclaim.keep_alive(graph, obj), where this cuda-reclaim has it

Reports p50 / p99 per cycle and the ratio to raw_empty_dtor, then waits until every reference handed to
cuda-reclaim has been released (the conservation law must hold).

    python bench/gpu_graph_bench.py [--cycles 20000] [--json OUT]
"""

import argparse
import ctypes
import json
import platform
import sys
import time

CU_USER_OBJECT_NO_DESTRUCTOR_SYNC = 1  # CUuserObject_flags: the only defined flag, required
CU_GRAPH_USER_OBJECT_MOVE = 1  # CUuserObjectRetain_flags: the graph takes over the caller's reference


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(0)


def check(result, what):
    """cuda.bindings returns (CUresult, *values): raise on an error, return the values."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: CUresult {int(err)} ({err})")
    return values[0] if len(values) == 1 else values


class CApi(ctypes.Structure):
    """The head of cuda_reclaim_c_api (cuda_reclaim/cuda_reclaim.h); fields are only ever appended."""

    _fields_ = [
        ("abi_version", ctypes.c_uint32),
        ("struct_size", ctypes.c_uint32),
        ("push", ctypes.c_void_p),
        ("host_destructor", ctypes.c_void_p),
        ("drain", ctypes.c_void_p),
        ("get_stats", ctypes.c_void_p),
    ]


def host_destructor_address(reclaim_module):
    """The capsule's host_destructor, read with PyCapsule_GetPointer as a C extension would."""
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    address = get_pointer(reclaim_module._C_API, b"cuda_reclaim._reclaim._C_API")
    return CApi.from_address(address).host_destructor


def percentile(ordered, q):
    return ordered[max(0, int(round(q / 100.0 * len(ordered))) - 1)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=20000, help="cycles per variant")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    if args.cycles < 10:
        parser.error("--cycles must be at least 10")

    try:
        from cuda.bindings import driver
    except ImportError as error:
        skip(f"cuda.bindings is not installed ({error}); pip install 'cuda-bindings>=13'")
    try:
        import cuda_reclaim
        from cuda_reclaim import _reclaim
    except ImportError as error:
        skip(f"cuda_reclaim is not installed ({error}); install the wheel from //bindings:wheel")
    try:
        check(driver.cuInit(0), "cuInit")
        if check(driver.cuDeviceGetCount(), "cuDeviceGetCount") < 1:
            skip("no CUDA device")
        device = check(driver.cuDeviceGet(0), "cuDeviceGet")
        context = check(driver.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")
        check(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent")
        name = check(driver.cuDeviceGetName(256, device), "cuDeviceGetName")
    except Exception as error:  # no driver library, no device, no permission: all mean no GPU here
        skip(f"no usable GPU: {error}")
    device_name = name.split(b"\0", 1)[0].decode() if isinstance(name, bytes) else str(name)

    empty_dtor = driver.CUhostFn(ctypes.cast(ctypes.CDLL(None).free, ctypes.c_void_p).value)  # free(NULL)
    reclaim_dtor = driver.CUhostFn(host_destructor_address(_reclaim))
    incref = ctypes.pythonapi.Py_IncRef
    incref.argtypes = [ctypes.py_object]
    payload = object()  # one object, handed over once per cycle (each cycle owns one new reference)

    def attach(graph, pointer, destructor):
        user_object = check(driver.cuUserObjectCreate(pointer, destructor, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC),
                            "cuUserObjectCreate")
        check(driver.cuGraphRetainUserObject(graph, user_object, 1, CU_GRAPH_USER_OBJECT_MOVE),
              "cuGraphRetainUserObject")

    def no_user_object(graph):
        pass

    def raw_empty_dtor(graph):
        attach(graph, 0, empty_dtor)

    def reclaim_capsule(graph):
        incref(payload)  # the user object owns this reference; the destructor hands it over
        attach(graph, id(payload), reclaim_dtor)

    variants = {"no_user_object": no_user_object, "raw_empty_dtor": raw_empty_dtor,
                "reclaim_capsule": reclaim_capsule}
    if hasattr(cuda_reclaim, "keep_alive"):
        variants["reclaim_keep_alive"] = lambda graph: cuda_reclaim.keep_alive(graph, payload)

    before = cuda_reclaim.stats()
    samples = {name: [] for name in variants}
    for name, body in variants.items():  # warm-up: first-use costs (driver paths, drain thread start)
        for _ in range(50):
            graph = check(driver.cuGraphCreate(0), "cuGraphCreate")
            body(graph)
            check(driver.cuGraphDestroy(graph), "cuGraphDestroy")
    for _ in range(args.cycles):
        for name, body in variants.items():
            start = time.perf_counter_ns()
            graph = check(driver.cuGraphCreate(0), "cuGraphCreate")
            body(graph)
            check(driver.cuGraphDestroy(graph), "cuGraphDestroy")
            samples[name].append(time.perf_counter_ns() - start)

    # Every reference handed over must come back: wait (bounded) for CUDA's thread and the auto drain.
    handed = (args.cycles + 50) * sum(1 for n in variants if n.startswith("reclaim_"))
    deadline = time.monotonic() + 30
    while True:
        cuda_reclaim.drain()
        now = cuda_reclaim.stats()
        if now["released"] - before["released"] >= handed or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    released = now["released"] - before["released"]

    rows = []
    base = sorted(samples["raw_empty_dtor"])
    for name, values in samples.items():
        ordered = sorted(values)
        rows.append({"variant": name, "cycles": len(ordered), "p50_ns": percentile(ordered, 50),
                     "p99_ns": percentile(ordered, 99),
                     "p50_vs_raw": percentile(ordered, 50) / percentile(base, 50),
                     "p99_vs_raw": percentile(ordered, 99) / percentile(base, 99)})
    print(f"GPU: {device_name}; Python {platform.python_version()}; cuda-reclaim {cuda_reclaim.__version__}; "
          f"{args.cycles} cycles per variant, interleaved")
    print("| variant | cycles | p50 | p99 | p50 / raw | p99 / raw |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['variant']} | {row['cycles']} | {row['p50_ns'] / 1e3:.2f} µs | {row['p99_ns'] / 1e3:.2f} µs | "
              f"{row['p50_vs_raw']:.2f}× | {row['p99_vs_raw']:.2f}× |")
    print(f"references handed to cuda-reclaim: {handed}, released: {released}; stats: {now}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device_name, "python": platform.python_version(), "rows": rows,
                       "handed_over": handed, "released": released, "stats": now}, f, indent=1)
    if released != handed:
        print(f"ERROR: {handed - released} references were not released", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
