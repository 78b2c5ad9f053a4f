"""The Qt-free session: state changes, undo/redo, frozen inputs, projects (no Qt imported here)."""
import copy
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose

from iastudio.core.attention import RunState
from iastudio.core.session import EditHistory, Session

RUN = dict(iterations=1, mean_steps=2, clusters=3)


@pytest.fixture(scope="module")
def finished_project(tmp_path_factory):
    """A finished run on the shapes demo, saved once for the tests that reopen it."""
    s = Session(size=24)
    s.load_demo("shapes")
    res = s.run_here(**RUN)
    path = tmp_path_factory.mktemp("session") / "shapes.iaproj"
    s.save_project(path)
    return s, res, path


def _events(session):
    seen = []
    for name in ("images", "transforms", "clusters", "history", "state", "message", "frame", "finished"):
        getattr(session.events, name).connect(lambda *a, _n=name: seen.append((_n, a)))
    return seen


def test_a_session_works_without_qt():
    code = ("import sys\n"
            "from iastudio.core.session import Session\n"
            "s = Session(size=16)\n"
            "s.load_demo('shapes')\n"
            "res = s.run_here(iterations=1, mean_steps=1, clusters=3)\n"
            "gui = ('PySide6', 'superqt', 'pyqtgraph')\n"
            "print(res.n_clusters, [m for m in sys.modules if m.split('.')[0] in gui or m.startswith('iastudio.app')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["3", "[]"]


def test_loading_a_demo_sets_the_images_and_says_so():
    s = Session(size=24)
    seen = _events(s)
    assert s.load_demo("shapes")
    assert s.n == 18
    assert s.working.shape == (18, 24, 24)
    names = [n for n, _ in seen]
    assert "images" in names
    assert "transforms" in names
    assert any(n == "message" and "shapes" in a[0] for n, a in seen)


def test_a_finished_run_gives_clusters_frames_and_a_result(finished_project):
    s, res, _ = finished_project
    assert s.state == RunState.FINISHED
    assert res is not None
    assert s.book is not None
    assert_allclose(s.book.labels, res.labels)
    assert len(s.frames) >= 2
    assert s.final is s.frames[-1]


def test_edit_history_undo_and_redo():
    h = EditHistory()
    assert not h.can_undo
    assert h.undo() is None
    from iastudio.core.clusterbook import ClusterBook
    from iastudio.core.session import Edit

    a, b, c = (ClusterBook.from_labels(x) for x in ([0, 0, 1], [0, 1, 1], [0, 0, 0]))
    h.push(Edit("one", a, b))
    h.push(Edit("two", b, c))
    assert h.undo_text == "two"
    assert h.undo().before == b
    assert h.redo_text == "two"
    assert h.can_redo
    h.push(Edit("three", b, a))  # a new edit drops what could be redone
    assert not h.can_redo
    assert h.undo_text == "three"


def test_cluster_edits_are_undoable_and_named(finished_project):
    _s, _res, path = finished_project
    s2 = Session()
    s2.open_project(path)
    before = s2.book
    first = int(s2.book.members(0)[0])
    assert s2.move_images([first], 1)
    assert s2.book.labels[first] == 1
    assert s2.edits == [f"Move 1 image to {before.name_of(1)}"]
    assert s2.dirty
    assert s2.undo()
    assert s2.book == before
    assert s2.edits == []
    assert s2.redo()
    assert s2.book.labels[first] == 1


def test_inputs_are_frozen_while_a_run_works_and_a_changed_input_discards_the_run():
    s = Session(size=24)
    s.load_demo("shapes")
    run = s.start(backend="numpy", **RUN)
    assert run is not None
    assert s.state == RunState.RUNNING
    messages = []
    s.events.message.connect(messages.append)
    assert not s.set_size(32)
    assert s.size == 24
    assert not s.apply_random_transforms(rotation_deg=90, shift_percent=5, seed=1)
    assert "Stop the run" in messages[-1]
    s.stop()
    s.on_stopped()
    assert s.can_resume()
    assert "stopped run" in s.work_at_risk()
    assert s.apply_random_transforms(rotation_deg=90, shift_percent=5, seed=1)  # M2: the old run must go
    assert s.run is None
    assert not s.can_resume()
    assert s.resume() is None
    assert s.state == RunState.IDLE
    assert s.work_at_risk() == ""


def test_work_at_risk_names_the_result_and_the_edits(finished_project):
    _, _, path = finished_project
    s = Session()
    s.open_project(path)
    assert s.work_at_risk() == "the result of the last run"
    s.merge_clusters([0, 1])
    assert s.work_at_risk() == "the result of the last run and 1 cluster edit"


def test_project_round_trip_restores_the_run(finished_project):
    s, res, path = finished_project
    s2 = Session()
    proj = s2.open_project(path)
    assert proj.n == s.n
    assert s2.project_path == str(path)
    assert not s2.dirty
    assert len(s2.frames) == len(s.frames)
    assert_allclose(s2.result.labels, res.labels)
    assert_allclose(s2.final.snapshot.weights, s.final.snapshot.weights, atol=1e-6)
    assert s2.elapsed == pytest.approx(s.elapsed)
    assert s2.state == RunState.FINISHED


def test_a_project_is_a_snapshot_that_later_changes_do_not_touch(finished_project, tmp_path):
    """Another thread writes it while the session goes on: nothing mutable is shared, nothing big copied."""
    from iastudio.core.project import load_project, save_project

    s, _, path = finished_project
    p = s.to_project()
    assert p.clusters == s.book
    assert p.clusters.names is not s.book.names
    assert p.parameters["iterations"] == 1
    assert p.parameters is not vars(s.run.settings)
    assert p.transforms is not s.transforms
    assert p.paths is not s.data.paths
    assert p.edits is not s.edits
    assert p.skipped is not s.data.skipped
    assert p.base is s.base
    assert p.history[-1]["means"] is s.frames[-1].snapshot.means
    s2 = Session()
    s2.open_project(path)
    s2.data.skipped.append({"path": "gone.png", "reason": "cannot be read"})
    s2.rename_cluster(0, "taken")
    p2 = s2.to_project()
    assert p2.skipped[0] is not s2.data.skipped[0]
    s2.rename_cluster(0, "later")
    s2.move_images([0], 1)
    s2.data.skipped.clear()
    save_project(tmp_path / "snap.iaproj", p2)
    back = load_project(tmp_path / "snap.iaproj")
    assert back.clusters.name_of(0) == "taken"
    assert back.edits == ["Rename Cluster 1 to taken"]
    assert back.clusters.labels == p2.clusters.labels != s2.book.labels
    assert len(back.skipped) == 1


def test_a_save_marks_the_session_clean_only_as_of_the_snapshot_it_wrote(finished_project, tmp_path):
    from iastudio.core.project import save_project

    _, _, path = finished_project
    s = Session()
    s.open_project(path)
    assert not s.dirty
    s.rename_cluster(0, "saved")
    revision, p = s.revision, s.to_project()
    s.rename_cluster(0, "edited while it was written")
    target = tmp_path / "mine.iaproj"
    save_project(target, p)  # as a worker thread would
    s.mark_saved(target, revision=revision)
    assert s.project_path == str(target)
    assert s.dirty
    s.save_project(target)
    assert not s.dirty
    s.mark_saved(target, revision=s.revision)
    assert not s.dirty


def test_reread_by_threshold_and_by_k(finished_project):
    _, res, path = finished_project
    s = Session()
    s.open_project(path)
    d = np.asarray(res.final_distances)
    assert s.reread(threshold=float(d.max()) + 1)  # above every distance: one cluster
    assert len(s.book.cluster_ids()) == 1
    assert s.reread(k=3)
    assert len(s.book.cluster_ids()) == 3
    assert s.undo()
    assert len(s.book.cluster_ids()) == 1
    said = []
    s.events.message.connect(said.append)
    for k in (s.n + 1, 0):  # refused, said so; not read as n (or 1) clusters
        assert not s.reread(k=k)
        assert said[-1] == f"Cannot read {s.n} images as {k} clusters."
        assert len(s.book.cluster_ids()) == 1


def test_an_edit_says_how_many_clusters_there_are_now(finished_project):
    """The last message is the clusters now, not the run's "Done: 3 clusters"."""
    _, _, path = finished_project
    s = Session()
    s.open_project(path)
    said = []
    s.events.message.connect(said.append)
    assert s.reread(k=2)
    assert said[-1] == "Re-read clusters with k = 2 (2 clusters now)"
    assert not s.reread(k=2)
    assert said[-1] == "Re-read clusters with k = 2: no change (2 clusters, as before)"
    assert s.merge_clusters(s.book.cluster_ids())
    assert said[-1] == "Merge 2 clusters (1 cluster now)"
    assert s.undo()
    assert said[-1] == "Undid: Merge 2 clusters (2 clusters now)"
    assert s.redo()
    assert said[-1] == "Redid: Merge 2 clusters (1 cluster now)"


def test_split_cluster_into_two(finished_project):
    _, _, path = finished_project
    s = Session()
    s.open_project(path)
    s.merge_clusters([0, 1])
    merged = s.book.cluster_ids()[0]
    n_before = len(s.book.cluster_ids())
    assert s.split_cluster(merged, 2)
    assert len(s.book.cluster_ids()) == n_before + 1
    assert not s.split_cluster(s.book.cluster_ids()[0], 999)


def test_the_selected_clusters_are_the_selected_images_after_edits(finished_project):
    """Selecting clusters selects their images; the clusters said selected are those the images fill
    after a merge, a split, undo and redo (a list highlights them, never a cluster half selected)."""
    _, _, path = finished_project
    s = Session()
    s.open_project(path)
    a, b = s.book.cluster_ids()[:2]
    s.select_clusters([a, b])
    assert s.selection == s.book.members_of([a, b]).tolist()
    assert s.selected_clusters == [a, b]
    assert s.merge_clusters([a, b])
    assert s.selected_clusters == [a]
    assert s.undo()
    assert s.selected_clusters == [a, b]
    assert s.redo()
    assert s.split_cluster(a, 2)
    assert len(s.selected_clusters) == 2
    s.select(s.selection[:1])
    assert s.selected_clusters == []
    s.select_clusters([])
    assert s.selection == []


def test_elapsed_time_counts_every_stretch_of_a_resumed_run(finished_project):
    """"Done in … s" after Stop/Resume counts the time before the stop too."""
    s, _, _ = finished_project
    fresh = Session(size=24)
    fresh.load_demo("shapes")
    assert fresh.start(backend="numpy", **RUN) is not None
    fresh.stop()
    fresh.on_stopped(2.0)
    assert fresh.resume() is not None
    messages = []
    fresh.events.message.connect(messages.append)
    frame = copy.copy(s.final)
    fresh.on_finished(frame, 3.0)
    assert fresh.elapsed == pytest.approx(5.0)
    assert frame.elapsed == pytest.approx(5.0)
    assert messages[-1].endswith("in 5.0 s")


def test_a_bad_dask_address_refuses_to_start_and_says_why():
    s = Session(size=16)
    s.load_demo("shapes")
    messages = []
    s.events.message.connect(messages.append)
    assert s.start(backend="numpy", dask="local:many", **RUN) is None
    assert s.run is None
    assert s.state == RunState.IDLE
    assert "Cannot start" in messages[-1]
    assert "whole number of workers" in messages[-1]


def test_a_malformed_dask_address_is_named_with_or_without_dask(monkeypatch):
    import sys

    from iastudio.core.distributed import DaskUnavailableError, connect

    monkeypatch.setitem(sys.modules, "distributed", None)  # as without the [dask] extra
    with pytest.raises(DaskUnavailableError, match="whole number of workers"):
        connect("local:many")
    with pytest.raises(DaskUnavailableError, match="expected local:N or tcp://host:port"):
        connect("nowhere")
    for good in ("local:2", "tcp://127.0.0.1:8786"):
        with pytest.raises(DaskUnavailableError, match=r"Dask is not installed \(pip install"):
            connect(good)


@pytest.mark.slow
def test_a_run_on_a_local_dask_cluster_equals_the_local_run():
    pytest.importorskip("distributed")
    s = Session(size=16)
    s.load_demo("shapes")
    local = s.run_here(**RUN)
    try:
        on_dask = s.run_here(dask="local:1", **RUN)
        assert s.run.client is not None
        assert len(s._clients) == 1
        np.testing.assert_array_equal(on_dask.labels, local.labels)
        assert_allclose(on_dask.input_distances, local.input_distances, atol=1e-5)
    finally:
        s.close()
    assert s._clients == {}


def _pngs(folder, names):
    """Small PNGs of a bar at different places and sizes (one per name)."""
    from PIL import Image

    folder.mkdir(exist_ok=True)
    for k, name in enumerate(names):
        img = np.zeros((20 + 4 * k, 24), np.uint8)
        img[4 + k:12 + k, 5:18 - k] = 255
        Image.fromarray(img).save(folder / name)
    return [folder / name for name in names]


def test_images_read_apart_from_the_session_are_added_as_if_read_by_it(tmp_path):
    """read_images (what the app's worker runs) touches no session; add_loaded commits, preprocessed per
    file exactly as the whole set at once, and at the session's working size when it differs."""
    from iastudio.core.preprocess import preprocess
    from iastudio.core.session import read_images

    _pngs(tmp_path / "set", ["a.png", "b.png", "c.png"])
    (tmp_path / "set" / "bad.png").write_text("garbage")
    s = Session(size=32)
    seen = []
    loaded = read_images([tmp_path / "set"], size=32,
                         progress=lambda done, total, path: seen.append((done, total, Path(path).name)))
    assert seen == [(0, 4, "a.png"), (1, 4, "b.png"), (2, 4, "bad.png"), (3, 4, "c.png")]
    assert s.n == 0
    assert loaded.size == 32
    assert len(loaded.data) == 3
    skipped = s.add_loaded(loaded)
    assert [(Path(p["path"]).name, p["reason"][:12]) for p in skipped] == [("bad.png", "not an image")]
    assert s.n == 3
    assert np.array_equal(s.base, preprocess(s.data.images, size=32).images)
    extra = _pngs(tmp_path / "more", ["e.png"])
    s.add_paths(extra)  # the set's canvas is kept and the new image's appended
    assert s.n == 4
    assert np.array_equal(s.base, preprocess(s.data.images, size=32).images)
    other = Session(size=24)
    other.add_loaded(loaded)
    assert other.base.shape == (3, 24, 24)
    assert np.array_equal(other.base, preprocess(loaded.data.images, size=24).images)


def test_stopping_read_images_keeps_what_was_read(tmp_path):
    from iastudio.core.session import read_images

    files = _pngs(tmp_path, ["a.png", "b.png", "c.png", "d.png"])
    loaded = read_images(files, size=16, progress=lambda done, total, path: done < 2)
    assert loaded.data.paths == [str(f) for f in files[:2]]
    assert loaded.canvas.images.shape == (2, 16, 16)
    assert loaded.data.skipped == [{"path": str(f), "reason": "not loaded: cancelled"} for f in files[2:]]
    s = Session(size=16)
    said = []
    s.events.message.connect(said.append)
    assert s.add_paths(files, progress=lambda done, total, path: done < 3) == loaded.data.skipped[1:]
    assert s.n == 3
    assert said[-1] == "Added 3 images; skipped 1: d.png (not loaded: cancelled)"


def test_the_events_are_typed_signals_that_carry_the_new_state():
    s = Session(size=16)
    s.load_demo("shapes")
    states, selections, messages = [], [], []
    s.events.state.connect(states.append)
    s.events.selection.connect(selections.append)
    s.events.message.connect(messages.append)
    s.select([3, 1, 3])
    assert selections == [[3, 1]]
    s.run_here(iterations=1, mean_steps=1, clusters=3)
    assert states == ["idle", "running", "finished"]  # start() discards the last run first
    assert messages[-1].startswith("Done: 3 clusters")
    assert "stopped after" not in messages[-1]  # the one iteration asked for was kept


def test_done_says_when_fewer_iterations_than_asked_were_kept():
    """The trial: Iterations 3, the run kept 1, and only the Clusters tab's notes said so."""
    s = Session(size=24)
    s.load_demo("shapes")
    messages = []
    s.events.message.connect(messages.append)
    res = s.run_here(backend="numpy", iterations=3, mean_steps=2)
    assert res.iterations == 1  # iteration 1 left the clusters as they were
    done = r"Done: 3 clusters in \d+\.\d s \(stopped after 1 of 3 iterations\)"
    assert re.fullmatch(done, messages[-1]), messages[-1]
    assert res.notes[-1].startswith("Stopped after iteration 1 of 3: it left the clusters as they were, so more "
                                    "would not change them. Details: iteration 1 left the clusters as they were")
    assert s.events.state.signature.parameters["p0"].annotation is str  # typed: what a connection can check


def test_removing_images_keeps_the_rest_as_they_were(finished_project, tmp_path):
    from iastudio.core.preprocess import preprocess

    _, _, path = finished_project
    s = Session()
    s.open_project(path)
    n, paths = s.n, list(s.data.paths)
    s.set_transform(4, 30.0, 1.0, -2.0)
    kept_transform, base = s.transforms[4].copy(), s.base.copy()
    said = []
    s.events.message.connect(said.append)
    assert not s.remove_images([])
    assert said[-1] == "Select the images to remove first."
    assert s.remove_images([1, 2, 2, 99])  # a repeat and an index past the end count once / not at all
    keep = [i for i in range(n) if i not in (1, 2)]
    assert s.n == n - 2
    assert s.data.paths == [paths[i] for i in keep]
    assert s.final is None
    assert s.book is None
    assert s.project_path == str(path)
    assert s.dirty
    assert_allclose(s.base, base[keep])  # a project's own canvases
    assert_allclose(s.transforms[2], kept_transform)  # image 4 is now at 2, still turned
    assert not s.transforms[[0, 1, 3]].any()
    assert said[-1] == "Removed 2 images from the set (001, 002)"  # a demo's images: no file to speak of
    demo = Session(size=24)
    demo.load_demo("shapes")
    assert demo.remove_images([0])
    assert_allclose(demo.base, preprocess(demo.data.images, size=24).images, atol=1e-6)  # as if read alone
    assert demo.remove_images(range(demo.n))  # all of them: an empty set, not a crash
    assert demo.n == 0
    assert demo.base.shape == (0, 24, 24)
    from PIL import Image

    for i in range(3):
        Image.fromarray(np.eye(12, dtype=np.uint8) * (80 + 60 * i)).save(tmp_path / f"f{i}.png")
    files = Session(size=16)
    files.add_paths([str(tmp_path)])
    files.events.message.connect(said.append)
    assert files.remove_images([1])
    assert said[-1] == "Removed 1 image from the set (f1.png); its file is not touched"
    assert (tmp_path / "f1.png").exists()
