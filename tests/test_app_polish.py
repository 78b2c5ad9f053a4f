"""Issue #29, what the views draw and export: W's colour bar and range, text that is not cut off, tooltips
that wrap, figures for print, one cluster numbering, the palette, and why a run has few points (pytest-qt)."""
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from _qt import window_after_a_run  # noqa: E402
from PIL import Image  # noqa: E402
from PySide6.QtCore import QEvent, QPoint, Qt  # noqa: E402
from PySide6.QtGui import QHelpEvent  # noqa: E402
from PySide6.QtWidgets import QApplication, QLabel  # noqa: E402

from iastudio.app import theme  # noqa: E402
from iastudio.app.docks import show_view  # noqa: E402
from iastudio.app.main_window import MainWindow  # noqa: E402
from iastudio.app.projects import settings  # noqa: E402
from iastudio.app.tooltips import TIP_WIDTH  # noqa: E402
from iastudio.app.views import W_MARGIN, short_run_note  # noqa: E402

SIZES = ((1024, 700), (1280, 800), (1920, 1080))
LONG_NAME = "the horses of the first cluster"


@pytest.fixture(scope="module")
def win(qapp, home):
    """A window after a run with the default settings on the demo shapes (the guard stops it after iteration 1)."""
    w = window_after_a_run(qapp)
    yield w
    w.close()


def _settle(qapp, rounds=10):
    for _ in range(rounds):
        qapp.processEvents()


def _shows_all(label: QLabel) -> bool:
    """True when ``label`` shows its whole text: wrapped onto lines that fit, or on one line as wide as it."""
    if label.wordWrap():
        return label.height() >= label.heightForWidth(label.width())
    return label.width() >= label.fontMetrics().horizontalAdvance(label.text())


# ------------------------------------------------------------------ W: one label, a range that fits W

def test_the_colour_bar_names_w_ij_once(win, qapp):
    bar = win.weights_view
    for orientation in ("vertical", "horizontal"):
        bar._place_colorbar(orientation)
        _settle(qapp)
        shown = [bar.colorbar.getAxis(side).labelText for side in ("left", "right", "top", "bottom")
                 if bar.colorbar.getAxis(side).label.isVisible() and bar.colorbar.getAxis(side).labelText]
        assert shown == ["W_ij"], (orientation, shown)
    bar._place_colorbar(bar._colorbar_orientation())


def _range_fits(view, n):
    vb = view.plot.getPlotItem().vb
    (x0, x1), (y0, y1) = vb.viewRange()
    pad = W_MARGIN * n + 0.05 * n  # the margin asked for, and what a box a few pixels off square adds
    return (-pad <= x0 <= 0 and n <= x1 <= n + pad and -pad <= y0 <= 0 and n <= y1 <= n + pad
            and abs(vb.width() - vb.height()) <= 2)


def test_w_fills_its_view_at_every_size_and_after_a_new_run(win, qapp):
    view, n = win.weights_view, win.model.session.n
    for size in (*SIZES, (1280, 800)):
        win.resize(*size)
        _settle(qapp)
        assert _range_fits(view, n), (size, view.plot.getPlotItem().vb.viewRange())
    # the user zooms in; new images and a new run show all of W again
    view.plot.getPlotItem().vb.scaleBy((0.3, 0.3))
    _settle(qapp)
    assert not _range_fits(view, n)
    view.clear()
    view.show_frame(win.model.session.final)
    _settle(qapp)
    assert _range_fits(view, n)


# ------------------------------------------------------------------ text that is not cut off

@pytest.mark.parametrize("size", [(1024, 700), (1280, 800)])
def test_the_scrubber_and_the_captions_show_their_whole_text(win, qapp, size):
    win.rename_cluster(0, LONG_NAME)
    win.redraw()
    show_view(win, win.convergence_view)
    win.resize(*size)
    _settle(qapp)
    scrub = win.scrubber.label
    assert scrub.text().startswith("Live"), (scrub.text(), scrub.width())
    assert _shows_all(scrub), (scrub.text(), scrub.width())
    for label in (win.means_view.caption, win.convergence_view.caption):
        assert label.text(), label.text()
        assert _shows_all(label), label.text()
    assert "Cluster 3" in win.means_view.caption.text()


