"""The damped Gauss-Newton (Levenberg-Marquardt) step of every SE(2) alignment.

Both stages that move transforms use it: the continuous refinement of the
invariant similarity (:func:`iastudio.core.similarity.refine_alignment`, a
Levenberg-Marquardt loop with an adaptive damping per pair) and the invariant
mean (:func:`iastudio.core.invariant_mean.invariant_mean_step`, one step per
entry and smoothing level with a fixed damping).  For residuals
``r = v o tau - target`` and their derivative ``J = d(v o tau) / d tau`` the
step is

    delta = -(J J^T + lambda diag(J J^T + eps))^-1 J r

computed for a whole batch of entries at once.  The products ``J J^T`` and
``J r`` are single-precision products (NumPy's ``einsum`` / BLAS, cuBLAS)
promoted to double precision before the 3 x 3 solve.
"""
from __future__ import annotations

import numpy as np

from .backend import array_module

__all__ = ["damped_step", "gauss_newton_metric", "gauss_newton_step"]

_EPS_DIAG = 1e-9  # keeps the damping positive where a parameter has no gradient
_EPS_RIDGE = 1e-12  # keeps the 3 x 3 system regular for an all-zero jacobian


def _flat_jacobian(jac):
    return jac.reshape(jac.shape[0], 3, -1)


def gauss_newton_metric(jac):
    """The Gauss-Newton metric ``J J^T`` of each entry.

    Parameters
    ----------
    jac : ndarray, shape (E, 3, H, W[, C])
        Derivative of each entry's warped image with respect to
        ``(theta, tx, ty)`` (:func:`iastudio.core.warp.warp` with
        ``gradient=True``), NumPy or CuPy.

    Returns
    -------
    ndarray, shape (E, 3, 3)
        Float64; a single-precision product (relative error ~1e-6), promoted.
    """
    xp = array_module(jac)
    j = _flat_jacobian(jac)
    if xp is np:  # NumPy's batched matmul of 3 x P blocks is 3x slower than einsum's fused loop
        return np.einsum("eip,ejp->eij", j, j).astype(np.float64)
    return xp.matmul(j, xp.transpose(j, (0, 2, 1))).astype(np.float64)


def gauss_newton_step(jac, resid, damping, *, metric=None):
    """One damped Gauss-Newton (Levenberg-Marquardt) step per entry.

    Minimises the linearised ``||r + J^T delta||^2`` with the damping
    ``lambda diag(J J^T)`` (scale-invariant in angle and shift).

    Parameters
    ----------
    jac : ndarray, shape (E, 3, H, W[, C])
        ``d(v o tau) / d tau`` at the current transforms.
    resid : ndarray, shape (E, H, W[, C])
        ``v o tau - target``, or a smoothed version of it (the invariant
        mean's ``g_sigma * g_sigma * r``).
    damping : float or ndarray, shape (E,)
        ``lambda``: one for all entries or one per entry.
    metric : ndarray, shape (E, 3, 3), optional
        :func:`gauss_newton_metric` of ``jac`` when already computed (several
        residuals with one jacobian).

    Returns
    -------
    delta : ndarray, shape (E, 3)
        Float64 step in ``(theta, tx, ty)``: ``tau + delta`` is the proposal.
    predicted : ndarray, shape (E,)
        Decrease of ``||resid||^2`` that the linear model predicts for the
        step (``>= 0``); small where the transform has converged.

    Examples
    --------
    A shift of one pixel is found in a few steps:

    >>> from iastudio.core.warp import warp
    >>> yy, xx = np.mgrid[:32, :32] - 15.5
    >>> img = np.exp(-(yy ** 2 + (xx - 3) ** 2) / 20.0)[None]
    >>> target = warp(img, np.array([[0.0, 1.0, 0.0]]))
    >>> tau = np.zeros((1, 3))
    >>> for _ in range(5):
    ...     out, jac = warp(img, tau, gradient=True)
    ...     tau = tau + gauss_newton_step(jac, out - target, 1e-3)[0]
    >>> bool(np.abs(tau - [0.0, 1.0, 0.0]).max() < 1e-3)
    True
    """
    xp = array_module(jac)
    if metric is None:
        metric = gauss_newton_metric(jac)
    j = _flat_jacobian(jac)
    g = xp.matmul(j, resid.reshape(resid.shape[0], -1, 1))[..., 0].astype(np.float64)  # J r
    return damped_step(metric, g, damping)


def damped_step(metric, g, damping):
    """:func:`gauss_newton_step` from the normal equations: ``J J^T`` and ``J r`` already summed.

    Parameters
    ----------
    metric : ndarray, shape (E, 3, 3)
        ``J J^T`` (:func:`gauss_newton_metric`, or
        :func:`iastudio.core.warp.warp_residuals` with ``moments=True``).
    g : ndarray, shape (E, 3)
        ``J r``.
    damping : float or ndarray, shape (E,)

    Returns
    -------
    delta, predicted : ndarray, shapes (E, 3) and (E,)
        As :func:`gauss_newton_step`.

    Examples
    --------
    Undamped, one step solves a quadratic: here ``r = J^T (tau - 1)`` is zero at ``tau = 1``.

    >>> m = np.array([[[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 4.0]]])
    >>> delta, predicted = damped_step(m, -m[0].sum(axis=1)[None], 0.0)
    >>> np.round(delta, 6).tolist(), np.round(predicted, 6).tolist()
    ([[1.0, 1.0, 1.0]], [7.0])
    """
    xp = array_module(metric)
    lam = xp.asarray(damping, dtype=np.float64)
    lam = lam.reshape(-1, 1, 1) if lam.ndim else lam
    eye = xp.eye(3)
    diag = xp.diagonal(metric, axis1=1, axis2=2)
    system = metric + lam * (eye * (diag[:, None, :] + _EPS_DIAG)) + _EPS_RIDGE * eye
    delta = -xp.linalg.solve(system, g[..., None])[..., 0]
    # ||r + J^T d||^2 = ||r||^2 + 2 g.d + d^T M d: the model's decrease is -(2 g.d + d^T M d)
    predicted = -(2.0 * (g * delta).sum(axis=1) + xp.einsum("ei,eij,ej->e", delta, metric, delta))
    return delta, xp.maximum(predicted, 0.0)
