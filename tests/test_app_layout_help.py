"""Issue #12: a layout that fits, empty states, the palette, exports, help, menus, presentation mode (pytest-qt)."""
import ast
import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from _qt import PointerEvent, wait_until  # noqa: E402
from PIL import Image  # noqa: E402
from PySide6.QtCore import QRect, QSize  # noqa: E402
from PySide6.QtGui import QColor, QKeySequence  # noqa: E402
from PySide6.QtWidgets import (  # noqa: E402
    QApplication,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QPushButton,
    QSlider,
    QSpinBox,
)

from iastudio.app import theme  # noqa: E402
from iastudio.app.context_menus import cluster_menu, thumbnail_menu  # noqa: E402
from iastudio.app.docks import show_view  # noqa: E402
from iastudio.app.help import shortcut_rows, shortcuts_dialog  # noqa: E402
from iastudio.app.layout import fit_to_screen, fitted_size  # noqa: E402
from iastudio.app.main_window import MainWindow  # noqa: E402
from iastudio.app.projects import settings  # noqa: E402
from iastudio.core.clusterbook import UNASSIGNED  # noqa: E402
from iastudio.core.wording import count_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def window(shared_window):
    """One window for the module's tests (conftest's ``module_window``), put back before each."""
    return shared_window


def _wait(app, pred, timeout=60.0):
    wait_until(app, pred, timeout)


# ------------------------------------------------------------------ M3: a layout that fits

def test_long_names_do_not_widen_the_window(run_win, qapp):
    w = run_win
    w.resize(1024, 768)
    qapp.processEvents()
    width = w.width()
    long = "/data/" + "a_really_long_folder_name_" * 12 + "image.png"
    w.weights_view.set_names([long] * w.model.session.n)
    w.weights_view._hover(PointerEvent(0.5, 1.5))  # hovering W names both images
    assert "a_really_long" in w.weights_view.hover.text()
    w.means_view.caption.setText("means " * 80)
    w.transform_panel.load_image("b_very_long_file_name_" * 10 + ".png", 0.0, 0.0, 0.0)
    for view in (w.weights_view, w.means_view, w.compare_view, w.inspect_view):
        view.title.setText(view.title.text() + " with a much longer title than fits" * 3)
    qapp.processEvents()
    for label in (w.weights_view.hover, w.means_view.caption, w.transform_panel.image_label,
                  w.weights_view.title, w.compare_view.title):
        assert label.minimumSizeHint().width() < 300, label.text()  # elides (or wraps) instead of widening
    assert w.width() == width
    assert w.minimumSizeHint().width() < 1024
    assert w.minimumSizeHint().height() < 700  # fits a 1024 x 768 screen with a task bar and a title bar


def test_window_size_fits_the_screen_and_restored_geometry_is_clamped(qtbot):
    small = QRect(0, 0, 1024, 768)
    assert fitted_size(QSize(1280, 800), small) == QSize(1016, 736)
    assert fitted_size(QSize(900, 600), small) == QSize(900, 600)  # never grown
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    w.resize(1500, 1100)
    w.move(2000, 1500)
    fit_to_screen(w, small)
    frame = w.frameGeometry()
    assert frame.width() <= 1024
    assert frame.height() <= 768
    assert small.contains(frame.topLeft())
    # a geometry saved on a bigger screen is clamped to this one when it is restored
    w.resize(1900, 1150)
    settings().setValue("window/geometry", w.saveGeometry())
    w.close()
    w2 = MainWindow()
    qtbot.addWidget(w2)
    avail = w2.screen().availableGeometry()
    assert w2.width() <= avail.width()
    assert w2.height() <= avail.height()
    assert avail.contains(w2.frameGeometry().topLeft())


def _square(view):
    """The side of the largest square (W) the weight view's plot area holds."""
    vb = view.plot.getPlotItem().vb
    return min(vb.width(), vb.height())


def _force_colorbar(view, orientation, qtbot):
    """Hold the colour bar at ``orientation`` (the view re-decides on every resize); None: the view decides."""
    if orientation is None:
        del view._colorbar_orientation  # the method again
    else:
        view._colorbar_orientation = lambda: orientation
    view._place_colorbar(view._colorbar_orientation())
    qtbot.wait(300)  # the plot lays itself out again (its margins keep W's box square)


