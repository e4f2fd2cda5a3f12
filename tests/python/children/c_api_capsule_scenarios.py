"""Child of test_c_api_capsule.py: one scenario per run, named by the first argument. Each replaces or
checks the capsule cuda_reclaim._reclaim._C_API before a C API user (_native_producers, whose PyInit calls
cuda_reclaim_import()) is imported.

    c_api_capsule_scenarios.py attach_starts_the_automatic_drain
    c_api_capsule_scenarios.py unfit_capsule ABI SIZE NAME   # a capsule of another layout or name
    c_api_capsule_scenarios.py missing_capsule
    c_api_capsule_scenarios.py newer_module_with_a_larger_struct
"""

import ctypes

import scenario

CAPSULE = b"cuda_reclaim._reclaim._C_API"
ENTRIES = 12  # reclaim_api's entries at ABI 1 (cuda_reclaim/reclaim_abi.h)


def new_capsule(address, name):
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(address, name, None)


def report_import_of_a_c_api_user():
    try:
        import _native_producers  # noqa: F401 - its PyInit calls cuda_reclaim_import()
    except ImportError as error:
        print("ImportError:", error)
    else:
        print("imported")


def attach_starts_the_automatic_drain():
    import cuda_reclaim  # noqa: F401 - loaded before the C API user, as an application would
    from cuda_reclaim import _auto

    assert not _auto.is_thread_running()
    import _native_producers  # noqa: F401 - its PyInit calls cuda_reclaim_import(): attach

    assert _auto.is_thread_running(), "attach starts the drain thread"
    print("ok")


class Api(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32), ("struct_size", ctypes.c_uint32),
                ("entries", ctypes.c_void_p * ENTRIES)]


def unfit_capsule(abi, size, name):
    from cuda_reclaim import _reclaim

    api = Api(int(abi), int(size))
    name = ctypes.c_char_p(name.encode())
    _reclaim._C_API = new_capsule(ctypes.addressof(api), name)
    report_import_of_a_c_api_user()


def missing_capsule():
    from cuda_reclaim import _reclaim

    del _reclaim._C_API
    report_import_of_a_c_api_user()


def newer_module_with_a_larger_struct():
    # A copy of the real entries in a struct of ABI 2 with one more entry appended.
    from cuda_reclaim import _reclaim

    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    real = get(_reclaim._C_API, CAPSULE)

    class Newer(ctypes.Structure):
        _fields_ = [("abi_version", ctypes.c_uint32), ("struct_size", ctypes.c_uint32),
                    ("entries", ctypes.c_void_p * (ENTRIES + 1))]

    newer = Newer(2, ctypes.sizeof(Newer))
    ctypes.memmove(ctypes.addressof(newer.entries), real + 8, ENTRIES * ctypes.sizeof(ctypes.c_void_p))
    name = ctypes.c_char_p(CAPSULE)
    _reclaim._C_API = new_capsule(ctypes.addressof(newer), name)
    import _native_producers
    import cuda_reclaim

    cuda_reclaim.set_auto_drain("off")

    class P:
        pass

    _native_producers.hand_over([P() for _ in range(10)], 2)
    assert cuda_reclaim.drain() == 10
    print("ok")


if __name__ == "__main__":
    scenario.run(
        attach_starts_the_automatic_drain,
        unfit_capsule,
        missing_capsule,
        newer_module_with_a_larger_struct,
    )
