"""A denoised run's class averages of the images before denoising: computed where the run is driven, kept
with its frame, drawn with edited clusters, saved with the project (issue 30, the app's part)."""
from types import SimpleNamespace

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from test_session_denoise import RUN, _noisy_set, _session

from iastudio.core.cluster_means import cluster_key, pose_averages
from iastudio.core.frames import FrameBuilder, book_frame, undenoised_means
from iastudio.core.project import ProjectError, load_project, save_project
from iastudio.core.session import Session, stream_run
from iastudio.core.warp import warp


def _two_lobes(side=32):
    r, c = np.mgrid[:side, :side] - (side - 1) / 2.0
    return (np.exp(-((r + 4) ** 2 + c ** 2) / 6) + 0.5 * np.exp(-(r ** 2 + (c - 5) ** 2) / 6)).astype(np.float32)


def _correlation(a, b) -> float:
    a, b = np.ravel(a) - np.mean(a), np.ravel(b) - np.mean(b)
    return float(a @ b / np.sqrt((a @ a) * (b @ b)))


def test_the_averages_undo_each_pose_known_answer():
    """Turned (and one mirrored) copies of a two-lobed shape, each pose undoing its turn: the shape comes back."""
    shape = _two_lobes()
    turns = np.array([[0.0, 0, 0], [1.0, 0, 0], [-2.0, 0, 0], [0.5, 0, 0]])
    copies = warp(shape[None], turns, index=np.zeros(4, dtype=int))
    copies[3] = copies[3][:, ::-1].copy()  # the last one mirrored: a run with group "e2" flips it back first
    back = -turns  # each turn undone (the mirrored one's once it is flipped back)
    result = SimpleNamespace(labels=np.array([0, 0, 0, 1]), image_transforms=back,
                             mirrored=np.array([False, False, False, True]), cluster_means=np.zeros((2, 32, 32)))
    avg = undenoised_means(copies, result, group="e2")
    assert avg.dtype == np.float32
    assert avg.shape == (2, 32, 32)
    assert np.abs(avg[0] - shape).max() < 0.05
    assert np.abs(avg[1] - shape).max() < 0.05
    plain = undenoised_means(copies, result, group="se2")  # the mirrors ignored: the mirrored copy stays flipped
    assert np.abs(plain[1] - shape).max() > 0.3
    with pytest.raises(ValueError, match="images before denoising"):
        undenoised_means(copies[:3], result)


def test_a_denoised_run_averages_its_images_before_denoising_at_its_poses():
    data, _ = _noisy_set()
    s = _session(data)
    res = s.run_here(backend="numpy", denoise="auto", **RUN)
    assert s.denoise_report.applied
    und = s.canvas.undenoised
    assert und is not None
    assert und.shape == s.working.shape
    assert s.undenoised is und  # no transforms: the images before denoising as they lie on the canvas
    got = s.final.undenoised_means
    assert got is not None
    assert got.shape == res.cluster_means.shape
    assert_array_equal(got, pose_averages(und, res.labels, res.image_transforms))
    for c in range(res.n_clusters):  # at the right poses they look like the invariant means (a smear would not)
        assert _correlation(got[c], res.cluster_means[c]) > 0.8


def test_a_transformed_set_moves_its_images_before_denoising_as_its_inputs():
    data, _ = _noisy_set(n=18, seed=4)
    s = _session(data)
    assert s.apply_random_transforms(rotation_deg=180, shift_percent=5, seed=2)
    res = s.run_here(backend="numpy", denoise="on", **RUN)
    moved = warp(s.canvas.undenoised, s.transforms)
    assert_allclose(s.undenoised, moved, atol=1e-6)
    assert_allclose(s.final.undenoised_means, pose_averages(moved, res.labels, res.image_transforms), atol=1e-6)
    for c in range(res.n_clusters):
        assert _correlation(s.final.undenoised_means[c], res.cluster_means[c]) > 0.8


