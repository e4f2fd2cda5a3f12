"""The site's own Sphinx extension (docs/_site/conf.py loads it).

- ``.. autoall:: MODULE`` (inside an ``{eval-rst}`` block): the module's docstring, then one autodoc entry
  for every name of the module's ``__all__``, grouped as functions, classes and constants. A name added to
  ``__all__`` appears without editing a page; autodoc's own ``automodule :members:`` would leave out
  constants that have no ``#:`` comment in the module's source (``ABI_VERSION``, imported from C). A
  constant's description is its ``#:`` comment, never its type's docstring (int's, tuple's); a mapping's
  value, a table, is left out of its signature line.
- ``local_intersphinx_inventories = {name: (base URI, plain-text inventory)}``: each inventory, in the plain
  form of a Sphinx objects.inv (sphobjinv's), is compressed into the doctree directory when the build starts
  and handed to intersphinx as a local file, so that references to other projects resolve offline.
- Links to what the repository holds but the site does not (the source directory is the repository root,
  limited to the pages by include_patterns): MyST already makes a link to a file a download of it; a link
  to a Markdown file that is not a page becomes a download too (instead of a missing document), and a
  link to a folder keeps its text, unlinked. A link to nothing at all still fails the build.
"""

import importlib
import os
from collections.abc import Mapping

import sphobjinv
from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.util.docstrings import prepare_docstring
from sphinx.util.docutils import SphinxDirective
from sphinx.util.parsing import nested_parse_to_nodes

GROUPS = (("function", "Functions"), ("class", "Classes"), ("data", "Constants"))


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
    app.add_config_value("local_intersphinx_inventories", {}, "env", types=[dict])
    # Before intersphinx validates its mapping (its own config-inited handler, priority 800).
    app.connect("config-inited", local_inventories, priority=400)
    # Before the download collector (priority 500) registers the downloads of the document.
    app.connect("doctree-read", links_outside_the_site, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
