"""The site's own Sphinx extension (docs/_site/conf.py loads it).

- ``.. autoall:: MODULE`` (inside an ``{eval-rst}`` block): the module's docstring, then one autodoc entry
  for every name of the module's ``__all__``, grouped as functions, classes and constants. A name added to
  ``__all__`` appears without editing a page; autodoc's own ``automodule :members:`` would leave out
  constants that have no ``#:`` comment in the module's source (``ABI_VERSION``, imported from C). A
  constant's description is its ``#:`` comment, never its type's docstring (int's, tuple's): in the module,
  or else in the module it is imported from (``from X import NAME``), or else in a type stub of its package
  (``ABI_VERSION``'s is in ``_reclaim.pyi``); a public name left with no description at all is a warning, so
  the build fails. A mapping's value, a table, is left out of its
  signature line.
- ``local_intersphinx_inventories = {name: (base URI, plain-text inventory)}``: each inventory, in the plain
  form of a Sphinx objects.inv (sphobjinv's), is compressed into the doctree directory when the build starts
  and handed to intersphinx as a local file, so that references to other projects resolve offline.
- Links to what the repository holds but the site does not (the source directory is the repository root,
  limited to the pages by include_patterns): MyST already makes a link to a file a download of it; a link
  to a Markdown file that is not a page becomes a download too (instead of a missing document), and a
  link to a folder keeps its text, unlinked. A link to nothing at all still fails the build.
"""

import ast
import glob
import importlib
import importlib.util
import os
from collections.abc import Mapping

import sphobjinv
from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.errors import PycodeError
from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging
from sphinx.util.docstrings import prepare_docstring
from sphinx.util.docutils import SphinxDirective
from sphinx.util.parsing import nested_parse_to_nodes

GROUPS = (("function", "Functions"), ("class", "Classes"), ("data", "Constants"))
logger = logging.getLogger(__name__)


def autodoc_kind(value):
    """The autodoc directive for `value`: function, class, exception or data."""
    if isinstance(value, type):
        return "exception" if issubclass(value, BaseException) else "class"
    return "function" if callable(value) else "data"


def autoall_lines(module_name):
    """The reStructuredText that documents `module_name` and every name of its __all__."""
    module = importlib.import_module(module_name)
    public = getattr(module, "__all__", None)
    if not public:
        raise ValueError(f"autoall: {module_name} has no __all__ to document")
    lines = [f".. automodule:: {module_name}", ""]
    by_group = {group: [] for group, _ in GROUPS}
    for name in public:
        kind = autodoc_kind(getattr(module, name))
        by_group["class" if kind == "exception" else kind].append((kind, name))
    for group, title in GROUPS:
        if by_group[group]:
            lines += [f".. rubric:: {title}", ""]
        for kind, name in by_group[group]:
            lines.append(f".. auto{kind}:: {module_name}.{name}")
            if group == "class":
                lines += ["   :members:", "   :undoc-members:"]
            elif isinstance(getattr(module, name), Mapping):
                lines.append("   :no-value:")
            lines.append("")
    return lines


class AutoAll(SphinxDirective):
    """``.. autoall:: MODULE``: see the module's docstring."""

    required_arguments = 1

    def run(self):
        try:
            lines = autoall_lines(self.arguments[0])
        except (ImportError, ValueError) as error:
            raise self.error(f"autoall: {error}") from error
        source = f"<autoall {self.arguments[0]}>"
        return nested_parse_to_nodes(self.state, StringList(lines, source=source), source=source)


def no_type_docstring(app, what, name, obj, options, lines):
    """autodoc-process-docstring: drop the docstring a constant only has from its type."""
    if what == "data" and type(obj).__doc__ and lines == prepare_docstring(type(obj).__doc__):
        lines.clear()


