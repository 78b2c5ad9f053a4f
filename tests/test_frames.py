"""Frames: one builder for a live run and a restored project; the final read-out; the project checks."""
import itertools

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from iastudio.core.attention import AttentionRun, Stage
from iastudio.core.demos import load_demo
from iastudio.core.embedding import classical_mds
from iastudio.core.frames import Frame, FrameBuilder, book_frame, frames_from_project, plain_means
from iastudio.core.neighbors import graph_curves
from iastudio.core.preprocess import preprocess
from iastudio.core.project import (
    RECORDED_STAGES,
    Project,
    ProjectError,
    history_entry,
    load_project,
    save_project,
)
from iastudio.core.report import cluster_curves, convergence_curves


@pytest.fixture(scope="module")
def live():
    """A finished IA run on 9 demo shapes, with every frame the builder made."""
    demo = load_demo("shapes")
    images = preprocess(demo.images[:9], size=20).images
    run = AttentionRun(images, backend="numpy", iterations=2, mean_steps=2, snapshot_every=1)
    builder = FrameBuilder()
    frames, last = [], None
    for snap in run.steps():
        last = snap
        frames.append(builder.frame(snap, elapsed=1.5))
    final = builder.final(run, last, elapsed=2.5)
    return run, frames, final


def _pairwise(points):
    return np.linalg.norm(points[:, None] - points[None], axis=-1)


def test_plain_means_known_answer():
    imgs = np.arange(4 * 2 * 2, dtype=np.float32).reshape(4, 2, 2)
    out = plain_means(imgs, np.array([1, 0, 1, 1]), n_clusters=3)
    assert out.shape == (3, 2, 2)
    assert out.dtype == np.float32
    assert_allclose(out[0], imgs[1])
    assert_allclose(out[1], (imgs[0] + imgs[2] + imgs[3]) / 3)
    assert_allclose(out[2], 0.0)  # a cluster without images
    assert plain_means(imgs, np.array([0, 0, 2, 2])).shape[0] == 3


def test_frames_follow_the_snapshots(live):
    run, frames, _ = live
    res = run.result()
    sims = [f for f in frames if f.snapshot.stage in (Stage.SIMILARITY, Stage.DONE)]
    # one curve point per distance computation so far, the last frame's over the whole history
    assert len(frames[-1].curves["median"]) == len(sims) == len(res.history)
    assert frames[-1].curves == convergence_curves(res.history, frames[-1].snapshot.labels)
    for f in frames:
        assert_array_equal(f.order, np.argsort(f.snapshot.labels, kind="stable"))
        assert f.elapsed == 1.5
        assert f.result is None
        # the map reproduces the manifold distances as well as a planar map can: its own MDS, up to rotation
        assert_allclose(_pairwise(f.mds), _pairwise(classical_mds(f.snapshot.distances)), atol=1e-6)
    # each map is turned onto the one before: no farther from it than the unaligned map
    for before, after in itertools.pairwise(frames):
        plain = classical_mds(after.snapshot.distances)
        assert np.linalg.norm(after.mds - before.mds) <= np.linalg.norm(plain - before.mds) + 1e-9


def test_final_frame_holds_the_read_out(live):
    run, frames, final = live
    res = run.result()
    assert final.result is res
    assert final.snapshot is frames[-1].snapshot
    assert final.elapsed == 2.5
    assert_array_equal(final.cluster_means, res.cluster_means)
    for c in range(res.n_clusters):
        assert_allclose(final.plain_means[c], run.inputs[res.labels == c].mean(axis=0), rtol=1e-6, atol=1e-7)
    ka = AttentionRun(run.inputs, backend="numpy", method="ka", beta=run.settings.beta,
                      iterations=run.settings.iterations, clusters=run.settings.clusters).run()
    assert_array_equal(final.ka_labels, ka.labels)
    assert_array_equal(final.mds, frames[-1].mds)


def test_final_without_a_last_snapshot_builds_the_done_frame(live):
    run, _, _ = live
    final = FrameBuilder().final(run, None)
    assert final.snapshot.stage is Stage.DONE
    assert final.result is run.result()
    assert len(final.curves["median"]) == 1  # a fresh builder: only the final distances


