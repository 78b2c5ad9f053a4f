"""The run options are declared once (core/options.py): the CLI, the Run panel, the engine's Settings and
the documentation's table are made from the declaration and agree with it."""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from iastudio.core import options
from iastudio.core.attention import Settings
from iastudio.core.cli import build_parser
from iastudio.core.options import OPTIONS, option
from iastudio.core.session import Session

ROOT = Path(__file__).resolve().parents[1]
NUMBERS = [o for o in OPTIONS if o.kind in (int, float)]
PANEL_NUMBERS = ("beta", "iterations", "clusters", "rotation_range", "angle_step", "size")


def _action(parser: argparse.ArgumentParser, flag: str) -> argparse.Action:
    return next(a for a in parser._actions if flag in a.option_strings)


# ------------------------------------------------------------------------------------ the declaration itself
def test_known_answers():
    assert options.problem("size", 64) is None
    assert options.problem("size", 7) == "size must be at least 8, got 7"
    assert options.problem("size", 513) == "size must be at most 512, got 513"
    assert options.problem("beta", 0.0) == "beta must be above 0, got 0"
    assert options.problem("beta", "auto") is None
    assert options.problem("neighbors", "all") is None
    assert options.problem("iterations", 2.5) == "iterations must be a whole number, got 2.5"
    assert options.problem("angle_step", float("nan")) == "angle_step must be a finite number, got nan"
    assert options.problem("method", "x") == "method must be one of 'ia', 'ka', got 'x'"
    assert options.problem("rotation_range", None) is None  # the whole circle
    assert options.parse("clusters", "auto") == "auto"
    assert options.parse("angle_step", "0.1") == 0.1
    with pytest.raises(ValueError, match=r"--size must be a whole number, got '1e9'"):
        options.parse("size", "1e9")
    with pytest.raises(KeyError):
        option("nothing")


@pytest.mark.parametrize("opt", NUMBERS, ids=lambda o: o.name)
def test_every_number_accepts_its_limits_and_refuses_beyond(opt):
    lo = opt.minimum
    assert options.problem(opt.name, lo) == (f"{opt.name} must be above {options._number(lo)}, got "
                                             f"{options._number(opt.kind(lo))}" if opt.open_minimum else None)
    assert options.problem(opt.name, lo - 1) is not None
    if opt.maximum is not None:
        assert options.problem(opt.name, opt.maximum) is None
        assert options.problem(opt.name, opt.maximum + 1) is not None
    if opt.default is not None and not isinstance(opt.default, str):
        assert options.problem(opt.name, opt.default) is None


def test_settings_defaults_are_the_declared_ones():
    s = Settings()
    for opt in OPTIONS:
        if opt.name in Settings.__dataclass_fields__:
            assert getattr(s, opt.name) == opt.default, opt.name


@pytest.mark.parametrize("opt", [o for o in NUMBERS if o.checked_by == "engine" and o.maximum is not None
                                 and o.name in Settings.__dataclass_fields__], ids=lambda o: o.name)
def test_settings_refuse_what_the_declaration_refuses(opt):
    Settings(**{opt.name: opt.maximum}).validate(10**6)
    with pytest.raises(ValueError, match=f"{opt.name} must be at most"):
        Settings(**{opt.name: opt.maximum * 2}).validate(10**6)


def test_session_refuses_a_working_size_out_of_range():
    s = Session()
    said = []
    s.message = said.append  # (not through the events: they are being replaced by typed signals)
    assert s.set_size(1000) is False
    assert s.size == 64
    assert said == ["The working size must be at most 512, got 1000."]
    assert s.set_size(512) is True
    assert s.size == 512
    with pytest.raises(ValueError, match="size must be at least 8"):
        Session(size=4)


# ------------------------------------------------------------------------------------ the CLI
@pytest.mark.parametrize("opt", OPTIONS, ids=lambda o: o.name)
def test_cli_takes_default_and_choices_from_the_declaration(opt):
    action = _action(build_parser(), opt.flag)
    assert action.default == opt.default
    if opt.choices:
        assert tuple(action.choices) == opt.choices


@pytest.mark.parametrize("opt", [o for o in NUMBERS if o.maximum is not None], ids=lambda o: o.name)
def test_cli_accepts_the_limits_and_refuses_beyond(opt, capsys):
    parser = build_parser()
    top = parser.parse_args([opt.flag, str(opt.maximum)])
    assert getattr(top, opt.name) == opt.maximum
    with pytest.raises(SystemExit) as exc:
        parser.parse_args([opt.flag, str(opt.maximum * 2)])
    assert exc.value.code == 2
    assert f"{opt.flag} must be at most" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ the Run panel
def _panel(qtbot):
    from iastudio.app.panels import RunPanel

    panel = RunPanel(True, "test")
    qtbot.addWidget(panel)
    return panel


@pytest.mark.parametrize("name", PANEL_NUMBERS)
def test_panel_fields_have_the_declared_range_and_default(qtbot, name):
    opt = option(name)
    box = getattr(_panel(qtbot), name)
    step = 10.0 ** -box.decimals() if hasattr(box, "decimals") else 1
    np.testing.assert_allclose(box.minimum(), opt.minimum + (step if opt.open_minimum else 0))
    np.testing.assert_allclose(box.maximum(), opt.maximum)
    shown = opt.default if isinstance(opt.default, (int, float)) else opt.typical or opt.maximum
    np.testing.assert_allclose(box.value(), shown)
    assert f"default {opt.default_text().replace('`', '')}" in box.toolTip()


def test_panel_options_are_the_declared_defaults(qtbot):
    got = _panel(qtbot).options()
    for name in ("method", "beta", "iterations", "clusters", "rotation_range", "angle_step", "group"):
        assert got[name] == option(name).default, name


# ------------------------------------------------------------------------------------ the documentation
def test_docs_table_is_the_generated_one():
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert options.update_markdown(page) == page, "run: python -m iastudio.core.options docs/cli.md"
    for opt in OPTIONS:
        assert f"`{opt.flag}" in page


def test_update_markdown_needs_its_markers():
    with pytest.raises(ValueError, match="markers are missing"):
        options.update_markdown("# a page\n")


# ------------------------------------------------------------------------------------ one edit changes all
def test_changing_a_declaration_changes_cli_panel_and_table(qtbot, monkeypatch):
    monkeypatch.setattr(options, "OPTIONS", options.replaced("size", default=96, maximum=384))
    monkeypatch.setattr(options, "OPTIONS", options.replaced("iterations", default=7))
    parser = build_parser()
    assert _action(parser, "--size").default == 96
    assert _action(parser, "--iterations").default == 7
    with pytest.raises(SystemExit):
        parser.parse_args(["--size", "400"])
    panel = _panel(qtbot)
    assert panel.size.value() == 96
    assert panel.size.maximum() == 384
    assert panel.iterations.value() == 7
    table = options.markdown_table()
    assert "| `--size PX` | working size: the side of the square canvas, in pixels | 8 px to 384 px | 96 |" in table
    assert "| 1 to 1000 | 7 |" in table
    assert options.problem("size", 400) == "size must be at most 384, got 400"


def test_alignment_options_keep_only_declared_values():
    from iastudio.core.options import alignment_options

    assert alignment_options({}) == {"rotation_range": None}  # the whole circle
    assert alignment_options({"angle_step": 2, "rotation_range": 45.0}) == {"angle_step": 2.0, "rotation_range": 45.0}
    assert alignment_options({"angle_step": True, "rotation_range": "all"}) == {}  # a bool, a word: left out
    assert alignment_options({"angle_step": 1e6, "rotation_range": -3}) == {}  # outside the limits
