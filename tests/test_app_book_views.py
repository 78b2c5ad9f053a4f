"""Cluster edits drive every view (W, the map, the means, KA vs IA), not only the cluster list (pytest-qt)."""
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from _qt import wait_until  # noqa: E402
from numpy.testing import assert_allclose  # noqa: E402

from iastudio.app.main_window import MainWindow  # noqa: E402
from iastudio.core.cluster_means import cluster_key, medoid  # noqa: E402
from iastudio.core.clusterbook import ClusterBook  # noqa: E402
from iastudio.core.frames import book_frame, book_order  # noqa: E402
from iastudio.core.report import convergence_curves  # noqa: E402


def _wait(app, pred, timeout=120.0):
    wait_until(app, pred, timeout)


@pytest.fixture(scope="module")
def win(qapp, home):
    w = MainWindow()
    w.show()
    m = w.model
    m.session.load_demo("shapes")
    # the shapes interleaved, as files named by when they were taken often are: the image order is no grouping
    assert m.session.set_images(m.session.data.subset(np.arange(18).reshape(3, 6).T.ravel()))
    w.run_panel.size.setValue(24)
    w.run_panel.iterations.setValue(1)
    w.run_panel.clusters_auto.setChecked(False)
    w.run_panel.clusters.setValue(3)
    w.start_run()
    _wait(qapp, lambda: m.session.state in ("finished", "failed"))
    assert m.session.state == "finished"
    w.redraw()
    yield w
    w.close()


@pytest.fixture
def fresh(win):
    s = win.model.session
    s.book = ClusterBook.from_labels(win.model.session.final.result.labels)
    s.history.clear()
    s.edits = []
    s.events.clusters.emit()
    return win


def _contiguous(positions) -> bool:
    positions = np.sort(np.asarray(positions))
    return positions.size > 0 and positions[-1] - positions[0] == positions.size - 1


def test_book_order_groups_clusters_unassigned_last():
    labels = np.array([2, -1, 0, 2, 0, -1, 5])
    order = book_order(labels)
    assert sorted(order.tolist()) == list(range(labels.size))
    assert labels[order].tolist() == [0, 0, 2, 2, 5, -1, -1]


def test_book_order_keeps_the_old_order_inside_each_cluster():
    """A merged cluster's images stay in the run's order: its old clusters are blocks inside it."""
    within = np.array([0, 3, 5, 1, 4, 2, 6])  # the run's order: clusters {0, 3, 5}, {1, 4}, {2, 6}
    labels = np.array([0, 0, 1, 0, 0, 0, 1])  # the first two merged, the third kept
    assert book_order(labels, within).tolist() == [0, 3, 5, 1, 4, 2, 6]
    labels = np.array([1, -1, 0, 1, 0, 1, 0])  # the third with 4, the first behind them, 1 unassigned
    assert book_order(labels, within).tolist() == [4, 2, 6, 0, 3, 5, 1]
    assert book_order(labels, [0, 1]).tolist() == book_order(labels).tolist()  # not an order of these images


def _blocks(order, labels) -> int:
    """How many runs of equal labels W's rows show, in ``order`` (a clean grouping: one per cluster)."""
    seq = np.asarray(labels)[np.asarray(order)]
    return int(1 + np.count_nonzero(seq[1:] != seq[:-1]))


