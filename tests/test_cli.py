import csv
import json
import subprocess
import sys
from importlib.metadata import version

import numpy as np
import pytest
from PIL import Image

from iastudio.core import se2
from iastudio.core.cli import main
from iastudio.core.demos import base_shapes
from iastudio.core.warp import warp

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
    assert "broken.png: not an image" in err
    assert "empty.jpg: empty" in err
    with open(out / "assignments.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0].keys()) == ["path", "cluster", "theta_deg", "tx_px", "ty_px", "score", "label"]
    assert len(rows) == 6
    assert {r["label"] for r in rows} == {"horse", "seven"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_images"] == 6
    assert summary["n_clusters"] == 2
    assert {s["path"].split("/")[-1] for s in summary["skipped"]} == {"broken.png", "empty.jpg"}
    assert summary["metrics"]["ari"] == 1.0
    assert summary["backend"].startswith("numpy")
    assert set(summary["timings"]) == {"total_s", "similarity_s", "mean_s"}
    # the evidence for k: candidates best first, a confidence, and how it was chosen
    assert summary["k_candidates"][0]["k"] == 2
    assert summary["k_method"] in ("eigengap", "silhouette")
    assert 0 < summary["k_confidence"] <= 1
    assert summary["blank"] == []
    assert summary["poor_fits"] == []
    assert summary["parameters"]["scale"] == "content"
    # "auto" as asked, and what it meant: every pair of 6 images is aligned, so 3 rounds
    assert summary["parameters"]["realign_rounds"] == "auto"
    assert summary["parameters"]["realign_rounds_used"] == 3
    assert summary["k_unsure"] == (summary["k_confidence"] < 0.4 and not summary["k_clear"])
    assert summary["k_clear"] is (summary["k_method"] == "silhouette" and not summary["k_unsure"])
    assert "k_stability" in summary
    w = np.load(out / "weights.npy", allow_pickle=False)
    assert w.shape == (6, 6)
    assert w.dtype == np.float32
    assert np.allclose(w.sum(0), 1, atol=1e-5)
    assert np.load(out / "distances.npy", allow_pickle=False).shape == (6, 6)
    assert np.load(out / "means.npy", allow_pickle=False).shape[0] == 2
    assert summary["denoise"]["undenoised_means"] is False  # clean images: the denoiser stepped aside
    assert not (out / "means_undenoised.npy").exists()
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
    assert s["n_clusters"] == 3
    assert s["iterations"] == 1
    assert s["parameters"]["method"] == "ka"
    assert s["parameters"]["realign_rounds_used"] is None  # KA has no invariant means to re-align
    assert s["metrics"]["ari"] < 1.0


@pytest.mark.parametrize("args", [
    ["demo:shapes", "--beta", "0"], ["demo:shapes", "--beta", "-1"], ["demo:shapes", "--size", "4"],
    ["demo:shapes", "--clusters", "99"], ["demo:shapes", "--angle-step", "0"], ["demo:nothing"],
    [], ["demo:shapes", "--method", "x"],
])
def test_bad_usage_exits_2(tmp_path, args):
    with pytest.raises(SystemExit) as info:
        main([*args, "--out", str(tmp_path / "o"), "--quiet"])
    assert info.value.code == 2


def test_nothing_usable_exits_1_with_one_line(tmp_path, capsys):
    (tmp_path / "bad.png").write_text("x")
    assert main([str(tmp_path / "bad.png"), "--out", str(tmp_path / "o"), "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("ia-cluster:")
    assert "Traceback" not in "\n".join(err)


def test_an_out_under_a_file_is_refused_in_plain_words_before_the_run(tmp_path, capsys):
    """The trial: "failed: [Errno 17] File exists: '/tmp/trial17/ro_parent'", after the whole run."""
    parent = tmp_path / "ro_parent"
    parent.write_text("a file")
    with pytest.raises(SystemExit) as stop:
        main(["demo:shapes", "--out", str(parent / "x"), *FAST])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().endswith(f"--out: cannot write the results to {parent / 'x'}: {parent} is a file, not a "
                                "folder")
    assert "Errno" not in err


def test_a_results_folder_that_cannot_be_written_is_said_plainly(tmp_path, capsys, monkeypatch):
    """An OSError while writing the results names the path and the reason, not "[Errno 13] …"."""
    import errno

    from iastudio.core.atomic import ResultFolder

    out = tmp_path / "o"

    def refused(self):
        raise PermissionError(errno.EACCES, "Permission denied", str(out.parent / ".o.partial"))

    monkeypatch.setattr(ResultFolder, "open", refused)
    assert main(["demo:shapes", "--out", str(out), "--iterations", "1", *FAST]) == 1
    err = capsys.readouterr().err
    assert f"ia-cluster: failed: cannot write the results to {out}: {out.parent / '.o.partial'}: permission " \
           "denied (" in err
    assert "Errno" not in err
    assert "Traceback" not in err


def test_failure_exits_1_and_logs_traceback(tmp_path, capsys, monkeypatch):
    import iastudio.core.attention

    def boom(*a, **k):
        raise MemoryError("simulated out of memory")

    monkeypatch.setattr(iastudio.core.attention.AttentionRun, "steps", boom)
    assert main(["demo:shapes", "--out", str(tmp_path / "o"), *FAST]) == 1
    err = capsys.readouterr().err
    assert "simulated out of memory" in err
    assert "Traceback" not in err
    log = (tmp_path / "logs" / "ia-cluster.log").read_text()
    assert "Traceback" in log
    assert "MemoryError" in log


def test_console_script_help_and_version():
    out = subprocess.run([sys.executable, "-m", "iastudio.core.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0
    assert f"ia-cluster {version('invariant-attention-studio')}" in out.stdout
    out = subprocess.run([sys.executable, "-m", "iastudio.core.cli", "--help"], capture_output=True, text=True)
    assert "--rotation-range" in out.stdout
    assert "demo:shapes" in out.stdout


def test_mirror_group_adds_a_column_and_blank_images_are_flagged(tmp_path, capsys):
    bases, _names = base_shapes()
    src = np.repeat(bases[1:], 3, axis=0)
    src[[1, 4]] = src[[1, 4]][:, :, ::-1]  # one mirrored seven, one mirrored key
    tau = se2.random_transforms(6, rotation_range=180, shift_range=3, seed=5)
    imgs = np.clip(warp(src, tau), 0, 1)
    d = tmp_path / "in"
    d.mkdir()
    for k, img in enumerate(imgs):
        Image.fromarray((img * 255).astype(np.uint8)).save(d / f"{k}.png")
    Image.fromarray(np.zeros((40, 40), np.uint8)).save(d / "blank.png")
    out = tmp_path / "out"
    assert main([str(d), "--out", str(out), "--group", "e2", "--iterations", "1", *FAST]) == 0
    with open(out / "assignments.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0].keys())[-1] == "mirrored"
    by_name = {r["path"].split("/")[-1]: r for r in rows}
    sevens = {by_name[f"{k}.png"]["cluster"] for k in range(3)}
    keys = {by_name[f"{k}.png"]["cluster"] for k in range(3, 6)}
    assert len(sevens) == 1
    assert len(keys) == 1
    assert sevens != keys
    flags = [int(by_name[f"{k}.png"]["mirrored"]) for k in range(6)]
    assert flags[1] != flags[0]
    assert flags[1] != flags[2]
    assert flags[4] != flags[3]
    assert flags[4] != flags[5]
    summary = json.loads((out / "summary.json").read_text())
    assert [p.split("/")[-1] for p in summary["blank"]] == ["blank.png"]
    assert by_name["blank.png"]["cluster"] not in sevens | keys
    assert "blank image" in capsys.readouterr().err


def test_frame_scale_option_is_recorded(tmp_path):
    out = tmp_path / "o"
    assert main(["demo:shapes", "--out", str(out), "--scale", "frame", "--iterations", "1", *FAST]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["parameters"]["scale"] == "frame"
    assert s["metrics"]["ari"] == 1.0


def test_an_image_that_fits_its_cluster_much_worse_than_the_rest_is_named(tmp_path, capsys):
    bases, _names = base_shapes()
    tau = se2.random_transforms(12, rotation_range=180, shift_range=3, seed=6)
    imgs = np.clip(warp(np.repeat(bases[:2], 6, axis=0), tau), 0, 1)
    d = tmp_path / "in"
    d.mkdir()
    for k, img in enumerate(imgs):
        Image.fromarray((img * 255).astype(np.uint8)).save(d / f"{k:02d}.png")
    rng = np.random.default_rng(1)  # a stray: a frame of noise, which must still go in one of the 2 clusters
    Image.fromarray(rng.integers(0, 256, imgs.shape[1:]).astype(np.uint8)).save(d / "stray.png")
    out = tmp_path / "out"
    assert main([str(d), "--out", str(out), "--clusters", "2", "--iterations", "1", "--angle-step", "15", *FAST]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [p.split("/")[-1] for p in summary["poor_fits"]] == ["stray.png"]
    assert "fits its cluster much worse than the rest of it (junk, or a stray?): stray.png" in capsys.readouterr().err
