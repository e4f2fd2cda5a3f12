"""The capsule cuda_reclaim._reclaim._C_API and the header's cuda_reclaim_import(): layout (ABI version
and size first, fields only appended), and ImportError for a missing, foreign or too old capsule.
_native_producers calls cuda_reclaim_import() in its PyInit, so importing it exercises the header."""

import ctypes

import pytest

import cuda_reclaim
from conftest import run_child_script

pytest.importorskip("_native_producers")

SCENARIOS = "c_api_capsule_scenarios.py"
CAPSULE = b"cuda_reclaim._reclaim._C_API"
# reclaim_api (cuda_reclaim/reclaim_abi.h), ABI 1: the entries after abi_version and struct_size, in order
# (later ABIs only append).
ENTRIES = ("push", "host_destructor", "drain", "get_stats", "is_closed", "pending", "wakeup_fd", "write_report",
           "announce", "hand_back_begin", "hand_back_end", "wait_handed_back")


def capsule_pointer(capsule, name=CAPSULE):
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return get(capsule, name)


class Header(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32), ("struct_size", ctypes.c_uint32)]


def entry(address, name, restype, *argtypes, prototype=ctypes.CFUNCTYPE):
    pointer = ctypes.sizeof(ctypes.c_void_p)
    offset = ctypes.sizeof(Header) + ENTRIES.index(name) * pointer
    return prototype(restype, *argtypes)(ctypes.c_void_p.from_address(address + offset).value)


def test_capsule_starts_with_abi_version_and_size_and_holds_every_entry():
    from cuda_reclaim import _reclaim

    address = capsule_pointer(_reclaim._C_API)
    header = Header.from_address(address)
    assert header.abi_version == cuda_reclaim.ABI_VERSION == 1
    pointer = ctypes.sizeof(ctypes.c_void_p)
    assert header.struct_size == ctypes.sizeof(Header) + len(ENTRIES) * pointer
    entries = (ctypes.c_void_p * len(ENTRIES)).from_address(address + ctypes.sizeof(Header))
    assert all(entries), "no NULL entry"


def test_the_capsule_table_reads_the_same_queue_and_counters_as_the_module(drained):
    from cuda_reclaim import _reclaim

    address = capsule_pointer(_reclaim._C_API)
    for _ in range(3):
        cuda_reclaim.defer_release(object())
    assert entry(address, "pending", ctypes.c_size_t)() == cuda_reclaim.pending() == 3
    assert entry(address, "wakeup_fd", ctypes.c_int)() == cuda_reclaim.fileno()
    assert entry(address, "is_closed", ctypes.c_int)() == 0
    queue_keys = [key for key, counter in cuda_reclaim.COUNTERS.items() if counter.source == "queue"]
    counters = (ctypes.c_uint64 * len(queue_keys))()
    get_stats = entry(address, "get_stats", ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
    assert get_stats(ctypes.addressof(counters), ctypes.sizeof(counters)) == 0
    stats = cuda_reclaim.stats()
    assert dict(zip(queue_keys, counters))["pending"] == stats["pending"] == 3
    assert dict(zip(queue_keys, counters))["handed_over"] == stats["handed_over"]
    # The table's drain is the module's safe drain (ctypes.pythonapi keeps the GIL held).
    drain = entry(address, "drain", ctypes.c_ssize_t, ctypes.c_ssize_t, prototype=ctypes.PYFUNCTYPE)
    assert drain(-1) == 3
    assert cuda_reclaim.pending() == 0


def test_importing_a_c_api_user_attaches_and_starts_the_automatic_drain():
    result = run_child_script(SCENARIOS, "attach_starts_the_automatic_drain")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_the_cython_declarations_match_the_abi_header():
    # c_api.pxd is written by hand (Cython cannot read C headers): its counters and table entries must be
    # the header's, in the header's order.
    import os
    import re

    package = os.path.dirname(cuda_reclaim.__file__)
    pxd = open(os.path.join(package, "c_api.pxd")).read()
    header = open(os.path.join(cuda_reclaim.get_include(), "cuda_reclaim", "reclaim_abi.h")).read()
    pxd_stats = re.findall(r"^\s+uint64_t (\w+)$", pxd, re.MULTILINE)
    # The queue's rows of the header's counter table are the fields of reclaim_stats.
    queue_keys = [key for key, counter in cuda_reclaim.COUNTERS.items() if counter.source == "queue"]
    assert pxd_stats == queue_keys
    header_counters = re.findall(r"^\s+R\(X, (\w+), \w+, queue,", header, re.MULTILINE)
    assert header_counters == queue_keys
    table = header[header.index("typedef struct reclaim_api {"):header.index("} reclaim_api;")]
    header_entries = re.findall(r"\(\*(\w+)\)\(", table)
    pxd_table = pxd[pxd.index("ctypedef struct cuda_reclaim_c_api:"):]
    pxd_entries = re.findall(r"\(\*(\w+)\)\(", pxd_table)
    assert tuple(header_entries) == ENTRIES
    assert tuple(pxd_entries) == ENTRIES


# Each case replaces the capsule in a child (ABI version, struct size, name), or deletes it, then imports a
# C API user; the import must fail cleanly.
@pytest.mark.parametrize(
    "scenario, message",
    [
        (("unfit_capsule", "0", "80", CAPSULE.decode()), "C API is too old: the module has ABI 0 (80 bytes)"),
        (("unfit_capsule", "1", "72", CAPSULE.decode()), "C API is too old: the module has ABI 1 (72 bytes)"),
        (("unfit_capsule", "1", "80", "someone.else._C_API"), "capsule cuda_reclaim._reclaim._C_API unavailable"),
        (("missing_capsule",), "capsule cuda_reclaim._reclaim._C_API unavailable"),
    ],
    ids=["older-abi", "smaller-struct", "foreign-capsule", "missing-capsule"],
)
def test_import_refuses_an_unfit_capsule_with_import_error(scenario, message):
    result = run_child_script(SCENARIOS, *scenario)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ImportError:"), result.stdout
    assert message in result.stdout


def test_import_accepts_a_newer_module_with_a_larger_struct():
    result = run_child_script(SCENARIOS, "newer_module_with_a_larger_struct")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