def test_w_and_the_means_share_the_middle_and_the_colour_bar_leaves_w_room(qtbot, home):
    w = MainWindow()
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    qtbot.waitUntil(lambda: w.central_splitter.width() > 0)
    left, right = w.central_splitter.sizes()
    assert abs(left - right) <= 2
    assert left > 400
    w.resize(792, 568)  # an 800 x 600 screen
    qtbot.wait(50)
    left, right = w.central_splitter.sizes()
    assert abs(left - right) <= 2
    w.model.session.load_demo("shapes")
    w.run_panel.size.setValue(24)
    w.run_panel.iterations.setValue(1)
    w.start_run()
    qtbot.waitUntil(lambda: w.model.session.state == "finished", timeout=60000)
    w.redraw()
    view = w.weights_view
    qtbot.wait(50)
    # Wherever the bar went at this size (fonts and the screen decide the margins), it left W the larger
    # square of the two places, and W stays readable.
    chosen, here = view.colorbar.horizontal, _square(view)
    _force_colorbar(view, "vertical" if chosen else "horizontal", qtbot)
    assert _square(view) <= here + 1
    assert here > 50
    _force_colorbar(view, None, qtbot)
    assert view.colorbar.horizontal == chosen
    levels = tuple(view.colorbar.levels())
    w.resize(1280, 800)
    w.central_splitter.setSizes([200, 700])  # W given a narrow, tall panel: the bar goes below it
    qtbot.wait(50)
    assert view.colorbar.horizontal
    np.testing.assert_allclose(view.colorbar.levels(), levels)  # the same colour scale
    np.testing.assert_allclose(view.image_item.levels, levels)
    below = _square(view)
    _force_colorbar(view, "vertical", qtbot)
    assert _square(view) < below - 20  # the bar beside W would have left a smaller square
    _force_colorbar(view, None, qtbot)
    w.central_splitter.setSizes([450, 450])
    qtbot.wait(50)
    assert not view.colorbar.horizontal
    tick_text = view.colorbar.axis.labelString()
    assert "x0.0" not in tick_text  # plain W values on the bar, no SI multiplier
    w.central_splitter.setSizes([200, 700])
    qtbot.wait(50)
    assert "x0.0" not in view.colorbar.axis.labelString()
    assert view.colorbar.axis.autoSIPrefixScale == 1.0  # the ticks read 0.05, not 50


# ------------------------------------------------------------------ empty states, palette, exports, wording
def test_views_say_what_to_do_until_they_have_data(window, qtbot):
    views = [window.weights_view, window.means_view, window.convergence_view, window.compare_view,
             window.inspect_view]
    for v in views:  # no placeholder plots: a hint instead
        assert v.empty
        assert v.stack.currentWidget() is v.hint
        assert v.hint.isVisibleTo(v)
        assert len(v.hint.text()) > 20
        assert not any(p.isVisibleTo(v) for p in v.plot_widgets())
    assert "Run" in window.weights_view.hint.text()
    m = window.model
    m.session.load_demo("shapes")
    window.run_panel.size.setValue(24)
    window.run_panel.iterations.setValue(1)
    window.start_run()
    qtbot.waitUntil(lambda: m.session.state == "finished", timeout=60000)
    window.redraw()
    for v in views[:4]:
        assert not v.empty
        assert v.plot_widgets()[0].isVisibleTo(v)
    assert window.inspect_view.empty  # nothing inspected yet
    window.inspect_pair(0, 1)
    qtbot.waitUntil(lambda: not window.inspect_view.empty, timeout=10000)
    m.session.load_demo("digits")  # new images: back to the hints
    assert all(v.empty for v in views)


def _lightness(img, rect=None):
    a = np.asarray(img.convert("L"), dtype=float)
    if rect is not None:
        x0, y0, x1, y1 = rect
        a = a[y0:y1, x0:x1]
    return a


def _grab(widget, path):
    widget.grab().save(str(path))
    return Image.open(path)


