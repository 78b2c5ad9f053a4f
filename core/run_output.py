"""What a run gives: a :class:`Snapshot` after each step, and the :class:`RunResult` at its end.

:class:`~iastudio.core.attention.AttentionRun` builds them from its state
(:func:`make_snapshot`); both hold host arrays (NumPy), so the app, a project
file and the CLI read them without knowing the backend the run used.  A
pruned run's (sparse) distances and W are shown dense up to
``_DENSE_VIEW_MAX`` images (:func:`host_view`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from .backend import to_host
from .clustering import KChoice

__all__ = ["RESULT_ARRAYS", "RunResult", "Snapshot", "Stage", "host_view", "is_sparse", "make_snapshot",
           "rows_cols"]


class Stage(StrEnum):
    """What a :class:`Snapshot` follows: the step of the run just done.

    A ``StrEnum``: ``Stage.DONE == "done"`` holds and ``str(Stage.DONE)`` is
    ``"done"``, so saved projects and plain-string comparisons keep working.
    """

    SIMILARITY = "similarity"  #: invariant distances, W and the k read-out of the current features
    MEANS = "means"  #: some invariant-mean steps of the current iteration
    ITERATION = "iteration"  #: an iteration's means became the new features
    DONE = "done"  #: the run finished: clusters read out, images aligned to the cluster means


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
        Seconds: ``similarity_s``, ``mean_s``, ``forecast_s``, ``total_s``; ``final_s``, the final
        class averages and alignment (:func:`~iastudio.core.run_steps.align_to_clusters`, also in ``mean_s``):
        their own seconds, which on a pruned CPU run overlap the forecast's (they begin while it runs), so
        there the parts add up to more than ``total_s``.
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


def rows_cols(distances, keep):
    """The distances among the images ``keep`` (dense or sparse): rows and columns ``keep``."""
    return distances[keep][:, keep] if is_sparse(distances) else distances[np.ix_(keep, keep)]


def is_sparse(a) -> bool:
    """Whether ``a`` is a SciPy sparse matrix (a pruned run's distances and W)."""
    import scipy.sparse as sp

    return sp.issparse(a)


def host_view(a, *, fill_missing=False):
    """Host float32 copy for snapshots and results: dense unless sparse above ``_DENSE_VIEW_MAX`` images.

    Distances of pairs a pruned run did not align show as the largest computed
    distance (``fill_missing``); missing weights are zero.
    """
    if not is_sparse(a):
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


def max_abs_diff(a, b) -> float:
    """The largest absolute difference of two arrays, dense or sparse."""
    if is_sparse(a) or is_sparse(b):
        return float(abs(a - b).max())
    return float(np.abs(a - b).max())


def make_snapshot(stage, *, iteration: int, mean_state, entry_transforms, features, sim, weights, labels,
                  n_steps: int, progress: float, beta: float, k_choice) -> Snapshot:
    """A :class:`Snapshot` of a run's committed state, on the host.

    Parameters
    ----------
    stage : Stage
    iteration : int
        The iteration it belongs to (in the ``done`` snapshot: the iterations kept).
    mean_state : object or None
        The invariant means in progress (``.means``, ``.objective``, ``.step``), or None.
    entry_transforms : callable
        ``entry_transforms(mean_state)``: the means' ``(n, n, 3)`` entry transforms; called only up to
        ``_DENSE_TRANSFORMS_MAX`` images.
    features : array
        The current features.
    sim : tuple
        ``(distances, transforms, mirrored, probes)`` of the features W was computed on.
    weights : array or sparse matrix
        W.
    labels : ndarray (n,)
    n_steps : int
        Mean steps per iteration.
    progress : float
        Fraction of the run done.
    beta : float
    k_choice : KChoice or None

    Returns
    -------
    Snapshot
        With empty ``timings`` (the run fills them in).
    """
    st = mean_state
    n = labels.shape[0]
    if stage == Stage.MEANS or (stage == Stage.ITERATION and st is not None):
        means = st.means
        # the dense (n, n, 3) entry transforms only while they stay small
        transforms = entry_transforms(st) if n <= _DENSE_TRANSFORMS_MAX else None
        objective = [float(o.sum()) for o in st.objective]
        step = st.step
    else:
        means = features
        transforms = sim[1] if sim is not None and isinstance(sim[1], np.ndarray) else None
        objective = []
        step = 0
    return Snapshot(
        iteration=iteration,
        stage=stage,
        step=step,
        n_steps=n_steps,
        weights=host_view(weights),
        means=to_host(means, np.float32),
        distances=host_view(sim[0], fill_missing=True),
        transforms=None if transforms is None else transforms.astype(np.float32),
        labels=labels.copy(),
        objective=objective,
        timings={},
        progress=progress,
        beta=beta,
        k_choice=k_choice,
    )
