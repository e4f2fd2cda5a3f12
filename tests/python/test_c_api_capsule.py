"""The capsule cuda_reclaim._reclaim._C_API and the header's cuda_reclaim_import(): layout (ABI version
and size first, fields only appended), and ImportError for a missing, foreign or too old capsule.
_native_producers calls cuda_reclaim_import() in its PyInit, so importing it exercises the header."""

import ctypes

import pytest

import cuda_reclaim
from conftest import run_child

pytest.importorskip("_native_producers")

CAPSULE = b"cuda_reclaim._reclaim._C_API"
# reclaim_api (cuda_reclaim/reclaim_abi.h), ABI 3: the entries after abi_version and struct_size. The first
# five are ABI 1 and 2's, in their places (append-only).
ENTRIES = ("push", "host_destructor", "drain", "get_stats", "retired_queue_ops", "is_closed", "pending",
           "wakeup_fd", "write_report", "attach")


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
    assert header.abi_version == cuda_reclaim.ABI_VERSION == 3
    pointer = ctypes.sizeof(ctypes.c_void_p)
    assert header.struct_size == ctypes.sizeof(Header) + len(ENTRIES) * pointer
    entries = (ctypes.c_void_p * len(ENTRIES)).from_address(address + ctypes.sizeof(Header))
    assert all(entries), "no NULL entry"
    retired = entry(address, "retired_queue_ops", ctypes.c_void_p)
    assert retired() is None, "ABI 2's second table is retired: an old adopter gets NULL and fails cleanly"


def test_the_capsule_table_reads_the_same_queue_and_counters_as_the_module(drained):
    from cuda_reclaim import _reclaim

    address = capsule_pointer(_reclaim._C_API)
    for _ in range(3):
        cuda_reclaim.defer_release(object())
    assert entry(address, "pending", ctypes.c_size_t)() == cuda_reclaim.pending() == 3
    assert entry(address, "wakeup_fd", ctypes.c_int)() == cuda_reclaim.fileno()
    assert entry(address, "is_closed", ctypes.c_int)() == 0
    counters = (ctypes.c_uint64 * len(cuda_reclaim.STATS_KEYS))()
    get_stats = entry(address, "get_stats", ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
    assert get_stats(ctypes.addressof(counters), ctypes.sizeof(counters)) == 0
    stats = cuda_reclaim.stats()
    assert dict(zip(cuda_reclaim.STATS_KEYS, counters))["pending"] == stats["pending"] == 3
    assert dict(zip(cuda_reclaim.STATS_KEYS, counters))["handed_over"] == stats["handed_over"]
    # The table's drain is the module's safe drain (ctypes.pythonapi keeps the GIL held).
    drain = entry(address, "drain", ctypes.c_ssize_t, ctypes.c_ssize_t, prototype=ctypes.PYFUNCTYPE)
    assert drain(-1) == 3
    assert cuda_reclaim.pending() == 0


def test_importing_a_c_api_user_attaches_and_starts_the_automatic_drain():
    result = run_child(
        """
        import cuda_reclaim
        from cuda_reclaim import _auto
        assert not _auto.is_thread_running()
        import _native_producers             # its PyInit calls cuda_reclaim_import(): attach
        assert _auto.is_thread_running(), "attach starts the drain thread"
        print("ok")
        """
    )
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
    assert tuple(pxd_stats) == cuda_reclaim.STATS_KEYS
    header_counters = re.findall(r"^\s+X\((\w+),", header, re.MULTILINE)
    assert tuple(header_counters) == cuda_reclaim.STATS_KEYS
    table = header[header.index("typedef struct reclaim_api {"):header.index("} reclaim_api;")]
    header_entries = re.findall(r"\(\*(\w+)\)\(", table)
    pxd_table = pxd[pxd.index("ctypedef struct cuda_reclaim_c_api:"):]
    pxd_entries = re.findall(r"\(\*(\w+)\)\(", pxd_table)
    assert tuple(header_entries) == ENTRIES
    assert tuple(pxd_entries) == ENTRIES


# Each case replaces the capsule in a child, then imports a C API user; the import must fail cleanly.
FAKE_CAPSULE = """
import ctypes, cuda_reclaim
from cuda_reclaim import _reclaim
class Api(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32), ("struct_size", ctypes.c_uint32),
                ("entries", ctypes.c_void_p * 10)]
api = Api(ABI, SIZE)
name = ctypes.c_char_p(NAME)
new = ctypes.pythonapi.PyCapsule_New
new.restype = ctypes.py_object
new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_reclaim._C_API = new(ctypes.addressof(api), name, None)
"""


@pytest.mark.parametrize(
    "replacement, message",
    [
        ("ABI, SIZE, NAME = 2, 88, " + repr(CAPSULE), "C API is too old: the module has ABI 2 (88 bytes)"),
        ("ABI, SIZE, NAME = 3, 80, " + repr(CAPSULE), "C API is too old: the module has ABI 3 (80 bytes)"),
        ("ABI, SIZE, NAME = 3, 88, b'someone.else._C_API'", "capsule cuda_reclaim._reclaim._C_API unavailable"),
        ("DELETE", "capsule cuda_reclaim._reclaim._C_API unavailable"),
    ],
    ids=["older-abi", "smaller-struct", "foreign-capsule", "missing-capsule"],
)
def test_import_refuses_an_unfit_capsule_with_import_error(replacement, message):
    if replacement == "DELETE":
        setup = "from cuda_reclaim import _reclaim\ndel _reclaim._C_API\n"
    else:
        setup = replacement + "\n" + FAKE_CAPSULE
    result = run_child(
        setup
        + """
try:
    import _native_producers
except ImportError as error:
    print("ImportError:", error)
else:
    print("imported")
"""
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ImportError:"), result.stdout
    assert message in result.stdout


def test_import_accepts_a_newer_module_with_a_larger_struct():
    # A copy of the real entries in a struct of ABI 4 with one more entry appended.
    result = run_child(
        """
        import ctypes
        from cuda_reclaim import _reclaim
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype = ctypes.c_void_p
        get.argtypes = [ctypes.py_object, ctypes.c_char_p]
        real = get(_reclaim._C_API, b"cuda_reclaim._reclaim._C_API")
        class Newer(ctypes.Structure):
            _fields_ = [("abi_version", ctypes.c_uint32), ("struct_size", ctypes.c_uint32),
                        ("entries", ctypes.c_void_p * 11)]
        newer = Newer(4, ctypes.sizeof(Newer))
        ctypes.memmove(ctypes.addressof(newer.entries), real + 8, 10 * ctypes.sizeof(ctypes.c_void_p))
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        name = ctypes.c_char_p(b"cuda_reclaim._reclaim._C_API")
        _reclaim._C_API = new(ctypes.addressof(newer), name, None)
        import _native_producers, cuda_reclaim
        cuda_reclaim.set_auto_drain("off")
        class P: pass
        _native_producers.hand_over([P() for _ in range(10)], 2)
        assert cuda_reclaim.drain() == 10
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
