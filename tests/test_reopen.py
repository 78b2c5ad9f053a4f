"""A reopened project shows what was saved: convergence curves, KA's clusters (core, no Qt)."""
import numpy as np
import pytest
from numpy.testing import assert_allclose

from iastudio.core.attention import Stage
from iastudio.core.frames import FrameBuilder
from iastudio.core.project import load_project, save_project
from iastudio.core.session import Session, stream_run


@pytest.fixture(scope="module")
def finished():
    s = Session(size=24)
    s.load_demo("shapes")
    run = s.start(backend="numpy", iterations=2, clusters=3)
    for item in stream_run(run, FrameBuilder()):
        s.take(item)
    assert s.final is not None
    assert s.final.ka_labels is not None
    return s


def _reopen(tmp_path, session_or_project):
    path = tmp_path / "p.iaproj"
    if isinstance(session_or_project, Session):
        session_or_project.save_project(path)
    else:
        save_project(path, session_or_project)
    t = Session()
    t.open_project(path)
    return t


def _same_curves(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert len(a[key]) == len(b[key]), key
        assert_allclose(np.asarray(b[key], float), np.asarray(a[key], float), rtol=1e-6, equal_nan=True)


def test_the_final_snapshot_is_recorded_once(finished):
    stages = [f.snapshot.stage for f in finished.frames]
    assert stages.count(Stage.DONE) == 1
    assert stages[-1] == Stage.DONE
    assert finished.frames[-1] is finished.final


def test_reopened_curves_equal_the_live_run(finished, tmp_path):
    t = _reopen(tmp_path, finished)
    _same_curves(finished.final.curves, t.final.curves)
    # one point per distance computation kept: the inputs and after each iteration
    assert len(t.final.curves["median"]) == finished.run.result().iterations + 1
    assert_allclose(t.final.order, finished.final.order)


def test_the_run_notes_and_the_k_choice_come_back(finished, tmp_path):
    live = finished.final.result
    assert live.notes
    assert live.k_choice is not None
    t = _reopen(tmp_path, finished)
    back = t.final.result
    assert back.notes == live.notes
    assert back.k_choice.as_dict() == live.k_choice.as_dict()
    assert back.k_choice.describe(back.n_clusters) == live.k_choice.describe(live.n_clusters)
    # saved again from the reopened session (e.g. after renaming a cluster): nothing of the run is lost
    t.save_project(tmp_path / "again.iaproj")
    assert load_project(tmp_path / "again.iaproj").parameters == load_project(tmp_path / "p.iaproj").parameters
    u = Session()
    u.open_project(tmp_path / "again.iaproj")
    assert u.final.result.notes == live.notes
    assert u.final.result.k_choice.as_dict() == live.k_choice.as_dict()


@pytest.mark.parametrize(("key", "value", "why"), [
    ("k_choice", {"k": "three", "scale": 2, "confidence": 1.0, "method": "given", "candidates": []}, "'k_choice'"),
    ("k_choice", {"k": 3, "scale": 2, "confidence": 1.0, "method": "guessed", "candidates": []}, "'k_choice'"),
    ("run_notes", "stopped", "'run_notes'"),
    ("run_notes", [1, 2], "'run_notes'"),
])
def test_a_malformed_run_record_is_refused_by_name(finished, tmp_path, key, value, why):
    from iastudio.core.project import ProjectError

    proj = finished.to_project()
    proj.parameters[key] = value
    path = tmp_path / "bad.iaproj"
    save_project(path, proj)
    with pytest.raises(ProjectError, match=why):
        load_project(path)


def test_a_run_whose_iteration_was_undone_has_one_point_per_distance_kept(finished):
    """The done step's distances replace those of iterations the guard undid (the curves' points)."""
    from dataclasses import replace

    snaps = [f.snapshot for f in finished.frames]
    first = snaps[0]
    assert first.stage == Stage.SIMILARITY
    builder = FrameBuilder()
    for snap in snaps[:-1]:
        builder.frame(snap)
    undone = replace(snaps[-1], iteration=0, distances=first.distances)  # the guard kept the inputs' clusters
    fr = builder.frame(undone)
    assert len(fr.distance_history) == 1
    assert fr.distance_history[0] is first.distances
    assert len(fr.curves["median"]) == 1
    builder = FrameBuilder()
    frames = [builder.frame(snap) for snap in snaps]
    assert len(frames[-1].curves["median"]) == snaps[-1].iteration + 1


def test_older_projects_with_the_last_step_twice_open_with_the_same_curves(finished, tmp_path):
    proj = finished.to_project()
    proj.history = [*proj.history, dict(proj.history[-1])]  # as projects saved before the fix hold it
    t = _reopen(tmp_path, proj)
    _same_curves(finished.final.curves, t.final.curves)


def test_ka_labels_are_saved_and_restored(finished, tmp_path):
    path = tmp_path / "ka.iaproj"
    finished.save_project(path)
    assert_allclose(load_project(path).ka_labels, finished.final.ka_labels)
    t = Session()
    t.open_project(path)
    assert_allclose(t.final.ka_labels, finished.final.ka_labels)


def test_projects_without_ka_labels_still_open(finished, tmp_path):
    proj = finished.to_project()
    proj.ka_labels = None
    t = _reopen(tmp_path, proj)
    assert t.final is not None
    assert t.final.ka_labels is None


def test_ka_labels_of_the_wrong_shape_are_refused(finished, tmp_path):
    from iastudio.core.project import ProjectError

    proj = finished.to_project()
    proj.ka_labels = np.zeros(proj.n + 1, dtype=int)
    path = tmp_path / "bad.iaproj"
    save_project(path, proj)
    with pytest.raises(ProjectError):
        load_project(path)
    proj.ka_labels = np.full(proj.n, proj.n + 5)  # a cluster number out of range
    save_project(path, proj)
    with pytest.raises(ProjectError):
        load_project(path)


# ---------------------------------------------------------------- a pruned run whose W and distances are sparse
@pytest.fixture(scope="module")
def pruned():
    """A real pruned run whose results are SciPy sparse, as above 2,000 images (the view limit lowered to 10)."""
    import iastudio.core.run_output

    s = Session(size=24)
    s.load_demo("shapes")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(iastudio.core.run_output, "_DENSE_VIEW_MAX", 10)  # sparse from 11 images, not 2,001
        run = s.start(backend="numpy", neighbors=6, iterations=2, clusters=3)
        for item in stream_run(run, FrameBuilder()):
            s.take(item)
    assert s.final is not None
    assert s.n == 18
    return s


SPARSE_RESULT = ("weights", "input_distances", "final_distances")


def _same_sparse(a, b):
    import scipy.sparse as sp

    assert sp.issparse(a), (type(a), type(b))
    assert type(b) is type(a), (type(a), type(b))
    assert b.dtype == a.dtype
    assert b.shape == a.shape
    assert b.nnz == a.nnz
    assert_allclose(b.toarray(), a.toarray(), rtol=0, atol=0)


def test_a_sparse_run_saves_and_reopens_with_the_same_sparse_arrays(pruned, tmp_path):
    import json
    import zipfile

    import scipy.sparse as sp

    res = pruned.final.result
    assert all(type(getattr(res, k)) is sp.csr_matrix for k in SPARSE_RESULT)  # what the engine makes
    path = tmp_path / "pruned.iaproj"
    pruned.save_project(path)  # used to raise "cannot be stored in a project yet"
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        names = zf.namelist()
    assert manifest["format_version"] == 2  # older readers refuse it as "made by a newer version"
    assert manifest["sparse"]["result/weights"] == "csr_matrix"
    assert {"arrays/result/weights.data.npy", "arrays/result/weights.indices.npy", "arrays/result/weights.indptr.npy",
            "arrays/result/weights.shape.npy"} <= set(names)
    assert "arrays/result/weights.npy" not in names
    t = Session()
    t.open_project(path)
    back = t.final.result
    for key in SPARSE_RESULT:
        _same_sparse(getattr(res, key), getattr(back, key))
    assert len(t.frames) == len(pruned.frames)
    for live, again in zip(pruned.frames, t.frames):
        for key in ("weights", "distances"):
            _same_sparse(getattr(live.snapshot, key), getattr(again.snapshot, key))
        assert_allclose(again.snapshot.means, live.snapshot.means)
        assert_allclose(again.snapshot.labels, live.snapshot.labels)
    # everything downstream is the live run's: labels, order, curves, the graph map (up to a rotation)
    assert_allclose(back.labels, res.labels)
    assert_allclose(t.final.order, pruned.final.order)
    _same_curves(pruned.final.curves, t.final.curves)
    from scipy.spatial.distance import pdist

    assert_allclose(pdist(t.final.mds), pdist(pruned.final.mds), rtol=1e-6, atol=1e-9)
    assert_allclose(t.final.cluster_means, pruned.final.cluster_means)
    from iastudio.core.report import assignment_rows

    rows = [assignment_rows(s.data.paths, s.book.labels, true_labels=s.data.labels, run_labels=s.final.result.labels,
                            transforms=s.final.result.image_transforms, scores=s.final.result.scores,
                            canvas=s.canvas) for s in (pruned, t)]
    assert rows[0] == rows[1]
    # and a reopened run saves again unchanged (Save after Open)
    again = tmp_path / "again.iaproj"
    t.save_project(again)
    for key in SPARSE_RESULT:
        _same_sparse(res.arrays()[key], load_project(again).result[key])


def test_a_dense_project_stays_format_1_and_a_sparse_one_needs_a_newer_reader(finished, pruned, tmp_path,
                                                                                monkeypatch):
    import json
    import zipfile

    import iastudio.core.project as cp
    from iastudio.core.project import ProjectError

    dense, sparse = tmp_path / "dense.iaproj", tmp_path / "sparse.iaproj"
    finished.save_project(dense)
    pruned.save_project(sparse)
    with zipfile.ZipFile(dense) as zf:
        manifest = json.loads(zf.read("manifest.json"))
    assert manifest["format_version"] == 1
    assert "sparse" not in manifest
    monkeypatch.setattr(cp, "FORMAT_VERSION", 1)  # a reader of before sparse arrays
    assert load_project(dense).n == 18
    with pytest.raises(ProjectError, match=r"sparse\.iaproj: made by a newer version"):
        load_project(sparse)


def test_the_cli_exports_a_saved_sparse_run(pruned, tmp_path):
    from iastudio.core.cli import main

    path = tmp_path / "p.iaproj"
    pruned.save_project(path)
    assert main(["--project", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    assert len((tmp_path / "out" / "assignments.csv").read_text().splitlines()) == 19
