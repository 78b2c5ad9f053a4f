"""RBF similarities and the column-normalised weight matrix W (paper §2.2).

With an explicit ``beta`` this is the paper's rule: ``gamma_ij = exp(-beta d_ij^2)``
and ``W_ij = gamma_ij / sum_k gamma_kj``.

``beta="auto"`` uses a *local* bandwidth instead (self-tuning, Zelnik-Manor &
Perona): ``gamma_ij = exp(-d_ij^2 / (s_i s_j))`` where ``s_i`` is the distance
from image ``i`` to its ``m``-th nearest neighbour (``m`` = 1..3, the neighbour
scale at which the input distances show their clearest cluster structure,
see :mod:`iastudio.core.clustering`).  Each image's column of W then spreads over its
own neighbourhood, however tight or loose its class is, and no global cap is
needed: a class of 3 images or two classes that differ by a small detail keep
their own bandwidth; ``s_i`` is never below 0.02 (resampling noise between copies
of one image).  :class:`~iastudio.core.attention.AttentionRun` computes ``s``
once, on the input distances, and keeps it for every iteration.  The reported
``beta`` of an automatic run is the equivalent global value
``1 / median(s_i^2)``.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = [
    "attention_weights",
    "auto_beta",
    "block_diagonality",
    "class_share",
    "column_normalize",
    "graph_affinity",
    "local_bandwidth",
    "rbf_similarity",
]


SIGMA_FLOOR = 0.02  # distances below this (unit-norm images) are resampling noise, not differences


def local_bandwidth(distances: np.ndarray, *, neighbor: int = 2, floor: float = SIGMA_FLOOR) -> np.ndarray:
    """Per-image bandwidth ``s_i``: the distance to the ``neighbor``-th nearest other image.

    Parameters
    ----------
    distances : ndarray or scipy.sparse matrix, shape (n, n)
        Dense distances, or a pruned run's K-neighbour graph (the stored
        entries of row ``i`` are the distances to its candidates, the nearest
        images; a stored zero is a real zero, the diagonal is not stored).
    neighbor : int
    floor : float
        Smallest bandwidth: invariant distances below 0.02 on unit-norm
        images are resampling differences between copies of one thing, and
        a bandwidth on that scale would split exact copies from near-exact
        ones.

    Returns
    -------
    ndarray, shape (n,)
        An image of a graph with fewer than ``neighbor`` neighbours uses its
        farthest one (none: the floor).
    """
    if sp.issparse(distances):
        g = sp.csr_matrix(distances)
        s = np.full(g.shape[0], floor)
        for i in range(g.shape[0]):
            row = np.sort(g.data[g.indptr[i]:g.indptr[i + 1]])
            if row.size:
                s[i] = row[min(max(int(neighbor), 1), row.size) - 1]
        return np.maximum(s, floor)
    d = np.asarray(distances, dtype=float)
    n = d.shape[0]
    if n < 2:
        return np.ones(n)
    m = int(np.clip(neighbor, 1, n - 1))
    s = np.sort(d + np.diag(np.full(n, np.inf)), axis=1)[:, m - 1]
    return np.maximum(s, floor)


def graph_affinity(distances, *, beta: float | None = None, bandwidth=None):
    """The RBF affinity on a sparse graph's edges, with ones on the diagonal.

    ``exp(-beta d_ij^2)`` with a global ``beta``, or ``exp(-d_ij^2 / (s_i s_j))``
    with a per-image ``bandwidth`` ``s``; pairs off the graph have affinity 0.

    Parameters
    ----------
    distances : scipy.sparse matrix, shape (n, n)
        Symmetric distances on the edges (no diagonal; a stored zero is a
        real zero distance).
    beta : float, optional
    bandwidth : ndarray, shape (n,), optional

    Returns
    -------
    scipy.sparse.csr_matrix, shape (n, n)
    """
    d = sp.coo_matrix(distances)
    n = d.shape[0]
    d2 = d.data.astype(float) ** 2
    if bandwidth is not None:
        s = np.asarray(bandwidth, dtype=float)
        edge = np.exp(-d2 / (s[d.row] * s[d.col]))
    else:
        edge = np.exp(-float(beta) * d2)
    data = np.concatenate([edge, np.ones(n)])
    rows = np.concatenate([d.row, np.arange(n)])
    cols = np.concatenate([d.col, np.arange(n)])
    return sp.csr_matrix((data, (rows, cols)), shape=(n, n))


def auto_beta(distances: np.ndarray, *, neighbor: int = 2) -> float:
    """The global ``beta`` equivalent to the local bandwidth: ``1 / median(s_i^2)``.

    Parameters
    ----------
    distances : ndarray, shape (n, n)
    neighbor : int

    Returns
    -------
    float
    """
    s = local_bandwidth(distances, neighbor=neighbor)
    return float(1.0 / float(np.median(s**2)))


def rbf_similarity(distances: np.ndarray, beta: float) -> np.ndarray:
    """``gamma = exp(-beta d^2)``."""
    if not (beta > 0 and np.isfinite(beta)):
        raise ValueError("beta must be a finite number > 0")
    return np.exp(-beta * np.asarray(distances, dtype=float) ** 2)


def column_normalize(gamma: np.ndarray) -> np.ndarray:
    """``W_ij = gamma_ij / sum_k gamma_kj`` (every column sums to 1)."""
    g = np.asarray(gamma, dtype=float)
    return g / np.maximum(g.sum(axis=0, keepdims=True), 1e-300)


def attention_weights(distances: np.ndarray, beta="auto", *, bandwidth=None,
                      neighbor: int = 2) -> tuple[np.ndarray, float]:
    """The weight matrix W from distances, and the (equivalent) ``beta``.

    Parameters
    ----------
    distances : ndarray or scipy.sparse matrix, shape (n, n)
        A sparse K-neighbour graph gives a sparse W (0 off the graph).
    beta : float or "auto"
        A number: the paper's global RBF.  ``"auto"``: the local bandwidth.
    bandwidth : ndarray, shape (n,), optional
        ``s_i`` for ``beta="auto"`` (default: :func:`local_bandwidth` of
        ``distances``).
    neighbor : int
        Neighbour rank for the default bandwidth.

    Returns
    -------
    W : ndarray or scipy.sparse.csr_matrix, shape (n, n)
    beta : float
    """
    if sp.issparse(distances):
        if beta == "auto":
            s = local_bandwidth(distances, neighbor=neighbor) if bandwidth is None else np.asarray(bandwidth)
            gamma, b = graph_affinity(distances, bandwidth=s), float(1.0 / float(np.median(s**2)))
        else:
            b = float(beta)
            if not (b > 0 and np.isfinite(b)):
                raise ValueError("beta must be a finite number > 0")
            gamma = graph_affinity(distances, beta=b)
        colsum = np.asarray(gamma.sum(axis=0)).ravel()
        return (gamma @ sp.diags(1.0 / np.maximum(colsum, 1e-300))).tocsr(), b
    d = np.asarray(distances, dtype=float)
    if beta != "auto":
        b = float(beta)
        return column_normalize(rbf_similarity(d, b)), b
    s = local_bandwidth(d, neighbor=neighbor) if bandwidth is None else np.asarray(bandwidth, dtype=float)
    gamma = np.exp(-(d**2) / np.outer(s, s))
    return column_normalize(gamma), float(1.0 / float(np.median(s**2)))


def _dense(weights) -> np.ndarray:
    return np.asarray(weights.toarray() if hasattr(weights, "toarray") else weights, dtype=float)


def class_share(weights, labels) -> float:
    """The share of W's weight that stays inside the classes (the diagonal included).

    Parameters
    ----------
    weights : ndarray or scipy.sparse matrix, shape (n, n)
    labels : array_like, shape (n,)
        The class of each image (any hashable values).

    Returns
    -------
    float
        ``sum of W_ij over same-class pairs / sum of W``: 1 when no weight
        crosses between classes.
    """
    w = _dense(weights)
    lab = np.unique(np.asarray(labels), return_inverse=True)[1]
    return float((w * (lab[:, None] == lab[None, :])).sum() / w.sum())


def block_diagonality(weights, labels) -> float:
    """How close W is to the block-diagonal W of the classes: the cosine between the two.

    The ideal W gives each column equal weight ``1 / n_c`` on the ``n_c``
    images of its class and none elsewhere.  Unlike :func:`class_share`, this
    also tells a W that only trusts each image itself (the identity:
    ``sqrt(k / n)`` for ``k`` equal classes of ``n`` images) from one whose
    blocks are filled in (1).

    Parameters
    ----------
    weights : ndarray or scipy.sparse matrix, shape (n, n)
    labels : array_like, shape (n,)

    Returns
    -------
    float
        In [0, 1]; 1 exactly for the ideal W.
    """
    w = _dense(weights)
    lab = np.unique(np.asarray(labels), return_inverse=True)[1]
    same = (lab[:, None] == lab[None, :]).astype(float)
    ideal = same / same.sum(axis=0, keepdims=True)
    return float((w * ideal).sum() / max(np.linalg.norm(w) * np.linalg.norm(ideal), 1e-300))
