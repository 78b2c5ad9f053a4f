"""The Keys warp as one compiled loop over the output pixels (Numba, CPU).

:func:`iastudio.core.warp.warp` uses this on NumPy arrays when Numba is
installed; the array code in :mod:`iastudio.core.warp` serves CuPy and is the
fall-back.  Both evaluate the same sum, ``sum_kl v[k, l] phi(row - k) phi(col -
l)`` over the 4x4 taps around each sampled point, and the same chain rule for
the derivative; this loop reads each tap once for the value and both
derivatives instead of building the 16 gathered arrays.

Each output row is done in two loops: the first finds every pixel's taps and
weights (coordinates in double precision, weights stored in the images'
dtype), a loop without memory reads that the compiler vectorises; the second
reads the taps, summing each of the 4 tap columns over its rows (4
independent sums on adjacent memory) and then across.  A pixel's value is so
rounded to the images' dtype, as the array code's is, and the two agree to
that rounding; on float32 images this is about 1.4 times faster than
weighing each tap in double precision (docs/speed.md, section 00000000).

:func:`keys_residuals` samples the same way and sums, per entry, the squared
distance to a target and the Gauss-Newton normal equations in double
precision, never storing the warped image
(:func:`iastudio.core.warp.warp_residuals`).
"""
from __future__ import annotations

import math

import numba
import numpy as np

from .keys import KEYS_A, PAD  # PAD: the zero border the caller pads the images with


def _compiled(**options):
    """``numba.njit(nogil=True, cache=True)``; without the on-disk cache where Numba has no folder to write it."""
    def decorate(fn):
        try:
            return numba.njit(nogil=True, cache=True, **options)(fn)
        except RuntimeError:  # "cannot cache function ...: no locator available": compile in each process
            return numba.njit(nogil=True, **options)(fn)
    return decorate


@_compiled(inline="always")
def _tap(x, size):
    """Where the 4 taps of coordinate ``x`` start in the padded image, and the fraction ``x - floor(x)``.

    A point far outside (NaN and huge shifts included) has its taps clipped into the zero border: from
    ``x <= -2`` or ``x >= size + 1`` no tap inside the image weighs (the one at the edge has weight 0).
    NaN keeps a NaN fraction, so its value stays NaN.
    """
    x_floor = np.floor(x)
    clipped = x_floor if x_floor > -3.0 else -3.0  # (NaN: -3)
    clipped = clipped if clipped < size + 1.0 else size + 1.0
    return int(clipped) - 1 + PAD, x - x_floor


@_compiled(inline="always")
def _row_taps(row0, col0, d_row, d_col, h, w, start, weights, gradient):
    """The taps of one output row: pixel ``j`` samples ``(row0 + j d_row, col0 + j d_col)``.

    ``start[0, j]``, ``start[1, j]``: its first tap row and column in the padded image;
    ``weights[0:4, j]`` and ``weights[4:8, j]``: the row and column tap weights; with ``gradient``
    ``weights[8:12, j]`` and ``weights[12:16, j]`` their derivatives.  One loop without branches on
    memory, which the compiler vectorises; the taps are then read pixel by pixel.
    """
    for j in range(w):
        r0, fr = _tap(row0 + j * d_row, h)
        c0, fc = _tap(col0 + j * d_col, w)
        start[0, j] = r0
        start[1, j] = c0
        _weights(weights, 0, j, fr)
        _weights(weights, 4, j, fc)
    if gradient:
        for j in range(w):
            x = row0 + j * d_row
            _derivs(weights, 8, j, x - np.floor(x))
            x = col0 + j * d_col
            _derivs(weights, 12, j, x - np.floor(x))


@_compiled(inline="always")
def _weights(weights, k, j, f):
    """The 4 tap weights (taps ``floor - 1 .. floor + 2``) of fraction ``f`` into ``weights[k:k + 4, j]``."""
    a = KEYS_A
    g = 1.0 - f
    weights[k, j] = a * f * g * g
    weights[k + 1, j] = ((a + 2.0) * f - (a + 3.0)) * f * f + 1.0
    weights[k + 2, j] = ((a + 2.0) * g - (a + 3.0)) * g * g + 1.0
    weights[k + 3, j] = a * g * f * f


@_compiled(inline="always")
def _derivs(weights, k, j, f):
    """d/df of :func:`_weights` into ``weights[k:k + 4, j]``."""
    a = KEYS_A
    g = 1.0 - f
    weights[k, j] = a * (g - 2.0 * f) * g
    weights[k + 1, j] = (3.0 * (a + 2.0) * f - 2.0 * (a + 3.0)) * f
    weights[k + 2, j] = -(3.0 * (a + 2.0) * g - 2.0 * (a + 3.0)) * g
    weights[k + 3, j] = a * (2.0 * g - f) * f


