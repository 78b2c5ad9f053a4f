import csv
import json
import zipfile

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from iastudio.core.cli import main
from iastudio.core.clusterbook import UNASSIGNED, ClusterBook, letters
from iastudio.core.project import Project, ProjectError, load_project, save_project


def test_clusterbook_edits():
    b = ClusterBook.from_labels([0, 0, 1, 1, 2])
    assert b.names == {0: "Cluster 1", 1: "Cluster 2", 2: "Cluster 3"}
    b2 = b.move([4], 0)
    assert b2.labels == (0, 0, 1, 1, 0)
    assert 2 not in b2.names
    assert b.labels == (0, 0, 1, 1, 2)  # the original is untouched (undo keeps it)
    b3 = b.rename(1, "sevens")
    assert b3.name_of(1) == "sevens"
    assert b3.labels == b.labels
    b4 = b.merge([1, 2])
    assert b4.labels == (0, 0, 1, 1, 1)
    assert b4.names[1] == "Cluster 2"
    b5 = b.split(0, [0, 1])
    assert b5.labels == (0, 3, 1, 1, 2)
    assert b5.names[3] == "Cluster 1 a"
    b6 = b.move([0], UNASSIGNED)
    assert b6.counts()[UNASSIGNED] == 1
    assert b6.name_of(UNASSIGNED) == "Unassigned"
    b7 = b.new_cluster([2, 4], "mine")
    assert b7.labels == (0, 0, 3, 1, 3)
    assert b7.names[3] == "mine"
    with pytest.raises(ValueError, match="cannot be empty"):
        b.rename(0, "  ")
    with pytest.raises(ValueError, match="at least two clusters"):
        b.merge([0])
    with pytest.raises(KeyError):
        b.move([0], 9)
    assert ClusterBook.from_json(b3.to_json(), 5) == b3
    with pytest.raises(ValueError, match="cluster labels for 4 images"):
        ClusterBook.from_json(b3.to_json(), 4)


def _project(tmp_path, n=4):
    rng = np.random.default_rng(0)
    img = tmp_path / "a.png"
    img.write_bytes(b"x")
    return Project(
        paths=[str(img)] + [f"demo:shapes/{i:03d}" for i in range(1, n)], labels=["x"] * n,
        skipped=[{"path": "bad.png", "reason": "empty file (0 bytes)"}], size=32,
        transforms=rng.normal(size=(n, 3)), base=rng.random((n, 8, 8)).astype(np.float32),
        scale=np.ones(n), offset=np.zeros((n, 2)), parameters={"method": "ia", "beta": "auto"},
        clusters=ClusterBook.from_labels([0, 0, 1, 1]).rename(1, "second"),
        history=[{"iteration": 1, "stage": "similarity", "weights": rng.random((n, n)).astype(np.float32),
                  "means": rng.random((n, 8, 8)).astype(np.float32), "distances": rng.random((n, n)),
                  "labels": np.array([0, 0, 1, 1])}],
        result={"scores": rng.random(n), "image_transforms": rng.normal(size=(n, 3)),
                "run_labels": np.array([0, 0, 1, 1])},
        edits=["Rename cluster"],
    )


def test_clusters_of_a_selection_are_only_whole_clusters():
    b = ClusterBook.from_labels([0, 1, 0, 2, UNASSIGNED, 1])
    assert b.clusters_of([0, 2]) == [0]
    assert b.clusters_of([5, 1, 3]) == [1, 2]
    assert b.clusters_of([4, 0, 2]) == [0, UNASSIGNED]  # Unassigned last, as in the list
    assert b.clusters_of([0]) == []  # part of a cluster: none
    assert b.clusters_of([0, 2, 1]) == []  # one whole, one in part: none
    assert b.clusters_of([]) == []
    assert b.members_of([2, UNASSIGNED]).tolist() == [3, 4]
    assert b.members_of([]).tolist() == []


def test_split_parts_are_named_past_z_as_spreadsheet_columns():
    assert [letters(j) for j in (0, 1, 25, 26, 27, 51, 52, 701, 702)] == \
        ["a", "b", "z", "aa", "ab", "az", "ba", "zz", "aaa"]
    b = ClusterBook.from_labels([0] * 30).split(0, list(range(30)))  # the panel splits into up to 50
    names = sorted(b.names.values())
    assert len(set(names)) == 30
    assert {"Cluster 1", "Cluster 1 z", "Cluster 1 aa", "Cluster 1 ac"} <= set(names)
    assert all(n.replace("Cluster 1", "").strip().isalpha() or n == "Cluster 1" for n in names)


