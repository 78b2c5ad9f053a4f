"""The studio model: owns the image set, the transforms and the run.

Views never compute; they draw what the model (and the worker's frames) give
them.  The model lives in the GUI thread; the one :class:`~iastudio.app.worker.RunWorker`
lives in its QThread and is reached only through queued signals.
"""
from __future__ import annotations

import logging
import time

import numpy as np
from PySide6.QtCore import QCoreApplication, QObject, QThread, Signal
from PySide6.QtGui import QUndoCommand, QUndoStack

from iastudio.core import se2
from iastudio.core.attention import AttentionRun
from iastudio.core.backend import BackendUnavailableError, get_backend
from iastudio.core.clusterbook import ClusterBook
from iastudio.core.clustering import read_clusters
from iastudio.core.demos import load_demo
from iastudio.core.filenames import display_name, printable
from iastudio.core.imageset import ImageSet, NoUsableImagesError, load_images
from iastudio.core.preprocess import preprocess
from iastudio.core.project import Project, load_project, save_project
from iastudio.core.similarity import invariant_distances
from iastudio.core.warp import warp

from .wording import count_of
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
    selectionChanged = Signal(list)  # image indices
    clustersChanged = Signal()
    inspectReady = Signal(dict)
    projectChanged = Signal()  # path or dirty flag changed
    message = Signal(str)  # plain one-line status messages
    runStateChanged = Signal(str)  # idle | running | stopping | stopped | finished | failed
    frameReady = Signal(object)  # latest Frame (views pull at <= 30 fps)
    progressChanged = Signal(float, str, float)  # fraction, text, eta seconds (-1 unknown)
    runFinished = Signal(object)  # Frame
    runFailed = Signal(str, str)  # message, traceback
    _drive = Signal(object)  # -> worker.drive (queued)
    _drive_subset = Signal(object, int, object)  # -> worker.drive_subset (queued)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.data: ImageSet = ImageSet([], [], [], [])
        self.size = 64
        self.canvas = None
        self.base = np.zeros((0, self.size, self.size), np.float32)  # preprocessed originals
        self.transforms = np.zeros((0, 3))  # applied per image (canvas px)
        self.working = self.base  # the transformed set: what runs
        self.selection: list[int] = []
        self.book: ClusterBook | None = None
        self.history_frames: list = []  # iteration-level frames of the last run (for replay/export)
        self.project_path = None
        self.dirty = False
        self.edits: list[str] = []
        self.undo_stack = QUndoStack(self)
        self.undo_stack.indexChanged.connect(self._on_undo_index)
        self.state = "idle"
        self.run: AttentionRun | None = None
        self._subset_run: AttentionRun | None = None
        self.latest: Frame | None = None
        self.final: Frame | None = None
        self._t_start = 0.0
        self._thread = QThread()
        self._thread.setObjectName("ia-run-worker")
        self.worker = RunWorker()
        self.worker.moveToThread(self._thread)
        self._drive.connect(self.worker.drive)
        self._drive_subset.connect(self.worker.drive_subset)
        self.worker.subsetDone.connect(self._on_subset_done)
        self.worker.frame.connect(self._on_frame)
        self.worker.progress.connect(self._on_progress)
        self.worker.finished.connect(self._on_finished)
        self.worker.stopped.connect(self._on_stopped)
        self.worker.failed.connect(self._on_failed)
        self.worker.notice.connect(self.message)
        self._thread.start()
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.shutdown)

    # ---------------------------------------------------------------- images
    @property
    def n(self) -> int:
        return len(self.data)

    @property
    def selected(self) -> int:
        """The first selected image, or -1."""
        return self.selection[0] if self.selection else -1

    def load_demo(self, name: str, *, seed: int = 0) -> None:
        self._set_data(load_demo(name, seed=seed))
        self.message.emit(f"Loaded demo '{name}': {self.data.summary()}")

    def add_paths(self, paths, progress=None) -> list[dict]:
        """Add files/folders; returns the skipped list (also reported by message).

        ``progress(done, total)`` is called after each file; returning False stops the loading.
        """
        try:
            new = load_images(paths, on_progress=progress)
        except NoUsableImagesError as exc:
            self.data.skipped.extend(exc.skipped)
            self.imagesChanged.emit()
            self.message.emit(f"Nothing added: {exc}")
            return exc.skipped
        kept = self.transforms.copy() if self.n else None
        self._set_data(new if self.n == 0 else self.data.extend(new))
        if kept is not None and kept.any():  # the transforms already set stay; new images start untransformed
            self.transforms[: len(kept)] = kept  # pixels of the same scale: padding never rescales
            self._update_working()
        msg = f"Added {len(new)} image{'s' if len(new) != 1 else ''}"
        if new.skipped:
            msg += f"; skipped {len(new.skipped)}: " + "; ".join(
                f"{printable(display_name(s['path']))} ({printable(s['reason'])})" for s in new.skipped[:3])
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
        self.selection = []
        self.latest = self.final = None
        self.book = None
        self.history_frames = []
        self.undo_stack.clear()
        self.edits = []
        self.imagesChanged.emit()
        self.transformsChanged.emit()
        self.clustersChanged.emit()
        self._mark_dirty()

    def _preprocess(self) -> None:
        if self.n:
            self.canvas = preprocess(self.data.images, size=self.size)
            self.base = self.canvas.images
        else:
            self.canvas = None
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

    def select(self, indices) -> None:
        """Select images (an index, a list of indices, or -1/[] for none), shared by every view."""
        if isinstance(indices, (int, np.integer)):
            indices = [] if indices < 0 else [int(indices)]
        sel = [int(i) for i in dict.fromkeys(indices) if 0 <= int(i) < self.n]
        if sel != self.selection:
            self.selection = sel
            self.selectionChanged.emit(sel)

    def select_cluster(self, cluster: int) -> None:
        if self.book is not None:
            self.select(self.book.members(cluster).tolist())

    # ---------------------------------------------------------------- clusters (undoable)
    def edit_clusters(self, text: str, new_book: ClusterBook) -> None:
        """Replace the clusters by ``new_book`` as one undoable edit called ``text``."""
        if self.book is None or new_book == self.book:
            return
        self.undo_stack.push(_BookCommand(self, self.book, new_book, text))

    def _set_book(self, book: ClusterBook) -> None:
        self.book = book
        self.clustersChanged.emit()

    def reread(self, *, k=None, threshold: float | None = None) -> None:
        """Relabel from the current state: k clusters, or a distance threshold."""
        frame = self.final or self.latest
        if frame is None:
            self.message.emit("Run first: clusters are read from a run's result.")
            return
        d = frame.extra["result"].final_distances if "result" in frame.extra else frame.snapshot.distances
        if threshold is not None:
            from scipy.cluster.hierarchy import fcluster, linkage
            from scipy.spatial.distance import squareform

            z = linkage(squareform(np.asarray(d, float), checks=False), method="single")
            labels = fcluster(z, t=float(threshold), criterion="distance") - 1
            from iastudio.core.clustering import relabel_by_appearance

            labels = relabel_by_appearance(labels)
            text = f"Re-read clusters at distance {threshold:.3g}"
        else:
            kk = "auto" if k in (None, "auto") else min(int(k), self.n)
            labels, _ = read_clusters(np.asarray(d, float), k=kk)
            text = f"Re-read clusters with k = {kk}"
        self.edit_clusters(text, ClusterBook.from_labels(labels))

    def split_by_rerun(self, cluster: int) -> bool:
        """Split a cluster by running Invariant Attention on its images alone (in the worker)."""
        if self.book is None or self.state in ("running", "stopping", "splitting"):
            return False
        members = self.book.members(cluster)
        if len(members) < 3:
            self.message.emit("A cluster needs at least 3 images to be re-run.")
            return False
        opts = {} if self.run is None else {
            k: v for k, v in vars(self.run.settings).items() if k not in ("clusters", "snapshot_every")}
        sub = AttentionRun(self.working[members], backend="numpy", clusters="auto", **opts)
        self._subset_run = sub
        _warm_imports()
        self._set_state("splitting")
        self.message.emit(f"Re-running {self.book.name_of(cluster)} ({len(members)} images)…")
        self._drive_subset.emit(sub, int(cluster), members)
        return True

    def _on_subset_done(self, cluster, members, labels) -> None:
        self._subset_run = None
        self._set_state("finished" if self.final is not None else "idle")
        if labels is None:
            self.message.emit("The re-run did not finish; nothing was split.")
            return
        k = int(np.max(labels)) + 1
        if k < 2:
            self.message.emit(f"Re-running {self.book.name_of(cluster)} found a single group; "
                              "use Split with k to force one.")
            return
        if list(self.book.members(cluster)) != list(members):
            self.message.emit("The cluster changed during the re-run; nothing was split.")
            return
        self.edit_clusters(f"Split {self.book.name_of(cluster)} by re-running ({k} groups)",
                           self.book.split(cluster, labels))

    # ---------------------------------------------------------------- inspect
    def inspect(self, i: int, j: int) -> dict | None:
        """Align image i onto image j and report the transform, score and images."""
        if not (0 <= i < self.n and 0 <= j < self.n):
            return None
        pair = self.working[[i, j]]
        opts = {}
        if self.run is not None:
            opts = dict(angle_step=self.run.settings.angle_step, rotation_range=self.run.settings.rotation_range)
        sim = invariant_distances(pair, **opts)
        t = sim.transforms[0, 1]
        aligned = warp(pair[:1], t[None])[0]
        score = float((aligned * pair[1]).sum() / max(np.linalg.norm(aligned) * np.linalg.norm(pair[1]), 1e-12))
        info = {"i": i, "j": j, "vi": pair[0], "vj": pair[1], "aligned": aligned,
                "difference": np.abs(aligned - pair[1]), "theta_deg": float(np.rad2deg(t[0])),
                "tx": float(t[1]), "ty": float(t[2]), "distance": float(sim.distances[0, 1]), "score": score,
                "name_i": self.data.paths[i], "name_j": self.data.paths[j]}
        self.inspectReady.emit(info)
        return info

    # ---------------------------------------------------------------- projects
    def _on_undo_index(self, _index: int) -> None:
        self._mark_dirty()

    def _mark_dirty(self, dirty: bool = True) -> None:
        self.dirty = dirty
        self.projectChanged.emit()

    def to_project(self) -> Project:
        """The current session as a :class:`iastudio.core.project.Project`."""
        res = self.final.extra.get("result") if self.final is not None else None
        result = {}
        if res is not None:
            result = {"cluster_means": res.cluster_means, "image_transforms": res.image_transforms,
                      "scores": res.scores, "weights": res.weights, "input_distances": res.input_distances,
                      "final_distances": res.final_distances, "run_labels": res.labels}
        history = [{"iteration": f.snapshot.iteration, "stage": f.snapshot.stage, "weights": f.snapshot.weights,
                    "means": f.snapshot.means, "distances": f.snapshot.distances, "labels": f.snapshot.labels}
                   for f in self.history_frames]
        params = dict(vars(self.run.settings)) if self.run is not None else {}
        params["sigmas"] = list(params.get("sigmas", []))
        if self.run is not None:
            params["backend"] = self.run.backend.name
            params["beta_used"] = float(res.beta) if res is not None else None
        return Project(
            paths=list(self.data.paths), labels=list(self.data.labels), skipped=list(self.data.skipped),
            size=self.size, transforms=self.transforms.copy(), base=self.base,
            scale=None if self.canvas is None else self.canvas.scale,
            offset=None if self.canvas is None else self.canvas.offset,
            parameters=params, clusters=self.book, history=history, result=result, edits=list(self.edits),
        )

    def save_project(self, path, *, embed: bool = True) -> None:
        save_project(path, self.to_project(), embed=embed)
        self.project_path = str(path)
        self._mark_dirty(False)
        self.message.emit(f"Saved {path}")

    def autosave(self, path) -> bool:
        """Write the session to ``path`` (not changing the project's own path)."""
        if not self.n:
            return False
        save_project(path, self.to_project())
        return True

    def open_project(self, path) -> Project:
        """Open a ``.iaproj``; raises :class:`iastudio.core.project.ProjectError` when it cannot be used.

        Transactional: the project is read and checked, and the whole new
        session (images, transforms, run frames, clusters) is built aside
        first; only then is the current session replaced.  On any failure
        the current session, its project path and its dirty flag are
        untouched.
        """
        from iastudio.core.project import ProjectError

        proj = load_project(path)
        try:
            state = self._session_from(proj, path)
        except ProjectError:
            raise
        except Exception as exc:  # noqa: BLE001 - any problem with the contents is a refusal
            log.exception("cannot open project %s", path)
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise ProjectError(f"{path}: cannot be opened ({reason})") from None
        self._install_session(state)
        missing = state["missing"]
        note = ""
        if missing:
            note = (f"; {len(missing)} original file(s) moved or missing, using the embedded images: "
                    + ", ".join(display_name(p) for p in missing[:5]))
        self.message.emit(f"Opened {path}: {proj.n} images{note}")
        proj.missing = missing
        return proj

    def _session_from(self, proj: Project, path) -> dict:
        """Everything :meth:`open_project` installs, built without touching the current session."""
        from iastudio.core.preprocess import Canvas
        from iastudio.core.project import ProjectError

        n = proj.n
        missing = proj.missing_originals()
        if proj.base is None:
            if missing:
                raise ProjectError(f"{path}: the original images were moved and the project has no embedded "
                                   f"copies; missing: {', '.join(missing[:5])}")
            loaded = load_images(proj.paths)
            if len(loaded) != n:
                bad = "; ".join(f"{s['path']}: {s['reason']}" for s in loaded.skipped[:3])
                raise ProjectError(f"{path}: {n - len(loaded)} of the {n} original images cannot be read "
                                   f"and the project has no embedded copies ({bad})")
            canvas = preprocess(loaded.images, size=proj.size)
            data = ImageSet(loaded.images, list(proj.paths), list(proj.labels), list(proj.skipped))
        else:
            base = proj.base.astype(np.float32, copy=False)
            canvas = Canvas(base, proj.scale if proj.scale is not None else np.ones(n),
                            proj.offset if proj.offset is not None else np.zeros((n, 2)), [])
            data = ImageSet(list(base), list(proj.paths), list(proj.labels), list(proj.skipped))
        base = canvas.images
        transforms = np.array(proj.transforms, dtype=float)
        working = base if not transforms.any() else _renorm(np.clip(warp(base, transforms), 0, None))
        frames, final = self._frames_from(proj, working)
        if proj.clusters is not None and proj.clusters.n != n:
            raise ProjectError(f"{path}: the clusters do not match the images")
        return {"data": data, "size": int(proj.size), "canvas": canvas, "base": base, "transforms": transforms,
                "working": working, "frames": frames, "final": final, "book": proj.clusters,
                "edits": list(proj.edits), "path": str(path), "missing": missing}

    def _install_session(self, st: dict) -> None:
        """Replace the current session by one built by :meth:`_session_from` (cannot fail)."""
        self.stop()
        self.data, self.size, self.canvas, self.base = st["data"], st["size"], st["canvas"], st["base"]
        self.transforms, self.working = st["transforms"], st["working"]
        self.selection = []
        self.run = None
        self.history_frames = st["frames"]
        self.latest = st["frames"][-1] if st["frames"] else None
        self.final = st["final"]
        self.book = st["book"]
        self.undo_stack.clear()
        self.edits = st["edits"]
        self.imagesChanged.emit()
        self.transformsChanged.emit()
        self.clustersChanged.emit()
        if self.latest is not None:
            self.frameReady.emit(self.latest)
        if self.final is not None:
            self.runFinished.emit(self.final)
        self.project_path = st["path"]
        self._mark_dirty(False)

    def _restore_run(self, proj: Project) -> None:
        """Rebuild the frames of a saved run so every view shows it again."""
        self.history_frames, self.final = self._frames_from(proj, self.working)
        self.latest = self.history_frames[-1] if self.history_frames else None
        if self.latest is not None:
            self.frameReady.emit(self.latest)
        if self.final is not None:
            self.runFinished.emit(self.final)

    @staticmethod
    def _frames_from(proj: Project, working: np.ndarray):
        """``(frames, final)`` of a saved run, checked against the images; changes nothing."""
        from iastudio.core.attention import RunResult, Snapshot
        from iastudio.core.project import ProjectError
        from iastudio.core.report import convergence_curves

        from .worker import classical_mds

        if not proj.history:
            return [], None
        n = working.shape[0]
        beta = proj.parameters.get("beta_used")
        beta = float("nan") if beta is None else float(beta)
        for h in proj.history:
            if any(h.get(k) is None for k in ("weights", "means", "distances", "labels")):
                raise ProjectError("the saved run is incomplete (a step lacks its weights, means, distances "
                                   "or clusters)")
            if h["means"].shape[1:] != working.shape[1:]:
                raise ProjectError("the saved run does not match the images (different working size)")
        res = None
        r = proj.result
        if all(r.get(k) is not None for k in ("run_labels", "cluster_means", "image_transforms", "scores",
                                              "weights", "input_distances", "final_distances")):
            labels = np.asarray(r["run_labels"]).astype(int)
            k = int(labels.max()) + 1
            if k > n or r["cluster_means"].shape[0] != k or r["cluster_means"].shape[1:] != working.shape[1:]:
                raise ProjectError("the saved result does not match the images")
            res = RunResult(
                labels=labels, n_clusters=k,
                cluster_means=r["cluster_means"], image_transforms=r["image_transforms"],
                scores=r["scores"], weights=r["weights"], input_distances=r["input_distances"],
                final_distances=r["final_distances"],
                history=[h["distances"] for h in proj.history if h["stage"] in ("similarity", "done")],
                features=proj.history[-1]["means"], iterations=int(proj.history[-1]["iteration"]),
                beta=beta,
            )
        mds = None
        hist = []
        frames = []
        for h in proj.history:
            snap = Snapshot(iteration=h["iteration"], stage=h["stage"], step=0, n_steps=0, weights=h["weights"],
                            means=h["means"], distances=h["distances"], transforms=None, labels=h["labels"],
                            objective=[], timings={}, progress=1.0, beta=beta)
            if h["stage"] in ("similarity", "done"):
                hist.append(h["distances"])
            mds = classical_mds(h["distances"], mds)
            frames.append(Frame(snapshot=snap, order=np.argsort(h["labels"], kind="stable"),
                                mds=mds, curves=convergence_curves(hist, h["labels"])))
        last = frames[-1]
        final = None
        if res is not None:
            last.extra["result"] = res
            last.cluster_means = res.cluster_means
            labels = res.labels
            last.plain_means = np.stack([working[labels == c].mean(axis=0) if (labels == c).any()
                                         else np.zeros(working.shape[1:], working.dtype) for c in range(k)])
            final = last
        return frames, final

    # ---------------------------------------------------------------- run
    def start(self, *, backend: str = "auto", **options) -> bool:
        """Start a new run on the transformed set; False (with a message) when refused."""
        if self.state in ("running", "stopping", "splitting"):
            self.message.emit("A run is already going.")
            return False
        if self.n < 2:
            self.message.emit("Add at least 2 images before starting a run.")
            return False
        options.setdefault("snapshot_every", 1)  # the window shows every mean step
        try:
            self.run = AttentionRun(self.working, backend=backend, **options)
        except (ValueError, BackendUnavailableError) as exc:
            self.message.emit(f"Cannot start: {exc}")
            return False
        self.latest = self.final = None
        self.history_frames = []
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
        _warm_imports()
        self._t_start = time.perf_counter()
        self._set_state("running")
        self._drive.emit(self.run)

    def stop(self) -> None:
        if self.run is not None and self.state == "running":
            self.run.cancel()
            self._set_state("stopping")

    def shutdown(self, timeout_ms: int = 10000) -> bool:
        """Stop the worker and its thread (window closing); True if it ended in time."""
        for run in (self.run, self._subset_run):
            if run is not None:
                run.cancel()
        self._thread.quit()
        return self._thread.wait(timeout_ms)

    def _set_state(self, state: str) -> None:
        self.state = state
        self.runStateChanged.emit(state)

    def _on_frame(self, frame: Frame) -> None:
        self.latest = frame
        if frame.snapshot.stage in ("similarity", "iteration", "done"):
            self.history_frames.append(frame)
        self.frameReady.emit(frame)

    def _on_progress(self, fraction: float, text: str) -> None:
        el = time.perf_counter() - self._t_start
        eta = el * (1 - fraction) / fraction if fraction > 0.02 else -1.0
        self.progressChanged.emit(fraction, text, eta)

    def _on_finished(self, frame: Frame) -> None:
        self.latest = self.final = frame
        if not self.history_frames or self.history_frames[-1] is not frame:
            self.history_frames.append(frame)
        self.undo_stack.clear()
        self.edits = []
        self._set_book(ClusterBook.from_labels(frame.extra["result"].labels))
        self._mark_dirty()
        self._set_state("finished")
        self.frameReady.emit(frame)
        self.runFinished.emit(frame)
        res = frame.extra.get("result")
        self.message.emit(f"Done: {count_of(res.n_clusters, 'cluster')} in {frame.elapsed:.1f} s" if res else "Done")

    def _on_stopped(self) -> None:
        self._set_state("stopped")
        self.message.emit("Stopped. Resume continues where it stopped.")

    def _on_failed(self, message: str, tb: str) -> None:
        self._set_state("failed")
        self.runFailed.emit(message, tb)


class _BookCommand(QUndoCommand):
    """One cluster edit: swaps the model's cluster book before/after."""

    def __init__(self, model: StudioModel, before: ClusterBook, after: ClusterBook, text: str):
        super().__init__(text)
        self.model, self.before, self.after = model, before, after

    def redo(self):
        self.model._set_book(self.after)
        self.model.edits.append(self.text())

    def undo(self):
        self.model._set_book(self.before)
        if self.model.edits:
            self.model.edits.pop()


def _renorm(images: np.ndarray) -> np.ndarray:
    images = images.astype(np.float32)
    norm = np.sqrt((images.astype(np.float64) ** 2).reshape(len(images), -1).sum(axis=1))
    return images / np.maximum(norm, 1e-12).reshape((-1,) + (1,) * (images.ndim - 1)).astype(np.float32)


def _warm_imports() -> None:
    """Import what the engine imports lazily, here on the GUI thread, before the worker needs it.

    A first import of scikit-learn inside the worker thread was seen to stall (its joblib and psutil
    imports) in one environment; imported once on the GUI thread, the worker finds it loaded.
    """
    import sklearn.cluster  # noqa: F401
    import sklearn.metrics  # noqa: F401
