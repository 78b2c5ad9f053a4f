"""Dockable panels, napari-style: W and the means in the middle, every other panel a dock.

The image set and the Run / Transforms / Clusters tabs sit on the left, the Manifold convergence / KA vs IA /
Inspect / Networks tabs at the bottom (the arrangement the window always had).  Each panel can be moved,
floated, tabbed with another or closed; the View menu lists them (a closed one comes back from there) and
*View → Reset layout* puts everything back.  The arrangement is saved with the window's geometry, tagged
with :data:`LAYOUT_VERSION`: a state saved by another layout (or a damaged one) is ignored.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from PySide6.QtCore import QByteArray, Qt, QTimer
from PySide6.QtGui import QAction, QFont
from PySide6.QtWidgets import QDockWidget, QGroupBox, QMainWindow, QTabBar, QTabWidget

__all__ = [
    "CONTROLS",
    "DOCKS",
    "LAYOUT_VERSION",
    "add_dock_actions",
    "add_docks",
    "dock_of",
    "is_presentation_mode",
    "is_shown",
    "reset_layout",
    "restore_window",
    "save_window",
    "set_presentation_mode",
    "show_view",
]

LAYOUT_VERSION = 1  # bump when the set of docks or their names change: older saved layouts are then ignored
GEOMETRY_KEY, STATE_KEY = "window/geometry", "window/state"
LEFT, BOTTOM = Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.BottomDockWidgetArea
LEFT_SHARE = 0.29  # of the window's width (370 of 1280 px)
IMAGES_SHARE = 0.41  # of the left column's height, the rest for the Run / Transforms / Clusters tabs
BOTTOM_SHARE = 0.47  # of the height below the menus, for the bottom tabs
PRESENTATION_SCALE = 1.5


@dataclass(frozen=True)
class Dock:
    name: str  # the dock's object name (what a saved layout refers to)
    title: str
    attr: str  # the window attribute holding the panel
    area: Qt.DockWidgetArea


DOCKS = (Dock("images", "Image set", "images_panel", LEFT), Dock("run", "Run", "run_panel", LEFT),
         Dock("transforms", "Transforms", "transform_panel", LEFT),
         Dock("clusters", "Clusters", "clusters_panel", LEFT),
         Dock("convergence", "Manifold convergence", "convergence_view", BOTTOM),
         Dock("compare", "KA vs IA", "compare_view", BOTTOM), Dock("inspect", "Inspect", "inspect_view", BOTTOM),
         Dock("networks", "Networks", "nets_panel", BOTTOM))
CONTROLS = ("images", "run", "transforms", "clusters")  # what presentation mode hides


def add_docks(window: QMainWindow) -> None:
    """Put each panel of :data:`DOCKS` in a dock (``window.docks[name]``) in the default arrangement."""
    window.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks
                          | QMainWindow.DockOption.AllowNestedDocks)
    window.setTabPosition(Qt.DockWidgetArea.AllDockWidgetAreas, QTabWidget.TabPosition.North)
    for corner, area in ((Qt.Corner.TopLeftCorner, LEFT), (Qt.Corner.BottomLeftCorner, LEFT),
                         (Qt.Corner.TopRightCorner, Qt.DockWidgetArea.RightDockWidgetArea),
                         (Qt.Corner.BottomRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)):
        window.setCorner(corner, area)  # the side columns take the full height, the bottom tabs sit between
    window.docks = {}
    for spec in DOCKS:
        panel = getattr(window, spec.attr)
        if isinstance(panel, QGroupBox):
            panel.setTitle("")  # the dock's title bar (or its tab) names it
        dock = QDockWidget(spec.title, window)
        dock.setObjectName(f"dock-{spec.name}")
        dock.setWidget(panel)
        dock.toggleViewAction().setText(spec.title)
        dock.toggleViewAction().setToolTip(f"Show or hide the {spec.title} panel")
        window.docks[spec.name] = dock
    _arrange(window)
    window.default_layout = window.saveState(LAYOUT_VERSION)  # what View → Reset layout goes back to
    _restore_state(window, window.default_layout)  # the tab bars of tabifying one dock at a time out of view


def _arrange(window) -> None:
    """The default arrangement (once, on new docks): the first of each tab group in front."""
    d = window.docks
    for area in (LEFT, BOTTOM):
        window.addDockWidget(area, d[next(s.name for s in DOCKS if s.area == area)])
    window.splitDockWidget(d["images"], d["run"], Qt.Orientation.Vertical)
    for group in (("run", "transforms", "clusters"), ("convergence", "compare", "inspect", "networks")):
        for before, name in itertools.pairwise(group):
            window.tabifyDockWidget(d[before], d[name])
    d["run"].raise_()
    d["convergence"].raise_()
    _default_sizes(window)


def _default_sizes(window) -> None:
    d, w, h = window.docks, window.width(), window.height() - window.menuBar().sizeHint().height()
    window.resizeDocks([d["images"]], [int(w * LEFT_SHARE)], Qt.Orientation.Horizontal)
    window.resizeDocks([d["images"], d["run"]], [int(h * IMAGES_SHARE), int(h * (1 - IMAGES_SHARE))],
                       Qt.Orientation.Vertical)
    window.resizeDocks([d["convergence"]], [int(h * BOTTOM_SHARE)], Qt.Orientation.Vertical)
    if getattr(window, "central_splitter", None) is not None:
        window.central_splitter.share_evenly()  # W and the means share the middle evenly


def _restore_state(window, state) -> bool:
    """``window.restoreState(state)``, leaving visible only the tab bars of the restored tab groups.

    Qt builds new tab bars for the restored groups but leaves the ones of the arrangement before it
    shown where they were: after a saved layout was restored at start-up, a stale copy of the bottom
    panels' tabs lay over the iteration slider.  Hiding every tab bar of the docks first lets the
    restore show only the bars it uses.
    """
    shown = [bar for bar in window.findChildren(QTabBar, options=Qt.FindChildOption.FindDirectChildrenOnly)
             if not bar.isHidden()]
    for bar in shown:
        bar.hide()
    if window.restoreState(state, LAYOUT_VERSION):
        return True
    for bar in shown:  # a refused state changed nothing: the arrangement before keeps its tabs
        bar.show()
    return False


def reset_layout(window) -> None:
    """View → Reset layout: presentation mode off, every panel back in its default place and size."""
    set_presentation_mode(window, False)
    _restore_state(window, window.default_layout)  # docked, shown, tabbed as at first
    _default_sizes(window)  # in proportion to the window's size now


def dock_of(window, widget) -> QDockWidget | None:
    """The dock holding ``widget`` (a panel of :data:`DOCKS`), or None."""
    return next((dock for dock in window.docks.values() if dock.widget() is widget), None)


def is_shown(window, widget) -> bool:
    """True when ``widget``'s dock is open and in front (not behind another tab)."""
    dock = dock_of(window, widget)
    return dock is not None and dock.isVisible() and not dock.visibleRegion().isEmpty()