def test_save_open_round_trip_is_identical(tmp_path):
    p = _project(tmp_path)
    path = save_project(tmp_path / "p.iaproj", p)
    q = load_project(path)
    assert q.paths == p.paths
    assert q.labels == p.labels
    assert q.skipped == p.skipped
    assert q.size == 32
    assert np.array_equal(q.transforms, p.transforms)
    assert np.array_equal(q.base, p.base)
    assert q.clusters == p.clusters
    assert q.edits == p.edits
    assert q.parameters == p.parameters
    for key in ("weights", "means", "distances", "labels"):
        assert np.array_equal(q.history[0][key], p.history[0][key])
    for key, arr in p.result.items():
        assert np.array_equal(q.result[key], arr)
        assert q.result[key].dtype == arr.dtype
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        assert "manifest.json" in names
        assert all(x.endswith(".npy") or x == "manifest.json" for x in names)
    no_embed = load_project(save_project(tmp_path / "small.iaproj", p, embed=False))
    assert no_embed.base is None


def test_missing_originals_reported(tmp_path):
    p = _project(tmp_path)
    q = load_project(save_project(tmp_path / "p.iaproj", p))
    assert q.missing_originals() == []
    (tmp_path / "a.png").unlink()
    assert q.missing_originals() == [str(tmp_path / "a.png")]


