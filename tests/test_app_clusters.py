"""Point-and-click clustering, inspection, export and projects (pytest-qt, offscreen)."""
import csv
import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from _qt import wait_until  # noqa: E402
from numpy.testing import assert_array_equal  # noqa: E402
from PIL import Image  # noqa: E402
from PySide6.QtCore import QMimeData, QPointF, Qt  # noqa: E402
from PySide6.QtGui import QDropEvent, QImage  # noqa: E402
from PySide6.QtWidgets import QApplication, QMessageBox  # noqa: E402
from sklearn.metrics import adjusted_rand_score  # noqa: E402

from iastudio.app.actions import edit_selected_clusters  # noqa: E402
from iastudio.app.help import about_text  # noqa: E402
from iastudio.app.main_window import MainWindow  # noqa: E402
from iastudio.app.panels import MIME_IMAGES, to_qimage  # noqa: E402
from iastudio.app.projects import settings  # noqa: E402
from iastudio.core.clusterbook import UNASSIGNED, ClusterBook  # noqa: E402
from iastudio.core.pose import canonical_pose, intensity_moments  # noqa: E402
from iastudio.core.project import load_project  # noqa: E402


def _wait(app, pred, timeout=60.0):
    wait_until(app, pred, timeout)


@pytest.fixture(scope="module")
def win(qapp, home):
    """One window with a finished IA run on transformed demo shapes."""
    w = MainWindow()
    w.show()
    m = w.model
    m.session.load_demo("shapes")
    w.run_panel.size.setValue(24)
    w.transform_panel.seed.setValue(2)
    w.transform_panel.apply_btn.click()
    w.start_run()
    _wait(qapp, lambda: m.session.state in ("finished", "failed"))
    assert m.session.state == "finished"
    w.redraw()
    yield w
    w.close()


@pytest.fixture
def fresh(win):
    """The window with the run's clusters and an empty undo history."""
    m = win.model
    s = m.session
    s.book = ClusterBook.from_labels(m.session.final.result.labels)
    s.history.clear()
    s.edits = []
    s.events.clusters.emit()
    s.events.history.emit()
    m.session.select([])
    return win


def _drop_on_cluster(w, indices, cluster):
    lst = w.clusters_panel.list
    row = next(r for r in range(lst.count()) if int(lst.item(r).data(Qt.ItemDataRole.UserRole)) == cluster)
    pos = lst.visualItemRect(lst.item(row)).center()
    mime = QMimeData()
    mime.setData(MIME_IMAGES, ",".join(map(str, indices)).encode())
    ev = QDropEvent(QPointF(pos), Qt.DropAction.MoveAction, mime, Qt.MouseButton.LeftButton,
                    Qt.KeyboardModifier.NoModifier)
    lst.dropEvent(ev)


def test_cluster_list_shows_names_counts_and_means(fresh):
    lst = fresh.clusters_panel.list
    texts = [lst.item(r).text() for r in range(lst.count())]
    assert texts[:3] == ["Cluster 1  (6)", "Cluster 2  (6)", "Cluster 3  (6)"]
    assert texts[3].startswith("Unassigned")
    assert not lst.item(0).icon().isNull()


def _pixels(qimage) -> np.ndarray:
    g = qimage.convertToFormat(QImage.Format.Format_Grayscale8)
    return np.frombuffer(g.constBits(), np.uint8).reshape(g.height(), g.bytesPerLine())[:, :g.width()].copy()


def _tilt_and_offset(img) -> tuple[float, float]:
    """Degrees between the long axis and the vertical, and the centre of mass's distance from the centre (px)."""
    _, centroid, cov = intensity_moments(np.asarray(img, float)[None])
    _vals, vecs = np.linalg.eigh(cov[0])
    axis = vecs[:, 1]  # (row, col)
    tilt = float(np.degrees(np.arccos(min(1.0, abs(axis[0])))))
    centre = (np.array(img.shape) - 1) / 2.0
    return tilt, float(np.linalg.norm(centroid[0] - centre))