def test_merged_and_reread_clusters_are_clean_blocks_in_w(fresh, qapp):
    """The trial: after Merge, or Re-read with a smaller k, the merged block of W was a checkerboard (its
    images in image order, the run's clusters interleaved)."""
    w, m = fresh, fresh.model
    run_labels = np.asarray(m.session.final.result.labels)
    k = int(run_labels.max()) + 1
    assert _blocks(np.arange(run_labels.size), run_labels) > 2 * k  # the demo interleaves its shapes

    def check():
        qapp.processEvents()
        order = np.asarray(w.weights_view.order)
        book = np.asarray(m.session.book.labels)
        assert sorted(order.tolist()) == list(range(m.session.n))
        assert _blocks(order, book) == len(m.session.book.cluster_ids())  # each cluster's images contiguous
        assert _blocks(order, run_labels) == k  # and the run's clusters inside them too: no checkerboard
        W = m.session.final.snapshot.weights
        assert_allclose(w.weights_view.image_item.image, W[np.ix_(order, order)])  # what is drawn
        assert_allclose(w.weights_view.groups, book[order])

    assert m.session.merge_clusters([k - 1, 0])
    check()
    assert m.session.undo()
    check()
    assert m.session.redo()
    check()
    assert m.session.undo()
    w.clusters_panel.k.setValue(k - 1)
    w.clusters_panel.k_apply.click()
    assert len(m.session.book.cluster_ids()) == k - 1
    check()
    assert m.session.undo()
    check()
    assert m.session.redo()
    check()


def test_merge_drives_every_view(fresh, qapp):
    w, m = fresh, fresh.model
    run_labels = np.asarray(m.session.final.result.labels)
    k = int(run_labels.max()) + 1
    assert k >= 3
    # the first and the last cluster: in the run's order another cluster lies between them
    assert m.session.merge_clusters([k - 1, 0])
    qapp.processEvents()
    book = np.asarray(m.session.book.labels)
    merged = np.flatnonzero(np.isin(run_labels, [k - 1, 0]))
    assert (book[merged] == k - 1).all()

    # W: the merged cluster's rows are contiguous, and the shown matrix is W in that order
    pos = {int(g): r for r, g in enumerate(w.weights_view.order)}
    assert _contiguous([pos[i] for i in merged])
    W = m.session.final.snapshot.weights
    order = w.weights_view.order
    assert_allclose(w.weights_view.image_item.image, W[np.ix_(order, order)])

    # the map: one brush colour for all merged members, another for the rest
    shown = w.convergence_view.point_colours()
    colours = {shown[i] for i in merged}
    assert len(colours) == 1
    others = np.setdiff1d(np.arange(m.session.n), merged)
    assert colours.isdisjoint({shown[i] for i in others})

    # the means: one per cluster of the book (k - 1)
    w.means_view.per_cluster.setChecked(True)
    assert w.means_view.n_tiles == k - 1
    assert sorted(w.means_view._tile_ids) == m.session.book.cluster_ids()
    # KA vs IA compares the book's clusters too
    assert w.compare_view.n_tiles == k - 1
    w.means_view.per_cluster.setChecked(False)


def _drawn_curves(view) -> dict:
    return {key: np.asarray(item.yData) for key, item in view.curves.items()}  # before the log axis


def test_convergence_curves_follow_merge_split_and_move(fresh, qapp):
    """The curves drawn are read with the edited clusters: merging raises within-cluster max, moving an image
    out (unassigned) takes it out of both curves; undo draws the run's curves again."""
    w, m = fresh, fresh.model
    view, history = w.convergence_view, list(m.session.final.distance_history)
    assert len(history) >= 2
    run = _drawn_curves(view)
    assert_allclose(run["within_max"], convergence_curves(history, m.session.final.result.labels)["within_max"])
    assert "clusters as listed" in view.caption.text()
    assert m.session.merge_clusters([0, 1])
    qapp.processEvents()
    merged = _drawn_curves(view)
    want = convergence_curves(history, m.session.book.labels)
    for key in ("within_max", "between_min", "median"):
        assert_allclose(merged[key], np.maximum(want[key], 1e-6), rtol=1e-9, err_msg=key)
    assert (merged["within_max"] > run["within_max"] * 1.5).all()  # two shapes in one cluster: far apart
    assert_allclose(merged["median"], run["median"])  # the median follows no cluster
    assert m.session.split_cluster(m.session.book.cluster_ids()[0], 2)  # a split: the curves follow again
    qapp.processEvents()
    assert_allclose(_drawn_curves(view)["within_max"],
                    np.maximum(convergence_curves(history, m.session.book.labels)["within_max"], 1e-6))
    labels = np.asarray(m.session.book.labels)
    far = int(np.argmax([np.asarray(history[-1])[i, labels == labels[i]].max() for i in range(m.session.n)]))
    assert m.session.move_images([far], -1)  # unassigned: in neither curve
    qapp.processEvents()
    kept = labels.copy()
    kept[far] = -1
    assert_allclose(_drawn_curves(view)["within_max"],
                    np.maximum(convergence_curves(history, kept)["within_max"], 1e-6))
    for _ in range(3):
        assert m.session.undo()
    qapp.processEvents()
    assert_allclose(_drawn_curves(view)["within_max"], run["within_max"])


