"""The studio's session, without Qt: the image set, its transforms, the run, the clusters and their history.

A :class:`Session` holds everything the user works on and is the one place that changes it; it emits
plain events (:class:`Events`) that a GUI adapter turns into signals, so every view draws from the same
state.  It runs nothing itself: a driver (the app's thread worker, or a plain loop) steps the run it
prepares and hands the frames back (:meth:`Session.on_frame`, :meth:`Session.on_finished`, ...).

Rules kept here rather than in the views:

* the inputs (images, transforms, working size) are frozen while a run exists: changing them discards
  the run first (:meth:`Session.work_at_risk` tells the caller what that loses, so it can ask);
* Resume only continues a stopped run on the very images it started with;
* every cluster edit is one undoable step (:class:`EditHistory`).

>>> s = Session()
>>> s.load_demo("shapes")
>>> s.n
18
"""
from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp

from . import options, se2
from .attention import AttentionRun, RunState
from .backend import BackendUnavailableError
from .cluster_means import cluster_key
from .clusterbook import UNASSIGNED, ClusterBook
from .clustering import labels_at_threshold, read_clusters, split_labels
from .demos import load_demo
from .distributed import DaskUnavailableError
from .filenames import display_name, printable
from .frames import Frame, FrameBuilder, edited_clusters, frames_from_project
from .imageset import ImageSet, image_files, load_image, load_images, no_usable_images, read_entries, skip_entry
from .preprocess import Canvas, apply_transforms, preprocess
from .project import RECORDED_STAGES, Project, ProjectError, history_entry, load_project, run_record, save_project
from .wording import count_of

log = logging.getLogger(__name__)

BUSY = (RunState.RUNNING, RunState.STOPPING, RunState.SPLITTING)


class Events:
    """Named plain-callback events: ``connect(name, fn)``, ``emit(name, *args)``."""

    def __init__(self, names):
        self._callbacks: dict[str, list[Callable]] = {n: [] for n in names}

    def connect(self, name: str, callback: Callable) -> None:
        self._callbacks[name].append(callback)

    def disconnect(self, name: str, callback: Callable) -> None:
        self._callbacks[name].remove(callback)

    def emit(self, name: str, *args) -> None:
        for fn in list(self._callbacks[name]):
            fn(*args)


@dataclass(frozen=True)
class Edit:
    """One undoable cluster edit."""

    text: str
    before: ClusterBook
    after: ClusterBook


class EditHistory:
    """Undo/redo of cluster edits: a list of :class:`Edit` and the position in it."""

    def __init__(self):
        self.edits: list[Edit] = []
        self.index = 0

    def push(self, edit: Edit) -> None:
        del self.edits[self.index:]
        self.edits.append(edit)
        self.index = len(self.edits)

    def clear(self) -> None:
        self.edits, self.index = [], 0

    @property
    def can_undo(self) -> bool:
        return self.index > 0

    @property
    def can_redo(self) -> bool:
        return self.index < len(self.edits)

    @property
    def undo_text(self) -> str:
        return self.edits[self.index - 1].text if self.can_undo else ""

    @property
    def redo_text(self) -> str:
        return self.edits[self.index].text if self.can_redo else ""

    def undo(self) -> Edit | None:
        if not self.can_undo:
            return None
        self.index -= 1
        return self.edits[self.index]

    def redo(self) -> Edit | None:
        if not self.can_redo:
            return None
        self.index += 1
        return self.edits[self.index - 1]


EVENTS = ("images", "transforms", "selection", "clusters", "history", "project", "message", "state", "frame",
          "progress", "finished", "failed", "inspect")


