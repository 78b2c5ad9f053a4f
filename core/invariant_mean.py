"""The invariant mean (paper eq. 2.3/2.6, Algorithm 1), vectorised over columns.

For each column ``j``: ``mu_j = argmin_mu sum_i W_ij min_tau_i ||g_sigma *
(v_i o tau_i - mu)||^2``.  Every ``(i, j)`` with a weight above ``tol`` is an
*entry* with its own transform; all entries of all columns are processed in
one vectorised pass per step (in memory-bounded blocks):

1. warp every ``v_i`` by its ``tau_ij`` with the analytic derivative;
2. for each smoothing level ``sigma`` in ``sigmas`` (the paper's greedy
   search), the gradient ``2 (g_sigma * g_sigma * r) . d(v o tau)/d tau`` of
   the smoothed objective, preconditioned by the Gauss-Newton metric
   ``J^T J`` (so angle and shift steps are on comparable scales);
3. keep, per entry, the candidate that lowers the (unsmoothed) objective the
   most, or no move when none does;
4. ``mu_j <- sum_i W_ij (v_i o tau_ij) / sum_i W_ij`` (Algorithm 1, line 6).

The objective ``sum_i W_ij ||v_i o tau_ij - mu_j||^2`` is recorded per step and
never increases.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import se2
from .backend import array_module, to_host
from .smoothing import gaussian_smooth
from .warp import warp

__all__ = ["MeanState", "start_invariant_means", "invariant_mean_step", "invariant_means"]

_BLOCK = 1 << 21


@dataclass
class MeanState:
    """Everything needed to continue the invariant-mean optimisation.

    Attributes
    ----------
    entry_src, entry_col : ndarray of int, shape (E,)
        Source image and column of each entry with a weight above ``tol``.
    entry_weight : ndarray, shape (E,)
        Its weight, renormalised over the column's kept entries.
    params : ndarray, shape (E, 3)
        The current ``tau_ij``.
    means : ndarray, shape (m, H, W[, C])
        The current ``mu_j``.
    step : int
        Steps done.
    objective : list of ndarray
        Per step, the objective of every column (host).
    """

    entry_src: object
    entry_col: object
    entry_weight: object
    params: object
    means: object
    step: int = 0
    objective: list = field(default_factory=list)

    def transforms(self, n_src: int) -> np.ndarray:
        """Dense ``(n_src, m, 3)`` host array of the entries' transforms (0 elsewhere)."""
        m = self.means.shape[0]
        out = np.zeros((n_src, m, 3))
        out[to_host(self.entry_src), to_host(self.entry_col)] = to_host(self.params)
        return out


def _segment_sum(values, seg, n_seg, xp):
    """Sum rows of ``values`` (E, ...) into ``n_seg`` rows by ``seg``."""
    flat = values.reshape(values.shape[0], -1)
    if xp is np:
        import scipy.sparse as sp
    else:
        import cupyx.scipy.sparse as sp
    e = flat.shape[0]
    mat = sp.coo_matrix(
        (xp.ones(e, dtype=flat.dtype), (xp.asarray(seg), xp.arange(e))), shape=(n_seg, e)
    ).tocsr()
    return xp.asarray(mat @ flat).reshape((n_seg,) + values.shape[1:])


def start_invariant_means(images, weights, init=None, *, tol: float = 1e-4) -> MeanState:
    """Set up the optimisation: entries, starting transforms and ``mu^(0)``.

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
        The ``v_i`` (NumPy or CuPy).
    weights : ndarray, shape (n, m)
        Column ``j`` holds the weights of the images in mean ``j`` (for IA,
        the invariant weight matrix W).
    init : ndarray, shape (n, m, 3), optional
        Starting transforms; ``None`` starts every one from the identity, as
        in the paper.  Starting from the pairwise alignments of the invariant
        similarity avoids the local minima of large rotations.
    tol : float
        Weights below ``tol`` are skipped (the rest of a column is renormalised).

    Returns
    -------
    MeanState
    """
    xp = array_module(images)
    w = np.asarray(to_host(weights), dtype=float)
    n, m = w.shape
    keep = w > tol
    empty = ~keep.any(axis=0)
    if empty.any():  # a column whose weights are all tiny keeps its largest
        keep[np.argmax(w[:, empty], axis=0), np.flatnonzero(empty)] = True
    src, col = np.nonzero(keep)
    order = np.lexsort((src, col))
    src, col = src[order], col[order]
    wt = w[src, col]
    wt = wt / np.bincount(col, weights=wt, minlength=m)[col]
    if init is None:
        params = np.zeros((src.size, 3))
    else:
        params = np.asarray(to_host(init), dtype=float)[src, col]
    src_x, col_x = xp.asarray(src), xp.asarray(col)
    wt_x = xp.asarray(wt, dtype=images.dtype)
    params_x = xp.asarray(params)
    means = xp.zeros((m,) + images.shape[1:], dtype=images.dtype)
    for lo, hi in _blocks(src.size, images):
        out = warp(images, params_x[lo:hi], index=src_x[lo:hi])
        means += _segment_sum(out * _bcast(wt_x[lo:hi], out), col_x[lo:hi], m, xp)
    return MeanState(src_x, col_x, wt_x, params_x, means)


