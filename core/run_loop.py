"""The state machine of a run: its committed state, and the step that advances it.

:class:`RunLoop` is the engine inside :class:`~iastudio.core.attention.AttentionRun`
(which adds the options, the inputs and the public control).  Its state is
committed before every snapshot, so a stop (``cancel``, or simply not asking
for the next snapshot) and a later resume redo at most the interrupted step: a
cancelled-then-resumed run equals an uninterrupted one.  What each step
computes is in :mod:`~iastudio.core.run_steps`, the read-out and the guard's
questions in :mod:`~iastudio.core.run_readout`, the snapshots and the result in
:mod:`~iastudio.core.run_output`.
"""
from __future__ import annotations

import contextlib
import threading
import time
from enum import StrEnum

import numpy as np

from .backend import blas_threads, to_host
from .clustering import KChoice
from .run_output import RunResult, Stage, host_view, is_sparse, make_snapshot, max_abs_diff
from .run_readout import forecast_verdict, guard_note, guard_verdict, read_labels, same_partition, settle_note
from .run_steps import align_to_clusters, entry_transforms, feature_distances, mean_step, start_means
from .weights import attention_weights, local_bandwidth

__all__ = ["RunLoop"]


class _Phase(StrEnum):
    """The next thing :meth:`RunLoop._advance` does (private: two phases have no snapshot)."""

    SIMILARITY = "similarity"
    MEANS = "means"
    FINAL = "final"  # distances of the final features and the read-out
    FINISHING = "finishing"  # cluster means and per-image alignment
    DONE = "done"


class _Cancelled(Exception):
    """Raised inside a long stage when the run was cancelled; the stage is redone on resume."""


