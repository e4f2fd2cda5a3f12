"""The ratchet on tools/measure.py's numbers: none may grow past its ceiling in measure_budget.json.

Each number of the tree (product lines per layer, public names, stats() keys, CUDA_RECLAIM_* variables, C ABI
entries, exported C functions, CPython private names, child programs in strings, sleeps) has a ceiling in
tests/repo/measure_budget.json. The test fails when a number is over its ceiling, saying which and by how
much, and when a ceiling is above its number by more than the file's loose_margin: a change that lowers a
number lowers its ceiling too, so that the number cannot creep back. A number without a ceiling, or a
ceiling without a number, fails as well.

The tree is the source tree this file belongs to (found through its own link in Bazel's runfiles tree); the
test is tagged `external` so that Bazel runs it each time. Run by hand: python3 tests/repo/measure_test.py.
"""

import ast
import json
import math
import os
import shutil
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import measure  # noqa: E402 - tools/, from the source tree

BUDGET = os.path.join(ROOT, "tests", "repo", "measure_budget.json")


def over_budget(numbers, budget):
    """['key: N, over its ceiling B by D'] for each number above its ceiling, or without one."""
    found = []
    for key, value in numbers.items():
        if key not in budget:
            found.append(f"{key}: {value}, has no ceiling in measure_budget.json (add one)")
        elif value > budget[key]:
            found.append(f"{key}: {value}, over its ceiling {budget[key]} by {value - budget[key]}")
    return found


def loose_ceilings(numbers, budget, margin):
    """['key: ceiling B, N measured: ...'] for each ceiling above its number by more than the margin."""
    found = []
    for key, ceiling in budget.items():
        if key not in numbers:
            found.append(f"{key}: ceiling {ceiling} for a number tools/measure.py no longer gives (remove it)")
            continue
        allowed = math.floor(margin["lines"] * ceiling) if key.startswith("lines.") else margin["counts"]
        if ceiling - numbers[key] > allowed:
            found.append(f"{key}: ceiling {ceiling}, {numbers[key]} measured, loose by {ceiling - numbers[key]} "
                         f"(more than {allowed}): lower it to {numbers[key]}")
    return found


class RatchetTest(unittest.TestCase):
    """The tree's numbers against their ceilings."""

    @classmethod
    def setUpClass(cls):
        with open(BUDGET) as f:
            budget = json.load(f)
        cls.budget, cls.margin = budget["budget"], budget["loose_margin"]
        cls.numbers = measure.measure()["numbers"]

    def test_the_tree_was_measured(self):
        self.assertGreater(self.numbers["lines.cleanup"], 0)
        self.assertGreater(self.numbers["public_names"], 0)
        self.assertGreater(self.numbers["stats_keys"], 0)
        self.assertGreater(self.numbers["c_abi.entries"], 0)

    def test_no_number_grows_past_its_ceiling(self):
        self.assertEqual(over_budget(self.numbers, self.budget), [],
                         "a number grew: make it smaller, or raise its ceiling in tests/repo/measure_budget.json "
                         "with the reason in the commit message")

    def test_no_ceiling_is_loose(self):
        self.assertEqual(loose_ceilings(self.numbers, self.budget, self.margin), [],
                         "a number dropped: lower its ceiling in tests/repo/measure_budget.json")


class RatchetRulesTest(unittest.TestCase):
    """The comparison itself."""

    MARGIN = {"lines": 0.03, "counts": 1}

    def test_a_number_over_its_ceiling_is_named_with_the_excess(self):
        found = over_budget({"lines.graph": 1010, "public_names": 41}, {"lines.graph": 1000, "public_names": 41})
        self.assertEqual(found, ["lines.graph: 1010, over its ceiling 1000 by 10"])

    def test_a_number_without_a_ceiling_fails(self):
        self.assertEqual(len(over_budget({"new": 1}, {})), 1)

    def test_lines_may_fall_by_the_margin_counts_by_one(self):
        self.assertEqual(loose_ceilings({"lines.graph": 970, "public_names": 40},
                                        {"lines.graph": 1000, "public_names": 41}, self.MARGIN), [])
        found = loose_ceilings({"lines.graph": 969, "public_names": 39},
                               {"lines.graph": 1000, "public_names": 41}, self.MARGIN)
        self.assertEqual([f.split(":")[0] for f in found], ["lines.graph", "public_names"])
        self.assertIn("lower it to 39", found[1])

    def test_a_ceiling_without_a_number_fails(self):
        self.assertEqual(len(loose_ceilings({}, {"gone": 3}, self.MARGIN)), 1)


