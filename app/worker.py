"""The run worker: a QObject living in a QThread that drives the engine.

It owns the engine's generator; everything it sends to the GUI thread goes
through queued signals as host NumPy data (:class:`~iastudio.core.frames.Frame`,
built by :class:`~iastudio.core.frames.FrameBuilder`).  Stopping is
``AttentionRun.cancel()``, a thread-safe flag checked between steps and inside
the similarity stage.  A failure on the GPU falls back to the CPU and says so.
"""
from __future__ import annotations

import logging
import time
import traceback

from PySide6.QtCore import QObject, Signal, Slot

from iastudio.core.attention import AttentionRun, Snapshot, Stage
from iastudio.core.frames import Frame, FrameBuilder

__all__ = ["Frame", "RunWorker"]  # Frame lives in iastudio.core.frames; re-exported for the app's modules

log = logging.getLogger(__name__)


class RunWorker(QObject):
    """Drives an :class:`AttentionRun`; lives in its own QThread."""

    frame = Signal(object)  # Frame
    progress = Signal(float, str)  # overall fraction, stage text
    finished = Signal(object)  # Frame of the finished run
    stopped = Signal()
    failed = Signal(str, str)  # message, traceback
    notice = Signal(str)  # e.g. "GPU failed, continuing on the CPU"
    subsetDone = Signal(int, object, object)  # cluster, member indices, labels (None if failed/stopped)

    def __init__(self):
        super().__init__()
        self.run: AttentionRun | None = None
        self.frames = FrameBuilder()
        self._t0 = 0.0

    def reset(self):
        self.frames.reset()

    @Slot(object)
    def drive(self, run: AttentionRun):
        """Run (or resume) ``run`` until it finishes or is cancelled."""
        self.run = run
        self._t0 = time.perf_counter()
        run.on_progress = lambda f, text: self.progress.emit(f, text)
        try:
            self._loop(run)
        except Exception as exc:  # noqa: BLE001 - reported to the GUI, traceback logged
            if run.backend.name == "cupy":
                log.exception("GPU run failed; falling back to the CPU")
                self.notice.emit(f"The GPU failed ({exc}); continuing on the CPU.")
                try:
                    cpu = run.on_backend("numpy")
                    self.run = cpu
                    cpu.on_progress = run.on_progress
                    self._loop(cpu)
                    return
                except Exception as exc2:  # noqa: BLE001
                    exc = exc2
            log.exception("run failed")
            self.failed.emit(str(exc) or type(exc).__name__, traceback.format_exc())

    @Slot(object, int, object)
    def drive_subset(self, run: AttentionRun, cluster: int, members):
        """Run IA on one cluster's images alone (for a split); no frames are sent."""
        self.run = run
        try:
            labels = None
            for _ in run.steps():
                pass
            if run.finished:
                labels = run.result().labels
        except Exception:  # noqa: BLE001 - the split simply does not happen; logged
            log.exception("re-run on a cluster failed")
            labels = None
        self.subsetDone.emit(cluster, members, labels)

    def _loop(self, run):
        last = None
        for snap in run.steps():
            last = snap
            self.progress.emit(snap.progress, _stage_text(snap))
            self.frame.emit(self.frames.frame(snap, elapsed=self._elapsed()))
        if run.finished:
            final = self.frames.final(run, last)  # includes kernel attention's run on the same images
            final.elapsed = self._elapsed()
            self.finished.emit(final)
        else:
            self.stopped.emit()

    def _elapsed(self) -> float:
        return time.perf_counter() - self._t0


def _stage_text(snap: Snapshot) -> str:
    if snap.stage == Stage.MEANS:
        return f"invariant means, step {snap.step}/{snap.n_steps}"
    if snap.stage == Stage.SIMILARITY:
        return f"iteration {snap.iteration}: similarity done"
    if snap.stage == Stage.ITERATION:
        return f"iteration {snap.iteration} done"
    return "done"