def imported_from(module, name):
    """(module name, original name) when `module`'s source binds `name` with ``from X import ...``; else None."""
    try:
        with open(module.__file__, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, UnicodeDecodeError, TypeError):
        return None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return importlib.util.resolve_name("." * node.level + (node.module or ""), module.__package__), \
                        alias.name
    return None


def borrowed_comment(module_name, name):
    """The ``#:`` comment of `name` where the module does not have one: in the module it imports `name` from,
    or else at the top level of a type stub of the module's package (the module's own stub first, then the
    others in name order). None when there is none."""
    module = importlib.import_module(module_name)
    source = imported_from(module, name)
    if source is not None:
        try:
            comments = ModuleAnalyzer.for_module(source[0]).find_attr_docs()
        except PycodeError:
            comments = {}
        if ("", source[1]) in comments:
            return list(comments[("", source[1])])
    package = os.path.dirname(module.__file__)
    own = os.path.splitext(module.__file__)[0] + ".pyi"
    for stub in [own] + sorted(set(glob.glob(os.path.join(package, "*.pyi"))) - {own}):
        if os.path.isfile(stub):
            with open(stub, encoding="utf-8") as f:
                comments = ModuleAnalyzer.for_string(f.read(), module_name, stub).find_attr_docs()
            if ("", name) in comments:
                return list(comments[("", name)])
    return None


def described_constants(app, what, name, obj, options, lines):
    """autodoc-process-docstring, after no_type_docstring: a constant with no description gets one from
    borrowed_comment(); one that has none there either is a warning."""
    if what != "data" or any(line.strip() for line in lines):
        return
    module_name, _, attribute = name.rpartition(".")
    comment = borrowed_comment(module_name, attribute)
    if comment:
        lines[:] = comment
    else:
        logger.warning("autoall: %s has no description (a #: comment above it, in its module or a stub)", name)


def local_inventories(app, config):
    """config-inited: compress each plain-text inventory and point intersphinx_mapping at the result."""
    os.makedirs(app.doctreedir, exist_ok=True)
    for name, (uri, plain) in config.local_intersphinx_inventories.items():
        compressed = os.path.join(app.doctreedir, f"{name}-objects.inv")
        with open(plain, "rb") as f:
            inventory = sphobjinv.Inventory(plaintext=f.read())
        sphobjinv.writebytes(compressed, sphobjinv.compress(inventory.data_file()))
        config.intersphinx_mapping[name] = (uri, compressed)


def links_outside_the_site(app, doctree):
    """doctree-read, before Sphinx collects the downloads: see the module's docstring."""
    for node in list(doctree.findall(addnodes.pending_xref)):
        if node.get("reftype") != "myst":
            continue
        if node.get("refdomain") == "doc" and node["reftarget"] not in app.env.found_docs:
            # MyST named a document for a Markdown file; outside the site, it is a file like any other.
            path = node["reftarget"] + ".md"
            if os.path.isfile(os.path.join(app.srcdir, path)):
                download = addnodes.download_reference(
                    "", "", *node.children, refdomain=None, reftype="myst", refexplicit=node.get("refexplicit"),
                    reftarget="/" + path, refdoc=node.get("refdoc"))
                node.replace_self(download)
        elif node.get("refdomain") is None:
            folder = os.path.normpath(os.path.join(app.srcdir, os.path.dirname(app.env.docname), node["reftarget"]))
            if os.path.isdir(folder) and folder.startswith(str(app.srcdir) + os.sep):
                node.replace_self(nodes.inline("", "", *node.children))


def setup(app):
    app.add_directive("autoall", AutoAll)
    app.connect("autodoc-process-docstring", no_type_docstring)
    app.connect("autodoc-process-docstring", described_constants, priority=600)
    app.add_config_value("local_intersphinx_inventories", {}, "env", types=[dict])
    # Before intersphinx validates its mapping (its own config-inited handler, priority 800).
    app.connect("config-inited", local_inventories, priority=400)
    # Before the download collector (priority 500) registers the downloads of the document.
    app.connect("doctree-read", links_outside_the_site, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
