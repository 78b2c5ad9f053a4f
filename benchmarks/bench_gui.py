"""GUI responsiveness during a run: n = 200 images at 48 px on the CPU.

While the worker thread runs Invariant Attention, the GUI thread is probed:

* input latency — every 50 ms a synthetic key press is posted to the window and
  the delay until Qt delivers it is recorded;
* redraw rate — the time to redraw every live panel from a new frame (W
  heatmap, means grid, curves, manifold map), i.e. the highest rate at which
  the window can follow the run, measured every 200 ms while the worker
  computes (after its first snapshot); the window itself redraws at most every
  33 ms (~30 fps), the latest frame winning.  Each measured redraw draws a
  copy of the latest frame, by turns with a map of its own (a frame after a
  distance computation, the dearest kind) and with the map already on screen
  (the frames of the steps of the means share their map, and the window then
  does not draw it again); both are reported.

    QT_QPA_PLATFORM=offscreen python benchmarks/bench_gui.py [--n 200] [--px 48] [--seconds 120] [--screenshot w.png]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from PySide6.QtCore import QEvent, QObject, Qt, QTimer  # noqa: E402
from PySide6.QtGui import QKeyEvent  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from iastudio.core.demos import load_demo  # noqa: E402


class LatencyProbe(QObject):
    """Posts key events and measures how long they wait in the queue."""

    def __init__(self, target):
        super().__init__()
        self.target = target
        self.sent = {}
        self.delays = []
        target.installEventFilter(self)
        self.k = 0

    def post(self):
        self.k += 1
        ev = QKeyEvent(QEvent.Type.KeyPress, Qt.Key.Key_F24, Qt.KeyboardModifier.NoModifier, str(self.k))
        self.sent[str(self.k)] = time.perf_counter()
        QApplication.postEvent(self.target, ev)

    def eventFilter(self, obj, ev):
        if ev.type() == QEvent.Type.KeyPress and ev.key() == Qt.Key.Key_F24:
            t = self.sent.pop(ev.text(), None)
            if t is not None:
                self.delays.append(time.perf_counter() - t)
            return True
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--px", type=int, default=48)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--screenshot", help="save the window here (PNG) when the observation ends")
    args = ap.parse_args(argv)
    from iastudio.app.main_window import MainWindow

    app = QApplication.instance() or QApplication([])
    w = MainWindow()
    w.show()
    data = load_demo("digits", seed=0)
    s = 1
    while len(data) < args.n:
        data = data.extend(load_demo("digits", seed=s))
        s += 1
    w.model.session.set_images(data.subset(range(args.n)))
    w.run_panel.size.setValue(args.px)
    w.run_panel.backend.setCurrentIndex(1)  # CPU
    probe = LatencyProbe(w)
    timer = QTimer()
    timer.setInterval(50)
    timer.timeout.connect(probe.post)
    frames = []
    w.model.session.events.frame.connect(lambda f: frames.append(time.perf_counter()))
    costs = {"new map": [], "same map": []}

    def forced_redraw():
        # while the worker computes: redraw every panel from a new frame and time it
        latest = w.model.session.latest
        if latest is None:
            return
        # a copy of the latest frame stands in for a new one (the same pictures, nothing drawn reused), by
        # turns with a map of its own (a frame after a distance computation) and with the map on screen (a
        # frame of a step of the means, whose distances did not change: the map is not drawn again)
        on_screen = w.convergence_view.coords
        same = len(costs["new map"]) > len(costs["same map"]) and on_screen.shape == latest.mds.shape
        kind = "same map" if same else "new map"
        w.model.session.latest = dataclasses.replace(latest, mds=on_screen if same else latest.mds.copy())
        w.sync.drawn = None
        t = time.perf_counter()
        w.redraw()
        w.repaint()
        costs[kind].append(time.perf_counter() - t)

    redraw_timer = QTimer()
    redraw_timer.setInterval(200)
    redraw_timer.timeout.connect(forced_redraw)
    t0 = time.perf_counter()
    w.start_run()
    timer.start()
    redraw_timer.start()
    while time.perf_counter() - t0 < args.seconds and w.model.session.state == "running":
        app.processEvents()
        time.sleep(0.002)
    timer.stop()
    redraw_timer.stop()
    state = w.model.session.state
    w.model.stop()
    if args.screenshot:
        w.resize(1280, 800)  # the size of the README's pictures (the offscreen screen is only 800 x 800)
        app.processEvents()
        w.redraw()
        w.grab().save(args.screenshot)
    d = np.array(probe.delays) * 1000
    print(f"n = {args.n} images at {args.px} px, CPU, {time.perf_counter() - t0:.0f} s of a run observed, "
          f"{len(frames)} snapshots received, {w.redraws} window redraws; run {state}")
    if d.size:
        print(f"input latency: median {np.median(d):.1f} ms, 95th percentile {np.percentile(d, 95):.1f} ms, "
              f"max {d.max():.1f} ms over {d.size} probes")
    for kind, label in (("new map", "with a new map (after a distance computation)"),
                        ("same map", "sharing the map on screen (a step of the means)")):
        if costs[kind]:
            c = np.array(costs[kind]) * 1000
            print(f"full redraw of all panels from a new frame {label}: median {np.median(c):.1f} ms, "
                  f"95th percentile {np.percentile(c, 95):.1f} ms over {c.size} redraws -> up to "
                  f"{1000 / np.median(c):.0f} fps (the window caps it at ~30 fps)")
    from iastudio.app.projects import DISCARD

    w.projects.ask = lambda *a, **k: DISCARD  # close without asking to save the run (a modal question would wait)
    w.close()


if __name__ == "__main__":
    main()
