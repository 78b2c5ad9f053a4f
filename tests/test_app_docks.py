"""Issue #12 item 4: dockable panels, View → Reset layout, the arrangement saved with the window (pytest-qt)."""
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import QByteArray, Qt  # noqa: E402
from PySide6.QtWidgets import QDockWidget, QTabBar  # noqa: E402

from iastudio.app.docks import CONTROLS, DOCKS, LAYOUT_VERSION, STATE_KEY, is_shown, show_view  # noqa: E402
from iastudio.app.main_window import MainWindow  # noqa: E402
from iastudio.app.projects import settings  # noqa: E402

LEFT, RIGHT = Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea
BOTTOM = Qt.DockWidgetArea.BottomDockWidgetArea


def _window(qtbot, qapp, size=(1280, 800)):
    w = MainWindow()
    qtbot.addWidget(w)
    w.resize(*size)
    w.show()
    qapp.processEvents()
    return w


@pytest.fixture
def win(qtbot, qapp):
    w = _window(qtbot, qapp)
    yield w
    w.model.shutdown(5000)


def _assert_default(w, qapp):
    """Every panel docked, open and where the window always had it: controls left, views below W and the means."""
    qapp.processEvents()
    d = w.docks
    for spec in DOCKS:
        assert not d[spec.name].isFloating(), spec.name
        assert not d[spec.name].isHidden(), spec.name
        assert w.dockWidgetArea(d[spec.name]) == spec.area, spec.name
    assert {x.objectName() for x in w.tabifiedDockWidgets(d["run"])} == {"dock-transforms", "dock-clusters"}
    assert len(w.tabifiedDockWidgets(d["convergence"])) == 3
    assert is_shown(w, w.run_panel)
    assert is_shown(w, w.convergence_view)
    assert is_shown(w, w.images_panel)
    assert not is_shown(w, w.clusters_panel)
    assert not is_shown(w, w.compare_view)
    central = w.centralWidget().geometry()
    images, run, conv = (d[k].geometry() for k in ("images", "run", "convergence"))
    assert images.right() < central.left()
    assert run.right() < central.left()
    assert images.bottom() < run.top()  # the image set above the Run tabs
    assert conv.top() > central.bottom()
    assert conv.left() >= central.left() - 8
    assert 0.2 * w.width() < images.width() < 0.4 * w.width()


def test_panels_are_docks_in_the_default_arrangement(win, qapp):
    assert win.weights_view.window() is win
    assert win.centralWidget().isAncestorOf(win.weights_view)
    assert win.centralWidget().isAncestorOf(win.means_view)
    assert win.centralWidget().isAncestorOf(win.scrubber)
    for spec in DOCKS:
        dock = win.docks[spec.name]
        assert isinstance(dock, QDockWidget)
        assert dock.widget() is getattr(win, spec.attr)
        feats = dock.features()
        for f in (QDockWidget.DockWidgetFeature.DockWidgetClosable, QDockWidget.DockWidgetFeature.DockWidgetMovable,
                  QDockWidget.DockWidgetFeature.DockWidgetFloatable):
            assert feats & f, (spec.name, f)
    _assert_default(win, qapp)
    texts = [a.text() for a in win.view_menu.actions()]
    assert texts[0] == "Presentation mode"
    assert texts[-1] == "Reset layout"
    assert all(spec.title in texts for spec in DOCKS)  # every panel can be shown from the View menu


def test_a_closed_panel_comes_back_from_the_view_menu(win, qapp):
    dock = win.docks["clusters"]
    act = next(a for a in win.view_menu.actions() if a.text() == "Clusters")
    show_view(win, win.clusters_panel)
    assert act.isChecked()
    assert is_shown(win, win.clusters_panel)
    dock.close()  # the title bar's close button
    qapp.processEvents()
    assert not dock.isVisible()
    assert not act.isChecked()
    assert not show_view(win, win.clusters_panel)  # a closed panel is not forced open by the program...
    assert dock.isHidden()
    act.trigger()  # ...only by the user
    qapp.processEvents()
    assert dock.isVisible()
    assert act.isChecked()
    assert w_area(win, dock) == LEFT
    assert not dock.visibleRegion().isEmpty()