def show_view(window, widget, *, reopen: bool = False, share: float | None = None) -> bool:
    """Bring ``widget``'s dock to the front of its tabs; False (and nothing done) when it is closed.

    ``reopen`` opens a closed dock again; ``share`` makes a dock at the bottom take that share of the
    height it shares with the views above it (Demo → Show me ends on a large comparison).
    """
    dock = dock_of(window, widget)
    if dock is None or (dock.isHidden() and not reopen):
        return False
    dock.show()
    dock.raise_()
    if share is not None and not dock.isFloating() and window.dockWidgetArea(dock) == BOTTOM:
        _fit_central(window)  # the middle's readable minimum, with the narration and font it has now
        total = window.centralWidget().height() + dock.height()
        window.resizeDocks([dock], [int(total * share)], Qt.Orientation.Vertical)
    return True


def add_dock_actions(window, menu) -> None:
    """The View menu's list of panels (tick to show, untick to close) and "Reset layout"."""
    menu.addSection("Panels")
    for spec in DOCKS:
        dock = window.docks[spec.name]
        dock.toggleViewAction().triggered.connect(lambda on, d=dock: on and d.raise_())  # opened: in front
        menu.addAction(dock.toggleViewAction())
    menu.addSeparator()
    act = QAction("Reset layout", window)
    act.setToolTip("Every panel back in its place and size, as when the studio was first opened.")
    act.triggered.connect(lambda: reset_layout(window))
    menu.addAction(act)
    window.reset_layout_action = act