class MeasuresTest(unittest.TestCase):
    """Each measure on a small tree made for it."""

    def setUp(self):
        self.root = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.root)

    def tree(self, files):
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(self.root, path)), exist_ok=True)
            with open(os.path.join(self.root, path), "w") as f:
                f.write(text)
        return measure.Tree(self.root, sorted(files))

    def test_lines_per_layer(self):
        tree = self.tree({"cleanup/a.cc": "// c\nint a;\n\n", "bindings/cuda_reclaim/x.py": "# c\nx = 1\n",
                          "bindings/b.h": "int b;\n", "bindings/cuda_reclaim/x.pyi": "x: int\n", "docs/a.md": "a\n",
                          "handback/h.cc": "int h;\nint i;\n"})
        numbers, details = measure.measure_lines(tree)
        self.assertEqual((numbers["lines.cleanup"], numbers["lines.bindings_cpp"], numbers["lines.bindings_python"]),
                         (3, 1, 2))
        self.assertEqual(numbers["lines.handback"], 2)
        self.assertEqual(numbers["lines.total"], 8)
        self.assertEqual(details["lines.cleanup"]["code_lines"], 1)

    def test_public_names_come_from_the_all_lists_of_public_modules(self):
        tree = self.tree({
            "bindings/cuda_reclaim/__init__.py": "__all__ = ['a', 'b']\n__all__ += ['c']\n",
            "bindings/cuda_reclaim/metrics.py": "__all__ = ('m',)\n",
            "bindings/cuda_reclaim/_auto.py": "__all__ = ['private']\n",
        })
        numbers, details = measure.measure_public_names(tree)
        self.assertEqual(numbers["public_names"], 4)
        self.assertEqual(details["public_names"], {"cuda_reclaim": 3, "cuda_reclaim.metrics": 1})

    def test_stats_keys_are_read_from_the_table(self):
        abi = ("#define RECLAIM_QUEUE_ROWS_(R, X) \\\n  R(X, handed_over, counter, queue, \"h\", \"d\") \\\n"
               "  R(X, pending, gauge, queue, \"h\", \"d\")\n"
               "#define RECLAIM_CUDA_ROWS_(R, X) \\\n  R(X, held_by_cuda, gauge, cuda, \"h\", \"d\")\n")
        tree = self.tree({"include/cuda_reclaim/reclaim_abi.h": abi})
        self.assertEqual(measure.stats_rows(tree), [("handed_over", "queue", "counter"), ("pending", "queue", "gauge"),
                                                    ("held_by_cuda", "cuda", "gauge")])

    def test_environment_variables_by_kind_without_macros_and_markdown(self):
        tree = self.tree({
            "cleanup/a.cc": 'getenv("CUDA_RECLAIM_ONE");\n#define CUDA_RECLAIM_MACRO 1\n',
            "include/a.h": "#ifndef CUDA_RECLAIM_A_H_\n#define CUDA_RECLAIM_A_H_\n#endif\n",
            "setup.py": 'os.environ.get("CUDA_RECLAIM_BUILD")\nos.environ.get("CUDA_RECLAIM_ONE")\n',
            "tests/t.py": 'os.environ["CUDA_RECLAIM_TEST"]\n',
            "docs/a.md": "CUDA_RECLAIM_DOCS_ONLY\n",
        })
        _, details = measure.measure_env_vars(tree)
        self.assertEqual(details, {"env_vars.runtime": ["CUDA_RECLAIM_ONE"], "env_vars.build": ["CUDA_RECLAIM_BUILD"],
                                   "env_vars.tests": ["CUDA_RECLAIM_TEST"]})

    def test_abi_entries_and_exported_functions(self):
        abi = ("typedef struct reclaim_api {\n  uint32_t abi_version; /* v */\n  int (*push)(void* item);\n"
               "  /* (*not)(an entry) */\n  void (*end)(int ticket, uint32_t* done);\n} reclaim_api;\n"
               "static inline int helper(const reclaim_stats* s) {\n  return s != 0;\n}\n")
        header = "int reclaim_push(void* item);\nstatic int hidden(void);\ntypedef int (*fn)(void);\n"
        tree = self.tree({"include/cuda_reclaim/reclaim_abi.h": abi, "abi/reclaim.h": header,
                          "cleanup/other.h": "int not_exported(void);\n"})
        numbers, details = measure.measure_c_abi(tree)
        self.assertEqual(details["c_abi.entries"], ["push", "end"])
        self.assertEqual(details["c_abi.header_fields"], ["abi_version"])
        _, details = measure.measure_c_functions(tree)
        self.assertEqual([d.split()[-1] for d in details["c_functions"]], ["reclaim_push", "helper"])

    def test_child_programs_in_strings(self):
        source = ('"""A docstring.\n\nimport os; os.getpid()\n"""\n'
                  'CODE = """\nimport os\nprint(os.getpid())\n"""\n'
                  'EXPECTED = """\ncuda-reclaim: ignoring X=1\n"""\n'
                  'ONE_LINE = "print(1)"\n'
                  'def f(n):\n    """Docstring.\n\n    f(1)\n    """\n    return f"""\nx = g({n})\ny = x\n"""\n')
        self.assertEqual(measure.child_programs_in_strings(self.tree({"tests/python/test_x.py": source})),
                         ["tests/python/test_x.py:5", "tests/python/test_x.py:18"])

    def test_time_sleep_calls_through_any_import(self):
        module = ast.parse("import time\nimport time as t\nfrom time import sleep as nap\nimport asyncio\n"
                           "time.sleep(1)\nt.sleep(1)\nnap(1)\nasyncio.sleep(0)\nself.sleep(1)\n")
        self.assertEqual(measure.time_sleep_calls(module), [5, 6, 7])

    def test_git_and_the_walk_list_the_same_files(self):
        listed = measure.git_files(ROOT)
        if listed is None:
            self.skipTest("no git in this tree")
        self.assertEqual(sorted(listed), measure.walked_files(ROOT))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
