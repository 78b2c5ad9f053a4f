"""What a user trial found drawn wrong at 1024 x 700 and 1280 x 800 (pytest-qt): the Run panel's progress text
cut off, the Transforms tab cut off with an image chosen, W's "Open a folder" hint with images loaded, and W's
colour bar title over its tick labels."""
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from _qt import wait_until  # noqa: E402
from PIL import Image  # noqa: E402
from PySide6.QtCore import QPoint  # noqa: E402
from PySide6.QtGui import QImage, QPainter  # noqa: E402
from PySide6.QtWidgets import QScrollArea  # noqa: E402

from iastudio.app.docks import show_view  # noqa: E402

SIZES = ((1024, 700), (1280, 800))


def _settle(qapp, w, size):
    w.resize(*size)
    for _ in range(5):
        qapp.processEvents()


def _fully_shown(widget, window) -> bool:
    """``widget`` is drawn whole inside ``window``: none of it clipped by a parent or by the window's edge."""
    seen = widget.visibleRegion().boundingRect()
    bottom_right = widget.mapTo(window, QPoint(widget.width(), widget.height()))
    return (widget.isVisible() and seen.size() == widget.size()
            and bottom_right.x() <= window.width() and bottom_right.y() <= window.height())


# ------------------------------------------------------------------ 1. the progress text is readable

@pytest.mark.parametrize("stage", ["invariant means, step 7/10",
                                   "re-running Cluster 3: invariant means, step 10/10"])
def test_progress_text_during_the_means_stage_is_not_cut_off(run_win, qapp, stage):
    w, rp = run_win, run_win.run_panel
    show_view(w, rp)
    w.model.session.on_progress(0.87, stage, 190.0)  # as the model reports a run in its means stage
    try:
        for size in SIZES:
            _settle(qapp, w, size)
            bar = rp.progress
            assert "87 %" in bar.text()  # how far
            assert "3 min" in bar.text()  # and the time left
            room = bar.contentsRect().width() - 8
            assert bar.fontMetrics().horizontalAdvance(bar.text()) <= room, (size, bar.text(), room)
            label = rp.stage_label
            # which stage: the line under the bar, wrapped to the panel's width and shown whole
            assert label.text() == stage
            assert _fully_shown(bar, w), size
            assert _fully_shown(label, w), size
            assert label.height() >= label.heightForWidth(label.width()), size
            for line in stage.split(":"):  # wrapped, not cut: each word fits the label's width
                for word in line.split():
                    assert label.fontMetrics().horizontalAdvance(word) <= label.width()
    finally:
        w.model.session.on_progress(1.0, "", -1)
        rp.set_state("finished")
    assert not rp.stage_label.isVisible()  # no stage once the run is not going
    assert rp.progress.text() == "done"


# ------------------------------------------------------------------ 2. the Transforms tab fits or scrolls

def test_transforms_tab_with_an_image_chosen_is_reachable_at_1024x700(window, qapp, tmp_path):
    rng = np.random.default_rng(0)
    for i in range(12):
        Image.fromarray((rng.random((32, 32)) * 255).astype(np.uint8)).save(tmp_path / f"p{i:02d}.png")
    (tmp_path / "bad.png").write_bytes(b"not an image")  # the image set lists it: a taller panel above
    w, m = window, window.model
    assert m.load_paths([str(tmp_path)], replace=True, size=32)
    wait_until(qapp, lambda: not m.loading and m.session.n == 12)
    assert m.session.data.skipped
    view = w.images_panel.view
    view.setCurrentIndex(view.model().index(3, 0))
    tp = w.transform_panel
    show_view(w, tp)
    wait_until(qapp, lambda: m.session.selected == 3 and tp.theta.isEnabled())
    for size in SIZES:
        _settle(qapp, w, size)
        assert (w.width(), w.height()) == size  # the panel does not hold the window taller than the screen
        assert w.minimumSizeHint().height() <= 700
        for name in ("rotation", "shift", "seed", "apply_btn", "reset_btn", "image_label", "theta", "theta_slider",
                     "tx", "ty", "show_original", "preview"):
            widget = getattr(tp, name)
            parent = widget.parentWidget()
            while parent is not None and not isinstance(parent, QScrollArea):
                parent = parent.parentWidget()
            if parent is not None:  # scrolled to, as a user would
                parent.ensureWidgetVisible(widget, 0, 0)
                qapp.processEvents()
            assert _fully_shown(widget, w), (size, name)