def test_corrupted_and_truncated_projects_are_refused(tmp_path):
    path = save_project(tmp_path / "p.iaproj", _project(tmp_path))
    data = path.read_bytes()
    (tmp_path / "trunc.iaproj").write_bytes(data[: len(data) // 2])
    with pytest.raises(ProjectError, match="truncated or corrupted"):
        load_project(tmp_path / "trunc.iaproj")
    bad = bytearray(data)
    mid = len(bad) // 3
    bad[mid:mid + 64] = bytes(64)
    (tmp_path / "flip.iaproj").write_bytes(bytes(bad))
    with pytest.raises(ProjectError):
        load_project(tmp_path / "flip.iaproj")
    (tmp_path / "text.iaproj").write_text("hello")
    with pytest.raises(ProjectError, match="truncated or corrupted"):
        load_project(tmp_path / "text.iaproj")
    with zipfile.ZipFile(tmp_path / "other.iaproj", "w") as zf:
        zf.writestr("manifest.json", json.dumps({"format": "something else"}))
    with pytest.raises(ProjectError, match="not an Invariant Attention Studio project"):
        load_project(tmp_path / "other.iaproj")
    with pytest.raises(ProjectError, match="does not exist"):
        load_project(tmp_path / "nope.iaproj")


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    path = save_project(tmp_path / "p.iaproj", _project(tmp_path))
    before = path.read_bytes()
    import iastudio.core.project as cp

    def boom(arr):
        raise OSError("disk full")

    monkeypatch.setattr(cp, "_npy_bytes", boom)
    with pytest.raises(OSError, match="disk full"):
        save_project(path, _project(tmp_path))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []


def test_cli_save_project_then_export_with_edits(tmp_path, monkeypatch):
    monkeypatch.setenv("IA_STUDIO_LOG_DIR", str(tmp_path / "logs"))
    proj = tmp_path / "run.iaproj"
    assert main(["demo:shapes", "--size", "24", "--iterations", "1", "--quiet", "--out", str(tmp_path / "o1"),
                 "--save-project", str(proj)]) == 0
    p = load_project(proj)
    assert p.n == 18
    assert p.clusters is not None
    assert len(p.history) >= 2
    assert p.base is not None
    # edit: rename cluster 0, move image 0 into cluster 1
    p.clusters = p.clusters.rename(0, "horses").move([0], 1)
    p.edits += ["Rename", "Move 1 image"]
    save_project(proj, p)
    out = tmp_path / "o2"
    assert main(["--project", str(proj), "--out", str(out), "--quiet"]) == 0
    with open(out / "assignments.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0])[:7] == ["path", "cluster", "theta_deg", "tx_px", "ty_px", "score", "label"]
    assert rows[0]["cluster"] == "2"
    assert rows[0]["cluster_name"] == "Cluster 2"  # one numbering: cluster 2 is "Cluster 2"
    assert rows[1]["cluster_name"] == "horses"
    # every image has a pose: onto the run's mean (cluster 3, untouched), or onto the invariant mean of the
    # cluster the move changed (clusters 1 and 2), computed from the project's embedded images
    assert all(r[k] != "" for r in rows for k in ("theta_deg", "tx_px", "ty_px", "score"))
    with open(tmp_path / "o1" / "assignments.csv", newline="") as fh:
        run_rows = list(csv.DictReader(fh))
    third = [i for i, r in enumerate(rows) if r["cluster"] == "3"]
    assert third
    assert all(rows[i][k] == run_rows[i][k] for i in third for k in ("theta_deg", "score"))
    moved = [i for i, r in enumerate(rows) if r["cluster"] == "2"]
    assert min(float(rows[i]["score"]) for i in moved) > 0.8
    s = json.loads((out / "summary.json").read_text())
    assert s["posed_onto_edited_means"] == [1, 2]
    assert s["edits"] == ["Rename", "Move 1 image"]
    assert s["n_clusters"] == 3
    assert [(c["cluster"], c["name"]) for c in s["clusters"]] == [(1, "horses"), (2, "Cluster 2"), (3, "Cluster 3")]
    # truncated project: exit 1 with a plain message
    data = proj.read_bytes()
    proj.write_bytes(data[:100])
    assert main(["--project", str(proj), "--out", str(out), "--quiet"]) == 1


def test_sparse_arrays_round_trip_as_their_csr_components(tmp_path):
    """Known answer: a sparse W / distances (a pruned run above 2,000 images) comes back equal and of its type."""
    import scipy.sparse as sp

    p = _project(tmp_path)
    n = p.n
    # row 0 stored unsorted and with (0, 1) twice (1.0 + 2.0: summed to 3.0), as scipy allows
    w = sp.csr_matrix((np.array([0.5, 1.0, 2.0, 0.25, 2.0, 0.125], np.float32), np.array([2, 1, 1, 0, 0, 1]),
                       np.array([0, 3, 4, 6, 6])), shape=(n, n))
    before = (w.data.copy(), w.indices.copy())
    d = sp.csr_array(np.where(np.eye(n, k=1) > 0, 0.75, 0.0))  # the newer array type is kept too
    p.result["weights"], p.result["input_distances"] = w, d
    p.history[0]["distances"] = sp.csr_matrix(d)
    q = load_project(save_project(tmp_path / "sparse.iaproj", p))
    assert type(q.result["weights"]) is sp.csr_matrix
    assert type(q.result["input_distances"]) is sp.csr_array
    assert type(q.history[0]["distances"]) is sp.csr_matrix
    assert isinstance(q.history[0]["weights"], np.ndarray)
    expected = np.zeros((n, n), np.float32)
    expected[0, 1], expected[0, 2], expected[1, 0], expected[2, 0], expected[2, 1] = 3.0, 0.5, 0.25, 2.0, 0.125
    assert_allclose(q.result["weights"].toarray(), expected, rtol=0, atol=0)
    assert q.result["weights"].dtype == np.float32
    assert q.result["weights"].nnz == 5
    assert q.result["weights"].has_sorted_indices
    assert q.result["weights"].indices.dtype == np.int32
    assert_allclose(q.result["input_distances"].toarray(), d.toarray())
    assert_allclose(q.history[0]["distances"].toarray(), d.toarray())
    assert_array_equal(w.data, before[0])  # the caller's array is not changed
    assert_array_equal(w.indices, before[1])
    for key in ("scores", "run_labels"):  # the dense ones are as before
        assert_array_equal(q.result[key], p.result[key])
    with zipfile.ZipFile(tmp_path / "sparse.iaproj") as zf:
        names = set(zf.namelist())
    assert {f"arrays/result/weights.{part}.npy" for part in ("data", "indices", "indptr", "shape")} <= names
    assert all(x.endswith(".npy") or x == "manifest.json" for x in names)  # nothing but plain .npy: never pickled


def test_only_w_and_the_distances_may_be_sparse(tmp_path):
    import scipy.sparse as sp

    p = _project(tmp_path)
    p.result["scores"] = sp.csr_matrix(np.ones((1, p.n)))
    with pytest.raises(ValueError, match="'result/scores' cannot be stored sparse"):
        save_project(tmp_path / "x.iaproj", p)
    assert not (tmp_path / "x.iaproj").exists()
