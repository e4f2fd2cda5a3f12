"""Checks the built documentation site; tests/docs_site/build.sh runs it after sphinx-build.

1. Every name of `cuda_reclaim.__all__`, and of the `__all__` of each public submodule (cuda_reclaim.asyncio,
   cuda_reclaim.metrics, and any added later), is a Python object of the site's inventory (objects.inv,
   read with sphobjinv), and each public submodule is a module there.
2. Every one of those names has a description in the built API reference (docs/api.html): the text of
   its entry is not empty (a constant's comes from a ``#:`` comment in the module or its stub).
3. Every counter (each key of `cuda_reclaim.COUNTERS`) is in the API reference's counters table, with its
   kind, source and description.
4. docs/c-api.md mentions every entry of the `reclaim_api` table and every public function of the C API
   headers (include/cuda_reclaim/); the site's C API reference renders the headers themselves.

The checkers are tested too, on made-up inputs, so that a missing name is seen to fail.
Usage, from the repository root, with cuda_reclaim importable (tests/docs_site/build.sh's venv):
    python tests/docs_site/site_test.py OUT/html
"""

import html
import importlib
import inspect
import os
import pkgutil
import re
import sys
import types
import unittest

import sphobjinv

HEADERS = ("include/cuda_reclaim/cuda_reclaim.h", "include/cuda_reclaim/reclaim_abi.h")
C_API_DOC = "docs/c-api.md"
SITE = None  # the built site's html directory, from the command line
API_PAGE = "docs/api.html"  # the API reference, docs/api.md, in the site


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def public_modules(package):
    """`package` and its public submodules at any depth (names without a leading underscore), imported."""
    modules = [package]
    for name in sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_")):
        module = importlib.import_module(f"{package.__name__}.{name}")
        modules += public_modules(module) if hasattr(module, "__path__") else [module]
    return modules


def python_objects(inventory_path):
    """The names of the Python objects (py domain) of a Sphinx inventory, with their roles."""
    inventory = sphobjinv.Inventory(inventory_path)
    return {(o.name, o.role) for o in inventory.objects if o.domain == "py"}


def missing_from_inventory(modules, objects):
    """Each module not documented as one, and each `module.name` of a module's __all__ absent."""
    names = {name for name, _ in objects}
    missing = [m.__name__ for m in modules if (m.__name__, "module") not in objects]
    for module in modules:
        if not getattr(module, "__all__", None):
            missing.append(f"{module.__name__}.__all__ (none: every public module says what it exports)")
            continue
        qualified = [f"{module.__name__}.{name}" for name in module.__all__]
        missing += [name for name in qualified if name not in names]
    return missing


def plain_text(markup):
    """The text of an HTML fragment: tags dropped, entities and typographic quotes made plain, spaces joined."""
    text = html.unescape(re.sub(r"<[^>]*>", " ", markup))
    for typographic, plain in (("\u2019", "'"), ("\u2018", "'"), ("\u201c", '"'), ("\u201d", '"')):
        text = text.replace(typographic, plain)
    return " ".join(text.split())


def descriptions(page):
    """{object id: the text of its entry's description} for every autodoc entry of an HTML page: what its
    <dd> says before any nested entry (a class's members are entries of their own)."""
    found = {}
    for match in re.finditer(r'<dt class="sig sig-object py" id="([^"]+)">.*?</dt>\s*<dd>(.*?)(?=<dt |</dd>)',
                             page, re.S):
        found[match.group(1)] = plain_text(match.group(2))
    return found


def undescribed(names, found):
    """The names whose entry is missing or says nothing."""
    return [name for name in names if not found.get(name)]


def c_api_names(header_texts):
    """The entries of the reclaim_api table and the public functions (no trailing underscore) of headers."""
    names = []
    for text in header_texts:
        table = re.search(r"typedef struct reclaim_api \{(.*?)\} reclaim_api;", text, re.DOTALL)
        if table:
            names += re.findall(r"\(\*(\w+)\)\(", table.group(1))
        functions = re.findall(r"^static inline [\w\s*]*?\b(\w+)\(", text, re.MULTILINE)
        names += [name for name in functions if not name.endswith("_")]
    return names


def unmentioned(names, doc_text):
    """The names that `doc_text` never mentions as a whole word."""
    return [name for name in names if not re.search(rf"(?<!\w){re.escape(name)}(?!\w)", doc_text)]


