"""The quoted #include lines of the library's lower layers name only what each layer may reach.

- handback/ (the hand-back barrier) includes its own headers and the installed C API headers
  (cuda_reclaim/*.h) alone: nothing of the queue, nothing of abi/, graph/ or bindings/.
- abi/ (the C entry points and the C ABI table) includes its own headers, the queue's (cleanup/), the
  barrier's (handback/) and the installed C API headers: nothing of graph/ or bindings/.
- graph/ reaches the queue and the barrier through abi/reclaim.h's C entry points and the installed C API
  headers only: no header of cleanup/ (a side door into the queue), none of handback/.
- cleanup/ (the queue) includes its own headers, the installed C API headers and moodycamel's queue: nothing
  of abi/, handback/, graph/ or bindings/; an include of another layer is an entry of SIDE_DOORS below,
  each with its reason.

Angle-bracket includes (the standard library, the system, cuda.h) are not checked here: Bazel's
visibility keeps Python.h and cuda.h out (//tests/layering's dependency_refused_test targets). An entry of
SIDE_DOORS that no longer matches an include fails too (remove it).

Run by hand: python3 tests/layering/include_rules_test.py.
"""

import os
import re
import shutil
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
# In Bazel's runfiles this file is a link into the source tree: its real path gives the tree.
sys.path.insert(0, os.path.join(ROOT, "tools"))

import measure  # noqa: E402 - tools/, from the source tree

# folder -> the include prefixes its files may name (quoted includes).
RULES = {
    "handback/": ("handback/", "cuda_reclaim/"),
    "abi/": ("abi/", "cleanup/", "handback/", "cuda_reclaim/"),
    "graph/": ("graph/", "cuda_reclaim/", "abi/reclaim.h"),
    "cleanup/": ("cleanup/", "cuda_reclaim/", "concurrentqueue/"),
    # The owner of the process queue: the published header of each layer below, none of their internals.
    "bindings/": ("bindings/", "cuda_reclaim/", "abi/reclaim.h", "graph/", "cleanup/reclaim_queue.h",
                  "cleanup/release_batch.h", "handback/process_barrier.h"),
}

# (file, included header): why the file may include it. Only shrinks.
SIDE_DOORS = {}

_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def quoted_includes(tree, folders=tuple(RULES)):
    """[(path, line, header)] of the quoted includes of the C and C++ files under `folders`."""
    found = []
    for path in tree.matching(lambda p: p.startswith(folders) and p.endswith((".h", ".cc", ".c"))):
        text = measure.c_code(tree.text(path))
        for match in _QUOTED_INCLUDE.finditer(text):
            found.append((path, measure.line_of(text, match.start()), match.group(1)))
    return found


def broken_and_stale(includes, rules=RULES, side_doors=SIDE_DOORS):
    """(includes that break their folder's rule and are no side door, side doors that match no include)."""
    broken, used = [], set()
    for path, line, header in includes:
        folder = next(f for f in rules if path.startswith(f))
        if header.startswith(rules[folder]):
            continue
        if (path, header) in side_doors:
            used.add((path, header))
            continue
        broken.append(f"{path}:{line} includes {header}")
    stale = sorted(f"{path} {header}" for path, header in side_doors if (path, header) not in used)
    return broken, stale


class SourceTreeTest(unittest.TestCase):
    """The lower layers of this tree."""

    @classmethod
    def setUpClass(cls):
        cls.includes = quoted_includes(measure.Tree(measure.source_root()))

    def test_every_layer_was_scanned(self):
        self.assertEqual({folder for folder in RULES if any(p.startswith(folder) for p, _, _ in self.includes)},
                         set(RULES))

    def test_no_include_breaks_its_layers_rule(self):
        broken, _ = broken_and_stale(self.includes)
        self.assertEqual(broken, [], "reach the other layer through its public header (RULES), or name the "
                                     "include in SIDE_DOORS with the reason")

    def test_every_side_door_is_still_used(self):
        _, stale = broken_and_stale(self.includes)
        self.assertEqual(stale, [], "no longer included: remove these from SIDE_DOORS")


class RulesTest(unittest.TestCase):
    """What the rules refuse, on trees made for it."""

    def setUp(self):
        self.root = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.root)

    def scan(self, files):
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(self.root, path)), exist_ok=True)
            with open(os.path.join(self.root, path), "w") as f:
                f.write(text)
        return broken_and_stale(quoted_includes(measure.Tree(self.root, sorted(files))), side_doors={})[0]

    def test_a_side_door_into_cleanup_from_graph_fails(self):
        found = self.scan({"graph/a.cc": '#include "abi/reclaim.h"\n#include "cleanup/reclaim_queue.h"\n'})
        self.assertEqual(found, ["graph/a.cc:2 includes cleanup/reclaim_queue.h"])

    def test_a_side_door_into_cleanup_from_handback_fails(self):
        found = self.scan({"handback/a.cc": '#include "handback/barrier.h"\n#include "cleanup/reclaim_queue.h"\n'})
        self.assertEqual(found, ["handback/a.cc:2 includes cleanup/reclaim_queue.h"])

    def test_handback_cannot_include_the_c_entry_points(self):
        self.assertEqual(self.scan({"handback/a.cc": '#include "abi/reclaim.h"\n'}),
                         ["handback/a.cc:1 includes abi/reclaim.h"])

    def test_cleanup_cannot_include_the_c_entry_points(self):
        self.assertEqual(self.scan({"cleanup/a.cc": '#include "cleanup/reclaim_queue.h"\n#include "abi/reclaim.h"\n'}),
                         ["cleanup/a.cc:2 includes abi/reclaim.h"])

    def test_abi_reaches_the_queue_and_the_barrier_but_not_graph(self):
        self.assertEqual(self.scan({"abi/a.cc": '#include "cleanup/process_queue.h"\n#include "handback/barrier.h"\n'
                                                '#include "graph/counters.h"\n'}),
                         ["abi/a.cc:3 includes graph/counters.h"])

    def test_graph_cannot_include_the_barrier(self):
        self.assertEqual(self.scan({"graph/a.h": '#include "handback/barrier.h"\n'}),
                         ["graph/a.h:1 includes handback/barrier.h"])

    def test_cleanup_cannot_include_the_barrier(self):
        self.assertEqual(self.scan({"cleanup/a.h": '#include "handback/barrier.h"\n'}),
                         ["cleanup/a.h:1 includes handback/barrier.h"])

    def test_the_c_api_headers_system_headers_and_comments_pass(self):
        self.assertEqual(self.scan({"graph/a.cc": '#include <cuda.h>\n#include "cuda_reclaim/reclaim_abi.h"\n'
                                                  '// #include "cleanup/reclaim_queue.h"\n'}), [])


if __name__ == "__main__":
    unittest.main()
