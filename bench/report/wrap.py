"""Hard-wraps the prose of a Markdown text; code blocks, tables, headings and HTML stay as they are.

    python wrap.py FILE...      # rewrites each file in place (the docs are wrapped with it too)

make_report.py wraps docs/benchmarks.md with it, since facts and tables are filled into the template's
paragraphs. A paragraph's lines are joined and refilled; Markdown reads a line break in a paragraph as a
space, so the rendered text does not change. A line ending in a hard break (two spaces or a backslash)
ends its paragraph.
"""

import re
import sys

WIDTH = 110

_FENCE = re.compile(r"^\s*(```|~~~)")
_LIST_ITEM = re.compile(r"^(\s*)([-*+]|\d+[.)])(\s+)")
# A word that would start a block (a list item, a heading, a quote, a table row) if a line began with it.
_STARTS_BLOCK = re.compile(r"^([-*+]|#{1,6}|\d{1,9}[.)]|=+|-+)$|^[>|]")


def _verbatim(line, in_paragraph):
    """Lines kept as they are: tables, headings, HTML, rules, images, link definitions, indented code."""
    s = line.strip()
    return bool(s.startswith(("|", "#", "<", "![", "---", "***", "===")) or re.match(r"^\[[^\]]+\]:\s", s)
                or not in_paragraph and line.startswith("    ") and not _LIST_ITEM.match(line))


def _hard_break(line):
    return line.endswith("  ") or line.endswith("\\")


def fill(words, first, rest, width=WIDTH):
    """Greedy fill; a word that would open a block at the start of a line takes previous words along."""
    lines, current = [], []

    def length(ws, prefix):
        return len(prefix) + sum(len(w) for w in ws) + max(len(ws) - 1, 0)

    for word in words:
        prefix = first if not lines else rest
        if current and length(current + [word], prefix) > width:
            carried = []
            while len(current) > 1 and _STARTS_BLOCK.match((carried or [word])[0]):
                carried.insert(0, current.pop())
            lines.append(current)
            current = carried
        current.append(word)
    if current:
        lines.append(current)
    return [(first if i == 0 else rest) + " ".join(ws) for i, ws in enumerate(lines)]


def wrap(text, width=WIDTH):
    """The text with every prose paragraph and list item refilled to `width` columns."""
    out, para = [], None  # para: [first_prefix, rest_prefix, words, hard_break_suffix]
    in_fence = False

    def flush():
        nonlocal para
        if para:
            lines = fill(para[2], para[0], para[1], width)
            if para[3]:
                lines[-1] += para[3]
            out.extend(lines)
        para = None

    for line in text.split("\n"):
        if in_fence:
            out.append(line)
            if _FENCE.match(line):
                in_fence = False
            continue
        if _FENCE.match(line):
            flush()
            in_fence = True
            out.append(line)
            continue
        if not line.strip() or _verbatim(line, para is not None):
            flush()
            out.append(line)
            continue
        item = _LIST_ITEM.match(line)
        quote = re.match(r"^(\s*>\s?)", line)
        if item:
            flush()
            marker = item.group(1) + item.group(2) + " "
            para = [marker, " " * len(marker), line[item.end():].split(), ""]
        elif quote:
            if not para or para[0].strip() != ">":
                flush()
                para = ["> ", "> ", [], ""]
            para[2] += line[quote.end():].split()
        elif para:
            para[2] += line.split()
        else:
            indent = re.match(r"^\s*", line).group(0)
            para = [indent, indent, line.split(), ""]
        if _hard_break(line):
            para[3] = "\\" if line.endswith("\\") else "  "
            if para[3] == "\\":
                para[2][-1] = para[2][-1][:-1] or para[2].pop()
            flush()
    flush()
    return "\n".join(out)


def main(paths):
    for path in paths:
        with open(path) as f:
            text = f.read()
        wrapped = wrap(text)
        if wrapped != text:
            with open(path, "w") as f:
                f.write(wrapped)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