class Session:
    """Everything the user works on, changed only through these methods; see the module's docstring.

    Parameters
    ----------
    size : int
        Working size in pixels of the preprocessed images.
    """

    def __init__(self, *, size: int = 64):
        self.events = Events(EVENTS)
        self.data = ImageSet([], [], [], [])
        self.size = options.check("size", int(size))
        self.canvas: Canvas | None = None
        self.base = np.zeros((0, self.size, self.size), np.float32)  # preprocessed originals
        self.transforms = np.zeros((0, 3))  # applied per image (canvas px)
        self.working = self.base  # the transformed set: what runs
        self.selection: list[int] = []
        self.book: ClusterBook | None = None
        self.history = EditHistory()
        self.edits: list[str] = []  # names of the edits since the run (saved with the project)
        self.frames: list[Frame] = []  # iteration-level frames of the run (replay, export, projects)
        self.latest: Frame | None = None
        self.final: Frame | None = None
        self.run: AttentionRun | None = None
        self.subset_run: AttentionRun | None = None
        self.state = RunState.IDLE
        self.project_path: str | None = None
        self.dirty = False
        self.revision = 0  # grows with every change that makes the session dirty (see mark_saved)
        self.elapsed = 0.0  # seconds the run has been running, over every Resume
        self._opened_parameters: dict = {}  # an opened project's run parameters (its run is not live)
        # How the window shows the work (e.g. {"per_cluster": True, "k": 4}): plain values a front end sets,
        # saved with the project as its parameters' "view" and given back by open_project.
        self.view_state: dict = {}
        # Invariant means of clusters the edits made, by cluster_key(members) (see missing_cluster_means)
        self.cluster_means: dict = {}
        self._clients: dict = {}  # Dask clients by address, kept between runs

    # ------------------------------------------------------------------ small helpers
    def _emit(self, name: str, *args) -> None:
        self.events.emit(name, *args)

    def message(self, text: str) -> None:
        self._emit("message", text)

    @property
    def n(self) -> int:
        return len(self.data)

    @property
    def selected(self) -> int:
        """The first selected image, or -1."""
        return self.selection[0] if self.selection else -1

    @property
    def busy(self) -> bool:
        return self.state in BUSY

    @property
    def result(self):
        """The finished run's :class:`~iastudio.core.attention.RunResult`, or None."""
        return None if self.final is None else self.final.result

    def _set_state(self, state: RunState) -> None:
        self.state = RunState(state)
        self._emit("state", self.state)

    def _mark_dirty(self, dirty: bool = True) -> None:
        if dirty:
            self.revision += 1
        self.dirty = dirty
        self._emit("project")

    def work_at_risk(self) -> str:
        """What discarding the run would lose, in words ("" when nothing)."""
        if self.run is None and self.final is None and self.book is None:
            return ""
        parts = ["the result of the last run" if self.final is not None else "the stopped run"]
        if self.edits:
            parts.append(count_of(len(self.edits), "cluster edit"))
        return " and ".join(parts)

    def discard_run(self) -> None:
        """Forget the run, its frames, the clusters and their history (the images stay)."""
        if self.busy:
            self.stop()
        self.run = None
        self.frames, self.latest, self.final = [], None, None
        self.book = None
        self.history.clear()
        self.edits = []
        self.cluster_means = {}
        self.elapsed = 0.0
        if not self.busy:
            self._set_state(RunState.IDLE)
        self._emit("clusters")
        self._emit("history")
        self._emit("frame", None)

    def _inputs_may_change(self, what: str) -> bool:
        """Refuse while a run works on the inputs; otherwise discard the run they would no longer match."""
        if self.busy:
            self.message(f"Stop the run before {what}.")
            return False
        if self.run is not None or self.final is not None:
            self.discard_run()
        return True

    # ------------------------------------------------------------------ images
    def load_demo(self, name: str, *, seed: int = 0, size: int | None = None) -> bool:
        """Replace the set by the demo ``name`` (a new, untitled set), at working ``size`` if given."""
        if not self._inputs_may_change("loading other images"):
            return False
        if size is not None:
            self.size = options.check("size", int(size))
        self._set_data(load_demo(name, seed=seed), untitled=True)
        self.message(f"Loaded demo '{name}': {self.data.summary()}")
        return True

    def add_paths(self, paths, progress=None, *, replace: bool = False) -> list[dict]:
        """Add files/folders (or replace the set with them); returns the skipped list (also in a message).

        Reads them here with :func:`read_images` (``progress(done, total, path)`` is called before each
        file; returning False stops the loading and keeps what was read).  A GUI reads them in a worker
        thread instead and gives the result to :meth:`add_loaded`.
        """
        if not self.begin_adding():
            return []
        return self.add_loaded(read_images(paths, size=self.size, progress=progress), replace=replace)

    def begin_adding(self) -> bool:
        """May images be read for this session now?  False (with a message) while a run works on the inputs.

        Nothing is discarded here: the run they would no longer match goes only when :meth:`add_loaded`
        actually adds something (a file that holds no image changes nothing).
        """
        if self.busy:
            self.message("Stop the run before adding images.")
            return False
        return True

    def add_loaded(self, loaded: LoadedImages, *, replace: bool = False, size: int | None = None) -> list[dict]:
        """Add images read by :func:`read_images` (or replace the set with them); returns the skipped list.

        Call it on the thread that owns the session.  Refused (returning ``[]``) while a run works on
        the inputs; images preprocessed at another working size than the session's are done again.
        Nothing read (no file held an image): nothing changes but the list of skipped files.
        ``size`` (with ``replace``): the new set's working size.
        """
        if not self.begin_adding():
            return []
        new = loaded.data
        if not len(new):  # nothing to add: the set, the run and the project stay exactly as they were
            exc = no_usable_images(new.skipped)
            self.data.skipped.extend(exc.skipped)
            self._emit("images")
            self.message(f"Nothing {'opened' if replace else 'added'}: {exc}")
            return exc.skipped
        if not self._inputs_may_change("adding images"):
            return []
        if replace and size is not None:
            self.size = options.check("size", int(size))
        canvas = loaded.canvas if loaded.size == self.size else preprocess(new.images, size=self.size)
        kept = None if replace or not self.n else self.transforms.copy()
        if kept is None:
            self._set_data(new, canvas, untitled=replace)
        else:
            old = self.canvas  # None when its side differs: the whole set is preprocessed again
            same = old is not None and old.images.shape[1:] == canvas.images.shape[1:]
            self._set_data(self.data.extend(new), stack_canvases([old, canvas]) if same else None)
        if kept is not None and kept.any():  # the transforms already set stay; new images start untransformed
            self.transforms[: len(kept)] = kept
            self._update_working()
        msg = f"Added {count_of(len(new), 'image')}"
        if new.skipped:
            msg += f"; skipped {len(new.skipped)}: " + "; ".join(
                f"{printable(display_name(s['path']))} ({printable(s['reason'])})" for s in new.skipped[:3])
        self.message(msg)
        return new.skipped

    def set_images(self, data: ImageSet) -> bool:
        """Replace the image set by ``data`` (an :class:`~iastudio.core.imageset.ImageSet`)."""
        if not self._inputs_may_change("replacing the images"):
            return False
        self._set_data(data, untitled=True)
        return True

    def clear(self) -> bool:
        if not self._inputs_may_change("clearing the images"):
            return False
        self._set_data(ImageSet([], [], [], []), untitled=True)
        return True

    def set_size(self, size: int) -> bool:
        """Change the working size (the images are preprocessed again; transforms are rescaled)."""
        size = int(size)
        if size == self.size:
            return True
        if problem := options.problem("size", size, label="the working size"):
            self.message(problem[0].upper() + problem[1:] + ".")
            return False
        if not self._inputs_may_change("changing the working size"):
            return False
        old = self.base.shape[1] if self.n else self.size
        self.size = size
        if self.n:
            t = self.transforms.copy()
            self._preprocess()
            t[:, 1:] *= self.base.shape[1] / old
            self.transforms = t
            self._update_working()
            self._emit("images")
        return True

    def _set_data(self, data: ImageSet, canvas: Canvas | None = None, *, untitled: bool = False) -> None:
        """Install ``data``, with ``canvas`` as its preprocessed images (None: preprocess them here).

        ``untitled``: ``data`` is a new set, not the opened project's (a demo, another folder): the
        session is no longer that project's, and saving it asks for a file (as after *New*).
        """
        if untitled:
            self.project_path = None
        self.data = data
        if canvas is None:
            self._preprocess()
        else:
            self.canvas, self.base = canvas, canvas.images
        self.transforms = np.zeros((self.n, 3))
        self.working = self.base
        self.selection = []
        self.discard_run()
        self._emit("images")
        self._emit("transforms")
        self._emit("selection", [])
        self._mark_dirty()

    def _preprocess(self) -> None:
        if self.n:
            self.canvas = preprocess(self.data.images, size=self.size)
            self.base = self.canvas.images
        else:
            self.canvas = None
            self.base = np.zeros((0, self.size, self.size), np.float32)

    # ------------------------------------------------------------------ transforms
    def apply_random_transforms(self, *, rotation_deg: float, shift_percent: float, seed: int) -> bool:
        if not self.n or not self._inputs_may_change("transforming the images"):
            return False
        shift = shift_percent / 100.0 * self.base.shape[1]
        self.transforms = se2.random_transforms(self.n, rotation_range=rotation_deg, shift_range=shift, seed=seed)
        self._update_working()
        return True

    def reset_transforms(self) -> bool:
        if not self._inputs_may_change("resetting the transforms"):
            return False
        self.transforms = np.zeros((self.n, 3))
        self._update_working()
        return True

    def set_transform(self, i: int, theta_deg: float, tx: float, ty: float) -> bool:
        if not self._inputs_may_change("transforming an image"):
            return False
        self.transforms[i] = (np.deg2rad(theta_deg), tx, ty)
        self._update_working(only=i)
        return True

    def _update_working(self, only: int | None = None) -> None:
        if not self.n or not self.transforms.any():
            self.working = self.base  # the originals, exactly
        elif only is None:
            self.working = apply_transforms(self.base, self.transforms)
        else:
            w = self.working.copy()
            w[only] = apply_transforms(self.base[only][None], self.transforms[only][None])[0]
            self.working = w
        self._emit("transforms")
        self._mark_dirty()

    # ------------------------------------------------------------------ selection
    def select(self, indices) -> None:
        """Select images (an index, a list of indices, or -1/[] for none), shared by every view."""
        if isinstance(indices, (int, np.integer)):
            indices = [] if indices < 0 else [int(indices)]
        sel = [int(i) for i in dict.fromkeys(indices) if 0 <= int(i) < self.n]
        if sel != self.selection:
            self.selection = sel
            self._emit("selection", sel)

    def select_cluster(self, cluster: int) -> None:
        if self.book is not None:
            self.select(self.book.members(cluster).tolist())

    # ------------------------------------------------------------------ clusters (undoable)
    def edit_clusters(self, text: str, new_book: ClusterBook) -> bool:
        """Replace the clusters by ``new_book`` as one undoable edit called ``text``."""
        if self.book is None or new_book == self.book:
            return False
        self.history.push(Edit(text, self.book, new_book))
        self._apply_book(new_book)
        self.edits.append(text)
        self._emit("history")
        self._mark_dirty()
        return True

    def undo(self) -> bool:
        edit = self.history.undo()
        if edit is None:
            return False
        self._apply_book(edit.before)
        if self.edits:
            self.edits.pop()
        self._emit("history")
        self._mark_dirty()
        self.message(f"Undid: {edit.text}")
        return True

    def redo(self) -> bool:
        edit = self.history.redo()
        if edit is None:
            return False
        self._apply_book(edit.after)
        self.edits.append(edit.text)
        self._emit("history")
        self._mark_dirty()
        self.message(f"Redid: {edit.text}")
        return True

    def _apply_book(self, book: ClusterBook | None) -> None:
        self.book = book
        self._emit("clusters")

    def move_images(self, indices, cluster: int) -> bool:
        if self.book is None or not len(indices):
            return False
        n = len(indices)
        to = "Unassigned" if cluster == UNASSIGNED else self.book.name_of(cluster)
        return self.edit_clusters(f"Move {count_of(n, 'image')} to {to}", self.book.move(indices, cluster))

    def rename_cluster(self, cluster: int, name: str) -> bool:
        if self.book is None:
            return False
        try:
            return self.edit_clusters(f"Rename {self.book.name_of(cluster)} to {name}",
                                      self.book.rename(cluster, name))
        except ValueError as exc:
            self.message(str(exc))
            return False

    def merge_clusters(self, clusters) -> bool:
        if self.book is None or len(clusters) < 2:
            self.message("Select two or more clusters to merge.")
            return False
        return self.edit_clusters(f"Merge {len(clusters)} clusters", self.book.merge(clusters))

    def new_cluster_from_selection(self) -> bool:
        if self.book is None or not self.selection:
            self.message("Select images first.")
            return False
        return self.edit_clusters(f"New cluster from {len(self.selection)} images",
                                  self.book.new_cluster(self.selection))

    def split_cluster(self, cluster: int, k: int) -> bool:
        """Split a cluster into ``k`` by spectral clustering of its members' input distances."""
        res = self.result
        if self.book is None or res is None:
            self.message("Run first: clusters are split using a run's distances.")
            return False
        members = self.book.members(cluster)
        if len(members) < k:
            self.message(f"Cannot split {len(members)} images into {k}.")
            return False
        sub = split_labels(res.input_distances, members, k=k)
        return self.edit_clusters(f"Split {self.book.name_of(cluster)} into {k}", self.book.split(cluster, sub))

    def reread(self, *, k=None, threshold: float | None = None) -> bool:
        """Relabel from the run's distances: ``k`` clusters ("auto" or None: chosen), or a distance threshold."""
        frame = self.final or self.latest
        if frame is None:
            self.message("Run first: clusters are read from a run's result.")
            return False
        d = frame.result.final_distances if frame.result is not None else frame.snapshot.distances
        d = d if sp.issparse(d) else np.asarray(d, float)  # a pruned run above 2,000 images: its graph
        if threshold is not None:
            labels = labels_at_threshold(d, threshold=float(threshold))
            text = f"Re-read clusters at distance {threshold:.3g}"
        else:
            kk = "auto" if k in (None, "auto") else min(int(k), self.n)
            labels, _ = read_clusters(d, k=kk)
            text = f"Re-read clusters with k = {kk}"
        if self.book is None:
            self._apply_book(ClusterBook.from_labels(labels))
            return True
        return self.edit_clusters(text, ClusterBook.from_labels(labels))

    def missing_cluster_means(self) -> list[np.ndarray]:
        """The member lists of edited clusters whose invariant mean is not computed yet (none: ``[]``).

        A front end computes them (:func:`~iastudio.core.cluster_means.cluster_invariant_means`, in a
        worker) and gives them to :meth:`set_cluster_means`; until then the views show each such
        cluster's medoid mean.
        """
        if self.final is None or self.book is None or self.book.n != self.n:
            return []
        changed = edited_clusters(self.final, self.book.labels, self.book.cluster_ids())
        return [m for m in changed.values() if cluster_key(m) not in self.cluster_means]

    def alignment_options(self) -> dict:
        """The run's alignment search (``angle_step``, ``rotation_range``), live or saved; ``{}``: the defaults."""
        params = vars(self.run.settings) if self.run is not None else self._opened_parameters
        opts: dict = {}
        step, rr = params.get("angle_step"), params.get("rotation_range")
        if step is not None and options.problem("angle_step", step) is None:  # the declared limits (no bools)
            opts["angle_step"] = float(step)
        if options.problem("rotation_range", rr) is None:  # None: the whole circle
            opts["rotation_range"] = rr
        return opts

    def set_cluster_means(self, members: list, means) -> None:
        """Keep the invariant means of edited clusters (``means[i]`` of ``members[i]``) and redraw."""
        for idx, mean in zip(members, means):
            self.cluster_means[cluster_key(idx)] = np.asarray(mean, dtype=np.float32)
        self._emit("clusters")

    def cluster_images(self, cluster: int) -> np.ndarray:
        """The working images of one cluster."""
        return self.working[self.book.members(cluster)]

    # ------------------------------------------------------------------ the run (driven from outside)
    def start(self, *, backend: str = "auto", dask: str | None = None, **options) -> AttentionRun | None:
        """Prepare a new run on the transformed set (the driver steps it); None (with a message) when refused.

        ``dask``: a Dask scheduler to run the alignment and the means on (``"local:N"`` or an address such
        as ``"tcp://host:8786"``); the client is kept for later runs and closed by :meth:`close`.
        """
        if self.busy:
            self.message("A run is already going.")
            return None
        if self.n < 2:
            self.message("Add at least 2 images before starting a run.")
            return None
        options.setdefault("snapshot_every", 1)  # the window shows every mean step
        try:
            if dask:
                options["client"] = self._dask_client(dask)
            run = AttentionRun(self.working, backend=backend, **options)
        except (ValueError, BackendUnavailableError, DaskUnavailableError) as exc:
            self.message(f"Cannot start: {exc}")
            return None
        self.discard_run()
        self.run = run
        self.subset_run = None
        self._set_state(RunState.RUNNING)
        self.message(f"Running {str(options.get('method', 'ia')).upper()} on {self.n} images "
                     f"({run.backend.describe()})")
        return run

    def run_here(self, *, backend: str = "numpy", **options):
        """Start a run and drive it to its end in this thread (scripts, tests); the finished run's result.

        Returns None when the run was refused, stopped or failed (the events say why).
        """
        run = self.start(backend=backend, **options)
        if run is None:
            return None
        try:
            for item in stream_run(run, FrameBuilder()):
                self.take(item)
        except Exception as exc:  # noqa: BLE001 - reported as the app would, then re-raised for the caller
            self.on_failed(str(exc) or type(exc).__name__)
            raise
        return self.result

    def take(self, item: tuple) -> None:
        """Apply one item of :func:`stream_run` (the driver calls this on the session's thread)."""
        kind = item[0]
        if kind == "frame":
            self.on_frame(item[1])
        elif kind == "finished":
            self.on_finished(item[1], item[2])
        elif kind == "stopped":
            self.on_stopped(item[1])
        elif kind == "cpu":
            self.run = item[1]
            self.message(item[2])

    def _dask_client(self, address: str):
        """The client of ``address``, connected once and kept (raises DaskUnavailableError)."""
        from .distributed import connect

        if address not in self._clients:
            self._clients[address] = connect(address)
        return self._clients[address]

    def close(self) -> None:
        """Stop any run and close the Dask clients this session opened."""
        from .distributed import close

        self.stop()
        clients, self._clients = self._clients, {}
        for client in clients.values():
            close(client)

    def can_resume(self) -> bool:
        """A stopped run on exactly the current images (inputs are frozen while a run exists)."""
        return (self.run is not None and not self.run.finished and self.state == RunState.STOPPED
                and self.run.inputs.shape == self.working.shape and np.array_equal(self.run.inputs, self.working))

    def resume(self) -> AttentionRun | None:
        if not self.can_resume():
            return None
        self._set_state(RunState.RUNNING)
        self.message("Resumed.")  # not "Stopped. Resume continues …" while it runs
        return self.run

    def stop(self) -> None:
        for run in (self.run, self.subset_run):
            if run is not None:
                run.cancel()
        if self.state == RunState.RUNNING:
            self._set_state(RunState.STOPPING)

    def on_frame(self, frame: Frame) -> None:
        """A frame of the running run (the driver calls this on the session's thread)."""
        self.latest = frame
        if frame.snapshot.stage in RECORDED_STAGES:
            self.frames.append(frame)
        self._emit("frame", frame)

    def on_progress(self, fraction: float, text: str, eta: float) -> None:
        self._emit("progress", fraction, text, eta)

    def on_finished(self, frame: Frame, elapsed: float = 0.0) -> None:
        """The run finished: ``frame`` carries its result."""
        self.elapsed += elapsed
        frame.elapsed = self.elapsed
        self.latest = self.final = frame
        if self.frames and self.frames[-1].snapshot is frame.snapshot:
            self.frames[-1] = frame  # the final frame of the last recorded snapshot: recorded once
        elif not self.frames or self.frames[-1] is not frame:
            self.frames.append(frame)
        self.history.clear()
        self.edits = []
        self._apply_book(ClusterBook.from_labels(frame.result.labels))
        self._emit("history")
        self._mark_dirty()
        self._set_state(RunState.FINISHED)
        self._emit("frame", frame)
        self._emit("finished", frame)
        k = frame.result.n_clusters
        self.message(f"Done: {count_of(k, 'cluster')} in {self.elapsed:.1f} s")

    def on_stopped(self, elapsed: float = 0.0) -> None:
        self.elapsed += elapsed
        self._set_state(RunState.STOPPED)
        self.message("Stopped. Resume continues where it stopped.")

    def on_failed(self, message: str, traceback_text: str = "") -> None:
        self._set_state(RunState.FAILED)
        self._emit("failed", message, traceback_text)

    # ------------------------------------------------------------------ split by re-running on a subset
    def start_subset(self, cluster: int) -> tuple[AttentionRun, np.ndarray] | None:
        """Prepare an Invariant Attention run on one cluster's images alone (``(run, members)``)."""
        if self.book is None or self.busy:
            return None
        members = self.book.members(cluster)
        if len(members) < 3:
            self.message("A cluster needs at least 3 images to be re-run.")
            return None
        opts = {} if self.run is None else {
            k: v for k, v in vars(self.run.settings).items() if k not in ("clusters", "snapshot_every")}
        self.subset_run = AttentionRun(self.working[members], backend="numpy", clusters="auto", **opts)
        self._set_state(RunState.SPLITTING)
        self.message(f"Re-running {self.book.name_of(cluster)} ({len(members)} images)…")
        return self.subset_run, members

    def on_subset_done(self, cluster: int, members: np.ndarray, labels) -> bool:
        """The subset run ended (``labels`` None when it failed or was stopped); split when it found groups."""
        self.subset_run = None
        self._set_state(RunState.FINISHED if self.final is not None else RunState.IDLE)
        if labels is None:
            self.message("The re-run did not finish; nothing was split.")
            return False
        k = int(np.max(labels)) + 1
        if k < 2:
            self.message(f"Re-running {self.book.name_of(cluster)} found a single group; "
                         "use Split with k to force one.")
            return False
        if list(self.book.members(cluster)) != list(members):
            self.message("The cluster changed during the re-run; nothing was split.")
            return False
        return self.edit_clusters(f"Split {self.book.name_of(cluster)} by re-running ({k} groups)",
                                  self.book.split(cluster, labels))

    # ------------------------------------------------------------------ inspect
    def inspect(self, i: int, j: int) -> dict | None:
        """Align image i onto image j: transform, distance, cosine score and the images (also an event)."""
        from .alignment import inspect_pair

        if not (0 <= i < self.n and 0 <= j < self.n):
            return None
        info = inspect_pair(self.working[i], self.working[j], **self.alignment_options())
        info.update(i=i, j=j, name_i=self.data.paths[i], name_j=self.data.paths[j])
        self._emit("inspect", info)
        return info

    # ------------------------------------------------------------------ projects
    def to_project(self, *, autosave: bool = False) -> Project:
        """The session as a :class:`~iastudio.core.project.Project`: a snapshot that later changes do not touch.

        Its lists, dicts, parameters, transforms and cluster book are copies; its arrays (the working
        images, the run's history and result) are the session's own, which neither the session nor a
        run ever changes in place (they replace them), so another thread may write the project
        (:func:`~iastudio.core.project.save_project`) while the session goes on.  Cheap: nothing of
        the size of the images is copied.
        """
        res = self.result
        if self.run is None and res is not None:  # an opened project's result: its saved parameters again
            params = copy.deepcopy(self._opened_parameters)
        else:
            params = copy.deepcopy(vars(self.run.settings)) if self.run is not None else {}
            params["sigmas"] = list(params.get("sigmas", []))
        if self.run is not None:
            params["backend"] = self.run.backend.name
            params.update(run_record(res) or {"beta_used": None})
            params["elapsed"] = self.elapsed
        view = copy.deepcopy(self.view_state)
        view.pop("recover_to", None)
        if autosave:  # the project it came from, to link a recovered session to it again
            view["recover_to"] = self.project_path
        if view:
            params["view"] = view
        book = None if self.book is None else replace(self.book, names=dict(self.book.names))
        return Project(
            paths=list(self.data.paths), labels=list(self.data.labels),
            skipped=[dict(s) for s in self.data.skipped],
            size=self.size, transforms=self.transforms.copy(), base=self.base,
            scale=None if self.canvas is None else self.canvas.scale,
            offset=None if self.canvas is None else self.canvas.offset,
            parameters=params, clusters=book, history=[history_entry(f.snapshot) for f in self.frames],
            result={} if res is None else res.arrays(), edits=list(self.edits),
            ka_labels=None if self.final is None else self.final.ka_labels,
        )

    def adopt_recovered(self) -> None:
        """Keep an opened autosave as unsaved work of the project it was autosaved from (if that file is
        still there; otherwise untitled), with a plain message instead of the autosave's path."""
        origin = self.view_state.pop("recover_to", None)
        self.project_path = origin if isinstance(origin, str) and os.path.isfile(origin) else None
        self._mark_dirty(True)
        name = os.path.basename(self.project_path) if self.project_path else "an untitled session"
        self.message(f"Recovered the last session ({name}, {count_of(self.n, 'image')}): not saved yet.")

    def save_project(self, path, *, embed: bool = True) -> None:
        """Write the session to ``path``, which becomes the project's own file (see :meth:`mark_saved`)."""
        revision = self.revision
        save_project(path, self.to_project(), embed=embed)
        self.mark_saved(path, revision=revision)

    def mark_saved(self, path, *, revision: int) -> None:
        """The session as it was at ``revision`` (:attr:`revision`) is written to ``path``.

        ``path`` becomes the project's own file, and the session is clean unless it changed since that
        snapshot (a save written by another thread while the user went on editing).
        """
        self.project_path = str(path)
        self.dirty = self.revision != revision
        self._emit("project")
        self.message(f"Saved {path}")

    def autosave(self, path) -> bool:
        """Write the session to ``path`` (not changing the project's own path or dirty flag)."""
        if not self.n:
            return False
        save_project(path, self.to_project(autosave=True))
        return True

    def open_project(self, path) -> Project:
        """Open a ``.iaproj``; raises :class:`~iastudio.core.project.ProjectError` when it cannot be used.

        Transactional: the project is read and checked and the whole new session is built aside first;
        only then is the current session replaced.  On any failure the session is untouched.
        """
        if self.busy:
            raise ProjectError(f"{path}: stop the run before opening a project")
        proj = load_project(path)
        try:
            state = _state_from_project(proj, path)
        except ProjectError:
            raise
        except Exception as exc:  # noqa: BLE001 - any problem with the contents is a refusal
            log.exception("cannot open project %s", path)
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise ProjectError(f"{path}: cannot be opened ({reason})") from None
        self._install(state)
        missing = state["missing"]
        note = ""
        if missing:
            note = (f"; {len(missing)} original file(s) moved or missing, using the embedded images: "
                    + ", ".join(display_name(p) for p in missing[:5]))
        self.message(f"Opened {path}: {proj.n} images{note}")
        proj.missing = missing  # type: ignore[attr-defined]  # for the front end's notice
        return proj

    def _install(self, st: dict) -> None:
        """Replace the session by one built by :func:`_state_from_project` (cannot fail)."""
        self.data, self.size, self.canvas, self.base = st["data"], st["size"], st["canvas"], st["base"]
        self.transforms, self.working = st["transforms"], st["working"]
        self.selection = []
        self.run = None
        self.frames = st["frames"]
        self.latest = st["frames"][-1] if st["frames"] else None
        self.final = st["final"]
        self.elapsed = st["elapsed"]
        self._opened_parameters = st["parameters"]
        view = st["parameters"].get("view")
        self.view_state = dict(view) if isinstance(view, dict) else {}
        self.book = st["book"]
        self.history.clear()
        self.edits = st["edits"]
        self.project_path = st["path"]
        self._set_state(RunState.FINISHED if self.final is not None else RunState.IDLE)
        for name in ("images", "transforms", "clusters", "history"):
            self._emit(name)
        self._emit("selection", [])
        self._emit("frame", self.latest)
        if self.final is not None:
            self._emit("finished", self.final)
        self._mark_dirty(False)


