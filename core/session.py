"""The studio's session, without Qt: the image set, its transforms, the run, the clusters and their history.

A :class:`Session` holds everything the user works on and is the one place that changes it; it emits
typed events (:class:`SessionEvents`, psygnal signals) that the views connect to, so every view draws
from the same state.  It runs nothing itself: a driver (the app's thread worker, or a plain loop) steps
the run it prepares and hands the frames back (:meth:`Session.on_frame`, :meth:`Session.on_finished`, ...).

Its methods live in the parts a reader looks for, one module each, that :class:`Session` is made of:

* ``session_inputs`` -- the images, the working size and the transforms (:func:`read_images`,
  :func:`read_originals` too);
* ``session_run`` -- starting, stopping and resuming a run, and taking its frames (:func:`stream_run`);
* ``session_edits`` -- the selection, the clusters and their undoable edits;
* ``session_project`` -- the session to and from a ``.iaproj`` (save, autosave, open, recover).

This module keeps the state (:meth:`Session.__init__`), the events and the rules that join the parts.

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

import numpy as np
from psygnal import Signal, SignalGroup

from . import options
from .attention import AttentionRun, RunState
from .clusterbook import ClusterBook
from .frames import Frame
from .imageset import ImageSet
from .preprocess import Canvas

# The parts a reader looks for, one module each; Session is made of them.  Their helpers are re-exported
# here ("X as X"), where the app and the scripts import them from.
from .session_edits import Edit as Edit
from .session_edits import EditHistory, SessionClusters
from .session_inputs import LoadedImages as LoadedImages
from .session_inputs import Originals as Originals
from .session_inputs import RunInputs as RunInputs
from .session_inputs import SessionInputs
from .session_inputs import read_images as read_images
from .session_inputs import read_originals as read_originals
from .session_inputs import stack_canvases as stack_canvases
from .session_project import SessionProject
from .session_run import SessionRun
from .session_run import run_subset as run_subset
from .session_run import stream_run as stream_run
from .wording import count_of

BUSY = (RunState.RUNNING, RunState.STOPPING, RunState.SPLITTING)



class SessionEvents(SignalGroup):
    """The session's typed events (psygnal signals), emitted on the thread that owns the session.

    Connect with ``session.events.<name>.connect(callback)``; a callback may take fewer arguments than
    the signal carries.  The app connects its views to them on the GUI thread (see ``app/events.py``).
    """

    images = Signal()  #: the image set changed (added, replaced, cleared, working size)
    transforms = Signal()  #: the transforms (and so the working images) changed
    selection = Signal(list)  #: the selected image indices
    clusters = Signal()  #: the cluster book (or an edited cluster's mean) changed
    history = Signal()  #: undo/redo availability or texts changed
    project = Signal()  #: the project's path or dirty flag changed
    message = Signal(str)  #: a plain one-line status message
    state = Signal(str)  #: the run's :class:`~iastudio.core.attention.RunState`
    frame = Signal(object)  #: the latest :class:`~iastudio.core.frames.Frame`, or None
    progress = Signal(float, str, float)  #: fraction, text, eta in seconds (-1: unknown)
    finished = Signal(object)  #: the finished run's :class:`~iastudio.core.frames.Frame`
    failed = Signal(str, str)  #: message, traceback
    inspect = Signal(dict)  #: an aligned pair (:meth:`Session.inspect`)


class Session(SessionInputs, SessionClusters, SessionRun, SessionProject):
    """Everything the user works on, changed only through these methods; see the module's docstring.

    Parameters
    ----------
    size : int
        Working size in pixels of the preprocessed images.
    """

    def __init__(self, *, size: int = 64):
        self.events = SessionEvents()
        self.data = ImageSet([], [], [], [])
        self.size = options.check("size", int(size))
        self.canvas: Canvas | None = None
        self.base = np.zeros((0, self.size, self.size), np.float32)  # preprocessed originals
        self.transforms = np.zeros((0, 3))  # applied per image (canvas px)
        self.working = self.base  # the transformed set: what runs
        self._preview: Canvas | None = None  # the per-image canvases while a denoised run's are shown
        self.denoise = str(options.option("denoise").default)  # the last run's choice (saved with the project)
        self.denoise_report = None  # what the denoiser did for the run (DenoiseReport), None before it
        self.phase_flip = False  # whether the last run phase-flipped its images (saved with the project)
        self.phase_flip_report: dict | None = None  # what phase flipping did (phase_flip_record), None: not done
        self.run_inputs: RunInputs | None = None  # the inputs the run waits for (made by its driver)
        # a denoised run's images before denoising, moved as its inputs (for their class averages), else None
        self.undenoised: np.ndarray | None = None
        # data.images include an opened project's embedded working images (a run denoises the originals)
        self.embedded = False
        # an opened project's run denoised the images it embeds (the gallery shows them until its run goes)
        self.opened_denoised = False
        self._originals: Originals | None = None  # its original files, read by a driver (take_originals)
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
        # Invariant means of clusters the edits made, by cluster_key(members) (see missing_cluster_means),
        # and, after a denoised run, their class averages before denoising (set_cluster_means)
        self.cluster_means: dict = {}
        self.undenoised_cluster_means: dict = {}
        self._clients: dict = {}  # Dask clients by address, kept between runs

    # ------------------------------------------------------------------ small helpers
    def message(self, text: str) -> None:
        self.events.message.emit(text)

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
        self.events.state.emit(self.state)

    def _mark_dirty(self, dirty: bool = True) -> None:
        if dirty:
            self.revision += 1
        self.dirty = dirty
        self.events.project.emit()

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
        self.run_inputs = None
        self.undenoised = None
        self.denoise_report = None
        self.phase_flip_report = None
        self.frames, self.latest, self.final = [], None, None
        self.book = None
        self.history.clear()
        self.edits = []
        self.cluster_means = {}
        self.undenoised_cluster_means = {}
        self.elapsed = 0.0
        if not self.busy:
            self._set_state(RunState.IDLE)
        self._restore_preview()  # a denoised run's images go with it
        self.events.clusters.emit()
        self.events.history.emit()
        self.events.frame.emit(None)

    def _inputs_may_change(self, what: str, *, replacing: bool = False) -> bool:
        """Refuse while a run works on the inputs; otherwise discard the run they would no longer match.

        ``replacing``: the whole set is about to be replaced, so an opened project's original files are
        not read again for it (:meth:`_opened_previews`).
        """
        if self.busy:
            self.message(f"Stop the run before {what}.")
            return False
        if replacing:
            self.opened_denoised, self._originals = False, None
        if self.run is not None or self.final is not None:
            self.discard_run()
        return True
