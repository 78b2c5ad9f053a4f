"""The paper's read-out: images whose features collapsed together form a cluster.

Invariant Attention replaces every image by its invariant mean, iteration
after iteration; the paper's Theorem 4.1 says the manifolds of one class draw
together until they coincide.  The clusters are then the groups of images
whose final features are the same up to a transform: the connected components
of the graph joining every pair whose invariant distance ``d(S_i, S_j)`` is
below a small tolerance.  The tolerance is relative to the features' size (the
root mean square of their norms), so it means the same on unit-norm images
and on the paper's intensity scale.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

__all__ = ["COLLAPSE_TOL", "collapsed_clusters"]

COLLAPSE_TOL = 0.1
"""Pairs closer than this fraction of the features' RMS norm have collapsed together.

Five times the resampling differences between copies of one image (about
0.02 on unit-norm images) and a fifth of the distance at which two images are
"not alike" (:data:`iastudio.core.clustering.DISTINCT`, 0.5).
"""


def collapsed_clusters(distances, *, scale: float = 1.0, tol: float = COLLAPSE_TOL) -> np.ndarray:
    """Clusters of images whose features collapsed together.

    Parameters
    ----------
    distances : ndarray or scipy.sparse matrix, shape (n, n)
        Invariant distances of the final features (a sparse matrix: its stored
        entries; pairs not stored are not joined).
    scale : float
        The features' size, e.g. the root mean square of their norms (1 for
        unit-norm images).
    tol : float
        Pairs with ``d_ij <= tol * scale`` are joined.

    Returns
    -------
    ndarray of int, shape (n,)
        Labels ``0 .. k-1``, numbered by the first image of each cluster.

    Examples
    --------
    >>> d = np.array([[0, 0.01, 1], [0.01, 0, 1], [1, 1, 0]])
    >>> collapsed_clusters(d)
    array([0, 0, 1])
    """
    if not (tol >= 0 and np.isfinite(tol)) or not (scale > 0 and np.isfinite(scale)):
        raise ValueError("tol must be >= 0 and scale > 0")
    limit = tol * scale
    if sp.issparse(distances):
        d = sp.coo_matrix(distances)
        keep = d.data <= limit
        graph = sp.coo_matrix((np.ones(int(keep.sum())), (d.row[keep], d.col[keep])), shape=d.shape)
    else:
        d = np.asarray(distances, dtype=float)
        graph = sp.csr_matrix(d <= limit)
    _, labels = connected_components(graph, directed=False)
    _, first = np.unique(labels, return_index=True)
    order = np.argsort(np.argsort(first))  # clusters numbered by their first image
    return order[labels]
