"""Invariant similarity (paper eq. 2.2): the best alignment of every pair.

``d_ij = min_tau || v_j - v_i o tau ||`` over all rotations and translations,
for unit-norm images on a common canvas.  The search is global and then local:

1. **Rotation candidates** from the Fourier magnitude in polar coordinates.
   ``|F(v o tau)|`` does not depend on the translation and rotates with the
   image, so a circular cross-correlation over the polar angle scores every
   rotation on the grid for every pair at once (one batched matrix product
   per angular frequency).  The best few peaks are kept (``|F|`` is
   symmetric, so each orientation comes with its 180-degree twin).
2. **Translation** for each candidate angle by FFT cross-correlation on a
   zero-padded canvas: every translation at once, with a sub-pixel peak.
3. **Continuous refinement** of the best candidate in ``(theta, tx, ty)`` by
   damped Gauss-Newton steps on ``||v_i o tau - v_j||^2`` with the analytic
   warp derivative.

``candidates=None`` evaluates every grid angle (exhaustive, slower).

``group="e2"`` adds mirror images (the group E(2) = SE(2) plus reflections):
every pair is also searched with the first image flipped, and the better of
the two alignments is kept (``SimilarityResult.mirrored``; all pairs only).

``pairs=(rows, cols)`` aligns only those pairs (the candidate graph of
:mod:`iastudio.core.neighbors`): the distances come back as a SciPy sparse matrix and
the transforms as a per-pair list, so nothing of size ``n^2`` is made.  With
``client=`` (a ``dask.distributed`` client, :mod:`iastudio.core.distributed`) the
chunks of pairs run as tasks on the cluster.
"""
from __future__ import annotations

import contextlib
import itertools
import threading
from dataclasses import dataclass

import numpy as np

from . import se2
from .backend import array_module, block_elements, fft_module, in_blocks, threads, to_host
from .gauss_newton import damped_step
from .warmup import start_warmup
from .warp import parallel_map, support_radii, warp, warp_residuals

__all__ = ["SimilarityResult", "angle_grid", "invariant_distances", "join_pair_results", "plain_distances",
           "polar_magnitudes", "refine_pairs", "sharing_preparation"]

_BLOCK = 1 << 22  # elements per temporary block
_GPU_BLOCK = 1 << 24  # on a GPU: fewer, larger kernel launches


def _block(xp) -> int:
    return block_elements(_BLOCK, _GPU_BLOCK, xp)


_PAIR_CHUNK = 200_000  # pairs searched together (bounds every per-pair array)


@dataclass
class SimilarityResult:
    """Pairwise invariant distances and the transforms that achieve them.

    Attributes
    ----------
    distances : ndarray or scipy.sparse.csr_matrix, shape (n, n)
        ``d_ij``, symmetric with a zero diagonal (host, float64).  Sparse
        when only candidate ``pairs`` were aligned: an absent entry was not
        computed (stored zeros are real zero distances).
    transforms : ndarray, shape (n, n, 3), or None
        ``transforms[i, j]`` is ``tau`` with ``v_i o tau ~ v_j`` (image ``i``
        aligned onto image ``j``), ``(theta [rad], tx, ty)`` in canvas pixels.
        ``None`` when only candidate pairs were aligned (see :meth:`transform`).
    pairs : tuple of ndarray, optional
        ``(rows, cols)``, ``rows < cols``, sorted: the pairs aligned.
    pair_transforms : ndarray, shape (P, 3), optional
        ``rows[p]`` aligned onto ``cols[p]``.
    mirrored : ndarray of bool, shape (n, n), or None
        ``group="e2"``: where True, ``tau`` aligns the *flipped* image
        (``v_i[:, ::-1]``) onto ``v_j``.  All False for SE(2); ``None`` when
        only candidate pairs were aligned (those are never mirrored).
    """

    distances: object
    transforms: np.ndarray | None
    pairs: tuple | None = None
    pair_transforms: np.ndarray | None = None
    mirrored: np.ndarray | None = None

    def __post_init__(self):
        if self.mirrored is None and self.pairs is None:
            self.mirrored = np.zeros(self.distances.shape, dtype=bool)

    @property
    def sparse(self) -> bool:
        """True when only candidate pairs were aligned."""
        return self.pairs is not None

    def transform(self, src, dst) -> np.ndarray:
        """``tau`` aligning image ``src[e]`` onto ``dst[e]``: ``(E, 3)``, host.

        Pairs that were not aligned (and ``src == dst``) give the identity.
        """
        src = np.asarray(src, dtype=np.int64).ravel()
        dst = np.asarray(dst, dtype=np.int64).ravel()
        if self.pairs is None:
            return np.asarray(self.transforms)[src, dst]
        n = self.distances.shape[0]
        keys = self.pairs[0].astype(np.int64) * n + self.pairs[1]
        a, b = np.minimum(src, dst), np.maximum(src, dst)
        out = np.zeros((src.size, 3))
        if keys.size == 0:
            return out
        pos = np.clip(np.searchsorted(keys, a * n + b), 0, keys.size - 1)
        found = (keys[pos] == a * n + b) & (a != b)
        fwd = self.pair_transforms[pos]
        out[found] = np.where((src < dst)[found][:, None], fwd[found], se2.invert(fwd[found]))
        return out


