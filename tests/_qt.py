"""Helpers shared by the GUI tests (pytest-qt, offscreen)."""
from __future__ import annotations

import time

from PySide6.QtCore import QPointF


def wait_until(app, pred, timeout: float = 60.0) -> None:
    """Process events until ``pred()`` holds (asserted), at most ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and not pred():
        app.processEvents()
        time.sleep(0.005)
    assert pred()


class PointerEvent:
    """A stand-in for pyqtgraph's hover/click events at plot coordinates (x, y)."""

    def __init__(self, x, y):
        self._p = QPointF(x, y)

    def isExit(self):
        return False

    def pos(self):
        return self._p

    def accept(self):
        pass
