#!/usr/bin/env python3
"""The numbers the layering of cuda-reclaim tracks, each computed from the source tree.

Run from anywhere with any CPython 3.10 or later (standard library only):

    python3 tools/measure.py            # a table
    python3 tools/measure.py --json     # the same, as JSON: {"numbers": {...}, "details": {...}}

The files are those git would list (`git ls-files --cached --others --exclude-standard`: tracked and new
files, less what .gitignore keeps out), or, where git cannot list them (no .git, no git), the same set found
by walking the tree with the rules of the root .gitignore and .git/info/exclude. Nothing is imported or
built: Python is read with `ast`, C and C++ with regular expressions over the text with its comments
blanked out.

The numbers (keys of "numbers"; tests/repo/measure_budget.json holds a ceiling for each):
- lines.<layer>: lines of the product files of each layer (cleanup/, handback/, abi/, graph/, bindings/ C++, the
  shipped Python of bindings/, include/) and their total; details give the lines that are neither blank nor comments.
- public_names: the names of the `__all__` lists of cuda_reclaim and of its public submodules.
- stats_keys: the keys of cuda_reclaim.stats(), read from the table kStats of bindings/stats_table.cc.
- env_vars.runtime / .build / .tests: the CUDA_RECLAIM_* environment variables that product code, the
  package build, and tests, benchmarks and CI name (each variable counted once, in the first of these).
- c_abi.entries / c_abi.header_fields: the function pointers and the other fields of struct reclaim_api.
- c_functions: the exported C functions of the headers that other code links or includes.
- private_names.product / .outside_compat: uses of CPython private names in product code, all of them and
  those outside the two compat modules (bindings/cuda_reclaim/_python_compat.py, bindings/python_compat.h).
- children_in_strings.tests: child programs (or pieces of one) written as string literals in tests/: a
  string of several lines, not a docstring, that parses as Python and calls something.
- sleeps.tests / sleeps.product / sleeps.product_cpp: time.sleep calls in tests/ and in the shipped
  Python, and sleep calls (sleep_for, usleep, nanosleep) in product C++.
"""

import argparse
import ast
import fnmatch
import json
import os
import re
import subprocess
import sys
import textwrap

LAYERS = {
    "cleanup": lambda p: p.startswith("cleanup/") and p.endswith((".h", ".cc")),
    "handback": lambda p: p.startswith("handback/") and p.endswith((".h", ".cc")),
    "abi": lambda p: p.startswith("abi/") and p.endswith((".h", ".cc")),
    "graph": lambda p: p.startswith("graph/") and p.endswith((".h", ".cc")),
    "bindings_cpp": lambda p: p.startswith("bindings/") and p.endswith((".h", ".cc")),
    "bindings_python": lambda p: is_shipped_python(p),
    "include": lambda p: p.startswith("include/") and p.endswith(".h"),
}
PRODUCT_FOLDERS = ("cleanup/", "handback/", "abi/", "graph/", "bindings/", "include/")
# Left out of every count: this tool and the tests of tests/repo/, whose texts are made to be counted.
INSTRUMENTS = ("tools/", "tests/repo/")

# The modules that may use CPython private names: every such use lives in one of them.
COMPAT_MODULES = ("bindings/cuda_reclaim/_python_compat.py", "bindings/python_compat.h")

# Headers whose functions other code calls: the C entry points (abi/), the installed C API headers, and the
# header of //bindings:shared_queue for extensions built with Bazel.
EXPORTING_HEADERS = ("abi/reclaim.h", "include/", "bindings/shared_queue.h")

# Where a CUDA_RECLAIM_* variable is named decides its kind (the first that matches).
ENV_KINDS = (
    ("runtime", lambda p: p.startswith(PRODUCT_FOLDERS) and not p.startswith("bindings/build_wheel")),
    ("build", lambda p: p in ("setup.py", "pyproject.toml") or p.startswith("bindings/build_wheel")),
    ("tests", lambda p: True),
)


def is_shipped_python(path):
    """The Python that the package installs: the cuda_reclaim package and the pytest entry-point module."""
    return ((path.startswith("bindings/cuda_reclaim/") and path.endswith(".py"))
            or path == "bindings/_cuda_reclaim_pytest.py")


# --- the files -------------------------------------------------------------------------------------------

def source_root():
    """The source tree: the folder above this file's folder (through links, as in Bazel's runfiles)."""
    root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    if not os.path.isfile(os.path.join(root, "WORKSPACE")):
        raise RuntimeError(f"measure.py: {root} is not the source tree (no WORKSPACE there)")
    return root