def angle_grid(angle_step: float, rotation_range: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The full-circle angle grid and which of its angles are allowed.

    Parameters
    ----------
    angle_step : float
        Degrees; the grid has ``round(360 / angle_step)`` equal steps.
    rotation_range : float, optional
        Degrees: only relative rotations in ``[-R, R]`` are allowed.

    Returns
    -------
    angles : ndarray
        Radians in ``[-pi, pi)``, grid index ``m`` at ``2 pi m / M``.
    allowed : ndarray of bool
    """
    if angle_step <= 0:
        raise ValueError("angle step must be > 0")
    m = max(4, int(round(360.0 / angle_step)))
    angles = se2.wrap_angle(2 * np.pi * np.arange(m) / m)
    if rotation_range is None or rotation_range >= 180:
        allowed = np.ones(m, dtype=bool)
    else:
        allowed = np.abs(angles) <= np.deg2rad(rotation_range) + 1e-9
    return angles, allowed


def _fast_len(n: int) -> int:
    import scipy.fft

    return scipy.fft.next_fast_len(int(n), real=True)


def polar_magnitudes(images, p: int, rows, cols):
    """``|F|`` of each image zero-padded to ``p x p``, read (bilinear) at points of the centred plane.

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
        Real images (NumPy or CuPy); a colour image's channels' magnitudes are summed.
    p : int
        Side of the zero-padded transform.
    rows, cols : ndarray
        Host coordinates of the points, any shape (flattened), in the plane whose centre
        ``(p // 2, p // 2)`` is frequency zero (``fftshift``'s layout); a point outside
        ``[0, p - 1]`` in either coordinate reads 0.

    Returns
    -------
    ndarray, shape (n, rows.size), float32, on the images' device
        Row ``i``: image ``i``'s ``|F|`` at the points.

    Notes
    -----
    The images are real, so ``|F(-k)| = |F(k)|``: only the half plane of ``rfft2`` is computed, and
    each point's four bilinear taps are read there (a tap in the other half at its mirror point,
    ``-k``), all points of all images at once as one sparse product (:func:`_polar_taps`), the
    same on NumPy and CuPy.  The values are those of reading ``|fftshift(fft2)|`` with
    :func:`scipy.ndimage.map_coordinates` (``order=1``) to float32 rounding.

    Examples
    --------
    >>> x = np.zeros((1, 4, 4), np.float32); x[0, 0, 0] = 1.0  # |F| = 1 everywhere
    >>> polar_magnitudes(x, 8, np.array([4.0, 5.5]), np.array([4.0, 2.25])).round(6).tolist()
    [[1.0, 1.0]]
    """
    xp = array_module(images)
    fft = fft_module(xp)
    mag = xp.abs(fft.rfft2(images, s=(p, p), axes=(1, 2))).astype(np.float32, copy=False)
    if mag.ndim == 4:  # colour: sum the channels' magnitudes
        mag = mag.sum(axis=-1)
    taps = _polar_taps(p, np.ravel(rows), np.ravel(cols))
    if xp is not np:
        import cupyx.scipy.sparse

        taps = cupyx.scipy.sparse.csr_matrix(taps)
    return (taps @ mag.reshape(mag.shape[0], p * (p // 2 + 1)).T).T


def _polar_taps(p: int, rows, cols):
    """The bilinear read of :func:`polar_magnitudes` as a sparse (points, ``p (p // 2 + 1)``) float32 matrix."""
    import scipy.sparse as sp

    r0, c0 = np.floor(rows).astype(np.int64), np.floor(cols).astype(np.int64)
    fr, fc = rows - r0, cols - c0
    inside = (rows >= 0) & (rows <= p - 1) & (cols >= 0) & (cols <= p - 1)  # outside: 0, as map_coordinates reads
    point = np.arange(rows.size)
    at, weight, where = [], [], []
    for dr, dc in ((0, 0), (0, 1), (1, 0), (1, 1)):
        kr, kc = (r0 + dr - p // 2) % p, (c0 + dc - p // 2) % p  # frequencies of the unshifted transform
        mirror = kc > p // 2  # rfft2 keeps columns 0 .. p // 2: read |F(-k)| there
        kr, kc = np.where(mirror, -kr % p, kr), np.where(mirror, p - kc, kc)
        at.append(point)
        weight.append((fr if dr else 1 - fr) * (fc if dc else 1 - fc) * inside)
        where.append(kr * (p // 2 + 1) + kc)
    m = sp.csr_matrix((np.concatenate(weight).astype(np.float32), (np.concatenate(at), np.concatenate(where))),
                      shape=(rows.size, p * (p // 2 + 1)))
    m.sum_duplicates()
    return m


def _polar_spectra(images, n_angles, xp):
    """Ring-normalised ``|F|`` on a polar grid, rFFT'd along the angle."""
    fft = fft_module(xp)
    n, h, w = images.shape[:3]
    p = _fast_len(2 * max(h, w))
    centre = p // 2
    radii = np.linspace(2.0, 0.4 * p, max(8, p // 6))
    phi = 2 * np.pi * np.arange(n_angles) / n_angles
    # k = rho (cos phi, sin phi) in (row, col): then |F(v o tau)|(phi) = |F(v)|(phi - theta)
    rr = centre + radii[:, None] * np.cos(phi)[None, :]
    cc = centre + radii[:, None] * np.sin(phi)[None, :]
    out = polar_magnitudes(images, p, rr, cc).reshape(n, radii.size, n_angles)
    out *= xp.asarray(np.sqrt(radii), dtype=np.float32)[None, :, None]  # emphasise detail
    out -= out.mean(axis=2, keepdims=True)  # only the angular structure counts
    norm = xp.sqrt((out * out).sum(axis=(1, 2), keepdims=True))
    out /= xp.maximum(norm, 1e-12)
    return fft.rfft(out, axis=2)


def _rotation_scores(q, rows, cols, n_angles, xp):
    """Circular correlation over the polar angle for pairs ``(rows, cols)``.

    Returns ``(M, E)`` scores: entry ``m`` rates rotating image ``rows`` by
    grid angle ``m`` to match image ``cols``.
    """
    fft = fft_module(xp)
    qt = xp.transpose(q, (2, 0, 1))  # (freq, n, R)
    g = xp.einsum("fer,fer->fe", xp.conj(qt[:, rows]), qt[:, cols])
    return fft.irfft(g, n=n_angles, axis=0)


def _pick_candidates(scores, allowed, k, xp):
    """Top-``k`` circular local maxima per column of ``scores`` (M, E)."""
    s = xp.where(xp.asarray(allowed)[:, None], scores, -xp.inf)
    if k is None or k >= s.shape[0]:
        m = int(np.count_nonzero(allowed))
        idx = xp.asarray(np.flatnonzero(allowed))[:, None]
        return xp.broadcast_to(idx, (m, s.shape[1]))
    peak = (s >= xp.roll(s, 1, axis=0)) & (s >= xp.roll(s, -1, axis=0))
    s = xp.where(peak, s, -xp.inf)
    # where fewer than k peaks exist the rest are the lowest grid angles that are not peaks, evaluated
    # but harmless (disallowed ones are discarded by the caller); a stable sort picks the same ones on
    # every device (NumPy's default sort picked arbitrary ones, CuPy's others: different alignments)
    return xp.argsort(-s, axis=0, kind="stable")[:k]


#: A pair's rotation candidates after its best peak (and that peak's half-turn twin, which ties with it) are
#: searched only where their polar score is at least this share of the best's: on 1,000 particles and
#: 1,000 rotated digits the third candidate was below half the best on 87 % of the 41,000 pairs, and
#: of those it won the translation search on 2 (docs/speed.md, section 00000)
CANDIDATE_SHARE = 0.5


def _worth_searching(cand_scores, cand, allowed, candidates, xp):
    """Which of the rotation candidates ``cand`` (K, E) the translation search tries: a (K, E) mask.

    All of them for ``candidates=None`` (every grid angle); otherwise the first (the best allowed peak)
    and every allowed one whose polar score ``cand_scores`` is at least :data:`CANDIDATE_SHARE` of the
    first's (all, where the first's is not positive).

    Examples
    --------
    >>> s = np.array([[0.8, 0.0], [0.8, -0.1], [0.3, -0.2]])
    >>> _worth_searching(s, np.zeros((3, 2), int), np.ones(4, bool), 3, np).tolist()
    [[True, True], [True, True], [False, True]]
    """
    if candidates is None:
        return xp.ones(cand.shape, dtype=bool)
    best = cand_scores[:1]
    keep = (cand_scores >= CANDIDATE_SHARE * best) | (best <= 0)
    keep &= xp.asarray(allowed)[cand]
    keep[0] = True
    return keep


def _translation_search(fv_conj, images, pairs_i, pairs_j, angle_idx, angles, p, xp, progress):
    """Best translation for each (pair, grid angle) entry by FFT correlation.

    ``fv_conj`` holds the conjugated zero-padded spectra of the targets.

    Every (grid angle, source image) combination is rotated and transformed
    once, in blocks of bounded memory; with an even number of grid angles only
    the first half's are (an angle half a turn further is the same one flipped
    about the centre: :func:`_half_turn_phase`).  Returns ``scores`` (correlation) and
    ``shift`` (row, col): ``v_i o rot(theta)`` shifted by ``shift`` best
    matches ``v_j``.
    """
    fft = fft_module(xp)
    n, h, w = images.shape[:3]
    n_e = int(angle_idx.shape[0])
    score = xp.full(n_e, -xp.inf, dtype=np.float64)
    shift = xp.zeros((n_e, 2), dtype=np.float64)
    angle_host = to_host(angle_idx).astype(np.int64)
    # the twin of grid angle a is a + M / 2 (M even): half a turn more, which on the grid is the rotated image
    # flipped about the centre (exactly: the warp samples mirrored points), so its spectrum is that of angle a's
    # conjugated, times a phase (_half_turn_phase); only angles of the first half are warped and transformed
    half = angles.size // 2 if angles.size % 2 == 0 else angles.size
    twin = angle_host >= half
    key = (angle_host - half * twin) * n + to_host(pairs_i).astype(np.int64)
    order = np.argsort(key, kind="stable")
    uniq, first = np.unique(key[order], return_index=True)
    slot = np.repeat(np.arange(uniq.size), np.diff(np.append(first, order.size)))  # per sorted entry
    per_combo = p * (p // 2 + 1) * (images.shape[3] if images.ndim == 4 else 1)
    combos_per_block = max(1, (_block(xp) * 4) // per_combo)
    entries_per_block = max(1, _block(xp) // (p * p))
    pj_sorted = pairs_j[xp.asarray(order)]
    twin_sorted = twin[order]
    turn = _half_turn_phase(h, w, p, images.ndim == 4, xp) if twin.any() else None
    for c0 in range(0, uniq.size, combos_per_block):
        c1 = min(uniq.size, c0 + combos_per_block)
        ks = uniq[c0:c1]
        params = np.zeros((ks.size, 3))
        params[:, 0] = angles[ks // n]
        if xp is np:  # the combinations in one part per thread, each warped and transformed on its own
            fu = np.empty((ks.size, p, p // 2 + 1, *images.shape[3:]), dtype=np.result_type(images.dtype, np.complex64))

            def spectra(lo, hi, fu=fu, params=params, ks=ks):
                fu[lo:hi] = fft.rfft2(warp(images, params[lo:hi], index=ks[lo:hi] % n), s=(p, p), axes=(1, 2))

            parallel_map(lambda span: spectra(*span), _even_spans(0, ks.size, ks.size, xp))
        else:
            rot = warp(images, xp.asarray(params), index=xp.asarray(ks % n))
            fu = fft.rfft2(rot, s=(p, p), axes=(1, 2))
        e0, e1 = int(first[c0]), int(first[c1]) if c1 < uniq.size else order.size

        def correlate(lo, hi, fu=fu, c0=c0):
            spectra = fu[xp.asarray(slot[lo:hi] - c0)]  # a copy (fancy indexing)
            flipped = np.flatnonzero(twin_sorted[lo:hi])
            if flipped.size:
                at = xp.asarray(flipped)
                spectra[at] = xp.conj(spectra[at]) * turn
            prod = fv_conj[pj_sorted[lo:hi]] * spectra
            if prod.ndim == 4:
                prod = prod.sum(axis=-1)
            return _peak(fft.irfft2(prod, s=(p, p), axes=(1, 2)), xp)

        spans = _even_spans(e0, e1, entries_per_block, xp)
        # NumPy: the blocks of entries on every thread (each one's FFTs on its own thread)
        found = parallel_map(lambda span: correlate(*span), spans) if xp is np else (correlate(*s) for s in spans)
        for (lo, hi), (sc, sh) in zip(spans, found):
            dest = xp.asarray(order[lo:hi])
            score[dest] = sc
            shift[dest] = sh
        progress(c1 / uniq.size)
    return score, shift


def _half_turn_phase(h, w, p, colour, xp):
    """The factor taking the ``(p, p)`` rFFT of an ``h x w`` image to that of the image flipped about its centre.

    The flipped image ``u[h - 1 - r, w - 1 - c]`` has the spectrum
    ``exp(-2 pi i (k (h - 1) + l (w - 1)) / p) * conj(U[k, l])`` (``u`` real); a turn by
    half a circle about the centre is that flip.  Shape ``(p, p // 2 + 1[, 1])``, complex64.

    Examples
    --------
    >>> u = np.random.default_rng(0).random((5, 4))
    >>> flipped = np.fft.rfft2(u[::-1, ::-1], s=(8, 8))
    >>> bool(np.allclose(flipped, np.conj(np.fft.rfft2(u, s=(8, 8))) * _half_turn_phase(5, 4, 8, False, np)))
    True
    """
    k = np.arange(p)[:, None]
    ll = np.arange(p // 2 + 1)[None, :]
    phase = np.exp(-2j * np.pi * (k * (h - 1) + ll * (w - 1)) / p).astype(np.complex64)
    return xp.asarray(phase[..., None] if colour else phase)


def _even_spans(lo, hi, most, xp):
    """``lo .. hi`` in equal parts of at most ``most`` items, at least one per thread on NumPy (>= 64 items each)."""
    parts = -(-(hi - lo) // most)
    if xp is np:
        parts = max(parts, min(threads(), (hi - lo) // 64))
    edges = np.linspace(lo, hi, max(1, parts) + 1).round().astype(int).tolist()
    return list(itertools.pairwise(edges))


def _peak(corr, xp):
    """Maximum of each correlation surface with a parabolic sub-pixel offset."""
    e, p, _ = corr.shape
    flat = corr.reshape(e, -1)
    k = xp.argmax(flat, axis=1)
    r, c = k // p, k % p
    ar = xp.arange(e)
    top = flat[ar, k]

    def sub(m1, m0, p1):
        den = m1 - 2 * m0 + p1
        off = xp.where(xp.abs(den) > 1e-12, 0.5 * (m1 - p1) / xp.where(den == 0, 1, den), 0.0)
        return xp.clip(off, -0.5, 0.5)

    dr = sub(corr[ar, (r - 1) % p, c], top, corr[ar, (r + 1) % p, c])
    dc = sub(corr[ar, r, (c - 1) % p], top, corr[ar, r, (c + 1) % p])
    rr = ((r + p // 2) % p - p // 2) + dr
    cc = ((c + p // 2) % p - p // 2) + dc
    return top.astype(np.float64), xp.stack([rr, cc], axis=1).astype(np.float64)


def refine_alignment(images, targets, params, *, index=None, target_index=None, steps=6, xp=None):
    """Damped Gauss-Newton refinement of ``min_tau ||v o tau - target||^2``.

    Parameters
    ----------
    images : ndarray, shape (N, H, W[, C])
        Sources ``v``.
    targets : ndarray, shape (M, H, W[, C])
        What each source is aligned onto.
    params : ndarray, shape (E, 3)
        Starting transforms, one per entry.
    index, target_index : ndarray of int, shape (E,)
        Source and target image of each entry (default ``arange(E)``).
    steps : int
        Gauss-Newton iterations; a step is kept only where it lowers the
        residual (Levenberg-Marquardt damping otherwise).

    Returns
    -------
    params : ndarray, shape (E, 3)
    residual : ndarray, shape (E,)
        ``||v o tau - target||^2`` at the returned transforms.
    """
    xp = xp or array_module(images)
    params = xp.asarray(params, dtype=np.float64).copy()
    e = params.shape[0]
    index = xp.arange(e) if index is None else xp.asarray(index)
    target_index = xp.arange(e) if target_index is None else xp.asarray(target_index)
    h, w = images.shape[1:3]
    per = h * w * (3 if images.ndim == 4 else 1)
    chunk = max(1, _block(xp) // (4 * per))
    resid = xp.empty(e, dtype=np.float64)
    parts = -(-e // chunk)
    if xp is np:  # as many equal chunks on every thread (a last, lone chunk would leave the other cores idle)
        parts = -(-parts // threads()) * threads() if e >= 64 * threads() else parts
    edges = np.linspace(0, e, max(1, parts) + 1).round().astype(int).tolist()
    spans = [slice(lo, hi) for lo, hi in itertools.pairwise(edges) if hi > lo]

    def one(sl):
        return _gauss_newton(images, targets, params[sl], index[sl], target_index[sl], steps, xp)

    # NumPy: the chunks on every core (each chunk's result does not depend on the others)
    for sl, (p_sl, r_sl) in zip(spans, parallel_map(one, spans) if xp is np else map(one, spans)):
        params[sl], resid[sl] = p_sl, r_sl
    return params, resid


_STOP_RTOL = 1e-3  # stop when the model predicts d^2 to fall by less than this fraction (d moves < 5e-4 d)
_STOP_ATOL = 1e-10
_STOP_STEP = (2e-4, 2e-3)  # or when the step is below this in angle (rad) and shift (px)


def _gauss_newton(images, targets, params, index, tindex, steps, xp):
    """Levenberg-Marquardt on the entries still moving (an active set).

    Each round proposes :func:`~iastudio.core.gauss_newton.damped_step` for
    every active entry, from its normal equations
    (:func:`~iastudio.core.warp.warp_residuals`); an entry whose step is tiny, or whose predicted
    decrease of ``d^2`` is below ``_STOP_RTOL d^2``, has converged and stops
    *before* its proposal is warped.  A proposal is kept where it lowers
    ``d^2`` (the damping then falls) and refused otherwise (the damping
    rises; above 1 the entry stops).  At most ``steps`` proposals per entry.
    """
    e = params.shape[0]

    def evaluate(p, rows):  # d^2 and the normal equations (J J^T, J r): the warped images are not kept
        return warp_residuals(images, p, targets, index=index[rows], target_index=tindex[rows], moments=True)

    active = xp.arange(e)
    f, metric, jr = evaluate(params, active)
    f_all = f.copy()
    lam = xp.full(e, 1e-3)
    for _ in range(steps):
        delta, predicted = damped_step(metric, jr, lam[active]) if active.shape[0] else (None, None)
        if delta is not None:
            tiny = (xp.abs(delta[:, 0]) < _STOP_STEP[0]) & (xp.abs(delta[:, 1:]).max(axis=1) < _STOP_STEP[1])
            keep = ~(tiny | (predicted < _STOP_ATOL + _STOP_RTOL * f))
            if not bool(keep.all()):
                active, metric, jr, f, delta = active[keep], metric[keep], jr[keep], f[keep], delta[keep]
        if active.shape[0] == 0:
            break
        cand = params[active] + delta
        f2, metric2, jr2 = evaluate(cand, active)
        better = f2 < f
        params[active] = xp.where(better[:, None], cand, params[active])
        f = xp.where(better, f2, f)
        f_all[active] = f
        # the refused proposals keep their normal equations
        metric = xp.where(better[:, None, None], metric2, metric)
        jr = xp.where(better[:, None], jr2, jr)
        lam[active] = xp.where(better, lam[active] / 3.0, lam[active] * 4.0)
        keep = lam[active] <= 1.0
        if not bool(keep.all()):
            active, metric, jr, f = active[keep], metric[keep], jr[keep], f[keep]
    params[:, 0] = se2.wrap_angle(params[:, 0])
    return params, f_all


def invariant_distances(
    images, *, angle_step: float = 5.0, rotation_range: float | None = None, candidates: int | None = 3,
    refine_steps: int = 6, pairs=None, client=None, on_progress=None, group: str = "se2", estimate: bool = False,
) -> SimilarityResult:
    """Invariant distances and optimal relative transforms for all pairs.

    Parameters
    ----------
    images : ndarray, shape (n, H, W) or (n, H, W, C)
        Unit-norm images on one canvas (NumPy or CuPy; see
        :func:`iastudio.core.preprocess.preprocess`).
    angle_step : float
        Degrees between the grid angles searched globally.
    rotation_range : float, optional
        Degrees; restrict relative rotations to ``[-R, R]``.  ``None``: the
        whole circle (SE(2)).
    candidates : int or None
        Rotation candidates per pair taken from the polar Fourier step (each
        orientation and its 180-degree twin count separately: 3 is the best
        peak, its twin and the next; measured against 6 in ``docs/speed.md``;
        the next searched only at :data:`CANDIDATE_SHARE` of the best's score).
        ``None`` evaluates every grid angle.
    refine_steps : int
        Gauss-Newton steps of the continuous refinement (0 disables it).
    pairs : (ndarray, ndarray), optional
        Align only these pairs (either order; duplicates and ``i == i`` are
        dropped).  The result is then sparse (see :class:`SimilarityResult`).
    client : dask.distributed.Client, optional
        Run the chunks of pairs as tasks on this cluster.
    on_progress : callable(fraction), optional
    group : {"se2", "e2"}
        ``"e2"`` also tries every pair with the first image mirrored.
    estimate : bool
        With ``refine_steps=0`` and SE(2) (else a ValueError): distances of the images binned as the
        translation search bins them, times the bin (exact where it does not), to rank pairs for
        :func:`refine_pairs` (``estimated=True``).

    Returns
    -------
    SimilarityResult

    Notes
    -----
    The global search tries each pair's ``candidates`` grid angles (from the polar Fourier
    magnitudes) and, for each, every shift at once by FFT correlation; on images of at least
    ``BIN_MIN`` (48) px with even sides it correlates 2 x 2-binned copies (``SEARCH_BIN``: a quarter of
    the work, the shift found to about half a pixel), and the residual and the Gauss-Newton
    refinement then use the images themselves (the residual of the binned ones with ``estimate``).

    On a GPU that runs out of memory, a chunk of pairs is retried with half as
    many pairs (and smaller temporary blocks), down to 16 pairs; after that
    the remaining pairs are aligned on the CPU, with a log line and a
    :class:`~iastudio.core.backend.GpuFallbackWarning`.
    """
    _check_options(group, pairs, estimate, refine_steps)
    check_finite(images)
    if group == "e2":
        return _mirror_distances(images, angle_step=angle_step, rotation_range=rotation_range,
                                 candidates=candidates, refine_steps=refine_steps, on_progress=on_progress)
    xp = array_module(images)
    start_warmup(numpy_warp=xp is np)  # from here, not a run's start: see iastudio.core.warmup
    images = xp.asarray(images, dtype=np.float32)
    n = images.shape[0]
    progress = on_progress or (lambda f: None)
    pi_host, pj_host = _pair_list(pairs, n)
    opts = dict(angle_step=angle_step, rotation_range=rotation_range, candidates=candidates,
                refine_steps=refine_steps, estimate=estimate)
    if client is not None and pi_host.size:
        p_all, d_all = _align_on_cluster(client, images, pi_host, pj_host, opts, progress)
    else:
        p_all, d_all = _align_here(images, pi_host, pj_host, opts, progress)
    progress(1.0)
    return _check_distances(_assemble(n, pi_host, pj_host, p_all, d_all, sparse=pairs is not None))


def _check_options(group, pairs, estimate, refine_steps):
    """The checks of :func:`invariant_distances`' options (a ValueError saying what is wrong)."""
    if group not in ("se2", "e2"):
        raise ValueError("group must be 'se2' or 'e2'")
    if group == "e2" and pairs is not None:
        raise ValueError("mirror images (group='e2') are searched on all pairs only; leave pairs=None")
    if estimate and (refine_steps > 0 or group == "e2"):
        raise ValueError("estimate=True reads the grid search's distances of pairs: it needs refine_steps=0 "
                         "and group='se2'")


def _pair_list(pairs, n):
    """The pairs to align as host ``(rows, cols)``, ``rows < cols``, sorted and unique."""
    if pairs is None:
        if n < 2:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.triu_indices(n, 1)
    pi_host = np.asarray(pairs[0], dtype=np.int64).ravel()
    pj_host = np.asarray(pairs[1], dtype=np.int64).ravel()
    if pi_host.shape != pj_host.shape or (pi_host.size and (pi_host.min() < 0 or pj_host.max() >= n)):
        raise ValueError("pairs must be two equal-length arrays of image indices")
    a, b = np.minimum(pi_host, pj_host), np.maximum(pi_host, pj_host)
    key = np.unique(a[a != b] * n + b[a != b])
    return key // n, key % n


def _align_on_cluster(client, images, pi_host, pj_host, opts, progress):
    """The chunks of pairs as Dask tasks: host ``(params (P, 3), distances (P,))``."""
    from .distributed import map_chunks

    n_pairs = pi_host.size
    d_all, p_all = np.zeros(n_pairs), np.zeros((n_pairs, 3))
    # enough tasks to keep every worker busy, each at most _PAIR_CHUNK pairs
    n_tasks = max(1, min(-(-n_pairs // 256), 4 * max(1, len(client.scheduler_info()["workers"]))))
    chunk = max(1, min(_PAIR_CHUNK, -(-n_pairs // n_tasks)))
    spans = [(lo, min(n_pairs, lo + chunk)) for lo in range(0, n_pairs, chunk)]
    args = [(pi_host[lo:hi], pj_host[lo:hi]) for lo, hi in spans]
    for (lo, hi), (params_h, d_h) in map_chunks(client, align_pair_chunk, args, to_host(images, np.float32),
                                                opts, progress=progress):
        d_all[lo:hi], p_all[lo:hi] = d_h, params_h
    return p_all, d_all


_MIN_PAIRS = 16  # a chunk of pairs is not halved below this after running out of GPU memory
_SHARED = threading.local()


@contextlib.contextmanager
def sharing_preparation():
    """Within the block, this thread's :func:`invariant_distances` calls on the same image array share its preparation.

    Aligning pairs first prepares the images (their polar spectra, binned
    copies and padded FFTs: 1.2 s of 4,000 images on two cores); the pruned
    path (:func:`iastudio.core.neighbors.pruned_distances`) aligns two sets of
    pairs of the same images and prepares them once.  The preparation is
    kept while the block runs (and the images with it), then dropped.

    Examples
    --------
    >>> x = np.random.default_rng(0).random((4, 8, 8)).astype(np.float32)
    >>> with sharing_preparation():
    ...     a = invariant_distances(x, pairs=([0], [1]))
    ...     b = invariant_distances(x, pairs=([2], [3]))
    >>> a.distances.shape == b.distances.shape == (4, 4)
    True
    """
    before = getattr(_SHARED, "aligners", None)
    _SHARED.aligners = {} if before is None else before
    try:
        yield
    finally:
        _SHARED.aligners = before


def _align_here(images, pi_host, pj_host, opts, progress):
    """The pairs in chunks on this machine: host ``(params (P, 3), distances (P,))``.

    Every temporary is bounded by the chunk, whatever ``n`` is; a chunk that
    runs out of GPU memory is redone smaller, and the CPU takes over below
    ``_MIN_PAIRS`` pairs (:func:`~iastudio.core.backend.in_blocks`).
    """
    xp = array_module(images)
    n_pairs = pi_host.size
    d_all, p_all = np.zeros(n_pairs), np.zeros((n_pairs, 3))
    if n_pairs == 0:
        return p_all, d_all
    aligners = {}
    shared = getattr(_SHARED, "aligners", None)  # inside sharing_preparation(): this thread's earlier ones

    def aligner(on_host):
        if on_host not in aligners:
            key = (id(images), on_host, tuple(sorted(opts.items())))
            if shared is not None and key in shared and shared[key][0] is images:
                aligners[on_host] = shared[key][1]
            else:
                aligners[on_host] = _Aligner(to_host(images) if on_host else images, **opts)
                if shared is not None:
                    shared[key] = (images, aligners[on_host])  # the images held: their id stays theirs
        return aligners[on_host]

    def work(lo, hi, on_host=False):
        def part(f):
            progress((lo + f * (hi - lo)) / n_pairs)

        p_all[lo:hi], d_all[lo:hi] = aligner(on_host).align(pi_host[lo:hi], pj_host[lo:hi], part)

    in_blocks(n_pairs, min(n_pairs, _PAIR_CHUNK), work, xp=xp, what="invariant similarity", minimum=_MIN_PAIRS,
              on_cpu=None if xp is np else lambda lo, hi: work(lo, hi, on_host=True))
    return p_all, d_all


class _Aligner:
    """One image set prepared for alignment: its polar spectra and zero-padded FFTs, computed once."""

    def __init__(self, images, *, angle_step, rotation_range, candidates, refine_steps, estimate=False):
        xp = array_module(images)
        self.xp, self.images = xp, xp.asarray(images, dtype=np.float32)
        h, w = self.images.shape[1:3]
        self.angles, self.allowed = angle_grid(angle_step, rotation_range)
        self.candidates, self.refine_steps, self.estimate = candidates, refine_steps, estimate
        if xp is np:  # each image's spectrum is its own: the images in one part per thread
            parts = parallel_map(lambda span: _polar_spectra(self.images[span[0]:span[1]], self.angles.size, xp),
                                 _even_spans(0, self.images.shape[0], self.images.shape[0], xp))
            self.q = parts[0] if len(parts) == 1 else np.concatenate(parts)
        else:
            self.q = _polar_spectra(self.images, self.angles.size, xp)
        # the translation search on binned images (SEARCH_BIN), the residual and the refinement on the images
        self.bin = _search_bin(h, w)
        self.coarse = _binned(self.images, self.bin)
        self.p = _fast_len(int(np.ceil(1.5 * max(h, w) / self.bin)))
        self.fv_conj = xp.conj(fft_module(xp).rfft2(self.coarse, s=(self.p, self.p), axes=(1, 2)))

    def align(self, rows, cols, progress=lambda f: None):
        """Host ``(params (P, 3), distances (P,))`` of the pairs ``(rows, cols)``."""
        xp = self.xp
        params, resid = _align_pairs(self.images, self.q, self.fv_conj, xp.asarray(rows), xp.asarray(cols), self.angles,
                                     self.allowed, self.candidates, self.refine_steps, self.p, xp, progress,
                                     coarse=self.coarse, scale=self.bin, estimate=self.estimate)
        return to_host(params, np.float64), np.sqrt(np.maximum(to_host(resid, np.float64), 0.0))


def _assemble(n, pi_host, pj_host, p_all, d_all, *, sparse):
    """The :class:`SimilarityResult`: dense symmetric arrays, or the sparse pair form."""
    if sparse:
        import scipy.sparse as sp

        dist = sp.csr_matrix((np.concatenate([d_all, d_all]),
                              (np.concatenate([pi_host, pj_host]), np.concatenate([pj_host, pi_host]))),
                             shape=(n, n))
        return SimilarityResult(dist, None, (pi_host, pj_host), p_all)
    dist = np.zeros((n, n))
    trans = np.zeros((n, n, 3))
    dist[pi_host, pj_host] = d_all
    dist[pj_host, pi_host] = d_all
    trans[pi_host, pj_host] = p_all
    trans[pj_host, pi_host] = se2.invert(p_all)
    return SimilarityResult(dist, trans)


def join_pair_results(first: SimilarityResult, second: SimilarityResult) -> SimilarityResult:
    """Two results on disjoint pairs of the same images as one (both sparse).

    Examples
    --------
    >>> x = np.random.default_rng(0).random((3, 8, 8)).astype(np.float32)
    >>> a = invariant_distances(x, pairs=([0], [1]), refine_steps=0)
    >>> b = invariant_distances(x, pairs=([1], [2]), refine_steps=0)
    >>> [p.tolist() for p in join_pair_results(b, a).pairs]
    [[0, 1], [1, 2]]
    """
    if not (first.sparse and second.sparse):
        raise ValueError("only results on candidate pairs can be joined")
    n = first.distances.shape[0]
    rows = np.concatenate([first.pairs[0], second.pairs[0]]).astype(np.int64)
    cols = np.concatenate([first.pairs[1], second.pairs[1]]).astype(np.int64)
    key = rows * n + cols
    order = np.argsort(key, kind="stable")
    if np.any(np.diff(key[order]) == 0):
        raise ValueError("the two results share a pair")
    dist = np.concatenate([np.asarray(r.distances[r.pairs[0], r.pairs[1]], dtype=float).ravel()
                           for r in (first, second)])
    params = np.concatenate([first.pair_transforms, second.pair_transforms])
    return _assemble(n, rows[order], cols[order], params[order], dist[order], sparse=True)


def align_pair_chunk(images, rows, cols, *, angle_step=5.0, rotation_range=None, candidates=3, refine_steps=6,
                     estimate=False):
    """Align the pairs ``(rows, cols)`` of ``images``: ``(params (P, 3), distances (P,))`` on the host.

    The unit of work of :func:`invariant_distances` that runs as one task on
    a Dask worker; its result equals the same pairs' part of a local run.
    """
    return _Aligner(images, angle_step=angle_step, rotation_range=rotation_range, candidates=candidates,
                    refine_steps=refine_steps, estimate=estimate).align(rows, cols)


#: The translation search runs on images averaged over ``SEARCH_BIN x SEARCH_BIN`` blocks (a quarter
#: of the pixels: its warps and FFTs cost about a quarter) where both sides are divisible by it and at
#: least ``BIN_MIN`` px (32-px digits binned to 16 px lost 0.06 ARI on a demo set); the shift found is
#: scaled back, and the residual and the Gauss-Newton refinement use the images themselves (the
#: pruned path's refinement steps on the binned images too, the distance read on the images:
#: :func:`refine_pairs`; ``docs/speed.md``, sections 000 and 0000).
SEARCH_BIN = 2
BIN_MIN = 48


def _search_bin(h: int, w: int) -> int:
    """The binning of the translation search (and of the pruned path's refinement) for ``h x w`` images (1: none)."""
    return SEARCH_BIN if h % SEARCH_BIN == 0 and w % SEARCH_BIN == 0 and min(h, w) >= BIN_MIN else 1


def _binned(images, b: int):
    """``images`` averaged over ``b x b`` blocks of pixels.

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
        Floating point, NumPy or CuPy; ``H`` and ``W`` divisible by ``b``.
    b : int
        Block side; 1 returns ``images`` itself.

    Returns
    -------
    ndarray, shape (n, H // b, W // b[, C])
        Block ``(r, c)`` is the mean of pixels ``b r .. b r + b - 1`` by ``b c .. b c + b - 1``, so
        the centre of the image stays the centre (pixel ``(H - 1) / 2`` maps to ``(H / b - 1) / 2``)
        and a turn about it stays a turn about the centre.

    Examples
    --------
    >>> _binned(np.arange(16.0).reshape(1, 4, 4), 2)[0]
    array([[ 2.5,  4.5],
           [10.5, 12.5]])
    """
    if b == 1:
        return images
    h, w = images.shape[1:3]
    if h % b or w % b:
        raise ValueError(f"the images' sides ({h} x {w}) must be divisible by {b}")
    out = images[:, ::b, ::b].copy()  # strided sums: several times faster than a mean over reshaped axes
    for i, j in itertools.product(range(b), repeat=2):
        if i or j:
            out += images[:, i::b, j::b]
    out *= 1.0 / (b * b)
    return out


def _align_pairs(images, q, fv_conj, pi, pj, angles, allowed, candidates, refine_steps, p, xp, progress, *,
                 coarse=None, scale=1, estimate=False):
    """Global search then refinement for the pairs ``(pi, pj)``: ``(params, squared residual)``.

    ``coarse`` (default ``images``): the images the translation search runs on, ``images`` binned by
    ``scale`` (:func:`_binned`); ``fv_conj`` and ``p`` are theirs.  ``estimate`` (with
    ``refine_steps=0``): the squared residual is that of ``coarse`` times ``scale ** 2``
    (``invariant_distances(estimate=True)``).
    """
    n_angles = angles.size
    n_pairs = int(pi.shape[0])
    # 1. rotation candidates
    step = max(1, _block(xp) // (n_angles * q.shape[1]))

    def rotations(lo, hi):
        scores = _rotation_scores(q, pi[lo:hi], pj[lo:hi], n_angles, xp)
        cand = _pick_candidates(scores, allowed, candidates, xp)
        return cand, _worth_searching(xp.take_along_axis(scores, cand, axis=0), cand, allowed, candidates, xp)

    spans = _even_spans(0, n_pairs, step, xp)  # NumPy: the blocks of pairs on every thread
    found = parallel_map(lambda span: rotations(*span), spans) if xp is np else [rotations(*s) for s in spans]
    cand = xp.concatenate([c for c, _ in found], axis=1)  # (K, E)
    searched = xp.flatnonzero(xp.concatenate([m for _, m in found], axis=1).reshape(-1))  # entries (K x E, flat)
    k = cand.shape[0]
    progress(0.1)

    # 2. translations for the candidate angles worth searching (the others keep score -inf)
    ent_pair = xp.tile(xp.arange(n_pairs), k)
    ent_angle = cand.reshape(-1)
    found_score, found_shift = _translation_search(
        fv_conj, images if coarse is None else coarse, pi[ent_pair[searched]], pj[ent_pair[searched]],
        ent_angle[searched], angles, p, xp, lambda f: progress(0.1 + 0.5 * f),
    )
    score = xp.full(ent_angle.shape[0], -xp.inf, dtype=np.float64)
    shift = xp.zeros((ent_angle.shape[0], 2), dtype=np.float64)
    score[searched], shift[searched] = found_score, found_shift * scale  # the binned images' pixels: scale px
    score = xp.where(xp.asarray(allowed)[ent_angle], score, -xp.inf)
    best = xp.argmax(score.reshape(k, n_pairs), axis=0)
    pick = best * n_pairs + xp.arange(n_pairs)
    theta = xp.asarray(angles)[ent_angle[pick]]
    d = shift[pick]  # (row, col) shift of the rotated image
    c, s = xp.cos(theta), xp.sin(theta)
    ty = c * d[:, 0] + s * d[:, 1]
    tx = -s * d[:, 0] + c * d[:, 1]
    params = xp.stack([theta, tx, ty], axis=1)

    # 3. continuous refinement, in blocks for progress reports
    if refine_steps <= 0 and estimate and coarse is not None:  # the binned images' residual, in the images' px
        at = params.copy()
        at[:, 1:] /= scale
        return params, (scale * scale) * _residuals(coarse, at, pi, pj, xp)
    if refine_steps <= 0:
        return params, _residuals(images, params, pi, pj, xp)
    return _refine_in_blocks(images, params, pi, pj, refine_steps, xp, lambda f: progress(0.6 + 0.4 * f))


def _refine_in_blocks(images, params, pi, pj, steps, xp, progress):
    """:func:`refine_alignment` of the pairs ``(pi, pj)`` in blocks, telling ``progress`` after each."""
    out_p, out_r = [], []
    n_pairs = int(params.shape[0])
    blk = max(2048, n_pairs // 10)  # big enough that per-call overhead does not matter
    for lo in range(0, n_pairs, blk):
        sl = slice(lo, lo + blk)
        pp, rr = refine_alignment(images, images, params[sl], index=pi[sl], target_index=pj[sl], steps=steps, xp=xp)
        out_p.append(pp)
        out_r.append(rr)
        progress(min(1.0, (lo + blk) / n_pairs))
    return xp.concatenate(out_p), xp.concatenate(out_r)


def _support(images, xp):
    """``(radii, radii)`` of :func:`~iastudio.core.warp.support_radii` where the compiled loop reads them
    (NumPy greyscale images, ``images`` their own targets); else None."""
    if xp is not np or images.ndim != 3:
        return None
    radii = support_radii(images)
    return radii, radii


def _residuals(images, params, index, tindex, xp):
    """``||v_index o tau - v_tindex||^2`` of every entry, in blocks of bounded memory on every thread.

    On NumPy greyscale images the compiled loop skips the pixels where both images are zero
    (:func:`~iastudio.core.warp.support_radii`, found once for all blocks).
    """
    per = int(np.prod(images.shape[1:]))
    spans = _even_spans(0, int(params.shape[0]), max(1, _block(xp) // (4 * per)), xp)
    support = _support(images, xp) if spans else None

    def one(span):
        lo, hi = span
        return warp_residuals(images, params[lo:hi], images, index=index[lo:hi], target_index=tindex[lo:hi],
                              support=support)

    if not spans:
        return xp.zeros(0, dtype=np.float64)
    return xp.concatenate(parallel_map(one, spans) if xp is np else [one(span) for span in spans])


def refine_pairs(images, result: SimilarityResult, select, *, steps: int = 6, on_progress=None,
                 estimated: bool = False) -> SimilarityResult:
    """``result`` with the pairs ``select`` refined by Gauss-Newton steps from their transforms.

    The pruned path (:func:`iastudio.core.neighbors.pruned_distances`) aligns its pairs
    without the refinement (``refine_steps=0``: the grid search's transform, and with
    ``estimate=True`` only an estimate of the distance there) and then refines only the
    pairs near enough to matter.  Images the translation search bins (:data:`SEARCH_BIN`,
    at least :data:`BIN_MIN` px) are refined on the binned images (a quarter of the
    pixels), and the distance is the residual of the images themselves at the transform
    found: on 6,000 pairs of SNR 1 particles it was that of further steps on the images to
    0.1 % (99th percentile; the same at the 90th), for two thirds of the time.  A refined
    distance is never above the one it started from (a step is kept only where it lowers
    the residual, and where the binned steps led to a worse transform for the images the
    grid search's one stays) -- except with ``estimated=True``, where the distance it
    started from is not known: there the binned steps' transform is taken (on 1,000
    particles and 1,000 digits it was worse for the images on 0-0.3 % of the pairs
    refined, by at most 0.2 %; ``docs/speed.md``, section 000000000).

    Parameters
    ----------
    images : ndarray, shape (n, H, W[, C])
        The images ``result`` was computed on (NumPy or CuPy).
    result : SimilarityResult
        Sparse (computed on ``pairs``).
    select : ndarray of bool, shape (P,)
        Which of ``result.pairs`` to refine.
    steps : int
        Gauss-Newton steps at most (as ``refine_steps`` of :func:`invariant_distances`).
    on_progress : callable(fraction), optional
        Told after each block of pairs (it may raise to stop the work).
    estimated : bool
        ``result``'s distances are estimates (``invariant_distances(..., estimate=True)``):
        the pairs not refined get the residual of the images at their transform too.

    Returns
    -------
    SimilarityResult
        The same pairs; the selected ones with their refined transforms and distances (with
        ``estimated``, the others with the images' residual at their transforms).

    Examples
    --------
    >>> x = np.random.default_rng(0).random((3, 8, 8)).astype(np.float32)
    >>> coarse = invariant_distances(x, pairs=([0, 1], [1, 2]), refine_steps=0)
    >>> fine = refine_pairs(x, coarse, np.array([True, False]))
    >>> bool(fine.distances[0, 1] <= coarse.distances[0, 1]), bool(fine.distances[1, 2] == coarse.distances[1, 2])
    (True, True)
    """
    if not result.sparse:
        raise ValueError("refine_pairs needs a result on candidate pairs (invariant_distances(..., pairs=...))")
    rows, cols = result.pairs
    n = result.distances.shape[0]
    select = np.asarray(select, dtype=bool)
    if select.shape != rows.shape:
        raise ValueError(f"select must have one entry per pair ({rows.size}), got shape {select.shape}")
    dist = np.asarray(result.distances[rows, cols], dtype=np.float64).ravel()
    params = np.array(result.pair_transforms, dtype=np.float64)
    pick = np.flatnonzero(select) if steps > 0 else np.zeros(0, dtype=np.int64)
    progress = on_progress or (lambda f: None)
    xp = array_module(images)
    if pick.size or estimated:
        images = xp.asarray(images, dtype=np.float32)
    if pick.size:
        p, d = _refined(images, rows[pick], cols[pick], params[pick], steps, xp, progress)
        kept = np.ones(pick.size, dtype=bool) if estimated else d <= dist[pick]  # binned steps can lead off
        params[pick[kept]], dist[pick[kept]] = p[kept], d[kept]
    if estimated:  # the others' distances at their transforms, on the images
        rest = np.setdiff1d(np.arange(rows.size), pick, assume_unique=True)
        if rest.size:
            r = _residuals(images, xp.asarray(params[rest]), xp.asarray(rows[rest]), xp.asarray(cols[rest]), xp)
            dist[rest] = np.sqrt(np.maximum(to_host(r, np.float64), 0.0))
    return _check_distances(_assemble(n, rows, cols, params, dist, sparse=True))


def _refined(images, rows, cols, start, steps, xp, progress):
    """Host ``(params, distances)`` of the pairs ``(rows, cols)`` refined from ``start`` (:func:`refine_pairs`)."""
    pi, pj, start = xp.asarray(rows), xp.asarray(cols), xp.asarray(start)
    b = _search_bin(*images.shape[1:3])
    if b > 1:  # the steps on the binned images (a quarter of the pixels), the distance on the images
        start[:, 1:] /= b
        p, _ = _refine_in_blocks(_binned(images, b), start, pi, pj, steps, xp, lambda f: progress(0.8 * f))
        p[:, 1:] *= b
        r = _residuals(images, p, pi, pj, xp)
        progress(1.0)
    else:
        p, r = _refine_in_blocks(images, start, pi, pj, steps, xp, progress)
    return to_host(p, np.float64), np.sqrt(np.maximum(to_host(r, np.float64), 0.0))


MAX_VALUE = 1e12  # larger pixel values overflow the float32 sums of squares and products (inf, then NaN)


def check_finite(images) -> None:
    """Raise ``ValueError`` unless ``images`` is a stack ``(n, H, W)`` or ``(n, H, W, C)`` of finite values
    of at most :data:`MAX_VALUE` in magnitude, naming the first image out of bounds.

    Checked on the values as given (a float64 ``1e300`` is refused, not turned into float32 ``inf``).
    """
    shape = tuple(getattr(images, "shape", ()))
    if len(shape) not in (3, 4) or min(shape[1:3], default=0) < 2:
        raise ValueError(f"images must be an array (n, H, W) or (n, H, W, C) of images of at least 2 x 2 pixels, "
                         f"got shape {shape}")
    xp = array_module(images)
    flat = xp.asarray(images).reshape(shape[0], -1)
    if flat.dtype.kind not in "fiub":
        raise ValueError(f"images must hold real numbers, got {flat.dtype}")
    bad = np.flatnonzero(to_host(~xp.isfinite(flat).all(axis=1)))
    if bad.size:
        raise ValueError(f"image {int(bad[0])} holds NaN or inf values")
    if flat.size and flat.dtype.kind == "f":
        big = np.flatnonzero(to_host((xp.abs(flat) > MAX_VALUE).any(axis=1)))
        if big.size:
            raise ValueError(f"image {int(big[0])} holds values beyond {MAX_VALUE:g} in magnitude; scale the images "
                             "(unit norm is expected, see iastudio.core.preprocess.preprocess)")


def _check_distances(result: SimilarityResult) -> SimilarityResult:
    """Never hand on a non-finite distance: raise instead (an overflow the input checks did not foresee)."""
    d = result.distances
    values = d.data if hasattr(d, "data") and not isinstance(d, np.ndarray) else np.asarray(d)
    if not np.isfinite(values).all():
        raise ValueError("the invariant distances overflowed (non-finite values); scale the images to unit norm")
    return result


def _mirror_distances(images, *, on_progress=None, **options) -> SimilarityResult:
    """E(2): the SE(2) search, then every pair again with the first image flipped; the better wins."""
    xp = array_module(images)
    images = xp.asarray(images, dtype=np.float32)
    n = images.shape[0]
    progress = on_progress or (lambda f: None)
    plain = invariant_distances(images, on_progress=lambda f: progress(0.5 * f), **options)
    if n < 2:
        return plain
    stack = xp.concatenate([images, xp.flip(images, axis=2)])
    # ordered pairs (i, j), i != j: flip(v_i) onto v_j is not the mirror of flip(v_j) onto v_i
    pi_host, pj_host = np.triu_indices(n, 1)
    t_m, d_m = _align_here(stack, pi_host + n, pj_host, options, lambda f: progress(0.5 + 0.5 * f))
    better = d_m < plain.distances[pi_host, pj_host]
    a, b = pi_host[better], pj_host[better]
    dist, trans = plain.distances.copy(), plain.transforms.copy()
    mirrored = np.zeros((n, n), dtype=bool)
    dist[a, b] = dist[b, a] = d_m[better]
    trans[a, b] = t_m[better]
    # flip(v_i) o tau ~ v_j  =>  flip(v_j) o (F tau^-1 F) ~ v_i
    trans[b, a] = se2.mirror_conjugate(se2.invert(t_m[better]))
    mirrored[a, b] = mirrored[b, a] = True
    progress(1.0)
    return _check_distances(SimilarityResult(dist, trans, mirrored=mirrored))


def plain_distances(images) -> np.ndarray:
    """Euclidean distances ``||v_i - v_j||`` between untransformed images (for KA)."""
    xp = array_module(images)
    x = xp.asarray(images, dtype=np.float64).reshape(images.shape[0], -1)
    sq = (x * x).sum(axis=1)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (x @ x.T)
    d = xp.sqrt(xp.maximum(d2, 0.0))
    d = to_host(d, np.float64)
    np.fill_diagonal(d, 0.0)
    return d
