"""Checks every file of the source tree for what the docs' rules forbid.

1. No Markdown prose line longer than 120 characters (code blocks and tables excepted): the docs are
   hard-wrapped at about 110 (bench/report/wrap.py, which also wraps the generated docs/benchmarks.md).
2. No text about one machine outside docs/benchmarks.md's run header: CPU or GPU models, "N-core host",
   kernel version strings, and no absolute home or build paths.
3. Every relative Markdown link leads to a file of the tree, and its #anchor to a heading there.
4. No product file (cleanup/, abi/, graph/, bindings/) longer than 400 lines: each does one job.

The files are those of the source tree this test was built from, found through this file's own link in
the runfiles tree, less what .gitignore keeps out of git; the test is tagged `external` so that Bazel runs
it again whenever asked, not only when this file changes. Run by hand: python3 tests/docs/docs_test.py.
"""

import fnmatch
import os
import re
import sys
import unittest

LIMIT = 120

# Files that still break a rule, each named on purpose (none today). Each entry must still fail its check
# (a stale entry fails the test), so the set only shrinks.
PRODUCT_FOLDERS = ("cleanup/", "abi/", "graph/", "bindings/")
PRODUCT_FILE_LINES = 400

KNOWN_OFFENDERS = {
    "long_files": set(),
    "long_lines": set(),
    "broken_links": set(),
    "machine_text": set(),
}

# Where machine text belongs: the report whose run header says what machine its numbers came from, and
# the raw results it is generated from. This file names the patterns it looks for.
MACHINE_TEXT_ALLOWED = {"docs/benchmarks.md", "tests/docs/docs_test.py"}
MACHINE_TEXT_ALLOWED_GLOBS = ["docs/benchmarks-*.json"]

MACHINE_PATTERNS = [
    (r"\b(Xeon|EPYC|Ryzen|Threadripper|Opteron|Epyc)\b", "a CPU model"),
    (r"\bAMD\b|\bIntel\(R\)|\bCore\(TM\)", "a CPU vendor"),
    (r"\b\d+[- ]core (host|machine|box|server|laptop)s?\b", "a machine description"),
    (r"\bon (an? )?(idle |busy |loaded )?\d+ (cores|CPUs)\b", "a machine description"),
    (r"\bmodel \d{2,}\b", "a CPU model number"),
    (r"\b(A100|H100|H200|GH200|B200|V100|L40S?)\b", "a GPU model"),
    (r"\bLinux-\d+\.\d+\.\d+|\b\d+\.\d+\.\d+-\d+-(amd64|generic|cloud)\b", "a kernel version string"),
    (r"/root/|/home/", "an absolute home path"),
]
_MACHINE = [(re.compile(pattern), what) for pattern, what in MACHINE_PATTERNS]
_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def long_prose_lines(text, limit=LIMIT):
    """(line number, length) of each line over `limit` outside fenced code blocks and tables."""
    found, in_fence = [], False
    for number, line in enumerate(text.split("\n"), 1):
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and not line.lstrip().startswith("|") and len(line) > limit:
            found.append((number, len(line)))
    return found


def machine_text(text):
    """(line number, what, the match) of each mention of one machine."""
    found = []
    for number, line in enumerate(text.split("\n"), 1):
        for pattern, what in _MACHINE:
            match = pattern.search(line)
            if match:
                found.append((number, what, match.group(0)))
    return found


def prose(text):
    """The text with fenced code blocks blanked out (line numbers kept)."""
    lines, in_fence = [], False
    for line in text.split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
            lines.append("")
        else:
            lines.append("" if in_fence else line)
    return "\n".join(lines)


def anchors(text):
    """GitHub's anchors for the headings of a Markdown text."""
    found = set()
    for line in prose(text).split("\n"):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).lower().replace("`", "")).replace(" ", "-")
            found.add(slug)
    return found


def broken_links(path, text, files, read):
    """Each relative link of the Markdown file `path` whose file or anchor is not there."""
    broken = []
    for number, line in enumerate(prose(text).split("\n"), 1):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue  # http:, https:, mailto:
            file_part, _, anchor = target.partition("#")
            linked = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if linked not in files and not any(f.startswith(linked + "/") for f in files):
                broken.append(f"line {number}: {target} (no {linked})")
            elif anchor and linked.endswith(".md") and anchor not in anchors(read(linked)):
                broken.append(f"line {number}: {target} (no heading #{anchor} in {linked})")
    return broken


def source_root():
    root = os.environ.get("CUDA_RECLAIM_SOURCE_ROOT") or os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    if not (os.path.isfile(os.path.join(root, "WORKSPACE")) and os.path.isfile(os.path.join(root, ".gitignore"))):
        raise RuntimeError(f"{root} is not the source tree (no WORKSPACE and .gitignore there)")
    return root


def _ignore_rules(root):
    rules = []
    with open(os.path.join(root, ".gitignore")) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            directory_only = line.endswith("/")
            pattern = line.strip("/")
            anchored = line.startswith("/") or "/" in pattern
            rules.append((pattern, anchored, directory_only))
    return rules


def _ignored(path, is_dir, rules):
    for pattern, anchored, directory_only in rules:
        if directory_only and not is_dir:
            continue
        if anchored and fnmatch.fnmatch(path, pattern):
            return True
        if not anchored and fnmatch.fnmatch(os.path.basename(path), pattern):
            return True
    return False


def source_files(root):
    """Paths, relative to `root`, of the files git would track: .git, links and .gitignore's paths left out."""
    rules, files = _ignore_rules(root), []
    for directory, subdirectories, names in os.walk(root):
        relative = os.path.relpath(directory, root)
        relative = "" if relative == "." else relative + "/"
        subdirectories[:] = sorted(
            d for d in subdirectories
            if d != ".git" and not os.path.islink(os.path.join(directory, d))
            and not _ignored(relative + d, True, rules))
        files += [relative + n for n in sorted(names)
                  if not os.path.islink(os.path.join(directory, n)) and not _ignored(relative + n, False, rules)]
    return files


