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


def window_after_a_run(app, *, size: int = 24):
    """A shown 1280 x 800 window after a run with the default settings on the demo shapes at ``size`` px."""
    from iastudio.app.main_window import MainWindow

    w = MainWindow()
    w.projects.ask = lambda *a, **k: "discard"
    w.resize(1280, 800)
    w.show()
    w.model.session.load_demo("shapes")
    w.run_panel.size.setValue(size)
    w.start_run()
    wait_until(app, lambda: w.model.session.state in ("finished", "failed"), 120)
    assert w.model.session.state == "finished"
    w.redraw()
    app.processEvents()
    return w


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
