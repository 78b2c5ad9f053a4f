"""assignment_rows (the one builder of assignments.csv rows) and the file mode of everything exported."""
import os
import stat

import numpy as np
import pytest

from iastudio.core.clusterbook import UNASSIGNED, ClusterBook
from iastudio.core.preprocess import Canvas
from iastudio.core.report import (
    assignment_rows,
    save_convergence_png,
    save_means_png,
    save_weights_png,
    write_assignments,
    write_json,
)

# a 10-px canvas, every image scaled by 2 with its pixel (0, 0) at canvas (1, 1)
CANVAS = Canvas(np.zeros((0, 10, 10), np.float32), np.array([2.0, 2.0, 2.0]), np.ones((3, 2)), [])
TRANSFORMS = np.array([[np.pi / 2, 4.0, -2.0], [-np.pi, 1.0, 3.0], [0.1, 0.0, 0.0]])
SCORES = np.array([0.91234, 0.5, 0.25])


def test_rows_of_a_run_known_answer():
    rows = assignment_rows(["a.png", "b.png", "c.png"], np.array([0, 1, 1]), true_labels=["x", None, ""],
                           transforms=TRANSFORMS, scores=SCORES, canvas=CANVAS)
    assert rows[0] == {"path": "a.png", "cluster": 1, "theta_deg": "90.000", "tx_px": "2.000", "ty_px": "-1.000",
                       "score": "0.9123", "label": "x"}
    assert rows[1]["theta_deg"] in ("180.000", "-180.000")
    assert rows[1]["tx_px"] == "0.500"
    assert rows[1]["label"] == ""
    assert rows[2]["label"] == ""
    assert "cluster_name" not in rows[0]
    assert "mirrored" not in rows[0]


def test_rows_of_edited_clusters_drop_stale_alignments():
    book = ClusterBook.from_labels([0, 1, 1]).rename(1, "horses").move([1], 0).move([2], UNASSIGNED)
    rows = assignment_rows(["a", "b", "c"], book.labels, names=book.name_of, run_labels=np.array([0, 1, 1]),
                           transforms=TRANSFORMS, scores=SCORES, canvas=CANVAS, mirrored=np.array([1, 0, 1]))
    assert rows[0]["theta_deg"] == "90.000"
    assert rows[0]["score"] == "0.9123"
    assert rows[1]["cluster"] == 1
    assert rows[1]["theta_deg"] == rows[1]["score"] == ""
    assert rows[2]["cluster"] == ""
    assert rows[2]["cluster_name"] == "Unassigned"
    assert rows[2]["tx_px"] == ""
    assert rows[0]["cluster_name"] == "Cluster 1"
    assert [r["mirrored"] for r in rows] == [1, 0, 1]
    # without a canvas (no geometry saved) nothing can be said in original pixels
    bare = assignment_rows(["a", "b", "c"], book.labels, run_labels=np.array([0, 1, 1]), transforms=TRANSFORMS,
                           scores=SCORES)
    assert all(r["theta_deg"] == r["score"] == "" for r in bare)


def test_rows_without_a_pose_are_blank_not_nan():
    """NaN marks an image with no pose (poses_onto_clusters): its cells are empty, never "nan"."""
    t = TRANSFORMS.copy()
    t[1] = np.nan
    sc = SCORES.copy()
    sc[2] = np.nan
    rows = assignment_rows(["a", "b", "c"], [0, 1, 1], transforms=t, scores=sc, canvas=CANVAS)
    assert rows[0]["theta_deg"] == "90.000"
    assert rows[0]["score"] == "0.9123"
    assert rows[1]["theta_deg"] == rows[1]["tx_px"] == rows[1]["ty_px"] == rows[1]["score"] == ""
    assert rows[2]["theta_deg"] == "5.730"
    assert rows[2]["score"] == ""


