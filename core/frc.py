"""Fourier ring correlation: how far in spatial frequency two images agree.

The Fourier ring correlation (FRC) of two images ``a`` and ``b`` is, on each ring of spatial
frequencies ``f`` (cycles per pixel) of their 2-D Fourier transforms ``A`` and ``B``,
``FRC(f) = Re sum(A conj(B)) / sqrt(sum(abs(A)**2) sum(abs(B)**2))``, the sums running over the
ring.  It is 1 where the two agree (up to a positive factor per ring), near 0 where they are
independent.  The frequency where it first falls below a threshold -- 0.5, or
0.143 as in cryo-EM -- is the *resolution* at which a class average matches its truth; its inverse
is that resolution in pixels.
"""
from __future__ import annotations

import numpy as np

from .backend import array_module, to_host

__all__ = ["fourier_ring_correlation", "frc_resolution"]


def _rings(shape, xp):
    """Ring index of every FFT bin (integer radius in units of 1 / min(H, W)) and the ring count."""
    h, w = shape
    side = min(h, w)
    fy = xp.fft.fftfreq(h)[:, None]
    fx = xp.fft.fftfreq(w)[None, :]
    ring = xp.rint(xp.sqrt(fx ** 2 + fy ** 2) * side).astype(xp.int64)
    return ring, side // 2 + 1


def fourier_ring_correlation(a, b):
    """The Fourier ring correlation of two images, ring by ring.

    Parameters
    ----------
    a, b : ndarray, shape (H, W)
        Two real images of one shape (NumPy or CuPy).

    Returns
    -------
    frequencies : ndarray, shape (R,)
        Each ring's spatial frequency in cycles per pixel: ``r / min(H, W)`` for ``r = 0 ...
        min(H, W) // 2`` (the last ring is Nyquist, 0.5).  On the host.
    frc : ndarray, shape (R,)
        The correlation on each ring, in ``[-1, 1]``; 0 on a ring where either image has no
        energy.  On the host.

    Examples
    --------
    >>> import numpy as np
    >>> img = np.random.default_rng(0).normal(size=(32, 32))
    >>> freq, frc = fourier_ring_correlation(img, 2 * img)
    >>> bool(np.allclose(frc, 1.0)), float(freq[-1])
    (True, 0.5)
    """
    xp = array_module(a)
    a = xp.asarray(a, dtype=xp.float64)
    b = xp.asarray(b, dtype=xp.float64)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"fourier_ring_correlation needs two 2-D images of one shape, got {a.shape} and {b.shape}")
    fa, fb = xp.fft.fft2(a), xp.fft.fft2(b)
    ring, n_rings = _rings(a.shape, xp)
    keep = ring < n_rings
    idx = ring[keep]
    cross = xp.bincount(idx, weights=xp.real(fa * xp.conj(fb))[keep], minlength=n_rings)
    pa = xp.bincount(idx, weights=(xp.abs(fa) ** 2)[keep], minlength=n_rings)
    pb = xp.bincount(idx, weights=(xp.abs(fb) ** 2)[keep], minlength=n_rings)
    cross, pa, pb = to_host(cross), to_host(pa), to_host(pb)
    denom = np.sqrt(pa * pb)
    tiny = 1e-12 * max(float(denom.max(initial=0.0)), 1e-300)
    frc = np.where(denom > tiny, cross / np.maximum(denom, tiny), 0.0)
    return np.arange(n_rings) / min(a.shape), np.clip(frc, -1.0, 1.0)


def frc_resolution(a, b, *, threshold: float = 0.143):
    """The first spatial frequency where the Fourier ring correlation of two images falls below a threshold.

    Parameters
    ----------
    a, b : ndarray, shape (H, W)
        Two real images of one shape (NumPy or CuPy), e.g. a class average and its truth,
        aligned to each other.
    threshold : float
        The FRC level: 0.5 or 0.143 (the cryo-EM conventions), in ``(0, 1)``.

    Returns
    -------
    frequency : float
        Cycles per pixel: the crossing between the last ring at or above ``threshold`` and the
        first ring below it, interpolated linearly (ring 0, the mean, is not looked at).  0.5
        (Nyquist) when the FRC never falls below the threshold; the first ring's frequency when
        it starts below.
    resolution : float
        ``1 / frequency`` in pixels (2 px at Nyquist): the smaller, the finer the two images agree.

    Examples
    --------
    >>> import numpy as np
    >>> img = np.random.default_rng(0).normal(size=(32, 32))
    >>> frc_resolution(img, img, threshold=0.5)
    (0.5, 2.0)
    """
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must lie in (0, 1), got {threshold}")
    freq, frc = fourier_ring_correlation(a, b)
    below = np.flatnonzero(frc[1:] < threshold) + 1
    if below.size == 0:
        f = float(freq[-1])
    elif below[0] == 1:
        f = float(freq[1])
    else:
        r = int(below[0])
        f0, f1, c0, c1 = freq[r - 1], freq[r], frc[r - 1], frc[r]
        f = float(f0 + (c0 - threshold) / (c0 - c1) * (f1 - f0))
    return f, 1.0 / f