def git_files(root):
    """The files git lists (tracked, and new ones it does not ignore) that exist, or None without git."""
    if not os.path.exists(os.path.join(root, ".git")):
        return None
    try:
        result = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0:
        return None
    names = sorted(set(result.stdout.decode("utf-8", "surrogateescape").split("\0")) - {""})
    return [n for n in names if os.path.isfile(os.path.join(root, n)) and not os.path.islink(os.path.join(root, n))]


def ignore_rules(root):
    """The patterns of the root .gitignore and of .git/info/exclude: (pattern, anchored, directories only)."""
    rules, lines = [], []
    for name in (".gitignore", os.path.join(".git", "info", "exclude")):
        try:
            with open(os.path.join(root, name)) as f:
                lines += f.read().splitlines()
        except OSError:
            pass
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            pattern = line.strip("/")
            rules.append((pattern, line.startswith("/") or "/" in pattern, line.endswith("/")))
    return rules


def ignored(path, is_dir, rules):
    """Whether one of `rules` keeps the file or folder `path` (relative to the root) out of git."""
    for pattern, anchored, directory_only in rules:
        if directory_only and not is_dir:
            continue
        if fnmatch.fnmatch(path if anchored else os.path.basename(path), pattern):
            return True
    return False


def walked_files(root):
    """The files of the tree, less .git, links and what the root .gitignore and .git/info/exclude keep out.

    `.git` is left out at any depth whether it is a folder (a repository) or a file (the pointer of a worktree
    or a submodule to its repository): git never lists it either. tests/docs/docs_test.py walks with this too.
    """
    rules, files = ignore_rules(root), []
    for directory, subdirectories, names in os.walk(root):
        relative = os.path.relpath(directory, root)
        relative = "" if relative == "." else relative + "/"
        subdirectories[:] = sorted(
            d for d in subdirectories
            if d != ".git" and not os.path.islink(os.path.join(directory, d))
            and not ignored(relative + d, True, rules))
        files += [relative + n for n in sorted(names)
                  if n != ".git" and not os.path.islink(os.path.join(directory, n))
                  and not ignored(relative + n, False, rules)]
    return sorted(files)


class Tree:
    """The files of the source tree at `root`, and their texts (read once)."""

    def __init__(self, root, files=None):
        self.root = root
        self.files = files if files is not None else (git_files(root) or walked_files(root))
        self._texts = {}

    def text(self, path):
        if path not in self._texts:
            with open(os.path.join(self.root, path), "rb") as f:
                self._texts[path] = f.read().decode("utf-8", "replace")
        return self._texts[path]

    def matching(self, predicate):
        """The files that `predicate` accepts, less the measuring tools and their tests."""
        return [p for p in self.files if predicate(p) and not p.startswith(INSTRUMENTS)]


# --- text helpers ----------------------------------------------------------------------------------------

_C_TOKENS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def c_code(text, keep_strings=True):
    """C/C++ text with its comments (and, unless `keep_strings`, its string literals) blanked out, lines kept."""
    def blank(match):
        token = match.group(0)
        if token.startswith(("//", "/*")) or not keep_strings:
            return re.sub(r"[^\n]", " ", token)
        return token
    return _C_TOKENS.sub(blank, text)


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def python_code_lines(text):
    """Lines that are neither blank nor comments only (docstrings count as code)."""
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))


def parse(tree, path):
    try:
        return ast.parse(tree.text(path), filename=path)
    except SyntaxError:
        return None


# --- the measures ----------------------------------------------------------------------------------------

def measure_lines(tree):
    numbers, details = {}, {}
    total = total_code = 0
    for layer, predicate in LAYERS.items():
        lines = code = 0
        for path in tree.matching(predicate):
            text = tree.text(path)
            lines += text.count("\n")
            if path.endswith(".py"):
                code += python_code_lines(text)
            else:
                code += sum(1 for line in c_code(text).splitlines() if line.strip())
        numbers[f"lines.{layer}"] = lines
        details[f"lines.{layer}"] = {"files": len(tree.matching(predicate)), "code_lines": code}
        total, total_code = total + lines, total_code + code
    numbers["lines.total"] = total
    details["lines.total"] = {"code_lines": total_code}
    return numbers, details


