"""Canonical pose for display: each image turned upright and centred.

For showing means side by side only; no computation reads the posed images.
The pose comes from the image's intensity moments (negative values count as 0):

* the centre of mass moves to the canvas centre;
* the principal axis (the eigenvector of the largest eigenvalue of the
  intensity's second central moments) turns vertical (along the rows);
* of the two upright poses (180 degrees apart), the one whose heavier half
  (more intensity on that side of the centre of mass, along the axis) is up
  (at the smaller rows) wins.

A nearly round shape (second moments within ``isotropy`` of each other) has no
principal axis; it is only centred.  Transforms follow :mod:`iastudio.core.se2`
(``(theta, tx, ty)``, the sampling map about the canvas centre).
"""
from __future__ import annotations

import numpy as np

from .warp import warp

__all__ = ["canonical_pose", "canonical_transforms", "intensity_moments"]


def intensity_moments(images) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mass, centre of mass and second central moments of each image.

    Parameters
    ----------
    images : ndarray, shape (n, H, W) or (n, H, W, C)
        Channels are summed; negative values count as 0.

    Returns
    -------
    mass : ndarray (n,)
    centroid : ndarray (n, 2)
        ``(row, col)`` of the centre of mass (the canvas centre when the mass is 0).
    cov : ndarray (n, 2, 2)
        Intensity-weighted covariance of ``(row, col)``.
    """
    a = np.asarray(images)
    if a.ndim == 4:
        a = a.sum(axis=3)
    if a.ndim != 3:
        raise ValueError(f"images must be (n, H, W) or (n, H, W, C), got shape {np.shape(images)}")
    a = np.clip(a, 0.0, None)
    _, h, w = a.shape
    rows = np.arange(h, dtype=np.float64)
    cols = np.arange(w, dtype=np.float64)
    # first and second moments from the row and column marginals, the mixed one from one contraction
    row_mass = a.sum(axis=2, dtype=np.float64)
    col_mass = a.sum(axis=1, dtype=np.float64)
    mass = row_mass.sum(axis=1)
    safe = np.where(mass > 0, mass, 1.0)
    r0 = np.where(mass > 0, row_mass @ rows / safe, (h - 1) / 2.0)
    c0 = np.where(mass > 0, col_mass @ cols / safe, (w - 1) / 2.0)
    crr = np.maximum(row_mass @ rows**2 / safe - r0**2, 0.0)
    ccc = np.maximum(col_mass @ cols**2 / safe - c0**2, 0.0)
    crc = np.einsum("nhw,h,w->n", a, rows.astype(a.dtype), cols.astype(a.dtype), optimize=True) / safe - r0 * c0
    crr, ccc, crc = (np.where(mass > 0, v, 0.0) for v in (crr, ccc, crc))
    cov = np.stack([np.stack([crr, crc], -1), np.stack([crc, ccc], -1)], -2)
    return mass, np.stack([r0, c0], -1), cov


def _heavier_half_signs(flat: np.ndarray, centroid: np.ndarray, axis: np.ndarray) -> np.ndarray:
    """+1 per image when less intensity lies on the ``+axis`` side of its centroid than on the other, else -1."""
    _, h, w = flat.shape
    proj = ((np.arange(h)[None, :, None] - centroid[:, 0, None, None]) * axis[:, 0, None, None]
            + (np.arange(w)[None, None, :] - centroid[:, 1, None, None]) * axis[:, 1, None, None])
    ahead = (flat * (proj > 0)).sum(axis=(1, 2))
    behind = (flat * (proj < 0)).sum(axis=(1, 2))
    return np.where(ahead <= behind, 1.0, -1.0)


def canonical_transforms(images, *, isotropy: float = 0.02) -> np.ndarray:
    """The SE(2) transform that shows each image upright and centred.

    Parameters
    ----------
    images : ndarray, shape (n, H, W) or (n, H, W, C)
    isotropy : float
        A shape whose two second moments differ by less than this fraction of
        their sum is treated as round: centred, not turned.

    Returns
    -------
    ndarray, shape (n, 3)
        ``(theta, tx, ty)`` per image, for :func:`iastudio.core.warp.warp`:
        the output's row axis (downwards) samples the image along its principal
        axis, pointing from the heavier half to the lighter one, and the output's
        centre samples the centre of mass.
    """
    a = np.asarray(images, dtype=np.float64)
    mass, centroid, cov = intensity_moments(a)
    flat = np.clip(a.sum(axis=3) if a.ndim == 4 else a, 0.0, None)
    h, w = flat.shape[1:3]
    centre = np.array([(h - 1) / 2.0, (w - 1) / 2.0])
    out = np.zeros((len(flat), 3))
    if len(flat) == 0:
        return out
    vals, vecs = np.linalg.eigh(cov)
    axis = vecs[:, :, 1]  # (row, col) of each long axis
    axis = axis * _heavier_half_signs(flat, centroid, axis)[:, None]
    # A(theta) (1, 0) = (cos theta, -sin theta) must be the axis
    theta = np.arctan2(-axis[:, 1], axis[:, 0])
    elongated = vals[:, 1] - vals[:, 0] >= isotropy * np.maximum(vals.sum(axis=1), 1e-12)
    shift = centroid - centre
    out[:, 0] = np.where(elongated, theta, 0.0)
    out[:, 1], out[:, 2] = shift[:, 1], shift[:, 0]
    out[mass <= 0] = 0.0
    return out


def canonical_pose(images, *, isotropy: float = 0.02) -> np.ndarray:
    """Each image upright and centred, for display (see the module notes).

    Parameters
    ----------
    images : ndarray, shape (n, H, W) or (n, H, W, C)
    isotropy : float
        See :func:`canonical_transforms`.

    Returns
    -------
    ndarray, same shape as ``images``
        The images warped by :func:`canonical_transforms` (Keys interpolation,
        0 outside the canvas).  The input is not changed.

    Examples
    --------
    >>> import numpy as np
    >>> img = np.zeros((1, 32, 32)); img[0, 14:18, 4:28] = 1.0   # a horizontal bar
    >>> upright = canonical_pose(img)
    >>> bool(upright[0, 4:28, 14:18].mean() > 0.9)                 # now vertical
    True
    """
    a = np.asarray(images)
    if len(a) == 0:
        return np.array(a, dtype=np.float64 if a.dtype.kind != "f" else a.dtype, copy=True)
    return warp(a, canonical_transforms(a, isotropy=isotropy), parallel=False)  # display work: this thread only
