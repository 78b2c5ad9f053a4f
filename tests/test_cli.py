import csv
import json
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from core.cli import main
from core.demos import base_shapes
from core.warp import warp
from core import se2

FAST = ["--size", "24", "--quiet"]


@pytest.fixture(autouse=True)
def _logs(tmp_path, monkeypatch):
    monkeypatch.setenv("IA_STUDIO_LOG_DIR", str(tmp_path / "logs"))


def _folder(tmp_path):
    """Two labelled classes of transformed shapes, plus two bad files."""
    bases, names = base_shapes()
    tau = se2.random_transforms(6, rotation_range=180, shift_range=4, seed=4)
    imgs = np.clip(warp(np.repeat(bases[:2], 3, axis=0), tau), 0, 1)
    for k, img in enumerate(imgs):
        d = tmp_path / "in" / names[k // 3]
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray((img * 255).astype(np.uint8)).save(d / f"{k}.png")
    (tmp_path / "in" / "horse" / "broken.png").write_text("not an image")
    (tmp_path / "in" / "seven" / "empty.jpg").write_bytes(b"")
    return tmp_path / "in"


def test_end_to_end_folder_with_skipped_files(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main([str(_folder(tmp_path)), "--out", str(out), "--iterations", "2", *FAST])
    assert rc == 0
    err = capsys.readouterr().err
    assert "broken.png: not an image" in err and "empty.jpg: empty" in err
    with open(out / "assignments.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0].keys()) == ["path", "cluster", "theta_deg", "tx_px", "ty_px", "score", "label"]
    assert len(rows) == 6 and {r["label"] for r in rows} == {"horse", "seven"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_images"] == 6 and summary["n_clusters"] == 2
    assert {s["path"].split("/")[-1] for s in summary["skipped"]} == {"broken.png", "empty.jpg"}
    assert summary["metrics"]["ari"] == 1.0 and summary["backend"].startswith("numpy")
    assert set(summary["timings"]) == {"total_s", "similarity_s", "mean_s"}
    w = np.load(out / "weights.npy", allow_pickle=False)
    assert w.shape == (6, 6) and w.dtype == np.float32 and np.allclose(w.sum(0), 1, atol=1e-5)
    assert np.load(out / "distances.npy", allow_pickle=False).shape == (6, 6)
    assert np.load(out / "means.npy", allow_pickle=False).shape[0] == 2
    for png in ("means.png", "weights.png", "convergence.png"):
        assert Image.open(out / png).size[0] > 100
    # the reported transform aligns each image onto its cluster: rows of one
    # cluster have near-perfect scores
    assert min(float(r["score"]) for r in rows) > 0.9


def test_demo_ka_one_iteration_and_transform(tmp_path):
    out = tmp_path / "o"
    assert main(["demo:shapes", "--out", str(out), "--method", "ka", "--iterations", "1",
                 "--transform", "180,0.1", "--clusters", "3", *FAST]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["n_clusters"] == 3 and s["iterations"] == 1 and s["parameters"]["method"] == "ka"
    assert s["metrics"]["ari"] < 1.0


@pytest.mark.parametrize("args", [
    ["demo:shapes", "--beta", "0"], ["demo:shapes", "--beta", "-1"], ["demo:shapes", "--size", "4"],
    ["demo:shapes", "--clusters", "99"], ["demo:shapes", "--angle-step", "0"], ["demo:nothing"],
    [], ["demo:shapes", "--method", "x"],
])
def test_bad_usage_exits_2(tmp_path, args):
    with pytest.raises(SystemExit) as info:
        main(args + ["--out", str(tmp_path / "o"), "--quiet"])
    assert info.value.code == 2


def test_nothing_usable_exits_1_with_one_line(tmp_path, capsys):
    (tmp_path / "bad.png").write_text("x")
    assert main([str(tmp_path / "bad.png"), "--out", str(tmp_path / "o"), "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("ia-cluster:") and "Traceback" not in "\n".join(err)


def test_failure_exits_1_and_logs_traceback(tmp_path, capsys, monkeypatch):
    import core.attention

    def boom(*a, **k):
        raise MemoryError("simulated out of memory")

    monkeypatch.setattr(core.attention.AttentionRun, "steps", boom)
    assert main(["demo:shapes", "--out", str(tmp_path / "o"), *FAST]) == 1
    err = capsys.readouterr().err
    assert "simulated out of memory" in err and "Traceback" not in err
    log = (tmp_path / "logs" / "ia-cluster.log").read_text()
    assert "Traceback" in log and "MemoryError" in log


def test_console_script_help_and_version():
    out = subprocess.run([sys.executable, "-m", "core.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "ia-cluster 0.1.0" in out.stdout
    out = subprocess.run([sys.executable, "-m", "core.cli", "--help"], capture_output=True, text=True)
    assert "--rotation-range" in out.stdout and "demo:shapes" in out.stdout
