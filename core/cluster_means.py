"""Invariant means of clusters a person made: the class average of any set of images.

A run reads out its clusters and gives one invariant mean per cluster.  After edits (an image moved,
two clusters merged, one split) a cluster holds images no mean was computed for; averaging the
members' per-image means as they lie would smear them (they are in different poses).
:func:`cluster_invariant_means` computes the invariant mean of each such set from the images, as the
run does for its own clusters: every member aligned onto the cluster's medoid, then the invariant mean
with equal weights.
"""
from __future__ import annotations

import numpy as np
from scipy import sparse

from .invariant_mean import invariant_means
from .similarity import invariant_distances

__all__ = ["cluster_invariant_means", "cluster_key", "medoid"]


def cluster_key(members) -> bytes:
    """A hashable key of a set of image indices (sorted, as int64 bytes)."""
    return np.unique(np.asarray(members, dtype=np.int64)).tobytes()


def medoid(members, distances) -> int:
    """The member closest to the others: least squared distance (dense), most ties (a sparse graph).

    Parameters
    ----------
    members : array of int
        Image indices of the cluster.
    distances : ndarray or scipy.sparse matrix, shape (n, n), or None
        Invariant distances between the images (None: the first member).

    Returns
    -------
    int
        An element of ``members``.
    """
    members = np.asarray(members, dtype=int)
    if distances is None or members.size <= 2:
        return int(members[0])
    if sparse.issparse(distances):
        sub = sparse.csr_matrix(distances)[members][:, members]
        return int(members[np.argmax(np.diff(sub.indptr))])
    d = np.asarray(distances, dtype=float)[np.ix_(members, members)]
    return int(members[np.argmin(np.nan_to_num(d, nan=np.inf) ** 2 @ np.ones(members.size))])


def cluster_invariant_means(images, clusters, *, distances=None, angle_step: float = 5.0,
                            rotation_range: float | None = None, steps: int = 10, sigmas=(0.0, 1.0, 2.0),
                            rtol: float = 1e-3) -> np.ndarray:
    """The invariant mean of each set of images, started from its medoid (the run's own recipe).

    Parameters
    ----------
    images : ndarray, shape (n, H, W)
        The run's working images (unit norm, one canvas).
    clusters : sequence of array of int
        The member indices of each cluster (each non-empty).
    distances : ndarray or scipy.sparse matrix, shape (n, n), optional
        Invariant distances between the images, to pick each medoid (:func:`medoid`).
    angle_step, rotation_range : float
        The alignment search, as for the run (:func:`~iastudio.core.similarity.invariant_distances`).
    steps, sigmas, rtol
        The invariant mean's gradient steps (:func:`~iastudio.core.invariant_mean.invariant_means`).

    Returns
    -------
    ndarray, shape (len(clusters), H, W), float32
        Mean ``c`` is in the pose of cluster ``c``'s medoid.
    """
    images = np.asarray(images, dtype=np.float32)
    out = np.zeros((len(clusters), *images.shape[1:]), dtype=np.float32)
    for c, members in enumerate(clusters):
        members = np.asarray(members, dtype=int)
        if members.size == 0:
            raise ValueError(f"cluster {c} has no images")
        centre = medoid(members, distances)
        subset = images[members]
        if members.size == 1:
            out[c] = subset[0]
            continue
        others = np.flatnonzero(members != centre)
        target = int(np.flatnonzero(members == centre)[0])
        init = np.zeros((members.size, 1, 3))
        aligned = invariant_distances(subset, angle_step=angle_step, rotation_range=rotation_range,
                                      pairs=(others, np.full(others.size, target)))
        init[others, 0] = aligned.transform(others, np.full(others.size, target))
        weights = np.full((members.size, 1), 1.0 / members.size, dtype=np.float32)
        state = invariant_means(subset, weights, init, steps=steps, sigmas=sigmas, rtol=rtol)
        out[c] = np.asarray(state.means[0], dtype=np.float32)
    return out