@_compiled(inline="always")
def _columns(img, r0, c0, wt, j, first):
    """The 4 tap columns of pixel ``j`` summed over their rows with the weights ``wt[first:first + 4, j]``."""
    w0, w1, w2, w3 = wt[first, j], wt[first + 1, j], wt[first + 2, j], wt[first + 3, j]
    return (w0 * img[r0, c0] + w1 * img[r0 + 1, c0] + w2 * img[r0 + 2, c0] + w3 * img[r0 + 3, c0],
            w0 * img[r0, c0 + 1] + w1 * img[r0 + 1, c0 + 1] + w2 * img[r0 + 2, c0 + 1] + w3 * img[r0 + 3, c0 + 1],
            w0 * img[r0, c0 + 2] + w1 * img[r0 + 1, c0 + 2] + w2 * img[r0 + 2, c0 + 2] + w3 * img[r0 + 3, c0 + 2],
            w0 * img[r0, c0 + 3] + w1 * img[r0 + 1, c0 + 3] + w2 * img[r0 + 2, c0 + 3] + w3 * img[r0 + 3, c0 + 3])


@_compiled(inline="always")
def _combine(s, wt, j, first):
    """``sum_l wt[first + l, j] s[l]``."""
    return wt[first, j] * s[0] + wt[first + 1, j] * s[1] + wt[first + 2, j] * s[2] + wt[first + 3, j] * s[3]


@_compiled(inline="always")
def _sample(img, start, wt, j):
    """The Keys interpolant at output pixel ``j`` of a row (:func:`_row_taps`), and its 4 tap columns' sums.

    The tap columns are summed over rows first (4 independent sums on adjacent memory), then across.
    """
    s = _columns(img, start[0, j], start[1, j], wt, j, 0)
    return _combine(s, wt, j, 4), s


@_compiled(inline="always")
def _gradient(img, start, wt, j, s):
    """d/drow and d/dcol of the interpolant at pixel ``j``, given its column sums ``s`` (:func:`_sample`)."""
    return _combine(_columns(img, start[0, j], start[1, j], wt, j, 8), wt, j, 4), _combine(s, wt, j, 12)


@_compiled(inline="always")
def _row_start(cos, sin, r, mid_r, mid_c, tx, ty):
    """Where output pixel ``(r, 0)`` (``r`` from the centre row) samples the source; each column further adds
    ``(sin, cos)``."""
    return cos * r - sin * mid_c + mid_r + ty, -sin * r - cos * mid_c + mid_c + tx


@_compiled(inline="always")
def _levers(cos, sin, r, c):
    """``d(row, col)/d theta`` at output pixel ``(r, c)`` (both from the centre)."""
    return -sin * r + cos * c, -cos * r - sin * c


@_compiled(inline="always")
def _row_span(row0, col0, d_row, d_col, r, mid_r, mid_c, w, src_reach, tgt_reach):
    """The pixels ``lo .. hi - 1`` of an output row outside which the target and the warped source are both zero.

    The row's pixel ``j`` lies ``(r, j - mid_c)`` from the target's centre and samples the source
    ``(row0 - mid_r, col0 - mid_c) + j (d_row, d_col)`` from its centre (``(d_row, d_col)`` a unit
    vector).  The target is zero beyond ``tgt_reach`` from its centre, the warped source beyond
    ``src_reach`` (its support radius plus the taps' reach); a NaN transform takes the whole row.
    """
    lo, hi = np.inf, -np.inf
    q = tgt_reach * tgt_reach - r * r
    if q >= 0.0:
        lo, hi = mid_c - math.sqrt(q), mid_c + math.sqrt(q)
    a_r, a_c = row0 - mid_r, col0 - mid_c
    along = a_r * d_row + a_c * d_col
    disc = along * along - (a_r * a_r + a_c * a_c) + src_reach * src_reach
    if disc >= 0.0:
        lo, hi = min(lo, -along - math.sqrt(disc)), max(hi, -along + math.sqrt(disc))
    elif not disc < 0.0:  # NaN
        return 0, w
    if not lo <= hi:
        return 0, 0
    return int(max(np.floor(lo), 0.0)), int(min(np.ceil(hi), w - 1.0)) + 1


@_compiled(inline="always")
def _scratch(w, dtype, gradient):
    """The per-row tap starts and weights :func:`_row_taps` fills."""
    return np.empty((2, w), dtype=np.int64), np.empty((16 if gradient else 8, w), dtype=dtype)


@_compiled()
def keys_warp(padded, params, index, out, grad, gradient):
    """Warp ``padded[index[b]]`` by ``params[b]`` into ``out[b]`` (and ``grad[b]``).

    Parameters
    ----------
    padded : ndarray, shape (N, H + 2 PAD, W + 2 PAD)
        The source images with a zero border of ``PAD`` pixels.
    params : ndarray, shape (B, 3)
        ``(theta, tx, ty)`` per output (see :mod:`iastudio.core.se2`).
    index : ndarray of int, shape (B,)
        Source of each output, ``0 <= index < N`` (not checked here).
    out : ndarray, shape (B, H, W)
    grad : ndarray, shape (B, 3, H, W)
        Written only when ``gradient`` is True.
    """
    h, w = out.shape[1], out.shape[2]
    mid_r, mid_c = (h - 1) / 2.0, (w - 1) / 2.0
    start, wt = _scratch(w, padded.dtype, gradient)
    for b in range(params.shape[0]):
        img = padded[index[b]]
        cos, sin = math.cos(params[b, 0]), math.sin(params[b, 0])
        for i in range(h):
            r = i - mid_r
            row0, col0 = _row_start(cos, sin, r, mid_r, mid_c, params[b, 1], params[b, 2])
            _row_taps(row0, col0, sin, cos, h, w, start, wt, gradient)
            for j in range(w):
                value, s = _sample(img, start, wt, j)
                out[b, i, j] = value
                if gradient:
                    g_r, g_c = _gradient(img, start, wt, j, s)
                    lever_r, lever_c = _levers(cos, sin, r, j - mid_c)
                    grad[b, 0, i, j] = g_r * lever_r + g_c * lever_c
                    grad[b, 1, i, j] = g_c
                    grad[b, 2, i, j] = g_r


