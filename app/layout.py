"""Window layout helpers: what goes where (the docks: :mod:`.docks`), a size that fits the screen, and
presentation mode (big text, views only)."""
from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import QSplitter

from .docks import PRESENTATION_SCALE, is_presentation_mode, set_presentation_mode  # presentation mode lives there

__all__ = ["PREFERRED_SIZE", "PRESENTATION_SCALE", "EvenSplitter", "add_action", "add_view_menu", "fit_to_screen",
           "fitted_size", "insert_menu", "is_presentation_mode", "set_presentation_mode"]

PREFERRED_SIZE = QSize(1280, 800)
DECORATION = QSize(8, 32)  # a window frame's likely size before the window manager reports it
CENTRAL_MIN_HEIGHT = 240  # px: W, the means, their titles and the iteration slider (the window fits 700 px)


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


def build_central(window) -> None:
    """W and the means (with the iteration scrubber) in the middle; every other panel a dock (:mod:`.docks`)."""
    from PySide6.QtWidgets import QVBoxLayout, QWidget

    from .docks import add_docks
    from .nets_panel import NetsPanel  # the Networks panel (PyTorch optional)
    from .scrubber import IterationScrubber

    window.central_splitter = EvenSplitter(Qt.Orientation.Horizontal)
    window.central_splitter.addWidget(window.weights_view)
    window.central_splitter.addWidget(window.means_view)
    window.scrubber = IterationScrubber()  # step back through the run's W, means and map
    central = QWidget()
    central.setMinimumHeight(CENTRAL_MIN_HEIGHT)  # W and the means stay readable under a large bottom panel
    lay = QVBoxLayout(central)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.addWidget(window.central_splitter, 1)
    lay.addWidget(window.scrubber)
    window.setCentralWidget(central)
    window.nets_panel = NetsPanel(lambda: window.model.session.data)
    add_docks(window)