def test_cluster_icons_are_the_means_drawn_upright_and_centred(fresh):
    """The icons show the cluster means in the means view's canonical pose, not in some medoid's pose."""
    w, m = fresh, fresh.model
    lst = w.clusters_panel.list
    shown = w.sync.with_book(m.session.final)
    raw_tilts = []
    for row, c in enumerate(shown.cluster_ids):
        item = lst.item(row)
        assert int(item.data(Qt.ItemDataRole.UserRole)) == c
        icon = item.icon()
        drawn = _pixels(icon.pixmap(icon.availableSizes()[0]).toImage())
        upright = canonical_pose(shown.cluster_means[row:row + 1])[0]
        assert_array_equal(drawn, _pixels(to_qimage(upright)))  # the upright mean, pixel for pixel
        tilt, offset = _tilt_and_offset(drawn)
        assert tilt < 12, (c, tilt, offset)  # long axis vertical, centred
        assert offset < 1.5, (c, tilt, offset)
        raw_tilts.append(_tilt_and_offset(shown.cluster_means[row])[0])
    assert max(raw_tilts) > 20  # the means as the run left them were turned: the pose did something


def test_every_edit_kind_undoes_and_redoes(fresh, qapp):
    w, m = fresh, fresh.model
    start = m.session.book
    history = m.session.history

    def check(edit, expect):
        before = m.session.book
        edit()
        assert expect(m.session.book), m.session.book
        after = m.session.book
        w.undo_action.trigger()
        assert m.session.book == before
        w.redo_action.trigger()
        assert m.session.book == after

    thumbs_drag = fresh.images_panel.thumbs.mimeData([fresh.images_panel.thumbs.index(0)])
    assert bytes(thumbs_drag.data(MIME_IMAGES)) == b"0"
    check(lambda: _drop_on_cluster(w, [0, 1], 1), lambda b: b.labels[0] == 1 and b.labels[1] == 1)
    check(lambda: w.rename_cluster(1, "sevens"), lambda b: b.names[1] == "sevens")
    check(lambda: w.model.session.merge_clusters([0, 2]), lambda b: set(b.labels) == {0, 1})
    check(lambda: w.model.session.split_cluster(1, 2), lambda b: len(b.cluster_ids()) == 3)
    m.session.select([3, 4])
    check(w.model.session.new_cluster_from_selection,
          lambda b: b.labels[3] == b.labels[4] and b.labels[3] not in start.labels)
    m.session.select([5])
    check(lambda: w.clusters_panel.unassign_btn.click(), lambda b: b.labels[5] == UNASSIGNED)
    w.clusters_panel.k.setValue(2)
    check(w.clusters_panel.k_apply.click, lambda b: len(b.cluster_ids()) == 2)
    w.clusters_panel.threshold.setValue(0.001)
    check(w.clusters_panel.t_apply.click, lambda b: len(b.cluster_ids()) > 3)
    assert len(history.edits) == 8
    assert len(m.session.edits) == 8
    assert w.undo_action.shortcut().toString() == "Ctrl+Z"
    assert "Ctrl+Shift+Z" in [s.toString() for s in w.redo_action.shortcuts()]
    while history.can_undo:
        m.session.undo()
    assert m.session.book == start
    assert m.session.edits == []


def test_rereading_is_instant_and_exact(fresh):
    m = fresh.model
    fresh.clusters_panel.k.setValue(3)
    fresh.clusters_panel.k_apply.click()
    assert adjusted_rand_score(m.session.book.array(), m.session.final.result.labels) == 1.0  # the shapes, read again
    fresh.clusters_panel.threshold.setValue(1.9)  # everything within 1.9: one cluster
    fresh.clusters_panel.t_apply.click()
    assert len(m.session.book.cluster_ids()) == 1