def read_text(root, path):
    """The file's text, or None for a binary file."""
    with open(os.path.join(root, path), "rb") as f:
        data = f.read()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def violations(root, files):
    """{check: {path: [details]}} over `files`."""
    found = {"long_lines": {}, "machine_text": {}, "broken_links": {}, "long_files": {}}
    file_set = set(files)
    for path in files:
        text = read_text(root, path)
        if text is None:
            continue
        if path.endswith(".md"):
            lines = long_prose_lines(text)
            if lines:
                found["long_lines"][path] = [f"line {n}: {length} characters" for n, length in lines]
            links = broken_links(path, text, file_set, lambda p: read_text(root, p) or "")
            if links:
                found["broken_links"][path] = links
        if path.startswith(PRODUCT_FOLDERS) and text.count("\n") > PRODUCT_FILE_LINES:
            found["long_files"][path] = [f"{text.count(chr(10))} lines"]
        allowed = path in MACHINE_TEXT_ALLOWED or any(fnmatch.fnmatch(path, g) for g in MACHINE_TEXT_ALLOWED_GLOBS)
        if not allowed:
            mentions = machine_text(text)
            if mentions:
                found["machine_text"][path] = [f"line {n}: {what} ({match!r})" for n, what, match in mentions]
    return found


class CheckersTest(unittest.TestCase):
    """The checks themselves, on texts made for them."""

    def test_a_long_prose_line_is_found_and_code_and_tables_are_not(self):
        long = "word " * 30
        text = "\n".join(["# Title", long, "```", long, "```", "| " + long + " |", "short", "  " + long])
        self.assertEqual(long_prose_lines(text), [(2, len(long)), (8, len(long) + 2)])

    def test_a_line_of_exactly_the_limit_passes(self):
        self.assertEqual(long_prose_lines("x" * LIMIT), [])
        self.assertEqual(long_prose_lines("x" * (LIMIT + 1)), [(1, LIMIT + 1)])

    def test_machine_descriptions_are_found(self):
        for text in ["measured on a 16-core Xeon", "the 2-core host", "an AMD part", "model 207",
                     "Linux-6.1.0-x86_64", "5.10.0-28-amd64", "see /home/user/x", "cd /root/.cache",
                     "on an H200", "on a 4 core machine", "a minute on 2 cores"]:
            self.assertTrue(machine_text(text), text)

    def test_ordinary_words_are_not(self):
        for text in ["amd64 wheels", "x86-64 Linux", "the core of the queue", "a model of the API",
                     "two cores share a line", "a host with 16 cores or more", "home/user relative", "CUDA 13.0", "glibc 2.28"]:
            self.assertEqual(machine_text(text), [], text)

    def test_gitignored_paths_are_left_out(self):
        rules = [("bazel-*", True, False), ("__pycache__", False, True), ("*.pyc", False, False),
                 ("third_party/x/LICENSE", True, False)]
        self.assertTrue(_ignored("bazel-out", True, rules))
        self.assertTrue(_ignored("tests/__pycache__", True, rules))
        self.assertTrue(_ignored("bench/report/x.pyc", False, rules))
        self.assertTrue(_ignored("third_party/x/LICENSE", False, rules))
        self.assertFalse(_ignored("docs/bazel-notes.md", False, rules))
        self.assertFalse(_ignored("LICENSE", False, rules))


    def test_links_to_missing_files_and_headings_are_found(self):
        files = {"docs/a.md", "docs/b.md", "README.md", "cleanup/reclaim.h"}
        texts = {"docs/b.md": "# B\n\n## The contract: every `entry` point\n"}
        text = "\n".join([
            "[ok](b.md) [ok](b.md#the-contract-every-entry-point) [ok](../README.md) [ok](../cleanup)",
            "[ok](https://example.com/x) [ok](#local)", "# Local",
            "[bad](c.md) [bad](b.md#nowhere)", "```", "[in code](nowhere.md)", "```"])
        broken = broken_links("docs/a.md", text, files, lambda p: texts.get(p, text))
        self.assertEqual(len(broken), 2, broken)
        self.assertTrue(broken[0].startswith("line 4: c.md"))
        self.assertIn("#nowhere", broken[1])


class SourceTreeTest(unittest.TestCase):
    """The rules, over every file of the source tree."""

    @classmethod
    def setUpClass(cls):
        cls.root = source_root()
        cls.files = source_files(cls.root)
        cls.found = violations(cls.root, cls.files)

    def test_the_tree_was_found(self):
        for expected in ["README.md", "docs/design.md", "docs/guide.md", "abi/reclaim.h",
                         "bench/report/template.md", "tests/docs/docs_test.py"]:
            self.assertIn(expected, self.files)
        self.assertFalse([f for f in self.files if f.startswith(("bazel-", ".git/"))])

    def _check(self, check):
        offenders = self.found[check]
        known = KNOWN_OFFENDERS[check]
        new = {path: details for path, details in offenders.items() if path not in known}
        self.assertEqual(new, {}, f"{check}: fix these files")
        stale = sorted(path for path in known if path not in offenders)
        self.assertEqual(stale, [], f"{check}: these no longer offend; remove them from KNOWN_OFFENDERS")

    def test_markdown_prose_lines_fit(self):
        self._check("long_lines")

    def test_markdown_links_lead_somewhere(self):
        self._check("broken_links")

    def test_no_machine_text_outside_the_benchmark_report(self):
        self._check("machine_text")

    def test_product_files_fit_in_400_lines(self):
        self._check("long_files")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