def _saved(live, tmp_path):
    run, frames, _ = live
    res = run.result()
    history = [history_entry(f.snapshot) for f in frames if f.snapshot.stage in RECORDED_STAGES]
    n = run.inputs.shape[0]
    proj = Project(paths=[f"demo:shapes/{i:03d}" for i in range(n)], labels=[None] * n, size=20,
                   base=run.inputs, parameters={"beta_used": float(res.beta)}, history=history,
                   result=res.arrays())
    return load_project(save_project(tmp_path / "run.iaproj", proj))


def test_project_restores_the_same_frames(live, tmp_path):
    run, frames, final = live
    proj = _saved(live, tmp_path)
    restored, rfinal = frames_from_project(proj, run.inputs)
    recorded = [f for f in frames if f.snapshot.stage in RECORDED_STAGES]
    assert [f.snapshot.stage for f in restored] == [f.snapshot.stage for f in recorded]
    for a, b in zip(restored, recorded):
        assert isinstance(a, Frame)
        assert_array_equal(a.snapshot.weights, b.snapshot.weights)
        assert_array_equal(a.order, b.order)
        assert a.curves == b.curves
        assert_allclose(_pairwise(a.mds), _pairwise(b.mds), atol=1e-6)  # the same map, possibly turned
    assert rfinal is restored[-1]
    res = run.result()
    for key, arr in res.arrays().items():
        assert_array_equal(rfinal.result.arrays()[key], arr)
    assert rfinal.result.n_clusters == res.n_clusters
    assert rfinal.result.beta == pytest.approx(res.beta)
    assert len(rfinal.result.history) == len(res.history)
    assert_allclose(rfinal.plain_means, final.plain_means)
    assert rfinal.ka_labels is None


def test_project_without_a_complete_result_has_no_final(live, tmp_path):
    run, _, _ = live
    proj = _saved(live, tmp_path)
    proj.result.pop("scores")
    frames, final = frames_from_project(proj, run.inputs)
    assert final is None
    assert frames
    assert frames[-1].result is None
    proj.history = []
    assert frames_from_project(proj, run.inputs) == ([], None)


def test_project_that_does_not_fit_the_images_is_refused(live, tmp_path):
    run, _, _ = live
    proj = _saved(live, tmp_path)
    with pytest.raises(ProjectError, match="different working size"):
        frames_from_project(proj, run.inputs[:, :-2, :-2])
    proj.history[0]["weights"] = None
    with pytest.raises(ProjectError, match="a step lacks its weights"):
        frames_from_project(proj, run.inputs)
    proj = _saved(live, tmp_path)
    proj.result["cluster_means"] = proj.result["cluster_means"][:, :-1]
    with pytest.raises(ProjectError, match="the saved result does not match the images"):
        frames_from_project(proj, run.inputs)


def test_frames_of_a_pruned_run_map_its_neighbour_graph(monkeypatch):
    """A run on K candidate neighbours has sparse distances: the builder maps its graph (no dense MDS)."""
    import scipy.sparse as sp

    import iastudio.core.run_output

    monkeypatch.setattr(iastudio.core.run_output, "_DENSE_VIEW_MAX", 10)  # sparse views from 11 images, not 2,001

    from iastudio.core.attention import AttentionRun
    from iastudio.core.demos import load_demo
    from iastudio.core.frames import FrameBuilder
    from iastudio.core.preprocess import preprocess

    x = preprocess(load_demo("shapes").images, size=24).images
    run = AttentionRun(x, backend="numpy", neighbors=6, iterations=1, mean_steps=1, clusters=3)
    builder, last, frames = FrameBuilder(), None, []
    for snap in run.steps():
        last = snap
        frames.append(builder.frame(snap))
    final = builder.final(run, last)
    assert sp.issparse(final.snapshot.distances)
    assert final.mds.shape == (18, 2)
    assert np.isfinite(final.mds).all()
    assert len(final.curves["median"]) == len(builder.history) >= 1
    assert final.result is not None
    assert final.result.n_clusters == 3
    edited = np.asarray(final.result.labels).copy()
    edited[edited == 1] = 0  # a merge
    edited[0] = -1  # an unassigned image
    booked = book_frame(final, edited, {}, images=x)
    assert booked.curves == graph_curves(list(builder.history), edited)  # the pruned run's curves follow too


