"""Opening untrusted projects in the app is transactional (pytest-qt, offscreen): D2, D4, D7, D8."""
import io
import json
import os
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from _malicious import bomb_project, good_project, npy, read_members, sparse_project, write_project  # noqa: E402

from iastudio.app.main_window import MainWindow  # noqa: E402
from iastudio.core.project import load_project, save_project  # noqa: E402


@pytest.fixture(scope="module")
def win(qapp, home, tmp_path_factory):
    """A window holding the user's own saved project, then edited (unsaved: '*')."""
    w = MainWindow(recover=False) if "recover" in MainWindow.__init__.__code__.co_varnames else MainWindow()
    w.show()
    folder = tmp_path_factory.mktemp("mine")
    save_project(folder / "mine.iaproj", good_project(n=8, side=12, frames=2, seed=5))
    assert w.projects.open_project(str(folder / "mine.iaproj"))
    w.rename_cluster(0, "my edit")
    assert w.model.session.dirty
    yield w
    w.close()


def _state(w):
    m = w.model
    s = m.session
    return {"title": w.windowTitle(), "path": s.project_path, "dirty": s.dirty, "n": s.n,
            "paths": list(s.data.paths), "book": s.book, "edits": list(s.edits), "working": s.working.copy(),
            "frames": [id(f) for f in s.frames], "final": id(s.final), "transforms": s.transforms.copy(),
            "thumbs": w.images_panel.thumbs.rowCount(), "clusters": w.clusters_panel.list.count()}


def _same(a, b):
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert np.array_equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


def _refused(w, path, qapp, expect=None):
    before = _state(w)
    t = time.perf_counter()
    assert w.projects.open_project(str(path)) is False
    assert time.perf_counter() - t < 5
    qapp.processEvents()
    box = w.last_dialog
    assert box.isVisible()
    assert box.windowTitle() == "Cannot open the project"
    if expect:
        assert expect in box.text(), box.text()
    box.close()
    _same(before, _state(w))


def _malicious(tmp):
    """A handful of projects that must be refused, each a different way."""
    save_project(tmp / "ok.iaproj", good_project(n=4, side=8))
    manifest, members = read_members(tmp / "ok.iaproj")
    out = {}
    m = dict(members)
    m["arrays/result/run_labels.npy"] = npy(np.array([0, 0, 1, 10**9]))  # D4: crashed the app at 3.5 GB
    out["label 1e9"] = (write_project(tmp / "labels.iaproj", manifest, m), "out of range")
    m = dict(members)
    m["arrays/base.npy"] = npy(np.zeros((3, 8, 8), np.float32))  # 3 images for 4 paths
    out["short base"] = (write_project(tmp / "short.iaproj", manifest, m), "does not match")
    m2 = json.loads(json.dumps(manifest))
    m2["history"][0]["iteration"] = "x"
    out["bad frame"] = (write_project(tmp / "frame.iaproj", m2, members), "frame")
    m3 = json.loads(json.dumps(manifest))
    m3["paths"] = 5
    out["paths int"] = (write_project(tmp / "paths.iaproj", m3, members), "paths")
    out["deep"] = (write_project(tmp / "deep.iaproj", None, members, raw_manifest=b"[" * 100000), "")
    out["bomb"] = (bomb_project(tmp / "bomb.iaproj", zeros=2**20, n=4, side=512, declared=4096 + 2**20),
                   "")
    os.mkfifo(tmp / "fifo.iaproj")  # D7: used to hang Open and Recent
    out["fifo"] = (tmp / "fifo.iaproj", "FIFO")
    (tmp / "text.iaproj").write_text("hello")
    out["text"] = (tmp / "text.iaproj", "truncated or corrupted")
    save_project(tmp / "sparse.iaproj", sparse_project(n=4))  # a sparse W (a pruned run above 2,000 images)
    manifest, members = read_members(tmp / "sparse.iaproj")
    m = dict(members)
    indices = np.load(io.BytesIO(m["arrays/result/weights.indices.npy"]))
    m["arrays/result/weights.indices.npy"] = npy(np.full_like(indices, 10**6))  # columns beyond the 4 images
    out["sparse column 1e6"] = (write_project(tmp / "sparse-bad.iaproj", manifest, m), "column index out of range")
    m = dict(members)
    m["arrays/result/weights.indptr.npy"] = npy(np.array([0, 5, 2, 3, 8]))
    out["sparse pointers"] = (write_project(tmp / "sparse-ptr.iaproj", manifest, m), "row pointers")
    return out


def test_malicious_projects_never_change_the_session(win, qapp, tmp_path):
    for path, expect in _malicious(tmp_path).values():
        _refused(win, path, qapp, expect)
    # Save still writes the user's own session to the user's own file (D2)
    mine = win.model.session.project_path
    assert win.projects.save()
    p = load_project(mine)
    assert p.clusters.name_of(0) == "my edit"
    assert p.n == 8
    assert p.paths[0] == "demo:shapes/000"


