"""``argparse-help``: the CLI reference, generated from the argument parsers.

Usage in a Markdown page (MyST)::

    ```{argparse-help} iastudio.core.cli:build_parser
    ```

    ```{argparse-help} iastudio.core.nets.cli:build_parser
    :args: iastudio.core.nets:MODEL_NAMES
    ```

The directive imports the function, calls it (with the objects named by
``:args:``, if any), and renders ``parser.format_help()`` as a literal block,
followed by one section per sub-command.  What the reader sees is therefore
exactly what ``--help`` prints, and it cannot fall out of date.
"""
from __future__ import annotations

import argparse
import importlib
import os
from typing import ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

__all__ = ["setup"]

WIDTH = "100"  # argparse wraps at $COLUMNS


def _resolve(spec: str):
    module, _, attr = spec.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _subparsers(parser: argparse.ArgumentParser):
    for action in parser._actions:  # argparse keeps sub-commands only here
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


class ArgparseHelp(SphinxDirective):
    required_arguments = 1
    has_content = False
    option_spec: ClassVar[dict] = {"args": directives.unchanged}

    def run(self):
        old = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = WIDTH
        try:
            build = _resolve(self.arguments[0])
            args = []
            if "args" in self.options:
                args = [_resolve(s.strip()) for s in self.options["args"].split(",")]
            parser = build(*args)
            blocks = [(None, parser.format_help())]
            blocks += [(f"{parser.prog} {name}", sub.format_help()) for name, sub in _subparsers(parser)]
        finally:
            if old is None:
                os.environ.pop("COLUMNS", None)
            else:
                os.environ["COLUMNS"] = old
        out = []
        for title, text in blocks:
            if title:
                para = nodes.paragraph()
                para += nodes.strong(text=title)
                out.append(para)
            block = nodes.literal_block(text, text)
            block["language"] = "text"
            out.append(block)
        return out


def setup(app):
    app.add_directive("argparse-help", ArgparseHelp)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