def all_names(module):
    """The strings of a module's `__all__` (assigned a list or tuple of strings, possibly extended with +=)."""
    names = []
    for node in module.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AugAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            value = node.value
            if isinstance(value, (ast.List, ast.Tuple)):
                if isinstance(node, ast.Assign):
                    names = []
                names += [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return names


def public_modules(tree):
    """{module name: path}: cuda_reclaim and each public submodule or subpackage module (no part with a leading
    underscore) with an __all__, at any depth (cuda_reclaim.integrations.cupy too)."""
    found = {}
    pattern = re.compile(r"bindings/cuda_reclaim/((?:[a-z]\w*/)*)([a-z]\w*|__init__)\.py")
    for path in tree.matching(pattern.fullmatch):
        parts = ["cuda_reclaim"] + path[len("bindings/cuda_reclaim/"):-len(".py")].split("/")
        if parts[-1] == "__init__":
            parts.pop()
        module = parse(tree, path)
        if module is not None and (len(parts) == 1 or all_names(module)):
            found[".".join(parts)] = path
    return found


def measure_public_names(tree):
    per_module = {}
    for name, path in sorted(public_modules(tree).items()):
        per_module[name] = all_names(parse(tree, path))
    total = sum(len(names) for names in per_module.values())
    return {"public_names": total}, {"public_names": {name: len(names) for name, names in per_module.items()}}


def x_macro_names(text, macro):
    """The first arguments of the X(...) entries of `#define macro(X) ...`."""
    match = re.search(r"#define\s+" + macro + r"\(X\)((?:[^\n]*\\\n)*[^\n]*)", text)
    return re.findall(r"\bX\(\s*(\w+)\s*,", match.group(1)) if match else []


def stats_rows(tree):
    """[(key, source, kind)] of RECLAIM_COUNTER_TABLE's rows in include/cuda_reclaim/reclaim_abi.h, in order."""
    header = "include/cuda_reclaim/reclaim_abi.h"
    if header not in tree.files:
        return []
    text = c_code(tree.text(header))
    return [(key, source, kind) for key, kind, source in
            re.findall(r"\bR\(\s*X\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,", text)]


def measure_stats_keys(tree):
    rows = stats_rows(tree)
    groups, kinds = {}, {}
    for _, group, kind in rows:
        groups[group.lower()] = groups.get(group.lower(), 0) + 1
        kinds[kind] = kinds.get(kind, 0) + 1
    return {"stats_keys": len(rows)}, {"stats_keys": {"by_group": groups, "by_kind": kinds}}


_ENV = re.compile(r"\bCUDA_RECLAIM_[A-Z0-9_]*[A-Z0-9]\b")


def measure_env_vars(tree):
    """CUDA_RECLAIM_* names in code (Markdown left out) that are not C macros, by where they are named."""
    code_files = tree.matching(lambda p: not p.endswith((".md", ".txt", ".json")))
    macros, named = set(), {}
    for path in code_files:
        text = tree.text(path)
        if "CUDA_RECLAIM_" not in text:
            continue
        macros.update(re.findall(r"#\s*(?:define|ifndef|ifdef)\s+(CUDA_RECLAIM_\w+)", text))
        for name in set(_ENV.findall(text)):
            named.setdefault(name, []).append(path)
    kinds = {kind: [] for kind, _ in ENV_KINDS}
    for name in sorted(set(named) - macros):
        for kind, predicate in ENV_KINDS:
            if any(predicate(p) for p in named[name]):
                kinds[kind].append(name)
                break
    numbers = {f"env_vars.{kind}": len(names) for kind, names in kinds.items()}
    return numbers, {f"env_vars.{kind}": names for kind, names in kinds.items()}


def measure_c_abi(tree):
    text = c_code(tree.text("include/cuda_reclaim/reclaim_abi.h"))
    body = re.search(r"typedef\s+struct\s+reclaim_api\s*\{(.*?)\}\s*reclaim_api\s*;", text, re.S)
    fields = [f.strip() for f in body.group(1).split(";") if f.strip()] if body else []
    entries = [re.search(r"\(\s*\*\s*(\w+)\s*\)", f).group(1) for f in fields if re.search(r"\(\s*\*\s*\w+\s*\)", f)]
    others = [f.split()[-1] for f in fields if not re.search(r"\(\s*\*", f)]
    return ({"c_abi.entries": len(entries), "c_abi.header_fields": len(others)},
            {"c_abi.entries": entries, "c_abi.header_fields": others})


_C_DECLARATION = re.compile(r"^[A-Za-z_][\w \t\*]*?\b(\w+)\s*\([^;{}]*\)\s*[;{]", re.M)


def measure_c_functions(tree):
    """Functions of the exporting headers: non-static declarations and static inline definitions."""
    found = []
    for path in tree.matching(lambda p: p.endswith(".h") and p.startswith(EXPORTING_HEADERS)):
        text = c_code(tree.text(path), keep_strings=False)
        for match in _C_DECLARATION.finditer(text):
            head = match.group(0)
            if head.startswith(("typedef", "return", "if", "while", "for")) or head.lstrip().startswith("#"):
                continue
            if head.startswith("static") and "inline" not in head.split("(")[0]:
                continue
            found.append(f"{path}:{line_of(text, match.start())} {match.group(1)}")
    return {"c_functions": len(found)}, {"c_functions": found}


# CPython private names. Python: a private attribute (one leading underscore) of a standard-library module
# or of an event loop, a private module of the standard library, a private method of a threading lock.
# C and C++: `_Py...` functions and macros, and fields of PyThreadState.
PRIVATE_LOCK_METHODS = {"_is_owned", "_release_save", "_acquire_restore"}
PUBLIC_UNDERSCORE_MODULES = {"_thread", "__future__", "__main__"}
THREAD_STATE_FIELDS = ("curexc_type", "curexc_value", "curexc_traceback", "current_exception", "exc_info",
                       "exc_state", "cframe", "current_frame", "gilstate_counter", "recursion_depth",
                       "py_recursion_remaining", "c_recursion_remaining", "async_exc", "native_thread_id")
_C_PRIVATE = re.compile(r"\b_Py\w*|->\s*(?:" + "|".join(THREAD_STATE_FIELDS) + r")\b")
# A private attribute read through the C API by its name, e.g. PyObject_GetAttrString(future, "_condition").
_C_PRIVATE_ATTRIBUTE = re.compile(r'\bPyObject_(?:GetAttrString|SetAttrString|HasAttrString)\(\s*[^,()]+,\s*"(_\w+)"')
# Public functions whose use here rests on an implementation detail (gc.get_referents of a mappingproxy
# finds the dict behind it).
IMPLEMENTATION_DETAIL_CALLS = {"gc.get_referents"}


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _stdlib(module):
    names = getattr(sys, "stdlib_module_names", ())
    return module.split(".")[0] in names


def python_private_uses(module):
    """[(line, name)] of CPython private names in a parsed module."""
    aliases, uses = {}, []
    for node in ast.walk(module):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _stdlib(alias.name):
                    top = alias.name.split(".")[0]
                    aliases[alias.asname or top] = alias.name if alias.asname else top
                    if any(_private(part) and part not in PUBLIC_UNDERSCORE_MODULES for part in alias.name.split(".")):
                        uses.append((node.lineno, alias.name))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _stdlib(node.module):
            for alias in node.names:
                private_module = any(_private(p) and p not in PUBLIC_UNDERSCORE_MODULES for p in node.module.split("."))
                if private_module or _private(alias.name):
                    uses.append((node.lineno, f"{node.module}.{alias.name}"))

    def base_name(value):
        """'threading' for a module alias, 'loop' for an event loop, else None."""
        if isinstance(value, ast.Name):
            if value.id in aliases:
                return aliases[value.id]
            if value.id == "loop" or value.id.endswith("_loop"):
                return "loop"
        if isinstance(value, ast.Attribute):
            if value.attr == "loop" or value.attr.endswith("_loop"):
                return "loop"
            outer = base_name(value.value)
            return f"{outer}.{value.attr}" if outer and outer != "loop" else None
        return None

    for node in ast.walk(module):
        attribute = None
        if isinstance(node, ast.Attribute):
            attribute, value = node.attr, node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str)):
            attribute, value = node.args[1].value, node.args[0]
        if attribute is None:
            continue
        base = base_name(value)
        if base and (_private(attribute) or any(_private(p) and p not in PUBLIC_UNDERSCORE_MODULES
                                                 for p in base.split("."))):
            uses.append((node.lineno, f"{base}.{attribute}"))
        elif attribute in PRIVATE_LOCK_METHODS:
            uses.append((node.lineno, f".{attribute}"))
        elif base and f"{base}.{attribute}" in IMPLEMENTATION_DETAIL_CALLS:
            uses.append((node.lineno, f"{base}.{attribute}"))
    return sorted(set(uses))


