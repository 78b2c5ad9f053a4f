"""The run worker: a QObject living in a QThread that drives the engine.

It owns the engine's generator; everything it sends to the GUI thread goes
through queued signals as host NumPy data (:class:`Frame`).  Stopping is
``AttentionRun.cancel()``, a thread-safe flag checked between steps and inside
the similarity stage.  A failure on the GPU falls back to the CPU and says so.
"""
from __future__ import annotations

import logging
import time
import traceback
from dataclasses import dataclass, field

import numpy as np
from PySide6.QtCore import QObject, Signal, Slot

from iastudio.core.attention import AttentionRun, Snapshot
from iastudio.core.backend import to_host
from iastudio.core.neighbors import graph_curves, graph_map
from iastudio.core.report import convergence_curves

log = logging.getLogger(__name__)


@dataclass
class Frame:
    """What the views draw: a snapshot plus what is derived from it off the GUI thread."""

    snapshot: Snapshot
    order: np.ndarray  # image order grouping the clusters
    mds: np.ndarray  # (n, 2) manifold map, aligned to the previous frame
    curves: dict  # within_max / between_min / median per iteration
    cluster_means: np.ndarray | None = None  # (k, H, W) when finished
    plain_means: np.ndarray | None = None  # (k, H, W) plain averages (KA-style) per cluster
    ka_labels: np.ndarray | None = None  # KA's own clusters on the same images
    elapsed: float = 0.0
    extra: dict = field(default_factory=dict)


def classical_mds(distances: np.ndarray, previous: np.ndarray | None = None) -> np.ndarray:
    """2-D classical MDS of a distance matrix, Procrustes-aligned to ``previous``."""
    import scipy.sparse as sp
    from scipy.linalg import orthogonal_procrustes

    if sp.issparse(distances):  # a pruned run above 2,000 images: a map of its K-neighbour graph
        return graph_map(distances, previous)

    d2 = np.asarray(distances, dtype=float) ** 2
    n = d2.shape[0]
    j = np.eye(n) - 1.0 / n
    b = -0.5 * j @ d2 @ j
    vals, vecs = np.linalg.eigh(b)
    top = np.argsort(vals)[::-1][:2]
    coords = vecs[:, top] * np.sqrt(np.maximum(vals[top], 0.0))
    if coords.shape[1] < 2:
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
    if previous is not None and previous.shape == coords.shape:
        r, _ = orthogonal_procrustes(coords, previous - previous.mean(0))
        coords = coords @ r
    return coords


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
        self._history: list[np.ndarray] = []
        self._mds: np.ndarray | None = None
        self._t0 = 0.0

    def reset(self):
        self._history, self._mds = [], None

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
                    cpu = AttentionRun(to_host(run._inputs), backend="numpy", **vars(run.settings))
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
            self.frame.emit(self._frame(snap))
        if run.finished:
            self.finished.emit(self._final_frame(run, last))
        else:
            self.stopped.emit()

    def _frame(self, snap: Snapshot) -> Frame:
        if snap.stage in ("similarity", "done"):  # each is a new d(S_i, S_j)
            self._history.append(snap.distances)
        self._mds = classical_mds(snap.distances, self._mds)
        return Frame(
            snapshot=snap,
            order=np.argsort(snap.labels, kind="stable"),
            mds=self._mds.copy(),
            curves=_curves(self._history, snap.labels),
            elapsed=time.perf_counter() - self._t0,
        )

    def _final_frame(self, run: AttentionRun, last: Snapshot | None) -> Frame:
        res = run.result()
        snap = last if last is not None else run._snapshot("done")
        inputs = to_host(run._inputs)
        plain = np.stack([inputs[res.labels == c].mean(axis=0) for c in range(res.n_clusters)])
        ka_labels = None
        if run.settings.method == "ia":
            ka = AttentionRun(inputs, backend="numpy", method="ka", beta=run.settings.beta,
                              iterations=run.settings.iterations, clusters=run.settings.clusters)
            ka_labels = ka.run().labels
        if last is None or self._mds is None:
            fr = self._frame(snap)
        else:
            fr = Frame(snapshot=snap, order=np.argsort(res.labels, kind="stable"), mds=self._mds.copy(),
                       curves=_curves(self._history, res.labels))
        fr.cluster_means = res.cluster_means
        fr.plain_means = plain.astype(np.float32)
        fr.ka_labels = ka_labels
        fr.elapsed = time.perf_counter() - self._t0
        fr.extra["result"] = res
        return fr


def _curves(history, labels) -> dict:
    import scipy.sparse as sp

    sparse = bool(history) and sp.issparse(history[-1])  # on the computed pairs of a pruned run's graph
    return (graph_curves if sparse else convergence_curves)(history, labels)


def _stage_text(snap: Snapshot) -> str:
    if snap.stage == "means":
        return f"invariant means, step {snap.step}/{snap.n_steps}"
    if snap.stage == "similarity":
        return f"iteration {snap.iteration}: similarity done"
    if snap.stage == "iteration":
        return f"iteration {snap.iteration} done"
    return "done"
