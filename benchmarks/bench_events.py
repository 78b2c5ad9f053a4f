"""Cost of one session event reaching a view: psygnal + ``listen`` against the Qt mirror it replaced.

Before issue #34 a session event went through a string-keyed list of plain callbacks to a Qt signal of
``StudioModel`` (a direct connection on the GUI thread) and from there to the slot.  Now the session's
psygnal signal calls the slot through :func:`iastudio.app.events.listen` (argument count, the thread
check, the exception guard).  Both are timed here in the same run, on the GUI thread, for a signal
carrying one argument (``selection``) and one carrying three (``progress``), as ratios to calling the
slot directly.  A run emits a few tens of events a second, so any of these costs is far below a frame.

    QT_QPA_PLATFORM=offscreen python benchmarks/bench_events.py [--n 20000]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkout import importable  # noqa: E402

importable()  # a bare checkout: iastudio staged from core/ and app/

from PySide6.QtCore import QObject, Signal  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from iastudio.app.events import listen  # noqa: E402
from iastudio.core.session import Session  # noqa: E402


class _Mirror(QObject):
    """The removed adapter's shape: one Qt signal per session event."""

    selectionChanged = Signal(list)
    progressChanged = Signal(float, str, float)


class _PlainEvents:
    """The removed ``Events``: named lists of plain callbacks."""

    def __init__(self, names):
        self.callbacks = {n: [] for n in names}

    def connect(self, name, fn):
        self.callbacks[name].append(fn)

    def emit(self, name, *args):
        for fn in list(self.callbacks[name]):
            fn(*args)


def _per_call(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000, help="emissions per measurement")
    ap.add_argument("--repeats", type=int, default=5, help="best of this many measurements")
    args = ap.parse_args(argv)
    QApplication.instance() or QApplication([])
    got = []

    def slot_selection(sel):
        got.append(sel)

    def slot_progress(fraction, text, eta):
        got.append(fraction)

    old = _PlainEvents(["selection", "progress"])
    mirror = _Mirror()
    old.connect("selection", mirror.selectionChanged.emit)
    old.connect("progress", mirror.progressChanged.emit)
    mirror.selectionChanged.connect(slot_selection)
    mirror.progressChanged.connect(slot_progress)
    session = Session(size=16)
    listen(session.events.selection, slot_selection)
    listen(session.events.progress, slot_progress)
    sel = [1, 2]
    cases = {
        "selection (1 argument)": (lambda: slot_selection(sel), lambda: old.emit("selection", sel),
                                   lambda: session.events.selection.emit(sel)),
        "progress (3 arguments)": (lambda: slot_progress(0.5, "iteration 1", 3.0),
                                   lambda: old.emit("progress", 0.5, "iteration 1", 3.0),
                                   lambda: session.events.progress.emit(0.5, "iteration 1", 3.0)),
    }
    print(f"{args.n} emissions, best of {args.repeats}; times per emission")
    print(f"{'event':24s} {'direct call':>12s} {'before (Qt mirror)':>19s} {'now (psygnal+listen)':>21s} "
          f"{'now / before':>13s}")
    for name, (direct, before, now) in cases.items():
        t = [min(_per_call(f, args.n) for _ in range(args.repeats)) for f in (direct, before, now)]
        print(f"{name:24s} {t[0] * 1e6:10.2f} µs {t[1] * 1e6:17.2f} µs {t[2] * 1e6:19.2f} µs {t[2] / t[1]:12.2f}x")
    assert len(got) >= 6 * args.n  # every emission reached its slot


if __name__ == "__main__":
    main()