def test_the_legend_fits_under_the_curves_in_a_narrow_panel_with_big_text(win, qapp):
    view = win.convergence_view
    font = view.font()
    old_size = font.pointSizeF()
    font.setPointSizeF(14.0)  # presentation mode's text
    view.setFont(font)
    try:
        for width in (500, 700, 1000):
            view.setFixedWidth(width)
            _settle(qapp)
            plot = view.curves_plot
            for _, label in view.legend.items:
                right = plot.mapFromScene(label.sceneBoundingRect().topRight()).x()
                assert right <= plot.width(), (width, label.text, right, plot.width())
                assert label.text in ("within-cluster max", "within max", "between-cluster min", "between min",
                                      "median")
    finally:
        view.setMinimumWidth(0)
        view.setMaximumWidth(16777215)
        font.setPointSizeF(old_size)
        view.setFont(font)


# ------------------------------------------------------------------ tooltips wrap

def _tip_for(qapp, widget):
    """Hover ``widget`` as Qt would (a ToolTip help event) and return the tooltip label shown."""
    QApplication.sendEvent(widget, QHelpEvent(QEvent.Type.ToolTip, QPoint(2, 2), widget.mapToGlobal(QPoint(2, 2))))
    _settle(qapp, 3)
    tips = [t for t in QApplication.topLevelWidgets() if t.metaObject().className() == "QTipLabel" and t.isVisible()]
    return tips[0] if tips else None


def test_every_long_tooltip_wraps(win, qapp):
    rp = win.run_panel
    controls = [rp.beta, rp.paper_mode, rp.beta_auto, rp.dask, win.scrubber.slider, win.means_view.per_cluster,
                win.clusters_panel.k_apply, win.images_panel.view]
    for ctl in controls:
        text = ctl.toolTip()
        assert len(text) > 60
        tip = _tip_for(qapp, ctl)
        assert tip is not None, text
        one_line = tip.fontMetrics().horizontalAdvance(text)
        if one_line > TIP_WIDTH:  # a long text wraps, as rich text Qt word-wraps
            assert tip.wordWrap(), text
            assert Qt.mightBeRichText(tip.text()), text
            assert tip.height() > 2 * tip.fontMetrics().height()
        assert tip.width() <= TIP_WIDTH + 30, (tip.width(), text)  # some 60 characters a line, not 1,500 px
        assert text.split()[0] in tip.text()
    from PySide6.QtWidgets import QToolTip

    QToolTip.hideText()


# ------------------------------------------------------------------ exports for print

@pytest.mark.slow
def test_panels_export_at_print_resolution_and_as_vector_figures(win, qapp, tmp_path):
    tmp_path = Path(win.exports.panels(str(tmp_path)))
    for name in ("weights", "means", "convergence_curves", "manifold_map", "ka_means", "ia_means"):
        png = Image.open(tmp_path / f"{name}.png")
        np.testing.assert_allclose(png.info["dpi"], (300, 300), atol=0.5)
        assert abs(png.size[0] - round(16 / 2.54 * 300)) <= 2, png.size  # 16 cm wide at 300 dpi
        assert (tmp_path / f"{name}.pdf").read_bytes().startswith(b"%PDF")
        svg = (tmp_path / f"{name}.svg").read_text()
        assert "<svg" in svg
    curves = (tmp_path / "convergence_curves.svg").read_text()
    for name in ("within-cluster max", "between-cluster min", "median"):  # the legend, in full, as text
        assert f">{name}<" in curves or f"> {name}<" in curves, name
    weights_svg = (tmp_path / "weights.svg").read_text()
    assert weights_svg.count(">W_ij<") == 1
    # W's picture is the W drawn: 18 x 18 cells, its blocks the clusters (brighter inside than between)
    w = win.weights_view.image_item.image
    assert w.shape == (win.model.session.n, win.model.session.n)