def private_name_uses(tree, folders=PRODUCT_FOLDERS):
    """[(path, line, name)] of CPython private names in the Python and C/C++ files under `folders`."""
    uses = []
    for path in tree.matching(lambda p: p.startswith(folders)):
        if path.endswith(".py"):
            module = parse(tree, path)
            if module is not None:
                uses += [(path, line, name) for line, name in python_private_uses(module)]
        elif path.endswith((".h", ".cc", ".c", ".cpp")):
            text = c_code(tree.text(path), keep_strings=False)
            for match in _C_PRIVATE.finditer(text):
                uses.append((path, line_of(text, match.start()), re.sub(r"\s+", "", match.group(0))))
            with_strings = c_code(tree.text(path))
            for match in _C_PRIVATE_ATTRIBUTE.finditer(with_strings):
                uses.append((path, line_of(with_strings, match.start()), f".{match.group(1)}"))
    return sorted(uses)


def measure_private_names(tree):
    uses = private_name_uses(tree)
    outside = [u for u in uses if u[0] not in COMPAT_MODULES]
    listed = [f"{path}:{line} {name}" for path, line, name in uses]
    return ({"private_names.product": len(uses), "private_names.outside_compat": len(outside)},
            {"private_names.product": listed})


def _docstring_nodes(module):
    found = set()
    for node in ast.walk(module):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, (ast.Constant, ast.JoinedStr)):
                found.add(id(first.value))
    return found