def test_poses_onto_clusters_keep_the_runs_and_align_changed_clusters():
    from iastudio.core.cluster_means import poses_onto_clusters
    from iastudio.core.warp import warp

    rng = np.random.default_rng(0)
    r, c = np.mgrid[:24, :24] - 11.5
    shape = (np.exp(-((r + 4) ** 2 + c ** 2) / 6) + 0.5 * np.exp(-(r ** 2 + (c - 5) ** 2) / 6)).astype(np.float32)
    turns = np.c_[rng.uniform(-np.pi, np.pi, 6), np.zeros((6, 2))]
    images = warp(shape[None], turns, index=np.zeros(6, dtype=int))
    run_t = np.arange(18, dtype=float).reshape(6, 3)
    t, sc, changed = poses_onto_clusters(images, [0, 0, 0, 1, 1, -1], run_labels=[0, 0, 0, 1, 1, 1],
                                         transforms=run_t, scores=np.full(6, 0.5), angle_step=5.0)
    assert list(changed) == [1]
    assert list(changed[1]) == [3, 4]
    np.testing.assert_allclose(t[:3], run_t[:3])  # cluster 0 is the run's: its poses
    np.testing.assert_allclose(sc[:3], 0.5)
    assert np.isnan(t[5]).all()
    assert np.isnan(sc[5])
    assert sc[3] > 0.95
    assert sc[4] > 0.95
    diff = (turns[4, 0] - turns[3, 0]) - (t[3, 0] - t[4, 0])
    assert abs(np.angle(np.exp(1j * diff))) < np.deg2rad(6)


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield 0o640
    os.umask(old)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_written_files_get_the_umask_mode(tmp_path, umask_027):
    from iastudio.core.project import save_project
    from tests._malicious import good_project

    write_assignments(tmp_path / "a.csv", assignment_rows(["a"], [0]))
    write_json(tmp_path / "s.json", {"k": 1})
    save_means_png(tmp_path / "means.png", np.random.default_rng(0).random((2, 8, 8)))
    save_weights_png(tmp_path / "w.png", np.eye(4), np.array([0, 0, 1, 1]))
    save_convergence_png(tmp_path / "c.png", [np.ones((4, 4)) - np.eye(4)] * 2, np.array([0, 0, 1, 1]))
    save_project(tmp_path / "p.iaproj", good_project())
    modes = {p.name: _mode(p) for p in tmp_path.iterdir()}
    assert set(modes) == {"a.csv", "s.json", "means.png", "w.png", "c.png", "p.iaproj"}  # no temporaries left
    assert set(modes.values()) == {umask_027}, modes
    assert (tmp_path / "means.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_app_exports_get_the_umask_mode(tmp_path, umask_027):
    from types import SimpleNamespace

    from iastudio.app import export

    export._png(tmp_path / "one.png", np.random.default_rng(0).random((8, 8)))
    frames = [SimpleNamespace(snapshot=SimpleNamespace(weights=np.eye(4), means=np.random.default_rng(k).random(
        (4, 8, 8))), order=np.arange(4)) for k in range(2)]
    export.export_gif(SimpleNamespace(frames=frames), tmp_path / "run.gif")
    assert _mode(tmp_path / "one.png") == _mode(tmp_path / "run.gif") == umask_027
    assert sorted(os.listdir(tmp_path)) == ["one.png", "run.gif"]
    import imageio.v3 as iio

    assert iio.imread(tmp_path / "run.gif").shape[0] == 2  # both frames
    assert iio.imread(tmp_path / "one.png").dtype == np.uint8


def test_the_cluster_column_counts_from_1_as_the_names_do():
    book = ClusterBook.from_labels([2, 0, 1, 0])
    rows = assignment_rows(["a", "b", "c", "d"], book.labels, names=book.name_of)
    assert [r["cluster"] for r in rows] == [3, 1, 2, 1]
    assert all(r["cluster_name"] == f"Cluster {r['cluster']}" for r in rows)  # one numbering
