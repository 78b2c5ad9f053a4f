"""Window layout helpers: what goes where (the docks: :mod:`.docks`), a size that fits the screen, and
presentation mode (big text, views only)."""
from __future__ import annotations

from PySide6.QtCore import QEvent, QRect, QSize, Qt
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import QDockWidget, QSplitter, QWidget

from .docks import PRESENTATION_SCALE, is_presentation_mode, set_presentation_mode  # presentation mode lives there

__all__ = ["PREFERRED_SIZE", "PRESENTATION_SCALE", "CentralArea", "EvenSplitter", "add_action", "add_view_menu",
           "fit_to_screen", "fitted_size", "insert_menu", "is_presentation_mode", "set_presentation_mode"]

PREFERRED_SIZE = QSize(1280, 800)
DECORATION = QSize(8, 32)  # a window frame's likely size before the window manager reports it
CENTRAL_MIN_HEIGHT = 240  # px: W, the means, their titles and the iteration slider (the window fits 700 px)
CENTRAL_MAX_SHARE = 0.7  # of the height below the menus: the most the readable minimum of the middle takes
TAB_BAR_ROOM = 32  # px: the bottom tabs' bar, beside the dock's own minimum


def _decoration(window) -> QSize:
    if window.isVisible():
        d = window.frameGeometry().size() - window.geometry().size()
        if d.width() > 0 or d.height() > 0:
            return d
    return DECORATION


def fitted_size(size: QSize, available: QRect, decoration: QSize = DECORATION) -> QSize:
    """``size`` shrunk (never grown) to fit ``available`` with the window frame."""
    return QSize(min(size.width(), available.width() - decoration.width()),
                 min(size.height(), available.height() - decoration.height()))


def fit_to_screen(window, available: QRect | None = None) -> QRect:
    """Shrink and move ``window`` so that it lies inside the screen it opens on (its available area).

    Used at start-up, after the saved geometry is restored (the saved size may come from a bigger
    screen). Returns the available area used.
    """
    if available is None:
        screen = (QGuiApplication.screenAt(window.geometry().center()) or window.screen()
                  or QGuiApplication.primaryScreen())
        available = screen.availableGeometry()
    deco = _decoration(window)
    size = fitted_size(window.size(), available, deco)
    if size != window.size():
        window.resize(size)
    frame = window.frameGeometry()
    x = min(max(frame.x(), available.x()), available.x() + available.width() - frame.width())
    y = min(max(frame.y(), available.y()), available.y() + available.height() - frame.height())
    if (x, y) != (frame.x(), frame.y()):
        window.move(max(x, available.x()), max(y, available.y()))
    return available


def add_view_menu(window, before: QAction | None = None):
    """A View menu with "Presentation mode" (F5), the panels and "Reset layout", placed before ``before``."""
    from PySide6.QtWidgets import QMenu

    from .docks import add_dock_actions

    menu = QMenu("&View", window)
    act = QAction("Presentation mode", window)
    act.setCheckable(True)
    act.setShortcut(QKeySequence("F5"))
    act.setToolTip("Bigger text and only the views, for a projector or a screen share. F5 again to go back.")
    act.toggled.connect(lambda on: set_presentation_mode(window, on))
    menu.addAction(act)
    window.presentation_action = act
    add_dock_actions(window, menu)  # the panels (a closed one comes back from here) and Reset layout
    menu.setToolTipsVisible(True)
    insert_menu(window, menu, before)
    window.view_menu = menu
    return menu


def add_action(window, menu, text, slot, shortcut=None) -> QAction:
    """A new action ``text`` of ``window`` in ``menu``, calling ``slot``, with an optional ``shortcut``."""
    act = QAction(text, window)
    if shortcut is not None:
        act.setShortcut(QKeySequence(shortcut))
    act.triggered.connect(slot)
    menu.addAction(act)
    return act


def insert_menu(window, menu, before=None) -> None:
    """Put ``menu`` in the window's menu bar, before the menu action ``before`` (None: at the end)."""
    bar = window.menuBar()
    if before is None:
        bar.addMenu(menu)
    else:
        bar.insertMenu(before, menu)


