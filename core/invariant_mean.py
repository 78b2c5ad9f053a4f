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

Cost.  Only the entries that carry a column's weight are worked on: each
column keeps its largest weights up to a fraction ``mass`` (default 99.9 %)
of its total, the rest are dropped and the kept ones renormalised.  A column
whose objective fell by less than ``rtol`` (relative) in a step has converged:
it stops moving and costs nothing in later steps.  The Gauss-Newton products
``J J^T`` and ``J r`` are single-precision matrix products (BLAS / cuBLAS),
accumulated in double precision where objectives are compared.  ``weights``
may be a SciPy sparse matrix (the K-neighbour graph of a pruned run).

Warps.  A proposal is warped together with its derivative, so the entries
that move start the next step with their images and derivatives in hand;
while these fit a memory budget (``_CACHE_BYTES`` on the CPU, a quarter of
the free memory on a GPU) the state keeps them between steps
(``MeanState.cache``) and each entry costs one warp per step instead of two.
The results are the same with or without it.  On a GPU that runs out of
memory, a block of entries is redone with half as many, and below 16 entries
the rest of the step runs on the CPU (:func:`iastudio.core.backend.in_blocks`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import se2
from .backend import array_module, block_elements, in_blocks, is_out_of_memory, threads, to_host
from .gauss_newton import gauss_newton_metric, gauss_newton_step
from .smoothing import gaussian_smooth
from .warp import parallel_map, warp

__all__ = ["MeanState", "invariant_mean_step", "invariant_means", "start_invariant_means", "weight_entries"]

_BLOCK = 1 << 21  # elements of the entries' images worked on together
_GPU_BLOCK = 1 << 23  # on a GPU: fewer, larger kernel launches
_CACHE_BYTES = 1 << 29  # CPU: warped entries and derivatives kept between steps (old + new copy) up to this
_SETTLED_RTOL = 1e-4  # an entry whose step would lower its residual by less than this fraction does not move
_MIN_ENTRIES = 16  # a block of entries is not halved below this after running out of GPU memory


@dataclass
class MeanState:
    """Everything needed to continue the invariant-mean optimisation.

    Attributes
    ----------
    entry_src, entry_col : ndarray of int, shape (E,)
        Source image and column of each kept entry (sorted by column).
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
    active : ndarray of bool, shape (m,)
        Columns still moving (host); converged ones are skipped.
    cache : (ndarray, ndarray) or None
        Every entry's warped image ``v o tau`` (E, H, W[, C]) and its
        derivative (E, 3, H, W[, C]) at ``params``, when they fit the memory
        budget; ``None`` otherwise (they are then warped again each step).
    """

    entry_src: object
    entry_col: object
    entry_weight: object
    params: object
    means: object
    step: int = 0
    objective: list = field(default_factory=list)
    active: np.ndarray | None = None
    cache: tuple | None = field(default=None, repr=False)

    def transforms(self, n_src: int) -> np.ndarray:
        """Dense ``(n_src, m, 3)`` host array of the entries' transforms (0 elsewhere)."""
        m = self.means.shape[0]
        out = np.zeros((n_src, m, 3))
        out[to_host(self.entry_src), to_host(self.entry_col)] = to_host(self.params)
        return out

    @property
    def converged(self) -> bool:
        """True when every column has stopped moving."""
        return self.active is not None and not bool(np.any(self.active))


def _segment_sum(values, seg, n_seg, xp, weights=None):
    """Sum rows of ``values`` (E, ...), each times its ``weights`` entry (default 1), into ``n_seg`` rows by ``seg``."""
    flat = values.reshape(values.shape[0], -1)
    if xp is np:
        import scipy.sparse as sp
    else:
        import cupyx.scipy.sparse as sp
    e = flat.shape[0]
    data = xp.ones(e, dtype=flat.dtype) if weights is None else xp.asarray(weights, dtype=flat.dtype)
    mat = sp.coo_matrix((data, (xp.asarray(seg), xp.arange(e))), shape=(n_seg, e)).tocsr()
    return xp.asarray(mat @ flat).reshape((n_seg, *values.shape[1:]))


def entry_starts(init, src, col) -> np.ndarray:
    """The ``(len(src), 3)`` starting ``(theta, tx, ty)`` of the weight entries ``(src, col)``.

    ``init``: None (the identity), a callable ``init(src, col)``, or an ``(n, m, 3)`` array.

    Examples
    --------
    >>> entry_starts(None, np.array([0, 1]), np.array([0, 0])).shape
    (2, 3)
    """
    if init is None:
        return np.zeros((src.size, 3))
    if callable(init):
        return np.asarray(to_host(init(src, col)), dtype=float).reshape(-1, 3)
    return np.asarray(to_host(init), dtype=float)[src, col]


def weight_entries(weights, *, mass: float = 1.0, tol: float = 0.0):
    """The entries of a weight matrix that carry each column's mass.

    Parameters
    ----------
    weights : ndarray or scipy.sparse matrix, shape (n, m)
        Nonnegative weights; column ``j`` belongs to mean ``j``.
    mass : float
        In ``(0, 1]``: each column keeps its largest weights, in decreasing
        order, until they hold this fraction of the column's total (``1``
        keeps every positive weight).
    tol : float
        Weights at or below this absolute floor are dropped as well.

    Returns
    -------
    src, col : ndarray of int, shape (E,)
        Row and column of each kept entry, sorted by column then row.
    weight : ndarray, shape (E,)
        The kept weights renormalised to sum to 1 in each column.

    Notes
    -----
    A column with nothing left keeps its largest weight.

    Examples
    --------
    >>> w = np.array([[0.5], [0.3], [0.15], [0.0499], [0.0001]])
    >>> weight_entries(w, mass=0.95)[0]
    array([0, 1, 2])
    """
    if not 0.0 < mass <= 1.0:
        raise ValueError("mass must be in (0, 1]")
    import scipy.sparse as sp

    if sp.issparse(weights):
        coo = sp.coo_matrix(weights)
        _, m = coo.shape
        src, col, w = coo.row.astype(np.int64), coo.col.astype(np.int64), coo.data.astype(float)
    else:
        dense = np.asarray(to_host(weights), dtype=float)
        _n, m = dense.shape
        src, col = np.nonzero(dense > 0)
        w = dense[src, col]
    order = np.lexsort((-w, col))  # by column, largest first
    src, col, w = src[order], col[order], w[order]
    total = np.bincount(col, weights=w, minlength=m)
    csum = np.cumsum(w)
    start = np.concatenate([[0], np.cumsum(np.bincount(col, minlength=m))])[:-1]
    before = csum - w - (csum[start[col]] - w[start[col]])  # mass of the larger weights in the column
    keep = (before < mass * total[col] * (1 - 1e-12)) & (w > tol)
    first = np.zeros(w.size, dtype=bool)
    first[start[np.bincount(col, minlength=m) > 0]] = True
    empty = np.bincount(col[keep], minlength=m) == 0
    keep |= first & empty[col]  # a column with nothing left keeps its largest weight
    src, col, w = src[keep], col[keep], w[keep]
    order = np.lexsort((src, col))
    src, col, w = src[order], col[order], w[order]
    w = w / np.bincount(col, weights=w, minlength=m)[col]
    return src, col, w


def start_invariant_means(images, weights, init=None, *, tol: float = 0.0, mass: float = 1.0) -> MeanState:
    """Set up the optimisation: entries, starting transforms and ``mu^(0)``.

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
        The ``v_i`` (NumPy or CuPy).
    weights : ndarray or scipy.sparse matrix, shape (n, m)
        Column ``j`` holds the weights of the images in mean ``j`` (for IA,
        the invariant weight matrix W).
    init : ndarray, shape (n, m, 3), or callable, optional
        Starting transforms; ``None`` starts every one from the identity, as
        in the paper.  Starting from the pairwise alignments of the invariant
        similarity avoids the local minima of large rotations.  A callable
        ``init(src, col)`` returns the ``(E, 3)`` transforms of the entries
        (used with sparse weights).
    tol : float
        Absolute floor: weights at or below it are skipped.
    mass : float
        Each column keeps its largest weights up to this fraction of its total
        (see :func:`weight_entries`); the kept ones are renormalised.

    Returns
    -------
    MeanState
    """
    xp = array_module(images)
    src, col, wt = weight_entries(weights, mass=mass, tol=tol)
    m = weights.shape[1]
    params = entry_starts(init, src, col)
    src_x, col_x = xp.asarray(src), xp.asarray(col)
    wt_x = xp.asarray(wt, dtype=images.dtype)
    params_x = xp.asarray(params)
    means = xp.zeros((m, *images.shape[1:]), dtype=images.dtype)
    cache = _new_cache(src.size, images)
    host = []

    def work(lo, hi, on_host=False):
        if on_host and not host:
            host.append(to_host(images))
        source = host[0] if on_host else images
        index, tau = (to_host(src_x[lo:hi]), to_host(params_x[lo:hi])) if on_host else (src_x[lo:hi], params_x[lo:hi])
        if cache is None:
            out = xp.asarray(warp(source, tau, index=index))
        elif on_host or images.dtype not in (np.float32, np.float64):  # the cache is on the GPU, or of another dtype
            out, jac = (xp.asarray(a) for a in warp(source, tau, index=index, gradient=True))
            cache[0][lo:hi], cache[1][lo:hi] = out, jac
        else:  # straight into the cache
            out, _ = warp(source, tau, index=index, gradient=True, out=(cache[0][lo:hi], cache[1][lo:hi]))
        means[...] += _segment_sum(out, col_x[lo:hi], m, xp, weights=wt_x[lo:hi])

    in_blocks(src.size, _block_entries(images), work, xp=xp, what="invariant mean", minimum=_MIN_ENTRIES,
              on_cpu=None if xp is np else lambda lo, hi: work(lo, hi, on_host=True))
    return MeanState(src_x, col_x, wt_x, params_x, means, active=np.ones(m, dtype=bool), cache=cache)


def _cache_budget(xp) -> int:
    if xp is np:
        return _CACHE_BYTES
    try:
        free, _ = xp.cuda.runtime.memGetInfo()
    except Exception:  # noqa: BLE001 - no figure: no cache
        return 0
    return int(free) // 4


def _new_cache(e, images):
    """Empty ``(out, jac)`` arrays for ``e`` entries, or ``None`` when two copies would not fit the budget."""
    xp = array_module(images)
    per = int(np.prod(images.shape[1:])) * np.dtype(images.dtype).itemsize
    if e == 0 or 2 * 4 * per * e > _cache_budget(xp):
        return None
    try:
        return (xp.empty((e, *images.shape[1:]), dtype=images.dtype),
                xp.empty((e, 3, *images.shape[1:]), dtype=images.dtype))
    except Exception as exc:
        if is_out_of_memory(exc) or isinstance(exc, MemoryError):
            return None
        raise


def _block_entries(images) -> int:
    return max(1, block_elements(_BLOCK, _GPU_BLOCK, array_module(images)) // int(np.prod(images.shape[1:])))


def invariant_mean_step(images, state: MeanState, *, sigmas=(0.0, 1.0, 2.0), damping: float = 1e-3,
                        rtol: float = 0.0, first_improvement: bool = True, client=None,
                        check=None) -> MeanState:
    """One step of Algorithm 1 for every active column at once (see the module docstring).

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
    state : MeanState
    sigmas : sequence of float
        Smoothing levels tried (0: none).
    damping : float
        Levenberg-Marquardt damping of the Gauss-Newton metric.
    rtol : float
        A column whose objective falls by less than ``rtol`` times its value
        in this step is marked converged and skipped from then on (``0``:
        columns never stop).
    first_improvement : bool
        Try the smoothing levels in order and give an entry no further trials
        once one lowers its objective (the cheap default); ``False`` tries all
        levels for every entry and keeps the best.
    client : dask.distributed.Client, optional
        Run groups of columns as tasks on this cluster (:mod:`iastudio.core.distributed`).
    check : callable, optional
        Called between blocks; it may raise to abandon the step (``state`` is untouched).

    Returns
    -------
    MeanState
        A new state; ``state`` is left unchanged.
    """
    m = state.means.shape[0]
    active = np.ones(m, dtype=bool) if state.active is None else np.asarray(state.active, dtype=bool)
    col_h = to_host(state.entry_col)
    live = np.flatnonzero(active[col_h])  # entries of active columns (a contiguous run per column)
    opts = dict(sigmas=tuple(sigmas), damping=damping, first_improvement=first_improvement)
    if client is not None and live.size:
        params, means, obj = _step_on_cluster(client, images, state, live, np.flatnonzero(active), opts)
        cache = None
    else:
        params, means, obj, cache = _step_here(images, state, live, np.flatnonzero(active), opts, check)
    return _next_state(state, params, means, obj, active, rtol, cache)


def _step_on_cluster(client, images, state, live, live_cols, opts):
    """The step as Dask tasks, one per group of whole columns: ``(params, means, objective per column)``."""
    from .distributed import map_chunks, n_workers

    xp = array_module(images)
    m = state.means.shape[0]
    params, new_means = state.params.copy(), state.means.copy()
    col_h = to_host(state.entry_col)
    groups = np.array_split(live_cols, min(live_cols.size, 2 * n_workers(client)))
    src_h, wt_h, par_h = to_host(state.entry_src), to_host(state.entry_weight), to_host(params)
    means_h = to_host(state.means)
    args, sels = [], []
    for g in groups:
        sel = live[np.isin(col_h[live], g)]
        local = np.searchsorted(g, col_h[sel])
        args.append((means_h[g], src_h[sel], local, wt_h[sel], par_h[sel]))
        sels.append((sel, g))
    obj = np.zeros(m)
    out = map_chunks(client, mean_columns_task, args, to_host(images), opts, progress=None)
    for (sel, g), (_, (tau_g, mean_g, obj_g)) in zip(sels, out):
        params[xp.asarray(sel)] = xp.asarray(tau_g)
        new_means[xp.asarray(g)] = xp.asarray(mean_g, dtype=new_means.dtype)
        obj[g] = obj_g
    return params, new_means, xp.asarray(obj)


def _step_here(images, state, live, live_cols, opts, check):
    """The step on this machine: ``(params, means, objective per column, cache)``.

    The cache moves from ``state`` to the new state and is updated in place
    (``state.cache`` becomes ``None``: were the step abandoned, ``state``
    would simply warp again; its results do not depend on the cache).
    """
    xp = array_module(images)
    m = state.means.shape[0]
    params, new_means = state.params.copy(), state.means.copy()
    new_means[xp.asarray(live_cols)] = 0
    cache, state.cache = state.cache, None
    if live.size and live[-1] - live[0] + 1 == live.size:
        sel = slice(int(live[0]), int(live[-1]) + 1)  # one run: views, no copies
    else:
        sel = xp.asarray(live)
    tau, sums, obj = _update_entries(images, state.means, state.entry_src[sel], state.entry_col[sel],
                                     state.entry_weight[sel], params[sel], m, check=check, cache=cache,
                                     rows=sel, **opts)
    params[sel] = tau
    new_means += sums
    return params, new_means, obj, cache


def _next_state(state, params, new_means, obj, active, rtol, cache):
    """The state after a step: objective at the new means, converged columns marked."""
    xp = array_module(new_means)
    m = new_means.shape[0]
    prev_obj = state.objective[-1] if state.objective else None
    obj_h = np.array(prev_obj, dtype=np.float64) if prev_obj is not None else np.zeros(m)
    params[:, 0] = se2.wrap_angle(params[:, 0])
    # at the new mean: sum w ||x - mu_new||^2 = sum w ||x - mu_old||^2 - ||mu_new - mu_old||^2
    obj = to_host(obj - _sqnorm(new_means - state.means, xp), np.float64)
    obj_h[active] = obj[active]
    new_active = active.copy()
    if rtol > 0 and prev_obj is not None:
        new_active &= (prev_obj - obj_h) >= rtol * np.abs(prev_obj)
    return MeanState(state.entry_src, state.entry_col, state.entry_weight, params, new_means,
                     state.step + 1, [*state.objective, obj_h], new_active, cache)


def mean_columns_task(images, means, src, col, weight, params, *, sigmas, damping, first_improvement):
    """One Dask task: a step for a group of whole columns (host in, host out).

    ``col`` numbers the group's columns ``0 .. len(means) - 1``.  Returns the
    entries' new transforms, the group's new means and their objectives
    (before the correction for the mean's move).
    """
    xp = array_module(images)
    tau, sums, obj = _update_entries(images, xp.asarray(means), xp.asarray(src), xp.asarray(col),
                                     xp.asarray(weight), xp.asarray(params), means.shape[0], sigmas=sigmas,
                                     damping=damping, first_improvement=first_improvement)
    return to_host(tau), to_host(sums), to_host(obj, np.float64)


def _update_entries(images, means, src_all, col_all, wt_all, params, m, *, sigmas, damping, first_improvement,
                    check=None, cache=None, rows=None):
    """Move every entry once; ``(new params, sum_i w_i v_i o tau_i per column, sum_i w_i f_i per column)``.

    ``cache`` holds the warped images and derivatives at ``params`` of the
    entries ``rows`` (a slice or an index array into it); they are replaced
    by those at the new transforms.  Without it everything is warped here.
    Blocks that run out of GPU memory are redone smaller, then on the CPU.
    """
    xp = array_module(images)
    params = params.copy()
    sums = xp.zeros_like(means)
    obj = xp.zeros(m, dtype=np.float64)
    opts = dict(sigmas=sigmas, damping=damping, first_improvement=first_improvement, with_jac=cache is not None)
    host = {}

    def one(lo, hi, on_host=False):
        """The entries ``lo .. hi - 1``: ``(rows in the cache, tau, out, jac, sums, objective)``, nothing written."""
        ix = _sub_rows(rows, lo, hi)
        given = None if cache is None else (cache[0][ix], cache[1][ix])  # views where ``rows`` is a slice
        src, col, wt = src_all[lo:hi], col_all[lo:hi], wt_all[lo:hi]
        if on_host:
            if not host:
                host.update(images=to_host(images), means=to_host(means))
            res = _update_block(host["images"], host["means"][to_host(col)], to_host(src), to_host(params[lo:hi]),
                                None if given is None else tuple(to_host(a) for a in given), **opts)
            res = tuple(None if a is None else xp.asarray(a) for a in res)
        else:
            res = _update_block(images, means[col], src, params[lo:hi], given, **opts)
        tau, out, jac, f = res
        # on the host, sums over the block's own columns only (the others would be 0; one copy of all the
        # means per block was most of the memory traffic of a large run's step)
        c0, c1 = (int(col.min()), int(col.max()) + 1) if xp is np and hi > lo else (0, m)
        return (ix, tau, out, jac, slice(c0, c1), _segment_sum(out, col - c0, c1 - c0, xp, weights=wt),
                _segment_sum((wt * f)[:, None], col - c0, c1 - c0, xp)[:, 0])

    def work(lo, hi, on_host=False):
        if check is not None:
            check()
        spans = _split(lo, hi) if xp is np else [(lo, hi)]  # NumPy: the block's parts on every core
        parts = parallel_map(lambda span: one(*span), spans) if xp is np else [one(lo, hi, on_host)]
        # nothing is written before here: a block that ran out of memory is redone from the same start
        for (a, b), (ix, tau, out, jac, cols, add_sums, add_obj) in zip(spans, parts):
            params[a:b] = tau
            if cache is not None and (on_host or not isinstance(ix, slice)):  # a slice was updated in place
                cache[0][ix], cache[1][ix] = out, jac
            sums[cols] += add_sums
            obj[cols] += add_obj

    e = int(src_all.shape[0])
    in_blocks(e, _block_entries(images), work, xp=xp, what="invariant mean", minimum=_MIN_ENTRIES,
              on_cpu=None if xp is np else lambda lo, hi: work(lo, hi, on_host=True))
    return params, sums, obj


def _split(lo, hi, smallest=32):
    """``lo .. hi`` in one part per CPU core (parts of at least ``smallest`` entries)."""
    parts = max(1, min(threads(), (hi - lo) // smallest))
    edges = np.linspace(lo, hi, parts + 1).round().astype(int)
    return list(zip(edges[:-1].tolist(), edges[1:].tolist()))


def _sub_rows(rows, lo, hi):
    if rows is None:
        return slice(lo, hi)
    if isinstance(rows, slice):
        return slice(rows.start + lo, rows.start + hi)
    return rows[lo:hi]


def _update_block(images, target, src, tau, given, *, sigmas, damping, first_improvement, with_jac):
    """One block of entries: move each ``tau`` by the first (or best) smoothing level that lowers its residual.

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
    target : ndarray, shape (B, H, W[, C])
        Each entry's current mean.
    src : ndarray of int, shape (B,)
    tau : ndarray, shape (B, 3)
    given : (ndarray, ndarray) or None
        ``v o tau`` and its derivative when already known; they are updated
        in place, at the very end (after the last warp, so a block that runs
        out of memory leaves them untouched).
    with_jac : bool
        Also return the derivative at the returned transforms (proposals are
        then warped with their derivative).

    Returns
    -------
    tau, out, jac, f
        The transforms, ``v o tau``, its derivative (``None`` unless
        ``with_jac``) and ``||v o tau - target||^2`` per entry.
    """
    xp = array_module(images)
    out, jac = warp(images, tau, index=src, gradient=True) if given is None else given
    r = out - target
    best_f = _sqnorm(r, xp)
    best_tau = tau.copy()
    metric = gauss_newton_metric(jac)
    wins = []  # per level: (winners, mask over the tried entries, proposals' images, derivatives)
    todo = xp.arange(r.shape[0])  # entries without a lowering candidate yet
    for level, sigma in enumerate(sigmas):
        if int(todo.shape[0]) == 0:
            break
        r_t = r[todo]
        rs = gaussian_smooth(r_t, sigma * np.sqrt(2.0)) if sigma > 0 else r_t  # g * g * r
        delta, predicted = gauss_newton_step(jac[todo], rs, damping, metric=metric[todo])
        if level == 0 and _SETTLED_RTOL > 0:  # settled entries: no proposal at any level
            moving = predicted >= _SETTLED_RTOL * _sqnorm(rs, xp)
            if not bool(moving.all()):
                todo, delta = todo[moving], delta[moving]
                if int(todo.shape[0]) == 0:
                    break
        cand = tau[todo] + delta
        out_c, jac_c = warp(images, cand, index=src[todo], gradient=True) if with_jac else \
            (warp(images, cand, index=src[todo]), None)
        f_c = _sqnorm(out_c - target[todo], xp)
        better = f_c < best_f[todo]
        won = todo[better]
        best_f[won] = f_c[better]
        best_tau[won] = cand[better]
        wins.append((won, better, out_c, jac_c))
        if first_improvement:
            todo = todo[~better]
    for won, better, out_c, jac_c in wins:  # in order: a later level's win replaces an earlier one
        _put(out, won, out_c, better)
        if with_jac:
            _put(jac, won, jac_c, better)
    return best_tau, out, (jac if with_jac else None), best_f


def _put(dst, won, src, better):
    """``dst[won] = src[better]``; one plain copy where every entry of a whole block won."""
    if src.shape[0] == dst.shape[0] and bool(better.all()):
        dst[...] = src
    elif int(won.shape[0]):
        dst[won] = src[better]


def _sqnorm(r, xp):
    flat = r.reshape(r.shape[0], int(np.prod(r.shape[1:])))
    return xp.sum(flat * flat, axis=1, dtype=np.float64)


def invariant_means(images, weights, init=None, *, steps: int = 10, sigmas=(0.0, 1.0, 2.0), tol: float = 0.0,
                    mass: float = 1.0, rtol: float = 0.0, first_improvement: bool = True, client=None,
                    check=None):
    """Compute the invariant mean of every column of ``weights``.

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
    weights : ndarray or scipy.sparse matrix, shape (n, m)
    init : ndarray, shape (n, m, 3), or callable, optional
        Starting transforms (``None``: identity, as in the paper).
    steps : int
        Gradient steps at most (Algorithm 1's ``N``).
    sigmas : sequence of float
        Smoothing levels tried at each step (0 means no smoothing).
    tol : float
        Weights at or below this absolute floor are skipped.
    mass : float
        Fraction of each column's weight kept (see :func:`weight_entries`).
    rtol : float
        Columns whose objective falls by less than this fraction in a step
        stop (``0``: all ``steps`` are done).
    first_improvement : bool
        See :func:`invariant_mean_step`.
    client : dask.distributed.Client, optional
        See :func:`invariant_mean_step`.
    check : callable, optional
        Called between blocks of work; it may raise to abandon the computation.

    Returns
    -------
    MeanState
        ``means`` holds the ``m`` invariant means; ``objective`` the history.
    """
    state = start_invariant_means(images, weights, init, tol=tol, mass=mass)
    for _ in range(steps):
        state = invariant_mean_step(images, state, sigmas=sigmas, rtol=rtol,
                                    first_improvement=first_improvement, client=client, check=check)
        if state.converged:
            break
    return state