def _program_text(node):
    """The source of a string literal, with each f-string field written as a name."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "_field" for v in node.values)
    return None


def is_child_program(text):
    """A string of several lines that parses as a Python program that calls something."""
    if text is None or text.strip().count("\n") < 1:
        return False
    try:
        program = ast.parse(textwrap.dedent(text))
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(n, ast.Call) for n in ast.walk(program))


def child_programs_in_strings(tree):
    found = []
    for path in tree.matching(lambda p: p.startswith("tests/") and p.endswith(".py")):
        module = parse(tree, path)
        if module is None:
            continue
        docstrings = _docstring_nodes(module)
        inner = set()
        for node in ast.walk(module):
            if isinstance(node, ast.JoinedStr):
                inner.update(id(v) for v in node.values)
        for node in ast.walk(module):
            if isinstance(node, (ast.Constant, ast.JoinedStr)) and id(node) not in docstrings and id(node) not in inner:
                if is_child_program(_program_text(node)):
                    found.append((path, node.lineno))
    return [f"{path}:{line}" for path, line in sorted(found)]


def measure_children(tree):
    found = child_programs_in_strings(tree)
    return {"children_in_strings.tests": len(found)}, {"children_in_strings.tests": found}


def time_sleep_calls(module):
    """Lines of time.sleep(...) calls (also through `import time as t` and `from time import sleep`)."""
    modules, functions = set(), set()
    for node in ast.walk(module):
        if isinstance(node, ast.Import):
            modules.update(a.asname or a.name for a in node.names if a.name == "time")
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            functions.update(a.asname or a.name for a in node.names if a.name == "sleep")
    lines = []
    for node in ast.walk(module):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr == "sleep" and isinstance(f.value, ast.Name)
                    and f.value.id in modules) or (isinstance(f, ast.Name) and f.id in functions):
                lines.append(node.lineno)
    return sorted(lines)


_C_SLEEP = re.compile(r"\b(?:sleep_for|sleep_until|usleep|nanosleep|clock_nanosleep)\s*\(")


def measure_sleeps(tree):
    numbers, details = {}, {}
    for key, predicate in (("sleeps.tests", lambda p: p.startswith("tests/") and p.endswith(".py")),
                           ("sleeps.product", is_shipped_python)):
        found = []
        for path in tree.matching(predicate):
            module = parse(tree, path)
            if module is not None:
                found += [f"{path}:{line}" for line in time_sleep_calls(module)]
        numbers[key], details[key] = len(found), found
    found = []
    for path in tree.matching(lambda p: p.startswith(PRODUCT_FOLDERS) and p.endswith((".h", ".cc"))):
        text = c_code(tree.text(path), keep_strings=False)
        found += [f"{path}:{line_of(text, m.start())}" for m in _C_SLEEP.finditer(text)]
    numbers["sleeps.product_cpp"], details["sleeps.product_cpp"] = len(found), found
    return numbers, details


MEASURES = (measure_lines, measure_public_names, measure_stats_keys, measure_env_vars, measure_c_abi,
            measure_c_functions, measure_private_names, measure_children, measure_sleeps)


def measure(tree=None):
    """{"numbers": {key: int}, "details": {key: what was counted}} for the tree (default: this one)."""
    tree = tree or Tree(source_root())
    numbers, details = {}, {}
    for function in MEASURES:
        n, d = function(tree)
        numbers.update(n)
        details.update(d)
    return {"numbers": numbers, "details": details}


def table(result):
    """The numbers as text, one per line, each followed by what it counted."""
    out = []
    numbers, details = result["numbers"], result["details"]
    for key, value in numbers.items():
        detail = details.get(key)
        out.append(f"{key:<32} {value:>6}" + (f"  {json.dumps(detail)}" if isinstance(detail, dict) else ""))
        if isinstance(detail, list):
            out += [f"    {item}" for item in detail]
    return "\n".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    result = measure()
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
