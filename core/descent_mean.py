"""The invariant mean by Algorithm 1 of the paper as written: fixed-step gradient descent.

The paper preset's means stage (:mod:`iastudio.core.presets`).  For every
column ``j`` of the weight matrix ``W`` and every image ``i`` with
``W_ij > 0`` an *entry* carries its own transform ``tau_ij``.  Algorithm 1:

1. ``tau_ij^(0)`` is the identity (line 1), and ``mu_j^(0)`` is the sample
   mean of the input images, ``(1/n) sum_i v_i``, the same for every column
   (line 2);
2. each step moves every transform by the gradient of the smoothed objective
   (eq. 2.7) with a fixed learning rate ``t`` (line 5),

   ``tau_ij <- tau_ij - t grad_tau f_sigma``,
   ``f_sigma = sum_i W_ij ||g_sigma * (v_i o tau_ij - mu_j)||^2``,
   ``grad_tau f_sigma = 2 W_ij J^T g_sigma * g_sigma * (v_i o tau_ij - mu_j)``

   (``J = d(v_i o tau)/d tau``, with ``tau = (theta [rad], tx [px], ty [px])``;
   no preconditioning, no line search, no step refused);
3. ``mu_j <- sum_i W_ij (v_i o tau_ij) / sum_i W_ij`` (line 6).

The smoothing level is the paper's greedy search (§5, "Greedy search for the
smoothing parameter"): at every step each level of ``sigmas`` makes its
candidate step (2-3) and the column keeps the level whose step leaves the
invariant-mean objective ``sum_i W_ij ||v_i o tau_ij - mu_j||^2`` lowest, even
when that is higher than before the step (the engine's default,
:func:`iastudio.core.invariant_mean.invariant_mean_step`, keeps the first level
that lowers the objective and refuses steps that do not).

Every entry with a positive weight is kept: the sums are exact.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .backend import array_module, to_host
from .invariant_mean import entry_starts, weight_entries
from .smoothing import gaussian_smooth
from .warp import warp

__all__ = ["DescentState", "descent_means", "descent_step", "smoothed_gradient", "start_descent_means"]

_BLOCK = 1 << 22  # elements of the entries' images (times the levels tried) worked on together


@dataclass
class DescentState:
    """Everything needed to continue Algorithm 1 for every column at once.

    Attributes
    ----------
    entry_src, entry_col : ndarray of int, shape (E,)
        Source image and column of each entry (sorted by column), host.
    entry_weight : ndarray, shape (E,)
        ``W_ij`` of the entry, host.
    params : ndarray, shape (E, 3)
        The current ``tau_ij`` (host, float64).
    means : ndarray, shape (m, H, W[, C])
        The current ``mu_j`` (the images' array module).
    step : int
        Steps done.
    objective : list of ndarray
        Per step, every column's objective ``sum_i W_ij ||v_i o tau_ij - mu_j||^2``
        after the step (host).
    sigma : list of ndarray
        Per step, the smoothing level each column kept (host).
    """

    entry_src: np.ndarray
    entry_col: np.ndarray
    entry_weight: np.ndarray
    params: np.ndarray
    means: object
    step: int = 0
    objective: list = field(default_factory=list)
    sigma: list = field(default_factory=list)

    def transforms(self, n_src: int) -> np.ndarray:
        """Dense ``(n_src, m, 3)`` array of the entries' transforms (0 elsewhere)."""
        out = np.zeros((n_src, self.means.shape[0], 3))
        out[self.entry_src, self.entry_col] = self.params
        return out

    @property
    def converged(self) -> bool:
        """Always False: Algorithm 1 runs its ``N`` steps."""
        return False


def start_descent_means(images, weights, init=None, *, tol: float = 0.0) -> DescentState:
    """Lines 1-2 of Algorithm 1: identity transforms and the sample mean as ``mu^(0)``.

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
        The ``v_i`` (NumPy or CuPy).
    weights : ndarray or scipy.sparse matrix, shape (n, m)
        Column ``j`` holds the weights of mean ``j`` (each column sums to 1).
    init : ndarray, shape (n, m, 3), or callable, optional
        Starting transforms; ``None`` (Algorithm 1) starts every one from the
        identity.  A callable ``init(src, col)`` returns the entries' ``(E, 3)``.
    tol : float
        Weights at or below this are left out (``0``: every positive weight).

    Returns
    -------
    DescentState

    Examples
    --------
    >>> v = np.stack([np.eye(4), 2 * np.eye(4)]).astype(np.float32)
    >>> st = start_descent_means(v, np.full((2, 2), 0.5))
    >>> float(st.means[0, 0, 0]), float(st.means[1, 0, 0])
    (1.5, 1.5)
    """
    xp = array_module(images)
    src, col, wt = weight_entries(weights, mass=1.0, tol=tol)
    m = weights.shape[1]
    mean = xp.mean(images, axis=0, dtype=np.float64).astype(images.dtype)
    means = xp.broadcast_to(mean, (m, *images.shape[1:])).copy()
    params = entry_starts(init, src, col)
    return DescentState(src, col, wt, params, means)


def _smooth_twice(r, sigma):
    """``g_sigma * g_sigma * r``: the adjoint of the smoothing applied to the smoothed residual."""
    if sigma <= 0:
        return r
    return gaussian_smooth(gaussian_smooth(r, sigma), sigma)


def smoothed_gradient(out, jac, target, weight, sigma: float):
    """``grad_tau f_sigma`` of each entry (the gradient of eq. 2.7 in its transform).

    Parameters
    ----------
    out : ndarray, shape (E, H, W[, C])
        ``v_i o tau``.
    jac : ndarray, shape (E, 3, H, W[, C])
        ``d(v_i o tau) / d(theta, tx, ty)``.
    target : ndarray, shape (E, H, W[, C])
        The entry's current mean ``mu_j``.
    weight : ndarray, shape (E,)
        ``W_ij``.
    sigma : float
        Smoothing level in pixels (0: none).

    Returns
    -------
    ndarray, shape (E, 3)
        ``2 W_ij sum_p [g * g * (v o tau - mu)]_p J_p``, float64 on the host.

    Examples
    --------
    >>> out = np.ones((1, 2, 2)); jac = np.ones((1, 3, 2, 2))
    >>> smoothed_gradient(out, jac, np.zeros((1, 2, 2)), np.array([0.5]), 0.0)
    array([[4., 4., 4.]])
    """
    rs = _smooth_twice(out - target, sigma)
    e = rs.shape[0]
    g = to_host((rs[:, None] * jac).reshape(e, 3, -1).sum(axis=2, dtype=np.float64), np.float64)
    return 2.0 * g * np.asarray(to_host(weight), dtype=np.float64)[:, None]


def _column_sum(values, col, m, xp, weights=None):
    """``out[c] = sum over entries e of column c of weights[e] * values[e]`` (``col`` local to the block)."""
    e = values.shape[0]
    w = np.ones(e) if weights is None else np.asarray(weights, dtype=np.float64)
    onehot = np.zeros((m, e))
    onehot[col, np.arange(e)] = w
    flat = values.reshape(e, -1)
    onehot = xp.asarray(onehot, dtype=flat.dtype if flat.dtype.kind == "f" else np.float64)
    return (onehot @ flat).reshape((m, *values.shape[1:]))


def _column_blocks(col, m, per_entry):
    """Groups of whole columns, each holding at most about ``_BLOCK`` elements of entries."""
    counts = np.bincount(col, minlength=m)
    blocks, start, held = [], 0, 0
    for c in range(m):
        if held and held + counts[c] * per_entry > _BLOCK:
            blocks.append((start, c))
            start, held = c, 0
        held += counts[c] * per_entry
    blocks.append((start, m))
    return blocks


def descent_step(images, state: DescentState, *, learning_rate: float, sigmas=(0.0, 1.0, 2.0)) -> DescentState:
    """Lines 5-6 of Algorithm 1 for every column, with the best smoothing level per column.

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
    state : DescentState
    learning_rate : float
        The fixed step ``t`` (transform units: radians and pixels).
    sigmas : sequence of float
        Smoothing levels in pixels (0: none); each makes a candidate step and
        the column keeps the one whose objective after the step is lowest
        (the first of equals).

    Returns
    -------
    DescentState
        A new state; ``state`` is left unchanged.
    """
    if not (learning_rate > 0 and np.isfinite(learning_rate)):
        raise ValueError("learning_rate must be a finite number > 0")
    xp = array_module(images)
    m = state.means.shape[0]
    sigmas = tuple(float(s) for s in sigmas) or (0.0,)
    params = state.params.copy()
    means = state.means.copy()
    obj = np.zeros(m)
    chosen = np.zeros(m)
    per_entry = int(np.prod(images.shape[1:])) * (4 + len(sigmas))
    col_all = state.entry_col
    starts = np.searchsorted(col_all, np.arange(m + 1))
    for c0, c1 in _column_blocks(col_all, m, per_entry):
        lo, hi = int(starts[c0]), int(starts[c1])
        if hi == lo:
            continue
        src, col, wt = state.entry_src[lo:hi], col_all[lo:hi] - c0, state.entry_weight[lo:hi]
        tau = state.params[lo:hi]
        out, jac = warp(images, tau, index=xp.asarray(src), gradient=True)
        target = state.means[c0:c1][xp.asarray(col)]
        best = None
        for sigma in sigmas:
            cand = tau - learning_rate * smoothed_gradient(out, jac, target, wt, sigma)
            moved = warp(images, cand, index=xp.asarray(src))
            mu = _column_sum(moved, col, c1 - c0, xp, weights=wt)  # line 6 (each column's weights sum to 1)
            res = moved - mu[xp.asarray(col)]
            f = to_host(xp.sum(res.reshape(res.shape[0], -1).astype(np.float64) ** 2, axis=1), np.float64)
            f_col = np.bincount(col, weights=wt * f, minlength=c1 - c0)
            if best is None:
                best = [f_col, cand, mu, np.full(c1 - c0, sigma)]
                continue
            lower = f_col < best[0]
            if lower.any():
                best[0] = np.where(lower, f_col, best[0])
                rows = lower[col]
                best[1] = np.where(rows[:, None], cand, best[1])
                best[2][xp.asarray(np.flatnonzero(lower))] = mu[xp.asarray(np.flatnonzero(lower))]
                best[3] = np.where(lower, sigma, best[3])
        params[lo:hi] = best[1]
        means[c0:c1] = best[2]
        obj[c0:c1] = best[0]
        chosen[c0:c1] = best[3]
    return DescentState(state.entry_src, state.entry_col, state.entry_weight, params, means, state.step + 1,
                        [*state.objective, obj], [*state.sigma, chosen])


def descent_means(images, weights, *, steps: int, learning_rate: float, sigmas=(0.0, 1.0, 2.0),
                  tol: float = 0.0) -> DescentState:
    """Algorithm 1 of the paper: ``steps`` fixed-step gradient steps for every column of ``weights``.

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
    weights : ndarray or scipy.sparse matrix, shape (n, m)
    steps : int
        Algorithm 1's ``N``.
    learning_rate : float
        Algorithm 1's ``t``.
    sigmas : sequence of float
        Smoothing levels of the greedy search.
    tol : float
        Weights at or below this are left out.

    Returns
    -------
    DescentState
        ``means`` holds the ``m`` invariant means.
    """
    state = start_descent_means(images, weights, tol=tol)
    for _ in range(int(steps)):
        state = descent_step(images, state, learning_rate=learning_rate, sigmas=sigmas)
    return state
