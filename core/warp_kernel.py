"""The Keys warp as one compiled loop over the output pixels (Numba, CPU).

:func:`iastudio.core.warp.warp` uses this on NumPy arrays when Numba is
installed; the array code in :mod:`iastudio.core.warp` serves CuPy and is the
fall-back.  Both evaluate the same sum, ``sum_kl v[k, l] phi(row - k) phi(col -
l)`` over the 4x4 taps around each sampled point, and the same chain rule for
the derivative; this loop reads each tap once for the value and both
derivatives instead of building the 16 gathered arrays, and keeps the
coordinates and the sums in double precision (the array code rounds them to
the images' dtype), so the two agree to the images' rounding.

:func:`keys_residuals` samples the same way and sums, per entry, the squared
distance to a target and the Gauss-Newton normal equations, never storing the
warped image (:func:`iastudio.core.warp.warp_residuals`).
"""
from __future__ import annotations

import math

import numba

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
def _weights(f):
    """The 4 tap weights for fraction ``f`` (taps ``floor - 1 .. floor + 2``)."""
    a = KEYS_A
    g = 1.0 - f
    return (a * f * g * g, ((a + 2.0) * f - (a + 3.0)) * f * f + 1.0,
            ((a + 2.0) * g - (a + 3.0)) * g * g + 1.0, a * g * f * f)


@_compiled(inline="always")
def _derivatives(f):
    """d/df of :func:`_weights`."""
    a = KEYS_A
    g = 1.0 - f
    return (a * (g - 2.0 * f) * g, (3.0 * (a + 2.0) * f - 2.0 * (a + 3.0)) * f,
            -(3.0 * (a + 2.0) * g - 2.0 * (a + 3.0)) * g, a * (2.0 * g - f) * f)


@_compiled(inline="always")
def _dot4(row, c0, w):
    return w[0] * row[c0] + w[1] * row[c0 + 1] + w[2] * row[c0 + 2] + w[3] * row[c0 + 3]


@_compiled(inline="always")
def _sample(img, row, col, h, w, gradient):
    """The Keys interpolant of the padded ``img`` at ``(row, col)``, and (``gradient``) its d/drow and d/dcol."""
    r_floor, c_floor = math.floor(row), math.floor(col)
    fr, fc = row - r_floor, col - c_floor
    # a tap far outside is clipped into the zero border (NaN and huge shifts included)
    r0 = min(max(int(r_floor) - 1, -PAD), h) + PAD if abs(row) < 1e9 else 0
    c0 = min(max(int(c_floor) - 1, -PAD), w) + PAD if abs(col) < 1e9 else 0
    wr, wc = _weights(fr), _weights(fc)
    s = (_dot4(img[r0], c0, wc), _dot4(img[r0 + 1], c0, wc),
         _dot4(img[r0 + 2], c0, wc), _dot4(img[r0 + 3], c0, wc))
    value = wr[0] * s[0] + wr[1] * s[1] + wr[2] * s[2] + wr[3] * s[3]
    if not gradient:
        return value, 0.0, 0.0
    dr, dc = _derivatives(fr), _derivatives(fc)
    g_r = dr[0] * s[0] + dr[1] * s[1] + dr[2] * s[2] + dr[3] * s[3]
    g_c = (wr[0] * _dot4(img[r0], c0, dc) + wr[1] * _dot4(img[r0 + 1], c0, dc)
           + wr[2] * _dot4(img[r0 + 2], c0, dc) + wr[3] * _dot4(img[r0 + 3], c0, dc))
    return value, g_r, g_c


@_compiled(inline="always")
def _source_point(cos, sin, r, c, mid_r, mid_c, tx, ty):
    """Where output pixel ``(r, c)`` (from the centre) samples the source, and ``d(row, col)/d theta``'s lever."""
    return (cos * r + sin * c + mid_r + ty, -sin * r + cos * c + mid_c + tx,
            -sin * r + cos * c, -cos * r - sin * c)


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
    for b in range(params.shape[0]):
        img = padded[index[b]]
        cos, sin = math.cos(params[b, 0]), math.sin(params[b, 0])
        for i in range(h):
            r = i - mid_r
            for j in range(w):
                row, col, lever_r, lever_c = _source_point(cos, sin, r, j - mid_c, mid_r, mid_c, params[b, 1],
                                                           params[b, 2])
                value, g_r, g_c = _sample(img, row, col, h, w, gradient)
                out[b, i, j] = value
                if gradient:
                    grad[b, 0, i, j] = g_r * lever_r + g_c * lever_c
                    grad[b, 1, i, j] = g_c
                    grad[b, 2, i, j] = g_r


@_compiled()
def keys_residuals(padded, params, index, targets, tindex, f, moments, with_moments):
    """``f[b] = ||padded[index[b]] o params[b] - targets[tindex[b]]||^2``, the warped image never stored.

    With ``with_moments`` also the Gauss-Newton normal equations of each entry: ``moments[b]`` holds
    the upper triangle of ``J J^T`` (``tt, tx, ty, xx, xy, yy``) and then ``J r`` (``t, x, y``), for
    ``J`` the derivative by ``(theta, tx, ty)`` and ``r`` the residual.  Every sum in double precision.

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
    """
    h, w = targets.shape[1], targets.shape[2]
    mid_r, mid_c = (h - 1) / 2.0, (w - 1) / 2.0
    for b in range(params.shape[0]):
        img, tgt = padded[index[b]], targets[tindex[b]]
        cos, sin = math.cos(params[b, 0]), math.sin(params[b, 0])
        total = 0.0
        m_tt = m_tx = m_ty = m_xx = m_xy = m_yy = j_t = j_x = j_y = 0.0
        for i in range(h):
            r = i - mid_r
            for j in range(w):
                row, col, lever_r, lever_c = _source_point(cos, sin, r, j - mid_c, mid_r, mid_c, params[b, 1],
                                                           params[b, 2])
                value, g_r, g_c = _sample(img, row, col, h, w, with_moments)
                res = value - tgt[i, j]
                total += res * res
                if with_moments:
                    g_t = g_r * lever_r + g_c * lever_c
                    m_tt += g_t * g_t
                    m_tx += g_t * g_c
                    m_ty += g_t * g_r
                    m_xx += g_c * g_c
                    m_xy += g_c * g_r
                    m_yy += g_r * g_r
                    j_t += g_t * res
                    j_x += g_c * res
                    j_y += g_r * res
        f[b] = total
        if with_moments:
            moments[b, 0], moments[b, 1], moments[b, 2] = m_tt, m_tx, m_ty
            moments[b, 3], moments[b, 4], moments[b, 5] = m_xx, m_xy, m_yy
            moments[b, 6], moments[b, 7], moments[b, 8] = j_t, j_x, j_y