def _state_from_project(proj: Project, path) -> dict:
    """Everything :meth:`Session.open_project` installs, built without touching the session."""
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
    working = base if not transforms.any() else apply_transforms(base, transforms)
    frames, final = frames_from_project(proj, working)
    if proj.clusters is not None and proj.clusters.n != n:
        raise ProjectError(f"{path}: the clusters do not match the images")
    elapsed = proj.parameters.get("elapsed")
    return {"data": data, "size": int(proj.size), "canvas": canvas, "base": base, "transforms": transforms,
            "working": working, "frames": frames, "final": final, "book": proj.clusters,
            "edits": list(proj.edits), "path": str(path), "missing": missing,
            "elapsed": float(elapsed) if isinstance(elapsed, (int, float)) else 0.0,
            "parameters": copy.deepcopy(dict(proj.parameters))}


@dataclass
class LoadedImages:
    """Images read and preprocessed by :func:`read_images`, not yet in a session.

    Attributes
    ----------
    data : ImageSet
        The images read (maybe none) and every file skipped, with its reason.
    canvas : Canvas or None
        ``data``'s images preprocessed at ``size``; None when there are none.
    size : int
        The working size they were preprocessed at.
    """

    data: ImageSet
    canvas: Canvas | None
    size: int


def read_images(paths, *, size: int, progress=None) -> LoadedImages:
    """Read and preprocess image files and folders, one file at a time, without touching any session.

    What a driver thread runs so that the thread owning the session only commits the result
    (:meth:`Session.add_loaded`).  A file that cannot be read or prepared is skipped with its reason,
    as in :func:`~iastudio.core.imageset.load_images`.

    Parameters
    ----------
    paths : str, Path or sequence of them
        Image files, stacks, STAR files and folders (folders searched recursively; subfolder names become
        labels); a stack's images are read one at a time (:func:`~iastudio.core.imageset.read_entries`).
    size : int
        The working size to preprocess at (:func:`~iastudio.core.preprocess.preprocess`).
    progress : callable(done, total, path), optional
        Called before each image is read: ``done`` images are done and ``path`` is next (``total`` grows as
        stacks are opened).  Returning
        ``False`` stops there; what was read is kept and the rest is skipped ("not loaded: cancelled").

    Returns
    -------
    LoadedImages
    """
    files, skipped = image_files(paths)
    images, names, labels, canvases = [], [], [], []
    for entry in read_entries(files, progress=progress, load=load_image):
        if entry.error is None:
            try:
                canvases.append(preprocess([entry.image], size=size))  # per image: the same as all at once
            except Exception as exc:  # noqa: BLE001 - one file never ends the set
                entry.error = exc
        if entry.error is not None:
            skipped.append(skip_entry(entry.name, entry.error))
            continue
        images.append(entry.image)
        names.append(entry.name)
        labels.append(entry.label)
    return LoadedImages(ImageSet(images, names, labels, skipped), stack_canvases(canvases), int(size))


