"""bench/report/wrap.py, which hard-wraps docs/benchmarks.md as make_report.py writes it (and the docs)."""

import os
import sys
import unittest

# Bazel puts bench/report on PYTHONPATH; by hand: python3 tests/docs/wrap_test.py from the source root.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "report"))

import wrap  # noqa: E402

LONG = " ".join(f"word{i}" for i in range(60))


def words(text):
    return text.split()


class WrapTest(unittest.TestCase):
    def test_a_paragraph_is_refilled_to_the_width_without_losing_a_word(self):
        out = wrap.wrap(LONG)
        self.assertEqual(words(out), words(LONG))
        lines = out.split("\n")
        self.assertGreater(len(lines), 1)
        self.assertTrue(all(len(line) <= wrap.WIDTH for line in lines))
        self.assertTrue(all(len(line) > wrap.WIDTH - 12 for line in lines[:-1]))

    def test_wrapping_twice_changes_nothing(self):
        text = f"# Title\n\n{LONG}\n\n- {LONG}\n  {LONG}\n\n1. {LONG}\n"
        once = wrap.wrap(text)
        self.assertEqual(wrap.wrap(once), once)

    def test_code_blocks_tables_and_headings_stay_as_they_are(self):
        table = f"| a | {LONG} |\n|---|---|"
        text = f"# {LONG}\n\n```\n{LONG}\n```\n\n{table}\n\n    {LONG}\n"
        self.assertEqual(wrap.wrap(text), text)

    def test_list_items_keep_their_marker_and_hang_their_continuation(self):
        out = wrap.wrap(f"- {LONG}\n  - {LONG}\n3. {LONG}").split("\n")
        self.assertTrue(out[0].startswith("- word0 "))
        nested = out.index(next(line for line in out if line.startswith("  - ")))
        self.assertTrue(all(line.startswith("  ") and not line.startswith("   ") for line in out[1:nested]))
        numbered = out.index(next(line for line in out if line.startswith("3. ")))
        self.assertTrue(all(line.startswith("   ") for line in out[numbered + 1:]))

    def test_no_line_starts_with_what_would_open_a_block(self):
        risky = " ".join(["word", "-", "1.", "#", "|x", ">", "+", "==="] * 40)
        lines = wrap.wrap(risky).split("\n")
        self.assertGreater(len(lines), 3)
        for line in lines[1:]:
            self.assertTrue(line.startswith("word "), line)

    def test_options_and_numbers_inside_words_may_start_a_line(self):
        text = " ".join(["--test_arg=x", "3.12.1", "-funroll-loops", "#include"] * 40)
        self.assertEqual(words(wrap.wrap(text)), words(text))
        self.assertTrue(all(len(line) <= wrap.WIDTH for line in wrap.wrap(text).split("\n")))

    def test_a_template_placeholder_survives(self):
        text = f"{LONG} $producer_gap$producer_drain_cost {LONG}"
        self.assertIn("$producer_gap$producer_drain_cost", wrap.wrap(text).split())

    def test_a_hard_break_ends_the_line_where_it_was(self):
        out = wrap.wrap("first line  \nsecond line")
        self.assertEqual(out, "first line  \nsecond line")


if __name__ == "__main__":
    unittest.main(verbosity=2)