def test_selection_stays_in_sync_across_views(fresh):
    w, m = fresh, fresh.model
    w.clusters_panel.clustersSelected.emit([2])
    members = m.session.book.members(2).tolist()
    assert m.session.selection == members
    thumbs = sorted(i.row() for i in w.images_panel.view.selectionModel().selectedIndexes())
    assert thumbs == members
    assert w.convergence_view.highlighted == members
    order = m.session.final.order
    pos = {int(i): r for r, i in enumerate(order)}
    over = w.weights_view.overlay.image
    tinted = sorted(int(r) for r in np.flatnonzero(over[:, :, 3].min(axis=1) > 0))  # whole rows tinted
    assert tinted == sorted(pos[i] for i in members)
    assert (w.means_view.overlay.image[..., 3] > 0).any()
    # clicking a point on the map selects that image everywhere
    w.convergence_view.pointClicked.emit(7)
    assert m.session.selection == [7]
    assert w.convergence_view.highlighted == [7]
    assert [i.row() for i in w.images_panel.view.selectionModel().selectedIndexes()] == [7]
    w.means_view.tileClicked.emit(3)
    assert m.session.selection == [3]


def _click_cluster(w, cluster, ctrl=False):
    from PySide6.QtTest import QTest

    lst = w.clusters_panel.list
    row = next(r for r in range(lst.count()) if int(lst.item(r).data(Qt.ItemDataRole.UserRole)) == cluster)
    mod = Qt.KeyboardModifier.ControlModifier if ctrl else Qt.KeyboardModifier.NoModifier
    QTest.mouseClick(lst.viewport(), Qt.MouseButton.LeftButton, mod, lst.visualItemRect(lst.item(row)).center())


def _highlighted_and_selected_agree(w) -> list:
    """The clusters the list highlights hold exactly the selected images, as every view draws them."""
    m, lst = w.model, w.clusters_panel.list
    book, sel = m.session.book, sorted(m.session.selection)
    shown = [int(lst.item(r).data(Qt.ItemDataRole.UserRole)) for r in range(lst.count()) if lst.item(r).isSelected()]
    if shown:
        assert sel == np.flatnonzero(np.isin(book.labels, shown)).tolist(), (shown, sel)
    assert shown == book.clusters_of(sel), (shown, sel)  # and all of a cluster's images selected: it is highlighted
    assert sorted(i.row() for i in w.images_panel.view.selectionModel().selectedIndexes()) == sel
    assert sorted(w.convergence_view.highlighted) == sel
    assert sorted(w.weights_view.selection) == sel
    counts = book.counts()
    return sorted((book.name_of(c), counts[c]) for c in shown)


def test_the_highlighted_clusters_are_the_selected_images_after_every_edit(fresh, qapp):
    """The trial: after Ctrl+M on Clusters 2 and 3 the list highlighted "Cluster 2 (40)" with only 20 images
    selected; after redoing a split "Cluster 2 (20)" was highlighted with 40 images ringed."""
    w, m = fresh, fresh.model
    book = m.session.book
    _click_cluster(w, 1)
    _click_cluster(w, 2, ctrl=True)  # two clusters chosen in the list: both their images selected
    assert sorted(m.session.selection) == book.members_of([1, 2]).tolist()
    assert _highlighted_and_selected_agree(w) == [("Cluster 2", 6), ("Cluster 3", 6)]
    edit_selected_clusters(w, "merge")  # Ctrl+M
    assert _highlighted_and_selected_agree(w) == [("Cluster 2", 12)]
    w.undo_action.trigger()
    assert _highlighted_and_selected_agree(w) == [("Cluster 2", 6), ("Cluster 3", 6)]
    w.redo_action.trigger()
    assert _highlighted_and_selected_agree(w) == [("Cluster 2", 12)]
    assert edit_selected_clusters(w, "split")  # the merged cluster split again: its images are both parts
    assert _highlighted_and_selected_agree(w) == [("Cluster 2", 6), ("Cluster 2 a", 6)]
    w.undo_action.trigger()
    assert _highlighted_and_selected_agree(w) == [("Cluster 2", 12)]
    w.redo_action.trigger()
    assert _highlighted_and_selected_agree(w) == [("Cluster 2", 6), ("Cluster 2 a", 6)]
    _click_cluster(w, 1)  # one part alone
    assert _highlighted_and_selected_agree(w) == [("Cluster 2", 6)]
    w.clusters_panel.k.setValue(2)  # re-read: the images stay selected, the list shows whose they are
    w.clusters_panel.k_apply.click()
    assert len(m.session.book.cluster_ids()) == 2
    _highlighted_and_selected_agree(w)
    w.undo_action.trigger()
    assert _highlighted_and_selected_agree(w) == [("Cluster 2", 6)]
    w.convergence_view.pointClicked.emit(int(m.session.selection[0]))  # part of a cluster: none highlighted
    assert _highlighted_and_selected_agree(w) == []
    m.session.select(m.session.book.members(0).tolist())  # all of one, from any view: that cluster
    assert _highlighted_and_selected_agree(w) == [("Cluster 1", 6)]
    w.clusters_panel.list.clearSelection()
    assert m.session.selection == []
    assert _highlighted_and_selected_agree(w) == []


