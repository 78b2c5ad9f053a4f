"""What ``ia-cluster`` says while it works: the progress inside a long stage, and skipped images said once."""
import json
import re

import mrcfile
import numpy as np
import pytest

from iastudio.core import cli
from iastudio.core.cli import main
from iastudio.core.imageset import skipped_lines


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


def test_skipped_lines_say_a_run_of_one_files_images_once_and_keep_the_rest_apart():
    entries = ([{"path": f"d/gone.mrcs#{i}", "reason": "does not exist"} for i in range(1, 601)]
               + [{"path": "d/s.mrcs#2500", "reason": "no image 2500 in the stack (it holds 1800)"},
                  {"path": "d/gone.mrcs#700", "reason": "does not exist"},
                  {"path": "d/other.mrcs#1", "reason": "does not exist"},
                  {"path": "d/other.mrcs#2", "reason": "truncated file"},
                  {"path": "d/a#b.png", "reason": "empty"}])
    assert skipped_lines(entries) == [
        "d/gone.mrcs#1 to #600 (600 images): does not exist",
        "d/s.mrcs#2500: no image 2500 in the stack (it holds 1800)",
        "d/gone.mrcs#700: does not exist",
        "d/other.mrcs#1: does not exist",
        "d/other.mrcs#2: truncated file",
        "d/a#b.png: empty",
    ]
    short = skipped_lines(entries[:2], name=lambda p: p.split("/")[-1])
    assert short == ["gone.mrcs#1 to #2 (2 images): does not exist"]


def test_a_star_file_whose_stack_is_missing_says_so_in_one_line_and_the_rest_runs(tmp_path, capsys):
    starfile = pytest.importorskip("starfile")
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    with mrcfile.new(tmp_path / "s.mrcs") as m:
        m.set_data(rng.random((6, 16, 16)).astype(np.float32))
    names = [f"{i:06d}@s.mrcs" for i in range(1, 7)] + [f"{i:06d}@gone.mrcs" for i in range(1, 401)]
    starfile.write(pd.DataFrame({"rlnImageName": names}), tmp_path / "p.star")
    out = tmp_path / "o"
    assert main([str(tmp_path / "p.star"), "--size", "16", "--clusters", "2", "--quiet", "--out", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    skipped = [line for line in err if line.startswith("ia-cluster: skipped")]
    assert skipped == [f"ia-cluster: skipped {tmp_path / 'gone.mrcs'}#1 to #400 (400 images): does not exist"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_images"] == 6
    assert len(summary["skipped"]) == 400  # every row is kept there


def test_on_a_terminal_an_error_after_the_bar_starts_on_a_line_of_its_own(monkeypatch, capsys, tmp_path):
    """From the review: a usage error found once the images were read printed on the bar's line."""
    from PIL import Image

    monkeypatch.setattr(cli.sys.stderr, "isatty", lambda: True, raising=False)
    for k in range(3):
        Image.fromarray(np.full((8, 8), 40 * k, np.uint8)).save(tmp_path / f"{k}.png")
    with pytest.raises(SystemExit) as exc:  # PNGs: refused for RELION after they were read, with --pixel-size
        cli.main([str(tmp_path), "--out", str(tmp_path / "o"), "--export", "relion", "--pixel-size", "1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "\r[" in err  # the bar was drawn
    refusal = next(line for line in err.split("\n") if "needs images from MRC files" in line)
    assert "\r" not in refusal  # not written over the bar's line
