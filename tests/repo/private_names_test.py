"""CPython private names live in the two compat modules only (the allowlist for others is empty).

The product code (cleanup/, graph/, bindings/ and include/: Python and C/C++) is scanned by
tools/measure.py's private_name_uses(): in Python, a private attribute of a standard-library module (also
through an alias, getattr or hasattr) or of an event loop, a private standard-library module, a private
method of a threading lock, a public call that relies on an implementation detail (gc.get_referents); in C
and C++, `_Py...` functions and macros, PyThreadState's fields and a private attribute read by name. Such a
use is allowed in bindings/cuda_reclaim/_python_compat.py and bindings/python_compat.h, where a test pins
what it relies on, and elsewhere only as an entry of ALLOWED below. A use outside both fails, and so does an
entry of ALLOWED that is no longer found (remove it).

Run by hand: python3 tests/repo/private_names_test.py.
"""

import ast
import os
import shutil
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import measure  # noqa: E402 - tools/, from the source tree

# (file, name): why it is there. Empty: every use is in a compat module. An entry may come back only with its
# reason, and goes again when its use moves into a compat module or disappears.
ALLOWED: "dict[tuple[str, str], str]" = {}


def unexpected_and_stale(uses, allowed=ALLOWED, compat=measure.COMPAT_MODULES):
    """(uses outside the compat modules that ALLOWED does not name, ALLOWED entries that match no use)."""
    outside = [(path, line, name) for path, line, name in uses if path not in compat]
    unexpected = [f"{path}:{line} {name}" for path, line, name in outside if (path, name) not in allowed]
    found = {(path, name) for path, _, name in outside}
    stale = sorted(f"{path} {name}" for path, name in allowed if (path, name) not in found)
    return unexpected, stale


class SourceTreeTest(unittest.TestCase):
    """The product code of this tree."""

    @classmethod
    def setUpClass(cls):
        cls.uses = measure.private_name_uses(measure.Tree(measure.source_root()))

    def test_the_compat_modules_were_scanned(self):
        self.assertIn("bindings/cuda_reclaim/_python_compat.py", {path for path, _, _ in self.uses})
        self.assertIn("bindings/python_compat.h", {path for path, _, _ in self.uses})

    def test_no_private_name_outside_the_compat_modules_and_the_allowlist(self):
        unexpected, _ = unexpected_and_stale(self.uses)
        self.assertEqual(unexpected, [], "move these behind bindings/cuda_reclaim/_python_compat.py or "
                                         "bindings/python_compat.h, or use a public API")

    def test_every_allowlist_entry_is_still_used(self):
        _, stale = unexpected_and_stale(self.uses)
        self.assertEqual(stale, [], "no longer used: remove these from ALLOWED")


class ScannerTest(unittest.TestCase):
    """What the scan finds, on texts made for it."""

    def python(self, source):
        return [name for _, name in measure.python_private_uses(ast.parse(source))]

    def c_uses(self, text):
        """The uses found in `text` as the C++ file bindings/a.cc of a tree of its own."""
        root = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, root)
        os.makedirs(os.path.join(root, "bindings"))
        with open(os.path.join(root, "bindings", "a.cc"), "w") as f:
            f.write(text)
        return measure.private_name_uses(measure.Tree(root, ["bindings/a.cc"]))

    def test_private_attributes_of_standard_modules_through_aliases_getattr_and_from_imports(self):
        source = ("import threading as _threading\nimport sys\nimport asyncio\nfrom threading import _shutdown\n"
                  "_threading._register_atexit(f)\nsys._getframe()\ngetattr(threading_alias, '_x', None)\n"
                  "hasattr(sys, '_is_gil_enabled')\nasyncio.events._get_running_loop()\n")
        self.assertEqual(self.python(source), ["threading._shutdown", "threading._register_atexit",
                                               "sys._getframe", "sys._is_gil_enabled",
                                               "asyncio.events._get_running_loop"])

    def test_private_modules_loops_and_lock_methods(self):
        source = ("import _imp\nimport _thread\n_imp.acquire_lock()\n_thread.get_ident()\nloop._selector\n"
                  "getattr(self.loop, '_ready')\ngetattr(event_loop, '_get_backend_id', None)\nlock._is_owned()\n")
        self.assertEqual(sorted(self.python(source)),
                         sorted(["_imp", "_imp.acquire_lock", "loop._selector", "loop._ready", "loop._get_backend_id",
                                 "._is_owned"]))

    def test_our_own_private_names_and_public_names_are_not_cpython_private(self):
        source = ("from . import _reclaim\nimport threading\nimport os\n_reclaim._releasing_on_this_thread()\n"
                  "self._lock\nthreading.get_ident()\nos.__name__\nos._exit(0)\n")
        self.assertEqual(self.python(source), ["os._exit"])

    def test_c_private_functions_and_thread_state_fields_outside_comments_and_strings(self):
        uses = self.c_uses("// _Py_IsFinalizing() in a comment\nconst char* s = \"_PyObject in a string\";\n"
                           "int a = _Py_IsFinalizing();\n/* tstate->curexc_type */\nx = tstate->current_exception;\n"
                           "Py_IsFinalizing();\n")
        self.assertEqual(uses, [("bindings/a.cc", 3, "_Py_IsFinalizing"), ("bindings/a.cc", 5, "->current_exception")])

    def test_private_attributes_read_by_name_through_the_c_api_and_implementation_detail_calls(self):
        uses = self.c_uses('// PyObject_GetAttrString(f, "_condition") in a comment\n'
                           'PyObject* c = PyObject_GetAttrString(future, "_condition");\n'
                           'PyObject* d = PyObject_GetAttrString(future, "done");\n')
        self.assertEqual(uses, [("bindings/a.cc", 2, "._condition")])
        self.assertEqual(self.python("import gc as _gc\n_gc.get_referents(cls.__dict__)\ngc_stats = 1\n"),
                         ["gc.get_referents"])

    def test_a_use_outside_the_allowlist_and_a_stale_entry_both_fail(self):
        uses = [("bindings/x.py", 3, "sys._getframe"), ("bindings/python_compat.h", 9, "_Py_IsFinalizing"),
                ("bindings/y.py", 1, "loop._selector")]
        allowed = {("bindings/y.py", "loop._selector"): "r", ("bindings/z.py", "_imp"): "r"}
        self.assertEqual(unexpected_and_stale(uses, allowed),
                         (["bindings/x.py:3 sys._getframe"], ["bindings/z.py _imp"]))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
