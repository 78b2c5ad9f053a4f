"""Sphinx configuration of the Invariant Attention Studio documentation.

Built offline with warnings as errors (``.ci/run``)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

Nothing is downloaded: no intersphinx inventories, no remote images; the
gallery's figures are drawn by the build from the built-in demos.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
# The app's modules are never imported here; should anything pull Qt in, it must not need a display.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("MPLBACKEND", "Agg")

try:
    from iastudio.core import __version__ as release
except ImportError:  # building from a tree that is not installed
    release = "0+unknown"

project = "Invariant Attention Studio"
author = "The Invariant Attention Studio developers"
copyright = "the Invariant Attention Studio developers"  # noqa: A001
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "argparse_help",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = ["_build", "_templates", "README.md", "examples/README.txt", "auto_examples/*.ipynb",
                    "auto_examples/*.py", "auto_examples/*.zip", "auto_examples/*.md5",
                    "auto_examples/*.json"]

# MyST: `page.md#a-heading` links are resolved (and checked) against the headings' anchors.
myst_heading_anchors = 4
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]

# API reference from the numpydoc docstrings.
autosummary_generate = True
autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks: set[str] = set()

# The gallery: each example draws its own figures when the docs are built.
sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "image_scrapers": ("matplotlib",),
    "reference_url": {},
    "show_memory": False,
    "matplotlib_animations": False,
}

# Equations are typeset by MathJax in the reader's browser, loaded from its CDN.  To read the pages
# offline, point this at a local copy, e.g. Debian's libjs-mathjax:
#   IA_DOCS_MATHJAX="file:///usr/share/javascript/mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML"
if os.environ.get("IA_DOCS_MATHJAX"):
    mathjax_path = os.environ["IA_DOCS_MATHJAX"]
    if "MathJax.js" in mathjax_path:  # MathJax 2 (Debian's) needs to be told what Sphinx marks as maths
        mathjax2_config = {"tex2jax": {"inlineMath": [["\\(", "\\)"]], "displayMath": [["\\[", "\\]"]],
                                       "processEscapes": True, "ignoreClass": "document",
                                       "processClass": "math|output_area"}}

html_theme = "pydata_sphinx_theme"
html_title = "Invariant Attention Studio"
html_logo = "../resources/icons/ia-studio.png"
html_static_path: list[str] = []
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 6,
    "icon_links": [],
    "use_edit_page_button": False,
}
# top-level pages have no sub-pages: no empty "Section Navigation" column beside them
html_sidebars = {"*": [], "api/**": ["sidebar-nav-bs"], "auto_examples/*": ["sidebar-nav-bs"]}
html_show_sourcelink = False
suppress_warnings: list[str] = []
