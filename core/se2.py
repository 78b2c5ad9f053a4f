"""SE(2) transforms ``tau(p) = A(theta) (p - c) + c + b`` about the canvas centre.

A transform is stored as an array ``(..., 3)`` of ``(theta, tx, ty)``: the angle
in radians and the translation in pixels along columns (``tx``) and rows
(``ty``).  Points are ``(row, col)`` pairs and ``c`` is the canvas centre
``((H - 1) / 2, (W - 1) / 2)``.  As in the paper, ``tau`` is the *sampling map*:
the warped image ``v o tau`` takes at pixel ``p`` the value of ``v`` at
``tau(p)`` (see :func:`iastudio.core.warp.warp`).  With

    A(theta) = [[cos theta,  sin theta],
                [-sin theta, cos theta]]

the composition and inverse stay in closed form:
``(tau1 o tau2)(p) = tau1(tau2(p))`` has angle ``theta1 + theta2`` and
translation ``A1 b2 + b1``.
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "apply_to_points",
    "compose",
    "from_degrees",
    "identity",
    "invert",
    "random_transforms",
    "rotation_matrix",
    "to_degrees",
    "wrap_angle",
]


def _xp(a):
    from .backend import array_module

    return array_module(a)


def identity(n: int | None = None, *, dtype=np.float64) -> np.ndarray:
    """The identity transform, shape ``(3,)`` or ``(n, 3)``."""
    shape = (3,) if n is None else (n, 3)
    return np.zeros(shape, dtype=dtype)


def wrap_angle(theta):
    """Wrap angles (radians) into ``[-pi, pi)``."""
    xp = _xp(theta)
    return (theta + xp.pi) % (2 * xp.pi) - xp.pi


def rotation_matrix(theta):
    """``A(theta)`` for an array of angles: shape ``theta.shape + (2, 2)``."""
    xp = _xp(theta)
    c, s = xp.cos(theta), xp.sin(theta)
    return xp.stack([xp.stack([c, s], -1), xp.stack([-s, c], -1)], -2)


def compose(first, second):
    """Parameters of ``first o second`` (apply ``second`` to points, then ``first``).

    Warping obeys ``warp(warp(v, first), second) == warp(v, compose(first, second))``.

    Parameters
    ----------
    first, second : array_like, shape (..., 3)
        Broadcastable transforms ``(theta, tx, ty)``.

    Returns
    -------
    ndarray, shape (..., 3)
    """
    xp = _xp(first)
    first = xp.asarray(first)
    second = xp.asarray(second)
    t1, tx1, ty1 = first[..., 0], first[..., 1], first[..., 2]
    t2, tx2, ty2 = second[..., 0], second[..., 1], second[..., 2]
    c, s = xp.cos(t1), xp.sin(t1)
    # b = (ty, tx) in (row, col); A1 @ b2
    row = c * ty2 + s * tx2 + ty1
    col = -s * ty2 + c * tx2 + tx1
    theta = wrap_angle(t1 + t2)
    return xp.stack(xp.broadcast_arrays(theta, col, row), -1)


def invert(params):
    """Parameters of the inverse transform: ``compose(p, invert(p))`` is the identity."""
    xp = _xp(params)
    params = xp.asarray(params)
    t, tx, ty = params[..., 0], params[..., 1], params[..., 2]
    c, s = xp.cos(t), xp.sin(t)
    # inverse translation: -A^T b
    row = -(c * ty - s * tx)
    col = -(s * ty + c * tx)
    return xp.stack([wrap_angle(-t), col, row], -1)


def mirror_conjugate(params):
    """``F o tau o F`` for the mirror ``F`` that flips the columns about the canvas centre.

    With ``flip(v) = v[:, ::-1]``: ``warp(flip(v), tau) == flip(warp(v, mirror_conjugate(tau)))``.
    The angle and the column shift change sign.
    """
    xp = _xp(params)
    params = xp.asarray(params)
    return xp.stack([wrap_angle(-params[..., 0]), -params[..., 1], params[..., 2]], -1)


def apply_to_points(params, points, center):
    """Map ``(row, col)`` points through ``tau``.

    Parameters
    ----------
    params : array_like, shape (3,)
    points : array_like, shape (..., 2)
        ``(row, col)`` coordinates.
    center : tuple of float
        The rotation centre ``(row, col)``.
    """
    params = np.asarray(params, dtype=float)
    pts = np.asarray(points, dtype=float) - np.asarray(center, dtype=float)
    a = rotation_matrix(params[0])
    out = pts @ a.T + np.asarray(center, dtype=float) + np.array([params[2], params[1]])
    return out


def random_transforms(
    n: int,
    *,
    rotation_range: float | tuple[float, float] = 180.0,
    shift_range: float | tuple[float, float] = 0.0,
    seed=None,
    shift_sign: str = "any",
) -> np.ndarray:
    """Draw ``n`` random transforms, uniform in angle and shift.

    Parameters
    ----------
    n : int
        How many transforms.
    rotation_range : float or (float, float)
        Degrees: ``R`` means uniform in ``[-R, R]``; a pair means ``[lo, hi]``.
    shift_range : float or (float, float)
        Pixels, per axis: ``S`` means uniform in ``[-S, S]``; a pair ``(lo, hi)``
        means a magnitude uniform in ``[lo, hi]`` with a random sign.
    seed : int, numpy.random.Generator or None
        Reproducibility: the same seed gives the same transforms.

    Returns
    -------
    ndarray, shape (n, 3)
        ``(theta [rad], tx [px], ty [px])`` per row.
    """
    rng = np.random.default_rng(seed)
    lo, hi = (-rotation_range, rotation_range) if np.isscalar(rotation_range) else rotation_range
    theta = np.deg2rad(rng.uniform(lo, hi, size=n))
    if np.isscalar(shift_range):
        shifts = rng.uniform(-shift_range, shift_range, size=(n, 2))
    else:
        mag = rng.uniform(shift_range[0], shift_range[1], size=(n, 2))
        shifts = mag * rng.choice([-1.0, 1.0], size=(n, 2))
    return np.column_stack([theta, shifts[:, 0], shifts[:, 1]])


def to_degrees(params) -> np.ndarray:
    """``(theta_deg, tx, ty)`` from ``(theta_rad, tx, ty)``."""
    out = np.array(params, dtype=float, copy=True)
    out[..., 0] = np.rad2deg(out[..., 0])
    return out


def from_degrees(params) -> np.ndarray:
    """``(theta_rad, tx, ty)`` from ``(theta_deg, tx, ty)``."""
    out = np.array(params, dtype=float, copy=True)
    out[..., 0] = np.deg2rad(out[..., 0])
    return out
