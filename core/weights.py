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

__all__ = ["rbf_similarity", "column_normalize", "attention_weights", "auto_beta", "local_bandwidth", "class_share",
           "block_diagonality"]


SIGMA_FLOOR = 0.02  # distances below this (unit-norm images) are resampling noise, not differences


def local_bandwidth(distances: np.ndarray, *, neighbor: int = 2, floor: float = SIGMA_FLOOR) -> np.ndarray:
    """Per-image bandwidth ``s_i``: the distance to the ``neighbor``-th nearest other image.

    Parameters
    ----------
    distances : ndarray, shape (n, n)
    neighbor : int
    floor : float
        Smallest bandwidth: invariant distances below 0.02 on unit-norm
        images are resampling differences between copies of one thing, and
        a bandwidth on that scale would split exact copies from near-exact
        ones.

    Returns
    -------
    ndarray, shape (n,)
    """
    d = np.asarray(distances, dtype=float)
    n = d.shape[0]
    if n < 2:
        return np.ones(n)
    m = int(np.clip(neighbor, 1, n - 1))
    s = np.sort(d + np.diag(np.full(n, np.inf)), axis=1)[:, m - 1]
    return np.maximum(s, floor)


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
    distances : ndarray, shape (n, n)
    beta : float or "auto"
        A number: the paper's global RBF.  ``"auto"``: the local bandwidth.
    bandwidth : ndarray, shape (n,), optional
        ``s_i`` for ``beta="auto"`` (default: :func:`local_bandwidth` of
        ``distances``).
    neighbor : int
        Neighbour rank for the default bandwidth.

    Returns
    -------
    W : ndarray, shape (n, n)
    beta : float
    """
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
