"""The W and means panels on a pruned run above 2,000 images, whose W and distances are SciPy sparse."""
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from _qt import PointerEvent  # noqa: E402
from numpy.testing import assert_allclose, assert_array_equal  # noqa: E402

from iastudio.app.views import W_TITLE, MeansView, WeightsView  # noqa: E402
from iastudio.core.attention import Snapshot  # noqa: E402
from iastudio.core.display import even_sample  # noqa: E402
from iastudio.core.frames import Frame  # noqa: E402

N, K = 2500, 5


def _sparse_frame(seed=0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(K), N // K)
    rng.shuffle(labels)
    rows, cols = [], []
    for i in range(N):  # 10 neighbours in the own cluster: a K-neighbour graph
        same = np.flatnonzero(labels == labels[i])
        nb = rng.choice(same[same != i], 10, replace=False)
        rows += [i] * 10
        cols += list(nb)
    w = sp.csr_matrix((rng.uniform(0.01, 0.2, len(rows)), (rows, cols)), shape=(N, N), dtype=np.float32)
    d = sp.csr_matrix((rng.uniform(0.1, 1.0, len(rows)), (rows, cols)), shape=(N, N), dtype=np.float32)
    snap = Snapshot(iteration=1, stage="similarity", step=0, n_steps=10, weights=w,
                    means=rng.random((N, 8, 8)).astype(np.float32), distances=d, transforms=None,
                    labels=labels, objective=[], timings={}, progress=0.1)
    return Frame(snapshot=snap, order=np.argsort(labels, kind="stable"), mds=rng.random((N, 2)),
                 curves={"within_max": [1.0], "between_min": [0.5], "median": [0.7]})



def test_sparse_w_is_drawn_as_an_even_sample_of_its_k_neighbour_graph(qtbot):
    view = WeightsView()
    qtbot.addWidget(view)
    frame = _sparse_frame()
    view.set_selection([7])
    view.show_frame(frame)
    shown = view.image_item.image
    order = view.order
    assert shown.shape == (order.size, order.size)
    assert 390 <= order.size <= 402
    assert 7 in order  # the selected image is always in the sample
    labels = frame.snapshot.labels[order]
    assert (np.diff(labels) >= 0).all()  # still grouped by cluster
    assert min(np.bincount(labels)) >= 70  # every cluster has its share (500 images each)
    dense = frame.snapshot.weights.toarray()
    assert_allclose(shown, dense[np.ix_(order, order)])  # the graph's own values, 0 off it
    assert "400 of 2,500" in view.title.text() or f"{order.size:,} of 2,500" in view.title.text()
    # hover and click name real image indices
    r, c = 3, 5
    view._hover(PointerEvent(c + 0.5, r + 0.5))
    i, j = int(order[r]), int(order[c])
    assert f"i = {i}" in view.hover.text()
    assert f"j = {j}" in view.hover.text()
    assert f"{dense[i, j]:.4f}" in view.hover.text()
    with qtbot.waitSignal(view.cellClicked) as blocker:
        view._click(PointerEvent(c + 0.5, r + 0.5))
    assert blocker.args == [i, j]
    # the selection's row and column are tinted at the sampled image's position
    over = view.overlay.image
    p = int(np.flatnonzero(order == 7)[0])
    assert over.shape[:2] == shown.shape
    assert over[p, 0, 3] > 0
    assert over[0, p, 3] > 0
    view.set_selection([int(np.setdiff1d(np.arange(N), order)[0])])  # an image outside the sample: no crash
    assert view.overlay.image[..., 3].max() == 0


def test_a_dense_w_is_still_drawn_whole(qtbot):
    view = WeightsView()
    qtbot.addWidget(view)
    frame = _sparse_frame()
    small = np.arange(60)
    snap = frame.snapshot
    dense = snap.weights[small][:, small].toarray()
    frame.snapshot = Snapshot(**{**vars(snap), "weights": dense, "labels": snap.labels[small],
                                 "distances": snap.distances[small][:, small].toarray(),
                                 "means": snap.means[small]})
    frame.order = np.argsort(snap.labels[small], kind="stable")
    view.show_frame(frame)
    assert_array_equal(view.image_item.image, dense[np.ix_(frame.order, frame.order)])
    assert view.title.text() == f"<b>{W_TITLE}</b>"


def test_per_image_means_of_a_large_run_show_an_even_sample(qtbot):
    view = MeansView()
    qtbot.addWidget(view)
    frame = _sparse_frame()
    view.show_frame(frame)
    assert view.n_tiles <= 1030
    assert len(view._tile_ids) == view.n_tiles
    assert "an even sample of 2,500 images" in view.caption.text()
    view.per_cluster.setChecked(True)  # one per cluster is unchanged
    assert view.n_tiles == K


def test_even_sample_keeps_small_sets_whole_and_covers_every_cluster():
    order = np.arange(10)
    assert_array_equal(even_sample(order, np.zeros(10, int), limit=20), order)
    labels = np.r_[np.zeros(995, int), np.ones(5, int)]
    pick = even_sample(np.arange(1000), labels, limit=100)
    assert 95 <= pick.size <= 102
    assert (labels[pick] == 1).sum() >= 2
    assert_array_equal(pick, np.sort(pick))


def test_the_frame_of_a_sparse_snapshot_maps_its_graph_and_every_view_draws_it(qtbot):
    from iastudio.app.views import ConvergenceView
    from iastudio.core.frames import FrameBuilder

    snap = _sparse_frame().snapshot
    frame = FrameBuilder().frame(snap)  # the map and the curves come from the K-neighbour graph
    assert frame.mds.shape == (N, 2)
    assert np.isfinite(frame.mds).all()
    d = snap.distances.tocoo()
    same = snap.labels[d.row] == snap.labels[d.col]
    assert frame.curves["within_max"] == [float(d.data[same].max())]  # every edge joins its own cluster
    assert np.isnan(frame.curves["between_min"][0])
    assert_allclose(frame.curves["median"], [np.median(d.data)])
    for view in (WeightsView(), MeansView(), ConvergenceView()):
        qtbot.addWidget(view)
        view.show_frame(frame)
    assert len(view.coords) == N


def test_graph_map_separates_the_clusters_of_a_graph():
    from iastudio.core.neighbors import graph_map

    frame = _sparse_frame(seed=1)
    d = frame.snapshot.distances
    labels = frame.snapshot.labels
    # join clusters 0 and 1 by a few long edges: still two groups on the map
    keep = np.isin(labels, [0, 1])
    idx = np.flatnonzero(keep)
    sub = d[idx][:, idx].tolil()
    lab = labels[idx]
    a, b = np.flatnonzero(lab == 0)[:5], np.flatnonzero(lab == 1)[:5]
    sub[a, b] = 2.0
    sub[b, a] = 2.0
    xy = graph_map(sub.tocsr())
    centre0, centre1 = xy[lab == 0].mean(0), xy[lab == 1].mean(0)
    side = (xy - (centre0 + centre1) / 2) @ (centre1 - centre0) > 0  # which half of the map
    assert (side == (lab == 1)).mean() > 0.99
    again = graph_map(sub.tocsr(), previous=xy)  # aligned to the previous map: no jump
    assert_allclose(again, xy - xy.mean(0) + again.mean(0), atol=1e-6 * np.abs(xy).max())


def _sparse_run_project():
    """A project of a finished 2,500-image run whose W and distances are sparse (a pruned run above 2,000)."""
    from iastudio.core.clusterbook import ClusterBook
    from iastudio.core.project import Project

    first, last = _sparse_frame(seed=0).snapshot, _sparse_frame(seed=0).snapshot  # the same clusters
    last.weights = last.weights.multiply(2).tocsr()  # ... and a W of its own
    labels = first.labels
    rng = np.random.default_rng(3)
    history = [{"iteration": 0, "stage": "similarity", "weights": first.weights, "means": first.means,
                "distances": first.distances, "labels": labels},
               {"iteration": 1, "stage": "done", "weights": last.weights, "means": last.means,
                "distances": last.distances, "labels": labels}]
    return Project(paths=[f"demo:x/{i:04d}" for i in range(N)], labels=[str(c) for c in labels], size=8,
                   transforms=np.zeros((N, 3)), base=rng.random((N, 8, 8)).astype(np.float32), scale=np.ones(N),
                   offset=np.zeros((N, 2)), parameters={"method": "ia", "neighbors": 30, "beta_used": 2.0},
                   clusters=ClusterBook.from_labels(labels), history=history,
                   result={"cluster_means": rng.random((K, 8, 8)).astype(np.float32),
                           "image_transforms": np.zeros((N, 3)), "scores": rng.random(N),
                           "weights": last.weights, "input_distances": first.distances,
                           "final_distances": last.distances, "run_labels": labels})


def _w_drawn(window):
    """(title, shown block, order) of the window's W panel after a redraw, checked against the run's own W."""
    window.redraw()
    view = window.weights_view
    w = window.model.session.final.snapshot.weights
    assert sp.issparse(w)
    assert w.shape == (N, N)
    shown, order = view.image_item.image, view.order
    assert shown.shape == (order.size, order.size)
    assert 390 <= order.size <= 402
    assert shown.max() > 0
    assert_allclose(shown, w.toarray()[np.ix_(order, order)])
    return view.title.text(), shown, order


def test_a_sparse_run_saves_and_reopens_in_the_window_and_autosaves(window, tmp_path):
    """Above 2,000 images: Save, autosave and Open keep the sparse run, and the W panel draws it again."""
    from iastudio.core.project import load_project, save_project

    proj = _sparse_run_project()
    save_project(tmp_path / "big.iaproj", proj)
    assert window.projects.open_project(str(tmp_path / "big.iaproj"))
    title, shown, order = _w_drawn(window)
    assert "W of" in title
    assert f"of {N:,} images" in title
    assert_allclose(shown, proj.result["weights"].toarray()[np.ix_(order, order)])  # the run's final W, 0 off it
    window.rename_cluster(0, "renamed")  # unsaved work on the big run
    assert window.model.session.dirty
    assert window.projects.autosave(wait=True)  # used to log "cannot be stored in a project yet"
    auto = load_project(window.projects.autosave_path())
    assert type(auto.result["weights"]) is sp.csr_matrix
    assert auto.clusters.name_of(0) == "renamed"
    saved = tmp_path / "saved.iaproj"
    assert window.projects.save_to(str(saved))  # File > Save: no "Cannot save" dialog
    assert not window.model.session.dirty
    assert window.model.session.project_path == str(saved)
    back = load_project(saved)
    for key in ("weights", "input_distances", "final_distances"):
        assert type(back.result[key]) is sp.csr_matrix
        assert_allclose(back.result[key].toarray(), proj.result[key].toarray())
    assert window.projects.open_project(str(saved))  # reopened in the window: the same drawing
    again_title, again, again_order = _w_drawn(window)
    assert again_title == title
    assert window.model.session.book.name_of(0) == "renamed"
    assert_allclose(again, proj.result["weights"].toarray()[np.ix_(again_order, again_order)])
    assert window.model.session.final.result.weights.nnz == proj.result["weights"].nnz


def _counting(monkeypatch, module, name, log):
    """Replace ``module.name`` by a wrapper that records how many images each call was given."""
    real = getattr(module, name)

    def wrapper(*args, **kwargs):
        log.append(len(args[0]) if hasattr(args[0], "__len__") else 1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)


def test_the_frame_builder_prepares_what_the_views_draw_of_a_large_run():
    from iastudio.core.display import upright_tiles
    from iastudio.core.frames import FrameBuilder

    snap = _sparse_frame().snapshot
    frame = FrameBuilder().frame(snap)
    labels = snap.labels
    assert_array_equal(frame.tile_ids, even_sample(frame.order, labels, limit=1024))
    assert 1000 <= frame.tile_ids.size <= 1030
    assert_array_equal(frame.tiles, upright_tiles(snap.means[frame.tile_ids]))
    assert_array_equal(frame.w_ids, even_sample(frame.order, labels, limit=400))
    assert frame.w_block.dtype == np.float32
    assert_allclose(frame.w_block, snap.weights.toarray()[np.ix_(frame.w_ids, frame.w_ids)])


def test_views_only_draw_a_prepared_large_frame(qtbot, monkeypatch):
    """The per-frame work on 2,500 images is done with the frame (the worker); the views make nothing."""
    import iastudio.app.views
    import iastudio.core.display
    import iastudio.core.frames
    import iastudio.core.pose
    from iastudio.app.views import ConvergenceView
    from iastudio.core.display import mosaic
    from iastudio.core.frames import FrameBuilder

    frame = FrameBuilder().frame(_sparse_frame().snapshot)

    def forbidden(*_a, **_k):
        raise AssertionError("computed while drawing")

    for module, name in ((iastudio.core.pose, "warp"), (iastudio.core.frames, "upright_tiles"),
                         (iastudio.core.frames, "weight_block"), (iastudio.core.display, "weight_block"),
                         (iastudio.core.frames, "_map"), (iastudio.app.views, "mosaic")):
        monkeypatch.setattr(module, name, forbidden)
    wv, mv, cv = WeightsView(), MeansView(), ConvergenceView()
    for view in (wv, mv, cv):
        qtbot.addWidget(view)
        view.show_frame(frame)
    assert_array_equal(wv.image_item.image, frame.w_block)  # drawn as prepared
    assert_array_equal(wv.order, frame.w_ids)
    assert_array_equal(frame.tile_mosaic, mosaic(frame.tiles))
    assert_array_equal(mv.image_item.image, frame.tile_mosaic)
    assert mv._tile_ids == frame.tile_ids.tolist()
    mv.set_selection([int(frame.tile_ids[3])])  # a selected image inside the samples: still nothing made
    wv.set_selection([int(frame.w_ids[3])])
    mv.show_frame(frame)
    wv.show_frame(frame)
    assert mv.overlay.image[..., 3].any()
    assert wv.overlay.image[..., 3].any()


def test_a_selected_image_outside_the_sample_is_added_and_only_its_tile_made(qtbot, monkeypatch):
    import iastudio.core.frames
    from iastudio.core.frames import FrameBuilder

    frame = FrameBuilder().frame(_sparse_frame().snapshot)
    outside = int(np.setdiff1d(np.arange(N), np.union1d(frame.tile_ids, frame.w_ids))[0])
    made = []
    _counting(monkeypatch, iastudio.core.frames, "upright_tiles", made)
    mv, wv = MeansView(), WeightsView()
    for view in (mv, wv):
        qtbot.addWidget(view)
        view.set_selection([outside])
        view.show_frame(frame)
    assert made == [1]  # one tile, for the selected image
    assert outside in mv._tile_ids
    assert mv.n_tiles == frame.tile_ids.size + 1
    assert outside in wv.order
    assert wv.order.size == frame.w_ids.size + 1
    labels = frame.snapshot.labels
    assert (np.diff(labels[wv.order]) >= 0).all()
    assert (np.diff(labels[np.array(mv._tile_ids)]) >= 0).all()
    assert_allclose(wv.image_item.image, frame.snapshot.weights.toarray()[np.ix_(wv.order, wv.order)])
    made.clear()
    mv.set_selection(list(range(200)))  # a large selection (a whole cluster) is not added to the sample
    mv.show_frame(frame)
    assert made == []
    assert mv.n_tiles == frame.tile_ids.size


def test_book_frame_of_a_large_run_makes_only_the_tiles_it_lacks(monkeypatch):
    import iastudio.core.frames
    from iastudio.core.display import upright_tiles
    from iastudio.core.frames import FrameBuilder, book_frame

    frame = FrameBuilder().frame(_sparse_frame().snapshot)
    labels = frame.snapshot.labels.copy()
    labels[labels == 1] = 0  # a merge: the merged cluster is sampled anew
    made = []
    _counting(monkeypatch, iastudio.core.frames, "upright_tiles", made)
    booked = book_frame(frame, labels, {}, images=frame.snapshot.means)
    assert_array_equal(booked.tile_ids, even_sample(booked.order, labels, limit=1024))
    lacking = np.setdiff1d(booked.tile_ids, frame.tile_ids).size
    assert 0 < lacking < booked.tile_ids.size
    assert made == [lacking]
    assert_array_equal(booked.tiles, upright_tiles(frame.snapshot.means[booked.tile_ids]))
    assert_allclose(booked.w_block, frame.snapshot.weights.toarray()[np.ix_(booked.w_ids, booked.w_ids)])


def test_the_map_is_redrawn_only_when_it_or_the_clusters_change(qtbot):
    from dataclasses import replace

    from iastudio.app.views import ConvergenceView

    frame = _sparse_frame()
    view = ConvergenceView()
    qtbot.addWidget(view)
    calls = []
    real = view.points[0].setData  # one item per colour: each new map sets every one once
    view.points[0].setData = lambda *a, **k: calls.append(1) or real(*a, **k)
    view.show_frame(frame)
    view.show_frame(replace(frame, curves={"within_max": [1.0, 0.5], "between_min": [0.5, 0.4],
                                           "median": [0.7, 0.6]}))  # the next step: same map, same clusters
    assert len(calls) == 1
    view.show_frame(replace(frame, mds=frame.mds + 1.0))  # a new map
    assert len(calls) == 2
    moved = replace(frame.snapshot, labels=np.roll(frame.snapshot.labels, 1))
    relabelled = replace(frame, mds=view.coords, snapshot=moved)  # the same map, other clusters
    view.show_frame(relabelled)
    assert len(calls) == 3
    shown = view.point_colours()
    assert len(shown) == N
    for i in (0, 1, 2):
        assert shown[i] == view._brushes[int(relabelled.snapshot.labels[i])].color().name()
    assert "K-neighbour graph" in view.map_plot.getPlotItem().titleLabel.text


def test_graph_map_without_arpack_convergence_is_still_made(caplog):
    """When ARPACK gives up (bounded restarts) the map is LOBPCG's: it still separates the groups."""
    from iastudio.core.neighbors import graph_map

    frame = _sparse_frame(seed=1)
    d = frame.snapshot.distances
    labels = frame.snapshot.labels
    idx = np.flatnonzero(np.isin(labels, [0, 1]))
    sub = d[idx][:, idx].tolil()
    lab = labels[idx]
    a, b = np.flatnonzero(lab == 0)[:5], np.flatnonzero(lab == 1)[:5]
    sub[a, b] = 2.0
    sub[b, a] = 2.0
    sub = sub.tocsr()
    with caplog.at_level("WARNING"):
        xy = graph_map(sub, maxiter=1)
    assert "ARPACK did not converge" in caplog.text
    assert xy.shape == (lab.size, 2)
    assert np.isfinite(xy).all()
    centre0, centre1 = xy[lab == 0].mean(0), xy[lab == 1].mean(0)
    side = (xy - (centre0 + centre1) / 2) @ (centre1 - centre0) > 0
    assert (side == (lab == 1)).mean() > 0.99
    exact = graph_map(sub)  # the same map as ARPACK's, up to a rotation (pairwise distances agree)
    pair = np.random.default_rng(0).integers(0, lab.size, (500, 2))
    dist = lambda p: np.linalg.norm(p[pair[:, 0]] - p[pair[:, 1]], axis=1)  # noqa: E731
    assert_allclose(dist(xy), dist(exact), atol=1e-3 * np.abs(exact).max())


def _finished_frame(seed=0):
    """:func:`_sparse_frame` with the class averages a finished run's frame has."""
    import dataclasses

    frame = _sparse_frame(seed)
    means = np.random.default_rng(seed + 1).random((K, 8, 8)).astype(np.float32)
    return dataclasses.replace(frame, cluster_means=means)


def test_a_finished_large_run_opens_its_means_view_on_the_class_averages_until_the_user_chooses(qtbot):
    from PySide6.QtCore import Qt

    from iastudio.core.display import mosaic, upright_tiles

    view = MeansView()
    qtbot.addWidget(view)
    view.resize(500, 500)
    view.show()
    frame = _finished_frame()
    view.show_frame(frame)
    # 2,500 images: one tile per cluster (K), not 1,024 tiles of a few pixels each
    assert view.per_cluster.isChecked()
    assert view.n_tiles == K
    assert_array_equal(view.image_item.image, mosaic(upright_tiles(frame.cluster_means), 3))
    assert "2,500 images are too many for one mean each" in view.caption.text()
    # the user unticks it: one mean per image (an even sample) from then on, also for the next frame
    qtbot.mouseClick(view.per_cluster, Qt.MouseButton.LeftButton)
    assert not view.per_cluster.isChecked()
    view.show_frame(_finished_frame(seed=1))
    assert not view.per_cluster.isChecked()
    assert view.n_tiles > 1000
    assert "too many" not in view.caption.text()


def test_a_finished_small_run_keeps_one_mean_per_image(qtbot):
    import dataclasses

    view = MeansView()
    qtbot.addWidget(view)
    small = _finished_frame()
    snap = dataclasses.replace(small.snapshot, means=small.snapshot.means[:200], labels=small.snapshot.labels[:200])
    order = np.argsort(snap.labels, kind="stable")
    view.show_frame(dataclasses.replace(small, snapshot=snap, order=order, mds=small.mds[:200]))
    assert not view.per_cluster.isChecked()
    assert view.n_tiles == 200


def test_the_large_set_default_does_not_stick_to_the_next_smaller_set(qtbot):
    """From the review: after a large set, a new set of 200 stayed on one mean per cluster, its caption
    saying "200 images are too many for one mean each"."""
    import dataclasses

    view = MeansView()
    qtbot.addWidget(view)
    large = _finished_frame()
    view.show_frame(large)
    assert view.per_cluster.isChecked()  # ticked for the large set, not by the user
    snap = dataclasses.replace(large.snapshot, means=large.snapshot.means[:200], labels=large.snapshot.labels[:200])
    small = dataclasses.replace(large, snapshot=snap, order=np.argsort(snap.labels, kind="stable"),
                                mds=large.mds[:200])
    view.clear()  # new images
    assert not view.per_cluster.isChecked()
    view.show_frame(large)
    view.show_frame(small)  # or straight to a smaller frame
    assert not view.per_cluster.isChecked()
    assert view.n_tiles == 200
    assert "too many" not in view.caption.text()


def test_the_run_panel_says_finishing_not_100_percent_while_the_final_frame_is_made(qtbot):
    """The engine's last snapshot arrives seconds before the finished frame on a large set (4 to 10 s on
    1,800 particles): the bar said "run 100 % · at most ~0 s left" all that time."""
    import dataclasses
    import time

    from iastudio.app.main_window import MainWindow

    w = MainWindow()
    qtbot.addWidget(w)
    w.projects.ask = lambda *a, **k: "discard"
    m = w.model
    m._t_launch = time.perf_counter() - 9.0
    frame = _sparse_frame()
    m._on_yield(("frame", frame))  # a step of the run: its own fraction and time left
    assert w.run_panel.progress.text().startswith("run 10 % · at most ~")
    done = dataclasses.replace(frame, snapshot=dataclasses.replace(frame.snapshot, stage="done", progress=1.0))
    m._on_yield(("frame", done))
    assert w.run_panel.progress.text() == "run 99 %"
    assert "finishing: the class averages" in w.run_panel.stage_label.text()
