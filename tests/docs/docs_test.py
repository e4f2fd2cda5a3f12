"""Checks every file of the source tree for what the docs' rules forbid.

1. No Markdown prose line longer than 120 characters (code blocks and tables excepted): the docs are
   hard-wrapped at about 110 (bench/report/wrap.py, which also wraps the generated docs/benchmarks.md).
2. No text about one machine outside docs/benchmarks.md's run header: CPU or GPU models, "N-core host",
   kernel version strings, and no absolute home or build paths.
3. Every relative Markdown link leads to a file of the tree, and its #anchor to a heading there.
4. No product file (cleanup/, abi/, graph/, bindings/) longer than 400 lines: each does one job.
5. Every reference to a test in a Markdown file's inline code resolves: a path under tests/ (`tests/python`,
   `tests/python/test_x.py`, `tests/python/test_x.py::test_y`), a Bazel label of a package under tests/
   (`//tests/cleanup:requeue_test`, `tests/python:test_x.py`, and `:other_test` after one on the same line),
   and a bare test file name (`test_x.py`, `x_test.cc`: a file of that name somewhere under tests/). A
   `::name` part must be a `def`, `class` or `TEST(suite, name)` of the file it follows.

The files are those of the source tree this test was built from, found through this file's own link in
the runfiles tree and listed by tools/measure.py's walk: less .git (a folder or a worktree's file), links
and what .gitignore and .git/info/exclude keep out of git; the test is tagged `external` so that Bazel runs
it again whenever asked, not only when this file changes. Run by hand: python3 tests/docs/docs_test.py.
"""

import fnmatch
import os
import re
import shutil
import sys
import tempfile
import unittest

# The tree this file belongs to (through its link in Bazel's runfiles tree); its tools/measure.py walks it.
_THIS_TREE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
sys.path.insert(0, os.path.join(_THIS_TREE, "tools"))

import measure  # noqa: E402 - tools/, from the source tree

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