def w_area(w, dock):
    return w.dockWidgetArea(dock)


def test_reset_layout_puts_every_panel_back(win, qapp):
    d = win.docks
    d["images"].setFloating(True)
    d["compare"].close()
    win.removeDockWidget(d["clusters"])
    win.addDockWidget(RIGHT, d["clusters"])
    d["clusters"].show()
    win.resizeDocks([d["run"]], [150], Qt.Orientation.Horizontal)
    win.presentation_action.trigger()
    qapp.processEvents()
    assert w_area(win, d["clusters"]) == RIGHT
    assert d["images"].isHidden()
    win.reset_layout_action.trigger()
    assert not win.presentation_action.isChecked()
    _assert_default(win, qapp)


def test_the_arrangement_is_saved_with_the_window_and_restored(qtbot, qapp):
    w = _window(qtbot, qapp)
    d = w.docks
    d["inspect"].close()
    w.removeDockWidget(d["networks"])
    w.addDockWidget(RIGHT, d["networks"])
    d["networks"].show()
    w.presentation_action.trigger()  # closing in presentation mode saves the arrangement under it
    w.close()
    assert settings().value(STATE_KEY) is not None
    w2 = _window(qtbot, qapp)
    assert w2.docks["inspect"].isHidden()
    assert w_area(w2, w2.docks["networks"]) == RIGHT
    assert not w2.docks["images"].isHidden()
    assert not w2.docks["run"].isHidden()
    assert not w2.presentation_action.isChecked()
    w2.reset_layout_action.trigger()
    _assert_default(w2, qapp)
    w2.close()


def _shown_tab_bars(w):
    bars = w.findChildren(QTabBar, options=Qt.FindChildOption.FindDirectChildrenOnly)
    return sorted(tuple(b.tabText(i) for i in range(b.count())) for b in bars if b.isVisible())


def test_a_restored_arrangement_leaves_no_stale_tab_bar_in_view(qtbot, qapp):
    """Restoring a saved arrangement at start-up used to leave the default arrangement's tab bars shown
    where they were (one over the iteration slider): only the two tab groups' bars are in view."""
    groups = [("Manifold convergence", "KA vs IA", "Inspect", "Networks"), ("Run", "Transforms", "Clusters")]
    w = _window(qtbot, qapp)
    assert _shown_tab_bars(w) == groups
    w.close()
    assert settings().value(STATE_KEY) is not None
    w2 = _window(qtbot, qapp)
    assert _shown_tab_bars(w2) == groups
    w2.reset_layout_action.trigger()
    w2.presentation_action.trigger()
    w2.presentation_action.trigger()
    assert _shown_tab_bars(w2) == groups
    w2.close()


@pytest.mark.parametrize("saved", ["garbled", *(pytest.param(s, marks=pytest.mark.slow)
                                                for s in ("old version", "not bytes"))])
def test_a_stale_or_damaged_saved_arrangement_is_ignored(qtbot, qapp, saved):
    w = _window(qtbot, qapp)
    w.docks["compare"].close()
    state = w.saveState(LAYOUT_VERSION - 1 if saved == "old version" else LAYOUT_VERSION)
    w.model.shutdown(5000)
    w.hide()
    value = {"garbled": QByteArray(bytes(state)[:40] + b"\x07" * 60), "old version": state,
             "not bytes": "a string in a hand-edited settings file"}[saved]
    settings().setValue(STATE_KEY, value)
    w2 = _window(qtbot, qapp)
    _assert_default(w2, qapp)
    w2.model.shutdown(5000)


