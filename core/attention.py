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

Here are the options (:class:`Settings`) and the public run; its state machine
is :class:`~iastudio.core.run_loop.RunLoop`, the work of its steps
:mod:`~iastudio.core.run_steps`, its read-out and guard
:mod:`~iastudio.core.run_readout`, and what it gives (:class:`Snapshot`,
:class:`RunResult`) :mod:`~iastudio.core.run_output`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, fields
from enum import StrEnum

import numpy as np

from .backend import Backend, get_backend, to_host, use_threads
from .clustering import grouping_order
from .options import OPTIONS, check, option
from .run_loop import RunLoop, _Cancelled, _Phase
from .run_output import RESULT_ARRAYS, RunResult, Snapshot, Stage
from .run_output import rows_cols as _rows_cols  # noqa: F401  (the name benchmarks/bench_kauto.py reads)
from .similarity import check_finite

__all__ = ["RESULT_ARRAYS", "AttentionRun", "RunResult", "RunState", "Settings", "Snapshot", "Stage"]


class RunState(StrEnum):
    """The state of a run as an application shows it (the engine itself only knows :class:`Stage`)."""

    IDLE = "idle"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FINISHED = "finished"
    FAILED = "failed"
    SPLITTING = "splitting"  #: one cluster's images are being re-run on their own


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
    sharpen : bool or "auto"
        With the guard and the forecast on: also run an iteration whose
        forecast leaves the clusters as they are (it sharpens W and the
        means, and the clusters may still move).  ``False``: stop there, as
        the guard stops after an iteration that left the clusters as they
        were, without paying for its means and its similarity stage (on the
        quality suite's 52 runs and the noise suite the clusters were the
        same either way: ``benchmarks/bench_guard.py --sharpen``).
        ``"auto"`` (default): run it where every pair is aligned (up to 300
        images with ``neighbors="auto"``: seconds, and the run shows W turn
        block-diagonal), stop on the pruned path (thousands of images, where
        it costs most of the run).
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
    realign_rounds : int or "auto"
        The final class averages (:func:`~iastudio.core.run_steps.align_to_clusters`): rounds of
        global re-alignment of each cluster's images onto the mean of the others
        (:func:`~iastudio.core.cluster_means.realign_to_mean`) after their alignment onto the
        cluster's medoid and before the invariant mean's refinement; ``0``: the medoid alignment
        alone (the means before issue 30).  ``"auto"`` (default): 3 where every pair is aligned,
        1 on the pruned path (:data:`~iastudio.core.run_steps.AUTO_REALIGN_ROUNDS`; 3 rounds took
        16 % more time on a pruned run of 1,000 images, 1 round 5 %).
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
    realign_rounds: object = option("realign_rounds").default
    preset: str | None = None
    forecast: bool = True
    sharpen: object = "auto"

    @property
    def guarded(self) -> bool:
        """Whether the separation guard is on (see ``guard``)."""
        return self.beta == "auto" if self.guard is None else bool(self.guard)

    @classmethod
    def of(cls, options: dict, *, preset: str | None = None) -> Settings:
        """The settings of a run given ``options`` (every field but ``preset``) and an optional preset.

        The preset sets every option left at its default (:func:`iastudio.core.presets.preset_options`);
        ``readout="auto"`` becomes the preset's read-out, or spectral.
        """
        if preset is not None:
            from .presets import preset_options

            defaults = {f.name: getattr(cls, f.name) for f in fields(cls) if f.name != "preset"}
            options = preset_options(preset, options, defaults)
        if options["readout"] == "auto":
            options = {**options, "readout": "spectral"}
        return cls(**options, preset=preset)

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
        if not (isinstance(self.sharpen, (bool, np.bool_)) or self.sharpen == "auto"):
            raise ValueError(f"sharpen must be True, False or 'auto', got {self.sharpen!r}")
        if self.intensity not in ("unit", "paper"):
            raise ValueError("intensity must be 'unit' or 'paper'")
        if self.readout == "collapse" and self.clusters != "auto":
            raise ValueError("the collapse read-out finds the number of clusters itself: leave clusters at 'auto', "
                             "or read out with readout='spectral' (ia-cluster: --readout spectral)")


def _checked_images(images) -> np.ndarray:
    """The run's images as float32 on the host, after checking their shape and values."""
    images = np.asarray(to_host(images))
    if images.ndim not in (3, 4) or images.shape[0] < 2:
        raise ValueError(f"need at least 2 images of shape (H, W) or (H, W, C), got an array of shape "
                         f"{images.shape}")
    check_finite(images)  # on the values given: 1e300 would become inf as float32
    return images.astype(np.float32, copy=False)


class AttentionRun(RunLoop):
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
intensity, readout, forecast, sharpen, realign_rounds
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
                 forecast: bool = Settings.forecast, sharpen=Settings.sharpen,
                 realign_rounds=Settings.realign_rounds):
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
            learning_rate=learning_rate, intensity=intensity, readout=readout, forecast=bool(forecast),
            sharpen=sharpen, realign_rounds=realign_rounds)
        self.settings = Settings.of(options, preset=preset)
        images = _checked_images(images)
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
        self._start_state()
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

    def result(self) -> RunResult:
        """The finished run's :class:`RunResult` (raises if not finished)."""
        if self._result is None:
            raise RuntimeError("the run has not finished")
        return self._result

    def grouping(self) -> np.ndarray:
        """Image order grouping the current clusters together."""
        return grouping_order(self._labels)
