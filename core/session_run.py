"""The session's run: prepared here, stepped by a driver, its frames taken back (part of ``Session``).

The session runs nothing itself: :meth:`SessionRun.start` prepares an
:class:`~iastudio.core.attention.AttentionRun`, a driver (the app's worker thread, or
:meth:`SessionRun.run_here`) steps it with :func:`stream_run` and hands each item back to
:meth:`SessionRun.take` on the session's thread.  Resume only continues a stopped run on the very
images it started with.
"""
from __future__ import annotations

import logging
import time
from dataclasses import fields

import numpy as np

from .attention import AttentionRun, RunState, Settings
from .backend import BackendUnavailableError
from .clusterbook import ClusterBook
from .distributed import DaskUnavailableError
from .filenames import display_name, printable
from .frames import Frame, FrameBuilder
from .options import option, problem
from .particle_ctf import flip_problem, phase_flip_record
from .project import RECORDED_STAGES
from .session_inputs import RunInputs
from .wording import count_of

log = logging.getLogger(__name__)


class SessionRun:
    """Start, stop, resume, and the frames, end or failure of a run (a part of ``Session``)."""

    # the state this part shares with the others (set in ``Session.__init__``), typed for mypy
    latest: Frame | None
    final: Frame | None
    run: AttentionRun | None
    subset_run: AttentionRun | None
    run_inputs: RunInputs | None
    denoise: str
    phase_flip: bool
    phase_flip_report: dict | None
    undenoised: np.ndarray | None

    def start(self, *, backend: str = "auto", dask: str | None = None, denoise: str | None = None,
              phase_flip: bool = False, **options) -> AttentionRun | None:
        """Prepare a new run on the transformed set (the driver steps it); None (with a message) when refused.

        ``dask``: a Dask scheduler to run the alignment and the means on (``"local:N"`` or an address such
        as ``"tcp://host:8786"``); the client is kept for later runs and closed by :meth:`close`.
        ``denoise`` (``"auto"``, the default, ``"on"`` or ``"off"``; see the ``denoise`` run option): the run
        clusters the set preprocessed as one stack and denoised first, as ``ia-cluster --denoise`` does.
        That work waits in :attr:`run_inputs` for the driver (:func:`stream_run` does it first, in its
        thread); ``"off"`` runs on the per-image canvases as they are.
        ``phase_flip``: first phase-flip each raw image with its own CTF parameters (every image must
        carry them: a RELION particle STAR file's images), as ``ia-cluster --phase-flip`` does.
        """
        if self.busy:
            self.message("A run is already going.")
            return None
        if self.n < 2:
            self.message("Add at least 2 images before starting a run.")
            return None
        denoise = option("denoise").default if denoise is None else denoise
        if text := problem("denoise", denoise):
            self.message(f"Cannot start: {text}")
            return None
        if phase_flip and (text := flip_problem(self.data.ctf, self.data.images, paths=self.data.paths)):
            self.message(f"Cannot phase-flip: {text}.")
            return None
        options.setdefault("snapshot_every", 1)  # the window shows every mean step
        try:
            if dask:
                options["client"] = self._dask_client(dask)
            run = AttentionRun(self.working, backend=backend, **options)  # the options checked here, at once
        except (ValueError, BackendUnavailableError, DaskUnavailableError) as exc:
            self.message(f"Cannot start: {exc}")
            return None
        # a denoised run's canvas (live, or a reopened project's): every run starts from the previews
        shown = self.shows_denoised
        self.discard_run()  # (which it brings back)
        self._mark_dirty()  # a new run: the session is no longer what a saved project holds (even if stopped)
        if shown:
            run = on_inputs(run, self.working)
        self.run = run
        self.subset_run = None
        self.denoise = denoise
        self.phase_flip = bool(phase_flip)
        if denoise != "off" or phase_flip:
            self.run_inputs = RunInputs(self.data.images, size=self.size, transforms=self.transforms,
                                        denoise=denoise, originals=self.data.paths if self.embedded else None,
                                        phase_flip=phase_flip, ctf=self.data.ctf if phase_flip else None,
                                        scale=None if self.canvas is None else self.canvas.scale)
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
            for item in stream_run(run, FrameBuilder(), prepare=self.run_inputs):
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
        elif kind == "denoised":
            self.on_denoised(*item[1:])

    def on_denoised(self, run: AttentionRun | None, canvas, working, undenoised=None) -> None:
        """The run's inputs are ready (the driver made :attr:`run_inputs`): ``run`` clusters the denoised
        ``working`` images, or is None when the denoiser stepped aside (the run goes on as it started).

        The denoised canvas becomes the session's while the run exists (the gallery shows what it
        clusters; exports and projects use its geometry); what the denoiser did is
        :attr:`denoise_report` and, once the run ends, the first of its notes.  ``undenoised``: the
        images before denoising, moved as ``working`` (:attr:`RunInputs.undenoised`), kept as
        :attr:`undenoised` for a driver that resumes the run (:func:`stream_run`'s ``undenoised``).
        """
        if self.run_inputs is not None and self.run_inputs.phase_flip:
            self.phase_flip_report = {**phase_flip_record(self.data.ctf), **(
                {"note": self.run_inputs.note} if self.run_inputs.note else {})}
        self.run_inputs = None
        self.denoise_report = canvas.denoise
        if run is None:
            return
        self.run = run
        self.undenoised = undenoised
        if self.state != RunState.RUNNING:  # stopped while the images were denoised: the new run stops too
            run.cancel()
        self._show_run_canvas(canvas, working)

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
        if self.run_inputs is not None:
            self.run_inputs.cancel()
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
        self.events.frame.emit(frame)

    def on_progress(self, fraction: float, text: str, eta: float) -> None:
        self.events.progress.emit(fraction, text, eta)

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
        said = [phase_flip_line(self.phase_flip_report), denoise_line(self.denoise_report, self.data.paths)]
        for line in reversed(said):
            if line and line not in frame.result.notes:
                frame.result.notes.insert(0, line)  # shown with the run's notes, saved with them (run_notes)
        self._apply_book(ClusterBook.from_labels(frame.result.labels))
        self.events.history.emit()
        self._mark_dirty()
        self._set_state(RunState.FINISHED)
        self.events.frame.emit(frame)
        self.events.finished.emit(frame)
        k, kept = frame.result.n_clusters, frame.result.iterations
        asked = self.run.settings.iterations if self.run is not None else kept
        fewer = f" (stopped after {kept} of {asked} iterations)" if kept < asked else ""  # the guard, or W settled
        self.message(f"Done: {count_of(k, 'cluster')} in {self.elapsed:.1f} s{fewer}")

    def on_stopped(self, elapsed: float = 0.0) -> None:
        self.elapsed += elapsed
        if self.run_inputs is not None:  # stopped before its images were ready: Resume makes them again
            self.run_inputs.rearm()
        self._set_state(RunState.STOPPED)
        self.message("Stopped. Resume continues where it stopped.")

    def on_failed(self, message: str, traceback_text: str = "") -> None:
        self._set_state(RunState.FAILED)
        self.events.failed.emit(message, traceback_text)

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


