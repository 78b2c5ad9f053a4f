"""Python's cyclic garbage collection, run on the GUI thread only.

Left to itself, Python collects reference cycles in whichever thread happens
to allocate when a generation fills up: a run's worker thread, a Dask
client's IO loop.  A cycle holding a Qt object (a closed dialog, a menu, a
window's leftovers) is then destroyed in that thread, where Qt widgets must
not be touched, and PySide's destructor can deadlock with the GUI thread on
the GIL and a Qt mutex.  :class:`GuiThreadCollector` switches automatic
collection off and collects on a timer of the GUI thread instead, with the
same generation thresholds.
"""
from __future__ import annotations

import gc
import logging

from PySide6.QtCore import QObject, QTimer

log = logging.getLogger(__name__)

__all__ = ["GuiThreadCollector"]


class GuiThreadCollector(QObject):
    """Collect garbage on the thread that owns this object (the GUI thread), every ``interval_ms``.

    Automatic collection is off while the collector runs (:meth:`stop` turns
    it back on).  A generation is collected when its count exceeds the
    threshold Python would have used, oldest first (without Python's extra
    rule that delays full collections on a large heap: under steady
    allocation a full collection runs about once a minute).

    Parameters
    ----------
    parent : QObject, optional
    interval_ms : int
        How often the counts are looked at.
    """

    def __init__(self, parent: QObject | None = None, *, interval_ms: int = 500):
        super().__init__(parent)
        self._thresholds = gc.get_threshold()
        self._was_enabled = gc.isenabled()
        gc.disable()
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.check)
        self._timer.start()

    def check(self) -> int | None:
        """Collect the oldest generation over its threshold; returns it (None when none is)."""
        counts = gc.get_count()
        for gen in (2, 1, 0):
            if counts[gen] > self._thresholds[gen]:
                gc.collect(gen)
                return gen
        return None

    def stop(self) -> None:
        """Give collection back to Python and stop the timer (also when Qt already deleted it)."""
        if self._was_enabled:
            gc.enable()
        try:
            self._timer.stop()
        except RuntimeError:  # the application (the timer's owner) is gone already
            log.debug("collector's timer already deleted")
