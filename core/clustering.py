"""Reading clusters out of the converged state.

The affinity is ``A = exp(-beta d^2)`` on the manifold distances of the last
state, symmetrised.  ``k="auto"`` takes the largest *eigengap* of the
normalised affinity ``D^-1/2 A D^-1/2``: when Invariant Attention has
converged, images of one cluster sit on (nearly) one manifold, A is
block-diagonal and exactly ``k`` eigenvalues are close to 1.  Labels come from
scikit-learn's spectral clustering on A (deterministic ``cluster_qr``
assignment) and are numbered in order of first appearance.
"""
from __future__ import annotations

import numpy as np

__all__ = ["eigengap_k", "cluster_labels", "relabel_by_appearance", "grouping_order"]


def _normalised(affinity):
    a = 0.5 * (affinity + affinity.T)
    d = a.sum(axis=1)
    s = 1.0 / np.sqrt(np.maximum(d, 1e-300))
    return a * s[:, None] * s[None, :]


def eigengap_k(affinity: np.ndarray, *, max_k: int | None = None) -> int:
    """Number of clusters from the largest gap in the normalised affinity's spectrum.

    Parameters
    ----------
    affinity : ndarray, shape (n, n)
        Nonnegative similarities.
    max_k : int, optional
        Largest k considered: 20 by default, never more than ``n - 1``.

    Returns
    -------
    int
    """
    n = affinity.shape[0]
    if n == 1:
        return 1
    if n == 2:  # no spectrum to speak of: together when they are at least half as alike as themselves
        return 1 if affinity[0, 1] >= 0.5 * np.sqrt(affinity[0, 0] * affinity[1, 1]) else 2
    ev = np.sort(np.linalg.eigvalsh(_normalised(affinity)))[::-1]
    kmax = min(n - 1, max_k or 20)
    gaps = ev[:kmax] - ev[1:kmax + 1]
    return int(np.argmax(gaps)) + 1


def relabel_by_appearance(labels) -> np.ndarray:
    """Renumber labels 0, 1, ... in order of first appearance."""
    labels = np.asarray(labels)
    _, first = np.unique(labels, return_index=True)
    order = labels[np.sort(first)]
    mapping = {lab: i for i, lab in enumerate(order)}
    return np.array([mapping[lab] for lab in labels], dtype=int)


def cluster_labels(affinity: np.ndarray, *, k="auto") -> np.ndarray:
    """Cluster labels from an affinity matrix.

    Parameters
    ----------
    affinity : ndarray, shape (n, n)
    k : int or "auto"

    Returns
    -------
    ndarray of int, shape (n,)
    """
    from sklearn.cluster import SpectralClustering

    n = affinity.shape[0]
    kk = eigengap_k(affinity) if k == "auto" else int(k)
    if not 1 <= kk <= n:
        raise ValueError(f"k must be between 1 and {n}")
    if kk == 1:
        return np.zeros(n, dtype=int)
    if kk == n:
        return np.arange(n)
    a = 0.5 * (affinity + affinity.T)
    model = SpectralClustering(n_clusters=kk, affinity="precomputed", assign_labels="cluster_qr", random_state=0)
    return relabel_by_appearance(model.fit_predict(a + 1e-12))


def grouping_order(labels) -> np.ndarray:
    """Indices that put images of the same cluster next to each other (stable)."""
    return np.argsort(np.asarray(labels), kind="stable")