# ------------------------------------------------------------------ 3. W's hint says the next step

def test_weights_hint_says_press_start_once_images_are_loaded(window, qapp):
    w, s = window, window.model.session
    wv = w.weights_view
    assert "Open a folder" in wv.hint.text()
    assert w.load_demo("shapes")
    wait_until(qapp, lambda: s.n > 0)
    qapp.processEvents()
    assert wv.empty
    assert wv.hint.isVisible()
    assert "Open a folder" not in wv.hint.text()
    assert "Press Start" in wv.hint.text()
    assert s.clear()  # the set emptied: open a folder again
    qapp.processEvents()
    assert wv.empty
    assert wv.hint.isVisible()
    assert "Open a folder" in wv.hint.text()


# ------------------------------------------------------------------ 4. W's colour bar title and tick labels

def _colorbar_overlaps(axis):
    """The tick labels that the title "W_ij" covers, and those cut by the axis's edge (as drawn now)."""
    img = QImage(8, 8, QImage.Format.Format_ARGB32)
    p = QPainter(img)
    texts = axis.generateDrawSpecs(p)[2]  # (rect, flags, text) of each tick label, in the axis's coordinates
    p.end()
    label = axis.label
    margin = label.document().documentMargin()  # around the title's glyphs, inside its box
    title = label.mapRectToParent(label.boundingRect().adjusted(margin, margin, -margin, -margin))
    covered = [text for rect, _, text in texts if rect.intersects(title)]
    cut = [text for rect, _, text in texts if not axis.boundingRect().contains(rect)]
    return covered, cut


@pytest.mark.parametrize("top", [0.2, 0.035, 0.0125, 0.0008])  # a small set's W, 120 particles', thousands'
def test_colorbar_title_does_not_cover_its_tick_labels(run_win, qapp, top):
    w = run_win
    wv = w.weights_view
    wv.colorbar.setLevels((0.0, top))
    for size in SIZES:
        _settle(qapp, w, size)
        axis = wv.colorbar.axis
        _colorbar_overlaps(axis)  # the tick labels measured (the axis widens to them), then laid out again
        for _ in range(3):
            qapp.processEvents()
        axis = wv.colorbar.axis
        assert axis.label.isVisible()
        assert axis.label.toPlainText().strip() == "W_ij"
        covered, cut = _colorbar_overlaps(axis)
        assert not covered, (size, top, covered)
        assert not cut, (size, top, cut)


@pytest.mark.parametrize("scale", [1.0, 1.6])  # 1.6: a larger font, as in presentation mode
def test_inspect_draws_its_four_images_the_same_size(qapp, scale):
    """The trial: "v_i aligned onto v_j", the longest title, widened its column and drew its image larger."""
    from PySide6.QtGui import QFont

    from iastudio.app.views import InspectView

    view = InspectView()
    view.resize(900, 330)
    if scale != 1.0:
        big = QFont(view.font())
        big.setPointSizeF(big.pointSizeF() * scale)
        view.setFont(big)
    view.show()
    img = np.random.default_rng(0).random((48, 48)).astype(np.float32)
    view.show_pair(dict(vi=img, vj=img, aligned=img, difference=img, i=1, j=2, name_i="a.png", name_j="b.png",
                        theta_deg=10.0, tx=0.0, ty=0.0, distance=0.1, score=0.9))
    qapp.processEvents()
    drawn = [item.sceneBoundingRect().width() for item in view.items.values()]  # on screen, px
    assert min(drawn) > 50
    np.testing.assert_allclose(drawn, drawn[0], rtol=0.02)
    view.close()
