"""What ``ia-cluster`` says while it works: the progress inside a long stage."""
import re

import pytest

from iastudio.core import cli
from iastudio.core.cli import main


@pytest.fixture(autouse=True)
def _logs(tmp_path, monkeypatch):
    monkeypatch.setenv("IA_STUDIO_LOG_DIR", str(tmp_path / "logs"))


def test_without_a_terminal_the_progress_names_each_stage_and_the_similarity_stage_from_inside(tmp_path, capsys):
    # a pruned run (as on 1,800 particles) yields its first snapshot only when it has finished: until this
    # version nothing was printed before "100% iteration 0: done"
    assert main(["demo:shapes", "--size", "24", "--neighbors", "5", "--clusters", "3",
                 "--out", str(tmp_path / "o")]) == 0
    lines = capsys.readouterr().err.splitlines()
    stages = [line for line in lines if re.match(r"\s*\d+% ", line)]
    assert re.match(r"\s*0% reading the images · 0:\d\d$", stages[0])
    assert re.match(r"\s*0% preparing the images \(denoise auto\) · 0:\d\d$", stages[1])
    inside = [line for line in stages if re.search(r"invariant similarity \d+ % · 0:\d\d$", line)]
    assert inside
    assert stages.index(inside[0]) < stages.index(next(s for s in stages if "done" in s))
    assert re.match(r"100% writing the results · 0:\d\d$", stages[-1])


def test_on_a_terminal_the_bar_is_redrawn_in_place_and_ends_its_line_before_other_messages(monkeypatch, capsys):
    monkeypatch.setattr(cli.sys.stderr, "isatty", lambda: True, raising=False)
    bar = cli._Progress(False, t0=0.0)
    bar(0.0, "reading the images")
    bar.clear()
    print("ia-cluster: skipped x.png: empty", file=cli.sys.stderr)
    bar(0.5, "invariant similarity 10 %")
    bar(0.5, "invariant similarity 11 %")  # within REDRAW_S of the last: not drawn
    bar.close()
    err = capsys.readouterr().err
    assert err.count("\r[") == 2
    assert "reading the images" in err.split("\n")[0]
    assert err.split("\n")[1] == "ia-cluster: skipped x.png: empty"
    assert "[############             ]  50% invariant similarity 10 %" in err
    assert err.endswith("\n")