def stream_run(run: AttentionRun, builder: FrameBuilder, *, prepare=None, undenoised=None):
    """Step ``run`` for a driver thread, yielding what the session takes, as tuples.

    ``prepare`` (a session's :attr:`~SessionRun.run_inputs`, a :class:`~iastudio.core.session_inputs.RunInputs`):
    first make the run's inputs (phase-flip the raw set, preprocess it as one stack, denoise it) and yield
    ``("denoised", new_run, canvas, working, undenoised)``; ``new_run``, the same settings on the new
    ``working`` images, is stepped instead of ``run`` (None when the images were neither phase-flipped nor
    denoised: ``run`` goes on); ``undenoised`` are the images before denoising, moved as ``working``
    (None when the denoiser did not change them).  A run
    stopped meanwhile yields ``("stopped", seconds)`` and no frame.

    Then ``("frame", Frame)`` for each snapshot, and ``("finished", Frame, seconds)`` (the frame carries the
    result and, where the run denoised, the class averages of the images before denoising:
    :attr:`Frame.undenoised_means`, computed here, in the driver's thread) or ``("stopped", seconds)``
    when the run was cancelled.  When the GPU fails the run goes on from the start on the CPU, after
    ``("cpu", new_run, message)``.  ``undenoised``: a resumed denoised run's images before denoising (the
    session's :attr:`~SessionRun.undenoised`; ``prepare`` makes them for a new run).
    """
    t0 = time.perf_counter()
    if prepare is not None:
        if run.on_progress is not None:
            flip = "phase flip, " if prepare.phase_flip else ""
            run.on_progress(0.0, f"preparing the images ({flip}denoise {prepare.denoise})")
        canvas, working = prepare()
        if prepare.cancelled:
            yield ("stopped", time.perf_counter() - t0)
            return
        changed = prepare.phase_flip or (canvas.denoise is not None and canvas.denoise.applied)
        new = on_inputs(run, working) if changed else None
        undenoised = prepare.undenoised if new is not None else None
        yield ("denoised", new, canvas, working, undenoised)
        run = new or run
    try:
        yield from _step(run, builder, t0, prepare, undenoised)
    except Exception as exc:
        if run.backend.name != "cupy":
            raise
        log.exception("GPU run failed; falling back to the CPU")
        cpu = run.on_backend("numpy")
        cpu.on_progress = run.on_progress
        yield ("cpu", cpu, f"The GPU failed ({exc}); continuing on the CPU.")
        builder.reset()
        yield from _step(cpu, builder, t0, prepare, undenoised)


