"""The README and the documentation pages the app and the README point to."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_readme_is_short_and_links_only_to_files_in_a_clone():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert "shared/seeds" not in text
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), f"README links to {target}, which is not in the repository"


@pytest.mark.parametrize("frozen", [True, False])
def test_the_packaged_app_points_to_pages_that_exist_and_never_to_pip(monkeypatch, frozen):
    from iastudio.app import edition

    monkeypatch.setattr(sys, "frozen", frozen, raising=False)
    texts = [edition.gpu_note_text("the GPU backend is not available: no CUDA device"), edition.nets_hint()]
    if frozen:
        assert not any("pip install" in t for t in texts)
        pages = [p for t in texts for p in re.findall(r"docs/[\w.-]+\.md", t)]
        assert len(pages) == 2
        for page in pages:
            assert (ROOT / page).is_file(), f"the packaged app points to {page}, which does not exist"
    else:
        assert "pip install" in texts[1]


def test_argparse_help_renders_every_subcommand():
    pytest.importorskip("sphinx", reason="the docs extra is not installed (pip install -e .[docs])")
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import argparse_help
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    from iastudio.core.cli import build_parser
    from iastudio.core.nets import MODEL_NAMES
    from iastudio.core.nets.cli import build_parser as nets_parser

    assert "--neighbors" in build_parser().format_help()
    subs = dict(argparse_help._subparsers(nets_parser(MODEL_NAMES)))
    assert sorted(subs) == ["compare", "train"]
    assert "--time-budget" in subs["compare"].format_help()
    assert list(argparse_help._subparsers(build_parser())) == []
