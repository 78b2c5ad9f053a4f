"""A 2-D map of images from their distances: classical MDS, kept steady by Procrustes.

:func:`classical_mds` places ``n`` points in the plane so that their Euclidean
distances approximate a distance matrix (Torgerson's classical scaling: the
top two eigenvectors of the double-centred squared distances).  The map of a
distance matrix is defined only up to a rotation, a reflection and a shift;
when a run redraws the map after every step, :func:`procrustes_align` turns
each new map onto the previous one (orthogonal Procrustes, SciPy), so points
move only as much as their distances changed.
"""
from __future__ import annotations

import numpy as np

__all__ = ["classical_mds", "procrustes_align"]


def procrustes_align(coords: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Rotate (or reflect) centred ``coords`` onto ``reference``.

    Parameters
    ----------
    coords : ndarray, shape (n, d)
        Centred points (mean zero), e.g. from :func:`classical_mds`.
    reference : ndarray, shape (n, d)
        The points to match; their mean is removed first.

    Returns
    -------
    ndarray, shape (n, d)
        ``coords @ R`` with the orthogonal ``R`` minimising
        ``||coords @ R - (reference - mean)||``; still centred.
    """
    from scipy.linalg import orthogonal_procrustes

    ref = np.asarray(reference, dtype=float)
    r, _ = orthogonal_procrustes(np.asarray(coords, dtype=float), ref - ref.mean(axis=0))
    return coords @ r


def classical_mds(distances: np.ndarray, *, previous: np.ndarray | None = None) -> np.ndarray:
    """2-D classical MDS of a distance matrix, aligned to a previous map.

    Parameters
    ----------
    distances : ndarray, shape (n, n)
        Symmetric, zero diagonal.
    previous : ndarray, shape (n, 2), optional
        The map drawn before; the new one is turned onto it
        (:func:`procrustes_align`).  Ignored when its shape differs.

    Returns
    -------
    ndarray, shape (n, 2)
        Centred coordinates whose Euclidean distances reproduce
        ``distances`` when they are those of points in a plane.  With fewer
        than two positive eigenvalues the missing axes are zero.

    Examples
    --------
    >>> pts = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0]])
    >>> d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    >>> xy = classical_mds(d)
    >>> bool(np.allclose(np.linalg.norm(xy[:, None] - xy[None], axis=-1), d))
    True
    """
    d2 = np.asarray(distances, dtype=float) ** 2
    n = d2.shape[0]
    j = np.eye(n) - 1.0 / n
    b = -0.5 * j @ d2 @ j
    vals, vecs = np.linalg.eigh(b)
    top = np.argsort(vals)[::-1][:2]
    coords = vecs[:, top] * np.sqrt(np.maximum(vals[top], 0.0))
    if coords.shape[1] < 2:
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
    if previous is not None and np.shape(previous) == coords.shape:
        coords = procrustes_align(coords, previous)
    return coords