def test_plots_and_hints_follow_a_dark_palette(run_win, qapp, tmp_path):
    old = QApplication.palette()
    try:
        QApplication.setPalette(theme.dark_palette())
        qapp.processEvents()
        plot = run_win.weights_view.plot
        img = _grab(plot, tmp_path / "w.png")
        base = theme.dark_palette().color(theme.QPalette.ColorRole.Base)
        corner = img.convert("RGB").getpixel((img.width - 3, 3))
        assert QColor(*corner) == base  # the plot background is the palette's, not white
        left = plot.mapFromScene(plot.getPlotItem().getAxis("left").sceneBoundingRect()).boundingRect()
        axis = _lightness(img, (left.left(), 0, left.right(), img.height))  # the left axis: light labels on dark
        assert axis.max() > 180
        assert np.median(axis) < 60
        curves = _grab(run_win.convergence_view.curves_plot, tmp_path / "c.png")
        legend = run_win.convergence_view.legend
        assert run_win.convergence_view.legend.labelTextColor() == theme.dark_palette().color(
            theme.QPalette.ColorRole.Text)
        assert legend.items
        assert all("color: #e6e6e6" in lab.item.toHtml() or "#e6e6e6" in lab.item.toHtml()
                                    for _, lab in legend.items)
        assert np.median(_lightness(curves)) < 60
        # an empty view's hint is readable on the dark window
        hint = run_win.compare_view.hint
        run_win.compare_view.clear()
        show_view(run_win, run_win.compare_view)
        qapp.processEvents()
        h = _lightness(_grab(hint, tmp_path / "h.png"))
        assert np.median(h) < 70
        assert h.max() > 170
    finally:
        QApplication.setPalette(old)
        run_win.compare_view.show_final(run_win.model.session.final)
        qapp.processEvents()
    img = _grab(run_win.weights_view.plot, tmp_path / "w2.png")
    corner = img.convert("RGB").getpixel((img.width - 3, 3))  # W fills its square box: read the background
    assert QColor(*corner) == old.color(theme.QPalette.ColorRole.Base)  # back to light


@pytest.mark.slow
def test_exported_panels_leave_out_the_selection_and_the_colour_bar_handles(run_win, qapp, tmp_path):
    w = run_win
    w.model.session.select([])
    qapp.processEvents()
    plain = Path(w.exports.panels(str(tmp_path / "plain")))
    w.model.session.select([2, 5])
    qapp.processEvents()
    assert w.weights_view.overlay.isVisible()
    assert w.weights_view.colorbar.region.isVisible()
    selected = Path(w.exports.panels(str(tmp_path / "selected")))
    for name in ("weights", "means"):
        a = np.asarray(Image.open(plain / f"{name}.png"))
        b = np.asarray(Image.open(selected / f"{name}.png"))
        assert a.shape == b.shape, name
        assert np.array_equal(a, b), name  # the red tint is not in the picture
    assert w.weights_view.overlay.isVisible()
    assert w.weights_view.colorbar.region.isVisible()
    w.model.session.select([])


def test_the_legend_sits_clear_of_the_curves(run_win, qapp):
    cv = run_win.convergence_view
    qapp.processEvents()
    vb = cv.curves_plot.getPlotItem().getViewBox()
    legend, area = cv.legend.sceneBoundingRect(), vb.sceneBoundingRect()
    assert legend.height() > 5
    assert area.height() > 50
    assert not legend.intersects(area)
    assert cv.curves_plot.sceneRect().contains(legend)  # and it is not clipped away


def test_one_cluster_is_singular(window, qtbot):
    assert count_of(1, "cluster") == "1 cluster"
    assert count_of(3, "cluster") == "3 clusters"
    m = window.model
    m.session.load_demo("shapes")
    window.run_panel.size.setValue(24)
    window.run_panel.iterations.setValue(1)
    window.run_panel.clusters_auto.setChecked(False)
    window.run_panel.clusters.setValue(1)
    messages = []
    m.session.events.message.connect(messages.append)
    window.start_run()
    qtbot.waitUntil(lambda: m.session.state == "finished", timeout=60000)
    assert any(t.startswith("Done: 1 cluster in") for t in messages), messages
    assert window.compare_view.caption.text().startswith("1 cluster found")


