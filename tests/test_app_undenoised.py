"""The means view shows a denoised run's class averages of the images before denoising (pytest-qt; issue 30).

What is checked is what is drawn: the 8-bit mosaic of the means view, against the averages made here
from the session's canvas (:func:`~iastudio.core.cluster_means.pose_averages`).
"""
import os
import threading
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from numpy.testing import assert_array_equal  # noqa: E402
from test_session_denoise import _noisy_set  # noqa: E402

from iastudio.app.main_window import MainWindow  # noqa: E402
from iastudio.app.views import MEANS_TITLE, UNDENOISED_OFF_TIP, UNDENOISED_TITLE  # noqa: E402
from iastudio.core import frames  # noqa: E402
from iastudio.core.cluster_means import pose_averages  # noqa: E402
from iastudio.core.display import mosaic, upright_tiles  # noqa: E402


def _window(qtbot):
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    return w


@pytest.fixture
def window(qapp, qtbot, home, monkeypatch, tmp_path):
    monkeypatch.setenv("IA_STUDIO_LOG_DIR", str(tmp_path / "logs"))
    w = _window(qtbot)
    yield w
    w.model.shutdown(5000)


def _run(window, qtbot, denoise="auto"):
    panel = window.run_panel
    panel.size.setValue(32)
    panel.iterations.setValue(1)
    panel.clusters_auto.setChecked(False)
    panel.clusters.setValue(3)
    panel.denoise.setCurrentIndex(panel.denoise.findData(denoise))
    panel.start_btn.click()
    qtbot.waitUntil(lambda: window.model.session.state in ("finished", "failed"), timeout=60000)
    assert window.model.session.state == "finished"
    window.sync.redraw()


def _expected(session):
    """The mosaic of the class averages before denoising, made here from the session's canvas."""
    res = session.result
    averages = pose_averages(session.canvas.undenoised, res.labels, res.image_transforms)
    return mosaic(upright_tiles(averages, like=res.cluster_means))


def test_the_toggle_draws_the_averages_of_the_images_before_denoising(window, qtbot, monkeypatch):
    made_on = []
    compute = frames.undenoised_means

    def spy(*args, **kwargs):
        made_on.append(threading.current_thread() is threading.main_thread())
        return compute(*args, **kwargs)

    monkeypatch.setattr(frames, "undenoised_means", spy)
    window.model.session.set_images(_noisy_set(n=15, seed=1)[0])
    mv = window.means_view
    assert not mv.averages.isEnabled()  # nothing run yet
    _run(window, qtbot)
    s = window.model.session
    assert made_on == [False]  # in the run's worker, never on the GUI thread
    assert s.denoise_report.applied
    assert mv.averages.isEnabled()
    assert mv.averages_label.isEnabled()
    assert mv.averages.itemText(0) == "denoised"
    assert "before the denoiser" in mv.averages.toolTip()
    denoised_image = mv.image_item.image.copy()  # one invariant mean per image, as before

    mv.averages.setCurrentIndex(mv.averages.findData("undenoised"))
    assert mv.per_cluster.isChecked()  # class averages are one per cluster
    assert mv.shows_undenoised
    assert_array_equal(mv.image_item.image, _expected(s))
    assert mv.n_tiles == 3
    assert mv.title.text() == UNDENOISED_TITLE
    assert mv.caption.text().startswith("3 class averages of the images before denoising")
    assert s.view_state["class_averages"] == "undenoised"  # saved with the project

    mv.averages.setCurrentIndex(mv.averages.findData("denoised"))  # back: the run's invariant means
    assert_array_equal(mv.image_item.image, mosaic(upright_tiles(s.result.cluster_means)))
    assert mv.title.text() == MEANS_TITLE
    assert not np.array_equal(mv.image_item.image, _expected(s))

    mv.averages.setCurrentIndex(mv.averages.findData("undenoised"))
    mv.per_cluster.setChecked(False)  # one per image: there are no averages before denoising per image
    assert mv.averages.currentData() == "denoised"
    assert_array_equal(mv.image_item.image, denoised_image)


def test_the_toggle_is_off_when_the_run_did_not_denoise(window, qtbot):
    window.model.session.set_images(_noisy_set(n=15, seed=1)[0])
    _run(window, qtbot, denoise="off")
    mv = window.means_view
    assert window.model.session.final.undenoised_means is None
    assert not mv.averages.isEnabled()
    assert mv.averages.itemText(0) == "as clustered"  # not "denoised": nothing was
    assert mv.averages.toolTip() == UNDENOISED_OFF_TIP
    mv.per_cluster.setChecked(True)
    mv.averages.setCurrentIndex(mv.averages.findData("undenoised"))  # chosen anyway (a saved view): ignored
    assert not mv.shows_undenoised
    assert_array_equal(mv.image_item.image, mosaic(upright_tiles(window.model.session.result.cluster_means)))


