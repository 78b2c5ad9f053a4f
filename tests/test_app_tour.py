"""Issue #12 item 5, a demo that teaches: the iteration scrubber, paper mode, Demo → Show me (pytest-qt)."""
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from iastudio.app.docks import is_shown  # noqa: E402
from iastudio.app.main_window import MainWindow  # noqa: E402
from iastudio.app.panels import PAPER_BETA  # noqa: E402
from iastudio.core.frames import weight_range  # noqa: E402


def _within_mass(w, labels) -> float:
    """The share of W's mass inside the true classes (1: block-diagonal)."""
    w = np.asarray(w.toarray() if hasattr(w, "toarray") else w, float)
    same = labels[:, None] == labels[None, :]
    return float((w * same).sum() / w.sum())


@pytest.fixture
def win(qtbot, home):
    w = MainWindow()
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    yield w
    w.model.stop()
    w.model.shutdown()


def _short_run(w, qtbot):
    w.model.load_demo("shapes")
    w.run_panel.size.setValue(24)
    w.run_panel.iterations.setValue(2)
    assert w.model.start(backend="numpy", mean_steps=2, **w.run_panel.options())
    qtbot.waitUntil(lambda: w.model.state == "finished", timeout=120000)
    w.redraw()


def test_scrubber_shows_recorded_frames_with_a_fixed_colour_scale(win, qtbot):
    sc, wv = win.scrubber, win.weights_view
    assert not sc.slider.isEnabled() and "Run to step" in sc.label.text()  # no run: disabled, with a hint
    _short_run(win, qtbot)
    frames = win.model.history_frames
    assert len(frames) >= 3 and sc.slider.isEnabled() and sc.chosen() is None  # live at the end
    levels = weight_range(frames)
    sc.slider.setValue(0)  # as a user dragging it to the left end
    f0 = frames[0]
    assert win.sync.drawn is f0
    np.testing.assert_allclose(wv.image_item.image, np.asarray(f0.snapshot.weights)[np.ix_(f0.order, f0.order)])
    np.testing.assert_allclose(wv.colorbar.levels(), levels)
    assert "step 1 of" in sc.label.text()
    for i in range(1, len(frames)):  # the scale stays put on every recorded frame
        sc.slider.setValue(i)
        np.testing.assert_allclose(wv.colorbar.levels(), levels)
        np.testing.assert_allclose(win.convergence_view.coords, frames[i].mds)
    sc.slider.setValue(sc.slider.maximum())  # "Live": the final frame
    final = win.model.final
    assert sc.chosen() is None and win.sync.drawn is final
    np.testing.assert_allclose(wv.image_item.image,
                               np.asarray(final.snapshot.weights)[np.ix_(final.order, final.order)])


def test_paper_mode_runs_identity_start_and_fixed_beta_and_w_changes(win, qtbot):
    rp = win.run_panel
    rp.paper_mode.setChecked(True)
    opts = rp.options()
    assert opts["init"] == "identity" and opts["beta"] == PAPER_BETA and opts["iterations"] >= 4
    assert not rp.beta_auto.isChecked() and rp.paper_mode.toolTip()
    m = win.model
    m.load_demo("shapes")
    rp.size.setValue(32)
    m.apply_random_transforms(rotation_deg=180, shift_percent=8, seed=7)
    assert m.start(backend="numpy", **opts)
    qtbot.waitUntil(lambda: m.state == "finished", timeout=180000)
    labels = np.unique(np.asarray(m.data.labels), return_inverse=True)[1]
    per_iteration = {}
    for f in m.history_frames:
        per_iteration.setdefault(f.snapshot.iteration, _within_mass(f.snapshot.weights, labels))
    print("paper mode, W's within-class mass per iteration:", {k: round(v, 3) for k, v in per_iteration.items()})
    assert len(per_iteration) >= 3
    masses = list(per_iteration.values())
    assert max(masses) - min(masses) > 0.05  # W visibly changes from iteration to iteration
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(labels, m.result.labels) == 1.0  # and the three shapes stay apart
    rp.paper_mode.setChecked(False)
    assert "init" not in rp.options() and rp.beta_auto.isChecked()


def test_show_me_asks_before_unsaved_work_is_lost(win, qtbot, monkeypatch):
    asked = []
    monkeypatch.setattr(win.projects, "confirm_discard", lambda action: asked.append(action) or False)
    win.model.load_demo("digits")
    n = win.model.n
    win.show_me_action.trigger()
    assert asked == ["Showing the demo"] and win.model.n == n and win.model.state == "idle"  # Cancel kept it


def test_show_me_runs_the_demo_and_ends_on_a_large_comparison(win, qtbot):
    assert win.demo_menu.menuAction() in win.menuBar().actions()
    win.show_me_action.trigger()
    m = win.model
    assert m.state == "running" and win.run_panel.paper_mode.isChecked()
    qtbot.waitUntil(lambda: m.state == "finished", timeout=180000)
    qtbot.waitUntil(lambda: "ARI" in win.compare_view.caption.text(), timeout=5000)
    assert m.n == 18 and m.transforms.any()
    assert np.degrees(np.abs(m.transforms[:, 0])).max() > 65  # turned further than the demo's own ±65°
    assert is_shown(win, win.compare_view)
    top, tabs = win.centralWidget().height(), win.docks["compare"].height()
    assert tabs > 1.5 * top  # the comparison is the large view (W and the means keep their minimum height)
    assert win.compare_view.n_tiles == 3 and not win.compare_view.empty
    assert "IA ARI 1.00" in win.compare_view.caption.text()
    assert win.compare_view.items[1].image.max() > 0.3  # the IA means are drawn


def test_the_ia_means_are_drawn_upright_and_centred(win, qtbot):
    from iastudio.core.pose import intensity_moments

    _short_run(win, qtbot)
    win.sync.finished(win.model.final)
    means = win.model.final.cluster_means
    h = means.shape[1]
    img = win.compare_view.items[1].image
    cols = min(len(means), 4)
    tiles = np.stack([img[2 + (k // cols) * (h + 2):2 + (k // cols) * (h + 2) + h,
                          2 + (k % cols) * (h + 2):2 + (k % cols) * (h + 2) + h] for k in range(len(means))])
    _, cen, _ = intensity_moments(tiles)
    np.testing.assert_allclose(cen, (h - 1) / 2, atol=1.0)
    _, raw_cen, _ = intensity_moments(means)
    assert np.abs(raw_cen - (h - 1) / 2).max() > np.abs(cen - (h - 1) / 2).max()