def test_inspect_a_decision(fresh):
    w, m = fresh, fresh.model
    w.weights_view.cellClicked.emit(0, 1)
    info = w.inspect_view.info
    assert (info["i"], info["j"]) == (0, 1)
    assert info["score"] > 0.95  # same shape: the alignment explains the pair
    assert "θ =" in w.inspect_view.caption.text()
    assert w.inspect_view.items["aligned"].image is not None
    cross = m.session.inspect(0, 17)
    assert cross["score"] < info["score"]
    # selecting exactly two thumbnails inspects them too
    sm = w.images_panel.view.selectionModel()
    sm.clearSelection()
    from PySide6.QtCore import QItemSelectionModel

    for r in (2, 5):
        sm.select(w.images_panel.thumbs.index(r), QItemSelectionModel.SelectionFlag.Select)
    assert (w.inspect_view.info["i"], w.inspect_view.info["j"]) == (2, 5)


def test_exports_match_the_state(fresh, tmp_path):
    w, m = fresh, fresh.model
    w.rename_cluster(0, "horses")
    csv_path = w.exports.csv(str(tmp_path / "a.csv"))
    with open(csv_path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["path", "cluster", "theta_deg", "tx_px", "ty_px", "score", "label", "cluster_name"]
    assert [int(r["cluster"]) - 1 for r in rows] == list(m.session.book.labels)  # numbered from 1, as the names are
    assert all(r["cluster_name"] in ("horses", f"Cluster {r['cluster']}") for r in rows)
    assert rows[0]["cluster_name"] == "horses"
    assert float(rows[0]["score"]) > 0.9
    folder = w.exports.folders(True, str(tmp_path / "aligned"))
    assert folder == str(tmp_path / "aligned" / "shapes aligned clusters")  # one new folder, named after the set
    counts = {p.name: len(list(p.iterdir())) for p in Path(folder).iterdir()}
    assert counts == {"horses": 6, "Cluster 2": 6, "Cluster 3": 6}
    img = np.asarray(Image.open(next((Path(folder) / "horses").iterdir())))
    assert img.shape[:2] == m.session.working.shape[1:3]
    assert img.max() > 200
    mine = tmp_path / "orig" / "shapes clusters"  # the user's own folder of that name: never written into
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    folder = w.exports.folders(False, str(tmp_path / "orig"))
    assert folder == str(tmp_path / "orig" / "shapes clusters 2")
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in (tmp_path / "orig").iterdir()) == ["shapes clusters", "shapes clusters 2"]
    assert sum(len(list(p.iterdir())) for p in Path(folder).iterdir()) == 18
    assert w.statusBar().currentMessage() == f"Exported the cluster folders into {folder}"
    panels = Path(w.exports.panels(str(tmp_path / "panels")))
    for name in ("weights", "means", "convergence_curves", "manifold_map", "ka_means", "ia_means"):
        assert Image.open(panels / f"{name}.png").size[0] >= 1800  # 16 cm at 300 dpi
        assert (panels / f"{name}.svg").read_text().lstrip().startswith("<?xml")
        assert (panels / f"{name}.pdf").read_bytes().startswith(b"%PDF")
    gif = w.exports.gif(str(tmp_path / "conv.gif"))
    frames = Image.open(gif)
    assert frames.n_frames == len(m.session.frames) >= 2