class CheckersTest(unittest.TestCase):
    """The checks, on made-up inputs."""

    def test_a_name_of_all_missing_from_the_inventory_is_reported(self):
        module = types.ModuleType("pkg")
        module.__all__ = ["documented", "forgotten"]
        objects = {("pkg", "module"), ("pkg.documented", "function")}
        self.assertEqual(missing_from_inventory([module], objects), ["pkg.forgotten"])
        self.assertEqual(missing_from_inventory([module], objects | {("pkg.forgotten", "data")}), [])

    def test_a_module_without_its_page_or_without_all_is_reported(self):
        module = types.ModuleType("pkg.sub")
        self.assertEqual(len(missing_from_inventory([module], set())), 2)

    def test_an_entry_without_a_description_is_reported(self):
        page = "\n".join([
            '<dl class="py data"><dt class="sig sig-object py" id="pkg.DESCRIBED"><span>DESCRIBED</span></dt>',
            "<dd><p>What it holds, it\u2019s &lt;here&gt;.</p></dd></dl>",
            '<dl class="py data"><dt class="sig sig-object py" id="pkg.BARE"><span>BARE</span></dt>',
            "<dd></dd></dl>",
            '<dl class="py class"><dt class="sig sig-object py" id="pkg.C"><em>class</em> C</dt>',
            '<dd><p>A class.</p><dl class="py method"><dt class="sig sig-object py" id="pkg.C.m">m()</dt>',
            "<dd></dd></dl></dd></dl>"])
        found = descriptions(page)
        self.assertEqual(found["pkg.DESCRIBED"], "What it holds, it's <here>.")
        self.assertEqual(found["pkg.C"], "A class.")
        self.assertEqual(undescribed(["pkg.DESCRIBED", "pkg.BARE", "pkg.C", "pkg.GONE"], found),
                         ["pkg.BARE", "pkg.GONE"])

    def test_c_api_names_are_the_table_entries_and_public_functions(self):
        header = "\n".join([
            "typedef struct reclaim_api {", "  uint32_t abi_version;", "  int (*push)(void* item);",
            "  size_t (*pending)(void);", "} reclaim_api;",
            "static inline int reclaim_stats_conserved(const reclaim_stats* stats) {",
            "static inline void helper_(const char* what) {"])
        self.assertEqual(c_api_names([header]), ["push", "pending", "reclaim_stats_conserved"])
        self.assertEqual(unmentioned(["push", "pending"], "`api->push(obj)` and pending_items"), ["pending"])


class SiteTest(unittest.TestCase):
    """The built site and the docs."""

    def test_every_public_name_is_in_the_site_inventory(self):
        import cuda_reclaim

        modules = public_modules(cuda_reclaim)
        self.assertIn("cuda_reclaim.asyncio", [m.__name__ for m in modules])
        self.assertEqual(missing_from_inventory(modules, python_objects(os.path.join(SITE, "objects.inv"))), [],
                         "add them to docs/api.md (an autoall directive per public module)")

    def test_every_public_name_has_a_description(self):
        import cuda_reclaim

        # A submodule named in a package's __all__ is described by its own section (its module docstring).
        names = [f"{m.__name__}.{name}" for m in public_modules(cuda_reclaim) for name in m.__all__
                 if not inspect.ismodule(getattr(m, name))]
        self.assertIn("cuda_reclaim.ABI_VERSION", names)
        found = descriptions(read(os.path.join(SITE, API_PAGE)))
        self.assertEqual(undescribed(names, found), [],
                         "describe them: a docstring, or a #: comment above the constant (module or stub)")

    def test_every_counter_is_in_the_reference_with_its_description(self):
        import cuda_reclaim

        page = plain_text(read(os.path.join(SITE, API_PAGE)))
        # A row: the key, its kind (one or two words), its source, its description.
        kinds = {"counter": "counter", "gauge": "gauge", "high_water_mark": "high-water mark"}
        missing = [key for key, counter in cuda_reclaim.COUNTERS.items()
                   if not re.search(rf"(?<!\w){re.escape(key)} {kinds[counter.kind]} {counter.source} "
                                    rf"{re.escape(counter.description)}", page)]
        self.assertEqual(missing, [], "docs/api.md's counters table")

    def test_the_c_api_doc_mentions_every_entry_and_function(self):
        texts = [read(path) for path in HEADERS]
        names = c_api_names(texts)
        self.assertIn("push", names)
        self.assertIn("cuda_reclaim_import", names)
        self.assertEqual(unmentioned(names, read(C_API_DOC)), [], C_API_DOC)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not os.path.isfile(os.path.join(sys.argv[1], "objects.inv")):
        sys.exit(f"usage: {sys.argv[0]} OUT/html (from the repository root)")
    SITE = sys.argv[1]
    unittest.main(argv=sys.argv[:1], verbosity=2)
