"""Window layout helpers: a size that fits the screen, and presentation mode (big text, views only)."""
from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import QAction, QFont, QGuiApplication, QKeySequence

__all__ = ["PREFERRED_SIZE", "add_view_menu", "fit_to_screen", "fitted_size", "is_presentation_mode",
           "set_presentation_mode"]

PREFERRED_SIZE = QSize(1280, 800)
DECORATION = QSize(8, 32)  # a window frame's likely size before the window manager reports it
PRESENTATION_SCALE = 1.5


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


def _left_panel(window):
    return window.images_panel.parentWidget()  # the splitter with the image set and the control tabs


def set_presentation_mode(window, on: bool, scale: float = PRESENTATION_SCALE) -> None:
    """Larger fonts everywhere (plots included) and only the views; ``on=False`` puts everything back."""
    saved = getattr(window, "_presentation", None)
    if on and saved is None:
        window._presentation = {"font": QFont(window.font()),
                                "own_font": window.testAttribute(Qt.WidgetAttribute.WA_SetFont),
                                "left": _left_panel(window).isVisible()}
        big = QFont(window.font())
        big.setPointSizeF((big.pointSizeF() if big.pointSizeF() > 0 else 9.0) * scale)
        window.setFont(big)
        _left_panel(window).hide()
    elif not on and saved is not None:
        window.setFont(saved["font"] if saved["own_font"] else QFont())
        _left_panel(window).setVisible(saved["left"])
        window._presentation = None
    act = getattr(window, "presentation_action", None)
    if act is not None and act.isChecked() != on:
        act.blockSignals(True)
        act.setChecked(on)
        act.blockSignals(False)


def is_presentation_mode(window) -> bool:
    return getattr(window, "_presentation", None) is not None


def add_view_menu(window, before: QAction | None = None):
    """A View menu with "Presentation mode" (F5), placed before ``before`` (e.g. the Help menu)."""
    from PySide6.QtWidgets import QMenu

    menu = QMenu("&View", window)
    act = QAction("Presentation mode", window)
    act.setCheckable(True)
    act.setShortcut(QKeySequence("F5"))
    act.setToolTip("Bigger text and only the views, for a projector or a screen share. F5 again to go back.")
    act.toggled.connect(lambda on: set_presentation_mode(window, on))
    menu.addAction(act)
    window.presentation_action = act
    insert_menu(window, menu, before)
    window.view_menu = menu
    return menu


def insert_menu(window, menu, before=None) -> None:
    """Put ``menu`` in the window's menu bar, before the menu action ``before`` (None: at the end)."""
    bar = window.menuBar()
    if before is None:
        bar.addMenu(menu)
    else:
        bar.insertMenu(before, menu)


def build_central(window) -> None:
    """Panels on the left (images; Run / Transforms / Clusters tabs), live views on the right."""
    from PySide6.QtWidgets import QHBoxLayout, QSplitter, QTabWidget, QVBoxLayout, QWidget

    from .nets_panel import NetsPanel  # the Networks panel (PyTorch optional)
    from .scrubber import IterationScrubber

    left = QSplitter(Qt.Orientation.Vertical)
    left.addWidget(window.images_panel)
    window.controls = QTabWidget()
    for panel, name in ((window.run_panel, "Run"), (window.transform_panel, "Transforms"),
                        (window.clusters_panel, "Clusters")):
        window.controls.addTab(panel, name)
    left.addWidget(window.controls)
    left.setSizes([330, 470])
    top = QSplitter(Qt.Orientation.Horizontal)
    top.addWidget(window.weights_view)
    top.addWidget(window.means_view)
    window.scrubber = IterationScrubber()  # step back through the run's W, means and map
    upper = QWidget()
    upper_lay = QVBoxLayout(upper)
    upper_lay.setContentsMargins(0, 0, 0, 0)
    upper_lay.addWidget(top, 1)
    upper_lay.addWidget(window.scrubber)
    window.nets_panel = NetsPanel(lambda: window.model.data)
    window.bottom_tabs = QTabWidget()
    for view, name in ((window.convergence_view, "Manifold convergence"), (window.compare_view, "KA vs IA"),
                       (window.inspect_view, "Inspect"), (window.nets_panel, "Networks")):
        window.bottom_tabs.addTab(view, name)
    right = QSplitter(Qt.Orientation.Vertical)
    right.addWidget(upper)
    right.addWidget(window.bottom_tabs)
    right.setSizes([420, 380])
    window.views_splitter = right  # the views above, the tabs below (Demo → Show me enlarges the tabs)
    main = QSplitter(Qt.Orientation.Horizontal)
    main.addWidget(left)
    main.addWidget(right)
    main.setSizes([370, 910])
    central = QWidget()
    lay = QHBoxLayout(central)
    lay.setContentsMargins(4, 4, 4, 4)
    lay.addWidget(main)
    window.setCentralWidget(central)
