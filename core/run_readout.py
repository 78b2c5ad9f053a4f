"""A run's read-out of clusters, and its guard: does an iteration fit the input images better?

:class:`~iastudio.core.attention.AttentionRun` reads clusters from the
distances of its features after every similarity stage (:func:`read_labels`),
and, with its guard on, asks of each iteration whether the clusters it made
fit the *input* invariant distances clearly better than the previous ones
(:func:`guard_verdict`, by the silhouette) -- before running it, from a
forecast of the distances its means would have (:func:`forecast_verdict`), and
after.  The run decides what to keep; these functions only answer.
"""
from __future__ import annotations

import numpy as np

from .backend import to_host
from .clustering import KChoice, read_clusters, silhouette
from .run_output import rows_cols

__all__ = ["GUARD_GAIN", "forecast_verdict", "guard_note", "guard_verdict", "read_labels", "same_partition",
           "separation", "settle_note"]

GUARD_GAIN = 0.02
"""A changed partition must raise the silhouette on the input distances by this much to be kept."""


def read_labels(distances, *, blank, clusters, readout: str = "spectral", probes=None, features=None, xp=np):
    """Labels and the k choice; blank images go to a cluster of their own (the last).

    Parameters
    ----------
    distances : ndarray or sparse matrix (n, n)
        Manifold distances of the features.
    blank : ndarray of bool (n,)
        Images with no content.
    clusters : int or "auto"
    readout : {"spectral", "collapse"}
        Spectral clustering (:func:`iastudio.core.clustering.read_clusters`) or the images whose features
        collapsed together (:mod:`iastudio.core.collapse`).
    probes : sparse matrix, optional
        A pruned run's sample of distances off its graph (for the silhouette).
    features : array (n, H, W[, C]), optional
        The features (the collapse read-out's scale); on ``xp``.
    xp : module
        The array module of ``features``.

    Returns
    -------
    labels : ndarray of int (n,)
    choice : KChoice
    """
    keep = np.flatnonzero(~blank)
    labels = np.zeros(blank.shape[0], dtype=int)
    if keep.size == 0:
        return labels, KChoice(1, 1, 1.0, "trivial", [(1, 1.0)])
    k = clusters
    if k != "auto" and blank.any():
        k = min(int(k), keep.size)
    if readout == "collapse":
        sub, choice = _collapsed(rows_cols(distances, keep), features[xp.asarray(keep)], xp)
    else:
        sub, choice = read_clusters(rows_cols(distances, keep), k=k,
                                    probes=None if probes is None else rows_cols(probes, keep))
    labels[keep] = sub
    if blank.any():
        labels[blank] = sub.max() + 1
    return labels, choice


def _collapsed(distances, feats, xp):
    """The collapse read-out (:mod:`iastudio.core.collapse`) of the features ``feats``."""
    from .collapse import collapsed_clusters

    scale = float(to_host(xp.sqrt(xp.mean(xp.sum(feats.reshape(feats.shape[0], -1).astype(np.float64) ** 2,
                                                        axis=1)))))
    sub = collapsed_clusters(distances, scale=max(scale, 1e-12))
    k = int(sub.max()) + 1
    return sub, KChoice(k, scale=0, confidence=1.0, method="collapse", candidates=[(k, 1.0)])


def separation(distances, labels, *, blank, probes=None) -> float | None:
    """Silhouette of a partition of the non-blank images.

    Parameters
    ----------
    distances : ndarray or sparse matrix (n, n)
    labels : ndarray of int (n,)
    blank : ndarray of bool (n,)
        Images left out.
    probes : sparse matrix, optional
        A pruned run's sample of distances off its graph.

    Returns
    -------
    float or None
        None when undefined (one cluster, or every image its own).
    """
    keep = np.flatnonzero(~blank)
    return silhouette(rows_cols(distances, keep), labels[keep],
                      probes=None if probes is None else rows_cols(probes, keep))


def same_partition(a, b) -> bool:
    """Whether two labellings partition the images alike (whatever the cluster numbers).

    Parameters
    ----------
    a, b : ndarray of int (n,)

    Returns
    -------
    bool
    """
    from sklearn.metrics import adjusted_rand_score

    return adjusted_rand_score(a, b) == 1.0


def guard_verdict(before_labels, labels, *, inputs, blank) -> tuple[float | None, float | None] | None:
    """Whether ``labels`` may replace ``before_labels``: None when they may, else the two silhouettes.

    An iteration may sharpen the clusters (the same partition) or change
    them; a change is kept only when the new clusters fit the *input*
    invariant distances -- the images as they are -- clearly better, by
    their silhouette (at least :data:`GUARD_GAIN` more).

    Parameters
    ----------
    before_labels, labels : ndarray of int (n,)
        The clusters before and after.
    inputs : tuple
        The inputs' ``(distances, transforms, mirrored, probes)``.
    blank : ndarray of bool (n,)

    Returns
    -------
    tuple of (float or None, float or None), or None
        ``(before, after)``, the silhouettes on the input distances, when the change is refused.
    """
    if same_partition(before_labels, labels):
        return None  # the same clusters: the iteration only sharpened them
    before, after = _silhouettes(before_labels, labels, inputs=inputs, blank=blank)
    return None if _clearly_better(before, after) else (before, after)