def test_presentation_mode_closes_every_control_panel_and_puts_them_back(win, qapp):
    d = win.docks
    d["clusters"].setFloating(True)  # a floating control panel is a control panel too
    d["clusters"].show()
    show_view(win, win.transform_panel)
    qapp.processEvents()
    win.presentation_action.trigger()
    qapp.processEvents()
    assert all(d[name].isHidden() for name in CONTROLS)
    assert is_shown(win, win.convergence_view)
    assert win.weights_view.isVisible()
    win.presentation_action.trigger()
    qapp.processEvents()
    assert d["clusters"].isFloating()
    assert d["clusters"].isVisible()
    assert is_shown(win, win.transform_panel)
    assert not is_shown(win, win.run_panel)
    assert is_shown(win, win.images_panel)


def test_presentation_mode_gives_w_and_the_means_half_the_height(qtbot, qapp):
    """The trial: after Show me (the comparison at 70 %), presentation mode made W smaller, its label cut."""
    from iastudio.app.demo import TABS_SHARE

    w = _window(qtbot, qapp, size=(1024, 700))
    show_view(w, w.compare_view, reopen=True, share=TABS_SHARE)
    qapp.processEvents()
    below = w.docks["compare"] if "compare" in w.docks else next(
        d for d in w.docks.values() if d.widget() is w.compare_view)
    assert w.centralWidget().height() < 0.7 * below.height()
    w.presentation_action.trigger()
    # the bottom area (the dock and its tab bar) about as tall as W and the means
    qtbot.waitUntil(lambda: w.centralWidget().height() == pytest.approx(below.height(), rel=0.25), timeout=3000)
    w.presentation_action.trigger()
    w.model.shutdown(5000)


def test_inspecting_brings_its_panel_forward_unless_it_was_closed(win, qapp):
    w, m = win, win.model
    m.session.load_demo("shapes")
    qapp.processEvents()
    assert is_shown(w, w.convergence_view)
    w.inspect_pair(0, 1)
    qapp.processEvents()
    assert is_shown(w, w.inspect_view)
    assert not is_shown(w, w.convergence_view)
    w.docks["inspect"].close()
    show_view(w, w.compare_view)
    w.inspect_pair(0, 2)
    qapp.processEvents()
    assert w.docks["inspect"].isHidden()
    assert is_shown(w, w.compare_view)


def test_the_window_with_docks_still_fits_a_small_screen(qtbot, qapp):
    w = _window(qtbot, qapp, (1024, 768))
    hint = w.minimumSizeHint()
    assert hint.width() < 1024
    assert hint.height() < 700
    for dock in w.docks.values():
        assert dock.minimumSizeHint().width() < 1024 // 2
    w.model.shutdown(5000)


def test_a_narrow_panel_never_cuts_its_plots(win, qapp):
    """Dragged narrow, a view's plots shrink with it: a long plot title is cut, not the plot (pyqtgraph would
    otherwise hold the plot at its title's width and the panel would show only part of it)."""
    for name in ("convergence", "compare"):
        dock = win.docks[name]
        view = dock.widget()
        view.set_empty(False)
        dock.setFloating(True)
        dock.resize(300, 320)
        qapp.processEvents()
        for plot in view.plot_widgets():
            item = plot.getPlotItem()
            assert 0 < plot.width() < 200, (name, plot.width())
            assert item.size().width() <= plot.width() + 1, (name, item.titleLabel.text, item.size().width())


@pytest.mark.slow
def test_a_floating_panel_saved_off_every_screen_comes_back_into_the_window(qtbot, qapp):
    w = _window(qtbot, qapp)
    d = w.docks["images"]
    d.setFloating(True)
    d.move(9000, 7000)  # e.g. on a second monitor that is gone next time
    qapp.processEvents()
    w.close()
    w2 = _window(qtbot, qapp)
    d2 = w2.docks["images"]
    screens = [s.availableGeometry() for s in qapp.screens()]
    assert not d2.isHidden()
    assert not d2.isFloating() or any(r.intersects(d2.frameGeometry()) for r in screens), d2.frameGeometry()
    w2.close()