# Test files of other projects' suites that the docs name (docs/clients.md: the peers' tests that
# tests/clients/run_clients.py runs): not files of this tree, so not checked. Each must still be named.
OTHER_PROJECTS_TESTS = {
    "tests/cupy_tests/cuda_tests/test_stream.py": "CuPy's source distribution",
    "test_host_callback_contracts.py": "cuda-python's cuda_core/tests/graph/",
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


_CODE_SPAN = re.compile(r"`((?:[^`\n]|\n(?![ \t]*\n))+)`")
_NAMES = r"((?:::[\w\-]+(?:\[[^\]]*\])?)*)"  # ::Class::test_name[parameters]
_TEST_PATH = re.compile(r"(?<![\w./-])(//)?(tests(?:/[\w.\-]+)*)/?(?::([\w.+\-]+))?" + _NAMES)
_TEST_FILE = re.compile(r"(?<![\w./:-])(test_\w+\.py|\w+_test\.(?:py|cc|sh))" + _NAMES + r"(?![\w./-])")
_RELATIVE_LABEL = re.compile(r"^:([\w.+\-]+)$")


def defines(text, name):
    """Whether a Python or C++ test file defines `name`: `def name`, `class name`, `TEST(suite, name)`."""
    name = re.escape(name)
    return bool(re.search(r"\b(?:def|class)\s+" + name + r"\b", text)
                or re.search(r"\bTEST(?:_F|_P)?\s*\(\s*(?:\w+\s*,\s*" + name + r"|" + name + r"\s*,\s*\w+)\s*\)", text))


def _missing_names(path, names, read):
    """The part of `::a::b[x]` that the file `path` does not define, or None."""
    text = read(path)
    for name in re.findall(r"::([\w\-]+)", names):
        if not defines(text, name):
            return f"no def, class or TEST {name} in {path}"
    return None


def _label_problem(package, target, names, files, read):
    """Why the label //package:target does not resolve, or None."""
    build = next((f"{package}/{b}" for b in ("BUILD.bazel", "BUILD") if f"{package}/{b}" in files), None)
    if build is None:
        return f"no package {package} (no BUILD.bazel there)"
    defined = read(build)
    if f"{package}/{target}" in files:
        source = f"{package}/{target}"  # a source file of the package
    elif (f'"{target}"' in defined
          # Generated targets (`name = unit + "_test"` over a list of units) are accepted when their unit is
          # named in the BUILD file: a pragmatic check, not Bazel's evaluation.
          or (target.endswith("_test") and f'"{target[:-len("_test")]}"' in defined)):
        source = next((f"{package}/{target}{e}" for e in (".cc", ".py", ".sh") if f"{package}/{target}{e}" in files),
                      None)
    else:
        return f"no file {package}/{target} and no target {target} in {build}"
    if names and source is None:
        return f"no source file of {package}:{target} to find {names} in"
    return _missing_names(source, names, read) if names else None


def references_to_tests(path, text, files, read):
    """[(line, reference, problem or None)] for each reference to a test in the inline code of `path`.

    An inline code span may go on over a line break (not over a blank line); a `:target` takes the package of
    the last label before it on its line.
    """
    found, package, text = [], (0, None), prose(text)
    for span in _CODE_SPAN.finditer(text):
        code, number = span.group(1), text.count("\n", 0, span.start()) + 1
        relative = _RELATIVE_LABEL.match(code.strip())
        if relative:
            if package[0] == number:
                found.append((number, code.strip(), _label_problem(package[1], relative.group(1), "", files, read)))
            continue
        for match in _TEST_PATH.finditer(code):
            _, folder, target, names = match.groups()
            if match.group(0) == "tests":
                continue  # the word, not a path
            at = number + code.count("\n", 0, match.start())
            folder = re.sub(r"(/\.\.\.)$", "", folder)  # //tests/cleanup/... names a folder's packages
            if target is not None:
                package = (at, folder)
                found.append((at, match.group(0), _label_problem(folder, target, names, files, read)))
            elif folder in files:
                found.append((at, match.group(0), _missing_names(folder, names, read) if names else None))
            elif any(f.startswith(folder + "/") for f in files) and not names:
                found.append((at, match.group(0), None))
            else:
                found.append((at, match.group(0), f"no {folder}"))
        for match in _TEST_FILE.finditer(code):
            name, names = match.groups()
            candidates = [f for f in files if f.startswith("tests/") and os.path.basename(f) == name]
            if not candidates:
                problem = f"no file {name} under tests/"
            else:
                problems = [_missing_names(c, names, read) for c in candidates] if names else [None]
                problem = None if None in problems else problems[0]
            found.append((number + code.count("\n", 0, match.start()), match.group(0), problem))
    return found


def broken_test_references(root, files):
    """([(path, line, reference, problem)] not about OTHER_PROJECTS_TESTS, the OTHER_PROJECTS_TESTS entries named)."""
    broken, others_named, file_set = [], set(), set(files)
    for path in files:
        if not path.endswith(".md"):
            continue
        text = read_text(root, path) or ""
        for number, reference, problem in references_to_tests(path, text, file_set, lambda p: read_text(root, p) or ""):
            other = reference.split("::")[0].lstrip("/")
            if other in OTHER_PROJECTS_TESTS:
                others_named.add(other)
            elif problem:
                broken.append((path, number, reference, problem))
    return broken, others_named


def source_root():
    root = os.environ.get("CUDA_RECLAIM_SOURCE_ROOT") or _THIS_TREE
    if not (os.path.isfile(os.path.join(root, "WORKSPACE")) and os.path.isfile(os.path.join(root, ".gitignore"))):
        raise RuntimeError(f"{root} is not the source tree (no WORKSPACE and .gitignore there)")
    return root


def source_files(root):
    """Paths, relative to `root`, of the files git would track: .git, links and .gitignore's paths left out."""
    return measure.walked_files(root)


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
                     "two cores share a line", "a host with 16 cores or more", "home/user relative", "CUDA 13.0",
                     "glibc 2.28"]:
            self.assertEqual(machine_text(text), [], text)

    def test_gitignored_paths_are_left_out(self):
        rules = [("bazel-*", True, False), ("__pycache__", False, True), ("*.pyc", False, False),
                 ("third_party/x/LICENSE", True, False)]
        self.assertTrue(measure.ignored("bazel-out", True, rules))
        self.assertTrue(measure.ignored("tests/__pycache__", True, rules))
        self.assertTrue(measure.ignored("bench/report/x.pyc", False, rules))
        self.assertTrue(measure.ignored("third_party/x/LICENSE", False, rules))
        self.assertFalse(measure.ignored("docs/bazel-notes.md", False, rules))
        self.assertFalse(measure.ignored("LICENSE", False, rules))

    def test_the_walk_leaves_out_git_as_a_folder_and_as_a_worktree_file(self):
        root = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, root)
        for path, text in {".gitignore": "*.pyc\n", ".git/HEAD": "ref\n", "a.md": "a\n", "sub/.git": "gitdir: x\n",
                           "sub/b.md": "b\n", "sub/b.pyc": ""}.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        self.assertEqual(source_files(root), [".gitignore", "a.md", "sub/b.md"])
        os.rename(os.path.join(root, ".git"), os.path.join(root, "repository"))
        with open(os.path.join(root, ".git"), "w") as f:
            f.write("gitdir: repository\n")
        self.assertEqual(source_files(root), [".gitignore", "a.md", "repository/HEAD", "sub/b.md"])


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

    def test_references_to_tests_are_resolved(self):
        build = ['[x(name = unit + "_test") for unit in ["gen"]]', 'py(name = "pytest")']
        files = {"tests/python/BUILD.bazel": "\n".join(build),
                 "tests/python/test_a.py": "class TestA:\n    def test_one(self):\n        pass\n",
                 "tests/cleanup/BUILD.bazel": 'cc_test(name = "queue_test")\n',
                 "tests/cleanup/queue_test.cc": "TEST(Queue, Drains) {}\n", "tests/clients/x/test_b.py": ""}
        text = "\n".join([
            "`tests/python/test_a.py` `tests/python:test_a.py::TestA::test_one` `//tests/python:pytest` `tests/`",
            "`//tests/cleanup:queue_test::Drains` then `:queue_test`; `test_a.py::TestA`, `test_b.py`",
            "`tests/cleanup/...`",
            "`bazel test //tests/python:gen_test` `other/tests/x.py` `x.tests` `peer_tests/test_c.py` `tests`",
            "`tests/python:test_gone.py` `tests/python/test_a.py::test_two` `//tests/cleanup:gone_test` `test_c.py`",
            "`//tests/nowhere:x` `tests/python/gone/` `x_test.cc` `:gone_test` `test_b.py::TestB[1]`",
            "a span over a line break: `bazel test", "//tests/python:gone_test --x=1`", "",
            "```", "`tests/python/in_code.py`", "```"])
        found = references_to_tests("docs/a.md", text, files, lambda p: files.get(p, ""))
        self.assertEqual([(n, r) for n, r, problem in found if problem is None],
                         [(1, "tests/python/test_a.py"), (1, "tests/python:test_a.py::TestA::test_one"),
                          (1, "//tests/python:pytest"), (1, "tests/"), (2, "//tests/cleanup:queue_test::Drains"),
                          (2, ":queue_test"), (2, "test_a.py::TestA"), (2, "test_b.py"), (3, "tests/cleanup/..."),
                          (4, "//tests/python:gen_test")])
        self.assertEqual([(n, r) for n, r, problem in found if problem is not None],
                         [(5, "tests/python:test_gone.py"), (5, "tests/python/test_a.py::test_two"),
                          (5, "//tests/cleanup:gone_test"), (5, "test_c.py"), (6, "//tests/nowhere:x"),
                          (6, "tests/python/gone/"), (6, "x_test.cc"), (6, ":gone_test"), (6, "test_b.py::TestB[1]"),
                          (8, "//tests/python:gone_test")])


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

    def test_references_to_tests_resolve(self):
        broken, others_named = broken_test_references(self.root, self.files)
        problems = [f"{path}:{line}: `{reference}`: {problem}" for path, line, reference, problem in broken]
        self.assertEqual(problems, [], "point these at the test that pins the thing today, or remove them")
        unnamed = sorted(set(OTHER_PROJECTS_TESTS) - others_named)
        self.assertEqual(unnamed, [], "no Markdown file names these any more: remove them from OTHER_PROJECTS_TESTS")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