def test_rename_shows_in_captions(fresh, qapp):
    w, m = fresh, fresh.model
    assert m.session.rename_cluster(1, "Stars of the show")
    qapp.processEvents()
    assert "Stars of the show" in w.means_view.caption.text()
    assert "Stars of the show" in w.compare_view.caption.text()
    assert m.session.undo()
    qapp.processEvents()
    assert "Stars of the show" not in w.means_view.caption.text()


def test_move_to_unassigned_is_grey_and_last(fresh, qapp):
    w, m = fresh, fresh.model
    assert m.session.move_images([0, 5], -1)
    qapp.processEvents()
    order = w.weights_view.order
    assert set(order[-2:].tolist()) == {0, 5}
    grey = w.convergence_view._grey.color().name()
    shown = w.convergence_view.point_colours()
    assert shown[0] == grey
    assert shown[5] == grey


def test_book_frame_means_kept_for_unchanged_clusters(fresh):
    m = fresh.model
    final = m.session.final
    labels = np.asarray(final.result.labels).copy()
    k = int(labels.max()) + 1
    labels[labels == 1] = 0  # merge 1 into 0
    fr = book_frame(final, labels, {c: f"c{c}" for c in range(k)}, images=m.session.working)
    assert fr.cluster_ids == [c for c in range(k) if c != 1]
    assert fr.cluster_names == [f"c{c}" for c in fr.cluster_ids]
    for row, c in enumerate(fr.cluster_ids):
        members = labels == c
        if c == 0:  # changed by the merge: its medoid's mean until its own is computed (never a smear)
            centre = medoid(np.flatnonzero(members), final.snapshot.distances)
            assert_allclose(fr.cluster_means[row], final.snapshot.means[centre])
        else:
            assert_allclose(fr.cluster_means[row], final.cluster_means[c])
        assert_allclose(fr.plain_means[row], m.session.working[members].mean(axis=0), rtol=1e-5, atol=1e-6)
    own = np.full(final.snapshot.means.shape[1:], 0.5, np.float32)  # computed by cluster_invariant_means
    with_own = book_frame(final, labels, {}, images=m.session.working,
                          means={cluster_key(np.flatnonzero(labels == 0)): own})
    assert_allclose(with_own.cluster_means[0], own)
    assert final.snapshot.labels is not fr.snapshot.labels
    assert_allclose(final.snapshot.labels, final.result.labels)  # the run's frame is untouched