def save_window(window, store) -> None:
    """Save the window's geometry and its docks' arrangement (presentation mode's hidden panels shown)."""
    set_presentation_mode(window, False)
    store.setValue(GEOMETRY_KEY, window.saveGeometry())
    store.setValue(STATE_KEY, window.saveState(LAYOUT_VERSION))


def restore_window(window, store) -> bool:
    """Restore the saved geometry and arrangement; True when a saved arrangement was used.

    A state of another :data:`LAYOUT_VERSION` or a damaged one leaves the default arrangement.
    """
    geom = store.value(GEOMETRY_KEY)
    if isinstance(geom, (QByteArray, bytes)):
        window.restoreGeometry(QByteArray(geom))
    state = store.value(STATE_KEY)
    # Qt checks a state before applying any of it (a refused one leaves the default arrangement) and puts a
    # floating panel saved on a screen that is gone back on one
    return isinstance(state, (QByteArray, bytes)) and _restore_state(window, QByteArray(state))


def set_presentation_mode(window, on: bool, scale: float = PRESENTATION_SCALE) -> None:
    """Larger fonts everywhere (plots included) and only the views; ``on=False`` puts everything back.

    The control panels (image set, Run, Transforms, Clusters) are closed, wherever they are docked; leaving
    restores the arrangement the window had when presentation mode began.
    """
    saved = getattr(window, "_presentation", None)
    if on and saved is None:
        window._presentation = {"font": QFont(window.font()),
                                "own_font": window.testAttribute(Qt.WidgetAttribute.WA_SetFont),
                                "state": window.saveState(LAYOUT_VERSION)}
        big = QFont(window.font())
        big.setPointSizeF((big.pointSizeF() if big.pointSizeF() > 0 else 9.0) * scale)
        window.setFont(big)
        for name in CONTROLS:
            window.docks[name].hide()
        # the larger W and means (after Show me the comparison had 70 %), once the larger font is laid out
        QTimer.singleShot(0, lambda: is_presentation_mode(window) and _share_evenly_with_the_views(window))
    elif not on and saved is not None:
        window.setFont(saved["font"] if saved["own_font"] else QFont())
        _restore_state(window, saved["state"])
        window._presentation = None
    act = getattr(window, "presentation_action", None)
    if act is not None and act.isChecked() != on:
        act.blockSignals(True)
        act.setChecked(on)
        act.blockSignals(False)


def _share_evenly_with_the_views(window) -> None:
    """The docks below the views get half the height they share with W and the means."""
    below = [d for d in window.docks.values()  # the tab in front (those behind keep a stale height)
             if is_shown(window, d.widget()) and not d.isFloating() and window.dockWidgetArea(d) == BOTTOM]
    if below:
        _fit_central(window)
        total = window.centralWidget().height() + below[0].height()
        window.resizeDocks(below[:1], [total // 2], Qt.Orientation.Vertical)


def _fit_central(window) -> None:
    """The middle's minimum height brought up to date now (:class:`~.layout.CentralArea`), before a resize."""
    fit = getattr(window.centralWidget(), "fit_minimum", None)
    if fit is not None:
        fit()


def is_presentation_mode(window) -> bool:
    return getattr(window, "_presentation", None) is not None