def test_edited_clusters_are_blank_and_named_until_averaged_at_their_own_poses(window, qtbot):
    window.model.session.set_images(_noisy_set(n=15, seed=1)[0])
    _run(window, qtbot)
    s, mv, m = window.model.session, window.means_view, window.model
    mv.averages.setCurrentIndex(mv.averages.findData("undenoised"))
    labels = np.asarray(s.book.labels)
    a, b = (int(c) for c in np.unique(labels)[:2])
    assert s.merge_clusters([a, b])
    window.sync.redraw()
    assert mv.shows_undenoised
    shown = window.sync.with_book(s.final)
    assert len(shown.undenoised_missing) == 1  # while the merged cluster's mean is computed
    assert "blank for 1 edited cluster" in mv.caption.text()
    assert mv.n_tiles == 2
    # then its images before denoising are averaged at the poses onto its own invariant mean
    qtbot.waitUntil(lambda: m.means_worker is None and not s.missing_cluster_means(), timeout=60000)
    window.sync.redraw()
    shown = window.sync.with_book(s.final)
    assert shown.undenoised_missing == ()
    assert "blank" not in mv.caption.text()
    merged = np.flatnonzero(np.asarray(s.book.labels) == shown.cluster_ids[0])
    from iastudio.core.cluster_means import cluster_invariant_means

    _, (poses,) = cluster_invariant_means(s.working, [merged], return_poses=True,
                                          distances=s.final.result.input_distances, **s.alignment_options())
    expected = pose_averages(s.undenoised[merged], np.zeros(merged.size, dtype=int), poses)[0]
    np.testing.assert_allclose(shown.undenoised_means[0], expected, atol=1e-5)
    assert np.abs(shown.undenoised_means[0]).max() > 0


def test_the_averages_are_exported_and_survive_save_and_open(window, qtbot, tmp_path):
    from iastudio.app.export import _panel_figures, export_undenoised_means

    window.model.session.set_images(_noisy_set(n=15, seed=1)[0])
    _run(window, qtbot)
    s, mv = window.model.session, window.means_view
    mv.averages.setCurrentIndex(mv.averages.findData("undenoised"))
    expected = _expected(s)
    path = export_undenoised_means(s, tmp_path)
    assert path.name == "means_undenoised.npy"  # ia-cluster's name
    assert_array_equal(np.load(path), s.final.undenoised_means)
    assert "means_undenoised" in _panel_figures(window, 16.0)

    project = tmp_path / "run.iaproj"
    assert window.projects.save_to(str(project))
    other = _window(qtbot)
    try:
        assert other.projects.open_project(str(project), remember=False, ask=False)
        other.sync.redraw()
        mv2 = other.means_view
        assert mv2.averages.isEnabled()
        assert mv2.averages.currentData() == "undenoised"  # the view as it was saved
        assert mv2.shows_undenoised
        assert_array_equal(mv2.image_item.image, expected)
    finally:
        other.model.shutdown(5000)


def _edited_denoised_project(path):
    """A denoised run saved after a split and a merge (every cluster changed), by the core session."""
    from iastudio.core.session import Session

    s = Session(size=32)
    s.set_images(_noisy_set(n=15, seed=1)[0])
    s.run_here(backend="numpy", denoise="auto", clusters=3, iterations=1)
    assert s.split_cluster(s.book.cluster_ids()[0], 2)
    assert s.merge_clusters(s.book.cluster_ids()[1:3])
    s.save_project(path)
    return s


def test_a_reopened_edited_project_exports_its_averages_before_denoising_not_black_squares(
        window, qtbot, tmp_path, monkeypatch):
    """Reopened, the edited clusters have no averages before denoising (the project does not hold the images
    before denoising): the figure shows what means_undenoised.npy holds, the run's clusters, and the means
    view's blank tiles are not exported; the status line says what was left out and why."""
    from iastudio.core import report

    _edited_denoised_project(tmp_path / "edited.iaproj")
    assert window.projects.open_project(str(tmp_path / "edited.iaproj"), remember=False, ask=False)
    s, mv = window.model.session, window.means_view
    mv.averages.setCurrentIndex(mv.averages.findData("undenoised"))
    window.sync.redraw()
    assert mv.shows_undenoised
    assert len(mv._frame.undenoised_missing) == 3
    drawn = {}
    real = report.mosaic_figure

    def spy(image, *, title="", width_cm=16.0):
        drawn[title] = np.asarray(image).copy()
        return real(image, title=title, width_cm=width_cm)

    monkeypatch.setattr(report, "mosaic_figure", spy)
    folder = Path(window.exports.panels(str(tmp_path / "figs")))
    saved = np.load(folder / "means_undenoised.npy")
    assert saved.shape[0] == 3
    assert np.abs(saved).max(axis=(1, 2)).min() > 0
    title = UNDENOISED_TITLE + ", the run's 3 clusters"
    assert_array_equal(drawn[title], mosaic(upright_tiles(saved, like=s.final.cluster_means)))
    tiles = upright_tiles(saved, like=s.final.cluster_means)
    assert tiles.reshape(3, -1).max(axis=1).min() == 255  # every tile shows its average, none is black
    assert (folder / "means_undenoised.png").exists()
    assert UNDENOISED_TITLE not in drawn  # the view's mosaic of 3 blank tiles is not drawn
    assert not (folder / "means.png").exists()
    status = window.statusBar().currentMessage()
    assert status.startswith(f"Exported 19 files into {folder}; means leaves out 3 edited clusters (")
    assert "no average before denoising yet (a reopened project does not hold the images" in status
    assert "means_undenoised shows the run's 3 clusters before your edits, as means_undenoised.npy holds them" in status


def test_a_blank_average_is_left_out_and_named():
    from types import SimpleNamespace

    from iastudio.app.export import undenoised_tiles

    rng = np.random.default_rng(0)
    und = rng.uniform(0, 1, (3, 16, 16)).astype(np.float32)
    und[1] = 0.0  # nothing to show
    und[2, 0, 0] = np.nan
    final = SimpleNamespace(undenoised_means=und, cluster_means=und + 1, result=None)
    notes = []
    tiles, title = undenoised_tiles(SimpleNamespace(final=final, book=None), notes)
    assert_array_equal(tiles, upright_tiles(und[:1], like=und[:1] + 1))
    assert title == UNDENOISED_TITLE
    assert notes == ["means_undenoised leaves out cluster 2, cluster 3 of the run: their averages are blank "
                     "(nothing to show)"]