class EvenSplitter(QSplitter):
    """A QSplitter that shares its room evenly when told to (:meth:`share_evenly`).

    Told before it has a width (the window not laid out yet), it does so at its first resize: sizes set
    earlier would be skewed by the panels' size hints (W got 40 % of the middle, too little at 800 px).
    """

    pending = False

    def share_evenly(self) -> None:
        room = (self.width() if self.orientation() == Qt.Orientation.Horizontal else self.height())
        room = room if self.isVisible() else 0
        self.pending = room <= 0
        if room > 0:
            part = room // self.count()
            self.setSizes([part] * (self.count() - 1) + [room - part * (self.count() - 1)])

    def resizeEvent(self, event):
        super().resizeEvent(event)
        if self.pending:
            self.share_evenly()


class CentralArea(QWidget):
    """The middle of the window (the narration line, W and the means, the iteration slider) that keeps its
    minimum height at the height where W's labels, colour bar and the means are whole.

    The minimum follows the font (presentation mode), the narration line (1–3 lines above W) and the window's
    height: it never takes more than :data:`CENTRAL_MAX_SHARE` of the room below the menus, nor the room the
    bottom panel needs, so the window still fits its screen.  A bottom panel made large (Demo → Show me's
    comparison) or a dragged separator then stops there.
    """

    def __init__(self, window):
        super().__init__()
        self._window = window
        window.installEventFilter(self)  # the cap follows the window's height

    def eventFilter(self, watched, event):
        if watched is self._window and event.type() == QEvent.Type.Resize and self.layout() is not None:
            self.fit_minimum()
        return super().eventFilter(watched, event)

    def readable_height(self) -> int:
        """The height at which everything in the middle is whole, at the middle's width now."""
        lay = self.layout()
        m = lay.contentsMargins()
        parts = []
        for i in range(lay.count()):
            child = lay.itemAt(i).widget()
            if child is None or child.isHidden():
                continue
            if child is self._window.central_splitter:
                parts.append(max(v.readable_height() for v in (self._window.weights_view, self._window.means_view)))
            elif child.hasHeightForWidth():
                parts.append(child.heightForWidth(max(self.width(), child.minimumSizeHint().width())))
            else:
                parts.append(child.sizeHint().height())
        return m.top() + m.bottom() + sum(parts) + lay.spacing() * max(0, len(parts) - 1)

    def room_cap(self) -> int:
        """The most the middle's minimum may take: a share of the room below the menus, and not the bottom
        panel's own minimum."""
        w = self._window
        room = w.height() - w.menuBar().sizeHint().height()
        if w.statusBar().isVisible():
            room -= w.statusBar().sizeHint().height()
        bottom_area = Qt.DockWidgetArea.BottomDockWidgetArea
        below = [d.minimumSizeHint().height() for d in w.findChildren(QDockWidget)
                 if d.isVisible() and not d.isFloating() and w.dockWidgetArea(d) == bottom_area]
        bottom = max(below) + TAB_BAR_ROOM if below else 0
        return min(int(room * CENTRAL_MAX_SHARE), room - bottom)

    def fit_minimum(self) -> int:
        """Set (and return) the minimum height: readable, within :meth:`room_cap`, at least CENTRAL_MIN_HEIGHT."""
        need = max(CENTRAL_MIN_HEIGHT, min(self.readable_height(), self.room_cap()))
        if need != self.minimumHeight():
            self.setMinimumHeight(need)
        return need

    def event(self, event):
        done = super().event(event)
        if event.type() in (QEvent.Type.LayoutRequest, QEvent.Type.FontChange, QEvent.Type.Resize,
                            QEvent.Type.Show) and self.layout() is not None:
            self.fit_minimum()
        return done


def build_central(window) -> None:
    """W and the means (with the iteration scrubber) in the middle; every other panel a dock (:mod:`.docks`)."""
    from PySide6.QtWidgets import QVBoxLayout

    from .docks import add_docks
    from .nets_panel import NetsPanel  # the Networks panel (PyTorch optional)
    from .scrubber import IterationScrubber

    window.central_splitter = EvenSplitter(Qt.Orientation.Horizontal)
    window.central_splitter.addWidget(window.weights_view)
    window.central_splitter.addWidget(window.means_view)
    window.scrubber = IterationScrubber()  # step back through the run's W, means and map
    central = CentralArea(window)  # W and the means stay readable under a large bottom panel
    central.setMinimumHeight(CENTRAL_MIN_HEIGHT)
    lay = QVBoxLayout(central)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.addWidget(window.central_splitter, 1)
    lay.addWidget(window.scrubber)
    window.setCentralWidget(central)
    window.nets_panel = NetsPanel(lambda: window.model.session.data)
    add_docks(window)