def test_failure_while_rebuilding_the_run_is_a_dialog_not_a_half_load(win, qapp, tmp_path, monkeypatch):
    path = save_project(tmp_path / "other.iaproj", good_project(n=6, side=10, frames=3, seed=9))
    import iastudio.core.frames

    def broken(*a, **k):
        raise np.linalg.LinAlgError("Eigenvalues did not converge")

    monkeypatch.setattr(iastudio.core.frames, "classical_mds", broken)
    _refused(win, path, qapp, "Eigenvalues did not converge")
    monkeypatch.undo()
    before = win.model.session.project_path
    assert win.projects.open_project(str(path))  # the same file opens once nothing is broken
    s = win.model.session
    assert s.n == 6
    assert s.project_path == str(path) != before
    assert not s.dirty
    assert win.windowTitle().endswith("other.iaproj")


def test_unreadable_originals_without_embedded_copies_are_refused(win, qapp, tmp_path):
    src = tmp_path / "imgs"
    src.mkdir()
    paths = []
    for k in range(12):
        img = np.zeros((16, 16), np.uint8)
        img[4:12, 2 + k % 3:10] = 255
        Image.fromarray(img).save(src / f"{k:02d}.png")
        paths.append(str(src / f"{k:02d}.png"))
    p = good_project(n=12, side=8, frames=0)
    p.paths, p.history, p.result, p.base = paths, [], {}, None
    path = save_project(tmp_path / "refs.iaproj", p, embed=False)
    (src / "03.png").write_text("damaged")
    (src / "07.png").write_bytes(b"")
    _refused(win, path, qapp, "2 of the 12 original images cannot be read")


def test_a_loaded_but_odd_project_opens_and_draws(win, qapp, tmp_path):
    """Projects the loader accepts (valid edge cases) open in the app and every view draws them."""
    p = good_project(n=5, side=9, frames=2)
    p.result.pop("cluster_means")  # an incomplete result: the run's history shows, no final read-out
    p.labels = [None, "é", "\udcff", "", "x\ny"]
    path = save_project(tmp_path / "odd.iaproj", p)
    assert win.projects.open_project(str(path))
    win.redraw()
    qapp.processEvents()
    assert win.model.session.n == 5
    assert win.model.session.final is None
    assert len(win.model.session.frames) == 2
    assert win.images_panel.thumbs.rowCount() == 5


def test_non_utf8_names_save_and_reopen_in_the_app(win, qapp, tmp_path):
    p = good_project(n=4, side=8)
    p.paths[1] = "/photos/caf\udce9\r.png"  # the bytes b"caf\xe9\r.png": legal on Linux, not UTF-8
    path = save_project(tmp_path / "names.iaproj", p)
    assert win.projects.open_project(str(path))
    win.rename_cluster(0, "renamed")
    assert win.projects.save_to(str(tmp_path / "again.iaproj"))  # used to fail silently (surrogates not allowed)
    q = load_project(tmp_path / "again.iaproj")
    assert os.fsencode(q.paths[1]) == b"/photos/caf\xe9\r.png"
    assert q.clusters.name_of(0) == "renamed"
    win.projects.autosave(wait=True)
    assert load_project(win.projects.autosave_path()).paths == q.paths


def test_start_removes_temporaries_of_killed_saves(qapp, home, tmp_path):
    import subprocess

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    w = MainWindow()
    folder = w.projects.autosave_path().parent
    folder.mkdir(parents=True, exist_ok=True)
    w.close()
    stale = [folder / f".autosave.iaproj.{dead.pid}.{k:08x}.tmp" for k in range(3)]
    for f in stale:
        f.write_bytes(b"half a project")
    keep = folder / f".autosave.iaproj.{os.getpid()}.0000000a.tmp"  # this process: a save in progress
    keep.write_bytes(b"x")
    w2 = MainWindow()
    try:
        assert not any(f.exists() for f in stale)
        assert keep.exists()
    finally:
        w2.close()
        keep.unlink()


@pytest.mark.parametrize("every", [pytest.param(1, marks=pytest.mark.slow, id="whole-corpus"),
                                   pytest.param(13, id="every-13th")])
def test_every_fuzzed_project_either_opens_and_draws_or_is_refused_visibly(qapp, home, tmp_path, every):
    """The fuzz corpus of manifest mutations, through the window (D8): no silent failure, no crash.

    The fast gate opens every 13th of the 380 cases (13 and the 10 values per field are coprime: each
    field it reaches gets another value); the slow run opens them all.
    """
    from test_fuzz_project import NASTY, _paths, _set

    w = MainWindow()
    w.show()
    try:
        save_project(tmp_path / "base.iaproj", good_project(n=4, side=8))
        manifest, members = read_members(tmp_path / "base.iaproj")
        cases = [(field, value) for field in list(_paths(manifest)) for value in NASTY[::2]]
        opened = refused = 0
        for field, value in cases[::every]:
            m = json.loads(json.dumps(manifest))
            _set(m, field, value)
            path = write_project(tmp_path / "f.iaproj", m, members)
            before = _state(w)
            if w.projects.open_project(str(path)):
                opened += 1
                w.redraw()
                assert w.model.session.project_path == str(path)
                assert w.model.session.n == 4
            else:
                refused += 1
                qapp.processEvents()
                assert w.last_dialog.isVisible()
                assert w.last_dialog.text()
                w.last_dialog.close()
                _same(before, _state(w))
        assert opened > 20 // every
        assert refused > 100 // every
    finally:
        w.close()
