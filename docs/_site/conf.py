"""Sphinx configuration of the documentation site: tests/docs_site/build.sh runs
`sphinx-build -c docs/_site . OUT` (warnings are errors, references nitpicky, nothing downloaded).

The source directory is the repository root, so that every relative link of the Markdown pages resolves in
the site exactly as it does on GitHub (`../README.md`, `docs/guide.md#install`, a source file: a download);
include_patterns keeps the pages to README.md, CHANGELOG.md and docs/. The entry page is docs/index.md;
the site's index.html forwards to it.
"""

import os
import sys

SITE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(SITE))
sys.path.insert(0, SITE)  # cuda_reclaim_site, the extension beside this file

project = "cuda-reclaim"
author = "the cuda-reclaim authors"
copyright = "the cuda-reclaim authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "cuda_reclaim_site",
]

root_doc = "docs/index"
source_suffix = {".md": "markdown"}
# The pages. Sphinx walks the source directory (following links) and prunes only excluded folders, so every
# other top-level entry is excluded by name: the bazel-* links lead into Bazel's output trees.
SITE_TOP_LEVEL = {"README.md", "CHANGELOG.md", "docs"}
include_patterns = ["README.md", "CHANGELOG.md", "docs/*.md"]
exclude_patterns = sorted(set(os.listdir(ROOT)) - SITE_TOP_LEVEL) + [
    "docs/_build",
    "docs/_site",
    # A table bench/make_report.py writes for docs/benchmarks.md, which names it; not a page.
    "docs/benchmarks-short-lived-threads.md",
]

# GitHub's heading anchors (`guide.md#install`), which the pages link to.
myst_heading_anchors = 6
# The generated benchmark report puts its tables under H4 headings inside H2 sections
# (bench/report/tables.py); the jump of level is a choice of style, not a broken reference.
suppress_warnings = ["myst.header"]

nitpicky = True

# Python's own names (int, concurrent.futures.Future, ...) resolve through a local inventory, never a
# download: python-inventory.txt beside this file, lines of docs.python.org/3's objects.inv in its plain-text
# form, compressed when the build starts (cuda_reclaim_site.local_inventories). A docstring that names a
# standard-library object not listed there fails the nitpicky build: add the object's line.
local_intersphinx_inventories = {
    "python": ("https://docs.python.org/3", os.path.join(SITE, "python-inventory.txt")),
}

autodoc_member_order = "bysource"

html_theme = "alabaster"
html_title = "cuda-reclaim"
html_theme_options = {"description": "Release Python objects safely from CUDA's own threads."}
templates_path = ["templates"]
html_additional_pages = {"index": "forward.html"}
html_show_sourcelink = False