# ------------------------------------------------------------------ help
CONTROL_TYPES = (QSpinBox, QDoubleSpinBox, QComboBox, QCheckBox, QPushButton, QSlider)


def test_every_control_in_the_panels_has_a_plain_tooltip(window):
    panels = [window.images_panel, window.transform_panel, window.run_panel, window.clusters_panel,
              window.nets_panel, window.means_view]
    checked = 0
    for panel in panels:
        for kind in CONTROL_TYPES:
            for ctl in panel.findChildren(kind):
                if "qt_spinbox" in ctl.objectName():
                    continue
                assert len(ctl.toolTip()) > 15, (type(panel).__name__, type(ctl).__name__, ctl.objectName(),
                                                 getattr(ctl, "text", lambda: "")())
                checked += 1
    assert checked >= 35


def test_f1_opens_the_quick_start_inside_the_app(window, qtbot):
    f1 = [a for a in window.findChildren(type(window.start_action))
          if QKeySequence(QKeySequence.StandardKey.HelpContents) in a.shortcuts()]
    assert len(f1) == 1  # one action only: two on F1 would make the key do nothing
    f1[0].trigger()
    dlg = window.quick_start
    assert dlg.isVisible()
    text = dlg.browser.toPlainText()
    for needle in ("Open folder", "Demo", "Start", "Clusters", "Ctrl+Z", "Export"):
        assert needle in text


def test_the_shortcut_list_is_read_from_the_actions(window):
    rows = shortcut_rows(window)
    commands = {(c, k) for _, c, k in rows}
    assert ("Start", QKeySequence("Ctrl+R").toString(QKeySequence.SequenceFormat.NativeText)) in commands
    assert any(c == "Quick start" for _, c, _ in rows)
    assert any(c == "Presentation mode" for _, c, _ in rows)
    act = window.menuBar().actions()[0].menu().addAction("A brand-new command")
    act.setShortcut(QKeySequence("Ctrl+Alt+J"))
    dlg = shortcuts_dialog(window)
    assert dlg.isVisible()
    assert dlg.table.rowCount() == len(rows) + 1
    cells = [dlg.table.item(r, 1).text() for r in range(dlg.table.rowCount())]
    assert "A brand-new command" in cells


def test_double_click_a_thumbnail_shows_it_large_with_its_path(window, qtbot):
    window.model.session.load_demo("shapes")
    index = window.images_panel.thumbs.index(4)
    window.images_panel.view.doubleClicked.emit(index)
    dlg = window.image_dialog
    assert dlg.isVisible()
    path = window.model.session.data.paths[4]
    assert dlg.path.text() == path
    assert Path(path).name.split("/")[-1] in dlg.name_label.text()
    assert dlg.picture.pixmap().width() >= 256


def test_thumbnail_size_slider(window):
    window.model.session.load_demo("shapes")
    panel = window.images_panel
    panel.thumb_size.setValue(120)
    assert panel.view.iconSize() == QSize(120, 120)
    pm = panel.thumbs.data(panel.thumbs.index(0), 1)  # DecorationRole
    assert pm.width() == 120
    panel.thumb_size.setValue(40)
    assert panel.thumbs.data(panel.thumbs.index(0), 1).width() == 40