def stack_canvases(canvases) -> Canvas | None:
    """One :class:`~iastudio.core.preprocess.Canvas` of the given ones' images in order (same side); None for none."""
    cs = [c for c in canvases if c is not None]
    if not cs:
        return None
    return Canvas(np.concatenate([c.images for c in cs]), np.concatenate([c.scale for c in cs]),
                  np.concatenate([c.offset for c in cs]), [shape for c in cs for shape in c.original_shape])


def stream_run(run: AttentionRun, builder: FrameBuilder):
    """Step ``run`` for a driver thread, yielding what the session takes, as tuples.

    ``("frame", Frame)`` for each snapshot, then ``("finished", Frame, seconds)`` (the frame carries the
    result) or ``("stopped", seconds)`` when the run was cancelled.  When the GPU fails the run goes on
    from the start on the CPU, after ``("cpu", new_run, message)``.
    """
    t0 = time.perf_counter()
    try:
        yield from _step(run, builder, t0)
    except Exception as exc:
        if run.backend.name != "cupy":
            raise
        log.exception("GPU run failed; falling back to the CPU")
        cpu = run.on_backend("numpy")
        cpu.on_progress = run.on_progress
        yield ("cpu", cpu, f"The GPU failed ({exc}); continuing on the CPU.")
        builder.reset()
        yield from _step(cpu, builder, t0)


def _step(run: AttentionRun, builder: FrameBuilder, t0: float):
    last = None
    for snap in run.steps():
        last = snap
        yield ("frame", builder.frame(snap, elapsed=time.perf_counter() - t0))
    if run.finished:
        yield ("finished", builder.final(run, last, elapsed=time.perf_counter() - t0), time.perf_counter() - t0)
    else:
        yield ("stopped", time.perf_counter() - t0)


def run_subset(run: AttentionRun):
    """Run a subset run to its end (for a driver thread); its labels, or None when it was cancelled."""
    for _ in run.steps():
        pass
    return run.result().labels if run.finished else None