class _Speculation:
    """:func:`~.run_steps.align_to_clusters` started on a thread of its own while the guard's forecast runs.

    ``work(check)`` is the call; ``check()`` raises :class:`_Cancelled` once :meth:`cancel` was called
    (or the run was cancelled), so the thread stops at its next check.  ``key`` is what the result
    depends on besides the run's fixed inputs: the labels and the bandwidth.
    """

    def __init__(self, key, work, run_cancel):
        self.key = key
        self.seconds = 0.0  # how long the work took on its thread (set when it ends)
        self._stop = threading.Event()
        self._run_cancel = run_cancel
        self._out = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(work,), name="ia-finish", daemon=True)
        self._thread.start()

    def _check(self):
        if self._stop.is_set() or self._run_cancel.is_set():
            raise _Cancelled

    def _run(self, work):
        t0 = time.perf_counter()
        try:
            self._out = work(self._check)
        except BaseException as exc:  # handed to the caller of result()
            self._error = exc
        finally:
            self.seconds = time.perf_counter() - t0

    def matches(self, labels, beta) -> bool:
        """Whether the result is the one for these labels and this bandwidth."""
        labels0, beta0 = self.key
        return np.array_equal(labels0, labels) and (beta0 == beta or (beta0 != beta0 and beta != beta))

    def cancel(self) -> None:
        """Stop the thread (at its next check) and wait for it."""
        self._stop.set()
        self._thread.join()

    def result(self):
        """The call's result (waits for it); its exception if it raised one."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._out


class RunLoop:
    """The committed state of a run and its steps (the engine of :class:`~iastudio.core.attention.AttentionRun`).

    A subclass sets ``settings``, ``client``, ``backend``, ``blank`` (bool, per
    image), ``n``, ``_inputs`` (the images on the backend) and ``on_progress``,
    then calls :meth:`_start_state`; :meth:`_advance` then does the next step
    and returns its :class:`~iastudio.core.run_output.Snapshot` (or None).
    """

    def _start_state(self) -> None:
        """The state before the first step: the inputs are the features, nothing computed."""
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
        self._speculative: _Speculation | None = None  # the class averages, begun while the forecast runs
        self._timings = {"similarity_s": 0.0, "mean_s": 0.0, "forecast_s": 0.0, "total_s": 0.0}
        self._result: RunResult | None = None
        self._cancel = threading.Event()

    @property
    def _steps_per_iteration(self) -> int:
        s = self.settings
        return 1 + (s.mean_steps if s.method == "ia" else 1)

    def _done_steps(self) -> int:
        s = self.settings
        per = self._steps_per_iteration
        done = (self._iteration - 1) * per
        if self._stage == _Phase.MEANS:
            done += 1 + (self._mean_state.step if self._mean_state is not None else 0)
        elif self._stage in (_Phase.FINAL, _Phase.FINISHING, _Phase.DONE):
            done = s.iterations * per + (1 if self._stage == _Phase.DONE else 0)
        return done

    @property
    def total_steps(self) -> int:
        """Steps of the whole run (similarity and mean steps of every iteration, and the end)."""
        return self.settings.iterations * self._steps_per_iteration + 1

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
        out = feature_distances(feats, self.settings, client=self.client, on_progress=self._stage_progress)
        self._timings["similarity_s"] += time.perf_counter() - t0
        return out

    def _read_labels(self, distances, probes=None):
        """Labels and the k choice of the current features (:func:`iastudio.core.run_readout.read_labels`)."""
        return read_labels(distances, blank=self.blank, clusters=self.settings.clusters,
                           readout=self.settings.readout, probes=probes, features=self._features,
                           xp=self.backend.xp)

    def _same_clusters(self, labels) -> bool:
        """Whether ``labels`` partition the images as the previous iteration's did."""
        return self._prev is not None and same_partition(self._prev[3], labels)

    def _guard_rejects(self, labels) -> bool:
        """True (and the previous iteration restored) when ``labels`` are not a clear improvement.

        Otherwise the iteration has mixed what the inputs separate
        (:func:`iastudio.core.run_readout.guard_verdict`): the previous state is
        restored and the run stops.
        """
        if not self.settings.guarded or self._prev is None:
            return False
        refused = guard_verdict(self._prev[3], labels, inputs=self._input_sim, blank=self.blank)
        if refused is None:
            return False
        self._notes.append(guard_note(self._accepted, *refused, asked=self.settings.iterations))
        feats, self._sim, self._weights, self._labels, self._k_choice, self._beta = self._prev
        self._features = feats
        self._accepted -= 1
        self._history.pop()  # the rejected iteration's distances
        self._prev = None
        return True

    def _forecast_rejects(self, distances, weights, probes, labels) -> bool:
        """True when the next iteration is not run: by its forecast the guard would undo it, or (without
        ``sharpen``) it would leave the clusters as they are."""
        s = self.settings
        if not (s.guarded and s.forecast and s.method == "ia") or self._input_sim is None:
            return False
        t0 = time.perf_counter()
        spec = self._speculate()
        rejected = False
        try:
            with blas_threads(1) if spec is not None else contextlib.nullcontext():
                # one BLAS thread whatever the class averages' thread does: the same read-out every time
                seen, refused = forecast_verdict(distances, weights, labels, read=self._read_labels,
                                                 inputs=self._input_sim, blank=self.blank, probes=probes,
                                                 mass=s.weight_mass)
            self._forecasts.append({"iteration": self._accepted + 1, **seen})
            if refused is None:
                rejected = bool(seen.get("same")) and not self._sharpens()
                if rejected:
                    self._notes.append(settle_note(self._accepted + 1, asked=s.iterations))
            else:
                rejected = True
                self._notes.append(guard_note(self._accepted + 1, *refused, forecast=True,
                                              asked=s.iterations))
        finally:
            if spec is not None and not rejected:  # the iteration runs: the class averages would be of other clusters
                spec.cancel()
                self._speculative = None
            self._timings["forecast_s"] += time.perf_counter() - t0
        return rejected

    def _speculate(self) -> _Speculation | None:
        """Begin the class averages of the current clusters on a thread (:class:`_Speculation`), or None.

        When the forecast stops the run, they are its result, and the forecast's read-out (mostly on
        one core) and the averages (the engine's pool of threads) share the machine instead of taking
        turns.  Only on the CPU without a Dask client, and on a pruned run (on a small one the forecast
        is short).  The averages run with one BLAS thread, as the forecast does while they run and as
        :meth:`_finish` computes them when nothing was begun: the same result whichever way.
        """
        if self.client is not None or self.backend.xp is not np or not is_sparse(self._input_sim[0]):
            return None
        labels, beta = self._labels.copy(), self._beta

        def work(check):
            with blas_threads(1):
                return align_to_clusters(self._inputs, labels, self._input_sim, self.settings, beta=beta,
                                         check=check, xp=np)

        self._speculative = _Speculation((labels, beta), work, self._cancel)
        return self._speculative

    def _sharpens(self) -> bool:
        """Whether an iteration whose forecast keeps the clusters is run (``sharpen``; ``"auto"``: every pair)."""
        from .neighbors import resolve_neighbors

        sharpen = self.settings.sharpen
        return resolve_neighbors(self.settings.neighbors, self.n) is None if sharpen == "auto" else bool(sharpen)

    def _advance(self):
        if self._stage == _Phase.SIMILARITY:
            return self._advance_similarity()
        if self._stage == _Phase.MEANS:
            return self._advance_means()
        if self._stage == _Phase.FINAL:
            sim = self._distances(self._features)
            dist = sim[0]
            self._history.append(host_view(dist, fill_missing=True))
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
        dist, _, _, probes = sim = self._distances(self._features)
        self._history.append(host_view(dist, fill_missing=True))
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
            plain = (f"Stopped after iteration {self._accepted} of {s.iterations}: it left the clusters as they "
                     f"were, so more would not change them. Details: " if self._accepted < s.iterations else "")
            self._notes.append(f"{plain}iteration {self._accepted} left the clusters as they were: stopped there "
                               f"(more iterations would only sharpen W and the means)")
        if settled or (prev is not None and max_abs_diff(w, prev) < s.converge_tol):
            self._stage = _Phase.FINISHING  # the clusters settled, or W stopped moving: converged
            return self._advance()
        if self._forecast_rejects(dist, w, probes, labels):
            self._stage = _Phase.FINISHING  # the guard would undo the iteration: not computed
            return self._advance()
        self._stage = _Phase.MEANS
        t0 = time.perf_counter()
        if s.method == "ia":
            self._mean_src, self._mean_state = start_means(self._features, w, sim, s, xp=self.backend.xp)
        self._timings["mean_s"] += time.perf_counter() - t0
        return self._snapshot(Stage.SIMILARITY)

    def _advance_means(self):
        """One step of the means (or the kernel average): a snapshot now and then, the iteration at its end."""
        s = self.settings
        t0 = time.perf_counter()
        self._mean_state, feats, done = mean_step(self._features, self._weights, self._mean_src, self._mean_state,
                                                  s, client=self.client, check=self._check_cancel,
                                                  xp=self.backend.xp)
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

    def _finish(self):
        """Cluster read-out and per-image alignment to the cluster means (:func:`~.run_steps.align_to_clusters`)."""
        t0 = time.perf_counter()
        d0, final = self._input_sim[0], self._sim[0]
        spec, self._speculative = self._speculative, None
        if spec is not None and spec.matches(self._labels, self._beta):
            try:
                means, tr, scores, mirrored = spec.result()  # begun during the forecast (_speculate)
            except BaseException:
                spec.cancel()  # e.g. Ctrl-C while waiting: the thread is stopped, not left running
                raise
            seconds = spec.seconds  # its own time, part of it overlapping the forecast's
        else:
            if spec is not None:
                spec.cancel()
            with blas_threads(1) if self.backend.xp is np and self.client is None else contextlib.nullcontext():
                # as the averages begun during a forecast run (_speculate): the same result either way
                means, tr, scores, mirrored = align_to_clusters(self._inputs, self._labels, self._input_sim,
                                                                self.settings, beta=self._beta, client=self.client,
                                                                check=self._check_cancel, xp=self.backend.xp)
            seconds = time.perf_counter() - t0
        self._timings["final_s"] = seconds  # the final class averages' own seconds (also in mean_s)
        self._timings["mean_s"] += self._timings["final_s"]
        self._result = RunResult(
            labels=self._labels, n_clusters=int(self._labels.max()) + 1, cluster_means=to_host(means, np.float32),
            image_transforms=tr, scores=scores, weights=host_view(self._weights),
            input_distances=host_view(d0, fill_missing=True) if is_sparse(d0) else d0,
            final_distances=host_view(final, fill_missing=True) if is_sparse(final) else final,
            history=list(self._history), features=to_host(self._features, np.float32), iterations=self._accepted,
            beta=self._beta, timings=dict(self._timings), k_choice=self._k_choice, blank=self.blank.copy(),
            notes=list(self._notes), mirrored=mirrored)
        self._stage = _Phase.DONE

    def _snapshot(self, stage):
        return make_snapshot(
            stage, iteration=self._accepted if stage == Stage.DONE else self._iteration,  # done: the iterations kept
            mean_state=self._mean_state, features=self._features, sim=self._sim, weights=self._weights,
            entry_transforms=lambda st: entry_transforms(st, n=self.n, n_sources=int(self._mean_src.shape[0]),
                                                         mirrored=self._sim[2]),
            labels=self._labels, n_steps=self.settings.mean_steps if self.settings.method == "ia" else 1,
            progress=min(1.0, self._done_steps() / self.total_steps), beta=self._beta, k_choice=self._k_choice)
