"""Errors the user must see: a visible, top-level, non-blocking error window, and the exception hook.

The window has a plain message, the log folder's path, "Show Details…" with the report, and a
button that opens the log folder. The session goes on behind it. Errors that arrive while one is
open are added to it (a failing redraw must not stack up dozens of windows).
"""
from __future__ import annotations

import contextlib
import logging
import sys
import traceback

import shiboken6
from PySide6.QtCore import QObject, Qt, QThread, QUrl, Signal, Slot
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QApplication, QMainWindow, QMessageBox, QWidget

from iastudio.core.logs import log_dir

log = logging.getLogger("ia-studio")

__all__ = ["ErrorDialog", "current_error_dialog", "excepthook", "install_excepthook", "open_log_folder",
           "show_error"]


def open_log_folder() -> bool:
    return QDesktopServices.openUrl(QUrl.fromLocalFile(str(log_dir())))


class ErrorDialog(QMessageBox):
    """A top-level error window that does not block: message, log folder, details, "Open log folder"."""

    def __init__(self, title: str, message: str, details: str = "", parent: QWidget | None = None):
        super().__init__(QMessageBox.Icon.Critical, title, message, QMessageBox.StandardButton.Close, parent)
        self.setWindowModality(Qt.WindowModality.NonModal)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.log_folder = str(log_dir())
        self.setInformativeText(f"The report is also in the log folder:\n{self.log_folder}")
        self.open_logs_button = self.addButton("Open log folder", QMessageBox.ButtonRole.ActionRole)
        self.open_logs_button.setToolTip("Open the folder with the log files in your file manager.")
        self.buttonClicked.connect(lambda b: b is self.open_logs_button and open_log_folder())
        self.message = message
        self.count = 1
        self.reports: list[str] = []
        self.add_report(details)

    def add_report(self, details: str) -> None:
        if details:
            self.reports.append(details)
            self.setDetailedText("\n\n".join(self.reports))

    def add_error(self, message: str, details: str = "") -> None:
        """Another error while this one is open: counted in the text, its report added to the details."""
        self.add_report(details)
        self.count += 1
        more = self.count - 1
        self.setText(f"{self.message}\n\n{more} more error{'s' if more != 1 else ''} since then "
                     "(see Show Details…).")


_current: ErrorDialog | None = None


def current_error_dialog() -> ErrorDialog | None:
    """The error window on screen now, if any."""
    ok = _current is not None and shiboken6.isValid(_current) and _current.isVisible()
    return _current if ok else None


def _main_window() -> QWidget | None:
    app = QApplication.instance()
    if app is None:
        return None
    active = QApplication.activeWindow()
    if isinstance(active, QMainWindow):
        return active
    wins = [w for w in QApplication.topLevelWidgets() if isinstance(w, QMainWindow) and w.isVisible()]
    return wins[0] if wins else None


def show_error(title: str, message: str, details: str = "", parent: QWidget | None = None) -> ErrorDialog:
    """Show (or add to) the error window; returns it. It is a window of its own, over ``parent``."""
    global _current
    cur = current_error_dialog()
    if cur is not None:
        cur.add_error(message, details)
        cur.raise_()
        return cur
    box = ErrorDialog(title, message, details, parent if parent is not None else _main_window())
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose, False)
    box.show()
    box.raise_()
    box.activateWindow()
    _current = box
    return box


def _uncaught_message(exc_type, exc) -> str:
    what = f"{exc_type.__name__}: {exc}" if str(exc) else exc_type.__name__
    return ("Something went wrong inside the studio, but your work is still open.\n"
            f"({what})\n"
            "Saving your project now is a good idea.")


class _Relay(QObject):
    """Carries a report from any thread to the GUI thread (queued signal)."""

    report = Signal(str, str, str)

    def __init__(self):
        super().__init__()
        self.report.connect(self._show)

    @Slot(str, str, str)
    def _show(self, title, message, details):
        show_error(title, message, details)


_relay: _Relay | None = None


def excepthook(exc_type, exc, tb) -> None:
    """Uncaught exceptions: logged, then shown in the error window (nothing is sent anywhere)."""
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    with contextlib.suppress(Exception):  # never fail inside the hook
        log.error("uncaught exception\n%s", text)
    try:
        app = QApplication.instance()
        if app is None:
            sys.__excepthook__(exc_type, exc, tb)
            return
        args = ("Unexpected error", _uncaught_message(exc_type, exc), text)
        if QThread.currentThread() is app.thread() or _relay is None:
            show_error(*args)
        else:
            _relay.report.emit(*args)
    except Exception:  # noqa: BLE001 - never fail inside the hook
        pass


def install_excepthook() -> None:
    """Route uncaught exceptions (GUI thread or any other) to :func:`excepthook`. Call on the GUI thread."""
    global _relay
    if _relay is None and QApplication.instance() is not None:
        _relay = _Relay()
    sys.excepthook = excepthook