def _blocks(e, images):
    per = int(np.prod(images.shape[1:]))
    step = max(1, _BLOCK // per)
    for lo in range(0, e, step):
        yield lo, min(e, lo + step)


def _bcast(v, like):
    return v.reshape((-1,) + (1,) * (like.ndim - 1))


def invariant_mean_step(images, state: MeanState, *, sigmas=(0.0, 1.0, 2.0), damping: float = 1e-3,
                        check=None) -> MeanState:
    """One step of Algorithm 1 for every column at once (see the module docstring).

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
    state : MeanState
    sigmas : sequence of float
        Smoothing levels tried (0: none).
    damping : float
        Levenberg-Marquardt damping of the Gauss-Newton metric.
    check : callable, optional
        Called between blocks; it may raise to abandon the step (``state`` is untouched).

    Returns
    -------
    MeanState
        A new state; ``state`` is left unchanged.
    """
    xp = array_module(images)
    m = state.means.shape[0]
    params = state.params.copy()
    new_means = xp.zeros_like(state.means)
    obj = xp.zeros(m, dtype=np.float64)
    eye = xp.eye(3)
    for lo, hi in _blocks(params.shape[0], images):
        if check is not None:
            check()
        src = state.entry_src[lo:hi]
        col = state.entry_col[lo:hi]
        wt = state.entry_weight[lo:hi]
        tau = params[lo:hi]
        out, jac = warp(images, tau, index=src, gradient=True)
        target = state.means[col]
        r = out - target
        best_f = _sqnorm(r, xp)
        best_out = out
        best_tau = tau
        j = jac.reshape(jac.shape[0], 3, -1).astype(np.float64)
        jtj = xp.matmul(j, xp.transpose(j, (0, 2, 1)))
        diag = xp.diagonal(jtj, axis1=1, axis2=2)
        h = jtj + damping * (eye * (diag[:, None, :] + 1e-9)) + 1e-12 * eye
        for sigma in sigmas:
            rs = gaussian_smooth(r, sigma * np.sqrt(2.0)) if sigma > 0 else r  # g * g * r
            g = (j * rs.reshape(rs.shape[0], 1, -1)).sum(axis=2)
            delta = -xp.linalg.solve(h, g[..., None])[..., 0]
            cand = tau + delta
            out_c = warp(images, cand, index=src)
            f_c = _sqnorm(out_c - target, xp)
            better = f_c < best_f
            best_f = xp.where(better, f_c, best_f)
            best_tau = xp.where(better[:, None], cand, best_tau)
            best_out = xp.where(_bcast(better, out_c), out_c, best_out)
        params[lo:hi] = best_tau
        new_means += _segment_sum(best_out * _bcast(wt, best_out), col, m, xp)
        obj += _segment_sum((wt * best_f)[:, None], col, m, xp)[:, 0]
    params[:, 0] = se2.wrap_angle(params[:, 0])
    # at the new mean: sum w ||x - mu_new||^2 = sum w ||x - mu_old||^2 - ||mu_new - mu_old||^2
    obj = obj - _sqnorm(new_means - state.means, xp)
    return MeanState(
        state.entry_src, state.entry_col, state.entry_weight, params, new_means,
        state.step + 1, state.objective + [to_host(obj, np.float64)],
    )


def _sqnorm(r, xp):
    return (r.astype(np.float64) ** 2).reshape(r.shape[0], -1).sum(axis=1)


def invariant_means(images, weights, init=None, *, steps: int = 10, sigmas=(0.0, 1.0, 2.0), tol: float = 1e-4,
                    check=None):
    """Compute the invariant mean of every column of ``weights``.

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
    weights : ndarray, shape (n, m)
    init : ndarray, shape (n, m, 3), optional
        Starting transforms (``None``: identity, as in the paper).
    steps : int
        Gradient steps (Algorithm 1's ``N``).
    sigmas : sequence of float
        Smoothing levels tried at each step (0 means no smoothing).
    tol : float
        Weights below ``tol`` are skipped.
    check : callable, optional
        Called between blocks of work; it may raise to abandon the computation.

    Returns
    -------
    MeanState
        ``means`` holds the ``m`` invariant means; ``objective`` the history.
    """
    state = start_invariant_means(images, weights, init, tol=tol)
    for _ in range(steps):
        state = invariant_mean_step(images, state, sigmas=sigmas, check=check)
    return state