def test_reread_only_on_the_buttons(fresh, qapp):
    w, m = fresh, fresh.model
    cp = w.clusters_panel
    assert m.session.merge_clusters([0, 1])
    merged = m.session.book
    n_edits = len(m.session.history.edits)
    emitted = []
    cp.rereadK.connect(emitted.append)
    cp.rereadThreshold.connect(emitted.append)
    try:
        for v in (cp.k.value() + 1, cp.k.value() + 2):  # wheel notches
            cp.k.setValue(v)
        cp.threshold.setValue(cp.threshold.value() + 0.05)
        cp.k_auto.setChecked(not cp.k_auto.isChecked())
        cp.k_auto.setChecked(False)
        qapp.processEvents()
        assert emitted == []
        assert m.session.book == merged
        assert len(m.session.history.edits) == n_edits
        cp.k.setValue(4)
        cp.k_apply.click()
        assert emitted == [4]
        assert len(m.session.book.cluster_ids()) == 4
        qapp.processEvents()
        assert w.statusBar().currentMessage() == "Re-read clusters with k = 4 (4 clusters now)"
        assert len(m.session.history.edits) == n_edits + 1
        assert m.session.undo()
        assert m.session.book == merged
        cp.threshold.setValue(1.99)
        cp.t_apply.click()
        assert len(m.session.book.cluster_ids()) == 1
        assert len(m.session.history.edits) == n_edits + 1
        assert m.session.undo()
        assert m.session.book == merged
    finally:
        cp.rereadK.disconnect(emitted.append)
        cp.rereadThreshold.disconnect(emitted.append)
    for b in (cp.k_apply, cp.t_apply):
        assert b.toolTip()


def test_a_project_keeps_the_run_panels_choices_by_value_and_opens_the_last_versions(fresh, qapp, tmp_path):
    """The project holds the Run panel's lists by value ("ka", "off"); one the last version wrote, with
    their indices, still opens with those choices."""
    import json
    import zipfile

    from _malicious import read_members, write_project

    w = fresh
    rp = w.run_panel
    was = rp.settings_state()
    try:
        rp.method.setCurrentIndex(rp.method.findData("ka"))  # the run was IA: the panel, as left, is KA
        rp.denoise.setCurrentIndex(rp.denoise.findData("off"))
        path = tmp_path / "values.iaproj"
        assert w.projects.save_to(str(path), wait=True)
    finally:
        rp.restore_settings(was)
        w.sync.remember_view()  # the session's view as the other tests find it
    with zipfile.ZipFile(path) as zf:
        panel = json.loads(zf.read("manifest.json"))["parameters"]["view"]["run_panel"]
    assert (panel["method"], panel["denoise"]) == ("ka", "off")
    manifest, members = read_members(path)
    manifest["parameters"]["view"]["run_panel"].update(method=1, denoise=2)  # as the last version wrote it
    old = write_project(tmp_path / "indices.iaproj", manifest, members)
    for saved in (path, old):
        other = MainWindow()
        try:
            assert other.projects.open_project(str(saved), remember=False, ask=False)
            qapp.processEvents()
            assert other.run_panel.method.currentData() == "ka", saved.name
            assert other.run_panel.denoise.currentData() == "off", saved.name
        finally:
            other.close()


def test_reopened_project_restores_run_panel_and_ka_vs_ia(fresh, qapp, tmp_path):
    w, m = fresh, fresh.model
    qapp.processEvents()
    assert "KA ARI" in w.compare_view.caption.text()
    path = tmp_path / "saved.iaproj"
    m.session.save_project(path)
    other = MainWindow()
    try:
        rp = other.run_panel
        rp.iterations.setValue(7)
        rp.clusters_auto.setChecked(True)
        rp.mirror.setChecked(True)
        rp.angle_step.setValue(12)
        rp.method.setCurrentIndex(rp.method.findData("ka"))
        assert rp.options() != w.run_panel.options()
        assert other.projects.open_project(str(path), remember=False, ask=False)
        qapp.processEvents()
        assert rp.options() == w.run_panel.options()
        assert rp.options()["iterations"] == 1
        assert rp.options()["clusters"] == 3
        assert other.compare_view.caption.text() == w.compare_view.caption.text()
        assert_allclose(other.model.session.final.ka_labels, m.session.final.ka_labels)
        for key in m.session.final.curves:
            assert_allclose(other.model.session.final.curves[key], m.session.final.curves[key], rtol=1e-6)
    finally:
        other.close()