def test_cluster_curves_known_answer_unassigned_left_out():
    d = np.array([[0, 1, 5, 9], [1, 0, 4, 8], [5, 4, 0, 2], [9, 8, 2, 0]], float)
    c = cluster_curves([d, d / 2], [0, 0, 1, 1])
    assert c == {"within_max": [2.0, 1.0], "between_min": [4.0, 2.0]}
    c = cluster_curves([d], [0, 0, 1, -1])  # image 3 unassigned: its 9, 8 and 2 count nowhere
    assert c == {"within_max": [1.0], "between_min": [4.0]}
    c = cluster_curves([d], [0, -1, -1, -1])  # one image in one cluster: no pair of either kind
    assert np.isnan(c["within_max"][0])
    assert np.isnan(c["between_min"][0])
    full = convergence_curves([d], [0, 0, 1, -1])
    assert full["median"] == [float(np.median([1, 5, 9, 4, 8, 2]))]  # the median counts every pair
    assert convergence_curves([d], [0, 0, 1, 1]) == {"within_max": [2.0], "between_min": [4.0],
                                                     "median": [4.5]}


def test_book_frame_reads_the_curves_with_the_edited_clusters(live, tmp_path):
    """Live and restored frames keep their distance history, so edited clusters get their own curves."""
    run, frames, final = live
    _, rfinal = frames_from_project(_saved(live, tmp_path), run.inputs)
    for fr in (final, rfinal, frames[1]):
        assert len(fr.distance_history) == len(fr.curves["median"]) >= 1
        labels = np.asarray(fr.snapshot.labels).copy()
        labels[labels == labels.max()] = 0  # merge the last cluster into the first
        labels[1] = -1
        booked = book_frame(fr, labels, {}, images=run.inputs)
        want = convergence_curves(list(fr.distance_history), labels)
        assert_allclose(booked.curves["within_max"], want["within_max"])
        assert_allclose(booked.curves["between_min"], want["between_min"])
        assert_allclose(booked.curves["median"], fr.curves["median"])  # the median follows no cluster
        same = book_frame(fr, fr.snapshot.labels, {}, images=run.inputs)  # no edit: the run's own curves
        assert_allclose(same.curves["within_max"], fr.curves["within_max"])


def test_frames_carry_the_upright_tiles_made_in_the_worker(live):
    from iastudio.core.display import tile_levels, upright_tiles

    _, frames, final = live
    for fr in [*frames, final]:
        assert_array_equal(fr.tile_ids, fr.order)  # 9 images: all of them, grouped
        assert fr.tiles.dtype == np.uint8
        assert fr.tiles.shape == (9, 20, 20)
        assert_array_equal(fr.tiles, upright_tiles(fr.snapshot.means[fr.order]))
        assert fr.w_ids is None
        assert fr.w_block is None
    fr = frames[-1]
    plain = tile_levels(fr.snapshot.means[fr.order])  # the same scaling, not turned
    assert np.abs(fr.tiles.astype(int) - plain.astype(int)).max() > 25


def test_frames_of_unchanged_distances_share_one_map(live, monkeypatch):
    """The map is made once per distance computation, not again for every step of the means."""
    import iastudio.core.frames as frames_module

    _, frames, _ = live
    made = []
    real_map = frames_module._map
    monkeypatch.setattr(frames_module, "_map", lambda d, prev: made.append(1) or real_map(d, prev))
    builder = FrameBuilder()
    again = [builder.frame(f.snapshot) for f in frames]
    distinct = 1 + sum(not np.array_equal(a.snapshot.distances, b.snapshot.distances)
                       for a, b in itertools.pairwise(frames))
    assert len(made) == distinct < len(frames)
    for a, b in itertools.pairwise(again):
        if np.array_equal(a.snapshot.distances, b.snapshot.distances):
            assert b.mds is a.mds  # the same array: the window need not redraw the map
    assert not again[-1].mds.flags.writeable


def test_book_frame_regroups_the_tiles_reusing_the_prepared_ones(live, monkeypatch):
    import iastudio.core.frames as frames_module
    from iastudio.core.display import upright_tiles

    run, _, final = live
    labels = np.asarray(final.result.labels).copy()
    labels[0] = -1  # unassigned: last
    made = []
    monkeypatch.setattr(frames_module, "upright_tiles", lambda x: made.append(len(x)) or upright_tiles(x))
    booked = book_frame(final, labels, {}, images=run.inputs)
    assert made == []  # every image's tile was prepared with the run's frame
    assert_array_equal(booked.tile_ids, booked.order)
    assert booked.tile_ids[-1] == 0
    assert_array_equal(booked.tiles, upright_tiles(final.snapshot.means[booked.order]))