@_compiled()
def keys_residuals(padded, params, index, targets, tindex, f, moments, with_moments, src_reach, tgt_reach):
    """``f[b] = ||padded[index[b]] o params[b] - targets[tindex[b]]||^2``, the warped image never stored.

    With ``with_moments`` also the Gauss-Newton normal equations of each entry: ``moments[b]`` holds
    the upper triangle of ``J J^T`` (``tt, tx, ty, xx, xy, yy``) and then ``J r`` (``t, x, y``), for
    ``J`` the derivative by ``(theta, tx, ty)`` and ``r`` the residual.  Each pixel's value in the images'
    precision, every sum over pixels in double precision.

    Parameters
    ----------
    padded : ndarray, shape (N, H + 2 PAD, W + 2 PAD)
    params : ndarray, shape (B, 3)
    index, tindex : ndarray of int, shape (B,)
        Source and target of each entry (not checked here).
    targets : ndarray, shape (M, H, W)
    f : ndarray, shape (B,), float64
    moments : ndarray, shape (B, 9), float64
        Written only when ``with_moments`` is True.
    src_reach, tgt_reach : ndarray, shape (B,)
        How far from its canvas centre each entry's warped source and target can be nonzero
        (``inf``: anywhere); without ``with_moments`` the pixels of a row beyond both are not read
        (they add nothing).
    """
    h, w = targets.shape[1], targets.shape[2]
    mid_r, mid_c = (h - 1) / 2.0, (w - 1) / 2.0
    start, wt = _scratch(w, padded.dtype, with_moments)
    pixels = np.empty((3, w))  # a row's residuals and derivatives (with_moments)
    for b in range(params.shape[0]):
        img, tgt = padded[index[b]], targets[tindex[b]]
        cos, sin = math.cos(params[b, 0]), math.sin(params[b, 0])
        total = 0.0
        sums = np.zeros(9)
        for i in range(h):
            r = i - mid_r
            row0, col0 = _row_start(cos, sin, r, mid_r, mid_c, params[b, 1], params[b, 2])
            # the taps of the whole row: the loop over a span vectorised less well (1.5x slower)
            _row_taps(row0, col0, sin, cos, h, w, start, wt, with_moments)
            if not with_moments:
                lo, hi = _row_span(row0, col0, sin, cos, r, mid_r, mid_c, w, src_reach[b], tgt_reach[b])
                for j in range(lo, hi):
                    res = float(_sample(img, start, wt, j)[0]) - float(tgt[i, j])
                    total += res * res
                continue
            for j in range(w):  # every pixel: skipping here cost more than it saved (docs/speed.md)
                value, s = _sample(img, start, wt, j)
                g_r, g_c = _gradient(img, start, wt, j, s)
                pixels[0, j], pixels[1, j], pixels[2, j] = float(value) - float(tgt[i, j]), g_r, g_c
            total += _add_moments(pixels, cos, sin, r, mid_c, sums)
        f[b] = total
        if with_moments:
            moments[b] = sums


@_compiled(fastmath={"reassoc", "contract", "nsz"})
def _add_moments(pixels, cos, sin, r, mid_c, sums):
    """Add one row's Gauss-Newton sums to ``sums`` (as :func:`keys_residuals`' ``moments[b]``); return its ``sum r^2``.

    ``pixels`` holds the row's residuals, d/drow and d/dcol.  Its own loop, whose sums the compiler may
    reorder (and so vectorise): the tap reads stay in order in the caller.
    """
    total = m_tt = m_tx = m_ty = m_xx = m_xy = m_yy = j_t = j_x = j_y = 0.0
    for j in range(pixels.shape[1]):
        res, g_r, g_c = pixels[0, j], pixels[1, j], pixels[2, j]
        lever_r, lever_c = _levers(cos, sin, r, j - mid_c)
        g_t = g_r * lever_r + g_c * lever_c
        total += res * res
        m_tt += g_t * g_t
        m_tx += g_t * g_c
        m_ty += g_t * g_r
        m_xx += g_c * g_c
        m_xy += g_c * g_r
        m_yy += g_r * g_r
        j_t += g_t * res
        j_x += g_c * res
        j_y += g_r * res
    for k, v in enumerate((m_tt, m_tx, m_ty, m_xx, m_xy, m_yy, j_t, j_x, j_y)):
        sums[k] += v
    return total