def test_context_menus_call_the_existing_edits(run_win, qapp):
    w, m = run_win, run_win.model
    book = m.session.book
    menu = cluster_menu(w, 0)
    texts = [a.text() for a in menu.actions() if a.text()]
    assert "Merge the selected clusters" in texts  # none or one selected: not "the 1 selected clusters"
    assert any(t.startswith("Select the images") for t in texts)
    assert any(t.startswith("Rename") for t in texts)
    assert any(t.startswith("Merge") for t in texts)
    assert any(t.startswith("Split") for t in texts)
    next(a for a in menu.actions() if a.text().startswith("Select the images")).trigger()
    assert m.session.selection == book.members(0).tolist()
    # thumbnails: move two images to another cluster, then undo
    target = next(c for c in book.cluster_ids() if c != book.labels[0])
    tmenu = thumbnail_menu(w, [0, 1])
    move = next(a.menu() for a in tmenu.actions() if a.menu() is not None)
    assert move.title() == "Move 2 images to"
    next(a for a in move.actions() if a.text() == book.name_of(target)).trigger()
    assert m.session.book.labels[0] == target
    assert m.session.book.labels[1] == target
    w.undo_action.trigger()
    assert m.session.book == book
    inspect = next(a for a in tmenu.actions() if a.text().startswith("Inspect"))
    assert inspect.isEnabled()
    unassign = next(a for a in thumbnail_menu(w, [3]).actions() if a.text().startswith("Unassign"))
    unassign.trigger()
    assert m.session.book.labels[3] == UNASSIGNED
    w.undo_action.trigger()
    # right-click really opens them
    lst = w.clusters_panel.list
    lst.customContextMenuRequested.emit(lst.visualItemRect(lst.item(0)).center())
    assert w.context_menu is not None
    assert w.context_menu.isVisible()
    w.context_menu.close()
    view = w.images_panel.view
    view.customContextMenuRequested.emit(view.visualRect(w.images_panel.thumbs.index(2)).center())
    assert w.context_menu.isVisible()
    assert any(a.text() == "Show large…" for a in w.context_menu.actions())
    w.context_menu.close()


# ------------------------------------------------------------------ presentation mode
def test_presentation_mode_enlarges_and_hides_the_controls_then_comes_back(run_win, qapp):
    w = run_win
    left = w.images_panel.parentWidget()
    size = w.weights_view.font().pointSizeF()
    tick = w.weights_view.plot.getAxis("left").style["tickFont"].pointSizeF()
    assert left.isVisible()
    w.presentation_action.trigger()
    qapp.processEvents()
    assert not left.isVisible()
    assert w.presentation_action.isChecked()
    assert w.weights_view.font().pointSizeF() >= 1.4 * size
    assert w.weights_view.plot.getAxis("left").style["tickFont"].pointSizeF() >= 1.4 * tick
    w.presentation_action.trigger()
    qapp.processEvents()
    assert left.isVisible()
    assert w.weights_view.font().pointSizeF() == size
    assert w.weights_view.plot.getAxis("left").style["tickFont"].pointSizeF() == tick


# ------------------------------------------------------------------ minor items
def test_run_menu_and_settings_follow_the_run_state(window, qtbot):
    assert window.start_action.isEnabled()
    assert not window.stop_action.isEnabled()
    assert not window.resume_action.isEnabled()
    m = window.model
    m.session.load_demo("digits")
    window.run_panel.size.setValue(24)  # the states are the same at any size
    window.run_panel.iterations.setValue(1)
    states = []
    m.session.events.state.connect(lambda s: states.append((s, window.stop_action.isEnabled(),
                                                       window.start_action.isEnabled(),
                                                       window.run_panel.iterations.isEnabled(),
                                                       window.run_panel.method.isEnabled())))
    window.start_action.trigger()
    qtbot.waitUntil(lambda: m.session.state in ("finished", "failed"), timeout=60000)
    assert ("running", True, False, False, False) in states  # settings locked while it runs
    assert window.run_panel.iterations.isEnabled()
    assert window.start_action.isEnabled()
    assert not window.run_panel.beta.isEnabled()  # still follows its 'auto' box
    assert not window.stop_action.isEnabled()
    assert not window.resume_action.isEnabled()


def test_skipped_files_are_listed_in_the_panel(window, qtbot, tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    img = np.zeros((20, 20), np.uint8)
    img[5:12, 4:15] = 255
    for k in range(3):
        Image.fromarray(np.roll(img, k, axis=1)).save(folder / f"{k}.png")
    (folder / "broken.png").write_text("not an image")
    with qtbot.waitSignal(window.model.imagesLoaded, timeout=30000):
        assert window.load_paths([str(folder)])
    lst = window.images_panel.skipped_list
    assert lst.isVisible()
    assert lst.count() == 1
    assert "broken.png" in lst.item(0).text()
    assert str(folder / "broken.png") in lst.item(0).toolTip()
    window.model.session.load_demo("shapes")
    assert not lst.isVisible()


def test_no_function_in_the_app_is_longer_than_80_lines():
    long = []
    for path in sorted((ROOT / "app").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 80:
                    long.append(f"{path.name}:{node.name} ({n} lines)")
    assert not long, long