def test_the_csv_has_poses_onto_edited_clusters_means(fresh, tmp_path):
    """After a split and a merge every image has a pose and a score: the run's where its cluster is the
    run's own, else onto the edited cluster's invariant mean (the one the means view shows)."""
    from iastudio.core.cluster_means import cluster_invariant_means
    from iastudio.core.preprocess import canvas_to_original
    from iastudio.core.warp import warp

    w, m = fresh, fresh.model
    s = m.session
    res = s.final.result
    assert s.split_cluster(0, 2)
    a, b = sorted(s.book.cluster_ids())[1:3]
    assert s.merge_clusters([a, b])
    labels = np.asarray(s.book.labels)
    csv_path = w.exports.csv(str(tmp_path / "edited.csv"))
    with open(csv_path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert all(r[k] != "" for r in rows for k in ("theta_deg", "tx_px", "ty_px", "score"))
    changed = [c for c in s.book.cluster_ids() if not np.array_equal(labels == c, res.labels == c)]
    assert changed
    for c in s.book.cluster_ids():
        members = np.flatnonzero(labels == c)
        if c not in changed:  # the run's own cluster: the run's poses
            for i in members:
                t = canvas_to_original(res.image_transforms[i], s.canvas, i)
                assert float(rows[i]["theta_deg"]) == pytest.approx(t["theta_deg"], abs=1e-3)
                assert float(rows[i]["score"]) == pytest.approx(res.scores[i], abs=1e-4)
            continue
        (mean,), (poses,) = cluster_invariant_means(s.working, [members], return_poses=True,
                                                    distances=res.input_distances, **s.alignment_options())
        got = np.array([[float(rows[i][k]) for k in ("theta_deg", "tx_px", "ty_px")] for i in members])
        want = np.array([[canvas_to_original(p, s.canvas, i)[k] for k in ("theta_deg", "tx_px", "ty_px")]
                         for i, p in zip(members, poses)])
        np.testing.assert_allclose(got, want, atol=2e-3)
        aligned = warp(s.working[members], poses).reshape(members.size, -1)
        cos = aligned @ mean.ravel() / (np.linalg.norm(aligned, axis=1) * np.linalg.norm(mean))
        np.testing.assert_allclose([float(rows[i]["score"]) for i in members], cos, atol=2e-4)
        assert cos.min() > 0.8  # the poses align the images onto the mean
    n = int(np.isin(labels, changed).sum())
    assert w.statusBar().currentMessage() == (
        f"Exported {csv_path}; the {n} images of {len(changed)} edited clusters are aligned to each cluster's own "
        "mean")


def test_the_export_says_plainly_that_an_edited_clusters_images_are_aligned_to_its_mean(fresh, tmp_path):
    """The trial: "the poses of the 20 images of 1 edited cluster are onto their own invariant means"."""
    w, s = fresh, fresh.model.session
    a, b = sorted(s.book.cluster_ids())[:2]
    n = len(s.book.members(a)) + len(s.book.members(b))
    assert s.merge_clusters([a, b])
    csv_path = w.exports.csv(str(tmp_path / "merged.csv"))
    assert w.statusBar().currentMessage() == (
        f"Exported {csv_path}; the {n} images of 1 edited cluster are aligned to that cluster's own mean")


def test_save_open_round_trip_through_the_app(fresh, tmp_path, qapp):
    w, m = fresh, fresh.model
    w.rename_cluster(1, "sevens")
    w.model.session.move_images([0], 2)
    path = tmp_path / "p.iaproj"
    assert w.projects.save_to(str(path))
    assert not m.session.dirty
    assert w.windowTitle().endswith("p.iaproj")
    book, edits, working = m.session.book, list(m.session.edits), m.session.working.copy()
    hist = [f.snapshot.weights.copy() for f in m.session.frames]
    w2 = MainWindow()
    try:
        assert w2.projects.open_project(str(path))
        m2 = w2.model
        assert m2.session.book == book
        assert m2.session.edits == edits
        assert np.array_equal(m2.session.working, working)
        assert np.array_equal(m2.session.transforms, m.session.transforms)
        assert all(np.array_equal(a, f.snapshot.weights) for a, f in zip(hist, m2.session.frames))
        w2.redraw()
        assert np.array_equal(w2.weights_view.image_item.image, w.weights_view.image_item.image)
        assert w2.clusters_panel.list.item(1).text().startswith("sevens")
        # the run's k read-out and notes come back with it
        evidence = w.clusters_panel.evidence.text()
        assert evidence.startswith("Run: ")
        assert m.session.final.result.notes[0] in evidence
        assert w2.clusters_panel.evidence.text() == evidence
        w2.clusters_panel.grab().save(str(tmp_path / "reopened_clusters_panel.png"))
        assert str(path) in w2.projects.recent("recent/projects")
        p = load_project(path)
        assert p.clusters == book
        assert p.edits == edits
    finally:
        w2.close()


def test_corrupted_project_is_refused_cleanly(fresh, tmp_path):
    bad = tmp_path / "bad.iaproj"
    bad.write_bytes(b"PK\x03\x04 this is not really a zip")
    before = fresh.model.session.n
    assert fresh.projects.open_project(str(bad)) is False
    assert "truncated or corrupted" in fresh.last_dialog.text()
    assert fresh.model.session.n == before


def test_moved_originals_open_from_embedded_images(qapp, home, tmp_path):
    src = tmp_path / "imgs"
    (src / "a").mkdir(parents=True)
    (src / "b").mkdir()
    base = np.zeros((20, 20), np.uint8)
    base[4:9, 3:16] = 255
    for k in range(3):
        Image.fromarray(np.rot90(base, k)).save(src / "a" / f"{k}.png")
        Image.fromarray(base.T).save(src / "b" / f"{k}.png")
    w = MainWindow()
    try:
        w.model.session.add_paths([src])
        path = tmp_path / "moved.iaproj"
        w.model.session.save_project(path)
        (src / "a" / "1.png").unlink()
        w2 = MainWindow()
        try:
            assert w2.projects.open_project(str(path))
            assert w2.model.session.n == 6
            assert "1.png" in w2.last_dialog.detailedText()
            assert "missing" in w2.last_dialog.text()
        finally:
            w2.close()
        path_small = tmp_path / "small.iaproj"
        w.model.session.save_project(path_small, embed=False)
        w3 = MainWindow()
        try:
            assert not w3.projects.open_project(str(path_small))
            assert "1.png" in w3.last_dialog.text()
        finally:
            w3.close()
    finally:
        w.close()


def test_autosave_and_crash_recovery(fresh, home, qapp, monkeypatch):
    w = fresh
    w.projects.autosave(wait=True)
    auto = w.projects.autosave_path()
    assert auto.exists()
    assert load_project(auto).n == 18
    lock = home / "session.lock"
    lock.write_text("4242")  # what a crashed session leaves behind
    offered = []
    from iastudio.app.projects import ProjectController

    monkeypatch.setattr(ProjectController, "offer_recovery", lambda self, real=ProjectController.offer_recovery: (
        offered.append(True), real(self)))
    monkeypatch.setattr(QMessageBox, "exec", lambda self: QMessageBox.StandardButton.Yes)
    w2 = MainWindow(recover=True)
    try:
        _wait(qapp, lambda: w2.model.session.n == 18, 10)
        assert offered
        assert w2.model.session.book is not None
        assert w2.model.session.dirty
    finally:
        w2.close()
    assert not lock.exists()  # a clean close removes it
    w3 = MainWindow(recover=True)  # no crash now: nothing offered
    try:
        qapp.processEvents()
        assert len(offered) == 1
    finally:
        w3.close()


def test_about_help_and_geometry(fresh, qapp, monkeypatch):
    w = fresh
    text = about_text(w.model)
    from iastudio.core.warp import describe_code

    for needle in ("Python", "Qt", "NumPy", "CuPy", "Backend", "GPU", f"CPU image warps: {describe_code()}"):
        assert needle in text
    dlg = w.show_about()
    copy = next(b for b in dlg.findChildren(type(w.clusters_panel.rename_btn)) if b.text() == "Copy to clipboard")
    copy.click()
    assert QApplication.clipboard().text() == text
    dlg.close()
    # with a working GPU the box also says which code warps on it
    import sys

    warp_module = sys.modules["iastudio.core.warp"]  # (the package's attribute `warp` is the function)
    monkeypatch.setattr(warp_module, "_CUDA", None)
    monkeypatch.setattr("iastudio.app.model.gpu_status", lambda: (False, "no CUDA device"))
    assert "GPU image warps" not in about_text(w.model)
    monkeypatch.setattr("iastudio.app.model.gpu_status", lambda: (True, "Test GPU"))
    assert "GPU image warps: CUDA kernel" in about_text(w.model)
    monkeypatch.setenv("IASTUDIO_CUDA_WARP", "off")
    assert "GPU image warps: CuPy array code (IASTUDIO_CUDA_WARP=off)" in about_text(w.model)
    menus = {a.text(): a for a in w.menuBar().actions()}
    assert {"&File", "&Edit", "&Run", "&Help"} <= set(menus)
    saved_at_close = []
    real_close = MainWindow.closeEvent

    def spy_close(self, event):
        saved_at_close.append(bytes(self.saveGeometry()))
        real_close(self, event)

    restored = []
    monkeypatch.setattr(MainWindow, "closeEvent", spy_close)
    monkeypatch.setattr(MainWindow, "restoreGeometry", lambda self, g: restored.append(bytes(g)) or True)
    wg = MainWindow()
    wg.show()
    wg.close()  # saves geometry
    w2 = MainWindow()
    try:
        # the next window restores exactly what the last one saved
        assert restored
        assert restored[-1] == saved_at_close[-1]
    finally:
        w2.close()
    assert settings().value("window/geometry") is not None


def test_split_by_re_running_ia_on_a_cluster(fresh, qapp):
    w, m = fresh, fresh.model
    w.model.session.merge_clusters([0, 1])
    merged = m.session.book
    assert len(merged.cluster_ids()) == 2
    lst = w.clusters_panel.list
    lst.item(0).setSelected(True)
    progress = []
    m.session.events.progress.connect(lambda f, text, eta: progress.append(text))
    w.clusters_panel.rerun_btn.click()
    assert m.session.state == "splitting"
    assert not w.run_panel.start_btn.isEnabled()
    _wait(qapp, lambda: m.session.state != "splitting", 60)
    assert progress
    assert all(t.startswith("re-running Cluster 1") for t in progress)
    assert len(m.session.book.cluster_ids()) == 3
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(m.session.final.result.labels, m.session.book.labels) == 1.0  # the shapes, apart again
    assert m.session.history.undo_text.startswith("Split Cluster 1 by re-running")
    w.undo_action.trigger()
    assert m.session.book == merged


def test_recent_list_survives_a_restart_with_one_entry(fresh):
    w = fresh
    key = "recent/test-folders"
    # after a restart QSettings gives a one-entry list back as a plain str: the next entry must not split it
    settings().setValue(key, "/data/first")
    assert w.projects.recent(key) == ["/data/first"]
    w.projects.remember(key, "/data/second")
    assert w.projects.recent(key) == ["/data/second", "/data/first"]
    w.projects.remember(key, "/data/first")
    assert w.projects.recent(key) == ["/data/first", "/data/second"]
