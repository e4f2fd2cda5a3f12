"""docs/api.md's counters table is the counter table of the C ABI header, row for row.

RECLAIM_COUNTER_TABLE (include/cuda_reclaim/reclaim_abi.h) defines every key of cuda_reclaim.stats() with its
kind, source, help line and description; docs/api.md writes it out once, as the table under "## Counters"
(key, kind, source, description), in the header's order. This test reads both from the source tree (no build):
a row added, removed, reordered or reworded in one and not the other fails it. The parser is tested too, on a
made-up header, so that a row it misses is seen to fail.

Run by hand: python3 tests/docs/counters_table_test.py.
"""

import os
import re
import unittest

HEADER = "include/cuda_reclaim/reclaim_abi.h"
API_DOC = "docs/api.md"
KIND_WORDS = {"counter": "counter", "gauge": "gauge", "high_water_mark": "high-water mark"}

_STRINGS = r'((?:"(?:[^"\\]|\\.)*"\s*)+)'
_ROW = re.compile(r"\bR\(X,\s*(\w+),\s*(\w+),\s*(\w+),\s*" + _STRINGS + r",\s*" + _STRINGS + r"\)")


def root():
    return os.environ.get("CUDA_RECLAIM_SOURCE_ROOT") or os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


def read(path):
    with open(os.path.join(root(), path), encoding="utf-8") as f:
        return f.read()


def c_string(literals):
    """The value of adjacent C string literals (the header's text uses no escapes but \\" and \\\\)."""
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', literals)
    return "".join(re.sub(r"\\(.)", r"\1", part) for part in parts)


def header_rows(text):
    """[(key, kind, source, help, description)] of the rows of the header's counter table, in order."""
    text = re.sub(r"/\*.*?\*/", " ", text.replace("\\\n", " "), flags=re.S)
    return [(key, kind, source, c_string(help_line), c_string(description))
            for key, kind, source, help_line, description in _ROW.findall(text)]


def doc_rows(text):
    """The rows of the table under "## Counters", as written."""
    section = re.split(r"^## Counters$", text, maxsplit=1, flags=re.M)[1]
    section = re.split(r"^## ", section, maxsplit=1, flags=re.M)[0]
    return [line for line in section.splitlines() if line.startswith("| `")]


def expected_doc_rows(rows):
    return [f"| `{key}` | {KIND_WORDS[kind]} | {source} | {description} |"
            for key, kind, source, _, description in rows]


class CountersTableTest(unittest.TestCase):
    def test_the_parser_reads_every_row_with_its_text(self):
        header = ('#define RECLAIM_QUEUE_ROWS_(R, X) \\\n'
                  '  /* a comment, R(X, not_a_row, counter, queue, "x", "y") */ \\\n'
                  '  R(X, handed_over, counter, queue, "handed \\"over\\"", \\\n'
                  '    "first half, " "second half") \\\n'
                  '  R(X, pending, gauge, queue, "queued now", "queued (a gauge)")\n')
        self.assertEqual(header_rows(header), [
            ("handed_over", "counter", "queue", 'handed "over"', "first half, second half"),
            ("pending", "gauge", "queue", "queued now", "queued (a gauge)"),
        ])
        self.assertEqual(expected_doc_rows(header_rows(header))[1], "| `pending` | gauge | queue | queued (a gauge) |")

    def test_the_header_has_every_key_once_with_a_known_kind_and_source(self):
        rows = header_rows(read(HEADER))
        keys = [row[0] for row in rows]
        self.assertIn("handed_over", keys)
        self.assertIn("calls_parked", keys)
        self.assertEqual(len(keys), len(set(keys)))
        for key, kind, source, help_line, description in rows:
            self.assertIn(kind, KIND_WORDS, key)
            self.assertIn(source, ("queue", "origin", "cuda", "calls"), key)
            self.assertTrue(help_line and description, key)

    def test_the_api_reference_writes_out_the_headers_table(self):
        self.assertEqual(doc_rows(read(API_DOC)), expected_doc_rows(header_rows(read(HEADER))))


if __name__ == "__main__":
    unittest.main()