def on_inputs(run: AttentionRun, images) -> AttentionRun:
    """A new, unstarted run of ``run``'s settings, backend, threads, Dask client and progress callback on
    other ``images`` (its denoised inputs)."""
    new = AttentionRun(images, backend=run.backend, client=run.client, threads=run.threads,
                       **{f.name: getattr(run.settings, f.name) for f in fields(Settings) if f.name != "preset"})
    new.settings.preset = run.settings.preset  # its options are in the settings already
    new.on_progress = getattr(run, "on_progress", None)
    return new


def phase_flip_line(report) -> str:
    """That the run's images were phase-flipped, in one line for the window (``""`` when they were not).

    >>> phase_flip_line({"applied": True, "n_images": 40, "defocus_A": [10000.0, 25000.0]})
    'Phase-flipped: each of the 40 images with its own CTF (defocus 1–2.5 µm)'
    """
    if not report or not report.get("applied"):
        return ""
    lo, hi = (d / 1e4 for d in report["defocus_A"])
    line = f"Phase-flipped: each of the {report['n_images']} images with its own CTF (defocus {lo:.3g}–{hi:.3g} µm)"
    return f"{line}; {report['note']}" if report.get("note") else line


def denoise_line(report, paths=None) -> str:
    """What the denoiser did, in one line for the window (``""`` without a report or with denoising off).

    ``paths``: the images' files (the set the report is about); the images left as they were are then
    named, up to three ("…: odd.png, b.png, c.png and 2 more"), as ``ia-cluster`` names them.

    Examples
    --------
    >>> from iastudio.core.denoise import DenoiseReport
    >>> denoise_line(DenoiseReport(True, "auto", "steerable-pca", 0.213, 0.41, 19))
    'Denoised: noise σ≈0.213 per pixel, SNR≈0.41, 19 components kept'
    >>> denoise_line(DenoiseReport(False, "auto", note="denoising skipped: estimated noise 0, the images look clean"))
    'Not denoised: estimated noise 0, the images look clean'
    >>> denoise_line(DenoiseReport(True, "auto", "steerable-pca", 0.5, 0.3, 12, left_out=[7]))
    'Denoised: noise σ≈0.5 per pixel, SNR≈0.3, 12 components kept; 1 image of another size or colour left as it was'
    >>> denoise_line(DenoiseReport(True, "auto", "steerable-pca", 0.5, 0.3, 12, left_out=[1]),
    ...              ["a.png", "/d/odd.png"]).split("; ")[1]
    '1 image of another size or colour left as it was: odd.png'
    """
    if report is None or report.mode == "off":
        return ""
    if report.applied:
        snr = "" if report.snr is None or not np.isfinite(report.snr) else f", SNR≈{report.snr:.2g}"
        n = len(report.left_out)
        aside = (f"; {n} image{'s' if n != 1 else ''} of another size or colour left as "
                 f"{'they were' if n != 1 else 'it was'}") if n else ""
        named = [printable(display_name(paths[i])) for i in report.left_out[:3] if paths is not None
                 and 0 <= i < len(paths)]
        if named:
            aside += ": " + ", ".join(named) + (f" and {n - len(named)} more" if n > len(named) else "")
        return (f"Denoised: noise σ≈{report.noise_std:.3g} per pixel{snr}, {report.components} components kept"
                + aside)
    reason = report.note.split(": ", 1)[-1] if report.note else "the denoiser stepped aside"
    return f"Not denoised: {reason}"


def _step(run: AttentionRun, builder: FrameBuilder, t0: float, prepare=None, undenoised=None):
    last = None
    for snap in run.steps():
        if prepare is not None and prepare.cancelled:  # stopped before the session held this run
            run.cancel()
        last = snap
        yield ("frame", builder.frame(snap, elapsed=time.perf_counter() - t0))
    if run.finished:
        final = builder.final(run, last, elapsed=time.perf_counter() - t0, undenoised=undenoised)
        yield ("finished", final, time.perf_counter() - t0)
    else:
        yield ("stopped", time.perf_counter() - t0)


def run_subset(run: AttentionRun):
    """Run a subset run to its end (for a driver thread); its labels, or None when it was cancelled."""
    for _ in run.steps():
        pass
    return run.result().labels if run.finished else None
