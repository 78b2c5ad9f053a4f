"""The studio model: owns the image set, the transforms and the run.

Views never compute; they draw what the model (and the worker's frames) give
them.  The model lives in the GUI thread; the one :class:`~app.worker.RunWorker`
lives in its QThread and is reached only through queued signals.
"""
from __future__ import annotations

import logging
import time

import numpy as np
from PySide6.QtCore import QObject, QThread, Signal

from core import se2
from core.attention import AttentionRun
from core.backend import BackendUnavailableError, get_backend
from core.demos import load_demo
from core.imageset import ImageSet, NoUsableImagesError, load_images
from core.preprocess import preprocess
from core.warp import warp

from .worker import Frame, RunWorker

log = logging.getLogger(__name__)


def gpu_status() -> tuple[bool, str]:
    """``(available, reason)`` for the GPU backend."""
    try:
        b = get_backend("cupy")
        return True, b.device
    except BackendUnavailableError as exc:
        return False, str(exc)


class StudioModel(QObject):
    """State of the studio and the run; emits what changed."""

    imagesChanged = Signal()
    transformsChanged = Signal()
    selectionChanged = Signal(int)
    message = Signal(str)  # plain one-line status messages
    runStateChanged = Signal(str)  # idle | running | stopping | stopped | finished | failed
    frameReady = Signal(object)  # latest Frame (views pull at <= 30 fps)
    progressChanged = Signal(float, str, float)  # fraction, text, eta seconds (-1 unknown)
    runFinished = Signal(object)  # Frame
    runFailed = Signal(str, str)  # message, traceback
    _drive = Signal(object)  # -> worker.drive (queued)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.data: ImageSet = ImageSet([], [], [], [])
        self.size = 64
        self.base = np.zeros((0, self.size, self.size), np.float32)  # preprocessed originals
        self.transforms = np.zeros((0, 3))  # applied per image (canvas px)
        self.working = self.base  # the transformed set: what runs
        self.selected = -1
        self.state = "idle"
        self.run: AttentionRun | None = None
        self.latest: Frame | None = None
        self.final: Frame | None = None
        self._t_start = 0.0
        self._thread = QThread()
        self._thread.setObjectName("ia-run-worker")
        self.worker = RunWorker()
        self.worker.moveToThread(self._thread)
        self._drive.connect(self.worker.drive)
        self.worker.frame.connect(self._on_frame)
        self.worker.progress.connect(self._on_progress)
        self.worker.finished.connect(self._on_finished)
        self.worker.stopped.connect(self._on_stopped)
        self.worker.failed.connect(self._on_failed)
        self.worker.notice.connect(self.message)
        self._thread.start()

    # ---------------------------------------------------------------- images
    @property
    def n(self) -> int:
        return len(self.data)

    def load_demo(self, name: str, *, seed: int = 0) -> None:
        self._set_data(load_demo(name, seed=seed))
        self.message.emit(f"Loaded demo '{name}': {self.data.summary()}")

    def add_paths(self, paths) -> list[dict]:
        """Add files/folders; returns the skipped list (also reported by message)."""
        try:
            new = load_images(paths)
        except NoUsableImagesError as exc:
            self.data.skipped.extend(exc.skipped)
            self.imagesChanged.emit()
            self.message.emit(f"Nothing added: {exc}")
            return exc.skipped
        self._set_data(new if self.n == 0 else self.data.extend(new))
        msg = f"Added {len(new)} image{'s' if len(new) != 1 else ''}"
        if new.skipped:
            msg += f"; skipped {len(new.skipped)}: " + "; ".join(
                f"{s['path'].split('/')[-1]} ({s['reason']})" for s in new.skipped[:3])
        self.message.emit(msg)
        return new.skipped

    def clear(self) -> None:
        self._set_data(ImageSet([], [], [], []))

    def set_size(self, size: int) -> None:
        if size == self.size:
            return
        old = self.base.shape[1] if self.n else self.size
        self.size = int(size)
        if self.n:
            t = self.transforms.copy()
            self._preprocess()
            t[:, 1:] *= self.base.shape[1] / old
            self.transforms = t
            self._update_working()

    def _set_data(self, data: ImageSet) -> None:
        self.stop()
        self.data = data
        self._preprocess()
        self.transforms = np.zeros((self.n, 3))
        self.working = self.base
        self.selected = -1
        self.latest = self.final = None
        self.imagesChanged.emit()
        self.transformsChanged.emit()

    def _preprocess(self) -> None:
        if self.n:
            self.base = preprocess(self.data.images, size=self.size).images
        else:
            self.base = np.zeros((0, self.size, self.size), np.float32)

    # ---------------------------------------------------------------- transforms
    def apply_random_transforms(self, *, rotation_deg: float, shift_percent: float, seed: int) -> None:
        if not self.n:
            return
        shift = shift_percent / 100.0 * self.base.shape[1]
        self.transforms = se2.random_transforms(self.n, rotation_range=rotation_deg, shift_range=shift, seed=seed)
        self._update_working()

    def reset_transforms(self) -> None:
        self.transforms = np.zeros((self.n, 3))
        self._update_working()

    def set_transform(self, i: int, theta_deg: float, tx: float, ty: float) -> None:
        self.transforms[i] = (np.deg2rad(theta_deg), tx, ty)
        self._update_working(only=i)

    def _update_working(self, only: int | None = None) -> None:
        if not self.n or not self.transforms.any():
            self.working = self.base  # the originals, exactly
        elif only is None:
            self.working = _renorm(np.clip(warp(self.base, self.transforms), 0, None))
        else:
            w = self.working.copy() if self.working is not self.base else self.base.copy()
            w[only] = _renorm(np.clip(warp(self.base[only][None], self.transforms[only][None]), 0, None))[0]
            self.working = w
        self.transformsChanged.emit()

    def select(self, i: int) -> None:
        if i != self.selected and -1 <= i < self.n:
            self.selected = i
            self.selectionChanged.emit(i)

    # ---------------------------------------------------------------- run
    def start(self, *, backend: str = "auto", **options) -> bool:
        """Start a new run on the transformed set; False (with a message) when refused."""
        if self.state in ("running", "stopping"):
            self.message.emit("A run is already going.")
            return False
        if self.n < 2:
            self.message.emit("Add at least 2 images before starting a run.")
            return False
        try:
            self.run = AttentionRun(self.working, backend=backend, **options)
        except (ValueError, BackendUnavailableError) as exc:
            self.message.emit(f"Cannot start: {exc}")
            return False
        self.latest = self.final = None
        self.worker.reset()
        self._launch()
        self.message.emit(f"Running {options.get('method', 'ia').upper()} on {self.n} images "
                          f"({self.run.backend.describe()})")
        return True

    def resume(self) -> bool:
        if self.run is None or self.run.finished or self.state in ("running", "stopping"):
            return False
        self._launch()
        return True

    def _launch(self):
        self._t_start = time.perf_counter()
        self._set_state("running")
        self._drive.emit(self.run)

    def stop(self) -> None:
        if self.run is not None and self.state == "running":
            self.run.cancel()
            self._set_state("stopping")

    def shutdown(self, timeout_ms: int = 10000) -> bool:
        """Stop the worker and its thread (window closing); True if it ended in time."""
        if self.run is not None:
            self.run.cancel()
        self._thread.quit()
        return self._thread.wait(timeout_ms)

    def _set_state(self, state: str) -> None:
        self.state = state
        self.runStateChanged.emit(state)

    def _on_frame(self, frame: Frame) -> None:
        self.latest = frame
        self.frameReady.emit(frame)

    def _on_progress(self, fraction: float, text: str) -> None:
        el = time.perf_counter() - self._t_start
        eta = el * (1 - fraction) / fraction if fraction > 0.02 else -1.0
        self.progressChanged.emit(fraction, text, eta)

    def _on_finished(self, frame: Frame) -> None:
        self.latest = self.final = frame
        self._set_state("finished")
        self.frameReady.emit(frame)
        self.runFinished.emit(frame)
        res = frame.extra.get("result")
        self.message.emit(f"Done: {res.n_clusters} clusters in {frame.elapsed:.1f} s" if res else "Done")

    def _on_stopped(self) -> None:
        self._set_state("stopped")
        self.message.emit("Stopped. Resume continues where it stopped.")

    def _on_failed(self, message: str, tb: str) -> None:
        self._set_state("failed")
        self.runFailed.emit(message, tb)


def _renorm(images: np.ndarray) -> np.ndarray:
    images = images.astype(np.float32)
    norm = np.sqrt((images.astype(np.float64) ** 2).reshape(len(images), -1).sum(axis=1))
    return images / np.maximum(norm, 1e-12).reshape((-1,) + (1,) * (images.ndim - 1)).astype(np.float32)
