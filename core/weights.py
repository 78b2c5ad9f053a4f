"""RBF similarities and the column-normalised weight matrix W (paper §2.2).

``gamma_ij = exp(-beta d_ij^2)`` and ``W_ij = gamma_ij / sum_k gamma_kj``.

``beta="auto"`` ties the kernel's bandwidth to near-neighbour distances:
``beta = 1 / max(median_i d_i,(k)^2, 0.02)``, where ``d_i,(k)`` is the
distance from image ``i`` to its ``k``-th nearest neighbour and
``k = max(1, ceil(sqrt(n) / 2))``.  A bandwidth on the scale of typical
near-neighbour distances keeps every column of W spread over the image's
neighbourhood instead of collapsing onto the single nearest image, so W does
not swing with tiny distance errors; the floor (``beta <= 50`` on unit-norm
images) keeps it from becoming hypersensitive when copies are exact.
"""
from __future__ import annotations

import numpy as np

__all__ = ["rbf_similarity", "column_normalize", "attention_weights", "auto_beta"]

_MIN_SCALE = 0.02


def auto_beta(distances: np.ndarray) -> float:
    """The ``beta="auto"`` rule (see the module docstring).

    Parameters
    ----------
    distances : ndarray, shape (n, n)

    Returns
    -------
    float
    """
    d = np.asarray(distances, dtype=float)
    n = d.shape[0]
    if n < 2:
        return 1.0 / _MIN_SCALE
    k = min(n - 1, max(1, int(np.ceil(np.sqrt(n) / 2))))
    d2 = np.sort(d**2 + np.diag(np.full(n, np.inf)), axis=1)[:, k - 1]
    return float(1.0 / max(float(np.median(d2)), _MIN_SCALE))


def rbf_similarity(distances: np.ndarray, beta: float) -> np.ndarray:
    """``gamma = exp(-beta d^2)``."""
    if not beta > 0:
        raise ValueError("beta must be > 0")
    return np.exp(-beta * np.asarray(distances, dtype=float) ** 2)


def column_normalize(gamma: np.ndarray) -> np.ndarray:
    """``W_ij = gamma_ij / sum_k gamma_kj`` (every column sums to 1)."""
    g = np.asarray(gamma, dtype=float)
    return g / np.maximum(g.sum(axis=0, keepdims=True), 1e-300)


def attention_weights(distances: np.ndarray, beta="auto") -> tuple[np.ndarray, float]:
    """The weight matrix W from distances, and the ``beta`` used.

    Parameters
    ----------
    distances : ndarray, shape (n, n)
    beta : float or "auto"

    Returns
    -------
    W : ndarray, shape (n, n)
    beta : float
    """
    b = auto_beta(distances) if beta == "auto" else float(beta)
    return column_normalize(rbf_similarity(distances, b)), b
