"""The capsule cuda_reclaim._reclaim._C_API and the header's cuda_reclaim_import(): layout (ABI version
and size first, fields only appended), and ImportError for a missing, foreign or too old capsule.
_native_producers calls cuda_reclaim_import() in its PyInit, so importing it exercises the header."""

import ctypes

import pytest

import cuda_reclaim
from conftest import run_child

pytest.importorskip("_native_producers")

CAPSULE = b"cuda_reclaim._reclaim._C_API"
ABI1_FIELDS = 4  # push, host_destructor, drain, get_stats
ABI2_FIELDS = ABI1_FIELDS + 1  # queue_ops


def capsule_pointer(capsule, name=CAPSULE):
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return get(capsule, name)


class Header(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32), ("struct_size", ctypes.c_uint32)]


def test_capsule_starts_with_abi_version_and_size_and_holds_every_entry():
    from cuda_reclaim import _reclaim

    address = capsule_pointer(_reclaim._C_API)
    header = Header.from_address(address)
    assert header.abi_version == cuda_reclaim.ABI_VERSION == 2
    pointer = ctypes.sizeof(ctypes.c_void_p)
    assert header.struct_size == ctypes.sizeof(Header) + ABI2_FIELDS * pointer
    entries = (ctypes.c_void_p * ABI2_FIELDS).from_address(address + ctypes.sizeof(Header))
    assert all(entries), "no NULL entry"


def test_queue_ops_table_is_versioned_and_static():
    from cuda_reclaim import _reclaim

    address = capsule_pointer(_reclaim._C_API)
    pointer = ctypes.sizeof(ctypes.c_void_p)
    queue_ops = ctypes.CFUNCTYPE(ctypes.c_void_p)(
        ctypes.c_void_p.from_address(address + ctypes.sizeof(Header) + ABI1_FIELDS * pointer).value
    )
    table = queue_ops()
    assert table and table == queue_ops(), "the same static table every time"
    ops = Header.from_address(table)  # reclaim_queue_ops starts with version and size too
    assert ops.abi_version == 1
    assert ops.struct_size == ctypes.sizeof(Header) + 11 * pointer


# Each case replaces the capsule in a child, then imports a C API user; the import must fail cleanly.
FAKE_CAPSULE = """
import ctypes, cuda_reclaim
from cuda_reclaim import _reclaim
class Api(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32), ("struct_size", ctypes.c_uint32),
                ("entries", ctypes.c_void_p * 5)]
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
        ("ABI, SIZE, NAME = 1, 40, " + repr(CAPSULE), "C API is too old: the module has ABI 1 (40 bytes)"),
        ("ABI, SIZE, NAME = 2, 40, " + repr(CAPSULE), "C API is too old: the module has ABI 2 (40 bytes)"),
        ("ABI, SIZE, NAME = 2, 48, b'someone.else._C_API'", "capsule cuda_reclaim._reclaim._C_API unavailable"),
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
    # A copy of the real entries in a struct of ABI 3 with one more entry appended.
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
                        ("entries", ctypes.c_void_p * 6)]
        newer = Newer(3, ctypes.sizeof(Newer))
        ctypes.memmove(ctypes.addressof(newer.entries), real + 8, 5 * ctypes.sizeof(ctypes.c_void_p))
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
