"""The Invariant Attention iteration with live snapshots, and the KA baseline.

:class:`AttentionRun` owns the state of a run.  :meth:`AttentionRun.steps` is a
generator that advances the state one meaningful step at a time and yields a
:class:`Snapshot` after each (similarity done, every few invariant-mean steps,
iteration done).  The state is committed before every yield, so stopping the
iteration (``run.cancel()`` or simply not asking for the next snapshot) and
calling :meth:`steps` again later resumes exactly where it stopped: a
cancelled-then-resumed run equals an uninterrupted one.  No Qt here; the app's
worker thread drives this generator.

One IA iteration (paper §2): invariant distances ``d(S_i, S_j)`` of the current
features -> ``W`` -> the invariant mean of every column -> ``V <- [mu_1..mu_n]``.
``method="ka"`` runs kernel attention instead (eq. 2.1): plain distances and
plain weighted means ``V <- V W``.  After the last iteration the distances of
the final features are computed once more, and clusters are read out from
them (:mod:`iastudio.core.clustering`).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, fields
from enum import StrEnum

import numpy as np

from .backend import Backend, get_backend, to_host, use_threads
from .clustering import KChoice, grouping_order, read_clusters, silhouette
from .descent_mean import descent_step, start_descent_means
from .invariant_mean import invariant_mean_step, invariant_means, start_invariant_means
from .neighbors import resolve_neighbors
from .options import OPTIONS, check, option
from .similarity import check_finite, invariant_distances, plain_distances
from .warp import warp
from .weights import attention_weights, local_bandwidth

__all__ = ["RESULT_ARRAYS", "AttentionRun", "RunResult", "RunState", "Settings", "Snapshot", "Stage"]


class Stage(StrEnum):
    """What a :class:`Snapshot` follows: the step of the run just done.

    A ``StrEnum``: ``Stage.DONE == "done"`` holds and ``str(Stage.DONE)`` is
    ``"done"``, so saved projects and plain-string comparisons keep working.
    """

    SIMILARITY = "similarity"  #: invariant distances, W and the k read-out of the current features
    MEANS = "means"  #: some invariant-mean steps of the current iteration
    ITERATION = "iteration"  #: an iteration's means became the new features
    DONE = "done"  #: the run finished: clusters read out, images aligned to the cluster means


class RunState(StrEnum):
    """The state of a run as an application shows it (the engine itself only knows :class:`Stage`)."""

    IDLE = "idle"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FINISHED = "finished"
    FAILED = "failed"
    SPLITTING = "splitting"  #: one cluster's images are being re-run on their own


class _Phase(StrEnum):
    """The next thing :meth:`AttentionRun._advance` does (private: two phases have no snapshot)."""

    SIMILARITY = "similarity"
    MEANS = "means"
    FINAL = "final"  # distances of the final features and the read-out
    FINISHING = "finishing"  # cluster means and per-image alignment
    DONE = "done"


@dataclass
class Settings:
    """Options of a run (all keyword-only in the public API).

    Attributes
    ----------
    method : {"ia", "ka"}
    beta : float or "auto"
        RBF bandwidth on unit-norm images (see :mod:`iastudio.core.weights`).
    iterations : int
        IA iterations; ``1`` computes W on the inputs and one round of means.
    clusters : int or "auto"
    rotation_range : float or None
        Degrees; restrict the relative rotations searched (None: full circle).
    angle_step : float
        Degrees between the angles of the global search.
    mean_steps : int
        Gradient steps per invariant mean (Algorithm 1's N).
    sigmas : tuple of float
        Smoothing levels tried at each mean step.
    init : {"pairwise", "identity"}
        Start each ``tau_i`` from the pairwise alignment, or from the identity
        as in the paper (for demos).
    weight_tol : float
        Absolute floor: weights at or below this are skipped in the means.
    weight_mass : float
        Each column of W keeps its largest weights up to this fraction of its
        mass in the means (the rest are skipped, the kept ones renormalised).
    mean_rtol : float
        A mean whose objective falls by less than this fraction in a step has
        converged and stops (0: always ``mean_steps`` steps).
    guard : bool or None
        Stop iterating, and keep the previous iteration, when an iteration
        moved images between clusters without the new clusters fitting the
        input images clearly better (silhouette on the input invariant
        distances up by at least 0.02); and stop, keeping it, once an
        iteration leaves the clusters as they were (further iterations would
        only sharpen W and the means, at the cost of a similarity and a mean
        stage each; ``iterations`` is then an upper bound).  ``None`` (default):
        on with ``beta="auto"``, off with an explicit ``beta`` (the paper's
        plain iteration).  On a pruned run the silhouettes include its sample
        of pairs off the graph.
    forecast : bool
        With the guard on: before each iteration, forecast the distances its
        means would have from the current distances and W
        (:func:`iastudio.core.forecast.forecast_mean_distances`, no warp) and
        put the guard's question to them; when the forecast clusters differ
        and would not pass the guard, the iteration is not run (the run ends
        as the guard would have ended it after computing it, and ``notes``
        says so).  A forecast that keeps the clusters, or passes the guard,
        runs the iteration as before.
    group : {"se2", "e2"}
        ``"e2"`` also matches mirror images (reflections), for data where a
        flipped specimen is the same thing.  Always on all pairs.
    snapshot_every : int
        Yield a snapshot every this many mean steps.
    converge_tol : float
        Stop early when no entry of W moves more than this between iterations.
    neighbors : int, "all" or "auto"
        Align only each image's ``K`` candidate neighbours (:mod:`iastudio.core.neighbors`);
        W, the means and the read-out then work on the sparse K-neighbour
        graph.  ``"auto"``: every pair up to 300 images, 30 candidates above.
    mean_solver : {"gauss-newton", "gradient"}
        ``"gauss-newton"``: preconditioned steps, each entry keeping the first
        smoothing level that lowers its objective, none that raises it.
        ``"gradient"``: Algorithm 1 as written (:mod:`iastudio.core.descent_mean`):
        the sample mean as ``mu^(0)``, fixed-step gradient descent, the
        smoothing level that lowers each column's objective most.
    learning_rate : float
        Algorithm 1's fixed step ``t`` (``mean_solver="gradient"`` only).
    intensity : {"unit", "paper"}
        The scale W and the means work on: ``"unit"`` the unit-norm images as
        given; ``"paper"`` each image divided by its peak, the paper's
        ``[0, 1]`` intensities, on which a ``beta`` of the paper applies
        (:func:`iastudio.core.presets.paper_intensity`).
    readout : {"auto", "spectral", "collapse"}
        How the clusters are read from the final distances: spectral
        clustering (:mod:`iastudio.core.clustering`), or the images whose
        features collapsed together (:mod:`iastudio.core.collapse`; ``clusters``
        must then be ``"auto"``).  ``"auto"``: the preset's read-out where it
        has one and ``clusters`` is ``"auto"``, otherwise spectral.
    preset : str or None
        The named preset the run was made from (:mod:`iastudio.core.presets`),
        for the record; its options are already in the other fields.
    """

    method: str = option("method").default
    beta: object = option("beta").default
    iterations: int = option("iterations").default
    clusters: object = option("clusters").default
    rotation_range: float | None = option("rotation_range").default
    angle_step: float = option("angle_step").default
    mean_steps: int = 10
    sigmas: tuple = (0.0, 1.0, 2.0)
    init: str = "pairwise"
    weight_tol: float = 0.0
    weight_mass: float = 0.999
    mean_rtol: float = 3e-4
    snapshot_every: int = 2
    converge_tol: float = 1e-3
    guard: bool | None = None
    group: str = option("group").default
    neighbors: object = option("neighbors").default
    mean_solver: str = "gauss-newton"
    learning_rate: float = 0.005
    intensity: str = "unit"
    readout: str = option("readout").default
    preset: str | None = None
    forecast: bool = True

    @property
    def guarded(self) -> bool:
        """Whether the separation guard is on (see ``guard``)."""
        return self.beta == "auto" if self.guard is None else bool(self.guard)

    def validate(self, n: int) -> None:
        """Raise ``ValueError`` with a plain message for a bad option.

        The declared options (:mod:`iastudio.core.options`) are checked against their declaration.
        """
        for opt in OPTIONS:
            if opt.checked_by == "engine" and opt.name in self.__dataclass_fields__:
                check(opt.name, getattr(self, opt.name))
        if self.clusters != "auto" and not int(self.clusters) <= n:
            raise ValueError(f"clusters must be between 1 and the number of images ({n})")
        if self.init not in ("pairwise", "identity"):
            raise ValueError("init must be 'pairwise' or 'identity'")
        if not 0 < float(self.weight_mass) <= 1:
            raise ValueError("weight_mass must be in (0, 1]")
        if self.mean_solver not in ("gauss-newton", "gradient"):
            raise ValueError("mean_solver must be 'gauss-newton' or 'gradient'")
        if not (float(self.learning_rate) > 0 and np.isfinite(float(self.learning_rate))):
            raise ValueError("learning_rate must be a finite number > 0")
        if self.intensity not in ("unit", "paper"):
            raise ValueError("intensity must be 'unit' or 'paper'")
        if self.readout == "collapse" and self.clusters != "auto":
            raise ValueError("the collapse read-out finds the number of clusters itself: leave clusters at 'auto', "
                             "or read out with readout='spectral' (ia-cluster: --readout spectral)")


@dataclass
class Snapshot:
    """The state of a run after one step, on the host (NumPy, float32).

    Attributes
    ----------
    iteration : int
        The IA iteration the step belongs to (1-based); in the ``done``
        snapshot, the iterations kept (0: the guard kept the inputs' clusters).
    stage : Stage
    step, n_steps : int
        Mean step within the iteration (``means`` stage).
    weights : ndarray (n, n)
        The current W.
    means : ndarray (n, H, W[, C])
        The current means (during the means stage) or features.
    distances : ndarray (n, n)
        Manifold distances ``d(S_i, S_j)`` of the features W was computed on.
    transforms : ndarray (n, n, 3) or None
        During the means stage: ``tau_ij`` aligning image i into mean j (None
        above 500 images, to keep snapshots light); otherwise the pairwise
        alignments (i onto j).
    labels : ndarray (n,)
        Clusters read from the current distances.
    objective : list of float
        Mean objective per step of the current iteration (summed over columns).
    timings : dict
        Seconds spent per stage so far (``similarity_s``, ``mean_s``, ``total_s``).
    progress : float
        Fraction of the run done, 0..1.
    beta : float
    k_choice : KChoice or None
        How the current number of clusters was chosen.
    """

    iteration: int
    stage: Stage
    step: int
    n_steps: int
    weights: np.ndarray
    means: np.ndarray
    distances: np.ndarray
    transforms: np.ndarray | None
    labels: np.ndarray
    objective: list
    timings: dict
    progress: float
    beta: float = float("nan")
    k_choice: KChoice | None = None


@dataclass
class RunResult:
    """What a finished run gives: clusters, per-image alignment and the history.

    Attributes
    ----------
    labels : ndarray (n,)
    n_clusters : int
    cluster_means : ndarray (k, H, W[, C])
        The invariant mean of each cluster's input images.
    image_transforms : ndarray (n, 3)
        ``tau_i`` with ``v_i o tau_i ~ cluster_means[labels[i]]`` (canvas px).
    scores : ndarray (n,)
        Cosine similarity of each aligned image with its cluster mean.
    weights : ndarray (n, n)
        W of the last iteration computed.
    input_distances : ndarray (n, n)
        Invariant distances of the inputs.
    final_distances : ndarray (n, n)
        Manifold distances of the final features.
    history : list of ndarray
        Manifold distances per iteration (inputs first, final last).
    features : ndarray (n, H, W[, C])
        The final features V.
    iterations : int
        Iterations run.
    beta : float
        The global ``beta`` used (explicit) or its equivalent (auto).
    timings : dict
    k_choice : KChoice
        How the number of clusters was chosen: candidates and confidence.
    blank : ndarray of bool (n,)
        Images with no content; they form a cluster of their own (the last).
    mirrored : ndarray of bool (n,)
        ``group="e2"``: the image is flipped left-right before
        ``image_transforms`` aligns it onto its cluster mean.
    notes : list of str
        What the run decided on its own (e.g. the guard stopping it).
    """

    labels: np.ndarray
    n_clusters: int
    cluster_means: np.ndarray
    image_transforms: np.ndarray
    scores: np.ndarray
    weights: np.ndarray
    input_distances: np.ndarray
    final_distances: np.ndarray
    history: list
    features: np.ndarray
    iterations: int
    beta: float
    timings: dict = field(default_factory=dict)
    k_choice: KChoice | None = None
    blank: np.ndarray | None = None
    notes: list = field(default_factory=list)
    mirrored: np.ndarray | None = None

    def arrays(self) -> dict:
        """The result's arrays under their stored names (:data:`RESULT_ARRAYS`).

        Returns
        -------
        dict of str to ndarray
            ``run_labels`` is :attr:`labels`; the others are the attributes of
            the same name.  The arrays themselves, not copies.
        """
        return {key: getattr(self, _ATTRIBUTES.get(key, key)) for key in RESULT_ARRAYS}

    @classmethod
    def from_arrays(cls, arrays, *, features, history=(), iterations: int = 0, beta: float = float("nan"),
                    k_choice: KChoice | None = None, notes=()) -> RunResult:
        """Rebuild a result from :meth:`arrays` (e.g. a saved project's ``result``).

        Parameters
        ----------
        arrays : mapping of str to ndarray
            Every name of :data:`RESULT_ARRAYS`.
        features : ndarray (n, H, W[, C])
            The final features (a saved run's last means).
        history : sequence of ndarray
            Manifold distances per distance computation.
        iterations : int
        beta : float
        k_choice : KChoice, optional
        notes : sequence of str
            As the run had them (a project keeps them in its parameters:
            :func:`iastudio.core.project.run_record`).

        Returns
        -------
        RunResult
            ``n_clusters`` is ``max(run_labels) + 1``; what neither
            :meth:`arrays` nor the arguments hold (timings, blank and mirror
            flags) is left at its default.

        Raises
        ------
        KeyError
            When an array of :data:`RESULT_ARRAYS` is missing (or None).
        """
        missing = [key for key in RESULT_ARRAYS if arrays.get(key) is None]
        if missing:
            raise KeyError(f"the result lacks {', '.join(missing)}")
        labels = np.asarray(arrays["run_labels"]).astype(int)
        kept = {_ATTRIBUTES.get(key, key): arrays[key] for key in RESULT_ARRAYS}
        kept["labels"] = labels
        return cls(**kept, n_clusters=int(labels.max()) + 1 if labels.size else 0, history=list(history),
                   features=features, iterations=int(iterations), beta=float(beta), k_choice=k_choice,
                   notes=[str(note) for note in notes])


RESULT_ARRAYS = ("cluster_means", "image_transforms", "scores", "weights", "input_distances",
                 "final_distances", "run_labels")
"""The arrays of a :class:`RunResult` that are stored (in projects), by their stored names."""
_ATTRIBUTES = {"run_labels": "labels"}  # stored name -> RunResult attribute, where they differ


_DENSE_TRANSFORMS_MAX = 500  # images; above this, mean-step snapshots carry no (n, n, 3) transforms
_DENSE_VIEW_MAX = 2000  # images; a pruned run's W and distances are shown dense up to this, sparse above


def _rows_cols(distances, keep):
    """The distances among the images ``keep`` (dense or sparse)."""
    return distances[keep][:, keep] if _is_sparse(distances) else distances[np.ix_(keep, keep)]


def _is_sparse(a) -> bool:
    import scipy.sparse as sp

    return sp.issparse(a)


def _view(a, *, fill_missing=False):
    """Host float32 copy for snapshots and results: dense unless sparse above ``_DENSE_VIEW_MAX`` images.

    Distances of pairs a pruned run did not align show as the largest computed
    distance (``fill_missing``); missing weights are zero.
    """
    if not _is_sparse(a):
        return a.astype(np.float32)
    if a.shape[0] > _DENSE_VIEW_MAX:
        return a.astype(np.float32).tocsr()
    dense = a.toarray().astype(np.float32)
    if fill_missing:
        known = a.copy().tocsr()
        known.data[:] = 1
        mask = known.toarray().astype(bool)
        np.fill_diagonal(mask, True)
        dense[~mask] = float(a.max()) if a.nnz else 0.0
    return dense


def _max_abs_diff(a, b) -> float:
    if _is_sparse(a) or _is_sparse(b):
        return float(abs(a - b).max())
    return float(np.abs(a - b).max())


_GUARD_GAIN = 0.02  # a changed partition must raise the silhouette on the inputs by this much


class _Cancelled(Exception):
    """Raised inside a long stage when the run was cancelled; the stage is redone on resume."""


class AttentionRun:
    """A resumable Invariant Attention (or KA) run over preprocessed images.

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
        Unit-norm images on one canvas (:func:`iastudio.core.preprocess.preprocess`).
    backend : str or Backend
        ``"auto"``, ``"numpy"`` or ``"cupy"``.
    client : dask.distributed.Client, optional
        Run the pairwise alignment and the invariant means as tasks on this
        cluster (see :mod:`iastudio.core.distributed`); the results equal a local run's.
    threads : int, optional
        CPU threads the steps run on (the similarity, the means, the FFTs);
        ``None`` (default) follows the machine: one per core this process may
        use.  The results do not depend on it.  While a step runs it is the
        process's setting (:func:`iastudio.core.backend.set_threads`).
    method, beta, iterations, clusters, rotation_range, angle_step, mean_steps, sigmas, init, weight_tol, \
weight_mass, mean_rtol, snapshot_every, converge_tol, guard, group, neighbors, mean_solver, learning_rate, \
intensity, readout, forecast
        The options of the run, keyword-only: see :class:`Settings` (the
        defaults are its defaults).  They are kept as :attr:`settings`.
    preset : str, optional
        A named preset (:mod:`iastudio.core.presets`): ``"paper"`` runs the
        paper's algorithm as written.  It sets every option left at its
        default; options given with another value win.

    Examples
    --------
    >>> from iastudio.core import load_demo, preprocess, AttentionRun
    >>> canvas = preprocess(load_demo("shapes").images)
    >>> run = AttentionRun(canvas.images, iterations=2)
    >>> for snap in run.steps():
    ...     pass                      # draw snap.weights, snap.means, ...
    >>> result = run.result()         # doctest: +SKIP
    """

    def __init__(self, images, *, backend="auto", client=None, threads: int | None = None,
                 method: str = Settings.method, beta=Settings.beta, iterations: int = Settings.iterations,
                 clusters=Settings.clusters, rotation_range: float | None = Settings.rotation_range,
                 angle_step: float = Settings.angle_step, mean_steps: int = Settings.mean_steps,
                 sigmas: tuple = Settings.sigmas, init: str = Settings.init, weight_tol: float = Settings.weight_tol,
                 weight_mass: float = Settings.weight_mass, mean_rtol: float = Settings.mean_rtol,
                 snapshot_every: int = Settings.snapshot_every, converge_tol: float = Settings.converge_tol,
                 guard: bool | None = Settings.guard, group: str = Settings.group, neighbors=Settings.neighbors,
                 mean_solver: str = Settings.mean_solver, learning_rate: float = Settings.learning_rate,
                 intensity: str = Settings.intensity, readout: str = Settings.readout, preset: str | None = None,
                 forecast: bool = Settings.forecast):
        #: optional ``dask.distributed.Client``: similarity chunks and mean columns run as its tasks
        self.client = client
        check("threads", threads)
        #: CPU threads the steps run on (``None``: one per core, :func:`iastudio.core.backend.threads`)
        self.threads = None if threads is None else int(threads)
        options = dict(
            method=method, beta=beta, iterations=iterations, clusters=clusters, rotation_range=rotation_range,
            angle_step=angle_step, mean_steps=mean_steps, sigmas=sigmas, init=init, weight_tol=weight_tol,
            weight_mass=weight_mass, mean_rtol=mean_rtol, snapshot_every=snapshot_every,
            converge_tol=converge_tol, guard=guard, group=group, neighbors=neighbors, mean_solver=mean_solver,
            learning_rate=learning_rate, intensity=intensity, readout=readout, forecast=bool(forecast))
        if preset is not None:
            from .presets import preset_options

            defaults = {f.name: getattr(Settings, f.name) for f in fields(Settings) if f.name != "preset"}
            options = preset_options(preset, options, defaults)
        if options["readout"] == "auto":
            options["readout"] = "spectral"
        self.settings = Settings(**options, preset=preset)
        images = np.asarray(to_host(images))
        if images.ndim not in (3, 4) or images.shape[0] < 2:
            raise ValueError(f"need at least 2 images of shape (H, W) or (H, W, C), got an array of shape "
                             f"{images.shape}")
        check_finite(images)  # on the values given: 1e300 would become inf as float32
        images = images.astype(np.float32, copy=False)
        self.settings.validate(images.shape[0])
        #: images with no content (all zero): they form a cluster of their own
        self.blank = ~np.any(images.reshape(images.shape[0], -1) != 0, axis=1)
        self.backend: Backend = backend if isinstance(backend, Backend) else get_backend(backend)
        xp = self.backend.xp
        self._host_inputs = images.view()
        self._host_inputs.flags.writeable = False
        if self.settings.intensity == "paper":
            from .presets import paper_intensity

            images = paper_intensity(images)
        self._inputs = xp.asarray(images)
        self.n = images.shape[0]
        # committed state
        self._features = self._inputs
        self._iteration = 1
        self._stage = _Phase.SIMILARITY  # the next thing to do
        self._sim = None
        self._weights = None
        self._beta = float("nan")
        self._mean_state = None
        self._mean_src = None  # the images the means are made of ([v; flip(v)] for E(2))
        self._history: list[np.ndarray] = []
        self._input_sim = None
        self._labels = np.zeros(self.n, dtype=int)
        self._k_choice: KChoice | None = None
        self._bandwidth = None  # beta="auto": the local bandwidth s_i of the inputs, kept for every iteration
        self._prev = None  # (features, sim, weights, labels, k_choice, beta) of the previous iteration, for the guard
        self._accepted = 0  # mean rounds whose result is in self._features
        self._notes: list[str] = []
        self._forecasts: list[dict] = []  # what the guard's forecast saw before each iteration (for benchmarks)
        self._timings = {"similarity_s": 0.0, "mean_s": 0.0, "forecast_s": 0.0, "total_s": 0.0}
        self._result: RunResult | None = None
        self._cancel = threading.Event()
        #: optional ``callable(fraction, text)`` told how far a long stage has got
        self.on_progress = None

    # ------------------------------------------------------------------ public state
    @property
    def inputs(self) -> np.ndarray:
        """The input images as given, ``(n, H, W[, C])`` float32 on the host (read-only).

        A read-only view: the run never copies its inputs, so the array passed
        in must not be changed while the run is in use.
        """
        return self._host_inputs

    def on_backend(self, backend) -> AttentionRun:
        """A new, unstarted run of the same inputs and settings on another backend.

        Parameters
        ----------
        backend : str or Backend
            ``"numpy"`` (e.g. after a GPU failure), ``"cupy"`` or ``"auto"``.

        Returns
        -------
        AttentionRun
            Same inputs, settings and Dask client; its own state (nothing of
            this run's progress is carried over) and no ``on_progress``.
        """
        run = AttentionRun(self._host_inputs, backend=backend, client=self.client, threads=self.threads,
                           **{f.name: getattr(self.settings, f.name) for f in fields(Settings) if f.name != "preset"})
        run.settings.preset = self.settings.preset  # its options are in the settings already
        return run

    def snapshot(self, stage: Stage | str | None = None) -> Snapshot:
        """The committed state as a :class:`Snapshot` (as :meth:`steps` last yielded it).

        Parameters
        ----------
        stage : Stage, optional
            What the snapshot is labelled as; default :attr:`Stage.DONE` for a
            finished run, otherwise :attr:`Stage.SIMILARITY`.

        Raises
        ------
        RuntimeError
            Before the first step (nothing has been computed).
        ValueError
            ``Stage.MEANS`` while no invariant means are in progress.
        """
        if self._sim is None:
            raise RuntimeError("the run has not computed anything yet")
        stage = Stage(stage) if stage is not None else Stage.DONE if self.finished else Stage.SIMILARITY
        if stage == Stage.MEANS and self._mean_state is None:
            raise ValueError("no invariant means are in progress")
        snap = self._snapshot(stage)
        snap.timings = dict(self._timings)
        return snap

    # ------------------------------------------------------------------ control
    def cancel(self) -> None:
        """Ask the generator to stop at the next step boundary (thread-safe)."""
        self._cancel.set()

    @property
    def finished(self) -> bool:
        """True once the run is complete and :meth:`result` is available."""
        return self._stage == _Phase.DONE

    @property
    def _steps_per_iteration(self) -> int:
        s = self.settings
        return 1 + (s.mean_steps if s.method == "ia" else 1)

    @property
    def total_steps(self) -> int:
        return self.settings.iterations * self._steps_per_iteration + 1

    def _done_steps(self) -> int:
        s = self.settings
        per = self._steps_per_iteration
        done = (self._iteration - 1) * per
        if self._stage == _Phase.MEANS:
            done += 1 + (self._mean_state.step if self._mean_state is not None else 0)
        elif self._stage in (_Phase.FINAL, _Phase.FINISHING, _Phase.DONE):
            done = s.iterations * per + (1 if self._stage == _Phase.DONE else 0)
        return done

    # ------------------------------------------------------------------ steps
    def steps(self):
        """Advance the run, yielding a :class:`Snapshot` after each step.

        Stops early, with the state committed, when :meth:`cancel` was called;
        calling :meth:`steps` again resumes.
        """
        self._cancel.clear()
        while self._stage != _Phase.DONE:
            if self._cancel.is_set():
                return
            t0 = time.perf_counter()
            try:
                with use_threads(self.threads):
                    snap = self._advance()
            except _Cancelled:
                return  # nothing of the interrupted step was committed
            finally:
                self._timings["total_s"] += time.perf_counter() - t0
            if snap is not None:
                snap.timings = dict(self._timings)
                yield snap

    def run(self, on_snapshot=None) -> RunResult:
        """Run to the end and return :meth:`result`."""
        for snap in self.steps():
            if on_snapshot is not None:
                on_snapshot(snap)
        return self.result()

    def _check_cancel(self):
        if self._cancel.is_set():
            raise _Cancelled

    def _stage_progress(self, fraction):
        """Progress inside the similarity stage; raises ``_Cancelled`` on cancel."""
        if self._cancel.is_set():
            raise _Cancelled
        if self.on_progress is not None:
            overall = (self._done_steps() + fraction) / self.total_steps
            self.on_progress(min(1.0, overall), f"invariant similarity {int(100 * fraction)} %")

    def _distances(self, feats):
        t0 = time.perf_counter()
        s = self.settings
        if s.method == "ia":
            k = None if s.group == "e2" else resolve_neighbors(s.neighbors, self.n)
            opts = dict(angle_step=s.angle_step, rotation_range=s.rotation_range, client=self.client,
                        on_progress=self._stage_progress)
            if k is None:
                sim = invariant_distances(feats, group=s.group, **opts)
                out = (sim.distances, sim.transforms, sim.mirrored, None)
            else:
                from .neighbors import pruned_distances

                sim, graph, sample = pruned_distances(feats, k, **opts)
                out = (graph, sim, sim.mirrored, sample)
        else:
            out = (plain_distances(feats), np.zeros((self.n, self.n, 3)), np.zeros((self.n, self.n), dtype=bool),
                   None)
        self._timings["similarity_s"] += time.perf_counter() - t0
        return out

    def _read_labels(self, distances, probes=None):
        """Labels and the k choice; blank images go to a cluster of their own (the last).

        ``probes``: a pruned run's sample of distances off its graph (for the silhouette).
        """
        keep = np.flatnonzero(~self.blank)
        labels = np.zeros(self.n, dtype=int)
        if keep.size == 0:
            return labels, KChoice(1, 1, 1.0, "trivial", [(1, 1.0)])
        k = self.settings.clusters
        if k != "auto" and self.blank.any():
            k = min(int(k), keep.size)
        if self.settings.readout == "collapse":
            sub, choice = self._collapsed(_rows_cols(distances, keep), keep)
        else:
            sub, choice = read_clusters(_rows_cols(distances, keep), k=k,
                                        probes=None if probes is None else _rows_cols(probes, keep))
        labels[keep] = sub
        if self.blank.any():
            labels[self.blank] = sub.max() + 1
        return labels, choice

    def _collapsed(self, distances, keep):
        """The collapse read-out (:mod:`iastudio.core.collapse`) of the non-blank images ``keep``."""
        from .collapse import collapsed_clusters

        xp = self.backend.xp
        feats = self._features[xp.asarray(keep)]
        scale = float(to_host(xp.sqrt(xp.mean(xp.sum(feats.reshape(feats.shape[0], -1).astype(np.float64) ** 2,
                                                            axis=1)))))
        sub = collapsed_clusters(distances, scale=max(scale, 1e-12))
        k = int(sub.max()) + 1
        return sub, KChoice(k, scale=0, confidence=1.0, method="collapse", candidates=[(k, 1.0)])

    def _separation(self, distances, labels, probes=None) -> float | None:
        """Silhouette of a partition of the non-blank images (None when undefined)."""
        keep = np.flatnonzero(~self.blank)
        return silhouette(_rows_cols(distances, keep), labels[keep],
                          probes=None if probes is None else _rows_cols(probes, keep))

    def _same_clusters(self, labels) -> bool:
        """Whether ``labels`` partition the images as the previous iteration's did."""
        from sklearn.metrics import adjusted_rand_score

        return self._prev is not None and adjusted_rand_score(self._prev[3], labels) == 1.0

    def _guard_rejects(self, labels) -> bool:
        """True (and the previous iteration restored) when ``labels`` are not a clear improvement.

        An iteration may sharpen the clusters (the same partition) or change
        them; a change is kept only when the new clusters fit the *input*
        invariant distances -- the images as they are -- clearly better, by
        their silhouette (+0.02).  Otherwise the iteration has mixed what the
        inputs separate: the previous state is restored and the run stops.
        """
        if not self.settings.guarded or self._prev is None:
            return False
        if self._same_clusters(labels):
            return False  # the same clusters: the iteration only sharpened them
        d0, probes = self._input_sim[0], self._input_sim[3]
        before = self._separation(d0, self._prev[3], probes)
        after = self._separation(d0, labels, probes)
        if before is None or (after is not None and after >= before + _GUARD_GAIN):
            return False
        before_text = "undefined" if before is None else f"{before:.3f}"
        after_text = "undefined" if after is None else f"{after:.3f}"
        self._notes.append(
            f"iteration {self._accepted} moved images between clusters without fitting the input images better "
            f"(silhouette on the input distances {before_text} -> {after_text}); kept the clusters of "
            f"{'the input images' if self._accepted == 1 else f'iteration {self._accepted - 1}'} and stopped")
        feats, self._sim, self._weights, self._labels, self._k_choice, self._beta = self._prev
        self._features = feats
        self._accepted -= 1
        self._history.pop()  # the rejected iteration's distances
        self._prev = None
        return True

    def _forecast_rejects(self, distances, weights, probes, labels) -> bool:
        """True when the guard would undo the next iteration by its forecast (then it is not run).

        The next iteration's distances are forecast from ``distances`` and W
        (:func:`iastudio.core.forecast.forecast_mean_distances`) and read out;
        the forecast clusters meet the guard's test (:meth:`_guard_rejects`).
        """
        s = self.settings
        if not (s.guarded and s.forecast and s.method == "ia") or self._input_sim is None:
            return False
        from sklearn.metrics import adjusted_rand_score

        from .forecast import forecast_mean_distances

        t0 = time.perf_counter()
        try:
            d1, p1 = forecast_mean_distances(distances, weights, probes=probes, mass=s.weight_mass)
            new, _ = self._read_labels(d1, p1)
            if adjusted_rand_score(labels, new) == 1.0:
                self._forecasts.append({"iteration": self._accepted + 1, "same": True})
                return False  # forecast: the clusters stay; the iteration sharpens them
            d0, probes0 = self._input_sim[0], self._input_sim[3]
            before = self._separation(d0, labels, probes0)
            after = self._separation(d0, new, probes0)
            self._forecasts.append({"iteration": self._accepted + 1, "same": False, "before": before, "after": after})
        finally:
            self._timings["forecast_s"] += time.perf_counter() - t0
        if before is None or (after is not None and after >= before + _GUARD_GAIN):
            return False
        after_text = "undefined" if after is None else f"{after:.3f}"
        self._notes.append(
            f"iteration {self._accepted + 1} not run: its forecast (the distances of its means estimated from the "
            f"current distances and W) moves images between clusters without fitting the input images better "
            f"(silhouette on the input distances {before:.3f} -> {after_text}); kept the clusters of "
            f"{'the input images' if self._accepted == 0 else f'iteration {self._accepted}'} and stopped")
        return True

    @staticmethod
    def _init_of(trans):
        """Starting transforms of the means: the dense array, or a look-up into a pruned run's pairs."""
        if isinstance(trans, np.ndarray):
            return trans
        return lambda src, col: trans.transform(src, col)

    def _advance(self):
        if self._stage == _Phase.SIMILARITY:
            return self._advance_similarity()
        if self._stage == _Phase.MEANS:
            return self._advance_means()
        if self._stage == _Phase.FINAL:
            sim = self._distances(self._features)
            dist = sim[0]
            self._history.append(_view(dist, fill_missing=True))
            labels, choice = self._read_labels(dist, sim[3])
            if not self._guard_rejects(labels):
                self._sim = sim
                self._labels, self._k_choice = labels, choice
            self._stage = _Phase.FINISHING
            return self._advance()
        if self._stage == _Phase.FINISHING:  # committed state above; a cancel here redoes only this
            self._finish()
            return self._snapshot(Stage.DONE)
        raise RuntimeError(f"unknown stage {self._stage}")

    def _advance_similarity(self):
        """The similarity of the current features, W from it, and the start of the means (or the end)."""
        s = self.settings
        xp = self.backend.xp
        dist, trans, mirrored, probes = sim = self._distances(self._features)
        self._history.append(_view(dist, fill_missing=True))
        labels, choice = self._read_labels(dist, probes)
        if self._guard_rejects(labels):
            self._stage = _Phase.FINISHING
            return self._advance()
        settled = self.settings.guarded and self._same_clusters(labels)
        if self._input_sim is None:
            self._input_sim = sim
            if s.beta == "auto":
                self._bandwidth = local_bandwidth(dist, neighbor=choice.scale)
        w, beta = attention_weights(dist, s.beta if s.beta == "auto" else float(s.beta), bandwidth=self._bandwidth)
        prev = self._weights
        self._sim, self._weights, self._beta = sim, w, beta
        self._labels, self._k_choice = labels, choice
        if settled:
            self._notes.append(f"iteration {self._accepted} left the clusters as they were: stopped there "
                               f"(more iterations would only sharpen W and the means)")
        if settled or (prev is not None and _max_abs_diff(w, prev) < s.converge_tol):
            self._stage = _Phase.FINISHING  # the clusters settled, or W stopped moving: converged
            return self._advance()
        if self._forecast_rejects(dist, w, probes, labels):
            self._stage = _Phase.FINISHING  # the guard would undo the iteration: not computed
            return self._advance()
        self._stage = _Phase.MEANS
        t0 = time.perf_counter()
        if s.method == "ia":
            init = self._init_of(trans) if s.init == "pairwise" else None
            if _is_sparse(w):
                self._mean_src, w_src = self._features, w
            else:
                self._mean_src, w_src, init = self._with_mirrors(self._features, w, init, mirrored)
                w_src = xp.asarray(w_src, dtype=np.float32)
            if s.mean_solver == "gradient":  # Algorithm 1: the sample mean first
                self._mean_state = start_descent_means(self._mean_src, w_src, init, tol=s.weight_tol)
            else:
                self._mean_state = start_invariant_means(self._mean_src, w_src, init, tol=s.weight_tol,
                                                         mass=s.weight_mass)
        self._timings["mean_s"] += time.perf_counter() - t0
        return self._snapshot(Stage.SIMILARITY)

    def _advance_means(self):
        """One step of the means (or the kernel average): a snapshot now and then, the iteration at its end."""
        s = self.settings
        xp = self.backend.xp
        t0 = time.perf_counter()
        if s.method == "ka":
            w = xp.asarray(self._weights, dtype=np.float32)
            feats = xp.tensordot(w.T, self._features, axes=1)
            self._mean_state = None
            done = True
        elif s.mean_solver == "gradient":
            self._mean_state = descent_step(self._mean_src, self._mean_state, learning_rate=s.learning_rate,
                                            sigmas=s.sigmas)
            feats = self._mean_state.means
            done = self._mean_state.step >= s.mean_steps
        else:
            self._mean_state = invariant_mean_step(self._mean_src, self._mean_state, sigmas=s.sigmas,
                                                   rtol=s.mean_rtol, client=self.client,
                                                   check=self._check_cancel)
            feats = self._mean_state.means
            done = self._mean_state.step >= s.mean_steps or self._mean_state.converged
        self._timings["mean_s"] += time.perf_counter() - t0
        if not done:
            if self._mean_state.step % max(1, s.snapshot_every) == 0:
                return self._snapshot(Stage.MEANS)
            return None
        self._prev = (self._features, self._sim, self._weights, self._labels, self._k_choice, self._beta)
        self._features = feats
        self._accepted += 1
        snap = self._snapshot(Stage.ITERATION)
        self._mean_state = None
        if self._iteration >= s.iterations:
            self._stage = _Phase.FINAL
        else:
            self._iteration += 1
            self._stage = _Phase.SIMILARITY
        return snap

    def _with_mirrors(self, images, weights, init, mirrored):
        """E(2): sources ``[v; flip(v)]``, with weights and starts routed by the mirror flags.

        Entry ``(i, j)`` uses ``flip(v_i)`` where ``mirrored[i, j]``; with SE(2)
        everything is returned unchanged.
        """
        if self.settings.group != "e2":
            return images, weights, init
        xp = self.backend.xp
        w = np.asarray(to_host(weights), dtype=float)
        m = np.asarray(mirrored, dtype=bool)
        w2 = np.concatenate([np.where(m, 0.0, w), np.where(m, w, 0.0)])
        init2 = None if init is None else np.concatenate([init, init])
        return xp.concatenate([images, xp.flip(images, axis=2)]), w2, init2

    def _entry_transforms(self, st):
        """The mean state's ``(n, m, 3)`` entry transforms, mirror sources folded back."""
        t = st.transforms(int(self._mean_src.shape[0]))
        if t.shape[0] == self.n:
            return t
        return np.where(self._sim[2][..., None], t[self.n:], t[:self.n])

    def _finish(self):
        """Cluster read-out and per-image alignment to the cluster means."""
        t0 = time.perf_counter()
        s = self.settings
        xp = self.backend.xp
        labels = self._labels
        k = int(labels.max()) + 1
        d0, t_in, m_in, _ = self._input_sim
        weights = np.zeros((self.n, k))
        init = np.zeros((self.n, k, 3))
        mirror = np.zeros((self.n, k), dtype=bool)
        medoids = np.zeros(k, dtype=int)
        for c in range(k):
            members = np.flatnonzero(labels == c)
            weights[members, c] = 1.0 / members.size
            if _is_sparse(d0):  # pruned: the member most strongly tied to the others on the graph
                sub = d0[members][:, members].tocoo()
                tie = np.bincount(sub.row, weights=np.exp(-self._beta * sub.data**2), minlength=members.size)
                medoids[c] = members[np.argmax(tie)]
            else:
                medoid = members[np.argmin((d0[np.ix_(members, members)] ** 2).sum(axis=1))]
                init[:, c] = t_in[:, medoid]
                if m_in is not None:
                    mirror[:, c] = m_in[:, medoid]
        mirrored = mirror[np.arange(self.n), labels]
        src, w_src, init = self._with_mirrors(self._inputs, weights, init, mirror)
        index = np.arange(self.n) + (self.n * mirrored if src.shape[0] > self.n else 0)
        if _is_sparse(d0) and s.method == "ia":
            # align every image onto its cluster's medoid (n pairs): the start of the cluster means
            a = np.arange(self.n)
            b = medoids[labels]
            own = invariant_distances(self._inputs, angle_step=s.angle_step, rotation_range=s.rotation_range,
                                      pairs=(a[a != b], b[a != b]), client=self.client)
            init = lambda src, col: own.transform(src, medoids[col])  # noqa: E731
        if s.method == "ia":
            state = invariant_means(src, xp.asarray(w_src, dtype=np.float32), init,
                                    steps=s.mean_steps, sigmas=s.sigmas, tol=0.0, rtol=s.mean_rtol,
                                    check=self._check_cancel)
            means = state.means
            tr = state.transforms(src.shape[0])[index, labels]
        else:
            means = xp.tensordot(xp.asarray(weights.T, dtype=np.float32), self._inputs, axes=1)
            tr = np.zeros((self.n, 3))
        aligned = warp(src, xp.asarray(tr), index=xp.asarray(index))
        m = means[xp.asarray(labels)]
        num = (aligned * m).reshape(self.n, -1).sum(axis=1)
        # the product of the two norms, not the root of the product of their squares (which overflows float32
        # for images of large values)
        den = xp.sqrt((aligned**2).reshape(self.n, -1).sum(axis=1)) * xp.sqrt((m**2).reshape(self.n, -1).sum(axis=1))
        scores = to_host(num / xp.maximum(den, 1e-12), np.float64)
        self._timings["mean_s"] += time.perf_counter() - t0
        self._result = RunResult(
            labels=labels,
            n_clusters=k,
            cluster_means=to_host(means, np.float32),
            image_transforms=tr,
            scores=scores,
            weights=_view(self._weights),
            input_distances=_view(d0, fill_missing=True) if _is_sparse(d0) else d0,
            final_distances=_view(self._sim[0], fill_missing=True) if _is_sparse(self._sim[0]) else self._sim[0],
            history=list(self._history),
            features=to_host(self._features, np.float32),
            iterations=self._accepted,
            beta=self._beta,
            timings=dict(self._timings),
            k_choice=self._k_choice,
            blank=self.blank.copy(),
            notes=list(self._notes),
            mirrored=mirrored,
        )
        self._stage = _Phase.DONE

    def _snapshot(self, stage):
        st = self._mean_state
        if stage == Stage.MEANS or (stage == Stage.ITERATION and st is not None):
            means = st.means
            # the dense (n, n, 3) entry transforms only while they stay small
            transforms = self._entry_transforms(st) if self.n <= _DENSE_TRANSFORMS_MAX else None
            objective = [float(o.sum()) for o in st.objective]
            step = st.step
        else:
            means = self._features
            transforms = self._sim[1] if self._sim is not None and isinstance(self._sim[1], np.ndarray) else None
            objective = []
            step = 0
        n_steps = self.settings.mean_steps if self.settings.method == "ia" else 1
        return Snapshot(
            iteration=self._accepted if stage == Stage.DONE else self._iteration,  # done: the iterations kept
            stage=stage,
            step=step,
            n_steps=n_steps,
            weights=_view(self._weights),
            means=to_host(means, np.float32),
            distances=_view(self._sim[0], fill_missing=True),
            transforms=None if transforms is None else transforms.astype(np.float32),
            labels=self._labels.copy(),
            objective=objective,
            timings={},
            progress=min(1.0, self._done_steps() / self.total_steps),
            beta=self._beta,
            k_choice=self._k_choice,
        )

    def result(self) -> RunResult:
        """The finished run's :class:`RunResult` (raises if not finished)."""
        if self._result is None:
            raise RuntimeError("the run has not finished")
        return self._result

    def grouping(self) -> np.ndarray:
        """Image order grouping the current clusters together."""
        return grouping_order(self._labels)