def test_panels_go_into_a_new_folder_and_never_over_the_users_files(win, qapp, tmp_path, monkeypatch):
    from iastudio.app import export

    every = export._panel_figures
    monkeypatch.setattr(export, "_panel_figures",  # W alone: the folder is what is checked, not every figure
                        lambda *a, **k: {k_: v for k_, v in every(*a, **k).items() if k_ == "weights"})
    mine = tmp_path / "weights.png"  # the person's own file of that name, in the folder they choose
    Image.new("RGB", (4, 3), (200, 10, 10)).save(mine)
    before = mine.read_bytes()
    first = win.exports.panels(str(tmp_path))
    assert first == str(tmp_path / "shapes figures")
    assert mine.read_bytes() == before  # untouched, byte for byte
    drawn = Image.open(Path(first) / "weights.png")
    assert abs(drawn.size[0] - round(16 / 2.54 * 300)) <= 2  # the figure is in the new folder
    assert win.statusBar().currentMessage() == f"Exported 3 files into {first}"
    second = win.exports.panels(str(tmp_path))
    assert second == str(tmp_path / "shapes figures 2")
    assert sorted(p.name for p in Path(first).iterdir()) == ["weights.pdf", "weights.png", "weights.svg"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shapes figures", "shapes figures 2", "weights.png"]
    assert mine.read_bytes() == before


def test_panels_with_nothing_to_draw_make_no_folder(qtbot, home, tmp_path):
    w = MainWindow()
    qtbot.addWidget(w)
    assert w.exports.panels(str(tmp_path)) is None
    assert list(tmp_path.iterdir()) == []  # no empty folder left behind
    assert w.last_dialog.windowTitle() == "Nothing to export yet"


def test_panels_that_cannot_be_written_say_why(win, tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("mine")
    assert win.exports.panels(str(blocker)) is None  # a file where the folder would be: no traceback
    assert win.last_dialog.windowTitle() == "Figures not exported"
    assert str(blocker) in win.last_dialog.text()
    assert blocker.read_text() == "mine"


def test_exported_csv_numbers_clusters_as_their_names(win, tmp_path):
    import csv

    win.rename_cluster(0, LONG_NAME)
    path = win.exports.csv(str(tmp_path / "a.csv"))
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["cluster"] for r in rows} == {"1", "2", "3"}
    for r in rows:
        assert r["cluster_name"] in (f"Cluster {r['cluster']}", LONG_NAME)
    first = [r for r in rows if r["cluster_name"] == LONG_NAME]
    assert first
    assert {r["cluster"] for r in first} == {"1"}


# ------------------------------------------------------------------ the palette

@pytest.mark.slow
def test_view_palette_switches_and_is_remembered(win, qapp, tmp_path):
    app = QApplication.instance()
    original = app.palette().color(app.palette().ColorRole.Window).name()
    try:
        win.palette_actions["dark"].trigger()
        _settle(qapp)
        assert theme.is_dark(app.palette())
        img = win.weights_view.plot.grab().toImage()
        assert img.pixelColor(3, 3).lightness() < 100  # the plot is drawn dark too
        assert settings().value("view/palette") == "dark"
        other = MainWindow()
        assert other.palette_actions["dark"].isChecked()
        assert not other.palette_actions["system"].isChecked()
        other.close()
        win.palette_actions["light"].trigger()
        _settle(qapp)
        assert not theme.is_dark(app.palette())
        assert settings().value("view/palette") == "light"
    finally:
        win.palette_actions["system"].trigger()
        _settle(qapp)
    assert app.palette().color(app.palette().ColorRole.Window).name() == original
    assert settings().value("view/palette") == "system"


# ------------------------------------------------------------------ a run that stopped after iteration 1

def test_a_run_stopped_after_iteration_1_says_so_in_the_plot(win, qapp):
    view = win.convergence_view
    show_view(win, view)
    win.redraw()
    _settle(qapp)
    assert len(win.model.session.final.curves["median"]) <= 2
    assert view.note.isVisible()
    assert "left the clusters as they were" in view.note.text()
    assert "Paper mode" in view.note.text()
    assert not win.run_panel.paper_mode.isChecked()
    view.note.linkActivated.emit("paper-mode")  # the link in the note
    try:
        assert win.run_panel.paper_mode.isChecked()
    finally:
        win.run_panel.paper_mode.setChecked(False)


def test_the_note_is_only_for_a_short_run_that_the_guard_stopped():
    settled = SimpleNamespace(notes=["iteration 1 left the clusters as they were: stopped there"])
    mixed = SimpleNamespace(notes=["iteration 1 moved images between clusters without fitting the input images "
                                   "better (silhouette ...); kept the clusters of the input images and stopped"])
    assert short_run_note(settled, 2).startswith("The first iteration left the clusters")
    assert short_run_note(mixed, 1).startswith("The first iteration mixed the clusters")
    assert short_run_note(settled, 5) == ""  # a run with iterations to watch
    assert short_run_note(SimpleNamespace(notes=[]), 2) == ""  # stopped by its iteration count
    assert short_run_note(None, 1) == ""  # still running


def test_the_scrubber_counts_one_step_in_the_singular(qapp):
    from iastudio.app.scrubber import IterationScrubber

    s = IterationScrubber()
    s.set_count(1)
    assert s.label.text() == "Live · 1 step"
    s.set_count(3)
    assert s.label.text() == "Live · 3 steps"