@pytest.mark.parametrize("how", ["clean", "off"])
def test_a_run_that_did_not_denoise_has_none(how):
    if how == "clean":
        s = Session(size=32)
        s.load_demo("shapes")
        s.run_here(backend="numpy", denoise="auto", **RUN)
        assert not s.denoise_report.applied
    else:
        s = _session(_noisy_set(n=15)[0])
        s.run_here(backend="numpy", denoise="off", **RUN)
    assert s.undenoised is None
    assert s.final.undenoised_means is None
    assert s.to_project().undenoised_means is None


def test_a_run_resumed_after_its_images_were_denoised_still_averages_them():
    data, _ = _noisy_set(n=15, seed=5)
    s = _session(data)
    run = s.start(backend="numpy", denoise="auto", clusters=3, iterations=2)
    builder = FrameBuilder()
    for item in stream_run(run, builder, prepare=s.run_inputs):
        s.take(item)
        if item[0] == "frame":
            s.stop()  # after the denoising: the driver's "stopped" follows
    assert s.state == "stopped"
    assert s.undenoised is not None
    assert s.run_inputs is None
    assert s.resume() is s.run
    for item in stream_run(s.run, builder, undenoised=s.undenoised):  # what StudioModel._launch passes
        s.take(item)
    assert s.state == "finished"
    res = s.result
    assert_array_equal(s.final.undenoised_means, pose_averages(s.canvas.undenoised, res.labels, res.image_transforms))


def test_edited_clusters_keep_the_run_s_averages_and_list_the_others(tmp_path):
    data, _ = _noisy_set()
    s = _session(data)
    res = s.run_here(backend="numpy", denoise="auto", **RUN)
    final = s.final
    labels = np.array(res.labels)
    moved = int(np.flatnonzero(labels == 0)[0])
    labels[moved] = 1  # one image moved from cluster 0 into cluster 1
    booked = book_frame(final, labels, {}, images=s.working)
    assert booked.undenoised_missing == (0, 1)
    assert_array_equal(booked.undenoised_means[2], final.undenoised_means[2])
    assert not booked.undenoised_means[:2].any()
    assert book_frame(final, res.labels, {}, images=s.working).undenoised_missing == ()
    # once their averages at the poses onto their own means are known, they are shown, not blank
    known = {cluster_key(np.flatnonzero(labels == 0)): np.full(final.undenoised_means.shape[1:], 3.0, np.float32)}
    again = book_frame(final, labels, {}, images=s.working, undenoised_means=known)
    assert again.undenoised_missing == (1,)
    assert (again.undenoised_means[0] == 3.0).all()
    assert not again.undenoised_means[1].any()
    assert_array_equal(again.undenoised_means[2], final.undenoised_means[2])


def test_the_averages_are_saved_with_the_project_and_checked_on_loading(tmp_path):
    data, _ = _noisy_set()
    s = _session(data)
    s.run_here(backend="numpy", denoise="auto", **RUN)
    path = tmp_path / "run.iaproj"
    s.save_project(path)
    again = Session()
    again.open_project(path)
    assert_array_equal(again.final.undenoised_means, s.final.undenoised_means)
    assert again.undenoised is None  # the images before denoising are not in a project; their averages are
    proj = load_project(path)
    proj.undenoised_means = proj.undenoised_means[:-1]  # one cluster short: refused, in plain words
    save_project(tmp_path / "bad.iaproj", proj)
    with pytest.raises(ProjectError, match="class averages before denoising do not match"):
        load_project(tmp_path / "bad.iaproj")


def test_ia_cluster_saves_them_in_its_project_and_the_app_opens_them(tmp_path):
    """``ia-cluster --save-project`` stores ``means_undenoised.npy``'s averages; a session opening it shows them."""
    from test_denoise import _particle_pngs

    from iastudio.core.cli import main

    _particle_pngs(tmp_path / "in")
    out, path = tmp_path / "out", tmp_path / "run.iaproj"
    assert main([str(tmp_path / "in"), "--out", str(out), "--size", "24", "--iterations", "1", "--quiet",
                 "--clusters", "2", "--save-project", str(path)]) == 0
    written = np.load(out / "means_undenoised.npy", allow_pickle=False)
    assert_array_equal(load_project(path).undenoised_means, written)
    s = Session()
    s.open_project(path)
    assert_array_equal(s.final.undenoised_means, written)