def _silhouettes(before_labels, labels, *, inputs, blank):
    """The silhouettes of two partitions on the input distances (a pruned run's probes included)."""
    d0, probes = inputs[0], inputs[3]
    return (separation(d0, before_labels, blank=blank, probes=probes),
            separation(d0, labels, blank=blank, probes=probes))


def _clearly_better(before, after) -> bool:
    return before is None or (after is not None and after >= before + GUARD_GAIN)


def forecast_verdict(distances, weights, labels, *, read, inputs, blank, probes=None, mass: float = 0.999):
    """The guard's question put to a forecast of the next iteration (no warp).

    The next iteration's distances are forecast from ``distances`` and W
    (:func:`iastudio.core.forecast.forecast_mean_distances`) and read out; the
    forecast clusters meet the test of :func:`guard_verdict`.

    Parameters
    ----------
    distances : ndarray or sparse matrix (n, n)
        The current distances.
    weights : ndarray or sparse matrix (n, n)
        The current W.
    labels : ndarray of int (n,)
        The current clusters.
    read : callable
        ``read(distances, probes) -> (labels, KChoice)``: the run's read-out.
    inputs : tuple
        The inputs' ``(distances, transforms, mirrored, probes)``.
    blank : ndarray of bool (n,)
    probes : sparse matrix, optional
        A pruned run's sample of distances off its graph.
    mass : float
        The share of each column of W the means keep.

    Returns
    -------
    seen : dict
        What the forecast saw: ``same`` (the clusters stay), else also ``before`` and ``after``.
    refused : tuple of (float, float or None), or None
        ``(before, after)`` when the guard would undo the iteration.
    """
    from .forecast import forecast_mean_distances

    d1, p1 = forecast_mean_distances(distances, weights, probes=probes, mass=mass)
    new, _ = read(d1, p1)
    if same_partition(labels, new):
        return {"same": True}, None  # forecast: the clusters stay; the iteration sharpens them
    before, after = _silhouettes(labels, new, inputs=inputs, blank=blank)
    seen = {"same": False, "before": before, "after": after}
    return seen, None if _clearly_better(before, after) else (before, after)


def _stopped(kept: int, asked: int | None) -> str:
    """"Stopped after iteration 1 of 3" (or "before the first iteration"): where the run ended, plainly."""
    of = f" of {asked}" if asked else ""
    return f"Stopped before the first iteration{of}" if kept < 1 else f"Stopped after iteration {kept}{of}"


def guard_note(iteration: int, before, after, *, forecast: bool = False, asked: int | None = None) -> str:
    """What the run says when the guard stops it at ``iteration`` (its clusters refused).

    A plain first sentence (where the run stopped, and why, for anyone), then the details (the
    silhouettes) for whoever checks the guard.

    Parameters
    ----------
    iteration : int
        The iteration refused (1: the first).
    before, after : float or None
        The silhouettes on the input distances (:func:`guard_verdict`, :func:`forecast_verdict`).
    forecast : bool
        The iteration was refused by its forecast, and not run.
    asked : int, optional
        The iterations the run was asked for ("Stopped after iteration 1 of 3").

    Returns
    -------
    str

    Examples
    --------
    >>> guard_note(2, 0.488, 0.487, forecast=True, asked=3).split(": another")[0]
    'Stopped after iteration 1 of 3'
    """
    kept = "the input images" if iteration == 1 else f"iteration {iteration - 1}"
    change = (f"silhouette on the input distances {_text(before)} -> {_text(after)}); kept the clusters of {kept} "
              "and stopped")
    if forecast:
        plain = (f"{_stopped(iteration - 1, asked)}: "
                 f"{'another iteration' if iteration > 1 else 'an iteration'} would move images between clusters "
                 f"without making them fit better")
        return (f"{plain}. Details: iteration {iteration} not run: its forecast (the distances of its means estimated "
                f"from the current distances and W) moves images between clusters without fitting the input images "
                f"better ({change}")
    where = (_stopped(iteration - 1, asked) if iteration > 1 else
             f"Kept the clusters the run started from{f' (0 of {asked} iterations)' if asked else ''}")
    plain = (f"{where}: iteration {iteration} moved images between clusters without making them fit better, so it "
             f"was undone")
    return (f"{plain}. Details: iteration {iteration} moved images between clusters without fitting the input "
            f"images better ({change}")


def settle_note(iteration: int, asked: int | None = None) -> str:
    """What the run says when it stops before ``iteration`` because its forecast keeps the clusters.

    Parameters
    ----------
    iteration : int
        The iteration not run (1: the first).
    asked : int, optional
        The iterations the run was asked for.

    Returns
    -------
    str
    """
    return (f"{_stopped(iteration - 1, asked)}: another iteration would leave the clusters as they are. Details: "
            f"iteration {iteration} not run: its forecast (the distances of its means estimated from the current "
            f"distances and W) leaves the clusters as they are, so it would only sharpen W and the means; stopped "
            f"there (sharpen=True runs it)")


def _text(value) -> str:
    return "not defined (one cluster, or each image alone)" if value is None else f"{value:.3f}"
